//! Protection domains and memory regions (trampolines called by libibverbs).
//!
//! Both go to the kernel through libibverbs' `ibv_cmd_*` helpers, with no driver-private
//! udata ([`crate::abi::Empty`]).

use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of_val};
use core::ptr;

use crate::abi::{
    cmd_errno, ib_uverbs_advise_mr_advice, ibv_cmd_advise_mr, ibv_cmd_alloc_pd, ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr, ibv_cmd_reg_mr, ibv_context, ibv_mr, ibv_pd, ibv_sge, rrxe_alloc_pd,
    rrxe_alloc_pd_resp, rrxe_reg_mr, rrxe_reg_mr_resp, set_errno, verbs_mr, CBox, ZeroInit,
};
use crate::log::trace;

/// The provider's PD: libibverbs' `ibv_pd` first (rrxe fields may follow).
#[repr(C)]
pub struct RrxePd {
    pub ibv_pd: ibv_pd,
}

/// The provider's MR: libibverbs' `verbs_mr` (with the application's `ibv_mr` at offset 0).
#[repr(C)]
pub struct RrxeMr {
    pub vmr: verbs_mr,
}

// libibverbs hands back the `ibv_pd *` / `verbs_mr *` (`ibv_mr *`) it got from us.
const _: () = assert!(offset_of!(RrxePd, ibv_pd) == 0);
const _: () = assert!(offset_of!(RrxeMr, vmr) == 0 && offset_of!(verbs_mr, ibv_mr) == 0);

// SAFETY: `ibv_pd` is a context pointer and a u32: all-zero is valid; no drop glue.
unsafe impl ZeroInit for RrxePd {}
// SAFETY: `verbs_mr` holds pointers, integers and a C enum whose 0 is `IBV_MR_TYPE_MR`; no
// drop glue.
unsafe impl ZeroInit for RrxeMr {}

/// `verbs_context_ops::alloc_pd`: `ibv_cmd_alloc_pd` (`ALLOC_PD`).
///
/// # Safety
/// Called by libibverbs only, with a context of ours.
pub unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    let Some(pd) = CBox::<RrxePd>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let mut cmd = rrxe_alloc_pd::default();
    let mut resp = rrxe_alloc_pd_resp::default();
    // SAFETY: `ctx` is a live context of ours; `pd` is a live zeroed `ibv_pd`; `cmd` and `resp`
    // are writable buffers of the sizes passed, laid out as `DECLARE_DRV_CMD` requires.
    let ret = unsafe {
        ibv_cmd_alloc_pd(
            ctx,
            &raw mut (*pd.as_ptr()).ibv_pd,
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        trace!("alloc_pd = {ret}");
        set_errno(cmd_errno(ret));
        return ptr::null_mut(); // `pd` is freed here
    }
    // SAFETY: `pd` is live; the helper set the handle.
    trace!("alloc_pd = {:p} (handle {})", pd.as_ptr(), unsafe {
        (*pd.as_ptr()).ibv_pd.handle
    });
    pd.into_raw().cast()
}

/// `verbs_context_ops::dealloc_pd`: `ibv_cmd_dealloc_pd`, then frees the PD (kept if the
/// kernel refuses, e.g. `EBUSY` while objects still use it).
///
/// # Safety
/// Called by libibverbs only, with a PD made by [`alloc_pd`].
pub unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: `pd` is a live PD of ours.
    let ret = unsafe { ibv_cmd_dealloc_pd(pd) };
    trace!("dealloc_pd({pd:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `pd` came from `alloc_pd` (`into_raw`, the PD at
        // offset 0) and libibverbs does not use it after a successful dealloc.
        drop(unsafe { CBox::from_raw(pd.cast::<RrxePd>()) });
    }
    ret
}

/// `verbs_context_ops::reg_mr`: `ibv_cmd_reg_mr` (`REG_MR`). `access` is passed through
/// unchanged: the kernel validates it. (libibverbs 44 has already cleared the optional bits,
/// `IBV_ACCESS_RELAXED_ORDERING` among them, unless the kernel reported
/// `IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS` in `GET_CONTEXT`; otherwise they reach the
/// kernel, which must tolerate them.)
///
/// # Safety
/// Called by libibverbs only, with a PD of ours.
pub unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    let Some(mr) = CBox::<RrxeMr>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let mut cmd = rrxe_reg_mr::default();
    let mut resp = rrxe_reg_mr_resp::default();
    // SAFETY: `pd` is a live PD of ours; `mr` is a live zeroed `verbs_mr`; `cmd`/`resp` are
    // writable buffers of the sizes passed. `addr`/`length` are only forwarded to the kernel.
    let ret = unsafe {
        ibv_cmd_reg_mr(
            pd,
            addr,
            length,
            hca_va,
            access,
            &raw mut (*mr.as_ptr()).vmr,
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        trace!("reg_mr({addr:p}, {length:#x}, iova {hca_va:#x}, access {access:#x}) = {ret}");
        set_errno(cmd_errno(ret));
        return ptr::null_mut();
    }
    // SAFETY: `mr` is live and filled by the helper.
    let m = unsafe { &(*mr.as_ptr()).vmr.ibv_mr };
    trace!(
        "reg_mr({addr:p}, {length:#x}, iova {hca_va:#x}, access {access:#x}) = {:p} (handle {} lkey {:#x} rkey {:#x})",
        mr.as_ptr(),
        m.handle,
        m.lkey,
        m.rkey
    );
    mr.into_raw().cast()
}

/// `verbs_context_ops::advise_mr` (`ibv_advise_mr`): the kernel prefetches the ranges of
/// on-demand-paging MRs (`ibv_cmd_advise_mr`). Returns 0 or a positive errno, as
/// `ibv_advise_mr` does.
///
/// # Safety
/// Called by libibverbs only, with a PD of ours and `num_sge` SGEs at `sg_list`.
pub unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    // SAFETY: per the contract above; libibverbs' helper reads the SGEs and the PD's handle.
    let ret = unsafe { ibv_cmd_advise_mr(pd, advice, flags, sg_list, num_sge) };
    trace!("advise_mr({pd:p}, advice {advice}, flags {flags:#x}, {num_sge} SGEs) = {ret}");
    ret
}

/// `verbs_context_ops::dereg_mr`: `ibv_cmd_dereg_mr`, then frees the MR (kept on failure).
///
/// # Safety
/// Called by libibverbs only, with an MR made by [`reg_mr`].
pub unsafe extern "C" fn dereg_mr(vmr: *mut verbs_mr) -> c_int {
    // SAFETY: `vmr` is a live MR of ours.
    let ret = unsafe { ibv_cmd_dereg_mr(vmr) };
    trace!("dereg_mr({vmr:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `vmr` is the `RrxeMr` from `reg_mr` (offset 0),
        // unused by libibverbs after a successful dereg.
        drop(unsafe { CBox::from_raw(vmr.cast::<RrxeMr>()) });
    }
    ret
}
