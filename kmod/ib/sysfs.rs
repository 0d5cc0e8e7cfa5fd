// SPDX-License-Identifier: GPL-2.0-only
//! The device's sysfs attribute group (`ops.device_group`): `rrxe_uabi`, `dcqcn` and
//! `udp_counters`.
//!
//! `/sys/class/infiniband/<ibdev>/rrxe_uabi` holds the uABI version. Its presence is how the
//! provider recognises an rrxe device whatever the administrator named it (the driver id is
//! `RDMA_DRIVER_UNKNOWN`, which userspace cannot match on).
//!
//! `/sys/class/infiniband/<ibdev>/dcqcn` (root-writable) shows the device's congestion-control
//! settings, one `name value` line each, and takes one such line per write
//! ([`IbDriver::dcqcn_show`], [`IbDriver::dcqcn_store`]).
//!
//! `/sys/class/infiniband/<ibdev>/udp_counters` shows the module's RoCEv2 socket counters, for
//! every device and namespace together: datagrams received and sent, and those dropped before
//! any device saw them (closing socket, short, long, not IP, bad ICRC) or refused by the IP
//! output path.

use super::bindings as b;
use super::device::{Device, IbDriver};
use crate::uapi;
use core::{
    cell::UnsafeCell,
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};

/// Static C data that the kernel may write to: kept out of `.rodata`.
#[repr(transparent)]
struct CStatic<T>(UnsafeCell<T>);

// SAFETY: the wrapped objects are handed to sysfs, which serialises its own accesses; Rust code
// never reads or writes them after construction.
unsafe impl<T> Sync for CStatic<T> {}

const fn attr(
    name: &'static core::ffi::CStr,
    mode: u16,
    show: unsafe extern "C" fn(*mut b::device, *mut b::device_attribute, *mut u8) -> isize,
    store: Option<
        unsafe extern "C" fn(*mut b::device, *mut b::device_attribute, *const u8, usize) -> isize,
    >,
) -> b::device_attribute {
    // SAFETY: an all-zero `device_attribute` is valid (null name/callbacks, zero lockdep key).
    let mut a: b::device_attribute = unsafe { core::mem::zeroed() };
    a.attr.name = name.as_ptr().cast();
    a.attr.mode = mode;
    a.show = Some(show);
    a.store = store;
    a
}

static UABI_ATTR: CStatic<b::device_attribute> =
    CStatic(UnsafeCell::new(attr(c"rrxe_uabi", 0o444, show_uabi, None)));
static DCQCN_ATTR: CStatic<b::device_attribute> = CStatic(UnsafeCell::new(attr(
    c"dcqcn",
    0o644,
    show_dcqcn,
    Some(store_dcqcn),
)));

static UDP_ATTR: CStatic<b::device_attribute> = CStatic(UnsafeCell::new(attr(
    c"udp_counters",
    0o444,
    show_udp,
    None,
)));

static ATTRS: CStatic<[*mut b::attribute; 4]> = CStatic(UnsafeCell::new([
    // SAFETY: the attributes are statics, so pointers to their `attr` fields are valid
    // forever; the projections do not read the values.
    unsafe { ptr::addr_of_mut!((*UABI_ATTR.0.get()).attr) },
    // SAFETY: as above.
    unsafe { ptr::addr_of_mut!((*DCQCN_ATTR.0.get()).attr) },
    // SAFETY: as above.
    unsafe { ptr::addr_of_mut!((*UDP_ATTR.0.get()).attr) },
    ptr::null_mut(),
]));

const fn group() -> b::attribute_group {
    // SAFETY: an all-zero `attribute_group` is valid (no name, no callbacks, no attributes).
    let mut g: b::attribute_group = unsafe { core::mem::zeroed() };
    g.attrs = ATTRS.0.get().cast();
    g
}

static GROUP: CStatic<b::attribute_group> = CStatic(UnsafeCell::new(group()));

/// The driver's `dcqcn` handlers, monomorphised for the one driver type this module registers
/// (the attribute tables are statics, which cannot be generic).
type ShowFn = unsafe fn(*mut b::ib_device, &mut [u8]) -> usize;
type StoreFn = unsafe fn(*mut b::ib_device, &[u8]) -> isize;
static SHOW: AtomicPtr<()> = AtomicPtr::new(ptr::null_mut());
static STORE: AtomicPtr<()> = AtomicPtr::new(ptr::null_mut());

/// # Safety
///
/// `ibdev` must be a registered device of driver `T` that stays registered during the call.
unsafe fn show_for<T: IbDriver>(ibdev: *mut b::ib_device, out: &mut [u8]) -> usize {
    // SAFETY: the caller's contract is `from_raw`'s.
    let dev = unsafe { Device::<T>::from_raw(ibdev) };
    T::dcqcn_show(dev, out)
}

/// # Safety
///
/// As [`show_for`].
unsafe fn store_for<T: IbDriver>(ibdev: *mut b::ib_device, input: &[u8]) -> isize {
    // SAFETY: the caller's contract is `from_raw`'s.
    let dev = unsafe { Device::<T>::from_raw(ibdev) };
    match T::dcqcn_store(dev, input) {
        Ok(()) => input.len() as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// The attribute group for `ib_device_ops.device_group`, with driver `T`'s handlers.
pub(crate) fn device_group<T: IbDriver>() -> *const b::attribute_group {
    SHOW.store(show_for::<T> as ShowFn as *mut (), Ordering::Release);
    STORE.store(store_for::<T> as StoreFn as *mut (), Ordering::Release);
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

/// # Safety
///
/// Called by sysfs with `buf` a `PAGE_SIZE` buffer.
unsafe extern "C" fn show_udp(
    _dev: *mut b::device,
    _attr: *mut b::device_attribute,
    buf: *mut u8,
) -> isize {
    // SAFETY: sysfs passes the page buffer of `PAGE_SIZE` bytes, ours to fill for this call.
    let out = unsafe { core::slice::from_raw_parts_mut(buf, kernel::page::PAGE_SIZE) };
    crate::logic::kv::write_lines(out, super::udp::counters()) as isize
}

/// # Safety
///
/// Called by sysfs for an attribute of a registered ib_device's group, with `buf` a
/// `PAGE_SIZE` buffer.
unsafe extern "C" fn show_dcqcn(
    dev: *mut b::device,
    _attr: *mut b::device_attribute,
    buf: *mut u8,
) -> isize {
    let f = SHOW.load(Ordering::Acquire);
    if f.is_null() {
        return 0;
    }
    // SAFETY: `SHOW` only ever holds a `ShowFn` (stored by `device_group`, before the group
    // can exist).
    let f: ShowFn = unsafe { core::mem::transmute::<*mut (), ShowFn>(f) };
    // SAFETY: sysfs passes the page buffer of `PAGE_SIZE` bytes, ours to fill for this call.
    let out = unsafe { core::slice::from_raw_parts_mut(buf, kernel::page::PAGE_SIZE) };
    // SAFETY: `dev` is the `struct device` of the ib_device whose group this is; sysfs removes
    // the group (and waits for its callbacks) before the device is unregistered, so the
    // device stays registered for the call.
    unsafe { f(b::rrxe_device_to_ibdev(dev), out) as isize }
}

/// # Safety
///
/// Called by sysfs for an attribute of a registered ib_device's group, with `buf` holding
/// `count` bytes.
unsafe extern "C" fn store_dcqcn(
    dev: *mut b::device,
    _attr: *mut b::device_attribute,
    buf: *const u8,
    count: usize,
) -> isize {
    let f = STORE.load(Ordering::Acquire);
    if f.is_null() {
        return kernel::error::code::EINVAL.to_errno() as isize;
    }
    // SAFETY: `STORE` only ever holds a `StoreFn` (stored by `device_group`).
    let f: StoreFn = unsafe { core::mem::transmute::<*mut (), StoreFn>(f) };
    // SAFETY: sysfs passes `count` readable bytes (at most a page).
    let input = unsafe { core::slice::from_raw_parts(buf, count) };
    // SAFETY: as in `show_dcqcn`: the device stays registered for the call.
    unsafe { f(b::rrxe_device_to_ibdev(dev), input) }
}
