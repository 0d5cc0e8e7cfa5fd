// SPDX-License-Identifier: GPL-2.0-only
//! Object tables by small index, reachable from any context, whose teardown drops an object's
//! last reference in process context.

use crate::ib::bh::{synchronize_rcu, with_bh_disabled};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::prelude::*;
use kernel::{
    new_spinlock,
    sync::{Arc, SpinLock},
};

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
    pub(super) slots: SpinLock<KVVec<Option<Arc<T>>>>,
    /// [`Held`] references alive, for any entry.
    pub(super) held: AtomicUsize,
    /// Grace periods [`Table::remove_and_wait`] waited for (the `teardown_grace_periods`
    /// counter).
    waits: AtomicU64,
}

/// A reader's reference to a table entry ([`Table::get`]); dropped before the section with
/// bottom halves disabled that took it ends. Not `Clone`: the reference cannot escape the
/// count.
pub(crate) struct Held<'t, T> {
    // Field order is drop order: the reference goes first, then the count says so.
    pub(super) arc: Arc<T>,
    pub(super) _count: HeldCount<'t>,
}

pub(super) struct HeldCount<'t>(&'t AtomicUsize);

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
    pub(super) fn new(n: u32) -> Result<impl PinInit<Self, Error>> {
        let v = KVVec::from_elem(None, n as usize, GFP_KERNEL)?;
        Ok(try_pin_init!(Table {
            slots <- new_spinlock!(v, "rrxe:table"),
            held: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
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
            self.waits.fetch_add(1, Ordering::Relaxed);
        }
        v
    }

    /// Grace periods removals from this table have waited for.
    pub(crate) fn grace_periods(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
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
