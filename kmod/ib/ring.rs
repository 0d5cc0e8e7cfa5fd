// SPDX-License-Identifier: GPL-2.0-only
//! Queue memory shared with user space: zeroed pages, charged to the caller's memory cgroup
//! (`GFP_KERNEL_ACCOUNT`, as `vmalloc_user` is not), published through an
//! `rdma_user_mmap_entry`, so the provider maps them with `mmap(cmd_fd, key)`. A ring of up to
//! [`BLOCK_MAX`] bytes (every ring of a default-sized QP or CQ) is one physically contiguous
//! block in the linear map: one page allocation, no page array, no vmap area to set up and
//! tear down (under a debug kernel those cost several tracked allocations and a TLB purge per
//! ring). Larger rings, or a small one when no contiguous block is free, are order-0 pages
//! mapped into one virtually contiguous `VM_USERMAP` area. (6.12 has no exported accounted
//! `vmalloc_user`; net/xdp uses the unexported `__vmalloc_node_range` for the same purpose.)
//!
//! Life cycle: [`SharedRing::new`] allocates and inserts the entry; dropping the ring (when its
//! CQ/QP is destroyed) removes the entry, so no new mapping can be made; ib_core calls
//! `ops.mmap_free` when the entry's last reference is dropped, and the area is freed there.
//! ib_core does not track mappings made with `remap_vmalloc_range` or `vm_insert_page` (only
//! `rdma_user_mmap_io` ones), so that can happen while a process still has the ring mapped: the
//! mapping then keeps the pages themselves alive (`vm_insert_page` took a reference on each,
//! for both kinds of area), and they are freed with the last mapping. A process that keeps a mapping after destroying the object therefore
//! keeps valid (if useless) pages.
//!
//! The memory is writable by user space at any time: the kernel reads indices with acquire
//! loads and copies slots out with volatile reads before using them.

use super::bindings as b;
use super::udata::Udata;
use core::{
    ptr::{self, NonNull},
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{prelude::*, types::Opaque};

/// The unit of [`SharedRing::read`] and [`SharedRing::write`] on aligned offsets.
const WORD: usize = 8;

/// Rings up to this size are one contiguous block ([`Area`]): order 3, the largest order the
/// page allocator treats as cheap (`PAGE_ALLOC_COSTLY_ORDER`).
pub(crate) const BLOCK_MAX: usize = 8 * kernel::page::PAGE_SIZE;

/// Zeroed, page-aligned ring memory of `bytes` bytes (a multiple of the page size). Dropping it
/// drops its references to its pages: they are freed unless user mappings still hold them. Its
/// owners drop it only when nothing in the kernel uses the memory any more (a [`SharedRing`]'s
/// kernel area with the ring; a user ring's in `mmap_free`, when ib_core is done with the entry
/// and the ring is gone).
///
/// # Invariants
///
/// `mem` is an area of `bytes` bytes from `rrxe_alloc_ring_block` (when `block`) or from
/// [`alloc_user_mappable`], owned by this value.
struct Area {
    mem: *mut u8,
    bytes: usize,
    block: bool,
}

impl Drop for Area {
    fn drop(&mut self) {
        if self.block {
            // SAFETY: by the invariant a block of `bytes` bytes, ours; its owners drop it only
            // when nothing uses it (see the type's documentation).
            unsafe { b::rrxe_free_ring_block(self.mem.cast(), self.bytes) };
        } else {
            // SAFETY: by the invariant a vmap area, ours; unused, as above.
            unsafe { b::vfree(self.mem.cast()) };
        }
    }
}

impl Area {
    /// Allocates `bytes` (a multiple of the page size, not 0) of zeroed memory charged to the
    /// current memory cgroup. Process context.
    fn alloc(bytes: usize) -> Result<Self> {
        if bytes <= BLOCK_MAX {
            // SAFETY: allocating has no preconditions; NULL means no block was free.
            let mem = unsafe { b::rrxe_alloc_ring_block(bytes, b::GFP_KERNEL_ACCOUNT) };
            if !mem.is_null() {
                // INVARIANT: a block of `bytes` bytes, ours.
                return Ok(Area {
                    mem: mem.cast(),
                    bytes,
                    block: true,
                });
            }
        }
        let mem = alloc_user_mappable(bytes / kernel::page::PAGE_SIZE)?;
        // INVARIANT: a vmap area of `bytes` bytes, ours.
        Ok(Area {
            mem,
            bytes,
            block: false,
        })
    }

    /// Maps the area into `vma` from its start.
    ///
    /// # Safety
    ///
    /// `vma` is a VMA being set up by `mmap` (its lock held for writing) no larger than the
    /// area, and the area lives until this returns.
    unsafe fn map(&self, vma: *mut b::vm_area_struct) -> Result {
        let r = if self.block {
            // SAFETY: per the contract; the helper checks the size itself.
            unsafe { b::rrxe_map_ring_block(vma, self.mem.cast(), self.bytes) }
        } else {
            // SAFETY: per the contract; `remap_vmalloc_range` checks the size itself.
            unsafe { b::remap_vmalloc_range(vma, self.mem.cast(), 0) }
        };
        kernel::error::to_result(r)
    }
}

/// The ib_core entry with our memory behind it.
#[repr(C)]
struct Mapping {
    entry: Opaque<b::rdma_user_mmap_entry>,
    area: Area,
}

/// Where a ring's memory lives.
enum Backing {
    /// Shared with a user context through an mmap entry.
    User(NonNull<Mapping>),
    /// A kernel consumer's queue: the same layout, never mapped to user space.
    Kernel(Area),
}

/// A ring shared with one user context, or the same ring format for a kernel consumer (kernel
/// QPs, CQs and SRQs use the data path's ring code unchanged).
///
/// # Invariants
///
/// - `Backing::User(map)`: `map` points to a live `Mapping` whose entry is inserted in a
///   ucontext; the entry is removed exactly once, in `drop`, and the area freed with it.
/// - `Backing::Kernel(area)`: an area owned by this ring alone and freed exactly once, in
///   `drop`.
pub(crate) struct SharedRing {
    backing: Backing,
    key: u64,
}

// SAFETY: the mapping is plain memory plus an ib_core entry that may be removed from any thread.
unsafe impl Send for SharedRing {}
// SAFETY: shared access only reads/writes the ring through atomics and volatile copies.
unsafe impl Sync for SharedRing {}

/// `pages` zeroed pages charged to the current memory cgroup, mapped contiguously in a
/// `VM_USERMAP` area (so `remap_vmalloc_range` accepts it). `vfree` frees the area, the page
/// array and the pages (`VM_MAP_PUT_PAGES`). Process context.
fn alloc_user_mappable(pages: usize) -> Result<*mut u8> {
    let count = u32::try_from(pages).map_err(|_| ENOMEM)?;
    // `vfree` frees the array with `kvfree`: a `KVVec` buffer is `kvmalloc` memory.
    let mut array = KVVec::<*mut b::page>::with_capacity(pages, GFP_KERNEL_ACCOUNT)?;
    let free_all = |array: &KVVec<*mut b::page>| {
        for &p in array.iter() {
            // SAFETY: each page came from `rrxe_alloc_page` and is referenced nowhere else.
            unsafe { b::rrxe_free_page(p) };
        }
    };
    for _ in 0..pages {
        // SAFETY: allocating a page has no preconditions; NULL means failure.
        let p = unsafe { b::rrxe_alloc_page(b::GFP_KERNEL_ACCOUNT | b::__GFP_ZERO) };
        if p.is_null() || array.push(p, GFP_KERNEL_ACCOUNT).is_err() {
            if !p.is_null() {
                // SAFETY: just allocated, referenced nowhere else.
                unsafe { b::rrxe_free_page(p) };
            }
            free_all(&array);
            return Err(ENOMEM);
        }
    }
    // SAFETY: `array` holds `count` pages we own; on success `vmap` takes over the pages and the
    // array (`VM_MAP_PUT_PAGES`), on failure it takes nothing.
    let mem = unsafe { b::rrxe_vmap_user(array.as_mut_ptr(), count) }.cast::<u8>();
    if mem.is_null() {
        free_all(&array);
        return Err(ENOMEM);
    }
    // The area owns the array now: `vfree` releases it.
    core::mem::forget(array);
    Ok(mem)
}

impl SharedRing {
    /// Allocates `bytes` (a multiple of the page size) of zeroed memory and makes it mappable
    /// by the context that issued `udata`.
    pub(crate) fn new(udata: &Udata, bytes: usize) -> Result<Self> {
        let uctx = udata.ucontext().ok_or(EINVAL)?;
        if bytes == 0 || bytes % kernel::page::PAGE_SIZE != 0 {
            return Err(EINVAL);
        }
        // The box first: once the area exists nothing can fail before it is owned.
        let boxed = KBox::<Mapping>::new_uninit(GFP_KERNEL_ACCOUNT)?;
        let area = Area::alloc(bytes)?;
        let boxed = KBox::write(
            boxed,
            Mapping {
                entry: Opaque::uninit(),
                area,
            },
        );
        let map = KBox::into_raw(boxed);
        // SAFETY: `map` is a fresh allocation; a zeroed entry is what `..._insert` expects.
        // `uctx` is the live context of this verb call. On failure nothing refers to the entry.
        let r = unsafe {
            ptr::write_bytes((*map).entry.get(), 0, 1);
            b::rdma_user_mmap_entry_insert(uctx, (*map).entry.get(), bytes)
        };
        if r != 0 {
            // SAFETY: not inserted, so still exclusively ours.
            unsafe { Self::free(map) };
            return Err(Error::from_errno(r));
        }
        // SAFETY: inserted entries have `start_pgoff` set; the key is that page offset in bytes.
        let key = unsafe { ((*(*map).entry.get()).start_pgoff as u64) << kernel::page::PAGE_SHIFT };
        // INVARIANT: inserted above, removed in `drop`.
        Ok(SharedRing {
            backing: Backing::User(NonNull::new(map).ok_or(EINVAL)?),
            key,
        })
    }

    /// Allocates `bytes` (a multiple of the page size) of zeroed memory for a kernel consumer's
    /// queue (process context). Its key is 0: it is never mapped.
    pub(crate) fn new_kernel(bytes: usize) -> Result<Self> {
        if bytes == 0 || bytes % kernel::page::PAGE_SIZE != 0 {
            return Err(EINVAL);
        }
        // INVARIANT: the area is ours alone; `drop` frees it.
        Ok(SharedRing {
            backing: Backing::Kernel(Area::alloc(bytes)?),
            key: 0,
        })
    }

    /// # Safety
    ///
    /// `map` must be a `Mapping` from `new` whose entry ib_core no longer refers to (never
    /// inserted, or past `mmap_free`). User mappings may remain: they hold their own page
    /// references, so freeing the area only drops its own.
    unsafe fn free(map: *mut Mapping) {
        // SAFETY: per the contract above the box is ours again, and nothing uses the area:
        // dropping the box frees it.
        drop(unsafe { KBox::from_raw(map) });
    }

    /// The `mmap` offset of this ring.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// Bytes of the mapping.
    pub(crate) fn bytes(&self) -> usize {
        match &self.backing {
            // SAFETY: by the type invariant the mapping is live.
            Backing::User(map) => unsafe { map.as_ref().area.bytes },
            Backing::Kernel(area) => area.bytes,
        }
    }

    fn mem(&self) -> *mut u8 {
        match &self.backing {
            // SAFETY: by the type invariant the mapping is live.
            Backing::User(map) => unsafe { map.as_ref().area.mem },
            Backing::Kernel(area) => area.mem,
        }
    }

    /// The `u32` at byte `off` of the ring, as an atomic. `None` when out of bounds or unaligned.
    pub(crate) fn u32_at(&self, off: usize) -> Option<&AtomicU32> {
        if off % 4 != 0 || off.checked_add(4)? > self.bytes() {
            return None;
        }
        // SAFETY: in bounds and aligned (checked; the area is page-aligned); the memory lives as
        // long as `self`; user space may write it concurrently, which atomics allow.
        Some(unsafe { AtomicU32::from_ptr(self.mem().add(off).cast()) })
    }

    /// Acquire-loads the `u32` at `off` (0 when out of bounds).
    pub(crate) fn load_acquire(&self, off: usize) -> u32 {
        self.u32_at(off).map_or(0, |a| a.load(Ordering::Acquire))
    }

    /// Release-stores `v` at `off` (ignored when out of bounds).
    pub(crate) fn store_release(&self, off: usize, v: u32) {
        if let Some(a) = self.u32_at(off) {
            a.store(v, Ordering::Release);
        }
    }

    /// Copies `out.len()` bytes at `off` into kernel memory (volatile reads: the user may be
    /// writing them). `EINVAL` when out of bounds.
    ///
    /// Word by word where `off` is 8-byte aligned (every slot is: the area is page-aligned and
    /// slot sizes are multiples of 64), then byte by byte.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        let end = off.checked_add(out.len()).ok_or(EINVAL)?;
        if end > self.bytes() {
            return Err(EINVAL);
        }
        let base = self.mem();
        let mut i = 0;
        if off % WORD == 0 {
            for chunk in out.chunks_exact_mut(WORD) {
                // SAFETY: `off + i + WORD <= end <= bytes`, inside the live allocation, and
                // 8-byte aligned (the area is page-aligned and `off + i` a multiple of 8).
                let w = unsafe { ptr::read_volatile(base.add(off + i).cast::<u64>()) };
                chunk.copy_from_slice(&w.to_ne_bytes());
                i += WORD;
            }
        }
        for (j, o) in out[i..].iter_mut().enumerate() {
            // SAFETY: `off + i + j < end <= bytes`, inside the live allocation.
            *o = unsafe { ptr::read_volatile(base.add(off + i + j)) };
        }
        Ok(())
    }

    /// Copies `data` into the ring at `off`. `EINVAL` when out of bounds. Word by word where
    /// `off` is 8-byte aligned, as [`SharedRing::read`].
    pub(crate) fn write(&self, off: usize, data: &[u8]) -> Result {
        let end = off.checked_add(data.len()).ok_or(EINVAL)?;
        if end > self.bytes() {
            return Err(EINVAL);
        }
        let base = self.mem();
        let mut i = 0;
        if off % WORD == 0 {
            for chunk in data.chunks_exact(WORD) {
                let mut w = [0u8; WORD];
                w.copy_from_slice(chunk);
                // SAFETY: `off + i + WORD <= end <= bytes`, inside the live allocation, and
                // 8-byte aligned (as in `read`).
                unsafe {
                    ptr::write_volatile(base.add(off + i).cast::<u64>(), u64::from_ne_bytes(w))
                };
                i += WORD;
            }
        }
        for (j, d) in data[i..].iter().enumerate() {
            // SAFETY: `off + i + j < end <= bytes`, inside the live allocation.
            unsafe { ptr::write_volatile(base.add(off + i + j), *d) };
        }
        Ok(())
    }
}

impl Drop for SharedRing {
    fn drop(&mut self) {
        match &self.backing {
            // SAFETY: by the type invariant the entry is inserted; after this no new mapping can
            // be made and ib_core calls `mmap_free` when the last reference goes.
            Backing::User(map) => unsafe {
                b::rdma_user_mmap_entry_remove((*map.as_ptr()).entry.get())
            },
            // The ring is going: nothing uses its area, which is dropped with it.
            Backing::Kernel(_) => {}
        }
    }
}

/// `ops.mmap_free`: the last reference to one of our entries is gone.
///
/// # Safety
///
/// Called by ib_core once per entry inserted by [`SharedRing::new`].
pub(crate) unsafe extern "C" fn mmap_free(entry: *mut b::rdma_user_mmap_entry) {
    // SAFETY: the entry is the first field of a `Mapping` (repr(C)) and ib_core is done with it
    // (its last reference is gone); user mappings of the pages hold their own references.
    unsafe { SharedRing::free(entry.cast::<Mapping>()) };
}

/// `ops.mmap`: maps the ring whose key is the VMA's offset.
///
/// # Safety
///
/// Called by uverbs with a live context and the caller's new VMA.
pub(crate) unsafe fn mmap(uctx: *mut b::ib_ucontext, vma: *mut b::vm_area_struct) -> Result {
    // SAFETY: per the contract above.
    let entry = unsafe { b::rdma_user_mmap_entry_get(uctx, vma) };
    if entry.is_null() {
        return Err(EINVAL);
    }
    let map = entry.cast::<Mapping>();
    // SAFETY: `entry_get` returned one of our entries with a reference held until `put`, so the
    // area lives; the VMA's size was checked against the entry's length by
    // `rdma_user_mmap_entry_get`, and uverbs' mmap runs with the VMA's lock held for writing.
    let r = unsafe { (*map).area.map(vma) };
    // SAFETY: drops the reference taken by `entry_get`.
    unsafe { b::rdma_user_mmap_entry_put(entry) };
    r
}
