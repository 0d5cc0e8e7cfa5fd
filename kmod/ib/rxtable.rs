// SPDX-License-Identifier: GPL-2.0-only
//! The devices that packets from the wire can reach, by netdev key.
//!
//! One table per module instance, published through a static pointer so that the UDP receive
//! hook, which only gets an skb, can find the device a datagram arrived for. The table holds
//! [`Receiver`]s, which a device's data-path state implements (`datapath::fabric::Fabric`): the
//! arrow runs from `datapath/` to the trait, never back up from `ib/`. Lookups run with bottom halves disabled (an RCU read-side
//! critical section); the owner unpublishes the table and waits for an RCU grace period before
//! freeing it, so a lookup never sees freed memory.

use core::{
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{new_spinlock, prelude::*, sync::Arc, sync::SpinLock};

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

#[pin_data]
struct Inner {
    #[pin]
    list: SpinLock<KVec<Option<(usize, Arc<dyn Receiver>)>>>,
}

static TABLE: AtomicPtr<Inner> = AtomicPtr::new(ptr::null_mut());

/// Owns the published table; dropping it unpublishes and frees it.
///
/// # Invariants
///
/// `TABLE` points to the pinned `Inner` owned by `self.0` (leaked from a `KBox`).
pub(crate) struct RxTable(*mut Inner);

// SAFETY: the table is only reached through its spinlock.
unsafe impl Send for RxTable {}
// SAFETY: as above.
unsafe impl Sync for RxTable {}

impl RxTable {
    /// Allocates and publishes the table (module init; one instance at a time).
    pub(crate) fn new() -> Result<Self> {
        let b = KBox::pin_init(
            try_pin_init!(Inner { list <- new_spinlock!(KVec::new(), "rrxe:rxtable") }? Error),
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

/// Makes `rx` reachable for datagrams arriving on the netdev with `key` (process context).
pub(crate) fn add(key: usize, rx: Arc<dyn Receiver>) -> Result {
    with_table(|t| {
        let mut list = t.list.lock();
        if let Some(slot) = list.iter_mut().find(|e| e.is_none()) {
            *slot = Some((key, rx));
            return Ok(());
        }
        list.push(Some((key, rx)), GFP_ATOMIC).map_err(Error::from)
    })
    .unwrap_or(Err(ENODEV))
}

/// Forgets the netdev with `key` and waits until no receive callback still uses its receiver.
pub(crate) fn remove(key: usize) {
    let removed = with_table(|t| {
        let mut list = t.list.lock();
        list.iter_mut()
            .find(|e| matches!(e, Some((k, _)) if *k == key))
            .and_then(Option::take)
    });
    super::bh::synchronize_rcu();
    // The table's reference, dropped in process context once no callback can use it.
    drop(removed);
}

/// Hands a datagram to the receiver bound to its netdev (`meta.netdev`), if any (softirq
/// context). The receiver's reference is taken under the table's lock and dropped before
/// bottom halves are enabled again, so [`remove`] can wait for it; the lock is not held while
/// the receiver runs, so receivers on different CPUs do not serialise on it.
pub(crate) fn receive(meta: &RxMeta, pkt: &[u8]) {
    super::bh::with_bh_disabled(|| {
        let rx = with_table(|t| {
            t.list
                .lock()
                .iter()
                .flatten()
                .find(|(k, _)| *k == meta.netdev)
                .map(|(_, r)| r.clone())
        })
        .flatten();
        if let Some(rx) = rx {
            rx.receive(meta, pkt);
        }
    });
}

impl Drop for RxTable {
    fn drop(&mut self) {
        TABLE.store(ptr::null_mut(), Ordering::Release);
        super::bh::synchronize_rcu();
        // SAFETY: unpublished and past a grace period: nothing else can reach it.
        drop(unsafe { KBox::from_raw(self.0) });
    }
}
