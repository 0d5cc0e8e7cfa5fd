//! The provider's registration record, its (extensible) ops table, and the ELF constructor
//! that hands them to libibverbs.

use core::ffi::CStr;

use rrxe_uapi::{SYSFS_UABI_ATTR, UVERBS_ABI_VERSION};

use crate::abi::{verbs_context_ops, verbs_device_ops, verbs_match_ent};
use crate::{context, device};

/// [`SYSFS_UABI_ATTR`] as a C string (checked equal below).
pub const UABI_ATTR: &CStr = c"rrxe_uabi";

const _: () = {
    let a = UABI_ATTR.to_bytes();
    let b = SYSFS_UABI_ATTR.as_bytes();
    assert!(a.len() == b.len());
    let mut i = 0;
    while i < a.len() {
        assert!(
            a[i] == b[i],
            "UABI_ATTR differs from rrxe_uapi::SYSFS_UABI_ATTR"
        );
        i += 1;
    }
};

/// Only the sentinel: table matching (driver id, name, modalias) never claims anything, and
/// `match_device` decides alone. It must not be NULL: libibverbs 44's driver-id pass walks
/// every provider's table without a NULL check as soon as any device has a driver id.
pub static RRXE_MATCH_TABLE: [verbs_match_ent; 1] = [verbs_match_ent::SENTINEL];

/// What `verbs_register_driver_34` receives; libibverbs keeps the pointer forever.
pub static RRXE_DEVICE_OPS: verbs_device_ops = verbs_device_ops {
    name: c"rrxe".as_ptr(),
    match_min_abi_version: UVERBS_ABI_VERSION,
    match_max_abi_version: UVERBS_ABI_VERSION,
    match_table: RRXE_MATCH_TABLE.as_ptr(),
    static_providers: core::ptr::null_mut(),
    match_device: Some(device::match_device),
    alloc_context: Some(context::alloc_context),
    import_context: None,
    alloc_device: Some(device::alloc_device),
    uninit_device: Some(device::uninit_device),
};

/// The context verbs. Entries left `None` keep libibverbs' dummy (`EOPNOTSUPP`).
///
/// Note for later additions: the dummy `poll_cq` returns 95, which callers read as
/// "95 completions"; it is harmless only while no CQ can be created, so `create_cq` must land
/// together with `poll_cq`.
pub static RRXE_CTX_OPS: verbs_context_ops = verbs_context_ops {
    free_context: Some(context::free_context),
    query_device_ex: Some(context::query_device_ex),
    query_port: Some(context::query_port),
    ..verbs_context_ops::EMPTY
};

/// The ELF constructor (`.init_array`), run by `dlopen`: registers the provider. Not in test
/// binaries, which link libibverbs but are not providers.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static RRXE_CTOR: extern "C" fn() = rrxe_register;

#[cfg_attr(test, allow(dead_code))]
extern "C" fn rrxe_register() {
    crate::log::trace!(
        "registering provider rrxe (uverbs ABI {UVERBS_ABI_VERSION}, rrxe uABI {})",
        rrxe_uapi::UABI_VERSION
    );
    // SAFETY: `RRXE_DEVICE_OPS` is an immutable static, so the pointer stays valid for the
    // process lifetime as libibverbs requires; its match table is sentinel-terminated and
    // every callback has the v44 signature (layout checked in abi::layout_v44).
    unsafe { crate::abi::verbs_register_driver_34(&RRXE_DEVICE_OPS) };
}
