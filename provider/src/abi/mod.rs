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

// Layout facts the provider relies on that the fact-sheet table does not list (values from
// the rdma-core 44 verbs.h and the Linux 6.1 ib_user_verbs.h).
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<ibv_query_device_ex_input>() == 4);
    assert!(offset_of!(ibv_device_attr, fw_ver) == 0);
    assert!(crate::abi::layout::field_size!(ibv_device_attr, fw_ver) == 64);
    assert!(offset_of!(ibv_device_attr_ex, orig_attr) == 0);
    assert!(offset_of!(ib_uverbs_query_device_resp, fw_ver) == 0);
    assert!(offset_of!(ib_uverbs_ex_query_device_resp, base) == 0);
    assert!(offset_of!(ib_uverbs_ex_query_device_resp, comp_mask) == 176);
    assert!(offset_of!(ib_uverbs_ex_query_device_resp, response_length) == 180);
    assert!(offset_of!(ibv_device, name) == 24);
    assert!(offset_of!(verbs_device, sysfs) == 696);
};
