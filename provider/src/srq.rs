//! Shared receive queues (trampolines called by libibverbs).
//!
//! `create_srq` is `ibv_cmd_create_srq` (ioctl `SRQ_CREATE`, write() `CREATE_SRQ` fallback);
//! the kernel answers with the SRQ's receive ring ([`rrxe_uapi::CreateSrqResp`]), which the
//! provider maps and `post_srq_recv` fills with no syscall (an [`RqRing`], as a QP's RQ). A
//! ring the kernel did not announce (`bytes == 0`) leaves `post_srq_recv` unsupported
//! (`EOPNOTSUPP`). `modify_srq`, `query_srq` and `destroy_srq` are the `ibv_cmd_*` helpers.
//! `create_srq_ex` (XRC and tag-matching SRQs) is not offered.

use core::ffi::c_int;
use core::mem::{offset_of, size_of_val};
use core::ptr;

use crate::abi::{
    cmd_errno, ibv_cmd_create_srq, ibv_cmd_destroy_srq, ibv_cmd_modify_srq, ibv_cmd_query_srq,
    ibv_context, ibv_modify_srq, ibv_pd, ibv_query_srq, ibv_recv_wr, ibv_srq, ibv_srq_attr,
    ibv_srq_init_attr, rrxe_create_srq, rrxe_create_srq_resp, set_errno, verbs_srq, CBox, ZeroInit,
};
use crate::log::trace;
use crate::ring::{Mapping, RqRing};

/// The provider's SRQ: libibverbs' `verbs_srq` (the application's `ibv_srq` at offset 0),
/// then the ring.
#[repr(C)]
pub struct RrxeSrq {
    pub vsrq: verbs_srq,
    /// The mapped receive ring (`Box::into_raw`), or null when the kernel announced none.
    pub ring: *mut RqRing,
}

const _: () = assert!(offset_of!(RrxeSrq, vsrq) == 0 && offset_of!(verbs_srq, srq) == 0);

// SAFETY: `verbs_srq` holds pointers, integers, a C enum whose 0 is `IBV_SRQT_BASIC` and
// pthread mutex/cond (all-zero = PTHREAD_*_INITIALIZER in glibc); the ring pointer is raw;
// no drop glue.
unsafe impl ZeroInit for RrxeSrq {}

impl RrxeSrq {
    /// The `ibv_srq` inside `srq`.
    fn ibv_srq(srq: &CBox<RrxeSrq>) -> *mut ibv_srq {
        // SAFETY: only computes a field address inside the live allocation.
        unsafe { &raw mut (*srq.as_ptr()).vsrq.srq }
    }
}

/// Maps the ring the kernel announced for an SRQ of `max_wr` WRs of `max_sge` entries; `None` when it
/// announced none.
fn map_ring(
    ctx: *mut ibv_context,
    r: &rrxe_uapi::CreateSrqResp,
    max_wr: u32,
    max_sge: u32,
) -> Result<Option<Box<RqRing>>, c_int> {
    if r.rq.bytes == 0 {
        return Ok(None);
    }
    // SAFETY: `ctx` is a live context of ours; `cmd_fd` is its uverbs file.
    let fd = unsafe { (*ctx).cmd_fd };
    let len = usize::try_from(r.rq.bytes).map_err(|_| libc::EINVAL)?;
    let m = Mapping::map_shared(fd, r.rq.mmap_key, len)?;
    let mut ring = RqRing::from_mapping(m, &r.rq, max_sge).map_err(|e| e.errno())?;
    // The kernel answered `max_wr`; a ring too small for it is a protocol error.
    ring.set_max_wr(max_wr).map_err(|_| libc::EPROTO)?;
    Ok(Some(Box::new(ring)))
}

/// `verbs_context_ops::create_srq` (`ibv_create_srq`, which then sets `context`,
/// `srq_context`, `pd` and the mutex/cond). The helper writes the kernel's `max_wr`/`max_sge`
/// back to `attr->attr`.
///
/// # Safety
/// Called by libibverbs only, with a PD of ours and a valid `attr`.
pub unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    let Some(srq) = CBox::<RrxeSrq>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let mut cmd = rrxe_create_srq::default();
    let mut resp = rrxe_create_srq_resp::default();
    // SAFETY: `pd`/`attr` as received from libibverbs; the SRQ is a live zeroed object;
    // `cmd`/`resp` are writable buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_srq(
            pd,
            RrxeSrq::ibv_srq(&srq),
            attr,
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        trace!("create_srq = {ret}");
        set_errno(cmd_errno(ret));
        return ptr::null_mut();
    }
    // SAFETY: `attr` and `pd` are valid; on success the helper wrote the kernel's caps.
    let (max_wr, max_sge, ctx) =
        unsafe { ((*attr).attr.max_wr, (*attr).attr.max_sge, (*pd).context) };
    let p = RrxeSrq::ibv_srq(&srq);
    match map_ring(ctx, &resp.drv_payload, max_wr, max_sge) {
        // SAFETY: `srq` is ours until `into_raw` below.
        Ok(ring) => unsafe { (*srq.as_ptr()).ring = ring.map_or(ptr::null_mut(), Box::into_raw) },
        Err(e) => {
            trace!(
                "create_srq: mapping the ring failed ({:?}): {e}",
                resp.drv_payload
            );
            // SAFETY: the kernel SRQ exists and nobody else knows it; destroy it again.
            let d = unsafe { ibv_cmd_destroy_srq(p) };
            if d != 0 {
                trace!("create_srq: destroying the SRQ again failed: {d}");
            }
            set_errno(e);
            return ptr::null_mut();
        }
    }
    // SAFETY: `p` is live and filled by the helper.
    let handle = unsafe { (*p).handle };
    trace!("create_srq(max_wr {max_wr}, max_sge {max_sge}) = {p:p} (handle {handle})");
    srq.into_raw();
    p
}

/// `verbs_context_ops::modify_srq`: `ibv_cmd_modify_srq` (`MODIFY_SRQ`).
///
/// # Safety
/// Called by libibverbs only, with an SRQ of ours and a valid `attr`.
pub unsafe extern "C" fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let mut cmd = ibv_modify_srq::default();
    // SAFETY: arguments as received; `cmd` is a writable buffer of the size passed.
    let ret = unsafe { ibv_cmd_modify_srq(srq, attr, mask, &raw mut cmd, size_of_val(&cmd)) };
    trace!("modify_srq({srq:p}, mask {mask:#x}) = {ret}");
    ret
}

/// `verbs_context_ops::query_srq`: `ibv_cmd_query_srq` (`QUERY_SRQ`).
///
/// # Safety
/// Called by libibverbs only, with an SRQ of ours and a valid `attr`.
pub unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let mut cmd = ibv_query_srq::default();
    // SAFETY: arguments as received; `cmd` is a writable buffer of the size passed.
    let ret = unsafe { ibv_cmd_query_srq(srq, attr, &raw mut cmd, size_of_val(&cmd)) };
    trace!("query_srq({srq:p}) = {ret}");
    ret
}

/// `verbs_context_ops::destroy_srq`: `ibv_cmd_destroy_srq` (which also waits for the
/// application to acknowledge the SRQ's async events), then unmaps the ring and frees the SRQ
/// (kept on failure).
///
/// # Safety
/// Called by libibverbs only, with an SRQ made by [`create_srq`].
pub unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: `srq` is a live SRQ of ours.
    let ret = unsafe { ibv_cmd_destroy_srq(srq) };
    trace!("destroy_srq({srq:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `srq` is the `RrxeSrq` from `create_srq` (offset
        // 0), its ring pointer null or from `Box::into_raw`, and libibverbs does not use it
        // after a successful destroy.
        unsafe {
            let rs = srq.cast::<RrxeSrq>();
            if !(*rs).ring.is_null() {
                drop(Box::from_raw((*rs).ring));
            }
            drop(CBox::from_raw(rs));
        }
    }
    ret
}

/// `verbs_context_ops::post_srq_recv` (copied into `ibv_context.ops`): writes the WRs into the
/// SRQ's ring ([`RqRing::post_recv`]), no syscall. `EOPNOTSUPP` (with `*bad_wr` the first WR)
/// when the kernel announced no ring.
///
/// # Safety
/// Called by libibverbs/applications only, with an SRQ of ours, a valid WR list and `bad_wr`
/// NULL or writable.
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: `srq` is a live SRQ of ours (offset 0 of `RrxeSrq`).
    let ring = unsafe { (*srq.cast::<RrxeSrq>()).ring };
    if ring.is_null() {
        if !bad_wr.is_null() {
            // SAFETY: `bad_wr` is writable (contract).
            unsafe { *bad_wr = wr };
        }
        return libc::EOPNOTSUPP;
    }
    // SAFETY: the ring lives as long as the SRQ; WR list and `bad_wr` as per the contract.
    unsafe { (*ring).post_recv(wr, bad_wr) }
}
