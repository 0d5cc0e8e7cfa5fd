// SPDX-License-Identifier: GPL-2.0-only
//! A one-shot kernel timer (`struct timer_list`) calling a plain function with a context word.
//!
//! The callback runs in softirq context (bottom halves disabled), so it may take the data
//! path's spinlocks directly (see [`super::bh`]) but must not sleep.

use super::bindings as b;
use core::marker::PhantomPinned;
use kernel::{prelude::*, types::Opaque};

/// A timer callback: called in softirq context with the context word given to [`Timer::new`].
pub(crate) type TimerFn = fn(usize);

/// A pinned `timer_list` that calls `func(ctx)` when it expires.
///
/// Safety contract: the timer is pinned for its whole life (it is linked into the timer wheel
/// while armed). [`Timer::shutdown_sync`] (and `Drop`, which calls it) waits for a running
/// callback to finish and disarms the timer for good: after it returns, the callback never runs
/// again and [`Timer::arm`] does nothing. Whatever `ctx` refers to must therefore stay valid
/// until `shutdown_sync` has returned (or the timer is dropped). `shutdown_sync` and `Drop` must
/// be called from process context and never from the timer's own callback (they would wait for
/// themselves).
///
/// # Invariants
///
/// `timer` was initialised by `timer_setup` with [`Timer::expired`] as its function and is not
/// moved afterwards.
#[pin_data(PinnedDrop)]
pub(crate) struct Timer {
    #[pin]
    timer: Opaque<b::timer_list>,
    func: TimerFn,
    ctx: core::sync::atomic::AtomicUsize,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the timer core serialises access to `timer_list`; `func` is never changed after
// initialisation and `ctx` is an atomic (written by `bind`).
unsafe impl Send for Timer {}
// SAFETY: `arm` and `shutdown_sync` may run concurrently from several CPUs: `mod_timer` and
// `timer_shutdown_sync` take the timer base lock.
unsafe impl Sync for Timer {}

impl Timer {
    /// A disarmed timer that will call `func(ctx)`.
    pub(crate) fn new(func: TimerFn, ctx: usize) -> impl PinInit<Self> {
        pin_init!(Self {
            func,
            ctx: core::sync::atomic::AtomicUsize::new(ctx),
            _pin: PhantomPinned,
            timer <- Opaque::ffi_init(|t: *mut b::timer_list| {
                // SAFETY: `t` points to writable, pinned storage for a `timer_list`;
                // `timer_setup` initialises all of it.
                unsafe { b::rrxe_timer_setup(t, Some(Self::expired)) };
            }),
        })
    }

    /// Arms (or re-arms) the timer to fire about `delay_us` microseconds from now, rounded up to
    /// the next jiffy (`mod_timer` semantics: a pending expiry is replaced). Callable from any
    /// context, including softirq and the timer's own callback. Does nothing after
    /// [`Timer::shutdown_sync`].
    pub(crate) fn arm(&self, delay_us: u32) {
        // SAFETY: by the type invariant the timer is initialised and pinned; `mod_timer` may be
        // called from any context, and on a shut-down timer it does nothing.
        unsafe {
            let expires = b::rrxe_jiffies().wrapping_add(b::rrxe_usecs_to_jiffies(delay_us));
            b::mod_timer(self.timer.get(), expires);
        }
    }

    /// Arms (or re-arms) the timer to fire at jiffy `expires` (an absolute time from [`now`]
    /// plus a delay from [`usecs_to_jiffies`]); `mod_timer` semantics as for [`Timer::arm`].
    pub(crate) fn arm_at(&self, expires: u64) {
        // SAFETY: by the type invariant the timer is initialised and pinned; `mod_timer` may be
        // called from any context, and on a shut-down timer it does nothing. `unsigned long` is
        // 64 bits wide on the 64-bit targets the module builds for.
        unsafe { b::mod_timer(self.timer.get(), expires as _) };
    }

    /// Stops a pending expiry without waiting (`timer_delete`): callable from any context,
    /// under spinlocks and in the timer's own callback. A callback already running on another
    /// CPU still finishes, so the owner must recognise a stale expiry itself.
    pub(crate) fn cancel(&self) {
        // SAFETY: by the type invariant the timer is initialised and pinned; `timer_delete`
        // does not sleep and may be called in any context.
        unsafe { b::timer_delete(self.timer.get()) };
    }

    /// Disarms the timer permanently and waits for a running callback to return
    /// (`timer_shutdown_sync`). Afterwards the callback never runs again, and [`Timer::arm`]
    /// is a no-op. Process context only; never from the callback itself. Idempotent.
    pub(crate) fn shutdown_sync(&self) {
        // SAFETY: by the type invariant the timer is initialised and pinned, which is all
        // `timer_shutdown_sync` needs. (Calling it from the callback, or from a context that may
        // not sleep, breaks the documented contract: a deadlock or a warning, not memory
        // unsafety.)
        unsafe { b::timer_shutdown_sync(self.timer.get()) };
    }

    /// # Safety
    ///
    /// Called by the timer core with `t` the `timer` field of a live [`Timer`] (it is only ever
    /// armed from there and shut down before the `Timer` is freed).
    unsafe extern "C" fn expired(t: *mut b::timer_list) {
        // SAFETY: per the contract above, `t` is the `timer` field of a live `Timer`.
        let this =
            unsafe { &*kernel::container_of!(t.cast::<Opaque<b::timer_list>>(), Self, timer) };
        (this.func)(this.ctx.load(core::sync::atomic::Ordering::Acquire));
    }
}

/// A type that embeds a [`Timer`] and handles its expiry.
///
/// Contract: the owner calls [`Timer::shutdown_sync`] on every bound timer before any of its
/// other fields is dropped (the callback borrows the whole owner). This is a safe trait so that
/// `verbs/` (no `unsafe`) can implement it; the contract is checked by review, not the compiler.
pub(crate) trait TimerOwner: Send + Sync + 'static {
    /// Called in softirq context when the embedded timer `id` fires.
    fn timer_fired(&self, id: u32);
}

impl Timer {
    /// Timer `ID` of an owner of type `T` that embeds it; [`Timer::bind`] connects them.
    pub(crate) fn for_owner<T: TimerOwner, const ID: u32>() -> impl PinInit<Self> {
        Self::new(Self::owner_expired::<T, ID>, 0)
    }

    /// Connects this timer (created by [`Timer::for_owner`]) to `owner`, which must embed
    /// it: `EINVAL` otherwise. From then on expiry calls `owner.timer_fired()`. The owner must
    /// call [`Timer::shutdown_sync`] before it starts dropping its other fields.
    pub(crate) fn bind<T: TimerOwner>(&self, owner: &kernel::sync::Arc<T>) -> Result {
        let o = embedding_owner(self, owner)?;
        self.ctx.store(o, core::sync::atomic::Ordering::Release);
        Ok(())
    }

    fn owner_expired<T: TimerOwner, const ID: u32>(ctx: usize) {
        if ctx == 0 {
            return;
        }
        // SAFETY: `bind` stored the address of the `Arc`-owned `T` that embeds this timer (it
        // checked the embedding), and the allocation never moves. It is not freed while this
        // callback runs: dropping `T` drops this timer, whose `Drop` waits for the callback
        // (`timer_shutdown_sync`) before the allocation can go. That `T`'s other fields are
        // still alive rests on the `TimerOwner` contract (shut the timer down before dropping
        // them), which `datapath::qp::QpInner` keeps (`shutdown` in `destroy`; on the create error
        // path the timer was never armed).
        let owner = unsafe { &*(ctx as *const T) };
        owner.timer_fired(ID);
    }
}

#[pinned_drop]
impl PinnedDrop for Timer {
    fn drop(self: Pin<&mut Self>) {
        self.shutdown_sync();
    }
}

/// The address of `owner` if `field` lies inside it (`EINVAL` otherwise): what a callback
/// context word may hold for an embedded timer or work item ([`Timer::bind`],
/// [`super::work::Work::bind`]).
pub(crate) fn embedding_owner<F, T>(field: &F, owner: &kernel::sync::Arc<T>) -> Result<usize> {
    let o = &**owner as *const T as usize;
    let f = field as *const F as usize;
    if f < o || f + core::mem::size_of::<F>() > o + core::mem::size_of::<T>() {
        return Err(EINVAL);
    }
    Ok(o)
}

/// The current time in jiffies.
pub(crate) fn now() -> u64 {
    // SAFETY: reads the `jiffies` counter (READ_ONCE); no preconditions.
    unsafe { b::rrxe_jiffies() as u64 }
}

/// The monotonic clock in microseconds (`ktime_get_ns`), any context: DCQCN's clock, finer
/// than a jiffy.
pub(crate) fn now_us() -> u64 {
    // SAFETY: `ktime_get_ns` reads the monotonic clock; no preconditions, any context.
    unsafe { b::rrxe_ktime_get_ns() / 1000 }
}

/// `us` microseconds in jiffies, rounded up, at least 1, saturating at the largest delay the
/// kernel accepts (`MAX_JIFFY_OFFSET`).
pub(crate) fn usecs_to_jiffies(us: u64) -> u64 {
    let j = match u32::try_from(us) {
        // SAFETY: `usecs_to_jiffies` is a pure conversion (it rounds up).
        Ok(us) => unsafe { b::rrxe_usecs_to_jiffies(us) as u64 },
        Err(_) => {
            let ms = u32::try_from(us.div_ceil(1000)).unwrap_or(u32::MAX);
            // SAFETY: `msecs_to_jiffies` is a pure conversion (it rounds up and saturates at
            // MAX_JIFFY_OFFSET).
            unsafe { b::rrxe_msecs_to_jiffies(ms) as u64 }
        }
    };
    j.max(1)
}

/// Whether jiffy `t` is at or after jiffy `deadline` (`time_after_eq`, wrap-safe).
pub(crate) fn reached(t: u64, deadline: u64) -> bool {
    t.wrapping_sub(deadline) as i64 >= 0
}
