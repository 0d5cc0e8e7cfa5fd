//! The opcode table (`kmod/logic/opcode.rs`) against rdma_rxe's `rxe_opcode[]` (Linux 6.12
//! `drivers/infiniband/sw/rxe/rxe_opcode.c`), transcribed below: for each RC/UC/UD opcode, the
//! header length, the `RXE_*_MASK` bits and the header offsets.

use rrxe_host_tests::logic::opcode::{self, Ext, ExtHeaders, Operation, Position, Transport};

/// (opcode, `.length`, `.mask` bits, `.offset[]`), RD entries left out.
const RXE: &[(u8, usize, &str, &str)] = &[
    (0x00, 12, "PAYLOAD REQ RWR SEND START", "BTH=0 PAYLOAD=12"),
    (0x01, 12, "MIDDLE PAYLOAD REQ SEND", "BTH=0 PAYLOAD=12"),
    (0x02, 12, "COMP END PAYLOAD REQ SEND", "BTH=0 PAYLOAD=12"),
    (
        0x03,
        16,
        "COMP END IMMDT PAYLOAD REQ SEND",
        "BTH=0 IMMDT=12 PAYLOAD=16",
    ),
    (
        0x04,
        12,
        "COMP END PAYLOAD REQ RWR SEND START",
        "BTH=0 PAYLOAD=12",
    ),
    (
        0x05,
        16,
        "COMP END IMMDT PAYLOAD REQ RWR SEND START",
        "BTH=0 IMMDT=12 PAYLOAD=16",
    ),
    (
        0x06,
        28,
        "PAYLOAD REQ RETH START WRITE",
        "BTH=0 PAYLOAD=28 RETH=12",
    ),
    (0x07, 12, "MIDDLE PAYLOAD REQ WRITE", "BTH=0 PAYLOAD=12"),
    (0x08, 12, "END PAYLOAD REQ WRITE", "BTH=0 PAYLOAD=12"),
    (
        0x09,
        16,
        "COMP END IMMDT PAYLOAD REQ RWR WRITE",
        "BTH=0 IMMDT=12 PAYLOAD=16",
    ),
    (
        0x0a,
        28,
        "END PAYLOAD REQ RETH START WRITE",
        "BTH=0 PAYLOAD=28 RETH=12",
    ),
    (
        0x0b,
        32,
        "COMP END IMMDT PAYLOAD REQ RETH RWR START WRITE",
        "BTH=0 IMMDT=28 PAYLOAD=32 RETH=12",
    ),
    (
        0x0c,
        28,
        "END READ REQ RETH START",
        "BTH=0 PAYLOAD=28 RETH=12",
    ),
    (
        0x0d,
        16,
        "ACK AETH PAYLOAD START",
        "AETH=12 BTH=0 PAYLOAD=16",
    ),
    (0x0e, 12, "ACK MIDDLE PAYLOAD", "BTH=0 PAYLOAD=12"),
    (0x0f, 16, "ACK AETH END PAYLOAD", "AETH=12 BTH=0 PAYLOAD=16"),
    (
        0x10,
        16,
        "ACK AETH END PAYLOAD START",
        "AETH=12 BTH=0 PAYLOAD=16",
    ),
    (0x11, 16, "ACK AETH END START", "AETH=12 BTH=0 PAYLOAD=16"),
    (
        0x12,
        24,
        "ACK AETH ATMACK END START",
        "AETH=12 ATMACK=16 BTH=0 PAYLOAD=24",
    ),
    (
        0x13,
        40,
        "ATMETH ATOMIC END REQ START",
        "ATMETH=12 BTH=0 PAYLOAD=40",
    ),
    (
        0x14,
        40,
        "ATMETH ATOMIC END REQ START",
        "ATMETH=12 BTH=0 PAYLOAD=40",
    ),
    (
        0x16,
        16,
        "COMP END IETH PAYLOAD REQ SEND",
        "BTH=0 IETH=12 PAYLOAD=16",
    ),
    (
        0x17,
        16,
        "COMP END IETH PAYLOAD REQ RWR SEND START",
        "BTH=0 IETH=12 PAYLOAD=16",
    ),
    (
        0x1c,
        32,
        "END FETH FLUSH REQ RETH START",
        "BTH=0 FETH=12 RETH=16",
    ),
    (
        0x1d,
        28,
        "ATOMIC_WRITE END PAYLOAD REQ RETH START",
        "BTH=0 PAYLOAD=28 RETH=12",
    ),
    (0x20, 12, "PAYLOAD REQ RWR SEND START", "BTH=0 PAYLOAD=12"),
    (0x21, 12, "MIDDLE PAYLOAD REQ SEND", "BTH=0 PAYLOAD=12"),
    (0x22, 12, "COMP END PAYLOAD REQ SEND", "BTH=0 PAYLOAD=12"),
    (
        0x23,
        16,
        "COMP END IMMDT PAYLOAD REQ SEND",
        "BTH=0 IMMDT=12 PAYLOAD=16",
    ),
    (
        0x24,
        12,
        "COMP END PAYLOAD REQ RWR SEND START",
        "BTH=0 PAYLOAD=12",
    ),
    (
        0x25,
        16,
        "COMP END IMMDT PAYLOAD REQ RWR SEND START",
        "BTH=0 IMMDT=12 PAYLOAD=16",
    ),
    (
        0x26,
        28,
        "PAYLOAD REQ RETH START WRITE",
        "BTH=0 PAYLOAD=28 RETH=12",
    ),
    (0x27, 12, "MIDDLE PAYLOAD REQ WRITE", "BTH=0 PAYLOAD=12"),
    (0x28, 12, "END PAYLOAD REQ WRITE", "BTH=0 PAYLOAD=12"),
    (
        0x29,
        16,
        "COMP END IMMDT PAYLOAD REQ RWR WRITE",
        "BTH=0 IMMDT=12 PAYLOAD=16",
    ),
    (
        0x2a,
        28,
        "END PAYLOAD REQ RETH START WRITE",
        "BTH=0 PAYLOAD=28 RETH=12",
    ),
    (
        0x2b,
        32,
        "COMP END IMMDT PAYLOAD REQ RETH RWR START WRITE",
        "BTH=0 IMMDT=28 PAYLOAD=32 RETH=12",
    ),
    (
        0x64,
        20,
        "COMP DETH END PAYLOAD REQ RWR SEND START",
        "BTH=0 DETH=12 PAYLOAD=20",
    ),
    (
        0x65,
        24,
        "COMP DETH END IMMDT PAYLOAD REQ RWR SEND START",
        "BTH=0 DETH=12 IMMDT=20 PAYLOAD=24",
    ),
];

fn ext_of(name: &str) -> Option<Ext> {
    Some(match name {
        "RETH" => Ext::Reth,
        "AETH" => Ext::Aeth,
        "IMMDT" => Ext::ImmDt,
        "DETH" => Ext::Deth,
        "ATMETH" => Ext::AtomicEth,
        "ATMACK" => Ext::AtomicAckEth,
        "IETH" => Ext::Ieth,
        "FETH" => Ext::Feth,
        _ => return None,
    })
}

#[test]
fn every_rxe_opcode_matches() {
    for &(op, len, mask, offsets) in RXE {
        let info = opcode::info(op).unwrap_or_else(|| panic!("{op:#04x} unknown"));
        let bits: Vec<&str> = mask.split(' ').collect();
        let has = |b: &str| bits.contains(&b);
        assert_eq!(info.opcode, op);
        assert_eq!(info.hdr_len(), len, "{}", info.name);
        let mut want = ExtHeaders::NONE;
        for b in &bits {
            if let Some(e) = ext_of(b) {
                want = want.with(e);
            }
        }
        assert_eq!(info.headers, want, "{}", info.name);
        assert_eq!(info.payload, has("PAYLOAD"), "{}", info.name);
        assert_eq!(info.is_request(), has("REQ"), "{}", info.name);
        assert_eq!(info.is_response(), has("ACK"), "{}", info.name);
        let pos = match (has("START"), has("MIDDLE"), has("END")) {
            (true, false, false) => Position::First,
            (false, true, false) => Position::Middle,
            (false, false, true) => Position::Last,
            (true, false, true) => Position::Only,
            other => panic!("{}: {other:?}", info.name),
        };
        assert_eq!(info.position, pos, "{}", info.name);
        assert_eq!(info.needs_recv_wqe(), has("RWR"), "{}", info.name);
        assert_eq!(info.completes_recv(), has("COMP"), "{}", info.name);
        assert_eq!(info.has_imm(), has("IMMDT"), "{}", info.name);
        assert_eq!(info.has_inv(), has("IETH"), "{}", info.name);
        let op_bits = [
            ("SEND", Operation::Send),
            ("WRITE", Operation::RdmaWrite),
            ("READ", Operation::RdmaReadRequest),
            ("ATOMIC", Operation::CompareSwap),
            ("FLUSH", Operation::Flush),
            ("ATOMIC_WRITE", Operation::AtomicWrite),
        ];
        for (bit, o) in op_bits {
            if has(bit) && bit != "ATOMIC" {
                assert_eq!(info.op, o, "{}", info.name);
            }
        }
        if has("ATOMIC") {
            assert!(matches!(
                info.op,
                Operation::CompareSwap | Operation::FetchAdd
            ));
        }
        for kv in offsets.split(' ') {
            let (k, v) = kv.split_once('=').unwrap();
            let v: usize = v.parse().unwrap();
            match k {
                "BTH" => assert_eq!(v, 0),
                // rxe leaves PAYLOAD's offset unset (0) for FLUSH, which has none.
                "PAYLOAD" => assert_eq!(v, info.hdr_len(), "{}", info.name),
                h => assert_eq!(
                    info.headers.offset(ext_of(h).unwrap()),
                    Some(v),
                    "{} {h}",
                    info.name
                ),
            }
        }
        let t = match op >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            3 => Transport::Ud,
            _ => unreachable!(),
        };
        assert_eq!(info.transport, t);
        assert!(info.name.starts_with("IB_OPCODE_"), "{}", info.name);
    }
}

#[test]
fn exactly_the_rxe_opcodes_are_known() {
    let known: Vec<u8> = (0..=255u8).filter(|&o| opcode::info(o).is_some()).collect();
    let want: Vec<u8> = RXE.iter().map(|r| r.0).collect();
    assert_eq!(known, want);
    assert_eq!(opcode::ALL.to_vec(), want);
}

#[test]
fn unknown_opcodes() {
    // Reserved RC 0x15, RD, CNP, manufacturer-specific, UD SEND_FIRST.
    for op in [
        0x15, 0x18, 0x1f, 0x2c, 0x3f, 0x40, 0x4a, 0x60, 0x63, 0x66, 0x80, 0x81, 0xe0, 0xff,
    ] {
        assert!(opcode::info(op).is_none(), "{op:#x}");
    }
}

#[test]
fn header_order_and_offsets() {
    let wimm = ExtHeaders::of(Ext::Reth).with(Ext::ImmDt);
    assert_eq!(wimm.iter().collect::<Vec<_>>(), [Ext::Reth, Ext::ImmDt]);
    assert_eq!(wimm.offset(Ext::ImmDt), Some(28));
    assert_eq!(wimm.offset(Ext::Aeth), None);
    assert_eq!(wimm.len(), 20);
    let ud = opcode::info(opcode::UD_SEND_ONLY_WITH_IMMEDIATE).unwrap();
    assert_eq!(
        ud.headers.iter().collect::<Vec<_>>(),
        [Ext::Deth, Ext::ImmDt]
    );
    let ack = opcode::info(opcode::RC_ATOMIC_ACKNOWLEDGE).unwrap();
    assert_eq!(
        ack.headers.iter().collect::<Vec<_>>(),
        [Ext::Aeth, Ext::AtomicAckEth]
    );
    let flush = opcode::info(opcode::RC_FLUSH).unwrap();
    assert_eq!(
        flush.headers.iter().collect::<Vec<_>>(),
        [Ext::Feth, Ext::Reth]
    );
    assert!(ExtHeaders::NONE.is_empty());
}

#[test]
fn opcode_choice() {
    use Position::*;
    use Transport::*;
    assert_eq!(
        opcode::send_opcode(Rc, First, true, false),
        Some(opcode::RC_SEND_FIRST)
    );
    assert_eq!(
        opcode::send_opcode(Rc, Middle, false, true),
        Some(opcode::RC_SEND_MIDDLE)
    );
    assert_eq!(
        opcode::send_opcode(Rc, Last, true, false),
        Some(opcode::RC_SEND_LAST_WITH_IMMEDIATE)
    );
    assert_eq!(
        opcode::send_opcode(Rc, Only, false, true),
        Some(opcode::RC_SEND_ONLY_WITH_INVALIDATE)
    );
    assert_eq!(
        opcode::send_opcode(Rc, Last, false, true),
        Some(opcode::RC_SEND_LAST_WITH_INVALIDATE)
    );
    assert_eq!(opcode::send_opcode(Rc, Only, true, true), None);
    assert_eq!(opcode::send_opcode(Uc, Only, false, true), None);
    assert_eq!(
        opcode::send_opcode(Uc, Last, false, false),
        Some(opcode::UC_SEND_LAST)
    );
    assert_eq!(
        opcode::send_opcode(Ud, Only, true, false),
        Some(opcode::UD_SEND_ONLY_WITH_IMMEDIATE)
    );
    assert_eq!(
        opcode::send_opcode(Ud, Only, false, false),
        Some(opcode::UD_SEND_ONLY)
    );
    assert_eq!(opcode::send_opcode(Ud, First, false, false), None);
    assert_eq!(
        opcode::write_opcode(Uc, Only, true),
        Some(opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
    );
    assert_eq!(
        opcode::write_opcode(Rc, Middle, true),
        Some(opcode::RC_RDMA_WRITE_MIDDLE)
    );
    assert_eq!(opcode::write_opcode(Ud, Only, false), None);
    assert_eq!(
        opcode::read_response_opcode(Only),
        opcode::RC_RDMA_READ_RESPONSE_ONLY
    );
    // Every choice the helpers make is a known opcode with the asked-for position and headers.
    for t in [Rc, Uc, Ud] {
        for p in [First, Middle, Last, Only] {
            for imm in [false, true] {
                for inv in [false, true] {
                    if let Some(o) = opcode::send_opcode(t, p, imm, inv) {
                        let i = opcode::info(o).unwrap();
                        assert_eq!((i.transport, i.position, i.op), (t, p, Operation::Send));
                        assert_eq!(i.has_imm(), imm && p.is_end());
                        assert_eq!(i.has_inv(), inv && p.is_end());
                    }
                }
                if let Some(o) = opcode::write_opcode(t, p, imm) {
                    let i = opcode::info(o).unwrap();
                    assert_eq!(
                        (i.transport, i.position, i.op),
                        (t, p, Operation::RdmaWrite)
                    );
                    assert_eq!(i.has_imm(), imm && p.is_end());
                    assert_eq!(i.headers.has(Ext::Reth), p.is_start());
                }
            }
            let i = opcode::info(opcode::read_response_opcode(p)).unwrap();
            assert_eq!((i.position, i.op), (p, Operation::RdmaReadResponse));
            assert_eq!(i.headers.has(Ext::Aeth), p != Middle);
        }
    }
}

#[test]
fn positions() {
    assert_eq!(Position::of(0, 0), None);
    assert_eq!(Position::of(0, 1), Some(Position::Only));
    assert_eq!(Position::of(0, 3), Some(Position::First));
    assert_eq!(Position::of(1, 3), Some(Position::Middle));
    assert_eq!(Position::of(2, 3), Some(Position::Last));
    assert_eq!(Position::of(3, 3), None);
    assert!(Position::Only.is_start() && Position::Only.is_end());
    assert!(!Position::Middle.is_start() && !Position::Middle.is_end());
}
