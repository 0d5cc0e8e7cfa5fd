// SPDX-License-Identifier: GPL-2.0-only
//! The requester's retransmit timer: the round-trip estimate (RFC 6298), arming and stopping
//! the timer, what an expiry does (an ACK poll, an early expiry of the estimate, a busy peer
//! passed over, a timeout that spends a retry), the timeout's probe and the undo of a
//! spurious timeout (docs/reliability.md).

use super::{
    requester::{Probe, Requester, Undo},
    wc_status, Engine, Env, Resource, SqEntry, Stat, WrKind, ACK_POLL_US,
};
use crate::logic::qp_state::{QpState, QpType};
use core::ops::DerefMut;

/// The retransmit timer never fires sooner than this after progress (RFC 6298 says 1 s for
/// TCP; a software RoCE path round trip is well under a millisecond, but kernel timers tick
/// every 4 ms at HZ 250 and a TCG guest stalls its vCPUs for several milliseconds).
pub const RTO_MIN_US: u64 = 10_000;

/// The clock granularity G of RFC 6298 (a jiffy at HZ 250).
pub(super) const RTO_GRANULARITY_US: u64 = 4_000;

/// Early expiries double the wait up to this shift at most (the QP's `timeout` bounds it
/// anyway).
const RTO_MAX_SHIFT: u8 = 6;

/// Expiries in a row that a busy peer may pass over before the timeout counts.
pub(super) const BUSY_WAITS: u8 = 8;

/// The same, while the peer is heard moving forward between expiries (working through a
/// replay, not repeating one answer): rdma_rxe on a loaded host can take longer than
/// [`BUSY_WAITS`] backed-off timeouts to work through the replays queued before it, and an
/// expiry that resends then only queues one more.
pub(super) const BUSY_WAITS_MOVING: u8 = 64;

/// ACK polls in a row that packets still in transit may put off (each by [`ACK_POLL_US`]).
pub(super) const POLL_WAITS: u8 = 4;

impl Requester {
    /// The retransmission timeout the round-trip estimate gives (RFC 6298: SRTT + max(G,
    /// 4 RTTVAR), at least [`RTO_MIN_US`]); `None` before the first sample.
    pub(super) fn rto_us(&self) -> Option<u64> {
        if self.srtt_us == 0 && self.rttvar_us == 0 {
            return None;
        }
        let v = self.srtt_us + (4 * self.rttvar_us).max(RTO_GRANULARITY_US);
        Some(v.max(RTO_MIN_US))
    }

    /// A round-trip sample of `r` microseconds (RFC 6298 section 2).
    pub(super) fn rtt_sample(&mut self, r: u64) {
        // A zero sample (a coarse clock) still counts: it is "less than a tick".
        let r = r.max(1);
        if self.srtt_us == 0 && self.rttvar_us == 0 {
            self.srtt_us = r;
            self.rttvar_us = r / 2;
        } else {
            let d = self.srtt_us.abs_diff(r);
            self.rttvar_us = (3 * self.rttvar_us + d) / 4;
            self.srtt_us = (7 * self.srtt_us + r) / 8;
        }
    }
}

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// Restarts, stops or leaves the retransmit timer: it runs while a sent PSN is
    /// unacknowledged (RC, not waiting for RNR), and `progress` restarts it.
    pub(super) fn update_timer<E: Env>(&mut self, env: &mut E, progress: bool) {
        let outstanding = self.cfg.qp_type == QpType::Rc
            && self.unacked()
            && !self.req.rnr_wait
            && matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe);
        match (outstanding, self.cfg.retry_timeout_usecs()) {
            (true, Some(us)) => {
                // Nothing unacknowledged asked for an ACK: the timer polls for it soon, rather
                // than waiting a retransmit timeout for a loss that did not happen.
                let poll = self.unasked_tail();
                if progress || !self.req.timer_armed || poll != self.req.timer_poll {
                    self.req.due_us = None;
                    self.req.early = 0;
                    let us = if poll {
                        us.min(ACK_POLL_US)
                    } else {
                        let full = us << self.req.backoff.min(2);
                        // The round-trip estimate fires sooner; the QP's timeout stays the
                        // limit at which an expiry spends a retry.
                        match (self.req.rto_us(), env.clock_us()) {
                            (Some(rto), Some(now)) if rto < full => {
                                self.req.due_us = Some(now.wrapping_add(full));
                                rto
                            }
                            _ => full,
                        }
                    };
                    env.set_retry_timer(Some(us));
                    self.req.timer_armed = true;
                    self.req.timer_poll = poll;
                }
            }
            _ => {
                self.req.due_us = None;
                if self.req.timer_armed {
                    env.set_retry_timer(None);
                    self.req.timer_armed = false;
                }
            }
        }
    }

    /// Some PSN ever sent is not acknowledged. Not `acked != psn`: after a timeout went back,
    /// the PSNs it will send again stay unacknowledged even while nothing has gone out again
    /// (the shell may be unable to send: its packets in flight capped, or the path pushing
    /// back), and the timer must keep running and spending retries, so that a requester whose
    /// path is dead fails with RETRY_EXC_ERR within `timeout` x (`retry_cnt` + 1) whether or
    /// not it can transmit (rdma_rxe 6.12 does not: its retransmissions stall behind the skbs
    /// it still counts in flight).
    pub(super) fn unacked(&self) -> bool {
        self.req.acked.before(self.req.high)
    }

    /// Everything unacknowledged was sent, once, none of it asked for an ACK, and nothing more
    /// can be sent now: an unsignaled tail, not a loss (a probe or a go-back in progress asks,
    /// or is not done sending). A requester that could send more but was held back (its
    /// budget, a congested path, local delivery) is in mid-stream: its next packets ask soon
    /// enough (every [`ACK_REQ_EVERY`]-th PSN), and a poll then would race the packets still
    /// on their way (in loopback, another CPU may be delivering them) and be taken for a gap.
    fn unasked_tail(&self) -> bool {
        self.unacked()
            && !self.req.asked.after(self.req.acked)
            && self.req.psn == self.req.high
            && self.req.probe.is_none()
            && !self.can_send()
    }

    /// The retransmit timer fired: go back N from the oldest unacknowledged PSN, or fail the
    /// oldest WR with RETRY_EXC_ERR when the retries are spent. The caller then runs the
    /// requester.
    pub fn retry_timer_expired<E: Env>(&mut self, env: &mut E) {
        self.req.timer_armed = false;
        let active = matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe);
        if !active || self.cfg.qp_type != QpType::Rc || !self.unacked() || self.req.rnr_wait {
            return;
        }
        // A timer armed for a poll that finds the requester able to send again (more WRs were
        // posted, and the shell has not run it yet): not a tail any more, and not a timeout
        // either; it runs for a full timeout from now.
        if self.req.timer_poll && self.can_send() {
            self.update_timer(env, false);
            return;
        }
        // An ACK poll: the unacknowledged WRs are an unsignaled tail that never asked for an
        // ACK (see `send_packet`), so silence is no sign of loss. Its newest packet goes out
        // again, asking; the peer answers the duplicate with an ACK of everything it has
        // (C9-105). No retry is spent and the window stays open. Should the poll itself go
        // unanswered, it did ask, and the next expiry is a timeout.
        if self.unasked_tail() {
            // Packets of ours may still be on their way to the peer inside this host (another
            // CPU is delivering loopback packets, and its vCPU may be stalled for longer than
            // the poll's wait): the poll would overtake them, and the peer would take it for
            // a gap and answer with a sequence NAK. It waits another poll interval, a few
            // times at most (a busy device's other traffic must not hold it off for good).
            if self.req.poll_waits < POLL_WAITS && env.in_transit() {
                self.req.poll_waits += 1;
                self.update_timer(env, false);
                return;
            }
            self.req.poll_waits = 0;
            self.stat(env, Stat::AckPolls, 1);
            self.rewind(self.req.high.wrapping_sub(1));
            self.req.poll = true;
            self.update_timer(env, false);
            self.settle(env);
            return;
        }
        // A peer that answers only what it answered before is working through duplicates of
        // our requests (rdma_rxe replays a duplicate READ in full, and answers each duplicate
        // SEND or WRITE packet, one request after another): a retransmission now would only
        // queue another replay behind them, and a slow peer (TCG, KASAN) then falls further
        // behind at every expiry until the retries run out. The expiry is passed over while
        // such answers keep coming, [`BUSY_WAITS`] times in a row at most, or
        // [`BUSY_WAITS_MOVING`] while the answers move forward between expiries (a peer that only
        // ever repeats itself still ends in RETRY_EXC_ERR, later).
        // An expiry of the round-trip estimate, before the QP's `timeout` has run out: the
        // requester resends as a timeout would (a probe first, see `go_back_on_timeout`), but
        // spends no retry and does not back the `timeout` off; the wait doubles until the next
        // expiry, which the `timeout` bounds. A peer that answered with READ responses since
        // is replaying older READs of ours, busy, not deaf: it waits (duplicate ACKs do not
        // count: a responder re-acknowledges a retransmission that went quiet, and a stale
        // ACK says nothing about what was lost after it).
        if let (Some(due), Some(now)) = (self.req.due_us, env.clock_us()) {
            let left = due.wrapping_sub(now) as i64;
            if left > 1_000 {
                if !core::mem::take(&mut self.req.replay_heard) {
                    self.stat(env, Stat::RtoExpiries, 1);
                    self.req.retrying = false;
                    if self.resend_oldest_alone(env) {
                        self.stat(env, Stat::SelectiveResends, 1);
                    } else {
                        self.go_back_on_timeout();
                    }
                }
                self.req.early = (self.req.early + 1).min(RTO_MAX_SHIFT);
                let rto = self.req.rto_us().unwrap_or(RTO_MIN_US) << self.req.early;
                env.set_retry_timer(Some(rto.min(left as u64)));
                self.req.timer_armed = true;
                self.req.timer_poll = false;
                self.settle(env);
                return;
            }
            self.req.due_us = None;
        }
        let moving = core::mem::take(&mut self.req.heard_moving);
        self.req.heard_last = None;
        let patience = if moving {
            BUSY_WAITS_MOVING
        } else {
            BUSY_WAITS
        };
        if core::mem::take(&mut self.req.heard) && self.req.busy_waits < patience {
            self.req.busy_waits += 1;
            self.stat(env, Stat::PeerBusyWaits, 1);
            self.update_timer(env, false);
            return;
        }
        self.stat(env, Stat::Timeouts, 1);
        self.req.retrying = false;
        self.req.backoff = (self.req.backoff + 1).min(2);
        if self.spend_retry(env) {
            self.go_back_on_timeout();
        }
        self.update_timer(env, false);
        self.settle(env);
    }

    /// A timeout's resend: back to the oldest unacknowledged PSN with the window closed to one
    /// packet, probing with the oldest WR first (see [`Probe`]).
    pub(super) fn go_back_on_timeout(&mut self) {
        // A probe that went unanswered keeps the place the first timeout found: the
        // requester returns there, not to just after the probe.
        let was = self.req.probe.unwrap_or(Probe {
            idx: self.sq.next,
            next: self.sq.next,
            cur_pkt: self.req.cur_pkt,
            psn: self.req.psn,
        });
        // Only the first timeout of an episode can be undone (a later one follows a probe that
        // went unanswered, or a guess that was wrong).
        let first = self.req.probe.is_none() && self.req.guess.is_none();
        self.req.holes.clear();
        self.req.shrink_window(true);
        let p = self.req.acked;
        self.rewind(p);
        // A probe whose answer led back to `was` and nothing came since: the guess was
        // wrong, the rest of the window is lost; go back N in full this time.
        if self.req.guess.take().is_none() {
            self.req.probe = Some(Probe {
                idx: self.sq.next,
                ..was
            });
        }
        self.req.undo = None;
        if first && self.sq.next != self.sq.head {
            // The probe sends one packet again, or a READ's request whose responses
            // acknowledge the whole READ.
            let e = self.sq.entry(self.sq.next);
            let proof = if e.kind == WrKind::Read {
                e.first_psn.wrapping_add(e.npkts.max(1))
            } else {
                p.next()
            };
            if proof.before(self.req.high) {
                self.req.undo = Some(Undo {
                    proof,
                    high: self.req.high,
                    first: None,
                });
            }
        }
    }

    /// An acknowledgement moved `acked`: the second one past what the timeout's probe resent,
    /// short of everything sent before it ([`Undo`]), shows the timeout was spurious: original
    /// packets kept arriving. The window goes back up to the threshold the timeout set, half
    /// of what was in flight, at once instead of by slow start from one packet: the
    /// conservative response of RFC 5682, since a round trip that outgrew the estimate is a
    /// queue growing (a sender paced by DCQCN behind a bottleneck). Returns whether it was.
    pub(super) fn undo_spurious_timeout(&mut self) -> bool {
        let Some(mut u) = self.req.undo else {
            return false;
        };
        let acked = self.req.acked;
        if !acked.after(u.proof) {
            return false;
        }
        if !acked.before(u.high) {
            // Everything at once: ambiguous (step 2a of RFC 5682).
            self.req.undo = None;
            return false;
        }
        match u.first {
            None => {
                u.first = Some(acked);
                self.req.undo = Some(u);
                false
            }
            Some(f) if acked.after(f) => {
                self.req.undo = None;
                self.req.cwnd = self.req.cwnd.max(self.req.ssthresh);
                true
            }
            Some(_) => false,
        }
    }

    /// Spends one retry; when none is left, completes the oldest WR with RETRY_EXC_ERR and
    /// moves the QP to ERR. Returns whether the retry may go ahead.
    pub(super) fn spend_retry<E: Env>(&mut self, env: &mut E) -> bool {
        if self.req.retry_left == 0 {
            self.stat(env, Stat::RetryExceeded, 1);
            self.fail_oldest(env, wc_status::RETRY_EXC_ERR);
            return false;
        }
        self.req.retry_left -= 1;
        true
    }

    /// Progress after a timeout's probe: the requester goes back to where the timer found it,
    /// unless acknowledgements already took it further.
    pub(super) fn end_probe(&mut self) {
        if let Some(p) = self.req.probe.take() {
            let probed = self.sq.entry(p.idx);
            self.req.guess = Some(probed.first_psn.wrapping_add(probed.npkts.max(1)));
            if p.psn.after(self.req.psn) && !p.psn.after(self.req.high) {
                self.stand_at(p.next, p.cur_pkt, p.psn);
            }
        } else if self.req.guess.is_some_and(|g| self.req.acked.after(g)) {
            // Answers beyond the probed WR: the peer was slow, not deaf.
            self.req.guess = None;
        }
    }

    /// The RNR timer fired: the requester may resend.
    pub fn rnr_timer_expired(&mut self) {
        self.req.rnr_wait = false;
    }
}
