// SPDX-License-Identifier: GPL-2.0-only
//! Pinned user memory (`struct ib_umem`) with CPU access for the software transport.
//!
//! [`Umem::get`] pins the user range through ib_core and records the pinned pages in an array,
//! so that the data path can copy to and from the memory and run atomics on it in any context
//! (process or softirq) through short-lived `kmap_local_page` mappings. Offsets in this API are
//! relative to the user start address given to [`Umem::get`].

use super::bindings as b;
use super::device::{Device, IbDriver};
use core::{ptr, sync::atomic::AtomicU64, sync::atomic::Ordering};
use kernel::{
    alloc::KVVec,
    page::{PAGE_SHIFT, PAGE_SIZE},
    prelude::*,
};

/// Pinned user memory, released on drop.
///
/// # Invariants
///
/// `raw` is a valid umem from `ib_umem_get` that this value owns. `pages[i]` is the `i`-th
/// pinned page of the range, counting from the page holding the start address, and stays
/// pinned (so valid) while `raw` is. `pages.len() * PAGE_SIZE >= page_off + len`.
pub(crate) struct Umem {
    raw: *mut b::ib_umem,
    pages: PageArray,
    /// Offset of the start address within its page (`ib_umem_offset`).
    page_off: usize,
    /// Bytes pinned from the start address.
    len: usize,
}

// SAFETY: a umem may be released from any thread; the page pointers are plain identities of
// pinned pages, usable from any CPU.
unsafe impl Send for Umem {}
// SAFETY: no `&self` method mutates the umem or the page array; the memory they reach is shared
// with user space anyway and only accessed through copies and atomics.
unsafe impl Sync for Umem {}

/// Registrations of up to this many pages record them in the [`Umem`] itself: no allocation
/// (and none to free) for the common small MR.
const INLINE_PAGES: usize = 2;

/// The pinned pages of a [`Umem`]: inline for small ranges, else an array.
enum PageArray {
    Inline([*mut b::page; INLINE_PAGES], usize),
    Heap(KVVec<*mut b::page>),
}

impl PageArray {
    /// An empty array with room for `n` pages.
    fn with_capacity(n: usize) -> Result<Self> {
        Ok(if n <= INLINE_PAGES {
            PageArray::Inline([ptr::null_mut(); INLINE_PAGES], 0)
        } else {
            PageArray::Heap(KVVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?)
        })
    }

    fn len(&self) -> usize {
        match self {
            PageArray::Inline(_, n) => *n,
            PageArray::Heap(v) => v.len(),
        }
    }

    fn push(&mut self, p: *mut b::page) -> Result {
        match self {
            PageArray::Inline(a, n) => {
                *a.get_mut(*n).ok_or(ENOMEM)? = p;
                *n += 1;
                Ok(())
            }
            PageArray::Heap(v) => Ok(v.push(p, GFP_KERNEL_ACCOUNT)?),
        }
    }
}

impl core::ops::Index<usize> for PageArray {
    type Output = *mut b::page;

    fn index(&self, i: usize) -> &*mut b::page {
        match self {
            PageArray::Inline(a, n) => &a[..*n][i],
            PageArray::Heap(v) => &v[i],
        }
    }
}

impl Umem {
    /// Pins `len` bytes at user address `addr` for `access` (`IB_ACCESS_*`) and builds the page
    /// array. Process context only (it sleeps).
    pub(crate) fn get<T: IbDriver>(
        dev: &Device<T>,
        addr: u64,
        len: u64,
        access: i32,
    ) -> Result<Self> {
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        // SAFETY: the device is alive; `ib_umem_get` validates the user range itself.
        let raw = unsafe { b::rrxe_ib_umem_get(dev.as_raw(), addr as _, len as _, access) };
        let e = raw as isize;
        if (-4095..0).contains(&e) {
            return Err(Error::from_errno(e as i32));
        }
        if raw.is_null() {
            return Err(ENOMEM);
        }
        // Own the umem first, so that every error below releases it. `pages` is empty until
        // the walk succeeds, and no method runs before that.
        let mut umem = Umem {
            raw,
            pages: PageArray::Inline([ptr::null_mut(); INLINE_PAGES], 0),
            page_off: 0,
            len: 0,
        };
        // SAFETY: `raw` is a valid umem we own; `address` and `length` are set by
        // `ib_umem_get`.
        let (address, length) = unsafe { ((*raw).address, (*raw).length) };
        let page_off = address & (PAGE_SIZE - 1);
        let npages = (page_off + length).div_ceil(PAGE_SIZE);
        let mut pages = PageArray::with_capacity(npages)?;
        // SAFETY: `raw` is a valid umem; `sgt_append.sgt` is its CPU scatter table with
        // `orig_nents` entries chained through `sg_next`.
        let (mut sg, nents) =
            unsafe { ((*raw).sgt_append.sgt.sgl, (*raw).sgt_append.sgt.orig_nents) };
        for _ in 0..nents {
            if sg.is_null() || pages.len() >= npages {
                break;
            }
            // SAFETY: `sg` is a live entry of the umem's table (non-null, within `orig_nents`).
            let (offset, bytes, first) = unsafe {
                (
                    (*sg).offset as usize,
                    (*sg).length as usize,
                    b::rrxe_sg_page(sg),
                )
            };
            // ib_umem_get builds whole-page entries; anything else cannot be mapped to the flat
            // page array below.
            if offset != 0 || bytes % PAGE_SIZE != 0 || first.is_null() {
                return Err(EINVAL);
            }
            for i in 0..bytes / PAGE_SIZE {
                if pages.len() >= npages {
                    break;
                }
                // SAFETY: the entry covers `bytes / PAGE_SIZE` physically contiguous pages from
                // `first`, so the `i`-th exists.
                let page = unsafe { b::rrxe_nth_page(first, i as _) };
                pages.push(page)?;
            }
            // SAFETY: `sg` is a live entry; `sg_next` follows chain links and returns NULL after
            // the last entry.
            sg = unsafe { b::sg_next(sg) };
        }
        if pages.len() < npages {
            return Err(EFAULT);
        }
        // INVARIANT: `pages` holds the `npages` pinned pages from the start page, which cover
        // `page_off + length` bytes.
        umem.pages = pages;
        umem.page_off = page_off;
        umem.len = length;
        Ok(umem)
    }

    /// Bytes pinned.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Checks that `[off, off + len)` lies within the umem; returns `off` as `usize`.
    fn check(&self, off: u64, len: usize) -> Result<usize> {
        let off = usize::try_from(off).map_err(|_| EFAULT)?;
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(off),
            _ => Err(EFAULT),
        }
    }

    /// Maps page `idx` with `kmap_local_page`, calls `f` with its address, unmaps it.
    fn with_page<R>(&self, idx: usize, f: impl FnOnce(*mut u8) -> R) -> R {
        let page = self.pages[idx];
        // SAFETY: by the type invariant `page` is pinned while `self` lives; `kmap_local_page`
        // works in any context and its mapping is released below, in LIFO order, on this CPU
        // (`f` cannot leave the scope with another mapping open: it only receives a pointer).
        let addr = unsafe { b::rrxe_kmap_local_page(page) }.cast::<u8>();
        let r = f(addr);
        // SAFETY: `addr` is the mapping taken above, and the last one taken on this path.
        unsafe { b::rrxe_kunmap_local(addr.cast()) };
        r
    }

    /// Calls `f(page_index, offset_in_page, buf_offset, chunk_len)` for each page-sized chunk
    /// of `[off, off + len)`, which the caller has bounds-checked.
    fn chunks(&self, off: usize, len: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
        let mut done = 0;
        while done < len {
            let abs = self.page_off + off + done;
            let in_page = abs & (PAGE_SIZE - 1);
            let n = (PAGE_SIZE - in_page).min(len - done);
            f(abs >> PAGE_SHIFT, in_page, done, n);
            done += n;
        }
    }

    /// Copies `dst.len()` bytes at `off` into `dst`. `EFAULT` if the range leaves the umem.
    /// Any context.
    pub(crate) fn read(&self, off: u64, dst: &mut [u8]) -> Result {
        let off = self.check(off, dst.len())?;
        self.chunks(off, dst.len(), |idx, in_page, at, n| {
            self.with_page(idx, |p| {
                // SAFETY: `p` maps a whole page and `in_page + n <= PAGE_SIZE`; `dst[at..at + n]`
                // is in bounds (`chunks` covers exactly `dst.len()` bytes); a kernel buffer
                // cannot overlap a kmap of a user page.
                unsafe { ptr::copy_nonoverlapping(p.add(in_page), dst.as_mut_ptr().add(at), n) }
            })
        });
        Ok(())
    }

    /// Copies `src` to `off`. `EFAULT` if the range leaves the umem. Any context.
    pub(crate) fn write(&self, off: u64, src: &[u8]) -> Result {
        let off = self.check(off, src.len())?;
        self.chunks(off, src.len(), |idx, in_page, at, n| {
            self.with_page(idx, |p| {
                // SAFETY: as in `read`, with source and destination swapped.
                unsafe { ptr::copy_nonoverlapping(src.as_ptr().add(at), p.add(in_page), n) }
            })
        });
        Ok(())
    }

    /// Runs `f` on the 8-byte word at `off` as an `AtomicU64`. `EINVAL` unless the word is
    /// 8-byte aligned in memory (for a start address that is 8-byte aligned: `off % 8 == 0`),
    /// `EFAULT` if it leaves the umem.
    fn with_u64<R>(&self, off: u64, f: impl FnOnce(&AtomicU64) -> R) -> Result<R> {
        let off = self.check(off, 8)?;
        let abs = self.page_off + off;
        if abs % 8 != 0 {
            return Err(EINVAL);
        }
        Ok(self.with_page(abs >> PAGE_SHIFT, |p| {
            // SAFETY: `abs` is 8-byte aligned, so the word lies within the mapped page and is
            // suitably aligned for `AtomicU64`; all other accesses to it from the kernel go
            // through atomics or byte copies, and user space sees a plain aligned u64 (CPU
            // atomics there interoperate with these).
            let word = unsafe { AtomicU64::from_ptr(p.add(abs & (PAGE_SIZE - 1)).cast::<u64>()) };
            f(word)
        }))
    }

    /// Atomic compare-and-swap of the native-endian u64 at `off`: stores `swap` if the value
    /// equals `compare`. Returns the original value. Errors as for [`Umem::atomic_fadd`].
    /// Any context.
    pub(crate) fn atomic_cas(&self, off: u64, compare: u64, swap: u64) -> Result<u64> {
        self.with_u64(off, |w| {
            match w.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        })
    }

    /// ATOMIC WRITE: stores the native-endian u64 at `off` in one access, ordered after every
    /// earlier store (release); returns the value it replaced. Errors as for
    /// [`Umem::atomic_fadd`]. Any context.
    pub(crate) fn atomic_store(&self, off: u64, value: u64) -> Result<u64> {
        self.with_u64(off, |w| w.swap(value, Ordering::SeqCst))
    }

    /// Atomic fetch-and-add (wrapping) of the native-endian u64 at `off`. Returns the original
    /// value. `EINVAL` if the word is not 8-byte aligned in memory, `EFAULT` if it leaves the
    /// umem. Any context.
    pub(crate) fn atomic_fadd(&self, off: u64, add: u64) -> Result<u64> {
        self.with_u64(off, |w| w.fetch_add(add, Ordering::SeqCst))
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we own the umem; the page array is not used after this.
        unsafe { b::rrxe_ib_umem_release(self.raw) };
    }
}
