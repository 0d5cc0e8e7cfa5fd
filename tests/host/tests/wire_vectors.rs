//! Golden vectors: RoCEv2 packets the kernel's own rdma_rxe put on the wire
//! (`tests/host/vectors/rxe-roce.txt`, captured by `tests/vm/capture-rxe.sh`). Every packet
//! must parse with `wire.rs`, re-encode to the same bytes, and carry the ICRC `icrc.rs`
//! computes: wire compatibility with rxe.

use std::collections::BTreeSet;

use rrxe_host_tests::logic::icrc::{self, IpUdp};
use rrxe_host_tests::logic::opcode;
use rrxe_host_tests::logic::roce::{udp_sport, ROCE_V2_UDP_DPORT};
use rrxe_host_tests::logic::wire::{self, NakCode, Packet, Syndrome};

const VECTORS: &str = include_str!("../vectors/rxe-roce.txt");

struct Vector {
    what: String,
    bytes: Vec<u8>,
}

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn vectors() -> Vec<Vector> {
    let mut v = Vec::new();
    let mut what = String::new();
    for line in VECTORS.lines() {
        let line = line.trim();
        if let Some(c) = line.strip_prefix('#') {
            what = c.trim().to_string();
        } else if !line.is_empty() {
            v.push(Vector {
                what: what.clone(),
                bytes: hex(line),
            });
        }
    }
    v
}

#[test]
fn every_packet_parses_reencodes_and_has_the_right_icrc() {
    let vs = vectors();
    assert!(vs.len() >= 50, "only {} vectors", vs.len());
    for v in &vs {
        let split = IpUdp::split(&v.bytes).unwrap_or_else(|e| panic!("{}: {e:?}", v.what));
        let udp = split.udp();
        assert_eq!(
            udp.len(),
            match split {
                IpUdp::V4(..) => v.bytes.len() - 20,
                IpUdp::V6(..) => v.bytes.len() - 40,
            }
        );
        assert_eq!(
            u16::from_be_bytes([udp[2], udp[3]]),
            ROCE_V2_UDP_DPORT,
            "{}",
            v.what
        );
        let roce = split.roce();
        let p = Packet::parse(roce).unwrap_or_else(|e| panic!("{}: {e:?}", v.what));

        // The comment line names the opcode, QPN, PSN, pad and payload length.
        let info = p.info();
        assert!(
            v.what
                .contains(&format!(" {} ", &info.name["IB_OPCODE_".len()..])),
            "{}",
            v.what
        );
        assert!(
            v.what.contains(&format!("qpn={} ", p.bth().dest_qp)),
            "{}",
            v.what
        );
        assert!(
            v.what.contains(&format!("psn={:#08x} ", p.bth().psn.get())),
            "{}",
            v.what
        );
        assert!(
            v.what.contains(&format!("pad={} ", p.bth().pad)),
            "{}",
            v.what
        );
        assert!(
            v.what.contains(&format!("payload={} ", p.payload().len())),
            "{}",
            v.what
        );

        // Headers re-encode to the captured bytes (rxe leaves every reserved bit 0).
        let mut buf = vec![0u8; roce.len()];
        let hl = p.headers().write(&mut buf).unwrap();
        assert_eq!(hl, info.hdr_len());
        assert_eq!(buf[..hl], roce[..hl], "{}", v.what);
        // The whole UDP payload rebuilds byte for byte, zero pad included, once the ICRC is in.
        let n = wire::write_packet(&mut buf, p.headers(), p.payload()).unwrap();
        assert_eq!(n, roce.len(), "{}", v.what);
        assert!(icrc::write_icrc(&mut buf, p.icrc()));
        assert_eq!(buf, roce, "{}", v.what);

        // The ICRC rxe computed is the one we compute, stored little-endian.
        let ours = split.icrc().unwrap();
        assert_eq!(Some(ours), split.stored_icrc(), "{}", v.what);
        assert_eq!(ours, p.icrc());
        assert_eq!(icrc::icrc_ok(&v.bytes), Ok(true));
        assert_eq!(roce[roce.len() - 4..], icrc::icrc_to_wire(ours));

        // And incrementally, headers in one piece and the rest in odd-sized pieces.
        let mut c = match split {
            IpUdp::V4(ip, udp) => icrc::Icrc::new_v4(
                ip,
                udp[..8].try_into().unwrap(),
                roce[..12].try_into().unwrap(),
            ),
            IpUdp::V6(ip, udp) => icrc::Icrc::new_v6(
                ip,
                udp[..8].try_into().unwrap(),
                roce[..12].try_into().unwrap(),
            ),
        };
        for piece in p.icrc_tail().chunks(13) {
            c.update(piece);
        }
        assert_eq!(c.finish(), ours, "{}", v.what);
    }
}

#[test]
fn masked_fields_really_are_masked() {
    // Rewriting TTL/TOS/checksums/flow label and the FECN/BECN byte keeps rxe's ICRC valid.
    for v in vectors() {
        let mut b = v.bytes.clone();
        let l = if b[0] >> 4 == 4 {
            b[1] ^= 0x03; // ECN CE
            b[8] = 1; // TTL
            b[10] ^= 0x5a;
            20
        } else {
            b[1] ^= 0x3f;
            b[3] ^= 0x01;
            b[7] = 1;
            40
        };
        b[l + 6] ^= 0xff; // UDP checksum
        b[l + 8 + 4] |= 0x80; // FECN
        assert_eq!(icrc::icrc_ok(&b), Ok(true), "{}", v.what);
        // ... while the PSN is not.
        b[l + 8 + 11] ^= 1;
        assert_eq!(icrc::icrc_ok(&b), Ok(false), "{}", v.what);
    }
}

#[test]
fn coverage() {
    let vs = vectors();
    let mut ops = BTreeSet::new();
    let mut pads = BTreeSet::new();
    let mut syndromes = Vec::new();
    let (mut wrapped, mut dscp, mut v6) = (false, false, false);
    for v in &vs {
        let s = IpUdp::split(&v.bytes).unwrap();
        let p = Packet::parse(s.roce()).unwrap();
        ops.insert(p.bth().opcode);
        pads.insert(p.bth().pad);
        if let Some(a) = p.aeth() {
            syndromes.push(a.syndrome());
        }
        wrapped |= p.bth().psn.get() == 0xff_ffff;
        match s {
            IpUdp::V4(ip, _) => dscp |= ip[1] != 0,
            IpUdp::V6(ip, _) => {
                v6 = true;
                dscp |= ip[0] & 0x0f != 0;
            }
        }
    }
    // Every opcode but FLUSH and ATOMIC WRITE (IBTA 1.5, not reachable from the stock tools).
    let uncapturable = [opcode::RC_FLUSH, opcode::RC_ATOMIC_WRITE];
    for &op in opcode::ALL.iter().filter(|op| !uncapturable.contains(op)) {
        assert!(
            ops.contains(&op),
            "no {} vector",
            opcode::info(op).unwrap().name
        );
    }
    assert_eq!(ops.len(), opcode::ALL.len() - uncapturable.len());
    assert_eq!(pads, BTreeSet::from([0, 1, 2, 3]));
    for s in [
        Syndrome::Ack {
            credits: wire::AETH_ACK_UNLIMITED,
        },
        Syndrome::RnrNak { timer: 3 },
        Syndrome::Nak(NakCode::PsnSeqError),
        Syndrome::Nak(NakCode::InvalidRequest),
        Syndrome::Nak(NakCode::RemoteAccessError),
        Syndrome::Nak(NakCode::RemoteOperationalError),
    ] {
        assert!(syndromes.contains(&s), "no {s:?} vector");
    }
    assert!(wrapped && dscp && v6);
}

/// `hash_32(val, bits)` of the kernel's `linux/hash.h`.
fn hash_32(val: u32, bits: u32) -> u32 {
    val.wrapping_mul(0x61c8_8647) >> (32 - bits)
}

#[test]
fn what_else_rxe_puts_on_the_wire() {
    for v in vectors() {
        let s = IpUdp::split(&v.bytes).unwrap();
        let udp = s.udp();
        let p = Packet::parse(s.roce()).unwrap();
        let bth = p.bth();
        // No UDP checksum; the default P_Key; nothing reserved or congestion-marked.
        assert_eq!(udp[6..8], [0, 0], "{}", v.what);
        assert_eq!(bth.pkey, wire::BTH_DEF_PKEY);
        assert!(!bth.fecn && !bth.becn && !bth.mig && bth.tver == 0);
        match s {
            // Don't fragment; TTL = the GRH hop limit (64 here).
            IpUdp::V4(ip, _) => assert_eq!((ip[6] & 0x40, ip[8]), (0x40, 64)),
            IpUdp::V6(ip, _) => assert_eq!(ip[7], 64),
        }
        // The UDP source port: for UD, rxe's per-QP default (0xC000 | hash_32(src QPN, 14));
        // for RC/UC, ib_core's flow-label hash of the two QPNs (`rdma_get_udp_sport`; both
        // ends of every connection in this capture have the same QPN).
        let sport = u16::from_be_bytes([udp[0], udp[1]]);
        match p.deth() {
            Some(d) => assert_eq!(sport as u32, 0xc000 | hash_32(d.src_qp, 14), "{}", v.what),
            None => assert_eq!(sport, udp_sport(0, bth.dest_qp, bth.dest_qp), "{}", v.what),
        }
        // rxe asks for an ACK on the last packet of every RC request, never on responses/UD.
        let info = p.info();
        if info.transport != opcode::Transport::Rc || info.is_response() {
            assert!(!bth.ack_req, "{}", v.what);
        } else if info.position.is_end() {
            assert!(bth.ack_req, "{}", v.what);
        }
        // ACKs and read responses carry "ACK, unlimited credits" unless they are NAKs.
        if let Some(a) = p.aeth() {
            if let Syndrome::Ack { credits } = a.syndrome() {
                assert_eq!(credits, wire::AETH_ACK_UNLIMITED);
            }
        }
    }
}
