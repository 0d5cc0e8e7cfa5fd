// SPDX-License-Identifier: GPL-2.0-only
//! The engine's environment for one QP ([`Env`]): memory access through MR keys, the wire and
//! loopback, completions, events, receive WQEs and timers.

use crate::datapath::{
    loopback::Outbox,
    mr::{MrMem, MrView},
    qp::state::{OdpFault, QpInner, Shell, PACE_BURST},
    wq::{take_from_ring, CONS},
};
use crate::ib::{bh::with_bh_disabled, objects::QpEvent, timer, udp::XmitError};
use crate::logic::transport as tp;
use crate::logic::{
    dcqcn, idalloc,
    mw::{self, Reach},
    roce,
    stats::Stat,
    transport::{Access, AtomicOp, CqSel, Dest, Emit, Env, Event, MemError, RecvTake, RecvWr},
};
use crate::uapi::Cqe;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// The engine's environment for one QP, valid while its lock is held.
pub(crate) struct Ctx<'a, 'o> {
    pub(super) qp: &'a QpInner,
    pub(super) sh: &'a mut Shell,
    pub(super) out: &'a mut Outbox<'o>,
}

impl Ctx<'_, '_> {
    /// Looks up `key` for `len` bytes at `addr` with rights `acc` (PD, key, bounds, rights)
    /// and runs `f` on the memory with the offset into the MR (under a fast MR's lock).
    pub(super) fn with_mr<R>(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        acc: Access,
        f: impl FnOnce(MrView<'_>, u64) -> Result<R>,
    ) -> Result<R, MemError> {
        let remote = !matches!(acc, Access::LocalRead | Access::LocalWrite);
        self.with_mr_rights(key, addr, len, acc.rights(), false, remote, f)
    }

    /// [`Self::with_mr`] for the rights `need` (`IB_ACCESS_*`); with `whole`, the range is not
    /// looked at and `f` gets offset 0 (an RDMA FLUSH of the whole MR). A `remote` access
    /// (an rkey) may name a memory window.
    #[expect(clippy::too_many_arguments)]
    pub(super) fn with_mr_rights<R>(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
        whole: bool,
        remote: bool,
        f: impl FnOnce(MrView<'_>, u64) -> Result<R>,
    ) -> Result<R, MemError> {
        let qp: &QpInner = self.qp;
        let Some(m) = qp.fabric.mrs.get(idalloc::key_index(key)) else {
            if !remote {
                // A window's rkey is no lkey.
                return Err(MemError::BadKey);
            }
            let req = Reach {
                addr,
                len,
                need,
                whole,
            };
            return self.with_window(key, &req, f);
        };
        if m.pd != qp.pd {
            return Err(MemError::BadPd);
        }
        let bounds = |iova: u64, length: u64| -> Result<u64, MemError> {
            if whole {
                return Ok(0);
            }
            let off = addr.checked_sub(iova).ok_or(MemError::Bounds)?;
            if off.checked_add(len).map_or(true, |end| end > length) {
                return Err(MemError::Bounds);
            }
            Ok(off)
        };
        match &m.fast {
            None => {
                if m.key != key {
                    return Err(MemError::BadKey);
                }
                if m.access & need != need {
                    return Err(MemError::Access);
                }
                let off = bounds(m.iova, m.length)?;
                match f(MrView::Fixed(&m.mem), off) {
                    Ok(r) => Ok(r),
                    Err(e) if e == EAGAIN && matches!(m.mem, MrMem::Odp(_)) => {
                        Err(self.odp_missed(key, off, len))
                    }
                    Err(_) => Err(MemError::Bounds),
                }
            }
            Some(lock) => {
                let st = lock.lock();
                if !st.valid || st.key != key {
                    return Err(MemError::BadKey);
                }
                if st.access & need != need {
                    return Err(MemError::Access);
                }
                let off = bounds(st.iova, st.length)?;
                f(MrView::Fast(&st), off).map_err(|_| MemError::Bounds)
            }
        }
    }
}

/// Bytes past a missed range that its fault brings in as well (within the MR): one fault per
/// message or so rather than one per page (a fault of a range the process has not mapped in
/// full falls back to the missed range alone).
const ODP_FAULT_AHEAD: u64 = 512 * 1024;

impl Ctx<'_, '_> {
    /// An access to on-demand-paging MR `key` met a page that is not present (`len` bytes at
    /// MR offset `off`): the QP's work item faults the range in (process context) and then
    /// resumes the QP. A range whose last fault failed (the process's mapping does not allow
    /// the access) fails the access instead, once.
    fn odp_missed(&mut self, key: u32, off: u64, len: u64) -> MemError {
        let end = off.saturating_add(len.max(1));
        if let Some(f) = self.sh.odp_failed {
            if f.key == key && off < f.off.saturating_add(f.len.max(1)) && f.off < end {
                self.sh.odp_failed = None;
                return MemError::Access;
            }
        }
        if self.sh.odp_fault.is_none() {
            self.sh.odp_fault = Some(OdpFault { key, off, len });
            self.qp.resume_soon();
        }
        MemError::NotPresent
    }
}

impl QpInner {
    /// The QP's work item, before it resumes the QP: takes the on-demand-paging fault a data
    /// path access left ([`Ctx::odp_missed`]), in process context, outside every spinlock.
    pub(super) fn odp_fault_in(&self) {
        let taken = with_bh_disabled(|| {
            let mut g = self.st.lock();
            let f = g.sh.odp_fault.take()?;
            let m = self.fabric.mrs.get(idalloc::key_index(f.key))?;
            match &m.mem {
                MrMem::Odp(u) if m.key == f.key => Some((f, u.clone())),
                _ => None,
            }
        });
        let Some((f, umem)) = taken else {
            return;
        };
        let total = umem.len() as u64;
        let wide = f
            .len
            .saturating_add(ODP_FAULT_AHEAD)
            .min(total.saturating_sub(f.off));
        let done = umem
            .fault(f.off, wide)
            .or_else(|_| umem.fault(f.off, f.len));
        if done.is_err() {
            with_bh_disabled(|| self.st.lock().sh.odp_failed = Some(f));
        }
        // The last reference may be this one (the MR was deregistered meanwhile): released
        // here, in process context.
        drop(umem);
    }
}

impl Ctx<'_, '_> {
    /// A remote access through window rkey `key`: the window's rules ([`Window::resolve`]),
    /// then the MR it is bound to, looked up again (gone or replaced: a bad key). The window's
    /// lock is held through the access, so an invalidation that completed is never followed
    /// by an access through the old binding.
    fn with_window<R>(
        &self,
        key: u32,
        req: &Reach,
        f: impl FnOnce(MrView<'_>, u64) -> Result<R>,
    ) -> Result<R, MemError> {
        let fab = &self.qp.fabric;
        let w = fab
            .mws
            .get(idalloc::key_index(key))
            .ok_or(MemError::BadKey)?;
        let st = w.win.lock();
        let (mr, off) = st.resolve(key, self.qp.pd, self.qp.serial, req)?;
        let m = fab
            .mrs
            .get(mr.index)
            .filter(|m| m.key == mr.key && m.fast.is_none())
            .ok_or(MemError::BadKey)?;
        f(MrView::Fixed(&m.mem), off).map_err(|_| MemError::Bounds)
    }

    /// Invalidates window rkey `key` (LOCAL_INV, or a received SEND with invalidate when
    /// `remote`).
    fn mw_invalidate(&self, key: u32, remote: bool) -> Result<(), u32> {
        let fab = &self.qp.fabric;
        let w = fab
            .mws
            .get(idalloc::key_index(key))
            .ok_or(tp::wc_status::LOC_PROT_ERR)?;
        let old = w
            .win
            .lock()
            .invalidate(key, self.qp.pd, self.qp.serial, remote)
            .map_err(|_| tp::wc_status::LOC_PROT_ERR)?;
        if let Some(mr) = old {
            fab.unbind_mr(mr);
        }
        Ok(())
    }
}

impl Env for Ctx<'_, '_> {
    fn sq_retired(&mut self, outstanding: u32) {
        // The ring slot of the oldest WR still outstanding: the WRs taken and not retired are
        // the `outstanding` ones just below `sq_cons`.
        if let Some((ring, _, _)) = &self.qp.sq {
            ring.store_release(CONS, self.sh.sq_cons.wrapping_sub(outstanding));
        }
    }

    fn mem_check(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        self.with_mr(key, addr, len, acc, |m, off| m.ready(off, len))
    }

    fn mem_read(
        &mut self,
        key: u32,
        addr: u64,
        out: &mut [u8],
        acc: Access,
    ) -> Result<(), MemError> {
        if out.is_empty() {
            return Ok(());
        }
        self.with_mr(key, addr, out.len() as u64, acc, |m, off| m.read(off, out))
    }

    fn mem_write(&mut self, key: u32, addr: u64, data: &[u8], acc: Access) -> Result<(), MemError> {
        if data.is_empty() {
            return Ok(());
        }
        self.with_mr(key, addr, data.len() as u64, acc, |m, off| {
            m.write(off, data)
        })
    }

    fn mem_atomic(&mut self, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.with_mr(key, addr, 8, op.access(), |m, off| m.atomic(off, op))
    }

    fn mem_flush(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        whole_mr: bool,
        need: u32,
    ) -> Result<(), MemError> {
        self.with_mr_rights(key, addr, len, need, whole_mr, true, |_, _| Ok(()))?;
        // Every placement into the MR is a CPU store (a copy or an atomic) made before this
        // request was taken; a full barrier orders them before the answer that says they are
        // visible. No MR is registered for persistence (see `check_mr_access`), so no cache
        // write-back is owed.
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn mr_register(&mut self, key: u32, iova: u64, len: u64, access: u32) -> Result<(), u32> {
        let m = self
            .qp
            .fabric
            .mrs
            .get(idalloc::key_index(key))
            .filter(|m| m.pd == self.qp.pd)
            .ok_or(tp::wc_status::LOC_PROT_ERR)?;
        let lock = m.fast.as_ref().ok_or(tp::wc_status::LOC_PROT_ERR)?;
        let mut st = lock.lock();
        // The mapping must cover the range: pages from the one holding `iova`.
        let ps = st.page_size;
        let span = (iova & ps.wrapping_sub(1)).checked_add(len);
        let room = (st.pages.len() as u64).checked_mul(ps);
        match (span, room) {
            (Some(s), Some(r)) if ps.is_power_of_two() && s <= r => {}
            _ => return Err(tp::wc_status::LOC_PROT_ERR),
        }
        st.key = key;
        st.iova = iova;
        st.length = len;
        st.access = access;
        st.valid = true;
        Ok(())
    }

    fn mr_invalidate(&mut self, key: u32, remote: bool) -> Result<(), u32> {
        let Some(m) = self.qp.fabric.mrs.get(idalloc::key_index(key)) else {
            // Not an MR's key: a window's (type 2 only), or nothing.
            return self.mw_invalidate(key, remote);
        };
        if m.pd != self.qp.pd {
            return Err(tp::wc_status::LOC_PROT_ERR);
        }
        let lock = m.fast.as_ref().ok_or(tp::wc_status::LOC_PROT_ERR)?;
        let mut st = lock.lock();
        if st.key != key {
            return Err(tp::wc_status::LOC_PROT_ERR);
        }
        st.valid = false;
        Ok(())
    }

    fn mw_bind(&mut self, wr: &mw::BindWr) -> Result<(), u32> {
        const ERR: u32 = tp::wc_status::MW_BIND_ERR;
        let fab = &self.qp.fabric;
        let w = fab.mws.get(wr.mw_index).ok_or(ERR)?;
        let mr = if wr.length != 0 {
            fab.mrs.get(idalloc::key_index(wr.mr_lkey))
        } else {
            None
        };
        let facts = mr.as_ref().map(|m| m.facts());
        let mut st = w.win.lock();
        st.check_bind(wr, self.qp.pd, facts.as_ref())
            .map_err(|_| ERR)?;
        if let Some(m) = &mr {
            // The MR may have begun its deregistration (which waits for no window).
            m.windows
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, mw::mr_bind_ref)
                .map_err(|_| ERR)?;
        }
        let old = st.apply_bind(wr, facts.as_ref(), self.qp.serial);
        drop(st);
        if let Some(o) = old {
            fab.unbind_mr(o);
        }
        Ok(())
    }

    /// Loopback packets join the delivery's queue ([`Emit::Congested`] from its high mark on:
    /// the delivery drains it before more is generated); wire packets go to the UDP socket
    /// ([`Emit::Congested`] when the stack refused or dropped one: the continuation resumes on
    /// the next tick, so a congested path paces itself). A packet with no path or AH is
    /// dropped (that does not get better later).
    fn emit(&mut self, pkt: &[u8], dest: Dest) -> Emit {
        let fab = &self.qp.fabric;
        let (path, sport) = match dest {
            Dest::Connected => match self.sh.path {
                Some(p) => (p, p.udp_sport),
                None => {
                    fab.stats.add(Stat::TxDrops, 1);
                    return Emit::Sent;
                }
            },
            Dest::Ah { ah, qpn } => match fab.ahs.get(ah).filter(|a| a.pd == self.qp.pd) {
                Some(a) => (
                    a.path,
                    roce::udp_sport(a.path.av.flow_label, self.qp.qpn, qpn),
                ),
                None => {
                    fab.stats.add(Stat::TxDrops, 1);
                    return Emit::Sent;
                }
            },
        };
        // DCQCN: a QP whose rate a CNP cut sends its RC requests at that rate. One the pacer
        // holds back is dropped here and sent again by the pacing timer's continuation (the
        // engine rewinds to it, spending no retry).
        // An unlimited QP pays the one branch on `rp.active`; a limited one reads its own copy
        // of the settings (one atomic load to see that it is current), no device-wide lock.
        if self.sh.rp.active
            && !path.loopback
            && pkt.first().is_some_and(|&op| dcqcn::paced_opcode(op))
        {
            fab.dcqcn_refresh(&mut self.sh.dc);
            if self.sh.dc.settings.cc {
                let p = self.sh.dc.settings.params;
                let now = timer::now_us();
                self.sh.rp.tick(&p, now);
                self.sh.sync_limited(fab);
                if let Some(rate) = self.sh.rp.rate() {
                    // Room for two pacing ticks at the rate: the timer resumes a held QP a
                    // jiffy later, so a smaller budget would cap the rate below what DCQCN set.
                    let tick = 1_000_000 / timer::usecs_to_jiffies(1_000_000).max(1);
                    self.sh.pacer.burst = PACE_BURST.max(rate.saturating_mul(tick) / 4000);
                    let len = pkt.len() as u64;
                    if self.sh.pacer.take(len, rate, now).is_err() {
                        fab.stats.add(Stat::RatePaced, 1);
                        self.sh.congested = true;
                        self.sh.resume = true;
                        return Emit::Dropped;
                    }
                    self.sh.rp.on_sent(&p, len, now);
                }
            }
        }
        // A packet to our own GID, or to a group with members on this device, is delivered
        // here without the network stack (as an HCA loops multicast back to its own QPs; the
        // RoCEv2 socket keeps the tunnel default of no IP multicast loopback, so the stack
        // does not bring a second copy).
        let mut sent = Emit::Sent;
        if path.loopback || (path.multicast && fab.mcast.has_members(&path.av.dgid)) {
            let src = path.av.sgid.map(|s| s.gid).unwrap_or(path.av.dgid);
            let grh = path.loopback_grh(pkt.len());
            match self.out.push(pkt, &grh, src, path.av.dgid) {
                Some(true) => sent = Emit::Congested,
                Some(false) => {}
                None => {
                    // The device's loopback pool is lent out to other deliveries: dropped here,
                    // the engine sends it again when the pacing resumes it.
                    fab.stats.add(Stat::TxDrops, 1);
                    self.sh.congested = true;
                    self.sh.resume = true;
                    return Emit::Dropped;
                }
            }
        }
        // Without the socket (another driver holds UDP 4791 here) a group's packets reach the
        // members on this device only.
        if path.loopback || (path.multicast && !fab.udp.is_open()) {
            fab.stats.add(Stat::SentPkts, 1);
            fab.stats.add(Stat::SentBytes, pkt.len() as u64);
            return sent;
        }
        match fab.send(&path, sport, pkt, &self.qp.gauge) {
            Ok(()) => {
                fab.stats.add(Stat::SentPkts, 1);
                fab.stats.add(Stat::SentBytes, pkt.len() as u64);
                sent
            }
            Err(e) => {
                fab.stats.add(Stat::TxDrops, 1);
                self.sh.congested = true;
                self.sh.resume = true;
                match e {
                    // NET_XMIT_DROP/CN or no skb: dropped before it left, sent again at the
                    // next chance (the pacing timer's continuation).
                    XmitError::Congested => Emit::Dropped,
                    // It cannot be sent as addressed (no route, no socket): as loss on the
                    // wire, which the retransmit timer and its retries settle.
                    XmitError::Failed(_) => Emit::Congested,
                }
            }
        }
    }

    fn complete(&mut self, cq: CqSel, c: &Cqe, solicited: bool) -> bool {
        match cq {
            CqSel::Send => self.qp.send_cq.push(c, solicited, self.qp.ev.handle()),
            CqSel::Recv => self.qp.recv_cq.push(c, solicited, self.qp.ev.handle()),
        }
    }

    fn event(&mut self, ev: Event) {
        let e = match ev {
            Event::QpFatal => QpEvent::Fatal,
            Event::CommEst => QpEvent::CommEst,
            Event::SqDrained => QpEvent::SqDrained,
            Event::LastWqeReached => QpEvent::LastWqeReached,
            Event::QpReqErr => QpEvent::ReqErr,
            Event::QpAccessErr => QpEvent::AccessErr,
        };
        self.qp.ev.event(e);
    }

    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake {
        let r = if let Some(srq) = &self.qp.srq {
            srq.take(out)
        } else if let Some((ring, slots, slot_size)) = &self.qp.rq {
            let sh = &mut *self.sh;
            take_from_ring(
                ring,
                *slots,
                *slot_size,
                &mut sh.rq_cons,
                &mut sh.rq_broken,
                self.qp.max_recv_sge,
                out,
            )
        } else {
            RecvTake::Empty
        };
        if r == RecvTake::Bad {
            self.qp.fabric.bad_rings.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn arm_rnr_timer(&mut self, usecs: u32) {
        self.qp.timer.arm(usecs);
    }

    /// Restarts the retransmit timer (rounded up to whole jiffies, at least one) or stops it
    /// without waiting (we hold the QP lock with bottom halves disabled); an expiry already
    /// under way is recognised as stale by its deadline.
    fn set_retry_timer(&mut self, usecs: Option<u64>) {
        match usecs {
            Some(us) => {
                let at = timer::now().wrapping_add(timer::usecs_to_jiffies(us));
                self.sh.retry_at = Some(at);
                self.qp.retry.arm_at(at);
            }
            None => {
                self.sh.retry_at = None;
                self.qp.retry.cancel();
            }
        }
    }

    fn set_reack_timer(&mut self, usecs: Option<u32>) {
        match usecs {
            Some(us) => self.qp.reack.arm(us),
            None => self.qp.reack.cancel(),
        }
    }

    /// Device-wide totals (sent packets and bytes are counted by [`Env::emit`], where a packet
    /// really leaves; the engine keeps those per QP only).
    fn stat(&mut self, s: Stat, n: u64) {
        self.qp.fabric.stats.add(s, n);
    }

    /// Loopback packets lent out beyond this call's own queue: another CPU's delivery (bottom
    /// halves are disabled here, so it is not one this CPU interrupted) holds them. Not only
    /// this QP's: a conservative answer, and the engine waits a bounded number of times.
    fn in_transit(&mut self) -> bool {
        self.qp.fabric.pool.lock().lent() > self.out.len
    }

    /// The monotonic clock in microseconds: the clock of the RC round-trip estimate (the
    /// retransmit timer itself runs in jiffies, a granularity the engine allows for).
    fn clock_us(&mut self) -> Option<u64> {
        Some(timer::now_us())
    }

    /// `jiffies` in milliseconds (the clock of the READ replay budget).
    fn now_ms(&mut self) -> u64 {
        let hz = timer::usecs_to_jiffies(1_000_000).max(1);
        let j = timer::now();
        (j / hz) * 1000 + (j % hz) * 1000 / hz
    }
}
