//! The provider's context object and the context-level verbs (trampolines called by
//! libibverbs).

use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of, size_of_val};
use core::ptr;

use rrxe_uapi::{AllocUcontextCmd, LAYOUT_FINGERPRINT, UABI_VERSION};

use crate::abi::{
    _verbs_init_and_alloc_context, errno, ib_uverbs_ex_query_device_resp, ibv_cmd_get_context,
    ibv_cmd_query_device_any, ibv_cmd_query_port, ibv_context, ibv_device, ibv_device_attr_ex,
    ibv_port_attr, ibv_query_device_ex_input, ibv_query_port, read_ibdev_attr, rrxe_get_context,
    rrxe_get_context_resp, set_errno, verbs_context, verbs_context_ops, verbs_device,
    verbs_set_ops, verbs_uninit_context, RDMA_DRIVER_UNKNOWN,
};
use crate::device::UABI_ATTR;
use crate::log::{raw_line, trace};
use crate::util::{
    c_chars_to_string, check_get_context, check_sysfs_uabi, format_fw_ver, write_c_string,
};
use crate::{ah, cq, mw, pd, qp, qp_ex, srq};

/// The provider's context: libibverbs' `verbs_context` (with the `ibv_context` the
/// application sees inside it), then rrxe's own fields. Allocated (zeroed) by
/// `_verbs_init_and_alloc_context`, freed with `free` in [`free_context`].
#[repr(C)]
pub struct RrxeContext {
    pub vctx: verbs_context,
    /// The uABI version the kernel confirmed in `GET_CONTEXT`.
    pub uabi_version: u32,
    /// Largest inline payload of a send WQE, from `GET_CONTEXT`.
    pub max_inline_data: u32,
}

const _: () = assert!(offset_of!(RrxeContext, vctx) == 0);

impl RrxeContext {
    /// The `RrxeContext` containing `ctx`.
    ///
    /// # Safety
    /// `ctx` must be the `ibv_context` of a context created by [`alloc_context`].
    pub unsafe fn from_ibv_context(ctx: *mut ibv_context) -> *mut RrxeContext {
        // SAFETY: per the contract `ctx` is `&(*rrxe_ctx).vctx.context`; stepping back by the
        // field offsets stays inside that allocation.
        unsafe {
            ctx.byte_sub(offset_of!(verbs_context, context) + offset_of!(RrxeContext, vctx))
                .cast()
        }
    }
}

/// `verbs_device_ops::alloc_context`: opens a context on `cmd_fd` (whose ownership passes to
/// us: it is closed on every failure path).
///
/// # Safety
/// Called by libibverbs only, with one of this provider's devices (see [`crate::device`]).
pub unsafe extern "C" fn alloc_context(
    ibdev: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    // SAFETY: libibverbs passes one of our devices: an `RrxeDevice`, whose `verbs_device`
    // (and `ibv_device`) sit at offset 0; its `name` and `sysfs` were filled after
    // `alloc_device`.
    let (name, sysfs) = unsafe {
        let vdev = ibdev.cast::<verbs_device>();
        (c_chars_to_string(&(*ibdev).name), (*vdev).sysfs)
    };

    // 1. The uABI the module publishes in sysfs must be ours.
    let mut buf = [0u8; 64];
    // SAFETY: `sysfs` is null or the device's valid `verbs_sysfs_dev`.
    let attr = unsafe { read_ibdev_attr(sysfs, UABI_ATTR, &mut buf) };
    if let Err(problem) = check_sysfs_uabi(attr) {
        raw_line(&problem.message(&name));
        // SAFETY: we own `cmd_fd` and nothing else refers to it.
        unsafe { libc::close(cmd_fd) };
        set_errno(libc::EPROTO);
        return ptr::null_mut();
    }

    // 2. libibverbs' half of the context.
    // SAFETY: `ibdev` is valid; the size and the (pointer-encoded) offset describe
    // `RrxeContext`, whose all-zero value is valid. Closes `cmd_fd` on failure.
    let ctx = unsafe {
        _verbs_init_and_alloc_context(
            ibdev,
            cmd_fd,
            size_of::<RrxeContext>(),
            offset_of!(RrxeContext, vctx) as *mut verbs_context,
            RDMA_DRIVER_UNKNOWN,
        )
    }
    .cast::<RrxeContext>();
    if ctx.is_null() {
        trace!(
            "alloc_context({name}): _verbs_init_and_alloc_context failed, errno {}",
            errno()
        );
        return ptr::null_mut();
    }
    // SAFETY: `ctx` is a live allocation of an `RrxeContext`.
    let vctx = unsafe { &raw mut (*ctx).vctx };

    // 3. GET_CONTEXT, with rrxe's uABI version as driver data.
    let mut cmd = rrxe_get_context {
        drv_payload: AllocUcontextCmd {
            uabi_version: UABI_VERSION,
            layout: LAYOUT_FINGERPRINT,
        },
        ..Default::default()
    };
    let mut resp = rrxe_get_context_resp::default();
    // SAFETY: `vctx` was initialised by `_verbs_init_and_alloc_context`; `cmd` and `resp` are
    // writable buffers of the sizes passed, laid out as `DECLARE_DRV_CMD` requires.
    let ret = unsafe {
        ibv_cmd_get_context(
            vctx,
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    let drv = resp.drv_payload;
    if let Err(e) = check_get_context(ret, &drv) {
        if let Some(problem) = &e.problem {
            raw_line(&problem.message(&name));
        }
        trace!(
            "alloc_context({name}): GET_CONTEXT ret={ret} resp={drv:?} -> errno {}",
            e.errno
        );
        // SAFETY: `vctx` is initialised and not yet handed out; `ctx` came from calloc.
        unsafe {
            verbs_uninit_context(vctx);
            libc::free(ctx.cast());
        }
        set_errno(e.errno);
        return ptr::null_mut();
    }

    // 4. Our fields and verbs.
    // SAFETY: `ctx` is live and not yet shared; `RRXE_CTX_OPS` is a static.
    unsafe {
        (*ctx).uabi_version = drv.uabi_version;
        (*ctx).max_inline_data = drv.max_inline_data;
        verbs_set_ops(vctx, &RRXE_CTX_OPS);
    }
    trace!(
        "alloc_context({name}) = {ctx:p}: uabi_version={} max_inline_data={}",
        drv.uabi_version,
        drv.max_inline_data
    );
    vctx
}

/// `verbs_context_ops::free_context`.
///
/// # Safety
/// Called by libibverbs only, with a context made by [`alloc_context`], exactly once.
pub unsafe extern "C" fn free_context(ibctx: *mut ibv_context) {
    // SAFETY: libibverbs only calls this with the context `alloc_context` returned.
    let ctx = unsafe { RrxeContext::from_ibv_context(ibctx) };
    trace!("free_context({ctx:p})");
    // SAFETY: the context is being closed, nothing uses it any more; `ctx` came from calloc.
    unsafe {
        verbs_uninit_context(&raw mut (*ctx).vctx);
        libc::free(ctx.cast());
    }
}

/// `verbs_context_ops::query_device_ex` (also serves `ibv_query_device` with
/// `attr_size == sizeof(struct ibv_device_attr)`).
///
/// # Safety
/// Called by libibverbs only: a context of ours, and `attr` valid for `attr_size` bytes.
pub unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let mut resp = ib_uverbs_ex_query_device_resp::default();
    let mut resp_size = size_of_val(&resp);
    // SAFETY: arguments as received from libibverbs; `resp`/`resp_size` are local buffers of
    // the advertised size.
    let ret =
        unsafe { ibv_cmd_query_device_any(ctx, input, attr, attr_size, &mut resp, &mut resp_size) };
    if ret != 0 {
        trace!("query_device_ex(attr_size={attr_size}) = {ret}");
        return ret;
    }
    let fw_ver = format_fw_ver(resp.base.fw_ver);
    // SAFETY: on success `ibv_cmd_query_device_any` has checked that `attr_size` covers at
    // least `orig_attr`, which holds `fw_ver`, and `attr` is the caller's valid buffer.
    unsafe { write_c_string(&mut (*attr).orig_attr.fw_ver, &fw_ver) };
    trace!("query_device_ex(attr_size={attr_size}) resp_size={resp_size} fw_ver={fw_ver}");
    0
}

/// `verbs_context_ops::query_port`.
///
/// # Safety
/// Called by libibverbs only: a context of ours, and a valid, zeroed `port_attr`.
pub unsafe extern "C" fn query_port(
    ctx: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    let mut cmd = ibv_query_port::default();
    // SAFETY: arguments as received from libibverbs; `cmd` is a writable scratch buffer of
    // the size passed.
    let ret = unsafe { ibv_cmd_query_port(ctx, port_num, port_attr, &mut cmd, size_of_val(&cmd)) };
    trace!("query_port({port_num}) = {ret}");
    ret
}

/// The context verbs. Entries left `None` keep libibverbs' dummy (`EOPNOTSUPP`; `cq_event`'s
/// dummy does nothing, which is all a provider without per-CQ event state needs); see
/// README.md for why `create_cq_ex`, `create_srq_ex` and the rest are among them.
///
/// `poll_cq` must never be left to the dummy while CQs can be created: the dummy returns 95,
/// which callers read as "95 completions".
pub static RRXE_CTX_OPS: verbs_context_ops = verbs_context_ops {
    advise_mr: Some(pd::advise_mr),
    alloc_mw: Some(mw::alloc_mw),
    alloc_pd: Some(pd::alloc_pd),
    attach_mcast: Some(qp::attach_mcast),
    bind_mw: Some(mw::bind_mw),
    create_ah: Some(ah::create_ah),
    create_cq: Some(cq::create_cq),
    create_cq_ex: Some(cq::create_cq_ex),
    create_qp: Some(qp::create_qp),
    create_qp_ex: Some(qp_ex::create_qp_ex),
    create_srq: Some(srq::create_srq),
    dealloc_mw: Some(mw::dealloc_mw),
    dealloc_pd: Some(pd::dealloc_pd),
    dereg_mr: Some(pd::dereg_mr),
    destroy_ah: Some(ah::destroy_ah),
    destroy_cq: Some(cq::destroy_cq),
    destroy_qp: Some(qp::destroy_qp),
    destroy_srq: Some(srq::destroy_srq),
    detach_mcast: Some(qp::detach_mcast),
    free_context: Some(free_context),
    modify_qp: Some(qp::modify_qp),
    modify_srq: Some(srq::modify_srq),
    poll_cq: Some(cq::poll_cq),
    post_recv: Some(qp::post_recv),
    post_send: Some(qp::post_send),
    post_srq_recv: Some(srq::post_srq_recv),
    query_device_ex: Some(query_device_ex),
    query_port: Some(query_port),
    query_qp: Some(qp::query_qp),
    query_srq: Some(srq::query_srq),
    reg_mr: Some(pd::reg_mr),
    req_notify_cq: Some(cq::req_notify_cq),
    resize_cq: Some(cq::resize_cq),
    ..verbs_context_ops::EMPTY
};
