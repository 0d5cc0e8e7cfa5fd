//! ICRC (`kmod/logic/icrc.rs`): the CRC-32 itself, the masking rules, and properties: every
//! single-bit flip outside the masked fields changes the ICRC, and no change inside them does.

use proptest::prelude::*;
use rrxe_host_tests::logic::icrc::{self, Icrc, IcrcError, IpUdp};

/// Bit-at-a-time reference CRC-32 (reflected, poly 0xEDB88320), no pre/post inversion.
fn crc_ref(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    crc
}

#[test]
fn crc32_check_value() {
    // The CRC-32 catalogue check value.
    assert_eq!(!icrc::crc32_le(!0, b"123456789"), 0xcbf4_3926);
    assert_eq!(icrc::crc32_le(0x1234_5678, b""), 0x1234_5678);
}

#[test]
fn seed_is_the_masked_lrh() {
    // rxe: "the result of computing a CRC with a seed of 0xffffffff and 8 bytes of 0xff".
    assert_eq!(icrc::crc32_le(!0, &[0xff; 8]), icrc::ICRC_SEED);
}

#[test]
fn masks() {
    assert_eq!(icrc::IPV4_MASK.iter().filter(|&&b| b != 0).count(), 4);
    assert_eq!(
        icrc::IPV6_MASK[..8],
        [0x0f, 0xff, 0xff, 0xff, 0, 0, 0, 0xff]
    );
    assert_eq!(icrc::UDP_MASK, [0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    assert_eq!(icrc::BTH_MASK[4], 0xff);
}

/// A synthetic RoCEv2 IPv4 packet (IP header through ICRC) around `roce` (BTH..ICRC).
fn v4_packet(roce: &[u8], fill: u8) -> Vec<u8> {
    let udp_len = 8 + roce.len();
    let tot = 20 + udp_len;
    let mut p = vec![
        0x45,
        fill,
        (tot >> 8) as u8,
        tot as u8,
        0x12,
        0x34,
        0x40,
        0x00,
        64,
        17,
        fill,
        fill,
        10,
        99,
        0,
        1,
        10,
        99,
        0,
        2,
    ];
    p.extend_from_slice(&[
        0xc0,
        0x01,
        0x12,
        0xb7,
        (udp_len >> 8) as u8,
        udp_len as u8,
        0,
        0,
    ]);
    p.extend_from_slice(roce);
    p
}

fn v6_packet(roce: &[u8], fill: u8) -> Vec<u8> {
    let udp_len = 8 + roce.len();
    let mut p = vec![0x60 | (fill & 0x0f), fill, fill, fill];
    p.extend_from_slice(&[(udp_len >> 8) as u8, udp_len as u8, 17, 64]);
    p.extend_from_slice(&[0xfd, 0, 0, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[0xfd, 0, 0, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    p.extend_from_slice(&[
        0xc0,
        0x01,
        0x12,
        0xb7,
        (udp_len >> 8) as u8,
        udp_len as u8,
        0,
        0,
    ]);
    p.extend_from_slice(roce);
    p
}

/// The ICRC by the definition: CRC-32 over 0xff x 8, the masked IP/UDP/BTH and the rest.
fn icrc_by_definition(pkt: &[u8]) -> u32 {
    let v6 = pkt[0] >> 4 == 6;
    let (iplen, mask): (usize, &[u8]) = if v6 {
        (40, &icrc::IPV6_MASK)
    } else {
        (20, &icrc::IPV4_MASK)
    };
    let mut buf = vec![0xffu8; 8];
    let mut hdr = pkt[..iplen + 20].to_vec();
    for (i, m) in mask.iter().enumerate() {
        hdr[i] |= m;
    }
    hdr[iplen + 6] = 0xff;
    hdr[iplen + 7] = 0xff;
    hdr[iplen + 8 + 4] = 0xff;
    buf.extend_from_slice(&hdr);
    buf.extend_from_slice(&pkt[iplen + 20..pkt.len() - 4]);
    !crc_ref(!0, &buf)
}

#[test]
fn generate_then_check() {
    let roce = [
        0x04, 0x30, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 0xaa, 0, 0, 0, 0, 0, 0, 0,
    ];
    for v6 in [false, true] {
        let mut p = if v6 {
            v6_packet(&roce, 0)
        } else {
            v4_packet(&roce, 0)
        };
        let c = icrc::icrc(&p).unwrap();
        assert_eq!(c, icrc_by_definition(&p));
        assert_eq!(icrc::icrc_ok(&p), Ok(false));
        let n = p.len();
        assert!(icrc::write_icrc(&mut p, c));
        assert_eq!(p[n - 4..], c.to_le_bytes());
        assert_eq!(icrc::icrc_ok(&p), Ok(true));
        assert_eq!(IpUdp::split(&p).unwrap().stored_icrc(), Some(c));
        // Ethernet padding after the datagram is ignored.
        p.extend_from_slice(&[0; 6]);
        assert_eq!(icrc::icrc_ok(&p), Ok(true));
    }
}

#[test]
fn incremental_equals_one_shot() {
    let roce: Vec<u8> = (0..200u8).collect();
    let p = v4_packet(&roce, 3);
    let ip: &[u8; 20] = p[..20].try_into().unwrap();
    let udp: &[u8; 8] = p[20..28].try_into().unwrap();
    let bth: &[u8; 12] = p[28..40].try_into().unwrap();
    let mut c = Icrc::new_v4(ip, udp, bth);
    for chunk in p[40..p.len() - 4].chunks(7) {
        c.update(chunk);
    }
    assert_eq!(c.finish(), icrc::icrc(&p).unwrap());
    assert_eq!(icrc::icrc_v4(ip, &p[20..]).unwrap(), c.finish());
}

#[test]
fn errors() {
    let roce = [0u8; 16];
    let mut p = v4_packet(&roce, 0);
    assert_eq!(icrc::icrc(&[]), Err(IcrcError::Truncated));
    assert_eq!(icrc::icrc(&p[..30]), Err(IcrcError::Truncated));
    let mut q = p.clone();
    q[0] = 0x46;
    assert_eq!(icrc::icrc(&q), Err(IcrcError::Ipv4Options));
    q[0] = 0x55;
    assert_eq!(icrc::icrc(&q), Err(IcrcError::NotIp));
    let mut q = p.clone();
    q[9] = 6;
    assert_eq!(icrc::icrc(&q), Err(IcrcError::NotUdp));
    // UDP length too small for UDP + BTH + ICRC, or beyond the bytes.
    p[25] = 23;
    assert_eq!(icrc::icrc(&p), Err(IcrcError::BadUdpLength));
    p[25] = 200;
    assert_eq!(icrc::icrc(&p), Err(IcrcError::Truncated));
    assert_eq!(icrc::stored_icrc(&[1, 2, 3]), None);
    assert!(!icrc::write_icrc(&mut [0u8; 3], 1));
}

prop_compose! {
    fn roce_bytes()(v in prop::collection::vec(any::<u8>(), 16..300)) -> Vec<u8> { v }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn slice_by_8_matches_reference(crc in any::<u32>(),
                                    data in prop::collection::vec(any::<u8>(), 0..100)) {
        prop_assert_eq!(icrc::crc32_le(crc, &data), crc_ref(crc, &data));
    }

    #[test]
    fn matches_definition(roce in roce_bytes(), fill in any::<u8>(), v6 in any::<bool>()) {
        let p = if v6 { v6_packet(&roce, fill) } else { v4_packet(&roce, fill) };
        prop_assert_eq!(icrc::icrc(&p).unwrap(), icrc_by_definition(&p));
    }

    /// Flipping any one bit outside the masked fields and the ICRC changes the ICRC (a CRC
    /// detects every single-bit error); flipping a masked bit never does. Flips that break the
    /// framing (version, IHL, protocol, UDP length) are skipped.
    #[test]
    fn single_bit_flips(roce in roce_bytes(), v6 in any::<bool>(),
                        pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let p = if v6 { v6_packet(&roce, 0) } else { v4_packet(&roce, 0) };
        let base = icrc::icrc(&p).unwrap();
        let iplen = if v6 { 40 } else { 20 };
        let i = pos.index(p.len() - 4);
        let framing = if v6 { (i == 0 && bit >= 4) || i == 6 } else { i == 0 || i == 9 }
            || i == iplen + 4
            || i == iplen + 5;
        prop_assume!(!framing);
        let mask = if i < iplen {
            if v6 { icrc::IPV6_MASK[i] } else { icrc::IPV4_MASK[i] }
        } else if i < iplen + 8 {
            icrc::UDP_MASK[i - iplen]
        } else if i < iplen + 20 {
            icrc::BTH_MASK[i - iplen - 8]
        } else {
            0
        };
        let mut q = p.clone();
        q[i] ^= 1 << bit;
        let flipped = icrc::icrc(&q).unwrap();
        if mask & (1 << bit) != 0 {
            prop_assert_eq!(flipped, base, "masked byte {} bit {} changed the ICRC", i, bit);
        } else {
            prop_assert_ne!(flipped, base, "byte {} bit {} went unnoticed", i, bit);
        }
    }

    /// Any values in the masked fields (TOS/TTL/checksum, traffic class/flow label/hop limit,
    /// UDP checksum, BTH resv8a with FECN/BECN) leave the ICRC unchanged.
    #[test]
    fn masked_fields_are_invariant(roce in roce_bytes(), v6 in any::<bool>(),
                                   junk in prop::collection::vec(any::<u8>(), 64)) {
        let p = if v6 { v6_packet(&roce, 0) } else { v4_packet(&roce, 0) };
        let iplen = if v6 { 40 } else { 20 };
        let mut q = p.clone();
        let mut mask = if v6 { icrc::IPV6_MASK.to_vec() } else { icrc::IPV4_MASK.to_vec() };
        mask.extend_from_slice(&icrc::UDP_MASK);
        mask.extend_from_slice(&icrc::BTH_MASK);
        for (k, m) in mask.iter().enumerate() {
            q[k] = (q[k] & !m) | (junk[k] & m);
        }
        prop_assert_eq!(q.len(), p.len());
        prop_assert_eq!(icrc::icrc(&q).unwrap(), icrc::icrc(&p).unwrap());
        prop_assert_eq!(&q[iplen + 20..], &p[iplen + 20..]);
    }

    #[test]
    fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..120)) {
        let _ = icrc::icrc(&bytes);
        let _ = icrc::icrc_ok(&bytes);
        if let Ok(s) = IpUdp::split(&bytes) {
            let _ = s.roce();
            let _ = s.stored_icrc();
        }
    }
}
