// SPDX-License-Identifier: GPL-2.0-only
//! Memory regions over user memory.

use super::{device::Rrxe, errno, pd::RrxePd};
use crate::datapath::mr::{FastReg, MrInner, MrMem};
use crate::ib::{
    bh::with_bh_disabled,
    bindings as b,
    device::Device,
    kmem::{KernelVirt, MappedPage, PageList},
    objects::{MrArgs, MrKeys, Umem},
    odp::OdpUmem,
    restrack::ResTable,
    udata::Udata,
};
use crate::logic::{idalloc, limits as lim, mr, mw, qp_attr::access};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{c_str, new_spinlock, prelude::*, sync::Arc};

/// A registered memory region: pinned pages plus the keys and rights that guard them, shared
/// with the data path through the device's MR table.
pub(crate) struct RrxeMr {
    index: u32,
}

pub(super) fn reg_user(
    dev: &Device<Rrxe>,
    pd: &RrxePd,
    args: &MrArgs,
    udata: Option<&Udata>,
) -> Result<(RrxeMr, MrKeys)> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    mr::check_mr_access(args.access).map_err(errno)?;
    mr::check_mr_range(args.start, args.length, args.iova, lim::MAX_MR_SIZE).map_err(errno)?;
    let mem = if args.access & access::ON_DEMAND != 0 {
        // Nothing pinned: pages come in at access time (`OdpUmem::fault`, process context).
        // The huge-page hint is not passed on: the present-page table is kept per base page.
        let writable =
            args.access & (access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0;
        let odp = OdpUmem::get(
            dev,
            args.start,
            args.length,
            (args.access & !access::HUGETLB) as i32,
            writable,
        )?;
        MrMem::Odp(Arc::new(odp, GFP_KERNEL_ACCOUNT)?)
    } else {
        let umem = Umem::get(dev, args.start, args.length, args.access as i32)?;
        if (umem.len() as u64) < args.length {
            return Err(EFAULT);
        }
        MrMem::User(umem)
    };
    let data = dev.data();
    let (index, key_byte) = data.reserve_mr_index()?;
    let lkey = idalloc::make_key(index.id(), key_byte);
    let inner = MrInner {
        key: lkey,
        pd: pd as *const RrxePd as usize,
        access: args.access,
        iova: args.iova,
        length: args.length,
        mem,
        fast: None,
        windows: AtomicU32::new(0),
    };
    data.fabric
        .mrs
        .insert(index.id(), Arc::new(inner, GFP_KERNEL_ACCOUNT)?)?;
    let index = index.keep();
    Ok((RrxeMr { index }, MrKeys { lkey, rkey: lkey }))
}

/// `get_dma_mr`: an MR over the kernel's memory for a kernel consumer (addresses are kernel
/// virtual addresses under virt-DMA). ib_core calls it from `ib_alloc_pd` for the PD's
/// `local_dma_lkey`, and with remote rights only for `IB_PD_UNSAFE_GLOBAL_RKEY`.
pub(super) fn get_dma(
    dev: &Device<Rrxe>,
    pd: &RrxePd,
    mem: KernelVirt,
    access: u32,
) -> Result<(RrxeMr, MrKeys)> {
    mr::check_mr_access(access).map_err(errno)?;
    // ib_core asks a DMA MR for local write and, for a global rkey, remote read and write;
    // never for atomics, which `KernelVirt` does not offer, nor for on-demand paging.
    if access & (access::REMOTE_ATOMIC | access::ON_DEMAND) != 0 {
        return Err(EINVAL);
    }
    let data = dev.data();
    let (index, key_byte) = data.reserve_mr_index()?;
    let lkey = idalloc::make_key(index.id(), key_byte);
    let inner = MrInner {
        key: lkey,
        pd: pd as *const RrxePd as usize,
        access,
        iova: 0,
        length: u64::MAX,
        mem: MrMem::Kernel(mem),
        fast: None,
        windows: AtomicU32::new(0),
    };
    data.fabric
        .mrs
        .insert(index.id(), Arc::new(inner, GFP_KERNEL)?)?;
    let index = index.keep();
    Ok((RrxeMr { index }, MrKeys { lkey, rkey: lkey }))
}

/// `advise_mr`: a prefetch of on-demand-paging MRs' ranges (`ibv_advise_mr`). Done before it
/// returns, whether or not the caller asked to wait (`IB_UVERBS_ADVISE_MR_FLAG_FLUSH`): an
/// asynchronous prefetch may be complete at once. `PREFETCH` and `PREFETCH_WRITE` fault the
/// pages in (for writing when the MR is writable), `PREFETCH_NO_FAULT` makes present only the
/// pages the process has mapped. `EINVAL` for an lkey that is not an ODP MR of `pd`, or a
/// range outside it.
pub(super) fn advise(dev: &Device<Rrxe>, pd: &RrxePd, advice: u32, sges: &[b::ib_sge]) -> Result {
    let fault = match advice {
        b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH
        | b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => true,
        b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => false,
        _ => return Err(errno(crate::logic::errno::EOPNOTSUPP)),
    };
    for s in sges {
        // The table reference is a reader's (dropped before bottom halves are enabled); the
        // umem's own reference is dropped here, in process context.
        let (umem, iova, length) = with_bh_disabled(|| {
            let m = dev.data().fabric.mrs.get(idalloc::key_index(s.lkey))?;
            if m.key != s.lkey || m.pd != pd as *const RrxePd as usize || m.fast.is_some() {
                return None;
            }
            match &m.mem {
                MrMem::Odp(u) => Some((u.clone(), m.iova, m.length)),
                _ => None,
            }
        })
        .ok_or(EINVAL)?;
        let off = s.addr.checked_sub(iova).ok_or(EINVAL)?;
        let len = u64::from(s.length);
        if off.checked_add(len).map_or(true, |e| e > length) {
            return Err(EINVAL);
        }
        if fault {
            umem.fault(off, len)?;
        } else {
            umem.map_present(off, len)?;
        }
    }
    Ok(())
}

pub(super) fn dereg(dev: &Device<Rrxe>, region: &RrxeMr) -> Result {
    // Refused while memory windows are bound to it (IBA 10.6.7.2.6, as rdma_rxe: `EINVAL`);
    // otherwise marked dying, so that no bind takes it from here on.
    with_bh_disabled(|| match dev.data().fabric.mrs.get(region.index) {
        Some(m) => m
            .windows
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                mw::mr_dereg(c).ok()
            })
            .map(drop)
            .map_err(|_| EINVAL),
        None => Ok(()),
    })?;
    // After this no data-path access can start, none is still running, and the pages were
    // released here, in process context, with the last reference.
    if !dev.data().fabric.mrs.remove_quiesced(region.index) {
        pr_warn!("rrxe: an MR reference outlived its readers' sections (teardown protocol)\n");
    }
    dev.data().free_mr_index(region.index);
    Ok(())
}

/// `alloc_mr(IB_MR_TYPE_MEM_REG)`: a fast-registration MR for up to `max_num_sg` pages,
/// invalid until a REG_MR work request makes it valid (kernel consumers only).
pub(super) fn alloc_fast(
    dev: &Device<Rrxe>,
    pd: &RrxePd,
    max_num_sg: u32,
) -> Result<(RrxeMr, MrKeys)> {
    if max_num_sg == 0 || max_num_sg > lim::MAX_FAST_REG_PAGES {
        return Err(EINVAL);
    }
    let pages = PageList::new(max_num_sg as usize)?;
    let data = dev.data();
    let (index, key_byte) = data.reserve_mr_index()?;
    let key = idalloc::make_key(index.id(), key_byte);
    let fast = KBox::pin_init(
        new_spinlock!(
            FastReg {
                valid: false,
                key,
                access: 0,
                iova: 0,
                length: 0,
                page_size: kernel::page::PAGE_SIZE as u64,
                pages,
            },
            "rrxe:frmr"
        ),
        GFP_KERNEL,
    )?;
    let inner = MrInner {
        key,
        pd: pd as *const RrxePd as usize,
        access: 0,
        iova: 0,
        length: 0,
        mem: MrMem::Fast,
        fast: Some(fast),
        windows: AtomicU32::new(0),
    };
    data.fabric
        .mrs
        .insert(index.id(), Arc::new(inner, GFP_KERNEL)?)?;
    let index = index.keep();
    Ok((
        RrxeMr { index },
        MrKeys {
            lkey: key,
            rkey: key,
        },
    ))
}

/// `map_mr_sg` starts: the page list of fast MR `region` is emptied, with pages of
/// `page_size` bytes to come.
pub(super) fn map_begin(dev: &Device<Rrxe>, region: &RrxeMr, page_size: u32) -> Result {
    if !page_size.is_power_of_two() || (page_size as usize) < kernel::page::PAGE_SIZE {
        return Err(EINVAL);
    }
    with_bh_disabled(|| {
        let m = dev.data().fabric.mrs.get(region.index).ok_or(EINVAL)?;
        let lock = m.fast.as_ref().ok_or(EINVAL)?;
        let mut st = lock.lock();
        st.pages.clear();
        st.page_size = u64::from(page_size);
        Ok(())
    })
}

/// One page of a `map_mr_sg` (ib_core's `ib_sg_to_pages` callback): `ENOMEM` when the MR's
/// page list is full, `EINVAL` for a page of another size than `map_begin` was told.
pub(super) fn map_page(dev: &Device<Rrxe>, region: &RrxeMr, page: MappedPage) -> Result {
    with_bh_disabled(|| {
        let m = dev.data().fabric.mrs.get(region.index).ok_or(EINVAL)?;
        let lock = m.fast.as_ref().ok_or(EINVAL)?;
        let mut st = lock.lock();
        if page.size() != st.page_size {
            return Err(EINVAL);
        }
        st.pages.push(page)
    })
}

/// What backs an MR, read in one section with bottom halves disabled.
enum Backing {
    Fast {
        valid: bool,
        npages: usize,
        max: usize,
        page_size: u64,
    },
    User {
        bytes: usize,
    },
    Odp {
        bytes: usize,
    },
    Dma,
}

/// `rdma resource show mr -dd`: what backs the MR (pinned user pages, the kernel's memory, or a
/// fast-registration page list and its state).
pub(super) fn res(dev: &Device<Rrxe>, region: &RrxeMr, t: &mut ResTable) -> Result {
    // The table reference is a reader's: dropped before bottom halves are enabled again.
    let backing = with_bh_disabled(|| {
        let m = dev.data().fabric.mrs.get(region.index)?;
        Some(match (&m.fast, &m.mem) {
            (Some(lock), _) => {
                let st = lock.lock();
                Backing::Fast {
                    valid: st.valid,
                    npages: st.pages.len(),
                    max: st.pages.max(),
                    page_size: st.page_size,
                }
            }
            (None, MrMem::User(u)) => Backing::User { bytes: u.len() },
            (None, MrMem::Odp(u)) => Backing::Odp { bytes: u.len() },
            (None, MrMem::Kernel(_) | MrMem::Fast) => Backing::Dma,
        })
    });
    match backing {
        None => {}
        Some(Backing::Fast {
            valid,
            npages,
            max,
            page_size,
        }) => {
            t.str(c_str!("type"), c_str!("fast_reg"))?;
            t.str(
                c_str!("state"),
                if valid {
                    c_str!("valid")
                } else {
                    c_str!("invalid")
                },
            )?;
            t.u32(c_str!("pages"), npages as u32)?;
            t.u32(c_str!("max_pages"), max as u32)?;
            t.u64(c_str!("page_size"), page_size)?;
        }
        Some(Backing::User { bytes }) => {
            t.str(c_str!("type"), c_str!("user"))?;
            t.u64(
                c_str!("pages"),
                (bytes as u64).div_ceil(kernel::page::PAGE_SIZE as u64),
            )?;
        }
        Some(Backing::Odp { bytes }) => {
            t.str(c_str!("type"), c_str!("odp"))?;
            t.u64(c_str!("bytes"), bytes as u64)?;
        }
        Some(Backing::Dma) => t.str(c_str!("type"), c_str!("dma"))?,
    }
    Ok(())
}
