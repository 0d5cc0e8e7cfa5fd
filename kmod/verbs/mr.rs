// SPDX-License-Identifier: GPL-2.0-only
//! Memory regions over user memory.

use super::{device::Rrxe, errno, pd::RrxePd};
use crate::ib::{
    device::Device,
    objects::{MrArgs, MrKeys, Umem},
    udata::Udata,
};
use crate::logic::{idalloc, limits as lim, mr};
use kernel::prelude::*;

/// A registered memory region: pinned pages plus the keys and rights that guard them.
#[allow(dead_code)]
pub(crate) struct RrxeMr {
    pub(crate) index: u32,
    pub(crate) lkey: u32,
    pub(crate) access: u32,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    pub(crate) umem: Umem,
}

pub(super) fn reg_user(dev: &Device<Rrxe>, _pd: &RrxePd, args: &MrArgs, udata: Option<&Udata>) -> Result<(RrxeMr, MrKeys)> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    mr::check_mr_access(args.access).map_err(errno)?;
    mr::check_mr_range(args.start, args.length, args.iova, lim::MAX_MR_SIZE).map_err(errno)?;
    let umem = Umem::get(dev, args.start, args.length, args.access as i32)?;
    if (umem.len() as u64) < args.length {
        return Err(EFAULT);
    }
    let (index, key_byte) = dev.data().alloc_mr_index()?;
    let lkey = idalloc::make_key(index, key_byte);
    let region = RrxeMr { index, lkey, access: args.access, iova: args.iova, length: args.length, umem };
    Ok((region, MrKeys { lkey, rkey: lkey }))
}

pub(super) fn dereg(dev: &Device<Rrxe>, region: &RrxeMr) {
    dev.data().free_mr_index(region.index);
}
