//! Thin wrappers over libibverbs/libc calls whose preconditions can be stated locally.

use core::ffi::{c_int, CStr};

use super::private::{ibv_read_ibdev_sysfs_file, verbs_sysfs_dev};

/// Reads the sysfs attribute `<ibdev_path>/<attr>` of a uverbs device into `buf` and returns
/// the bytes read (one trailing newline stripped by libibverbs), or `None` if it cannot be read
/// or does not fit into `buf` with its terminating NUL.
///
/// # Safety
/// `sysfs_dev` must be null or point to a valid `verbs_sysfs_dev` (its `ibdev_path` is read).
pub unsafe fn read_ibdev_attr<'a>(
    sysfs_dev: *mut verbs_sysfs_dev,
    attr: &CStr,
    buf: &'a mut [u8],
) -> Option<&'a [u8]> {
    if sysfs_dev.is_null() || buf.is_empty() {
        return None;
    }
    // SAFETY: `buf` is writable for `buf.len()` bytes; the format "%s" consumes exactly one
    // `const char *` variadic argument, which `attr` provides NUL-terminated; `sysfs_dev` is
    // valid per this function's contract and is only read.
    let n = unsafe {
        ibv_read_ibdev_sysfs_file(
            buf.as_mut_ptr().cast(),
            buf.len(),
            sysfs_dev,
            c"%s".as_ptr(),
            attr.as_ptr(),
        )
    };
    let n = usize::try_from(n).ok()?;
    buf.get(..n)
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns a pointer to the calling thread's errno, which is
    // always valid for writes.
    unsafe { *libc::__errno_location() = e };
}

/// Reads the calling thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: as in `set_errno`, the pointer is valid for reads.
    unsafe { *libc::__errno_location() }
}
