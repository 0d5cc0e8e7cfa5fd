// SPDX-License-Identifier: GPL-2.0-only
//! Port facts derived from the bound netdev: MTU enums and link state.

/// `enum ib_mtu`: the InfiniBand path MTU code (1 = 256 bytes ... 5 = 4096 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub enum IbMtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl IbMtu {
    /// The largest path MTU the device supports (`max_mtu`).
    pub const MAX: IbMtu = IbMtu::Mtu4096;

    /// Decodes an `enum ib_mtu` value; `None` for anything outside 1..=5.
    pub const fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            1 => Some(Self::Mtu256),
            2 => Some(Self::Mtu512),
            3 => Some(Self::Mtu1024),
            4 => Some(Self::Mtu2048),
            5 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// Bytes of RoCEv2 framing that must fit into the netdev MTU on top of the payload, as ib_core
/// counts them in `iboe_get_mtu()`: GRH/IPv6 (40) + UDP (8) + BTH (12) + XRC ETH (4) +
/// AtomicETH (28) + ICRC (4).
pub const ROCE_HEADER_RESERVE: u32 = 40 + 8 + 12 + 4 + 28 + 4;

/// The active path MTU for a netdev MTU: the largest IB MTU whose payload plus
/// [`ROCE_HEADER_RESERVE`] fits, capped at [`IbMtu::MAX`]. `None` when not even 256 bytes fit
/// (the port cannot carry RoCE traffic).
pub const fn active_mtu_for_netdev_mtu(netdev_mtu: u32) -> Option<IbMtu> {
    let room = match netdev_mtu.checked_sub(ROCE_HEADER_RESERVE) {
        Some(r) => r,
        None => return None,
    };
    if room >= 4096 {
        Some(IbMtu::Mtu4096)
    } else if room >= 2048 {
        Some(IbMtu::Mtu2048)
    } else if room >= 1024 {
        Some(IbMtu::Mtu1024)
    } else if room >= 512 {
        Some(IbMtu::Mtu512)
    } else if room >= 256 {
        Some(IbMtu::Mtu256)
    } else {
        None
    }
}

/// `enum ib_port_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PortState {
    /// IB_PORT_DOWN.
    Down = 1,
    /// IB_PORT_ACTIVE.
    Active = 4,
}

/// `enum ib_port_phys_state` values we report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PhysState {
    /// IB_PORT_PHYS_STATE_DISABLED.
    Disabled = 3,
    /// IB_PORT_PHYS_STATE_LINK_UP.
    LinkUp = 5,
}

/// Link facts read from the netdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkFacts {
    /// `netif_running()`: administratively up.
    pub running: bool,
    /// `netif_carrier_ok()`: carrier present.
    pub carrier: bool,
    /// The netdev MTU.
    pub mtu: u32,
}

/// The port's logical and physical state for a link: ACTIVE needs the netdev up, with carrier,
/// and an MTU that fits at least a 256-byte RoCE payload.
pub const fn port_state(link: LinkFacts) -> (PortState, PhysState) {
    if link.running && link.carrier && active_mtu_for_netdev_mtu(link.mtu).is_some() {
        (PortState::Active, PhysState::LinkUp)
    } else {
        (PortState::Down, PhysState::Disabled)
    }
}
