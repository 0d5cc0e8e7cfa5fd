//! The RoCEv2 header codecs, packet view, builder and segmentation (`kmod/logic/wire.rs`):
//! known encodings, round trips, total decoding of arbitrary bytes, segmentation laws.

use proptest::prelude::*;
use rrxe_host_tests::logic::opcode::{self, Ext, Position, Transport};
use rrxe_host_tests::logic::port::IbMtu;
use rrxe_host_tests::logic::psn::Psn;
use rrxe_host_tests::logic::segment::*;
use rrxe_host_tests::logic::wire::*;

fn bth(opcode: u8) -> Bth {
    Bth {
        opcode,
        pkey: BTH_DEF_PKEY,
        dest_qp: 0x11,
        psn: Psn::new(0x123456).unwrap(),
        ..Bth::default()
    }
}

#[test]
fn bth_layout() {
    let b = Bth {
        opcode: 0x0a,
        se: true,
        mig: true,
        pad: 3,
        tver: 0,
        pkey: 0xffff,
        fecn: true,
        becn: false,
        dest_qp: 0x00ab_cdef,
        ack_req: true,
        sel: false,
        hole: false,
        psn: Psn::new(0x00fe_dcba).unwrap(),
    };
    assert_eq!(
        b.to_bytes(),
        [0x0a, 0xf0, 0xff, 0xff, 0x80, 0xab, 0xcd, 0xef, 0x80, 0xfe, 0xdc, 0xba]
    );
    assert_eq!(Bth::from_bytes(&b.to_bytes()), b);
    // rrxe's announcement is the first bit after AckReq (0x40), alone of the seven.
    let s = Bth { sel: true, ..b };
    assert_eq!(s.to_bytes()[8], 0xc0);
    assert_eq!(Bth::from_bytes(&s.to_bytes()), s);
    // Its hole reports the second (0x20).
    let h = Bth { hole: true, ..b };
    assert_eq!(h.to_bytes()[8], 0xa0);
    assert_eq!(Bth::from_bytes(&h.to_bytes()), h);
    // The other reserved bits (resv6a, resv7's last five) are ignored on decode; over-wide
    // fields are truncated.
    let d = Bth::from_bytes(&[0x04, 0x0f, 0, 1, 0x3f, 0, 0, 2, 0x1f, 0, 0, 3]);
    assert_eq!(
        (d.tver, d.fecn, d.becn, d.dest_qp, d.ack_req, d.sel, d.hole),
        (15, false, false, 2, false, false, false)
    );
    assert!(Bth::from_bytes(&[0x04, 0, 0, 1, 0, 0, 0, 2, 0x40, 0, 0, 3]).sel);
    let wide = Bth {
        pad: 7,
        tver: 0x1f,
        dest_qp: 0x0100_0002,
        ..bth(4)
    };
    assert_eq!(Bth::from_bytes(&wide.to_bytes()).dest_qp, 2);
    assert_eq!(Bth::from_bytes(&wide.to_bytes()).pad, 3);
    assert_eq!(Bth::decode(&[0; 11]), None);
    assert_eq!(bth(4).write(&mut [0u8; 11]), Err(WireError::Truncated));
}

#[test]
fn extension_layouts() {
    let r = Reth {
        va: 0x0102_0304_0506_0708,
        rkey: 0x1122_3344,
        len: 0x5566_7788,
    };
    assert_eq!(
        r.to_bytes(),
        [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
    );
    let a = AtomicEth {
        va: 1,
        rkey: 2,
        swap_add: 3,
        compare: 4,
    };
    let ab = a.to_bytes();
    assert_eq!((ab[7], ab[11], ab[19], ab[27]), (1, 2, 3, 4));
    assert_eq!(
        Deth {
            qkey: 0x8001_0000,
            src_qp: 0xff_0001
        }
        .to_bytes(),
        [0x80, 1, 0, 0, 0, 0xff, 0, 1]
    );
    assert_eq!(Deth::from_bytes(&[0, 0, 0, 1, 0xee, 0, 0, 5]).src_qp, 5);
    assert_eq!(Aeth::ack(5, AETH_ACK_UNLIMITED).to_bytes(), [0x1f, 0, 0, 5]);
    assert_eq!(
        ImmDt { imm: 0x1122_3344 }.to_bytes(),
        [0x11, 0x22, 0x33, 0x44]
    );
    assert_eq!(Ieth { rkey: 0xbeef }.to_bytes(), [0, 0, 0xbe, 0xef]);
    assert_eq!(
        AtomicAckEth { orig: 9 }.to_bytes(),
        [0, 0, 0, 0, 0, 0, 0, 9]
    );
    assert_eq!(
        Feth {
            placement_type: 2,
            selectivity: 1
        }
        .to_bytes(),
        [0, 0, 0, 0x12]
    );
    assert_eq!(
        (Reth::LEN, Aeth::LEN, AtomicEth::LEN, Deth::LEN),
        (16, 4, 28, 8)
    );
}

#[test]
fn syndromes() {
    // rxe's enum aeth_syndrome.
    assert_eq!(Syndrome::Ack { credits: 0x1f }.encode(), 0x1f);
    assert_eq!(Syndrome::Nak(NakCode::PsnSeqError).encode(), 0x60);
    assert_eq!(Syndrome::Nak(NakCode::InvalidRequest).encode(), 0x61);
    assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).encode(), 0x62);
    assert_eq!(
        Syndrome::Nak(NakCode::RemoteOperationalError).encode(),
        0x63
    );
    assert_eq!(Syndrome::RnrNak { timer: 3 }.encode(), 0x23);
    assert_eq!(
        Aeth::rnr_nak(0, 12).syndrome(),
        Syndrome::RnrNak { timer: 12 }
    );
    assert_eq!(
        Aeth::nak(7, NakCode::RemoteAccessError).to_bytes(),
        [0x62, 0, 0, 7]
    );
    assert_eq!(Syndrome::decode(0x40), Syndrome::Reserved(0x40));
    assert_eq!(Syndrome::decode(0x9f), Syndrome::Reserved(0x9f));
    assert_eq!(Syndrome::decode(0x65), Syndrome::Nak(NakCode::Reserved(5)));
    for raw in 0..=255u8 {
        assert_eq!(Syndrome::decode(raw).encode(), raw);
    }
    assert_eq!(rnr_timer_usecs(0), 655_360);
    assert_eq!(rnr_timer_usecs(1), 10);
    assert_eq!(rnr_timer_usecs(14), 1_280);
    assert_eq!(rnr_timer_usecs(31), 491_520);
    assert_eq!(rnr_timer_usecs(32 + 1), 10);
    let t: Vec<u32> = (1..32).map(rnr_timer_usecs).collect();
    assert!(t.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn pad_counts() {
    assert_eq!(
        [0, 1, 2, 3, 4, 5, 1023, 1024].map(pad_for),
        [0, 3, 2, 1, 0, 3, 1, 0]
    );
    assert_eq!(pad_for(usize::MAX), 1);
}

/// Every field of every extension header filled from `seed`, and the BTH, for `op`.
fn headers_for(op: u8, b: Bth, x: u64) -> Headers {
    let info = opcode::info(op).unwrap();
    let mut h = Headers::new(Bth { opcode: op, ..b });
    let x32 = x as u32;
    for e in info.headers.iter() {
        match e {
            Ext::Deth => {
                h.deth = Some(Deth {
                    qkey: x32,
                    src_qp: x32 & MASK24,
                })
            }
            Ext::Feth => {
                h.feth = Some(Feth {
                    placement_type: x as u8 & 0xf,
                    selectivity: (x >> 4) as u8 & 3,
                })
            }
            Ext::Reth => {
                h.reth = Some(Reth {
                    va: x,
                    rkey: !x32,
                    len: x32.rotate_left(7),
                })
            }
            Ext::AtomicEth => {
                h.atmeth = Some(AtomicEth {
                    va: x,
                    rkey: x32,
                    swap_add: !x,
                    compare: x.rotate_left(9),
                })
            }
            Ext::Aeth => {
                h.aeth = Some(Aeth {
                    syndrome: (x >> 24) as u8,
                    msn: x32 & MASK24,
                })
            }
            Ext::AtomicAckEth => {
                h.atmack = Some(AtomicAckEth {
                    orig: x.swap_bytes(),
                })
            }
            Ext::ImmDt => h.immdt = Some(ImmDt { imm: !x32 }),
            Ext::Ieth => {
                h.ieth = Some(Ieth {
                    rkey: x32.rotate_right(3),
                })
            }
        }
    }
    h
}

#[test]
fn builder_checks_the_header_set() {
    let mut h = headers_for(opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, bth(0), 1);
    let mut buf = [0u8; 64];
    assert_eq!(h.write(&mut buf), Ok(32));
    h.immdt = None;
    assert_eq!(h.write(&mut buf), Err(WireError::MissingHeader(Ext::ImmDt)));
    h.immdt = Some(ImmDt { imm: 1 });
    h.aeth = Some(Aeth::default());
    assert_eq!(
        h.write(&mut buf),
        Err(WireError::UnexpectedHeader(Ext::Aeth))
    );
    let h = Headers::new(bth(0x15));
    assert_eq!(h.write(&mut buf), Err(WireError::UnknownOpcode(0x15)));
    let h = headers_for(opcode::RC_ACKNOWLEDGE, bth(0), 1);
    assert_eq!(write_packet(&mut buf, &h, &[1]), Err(WireError::BadPad));
    assert_eq!(write_packet(&mut buf, &h, &[]), Ok(20));
    assert_eq!(
        write_packet(&mut buf[..19], &h, &[]),
        Err(WireError::Truncated)
    );
    assert_eq!(h.len(), 16);
}

#[test]
fn parse_rejects() {
    let mut buf = [0u8; 64];
    let h = headers_for(opcode::RC_SEND_ONLY, bth(0), 0);
    let n = write_packet(&mut buf, &h, &[1, 2, 3, 4, 5]).unwrap();
    assert_eq!(n, 12 + 5 + 3 + 4);
    let p = Packet::parse(&buf[..n]).unwrap();
    assert_eq!(p.payload(), [1, 2, 3, 4, 5]);
    assert_eq!(p.pad_bytes(), [0, 0, 0]);
    assert_eq!(p.bth().pad, 3);
    assert_eq!(Packet::parse(&buf[..11]), Err(WireError::Truncated));
    // One byte short of the pad + ICRC, or pad not reaching a multiple of 4.
    assert_eq!(Packet::parse(&buf[..n - 1]), Err(WireError::BadPad));
    // Only the total length constrains the pad count: 6 bytes + 2 of pad is fine too.
    let mut q = buf;
    q[1] = 0x20;
    assert_eq!(
        Packet::parse(&q[..n]).unwrap().payload(),
        [1, 2, 3, 4, 5, 0]
    );
    q[1] = 0x31;
    assert_eq!(Packet::parse(&q[..n]), Err(WireError::BadTver(1)));
    q[0] = 0x40;
    assert_eq!(Packet::parse(&q[..n]), Err(WireError::UnknownOpcode(0x40)));
    // Headers cut short.
    let h = headers_for(opcode::RC_COMPARE_SWAP, bth(0), 0);
    let n = write_packet(&mut buf, &h, &[]).unwrap();
    assert_eq!(n, 44);
    assert_eq!(Packet::parse(&buf[..39]), Err(WireError::Truncated));
    assert_eq!(Packet::parse(&buf[..43]), Err(WireError::Truncated));
    // Payload on an opcode without one.
    assert_eq!(
        Packet::parse(&[&buf[..40], &[0; 8]].concat()),
        Err(WireError::BadPad)
    );
    let mut q = buf;
    q[1] = 0x10;
    assert_eq!(
        Packet::parse(&[&q[..40], &[0; 8]].concat()),
        Err(WireError::BadPad)
    );
}

#[test]
fn payload_lengths_per_position() {
    let i = |o| opcode::info(o).unwrap();
    assert!(payload_len_ok(i(opcode::RC_SEND_ONLY), 0, 1024));
    assert!(payload_len_ok(i(opcode::RC_SEND_ONLY), 1024, 1024));
    assert!(!payload_len_ok(i(opcode::RC_SEND_ONLY), 1025, 1024));
    assert!(payload_len_ok(i(opcode::UC_SEND_FIRST), 1024, 1024));
    assert!(!payload_len_ok(i(opcode::RC_SEND_MIDDLE), 1020, 1024));
    assert!(!payload_len_ok(i(opcode::RC_RDMA_WRITE_LAST), 0, 1024));
    assert!(payload_len_ok(
        i(opcode::RC_RDMA_READ_RESPONSE_LAST),
        1,
        1024
    ));
    assert!(payload_len_ok(i(opcode::UD_SEND_ONLY), 5000, 1024));
    assert!(payload_len_ok(i(opcode::RC_ACKNOWLEDGE), 0, 256));
}

#[test]
fn segmentation_examples() {
    let s = Segmentation::new(4096, 1024).unwrap();
    assert_eq!(s.count(), 4);
    assert_eq!(
        s.iter()
            .map(|g| (g.offset, g.len, g.position))
            .collect::<Vec<_>>(),
        [
            (0, 1024, Position::First),
            (1024, 1024, Position::Middle),
            (2048, 1024, Position::Middle),
            (3072, 1024, Position::Last)
        ]
    );
    let s = Segmentation::new(0, 1024).unwrap();
    assert_eq!(
        s.iter().collect::<Vec<_>>(),
        [Segment {
            index: 0,
            offset: 0,
            len: 0,
            position: Position::Only,
            pad: 0
        }]
    );
    let s = Segmentation::with_mtu(2501, IbMtu::Mtu1024);
    assert_eq!(
        s.iter().map(|g| (g.len, g.pad)).collect::<Vec<_>>(),
        [(1024, 0), (1024, 0), (453, 3)]
    );
    assert_eq!(s.segment(2).unwrap().psn(Psn::MAX), Psn::new(1).unwrap());
    assert_eq!(s.segment(3), None);
    assert_eq!(Segmentation::new(10, 0), None);
    assert_eq!(Segmentation::new(10, 1022), None);
    let big = Segmentation::new(u32::MAX, 4096).unwrap();
    assert_eq!(big.count(), 1 << 20);
    assert_eq!(big.segment((1 << 20) - 1).unwrap().len, 4095);
}

fn known_opcode() -> impl Strategy<Value = u8> {
    prop::sample::select(opcode::ALL.to_vec())
}

prop_compose! {
    fn any_bth()(opcode in any::<u8>(), se in any::<bool>(), mig in any::<bool>(), pad in 0u8..4,
                 tver in 0u8..16, pkey in any::<u16>(), fecn in any::<bool>(),
                 becn in any::<bool>(),
                 dest_qp in 0u32..=MASK24, ack_req in any::<bool>(), sel in any::<bool>(),
                 hole in any::<bool>(), psn in 0u32..=MASK24) -> Bth {
        let psn = Psn::from_masked(psn);
        Bth { opcode, se, mig, pad, tver, pkey, fecn, becn, dest_qp, ack_req, sel, hole, psn }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn bth_round_trip(b in any_bth()) {
        prop_assert_eq!(Bth::from_bytes(&b.to_bytes()), b);
        let mut buf = [0u8; 12];
        prop_assert_eq!(b.write(&mut buf), Ok(12));
        prop_assert_eq!(Bth::decode(&buf), Some(b));
    }

    /// Decoding then encoding reproduces the bytes, except the reserved bits (but `sel` and
    /// `hole`), which become 0.
    #[test]
    fn bth_bytes_round_trip(b in any::<[u8; 12]>()) {
        let mut want = b;
        want[4] &= 0xc0;
        want[8] &= 0xe0;
        prop_assert_eq!(Bth::from_bytes(&b).to_bytes(), want);
    }

    #[test]
    fn ext_round_trips(b in any::<[u8; 28]>()) {
        let r: &[u8; 16] = b[..16].try_into().unwrap();
        prop_assert_eq!(&Reth::from_bytes(r).to_bytes(), r);
        let a: &[u8; 28] = &b;
        prop_assert_eq!(&AtomicEth::from_bytes(a).to_bytes(), a);
        let k: &[u8; 8] = b[..8].try_into().unwrap();
        prop_assert_eq!(&AtomicAckEth::from_bytes(k).to_bytes(), k);
        let mut d = *k;
        d[4] = 0;
        prop_assert_eq!(Deth::from_bytes(k).to_bytes(), d);
        let w: &[u8; 4] = b[..4].try_into().unwrap();
        prop_assert_eq!(&Aeth::from_bytes(w).to_bytes(), w);
        prop_assert_eq!(&ImmDt::from_bytes(w).to_bytes(), w);
        prop_assert_eq!(&Ieth::from_bytes(w).to_bytes(), w);
        prop_assert_eq!(Feth::from_bytes(w).to_bytes(), [0, 0, 0, w[3] & 0x3f]);
    }

    #[test]
    fn ext_value_round_trips(x in any::<u64>(), y in any::<u64>(), z in any::<u64>(),
                             w in any::<u32>()) {
        let r = Reth { va: x, rkey: w, len: y as u32 };
        prop_assert_eq!(Reth::from_bytes(&r.to_bytes()), r);
        let a = AtomicEth { va: x, rkey: w, swap_add: y, compare: z };
        prop_assert_eq!(AtomicEth::from_bytes(&a.to_bytes()), a);
        let d = Deth { qkey: w, src_qp: (x as u32) & MASK24 };
        prop_assert_eq!(Deth::from_bytes(&d.to_bytes()), d);
        let e = Aeth { syndrome: (y >> 56) as u8, msn: w & MASK24 };
        prop_assert_eq!(Aeth::from_bytes(&e.to_bytes()), e);
        prop_assert_eq!(ImmDt::from_bytes(&ImmDt { imm: w }.to_bytes()), ImmDt { imm: w });
        prop_assert_eq!(Ieth::from_bytes(&Ieth { rkey: w }.to_bytes()), Ieth { rkey: w });
        let k = AtomicAckEth { orig: z };
        prop_assert_eq!(AtomicAckEth::from_bytes(&k.to_bytes()), k);
        let f = Feth { placement_type: (w & 0xf) as u8, selectivity: ((w >> 4) & 3) as u8 };
        prop_assert_eq!(Feth::from_bytes(&f.to_bytes()), f);
    }

    /// Build any known opcode's packet with any fields and payload, parse it back.
    #[test]
    fn packet_round_trip(op in known_opcode(), b in any_bth(), x in any::<u64>(),
                         payload in prop::collection::vec(any::<u8>(), 0..80)) {
        let info = opcode::info(op).unwrap();
        let payload = if info.payload { payload } else { Vec::new() };
        let h = headers_for(op, Bth { tver: 0, ..b }, x);
        let mut buf = vec![0xa5u8; 256];
        let n = write_packet(&mut buf, &h, &payload).unwrap();
        prop_assert_eq!(Some(n), packet_len(info, payload.len()));
        prop_assert_eq!(n % 4, 0);
        let p = Packet::parse(&buf[..n]).unwrap();
        let mut want = h;
        want.bth.pad = pad_for(payload.len());
        prop_assert_eq!(p.headers(), &want);
        prop_assert_eq!(p.info(), info);
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert!(p.pad_bytes().iter().all(|&b| b == 0));
        prop_assert_eq!(p.icrc(), 0);
        prop_assert_eq!(p.hdr_len(), info.hdr_len());
        prop_assert_eq!(p.icrc_tail().len(), n - 16);
        // Re-encoding the parsed headers gives the same header bytes.
        let mut again = [0u8; 64];
        let hl = p.headers().write(&mut again).unwrap();
        prop_assert_eq!(&again[..hl], &buf[..hl]);
        // The accessors agree with the header struct.
        prop_assert_eq!(p.reth(), want.reth);
        prop_assert_eq!(p.aeth(), want.aeth);
        prop_assert_eq!(p.immdt(), want.immdt);
        prop_assert_eq!(p.deth(), want.deth);
        prop_assert_eq!(p.atmeth(), want.atmeth);
        prop_assert_eq!(p.atmack(), want.atmack);
        prop_assert_eq!(p.ieth(), want.ieth);
        prop_assert_eq!(p.feth(), want.feth);
    }

    /// Arbitrary bytes never panic the decoders; whatever parses is self-consistent.
    #[test]
    fn parse_is_total(bytes in prop::collection::vec(any::<u8>(), 0..120)) {
        for h in 0..bytes.len().min(40) {
            let _ = Bth::decode(&bytes[h..]);
            let _ = Reth::decode(&bytes[h..]);
            let _ = AtomicEth::decode(&bytes[h..]);
            let _ = Headers::decode(&bytes[h..]);
        }
        if let Ok(p) = Packet::parse(&bytes) {
            let r = p.payload_range();
            prop_assert_eq!(r.start, p.info().hdr_len());
            prop_assert_eq!(r.end + p.bth().pad as usize + 4, bytes.len());
            prop_assert_eq!((r.len() + p.bth().pad as usize) % 4, 0);
            prop_assert_eq!(p.bth().tver, 0);
        }
    }

    /// Mutations of valid packets (truncation, a flipped opcode/flags byte) never panic either.
    #[test]
    fn mutated_packets(op in known_opcode(), x in any::<u64>(), len in 0usize..64,
                       cut in 0usize..200,
                       byte in any::<u8>(), at in 0usize..2) {
        let info = opcode::info(op).unwrap();
        let h = headers_for(op, bth(op), x);
        let mut buf = vec![0u8; 200];
        let n = write_packet(&mut buf, &h, &vec![7; if info.payload { len } else { 0 }]).unwrap();
        buf[at] = byte;
        let _ = Packet::parse(&buf[..cut.min(n)]);
        let _ = Packet::parse(&buf[..n]);
    }

    #[test]
    fn segmentation_laws(len in prop_oneof![0u32..20_000, any::<u32>()], mtu_words in 1u32..=1024,
                         std in any::<bool>()) {
        let mtu = if std { 256 << (mtu_words % 5) } else { mtu_words * 4 };
        let s = Segmentation::new(len, mtu).unwrap();
        prop_assume!(s.count() <= 50_000);
        let segs: Vec<Segment> = s.iter().collect();
        prop_assert_eq!(segs.len() as u32, s.count());
        prop_assert_eq!(s.iter().len() as u32, s.count());
        prop_assert_eq!(s.count(), len.div_ceil(mtu).max(1));
        let mut next = 0u64;
        for (i, g) in segs.iter().enumerate() {
            prop_assert_eq!(g.index as usize, i);
            prop_assert_eq!(g.offset as u64, next);
            prop_assert!(g.len <= mtu);
            prop_assert_eq!(g.pad, pad_for(g.len as usize));
            prop_assert_eq!(Some(g.position), Position::of(g.index, s.count()));
            if !g.position.is_end() {
                prop_assert_eq!(g.len, mtu);
                prop_assert_eq!(g.pad, 0);
            } else {
                prop_assert!(g.len > 0 || len == 0);
            }
            // The opcode chosen for the position has that position, and the receiver's length
            // rule accepts what the sender cut.
            let o = opcode::send_opcode(Transport::Rc, g.position, true, false).unwrap();
            prop_assert_eq!(opcode::info(o).unwrap().position, g.position);
            let w = opcode::write_opcode(Transport::Uc, g.position, false).unwrap();
            let wi = opcode::info(w).unwrap();
            prop_assert!(payload_len_ok(wi, g.len as usize, mtu as usize));
            next += g.len as u64;
        }
        prop_assert_eq!(next, len as u64);
        prop_assert_eq!(segs[0].position.is_start(), true);
        prop_assert_eq!(segs[segs.len() - 1].position.is_end(), true);
    }
}
