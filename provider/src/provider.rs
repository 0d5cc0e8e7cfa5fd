//! The provider's registration record and the ELF constructor that hands it to libibverbs
//! (the context ops table is [`crate::context::RRXE_CTX_OPS`]).

use core::ffi::CStr;

use rrxe_uapi::UVERBS_ABI_VERSION;

use crate::abi::{verbs_device_ops, verbs_match_ent};
use crate::{context, device};

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

/// The real path (symlinks resolved) of the libibverbs this library's imports bound to: the
/// object that holds `verbs_register_driver_34`. `Err` is the line to print when it cannot be
/// found.
#[cfg_attr(test, allow(dead_code))]
fn loaded_libibverbs() -> Result<String, String> {
    let pfx = crate::util::PFX;
    // SAFETY: `Dl_info` is plain data (pointers, all-zero valid); `dladdr` only reads the
    // address, which is that of a function in a loaded object (our import, bound at load time
    // with -z now).
    let (r, info) = unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        let f = crate::abi::verbs_register_driver_34 as *const core::ffi::c_void;
        (libc::dladdr(f, &mut info), info)
    };
    if r == 0 || info.dli_fname.is_null() {
        return Err(format!(
            "{pfx}: cannot find the libibverbs that provides verbs_register_driver_34; the rrxe provider is not registered"
        ));
    }
    // SAFETY: `dladdr` set `dli_fname` to a NUL-terminated path owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    Ok(std::fs::canonicalize(&name)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or(name))
}

/// The ELF constructor (`.init_array`), run by `dlopen`: registers the provider, unless the
/// libibverbs it is loaded into is not the rdma-core release its private structures are
/// declared for ([`crate::util::check_libibverbs`]); then it prints one line and registers
/// nothing (libibverbs then reports the device as having no provider). Not in test
/// binaries, which link libibverbs but are not providers.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static RRXE_CTOR: extern "C" fn() = rrxe_register;

#[cfg_attr(test, allow(dead_code))]
extern "C" fn rrxe_register() {
    if let Err(msg) = loaded_libibverbs().and_then(|p| crate::util::check_libibverbs(&p)) {
        crate::log::raw_line(&msg);
        return;
    }
    crate::log::trace!(
        "registering provider rrxe (uverbs ABI {UVERBS_ABI_VERSION}, rrxe uABI {})",
        rrxe_uapi::UABI_VERSION
    );
    // SAFETY: `RRXE_DEVICE_OPS` is an immutable static, so the pointer stays valid for the
    // process lifetime as libibverbs requires; its match table is sentinel-terminated and
    // every callback has the v44 signature (layout checked in abi::layout_v44).
    unsafe { crate::abi::verbs_register_driver_34(&RRXE_DEVICE_OPS) };
}
