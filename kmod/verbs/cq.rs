// SPDX-License-Identifier: GPL-2.0-only
//! Completion queues. A user CQ gets a completion ring shared with the provider (geometry in
//! `uapi`: a [`uapi::RingHeader`] then power-of-two slots of [`uapi::Cqe`]); the data path
//! writes completions into it ([`CqInner`]).

use super::device::Rrxe;
use crate::datapath::cq::CqInner;
use crate::ib::{
    device::Device,
    objects::QpHandle,
    objects::{CqInit, CqRef},
    restrack::ResTable,
    ring::SharedRing,
    udata::Udata,
};
use crate::logic::limits as lim;
use crate::uapi;
use core::{
    mem::offset_of,
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{c_str, prelude::*, sync::Arc};

/// A completion queue.
pub(crate) struct RrxeCq {
    pub(crate) inner: Arc<CqInner>,
    cqe: AtomicU32,
}

fn check_cqe(cqe: u32) -> Result<u32> {
    if cqe == 0 || cqe > lim::MAX_CQE {
        return Err(EINVAL);
    }
    Ok(cqe)
}

/// A completion ring for `cqe` entries, announced to the provider through `udata`, or for a
/// kernel consumer (who polls it through `poll_cq`) without.
/// A kernel CQ's per-slot QP record (`slots` entries); none for a user CQ, whose completions
/// the provider reads from the ring.
fn kernel_qps(udata: Option<&Udata>, slots: u32) -> Result<KVVec<QpHandle>> {
    Ok(match udata {
        Some(_) => KVVec::new(),
        None => KVVec::from_elem(QpHandle::default(), slots as usize, GFP_KERNEL)?,
    })
}

fn new_ring(udata: Option<&Udata>, cqe: u32) -> Result<(SharedRing, u32)> {
    let slots = uapi::cq_ring_slots(cqe);
    let bytes = uapi::ring_bytes(slots, uapi::CQE_SIZE, kernel::page::PAGE_SIZE);
    let ring = match udata {
        Some(u) => SharedRing::new(u, bytes)?,
        None => SharedRing::new_kernel(bytes)?,
    };
    ring.store_release(
        offset_of!(uapi::RingHeader, log2_slots),
        slots.trailing_zeros(),
    );
    ring.store_release(
        offset_of!(uapi::RingHeader, slot_size),
        uapi::CQE_SIZE as u32,
    );
    if let Some(u) = udata {
        u.respond(&uapi::CreateCqResp {
            ring: uapi::RingInfo {
                mmap_key: ring.key(),
                bytes: ring.bytes() as u64,
                slots,
                slot_size: uapi::CQE_SIZE as u32,
            },
        })?;
    }
    Ok((ring, slots))
}

pub(super) fn create(
    dev: &Device<Rrxe>,
    init: &CqInit,
    udata: Option<&Udata>,
    ev: CqRef,
) -> Result<(RrxeCq, u32)> {
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
    let (ring, slots) = new_ring(udata, cqe)?;
    let ring = Some(ring);
    let qps = kernel_qps(udata, slots)?;
    let quota = dev.data().quota.cq.reserve(lim::MAX_CQ, udata.is_some())?;
    let inner = Arc::pin_init(CqInner::new(ring, slots, qps, ev), GFP_KERNEL_ACCOUNT)?;
    quota.keep();
    Ok((
        RrxeCq {
            inner,
            cqe: AtomicU32::new(cqe),
        },
        cqe,
    ))
}

pub(super) fn destroy(dev: &Device<Rrxe>, _cq: &RrxeCq) {
    dev.data().quota.cq.release();
}

pub(super) fn resize(
    _dev: &Device<Rrxe>,
    cq: &RrxeCq,
    cqe: u32,
    udata: Option<&Udata>,
) -> Result<u32> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let cqe = check_cqe(cqe)?;
    // Fewer entries than completions waiting: refused, nothing dropped (checked again under
    // the CQ lock when the rings are swapped).
    if cq.inner.pending() > cqe {
        return Err(EINVAL);
    }
    // A new ring with the unconsumed completions moved over; the old one stays mapped (if the
    // provider still maps it) until unmapped.
    let (ring, slots) = new_ring(udata, cqe)?;
    cq.inner
        .replace_ring(ring, slots, cqe, kernel_qps(udata, slots)?)?;
    cq.cqe.store(cqe, Ordering::Relaxed);
    Ok(cqe)
}

pub(super) fn req_notify(_dev: &Device<Rrxe>, cq: &RrxeCq, solicited_only: bool) -> Result<bool> {
    Ok(cq.inner.arm(solicited_only))
}

/// `rdma resource show cq -dd`: ring depth and fill, arming, overflow.
pub(super) fn res(cq: &RrxeCq, t: &mut ResTable) -> Result {
    let (slots, pending, armed, overflowed) = cq.inner.res();
    t.u32(c_str!("ring_slots"), slots)?;
    t.u32(c_str!("pending"), pending)?;
    t.str(
        c_str!("armed"),
        if armed { c_str!("yes") } else { c_str!("no") },
    )?;
    if overflowed {
        t.str(c_str!("overflow"), c_str!("yes"))?;
    }
    Ok(())
}
