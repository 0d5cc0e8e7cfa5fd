//! Build script of rrxe-verbs-test: a tiny C shim (`shim.c`) for the verbs rdma-core 44 only
//! provides as `static inline` functions (`ibv_query_port`, `ibv_create_qp_ex`, ...). The rest
//! of the verbs API comes from the `rdma-sys` crate.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shim.c");
    println!("cargo:rerun-if-changed=/usr/include/infiniband/verbs.h");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

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
        Ok(s) => fail(&format!("{cmd:?} failed: {s} (install libibverbs-dev)")),
        Err(e) => fail(&format!("cannot run {cmd:?}: {e}")),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("\nrrxe-verbs-test build error: {msg}\n");
    std::process::exit(1);
}
