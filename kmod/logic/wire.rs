// SPDX-License-Identifier: GPL-2.0-only
//! The RoCEv2 transport headers on the wire: encode and decode of the BTH and every extension
//! header, a [`Packet`] view over received bytes, a builder writing headers into a caller's
//! buffer, and the pure arithmetic of pad counts and MTU segmentation.
//!
//! All multi-byte fields are big-endian (network order); field layouts follow IBTA vol. 1
//! 9.2–9.3 and rxe's `rxe_hdr.h`. The bytes handled here are the UDP payload of a RoCEv2
//! packet: BTH, extension headers, payload, pad, ICRC (rxe's `pkt->hdr` .. `pkt->paylen`).
//! The ICRC itself is computed in [`super::icrc`].
//!
//! Encoding never fails on field values: a value wider than its field is truncated to the
//! field's bits (as rxe's setters do), so keep QPNs and PSNs within 24 bits. Decoding never
//! panics: every decoder returns `Option`/`Result` and reads through checked slices.

use super::icrc::ICRC_LEN;
use super::opcode::{self, Ext, ExtHeaders, OpInfo, Position};
use super::psn::Psn;
use super::stats::Stat;

pub use super::opcode::BTH_LEN;

/// Length of the RETH.
pub const RETH_LEN: usize = Ext::Reth.size();
/// Length of the AETH.
pub const AETH_LEN: usize = Ext::Aeth.size();
/// Length of the ImmDt header.
pub const IMMDT_LEN: usize = Ext::ImmDt.size();
/// Length of the DETH.
pub const DETH_LEN: usize = Ext::Deth.size();
/// Length of the AtomicETH.
pub const ATMETH_LEN: usize = Ext::AtomicEth.size();
/// Length of the AtomicAckETH.
pub const ATMACK_LEN: usize = Ext::AtomicAckEth.size();
/// Length of the IETH.
pub const IETH_LEN: usize = Ext::Ieth.size();
/// Length of the FETH.
pub const FETH_LEN: usize = Ext::Feth.size();

/// The only transport header version (`BTH.TVer`) defined; rxe drops anything else.
pub const BTH_TVER: u8 = 0;
/// The default partition key (full membership of the default partition).
pub const BTH_DEF_PKEY: u16 = 0xffff;
/// The destination QP of multicast packets.
pub const MULTICAST_QPN: u32 = 0x00ff_ffff;
/// 24-bit field mask (QPNs, PSNs, MSNs).
pub const MASK24: u32 = 0x00ff_ffff;
/// The well-known Q_Key of the GSI QP (QP1).
#[cfg_attr(MODULE, expect(dead_code))]
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Why bytes could not be decoded or headers could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The bytes (or the output buffer) end before the headers, pad and ICRC do.
    Truncated,
    /// The BTH opcode is not one rrxe knows ([`opcode::info`] returns `None`).
    UnknownOpcode(u8),
    /// `BTH.TVer` is not 0.
    BadTver(u8),
    /// Payload or pad bytes on an opcode that carries no payload, or a pad count that does not
    /// round the payload up to a multiple of 4.
    BadPad,
    /// The headers to encode lack one the opcode requires.
    MissingHeader(Ext),
    /// The headers to encode include one the opcode does not carry.
    UnexpectedHeader(Ext),
}

fn be16(b: [u8; 2]) -> u16 {
    u16::from_be_bytes(b)
}

fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, c, d, e]) => u32::from_be_bytes([a, c, d, e]),
        _ => 0,
    }
}

fn be64(b: &[u8], at: usize) -> u64 {
    match b.get(at..at + 8).and_then(|s| <[u8; 8]>::try_from(s).ok()) {
        Some(a) => u64::from_be_bytes(a),
        None => 0,
    }
}

fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = out.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// Implements the slice-based `decode`/`write` of a fixed-size header on top of its
/// `from_bytes`/`to_bytes`.
macro_rules! slice_codec {
    ($t:ty, $len:expr) => {
        impl $t {
            /// Length on the wire.
            #[cfg_attr(MODULE, expect(dead_code))]
            pub const LEN: usize = $len;

            /// Decodes the header from the first bytes of `b`; `None` when `b` is too short.
            pub fn decode(b: &[u8]) -> Option<Self> {
                b.first_chunk::<{ $len }>().map(Self::from_bytes)
            }

            /// Writes the header into the first bytes of `out`; returns its length.
            pub fn write(&self, out: &mut [u8]) -> Result<usize, WireError> {
                let dst = out
                    .first_chunk_mut::<{ $len }>()
                    .ok_or(WireError::Truncated)?;
                *dst = self.to_bytes();
                Ok($len)
            }
        }
    };
}

/// Base transport header.
///
/// Byte 1 holds SE, M, PadCnt (2 bits) and TVer (4 bits); byte 4 (`resv8a` in IBTA, where
/// RoCEv2 puts FECN and BECN) precedes the 24-bit DestQP; byte 8 holds AckReq and 7 reserved
/// bits before the 24-bit PSN. Reserved bits decode as ignored and encode as 0, except the
/// first two of byte 8's ([`Bth::sel`] and [`Bth::hole`], rrxe's selective recovery).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bth {
    /// OpCode.
    pub opcode: u8,
    /// Solicited event.
    pub se: bool,
    /// MigReq.
    pub mig: bool,
    /// Pad count: bytes (0–3) appended to the payload to reach a multiple of 4.
    pub pad: u8,
    /// Transport header version (4 bits), [`BTH_TVER`].
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward explicit congestion notification (RoCEv2, BTH byte 4 bit 7).
    pub fecn: bool,
    /// Backward explicit congestion notification (RoCEv2, BTH byte 4 bit 6).
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// rrxe's announcement of selective recovery, in the first reserved bit after AckReq
    /// (byte 8, bit 6; docs/reliability.md, "Placement, announced"). On an RC request: this
    /// requester takes an acknowledgement that jumps past what it sent again. On an RC
    /// acknowledgement: this responder places RDMA WRITE packets that arrive past a gap from
    /// a requester that announces. IBTA reserves the bit (sent as 0, not checked by a
    /// receiver; rdma_rxe 6.12 never reads it), so a peer that does not know it ignores it
    /// and never sets it.
    pub sel: bool,
    /// rrxe's hole reports, in the second reserved bit after AckReq (byte 8, bit 5). On an RC
    /// request: this requester takes hole reports. On a sequence NAK (to such a requester
    /// only): a hole report, which names a PSN missing past the first hole, with packets after
    /// it placed; unlike a NAK it acknowledges nothing before that PSN (docs/reliability.md,
    /// "Hole reports"). Reserved in IBTA, like [`Bth::sel`].
    pub hole: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl Bth {
    /// Decodes a BTH from its 12 bytes.
    pub fn from_bytes(b: &[u8; BTH_LEN]) -> Bth {
        Bth {
            opcode: b[0],
            se: b[1] & 0x80 != 0,
            mig: b[1] & 0x40 != 0,
            pad: (b[1] >> 4) & 0x3,
            tver: b[1] & 0x0f,
            pkey: be16([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
            ack_req: b[8] & 0x80 != 0,
            sel: b[8] & 0x40 != 0,
            hole: b[8] & 0x20 != 0,
            psn: Psn::from_masked(u32::from_be_bytes([0, b[9], b[10], b[11]])),
        }
    }

    /// Encodes the BTH (reserved bits 0 but [`Bth::sel`] and [`Bth::hole`], over-wide fields
    /// truncated).
    pub fn to_bytes(self) -> [u8; BTH_LEN] {
        let flags = (self.se as u8) << 7
            | (self.mig as u8) << 6
            | (self.pad & 0x3) << 4
            | (self.tver & 0x0f);
        let qp = (self.dest_qp & MASK24).to_be_bytes();
        let psn = self.psn.get().to_be_bytes();
        let pkey = self.pkey.to_be_bytes();
        [
            self.opcode,
            flags,
            pkey[0],
            pkey[1],
            (self.fecn as u8) << 7 | (self.becn as u8) << 6,
            qp[1],
            qp[2],
            qp[3],
            (self.ack_req as u8) << 7 | (self.sel as u8) << 6 | (self.hole as u8) << 5,
            psn[1],
            psn[2],
            psn[3],
        ]
    }
}
slice_codec!(Bth, BTH_LEN);

/// RDMA extended transport header: the remote buffer of an RDMA WRITE/READ (and FLUSH,
/// ATOMIC WRITE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length of the whole message.
    pub len: u32,
}

impl Reth {
    /// Decodes a RETH from its 16 bytes.
    pub fn from_bytes(b: &[u8; RETH_LEN]) -> Reth {
        Reth {
            va: be64(b, 0),
            rkey: be32(b, 8),
            len: be32(b, 12),
        }
    }

    /// Encodes the RETH.
    pub fn to_bytes(self) -> [u8; RETH_LEN] {
        let mut o = [0u8; RETH_LEN];
        put(&mut o, 0, &self.va.to_be_bytes());
        put(&mut o, 8, &self.rkey.to_be_bytes());
        put(&mut o, 12, &self.len.to_be_bytes());
        o
    }
}
slice_codec!(Reth, RETH_LEN);

/// AETH syndrome: ACK with credits (`0x1f` = unlimited, what rxe always sends).
pub const AETH_ACK_UNLIMITED: u8 = 0x1f;

/// NAK codes (AETH syndrome `011x_xxxx`, IBTA table 44).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error (0): a packet arrived out of order.
    PsnSeqError,
    /// Invalid request (1).
    InvalidRequest,
    /// Remote access error (2).
    RemoteAccessError,
    /// Remote operational error (3).
    RemoteOperationalError,
    /// Invalid RD request (4).
    InvalidRdRequest,
    /// A reserved code (5–31).
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSeqError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }

    /// The NAK code of a 5-bit value (higher bits ignored).
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1f {
            0 => NakCode::PsnSeqError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

/// The meaning of an AETH syndrome byte: bit 7 reserved, bits 6–5 the type, bits 4–0 the
/// value (IBTA 9.3.5, table 43).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK (`000c_cccc`) with a credit count (`0x1f`: unlimited / not tracked).
    Ack {
        /// The 5-bit credit count.
        credits: u8,
    },
    /// RNR NAK (`001t_tttt`) with the 5-bit RNR timer code ([`rnr_timer_usecs`]).
    RnrNak {
        /// The 5-bit RNR timer code.
        timer: u8,
    },
    /// NAK (`011n_nnnn`).
    Nak(NakCode),
    /// A reserved syndrome (type `10`, or bit 7 set): the raw byte.
    Reserved(u8),
}

/// rxe's syndrome byte for an ACK with unlimited credits.
pub const SYNDROME_ACK: u8 = 0x00;
/// Syndrome type bits of an RNR NAK.
pub const SYNDROME_RNR_NAK: u8 = 0x20;
/// Syndrome type bits of a NAK.
pub const SYNDROME_NAK: u8 = 0x60;

impl Syndrome {
    /// Decodes a syndrome byte.
    pub const fn decode(raw: u8) -> Syndrome {
        if raw & 0x80 != 0 {
            return Syndrome::Reserved(raw);
        }
        match raw & 0x60 {
            0x00 => Syndrome::Ack {
                credits: raw & 0x1f,
            },
            0x20 => Syndrome::RnrNak { timer: raw & 0x1f },
            0x60 => Syndrome::Nak(NakCode::from_code(raw)),
            _ => Syndrome::Reserved(raw),
        }
    }

    /// Encodes the syndrome byte (5-bit values truncated).
    pub const fn encode(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => SYNDROME_ACK | (credits & 0x1f),
            Syndrome::RnrNak { timer } => SYNDROME_RNR_NAK | (timer & 0x1f),
            Syndrome::Nak(code) => SYNDROME_NAK | code.code(),
            Syndrome::Reserved(raw) => raw,
        }
    }
}

/// The minimum RNR NAK delay of a 5-bit RNR timer code, in microseconds (IBTA table 45:
/// code 0 is 655.36 ms, 1 is 0.01 ms ... 31 is 491.52 ms). rxe's `rnrnak_usec[]` holds the
/// same table except for a typo at code 25 (61410 instead of 61440).
pub const fn rnr_timer_usecs(code: u8) -> u32 {
    const T: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    T[(code & 0x1f) as usize]
}

/// ACK extended transport header: syndrome and message sequence number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// The raw syndrome byte ([`Syndrome::decode`]).
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Decodes an AETH from its 4 bytes.
    pub fn from_bytes(b: &[u8; AETH_LEN]) -> Aeth {
        Aeth {
            syndrome: b[0],
            msn: u32::from_be_bytes([0, b[1], b[2], b[3]]),
        }
    }

    /// Encodes the AETH.
    pub fn to_bytes(self) -> [u8; AETH_LEN] {
        let m = (self.msn & MASK24).to_be_bytes();
        [self.syndrome, m[1], m[2], m[3]]
    }

    /// An ACK with `credits` (use [`AETH_ACK_UNLIMITED`] as rxe does).
    pub const fn ack(msn: u32, credits: u8) -> Aeth {
        Aeth {
            syndrome: Syndrome::Ack { credits }.encode(),
            msn: msn & MASK24,
        }
    }

    /// An RNR NAK asking to wait RNR timer code `timer` ([`rnr_timer_usecs`]).
    pub const fn rnr_nak(msn: u32, timer: u8) -> Aeth {
        Aeth {
            syndrome: Syndrome::RnrNak { timer }.encode(),
            msn: msn & MASK24,
        }
    }

    /// A NAK with `code`.
    pub const fn nak(msn: u32, code: NakCode) -> Aeth {
        Aeth {
            syndrome: Syndrome::Nak(code).encode(),
            msn: msn & MASK24,
        }
    }

    /// The decoded syndrome.
    pub const fn syndrome(&self) -> Syndrome {
        Syndrome::decode(self.syndrome)
    }
}
slice_codec!(Aeth, AETH_LEN);

/// Immediate data. The value is the big-endian reading of the four wire bytes, so the
/// `__be32 imm_data` of verbs holds `imm.to_be()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ImmDt {
    /// The immediate data.
    pub imm: u32,
}

impl ImmDt {
    /// Decodes ImmDt from its 4 bytes.
    pub fn from_bytes(b: &[u8; IMMDT_LEN]) -> ImmDt {
        ImmDt {
            imm: u32::from_be_bytes(*b),
        }
    }

    /// Encodes ImmDt.
    pub fn to_bytes(self) -> [u8; IMMDT_LEN] {
        self.imm.to_be_bytes()
    }
}
slice_codec!(ImmDt, IMMDT_LEN);

/// Datagram extended transport header (UD): Q_Key and source QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Deth {
    /// Queue key.
    pub qkey: u32,
    /// Source QP (24 bits; the byte before it is reserved).
    pub src_qp: u32,
}

impl Deth {
    /// Decodes a DETH from its 8 bytes.
    pub fn from_bytes(b: &[u8; DETH_LEN]) -> Deth {
        Deth {
            qkey: be32(b, 0),
            src_qp: be32(b, 4) & MASK24,
        }
    }

    /// Encodes the DETH.
    pub fn to_bytes(self) -> [u8; DETH_LEN] {
        let mut o = [0u8; DETH_LEN];
        put(&mut o, 0, &self.qkey.to_be_bytes());
        put(&mut o, 4, &(self.src_qp & MASK24).to_be_bytes());
        o
    }
}
slice_codec!(Deth, DETH_LEN);

/// Atomic extended transport header (CmpSwap, FetchAdd).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap data (CmpSwap) or add data (FetchAdd).
    pub swap_add: u64,
    /// Compare data (CmpSwap; unused by FetchAdd).
    pub compare: u64,
}

impl AtomicEth {
    /// Decodes an AtomicETH from its 28 bytes.
    pub fn from_bytes(b: &[u8; ATMETH_LEN]) -> AtomicEth {
        AtomicEth {
            va: be64(b, 0),
            rkey: be32(b, 8),
            swap_add: be64(b, 12),
            compare: be64(b, 20),
        }
    }

    /// Encodes the AtomicETH.
    pub fn to_bytes(self) -> [u8; ATMETH_LEN] {
        let mut o = [0u8; ATMETH_LEN];
        put(&mut o, 0, &self.va.to_be_bytes());
        put(&mut o, 8, &self.rkey.to_be_bytes());
        put(&mut o, 12, &self.swap_add.to_be_bytes());
        put(&mut o, 20, &self.compare.to_be_bytes());
        o
    }
}
slice_codec!(AtomicEth, ATMETH_LEN);

/// Atomic acknowledge extended transport header: the remote data before the atomic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicAckEth {
    /// Original remote data.
    pub orig: u64,
}

impl AtomicAckEth {
    /// Decodes an AtomicAckETH from its 8 bytes.
    pub fn from_bytes(b: &[u8; ATMACK_LEN]) -> AtomicAckEth {
        AtomicAckEth {
            orig: u64::from_be_bytes(*b),
        }
    }

    /// Encodes the AtomicAckETH.
    pub fn to_bytes(self) -> [u8; ATMACK_LEN] {
        self.orig.to_be_bytes()
    }
}
slice_codec!(AtomicAckEth, ATMACK_LEN);

/// Invalidate extended transport header (SEND with invalidate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ieth {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl Ieth {
    /// Decodes an IETH from its 4 bytes.
    pub fn from_bytes(b: &[u8; IETH_LEN]) -> Ieth {
        Ieth {
            rkey: u32::from_be_bytes(*b),
        }
    }

    /// Encodes the IETH.
    pub fn to_bytes(self) -> [u8; IETH_LEN] {
        self.rkey.to_be_bytes()
    }
}
slice_codec!(Ieth, IETH_LEN);

/// Flush extended transport header (FLUSH): placement type (bits 3–0) and selectivity level
/// (bits 5–4) of a 32-bit field whose other bits are reserved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Feth {
    /// Placement type (4 bits): 1 global visibility, 2 persistence.
    pub placement_type: u8,
    /// Selectivity level (2 bits): 0 memory region range, 1 whole memory region.
    pub selectivity: u8,
}

impl Feth {
    /// Decodes a FETH from its 4 bytes.
    pub fn from_bytes(b: &[u8; FETH_LEN]) -> Feth {
        Feth {
            placement_type: b[3] & 0x0f,
            selectivity: (b[3] >> 4) & 0x3,
        }
    }

    /// Encodes the FETH.
    pub fn to_bytes(self) -> [u8; FETH_LEN] {
        [
            0,
            0,
            0,
            (self.selectivity & 0x3) << 4 | (self.placement_type & 0x0f),
        ]
    }
}
slice_codec!(Feth, FETH_LEN);

/// The BTH and the extension headers of one packet; an extension header is `Some` exactly
/// when the opcode carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Headers {
    /// Base transport header.
    pub bth: Bth,
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// FETH (FLUSH).
    pub feth: Option<Feth>,
    /// RETH (first/only RDMA WRITE, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<Reth>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atmeth: Option<AtomicEth>,
    /// AETH (ACK, atomic ACK, first/last/only READ response).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH (atomic ACK).
    pub atmack: Option<AtomicAckEth>,
    /// ImmDt (*_WITH_IMMEDIATE).
    pub immdt: Option<ImmDt>,
    /// IETH (SEND *_WITH_INVALIDATE).
    pub ieth: Option<Ieth>,
}

impl Headers {
    /// Headers with only a BTH.
    pub const fn new(bth: Bth) -> Headers {
        Headers {
            bth,
            deth: None,
            feth: None,
            reth: None,
            atmeth: None,
            aeth: None,
            atmack: None,
            immdt: None,
            ieth: None,
        }
    }

    /// The set of extension headers present.
    pub const fn present(&self) -> ExtHeaders {
        let mut s = ExtHeaders::NONE;
        if self.deth.is_some() {
            s = s.with(Ext::Deth);
        }
        if self.feth.is_some() {
            s = s.with(Ext::Feth);
        }
        if self.reth.is_some() {
            s = s.with(Ext::Reth);
        }
        if self.atmeth.is_some() {
            s = s.with(Ext::AtomicEth);
        }
        if self.aeth.is_some() {
            s = s.with(Ext::Aeth);
        }
        if self.atmack.is_some() {
            s = s.with(Ext::AtomicAckEth);
        }
        if self.immdt.is_some() {
            s = s.with(Ext::ImmDt);
        }
        if self.ieth.is_some() {
            s = s.with(Ext::Ieth);
        }
        s
    }

    /// The opcode's facts, checking that exactly the headers it carries are present.
    pub fn check(&self) -> Result<&'static OpInfo, WireError> {
        let info =
            opcode::info(self.bth.opcode).ok_or(WireError::UnknownOpcode(self.bth.opcode))?;
        let have = self.present();
        for e in ExtHeaders::ORDER {
            match (info.headers.has(e), have.has(e)) {
                (true, false) => return Err(WireError::MissingHeader(e)),
                (false, true) => return Err(WireError::UnexpectedHeader(e)),
                _ => {}
            }
        }
        Ok(info)
    }

    /// Decodes the BTH and the extension headers its opcode implies from the start of
    /// `bytes` (a UDP payload). Checks the opcode and the length of the headers only.
    pub fn decode(bytes: &[u8]) -> Result<(Headers, &'static OpInfo), WireError> {
        let bth = Bth::decode(bytes).ok_or(WireError::Truncated)?;
        let info = opcode::info(bth.opcode).ok_or(WireError::UnknownOpcode(bth.opcode))?;
        if bytes.len() < info.hdr_len() {
            return Err(WireError::Truncated);
        }
        let mut h = Headers::new(bth);
        let mut off = BTH_LEN;
        for e in info.headers.iter() {
            let b = bytes.get(off..).unwrap_or(&[]);
            match e {
                Ext::Deth => h.deth = Deth::decode(b),
                Ext::Feth => h.feth = Feth::decode(b),
                Ext::Reth => h.reth = Reth::decode(b),
                Ext::AtomicEth => h.atmeth = AtomicEth::decode(b),
                Ext::Aeth => h.aeth = Aeth::decode(b),
                Ext::AtomicAckEth => h.atmack = AtomicAckEth::decode(b),
                Ext::ImmDt => h.immdt = ImmDt::decode(b),
                Ext::Ieth => h.ieth = Ieth::decode(b),
            }
            off += e.size();
        }
        // Every header fitted (length checked above), so the set is complete.
        match h.check() {
            Ok(_) => Ok((h, info)),
            Err(_) => Err(WireError::Truncated),
        }
    }

    /// Length of the BTH plus the extension headers present.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn len(&self) -> usize {
        BTH_LEN + self.present().len()
    }

    /// Always `false`: there is at least a BTH.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// Writes the BTH and the extension headers, in wire order, into the start of `out`;
    /// returns their length (the payload's offset). Checks that exactly the headers the
    /// opcode carries are present. `bth.pad` is written as given: set it with [`pad_for`].
    pub fn write(&self, out: &mut [u8]) -> Result<usize, WireError> {
        let info = self.check()?;
        let len = info.hdr_len();
        if out.len() < len {
            return Err(WireError::Truncated);
        }
        let mut off = self.bth.write(out)?;
        for e in info.headers.iter() {
            let b = out.get_mut(off..).unwrap_or(&mut []);
            off += match e {
                Ext::Deth => self.deth.map_or(Ok(0), |h| h.write(b))?,
                Ext::Feth => self.feth.map_or(Ok(0), |h| h.write(b))?,
                Ext::Reth => self.reth.map_or(Ok(0), |h| h.write(b))?,
                Ext::AtomicEth => self.atmeth.map_or(Ok(0), |h| h.write(b))?,
                Ext::Aeth => self.aeth.map_or(Ok(0), |h| h.write(b))?,
                Ext::AtomicAckEth => self.atmack.map_or(Ok(0), |h| h.write(b))?,
                Ext::ImmDt => self.immdt.map_or(Ok(0), |h| h.write(b))?,
                Ext::Ieth => self.ieth.map_or(Ok(0), |h| h.write(b))?,
            };
        }
        Ok(off)
    }
}

/// The pad count of a payload of `payload_len` bytes: what rounds it up to a multiple of 4
/// (rxe: `(-paylen) & 3`).
pub const fn pad_for(payload_len: usize) -> u8 {
    (payload_len.wrapping_neg() & 3) as u8
}

/// Length of a whole packet's UDP payload (headers, payload, pad, ICRC) for `info` and a
/// payload of `payload_len` bytes; `None` on overflow.
pub const fn packet_len(info: &OpInfo, payload_len: usize) -> Option<usize> {
    payload_len.checked_add(info.hdr_len() + pad_for(payload_len) as usize + ICRC_LEN)
}

/// Whether a payload of `payload_len` bytes is legal for a packet at `info`'s position on a
/// connected QP with path MTU `mtu` (rxe's `check_length()`): a first or middle packet carries
/// exactly `mtu` bytes, a last packet 1 to `mtu`, an only packet at most `mtu`. Always true
/// for opcodes without payload and for UD (whose bound is the receive buffer).
pub const fn payload_len_ok(info: &OpInfo, payload_len: usize, mtu: usize) -> bool {
    if !info.payload || matches!(info.transport, opcode::Transport::Ud) {
        return true;
    }
    match info.position {
        Position::Only => payload_len <= mtu,
        Position::First | Position::Middle => payload_len == mtu,
        Position::Last => payload_len > 0 && payload_len <= mtu,
    }
}

/// A received RoCEv2 packet's UDP payload (BTH through ICRC), checked and decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    bytes: &'a [u8],
    info: &'static OpInfo,
    headers: Headers,
    payload_end: usize,
}

impl<'a> Packet<'a> {
    /// Parses the UDP payload of a RoCEv2 packet: BTH, the extension headers its opcode
    /// implies, payload, pad, ICRC. Checks that the opcode is known, TVer is 0, the bytes hold
    /// headers + pad + ICRC, and that the pad count rounds the payload to a multiple of 4 (and
    /// is 0, with no payload, on opcodes without payload). Does not check the ICRC (that needs
    /// the IP and UDP headers: [`super::icrc`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Packet<'a>, WireError> {
        let (headers, info) = Headers::decode(bytes)?;
        if headers.bth.tver != BTH_TVER {
            return Err(WireError::BadTver(headers.bth.tver));
        }
        let hdr_len = info.hdr_len();
        let pad = headers.bth.pad as usize;
        let payload_len = bytes
            .len()
            .checked_sub(hdr_len + pad + ICRC_LEN)
            .ok_or(WireError::Truncated)?;
        if !info.payload && (payload_len != 0 || pad != 0) {
            return Err(WireError::BadPad);
        }
        if (payload_len + pad) % 4 != 0 {
            return Err(WireError::BadPad);
        }
        Ok(Packet {
            bytes,
            info,
            headers,
            payload_end: hdr_len + payload_len,
        })
    }

    /// The bytes parsed (BTH through ICRC).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The opcode's facts.
    pub fn info(&self) -> &'static OpInfo {
        self.info
    }

    /// The BTH.
    pub fn bth(&self) -> &Bth {
        &self.headers.bth
    }

    /// The BTH and extension headers.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// Length of BTH plus extension headers: the payload's offset.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn hdr_len(&self) -> usize {
        self.info.hdr_len()
    }

    /// Where the payload lies in [`Packet::bytes`].
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        self.info.hdr_len()..self.payload_end
    }

    /// The payload (without pad).
    pub fn payload(&self) -> &'a [u8] {
        self.bytes.get(self.payload_range()).unwrap_or(&[])
    }

    /// The pad bytes after the payload.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn pad_bytes(&self) -> &'a [u8] {
        let end = self.payload_end + self.headers.bth.pad as usize;
        self.bytes.get(self.payload_end..end).unwrap_or(&[])
    }

    /// The bytes the ICRC covers after the BTH: extension headers, payload, pad.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn icrc_tail(&self) -> &'a [u8] {
        let end = self.bytes.len().saturating_sub(ICRC_LEN);
        self.bytes.get(BTH_LEN..end).unwrap_or(&[])
    }

    /// The ICRC the packet carries (little-endian on the wire, see [`super::icrc`]).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn icrc(&self) -> u32 {
        super::icrc::stored_icrc(self.bytes).unwrap_or(0)
    }

    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<Deth> {
        self.headers.deth
    }

    /// The FETH, if the opcode carries one.
    pub fn feth(&self) -> Option<Feth> {
        self.headers.feth
    }

    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<Reth> {
        self.headers.reth
    }

    /// The AtomicETH, if the opcode carries one.
    pub fn atmeth(&self) -> Option<AtomicEth> {
        self.headers.atmeth
    }

    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<Aeth> {
        self.headers.aeth
    }

    /// The AtomicAckETH, if the opcode carries one.
    pub fn atmack(&self) -> Option<AtomicAckEth> {
        self.headers.atmack
    }

    /// The ImmDt, if the opcode carries one.
    pub fn immdt(&self) -> Option<ImmDt> {
        self.headers.immdt
    }

    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<Ieth> {
        self.headers.ieth
    }
}

/// Why [`write_packet_with`] wrote no packet: the headers or the buffer (`Wire`), or the
/// payload's filler (`Fill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketError<E> {
    /// The headers do not check, or the packet does not fit in `out`.
    Wire(WireError),
    /// The filler's own error.
    Fill(E),
}

/// Writes a whole packet's UDP payload into the start of `out`: the headers (with `bth.pad`
/// set from the payload length), `len` payload bytes put by `fill`, zeroed pad bytes and a
/// zeroed ICRC placeholder (fill it with [`super::icrc`] once the IP and UDP headers exist).
/// Returns the length written, [`packet_len`]. The engine's requester and responder build
/// every packet through this.
pub fn write_packet_with<E>(
    out: &mut [u8],
    headers: &Headers,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<usize, PacketError<E>> {
    let info = headers.check().map_err(PacketError::Wire)?;
    if !info.payload && len != 0 {
        return Err(PacketError::Wire(WireError::BadPad));
    }
    let total = packet_len(info, len).ok_or(PacketError::Wire(WireError::Truncated))?;
    if out.len() < total {
        return Err(PacketError::Wire(WireError::Truncated));
    }
    let mut h = *headers;
    h.bth.pad = pad_for(len);
    let hdr_len = h.write(out).map_err(PacketError::Wire)?;
    let Some(packet) = out.get_mut(hdr_len..total).filter(|p| p.len() >= len) else {
        return Err(PacketError::Wire(WireError::Truncated));
    };
    let (body, rest) = packet.split_at_mut(len);
    fill(body).map_err(PacketError::Fill)?;
    rest.fill(0);
    Ok(total)
}

/// [`write_packet_with`] for a payload already in a slice.
#[cfg_attr(MODULE, expect(dead_code))]
pub fn write_packet(out: &mut [u8], headers: &Headers, payload: &[u8]) -> Result<usize, WireError> {
    write_packet_with(out, headers, payload.len(), |dst: &mut [u8]| {
        dst.copy_from_slice(payload);
        Ok::<(), WireError>(())
    })
    .map_err(|e| match e {
        PacketError::Wire(w) | PacketError::Fill(w) => w,
    })
}

/// The BTH opcode of a RoCEv2 Congestion Notification Packet (IBTA Annex A17, 17.9.3).
pub const CNP_OPCODE: u8 = 0x81;

/// The counter a received packet that does not parse as a request or response goes to: a CNP
/// (an ECN-marked path's notification; one long enough goes to its QP's DCQCN reaction point
/// before parsing, see `dcqcn::cnp_dest_qp`) is counted as such; anything else is a bad header.
pub fn unparsed_stat(bytes: &[u8]) -> Stat {
    if bytes.first() == Some(&CNP_OPCODE) {
        Stat::RxCnps
    } else {
        Stat::RxBadHeaders
    }
}
