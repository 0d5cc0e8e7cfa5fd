// SPDX-License-Identifier: GPL-2.0-only
//! Address handles (UD).

use super::{
    av::{self, Path},
    device::{Rrxe, RrxeDev},
    pd::RrxePd,
};
use crate::ib::{device::Device, objects::AddressVector, udata::Udata};
use crate::logic::limits as lim;
use kernel::prelude::*;

/// An address handle: a resolved path.
pub(crate) struct RrxeAh {
    #[allow(dead_code)]
    pub(crate) path: Path,
}

pub(super) fn create(dev: &Device<Rrxe>, _pd: &RrxePd, avec: &AddressVector, udata: Option<&Udata>) -> Result<RrxeAh> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let path = av::resolve(dev, avec, None)?;
    dev.data().quota.ah.take(lim::MAX_AH)?;
    Ok(RrxeAh { path })
}

pub(super) fn destroy(dev: &Device<Rrxe>, _ah: &RrxeAh) {
    RrxeDev::release(&dev.data().quota.ah);
}
