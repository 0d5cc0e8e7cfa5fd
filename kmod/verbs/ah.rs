// SPDX-License-Identifier: GPL-2.0-only
//! Address handles (UD). A user AH gets a number ([`uapi::CreateAhResp`]) that UD send WQEs
//! name it by; the data path finds the resolved path through the device's AH table.

use super::{av, device::Rrxe, pd::RrxePd};
use crate::datapath::path::{AhInner, Path};
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
    // Opening the socket sleeps: a kernel caller in atomic context (ib_cm) skips it; QP1
    // opened it already.
    let path: Path = av::resolve(dev, avec, None)?;
    let data = dev.data();
    if sleepable {
        data.fabric.need_wire(&path)?;
    }
    let gfp = if sleepable {
        GFP_KERNEL_ACCOUNT
    } else {
        GFP_ATOMIC
    };
    let quota = data.quota.ah.reserve(lim::MAX_AH, udata.is_some())?;
    let num = data.reserve_ah_num()?;
    if let Some(u) = udata {
        if u.outlen() > 0 {
            u.respond(&uapi::CreateAhResp {
                ah_num: num.id(),
                reserved: 0,
            })?;
        }
    }
    let inner = AhInner {
        path,
        pd: pd as *const RrxePd as usize,
    };
    data.fabric.ahs.insert(num.id(), Arc::new(inner, gfp)?)?;
    quota.keep();
    Ok(RrxeAh { num: num.keep() })
}

/// Destroys `ah`, in any context (kernel consumers destroy AHs under `spin_lock_irqsave`). No
/// grace period is needed: a packet being sent with the AH holds its own reference to the
/// resolved path (a `Held` from the table; an AH's teardown never sleeps), and a UD WQE that still names the number later
/// is the caller's bug (ib_core forbids destroying an AH in use): it finds no AH, or one of
/// its own PD that reused the number.
pub(super) fn destroy(dev: &Device<Rrxe>, ah: &RrxeAh, _sleepable: bool) {
    let data = dev.data();
    drop(data.fabric.ahs.take(ah.num));
    data.free_ah_num(ah.num);
    data.quota.ah.release();
}
