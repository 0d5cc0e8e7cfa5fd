// SPDX-License-Identifier: GPL-2.0-only
//! The driver: safe Rust on top of `ib/`, asking `logic/` for every decision.

mod device;
mod link;

pub(crate) use device::Rrxe;
pub(crate) use link::Links;
