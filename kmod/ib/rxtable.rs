// SPDX-License-Identifier: GPL-2.0-only
//! The devices that packets from the wire can reach, by netdev key.
//!
//! One table per module instance, published through a static pointer so that the UDP receive
//! hook, which only gets an skb, can find the device a datagram arrived for. The table holds
//! [`Receiver`]s, which a device's data-path state implements (`datapath::fabric::Fabric`): the
//! arrow runs from `datapath/` to the trait, never back up from `ib/`.
//!
//! Every received datagram looks its device up here, on whichever CPU received it, so the
//! lookup takes no lock and no reference: it runs with bottom halves disabled (an RCU read-side
//! critical section) over an immutable list that writers (device add and remove, process
//! context) replace as a whole, freeing the old one after an RCU grace period.

use core::{
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};

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
    /// The ingress netdev (`skb->dev`), as [`NetDev::key`](super::netdev::NetDev::key)
    /// gives it.
    pub(crate) netdev: usize,
    /// The ICRC did not match: the receiver only counts the packet (per device) and drops it.
    pub(crate) bad_icrc: bool,
    /// Too short, too long or an IP header we refuse: counted per device, then dropped
    /// (everything else in this record is unset then, and the packet is empty).
    pub(crate) bad_header: bool,
}

/// A device that takes RoCEv2 datagrams from the wire.
pub(crate) trait Receiver: Send + Sync {
    /// Handles one datagram that arrived on the device's netdev: softirq context, bottom
    /// halves disabled; `pkt` is the UDP payload (BTH .. ICRC), or empty when `meta` says it
    /// was dropped as bad (the device counts it). The skb is freed on return, so whatever is
    /// kept is copied.
    fn receive(&self, meta: &RxMeta, pkt: &[u8]);
}

/// The published list of receivers: never changed in place. A writer builds a new list,
/// publishes it and frees the old one after an RCU grace period, so a datagram's lookup takes
/// no lock and touches no shared counter (one atomic load, then reads).
type List = KVec<(usize, Arc<dyn Receiver>)>;

#[pin_data]
struct Inner {
    /// Serialises writers (process context); readers never take it.
    #[pin]
    writer: Mutex<()>,
    /// The current list, leaked from a `KBox` (null: empty).
    cur: AtomicPtr<List>,
}

impl Inner {
    /// Runs `f` on the current list (bottom halves disabled by the caller: an RCU read-side
    /// section, inside which the list is not freed).
    fn read<R>(&self, f: impl FnOnce(&[(usize, Arc<dyn Receiver>)]) -> R) -> R {
        let p = self.cur.load(Ordering::Acquire);
        if p.is_null() {
            return f(&[]);
        }
        // SAFETY: a published list is freed only after it was replaced and an RCU grace period
        // passed (`replace`); the caller is inside a read-side section that began before.
        f(unsafe { &*p })
    }

    /// Publishes `next` (process context, the writer lock held) and frees the list it replaces
    /// once no reader can still see it; the receivers dropped with it are dropped here.
    fn replace(&self, next: List) -> Result {
        let raw = KBox::into_raw(KBox::new(next, GFP_KERNEL)?);
        let old = self.cur.swap(raw, Ordering::AcqRel);
        super::bh::synchronize_rcu();
        if !old.is_null() {
            // SAFETY: unpublished above and past a grace period: no reader holds it, and it
            // came from `KBox::into_raw` here.
            drop(unsafe { KBox::from_raw(old) });
        }
        Ok(())
    }
}

static TABLE: AtomicPtr<Inner> = AtomicPtr::new(ptr::null_mut());

/// Owns the published table; dropping it unpublishes and frees it.
///
/// # Invariants
///
/// `TABLE` points to the pinned `Inner` owned by `self.0` (leaked from a `KBox`).
pub(crate) struct RxTable(*mut Inner);

// SAFETY: the table is reached through its atomic pointer and its writer lock.
unsafe impl Send for RxTable {}
// SAFETY: as above.
unsafe impl Sync for RxTable {}

impl RxTable {
    /// Allocates and publishes the table (module init; one instance at a time).
    pub(crate) fn new() -> Result<Self> {
        let b = KBox::pin_init(
            try_pin_init!(Inner {
                writer <- new_mutex!((), "rrxe:rxtable"),
                cur: AtomicPtr::new(ptr::null_mut()),
            }? Error),
            GFP_KERNEL,
        )?;
        // SAFETY: the contents are never moved: `drop` turns the pointer back into a `KBox` and
        // frees it in place.
        let raw = KBox::into_raw(unsafe { Pin::into_inner_unchecked(b) });
        if TABLE
            .compare_exchange(ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: not published, so still exclusively ours.
            drop(unsafe { KBox::from_raw(raw) });
            return Err(EBUSY);
        }
        // INVARIANT: published above.
        Ok(RxTable(raw))
    }
}

/// Runs `f` on the published table, if any. Bottom halves are disabled around it.
fn with_table<R>(f: impl FnOnce(&Inner) -> R) -> Option<R> {
    super::bh::with_bh_disabled(|| {
        let p = TABLE.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a published table is freed only after being unpublished and an RCU grace
        // period; bottom halves are disabled here, which is an RCU read-side section.
        Some(f(unsafe { &*p }))
    })
}

/// The published table for a writer (process context): the table is unpublished only by the
/// module's exit, after every device (every writer) is gone.
fn writer_table() -> Option<&'static Inner> {
    let p = TABLE.load(Ordering::Acquire);
    // SAFETY: writers run between module init and exit (device add and remove), while the
    // table stays published and allocated.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Makes `rx` reachable for datagrams arriving on the netdev with `key` (process context;
/// waits for an RCU grace period, to free the list it replaces).
pub(crate) fn add(key: usize, rx: Arc<dyn Receiver>) -> Result {
    let t = writer_table().ok_or(ENODEV)?;
    let _w = t.writer.lock();
    let mut next = List::new();
    t.read(|cur| -> Result {
        next.reserve(cur.len() + 1, GFP_KERNEL)?;
        for (k, r) in cur {
            next.push((*k, r.clone()), GFP_KERNEL)?;
        }
        Ok(())
    })?;
    next.push((key, rx), GFP_KERNEL)?;
    t.replace(next)
}

/// Forgets the netdev with `key` and waits until no receive callback still uses its receiver.
pub(crate) fn remove(key: usize) {
    let Some(t) = writer_table() else { return };
    let _w = t.writer.lock();
    let mut next = List::new();
    let built = t.read(|cur| -> Result {
        next.reserve(cur.len(), GFP_KERNEL)?;
        for (k, r) in cur.iter().filter(|(k, _)| *k != key) {
            next.push((*k, r.clone()), GFP_KERNEL)?;
        }
        Ok(())
    });
    if built.is_err() {
        // No memory for the smaller list: the receiver stays reachable (it only counts and
        // drops what arrives for a device being removed) until the next change or unload.
        pr_warn!("rxtable: no memory to unpublish a receiver\n");
        return;
    }
    // The table's reference to the receiver goes with the old list, in process context, once
    // no callback can use it.
    let _ = t.replace(next);
}

/// Hands a datagram to the receiver bound to its netdev (`meta.netdev`), if any (softirq
/// context). No lock and no reference count: the receiver is used inside the read-side
/// section in which it was found, and [`remove`] waits for that section to end.
pub(crate) fn receive(meta: &RxMeta, pkt: &[u8]) {
    with_table(|t| {
        t.read(|list| {
            if let Some((_, rx)) = list.iter().find(|(k, _)| *k == meta.netdev) {
                rx.receive(meta, pkt);
            }
        })
    });
}

impl Drop for RxTable {
    fn drop(&mut self) {
        TABLE.store(ptr::null_mut(), Ordering::Release);
        super::bh::synchronize_rcu();
        // SAFETY: unpublished and past a grace period: nothing else can reach it.
        let inner = unsafe { KBox::from_raw(self.0) };
        let last = inner.cur.swap(ptr::null_mut(), Ordering::AcqRel);
        if !last.is_null() {
            // SAFETY: the table is unreachable (above), so is its list; it came from
            // `KBox::into_raw` in `Inner::replace`.
            drop(unsafe { KBox::from_raw(last) });
        }
        drop(inner);
    }
}
