//! Build script of rrxe-verbs-test: bindgen over `<infiniband/verbs.h>` (types and the
//! exported verbs), plus a tiny C shim (`shim.c`) for the verbs rdma-core 44 only provides as
//! `static inline` functions (`ibv_query_port`, `ibv_create_qp_ex`, ...).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shim.c");
    println!("cargo:rerun-if-changed=/usr/include/infiniband/verbs.h");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    let bindings = bindgen::Builder::default()
        .header_contents("vt_wrapper.h", "#include <infiniband/verbs.h>\n")
        .allowlist_type("ibv_.*")
        .allowlist_function("ibv_.*")
        .allowlist_var("IBV_.*")
        .blocklist_function("ibv_query_port") // the compat symbol; use vt_query_port
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .derive_copy(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate();
    let bindings = match bindings {
        Ok(b) => b,
        Err(e) => fail(&format!(
            "bindgen failed on <infiniband/verbs.h>: {e} (install libibverbs-dev and libclang-dev)"
        )),
    };
    if let Err(e) = bindings.write_to_file(out.join("verbs_sys.rs")) {
        fail(&format!("cannot write verbs_sys.rs: {e}"));
    }

    // The shim: compiled with the system C compiler into a static library.
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let obj = out.join("shim.o");
    let lib = out.join("libvt_shim.a");
    run(Command::new(&cc)
        .args(["-O2", "-fPIC", "-Wall", "-c", "shim.c", "-o"])
        .arg(&obj));
    let _ = std::fs::remove_file(&lib);
    run(Command::new("ar").arg("crs").arg(&lib).arg(&obj));
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=vt_shim");
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}

fn run(cmd: &mut Command) {
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&format!("{cmd:?} failed: {s}")),
        Err(e) => fail(&format!("cannot run {cmd:?}: {e}")),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("\nrrxe-verbs-test build error: {msg}\n");
    std::process::exit(1);
}
