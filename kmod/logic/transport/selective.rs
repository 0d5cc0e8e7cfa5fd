// SPDX-License-Identifier: GPL-2.0-only
//! Selective resend (issue 28): a sequence NAK inside an RDMA WRITE sends again only what a
//! peer that places packets past a gap cannot have placed, and the answers tell whether the
//! peer places or goes back N (docs/reliability.md, "Selective resend, learnt").

use super::{requester::Resume, Engine, Env, Resource, SqEntry, Stat, WrKind};
use crate::logic::psn::Psn;
use crate::logic::wire::{Aeth, NakCode, Syndrome};
use core::ops::DerefMut;

/// What the requester knows of the peer's responder: whether it places RDMA WRITE packets
/// that arrive past a gap (rrxe does, `responder/ahead.rs`), so that a sequence NAK asks for
/// the one missing packet only, or drops them (go-back-N: rdma_rxe, and IBTA's minimum), so
/// that the requester must go back N. Announced, never guessed: every acknowledgement of an
/// rrxe responder that places carries [`Bth::sel`](crate::logic::wire::Bth::sel), and one
/// without it makes the peer go-back-N for the QP's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PeerMode {
    /// No acknowledgement heard yet: a sequence NAK goes back N.
    #[default]
    Unknown,
    /// It announced that it places WRITE packets ahead.
    Places,
    /// It did not announce it (or answered as if it drops what follows a gap): go back N.
    GoBackN,
}

/// Hole reports kept while packets sent alone before them are still going out.
pub(super) const HOLES: usize = 16;

/// Reported holes waiting to be sent alone, oldest first (bounded: a report that finds the
/// queue full is dropped; its hole becomes the first one in time and is NAKed then).
#[derive(Clone, Copy, Debug)]
pub(super) struct Holes {
    psn: [Psn; HOLES],
    len: usize,
}

impl Default for Holes {
    fn default() -> Self {
        Holes {
            psn: [Psn::ZERO; HOLES],
            len: 0,
        }
    }
}

impl Holes {
    fn push(&mut self, p: Psn) {
        if self.len < HOLES && !self.psn[..self.len].contains(&p) {
            self.psn[self.len] = p;
            self.len += 1;
        }
    }

    fn pop(&mut self) -> Option<Psn> {
        if self.len == 0 {
            return None;
        }
        let p = self.psn[0];
        self.psn.copy_within(1..self.len, 0);
        self.len -= 1;
        Some(p)
    }

    pub(super) fn clear(&mut self) {
        self.len = 0;
    }
}

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// A sequence NAK for `psn` starts a recovery episode: what can be sent again alone, as
    /// the PSN after it. The peer announced placement, no timeout probe is under way,
    /// and `psn` is a packet of an RDMA WRITE: a middle or last packet alone (the peer placed
    /// the rest of the message it received), the first packet with its whole message (the
    /// peer could place none of it without the RETH). Anything else goes back N.
    pub(super) fn selective_end(&self, psn: Psn) -> Option<Psn> {
        if self.req.peer != PeerMode::Places
            || self.req.probe.is_some()
            || !psn.before(self.req.high)
        {
            return None;
        }
        let (_, e) = self.sq.holding(psn, self.sq.done, u32::MAX)?;
        if e.kind != WrKind::Write {
            return None;
        }
        let end = if psn == e.first_psn {
            // Not past what was sent.
            let end = e.first_psn.wrapping_add(e.npkts.max(1));
            if end.after(self.req.high) {
                self.req.high
            } else {
                end
            }
        } else {
            psn.next()
        };
        Some(end)
    }

    /// Sends the packets from `psn` to before `end` again, and then goes on from where the
    /// requester stands (the window stays as it is).
    pub(super) fn resend_range<E: Env>(&mut self, env: &mut E, psn: Psn, end: Psn) -> bool {
        let at = self.req.sel_resume.unwrap_or(Resume {
            next: self.sq.next,
            cur_pkt: self.req.cur_pkt,
            psn: self.req.psn,
            end,
        });
        self.rewind(psn);
        if self.req.psn != psn {
            return false;
        }
        if at.psn.after(psn) {
            self.req.sel_resume = Some(Resume { end, ..at });
        }
        self.req.sel_sent = Some((psn, end));
        self.req.sel_at_us = env.clock_us();
        true
    }

    /// A sequence NAK for the packets last sent alone, again (a placing responder repeats its
    /// NAK while packets keep arriving past the hole): if the resend has had a round trip to
    /// arrive (the smoothed estimate), it or the first NAK was lost, and it goes out again,
    /// within the episode (no retry spent, the window kept), instead of waiting for the
    /// retransmit timer. Sooner, the NAK crossed it. Returns whether it was sent again.
    pub(super) fn resend_again<E: Env>(&mut self, env: &mut E, psn: Psn) -> bool {
        let Some((from, end)) = self.req.sel_sent else {
            return false;
        };
        if from != psn || self.req.acked != psn || self.req.probe.is_some() {
            return false;
        }
        let (Some(now), Some(at)) = (env.clock_us(), self.req.sel_at_us) else {
            return false;
        };
        // A round trip and some of its variation: a resend that waited behind a queue is late,
        // not lost (a duplicate costs a packet, a miss the timer).
        let rt = self.req.srtt_us + 2 * self.req.rttvar_us;
        if self.req.srtt_us == 0 || now.wrapping_sub(at) < rt {
            return false;
        }
        self.resend_range(env, psn, end)
    }

    /// An early expiry of the round-trip estimate, with a peer that places: the oldest
    /// unacknowledged packet (a WRITE's middle or last packet, or a first packet with its
    /// message) goes out again alone, and the window stays as it is. Returns false where this
    /// does not apply (the caller then probes as a timeout does).
    pub(super) fn resend_oldest_alone<E: Env>(&mut self, env: &mut E) -> bool {
        let p = self.req.acked;
        match self.selective_end(p) {
            Some(end) => self.resend_range(env, p, end),
            None => false,
        }
    }

    /// A hole report for `psn` (see [`Bth::hole`](crate::logic::wire::Bth::hole)): a
    /// placing peer misses `psn`, past the first hole (which its sequence NAK names), and
    /// placed what followed. The packet (a first packet with its message) goes out again
    /// alone at once, within no episode: no retry spent, the window kept, nothing
    /// acknowledged; while other packets sent alone are still going out, after them
    /// ([`Holes`]).
    /// Returns false for a report that cannot be one (not a sequence NAK, a PSN never sent,
    /// a peer that did not announce placement); one for a PSN acknowledged since is stale
    /// (it crossed the acknowledgement) and changes nothing.
    pub(super) fn rx_hole_report<E: Env>(&mut self, env: &mut E, psn: Psn, aeth: Aeth) -> bool {
        if !matches!(aeth.syndrome(), Syndrome::Nak(NakCode::PsnSeqError))
            || self.req.peer != PeerMode::Places
            || !psn.before(self.req.high)
        {
            return false;
        }
        if !psn.after(self.req.acked) {
            return true;
        }
        if self
            .req
            .sel_sent
            .is_some_and(|(from, end)| !psn.before(from) && psn.before(end))
        {
            return true;
        }
        if self.req.sel_resume.is_some() {
            self.req.holes.push(psn);
            return true;
        }
        self.resend_hole(env, psn);
        true
    }

    /// Sends `psn` alone (with its message, for a first packet) if it still can be.
    fn resend_hole<E: Env>(&mut self, env: &mut E, psn: Psn) -> bool {
        if psn.before(self.req.acked) || !psn.before(self.req.high) {
            return false;
        }
        match self.selective_end(psn) {
            Some(end) if self.resend_range(env, psn, end) => {
                self.stat(env, Stat::SelectiveResends, 1);
                true
            }
            _ => false,
        }
    }

    /// The packets sent alone went out: the next reported hole, if one is waiting.
    pub(super) fn next_hole<E: Env>(&mut self, env: &mut E) {
        while let Some(p) = self.req.holes.pop() {
            if self.resend_hole(env, p) {
                return;
            }
        }
    }

    /// An acknowledgement arrived with (`sel`) or without the peer's announcement of
    /// placement: without it, the peer goes back N from now on; with it, a peer not known
    /// yet places.
    pub(super) fn hear_peer(&mut self, sel: bool) {
        self.req.peer = match (sel, self.req.peer) {
            (false, _) => PeerMode::GoBackN,
            (true, PeerMode::Unknown) => PeerMode::Places,
            (true, m) => m,
        };
    }

    /// An ACK (`nak` false) or sequence NAK for `psn` arrived after a selective resend: one
    /// whose expected PSN jumped past what was sent alone (the peer had placed the rest), or a
    /// NAK for exactly the packet after it (lost too: a run of losses, whose next packet the
    /// NAK handler then sends alone in turn), ends that resend. Going back N for a run, as
    /// before, resent the whole window (up to 512 packets, most of them placed already) and
    /// halved it.
    pub(super) fn learn_peer(&mut self, psn: Psn, nak: bool) {
        let Some((_, end)) = self.req.sel_sent else {
            return;
        };
        // An ACK names the last PSN received in order, a NAK the expected one.
        let expected = if nak { psn } else { psn.next() };
        if expected.after(end) || (nak && expected == end) {
            self.req.sel_sent = None;
        }
    }
}
