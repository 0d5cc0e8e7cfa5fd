// SPDX-License-Identifier: GPL-2.0-only
//! A QP's data-path half: the engine and the shell's own state under the QP lock, its rings,
//! CQs, timers and continuation, creation, a modify's application and shutdown, and what
//! `rdma res` and `query_qp` read of it.
//!
//! Every data-path lock (QP, CQ, SRQ, tables, the loopback buffer pool) is a spinlock taken
//! with bottom halves disabled. Lock order: QP, then SRQ or CQ, then a table or the pool.

use crate::datapath::{
    cq::CqInner,
    fabric::{DcqcnCopy, Fabric},
    path::Path,
    rx::deliver,
    srq::SrqInner,
    wq::{CONS, PROD},
};
use crate::ib::{
    bh::with_bh_disabled, inflight::Gauge, objects::QpRef, ring::SharedRing, timer, work,
};
use crate::logic::transport as tp;
use crate::logic::{
    dcqcn,
    qp_state::QpState,
    transport::{Engine, Resource, SqEntry},
};
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::{
    new_spinlock,
    sync::{Arc, SpinLock},
};

/// DCQCN's ceiling, kbit/s: a limited QP whose rate climbs back here is no longer limited
/// (the netdev's own speed then applies).
pub(super) const LINE_KBPS: u64 = 10_000_000;
/// Bytes a paced QP may send at once: about one pacing tick's worth at a few hundred Mb/s
/// (the pacing timer resumes a held QP on the next jiffy).
pub(super) const PACE_BURST: u64 = 64 * 1024;

/// The QP's timers: the ids their callbacks get (`sched.rs`).
pub(super) const TIMER_RNR: u32 = 0;

pub(super) const TIMER_PACE: u32 = 1;

pub(super) const TIMER_RETRY: u32 = 2;

pub(super) const TIMER_REACK: u32 = 3;

/// The engine with kernel storage.
pub(crate) type Eng = Engine<KVVec<u8>, KVVec<SqEntry>, KVVec<Resource>>;

/// Whose turn it is to send the responder's output (READ and atomic responses, ACKs and NAKs).
///
/// Responses must reach the requester in PSN order. On the wire they do: each context sends
/// them under the QP lock. A loopback delivery, though, only queues them, and processes its
/// queue after the lock is gone; if another context (the continuation, or a delivery on the
/// other CPU that brings a new request) sent the next responses meanwhile, they would overtake
/// the queued ones, and the requester would take the gap for a lost response and read again.
/// So a delivery that queued responder output keeps the turn until it has delivered it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum RespTurn {
    /// Nothing of the responder's is waiting for delivery: any context may send.
    Free,
    /// A loopback delivery (the [`Outbox::id`] given) holds responder packets; it gives the
    /// turn back once it has delivered them (`Receive::delivered`, in `sched.rs`).
    ///
    /// [`Outbox::id`]: crate::datapath::loopback::Outbox::id
    Held(usize),
    /// The continuation has the turn (it is scheduled). On a loopback path only: on the wire,
    /// any context may still send meanwhile (each sends under the QP lock).
    Cont,
}

/// The shell's own state of a QP (guarded by the QP lock, next to the engine).
pub(crate) struct Shell {
    /// The connected path (RC/UC).
    pub(super) path: Option<Path>,
    /// Kernel-side consumer indices of the SQ and RQ rings.
    pub(super) sq_cons: u32,
    pub(super) rq_cons: u32,
    /// A ring index was found out of range: that ring is not read again (until RESET).
    pub(super) sq_broken: bool,
    pub(super) rq_broken: bool,
    /// When the retransmit timer is due (jiffies); `None` while stopped. An expiry before it
    /// (a timer restarted or stopped while its callback was already running) is stale.
    pub(super) retry_at: Option<u64>,
    /// Work was left that the continuation must resume.
    pub(super) resume: bool,
    /// Who may send the responder's output next.
    pub(super) resp: RespTurn,
    /// The requester's turn on a loopback path, as [`RespTurn`] is the responder's: the
    /// delivery ([`Outbox::id`]) that queued requester packets of this QP and has not yet
    /// delivered them (0: none). Another context that sent meanwhile (a timer, the
    /// continuation, an ACK delivered on the other CPU) would overtake them, and the responder
    /// would take the gap for a loss (a sequence NAK, a go-back): so it sends nothing and
    /// leaves `req_wanted`, and the holder runs the requester once it has delivered.
    ///
    /// [`Outbox::id`]: crate::datapath::loopback::Outbox::id
    pub(super) req_owner: usize,
    /// A context found the requester's turn held by another delivery and sent nothing.
    pub(super) req_wanted: bool,
    /// The wire refused a packet during the current call.
    pub(super) congested: bool,
    /// The QP has [`inflight::HIGH`] skbs in the network stack: its gauge wakes it (no timer).
    pub(super) capped: bool,
    /// The QP is being destroyed ([`QpInner::shutdown`]): a packet that still found it in the
    /// QP table does nothing.
    pub(super) closed: bool,
    /// DCQCN: the reaction point (this QP's rate), the CNPs it sends as a notification point,
    /// and the pacer that holds its RC requests to the rate.
    pub(super) rp: dcqcn::Rp,
    pub(super) gate: dcqcn::CnpGate,
    pub(super) pacer: dcqcn::Pacer,
    /// The device's DCQCN settings as this QP last copied them (its packets read these, not
    /// the device's lock).
    pub(super) dc: DcqcnCopy,
    /// `rp` was limiting the rate when last looked at: counted in the device's
    /// `rate_limited_qps` gauge (taken out again when it recovers or the QP goes).
    pub(super) limited: bool,
    /// An on-demand-paging fault a data-path access left for the QP's work item (process
    /// context), which then resumes the QP.
    pub(super) odp_fault: Option<OdpFault>,
    /// The last such fault that failed: the next access that misses in its range fails.
    pub(super) odp_failed: Option<OdpFault>,
}

/// A range of an on-demand-paging MR to fault in.
#[derive(Clone, Copy)]
pub(crate) struct OdpFault {
    /// The MR's key (its table index and generation).
    pub(super) key: u32,
    /// Offset in the MR and bytes.
    pub(super) off: u64,
    pub(super) len: u64,
}

impl Shell {
    /// Brings the device's `rate_limited_qps` gauge in line with `rp` after a step of it.
    pub(super) fn sync_limited(&mut self, fab: &Fabric<QpInner>) {
        if self.rp.active != self.limited {
            self.limited = self.rp.active;
            fab.rate_limited(self.limited);
        }
    }
}

/// Engine state of a QP (guarded by the QP lock).
pub(crate) struct QpData {
    pub(crate) eng: Eng,
    pub(super) scratch: KVec<u8>,
    pub(super) sh: Shell,
}

/// A QP as the data path sees it.
#[pin_data]
pub(crate) struct QpInner {
    /// The RNR timer; the timers come first, so that they are shut down before anything else
    /// is dropped.
    #[pin]
    pub(super) timer: timer::Timer,
    /// The pacing timer: resumes what a congested wire stopped, on the next tick.
    #[pin]
    pub(super) pace: timer::Timer,
    /// The continuation: resumes at once, in process context, what a bounded context left
    /// (owed READ responses, a spent budget, a kernel doorbell with interrupts off).
    #[pin]
    pub(super) kick: work::Work,
    /// The retransmit timer.
    #[pin]
    pub(super) retry: timer::Timer,
    /// The responder's re-acknowledgement timer.
    #[pin]
    pub(super) reack: timer::Timer,
    /// This QP's skbs in the network stack (capped at [`inflight::HIGH`]).
    pub(super) gauge: Arc<Gauge<QpInner>>,
    pub(crate) qpn: u32,
    /// This QP's identity for the type-2 windows it binds (unique per device, never reused).
    pub(super) serial: u64,
    pub(super) pd: usize,
    pub(super) max_recv_sge: u32,
    pub(super) max_send_wr: u32,
    pub(super) max_recv_wr: u32,
    #[pin]
    pub(crate) st: SpinLock<QpData>,
    /// Serialises a kernel consumer's producers of the SQ and RQ rings (user QPs never take it:
    /// their producer is the provider).
    #[pin]
    pub(super) kpost: SpinLock<()>,
    pub(super) sq: Option<(SharedRing, u32, usize)>,
    pub(super) rq: Option<(SharedRing, u32, usize)>,
    pub(super) send_cq: Arc<CqInner>,
    pub(super) recv_cq: Arc<CqInner>,
    pub(super) srq: Option<Arc<SrqInner>>,
    pub(super) ev: QpRef,
    pub(super) fabric: Arc<Fabric<QpInner>>,
}

/// What a new [`QpInner`] is made of.
pub(crate) struct QpParts {
    pub(crate) qpn: u32,
    pub(crate) pd: usize,
    pub(crate) max_recv_sge: u32,
    /// The capacities answered at create (`max_send_wr`, `max_recv_wr`): a kernel consumer's
    /// post beyond them fails with `ENOMEM` (the provider bounds a user QP's).
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) eng: Eng,
    pub(crate) sq: Option<(SharedRing, u32, usize)>,
    pub(crate) rq: Option<(SharedRing, u32, usize)>,
    pub(crate) send_cq: Arc<CqInner>,
    pub(crate) recv_cq: Arc<CqInner>,
    pub(crate) srq: Option<Arc<SrqInner>>,
    pub(crate) ev: QpRef,
    pub(crate) fabric: Arc<Fabric<QpInner>>,
}

/// A QP's data-path state for `rdma resource show qp -dd`.
pub(crate) struct QpRes {
    pub(crate) sq_psn: u32,
    pub(crate) rq_psn: u32,
    pub(crate) details: tp::Details,
    /// (slots, WQEs posted and not yet taken) of the SQ and RQ rings.
    pub(crate) sq: Option<(u32, u32)>,
    pub(crate) rq: Option<(u32, u32)>,
    /// A ring was found with an index out of range.
    pub(crate) broken: bool,
    /// DCQCN: the rate a CNP set, kbit/s, while it limits the QP; its cuts so far.
    pub(crate) rate: Option<u64>,
    pub(crate) rate_cuts: u64,
}

impl QpInner {
    pub(crate) fn new(p: QpParts) -> Result<impl PinInit<Self, Error>> {
        // Room for a packet of the MTU the engine starts with; a modify to a larger path MTU
        // grows it first (`QpInner::fit_scratch`).
        let scratch = KVec::from_elem(0u8, tp::packet_room(p.eng.config().mtu), GFP_KERNEL)?;
        let sh = Shell {
            path: None,
            sq_cons: 0,
            rq_cons: 0,
            sq_broken: false,
            rq_broken: false,
            retry_at: None,
            resume: false,
            resp: RespTurn::Free,
            req_owner: 0,
            req_wanted: false,
            congested: false,
            capped: false,
            closed: false,
            rp: dcqcn::Rp::new(LINE_KBPS),
            gate: dcqcn::CnpGate::default(),
            pacer: dcqcn::Pacer::new(PACE_BURST, 0),
            dc: DcqcnCopy::new(),
            limited: false,
            odp_fault: None,
            odp_failed: None,
        };
        let data = QpData {
            eng: p.eng,
            scratch,
            sh,
        };
        let gauge = Gauge::new()?;
        Ok(try_pin_init!(QpInner {
            gauge,
            qpn: p.qpn,
            serial: p.fabric.qp_serial.fetch_add(1, Ordering::Relaxed),
            pd: p.pd,
            max_recv_sge: p.max_recv_sge,
            max_send_wr: p.max_send_wr,
            max_recv_wr: p.max_recv_wr,
            st <- new_spinlock!(data, "rrxe:qp"),
            kpost <- new_spinlock!((), "rrxe:qp_kpost"),
            sq: p.sq,
            rq: p.rq,
            send_cq: p.send_cq,
            recv_cq: p.recv_cq,
            srq: p.srq,
            ev: p.ev,
            fabric: p.fabric,
            timer <- timer::Timer::for_owner::<QpInner, TIMER_RNR>(),
            pace <- timer::Timer::for_owner::<QpInner, TIMER_PACE>(),
            kick <- work::Work::for_owner::<QpInner, 0>(),
            retry <- timer::Timer::for_owner::<QpInner, TIMER_RETRY>(),
            reack <- timer::Timer::for_owner::<QpInner, TIMER_REACK>(),
        }? Error))
    }

    /// Connects the timers to this QP (right after creation).
    pub(crate) fn bind_timer(&self, me: &Arc<QpInner>) -> Result {
        self.timer.bind(me)?;
        self.pace.bind(me)?;
        self.kick.bind(me)?;
        self.retry.bind(me)?;
        self.reack.bind(me)
    }

    /// Lets the transmit gauge wake this QP. The last step of creation: from here on only
    /// [`QpInner::shutdown`] breaks the reference cycle it makes.
    pub(crate) fn attach_gauge(&self, me: &Arc<QpInner>) {
        self.gauge.attach(me.clone());
    }

    /// The SRQ's SGE limit (0 without an SRQ).
    pub(crate) fn srq_max_sge(&self) -> u32 {
        self.srq.as_ref().map_or(0, |s| s.max_sge)
    }

    /// Stops the continuation and the timers for good and closes the QP to packets (before it
    /// is freed). The work item goes first: a timer that fires meanwhile can no longer queue it.
    pub(crate) fn shutdown(&self) {
        // First: the gauge's reference to this QP (a cycle until now) goes, and no skb
        // destructor can queue the work item afterwards.
        self.gauge.detach();
        self.kick.shutdown_sync();
        self.timer.shutdown_sync();
        self.pace.shutdown_sync();
        self.retry.shutdown_sync();
        self.reack.shutdown_sync();
        // Last: a receive path that took the QP from its table before the owner removes it
        // either holds the lock now (and is waited for here) or finds it closed, so nothing
        // acts on it any more. Its reference may still be held until the end of that path's
        // section: the owner's `Table::remove_and_wait` waits for that.
        with_bh_disabled(|| {
            let mut g = self.st.lock();
            g.sh.closed = true;
            if g.sh.limited {
                g.sh.limited = false;
                self.fabric.rate_limited(false);
            }
        });
    }

    /// What `rdma resource show qp -dd` reports (the rings' fill is clamped to their size: a
    /// user may have written anything into its producer index).
    pub(crate) fn res(&self) -> QpRes {
        with_bh_disabled(|| {
            let mut d = self.st.lock();
            // Brings an idle QP's rate up to now (it recovers with time, not only as it
            // sends), and the device's `rate_limited_qps` with it.
            if d.sh.rp.active {
                let sh = &mut d.sh;
                self.fabric.dcqcn_refresh(&mut sh.dc);
                let p = sh.dc.settings.params;
                sh.rp.tick(&p, timer::now_us());
                sh.sync_limited(&self.fabric);
            }
            let fill = |r: &Option<(SharedRing, u32, usize)>, cons: u32| {
                r.as_ref().map(|(ring, slots, _)| {
                    (
                        *slots,
                        ring.load_acquire(PROD).wrapping_sub(cons).min(*slots),
                    )
                })
            };
            QpRes {
                sq_psn: d.eng.sq_psn(),
                rq_psn: d.eng.rq_psn(),
                details: d.eng.details(),
                sq: fill(&self.sq, d.sh.sq_cons),
                rq: fill(&self.rq, d.sh.rq_cons),
                broken: d.sh.sq_broken || d.sh.rq_broken,
                rate: d.sh.rp.rate(),
                rate_cuts: d.sh.rp.cuts,
            }
        })
    }

    /// State, send PSN, receive PSN and SQ-draining as the data path knows them.
    pub(crate) fn snapshot(&self) -> (QpState, u32, u32, bool) {
        with_bh_disabled(|| {
            let d = self.st.lock();
            (
                d.eng.state(),
                d.eng.sq_psn(),
                d.eng.rq_psn(),
                d.eng.sq_draining(),
            )
        })
    }
}

impl QpInner {
    /// Applies a committed modify_qp, validated while the QP was in `from`, to the engine:
    /// configuration, path, PSNs and state. A move to ERR or SQE that the data path made since
    /// the validation sticks unless the modify goes to RESET or ERR
    /// ([`QpState::modify_applies`], decided under the QP lock). `retries`: the modify set
    /// `retry_cnt`, `rnr_retry` (the counters in use start over). Returns the QP's state after.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &self,
        cfg: tp::Config,
        path: Option<Path>,
        sq_psn: Option<u32>,
        rq_psn: Option<u32>,
        state: Option<(QpState, bool)>,
        from: QpState,
        retries: (bool, bool),
    ) -> QpState {
        with_bh_disabled(|| {
            let mut out = self.fabric.outbox(0, None);
            let now = {
                let mut g = self.st.lock();
                let d = &mut *g;
                let state = state.filter(|&(s, _)| QpState::modify_applies(from, d.eng.state(), s));
                d.eng.set_config(cfg, retries.0, retries.1);
                if let Some(p) = path {
                    d.sh.path = path;
                    // A loopback path has no bottleneck queue to fill: the whole window at once.
                    d.eng.set_initial_window(if p.loopback {
                        tp::RC_WINDOW
                    } else {
                        tp::INITIAL_WINDOW
                    });
                }
                if let Some((QpState::Reset, _)) = state {
                    Self::discard_rings(&mut d.sh, self);
                }
                let mut cx = self.ctx(&mut d.sh, &mut out);
                if let Some((s, notify)) = state {
                    d.eng.set_state(&mut cx, s, notify);
                }
                d.eng.set_psns(sq_psn, rq_psn);
                self.finish(cx.sh);
                d.eng.state()
            };
            deliver(&self.fabric, &mut out);
            now
        })
    }

    /// Responder resources the engine has storage for.
    pub(crate) fn resource_storage(&self) -> usize {
        with_bh_disabled(|| self.st.lock().eng.resource_storage())
    }

    /// Gives the engine larger storage for its responder resources (the ones in use move into
    /// it); returns the storage not kept, to be freed by the caller outside the lock.
    pub(crate) fn grow_resources(&self, new: KVVec<Resource>) -> KVVec<Resource> {
        with_bh_disabled(|| self.st.lock().eng.grow_resources(new))
    }

    /// Makes the scratch packet at least `len` bytes (before a modify lets the engine run
    /// with a larger MTU; it is never shrunk). Process context: may allocate.
    pub(crate) fn fit_scratch(&self, len: usize) -> Result {
        if with_bh_disabled(|| self.st.lock().scratch.len()) >= len {
            return Ok(());
        }
        let mut new = KVec::from_elem(0u8, len, GFP_KERNEL)?;
        with_bh_disabled(|| {
            let mut d = self.st.lock();
            if d.scratch.len() < new.len() {
                core::mem::swap(&mut d.scratch, &mut new);
            }
        });
        // The old buffer (or the new one, had another modify been first) is freed here.
        drop(new);
        Ok(())
    }

    /// Discards everything posted to the rings (the QP went to RESET); the rings are consistent
    /// again, so a broken one is read again.
    pub(super) fn discard_rings(sh: &mut Shell, qp: &QpInner) {
        if let Some((r, _, _)) = &qp.sq {
            sh.sq_cons = r.load_acquire(PROD);
            r.store_release(CONS, sh.sq_cons);
        }
        if let Some((r, _, _)) = &qp.rq {
            sh.rq_cons = r.load_acquire(PROD);
            r.store_release(CONS, sh.rq_cons);
        }
        sh.sq_broken = false;
        sh.rq_broken = false;
    }
}
