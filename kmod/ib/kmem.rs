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
//! [`KernelConsumer`] proof and the [`KernelVirt`] capability; user registrations, and every
//! uverbs command, never come here.

use core::{
    ptr,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::prelude::*;

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

/// Kernel virtual memory as named by a kernel verbs consumer (see the module documentation): a
/// capability that only a kernel object can hold.
///
/// Safe code cannot make one: [`KernelVirt::new`] needs a [`KernelConsumer`], which only the ib
/// layer mints. It is neither `Clone` nor `Copy`, so it stays with the object it was made for:
/// a DMA or fast-registration MR of a kernel PD, whose addresses its consumer named (SGEs of
/// its own work requests, pages it mapped with `map_mr_sg`, or, for an rkey it chose to hand
/// out, the peer's requests within the rights it granted). A user PD's MR holds pinned user
/// pages instead and never reaches kernel virtual memory.
#[derive(Debug)]
pub(crate) struct KernelVirt(());

impl KernelVirt {
    /// The capability for the kernel consumer `_who` proves (made by the ib layer and handed to
    /// the driver with the kernel object it creates).
    pub(super) fn new(_who: KernelConsumer) -> Self {
        KernelVirt(())
    }
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

impl KernelVirt {
    /// Copies `dst.len()` bytes at kernel address `addr`. `EFAULT` for an address outside the
    /// kernel half. Any context.
    pub(crate) fn read(&self, addr: u64, dst: &mut [u8]) -> Result {
        let p = check(addr, dst.len())?;
        // SAFETY: `self` exists only for a kernel consumer's object (type invariant), and the
        // driver gives it only addresses that consumer named (its SGEs, the pages it mapped, or
        // a peer's request within the rights it granted); by ib_core's contract (module
        // documentation) `addr..addr + len` is mapped kernel memory of that consumer, alive
        // until the completion; `dst` is our own buffer, so the two do not overlap.
        unsafe { ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` to kernel address `addr`. As [`KernelVirt::read`].
    pub(crate) fn write(&self, addr: u64, src: &[u8]) -> Result {
        let p = check(addr, src.len())?;
        // SAFETY: as in `read`, with source and destination swapped.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    fn with_u64<R>(&self, addr: u64, f: impl FnOnce(&AtomicU64) -> R) -> Result<R> {
        if addr % 8 != 0 {
            return Err(EINVAL);
        }
        let p = check(addr, 8)?;
        // SAFETY: mapped and alive as in `read` (type invariant and ib_core's contract),
        // 8-byte aligned (checked); other
        // kernel accesses to a word an atomic targets are the consumer's business, as on
        // hardware.
        let word = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
        Ok(f(word))
    }

    /// Atomic compare-and-swap of the u64 at `addr`; returns the original value. `EINVAL`
    /// unless 8-byte aligned.
    pub(crate) fn atomic_cas(&self, addr: u64, compare: u64, swap: u64) -> Result<u64> {
        self.with_u64(addr, |w| {
            match w.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        })
    }

    /// ATOMIC WRITE: stores the u64 at `addr` in one access, ordered after every earlier
    /// store; returns the value it replaced. `EINVAL` unless 8-byte aligned.
    pub(crate) fn atomic_store(&self, addr: u64, value: u64) -> Result<u64> {
        self.with_u64(addr, |w| w.swap(value, Ordering::SeqCst))
    }

    /// Atomic fetch-and-add of the u64 at `addr`; returns the original value.
    pub(crate) fn atomic_fadd(&self, addr: u64, add: u64) -> Result<u64> {
        self.with_u64(addr, |w| w.fetch_add(add, Ordering::SeqCst))
    }
}
