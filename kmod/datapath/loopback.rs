// SPDX-License-Identifier: GPL-2.0-only
//! The loopback queue. Packets to our own GID never touch the network stack: they are delivered
//! in the sender's context from a fixed-capacity local queue (an [`Outbox`]: no recursion, no
//! workqueue hop, no allocation), with buffers lent from the device's pool; the receive dispatch
//! delivers them (`rx::deliver`).
//!
//! Every context bounds its work: a delivery may generate at most a budget of "bulk" packets
//! (requester packets and READ responses; ACKs are not bulk and each packet delivered yields at
//! most one), and its queue pushes back ([`Emit::Congested`]) when it fills. What a delivery
//! leaves undone is resumed by the QP's continuation (see `qp/sched.rs`).
//!
//! [`Emit::Congested`]: crate::logic::transport::Emit::Congested

use crate::logic::transport::{self as tp, RxInfo};
use kernel::prelude::*;
use kernel::sync::SpinLock;

/// Packets one run of a QP's requester sends at most (a doorbell pass before the SQ lock is
/// released, a timer's run, a round of the continuation).
pub(super) const BUDGET: u32 = 64;

/// Bulk packets one packet from the wire may trigger (an ACK opening the window).
pub(super) const RX_BULK: u32 = 4 * BUDGET;

/// Loopback packets one delivery holds at most.
pub(super) const OUT_CAP: usize = 32;

/// QPs whose responder turn one delivery holds at most ([`RespTurn::Held`]).
pub(super) const HELD_MAX: usize = 8;

/// Queue length from which [`Env::emit`] pushes back (the rest is room for ACKs: every packet
/// delivered yields at most one, and bulk stops here).
pub(super) const OUT_HIGH: usize = 24;

/// Loopback packet buffers per device, shared by the deliveries in progress (about 1 MiB).
/// Each delivery holds up to [`OUT_CAP`]; when the pool runs dry the sender waits for the
/// next tick (4 ms at HZ 250). 64 buffers held two processes writing on two CPUs to 1.28x one
/// process (3,136 64 KiB WRITEs/s, 1,749 in the worst run); 256 let them reach 1.95x (4,476;
/// `make bench`, 2026-11-29).
pub(super) const POOL_BUFS: usize = 256;

/// A loopback buffer: metadata (length, GRH, source and destination GIDs), then the packet.
pub(super) const META: usize = 96;

pub(super) const META_GRH: usize = 8;

pub(super) const META_SRC: usize = META_GRH + tp::GRH_LEN;

pub(super) const META_DST: usize = META_SRC + 16;

pub(super) const BUF_LEN: usize = META + tp::MAX_PKT;

/// Loopback packet buffers: `bufs[..free]` are free, the others lent out (a stack whose
/// storage never grows).
pub(super) struct Pool {
    pub(super) bufs: KVec<Option<KVec<u8>>>,
    pub(super) free: usize,
}

impl Pool {
    /// [`POOL_BUFS`] free buffers.
    pub(super) fn new() -> Result<Self> {
        let mut bufs = KVec::with_capacity(POOL_BUFS, GFP_KERNEL)?;
        for _ in 0..POOL_BUFS {
            bufs.push(Some(KVec::from_elem(0u8, BUF_LEN, GFP_KERNEL)?), GFP_KERNEL)?;
        }
        Ok(Pool {
            bufs,
            free: POOL_BUFS,
        })
    }

    pub(super) fn take(&mut self) -> Option<KVec<u8>> {
        let i = self.free.checked_sub(1)?;
        let b = self.bufs[i].take()?;
        self.free = i;
        Some(b)
    }

    pub(super) fn give(&mut self, b: KVec<u8>) {
        if let Some(slot) = self.bufs.get_mut(self.free) {
            *slot = Some(b);
            self.free += 1;
        }
    }

    /// Buffers lent to deliveries: packets queued or being handled.
    pub(super) fn lent(&self) -> usize {
        self.bufs.len().saturating_sub(self.free)
    }
}

/// Loopback packets waiting for delivery: a fixed-capacity queue of buffers borrowed from the
/// device's pool, and the budget of bulk packets the delivery may still generate. Used with
/// bottom halves disabled only.
pub(crate) struct Outbox<'f> {
    pub(super) pool: &'f SpinLock<Pool>,
    pub(super) q: [Option<KVec<u8>>; OUT_CAP],
    pub(super) head: usize,
    pub(super) len: usize,
    /// Bulk packets (requester, READ responses) this delivery may still generate.
    pub(super) bulk: u32,
    /// The QP whose doorbell drives this delivery (its address), if any.
    pub(super) driver: usize,
    /// An ACK delivered to the driver opened its window.
    pub(super) driver_go: bool,
    /// QPs whose responder or requester output this delivery queued (it holds their turn):
    /// they get the turn back once the queue is delivered.
    pub(super) held: [u32; HELD_MAX],
    pub(super) nheld: usize,
}

impl<'f> Outbox<'f> {
    /// An empty queue lending from `pool`; `driver`: the QP whose doorbell drives this delivery.
    pub(super) fn new<Q>(pool: &'f SpinLock<Pool>, bulk: u32, driver: Option<&Q>) -> Self {
        Outbox {
            pool,
            q: [const { None }; OUT_CAP],
            head: 0,
            len: 0,
            bulk,
            driver: driver.map_or(0, |q| q as *const Q as usize),
            driver_go: false,
            held: [0; HELD_MAX],
            nheld: 0,
        }
    }

    /// This delivery's identity while it lives (its address: an `Outbox` is used in place,
    /// borrowed, from creation to the [`deliver`](super::rx::deliver) that empties it), never 0:
    /// what a QP's turns (`RespTurn`, `Shell::req_owner`) record as their holder.
    pub(crate) fn id(&self) -> usize {
        core::ptr::from_ref(self) as usize
    }

    pub(super) fn drives<Q>(&self, qp: &Q) -> bool {
        self.driver == qp as *const Q as usize
    }

    /// Bulk packets that may be generated now: none once the queue reached its high mark.
    pub(super) fn room(&self) -> u32 {
        if self.len >= OUT_HIGH {
            0
        } else {
            self.bulk
        }
    }

    /// Whether this delivery can hold the turn of QP `qpn` (it does, or has room for one more).
    pub(super) fn can_hold(&self, qpn: u32) -> bool {
        self.nheld < HELD_MAX || self.held[..self.nheld].contains(&qpn)
    }

    /// Notes that this delivery holds QP `qpn`'s turn (after [`Outbox::can_hold`]).
    pub(super) fn hold(&mut self, qpn: u32) {
        if !self.held[..self.nheld].contains(&qpn) && self.nheld < HELD_MAX {
            self.held[self.nheld] = qpn;
            self.nheld += 1;
        }
    }

    pub(super) fn unhold(&mut self) -> Option<u32> {
        self.nheld = self.nheld.checked_sub(1)?;
        Some(self.held[self.nheld])
    }

    pub(super) fn spend(&mut self, n: u32) {
        self.bulk = self.bulk.saturating_sub(n);
    }

    /// Queues a packet. `None`: dropped (queue or pool exhausted); `Some(full)`: queued, and
    /// `full` says the queue reached its high mark.
    pub(super) fn push(
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

    /// The next queued buffer; [`unpack`] reads it.
    pub(super) fn pop(&mut self) -> Option<KVec<u8>> {
        if self.len == 0 {
            return None;
        }
        let b = self.q[self.head].take();
        self.head = (self.head + 1) % OUT_CAP;
        self.len -= 1;
        b
    }

    /// Gives a buffer back to the pool (no allocation).
    pub(super) fn release(&self, buf: KVec<u8>) {
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

/// The packet in a buffer [`Outbox::pop`] gave, and what its receiver is told of it (the GRH
/// and the GIDs [`Outbox::push`] stored with it).
pub(super) fn unpack(buf: &[u8]) -> (&[u8], RxInfo) {
    let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]])).min(BUF_LEN - META);
    let mut grh = [0u8; tp::GRH_LEN];
    grh.copy_from_slice(&buf[META_GRH..META_SRC]);
    let mut src = [0u8; 16];
    src.copy_from_slice(&buf[META_SRC..META_DST]);
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&buf[META_DST..META_DST + 16]);
    (&buf[META..META + len], RxInfo { grh, src, dst })
}
