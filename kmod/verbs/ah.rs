// SPDX-License-Identifier: GPL-2.0-only
//! Address handles (UD). A user AH gets a number ([`uapi::CreateAhResp`]) that UD send WQEs
//! name it by; the data path finds the resolved path through the device's AH table.

use super::{
    av::{self, Path},
    device::{Rrxe, RrxeDev},
    dp::AhInner,
    pd::RrxePd,
};
use crate::ib::{device::Device, objects::AddressVector, udata::Udata};
use crate::logic::limits as lim;
use crate::uapi;
use kernel::{prelude::*, sync::Arc};

/// An address handle: a resolved path and its number.
pub(crate) struct RrxeAh {
    num: u32,
}

pub(super) fn create(dev: &Device<Rrxe>, pd: &RrxePd, avec: &AddressVector, udata: Option<&Udata>) -> Result<RrxeAh> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let path: Path = av::resolve(dev, avec, None)?;
    dev.data().fabric.need_wire(&path)?;
    let data = dev.data();
    data.quota.ah.take(lim::MAX_AH)?;
    let num = match data.alloc_ah_num() {
        Ok(n) => n,
        Err(e) => {
            RrxeDev::release(&data.quota.ah);
            return Err(e);
        }
    };
    let r = (|| -> Result {
        if let Some(u) = udata {
            if u.outlen() > 0 {
                u.respond(&uapi::CreateAhResp { ah_num: num, reserved: 0 })?;
            }
        }
        data.fabric.ahs.insert(num, Arc::new(AhInner { path, pd: pd as *const RrxePd as usize }, GFP_KERNEL)?)
    })();
    if let Err(e) = r {
        data.free_ah_num(num);
        RrxeDev::release(&data.quota.ah);
        return Err(e);
    }
    Ok(RrxeAh { num })
}

pub(super) fn destroy(dev: &Device<Rrxe>, ah: &RrxeAh) {
    drop(dev.data().fabric.ahs.remove_sync(ah.num));
    dev.data().free_ah_num(ah.num);
    RrxeDev::release(&dev.data().quota.ah);
}
