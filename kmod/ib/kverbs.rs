// SPDX-License-Identifier: GPL-2.0-only
//! Kernel verbs: the work-request lists, completion polling and DMA MR that kernel consumers
//! use (ib_mad's GSI QP, ib_cm and rdma_cm, and the storage ULPs on top of them).
//!
//! A kernel QP, CQ or SRQ has the same rings as a user one ([`super::ring::SharedRing`] with
//! kernel backing), so the data path does not know who posted: these trampolines turn ib_core's
//! `ib_send_wr` / `ib_recv_wr` chains into ring slots through the driver and read completions
//! back as `ib_wc`. Addresses in kernel SGEs are kernel virtual addresses (virt-DMA, see
//! [`super::kmem`]).

use super::bindings as b;
use super::device::{dev, AhObj, CqObj, IbDriver, MrObj, PdObj, QpObj, SrqObj};
use super::kmem::{self, KernelConsumer, KernelVirt, MappedPage};
use super::objects::{KSendWr, MrKeys, Owner, QpHandle, Wc};
use crate::logic::limits as lim;
use crate::uapi::{self, wr_opcode, SendWqe, Sge};
use core::{mem::MaybeUninit, ptr};
use kernel::{prelude::*, types::Opaque};

/// Installs the kernel-consumer ops.
pub(super) fn fill_ops<T: IbDriver>(ops: &mut b::ib_device_ops) {
    ops.post_recv = Some(post_recv::<T>);
    ops.post_srq_recv = Some(post_srq_recv::<T>);
    ops.poll_cq = Some(poll_cq::<T>);
    ops.get_dma_mr = Some(get_dma_mr::<T>);
    ops.alloc_mr = Some(alloc_mr::<T>);
    ops.map_mr_sg = Some(map_mr_sg::<T>);
}

const SEND_FLAGS: u32 = uapi::send_flags::FENCE
    | uapi::send_flags::SIGNALED
    | uapi::send_flags::SOLICITED
    | uapi::send_flags::INLINE;

/// Copies the SGE list of a WR (`num_sge` entries at `list`). `EINVAL` for a negative or too
/// large count.
///
/// # Safety
///
/// `list` must point to `num_sge` valid `ib_sge`s when `num_sge > 0`.
unsafe fn sges<'a>(
    list: *const b::ib_sge,
    num_sge: i32,
    buf: &'a mut [Sge; lim::MAX_SGE as usize],
) -> Result<&'a [Sge]> {
    let n = usize::try_from(num_sge).map_err(|_| EINVAL)?;
    if n > buf.len() {
        return Err(EINVAL);
    }
    for (i, s) in buf.iter_mut().take(n).enumerate() {
        // Read unaligned: ULPs keep their SGEs inside packed structs (ib_iser's and ib_isert's
        // `struct iser_rx_desc` is `__packed`, its `rx_sg` 4-byte aligned), which C reads
        // without complaint and a Rust reference may not point at.
        // SAFETY: `i < num_sge` entries are valid per the contract above.
        let e = unsafe { core::ptr::read_unaligned(list.add(i)) };
        *s = Sge {
            addr: e.addr,
            length: e.length,
            lkey: e.lkey,
        };
    }
    Ok(&buf[..n])
}

/// Reads one `ib_send_wr` (and the typed WR around it) into a [`KSendWr`].
///
/// # Safety
///
/// `w` must be a valid WR of a consumer of `qp`, embedded in the typed WR its opcode and the
/// QP type imply (`ib_rdma_wr`, `ib_atomic_wr`, `ib_ud_wr`), with a valid SGE list and, for UD,
/// a live AH of ours, of a kernel consumer posting it now: inline data is copied from the
/// kernel virtual addresses its SGEs name.
unsafe fn read_send_wr<'a, T: IbDriver>(
    w: *const b::ib_send_wr,
    ud: bool,
    sge_buf: &'a mut [Sge; lim::MAX_SGE as usize],
    inline_buf: &'a mut [u8; lim::MAX_INLINE_DATA as usize],
) -> Result<KSendWr<'a, T::Ah>> {
    // SAFETY: per the contract above.
    // Read unaligned: ib_isert keeps its send WR inside a `__packed` descriptor (`struct
    // iser_tx_desc`), 4-byte aligned; a Rust reference there is undefined (and panics).
    let wr = unsafe { core::ptr::read_unaligned(w) };
    let opcode = match wr.opcode {
        b::ib_wr_opcode_IB_WR_RDMA_WRITE => wr_opcode::RDMA_WRITE,
        b::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM => wr_opcode::RDMA_WRITE_WITH_IMM,
        b::ib_wr_opcode_IB_WR_SEND => wr_opcode::SEND,
        b::ib_wr_opcode_IB_WR_SEND_WITH_IMM => wr_opcode::SEND_WITH_IMM,
        b::ib_wr_opcode_IB_WR_RDMA_READ => wr_opcode::RDMA_READ,
        b::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP => wr_opcode::ATOMIC_CMP_AND_SWP,
        b::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD => wr_opcode::ATOMIC_FETCH_AND_ADD,
        b::ib_wr_opcode_IB_WR_SEND_WITH_INV => wr_opcode::SEND_WITH_INV,
        b::ib_wr_opcode_IB_WR_LOCAL_INV => wr_opcode::LOCAL_INV,
        b::ib_wr_opcode_IB_WR_REG_MR => wr_opcode::REG_MR,
        // Memory windows, masked atomics, READ with invalidate, LSO: not offered (query_device
        // does not advertise them). FLUSH, ATOMIC_WRITE: ib_core has no WR format that carries
        // their operands (rdma_rxe copies none for a kernel WR either); the device caps that
        // advertise them are for user space, which has its own WQE format.
        _ => return Err(super::eopnotsupp()),
    };
    let flags = wr.send_flags as u32;
    if flags & !SEND_FLAGS != 0 {
        return Err(EINVAL);
    }
    // SAFETY: the SGE list is valid per the contract above.
    let list = unsafe { sges(wr.sg_list, wr.num_sge, sge_buf)? };
    let mut wqe = SendWqe {
        // SAFETY: `wr_id` and `wr_cqe` share the union's 64 bits; either is carried as is.
        wr_id: wr.__bindgen_anon_1.bindgen_union_field,
        opcode,
        send_flags: flags,
        // SAFETY: `imm_data` / `invalidate_rkey` share the union's 32 bits.
        imm_data: wr.ex.bindgen_union_field,
        num_sge: list.len() as u32,
        ..SendWqe::default()
    };
    let mut ah = None;
    match opcode {
        wr_opcode::RDMA_WRITE | wr_opcode::RDMA_WRITE_WITH_IMM | wr_opcode::RDMA_READ => {
            // SAFETY: RDMA opcodes come in an `ib_rdma_wr` whose first field is `wr`.
            let r = unsafe { core::ptr::read_unaligned(w.cast::<b::ib_rdma_wr>()) };
            wqe.remote_addr = r.remote_addr;
            wqe.rkey = r.rkey;
        }
        wr_opcode::ATOMIC_CMP_AND_SWP | wr_opcode::ATOMIC_FETCH_AND_ADD => {
            // SAFETY: atomic opcodes come in an `ib_atomic_wr` whose first field is `wr`.
            let a = unsafe { core::ptr::read_unaligned(w.cast::<b::ib_atomic_wr>()) };
            wqe.remote_addr = a.remote_addr;
            wqe.rkey = a.rkey;
            wqe.compare_add = a.compare_add;
            wqe.swap = a.swap;
        }
        wr_opcode::REG_MR => {
            // SAFETY: REG_MR comes in an `ib_reg_wr` whose first field is `wr`; its MR is a
            // live fast-registration MR of ours that the consumer mapped (`map_mr_sg`), whose
            // `iova` and `length` ib_sg_to_pages set.
            let r = unsafe { core::ptr::read_unaligned(w.cast::<b::ib_reg_wr>()) };
            if r.mr.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: as above.
            let (iova, length) = unsafe { ((*r.mr).iova, (*r.mr).length) };
            wqe.rkey = r.key;
            wqe.remote_addr = iova;
            wqe.compare_add = length;
            wqe.swap = u64::from(r.access as u32);
            wqe.num_sge = 0;
        }
        _ if ud => {
            // SAFETY: sends on a UD or GSI QP come in an `ib_ud_wr` whose first field is `wr`.
            let u = unsafe { core::ptr::read_unaligned(w.cast::<b::ib_ud_wr>()) };
            if u.ah.is_null() {
                return Err(EINVAL);
            }
            wqe.remote_qpn = u.remote_qpn;
            wqe.remote_qkey = u.remote_qkey;
            // SAFETY: a non-NULL AH of a WR posted to our QP is a live AH of ours.
            ah = Some(unsafe { AhObj::<T>::data(u.ah) });
        }
        _ => {}
    }
    let mut inline: &[u8] = &[];
    if flags & uapi::send_flags::INLINE != 0 {
        let mut len = 0usize;
        for s in list {
            let n = s.length as usize;
            let end = len.checked_add(n).ok_or(EINVAL)?;
            let dst = inline_buf.get_mut(len..end).ok_or(EINVAL)?;
            // SAFETY: an SGE of an inline WR the consumer is posting (the contract above).
            unsafe { kmem::read_inline(s.addr, dst)? };
            len = end;
        }
        wqe.num_sge = 0;
        wqe.inline_len = len as u32;
        inline = &inline_buf[..len];
    }
    Ok(KSendWr {
        wqe,
        sges: if flags & uapi::send_flags::INLINE != 0 {
            &[]
        } else {
            list
        },
        inline,
        ah,
    })
}

/// `post_send` with a kernel consumer's list: each WR is queued in turn; the first one refused
/// is reported in `bad_wr` with its errno, and what was queued before it is processed. `who`
/// proves that the QP is a kernel consumer's (the trampoline refuses lists on user QPs).
///
/// # Safety
///
/// `qp` is a live QP of ours and `wr` a valid `ib_send_wr` chain of its kernel consumer.
pub(super) unsafe fn post_send<T: IbDriver>(
    _who: KernelConsumer,
    qp: *mut b::ib_qp,
    wr: *const b::ib_send_wr,
    bad_wr: *mut *const b::ib_send_wr,
) -> i32 {
    // SAFETY: per the contract above.
    let (d, data, qp_type) =
        unsafe { (dev::<T>((*qp).device), QpObj::<T>::data(qp), (*qp).qp_type) };
    let ud = qp_type == b::ib_qp_type_IB_QPT_UD || qp_type == b::ib_qp_type_IB_QPT_GSI;
    let mut sge_buf = [Sge::default(); lim::MAX_SGE as usize];
    let mut inline_buf = [0u8; lim::MAX_INLINE_DATA as usize];
    let mut cur = wr;
    let mut posted = 0u32;
    let mut err = 0;
    while !cur.is_null() {
        // SAFETY: `cur` is an element of the caller's valid chain.
        let r = unsafe { read_send_wr::<T>(cur, ud, &mut sge_buf, &mut inline_buf) }
            .and_then(|k| T::post_send_kernel(d, data, &k));
        if let Err(e) = r {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable `bad_wr` slot.
                unsafe { *bad_wr = cur };
            }
            err = e.to_errno();
            break;
        }
        posted += 1;
        // SAFETY: as above.
        cur = unsafe { core::ptr::addr_of!((*cur).next).read_unaligned() };
    }
    if posted > 0 {
        T::kernel_doorbell(d, data);
    }
    err
}

/// Walks an `ib_recv_wr` chain, handing each WR to `post`; the first refusal lands in `bad_wr`.
///
/// # Safety
///
/// `wr` is a valid `ib_recv_wr` chain; `bad_wr` NULL or writable.
unsafe fn walk_recv(
    wr: *const b::ib_recv_wr,
    bad_wr: *mut *const b::ib_recv_wr,
    mut post: impl FnMut(u64, &[Sge]) -> Result,
) -> i32 {
    let mut sge_buf = [Sge::default(); lim::MAX_SGE as usize];
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is an element of the caller's valid chain with a valid SGE list.
        let r = unsafe {
            let w = &*cur;
            sges(w.sg_list, w.num_sge, &mut sge_buf)
                .and_then(|l| post(w.__bindgen_anon_1.bindgen_union_field, l))
        };
        if let Err(e) = r {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable `bad_wr` slot.
                unsafe { *bad_wr = cur };
            }
            return e.to_errno();
        }
        // SAFETY: as above.
        cur = unsafe { core::ptr::addr_of!((*cur).next).read_unaligned() };
    }
    0
}

/// Refuses a non-empty receive list on a user object (a raw uverbs `POST_RECV` or
/// `POST_SRQ_RECV`: user WRs travel through the shared ring only): `EINVAL`, with the first WR
/// in `bad_wr`, as in rdma_rxe. An empty list is the same no-op for both.
///
/// # Safety
///
/// `bad_wr` is NULL or writable.
unsafe fn refuse_user_recv(
    who: Option<KernelConsumer>,
    wr: *const b::ib_recv_wr,
    bad_wr: *mut *const b::ib_recv_wr,
) -> Option<i32> {
    if who.is_some() || wr.is_null() {
        return None;
    }
    if !bad_wr.is_null() {
        // SAFETY: per the contract above.
        unsafe { *bad_wr = wr };
    }
    Some(EINVAL.to_errno())
}

/// # Safety
///
/// ib_core passes a live QP of ours and a valid chain (of its kernel consumer, unless the QP
/// is a user QP, whose lists are refused).
unsafe extern "C" fn post_recv<T: IbDriver>(
    qp: *mut b::ib_qp,
    wr: *const b::ib_recv_wr,
    bad_wr: *mut *const b::ib_recv_wr,
) -> i32 {
    // SAFETY: per the contract above.
    if let Some(e) = unsafe { refuse_user_recv(QpObj::<T>::kernel_consumer(qp), wr, bad_wr) } {
        return e;
    }
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*qp).device), QpObj::<T>::data(qp)) };
    // SAFETY: per the contract above.
    unsafe { walk_recv(wr, bad_wr, |id, l| T::post_recv_kernel(d, data, id, l)) }
}

/// # Safety
///
/// ib_core passes a live SRQ of ours and a valid chain (of its kernel consumer, unless the SRQ
/// is a user SRQ, whose lists are refused).
unsafe extern "C" fn post_srq_recv<T: IbDriver>(
    srq: *mut b::ib_srq,
    wr: *const b::ib_recv_wr,
    bad_wr: *mut *const b::ib_recv_wr,
) -> i32 {
    // SAFETY: per the contract above.
    if let Some(e) = unsafe { refuse_user_recv(SrqObj::<T>::kernel_consumer(srq), wr, bad_wr) } {
        return e;
    }
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*srq).device), SrqObj::<T>::data(srq)) };
    // SAFETY: per the contract above.
    unsafe { walk_recv(wr, bad_wr, |id, l| T::post_srq_recv_kernel(d, data, id, l)) }
}

/// `IBV_WC_*` flags of a [`uapi::Cqe`] as ib_core's `IB_WC_*` bits.
fn wc_flags(f: u32) -> i32 {
    let mut out = 0;
    if f & uapi::wc_flags::GRH != 0 {
        out |= b::ib_wc_flags_IB_WC_GRH;
    }
    if f & uapi::wc_flags::WITH_IMM != 0 {
        out |= b::ib_wc_flags_IB_WC_WITH_IMM;
    }
    if f & uapi::wc_flags::WITH_INV != 0 {
        out |= b::ib_wc_flags_IB_WC_WITH_INVALIDATE;
    }
    out as i32
}

/// `poll_cq` for a kernel consumer. A user CQ's completions are read from its shared ring by the
/// provider: uverbs `POLL_CQ` on it gets `EOPNOTSUPP`.
///
/// # Safety
///
/// ib_core passes a live CQ of ours and room for `num_entries` completions at `wc`.
unsafe extern "C" fn poll_cq<T: IbDriver>(
    cq: *mut b::ib_cq,
    num_entries: i32,
    wc: *mut b::ib_wc,
) -> i32 {
    // SAFETY: per the contract above.
    if unsafe { CqObj::<T>::kernel_consumer(cq) }.is_none() {
        return super::eopnotsupp().to_errno();
    }
    // SAFETY: per the contract above.
    let (d, data) = unsafe { (dev::<T>((*cq).device), CqObj::<T>::data(cq)) };
    let want = usize::try_from(num_entries).unwrap_or(0);
    let mut buf = [Wc::default(); 8];
    let mut done = 0usize;
    while done < want {
        let n = (want - done).min(buf.len());
        let got = T::poll_cq(d, data, &mut buf[..n]);
        for (i, w) in buf[..got].iter().enumerate() {
            let c = &w.cqe;
            let mut out = b::ib_wc::default();
            out.__bindgen_anon_1.bindgen_union_field = c.wr_id;
            out.status = c.status;
            out.opcode = c.opcode;
            out.vendor_err = c.vendor_err;
            out.byte_len = c.byte_len;
            out.qp = w.qp.0;
            out.ex.bindgen_union_field = c.imm_data;
            out.src_qp = c.src_qp;
            out.slid = u32::from(c.slid);
            out.wc_flags = wc_flags(c.wc_flags);
            out.pkey_index = c.pkey_index;
            out.sl = c.sl;
            out.dlid_path_bits = c.dlid_path_bits;
            out.port_num = 1;
            // SAFETY: `done + i < num_entries`: inside the caller's array.
            unsafe { ptr::write(wc.add(done + i), out) };
        }
        done += got;
        if got < n {
            break;
        }
    }
    done as i32
}

/// Makes a kernel consumer's MR object around driver data (ib_core fills `device`, `pd`,
/// `type` after we return).
fn new_mr<T: IbDriver>(make: impl FnOnce() -> Result<(T::Mr, MrKeys)>) -> *mut b::ib_mr {
    let r = (|| -> Result<*mut b::ib_mr> {
        let obj = KBox::new(
            MrObj::<T> {
                ib: Opaque::uninit(),
                owner: Owner::Kernel,
                data: MaybeUninit::uninit(),
            },
            GFP_KERNEL,
        )?;
        let (data, keys) = make()?;
        let raw = KBox::into_raw(obj);
        // SAFETY: `raw` is a fresh allocation whose data is uninitialised (written once here);
        // a zeroed `ib_mr` is its initial state.
        unsafe {
            (*raw).data.write(data);
            let mr = (*raw).ib.get();
            ptr::write_bytes(mr, 0, 1);
            (*mr).lkey = keys.lkey;
            (*mr).rkey = keys.rkey;
            Ok(mr)
        }
    })();
    match r {
        Ok(p) => p,
        // ERR_PTR(): the negative errno as a pointer.
        Err(e) => e.to_errno() as isize as *mut b::ib_mr,
    }
}

/// `alloc_mr`: fast-registration MRs only.
///
/// # Safety
///
/// ib_core passes a live PD of ours (kernel callers only).
unsafe extern "C" fn alloc_mr<T: IbDriver>(
    pd: *mut b::ib_pd,
    mr_type: b::ib_mr_type,
    max_num_sg: u32,
) -> *mut b::ib_mr {
    if mr_type != b::ib_mr_type_IB_MR_TYPE_MEM_REG {
        return super::eopnotsupp().to_errno() as isize as *mut b::ib_mr;
    }
    // SAFETY: per the contract above.
    if unsafe { PdObj::<T>::kernel_consumer(pd) }.is_none() {
        return EINVAL.to_errno() as isize as *mut b::ib_mr;
    }
    // SAFETY: per the contract above.
    let (d, pdd) = unsafe { (dev::<T>((*pd).device), PdObj::<T>::data(pd)) };
    new_mr::<T>(|| T::alloc_mr(d, pdd, max_num_sg))
}

/// `ib_sg_to_pages` callback: one page of the mapping.
///
/// # Safety
///
/// Called by `ib_sg_to_pages` on the MR `map_mr_sg` passed, a live fast MR of ours that
/// [`map_mr_sg`] found to be a kernel consumer's, with a page address of that consumer's
/// scatterlist.
unsafe extern "C" fn set_page<T: IbDriver>(mr: *mut b::ib_mr, addr: u64) -> i32 {
    // SAFETY: per the contract above; `MrObj` holds the data after the `ib_mr`; ib_core's
    // `ib_map_mr_sg` set `page_size` before it called `map_mr_sg`.
    let (d, data, size, who) = unsafe {
        (
            dev::<T>((*mr).device),
            MrObj::<T>::data(mr),
            u64::from((*mr).page_size),
            MrObj::<T>::kernel_consumer(mr),
        )
    };
    let Some(who) = who else {
        return EINVAL.to_errno();
    };
    // SAFETY: `addr` is a page `ib_sg_to_pages` passed for this kernel consumer's fast MR, of
    // the MR's `page_size` (the contract above).
    let page = match unsafe { MappedPage::new(who, addr, size) } {
        Ok(p) => p,
        Err(e) => return e.to_errno(),
    };
    match T::mr_map_page(d, data, page) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `map_mr_sg`: ib_core's `ib_sg_to_pages` walks the list (setting `iova` and `length`) and
/// hands each page to [`set_page`]. Returns the number of SG entries mapped.
///
/// # Safety
///
/// ib_core passes a live fast MR of ours, `sg_nents` valid entries and a valid or NULL offset.
unsafe extern "C" fn map_mr_sg<T: IbDriver>(
    mr: *mut b::ib_mr,
    sg: *mut b::scatterlist,
    sg_nents: i32,
    sg_offset: *mut u32,
) -> i32 {
    // SAFETY: per the contract above (only `alloc_mr` makes fast MRs, for kernel PDs).
    if unsafe { MrObj::<T>::kernel_consumer(mr) }.is_none() {
        return EINVAL.to_errno();
    }
    // SAFETY: per the contract above.
    let (d, data, page_size) = unsafe {
        (
            dev::<T>((*mr).device),
            MrObj::<T>::data(mr),
            (*mr).page_size,
        )
    };
    if let Err(e) = T::mr_map_begin(d, data, page_size) {
        return e.to_errno();
    }
    // SAFETY: per the contract above; `set_page` matches the callback's contract.
    unsafe { b::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(set_page::<T>)) }
}

/// `get_dma_mr`: an MR over all kernel memory for a kernel consumer (ib_core makes the PD's
/// `local_dma_lkey` from it).
///
/// # Safety
///
/// ib_core passes a live PD of ours (kernel callers only).
unsafe extern "C" fn get_dma_mr<T: IbDriver>(pd: *mut b::ib_pd, access: i32) -> *mut b::ib_mr {
    // SAFETY: per the contract above.
    let Some(who) = (unsafe { PdObj::<T>::kernel_consumer(pd) }) else {
        return EINVAL.to_errno() as isize as *mut b::ib_mr;
    };
    // SAFETY: per the contract above.
    let (d, pdd) = unsafe { (dev::<T>((*pd).device), PdObj::<T>::data(pd)) };
    new_mr::<T>(|| T::get_dma_mr(d, pdd, KernelVirt::new(who), access as u32))
}

impl super::objects::QpRef {
    /// The `ib_qp` as a kernel consumer's completion names it.
    pub(crate) fn handle(&self) -> QpHandle {
        QpHandle(self.0)
    }
}
