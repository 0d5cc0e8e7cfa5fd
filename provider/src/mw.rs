//! Memory windows (trampolines called by libibverbs): `alloc_mw`/`dealloc_mw` through
//! libibverbs' `ibv_cmd_*` helpers, and the Bind MW verb (`ibv_bind_mw`, type-1 windows),
//! which posts a bind WQE on the QP's send ring as rdma-core's rxe provider does. Type-2
//! windows are bound by `IBV_WR_BIND_MW` work requests (`post_send`, `ibv_wr_bind_mw`). The
//! kernel checks every rule and completes a refused bind with `IBV_WC_MW_BIND_ERR`.

use core::ffi::c_int;
use core::mem::size_of_val;
use core::ptr;

use crate::abi::{
    cmd_errno, ib_uverbs_alloc_mw_resp, ibv_alloc_mw, ibv_cmd_alloc_mw, ibv_cmd_dealloc_mw, ibv_mw,
    ibv_mw_bind, ibv_mw_type, ibv_pd, ibv_qp, ibv_send_wr, set_errno, CBox, ZeroInit,
    IBV_WR_BIND_MW,
};
use crate::log::trace;
use crate::qp::{send_state_ok, QpHooks, RrxeQp};

/// The provider's window: libibverbs' `ibv_mw` (rrxe fields may follow).
#[repr(C)]
pub struct RrxeMw {
    pub ibv_mw: ibv_mw,
}

// libibverbs hands back the `ibv_mw *` it got from us.
const _: () = assert!(core::mem::offset_of!(RrxeMw, ibv_mw) == 0);

// SAFETY: `ibv_mw` holds pointers, integers and a C enum whose 0 is no variant libibverbs reads
// before `alloc_mw` set it; no drop glue.
unsafe impl ZeroInit for RrxeMw {}

/// `ibv_inc_rkey`: the next key byte, same index.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// `verbs_context_ops::alloc_mw`: `ibv_cmd_alloc_mw` (`ALLOC_MW`); the kernel refuses a type
/// other than 1 and 2.
///
/// # Safety
/// Called by libibverbs only, with a PD of ours.
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, ty: ibv_mw_type) -> *mut ibv_mw {
    let Some(mw) = CBox::<RrxeMw>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let mut cmd = ibv_alloc_mw::default();
    let mut resp = ib_uverbs_alloc_mw_resp::default();
    // SAFETY: `pd` is a live PD of ours; `mw` a live zeroed `ibv_mw`; `cmd` and `resp` are
    // writable buffers of the sizes passed (no driver data).
    let ret = unsafe {
        ibv_cmd_alloc_mw(
            pd,
            ty,
            &raw mut (*mw.as_ptr()).ibv_mw,
            &raw mut cmd,
            size_of_val(&cmd),
            &raw mut resp,
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        trace!("alloc_mw(type {ty}) = {ret}");
        set_errno(cmd_errno(ret));
        return ptr::null_mut();
    }
    // SAFETY: `mw` is live and filled by the helper.
    let rkey = unsafe { (*mw.as_ptr()).ibv_mw.rkey };
    trace!("alloc_mw(type {ty}) = {:p} (rkey {rkey:#x})", mw.as_ptr());
    mw.into_raw().cast()
}

/// `verbs_context_ops::dealloc_mw`: `ibv_cmd_dealloc_mw` (the kernel invalidates the window),
/// then frees it (kept on failure).
///
/// # Safety
/// Called by libibverbs only, with a window made by [`alloc_mw`].
pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: `mw` is a live window of ours.
    let ret = unsafe { ibv_cmd_dealloc_mw(mw) };
    trace!("dealloc_mw({mw:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `mw` is the `RrxeMw` from `alloc_mw` (offset 0),
        // unused by libibverbs after a successful dealloc.
        drop(unsafe { CBox::from_raw(mw.cast::<RrxeMw>()) });
    }
    ret
}

/// `verbs_context_ops::bind_mw` (`ibv_bind_mw`; libibverbs has checked that the window is of
/// type 1, that an MR is given when a range is, and that the MR's PD is the window's): posts
/// the bind with the window's next rkey (`ibv_inc_rkey`) on the QP's send ring, and on success
/// sets `mw->rkey` to it, as rdma-core's rxe does (the bind completes later, in SQ order; a
/// refused bind completes with `IBV_WC_MW_BIND_ERR`). `EINVAL` before RTS, `EOPNOTSUPP`
/// without a send ring, `ENOMEM` when the ring is full.
///
/// # Safety
/// Called by libibverbs only, with a QP and a window of ours and a valid `mw_bind` whose MR is
/// live or NULL.
pub unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    if mw.is_null() || mw_bind.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: `qp` is a live QP of ours (offset 0 of `RrxeQp`); `mw` and `mw_bind` are live
    // (contract).
    let (state, sq, b, rkey) =
        unsafe { ((*qp).state, (*qp.cast::<RrxeQp>()).sq, *mw_bind, (*mw).rkey) };
    if !send_state_ok(state) {
        return libc::EINVAL;
    }
    if sq.is_null() {
        return libc::EOPNOTSUPP;
    }
    let new_rkey = inc_rkey(rkey);
    // SAFETY: an all-zero `ibv_send_wr` is valid (pointers NULL, integers 0).
    let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
    wr.wr_id = b.wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = b.send_flags;
    wr.__bindgen_anon_2.bind_mw.mw = mw;
    wr.__bindgen_anon_2.bind_mw.rkey = new_rkey;
    wr.__bindgen_anon_2.bind_mw.bind_info = b.bind_info;
    // SAFETY: `qp` is live for this call.
    let mut hooks = unsafe { QpHooks::new(qp) };
    // SAFETY: the ring lives as long as the QP; `wr` is one WR with no SGE whose window is
    // live and whose MR is live or NULL (contract).
    let ret = unsafe { (*sq).post_bind_verb(&mut wr, &mut hooks) };
    trace!("bind_mw({qp:p}, {mw:p}, rkey {rkey:#x} -> {new_rkey:#x}) = {ret}");
    if ret == 0 {
        // SAFETY: `mw` is live; the application reads the new rkey from it.
        unsafe { (*mw).rkey = new_rkey };
    }
    ret
}
