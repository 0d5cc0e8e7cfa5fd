// SPDX-License-Identifier: GPL-2.0-only
//! RoCEv2 addressing: GIDs as IP addresses, and the UDP source-port entropy rule.

/// The UDP destination port of RoCEv2.
#[cfg_attr(MODULE, expect(dead_code))]
pub const ROCE_V2_UDP_DPORT: u16 = 4791;
/// Lowest UDP source port RoCEv2 uses for entropy (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`).
pub const UDP_SPORT_MIN: u16 = 0xc000;
/// A GRH flow label is 20 bits.
pub const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

/// A flow label derived from the two QP numbers when the GRH has none: symmetric, so both
/// directions of a connection hash alike (ib_core's `rdma_calc_flow_label`).
pub const fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v as u32) & FLOW_LABEL_MASK
}

/// Folds a 20-bit flow label into a UDP source port in 0xC000..=0xFFFF
/// (`rdma_flow_label_to_udp_sport`).
pub const fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let mut low = fl & 0x03fff;
    let high = fl & 0xfc000;
    low ^= high >> 14;
    (low as u16) | UDP_SPORT_MIN
}

/// The UDP source port of a flow: from the flow label, or from the QP numbers when the flow
/// label is 0 (`rdma_get_udp_sport`), as the RoCEv2 annex recommends for ECMP entropy.
pub const fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label & FLOW_LABEL_MASK == 0 {
        calc_flow_label(lqpn, rqpn)
    } else {
        flow_label & FLOW_LABEL_MASK
    };
    flow_label_to_udp_sport(fl)
}

/// A GID seen as an IP address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidAddr {
    /// An IPv4-mapped GID (`::ffff:a.b.c.d`).
    V4([u8; 4]),
    /// Any other GID.
    V6([u8; 16]),
}

/// The IP address a RoCEv2 GID stands for.
pub const fn gid_to_addr(gid: [u8; 16]) -> GidAddr {
    let mut i = 0;
    while i < 10 {
        if gid[i] != 0 {
            return GidAddr::V6(gid);
        }
        i += 1;
    }
    if gid[10] == 0xff && gid[11] == 0xff {
        GidAddr::V4([gid[12], gid[13], gid[14], gid[15]])
    } else {
        GidAddr::V6(gid)
    }
}

/// Whether a GID is a multicast address (`ff00::/8`, or an IPv4-mapped 224.0.0.0/4).
pub const fn gid_is_multicast(gid: [u8; 16]) -> bool {
    match gid_to_addr(gid) {
        GidAddr::V4(a) => a[0] & 0xf0 == 0xe0,
        GidAddr::V6(g) => g[0] == 0xff,
    }
}
