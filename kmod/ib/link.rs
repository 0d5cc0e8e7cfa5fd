// SPDX-License-Identifier: GPL-2.0-only
//! `rdma link add NAME type TYPE netdev IF`: `struct rdma_link_ops`.

use super::bindings as b;
use super::netdev::NetDev;
use core::{
    ffi::c_void,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{error::from_result, prelude::*, sync::Arc, types::Opaque};

/// Handles `rdma link add` for one link type.
pub(crate) trait LinkDriver: Send + Sync + 'static {
    /// The `type` word of `rdma link add`.
    const TYPE: &'static CStr;
    /// Creates device `ibdev_name` on `netdev`.
    fn newlink(&self, ibdev_name: &CStr, netdev: &NetDev) -> Result;
}

/// The handler of the one registered link type. `rdma_link_ops.newlink` carries no context
/// pointer, so the trampoline finds its handler here.
static HANDLER: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// A registered link type.
///
/// # Invariants
///
/// `ops` is registered with ib_core and `HANDLER` points at `*handler` from construction until
/// drop.
pub(crate) struct LinkRegistration<L: LinkDriver> {
    ops: Pin<KBox<Opaque<b::rdma_link_ops>>>,
    handler: Arc<L>,
}

// SAFETY: the registration only holds a pinned C object that ib_core accesses under its own
// lock, plus an `Arc` of a `Send + Sync` handler; it may be dropped from any thread.
unsafe impl<L: LinkDriver> Send for LinkRegistration<L> {}
// SAFETY: no `&self` method touches the C object.
unsafe impl<L: LinkDriver> Sync for LinkRegistration<L> {}

impl<L: LinkDriver> LinkRegistration<L> {
    /// Registers `handler` for `rdma link add ... type L::TYPE`. One per module.
    pub(crate) fn new(handler: Arc<L>) -> Result<Self> {
        let ops = KBox::pin(Opaque::<b::rdma_link_ops>::uninit(), GFP_KERNEL)?;
        let p = &*handler as *const L as *mut c_void;
        HANDLER
            .compare_exchange(
                core::ptr::null_mut(),
                p,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map_err(|_| EBUSY)?;
        // SAFETY: `ops` is pinned heap memory valid for writes; the zeroed `list` is set up by
        // `rdma_link_register`, which keeps the pointer until `rdma_link_unregister` in drop.
        unsafe {
            let raw = ops.get();
            raw.write(core::mem::zeroed());
            (*raw).type_ = L::TYPE.as_char_ptr();
            (*raw).newlink = Some(Self::newlink_callback);
            b::rdma_link_register(raw);
        }
        Ok(Self { ops, handler })
    }

    /// # Safety
    ///
    /// Called by ib_core's netlink handler with a NUL-terminated name and a held netdev, while
    /// the registration is alive (ib_core's link_ops_rwsem orders it before unregistration).
    unsafe extern "C" fn newlink_callback(ibdev_name: *const u8, ndev: *mut b::net_device) -> i32 {
        from_result(|| {
            let p = HANDLER.load(Ordering::Acquire);
            if p.is_null() {
                return Err(ENODEV);
            }
            // SAFETY: `HANDLER` points at the `L` kept alive by the registration (invariant).
            let handler = unsafe { &*p.cast::<L>() };
            // SAFETY: as documented above.
            let (name, netdev) =
                unsafe { (CStr::from_char_ptr(ibdev_name), NetDev::from_raw(ndev)) };
            handler.newlink(name, netdev)?;
            Ok(0)
        })
    }
}

impl<L: LinkDriver> Drop for LinkRegistration<L> {
    fn drop(&mut self) {
        // SAFETY: registered in `new`; unregistering waits for running `newlink` calls.
        unsafe { b::rdma_link_unregister(self.ops.get()) };
        HANDLER.store(core::ptr::null_mut(), Ordering::Release);
        let _ = &self.handler;
    }
}
