// SPDX-License-Identifier: GPL-2.0-only
//! rrxe: Soft-RoCE (RoCEv2) rebuilt in Rust.
//!
//! Layout: `logic/` is the pure core (host-tested), `ib/` the only `unsafe` code (safe types
//! over ib_core and the netdev core), `datapath/` what runs in any context on a device's state,
//! `verbs/` the verbs that create and destroy it. Each layer imports only those before it (and
//! `uapi`).

#![recursion_limit = "256"]

use kernel::{prelude::*, sync::Arc};

mod datapath;
mod ib;
// `logic` is also the host tests' library, so its items are `pub`; host-only items carry their
// own `expect(dead_code)` (under `cfg(MODULE)`).
#[allow(unreachable_pub)]
mod logic;
#[allow(dead_code, unreachable_pub)]
#[path = "../uapi/src/rrxe_abi.rs"]
mod uapi;
mod verbs;

use ib::{device::Registry, link::LinkRegistration, netdev::NetdevNotifier};
use verbs::{Links, Rrxe};

module! {
    type: RrxeModule,
    name: "rrxe",
    author: "The rrxe developers",
    description: "Soft-RoCE: a RoCEv2 RDMA device over any Ethernet netdev, in Rust",
    license: "GPL",
    alias: ["rdma-link-rrxe"],
}

/// Unregisters every device when dropped.
struct Devices(Arc<Registry<Rrxe>>);

impl Drop for Devices {
    fn drop(&mut self) {
        self.0.unregister_all();
    }
}

/// Module state. Fields drop in order: no new links, then no devices, then no notifier, then
/// no receive table, then no namespace-exit hook (the devices closed their sockets), then a
/// wait for our skbs still in the network stack (their destructor is our code).
struct RrxeModule {
    _links: LinkRegistration<Links>,
    _devices: Devices,
    _notifier: Pin<KBox<NetdevNotifier<Arc<Registry<Rrxe>>>>>,
    _rxtable: ib::rxtable::RxTable,
    _netns_exit: Pin<KBox<ib::udp::NetnsExit>>,
    /// Last: the skbs still in the network stack run our destructor when freed.
    _skbs: ib::inflight::DrainOnUnload,
}

impl kernel::Module for RrxeModule {
    fn init(module: &'static ThisModule) -> Result<Self> {
        // First: sockets may be opened as soon as a device exists.
        let netns_exit = KBox::pin_init(ib::udp::NetnsExit::new(), GFP_KERNEL)?;
        let rxtable = ib::rxtable::RxTable::new()?;
        let registry = ib::driver::registry::<Rrxe>(module)?;
        let notifier = KBox::pin_init(NetdevNotifier::new(registry.clone()), GFP_KERNEL)?;
        let links = LinkRegistration::new(Arc::new(Links::new(registry.clone()), GFP_KERNEL)?)?;
        pr_info!("loaded (uABI {})\n", uapi::UABI_VERSION);
        Ok(RrxeModule {
            _links: links,
            _devices: Devices(registry),
            _notifier: notifier,
            _rxtable: rxtable,
            _netns_exit: netns_exit,
            _skbs: ib::inflight::DrainOnUnload,
        })
    }
}
