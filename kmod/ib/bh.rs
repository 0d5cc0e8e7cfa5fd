// SPDX-License-Identifier: GPL-2.0-only
//! Bottom halves and RCU: the execution-context rules of the transport shell.
//!
//! The data path runs in two contexts: softirq (UDP receive, [`super::timer::Timer`] callbacks)
//! and process context (verbs calls, work items). State shared between them is protected by
//! `kernel::sync::SpinLock`, and the rule is: **process context takes such a lock only inside
//! [`with_bh_disabled`]**. Softirq code already runs with bottom halves disabled. That way a
//! softirq can never interrupt a lock holder on the same CPU, and lockdep sees every acquisition
//! of a lock class in a BH-safe state (no `SOFTIRQ-safe -> SOFTIRQ-unsafe` reports). A separate
//! `BhSpinLock<T>` type is not needed for that: the closure scopes the lock guard by
//! construction.
//!
//! Kernel verbs consumers may call in with hard interrupts disabled (ib_cm creates and
//! destroys AHs and posts MADs under `spin_lock_irqsave`). No softirq can run on the CPU then,
//! so [`with_bh_disabled`] runs its closure as is (`local_bh_enable` would warn with IRQs
//! off). Code that transmits must not run there (the stack's transmit path enables bottom
//! halves): callers that may be in such a context check [`irqs_disabled`] and defer. Nesting
//! is allowed.

use super::bindings as b;

/// Runs `f` with bottom halves (softirqs) disabled on this CPU (`local_bh_disable` /
/// `local_bh_enable`), and returns its result. Pending softirqs run when it returns.
///
/// Callable from process context and from softirq context (where it only nests the count).
/// `f` must not sleep.
pub(crate) fn with_bh_disabled<R>(f: impl FnOnce() -> R) -> R {
    if irqs_disabled() {
        // Softirqs cannot run on this CPU until IRQs are enabled again.
        return f();
    }
    /// Re-enables bottom halves when dropped, so a panic unwinding through `f` (the kernel does
    /// not unwind, but the pairing is kept structural anyway) cannot leave them disabled.
    struct Enable;
    impl Drop for Enable {
        fn drop(&mut self) {
            // SAFETY: paired with the `local_bh_disable` below on the same CPU: bottom halves
            // stay disabled, so the task cannot migrate in between.
            unsafe { b::rrxe_local_bh_enable() };
        }
    }
    // SAFETY: `local_bh_disable` may be called in any context except with hard IRQs disabled
    // (documented precondition); it is re-enabled by `Enable` exactly once.
    unsafe { b::rrxe_local_bh_disable() };
    let _enable = Enable;
    f()
}

/// Whether hard interrupts are disabled on this CPU (a caller under `spin_lock_irqsave`, or
/// hard IRQ context).
pub(crate) fn irqs_disabled() -> bool {
    // SAFETY: reads this CPU's interrupt flag; no preconditions.
    unsafe { b::rrxe_irqs_disabled() }
}

/// Waits until every RCU read-side critical section that began before the call has ended
/// (`synchronize_rcu`). Softirq handlers and BH-disabled regions count as such sections, so
/// after it returns, no UDP receive callback or timer callback that could have seen an object
/// unpublished before the call is still running. Process context only (it sleeps).
pub(crate) fn synchronize_rcu() {
    // SAFETY: `synchronize_rcu` has no preconditions beyond being allowed to sleep, which the
    // documented contract of this function requires of the caller.
    unsafe { b::synchronize_rcu() };
}

/// Gives the CPU to another task if one is waiting (`cond_resched`). Process context only,
/// with bottom halves enabled and no spinlock held (it may sleep).
pub(crate) fn cond_resched() {
    // SAFETY: `cond_resched` may sleep; the documented contract of this function requires a
    // context that may (process context, no spinlock, bottom halves enabled).
    unsafe { b::rrxe_cond_resched() };
}

/// Whether the current task has a fatal signal pending (`fatal_signal_pending(current)`): a
/// long loop in a system call should stop and return.
pub(crate) fn fatal_signal_pending() -> bool {
    // SAFETY: reads the current task's signal state; valid in any context (`current` always
    // exists; in softirq it is the interrupted task, which only makes the answer meaningless).
    unsafe { b::rrxe_fatal_signal_pending() }
}
