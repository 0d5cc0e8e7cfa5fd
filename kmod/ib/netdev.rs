// SPDX-License-Identifier: GPL-2.0-only
//! Network devices: a borrowed view, a held reference, and the netdev notifier.

use super::bindings as b;
use crate::logic::{link::NetdevKind, port::LinkFacts};
use core::{marker::PhantomPinned, ptr};
use kernel::{c_str, prelude::*, types::Opaque};

/// A `struct net_device` that is alive for the borrow.
///
/// # Invariants
///
/// `self.0` is a live, registered-or-registering `net_device` for the lifetime of `&NetDev`.
#[repr(transparent)]
pub(crate) struct NetDev(Opaque<b::net_device>);

impl NetDev {
    /// Borrows a `net_device`.
    ///
    /// # Safety
    ///
    /// `ptr` must be non-null and point to a `net_device` that stays alive for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut b::net_device) -> &'a NetDev {
        // SAFETY: `NetDev` is a transparent wrapper of `Opaque<net_device>`; the caller
        // guarantees the pointee outlives `'a`.
        unsafe { &*ptr.cast::<NetDev>() }
    }

    pub(crate) fn as_raw(&self) -> *mut b::net_device {
        self.0.get()
    }

    /// The `net_device` address, as an identity (never dereferenced through this value).
    pub(crate) fn key(&self) -> usize {
        self.as_raw() as usize
    }

    /// `dev->ifindex`.
    pub(crate) fn ifindex(&self) -> i32 {
        // SAFETY: by the type invariant the device is alive; `ifindex` is an aligned `int`
        // written once at registration.
        unsafe { ptr::read_volatile(ptr::addr_of!((*self.as_raw()).ifindex)) }
    }

    /// `dev->mtu` (changes under RTNL; read once).
    pub(crate) fn mtu(&self) -> u32 {
        // SAFETY: by the type invariant the device is alive; `mtu` is an aligned `u32` that the
        // core updates with WRITE_ONCE, so a volatile read is the READ_ONCE counterpart.
        unsafe { ptr::read_volatile(ptr::addr_of!((*self.as_raw()).mtu)) }
    }

    /// The permanent hardware address, if it is a 6-byte MAC.
    pub(crate) fn mac(&self) -> Option<[u8; 6]> {
        let dev = self.as_raw();
        // SAFETY: by the type invariant the device is alive; `addr_len` is a `u8` and
        // `dev_addr` points to at least `addr_len` bytes owned by the device.
        unsafe {
            if (*dev).addr_len != 6 || (*dev).dev_addr.is_null() {
                return None;
            }
            let mut mac = [0u8; 6];
            ptr::copy_nonoverlapping((*dev).dev_addr, mac.as_mut_ptr(), 6);
            Some(mac)
        }
    }

    /// The interface name (NUL-terminated in `dev->name`), for messages.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: by the type invariant the device is alive; `name` is an `IFNAMSIZ` array the
        // core keeps NUL-terminated.
        let name = unsafe { &(*self.as_raw()).name };
        // SAFETY: `c_char` and `u8` have the same layout; `name` is a live array.
        let bytes = unsafe { core::slice::from_raw_parts(name.as_ptr().cast::<u8>(), name.len()) };
        let len = bytes.iter().position(|&c| c == 0).unwrap_or(0);
        CStr::from_bytes_with_nul(&bytes[..=len]).unwrap_or(c_str!("?"))
    }

    /// Whether the device is fully registered (not yet being unregistered).
    pub(crate) fn is_registered(&self) -> bool {
        // SAFETY: by the type invariant the device is alive; `reg_state` is an aligned one-byte
        // field the core writes under RTNL (which the caller may not hold), so it is read once,
        // volatile, the READ_ONCE counterpart.
        let state = unsafe { ptr::read_volatile(ptr::addr_of!((*self.as_raw()).reg_state)) };
        u32::from(state) == b::netdev_reg_state_NETREG_REGISTERED
    }

    /// Adds `mac` to the device's multicast filter (counted: each add needs one
    /// [`Self::mc_del`]). Process or softirq context; the core allocates atomically.
    pub(crate) fn mc_add(&self, mac: &[u8; 6]) -> Result {
        // SAFETY: by the type invariant the device is alive; `mac` is 6 readable bytes, the
        // device's address length (only Ethernet netdevs get an rrxe device), which the core
        // copies before returning.
        let r = unsafe { b::dev_mc_add(self.as_raw(), mac.as_ptr()) };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        Ok(())
    }

    /// Drops one [`Self::mc_add`] of `mac` (`ENOENT` from the core, if it was not there, is
    /// ignored: nothing is left to undo).
    pub(crate) fn mc_del(&self, mac: &[u8; 6]) {
        // SAFETY: as in `mc_add`.
        let _ = unsafe { b::dev_mc_del(self.as_raw(), mac.as_ptr()) };
    }

    /// Link-layer type facts used to decide whether RoCE can run here.
    pub(crate) fn kind(&self) -> NetdevKind {
        let dev = self.as_raw();
        // SAFETY: by the type invariant the device is alive; `type_` and `addr_len` are plain
        // integers, `is_vlan_dev` only reads the device's flags.
        unsafe {
            NetdevKind {
                arphrd: (*dev).type_,
                addr_len: (*dev).addr_len,
                is_vlan: b::rrxe_is_vlan_dev(dev),
            }
        }
    }

    /// Administrative state, carrier and MTU.
    pub(crate) fn link_facts(&self) -> LinkFacts {
        let dev = self.as_raw();
        // SAFETY: by the type invariant the device is alive; both helpers only test state bits.
        let (running, carrier) =
            unsafe { (b::rrxe_netif_running(dev), b::rrxe_netif_carrier_ok(dev)) };
        LinkFacts {
            running,
            carrier,
            mtu: self.mtu(),
        }
    }
}

/// A counted reference to a `net_device` (`dev_hold`/`dev_put`).
///
/// # Invariants
///
/// `self.0` points to a `net_device` on which this value holds one reference.
pub(crate) struct NetDevRef(*mut b::net_device);

// SAFETY: a held `net_device` reference may be released from any thread.
unsafe impl Send for NetDevRef {}
// SAFETY: `NetDevRef` only hands out `&NetDev`, whose methods are safe to call concurrently.
unsafe impl Sync for NetDevRef {}

impl NetDevRef {
    /// Takes a new reference.
    pub(crate) fn new(dev: &NetDev) -> Self {
        // SAFETY: `dev` is alive for the borrow, so taking a reference is allowed.
        unsafe { b::rrxe_dev_hold(dev.as_raw()) };
        // INVARIANT: the reference was just taken.
        NetDevRef(dev.as_raw())
    }
}

impl core::ops::Deref for NetDevRef {
    type Target = NetDev;

    fn deref(&self) -> &NetDev {
        // SAFETY: the held reference keeps the device alive as long as `self`.
        unsafe { NetDev::from_raw(self.0) }
    }
}

impl Drop for NetDevRef {
    fn drop(&mut self) {
        // SAFETY: by the type invariant this value owns one reference.
        unsafe { b::rrxe_dev_put(self.0) };
    }
}

/// Netdev events the driver reacts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NetdevEvent {
    /// The device is going away (NETDEV_UNREGISTER).
    Unregister,
    /// Up, down, carrier change or MTU change: the port state may differ.
    LinkChange,
}

impl NetdevEvent {
    fn from_raw(event: usize) -> Option<Self> {
        match event as u32 {
            b::netdev_cmd_NETDEV_UNREGISTER => Some(Self::Unregister),
            b::netdev_cmd_NETDEV_UP
            | b::netdev_cmd_NETDEV_DOWN
            | b::netdev_cmd_NETDEV_CHANGE
            | b::netdev_cmd_NETDEV_CHANGEMTU => Some(Self::LinkChange),
            _ => None,
        }
    }
}

/// Receives netdev events.
pub(crate) trait NetdevHandler: Send + Sync + 'static {
    /// Called under RTNL for every netdev in every namespace.
    fn event(&self, dev: &NetDev, event: NetdevEvent);
}

/// A registered netdev notifier that forwards to `H`.
///
/// # Invariants
///
/// `nb` is registered with `register_netdevice_notifier` from construction until drop.
#[pin_data(PinnedDrop)]
pub(crate) struct NetdevNotifier<H: NetdevHandler> {
    #[pin]
    nb: Opaque<b::notifier_block>,
    handler: H,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the notifier block is only touched by the notifier chain (under its own lock) and by
// `drop`; the handler is `Send + Sync`.
unsafe impl<H: NetdevHandler> Send for NetdevNotifier<H> {}
// SAFETY: as above; `&self` exposes nothing.
unsafe impl<H: NetdevHandler> Sync for NetdevNotifier<H> {}

impl<H: NetdevHandler> NetdevNotifier<H> {
    /// Registers `handler` for netdev events.
    pub(crate) fn new(handler: H) -> impl PinInit<Self, Error> {
        // The `try_pin_init!` below never fails by itself; registration is chained after it.
        try_pin_init!(Self {
            handler,
            _pin: PhantomPinned,
            nb <- Opaque::ffi_init(|nb: *mut b::notifier_block| {
                let call: unsafe extern "C" fn(*mut b::notifier_block, usize, *mut core::ffi::c_void) -> i32 =
                    Self::notifier_call;
                // SAFETY: `nb` is valid for writes; a zeroed `notifier_block` is its C default
                // (no next block, priority 0).
                unsafe {
                    nb.write(core::mem::zeroed());
                    (*nb).notifier_call = Some(call);
                }
            }),
        })
        .pin_chain(|this| {
            // SAFETY: `nb` is pinned inside `Self` and is unregistered in `drop` before it is
            // freed; the handler is already initialised, so the callback may run at once.
            kernel::error::to_result(unsafe { b::register_netdevice_notifier(this.nb.get()) })
        })
    }

    /// # Safety
    ///
    /// Called by the notifier chain with `nb` pointing into a live `NetdevNotifier<H>` and
    /// `ptr` a `netdev_notifier_info` for a live device.
    unsafe extern "C" fn notifier_call(
        nb: *mut b::notifier_block,
        event: usize,
        ptr: *mut core::ffi::c_void,
    ) -> i32 {
        let Some(ev) = NetdevEvent::from_raw(event) else {
            return b::NOTIFY_DONE as i32;
        };
        // SAFETY: `nb` is the `nb` field of a live `Self` (it is only registered from there),
        // so `container_of` yields a valid `Self`.
        let this =
            unsafe { &*kernel::container_of!(nb.cast::<Opaque<b::notifier_block>>(), Self, nb) };
        // SAFETY: every netdev notifier event passes a `netdev_notifier_info`.
        let raw = unsafe { b::rrxe_netdev_notifier_info_to_dev(ptr.cast()) };
        if raw.is_null() {
            return b::NOTIFY_DONE as i32;
        }
        // SAFETY: the device is alive for the duration of the notifier call.
        let dev = unsafe { NetDev::from_raw(raw) };
        this.handler.event(dev, ev);
        b::NOTIFY_DONE as i32
    }
}

#[pinned_drop]
impl<H: NetdevHandler> PinnedDrop for NetdevNotifier<H> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: by the type invariant `nb` is registered.
        unsafe { b::unregister_netdevice_notifier(self.nb.get()) };
    }
}
