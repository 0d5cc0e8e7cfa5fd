// SPDX-License-Identifier: GPL-2.0-only
//! Shared receive queues: a receive ring shared with the provider (`post_srq_recv` makes no
//! system call), consumed by the QPs attached to it, with the SRQ limit event.

use super::{device::Rrxe, pd::RrxePd, qp::new_wq};
use crate::datapath::srq::SrqInner;
use crate::ib::{
    device::Device,
    objects::{SrqAttr, SrqRef, SRQ_LIMIT, SRQ_MAX_WR},
    udata::Udata,
};
use crate::logic::limits as lim;
use crate::uapi;
use kernel::{prelude::*, sync::Arc};

/// A shared receive queue.
pub(crate) struct RrxeSrq {
    pub(crate) inner: Arc<SrqInner>,
}

pub(super) fn create(
    dev: &Device<Rrxe>,
    _pd: &RrxePd,
    attr: &mut SrqAttr,
    udata: Option<&Udata>,
    ev: SrqRef,
) -> Result<RrxeSrq> {
    // A kernel SRQ has the same ring, in kernel memory (its consumer posts through
    // `post_srq_recv`).
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    if attr.max_wr == 0
        || attr.max_wr > lim::MAX_SRQ_WR
        || attr.max_sge == 0
        || attr.max_sge > lim::MAX_SRQ_SGE
    {
        return Err(EINVAL);
    }
    if attr.srq_limit > attr.max_wr {
        return Err(EINVAL);
    }
    let (ring, info) = new_wq(udata, attr.max_wr, uapi::recv_slot_size(attr.max_sge))?;
    if let Some(u) = udata {
        u.respond(&uapi::CreateSrqResp { rq: info })?;
    }
    let data = dev.data();
    let quota = data.quota.srq.reserve(lim::MAX_SRQ, udata.is_some())?;
    let inner = Arc::pin_init(
        SrqInner::new(
            ring,
            info.slots,
            info.slot_size as usize,
            attr.max_wr,
            attr.max_sge,
            attr.srq_limit,
            ev,
        ),
        GFP_KERNEL_ACCOUNT,
    )?;
    quota.keep();
    Ok(RrxeSrq { inner })
}

pub(super) fn modify(
    _dev: &Device<Rrxe>,
    srq: &RrxeSrq,
    attr: &SrqAttr,
    mask: u32,
    udata: Option<&Udata>,
) -> Result {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    if mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
        return Err(EINVAL);
    }
    if mask & SRQ_MAX_WR != 0 {
        // Resizing is not offered (IB_DEVICE_SRQ_RESIZE is not advertised).
        return Err(crate::ib::eopnotsupp());
    }
    if mask & SRQ_LIMIT != 0 {
        if attr.srq_limit > srq.inner.max_wr {
            return Err(EINVAL);
        }
        srq.inner.set_limit(attr.srq_limit);
    }
    Ok(())
}

pub(super) fn query(_dev: &Device<Rrxe>, srq: &RrxeSrq) -> Result<SrqAttr> {
    Ok(SrqAttr {
        max_wr: srq.inner.max_wr,
        max_sge: srq.inner.max_sge,
        srq_limit: srq.inner.limit(),
    })
}

pub(super) fn destroy(dev: &Device<Rrxe>, _srq: &RrxeSrq) {
    dev.data().quota.srq.release();
}
