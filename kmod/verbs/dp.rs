// SPDX-License-Identifier: GPL-2.0-only
//! The data path's imperative shell: object tables, the engine's [`Env`] over MRs, rings and
//! the UDP socket, the send doorbell, packet receive and loopback delivery.
//!
//! Processing model: a send doorbell (the provider's `post_send` system call) drains the SQ in
//! the caller's context, bottom halves disabled, up to a budget per pass, with `cond_resched()`
//! between passes; received packets are handled in the UDP receive softirq; packets to our own
//! GID never touch the network stack and are delivered in the sender's context from a
//! fixed-capacity local queue (an [`Outbox`]: no recursion, no workqueue hop, no allocation).
//!
//! Every context bounds its work: a delivery may generate at most a budget of "bulk" packets
//! (requester packets and READ responses; ACKs are not bulk and each packet delivered yields at
//! most one), and its queue pushes back ([`Emit::Congested`]) when it fills. Work a context
//! leaves undone (budget spent, a full queue) is resumed at once by the QP's work item on the
//! high-priority workqueue, in bounded rounds, or by the doorbell's next pass; what a congested
//! wire (or an exhausted loopback pool) stopped resumes from the QP's pacing timer one jiffy
//! later, so that a congested path paces itself.
//!
//! Every data-path lock (QP, CQ, SRQ, tables, the loopback buffer pool) is a spinlock taken
//! with bottom halves disabled. Lock order: QP, then SRQ or CQ, then a table or the pool.

use super::av::Path;
use super::mcast::{self, Mcast};
use super::stats::DevStats;
use crate::ib::{
    bh::{self, synchronize_rcu, with_bh_disabled},
    inflight::{self, Gauge, TxWaker},
    kmem::{KernelVirt, MappedPage, PageList},
    kverbs::{QpHandle, Wc},
    netdev::NetDev,
    objects::{CqRef, QpEvent, QpRef, SrqRef, Umem},
    ring::SharedRing,
    timer,
    udp::{LazyUdp, TxPath, XmitError},
    work,
};
use crate::logic::{
    idalloc, iphdr,
    qp_state::QpState,
    roce,
    stats::Stat,
    transport::{
        self as tp, Access, AtomicOp, CqSel, Dest, Emit, Engine, Env, Event, MemError, RecvTake,
        RecvWr, Resource, RxInfo, SqEntry,
    },
    wire::{self, Packet},
};
use crate::uapi::{self, Cqe, RingHeader, SendWqe, Sge};
use core::{
    mem::{offset_of, size_of},
    sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering},
};
use kernel::{new_spinlock, prelude::*, sync::Arc, sync::SpinLock};

/// The engine with kernel storage.
pub(crate) type Eng = Engine<KVVec<u8>, KVVec<SqEntry>, KVVec<Resource>>;

/// Packets a doorbell pass may send before the SQ lock is released.
const BUDGET: u32 = 64;
/// Passes one doorbell makes at most (then the continuation takes over).
const MAX_PASSES: u32 = 1 << 16;
/// Passes a kernel consumer's doorbell makes (it may not sleep between passes).
const KERNEL_PASSES: u32 = 4;
/// Bulk packets one doorbell pass and its delivery may generate (bottom halves stay disabled
/// for a pass and its delivery: keep it short).
const DOORBELL_BULK: u32 = 2 * BUDGET;
/// Bulk packets one packet from the wire may trigger (an ACK opening the window).
const RX_BULK: u32 = 4 * BUDGET;
/// Bulk packets one timer expiry (continuation, retransmit, RNR) may generate.
const RESUME_BULK: u32 = tp::READ_BURST;
/// Run-and-deliver rounds one continuation makes at most.
const RESUME_ROUNDS: u32 = 8;
/// Loopback packets one delivery holds at most.
const OUT_CAP: usize = 32;
/// QPs whose responder turn one delivery holds at most ([`RespTurn::Held`]).
const HELD_MAX: usize = 8;
/// Queue length from which [`Env::emit`] pushes back (the rest is room for ACKs: every packet
/// delivered yields at most one, and bulk stops here).
const OUT_HIGH: usize = 24;
/// Packets one delivery processes at most (a safety net: the budgets above end it sooner).
const DELIVER_MAX: u32 = 8 * (RX_BULK + OUT_CAP as u32);
/// Loopback packet buffers per device, shared by the deliveries in progress.
const POOL_BUFS: usize = 64;
/// A loopback buffer: metadata (length, GRH, source and destination GIDs), then the packet.
const META: usize = 96;
const META_GRH: usize = 8;
const META_SRC: usize = META_GRH + tp::GRH_LEN;
const META_DST: usize = META_SRC + 16;
const BUF_LEN: usize = META + tp::MAX_PKT;

const PROD: usize = offset_of!(RingHeader, producer);
const CONS: usize = offset_of!(RingHeader, consumer);
const FLAGS: usize = offset_of!(RingHeader, flags);
const HDR: usize = uapi::RING_HEADER_SIZE;

/// A table of objects by small index, reachable from any context.
///
/// Teardown protocol (so that an object's last reference is dropped by its owner, in process
/// context, never by a reader in softirq): readers take an entry with [`Table::get`], a
/// [`Held`] that they drop before the section with bottom halves disabled in which they took
/// it ends (an RCU read-side section); the owner unpublishes the entry with
/// [`Table::remove_and_wait`], which waits for a grace period only if some reader holds an
/// entry of this table at that moment, and then drops the reference it gets back.
#[pin_data]
pub(crate) struct Table<T> {
    #[pin]
    slots: SpinLock<KVVec<Option<Arc<T>>>>,
    /// [`Held`] references alive, for any entry.
    held: AtomicUsize,
}

/// A reader's reference to a table entry ([`Table::get`]); dropped before the section with
/// bottom halves disabled that took it ends. Not `Clone`: the reference cannot escape the
/// count.
pub(crate) struct Held<'t, T> {
    // Field order is drop order: the reference goes first, then the count says so.
    arc: Arc<T>,
    _count: HeldCount<'t>,
}

struct HeldCount<'t>(&'t AtomicUsize);

impl Drop for HeldCount<'_> {
    fn drop(&mut self) {
        // Release: the reference dropped before this is seen by `remove_and_wait`'s acquire.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl<T> core::ops::Deref for Held<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.arc
    }
}

impl<T: Send + Sync> Table<T> {
    fn new(n: u32) -> Result<impl PinInit<Self, Error>> {
        let v = KVVec::from_elem(None, n as usize, GFP_KERNEL)?;
        Ok(try_pin_init!(Table {
            slots <- new_spinlock!(v, "rrxe:table"),
            held: AtomicUsize::new(0),
        }? Error))
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

    /// Unpublishes entry `i` and returns it once no reader holds it (process context): a
    /// reader that found it took its [`Held`] under the table lock, before the removal, in a
    /// section with bottom halves disabled, so one grace period after the removal it has
    /// dropped it. The grace period (about 15 ms on the test guest) is paid only when some
    /// reader holds an entry of this table as the entry leaves: an idle teardown pays none.
    pub(crate) fn remove_and_wait(&self, i: u32) -> Option<Arc<T>> {
        let v = with_bh_disabled(|| self.slots.lock().get_mut(i as usize).and_then(Option::take));
        // Acquire: pairs with the readers' release in `HeldCount::drop`; a reader that took
        // this entry counted itself under the lock, before the removal.
        if v.is_some() && self.held.load(Ordering::Acquire) != 0 {
            synchronize_rcu();
        }
        v
    }

    /// Removes entry `i`, waits for its readers ([`Table::remove_and_wait`]) and drops it
    /// here: for objects whose table reference is the only one besides the readers' (MRs),
    /// whose teardown may sleep (`ib_umem_release`). Returns `false` if a reference was still
    /// held elsewhere after all (a broken protocol: then the last one is dropped there).
    pub(crate) fn remove_quiesced(&self, i: u32) -> bool {
        match self.remove_and_wait(i) {
            Some(v) => v.into_unique_or_drop().is_some(),
            None => true,
        }
    }

    /// Removes entry `i` without waiting (any context): for objects whose teardown never
    /// sleeps (AHs), and whose number may be reused at once.
    pub(crate) fn take(&self, i: u32) -> Option<Arc<T>> {
        with_bh_disabled(|| self.slots.lock().get_mut(i as usize).and_then(Option::take))
    }

    /// Looks up entry `i` (bottom halves disabled: the [`Held`] must be dropped before they
    /// are enabled again).
    pub(crate) fn get(&self, i: u32) -> Option<Held<'_, T>> {
        let s = self.slots.lock();
        let arc = s.get(i as usize).and_then(|e| e.clone())?;
        // Counted under the lock: a removal after this sees the count.
        self.held.fetch_add(1, Ordering::Relaxed);
        Some(Held {
            arc,
            _count: HeldCount(&self.held),
        })
    }
}

/// The memory behind an MR.
pub(crate) enum MrMem {
    /// Pinned user pages; offsets from the MR's start.
    User(Umem),
    /// A kernel consumer's DMA MR: the address is the kernel virtual address (virt-DMA).
    Kernel(KernelVirt),
    /// A kernel consumer's fast-registration MR: its pages are in [`MrInner::fast`].
    Fast,
}

impl MrMem {
    /// `off`: offset in the MR; `addr`: the address the request named (a DMA MR's iova is 0
    /// and its length the whole space, so the two are the same there).
    fn read(&self, off: u64, out: &mut [u8]) -> Result {
        match self {
            MrMem::User(u) => u.read(off, out),
            MrMem::Kernel(k) => k.read(off, out),
            MrMem::Fast => Err(EFAULT),
        }
    }

    fn write(&self, off: u64, data: &[u8]) -> Result {
        match self {
            MrMem::User(u) => u.write(off, data),
            MrMem::Kernel(k) => k.write(off, data),
            MrMem::Fast => Err(EFAULT),
        }
    }

    fn atomic(&self, off: u64, op: AtomicOp) -> Result<u64> {
        match (self, op) {
            (MrMem::User(u), AtomicOp::CmpSwap { compare, swap }) => {
                u.atomic_cas(off, compare, swap)
            }
            (MrMem::User(u), AtomicOp::FetchAdd { add }) => u.atomic_fadd(off, add),
            (MrMem::User(u), AtomicOp::Write { value }) => u.atomic_store(off, value),
            // A DMA MR never holds atomic rights (`mr::get_dma`), so no atomic gets here; an
            // ATOMIC WRITE through a global rkey's DMA MR is refused as well (no single-access
            // store on the linear map is offered there).
            (MrMem::Kernel(_) | MrMem::Fast, _) => Err(EINVAL),
        }
    }
}

/// A registered memory region as the data path sees it.
pub(crate) struct MrInner {
    pub(crate) key: u32,
    pub(crate) pd: usize,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    pub(crate) mem: MrMem,
    /// A fast-registration MR: its key, rights, range and pages live here instead (the fields
    /// above are unused).
    pub(crate) fast: Option<Pin<KBox<SpinLock<FastReg>>>>,
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
    /// Device-wide data-path counters (`rdma statistic`).
    pub(crate) stats: Arc<DevStats>,
    /// SQ/RQ/SRQ rings found with an index out of range (a process broke its own queue).
    pub(crate) bad_rings: AtomicU64,
    /// Free loopback packet buffers ([`POOL_BUFS`] in all, lent to deliveries).
    #[pin]
    pool: SpinLock<Pool>,
    /// The RoCEv2 socket of the netdev's namespace, opened on first use.
    #[pin]
    pub(crate) udp: LazyUdp,
    /// Multicast groups and their attached UD QPs.
    #[pin]
    pub(crate) mcast: Mcast,
}

impl Fabric {
    pub(crate) fn new(netdev: &NetDev, stats: Arc<DevStats>) -> Result<impl PinInit<Self, Error>> {
        let (q, m, a) = (
            Table::new(crate::logic::limits::MAX_QP + 64)?,
            Table::new(crate::logic::limits::MAX_MR + 64)?,
            Table::new(crate::logic::limits::MAX_AH + 64)?,
        );
        let udp = LazyUdp::new(netdev);
        let mcast = Mcast::new(crate::ib::netdev::NetDevRef::new(netdev));
        let mut bufs = KVec::with_capacity(POOL_BUFS, GFP_KERNEL)?;
        for _ in 0..POOL_BUFS {
            bufs.push(Some(KVec::from_elem(0u8, BUF_LEN, GFP_KERNEL)?), GFP_KERNEL)?;
        }
        let bufs = Pool {
            bufs,
            free: POOL_BUFS,
        };
        Ok(try_pin_init!(Fabric {
            qps <- q,
            mrs <- m,
            ahs <- a,
            stats,
            bad_rings: AtomicU64::new(0),
            pool <- new_spinlock!(bufs, "rrxe:lbpool"),
            udp <- udp,
            mcast <- mcast,
        }? Error))
    }

    /// Opens the UDP socket if a path needs the wire (process context). `EADDRINUSE` when
    /// another driver (rdma_rxe) holds UDP port 4791 in this namespace, except for a multicast
    /// path (its members on this device are reached without the socket).
    pub(crate) fn need_wire(&self, path: &Path) -> Result {
        if path.loopback {
            return Ok(());
        }
        let opened = self.udp.open();
        if path.multicast {
            // A group's members on this device are reached without the socket.
            return Ok(());
        }
        opened
    }

    /// Opens the UDP socket for receiving (process context), whatever the paths.
    pub(crate) fn open_wire(&self) -> Result {
        self.udp.open()
    }

    /// Sends a packet on the wire; `false` when it was not sent (no source GID, or the stack
    /// refused or dropped it).
    fn send(
        &self,
        path: &Path,
        sport: u16,
        pkt: &[u8],
        gauge: &Arc<Gauge<QpInner>>,
    ) -> Result<(), XmitError> {
        let Some(sgid) = path.av.sgid.map(|s| s.gid) else {
            return Err(XmitError::Failed(EINVAL));
        };
        let tx = TxPath {
            sgid,
            dgid: path.av.dgid,
            is_v4: matches!(roce::gid_to_addr(sgid), roce::GidAddr::V4(_)),
            udp_sport: sport,
            tclass: path.av.traffic_class,
            hop_limit: path.hop_limit,
            flow_label: path.av.flow_label,
        };
        self.udp.xmit(&tx, pkt, Some(gauge))
    }
}

/// Loopback packet buffers: `bufs[..free]` are free, the others lent out (a stack whose
/// storage never grows).
struct Pool {
    bufs: KVec<Option<KVec<u8>>>,
    free: usize,
}

impl Pool {
    fn take(&mut self) -> Option<KVec<u8>> {
        let i = self.free.checked_sub(1)?;
        let b = self.bufs[i].take()?;
        self.free = i;
        Some(b)
    }

    fn give(&mut self, b: KVec<u8>) {
        if let Some(slot) = self.bufs.get_mut(self.free) {
            *slot = Some(b);
            self.free += 1;
        }
    }

    /// Buffers lent to deliveries: packets queued or being handled.
    fn lent(&self) -> usize {
        self.bufs.len().saturating_sub(self.free)
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
    /// A kernel CQ: the `ib_qp` of each slot's completion, recorded when the completion is
    /// written (a lookup by QPN at poll time could find the QP gone, or another one after the
    /// QPN's reuse). Empty for a user CQ.
    qps: KVVec<QpHandle>,
}

/// A completion queue as the data path sees it.
#[pin_data]
pub(crate) struct CqInner {
    #[pin]
    st: SpinLock<CqRing>,
    ev: CqRef,
}

impl CqInner {
    /// `qps`: for a kernel CQ, `slots` entries (see [`CqRing::qps`]); empty for a user CQ.
    pub(crate) fn new(
        ring: Option<SharedRing>,
        slots: u32,
        qps: KVVec<QpHandle>,
        ev: CqRef,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(CqInner {
            st <- new_spinlock!(
                CqRing { ring, slots, prod: 0, armed: 0, overflowed: false, qps },
                "rrxe:cq"
            ),
            ev,
        }? Error)
    }

    /// Writes a completion of QP `qp`; `false` when the CQ is full (the completion is lost and
    /// CQ_ERR is reported once). Bottom halves disabled.
    fn push(&self, c: &Cqe, solicited: bool, qp: QpHandle) -> bool {
        let mut notify = false;
        let ok = {
            let mut st = self.st.lock();
            let st = &mut *st;
            let Some(ring) = st.ring.as_ref() else {
                return false;
            };
            let cons = ring.load_acquire(CONS);
            if st.prod.wrapping_sub(cons) >= st.slots {
                if !st.overflowed {
                    st.overflowed = true;
                    notify = true;
                }
                false
            } else {
                let slot = (st.prod & (st.slots - 1)) as usize;
                if let Some(h) = st.qps.get_mut(slot) {
                    *h = qp;
                }
                let _ = ring.write(HDR + slot * uapi::CQE_SIZE, &tp::encode_cqe(c));
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

    /// A kernel consumer's `poll_cq`: moves up to `out.len()` completions out of the ring, each
    /// with the `ib_qp` recorded when it was written. Returns how many.
    pub(crate) fn poll_kernel(&self, out: &mut [Wc]) -> usize {
        with_bh_disabled(|| {
            let st = self.st.lock();
            let Some(ring) = st.ring.as_ref() else {
                return 0;
            };
            let cons = ring.load_acquire(CONS);
            let n = (st.prod.wrapping_sub(cons).min(st.slots) as usize).min(out.len());
            let mut buf = [0u8; uapi::CQE_SIZE];
            for (i, w) in out.iter_mut().take(n).enumerate() {
                let slot = (cons.wrapping_add(i as u32) & (st.slots - 1)) as usize;
                let _ = ring.read(HDR + slot * uapi::CQE_SIZE, &mut buf);
                let cqe = tp::decode_cqe(&buf);
                let qp = st.qps.get(slot).copied().unwrap_or_default();
                *w = Wc { cqe, qp };
            }
            ring.store_release(CONS, cons.wrapping_add(n as u32));
            n
        })
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

    /// (slots, completions waiting, armed, overflowed) for `rdma resource show cq -dd`.
    pub(crate) fn res(&self) -> (u32, u32, bool, bool) {
        with_bh_disabled(|| {
            let st = self.st.lock();
            (
                st.slots,
                Self::pending_locked(&st),
                st.armed != 0,
                st.overflowed,
            )
        })
    }

    /// Completions written and not yet consumed (as far as the consumer index tells; at most
    /// the ring's size).
    pub(crate) fn pending(&self) -> u32 {
        with_bh_disabled(|| {
            let st = self.st.lock();
            Self::pending_locked(&st)
        })
    }

    fn pending_locked(st: &CqRing) -> u32 {
        match st.ring.as_ref() {
            Some(r) => st.prod.wrapping_sub(r.load_acquire(CONS)).min(st.slots),
            None => 0,
        }
    }

    /// Replaces the ring (resize to `cqe` entries in `slots` slots), carrying over completions
    /// not yet consumed (and, for a kernel CQ, their QPs into `qps`, `slots` entries). `EINVAL`,
    /// with nothing changed or dropped, when more than `cqe` are pending (the check and the
    /// swap are one step under the CQ lock).
    pub(crate) fn replace_ring(
        &self,
        new: SharedRing,
        slots: u32,
        cqe: u32,
        mut qps: KVVec<QpHandle>,
    ) -> Result {
        let (old, old_qps) = with_bh_disabled(|| {
            let mut st = self.st.lock();
            let pending = Self::pending_locked(&st);
            if pending > cqe || pending > slots {
                return Err(EINVAL);
            }
            let mut moved = 0u32;
            if let Some(old) = st.ring.as_ref() {
                let cons = old.load_acquire(CONS);
                let mut buf = [0u8; uapi::CQE_SIZE];
                for i in 0..pending {
                    let from = (cons.wrapping_add(i) & (st.slots - 1)) as usize;
                    if old.read(HDR + from * uapi::CQE_SIZE, &mut buf).is_ok() {
                        let to = (moved & (slots - 1)) as usize;
                        let _ = new.write(HDR + to * uapi::CQE_SIZE, &buf);
                        if let (Some(h), Some(q)) = (qps.get_mut(to), st.qps.get(from)) {
                            *h = *q;
                        }
                        moved += 1;
                    }
                }
            }
            new.store_release(PROD, moved);
            st.prod = moved;
            st.slots = slots;
            st.overflowed = false;
            let old_qps = core::mem::replace(&mut st.qps, qps);
            Ok((st.ring.replace(new), old_qps))
        })?;
        drop((old, old_qps));
        Ok(())
    }
}

/// SRQ ring state.
struct SrqRing {
    ring: SharedRing,
    slots: u32,
    slot_size: usize,
    cons: u32,
    limit: u32,
    /// The producer index was found out of range: the ring is not read again.
    broken: bool,
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
    pub(crate) fn new(
        ring: SharedRing,
        slots: u32,
        slot_size: usize,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
        ev: SrqRef,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(SrqInner {
            st <- new_spinlock!(SrqRing { ring, slots, slot_size, cons: 0, limit, broken: false }, "rrxe:srq"),
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

    /// Queues a kernel consumer's receive WQE; `ENOMEM` when the SRQ is full.
    pub(crate) fn post_kernel(&self, wr_id: u64, sges: &[Sge]) -> Result {
        if sges.len() > self.max_sge as usize {
            return Err(EINVAL);
        }
        with_bh_disabled(|| {
            let st = self.st.lock();
            let prod = st.ring.load_acquire(PROD);
            if prod.wrapping_sub(st.cons) >= st.slots {
                return Err(ENOMEM);
            }
            let off = HDR + (prod & (st.slots - 1)) as usize * st.slot_size;
            write_recv_slot(&st.ring, off, st.slot_size, wr_id, sges)?;
            st.ring.store_release(PROD, prod.wrapping_add(1));
            Ok(())
        })
    }

    fn take(&self, out: &mut RecvWr) -> RecvTake {
        let mut fire = false;
        let r = {
            let mut st = self.st.lock();
            let st = &mut *st;
            let r = take_from_ring(
                &st.ring,
                st.slots,
                st.slot_size,
                &mut st.cons,
                &mut st.broken,
                self.max_sge,
                out,
            );
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

/// Writes a receive WQE into the slot at `off`.
fn write_recv_slot(
    r: &SharedRing,
    off: usize,
    slot_size: usize,
    wr_id: u64,
    sges: &[Sge],
) -> Result {
    let body = off + size_of::<uapi::RecvWqe>();
    if body + sges.len() * size_of::<Sge>() > off + slot_size {
        return Err(EINVAL);
    }
    r.write(off, &tp::encode_recv_wqe(wr_id, sges.len() as u32))?;
    for (i, s) in sges.iter().enumerate() {
        r.write(body + i * size_of::<Sge>(), &tp::encode_sge(s))?;
    }
    Ok(())
}

/// Takes the next receive WQE from a ring whose kernel-side consumer index is `cons`. A
/// producer index out of range breaks the ring for good: `broken` latches, this call answers
/// [`RecvTake::Bad`] (the engine moves the QP to ERR once) and later calls [`RecvTake::Empty`]
/// without reading the ring again.
fn take_from_ring(
    ring: &SharedRing,
    slots: u32,
    slot_size: usize,
    cons: &mut u32,
    broken: &mut bool,
    max_sge: u32,
    out: &mut RecvWr,
) -> RecvTake {
    if *broken {
        return RecvTake::Empty;
    }
    let prod = ring.load_acquire(PROD);
    let avail = prod.wrapping_sub(*cons);
    if avail == 0 {
        return RecvTake::Empty;
    }
    if avail > slots {
        // The producer index is garbage: this process broke its own queue.
        *broken = true;
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

/// Whose turn it is to send the responder's output (READ and atomic responses, ACKs and NAKs).
///
/// Responses must reach the requester in PSN order. On the wire they do: each context sends
/// them under the QP lock. A loopback delivery, though, only queues them, and processes its
/// queue after the lock is gone; if another context (the continuation, or a delivery on the
/// other CPU that brings a new request) sent the next responses meanwhile, they would overtake
/// the queued ones, and the requester would take the gap for a lost response and read again.
/// So a delivery that queued responder output keeps the turn until it has delivered it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RespTurn {
    /// Nothing of the responder's is waiting for delivery: any context may send.
    Free,
    /// A loopback delivery holds responder packets; it gives the turn back once it has
    /// delivered them ([`QpInner::resp_delivered`]).
    Held,
    /// The continuation has the turn (it is scheduled). On a loopback path only: on the wire,
    /// any context may still send meanwhile (each sends under the QP lock).
    Cont,
}

/// The shell's own state of a QP (guarded by the QP lock, next to the engine).
pub(crate) struct Shell {
    /// The connected path (RC/UC).
    path: Option<Path>,
    /// Kernel-side consumer indices of the SQ and RQ rings.
    sq_cons: u32,
    rq_cons: u32,
    /// A ring index was found out of range: that ring is not read again (until RESET).
    sq_broken: bool,
    rq_broken: bool,
    /// When the retransmit timer is due (jiffies); `None` while stopped. An expiry before it
    /// (a timer restarted or stopped while its callback was already running) is stale.
    retry_at: Option<u64>,
    /// Work was left that the continuation must resume.
    resume: bool,
    /// Who may send the responder's output next.
    resp: RespTurn,
    /// The wire refused a packet during the current call.
    congested: bool,
    /// The QP has [`inflight::HIGH`] skbs in the network stack: its gauge wakes it (no timer).
    capped: bool,
    /// The QP is being destroyed ([`QpInner::shutdown`]): a packet that still found it in the
    /// QP table does nothing.
    closed: bool,
}

/// Engine state of a QP (guarded by the QP lock).
pub(crate) struct QpData {
    pub(crate) eng: Eng,
    scratch: KVec<u8>,
    sh: Shell,
}

/// A QP as the data path sees it.
#[pin_data]
pub(crate) struct QpInner {
    /// The RNR timer; the timers come first, so that they are shut down before anything else
    /// is dropped.
    #[pin]
    timer: timer::Timer,
    /// The pacing timer: resumes what a congested wire stopped, on the next tick.
    #[pin]
    pace: timer::Timer,
    /// The continuation: resumes at once, in process context, what a bounded context left
    /// (owed READ responses, a spent budget, a kernel doorbell with interrupts off).
    #[pin]
    kick: work::Work,
    /// The retransmit timer.
    #[pin]
    retry: timer::Timer,
    /// The responder's re-acknowledgement timer.
    #[pin]
    reack: timer::Timer,
    /// This QP's skbs in the network stack (capped at [`inflight::HIGH`]).
    gauge: Arc<Gauge<QpInner>>,
    pub(crate) qpn: u32,
    pd: usize,
    max_recv_sge: u32,
    max_send_wr: u32,
    max_recv_wr: u32,
    #[pin]
    pub(crate) st: SpinLock<QpData>,
    /// Serialises a kernel consumer's producers of the SQ and RQ rings (user QPs never take it:
    /// their producer is the provider).
    #[pin]
    kpost: SpinLock<()>,
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
    pub(crate) fabric: Arc<Fabric>,
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
}

/// How a doorbell pass ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PassEnd {
    /// Another pass can do more now.
    More,
    /// Nothing more to do now (the ring is empty, or the requester waits for the peer).
    Idle,
    /// The wire pushed back: the pacing timer resumes; the doorbell ends.
    Paced,
    /// The SQ ring is broken (the QP is in ERR): the doorbell ends.
    Broken,
}

impl QpInner {
    pub(crate) fn new(p: QpParts) -> Result<impl PinInit<Self, Error>> {
        let scratch = KVec::from_elem(0u8, tp::MAX_PKT, GFP_KERNEL)?;
        let sh = Shell {
            path: None,
            sq_cons: 0,
            rq_cons: 0,
            sq_broken: false,
            rq_broken: false,
            retry_at: None,
            resume: false,
            resp: RespTurn::Free,
            congested: false,
            capped: false,
            closed: false,
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
        with_bh_disabled(|| self.st.lock().sh.closed = true);
    }

    fn ctx<'a, 'o>(&'a self, sh: &'a mut Shell, out: &'a mut Outbox<'o>) -> Ctx<'a, 'o> {
        sh.congested = false;
        sh.capped = false;
        Ctx { qp: self, sh, out }
    }

    /// Schedules the continuation if the call that just ended left work: at once, or on the
    /// next tick when the wire pushed back.
    fn finish(&self, sh: &mut Shell) {
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
    fn wire_room(&self, sh: &mut Shell) -> u32 {
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
    fn resume_soon(&self) {
        self.kick.queue();
    }

    /// Resumes on the next tick.
    fn pace_later(&self) {
        self.pace.arm_at(timer::now().wrapping_add(1));
    }

    /// Runs the requester for at most `max` packets within the delivery's budget; notes a
    /// continuation when it stops with work left for a reason other than the RC window or
    /// `max_rd_atomic` (those reopen with an ACK).
    fn run_req(&self, eng: &mut Eng, scratch: &mut [u8], cx: &mut Ctx<'_, '_>, max: u32) -> u32 {
        let b = max.min(cx.out.room()).min(self.wire_room(cx.sh));
        if b == 0 {
            if eng.requester_ready() {
                cx.sh.resume = true;
            }
            return 0;
        }
        let sent = eng.run_requester(cx, scratch, b);
        cx.out.spend(sent);
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
    fn respond(&self, eng: &mut Eng, scratch: &mut [u8], cx: &mut Ctx<'_, '_>) {
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
            cx.sh.resp = RespTurn::Held;
        } else if eng.responder_pending() {
            cx.sh.resp = RespTurn::Cont;
            cx.sh.resume = true;
        }
    }

    /// A delivery has delivered the responder output it held ([`RespTurn::Held`]): the turn is
    /// free again, and this delivery goes on answering within its budget.
    fn resp_delivered(&self, out: &mut Outbox<'_>) {
        let mut g = self.st.lock();
        let d = &mut *g;
        if d.sh.resp != RespTurn::Held {
            return;
        }
        d.sh.resp = RespTurn::Free;
        if d.sh.closed {
            return;
        }
        let mut cx = self.ctx(&mut d.sh, out);
        self.respond(&mut d.eng, &mut d.scratch, &mut cx);
        self.finish(cx.sh);
    }

    /// The continuation (the work item; the pacing timer queues it): bounded rounds of
    /// responder and requester, each followed by local delivery; scheduled again while work is
    /// left. A round that could send nothing at all waits for the next tick rather than spin.
    /// The work item never runs twice at once, so a round owns [`RespTurn::Cont`].
    fn resume(&self) {
        with_bh_disabled(|| {
            let mut out = Outbox::new(&self.fabric, RESUME_BULK, None);
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
            let mut out = Outbox::new(&self.fabric, 0, None);
            let now = {
                let mut g = self.st.lock();
                let d = &mut *g;
                let state = state.filter(|&(s, _)| QpState::modify_applies(from, d.eng.state(), s));
                d.eng.set_config(cfg, retries.0, retries.1);
                if path.is_some() {
                    d.sh.path = path;
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

    /// What `rdma resource show qp -dd` reports (the rings' fill is clamped to their size: a
    /// user may have written anything into its producer index).
    pub(crate) fn res(&self) -> QpRes {
        with_bh_disabled(|| {
            let d = self.st.lock();
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

    /// Moves new WQEs from the shared SQ into the engine (the engine's private SQ has the
    /// ring's geometry, and the ring's consumer index only moves when a WR retires, so it always
    /// has room for what the ring holds). Returns whether the ring still has
    /// WQEs the engine had no room for. A producer index out of range breaks the ring for good:
    /// the QP goes to ERR (QP_FATAL on that transition only) and the ring is not read again.
    fn pull_sq(&self, eng: &mut Eng, cx: &mut Ctx<'_, '_>) -> bool {
        let Some((ring, slots, slot_size)) = &self.sq else {
            return false;
        };
        if cx.sh.sq_broken {
            return false;
        }
        let prod = ring.load_acquire(PROD);
        let avail = prod.wrapping_sub(cx.sh.sq_cons);
        if avail > *slots {
            cx.sh.sq_broken = true;
            self.fabric.bad_rings.fetch_add(1, Ordering::Relaxed);
            let was_err = eng.state() == QpState::Err;
            eng.set_state(cx, QpState::Err, false);
            if !was_err {
                self.ev.event(QpEvent::Fatal);
            }
            return false;
        }
        let mut n = 0;
        while n < avail {
            let Some(slot) = eng.sq_slot_mut() else { break };
            let off = HDR + (cx.sh.sq_cons & (*slots - 1)) as usize * *slot_size;
            let len = slot.len().min(*slot_size);
            if ring.read(off, &mut slot[..len]).is_err() {
                break;
            }
            // Taken (the engine has its copy); the slot stays held until the WR retires
            // (`Env::sq_retired` publishes the consumer index).
            cx.sh.sq_cons = cx.sh.sq_cons.wrapping_add(1);
            eng.sq_pushed(cx);
            n += 1;
        }
        n < avail
    }

    /// One doorbell pass: pull, flush in ERR, send up to the budget.
    fn pass(&self, out: &mut Outbox<'_>) -> PassEnd {
        let mut g = self.st.lock();
        let d = &mut *g;
        if d.sh.sq_broken {
            return PassEnd::Broken;
        }
        let mut cx = self.ctx(&mut d.sh, out);
        let ring_left = self.pull_sq(&mut d.eng, &mut cx);
        if cx.sh.sq_broken {
            self.finish(cx.sh);
            return PassEnd::Broken;
        }
        d.eng.flush_if_err(&mut cx);
        let sent = self.run_req(&mut d.eng, &mut d.scratch, &mut cx, BUDGET);
        let end = if cx.sh.congested {
            PassEnd::Paced
        } else if (sent > 0 && d.eng.requester_ready()) || (ring_left && d.eng.sq_room() > 0) {
            PassEnd::More
        } else {
            PassEnd::Idle
        };
        if end != PassEnd::Paced {
            // The doorbell's next pass does what the requester left.
            cx.sh.resume = false;
        }
        self.finish(cx.sh);
        end
    }

    fn sq_pending(&self) -> bool {
        let Some((ring, _, _)) = &self.sq else {
            return false;
        };
        let d = self.st.lock();
        !d.sh.sq_broken && ring.load_acquire(PROD) != d.sh.sq_cons && d.eng.sq_room() > 0
    }

    /// The send doorbell (process context). Keeps the `SQ_FLAG_KERNEL_BUSY` protocol of
    /// `provider/src/ring/mod.rs`: BUSY is set only for passes that end in clear-BUSY, full
    /// fence, re-check of the producer. Passes repeat while the QP has work it can do now, with
    /// `cond_resched()` in between; a pending fatal signal, a broken ring or a congested wire
    /// ends the doorbell (the continuation resumes what is left). Those three clear BUSY
    /// without the re-check: the continuation pulls the ring itself (a broken ring is never
    /// read again), and a provider that sees BUSY clear rings again.
    pub(crate) fn doorbell(&self) -> Result {
        let Some((ring, _, _)) = &self.sq else {
            return Err(EINVAL);
        };
        for _ in 0..MAX_PASSES {
            ring.store_release(FLAGS, uapi::SQ_FLAG_KERNEL_BUSY);
            let end = with_bh_disabled(|| {
                let mut out = Outbox::new(&self.fabric, DOORBELL_BULK, Some(self));
                let end = self.pass(&mut out);
                deliver(&self.fabric, &mut out);
                // An ACK delivered to us opened the window: the next pass sends.
                if end == PassEnd::Idle && out.driver_go {
                    PassEnd::More
                } else {
                    end
                }
            });
            match end {
                PassEnd::Broken | PassEnd::Paced => {
                    ring.store_release(FLAGS, 0);
                    return Ok(());
                }
                PassEnd::More | PassEnd::Idle => {}
            }
            if end == PassEnd::Idle {
                ring.store_release(FLAGS, 0);
                fence(Ordering::SeqCst);
                if !with_bh_disabled(|| self.sq_pending()) {
                    return Ok(());
                }
            }
            if bh::fatal_signal_pending() {
                ring.store_release(FLAGS, 0);
                self.resume_soon();
                return Ok(());
            }
            bh::cond_resched();
        }
        ring.store_release(FLAGS, 0);
        self.resume_soon();
        Ok(())
    }

    /// Writes one slot of a kernel consumer's ring with `write(ring, offset)` and publishes it.
    /// The producer index is ours alone (under `kpost`); `ENOMEM` when `cap` WRs are already
    /// held (for the SQ: posted and not yet completed).
    fn kernel_produce(
        &self,
        ring: &SharedRing,
        (slots, cap): (u32, u32),
        slot_size: usize,
        write: impl FnOnce(&SharedRing, usize) -> Result,
    ) -> Result {
        with_bh_disabled(|| {
            let _g = self.kpost.lock();
            let prod = ring.load_acquire(PROD);
            if prod.wrapping_sub(ring.load_acquire(CONS)) >= cap.min(slots) {
                return Err(ENOMEM);
            }
            write(ring, HDR + (prod & (slots - 1)) as usize * slot_size)?;
            ring.store_release(PROD, prod.wrapping_add(1));
            Ok(())
        })
    }

    /// Queues a kernel consumer's send WQE (checked against the QP's caps by the caller, so it
    /// fits the slot); [`QpInner::kernel_doorbell`] processes it.
    pub(crate) fn post_kernel_send(&self, hdr: &SendWqe, sges: &[Sge], inline: &[u8]) -> Result {
        let Some((ring, slots, slot_size)) = &self.sq else {
            return Err(EINVAL);
        };
        self.kernel_produce(ring, (*slots, self.max_send_wr), *slot_size, |r, off| {
            let body = off + size_of::<SendWqe>();
            if body + inline.len().max(sges.len() * size_of::<Sge>()) > off + *slot_size {
                return Err(EINVAL);
            }
            r.write(off, &tp::encode_send_wqe(hdr))?;
            r.write(body, inline)?;
            for (i, s) in sges.iter().enumerate() {
                r.write(body + i * size_of::<Sge>(), &tp::encode_sge(s))?;
            }
            Ok(())
        })
    }

    /// Queues a kernel consumer's receive WQE. A QP in ERR completes it with WR_FLUSH_ERR at
    /// once (`ib_drain_qp` relies on that).
    pub(crate) fn post_kernel_recv(&self, wr_id: u64, sges: &[Sge]) -> Result {
        let Some((ring, slots, slot_size)) = &self.rq else {
            return Err(EINVAL);
        };
        if sges.len() > self.max_recv_sge as usize {
            return Err(EINVAL);
        }
        self.kernel_produce(ring, (*slots, self.max_recv_wr), *slot_size, |r, off| {
            write_recv_slot(r, off, *slot_size, wr_id, sges)
        })?;
        self.flush_if_err_now();
        Ok(())
    }

    /// Completes what was posted to a QP in ERR (nothing in other states).
    fn flush_if_err_now(&self) {
        with_bh_disabled(|| {
            let mut out = Outbox::new(&self.fabric, 0, None);
            {
                let mut g = self.st.lock();
                let d = &mut *g;
                if d.eng.state() == QpState::Err {
                    let mut cx = self.ctx(&mut d.sh, &mut out);
                    self.pull_sq(&mut d.eng, &mut cx);
                    d.eng.flush_if_err(&mut cx);
                    self.finish(cx.sh);
                }
            }
            deliver(&self.fabric, &mut out);
        });
    }

    /// A kernel consumer's doorbell: never sleeps (ULPs post from softirq and under their own
    /// spinlocks), so a few bounded passes, and the continuation for what is left.
    pub(crate) fn kernel_doorbell(&self) {
        if bh::irqs_disabled() {
            // Under the consumer's `spin_lock_irqsave`: nothing may be sent from here (the
            // stack's transmit path enables bottom halves); the continuation sends it.
            self.resume_soon();
            return;
        }
        for _ in 0..KERNEL_PASSES {
            let end = with_bh_disabled(|| {
                let mut out = Outbox::new(&self.fabric, DOORBELL_BULK, Some(self));
                let end = self.pass(&mut out);
                deliver(&self.fabric, &mut out);
                if end == PassEnd::Idle && out.driver_go {
                    PassEnd::More
                } else {
                    end
                }
            });
            if end != PassEnd::More {
                return;
            }
        }
        self.resume_soon();
    }

    /// Handles a packet for this QP (bottom halves disabled).
    fn rx(&self, pkt: &Packet<'_>, info: &RxInfo, out: &mut Outbox<'_>) {
        let mut g = self.st.lock();
        let d = &mut *g;
        if d.sh.closed {
            return;
        }
        let mut cx = self.ctx(&mut d.sh, out);
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

    /// A timer's run: `f` on the engine under the QP lock with bottom halves disabled, then
    /// local delivery of what it queued (at most `bulk` bulk packets).
    fn on_timer(&self, bulk: u32, f: impl FnOnce(&mut Eng, &mut [u8], &mut Ctx<'_, '_>)) {
        with_bh_disabled(|| {
            let mut out = Outbox::new(&self.fabric, bulk, None);
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
    fn rnr_expired(&self) {
        self.on_timer(RESUME_BULK, |eng, scratch, cx| {
            eng.rnr_timer_expired();
            self.run_req(eng, scratch, cx, BUDGET);
        });
    }

    /// The retransmit timer fired: unless stale (stopped or restarted meanwhile), the engine
    /// goes back N, then a bounded run of the requester.
    fn retry_expired(&self) {
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
    fn reack_expired(&self) {
        self.on_timer(0, |eng, scratch, cx| eng.reack_timer_expired(cx, scratch));
    }

    /// Discards everything posted to the rings (the QP went to RESET); the rings are consistent
    /// again, so a broken one is read again.
    fn discard_rings(sh: &mut Shell, qp: &QpInner) {
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

const TIMER_RNR: u32 = 0;
const TIMER_PACE: u32 = 1;
const TIMER_RETRY: u32 = 2;
const TIMER_REACK: u32 = 3;

impl TxWaker for QpInner {
    fn tx_room(&self) {
        self.resume_soon();
    }
}

impl work::WorkOwner for QpInner {
    fn work_run(&self, _id: u32) {
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

/// Loopback packets waiting for delivery: a fixed-capacity queue of buffers borrowed from the
/// device's pool, and the budget of bulk packets the delivery may still generate. Used with
/// bottom halves disabled only.
pub(crate) struct Outbox<'f> {
    pool: &'f SpinLock<Pool>,
    q: [Option<KVec<u8>>; OUT_CAP],
    head: usize,
    len: usize,
    /// Bulk packets (requester, READ responses) this delivery may still generate.
    bulk: u32,
    /// The QP whose doorbell drives this delivery (its address), if any.
    driver: usize,
    /// An ACK delivered to the driver opened its window.
    driver_go: bool,
    /// QPs whose responder output this delivery queued ([`RespTurn::Held`]): they get the
    /// turn back once the queue is delivered.
    held: [u32; HELD_MAX],
    nheld: usize,
}

impl<'f> Outbox<'f> {
    fn new(fabric: &'f Fabric, bulk: u32, driver: Option<&QpInner>) -> Self {
        Outbox {
            pool: &fabric.pool,
            q: [const { None }; OUT_CAP],
            head: 0,
            len: 0,
            bulk,
            driver: driver.map_or(0, |q| q as *const QpInner as usize),
            driver_go: false,
            held: [0; HELD_MAX],
            nheld: 0,
        }
    }

    fn drives(&self, qp: &QpInner) -> bool {
        self.driver == qp as *const QpInner as usize
    }

    /// Bulk packets that may be generated now: none once the queue reached its high mark.
    fn room(&self) -> u32 {
        if self.len >= OUT_HIGH {
            0
        } else {
            self.bulk
        }
    }

    /// Whether this delivery can hold the turn of QP `qpn` (it does, or has room for one more).
    fn can_hold(&self, qpn: u32) -> bool {
        self.nheld < HELD_MAX || self.held[..self.nheld].contains(&qpn)
    }

    /// Notes that this delivery holds QP `qpn`'s turn (after [`Outbox::can_hold`]).
    fn hold(&mut self, qpn: u32) {
        if !self.held[..self.nheld].contains(&qpn) && self.nheld < HELD_MAX {
            self.held[self.nheld] = qpn;
            self.nheld += 1;
        }
    }

    fn unhold(&mut self) -> Option<u32> {
        self.nheld = self.nheld.checked_sub(1)?;
        Some(self.held[self.nheld])
    }

    fn spend(&mut self, n: u32) {
        self.bulk = self.bulk.saturating_sub(n);
    }

    /// Queues a packet. `None`: dropped (queue or pool exhausted); `Some(full)`: queued, and
    /// `full` says the queue reached its high mark.
    fn push(
        &mut self,
        pkt: &[u8],
        grh: &[u8; tp::GRH_LEN],
        src: [u8; 16],
        dst: [u8; 16],
    ) -> Option<bool> {
        if self.len >= OUT_CAP || pkt.len() > BUF_LEN - META {
            return None;
        }
        let mut buf = self.pool.lock().take()?;
        buf[0..2].copy_from_slice(&(pkt.len() as u16).to_ne_bytes());
        buf[META_GRH..META_SRC].copy_from_slice(grh);
        buf[META_SRC..META_DST].copy_from_slice(&src);
        buf[META_DST..META_DST + 16].copy_from_slice(&dst);
        buf[META..META + pkt.len()].copy_from_slice(pkt);
        self.q[(self.head + self.len) % OUT_CAP] = Some(buf);
        self.len += 1;
        Some(self.len >= OUT_HIGH)
    }

    fn pop(&mut self) -> Option<KVec<u8>> {
        if self.len == 0 {
            return None;
        }
        let b = self.q[self.head].take();
        self.head = (self.head + 1) % OUT_CAP;
        self.len -= 1;
        b
    }

    /// Gives a buffer back to the pool (no allocation).
    fn release(&self, buf: KVec<u8>) {
        self.pool.lock().give(buf);
    }
}

impl Drop for Outbox<'_> {
    fn drop(&mut self) {
        while let Some(b) = self.pop() {
            self.release(b);
        }
        // Nothing is held here: every user delivers ([`deliver`] gives each turn back) before
        // it drops the queue.
    }
}

/// Delivers queued loopback packets (and those their processing queues) to `fabric`'s QPs.
fn deliver(fabric: &Fabric, out: &mut Outbox<'_>) {
    let mut n = 0u32;
    loop {
        deliver_queue(fabric, out, &mut n);
        // Delivered: the responders whose output this was get their turn back (and may queue
        // more, within the budget).
        let Some(qpn) = out.unhold() else { break };
        if let Some(qp) = fabric.qps.get(qpn) {
            qp.resp_delivered(out);
        }
    }
}

/// Processes the queue until it is empty (`n`: packets this delivery processed so far).
fn deliver_queue(fabric: &Fabric, out: &mut Outbox<'_>, n: &mut u32) {
    while let Some(buf) = out.pop() {
        *n += 1;
        if *n > DELIVER_MAX {
            fabric.stats.add(Stat::TxDrops, 1);
        } else {
            let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]])).min(BUF_LEN - META);
            let mut grh = [0u8; tp::GRH_LEN];
            grh.copy_from_slice(&buf[META_GRH..META_SRC]);
            let mut src = [0u8; 16];
            src.copy_from_slice(&buf[META_SRC..META_DST]);
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&buf[META_DST..META_DST + 16]);
            rx_packet(
                fabric,
                &buf[META..META + len],
                &RxInfo { grh, src, dst },
                out,
            );
        }
        out.release(buf);
    }
}

/// Handles one packet (BTH .. ICRC, ICRC already checked or not needed). `info.grh` is the GRH
/// a UD receiver gets (loopback packets synthesise one).
fn rx_packet(fabric: &Fabric, bytes: &[u8], info: &RxInfo, out: &mut Outbox<'_>) {
    let pkt = match Packet::parse(bytes) {
        Ok(p) => p,
        Err(_) => {
            fabric.stats.add(wire::unparsed_stat(bytes), 1);
            return;
        }
    };
    fabric.stats.add(Stat::RcvdPkts, 1);
    fabric.stats.add(Stat::RcvdBytes, bytes.len() as u64);
    let dest_qp = pkt.bth().dest_qp;
    if dest_qp == wire::MULTICAST_QPN {
        // A copy for each UD QP attached to the destination group (their own checks apply).
        mcast::fan_out(fabric, &info.dst, |qpn| {
            if let Some(qp) = fabric.qps.get(qpn) {
                qp.rx(&pkt, info, out);
            }
        });
        return;
    }
    let Some(qp) = fabric.qps.get(dest_qp) else {
        fabric.stats.add(Stat::RxUnknownQp, 1);
        return;
    };
    qp.rx(&pkt, info, out);
}

/// The GRH of a packet that went from `path`'s destination back to us (loopback: both ends are
/// our own GID).
fn loopback_grh(p: &Path, len: usize) -> [u8; tp::GRH_LEN] {
    let sgid = p.av.sgid.map(|s| s.gid).unwrap_or(p.av.dgid);
    iphdr::grh(
        sgid,
        p.av.dgid,
        p.av.traffic_class,
        p.hop_limit,
        p.av.flow_label,
        len,
    )
}

/// The engine's environment for one QP, valid while its lock is held.
pub(crate) struct Ctx<'a, 'o> {
    qp: &'a QpInner,
    sh: &'a mut Shell,
    out: &'a mut Outbox<'o>,
}

/// A fast-registration MR's state (kernel consumers): staged by `map_mr_sg`, made valid by
/// REG_MR and invalid by LOCAL_INV or a SEND with invalidate, all under its lock.
pub(crate) struct FastReg {
    pub(crate) valid: bool,
    pub(crate) key: u32,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    /// Page size of the mapping (a power of two).
    pub(crate) page_size: u64,
    /// The pages the consumer mapped, each the capability to reach it.
    pub(crate) pages: PageList,
}

impl FastReg {
    /// Runs `f(page, in_page_offset, in_chunk_offset, n)` over the pages behind `len` bytes at
    /// MR offset `off` (offsets from `iova`, checked by the caller).
    fn chunks(
        &self,
        off: u64,
        len: usize,
        mut f: impl FnMut(&MappedPage, u64, usize, usize) -> Result,
    ) -> Result {
        let ps = self.page_size;
        if ps == 0 || !ps.is_power_of_two() {
            return Err(EFAULT);
        }
        let mut pos = (self.iova & (ps - 1)).checked_add(off).ok_or(EFAULT)?;
        let mut done = 0usize;
        while done < len {
            let page = usize::try_from(pos / ps).map_err(|_| EFAULT)?;
            let p = self.pages.get(page).ok_or(EFAULT)?;
            let in_page = pos % ps;
            let n = ((ps - in_page) as usize).min(len - done);
            f(p, in_page, done, n)?;
            done += n;
            pos += n as u64;
        }
        Ok(())
    }

    fn read(&self, off: u64, out: &mut [u8]) -> Result {
        self.chunks(off, out.len(), |p, in_page, at, n| {
            p.read(in_page, &mut out[at..at + n])
        })
    }

    fn write(&self, off: u64, data: &[u8]) -> Result {
        self.chunks(off, data.len(), |p, in_page, at, n| {
            p.write(in_page, &data[at..at + n])
        })
    }

    fn atomic(&self, off: u64, op: AtomicOp) -> Result<u64> {
        let mut r = None;
        self.chunks(off, 8, |p, in_page, _, n| {
            // An 8-byte aligned word never straddles a page.
            if n != 8 {
                return Err(EINVAL);
            }
            r = Some(match op {
                AtomicOp::CmpSwap { compare, swap } => p.atomic_cas(in_page, compare, swap)?,
                AtomicOp::FetchAdd { add } => p.atomic_fadd(in_page, add)?,
                AtomicOp::Write { value } => p.atomic_store(in_page, value)?,
            });
            Ok(())
        })?;
        r.ok_or(EINVAL)
    }
}

impl Ctx<'_, '_> {
    /// Looks up `key` for `len` bytes at `addr` with rights `acc` (PD, key, bounds, rights)
    /// and runs `f` on the memory with the offset into the MR (under a fast MR's lock).
    fn with_mr<R>(
        &self,
        key: u32,
        addr: u64,
        len: u64,
        acc: Access,
        f: impl FnOnce(MrView<'_>, u64) -> Result<R>,
    ) -> Result<R, MemError> {
        self.with_mr_rights(key, addr, len, acc.rights(), false, f)
    }

    /// [`Self::with_mr`] for the rights `need` (`IB_ACCESS_*`); with `whole`, the range is not
    /// looked at and `f` gets offset 0 (an RDMA FLUSH of the whole MR).
    fn with_mr_rights<R>(
        &self,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
        whole: bool,
        f: impl FnOnce(MrView<'_>, u64) -> Result<R>,
    ) -> Result<R, MemError> {
        let m = self
            .qp
            .fabric
            .mrs
            .get(idalloc::key_index(key))
            .ok_or(MemError::BadKey)?;
        if m.pd != self.qp.pd {
            return Err(MemError::BadPd);
        }
        let bounds = |iova: u64, length: u64| -> Result<u64, MemError> {
            if whole {
                return Ok(0);
            }
            let off = addr.checked_sub(iova).ok_or(MemError::Bounds)?;
            if off.checked_add(len).map_or(true, |end| end > length) {
                return Err(MemError::Bounds);
            }
            Ok(off)
        };
        match &m.fast {
            None => {
                if m.key != key {
                    return Err(MemError::BadKey);
                }
                if m.access & need != need {
                    return Err(MemError::Access);
                }
                let off = bounds(m.iova, m.length)?;
                f(MrView::Fixed(&m.mem), off).map_err(|_| MemError::Bounds)
            }
            Some(lock) => {
                let st = lock.lock();
                if !st.valid || st.key != key {
                    return Err(MemError::BadKey);
                }
                if st.access & need != need {
                    return Err(MemError::Access);
                }
                let off = bounds(st.iova, st.length)?;
                f(MrView::Fast(&st), off).map_err(|_| MemError::Bounds)
            }
        }
    }
}

/// The memory of an MR as one access sees it.
enum MrView<'a> {
    Fixed(&'a MrMem),
    Fast(&'a FastReg),
}

impl MrView<'_> {
    fn read(&self, off: u64, out: &mut [u8]) -> Result {
        match self {
            MrView::Fixed(m) => m.read(off, out),
            MrView::Fast(f) => f.read(off, out),
        }
    }

    fn write(&self, off: u64, data: &[u8]) -> Result {
        match self {
            MrView::Fixed(m) => m.write(off, data),
            MrView::Fast(f) => f.write(off, data),
        }
    }

    fn atomic(&self, off: u64, op: AtomicOp) -> Result<u64> {
        match self {
            MrView::Fixed(m) => m.atomic(off, op),
            MrView::Fast(f) => f.atomic(off, op),
        }
    }
}

impl Env for Ctx<'_, '_> {
    fn sq_retired(&mut self, outstanding: u32) {
        // The ring slot of the oldest WR still outstanding: the WRs taken and not retired are
        // the `outstanding` ones just below `sq_cons`.
        if let Some((ring, _, _)) = &self.qp.sq {
            ring.store_release(CONS, self.sh.sq_cons.wrapping_sub(outstanding));
        }
    }

    fn mem_check(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        self.with_mr(key, addr, len, acc, |_, _| Ok(()))
    }

    fn mem_read(
        &mut self,
        key: u32,
        addr: u64,
        out: &mut [u8],
        acc: Access,
    ) -> Result<(), MemError> {
        if out.is_empty() {
            return Ok(());
        }
        self.with_mr(key, addr, out.len() as u64, acc, |m, off| m.read(off, out))
    }

    fn mem_write(&mut self, key: u32, addr: u64, data: &[u8], acc: Access) -> Result<(), MemError> {
        if data.is_empty() {
            return Ok(());
        }
        self.with_mr(key, addr, data.len() as u64, acc, |m, off| {
            m.write(off, data)
        })
    }

    fn mem_atomic(&mut self, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.with_mr(key, addr, 8, op.access(), |m, off| m.atomic(off, op))
    }

    fn mem_flush(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        whole_mr: bool,
        need: u32,
    ) -> Result<(), MemError> {
        self.with_mr_rights(key, addr, len, need, whole_mr, |_, _| Ok(()))?;
        // Every placement into the MR is a CPU store (a copy or an atomic) made before this
        // request was taken; a full barrier orders them before the answer that says they are
        // visible. No MR is registered for persistence (see `check_mr_access`), so no cache
        // write-back is owed.
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn mr_register(&mut self, key: u32, iova: u64, len: u64, access: u32) -> Result<(), u32> {
        let m = self
            .qp
            .fabric
            .mrs
            .get(idalloc::key_index(key))
            .filter(|m| m.pd == self.qp.pd)
            .ok_or(tp::wc_status::LOC_PROT_ERR)?;
        let lock = m.fast.as_ref().ok_or(tp::wc_status::LOC_PROT_ERR)?;
        let mut st = lock.lock();
        // The mapping must cover the range: pages from the one holding `iova`.
        let ps = st.page_size;
        let span = (iova & ps.wrapping_sub(1)).checked_add(len);
        let room = (st.pages.len() as u64).checked_mul(ps);
        match (span, room) {
            (Some(s), Some(r)) if ps.is_power_of_two() && s <= r => {}
            _ => return Err(tp::wc_status::LOC_PROT_ERR),
        }
        st.key = key;
        st.iova = iova;
        st.length = len;
        st.access = access;
        st.valid = true;
        Ok(())
    }

    fn mr_invalidate(&mut self, key: u32, _remote: bool) -> Result<(), u32> {
        let m = self
            .qp
            .fabric
            .mrs
            .get(idalloc::key_index(key))
            .filter(|m| m.pd == self.qp.pd)
            .ok_or(tp::wc_status::LOC_PROT_ERR)?;
        let lock = m.fast.as_ref().ok_or(tp::wc_status::LOC_PROT_ERR)?;
        let mut st = lock.lock();
        if st.key != key {
            return Err(tp::wc_status::LOC_PROT_ERR);
        }
        st.valid = false;
        Ok(())
    }

    /// Loopback packets join the delivery's queue ([`Emit::Congested`] from its high mark on:
    /// the delivery drains it before more is generated); wire packets go to the UDP socket
    /// ([`Emit::Congested`] when the stack refused or dropped one: the continuation resumes on
    /// the next tick, so a congested path paces itself). A packet with no path or AH is
    /// dropped (that does not get better later).
    fn emit(&mut self, pkt: &[u8], dest: Dest) -> Emit {
        let fab = &self.qp.fabric;
        let (path, sport) = match dest {
            Dest::Connected => match self.sh.path {
                Some(p) => (p, p.udp_sport),
                None => {
                    fab.stats.add(Stat::TxDrops, 1);
                    return Emit::Sent;
                }
            },
            Dest::Ah { ah, qpn } => match fab.ahs.get(ah).filter(|a| a.pd == self.qp.pd) {
                Some(a) => (
                    a.path,
                    roce::udp_sport(a.path.av.flow_label, self.qp.qpn, qpn),
                ),
                None => {
                    fab.stats.add(Stat::TxDrops, 1);
                    return Emit::Sent;
                }
            },
        };
        // A packet to our own GID, or to a group with members on this device, is delivered
        // here without the network stack (as an HCA loops multicast back to its own QPs; the
        // RoCEv2 socket keeps the tunnel default of no IP multicast loopback, so the stack
        // does not bring a second copy).
        let mut sent = Emit::Sent;
        if path.loopback || (path.multicast && fab.mcast.has_members(&path.av.dgid)) {
            let src = path.av.sgid.map(|s| s.gid).unwrap_or(path.av.dgid);
            let grh = loopback_grh(&path, pkt.len());
            match self.out.push(pkt, &grh, src, path.av.dgid) {
                Some(true) => sent = Emit::Congested,
                Some(false) => {}
                None => {
                    // The device's loopback pool is lent out to other deliveries: dropped here,
                    // the engine sends it again when the pacing resumes it.
                    fab.stats.add(Stat::TxDrops, 1);
                    self.sh.congested = true;
                    self.sh.resume = true;
                    return Emit::Dropped;
                }
            }
        }
        // Without the socket (another driver holds UDP 4791 here) a group's packets reach the
        // members on this device only.
        if path.loopback || (path.multicast && !fab.udp.is_open()) {
            fab.stats.add(Stat::SentPkts, 1);
            fab.stats.add(Stat::SentBytes, pkt.len() as u64);
            return sent;
        }
        match fab.send(&path, sport, pkt, &self.qp.gauge) {
            Ok(()) => {
                fab.stats.add(Stat::SentPkts, 1);
                fab.stats.add(Stat::SentBytes, pkt.len() as u64);
                sent
            }
            Err(e) => {
                fab.stats.add(Stat::TxDrops, 1);
                self.sh.congested = true;
                self.sh.resume = true;
                match e {
                    // NET_XMIT_DROP/CN or no skb: dropped before it left, sent again at the
                    // next chance (the pacing timer's continuation).
                    XmitError::Congested => Emit::Dropped,
                    // It cannot be sent as addressed (no route, no socket): as loss on the
                    // wire, which the retransmit timer and its retries settle.
                    XmitError::Failed(_) => Emit::Congested,
                }
            }
        }
    }

    fn complete(&mut self, cq: CqSel, c: &Cqe, solicited: bool) -> bool {
        match cq {
            CqSel::Send => self.qp.send_cq.push(c, solicited, self.qp.ev.handle()),
            CqSel::Recv => self.qp.recv_cq.push(c, solicited, self.qp.ev.handle()),
        }
    }

    fn event(&mut self, ev: Event) {
        let e = match ev {
            Event::QpFatal => QpEvent::Fatal,
            Event::CommEst => QpEvent::CommEst,
            Event::SqDrained => QpEvent::SqDrained,
            Event::LastWqeReached => QpEvent::LastWqeReached,
            Event::QpReqErr => QpEvent::ReqErr,
            Event::QpAccessErr => QpEvent::AccessErr,
        };
        self.qp.ev.event(e);
    }

    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake {
        let r = if let Some(srq) = &self.qp.srq {
            srq.take(out)
        } else if let Some((ring, slots, slot_size)) = &self.qp.rq {
            let sh = &mut *self.sh;
            take_from_ring(
                ring,
                *slots,
                *slot_size,
                &mut sh.rq_cons,
                &mut sh.rq_broken,
                self.qp.max_recv_sge,
                out,
            )
        } else {
            RecvTake::Empty
        };
        if r == RecvTake::Bad {
            self.qp.fabric.bad_rings.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn arm_rnr_timer(&mut self, usecs: u32) {
        self.qp.timer.arm(usecs);
    }

    /// Restarts the retransmit timer (rounded up to whole jiffies, at least one) or stops it
    /// without waiting (we hold the QP lock with bottom halves disabled); an expiry already
    /// under way is recognised as stale by its deadline.
    fn set_retry_timer(&mut self, usecs: Option<u64>) {
        match usecs {
            Some(us) => {
                let at = timer::now().wrapping_add(timer::usecs_to_jiffies(us));
                self.sh.retry_at = Some(at);
                self.qp.retry.arm_at(at);
            }
            None => {
                self.sh.retry_at = None;
                self.qp.retry.cancel();
            }
        }
    }

    fn set_reack_timer(&mut self, usecs: Option<u32>) {
        match usecs {
            Some(us) => self.qp.reack.arm(us),
            None => self.qp.reack.cancel(),
        }
    }

    /// Device-wide totals (sent packets and bytes are counted by [`Env::emit`], where a packet
    /// really leaves; the engine keeps those per QP only).
    fn stat(&mut self, s: Stat, n: u64) {
        self.qp.fabric.stats.add(s, n);
    }

    /// Loopback packets lent out beyond this call's own queue: another CPU's delivery (bottom
    /// halves are disabled here, so it is not one this CPU interrupted) holds them. Not only
    /// this QP's: a conservative answer, and the engine waits a bounded number of times.
    fn in_transit(&mut self) -> bool {
        self.qp.fabric.pool.lock().lent() > self.out.len
    }

    /// `jiffies` in microseconds (the clock of the RC round-trip estimate: a jiffy's
    /// granularity, which the engine allows for).
    fn clock_us(&mut self) -> Option<u64> {
        Some(self.now_ms().wrapping_mul(1000))
    }

    /// `jiffies` in milliseconds (the clock of the READ replay budget).
    fn now_ms(&mut self) -> u64 {
        let hz = timer::usecs_to_jiffies(1_000_000).max(1);
        let j = timer::now();
        (j / hz) * 1000 + (j % hz) * 1000 / hz
    }
}

/// Packets from the wire (softirq): the device's entry in the receive table.
impl crate::ib::rxtable::Receiver for Fabric {
    fn receive(&self, meta: &crate::ib::rxtable::RxMeta, pkt: &[u8]) {
        if meta.bad_header {
            self.stats.add(Stat::RxBadHeaders, 1);
            return;
        }
        if meta.bad_icrc {
            self.stats.add(Stat::RxIcrcErrors, 1);
            return;
        }
        let grh = iphdr::grh(
            meta.sgid,
            meta.dgid,
            meta.tclass,
            meta.hop_limit,
            meta.flow_label,
            pkt.len(),
        );
        let info = RxInfo {
            grh,
            src: meta.sgid,
            dst: meta.dgid,
        };
        let mut out = Outbox::new(self, RX_BULK, None);
        rx_packet(self, pkt, &info, &mut out);
        deliver(self, &mut out);
    }
}
