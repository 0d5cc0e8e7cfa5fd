//! rrxe-errors: error paths of the data path, on RC QPs (loopback on one device, or across two
//! devices with --dev2).
//!
//!   rrxe-errors [--dev rrxe0] [--dev2 rrxe1] checks
//!       bad_rkey:  an RDMA WRITE with a wrong rkey completes with IBV_WC_REM_ACCESS_ERR, the
//!                  WRs posted behind it (and one posted afterwards) with IBV_WC_WR_FLUSH_ERR,
//!                  and the QP is in the error state;
//!       bad_lkey:  a SEND from a wrong lkey completes with IBV_WC_LOC_PROT_ERR, the next WR
//!                  is flushed;
//!       destroy_outstanding: QPs destroyed with many WRs outstanding (sender first, and
//!                  receiver first), everything destroyed cleanly, then a new pair works.
//!   rrxe-errors [--dev ...] traffic      keeps RDMA WRITEs and SENDs in flight forever; prints
//!                                        RUNNING once traffic flows (for a SIGKILL test)
//!   rrxe-errors [--dev ...] hold GOFILE  sets up a working pair, prints HOLDING, waits for
//!                                        GOFILE to exist, tries one more transfer, prints
//!                                        "AFTER ok" or "AFTER failed: ...", then tears down and
//!                                        prints "TEARDOWN ..." (for the rmmod test)
//!
//! Prints PASS/FAIL lines and "N passed, N failed" (checks); exits non-zero on failure.

#[path = "../dp.rs"]
#[allow(dead_code)]
mod dp;
#[path = "../ffi.rs"]
#[allow(dead_code)]
mod ffi;
#[path = "../util.rs"]
#[allow(dead_code)]
mod util;
#[path = "../verbs.rs"]
#[allow(dead_code)]
mod verbs;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use dp::{Dev, Rng, Side};
use ffi::*;
use util::{ename, Report};

const T: Duration = Duration::from_secs(30);
const MR: usize = 1 << 22;

fn cap(wr: u32) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn pair(da: &Dev, db: &Dev, wr: u32, seed: u64) -> Result<(Side, Side), String> {
    let a = Side::new(da, IBV_QPT_RC, cap(wr), 4 * wr as i32, MR)?;
    let b = Side::new(db, IBV_QPT_RC, cap(wr), 4 * wr as i32, MR)?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, &mut Rng::new(seed))?;
    Ok((a, b))
}

fn send_wr(id: u64, op: u32, sge: &mut ibv_sge) -> ibv_send_wr {
    ibv_send_wr {
        wr_id: id,
        opcode: op,
        send_flags: IBV_SEND_SIGNALED,
        num_sge: 1,
        sg_list: sge,
        ..Default::default()
    }
}

fn recv(side: &Side, id: u64, off: usize, len: usize) -> Result<(), String> {
    let mut sge = side.sge(off, len);
    let mut w = ibv_recv_wr {
        wr_id: id,
        num_sge: 1,
        sg_list: &mut sge,
        ..Default::default()
    };
    dp::post_recv(&side.qp, &mut w)
}

/// Posts WR `id` of opcode `op`, `len` bytes at `off` of `s`, RDMA to `r` at `roff` with `rkey`.
#[allow(clippy::too_many_arguments)]
fn post(s: &Side, r: &Side, id: u64, op: u32, off: usize, len: usize, roff: usize, rkey: u32, lkey: u32) -> Result<(), String> {
    let mut sge = s.sge(off, len);
    sge.lkey = lkey;
    let mut w = send_wr(id, op, &mut sge);
    w.wr.rdma.remote_addr = r.addr() + roff as u64;
    w.wr.rdma.rkey = rkey;
    dp::post_send(&s.qp, &mut w)
}

fn expect(got: &[ibv_wc], want: &[(u64, u32)]) -> Result<(), String> {
    let g: Vec<(u64, u32)> = got.iter().map(|w| (w.wr_id, w.status)).collect();
    if g == want {
        return Ok(());
    }
    Err(format!(
        "completions [{}], want [{}]",
        got.iter().map(dp::wc_str).collect::<Vec<_>>().join("; "),
        want.iter()
            .map(|(i, s)| format!("wr_id {i} {}", dp::status_str(*s)))
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

fn poll(s: &Side, n: usize) -> Result<Vec<ibv_wc>, String> {
    dp::poll_n(&s.cq, n, T).map_err(|(got, e)| {
        format!(
            "{e}: [{}]",
            got.iter().map(dp::wc_str).collect::<Vec<_>>().join("; ")
        )
    })
}

fn bad_rkey(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    let (a, b) = pair(da, db, 16, 1)?;
    for i in 0..4 {
        recv(&b, 100 + i, 4096 * i as usize, 4096)?;
    }
    let bad = b.rkey() ^ 0x5a;
    post(&a, &b, 1, IBV_WR_RDMA_WRITE, 0, 64, 0, bad, a.lkey())?;
    post(&a, &b, 2, IBV_WR_SEND, 64, 64, 0, 0, a.lkey())?;
    post(&a, &b, 3, IBV_WR_RDMA_WRITE, 128, 64, 0, b.rkey(), a.lkey())?;
    post(&a, &b, 4, IBV_WR_RDMA_READ, 192, 64, 0, b.rkey(), a.lkey())?;
    let got = poll(&a, 4)?;
    let first = expect(&got[..1], &[(1, IBV_WC_REM_ACCESS_ERR)]);
    let rest = expect(
        &got[1..],
        &[(2, IBV_WC_WR_FLUSH_ERR), (3, IBV_WC_WR_FLUSH_ERR), (4, IBV_WC_WR_FLUSH_ERR)],
    );
    r.result("errors.bad_rkey.rem_access_err", first);
    r.result("errors.bad_rkey.later_wrs_flushed", rest);
    let st = dp::qp_state(&a.qp)?;
    r.result(
        "errors.bad_rkey.requester_in_error",
        if st == IBV_QPS_ERR {
            Ok(())
        } else {
            Err(format!("requester QP state {st} (want ERR {IBV_QPS_ERR})"))
        },
    );
    // A WR posted to a QP in the error state completes with a flush error.
    let after = post(&a, &b, 5, IBV_WR_SEND, 0, 16, 0, 0, a.lkey())
        .and_then(|()| poll(&a, 1))
        .and_then(|g| expect(&g, &[(5, IBV_WC_WR_FLUSH_ERR)]));
    r.result("errors.bad_rkey.post_in_error_flushed", after);
    let extra = dp::drain(&a.cq, Duration::from_millis(100));
    r.result(
        "errors.bad_rkey.no_extra_completions",
        if extra.is_empty() {
            Ok(())
        } else {
            Err(extra.iter().map(dp::wc_str).collect::<Vec<_>>().join("; "))
        },
    );
    let resp: Vec<String> = dp::drain(&b.cq, Duration::ZERO).iter().map(dp::wc_str).collect();
    r.info(
        "errors.bad_rkey",
        format!(
            "responder QP state {:?}, its completions: [{}]",
            dp::qp_state(&b.qp),
            resp.join("; ")
        ),
    );
    Ok(())
}

fn bad_lkey(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    let (a, b) = pair(da, db, 16, 2)?;
    for i in 0..2 {
        recv(&b, 100 + i, 4096 * i as usize, 4096)?;
    }
    post(&a, &b, 1, IBV_WR_SEND, 0, 64, 0, 0, a.lkey() ^ 0x5a)?;
    post(&a, &b, 2, IBV_WR_SEND, 64, 64, 0, 0, a.lkey())?;
    let got = poll(&a, 2)?;
    r.result("errors.bad_lkey.loc_prot_err", expect(&got[..1], &[(1, IBV_WC_LOC_PROT_ERR)]));
    r.result("errors.bad_lkey.next_wr_flushed", expect(&got[1..], &[(2, IBV_WC_WR_FLUSH_ERR)]));
    let extra = dp::drain(&a.cq, Duration::from_millis(100));
    r.result(
        "errors.bad_lkey.no_extra_completions",
        if extra.is_empty() {
            Ok(())
        } else {
            Err(extra.iter().map(dp::wc_str).collect::<Vec<_>>().join("; "))
        },
    );

    // A receive buffer with a wrong lkey (reported, not checked: what the requester sees is
    // left to the implementation; the responder's receive fails).
    let (a, b) = pair(da, db, 16, 3)?;
    let mut sge = b.sge(0, 4096);
    sge.lkey ^= 0x5a;
    let mut w = ibv_recv_wr {
        wr_id: 7,
        num_sge: 1,
        sg_list: &mut sge,
        ..Default::default()
    };
    dp::post_recv(&b.qp, &mut w)?;
    post(&a, &b, 8, IBV_WR_SEND, 0, 64, 0, 0, a.lkey())?;
    let ga = dp::poll_n(&a.cq, 1, Duration::from_secs(10)).unwrap_or_else(|(g, _)| g);
    let gb = dp::poll_n(&b.cq, 1, Duration::from_secs(2)).unwrap_or_else(|(g, _)| g);
    r.info(
        "errors.bad_lkey.recv",
        format!(
            "requester [{}], responder [{}]",
            ga.iter().map(dp::wc_str).collect::<Vec<_>>().join("; "),
            gb.iter().map(dp::wc_str).collect::<Vec<_>>().join("; ")
        ),
    );
    Ok(())
}

/// A SEND round trip a -> b (the pair works).
fn round_trip(a: &Side, b: &Side) -> Result<(), String> {
    recv(b, 900, 0, 4096)?;
    a.mem(8192, 100).copy_from_slice(&[0x3c; 100]);
    post(a, b, 901, IBV_WR_SEND, 8192, 100, 0, 0, a.lkey())?;
    let ga = poll(a, 1)?;
    let gb = poll(b, 1)?;
    expect(&ga, &[(901, IBV_WC_SUCCESS)])?;
    expect(&gb, &[(900, IBV_WC_SUCCESS)])?;
    if b.mem(0, 100) != [0x3c; 100] {
        return Err("data received differs".into());
    }
    Ok(())
}

fn destroy_outstanding(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    for (k, sender_first) in [(0u64, true), (1, false)] {
        let name = if sender_first { "sender_first" } else { "receiver_first" };
        let (a, b) = pair(da, db, 64, 10 + k)?;
        for i in 0..64 {
            recv(&b, 1000 + i, 0, 65536)?;
        }
        let mut posted = 0;
        for i in 0..64u64 {
            let (op, len) = match i % 3 {
                0 => (IBV_WR_RDMA_WRITE, 65536),
                1 => (IBV_WR_SEND, 65536),
                _ => (IBV_WR_RDMA_READ, 65536),
            };
            let off = (i as usize % 32) * 65536;
            if post(&a, &b, i, op, off, len, off, b.rkey(), a.lkey()).is_ok() {
                posted += 1;
            }
        }
        let Side { qp: qa, mr: ma, cq: ca, pd: pa } = a;
        let Side { qp: qb, mr: mb, cq: cb, pd: pb } = b;
        let mut errs = Vec::new();
        let mut d = |what: &str, res: Result<(), i32>| {
            if let Err(e) = res {
                errs.push(format!("{what}: {}", ename(e)));
            }
        };
        if sender_first {
            d("destroy sender QP", qa.destroy());
            d("destroy receiver QP", qb.destroy());
        } else {
            d("destroy receiver QP", qb.destroy());
            std::thread::sleep(Duration::from_millis(200));
            d("destroy sender QP", qa.destroy());
        }
        d("dereg MR", ma.destroy());
        d("dereg MR", mb.destroy());
        d("destroy CQ", ca.destroy());
        d("destroy CQ", cb.destroy());
        d("dealloc PD", pa.destroy());
        d("dealloc PD", pb.destroy());
        r.result(
            &format!("errors.destroy_outstanding.{name}"),
            if posted == 64 && errs.is_empty() {
                Ok(())
            } else {
                Err(format!("{posted} of 64 WRs posted; {}", errs.join(", ")))
            },
        );
    }
    let res = pair(da, db, 16, 20).and_then(|(a, b)| round_trip(&a, &b));
    r.result("errors.destroy_outstanding.new_pair_works", res);
    Ok(())
}

/// Keeps WRITEs and SENDs in flight until killed.
fn traffic(da: &Dev, db: &Dev) -> Result<(), String> {
    let (a, b) = pair(da, db, 64, 30)?;
    for i in 0..64 {
        recv(&b, i, (i as usize % 16) * 65536, 65536)?;
    }
    let mut outstanding = 0usize;
    let mut done = 0u64;
    let mut id = 0u64;
    let mut wc = [ibv_wc::default(); 16];
    let mut running = false;
    loop {
        while outstanding < 32 {
            let off = (id as usize % 32) * 65536;
            if id.is_multiple_of(2) {
                post(&a, &b, id, IBV_WR_RDMA_WRITE, off, 65536, off, b.rkey(), a.lkey())?;
            } else {
                post(&a, &b, id, IBV_WR_SEND, off, 65536, 0, 0, a.lkey())?;
            }
            id += 1;
            outstanding += 1;
        }
        let k = dp::poll_once(&a.cq, &mut wc)?;
        for w in &wc[..k] {
            if w.status != IBV_WC_SUCCESS {
                return Err(format!("sender: {}", dp::wc_str(w)));
            }
            outstanding -= 1;
            done += 1;
        }
        let k = dp::poll_once(&b.cq, &mut wc)?;
        for w in &wc[..k] {
            if w.status != IBV_WC_SUCCESS {
                return Err(format!("receiver: {}", dp::wc_str(w)));
            }
            recv(&b, w.wr_id, (w.wr_id as usize % 16) * 65536, 65536)?;
        }
        if done >= 16 && !running {
            running = true;
            println!("RUNNING");
            let _ = std::io::stdout().flush();
        }
        if k == 0 {
            std::thread::yield_now();
        }
    }
}

fn hold(da: &Dev, db: &Dev, go: &str) -> Result<(), String> {
    let (a, b) = pair(da, db, 16, 40)?;
    round_trip(&a, &b)?;
    println!("HOLDING");
    let _ = std::io::stdout().flush();
    for _ in 0..3000 {
        if std::path::Path::new(go).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    match round_trip(&a, &b) {
        Ok(()) => println!("AFTER ok"),
        Err(e) => println!("AFTER failed: {e}"),
    }
    let _ = std::io::stdout().flush();
    let mut errs = Vec::new();
    for (n, s) in [("a", a), ("b", b)] {
        let Side { qp, mr, cq, pd } = s;
        for (what, r) in [
            ("destroy_qp", qp.destroy()),
            ("dereg_mr", mr.destroy()),
            ("destroy_cq", cq.destroy()),
            ("dealloc_pd", pd.destroy()),
        ] {
            if let Err(e) = r {
                errs.push(format!("{n}.{what}: {}", ename(e)));
            }
        }
    }
    println!(
        "TEARDOWN {}",
        if errs.is_empty() { "ok".to_owned() } else { errs.join(", ") }
    );
    Ok(())
}

fn main() -> ExitCode {
    let mut dev = "rrxe0".to_owned();
    let mut dev2: Option<String> = None;
    let mut mode = "checks".to_owned();
    let mut go = String::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let r = match a.as_str() {
            "--dev" => dp::arg_val(&mut args, &a).map(|v| dev = v),
            "--dev2" => dp::arg_val(&mut args, &a).map(|v| dev2 = Some(v)),
            "checks" | "traffic" => {
                mode = a.clone();
                Ok(())
            }
            "hold" => {
                mode = a.clone();
                dp::arg_val(&mut args, &a).map(|v| go = v)
            }
            _ => Err(format!("unknown argument {a}")),
        };
        if let Err(e) = r {
            eprintln!("rrxe-errors: {e}");
            return ExitCode::from(2);
        }
    }
    let mut r = Report::new(Vec::new(), Vec::new());
    let devs = Dev::open(&dev).and_then(|a| match &dev2 {
        Some(n) => Dev::open(n).map(|b| (a, Some(b))),
        None => Ok((a, None)),
    });
    let (da, db) = match devs {
        Ok(d) => d,
        Err(e) => {
            r.fail("errors.setup", e);
            r.summary();
            return ExitCode::FAILURE;
        }
    };
    let db = db.as_ref().unwrap_or(&da);
    match mode.as_str() {
        "traffic" => {
            if let Err(e) = traffic(&da, db) {
                eprintln!("rrxe-errors traffic: {e}");
            }
            return ExitCode::FAILURE;
        }
        "hold" => {
            return match hold(&da, db, &go) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("HOLD failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {}
    }
    for (name, f) in [
        ("errors.bad_rkey", bad_rkey as fn(&Dev, &Dev, &mut Report) -> Result<(), String>),
        ("errors.bad_lkey", bad_lkey),
        ("errors.destroy_outstanding", destroy_outstanding),
    ] {
        if let Err(e) = f(&da, db, &mut r) {
            r.fail(name, e);
        }
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
