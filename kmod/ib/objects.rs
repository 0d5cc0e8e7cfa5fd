// SPDX-License-Identifier: GPL-2.0-only
//! Verbs objects: PD, CQ, QP, MR, MW and AH, and their attribute views (the trampolines are in
//! [`super::ops`]).
//!
//! ib_core allocates PDs, CQs, QPs, MWs and AHs itself (`size_ib_*` in the ops): an [`Obj`] is that
//! allocation, the ib_core struct at offset 0 (the `INIT_RDMA_OBJ_SIZE` rule) and the driver's
//! data after it. The data is written by the create trampoline only after the driver's create
//! succeeded, and dropped by the destroy trampoline, which ib_core calls exactly once for a
//! created object. MRs are allocated by the driver, so an MR [`Obj`] lives in a `KBox`.

use super::bindings as b;
use super::kmem::KernelConsumer;
use super::udata::Udata;
use crate::logic::qp_attr::QpCap;
use crate::uapi::{self, SendWqe, Sge};
use core::{mem::MaybeUninit, ptr};
use kernel::types::Opaque;

/// Who created an object, as the create trampoline saw it: a user context (ib_core passed
/// udata) or a kernel consumer (ib_core's kernel API, no udata). `User` is the zero value, so a
/// block that ib_core zeroed reads as untrusted until the create trampoline says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Owner {
    /// A uverbs command created it: everything it names comes from user space.
    User = 0,
    /// A kernel consumer created it (ib_mad, ib_cm, the storage ULPs).
    Kernel = 1,
}

impl Owner {
    /// The owner of an object created with `udata` (ib_core passes udata exactly for uverbs).
    pub(super) fn of(udata: &Option<Udata>) -> Self {
        if udata.is_some() {
            Owner::User
        } else {
            Owner::Kernel
        }
    }
}

/// An ib_core object with driver data `D` after it.
#[repr(C)]
pub(crate) struct Obj<C, D> {
    pub(super) ib: Opaque<C>,
    pub(super) owner: Owner,
    pub(super) data: MaybeUninit<D>,
}

impl<C, D> Obj<C, D> {
    /// # Safety
    ///
    /// `ptr` must be the ib_core struct at offset 0 of a live `Obj<C, D>` whose data was
    /// initialised and not yet dropped, for `'a`.
    pub(crate) unsafe fn data<'a>(ptr: *mut C) -> &'a D {
        // SAFETY: per the contract above.
        unsafe { (*ptr.cast::<Self>()).data.assume_init_ref() }
    }

    /// # Safety
    ///
    /// `ptr` must be the ib_core struct at offset 0 of a live `Obj<C, D>` with uninitialised
    /// data.
    pub(super) unsafe fn init(ptr: *mut C, d: D, owner: Owner) {
        // SAFETY: per the contract above.
        unsafe {
            let o = ptr.cast::<Self>();
            (*o).data.write(d);
            ptr::addr_of_mut!((*o).owner).write(owner);
        }
    }

    /// The proof that a kernel consumer created the object, or `None` for a user object.
    ///
    /// # Safety
    ///
    /// `ptr` must be the ib_core struct at offset 0 of a live `Obj<C, D>` that its create
    /// trampoline initialised.
    pub(super) unsafe fn kernel_consumer(ptr: *mut C) -> Option<KernelConsumer> {
        // SAFETY: per the contract above; `owner` was written by `init` (or at construction).
        match unsafe { (*ptr.cast::<Self>()).owner } {
            // SAFETY: the create trampoline recorded `Kernel` only for an object ib_core
            // created without udata, i.e. for a kernel consumer.
            Owner::Kernel => Some(unsafe { KernelConsumer::assume() }),
            Owner::User => None,
        }
    }

    /// Moves the data out (the object is left with uninitialised data).
    ///
    /// # Safety
    ///
    /// `ptr` must be the ib_core struct at offset 0 of a live `Obj<C, D>` with initialised data
    /// that nothing uses any more; the data is not used or dropped through `ptr` afterwards.
    pub(super) unsafe fn take_data(ptr: *mut C) -> D {
        // SAFETY: per the contract above.
        unsafe { (*ptr.cast::<Self>()).data.assume_init_read() }
    }

    /// # Safety
    ///
    /// `ptr` must be the ib_core struct at offset 0 of a live `Obj<C, D>` with initialised data
    /// that nothing uses any more.
    pub(super) unsafe fn drop_data(ptr: *mut C) {
        // SAFETY: per the contract above.
        unsafe { (*ptr.cast::<Self>()).data.assume_init_drop() };
    }
}

/// `create_cq` parameters.
pub(crate) struct CqInit {
    pub(crate) cqe: u32,
    pub(crate) comp_vector: u32,
    pub(crate) flags: u32,
}

/// `create_qp` parameters, and the caps the driver grants.
pub(crate) struct QpInit {
    pub(crate) qp_type: u32,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
    pub(crate) has_srq: bool,
    pub(crate) create_flags: u32,
    pub(crate) has_xrcd: bool,
    pub(crate) has_rwq_ind_tbl: bool,
    pub(crate) source_qpn: u32,
}

/// An address vector as the driver sees it: the GRH fields, the resolved destination MAC and
/// what ib_core knows of the source GID.
#[derive(Clone, Copy, Default)]
pub(crate) struct AddressVector {
    pub(crate) port_num: u32,
    pub(crate) sl: u8,
    pub(crate) static_rate: u8,
    pub(crate) has_grh: bool,
    pub(crate) is_roce: bool,
    pub(crate) dgid: [u8; 16],
    pub(crate) flow_label: u32,
    pub(crate) sgid_index: u8,
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
    pub(crate) dmac: [u8; 6],
    /// The source GID entry, when ib_core attached one.
    pub(crate) sgid: Option<SgidInfo>,
}

/// What the GID table says about the source GID.
#[derive(Clone, Copy, Default)]
pub(crate) struct SgidInfo {
    pub(crate) gid: [u8; 16],
    pub(crate) is_roce_v2: bool,
    /// The GID belongs to the netdev this device is bound to.
    pub(crate) on_our_netdev: bool,
}

impl AddressVector {
    /// # Safety
    ///
    /// `ah` must be a valid `rdma_ah_attr` whose `grh.sgid_attr` is NULL or a live GID entry;
    /// `netdev` is the device's netdev.
    pub(super) unsafe fn from_raw(netdev: *mut b::net_device, ah: *const b::rdma_ah_attr) -> Self {
        // SAFETY: per the contract above.
        let ah = unsafe { &*ah };
        let grh = &ah.grh;
        let sgid = if grh.sgid_attr.is_null() {
            None
        } else {
            // SAFETY: non-null, so a live GID entry (contract); reading `ndev` needs RCU,
            // which the helper takes.
            unsafe {
                let attr = &*grh.sgid_attr;
                Some(SgidInfo {
                    gid: *attr.gid.raw.as_ref(),
                    is_roce_v2: attr.gid_type == b::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP,
                    on_our_netdev: b::rrxe_gid_attr_ndev_is(grh.sgid_attr, netdev),
                })
            }
        };
        AddressVector {
            port_num: ah.port_num,
            sl: ah.sl,
            static_rate: ah.static_rate,
            has_grh: u32::from(ah.ah_flags) & b::ib_ah_flags_IB_AH_GRH != 0,
            is_roce: ah.type_ == b::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE,
            // SAFETY: every member of `union ib_gid` is plain bytes.
            dgid: unsafe { *grh.dgid.raw.as_ref() },
            flow_label: grh.flow_label,
            sgid_index: grh.sgid_index,
            hop_limit: grh.hop_limit,
            traffic_class: grh.traffic_class,
            // SAFETY: for a RoCE address the `roce` member is the active one; for others the
            // bytes are still initialised (the attr is zeroed before use by ib_core).
            dmac: unsafe { ah.__bindgen_anon_1.roce.as_ref().dmac },
            sgid,
        }
    }

    pub(super) fn write_raw(&self, out: &mut b::rdma_ah_attr) {
        out.type_ = b::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        out.port_num = self.port_num;
        out.sl = self.sl;
        out.static_rate = self.static_rate;
        out.ah_flags = if self.has_grh {
            b::ib_ah_flags_IB_AH_GRH as u8
        } else {
            0
        };
        out.grh.sgid_attr = ptr::null();
        // SAFETY: writing the raw-bytes member of `union ib_gid`.
        unsafe { *out.grh.dgid.raw.as_mut() = self.dgid };
        out.grh.flow_label = self.flow_label;
        out.grh.sgid_index = self.sgid_index;
        out.grh.hop_limit = self.hop_limit;
        out.grh.traffic_class = self.traffic_class;
        // SAFETY: writing the `roce` member of a plain-data union.
        unsafe { out.__bindgen_anon_1.roce.as_mut().dmac = self.dmac };
    }
}

/// Everything `query_qp` reports.
#[derive(Default)]
pub(crate) struct QpSnapshot {
    pub(crate) qp_state: u32,
    pub(crate) cur_qp_state: u32,
    pub(crate) path_mtu: u32,
    pub(crate) path_mig_state: u32,
    pub(crate) qkey: u32,
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    pub(crate) dest_qp_num: u32,
    pub(crate) qp_access_flags: u32,
    pub(crate) cap: QpCap,
    pub(crate) av: AddressVector,
    pub(crate) pkey_index: u16,
    pub(crate) en_sqd_async_notify: u8,
    pub(crate) sq_draining: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) port_num: u32,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) qp_type: u32,
    pub(crate) sq_sig_all: bool,
}

pub(crate) use super::umem::Umem;

/// Raises ib_core events on a CQ.
///
/// # Invariants
///
/// Points to a CQ of ours. The driver stops using it (drops every copy reachable from the data
/// path) before `destroy_cq` returns.
pub(crate) struct CqRef(pub(super) *mut b::ib_cq);

// SAFETY: the handlers ib_core installs may be called from any context.
unsafe impl Send for CqRef {}
// SAFETY: as above.
unsafe impl Sync for CqRef {}

impl CqRef {
    /// Calls the completion handler (the completion channel of a user CQ).
    pub(crate) fn comp_event(&self) {
        // SAFETY: by the type invariant the CQ is alive; `comp_handler` and `cq_context` were
        // set by ib_core before `create_cq` and never change.
        unsafe {
            if let Some(h) = (*self.0).comp_handler {
                h(self.0, (*self.0).cq_context);
            }
        }
    }

    /// Reports CQ_ERR (an overrun).
    pub(crate) fn error_event(&self) {
        let mut ev = b::ib_event::default();
        // SAFETY: the CQ is alive (invariant); `cq` is the union member read for CQ events.
        unsafe {
            ev.device = (*self.0).device;
            *ev.element.cq.as_mut() = self.0;
            ev.event = b::ib_event_type_IB_EVENT_CQ_ERR;
            if let Some(h) = (*self.0).event_handler {
                h(&mut ev, (*self.0).cq_context);
            }
        }
    }
}

/// Affiliated events of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpEvent {
    Fatal,
    CommEst,
    SqDrained,
    LastWqeReached,
    /// `IB_EVENT_QP_REQ_ERR`: the responder could not execute a request.
    ReqErr,
    /// `IB_EVENT_QP_ACCESS_ERR`: the responder met an access violation.
    AccessErr,
}

/// Raises ib_core events on a QP. Invariants as for [`CqRef`], with `destroy_qp`.
pub(crate) struct QpRef(pub(super) *mut b::ib_qp);

// SAFETY: see `CqRef`.
unsafe impl Send for QpRef {}
// SAFETY: see `CqRef`.
unsafe impl Sync for QpRef {}

impl QpRef {
    /// Dispatches `e` to the QP's event handler.
    pub(crate) fn event(&self, e: QpEvent) {
        let event = match e {
            QpEvent::Fatal => b::ib_event_type_IB_EVENT_QP_FATAL,
            QpEvent::CommEst => b::ib_event_type_IB_EVENT_COMM_EST,
            QpEvent::SqDrained => b::ib_event_type_IB_EVENT_SQ_DRAINED,
            QpEvent::LastWqeReached => b::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
            QpEvent::ReqErr => b::ib_event_type_IB_EVENT_QP_REQ_ERR,
            QpEvent::AccessErr => b::ib_event_type_IB_EVENT_QP_ACCESS_ERR,
        };
        let mut ev = b::ib_event {
            event,
            ..Default::default()
        };
        // SAFETY: the QP is alive (invariant); `event_handler`/`qp_context` were set by ib_core
        // before `create_qp`; `qp` is the union member read for QP events.
        unsafe {
            ev.device = (*self.0).device;
            *ev.element.qp.as_mut() = self.0;
            if let Some(h) = (*self.0).event_handler {
                h(&mut ev, (*self.0).qp_context);
            }
        }
    }
}

/// Raises ib_core events on an SRQ. Invariants as for [`CqRef`], with `destroy_srq`.
pub(crate) struct SrqRef(pub(super) *mut b::ib_srq);

// SAFETY: see `CqRef`.
unsafe impl Send for SrqRef {}
// SAFETY: see `CqRef`.
unsafe impl Sync for SrqRef {}

impl SrqRef {
    /// Reports SRQ_LIMIT_REACHED.
    pub(crate) fn limit_event(&self) {
        let mut ev = b::ib_event::default();
        // SAFETY: the SRQ is alive (invariant); handler and context were set by ib_core.
        unsafe {
            ev.device = (*self.0).device;
            *ev.element.srq.as_mut() = self.0;
            ev.event = b::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED;
            if let Some(h) = (*self.0).event_handler {
                h(&mut ev, (*self.0).srq_context);
            }
        }
    }
}

/// SRQ attributes (`struct ib_srq_attr`).
#[derive(Clone, Copy, Default)]
pub(crate) struct SrqAttr {
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) srq_limit: u32,
}

/// `modify_srq` mask bits.
pub(crate) const SRQ_MAX_WR: u32 = b::ib_srq_attr_mask_IB_SRQ_MAX_WR;
/// See [`SRQ_MAX_WR`].
pub(crate) const SRQ_LIMIT: u32 = b::ib_srq_attr_mask_IB_SRQ_LIMIT;

/// `reg_user_mr` parameters.
pub(crate) struct MrArgs {
    pub(crate) start: u64,
    pub(crate) length: u64,
    pub(crate) iova: u64,
    pub(crate) access: u32,
}

/// A new MR's keys.
pub(crate) struct MrKeys {
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

pub(super) fn cap_from_raw(c: &b::ib_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

pub(super) fn cap_to_raw(c: &QpCap, out: &mut b::ib_qp_cap) {
    out.max_send_wr = c.max_send_wr;
    out.max_recv_wr = c.max_recv_wr;
    out.max_send_sge = c.max_send_sge;
    out.max_recv_sge = c.max_recv_sge;
    out.max_inline_data = c.max_inline_data;
}

/// One send work request of a kernel consumer, checked for form (opcode, flags, SGE count,
/// inline size) but not yet against the QP's caps, which the driver applies.
pub(crate) struct KSendWr<'a, A> {
    /// The WQE header as a user slot would carry it (`num_sge` / `inline_len` filled).
    pub(crate) wqe: SendWqe,
    /// The gather list (empty with inline data).
    pub(crate) sges: &'a [Sge],
    /// The inline payload, already copied out of the consumer's buffers.
    pub(crate) inline: &'a [u8],
    /// UD and GSI: the address handle.
    pub(crate) ah: Option<&'a A>,
}

/// The `ib_qp` a completion belongs to, as the data path knows it (from the QP's event
/// reference): only this layer can make or read one.
#[derive(Clone, Copy)]
pub(crate) struct QpHandle(pub(super) *mut b::ib_qp);

// SAFETY: the driver only stores and copies the pointer (a kernel CQ records it per completion
// when the completion is written, as rdma_rxe does); only ib_core's consumer dereferences it,
// in `ib_wc.qp`.
unsafe impl Send for QpHandle {}

// Written out: raw pointers implement `Default` only from Rust 1.88 (the kernel's minimum is
// 1.78), so the derive clippy suggests would not build there.
#[allow(clippy::derivable_impls)]
impl Default for QpHandle {
    fn default() -> Self {
        QpHandle(ptr::null_mut())
    }
}

/// A completion for a kernel consumer, in libibverbs' numbering (the same values as ib_core's
/// `ib_wc_status` and `ib_wc_opcode`; flags are converted here).
#[derive(Clone, Copy, Default)]
pub(crate) struct Wc {
    pub(crate) cqe: uapi::Cqe,
    pub(crate) qp: QpHandle,
}
