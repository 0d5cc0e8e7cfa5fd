// SPDX-License-Identifier: GPL-2.0-only
//! Device-wide data-path counters, as `rdma statistic show link DEV/1` shows them (the names
//! and order are `logic::stats`'s).
//!
//! The data path adds to them from any context (relaxed atomics: each counter is exact, a
//! snapshot is not a consistent cut across counters, as for rxe's `stats_counters`). The block
//! is shared through an `Arc`, so the data path's own structures can hold it.

use crate::logic::stats::{Stat, COUNT};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{prelude::*, sync::Arc};

/// One counter per [`Stat`].
pub(crate) struct DevStats([AtomicU64; COUNT]);

impl DevStats {
    /// All zero, shareable.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            DevStats([const { AtomicU64::new(0) }; COUNT]),
            GFP_KERNEL,
        )?)
    }

    /// Adds `n` to counter `s` (any context).
    pub(crate) fn add(&self, s: Stat, n: u64) {
        self.0[s.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// Takes `n` from gauge `s` (any context; never below what was added).
    pub(crate) fn sub(&self, s: Stat, n: u64) {
        self.0[s.index()].fetch_sub(n, Ordering::Relaxed);
    }

    /// Every counter's current value, in [`Stat`] index order.
    pub(crate) fn snapshot(&self) -> [u64; COUNT] {
        let mut v = [0u64; COUNT];
        for (out, c) in v.iter_mut().zip(self.0.iter()) {
            *out = c.load(Ordering::Relaxed);
        }
        v
    }
}
