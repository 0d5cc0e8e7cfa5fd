// SPDX-License-Identifier: GPL-2.0-only
//! Memory regions as the data path sees them: what backs one (pinned user pages, on-demand
//! paging, a kernel consumer's memory, fast-registration pages), its keys and rights, and the
//! accesses through it. Registered by `verbs/mr.rs`, found through the fabric's MR table.

use crate::ib::{
    kmem::{KernelVirt, MappedPage, PageList},
    objects::Umem,
    odp::OdpUmem,
};
use crate::logic::{
    idalloc,
    mw::{MrFacts, MrRef},
    transport::AtomicOp,
};
use core::sync::atomic::AtomicU32;
use kernel::{
    prelude::*,
    sync::{Arc, SpinLock},
};

/// The memory behind an MR.
pub(crate) enum MrMem {
    /// Pinned user pages; offsets from the MR's start.
    User(Umem),
    /// On-demand-paging user memory (`IB_ACCESS_ON_DEMAND`); offsets from the MR's start. An
    /// access to a page that is not present fails with `EAGAIN` and changes nothing. Shared
    /// with a QP's work item while it faults pages in (which drops its reference in process
    /// context, as the MR's own teardown does).
    Odp(Arc<OdpUmem>),
    /// A kernel consumer's DMA MR: the address is the kernel virtual address (virt-DMA).
    Kernel(KernelVirt),
    /// A kernel consumer's fast-registration MR: its pages are in [`MrInner::fast`].
    Fast,
}

impl MrMem {
    /// Whether `len` bytes at MR offset `off` can be accessed now: `EAGAIN` if a page of an
    /// on-demand-paging MR is not present; always for other memory (its accesses check their
    /// own bounds).
    pub(super) fn ready(&self, off: u64, len: u64) -> Result {
        match self {
            MrMem::Odp(u) if !u.present(off, len)? => Err(EAGAIN),
            _ => Ok(()),
        }
    }

    /// `off`: offset in the MR; `addr`: the address the request named (a DMA MR's iova is 0
    /// and its length the whole space, so the two are the same there).
    pub(super) fn read(&self, off: u64, out: &mut [u8]) -> Result {
        match self {
            MrMem::User(u) => u.read(off, out),
            MrMem::Odp(u) => u.read(off, out),
            MrMem::Kernel(k) => k.read(off, out),
            MrMem::Fast => Err(EFAULT),
        }
    }

    pub(super) fn write(&self, off: u64, data: &[u8]) -> Result {
        match self {
            MrMem::User(u) => u.write(off, data),
            MrMem::Odp(u) => u.write(off, data),
            MrMem::Kernel(k) => k.write(off, data),
            MrMem::Fast => Err(EFAULT),
        }
    }

    pub(super) fn atomic(&self, off: u64, op: AtomicOp) -> Result<u64> {
        match (self, op) {
            (MrMem::User(u), AtomicOp::CmpSwap { compare, swap }) => {
                u.atomic_cas(off, compare, swap)
            }
            (MrMem::User(u), AtomicOp::FetchAdd { add }) => u.atomic_fadd(off, add),
            (MrMem::User(u), AtomicOp::Write { value }) => u.atomic_store(off, value),
            (MrMem::Odp(u), AtomicOp::CmpSwap { compare, swap }) => {
                u.atomic_cas(off, compare, swap)
            }
            (MrMem::Odp(u), AtomicOp::FetchAdd { add }) => u.atomic_fadd(off, add),
            (MrMem::Odp(u), AtomicOp::Write { value }) => u.atomic_store(off, value),
            // A DMA MR never holds atomic rights (`mr::get_dma`), so no atomic gets here; an
            // ATOMIC WRITE through a global rkey's DMA MR is refused as well (no single-access
            // store on the linear map is offered there).
            (MrMem::Kernel(_) | MrMem::Fast, _) => Err(EINVAL),
        }
    }
}

/// A registered memory region as the data path sees it.
pub(crate) struct MrInner {
    pub(crate) key: u32,
    pub(crate) pd: usize,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    pub(crate) mem: MrMem,
    /// A fast-registration MR: its key, rights, range and pages live here instead (the fields
    /// above are unused).
    pub(crate) fast: Option<Pin<KBox<SpinLock<FastReg>>>>,
    /// Memory windows bound to this MR, and whether it is being deregistered
    /// ([`crate::logic::mw::mr_bind_ref`], [`crate::logic::mw::mr_dereg`]).
    pub(crate) windows: AtomicU32,
}

impl MrInner {
    /// What a bind needs to know of this MR.
    pub(crate) fn facts(&self) -> MrFacts {
        MrFacts {
            mr: MrRef {
                index: idalloc::key_index(self.key),
                key: self.key,
            },
            pd: self.pd,
            access: self.access,
            iova: self.iova,
            length: self.length,
            // Windows are a user's, over a user's registered memory.
            bindable: self.fast.is_none() && matches!(self.mem, MrMem::User(_)),
        }
    }
}

/// A fast-registration MR's state (kernel consumers): staged by `map_mr_sg`, made valid by
/// REG_MR and invalid by LOCAL_INV or a SEND with invalidate, all under its lock.
pub(crate) struct FastReg {
    pub(crate) valid: bool,
    pub(crate) key: u32,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    /// Page size of the mapping (a power of two).
    pub(crate) page_size: u64,
    /// The pages the consumer mapped, each the capability to reach it.
    pub(crate) pages: PageList,
}

impl FastReg {
    /// Runs `f(page, in_page_offset, in_chunk_offset, n)` over the pages behind `len` bytes at
    /// MR offset `off` (offsets from `iova`, checked by the caller).
    pub(super) fn chunks(
        &self,
        off: u64,
        len: usize,
        mut f: impl FnMut(&MappedPage, u64, usize, usize) -> Result,
    ) -> Result {
        let ps = self.page_size;
        if ps == 0 || !ps.is_power_of_two() {
            return Err(EFAULT);
        }
        let mut pos = (self.iova & (ps - 1)).checked_add(off).ok_or(EFAULT)?;
        let mut done = 0usize;
        while done < len {
            let page = usize::try_from(pos / ps).map_err(|_| EFAULT)?;
            let p = self.pages.get(page).ok_or(EFAULT)?;
            let in_page = pos % ps;
            let n = ((ps - in_page) as usize).min(len - done);
            f(p, in_page, done, n)?;
            done += n;
            pos += n as u64;
        }
        Ok(())
    }

    pub(super) fn read(&self, off: u64, out: &mut [u8]) -> Result {
        self.chunks(off, out.len(), |p, in_page, at, n| {
            p.read(in_page, &mut out[at..at + n])
        })
    }

    pub(super) fn write(&self, off: u64, data: &[u8]) -> Result {
        self.chunks(off, data.len(), |p, in_page, at, n| {
            p.write(in_page, &data[at..at + n])
        })
    }

    pub(super) fn atomic(&self, off: u64, op: AtomicOp) -> Result<u64> {
        let mut r = None;
        self.chunks(off, 8, |p, in_page, _, n| {
            // An 8-byte aligned word never straddles a page.
            if n != 8 {
                return Err(EINVAL);
            }
            r = Some(match op {
                AtomicOp::CmpSwap { compare, swap } => p.atomic_cas(in_page, compare, swap)?,
                AtomicOp::FetchAdd { add } => p.atomic_fadd(in_page, add)?,
                AtomicOp::Write { value } => p.atomic_store(in_page, value)?,
            });
            Ok(())
        })?;
        r.ok_or(EINVAL)
    }
}

/// The memory of an MR as one access sees it.
pub(super) enum MrView<'a> {
    Fixed(&'a MrMem),
    Fast(&'a FastReg),
}

impl MrView<'_> {
    /// [`MrMem::ready`]; a fast-registration MR's pages are always there.
    pub(super) fn ready(&self, off: u64, len: u64) -> Result {
        match self {
            MrView::Fixed(m) => m.ready(off, len),
            MrView::Fast(_) => Ok(()),
        }
    }

    pub(super) fn read(&self, off: u64, out: &mut [u8]) -> Result {
        match self {
            MrView::Fixed(m) => m.read(off, out),
            MrView::Fast(f) => f.read(off, out),
        }
    }

    pub(super) fn write(&self, off: u64, data: &[u8]) -> Result {
        match self {
            MrView::Fixed(m) => m.write(off, data),
            MrView::Fast(f) => f.write(off, data),
        }
    }

    pub(super) fn atomic(&self, off: u64, op: AtomicOp) -> Result<u64> {
        match self {
            MrView::Fixed(m) => m.atomic(off, op),
            MrView::Fast(f) => f.atomic(off, op),
        }
    }
}
