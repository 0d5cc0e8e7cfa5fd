// SPDX-License-Identifier: GPL-2.0-only
//! The verbs ops trampolines for PD, CQ, QP, MR, MW, AH and SRQ: the `extern "C"` functions
//! ib_core calls, each turning raw pointers into the views of [`super::objects`] and calling the
//! driver's [`IbDriver`] method.

use super::bindings as b;
use super::device::{
    dev, AhObj, CqObj, Device, IbDriver, MrObj, MwObj, PdObj, QpLinks, QpObj, SrqObj,
};
use super::objects::*;
use super::restrack::with_table;
use super::udata::Udata;
use crate::logic::{qp_attr::ModifyRequest, qp_state::AttrMask};
use core::{mem::MaybeUninit, ptr};
use kernel::{error::from_result, prelude::*, types::Opaque};

/// Fills the object sizes and verbs callbacks into `ops`.
pub(crate) fn fill_ops<T: IbDriver>(ops: &mut b::ib_device_ops) {
    ops.size_ib_pd = core::mem::size_of::<PdObj<T>>();
    ops.size_ib_cq = core::mem::size_of::<CqObj<T>>();
    ops.size_ib_qp = core::mem::size_of::<QpObj<T>>();
    ops.size_ib_ah = core::mem::size_of::<AhObj<T>>();
    ops.size_ib_mw = core::mem::size_of::<MwObj<T>>();
    ops.alloc_pd = Some(alloc_pd::<T>);
    ops.dealloc_pd = Some(dealloc_pd::<T>);
    ops.create_cq = Some(create_cq::<T>);
    ops.destroy_cq = Some(destroy_cq::<T>);
    ops.resize_cq = Some(resize_cq::<T>);
    ops.create_qp = Some(create_qp::<T>);
    ops.modify_qp = Some(modify_qp::<T>);
    ops.query_qp = Some(query_qp::<T>);
    ops.destroy_qp = Some(destroy_qp::<T>);
    ops.reg_user_mr = Some(reg_user_mr::<T>);
    ops.dereg_mr = Some(dereg_mr::<T>);
    ops.alloc_mw = Some(alloc_mw::<T>);
    ops.dealloc_mw = Some(dealloc_mw::<T>);
    ops.create_ah = Some(create_ah::<T>);
    // ib_core creates every user AH through `create_user_ah`; kernel ones through `create_ah`.
    ops.create_user_ah = Some(create_ah::<T>);
    ops.destroy_ah = Some(destroy_ah::<T>);
    ops.attach_mcast = Some(attach_mcast::<T>);
    ops.detach_mcast = Some(detach_mcast::<T>);
    ops.size_ib_srq = core::mem::size_of::<SrqObj<T>>();
    ops.create_srq = Some(create_srq::<T>);
    ops.modify_srq = Some(modify_srq::<T>);
    ops.query_srq = Some(query_srq::<T>);
    ops.destroy_srq = Some(destroy_srq::<T>);
    ops.post_send = Some(post_send::<T>);
    ops.req_notify_cq = Some(req_notify_cq::<T>);
    super::kverbs::fill_ops::<T>(ops);
    fill_restrack_ops::<T>(ops);
}

/// # Safety
///
/// ib_core passes a zeroed PD block of `size_ib_pd` bytes with `device` set.
unsafe extern "C" fn alloc_pd<T: IbDriver>(pd: *mut b::ib_pd, udata: *mut b::ib_udata) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, udata) = unsafe { (dev::<T>((*pd).device), Udata::from_raw(udata)) };
        let owner = Owner::of(&udata);
        let data = T::alloc_pd(d, udata.as_ref())?;
        // SAFETY: the data of a fresh PD block is uninitialised.
        unsafe { PdObj::<T>::init(pd, data, owner) };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a PD that `alloc_pd` created and nothing uses any more.
unsafe extern "C" fn dealloc_pd<T: IbDriver>(pd: *mut b::ib_pd, _udata: *mut b::ib_udata) -> i32 {
    // SAFETY: per the contract above.
    unsafe {
        T::dealloc_pd(dev::<T>((*pd).device), PdObj::<T>::data(pd));
        PdObj::<T>::drop_data(pd);
    }
    0
}

/// # Safety
///
/// ib_core passes a zeroed CQ block with `device` set, a valid attr and attrs bundle.
unsafe extern "C" fn create_cq<T: IbDriver>(
    cq: *mut b::ib_cq,
    attr: *const b::ib_cq_init_attr,
    attrs: *mut b::uverbs_attr_bundle,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above; a user CQ's bundle carries the driver udata.
        let (d, a, udata) = unsafe {
            let udata = if attrs.is_null() {
                None
            } else {
                Udata::from_raw(&mut (*attrs).__bindgen_anon_1.__bindgen_anon_1.driver_udata)
            };
            (dev::<T>((*cq).device), &*attr, udata)
        };
        let init = CqInit {
            cqe: a.cqe,
            comp_vector: a.comp_vector,
            flags: a.flags,
        };
        let owner = Owner::of(&udata);
        let (data, cqe) = T::create_cq(d, &init, udata.as_ref(), CqRef(cq))?;
        // SAFETY: the data of a fresh CQ block is uninitialised; `cqe` is ours to report.
        unsafe {
            (*cq).cqe = cqe as i32;
            CqObj::<T>::init(cq, data, owner);
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a CQ that `create_cq` created and nothing uses any more.
unsafe extern "C" fn destroy_cq<T: IbDriver>(cq: *mut b::ib_cq, _udata: *mut b::ib_udata) -> i32 {
    // SAFETY: per the contract above.
    unsafe {
        T::destroy_cq(dev::<T>((*cq).device), CqObj::<T>::data(cq));
        CqObj::<T>::drop_data(cq);
    }
    0
}

/// # Safety
///
/// ib_core passes a live CQ of ours.
unsafe extern "C" fn resize_cq<T: IbDriver>(
    cq: *mut b::ib_cq,
    cqe: i32,
    udata: *mut b::ib_udata,
) -> i32 {
    from_result(|| {
        let cqe = u32::try_from(cqe).map_err(|_| EINVAL)?;
        // SAFETY: per the contract above.
        let (d, data, udata) = unsafe {
            (
                dev::<T>((*cq).device),
                CqObj::<T>::data(cq),
                Udata::from_raw(udata),
            )
        };
        let new = T::resize_cq(d, data, cqe, udata.as_ref())?;
        // SAFETY: the CQ is live; ib_core reads `cqe` back for the response.
        unsafe { (*cq).cqe = new as i32 };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a zeroed QP block with `device`, `pd`, CQs and `qp_type` set, and a valid
/// init attr.
unsafe extern "C" fn create_qp<T: IbDriver>(
    qp: *mut b::ib_qp,
    init: *mut b::ib_qp_init_attr,
    udata: *mut b::ib_udata,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, ia, udata) =
            unsafe { (dev::<T>((*qp).device), &mut *init, Udata::from_raw(udata)) };
        let mut qi = QpInit {
            qp_type: ia.qp_type,
            cap: cap_from_raw(&ia.cap),
            sq_sig_all: ia.sq_sig_type == b::ib_sig_type_IB_SIGNAL_ALL_WR,
            has_srq: !ia.srq.is_null(),
            create_flags: ia.create_flags,
            has_xrcd: !ia.xrcd.is_null(),
            has_rwq_ind_tbl: !ia.rwq_ind_tbl.is_null(),
            source_qpn: ia.source_qpn,
        };
        // SAFETY: a user or kernel QP always has its PD set by ib_core, and it is ours; the
        // CQs (checked non-NULL) and the SRQ, when given, are live objects of ours that ib_core
        // keeps referenced (usecnt) for the QP's lifetime.
        let (pd, links) = unsafe {
            let links = QpLinks::<T> {
                send_cq: if ia.send_cq.is_null() {
                    None
                } else {
                    Some(CqObj::<T>::data(ia.send_cq))
                },
                recv_cq: if ia.recv_cq.is_null() {
                    None
                } else {
                    Some(CqObj::<T>::data(ia.recv_cq))
                },
                srq: if ia.srq.is_null() {
                    None
                } else {
                    Some(SrqObj::<T>::data(ia.srq))
                },
                this: QpRef(qp),
            };
            (PdObj::<T>::data((*qp).pd), links)
        };
        let owner = Owner::of(&udata);
        let (data, qpn) = T::create_qp(d, pd, &mut qi, udata.as_ref(), links)?;
        cap_to_raw(&qi.cap, &mut ia.cap);
        // SAFETY: the data of a fresh QP block is uninitialised; the QPN is ours to set.
        unsafe {
            (*qp).qp_num = qpn;
            QpObj::<T>::init(qp, data, owner);
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a live QP of ours and a valid attr.
unsafe extern "C" fn modify_qp<T: IbDriver>(
    qp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    mask: i32,
    udata: *mut b::ib_udata,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, data, a, udata) = unsafe {
            (
                dev::<T>((*qp).device),
                QpObj::<T>::data(qp),
                &*attr,
                Udata::from_raw(udata),
            )
        };
        let mask = AttrMask::from_bits(mask as u32);
        let req = ModifyRequest {
            mask,
            qp_state: a.qp_state,
            cur_qp_state: a.cur_qp_state,
            path_mtu: a.path_mtu,
            path_mig_state: a.path_mig_state,
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            qp_access_flags: a.qp_access_flags as u32,
            pkey_index: a.pkey_index,
            en_sqd_async_notify: a.en_sqd_async_notify,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            port_num: a.port_num,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
        };
        let av = if mask.contains(AttrMask::AV) {
            // SAFETY: with IB_QP_AV, ib_core filled `ah_attr` and took a reference on its
            // sgid_attr for the duration of the call.
            Some(unsafe { AddressVector::from_raw(d.netdev().as_raw(), &a.ah_attr) })
        } else {
            None
        };
        T::modify_qp(d, data, &req, av.as_ref(), udata.as_ref())?;
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a live QP of ours and writable attr/init structs.
unsafe extern "C" fn query_qp<T: IbDriver>(
    qp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    _mask: i32,
    init: *mut b::ib_qp_init_attr,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, data) = unsafe { (dev::<T>((*qp).device), QpObj::<T>::data(qp)) };
        let s = T::query_qp(d, data)?;
        // The attr is a pure output and uverbs does not clear it: zero it so that every field
        // we do not report (alternate path, rate limit, ...) reads as 0, never stale memory.
        // SAFETY: `attr` is writable (contract) and all-zero is a valid `ib_qp_attr`.
        unsafe { ptr::write_bytes(attr, 0, 1) };
        // SAFETY: per the contract above; the QP's own CQ/SRQ pointers are what ib_core set.
        let (a, ia) = unsafe {
            let ia = &mut *init;
            ia.send_cq = (*qp).send_cq;
            ia.recv_cq = (*qp).recv_cq;
            ia.srq = (*qp).srq;
            ia.qp_context = (*qp).qp_context;
            ia.create_flags = 0;
            ia.port_num = 1;
            (&mut *attr, ia)
        };
        a.qp_state = s.qp_state;
        a.cur_qp_state = s.cur_qp_state;
        a.path_mtu = s.path_mtu;
        a.path_mig_state = s.path_mig_state;
        a.qkey = s.qkey;
        a.rq_psn = s.rq_psn;
        a.sq_psn = s.sq_psn;
        a.dest_qp_num = s.dest_qp_num;
        a.qp_access_flags = s.qp_access_flags as i32;
        cap_to_raw(&s.cap, &mut a.cap);
        s.av.write_raw(&mut a.ah_attr);
        a.pkey_index = s.pkey_index;
        a.en_sqd_async_notify = s.en_sqd_async_notify;
        a.sq_draining = s.sq_draining;
        a.max_rd_atomic = s.max_rd_atomic;
        a.max_dest_rd_atomic = s.max_dest_rd_atomic;
        a.min_rnr_timer = s.min_rnr_timer;
        a.port_num = s.port_num;
        a.timeout = s.timeout;
        a.retry_cnt = s.retry_cnt;
        a.rnr_retry = s.rnr_retry;
        cap_to_raw(&s.cap, &mut ia.cap);
        ia.qp_type = s.qp_type;
        ia.sq_sig_type = if s.sq_sig_all {
            b::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            b::ib_sig_type_IB_SIGNAL_REQ_WR
        };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a QP that `create_qp` created and nothing uses any more.
unsafe extern "C" fn destroy_qp<T: IbDriver>(qp: *mut b::ib_qp, _udata: *mut b::ib_udata) -> i32 {
    // SAFETY: per the contract above: the data is moved out once, and ib_core frees the block
    // after we return without touching our part of it.
    unsafe { T::destroy_qp(dev::<T>((*qp).device), QpObj::<T>::take_data(qp)) };
    0
}

/// Runs a multicast verb (`op`) on a QP with the GID ib_core passed.
///
/// # Safety
///
/// `qp` is a live QP of ours and `gid` a readable GID (`ib_attach_mcast`/`ib_detach_mcast`).
unsafe fn mcast_verb<T: IbDriver>(
    qp: *mut b::ib_qp,
    gid: *const b::ib_gid,
    op: fn(&Device<T>, &T::Qp, [u8; 16]) -> Result,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above; every byte pattern is a valid `raw` view of the
        // 16-byte union.
        let (d, data, gid) = unsafe {
            (
                dev::<T>((*qp).device),
                QpObj::<T>::data(qp),
                *(*gid).raw.as_ref(),
            )
        };
        op(d, data, gid)?;
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a live QP of ours and a readable GID (`ib_attach_mcast`).
unsafe extern "C" fn attach_mcast<T: IbDriver>(
    qp: *mut b::ib_qp,
    gid: *mut b::ib_gid,
    _lid: u16,
) -> i32 {
    // SAFETY: per the contract above.
    unsafe { mcast_verb::<T>(qp, gid, T::attach_mcast) }
}

/// # Safety
///
/// ib_core passes a live QP of ours and a readable GID (`ib_detach_mcast`).
unsafe extern "C" fn detach_mcast<T: IbDriver>(
    qp: *mut b::ib_qp,
    gid: *mut b::ib_gid,
    _lid: u16,
) -> i32 {
    // SAFETY: per the contract above.
    unsafe { mcast_verb::<T>(qp, gid, T::detach_mcast) }
}

/// # Safety
///
/// ib_core passes a live PD of ours.
unsafe extern "C" fn reg_user_mr<T: IbDriver>(
    pd: *mut b::ib_pd,
    start: u64,
    length: u64,
    virt_addr: u64,
    access: i32,
    udata: *mut b::ib_udata,
) -> *mut b::ib_mr {
    let r = (|| -> Result<*mut b::ib_mr> {
        // SAFETY: per the contract above.
        let (d, pdd, udata) = unsafe {
            (
                dev::<T>((*pd).device),
                PdObj::<T>::data(pd),
                Udata::from_raw(udata),
            )
        };
        let args = MrArgs {
            start,
            length,
            iova: virt_addr,
            access: access as u32,
        };
        // Allocated before the driver registers the MR, which makes it reachable by key: nothing
        // may fail after that (a failure would leave a pinned, reachable MR behind).
        let obj = KBox::new(
            MrObj::<T> {
                ib: Opaque::uninit(),
                // Pinned user pages, whoever asked.
                owner: Owner::User,
                data: MaybeUninit::uninit(),
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        let (data, keys) = T::reg_user_mr(d, pdd, &args, udata.as_ref())?;
        let raw = KBox::into_raw(obj);
        // SAFETY: `raw` is a fresh allocation whose data is uninitialised (written once here); a
        // zeroed `ib_mr` is its initial state, and ib_core fills `device`, `pd`, `type` and
        // `uobject` after we return.
        unsafe {
            (*raw).data.write(data);
            let mr = (*raw).ib.get();
            ptr::write_bytes(mr, 0, 1);
            (*mr).lkey = keys.lkey;
            (*mr).rkey = keys.rkey;
            (*mr).iova = virt_addr;
            (*mr).length = length;
            Ok(mr)
        }
    })();
    match r {
        Ok(p) => p,
        // ERR_PTR(): the negative errno as a pointer.
        Err(e) => e.to_errno() as isize as *mut b::ib_mr,
    }
}

/// # Safety
///
/// ib_core passes an MR that `reg_user_mr` created and nothing uses any more.
unsafe extern "C" fn dereg_mr<T: IbDriver>(mr: *mut b::ib_mr, _udata: *mut b::ib_udata) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        unsafe { T::dereg_mr(dev::<T>((*mr).device), MrObj::<T>::data(mr))? };
        // SAFETY: the driver let the MR go; it is the first field of a `KBox<MrObj<T>>` that
        // nothing uses any more.
        unsafe {
            let mut obj = KBox::from_raw(mr.cast::<MrObj<T>>());
            obj.data.assume_init_drop();
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core (uverbs `ALLOC_MW`) passes a zeroed MW block of `size_ib_mw` bytes with `device`,
/// `pd` (a live PD of ours), `uobject` and `type` set.
unsafe extern "C" fn alloc_mw<T: IbDriver>(mw: *mut b::ib_mw, udata: *mut b::ib_udata) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, pdd, ty, udata) = unsafe {
            (
                dev::<T>((*mw).device),
                PdObj::<T>::data((*mw).pd),
                (*mw).type_,
                Udata::from_raw(udata),
            )
        };
        let owner = Owner::of(&udata);
        let (data, rkey) = T::alloc_mw(d, pdd, ty, udata.as_ref())?;
        // SAFETY: the data of a fresh MW block is uninitialised; ib_core reports `rkey`.
        unsafe {
            MwObj::<T>::init(mw, data, owner);
            (*mw).rkey = rkey;
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes an MW that `alloc_mw` created and nothing uses any more (it frees the block
/// after this returns 0).
unsafe extern "C" fn dealloc_mw<T: IbDriver>(mw: *mut b::ib_mw) -> i32 {
    // SAFETY: per the contract above.
    unsafe {
        T::dealloc_mw(dev::<T>((*mw).device), MwObj::<T>::data(mw));
        MwObj::<T>::drop_data(mw);
    }
    0
}

/// # Safety
///
/// ib_core passes a zeroed AH block with `device` and `pd` set and a valid init attr whose
/// address has a referenced sgid_attr.
unsafe extern "C" fn create_ah<T: IbDriver>(
    ah: *mut b::ib_ah,
    init: *mut b::rdma_ah_init_attr,
    udata: *mut b::ib_udata,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, pd, av, udata) = unsafe {
            let d = dev::<T>((*ah).device);
            (
                d,
                PdObj::<T>::data((*ah).pd),
                AddressVector::from_raw(d.netdev().as_raw(), (*init).ah_attr),
                Udata::from_raw(udata),
            )
        };
        // SAFETY: `init` is valid per the contract above.
        let sleepable =
            unsafe { (*init).flags } & b::rdma_create_ah_flags_RDMA_CREATE_AH_SLEEPABLE != 0;
        let owner = Owner::of(&udata);
        let data = T::create_ah(d, pd, &av, udata.as_ref(), sleepable)?;
        // SAFETY: the data of a fresh AH block is uninitialised.
        unsafe { AhObj::<T>::init(ah, data, owner) };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes an AH that `create_ah` created and nothing uses any more.
unsafe extern "C" fn destroy_ah<T: IbDriver>(ah: *mut b::ib_ah, flags: u32) -> i32 {
    let sleepable = flags & b::rdma_destroy_ah_flags_RDMA_DESTROY_AH_SLEEPABLE != 0;
    // SAFETY: per the contract above.
    unsafe {
        T::destroy_ah(dev::<T>((*ah).device), AhObj::<T>::data(ah), sleepable);
        AhObj::<T>::drop_data(ah);
    }
    0
}

/// # Safety
///
/// ib_core passes a zeroed SRQ block with `device`, `pd` set and a valid init attr.
unsafe extern "C" fn create_srq<T: IbDriver>(
    srq: *mut b::ib_srq,
    init: *mut b::ib_srq_init_attr,
    udata: *mut b::ib_udata,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, pd, ia, udata) = unsafe {
            (
                dev::<T>((*srq).device),
                PdObj::<T>::data((*srq).pd),
                &mut *init,
                Udata::from_raw(udata),
            )
        };
        if ia.srq_type != b::ib_srq_type_IB_SRQT_BASIC {
            return Err(crate::ib::eopnotsupp());
        }
        let mut attr = SrqAttr {
            max_wr: ia.attr.max_wr,
            max_sge: ia.attr.max_sge,
            srq_limit: ia.attr.srq_limit,
        };
        let owner = Owner::of(&udata);
        let data = T::create_srq(d, pd, &mut attr, udata.as_ref(), SrqRef(srq))?;
        ia.attr.max_wr = attr.max_wr;
        ia.attr.max_sge = attr.max_sge;
        // SAFETY: the data of a fresh SRQ block is uninitialised.
        unsafe { SrqObj::<T>::init(srq, data, owner) };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a live SRQ of ours and a valid attr.
unsafe extern "C" fn modify_srq<T: IbDriver>(
    srq: *mut b::ib_srq,
    attr: *mut b::ib_srq_attr,
    mask: b::ib_srq_attr_mask,
    udata: *mut b::ib_udata,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, data, a, udata) = unsafe {
            (
                dev::<T>((*srq).device),
                SrqObj::<T>::data(srq),
                &*attr,
                Udata::from_raw(udata),
            )
        };
        let sa = SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        };
        T::modify_srq(d, data, &sa, mask, udata.as_ref())?;
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a live SRQ of ours and a writable attr.
unsafe extern "C" fn query_srq<T: IbDriver>(srq: *mut b::ib_srq, attr: *mut b::ib_srq_attr) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, data) = unsafe { (dev::<T>((*srq).device), SrqObj::<T>::data(srq)) };
        let a = T::query_srq(d, data)?;
        // SAFETY: per the contract above.
        unsafe {
            (*attr).max_wr = a.max_wr;
            (*attr).max_sge = a.max_sge;
            (*attr).srq_limit = a.srq_limit;
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes an SRQ that `create_srq` created and nothing uses any more.
unsafe extern "C" fn destroy_srq<T: IbDriver>(
    srq: *mut b::ib_srq,
    _udata: *mut b::ib_udata,
) -> i32 {
    // SAFETY: per the contract above.
    unsafe {
        T::destroy_srq(dev::<T>((*srq).device), SrqObj::<T>::data(srq));
        SrqObj::<T>::drop_data(srq);
    }
    0
}

/// `post_send`: a user QP's doorbell arrives with an empty list (uverbs `POST_SEND` with
/// `wr_count == 0`); a kernel consumer's list goes to [`super::kverbs::post_send`]. A list on a
/// user QP (a raw uverbs `POST_SEND` command: its WRs come from user space, their SGE addresses
/// are user-chosen) gets `EINVAL`, as in rdma_rxe: user WRs travel through the shared SQ ring
/// only.
///
/// # Safety
///
/// ib_core passes a live QP of ours; a list, when given, is a valid `ib_send_wr` chain.
unsafe extern "C" fn post_send<T: IbDriver>(
    qp: *mut b::ib_qp,
    wr: *const b::ib_send_wr,
    bad_wr: *mut *const b::ib_send_wr,
) -> i32 {
    if !wr.is_null() {
        // SAFETY: per the contract above, the QP is live and initialised.
        return match unsafe { QpObj::<T>::kernel_consumer(qp) } {
            // SAFETY: per the contract above; `who` proves the chain is a kernel consumer's.
            Some(who) => unsafe { super::kverbs::post_send::<T>(who, qp, wr, bad_wr) },
            None => {
                if !bad_wr.is_null() {
                    // SAFETY: ib_core passes a writable `bad_wr` slot.
                    unsafe { *bad_wr = wr };
                }
                EINVAL.to_errno()
            }
        };
    }
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, data) = unsafe { (dev::<T>((*qp).device), QpObj::<T>::data(qp)) };
        T::post_send(d, data)?;
        Ok(0)
    })
}

/// # Safety
///
/// ib_core passes a live CQ of ours.
unsafe extern "C" fn req_notify_cq<T: IbDriver>(
    cq: *mut b::ib_cq,
    flags: b::ib_cq_notify_flags,
) -> i32 {
    from_result(|| {
        // SAFETY: per the contract above.
        let (d, data) = unsafe { (dev::<T>((*cq).device), CqObj::<T>::data(cq)) };
        let solicited = flags & b::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
            == b::ib_cq_notify_flags_IB_CQ_SOLICITED;
        let missed = T::req_notify_cq(d, data, solicited)?;
        let report = flags & b::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0;
        Ok(if report && missed { 1 } else { 0 })
    })
}

/// Installs the `fill_res_*_entry` ops (driver details in `rdma resource show -dd`).
fn fill_restrack_ops<T: IbDriver>(ops: &mut b::ib_device_ops) {
    ops.fill_res_qp_entry = Some(fill_res_qp::<T>);
    ops.fill_res_cq_entry = Some(fill_res_cq::<T>);
    ops.fill_res_mr_entry = Some(fill_res_mr::<T>);
}

/// # Safety
///
/// ib_core passes the message it fills and a live QP of ours.
unsafe extern "C" fn fill_res_qp<T: IbDriver>(msg: *mut b::sk_buff, qp: *mut b::ib_qp) -> i32 {
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*qp).device), QpObj::<T>::data(qp)) };
    // SAFETY: per the contract above.
    unsafe { with_table(msg, |t| T::res_qp(d, data, t)) }
}

/// # Safety
///
/// ib_core passes the message it fills and a live CQ of ours.
unsafe extern "C" fn fill_res_cq<T: IbDriver>(msg: *mut b::sk_buff, cq: *mut b::ib_cq) -> i32 {
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*cq).device), CqObj::<T>::data(cq)) };
    // SAFETY: per the contract above.
    unsafe { with_table(msg, |t| T::res_cq(d, data, t)) }
}

/// # Safety
///
/// ib_core passes the message it fills and a live MR of ours.
unsafe extern "C" fn fill_res_mr<T: IbDriver>(msg: *mut b::sk_buff, mr: *mut b::ib_mr) -> i32 {
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*mr).device), MrObj::<T>::data(mr)) };
    // SAFETY: per the contract above.
    unsafe { with_table(msg, |t| T::res_mr(d, data, t)) }
}
