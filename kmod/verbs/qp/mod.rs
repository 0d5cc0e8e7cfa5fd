// SPDX-License-Identifier: GPL-2.0-only
//! Queue pairs: create, query, destroy and the kernel consumers' posts here; modify (validated
//! in full before anything is committed) in `modify.rs`. The QP's data-path half, which these
//! create, drive and destroy, is `datapath/qp/`.

mod modify;

use super::{ah::RrxeAh, device::Rrxe, errno, pd::RrxePd};
use crate::datapath::{
    path::Path,
    qp::{Eng, QpInner, QpParts},
};
use crate::ib::{
    device::{Device, QpLinks},
    objects::KSendWr,
    objects::{AddressVector, QpInit, QpSnapshot},
    restrack::ResTable,
    ring::SharedRing,
    udata::Udata,
};
use crate::logic::transport::{self as tp, SqEntry};
use crate::logic::{
    limits as lim,
    port::{self, IbMtu},
    qp_attr::{self, DeviceLimits, MigState, QpCap},
    qp_state::{QpState, QpType},
};
use crate::uapi::{self, Sge};
use core::mem::offset_of;
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};

/// The GSI QP's number (IBTA: QP1 on every port).
const GSI_QPN: u32 = 1;

/// The modifiable attributes of a QP, guarded by its lock.
struct QpAttrs {
    state: QpState,
    sq_draining: bool,
    path_mtu: IbMtu,
    path_mig_state: MigState,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    access: u32,
    pkey_index: u16,
    en_sqd_async_notify: bool,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u32,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    path: Option<Path>,
}

impl QpAttrs {
    /// The attributes of a QP in RESET: as created.
    fn reset() -> Self {
        QpAttrs {
            state: QpState::Reset,
            sq_draining: false,
            path_mtu: IbMtu::Mtu1024,
            path_mig_state: MigState::Migrated,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            access: 0,
            pkey_index: 0,
            en_sqd_async_notify: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            path: None,
        }
    }
}

/// A queue pair.
pub(crate) struct RrxeQp {
    qpn: u32,
    qp_type: QpType,
    sq_sig_all: bool,
    cap: QpCap,
    has_srq: bool,
    /// Created by a kernel consumer (local operations allowed in its SQ).
    kernel: bool,
    attrs: Pin<KBox<Mutex<QpAttrs>>>,
    /// The data path's view (engine, rings, CQs), shared with the receive path.
    pub(crate) inner: Arc<QpInner>,
}

/// What the engine configuration takes from the QP itself: fixed from its creation.
pub(super) struct QpFacts<'a> {
    pub(super) qpn: u32,
    pub(super) qp_type: QpType,
    pub(super) sq_sig_all: bool,
    pub(super) cap: &'a QpCap,
    pub(super) has_srq: bool,
    /// The SRQ's SGE limit (with an SRQ, what a receive may scatter to).
    pub(super) srq_sge: u32,
    /// A kernel consumer's QP: it may post local operations (REG_MR, LOCAL_INV, BIND_MW).
    pub(super) local_ops: bool,
}

/// The engine configuration of QP `q` for the committed attributes `a`.
fn engine_config(q: &QpFacts<'_>, a: &QpAttrs, port_mtu: IbMtu) -> tp::Config {
    let QpFacts {
        qpn,
        qp_type,
        sq_sig_all,
        cap,
        has_srq,
        srq_sge,
        local_ops,
    } = *q;
    let mtu = if qp_type.is_datagram() {
        port_mtu
    } else {
        a.path_mtu
    };
    tp::Config {
        // GSI is a UD QP to the transport (QP1, Q_Key 0x80010000 set by ib_mad).
        qp_type: if qp_type == QpType::Gsi {
            QpType::Ud
        } else {
            qp_type
        },
        qpn,
        dest_qpn: a.dest_qp_num,
        mtu: mtu.bytes(),
        qkey: a.qkey,
        access: a.access,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        rnr_retry: a.rnr_retry,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        // A connected QP takes packets only from its peer to our address of the path.
        peer: match (qp_type, &a.path) {
            (QpType::Rc | QpType::Uc, Some(p)) => p.av.sgid.map(|s| tp::PeerAddr {
                local: s.gid,
                remote: p.av.dgid,
            }),
            _ => None,
        },
        sq_sig_all,
        max_send_sge: cap.max_send_sge,
        max_inline: cap.max_inline_data,
        max_recv_sge: if has_srq { srq_sge } else { cap.max_recv_sge },
        has_srq,
        local_ops,
    }
}

/// A work-queue ring with `wr` slots of `slot_size` bytes, shared with the user context of
/// `udata`, or for a kernel consumer without.
pub(super) fn new_wq(
    udata: Option<&Udata>,
    wr: u32,
    slot_size: usize,
) -> Result<(SharedRing, uapi::RingInfo)> {
    let slots = wr.max(1).checked_next_power_of_two().ok_or(EINVAL)?;
    let bytes = uapi::ring_bytes(slots, slot_size, kernel::page::PAGE_SIZE);
    let ring = match udata {
        Some(u) => SharedRing::new(u, bytes)?,
        None => SharedRing::new_kernel(bytes)?,
    };
    ring.store_release(
        offset_of!(uapi::RingHeader, log2_slots),
        slots.trailing_zeros(),
    );
    ring.store_release(offset_of!(uapi::RingHeader, slot_size), slot_size as u32);
    let info = uapi::RingInfo {
        mmap_key: ring.key(),
        bytes: ring.bytes() as u64,
        slots,
        slot_size: slot_size as u32,
    };
    Ok((ring, info))
}

fn limits() -> DeviceLimits {
    DeviceLimits {
        phys_port_cnt: lim::PHYS_PORT_CNT,
        max_qp_wr: lim::MAX_QP_WR,
        max_send_sge: lim::MAX_SGE,
        max_recv_sge: lim::MAX_SGE,
        max_inline_data: lim::MAX_INLINE_DATA,
        max_qp_rd_atom: lim::MAX_QP_RD_ATOM,
        max_qp_init_rd_atom: lim::MAX_QP_INIT_RD_ATOM,
    }
}

fn port_mtu(dev: &Device<Rrxe>) -> IbMtu {
    port::active_mtu_for_netdev_mtu(dev.netdev().mtu()).unwrap_or(IbMtu::Mtu256)
}

/// The states the data path enters on its own (a fatal error; a send error on UC/UD).
fn entered_by_data_path(s: QpState) -> bool {
    matches!(s, QpState::Err | QpState::Sqe)
}

pub(super) fn create(
    dev: &Device<Rrxe>,
    pd: &RrxePd,
    init: &mut QpInit,
    udata: Option<&Udata>,
    links: QpLinks<'_, Rrxe>,
) -> Result<(RrxeQp, u32)> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let qp_type = match QpType::from_raw(init.qp_type) {
        Some(t @ (QpType::Rc | QpType::Uc | QpType::Ud)) => t,
        // QP1 of the port, which ib_mad creates for the MADs of ib_cm / rdma_cm (a kernel
        // consumer only: uverbs never asks for it).
        Some(QpType::Gsi) if udata.is_none() => QpType::Gsi,
        // SMI (no subnet management on RoCE), XRC and raw packet QPs are not implemented.
        Some(_) => return Err(crate::ib::eopnotsupp()),
        None => return Err(EINVAL),
    };
    if init.create_flags != 0 || init.has_xrcd || init.has_rwq_ind_tbl || init.source_qpn != 0 {
        return Err(crate::ib::eopnotsupp());
    }
    let (Some(send_cq), Some(recv_cq)) = (links.send_cq, links.recv_cq) else {
        return Err(EINVAL);
    };
    qp_attr::check_caps(&init.cap, init.has_srq, &limits()).map_err(|e| errno(e.errno()))?;
    if init.has_srq {
        init.cap.max_recv_wr = 0;
        init.cap.max_recv_sge = 0;
    }
    let attrs = KBox::pin_init(new_mutex!(QpAttrs::reset(), "rrxe:qp"), GFP_KERNEL_ACCOUNT)?;
    let mut resp = uapi::CreateQpResp::default();
    let c = &init.cap;
    let (ring, info) = new_wq(
        udata,
        c.max_send_wr,
        uapi::send_slot_size(c.max_send_sge, c.max_inline_data),
    )?;
    let sq = Some((ring, info.slots, info.slot_size as usize));
    resp.sq = info;
    let mut rq = None;
    if !init.has_srq {
        let (ring, info) = new_wq(udata, c.max_recv_wr, uapi::recv_slot_size(c.max_recv_sge))?;
        rq = Some((ring, info.slots, info.slot_size as usize));
        resp.rq = info;
    }
    if let Some(u) = udata {
        u.respond(&resp)?;
    }
    // The engine's private copy of the SQ has the ring's geometry.
    let (slots, slot_size) = match &sq {
        Some((_, n, sz)) => (*n as usize, *sz),
        None => (1, uapi::send_slot_size(0, 0)),
    };
    let srq = links.srq.map(|s| s.inner.clone());
    let srq_sge = srq.as_ref().map_or(0, |s| s.max_sge);
    let data = dev.data();
    let quota = data.quota.qp.reserve(lim::MAX_QP, udata.is_some())?;
    // The GSI QP is always QP1 (reserved in the QPN allocator); the QP table refuses a
    // second one.
    let qpn_slot = match qp_type {
        QpType::Gsi => None,
        _ => Some(data.reserve_qpn()?),
    };
    let qpn = qpn_slot.as_ref().map_or(GSI_QPN, |s| s.id());
    if qp_type == QpType::Gsi {
        // MADs arrive from the wire before any user path opens the socket: open it now. It
        // can be refused (another RoCE driver holds UDP 4791 in this namespace); the MAD layer
        // then works on loopback only, as any user QP would.
        if let Err(e) = data.fabric.open_wire() {
            pr_info!(
                "rrxe: no RoCEv2 UDP socket in this namespace yet (errno {}; another RoCE driver may hold port 4791): loopback only until a path opens it\n",
                e.to_errno()
            );
        }
    }
    let facts = QpFacts {
        qpn,
        qp_type,
        sq_sig_all: init.sq_sig_all,
        cap: &init.cap,
        has_srq: init.has_srq,
        srq_sge,
        local_ops: udata.is_none(),
    };
    let cfg = engine_config(&facts, &QpAttrs::reset(), port_mtu(dev));
    let eng = Eng::new(
        cfg,
        KVVec::from_elem(0u8, slots * slot_size, GFP_KERNEL_ACCOUNT)?,
        KVVec::from_elem(SqEntry::default(), slots, GFP_KERNEL_ACCOUNT)?,
        // No responder resources until a modify asks for them (`RrxeQp::modify`).
        KVVec::new(),
        slot_size,
    )
    .ok_or(EINVAL)?;
    let parts = QpParts {
        qpn,
        pd: pd as *const RrxePd as usize,
        max_recv_sge: init.cap.max_recv_sge,
        max_send_wr: init.cap.max_send_wr,
        max_recv_wr: init.cap.max_recv_wr,
        eng,
        sq,
        rq,
        send_cq: send_cq.inner.clone(),
        recv_cq: recv_cq.inner.clone(),
        srq,
        ev: links.this,
        fabric: data.fabric.clone(),
    };
    let inner = Arc::pin_init(QpInner::new(parts)?, GFP_KERNEL_ACCOUNT)?;
    inner.bind_timer(&inner)?;
    data.fabric.qps.insert(qpn, inner.clone())?;
    inner.attach_gauge(&inner);
    quota.keep();
    if let Some(s) = qpn_slot {
        s.keep();
    }
    let qp = RrxeQp {
        qpn,
        qp_type,
        sq_sig_all: init.sq_sig_all,
        cap: init.cap,
        has_srq: init.has_srq,
        kernel: udata.is_none(),
        attrs,
        inner,
    };
    Ok((qp, qpn))
}

pub(super) fn query(_dev: &Device<Rrxe>, qp: &RrxeQp) -> Result<QpSnapshot> {
    let a = qp.attrs.lock();
    let (state, sq_psn, rq_psn, draining) = qp.inner.snapshot();
    let state = if entered_by_data_path(state) {
        state
    } else {
        a.state
    };
    let (av, hop) = match &a.path {
        Some(p) => (p.av, p.hop_limit),
        None => (AddressVector::default(), 0),
    };
    let mut av = av;
    av.hop_limit = hop;
    av.sgid = None;
    Ok(QpSnapshot {
        qp_state: state.as_raw(),
        cur_qp_state: state.as_raw(),
        path_mtu: a.path_mtu as u32,
        path_mig_state: a.path_mig_state as u32,
        qkey: a.qkey,
        rq_psn: if state == QpState::Reset {
            a.rq_psn
        } else {
            rq_psn
        },
        sq_psn: if state == QpState::Reset {
            a.sq_psn
        } else {
            sq_psn
        },
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.access,
        cap: qp.cap,
        av,
        pkey_index: a.pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify as u8,
        sq_draining: draining as u8,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        qp_type: qp.qp_type.as_raw(),
        sq_sig_all: qp.sq_sig_all,
    })
}

/// Attaches a UD QP to a multicast group (the receive socket opens if nothing opened it yet).
pub(super) fn attach_mcast(dev: &Device<Rrxe>, qp: &RrxeQp, gid: [u8; 16]) -> Result {
    if qp.qp_type != QpType::Ud {
        return Err(EINVAL);
    }
    let fabric = &dev.data().fabric;
    // Senders on this device reach the QP even if the socket cannot be opened (another driver
    // holds UDP 4791 in this namespace); remote ones need it.
    let _ = fabric.open_wire();
    fabric.mcast.attach(gid, qp.qpn)
}

/// Ends one attachment of a UD QP to a multicast group.
pub(super) fn detach_mcast(dev: &Device<Rrxe>, qp: &RrxeQp, gid: [u8; 16]) -> Result {
    if qp.qp_type != QpType::Ud {
        return Err(EINVAL);
    }
    dev.data().fabric.mcast.detach(gid, qp.qpn)
}

pub(super) fn destroy(dev: &Device<Rrxe>, qp: RrxeQp) {
    // No packet, doorbell or timer acts on the QP after this: `shutdown` stops the timers and
    // the work item and closes the QP under its lock against packets that still find it in
    // the table (a doorbell cannot race with destroy: ib_core excludes it). Its QPN is free for
    // reuse once it has left the table.
    qp.inner.shutdown();
    // Unpublished, and no receive path or delivery holds it any more: the QP's own reference
    // is the last, dropped here in process context, where its rings' mmap entries and work
    // item may be torn down.
    drop(dev.data().fabric.qps.remove_and_wait(qp.qpn));
    let qpn = qp.qpn;
    if qp.inner.into_unique_or_drop().is_none() {
        pr_warn!("rrxe: QP {qpn:#x} outlived its readers' sections (teardown protocol)\n");
    }
    if qpn != GSI_QPN {
        dev.data().free_qpn(qpn);
    }
    dev.data().quota.qp.release();
}

/// A kernel consumer's send WR: checked against the QP's caps, then queued (the doorbell
/// follows the list).
pub(super) fn post_send_kernel(qp: &RrxeQp, wr: &KSendWr<'_, RrxeAh>) -> Result {
    let mut w = wr.wqe;
    if w.num_sge > qp.cap.max_send_sge || w.inline_len > qp.cap.max_inline_data {
        return Err(EINVAL);
    }
    match wr.ah {
        Some(ah) => w.ah_num = ah.num(),
        None if qp.qp_type.is_datagram() => return Err(EINVAL),
        None => {}
    }
    qp.inner.post_kernel_send(&w, wr.sges, wr.inline)
}

/// A kernel consumer's receive WR.
pub(super) fn post_recv_kernel(qp: &RrxeQp, wr_id: u64, sges: &[Sge]) -> Result {
    if qp.has_srq {
        return Err(EINVAL);
    }
    qp.inner.post_kernel_recv(wr_id, sges)
}

/// `rdma resource show qp -dd`: ring depth and fill, PSNs, the requester's retry state.
pub(super) fn res(qp: &RrxeQp, t: &mut ResTable) -> Result {
    let r = qp.inner.res();
    let d = r.details;
    if let Some((slots, posted)) = r.sq {
        t.u32(c_str!("sq_depth"), slots)?;
        t.u32(c_str!("sq_posted"), posted)?;
    }
    t.u32(c_str!("sq_outstanding"), d.sq_outstanding)?;
    t.u32(c_str!("sq_unsent"), d.sq_unsent)?;
    if let Some((slots, posted)) = r.rq {
        t.u32(c_str!("rq_depth"), slots)?;
        t.u32(c_str!("rq_posted"), posted)?;
    }
    t.hex(c_str!("sq_psn"), r.sq_psn)?;
    t.hex(c_str!("acked_psn"), d.acked_psn)?;
    t.hex(c_str!("rq_psn"), r.rq_psn)?;
    t.u32(c_str!("rd_atomic"), d.rd_atomic)?;
    t.u32(c_str!("resp_resources"), d.resp_resources)?;
    t.u32(c_str!("retry_left"), u32::from(d.retry_left))?;
    t.u32(c_str!("rnr_retry_left"), u32::from(d.rnr_left))?;
    t.u32(c_str!("timer_backoff"), u32::from(d.backoff))?;
    t.str(
        c_str!("retry_timer"),
        if d.timer_armed {
            c_str!("armed")
        } else {
            c_str!("stopped")
        },
    )?;
    t.u32(c_str!("cwnd"), d.cwnd)?;
    t.u32(c_str!("ssthresh"), d.ssthresh)?;
    t.u32(c_str!("srtt_us"), d.srtt_us.min(u64::from(u32::MAX)) as u32)?;
    if d.reads_ahead != 0 {
        t.u32(c_str!("reads_ahead"), d.reads_ahead)?;
    }
    if d.peer != tp::PeerMode::Unknown {
        t.str(
            c_str!("peer"),
            if d.peer == tp::PeerMode::Places {
                c_str!("places")
            } else {
                c_str!("go-back-n")
            },
        )?;
    }
    if d.writes_ahead != 0 {
        t.u32(c_str!("writes_ahead"), d.writes_ahead)?;
    }
    if d.rnr_wait {
        t.str(c_str!("rnr"), c_str!("waiting"))?;
    }
    if r.broken {
        t.str(c_str!("ring"), c_str!("broken"))?;
    }
    if r.rate_cuts > 0 {
        t.u64(c_str!("dcqcn_rate_cuts"), r.rate_cuts)?;
    }
    if let Some(kbps) = r.rate {
        t.u64(c_str!("dcqcn_rate_kbps"), kbps)?;
    }
    Ok(())
}
