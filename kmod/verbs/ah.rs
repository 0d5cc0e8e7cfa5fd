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

impl RrxeAh {
    /// The number send WQEs name the AH by.
    pub(crate) fn num(&self) -> u32 {
        self.num
    }
}

pub(super) fn create(
    dev: &Device<Rrxe>,
    pd: &RrxePd,
    avec: &AddressVector,
    udata: Option<&Udata>,
    sleepable: bool,
) -> Result<RrxeAh> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    // The route lookup does not sleep. Opening the socket and reaping dead AHs do: a kernel
    // caller in atomic context (ib_cm) skips them; its QP1 opened the socket already.
    let path: Path = av::resolve(dev, avec, None)?;
    let data = dev.data();
    if sleepable {
        data.fabric.need_wire(&path)?;
        reap(dev);
    }
    let gfp = if sleepable {
        GFP_KERNEL_ACCOUNT
    } else {
        GFP_ATOMIC
    };
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
                u.respond(&uapi::CreateAhResp {
                    ah_num: num,
                    reserved: 0,
                })?;
            }
        }
        data.fabric.ahs.insert(
            num,
            Arc::new(
                AhInner {
                    path,
                    pd: pd as *const RrxePd as usize,
                },
                gfp,
            )?,
        )
    })();
    if let Err(e) = r {
        data.free_ah_num(num);
        RrxeDev::release(&data.quota.ah);
        return Err(e);
    }
    Ok(RrxeAh { num })
}

/// Destroys `ah`. Without `sleepable` (a kernel caller in atomic context) nothing may sleep,
/// but removing the AH from the data path's table waits for an RCU grace period and freeing
/// its number takes a mutex: the AH is only marked dead then, and the next sleepable AH verb
/// of the device finishes it. Until then it keeps its number and quota; a UD WQE that still
/// names it is the caller's bug either way (ib_core forbids destroying an AH in use).
pub(super) fn destroy(dev: &Device<Rrxe>, ah: &RrxeAh, sleepable: bool) {
    if !sleepable {
        dev.data().defer_ah_destroy(ah.num);
        return;
    }
    reap(dev);
    finish(dev, ah.num);
}

fn finish(dev: &Device<Rrxe>, num: u32) {
    drop(dev.data().fabric.ahs.remove_sync(num));
    dev.data().free_ah_num(num);
    RrxeDev::release(&dev.data().quota.ah);
}

/// Finishes the destructions deferred by non-sleepable `destroy` calls (process context).
fn reap(dev: &Device<Rrxe>) {
    dev.data().reap_dead_ahs(|num| finish(dev, num));
}
