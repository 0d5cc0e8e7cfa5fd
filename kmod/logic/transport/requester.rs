// SPDX-License-Identifier: GPL-2.0-only
//! The requester: turns send WRs into request packets, keeps the RC window, and goes back N
//! when the completer or the timer (`timer.rs`) says packets were lost.

use super::{
    ahead::ReadAhead,
    opcode,
    selective::{Holes, PeerMode},
    transport_of, wc_status, wqe, Config, Dest, Emit, Engine, Env, Resource, SqEntry, Stat, WrKind,
    ACK_REQ_EVERY, INITIAL_WINDOW, RC_WINDOW,
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
    /// Unacknowledged PSNs allowed in flight ([`RC_WINDOW`] at most; [`INITIAL_WINDOW`] when
    /// the QP starts, and growing by each PSN acknowledged up to `ssthresh`). A timeout closes it to
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
    /// After the first timeout of an episode: what tells whether it was spurious ([`Undo`]).
    pub(super) undo: Option<Undo>,
    /// Answers came since the last expiry, none of them progress (duplicate ACKs, READ
    /// responses we already have or that lie past a gap): the peer is busy with older
    /// requests of ours, not deaf. See [`Engine::retry_timer_expired`].
    pub(super) heard: bool,
    /// The last PSN heard since the last expiry (see `heard`).
    pub(super) heard_last: Option<Psn>,
    /// Since the last expiry the peer was heard moving forward: a PSN heard after an earlier
    /// one (a replay in progress), not the same answer repeated.
    pub(super) heard_moving: bool,
    /// Expiries in a row passed over because the peer was heard ([`BUSY_WAITS`] at most, or
    /// [`BUSY_WAITS_MOVING`] while it is heard moving).
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
    /// The window last stopped the requester with the PSNs before this one in flight: their
    /// acknowledgements may open it. Only a window that limited the sender grows (RFC 7661, as
    /// Linux's `tcp_is_cwnd_limited`): a QP held back by its DCQCN rate or by its application
    /// keeps fewer packets out than its window, and a window grown by their ACKs would let it
    /// put all of it into a bottleneck's queue at once when the rate recovers.
    pub(super) limited_end: Option<Psn>,
    /// The window was cut for congestion (a loss, or a CNP: [`Engine::congestion_notified`])
    /// and stays so until the acknowledgements pass this PSN (everything in flight at the cut):
    /// one cut per window of data, as TCP reacts to ECN once per round trip (RFC 3168, 6.1.2).
    pub(super) cwr: Option<Psn>,
    /// The window the requester starts with, and takes again when its QP is flushed
    /// ([`INITIAL_WINDOW`] unless the shell says otherwise: [`Engine::set_initial_window`]).
    pub(super) initial: u32,
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
    /// The highest PSN the peer acknowledged (an ACK, or a response's implied one) past a READ
    /// or atomic still missing its answer: once that one is answered, the WRs it covers are
    /// complete without being sent again (see [`Engine::rx_read_response`]).
    pub(super) ack_seen: Option<Psn>,
    /// Whether the peer's responder places WRITE packets past a gap (see [`PeerMode`]).
    pub(super) peer: PeerMode,
    /// A selective resend is under way: where to return to once the packets before
    /// [`Resume::end`] went out again.
    pub(super) sel_resume: Option<Resume>,
    /// The packets last sent again alone (first PSN, PSN after the last), until the answer
    /// that tells what the peer did with them.
    pub(super) sel_sent: Option<(Psn, Psn)>,
    /// When `sel_sent` went out (on the [`Env::clock_us`] clock).
    pub(super) sel_at_us: Option<u64>,
    /// Reported holes to send alone next ([`Holes`]).
    pub(super) holes: Holes,
}

/// The slow-start threshold never falls below this: a go-back-N window of a few packets costs
/// little per loss, and a smaller one would leave the path idle for a round trip at a time.
pub(super) const MIN_SSTHRESH: u32 = 8;

/// Congestion avoidance opens the window by this many packets per window acknowledged.
pub(super) const CWND_AI: u32 = 2;

/// Where the requester stood when a selective resend took it back (see
/// [`Requester::sel_resume`]). The READs and atomics it had passed are not remembered but
/// counted on return ([`Engine::stand_at`]): some may have been answered meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Resume {
    /// `sq.next`, `cur_pkt` and `psn` to return to.
    pub(super) next: u32,
    pub(super) cur_pkt: u32,
    pub(super) psn: Psn,
    /// The PSN after the last one sent again.
    pub(super) end: Psn,
}

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

/// What tells a spurious timeout from a loss (RFC 5682's F-RTO detection, section 2.1). The
/// probe resends what lies before `proof`. A first acknowledgement past `proof` but short of
/// `high` (everything sent before the timeout) is noted in `first`; a second one past it, with
/// nothing resent in between (any go-back clears this), shows that original packets keep
/// arriving: the timeout was spurious. An acknowledgement that reaches `high` at once is
/// ambiguous (a peer that placed packets past the lost one jumps there too) and ends the
/// detection, as does any resend.
#[derive(Clone, Copy, Debug)]
pub(super) struct Undo {
    /// The first PSN the probe cannot have had acknowledged.
    pub(super) proof: Psn,
    /// One past the highest PSN sent before the timeout.
    pub(super) high: Psn,
    /// `acked` after the first acknowledgement past `proof`.
    pub(super) first: Option<Psn>,
}

impl Requester {
    /// An answer that is no progress came (a duplicate, or a READ response past a gap): the
    /// peer is busy with older requests of ours. `replay`: a READ response.
    pub(super) fn hear(&mut self, psn: Psn, replay: bool) {
        self.heard = true;
        self.replay_heard |= replay;
        if self.heard_last.is_some_and(|l| psn.after(l)) {
            self.heard_moving = true;
        }
        self.heard_last = Some(psn);
    }

    /// Forgets what was heard (progress, a reset).
    pub(super) fn forget_heard(&mut self) {
        self.heard = false;
        self.replay_heard = false;
        self.heard_last = None;
        self.heard_moving = false;
    }

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
            cwnd: INITIAL_WINDOW,
            heard: false,
            heard_last: None,
            heard_moving: false,
            busy_waits: 0,
            poll_waits: 0,
            ssthresh: RC_WINDOW,
            cwnd_acc: 0,
            limited_end: None,
            cwr: None,
            initial: INITIAL_WINDOW,
            srtt_us: 0,
            rttvar_us: 0,
            timing: None,
            due_us: None,
            early: 0,
            asked_now: false,
            replay_heard: false,
            ahead: ReadAhead::default(),
            ack_seen: None,
            peer: PeerMode::Unknown,
            sel_resume: None,
            sel_sent: None,
            sel_at_us: None,
            holes: Holes::default(),
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
        self.cwnd = self.initial;
        self.forget_heard();
        self.ahead.clear();
        self.ack_seen = None;
        self.peer = PeerMode::Unknown;
        self.sel_resume = None;
        self.sel_sent = None;
        self.holes.clear();
        self.busy_waits = 0;
        self.poll_waits = 0;
        self.ssthresh = RC_WINDOW;
        self.cwnd_acc = 0;
        self.limited_end = None;
        self.cwr = None;
        self.timing = None;
        self.due_us = None;
        self.early = 0;
        self.acked = self.psn;
        self.asked = self.psn;
    }

    /// `n` more PSNs acknowledged (`acked` not yet moved): slow start below `ssthresh`,
    /// congestion avoidance above, as far as the window limited the sender (`limited_end`). In
    /// slow start a window that did not limit it still grows to twice what was in flight (as
    /// Linux does), so a sender that fills its window in bursts keeps up; in congestion
    /// avoidance it does not grow.
    pub(super) fn open_window(&mut self, n: u32) {
        let flight = self.high.distance_from(self.acked);
        let limited = self.limited_end.is_some_and(|end| end.after(self.acked));
        if !limited {
            self.limited_end = None;
        }
        let room = if limited {
            RC_WINDOW
        } else {
            flight.saturating_mul(2)
        };
        let ss = n
            .min(self.ssthresh.saturating_sub(self.cwnd))
            .min(room.saturating_sub(self.cwnd));
        self.cwnd = self.cwnd.saturating_add(ss);
        let n = n - ss;
        if n > 0 && self.cwnd >= self.ssthresh && (limited || flight >= self.cwnd) {
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
        // resent) holds the threshold where the first one put it (RFC 5681, section 3.1); a
        // loss inside a window already cut for congestion does not halve it again (RFC 3168,
        // 6.1.2: one reduction per round trip, whatever said so).
        let cut = !(timeout && (self.probe.is_some() || self.guess.is_some()))
            && (timeout || !self.in_cwr());
        if cut {
            self.halve_threshold();
        }
        self.cwnd = if timeout {
            1
        } else {
            self.ssthresh.min(self.cwnd.max(1))
        };
        self.cwnd_acc = 0;
    }

    /// The threshold halves from what is in flight, and the window stays cut for congestion
    /// until everything in flight now is acknowledged.
    fn halve_threshold(&mut self) {
        let flight = self.high.distance_from(self.acked).min(self.cwnd);
        self.ssthresh = (flight / 2).max(MIN_SSTHRESH);
        self.cwr = Some(self.high);
    }

    /// Whether a cut for congestion is still in effect (acknowledgements have not passed what
    /// was in flight when it was made).
    pub(super) fn in_cwr(&self) -> bool {
        self.cwr.is_some_and(|end| end.after(self.acked))
    }

    /// The peer's congestion notice (a CNP) for an RC requester: the window halves, once per
    /// window of data. See [`Engine::congestion_notified`].
    fn notice_congestion(&mut self) -> bool {
        if self.in_cwr() {
            return false;
        }
        self.halve_threshold();
        self.cwnd = self.ssthresh.min(self.cwnd.max(1));
        self.cwnd_acc = 0;
        true
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
    /// The connected peer's notification point said that our packets met congestion (a CNP,
    /// which the shell hands to DCQCN's rate as well). An RC requester halves its window, at
    /// most once per window of data (RFC 3168's response to ECN, 6.1.2): the rate alone bounds
    /// how fast packets leave, not how many are queued at the bottleneck, and a QP whose rate
    /// recovers after a stall (or whose timer resends) would otherwise send a whole window
    /// into a full queue. Returns whether the window was cut (the shell counts
    /// `cnp_window_cuts`).
    pub fn congestion_notified(&mut self) -> bool {
        self.cfg.qp_type == QpType::Rc && self.req.notice_congestion()
    }

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
            match self.gate(&e) {
                Gate::Open => {}
                g => {
                    if g == Gate::Window {
                        self.req.limited_end = Some(self.req.high);
                    }
                    break;
                }
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
            if self.req.cur_pkt == 0 && e.started && e.kind == WrKind::Read && e.read_done > 0 {
                // A READ behind the one being asked again, some of whose responses came
                // meanwhile (placed as they came): it is asked for the rest only, at the PSN
                // of the first missing response, and not at all once every response is in.
                if e.read_done >= e.npkts {
                    self.req.psn = e.first_psn.wrapping_add(e.npkts);
                    self.sq.next = idx.wrapping_add(1);
                    self.req.rd_atomic += 1;
                    continue;
                }
                self.req.psn = e.resume_psn();
            }
            let psn = self.req.psn;
            let asked = self.req.asked;
            let high = self.req.high;
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
            if emitted != Emit::Dropped {
                self.counters.add(Stat::SentPkts, 1);
            }
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
                self.resend_dropped(psn, polled, high);
                break;
            }
            if let Some(r) = self.req.sel_resume {
                // The packets of a selective resend went out: back to where it was.
                if !self.req.psn.before(r.end) {
                    self.req.sel_resume = None;
                    if r.psn.after(self.req.psn) {
                        self.stand_at(r.next, r.cur_pkt, r.psn);
                    }
                    self.next_hole(env);
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
    /// left ([`Emit::Dropped`]: a full qdisc, no memory, an empty loopback pool, or held back
    /// by the DCQCN pacer): RC goes back to it, so that the next run sends it again, with no
    /// retry spent and the window, a probe and an ACK poll as they were (should drops go on,
    /// the retransmit timer still runs and the retries still end in RETRY_EXC_ERR). It never
    /// left, so `high` (what was sent before it, `high`) stays where it was: when it goes, it
    /// is a first transmission, neither counted as a retransmission nor a reason (Karn's) to
    /// drop the round-trip sample under way. UC and UD completed the WR at its last packet:
    /// what they dropped is lost, as on the wire.
    fn resend_dropped(&mut self, psn: Psn, polled: bool, high: Psn) {
        if self.cfg.qp_type != QpType::Rc {
            return;
        }
        // The same packet again, not a go-back: what was under way stays.
        let (probe, sel, sent, undo, timing) = (
            self.req.probe,
            self.req.sel_resume,
            self.req.sel_sent,
            self.req.undo,
            self.req.timing,
        );
        self.rewind(psn);
        self.req.probe = probe;
        self.req.sel_resume = sel;
        self.req.sel_sent = sent;
        self.req.undo = undo;
        self.req.poll = polled;
        if !psn.before(high) {
            // Its first transmission: nothing from it on has left yet.
            self.req.high = high;
            // (No sample starts at a dropped packet: a sample under way is an older one's.)
            self.req.timing = timing;
        } else {
            // A retransmission dropped again: Karn applies as it did.
            self.req.timing = None;
        }
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
            // An RC requester announces that it takes an ACK jumping past what it resent, and
            // hole reports.
            sel: cfg.qp_type == QpType::Rc,
            hole: cfg.qp_type == QpType::Rc,
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

    /// The requester has a packet it may send now (nothing but the caller's budget or the
    /// path holds it back).
    pub(super) fn can_send(&self) -> bool {
        self.requester_ready() && self.gate(&self.sq.entry(self.sq.next)) == Gate::Open
    }

    /// Puts the requester at WR `next`, packet `cur_pkt`, PSN `psn`, with the READs and
    /// atomics before it outstanding (sent and not answered: those in `[sq.done, next)`).
    pub(super) fn stand_at(&mut self, next: u32, cur_pkt: u32, psn: Psn) {
        self.sq.next = next;
        self.req.cur_pkt = cur_pkt;
        self.req.psn = psn;
        let mut n = 0;
        let mut i = self.sq.done;
        while i != next && i != self.sq.head {
            if self.sq.entry(i).kind.is_rd_atomic() {
                n += 1;
            }
            i = i.wrapping_add(1);
        }
        self.req.rd_atomic = n;
    }

    /// Go back N: the next packet sent is the one at `psn` (a SEND/WRITE resumes at that packet,
    /// a READ at its first missing response, an atomic from its start). `psn` outside every
    /// started WR changes nothing.
    pub(super) fn rewind(&mut self, psn: Psn) {
        self.req.probe = None;
        // What is sent again from here may be what acknowledges a timeout's `proof`.
        self.req.undo = None;
        self.req.sel_resume = None;
        // A selective resend in progress is over: a NAK inside it is news again.
        self.req.sel_sent = None;
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
