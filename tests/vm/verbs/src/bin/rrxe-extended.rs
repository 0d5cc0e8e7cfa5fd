//! rrxe-extended: the extended verbs of the rrxe provider on a real device.
//!
//!   1. `ibv_create_cq_ex` with the standard `wc_flags`; completion timestamps refused
//!      (`EOPNOTSUPP`);
//!   2. `ibv_create_qp_ex` with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (RC and UD); LOCAL_INV,
//!      BIND_MW, SEND_WITH_INV, TSO refused (`EOPNOTSUPP`);
//!   3. one `ibv_wr_start` .. `ibv_wr_complete` batch on an RC QP: SEND (SGE), SEND_WITH_IMM
//!      (inline), RDMA WRITE (SGE list), RDMA WRITE_WITH_IMM (inline list), RDMA READ,
//!      CMP_AND_SWP, FETCH_AND_ADD; every completion read with `ibv_start_poll`/`next_poll`/
//!      `end_poll` and every `ibv_wc_read_*` field checked, then the data on both sides;
//!   4. a UD SEND_WITH_IMM through `ibv_wr_set_ud_addr` (src_qp, GRH, byte_len);
//!   5. full queues: a batch above `max_send_wr` fails with ENOMEM and posts nothing;
//!      `ibv_post_send`/`ibv_post_recv` beyond `max_send_wr`/`max_recv_wr` fail with ENOMEM at
//!      the first WR over, which `*bad_wr` names; `ibv_query_qp` reports the enforced caps;
//!   6. resize vs poll: a thread resizes the CQ in a loop while a legacy poller and an
//!      `ibv_cq_ex` poller drain RDMA WRITE completions: none lost, none duplicated;
//!   7. a send WR holds its SQ slot until it completes: on an RC QP whose peer never answers
//!      (a QPN nobody has), `max_send_wr` WRs posted and taken by the kernel leave no room
//!      (the next post is ENOMEM, though the ring itself is empty); once they complete
//!      (RETRY_EXC_ERR, then WR_FLUSH_ERR) the slots are free again.
//!
//!   rrxe-extended [--dev rrxe0] [--writes 2000]
//!
//! Prints PASS/FAIL lines and "N passed, N failed"; exits non-zero on failure.

use rrxe_verbs_test::{dp, ffi, util, verbs};

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dp::{Dev, Rng, ACCESS_ALL};
use ffi::*;
use util::{ename, errno, Report};
use verbs::{Cq, Mr, Pd, Qp};

const STD_WC: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;
const RC_OPS: u64 = (IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) as u64;
const TIMEOUT: Duration = Duration::from_secs(20);

/// One completion as the `ibv_cq_ex` readers give it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ExWc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    imm: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: u32,
    slid: u32,
    sl: u8,
    dlid_path_bits: u8,
}

#[derive(Clone, Copy)]
struct CqX(*mut ibv_cq_ex);
// SAFETY: a CQ shared by threads, as the verbs allow (the provider locks it).
unsafe impl Send for CqX {}
// SAFETY: as above.
unsafe impl Sync for CqX {}

impl CqX {
    fn cq(self) -> *mut ibv_cq {
        self.0.cast() // ibv_cq_ex_to_cq
    }

    /// The current completion.
    ///
    /// # Safety
    /// Inside a batch.
    unsafe fn read(self) -> ExWc {
        let x = self.0;
        // SAFETY: inside a batch (contract); rrxe sets every standard reader.
        unsafe {
            ExWc {
                wr_id: (*x).wr_id,
                status: (*x).status,
                opcode: ((*x).read_opcode.unwrap())(x),
                vendor_err: ((*x).read_vendor_err.unwrap())(x),
                byte_len: ((*x).read_byte_len.unwrap())(x),
                imm: ((*x).read_imm_data.unwrap())(x),
                qp_num: ((*x).read_qp_num.unwrap())(x),
                src_qp: ((*x).read_src_qp.unwrap())(x),
                wc_flags: ((*x).read_wc_flags.unwrap())(x),
                slid: ((*x).read_slid.unwrap())(x),
                sl: ((*x).read_sl.unwrap())(x),
                dlid_path_bits: ((*x).read_dlid_path_bits.unwrap())(x),
            }
        }
    }

    /// One batch: up to `max` completions through start/next/end_poll. `Err` for a poll error.
    fn poll_batch(self, max: usize) -> Result<Vec<ExWc>, String> {
        let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
        let x = self.0;
        // SAFETY: a live ex CQ; the batch is ended before returning.
        unsafe {
            let r = ((*x).start_poll.unwrap())(x, &mut attr);
            if r == libc::ENOENT {
                return Ok(Vec::new());
            }
            if r != 0 {
                return Err(format!("ibv_start_poll: {}", ename(r)));
            }
            let mut out = vec![self.read()];
            let mut err = None;
            while out.len() < max {
                match ((*x).next_poll.unwrap())(x) {
                    0 => out.push(self.read()),
                    libc::ENOENT => break,
                    e => {
                        err = Some(format!("ibv_next_poll: {}", ename(e)));
                        break;
                    }
                }
            }
            ((*x).end_poll.unwrap())(x);
            err.map_or(Ok(out), Err)
        }
    }

    fn poll_n(self, n: usize) -> Result<Vec<ExWc>, String> {
        let end = Instant::now() + TIMEOUT;
        let mut got = Vec::new();
        while got.len() < n {
            got.extend(self.poll_batch(n - got.len())?);
            if Instant::now() > end {
                return Err(format!(
                    "{} of {n} completions after {TIMEOUT:?}",
                    got.len()
                ));
            }
        }
        Ok(got)
    }
}

fn create_cq_ex(d: &Dev, cqe: u32, wc_flags: u64) -> Result<CqX, i32> {
    let mut a = ibv_cq_init_attr_ex {
        cqe,
        wc_flags,
        ..zeroed()
    };
    // SAFETY: valid context; attr lives across the call.
    let p = unsafe { vt_create_cq_ex(d.ctx.ptr, &mut a) };
    if p.is_null() {
        Err(errno())
    } else {
        Ok(CqX(p))
    }
}

fn create_qp_ex(pd: &Pd, cq: CqX, t: u32, cap: ibv_qp_cap, ops: u64) -> Result<Qp, i32> {
    let mut a = ibv_qp_init_attr_ex {
        send_cq: cq.cq(),
        recv_cq: cq.cq(),
        cap,
        qp_type: t,
        comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        pd: pd.ptr,
        send_ops_flags: ops,
        ..zeroed()
    };
    // SAFETY: valid context/PD/CQ; attr lives across the call.
    let p = unsafe { vt_create_qp_ex(pd_ctx(pd), &mut a) };
    if p.is_null() {
        Err(errno())
    } else {
        Ok(Qp {
            ptr: p,
            qp_type: t,
            cap: a.cap,
        })
    }
}

fn pd_ctx(pd: &Pd) -> *mut ibv_context {
    // SAFETY: a live PD.
    unsafe { (*pd.ptr).context }
}

fn qpx(qp: &Qp) -> *mut ibv_qp_ex {
    // SAFETY: a live QP.
    unsafe { ibv_qp_to_qp_ex(qp.ptr) }
}

/// Calls an `ibv_qp_ex` callback (the `ibv_wr_*` inlines).
macro_rules! wr {
    ($x:expr, $f:ident $(, $a:expr)*) => {
        ((*$x).$f.unwrap())($x $(, $a)*)
    };
}

fn set(x: *mut ibv_qp_ex, id: u64, flags: u32) {
    // SAFETY: a live ibv_qp_ex.
    unsafe {
        (*x).wr_id = id;
        (*x).wr_flags = flags;
    }
}

// The device writes the MR's memory behind the borrow checker's back: a slice from a shared
// `Mr` is how a C program sees it too.
#[allow(clippy::mut_from_ref)]
fn mem(mr: &Mr, off: usize, len: usize) -> &mut [u8] {
    // SAFETY: inside the MR's buffer; single-threaded use between verbs calls.
    unsafe { std::slice::from_raw_parts_mut(((*mr.ptr).addr as *mut u8).add(off), len) }
}

fn addr(mr: &Mr, off: usize) -> u64 {
    // SAFETY: a live MR.
    unsafe { (*mr.ptr).addr as u64 + off as u64 }
}

fn lkey(mr: &Mr) -> u32 {
    // SAFETY: a live MR.
    unsafe { (*mr.ptr).lkey }
}

fn rkey(mr: &Mr) -> u32 {
    // SAFETY: a live MR.
    unsafe { (*mr.ptr).rkey }
}

fn recv(qp: &Qp, mr: &Mr, id: u64, off: usize, len: usize) -> Result<(), String> {
    let mut sge = ibv_sge {
        addr: addr(mr, off),
        length: len as u32,
        lkey: lkey(mr),
    };
    let mut w = ibv_recv_wr {
        wr_id: id,
        sg_list: &mut sge,
        num_sge: 1,
        ..zeroed()
    };
    dp::post_recv(qp, &mut w)
}

fn expect_wc(errs: &mut Vec<String>, what: &str, got: &ExWc, want: &ExWc) {
    if got != want {
        errs.push(format!("{what}: got {got:?}, want {want:?}"));
    }
}

struct Setup {
    d: Dev,
    pd: Pd,
    mra: Mr,
    mrb: Mr,
}

fn main() -> ExitCode {
    let mut dev = "rrxe0".to_string();
    let mut writes = 2000u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let res = match a.as_str() {
            "--dev" => dp::arg_val(&mut args, &a).map(|v| dev = v),
            "--writes" => dp::arg_val(&mut args, &a).map(|v| writes = v),
            _ => Err(format!("unknown argument {a}")),
        };
        if let Err(e) = res {
            eprintln!("rrxe-extended: {e}");
            return ExitCode::from(2);
        }
    }
    let mut r = Report::new(Vec::new(), Vec::new());
    if let Err(e) = run(&mut r, &dev, writes) {
        r.fail("setup", e);
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run(r: &mut Report, dev: &str, writes: u64) -> Result<(), String> {
    let d = Dev::open(dev)?;
    let pd = Pd::alloc(&d.ctx).map_err(|e| format!("ibv_alloc_pd: {}", ename(e)))?;
    let mra = Mr::reg(&pd, 1 << 16, ACCESS_ALL).map_err(|e| format!("reg_mr: {}", ename(e)))?;
    let mrb = Mr::reg(&pd, 1 << 16, ACCESS_ALL).map_err(|e| format!("reg_mr: {}", ename(e)))?;
    let s = Setup { d, pd, mra, mrb };

    // 1. CQ ex.
    let cq =
        create_cq_ex(&s.d, 256, STD_WC).map_err(|e| format!("ibv_create_cq_ex: {}", ename(e)))?;
    let _cq_guard = Cq { ptr: cq.cq() };
    r.pass("cq_ex.create");
    let mut errs = Vec::new();
    for (name, f) in [
        ("timestamp", IBV_WC_EX_WITH_COMPLETION_TIMESTAMP),
        ("wallclock", IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK),
        ("cvlan", IBV_WC_EX_WITH_CVLAN),
        ("flow_tag", IBV_WC_EX_WITH_FLOW_TAG),
    ] {
        match create_cq_ex(&s.d, 16, STD_WC | f as u64) {
            Ok(c) => {
                drop(Cq { ptr: c.cq() });
                errs.push(format!("{name}: created"));
            }
            Err(e) if e == libc::EOPNOTSUPP => {}
            Err(e) => errs.push(format!("{name}: {}", ename(e))),
        }
    }
    r.cases("cq_ex.unsupported_wc_flags_refused", errs, 4);

    // 2. QP ex.
    let cap = ibv_qp_cap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let a = create_qp_ex(&s.pd, cq, IBV_QPT_RC, cap, RC_OPS)
        .map_err(|e| format!("ibv_create_qp_ex(RC): {}", ename(e)))?;
    let b = create_qp_ex(&s.pd, cq, IBV_QPT_RC, cap, RC_OPS)
        .map_err(|e| format!("ibv_create_qp_ex(RC): {}", ename(e)))?;
    r.result(
        "qp_ex.create",
        if qpx(&a).is_null() || qpx(&b).is_null() {
            Err("ibv_qp_to_qp_ex returned NULL".into())
        } else {
            Ok(())
        },
    );
    // Invalidation and memory-window binds are supported from user space (issue 27): on RC,
    // and BIND_MW on UC too (as rdma_rxe); TSO is not, and neither is BIND_MW on UD: refused
    // at create time.
    let mut errs = Vec::new();
    for (name, qpt, f) in [
        ("local_inv", IBV_QPT_RC, IBV_QP_EX_WITH_LOCAL_INV),
        ("send_with_inv", IBV_QPT_RC, IBV_QP_EX_WITH_SEND_WITH_INV),
        ("bind_mw", IBV_QPT_RC, IBV_QP_EX_WITH_BIND_MW),
        ("bind_mw_uc", IBV_QPT_UC, IBV_QP_EX_WITH_BIND_MW),
    ] {
        let ops = if qpt == IBV_QPT_RC {
            RC_OPS
        } else {
            IBV_QP_EX_WITH_SEND as u64
        };
        if let Err(e) = create_qp_ex(&s.pd, cq, qpt, cap, ops | f as u64) {
            errs.push(format!("{name}: {}", ename(e)));
        }
    }
    r.cases("qp_ex.invalidate_and_bind_ops_created", errs, 4);
    let mut errs = Vec::new();
    for (name, qpt, f) in [
        ("tso", IBV_QPT_RC, IBV_QP_EX_WITH_TSO),
        ("bind_mw_ud", IBV_QPT_UD, IBV_QP_EX_WITH_BIND_MW),
    ] {
        let ops = if qpt == IBV_QPT_RC {
            RC_OPS
        } else {
            IBV_QP_EX_WITH_SEND as u64
        };
        match create_qp_ex(&s.pd, cq, qpt, cap, ops | f as u64) {
            Ok(_) => errs.push(format!("{name}: created")),
            Err(e) if e == libc::EOPNOTSUPP => {}
            Err(e) => errs.push(format!("{name}: {}", ename(e))),
        }
    }
    r.cases("qp_ex.unsupported_ops_refused", errs, 2);
    let mut rng = Rng::new(dp::clock_seed());
    let sa = dp::Side {
        qp: a,
        mr: Mr::reg(&s.pd, 64, ACCESS_ALL).unwrap(),
        cq: Cq::create(&s.d.ctx, 1, 0).unwrap(),
        pd: Pd::alloc(&s.d.ctx).unwrap(),
    };
    let sb = dp::Side {
        qp: b,
        mr: Mr::reg(&s.pd, 64, ACCESS_ALL).unwrap(),
        cq: Cq::create(&s.d.ctx, 1, 0).unwrap(),
        pd: Pd::alloc(&s.d.ctx).unwrap(),
    };
    dp::connect(&s.d, &sa, &s.d, &sb, IBV_QPT_RC, 0, &mut rng)?;
    let (a, b) = (&sa.qp, &sb.qp);

    batch_check(r, &s, cq, a, b, &mut rng);
    ud_check(r, &s, cq);
    full_checks(r, &s, cq, a, b);
    resize_stress(r, &s, cq, a, b, writes);
    outstanding_check(r, &s, b.qpn());
    Ok(())
}

/// 7. Slots are held until completion (see the header). `peer_qpn` + 0x1000 is a QPN nobody has.
fn outstanding_check(r: &mut Report, s: &Setup, peer_qpn: u32) {
    let res = (|| -> Result<(), String> {
        let cq = create_cq_ex(&s.d, 64, STD_WC)
            .map_err(|e| format!("ibv_create_cq_ex: {}", ename(e)))?;
        let _cq_guard = Cq { ptr: cq.cq() };
        let cap = ibv_qp_cap {
            max_send_wr: 8,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let q = create_qp_ex(&s.pd, cq, IBV_QPT_RC, cap, RC_OPS)
            .map_err(|e| format!("ibv_create_qp_ex: {}", ename(e)))?;
        // timeout 14 (67 ms) and one retry: the WRs fail within about half a second.
        let rc = dp::RcParams {
            timeout: 14,
            retry_cnt: 1,
            rnr_retry: 0,
        };
        dp::to_rts_with(
            &s.d,
            &q,
            IBV_QPT_RC,
            (peer_qpn + 0x1000) & 0xff_ffff,
            s.d.gid,
            0,
            0,
            0,
            rc,
        )?;
        let ma = &s.mra;
        let write = |id: u64| -> i32 {
            let mut sge = ibv_sge {
                addr: addr(ma, 0),
                length: 8,
                lkey: lkey(ma),
            };
            let mut w = ibv_send_wr {
                wr_id: id,
                sg_list: &mut sge,
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: IBV_SEND_SIGNALED,
                ..zeroed()
            };
            w.wr.rdma.remote_addr = addr(&s.mrb, 0);
            w.wr.rdma.rkey = rkey(&s.mrb);
            let mut bad = ptr::null_mut();
            // SAFETY: a valid WR whose SGE lives across the call.
            unsafe { vt_post_send(q.ptr, &mut w, &mut bad) }
        };
        for i in 0..8 {
            let rc = write(7000 + i);
            if rc != 0 {
                return Err(format!("post {i} of max_send_wr 8: {}", ename(rc)));
            }
        }
        // The doorbell of each post had the kernel take the WQE; nothing can have completed
        // (the peer does not exist and the first timeout is 67 ms away).
        let rc = write(7100);
        if rc != libc::ENOMEM {
            return Err(format!(
                "9th post with 8 outstanding: {} (want ENOMEM)",
                ename(rc)
            ));
        }
        let done = cq.poll_n(8)?;
        let st: Vec<u32> = done.iter().map(|w| w.status).collect();
        let ids: Vec<u64> = done.iter().map(|w| w.wr_id).collect();
        if st[0] != IBV_WC_RETRY_EXC_ERR
            || st[1..].iter().any(|&x| x != IBV_WC_WR_FLUSH_ERR)
            || ids != (7000..7008).collect::<Vec<_>>()
        {
            return Err(format!("completions {:?} with statuses {st:?}", ids));
        }
        // Completed: the slots are free (the QP is in ERR, so a new WR flushes at once).
        let rc = write(7200);
        if rc != 0 {
            return Err(format!("post after the completions: {}", ename(rc)));
        }
        let f = cq.poll_n(1)?;
        if f[0].wr_id != 7200 || f[0].status != IBV_WC_WR_FLUSH_ERR {
            return Err(format!(
                "after the completions: wr_id {} status {}",
                f[0].wr_id, f[0].status
            ));
        }
        Ok(())
    })();
    r.result("outstanding.slot_held_until_completion", res);
}

/// 3. One batch of every builder, polled with the ex API; fields and data checked.
fn batch_check(r: &mut Report, s: &Setup, cq: CqX, a: &Qp, b: &Qp, rng: &mut Rng) {
    let (ma, mb) = (&s.mra, &s.mrb);
    rng.fill(mem(ma, 0, 4096));
    rng.fill(mem(mb, 0, 1 << 16));
    mem(mb, 0, 512).fill(0);
    mem(mb, 16384, 16).copy_from_slice(
        &[7u8; 8]
            .iter()
            .chain(&[0u8; 8])
            .copied()
            .collect::<Vec<_>>(),
    );
    let cas_old = u64::from_ne_bytes(mem(mb, 16384, 8).try_into().unwrap());
    mem(mb, 16392, 8).copy_from_slice(&1000u64.to_ne_bytes());
    let res = (|| -> Result<(), String> {
        recv(b, mb, 901, 0, 64)?; // SEND
        recv(b, mb, 902, 64, 64)?; // SEND_WITH_IMM (inline)
        recv(b, mb, 903, 128, 64)?; // consumed by WRITE_WITH_IMM (no data)
        Ok(())
    })();
    if let Err(e) = res {
        return r.fail("batch.post_recv", e);
    }
    let x = qpx(a);
    let inline1 = *b"inline-hello";
    let parts = [
        ibv_data_buf {
            addr: b"ab".as_ptr().cast_mut().cast(),
            length: 2,
        },
        ibv_data_buf {
            addr: b"cdef".as_ptr().cast_mut().cast(),
            length: 4,
        },
    ];
    let list = [
        ibv_sge {
            addr: addr(ma, 128),
            length: 64,
            lkey: lkey(ma),
        },
        ibv_sge {
            addr: addr(ma, 192),
            length: 64,
            lkey: lkey(ma),
        },
    ];
    let imm1 = 0x1234_5678u32.to_be();
    let imm2 = 0x9abc_def0u32.to_be();
    let sig = IBV_SEND_SIGNALED;
    // SAFETY: a live ibv_qp_ex in RTS; every buffer outlives the batch.
    let rc = unsafe {
        wr!(x, wr_start);
        set(x, 1, sig);
        wr!(x, wr_send);
        wr!(x, wr_set_sge, lkey(ma), addr(ma, 0), 64);
        set(x, 2, sig);
        wr!(x, wr_send_imm, imm1);
        wr!(
            x,
            wr_set_inline_data,
            inline1.as_ptr().cast_mut().cast(),
            inline1.len()
        );
        set(x, 3, sig);
        wr!(x, wr_rdma_write, rkey(mb), addr(mb, 4096));
        wr!(x, wr_set_sge_list, 2, list.as_ptr());
        set(x, 4, sig);
        wr!(x, wr_rdma_write_imm, rkey(mb), addr(mb, 8192), imm2);
        wr!(x, wr_set_inline_data_list, 2, parts.as_ptr());
        set(x, 5, sig);
        wr!(x, wr_rdma_read, rkey(mb), addr(mb, 12288));
        wr!(x, wr_set_sge, lkey(ma), addr(ma, 1024), 200);
        set(x, 6, sig);
        wr!(
            x,
            wr_atomic_cmp_swp,
            rkey(mb),
            addr(mb, 16384),
            cas_old,
            0x5555_aaaa_5555_aaaa
        );
        wr!(x, wr_set_sge, lkey(ma), addr(ma, 2048), 8);
        set(x, 7, sig | IBV_SEND_FENCE);
        wr!(x, wr_atomic_fetch_add, rkey(mb), addr(mb, 16392), 5);
        wr!(x, wr_set_sge, lkey(ma), addr(ma, 2056), 8);
        wr!(x, wr_complete)
    };
    if rc != 0 {
        return r.fail("batch.wr_complete", ename(rc));
    }
    r.pass("batch.wr_complete");
    let got = match cq.poll_n(10) {
        Ok(g) => g,
        Err(e) => return r.fail("batch.poll_ex", e),
    };
    r.pass("batch.poll_ex");
    let (aq, bq) = (a.qpn(), b.qpn());
    let mut errs = Vec::new();
    let snd = |id, opcode, byte_len| ExWc {
        wr_id: id,
        opcode,
        qp_num: aq,
        byte_len,
        ..Default::default()
    };
    let mut sends: Vec<ExWc> = got.iter().filter(|w| w.qp_num == aq).copied().collect();
    let recvs: Vec<ExWc> = got.iter().filter(|w| w.qp_num == bq).copied().collect();
    if sends.len() != 7 || recvs.len() != 3 {
        errs.push(format!(
            "{} send and {} receive completions: {got:?}",
            sends.len(),
            recvs.len()
        ));
    }
    // byte_len of a send completion is not defined by the verbs; compare the rest.
    for w in &mut sends {
        w.byte_len = 0;
    }
    let want_sends = [
        snd(1, IBV_WC_SEND, 0),
        snd(2, IBV_WC_SEND, 0),
        snd(3, IBV_WC_RDMA_WRITE, 0),
        snd(4, IBV_WC_RDMA_WRITE, 0),
        snd(5, IBV_WC_RDMA_READ, 0),
        snd(6, IBV_WC_COMP_SWAP, 0),
        snd(7, IBV_WC_FETCH_ADD, 0),
    ];
    for (g, w) in sends.iter().zip(&want_sends) {
        let mut g = *g;
        g.src_qp = 0; // undefined on RC
        expect_wc(&mut errs, &format!("send {}", w.wr_id), &g, w);
    }
    let rcv = |id, opcode, byte_len, imm, flags| ExWc {
        wr_id: id,
        opcode,
        qp_num: bq,
        byte_len,
        imm,
        wc_flags: flags,
        ..Default::default()
    };
    let want_recvs = [
        rcv(901, IBV_WC_RECV, 64, 0, 0),
        rcv(
            902,
            IBV_WC_RECV,
            inline1.len() as u32,
            imm1,
            IBV_WC_WITH_IMM,
        ),
        rcv(903, IBV_WC_RECV_RDMA_WITH_IMM, 6, imm2, IBV_WC_WITH_IMM),
    ];
    for (g, w) in recvs.iter().zip(&want_recvs) {
        let mut g = *g;
        g.src_qp = 0;
        if w.wc_flags & IBV_WC_WITH_IMM == 0 {
            g.imm = 0; // undefined without IBV_WC_WITH_IMM
        }
        expect_wc(&mut errs, &format!("recv {}", w.wr_id), &g, w);
    }
    r.cases("batch.fields", errs, 10);

    let mut errs = Vec::new();
    let mut data = |what: &str, got: Vec<u8>, want: Vec<u8>| {
        if got != want {
            errs.push(format!(
                "{what}: {:02x?} != {:02x?}",
                &got[..got.len().min(16)],
                &want[..want.len().min(16)]
            ));
        }
    };
    data("send", mem(mb, 0, 64).to_vec(), mem(ma, 0, 64).to_vec());
    data(
        "send_imm inline",
        mem(mb, 64, inline1.len()).to_vec(),
        inline1.to_vec(),
    );
    data(
        "write sge list",
        mem(mb, 4096, 128).to_vec(),
        mem(ma, 128, 128).to_vec(),
    );
    data(
        "write_imm inline list",
        mem(mb, 8192, 6).to_vec(),
        b"abcdef".to_vec(),
    );
    data(
        "read",
        mem(ma, 1024, 200).to_vec(),
        mem(mb, 12288, 200).to_vec(),
    );
    data(
        "cmp_swp old",
        mem(ma, 2048, 8).to_vec(),
        cas_old.to_ne_bytes().to_vec(),
    );
    data(
        "cmp_swp new",
        mem(mb, 16384, 8).to_vec(),
        0x5555_aaaa_5555_aaaau64.to_ne_bytes().to_vec(),
    );
    data(
        "fetch_add old",
        mem(ma, 2056, 8).to_vec(),
        1000u64.to_ne_bytes().to_vec(),
    );
    data(
        "fetch_add new",
        mem(mb, 16392, 8).to_vec(),
        1005u64.to_ne_bytes().to_vec(),
    );
    r.cases("batch.data", errs, 9);
}

/// 4. UD: SEND_WITH_IMM addressed with `ibv_wr_set_ud_addr`.
fn ud_check(r: &mut Report, s: &Setup, cq: CqX) {
    let res = (|| -> Result<(), String> {
        let cap = ibv_qp_cap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let ops = (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;
        let c = create_qp_ex(&s.pd, cq, IBV_QPT_UD, cap, ops)
            .map_err(|e| format!("create UD: {}", ename(e)))?;
        let dq = create_qp_ex(&s.pd, cq, IBV_QPT_UD, cap, ops)
            .map_err(|e| format!("create UD: {}", ename(e)))?;
        let qkey = 0x1111_2222;
        for q in [&c, &dq] {
            dp::to_rts(&s.d, q, IBV_QPT_UD, 0, [0; 16], 0, 0x100, qkey)?;
        }
        let mut aha = ibv_ah_attr {
            is_global: 1,
            port_num: s.d.port,
            ..zeroed()
        };
        aha.grh.dgid.raw = s.d.gid;
        aha.grh.sgid_index = s.d.gid_index;
        aha.grh.hop_limit = 64;
        let ah = verbs::Ah::create(&s.pd, &aha).map_err(|e| format!("create_ah: {}", ename(e)))?;
        recv(&dq, &s.mrb, 77, 20000, 40 + 100)?;
        mem(&s.mra, 30000, 100).fill(0xa5);
        let x = qpx(&c);
        let imm = 0x0bad_cafeu32.to_be();
        // SAFETY: a live ibv_qp_ex in RTS; buffers outlive the batch.
        let rc = unsafe {
            wr!(x, wr_start);
            set(x, 55, IBV_SEND_SIGNALED);
            wr!(x, wr_send_imm, imm);
            wr!(x, wr_set_ud_addr, ah.ptr, dq.qpn(), qkey);
            wr!(x, wr_set_sge, lkey(&s.mra), addr(&s.mra, 30000), 100);
            wr!(x, wr_complete)
        };
        if rc != 0 {
            return Err(format!("wr_complete: {}", ename(rc)));
        }
        let got = cq.poll_n(2)?;
        let send = got
            .iter()
            .find(|w| w.qp_num == c.qpn())
            .ok_or("no send completion")?;
        let rcv = got
            .iter()
            .find(|w| w.qp_num == dq.qpn())
            .ok_or("no receive completion")?;
        if (send.wr_id, send.status, send.opcode) != (55, IBV_WC_SUCCESS, IBV_WC_SEND) {
            return Err(format!("send completion {send:?}"));
        }
        let want = ExWc {
            wr_id: 77,
            opcode: IBV_WC_RECV,
            byte_len: 140,
            imm,
            qp_num: dq.qpn(),
            src_qp: c.qpn(),
            wc_flags: IBV_WC_GRH | IBV_WC_WITH_IMM,
            ..Default::default()
        };
        if *rcv != want {
            return Err(format!("receive completion {rcv:?}, want {want:?}"));
        }
        if mem(&s.mrb, 20040, 100).iter().any(|&b| b != 0xa5) {
            return Err("UD payload differs".into());
        }
        drop(ah);
        Ok(())
    })();
    r.result("ud.set_ud_addr_send_imm", res);
}

/// 5. Capacities: batch, post_send and post_recv beyond the caps fail with ENOMEM.
fn full_checks(r: &mut Report, s: &Setup, cq: CqX, a: &Qp, b: &Qp) {
    let res = (|| -> Result<(), String> {
        let (qa, _) = a.query().map_err(|e| format!("query_qp: {}", ename(e)))?;
        if (qa.cap.max_send_wr, qa.cap.max_recv_wr) != (8, 8) {
            return Err(format!(
                "query_qp caps {} / {}, created with 8 / 8",
                qa.cap.max_send_wr, qa.cap.max_recv_wr
            ));
        }
        Ok(())
    })();
    r.result("full.query_qp_caps", res);

    let x = qpx(a);
    let (ma, mb) = (&s.mra, &s.mrb);
    // A batch of max_send_wr + 1: ENOMEM, nothing posted (no completion arrives).
    // SAFETY: a live ibv_qp_ex in RTS.
    let rc = unsafe {
        wr!(x, wr_start);
        for i in 0..9 {
            set(x, 1000 + i, IBV_SEND_SIGNALED);
            wr!(x, wr_rdma_write, rkey(mb), addr(mb, 40000));
            wr!(x, wr_set_sge, lkey(ma), addr(ma, 0), 8);
        }
        wr!(x, wr_complete)
    };
    // A borrowed handle: the CQ is destroyed by its owner, not here.
    let handle = std::mem::ManuallyDrop::new(Cq { ptr: cq.cq() });
    let stray = dp::drain(&handle, Duration::from_millis(300));
    r.result(
        "full.batch_over_max_send_wr",
        if rc == libc::ENOMEM && stray.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "wr_complete = {}, {} completions",
                ename(rc),
                stray.len()
            ))
        },
    );

    // ibv_post_send: a list of 9 signaled writes: 8 go, the 9th is ENOMEM and *bad_wr.
    let mut sges: Vec<ibv_sge> = (0..9)
        .map(|_| ibv_sge {
            addr: addr(ma, 0),
            length: 8,
            lkey: lkey(ma),
        })
        .collect();
    let mut wrs: Vec<ibv_send_wr> = (0..9)
        .map(|i| {
            let mut w = ibv_send_wr {
                wr_id: 2000 + i as u64,
                sg_list: &mut sges[i],
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: IBV_SEND_SIGNALED,
                ..zeroed()
            };
            w.wr.rdma.remote_addr = addr(mb, 40000);
            w.wr.rdma.rkey = rkey(mb);
            w
        })
        .collect();
    for i in 0..8 {
        wrs[i].next = &mut wrs[i + 1];
    }
    let mut bad = ptr::null_mut();
    // SAFETY: a valid list of valid WRs.
    let rc = unsafe { vt_post_send(a.ptr, wrs.as_mut_ptr(), &mut bad) };
    let bad_idx = wrs.iter().position(|w| ptr::eq(w, bad));
    let done = cq.poll_n(8);
    r.result(
        "full.post_send_over_max_send_wr",
        match (&done, rc, bad_idx) {
            (Ok(_), libc::ENOMEM, Some(8)) => Ok(()),
            _ => Err(format!(
                "post_send = {}, bad_wr index {bad_idx:?}, completions {:?}",
                ename(rc),
                done.map(|d| d.len())
            )),
        },
    );

    // ibv_post_recv on B (nothing consumes them): 8 fit, the 9th is ENOMEM.
    let mut rs: Vec<ibv_sge> = (0..9)
        .map(|_| ibv_sge {
            addr: addr(mb, 0),
            length: 8,
            lkey: lkey(mb),
        })
        .collect();
    let mut rw: Vec<ibv_recv_wr> = (0..9)
        .map(|i| ibv_recv_wr {
            wr_id: 3000 + i as u64,
            sg_list: &mut rs[i],
            num_sge: 1,
            ..zeroed()
        })
        .collect();
    for i in 0..8 {
        rw[i].next = &mut rw[i + 1];
    }
    let mut rbad = ptr::null_mut();
    // SAFETY: a valid list.
    let rc = unsafe { vt_post_recv(b.ptr, rw.as_mut_ptr(), &mut rbad) };
    let bad_idx = rw.iter().position(|w| ptr::eq(w, rbad));
    r.result(
        "full.post_recv_over_max_recv_wr",
        if rc == libc::ENOMEM && bad_idx == Some(8) {
            Ok(())
        } else {
            Err(format!(
                "post_recv = {}, bad_wr index {bad_idx:?}",
                ename(rc)
            ))
        },
    );
}

/// 6. Resize vs poll: writes complete while one thread resizes the CQ and two poll it.
fn resize_stress(r: &mut Report, s: &Setup, cq: CqX, a: &Qp, _b: &Qp, writes: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Vec::<ExWc>::new()));
    let errs = Arc::new(Mutex::new(Vec::<String>::new()));
    let resizes = Arc::new(AtomicU64::new(0));
    let mut ts = Vec::new();
    for who in 0..2 {
        let (stop, done, seen, errs) = (stop.clone(), done.clone(), seen.clone(), errs.clone());
        ts.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let got = if who == 0 {
                    let mut wc = zeroed::<[ibv_wc; 4]>();
                    // SAFETY: a live CQ; room for 4.
                    let n = unsafe { vt_poll_cq(cq.cq(), 4, wc.as_mut_ptr()) };
                    if n < 0 {
                        errs.lock().unwrap().push(format!("ibv_poll_cq = {n}"));
                        break;
                    }
                    wc[..n as usize]
                        .iter()
                        .map(|w| ExWc {
                            wr_id: w.wr_id,
                            status: w.status,
                            opcode: w.opcode,
                            qp_num: w.qp_num,
                            ..Default::default()
                        })
                        .collect()
                } else {
                    match cq.poll_batch(4) {
                        Ok(g) => g,
                        Err(e) => {
                            errs.lock().unwrap().push(e);
                            break;
                        }
                    }
                };
                done.fetch_add(got.len() as u64, Ordering::SeqCst);
                seen.lock().unwrap().extend(got);
                std::thread::yield_now();
            }
        }));
    }
    {
        let (stop, errs, resizes) = (stop.clone(), errs.clone(), resizes.clone());
        ts.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let n = [64, 128, 256, 32][(i % 4) as usize];
                // SAFETY: a live CQ (its size is always above the 8 outstanding WRs).
                let rc = unsafe { ibv_resize_cq(cq.cq(), n) };
                if rc != 0 {
                    errs.lock()
                        .unwrap()
                        .push(format!("ibv_resize_cq({n}) = {}", ename(rc)));
                    break;
                }
                resizes.fetch_add(1, Ordering::SeqCst);
                i += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
        }));
    }
    // The poster: signaled 8-byte writes, at most 8 outstanding (max_send_wr).
    let (ma, mb) = (&s.mra, &s.mrb);
    let mut posted = 0u64;
    let end = Instant::now() + Duration::from_secs(120);
    let mut post_err = None;
    while posted < writes {
        if Instant::now() > end {
            post_err = Some(format!(
                "timeout: {posted} posted, {} completed",
                done.load(Ordering::SeqCst)
            ));
            break;
        }
        if posted - done.load(Ordering::SeqCst) >= 8 || !errs.lock().unwrap().is_empty() {
            if !errs.lock().unwrap().is_empty() {
                break;
            }
            std::thread::yield_now();
            continue;
        }
        let mut sge = ibv_sge {
            addr: addr(ma, 0),
            length: 8,
            lkey: lkey(ma),
        };
        let mut w = ibv_send_wr {
            wr_id: 10_000 + posted,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_RDMA_WRITE,
            send_flags: IBV_SEND_SIGNALED,
            ..zeroed()
        };
        w.wr.rdma.remote_addr = addr(mb, 48000);
        w.wr.rdma.rkey = rkey(mb);
        if let Err(e) = dp::post_send(a, &mut w) {
            post_err = Some(e);
            break;
        }
        posted += 1;
    }
    let wait = Instant::now() + TIMEOUT;
    while done.load(Ordering::SeqCst) < posted
        && Instant::now() < wait
        && errs.lock().unwrap().is_empty()
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    for t in ts {
        let _ = t.join();
    }
    let mut problems: Vec<String> = errs.lock().unwrap().clone();
    problems.extend(post_err);
    let seen = seen.lock().unwrap();
    let ids: BTreeSet<u64> = seen.iter().map(|w| w.wr_id).collect();
    if seen.len() as u64 != posted || ids.len() as u64 != posted {
        problems.push(format!(
            "{} completions ({} distinct) for {posted} writes",
            seen.len(),
            ids.len()
        ));
    }
    if let Some(w) = seen
        .iter()
        .find(|w| w.status != IBV_WC_SUCCESS || w.opcode != IBV_WC_RDMA_WRITE)
    {
        problems.push(format!("bad completion {w:?}"));
    }
    let n = resizes.load(Ordering::SeqCst);
    r.info("resize_vs_poll", format!("{posted} writes, {n} resizes"));
    if n < 10 {
        problems.push(format!("only {n} resizes"));
    }
    r.cases("resize_vs_poll", problems, 1);
}
