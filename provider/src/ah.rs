//! Address handles (trampolines called by libibverbs).
//!
//! `create_ah` passes the attributes through `ibv_cmd_create_ah` (`CREATE_AH`): for RoCE the
//! kernel validates the GRH and resolves the destination MAC; the provider builds no address
//! vector of its own.

use core::ffi::c_int;
use core::mem::{offset_of, size_of_val};
use core::ptr;

use crate::abi::{
    cmd_errno, ibv_ah, ibv_ah_attr, ibv_cmd_create_ah, ibv_cmd_destroy_ah, ibv_pd,
    rrxe_create_ah_resp, set_errno, CBox, ZeroInit,
};
use crate::log::trace;

/// The provider's AH: libibverbs' `ibv_ah` first (rrxe fields may follow).
#[repr(C)]
pub struct RrxeAh {
    pub ibv_ah: ibv_ah,
}

const _: () = assert!(offset_of!(RrxeAh, ibv_ah) == 0);

// SAFETY: `ibv_ah` holds two pointers and a u32: all-zero is valid; no drop glue.
unsafe impl ZeroInit for RrxeAh {}

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
    // SAFETY: `ah` is live; the helper set the handle.
    trace!("create_ah = {:p} (handle {})", ah.as_ptr(), unsafe {
        (*ah.as_ptr()).ibv_ah.handle
    });
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
