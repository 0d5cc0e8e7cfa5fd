//! Queue pairs (trampolines called by libibverbs).
//!
//! Every QP type goes to the kernel unchanged (the kernel refuses the types it does not
//! implement, e.g. XRC or GSI, with `EOPNOTSUPP`). The kernel answers `create_qp` with a send
//! ring and, unless the QP uses an SRQ, a receive ring ([`rrxe_uapi::CreateQpResp`]); the
//! provider maps both. `post_send` writes WQEs into the send ring and rings at most one doorbell
//! (`ibv_cmd_post_send(qp, NULL, &bad)`: `POST_SEND` with `wr_count == 0`), `post_recv` writes
//! into the receive ring with no syscall. A ring the kernel did not announce (`bytes == 0`)
//! leaves its verb unsupported (`EOPNOTSUPP`).

use core::ffi::c_int;
use core::mem::{offset_of, size_of_val};
use core::ptr;
use core::sync::atomic::{AtomicBool, Ordering};

use rrxe_uapi::CreateQpResp;

use crate::abi::{
    cmd_errno, ibv_ah, ibv_cmd_attach_mcast, ibv_cmd_create_qp, ibv_cmd_destroy_qp,
    ibv_cmd_detach_mcast, ibv_cmd_modify_qp, ibv_cmd_post_send, ibv_cmd_query_qp, ibv_context,
    ibv_gid, ibv_modify_qp, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr,
    ibv_query_qp, ibv_recv_wr, ibv_send_wr, post_send_doorbell, rrxe_create_qp,
    rrxe_create_qp_resp, set_errno, verbs_qp, CBox, ZeroInit, IBV_QPS_RESET, IBV_QPS_RTS,
};
use crate::ah::ah_num_of;
use crate::log::trace;
use crate::ring::{Mapping, RqRing, SendHooks, SqCaps, SqRing};
use crate::wr_batch::QpEx;

/// The provider's QP: libibverbs' `verbs_qp` (the application's `ibv_qp`, or `ibv_qp_ex`, at
/// offset 0), then the rings. Always the full `verbs_qp`: `ibv_qp_to_qp_ex()` reads
/// `verbs_qp::comp_mask` of any QP; it has `VERBS_QP_EX` only for QPs made by `create_qp_ex`
/// with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (the `ibv_wr_*` builders, [`crate::qp_ex`]).
#[repr(C)]
pub struct RrxeQp {
    pub vqp: verbs_qp,
    /// The mapped send ring (`Box::into_raw`), or null when the kernel announced none.
    pub sq: *mut SqRing,
    /// The mapped receive ring (`Box::into_raw`), or null (an SRQ, or none announced).
    pub rq: *mut RqRing,
    /// The `ibv_wr_*` batch (`Box::into_raw`), or null without builders.
    pub ex: *mut QpEx,
}

const _: () = assert!(offset_of!(RrxeQp, vqp) == 0 && offset_of!(verbs_qp, u) == 0);

// SAFETY: `verbs_qp` holds pointers, integers, pthread mutex/cond (all-zero is their static
// initializer in glibc) and `Option<fn>`s; the ring pointers are raw (null = none); no drop
// glue.
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

    /// Frees the rings (and the builder batch) of a QP whose kernel object is gone (or was
    /// never handed out).
    ///
    /// # Safety
    /// `qp` must be a live `RrxeQp` whose ring pointers are null or from `Box::into_raw`, and
    /// nothing may use the rings any more.
    pub(crate) unsafe fn drop_rings(qp: *mut RrxeQp) {
        // SAFETY: per the contract.
        unsafe {
            let sq = core::mem::replace(&mut (*qp).sq, ptr::null_mut());
            if !sq.is_null() {
                drop(Box::from_raw(sq));
            }
            let rq = core::mem::replace(&mut (*qp).rq, ptr::null_mut());
            if !rq.is_null() {
                drop(Box::from_raw(rq));
            }
            let ex = core::mem::replace(&mut (*qp).ex, ptr::null_mut());
            if !ex.is_null() {
                drop(Box::from_raw(ex));
            }
        }
    }
}

/// A QP's mapped rings: send, receive (each absent when not announced).
pub(crate) type QpRings = (Option<Box<SqRing>>, Option<Box<RqRing>>);

/// Maps the rings the kernel announced for a QP of type `qp_type` with the caps `cap` (as the
/// kernel answered them). `has_srq`: the QP receives through an SRQ, so the kernel must
/// announce no receive ring (`EPROTO` if it does).
pub(crate) fn map_rings(
    fd: c_int,
    r: &CreateQpResp,
    qp_type: u32,
    cap: &ibv_qp_cap,
    has_srq: bool,
) -> Result<QpRings, c_int> {
    let len = |b: u64| usize::try_from(b).map_err(|_| libc::EINVAL);
    let sq = if r.sq.bytes == 0 {
        None
    } else {
        let caps = SqCaps {
            qp_type,
            max_sge: cap.max_send_sge,
            max_inline: cap.max_inline_data,
        };
        let m = Mapping::map_shared(fd, r.sq.mmap_key, len(r.sq.bytes)?)?;
        let mut sq = SqRing::from_mapping(m, &r.sq, caps).map_err(|e| e.errno())?;
        // The capacity the kernel answered is the one enforced; a ring too small for it is a
        // protocol error.
        sq.set_max_wr(cap.max_send_wr).map_err(|_| libc::EPROTO)?;
        Some(Box::new(sq))
    };
    let rq = if r.rq == Default::default() {
        None
    } else if has_srq {
        trace!("create_qp: the kernel announced a receive ring for a QP with an SRQ");
        return Err(libc::EPROTO);
    } else {
        let m = Mapping::map_shared(fd, r.rq.mmap_key, len(r.rq.bytes)?)?;
        let mut rq = RqRing::from_mapping(m, &r.rq, cap.max_recv_sge).map_err(|e| e.errno())?;
        rq.set_max_wr(cap.max_recv_wr).map_err(|_| libc::EPROTO)?;
        Some(Box::new(rq))
    };
    Ok((sq, rq))
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
    // SAFETY: `attr` is valid; on success the helper wrote the kernel's caps into it.
    let cap = unsafe { (*attr).cap };
    finish_create("create_qp", ret, qp, &resp.drv_payload, &cap)
}

/// The common end of both create paths: maps the rings, then the QP passes to libibverbs; on
/// failure (of the command, or of the mapping, after which the kernel QP is destroyed again)
/// it is freed and `errno` set.
pub(crate) fn finish_create(
    what: &str,
    ret: c_int,
    qp: CBox<RrxeQp>,
    resp: &CreateQpResp,
    cap: &ibv_qp_cap,
) -> *mut ibv_qp {
    if ret != 0 {
        trace!("{what} = {ret}");
        set_errno(cmd_errno(ret));
        return ptr::null_mut();
    }
    let p = RrxeQp::ibv_qp(&qp);
    // SAFETY: `p` is live and filled by the create helper (context, type, srq).
    let (fd, qp_type, has_srq) =
        unsafe { ((*(*p).context).cmd_fd, (*p).qp_type, !(*p).srq.is_null()) };
    match map_rings(fd, resp, qp_type, cap, has_srq) {
        Ok((sq, rq)) => {
            // SAFETY: `qp` is ours until `into_raw` below.
            unsafe {
                (*qp.as_ptr()).sq = sq.map_or(ptr::null_mut(), Box::into_raw);
                (*qp.as_ptr()).rq = rq.map_or(ptr::null_mut(), Box::into_raw);
            }
        }
        Err(e) => {
            trace!("{what}: mapping the rings failed ({resp:?}): {e}");
            // SAFETY: the kernel QP exists and nobody else knows it; destroy it again.
            let d = unsafe { ibv_cmd_destroy_qp(p) };
            if d != 0 {
                trace!("{what}: destroying the QP again failed: {d}");
            }
            set_errno(e);
            return ptr::null_mut();
        }
    }
    RrxeQp::trace_created(what, p);
    trace!("{what}: sq ring {:?}, rq ring {:?}", resp.sq, resp.rq);
    qp.into_raw();
    p
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
/// application to acknowledge the QP's async events), then unmaps the rings and frees the QP
/// (all kept on failure).
///
/// # Safety
/// Called by libibverbs only, with a QP made by [`create_qp`] or [`create_qp_ex`].
pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: `qp` is a live QP of ours.
    let ret = unsafe { ibv_cmd_destroy_qp(qp) };
    trace!("destroy_qp({qp:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `qp` is the `RrxeQp` from `create_qp[_ex]`
        // (offset 0), its ring pointers null or from `Box::into_raw`, and libibverbs does not
        // use it after a successful destroy.
        unsafe {
            let rq = qp.cast::<RrxeQp>();
            RrxeQp::drop_rings(rq);
            drop(CBox::from_raw(rq));
        }
    }
    ret
}

/// `verbs_context_ops::attach_mcast`: `ibv_cmd_attach_mcast` (`ATTACH_MCAST`). The kernel
/// keeps the group table and the netdev's filter; nothing changes in the rings.
///
/// # Safety
/// Called by libibverbs only, with a QP of ours and a readable GID.
pub unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: arguments as received from libibverbs.
    let ret = unsafe { ibv_cmd_attach_mcast(qp, gid, lid) };
    trace!("attach_mcast({qp:p}) = {ret}");
    ret
}

/// `verbs_context_ops::detach_mcast`: `ibv_cmd_detach_mcast` (`DETACH_MCAST`).
///
/// # Safety
/// Called by libibverbs only, with a QP of ours and a readable GID.
pub unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: arguments as received from libibverbs.
    let ret = unsafe { ibv_cmd_detach_mcast(qp, gid, lid) };
    trace!("detach_mcast({qp:p}) = {ret}");
    ret
}

/// Whether `post_send` may write into the send ring in `state`: from RTS on (RTS, SQD, SQE,
/// ERR), as rdma_rxe; RESET, INIT and RTR (and unknown values) are refused.
pub fn send_state_ok(state: u32) -> bool {
    (IBV_QPS_RTS..=crate::abi::IBV_QPS_ERR).contains(&state)
}

/// Whether `post_recv` may write into the receive ring in `state`: any state but RESET (and
/// unknown values).
pub fn recv_state_ok(state: u32) -> bool {
    state != IBV_QPS_RESET && state <= crate::abi::IBV_QPS_ERR
}

/// uverbs refused a write() doorbell to this process (`EACCES`): ring through
/// `ibv_cmd_post_send` from then on.
static WRITE_DOORBELL_REFUSED: AtomicBool = AtomicBool::new(false);

/// The QP around the send ring: AH numbers from the posting QP's context, and the doorbell.
pub struct QpHooks {
    qp: *mut ibv_qp,
    ctx: *mut ibv_context,
}

impl QpHooks {
    /// Hooks for posting on `qp`.
    ///
    /// # Safety
    /// `qp` must be a live QP of ours for the lifetime of the hooks, and the AHs of the WRs
    /// posted with them valid (the `ibv_post_send` contract).
    pub unsafe fn new(qp: *mut ibv_qp) -> QpHooks {
        // SAFETY: `qp` is live (contract).
        let ctx = unsafe { (*qp).context };
        QpHooks { qp, ctx }
    }
}

impl SendHooks for QpHooks {
    unsafe fn ah_num(&mut self, ah: *mut ibv_ah) -> Option<u32> {
        // SAFETY: `ah` is NULL or a live AH (this method's contract); `ctx` is the QP's, one
        // of ours.
        unsafe { ah_num_of(ah, self.ctx) }
    }

    fn doorbell(&mut self) -> c_int {
        // One write() of a prebuilt command, unless uverbs refused that to this process once
        // (then libibverbs' ioctl path, for good).
        if !WRITE_DOORBELL_REFUSED.load(Ordering::Relaxed) {
            // SAFETY: `qp` and its context are live (`QpHooks::new` contract).
            let (fd, handle) = unsafe { ((*self.ctx).cmd_fd, (*self.qp).handle) };
            match post_send_doorbell(fd, handle) {
                Ok(()) => return 0,
                Err(libc::EACCES) => WRITE_DOORBELL_REFUSED.store(true, Ordering::Relaxed),
                Err(e) => {
                    trace!("post_send({:p}): doorbell = {e}", self.qp);
                    return e;
                }
            }
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: `qp` is live (`QpHooks::new` contract); a NULL list makes libibverbs issue
        // `POST_SEND` with `wr_count == sge_count == 0` and `wqe_size = sizeof(struct
        // ib_uverbs_send_wr)`, reading no WR; `bad` is a writable local.
        let ret = unsafe { ibv_cmd_post_send(self.qp, ptr::null_mut(), &mut bad) };
        if ret != 0 {
            trace!("post_send({:p}): doorbell = {ret}", self.qp);
        }
        ret
    }
}

/// Sets `*bad_wr = wr` (when `bad_wr` is not NULL) and returns `err`.
///
/// # Safety
/// `bad_wr` must be NULL or valid for writing.
unsafe fn refuse<T>(bad_wr: *mut *mut T, wr: *mut T, err: c_int) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: contract.
        unsafe { *bad_wr = wr };
    }
    err
}

/// `verbs_context_ops::post_send` (copied into `ibv_context.ops`): writes the WRs into the send
/// ring ([`SqRing::post_send`]), then rings at most one doorbell. `EINVAL` (with `*bad_wr` the
/// first WR, nothing written) before RTS; `EOPNOTSUPP` when the kernel announced no send ring.
///
/// # Safety
/// Called by libibverbs/applications only, with a QP of ours and a valid WR list (each
/// `sg_list` valid for `num_sge` entries, inline sources readable, UD AHs valid) and
/// `bad_wr` NULL or writable.
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: `qp` is a live QP of ours (offset 0 of `RrxeQp`); `state` is written by
    // libibverbs on modify, which the application serialises with posting.
    let (state, sq) = unsafe { ((*qp).state, (*qp.cast::<RrxeQp>()).sq) };
    if !send_state_ok(state) {
        // SAFETY: `bad_wr` is NULL or writable (contract).
        return unsafe { refuse(bad_wr, wr, libc::EINVAL) };
    }
    if sq.is_null() {
        // SAFETY: as above.
        return unsafe { refuse(bad_wr, wr, libc::EOPNOTSUPP) };
    }
    // SAFETY: `qp` is live for this call and the WRs are valid (contract).
    let mut hooks = unsafe { QpHooks::new(qp) };
    // SAFETY: the ring lives as long as the QP; WR list and `bad_wr` as per the contract.
    unsafe { (*sq).post_send(wr, bad_wr, &mut hooks) }
}

/// `verbs_context_ops::post_recv` (copied into `ibv_context.ops`): writes the WRs into the
/// receive ring ([`RqRing::post_recv`]), no syscall. `EINVAL` (with `*bad_wr` the first WR) in
/// RESET or on a QP with an SRQ; `EOPNOTSUPP` when the kernel announced no receive ring.
///
/// # Safety
/// Called by libibverbs/applications only, with a QP of ours, a valid WR list and `bad_wr`
/// NULL or writable.
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as in `post_send`.
    let (state, has_srq, rq) =
        unsafe { ((*qp).state, !(*qp).srq.is_null(), (*qp.cast::<RrxeQp>()).rq) };
    if !recv_state_ok(state) || has_srq {
        // SAFETY: `bad_wr` is NULL or writable (contract).
        return unsafe { refuse(bad_wr, wr, libc::EINVAL) };
    }
    if rq.is_null() {
        // SAFETY: as above.
        return unsafe { refuse(bad_wr, wr, libc::EOPNOTSUPP) };
    }
    // SAFETY: the ring lives as long as the QP; WR list and `bad_wr` as per the contract.
    unsafe { (*rq).post_recv(wr, bad_wr) }
}
