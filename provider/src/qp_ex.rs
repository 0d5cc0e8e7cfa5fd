//! The `ibv_qp_ex` work-request builders (`ibv_wr_start` .. `ibv_wr_complete`), for QPs made by
//! `create_qp_ex` with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
//!
//! Between `wr_start` and `wr_complete` the builders record owned copies of the WRs (the
//! scalar fields, the SGE values and the inline bytes, so the application may reuse its
//! buffers as soon as a setter returns); `wr_complete` turns them into an `ibv_send_wr` list
//! and hands it to [`SqRing::post_all`]: the batch is checked WR by WR exactly as `post_send`
//! checks it, then written whole or not at all, with one producer publication and at most one
//! doorbell. `wr_complete` returns the first error of the batch (a setter without a WR, an
//! operation the QP does not offer, a WR `post_send` would refuse, `ENOMEM` when the batch
//! does not fit in `max_send_wr`, or the doorbell's error), and then nothing was posted.
//! `wr_abort` drops the batch.
//!
//! `wr_start` takes the batch lock and `wr_complete`/`wr_abort` release it, so two threads
//! cannot interleave builders on one QP; `post_send` on the same QP may run meanwhile (the send
//! ring has its own lock).

use core::ffi::{c_int, c_void};
use core::mem::size_of_val;
use core::ptr;

use crate::abi::{
    ibv_ah, ibv_cmd_create_qp_ex2, ibv_context, ibv_data_buf, ibv_mw, ibv_mw_bind_info, ibv_qp,
    ibv_qp_ex, ibv_qp_init_attr_ex, ibv_send_wr, ibv_sge, ibv_wr_opcode, rrxe_create_qp_ex,
    rrxe_create_qp_ex_resp, set_errno, CBox, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_WRITE, IBV_WR_BIND_MW,
    IBV_WR_LOCAL_INV, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV, VERBS_QP_EX,
};
use crate::log::trace;
use crate::qp::{finish_create, send_state_ok, QpHooks, RrxeQp};
use crate::util::{check_create_qp_ex_mask, check_send_ops_flags};
use crate::wr_batch::{Batch, QpEx};

/// The `RrxeQp` of an `ibv_qp_ex` (offset 0 of `verbs_qp`, itself at offset 0).
fn rqp(q: *mut ibv_qp_ex) -> *mut RrxeQp {
    q.cast()
}

/// The batch of `q`.
///
/// # Safety
/// `q` a QP of ours with builders installed, and the calling thread inside `wr_start` ..
/// `wr_complete`/`wr_abort` (it holds the batch lock).
#[allow(clippy::mut_from_ref)]
unsafe fn batch<'a>(q: *mut ibv_qp_ex) -> &'a mut Batch {
    // SAFETY: contract: `ex` is set for QPs with builders and the lock is held.
    unsafe { &mut *(*(*rqp(q)).ex).batch.get() }
}

/// Starts a WR with the QP's current `wr_id`/`wr_flags`.
///
/// # Safety
/// As [`batch`].
unsafe fn build<'a>(q: *mut ibv_qp_ex, opcode: ibv_wr_opcode) -> &'a mut ibv_send_wr {
    // SAFETY: contract.
    unsafe {
        let (id, flags) = ((*q).wr_id, (*q).wr_flags);
        batch(q).push(opcode, id, flags)
    }
}

unsafe extern "C" fn wr_start(q: *mut ibv_qp_ex) {
    // SAFETY: `q` is a QP of ours with builders (libibverbs contract).
    let ex = unsafe { &*(*rqp(q)).ex };
    ex.lock.lock();
    // SAFETY: locked just above.
    unsafe { batch(q) }.clear();
}

unsafe extern "C" fn wr_complete(q: *mut ibv_qp_ex) -> c_int {
    // SAFETY: inside the batch (contract).
    let b = unsafe { batch(q) };
    let qp = q.cast::<ibv_qp>();
    // SAFETY: `q` is live; `state` as in `post_send`.
    let (state, sq) = unsafe { ((*qp).state, (*rqp(q)).sq) };
    let ret = if b.err != 0 {
        b.err
    } else if !send_state_ok(state) {
        libc::EINVAL
    } else if sq.is_null() {
        libc::EOPNOTSUPP
    } else {
        let head = b.link();
        // SAFETY: `qp` is live; the list points into the batch, which stays untouched until
        // `post_all` returns; inline sources are the batch's own bytes; UD AHs are the
        // application's (the `ibv_wr_set_ud_addr` contract).
        unsafe {
            let mut hooks = QpHooks::new(qp);
            (*sq).post_all(head, &mut hooks)
        }
    };
    if ret != 0 {
        trace!("wr_complete({q:p}) = {ret} ({} WRs not posted)", b.len());
    }
    b.clear();
    // SAFETY: taken by `wr_start` on this thread.
    unsafe { (*(*rqp(q)).ex).lock.unlock() };
    ret
}

unsafe extern "C" fn wr_abort(q: *mut ibv_qp_ex) {
    // SAFETY: inside the batch (contract).
    unsafe {
        batch(q).clear();
        (*(*rqp(q)).ex).lock.unlock();
    }
}

unsafe extern "C" fn wr_send(q: *mut ibv_qp_ex) {
    // SAFETY: inside the batch.
    unsafe { build(q, IBV_WR_SEND) };
}

unsafe extern "C" fn wr_send_imm(q: *mut ibv_qp_ex, imm_data: u32) {
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_SEND_WITH_IMM) };
    w.__bindgen_anon_1.imm_data = imm_data;
}

unsafe extern "C" fn wr_rdma_write(q: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_RDMA_WRITE) };
    w.wr.rdma.rkey = rkey;
    w.wr.rdma.remote_addr = remote_addr;
}

unsafe extern "C" fn wr_rdma_write_imm(q: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_RDMA_WRITE_WITH_IMM) };
    w.wr.rdma.rkey = rkey;
    w.wr.rdma.remote_addr = remote_addr;
    w.__bindgen_anon_1.imm_data = imm;
}

unsafe extern "C" fn wr_rdma_read(q: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_RDMA_READ) };
    w.wr.rdma.rkey = rkey;
    w.wr.rdma.remote_addr = remote_addr;
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    q: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_ATOMIC_CMP_AND_SWP) };
    w.wr.atomic.rkey = rkey;
    w.wr.atomic.remote_addr = remote_addr;
    w.wr.atomic.compare_add = compare;
    w.wr.atomic.swap = swap;
}

unsafe extern "C" fn wr_atomic_fetch_add(q: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) {
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_ATOMIC_FETCH_AND_ADD) };
    w.wr.atomic.rkey = rkey;
    w.wr.atomic.remote_addr = remote_addr;
    w.wr.atomic.compare_add = add;
}

unsafe extern "C" fn wr_local_inv(q: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_LOCAL_INV) };
    w.__bindgen_anon_1.invalidate_rkey = invalidate_rkey;
}

unsafe extern "C" fn wr_send_inv(q: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_SEND_WITH_INV) };
    w.__bindgen_anon_1.invalidate_rkey = invalidate_rkey;
}

/// `ibv_wr_bind_mw` (type-2 windows): the bind info is copied now; the window and the MR are
/// read at `wr_complete` (both must live until then, as for `post_send`).
unsafe extern "C" fn wr_bind_mw(
    q: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    if info.is_null() || mw.is_null() {
        // SAFETY: inside the batch.
        return unsafe { batch(q) }.fail(libc::EINVAL);
    }
    // SAFETY: inside the batch; `info` is readable for the call (the API's contract).
    unsafe {
        let w = build(q, IBV_WR_BIND_MW);
        w.__bindgen_anon_2.bind_mw.mw = mw;
        w.__bindgen_anon_2.bind_mw.rkey = rkey;
        w.__bindgen_anon_2.bind_mw.bind_info = *info;
    }
}

unsafe extern "C" fn wr_atomic_write(
    q: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    // SAFETY: inside the batch.
    let b = unsafe { batch(q) };
    if atomic_wr.is_null() {
        return b.fail(libc::EINVAL);
    }
    // SAFETY: `atomic_wr` points to the 8 bytes to place (the `ibv_wr_atomic_write`
    // contract), read once, here, so the application may reuse them at once.
    let value = unsafe { ptr::read_unaligned(atomic_wr.cast::<[u8; 8]>()) };
    // SAFETY: inside the batch.
    let w = unsafe { build(q, IBV_WR_ATOMIC_WRITE) };
    w.wr.rdma.rkey = rkey;
    w.wr.rdma.remote_addr = remote_addr;
    b.set_atomic_value(value);
}

unsafe extern "C" fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // A zero-length SGE carries no data (as rdma-core's providers treat it).
    let list: &[ibv_sge] = if length == 0 {
        &[]
    } else {
        core::slice::from_ref(&sge)
    };
    // SAFETY: inside the batch.
    unsafe { batch(q) }.set_sges(list);
}

unsafe extern "C" fn wr_set_sge_list(q: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: inside the batch.
    let b = unsafe { batch(q) };
    if num_sge == 0 {
        return b.set_sges(&[]);
    }
    if sg_list.is_null() || !sg_list.is_aligned() {
        return b.fail(libc::EINVAL);
    }
    // SAFETY: `sg_list` valid for `num_sge` entries (the `ibv_wr_set_sge_list` contract).
    b.set_sges(unsafe { core::slice::from_raw_parts(sg_list, num_sge) });
}

/// The QP's `max_inline_data` (from its send ring; 0 without one).
///
/// # Safety
/// `q` a live QP of ours.
unsafe fn max_inline(q: *mut ibv_qp_ex) -> u32 {
    // SAFETY: contract; the ring lives as long as the QP.
    unsafe {
        let sq = (*rqp(q)).sq;
        if sq.is_null() {
            0
        } else {
            (*sq).caps().max_inline
        }
    }
}

unsafe extern "C" fn wr_set_inline_data(q: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: inside the batch; `addr` readable for `length` bytes (the API's contract).
    unsafe {
        let max = max_inline(q);
        batch(q).set_inline(&[(addr.cast_const().cast(), length)], max);
    }
}

unsafe extern "C" fn wr_set_inline_data_list(
    q: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    // SAFETY: inside the batch.
    let b = unsafe { batch(q) };
    if num_buf != 0 && (buf_list.is_null() || !buf_list.is_aligned()) {
        return b.fail(libc::EINVAL);
    }
    let bufs: &[ibv_data_buf] = if num_buf == 0 {
        &[]
    } else {
        // SAFETY: `buf_list` valid for `num_buf` entries (the API's contract).
        unsafe { core::slice::from_raw_parts(buf_list, num_buf) }
    };
    let parts: Vec<(*const u8, usize)> = bufs
        .iter()
        .map(|d| (d.addr.cast_const().cast(), d.length))
        .collect();
    // SAFETY: each buffer is readable for its length (the API's contract).
    unsafe {
        let max = max_inline(q);
        b.set_inline(&parts, max);
    }
}

unsafe extern "C" fn wr_set_ud_addr(q: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: inside the batch.
    unsafe { batch(q) }.set_ud(ah, qpn, qkey);
}

// Operations rrxe does not execute: refused at create when requested; if called anyway, the
// batch fails with EOPNOTSUPP (rather than a NULL call).
unsafe extern "C" fn wr_unsupported_rkey(q: *mut ibv_qp_ex, _rkey: u32) {
    // SAFETY: inside the batch.
    unsafe { batch(q) }.fail(libc::EOPNOTSUPP);
}
unsafe extern "C" fn wr_unsupported_tso(q: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    // SAFETY: inside the batch.
    unsafe { batch(q) }.fail(libc::EOPNOTSUPP);
}

/// Fills the `ibv_qp_ex` callbacks of `qp`: every builder the provider implements (an
/// operation the QP type does not take fails at `wr_complete` with `EINVAL`, as in
/// `post_send`), and failing stubs for the operations rrxe does not execute.
///
/// # Safety
/// `qp` a live QP of ours not yet handed out, with `ex` set.
pub(crate) unsafe fn install(qp: *mut RrxeQp) {
    // SAFETY: contract; the `ibv_qp_ex` view covers the `verbs_qp` union.
    let x = unsafe { &mut *(&raw mut (*qp).vqp.u.qp_ex).cast::<ibv_qp_ex>() };
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_set_xrc_srqn = Some(wr_unsupported_rkey);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_send_tso = Some(wr_unsupported_tso);
    x.wr_atomic_write = Some(wr_atomic_write);
}

/// `verbs_context_ops::create_qp_ex` (`ibv_create_qp_ex` with more than
/// `IBV_QP_INIT_ATTR_PD`): `ibv_cmd_create_qp_ex2`. Accepts `PD`, `CREATE_FLAGS` (the kernel
/// judges the flags) and `SEND_OPS_FLAGS` (the `ibv_wr_*` builders, for the operations the QP
/// type offers: [`check_send_ops_flags`]); everything else fails with `EOPNOTSUPP` before any
/// kernel call (see [`check_create_qp_ex_mask`]).
///
/// # Safety
/// Called by libibverbs only, with a context of ours and a valid `attr`.
pub unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: `attr` is valid (libibverbs' contract).
    let (mask, qp_type, ops) =
        unsafe { ((*attr).comp_mask, (*attr).qp_type, (*attr).send_ops_flags) };
    let with_builders = mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    let check = check_create_qp_ex_mask(mask).and_then(|()| {
        if with_builders {
            check_send_ops_flags(qp_type, ops)
        } else {
            Ok(())
        }
    });
    if let Err(e) = check {
        trace!("create_qp_ex(comp_mask {mask:#x}, type {qp_type}, send_ops {ops:#x}) = {e}");
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
    // SAFETY: `attr` is valid; on success the helper wrote the kernel's caps into it.
    let cap = unsafe { (*attr).cap };
    let p = finish_create("create_qp_ex", ret, qp, &resp.drv_payload, &cap);
    if with_builders && !p.is_null() {
        let qp = p.cast::<RrxeQp>();
        // SAFETY: `p` is the live QP just made, not yet handed to libibverbs; its `ex` is null
        // and `ibv_cmd_create_qp_ex2` set `comp_mask` (0) already, so the flag is added after.
        unsafe {
            (*qp).ex = Box::into_raw(Box::new(QpEx::new()));
            install(qp);
            (*qp).vqp.comp_mask |= VERBS_QP_EX;
        }
    }
    p
}
