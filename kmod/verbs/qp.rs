// SPDX-License-Identifier: GPL-2.0-only
//! Queue pairs: create, modify (validated in full before anything is committed), query,
//! destroy.

use super::{
    av::{self, Path},
    device::{Rrxe, RrxeDev},
    errno,
    pd::RrxePd,
};
use crate::ib::{
    device::Device,
    objects::{AddressVector, QpInit, QpSnapshot},
    ring::SharedRing,
    udata::Udata,
};
use crate::uapi;
use core::mem::offset_of;
use crate::logic::{
    limits as lim,
    port::{self, IbMtu},
    qp_attr::{self, DeviceLimits, MigState, ModifyRequest, PortInfo, QpCap},
    qp_state::{QpCurrent, QpState, QpType},
};
use kernel::{new_mutex, prelude::*, sync::Mutex};

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
    attrs: Pin<KBox<Mutex<QpAttrs>>>,
    /// User QPs: the send ring (the provider produces).
    #[expect(dead_code, reason = "drained by the requester (data-path issue)")]
    sq: Option<SharedRing>,
    /// User QPs without an SRQ: the receive ring.
    #[expect(dead_code, reason = "consumed by the responder (data-path issue)")]
    rq: Option<SharedRing>,
}

/// A work-queue ring with `wr` slots of `slot_size` bytes.
fn new_wq(udata: &Udata, wr: u32, slot_size: usize) -> Result<(SharedRing, uapi::RingInfo)> {
    let slots = wr.max(1).checked_next_power_of_two().ok_or(EINVAL)?;
    let ring = SharedRing::new(udata, uapi::ring_bytes(slots, slot_size, kernel::page::PAGE_SIZE))?;
    ring.store_release(offset_of!(uapi::RingHeader, log2_slots), slots.trailing_zeros());
    ring.store_release(offset_of!(uapi::RingHeader, slot_size), slot_size as u32);
    let info = uapi::RingInfo { mmap_key: ring.key(), bytes: ring.bytes() as u64, slots, slot_size: slot_size as u32 };
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

pub(super) fn create(dev: &Device<Rrxe>, _pd: &RrxePd, init: &mut QpInit, udata: Option<&Udata>) -> Result<(RrxeQp, u32)> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let qp_type = match QpType::from_raw(init.qp_type) {
        Some(t @ (QpType::Rc | QpType::Uc | QpType::Ud)) => t,
        // GSI (rdma_cm over ib_cm), SMI, XRC and raw packet QPs are not implemented.
        Some(_) => return Err(crate::ib::eopnotsupp()),
        None => return Err(EINVAL),
    };
    if init.create_flags != 0 || init.has_xrcd || init.has_rwq_ind_tbl || init.source_qpn != 0 {
        return Err(crate::ib::eopnotsupp());
    }
    if !init.has_send_cq || !init.has_recv_cq {
        return Err(EINVAL);
    }
    qp_attr::check_caps(&init.cap, init.has_srq, &limits()).map_err(|e| errno(e.errno()))?;
    if init.has_srq {
        init.cap.max_recv_wr = 0;
        init.cap.max_recv_sge = 0;
    }
    let attrs = KBox::pin_init(new_mutex!(QpAttrs::reset(), "rrxe:qp"), GFP_KERNEL)?;
    let (mut sq, mut rq) = (None, None);
    if let Some(u) = udata {
        let mut resp = uapi::CreateQpResp::default();
        let c = &init.cap;
        let (ring, info) = new_wq(u, c.max_send_wr, uapi::send_slot_size(c.max_send_sge, c.max_inline_data))?;
        sq = Some(ring);
        resp.sq = info;
        if !init.has_srq {
            let (ring, info) = new_wq(u, c.max_recv_wr, uapi::recv_slot_size(c.max_recv_sge))?;
            rq = Some(ring);
            resp.rq = info;
        }
        u.respond(&resp)?;
    }
    let data = dev.data();
    data.quota.qp.take(lim::MAX_QP)?;
    let qpn = match data.alloc_qpn() {
        Ok(n) => n,
        Err(e) => {
            RrxeDev::release(&data.quota.qp);
            return Err(e);
        }
    };
    let qp = RrxeQp { qpn, qp_type, sq_sig_all: init.sq_sig_all, cap: init.cap, attrs, sq, rq };
    Ok((qp, qpn))
}

pub(super) fn modify(
    dev: &Device<Rrxe>,
    qp: &RrxeQp,
    req: &ModifyRequest,
    avec: Option<&AddressVector>,
    udata: Option<&Udata>,
) -> Result {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let port = PortInfo {
        pkey_tbl_len: u32::from(lim::PKEY_TBL_LEN),
        active_mtu: port::active_mtu_for_netdev_mtu(dev.netdev().mtu()).unwrap_or(IbMtu::Mtu256),
    };
    let mut a = qp.attrs.lock();
    let cur = QpCurrent { qp_type: qp.qp_type, state: a.state, sq_draining: a.sq_draining };
    // Everything is validated before anything is written: a refused modify changes nothing.
    let v = qp_attr::validate(req, &cur, &limits(), &port).map_err(|e| errno(e.errno()))?;
    let path = match avec {
        Some(avec) => {
            let dqpn = v.dest_qp_num.unwrap_or(a.dest_qp_num);
            Some(av::resolve(dev, avec, Some((qp.qpn, dqpn)))?)
        }
        None => None,
    };

    if v.next_state == QpState::Reset && a.state != QpState::Reset {
        // Back to RESET: the QP is as created (its queues are emptied with the data path).
        *a = QpAttrs::reset();
        return Ok(());
    }
    // Commit every attribute the request carried (validated above).
    macro_rules! commit {
        ($($field:ident),* $(,)?) => {$(
            if let Some(x) = v.$field {
                a.$field = x;
            }
        )*};
    }
    commit!(
        path_mtu,
        path_mig_state,
        qkey,
        dest_qp_num,
        pkey_index,
        en_sqd_async_notify,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
    );
    if let Some(x) = v.rq_psn {
        a.rq_psn = x.get();
    }
    if let Some(x) = v.sq_psn {
        a.sq_psn = x.get();
    }
    if let Some(x) = v.qp_access_flags {
        a.access = x;
    }
    if path.is_some() {
        a.path = path;
    }
    // Entering SQD: nothing is outstanding without a data path, so draining is already done.
    a.sq_draining = false;
    a.state = v.next_state;
    Ok(())
}

pub(super) fn query(_dev: &Device<Rrxe>, qp: &RrxeQp) -> Result<QpSnapshot> {
    let a = qp.attrs.lock();
    let (av, hop) = match &a.path {
        Some(p) => (p.av, p.hop_limit),
        None => (AddressVector::default(), 0),
    };
    let mut av = av;
    av.hop_limit = hop;
    av.sgid = None;
    Ok(QpSnapshot {
        qp_state: a.state.as_raw(),
        cur_qp_state: a.state.as_raw(),
        path_mtu: a.path_mtu as u32,
        path_mig_state: a.path_mig_state as u32,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.access,
        cap: qp.cap,
        av,
        pkey_index: a.pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify as u8,
        sq_draining: a.sq_draining as u8,
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

pub(super) fn destroy(dev: &Device<Rrxe>, qp: &RrxeQp) {
    dev.data().free_qpn(qp.qpn);
    RrxeDev::release(&dev.data().quota.qp);
}
