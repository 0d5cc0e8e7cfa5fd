// SPDX-License-Identifier: GPL-2.0-only
//! How a message is cut into packets: one path MTU of payload each, the last one shorter, an
//! empty message one empty packet (IBTA 9.7.6.1). The same split numbers the responses of an
//! RDMA READ.

use super::opcode::Position;
use super::psn::Psn;
use super::wire::pad_for;

/// One packet of a segmented message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Index of the packet in the message, from 0; packet `i` has PSN `first_psn + i`.
    pub index: u32,
    /// Offset of the packet's payload in the message.
    pub offset: u32,
    /// Payload bytes in this packet.
    pub len: u32,
    /// Position in the message.
    pub position: Position,
    /// The packet's pad count ([`pad_for`] of `len`).
    pub pad: u8,
}

impl Segment {
    /// The PSN of this packet when the message starts at `first`.
    pub const fn psn(&self, first: Psn) -> Psn {
        first.wrapping_add(self.index)
    }
}

/// How a message of some length is cut into packets of at most one path MTU of payload:
/// every packet but the last carries exactly `mtu` bytes, and an empty message is one empty
/// packet. The same split gives the number of RDMA READ response packets (and PSNs) of a READ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segmentation {
    len: u32,
    mtu: u32,
    count: u32,
}

impl Segmentation {
    /// Segments a message of `len` bytes at `mtu` bytes of payload per packet; `None` when
    /// `mtu` is 0 or not a multiple of 4 (every packet but the last must need no pad).
    pub const fn new(len: u32, mtu: u32) -> Option<Segmentation> {
        if mtu == 0 || mtu % 4 != 0 {
            return None;
        }
        let full = len / mtu;
        let count = if len % mtu != 0 || len == 0 {
            full + 1
        } else {
            full
        };
        Some(Segmentation { len, mtu, count })
    }

    /// Segments at an IB path MTU.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn with_mtu(len: u32, mtu: super::port::IbMtu) -> Segmentation {
        let m = mtu.bytes();
        let full = len / m;
        let count = if len % m != 0 || len == 0 {
            full + 1
        } else {
            full
        };
        Segmentation { len, mtu: m, count }
    }

    /// The message length.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn len(&self) -> u32 {
        self.len
    }

    /// Whether the message is empty (it still takes one packet).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload bytes per full packet.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Number of packets (at least 1).
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// Packet `index`, or `None` past the last.
    pub const fn segment(&self, index: u32) -> Option<Segment> {
        let position = match Position::of(index, self.count) {
            Some(p) => p,
            None => return None,
        };
        let offset = index * self.mtu;
        let rest = self.len - offset;
        let len = if rest < self.mtu { rest } else { self.mtu };
        Some(Segment {
            index,
            offset,
            len,
            position,
            pad: pad_for(len as usize),
        })
    }

    /// The packets in order.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn iter(&self) -> Segments {
        Segments {
            seg: *self,
            next: 0,
        }
    }
}

/// Iterator over the packets of a [`Segmentation`].
#[derive(Clone, Debug)]
pub struct Segments {
    seg: Segmentation,
    next: u32,
}

impl Iterator for Segments {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        let s = self.seg.segment(self.next)?;
        self.next += 1;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.seg.count.saturating_sub(self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Segments {}
