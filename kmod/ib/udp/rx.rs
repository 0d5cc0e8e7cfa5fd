// SPDX-License-Identifier: GPL-2.0-only
//! Receive: the encapsulation hook the UDP stack calls for every datagram to port 4791.

use super::*;

/// The encapsulation hook (`encap_rcv`) of our sockets.
///
/// # Safety
///
/// Called by the UDP stack in softirq context under the RCU read lock, with `sk` one of our
/// tunnel sockets and `skb` a datagram whose data starts at the UDP header and whose length is
/// the UDP length. Takes ownership of `skb`; returning 0 means it was consumed.
pub(super) unsafe extern "C" fn encap_rcv(sk: *mut b::sock, skb: *mut b::sk_buff) -> i32 {
    // SAFETY: `sk` is a live socket; we are under the RCU read lock, so an entry read here stays
    // alive until we return (`Entry::close` waits for RCU readers before it is freed).
    let entry = unsafe { b::rrxe_sk_user_data(sk) }.cast::<Entry>();
    let drop_with = |c: &AtomicU64| {
        inc(c);
        // SAFETY: we own `skb` and drop it.
        unsafe { b::rrxe_kfree_skb(skb) };
        0
    };
    if entry.is_null() {
        return drop_with(&COUNTERS.rx_drop_closing);
    }
    // A datagram the device must count as a bad header before it is dropped.
    let drop_counted = |c: &AtomicU64| {
        // SAFETY: `skb` is live and ours; `dev` is its ingress device.
        let dev = unsafe {
            (*skb)
                .__bindgen_anon_1
                .__bindgen_anon_1
                .__bindgen_anon_1
                .dev
        };
        crate::ib::rxtable::receive(
            &RxMeta {
                netdev: dev as usize,
                bad_header: true,
                ..RxMeta::default()
            },
            &[],
        );
        drop_with(c)
    };
    // Length first: a datagram of the wrong size is dropped without linearising (copying) it.
    // SAFETY: `skb` is a live skb we own; `len` is its total data length, linear or not.
    let len = unsafe { (*skb).len } as usize;
    if len < UDP_HLEN + MIN_PAYLOAD {
        return drop_counted(&COUNTERS.rx_drop_short);
    }
    if len > UDP_HLEN + MAX_PAYLOAD {
        return drop_counted(&COUNTERS.rx_drop_long);
    }
    // SAFETY: we own `skb`; linearising is allowed in softirq context (it allocates atomically).
    if unsafe { b::rrxe_skb_linearize(skb) } != 0 {
        return drop_with(&COUNTERS.rx_drop_linearize);
    }
    // SAFETY: `skb` is a live, now linear skb: `len` bytes at `data`, starting with the UDP
    // header; the IP header the stack already parsed (and pulled) lies before it in the same
    // head buffer.
    let (data, nh, dev) = unsafe {
        (
            (*skb).data.cast_const(),
            b::rrxe_skb_network_header(skb).cast_const(),
            (*skb)
                .__bindgen_anon_1
                .__bindgen_anon_1
                .__bindgen_anon_1
                .dev,
        )
    };
    // The IP header the stack validated runs from `nh` up to the UDP header at `data`.
    let Some(ip_len) = (data as usize)
        .checked_sub(nh as usize)
        .filter(|&n| n <= MAX_IP_HLEN)
    else {
        return drop_counted(&COUNTERS.rx_drop_bad_ip);
    };
    // SAFETY: `nh .. data` is the IP header and `data .. data + len` the UDP datagram, all in
    // the skb's linear head buffer (`nh` before `data`, checked), unchanged until the skb is
    // freed below.
    let (ip, udp) = unsafe {
        (
            core::slice::from_raw_parts(nh, ip_len),
            core::slice::from_raw_parts(data, len),
        )
    };
    let Some(a) = iphdr::parse(ip, udp) else {
        return drop_counted(&COUNTERS.rx_drop_bad_ip);
    };
    let mut meta = RxMeta {
        sgid: a.sgid,
        dgid: a.dgid,
        is_v4: a.is_v4,
        tclass: a.tclass,
        hop_limit: a.hop_limit,
        flow_label: a.flow_label,
        udp_sport: a.udp_sport,
        netdev: dev as usize,
        ..RxMeta::default()
    };
    // For IPv4 exactly the 20-byte header (`parse` refuses options); for IPv6 the fixed
    // header (extension headers, if any, follow it and only make the ICRC mismatch).
    let c = match (ip.first_chunk::<IPV4_HLEN>(), ip.first_chunk::<IPV6_HLEN>()) {
        (Some(h), _) if meta.is_v4 => crate::logic::icrc::icrc_v4(h, udp).ok(),
        (_, Some(h)) => crate::logic::icrc::icrc_v6(h, udp).ok(),
        _ => None,
    };
    let stored = crate::logic::icrc::stored_icrc(udp);
    // An RC FLUSH may carry the IBTA's ICRC or rdma_rxe's (see `icrc_v4_rxe`).
    let rxe_form = || match (ip.first_chunk::<IPV4_HLEN>(), ip.first_chunk::<IPV6_HLEN>()) {
        (Some(h), _) if meta.is_v4 => crate::logic::icrc::icrc_v4_rxe(h, udp).ok(),
        (_, Some(h)) => crate::logic::icrc::icrc_v6_rxe(h, udp).ok(),
        _ => None,
    };
    let icrc_ok = (c.is_some() && c == stored)
        || (crate::logic::icrc::rxe_flush_tail(udp.get(UDP_HLEN..).unwrap_or_default()).is_some()
            && stored.is_some()
            && rxe_form() == stored);
    if !icrc_ok {
        // Dropped here; the device still learns of it (its `rx_icrc_errors` counter).
        inc(&COUNTERS.rx_drop_icrc);
        meta.bad_icrc = true;
    }
    let pkt = udp.get(UDP_HLEN..).unwrap_or_default();
    if icrc_ok {
        inc(&COUNTERS.rx_packets);
    }
    crate::ib::rxtable::receive(&meta, pkt);
    // SAFETY: we own `skb`; `pkt` is not used any more.
    unsafe { b::rrxe_consume_skb(skb) };
    0
}
