// SPDX-License-Identifier: GPL-2.0-only
//! The RoCEv2 UDP tunnel: one kernel UDP socket pair bound to port 4791 per network namespace.
//!
//! [`UdpSock::get`] opens (or shares) the sockets of a netdev's namespace and returns a
//! [`UdpHandle`]; the sockets close when the last handle of the namespace is dropped. There is
//! an IPv4 socket and, when IPv6 is available, an IPv6-only socket (as rdma_rxe does); if the
//! IPv6 socket cannot be opened, IPv4 still works and IPv6 transmits fail with `EAFNOSUPPORT`.
//!
//! Receive: the UDP stack hands each datagram for port 4791 to the encapsulation hook, in
//! softirq context under the RCU read lock. The hook linearises it, checks its length, and calls
//! the namespace's [`RxFn`] with the addresses ([`RxMeta`]) and the UDP payload (BTH .. ICRC).
//!
//! Transmit: [`UdpHandle::xmit`] looks up the route in the netdev's namespace with the netdev as
//! output interface, builds an skb with the payload, and hands it to
//! `udp_tunnel_xmit_skb`/`udp_tunnel6_xmit_skb`, which add the UDP and IP headers and send it
//! through `ip_local_out`/`ip6_local_out`. The UDP checksum is zero for IPv4 (RoCEv2 relies on
//! the ICRC) and computed for IPv6. Callable in softirq context and in process context (with or
//! without bottom halves disabled).
//!
//! Traffic between two addresses of the same host goes through the IP stack's local delivery;
//! in the tests its [`RxMeta::netdev`] was the netdev it was sent through (the route's output
//! interface), but the engine should not rely on more than "some netdev of this namespace".

use super::bindings as b;
use super::netdev::NetDev;
use core::{
    cell::UnsafeCell,
    ptr::{self, NonNull},
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
};
use kernel::prelude::*;

/// The RoCEv2 UDP destination port (IANA).
pub(crate) const ROCE_V2_UDP_DPORT: u16 = 4791;

/// Smallest UDP payload accepted: a BTH (12 bytes) and the ICRC (4 bytes).
pub(crate) const MIN_PAYLOAD: usize = 12 + 4;

/// Largest UDP payload accepted: a 4096-byte path MTU plus the largest header stack
/// (BTH + RETH + ImmDt = 32 bytes; BTH + DETH + ImmDt and BTH + AtomicETH are smaller), up to
/// 3 pad bytes and the ICRC, rounded up.
pub(crate) const MAX_PAYLOAD: usize = 4096 + 64;

const UDP_HLEN: usize = 8;
const IPV4_HLEN: usize = 20;
const IPV6_HLEN: usize = 40;

/// The receive callback: called in softirq context for each RoCEv2 datagram, with `pkt` the UDP
/// payload (BTH .. ICRC, [`MIN_PAYLOAD`]`..=`[`MAX_PAYLOAD`] bytes). It must not sleep; the
/// skb is freed when it returns, so it copies what it keeps.
pub(crate) type RxFn = fn(&RxMeta, &[u8]);

/// What the IP and UDP headers of a received datagram say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RxMeta {
    /// Source address as a GID (IPv4-mapped `::ffff:a.b.c.d` for IPv4).
    pub(crate) sgid: [u8; 16],
    /// Destination address as a GID (IPv4-mapped for IPv4).
    pub(crate) dgid: [u8; 16],
    pub(crate) is_v4: bool,
    /// IPv4 TOS byte / IPv6 traffic class.
    pub(crate) tclass: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub(crate) hop_limit: u8,
    /// IPv6 flow label (20 bits); 0 for IPv4.
    pub(crate) flow_label: u32,
    /// UDP source port (host order).
    pub(crate) udp_sport: u16,
    /// The ingress netdev (`skb->dev`), as [`NetDev::key`] gives it.
    pub(crate) netdev: usize,
}

/// Addressing of one transmitted datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TxPath {
    /// Source address as a GID (IPv4-mapped for IPv4); must be an address of the host.
    pub(crate) sgid: [u8; 16],
    /// Destination address as a GID (IPv4-mapped for IPv4).
    pub(crate) dgid: [u8; 16],
    /// Use IPv4 (the last 4 bytes of the GIDs) rather than IPv6.
    pub(crate) is_v4: bool,
    /// UDP source port (host order); RoCEv2 uses it for flow entropy.
    pub(crate) udp_sport: u16,
    /// IPv4 TOS / IPv6 traffic class.
    pub(crate) tclass: u8,
    /// TTL / hop limit; 0 takes the route's default.
    pub(crate) hop_limit: u8,
    /// IPv6 flow label (low 20 bits used); ignored for IPv4.
    pub(crate) flow_label: u32,
}

/// Datagram counters, for all namespaces together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UdpCounters {
    /// Datagrams passed to the receive callback.
    pub(crate) rx_packets: u64,
    /// Dropped: the socket was closing (no receiver any more).
    pub(crate) rx_drop_closing: u64,
    /// Dropped: `skb_linearize` failed (out of memory).
    pub(crate) rx_drop_linearize: u64,
    /// Dropped: payload shorter than [`MIN_PAYLOAD`].
    pub(crate) rx_drop_short: u64,
    /// Dropped: payload longer than [`MAX_PAYLOAD`].
    pub(crate) rx_drop_long: u64,
    /// Dropped: the network header is neither IPv4 nor IPv6.
    pub(crate) rx_drop_bad_ip: u64,
    /// Datagrams whose ICRC did not match.
    pub(crate) rx_drop_icrc: u64,
    /// Datagrams handed to the IP output path.
    pub(crate) tx_packets: u64,
    /// Transmit failures: no route (or a route lookup error).
    pub(crate) tx_err_route: u64,
    /// Transmit failures: no memory for the skb.
    pub(crate) tx_err_nomem: u64,
    /// Transmit failures: bad arguments (namespace, size, address family).
    pub(crate) tx_err_other: u64,
}

struct Counters {
    rx_packets: AtomicU64,
    rx_drop_closing: AtomicU64,
    rx_drop_linearize: AtomicU64,
    rx_drop_short: AtomicU64,
    rx_drop_long: AtomicU64,
    rx_drop_bad_ip: AtomicU64,
    rx_drop_icrc: AtomicU64,
    tx_packets: AtomicU64,
    tx_err_route: AtomicU64,
    tx_err_nomem: AtomicU64,
    tx_err_other: AtomicU64,
}

static COUNTERS: Counters = Counters {
    rx_packets: AtomicU64::new(0),
    rx_drop_closing: AtomicU64::new(0),
    rx_drop_linearize: AtomicU64::new(0),
    rx_drop_short: AtomicU64::new(0),
    rx_drop_long: AtomicU64::new(0),
    rx_drop_bad_ip: AtomicU64::new(0),
    rx_drop_icrc: AtomicU64::new(0),
    tx_packets: AtomicU64::new(0),
    tx_err_route: AtomicU64::new(0),
    tx_err_nomem: AtomicU64::new(0),
    tx_err_other: AtomicU64::new(0),
};

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A snapshot of the datagram counters (module-wide, monotonic).
pub(crate) fn counters() -> UdpCounters {
    let c = &COUNTERS;
    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
    UdpCounters {
        rx_packets: r(&c.rx_packets),
        rx_drop_closing: r(&c.rx_drop_closing),
        rx_drop_linearize: r(&c.rx_drop_linearize),
        rx_drop_short: r(&c.rx_drop_short),
        rx_drop_long: r(&c.rx_drop_long),
        rx_drop_bad_ip: r(&c.rx_drop_bad_ip),
        rx_drop_icrc: r(&c.rx_drop_icrc),
        tx_packets: r(&c.tx_packets),
        tx_err_route: r(&c.tx_err_route),
        tx_err_nomem: r(&c.tx_err_nomem),
        tx_err_other: r(&c.tx_err_other),
    }
}

fn errno(e: u32) -> Error {
    Error::from_errno(-(e as i32))
}

/// `IS_ERR` for a kernel pointer.
fn ptr_err<T>(p: *mut T) -> Option<Error> {
    let e = p as isize;
    (-4095..0).contains(&e).then(|| Error::from_errno(e as i32))
}

/// The sockets of one namespace.
///
/// # Invariants
///
/// Immutable after it is published (in the registry and as the sockets' `sk_user_data`), except
/// `refs`, which changes only under the registry lock. `sock4` is a tunnel socket this entry
/// owns; `sock6` is one too, or null. `net` is the namespace both live in.
struct Entry {
    net: *mut b::net,
    refs: AtomicUsize,
    sock4: *mut b::socket,
    sock6: *mut b::socket,
    rx: RxFn,
}

impl Entry {
    /// Closes the sockets and waits until no receive callback can still be running.
    ///
    /// # Safety
    ///
    /// The entry must be unpublished from the registry and have no handles left; process
    /// context.
    unsafe fn close(&self) {
        for s in [self.sock6, self.sock4] {
            if !s.is_null() {
                // SAFETY: by the type invariant we own the socket. `udp_tunnel_sock_release`
                // clears `sk_user_data` before releasing, so a later receive finds no entry.
                unsafe { b::udp_tunnel_sock_release(s) };
            }
        }
        // The encapsulation hook runs under the RCU read lock (in softirq); a callback that
        // read the entry before it was unpublished has finished after this.
        super::bh::synchronize_rcu();
    }
}

/// The registry: the entries of all namespaces, each a leaked `KBox<Entry>`.
struct Registry(UnsafeCell<KVec<NonNull<Entry>>>);

// SAFETY: the vector is only touched with the registry mutex (`rrxe_udp_registry_lock`) held.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry(UnsafeCell::new(KVec::new()));

/// Holds the registry mutex.
struct RegistryGuard;

impl RegistryGuard {
    fn lock() -> Self {
        // SAFETY: a plain mutex; process context (documented on every caller).
        unsafe { b::rrxe_udp_registry_lock() };
        RegistryGuard
    }

    fn entries(&mut self) -> &mut KVec<NonNull<Entry>> {
        // SAFETY: the mutex is held for as long as `self` lives, and `&mut self` makes this the
        // only reference derived from this guard.
        unsafe { &mut *REGISTRY.0.get() }
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        // SAFETY: the mutex was taken in `lock`.
        unsafe { b::rrxe_udp_registry_unlock() };
    }
}

/// Opens one tunnel socket on port 4791 (not yet receiving).
fn open_socket(net: *mut b::net, v6: bool) -> Result<*mut b::socket> {
    let mut cfg = b::udp_port_cfg::default();
    cfg.local_udp_port = ROCE_V2_UDP_DPORT.to_be();
    let mut sock: *mut b::socket = ptr::null_mut();
    // SAFETY: `net` is a live namespace (it holds the caller's netdev); `cfg` is a valid
    // configuration (wildcard address, our port); `sock` receives the new socket.
    let ret = unsafe {
        if v6 {
            cfg.family = b::AF_INET6 as u8;
            cfg.set_ipv6_v6only(1);
            b::udp_sock_create6(net, &mut cfg, &mut sock)
        } else {
            cfg.family = b::AF_INET as u8;
            b::udp_sock_create4(net, &mut cfg, &mut sock)
        }
    };
    kernel::error::to_result(ret)?;
    Ok(sock)
}

/// Namespace-wide RoCEv2 sockets; see the module documentation.
pub(crate) struct UdpSock;

impl UdpSock {
    /// Returns a handle on the RoCEv2 sockets of `netdev`'s network namespace, opening them if
    /// this is the first handle there. Datagrams received on them go to `rx`.
    ///
    /// All handles of a namespace share the sockets, and so the receive function of the handle
    /// that opened them: pass the same `rx` everywhere. Errors are those of opening the IPv4
    /// socket (`EADDRINUSE` if something else holds UDP port 4791, e.g. rdma_rxe in the same
    /// namespace). Process context only.
    pub(crate) fn get(netdev: &NetDev, rx: RxFn) -> Result<UdpHandle> {
        // SAFETY: the netdev is alive for the borrow; `dev_net` reads its namespace pointer.
        let net = unsafe { b::rrxe_dev_net(netdev.as_raw()) };
        let mut guard = RegistryGuard::lock();
        if let Some(&e) = guard.entries().iter().find(|e| {
            // SAFETY: entries in the registry are live (removed before they are freed, under
            // the lock, which we hold).
            unsafe { e.as_ref() }.net == net
        }) {
            // SAFETY: as above.
            unsafe { e.as_ref() }.refs.fetch_add(1, Ordering::Relaxed);
            return Ok(UdpHandle { entry: e });
        }

        // Make room first, so that publishing below cannot fail.
        guard.entries().reserve(1, GFP_KERNEL)?;
        let sock4 = open_socket(net, false)?;
        let sock6 = match open_socket(net, true) {
            Ok(s) => s,
            Err(e) => {
                if e.to_errno() != -(b::EAFNOSUPPORT as i32) {
                    pr_warn!("rrxe: no IPv6 RoCEv2 socket in this namespace ({:?})\n", e);
                }
                ptr::null_mut()
            }
        };
        let entry = Entry {
            net,
            refs: AtomicUsize::new(1),
            sock4,
            sock6,
            rx,
        };
        let entry = match KBox::new(entry, GFP_KERNEL) {
            Ok(b) => NonNull::from(KBox::leak(b)),
            Err(e) => {
                for s in [sock6, sock4] {
                    if !s.is_null() {
                        // SAFETY: we own the socket, which never received through the hook.
                        unsafe { b::udp_tunnel_sock_release(s) };
                    }
                }
                return Err(e.into());
            }
        };
        for s in [sock4, sock6] {
            if s.is_null() {
                continue;
            }
            let mut tnl = b::udp_tunnel_sock_cfg {
                sk_user_data: entry.as_ptr().cast(),
                encap_type: 1,
                encap_rcv: Some(encap_rcv),
                ..Default::default()
            };
            // SAFETY: `s` is our new socket in `net`; the entry it publishes is complete and
            // immutable (type invariant) and lives until `close` has run and returned.
            unsafe { b::setup_udp_tunnel_sock(net, s, &mut tnl) };
        }
        // Cannot fail: capacity was reserved above.
        let _ = guard.entries().push(entry, GFP_KERNEL);
        Ok(UdpHandle { entry })
    }
}

/// A counted reference to a namespace's RoCEv2 sockets. Dropping the last handle of a namespace
/// closes them (in process context: `Drop` sleeps); after that drop returns, the receive
/// callback never runs again for them.
///
/// Namespace lifetime: a kernel socket does not pin its namespace. Keep the handle no longer
/// than the device holds its netdev (a held netdev keeps its namespace's teardown waiting), and
/// drop it before releasing the netdev.
///
/// # Invariants
///
/// `entry` is a registered entry on which this handle holds one of `refs`.
pub(crate) struct UdpHandle {
    entry: NonNull<Entry>,
}

// SAFETY: the entry is immutable apart from its atomic refcount; the sockets are used only
// through kernel functions that may be called from any CPU.
unsafe impl Send for UdpHandle {}
// SAFETY: as above; `xmit` only reads the entry.
unsafe impl Sync for UdpHandle {}

impl UdpHandle {
    fn entry(&self) -> &Entry {
        // SAFETY: by the type invariant the entry is alive while this handle holds a reference.
        unsafe { self.entry.as_ref() }
    }

    /// Sends `pkt` (the UDP payload: BTH .. ICRC, already computed) from `path.sgid` to
    /// `path.dgid` through `netdev`, which must be in this handle's namespace (`EINVAL`).
    ///
    /// Errors: `EMSGSIZE` (payload over 65487 bytes), `EAFNOSUPPORT` (IPv6 without an IPv6
    /// socket), the route lookup's errno (`ENETUNREACH`, `EHOSTUNREACH`, `EINVAL` for a source
    /// address that is not local, ...), `ENOMEM`. `Ok` means the datagram went to the IP output
    /// path; later losses (neighbour resolution, qdisc) are not reported, as for any UDP send.
    /// Callable in softirq and process context; does not sleep.
    pub(crate) fn xmit(&self, netdev: &NetDev, path: &TxPath, pkt: &[u8]) -> Result {
        let r = self.xmit_inner(netdev, path, pkt);
        match &r {
            Ok(()) => inc(&COUNTERS.tx_packets),
            Err(e) if *e == ENOMEM => inc(&COUNTERS.tx_err_nomem),
            Err(_) => {}
        }
        r
    }

    fn xmit_inner(&self, netdev: &NetDev, path: &TxPath, pkt: &[u8]) -> Result {
        let e = self.entry();
        // SAFETY: the netdev is alive for the borrow.
        let net = unsafe { b::rrxe_dev_net(netdev.as_raw()) };
        if net != e.net || pkt.len() > 0xffff - UDP_HLEN - IPV6_HLEN {
            inc(&COUNTERS.tx_err_other);
            return Err(if net != e.net { EINVAL } else { errno(b::EMSGSIZE) });
        }
        if path.is_v4 {
            self.xmit4(netdev, path, pkt)
        } else {
            self.xmit6(netdev, path, pkt)
        }
    }

    /// Allocates an skb with `headroom` bytes of headroom and `pkt` as its data.
    fn build_skb(headroom: usize, pkt: &[u8]) -> Result<*mut b::sk_buff> {
        // Both fit in `u32`: `pkt` was bounded by `xmit`, the headroom is a few hundred bytes.
        // SAFETY: `alloc_skb` with GFP_ATOMIC may be called in any context.
        let skb = unsafe { b::rrxe_alloc_skb((headroom + pkt.len()) as u32, b::GFP_ATOMIC) };
        if skb.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: `skb` is a new, empty skb with `headroom + pkt.len()` bytes of room:
        // reserving `headroom` and then putting `pkt.len()` bytes stays within it, and
        // `skb_put` returns the start of the `pkt.len()` new bytes.
        unsafe {
            b::rrxe_skb_reserve(skb, headroom as i32);
            let data = b::skb_put(skb, pkt.len() as u32).cast::<u8>();
            ptr::copy_nonoverlapping(pkt.as_ptr(), data, pkt.len());
        }
        Ok(skb)
    }

    fn xmit4(&self, netdev: &NetDev, path: &TxPath, pkt: &[u8]) -> Result {
        let e = self.entry();
        // SAFETY: by the type invariant of `Entry`, `sock4` is a live socket we own.
        let sk: *mut b::sock = unsafe { (*e.sock4).sk }.cast();
        let saddr = u32::from_ne_bytes([path.sgid[12], path.sgid[13], path.sgid[14], path.sgid[15]]);
        let daddr = u32::from_ne_bytes([path.dgid[12], path.dgid[13], path.dgid[14], path.dgid[15]]);
        let mut fl = b::flowi4::default();
        fl.__fl_common.flowic_oif = netdev.ifindex();
        fl.__fl_common.flowic_proto = b::IPPROTO_UDP as u8;
        fl.saddr = saddr;
        fl.daddr = daddr;
        // SAFETY: `net` (checked equal to the netdev's in `xmit`) is live while the netdev is;
        // `fl` is a valid key; `sk` is our live socket.
        let rt = unsafe { b::ip_route_output_flow(e.net, &mut fl, sk) };
        if let Some(err) = ptr_err(rt) {
            inc(&COUNTERS.tx_err_route);
            return Err(err);
        }
        if rt.is_null() {
            inc(&COUNTERS.tx_err_route);
            return Err(errno(b::EHOSTUNREACH));
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
            (b::rrxe_ll_reserved_space(dev) as usize + IPV4_HLEN + UDP_HLEN, ttl)
        };
        let skb = match Self::build_skb(headroom, pkt) {
            Ok(skb) => skb,
            Err(err) => {
                // SAFETY: we own the route's reference and give it back.
                unsafe { b::dst_release(ptr::addr_of_mut!((*rt).dst)) };
                return Err(err);
            }
        };
        let udp_len = UDP_HLEN + pkt.len();
        // SAFETY: the skb has headroom for the UDP and IPv4 headers (reserved above); `skb_push`
        // returns the start of the bytes it adds. We write both headers in full (the IP
        // identification through `__ip_select_ident`, as the IP layer would), then the ICRC over
        // the final headers, then hand the skb and our route reference to `ip_local_out`, which
        // fills the IP checksum and consumes both. `rt` stays valid until `skb_dst_set` takes
        // over our reference.
        let r = unsafe {
            let uh = b::skb_push(skb, UDP_HLEN as u32).cast::<u8>();
            let uhs = core::slice::from_raw_parts_mut(uh, udp_len);
            uhs[0..2].copy_from_slice(&path.udp_sport.to_be_bytes());
            uhs[2..4].copy_from_slice(&ROCE_V2_UDP_DPORT.to_be_bytes());
            uhs[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            uhs[6..8].copy_from_slice(&[0, 0]);
            b::rrxe_skb_reset_transport_header(skb);
            let ih = b::skb_push(skb, IPV4_HLEN as u32).cast::<u8>();
            b::rrxe_skb_reset_network_header(skb);
            let ihs = core::slice::from_raw_parts_mut(ih, IPV4_HLEN);
            ihs.fill(0);
            ihs[0] = 0x45;
            ihs[1] = path.tclass;
            ihs[2..4].copy_from_slice(&((IPV4_HLEN + udp_len) as u16).to_be_bytes());
            ihs[6..8].copy_from_slice(&(b::IP_DF as u16).to_be_bytes());
            ihs[8] = ttl;
            ihs[9] = b::IPPROTO_UDP as u8;
            ihs[12..16].copy_from_slice(&saddr.to_ne_bytes());
            ihs[16..20].copy_from_slice(&daddr.to_ne_bytes());
            b::__ip_select_ident(e.net, ih.cast(), 1);
            let ip: &[u8; IPV4_HLEN] = &*(ih.cast::<[u8; IPV4_HLEN]>());
            let udp = core::slice::from_raw_parts_mut(uh, udp_len);
            if let Ok(c) = crate::logic::icrc::icrc_v4(ip, udp) {
                crate::logic::icrc::write_icrc(udp, c);
            }
            // `ip_local_out` sets `skb->protocol` itself.
            b::rrxe_skb_dst_set(skb, ptr::addr_of_mut!((*rt).dst));
            b::ip_local_out(e.net, sk, skb)
        };
        if r < 0 {
            inc(&COUNTERS.tx_err_other);
            return Err(Error::from_errno(r));
        }
        Ok(())
    }

    fn xmit6(&self, netdev: &NetDev, path: &TxPath, pkt: &[u8]) -> Result {
        let e = self.entry();
        if e.sock6.is_null() {
            inc(&COUNTERS.tx_err_other);
            return Err(errno(b::EAFNOSUPPORT));
        }
        // SAFETY: by the type invariant of `Entry`, a non-null `sock6` is a live socket we own.
        let sk: *mut b::sock = unsafe { (*e.sock6).sk }.cast();
        let label = path.flow_label & 0xf_ffff;
        let mut fl = b::flowi6::default();
        fl.__fl_common.flowic_oif = netdev.ifindex();
        fl.__fl_common.flowic_proto = b::IPPROTO_UDP as u8;
        fl.saddr.in6_u.u6_addr8 = path.sgid;
        fl.daddr.in6_u.u6_addr8 = path.dgid;
        fl.flowlabel = ((u32::from(path.tclass) << 20) | label).to_be();
        // SAFETY: `ipv6_stub` always points at a valid stub (failing ones without IPv6, but we
        // have an IPv6 socket, so IPv6 is up); `net` is live; `fl` is a valid key; `sk` is ours.
        let dst = unsafe {
            match (*b::ipv6_stub).ipv6_dst_lookup_flow {
                Some(f) => f(e.net, sk, &mut fl, ptr::null()),
                None => {
                    inc(&COUNTERS.tx_err_other);
                    return Err(errno(b::EAFNOSUPPORT));
                }
            }
        };
        if let Some(err) = ptr_err(dst) {
            inc(&COUNTERS.tx_err_route);
            return Err(err);
        }
        if dst.is_null() {
            inc(&COUNTERS.tx_err_route);
            return Err(errno(b::EHOSTUNREACH));
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
            return Err(if error < 0 { Error::from_errno(error.into()) } else { errno(b::EHOSTUNREACH) });
        }
        let skb = match Self::build_skb(headroom, pkt) {
            Ok(skb) => skb,
            Err(err) => {
                // SAFETY: we own the reference and give it back.
                unsafe { b::dst_release(dst) };
                return Err(err);
            }
        };
        // The ICRC covers the IPv6 and UDP headers with traffic class, flow label, hop limit and
        // UDP checksum masked: every other field is known before the stack writes them.
        let mut ip = [0u8; IPV6_HLEN];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&((UDP_HLEN + pkt.len()) as u16).to_be_bytes());
        ip[6] = b::IPPROTO_UDP as u8;
        ip[8..24].copy_from_slice(&path.sgid);
        ip[24..40].copy_from_slice(&path.dgid);
        let mut uh = [0u8; UDP_HLEN];
        uh[0..2].copy_from_slice(&path.udp_sport.to_be_bytes());
        uh[2..4].copy_from_slice(&ROCE_V2_UDP_DPORT.to_be_bytes());
        uh[4..6].copy_from_slice(&((UDP_HLEN + pkt.len()) as u16).to_be_bytes());
        // SAFETY: the skb's data is the `pkt.len()` bytes copied by `build_skb`, ours until sent.
        let data = unsafe { core::slice::from_raw_parts_mut((*skb).data, pkt.len()) };
        if let (Some(bth), Some(rest)) = (
            data.first_chunk::<{ crate::logic::opcode::BTH_LEN }>(),
            data.get(crate::logic::opcode::BTH_LEN..pkt.len().saturating_sub(4)),
        ) {
            let mut c = crate::logic::icrc::Icrc::new_v6(&ip, &uh, bth);
            c.update(rest);
            let v = c.finish();
            crate::logic::icrc::write_icrc(data, v);
        }
        let saddr = b::in6_addr { in6_u: b::in6_addr__bindgen_ty_1 { u6_addr8: path.sgid } };
        let daddr = b::in6_addr { in6_u: b::in6_addr__bindgen_ty_1 { u6_addr8: path.dgid } };
        // SAFETY: `dst` is our reference, consumed with the skb; the skb has headroom for the
        // UDP and IPv6 headers plus the link layer; a NULL tunnel device is allowed. The UDP
        // checksum is computed (IPv6 requires one).
        unsafe {
            b::udp_tunnel6_xmit_skb(
                dst,
                sk,
                skb,
                ptr::null_mut(),
                &saddr,
                &daddr,
                path.tclass,
                ttl,
                label.to_be(),
                path.udp_sport.to_be(),
                ROCE_V2_UDP_DPORT.to_be(),
                false,
            )
        };
        Ok(())
    }
}

impl Drop for UdpHandle {
    fn drop(&mut self) {
        let mut guard = RegistryGuard::lock();
        if self.entry().refs.fetch_sub(1, Ordering::Relaxed) != 1 {
            return;
        }
        let entries = guard.entries();
        if let Some(i) = entries.iter().position(|e| *e == self.entry) {
            let last = entries.len() - 1;
            entries.as_mut_slice().swap(i, last);
            // SAFETY: shrinking by one; the element dropped from view is a `NonNull` (no drop
            // glue), now the entry being removed.
            unsafe { entries.set_len(last) };
        }
        if entries.is_empty() {
            // Free the vector's buffer, so nothing stays allocated once no socket is open.
            *entries = KVec::new();
        }
        // SAFETY: the entry is unpublished and this was its last handle; we are in process
        // context (documented). The registry lock is still held, so a concurrent `get` for the
        // namespace waits until port 4791 is free again.
        unsafe { self.entry().close() };
        // SAFETY: the entry was leaked from a `KBox` in `get`, and nothing refers to it any more:
        // no handles, not in the registry, and no receive callback can still be running.
        drop(unsafe { KBox::from_raw(self.entry.as_ptr()) });
        drop(guard);
    }
}

/// Reads the addressing out of the IP header at `nh` and the UDP header at `uh`.
///
/// # Safety
///
/// `nh` must point to a complete IPv4 or IPv6 header (or at least one readable byte, if it is
/// neither); `uh` to a UDP header.
unsafe fn parse_headers(nh: *const u8, uh: *const u8) -> Option<RxMeta> {
    // SAFETY: per the contract, the header bytes read below are readable.
    unsafe {
        let byte = |i: usize| *nh.add(i);
        let mut m = RxMeta {
            udp_sport: u16::from_be_bytes([*uh, *uh.add(1)]),
            ..RxMeta::default()
        };
        match byte(0) >> 4 {
            4 => {
                m.is_v4 = true;
                m.tclass = byte(1);
                m.hop_limit = byte(8);
                for (gid, at) in [(&mut m.sgid, 12), (&mut m.dgid, 16)] {
                    gid[10] = 0xff;
                    gid[11] = 0xff;
                    ptr::copy_nonoverlapping(nh.add(at), gid.as_mut_ptr().add(12), 4);
                }
            }
            6 => {
                m.tclass = (byte(0) << 4) | (byte(1) >> 4);
                m.flow_label = (u32::from(byte(1) & 0xf) << 16) | (u32::from(byte(2)) << 8) | u32::from(byte(3));
                m.hop_limit = byte(7);
                ptr::copy_nonoverlapping(nh.add(8), m.sgid.as_mut_ptr(), 16);
                ptr::copy_nonoverlapping(nh.add(24), m.dgid.as_mut_ptr(), 16);
            }
            _ => return None,
        }
        Some(m)
    }
}

/// The encapsulation hook (`encap_rcv`) of our sockets.
///
/// # Safety
///
/// Called by the UDP stack in softirq context under the RCU read lock, with `sk` one of our
/// tunnel sockets and `skb` a datagram whose data starts at the UDP header and whose length is
/// the UDP length. Takes ownership of `skb`; returning 0 means it was consumed.
unsafe extern "C" fn encap_rcv(sk: *mut b::sock, skb: *mut b::sk_buff) -> i32 {
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
    // SAFETY: we own `skb`; linearising is allowed in softirq context (it allocates atomically).
    if unsafe { b::rrxe_skb_linearize(skb) } != 0 {
        return drop_with(&COUNTERS.rx_drop_linearize);
    }
    // SAFETY: `skb` is a live, now linear skb: `len` bytes at `data`, starting with the UDP
    // header; the IP header the stack already parsed lies before it in the same buffer.
    let (len, data, nh, dev) = unsafe {
        (
            (*skb).len as usize,
            (*skb).data.cast_const(),
            b::rrxe_skb_network_header(skb).cast_const(),
            (*skb).__bindgen_anon_1.__bindgen_anon_1.__bindgen_anon_1.dev,
        )
    };
    if len < UDP_HLEN + MIN_PAYLOAD {
        return drop_with(&COUNTERS.rx_drop_short);
    }
    if len > UDP_HLEN + MAX_PAYLOAD {
        return drop_with(&COUNTERS.rx_drop_long);
    }
    // SAFETY: `nh` points to the IPv4/IPv6 header the IP layer validated, `data` to the UDP
    // header (at least `UDP_HLEN` bytes, checked above).
    let Some(mut meta) = (unsafe { parse_headers(nh, data) }) else {
        return drop_with(&COUNTERS.rx_drop_bad_ip);
    };
    meta.netdev = dev as usize;
    // SAFETY: `nh` is the network header the IP layer validated (20 bytes without options for
    // IPv4 — `parse_headers` refused others — or 40 for IPv6) and `data` the `len` linear
    // bytes of the UDP datagram; both live until the skb is freed below.
    let icrc_ok = unsafe {
        let udp = core::slice::from_raw_parts(data, len);
        let c = if meta.is_v4 {
            crate::logic::icrc::icrc_v4(&*nh.cast::<[u8; IPV4_HLEN]>(), udp)
        } else {
            crate::logic::icrc::icrc_v6(&*nh.cast::<[u8; IPV6_HLEN]>(), udp)
        };
        c.ok().is_some_and(|c| Some(c) == crate::logic::icrc::stored_icrc(udp))
    };
    if !icrc_ok {
        return drop_with(&COUNTERS.rx_drop_icrc);
    }
    // SAFETY: the payload is the `len - UDP_HLEN` linear bytes after the UDP header, valid and
    // unchanged until the skb is freed below.
    let pkt = unsafe { core::slice::from_raw_parts(data.add(UDP_HLEN), len - UDP_HLEN) };
    // SAFETY: the entry is alive (see above) and immutable apart from its atomic refcount.
    let rx = unsafe { (*entry).rx };
    inc(&COUNTERS.rx_packets);
    rx(&meta, pkt);
    // SAFETY: we own `skb`; `pkt` is not used any more.
    unsafe { b::consume_skb(skb) };
    0
}

/// A namespace's RoCEv2 sockets for one netdev, opened on first use.
///
/// # Invariants
///
/// `handle` is NULL or a leaked `KBox<UdpHandle>` set once (under `open_lock`) and freed only
/// by `drop`.
#[pin_data(PinnedDrop)]
pub(crate) struct LazyUdp {
    netdev: super::netdev::NetDevRef,
    #[pin]
    open_lock: kernel::sync::Mutex<()>,
    handle: core::sync::atomic::AtomicPtr<UdpHandle>,
}

// SAFETY: `UdpHandle` is `Send + Sync`; the pointer is published once with release ordering.
unsafe impl Send for LazyUdp {}
// SAFETY: as above.
unsafe impl Sync for LazyUdp {}

impl LazyUdp {
    /// Nothing opened yet; `netdev` is the device packets leave through.
    pub(crate) fn new(netdev: &NetDev) -> impl PinInit<Self, Error> {
        let netdev = super::netdev::NetDevRef::new(netdev);
        try_pin_init!(LazyUdp {
            netdev,
            open_lock <- kernel::new_mutex!((), "rrxe:udp_open"),
            handle: core::sync::atomic::AtomicPtr::new(ptr::null_mut()),
        }? Error)
    }

    /// Opens the sockets (process context); does nothing when already open.
    pub(crate) fn open(&self, rx: RxFn) -> Result {
        let _g = self.open_lock.lock();
        if !self.handle.load(Ordering::Acquire).is_null() {
            return Ok(());
        }
        let h = KBox::new(UdpSock::get(&self.netdev, rx)?, GFP_KERNEL)?;
        // INVARIANT: set once, under the lock.
        self.handle.store(KBox::into_raw(h), Ordering::Release);
        Ok(())
    }

    /// Sends through the sockets; `ENOTCONN` before [`LazyUdp::open`].
    pub(crate) fn xmit(&self, path: &TxPath, pkt: &[u8]) -> Result {
        let p = self.handle.load(Ordering::Acquire);
        if p.is_null() {
            return Err(Error::from_errno(-(b::ENOTCONN as i32)));
        }
        // SAFETY: by the type invariant a non-null handle lives until `drop`.
        unsafe { &*p }.xmit(&self.netdev, path, pkt)
    }
}

#[pinned_drop]
impl PinnedDrop for LazyUdp {
    fn drop(self: Pin<&mut Self>) {
        let p = self.handle.swap(ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: by the type invariant this is our leaked box; nothing else frees it. It is
            // dropped before `netdev` (the handle must not outlive the netdev reference).
            drop(unsafe { KBox::from_raw(p) });
        }
    }
}
