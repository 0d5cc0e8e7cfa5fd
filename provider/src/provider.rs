//! The provider's registration record, its (extensible) ops table, and the ELF constructor
//! that hands them to libibverbs.

use core::ffi::CStr;

use rrxe_uapi::{SYSFS_UABI_ATTR, UVERBS_ABI_VERSION};

use crate::abi::{verbs_context_ops, verbs_device_ops, verbs_match_ent};
use crate::{ah, context, cq, device, mw, pd, qp, srq};

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

/// The context verbs. Entries left `None` keep libibverbs' dummy (`EOPNOTSUPP`; `cq_event`'s
/// dummy does nothing, which is all a provider without per-CQ event state needs); see
/// README.md for why `create_cq_ex`, `create_srq_ex` and the rest are among them.
///
/// `poll_cq` must never be left to the dummy while CQs can be created: the dummy returns 95,
/// which callers read as "95 completions".
pub static RRXE_CTX_OPS: verbs_context_ops = verbs_context_ops {
    alloc_mw: Some(mw::alloc_mw),
    alloc_pd: Some(pd::alloc_pd),
    attach_mcast: Some(qp::attach_mcast),
    bind_mw: Some(mw::bind_mw),
    create_ah: Some(ah::create_ah),
    create_cq: Some(cq::create_cq),
    create_cq_ex: Some(cq::create_cq_ex),
    create_qp: Some(qp::create_qp),
    create_qp_ex: Some(qp::create_qp_ex),
    create_srq: Some(srq::create_srq),
    dealloc_mw: Some(mw::dealloc_mw),
    dealloc_pd: Some(pd::dealloc_pd),
    dereg_mr: Some(pd::dereg_mr),
    destroy_ah: Some(ah::destroy_ah),
    destroy_cq: Some(cq::destroy_cq),
    destroy_qp: Some(qp::destroy_qp),
    destroy_srq: Some(srq::destroy_srq),
    detach_mcast: Some(qp::detach_mcast),
    free_context: Some(context::free_context),
    modify_qp: Some(qp::modify_qp),
    modify_srq: Some(srq::modify_srq),
    poll_cq: Some(cq::poll_cq),
    post_recv: Some(qp::post_recv),
    post_send: Some(qp::post_send),
    post_srq_recv: Some(srq::post_srq_recv),
    query_device_ex: Some(context::query_device_ex),
    query_port: Some(context::query_port),
    query_qp: Some(qp::query_qp),
    query_srq: Some(srq::query_srq),
    reg_mr: Some(pd::reg_mr),
    req_notify_cq: Some(cq::req_notify_cq),
    resize_cq: Some(cq::resize_cq),
    ..verbs_context_ops::EMPTY
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
