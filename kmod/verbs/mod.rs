// SPDX-License-Identifier: GPL-2.0-only
//! The driver's verbs: safe Rust on top of `datapath/` and `ib/`, asking `logic/` for every
//! decision. Each object's verbs create its data-path half, publish it and tear it down.

// The layering rule, enforced: `unsafe` lives in `ib/` only (scripts/check-safety checks the
// SAFETY comments there).
#![forbid(unsafe_code)]

mod ah;
mod av;
mod cq;
mod device;
mod driver;
mod link;
mod mr;
mod mw;
mod pd;
mod qp;
mod srq;

pub(crate) use device::Rrxe;
pub(crate) use link::Links;

use crate::ib::errno;
