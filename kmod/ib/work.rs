// SPDX-License-Identifier: GPL-2.0-only
//! A work item (`struct work_struct`) on the high-priority system workqueue that calls its
//! owner: the data path's "continue now" (a context that spent its budget hands the rest to a
//! kernel thread at once, instead of waiting a timer tick).
//!
//! The work function runs in process context: it may sleep, and takes the data path's spinlocks
//! with bottom halves disabled (see [`super::bh`]).

use super::bindings as b;
use core::{
    marker::PhantomPinned,
    sync::atomic::{AtomicUsize, Ordering},
};
use kernel::{prelude::*, types::Opaque};

/// A type that embeds a [`Work`] and handles its runs.
///
/// Contract: the owner calls [`Work::shutdown_sync`] on every bound work item before any of its
/// other fields is dropped (the work function borrows the whole owner). A safe trait, so that
/// `verbs/` (no `unsafe`) can implement it; the contract is checked by review, as for
/// [`super::timer::TimerOwner`].
pub(crate) trait WorkOwner: Send + Sync + 'static {
    /// Called in process context when the embedded work item `id` runs.
    fn work_run(&self, id: u32);
}

/// A pinned `work_struct` that calls `func(ctx)` when it runs.
///
/// [`Work::shutdown_sync`] (and `Drop`, which calls it) disables the item for good and waits for
/// a run in progress (`disable_work_sync`): afterwards it never runs again and [`Work::queue`]
/// does nothing. Whatever `ctx` refers to must stay valid until then. `shutdown_sync` and `Drop`
/// sleep, and must never be called from the work function itself.
///
/// # Invariants
///
/// `work` was initialised by `INIT_WORK` with [`Work::run`] as its function and is not moved
/// afterwards.
#[pin_data(PinnedDrop)]
pub(crate) struct Work {
    #[pin]
    work: Opaque<b::work_struct>,
    func: fn(usize),
    ctx: AtomicUsize,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the workqueue core serialises access to `work_struct`; `func` never changes after
// initialisation and `ctx` is an atomic (written by `bind`).
unsafe impl Send for Work {}
// SAFETY: `queue` and `shutdown_sync` may run concurrently on several CPUs: `queue_work` claims
// the item with an atomic bit and `disable_work_sync` takes the pool lock.
unsafe impl Sync for Work {}

impl Work {
    fn new(func: fn(usize)) -> impl PinInit<Self> {
        pin_init!(Self {
            func,
            ctx: AtomicUsize::new(0),
            _pin: PhantomPinned,
            work <- Opaque::ffi_init(|w: *mut b::work_struct| {
                // SAFETY: `w` points to writable, pinned storage for a `work_struct`;
                // `INIT_WORK` initialises all of it.
                unsafe { b::rrxe_init_work(w, Some(Self::run)) };
            }),
        })
    }

    /// Work item `ID` of an owner of type `T` that embeds it; [`Work::bind`] connects them.
    pub(crate) fn for_owner<T: WorkOwner, const ID: u32>() -> impl PinInit<Self> {
        Self::new(Self::owner_run::<T, ID>)
    }

    /// Connects this item (created by [`Work::for_owner`]) to `owner`, which must embed it:
    /// `EINVAL` otherwise. Until then a run does nothing.
    pub(crate) fn bind<T: WorkOwner>(&self, owner: &kernel::sync::Arc<T>) -> Result {
        let o = super::timer::embedding_owner(self, owner)?;
        self.ctx.store(o, Ordering::Release);
        Ok(())
    }

    /// Queues the item on the high-priority system workqueue unless it is queued already (then
    /// the queued run does the work) or disabled. Any context, including hard interrupts off.
    pub(crate) fn queue(&self) {
        // SAFETY: by the type invariant the item is initialised and pinned; `queue_work` may be
        // called in any context and does nothing on a queued or disabled item.
        unsafe { b::rrxe_queue_work_highpri(self.work.get()) };
    }

    /// Disables the item for good and waits for a run in progress (`disable_work_sync`).
    /// Process context only; never from the work function. Idempotent.
    pub(crate) fn shutdown_sync(&self) {
        // SAFETY: by the type invariant the item is initialised and pinned, which is all
        // `disable_work_sync` needs; it may be called any number of times.
        unsafe { b::disable_work_sync(self.work.get()) };
    }

    /// # Safety
    ///
    /// Called by the workqueue core with `w` the `work` field of a live [`Work`] (it is only
    /// queued from there, and disabled before the `Work` is freed).
    unsafe extern "C" fn run(w: *mut b::work_struct) {
        // SAFETY: per the contract above, `w` is the `work` field of a live `Work`.
        let this =
            unsafe { &*kernel::container_of!(w.cast::<Opaque<b::work_struct>>(), Self, work) };
        (this.func)(this.ctx.load(Ordering::Acquire));
    }

    fn owner_run<T: WorkOwner, const ID: u32>(ctx: usize) {
        if ctx == 0 {
            return;
        }
        // SAFETY: `bind` stored the address of the `Arc`-owned `T` that embeds this item (it
        // checked the embedding), and the allocation never moves. It is not freed while this
        // function runs: dropping `T` drops the item, whose `Drop` waits for the run
        // (`disable_work_sync`) before the allocation can go. That `T`'s other fields are still
        // alive rests on the `WorkOwner` contract (shut the item down before dropping them),
        // which `datapath::qp::QpInner` keeps (`shutdown` in `destroy`; on the create error path
        // the item was never queued).
        let owner = unsafe { &*(ctx as *const T) };
        owner.work_run(ID);
    }
}

#[pinned_drop]
impl PinnedDrop for Work {
    fn drop(self: Pin<&mut Self>) {
        self.shutdown_sync();
    }
}
