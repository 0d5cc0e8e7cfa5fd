//! The IPv4/IPv6/UDP header builder and parser of `kmod/logic/iphdr.rs` (what `ib/udp.rs`
//! puts in front of every transmitted packet and reads from every received one).

use proptest::prelude::*;
use rrxe_host_tests::logic::iphdr::*;

fn v4_gid(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// The one's-complement sum of a header with its checksum in place is 0xffff.
fn checksum_ok(h: &[u8; IPV4_LEN]) -> bool {
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[test]
fn ipv4_header_fields() {
    let h = ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0x28, 64, 100);
    assert_eq!(h[0], 0x45);
    assert_eq!(h[1], 0x28);
    assert_eq!(u16::from_be_bytes([h[2], h[3]]), 120);
    assert_eq!(h[6], 0x40, "DF");
    assert_eq!((h[8], h[9]), (64, 17));
    assert_eq!(&h[12..16], &[10, 0, 0, 1]);
    assert_eq!(&h[16..20], &[10, 0, 0, 2]);
    assert_eq!(&h[10..12], &[0, 0], "checksum left to the IP layer");
}

#[test]
fn udp_header_fields() {
    let u = udp(0xc000, 1032);
    assert_eq!(u, [0xc0, 0x00, 0x12, 0xb7, 0x04, 0x08, 0, 0]);
}

#[test]
fn grh_layouts() {
    let g = grh(v4_gid([1, 2, 3, 4]), v4_gid([5, 6, 7, 8]), 0, 64, 0, 100);
    assert!(g[..20].iter().all(|&b| b == 0), "IPv4: 20 zero bytes first");
    let h: [u8; 20] = g[20..].try_into().unwrap();
    assert!(checksum_ok(&h));
    assert_eq!(u16::from_be_bytes([h[2], h[3]]), 20 + 8 + 100);
    let s6 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let d6 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1];
    let g = grh(s6, d6, 0xab, 9, 0x12345, 100);
    assert_eq!(g, ipv6(s6, d6, 0xab, 0x12345, 9, 108));
    assert_eq!(g[0] >> 4, 6);
    assert_eq!(u16::from_be_bytes([g[4], g[5]]), 108);
}

#[test]
fn parse_refuses_what_rocev2_does_not_use() {
    let u = udp(1, 100);
    let mut h = ipv4([1, 1, 1, 1], [2, 2, 2, 2], 0, 64, 100);
    h[0] = 0x46; // options
    let mut with_opts = h.to_vec();
    with_opts.extend_from_slice(&[0; 4]);
    assert_eq!(parse(&with_opts, &u), None, "IPv4 options");
    let h = ipv4([1, 1, 1, 1], [2, 2, 2, 2], 0, 64, 100);
    assert_eq!(parse(&h[..19], &u), None, "short IPv4");
    let mut extra = h.to_vec();
    extra.push(0);
    assert_eq!(
        parse(&extra, &u),
        None,
        "IPv4 header length disagrees with IHL"
    );
    assert_eq!(parse(&h, &u[..1]), None, "short UDP");
    assert_eq!(parse(&[0x50; 40], &u), None, "version 5");
    assert_eq!(parse(&[], &u), None, "empty");
    let h6 = ipv6([1; 16], [2; 16], 0, 0, 64, 100);
    assert_eq!(parse(&h6[..39], &u), None, "short IPv6");
    let mut ext = h6.to_vec();
    ext.extend_from_slice(&[0; 8]);
    assert!(
        parse(&ext, &u).is_some(),
        "IPv6 extension headers follow the fixed header"
    );
}

proptest! {
    #[test]
    fn ipv4_round_trip(s: [u8; 4], d: [u8; 4], tos: u8, ttl: u8, sport: u16, len in 16usize..9000) {
        let mut h = ipv4(s, d, tos, ttl, len + UDP_LEN);
        ipv4_checksum(&mut h);
        prop_assert!(checksum_ok(&h));
        let a = parse(&h, &udp(sport, len + UDP_LEN)).unwrap();
        prop_assert_eq!(a, Addressing {
            sgid: v4_gid(s),
            dgid: v4_gid(d),
            is_v4: true,
            tclass: tos,
            hop_limit: ttl,
            flow_label: 0,
            udp_sport: sport,
        });
    }

    #[test]
    fn ipv6_round_trip(s: [u8; 16], d: [u8; 16], tc: u8, fl in 0u32..(1 << 20), hl: u8, sport: u16) {
        let h = ipv6(s, d, tc, fl, hl, 100);
        let a = parse(&h, &udp(sport, 100)).unwrap();
        prop_assert_eq!(a, Addressing {
            sgid: s,
            dgid: d,
            is_v4: false,
            tclass: tc,
            hop_limit: hl,
            flow_label: fl,
            udp_sport: sport,
        });
    }

    #[test]
    fn parse_never_panics(ip in proptest::collection::vec(any::<u8>(), 0..80), u in proptest::collection::vec(any::<u8>(), 0..10)) {
        let _ = parse(&ip, &u);
    }
}
