// SPDX-License-Identifier: GPL-2.0-only
//! The responder: takes request packets (RC, UC) and datagrams (UD), places SENDs and WRITEs,
//! executes READs and atomics into responder resources, answers duplicates from those
//! resources, and sends ACKs, NAKs and responses in PSN order.

use super::{
    access, cqe, flush, wc_flags, wc_opcode, wc_status, wqe, Access, AtomicOp, CqSel, Dest, Emit,
    Engine, Env, Event, MemError, RecvTake, RecvWr, RxInfo, SqEntry, Stat, GRH_LEN, MAX_MSG,
};
use crate::logic::{
    opcode::{self, Operation, Position},
    psn::Psn,
    qp_state::{QpState, QpType},
    segment::Segmentation,
    wire::{
        self, Aeth, AtomicAckEth, Bth, Headers, NakCode, Packet, Syndrome, AETH_ACK_UNLIMITED,
        BTH_DEF_PKEY,
    },
};
use core::ops::DerefMut;

mod ahead;
mod resources;
mod storage;

use ahead::WriteAhead;
pub use storage::resources_for;

/// What a responder resource records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResKind {
    /// Free.
    #[default]
    Free,
    /// An RDMA READ: its responses come from `rkey`/`va`/`len` as recorded.
    Read,
    /// An atomic: its acknowledge carries `orig`, the value before it was executed.
    Atomic,
    /// An ATOMIC WRITE or a FLUSH (IBTA 1.5): answered with a READ RESPONSE ONLY without
    /// payload, as rdma_rxe answers them; a duplicate gets the answer again and is not
    /// executed again (oA19-14, oA19-15).
    Placement,
}

/// A responder resource (IBTA 9.7.5.1.6): one received READ or atomic, kept so that a
/// duplicate is answered from it and never executed again.
#[derive(Clone, Copy, Debug, Default)]
pub struct Resource {
    kind: ResKind,
    /// First PSN of the request; a READ spans `count` PSNs from it.
    psn: Psn,
    count: u32,
    rkey: u32,
    va: u64,
    len: u32,
    orig: u64,
    /// The MSN its responses carry.
    msn: u32,
    /// Next response packet to send (`count`: all sent).
    next: u32,
    /// The packet the current answer started at: a re-read is answered from its first
    /// missing packet, starting again with READ_RESPONSE_FIRST (as a requester expects after
    /// it re-issued the READ).
    first: u32,
    /// READ: replays a duplicate may still start before the requester shows it got further
    /// or time gives one back (see `READ_REPLAYS`).
    replays_left: u8,
    /// READ: when `replays_left` was last topped up by time ([`Env::now_ms`]).
    refilled_ms: u64,
    /// READ: the furthest packet a duplicate asked to be answered from. It never moves back,
    /// so only a duplicate past it is progress (two captured requests sent in turn are not).
    high: u32,
    /// A duplicate (re)started its answer: the answer still owed is a replay, which a new
    /// request may cut short (see `Engine::res_slot`).
    replayed: bool,
}

/// Replays of a READ that duplicates may start while the requester gets no further: one more
/// than a requester's retries (`retry_cnt` is at most 7) with nothing received in between. A
/// duplicate READ asking from a packet past every earlier one (the requester received more)
/// gives them back, and time gives one back every [`READ_REPLAY_REFILL_MS`]. Beyond them a
/// duplicate is dropped: a captured or spoofed request sent again and again must not make us
/// resend a READ of up to 2 GiB each time.
///
/// What is charged is a requester's *asking again*, not each READ it sends again: go-back-N
/// sends every READ after the one it goes back to again, in PSN order, and the READs that
/// continue such a sweep (each duplicate starting at the PSN after the previous one) are not
/// charged; the first READ of the sweep pays for it. (Charging every READ of every sweep spent
/// the budget of a young READ that waited behind older ones through eight go-backs under
/// reordering, and its answer, which the requester had dropped while an older READ was
/// missing, was then refused for good: the requester waited out all its retries, a hang at
/// `timeout` 18 and above.)
pub(super) const READ_REPLAYS: u8 = 8;

/// Time after which a READ's replays get one more back (see [`READ_REPLAYS`]): a requester
/// whose retransmit timeout is at least this long is never refused a replay it asks for after
/// its timeout, however often its answer was lost; over time a captured request gets at most
/// one replay per this period per resource.
pub const READ_REPLAY_REFILL_MS: u64 = 8;

impl Resource {
    fn pending(&self) -> bool {
        self.kind != ResKind::Free && self.next < self.count
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum InMsg {
    #[default]
    None,
    Send,
    Write,
}

/// Responder state.
#[derive(Debug)]
pub(super) struct Responder<R> {
    /// The resources, a ring of `res.len()` entries: `head` is the oldest, `len` in use.
    res: R,
    res_head: usize,
    res_len: usize,
    /// No resource older than the `pend_from`-th oldest owes responses (a lower bound that the
    /// searches for owed responses start from and move up, so that a received packet does
    /// not scan all 128 resources: [`Responder::owed`], [`Engine::run_responder`]). Whatever
    /// makes a resource owe responses lowers it ([`Responder::owes_at`]).
    pend_from: usize,
    pub(super) epsn: Psn,
    pub(super) msn: u32,
    pub(super) in_msg: InMsg,
    /// Bytes of the current message received so far.
    msg_off: u64,
    /// The receive WQE of the current SEND / WRITE_WITH_IMM (taken at its first packet).
    pub(super) recv: Option<RecvWr>,
    /// RDMA WRITE target of the current message.
    wr_va: u64,
    wr_rkey: u32,
    wr_len: u64,
    /// First PSN of the current WRITE message.
    wr_first: Psn,
    /// WRITE packets placed past `epsn`, and their messages ([`ahead`]).
    pub(super) ahead: WriteAhead,
    /// Packets past `epsn` are placed when they can be ([`ahead`]); off: dropped, as a
    /// go-back-N responder does (tests model such a peer with it).
    pub(super) place_ahead: bool,
    /// The in-order packet being executed is the one a sequence or RNR NAK asked for.
    nak_answered: bool,
    /// A NAK for `epsn` (sequence or RNR) was sent or is queued: later packets are dropped
    /// silently until `epsn` arrives (the requester's timer covers a lost NAK).
    nak_sent: bool,
    /// After a sequence NAK to a requester that announced placement: packets placed past
    /// the hole since that NAK was sent (`None`: no such NAK outstanding). Every
    /// [`RENAK_EVERY`](super::RENAK_EVERY) of them the NAK is sent again (see `Engine::rx_gap`).
    gap_placed: Option<u32>,
    /// UC: drop packets until the next first/only.
    uc_drop: bool,
    /// PSN to acknowledge once nothing is owed.
    ack_pending: Option<Psn>,
    /// A sequence or RNR NAK waiting for the responses owed before it.
    nak_pending: Option<(Psn, Aeth)>,
    /// Last PSN of the newest resource evicted to make room (see [`Responder::ack_psn`]).
    evicted: Option<Psn>,
    pub(super) comm_est_sent: bool,
    /// Re-acknowledgements still to send if the requester stays quiet after a retransmission
    /// (0: none; see [`Engine::reack_timer_expired`]).
    reack_left: u8,
    /// The PSN they acknowledge (the answer to the last duplicate).
    reack_psn: Psn,
    /// The PSN right after the last duplicate request (after the whole range of a READ), and
    /// whether a READ of that go-back-N sweep was charged a replay already: a duplicate READ
    /// there continues the sweep and is not charged again (see [`READ_REPLAYS`]). `None` after
    /// an in-order request or a refused duplicate.
    sweep_next: Option<(Psn, bool)>,
}

/// Re-acknowledgements after a retransmission episode, at most.
pub(super) const REACK_TRIES: u8 = 4;
/// Quiet time after the last duplicate before the first re-acknowledgement; each further one
/// waits four times longer (8, 32, 128, 512 ms). Two jiffies at HZ 250, so that the first one
/// comes after at least 4 ms of quiet (a kernel timer fires at a tick), when the requester has
/// finished its retransmission.
pub(super) const REACK_FIRST_US: u32 = 8_000;

/// The wait before the re-acknowledgement that leaves `left` more to send.
fn reack_delay(left: u8) -> u32 {
    let shift = 2 * u32::from(REACK_TRIES.saturating_sub(left).min(REACK_TRIES - 1));
    REACK_FIRST_US << shift
}

impl<R: DerefMut<Target = [Resource]>> Responder<R> {
    pub(super) fn new(res: R) -> Self {
        let mut r = Responder {
            res,
            res_head: 0,
            res_len: 0,
            pend_from: 0,
            epsn: Psn::ZERO,
            msn: 0,
            in_msg: InMsg::None,
            msg_off: 0,
            recv: None,
            wr_va: 0,
            wr_rkey: 0,
            wr_len: 0,
            wr_first: Psn::ZERO,
            ahead: WriteAhead::default(),
            place_ahead: true,
            nak_answered: false,
            nak_sent: false,
            gap_placed: None,
            uc_drop: false,
            ack_pending: None,
            nak_pending: None,
            evicted: None,
            comm_est_sent: false,
            reack_left: 0,
            reack_psn: Psn::ZERO,
            sweep_next: None,
        };
        r.reset();
        r
    }

    pub(super) fn reset(&mut self) {
        self.res.iter_mut().for_each(|r| *r = Resource::default());
        self.res_head = 0;
        self.res_len = 0;
        self.pend_from = 0;
        self.epsn = Psn::ZERO;
        self.msn = 0;
        self.in_msg = InMsg::None;
        self.msg_off = 0;
        self.recv = None;
        self.ahead.clear();
        self.nak_sent = false;
        self.gap_placed = None;
        self.uc_drop = false;
        self.ack_pending = None;
        self.nak_pending = None;
        self.evicted = None;
        self.comm_est_sent = false;
        self.reack_left = 0;
        self.sweep_next = None;
    }

    /// Entering ERR: nothing more is sent. Returns whether re-acknowledgements were pending
    /// (their timer is to be stopped).
    pub(super) fn on_flush(&mut self) -> bool {
        for r in self.res.iter_mut() {
            r.next = r.count;
        }
        self.in_msg = InMsg::None;
        self.ahead.clear();
        self.ack_pending = None;
        self.nak_pending = None;
        core::mem::take(&mut self.reack_left) > 0
    }

    /// Ring index of the `k`-th oldest resource (`k < res.len()`, `res_head < res.len()`;
    /// no division, so no panic path).
    fn at(&self, k: usize) -> usize {
        let i = self.res_head + k;
        if i >= self.res.len() {
            i - self.res.len()
        } else {
            i
        }
    }

    fn owed(&self) -> bool {
        debug_assert!(
            !(0..self.pend_from.min(self.res_len)).any(|k| self.res[self.at(k)].pending()),
            "a resource below pend_from owes responses"
        );
        (self.pend_from..self.res_len).any(|k| self.res[self.at(k)].pending())
    }

    /// The `k`-th oldest resource may owe responses from now on.
    fn owes_at(&mut self, k: usize) {
        self.pend_from = self.pend_from.min(k);
    }

    /// The oldest resource that owes responses (`k`, ring index), moving `pend_from` up to it.
    fn first_owed(&mut self) -> Option<(usize, usize)> {
        let found = (self.pend_from..self.res_len)
            .map(|k| (k, self.at(k)))
            .find(|&(_, i)| self.res[i].pending());
        self.pend_from = found.map_or(self.res_len, |(k, _)| k);
        found
    }

    /// The highest PSN at or below `psn` that a plain ACK may carry: none inside a recorded
    /// READ or atomic, whose own response acknowledges it. A requester must not take a plain
    /// ACK there as that READ's or atomic's completion, but rdma_rxe's completer does (a
    /// pending WR whose last PSN the ACK names is completed, rxe_comp.c `COMPST_COMP_ACK`): a
    /// READ whose response was lost would complete with nothing placed. The resources are in
    /// PSN order, so one walk from the newest suffices. Where the walk ends at or below an
    /// evicted resource (a requester with more READs outstanding than `max_dest_rd_atomic`,
    /// whose range is no longer known), the duplicate's own PSN `dup` (a SEND or WRITE
    /// packet, never inside a READ) is acknowledged instead.
    fn ack_psn(&self, mut psn: Psn, dup: Psn) -> Psn {
        for k in (0..self.res_len).rev() {
            let r = &self.res[self.at(k)];
            if r.kind == ResKind::Free {
                continue;
            }
            if psn.in_window(r.psn, r.count.max(1)) {
                psn = r.psn.wrapping_sub(1);
            } else if psn.after(r.psn.wrapping_add(r.count.max(1) - 1)) {
                // Past this one, and every older resource lies before it.
                break;
            }
        }
        match self.evicted {
            Some(e) if !psn.after(e) => dup,
            _ => psn,
        }
    }

    /// The recorded resource whose PSN range holds `psn`: its place from the oldest (`k`) and
    /// its ring index.
    fn find(&self, psn: Psn) -> Option<(usize, usize)> {
        // From the newest: a duplicate is mostly of a recent request, and a PSN past a
        // resource is in none of the older ones (they are in PSN order).
        for k in (0..self.res_len).rev() {
            let i = self.at(k);
            let r = &self.res[i];
            if r.kind == ResKind::Free {
                continue;
            }
            if psn.in_window(r.psn, r.count.max(1)) {
                return Some((k, i));
            }
            if psn.after(r.psn.wrapping_add(r.count.max(1) - 1)) {
                return None;
            }
        }
        None
    }

    /// The requester got further in the `k`-th oldest resource: the READs from it on get their
    /// replays back. The younger ones too: go-back-N sends every READ after the one it goes
    /// back to again, and they get no further while the requester works through an older one.
    fn refill_replays(&mut self, k: usize) {
        for k in k..self.res_len {
            let i = self.at(k);
            self.res[i].replays_left = READ_REPLAYS;
        }
    }
}

/// Where a request packet's PSN puts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arrival {
    /// The expected PSN.
    InOrder,
    /// RC: before the expected PSN (its answer was lost, or the packet was duplicated).
    Duplicate,
    /// RC: past the expected PSN (dropped; one sequence NAK per gap).
    Gap,
    /// UC: a first/only packet after a gap starts a new message.
    UcRestart,
    /// UC: a middle/last packet after a gap is dropped with its message.
    UcDrop,
}

/// Why a request failed at the responder, with what the requester and our CQ are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Malformed or unsupported request, a message longer than the receive buffer, a WRITE
    /// past its RETH length: NAK Invalid Request.
    Invalid,
    /// rkey, bounds or rights: NAK Remote Access Error.
    Access,
    /// A malformed receive WQE or a local protection fault while placing data: NAK Remote
    /// Operational Error.
    Operational,
    /// A page of an on-demand-paging MR is not present (its fault is queued): RC answers with
    /// an RNR NAK for the packet's PSN and changes nothing else; UC drops the message.
    NotPresent,
}

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// Whether responses or a NAK are still owed ([`Engine::run_responder`] sends them).
    pub fn responder_pending(&self) -> bool {
        self.resp.owed() || self.resp.nak_pending.is_some()
    }

    fn send_ack<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], psn: Psn, aeth: Aeth) -> Emit {
        self.send_answer(env, scratch, psn, aeth, false)
    }

    /// An ACK or NAK; `hole`: a hole report (see [`Bth::hole`]).
    fn send_answer<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        psn: Psn,
        aeth: Aeth,
        hole: bool,
    ) -> Emit {
        let mut h = Headers::new(Bth {
            opcode: opcode::RC_ACKNOWLEDGE,
            pkey: BTH_DEF_PKEY,
            dest_qp: self.cfg.dest_qpn,
            // Announces placement (to a requester that announced; others ignore the bit).
            sel: self.resp.place_ahead,
            hole,
            psn,
            ..Bth::default()
        });
        h.aeth = Some(aeth);
        let r = match super::assemble(scratch, &h, 0, |_| Ok(())) {
            Ok(len) => {
                self.counters.add(Stat::SentPkts, 1);
                self.counters.add(Stat::SentBytes, len as u64);
                env.emit(&scratch[..len], Dest::Connected)
            }
            Err(_) => Emit::Sent,
        };
        match aeth.syndrome() {
            Syndrome::Ack { .. } => {}
            Syndrome::RnrNak { .. } => self.stat(env, Stat::RnrNaksSent, 1),
            Syndrome::Nak(NakCode::PsnSeqError) if hole => self.stat(env, Stat::HoleReports, 1),
            Syndrome::Nak(NakCode::PsnSeqError) => self.stat(env, Stat::SeqNaksSent, 1),
            _ => self.stat(env, Stat::ErrNaksSent, 1),
        }
        r
    }

    /// A sequence or RNR NAK for `epsn`: sent after the responses owed for lower PSNs.
    fn defer_nak(&mut self, psn: Psn, aeth: Aeth) {
        self.resp.nak_sent = true;
        self.resp.gap_placed = None;
        self.resp.ack_pending = None;
        self.resp.nak_pending = Some((psn, aeth));
    }

    /// A fatal responder error (class A/C): the NAK goes out at once (the responses it would
    /// have waited for are dropped with everything else), the receive WQE in use completes
    /// with `status`, and the QP goes to ERR.
    fn fail<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        psn: Psn,
        fault: Fault,
        status: Option<u32>,
    ) {
        let code = match fault {
            Fault::Invalid => NakCode::InvalidRequest,
            Fault::Access => NakCode::RemoteAccessError,
            Fault::Operational | Fault::NotPresent => NakCode::RemoteOperationalError,
        };
        if let (Some(st), Some(r)) = (status, self.resp.recv.take()) {
            self.post(
                env,
                CqSel::Recv,
                &cqe(r.wr_id, st, wc_opcode::RECV, self.cfg.qpn),
            );
        }
        let a = Aeth::nak(self.resp.msn, code);
        self.send_ack(env, scratch, psn, a);
        // The affiliated event of the error class (IBTA 11.6.3.1): a request the responder
        // cannot execute, or an access violation; a local operational error is QP_FATAL.
        if self.state != QpState::Err {
            match fault {
                Fault::Invalid => env.event(Event::QpReqErr),
                Fault::Access => env.event(Event::QpAccessErr),
                Fault::Operational | Fault::NotPresent => {}
            }
        }
        self.fatal(env, fault == Fault::Operational);
    }

    /// A malformed or unsupported request (class C): NAK Invalid Request, and the receive WQE
    /// in use completes with REM_INV_REQ_ERR.
    fn fail_invalid<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], psn: Psn) {
        self.fail(
            env,
            scratch,
            psn,
            Fault::Invalid,
            Some(wc_status::REM_INV_REQ_ERR),
        );
    }

    /// Sends the coalesced ACK, if one is pending and nothing is owed before it.
    pub fn flush_ack<E: Env>(&mut self, env: &mut E, scratch: &mut [u8]) {
        if self.state == QpState::Err || self.resp.owed() {
            return;
        }
        // One dropped before it left ([`Emit::Dropped`]) is owed again: the shell's
        // continuation sends it at its next chance.
        if let Some((p, a)) = self.resp.nak_pending.take() {
            if self.send_ack(env, scratch, p, a) == Emit::Dropped {
                self.resp.nak_pending = Some((p, a));
            }
            return;
        }
        if let Some(p) = self.resp.ack_pending.take() {
            let a = Aeth::ack(self.resp.msn, AETH_ACK_UNLIMITED);
            if self.send_ack(env, scratch, p, a) == Emit::Dropped {
                self.resp.ack_pending = Some(p);
            }
        }
    }

    /// The re-acknowledgement timer fired: no request arrived since the last duplicate, so the
    /// requester's retransmission is over and our answer to it may have been lost. The same ACK
    /// goes out again, up to [`REACK_TRIES`] times with growing waits, until a new in-order
    /// request arrives. A requester must take duplicate ACKs (the wire duplicates packets), and
    /// this one rescues a requester that waits for it without a timer: rdma_rxe's completer,
    /// when an ACK reached it while it was still resending the WR the ACK covers, advances its
    /// expected PSN past that WR without completing it (rxe_comp.c `COMPST_WRITE_SEND` only
    /// completes a WR in state "pending", `COMPST_UPDATE_COMP` otherwise), and with nothing
    /// unacknowledged its retransmit timer neither retries nor re-arms (`COMPST_ERROR_RETRY`):
    /// the WR waits for an ACK that names it, for ever (README, "rdma_rxe strands a WR it has
    /// sent in full").
    pub fn reack_timer_expired<E: Env>(&mut self, env: &mut E, scratch: &mut [u8]) {
        if self.resp.reack_left == 0 || self.state == QpState::Err {
            return;
        }
        self.resp.reack_left -= 1;
        if self.resp.nak_pending.is_none() {
            self.resp.ack_pending = Some(self.resp.reack_psn);
            self.stat(env, Stat::ReAcks, 1);
        }
        self.flush_ack(env, scratch);
        if self.resp.reack_left > 0 {
            env.set_reack_timer(Some(reack_delay(self.resp.reack_left)));
        }
    }

    /// Abandons the message in progress (UC drop); a taken receive WQE is kept for the next
    /// message.
    fn abandon_msg(&mut self) {
        self.resp.in_msg = InMsg::None;
        self.resp.msg_off = 0;
    }

    /// UC: the message in progress is lost; drop until the next first/only packet.
    fn uc_drop_msg<E: Env>(&mut self, env: &mut E, psn: Psn, end: bool) {
        self.stat(env, Stat::RxDroppedMsgs, 1);
        self.abandon_msg();
        self.resp.uc_drop = !end;
        self.resp.epsn = psn.next();
    }

    pub(super) fn rx_ud<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>, info: &RxInfo) {
        let Some(deth) = pkt.deth() else {
            self.stat(env, Stat::RxBadHeaders, 1);
            return;
        };
        // Q_Key: IBTA 10.2.5 (the GSI's well-known Q_Key is the shell's concern).
        if deth.qkey != self.cfg.qkey {
            self.stat(env, Stat::RxDroppedMsgs, 1);
            return;
        }
        let payload = pkt.payload();
        if payload.len() > self.cfg.mtu as usize {
            self.stat(env, Stat::RxDroppedMsgs, 1);
            return;
        }
        let mut r = RecvWr::default();
        match env.recv_take(&mut r) {
            RecvTake::Taken => {}
            RecvTake::Empty => {
                self.stat(env, Stat::RxNoBuffer, 1);
                return;
            }
            RecvTake::Bad => {
                self.fatal(env, true);
                return;
            }
        }
        let total = GRH_LEN + payload.len();
        let mut c = cqe(r.wr_id, wc_status::SUCCESS, wc_opcode::RECV, self.cfg.qpn);
        if r.capacity() < total as u64 {
            c.status = wc_status::LOC_LEN_ERR;
            self.post(env, CqSel::Recv, &c);
            return;
        }
        let placed = wqe::scatter(env, &r, 0, &info.grh)
            .and_then(|()| wqe::scatter(env, &r, GRH_LEN as u64, payload));
        match placed {
            Ok(()) => {
                c.byte_len = total as u32;
                c.src_qp = deth.src_qp;
                c.wc_flags = wc_flags::GRH;
                if let Some(imm) = pkt.immdt() {
                    c.imm_data = u32::from_ne_bytes(imm.imm.to_be_bytes());
                    c.wc_flags |= wc_flags::WITH_IMM;
                }
                self.post_se(env, CqSel::Recv, &c, pkt.bth().se);
            }
            Err(wqe::NOT_PRESENT) => {
                // The receive buffer's page is not present (an on-demand-paging MR; its fault
                // is queued): the message is lost and its WQE completes in error, the QP goes
                // on (UD does not advertise ODP receives).
                self.stat(env, Stat::OdpMisses, 1);
                c.status = wc_status::LOC_PROT_ERR;
                self.post(env, CqSel::Recv, &c);
            }
            Err(status) => {
                c.status = status;
                self.post(env, CqSel::Recv, &c);
                self.fatal(env, true);
            }
        }
    }

    /// Where a request's PSN puts it (rxe's `check_psn`).
    fn classify(&self, psn: Psn, start: bool) -> Arrival {
        let d = psn.diff(self.resp.epsn);
        match (self.cfg.qp_type, d) {
            (QpType::Rc, 0) => Arrival::InOrder,
            (QpType::Rc, d) if d < 0 => Arrival::Duplicate,
            (QpType::Rc, _) => Arrival::Gap,
            // UC: a gap loses the message in progress; a new message may start anywhere.
            (_, 0) if !self.resp.uc_drop => Arrival::InOrder,
            _ if start => Arrival::UcRestart,
            _ => Arrival::UcDrop,
        }
    }

    /// A request packet for an RC or UC QP.
    pub(super) fn rx_request<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let rc = self.cfg.qp_type == QpType::Rc;
        let info = pkt.info();
        let psn = pkt.bth().psn;
        match self.classify(psn, info.position.is_start()) {
            Arrival::InOrder => {
                self.resp.nak_answered = self.resp.nak_sent;
                self.resp.nak_sent = false;
                self.resp.sweep_next = None;
                if self.resp.reack_left > 0 {
                    // The requester moved on: its retransmission reached us and was answered.
                    self.resp.reack_left = 0;
                    env.set_reack_timer(None);
                }
            }
            Arrival::Gap => {
                self.stat(env, Stat::OutOfSeqRequests, 1);
                self.rx_gap(env, scratch, pkt);
                return;
            }
            Arrival::Duplicate => {
                self.stat(env, Stat::DuplicateRequests, 1);
                self.rx_duplicate(env, pkt);
                return;
            }
            Arrival::UcRestart => {
                self.resp.uc_drop = false;
                self.abandon_msg();
            }
            Arrival::UcDrop => {
                if self.resp.in_msg != InMsg::None {
                    self.stat(env, Stat::RxDroppedMsgs, 1);
                }
                self.abandon_msg();
                self.resp.uc_drop = true;
                self.resp.epsn = psn.next();
                return;
            }
        }
        // Opcode sequence.
        let want = match info.op {
            Operation::Send => InMsg::Send,
            Operation::RdmaWrite => InMsg::Write,
            _ => InMsg::None,
        };
        let seq_ok = if info.position.is_start() {
            self.resp.in_msg == InMsg::None
        } else {
            self.resp.in_msg == want && want != InMsg::None
        };
        if !seq_ok {
            self.stat(env, Stat::RxBadHeaders, 1);
            if rc {
                self.fail_invalid(env, scratch, psn);
                return;
            }
            self.abandon_msg();
            if !info.position.is_start() {
                self.uc_drop_msg(env, psn, false);
                return;
            }
        }
        match info.op {
            Operation::Send | Operation::RdmaWrite => self.rx_send_write(env, scratch, pkt),
            Operation::RdmaReadRequest if rc => self.rx_read(env, scratch, pkt),
            Operation::CompareSwap | Operation::FetchAdd if rc => self.rx_atomic(env, scratch, pkt),
            Operation::AtomicWrite if rc => self.rx_atomic_write(env, scratch, pkt),
            Operation::Flush if rc => self.rx_flush(env, scratch, pkt),
            _ => {
                self.stat(env, Stat::RxBadHeaders, 1);
                if rc {
                    self.fail_invalid(env, scratch, psn);
                }
            }
        }
        if rc && !self.resp.ahead.is_empty() {
            self.advance_ahead(env, scratch);
        }
    }

    fn take_recv<E: Env>(&mut self, env: &mut E) -> RecvTake {
        if self.resp.recv.is_some() {
            return RecvTake::Taken;
        }
        let mut r = RecvWr::default();
        let t = env.recv_take(&mut r);
        if t == RecvTake::Taken {
            self.resp.recv = Some(r);
        }
        t
    }

    fn rx_send_write<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let rc = self.cfg.qp_type == QpType::Rc;
        let info = pkt.info();
        let psn = pkt.bth().psn;
        let end = info.position.is_end();
        let payload = pkt.payload();
        if !wire::payload_len_ok(info, payload.len(), self.cfg.mtu as usize) {
            self.stat(env, Stat::RxBadHeaders, 1);
            if rc {
                self.fail_invalid(env, scratch, psn);
            } else {
                self.uc_drop_msg(env, psn, end);
            }
            return;
        }
        let is_send = info.op == Operation::Send;
        // A receive WQE: at the start of a SEND, or for the immediate of a WRITE.
        if info.needs_recv_wqe() {
            match self.take_recv(env) {
                RecvTake::Taken => {}
                RecvTake::Empty if rc => {
                    self.stat(env, Stat::RxNoBuffer, 1);
                    self.defer_nak(psn, Aeth::rnr_nak(self.resp.msn, self.cfg.min_rnr_timer));
                    return;
                }
                RecvTake::Empty => {
                    self.stat(env, Stat::RxNoBuffer, 1);
                    self.uc_drop_msg(env, psn, end);
                    return;
                }
                RecvTake::Bad => {
                    if rc {
                        self.fail(env, scratch, psn, Fault::Operational, None);
                    } else {
                        self.fatal(env, true);
                    }
                    return;
                }
            }
        }
        if info.position.is_start() {
            self.resp.msg_off = 0;
            if !is_send {
                let Some(reth) = pkt.reth() else {
                    self.stat(env, Stat::RxBadHeaders, 1);
                    return;
                };
                // A DMA length beyond 2^31 (C9-92): NAK Invalid Request.
                if u64::from(reth.len) > MAX_MSG {
                    self.stat(env, Stat::RxBadHeaders, 1);
                    if rc {
                        self.fail_invalid(env, scratch, psn);
                    } else {
                        self.uc_drop_msg(env, psn, end);
                    }
                    return;
                }
                let ok = reth.len == 0
                    || self.remote_ok(
                        env,
                        scratch,
                        (psn, end),
                        access::REMOTE_WRITE,
                        (reth.rkey, reth.va, u64::from(reth.len)),
                        Access::RemoteWrite,
                    );
                if !ok {
                    return;
                }
                self.resp.wr_va = reth.va;
                self.resp.wr_rkey = reth.rkey;
                self.resp.wr_len = u64::from(reth.len);
                self.resp.wr_first = psn;
            }
        }
        // Place the payload.
        let off = self.resp.msg_off;
        let placed = if is_send {
            match self.resp.recv {
                Some(r) if off + payload.len() as u64 > r.capacity() => Err(Fault::Invalid),
                Some(r) => wqe::scatter(env, &r, off, payload).map_err(|s| {
                    if s == wqe::NOT_PRESENT {
                        Fault::NotPresent
                    } else {
                        Fault::Operational
                    }
                }),
                None => Err(Fault::Operational),
            }
        } else if off + payload.len() as u64 > self.resp.wr_len
            || (end && off + payload.len() as u64 != self.resp.wr_len)
        {
            // C9-92: a WRITE's payload is its RETH's DMA length, no more and no less.
            Err(Fault::Invalid)
        } else if payload.is_empty() {
            Ok(())
        } else {
            env.mem_write(
                self.resp.wr_rkey,
                self.resp.wr_va.wrapping_add(off),
                payload,
                Access::RemoteWrite,
            )
            .map_err(|e| {
                if e == MemError::NotPresent {
                    Fault::NotPresent
                } else {
                    Fault::Access
                }
            })
        };
        if let Err(fault) = placed {
            if fault == Fault::NotPresent {
                // Nothing of this packet counts as received (`epsn`, `msg_off` and the
                // receive WQE in `resp.recv` stay): RC asks for it again once its page is in,
                // as a receive resource that is not ready (the requester waits the RNR timer
                // and resends from this PSN); UC loses the message.
                self.odp_miss(env, psn, end);
                return;
            }
            if fault == Fault::Access {
                self.remote_access_error(env, scratch, psn, end);
                return;
            }
            if rc {
                // IBTA 9.9.3.1.1 classes: too long -> Invalid Request (our receive completes with
                // LOC_LEN_ERR); a fault placing into our own buffer -> Remote Operational Error
                // (LOC_PROT_ERR).
                let status = if fault == Fault::Invalid {
                    wc_status::LOC_LEN_ERR
                } else {
                    wc_status::LOC_PROT_ERR
                };
                self.fail(env, scratch, psn, fault, Some(status));
            } else {
                if is_send {
                    if let Some(r) = self.resp.recv.take() {
                        let st = if fault == Fault::Invalid {
                            wc_status::LOC_LEN_ERR
                        } else {
                            wc_status::LOC_PROT_ERR
                        };
                        self.post(
                            env,
                            CqSel::Recv,
                            &cqe(r.wr_id, st, wc_opcode::RECV, self.cfg.qpn),
                        );
                    }
                }
                self.uc_drop_msg(env, psn, end);
            }
            return;
        }
        self.resp.msg_off = off + payload.len() as u64;
        self.resp.in_msg = if is_send { InMsg::Send } else { InMsg::Write };
        self.resp.epsn = psn.next();
        if end {
            self.resp.in_msg = InMsg::None;
            self.resp.msn = (self.resp.msn + 1) & wire::MASK24;
            if info.completes_recv() {
                if let Some(r) = self.resp.recv.take() {
                    let mut c = cqe(r.wr_id, wc_status::SUCCESS, wc_opcode::RECV, self.cfg.qpn);
                    if is_send {
                        c.byte_len = self.resp.msg_off as u32;
                    } else {
                        c.opcode = wc_opcode::RECV_RDMA_WITH_IMM;
                        c.byte_len = self.resp.msg_off as u32;
                    }
                    if let Some(imm) = pkt.immdt() {
                        c.imm_data = u32::from_ne_bytes(imm.imm.to_be_bytes());
                        c.wc_flags |= wc_flags::WITH_IMM;
                    }
                    c.src_qp = self.cfg.dest_qpn;
                    let mut bad_inv = false;
                    if let Some(ieth) = pkt.ieth() {
                        // SEND with invalidate: the message is placed; the rkey it names is
                        // invalidated before the completion says so. A key we cannot
                        // invalidate fails the receive and the QP (rxe's class J).
                        if env.mr_invalidate(ieth.rkey, true).is_ok() {
                            c.imm_data = ieth.rkey;
                            c.wc_flags |= wc_flags::WITH_INV;
                        } else {
                            c.status = wc_status::REM_INV_REQ_ERR;
                            bad_inv = true;
                        }
                    }
                    self.post_se(env, CqSel::Recv, &c, pkt.bth().se);
                    if bad_inv {
                        self.fatal(env, false);
                        return;
                    }
                }
            }
        }
        if rc && pkt.bth().ack_req {
            self.resp.ack_pending = Some(psn);
        }
    }

    /// Whether a remote access may go on: the QP's right `qp_right` and the memory (`mem`:
    /// rkey, address, length) for `acc`. Otherwise it has been answered: a page of an
    /// on-demand-paging MR that is not present by [`Self::odp_miss`], anything else as an
    /// access error. `at`: the packet's PSN and whether it ends its message.
    fn remote_ok<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        at: (Psn, bool),
        qp_right: u32,
        mem: (u32, u64, u64),
        acc: Access,
    ) -> bool {
        let (psn, end) = at;
        let r = if self.cfg.access & qp_right == 0 {
            Err(MemError::Access)
        } else {
            env.mem_check(mem.0, mem.1, mem.2, acc)
        };
        match r {
            Ok(()) => true,
            Err(MemError::NotPresent) => {
                self.odp_miss(env, psn, end);
                false
            }
            Err(_) => {
                self.remote_access_error(env, scratch, psn, end);
                false
            }
        }
    }

    /// A request met a page of an on-demand-paging MR that is not present (the shell has
    /// queued its fault): nothing of the packet counts as received. RC answers with an RNR NAK
    /// for its PSN, as for a receive resource that is not ready (the requester waits the RNR
    /// timer and resends from this PSN; the request executes once, when it finds its pages);
    /// UC loses the message.
    fn odp_miss<E: Env>(&mut self, env: &mut E, psn: Psn, end: bool) {
        self.stat(env, Stat::OdpMisses, 1);
        if self.cfg.qp_type == QpType::Rc {
            self.defer_nak(psn, Aeth::rnr_nak(self.resp.msn, self.cfg.min_rnr_timer));
        } else {
            self.uc_drop_msg(env, psn, end);
        }
    }

    /// An rkey, bounds or rights violation: RC NAKs it and goes to ERR (class C); UC drops the
    /// message.
    fn remote_access_error<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        psn: Psn,
        end: bool,
    ) {
        if self.cfg.qp_type == QpType::Rc {
            self.fail(
                env,
                scratch,
                psn,
                Fault::Access,
                Some(wc_status::REM_ACCESS_ERR),
            );
        } else {
            self.uc_drop_msg(env, psn, end);
        }
    }
}
