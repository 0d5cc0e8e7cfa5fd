// SPDX-License-Identifier: GPL-2.0-only
//! A sender's cap on packets in flight: skbs handed to the IP output path and not yet freed.
//!
//! rdma_rxe stops a QP with 64 skbs out and wakes it below 16 (`RXE_INFLIGHT_SKBS_PER_QP_*`), so
//! one QP cannot fill a qdisc or a device queue for everyone else. A [`Gauge`] does the same for
//! one sender: [`Gauge::has_room`] says whether it may send; every skb sent through
//! [`Gauge::charge`] holds one count and one reference to the gauge until the skb's destructor
//! runs (freed after transmission, dropped by a qdisc, or orphaned on the way); when the count
//! falls below [`LOW`] after the sender found no room, the gauge calls the sender's
//! [`TxWaker::tx_room`].
//!
//! A gauge outlives its sender while skbs hold it. The sender is reached only through the
//! `Arc` registered with [`Gauge::attach`], under the gauge's lock, and [`Gauge::detach`] takes
//! it back in process context: a destructor never drops the last reference of a sender (which
//! may own memory that cannot be freed in softirq context).
//!
//! Module unload waits until no skb of ours is left anywhere ([`drain`]): the destructor is our
//! code.

use super::{bh, bindings as b};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::{new_spinlock, prelude::*, sync::Arc, sync::SpinLock};

/// A sender with this many skbs in flight has no room.
pub(crate) const HIGH: u32 = 64;
/// A sender that found no room is woken when its skbs in flight fall below this.
pub(crate) const LOW: u32 = 16;

/// Skbs of ours not yet freed, all senders (module unload waits for 0).
static SKBS_OUT: AtomicU64 = AtomicU64::new(0);

/// What a gauge wakes.
pub(crate) trait TxWaker: Send + Sync + 'static {
    /// The sender has room again. Called from an skb destructor (softirq or process context,
    /// bottom halves disabled, the gauge's lock held): must not sleep and must not take a lock
    /// the sender holds while sending.
    fn tx_room(&self);
}

/// The count of one sender's skbs in flight.
#[pin_data]
pub(crate) struct Gauge<T: TxWaker> {
    count: AtomicU32,
    /// The sender found no room and waits for [`TxWaker::tx_room`].
    stalled: AtomicBool,
    #[pin]
    waker: SpinLock<Option<Arc<T>>>,
}

impl<T: TxWaker> Gauge<T> {
    /// A gauge with nothing in flight and no sender attached.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                count: AtomicU32::new(0),
                stalled: AtomicBool::new(false),
                waker <- new_spinlock!(None, "rrxe:tx_gauge"),
            }),
            GFP_KERNEL,
        )
    }

    /// Registers the sender to wake (once it exists).
    pub(crate) fn attach(&self, sender: Arc<T>) {
        let old = bh::with_bh_disabled(|| self.waker.lock().replace(sender));
        drop(old);
    }

    /// Forgets the sender (process context: the sender's reference is dropped here).
    pub(crate) fn detach(&self) {
        let old = bh::with_bh_disabled(|| self.waker.lock().take());
        drop(old);
    }

    /// Skbs in flight.
    pub(crate) fn in_flight(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether the sender may hand one more skb to the stack. `false` also arms the wake-up:
    /// [`TxWaker::tx_room`] is called once the count falls below [`LOW`].
    pub(crate) fn has_room(&self) -> bool {
        if self.count.load(Ordering::Relaxed) < HIGH {
            return true;
        }
        self.stalled.store(true, Ordering::SeqCst);
        // A destructor that ran between the load and the store did not see `stalled`: look
        // again. Later ones see it (both sides are sequentially consistent).
        self.count.load(Ordering::SeqCst) < HIGH
    }

    /// Charges `skb` (ours, about to be handed to the stack) to this gauge: the count and a
    /// reference are held until its destructor runs.
    ///
    /// # Safety
    ///
    /// `skb` is a valid skb that we allocated, with no destructor and no zero-copy state, not
    /// yet visible to anyone else.
    pub(crate) unsafe fn charge(self: &Arc<Self>, skb: *mut b::sk_buff) {
        self.count.fetch_add(1, Ordering::SeqCst);
        SKBS_OUT.fetch_add(1, Ordering::Relaxed);
        let arg = Arc::into_raw(self.clone())
            .cast_mut()
            .cast::<core::ffi::c_void>();
        // SAFETY: per the contract `skb` is ours, has no destructor, and its `destructor_arg` is
        // unused (no zero-copy state); from now on the destructor owns the reference in `arg`.
        unsafe { b::rrxe_skb_set_destructor(skb, Some(Self::destructor), arg) };
    }

    /// The skb destructor: gives back the count and the reference [`Gauge::charge`] took.
    ///
    /// # Safety
    ///
    /// Called by the networking core, once, for an skb charged by [`Gauge::charge`] with this
    /// `T`, whose `destructor_arg` still holds the reference (intermediate layers keep it, per
    /// `skbuff.h`).
    unsafe extern "C" fn destructor(skb: *mut b::sk_buff) {
        // SAFETY: per the contract the argument is the pointer `Arc::into_raw` gave in
        // `charge`, whose reference we now take back (exactly once: the core calls a destructor
        // once and clears it).
        let g = unsafe { Arc::from_raw(b::rrxe_skb_destructor_arg(skb).cast::<Self>()) };
        // Bottom halves disabled throughout: an RCU read-side section, which `drain`'s grace
        // period waits for.
        bh::with_bh_disabled(|| {
            let n = g.count.fetch_sub(1, Ordering::SeqCst).wrapping_sub(1);
            if n < LOW
                && g.stalled.load(Ordering::SeqCst)
                && g.stalled.swap(false, Ordering::SeqCst)
            {
                if let Some(w) = &*g.waker.lock() {
                    w.tx_room();
                }
            }
            // The last reference to a gauge may go here: it then holds no sender (a sender
            // detaches before it drops its own reference), only atomics.
            drop(g);
            SKBS_OUT.fetch_sub(1, Ordering::Release);
        });
    }
}

/// Held by the module: dropping it (the module's last step of unloading) waits until every
/// skb we sent has been freed ([`drain`]).
pub(crate) struct DrainOnUnload;

impl Drop for DrainOnUnload {
    fn drop(&mut self) {
        drain();
    }
}

/// Waits (module unload, process context) until every skb we sent has been freed: their
/// destructors are code of this module. Sleeps in steps of 10 ms; logs once a second while
/// waiting.
fn drain() {
    let mut waited = 0u32;
    while SKBS_OUT.load(Ordering::Acquire) != 0 {
        if waited % 100 == 0 {
            pr_info!(
                "waiting for {} packets still queued in the network stack\n",
                SKBS_OUT.load(Ordering::Relaxed)
            );
        }
        // SAFETY: `msleep` may be called in process context, which module unload is.
        unsafe { b::msleep(10) };
        waited = waited.wrapping_add(1);
    }
    // The last destructor may still be between its decrement and the end of its
    // bottom-halves-disabled section.
    bh::synchronize_rcu();
}
