//! Address handles (trampolines called by libibverbs).
//!
//! `create_ah` passes the attributes through `ibv_cmd_create_ah` (`CREATE_AH`): for RoCE the
//! kernel validates the GRH and resolves the destination MAC; the provider builds no address
//! vector of its own. The kernel answers with an AH number ([`rrxe_uapi::CreateAhResp`]),
//! which UD send WQEs carry ([`ah_num_of`]).

use core::ffi::c_int;
use core::mem::{offset_of, size_of_val};
use core::ptr;

use crate::abi::{
    cmd_errno, ibv_ah, ibv_ah_attr, ibv_cmd_create_ah, ibv_cmd_destroy_ah, ibv_context, ibv_pd,
    rrxe_create_ah_resp, set_errno, CBox, ZeroInit,
};
use crate::log::trace;

/// The provider's AH: libibverbs' `ibv_ah` first, then the kernel's AH number.
#[repr(C)]
pub struct RrxeAh {
    pub ibv_ah: ibv_ah,
    /// [`rrxe_uapi::CreateAhResp::ah_num`]; 0 when the kernel announced none.
    pub ah_num: u32,
}

const _: () = assert!(offset_of!(RrxeAh, ibv_ah) == 0);

// SAFETY: `ibv_ah` holds two pointers and a u32, then a u32: all-zero is valid; no drop glue.
unsafe impl ZeroInit for RrxeAh {}

/// The AH number a UD send WQE names `ah` by, or `None`: `ah` is NULL, belongs to another
/// context (the context is checked before anything past the `ibv_ah` is read, so an AH of
/// another provider is never read beyond its `ibv_ah`), or the kernel gave it no number (0).
///
/// # Safety
/// `ah` must be NULL or point to a live `ibv_ah` (the `ibv_post_send` contract for
/// `wr.ud.ah`); `ctx` is the posting QP's context, one of ours.
pub unsafe fn ah_num_of(ah: *mut ibv_ah, ctx: *mut ibv_context) -> Option<u32> {
    if ah.is_null() || !ah.is_aligned() {
        return None;
    }
    // SAFETY: `ah` is a live `ibv_ah` (contract); only its `context` field is read.
    let owner = unsafe { (*ah).context };
    if owner != ctx {
        return None;
    }
    // SAFETY: every AH whose context is one of ours was made by `create_ah` below (libibverbs
    // routes `ibv_create_ah` on our contexts to it), so it is an `RrxeAh` (offset 0).
    let n = unsafe { (*ah.cast::<RrxeAh>()).ah_num };
    (n != 0).then_some(n)
}

/// `verbs_context_ops::create_ah`: `ibv_cmd_create_ah`. libibverbs (`ibv_create_ah`) then
/// sets `context` and `pd`.
///
/// # Safety
/// Called by libibverbs only, with a PD of ours and a valid `attr`.
pub unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let Some(ah) = CBox::<RrxeAh>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let mut resp = rrxe_create_ah_resp::default();
    // SAFETY: `pd`/`attr` as received from libibverbs; the AH is a live zeroed object; `resp`
    // is a writable buffer of the size passed.
    let ret = unsafe {
        ibv_cmd_create_ah(
            pd,
            &raw mut (*ah.as_ptr()).ibv_ah,
            attr,
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        trace!("create_ah = {ret}");
        set_errno(cmd_errno(ret));
        return ptr::null_mut();
    }
    let ah_num = resp.drv_payload.ah_num;
    // SAFETY: `ah` is live and still ours; the helper set the handle and the context.
    let handle = unsafe {
        (*ah.as_ptr()).ah_num = ah_num;
        (*ah.as_ptr()).ibv_ah.handle
    };
    trace!(
        "create_ah = {:p} (handle {handle}, ah_num {ah_num})",
        ah.as_ptr()
    );
    ah.into_raw().cast()
}

/// `verbs_context_ops::destroy_ah`: `ibv_cmd_destroy_ah`, then frees the AH (kept on failure).
///
/// # Safety
/// Called by libibverbs only, with an AH made by [`create_ah`].
pub unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: `ah` is a live AH of ours.
    let ret = unsafe { ibv_cmd_destroy_ah(ah) };
    trace!("destroy_ah({ah:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `ah` is the `RrxeAh` from `create_ah` (offset 0)
        // and libibverbs does not use it after a successful destroy.
        drop(unsafe { CBox::from_raw(ah.cast::<RrxeAh>()) });
    }
    ret
}
