// SPDX-License-Identifier: GPL-2.0-only
//! Shared receive queues: a receive ring shared with the provider (`post_srq_recv` makes no
//! system call), consumed by the QPs attached to it, with the SRQ limit event.

use super::{device::Rrxe, pd::RrxePd, qp::new_wq};
use crate::ib::{bh::with_bh_disabled, ring::SharedRing};
use crate::ib::{
    device::Device,
    objects::{SrqAttr, SrqRef, SRQ_LIMIT, SRQ_MAX_WR},
    udata::Udata,
};
use crate::logic::limits as lim;
use crate::logic::transport::{RecvTake, RecvWr};
use crate::uapi;
use crate::uapi::Sge;
use crate::verbs::wq::{take_from_ring, write_recv_slot, HDR, PROD};
use kernel::{new_spinlock, sync::SpinLock};
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

/// SRQ ring state.
pub(super) struct SrqRing {
    pub(super) ring: SharedRing,
    pub(super) slots: u32,
    pub(super) slot_size: usize,
    pub(super) cons: u32,
    pub(super) limit: u32,
    /// The producer index was found out of range: the ring is not read again.
    pub(super) broken: bool,
}

/// A shared receive queue as the data path sees it.
#[pin_data]
pub(crate) struct SrqInner {
    #[pin]
    pub(super) st: SpinLock<SrqRing>,
    pub(super) ev: SrqRef,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
}

impl SrqInner {
    pub(crate) fn new(
        ring: SharedRing,
        slots: u32,
        slot_size: usize,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
        ev: SrqRef,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(SrqInner {
            st <- new_spinlock!(SrqRing { ring, slots, slot_size, cons: 0, limit, broken: false }, "rrxe:srq"),
            ev,
            max_wr,
            max_sge,
        }? Error)
    }

    pub(crate) fn set_limit(&self, limit: u32) {
        with_bh_disabled(|| self.st.lock().limit = limit);
    }

    pub(crate) fn limit(&self) -> u32 {
        with_bh_disabled(|| self.st.lock().limit)
    }

    /// Queues a kernel consumer's receive WQE; `ENOMEM` when the SRQ is full.
    pub(crate) fn post_kernel(&self, wr_id: u64, sges: &[Sge]) -> Result {
        if sges.len() > self.max_sge as usize {
            return Err(EINVAL);
        }
        with_bh_disabled(|| {
            let st = self.st.lock();
            let prod = st.ring.load_acquire(PROD);
            if prod.wrapping_sub(st.cons) >= st.slots {
                return Err(ENOMEM);
            }
            let off = HDR + (prod & (st.slots - 1)) as usize * st.slot_size;
            write_recv_slot(&st.ring, off, st.slot_size, wr_id, sges)?;
            st.ring.store_release(PROD, prod.wrapping_add(1));
            Ok(())
        })
    }

    pub(super) fn take(&self, out: &mut RecvWr) -> RecvTake {
        let mut fire = false;
        let r = {
            let mut st = self.st.lock();
            let st = &mut *st;
            let r = take_from_ring(
                &st.ring,
                st.slots,
                st.slot_size,
                &mut st.cons,
                &mut st.broken,
                self.max_sge,
                out,
            );
            if r == RecvTake::Taken && st.limit != 0 {
                let left = st.ring.load_acquire(PROD).wrapping_sub(st.cons);
                if left < st.limit {
                    st.limit = 0;
                    fire = true;
                }
            }
            r
        };
        if fire {
            self.ev.limit_event();
        }
        r
    }
}
