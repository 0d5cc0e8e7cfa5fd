//! rrxe-verbs-test's library: the guest-side libibverbs helpers its programs share (the
//! verbs bindings, owning wrappers, the data-path and robustness helpers, the PASS/FAIL
//! report). Each program in `src/main.rs` and `src/bin/` links it.

pub mod dp;
pub mod ffi;
pub mod pair;
pub mod robust;
pub mod util;
pub mod verbs;
