// SPDX-License-Identifier: GPL-2.0-only
//! rrxe's pure core: decisions with no kernel dependency.
//!
//! Everything under `logic/` is `core`-only, allocation-free and `unsafe`-free. The kernel crate
//! compiles it as `mod logic`; the host crate `tests/host` compiles the very same files and tests
//! them with cargo (unit, table and property tests). Nothing here calls back into the kernel.

// The layering rule, enforced: `unsafe` lives in `ib/` only (scripts/check-safety checks the
// SAFETY comments there).
#![forbid(unsafe_code)]

pub mod dcqcn;
pub mod errno;
pub mod guid;
pub mod icrc;
pub mod idalloc;
pub mod iphdr;
pub mod kv;
pub mod limits;
pub mod link;
pub mod mcast;
pub mod mr;
pub mod mw;
pub mod opcode;
pub mod port;
pub mod roce;
pub mod segment;
pub mod stats;
pub mod transport;

pub mod psn;
pub mod qp_attr;
pub mod qp_state;
pub mod wire;
