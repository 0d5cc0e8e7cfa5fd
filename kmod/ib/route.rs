// SPDX-License-Identifier: GPL-2.0-only
//! Route lookup through a device's netdev, in the netdev's namespace.

use super::bindings as b;
use super::device::{Device, IbDriver};
use core::ptr;
use kernel::prelude::*;

/// The outcome of a route lookup for an address vector.
pub(crate) struct Route {
    /// Hop limit / TTL the route asks for.
    pub(crate) hop_limit: u8,
}

impl<T: IbDriver> Device<T> {
    /// Looks up the route from `src` to `dst` through this device's netdev, in the netdev's
    /// network namespace. `ENETUNREACH`/`EHOSTUNREACH` (or what the stack says) when there is
    /// none.
    pub(crate) fn route(
        &self,
        src: crate::logic::roce::GidAddr,
        dst: crate::logic::roce::GidAddr,
    ) -> Result<Route> {
        use crate::logic::roce::GidAddr;
        let nd = self.netdev().as_raw();
        // SAFETY: the netdev is held by the device; `dev_net` reads its namespace pointer.
        let net = unsafe { b::rrxe_dev_net(nd) };
        // SAFETY: the netdev is held; `ifindex` is a plain field.
        let oif = unsafe { (*nd).ifindex };
        let dst_entry: *mut b::dst_entry = match (src, dst) {
            (GidAddr::V4(s), GidAddr::V4(dd)) => {
                // SAFETY: a zeroed flowi4 is a valid "match anything" key.
                let mut fl: b::flowi4 = unsafe { core::mem::zeroed() };
                fl.__fl_common.flowic_oif = oif;
                fl.saddr = u32::from_ne_bytes(s);
                fl.daddr = u32::from_ne_bytes(dd);
                fl.__fl_common.flowic_proto = b::IPPROTO_UDP as u8;
                // SAFETY: `net` is live while the netdev is; `fl` is a valid key.
                let rt = unsafe { b::ip_route_output_flow(net, &mut fl, ptr::null()) };
                rt.cast()
            }
            (GidAddr::V6(s), GidAddr::V6(dd)) => {
                // SAFETY: as above, for IPv6.
                let mut fl: b::flowi6 = unsafe { core::mem::zeroed() };
                fl.__fl_common.flowic_oif = oif;
                fl.saddr.in6_u.u6_addr8 = s;
                fl.daddr.in6_u.u6_addr8 = dd;
                fl.__fl_common.flowic_proto = b::IPPROTO_UDP as u8;
                // SAFETY: `ipv6_stub` always points at a valid stub (a failing one without
                // IPv6); `net` is live; `fl` is a valid key.
                unsafe {
                    let stub = b::ipv6_stub;
                    match (*stub).ipv6_dst_lookup_flow {
                        Some(f) => f(net, ptr::null(), &mut fl, ptr::null()),
                        None => return Err(Error::from_errno(-(b::EAFNOSUPPORT as i32))),
                    }
                }
            }
            _ => return Err(EINVAL),
        };
        let e = dst_entry as isize;
        if dst_entry.is_null() {
            return Err(Error::from_errno(-(b::ENETUNREACH as i32)));
        }
        if (-4095..0).contains(&e) {
            return Err(Error::from_errno(e as i32));
        }
        // SAFETY: a valid dst with a reference we own; released right after reading.
        unsafe { b::dst_release(dst_entry) };
        Ok(Route { hop_limit: 64 })
    }
}
