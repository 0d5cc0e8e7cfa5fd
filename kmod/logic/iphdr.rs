// SPDX-License-Identifier: GPL-2.0-only
//! The IPv4, IPv6 and UDP headers in front of a RoCEv2 packet: built for transmit (and for the
//! GRH a UD receiver gets), parsed on receive. One builder and one parser, host-tested, so that
//! `ib/udp.rs` only moves bytes in and out of skbs.

use crate::logic::roce::{gid_to_addr, GidAddr};

/// An IPv4 header without options (the only kind RoCEv2 uses).
pub const IPV4_LEN: usize = 20;
/// The fixed IPv6 header.
pub const IPV6_LEN: usize = 40;
/// The UDP header.
pub const UDP_LEN: usize = 8;
/// The RoCEv2 UDP destination port (IANA).
pub const ROCE_V2_UDP_DPORT: u16 = 4791;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// An IPv4 header for a UDP datagram of `udp_len` bytes (UDP header included) with the don't
/// fragment bit set. The identification and the checksum are left 0 (the IP layer or
/// [`ipv4_checksum`] fills them).
pub fn ipv4(saddr: [u8; 4], daddr: [u8; 4], tos: u8, ttl: u8, udp_len: usize) -> [u8; IPV4_LEN] {
    let mut h = [0u8; IPV4_LEN];
    h[0] = 0x45;
    h[1] = tos;
    h[2..4].copy_from_slice(&((IPV4_LEN + udp_len) as u16).to_be_bytes());
    h[6] = 0x40; // DF
    h[8] = ttl;
    h[9] = IPPROTO_UDP;
    h[12..16].copy_from_slice(&saddr);
    h[16..20].copy_from_slice(&daddr);
    h
}

/// Fills in the header checksum of an IPv4 header.
pub fn ipv4_checksum(h: &mut [u8; IPV4_LEN]) {
    h[10] = 0;
    h[11] = 0;
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// An IPv6 header for a UDP datagram of `udp_len` bytes (UDP header included).
pub fn ipv6(
    sgid: [u8; 16],
    dgid: [u8; 16],
    tclass: u8,
    flow_label: u32,
    hop_limit: u8,
    udp_len: usize,
) -> [u8; IPV6_LEN] {
    let mut h = [0u8; IPV6_LEN];
    let w = 0x6000_0000 | (u32::from(tclass) << 20) | (flow_label & 0xf_ffff);
    h[0..4].copy_from_slice(&w.to_be_bytes());
    h[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    h[6] = IPPROTO_UDP;
    h[7] = hop_limit;
    h[8..24].copy_from_slice(&sgid);
    h[24..40].copy_from_slice(&dgid);
    h
}

/// A UDP header to the RoCEv2 port for a datagram of `udp_len` bytes, checksum 0 (RoCEv2
/// leaves it 0 over IPv4; over IPv6 the stack fills it).
pub fn udp(sport: u16, udp_len: usize) -> [u8; UDP_LEN] {
    let mut h = [0u8; UDP_LEN];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&ROCE_V2_UDP_DPORT.to_be_bytes());
    h[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    h
}

/// The 40-byte GRH a UD receiver gets for a RoCEv2 packet of `roce_len` bytes (BTH .. ICRC):
/// for IPv4 the IPv4 header (with its checksum) in the last 20 bytes, for IPv6 the IPv6 header.
pub fn grh(
    sgid: [u8; 16],
    dgid: [u8; 16],
    tclass: u8,
    hop_limit: u8,
    flow_label: u32,
    roce_len: usize,
) -> [u8; IPV6_LEN] {
    let udp_len = roce_len + UDP_LEN;
    match (gid_to_addr(sgid), gid_to_addr(dgid)) {
        (GidAddr::V4(s), GidAddr::V4(d)) => {
            let mut g = [0u8; IPV6_LEN];
            let mut h = ipv4(s, d, tclass, hop_limit, udp_len);
            ipv4_checksum(&mut h);
            g[IPV6_LEN - IPV4_LEN..].copy_from_slice(&h);
            g
        }
        _ => ipv6(sgid, dgid, tclass, flow_label, hop_limit, udp_len),
    }
}

/// The addressing of a received datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Addressing {
    /// Source address as a GID (IPv4-mapped `::ffff:a.b.c.d` for IPv4).
    pub sgid: [u8; 16],
    /// Destination address as a GID (IPv4-mapped for IPv4).
    pub dgid: [u8; 16],
    pub is_v4: bool,
    /// IPv4 TOS byte / IPv6 traffic class.
    pub tclass: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv6 flow label (20 bits); 0 for IPv4.
    pub flow_label: u32,
    /// UDP source port.
    pub udp_sport: u16,
}

/// Reads the addressing out of `ip`, the whole IP header the stack validated (for IPv6 the
/// fixed header and any extension headers), and `udp`, the UDP header. `None` for an IPv4
/// header with options (the ICRC and RoCEv2 assume the 20-byte header), a version other than 4
/// or 6, or headers too short.
pub fn parse(ip: &[u8], udp: &[u8]) -> Option<Addressing> {
    let sport = udp.first_chunk::<2>()?;
    let mut a = Addressing {
        udp_sport: u16::from_be_bytes(*sport),
        ..Addressing::default()
    };
    match *ip.first()? >> 4 {
        4 => {
            let h = ip.first_chunk::<IPV4_LEN>()?;
            if h[0] & 0xf != 5 || ip.len() != IPV4_LEN {
                return None;
            }
            a.is_v4 = true;
            a.tclass = h[1];
            a.hop_limit = h[8];
            for (gid, at) in [(&mut a.sgid, 12), (&mut a.dgid, 16)] {
                gid[10] = 0xff;
                gid[11] = 0xff;
                gid[12..].copy_from_slice(&h[at..at + 4]);
            }
        }
        6 => {
            let h = ip.first_chunk::<IPV6_LEN>()?;
            a.tclass = (h[0] << 4) | (h[1] >> 4);
            a.flow_label = (u32::from(h[1] & 0xf) << 16) | (u32::from(h[2]) << 8) | u32::from(h[3]);
            a.hop_limit = h[7];
            a.sgid.copy_from_slice(&h[8..24]);
            a.dgid.copy_from_slice(&h[24..40]);
        }
        _ => return None,
    }
    Some(a)
}
