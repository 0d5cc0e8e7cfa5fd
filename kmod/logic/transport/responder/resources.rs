// SPDX-License-Identifier: GPL-2.0-only
//! The responder's resources: READs, atomics, ATOMIC WRITEs and FLUSHes executed into them,
//! duplicates answered from them, and the paced stream of responses they owe.

use super::*;

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// Makes room for a new (in-sequence) READ or atomic: evicts the oldest resource when all
    /// `capacity` are in use. A requester keeps at most `max_dest_rd_atomic` outstanding, so a
    /// new one proves it is done with the oldest (its PSN is past that one's range): a replay
    /// of it still under way (a duplicate of a READ whose original answer was only late) is
    /// cut short, as rdma_rxe reuses its oldest resource. Only a peer that has more outstanding
    /// than `max_dest_rd_atomic` (the oldest still owes its first answer) gets no room.
    pub(super) fn res_slot(&mut self) -> Option<usize> {
        let cap = self.capacity();
        if cap == 0 {
            return None;
        }
        // A lowered max_dest_rd_atomic (RESET to a new connection) shrinks the window.
        while self.resp.res_len >= cap {
            let oldest = self.resp.res_head;
            let o = &self.resp.res[oldest];
            if o.pending() && !o.replayed {
                return None;
            }
            self.resp.evicted = Some(o.psn.wrapping_add(o.count.max(1) - 1));
            self.resp.res[oldest] = Resource::default();
            self.resp.res_head = self.resp.at(1);
            self.resp.res_len -= 1;
            self.resp.pend_from = self.resp.pend_from.saturating_sub(1);
        }
        let i = self.resp.at(self.resp.res_len);
        self.resp.res_len += 1;
        self.resp.owes_at(self.resp.res_len - 1);
        Some(i)
    }

    pub(super) fn rx_read<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let psn = pkt.bth().psn;
        let Some(reth) = pkt.reth() else {
            self.stat(env, Stat::RxBadHeaders, 1);
            return;
        };
        // C9-94: a READ's DMA length is at most 2^31. And its responses must fit in half the
        // PSN space (a READ of 2^23 packets or more, 2 GiB at a 256-byte MTU, would make its
        // own first PSN look like a future one): NAK Invalid Request.
        let too_many = Segmentation::new(reth.len, self.cfg.mtu)
            .is_some_and(|s| s.count() >= crate::logic::psn::PSN_HALF);
        if u64::from(reth.len) > MAX_MSG || too_many {
            self.stat(env, Stat::RxBadHeaders, 1);
            self.fail_invalid(env, scratch, psn);
            return;
        }
        if reth.len != 0
            && !self.remote_ok(
                env,
                scratch,
                (psn, true),
                access::REMOTE_READ,
                (reth.rkey, reth.va, u64::from(reth.len)),
                Access::RemoteRead,
            )
        {
            return;
        }
        let Some(seg) = Segmentation::new(reth.len, self.cfg.mtu) else {
            return;
        };
        let Some(i) = self.res_slot() else {
            self.fail(env, scratch, psn, Fault::Invalid, None);
            return;
        };
        self.resp.msn = (self.resp.msn + 1) & wire::MASK24;
        self.resp.epsn = psn.wrapping_add(seg.count());
        self.resp.res[i] = Resource {
            kind: ResKind::Read,
            psn,
            count: seg.count(),
            rkey: reth.rkey,
            va: reth.va,
            len: reth.len,
            orig: 0,
            msn: self.resp.msn,
            next: 0,
            first: 0,
            replays_left: READ_REPLAYS,
            refilled_ms: env.now_ms(),
            high: 0,
            replayed: false,
        };
    }

    pub(super) fn rx_atomic<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let psn = pkt.bth().psn;
        let Some(a) = pkt.atmeth() else {
            self.stat(env, Stat::RxBadHeaders, 1);
            return;
        };
        if a.va % 8 != 0 {
            self.fail(env, scratch, psn, Fault::Invalid, None);
            return;
        }
        if !self.remote_ok(
            env,
            scratch,
            (psn, true),
            access::REMOTE_ATOMIC,
            (a.rkey, a.va, 8),
            Access::RemoteAtomic,
        ) {
            return;
        }
        // Room for its acknowledge first: an atomic that cannot be answered is not executed.
        let Some(i) = self.res_slot() else {
            self.fail(env, scratch, psn, Fault::Invalid, None);
            return;
        };
        let op = if pkt.info().op == Operation::CompareSwap {
            AtomicOp::CmpSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let orig = match env.mem_atomic(a.rkey, a.va, op) {
            Ok(v) => v,
            Err(MemError::NotPresent) => {
                // Invalidated since the check above: not executed, asked for again.
                self.resp.res_len -= 1;
                self.odp_miss(env, psn, true);
                return;
            }
            Err(_) => {
                self.resp.res_len -= 1;
                self.remote_access_error(env, scratch, psn, true);
                return;
            }
        };
        self.record_one(i, ResKind::Atomic, psn, a.rkey, a.va, 8, orig);
    }

    /// Records an executed ATOMIC WRITE or FLUSH at `psn` in resource `i`: its answer is owed.
    pub(super) fn record_placement(&mut self, i: usize, psn: Psn, rkey: u32, va: u64) {
        self.record_one(i, ResKind::Placement, psn, rkey, va, 0, 0);
    }

    /// Records an executed single-packet request (an atomic, an ATOMIC WRITE or a FLUSH) at
    /// `psn` in resource `i`, with the value its answer carries: the answer is owed, and a
    /// duplicate gets it again without a second execution.
    #[expect(clippy::too_many_arguments)]
    pub(super) fn record_one(
        &mut self,
        i: usize,
        kind: ResKind,
        psn: Psn,
        rkey: u32,
        va: u64,
        len: u32,
        orig: u64,
    ) {
        self.resp.msn = (self.resp.msn + 1) & wire::MASK24;
        self.resp.epsn = psn.next();
        self.resp.res[i] = Resource {
            kind,
            psn,
            count: 1,
            rkey,
            va,
            len,
            orig,
            msn: self.resp.msn,
            next: 0,
            first: 0,
            replays_left: 0,
            refilled_ms: 0,
            high: 0,
            replayed: false,
        };
    }

    /// ATOMIC WRITE (IBTA 1.5 A19.4): the 8-byte payload is placed at the RETH address in one
    /// store, after everything placed before it. The QP and the MR need REMOTE_WRITE (as
    /// rdma_rxe checks); the payload and the RETH length must be exactly 8 bytes (oA19-28) and
    /// the address 8-byte aligned, or the request is invalid.
    pub(super) fn rx_atomic_write<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        pkt: &Packet<'_>,
    ) {
        let psn = pkt.bth().psn;
        let Some(reth) = pkt.reth() else {
            self.stat(env, Stat::RxBadHeaders, 1);
            return;
        };
        let payload = pkt.payload();
        let Ok(bytes) = <[u8; 8]>::try_from(payload) else {
            self.fail(env, scratch, psn, Fault::Invalid, None);
            return;
        };
        if reth.len != 8 || pkt.bth().pad != 0 || reth.va % 8 != 0 {
            self.fail(env, scratch, psn, Fault::Invalid, None);
            return;
        }
        if !self.remote_ok(
            env,
            scratch,
            (psn, true),
            access::REMOTE_WRITE,
            (reth.rkey, reth.va, 8),
            Access::RemoteWrite,
        ) {
            return;
        }
        let Some(i) = self.res_slot() else {
            self.fail(env, scratch, psn, Fault::Invalid, None);
            return;
        };
        let op = AtomicOp::Write {
            value: u64::from_ne_bytes(bytes),
        };
        let done = env.mem_atomic(reth.rkey, reth.va, op);
        if done == Err(MemError::NotPresent) {
            self.resp.res_len -= 1;
            self.odp_miss(env, psn, true);
            return;
        }
        if done.is_err() {
            self.resp.res_len -= 1;
            self.remote_access_error(env, scratch, psn, true);
            return;
        }
        self.record_placement(i, psn, reth.rkey, reth.va);
    }

    /// RDMA FLUSH (IBTA 1.5 A19.3): what was placed before it becomes globally visible (and
    /// persistent) in the byte range of the RETH, or in the whole MR of its R_Key. The QP and
    /// the MR need the `IB_ACCESS_FLUSH_*` right of each placement type asked for (as rdma_rxe
    /// checks); an unknown placement type or selectivity level is an invalid request.
    pub(super) fn rx_flush<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let psn = pkt.bth().psn;
        let (Some(reth), Some(feth)) = (pkt.reth(), pkt.feth()) else {
            self.stat(env, Stat::RxBadHeaders, 1);
            return;
        };
        let ty = u32::from(feth.placement_type);
        let level = u32::from(feth.selectivity);
        if ty == 0 || ty & !(flush::GLOBAL | flush::PERSISTENT) != 0 || level > flush::MR {
            self.fail(env, scratch, psn, Fault::Invalid, None);
            return;
        }
        let need = flush::rights(ty);
        if self.cfg.access & need != need {
            self.remote_access_error(env, scratch, psn, true);
            return;
        }
        let Some(i) = self.res_slot() else {
            self.fail(env, scratch, psn, Fault::Invalid, None);
            return;
        };
        let whole = level == flush::MR;
        if env
            .mem_flush(reth.rkey, reth.va, u64::from(reth.len), whole, need)
            .is_err()
        {
            self.resp.res_len -= 1;
            self.remote_access_error(env, scratch, psn, true);
            return;
        }
        self.record_placement(i, psn, reth.rkey, reth.va);
    }

    /// A request below the expected PSN (its answer was lost, or the packet was duplicated).
    pub(super) fn rx_duplicate<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>) {
        let psn = pkt.bth().psn;
        // Whether it continues a go-back-N sweep (the previous duplicate ended right before it)
        // whose first READ paid for it.
        let paid = match self.resp.sweep_next {
            Some((p, paid)) if p == psn => paid,
            _ => false,
        };
        self.resp.sweep_next = Some((psn.next(), paid));
        match pkt.info().op {
            Operation::AtomicWrite | Operation::Flush => {
                // Answered again from its resource, never executed again.
                let rkey = pkt.reth().map(|r| r.rkey);
                let Some((k, i)) = self.resp.find(psn) else {
                    self.stat(env, Stat::DuplicateNoResource, 1);
                    return;
                };
                let r = &mut self.resp.res[i];
                if r.kind != ResKind::Placement || r.psn != psn || rkey != Some(r.rkey) {
                    self.stat(env, Stat::DuplicateNoResource, 1);
                    return;
                }
                r.next = 0;
                r.first = 0;
                self.resp.owes_at(k);
            }
            Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd => {
                let rkey = pkt.reth().map(|r| r.rkey).or(pkt.atmeth().map(|a| a.rkey));
                let Some((k, i)) = self.resp.find(psn) else {
                    self.stat(env, Stat::DuplicateNoResource, 1);
                    return;
                };
                let r = &self.resp.res[i];
                let read = pkt.info().op == Operation::RdmaReadRequest;
                // Only what was recorded is answered again, and only to a request that names it.
                if rkey != Some(r.rkey)
                    || r.kind != (if read { ResKind::Read } else { ResKind::Atomic })
                    || (!read && r.psn != psn)
                {
                    self.stat(env, Stat::DuplicateNoResource, 1);
                    return;
                }
                self.resp.sweep_next = Some((r.psn.wrapping_add(r.count.max(1)), paid));
                let from = psn.distance_from(r.psn);
                if r.next < r.count && from >= r.next {
                    // The answer under way reaches it: nothing to start.
                    return;
                }
                if read {
                    if !self.charge_replay(env, k, i, from, paid) {
                        self.resp.sweep_next = None;
                        self.stat(env, Stat::ReadReplaysRefused, 1);
                        return;
                    }
                    if let Some((_, p)) = self.resp.sweep_next.as_mut() {
                        *p = true;
                    }
                    self.stat(env, Stat::ReadReplays, 1);
                }
                let r = &mut self.resp.res[i];
                r.next = from;
                r.first = from;
                r.replayed = true;
                self.resp.owes_at(k);
            }
            _ => {
                // Re-acknowledge everything received so far, short of a READ or atomic.
                let all = self.resp.epsn.wrapping_sub(1);
                let ack = self.resp.ack_psn(all, psn);
                self.resp.ack_pending = Some(ack);
                // And again if the requester then goes quiet (each duplicate restarts the wait).
                if self.cfg.qp_type == QpType::Rc {
                    self.resp.reack_psn = ack;
                    self.resp.reack_left = REACK_TRIES;
                    env.set_reack_timer(Some(reack_delay(REACK_TRIES)));
                }
            }
        }
    }

    /// Whether a duplicate of the READ in resource `i` (the `k`-th oldest), asking from its
    /// packet `from`, may start a replay; charges it to the budget ([`READ_REPLAYS`]).
    /// `paid`: it continues a go-back-N sweep whose first READ paid already.
    pub(super) fn charge_replay<E: Env>(
        &mut self,
        env: &mut E,
        k: usize,
        i: usize,
        from: u32,
        paid: bool,
    ) -> bool {
        // Asking from further on than any duplicate before: the requester got further.
        if from > self.resp.res[i].high {
            self.resp.res[i].high = from;
            self.resp.refill_replays(k);
        }
        let now = env.now_ms();
        let r = &mut self.resp.res[i];
        // Time gives replays back, one per READ_REPLAY_REFILL_MS.
        let back = now.wrapping_sub(r.refilled_ms) / READ_REPLAY_REFILL_MS;
        if back > 0 {
            let left = u64::from(r.replays_left) + back;
            r.replays_left = left.min(u64::from(READ_REPLAYS)) as u8;
            r.refilled_ms = now;
        }
        if paid {
            return true;
        }
        if r.replays_left == 0 {
            return false;
        }
        r.replays_left -= 1;
        true
    }

    /// Sends up to `budget` owed response packets, oldest first, then the NAK or coalesced
    /// ACK once nothing is owed. Returns the packets sent.
    pub fn run_responder<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], budget: u32) -> u32 {
        let mut sent = 0;
        'owed: while sent < budget && self.state != QpState::Err {
            let Some((_, i)) = self.resp.first_owed() else {
                break;
            };
            // Resource `i` stays the oldest owed one until it is sent in full (a packet only
            // advances `i`, or fails the QP): no new search per packet.
            while sent < budget && self.state != QpState::Err && self.resp.res[i].pending() {
                sent += 1;
                if self.emit_response(env, scratch, i) != Emit::Sent {
                    break 'owed;
                }
            }
        }
        if sent < budget {
            self.flush_ack(env, scratch);
        }
        self.settle(env);
        sent
    }

    /// Sends the next response packet of resource `i`.
    pub(super) fn emit_response<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        i: usize,
    ) -> Emit {
        let r = self.resp.res[i];
        self.resp.res[i].next = r.next + 1;
        let mut h = Headers::new(Bth {
            pkey: BTH_DEF_PKEY,
            dest_qp: self.cfg.dest_qpn,
            ..Bth::default()
        });
        let built = match r.kind {
            ResKind::Atomic => {
                h.bth.opcode = opcode::RC_ATOMIC_ACKNOWLEDGE;
                h.bth.psn = r.psn;
                h.aeth = Some(Aeth::ack(r.msn, AETH_ACK_UNLIMITED));
                h.atmack = Some(AtomicAckEth { orig: r.orig });
                super::super::assemble(scratch, &h, 0, |_| Ok(()))
            }
            _ => {
                let Some(s) =
                    Segmentation::new(r.len, self.cfg.mtu).and_then(|g| g.segment(r.next))
                else {
                    return Emit::Sent;
                };
                let pos = Position::of(r.next - r.first, r.count - r.first).unwrap_or(s.position);
                h.bth.opcode = opcode::read_response_opcode(pos);
                h.bth.psn = s.psn(r.psn);
                if pos != Position::Middle {
                    h.aeth = Some(Aeth::ack(r.msn, AETH_ACK_UNLIMITED));
                }
                let at = r.va.wrapping_add(u64::from(s.offset));
                super::super::assemble(scratch, &h, s.len as usize, |buf| {
                    if buf.is_empty() {
                        // A zero-length READ names no memory (C9-88): its rkey is not used.
                        return Ok(());
                    }
                    env.mem_read(r.rkey, at, buf, Access::RemoteRead)
                        .map_err(|e| {
                            if e == MemError::NotPresent {
                                wqe::NOT_PRESENT
                            } else {
                                wc_status::REM_ACCESS_ERR
                            }
                        })
                })
            }
        };
        match built {
            Ok(n) => {
                self.counters.add(Stat::SentPkts, 1);
                self.counters.add(Stat::SentBytes, n as u64);
                let out = env.emit(&scratch[..n], Dest::Connected);
                if out == Emit::Dropped {
                    // Dropped before it left: owed again, from this packet.
                    self.resp.res[i].next = r.next;
                }
                out
            }
            Err(wqe::NOT_PRESENT) => {
                // A page was invalidated under the READ (its fault is queued): owed again from
                // this packet; the QP's work resumes it once the page is in.
                self.stat(env, Stat::OdpMisses, 1);
                self.resp.res[i].next = r.next;
                Emit::Dropped
            }
            Err(_) => {
                // The MR went away (or lost its rights) under the READ.
                let p = h.bth.psn;
                self.fail(env, scratch, p, Fault::Access, None);
                Emit::Sent
            }
        }
    }
}
