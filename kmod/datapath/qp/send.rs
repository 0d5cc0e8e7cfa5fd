// SPDX-License-Identifier: GPL-2.0-only
//! The send doorbells. A user doorbell (the provider's `post_send` system call) drains the SQ
//! in the caller's context, bottom halves disabled, up to a budget per pass, with
//! `cond_resched()` between passes; a kernel consumer's never sleeps and leaves the rest to the
//! continuation. Also the kernel consumers' producers of the SQ and RQ rings.

use crate::datapath::{
    loopback::{Outbox, BUDGET},
    qp::{
        env::Ctx,
        state::{Eng, QpInner},
    },
    rx::deliver,
    wq::{write_recv_slot, CONS, FLAGS, HDR, PROD},
};
use crate::ib::{
    bh::{self, with_bh_disabled},
    objects::QpEvent,
    ring::SharedRing,
};
use crate::logic::qp_state::QpState;
use crate::logic::transport as tp;
use crate::uapi;
use crate::uapi::{SendWqe, Sge};
use core::{
    mem::{size_of, size_of_val},
    sync::atomic::{fence, Ordering},
};
use kernel::prelude::*;

/// Passes one doorbell makes at most (then the continuation takes over).
pub(super) const MAX_PASSES: u32 = 1 << 16;

/// Passes a kernel consumer's doorbell makes (it may not sleep between passes).
pub(super) const KERNEL_PASSES: u32 = 4;

/// Bulk packets one doorbell pass and its delivery may generate (bottom halves stay disabled
/// for a pass and its delivery: keep it short).
pub(super) const DOORBELL_BULK: u32 = 2 * BUDGET;

/// How a doorbell pass ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PassEnd {
    /// Another pass can do more now.
    More,
    /// Nothing more to do now (the ring is empty, or the requester waits for the peer).
    Idle,
    /// The wire pushed back: the pacing timer resumes; the doorbell ends.
    Paced,
    /// The SQ ring is broken (the QP is in ERR): the doorbell ends.
    Broken,
}

impl QpInner {
    /// Moves new WQEs from the shared SQ into the engine (the engine's private SQ has the
    /// ring's geometry, and the ring's consumer index only moves when a WR retires, so it always
    /// has room for what the ring holds). Returns whether the ring still has
    /// WQEs the engine had no room for. A producer index out of range breaks the ring for good:
    /// the QP goes to ERR (QP_FATAL on that transition only) and the ring is not read again.
    pub(super) fn pull_sq(&self, eng: &mut Eng, cx: &mut Ctx<'_, '_>) -> bool {
        let Some((ring, slots, slot_size)) = &self.sq else {
            return false;
        };
        if cx.sh.sq_broken {
            return false;
        }
        let prod = ring.load_acquire(PROD);
        let avail = prod.wrapping_sub(cx.sh.sq_cons);
        if avail > *slots {
            cx.sh.sq_broken = true;
            self.fabric.bad_rings.fetch_add(1, Ordering::Relaxed);
            let was_err = eng.state() == QpState::Err;
            eng.set_state(cx, QpState::Err, false);
            if !was_err {
                self.ev.event(QpEvent::Fatal);
            }
            return false;
        }
        let mut n = 0;
        while n < avail {
            let Some(slot) = eng.sq_slot_mut() else { break };
            let off = HDR + (cx.sh.sq_cons & (*slots - 1)) as usize * *slot_size;
            let len = slot.len().min(*slot_size);
            if ring.read(off, &mut slot[..len]).is_err() {
                break;
            }
            // Taken (the engine has its copy); the slot stays held until the WR retires
            // (`Env::sq_retired` publishes the consumer index).
            cx.sh.sq_cons = cx.sh.sq_cons.wrapping_add(1);
            eng.sq_pushed(cx);
            n += 1;
        }
        n < avail
    }

    /// One doorbell pass: pull, flush in ERR, send up to the budget.
    pub(super) fn pass(&self, out: &mut Outbox<'_>) -> PassEnd {
        let mut g = self.st.lock();
        let d = &mut *g;
        if d.sh.sq_broken {
            return PassEnd::Broken;
        }
        let mut cx = self.ctx(&mut d.sh, out);
        let ring_left = self.pull_sq(&mut d.eng, &mut cx);
        if cx.sh.sq_broken {
            self.finish(cx.sh);
            return PassEnd::Broken;
        }
        d.eng.flush_if_err(&mut cx);
        let sent = self.run_req(&mut d.eng, &mut d.scratch, &mut cx, BUDGET);
        let end = if cx.sh.congested {
            PassEnd::Paced
        } else if (sent > 0 && d.eng.requester_ready()) || (ring_left && d.eng.sq_room() > 0) {
            PassEnd::More
        } else {
            PassEnd::Idle
        };
        if end != PassEnd::Paced {
            // The doorbell's next pass does what the requester left.
            cx.sh.resume = false;
        }
        self.finish(cx.sh);
        end
    }

    pub(super) fn sq_pending(&self) -> bool {
        let Some((ring, _, _)) = &self.sq else {
            return false;
        };
        let d = self.st.lock();
        !d.sh.sq_broken && ring.load_acquire(PROD) != d.sh.sq_cons && d.eng.sq_room() > 0
    }

    /// The send doorbell (process context). Keeps the `SQ_FLAG_KERNEL_BUSY` protocol of
    /// `provider/src/ring/mod.rs`: BUSY is set only for passes that end in clear-BUSY, full
    /// fence, re-check of the producer. Passes repeat while the QP has work it can do now, with
    /// `cond_resched()` in between; a pending fatal signal, a broken ring or a congested wire
    /// ends the doorbell (the continuation resumes what is left). Those three clear BUSY
    /// without the re-check: the continuation pulls the ring itself (a broken ring is never
    /// read again), and a provider that sees BUSY clear rings again.
    pub(crate) fn doorbell(&self) -> Result {
        let Some((ring, _, _)) = &self.sq else {
            return Err(EINVAL);
        };
        for _ in 0..MAX_PASSES {
            ring.store_release(FLAGS, uapi::SQ_FLAG_KERNEL_BUSY);
            let end = with_bh_disabled(|| {
                let mut out = self.fabric.outbox(DOORBELL_BULK, Some(self));
                let end = self.pass(&mut out);
                deliver(&self.fabric, &mut out);
                // An ACK delivered to us opened the window: the next pass sends.
                if end == PassEnd::Idle && out.driver_go {
                    PassEnd::More
                } else {
                    end
                }
            });
            match end {
                PassEnd::Broken | PassEnd::Paced => {
                    ring.store_release(FLAGS, 0);
                    return Ok(());
                }
                PassEnd::More | PassEnd::Idle => {}
            }
            if end == PassEnd::Idle {
                ring.store_release(FLAGS, 0);
                fence(Ordering::SeqCst);
                if !with_bh_disabled(|| self.sq_pending()) {
                    return Ok(());
                }
            }
            if bh::fatal_signal_pending() {
                ring.store_release(FLAGS, 0);
                self.resume_soon();
                return Ok(());
            }
            bh::cond_resched();
        }
        ring.store_release(FLAGS, 0);
        self.resume_soon();
        Ok(())
    }

    /// Writes one slot of a kernel consumer's ring with `write(ring, offset)` and publishes it.
    /// The producer index is ours alone (under `kpost`); `ENOMEM` when `cap` WRs are already
    /// held (for the SQ: posted and not yet completed).
    pub(super) fn kernel_produce(
        &self,
        ring: &SharedRing,
        (slots, cap): (u32, u32),
        slot_size: usize,
        write: impl FnOnce(&SharedRing, usize) -> Result,
    ) -> Result {
        with_bh_disabled(|| {
            let _g = self.kpost.lock();
            let prod = ring.load_acquire(PROD);
            if prod.wrapping_sub(ring.load_acquire(CONS)) >= cap.min(slots) {
                return Err(ENOMEM);
            }
            write(ring, HDR + (prod & (slots - 1)) as usize * slot_size)?;
            ring.store_release(PROD, prod.wrapping_add(1));
            Ok(())
        })
    }

    /// Queues a kernel consumer's send WQE (checked against the QP's caps by the caller, so it
    /// fits the slot); [`QpInner::kernel_doorbell`] processes it.
    pub(crate) fn post_kernel_send(&self, hdr: &SendWqe, sges: &[Sge], inline: &[u8]) -> Result {
        let Some((ring, slots, slot_size)) = &self.sq else {
            return Err(EINVAL);
        };
        self.kernel_produce(ring, (*slots, self.max_send_wr), *slot_size, |r, off| {
            let body = off + size_of::<SendWqe>();
            if body + inline.len().max(size_of_val(sges)) > off + *slot_size {
                return Err(EINVAL);
            }
            r.write(off, &tp::encode_send_wqe(hdr))?;
            r.write(body, inline)?;
            for (i, s) in sges.iter().enumerate() {
                r.write(body + i * size_of::<Sge>(), &tp::encode_sge(s))?;
            }
            Ok(())
        })
    }

    /// Queues a kernel consumer's receive WQE. A QP in ERR completes it with WR_FLUSH_ERR at
    /// once (`ib_drain_qp` relies on that).
    pub(crate) fn post_kernel_recv(&self, wr_id: u64, sges: &[Sge]) -> Result {
        let Some((ring, slots, slot_size)) = &self.rq else {
            return Err(EINVAL);
        };
        if sges.len() > self.max_recv_sge as usize {
            return Err(EINVAL);
        }
        self.kernel_produce(ring, (*slots, self.max_recv_wr), *slot_size, |r, off| {
            write_recv_slot(r, off, *slot_size, wr_id, sges)
        })?;
        self.flush_if_err_now();
        Ok(())
    }

    /// Completes what was posted to a QP in ERR (nothing in other states).
    pub(super) fn flush_if_err_now(&self) {
        with_bh_disabled(|| {
            let mut out = self.fabric.outbox(0, None);
            {
                let mut g = self.st.lock();
                let d = &mut *g;
                if d.eng.state() == QpState::Err {
                    let mut cx = self.ctx(&mut d.sh, &mut out);
                    self.pull_sq(&mut d.eng, &mut cx);
                    d.eng.flush_if_err(&mut cx);
                    self.finish(cx.sh);
                }
            }
            deliver(&self.fabric, &mut out);
        });
    }

    /// A kernel consumer's doorbell: never sleeps (ULPs post from softirq and under their own
    /// spinlocks), so a few bounded passes, and the continuation for what is left.
    pub(crate) fn kernel_doorbell(&self) {
        if bh::irqs_disabled() {
            // Under the consumer's `spin_lock_irqsave`: nothing may be sent from here (the
            // stack's transmit path enables bottom halves); the continuation sends it.
            self.resume_soon();
            return;
        }
        for _ in 0..KERNEL_PASSES {
            let end = with_bh_disabled(|| {
                let mut out = self.fabric.outbox(DOORBELL_BULK, Some(self));
                let end = self.pass(&mut out);
                deliver(&self.fabric, &mut out);
                if end == PassEnd::Idle && out.driver_go {
                    PassEnd::More
                } else {
                    end
                }
            });
            if end != PassEnd::More {
                return;
            }
        }
        self.resume_soon();
    }
}
