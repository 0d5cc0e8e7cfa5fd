// SPDX-License-Identifier: GPL-2.0-only
//! The device's sysfs attribute group (`ops.device_group`): `rrxe_uabi`.
//!
//! `/sys/class/infiniband/<ibdev>/rrxe_uabi` holds the uABI version. Its presence is how the
//! provider recognises an rrxe device whatever the administrator named it (the driver id is
//! `RDMA_DRIVER_UNKNOWN`, which userspace cannot match on).

use super::bindings as b;
use crate::uapi;
use core::{cell::UnsafeCell, ptr};

/// Static C data that the kernel may write to: kept out of `.rodata`.
#[repr(transparent)]
struct CStatic<T>(UnsafeCell<T>);

// SAFETY: the wrapped objects are handed to sysfs, which serialises its own accesses; Rust code
// never reads or writes them after construction.
unsafe impl<T> Sync for CStatic<T> {}

const fn uabi_attr() -> b::device_attribute {
    // SAFETY: an all-zero `device_attribute` is valid (null name/callbacks, zero lockdep key).
    let mut a: b::device_attribute = unsafe { core::mem::zeroed() };
    a.attr.name = c"rrxe_uabi".as_ptr().cast();
    a.attr.mode = 0o444;
    a.show = Some(show_uabi);
    a
}

static UABI_ATTR: CStatic<b::device_attribute> = CStatic(UnsafeCell::new(uabi_attr()));

static ATTRS: CStatic<[*mut b::attribute; 2]> = CStatic(UnsafeCell::new([
    // SAFETY: `UABI_ATTR` is a static, so a pointer to its `attr` field is valid forever; the
    // projection does not read the value.
    unsafe { ptr::addr_of_mut!((*UABI_ATTR.0.get()).attr) },
    ptr::null_mut(),
]));

const fn group() -> b::attribute_group {
    // SAFETY: an all-zero `attribute_group` is valid (no name, no callbacks, no attributes).
    let mut g: b::attribute_group = unsafe { core::mem::zeroed() };
    g.attrs = ATTRS.0.get().cast();
    g
}

static GROUP: CStatic<b::attribute_group> = CStatic(UnsafeCell::new(group()));

/// The attribute group for `ib_device_ops.device_group`.
pub(crate) fn device_group() -> *const b::attribute_group {
    GROUP.0.get()
}

/// # Safety
///
/// Called by sysfs with `buf` a `PAGE_SIZE` buffer.
unsafe extern "C" fn show_uabi(
    _dev: *mut b::device,
    _attr: *mut b::device_attribute,
    buf: *mut u8,
) -> isize {
    // SAFETY: `buf` is the sysfs page buffer (the helper's format prints one `unsigned int`).
    unsafe { b::rrxe_sysfs_emit_uint(buf.cast(), uapi::UABI_VERSION) as isize }
}
