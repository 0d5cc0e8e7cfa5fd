//! The set-up shared by the two-device programs (rrxe-mw, rrxe-iba15): the command line
//! (`--dev`, `--dev2`, `--seed`), opening both devices, the report, and one RC side whose QP
//! may be an `ibv_qp_ex` taking extended send operations.

use std::process::ExitCode;
use std::time::Duration;

use crate::dp::{self, Dev, Rng, Side};
use crate::ffi::*;
use crate::util::{ename, errno, Report};
use crate::verbs::{Cq, Mr, Pd, Qp};

/// How long a completion may take.
const WAIT: Duration = Duration::from_secs(30);

/// Whether `d` is an rrxe device (rather than rdma_rxe).
pub fn is_rrxe(d: &Dev) -> bool {
    d.name.starts_with("rrxe")
}

/// A PD, a CQ of 64 entries, an MR of `mr_len` bytes with `mr_access`, and an RC QP asking for
/// `cap`; with `ex_ops`, the QP is created by `ibv_create_qp_ex` with those `send_ops_flags`.
pub fn rc_side(
    d: &Dev,
    mr_len: usize,
    mr_access: u32,
    cap: ibv_qp_cap,
    ex_ops: Option<u64>,
) -> Result<Side, String> {
    let pd = Pd::alloc(&d.ctx).map_err(|e| format!("{}: ibv_alloc_pd: {}", d.name, ename(e)))?;
    let cq = Cq::create(&d.ctx, 64, 0)
        .map_err(|e| format!("{}: ibv_create_cq: {}", d.name, ename(e)))?;
    let mr = Mr::reg(&pd, mr_len, mr_access)
        .map_err(|e| format!("{}: ibv_reg_mr({mr_access:#x}): {}", d.name, ename(e)))?;
    let qp = match ex_ops {
        Some(ops) => {
            let mut a = ibv_qp_init_attr_ex {
                send_cq: cq.ptr,
                recv_cq: cq.ptr,
                cap,
                qp_type: IBV_QPT_RC,
                comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                pd: pd.ptr,
                send_ops_flags: ops,
                ..zeroed()
            };
            // SAFETY: valid context, PD and CQ; `a` lives across the call.
            let p = unsafe { vt_create_qp_ex(d.ctx.ptr, &mut a) };
            if p.is_null() {
                return Err(format!(
                    "{}: ibv_create_qp_ex(RC, send_ops_flags {ops:#x}): {}",
                    d.name,
                    ename(errno())
                ));
            }
            Qp {
                ptr: p,
                qp_type: IBV_QPT_RC,
                cap: a.cap,
            }
        }
        None => Qp::create(&pd, &cq, IBV_QPT_RC, cap, false)
            .map_err(|e| format!("{}: ibv_create_qp: {}", d.name, ename(e)))?,
    };
    Ok(Side { qp, mr, cq, pd })
}

/// The `main` of a two-device program named `prog`: parses `--dev` (default rrxe0), `--dev2`
/// (default rrxe1) and `--seed`, opens both devices, runs `body` with a report and a seeded
/// generator, and prints the summary. Exit status 2 on a bad argument, 1 on any failure.
pub fn run(prog: &str, body: impl FnOnce(&mut Report, &Dev, &Dev, &mut Rng)) -> ExitCode {
    let mut dev = "rrxe0".to_string();
    let mut dev2 = "rrxe1".to_string();
    let mut seed = dp::clock_seed();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let res = match a.as_str() {
            "--dev" => dp::arg_val(&mut args, &a).map(|v| dev = v),
            "--dev2" => dp::arg_val(&mut args, &a).map(|v| dev2 = v),
            "--seed" => dp::arg_val(&mut args, &a).map(|v| seed = v),
            _ => Err(format!("unknown argument {a}")),
        };
        if let Err(e) = res {
            eprintln!("{prog}: {e}");
            return ExitCode::from(2);
        }
    }
    let mut r = Report::new(Vec::new(), Vec::new());
    r.info("seed", format!("{seed}"));
    let mut rng = Rng::new(seed);
    match (Dev::open(&dev), Dev::open(&dev2)) {
        (Ok(d0), Ok(d1)) => body(&mut r, &d0, &d1, &mut rng),
        (Err(e), _) | (_, Err(e)) => r.fail("setup", e),
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The next completion of `cq`, waiting up to 30 s; `what` names the operation in the error.
pub fn one(cq: &Cq, what: &str) -> Result<ibv_wc, String> {
    match dp::poll_n(cq, 1, WAIT) {
        Ok(mut v) => Ok(v.remove(0)),
        Err((_, e)) => Err(format!("{what}: {e}")),
    }
}

/// `Ok` when `w` has `status` (and `opcode`, when given).
pub fn expect(w: &ibv_wc, status: u32, opcode: Option<u32>, what: &str) -> Result<(), String> {
    if w.status != status || opcode.is_some_and(|o| o != w.opcode) {
        return Err(format!(
            "{what}: got {} (want status {}{})",
            dp::wc_str(w),
            dp::status_str(status),
            opcode.map_or(String::new(), |o| format!(", opcode {o}"))
        ));
    }
    Ok(())
}

/// A send WR with `opcode`, `flags` and the scatter list `sge` (none when empty).
pub fn send_wr(id: u64, opcode: u32, flags: u32, sge: &mut [ibv_sge]) -> ibv_send_wr {
    let mut w: ibv_send_wr = zeroed();
    w.wr_id = id;
    w.opcode = opcode;
    w.send_flags = flags;
    w.num_sge = sge.len() as i32;
    w.sg_list = if sge.is_empty() {
        std::ptr::null_mut()
    } else {
        sge.as_mut_ptr()
    };
    w
}
