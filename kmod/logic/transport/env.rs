// SPDX-License-Identifier: GPL-2.0-only
//! What the engine needs from the world ([`Env`]) and the small types it speaks in.

use super::{Cqe, RecvWr, Stat};
use crate::logic::mr::{Access, AtomicOp, MemError};
use crate::uapi::wc_status;

/// Where an emitted packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// The connected peer of the QP (its path).
    Connected,
    /// A UD destination: the address handle number and destination QP of the WQE.
    Ah { ah: u32, qpn: u32 },
}

/// Which completion queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqSel {
    /// The send CQ.
    Send,
    /// The receive CQ.
    Recv,
}

/// Affiliated asynchronous events the engine raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A local error moved the QP to ERR.
    QpFatal,
    /// First packet received in RTR.
    CommEst,
    /// The SQ drained after a move to SQD.
    SqDrained,
    /// An SRQ-attached QP in ERR will consume no more receive WQEs.
    LastWqeReached,
    /// The responder could not execute a request (NAK Invalid Request: a malformed or
    /// unsupported request, a length error) and moved the QP to ERR (`IB_EVENT_QP_REQ_ERR`).
    QpReqErr,
    /// The responder met an access violation (NAK Remote Access Error: rkey, bounds or rights)
    /// and moved the QP to ERR (`IB_EVENT_QP_ACCESS_ERR`).
    QpAccessErr,
}

/// What a receive queue (RQ or SRQ) answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvTake {
    /// A WQE was taken and copied into the engine.
    Taken,
    /// The queue is empty.
    Empty,
    /// The next WQE is malformed (it was consumed).
    Bad,
}

/// What the engine needs from the world.
pub trait Env {
    /// Checks that `len` bytes at `addr` are reachable through `key` for `acc` (PD, bounds,
    /// rights), without moving data. A zero length always passes.
    fn mem_check(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(), MemError>;
    /// Reads registered memory.
    fn mem_read(
        &mut self,
        key: u32,
        addr: u64,
        out: &mut [u8],
        acc: Access,
    ) -> Result<(), MemError>;
    /// Writes registered memory.
    fn mem_write(&mut self, key: u32, addr: u64, data: &[u8], acc: Access) -> Result<(), MemError>;
    /// Performs an atomic on registered memory (checked for [`AtomicOp::access`]); returns the
    /// original value.
    fn mem_atomic(&mut self, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError>;
    /// RDMA FLUSH: checks that `key` names a valid MR of the QP's PD with the rights `need`
    /// (`IB_ACCESS_FLUSH_*`), and that `len` bytes at `addr` lie inside it unless `whole_mr`
    /// (memory-region selectivity), then makes every placement done so far globally visible
    /// (and persistent, for an MR registered for persistence).
    fn mem_flush(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        whole_mr: bool,
        need: u32,
    ) -> Result<(), MemError>;
    /// Sends a packet (BTH .. ICRC; the ICRC is computed by the caller of the wire).
    /// [`Emit::Congested`] says the path pushes back, or the packet may be lost: the engine
    /// stops sending in this call (the packet counts as sent, and the retransmit timer or the
    /// shell's continuation resumes). [`Emit::Dropped`] says this end dropped it before it
    /// left: the engine stops too, and sends that very packet again at its next chance (the
    /// shell's continuation), without waiting for a retransmit timeout (see
    /// [`Emit::Dropped`]).
    fn emit(&mut self, pkt: &[u8], dest: Dest) -> Emit;
    /// Posts a completion; `false` when the CQ overflowed (the completion is lost).
    /// `solicited`: the completion answers a request for solicited-only notification
    /// (`ibv_req_notify_cq(cq, 1)`): a receive of a message whose last packet carried the
    /// Solicited Event bit, or any unsuccessful completion (IBTA 11.4.2.2).
    fn complete(&mut self, cq: CqSel, cqe: &Cqe, solicited: bool) -> bool;
    /// Raises an affiliated event.
    fn event(&mut self, ev: Event);
    /// Takes the next receive WQE (RQ or SRQ) into `out`.
    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake;
    /// Arms the RNR timer; [`Engine::rnr_timer_expired`] is to be called when it fires.
    fn arm_rnr_timer(&mut self, usecs: u32);
    /// Arms (restarts) the retransmit timer to fire in `usecs` microseconds, or stops it
    /// (`None`); [`Engine::retry_timer_expired`] is to be called when it fires.
    fn set_retry_timer(&mut self, usecs: Option<u64>);
    /// Arms (restarts) the responder's re-acknowledgement timer to fire in `usecs`
    /// microseconds, or stops it (`None`); [`Engine::reack_timer_expired`] is to be called when
    /// it fires. A stale expiry (after a stop) is harmless: the engine checks its own state.
    fn set_reack_timer(&mut self, usecs: Option<u32>);
    /// Adds `n` to a device-wide counter (the engine keeps its own per-QP copy).
    fn stat(&mut self, s: Stat, n: u64);
    /// Packets this QP sent may still be on their way to the peer inside this host: another
    /// CPU holds some in a local (loopback) delivery. An ACK poll then waits
    /// ([`Engine::retry_timer_expired`]). A shell that cannot tell says `false`.
    fn in_transit(&mut self) -> bool {
        false
    }
    /// A clock in milliseconds (any origin; it may wrap), for what the engine bounds over time
    /// (replays of a READ, [`responder::READ_REPLAY_REFILL_MS`]). A shell without one answers
    /// 0: those bounds then hold per count only.
    fn now_ms(&mut self) -> u64 {
        0
    }
    /// A clock in microseconds (any origin, any granularity up to a few milliseconds), for the
    /// RC requester's round-trip estimate (see [`Engine::retry_timer_expired`]). `None` (the
    /// default): no estimate, and the retransmit timer waits the QP's `timeout` as the IBTA
    /// says, and nothing sooner.
    fn clock_us(&mut self) -> Option<u64> {
        None
    }
    /// The oldest send WR retired: `outstanding` WRs of the SQ remain taken and not yet
    /// completed. Called before the retired WR's completion (if any) is posted, so a consumer
    /// that sees the completion also sees the slot free again: a WR holds its SQ slot until it
    /// completes, and `max_send_wr` bounds the WRs outstanding, as the IBTA counts them.
    fn sq_retired(&mut self, outstanding: u32) {
        let _ = outstanding;
    }
    /// Fast registration (a kernel consumer's REG_MR, executed in SQ order): the
    /// fast-registration MR whose index `key` names becomes valid under `key` for `len` bytes
    /// at `iova` with `access`, over the pages mapped into it. `Err`: the completion status.
    fn mr_register(&mut self, key: u32, iova: u64, len: u64, access: u32) -> Result<(), u32> {
        let _ = (key, iova, len, access);
        Err(wc_status::LOC_PROT_ERR)
    }
    /// Invalidates the fast-registered MR `key` (LOCAL_INV in SQ order, or a received SEND
    /// with invalidate when `remote`). `Err`: the completion status.
    fn mr_invalidate(&mut self, key: u32, remote: bool) -> Result<(), u32> {
        let _ = (key, remote);
        Err(wc_status::LOC_PROT_ERR)
    }
    /// Binds a memory window (a user's BIND_MW, executed in SQ order; the rules are
    /// [`crate::logic::mw`]'s). `Err`: the completion status.
    fn mw_bind(&mut self, wr: &crate::logic::mw::BindWr) -> Result<(), u32> {
        let _ = wr;
        Err(wc_status::MW_BIND_ERR)
    }
}

/// What the wire answered to [`Env::emit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// Handed to the wire (or queued for local delivery).
    Sent,
    /// Pushed back (a full local queue: the packet is queued), or failed in a way that
    /// counts as loss on the wire (the retransmit timer recovers it).
    Congested,
    /// Dropped here, before it left (NET_XMIT_DROP/CN from the stack, no memory for the skb,
    /// an empty loopback pool): transient, and no loss on the wire. The engine rewinds to it
    /// and sends it again when the shell next runs it, as it would any unsent packet: waiting
    /// for a retransmit timeout instead cost a timeout per drop, and with `timeout` 0 (no
    /// timer) the WR never completed. A READ response or ACK dropped so is owed again.
    Dropped,
}
