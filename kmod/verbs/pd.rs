// SPDX-License-Identifier: GPL-2.0-only
//! Protection domains.

use super::device::Rrxe;
use crate::ib::{device::Device, udata::Udata};
use crate::logic::limits as lim;
use kernel::prelude::*;

/// A protection domain (its identity is the ib_core object; nothing else is needed yet).
pub(crate) struct RrxePd;

pub(super) fn alloc(dev: &Device<Rrxe>, udata: Option<&Udata>) -> Result<RrxePd> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    dev.data()
        .quota
        .pd
        .reserve(lim::MAX_PD, udata.is_some())?
        .keep();
    Ok(RrxePd)
}

pub(super) fn dealloc(dev: &Device<Rrxe>, _pd: &RrxePd) {
    dev.data().quota.pd.release();
}
