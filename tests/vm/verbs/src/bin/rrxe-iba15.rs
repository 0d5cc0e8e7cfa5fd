//! rrxe-iba15: IBA 1.5 memory placement and user-space invalidation between two devices, of
//! either driver (rrxe or rdma_rxe), in both directions (issue 27):
//!
//!   caps            rrxe advertises IB_DEVICE_ATOMIC_WRITE and IB_DEVICE_FLUSH_GLOBAL (not
//!                   FLUSH_PERSISTENT: it registers no persistent memory); rdma_rxe's are shown;
//!   atomic_write    an `ibv_wr_atomic_write` (and, from rrxe, an `ibv_post_send` of
//!                   IBV_WR_ATOMIC_WRITE with its 8 bytes inline) places exactly those 8 bytes
//!                   at the remote address and completes IBV_WC_ATOMIC_WRITE; the neighbours
//!                   are untouched; to an MR without REMOTE_WRITE it completes
//!                   IBV_WC_REM_ACCESS_ERR and nothing is placed;
//!   flush           (from rrxe: rdma-core 44 has no ibv_wr_flush, rrxe takes IBV_WR_FLUSH (14)
//!                   through ibv_post_send) an RDMA WRITE then FLUSH with global visibility of
//!                   the range and of the whole MR complete IBV_WC_FLUSH (8), with the data in
//!                   place; a persistent FLUSH (no MR can have FLUSH_PERSISTENT here: the
//!                   registration fails on both drivers over ordinary memory) and a FLUSH of an
//!                   MR without FLUSH rights complete IBV_WC_REM_ACCESS_ERR;
//!   local_inv       LOCAL_INV of an MR registered with ibv_reg_mr completes
//!                   IBV_WC_LOC_QP_OP_ERR (rdma_rxe's rule: only fast-registration MRs and
//!                   memory windows can be invalidated), through ibv_post_send and, on rrxe,
//!                   ibv_wr_local_inv;
//!   send_inv        SEND_WITH_INV naming such an MR: the responder fails the receive with
//!                   IBV_WC_REM_INV_REQ_ERR; naming a type-2 memory window bound on an
//!                   rdma_rxe responder: the message arrives with IBV_WC_WITH_INV and the
//!                   invalidated rkey, and an RDMA WRITE through that rkey then fails with
//!                   IBV_WC_REM_ACCESS_ERR (skipped where the responder has no memory windows).
//!
//!   rrxe-iba15 --dev rrxe0 --dev2 rrxe1 [--seed N]
//!
//! Prints PASS/FAIL/SKIP/INFO lines and "N passed, N failed"; exits non-zero on failure.

use rrxe_verbs_test::{dp, ffi, pair, util, verbs};

use pair::{expect, is_rrxe, one, send_wr};

use std::process::ExitCode;

use dp::{Dev, Rng, Side, ACCESS_ALL};
use ffi::*;
use util::{ename, errno, Report};
use verbs::{Mr, Pd, Qp};

/// `IB_ACCESS_FLUSH_GLOBAL` / `_PERSISTENT` (rdma-core 45's `IBV_ACCESS_FLUSH_*`).
const ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
const ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;
/// `IB_UVERBS_DEVICE_FLUSH_GLOBAL`, `_FLUSH_PERSISTENT`, `_ATOMIC_WRITE`.
const DEV_FLUSH_GLOBAL: u64 = 1 << 38;
const DEV_FLUSH_PERSISTENT: u64 = 1 << 39;
const DEV_ATOMIC_WRITE: u64 = 1 << 40;
/// `IBV_WR_FLUSH`, `IBV_WC_FLUSH` (rdma-core 45's values).
const WR_FLUSH: u32 = 14;
const WC_FLUSH: u32 = 8;
const FLUSH_GLOBAL: u32 = 1;
const FLUSH_PERSISTENT: u32 = 2;
const FLUSH_RANGE: u32 = 0;
const FLUSH_MR: u32 = 1;

const MR_LEN: usize = 1 << 16;
const EX_OPS: u64 = (IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;

fn cap() -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// A PD, CQ, MR (every right and FLUSH_GLOBAL) and an RC QP; with `ex`, an `ibv_qp_ex` QP
/// that takes SEND, RDMA WRITE, LOCAL_INV, SEND_WITH_INV and ATOMIC WRITE.
fn side(d: &Dev, ex: bool, mr_access: u32) -> Result<Side, String> {
    pair::rc_side(d, MR_LEN, mr_access, cap(), ex.then_some(EX_OPS))
}

/// A connected pair: `a` on `da` (the requester), `b` on `db`; both QPs allow remote READ,
/// WRITE, atomics and both FLUSH placement types.
fn pair(da: &Dev, db: &Dev, rng: &mut Rng, ex: bool) -> Result<(Side, Side), String> {
    let a = side(da, ex, ACCESS_ALL | ACCESS_FLUSH_GLOBAL)?;
    let b = side(
        db,
        false,
        ACCESS_ALL | ACCESS_FLUSH_GLOBAL | IBV_ACCESS_MW_BIND,
    )
    .or_else(|_| side(db, false, ACCESS_ALL | ACCESS_FLUSH_GLOBAL))?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, rng)?;
    for (d, s) in [(da, &a), (db, &b)] {
        let attr = ibv_qp_attr {
            qp_access_flags: IBV_ACCESS_REMOTE_WRITE
                | IBV_ACCESS_REMOTE_READ
                | IBV_ACCESS_REMOTE_ATOMIC
                | ACCESS_FLUSH_GLOBAL
                | ACCESS_FLUSH_PERSISTENT,
            ..zeroed()
        };
        s.qp.modify(&attr, IBV_QP_ACCESS_FLAGS).map_err(|e| {
            format!(
                "{}: RTS->RTS qp_access_flags with FLUSH_*: {}",
                d.name,
                ename(e)
            )
        })?;
    }
    Ok((a, b))
}

fn qpx(qp: &Qp) -> *mut ibv_qp_ex {
    // SAFETY: a live QP created with send_ops_flags.
    unsafe { ibv_qp_to_qp_ex(qp.ptr) }
}

/// Calls an `ibv_qp_ex` callback (the `ibv_wr_*` inlines).
macro_rules! wr {
    ($x:expr, $f:ident $(, $a:expr)*) => {
        // SAFETY: a live ibv_qp_ex of ours, arguments as the API requires.
        unsafe { ((*$x).$f.unwrap())($x $(, $a)*) }
    };
}

fn set(x: *mut ibv_qp_ex, id: u64, flags: u32) {
    // SAFETY: a live ibv_qp_ex.
    unsafe {
        (*x).wr_id = id;
        (*x).wr_flags = flags;
    }
}

fn caps(r: &mut Report, d: &Dev) {
    let mut a: ibv_device_attr_ex = zeroed();
    // SAFETY: valid context; `a` is a writable ibv_device_attr_ex.
    let rc = unsafe { vt_query_device_ex(d.ctx.ptr, &mut a) };
    let name = format!("caps.{}", d.name);
    if rc != 0 {
        return r.fail(&name, format!("ibv_query_device_ex: {}", ename(rc)));
    }
    let f = a.device_cap_flags_ex;
    let have = |b: u64| f & b != 0;
    let what = format!(
        "device_cap_flags_ex {f:#x}: ATOMIC_WRITE {} FLUSH_GLOBAL {} FLUSH_PERSISTENT {}",
        have(DEV_ATOMIC_WRITE),
        have(DEV_FLUSH_GLOBAL),
        have(DEV_FLUSH_PERSISTENT)
    );
    if !is_rrxe(d) {
        return r.info(&name, what);
    }
    if have(DEV_ATOMIC_WRITE) && have(DEV_FLUSH_GLOBAL) && !have(DEV_FLUSH_PERSISTENT) {
        r.pass(&name);
    } else {
        r.fail(&name, what);
    }
    // A FLUSH_PERSISTENT MR over ordinary memory: refused (rdma_rxe refuses it with EINVAL
    // for pages that are not persistent memory; ib_core refuses it with EOPNOTSUPP on a
    // device without IB_DEVICE_FLUSH_PERSISTENT).
}

fn persistent_mr_refused(d: &Dev) -> Result<(), String> {
    let pd = Pd::alloc(&d.ctx).map_err(|e| format!("ibv_alloc_pd: {}", ename(e)))?;
    match Mr::reg(
        &pd,
        MR_LEN,
        ACCESS_ALL | ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT,
    ) {
        Ok(_) => Err("ibv_reg_mr with FLUSH_PERSISTENT over anonymous memory succeeded".into()),
        Err(e) if e == libc::EINVAL || e == libc::EOPNOTSUPP => Ok(()),
        Err(e) => Err(format!("ibv_reg_mr with FLUSH_PERSISTENT: {}", ename(e))),
    }
}

fn atomic_write(da: &Dev, db: &Dev, rng: &mut Rng) -> Result<(), String> {
    let (a, b) = pair(da, db, rng, true)?;
    let before = b.mem(0, 128).to_vec();
    let value = rng.u64().to_ne_bytes();
    let x = qpx(&a.qp);
    wr!(x, wr_start);
    set(x, 1, IBV_SEND_SIGNALED);
    wr!(
        x,
        wr_atomic_write,
        b.rkey(),
        b.addr() + 64,
        value.as_ptr().cast()
    );
    let rc = wr!(x, wr_complete);
    if rc != 0 {
        return Err(format!("ibv_wr_complete: {}", ename(rc)));
    }
    let w = one(&a.cq, "ATOMIC WRITE completion")?;
    expect(
        &w,
        IBV_WC_SUCCESS,
        Some(IBV_WC_ATOMIC_WRITE),
        "ibv_wr_atomic_write",
    )?;
    let mut want = before.clone();
    want[64..72].copy_from_slice(&value);
    if b.mem(0, 128) != want.as_slice() {
        return Err(format!(
            "responder memory: 56..80 {:02x?}, want {:02x?}",
            &b.mem(0, 128)[56..80],
            &want[56..80]
        ));
    }
    if is_rrxe(da) {
        // ibv_post_send: the 8 bytes inline (as rdma_rxe's atomic_wr is its inline area).
        let v2 = rng.u64().to_ne_bytes();
        let mut sge = [ibv_sge {
            addr: v2.as_ptr() as u64,
            length: 8,
            lkey: 0,
        }];
        let mut w = send_wr(
            2,
            IBV_WR_ATOMIC_WRITE,
            IBV_SEND_SIGNALED | IBV_SEND_INLINE,
            &mut sge,
        );
        w.wr.rdma.remote_addr = b.addr() + 80;
        w.wr.rdma.rkey = b.rkey();
        dp::post_send(&a.qp, &mut w)?;
        let c = one(&a.cq, "post_send ATOMIC WRITE completion")?;
        expect(
            &c,
            IBV_WC_SUCCESS,
            Some(IBV_WC_ATOMIC_WRITE),
            "post_send ATOMIC WRITE",
        )?;
        want[80..88].copy_from_slice(&v2);
        if b.mem(0, 128) != want.as_slice() {
            return Err(format!(
                "responder memory after post_send: 72..96 {:02x?}, want {:02x?}",
                &b.mem(0, 128)[72..96],
                &want[72..96]
            ));
        }
    }
    Ok(())
}

fn atomic_write_no_rights(da: &Dev, db: &Dev, rng: &mut Rng) -> Result<(), String> {
    let (a, b) = pair(da, db, rng, true)?;
    let ro = Mr::reg(
        &b.pd,
        4096,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
    )
    .map_err(|e| format!("ibv_reg_mr without REMOTE_WRITE: {}", ename(e)))?;
    // SAFETY: a live MR.
    let (raddr, rkey) = unsafe { ((*ro.ptr).addr as u64, (*ro.ptr).rkey) };
    // SAFETY: inside the MR's buffer; nothing else touches it now.
    let before = unsafe { std::slice::from_raw_parts(raddr as *const u8, 16).to_vec() };
    let value = [0x5au8; 8];
    let x = qpx(&a.qp);
    wr!(x, wr_start);
    set(x, 1, IBV_SEND_SIGNALED);
    wr!(x, wr_atomic_write, rkey, raddr, value.as_ptr().cast());
    let rc = wr!(x, wr_complete);
    if rc != 0 {
        return Err(format!("ibv_wr_complete: {}", ename(rc)));
    }
    let w = one(&a.cq, "ATOMIC WRITE completion")?;
    expect(
        &w,
        IBV_WC_REM_ACCESS_ERR,
        None,
        "ATOMIC WRITE without REMOTE_WRITE",
    )?;
    // SAFETY: as above.
    let after = unsafe { std::slice::from_raw_parts(raddr as *const u8, 16).to_vec() };
    if after != before {
        return Err("the MR without REMOTE_WRITE was written".into());
    }
    Ok(())
}

fn flush_wr(id: u64, rkey: u32, addr: u64, len: u64, ty: u32, level: u32) -> ibv_send_wr {
    let mut w = send_wr(id, WR_FLUSH, IBV_SEND_SIGNALED, &mut []);
    w.wr.atomic.remote_addr = addr;
    w.wr.atomic.rkey = rkey;
    w.wr.atomic.compare_add = len;
    w.imm_data_invalidated_rkey_union.invalidated_rkey = ty | level << 4;
    w
}

fn flush(da: &Dev, db: &Dev, rng: &mut Rng) -> Result<(), String> {
    let (a, b) = pair(da, db, rng, false)?;
    let mut data = vec![0u8; 4096];
    rng.fill(&mut data);
    a.mem(0, 4096).copy_from_slice(&data);
    let mut sge = [a.sge(0, 4096)];
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE, 0, &mut sge);
    w.wr.rdma.remote_addr = b.addr() + 8192;
    w.wr.rdma.rkey = b.rkey();
    dp::post_send(&a.qp, &mut w)?;
    let mut f1 = flush_wr(
        2,
        b.rkey(),
        b.addr() + 8192,
        4096,
        FLUSH_GLOBAL,
        FLUSH_RANGE,
    );
    dp::post_send(&a.qp, &mut f1)?;
    let mut f2 = flush_wr(3, b.rkey(), 0, 0, FLUSH_GLOBAL, FLUSH_MR);
    dp::post_send(&a.qp, &mut f2)?;
    for id in [2, 3] {
        let c = one(&a.cq, "FLUSH completion")?;
        if c.wr_id != id {
            return Err(format!(
                "completion {} where FLUSH {id} was due",
                dp::wc_str(&c)
            ));
        }
        expect(&c, IBV_WC_SUCCESS, Some(WC_FLUSH), "FLUSH global")?;
        if b.mem(8192, 4096) != data.as_slice() {
            return Err(format!(
                "FLUSH {id} completed before the WRITE's data was in place"
            ));
        }
    }
    // Persistent placement: the MR has no FLUSH_PERSISTENT (none can, here).
    let mut f3 = flush_wr(4, b.rkey(), b.addr(), 64, FLUSH_PERSISTENT, FLUSH_RANGE);
    dp::post_send(&a.qp, &mut f3)?;
    let c = one(&a.cq, "persistent FLUSH completion")?;
    expect(
        &c,
        IBV_WC_REM_ACCESS_ERR,
        None,
        "persistent FLUSH of a global-only MR",
    )
}

fn flush_no_rights(da: &Dev, db: &Dev, rng: &mut Rng) -> Result<(), String> {
    let (a, b) = pair(da, db, rng, false)?;
    let plain =
        Mr::reg(&b.pd, 4096, ACCESS_ALL).map_err(|e| format!("ibv_reg_mr: {}", ename(e)))?;
    // SAFETY: a live MR.
    let (raddr, rkey) = unsafe { ((*plain.ptr).addr as u64, (*plain.ptr).rkey) };
    let mut f = flush_wr(1, rkey, raddr, 64, FLUSH_GLOBAL, FLUSH_RANGE);
    dp::post_send(&a.qp, &mut f)?;
    let c = one(&a.cq, "FLUSH completion")?;
    expect(
        &c,
        IBV_WC_REM_ACCESS_ERR,
        None,
        "FLUSH of an MR without FLUSH rights",
    )
}

fn local_inv(da: &Dev, db: &Dev, rng: &mut Rng, ex: bool) -> Result<Option<String>, String> {
    let (a, _b) = pair(da, db, rng, ex)?;
    if ex {
        let x = qpx(&a.qp);
        wr!(x, wr_start);
        set(x, 1, IBV_SEND_SIGNALED);
        wr!(x, wr_local_inv, a.lkey());
        let rc = wr!(x, wr_complete);
        if rc != 0 {
            return Err(format!("ibv_wr_complete: {}", ename(rc)));
        }
    } else {
        let mut w = send_wr(1, IBV_WR_LOCAL_INV, IBV_SEND_SIGNALED, &mut []);
        w.imm_data_invalidated_rkey_union.invalidated_rkey = a.lkey();
        dp::post_send(&a.qp, &mut w)?;
    }
    let c = one(&a.cq, "LOCAL_INV completion")?;
    if is_rrxe(da) {
        expect(
            &c,
            IBV_WC_LOC_QP_OP_ERR,
            Some(IBV_WC_LOCAL_INV),
            "LOCAL_INV of an ibv_reg_mr MR",
        )?;
        return Ok(None);
    }
    // rdma_rxe 6.12 sets LOC_QP_OP_ERR on the WQE, moves the QP to ERR and then flushes the
    // whole send queue, this WR included (the same bug as errors.bad_lkey.loc_prot_err):
    // any unsuccessful completion is its refusal.
    if c.status == IBV_WC_SUCCESS {
        return Err(format!("LOCAL_INV of an ibv_reg_mr MR: {}", dp::wc_str(&c)));
    }
    Ok(Some(format!(
        "rdma_rxe completes the refused LOCAL_INV as {} (it flushes the WR it failed)",
        dp::wc_str(&c)
    )))
}

fn send_inv_user_mr(da: &Dev, db: &Dev, rng: &mut Rng) -> Result<(), String> {
    let ex = is_rrxe(da);
    let (a, b) = pair(da, db, rng, ex)?;
    let mut rsge = [b.sge(0, 4096)];
    let mut rw: ibv_recv_wr = zeroed();
    rw.wr_id = 9;
    rw.sg_list = rsge.as_mut_ptr();
    rw.num_sge = 1;
    dp::post_recv(&b.qp, &mut rw)?;
    if ex {
        let x = qpx(&a.qp);
        wr!(x, wr_start);
        set(x, 1, IBV_SEND_SIGNALED);
        wr!(x, wr_send_inv, b.rkey());
        wr!(x, wr_set_sge, a.lkey(), a.addr(), 32);
        let rc = wr!(x, wr_complete);
        if rc != 0 {
            return Err(format!("ibv_wr_complete: {}", ename(rc)));
        }
    } else {
        let mut sge = [a.sge(0, 32)];
        let mut w = send_wr(1, IBV_WR_SEND_WITH_INV, IBV_SEND_SIGNALED, &mut sge);
        w.imm_data_invalidated_rkey_union.invalidated_rkey = b.rkey();
        dp::post_send(&a.qp, &mut w)?;
    }
    let c = one(&b.cq, "receive completion")?;
    expect(
        &c,
        IBV_WC_REM_INV_REQ_ERR,
        None,
        "SEND_WITH_INV naming an ibv_reg_mr MR",
    )
}

/// SEND_WITH_INV naming a type-2 memory window bound on the responder (rdma_rxe).
fn send_inv_mw(da: &Dev, db: &Dev, rng: &mut Rng) -> Result<Option<String>, String> {
    let (a, b) = pair(da, db, rng, false)?;
    // SAFETY: a live PD.
    let mw = unsafe { vt_alloc_mw(b.pd.ptr, 2) };
    if mw.is_null() {
        return Ok(Some(format!(
            "{}: ibv_alloc_mw(type 2): {}",
            db.name,
            ename(errno())
        )));
    }
    let res = (|| {
        // SAFETY: a live MW.
        let new_rkey = unsafe { ((*mw).rkey & 0xffff_ff00) | (((*mw).rkey + 1) & 0xff) };
        let mut bw = send_wr(1, IBV_WR_BIND_MW, IBV_SEND_SIGNALED, &mut []);
        bw.bind_mw_tso_union.bind_mw = bind_mw_t {
            mw,
            rkey: new_rkey,
            bind_info: ibv_mw_bind_info {
                mr: b.mr.ptr,
                addr: b.addr(),
                length: 4096,
                mw_access_flags: IBV_ACCESS_REMOTE_WRITE,
            },
        };
        dp::post_send(&b.qp, &mut bw)?;
        let c = one(&b.cq, "BIND_MW completion")?;
        expect(&c, IBV_WC_SUCCESS, Some(IBV_WC_BIND_MW), "type-2 bind")?;
        let mut rsge = [b.sge(8192, 4096)];
        let mut rw: ibv_recv_wr = zeroed();
        rw.wr_id = 9;
        rw.sg_list = rsge.as_mut_ptr();
        rw.num_sge = 1;
        dp::post_recv(&b.qp, &mut rw)?;
        let mut data = [0u8; 48];
        rng.fill(&mut data);
        a.mem(0, 48).copy_from_slice(&data);
        let mut sge = [a.sge(0, 48)];
        let mut w = send_wr(2, IBV_WR_SEND_WITH_INV, IBV_SEND_SIGNALED, &mut sge);
        w.imm_data_invalidated_rkey_union.invalidated_rkey = new_rkey;
        dp::post_send(&a.qp, &mut w)?;
        let c = one(&a.cq, "SEND_WITH_INV completion")?;
        expect(
            &c,
            IBV_WC_SUCCESS,
            Some(IBV_WC_SEND),
            "SEND_WITH_INV (requester)",
        )?;
        let c = one(&b.cq, "receive completion")?;
        expect(
            &c,
            IBV_WC_SUCCESS,
            Some(IBV_WC_RECV),
            "SEND_WITH_INV (receive)",
        )?;
        // SAFETY: a union of two u32s.
        let inv = unsafe { c.imm_data_invalidated_rkey_union.invalidated_rkey };
        // rdma_rxe 6.12 writes the kernel's IB_WC_WITH_INVALIDATE (1 << 2) into a user CQE,
        // which libibverbs reads as IBV_WC_IP_CSUM_OK; IBV_WC_WITH_INV is 1 << 3.
        let with_inv =
            c.wc_flags & IBV_WC_WITH_INV != 0 || (!is_rrxe(db) && c.wc_flags & (1 << 2) != 0);
        if !with_inv || inv != new_rkey || c.byte_len != 48 {
            return Err(format!(
                "receive: {} (want WITH_INV of {new_rkey:#x}, 48 bytes)",
                dp::wc_str(&c)
            ));
        }
        if b.mem(8192, 48) != data.as_slice() {
            return Err("received data differs".into());
        }
        // The window is invalid now: a WRITE through it is an access error.
        let mut sge = [a.sge(0, 8)];
        let mut w = send_wr(3, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &mut sge);
        w.wr.rdma.remote_addr = b.addr();
        w.wr.rdma.rkey = new_rkey;
        dp::post_send(&a.qp, &mut w)?;
        let c = one(&a.cq, "WRITE completion")?;
        expect(
            &c,
            IBV_WC_REM_ACCESS_ERR,
            None,
            "WRITE through the invalidated window",
        )
    })();
    // The window goes after the QPs and before its PD and MR.
    drop(a);
    let Side { qp, mr, cq, pd } = b;
    drop(qp);
    // SAFETY: a live MW; its QP is gone, its PD and MR are still alive.
    unsafe { vt_dealloc_mw(mw) };
    drop((mr, cq, pd));
    res.map(|()| None)
}

fn direction(r: &mut Report, da: &Dev, db: &Dev, rng: &mut Rng) {
    let dir = format!("{}_to_{}", da.name, db.name);
    r.result(&format!("atomic_write.{dir}"), atomic_write(da, db, rng));
    r.result(
        &format!("atomic_write.no_remote_write.{dir}"),
        atomic_write_no_rights(da, db, rng),
    );
    if is_rrxe(da) {
        r.result(&format!("flush.global.{dir}"), flush(da, db, rng));
        r.result(
            &format!("flush.no_flush_rights.{dir}"),
            flush_no_rights(da, db, rng),
        );
    } else {
        r.skip(
            &format!("flush.{dir}"),
            "rdma-core 44 has no ibv_wr_flush, and rdma_rxe's provider no other way to post one",
        );
    }
    for ex in [false, true] {
        if ex && !is_rrxe(da) {
            continue;
        }
        let name = format!(
            "local_inv.user_mr.{}.{dir}",
            if ex { "qp_ex" } else { "post_send" }
        );
        match local_inv(da, db, rng, ex) {
            Ok(note) => {
                if let Some(n) = note {
                    r.info(&name, n);
                }
                r.pass(&name);
            }
            Err(e) => r.fail(&name, e),
        }
    }
    r.result(
        &format!("send_inv.user_mr.{dir}"),
        send_inv_user_mr(da, db, rng),
    );
    let name = format!("send_inv.mw.{dir}");
    match send_inv_mw(da, db, rng) {
        Ok(None) => r.pass(&name),
        Ok(Some(why)) => r.skip(&name, why),
        Err(e) => r.fail(&name, e),
    }
}

fn main() -> ExitCode {
    pair::run("rrxe-iba15", |r, d0, d1, rng| {
        caps(r, d0);
        caps(r, d1);
        for d in [d0, d1] {
            r.result(
                &format!("persistent_mr_refused.{}", d.name),
                persistent_mr_refused(d),
            );
        }
        direction(r, d0, d1, rng);
        direction(r, d1, d0, rng);
    })
}
