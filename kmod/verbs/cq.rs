// SPDX-License-Identifier: GPL-2.0-only
//! Completion queues (the control part; the shared ring comes with the data path).

use super::device::{Rrxe, RrxeDev};
use crate::ib::{device::Device, objects::CqInit, udata::Udata};
use crate::logic::limits as lim;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;

/// A completion queue.
pub(crate) struct RrxeCq {
    cqe: AtomicU32,
}

fn check_cqe(cqe: u32) -> Result<u32> {
    if cqe == 0 || cqe > lim::MAX_CQE {
        return Err(EINVAL);
    }
    Ok(cqe)
}

pub(super) fn create(dev: &Device<Rrxe>, init: &CqInit, udata: Option<&Udata>) -> Result<(RrxeCq, u32)> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    if init.flags != 0 {
        return Err(crate::ib::eopnotsupp());
    }
    let cqe = check_cqe(init.cqe)?;
    if init.comp_vector >= lim::NUM_COMP_VECTORS {
        return Err(EINVAL);
    }
    dev.data().quota.cq.take(lim::MAX_CQ)?;
    Ok((RrxeCq { cqe: AtomicU32::new(cqe) }, cqe))
}

pub(super) fn destroy(dev: &Device<Rrxe>, _cq: &RrxeCq) {
    RrxeDev::release(&dev.data().quota.cq);
}

pub(super) fn resize(_dev: &Device<Rrxe>, cq: &RrxeCq, cqe: u32, udata: Option<&Udata>) -> Result<u32> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let cqe = check_cqe(cqe)?;
    cq.cqe.store(cqe, Ordering::Relaxed);
    Ok(cqe)
}
