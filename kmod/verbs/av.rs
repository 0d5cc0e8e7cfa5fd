// SPDX-License-Identifier: GPL-2.0-only
//! Address resolution: from an address vector to a checked RoCEv2 path.

use super::device::Rrxe;
use crate::datapath::path::Path;
use crate::ib::{bh::irqs_disabled, device::Device, objects::AddressVector};

/// IPv4 TTL / IPv6 hop limit when neither the caller nor a route lookup gave one (the stack's
/// `sysctl_ip_default_ttl` default).
const DEFAULT_HOP_LIMIT: u8 = 64;
use crate::logic::roce;
use kernel::prelude::*;

/// Checks and resolves `av` for our port: a RoCEv2 GID of our netdev as source, a destination
/// of the same IP family (unicast, or for a UD address handle also a multicast group), and a
/// route to it in the netdev's namespace. `qpns` gives (local, remote) QP numbers for a
/// connected QP's UDP source port.
pub(crate) fn resolve(
    dev: &Device<Rrxe>,
    av: &AddressVector,
    qpns: Option<(u32, u32)>,
) -> Result<Path> {
    if !av.is_roce || !av.has_grh || av.port_num != 1 {
        return Err(EINVAL);
    }
    let sgid = av.sgid.ok_or(EINVAL)?;
    if !sgid.is_roce_v2 || !sgid.on_our_netdev {
        return Err(EINVAL);
    }
    if roce::gid_is_multicast(av.dgid) && qpns.is_some() {
        // A connected QP's peer is one port; only a UD address handle may name a group.
        return Err(EINVAL);
    }
    // The route lookup enables bottom halves internally, which must not happen under a kernel
    // consumer's `spin_lock_irqsave` (ib_cm's AHs): there the consumer's own resolution (the
    // address vector's hop limit, from rdma_cm's route) stands, and the stack's default when
    // it gave none.
    let hop_limit = if irqs_disabled() {
        match av.hop_limit {
            0 => DEFAULT_HOP_LIMIT,
            h => h,
        }
    } else {
        let route = dev.route(roce::gid_to_addr(sgid.gid), roce::gid_to_addr(av.dgid))?;
        if av.hop_limit == 0 {
            route.hop_limit
        } else {
            av.hop_limit
        }
    };
    let udp_sport = match qpns {
        Some((l, r)) => roce::udp_sport(av.flow_label, l, r),
        None => 0,
    };
    Ok(Path {
        av: *av,
        hop_limit,
        udp_sport,
        loopback: av.dgid == sgid.gid,
        multicast: roce::gid_is_multicast(av.dgid),
    })
}
