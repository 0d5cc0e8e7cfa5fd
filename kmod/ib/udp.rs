// SPDX-License-Identifier: GPL-2.0-only
//! The RoCEv2 UDP tunnel: one kernel UDP socket pair bound to port 4791 per network namespace.
//!
//! [`UdpSock::get`] opens (or shares) the sockets of a netdev's namespace and returns a
//! [`UdpHandle`]; the sockets close when the last handle of the namespace is dropped, or when
//! the namespace exits ([`NetnsExit`]), whichever comes first: a kernel socket does not pin
//! its namespace, and a netdev we hold can leave the namespace (a physical device is moved back
//! to `init_net` when its namespace exits) while a device still has a handle. Handles of a
//! closed namespace stay valid; their transmits fail with `ENOTCONN`. There is
//! an IPv4 socket and, when IPv6 is available, an IPv6-only socket (as rdma_rxe does); if the
//! IPv6 socket cannot be opened, IPv4 still works and IPv6 transmits fail with `EAFNOSUPPORT`.
//!
//! Receive: the UDP stack hands each datagram for port 4791 to the encapsulation hook, in
//! softirq context under the RCU read lock. The hook checks its length, linearises it, and hands
//! the addresses ([`RxMeta`]) and the UDP payload (BTH .. ICRC) to the device bound to the
//! ingress netdev ([`super::rxtable::receive`]).
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
use super::inflight::{Gauge, TxWaker};
use super::netdev::NetDev;
use super::rxtable::RxMeta;
use core::{
    cell::UnsafeCell,
    marker::PhantomPinned,
    ptr::{self, NonNull},
    sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering},
};
use kernel::{prelude::*, sync::Arc, types::Opaque};

pub(crate) use crate::logic::iphdr::ROCE_V2_UDP_DPORT;
use crate::logic::iphdr::{
    self, IPV4_LEN as IPV4_HLEN, IPV6_LEN as IPV6_HLEN, UDP_LEN as UDP_HLEN,
};

/// Smallest UDP payload accepted: a BTH (12 bytes) and the ICRC (4 bytes).
pub(crate) const MIN_PAYLOAD: usize = 12 + 4;

/// Longest IP header accepted in front of a datagram (IPv6 with extension headers).
const MAX_IP_HLEN: usize = 512;

/// Largest UDP payload accepted: a 4096-byte path MTU plus the largest header stack
/// (BTH + RETH + ImmDt = 32 bytes; BTH + DETH + ImmDt and BTH + AtomicETH are smaller), up to
/// 3 pad bytes and the ICRC, rounded up.
pub(crate) const MAX_PAYLOAD: usize = 4096 + 64;

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
    /// Transmit failures: no memory for the skb (reported as [`XmitError::Congested`]).
    pub(crate) tx_err_nomem: u64,
    /// Datagrams the IP output path dropped or pushed back (`NET_XMIT_DROP`/`NET_XMIT_CN`).
    pub(crate) tx_congested: u64,
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
    tx_congested: AtomicU64,
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
    tx_congested: AtomicU64::new(0),
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
        tx_congested: r(&c.tx_congested),
        tx_err_other: r(&c.tx_err_other),
    }
}

/// A binding's errno constant as an [`Error`].
fn errno(e: u32) -> Error {
    super::errno(e as i32)
}

/// `IS_ERR` for a kernel pointer.
fn ptr_err<T>(p: *mut T) -> Option<Error> {
    let e = p as isize;
    (-4095..0).contains(&e).then(|| Error::from_errno(e as i32))
}

/// Why a datagram was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XmitError {
    /// Transient and loss-like: the IP output path dropped it or pushed back (`NET_XMIT_DROP`,
    /// `NET_XMIT_CN`, any positive `NET_XMIT_*` code), or there was no memory for the skb. The
    /// caller treats the packet as lost (retransmission recovers it).
    Congested,
    /// The datagram cannot be sent as addressed: no route, bad arguments, no socket (not
    /// opened, or its namespace is gone), or another error of the IP output path.
    Failed(Error),
}

impl From<Error> for XmitError {
    fn from(e: Error) -> Self {
        XmitError::Failed(e)
    }
}

/// The result of `ip_local_out`/`ip6_local_out`: a negative errno or a `NET_XMIT_*` code.
fn xmit_result(r: i32) -> Result<(), XmitError> {
    match r {
        0 => Ok(()),
        r if r < 0 => {
            inc(&COUNTERS.tx_err_other);
            Err(XmitError::Failed(Error::from_errno(r)))
        }
        _ => {
            inc(&COUNTERS.tx_congested);
            Err(XmitError::Congested)
        }
    }
}

/// The sockets of one namespace.
///
/// # Invariants
///
/// Immutable after it is published (in the registry and as the sockets' `sk_user_data`),
/// except:
/// - `refs`, which changes only under the registry lock;
/// - `sock4` and `sock6`, which [`Entry::close`] clears (once, under the registry lock, after
///   unpublishing the entry) and then releases only after an RCU grace period.
///
/// `sock4` is null or a tunnel socket this entry owns; so is `sock6` (null also when IPv6 was
/// not available). A non-null `sock4` read in an RCU read-side section (bottom halves disabled)
/// stays valid until that section ends, and so does `net`, the namespace both sockets live in:
/// the namespace's exit closes them first ([`NetnsExit`]).
struct Entry {
    net: *mut b::net,
    refs: AtomicUsize,
    sock4: AtomicPtr<b::socket>,
    sock6: AtomicPtr<b::socket>,
}

impl Entry {
    /// Closes the sockets: waits until no transmit can still be using them (transmits read them
    /// with bottom halves disabled) and no receive callback can still be running, then releases
    /// them. Handles that still point at the entry see null sockets from then on.
    ///
    /// # Safety
    ///
    /// The entry must have been unpublished from the registry, with the registry lock held by
    /// the caller (so this runs once per entry); process context.
    unsafe fn close(&self) {
        let socks = [
            self.sock6.swap(ptr::null_mut(), Ordering::AcqRel),
            self.sock4.swap(ptr::null_mut(), Ordering::AcqRel),
        ];
        super::bh::synchronize_rcu();
        for s in socks {
            if !s.is_null() {
                // SAFETY: by the type invariant we owned the socket, and we took it out of the
                // entry above; no transmit uses it any more (grace period above).
                // `udp_tunnel_sock_release` clears `sk_user_data` and waits for RCU readers
                // before releasing, so a later receive finds no entry.
                unsafe { b::udp_tunnel_sock_release(s) };
            }
        }
        // The encapsulation hook runs under the RCU read lock (in softirq); a callback that
        // read the entry before `sk_user_data` was cleared has finished after this.
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

impl RegistryGuard {
    /// Removes `entry` from the registry; `false` when it was not there (already closed by its
    /// namespace's exit).
    fn unpublish(&mut self, entry: NonNull<Entry>) -> bool {
        let entries = self.entries();
        let Some(i) = entries.iter().position(|e| *e == entry) else {
            return false;
        };
        let last = entries.len() - 1;
        entries.as_mut_slice().swap(i, last);
        // SAFETY: shrinking by one; the element dropped from view is a `NonNull` (no drop glue),
        // now the entry being removed.
        unsafe { entries.set_len(last) };
        if entries.is_empty() {
            // Free the vector's buffer, so nothing stays allocated once no socket is open.
            *entries = KVec::new();
        }
        true
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
            b::rrxe_udp_sock_create6(net, &mut cfg, &mut sock)
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
    /// this is the first handle there. Datagrams received on them go to the device bound to
    /// their ingress netdev ([`super::rxtable`]). Errors are those of opening the IPv4
    /// socket (`EADDRINUSE` if something else holds UDP port 4791, e.g. rdma_rxe in the same
    /// namespace). Process context only.
    pub(crate) fn get(netdev: &NetDev) -> Result<UdpHandle> {
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

        // A namespace whose exit has started (its count reached zero) gets no new sockets: its
        // exit may already have run, and nothing would close them. Its exit runs under the
        // registry lock, so a namespace still counted here is closed by its exit if it dies now.
        // SAFETY: `net` is the namespace of a netdev we hold, so its memory is alive (the
        // namespace's teardown waits for the netdev's references).
        if !unsafe { b::rrxe_check_net(net) } {
            return Err(errno(b::ENETDOWN));
        }
        // Make room first, so that publishing below cannot fail.
        guard.entries().reserve(1, GFP_KERNEL)?;
        let sock4 = open_socket(net, false)?;
        let sock6 = match open_socket(net, true) {
            Ok(s) => s,
            Err(e) => {
                if ![b::EAFNOSUPPORT, b::EPFNOSUPPORT]
                    .iter()
                    .any(|&n| e.to_errno() == -(n as i32))
                {
                    pr_warn!("rrxe: no IPv6 RoCEv2 socket in this namespace ({:?})\n", e);
                }
                ptr::null_mut()
            }
        };
        let entry = Entry {
            net,
            refs: AtomicUsize::new(1),
            sock4: AtomicPtr::new(sock4),
            sock6: AtomicPtr::new(sock6),
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
/// Namespace lifetime: a kernel socket does not pin its namespace, so the namespace's exit
/// closes the sockets itself ([`NetnsExit`]); the handle then stays valid, and transmits through
/// it fail with `ENOTCONN`.
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
        let r = super::bh::with_bh_disabled(|| self.xmit_inner(netdev, path, pkt, gauge));
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

impl Drop for UdpHandle {
    fn drop(&mut self) {
        let mut guard = RegistryGuard::lock();
        if self.entry().refs.fetch_sub(1, Ordering::Relaxed) != 1 {
            return;
        }
        if guard.unpublish(self.entry) {
            // SAFETY: unpublished just now, with the registry lock held (still held, so a
            // concurrent `get` for the namespace waits until port 4791 is free again); process
            // context (documented on `UdpHandle`).
            unsafe { self.entry().close() };
        }
        // Otherwise the namespace's exit closed the sockets already.
        // SAFETY: the entry was leaked from a `KBox` in `get`, and nothing refers to it any more:
        // no handles, not in the registry, and no receive callback or transmit can still be
        // using it (`close` waited for them).
        drop(unsafe { KBox::from_raw(self.entry.as_ptr()) });
        drop(guard);
    }
}

/// The namespace-exit hook: closes a dying namespace's RoCEv2 sockets (`pernet_operations`).
///
/// Registered as a pernet *subsystem*, so that in a namespace's teardown it runs after the
/// device exits (which unregister the namespace's netdevs or move them out). One per module;
/// register it before any socket can be opened, drop it after the last handle is gone
/// (unregistering runs the exit for every namespace still alive).
///
/// # Invariants
///
/// `ops` is registered with `register_pernet_subsys` from construction until drop.
#[pin_data(PinnedDrop)]
pub(crate) struct NetnsExit {
    #[pin]
    ops: Opaque<b::pernet_operations>,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the operations are only read by the namespace core (under `pernet_ops_rwsem`) and
// unregistered in `drop`, which may run on any thread.
unsafe impl Send for NetnsExit {}
// SAFETY: `&self` exposes nothing.
unsafe impl Sync for NetnsExit {}

impl NetnsExit {
    /// Registers the hook.
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            _pin: PhantomPinned,
            ops <- Opaque::ffi_init(|ops: *mut b::pernet_operations| {
                // SAFETY: `ops` is valid for writes; all-zero is an empty `pernet_operations`
                // (no id, no size, no other callbacks).
                unsafe {
                    ops.write(core::mem::zeroed());
                    (*ops).exit = Some(Self::exit_callback);
                }
            }),
        }? Error)
        .pin_chain(|this| {
            // SAFETY: `ops` is pinned inside `Self` and unregistered in `drop` before it is
            // freed; the callback only needs the static registry.
            kernel::error::to_result(unsafe { b::register_pernet_subsys(this.ops.get()) })
        })
    }

    /// # Safety
    ///
    /// Called by the namespace core, in process context, once per namespace that exits while
    /// the hook is registered (and for every live namespace when it is unregistered).
    unsafe extern "C" fn exit_callback(net: *mut b::net) {
        let mut guard = RegistryGuard::lock();
        let found = guard.entries().iter().copied().find(|e| {
            // SAFETY: entries in the registry are live (removed, under the lock we hold, before
            // they are freed).
            unsafe { e.as_ref() }.net == net
        });
        if let Some(e) = found {
            guard.unpublish(e);
            // SAFETY: the entry stays allocated while handles refer to it (it had one at least,
            // being registered); it was unpublished just now with the lock held; the namespace
            // core calls us in process context.
            unsafe { e.as_ref().close() };
        }
    }
}

#[pinned_drop]
impl PinnedDrop for NetnsExit {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: by the type invariant `ops` is registered.
        unsafe { b::unregister_pernet_subsys(self.ops.get()) };
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
        super::rxtable::receive(
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
    super::rxtable::receive(&meta, pkt);
    // SAFETY: we own `skb`; `pkt` is not used any more.
    unsafe { b::rrxe_consume_skb(skb) };
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
    pub(crate) fn open(&self) -> Result {
        let _g = self.open_lock.lock();
        if !self.handle.load(Ordering::Acquire).is_null() {
            return Ok(());
        }
        let h = KBox::new(UdpSock::get(&self.netdev)?, GFP_KERNEL)?;
        // INVARIANT: set once, under the lock.
        self.handle.store(KBox::into_raw(h), Ordering::Release);
        Ok(())
    }

    /// Whether the sockets are open (a later [`LazyUdp::xmit`] reaches the stack).
    pub(crate) fn is_open(&self) -> bool {
        !self.handle.load(Ordering::Acquire).is_null()
    }

    /// Sends through the sockets ([`UdpHandle::xmit`]); `Failed(ENOTCONN)` before
    /// [`LazyUdp::open`].
    pub(crate) fn xmit<T: TxWaker>(
        &self,
        path: &TxPath,
        pkt: &[u8],
        gauge: Option<&Arc<Gauge<T>>>,
    ) -> Result<(), XmitError> {
        let p = self.handle.load(Ordering::Acquire);
        if p.is_null() {
            return Err(errno(b::ENOTCONN).into());
        }
        // SAFETY: by the type invariant a non-null handle lives until `drop`.
        unsafe { &*p }.xmit(&self.netdev, path, pkt, gauge)
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
