// SPDX-License-Identifier: GPL-2.0-only
//! A bitmap allocator of small integer ids (QP numbers, memory-key indices).
//!
//! Ids are handed out round-robin from a cursor, so a freed id is reused as late as possible:
//! a stale packet or key that names a recently destroyed object is then unlikely to hit a new
//! one. The bitmap is caller-provided (`&mut [u64]`), so this module allocates nothing.

/// An id range `[first, first + 64 * words)` tracked in a caller's bitmap.
#[derive(Debug)]
pub struct IdAlloc {
    first: u32,
    cursor: u32,
    in_use: u32,
}

impl IdAlloc {
    /// An allocator whose ids start at `first` (ids below it are reserved).
    pub const fn new(first: u32) -> Self {
        IdAlloc {
            first,
            cursor: 0,
            in_use: 0,
        }
    }

    /// Ids currently allocated.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Allocates the next free id after the cursor, or `None` when every bit is set. Scans a
    /// word (64 ids) per step, so a nearly full bitmap of `n` ids costs `n / 64` steps.
    pub fn alloc(&mut self, bits: &mut [u64]) -> Option<u32> {
        let words = bits.len();
        let n = u32::try_from(words).ok()?.checked_mul(64)?;
        let start = self.cursor.checked_rem(n)?;
        let (sw, sb) = ((start / 64) as usize, start % 64);
        // The cursor's word from the cursor on, the other words in order, then the cursor's
        // word below the cursor.
        let mut w = sw;
        for k in 0..=words {
            let word = bits.get_mut(w)?;
            let mut free = !*word;
            if k == 0 {
                free &= !0u64 << sb;
            }
            if k == words {
                free &= (1u64 << sb).wrapping_sub(1);
            }
            if free != 0 {
                let b = free.trailing_zeros() % 64;
                *word |= 1u64 << b;
                let i = (w as u32) * 64 + b;
                self.cursor = if i + 1 < n { i + 1 } else { 0 };
                self.in_use += 1;
                return self.first.checked_add(i);
            }
            w = if w + 1 < words { w + 1 } else { 0 };
        }
        None
    }

    /// Frees `id`. Returns `false` (and changes nothing) for an id outside the range or not
    /// allocated.
    pub fn free(&mut self, bits: &mut [u64], id: u32) -> bool {
        let Some(i) = id.checked_sub(self.first) else {
            return false;
        };
        let (w, b) = ((i / 64) as usize, i % 64);
        match bits.get_mut(w) {
            Some(word) if *word & (1u64 << b) != 0 => {
                *word &= !(1u64 << b);
                self.in_use -= 1;
                true
            }
            _ => false,
        }
    }
}

/// The key byte of a new MR whose index last carried key byte `last`: the low byte of `random`
/// (a fresh random value, as rxe draws one), moved on by one when it would repeat `last`, so a
/// key that outlived its MR never matches the index's next MR. Random rather than sequential,
/// so that the next key cannot be predicted from the ones seen.
pub const fn next_key_byte(random: u32, last: u8) -> u8 {
    let k = random as u8;
    if k == last {
        k.wrapping_add(1)
    } else {
        k
    }
}

/// A memory key: index in the upper 24 bits, the "key" byte ([`next_key_byte`]) in the low 8
/// bits, so that a key that outlived its MR is rejected even when the index is reused.
pub const fn make_key(index: u32, key_byte: u8) -> u32 {
    (index << 8) | key_byte as u32
}

/// The index part of a memory key.
pub const fn key_index(key: u32) -> u32 {
    key >> 8
}
