// SPDX-License-Identifier: GPL-2.0-only
//! The requester: turns send WRs into request packets, keeps the RC window and the retransmit
//! timer, and goes back N when the completer or the timer says packets were lost.

use super::{
    ahead::ReadAhead, opcode, selective::PeerMode, transport_of, wc_status, wqe, Config, Dest,
    Emit, Engine, Env, Resource, SqEntry, Stat, WrKind, ACK_POLL_US, ACK_REQ_EVERY, RC_WINDOW,
};
use crate::logic::{
    opcode::{Position, Transport},
    psn::{Psn, PSN_HALF},
    qp_state::{QpState, QpType},
    segment::Segmentation,
    wire::{AtomicEth, Bth, Deth, Feth, Headers, Ieth, ImmDt, Reth, BTH_DEF_PKEY},
};
use core::ops::DerefMut;

/// Requester state.
#[derive(Debug)]
pub(super) struct Requester {
    /// Next PSN to send.
    pub(super) psn: Psn,
    /// Oldest unacknowledged PSN: every PSN before it is acknowledged.
    pub(super) acked: Psn,
    /// One past the highest PSN ever sent (what is before it and sent again is a retransmit).
    pub(super) high: Psn,
    /// Packet index in the WR at `next` (0: not started).
    pub(super) cur_pkt: u32,
    /// READ/atomic requests outstanding.
    pub(super) rd_atomic: u32,
    /// Waiting for the RNR timer.
    pub(super) rnr_wait: bool,
    pub(super) rnr_left: u8,
    /// Retries left before RETRY_EXC_ERR (timeouts, sequence NAKs, implied NAKs).
    pub(super) retry_left: u8,
    /// A retry triggered by an out-of-order response is under way: further such triggers are
    /// ignored until progress or a timeout (rxe's `started_retry`).
    pub(super) retrying: bool,
    /// The retransmit timer was armed and not stopped since.
    pub(super) timer_armed: bool,
    /// It was armed for an ACK poll ([`ACK_POLL_US`]), not for a retransmission.
    pub(super) timer_poll: bool,
    /// One past the newest PSN sent asking for an ACK (AckReq). When `acked` has reached it,
    /// whatever is unacknowledged never asked: an unsignaled tail (see `send_packet`).
    pub(super) asked: Psn,
    /// The next packet is an ACK poll: the newest packet sent again, asking for an ACK.
    pub(super) poll: bool,
    /// Timeouts in a row without progress, as the timer's backoff (0..=2: the timer waits 1, 2,
    /// then 4 times the `timeout` value, inside IBTA's "between 1 and 4 times" (C9-140)). A
    /// slow peer replaying a window of READs gets the time to reach the one we wait for.
    pub(super) backoff: u8,
    /// After a timeout, only the oldest WR goes out again until an answer makes progress.
    pub(super) probe: Option<Probe>,
    /// Unacknowledged PSNs allowed in flight ([`RC_WINDOW`] at most). A timeout closes it to
    /// one packet and each acknowledged PSN opens it by one (slow start, RFC 5681): a timeout
    /// on a peer that is slow rather than deaf (a software RoCE peer working through a backlog)
    /// must not send it another window of duplicates, each of which it acknowledges again
    /// (C9-105) before it reaches the request we wait for. Going back N in full at every
    /// timeout made such a peer fall further behind each time, until the retries ran out.
    pub(super) cwnd: u32,
    /// The last probe was answered and the requester went back to where the timeout found it,
    /// guessing that the peer was slow, not deaf; the PSN after the probed WR. An answer past
    /// it confirms the guess; a timeout before one disproves it, and that timeout goes back N
    /// in full.
    pub(super) guess: Option<Psn>,
    /// The window before the first timeout of an episode, kept until an answer shows whether
    /// the timeout was spurious ([`Undo`]).
    pub(super) undo: Option<Undo>,
    /// Answers came since the last expiry, none of them progress (duplicate ACKs, READ
    /// responses we already have or that lie past a gap): the peer is busy with older
    /// requests of ours, not deaf. See [`Engine::retry_timer_expired`].
    pub(super) heard: bool,
    /// Expiries in a row passed over because the peer was heard ([`BUSY_WAITS`] at most).
    pub(super) busy_waits: u8,
    /// ACK polls in a row put off because packets were still on their way inside this host
    /// ([`POLL_WAITS`] at most; see [`Env::in_transit`]).
    pub(super) poll_waits: u8,
    /// The slow-start threshold: below it each acknowledged PSN opens `cwnd` by one, above it
    /// by [`CWND_AI`] per window acknowledged (congestion avoidance, RFC 5681). A loss halves
    /// `cwnd` into it ([`Engine::on_loss`]).
    pub(super) ssthresh: u32,
    /// PSNs acknowledged in congestion avoidance not yet turned into a larger `cwnd`.
    pub(super) cwnd_acc: u32,
    /// The smoothed round-trip time and its variation (RFC 6298), in microseconds; `srtt` 0:
    /// no sample yet.
    pub(super) srtt_us: u64,
    pub(super) rttvar_us: u64,
    /// The packet being timed for a round-trip sample: the PSN whose acknowledgement ends the
    /// sample (one past the packet) and when it was sent. Only a packet sent for the first time
    /// is timed, and a retransmission cancels the sample (Karn's algorithm).
    pub(super) timing: Option<(Psn, u64)>,
    /// The retransmit timer is armed for the round-trip estimate, sooner than the QP's
    /// `timeout`: when that `timeout` (with its backoff) runs out, on the [`Env::clock_us`]
    /// clock. Only then does an expiry spend a retry.
    pub(super) due_us: Option<u64>,
    /// Early expiries since the timer was started (each doubles the next wait).
    pub(super) early: u8,
    /// The packet just sent asked for an ACK.
    pub(super) asked_now: bool,
    /// Of what `heard` heard, READ responses: the peer is replaying READs of ours, and an
    /// early expiry (which would send it yet another READ to replay) waits.
    pub(super) replay_heard: bool,
    /// The front READ's responses placed ahead of a gap (see [`ReadAhead`]).
    pub(super) ahead: ReadAhead,
    /// Whether the peer's responder places WRITE packets past a gap (see [`PeerMode`]).
    pub(super) peer: PeerMode,
    /// A selective resend is under way: the send pointer to return to once the packets up to
    /// the last field went out again (`sq.next`, `cur_pkt`, `psn`, `rd_atomic`, end PSN).
    pub(super) sel_resume: Option<(u32, u32, Psn, u32, Psn)>,
    /// The packets last sent again alone (first PSN, PSN after the last), until the answer
    /// that tells what the peer did with them.
    pub(super) sel_sent: Option<(Psn, Psn)>,
    /// Answers in a row that only a go-back-N peer would give ([`super::selective::PLACES_GBN_VOTES`]).
    pub(super) gbn_votes: u8,
}

/// The slow-start threshold never falls below this: a go-back-N window of a few packets costs
/// little per loss, and a smaller one would leave the path idle for a round trip at a time.
pub(super) const MIN_SSTHRESH: u32 = 8;

/// Congestion avoidance opens the window by this many packets per window acknowledged.
pub(super) const CWND_AI: u32 = 2;

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

/// ACK polls in a row that packets still in transit may put off (each by [`ACK_POLL_US`]).
pub(super) const POLL_WAITS: u8 = 4;

/// A timeout's probe (RFC 5682's F-RTO, for RC). A timeout cannot tell a lost request from a
/// peer that is slow to answer (a software RoCE peer on a loaded host). Going back N over a
/// window of READs makes such a peer answer every READ again before the response we wait
/// for (rxe replays a duplicate READ in full), so a second timeout finds it still busy with
/// duplicates, and so on until the retries are spent. So the timeout sends only the oldest WR
/// again, one packet of it at first (the timeout closes the window, `cwnd`); when an answer
/// makes progress, the requester returns to where it was and lets the rest of the window answer
/// for itself.
#[derive(Clone, Copy, Debug)]
pub(super) struct Probe {
    /// The WR sent again: the requester does not go past it until progress.
    pub(super) idx: u32,
    /// Where the requester stood when the timer fired.
    pub(super) next: u32,
    pub(super) cur_pkt: u32,
    pub(super) psn: Psn,
}

/// What a timeout took from the window, to give back if it proves spurious (RFC 5682's F-RTO
/// detection with RFC 4015's response). A timeout closes the window to one packet and probes
/// with the oldest WR; a requester paced by DCQCN behind a queue that grew faster than the
/// round-trip estimate sees such timeouts while nothing was lost. An acknowledgement of
/// `proof` or later (a PSN the probe did not send again) shows that the original packets
/// arrived: the window and threshold return to what they were.
#[derive(Clone, Copy, Debug)]
pub(super) struct Undo {
    pub(super) cwnd: u32,
    pub(super) ssthresh: u32,
    /// The first PSN the probe cannot have had acknowledged.
    pub(super) proof: Psn,
}

impl Requester {
    pub(super) fn new(cfg: &Config) -> Self {
        Requester {
            psn: Psn::ZERO,
            acked: Psn::ZERO,
            high: Psn::ZERO,
            cur_pkt: 0,
            rd_atomic: 0,
            rnr_wait: false,
            rnr_left: cfg.rnr_retry,
            retry_left: cfg.retry_cnt,
            retrying: false,
            timer_armed: false,
            timer_poll: false,
            asked: Psn::ZERO,
            poll: false,
            backoff: 0,
            probe: None,
            guess: None,
            undo: None,
            cwnd: RC_WINDOW,
            heard: false,
            busy_waits: 0,
            poll_waits: 0,
            ssthresh: RC_WINDOW,
            cwnd_acc: 0,
            srtt_us: 0,
            rttvar_us: 0,
            timing: None,
            due_us: None,
            early: 0,
            asked_now: false,
            replay_heard: false,
            ahead: ReadAhead::default(),
            peer: PeerMode::Unknown,
            sel_resume: None,
            sel_sent: None,
            gbn_votes: 0,
        }
    }

    pub(super) fn on_flush(&mut self) {
        self.cur_pkt = 0;
        self.rd_atomic = 0;
        self.rnr_wait = false;
        self.retrying = false;
        self.timer_armed = false;
        self.timer_poll = false;
        self.poll = false;
        self.probe = None;
        self.guess = None;
        self.undo = None;
        self.cwnd = RC_WINDOW;
        self.heard = false;
        self.replay_heard = false;
        self.ahead.clear();
        self.peer = PeerMode::Unknown;
        self.sel_resume = None;
        self.sel_sent = None;
        self.gbn_votes = 0;
        self.busy_waits = 0;
        self.poll_waits = 0;
        self.ssthresh = RC_WINDOW;
        self.cwnd_acc = 0;
        self.timing = None;
        self.due_us = None;
        self.early = 0;
        self.acked = self.psn;
        self.asked = self.psn;
    }

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

    /// `n` more PSNs acknowledged: slow start below `ssthresh`, congestion avoidance above.
    pub(super) fn open_window(&mut self, n: u32) {
        let ss = n.min(self.ssthresh.saturating_sub(self.cwnd));
        self.cwnd = self.cwnd.saturating_add(ss);
        let n = n - ss;
        if n > 0 {
            let w = self.cwnd.max(1);
            self.cwnd_acc = self.cwnd_acc.saturating_add(n.saturating_mul(CWND_AI));
            let inc = self.cwnd_acc / w;
            self.cwnd_acc -= inc * w;
            self.cwnd = self.cwnd.saturating_add(inc);
        }
        self.cwnd = self.cwnd.min(RC_WINDOW);
    }

    /// A loss was detected (a sequence NAK, an implied NAK, a READ response gap: `timeout`
    /// false) or the timer expired (`timeout` true): the slow-start threshold halves from
    /// what was in flight, and `cwnd` falls to it (fast recovery) or, on a timeout, to one
    /// packet (slow start). Go-back-N resends everything in flight after a loss, so the
    /// smaller the window the less each loss costs; the window grows back as ACKs come.
    pub(super) fn shrink_window(&mut self, timeout: bool) {
        // A timeout that follows a timeout's probe (nothing sent since but what the timer
        // resent) holds the threshold where the first one put it (RFC 5681, section 3.1).
        if !(timeout && (self.probe.is_some() || self.guess.is_some())) {
            let flight = self.high.distance_from(self.acked).min(self.cwnd);
            self.ssthresh = (flight / 2).max(MIN_SSTHRESH);
        }
        self.cwnd = if timeout {
            1
        } else {
            self.ssthresh.min(self.cwnd.max(1))
        };
        self.cwnd_acc = 0;
    }
}

impl Config {
    /// The retransmit timeout its `timeout` code means: 4.096 us * 2^timeout, in microseconds
    /// (`None` for 0: no timer).
    pub fn retry_timeout_usecs(&self) -> Option<u64> {
        match self.timeout {
            0 => None,
            t => Some((4096u64 << t.min(31)) / 1000),
        }
    }
}

/// Request opcode for a WR kind at a position.
fn request_opcode(t: Transport, kind: WrKind, pos: Position, imm: bool, inv: bool) -> u8 {
    use opcode::*;
    let op = match kind {
        // An R_Key to invalidate wins over immediate data (the verbs layer never sets both).
        WrKind::Send => send_opcode(t, pos, imm && !inv, inv),
        WrKind::Write => write_opcode(t, pos, imm),
        WrKind::Read => Some(t.base() | RC_RDMA_READ_REQUEST),
        WrKind::CmpSwap => Some(t.base() | RC_COMPARE_SWAP),
        WrKind::FetchAdd => Some(t.base() | RC_FETCH_ADD),
        WrKind::AtomicWrite => Some(t.base() | RC_ATOMIC_WRITE),
        WrKind::Flush => Some(t.base() | RC_FLUSH),
        // Local operations send nothing (the requester never asks for their opcode).
        WrKind::RegMr | WrKind::LocalInv | WrKind::BindMw => None,
    };
    // The combinations without an opcode (WRITE on UD, invalidation outside RC, a
    // multi-packet UD SEND) are refused when the WR is posted.
    op.unwrap_or(t.base() | RC_SEND_ONLY)
}

/// A READ whose responses fit in less than half the PSN space at the path MTU.
fn read_fits(e: &SqEntry, cfg: &Config) -> bool {
    // Not `Option::is_none_or` (Rust 1.82; the kernel's minimum is 1.78).
    !matches!(Segmentation::new(e.len, cfg.mtu), Some(s) if s.count() >= PSN_HALF)
}

/// Why the requester cannot start the WR at `next` now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    Open,
    /// The RC window of unacknowledged PSNs is full.
    Window,
    /// `max_rd_atomic` READs/atomics are outstanding.
    RdAtomic,
    /// A fenced WR waits for earlier READs/atomics.
    Fence,
    /// A timeout's probe waits for an answer before the next WR goes out.
    Probe,
}

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// Whether the requester has work it could do now.
    pub fn requester_ready(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
            && !self.req.rnr_wait
            && self.sq.next != self.sq.head
            // SQD starts no WR; what was started goes on and may be sent again (a go-back, a
            // probe, an ACK poll).
            && (self.state != QpState::Sqd || self.sq.entry(self.sq.next).started)
    }

    fn gate(&self, e: &SqEntry) -> Gate {
        if self.cfg.qp_type != QpType::Rc {
            return Gate::Open;
        }
        if self.req.psn.distance_from(self.req.acked) >= self.req.cwnd {
            return Gate::Window;
        }
        if self.req.probe.is_some_and(|p| p.idx != self.sq.next) {
            return Gate::Probe;
        }
        if self.req.cur_pkt > 0 {
            return Gate::Open;
        }
        if e.fence && self.req.rd_atomic > 0 {
            return Gate::Fence;
        }
        // `max_rd_atomic` 0: the QP initiates no READ or atomic (rdma_rxe's requester waits
        // the same way until a modify raises it).
        if e.kind.is_rd_atomic() && self.req.rd_atomic >= u32::from(self.cfg.max_rd_atomic) {
            return Gate::RdAtomic;
        }
        // The PSNs outstanding stay within half the PSN space (beyond it a PSN cannot be told
        // old from new): a READ takes one per response packet, so a long one waits for the
        // acknowledgements before it (one that cannot fit at all fails, `run_requester`).
        if e.kind == WrKind::Read {
            let pkts = Segmentation::new(e.len, self.cfg.mtu).map_or(1, |s| s.count());
            if pkts < PSN_HALF && self.req.psn.distance_from(self.req.acked) + pkts >= PSN_HALF {
                return Gate::Window;
            }
        }
        Gate::Open
    }

    /// Sends up to `budget` packets; returns how many went out.
    pub fn run_requester<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], budget: u32) -> u32 {
        let mut sent = 0;
        while sent < budget && self.requester_ready() {
            let idx = self.sq.next;
            let e = self.sq.entry(idx);
            if self.gate(&e) != Gate::Open {
                break;
            }
            if e.kind.is_local() {
                // Executed once, where the requester reaches it in SQ order (a rewind that goes
                // back past it does not run it again); it completes once every older WR has.
                if !e.started {
                    if let Err(status) = self.local_op(env, idx, e.kind) {
                        self.sq.entry_mut(idx).err = Some(status);
                        self.fatal(env, true);
                        self.settle(env);
                        return sent;
                    }
                    let psn = self.req.psn;
                    let m = self.sq.entry_mut(idx);
                    m.started = true;
                    m.first_psn = psn;
                    m.npkts = 0;
                }
                self.sq.next = idx.wrapping_add(1);
                if self.sq.done == idx {
                    self.complete_front(env, wc_status::SUCCESS);
                }
                continue;
            }
            if self.req.cur_pkt == 0 && !e.started {
                if self.cfg.qp_type == QpType::Rc
                    && e.kind == WrKind::Read
                    && !read_fits(&e, &self.cfg)
                {
                    // Its responses would take half the PSN space or more (2 GiB at a 256-byte
                    // MTU): it cannot be sent (the responder would NAK it, C9-94).
                    self.sq.entry_mut(idx).err = Some(wc_status::LOC_LEN_ERR);
                    self.fatal(env, true);
                    self.settle(env);
                    return sent;
                }
                let npkts = match e.kind {
                    WrKind::Send | WrKind::Write | WrKind::Read => {
                        Segmentation::new(e.len, self.cfg.mtu).map_or(1, |s| s.count())
                    }
                    _ => 1,
                };
                let psn = self.req.psn;
                let m = self.sq.entry_mut(idx);
                m.first_psn = psn;
                m.npkts = npkts;
                m.started = true;
            }
            let e = self.sq.entry(idx);
            let psn = self.req.psn;
            let asked = self.req.asked;
            let emitted = match self.send_packet(env, scratch, idx, &e) {
                Ok(r) => r,
                Err(wqe::NOT_PRESENT) => {
                    // A page of the payload's on-demand-paging MR is not present: nothing was
                    // sent; the send queue waits at this packet (no retry spent) until the
                    // shell has faulted the page in (process context) and runs the requester
                    // again.
                    self.req.asked = asked;
                    self.req.asked_now = false;
                    self.stat(env, Stat::OdpMisses, 1);
                    break;
                }
                Err(status) => {
                    // A local error: the WR completes with it after every older WR.
                    self.sq.entry_mut(idx).err = Some(status);
                    self.fatal(env, true);
                    self.settle(env);
                    return sent;
                }
            };
            sent += 1;
            self.counters.add(Stat::SentPkts, 1);
            // An ACK poll is counted as such (`retry_timer_expired`), not as a retransmit.
            let polled = core::mem::take(&mut self.req.poll);
            if psn.before(self.req.high) && !polled {
                self.stat(env, Stat::Retransmits, 1);
            } else if self.req.asked_now
                && !psn.before(self.req.high)
                && self.req.timing.is_none()
                && emitted != Emit::Dropped
                && self.cfg.qp_type == QpType::Rc
            {
                // A first transmission that asks for an ACK: timed for a round-trip sample.
                if let Some(now) = env.clock_us() {
                    self.req.timing = Some((psn.next(), now));
                }
            }
            self.advance(env, idx, &e);
            if emitted == Emit::Dropped {
                self.resend_dropped(psn, polled);
                break;
            }
            if let Some((next, cur_pkt, at, rd_atomic, end)) = self.req.sel_resume {
                // The packets of a selective resend went out: back to where it was.
                if !self.req.psn.before(end) {
                    self.req.sel_resume = None;
                    if at.after(self.req.psn) {
                        self.sq.next = next;
                        self.req.cur_pkt = cur_pkt;
                        self.req.psn = at;
                        self.req.rd_atomic = rd_atomic;
                    }
                }
            }
            if emitted == Emit::Congested {
                break;
            }
        }
        self.update_timer(env, false);
        self.check_drained(env);
        self.settle(env);
        sent
    }

    /// The packet at `psn` just sent (and advanced past) was dropped by this end before it
    /// left ([`Emit::Dropped`]): RC goes back to it, so that the next run sends it again, with
    /// no retry spent and the window, a probe and an ACK poll as they were (it stays counted as
    /// sent: should drops go on, the retransmit timer still runs and the retries still end in
    /// RETRY_EXC_ERR). UC and UD completed the WR at its last packet: what they dropped is
    /// lost, as on the wire.
    fn resend_dropped(&mut self, psn: Psn, polled: bool) {
        if self.cfg.qp_type != QpType::Rc {
            return;
        }
        let (probe, sel) = (self.req.probe, self.req.sel_resume);
        self.rewind(psn);
        self.req.probe = probe;
        self.req.sel_resume = sel;
        self.req.poll = polled;
    }

    /// Runs a local operation (fast registration, local invalidation, window bind) of WR `idx`.
    fn local_op<E: Env>(&mut self, env: &mut E, idx: u32, kind: WrKind) -> Result<(), u32> {
        let w = wqe::decode_send_wqe(self.sq.slot(idx)).ok_or(wc_status::LOC_QP_OP_ERR)?;
        match kind {
            WrKind::RegMr => env.mr_register(w.rkey, w.remote_addr, w.compare_add, w.swap as u32),
            WrKind::BindMw => crate::logic::mw::BindWr::decode(&w)
                .map_err(|_| wc_status::MW_BIND_ERR)
                .and_then(|b| env.mw_bind(&b)),
            // A key that cannot be invalidated (unknown, another PD's, an MR registered
            // through reg_mr): LOC_QP_OP_ERR, as rdma_rxe completes it.
            _ => env
                .mr_invalidate(w.imm_data, false)
                .map_err(|_| wc_status::LOC_QP_OP_ERR),
        }
    }

    /// Moves past the packet of WR `idx` just sent.
    fn advance<E: Env>(&mut self, env: &mut E, idx: u32, e: &SqEntry) {
        let req_pkts = match e.kind {
            WrKind::Send | WrKind::Write => e.npkts,
            _ => 1,
        };
        self.req.cur_pkt += 1;
        self.req.psn = self.req.psn.next();
        if self.req.cur_pkt >= req_pkts {
            if e.kind == WrKind::Read {
                self.req.psn = e.first_psn.wrapping_add(e.npkts);
            }
            self.req.cur_pkt = 0;
            self.sq.next = idx.wrapping_add(1);
            if self.cfg.qp_type == QpType::Rc {
                if e.kind.is_rd_atomic() {
                    self.req.rd_atomic += 1;
                }
            } else {
                // UC and UD complete as soon as the last packet left.
                self.complete_front(env, super::wc_status::SUCCESS);
                self.req.acked = self.req.psn;
            }
        }
        if self.req.psn.after(self.req.high) {
            self.req.high = self.req.psn;
        }
    }

    fn send_packet<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        idx: u32,
        e: &SqEntry,
    ) -> Result<Emit, u32> {
        let cfg = self.cfg;
        let t = transport_of(cfg.qp_type);
        let slot = self.sq.slot(idx);
        let w = wqe::decode_send_wqe(slot).ok_or(wc_status::LOC_QP_OP_ERR)?;
        let src = wqe::source(slot, &w).ok_or(wc_status::LOC_QP_OP_ERR)?;
        let (pos, pay_off, pay_len) = match e.kind {
            WrKind::Send | WrKind::Write => {
                let seg = Segmentation::new(e.len, cfg.mtu).ok_or(wc_status::GENERAL_ERR)?;
                let s = seg
                    .segment(self.req.cur_pkt)
                    .ok_or(wc_status::GENERAL_ERR)?;
                (s.position, s.offset, s.len)
            }
            // The 8 bytes travel in the WQE (`swap`), not in an SGE.
            WrKind::AtomicWrite => (Position::Only, 0, 8),
            _ => (Position::Only, 0, 0),
        };
        let opc = request_opcode(t, e.kind, pos, e.imm, e.inv);
        let psn = self.req.psn;
        let dest_qp = if cfg.qp_type == QpType::Ud {
            w.remote_qpn
        } else {
            cfg.dest_qpn
        };
        let end = pos.is_end();
        // When an RC packet asks for an ACK (AckReq; a peer acknowledges only what is asked
        // for, as rdma_rxe and rrxe do, or coalesces, and an ACK covers every PSN before it):
        // - the end of a WR whose completion someone waits for: a signaled one, any WR while
        //   the SQ drains (SQD), and every WR without a retransmit timer (`timeout` 0), which
        //   could not ask later;
        // - READs and atomics (their responses are the answer);
        // - every ACK_REQ_EVERY-th PSN, so that an unsignaled stream frees its SQ slots and
        //   opens its window as it goes;
        // - the packet that fills the window (otherwise a small window would stay closed until
        //   the timer);
        // - an ACK poll.
        // An unsignaled WR's end does not: nobody can tell when it completes (its SQ slot is
        // free once a later signaled WR has completed), and a stream of small
        // unsignaled messages (perftest's 99 of 100) then costs one ACK per 16 packets instead
        // of one per message, on both ends. A tail of such WRs that nothing asks for later is
        // asked for by an ACK poll, ACK_POLL_US after it went out (`retry_timer_expired`).
        let fills = psn.next().distance_from(self.req.acked) >= self.req.cwnd;
        let wanted = e.signaled || cfg.timeout == 0 || self.state == QpState::Sqd;
        let ack_req = cfg.qp_type == QpType::Rc
            && ((end && wanted)
                || e.kind.is_rd_atomic()
                || psn.get() % ACK_REQ_EVERY == 0
                || fills
                || self.req.poll
                || self.req.sel_resume.is_some());
        // A READ asks for every PSN of its responses (an atomic for its one): while they are
        // outstanding, the silence is not an unasked tail's.
        let upto = match e.kind {
            WrKind::Read => e.first_psn.wrapping_add(e.npkts.max(1)),
            _ => psn.next(),
        };
        if ack_req && upto.after(self.req.asked) {
            self.req.asked = upto;
        }
        self.req.asked_now = ack_req;
        let mut h = Headers::new(Bth {
            opcode: opc,
            // The Solicited Event bit asks for the receiver's event: only on the last packet of
            // a message that consumes a receive WQE (SEND, WRITE with immediate; IBTA 9.2.3),
            // never on a READ, an atomic or a plain WRITE.
            se: end
                && w.send_flags & super::send_flags::SOLICITED != 0
                && (e.kind == WrKind::Send || (e.kind == WrKind::Write && e.imm)),
            pkey: BTH_DEF_PKEY,
            dest_qp,
            ack_req,
            // An RC requester announces that it takes an ACK jumping past what it resent.
            sel: cfg.qp_type == QpType::Rc,
            psn,
            ..Bth::default()
        });
        let info = opcode::info(opc).ok_or(wc_status::GENERAL_ERR)?;
        if info.headers.has(opcode::Ext::Reth) {
            h.reth = Some(match e.kind {
                // A READ sent again asks only for what has not arrived (a partial re-read).
                // A zero-length READ carries rkey 0: the responder may not use it (C9-88), and
                // rdma_rxe 6.12 records 0 for it and ignores a duplicate that names another
                // rkey, so a READ whose response was lost would never be answered again.
                WrKind::Read => {
                    let off = e.read_done.saturating_mul(cfg.mtu).min(e.len);
                    Reth {
                        va: w.remote_addr.wrapping_add(u64::from(off)),
                        rkey: if e.len == 0 { 0 } else { w.rkey },
                        len: e.len - off,
                    }
                }
                _ => Reth {
                    va: w.remote_addr,
                    rkey: w.rkey,
                    len: e.len,
                },
            });
        }
        if info.headers.has(opcode::Ext::Feth) {
            h.feth = Some(Feth {
                placement_type: (w.imm_data & super::flush::TYPE_MASK) as u8,
                selectivity: ((w.imm_data >> super::flush::LEVEL_SHIFT) & super::flush::LEVEL_MASK)
                    as u8,
            });
        }
        if info.headers.has(opcode::Ext::ImmDt) {
            h.immdt = Some(ImmDt {
                imm: u32::from_be_bytes(w.imm_data.to_ne_bytes()),
            });
        }
        if info.headers.has(opcode::Ext::Ieth) {
            h.ieth = Some(Ieth { rkey: w.imm_data });
        }
        if info.headers.has(opcode::Ext::Deth) {
            let qkey = if w.remote_qkey & 0x8000_0000 != 0 {
                cfg.qkey
            } else {
                w.remote_qkey
            };
            h.deth = Some(Deth {
                qkey,
                src_qp: cfg.qpn,
            });
        }
        if info.headers.has(opcode::Ext::AtomicEth) {
            let (swap_add, compare) = match e.kind {
                WrKind::CmpSwap => (w.swap, w.compare_add),
                _ => (w.compare_add, 0),
            };
            h.atmeth = Some(AtomicEth {
                va: w.remote_addr,
                rkey: w.rkey,
                swap_add,
                compare,
            });
        }
        let len = super::assemble(scratch, &h, pay_len as usize, |buf| {
            if e.kind == WrKind::AtomicWrite {
                buf.copy_from_slice(&w.swap.to_ne_bytes());
                return Ok(());
            }
            src.gather(env, u64::from(pay_off), buf)
        })?;
        let dest = if cfg.qp_type == QpType::Ud {
            Dest::Ah {
                ah: w.ah_num,
                qpn: w.remote_qpn,
            }
        } else {
            Dest::Connected
        };
        let r = env.emit(&scratch[..len], dest);
        self.counters.add(Stat::SentBytes, len as u64);
        Ok(r)
    }

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
    fn unacked(&self) -> bool {
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

    /// The requester has a packet it may send now (nothing but the caller's budget or the
    /// path holds it back).
    fn can_send(&self) -> bool {
        self.requester_ready() && self.gate(&self.sq.entry(self.sq.next)) == Gate::Open
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
        // such answers keep coming, [`BUSY_WAITS`] times in a row at most (a peer that only
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
                    self.go_back_on_timeout();
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
        if core::mem::take(&mut self.req.heard) && self.req.busy_waits < BUSY_WAITS {
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
    fn go_back_on_timeout(&mut self) {
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
        let before = (self.req.cwnd, self.req.ssthresh);
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
                    cwnd: before.0,
                    ssthresh: before.1,
                    proof,
                });
            }
        }
    }

    /// An acknowledgement moved `acked`: a timeout whose probe did not send `proof` again,
    /// now acknowledged, was spurious; the window is given back. Returns whether it was.
    pub(super) fn undo_spurious_timeout(&mut self) -> bool {
        let Some(u) = self.req.undo else {
            return false;
        };
        if !self.req.acked.after(u.proof) {
            return false;
        }
        self.req.undo = None;
        self.req.cwnd = self.req.cwnd.max(u.cwnd);
        self.req.ssthresh = self.req.ssthresh.max(u.ssthresh);
        true
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
                self.sq.next = p.next;
                self.req.cur_pkt = p.cur_pkt;
                self.req.psn = p.psn;
                let mut n = 0;
                let mut i = self.sq.done;
                while i != p.next && i != self.sq.head {
                    if self.sq.entry(i).kind.is_rd_atomic() {
                        n += 1;
                    }
                    i = i.wrapping_add(1);
                }
                self.req.rd_atomic = n;
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

    /// Go back N: the next packet sent is the one at `psn` (a SEND/WRITE resumes at that packet,
    /// a READ at its first missing response, an atomic from its start). `psn` outside every
    /// started WR changes nothing.
    pub(super) fn rewind(&mut self, psn: Psn) {
        self.req.probe = None;
        // What is sent again from here may be what acknowledges a timeout's `proof`.
        self.req.undo = None;
        self.req.sel_resume = None;
        // Karn: what is sent again cannot be timed, nor can what it acknowledges.
        self.req.timing = None;
        let mut i = self.sq.done;
        let mut rd_atomic = 0;
        loop {
            let at_cur = i == self.sq.next;
            if at_cur && self.req.cur_pkt == 0 {
                return;
            }
            if !at_cur && i == self.sq.head {
                return;
            }
            let e = self.sq.entry(i);
            if e.started && !e.kind.is_local() && psn.in_window(e.first_psn, e.npkts.max(1)) {
                let (p, k) = match e.kind {
                    WrKind::Send | WrKind::Write => (psn, psn.distance_from(e.first_psn)),
                    _ => (e.resume_psn(), 0),
                };
                self.sq.next = i;
                self.req.cur_pkt = k;
                self.req.psn = p;
                self.req.rd_atomic = rd_atomic;
                return;
            }
            if at_cur {
                return;
            }
            if e.kind.is_rd_atomic() {
                rd_atomic += 1;
            }
            i = i.wrapping_add(1);
        }
    }
}
