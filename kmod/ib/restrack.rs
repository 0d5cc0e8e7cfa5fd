// SPDX-License-Identifier: GPL-2.0-only
//! Driver details in `rdma resource show qp|cq|mr -dd`: ib_core's netlink dump calls
//! `fill_res_*_entry`, and the driver's name/value pairs go into one `RDMA_NLDEV_ATTR_DRIVER`
//! table of the entry.

use super::bindings as b;
use super::device::{dev, CqObj, IbDriver, MrObj, QpObj};
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
unsafe fn with_table(msg: *mut b::sk_buff, fill: impl FnOnce(&mut ResTable) -> Result) -> i32 {
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

/// Installs the `fill_res_*_entry` ops.
pub(super) fn fill_ops<T: IbDriver>(ops: &mut b::ib_device_ops) {
    ops.fill_res_qp_entry = Some(fill_qp::<T>);
    ops.fill_res_cq_entry = Some(fill_cq::<T>);
    ops.fill_res_mr_entry = Some(fill_mr::<T>);
}

/// # Safety
///
/// ib_core passes the message it fills and a live QP of ours.
unsafe extern "C" fn fill_qp<T: IbDriver>(msg: *mut b::sk_buff, qp: *mut b::ib_qp) -> i32 {
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*qp).device), QpObj::<T>::data(qp)) };
    // SAFETY: per the contract above.
    unsafe { with_table(msg, |t| T::res_qp(d, data, t)) }
}

/// # Safety
///
/// ib_core passes the message it fills and a live CQ of ours.
unsafe extern "C" fn fill_cq<T: IbDriver>(msg: *mut b::sk_buff, cq: *mut b::ib_cq) -> i32 {
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*cq).device), CqObj::<T>::data(cq)) };
    // SAFETY: per the contract above.
    unsafe { with_table(msg, |t| T::res_cq(d, data, t)) }
}

/// # Safety
///
/// ib_core passes the message it fills and a live MR of ours.
unsafe extern "C" fn fill_mr<T: IbDriver>(msg: *mut b::sk_buff, mr: *mut b::ib_mr) -> i32 {
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*mr).device), MrObj::<T>::data(mr)) };
    // SAFETY: per the contract above.
    unsafe { with_table(msg, |t| T::res_mr(d, data, t)) }
}
