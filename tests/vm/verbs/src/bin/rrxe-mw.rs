//! rrxe-mw: memory windows, type 1 and type 2 (issue 27). The windows live on `--dev2` (the
//! responder, where they are bound); `--dev` is the requester that reaches memory through
//! their rkeys. Either device may be rrxe or rdma_rxe: the remote-access cases run against
//! both, the bind-rule cases (MW_BIND_ERR, dereg refusal) only where the binding device is
//! rrxe (rdma_rxe's own rules differ in places, see kmod/logic/mw.rs).
//!
//!   caps              IBV_DEVICE_MEM_WINDOW and _TYPE_2B, max_mw > 0 (rrxe);
//!   type1             ibv_bind_mw over part of an MR registered with LOCAL_WRITE|MW_BIND only:
//!                     BIND_MW completion, new rkey; RDMA WRITE and READ through the window's
//!                     rkey move the bytes (verified), at its edges too; a WRITE one byte past
//!                     the window and a WRITE through a read-only window get
//!                     IBV_WC_REM_ACCESS_ERR; the MR cannot be deregistered while the window is
//!                     bound (EINVAL); rebinding with length 0 unbinds it (access fails);
//!   type2             IBV_WR_BIND_MW through ibv_post_send, and (rrxe) ibv_wr_bind_mw with a
//!                     zero-based window: WRITE/READ verified; LOCAL_INV of its rkey (then
//!                     access fails); SEND_WITH_INV of its rkey (IBV_WC_WITH_INV at the
//!                     receiver, then access fails); deallocation invalidates it;
//!   bind_err          (rrxe binder) each broken rule completes IBV_WC_MW_BIND_ERR and moves
//!                     the QP to ERR: MR without MW_BIND, remote-write window over an MR without
//!                     local write, range past the MR, zero-based type 1, type-1 window in a
//!                     bind WR, type-2 bind keeping the key, type-2 window not free, window of
//!                     another PD.
//!
//!   rrxe-mw --dev rrxe0 --dev2 rrxe1 [--seed N]
//!
//! Prints PASS/FAIL/SKIP/INFO lines and "N passed, N failed"; exits non-zero on failure.

use rrxe_verbs_test::{dp, ffi, pair, util, verbs};

use pair::{expect, is_rrxe, one, send_wr};

use std::process::ExitCode;
use std::ptr;

use dp::{Dev, Rng, Side};
use ffi::*;
use util::{ename, errno, Report};
use verbs::{Mr, Pd};

const MR_LEN: usize = 1 << 16;
/// `IBV_DEVICE_MEM_WINDOW`, `IBV_DEVICE_MEM_WINDOW_TYPE_2B`.
const DEV_MW: u32 = 1 << 17;
const DEV_MW_2B: u32 = 1 << 24;
/// Window placement in the MR: [WIN_OFF, WIN_OFF + WIN_LEN).
const WIN_OFF: u64 = 4096;
const WIN_LEN: u64 = 8192;

fn cap() -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    }
}

/// A side whose MR has `mr_access`; with `ex`, its QP takes `ibv_wr_bind_mw`.
fn side(d: &Dev, mr_access: u32, ex: bool) -> Result<Side, String> {
    let ops = (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW) as u64;
    pair::rc_side(d, MR_LEN, mr_access, cap(), ex.then_some(ops))
}

/// A connected pair: `a` (requester, every right) on `da`, `b` (window owner, its MR with
/// `mr_access`) on `db`; `b`'s QP allows remote READ and WRITE.
fn pair(
    da: &Dev,
    db: &Dev,
    rng: &mut Rng,
    mr_access: u32,
    ex: bool,
) -> Result<(Side, Side), String> {
    let a = side(da, dp::ACCESS_ALL, false)?;
    let b = side(db, mr_access, ex)?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, rng)?;
    Ok((a, b))
}

/// A window of `ty` in `pd`, deallocated on drop.
struct Mw(*mut ibv_mw);

impl Mw {
    fn alloc(pd: &Pd, ty: i32) -> Result<Mw, String> {
        // SAFETY: a live PD.
        let p = unsafe { vt_alloc_mw(pd.ptr, ty) };
        if p.is_null() {
            return Err(format!("ibv_alloc_mw(type {ty}): {}", ename(errno())));
        }
        Ok(Mw(p))
    }

    fn rkey(&self) -> u32 {
        // SAFETY: a live window.
        unsafe { (*self.0).rkey }
    }

    fn dealloc(mut self) -> Result<(), String> {
        let p = std::mem::replace(&mut self.0, ptr::null_mut());
        // SAFETY: allocated by us, deallocated once (Drop sees null).
        match unsafe { vt_dealloc_mw(p) } {
            0 => Ok(()),
            e => Err(format!("ibv_dealloc_mw: {}", ename(e))),
        }
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by us, deallocated once.
            unsafe { vt_dealloc_mw(self.0) };
        }
    }
}

fn inc_rkey(k: u32) -> u32 {
    (k & 0xffff_ff00) | (k.wrapping_add(1) & 0xff)
}

fn info(mr: &Mr, off: u64, len: u64, access: u32) -> ibv_mw_bind_info {
    ibv_mw_bind_info {
        mr: mr.ptr,
        // SAFETY: a live MR.
        addr: unsafe { (*mr.ptr).addr as u64 } + off,
        length: len,
        mw_access_flags: access,
    }
}

/// `ibv_bind_mw` (type 1), then its completion's status.
fn bind1(b: &Side, mw: &Mw, info: ibv_mw_bind_info) -> Result<ibv_wc, String> {
    let mut mb = ibv_mw_bind {
        wr_id: 0xb1,
        send_flags: IBV_SEND_SIGNALED,
        bind_info: info,
    };
    // SAFETY: live QP and window; `mb` lives across the call.
    let rc = unsafe { vt_bind_mw(b.qp.ptr, mw.0, &mut mb) };
    if rc != 0 {
        return Err(format!("ibv_bind_mw: {}", ename(rc)));
    }
    one(&b.cq, "bind completion")
}

/// An `IBV_WR_BIND_MW` WR through `ibv_post_send` with rkey `rkey`, then its completion.
fn bind2(b: &Side, mw: &Mw, rkey: u32, info: ibv_mw_bind_info) -> Result<ibv_wc, String> {
    let mut w = send_wr(0xb2, IBV_WR_BIND_MW, IBV_SEND_SIGNALED, &mut []);
    w.bind_mw_tso_union.bind_mw = bind_mw_t {
        mw: mw.0,
        rkey,
        bind_info: info,
    };
    dp::post_send(&b.qp, &mut w)?;
    one(&b.cq, "bind completion")
}

/// An RDMA `op` (WRITE or READ) of `len` bytes between `a`'s MR at 0 and remote `raddr` under
/// `rkey`; its completion.
fn rdma(a: &Side, op: u32, rkey: u32, raddr: u64, len: usize) -> Result<ibv_wc, String> {
    let mut sge = [a.sge(0, len)];
    let mut w = send_wr(0xd0, op, IBV_SEND_SIGNALED, &mut sge);
    w.wr.rdma.remote_addr = raddr;
    w.wr.rdma.rkey = rkey;
    dp::post_send(&a.qp, &mut w)?;
    one(&a.cq, "RDMA completion")
}

/// WRITE random bytes through the window at window address `waddr` (landing at MR offset
/// `moff`), then READ them back: both verified.
fn write_read(
    a: &Side,
    b: &Side,
    rng: &mut Rng,
    rkey: u32,
    waddr: u64,
    moff: usize,
    len: usize,
) -> Result<(), String> {
    let mut data = vec![0u8; len];
    rng.fill(&mut data);
    a.mem(0, len).copy_from_slice(&data);
    let c = rdma(a, IBV_WR_RDMA_WRITE, rkey, waddr, len)?;
    expect(
        &c,
        IBV_WC_SUCCESS,
        Some(IBV_WC_RDMA_WRITE),
        "WRITE through the window",
    )?;
    if b.mem(moff, len) != data.as_slice() {
        return Err(format!(
            "WRITE through the window at {waddr:#x}: MR bytes at {moff} differ"
        ));
    }
    let mut back = vec![0u8; len];
    rng.fill(&mut back);
    b.mem(moff, len).copy_from_slice(&back);
    a.mem(0, len).fill(0);
    let c = rdma(a, IBV_WR_RDMA_READ, rkey, waddr, len)?;
    expect(
        &c,
        IBV_WC_SUCCESS,
        Some(IBV_WC_RDMA_READ),
        "READ through the window",
    )?;
    if a.mem(0, len) != back.as_slice() {
        return Err(format!(
            "READ through the window at {waddr:#x}: bytes differ"
        ));
    }
    Ok(())
}

/// A WRITE of `len` bytes at `raddr` under `rkey` must fail with a remote access error, and
/// leave the responder's MR untouched.
fn denied(a: &Side, b: &Side, rkey: u32, raddr: u64, len: usize, what: &str) -> Result<(), String> {
    let before = b.mem(0, MR_LEN).to_vec();
    a.mem(0, len).fill(0xee);
    let c = rdma(a, IBV_WR_RDMA_WRITE, rkey, raddr, len)?;
    expect(&c, IBV_WC_REM_ACCESS_ERR, None, what)?;
    if b.mem(0, MR_LEN) != before.as_slice() {
        return Err(format!("{what}: the responder's memory changed"));
    }
    Ok(())
}

const MR_MW: u32 = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
const RW: u32 = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

fn caps(d: &Dev) -> Result<(), String> {
    let a = d
        .ctx
        .query_device()
        .map_err(|e| format!("ibv_query_device: {}", ename(e)))?;
    let f = a.device_cap_flags;
    if f & DEV_MW == 0 || f & DEV_MW_2B == 0 || a.max_mw <= 0 {
        return Err(format!(
            "device_cap_flags {f:#x} (want MEM_WINDOW and _TYPE_2B), max_mw {}",
            a.max_mw
        ));
    }
    Ok(())
}

/// Type 1: bind, WRITE/READ at both edges, out of window, rights, dereg refused, unbind.
fn type1(da: &Dev, db: &Dev, rng: &mut Rng, r: &mut Report, dir: &str) -> Result<(), String> {
    let (a, b) = pair(da, db, rng, MR_MW, false)?;
    let mw = Mw::alloc(&b.pd, 1)?;
    let old = mw.rkey();
    let c = bind1(&b, &mw, info(&b.mr, WIN_OFF, WIN_LEN, RW))?;
    expect(&c, IBV_WC_SUCCESS, Some(IBV_WC_BIND_MW), "type-1 bind")?;
    let k = mw.rkey();
    if k == old || k >> 8 != old >> 8 {
        return Err(format!("rkey after bind {k:#x} (was {old:#x})"));
    }
    let base = b.addr() + WIN_OFF;
    write_read(&a, &b, rng, k, base, WIN_OFF as usize, 256)?;
    write_read(
        &a,
        &b,
        rng,
        k,
        base + WIN_LEN - 64,
        (WIN_OFF + WIN_LEN) as usize - 64,
        64,
    )?;
    if is_rrxe(db) {
        // Bound windows keep the MR registered (IBA 10.6.7.2.6).
        // SAFETY: a live MR.
        let rc = unsafe { ibv_dereg_mr(b.mr.ptr) };
        if rc == 0 {
            // It is gone: the side must not deregister it again.
            std::mem::forget(b);
            return Err("ibv_dereg_mr with a bound window succeeded (want EINVAL)".into());
        }
        if rc != libc::EINVAL {
            return Err(format!(
                "ibv_dereg_mr with a bound window: {} (want EINVAL)",
                ename(rc)
            ));
        }
        r.pass(&format!("type1.dereg_refused.{dir}"));
    }
    // Type-1 unbind: length 0, then the rkey reaches nothing.
    let c = bind1(
        &b,
        &mw,
        ibv_mw_bind_info {
            mr: b.mr.ptr,
            addr: b.addr(),
            length: 0,
            mw_access_flags: 0,
        },
    )?;
    expect(&c, IBV_WC_SUCCESS, Some(IBV_WC_BIND_MW), "type-1 unbind")?;
    denied(
        &a,
        &b,
        mw.rkey(),
        base,
        8,
        "WRITE through an unbound type-1 window",
    )?;
    mw.dealloc()?;
    // With no window left the MR goes.
    let Side { qp, mr, cq, pd } = b;
    drop(qp);
    mr.destroy()
        .map_err(|e| format!("ibv_dereg_mr after the window went: {}", ename(e)))?;
    drop((cq, pd));
    Ok(())
}

/// Out of the window by one byte, and rights: each on a fresh pair (an access error ends the
/// QP). rdma_rxe 6.12 checks an access through a window against the MR's range, not the
/// window's (rxe_resp.c check_rkey: `mr_check_range(mr, ...)` after `rxe_lookup_mw`): on an
/// rdma_rxe binder the bounds cases are reported as INFO, not failed.
fn type1_denied(
    da: &Dev,
    db: &Dev,
    rng: &mut Rng,
    r: &mut Report,
    dir: &str,
) -> Result<(), String> {
    for (access, off, len, what) in [
        (RW, WIN_LEN - 8, 9, "WRITE one byte past the window"),
        (RW, 0u64.wrapping_sub(8), 8, "WRITE just below the window"),
        (
            IBV_ACCESS_REMOTE_READ,
            0,
            8,
            "WRITE through a read-only window",
        ),
    ] {
        let (a, b) = pair(da, db, rng, MR_MW, false)?;
        let mw = Mw::alloc(&b.pd, 1)?;
        let c = bind1(&b, &mw, info(&b.mr, WIN_OFF, WIN_LEN, access))?;
        expect(&c, IBV_WC_SUCCESS, Some(IBV_WC_BIND_MW), "type-1 bind")?;
        let at = (b.addr() + WIN_OFF).wrapping_add(off);
        match denied(&a, &b, mw.rkey(), at, len, what) {
            Err(e) if !is_rrxe(db) && access == RW => r.info(
                &format!("type1.denied.rdma_rxe_window_bounds.{dir}"),
                format!("rdma_rxe 6.12 bug (MR range checked, not the window's): {e}"),
            ),
            res => res?,
        }
    }
    Ok(())
}

/// Type 2 bound by ibv_post_send, then invalidated by `how`: "local_inv", "send_inv" or
/// "dealloc"; then access fails.
fn type2(da: &Dev, db: &Dev, rng: &mut Rng, how: &str) -> Result<(), String> {
    let (a, b) = pair(da, db, rng, MR_MW, false)?;
    let mw = Mw::alloc(&b.pd, 2)?;
    let k = inc_rkey(mw.rkey());
    let c = bind2(&b, &mw, k, info(&b.mr, WIN_OFF, WIN_LEN, RW))?;
    expect(&c, IBV_WC_SUCCESS, Some(IBV_WC_BIND_MW), "type-2 bind")?;
    let base = b.addr() + WIN_OFF;
    write_read(&a, &b, rng, k, base + 512, (WIN_OFF + 512) as usize, 1000)?;
    match how {
        "local_inv" => {
            let mut w = send_wr(0x1e, IBV_WR_LOCAL_INV, IBV_SEND_SIGNALED, &mut []);
            w.imm_data_invalidated_rkey_union.invalidated_rkey = k;
            dp::post_send(&b.qp, &mut w)?;
            let c = one(&b.cq, "LOCAL_INV completion")?;
            expect(
                &c,
                IBV_WC_SUCCESS,
                Some(IBV_WC_LOCAL_INV),
                "LOCAL_INV of the window",
            )?;
        }
        "send_inv" => {
            let mut rsge = [b.sge(40960, 64)];
            let mut rw: ibv_recv_wr = zeroed();
            rw.wr_id = 9;
            rw.sg_list = rsge.as_mut_ptr();
            rw.num_sge = 1;
            dp::post_recv(&b.qp, &mut rw)?;
            let mut sge = [a.sge(0, 32)];
            let mut w = send_wr(0x5e, IBV_WR_SEND_WITH_INV, IBV_SEND_SIGNALED, &mut sge);
            w.imm_data_invalidated_rkey_union.invalidated_rkey = k;
            dp::post_send(&a.qp, &mut w)?;
            let c = one(&a.cq, "SEND_WITH_INV completion")?;
            expect(&c, IBV_WC_SUCCESS, Some(IBV_WC_SEND), "SEND_WITH_INV")?;
            let c = one(&b.cq, "receive completion")?;
            expect(
                &c,
                IBV_WC_SUCCESS,
                Some(IBV_WC_RECV),
                "SEND_WITH_INV receive",
            )?;
            // SAFETY: a union of two u32s.
            let inv = unsafe { c.imm_data_invalidated_rkey_union.invalidated_rkey };
            // rdma_rxe 6.12 reports the kernel's IB_WC_WITH_INVALIDATE bit (1 << 2).
            let flag =
                c.wc_flags & IBV_WC_WITH_INV != 0 || (!is_rrxe(db) && c.wc_flags & (1 << 2) != 0);
            if !flag || inv != k {
                return Err(format!(
                    "receive: {} (want WITH_INV of {k:#x})",
                    dp::wc_str(&c)
                ));
            }
        }
        _ => mw.dealloc()?,
    }
    denied(
        &a,
        &b,
        k,
        base + 512,
        8,
        "WRITE through the invalidated window",
    )
}

/// Type 2 bound by ibv_wr_bind_mw, zero-based: remote address 0 is the window's first byte.
fn type2_qp_ex_zero_based(da: &Dev, db: &Dev, rng: &mut Rng) -> Result<(), String> {
    let (a, b) = pair(da, db, rng, MR_MW, true)?;
    let mw = Mw::alloc(&b.pd, 2)?;
    let k = inc_rkey(mw.rkey());
    // SAFETY: a QP created with send_ops_flags.
    let x = unsafe { ibv_qp_to_qp_ex(b.qp.ptr) };
    let inf = info(&b.mr, 2 * WIN_OFF, 4096, RW | IBV_ACCESS_ZERO_BASED);
    // SAFETY: a live ibv_qp_ex of ours with BIND_MW; `inf` lives across the calls.
    let rc = unsafe {
        ((*x).wr_start.unwrap())(x);
        (*x).wr_id = 0xb3;
        (*x).wr_flags = IBV_SEND_SIGNALED;
        ((*x).wr_bind_mw.unwrap())(x, mw.0, k, &inf);
        ((*x).wr_complete.unwrap())(x)
    };
    if rc != 0 {
        return Err(format!("ibv_wr_complete(bind): {}", ename(rc)));
    }
    let c = one(&b.cq, "bind completion")?;
    expect(&c, IBV_WC_SUCCESS, Some(IBV_WC_BIND_MW), "ibv_wr_bind_mw")?;
    write_read(&a, &b, rng, k, 100, (2 * WIN_OFF) as usize + 100, 300)?;
    denied(&a, &b, k, 4096 - 4, 8, "WRITE past a zero-based window")
}

/// Binds that break a rule: MW_BIND_ERR, and the QP in ERR.
fn bind_err(da: &Dev, db: &Dev, rng: &mut Rng, case: &str) -> Result<(), String> {
    let mr_access = match case {
        "mr_without_mw_bind" => IBV_ACCESS_LOCAL_WRITE,
        "remote_write_over_mr_without_local_write" => IBV_ACCESS_MW_BIND,
        _ => MR_MW,
    };
    let (_a, b) = pair(da, db, rng, mr_access, false)?;
    let c = match case {
        "mr_without_mw_bind" | "remote_write_over_mr_without_local_write" => {
            let mw = Mw::alloc(&b.pd, 2)?;
            bind2(&b, &mw, inc_rkey(mw.rkey()), info(&b.mr, 0, 4096, RW))?
        }
        "range_past_mr" => {
            let mw = Mw::alloc(&b.pd, 2)?;
            bind2(
                &b,
                &mw,
                inc_rkey(mw.rkey()),
                info(&b.mr, MR_LEN as u64 - 4096, 4097, RW),
            )?
        }
        "zero_based_type1" => {
            let mw = Mw::alloc(&b.pd, 1)?;
            bind1(&b, &mw, info(&b.mr, 0, 4096, RW | IBV_ACCESS_ZERO_BASED))?
        }
        "type1_in_bind_wr" => {
            let mw = Mw::alloc(&b.pd, 1)?;
            bind2(&b, &mw, inc_rkey(mw.rkey()), info(&b.mr, 0, 4096, RW))?
        }
        "type2_key_unchanged" => {
            let mw = Mw::alloc(&b.pd, 2)?;
            bind2(&b, &mw, mw.rkey(), info(&b.mr, 0, 4096, RW))?
        }
        "type2_not_free" => {
            let mw = Mw::alloc(&b.pd, 2)?;
            let k = inc_rkey(mw.rkey());
            let c = bind2(&b, &mw, k, info(&b.mr, 0, 4096, RW))?;
            expect(&c, IBV_WC_SUCCESS, Some(IBV_WC_BIND_MW), "first bind")?;
            bind2(&b, &mw, inc_rkey(k), info(&b.mr, 0, 4096, RW))?
        }
        _ => {
            // A window of another PD (its MR in that PD too, so libibverbs lets it through).
            let pd2 = Pd::alloc(&db.ctx).map_err(|e| format!("ibv_alloc_pd: {}", ename(e)))?;
            let mr2 =
                Mr::reg(&pd2, 4096, MR_MW).map_err(|e| format!("ibv_reg_mr: {}", ename(e)))?;
            let mw = Mw::alloc(&pd2, 1)?;
            let c = bind1(&b, &mw, info(&mr2, 0, 4096, RW));
            drop(mw);
            drop(mr2);
            c?
        }
    };
    expect(&c, IBV_WC_MW_BIND_ERR, None, case)?;
    let st = dp::qp_state(&b.qp)?;
    if st != IBV_QPS_ERR {
        return Err(format!("QP state {st} after MW_BIND_ERR (want ERR)"));
    }
    Ok(())
}

fn direction(r: &mut Report, da: &Dev, db: &Dev, rng: &mut Rng) {
    let dir = format!("{}_to_{}", da.name, db.name);
    let res = type1(da, db, rng, r, &dir);
    r.result(&format!("type1.bind_write_read_unbind.{dir}"), res);
    let res = type1_denied(da, db, rng, r, &dir);
    r.result(&format!("type1.denied.{dir}"), res);
    for how in ["local_inv", "send_inv", "dealloc"] {
        r.result(&format!("type2.{how}.{dir}"), type2(da, db, rng, how));
    }
    if !is_rrxe(db) {
        r.skip(
            &format!("type2.qp_ex_zero_based.{dir}"),
            "bind rules and zero-based windows are checked on an rrxe binder",
        );
        r.skip(
            &format!("bind_err.{dir}"),
            "rdma_rxe's bind rules are its own",
        );
        return;
    }
    r.result(
        &format!("type2.qp_ex_zero_based.{dir}"),
        type2_qp_ex_zero_based(da, db, rng),
    );
    for case in [
        "mr_without_mw_bind",
        "remote_write_over_mr_without_local_write",
        "range_past_mr",
        "zero_based_type1",
        "type1_in_bind_wr",
        "type2_key_unchanged",
        "type2_not_free",
        "window_of_another_pd",
    ] {
        r.result(
            &format!("bind_err.{case}.{dir}"),
            bind_err(da, db, rng, case),
        );
    }
}

fn main() -> ExitCode {
    pair::run("rrxe-mw", |r, d0, d1, rng| {
        for d in [d0, d1] {
            if is_rrxe(d) {
                r.result(&format!("caps.{}", d.name), caps(d));
            }
        }
        direction(r, d0, d1, rng);
        direction(r, d1, d0, rng);
    })
}
