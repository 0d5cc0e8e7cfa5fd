//! Device matching and the provider's device object (trampolines called by libibverbs).

use core::ffi::CStr;
use core::mem::{offset_of, size_of};
use core::ptr;

use crate::abi::{read_ibdev_attr, verbs_device, verbs_sysfs_dev};
use crate::log::trace;
use crate::util::c_chars_to_string;
use rrxe_uapi::SYSFS_UABI_ATTR;

/// [`SYSFS_UABI_ATTR`] as a C string (checked equal below).
pub const UABI_ATTR: &CStr = c"rrxe_uabi";

const _: () = {
    let a = UABI_ATTR.to_bytes();
    let b = SYSFS_UABI_ATTR.as_bytes();
    assert!(a.len() == b.len());
    let mut i = 0;
    while i < a.len() {
        assert!(
            a[i] == b[i],
            "UABI_ATTR differs from rrxe_uapi::SYSFS_UABI_ATTR"
        );
        i += 1;
    }
};

/// The provider's device: libibverbs' `verbs_device` first, then rrxe's own fields.
/// Allocated with `calloc` in [`alloc_device`], freed with `free` in [`uninit_device`].
#[repr(C)]
pub struct RrxeDevice {
    pub vdev: verbs_device,
    /// The kernel's `uverbs_abi_ver` for this device.
    pub abi_ver: u32,
}

// libibverbs treats the `verbs_device *` (and the `ibv_device *` inside it) as the object.
const _: () = assert!(offset_of!(RrxeDevice, vdev) == 0);
const _: () = assert!(offset_of!(verbs_device, device) == 0);

/// Whether a device is an rrxe device, given whether its `rrxe_uabi` attribute could be
/// read. The version is deliberately not checked here: an rrxe device with another uABI is
/// still claimed, so that opening it reports the mismatch instead of libibverbs' "no
/// userspace device-specific driver found".
pub fn is_rrxe_device(uabi_attr: Option<&[u8]>) -> bool {
    uabi_attr.is_some()
}

/// `verbs_device_ops::match_device`.
///
/// # Safety
/// Called by libibverbs only, with a valid `verbs_sysfs_dev` (or null).
pub unsafe extern "C" fn match_device(sysfs_dev: *mut verbs_sysfs_dev) -> bool {
    // SAFETY: libibverbs passes a valid `verbs_sysfs_dev` (null is handled), not mutated
    // while this shared reference is used.
    let Some(dev) = (unsafe { sysfs_dev.as_ref() }) else {
        return false;
    };
    let (name, driver_id, abi_ver) = (
        c_chars_to_string(&dev.ibdev_name),
        dev.driver_id,
        dev.abi_ver,
    );
    let mut buf = [0u8; 64];
    // SAFETY: `sysfs_dev` is valid (see above).
    let attr = unsafe { read_ibdev_attr(sysfs_dev, UABI_ATTR, &mut buf) };
    let ours = is_rrxe_device(attr);
    trace!(
        "match_device({name}, driver_id={driver_id}, abi_ver={abi_ver}): {}",
        match attr {
            Some(v) => format!("{UABI_ATTR:?}={:?} -> MATCH", String::from_utf8_lossy(v)),
            None => format!("no {UABI_ATTR:?} attribute -> not ours"),
        }
    );
    ours
}

/// `verbs_device_ops::alloc_device`.
///
/// # Safety
/// Called by libibverbs only, with a valid `verbs_sysfs_dev` (or null).
pub unsafe extern "C" fn alloc_device(sysfs_dev: *mut verbs_sysfs_dev) -> *mut verbs_device {
    // SAFETY: libibverbs passes a valid `verbs_sysfs_dev` (null is handled).
    let abi_ver = unsafe { sysfs_dev.as_ref() }.map_or(0, |d| d.abi_ver);
    // SAFETY: plain allocation; the result is checked for null.
    let dev = unsafe { libc::calloc(1, size_of::<RrxeDevice>()) }.cast::<RrxeDevice>();
    if dev.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: `dev` is a fresh, suitably aligned, zeroed allocation of an `RrxeDevice`, which
    // consists only of integers, arrays and raw pointers, so all-zero is a valid value.
    unsafe { (*dev).abi_ver = abi_ver };
    trace!("alloc_device(abi_ver={abi_ver}) = {dev:p}");
    dev.cast()
}

/// `verbs_device_ops::uninit_device`: called when the last reference is dropped.
///
/// # Safety
/// Called by libibverbs only, once, with a device made by [`alloc_device`].
pub unsafe extern "C" fn uninit_device(vdev: *mut verbs_device) {
    trace!("uninit_device({vdev:p})");
    // SAFETY: `vdev` is the `RrxeDevice` allocated by `alloc_device` with `calloc` (the
    // `verbs_device` is at offset 0) and libibverbs no longer uses it.
    unsafe { libc::free(vdev.cast()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_only_devices_with_the_attribute() {
        assert!(is_rrxe_device(Some(b"1")));
        assert!(is_rrxe_device(Some(b"2"))); // another uABI: claimed, refused at open
        assert!(is_rrxe_device(Some(b""))); // unreadable value: claimed, refused at open
        assert!(!is_rrxe_device(None));
    }
}
