// SPDX-License-Identifier: GPL-2.0-only
//! The completer: takes ACKs, NAKs and responses, places READ and atomic results, completes
//! send WRs strictly in SQ order, and tells the requester when to go back N.

use super::{
    ahead::ReadAhead, cqe, wc_status, wqe, Engine, Env, Resource, SqEntry, Stat, WrKind, RC_WINDOW,
};
use crate::logic::{
    opcode::{Operation, Position},
    psn::Psn,
    qp_state::QpState,
    segment::Segmentation,
    wire::{self, NakCode, Packet, Syndrome},
};
use core::ops::DerefMut;

/// How many WRs after the front one a READ response is looked for in (`place_later_read`):
/// the READs a requester has outstanding beside the front one (`max_rd_atomic` is at most 16
/// at rdma_rxe's and rrxe's usual settings) with WRITEs and SENDs between them.
const LATER_READS: u32 = 64;

/// What a response packet is to the completer, decided before anything changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// At or past the next expected response of the front WR: process it.
    Accept,
    /// Acknowledges only what was acknowledged already.
    Duplicate,
    /// Beyond anything sent.
    Bogus,
}

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// Completes the front WR with `status` (posting a CQE when signalled or in error, or with
    /// the error found earlier for it).
    pub(super) fn complete_front<E: Env>(&mut self, env: &mut E, status: u32) {
        let idx = self.sq.done;
        let e = self.sq.entry(idx);
        let status = e.err.unwrap_or(status);
        if e.signaled || status != wc_status::SUCCESS {
            let mut c = cqe(self.sq.wr_id(idx), status, e.kind.wc_opcode(), self.cfg.qpn);
            if status == wc_status::SUCCESS {
                c.byte_len = e.len;
            }
            self.retire_front(env, Some(&c));
        } else {
            self.retire_front(env, None);
        }
    }

    /// Fails the WR that holds `psn` (the oldest outstanding one when none does) with
    /// `status`, after completing every older WR with WR_FLUSH_ERR, and moves the QP to ERR.
    fn fail_at<E: Env>(&mut self, env: &mut E, psn: Option<Psn>, status: u32) {
        let mut culprit = self.sq.done;
        if let Some(p) = psn {
            let mut i = self.sq.done;
            while i != self.sq.head {
                let e = self.sq.entry(i);
                if !e.started {
                    break;
                }
                if p.in_window(e.first_psn, e.npkts.max(1)) {
                    culprit = i;
                    break;
                }
                i = i.wrapping_add(1);
            }
        }
        if culprit != self.sq.head {
            let e = self.sq.entry_mut(culprit);
            if e.err.is_none() {
                e.err = Some(status);
            }
        }
        self.fatal(env, false);
    }

    /// Fails the oldest outstanding WR (retries spent).
    pub(super) fn fail_oldest<E: Env>(&mut self, env: &mut E, status: u32) {
        self.fail_at(env, None, status);
    }

    /// Progress: retries and the RNR counter start over, and the timer restarts.
    fn progress<E: Env>(&mut self, env: &mut E) {
        self.req.retry_left = self.cfg.retry_cnt;
        self.req.rnr_left = self.cfg.rnr_retry;
        self.req.retrying = false;
        self.req.backoff = 0;
        self.req.forget_heard();
        self.req.busy_waits = 0;
        self.req.poll_waits = 0;
        // The timed packet is acknowledged: a round-trip sample (Karn: a retransmission in
        // between cancelled it, `rewind`).
        if let Some((end, t)) = self.req.timing {
            if !end.after(self.req.acked) {
                self.req.timing = None;
                if let Some(now) = env.clock_us() {
                    self.req.rtt_sample(now.wrapping_sub(t));
                }
            }
        }
        if self.undo_spurious_timeout() {
            self.stat(env, Stat::SpuriousTimeouts, 1);
        }
        self.end_probe();
        self.update_timer(env, true);
    }

    /// Everything before `p` is acknowledged: the window opens by as many PSNs as this
    /// acknowledges (slow start after a timeout closed it, then congestion avoidance,
    /// [`super::requester::Requester::open_window`]).
    fn set_acked(&mut self, p: Psn) {
        if p.after(self.req.acked) {
            let n = p.distance_from(self.req.acked).min(RC_WINDOW);
            self.req.open_window(n);
        }
        self.req.acked = p;
        if self.req.ack_seen.is_some_and(|s| s.before(p)) {
            self.req.ack_seen = None;
        }
    }

    /// An implied NAK (a response skipped an outstanding READ or atomic) or a READ response
    /// gap: go back to WR `i`'s first missing PSN, once per round of recovery.
    fn retry_from<E: Env>(&mut self, env: &mut E, i: u32) {
        self.stat(env, Stat::ImpliedNaks, 1);
        if self.req.retrying {
            return;
        }
        self.req.retrying = true;
        if self.spend_retry(env) {
            self.req.shrink_window(false);
            let e = self.sq.entry(i);
            let p = e.resume_psn();
            // A READ is asked again for its missing responses alone. What was sent after it
            // went out and is answered in order after it: READ responses are placed as they
            // come (`place_later_read`) and acknowledgements remembered (`ack_seen`). Going
            // back N asked every later READ again too, and a responder that replays a READ in
            // full from the PSN asked (rdma_rxe, and rrxe) then sent each of them twice at
            // every loss, falling behind until another WR's retries ran out.
            if e.kind == WrKind::Read
                && self.req.probe.is_none()
                && self.resend_range(env, p, e.first_psn.wrapping_add(e.npkts))
            {
                return;
            }
            self.rewind(p);
        }
    }

    /// Completes the front WR, which the peer has fully answered. A WR that a rewind put back
    /// in line to be sent again is not sent again.
    fn complete_answered<E: Env>(&mut self, env: &mut E) {
        let i = self.sq.done;
        let e = self.sq.entry(i);
        let mut stand = None;
        if e.kind.is_local() {
            // Executed already (it is started), no PSN: done once it is the front.
            if i == self.sq.next {
                self.sq.next = i.wrapping_add(1);
            }
        } else if i == self.sq.next {
            let after = e.first_psn.wrapping_add(e.npkts.max(1));
            stand = Some(match self.req.sel_resume.take() {
                // Answered before the resend that went back for it went out (the responses
                // that were missing came after all): back to where the requester stood.
                Some(r) if r.next != i => (r.next, r.cur_pkt, r.psn),
                // Where a go-back had put the requester: inside this WR (a selective resend
                // of its own packets then took it back further) or at its start. On past it.
                r => {
                    let psn = r.map_or(self.req.psn, |r| r.psn);
                    (
                        i.wrapping_add(1),
                        0,
                        if after.after(psn) { after } else { psn },
                    )
                }
            });
        } else if e.kind.is_rd_atomic() {
            self.req.rd_atomic = self.req.rd_atomic.saturating_sub(1);
        }
        self.complete_front(env, wc_status::SUCCESS);
        if let Some((next, cur_pkt, psn)) = stand {
            // Counted after the front is retired: the READs and atomics between it and
            // where the requester stands, some of which may have been answered meanwhile.
            self.stand_at(next, cur_pkt, psn);
        }
    }

    /// Completes the local operations (REG_MR, LOCAL_INV) the requester already executed and
    /// that are now at the front: they have no PSN and wait only for what was before them (a
    /// READ or atomic whose answer just completed it; `ack_through` does the same after an
    /// acknowledgement).
    fn complete_local_front<E: Env>(&mut self, env: &mut E) {
        while self.sq.done != self.sq.head {
            let e = self.sq.entry(self.sq.done);
            if !e.started || !e.kind.is_local() {
                break;
            }
            self.complete_answered(env);
        }
    }

    /// `acked` moved: a requester that a rewind left behind it skips what is acknowledged.
    fn catch_up(&mut self) {
        if !self.req.acked.after(self.req.psn) {
            return;
        }
        let e = self.sq.entry(self.sq.next);
        if self.sq.next != self.sq.head
            && e.started
            && matches!(e.kind, WrKind::Send | WrKind::Write)
            && self.req.acked.in_window(e.first_psn, e.npkts)
        {
            self.req.cur_pkt = self.req.acked.distance_from(e.first_psn);
        }
        self.req.psn = self.req.acked;
    }

    /// The peer acknowledged every PSN up to and including `psn`: completes the SEND/WRITE
    /// WRs this covers; `acked` stops at the first missing response of a READ or atomic.
    /// Returns whether anything moved, and the READ or atomic the acknowledgement passed
    /// without its response having come (an implied NAK, IBTA 9.7.5.1.4): nothing after it
    /// completes before it.
    fn ack_through<E: Env>(&mut self, env: &mut E, psn: Psn) -> (bool, Option<u32>) {
        let mut moved = false;
        let mut limit = psn;
        let mut implied = None;
        while self.sq.done != self.sq.head {
            let i = self.sq.done;
            let e = self.sq.entry(i);
            if !e.started {
                break;
            }
            if e.kind.is_local() {
                self.complete_answered(env);
                moved = true;
                continue;
            }
            if e.kind == WrKind::Read && e.read_done >= e.npkts {
                // Every response came while an older WR waited for its own.
                let end = e.first_psn.wrapping_add(e.npkts);
                if end.after(self.req.acked) && !end.after(self.req.high) {
                    self.set_acked(end);
                }
                self.complete_answered(env);
                moved = true;
                continue;
            }
            if e.kind.is_rd_atomic() {
                if !e.last_psn().after(psn) && psn.before(self.req.high) {
                    // Acknowledged past it: remembered for when its answer has come.
                    // Not `Option::is_none_or` (Rust 1.82; the kernel's minimum is 1.78).
                    if !matches!(self.req.ack_seen, Some(s) if !psn.after(s)) {
                        self.req.ack_seen = Some(psn);
                    }
                }
                let before = e.resume_psn().wrapping_sub(1);
                if limit.after(before) {
                    limit = before;
                }
                if !e.last_psn().after(psn) {
                    implied = Some(i);
                }
                break;
            }
            if e.last_psn().after(psn) {
                break;
            }
            self.complete_answered(env);
            moved = true;
        }
        let p = limit.next();
        if p.after(self.req.acked) && !p.after(self.req.high) {
            self.set_acked(p);
            self.catch_up();
            moved = true;
        }
        if moved {
            self.progress(env);
        }
        (moved, implied)
    }

    /// [`Self::ack_through`], then a retry from an implied NAK.
    fn ack_and_retry<E: Env>(&mut self, env: &mut E, psn: Psn) {
        if let (_, Some(i)) = self.ack_through(env, psn) {
            self.retry_from(env, i);
        }
    }

    fn verdict(&self, psn: Psn) -> Verdict {
        if !psn.before(self.req.high) {
            Verdict::Bogus
        } else if psn.before(self.req.acked) {
            Verdict::Duplicate
        } else {
            Verdict::Accept
        }
    }

    /// Handles an ACK, NAK, READ response or atomic acknowledge. Returns whether the
    /// requester may have work again.
    pub(super) fn rx_response<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>) -> bool {
        if !matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            self.stat(env, Stat::RxBadState, 1);
            return false;
        }
        let psn = pkt.bth().psn;
        match self.verdict(psn) {
            Verdict::Bogus => {
                self.stat(env, Stat::RxBadResponses, 1);
                return false;
            }
            Verdict::Duplicate => {
                self.stat(env, Stat::DuplicateResponses, 1);
                self.req
                    .hear(psn, pkt.info().op == Operation::RdmaReadResponse);
                return false;
            }
            Verdict::Accept => {}
        }
        match pkt.info().op {
            Operation::Acknowledge => self.rx_ack(env, pkt, psn),
            Operation::RdmaReadResponse => self.rx_read_response(env, pkt, psn),
            Operation::AtomicAcknowledge => self.rx_atomic_ack(env, pkt, psn),
            _ => self.stat(env, Stat::RxBadResponses, 1),
        }
        self.absorb_placed(env);
        self.check_drained(env);
        self.update_timer(env, false);
        self.requester_ready()
    }

    fn rx_ack<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>, psn: Psn) {
        let Some(aeth) = pkt.aeth() else {
            self.stat(env, Stat::RxBadHeaders, 1);
            return;
        };
        if pkt.bth().hole {
            // Acknowledges nothing: not an answer in sequence.
            if !self.rx_hole_report(env, psn, aeth) {
                self.stat(env, Stat::RxBadResponses, 1);
            }
            return;
        }
        self.hear_peer(pkt.bth().sel);
        match aeth.syndrome() {
            Syndrome::Ack { .. } => {
                self.learn_peer(psn, false);
                self.ack_and_retry(env, psn)
            }
            Syndrome::RnrNak { timer } => {
                self.stat(env, Stat::RnrNaksRcvd, 1);
                self.ack_through(env, psn.wrapping_sub(1));
                if self.cfg.rnr_retry != 7 {
                    if self.req.rnr_left == 0 {
                        self.stat(env, Stat::RnrRetryExceeded, 1);
                        self.fail_at(env, Some(psn), wc_status::RNR_RETRY_EXC_ERR);
                        return;
                    }
                    self.req.rnr_left -= 1;
                }
                // From the NAK's PSN, or from a READ/atomic before it still missing responses.
                let p = self.req.acked;
                self.rewind(p);
                self.req.rnr_wait = true;
                env.arm_rnr_timer(wire::rnr_timer_usecs(timer));
            }
            Syndrome::Nak(NakCode::PsnSeqError) => {
                self.stat(env, Stat::SeqNaksRcvd, 1);
                self.learn_peer(psn, true);
                self.ack_through(env, psn.wrapping_sub(1));
                // A NAK for a gap this retry already covers (a duplicate, or one that crossed
                // our retransmission) changes nothing.
                if self.state == QpState::Err {
                    return;
                }
                if self.req.retrying {
                    // Unless it repeats the NAK that the packets sent alone answered, long
                    // enough ago for them to have been lost.
                    if self.resend_again(env, psn) {
                        self.stat(env, Stat::SelectiveResends, 1);
                    }
                    return;
                }
                // A NAK inside the packets being sent again alone crossed them.
                if self
                    .req
                    .sel_sent
                    .is_some_and(|(from, end)| psn.after(from) && psn.before(end))
                {
                    return;
                }
                self.req.retrying = true;
                if !self.spend_retry(env) {
                    return;
                }
                // A peer that places WRITE packets past the gap needs only the missing one
                // (the window stays open); one that may not goes back N.
                let sel = match self.selective_end(psn) {
                    Some(end) if self.req.acked == psn => self.resend_range(env, psn, end),
                    _ => false,
                };
                if sel {
                    self.stat(env, Stat::SelectiveResends, 1);
                } else {
                    // Once per episode (`retrying`): the window halves, and the go-back
                    // resends only what the smaller window holds.
                    self.req.shrink_window(false);
                    let p = self.req.acked;
                    self.rewind(p);
                }
            }
            Syndrome::Nak(code) => {
                self.ack_through(env, psn.wrapping_sub(1));
                let status = match code {
                    NakCode::InvalidRequest => wc_status::REM_INV_REQ_ERR,
                    NakCode::RemoteAccessError => wc_status::REM_ACCESS_ERR,
                    _ => wc_status::REM_OP_ERR,
                };
                // Charged to the WR that holds the PSN, never to an older one still in flight.
                self.fail_at(env, Some(psn), status);
            }
            Syndrome::Reserved(_) => self.stat(env, Stat::RxBadResponses, 1),
        }
    }

    fn rx_read_response<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>, psn: Psn) {
        // Everything before the response is acknowledged by it.
        self.ack_and_retry(env, psn.wrapping_sub(1));
        if self.state == QpState::Err || self.sq.done == self.sq.head {
            self.stat(env, Stat::RxBadResponses, 1);
            return;
        }
        let idx = self.sq.done;
        let e = self.sq.entry(idx);
        if e.started && matches!(e.kind, WrKind::AtomicWrite | WrKind::Flush) {
            self.rx_placement_response(env, pkt, psn, &e);
            return;
        }
        if !e.started || e.kind != WrKind::Read || !psn.in_window(e.first_psn, e.npkts) {
            if !self.place_later_read(env, pkt, psn) {
                self.stat(env, Stat::RxBadResponses, 1);
            }
            return;
        }
        let expected = e.resume_psn();
        if psn.before(expected) {
            self.stat(env, Stat::DuplicateResponses, 1);
            self.req.hear(psn, true);
            return;
        }
        let owner = (idx, e.first_psn.get());
        let k = psn.distance_from(e.first_psn);
        if psn != expected {
            self.req.hear(psn, false);
            let ahead = psn.distance_from(expected) - 1;
            if !ReadAhead::fits(ahead) {
                // Too far past the gap to remember: re-read from the first missing byte.
                self.req.replay_heard = true;
                self.retry_from(env, idx);
                return;
            }
            if self.req.ahead.has(owner, ahead) {
                self.stat(env, Stat::DuplicateResponses, 1);
                self.req.replay_heard = true;
                return;
            }
            // Ahead of a gap (reordered, or after a loss): placed now, remembered, and not
            // asked for again. Only the READ's last response past the gap makes the gap a
            // loss: then the READ is re-read from its first missing segment (the rest of a
            // lost tail is the retransmit timer's).
            if !self.place_read_response(env, pkt, psn, idx, &e, k) {
                return;
            }
            self.req.ahead.set(owner, ahead);
            self.stat(env, Stat::ReadResponsesAhead, 1);
            // The peer is answering, in order, the READ it has not finished: no expiry of the
            // round-trip estimate may ask it again meanwhile (each request makes rdma_rxe
            // replay the READ from the gap to its end: 13 replays of 230 packets, one per
            // 75 ms expiry, while the first was still streaming, in a B.loss1 capture), and a
            // timeout is passed over as the peer's being busy.
            self.req.hear(psn, true);
            if k + 1 == e.npkts {
                self.retry_from(env, idx);
            }
            return;
        }
        if !self.place_read_response(env, pkt, psn, idx, &e, k) {
            return;
        }
        // The responses already placed right after it need no re-read.
        let done = k + 1 + self.req.ahead.advance(owner);
        self.sq.entry_mut(idx).read_done = done;
        self.set_acked(e.first_psn.wrapping_add(done));
        if done >= e.npkts {
            self.complete_answered(env);
            self.complete_local_front(env);
        }
        self.catch_up();
        self.progress(env);
    }

    /// What came while an older WR waited for its answer, once that one is answered: the READs
    /// now at the front whose responses all came complete, a READ with some of them moves
    /// `acked` into it, and the WRs the peer acknowledged past them (`ack_seen`) complete; a
    /// READ still missing responses before such an acknowledgement is an implied NAK of its
    /// own.
    fn absorb_placed<E: Env>(&mut self, env: &mut E) {
        if self.state == QpState::Err || self.sq.done == self.sq.head {
            return;
        }
        let e = self.sq.entry(self.sq.done);
        let placed = e.started && e.kind == WrKind::Read && e.read_done > 0;
        if !placed && self.req.ack_seen.is_none() {
            return;
        }
        let upto = match self.req.ack_seen {
            Some(s) if !s.before(self.req.acked) => s,
            _ => self.req.acked.wrapping_sub(1),
        };
        self.ack_and_retry(env, upto);
        if self.state == QpState::Err || self.sq.done == self.sq.head {
            return;
        }
        let i = self.sq.done;
        let e = self.sq.entry(i);
        if e.started && e.kind == WrKind::Read {
            let p = e.resume_psn();
            if p.after(self.req.acked) && !p.after(self.req.high) {
                self.set_acked(p);
                self.catch_up();
            }
            if e.read_gap && e.read_done < e.npkts {
                // Its responses went on past a gap of its own while it waited: lost, since
                // the peer answers in order.
                self.sq.entry_mut(i).read_gap = false;
                self.retry_from(env, i);
            }
        }
    }

    /// A READ response for a READ behind the front WR (which waits for responses of its own
    /// being asked again): placed if it is the next one that READ expects, so that the READ
    /// need not be asked again when its turn comes; one it already has is a duplicate.
    /// Returns false for a response that belongs to no READ in flight. Bounded: the READs
    /// among the first [`LATER_READS`] WRs after the front.
    fn place_later_read<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>, psn: Psn) -> bool {
        let from = self.sq.done.wrapping_add(1);
        let Some((i, e)) = self.sq.holding(psn, from, LATER_READS) else {
            return false;
        };
        if e.kind != WrKind::Read {
            return false;
        }
        let expected = e.resume_psn();
        if psn.before(expected) {
            self.stat(env, Stat::DuplicateResponses, 1);
            self.req.hear(psn, true);
            return true;
        }
        if psn != expected {
            // Past a gap of its own: asked for again as soon as it is the front
            // (`absorb_placed`), not only when something past it implies the loss.
            self.sq.entry_mut(i).read_gap = true;
            return false;
        }
        let k = psn.distance_from(e.first_psn);
        if self.place_read_response(env, pkt, psn, i, &e, k) {
            self.sq.entry_mut(i).read_done = k + 1;
            self.stat(env, Stat::ReadResponsesAhead, 1);
            // The peer answers in order: the front's answer comes after these.
            self.req.hear(psn, true);
        }
        true
    }

    /// Places READ response `psn`, segment `k` of the READ at SQ index `idx`, into the WR's
    /// scatter list. A response of the wrong size or position, or memory that refuses it,
    /// fails the WR; returns whether the response was placed.
    fn place_read_response<E: Env>(
        &mut self,
        env: &mut E,
        pkt: &Packet<'_>,
        psn: Psn,
        idx: u32,
        e: &SqEntry,
        k: u32,
    ) -> bool {
        let Some(s) = Segmentation::new(e.len, self.cfg.mtu).and_then(|g| g.segment(k)) else {
            self.stat(env, Stat::RxBadResponses, 1);
            return false;
        };
        let payload = pkt.payload();
        // A re-read starts again with FIRST (or ONLY): the position is relative to the request
        // that was answered, so accept FIRST/ONLY where MIDDLE/LAST was due.
        let pos_ok = matches!(
            (s.position, pkt.info().position),
            (Position::Only, Position::Only)
                | (Position::First, Position::First)
                | (Position::Middle, Position::Middle | Position::First)
                | (Position::Last, Position::Last | Position::Only)
        );
        if !pos_ok || payload.len() != s.len as usize {
            self.fail_at(env, Some(psn), wc_status::BAD_RESP_ERR);
            return false;
        }
        let slot = self.sq.slot(idx);
        let placed = match wqe::decode_send_wqe(slot).and_then(|w| wqe::source(slot, &w)) {
            Some(src) => src.scatter(env, u64::from(s.offset), payload),
            None => Err(wc_status::LOC_QP_OP_ERR),
        };
        if placed == Err(wqe::NOT_PRESENT) {
            // A page of the READ's on-demand-paging MR is not present (its fault is queued):
            // dropped before anything changed; asked for again (a later response's re-read
            // from the gap, or the retransmit timer).
            self.stat(env, Stat::OdpMisses, 1);
            return false;
        }
        if let Err(status) = placed {
            self.fail_at(env, Some(psn), status);
            return false;
        }
        true
    }

    /// The answer to an ATOMIC WRITE or a FLUSH at the front: a READ RESPONSE ONLY without
    /// payload for its PSN (as rdma_rxe answers both; its completer takes any READ response
    /// with an ACK syndrome for an ATOMIC WRITE).
    fn rx_placement_response<E: Env>(
        &mut self,
        env: &mut E,
        pkt: &Packet<'_>,
        psn: Psn,
        e: &SqEntry,
    ) {
        if e.first_psn != psn {
            self.stat(env, Stat::RxBadResponses, 1);
            return;
        }
        if pkt.info().position != Position::Only || !pkt.payload().is_empty() {
            self.fail_at(env, Some(psn), wc_status::BAD_RESP_ERR);
            return;
        }
        self.complete_answered(env);
        self.complete_local_front(env);
        self.set_acked(psn.next());
        self.catch_up();
        self.progress(env);
    }

    fn rx_atomic_ack<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>, psn: Psn) {
        self.ack_and_retry(env, psn.wrapping_sub(1));
        if self.state == QpState::Err || self.sq.done == self.sq.head {
            self.stat(env, Stat::RxBadResponses, 1);
            return;
        }
        let idx = self.sq.done;
        let e = self.sq.entry(idx);
        if !e.started || !matches!(e.kind, WrKind::CmpSwap | WrKind::FetchAdd) || e.first_psn != psn
        {
            self.stat(env, Stat::RxBadResponses, 1);
            return;
        }
        let Some(ack) = pkt.atmack() else {
            self.stat(env, Stat::RxBadHeaders, 1);
            return;
        };
        let slot = self.sq.slot(idx);
        let placed = match wqe::decode_send_wqe(slot).and_then(|w| wqe::source(slot, &w)) {
            Some(src) => src.scatter(env, 0, &ack.orig.to_ne_bytes()),
            None => Err(wc_status::LOC_QP_OP_ERR),
        };
        if placed == Err(wqe::NOT_PRESENT) {
            // Dropped before anything of the atomic changed (its fault is queued): the
            // retransmit timer asks again, and the responder answers from its cache (the
            // atomic runs once).
            self.stat(env, Stat::OdpMisses, 1);
            return;
        }
        if let Err(status) = placed {
            self.fail_at(env, Some(psn), status);
            return;
        }
        self.complete_answered(env);
        self.complete_local_front(env);
        self.set_acked(psn.next());
        self.catch_up();
        self.progress(env);
    }
}
