//! Target `wire`: arbitrary bytes through the receive path's decoders (`kmod/logic/wire.rs`,
//! `icrc.rs`, `iphdr.rs`), read twice: as the UDP payload [`Packet::parse`] takes (BTH through
//! ICRC), and as a datagram from its IP header, split, checked and parsed as `ib/udp.rs` does.
//!
//! Nothing may panic, and every accessor must agree with the bytes: the parsed view, the
//! fixed-header decoders, the header and packet builders (a parsed packet written again parses
//! to the same headers and payload), the syndrome and PSN arithmetic, the segmentation of the
//! lengths a packet names, and the ICRC (computed in one go, incrementally, and checked).

use rrxe_host_tests::logic::icrc::{self, IcrcError, IpUdp, ICRC_LEN, UDP_HDR_LEN};
use rrxe_host_tests::logic::iphdr;
use rrxe_host_tests::logic::opcode::{self, Ext, ExtHeaders, OpInfo, Position, Transport};
use rrxe_host_tests::logic::psn::Psn;
use rrxe_host_tests::logic::segment::Segmentation;
use rrxe_host_tests::logic::wire::*;

const MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

pub fn run(data: &[u8]) {
    packet(data);
    datagram(data);
    fixed_headers(data);
}

/// `data` as a UDP payload.
fn packet(data: &[u8]) {
    let decoded = Headers::decode(data);
    match Packet::parse(data) {
        Ok(p) => {
            let (h, info) = decoded.expect("a packet that parses has headers that decode");
            check_packet(data, &p, &h, info);
        }
        Err(e) => {
            match (decoded, e) {
                // The headers already failed: the same error.
                (Err(d), e) => assert_eq!(d, e, "parse and decode disagree"),
                (Ok((h, _)), WireError::BadTver(t)) => assert!(t == h.bth.tver && t != BTH_TVER),
                (Ok((h, info)), WireError::Truncated) => {
                    assert!(data.len() < info.hdr_len() + h.bth.pad as usize + ICRC_LEN)
                }
                (Ok(_), WireError::BadPad) => {}
                (Ok(_), e) => panic!("parse failed with {e:?} on headers that decode"),
            }
            if let WireError::UnknownOpcode(op) = e {
                assert_eq!(Some(&op), data.first());
                assert!(opcode::info(op).is_none());
            }
            if data.len() < BTH_LEN {
                assert_eq!(e, WireError::Truncated);
            }
        }
    }
}

fn check_packet(data: &[u8], p: &Packet<'_>, h: &Headers, info: &'static OpInfo) {
    assert!(core::ptr::eq(p.bytes(), data));
    assert!(core::ptr::eq(p.info(), info));
    assert_eq!(info.opcode, data[0]);
    assert!(opcode::info(data[0]).is_some_and(|i| core::ptr::eq(i, info)));
    assert_eq!(p.headers(), h);
    assert_eq!(p.bth(), &h.bth);
    assert_eq!(h.bth.tver, BTH_TVER);
    assert_eq!(h.check(), Ok(info));
    assert_eq!(h.present(), info.headers);
    let hdr_len = p.hdr_len();
    assert_eq!(hdr_len, info.hdr_len());
    assert_eq!(hdr_len, h.len());
    assert_eq!(hdr_len, BTH_LEN + info.headers.len());
    assert!(info.is_request() != info.is_response());
    if info.is_response() {
        assert_eq!(info.transport, Transport::Rc);
    }
    let r = p.payload_range();
    assert_eq!(r.start, hdr_len);
    let payload = p.payload();
    let pad = h.bth.pad as usize;
    assert_eq!(payload, &data[r.clone()]);
    assert_eq!(p.pad_bytes(), &data[r.end..r.end + pad]);
    assert_eq!(hdr_len + payload.len() + pad + ICRC_LEN, data.len());
    assert_eq!(pad, pad_for(payload.len()) as usize);
    if !info.payload {
        assert!(payload.is_empty() && pad == 0);
    }
    assert_eq!(p.icrc_tail(), &data[BTH_LEN..data.len() - ICRC_LEN]);
    let stored = u32::from_le_bytes(data[data.len() - 4..].try_into().unwrap());
    assert_eq!(p.icrc(), stored);
    assert_eq!(icrc::stored_icrc(data), Some(stored));
    assert_eq!(packet_len(info, payload.len()), Some(data.len()));

    // Each extension header: present exactly when the opcode carries it, and what the
    // fixed-size decoder reads at its offset.
    for e in ExtHeaders::ORDER {
        let off = info.headers.offset(e);
        assert_eq!(off.is_some(), info.headers.has(e));
        let at = off.map(|o| &data[o..]);
        macro_rules! same {
            ($acc:ident, $t:ty) => {{
                let got = p.$acc();
                assert_eq!(got.is_some(), at.is_some());
                if let (Some(v), Some(b)) = (got, at) {
                    assert_eq!(Some(v), <$t>::decode(b));
                    let mut out = [0u8; 32];
                    assert_eq!(v.write(&mut out), Ok(<$t>::LEN));
                    assert_eq!(<$t>::decode(&out), Some(v), "{} round trip", stringify!($t));
                    assert_eq!(
                        v.write(&mut out[..<$t>::LEN - 1]),
                        Err(WireError::Truncated)
                    );
                }
            }};
        }
        match e {
            Ext::Deth => same!(deth, Deth),
            Ext::Feth => same!(feth, Feth),
            Ext::Reth => same!(reth, Reth),
            Ext::AtomicEth => same!(atmeth, AtomicEth),
            Ext::Aeth => same!(aeth, Aeth),
            Ext::AtomicAckEth => same!(atmack, AtomicAckEth),
            Ext::ImmDt => same!(immdt, ImmDt),
            Ext::Ieth => same!(ieth, Ieth),
        }
    }
    assert_eq!(info.has_imm(), p.immdt().is_some());
    assert_eq!(info.has_inv(), p.ieth().is_some());

    // Written again: the same headers (reserved bits aside) and payload; pad and ICRC zeroed.
    let mut out = [0u8; 128];
    assert_eq!(h.write(&mut out), Ok(hdr_len));
    let (h2, info2) = Headers::decode(&out[..hdr_len]).expect("written headers decode");
    assert_eq!(&h2, h);
    assert!(core::ptr::eq(info2, info));
    assert_eq!(h.write(&mut out[..hdr_len - 1]), Err(WireError::Truncated));
    let mut buf = vec![0xa5u8; data.len() + 8];
    assert_eq!(write_packet(&mut buf, h, payload), Ok(data.len()));
    let q = Packet::parse(&buf[..data.len()]).expect("a written packet parses");
    assert_eq!(q.headers(), h);
    assert_eq!(q.payload(), payload);
    assert!(q.pad_bytes().iter().all(|&b| b == 0));
    assert_eq!(q.icrc(), 0);
    assert_eq!(
        write_packet(&mut buf[..data.len() - 1], h, payload),
        Err(WireError::Truncated)
    );
    if !info.payload {
        assert_eq!(write_packet(&mut buf, h, &[0]), Err(WireError::BadPad));
    }

    // The lengths a packet may carry at each path MTU (rxe's check_length).
    for mtu in MTUS {
        let ok = payload_len_ok(info, payload.len(), mtu as usize);
        let want = !info.payload
            || info.transport == Transport::Ud
            || match info.position {
                Position::Only => payload.len() <= mtu as usize,
                Position::First | Position::Middle => payload.len() == mtu as usize,
                Position::Last => (1..=mtu as usize).contains(&payload.len()),
            };
        assert_eq!(ok, want);
    }

    // AETH: the syndrome's meaning and back.
    if let Some(a) = p.aeth() {
        let s = Syndrome::decode(a.syndrome);
        assert_eq!(s.encode(), a.syndrome);
        assert_eq!(a.syndrome(), s);
        if let Syndrome::RnrNak { timer } = s {
            assert!(rnr_timer_usecs(timer) > 0);
        }
        if let Syndrome::Nak(c) = s {
            assert_eq!(NakCode::from_code(c.code()), c);
        }
        assert_eq!(Aeth::ack(a.msn, 0x1f).msn, a.msn);
    }

    // The message lengths a RETH names, cut at every MTU (a READ's response count).
    if let Some(reth) = p.reth() {
        for mtu in MTUS {
            segmentation(reth.len, mtu);
        }
    }
    segmentation(payload.len() as u32, 256);

    // PSN arithmetic around the packet's PSN.
    let psn = h.bth.psn;
    assert!(psn.get() <= MASK24);
    assert_eq!(Psn::new(psn.get()), Some(psn));
    assert_eq!(psn.next(), psn.wrapping_add(1));
    assert_eq!(psn.next().wrapping_sub(1), psn);
    assert_eq!(psn.wrapping_add(MASK24 + 1), psn);
    assert_eq!(psn.next().diff(psn), 1);
    assert_eq!(psn.diff(psn.next()), -1);
    assert!(psn.before(psn.next()) && psn.next().after(psn));
    assert!(psn.in_window(psn, 1) && !psn.in_window(psn.next(), MASK24));
    let other = Psn::from_masked(h.bth.dest_qp);
    assert_eq!(other.wrapping_add(psn.distance_from(other)), psn);
    let d = psn.diff(other);
    assert!((-(1 << 23)..(1 << 23)).contains(&d));
    assert_eq!(other.wrapping_add(d as u32), psn);
    if d != -(1 << 23) {
        assert_eq!(other.diff(psn), -d);
    }
}

/// The segmentation laws for one message length.
fn segmentation(len: u32, mtu: u32) {
    let s = Segmentation::new(len, mtu).expect("a valid MTU");
    let count = s.count();
    assert!(count >= 1);
    assert_eq!(s.len(), len);
    assert_eq!(s.mtu(), mtu);
    assert_eq!(
        u64::from(count),
        (u64::from(len).div_ceil(u64::from(mtu))).max(1)
    );
    assert_eq!(s.segment(count), None);
    let last = s.segment(count - 1).expect("the last segment");
    assert!(last.position.is_end());
    assert_eq!(u64::from(last.offset) + u64::from(last.len), u64::from(len));
    assert_eq!(last.pad, pad_for(last.len as usize));
    let first = s.segment(0).expect("the first segment");
    assert!(first.position.is_start());
    assert_eq!(first.offset, 0);
    assert_eq!(first.psn(Psn::ZERO), Psn::ZERO);
    if count <= 64 {
        let mut off = 0u64;
        let mut n = 0;
        for g in s.iter() {
            assert_eq!(u64::from(g.offset), off);
            assert_eq!(g.index, n);
            assert_eq!(Position::of(n, count), Some(g.position));
            off += u64::from(g.len);
            n += 1;
        }
        assert_eq!(n, count);
        assert_eq!(off, u64::from(len));
        assert_eq!(s.iter().len(), count as usize);
    }
}

/// `data` as a datagram from its IP header: what `ib/udp.rs` reads.
fn datagram(data: &[u8]) {
    let split = IpUdp::split(data);
    assert_eq!(icrc::icrc(data), split.and_then(|p| p.icrc()));
    match split {
        Ok(p) => {
            let udp = p.udp();
            let ip_len = match p {
                IpUdp::V4(..) => icrc::IPV4_HDR_LEN,
                IpUdp::V6(..) => icrc::IPV6_HDR_LEN,
            };
            assert!(core::ptr::eq(udp.as_ptr(), data[ip_len..].as_ptr()));
            assert!(udp.len() >= UDP_HDR_LEN + BTH_LEN + ICRC_LEN);
            assert_eq!(
                udp.len(),
                u16::from_be_bytes([data[ip_len + 4], data[ip_len + 5]]) as usize
            );
            assert_eq!(p.roce(), &udp[UDP_HDR_LEN..]);
            let c = p.icrc().expect("a split datagram has an ICRC");
            assert_eq!(p.stored_icrc(), icrc::stored_icrc(udp));
            assert_eq!(icrc::icrc_ok(data), Ok(Some(c) == p.stored_icrc()));
            // Incrementally, in two pieces, as the transmit path computes it for paged data.
            let bth: &[u8; BTH_LEN] = udp[UDP_HDR_LEN..][..BTH_LEN].try_into().unwrap();
            let uh: &[u8; UDP_HDR_LEN] = udp[..UDP_HDR_LEN].try_into().unwrap();
            let mut inc = match p {
                IpUdp::V4(ip, _) => icrc::Icrc::new_v4(ip, uh, bth),
                IpUdp::V6(ip, _) => icrc::Icrc::new_v6(ip, uh, bth),
            };
            let tail = &udp[UDP_HDR_LEN + BTH_LEN..udp.len() - ICRC_LEN];
            let cut = tail.len() / 2;
            inc.update(&tail[..cut]);
            inc.update(&tail[cut..]);
            assert_eq!(inc.finish(), c);
            // With the right ICRC written in, it checks.
            let mut v = data.to_vec();
            assert!(icrc::write_icrc(&mut v[ip_len..ip_len + udp.len()], c));
            assert_eq!(icrc::icrc_ok(&v), Ok(true));
            // The addressing the receive path takes from the headers.
            let a = iphdr::parse(&data[..ip_len], udp).expect("a split datagram's addressing");
            assert_eq!(a.is_v4, ip_len == icrc::IPV4_HDR_LEN);
            assert_eq!(a.udp_sport, u16::from_be_bytes([udp[0], udp[1]]));
            if a.is_v4 {
                assert_eq!(&a.sgid[12..], &data[12..16]);
                assert_eq!(&a.dgid[12..], &data[16..20]);
            } else {
                assert_eq!(&a.sgid, &data[8..24]);
                assert_eq!(&a.dgid, &data[24..40]);
                assert!(a.flow_label < 1 << 20);
            }
            packet(p.roce());
        }
        Err(e) => {
            assert_eq!(icrc::icrc_ok(data), Err(e));
            if data.is_empty() {
                assert_eq!(e, IcrcError::Truncated);
            }
        }
    }
    // The receive path's own split: the IP header the stack validated, then the UDP datagram
    // as long as the skb is (not as the UDP length says).
    for ip_len in [icrc::IPV4_HDR_LEN, icrc::IPV6_HDR_LEN] {
        let Some((ip, udp)) = data.split_at_checked(ip_len) else {
            continue;
        };
        let _ = iphdr::parse(ip, udp);
        let c = match ip_len {
            icrc::IPV4_HDR_LEN => icrc::icrc_v4(ip.try_into().unwrap(), udp),
            _ => icrc::icrc_v6(ip.try_into().unwrap(), udp),
        };
        assert_eq!(
            c.is_ok(),
            udp.len() >= UDP_HDR_LEN + BTH_LEN + ICRC_LEN,
            "icrc_v4/v6 on {} UDP bytes",
            udp.len()
        );
    }
}

/// Every fixed-size decoder at the start of `data`, and back.
fn fixed_headers(data: &[u8]) {
    if let Some(b) = Bth::decode(data) {
        let again = Bth::from_bytes(&b.to_bytes());
        assert_eq!(again, b, "BTH round trip");
        assert!(b.dest_qp <= MASK24 && b.pad <= 3 && b.tver <= 0xf);
    } else {
        assert!(data.len() < BTH_LEN);
    }
    let s = Syndrome::decode(data.first().copied().unwrap_or(0));
    assert_eq!(Syndrome::decode(s.encode()), s);
    macro_rules! rt {
        ($t:ty) => {
            match <$t>::decode(data) {
                Some(v) => assert_eq!(<$t>::from_bytes(&v.to_bytes()), v),
                None => assert!(data.len() < <$t>::LEN),
            }
        };
    }
    rt!(Reth);
    rt!(Aeth);
    rt!(ImmDt);
    rt!(Deth);
    rt!(AtomicEth);
    rt!(AtomicAckEth);
    rt!(Ieth);
    rt!(Feth);
    // Any first byte is an opcode the table answers for consistently.
    if let Some(&op) = data.first() {
        if let Some(i) = opcode::info(op) {
            assert_eq!(i.opcode, op);
            assert_eq!(i.transport.base(), op & 0xe0);
            assert!(!(i.needs_recv_wqe() && i.is_response()));
        }
    }
}
