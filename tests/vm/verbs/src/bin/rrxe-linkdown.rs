//! rrxe-linkdown: what an RC requester does when the path goes away under it. Two RC QPs
//! (one on each device) with explicit `timeout`/`retry_cnt`; `a` keeps up to `--depth`
//! signalled RDMA WRITEs of `--size` bytes outstanding to `b`. After `--warmup` successful
//! completions the program runs `--down-cmd` (a shell command, e.g.
//! `ip -n peer link set veth1 down`) and measures, from the moment the command returned:
//!
//! * without `--up-cmd` (link pulled): the first unsuccessful completion must be
//!   `IBV_WC_RETRY_EXC_ERR`, no earlier than `retry_cnt` ACK timeouts after the pull and no
//!   later than 4 x (retry_cnt + 1) ACK timeouts + `--slack-ms` (IBTA C9-140: the timer runs
//!   between 4.096 us x 2^timeout and four times that); every WR behind it must be flushed
//!   (`IBV_WC_WR_FLUSH_ERR`) and each WR must complete exactly once;
//! * with `--up-cmd` (link flapped): after `--down-ms` the program runs `--up-cmd`; every WR,
//!   those in flight across the outage included, must then complete successfully (the
//!   retransmit timer recovers) and `--after` more WRITEs must go through, every byte
//!   verified.
//!
//! ```text
//! rrxe-linkdown --dev rrxe0 --dev2 rrxe1 --down-cmd CMD [--up-cmd CMD --down-ms MS]
//!               [--timeout 14] [--retry-cnt 7] [--size 65536] [--depth 8] [--warmup 20]
//!               [--after 20] [--deadline SECS] [--slack-ms 3000] [--seed S]
//!               [--name CHECK_PREFIX (default linkdown, or linkflap with --up-cmd)]
//! ```
//!
//! Prints PASS/FAIL/INFO lines and "N passed, N failed"; exit status non-zero on failure.

use rrxe_verbs_test::{dp, ffi, util};

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dp::{Dev, Rng, Side};
use ffi::*;
use util::Report;

struct Opts {
    dev: String,
    dev2: String,
    down_cmd: String,
    up_cmd: Option<String>,
    down_ms: u64,
    rc: dp::RcParams,
    size: usize,
    depth: usize,
    warmup: u32,
    after: u32,
    deadline: Duration,
    slack_ms: u64,
    seed: u64,
    name: Option<String>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dev: "rrxe0".into(),
        dev2: "rrxe1".into(),
        down_cmd: String::new(),
        up_cmd: None,
        down_ms: 300,
        rc: dp::RcParams::default(),
        size: 65536,
        depth: 8,
        warmup: 20,
        after: 20,
        deadline: Duration::from_secs(60),
        slack_ms: 3000,
        seed: dp::clock_seed(),
        name: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dev" => o.dev = dp::arg_val(&mut args, &a)?,
            "--dev2" => o.dev2 = dp::arg_val(&mut args, &a)?,
            "--down-cmd" => o.down_cmd = dp::arg_val(&mut args, &a)?,
            "--up-cmd" => o.up_cmd = Some(dp::arg_val(&mut args, &a)?),
            "--down-ms" => o.down_ms = dp::arg_val(&mut args, &a)?,
            "--timeout" => o.rc.timeout = dp::arg_val(&mut args, &a)?,
            "--retry-cnt" => o.rc.retry_cnt = dp::arg_val(&mut args, &a)?,
            "--size" => o.size = dp::arg_val(&mut args, &a)?,
            "--depth" => o.depth = dp::arg_val(&mut args, &a)?,
            "--warmup" => o.warmup = dp::arg_val(&mut args, &a)?,
            "--after" => o.after = dp::arg_val(&mut args, &a)?,
            "--deadline" => o.deadline = Duration::from_secs(dp::arg_val(&mut args, &a)?),
            "--slack-ms" => o.slack_ms = dp::arg_val(&mut args, &a)?,
            "--seed" => o.seed = dp::arg_val(&mut args, &a)?,
            "--name" => o.name = Some(dp::arg_val(&mut args, &a)?),
            "-h" | "--help" => {
                println!("see the header of tests/vm/verbs/src/bin/rrxe-linkdown.rs");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.down_cmd.is_empty() {
        return Err("--down-cmd is required".into());
    }
    if o.rc.timeout == 0 || o.rc.timeout > 31 || o.rc.retry_cnt > 7 {
        return Err("--timeout 1..31 (0 is infinite), --retry-cnt 0..7".into());
    }
    o.depth = o.depth.clamp(1, 16);
    Ok(o)
}

fn sh(cmd: &str) -> Result<(), String> {
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .status()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{cmd}: {st}"))
    }
}

/// The WRITEs in flight: wr_id -> (slot, payload).
struct Traffic<'a> {
    a: &'a Side,
    b: &'a Side,
    size: usize,
    depth: usize,
    next: u64,
    inflight: VecDeque<(u64, Vec<u8>)>,
    done_ok: u64,
}

impl Traffic<'_> {
    fn slot(&self, id: u64) -> usize {
        (id as usize % 16) * (self.size + 64)
    }

    fn post(&mut self, rng: &mut Rng) -> Result<(), String> {
        let id = self.next;
        let off = self.slot(id);
        let m = self.a.mem(off, self.size);
        rng.fill(m);
        let payload = m.to_vec();
        let mut sge = self.a.sge(off, self.size);
        let mut wr = ibv_send_wr {
            wr_id: id,
            opcode: IBV_WR_RDMA_WRITE,
            send_flags: IBV_SEND_SIGNALED,
            num_sge: 1,
            sg_list: &mut sge,
            ..zeroed()
        };
        wr.wr.rdma.remote_addr = self.b.addr() + off as u64;
        wr.wr.rdma.rkey = self.b.rkey();
        dp::post_send(&self.a.qp, &mut wr).map_err(|e| format!("WR {id}: {e}"))?;
        self.inflight.push_back((id, payload));
        self.next += 1;
        Ok(())
    }

    fn fill(&mut self, rng: &mut Rng) -> Result<(), String> {
        while self.inflight.len() < self.depth {
            self.post(rng)?;
        }
        Ok(())
    }

    /// Polls one completion (up to `t`), checks it is the oldest WR in flight; for a success,
    /// checks the bytes at the target.
    fn one(&mut self, t: Duration) -> Result<Option<ibv_wc>, String> {
        let w = match dp::poll_n(&self.a.cq, 1, t) {
            Ok(v) => v[0].bitcopy(),
            Err((_, e)) if e.starts_with("0 of") => return Ok(None),
            Err((_, e)) => return Err(e),
        };
        let Some((id, payload)) = self.inflight.pop_front() else {
            return Err(format!(
                "a completion with nothing in flight: {}",
                dp::wc_str(&w)
            ));
        };
        if w.wr_id != id {
            return Err(format!(
                "completion for wr_id {} while {id} is the oldest in flight: {}",
                w.wr_id,
                dp::wc_str(&w)
            ));
        }
        if w.status == IBV_WC_SUCCESS {
            let got = self.b.mem(self.slot(id), self.size);
            if got != payload.as_slice() {
                let i = (0..self.size).find(|&i| got[i] != payload[i]).unwrap_or(0);
                return Err(format!(
                    "WR {id}: target differs at byte {i} after a successful completion"
                ));
            }
            self.done_ok += 1;
        }
        Ok(Some(w))
    }
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rrxe-linkdown: {e}");
            return ExitCode::from(2);
        }
    };
    let mut r = Report::new(Vec::new(), Vec::new());
    let mode = match (&o.name, o.up_cmd.is_some()) {
        (Some(n), _) => n.as_str(),
        (None, true) => "linkflap",
        (None, false) => "linkdown",
    };
    let res = run(&o, &mut r, mode);
    if let Err(e) = res {
        r.fail(&format!("{mode}.run"), format!("{e} (seed {:#x})", o.seed));
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run(o: &Opts, r: &mut Report, mode: &str) -> Result<(), String> {
    let da = Dev::open(&o.dev)?;
    let db = Dev::open(&o.dev2)?;
    let mut rng = Rng::new(o.seed);
    let cap = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mr_len = 16 * (o.size + 64);
    let a = Side::new(&da, IBV_QPT_RC, cap, 64, mr_len)?;
    let b = Side::new(&db, IBV_QPT_RC, cap, 64, mr_len)?;
    dp::connect_with(&da, &a, &db, &b, IBV_QPT_RC, 0, &mut rng, o.rc)?;
    let t_us = o.rc.ack_timeout_us().unwrap_or(0);
    r.info(
        mode,
        format!(
            "{} qpn {:#x} -> {} qpn {:#x}: WRITE {} B x {} outstanding, timeout {} ({} us), retry_cnt {}, seed {:#x}",
            da.name,
            a.qp.qpn(),
            db.name,
            b.qp.qpn(),
            o.size,
            o.depth,
            o.rc.timeout,
            t_us,
            o.rc.retry_cnt,
            o.seed
        ),
    );
    let mut tr = Traffic {
        a: &a,
        b: &b,
        size: o.size,
        depth: o.depth,
        next: 0,
        inflight: VecDeque::new(),
        done_ok: 0,
    };

    // Warm-up: the path works.
    let t0 = Instant::now();
    while tr.done_ok < u64::from(o.warmup) {
        tr.fill(&mut rng)?;
        match tr.one(Duration::from_secs(30))? {
            None => {
                return Err(format!(
                    "warm-up: no completion in 30 s after {} WRs",
                    tr.done_ok
                ))
            }
            Some(w) if w.status != IBV_WC_SUCCESS => {
                return Err(format!("warm-up: {}", dp::wc_str(&w)))
            }
            Some(_) => {}
        }
    }
    tr.fill(&mut rng)?;
    r.info(
        mode,
        format!(
            "warm-up: {} WRITEs in {:.1} s",
            tr.done_ok,
            t0.elapsed().as_secs_f64()
        ),
    );
    println!("RUNNING");

    sh(&o.down_cmd)?;
    let down = Instant::now();
    // What completed meanwhile (the command takes a while under TCG), then a full pipeline of
    // WRs posted on the dead path: these cannot have been delivered before the outage.
    let mut ok_before = 0u32;
    while let Some(w) = tr.one(Duration::ZERO)? {
        if w.status != IBV_WC_SUCCESS {
            return Err(format!(
                "completion before the outage showed: {}",
                dp::wc_str(&w)
            ));
        }
        ok_before += 1;
    }
    let first_dead = tr.next;
    tr.fill(&mut rng)?;
    r.info(
        mode,
        format!(
            "ran `{}`; {ok_before} WRs completed meanwhile; WRs {first_dead}.. posted on the dead path, {} in flight",
            o.down_cmd,
            tr.inflight.len()
        ),
    );

    if let Some(up) = &o.up_cmd {
        std::thread::sleep(Duration::from_millis(o.down_ms));
        sh(up)?;
        r.info(
            mode,
            format!("ran `{up}` {} ms later", down.elapsed().as_millis()),
        );
        let first_after = tr.next;
        let goal = first_after + u64::from(o.after);
        let mut first_err = None;
        let end = Instant::now() + o.deadline;
        while Instant::now() < end {
            while tr.next < goal && tr.inflight.len() < tr.depth {
                tr.post(&mut rng)?;
            }
            if tr.inflight.is_empty() {
                break;
            }
            match tr.one(end.saturating_duration_since(Instant::now()))? {
                None => break,
                Some(w) if w.status != IBV_WC_SUCCESS => {
                    first_err = Some((w, down.elapsed()));
                    break;
                }
                Some(_) => {}
            }
        }
        let took = down.elapsed();
        match first_err {
            Some((w, at)) => r.fail(
                &format!("{mode}.recovers"),
                format!(
                    "{} ms after the link went down: {}",
                    at.as_millis(),
                    dp::wc_str(&w)
                ),
            ),
            None if !tr.inflight.is_empty() || tr.next < goal => r.fail(
                &format!("{mode}.recovers"),
                format!(
                    "hang: {} WRs still in flight {} s after the link went down (oldest wr_id {})",
                    tr.inflight.len(),
                    took.as_secs(),
                    tr.inflight.front().map_or(0, |x| x.0)
                ),
            ),
            None => {
                r.pass(&format!("{mode}.recovers"));
                r.info(
                    mode,
                    format!(
                        "all {} WRs completed successfully and verified, the last {} ms after the link went down",
                        tr.done_ok,
                        took.as_millis()
                    ),
                );
            }
        }
        let st = dp::qp_state(&a.qp)?;
        r.result(
            &format!("{mode}.qp_rts"),
            if st == IBV_QPS_RTS {
                Ok(())
            } else {
                Err(format!("requester QP state {st}"))
            },
        );
        return Ok(());
    }

    // Link pulled: the first error, then flushes.
    let mut first: Option<(ibv_wc, Duration)> = None;
    let mut flushed = 0u32;
    let mut bad_after = Vec::new();
    let mut ok_after = 0u32;
    let mut ghosts = Vec::new();
    let end = down + o.deadline;
    while !tr.inflight.is_empty() {
        let left = end.saturating_duration_since(Instant::now());
        match tr.one(left.max(Duration::from_millis(1)))? {
            None => break,
            Some(w) if first.is_none() && w.status == IBV_WC_SUCCESS => {
                ok_after += 1;
                if w.wr_id >= first_dead {
                    ghosts.push(w.wr_id);
                }
                // keep traffic on the dead path until the requester gives up
                tr.fill(&mut rng)?;
            }
            Some(w) if first.is_none() => first = Some((w, down.elapsed())),
            Some(w) if w.status == IBV_WC_WR_FLUSH_ERR => flushed += 1,
            Some(w) => bad_after.push(dp::wc_str(&w)),
        }
        if Instant::now() >= end {
            break;
        }
    }
    r.result(
        &format!("{mode}.nothing_delivered_on_dead_path"),
        if ghosts.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} WRs posted after the link went down completed successfully (wr_id {:?}...)",
                ghosts.len(),
                &ghosts[..ghosts.len().min(5)]
            ))
        },
    );
    let lo_ms = t_us * u64::from(o.rc.retry_cnt) / 1000;
    let hi_ms = 4 * t_us * (u64::from(o.rc.retry_cnt) + 1) / 1000 + o.slack_ms;
    let n = format!("{mode}.error_completion");
    match &first {
        None => {
            r.fail(
                &n,
                format!(
                    "hang: no error completion {} s after the link went down ({} WRs still in flight, {} completed fine meanwhile)",
                    o.deadline.as_secs(),
                    tr.inflight.len(),
                    ok_after
                ),
            );
            return Ok(());
        }
        Some((w, at)) => {
            r.pass(&n);
            println!(
                "LINKDOWN first error {} after {} ms (window {lo_ms}..{hi_ms} ms: timeout {} = {t_us} us, retry_cnt {}); {ok_after} WRs completed fine after the pull",
                dp::status_str(w.status),
                at.as_millis(),
                o.rc.timeout,
                o.rc.retry_cnt
            );
        }
    }
    let (w, at) = first.unwrap();
    r.result(
        &format!("{mode}.retry_exc_err"),
        if w.status == IBV_WC_RETRY_EXC_ERR {
            Ok(())
        } else {
            Err(format!(
                "first error completion {} (want RETRY_EXC_ERR)",
                dp::wc_str(&w)
            ))
        },
    );
    let ms = at.as_millis() as u64;
    r.result(
        &format!("{mode}.within_retry_window"),
        if ms < lo_ms {
            Err(format!("{ms} ms after the pull: sooner than {} retries of {t_us} us ({lo_ms} ms)", o.rc.retry_cnt))
        } else if ms > hi_ms {
            Err(format!("{ms} ms after the pull: later than 4 x {t_us} us x (retry_cnt + 1) + {} ms slack ({hi_ms} ms)", o.slack_ms))
        } else {
            Ok(())
        },
    );
    r.result(
        &format!("{mode}.rest_flushed"),
        if !tr.inflight.is_empty() {
            Err(format!(
                "{} WRs never completed after the error ({} flushed)",
                tr.inflight.len(),
                flushed
            ))
        } else if !bad_after.is_empty() {
            Err(format!(
                "after the error, not WR_FLUSH_ERR: {}",
                bad_after.join("; ")
            ))
        } else {
            Ok(())
        },
    );
    let extra = dp::drain(&a.cq, Duration::from_millis(200));
    r.result(
        &format!("{mode}.exactly_once"),
        match extra.first() {
            Some(w) => Err(format!(
                "{} completions beyond the WRs posted, e.g. {}",
                extra.len(),
                dp::wc_str(w)
            )),
            None => Ok(()),
        },
    );
    let st = dp::qp_state(&a.qp)?;
    r.result(
        &format!("{mode}.qp_error_state"),
        if st == IBV_QPS_ERR {
            Ok(())
        } else {
            Err(format!("requester QP state {st} (want ERR {IBV_QPS_ERR})"))
        },
    );
    Ok(())
}
