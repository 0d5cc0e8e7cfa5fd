// SPDX-License-Identifier: GPL-2.0-only
//! The data path's imperative shell: object tables, the engine's [`Env`] over MRs, rings and
//! the UDP socket, the send doorbell, packet receive and loopback delivery.
//!
//! Processing model: a send doorbell (the provider's `post_send` system call) drains the SQ in
//! the caller's context, bottom halves disabled, up to a budget per pass; received packets are
//! handled in the UDP receive softirq; packets to our own GID never touch the network stack and
//! are delivered in the sender's context from a local queue (no recursion, no workqueue hop).
//! Every data-path lock (QP, CQ, SRQ, tables) is a spinlock taken with bottom halves disabled.
//! Lock order: QP, then SRQ or CQ, then a table.

use super::av::Path;
use crate::ib::{
    bh::{synchronize_rcu, with_bh_disabled},
    netdev::NetDev,
    objects::{CqRef, QpEvent, QpRef, SrqRef, Umem},
    ring::SharedRing,
    udp::{LazyUdp, TxPath, XmitError},
};
use crate::logic::{
    idalloc,
    qp_state::QpState,
    roce,
    transport::{
        self as tp, Access, AtomicOp, CqSel, Dest, Engine, Env, Event, MemError, RecvTake, RecvWr, RxInfo, SqEntry,
    },
    wire::Packet,
};
use crate::uapi::{self, Cqe, RingHeader};
use core::{
    mem::offset_of,
    sync::atomic::{fence, AtomicU64, Ordering},
};
use kernel::{new_spinlock, prelude::*, sync::Arc, sync::SpinLock};

/// The engine with kernel storage.
pub(crate) type Eng = Engine<KVVec<u8>, KVVec<SqEntry>>;

/// Packets a doorbell pass may send before the SQ lock is released.
const BUDGET: u32 = 64;
/// Passes one doorbell makes at most (the rest waits for ACKs or the next doorbell).
const MAX_PASSES: u32 = 1 << 16;

const PROD: usize = offset_of!(RingHeader, producer);
const CONS: usize = offset_of!(RingHeader, consumer);
const FLAGS: usize = offset_of!(RingHeader, flags);
const HDR: usize = uapi::RING_HEADER_SIZE;

/// Device-wide data-path drop and error counters (not exported yet: a counters interface
/// (rdma statistic / hw_counters) is future work; the engine keeps per-QP counters too).
#[derive(Default)]
pub(crate) struct DpCounters {
    pub(crate) rx_no_qp: AtomicU64,
    pub(crate) rx_malformed: AtomicU64,
    pub(crate) tx_no_ah: AtomicU64,
    pub(crate) tx_err: AtomicU64,
    pub(crate) alloc_fail: AtomicU64,
    pub(crate) bad_ring: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A table of objects by small index, reachable from any context.
#[pin_data]
pub(crate) struct Table<T> {
    #[pin]
    slots: SpinLock<KVVec<Option<Arc<T>>>>,
}

impl<T: Send + Sync> Table<T> {
    fn new(n: u32) -> Result<impl PinInit<Self, Error>> {
        let v = KVVec::from_elem(None, n as usize, GFP_KERNEL)?;
        Ok(try_pin_init!(Table { slots <- new_spinlock!(v, "rrxe:table") }? Error))
    }

    pub(crate) fn insert(&self, i: u32, v: Arc<T>) -> Result {
        with_bh_disabled(|| {
            let mut s = self.slots.lock();
            match s.get_mut(i as usize) {
                Some(slot @ None) => {
                    *slot = Some(v);
                    Ok(())
                }
                Some(Some(_)) => Err(EBUSY),
                None => Err(EINVAL),
            }
        })
    }

    /// Removes entry `i` and waits until no receive path or doorbell can still be using it.
    pub(crate) fn remove_sync(&self, i: u32) -> Option<Arc<T>> {
        let v = with_bh_disabled(|| self.slots.lock().get_mut(i as usize).and_then(Option::take));
        synchronize_rcu();
        v
    }

    /// Looks up entry `i` (bottom halves disabled).
    pub(crate) fn get(&self, i: u32) -> Option<Arc<T>> {
        self.slots.lock().get(i as usize).and_then(|e| e.clone())
    }
}

/// A registered memory region as the data path sees it.
pub(crate) struct MrInner {
    pub(crate) key: u32,
    pub(crate) pd: usize,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    pub(crate) umem: Umem,
}

/// An address handle as the data path sees it.
pub(crate) struct AhInner {
    pub(crate) path: Path,
    /// The PD the AH was created in: a UD WQE may only name an AH of its QP's PD.
    pub(crate) pd: usize,
}

/// Per-device data-path state, shared with the receive path.
#[pin_data]
pub(crate) struct Fabric {
    #[pin]
    pub(crate) qps: Table<QpInner>,
    #[pin]
    pub(crate) mrs: Table<MrInner>,
    #[pin]
    pub(crate) ahs: Table<AhInner>,
    pub(crate) counters: DpCounters,
    /// The RoCEv2 socket of the netdev's namespace, opened on first use.
    #[pin]
    pub(crate) udp: LazyUdp,
}

impl Fabric {
    pub(crate) fn new(netdev: &NetDev) -> Result<impl PinInit<Self, Error>> {
        let (q, m, a) = (
            Table::new(crate::logic::limits::MAX_QP + 64)?,
            Table::new(crate::logic::limits::MAX_MR + 64)?,
            Table::new(crate::logic::limits::MAX_AH + 64)?,
        );
        let udp = LazyUdp::new(netdev);
        Ok(try_pin_init!(Fabric {
            qps <- q,
            mrs <- m,
            ahs <- a,
            counters: DpCounters::default(),
            udp <- udp,
        }? Error))
    }

    /// Opens the UDP socket if a path needs the wire (process context). `EADDRINUSE` when
    /// another driver (rdma_rxe) holds UDP port 4791 in this namespace.
    pub(crate) fn need_wire(&self, path: &Path) -> Result {
        if path.loopback {
            return Ok(());
        }
        self.udp.open(rx_wire)
    }

    fn send(&self, path: &Path, sport: u16, pkt: &[u8]) -> Result<(), XmitError> {
        let sgid = path.av.sgid.map(|s| s.gid).ok_or(XmitError::Failed(EINVAL))?;
        let tx = TxPath {
            sgid,
            dgid: path.av.dgid,
            is_v4: matches!(roce::gid_to_addr(sgid), roce::GidAddr::V4(_)),
            udp_sport: sport,
            tclass: path.av.traffic_class,
            hop_limit: path.hop_limit,
            flow_label: path.av.flow_label,
        };
        self.udp.xmit(&tx, pkt)
    }
}

/// CQ ring state (guarded by the CQ lock).
struct CqRing {
    ring: Option<SharedRing>,
    /// Slots of `ring` (kernel copy; the header in shared memory is not trusted).
    slots: u32,
    /// Our producer index (never read back from shared memory).
    prod: u32,
    /// 0: not armed; 1: next completion; 2: next solicited completion.
    armed: u8,
    overflowed: bool,
}

/// A completion queue as the data path sees it.
#[pin_data]
pub(crate) struct CqInner {
    #[pin]
    st: SpinLock<CqRing>,
    ev: CqRef,
}

impl CqInner {
    pub(crate) fn new(ring: Option<SharedRing>, slots: u32, ev: CqRef) -> impl PinInit<Self, Error> {
        try_pin_init!(CqInner {
            st <- new_spinlock!(CqRing { ring, slots, prod: 0, armed: 0, overflowed: false }, "rrxe:cq"),
            ev,
        }? Error)
    }

    /// Writes a completion; `false` when the CQ is full (the completion is lost and CQ_ERR is
    /// reported once). Bottom halves disabled.
    fn push(&self, c: &Cqe, solicited: bool) -> bool {
        let mut notify = false;
        let ok = {
            let mut st = self.st.lock();
            let st = &mut *st;
            let Some(ring) = st.ring.as_ref() else { return false };
            let cons = ring.load_acquire(CONS);
            if st.prod.wrapping_sub(cons) >= st.slots {
                if !st.overflowed {
                    st.overflowed = true;
                    notify = true;
                }
                false
            } else {
                let off = HDR + (st.prod & (st.slots - 1)) as usize * uapi::CQE_SIZE;
                let _ = ring.write(off, &tp::encode_cqe(c));
                st.prod = st.prod.wrapping_add(1);
                ring.store_release(PROD, st.prod);
                if st.armed == 1 || (st.armed == 2 && solicited) {
                    st.armed = 0;
                    notify = true;
                }
                true
            }
        };
        if notify {
            if ok {
                self.ev.comp_event();
            } else {
                self.ev.error_event();
            }
        }
        ok
    }

    /// Arms the CQ; returns whether completions are waiting.
    pub(crate) fn arm(&self, solicited_only: bool) -> bool {
        with_bh_disabled(|| {
            let mut st = self.st.lock();
            st.armed = if solicited_only { 2 } else { 1 };
            match st.ring.as_ref() {
                Some(r) => st.prod != r.load_acquire(CONS),
                None => false,
            }
        })
    }

    /// Replaces the ring (resize), carrying over completions not yet consumed.
    pub(crate) fn replace_ring(&self, new: SharedRing, slots: u32) {
        let old = with_bh_disabled(|| {
            let mut st = self.st.lock();
            let mut moved = 0u32;
            if let Some(old) = st.ring.as_ref() {
                let cons = old.load_acquire(CONS);
                let pending = st.prod.wrapping_sub(cons).min(st.slots).min(slots);
                let mut buf = [0u8; uapi::CQE_SIZE];
                for i in 0..pending {
                    let idx = cons.wrapping_add(i);
                    let from = HDR + (idx & (st.slots - 1)) as usize * uapi::CQE_SIZE;
                    if old.read(from, &mut buf).is_ok() {
                        let _ = new.write(HDR + (moved & (slots - 1)) as usize * uapi::CQE_SIZE, &buf);
                        moved += 1;
                    }
                }
            }
            new.store_release(PROD, moved);
            st.prod = moved;
            st.slots = slots;
            st.overflowed = false;
            st.ring.replace(new)
        });
        drop(old);
    }
}

/// SRQ ring state.
struct SrqRing {
    ring: SharedRing,
    slots: u32,
    slot_size: usize,
    cons: u32,
    limit: u32,
}

/// A shared receive queue as the data path sees it.
#[pin_data]
pub(crate) struct SrqInner {
    #[pin]
    st: SpinLock<SrqRing>,
    ev: SrqRef,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
}

impl SrqInner {
    pub(crate) fn new(ring: SharedRing, slots: u32, slot_size: usize, max_wr: u32, max_sge: u32, limit: u32, ev: SrqRef)
        -> impl PinInit<Self, Error> {
        try_pin_init!(SrqInner {
            st <- new_spinlock!(SrqRing { ring, slots, slot_size, cons: 0, limit }, "rrxe:srq"),
            ev,
            max_wr,
            max_sge,
        }? Error)
    }

    pub(crate) fn set_limit(&self, limit: u32) {
        with_bh_disabled(|| self.st.lock().limit = limit);
    }

    pub(crate) fn limit(&self) -> u32 {
        with_bh_disabled(|| self.st.lock().limit)
    }

    fn take(&self, out: &mut RecvWr) -> RecvTake {
        let mut fire = false;
        let r = {
            let mut st = self.st.lock();
            let st = &mut *st;
            let r = take_from_ring(&st.ring, st.slots, st.slot_size, &mut st.cons, self.max_sge, out);
            if r == RecvTake::Taken && st.limit != 0 {
                let left = st.ring.load_acquire(PROD).wrapping_sub(st.cons);
                if left < st.limit {
                    st.limit = 0;
                    fire = true;
                }
            }
            r
        };
        if fire {
            self.ev.limit_event();
        }
        r
    }
}

/// Takes the next receive WQE from a ring whose kernel-side consumer index is `cons`.
fn take_from_ring(ring: &SharedRing, slots: u32, slot_size: usize, cons: &mut u32, max_sge: u32, out: &mut RecvWr)
    -> RecvTake {
    let prod = ring.load_acquire(PROD);
    let avail = prod.wrapping_sub(*cons);
    if avail == 0 {
        return RecvTake::Empty;
    }
    if avail > slots {
        // The producer index is garbage: this process broke its own queue.
        return RecvTake::Bad;
    }
    let mut buf = [0u8; uapi::recv_slot_size(crate::logic::limits::MAX_SGE)];
    let n = slot_size.min(buf.len());
    let off = HDR + (*cons & (slots - 1)) as usize * slot_size;
    let ok = ring.read(off, &mut buf[..n]).is_ok();
    *cons = cons.wrapping_add(1);
    ring.store_release(CONS, *cons);
    match (ok, RecvWr::decode(&buf[..n], max_sge)) {
        (true, Some(w)) => {
            *out = w;
            RecvTake::Taken
        }
        _ => RecvTake::Bad,
    }
}

/// Engine state of a QP (guarded by the QP lock).
pub(crate) struct QpData {
    pub(crate) eng: Eng,
    scratch: KVec<u8>,
    /// The connected path (RC/UC).
    pub(crate) path: Option<Path>,
    /// Kernel-side consumer indices of the SQ and RQ rings.
    sq_cons: u32,
    rq_cons: u32,
}

/// A QP as the data path sees it.
#[pin_data]
pub(crate) struct QpInner {
    /// The RNR timer; first, so that it is shut down before anything else is dropped.
    #[pin]
    timer: crate::ib::timer::Timer,
    /// Paces owed READ responses on the wire (fires on the next tick).
    #[pin]
    pace: crate::ib::timer::Timer,
    pub(crate) qpn: u32,
    pd: usize,
    max_recv_sge: u32,
    #[pin]
    pub(crate) st: SpinLock<QpData>,
    sq: Option<(SharedRing, u32, usize)>,
    rq: Option<(SharedRing, u32, usize)>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    srq: Option<Arc<SrqInner>>,
    ev: QpRef,
    fabric: Arc<Fabric>,
}

/// What a new [`QpInner`] is made of.
pub(crate) struct QpParts {
    pub(crate) qpn: u32,
    pub(crate) pd: usize,
    pub(crate) max_recv_sge: u32,
    pub(crate) eng: Eng,
    pub(crate) sq: Option<(SharedRing, u32, usize)>,
    pub(crate) rq: Option<(SharedRing, u32, usize)>,
    pub(crate) send_cq: Arc<CqInner>,
    pub(crate) recv_cq: Arc<CqInner>,
    pub(crate) srq: Option<Arc<SrqInner>>,
    pub(crate) ev: QpRef,
    pub(crate) fabric: Arc<Fabric>,
}

impl QpInner {
    pub(crate) fn new(p: QpParts) -> Result<impl PinInit<Self, Error>> {
        let scratch = KVec::from_elem(0u8, tp::MAX_PKT, GFP_KERNEL)?;
        let data = QpData { eng: p.eng, scratch, path: None, sq_cons: 0, rq_cons: 0 };
        Ok(try_pin_init!(QpInner {
            qpn: p.qpn,
            pd: p.pd,
            max_recv_sge: p.max_recv_sge,
            st <- new_spinlock!(data, "rrxe:qp"),
            sq: p.sq,
            rq: p.rq,
            send_cq: p.send_cq,
            recv_cq: p.recv_cq,
            srq: p.srq,
            ev: p.ev,
            fabric: p.fabric,
            timer <- crate::ib::timer::Timer::for_owner::<QpInner, TIMER_RNR>(),
            pace <- crate::ib::timer::Timer::for_owner::<QpInner, TIMER_PACE>(),
        }? Error))
    }

    /// Connects the timers to this QP (right after creation).
    pub(crate) fn bind_timer(&self, me: &Arc<QpInner>) -> Result {
        self.timer.bind(me)?;
        self.pace.bind(me)
    }

    /// The SRQ's SGE limit (0 without an SRQ).
    pub(crate) fn srq_max_sge(&self) -> u32 {
        self.srq.as_ref().map_or(0, |s| s.max_sge)
    }

    /// Stops the timers for good (before the QP is freed).
    pub(crate) fn shutdown(&self) {
        self.timer.shutdown_sync();
        self.pace.shutdown_sync();
    }

    /// Sends owed READ responses: all at once to ourselves, a burst per tick on the wire.
    fn run_responder(&self, d: &mut QpData, cx: &mut Ctx<'_>) {
        if !d.eng.responder_pending() {
            return;
        }
        let budget = if d.path.is_some_and(|p| p.loopback) { u32::MAX } else { tp::READ_BURST };
        d.eng.run_responder(cx, &mut d.scratch, budget);
        if d.eng.responder_pending() {
            self.pace.arm(0);
        }
    }

    fn pace_expired(&self) {
        with_bh_disabled(|| {
            let mut out = Outbox::new();
            {
                let mut g = self.st.lock();
                let d = &mut *g;
                let mut rq_cons = d.rq_cons;
                let mut cx = Ctx { qp: self, path: d.path, out: &mut out, rq_cons: &mut rq_cons };
                self.run_responder(d, &mut cx);
                d.rq_cons = rq_cons;
            }
            deliver(&self.fabric, &mut out);
        });
    }

    /// Applies a committed modify_qp to the engine: configuration, path, PSNs and state.
    pub(crate) fn apply(&self, cfg: tp::Config, path: Option<Path>, sq_psn: Option<u32>, rq_psn: Option<u32>,
        state: Option<(QpState, bool)>) {
        with_bh_disabled(|| {
            let mut out = Outbox::new();
            {
                let mut g = self.st.lock();
                let d = &mut *g;
                d.eng.set_config(cfg);
                if path.is_some() {
                    d.path = path;
                }
                if let Some((QpState::Reset, _)) = state {
                    Self::discard_rings(d, self);
                }
                let mut rq_cons = d.rq_cons;
                let mut cx = Ctx { qp: self, path: d.path, out: &mut out, rq_cons: &mut rq_cons };
                if let Some((s, notify)) = state {
                    d.eng.set_state(&mut cx, s, notify);
                }
                d.eng.set_psns(sq_psn, rq_psn);
                d.rq_cons = rq_cons;
            }
            deliver(&self.fabric, &mut out);
        });
    }

    /// State, send PSN, receive PSN and SQ-draining as the data path knows them.
    pub(crate) fn snapshot(&self) -> (QpState, u32, u32, bool) {
        with_bh_disabled(|| {
            let d = self.st.lock();
            (d.eng.state(), d.eng.sq_psn(), d.eng.rq_psn(), d.eng.sq_draining())
        })
    }

    /// Moves new WQEs from the shared SQ into the engine. Returns whether the ring still has
    /// WQEs the engine had no room for.
    fn pull_sq(&self, d: &mut QpData, cx: &mut Ctx<'_>) -> bool {
        let Some((ring, slots, slot_size)) = &self.sq else { return false };
        let prod = ring.load_acquire(PROD);
        let avail = prod.wrapping_sub(d.sq_cons);
        if avail > *slots {
            bump(&self.fabric.counters.bad_ring);
            let e = &mut d.eng;
            e.set_state(cx, QpState::Err, false);
            self.ev.event(QpEvent::Fatal);
            return false;
        }
        let mut n = 0;
        while n < avail {
            let Some(slot) = d.eng.sq_slot_mut() else { break };
            let off = HDR + (d.sq_cons & (*slots - 1)) as usize * *slot_size;
            let len = slot.len().min(*slot_size);
            if ring.read(off, &mut slot[..len]).is_err() {
                break;
            }
            d.eng.sq_pushed(cx);
            d.sq_cons = d.sq_cons.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            ring.store_release(CONS, d.sq_cons);
        }
        n < avail
    }

    /// One doorbell pass: pull, flush in ERR, send up to the budget. Returns whether work is
    /// left that a further pass could do now.
    fn pass(&self, out: &mut Outbox) -> bool {
        let mut g = self.st.lock();
        let d = &mut *g;
        let mut rq_cons = d.rq_cons;
        let more = {
            let mut cx = Ctx { qp: self, path: d.path, out, rq_cons: &mut rq_cons };
            let ring_left = self.pull_sq(d, &mut cx);
            d.eng.flush_if_err(&mut cx);
            let sent = d.eng.run_requester(&mut cx, &mut d.scratch, BUDGET);
            // Another pass helps when the budget ran out, or when WQEs wait in the ring and
            // sending made room for them.
            (sent == BUDGET && d.eng.requester_ready()) || (ring_left && d.eng.sq_room() > 0)
        };
        d.rq_cons = rq_cons;
        more
    }

    fn sq_pending(&self) -> bool {
        let Some((ring, _, _)) = &self.sq else { return false };
        let d = self.st.lock();
        ring.load_acquire(PROD) != d.sq_cons && d.eng.sq_room() > 0
    }

    /// The send doorbell (process context).
    pub(crate) fn doorbell(&self) -> Result {
        let Some((ring, _, _)) = &self.sq else { return Err(EINVAL) };
        for _ in 0..MAX_PASSES {
            ring.store_release(FLAGS, uapi::SQ_FLAG_KERNEL_BUSY);
            let more = with_bh_disabled(|| {
                let mut out = Outbox::new();
                let more = self.pass(&mut out);
                deliver(&self.fabric, &mut out);
                more
            });
            if more {
                continue;
            }
            ring.store_release(FLAGS, 0);
            fence(Ordering::SeqCst);
            if !with_bh_disabled(|| self.sq_pending()) {
                return Ok(());
            }
        }
        ring.store_release(FLAGS, 0);
        Ok(())
    }

    /// Handles a packet for this QP (bottom halves disabled).
    fn rx(&self, pkt: &Packet<'_>, info: &RxInfo, out: &mut Outbox) {
        let mut g = self.st.lock();
        let d = &mut *g;
        let mut rq_cons = d.rq_cons;
        {
            let mut cx = Ctx { qp: self, path: d.path, out, rq_cons: &mut rq_cons };
            let go = d.eng.rx(&mut cx, &mut d.scratch, pkt, info);
            self.run_responder(d, &mut cx);
            d.eng.flush_ack(&mut cx, &mut d.scratch);
            if go {
                self.pull_sq(d, &mut cx);
                d.eng.run_requester(&mut cx, &mut d.scratch, BUDGET * 4);
            }
        }
        d.rq_cons = rq_cons;
    }

    /// The RNR timer fired.
    fn rnr_expired(&self) {
        with_bh_disabled(|| {
            let mut out = Outbox::new();
            {
                let mut g = self.st.lock();
                let d = &mut *g;
                d.eng.rnr_timer_expired();
                let mut rq_cons = d.rq_cons;
                let mut cx = Ctx { qp: self, path: d.path, out: &mut out, rq_cons: &mut rq_cons };
                d.eng.run_requester(&mut cx, &mut d.scratch, BUDGET * 4);
                d.rq_cons = rq_cons;
            }
            deliver(&self.fabric, &mut out);
        });
    }

    /// Discards everything posted to the rings (the QP went to RESET).
    pub(crate) fn discard_rings(d: &mut QpData, qp: &QpInner) {
        if let Some((r, _, _)) = &qp.sq {
            d.sq_cons = r.load_acquire(PROD);
            r.store_release(CONS, d.sq_cons);
        }
        if let Some((r, _, _)) = &qp.rq {
            d.rq_cons = r.load_acquire(PROD);
            r.store_release(CONS, d.rq_cons);
        }
    }
}

const TIMER_RNR: u32 = 0;
const TIMER_PACE: u32 = 1;

impl crate::ib::timer::TimerOwner for QpInner {
    fn timer_fired(&self, id: u32) {
        if id == TIMER_RNR {
            self.rnr_expired();
        } else {
            self.pace_expired();
        }
    }
}

/// Loopback packets waiting for delivery.
pub(crate) struct Outbox {
    pkts: KVec<(KVec<u8>, [u8; tp::GRH_LEN])>,
}

impl Outbox {
    fn new() -> Self {
        Outbox { pkts: KVec::new() }
    }
}

/// Delivers queued loopback packets (and those their processing queues) to `fabric`'s QPs.
fn deliver(fabric: &Fabric, out: &mut Outbox) {
    let mut i = 0;
    while i < out.pkts.len() {
        let (bytes, grh) = core::mem::replace(&mut out.pkts[i], (KVec::new(), [0; tp::GRH_LEN]));
        i += 1;
        // `bytes` is freed right after use; only the small list entries accumulate.
        rx_packet(fabric, &bytes, grh, out);
    }
    out.pkts = KVec::new();
}

/// Handles one packet (BTH .. ICRC, ICRC already checked or not needed). `grh` is the GRH a
/// UD receiver gets; loopback packets synthesise one.
pub(crate) fn rx_packet(fabric: &Fabric, bytes: &[u8], grh: [u8; tp::GRH_LEN], out: &mut Outbox) {
    let pkt = match Packet::parse(bytes) {
        Ok(p) => p,
        Err(_) => {
            bump(&fabric.counters.rx_malformed);
            return;
        }
    };
    let Some(qp) = fabric.qps.get(pkt.bth().dest_qp) else {
        bump(&fabric.counters.rx_no_qp);
        return;
    };
    qp.rx(&pkt, &RxInfo { grh }, out);
}

/// The GRH of a packet that went from `path`'s destination back to us (loopback: both ends are
/// our own GID).
fn loopback_grh(p: &Path, len: usize) -> [u8; tp::GRH_LEN] {
    let sgid = p.av.sgid.map(|s| s.gid).unwrap_or(p.av.dgid);
    tp::make_grh(sgid, p.av.dgid, p.av.traffic_class, p.hop_limit, p.av.flow_label, len)
}

/// The engine's environment for one QP, valid while its lock is held.
pub(crate) struct Ctx<'a> {
    qp: &'a QpInner,
    path: Option<Path>,
    out: &'a mut Outbox,
    rq_cons: &'a mut u32,
}

impl Ctx<'_> {
    fn mr(&self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(Arc<MrInner>, u64), MemError> {
        let m = self.qp.fabric.mrs.get(idalloc::key_index(key)).ok_or(MemError::BadKey)?;
        if m.key != key {
            return Err(MemError::BadKey);
        }
        if m.pd != self.qp.pd {
            return Err(MemError::BadPd);
        }
        let need = match acc {
            Access::LocalRead => 0,
            Access::LocalWrite => tp::access::LOCAL_WRITE,
            Access::RemoteRead => tp::access::REMOTE_READ,
            Access::RemoteWrite => tp::access::REMOTE_WRITE,
            Access::RemoteAtomic => tp::access::REMOTE_ATOMIC,
        };
        if m.access & need != need {
            return Err(MemError::Access);
        }
        let off = addr.checked_sub(m.iova).ok_or(MemError::Bounds)?;
        if off.checked_add(len).map_or(true, |end| end > m.length) {
            return Err(MemError::Bounds);
        }
        Ok((m, off))
    }
}

impl Env for Ctx<'_> {
    fn mem_check(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        self.mr(key, addr, len, acc).map(|_| ())
    }

    fn mem_read(&mut self, key: u32, addr: u64, out: &mut [u8], acc: Access) -> Result<(), MemError> {
        if out.is_empty() {
            return Ok(());
        }
        let (m, off) = self.mr(key, addr, out.len() as u64, acc)?;
        m.umem.read(off, out).map_err(|_| MemError::Bounds)
    }

    fn mem_write(&mut self, key: u32, addr: u64, data: &[u8], acc: Access) -> Result<(), MemError> {
        if data.is_empty() {
            return Ok(());
        }
        let (m, off) = self.mr(key, addr, data.len() as u64, acc)?;
        m.umem.write(off, data).map_err(|_| MemError::Bounds)
    }

    fn mem_atomic(&mut self, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        let (m, off) = self.mr(key, addr, 8, Access::RemoteAtomic)?;
        match op {
            AtomicOp::CmpSwap { compare, swap } => m.umem.atomic_cas(off, compare, swap),
            AtomicOp::FetchAdd { add } => m.umem.atomic_fadd(off, add),
        }
        .map_err(|_| MemError::Bounds)
    }

    fn emit(&mut self, pkt: &[u8], dest: Dest) {
        let fab = &self.qp.fabric;
        let (path, sport) = match dest {
            Dest::Connected => match self.path {
                Some(p) => (p, p.udp_sport),
                None => {
                    bump(&fab.counters.tx_err);
                    return;
                }
            },
            Dest::Ah { ah, qpn } => match fab.ahs.get(ah).filter(|a| a.pd == self.qp.pd) {
                Some(a) => (a.path, roce::udp_sport(a.path.av.flow_label, self.qp.qpn, qpn)),
                None => {
                    bump(&fab.counters.tx_no_ah);
                    return;
                }
            },
        };
        if path.loopback {
            let mut v = KVec::new();
            let grh = loopback_grh(&path, pkt.len());
            if v.extend_from_slice(pkt, GFP_ATOMIC).is_err() || self.out.pkts.push((v, grh), GFP_ATOMIC).is_err() {
                bump(&fab.counters.alloc_fail);
            }
            return;
        }
        if fab.send(&path, sport, pkt).is_err() {
            bump(&fab.counters.tx_err);
        }
    }

    fn complete(&mut self, cq: CqSel, c: &Cqe) -> bool {
        match cq {
            CqSel::Send => self.qp.send_cq.push(c, false),
            CqSel::Recv => self.qp.recv_cq.push(c, true),
        }
    }

    fn event(&mut self, ev: Event) {
        let e = match ev {
            Event::QpFatal => QpEvent::Fatal,
            Event::CommEst => QpEvent::CommEst,
            Event::SqDrained => QpEvent::SqDrained,
            Event::LastWqeReached => QpEvent::LastWqeReached,
        };
        self.qp.ev.event(e);
    }

    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake {
        if let Some(srq) = &self.qp.srq {
            return srq.take(out);
        }
        let Some((ring, slots, slot_size)) = &self.qp.rq else { return RecvTake::Empty };
        take_from_ring(ring, *slots, *slot_size, self.rq_cons, self.qp.max_recv_sge, out)
    }

    fn arm_rnr_timer(&mut self, usecs: u32) {
        self.qp.timer.arm(usecs);
    }
}

/// Receive entry point for packets from the wire (softirq).
pub(crate) fn rx_wire(meta: &crate::ib::udp::RxMeta, pkt: &[u8]) {
    let Some(fabric) = crate::ib::rxtable::lookup(meta.netdev) else { return };
    let grh = tp::make_grh(meta.sgid, meta.dgid, meta.tclass, meta.hop_limit, meta.flow_label, pkt.len());
    let mut out = Outbox::new();
    rx_packet(&fabric, pkt, grh, &mut out);
    deliver(&fabric, &mut out);
}
