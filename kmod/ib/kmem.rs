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
//! address). Only kernel code can create such an MR: user registrations never come here.

use core::{
    ptr,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::prelude::*;

/// Kernel virtual memory as named by a kernel verbs consumer (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KernelVirt;

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
        // SAFETY: by ib_core's contract (module documentation) `addr..addr + len` is mapped
        // kernel memory of the consumer that posted the work request, alive until its
        // completion; `dst` is our own buffer, so the two do not overlap.
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
        // SAFETY: mapped and alive by ib_core's contract, 8-byte aligned (checked); other
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

    /// Atomic fetch-and-add of the u64 at `addr`; returns the original value.
    pub(crate) fn atomic_fadd(&self, addr: u64, add: u64) -> Result<u64> {
        self.with_u64(addr, |w| w.fetch_add(add, Ordering::SeqCst))
    }
}
