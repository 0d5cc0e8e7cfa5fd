// SPDX-License-Identifier: GPL-2.0-only
//! Rules for `rdma link add NAME type rrxe netdev IF`.

use super::errno;

/// Why a link request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// The name starts with `rxe`: the stock rxe provider's `VERBS_NAME_MATCH("rxe")` would claim
    /// the device in userspace.
    ReservedName,
    /// Empty name, or a name too long for an IB device name.
    BadName,
    /// The netdev is not plain Ethernet (loopback, a tunnel, a VLAN upper device ...).
    NotEthernet,
    /// The netdev already carries an RDMA device.
    Exists,
}

impl LinkError {
    /// The positive errno the request fails with.
    pub const fn errno(self) -> i32 {
        match self {
            LinkError::ReservedName | LinkError::BadName => errno::EINVAL,
            LinkError::NotEthernet => errno::EPROTONOSUPPORT,
            LinkError::Exists => errno::EEXIST,
        }
    }
}

/// `IB_DEVICE_NAME_MAX` including the terminating NUL.
pub const IB_DEVICE_NAME_MAX: usize = 64;

/// Checks the IB device name an administrator asked for (without its NUL).
pub fn check_ibdev_name(name: &[u8]) -> Result<(), LinkError> {
    if name.is_empty() || name.len() >= IB_DEVICE_NAME_MAX || name.contains(&0) {
        return Err(LinkError::BadName);
    }
    if name.starts_with(b"rxe") {
        return Err(LinkError::ReservedName);
    }
    Ok(())
}

/// `ARPHRD_ETHER`.
pub const ARPHRD_ETHER: u16 = 1;

/// Facts about the netdev an administrator named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetdevKind {
    /// `dev->type` (ARPHRD_*).
    pub arphrd: u16,
    /// `dev->addr_len`.
    pub addr_len: u8,
    /// `is_vlan_dev()`.
    pub is_vlan: bool,
}

/// Checks that a netdev can carry RoCEv2 for us: Ethernet framing with a 6-byte MAC and not a
/// VLAN upper device (RoCE over a VLAN needs the lower device, as in rdma_rxe).
pub const fn check_netdev(kind: NetdevKind) -> Result<(), LinkError> {
    if kind.arphrd != ARPHRD_ETHER || kind.addr_len != 6 || kind.is_vlan {
        Err(LinkError::NotEthernet)
    } else {
        Ok(())
    }
}
