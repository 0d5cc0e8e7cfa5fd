//! Completion queues (trampolines called by libibverbs).
//!
//! The kernel answers `create_cq` with a completion ring ([`rrxe_uapi::CreateCqResp`]); the
//! provider maps it and `poll_cq` reads completions from it with no syscall. A CQ without a
//! ring (a kernel that announced none) is polled through the kernel (`ibv_cmd_poll_cq`).
//! `req_notify_cq` is `ibv_cmd_req_notify_cq` (`REQ_NOTIFY_CQ`).

use core::ffi::c_int;
use core::mem::{offset_of, size_of_val};
use core::ptr;

use crate::abi::{
    cmd_errno, ibv_cmd_create_cq, ibv_cmd_destroy_cq, ibv_cmd_poll_cq, ibv_cmd_req_notify_cq,
    ibv_cmd_resize_cq, ibv_comp_channel, ibv_context, ibv_cq, ibv_wc, rrxe_create_cq,
    rrxe_create_cq_resp, rrxe_resize_cq, rrxe_resize_cq_resp, set_errno, verbs_cq, CBox, ZeroInit,
};
use crate::log::trace;
use crate::ring::{CqRing, Mapping};

/// The provider's CQ: libibverbs' `verbs_cq` (the application's `ibv_cq` at offset 0). The
/// full `verbs_cq` (`ibv_cq_ex`-sized) is allocated so that libibverbs' `ibv_cq_ex` accessors
/// never read past the object.
#[repr(C)]
pub struct RrxeCq {
    pub vcq: verbs_cq,
    /// The mapped completion ring (`Box::into_raw`), or null.
    ring: *mut CqRing,
}

const _: () = assert!(offset_of!(RrxeCq, vcq) == 0);

// SAFETY: `verbs_cq` is a union of `ibv_cq`/`ibv_cq_ex`: pointers, integers, pthread
// mutex/cond (all-zero = PTHREAD_*_INITIALIZER in glibc) and `Option<fn>`s; no drop glue.
unsafe impl ZeroInit for RrxeCq {}

/// Maps the ring the kernel announced; `None` when it announced none.
fn map_ring(ctx: *mut ibv_context, r: &rrxe_uapi::CreateCqResp) -> Result<Option<Box<CqRing>>, c_int> {
    if r.ring.bytes == 0 {
        return Ok(None);
    }
    // SAFETY: `ctx` is a live context of ours; `cmd_fd` is its uverbs file.
    let fd = unsafe { (*ctx).cmd_fd };
    let len = usize::try_from(r.ring.bytes).map_err(|_| libc::EINVAL)?;
    let m = Mapping::map_shared(fd, r.ring.mmap_key, len)?;
    let ring = CqRing::from_mapping(m, &r.ring).map_err(|e| e.errno())?;
    Ok(Some(Box::new(ring)))
}

impl RrxeCq {
    /// The `ibv_cq` inside `cq`.
    fn ibv_cq(cq: &CBox<RrxeCq>) -> *mut ibv_cq {
        // SAFETY: only computes a field address inside the live allocation (union field
        // `cq` at offset 0; `ManuallyDrop<ibv_cq>` is `repr(transparent)`).
        unsafe { (&raw mut (*cq.as_ptr()).vcq.cq).cast() }
    }
}

/// `verbs_context_ops::create_cq`: `ibv_cmd_create_cq` (ioctl `CQ_CREATE`, write()
/// `CREATE_CQ` fallback). libibverbs (`ibv_create_cq`) then initialises the channel,
/// `cq_context`, event counters, mutex and cond.
///
/// # Safety
/// Called by libibverbs only, with a context of ours and a valid (or null) channel.
pub unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let Some(cq) = CBox::<RrxeCq>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let mut cmd = rrxe_create_cq::default();
    let mut resp = rrxe_create_cq_resp::default();
    // SAFETY: `ctx`/`channel` as received from libibverbs; the CQ is a live zeroed object;
    // `cmd`/`resp` are writable buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_cq(
            ctx,
            cqe,
            channel,
            comp_vector,
            RrxeCq::ibv_cq(&cq),
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        trace!("create_cq(cqe {cqe}, vector {comp_vector}) = {ret}");
        set_errno(cmd_errno(ret));
        return ptr::null_mut();
    }
    match map_ring(ctx, &resp.drv_payload) {
        // SAFETY: `cq` is ours until `into_raw` below.
        Ok(Some(ring)) => unsafe { (*cq.as_ptr()).ring = Box::into_raw(ring) },
        Ok(None) => {}
        Err(e) => {
            trace!("create_cq: mapping the ring failed: {e}");
            // SAFETY: the kernel CQ exists; destroy it again, then report the mapping error.
            unsafe { ibv_cmd_destroy_cq(RrxeCq::ibv_cq(&cq)) };
            set_errno(e);
            return ptr::null_mut();
        }
    }
    let p = RrxeCq::ibv_cq(&cq);
    // SAFETY: `p` is live and filled by the helper.
    let (handle, got) = unsafe { ((*p).handle, (*p).cqe) };
    trace!("create_cq(cqe {cqe}, vector {comp_vector}) = {p:p} (handle {handle}, cqe {got})");
    cq.into_raw();
    p
}

/// `verbs_context_ops::resize_cq`: `ibv_cmd_resize_cq` (`RESIZE_CQ`); updates `cq->cqe`.
///
/// # Safety
/// Called by libibverbs only, with a CQ made by [`create_cq`].
pub unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    let mut cmd = rrxe_resize_cq::default();
    let mut resp = rrxe_resize_cq_resp::default();
    // SAFETY: `cq` is a live CQ of ours; `cmd`/`resp` are writable buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_resize_cq(
            cq,
            cqe,
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    trace!("resize_cq({cq:p}, {cqe}) = {ret}");
    if ret != 0 {
        return ret;
    }
    // The kernel answered with a new ring: map it, then drop the old one.
    // SAFETY: `cq` is a live CQ of ours (offset 0 of `RrxeCq`); libibverbs serialises resize
    // with the application's other calls on this CQ.
    unsafe {
        let rc = cq.cast::<RrxeCq>();
        match map_ring((*cq).context, &resp.drv_payload) {
            Ok(Some(ring)) => {
                let old = core::mem::replace(&mut (*rc).ring, Box::into_raw(ring));
                if !old.is_null() {
                    drop(Box::from_raw(old));
                }
                0
            }
            Ok(None) => 0,
            Err(e) => e,
        }
    }
}

/// `verbs_context_ops::destroy_cq`: `ibv_cmd_destroy_cq` (which also waits for the
/// application to acknowledge the CQ's events), then frees the CQ (kept on failure).
///
/// # Safety
/// Called by libibverbs only, with a CQ made by [`create_cq`].
pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: `cq` is a live CQ of ours.
    let ret = unsafe { ibv_cmd_destroy_cq(cq) };
    trace!("destroy_cq({cq:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `cq` is the `RrxeCq` from `create_cq` (offset 0)
        // and libibverbs does not use it after a successful destroy; its ring pointer is null
        // or from `Box::into_raw`.
        unsafe {
            let rc = cq.cast::<RrxeCq>();
            if !(*rc).ring.is_null() {
                drop(Box::from_raw((*rc).ring));
            }
            drop(CBox::from_raw(rc));
        }
    }
    ret
}

/// `verbs_context_ops::poll_cq` (copied into `ibv_context.ops`): `ibv_cmd_poll_cq`, i.e.
/// `POLL_CQ` in the kernel. Returns the number of completions, or -1.
///
/// # Safety
/// Called by libibverbs/applications only, with a CQ of ours and `wc` valid for
/// `num_entries` entries.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: `cq` is a live CQ of ours (offset 0 of `RrxeCq`).
    let ring = unsafe { (*cq.cast::<RrxeCq>()).ring };
    if !ring.is_null() {
        // SAFETY: the ring lives as long as the CQ; `wc` is valid for `num_entries` entries.
        return unsafe { (*ring).poll_raw(num_entries, wc) };
    }
    // SAFETY: arguments as received; the helper writes at most `num_entries` entries.
    let n = unsafe { ibv_cmd_poll_cq(cq, num_entries, wc) };
    if n < 0 {
        trace!("poll_cq({cq:p}, {num_entries}) = {n}");
    }
    n
}

/// `verbs_context_ops::req_notify_cq` (copied into `ibv_context.ops`):
/// `ibv_cmd_req_notify_cq` (`REQ_NOTIFY_CQ`).
///
/// # Safety
/// Called by libibverbs/applications only, with a CQ of ours.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: `cq` is a live CQ of ours.
    let ret = unsafe { ibv_cmd_req_notify_cq(cq, solicited_only) };
    trace!("req_notify_cq({cq:p}, solicited_only {solicited_only}) = {ret}");
    ret
}
