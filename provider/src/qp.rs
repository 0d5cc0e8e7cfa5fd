//! Queue pairs (trampolines called by libibverbs).
//!
//! Every QP type goes to the kernel unchanged (the kernel refuses the types it does not
//! implement, e.g. XRC or GSI, with `EOPNOTSUPP`). `post_send`/`post_recv` are deliberately
//! left to libibverbs' `EOPNOTSUPP` dummies until the shared-memory rings exist; see README.md.

use core::ffi::c_int;
use core::mem::{offset_of, size_of_val};
use core::ptr;

use crate::abi::{
    cmd_errno, ibv_cmd_create_qp, ibv_cmd_create_qp_ex2, ibv_cmd_destroy_qp, ibv_cmd_modify_qp,
    ibv_cmd_query_qp, ibv_context, ibv_modify_qp, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
    ibv_qp_init_attr_ex, ibv_query_qp, rrxe_create_qp, rrxe_create_qp_ex, rrxe_create_qp_ex_resp,
    rrxe_create_qp_resp, set_errno, verbs_qp, CBox, ZeroInit,
};
use crate::log::trace;
use crate::util::check_create_qp_ex_mask;

/// The provider's QP: libibverbs' `verbs_qp` (the application's `ibv_qp` at offset 0).
/// Always the full `verbs_qp`: `ibv_qp_to_qp_ex()` reads `verbs_qp::comp_mask` of any QP,
/// which stays 0 (no `VERBS_QP_EX`: the `ibv_wr_*` API needs the rings).
#[repr(C)]
pub struct RrxeQp {
    pub vqp: verbs_qp,
}

const _: () = assert!(offset_of!(RrxeQp, vqp) == 0 && offset_of!(verbs_qp, u) == 0);

// SAFETY: `verbs_qp` holds pointers, integers, pthread mutex/cond (all-zero is their static
// initializer in glibc) and `Option<fn>`s; no drop glue.
unsafe impl ZeroInit for RrxeQp {}

impl RrxeQp {
    /// The `ibv_qp` inside `qp`.
    fn ibv_qp(qp: &CBox<RrxeQp>) -> *mut ibv_qp {
        // SAFETY: only computes a field address inside the live allocation (union field `qp`
        // at offset 0; `ManuallyDrop<ibv_qp>` is `repr(transparent)`).
        unsafe { (&raw mut (*qp.as_ptr()).vqp.u.qp).cast() }
    }

    fn trace_created(what: &str, p: *mut ibv_qp) {
        // SAFETY: `p` is a live QP just filled by the create helper.
        let (handle, qpn, qpt) = unsafe { ((*p).handle, (*p).qp_num, (*p).qp_type) };
        trace!("{what}(type {qpt}) = {p:p} (handle {handle}, qpn {qpn})");
    }
}

/// `verbs_context_ops::create_qp` (`ibv_create_qp`, and `ibv_create_qp_ex` with only
/// `IBV_QP_INIT_ATTR_PD`): `ibv_cmd_create_qp` (ioctl `QP_CREATE`, write() `CREATE_QP`
/// fallback). The helper fills the `ibv_qp` and writes the kernel's capabilities back to
/// `attr->cap`.
///
/// # Safety
/// Called by libibverbs only, with a PD of ours and a valid `attr`.
pub unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    let Some(qp) = CBox::<RrxeQp>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let mut cmd = rrxe_create_qp::default();
    let mut resp = rrxe_create_qp_resp::default();
    // SAFETY: `pd`/`attr` as received from libibverbs; the QP is a live zeroed object;
    // `cmd`/`resp` are writable buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_qp(
            pd,
            RrxeQp::ibv_qp(&qp),
            attr,
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    finish_create("create_qp", ret, qp)
}

/// The common end of both create paths: on success the QP passes to libibverbs, on failure it
/// is freed and `errno` set.
fn finish_create(what: &str, ret: c_int, qp: CBox<RrxeQp>) -> *mut ibv_qp {
    if ret != 0 {
        trace!("{what} = {ret}");
        set_errno(cmd_errno(ret));
        return ptr::null_mut();
    }
    let p = RrxeQp::ibv_qp(&qp);
    RrxeQp::trace_created(what, p);
    qp.into_raw();
    p
}

/// `verbs_context_ops::create_qp_ex` (`ibv_create_qp_ex` with more than
/// `IBV_QP_INIT_ATTR_PD`): `ibv_cmd_create_qp_ex2`. Accepts `PD` and `CREATE_FLAGS` (the kernel
/// judges the flags); everything else fails with `EOPNOTSUPP` (see
/// [`check_create_qp_ex_mask`]).
///
/// # Safety
/// Called by libibverbs only, with a context of ours and a valid `attr`.
pub unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: `attr` is valid (libibverbs' contract).
    let mask = unsafe { (*attr).comp_mask };
    if let Err(e) = check_create_qp_ex_mask(mask) {
        trace!("create_qp_ex(comp_mask {mask:#x}) = {e}");
        set_errno(e);
        return ptr::null_mut();
    }
    let Some(qp) = CBox::<RrxeQp>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let mut cmd = rrxe_create_qp_ex::default();
    let mut resp = rrxe_create_qp_ex_resp::default();
    // SAFETY: `ctx`/`attr` as received from libibverbs; the QP is a live zeroed `verbs_qp`;
    // `cmd`/`resp` are writable buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_qp_ex2(
            ctx,
            &raw mut (*qp.as_ptr()).vqp,
            attr,
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    finish_create("create_qp_ex", ret, qp)
}

/// `verbs_context_ops::modify_qp`: `ibv_cmd_modify_qp` (`MODIFY_QP`). For RoCE the kernel
/// resolves the destination MAC when moving to RTR.
///
/// # Safety
/// Called by libibverbs only, with a QP of ours and a valid `attr`.
pub unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    let mut cmd = ibv_modify_qp::default();
    // SAFETY: `qp`/`attr` as received; `cmd` is a writable buffer of the size passed.
    let ret = unsafe { ibv_cmd_modify_qp(qp, attr, mask, &raw mut cmd, size_of_val(&cmd)) };
    trace!("modify_qp({qp:p}, mask {mask:#x}) = {ret}");
    ret
}

/// `verbs_context_ops::query_qp`: `ibv_cmd_query_qp` (`QUERY_QP`).
///
/// # Safety
/// Called by libibverbs only, with a QP of ours and valid `attr`/`init_attr`.
pub unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let mut cmd = ibv_query_qp::default();
    // SAFETY: arguments as received; `cmd` is a writable buffer of the size passed.
    let ret =
        unsafe { ibv_cmd_query_qp(qp, attr, mask, init_attr, &raw mut cmd, size_of_val(&cmd)) };
    trace!("query_qp({qp:p}, mask {mask:#x}) = {ret}");
    ret
}

/// `verbs_context_ops::destroy_qp`: `ibv_cmd_destroy_qp` (which also waits for the
/// application to acknowledge the QP's async events), then frees the QP (kept on failure).
///
/// # Safety
/// Called by libibverbs only, with a QP made by [`create_qp`] or [`create_qp_ex`].
pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: `qp` is a live QP of ours.
    let ret = unsafe { ibv_cmd_destroy_qp(qp) };
    trace!("destroy_qp({qp:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `qp` is the `RrxeQp` from `create_qp[_ex]`
        // (offset 0) and libibverbs does not use it after a successful destroy.
        drop(unsafe { CBox::from_raw(qp.cast::<RrxeQp>()) });
    }
    ret
}
