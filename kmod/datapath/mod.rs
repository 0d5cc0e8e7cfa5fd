// SPDX-License-Identifier: GPL-2.0-only
//! The data path: what runs in any context (the UDP receive softirq, loopback deliveries,
//! doorbells, timers and work items) on a device's state, below the verbs that create and
//! destroy it.
//!
//! The fabric ([`fabric::Fabric`]) is a device's data-path state: the object tables, the
//! loopback buffer pool, the RoCEv2 socket and the multicast groups. Each object has its
//! data-path half here (`CqInner`, `SrqInner`, `MrInner`, `MwInner`, `AhInner`, `QpInner`); its
//! verbs half in `verbs/` creates it, publishes it in the fabric and tears it down. Nothing here
//! names the verbs layer or the driver type.

// `unsafe` lives in `ib/` only, as for `verbs/`.
#![forbid(unsafe_code)]

pub(crate) mod cq;
pub(crate) mod fabric;
mod loopback;
mod mcast;
pub(crate) mod mr;
pub(crate) mod mw;
pub(crate) mod path;
pub(crate) mod qp;
mod rx;
pub(crate) mod srq;
pub(crate) mod stats;
mod table;
mod wq;
