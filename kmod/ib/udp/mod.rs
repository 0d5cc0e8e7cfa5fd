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

mod rx;
mod tx;

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

/// The module's datagram counters: received, dropped before any device saw them (closing
/// socket, linearize failure, too short, too long, not IP, bad ICRC), sent, and transmit
/// failures (no route, no memory, pushed back by the IP output path, bad arguments).
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

/// The datagram counters (module-wide, for all namespaces together, monotonic) as
/// `(name, value)` pairs, in the order `udp_counters` shows them.
pub(crate) fn counters() -> [(&'static str, u64); 12] {
    let c = &COUNTERS;
    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
    [
        ("rx_packets", r(&c.rx_packets)),
        ("rx_drop_closing", r(&c.rx_drop_closing)),
        ("rx_drop_linearize", r(&c.rx_drop_linearize)),
        ("rx_drop_short", r(&c.rx_drop_short)),
        ("rx_drop_long", r(&c.rx_drop_long)),
        ("rx_drop_bad_ip", r(&c.rx_drop_bad_ip)),
        ("rx_drop_icrc", r(&c.rx_drop_icrc)),
        ("tx_packets", r(&c.tx_packets)),
        ("tx_err_route", r(&c.tx_err_route)),
        ("tx_err_nomem", r(&c.tx_err_nomem)),
        ("tx_congested", r(&c.tx_congested)),
        ("tx_err_other", r(&c.tx_err_other)),
    ]
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
    let mut cfg = b::udp_port_cfg {
        local_udp_port: ROCE_V2_UDP_DPORT.to_be(),
        ..Default::default()
    };
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
                encap_rcv: Some(rx::encap_rcv),
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
