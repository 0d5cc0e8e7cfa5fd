// SPDX-License-Identifier: GPL-2.0-only
//! The device's state: the driver type, per-kind object quotas, the id allocators (QPNs, MR
//! keys, AH numbers) and the data-path fabric. Object files import this, never the dispatch
//! (`driver.rs`).

use crate::datapath::{fabric::Fabric, qp::QpInner, stats::DevStats};
use crate::ib::{bh::with_bh_disabled, netdev::NetDev};
use crate::logic::{
    idalloc::{self, IdAlloc},
    limits as lim,
};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::{new_mutex, new_spinlock, prelude::*, sync::Arc, sync::Mutex, sync::SpinLock};

/// The rrxe driver.
pub(crate) struct Rrxe;

/// A count of live objects of one kind, bounded by the advertised maximum.
#[derive(Default)]
pub(crate) struct Quota(AtomicU32);

impl Quota {
    /// Reserves one more object for a user context (`user`, the create verb had udata) or a
    /// kernel consumer: `ENOMEM` at [`lim::user_max`] of `max` for a user, at `max` for the
    /// kernel (which keeps the difference in reserve). The reservation is given back when it
    /// is dropped, unless the create succeeded and [`QuotaSlot::keep`] made it the object's.
    pub(crate) fn reserve(&self, max: u32, user: bool) -> Result<QuotaSlot<'_>> {
        let max = if user { lim::user_max(max) } else { max };
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                if n < max {
                    Some(n + 1)
                } else {
                    None
                }
            })
            .map(|_| QuotaSlot(Some(self)))
            .map_err(|_| ENOMEM)
    }

    /// Gives back the count of one destroyed object (whose reservation was kept).
    pub(crate) fn release(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One object counted by a [`Quota`], given back on drop unless kept.
#[must_use]
pub(crate) struct QuotaSlot<'a>(Option<&'a Quota>);

impl QuotaSlot<'_> {
    /// The object exists: it keeps the count, and its destroy gives it back
    /// ([`Quota::release`]).
    pub(crate) fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for QuotaSlot<'_> {
    fn drop(&mut self) {
        if let Some(q) = self.0 {
            q.release();
        }
    }
}

/// Which id space an [`IdSlot`] came from.
#[derive(Clone, Copy)]
enum IdKind {
    Ah,
    Qp,
    Mr,
}

/// An id reserved from one of the device's allocators, freed on drop unless kept: the one
/// rollback of every create path.
#[must_use]
pub(crate) struct IdSlot<'a> {
    dev: &'a RrxeDev,
    kind: IdKind,
    id: u32,
    armed: bool,
}

impl IdSlot<'_> {
    /// The id.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The object exists under this id: its destroy frees it.
    pub(crate) fn keep(mut self) -> u32 {
        self.armed = false;
        self.id
    }
}

impl Drop for IdSlot<'_> {
    fn drop(&mut self) {
        if self.armed {
            match self.kind {
                IdKind::Ah => self.dev.free_ah_num(self.id),
                IdKind::Qp => self.dev.free_qpn(self.id),
                IdKind::Mr => self.dev.free_mr_index(self.id),
            }
        }
    }
}

/// Live-object counts per kind.
#[derive(Default)]
pub(crate) struct Quotas {
    pub(crate) pd: Quota,
    pub(crate) cq: Quota,
    pub(crate) qp: Quota,
    pub(crate) ah: Quota,
    pub(crate) srq: Quota,
    pub(crate) mw: Quota,
}

/// An id bitmap and its allocator.
struct Ids {
    alloc: IdAlloc,
    bits: KVVec<u64>,
    /// MR key indices: the key byte each index carried last (empty for other ids).
    last_key: KVVec<u8>,
}

impl Ids {
    fn new(first: u32, count: u32) -> Result<Self> {
        let words = count.div_ceil(64) as usize;
        Ok(Ids {
            alloc: IdAlloc::new(first),
            bits: KVVec::from_elem(0u64, words, GFP_KERNEL)?,
            last_key: KVVec::new(),
        })
    }

    fn with_keys(first: u32, count: u32) -> Result<Self> {
        let mut ids = Self::new(first, count)?;
        // Indexed by the id itself: ids run from `first` to `first + 64 * words - 1`.
        let ids_end = first as usize + ids.bits.len() * 64;
        ids.last_key = KVVec::from_elem(0u8, ids_end, GFP_KERNEL)?;
        Ok(ids)
    }
}

/// Per-device state.
#[pin_data(PinnedDrop)]
pub(crate) struct RrxeDev {
    /// The data path's tables and transmit side, shared with the receive path.
    pub(crate) fabric: Arc<Fabric<QpInner>>,
    /// Device-wide data-path counters (`rdma statistic`); the data path holds a clone.
    pub(crate) stats: Arc<DevStats>,
    /// The netdev key the fabric is published under for received packets.
    netdev_key: usize,
    /// Address handle numbers (0 is never used).
    /// A spinlock: kernel consumers create AHs in atomic context.
    #[pin]
    ah_ids: SpinLock<Ids>,
    /// The port state last reported to ib_core, so that events are sent on changes only.
    pub(super) port_active: AtomicBool,
    pub(crate) quota: Quotas,
    /// QP numbers; 0 and 1 are reserved (SMI, GSI).
    #[pin]
    qpns: Mutex<Ids>,
    /// MR key indices (index 0 is never used, so no key is 0), and each index's last key byte.
    #[pin]
    mr_ids: Mutex<Ids>,
}

impl RrxeDev {
    pub(crate) fn new(active: bool, netdev: &NetDev) -> Result<impl PinInit<Self, Error>> {
        let stats = DevStats::new()?;
        let fabric = Arc::pin_init(Fabric::new(netdev, stats.clone())?, GFP_KERNEL)?;
        let published = fabric.clone();
        let key = netdev.key();
        let (ah_ids, qpns, mr_ids) = (
            Ids::new(1, lim::MAX_AH)?,
            Ids::new(2, lim::MAX_QP)?,
            Ids::with_keys(1, lim::MAX_MR)?,
        );
        Ok(try_pin_init!(RrxeDev {
            fabric,
            stats,
            ah_ids <- new_spinlock!(ah_ids, "rrxe:ah_ids"),
            port_active: AtomicBool::new(active),
            quota: Quotas::default(),
            qpns <- new_mutex!(qpns, "rrxe:qpns"),
            mr_ids <- new_mutex!(mr_ids, "rrxe:mr_ids"),
            // Last: once published, only `RrxeDev`'s drop unpublishes it.
            netdev_key: {
                crate::ib::rxtable::add(key, published)?;
                key
            },
        }? Error))
    }

    fn slot(&self, kind: IdKind, id: u32) -> IdSlot<'_> {
        IdSlot {
            dev: self,
            kind,
            id,
            armed: true,
        }
    }

    /// An AH number; any context.
    pub(crate) fn reserve_ah_num(&self) -> Result<IdSlot<'_>> {
        with_bh_disabled(|| {
            let mut ids = self.ah_ids.lock();
            let Ids { alloc, bits, .. } = &mut *ids;
            alloc.alloc(bits).ok_or(ENOMEM)
        })
        .map(|n| self.slot(IdKind::Ah, n))
    }

    pub(crate) fn free_ah_num(&self, n: u32) {
        with_bh_disabled(|| {
            let mut ids = self.ah_ids.lock();
            let Ids { alloc, bits, .. } = &mut *ids;
            alloc.free(bits, n);
        })
    }

    pub(crate) fn reserve_qpn(&self) -> Result<IdSlot<'_>> {
        let n = {
            let mut ids = self.qpns.lock();
            let Ids { alloc, bits, .. } = &mut *ids;
            alloc.alloc(bits).ok_or(ENOMEM)?
        };
        Ok(self.slot(IdKind::Qp, n))
    }

    pub(crate) fn free_qpn(&self, qpn: u32) {
        let mut ids = self.qpns.lock();
        let Ids { alloc, bits, .. } = &mut *ids;
        alloc.free(bits, qpn);
    }

    /// An MR index and a fresh, random key byte (never the index's previous one).
    pub(crate) fn reserve_mr_index(&self) -> Result<(IdSlot<'_>, u8)> {
        let (index, key) = {
            let mut ids = self.mr_ids.lock();
            let Ids {
                alloc,
                bits,
                last_key,
            } = &mut *ids;
            let index = alloc.alloc(bits).ok_or(ENOMEM)?;
            let mut key = 0;
            if let Some(last) = last_key.get_mut(index as usize) {
                key = idalloc::next_key_byte(crate::ib::random_u32(), *last);
                *last = key;
            }
            (index, key)
        };
        Ok((self.slot(IdKind::Mr, index), key))
    }

    pub(crate) fn free_mr_index(&self, index: u32) {
        let mut ids = self.mr_ids.lock();
        let Ids { alloc, bits, .. } = &mut *ids;
        alloc.free(bits, index);
    }
}

#[pinned_drop]
impl PinnedDrop for RrxeDev {
    fn drop(self: Pin<&mut Self>) {
        // No receive callback reaches the fabric after this; every QP, MR and AH is gone
        // (ib_core destroyed them before deallocating the device), so the last reference to the
        // fabric is ours and is dropped here, in process context.
        crate::ib::rxtable::remove(self.netdev_key);
    }
}

/// Per-context state (grows with the data path: mmap entries, doorbells).
pub(crate) struct RrxeContext;
