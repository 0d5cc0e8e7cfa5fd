//! Thin wrappers over libibverbs/libc calls whose preconditions can be stated locally.

use core::ffi::{c_int, CStr};
use core::mem::{align_of, size_of};
use core::ptr::NonNull;

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

/// Types whose all-zero bit pattern is a valid value, so that [`CBox::new_zeroed`] may
/// hand out a `calloc`ed one. The provider's verbs objects (C structs of integers, raw
/// pointers, `Option<fn>`s, pthread objects and unions of those) qualify.
///
/// # Safety
/// All-zero bytes must be a valid `T`, and `T` must have no drop glue that matters (the
/// memory is released with `free`, without running `Drop` for `T`).
pub unsafe trait ZeroInit {}

/// A zeroed `T` allocated with libc `calloc` and released with `free` when dropped, unless
/// ownership is handed to C with [`CBox::into_raw`] (and later reclaimed with
/// [`CBox::from_raw`]). Every verbs object is held in one while it is being created, so each
/// failure path frees it, and is reclaimed into one once the kernel has destroyed it.
pub struct CBox<T: ZeroInit>(NonNull<T>);

impl<T: ZeroInit> CBox<T> {
    /// `calloc(1, sizeof(T))`; `None` when out of memory.
    pub fn new_zeroed() -> Option<Self> {
        // glibc's malloc alignment on x86_64 (2 * sizeof(size_t)); every verbs object is 8.
        const { assert!(align_of::<T>() <= 16 && size_of::<T>() > 0) };
        // SAFETY: a plain allocation; the result is checked for null below.
        let p = unsafe { libc::calloc(1, size_of::<T>()) }.cast::<T>();
        NonNull::new(p).map(Self)
    }

    /// The object's address (it stays valid until `self` is dropped).
    pub fn as_ptr(&self) -> *mut T {
        self.0.as_ptr()
    }

    /// Hands ownership to C: the memory is no longer freed on drop.
    pub fn into_raw(self) -> *mut T {
        let p = self.0.as_ptr();
        core::mem::forget(self);
        p
    }

    /// Takes back an object released with [`CBox::into_raw`]; it is freed when the result is
    /// dropped. Null gives `None`.
    ///
    /// # Safety
    /// `p` must be null or come from `CBox::<T>::into_raw`, and nothing may use it afterwards.
    pub unsafe fn from_raw(p: *mut T) -> Option<Self> {
        NonNull::new(p).map(Self)
    }
}

impl<T: ZeroInit> Drop for CBox<T> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `calloc` (new_zeroed) and is owned by `self` alone.
        unsafe { libc::free(self.0.as_ptr().cast()) };
    }
}

/// The send doorbell as one legacy `write()` of a prebuilt `POST_SEND` command with no WRs
/// (`wr_count == sge_count == 0`, `wqe_size = sizeof(struct ib_uverbs_send_wr)`), as
/// rdma_rxe's and siw's providers ring theirs. libibverbs' `ibv_cmd_post_send` sends the same
/// command through `ioctl(INVOKE_WRITE)` on kernels that have it, where uverbs first parses
/// and copies the ioctl's attributes. `Err(errno)`: the kernel refused it (the QP's own
/// error), or, with `EACCES`, uverbs refuses write() to this process (a file opened with other
/// credentials, `ib_safe_file_access()`); the ioctl path has no such rule.
pub fn post_send_doorbell(cmd_fd: c_int, qp_handle: u32) -> Result<(), c_int> {
    use super::cmd::ibv_post_send;
    use super::sys::{
        ib_uverbs_cmd_hdr, ib_uverbs_post_send, ib_uverbs_post_send_resp, ib_uverbs_send_wr,
        IB_USER_VERBS_CMD_POST_SEND,
    };
    let mut resp = ib_uverbs_post_send_resp::default();
    let cmd = ibv_post_send {
        hdr: ib_uverbs_cmd_hdr {
            command: IB_USER_VERBS_CMD_POST_SEND,
            in_words: (size_of::<ibv_post_send>() / 4) as u16,
            out_words: (size_of::<ib_uverbs_post_send_resp>() / 4) as u16,
        },
        core_payload: ib_uverbs_post_send {
            response: core::ptr::addr_of_mut!(resp) as u64,
            qp_handle,
            wr_count: 0,
            sge_count: 0,
            wqe_size: size_of::<ib_uverbs_send_wr>() as u32,
            ..Default::default()
        },
    };
    // SAFETY: `cmd` is readable for its size; the kernel writes at most `out_words * 4` bytes
    // to `response`, which points at `resp`, alive and writable until this call returns.
    let n = unsafe {
        libc::write(
            cmd_fd,
            core::ptr::addr_of!(cmd).cast(),
            size_of::<ibv_post_send>(),
        )
    };
    if n == size_of::<ibv_post_send>() as isize {
        Ok(())
    } else if n < 0 {
        Err(cmd_errno(errno()))
    } else {
        Err(libc::EIO)
    }
}

/// The errno for a failed `ibv_cmd_*` call (`ret`: documented to be a positive errno; anything
/// else is reported as `EIO` rather than as "success").
pub fn cmd_errno(ret: c_int) -> c_int {
    if ret > 0 {
        ret
    } else {
        libc::EIO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Obj {
        a: u64,
        p: *mut u8,
        f: Option<extern "C" fn()>,
    }
    // SAFETY: integers, a raw pointer and an `Option<fn>`: all-zero is valid; no Drop.
    unsafe impl ZeroInit for Obj {}

    #[test]
    fn cbox_is_zeroed_and_round_trips() {
        let b = CBox::<Obj>::new_zeroed().expect("calloc");
        let p = b.as_ptr();
        assert_eq!(p as usize % align_of::<Obj>(), 0);
        // SAFETY: `p` is a live, zeroed `Obj` owned by `b`.
        unsafe {
            assert_eq!((*p).a, 0);
            assert!((*p).p.is_null() && (*p).f.is_none());
            (*p).a = 7;
        }
        let raw = b.into_raw();
        assert_eq!(raw, p);
        // SAFETY: `raw` came from `into_raw` and is not used after this.
        let back = unsafe { CBox::from_raw(raw) }.expect("non-null");
        // SAFETY: still live, owned by `back`.
        assert_eq!(unsafe { (*back.as_ptr()).a }, 7);
        drop(back);
        // SAFETY: null is allowed.
        assert!(unsafe { CBox::<Obj>::from_raw(core::ptr::null_mut()) }.is_none());
    }

    #[test]
    fn cmd_errno_never_reports_success() {
        assert_eq!(cmd_errno(libc::EOPNOTSUPP), libc::EOPNOTSUPP);
        assert_eq!(cmd_errno(libc::EINVAL), libc::EINVAL);
        assert_eq!(cmd_errno(0), libc::EIO);
        assert_eq!(cmd_errno(-1), libc::EIO);
    }
}
