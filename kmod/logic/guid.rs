// SPDX-License-Identifier: GPL-2.0-only
//! Node GUID derivation.

/// The node GUID for a device bound to a netdev with this MAC: the modified EUI-64 (MAC with
/// FF:FE inserted in the middle and the universal/local bit flipped), as IPv6 link-local
/// addresses and rdma_rxe derive it. Returned in network byte order (the `__be64` ib_core stores).
pub const fn node_guid_from_mac(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}
