//! Build script of the rrxe provider.
//!
//! 1. Version guard: the private libibverbs structures declared in `src/abi/private.rs` are
//!    pinned to rdma-core 44 (libibverbs 1.14.44.0, provider ABI `IBVERBS_PRIVATE_34`). Building
//!    against anything else fails here, with a clear message, instead of producing a provider
//!    that corrupts memory at run time.
//! 2. Bindings for the public headers (`<infiniband/verbs.h>`, `<rdma/ib_user_verbs.h>`) are
//!    generated with bindgen into `$OUT_DIR/verbs_sys.rs` (types only; every function the
//!    provider calls is declared by hand in `src/abi/private.rs`).

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The only libibverbs the private ABI declarations are valid for.
const REQUIRED_LIBIBVERBS: &str = "1.14.44.0";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_SYSROOT_DIR");

    check_libibverbs_version();
    generate_bindings();
}

fn check_libibverbs_version() {
    let out = Command::new("pkg-config")
        .args(["--modversion", "libibverbs"])
        .output();
    let version = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        Ok(o) => fail(&format!(
            "`pkg-config --modversion libibverbs` failed: {}\n\
             Install libibverbs-dev (rdma-core 44, libibverbs {REQUIRED_LIBIBVERBS}).",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => fail(&format!(
            "cannot run pkg-config ({e}); install pkg-config and libibverbs-dev \
             (rdma-core 44, libibverbs {REQUIRED_LIBIBVERBS})."
        )),
    };
    if version != REQUIRED_LIBIBVERBS {
        fail(&format!(
            "libibverbs is {version}, but this provider declares libibverbs' private provider \
             ABI (IBVERBS_PRIVATE_34 structure layouts) exactly as in rdma-core 44 \
             (libibverbs {REQUIRED_LIBIBVERBS}). Building against another version would produce \
             a provider that silently corrupts memory. Build on Debian 12 (rdma-core 44.0) or \
             port src/abi/ (and its layout tables) to the new version first."
        ));
    }
}

fn generate_bindings() {
    println!("cargo:rerun-if-changed=/usr/include/infiniband/verbs.h");
    println!("cargo:rerun-if-changed=/usr/include/rdma/ib_user_verbs.h");

    let bindings = bindgen::Builder::default()
        .header_contents(
            "rrxe_verbs_wrapper.h",
            "#include <infiniband/verbs.h>\n#include <rdma/ib_user_verbs.h>\n",
        )
        // Types only: `ibv_*` (verbs.h), `verbs_context` (the public half of the context),
        // `ib_uverbs_*` (kernel command/response structures). Their dependencies (pthread
        // types, `verbs_ex_private` as an opaque type, ...) come along automatically.
        .allowlist_type("ibv_.*")
        .allowlist_type("verbs_context")
        .allowlist_type("ib_uverbs_.*")
        .allowlist_type("ib_user_verbs_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .derive_copy(true)
        .layout_tests(false) // our own layout tables (src/abi/layout_v44.rs) check what matters
        .generate_comments(false)
        .use_core()
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate();
    let bindings = match bindings {
        Ok(b) => b,
        Err(e) => fail(&format!(
            "bindgen failed on <infiniband/verbs.h> / <rdma/ib_user_verbs.h>: {e}\n\
             Install libibverbs-dev, linux-libc-dev and libclang-dev."
        )),
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Err(e) = bindings.write_to_file(out.join("verbs_sys.rs")) {
        fail(&format!("cannot write verbs_sys.rs: {e}"));
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("\nrrxe-provider build error: {msg}\n");
    println!(
        "cargo:warning=rrxe-provider: {}",
        msg.lines().next().unwrap_or(msg)
    );
    std::process::exit(1);
}
