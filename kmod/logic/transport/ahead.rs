// SPDX-License-Identifier: GPL-2.0-only

//! READ responses that arrived ahead of a gap.
//!
//! A READ's responses go into the requester's own memory at an offset their PSN gives, so a
//! response that overtook an earlier one (reordering) or followed a lost one can be placed at
//! once, with any peer. [`ReadAhead`] remembers which of the front READ's segments past the
//! next expected one are already placed, so that a re-read from the first missing segment
//! (the responder replays from there to the end) does not need them again, and a reordered
//! response no longer starts a re-read of everything after it.
//!
//! The record is bounded by the window ([`AHEAD`] segments, 64 bytes), whatever the READ's
//! length: a response further ahead is treated as before, as a gap.

/// Segments past the next expected one that can be remembered.
pub(super) const AHEAD: u32 = 512;

pub(super) const WORDS: usize = (AHEAD / 64) as usize;

/// The segments of one READ WR received ahead of its next expected segment.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ReadAhead {
    /// The READ the bits belong to: its SQ index and its first PSN. Any other READ at the
    /// front finds the record empty.
    owner: Option<(u32, u32)>,
    /// Bit `i`: segment `next + 1 + i` is placed, where `next` is the READ's next expected
    /// segment.
    bits: [u64; WORDS],
}

impl ReadAhead {
    /// Forgets everything.
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }

    /// Makes the record belong to the READ `owner` (its SQ index and first PSN), emptying it
    /// if it belonged to another one.
    fn own(&mut self, owner: (u32, u32)) {
        if self.owner != Some(owner) {
            self.bits = [0; WORDS];
            self.owner = Some(owner);
        }
    }

    /// Whether segment `next + 1 + ahead` can be recorded at all.
    pub(super) fn fits(ahead: u32) -> bool {
        ahead < AHEAD
    }

    /// Whether segment `next + 1 + ahead` of READ `owner` is already placed.
    pub(super) fn has(&self, owner: (u32, u32), ahead: u32) -> bool {
        if self.owner != Some(owner) || !Self::fits(ahead) {
            return false;
        }
        self.bits[(ahead / 64) as usize] & (1 << (ahead % 64)) != 0
    }

    /// Records segment `next + 1 + ahead` of READ `owner` as placed (`ahead` < [`AHEAD`]).
    pub(super) fn set(&mut self, owner: (u32, u32), ahead: u32) {
        if !Self::fits(ahead) {
            return;
        }
        self.own(owner);
        self.bits[(ahead / 64) as usize] |= 1 << (ahead % 64);
    }

    /// The expected segment of READ `owner` has just been placed: returns how many of the
    /// segments right after it were placed already (the READ's next expected segment moves
    /// past them all) and shifts the record accordingly.
    pub(super) fn advance(&mut self, owner: (u32, u32)) -> u32 {
        if self.owner != Some(owner) {
            return 0;
        }
        let mut n = 0;
        for w in self.bits {
            let run = w.trailing_ones();
            n += run;
            if run < 64 {
                break;
            }
        }
        // The placed segment itself and the run after it leave the record; an empty record
        // belongs to no READ, so the in-order responses after it cost one comparison.
        self.shift(n + 1);
        if self.bits.iter().all(|&w| w == 0) {
            self.owner = None;
        }
        n
    }

    /// Drops the lowest `k` bits (the next expected segment moved `k` forward).
    fn shift(&mut self, k: u32) {
        shift_window(&mut self.bits, k);
    }

    /// Segments recorded (`rdma res`).
    pub(super) fn count(&self) -> u32 {
        self.bits.iter().map(|w| w.count_ones()).sum()
    }
}

/// Drops the lowest `k` bits of a window of [`AHEAD`] PSNs kept as 64-bit words (lowest bit =
/// the PSN after the expected one); shared by the READ responses and the WRITE packets placed
/// ahead.
pub(super) fn shift_window(bits: &mut [u64; WORDS], k: u32) {
    if k >= AHEAD {
        *bits = [0; WORDS];
        return;
    }
    let (words, b) = ((k / 64) as usize, k % 64);
    for i in 0..WORDS {
        let lo = bits.get(i + words).copied().unwrap_or(0);
        let hi = bits.get(i + words + 1).copied().unwrap_or(0);
        bits[i] = if b == 0 {
            lo
        } else {
            (lo >> b) | (hi << (64 - b))
        };
    }
}
