// SPDX-License-Identifier: GPL-2.0-only
//! Driver details in `rdma resource show qp|cq|mr -dd`: ib_core's netlink dump calls
//! `fill_res_*_entry`, and the driver's name/value pairs go into one `RDMA_NLDEV_ATTR_DRIVER`
//! table of the entry. The callbacks themselves are with the other trampolines
//! ([`super::ops`]); this file is the table they fill.

use super::bindings as b;
use kernel::{prelude::*, str::CStr};

/// `EMSGSIZE` (the message is full), which `kernel::error::code` lacks in 6.12.
fn emsgsize() -> Error {
    Error::from_errno(-(b::EMSGSIZE as i32))
}

/// The driver table of one resource entry being filled.
pub(crate) struct ResTable {
    msg: *mut b::sk_buff,
}

impl ResTable {
    fn check(r: i32) -> Result {
        if r == 0 {
            Ok(())
        } else {
            Err(emsgsize())
        }
    }

    /// A decimal `u32`.
    pub(crate) fn u32(&mut self, name: &CStr, v: u32) -> Result {
        // SAFETY: `msg` is the message ib_core is filling (type invariant of the trampolines
        // below); `name` is NUL-terminated and only read.
        Self::check(unsafe { b::rdma_nl_put_driver_u32(self.msg, name.as_char_ptr(), v) })
    }

    /// A hexadecimal `u32` (PSNs, keys).
    pub(crate) fn hex(&mut self, name: &CStr, v: u32) -> Result {
        // SAFETY: as in `u32`.
        Self::check(unsafe { b::rdma_nl_put_driver_u32_hex(self.msg, name.as_char_ptr(), v) })
    }

    /// A decimal `u64`.
    pub(crate) fn u64(&mut self, name: &CStr, v: u64) -> Result {
        // SAFETY: as in `u32`.
        Self::check(unsafe { b::rdma_nl_put_driver_u64(self.msg, name.as_char_ptr(), v) })
    }

    /// A string.
    pub(crate) fn str(&mut self, name: &CStr, v: &CStr) -> Result {
        // SAFETY: as in `u32`; `v` is NUL-terminated and only read.
        Self::check(unsafe {
            b::rdma_nl_put_driver_string(self.msg, name.as_char_ptr(), v.as_char_ptr())
        })
    }
}

/// Opens the entry's driver table, lets `fill` write it, and closes it (or removes it when
/// `fill` fails, leaving the message as it was).
///
/// # Safety
///
/// `msg` is the netlink message ib_core is filling for this entry.
pub(super) unsafe fn with_table(
    msg: *mut b::sk_buff,
    fill: impl FnOnce(&mut ResTable) -> Result,
) -> i32 {
    // SAFETY: per the contract above.
    let nest = unsafe { b::rrxe_res_table_start(msg) };
    if nest.is_null() {
        return emsgsize().to_errno();
    }
    let mut t = ResTable { msg };
    match fill(&mut t) {
        Ok(()) => {
            // SAFETY: `nest` was opened on `msg` above and is closed once.
            unsafe { b::rrxe_res_table_end(msg, nest) };
            0
        }
        Err(e) => {
            // SAFETY: as above; cancelling trims the message back to before the table.
            unsafe { b::rrxe_res_table_cancel(msg, nest) };
            e.to_errno()
        }
    }
}
