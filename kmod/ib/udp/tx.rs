// SPDX-License-Identifier: GPL-2.0-only
//! Transmit: route lookup in the handle's namespace, the skb, and the UDP tunnel's IPv4 and
//! IPv6 output paths.

use super::*;

impl UdpHandle {
    /// Sends `pkt` (the UDP payload: BTH .. ICRC, already computed) from `path.sgid` to
    /// `path.dgid` through `netdev`, which must be in this handle's namespace (`EINVAL`).
    ///
    /// `Ok` means the IP output path took the datagram (later losses on the wire are not
    /// reported, as for any UDP send). [`XmitError::Congested`]: dropped or pushed back by the
    /// output path (qdisc, neighbour queue), or no memory for the skb. [`XmitError::Failed`]:
    /// `ENOTCONN` (the namespace's sockets are closed), `EMSGSIZE` (payload over 65487 bytes),
    /// `EAFNOSUPPORT` (IPv6 without an IPv6 socket), the route lookup's errno (`ENETUNREACH`,
    /// `EHOSTUNREACH`, `EINVAL` for a source address that is not local, ...) or a negative errno
    /// of the output path. Callable in softirq and process context (not with hard interrupts
    /// disabled); does not sleep.
    ///
    /// The skb is charged to `gauge` (see [`Gauge::charge`]) when one is given.
    pub(crate) fn xmit<T: TxWaker>(
        &self,
        netdev: &NetDev,
        path: &TxPath,
        pkt: &[u8],
        gauge: Option<&Arc<Gauge<T>>>,
    ) -> Result<(), XmitError> {
        // Bottom halves disabled: an RCU read-side section, which keeps the sockets and the
        // namespace alive against `Entry::close` (type invariant of `Entry`).
        let r = crate::ib::bh::with_bh_disabled(|| self.xmit_inner(netdev, path, pkt, gauge));
        if r.is_ok() {
            inc(&COUNTERS.tx_packets);
        }
        r
    }

    /// Must run with bottom halves disabled.
    fn xmit_inner<T: TxWaker>(
        &self,
        netdev: &NetDev,
        path: &TxPath,
        pkt: &[u8],
        gauge: Option<&Arc<Gauge<T>>>,
    ) -> Result<(), XmitError> {
        let e = self.entry();
        let sock = if path.is_v4 { &e.sock4 } else { &e.sock6 };
        let s = sock.load(Ordering::Acquire);
        if s.is_null() {
            inc(&COUNTERS.tx_err_other);
            let closed = e.sock4.load(Ordering::Acquire).is_null();
            return Err(errno(if closed { b::ENOTCONN } else { b::EAFNOSUPPORT }).into());
        }
        // SAFETY: the netdev is alive for the borrow.
        let net = unsafe { b::rrxe_dev_net(netdev.as_raw()) };
        if net != e.net || pkt.len() > 0xffff - UDP_HLEN - IPV6_HLEN {
            inc(&COUNTERS.tx_err_other);
            let err = if net != e.net {
                EINVAL
            } else {
                errno(b::EMSGSIZE)
            };
            return Err(err.into());
        }
        // SAFETY: `s` is a non-null socket of the entry read with bottom halves disabled, so it
        // (and `e.net`) stays alive until we return (type invariant of `Entry`).
        let sk: *mut b::sock = unsafe { (*s).sk }.cast();
        if path.is_v4 {
            Self::xmit4(e.net, sk, netdev, path, pkt, gauge)
        } else {
            Self::xmit6(e.net, sk, netdev, path, pkt, gauge)
        }
    }

    /// Allocates an skb with `headroom` bytes of headroom and `pkt` as its data, charged to
    /// `gauge` if given.
    fn build_skb<T: TxWaker>(
        headroom: usize,
        pkt: &[u8],
        gauge: Option<&Arc<Gauge<T>>>,
    ) -> Result<*mut b::sk_buff, XmitError> {
        // Both fit in `u32`: `pkt` was bounded by `xmit`, the headroom is a few hundred bytes.
        // SAFETY: `alloc_skb` with GFP_ATOMIC may be called in any context.
        let skb = unsafe { b::rrxe_alloc_skb((headroom + pkt.len()) as u32, b::GFP_ATOMIC) };
        if skb.is_null() {
            inc(&COUNTERS.tx_err_nomem);
            return Err(XmitError::Congested);
        }
        // SAFETY: `skb` is a new, empty skb with `headroom + pkt.len()` bytes of room:
        // reserving `headroom` and then putting `pkt.len()` bytes stays within it, and
        // `skb_put` returns the start of the `pkt.len()` new bytes.
        unsafe {
            b::rrxe_skb_reserve(skb, headroom as i32);
            let data = b::skb_put(skb, pkt.len() as u32).cast::<u8>();
            ptr::copy_nonoverlapping(pkt.as_ptr(), data, pkt.len());
        }
        if let Some(g) = gauge {
            // SAFETY: a new skb of ours from `alloc_skb`, not yet handed to anyone: no
            // destructor, no zero-copy state.
            unsafe { g.charge(skb) };
        }
        Ok(skb)
    }

    /// IPv4: `net` and `sk` are the live namespace and socket (see `xmit_inner`).
    fn xmit4<T: TxWaker>(
        net: *mut b::net,
        sk: *mut b::sock,
        netdev: &NetDev,
        path: &TxPath,
        pkt: &[u8],
        gauge: Option<&Arc<Gauge<T>>>,
    ) -> Result<(), XmitError> {
        let saddr =
            u32::from_ne_bytes([path.sgid[12], path.sgid[13], path.sgid[14], path.sgid[15]]);
        let daddr =
            u32::from_ne_bytes([path.dgid[12], path.dgid[13], path.dgid[14], path.dgid[15]]);
        let mut fl = b::flowi4::default();
        fl.__fl_common.flowic_oif = netdev.ifindex();
        fl.__fl_common.flowic_proto = b::IPPROTO_UDP as u8;
        fl.saddr = saddr;
        fl.daddr = daddr;
        // SAFETY: `net` (checked equal to the netdev's) and `sk` are live (see `xmit_inner`);
        // `fl` is a valid key.
        let rt = unsafe { b::ip_route_output_flow(net, &mut fl, sk) };
        if let Some(err) = ptr_err(rt) {
            inc(&COUNTERS.tx_err_route);
            return Err(err.into());
        }
        if rt.is_null() {
            inc(&COUNTERS.tx_err_route);
            return Err(errno(b::EHOSTUNREACH).into());
        }
        // SAFETY: `rt` is a valid route with a reference we own; `dst.dev` is its output device,
        // alive while the route is.
        let (headroom, ttl) = unsafe {
            let dst = ptr::addr_of_mut!((*rt).dst);
            let dev = (*dst).__bindgen_anon_1.dev;
            let ttl = match path.hop_limit {
                0 => b::rrxe_ip4_dst_hoplimit(dst) as u8,
                h => h,
            };
            (
                b::rrxe_ll_reserved_space(dev) as usize + IPV4_HLEN + UDP_HLEN,
                ttl,
            )
        };
        let skb = match Self::build_skb(headroom, pkt, gauge) {
            Ok(skb) => skb,
            Err(err) => {
                // SAFETY: we own the route's reference and give it back.
                unsafe { b::dst_release(ptr::addr_of_mut!((*rt).dst)) };
                return Err(err);
            }
        };
        let udp_len = UDP_HLEN + pkt.len();
        let ip = iphdr::ipv4(
            saddr.to_ne_bytes(),
            daddr.to_ne_bytes(),
            path.tclass,
            ttl,
            udp_len,
        );
        let uh = iphdr::udp(path.udp_sport, udp_len);
        // SAFETY: the skb has headroom for the UDP and IPv4 headers (reserved above);
        // `skb_push` returns the start of the bytes it adds, which we fill.
        let (ih, udp) = unsafe {
            let u = b::skb_push(skb, UDP_HLEN as u32).cast::<u8>();
            ptr::copy_nonoverlapping(uh.as_ptr(), u, UDP_HLEN);
            b::rrxe_skb_reset_transport_header(skb);
            let h = b::skb_push(skb, IPV4_HLEN as u32).cast::<u8>();
            ptr::copy_nonoverlapping(ip.as_ptr(), h, IPV4_HLEN);
            b::rrxe_skb_reset_network_header(skb);
            (h, u)
        };
        // The IP identification, as the IP layer would choose it (before the ICRC, which
        // covers it).
        // SAFETY: `ih` is the IPv4 header just written in the skb, which is ours.
        unsafe { b::__ip_select_ident(net, ih.cast(), 1) };
        // SAFETY: both headers and the payload lie in the skb's linear data, ours until
        // `ip_local_out`; nothing else refers to them meanwhile.
        let (ip, udp) = unsafe {
            (
                &*(ih.cast::<[u8; IPV4_HLEN]>()),
                core::slice::from_raw_parts_mut(udp, udp_len),
            )
        };
        // rdma_rxe's ICRC (the IBTA's for every opcode but RC FLUSH, see `icrc_v4_rxe`).
        if let Ok(c) = crate::logic::icrc::icrc_v4_rxe(ip, udp) {
            crate::logic::icrc::write_icrc(udp, c);
        }
        // SAFETY: `rt` stays valid until `skb_dst_set` takes over our reference; `ip_local_out`
        // fills the IP checksum, sets `skb->protocol` and consumes the skb and the route.
        let r = unsafe {
            b::rrxe_skb_dst_set(skb, ptr::addr_of_mut!((*rt).dst));
            b::ip_local_out(net, sk, skb)
        };
        xmit_result(r)
    }

    /// IPv6: `net` and `sk` are the live namespace and socket (see `xmit_inner`).
    ///
    /// The headers are written here and the skb goes to `ip6_local_out`, as rdma_rxe does,
    /// rather than through `udp_tunnel6_xmit_skb`: in 6.12 that returns `void` and, with no
    /// tunnel netdev to count on, drops `ip6_local_out`'s result, which is the only signal of a
    /// drop or of back-pressure.
    fn xmit6<T: TxWaker>(
        net: *mut b::net,
        sk: *mut b::sock,
        netdev: &NetDev,
        path: &TxPath,
        pkt: &[u8],
        gauge: Option<&Arc<Gauge<T>>>,
    ) -> Result<(), XmitError> {
        let label = path.flow_label & 0xf_ffff;
        let mut fl = b::flowi6::default();
        fl.__fl_common.flowic_oif = netdev.ifindex();
        fl.__fl_common.flowic_proto = b::IPPROTO_UDP as u8;
        fl.saddr.in6_u.u6_addr8 = path.sgid;
        fl.daddr.in6_u.u6_addr8 = path.dgid;
        fl.flowlabel = ((u32::from(path.tclass) << 20) | label).to_be();
        // SAFETY: `ipv6_stub` always points at a valid stub (failing ones without IPv6, but we
        // have an IPv6 socket, so IPv6 is up); `net` and `sk` are live (see `xmit_inner`); `fl`
        // is a valid key.
        let dst = unsafe {
            match (*b::ipv6_stub).ipv6_dst_lookup_flow {
                Some(f) => f(net, sk, &mut fl, ptr::null()),
                None => {
                    inc(&COUNTERS.tx_err_other);
                    return Err(errno(b::EAFNOSUPPORT).into());
                }
            }
        };
        if let Some(err) = ptr_err(dst) {
            inc(&COUNTERS.tx_err_route);
            return Err(err.into());
        }
        if dst.is_null() {
            inc(&COUNTERS.tx_err_route);
            return Err(errno(b::EHOSTUNREACH).into());
        }
        // SAFETY: `dst` is a valid dst entry with a reference we own; `dev` is its output
        // device, alive while the dst is.
        let (error, headroom, ttl) = unsafe {
            let ttl = match path.hop_limit {
                0 => b::ip6_dst_hoplimit(dst) as u8,
                h => h,
            };
            let dev = (*dst).__bindgen_anon_1.dev;
            (
                (*dst).error,
                b::rrxe_ll_reserved_space(dev) as usize + IPV6_HLEN + UDP_HLEN,
                ttl,
            )
        };
        if error != 0 {
            // SAFETY: we own the reference.
            unsafe { b::dst_release(dst) };
            inc(&COUNTERS.tx_err_route);
            let e = if error < 0 {
                Error::from_errno(error.into())
            } else {
                errno(b::EHOSTUNREACH)
            };
            return Err(e.into());
        }
        let skb = match Self::build_skb(headroom, pkt, gauge) {
            Ok(skb) => skb,
            Err(err) => {
                // SAFETY: we own the reference and give it back.
                unsafe { b::dst_release(dst) };
                return Err(err);
            }
        };
        let udp_len = UDP_HLEN + pkt.len();
        // The final IPv6 and UDP headers but for the UDP checksum, which the ICRC masks (with
        // traffic class, flow label and hop limit) and `udp6_set_csum` fills in below.
        let ip = iphdr::ipv6(path.sgid, path.dgid, path.tclass, label, ttl, udp_len);
        let uh = iphdr::udp(path.udp_sport, udp_len);
        // SAFETY: the skb's data is the `pkt.len()` bytes copied by `build_skb`, ours until sent.
        let data = unsafe { core::slice::from_raw_parts_mut((*skb).data, pkt.len()) };
        if let (Some(bth), Some(rest)) = (
            data.first_chunk::<{ crate::logic::opcode::BTH_LEN }>(),
            data.get(crate::logic::opcode::BTH_LEN..pkt.len().saturating_sub(4)),
        ) {
            let mut c = crate::logic::icrc::Icrc::new_v6(&ip, &uh, bth);
            c.update(rest);
            // rdma_rxe's ICRC of an RC FLUSH (see `icrc_v4_rxe`).
            if let Some(t) = crate::logic::icrc::rxe_flush_tail(data) {
                c.update(t);
            }
            let v = c.finish();
            crate::logic::icrc::write_icrc(data, v);
        }
        let saddr = b::in6_addr {
            in6_u: b::in6_addr__bindgen_ty_1 {
                u6_addr8: path.sgid,
            },
        };
        let daddr = b::in6_addr {
            in6_u: b::in6_addr__bindgen_ty_1 {
                u6_addr8: path.dgid,
            },
        };
        // SAFETY: the skb has headroom for the UDP and IPv6 headers (reserved above) and
        // `skb_push` returns the start of the bytes it adds; the transport header is set before
        // `udp6_set_csum` reads it. The control block is cleared for the IPv6 layer (as
        // `ip6tunnel_xmit` does); `ip6_local_out` sets the payload length and `skb->protocol`,
        // and consumes the skb and the dst reference handed over by `skb_dst_set`.
        let r = unsafe {
            let u = b::skb_push(skb, UDP_HLEN as u32).cast::<u8>();
            ptr::copy_nonoverlapping(uh.as_ptr(), u, UDP_HLEN);
            b::rrxe_skb_reset_transport_header(skb);
            b::rrxe_skb_dst_set(skb, dst);
            b::udp6_set_csum(false, skb, &saddr, &daddr, udp_len as i32);
            let h = b::skb_push(skb, IPV6_HLEN as u32).cast::<u8>();
            ptr::copy_nonoverlapping(ip.as_ptr(), h, IPV6_HLEN);
            b::rrxe_skb_reset_network_header(skb);
            ptr::write_bytes(
                ptr::addr_of_mut!((*skb).cb).cast::<u8>(),
                0,
                core::mem::size_of_val(&(*skb).cb),
            );
            b::ip6_local_out(net, sk, skb)
        };
        xmit_result(r)
    }
}
