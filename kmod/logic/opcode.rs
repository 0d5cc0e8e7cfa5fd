// SPDX-License-Identifier: GPL-2.0-only
//! The IBTA base transport header opcodes of RC, UC and UD (IBTA vol. 1, 9.2 table 38) and
//! what each one implies for the packet: which extension headers follow the BTH and in which
//! order, the header length, whether a payload follows, request or response, and its position
//! in a message.
//!
//! The factual reference is rdma_rxe's `rxe_opcode[]` table (`rxe_opcode.c`): [`info`] returns
//! the same header set, header length and first/middle/last flags for each opcode it knows.
//! Reliable datagram (RD, `0x40..`) opcodes are deliberately absent: rxe has table entries for
//! them but no RD QP, and rrxe does not implement RD. Like CNP (`0x81`) and the
//! manufacturer-specific range, they are unknown here ([`info`] returns `None`).
//!
//! An opcode is `transport << 5 | operation`: the top three bits select the transport
//! ([`Transport`]), the low five bits the operation, which has the same number in every
//! transport that supports it.

/// The transport (QP type) an opcode belongs to: the opcode's top three bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected, opcodes `0x00..=0x1f`.
    Rc,
    /// Unreliable connected, opcodes `0x20..=0x3f`.
    Uc,
    /// Unreliable datagram, opcodes `0x60..=0x7f`.
    Ud,
}

impl Transport {
    /// The opcode prefix of this transport (`IB_OPCODE_RC`, `IB_OPCODE_UC`, `IB_OPCODE_UD`).
    pub const fn base(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
        }
    }
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message (rxe `RXE_START_MASK` only).
    First,
    /// Neither first nor last (`RXE_MIDDLE_MASK`).
    Middle,
    /// Last packet of a multi-packet message (`RXE_END_MASK` only).
    Last,
    /// The whole message in one packet (`RXE_START_MASK | RXE_END_MASK`).
    Only,
}

impl Position {
    /// Whether the packet starts a message (first or only).
    pub const fn is_start(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// Whether the packet ends a message (last or only).
    pub const fn is_end(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }

    /// The position of packet `index` (from 0) of a message of `count` packets; `None` when
    /// `index >= count`.
    pub const fn of(index: u32, count: u32) -> Option<Position> {
        if index >= count {
            None
        } else if count == 1 {
            Some(Position::Only)
        } else if index == 0 {
            Some(Position::First)
        } else if index + 1 == count {
            Some(Position::Last)
        } else {
            Some(Position::Middle)
        }
    }
}

/// The operation an opcode performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (with or without immediate or invalidate).
    Send,
    /// RDMA WRITE (with or without immediate).
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// ACKNOWLEDGE (ACK or NAK).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// CmpSwap.
    CompareSwap,
    /// FetchAdd.
    FetchAdd,
    /// FLUSH (IBTA 1.5 memory placement extensions).
    Flush,
    /// ATOMIC WRITE (IBTA 1.5 memory placement extensions).
    AtomicWrite,
}

/// A set of extension headers (the `RXE_*_MASK` header bits of rxe).
///
/// Extension headers always appear after the BTH in one canonical order, [`ExtHeaders::ORDER`],
/// so a set determines both the layout and each header's offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtHeaders(u8);

/// One kind of extension header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ext {
    /// Datagram extended transport header: Q_Key and source QP (UD).
    Deth,
    /// Flush extended transport header: placement type and selectivity level.
    Feth,
    /// RDMA extended transport header: virtual address, R_Key, DMA length.
    Reth,
    /// Atomic extended transport header: VA, R_Key, swap/add data, compare data.
    AtomicEth,
    /// ACK extended transport header: syndrome and MSN.
    Aeth,
    /// Atomic acknowledge extended transport header: original remote data.
    AtomicAckEth,
    /// Immediate data.
    ImmDt,
    /// Invalidate extended transport header: the R_Key to invalidate.
    Ieth,
}

impl Ext {
    /// Length of this header on the wire, in bytes.
    pub const fn size(self) -> usize {
        match self {
            Ext::Deth => 8,
            Ext::Feth => 4,
            Ext::Reth => 16,
            Ext::AtomicEth => 28,
            Ext::Aeth => 4,
            Ext::AtomicAckEth => 8,
            Ext::ImmDt => 4,
            Ext::Ieth => 4,
        }
    }

    /// This header's bit in an [`ExtHeaders`] set.
    pub const fn bit(self) -> u8 {
        match self {
            Ext::Deth => 1 << 0,
            Ext::Feth => 1 << 1,
            Ext::Reth => 1 << 2,
            Ext::AtomicEth => 1 << 3,
            Ext::Aeth => 1 << 4,
            Ext::AtomicAckEth => 1 << 5,
            Ext::ImmDt => 1 << 6,
            Ext::Ieth => 1 << 7,
        }
    }
}

/// Length of the base transport header.
pub const BTH_LEN: usize = 12;

impl ExtHeaders {
    /// No extension header.
    pub const NONE: ExtHeaders = ExtHeaders(0);

    /// The order in which extension headers follow the BTH (as rxe's offsets lay them out:
    /// DETH before ImmDt, FETH before RETH, RETH before ImmDt, AETH before AtomicAckETH).
    pub const ORDER: [Ext; 8] = [
        Ext::Deth,
        Ext::Feth,
        Ext::Reth,
        Ext::AtomicEth,
        Ext::Aeth,
        Ext::AtomicAckEth,
        Ext::ImmDt,
        Ext::Ieth,
    ];

    /// The set holding exactly `ext`.
    pub const fn of(ext: Ext) -> ExtHeaders {
        ExtHeaders(ext.bit())
    }

    /// This set plus `ext`.
    pub const fn with(self, ext: Ext) -> ExtHeaders {
        ExtHeaders(self.0 | ext.bit())
    }

    /// Whether `ext` is in the set.
    pub const fn has(self, ext: Ext) -> bool {
        self.0 & ext.bit() != 0
    }

    /// The raw bit set (bit `n` is `ORDER[n]`).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Total length of the headers in the set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.has(Self::ORDER[i]) {
                n += Self::ORDER[i].size();
            }
            i += 1;
        }
        n
    }

    /// Whether the set is empty.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Offset of `ext` from the start of the BTH, or `None` when `ext` is not in the set.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn offset(self, ext: Ext) -> Option<usize> {
        if !self.has(ext) {
            return None;
        }
        let mut off = BTH_LEN;
        let mut i = 0;
        while i < Self::ORDER.len() {
            let e = Self::ORDER[i];
            if e.bit() == ext.bit() {
                return Some(off);
            }
            if self.has(e) {
                off += e.size();
            }
            i += 1;
        }
        None
    }

    /// The headers of the set in wire order.
    pub fn iter(self) -> impl Iterator<Item = Ext> {
        Self::ORDER.into_iter().filter(move |e| self.has(*e))
    }
}

/// Everything an opcode implies about its packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// The opcode (`BTH.OpCode`).
    pub opcode: u8,
    /// The IBTA name, as rxe spells it (`"IB_OPCODE_RC_SEND_FIRST"` ...).
    pub name: &'static str,
    /// The transport the opcode belongs to.
    pub transport: Transport,
    /// The operation.
    pub op: Operation,
    /// Position in the message.
    pub position: Position,
    /// Extension headers following the BTH.
    pub headers: ExtHeaders,
    /// Whether a payload may follow the headers (rxe `RXE_PAYLOAD_MASK`).
    pub payload: bool,
}

impl OpInfo {
    /// BTH plus extension headers: rxe's `rxe_opcode[op].length`, the payload's offset.
    pub const fn hdr_len(&self) -> usize {
        BTH_LEN + self.headers.len()
    }

    /// Whether the packet is a request (rxe `RXE_REQ_MASK`), sent by the requester.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn is_request(&self) -> bool {
        !self.is_response()
    }

    /// Whether the packet is a response (rxe `RXE_ACK_MASK`): read response, ACK/NAK, atomic
    /// ACK. Only RC has responses.
    pub const fn is_response(&self) -> bool {
        matches!(
            self.op,
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }

    /// Whether the packet carries immediate data.
    pub const fn has_imm(&self) -> bool {
        self.headers.has(Ext::ImmDt)
    }

    /// Whether the packet carries an R_Key to invalidate.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn has_inv(&self) -> bool {
        self.headers.has(Ext::Ieth)
    }

    /// Whether the responder consumes a receive WQE when this packet starts a message (rxe
    /// `RXE_RWR_MASK`): the first or only packet of a SEND, and an RDMA WRITE with immediate.
    pub const fn needs_recv_wqe(&self) -> bool {
        match self.op {
            Operation::Send => self.position.is_start(),
            Operation::RdmaWrite => self.has_imm(),
            _ => false,
        }
    }

    /// Whether this packet completes a receive WQE (rxe `RXE_COMP_MASK`): the last or only
    /// packet of a SEND, and an RDMA WRITE with immediate.
    pub const fn completes_recv(&self) -> bool {
        match self.op {
            Operation::Send => self.position.is_end(),
            Operation::RdmaWrite => self.has_imm(),
            _ => false,
        }
    }
}

// Operation numbers (the low five bits of an opcode), IBTA table 38 / ib_pack.h.
const SEND_FIRST: u8 = 0x00;
const SEND_MIDDLE: u8 = 0x01;
const SEND_LAST: u8 = 0x02;
const SEND_LAST_WITH_IMMEDIATE: u8 = 0x03;
const SEND_ONLY: u8 = 0x04;
const SEND_ONLY_WITH_IMMEDIATE: u8 = 0x05;
const RDMA_WRITE_FIRST: u8 = 0x06;
const RDMA_WRITE_MIDDLE: u8 = 0x07;
const RDMA_WRITE_LAST: u8 = 0x08;
const RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = 0x09;
const RDMA_WRITE_ONLY: u8 = 0x0a;
const RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x0b;
const RDMA_READ_REQUEST: u8 = 0x0c;
const RDMA_READ_RESPONSE_FIRST: u8 = 0x0d;
const RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0e;
const RDMA_READ_RESPONSE_LAST: u8 = 0x0f;
const RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
const ACKNOWLEDGE: u8 = 0x11;
const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
const COMPARE_SWAP: u8 = 0x13;
const FETCH_ADD: u8 = 0x14;
const SEND_LAST_WITH_INVALIDATE: u8 = 0x16;
const SEND_ONLY_WITH_INVALIDATE: u8 = 0x17;
const FLUSH: u8 = 0x1c;
const ATOMIC_WRITE: u8 = 0x1d;

/// `IB_OPCODE_RC_SEND_FIRST`.
pub const RC_SEND_FIRST: u8 = SEND_FIRST;
/// `IB_OPCODE_RC_SEND_MIDDLE`.
pub const RC_SEND_MIDDLE: u8 = SEND_MIDDLE;
/// `IB_OPCODE_RC_SEND_LAST`.
pub const RC_SEND_LAST: u8 = SEND_LAST;
/// `IB_OPCODE_RC_SEND_LAST_WITH_IMMEDIATE`.
pub const RC_SEND_LAST_WITH_IMMEDIATE: u8 = SEND_LAST_WITH_IMMEDIATE;
/// `IB_OPCODE_RC_SEND_ONLY`.
pub const RC_SEND_ONLY: u8 = SEND_ONLY;
/// `IB_OPCODE_RC_SEND_ONLY_WITH_IMMEDIATE`.
pub const RC_SEND_ONLY_WITH_IMMEDIATE: u8 = SEND_ONLY_WITH_IMMEDIATE;
/// `IB_OPCODE_RC_RDMA_WRITE_FIRST`.
pub const RC_RDMA_WRITE_FIRST: u8 = RDMA_WRITE_FIRST;
/// `IB_OPCODE_RC_RDMA_WRITE_MIDDLE`.
pub const RC_RDMA_WRITE_MIDDLE: u8 = RDMA_WRITE_MIDDLE;
/// `IB_OPCODE_RC_RDMA_WRITE_LAST`.
pub const RC_RDMA_WRITE_LAST: u8 = RDMA_WRITE_LAST;
/// `IB_OPCODE_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE`.
pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = RDMA_WRITE_LAST_WITH_IMMEDIATE;
/// `IB_OPCODE_RC_RDMA_WRITE_ONLY`.
pub const RC_RDMA_WRITE_ONLY: u8 = RDMA_WRITE_ONLY;
/// `IB_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE`.
pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = RDMA_WRITE_ONLY_WITH_IMMEDIATE;
/// `IB_OPCODE_RC_RDMA_READ_REQUEST`.
pub const RC_RDMA_READ_REQUEST: u8 = RDMA_READ_REQUEST;
/// `IB_OPCODE_RC_RDMA_READ_RESPONSE_FIRST`.
pub const RC_RDMA_READ_RESPONSE_FIRST: u8 = RDMA_READ_RESPONSE_FIRST;
/// `IB_OPCODE_RC_RDMA_READ_RESPONSE_MIDDLE`.
pub const RC_RDMA_READ_RESPONSE_MIDDLE: u8 = RDMA_READ_RESPONSE_MIDDLE;
/// `IB_OPCODE_RC_RDMA_READ_RESPONSE_LAST`.
pub const RC_RDMA_READ_RESPONSE_LAST: u8 = RDMA_READ_RESPONSE_LAST;
/// `IB_OPCODE_RC_RDMA_READ_RESPONSE_ONLY`.
pub const RC_RDMA_READ_RESPONSE_ONLY: u8 = RDMA_READ_RESPONSE_ONLY;
/// `IB_OPCODE_RC_ACKNOWLEDGE`.
pub const RC_ACKNOWLEDGE: u8 = ACKNOWLEDGE;
/// `IB_OPCODE_RC_ATOMIC_ACKNOWLEDGE`.
pub const RC_ATOMIC_ACKNOWLEDGE: u8 = ATOMIC_ACKNOWLEDGE;
/// `IB_OPCODE_RC_COMPARE_SWAP`.
pub const RC_COMPARE_SWAP: u8 = COMPARE_SWAP;
/// `IB_OPCODE_RC_FETCH_ADD`.
pub const RC_FETCH_ADD: u8 = FETCH_ADD;
/// `IB_OPCODE_RC_SEND_LAST_WITH_INVALIDATE`.
pub const RC_SEND_LAST_WITH_INVALIDATE: u8 = SEND_LAST_WITH_INVALIDATE;
/// `IB_OPCODE_RC_SEND_ONLY_WITH_INVALIDATE`.
pub const RC_SEND_ONLY_WITH_INVALIDATE: u8 = SEND_ONLY_WITH_INVALIDATE;
/// `IB_OPCODE_RC_FLUSH`.
pub const RC_FLUSH: u8 = FLUSH;
/// `IB_OPCODE_RC_ATOMIC_WRITE`.
pub const RC_ATOMIC_WRITE: u8 = ATOMIC_WRITE;

/// `IB_OPCODE_UC_SEND_FIRST`.
pub const UC_SEND_FIRST: u8 = 0x20 | SEND_FIRST;
/// `IB_OPCODE_UC_SEND_MIDDLE`.
pub const UC_SEND_MIDDLE: u8 = 0x20 | SEND_MIDDLE;
/// `IB_OPCODE_UC_SEND_LAST`.
pub const UC_SEND_LAST: u8 = 0x20 | SEND_LAST;
/// `IB_OPCODE_UC_SEND_LAST_WITH_IMMEDIATE`.
pub const UC_SEND_LAST_WITH_IMMEDIATE: u8 = 0x20 | SEND_LAST_WITH_IMMEDIATE;
/// `IB_OPCODE_UC_SEND_ONLY`.
pub const UC_SEND_ONLY: u8 = 0x20 | SEND_ONLY;
/// `IB_OPCODE_UC_SEND_ONLY_WITH_IMMEDIATE`.
pub const UC_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x20 | SEND_ONLY_WITH_IMMEDIATE;
/// `IB_OPCODE_UC_RDMA_WRITE_FIRST`.
pub const UC_RDMA_WRITE_FIRST: u8 = 0x20 | RDMA_WRITE_FIRST;
/// `IB_OPCODE_UC_RDMA_WRITE_MIDDLE`.
pub const UC_RDMA_WRITE_MIDDLE: u8 = 0x20 | RDMA_WRITE_MIDDLE;
/// `IB_OPCODE_UC_RDMA_WRITE_LAST`.
pub const UC_RDMA_WRITE_LAST: u8 = 0x20 | RDMA_WRITE_LAST;
/// `IB_OPCODE_UC_RDMA_WRITE_LAST_WITH_IMMEDIATE`.
pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = 0x20 | RDMA_WRITE_LAST_WITH_IMMEDIATE;
/// `IB_OPCODE_UC_RDMA_WRITE_ONLY`.
pub const UC_RDMA_WRITE_ONLY: u8 = 0x20 | RDMA_WRITE_ONLY;
/// `IB_OPCODE_UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE`.
pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x20 | RDMA_WRITE_ONLY_WITH_IMMEDIATE;

/// `IB_OPCODE_UD_SEND_ONLY`.
pub const UD_SEND_ONLY: u8 = 0x60 | SEND_ONLY;
/// `IB_OPCODE_UD_SEND_ONLY_WITH_IMMEDIATE`.
pub const UD_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x60 | SEND_ONLY_WITH_IMMEDIATE;

/// Every opcode [`info`] knows, in increasing order.
#[cfg_attr(MODULE, expect(dead_code))]
pub const ALL: [u8; 39] = [
    RC_SEND_FIRST,
    RC_SEND_MIDDLE,
    RC_SEND_LAST,
    RC_SEND_LAST_WITH_IMMEDIATE,
    RC_SEND_ONLY,
    RC_SEND_ONLY_WITH_IMMEDIATE,
    RC_RDMA_WRITE_FIRST,
    RC_RDMA_WRITE_MIDDLE,
    RC_RDMA_WRITE_LAST,
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    RC_RDMA_WRITE_ONLY,
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    RC_RDMA_READ_REQUEST,
    RC_RDMA_READ_RESPONSE_FIRST,
    RC_RDMA_READ_RESPONSE_MIDDLE,
    RC_RDMA_READ_RESPONSE_LAST,
    RC_RDMA_READ_RESPONSE_ONLY,
    RC_ACKNOWLEDGE,
    RC_ATOMIC_ACKNOWLEDGE,
    RC_COMPARE_SWAP,
    RC_FETCH_ADD,
    RC_SEND_LAST_WITH_INVALIDATE,
    RC_SEND_ONLY_WITH_INVALIDATE,
    RC_FLUSH,
    RC_ATOMIC_WRITE,
    UC_SEND_FIRST,
    UC_SEND_MIDDLE,
    UC_SEND_LAST,
    UC_SEND_LAST_WITH_IMMEDIATE,
    UC_SEND_ONLY,
    UC_SEND_ONLY_WITH_IMMEDIATE,
    UC_RDMA_WRITE_FIRST,
    UC_RDMA_WRITE_MIDDLE,
    UC_RDMA_WRITE_LAST,
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    UC_RDMA_WRITE_ONLY,
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    UD_SEND_ONLY,
    UD_SEND_ONLY_WITH_IMMEDIATE,
];

const fn op(
    opcode: u8,
    name: &'static str,
    transport: Transport,
    op: Operation,
    position: Position,
    headers: ExtHeaders,
    payload: bool,
) -> Option<OpInfo> {
    Some(OpInfo {
        opcode,
        name,
        transport,
        op,
        position,
        headers,
        payload,
    })
}

const N: ExtHeaders = ExtHeaders::NONE;
const IMM: ExtHeaders = ExtHeaders::of(Ext::ImmDt);
const RETH: ExtHeaders = ExtHeaders::of(Ext::Reth);
const RETH_IMM: ExtHeaders = RETH.with(Ext::ImmDt);
const AETH: ExtHeaders = ExtHeaders::of(Ext::Aeth);

/// The opcode facts of one transport's operation, or `None` when the transport lacks it.
const fn rc_uc(opcode: u8, t: Transport) -> Option<OpInfo> {
    use Operation::*;
    use Position::*;
    let rc = matches!(t, Transport::Rc);
    // UC has only the SEND and RDMA WRITE operations.
    if !rc && (opcode & 0x1f) > RDMA_WRITE_ONLY_WITH_IMMEDIATE {
        return None;
    }
    macro_rules! name {
        ($rc:literal, $uc:literal) => {
            if rc {
                $rc
            } else {
                $uc
            }
        };
    }
    match opcode & 0x1f {
        SEND_FIRST => op(
            opcode,
            name!("IB_OPCODE_RC_SEND_FIRST", "IB_OPCODE_UC_SEND_FIRST"),
            t,
            Send,
            First,
            N,
            true,
        ),
        SEND_MIDDLE => op(
            opcode,
            name!("IB_OPCODE_RC_SEND_MIDDLE", "IB_OPCODE_UC_SEND_MIDDLE"),
            t,
            Send,
            Middle,
            N,
            true,
        ),
        SEND_LAST => op(
            opcode,
            name!("IB_OPCODE_RC_SEND_LAST", "IB_OPCODE_UC_SEND_LAST"),
            t,
            Send,
            Last,
            N,
            true,
        ),
        SEND_LAST_WITH_IMMEDIATE => op(
            opcode,
            name!(
                "IB_OPCODE_RC_SEND_LAST_WITH_IMMEDIATE",
                "IB_OPCODE_UC_SEND_LAST_WITH_IMMEDIATE"
            ),
            t,
            Send,
            Last,
            IMM,
            true,
        ),
        SEND_ONLY => op(
            opcode,
            name!("IB_OPCODE_RC_SEND_ONLY", "IB_OPCODE_UC_SEND_ONLY"),
            t,
            Send,
            Only,
            N,
            true,
        ),
        SEND_ONLY_WITH_IMMEDIATE => op(
            opcode,
            name!(
                "IB_OPCODE_RC_SEND_ONLY_WITH_IMMEDIATE",
                "IB_OPCODE_UC_SEND_ONLY_WITH_IMMEDIATE"
            ),
            t,
            Send,
            Only,
            IMM,
            true,
        ),
        RDMA_WRITE_FIRST => op(
            opcode,
            name!(
                "IB_OPCODE_RC_RDMA_WRITE_FIRST",
                "IB_OPCODE_UC_RDMA_WRITE_FIRST"
            ),
            t,
            RdmaWrite,
            First,
            RETH,
            true,
        ),
        RDMA_WRITE_MIDDLE => op(
            opcode,
            name!(
                "IB_OPCODE_RC_RDMA_WRITE_MIDDLE",
                "IB_OPCODE_UC_RDMA_WRITE_MIDDLE"
            ),
            t,
            RdmaWrite,
            Middle,
            N,
            true,
        ),
        RDMA_WRITE_LAST => op(
            opcode,
            name!(
                "IB_OPCODE_RC_RDMA_WRITE_LAST",
                "IB_OPCODE_UC_RDMA_WRITE_LAST"
            ),
            t,
            RdmaWrite,
            Last,
            N,
            true,
        ),
        RDMA_WRITE_LAST_WITH_IMMEDIATE => op(
            opcode,
            name!(
                "IB_OPCODE_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
                "IB_OPCODE_UC_RDMA_WRITE_LAST_WITH_IMMEDIATE"
            ),
            t,
            RdmaWrite,
            Last,
            IMM,
            true,
        ),
        RDMA_WRITE_ONLY => op(
            opcode,
            name!(
                "IB_OPCODE_RC_RDMA_WRITE_ONLY",
                "IB_OPCODE_UC_RDMA_WRITE_ONLY"
            ),
            t,
            RdmaWrite,
            Only,
            RETH,
            true,
        ),
        RDMA_WRITE_ONLY_WITH_IMMEDIATE => op(
            opcode,
            name!(
                "IB_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                "IB_OPCODE_UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"
            ),
            t,
            RdmaWrite,
            Only,
            RETH_IMM,
            true,
        ),
        RDMA_READ_REQUEST => op(
            opcode,
            "IB_OPCODE_RC_RDMA_READ_REQUEST",
            t,
            RdmaReadRequest,
            Only,
            RETH,
            false,
        ),
        RDMA_READ_RESPONSE_FIRST => op(
            opcode,
            "IB_OPCODE_RC_RDMA_READ_RESPONSE_FIRST",
            t,
            RdmaReadResponse,
            First,
            AETH,
            true,
        ),
        RDMA_READ_RESPONSE_MIDDLE => op(
            opcode,
            "IB_OPCODE_RC_RDMA_READ_RESPONSE_MIDDLE",
            t,
            RdmaReadResponse,
            Middle,
            N,
            true,
        ),
        RDMA_READ_RESPONSE_LAST => op(
            opcode,
            "IB_OPCODE_RC_RDMA_READ_RESPONSE_LAST",
            t,
            RdmaReadResponse,
            Last,
            AETH,
            true,
        ),
        RDMA_READ_RESPONSE_ONLY => op(
            opcode,
            "IB_OPCODE_RC_RDMA_READ_RESPONSE_ONLY",
            t,
            RdmaReadResponse,
            Only,
            AETH,
            true,
        ),
        ACKNOWLEDGE => op(
            opcode,
            "IB_OPCODE_RC_ACKNOWLEDGE",
            t,
            Acknowledge,
            Only,
            AETH,
            false,
        ),
        ATOMIC_ACKNOWLEDGE => op(
            opcode,
            "IB_OPCODE_RC_ATOMIC_ACKNOWLEDGE",
            t,
            AtomicAcknowledge,
            Only,
            AETH.with(Ext::AtomicAckEth),
            false,
        ),
        COMPARE_SWAP => op(
            opcode,
            "IB_OPCODE_RC_COMPARE_SWAP",
            t,
            CompareSwap,
            Only,
            ExtHeaders::of(Ext::AtomicEth),
            false,
        ),
        FETCH_ADD => op(
            opcode,
            "IB_OPCODE_RC_FETCH_ADD",
            t,
            FetchAdd,
            Only,
            ExtHeaders::of(Ext::AtomicEth),
            false,
        ),
        SEND_LAST_WITH_INVALIDATE => op(
            opcode,
            "IB_OPCODE_RC_SEND_LAST_WITH_INVALIDATE",
            t,
            Send,
            Last,
            ExtHeaders::of(Ext::Ieth),
            true,
        ),
        SEND_ONLY_WITH_INVALIDATE => op(
            opcode,
            "IB_OPCODE_RC_SEND_ONLY_WITH_INVALIDATE",
            t,
            Send,
            Only,
            ExtHeaders::of(Ext::Ieth),
            true,
        ),
        FLUSH => op(
            opcode,
            "IB_OPCODE_RC_FLUSH",
            t,
            Flush,
            Only,
            ExtHeaders::of(Ext::Feth).with(Ext::Reth),
            false,
        ),
        ATOMIC_WRITE => op(
            opcode,
            "IB_OPCODE_RC_ATOMIC_WRITE",
            t,
            AtomicWrite,
            Only,
            RETH,
            true,
        ),
        _ => None,
    }
}

const fn build(opcode: u8) -> Option<OpInfo> {
    match opcode >> 5 {
        0 => rc_uc(opcode, Transport::Rc),
        1 => rc_uc(opcode, Transport::Uc),
        3 => match opcode {
            UD_SEND_ONLY => op(
                opcode,
                "IB_OPCODE_UD_SEND_ONLY",
                Transport::Ud,
                Operation::Send,
                Position::Only,
                ExtHeaders::of(Ext::Deth),
                true,
            ),
            UD_SEND_ONLY_WITH_IMMEDIATE => op(
                opcode,
                "IB_OPCODE_UD_SEND_ONLY_WITH_IMMEDIATE",
                Transport::Ud,
                Operation::Send,
                Position::Only,
                ExtHeaders::of(Ext::Deth).with(Ext::ImmDt),
                true,
            ),
            _ => None,
        },
        _ => None,
    }
}

const fn build_table() -> [Option<OpInfo>; 256] {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = build(i as u8);
        i += 1;
    }
    t
}

/// All 256 opcodes, `None` for the unknown ones (built at compile time).
static TABLE: [Option<OpInfo>; 256] = build_table();

/// What `opcode` implies, or `None` for an opcode rrxe does not know (reserved, RD, CNP,
/// manufacturer-specific).
pub fn info(opcode: u8) -> Option<&'static OpInfo> {
    match TABLE.get(opcode as usize) {
        Some(Some(i)) => Some(i),
        _ => None,
    }
}

/// The opcode of packet `position` of a SEND on transport `t`: with immediate data (`imm`)
/// or with an R_Key to invalidate (`inv`) on the last/only packet. `None` for combinations
/// the transport lacks (both `imm` and `inv`; invalidate outside RC; UD beyond one packet).
pub const fn send_opcode(t: Transport, position: Position, imm: bool, inv: bool) -> Option<u8> {
    if imm && inv {
        return None;
    }
    let low = match (position, imm, inv) {
        (Position::First, _, _) => SEND_FIRST,
        (Position::Middle, _, _) => SEND_MIDDLE,
        (Position::Last, false, false) => SEND_LAST,
        (Position::Last, true, _) => SEND_LAST_WITH_IMMEDIATE,
        (Position::Last, _, true) => SEND_LAST_WITH_INVALIDATE,
        (Position::Only, false, false) => SEND_ONLY,
        (Position::Only, true, _) => SEND_ONLY_WITH_IMMEDIATE,
        (Position::Only, _, true) => SEND_ONLY_WITH_INVALIDATE,
    };
    match t {
        Transport::Rc => Some(low),
        Transport::Uc if !inv => Some(Transport::Uc.base() | low),
        Transport::Ud if matches!(position, Position::Only) && !inv => {
            Some(Transport::Ud.base() | low)
        }
        _ => None,
    }
}

/// The opcode of packet `position` of an RDMA WRITE on transport `t`, with immediate data on
/// the last/only packet when `imm`. `None` on UD.
pub const fn write_opcode(t: Transport, position: Position, imm: bool) -> Option<u8> {
    let low = match (position, imm) {
        (Position::First, _) => RDMA_WRITE_FIRST,
        (Position::Middle, _) => RDMA_WRITE_MIDDLE,
        (Position::Last, false) => RDMA_WRITE_LAST,
        (Position::Last, true) => RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (Position::Only, false) => RDMA_WRITE_ONLY,
        (Position::Only, true) => RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    };
    match t {
        Transport::Rc | Transport::Uc => Some(t.base() | low),
        Transport::Ud => None,
    }
}

/// The opcode of packet `position` of an RDMA READ response (RC only).
pub const fn read_response_opcode(position: Position) -> u8 {
    match position {
        Position::First => RC_RDMA_READ_RESPONSE_FIRST,
        Position::Middle => RC_RDMA_READ_RESPONSE_MIDDLE,
        Position::Last => RC_RDMA_READ_RESPONSE_LAST,
        Position::Only => RC_RDMA_READ_RESPONSE_ONLY,
    }
}
