//! Everything libibverbs and the kernel see of the provider's memory.
//!
//! * [`sys`]: public rdma-core / kernel UAPI types (bindgen, `build.rs`).
//! * [`private`]: libibverbs' private provider ABI (`driver.h`, rdma-core 44), by hand.
//! * [`cmd`]: command buffers for the `ibv_cmd_*` helpers, and rrxe's driver commands.
//! * `layout_v44`: compile-time layout assertions generated from `layout_x86_64_v44.txt`.

pub mod cmd;
pub mod helpers;
mod layout;
pub mod layout_v44;
pub mod private;
pub mod sys;

#[cfg(test)]
mod layout_tests;

pub use cmd::*;
pub use helpers::*;
pub use private::*;
pub use sys::*;
