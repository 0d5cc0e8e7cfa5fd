// SPDX-License-Identifier: GPL-2.0-only
//! The driver: safe Rust on top of `ib/`, asking `logic/` for every decision.

// The layering rule, enforced: `unsafe` lives in `ib/` only (scripts/check-safety checks the
// SAFETY comments there).
#![forbid(unsafe_code)]

mod ah;
mod av;
mod cq;
mod device;
mod driver;
mod fabric;
mod link;
mod loopback;
mod mcast;
mod mr;
mod mw;
mod pd;
mod qp;
mod rx;
mod srq;
pub(crate) mod stats;
mod table;
mod wq;

pub(crate) use device::Rrxe;
pub(crate) use link::Links;

use crate::ib::errno;
