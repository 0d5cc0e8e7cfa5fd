// SPDX-License-Identifier: GPL-2.0-only
//! `ib_device`: allocation, registration, the ops vtable and the per-driver device registry.
//!
//! Memory model (the `drm::Device` pattern applied to ib_core): ib_core allocates one block per
//! device with `_ib_alloc_device(size_of::<Device<T>>())`; the `ib_device` sits at offset 0 and
//! the Rust fields follow. The block is freed by ib_core after `ops.dealloc_driver`, which drops
//! the Rust fields. With `dealloc_driver` set ("new flow"), every unregistration path
//! (`rdma link delete`, a vanishing netdev, module exit) also deallocates.
//!
//! A driver id of `RDMA_DRIVER_UNKNOWN` is shared with every out-of-tree driver, so ib_core's
//! per-driver helpers (`ib_unregister_driver`, `ib_device_get_by_netdev`) would hit foreign
//! devices. [`Registry`] is our own list instead.

use super::bindings as b;
use super::kmem::{KernelVirt, MappedPage};
use super::netdev::{NetDev, NetDevRef, NetdevEvent, NetdevHandler};
use super::objects::{
    AddressVector, CqInit, CqRef, KSendWr, MrArgs, MrKeys, Obj, QpInit, QpRef, QpSnapshot, SrqAttr,
    SrqRef, Wc,
};
use super::restrack::ResTable;
use super::udata::Udata;
use crate::logic::{qp_attr::ModifyRequest, stats};
use crate::uapi::Sge;
use core::{
    mem::{size_of, MaybeUninit},
    ptr::{self, addr_of_mut},
};
use kernel::{
    error::{from_result, to_result},
    new_mutex,
    prelude::*,
    rbtree::RBTree,
    sync::{Arc, Mutex},
    types::{Opaque, ScopeGuard},
};

/// Plain-data attribute structs the driver fills in (no pointers inside).
pub(crate) type DeviceAttr = b::ib_device_attr;
/// See [`DeviceAttr`].
pub(crate) type PortAttr = b::ib_port_attr;

/// Port facts that never change while the device exists.
pub(crate) struct PortImmutable {
    pub(crate) pkey_tbl_len: i32,
    pub(crate) gid_tbl_len: i32,
    pub(crate) core_cap_flags: u32,
    pub(crate) max_mad_size: u32,
}

/// Static identity of a device, set before registration.
pub(crate) struct DeviceIdentity {
    pub(crate) node_guid_be: [u8; 8],
    pub(crate) node_desc: &'static [u8],
    pub(crate) phys_port_cnt: u32,
    pub(crate) num_comp_vectors: u32,
    pub(crate) uverbs_abi_ver: u32,
}

/// An RDMA device driver: the callbacks of `struct ib_device_ops` rrxe implements.
///
/// Each method runs in process context, may sleep, and is never called after the device's
/// unregistration finished.
pub(crate) trait IbDriver: Sized + Send + Sync + 'static {
    /// Per-device driver state, embedded in the ib_core allocation.
    type Data: Send + Sync;
    /// Per-`ib_ucontext` driver state.
    type Context: Send + Sync;

    /// `query_device`; `udata` is the driver-private part of the request, if any.
    fn query_device(dev: &Device<Self>, attr: &mut DeviceAttr, udata: Option<&Udata>) -> Result;
    /// `query_port`; `attr` arrives zeroed.
    fn query_port(dev: &Device<Self>, port: u32, attr: &mut PortAttr) -> Result;
    /// `get_port_immutable`.
    fn port_immutable(dev: &Device<Self>, port: u32) -> Result<PortImmutable>;
    /// `query_pkey`: the P_Key at `index`.
    fn query_pkey(dev: &Device<Self>, port: u32, index: u16) -> Result<u16>;
    /// `alloc_ucontext`: a process opened the device.
    fn alloc_ucontext(dev: &Device<Self>, udata: &Udata) -> Result<Self::Context>;
    /// The bound netdev changed state (up/down, carrier, MTU). Called under RTNL.
    fn link_changed(dev: &Device<Self>);
    /// The port's hardware counters (`rdma statistic`), in `logic::stats` index order.
    fn hw_stats(dev: &Device<Self>) -> [u64; stats::COUNT];
    /// The device's `dcqcn` sysfs file: its text, written into `out` (a page); returns the
    /// length.
    fn dcqcn_show(dev: &Device<Self>, out: &mut [u8]) -> usize;
    /// A write to the device's `dcqcn` sysfs file (`input`: what the writer wrote).
    fn dcqcn_store(dev: &Device<Self>, input: &[u8]) -> Result;

    /// Protection domain data.
    type Pd: Send + Sync;
    /// Completion queue data.
    type Cq: Send + Sync;
    /// Queue pair data.
    type Qp: Send + Sync;
    /// Memory region data.
    type Mr: Send + Sync;
    /// Memory window data.
    type Mw: Send + Sync;
    /// Address handle data.
    type Ah: Send + Sync;
    /// Shared receive queue data.
    type Srq: Send + Sync;

    /// `alloc_pd`.
    fn alloc_pd(dev: &Device<Self>, udata: Option<&Udata>) -> Result<Self::Pd>;
    /// `dealloc_pd`: runs before the data is dropped.
    fn dealloc_pd(dev: &Device<Self>, pd: &Self::Pd);
    /// `create_cq`: returns the data and the number of CQEs granted.
    fn create_cq(
        dev: &Device<Self>,
        init: &CqInit,
        udata: Option<&Udata>,
        cq: CqRef,
    ) -> Result<(Self::Cq, u32)>;
    /// `destroy_cq`: runs before the data is dropped.
    fn destroy_cq(dev: &Device<Self>, cq: &Self::Cq);
    /// `resize_cq`: returns the number of CQEs granted.
    fn resize_cq(dev: &Device<Self>, cq: &Self::Cq, cqe: u32, udata: Option<&Udata>)
        -> Result<u32>;
    /// `create_qp`: may lower `init.cap` to what is granted; returns the data and the QPN.
    fn create_qp(
        dev: &Device<Self>,
        pd: &Self::Pd,
        init: &mut QpInit,
        udata: Option<&Udata>,
        links: QpLinks<'_, Self>,
    ) -> Result<(Self::Qp, u32)>;
    /// `modify_qp`: `av` is present when the mask has `IB_QP_AV`.
    fn modify_qp(
        dev: &Device<Self>,
        qp: &Self::Qp,
        req: &ModifyRequest,
        av: Option<&AddressVector>,
        udata: Option<&Udata>,
    ) -> Result;
    /// `query_qp`.
    fn query_qp(dev: &Device<Self>, qp: &Self::Qp) -> Result<QpSnapshot>;
    /// `destroy_qp` (any state, process context): the driver gets its data back and drops it.
    fn destroy_qp(dev: &Device<Self>, qp: Self::Qp);
    /// `reg_user_mr`. Publishing the MR (making it reachable by key) must be its last fallible
    /// step: once it returns `Ok`, nothing fails any more.
    fn reg_user_mr(
        dev: &Device<Self>,
        pd: &Self::Pd,
        args: &MrArgs,
        udata: Option<&Udata>,
    ) -> Result<(Self::Mr, MrKeys)>;
    /// `advise_mr` (`ibv_advise_mr`) on `sges` (lkeys of MRs in `pd`, with their ranges):
    /// `advice` is an `IB_UVERBS_ADVISE_MR_ADVICE_*`, `flags` `IB_UVERBS_ADVISE_MR_FLAG_*`.
    /// Process context.
    fn advise_mr(
        dev: &Device<Self>,
        pd: &Self::Pd,
        advice: u32,
        flags: u32,
        sges: &[b::ib_sge],
    ) -> Result;
    /// `dereg_mr`: runs before the data is dropped. An error leaves the MR registered (and
    /// its data in place): ib_core reports it to the caller, and a context's cleanup tries
    /// again after destroying the other objects.
    fn dereg_mr(dev: &Device<Self>, mr: &Self::Mr) -> Result;
    /// `alloc_mw` (uverbs only: ib_core offers kernel consumers no memory windows) of type
    /// `ty` (`IB_MW_TYPE_1` or `_2`, checked by ib_core) in `pd`: the data and the rkey.
    fn alloc_mw(
        dev: &Device<Self>,
        pd: &Self::Pd,
        ty: u32,
        udata: Option<&Udata>,
    ) -> Result<(Self::Mw, u32)>;
    /// `dealloc_mw`: runs before the data is dropped; it cannot fail.
    fn dealloc_mw(dev: &Device<Self>, mw: &Self::Mw);
    /// `create_ah` (user and kernel callers). It must not sleep unless `sleepable`
    /// (`RDMA_CREATE_AH_SLEEPABLE`; ib_cm creates AHs under `spin_lock_irqsave`).
    fn create_ah(
        dev: &Device<Self>,
        pd: &Self::Pd,
        av: &AddressVector,
        udata: Option<&Udata>,
        sleepable: bool,
    ) -> Result<Self::Ah>;
    /// `destroy_ah`: runs before the data is dropped. It must not sleep unless `sleepable`
    /// (`RDMA_DESTROY_AH_SLEEPABLE`; kernel callers may destroy AHs in atomic context).
    fn destroy_ah(dev: &Device<Self>, ah: &Self::Ah, sleepable: bool);
    /// `attach_mcast`: ib_core has checked that `qp` is UD and `gid` a multicast address, and
    /// counts the attachment on the QP (process context).
    fn attach_mcast(dev: &Device<Self>, qp: &Self::Qp, gid: [u8; 16]) -> Result;
    /// `detach_mcast`: ends one attachment made by `attach_mcast` (process context).
    fn detach_mcast(dev: &Device<Self>, qp: &Self::Qp, gid: [u8; 16]) -> Result;
    /// `create_srq`: may lower `attr` to what is granted.
    fn create_srq(
        dev: &Device<Self>,
        pd: &Self::Pd,
        attr: &mut SrqAttr,
        udata: Option<&Udata>,
        srq: SrqRef,
    ) -> Result<Self::Srq>;
    /// `modify_srq` with the `IB_SRQ_*` mask.
    fn modify_srq(
        dev: &Device<Self>,
        srq: &Self::Srq,
        attr: &SrqAttr,
        mask: u32,
        udata: Option<&Udata>,
    ) -> Result;
    /// `query_srq`.
    fn query_srq(dev: &Device<Self>, srq: &Self::Srq) -> Result<SrqAttr>;
    /// `destroy_srq`: runs before the data is dropped.
    fn destroy_srq(dev: &Device<Self>, srq: &Self::Srq);
    /// A user QP's send doorbell.
    fn post_send(dev: &Device<Self>, qp: &Self::Qp) -> Result;
    /// `req_notify_cq`: arms the CQ; returns whether completions are already waiting.
    fn req_notify_cq(dev: &Device<Self>, cq: &Self::Cq, solicited_only: bool) -> Result<bool>;

    /// `get_dma_mr`: an MR over the kernel's memory (kernel consumers only, see `kmem`): `mem`
    /// is the consumer's capability, which the MR keeps.
    fn get_dma_mr(
        dev: &Device<Self>,
        pd: &Self::Pd,
        mem: KernelVirt,
        access: u32,
    ) -> Result<(Self::Mr, MrKeys)>;
    /// `alloc_mr(IB_MR_TYPE_MEM_REG)`: a fast-registration MR for `max_num_sg` pages of a
    /// kernel consumer (its memory comes later, as the [`MappedPage`]s of `map_mr_sg`).
    fn alloc_mr(dev: &Device<Self>, pd: &Self::Pd, max_num_sg: u32) -> Result<(Self::Mr, MrKeys)>;
    /// `map_mr_sg` begins on a fast-registration MR, with pages of `page_size` bytes.
    fn mr_map_begin(dev: &Device<Self>, mr: &Self::Mr, page_size: u32) -> Result;
    /// One page of the `map_mr_sg` under way: the capability to reach it.
    fn mr_map_page(dev: &Device<Self>, mr: &Self::Mr, page: MappedPage) -> Result;
    /// Queues one send WR of a kernel consumer (any context but hard IRQ); `ENOMEM` when the
    /// SQ is full.
    fn post_send_kernel(dev: &Device<Self>, qp: &Self::Qp, wr: &KSendWr<'_, Self::Ah>) -> Result;
    /// Processes what a kernel consumer's `post_send` queued (must not sleep).
    fn kernel_doorbell(dev: &Device<Self>, qp: &Self::Qp);
    /// Queues one receive WR of a kernel consumer; `ENOMEM` when the RQ is full.
    fn post_recv_kernel(dev: &Device<Self>, qp: &Self::Qp, wr_id: u64, sges: &[Sge]) -> Result;
    /// Queues one receive WR of a kernel consumer on an SRQ.
    fn post_srq_recv_kernel(
        dev: &Device<Self>,
        srq: &Self::Srq,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result;
    /// `poll_cq` of a kernel CQ: fills up to `out.len()` completions, returns how many.
    fn poll_cq(dev: &Device<Self>, cq: &Self::Cq, out: &mut [Wc]) -> usize;

    /// Driver details of a QP for `rdma resource show qp -dd`.
    fn res_qp(dev: &Device<Self>, qp: &Self::Qp, t: &mut ResTable) -> Result;
    /// Driver details of a CQ.
    fn res_cq(dev: &Device<Self>, cq: &Self::Cq, t: &mut ResTable) -> Result;
    /// Driver details of an MR.
    fn res_mr(dev: &Device<Self>, mr: &Self::Mr, t: &mut ResTable) -> Result;
}

/// An `ib_device` owned by ib_core with driver `T`'s data embedded.
///
/// # Invariants
///
/// - `ibdev` is at offset 0 of a block allocated by `_ib_alloc_device(size_of::<Self>())`.
/// - All other fields are initialised before `ops.dealloc_driver` is installed, and are
///   dropped exactly once, by `dealloc_driver`.
#[repr(C)]
pub(crate) struct Device<T: IbDriver> {
    ibdev: Opaque<b::ib_device>,
    netdev: NetDevRef,
    registry: Arc<Registry<T>>,
    data: T::Data,
}

// SAFETY: ib_core calls into a device from any thread; the Rust fields are `Send + Sync`.
unsafe impl<T: IbDriver> Send for Device<T> {}
// SAFETY: as above; shared access goes through `&self` methods that are thread-safe.
unsafe impl<T: IbDriver> Sync for Device<T> {}

impl<T: IbDriver> Device<T> {
    /// # Safety
    ///
    /// `ptr` must be an `ib_device` created by [`Device::<T>::register`] whose `dealloc_driver`
    /// has not run yet, and it must stay that way for `'a`.
    pub(super) unsafe fn from_raw<'a>(ptr: *mut b::ib_device) -> &'a Self {
        // SAFETY: by the type invariant `ibdev` is at offset 0; the caller guarantees validity.
        unsafe { &*ptr.cast::<Self>() }
    }

    pub(super) fn as_raw(&self) -> *mut b::ib_device {
        self.ibdev.get()
    }

    /// The driver's per-device data.
    pub(crate) fn data(&self) -> &T::Data {
        &self.data
    }

    /// The netdev this device is bound to (a reference is held while the device exists).
    pub(crate) fn netdev(&self) -> &NetDev {
        &self.netdev
    }

    /// The device name as registered (`rrxe0`, ...).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `ib_device.name` is a NUL-terminated array that ib_core keeps in sync with
        // the device name (it is only rewritten, under RTNL-free locking, by a rename, which
        // always leaves a valid string).
        unsafe { CStr::from_char_ptr((*self.as_raw()).name.as_ptr()) }
    }

    /// Link speed and width for `port`, from the netdev's ethtool settings (takes RTNL).
    pub(crate) fn eth_speed(&self, port: u32) -> Result<(u16, u8)> {
        let (mut speed, mut width) = (0u16, 0u8);
        // SAFETY: the device is alive; the out-pointers are valid locals.
        to_result(unsafe { b::ib_get_eth_speed(self.as_raw(), port, &mut speed, &mut width) })?;
        Ok((speed, width))
    }

    /// Reports a port state change to ib_core's event handlers.
    pub(crate) fn dispatch_port_event(&self, port: u32, active: bool) {
        let mut ev = b::ib_event {
            device: self.as_raw(),
            ..Default::default()
        };
        // SAFETY: `port_num` is the union member `ib_dispatch_event` reads for port events.
        unsafe { *ev.element.port_num.as_mut() = port };
        ev.event = if active {
            b::ib_event_type_IB_EVENT_PORT_ACTIVE
        } else {
            b::ib_event_type_IB_EVENT_PORT_ERR
        };
        // SAFETY: `ev` is a fully initialised event for this live device.
        unsafe { b::ib_dispatch_event(&ev) };
    }

    /// Allocates, registers and publishes a device named `name` on `netdev`.
    ///
    /// Fails with `EEXIST` when `netdev` already carries an RDMA device that is not iWARP
    /// (ours, rdma_rxe's, a RoCE HCA's). An iWARP device (siw) runs over TCP and leaves RoCEv2
    /// alone, so the two may share a netdev, as rdma_rxe and siw do. Once this returns `Ok`,
    /// the device belongs to ib_core and the registry.
    pub(crate) fn register(
        registry: &Arc<Registry<T>>,
        name: &CStr,
        netdev: &NetDev,
        id: &DeviceIdentity,
        data: impl PinInit<T::Data, Error>,
    ) -> Result {
        // Refuse a netdev that another RoCE or IB device already uses (the same UDP port, or
        // the same wire, cannot serve two); an iWARP device may stay beside us. The lookup
        // by any driver finds one device of the netdev, which may be an iWARP one hiding an
        // rdma_rxe, so rdma_rxe is also asked for by its own id.
        for id in [
            b::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
            b::rdma_driver_id_RDMA_DRIVER_RXE,
        ] {
            // SAFETY: `netdev` is alive; a returned device carries a reference dropped below.
            let other = unsafe { b::ib_device_get_by_netdev(netdev.as_raw(), id) };
            if other.is_null() {
                continue;
            }
            // SAFETY: `other` is a registered device we hold a reference on; `node_type` is
            // set before registration and never changes.
            let iwarp = u32::from(unsafe { (*other).node_type }) == b::RDMA_NODE_RNIC;
            // SAFETY: `other` was returned with a reference held for us.
            unsafe { b::ib_device_put(other) };
            if !iwarp {
                return Err(EEXIST);
            }
        }

        // SAFETY: `_ib_alloc_device` accepts any size >= sizeof(struct ib_device).
        let raw = unsafe { b::_ib_alloc_device(size_of::<Self>()) };
        if raw.is_null() {
            return Err(ENOMEM);
        }
        let this = raw.cast::<Self>();

        // SAFETY: `data` is a field of the fresh, zeroed, never-moving allocation, so it is
        // valid for a pinned in-place initialisation.
        if let Err(e) = unsafe { data.__pinned_init(addr_of_mut!((*this).data)) } {
            // SAFETY: no ops are installed yet, so this only frees ib_core's own state.
            unsafe { b::ib_dealloc_device(raw) };
            return Err(e);
        }
        // SAFETY: the fields are valid for writes and not initialised yet.
        unsafe {
            addr_of_mut!((*this).netdev).write(NetDevRef::new(netdev));
            addr_of_mut!((*this).registry).write(registry.clone());
        }
        // INVARIANT: every Rust field is initialised; `dealloc_driver` is installed next.
        // The uverbs ABI version is the device's; ib_core takes a non-zero one from any table.
        let abi = b::ib_device_ops {
            uverbs_abi_ver: id.uverbs_abi_ver,
            ..Default::default()
        };
        // SAFETY: `raw` is a live, unregistered device that we own exclusively until
        // registration; `ib_set_device_ops` copies the tables' entries.
        unsafe {
            b::ib_set_device_ops(raw, &registry.ops.0);
            b::ib_set_device_ops(raw, &abi);
            (*raw).node_type = b::RDMA_NODE_IB_CA as u8;
            // Commands ib_core does not enable by default: the send doorbell and CQ arming.
            (*raw).uverbs_cmd_mask |= (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND)
                | (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ);
            // The netdev's own parent (a NIC's PCI device), as siw does: tools and pyverbs find a
            // device's netdev through /sys/class/infiniband/DEV/device/net. A virtual netdev
            // (veth, bridge) has none, and the device then has none either. `device_add`
            // takes a reference on it. DMA is unaffected (`dma_device` stays NULL: virt-DMA).
            (*raw).__bindgen_anon_1.dev.as_mut().parent = (*netdev.as_raw()).dev.parent;
            (*raw).phys_port_cnt = id.phys_port_cnt;
            (*raw).num_comp_vectors = id.num_comp_vectors as i32;
            (*raw).node_guid = u64::from_ne_bytes(id.node_guid_be);
            let desc = &mut (*raw).node_desc;
            let room = desc.len() - 1;
            for (d, s) in desc.iter_mut().zip(id.node_desc.iter().take(room)) {
                *d = *s as _;
            }
        }
        // From here on a failure hands the device back to ib_core, which calls
        // `dealloc_driver` and so drops the fields written above.
        // SAFETY: the device is not registered, so it is ours to free.
        let dealloc = ScopeGuard::new(|| unsafe { b::ib_dealloc_device(raw) });

        registry.insert(this as usize, netdev.key())?;
        // SAFETY: `raw` and `netdev` are alive; port 1 exists (`phys_port_cnt` >= 1).
        to_result(unsafe { b::ib_device_set_netdev(raw, netdev.as_raw(), 1) })?;
        // SAFETY: the device is fully set up; a NULL DMA device means "no DMA" (software).
        to_result(unsafe { b::ib_register_device(raw, name.as_char_ptr(), ptr::null_mut()) })?;
        dealloc.dismiss();
        // Registered: from now on only the registry may reach the device.
        registry.mark_registered(this as usize, netdev);
        Ok(())
    }

    /// # Safety
    ///
    /// Called once by ib_core, for a device created by `register`, before freeing it.
    pub(super) unsafe extern "C" fn dealloc_driver_callback(ibdev: *mut b::ib_device) {
        let this = ibdev.cast::<Self>();
        // SAFETY: the fields are initialised (type invariant) and this is the only drop.
        unsafe {
            (*this).registry.remove(this as usize);
            ptr::drop_in_place(addr_of_mut!((*this).data));
            ptr::drop_in_place(addr_of_mut!((*this).netdev));
            ptr::drop_in_place(addr_of_mut!((*this).registry));
        }
    }

    /// # Safety
    ///
    /// Called by ib_core with a live device and valid pointers.
    pub(super) unsafe extern "C" fn query_device_callback(
        ibdev: *mut b::ib_device,
        attr: *mut b::ib_device_attr,
        udata: *mut b::ib_udata,
    ) -> i32 {
        from_result(|| {
            // SAFETY: ib_core passes a live device, a writable attr and an optional udata.
            let (dev, attr, udata) =
                unsafe { (Self::from_raw(ibdev), &mut *attr, Udata::from_raw(udata)) };
            T::query_device(dev, attr, udata.as_ref())?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core with a live device and a writable attr.
    pub(super) unsafe extern "C" fn query_port_callback(
        ibdev: *mut b::ib_device,
        port: u32,
        attr: *mut b::ib_port_attr,
    ) -> i32 {
        from_result(|| {
            // SAFETY: as documented above.
            let (dev, attr) = unsafe { (Self::from_raw(ibdev), &mut *attr) };
            T::query_port(dev, port, attr)?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by ib_core with a live device and a writable `immutable`.
    pub(super) unsafe extern "C" fn get_port_immutable_callback(
        ibdev: *mut b::ib_device,
        port: u32,
        immutable: *mut b::ib_port_immutable,
    ) -> i32 {
        from_result(|| {
            // SAFETY: as documented above.
            let (dev, out) = unsafe { (Self::from_raw(ibdev), &mut *immutable) };
            let imm = T::port_immutable(dev, port)?;
            out.pkey_tbl_len = imm.pkey_tbl_len;
            out.gid_tbl_len = imm.gid_tbl_len;
            out.core_cap_flags = imm.core_cap_flags;
            out.max_mad_size = imm.max_mad_size;
            Ok(0)
        })
    }

    pub(super) extern "C" fn get_link_layer_callback(
        _ibdev: *mut b::ib_device,
        _port: u32,
    ) -> b::rdma_link_layer {
        b::rdma_link_layer_IB_LINK_LAYER_ETHERNET
    }

    /// # Safety
    ///
    /// Called by ib_core with a live device and a writable `pkey`.
    pub(super) unsafe extern "C" fn query_pkey_callback(
        ibdev: *mut b::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> i32 {
        from_result(|| {
            // SAFETY: as documented above.
            let dev = unsafe { Self::from_raw(ibdev) };
            let value = T::query_pkey(dev, port, index)?;
            // SAFETY: as documented above.
            unsafe { pkey.write(value) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by uverbs with a zeroed `Ucontext<T>` block (`size_ib_ucontext`) whose `device`
    /// is set, and the command's udata.
    pub(super) unsafe extern "C" fn alloc_ucontext_callback(
        uctx: *mut b::ib_ucontext,
        udata: *mut b::ib_udata,
    ) -> i32 {
        from_result(|| {
            // SAFETY: as documented above.
            let dev = unsafe { Self::from_raw((*uctx).device) };
            // SAFETY: as documented above.
            let udata = unsafe { Udata::from_raw(udata) }.ok_or(EINVAL)?;
            let ctx = T::alloc_ucontext(dev, &udata)?;
            // SAFETY: `uctx` is the `ibuc` field at offset 0 of a `Ucontext<T>`; `ctx` is
            // uninitialised and written once here.
            unsafe { (*uctx.cast::<Ucontext<T>>()).ctx.write(ctx) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// Called by uverbs once, for a context whose `alloc_ucontext` succeeded.
    pub(super) unsafe extern "C" fn dealloc_ucontext_callback(uctx: *mut b::ib_ucontext) {
        // SAFETY: `ctx` was initialised by `alloc_ucontext_callback` and is dropped only here.
        unsafe { (*uctx.cast::<Ucontext<T>>()).ctx.assume_init_drop() };
    }

    /// Device removal with the context still open: rrxe keeps no hardware state behind a
    /// context, and uverbs destroys the context's objects and mappings itself, so there is
    /// nothing to detach.
    pub(super) extern "C" fn disassociate_ucontext_callback(_uctx: *mut b::ib_ucontext) {}

    /// # Safety
    ///
    /// Called by uverbs with a live context and the caller's new VMA.
    pub(super) unsafe extern "C" fn mmap_callback(
        uctx: *mut b::ib_ucontext,
        vma: *mut b::vm_area_struct,
    ) -> i32 {
        // Only rings published with `SharedRing` can be mapped; any other offset is refused.
        // SAFETY: per the contract above.
        from_result(|| unsafe { super::ring::mmap(uctx, vma) }.map(|()| 0))
    }
}

/// The counter descriptors `rdma statistic` shows, built from [`stats::NAMES`].
struct StatDescs([b::rdma_stat_desc; stats::COUNT]);

// SAFETY: immutable after compilation; the name pointers are `'static` string literals.
unsafe impl Sync for StatDescs {}

static STAT_DESCS: StatDescs = StatDescs({
    let mut d = [b::rdma_stat_desc {
        name: ptr::null(),
        flags: 0,
        priv_: ptr::null(),
    }; stats::COUNT];
    let mut i = 0;
    while i < stats::COUNT {
        // Each name carries its NUL (checked by the host tests of `logic::stats`).
        d[i].name = stats::NAMES[i].as_ptr().cast();
        i += 1;
    }
    d
});

impl<T: IbDriver> Device<T> {
    /// # Safety
    ///
    /// Called by ib_core for a live device, once per port, in process context.
    pub(super) unsafe extern "C" fn alloc_hw_port_stats_callback(
        _ibdev: *mut b::ib_device,
        _port: u32,
    ) -> *mut b::rdma_hw_stats {
        // SAFETY: the descriptors are static and immutable, as ib_core requires (it keeps the
        // pointer in the returned struct, which it frees itself).
        unsafe {
            b::rdma_alloc_hw_stats_struct(
                STAT_DESCS.0.as_ptr(),
                stats::COUNT as i32,
                b::RDMA_HW_STATS_DEFAULT_LIFESPAN as usize,
            )
        }
    }

    /// # Safety
    ///
    /// Called by ib_core for a live device with a `stats` struct from
    /// `alloc_hw_port_stats_callback` (its lock held), for port `port` (0 for device stats,
    /// which we do not provide).
    pub(super) unsafe extern "C" fn get_hw_stats_callback(
        ibdev: *mut b::ib_device,
        hw: *mut b::rdma_hw_stats,
        port: u32,
        _index: i32,
    ) -> i32 {
        if port == 0 || hw.is_null() {
            return EINVAL.to_errno();
        }
        // SAFETY: ib_core passes a live device of ours.
        let values = T::hw_stats(unsafe { Self::from_raw(ibdev) });
        // SAFETY: `hw` is a live struct with `num_counters` values after it; we write at most
        // that many.
        unsafe {
            let n = usize::try_from((*hw).num_counters)
                .unwrap_or(0)
                .min(stats::COUNT);
            let out = (*hw).value.as_mut_slice(n);
            // Element by element: `copy_from_slice`'s length-mismatch panic is a noreturn
            // call that 6.12's objtool does not know ("falls through to next function").
            for (o, v) in out.iter_mut().zip(values.iter()) {
                *o = *v;
            }
            n as i32
        }
    }
}

/// A user context: `ib_ucontext` (allocated by uverbs, `size_ib_ucontext` bytes) with the
/// driver's context after it.
#[repr(C)]
pub(super) struct Ucontext<T: IbDriver> {
    ibuc: Opaque<b::ib_ucontext>,
    ctx: MaybeUninit<T::Context>,
}

/// What the registry knows of one device.
struct Entry {
    netdev: usize,
    registered: bool,
}

/// The list of devices of driver `T` (see the module documentation).
///
/// # Invariants
///
/// A key in `devices` is the address of a `Device<T>` whose `dealloc_driver` has not finished:
/// the entry is removed by `dealloc_driver`, under the lock, before the memory is released.
#[pin_data]
pub(crate) struct Registry<T: IbDriver> {
    #[pin]
    devices: Mutex<RBTree<usize, Entry>>,
    ops: DeviceOps,
    _driver: core::marker::PhantomData<fn() -> T>,
}

/// The `ib_device_ops` table a [`Registry`] installs in each of its devices (built by
/// [`super::driver::registry`]).
pub(super) struct DeviceOps(pub(super) b::ib_device_ops);

// SAFETY: the table is never written after it is built; it holds function pointers, the
// module pointer and a pointer to a static attribute group, all valid on any thread for the
// module's lifetime.
unsafe impl Send for DeviceOps {}
// SAFETY: as above: shared access only reads (copies) the table.
unsafe impl Sync for DeviceOps {}

impl<T: IbDriver> Registry<T> {
    /// An empty registry whose devices get `ops`.
    pub(super) fn new(ops: DeviceOps) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                devices <- new_mutex!(RBTree::new(), "rrxe:devices"),
                ops,
                _driver: core::marker::PhantomData,
            }),
            GFP_KERNEL,
        )
    }

    fn insert(&self, dev: usize, netdev: usize) -> Result {
        let mut devices = self.devices.lock();
        if devices.values().any(|e| e.netdev == netdev) {
            return Err(EEXIST);
        }
        devices.try_create_and_insert(
            dev,
            Entry {
                netdev,
                registered: false,
            },
            GFP_KERNEL,
        )?;
        Ok(())
    }

    fn mark_registered(&self, dev: usize, netdev: &NetDev) {
        let mut devices = self.devices.lock();
        if let Some(e) = devices.get_mut(&dev) {
            e.registered = true;
            // The netdev may have started unregistering while we registered; its notifier
            // skipped us then, so catch up now.
            let raw = dev as *mut b::ib_device;
            // `ib_unregister_device_queued` warns on a device whose unregistration has begun;
            // such a device needs no catching up.
            // SAFETY: by the type invariant `dev` is alive (its entry is present, lock held).
            if !netdev.is_registered() && unsafe { b::rrxe_ib_device_try_get(raw) } {
                // SAFETY: alive as above, and registered: we hold its registration lock, which
                // the second call releases.
                unsafe {
                    b::ib_unregister_device_queued(raw);
                    b::ib_device_put(raw);
                }
            }
        }
    }

    fn remove(&self, dev: usize) {
        self.devices.lock().remove(&dev);
    }

    /// Unregisters (and so deallocates) every device, waiting for unregistrations already in
    /// progress elsewhere. Used at module exit, after new links can no longer be added.
    pub(crate) fn unregister_all(&self) {
        loop {
            let raw = {
                let devices = self.devices.lock();
                let Some((&dev, _)) = devices.iter().next() else {
                    return;
                };
                let raw = dev as *mut b::ib_device;
                // SAFETY: by the type invariant `raw` is alive while its entry is present and
                // the lock is held; the device reference keeps the memory alive after that.
                unsafe { b::get_device((*raw).__bindgen_anon_1.dev.as_mut()) };
                raw
            };
            // SAFETY: we hold a device reference. `ib_unregister_device` serialises with any
            // concurrent unregistration and, for a device already unregistered, does nothing;
            // either way `dealloc_driver` has removed the entry when it returns.
            unsafe {
                b::ib_unregister_device(raw);
                b::put_device((*raw).__bindgen_anon_1.dev.as_mut());
            }
        }
    }
}

impl<T: IbDriver> NetdevHandler for Arc<Registry<T>> {
    fn event(&self, netdev: &NetDev, event: NetdevEvent) {
        let devices = self.devices.lock();
        for (&dev, entry) in devices.iter() {
            if entry.netdev != netdev.key() || !entry.registered {
                continue;
            }
            let raw = dev as *mut b::ib_device;
            // Only a device that is still registered (as rxe does with `ib_device_get_by_netdev`):
            // one whose unregistration has begun (`rdma link delete`, an earlier UNREGISTER, module
            // exit) gets no port events and is not queued for unregistration a second time. The
            // registration lock (`ib_device_try_get`) also keeps it registered while we act.
            // SAFETY: by the type invariant the device is alive while the lock is held.
            if !unsafe { b::rrxe_ib_device_try_get(raw) } {
                continue;
            }
            match event {
                // SAFETY: by the type invariant the device is alive while the lock is held, and
                // we hold its registration lock. ib_core unregisters (and deallocates) it from its
                // own workqueue, since RTNL is held here.
                NetdevEvent::Unregister => unsafe { b::ib_unregister_device_queued(raw) },
                // SAFETY: as above; the device is live, registered and fully initialised.
                NetdevEvent::LinkChange => T::link_changed(unsafe { Device::<T>::from_raw(raw) }),
            }
            // SAFETY: releases the registration lock taken above.
            unsafe { b::ib_device_put(raw) };
        }
    }
}

/// # Safety
///
/// `ibdev` must be a live device of driver `T`.
pub(super) unsafe fn dev<'a, T: IbDriver>(ibdev: *mut b::ib_device) -> &'a Device<T> {
    // SAFETY: per the contract above.
    unsafe { Device::<T>::from_raw(ibdev) }
}

/// The objects a new QP is attached to.
pub(crate) struct QpLinks<'a, T: IbDriver> {
    pub(crate) send_cq: Option<&'a T::Cq>,
    pub(crate) recv_cq: Option<&'a T::Cq>,
    pub(crate) srq: Option<&'a T::Srq>,
    pub(crate) this: QpRef,
}

/// The allocations of the driver's objects: the ib_core struct, then the driver's data.
pub(super) type PdObj<T> = Obj<b::ib_pd, <T as IbDriver>::Pd>;
pub(super) type CqObj<T> = Obj<b::ib_cq, <T as IbDriver>::Cq>;
pub(super) type QpObj<T> = Obj<b::ib_qp, <T as IbDriver>::Qp>;
pub(super) type MrObj<T> = Obj<b::ib_mr, <T as IbDriver>::Mr>;
pub(super) type MwObj<T> = Obj<b::ib_mw, <T as IbDriver>::Mw>;
pub(super) type AhObj<T> = Obj<b::ib_ah, <T as IbDriver>::Ah>;
pub(super) type SrqObj<T> = Obj<b::ib_srq, <T as IbDriver>::Srq>;
