// SPDX-License-Identifier: GPL-2.0-only
//! Kernel memory named by a kernel verbs consumer.
//!
//! rrxe registers its `ib_device` without a DMA device, so ib_core's virt-DMA path applies
//! (`ib_uses_virt_dma`): the "DMA address" a kernel ULP puts in an SGE, or maps through
//! `ib_dma_map_sg`, is the kernel virtual address of its buffer. A DMA MR (`get_dma_mr`, the
//! PD's `local_dma_lkey`) therefore covers every such address, and fast-registration MRs list
//! page addresses of the same kind.
//!
//! The contract is ib_core's: a kernel consumer keeps the memory its work requests name mapped
//! and alive until their completions (and for an rkey it hands out, until it invalidates it).
//! rdma_rxe and siw rely on the same contract (`rxe_mr_copy` of a DMA MR, `siw_mem` on a kernel
//! address). Only kernel code can create such an MR, and the types say so: the ib layer records
//! who created each object, and only for a kernel consumer's object does it mint the
//! [`KernelConsumer`] proof; user registrations, and every uverbs command, never come here.
//!
//! No safe function here dereferences an address its caller chose on trust. Each kind of
//! memory is a type that carries the range the consumer vouched for, and every access checks
//! that range first: [`KernelVirt`] (a DMA MR: the linear map of RAM, which is what
//! `ib_dma_map_*` hands a consumer under virt-DMA) and [`MappedPage`] (one page of a
//! fast-registration MR, as `map_mr_sg` mapped it). The one address taken on the caller's word,
//! the inline data of a WR being posted, is [`read_inline`], an `unsafe fn` of the ib layer.

use super::bindings as b;
use core::{
    ptr,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::{alloc::KVVec, page::PAGE_SIZE, prelude::*};

/// Proof that the object a trampoline works on was created by a kernel verbs consumer: ib_core
/// created it through its kernel API, without udata (the ib layer's record of every object,
/// [`super::objects::Owner`]). The work requests, SGE addresses and buffers such an object is
/// given come from kernel code bound by ib_core's contract (module documentation).
///
/// Only the ib layer makes one: user space never holds a `KernelConsumer`, so nothing reached
/// from a uverbs command can take the kernel-consumer path.
#[derive(Clone, Copy)]
pub(crate) struct KernelConsumer(());

impl KernelConsumer {
    /// # Safety
    ///
    /// The caller must act for an object that ib_core created for a kernel consumer (no
    /// udata), on a call that ib_core's kernel API made for that consumer.
    pub(super) unsafe fn assume() -> Self {
        KernelConsumer(())
    }
}

/// The memory a kernel consumer's DMA MR covers (`get_dma_mr`, which ib_core calls from
/// `ib_alloc_pd` for the PD's `local_dma_lkey` and, with remote read and write rights, for
/// `IB_PD_UNSAFE_GLOBAL_RKEY`): a capability that only a kernel object can hold.
///
/// The range it stands for is the one ib_core's contract gives a DMA MR under virt-DMA: every
/// address `ib_dma_map_single`, `ib_dma_map_page` or `ib_dma_map_sg` can produce, that is the
/// kernel's linear map of RAM (`virt_addr_valid`, outside the kernel image). Its methods check
/// that range, page by page, before they touch anything, so an address outside it is `EFAULT`,
/// never a fault; reads use `copy_from_kernel_nofault`, so a page the kernel unmapped within
/// it is `EFAULT` too. Which bytes of the range a request reaches is the MR's grant: the
/// consumer's own SGEs for its lkey, or the whole range for the global rkey of
/// `IB_PD_UNSAFE_GLOBAL_RKEY`, which ib_core documents (and logs) as unsafe: a peer may then
/// write any RAM, as it could through an HCA's DMA. It offers no atomics: ib_core never asks a
/// DMA MR for atomic rights (the driver refuses them).
///
/// Safe code cannot make one: [`KernelVirt::new`] needs a [`KernelConsumer`], which only the ib
/// layer mints. It is neither `Clone` nor `Copy`, so it stays with the DMA MR it was made for.
/// A user PD's MR holds pinned user pages instead and never reaches kernel memory.
#[derive(Debug)]
pub(crate) struct KernelVirt(());

impl KernelVirt {
    /// The capability for the kernel consumer `_who` proves (made by the ib layer and handed to
    /// the driver with the DMA MR it creates).
    pub(super) fn new(_who: KernelConsumer) -> Self {
        KernelVirt(())
    }

    /// Copies `dst.len()` bytes at kernel address `addr`. `EFAULT` outside the linear map of
    /// RAM or on a page the kernel does not let us read. Any context.
    pub(crate) fn read(&self, addr: u64, dst: &mut [u8]) -> Result {
        let p = linear_ram(addr, dst.len())?;
        // SAFETY: `p..p + len` is in the linear map of RAM (checked), the range this
        // capability stands for (type invariant); `copy_from_kernel_nofault` returns an error
        // instead of faulting on any page it cannot read, in any context; `dst` is our own
        // buffer of `len` bytes.
        nofault(unsafe {
            b::copy_from_kernel_nofault(dst.as_mut_ptr().cast(), p.cast(), dst.len())
        })
    }

    /// Copies `src` to kernel address `addr`. `EFAULT` outside the linear map of RAM. Any
    /// context.
    pub(crate) fn write(&self, addr: u64, src: &[u8]) -> Result {
        let p = linear_ram(addr, src.len())?;
        // SAFETY: `p..p + len` is mapped RAM of the linear map (checked), the range this
        // capability stands for (type invariant), and the MR grants writes to it: a local
        // write lands in an SGE the consumer named with this lkey (its own buffer, writable
        // until the completion by ib_core's contract); a remote one needs the global rkey
        // that the consumer asked ib_core for with `IB_PD_UNSAFE_GLOBAL_RKEY`, granting peers
        // all of it (the kernel has no `copy_to_kernel_nofault` for modules). `src` is our own
        // buffer, so the two do not overlap.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }
}

/// One page a kernel consumer mapped into a fast-registration MR of its own (`map_mr_sg`,
/// through ib_core's `ib_sg_to_pages`): `size` bytes from `addr`, `size` the MR's page size.
///
/// # Invariants
///
/// `addr..addr + size` is a page of the consumer's buffer that `ib_sg_to_pages` handed the
/// driver's `set_page` for an MR `alloc_mr` made for that consumer; `size` is a power of two
/// and `addr` a multiple of it, in the kernel half. Only the ib layer makes one
/// ([`MappedPage::new`] is `unsafe` and `pub(super)`), so safe code holds only pages a
/// consumer mapped, and every access checks that it stays within its page.
#[derive(Debug)]
pub(crate) struct MappedPage {
    addr: u64,
    size: u64,
}

impl MappedPage {
    /// Records one page of a `map_mr_sg`. `EINVAL` unless `size` is a power of two, `addr` a
    /// multiple of it, and the page in the kernel half.
    ///
    /// # Safety
    ///
    /// `addr` is a page address that `ib_sg_to_pages` passed to the `set_page` callback of a
    /// `map_mr_sg` on a fast-registration MR of the kernel consumer `_who` proves, and `size`
    /// that MR's `page_size`.
    pub(super) unsafe fn new(_who: KernelConsumer, addr: u64, size: u64) -> Result<Self> {
        if !size.is_power_of_two() || addr % size != 0 {
            return Err(EINVAL);
        }
        check(addr, usize::try_from(size).map_err(|_| EINVAL)?).map_err(|_| EINVAL)?;
        // INVARIANT: per the contract above and the checks just made.
        Ok(MappedPage { addr, size })
    }

    /// The page size.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Address of `len` bytes at `at` in the page; `EFAULT` unless they lie within it.
    fn within(&self, at: u64, len: usize) -> Result<*mut u8> {
        match at.checked_add(len as u64) {
            Some(end) if end <= self.size => linear_ram(self.addr + at, len),
            _ => Err(EFAULT),
        }
    }

    /// Copies `dst.len()` bytes at offset `at` of the page. `EFAULT` unless they lie within
    /// the page (and the linear map of RAM, as every page `ib_dma_map_sg` maps does). Any
    /// context.
    pub(crate) fn read(&self, at: u64, dst: &mut [u8]) -> Result {
        let p = self.within(at, dst.len())?;
        // SAFETY: `p..p + len` lies within a page the consumer mapped (type invariant, checked
        // above), which by ib_core's contract stays mapped and alive while the MR's
        // registration is in use; `copy_from_kernel_nofault` errs instead of faulting anyway.
        nofault(unsafe {
            b::copy_from_kernel_nofault(dst.as_mut_ptr().cast(), p.cast(), dst.len())
        })
    }

    /// Copies `src` to offset `at` of the page. As [`MappedPage::read`].
    pub(crate) fn write(&self, at: u64, src: &[u8]) -> Result {
        let p = self.within(at, src.len())?;
        // SAFETY: `p..p + len` lies within a page of the consumer's buffer (type invariant,
        // checked above), which it mapped for the device to write and which by ib_core's
        // contract stays mapped and alive while the registration is in use; `src` is our own
        // buffer, so the two do not overlap.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    fn with_u64<R>(&self, at: u64, f: impl FnOnce(&AtomicU64) -> R) -> Result<R> {
        if at % 8 != 0 {
            return Err(EINVAL);
        }
        let p = self.within(at, 8)?;
        // SAFETY: the word lies within a page of the consumer's buffer (type invariant,
        // checked above), mapped and alive by ib_core's contract while the registration is in
        // use, and 8-byte aligned (`addr` is page aligned, `at` checked); other kernel
        // accesses to a word an atomic targets are the consumer's business, as on hardware.
        let word = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
        Ok(f(word))
    }

    /// Atomic compare-and-swap of the u64 at offset `at`; returns the original value.
    /// `EINVAL` unless 8-byte aligned, `EFAULT` outside the page.
    pub(crate) fn atomic_cas(&self, at: u64, compare: u64, swap: u64) -> Result<u64> {
        self.with_u64(at, |w| {
            match w.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        })
    }

    /// ATOMIC WRITE: stores the u64 at offset `at` in one access, ordered after every earlier
    /// store; returns the value it replaced. `EINVAL` unless 8-byte aligned, `EFAULT` outside
    /// the page.
    pub(crate) fn atomic_store(&self, at: u64, value: u64) -> Result<u64> {
        self.with_u64(at, |w| w.swap(value, Ordering::SeqCst))
    }

    /// Atomic fetch-and-add of the u64 at offset `at`; returns the original value.
    pub(crate) fn atomic_fadd(&self, at: u64, add: u64) -> Result<u64> {
        self.with_u64(at, |w| w.fetch_add(add, Ordering::SeqCst))
    }
}

/// The page list of a fast-registration MR: up to a fixed number of [`MappedPage`]s, with room
/// for all of them reserved up front, so that `map_mr_sg` never allocates (it may run in
/// atomic context).
pub(crate) struct PageList {
    pages: KVVec<MappedPage>,
    max: usize,
}

impl PageList {
    /// An empty list with room for `max` pages.
    pub(crate) fn new(max: usize) -> Result<Self> {
        Ok(PageList {
            pages: KVVec::with_capacity(max, GFP_KERNEL)?,
            max,
        })
    }

    /// Forgets every page (a new `map_mr_sg` begins).
    pub(crate) fn clear(&mut self) {
        // SAFETY: 0 is within the capacity and no element is needed past it; a `MappedPage`
        // has no destructor, so dropping none of them loses nothing.
        unsafe { self.pages.set_len(0) };
    }

    /// Appends `page`; `ENOMEM` when the list is full (never allocates).
    pub(crate) fn push(&mut self, page: MappedPage) -> Result {
        if self.pages.len() >= self.max {
            return Err(ENOMEM);
        }
        // Within the capacity reserved in `new`: no allocation, whatever the flags.
        self.pages.push(page, GFP_ATOMIC).map_err(|_| ENOMEM)
    }

    /// Page `i`, if mapped.
    pub(crate) fn get(&self, i: usize) -> Option<&MappedPage> {
        self.pages.get(i)
    }

    /// Pages mapped.
    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    /// Room for this many pages.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// Copies the inline data a kernel consumer's send WR names: `dst.len()` bytes at `addr`.
/// `EFAULT` outside the kernel half, or on a page the kernel does not let us read.
///
/// # Safety
///
/// `addr..addr + dst.len()` is an SGE of a send WR with `IB_SEND_INLINE` that a kernel
/// consumer is posting now: its own kernel memory (any kernel virtual address, as for
/// rdma_rxe and the HCA drivers, which copy it with `memcpy`), readable for the duration of
/// the post.
pub(super) unsafe fn read_inline(addr: u64, dst: &mut [u8]) -> Result {
    let p = check(addr, dst.len())?;
    // SAFETY: per the contract above; `dst` is our own buffer, and the copy errs instead of
    // faulting should the consumer have broken its contract.
    nofault(unsafe { b::copy_from_kernel_nofault(dst.as_mut_ptr().cast(), p.cast(), dst.len()) })
}

/// Lowest address of the kernel half of the address space on 64-bit: anything below it is a
/// user address or garbage, never a buffer a kernel ULP mapped.
const KERNEL_HALF: u64 = 1 << 63;

fn check(addr: u64, len: usize) -> Result<*mut u8> {
    let end = addr.checked_add(len as u64).ok_or(EFAULT)?;
    if addr < KERNEL_HALF || end < KERNEL_HALF {
        return Err(EFAULT);
    }
    Ok(addr as usize as *mut u8)
}

/// The top 2 GiB of the address space: the kernel image on x86-64 (`__START_KERNEL_map`),
/// which `virt_addr_valid` accepts but no DMA mapping yields; never in a linear map.
const KERNEL_IMAGE: u64 = 0xffff_ffff_8000_0000;

/// `addr..addr + len` as a pointer if every page it touches is in the kernel's linear map of
/// RAM (`virt_addr_valid`, below the kernel image), else `EFAULT`.
fn linear_ram(addr: u64, len: usize) -> Result<*mut u8> {
    let p = check(addr, len)?;
    if addr.saturating_add(len as u64) > KERNEL_IMAGE {
        return Err(EFAULT);
    }
    let ps = PAGE_SIZE as u64;
    let last = addr + (len.max(1) as u64 - 1);
    let mut page = addr & !(ps - 1);
    loop {
        // SAFETY: `virt_addr_valid` only computes on the value (a range test and `pfn_valid`);
        // it dereferences nothing.
        if !unsafe { b::rrxe_virt_addr_valid(page as usize as *const core::ffi::c_void) } {
            return Err(EFAULT);
        }
        match page.checked_add(ps) {
            Some(next) if next <= last => page = next,
            _ => return Ok(p),
        }
    }
}

/// A `copy_from_kernel_nofault` result: 0, or `EFAULT` for a page that faulted.
fn nofault(r: isize) -> Result {
    if r == 0 {
        Ok(())
    } else {
        Err(EFAULT)
    }
}
