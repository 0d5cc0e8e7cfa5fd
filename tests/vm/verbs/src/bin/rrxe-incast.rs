//! rrxe-incast: N RC senders writing into one receiver at once (issue 29's incast; driven by
//! tests/vm/cc.sh and scripts/bench-incast-guest).
//!
//!   rrxe-incast --dev rrxe0 --dev2 rrxe1 [--qps N] [--size BYTES] [--depth D] [--secs S]
//!               [--interval-ms MS] [--verify] [--drain-secs S]
//!
//! N connected QP pairs: each sender on --dev, its peer on --dev2 (each pair with its own PD,
//! CQ and MR). Every sender keeps D RDMA WRITEs of SIZE bytes outstanding into D slots of its
//! peer's buffer, from the same moment, and posts no more once S seconds have passed; then the
//! outstanding ones complete (within --drain-secs, default 120). One thread polls every CQ.
//! Output (stdout, line-buffered):
//!   QP <i> <sender qpn> <receiver qpn>
//!   START <the start's wall-clock time, seconds since the epoch>
//!   T <ms since the start> <bytes completed by sender 0> ... <by sender N-1>   (every MS)
//!   DONE <ms> <bytes 0> ... <bytes N-1>
//!   PASS incast.completed / FAIL incast.completed: ...   (every WRITE completed successfully)
//!   PASS incast.verified / FAIL incast.verified: ...     (with --verify)
//! With --verify each WRITE carries a pattern of its sender and sequence number, and when it
//! completes the peer's slot (this process's memory) is compared with it before the slot is
//! written again: every byte of every message arrived, in its place.
//! Exit status 0 when every check passed, 1 otherwise, 2 for bad arguments.

use rrxe_verbs_test::{dp, ffi, util};

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dp::{Dev, Rng, Side};
use ffi::*;
use util::Report;

struct Opts {
    dev: String,
    dev2: String,
    qps: usize,
    size: usize,
    depth: usize,
    secs: f64,
    interval_ms: u64,
    verify: bool,
    drain_secs: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dev: String::new(),
        dev2: String::new(),
        qps: 4,
        size: 65536,
        depth: 4,
        secs: 10.0,
        interval_ms: 200,
        verify: false,
        drain_secs: 120,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dev" => o.dev = dp::arg_val(&mut args, &a)?,
            "--dev2" => o.dev2 = dp::arg_val(&mut args, &a)?,
            "--qps" => o.qps = dp::arg_val(&mut args, &a)?,
            "--size" => o.size = dp::arg_val(&mut args, &a)?,
            "--depth" => o.depth = dp::arg_val(&mut args, &a)?,
            "--secs" => o.secs = dp::arg_val(&mut args, &a)?,
            "--interval-ms" => o.interval_ms = dp::arg_val(&mut args, &a)?,
            "--drain-secs" => o.drain_secs = dp::arg_val(&mut args, &a)?,
            "--verify" => o.verify = true,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.dev.is_empty() || o.dev2.is_empty() {
        return Err("--dev and --dev2 are required".into());
    }
    if !(1..=64).contains(&o.qps)
        || !(8..=1 << 24).contains(&o.size)
        || !o.size.is_multiple_of(8)
        || !(1..=64).contains(&o.depth)
        || o.secs.is_nan()
        || o.secs < 0.0
        || o.interval_ms == 0
    {
        return Err(
            "--qps 1..64, --size 8..16M (a multiple of 8), --depth 1..64, --secs >= 0, --interval-ms > 0"
                .into(),
        );
    }
    Ok(o)
}

/// Word `w` of the message with sequence number `seq` of sender `q`.
fn word(q: usize, seq: u64, w: usize) -> u64 {
    ((q as u64) << 56) ^ (seq << 24) ^ (w as u64) ^ 0x5a5a_0000_0000_0000
}

fn fill(buf: &mut [u8], q: usize, seq: u64) {
    for (w, c) in buf.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&word(q, seq, w).to_le_bytes());
    }
}

/// The first word of `buf` that is not the pattern of (`q`, `seq`), if any.
fn mismatch(buf: &[u8], q: usize, seq: u64) -> Option<usize> {
    buf.chunks_exact(8)
        .enumerate()
        .find(|(w, c)| **c != word(q, seq, *w).to_le_bytes())
        .map(|(w, _)| w)
}

struct Flow {
    snd: Side,
    rcv: Side,
    /// Sequence number of the next WRITE to post, and of the oldest outstanding one.
    next: u64,
    oldest: u64,
    bytes: u64,
}

/// Posts WRITE `seq` of flow `q` into slot `seq % depth`.
fn post(f: &mut Flow, q: usize, o: &Opts, verify: bool) -> Result<(), String> {
    let seq = f.next;
    let slot = (seq % o.depth as u64) as usize * o.size;
    if verify {
        fill(f.snd.mem(slot, o.size), q, seq);
    }
    let mut sge = f.snd.sge(slot, o.size);
    let mut wr = ibv_send_wr {
        wr_id: seq,
        opcode: IBV_WR_RDMA_WRITE,
        send_flags: IBV_SEND_SIGNALED,
        num_sge: 1,
        sg_list: &mut sge,
        ..zeroed()
    };
    wr.wr.rdma.remote_addr = f.rcv.addr() + slot as u64;
    wr.wr.rdma.rkey = f.rcv.rkey();
    dp::post_send(&f.snd.qp, &mut wr)?;
    f.next += 1;
    Ok(())
}

fn line(s: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}");
    let _ = out.flush();
}

fn progress(tag: &str, t0: Instant, flows: &[Flow]) {
    let b: Vec<String> = flows.iter().map(|f| f.bytes.to_string()).collect();
    line(format!(
        "{tag} {} {}",
        t0.elapsed().as_millis(),
        b.join(" ")
    ));
}

fn run(o: &Opts, r: &mut Report) -> Result<(), String> {
    let da = Dev::open(&o.dev)?;
    let db = Dev::open(&o.dev2)?;
    let cap = ibv_qp_cap {
        max_send_wr: o.depth as u32,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut rng = Rng::new(dp::clock_seed());
    let mut flows = Vec::with_capacity(o.qps);
    for i in 0..o.qps {
        let len = o.depth * o.size;
        let snd = Side::new(&da, IBV_QPT_RC, cap, o.depth as i32 * 2, len)?;
        let rcv = Side::new(&db, IBV_QPT_RC, cap, 4, len)?;
        dp::connect(&da, &snd, &db, &rcv, IBV_QPT_RC, 0, &mut rng)?;
        line(format!("QP {i} {} {}", snd.qp.qpn(), rcv.qp.qpn()));
        flows.push(Flow {
            snd,
            rcv,
            next: 0,
            oldest: 0,
            bytes: 0,
        });
    }
    let t0 = Instant::now();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    line(format!(
        "START {}.{:06}",
        wall.as_secs(),
        wall.subsec_micros()
    ));
    let stop = t0 + Duration::from_secs_f64(o.secs);
    let interval = Duration::from_millis(o.interval_ms);
    let mut next_report = t0 + interval;
    for (q, f) in flows.iter_mut().enumerate() {
        for _ in 0..o.depth {
            post(f, q, o, o.verify)?;
        }
    }
    let mut wc = zeroed::<[ibv_wc; 16]>();
    let mut bad_verify: Option<String> = None;
    let mut drain_end: Option<Instant> = None;
    let mut idle = 0u32;
    loop {
        let now = Instant::now();
        if now >= next_report {
            progress("T", t0, &flows);
            while next_report <= now {
                next_report += interval;
            }
        }
        let posting = now < stop;
        if !posting && drain_end.is_none() {
            drain_end = Some(now + Duration::from_secs(o.drain_secs));
        }
        if flows.iter().all(|f| f.oldest == f.next) {
            break;
        }
        if drain_end.is_some_and(|e| now > e) {
            let left: u64 = flows.iter().map(|f| f.next - f.oldest).sum();
            return Err(format!(
                "{left} WRITEs still outstanding {} s after the end",
                o.drain_secs
            ));
        }
        let mut got = 0;
        for (q, f) in flows.iter_mut().enumerate() {
            let n = dp::poll_once(&f.snd.cq, &mut wc)?;
            got += n;
            for w in &wc[..n] {
                if w.status != IBV_WC_SUCCESS {
                    return Err(format!(
                        "sender {q} (qpn {}): {}",
                        f.snd.qp.qpn(),
                        dp::wc_str(w)
                    ));
                }
                if w.wr_id != f.oldest {
                    return Err(format!(
                        "sender {q}: completion of WRITE {} where {} was the oldest",
                        w.wr_id, f.oldest
                    ));
                }
                let seq = f.oldest;
                if o.verify && bad_verify.is_none() {
                    let slot = (seq % o.depth as u64) as usize * o.size;
                    if let Some(wd) = mismatch(f.rcv.mem(slot, o.size), q, seq) {
                        bad_verify = Some(format!(
                            "sender {q} WRITE {seq}: word {wd} of the receiver's slot differs"
                        ));
                    }
                }
                f.oldest += 1;
                f.bytes += o.size as u64;
                if posting {
                    post(f, q, o, o.verify)?;
                }
            }
        }
        if got == 0 {
            idle += 1;
            if idle > 64 {
                std::thread::sleep(Duration::from_micros(300));
            }
        } else {
            idle = 0;
        }
    }
    progress("DONE", t0, &flows);
    r.pass("incast.completed");
    if o.verify {
        match bad_verify {
            None => r.pass("incast.verified"),
            Some(e) => r.fail("incast.verified", e),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rrxe-incast: {e}");
            return ExitCode::from(2);
        }
    };
    let mut r = Report::new(Vec::new(), Vec::new());
    if let Err(e) = run(&o, &mut r) {
        r.fail("incast.completed", e);
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
