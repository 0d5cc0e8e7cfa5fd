// SPDX-License-Identifier: GPL-2.0-only

//! RDMA WRITE packets placed ahead of the expected PSN.
//!
//! A WRITE's first (or only) packet carries its RETH, so once it has arrived every later
//! packet of the message has a known place: `(psn - first) * mtu` bytes into the target. A
//! packet that overtook an earlier one, or followed a lost one, is then validated as the
//! in-order path would validate it and placed at once; the expected PSN later moves over it
//! without the requester having to send it again (IRN's out-of-order placement, with no wire
//! change: IBTA leaves a WRITE's target undefined until the WRITE completes, so placing early
//! is invisible, and a go-back-N requester's resends are answered as duplicates).
//!
//! The record is bounded and allocation free: [`CTXS`] WRITE messages and [`AHEAD`] PSNs past
//! the expected one (a bitmap of 64 bytes). Anything beyond it is treated as before: a gap.

use super::{Fault, InMsg, Resource};
use crate::logic::transport::{
    access, cqe, wc_flags, wc_opcode, wc_status, Access, CqSel, Engine, Env, MemError, RecvTake,
    SqEntry, Stat, HOLE_AFTER, MAX_MSG, RENAK_EVERY,
};
use crate::logic::{
    opcode::{Operation, Position},
    psn::Psn,
    qp_state::{QpState, QpType},
    wire::{self, Aeth, NakCode, Packet},
};
use core::ops::DerefMut;

/// PSNs past the expected one that can be remembered (the same window as READ responses').
pub(super) const AHEAD: u32 = crate::logic::transport::ahead::AHEAD;
/// WRITE messages ahead of (or around) the expected PSN that can be remembered.
pub(super) const CTXS: usize = 8;

const WORDS: usize = crate::logic::transport::ahead::WORDS;

/// A WRITE message whose first packet arrived (in order or ahead) and whose RETH was checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct WriteCtx {
    /// First PSN of the message.
    pub(super) first: Psn,
    /// Packets of the message (at least 1).
    pub(super) npkts: u32,
    pub(super) va: u64,
    pub(super) rkey: u32,
    /// The RETH's DMA length.
    pub(super) len: u64,
    /// The last packet was placed ahead and carried this immediate (WRITE_WITH_IMM).
    pub(super) imm: Option<u32>,
    /// The last packet placed ahead asked for the solicited event.
    pub(super) se: bool,
}

impl WriteCtx {
    pub(super) fn last(&self) -> Psn {
        self.first.wrapping_add(self.npkts.max(1) - 1)
    }

    pub(super) fn holds(&self, psn: Psn) -> bool {
        psn.in_window(self.first, self.npkts.max(1))
    }
}

/// The WRITE packets placed past the expected PSN, and the messages they belong to.
#[derive(Clone, Copy, Debug, Default)]
pub(in crate::logic::transport) struct WriteAhead {
    /// Bit `i`: PSN `base + i` is placed.
    base: Psn,
    bits: [u64; WORDS],
    ctx: [Option<WriteCtx>; CTXS],
}

impl WriteAhead {
    /// Forgets everything (the requester sends what it still owes again).
    pub(in crate::logic::transport) fn clear(&mut self) {
        *self = Self::default();
    }

    /// Whether nothing is recorded.
    pub(super) fn is_empty(&self) -> bool {
        self.bits.iter().all(|&w| w == 0) && self.ctx.iter().all(Option::is_none)
    }

    /// Packets placed ahead and not yet passed (`rdma res`, tests).
    pub(in crate::logic::transport) fn count(&self) -> u32 {
        self.bits.iter().map(|w| w.count_ones()).sum()
    }

    /// Moves the bitmap's base to `epsn` (the expected PSN moved forward in order); a base
    /// that is not behind `epsn` within the window empties it.
    fn rebase(&mut self, epsn: Psn) {
        let d = epsn.diff(self.base);
        if d < 0 || d as u32 >= AHEAD {
            self.bits = [0; WORDS];
        } else {
            self.shift(d as u32);
        }
        self.base = epsn;
    }

    fn shift(&mut self, k: u32) {
        crate::logic::transport::ahead::shift_window(&mut self.bits, k);
    }

    /// The bit index of `psn` past `epsn`, if it can be recorded (`psn` after `epsn`, within
    /// [`AHEAD`]).
    fn index(&mut self, epsn: Psn, psn: Psn) -> Option<u32> {
        let d = psn.diff(epsn);
        if d <= 0 || d as u32 >= AHEAD {
            return None;
        }
        self.rebase(epsn);
        Some(d as u32)
    }

    /// Whether `psn` (after `epsn`) is placed already.
    pub(super) fn has(&mut self, epsn: Psn, psn: Psn) -> bool {
        match self.index(epsn, psn) {
            Some(i) => self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0,
            None => false,
        }
    }

    /// Whether `psn` could be recorded.
    pub(super) fn fits(epsn: Psn, psn: Psn) -> bool {
        let d = psn.diff(epsn);
        d > 0 && (d as u32) < AHEAD
    }

    /// Records `psn` (after `epsn`, [`Self::fits`]) as placed.
    pub(super) fn set(&mut self, epsn: Psn, psn: Psn) {
        if let Some(i) = self.index(epsn, psn) {
            self.bits[(i / 64) as usize] |= 1 << (i % 64);
        }
    }

    /// If `epsn` itself is placed: clears it and returns true (the expected PSN moves past
    /// it).
    pub(super) fn take(&mut self, epsn: Psn) -> bool {
        self.rebase(epsn);
        if self.bits[0] & 1 == 0 {
            return false;
        }
        self.shift(1);
        self.base = epsn.next();
        true
    }

    /// The recorded message whose PSN range holds `psn`.
    pub(super) fn find(&self, psn: Psn) -> Option<WriteCtx> {
        self.ctx.iter().flatten().find(|c| c.holds(psn)).copied()
    }

    /// Records a message (replacing one with the same first PSN). False when there is no
    /// room, or when it overlaps a different recorded message (a malformed or inconsistent
    /// request: it is not placed ahead).
    pub(super) fn add(&mut self, c: WriteCtx) -> bool {
        if let Some(o) = self.find_first(c.first) {
            // Known already; another RETH at the same PSN is not placed.
            return (o.npkts, o.va, o.rkey, o.len) == (c.npkts, c.va, c.rkey, c.len);
        }
        if self
            .ctx
            .iter()
            .flatten()
            .any(|o| o.holds(c.first) || o.holds(c.last()) || c.holds(o.first))
        {
            return false;
        }
        match self.ctx.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some(c);
                true
            }
            None => false,
        }
    }

    fn find_first(&self, first: Psn) -> Option<WriteCtx> {
        self.ctx
            .iter()
            .flatten()
            .find(|c| c.first == first)
            .copied()
    }

    /// Updates the recorded message with first PSN `first` (its last packet was placed).
    pub(super) fn update(&mut self, c: WriteCtx) {
        if let Some(slot) = self
            .ctx
            .iter_mut()
            .find(|s| s.is_some_and(|s| s.first == c.first))
        {
            *slot = Some(c);
        }
    }

    /// Forgets the message with first PSN `first`.
    pub(super) fn remove(&mut self, first: Psn) {
        for s in self.ctx.iter_mut() {
            if s.is_some_and(|c| c.first == first) {
                *s = None;
            }
        }
    }

    /// Forgets every message that lies wholly before `epsn`.
    pub(super) fn prune(&mut self, epsn: Psn) {
        for s in self.ctx.iter_mut() {
            if s.is_some_and(|c| c.last().before(epsn)) {
                *s = None;
            }
        }
    }

    /// Whether any PSN past `epsn` is placed (a hole is left before it).
    pub(super) fn any_placed(&self) -> bool {
        self.bits.iter().any(|&w| w != 0)
    }
}

/// What [`Engine::place_ahead`] did with a packet past the expected PSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ahead {
    /// Placed and recorded.
    Placed,
    /// Placed before: not placed again.
    Duplicate,
    /// Not placeable (not a WRITE, its first packet unknown, beyond the record, or it would
    /// fail in order): dropped as a gap, as before.
    Dropped,
}

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// Packets in a WRITE of `len` bytes.
    fn write_npkts(&self, len: u64) -> u32 {
        let mtu = u64::from(self.cfg.mtu.max(1));
        len.div_ceil(mtu).max(1) as u32
    }

    /// The WRITE in progress (its first packet executed in order), as a record.
    fn current_write(&self) -> Option<WriteCtx> {
        (self.resp.in_msg == InMsg::Write).then(|| WriteCtx {
            first: self.resp.wr_first,
            npkts: self.write_npkts(self.resp.wr_len),
            va: self.resp.wr_va,
            rkey: self.resp.wr_rkey,
            len: self.resp.wr_len,
            imm: None,
            se: false,
        })
    }

    /// RC: a request packet past the expected PSN. A WRITE packet whose message's first
    /// packet is known (executed in order, or placed ahead) is checked as the in-order path
    /// checks it and placed; its PSN is recorded. Anything that would fail in order is not
    /// placed (it fails when it arrives in order).
    pub(super) fn place_ahead<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>) -> Ahead {
        let info = pkt.info();
        let psn = pkt.bth().psn;
        let epsn = self.resp.epsn;
        if self.cfg.qp_type != QpType::Rc
            || info.op != Operation::RdmaWrite
            || !WriteAhead::fits(epsn, psn)
        {
            return Ahead::Dropped;
        }
        if self.resp.ahead.has(epsn, psn) {
            return Ahead::Duplicate;
        }
        let payload = pkt.payload();
        let mtu = u64::from(self.cfg.mtu);
        if !wire::payload_len_ok(info, payload.len(), self.cfg.mtu as usize) {
            return Ahead::Dropped;
        }
        self.resp.ahead.prune(epsn);
        let mut c = if info.position.is_start() {
            let Some(reth) = pkt.reth() else {
                return Ahead::Dropped;
            };
            let len = u64::from(reth.len);
            let allowed = self.cfg.access & access::REMOTE_WRITE != 0 || reth.len == 0;
            if len > MAX_MSG
                || !allowed
                || env
                    .mem_check(reth.rkey, reth.va, len, Access::RemoteWrite)
                    .is_err()
            {
                return Ahead::Dropped;
            }
            let c = WriteCtx {
                first: psn,
                npkts: self.write_npkts(len),
                va: reth.va,
                rkey: reth.rkey,
                len,
                imm: None,
                se: false,
            };
            if (info.position == Position::Only) != (c.npkts == 1) || !self.resp.ahead.add(c) {
                return Ahead::Dropped;
            }
            c
        } else if let Some(c) = self.resp.ahead.find(psn) {
            c
        } else {
            match self.current_write() {
                Some(c) if c.holds(psn) && self.resp.ahead.add(c) => c,
                _ => return Ahead::Dropped,
            }
        };
        let k = psn.distance_from(c.first);
        let last = psn == c.last();
        let off = u64::from(k) * mtu;
        let end = off + payload.len() as u64;
        // The opcode's place in the message, and C9-92: no more and no less than the RETH's
        // length.
        if info.position.is_start() != (k == 0)
            || info.position.is_end() != last
            || end > c.len
            || (last && end != c.len)
        {
            return Ahead::Dropped;
        }
        if !payload.is_empty()
            && env
                .mem_write(c.rkey, c.va.wrapping_add(off), payload, Access::RemoteWrite)
                .is_err()
        {
            return Ahead::Dropped;
        }
        if last {
            c.imm = pkt.immdt().map(|i| u32::from_ne_bytes(i.imm.to_be_bytes()));
            c.se = pkt.bth().se;
            self.resp.ahead.update(c);
        }
        self.resp.ahead.set(epsn, psn);
        self.stat(env, Stat::WritePacketsAhead, 1);
        Ahead::Placed
    }

    /// The expected PSN was executed: it moves over every placed PSN right after it, in order.
    /// A message whose last packet was placed completes here (WRITE_WITH_IMM takes its receive
    /// WQE and writes its completion now). If placed packets remain past a hole, the hole is
    /// NAKed at once; otherwise what was passed is acknowledged.
    pub(super) fn advance_ahead<E: Env>(&mut self, env: &mut E, scratch: &mut [u8]) {
        let mtu = u64::from(self.cfg.mtu);
        let mut moved = false;
        loop {
            if self.state == QpState::Err {
                self.resp.ahead.clear();
                return;
            }
            let p = self.resp.epsn;
            if !self.resp.ahead.take(p) {
                break;
            }
            let Some(c) = self.resp.ahead.find(p) else {
                // Nothing says where it belongs (cannot happen): sent again by the requester.
                self.resp.ahead.clear();
                break;
            };
            if p == c.first {
                if self.resp.in_msg != InMsg::None {
                    // Out of opcode sequence, as the in-order path would find it.
                    self.stat(env, Stat::RxBadHeaders, 1);
                    self.fail_invalid(env, scratch, p);
                    self.resp.ahead.clear();
                    return;
                }
                // The key may have been invalidated by what came before in order.
                let allowed = self.cfg.access & access::REMOTE_WRITE != 0 || c.len == 0;
                let checked = if allowed {
                    env.mem_check(c.rkey, c.va, c.len, Access::RemoteWrite)
                } else {
                    Err(MemError::Access)
                };
                match checked {
                    Ok(()) => {}
                    Err(MemError::NotPresent) => {
                        // An on-demand-paging page went away since the packets were placed:
                        // they are forgotten (the requester sends them again after the RNR
                        // NAK, and they are placed again once the pages are back).
                        self.resp.ahead.clear();
                        self.odp_miss(env, p, c.npkts == 1);
                        return;
                    }
                    Err(_) => {
                        self.resp.ahead.clear();
                        self.remote_access_error(env, scratch, p, c.npkts == 1);
                        return;
                    }
                }
                self.resp.wr_va = c.va;
                self.resp.wr_rkey = c.rkey;
                self.resp.wr_len = c.len;
                self.resp.wr_first = c.first;
                self.resp.in_msg = InMsg::Write;
            } else if self.resp.in_msg != InMsg::Write || self.resp.wr_first != c.first {
                self.resp.ahead.clear();
                break;
            }
            let k = u64::from(p.distance_from(c.first));
            self.resp.msg_off = k * mtu;
            if p == c.last() {
                if let Some(imm) = c.imm {
                    match self.take_recv(env) {
                        RecvTake::Taken => {}
                        RecvTake::Empty => {
                            // As in order: RNR NAK, and the last packet comes again.
                            self.stat(env, Stat::RxNoBuffer, 1);
                            self.resp.ahead.clear();
                            self.defer_nak(p, Aeth::rnr_nak(self.resp.msn, self.cfg.min_rnr_timer));
                            return;
                        }
                        RecvTake::Bad => {
                            self.resp.ahead.clear();
                            self.fail(env, scratch, p, Fault::Operational, None);
                            return;
                        }
                    }
                    if let Some(r) = self.resp.recv.take() {
                        let mut w = cqe(
                            r.wr_id,
                            wc_status::SUCCESS,
                            wc_opcode::RECV_RDMA_WITH_IMM,
                            self.cfg.qpn,
                        );
                        w.byte_len = c.len as u32;
                        w.imm_data = imm;
                        w.wc_flags |= wc_flags::WITH_IMM;
                        w.src_qp = self.cfg.dest_qpn;
                        self.post_se(env, CqSel::Recv, &w, c.se);
                    }
                }
                self.resp.msg_off = c.len;
                self.resp.in_msg = InMsg::None;
                self.resp.msn = (self.resp.msn + 1) & wire::MASK24;
                self.resp.ahead.remove(c.first);
            } else {
                self.resp.msg_off = (k + 1) * mtu;
            }
            self.resp.epsn = p.next();
            moved = true;
        }
        // A hole right after the packet a NAK asked for (the requester sent it again alone,
        // or began going back N with it) is NAKed at once as well; after packets that a
        // go-back-N requester is sending anyway, it is not.
        let renak = self.resp.nak_answered
            && self.resp.ahead.any_placed()
            && self.resp.nak_pending.is_none();
        if !moved && !renak {
            // (A NAK already queued, such as the RNR NAK of the packet just received, stays.)
            return;
        }
        self.resp.nak_sent = false;
        if self.resp.ahead.any_placed() {
            self.nak_gap(true);
        } else {
            self.resp.ack_pending = Some(self.resp.epsn.wrapping_sub(1));
        }
    }

    /// A request past the expected PSN (a gap): placed when it can be (a WRITE packet from a
    /// requester that announced it takes the ACK that then jumps; an IBTA requester, rdma_rxe's,
    /// may not: it gets go-back-N), the gap NAKed once, and for a requester that announced it,
    /// the NAK repeated every [`RENAK_EVERY`] packets placed and holes further on reported.
    pub(super) fn rx_gap<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let psn = pkt.bth().psn;
        let placing = self.resp.place_ahead && pkt.bth().sel;
        let placed = placing
            && match self.place_ahead(env, pkt) {
                Ahead::Placed => true,
                Ahead::Duplicate => {
                    self.stat(env, Stat::DuplicateRequests, 1);
                    false
                }
                Ahead::Dropped => false,
            };
        if !self.resp.nak_sent {
            self.nak_gap(placing);
        } else if placed {
            if pkt.bth().hole {
                // The first hole is NAKed already; a PSN missing further on is
                // reported once packets well past it arrived, so that holes are filled
                // side by side rather than one per round trip.
                self.report_hole(env, scratch, psn);
            }
            // The NAK again, every RENAK_EVERY packets placed past its hole.
            if let Some(n) = self.resp.gap_placed.as_mut() {
                *n += 1;
                if *n >= RENAK_EVERY {
                    self.nak_gap(true);
                }
            }
        }
    }

    /// A packet `psn` was placed past the first hole: the PSN [`HOLE_AFTER`] before it, if
    /// still missing, is reported, once (each PSN is looked at when the packet that far past
    /// it arrives). Only a packet of a WRITE whose first packet was placed (one that can be
    /// placed when it comes); a lost first packet is left to the sequence NAK, when it is the
    /// first hole.
    fn report_hole<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], psn: Psn) {
        let epsn = self.resp.epsn;
        let q = psn.wrapping_sub(HOLE_AFTER);
        if !q.after(epsn) || self.resp.ahead.has(epsn, q) {
            return;
        }
        if !self.resp.ahead.find(q).is_some_and(|c| q != c.first) {
            return;
        }
        let aeth = Aeth::nak(self.resp.msn, NakCode::PsnSeqError);
        let _ = self.send_answer(env, scratch, q, aeth, true);
    }

    /// A sequence NAK for the expected PSN; `repeat`: the requester announced placement, and
    /// the NAK is sent again while packets keep being placed past the hole.
    pub(super) fn nak_gap(&mut self, repeat: bool) {
        let e = self.resp.epsn;
        self.defer_nak(e, Aeth::nak(self.resp.msn, NakCode::PsnSeqError));
        if repeat {
            self.resp.gap_placed = Some(0);
        }
    }
}
