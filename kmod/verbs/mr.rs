// SPDX-License-Identifier: GPL-2.0-only
//! Memory regions over user memory.

use super::{
    device::Rrxe,
    dp::{MrInner, MrMem},
    errno,
    pd::RrxePd,
};
use crate::ib::{
    device::Device,
    kmem::KernelVirt,
    objects::{MrArgs, MrKeys, Umem},
    udata::Udata,
};
use crate::logic::{idalloc, limits as lim, mr};
use kernel::{prelude::*, sync::Arc};

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
    let umem = Umem::get(dev, args.start, args.length, args.access as i32)?;
    if (umem.len() as u64) < args.length {
        return Err(EFAULT);
    }
    let data = dev.data();
    let (index, key_byte) = data.alloc_mr_index()?;
    let lkey = idalloc::make_key(index, key_byte);
    let inner = MrInner {
        key: lkey,
        pd: pd as *const RrxePd as usize,
        access: args.access,
        iova: args.iova,
        length: args.length,
        mem: MrMem::User(umem),
    };
    let r = Arc::new(inner, GFP_KERNEL_ACCOUNT)
        .map_err(Error::from)
        .and_then(|a| data.fabric.mrs.insert(index, a));
    if let Err(e) = r {
        data.free_mr_index(index);
        return Err(e);
    }
    Ok((RrxeMr { index }, MrKeys { lkey, rkey: lkey }))
}

/// `get_dma_mr`: an MR over the kernel's memory for a kernel consumer (addresses are kernel
/// virtual addresses under virt-DMA). ib_core calls it from `ib_alloc_pd` for the PD's
/// `local_dma_lkey`, and with remote rights only for `IB_PD_UNSAFE_GLOBAL_RKEY`.
pub(super) fn get_dma(dev: &Device<Rrxe>, pd: &RrxePd, access: u32) -> Result<(RrxeMr, MrKeys)> {
    mr::check_mr_access(access).map_err(errno)?;
    let data = dev.data();
    let (index, key_byte) = data.alloc_mr_index()?;
    let lkey = idalloc::make_key(index, key_byte);
    let inner = MrInner {
        key: lkey,
        pd: pd as *const RrxePd as usize,
        access,
        iova: 0,
        length: u64::MAX,
        mem: MrMem::Kernel(KernelVirt),
    };
    let r = Arc::new(inner, GFP_KERNEL)
        .map_err(Error::from)
        .and_then(|a| data.fabric.mrs.insert(index, a));
    if let Err(e) = r {
        data.free_mr_index(index);
        return Err(e);
    }
    Ok((RrxeMr { index }, MrKeys { lkey, rkey: lkey }))
}

pub(super) fn dereg(dev: &Device<Rrxe>, region: &RrxeMr) {
    // After this no data-path access can start, and none is still running: the pages are
    // released when the last reference (ours) goes.
    drop(dev.data().fabric.mrs.remove_sync(region.index));
    dev.data().free_mr_index(region.index);
}
