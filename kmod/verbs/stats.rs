// SPDX-License-Identifier: GPL-2.0-only
//! Device-wide data-path counters: one atomic per [`Stat`], added to from any context (the
//! engine through `Env::stat`, the shell for what only it sees) and read as a snapshot.

use crate::logic::stats::{Stat, COUNT};
use core::sync::atomic::{AtomicU64, Ordering};

/// The counters of one device, indexed by [`Stat::index`].
pub(crate) struct DevStats([AtomicU64; COUNT]);

impl DevStats {
    /// All counters at zero.
    pub(crate) fn new() -> Self {
        DevStats([const { AtomicU64::new(0) }; COUNT])
    }

    /// Adds `n` to `s` (relaxed: counters order nothing).
    pub(crate) fn add(&self, s: Stat, n: u64) {
        self.0[s.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// The current values, in index order.
    pub(crate) fn snapshot(&self) -> [u64; COUNT] {
        let mut v = [0u64; COUNT];
        for (o, c) in v.iter_mut().zip(self.0.iter()) {
            *o = c.load(Ordering::Relaxed);
        }
        v
    }
}
