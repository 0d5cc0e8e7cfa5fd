// SPDX-License-Identifier: GPL-2.0-only
//! The driver: safe Rust on top of `ib/`, asking `logic/` for every decision.

// The layering rule, enforced: `unsafe` lives in `ib/` only (scripts/check-safety checks the
// SAFETY comments there).
#![forbid(unsafe_code)]

mod ah;
mod av;
mod cq;
mod device;
pub(crate) mod dp;
mod link;
mod mcast;
mod mr;
mod mw;
mod pd;
mod qp;
mod srq;
pub(crate) mod stats;

pub(crate) use device::Rrxe;
pub(crate) use link::Links;

use kernel::prelude::*;

/// Converts a `logic` errno (positive) into an [`Error`].
fn errno(e: i32) -> Error {
    Error::from_errno(-e)
}
