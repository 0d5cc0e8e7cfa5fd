// SPDX-License-Identifier: GPL-2.0-only
//! Completion queues. A user CQ gets a completion ring shared with the provider (geometry in
//! `uapi`: a [`uapi::RingHeader`] then power-of-two slots of [`uapi::Cqe`]).

use super::device::{Rrxe, RrxeDev};
use crate::ib::{device::Device, objects::CqInit, ring::SharedRing, udata::Udata};
use crate::logic::limits as lim;
use crate::uapi;
use core::mem::offset_of;
use kernel::{new_mutex, prelude::*, sync::Mutex};

/// A completion queue.
pub(crate) struct RrxeCq {
    state: Pin<KBox<Mutex<CqState>>>,
}

struct CqState {
    cqe: u32,
    ring: Option<SharedRing>,
}

fn check_cqe(cqe: u32) -> Result<u32> {
    if cqe == 0 || cqe > lim::MAX_CQE {
        return Err(EINVAL);
    }
    Ok(cqe)
}

/// A completion ring for `cqe` entries, announced to the provider through `udata`.
fn new_ring(udata: &Udata, cqe: u32) -> Result<SharedRing> {
    let slots = uapi::cq_ring_slots(cqe);
    let ring = SharedRing::new(udata, uapi::ring_bytes(slots, uapi::CQE_SIZE, kernel::page::PAGE_SIZE))?;
    ring.store_release(offset_of!(uapi::RingHeader, log2_slots), slots.trailing_zeros());
    ring.store_release(offset_of!(uapi::RingHeader, slot_size), uapi::CQE_SIZE as u32);
    udata.respond(&uapi::CreateCqResp {
        ring: uapi::RingInfo { mmap_key: ring.key(), bytes: ring.bytes() as u64, slots, slot_size: uapi::CQE_SIZE as u32 },
    })?;
    Ok(ring)
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
    let ring = match udata {
        Some(u) => Some(new_ring(u, cqe)?),
        None => None,
    };
    let state = KBox::pin_init(new_mutex!(CqState { cqe, ring }, "rrxe:cq"), GFP_KERNEL)?;
    dev.data().quota.cq.take(lim::MAX_CQ)?;
    Ok((RrxeCq { state }, cqe))
}

pub(super) fn destroy(dev: &Device<Rrxe>, _cq: &RrxeCq) {
    RrxeDev::release(&dev.data().quota.cq);
}

pub(super) fn resize(_dev: &Device<Rrxe>, cq: &RrxeCq, cqe: u32, udata: Option<&Udata>) -> Result<u32> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let cqe = check_cqe(cqe)?;
    let mut st = cq.state.lock();
    if let Some(u) = udata {
        // A new ring; the old one stays mapped (if the provider still maps it) until unmapped.
        st.ring = Some(new_ring(u, cqe)?);
    }
    st.cqe = cqe;
    Ok(cqe)
}
