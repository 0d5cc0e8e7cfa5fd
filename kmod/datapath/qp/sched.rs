// SPDX-License-Identifier: GPL-2.0-only
//! Scheduling a QP's work: the engine runs under the QP lock in bounded calls (a doorbell pass,
//! a packet, a timer); work a call leaves (budget spent, a full queue) is resumed at once by the
//! QP's work item on the high-priority workqueue, in bounded rounds; what a congested wire (or
//! an exhausted loopback pool) stopped resumes from the pacing timer one jiffy later, so that a
//! congested path paces itself. Also the responder's turn ([`RespTurn`]) and the timers.

use crate::datapath::{
    loopback::{Outbox, BUDGET, OUT_HIGH},
    qp::{
        env::Ctx,
        state::{Eng, QpInner, RespTurn, Shell, TIMER_REACK, TIMER_RETRY, TIMER_RNR},
    },
    rx::{deliver, Receive},
};
use crate::ib::{
    bh::with_bh_disabled,
    inflight::{self, TxWaker},
    timer, work,
};
use crate::logic::transport as tp;
use crate::logic::{
    dcqcn,
    qp_state::QpType,
    stats::Stat,
    transport::{Dest, Env, RxInfo},
    wire::{self, Packet},
};
use core::sync::atomic::Ordering;

/// Bulk packets one timer expiry (continuation, retransmit, RNR) may generate.
pub(super) const RESUME_BULK: u32 = tp::READ_BURST;

/// Run-and-deliver rounds one continuation makes at most.
pub(super) const RESUME_ROUNDS: u32 = 8;

impl QpInner {
    pub(super) fn ctx<'a, 'o>(&'a self, sh: &'a mut Shell, out: &'a mut Outbox<'o>) -> Ctx<'a, 'o> {
        sh.congested = false;
        sh.capped = false;
        Ctx { qp: self, sh, out }
    }

    /// Schedules the continuation if the call that just ended left work: at once, or on the
    /// next tick when the wire pushed back.
    pub(super) fn finish(&self, sh: &mut Shell) {
        if core::mem::take(&mut sh.resume) {
            if sh.capped {
                // The gauge calls `tx_room` when the stack has freed enough of our skbs.
            } else if sh.congested {
                self.pace_later();
            } else {
                self.resume_soon();
            }
        }
    }

    /// Packets the QP may still hand to the network stack (its skbs in flight are capped at
    /// [`inflight::HIGH`], as rdma_rxe caps them at 64); unbounded on a loopback path, which
    /// makes no skbs. 0 marks the shell `capped`: the gauge wakes the QP when room comes back.
    pub(super) fn wire_room(&self, sh: &mut Shell) -> u32 {
        if sh.path.is_some_and(|p| p.loopback) {
            return u32::MAX;
        }
        let n = self.gauge.in_flight();
        if n < inflight::HIGH {
            return inflight::HIGH - n;
        }
        if self.gauge.has_room() {
            return 1;
        }
        sh.capped = true;
        self.fabric.stats.add(Stat::TxInflightWaits, 1);
        0
    }

    /// Resumes in process context as soon as a worker runs (the queued run, if there is one).
    pub(super) fn resume_soon(&self) {
        self.kick.queue();
    }

    /// Resumes on the next tick.
    pub(super) fn pace_later(&self) {
        self.pace.arm_at(timer::now().wrapping_add(1));
    }

    /// Runs the requester for at most `max` packets within the delivery's budget; notes a
    /// continuation when it stops with work left for a reason other than the RC window or
    /// `max_rd_atomic` (those reopen with an ACK).
    pub(super) fn run_req(
        &self,
        eng: &mut Eng,
        scratch: &mut [u8],
        cx: &mut Ctx<'_, '_>,
        max: u32,
    ) -> u32 {
        let loopback = cx.sh.path.is_some_and(|p| p.loopback);
        if loopback {
            let me = cx.out.id();
            if cx.sh.req_owner != 0 && cx.sh.req_owner != me {
                // Another delivery holds packets of ours not yet delivered: sending now would
                // overtake them. It runs the requester once it has delivered them.
                cx.sh.req_wanted |= eng.requester_ready();
                return 0;
            }
            if cx.sh.req_owner == 0 && !cx.out.can_hold(self.qpn) {
                // This delivery keeps track of no more QPs: the continuation sends.
                cx.sh.resume |= eng.requester_ready();
                return 0;
            }
        }
        let b = max.min(cx.out.room()).min(self.wire_room(cx.sh));
        if b == 0 {
            if eng.requester_ready() {
                cx.sh.resume = true;
            }
            return 0;
        }
        let queued = cx.out.len;
        let sent = eng.run_requester(cx, scratch, b);
        cx.out.spend(sent);
        if loopback && cx.out.len > queued {
            cx.sh.req_owner = cx.out.id();
            cx.out.hold(self.qpn);
        }
        if eng.requester_ready() && (sent == b || cx.out.len >= OUT_HIGH || cx.sh.congested) {
            cx.sh.resume = true;
        }
        sent
    }

    /// The responder's output, when it is this context's turn ([`RespTurn`]): owed READ and
    /// atomic responses within the delivery's budget (at most a burst: on the wire a 1 MiB
    /// READ must not overflow the receiver's backlog), then the coalesced ACK. Output queued
    /// for local delivery keeps the turn with this delivery; what is left goes to the
    /// continuation.
    pub(super) fn respond(&self, eng: &mut Eng, scratch: &mut [u8], cx: &mut Ctx<'_, '_>) {
        let loopback = cx.sh.path.is_some_and(|p| p.loopback);
        match cx.sh.resp {
            RespTurn::Free => {}
            // On the wire every context sends under the QP lock, in order: a packet that
            // brings a request is answered at once, as before the continuation runs.
            RespTurn::Cont if !loopback => {}
            _ => return,
        }
        if loopback && !cx.out.can_hold(self.qpn) {
            // This delivery keeps track of no more QPs: the continuation answers.
            cx.sh.resp = RespTurn::Cont;
            cx.sh.resume = true;
            return;
        }
        let queued = cx.out.len;
        if eng.responder_pending() {
            let b = tp::READ_BURST.min(cx.out.room()).min(self.wire_room(cx.sh));
            if b > 0 {
                let sent = eng.run_responder(cx, scratch, b);
                cx.out.spend(sent);
            }
        }
        eng.flush_ack(cx, scratch);
        if cx.out.len > queued {
            cx.out.hold(self.qpn);
            cx.sh.resp = RespTurn::Held(cx.out.id());
        } else if eng.responder_pending() {
            cx.sh.resp = RespTurn::Cont;
            cx.sh.resume = true;
        }
    }

    /// The continuation (the work item; the pacing timer queues it): bounded rounds of
    /// responder and requester, each followed by local delivery; scheduled again while work is
    /// left. A round that could send nothing at all waits for the next tick rather than spin.
    /// The work item never runs twice at once, so a round owns [`RespTurn::Cont`].
    pub(super) fn resume(&self) {
        with_bh_disabled(|| {
            let mut out = self.fabric.outbox(RESUME_BULK, None);
            for round in 0..RESUME_ROUNDS {
                let again = {
                    let mut g = self.st.lock();
                    let d = &mut *g;
                    let bulk_before = out.bulk;
                    let mut cx = self.ctx(&mut d.sh, &mut out);
                    if cx.sh.resp == RespTurn::Cont {
                        cx.sh.resp = RespTurn::Free;
                    }
                    self.respond(&mut d.eng, &mut d.scratch, &mut cx);
                    self.pull_sq(&mut d.eng, &mut cx);
                    d.eng.flush_if_err(&mut cx);
                    self.run_req(&mut d.eng, &mut d.scratch, &mut cx, BUDGET);
                    let again = cx.sh.resume
                        && !cx.sh.congested
                        && cx.out.bulk > 0
                        && round + 1 < RESUME_ROUNDS;
                    if again {
                        // The next round decides afresh.
                        cx.sh.resume = false;
                    } else if cx.out.bulk == bulk_before && cx.out.len == 0 {
                        // No progress this round: pace instead of spinning.
                        cx.sh.congested = true;
                    }
                    self.finish(cx.sh);
                    again
                };
                deliver(&self.fabric, &mut out);
                if !again {
                    break;
                }
            }
        });
    }

    /// The notification point: a CE-marked packet arrived for this QP.
    fn notify_congestion(&self, eng: &Eng, cx: &mut Ctx<'_, '_>) {
        let fab = &self.fabric;
        fab.stats.add(Stat::RxEcnCe, 1);
        let cfg = eng.config();
        if !matches!(cfg.qp_type, QpType::Rc | QpType::Uc) {
            return;
        }
        // The QP's own copy of the settings: no device-wide lock per CE mark.
        fab.dcqcn_refresh(&mut cx.sh.dc);
        if !cx.sh.dc.settings.ecn {
            return;
        }
        let p = cx.sh.dc.settings.params;
        if cx.sh.gate.may_send(&p, timer::now_us()) {
            let cnp = dcqcn::cnp(cfg.dest_qpn, wire::BTH_DEF_PKEY);
            // Not a bulk packet, never paced; a CNP the wire refuses is not sent again.
            let _ = cx.emit(&cnp, Dest::Connected);
            fab.stats.add(Stat::TxCnps, 1);
        }
    }

    /// A timer's run: `f` on the engine under the QP lock with bottom halves disabled, then
    /// local delivery of what it queued (at most `bulk` bulk packets).
    pub(super) fn on_timer(
        &self,
        bulk: u32,
        f: impl FnOnce(&mut Eng, &mut [u8], &mut Ctx<'_, '_>),
    ) {
        with_bh_disabled(|| {
            let mut out = self.fabric.outbox(bulk, None);
            {
                let mut g = self.st.lock();
                let d = &mut *g;
                let mut cx = self.ctx(&mut d.sh, &mut out);
                f(&mut d.eng, &mut d.scratch, &mut cx);
                self.finish(cx.sh);
            }
            deliver(&self.fabric, &mut out);
        });
    }

    /// The RNR timer fired.
    pub(super) fn rnr_expired(&self) {
        self.on_timer(RESUME_BULK, |eng, scratch, cx| {
            eng.rnr_timer_expired();
            self.run_req(eng, scratch, cx, BUDGET);
        });
    }

    /// The retransmit timer fired: unless stale (stopped or restarted meanwhile), the engine
    /// goes back N, then a bounded run of the requester.
    pub(super) fn retry_expired(&self) {
        self.on_timer(RESUME_BULK, |eng, scratch, cx| {
            match cx.sh.retry_at {
                Some(at) if timer::reached(timer::now(), at) => cx.sh.retry_at = None,
                _ => return,
            }
            eng.retry_timer_expired(cx);
            self.run_req(eng, scratch, cx, BUDGET);
        });
    }

    /// The re-acknowledgement timer fired (the engine ignores a stale expiry). An ACK is not
    /// bulk.
    pub(super) fn reack_expired(&self) {
        self.on_timer(0, |eng, scratch, cx| eng.reack_timer_expired(cx, scratch));
    }
}

/// The receive dispatch's way to the QP (`rx.rs`).
impl Receive for QpInner {
    /// Handles a packet for this QP (bottom halves disabled). `ce`: it arrived marked
    /// Congestion Experienced, so a connected QP answers its sender with a CNP (at most one
    /// per `np_min_time_between_cnps`).
    fn rx(&self, pkt: &Packet<'_>, info: &RxInfo, ce: bool, out: &mut Outbox<'_>) {
        let mut g = self.st.lock();
        let d = &mut *g;
        if d.sh.closed {
            return;
        }
        let mut cx = self.ctx(&mut d.sh, out);
        if ce {
            self.notify_congestion(&d.eng, &mut cx);
        }
        let go = d.eng.rx(&mut cx, &mut d.scratch, pkt, info);
        self.respond(&mut d.eng, &mut d.scratch, &mut cx);
        if go {
            if cx.out.drives(self) {
                // Our own doorbell delivers this: its next pass sends.
                cx.out.driver_go = true;
            } else {
                self.pull_sq(&mut d.eng, &mut cx);
                self.run_req(&mut d.eng, &mut d.scratch, &mut cx, BUDGET * 4);
            }
        }
        self.finish(cx.sh);
    }

    /// The reaction point: a CNP for this QP arrived from `src` (bottom halves disabled). Only
    /// the connected peer's CNPs count: anyone else's would let a stranger slow the QP down.
    fn on_cnp(&self, src: &[u8; 16]) {
        let fab = &self.fabric;
        if !fab.cc.load(Ordering::Relaxed) {
            return;
        }
        // A CNP is rare next to packets: the QP takes a fresh copy of the settings with it
        // (the generation read first, so a write racing with this is caught next time).
        let gen = fab.dcqcn_gen.load(Ordering::Acquire);
        let mut g = self.st.lock();
        if g.sh.closed || !matches!(g.eng.config().peer, Some(p) if p.remote == *src) {
            return;
        }
        let sh = &mut g.sh;
        fab.dcqcn_reload(&mut sh.dc, gen);
        let p = sh.dc.settings.params;
        let now = timer::now_us();
        sh.rp.tick(&p, now);
        if sh.rp.on_cnp(&p, now) {
            fab.stats.add(Stat::RateCuts, 1);
        }
        sh.sync_limited(fab);
        // The rate bounds how fast packets leave; the window bounds how many can sit in the
        // bottleneck's queue.
        if g.eng.congestion_notified() {
            fab.stats.add(Stat::CnpWindowCuts, 1);
        }
    }

    /// A delivery has delivered the output it held ([`RespTurn::Held`], `Shell::req_owner`):
    /// the turns it held are free again, and this delivery goes on answering and sending
    /// within its budget.
    fn delivered(&self, out: &mut Outbox<'_>) {
        let mut g = self.st.lock();
        let d = &mut *g;
        let me = out.id();
        let resp = d.sh.resp == RespTurn::Held(me);
        if resp {
            d.sh.resp = RespTurn::Free;
        }
        let req = d.sh.req_owner == me;
        if req {
            d.sh.req_owner = 0;
        }
        if d.sh.closed || !(resp || req) {
            return;
        }
        let mut cx = self.ctx(&mut d.sh, out);
        if resp {
            self.respond(&mut d.eng, &mut d.scratch, &mut cx);
        }
        if req && core::mem::take(&mut cx.sh.req_wanted) {
            if cx.out.drives(self) {
                // Our own doorbell delivers this: its next pass sends.
                cx.out.driver_go = true;
            } else {
                self.pull_sq(&mut d.eng, &mut cx);
                self.run_req(&mut d.eng, &mut d.scratch, &mut cx, BUDGET);
            }
        }
        self.finish(cx.sh);
    }
}

impl TxWaker for QpInner {
    fn tx_room(&self) {
        self.resume_soon();
    }
}

impl work::WorkOwner for QpInner {
    fn work_run(&self, _id: u32) {
        self.odp_fault_in();
        self.resume();
    }
}

impl timer::TimerOwner for QpInner {
    fn timer_fired(&self, id: u32) {
        match id {
            TIMER_RNR => self.rnr_expired(),
            TIMER_RETRY => self.retry_expired(),
            TIMER_REACK => self.reack_expired(),
            // The pacing timer: the work item resumes (only it runs the continuation).
            _ => self.resume_soon(),
        }
    }
}
