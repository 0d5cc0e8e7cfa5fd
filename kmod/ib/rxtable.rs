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
    /// Serialises writers (process context); readers never take it. It guards the spare list:
    /// the list last replaced, emptied, whose capacity is at least the current list's length
    /// less one, so that [`remove`] never allocates (a device must always be able to leave).
    #[pin]
    writer: Mutex<Option<KBox<List>>>,
    /// The current list, leaked from a `KBox` (null: empty).
    cur: AtomicPtr<List>,
}

impl Inner {
    /// Runs `f` on the current list (bottom halves disabled by the caller: an RCU read-side
    /// section, inside which the list is not freed; or the writer lock held).
    fn read<R>(&self, f: impl FnOnce(&[(usize, Arc<dyn Receiver>)]) -> R) -> R {
        let p = self.cur.load(Ordering::Acquire);
        if p.is_null() {
            return f(&[]);
        }
        // SAFETY: a published list is freed only after it was replaced and an RCU grace period
        // passed (`replace`), and only by a writer, under the writer lock; the caller is inside
        // a read-side section that began before, or holds the writer lock.
        f(unsafe { &*p })
    }

    /// Publishes `next` (null for an empty list; process context, the writer lock held) and
    /// returns the list it replaces once no reader can still see it, emptied: the receivers it
    /// held are dropped here, in process context.
    fn replace(&self, next: Option<KBox<List>>) -> Option<KBox<List>> {
        let raw = next.map_or(ptr::null_mut(), KBox::into_raw);
        let old = self.cur.swap(raw, Ordering::AcqRel);
        super::bh::synchronize_rcu();
        if old.is_null() {
            return None;
        }
        // SAFETY: unpublished above and past a grace period: no reader holds it, and it came
        // from `KBox::into_raw` here.
        let mut old = unsafe { KBox::from_raw(old) };
        empty(&mut old);
        Some(old)
    }
}

/// Drops every entry of `list`, keeping its capacity (the kernel's `Vec` has no `clear`).
fn empty(list: &mut List) {
    let entries: *mut [(usize, Arc<dyn Receiver>)] = list.as_mut_slice();
    // SAFETY: the length goes to 0 first (0 is within the capacity), so the entries are no
    // longer the vector's; then each of them, initialised, is dropped exactly once, in memory
    // the vector still owns.
    unsafe {
        list.set_len(0);
        core::ptr::drop_in_place(entries);
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
                writer <- new_mutex!(None, "rrxe:rxtable"),
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
    let mut spare = t.writer.lock();
    let mut next = KBox::new(List::new(), GFP_KERNEL)?;
    t.read(|cur| -> Result {
        next.reserve(cur.len() + 1, GFP_KERNEL)?;
        for (k, r) in cur {
            next.push((*k, r.clone()), GFP_KERNEL)?;
        }
        Ok(())
    })?;
    next.push((key, rx), GFP_KERNEL)?;
    // The replaced list (capacity: the new length less one) is the next removal's.
    *spare = t.replace(Some(next));
    Ok(())
}

/// Forgets the netdev with `key` and waits until no receive callback still uses its receiver.
/// Never allocates: the new list is built in the spare one.
pub(crate) fn remove(key: usize) {
    let Some(t) = writer_table() else { return };
    let mut spare = t.writer.lock();
    let (len, found) = t.read(|cur| (cur.len(), cur.iter().any(|(k, _)| *k == key)));
    if !found {
        return;
    }
    let next = if len == 1 {
        None
    } else {
        let Some(mut next) = spare.take() else {
            // Cannot happen: a list of two or more was published by an `add` that kept the
            // one it replaced.
            pr_err!("rxtable: no spare list to unpublish a receiver\n");
            return;
        };
        let filled = t.read(|cur| -> Result {
            for (k, r) in cur.iter().filter(|(k, _)| *k != key) {
                // Within the spare's capacity (at least `len - 1`): no allocation.
                next.push((*k, r.clone()), GFP_NOWAIT)?;
            }
            Ok(())
        });
        if filled.is_err() {
            pr_err!("rxtable: the spare list was too small\n");
            empty(&mut next);
            *spare = Some(next);
            return;
        }
        Some(next)
    };
    // The table's reference to the receiver goes with the old list, in process context, once
    // no callback can use it; the old list is the next removal's spare.
    *spare = t.replace(next);
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
