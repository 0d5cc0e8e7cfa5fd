// SPDX-License-Identifier: GPL-2.0-only
//! Shared receive queues as the data path sees them: the receive ring the attached QPs consume,
//! and the SRQ limit event. Created by `verbs/srq.rs`.

use crate::datapath::wq::{take_from_ring, write_recv_slot, HDR, PROD};
use crate::ib::{bh::with_bh_disabled, objects::SrqRef, ring::SharedRing};
use crate::logic::transport::{RecvTake, RecvWr};
use crate::uapi::Sge;
use kernel::{new_spinlock, prelude::*, sync::SpinLock};

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
