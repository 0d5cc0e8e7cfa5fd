// SPDX-License-Identifier: GPL-2.0-only
//! On-demand-paging user memory (`struct ib_umem_odp`) with CPU access for the software
//! transport.
//!
//! [`OdpUmem::get`] registers the user range with ib_core's ODP machinery (an
//! `mmu_interval_notifier` over the range, nothing pinned). Pages become present only when
//! [`OdpUmem::fault`] faults them in through `ib_umem_odp_map_dma_and_lock` (HMM), which sleeps:
//! process context only. The data path reads and writes present pages in any context
//! (softirq included); an access that touches a page that is not present fails with `EAGAIN`
//! and changes nothing, so that the caller can defer the fault to process context and retry.
//!
//! When the kernel unmaps, migrates or reclaims pages of the range (munmap,
//! `madvise(MADV_DONTNEED)`, swap, fork's copy-on-write protection), the notifier's invalidate
//! callback runs first: under the umem's `umem_mutex` it marks the pages absent (under this
//! type's spinlock, which the data path holds through each access) and unmaps them in ib_core.
//! Once the callback has returned, no access to the old pages is in flight and none can start.
//!
//! Offsets in this API are relative to the user start address given to [`OdpUmem::get`].

use super::bh::with_bh_disabled;
use super::bindings as b;
use super::device::{Device, IbDriver};
use core::{ffi::c_void, ptr, sync::atomic::AtomicU64, sync::atomic::Ordering};
use kernel::{
    alloc::KVVec,
    new_spinlock,
    page::{PAGE_SHIFT, PAGE_SIZE},
    prelude::*,
    sync::SpinLock,
};

/// The pages of the range that the data path may touch: `present[i]` is the address of the
/// `struct page` behind the `i`-th page from `ib_umem_start`, or 0 when that page is not
/// present.
#[pin_data]
struct OdpPages {
    #[pin]
    present: SpinLock<KVVec<usize>>,
}

/// An ODP umem, released on drop.
///
/// # Invariants
///
/// `raw` is a valid ODP umem from `ib_umem_odp_get` that this value owns, created with
/// [`INVALIDATE_OPS`]; its `private` field is null or points to `*pages`, which outlives the
/// notifier (released first, in `drop`). `pages.present` has one entry per `PAGE_SIZE` page
/// from `start` to the umem's end. A non-zero entry is a page that HMM reported valid under a
/// notifier sequence that no invalidation has ended since: the page stays allocated and
/// mapped in the process until the invalidate callback has set the entry back to 0 (under the
/// spinlock). `start + page_off` is the user start address; `page_off + len` does not pass
/// the umem's end.
pub(crate) struct OdpUmem {
    raw: *mut b::ib_umem_odp,
    pages: Pin<KBox<OdpPages>>,
    /// `ib_umem_start`: the range's first byte, aligned down to the umem's page size.
    start: usize,
    /// Offset of the user start address from `start`.
    page_off: usize,
    /// Bytes registered from the user start address.
    len: usize,
    /// Pages are faulted in for writing (the MR has a write right): a read-only mapping of a
    /// shared page (the zero page, copy-on-write) is never made present for a writable MR.
    writable: bool,
}

// SAFETY: the umem may be released from any thread; the page entries are plain identities of
// pages, usable from any CPU under the spinlock.
unsafe impl Send for OdpUmem {}
// SAFETY: `&self` methods only read the umem's fixed fields, take the umem's own mutex
// (`fault`) or the spinlock over the page entries; the user memory itself is shared with user
// space and only accessed through copies and atomics.
unsafe impl Sync for OdpUmem {}

/// The notifier operations of every rrxe ODP umem.
static INVALIDATE_OPS: b::mmu_interval_notifier_ops = b::mmu_interval_notifier_ops {
    invalidate: Some(invalidate),
};

/// `mmu_interval_notifier_ops.invalidate`: the kernel is about to change the mapping of
/// `range`; pages of the umem within it become absent before this returns.
///
/// # Safety
///
/// Called by the mmu-notifier core for a notifier inserted by `ib_umem_odp_get` with
/// [`INVALIDATE_OPS`], so `mni` is the `notifier` field of a live `ib_umem_odp`.
unsafe extern "C" fn invalidate(
    mni: *mut b::mmu_interval_notifier,
    range: *const b::mmu_notifier_range,
    cur_seq: usize,
) -> bool {
    // SAFETY: by the function's contract `mni` is embedded in a live ODP umem.
    let odp = unsafe { b::rrxe_odp_from_notifier(mni) };
    // SAFETY: `range` is the live range the core passes to this call.
    if !unsafe { b::rrxe_mmu_notifier_range_blockable(range) } {
        // Taking `umem_mutex` may sleep; the core retries the invalidation where it may.
        return false;
    }
    // SAFETY: `odp` is live (see above); its mutex is initialised by `ib_umem_odp_get`, and
    // this context may sleep (checked above).
    unsafe { b::rrxe_odp_mutex_lock(odp) };
    // SAFETY: the notifier's sequence is set under `umem_mutex`, the lock that
    // `ib_umem_odp_map_dma_and_lock` checks `mmu_interval_read_retry` under.
    unsafe { b::rrxe_mmu_interval_set_seq(mni, cur_seq) };
    // SAFETY: `odp` and `range` are live; these read fixed fields.
    let (ustart, uend, rstart, rend) = unsafe {
        (
            b::rrxe_ib_umem_odp_start(odp),
            b::rrxe_ib_umem_odp_end(odp),
            b::rrxe_mmu_notifier_range_start(range),
            b::rrxe_mmu_notifier_range_end(range),
        )
    };
    let s = rstart.max(ustart);
    let e = rend.min(uend);
    if s < e {
        // SAFETY: `private` is written only under `umem_mutex`, which we hold; when not null
        // it points to the owner's `OdpPages`, which lives until the notifier is removed
        // (the type invariant of `OdpUmem`), and removal waits for this callback.
        let pages = unsafe { (*odp).private }.cast::<OdpPages>().cast_const();
        if !pages.is_null() {
            // SAFETY: see above; only a shared reference is formed.
            let pages = unsafe { &*pages };
            let first = (s - ustart) >> PAGE_SHIFT;
            let end = (e - ustart).div_ceil(PAGE_SIZE);
            with_bh_disabled(|| {
                let mut p = pages.present.lock();
                let end = end.min(p.len());
                for slot in p.iter_mut().take(end).skip(first) {
                    *slot = 0;
                }
            });
        }
        // SAFETY: `umem_mutex` is held as the function requires; `[s, e)` lies within the
        // umem.
        unsafe { b::rrxe_ib_umem_odp_unmap_dma_pages(odp, s as u64, e as u64) };
    }
    // SAFETY: taken above on this path.
    unsafe { b::rrxe_odp_mutex_unlock(odp) };
    true
}

impl OdpUmem {
    /// Registers `len` bytes at user address `addr` for `access` (`IB_ACCESS_*`, including
    /// `IB_ACCESS_ON_DEMAND`) with nothing present yet. Process context only (it sleeps).
    pub(crate) fn get<T: IbDriver>(
        dev: &Device<T>,
        addr: u64,
        len: u64,
        access: i32,
        writable: bool,
    ) -> Result<Self> {
        let len = usize::try_from(len).map_err(|_| EINVAL)?;
        let addr_us = usize::try_from(addr).map_err(|_| EINVAL)?;
        // SAFETY: the device is alive; `ib_umem_odp_get` validates the user range itself and
        // keeps a pointer to `INVALIDATE_OPS`, which is static.
        let raw = unsafe {
            b::rrxe_ib_umem_odp_get(dev.as_raw(), addr as _, len as _, access, &INVALIDATE_OPS)
        };
        let e = raw as isize;
        if (-4095..0).contains(&e) {
            return Err(Error::from_errno(e as i32));
        }
        if raw.is_null() {
            return Err(ENOMEM);
        }
        /// Releases the umem on the error paths below.
        struct Guard(*mut b::ib_umem_odp);
        impl Drop for Guard {
            fn drop(&mut self) {
                // SAFETY: the umem is ours and its `private` is still null: nothing else
                // refers to it.
                unsafe { b::rrxe_ib_umem_odp_release(self.0) };
            }
        }
        let guard = Guard(raw);
        // SAFETY: `raw` is a valid ODP umem; these read fixed fields.
        let (start, end) =
            unsafe { (b::rrxe_ib_umem_odp_start(raw), b::rrxe_ib_umem_odp_end(raw)) };
        if addr_us < start || addr_us.checked_add(len).map_or(true, |x| x > end) {
            return Err(EINVAL);
        }
        let npages = (end - start) >> PAGE_SHIFT;
        let mut present = KVVec::with_capacity(npages, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..npages {
            present.push(0usize, GFP_KERNEL_ACCOUNT)?;
        }
        let pages = KBox::pin_init(
            pin_init!(OdpPages {
                present <- new_spinlock!(present, "rrxe:odp_pages"),
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        core::mem::forget(guard);
        let pp: *const OdpPages = &*pages;
        // SAFETY: `raw` is live; `private` is written under `umem_mutex`, as the invalidate
        // callback reads it. `pages` is pinned and, held by the value returned, outlives the
        // notifier (released first in `drop`).
        unsafe {
            b::rrxe_odp_mutex_lock(raw);
            (*raw).private = pp.cast_mut().cast::<c_void>();
            b::rrxe_odp_mutex_unlock(raw);
        }
        // INVARIANT: `raw` is owned with `private` pointing to `pages`; every entry is 0 (no
        // page present); `[addr, addr + len)` lies within `[start, end)`.
        Ok(OdpUmem {
            raw,
            pages,
            start,
            page_off: addr_us - start,
            len,
            writable,
        })
    }

    /// Bytes registered.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Checks that `[off, off + len)` lies within the registration; returns it as page
    /// indices from `start` (first, one past the last) and the byte offset from `start`.
    fn span(&self, off: u64, len: usize) -> Result<(usize, usize, usize)> {
        let off = usize::try_from(off).map_err(|_| EFAULT)?;
        match off.checked_add(len) {
            Some(end) if end <= self.len && len > 0 => {
                let abs = self.page_off + off;
                Ok((abs >> PAGE_SHIFT, (abs + len).div_ceil(PAGE_SIZE), abs))
            }
            _ => Err(EFAULT),
        }
    }

    /// Faults `[off, off + len)` in and makes its pages present (for writing if the
    /// registration is writable). Process context only: it sleeps. `EFAULT` if the range
    /// leaves the registration or the process's mapping does not allow the access.
    pub(crate) fn fault(&self, off: u64, len: u64) -> Result {
        self.map(off, len, true)
    }

    /// Makes present the pages of `[off, off + len)` that the process has mapped now (with
    /// write permission if the registration is writable), faulting none in (a prefetch
    /// without page faults). Process context only: it sleeps.
    pub(crate) fn map_present(&self, off: u64, len: u64) -> Result {
        self.map(off, len, false)
    }

    /// [`Self::fault`] (`fault`) or [`Self::map_present`].
    fn map(&self, off: u64, len: u64, fault: bool) -> Result {
        if len == 0 {
            return Ok(());
        }
        let len = usize::try_from(len).map_err(|_| EFAULT)?;
        let (first, end, abs) = self.span(off, len)?;
        // SAFETY: no preconditions.
        let mask = unsafe { b::rrxe_odp_access_mask(self.writable) };
        // SAFETY: `raw` is a live ODP umem (type invariant); the range lies within it; this
        // sleeps, which the documented contract of this method allows. On success the umem's
        // `umem_mutex` is held on return.
        let r = unsafe {
            b::rrxe_ib_umem_odp_map_dma_and_lock(
                self.raw,
                (self.start + abs) as u64,
                len as u64,
                mask,
                fault,
            )
        };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        with_bh_disabled(|| {
            let mut p = self.pages.present.lock();
            let end = end.min(p.len());
            for (i, slot) in p.iter_mut().enumerate().take(end).skip(first) {
                // SAFETY: `umem_mutex` is held, so the pfns just faulted in are current (no
                // invalidation can run until it is released), and `i` is within the pfn list
                // (one entry per page of the umem). A page HMM did not report valid (and
                // writable, for a writable registration) stays absent.
                *slot = unsafe { b::rrxe_odp_page(self.raw, i as _, self.writable) } as usize;
            }
        });
        // SAFETY: held since `ib_umem_odp_map_dma_and_lock` returned success.
        unsafe { b::rrxe_odp_mutex_unlock(self.raw) };
        Ok(())
    }

    /// Whether every page of `[off, off + len)` is present now (the answer may change as soon
    /// as this returns). `EFAULT` if the range leaves the registration.
    pub(crate) fn present(&self, off: u64, len: u64) -> Result<bool> {
        if len == 0 {
            return Ok(true);
        }
        let len = usize::try_from(len).map_err(|_| EFAULT)?;
        let (first, end, _) = self.span(off, len)?;
        Ok(with_bh_disabled(|| {
            let p = self.pages.present.lock();
            p.iter().take(end).skip(first).all(|&x| x != 0)
        }))
    }

    /// Runs `f(page_address, offset_in_page, buf_offset, chunk_len)` for each page-sized chunk
    /// of `[off, off + len)` under the spinlock, if every page is present; `EAGAIN` (and `f`
    /// never called) if one is not, `EFAULT` if the range leaves the registration. Any
    /// context.
    fn with_pages(
        &self,
        off: u64,
        len: usize,
        mut f: impl FnMut(*mut u8, usize, usize, usize),
    ) -> Result {
        if len == 0 {
            return Ok(());
        }
        let (first, end, abs) = self.span(off, len)?;
        with_bh_disabled(|| {
            let p = self.pages.present.lock();
            if end > p.len() || p.iter().take(end).skip(first).any(|&x| x == 0) {
                return Err(EAGAIN);
            }
            let mut done = 0;
            while done < len {
                let at = abs + done;
                let in_page = at & (PAGE_SIZE - 1);
                let n = (PAGE_SIZE - in_page).min(len - done);
                let page = p[at >> PAGE_SHIFT] as *mut b::page;
                // SAFETY: by the type invariant a non-zero entry is a page that stays allocated
                // while the spinlock is held (the invalidate callback clears it under the lock
                // before the kernel lets it go); `kmap_local_page` works in any context and is
                // released below, in LIFO order, on this CPU.
                let va = unsafe { b::rrxe_kmap_local_page(page) }.cast::<u8>();
                f(va, in_page, done, n);
                // SAFETY: the mapping taken above, the last one taken on this path.
                unsafe { b::rrxe_kunmap_local(va.cast()) };
                done += n;
            }
            Ok(())
        })
    }

    /// Copies `dst.len()` bytes at `off` into `dst`. `EAGAIN` if a page is not present (nothing
    /// copied), `EFAULT` if the range leaves the registration. Any context.
    pub(crate) fn read(&self, off: u64, dst: &mut [u8]) -> Result {
        let len = dst.len();
        self.with_pages(off, len, |p, in_page, at, n| {
            // SAFETY: `p` maps a whole page and `in_page + n <= PAGE_SIZE`; `dst[at..at + n]`
            // is in bounds (the chunks cover exactly `dst.len()` bytes); a kernel buffer cannot
            // overlap a kmap of a user page.
            unsafe { ptr::copy_nonoverlapping(p.add(in_page), dst.as_mut_ptr().add(at), n) }
        })
    }

    /// Copies `src` to `off`. Errors as for [`OdpUmem::read`]. Any context.
    pub(crate) fn write(&self, off: u64, src: &[u8]) -> Result {
        if !self.writable {
            return Err(EFAULT);
        }
        self.with_pages(off, src.len(), |p, in_page, at, n| {
            // SAFETY: as in `read`, with source and destination swapped; the page was faulted
            // in for writing (`writable`).
            unsafe { ptr::copy_nonoverlapping(src.as_ptr().add(at), p.add(in_page), n) }
        })
    }

    /// Runs `f` on the 8-byte word at `off` as an `AtomicU64`. `EINVAL` unless it is 8-byte
    /// aligned in memory; otherwise errors as for [`OdpUmem::read`].
    fn with_u64(&self, off: u64, f: impl FnOnce(&AtomicU64) -> u64) -> Result<u64> {
        if !self.writable {
            return Err(EFAULT);
        }
        let abs = self
            .page_off
            .checked_add(usize::try_from(off).map_err(|_| EFAULT)?)
            .ok_or(EFAULT)?;
        if abs % 8 != 0 {
            return Err(EINVAL);
        }
        let mut f = Some(f);
        let mut out = 0;
        self.with_pages(off, 8, |p, in_page, _, _| {
            // SAFETY: the word is 8-byte aligned, so it lies within the mapped page and is
            // suitably aligned for `AtomicU64`; kernel accesses to it are atomics or byte
            // copies, and user space sees a plain aligned u64.
            let word = unsafe { AtomicU64::from_ptr(p.add(in_page).cast::<u64>()) };
            if let Some(f) = f.take() {
                out = f(word);
            }
        })?;
        Ok(out)
    }

    /// Atomic compare-and-swap of the native-endian u64 at `off`; returns the original value.
    pub(crate) fn atomic_cas(&self, off: u64, compare: u64, swap: u64) -> Result<u64> {
        self.with_u64(off, |w| {
            match w.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        })
    }

    /// Atomic fetch-and-add (wrapping) of the native-endian u64 at `off`; returns the original
    /// value.
    pub(crate) fn atomic_fadd(&self, off: u64, add: u64) -> Result<u64> {
        self.with_u64(off, |w| w.fetch_add(add, Ordering::SeqCst))
    }

    /// ATOMIC WRITE of the native-endian u64 at `off`; returns the value it replaced.
    pub(crate) fn atomic_store(&self, off: u64, value: u64) -> Result<u64> {
        self.with_u64(off, |w| w.swap(value, Ordering::SeqCst))
    }
}

/// Whether the kernel has ODP umems (`CONFIG_INFINIBAND_ON_DEMAND_PAGING`).
pub(crate) fn enabled() -> bool {
    // SAFETY: no preconditions.
    unsafe { b::rrxe_odp_enabled() }
}

impl Drop for OdpUmem {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we own the umem. `ib_umem_odp_release` removes the
        // notifier (waiting for a running invalidation) before it frees the umem, so `pages`,
        // dropped after this, is not referred to any more.
        unsafe { b::rrxe_ib_umem_odp_release(self.raw) };
    }
}
