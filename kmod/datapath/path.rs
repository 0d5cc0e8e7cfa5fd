// SPDX-License-Identifier: GPL-2.0-only
//! Where packets go: a resolved path (resolved and checked by `verbs/av.rs`), held by a
//! connected QP and by an address handle.

use crate::ib::objects::AddressVector;
use crate::logic::{iphdr, transport as tp};

/// A resolved path: the address vector as given plus what the wire needs.
#[derive(Clone, Copy, Default)]
pub(crate) struct Path {
    pub(crate) av: AddressVector,
    /// The hop limit to send with (the caller's, or the route's when the caller gave 0).
    pub(crate) hop_limit: u8,
    /// The UDP source port (0 for UD address handles: chosen per packet from the QPNs).
    pub(crate) udp_sport: u16,
    /// The destination is our own source GID: packets skip the network stack.
    pub(crate) loopback: bool,
    /// The destination is a multicast group (UD address handles only): members on this device
    /// get their copy without the network stack, the others through it.
    pub(crate) multicast: bool,
}

impl Path {
    /// The GRH of a packet that went from this path's destination back to us (loopback: both
    /// ends are our own GID).
    pub(super) fn loopback_grh(&self, len: usize) -> [u8; tp::GRH_LEN] {
        let sgid = self.av.sgid.map(|s| s.gid).unwrap_or(self.av.dgid);
        iphdr::grh(
            sgid,
            self.av.dgid,
            self.av.traffic_class,
            self.hop_limit,
            self.av.flow_label,
            len,
        )
    }
}

/// An address handle as the data path sees it.
pub(crate) struct AhInner {
    pub(crate) path: Path,
    /// The PD the AH was created in: a UD WQE may only name an AH of its QP's PD.
    pub(crate) pd: usize,
}
