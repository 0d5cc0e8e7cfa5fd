// SPDX-License-Identifier: GPL-2.0-only
//! Completion queues as the data path sees them: the completion ring (shared with the provider,
//! or a kernel consumer's), written by the QPs, polled by kernel consumers. Created by
//! `verbs/cq.rs`.

use crate::datapath::wq::{CONS, HDR, PROD};
use crate::ib::{
    bh::with_bh_disabled,
    objects::{CqRef, QpHandle, Wc},
    ring::SharedRing,
};
use crate::logic::transport as tp;
use crate::uapi::{self, Cqe};
use kernel::{new_spinlock, prelude::*, sync::SpinLock};

/// CQ ring state (guarded by the CQ lock).
pub(super) struct CqRing {
    pub(super) ring: Option<SharedRing>,
    /// Slots of `ring` (kernel copy; the header in shared memory is not trusted).
    pub(super) slots: u32,
    /// Our producer index (never read back from shared memory).
    pub(super) prod: u32,
    /// 0: not armed; 1: next completion; 2: next solicited completion.
    pub(super) armed: u8,
    pub(super) overflowed: bool,
    /// A kernel CQ: the `ib_qp` of each slot's completion, recorded when the completion is
    /// written (a lookup by QPN at poll time could find the QP gone, or another one after the
    /// QPN's reuse). Empty for a user CQ.
    pub(super) qps: KVVec<QpHandle>,
}

/// A completion queue as the data path sees it.
#[pin_data]
pub(crate) struct CqInner {
    #[pin]
    pub(super) st: SpinLock<CqRing>,
    pub(super) ev: CqRef,
}

impl CqInner {
    /// `qps`: for a kernel CQ, `slots` entries (see [`CqRing::qps`]); empty for a user CQ.
    pub(crate) fn new(
        ring: Option<SharedRing>,
        slots: u32,
        qps: KVVec<QpHandle>,
        ev: CqRef,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(CqInner {
            st <- new_spinlock!(
                CqRing { ring, slots, prod: 0, armed: 0, overflowed: false, qps },
                "rrxe:cq"
            ),
            ev,
        }? Error)
    }

    /// Writes a completion of QP `qp`; `false` when the CQ is full (the completion is lost and
    /// CQ_ERR is reported once). Bottom halves disabled.
    pub(super) fn push(&self, c: &Cqe, solicited: bool, qp: QpHandle) -> bool {
        let mut notify = false;
        let ok = {
            let mut st = self.st.lock();
            let st = &mut *st;
            let Some(ring) = st.ring.as_ref() else {
                return false;
            };
            let cons = ring.load_acquire(CONS);
            if st.prod.wrapping_sub(cons) >= st.slots {
                if !st.overflowed {
                    st.overflowed = true;
                    notify = true;
                }
                false
            } else {
                let slot = (st.prod & (st.slots - 1)) as usize;
                if let Some(h) = st.qps.get_mut(slot) {
                    *h = qp;
                }
                let _ = ring.write(HDR + slot * uapi::CQE_SIZE, &tp::encode_cqe(c));
                st.prod = st.prod.wrapping_add(1);
                ring.store_release(PROD, st.prod);
                if st.armed == 1 || (st.armed == 2 && solicited) {
                    st.armed = 0;
                    notify = true;
                }
                true
            }
        };
        if notify {
            if ok {
                self.ev.comp_event();
            } else {
                self.ev.error_event();
            }
        }
        ok
    }

    /// A kernel consumer's `poll_cq`: moves up to `out.len()` completions out of the ring, each
    /// with the `ib_qp` recorded when it was written. Returns how many.
    pub(crate) fn poll_kernel(&self, out: &mut [Wc]) -> usize {
        with_bh_disabled(|| {
            let st = self.st.lock();
            let Some(ring) = st.ring.as_ref() else {
                return 0;
            };
            let cons = ring.load_acquire(CONS);
            let n = (st.prod.wrapping_sub(cons).min(st.slots) as usize).min(out.len());
            let mut buf = [0u8; uapi::CQE_SIZE];
            for (i, w) in out.iter_mut().take(n).enumerate() {
                let slot = (cons.wrapping_add(i as u32) & (st.slots - 1)) as usize;
                let _ = ring.read(HDR + slot * uapi::CQE_SIZE, &mut buf);
                let cqe = tp::decode_cqe(&buf);
                let qp = st.qps.get(slot).copied().unwrap_or_default();
                *w = Wc { cqe, qp };
            }
            ring.store_release(CONS, cons.wrapping_add(n as u32));
            n
        })
    }

    /// Arms the CQ; returns whether completions are waiting.
    pub(crate) fn arm(&self, solicited_only: bool) -> bool {
        with_bh_disabled(|| {
            let mut st = self.st.lock();
            st.armed = if solicited_only { 2 } else { 1 };
            match st.ring.as_ref() {
                Some(r) => st.prod != r.load_acquire(CONS),
                None => false,
            }
        })
    }

    /// (slots, completions waiting, armed, overflowed) for `rdma resource show cq -dd`.
    pub(crate) fn res(&self) -> (u32, u32, bool, bool) {
        with_bh_disabled(|| {
            let st = self.st.lock();
            (
                st.slots,
                Self::pending_locked(&st),
                st.armed != 0,
                st.overflowed,
            )
        })
    }

    /// Completions written and not yet consumed (as far as the consumer index tells; at most
    /// the ring's size).
    pub(crate) fn pending(&self) -> u32 {
        with_bh_disabled(|| {
            let st = self.st.lock();
            Self::pending_locked(&st)
        })
    }

    pub(super) fn pending_locked(st: &CqRing) -> u32 {
        match st.ring.as_ref() {
            Some(r) => st.prod.wrapping_sub(r.load_acquire(CONS)).min(st.slots),
            None => 0,
        }
    }

    /// Replaces the ring (resize to `cqe` entries in `slots` slots), carrying over completions
    /// not yet consumed (and, for a kernel CQ, their QPs into `qps`, `slots` entries). `EINVAL`,
    /// with nothing changed or dropped, when more than `cqe` are pending (the check and the
    /// swap are one step under the CQ lock).
    pub(crate) fn replace_ring(
        &self,
        new: SharedRing,
        slots: u32,
        cqe: u32,
        mut qps: KVVec<QpHandle>,
    ) -> Result {
        let (old, old_qps) = with_bh_disabled(|| {
            let mut st = self.st.lock();
            let pending = Self::pending_locked(&st);
            if pending > cqe || pending > slots {
                return Err(EINVAL);
            }
            let mut moved = 0u32;
            if let Some(old) = st.ring.as_ref() {
                let cons = old.load_acquire(CONS);
                let mut buf = [0u8; uapi::CQE_SIZE];
                for i in 0..pending {
                    let from = (cons.wrapping_add(i) & (st.slots - 1)) as usize;
                    if old.read(HDR + from * uapi::CQE_SIZE, &mut buf).is_ok() {
                        let to = (moved & (slots - 1)) as usize;
                        let _ = new.write(HDR + to * uapi::CQE_SIZE, &buf);
                        if let (Some(h), Some(q)) = (qps.get_mut(to), st.qps.get(from)) {
                            *h = *q;
                        }
                        moved += 1;
                    }
                }
            }
            new.store_release(PROD, moved);
            st.prod = moved;
            st.slots = slots;
            st.overflowed = false;
            let old_qps = core::mem::replace(&mut st.qps, qps);
            Ok((st.ring.replace(new), old_qps))
        })?;
        drop((old, old_qps));
        Ok(())
    }
}
