// SPDX-License-Identifier: GPL-2.0-only
//! The devices that packet receive callbacks (softirq) can reach, by netdev key.
//!
//! One table per module instance, published through a static pointer so that the UDP receive
//! callback, which only gets an skb, can find it. Lookups run with bottom halves disabled (an
//! RCU read-side critical section); the owner unpublishes the table and waits for an RCU grace
//! period before freeing it, so a lookup never sees freed memory.

use crate::verbs::dp::Fabric;
use core::{
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{new_spinlock, prelude::*, sync::Arc, sync::SpinLock};

#[pin_data]
struct Inner {
    #[pin]
    list: SpinLock<KVec<(usize, Arc<Fabric>)>>,
}

static TABLE: AtomicPtr<Inner> = AtomicPtr::new(ptr::null_mut());

/// Owns the published table; dropping it unpublishes and frees it.
///
/// # Invariants
///
/// `TABLE` points to the pinned `Inner` owned by `self.0` (leaked from a `KBox`).
pub(crate) struct RxTable(*mut Inner);

// SAFETY: the table is only reached through its spinlock.
unsafe impl Send for RxTable {}
// SAFETY: as above.
unsafe impl Sync for RxTable {}

impl RxTable {
    /// Allocates and publishes the table (module init; one instance at a time).
    pub(crate) fn new() -> Result<Self> {
        let b = KBox::pin_init(pin_init!(Inner { list <- new_spinlock!(KVec::new(), "rrxe:rxtable") }), GFP_KERNEL)?;
        // SAFETY: the box is never moved out of: it is turned back into a `Pin<KBox>` in `drop`.
        let raw = KBox::into_raw(unsafe { Pin::into_inner_unchecked(b) });
        if TABLE.compare_exchange(ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Acquire).is_err() {
            // SAFETY: not published, so still exclusively ours.
            drop(unsafe { KBox::from_raw(raw) });
            return Err(EBUSY);
        }
        // INVARIANT: published above.
        Ok(RxTable(raw))
    }

    fn inner(&self) -> &Inner {
        // SAFETY: by the type invariant the table lives as long as `self`.
        unsafe { &*self.0 }
    }

    /// Makes `fabric` reachable for packets arriving on the netdev with `key`.
    pub(crate) fn add(&self, key: usize, fabric: Arc<Fabric>) -> Result {
        let mut entry = KVec::with_capacity(1, GFP_KERNEL)?;
        entry.push((key, fabric), GFP_KERNEL)?;
        super::bh::with_bh_disabled(|| {
            let mut l = self.inner().list.lock();
            l.retain(|(k, _)| *k != key);
            // Reserved above, so this cannot need to allocate in atomic context... except that
            // growing the list may; GFP_ATOMIC covers that.
            if let Some(e) = entry.pop() {
                l.push(e, GFP_ATOMIC)?;
            }
            Ok(())
        })
    }

    /// Forgets the netdev with `key`. Receive callbacks that already found it finish with
    /// their own reference.
    pub(crate) fn remove(&self, key: usize) {
        let mut removed = KVec::new();
        super::bh::with_bh_disabled(|| {
            let mut l = self.inner().list.lock();
            let mut i = 0;
            while i < l.len() {
                if l[i].0 == key {
                    let e = l.swap_remove(i);
                    // Dropped outside the lock (and outside the BH-disabled section).
                    let _ = removed.push(e, GFP_ATOMIC);
                } else {
                    i += 1;
                }
            }
        });
        drop(removed);
    }
}

/// Finds the fabric bound to the netdev with `key`. Call with bottom halves disabled (softirq
/// context qualifies).
pub(crate) fn lookup(key: usize) -> Option<Arc<Fabric>> {
    let p = TABLE.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: a published table is freed only after being unpublished and an RCU grace period;
    // the caller runs with bottom halves disabled, which is an RCU read-side section.
    let t = unsafe { &*p };
    let l = t.list.lock();
    l.iter().find(|(k, _)| *k == key).map(|(_, f)| f.clone())
}

impl Drop for RxTable {
    fn drop(&mut self) {
        TABLE.store(ptr::null_mut(), Ordering::Release);
        super::bh::synchronize_rcu();
        // SAFETY: unpublished and past a grace period: nothing else can reach it.
        drop(unsafe { KBox::from_raw(self.0) });
    }
}
