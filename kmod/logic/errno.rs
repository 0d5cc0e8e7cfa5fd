// SPDX-License-Identifier: GPL-2.0-only
//! The errnos `logic` decides on, as positive numbers (Linux's values, the same on every
//! architecture the kernel builds rrxe for). The kernel shell turns one into an `Error` in one
//! place (`ib::errno`).

/// `EEXIST`.
pub const EEXIST: i32 = 17;
/// `EINVAL`.
pub const EINVAL: i32 = 22;
/// `ENOMEM`.
pub const ENOMEM: i32 = 12;
/// `EPROTONOSUPPORT`.
pub const EPROTONOSUPPORT: i32 = 93;
/// `EOPNOTSUPP`.
pub const EOPNOTSUPP: i32 = 95;
