// SPDX-License-Identifier: GPL-2.0-only
//! 24-bit packet sequence number (PSN) arithmetic.
//!
//! A PSN lives on a circle of 2^24 values: after `0xff_ffff` comes `0`. IBTA (9.7.1) compares
//! two PSNs by their distance on that circle, so "`a` is before `b`" means that walking forward
//! from `a` reaches `b` in fewer than 2^23 steps. The order is therefore only meaningful for
//! PSNs less than half the circle apart, which the transport guarantees by bounding its windows
//! (at most 2^23 outstanding packets).
//!
//! [`Psn`] deliberately implements neither `PartialOrd` nor `Ord`: the circular order is not
//! transitive, so `<` would be a trap. Use [`Psn::before`], [`Psn::after`] and [`Psn::diff`].
//!
//! At exactly half the circle (`|distance| == 2^23`) the answer is ambiguous: [`Psn::diff`]
//! returns `-2^23` in both directions, so each of the two PSNs is [`before`](Psn::before) the
//! other. This matches rxe's `psn_compare()` (`(s32)((a - b) << 8)`), and never happens with
//! a bounded window.

/// The bits of a PSN: 24 of them (`BTH.PSN`).
pub const PSN_MASK: u32 = 0x00ff_ffff;

/// Number of distinct PSNs, 2^24.
pub const PSN_MODULUS: u32 = PSN_MASK + 1;

/// Half the PSN circle, 2^23: the largest distance at which [`Psn::before`] is unambiguous is
/// `PSN_HALF - 1`.
pub const PSN_HALF: u32 = PSN_MODULUS / 2;

/// A 24-bit packet sequence number. The invariant `value <= PSN_MASK` always holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    /// PSN 0.
    pub const ZERO: Psn = Psn(0);

    /// The largest PSN, `0xff_ffff`; its successor is [`Psn::ZERO`].
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const MAX: Psn = Psn(PSN_MASK);

    /// Returns the PSN `raw`, or `None` when `raw` does not fit in 24 bits.
    pub const fn new(raw: u32) -> Option<Psn> {
        if raw & !PSN_MASK == 0 {
            Some(Psn(raw))
        } else {
            None
        }
    }

    /// Returns the low 24 bits of `raw` as a PSN, discarding the rest (what ib_core's
    /// `_ib_modify_qp()` does to an oversized `rq_psn`/`sq_psn`, and what a BTH parser does).
    pub const fn from_masked(raw: u32) -> Psn {
        Psn(raw & PSN_MASK)
    }

    /// The PSN as a number in `0..=0xff_ffff`.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n` on the circle (modulo 2^24). Any `n` is accepted; `n` is taken modulo 2^24.
    pub const fn wrapping_add(self, n: u32) -> Psn {
        // 2^24 divides 2^32, so wrapping in u32 and then masking is exact modulo 2^24.
        Psn(self.0.wrapping_add(n) & PSN_MASK)
    }

    /// `self - n` on the circle (modulo 2^24).
    pub const fn wrapping_sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & PSN_MASK)
    }

    /// The next PSN: `self + 1`, wrapping from `0xff_ffff` to `0`.
    pub const fn next(self) -> Psn {
        self.wrapping_add(1)
    }

    /// Signed distance from `other` to `self` on the circle, in `-2^23..2^23`.
    ///
    /// Positive when `self` is after `other`, negative when before, zero when equal. Computed as
    /// `((self - other) << 8) as i32 >> 8`: the 24-bit difference, sign-extended. For PSNs
    /// less than 2^23 apart, `a.diff(b) == -b.diff(a)`; at exactly 2^23 apart both are `-2^23`.
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Unsigned distance walking forward from `from` to `self`, in `0..2^24`
    /// (`(self - from) mod 2^24`). Useful for window checks: `p.distance_from(first) < len`.
    pub const fn distance_from(self, from: Psn) -> u32 {
        self.0.wrapping_sub(from.0) & PSN_MASK
    }

    /// Whether `self` comes strictly before `other` on the circle (`self.diff(other) < 0`).
    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// Whether `self` comes strictly after `other` on the circle (`self.diff(other) > 0`).
    pub const fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// Whether `self` lies in the window of `len` PSNs that starts at `first`
    /// (`first, first + 1, ..., first + len - 1`, wrapping). A `len` of 0 contains nothing;
    /// a `len` of 2^24 or more contains every PSN.
    pub const fn in_window(self, first: Psn, len: u32) -> bool {
        self.distance_from(first) < len
    }
}
