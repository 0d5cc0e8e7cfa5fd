//! rrxe-ucloss: UC over a lossy path. UC has no acknowledgements and no retransmission: a
//! message that loses a packet must be dropped whole by the receiver, never delivered
//! corrupted, truncated, twice or out of order, and the QP must keep working.
//!
//! `a` (on --dev) sends `--msgs` SENDs, SEND_WITH_IMMs and RDMA_WRITE_WITH_IMMs of 1 B..
//! `--max-size` to `b` (on --dev2) in batches of up to 16. Each message carries its index and
//! its length in its first 12 bytes (SENDs) or its immediate data (WRITE_WITH_IMM, into slot
//! index % 32 of b's write area), and the rest is a function of the seed and the index, so
//! every delivered message is checked byte for byte against what was sent under that index.
//! Then single-packet probes show the QP still delivers.
//!
//!   rrxe-ucloss --dev rrxe0 --dev2 rrxe1 [--msgs 300] [--max-size 8192] [--expect-loss]
//!               [--min-delivered PCT] [--seed S]
//!
//! Checks: ucloss.delivered_intact (every delivered message exact, indexes increasing, each
//! at most once, all completions successful), ucloss.some_delivered (at least
//! --min-delivered percent, default 20), ucloss.losses_seen (with --expect-loss: at least one
//! message was dropped, i.e. the fault injection worked), ucloss.still_works (probes get
//! through), ucloss.qps_rts.

use rrxe_verbs_test::{dp, ffi, util};

use std::process::ExitCode;
use std::time::{Duration, Instant};

use dp::{Dev, Rng, Side};
use ffi::*;
use util::Report;

const RQ: usize = 64;
const SLOTS: usize = 32;
const BATCH: usize = 16;

struct Opts {
    dev: String,
    dev2: String,
    msgs: u32,
    max_size: usize,
    expect_loss: bool,
    min_pct: u32,
    seed: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dev: "rrxe0".into(),
        dev2: "rrxe1".into(),
        msgs: 300,
        max_size: 8192,
        expect_loss: false,
        min_pct: 20,
        seed: dp::clock_seed(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dev" => o.dev = dp::arg_val(&mut args, &a)?,
            "--dev2" => o.dev2 = dp::arg_val(&mut args, &a)?,
            "--msgs" => o.msgs = dp::arg_val(&mut args, &a)?,
            "--max-size" => o.max_size = dp::arg_val(&mut args, &a)?,
            "--expect-loss" => o.expect_loss = true,
            "--min-delivered" => o.min_pct = dp::arg_val(&mut args, &a)?,
            "--seed" => o.seed = dp::arg_val(&mut args, &a)?,
            "-h" | "--help" => {
                println!("see the header of tests/vm/verbs/src/bin/rrxe-ucloss.rs");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    o.max_size = o.max_size.max(16);
    Ok(o)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    WriteImm,
}

/// Message `idx`: its kind and bytes (a pure function of the seed and the index).
fn message(seed: u64, idx: u32, max: usize) -> (Kind, Vec<u8>) {
    let mut rng = Rng::new(seed ^ (u64::from(idx) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let kind = match rng.below(3) {
        0 => Kind::Send,
        1 => Kind::SendImm,
        _ => Kind::WriteImm,
    };
    let size = if rng.below(4) == 0 {
        max
    } else {
        rng.range(12, max as u64) as usize
    };
    let mut b = vec![0u8; size];
    rng.fill(&mut b);
    b[..4].copy_from_slice(&idx.to_le_bytes());
    b[4..8].copy_from_slice(&(size as u32).to_le_bytes());
    b[8..12].copy_from_slice(&0x5543_4c53u32.to_le_bytes());
    (kind, b)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rrxe-ucloss: {e}");
            return ExitCode::from(2);
        }
    };
    let mut r = Report::new(Vec::new(), Vec::new());
    if let Err(e) = run(&o, &mut r) {
        r.fail("ucloss.run", format!("{e} (seed {:#x})", o.seed));
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

struct Rx<'a> {
    b: &'a Side,
    max: usize,
    posted: u64,
    consumed: u64,
}

impl Rx<'_> {
    fn recv_off(&self, k: u64) -> usize {
        (k as usize % RQ) * self.max
    }

    fn write_off(&self, idx: u32) -> usize {
        RQ * self.max + (idx as usize % SLOTS) * self.max
    }

    fn refill(&mut self) -> Result<(), String> {
        while self.posted - self.consumed < RQ as u64 {
            let k = self.posted;
            let mut sge = self.b.sge(self.recv_off(k), self.max);
            let mut wr = ibv_recv_wr {
                wr_id: k,
                num_sge: 1,
                sg_list: &mut sge,
                ..zeroed()
            };
            dp::post_recv(&self.b.qp, &mut wr)?;
            self.posted += 1;
        }
        Ok(())
    }
}

fn run(o: &Opts, r: &mut Report) -> Result<(), String> {
    let da = Dev::open(&o.dev)?;
    let db = Dev::open(&o.dev2)?;
    let mut rng = Rng::new(o.seed);
    let cap = ibv_qp_cap {
        max_send_wr: BATCH as u32,
        max_recv_wr: RQ as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let max = o.max_size;
    let a = Side::new(&da, IBV_QPT_UC, cap, 128, BATCH * max)?;
    let b = Side::new(&db, IBV_QPT_UC, cap, 128, (RQ + SLOTS) * max)?;
    dp::connect(&da, &a, &db, &b, IBV_QPT_UC, 0, &mut rng)?;
    r.info(
        "ucloss",
        format!(
            "{} qpn {:#x} -> {} qpn {:#x}: {} messages of 12..{max} B, mtu {}, seed {:#x}",
            da.name,
            a.qp.qpn(),
            db.name,
            b.qp.qpn(),
            o.msgs,
            da.mtu().min(db.mtu()),
            o.seed
        ),
    );
    let mut rx = Rx {
        b: &b,
        max,
        posted: 0,
        consumed: 0,
    };
    rx.refill()?;

    let mut errs: Vec<String> = Vec::new();
    let mut st = St {
        delivered: 0,
        last: None,
        by_kind: [0; 3],
    };
    let t0 = Instant::now();
    let mut idx = 0u32;
    while idx < o.msgs {
        let n = (o.msgs - idx).min(BATCH as u32);
        batch(
            o,
            &a,
            &mut rx,
            &mut st,
            idx,
            n,
            Duration::from_millis(300),
            &mut errs,
        )?;
        idx += n;
        if errs.len() > 20 {
            break;
        }
    }
    let delivered = st.delivered;
    let secs = t0.elapsed().as_secs_f64();
    r.info(
        "ucloss",
        format!(
            "{delivered} of {idx} messages delivered intact in {secs:.1} s (SEND {}, SEND_WITH_IMM {}, WRITE_WITH_IMM {}), {} dropped whole, {} bad",
            st.by_kind[0],
            st.by_kind[1],
            st.by_kind[2],
            (idx - delivered).saturating_sub(errs.len() as u32),
            errs.len()
        ),
    );
    r.cases("ucloss.delivered_intact", errs.clone(), idx as usize);
    let pct = u64::from(delivered) * 100 / u64::from(idx.max(1));
    r.result(
        "ucloss.some_delivered",
        if pct >= u64::from(o.min_pct) {
            Ok(())
        } else {
            Err(format!(
                "{delivered} of {idx} delivered ({pct}% < {}%)",
                o.min_pct
            ))
        },
    );
    if o.expect_loss {
        r.result(
            "ucloss.losses_seen",
            if delivered < idx {
                Ok(())
            } else {
                Err(format!(
                    "all {idx} messages arrived: the fault injection did not bite"
                ))
            },
        );
    }
    // Probes: single-packet messages, one at a time, until 5 arrive (at most 100 tries).
    let one_packet = da.mtu().min(db.mtu()).min(max);
    let mut arrived = 0;
    let mut tries = 0;
    let mut perrs = Vec::new();
    while arrived < 5 && tries < 100 {
        let before = st.delivered;
        let mut i = idx + 1000;
        while message(o.seed, i, max).1.len() > one_packet {
            i += 1;
        }
        batch(
            o,
            &a,
            &mut rx,
            &mut st,
            i,
            1,
            Duration::from_millis(100),
            &mut perrs,
        )?;
        idx = i + 1;
        tries += 1;
        if st.delivered > before {
            arrived += 1;
        }
    }
    r.result(
        "ucloss.still_works",
        if arrived >= 5 && perrs.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{arrived} of {tries} single-packet probes arrived; {}",
                perrs.join("; ")
            ))
        },
    );
    let (sa, sb) = (dp::qp_state(&a.qp)?, dp::qp_state(&b.qp)?);
    r.result(
        "ucloss.qps_rts",
        if sa == IBV_QPS_RTS && sb == IBV_QPS_RTS {
            Ok(())
        } else {
            Err(format!("QP states {sa} / {sb} (want RTS)"))
        },
    );
    Ok(())
}

struct St {
    delivered: u32,
    last: Option<u32>,
    by_kind: [u32; 3],
}

/// Sends indexes first..first+n; returns when the receiver has been quiet for `quiet`.
#[allow(clippy::too_many_arguments)]
fn batch(
    o: &Opts,
    a: &Side,
    rx: &mut Rx,
    st: &mut St,
    first: u32,
    n: u32,
    quiet: Duration,
    errs: &mut Vec<String>,
) -> Result<u32, String> {
    let max = o.max_size;
    let b = rx.b;
    rx.refill()?;
    for j in 0..n {
        let idx = first + j;
        let (kind, msg) = message(o.seed, idx, max);
        let off = j as usize * max;
        a.mem(off, msg.len()).copy_from_slice(&msg);
        let mut sge = a.sge(off, msg.len());
        let mut wr = ibv_send_wr {
            wr_id: u64::from(idx),
            send_flags: IBV_SEND_SIGNALED,
            num_sge: 1,
            sg_list: &mut sge,
            ..zeroed()
        };
        match kind {
            Kind::Send => wr.opcode = IBV_WR_SEND,
            Kind::SendImm => {
                wr.opcode = IBV_WR_SEND_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = idx ^ 0x8000_0000;
            }
            Kind::WriteImm => {
                wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = idx;
                wr.wr.rdma.remote_addr = b.addr() + rx.write_off(idx) as u64;
                wr.wr.rdma.rkey = b.rkey();
            }
        }
        dp::post_send(&a.qp, &mut wr).map_err(|e| format!("message {idx}: {e}"))?;
    }
    // UC completes a send once it is on the wire: all must succeed.
    let sent = dp::poll_n(&a.cq, n as usize, Duration::from_secs(30))
        .map_err(|(_, e)| format!("sender completions of {first}..{}: {e}", first + n))?;
    for (j, w) in sent.iter().enumerate() {
        if w.status != IBV_WC_SUCCESS || w.wr_id != u64::from(first) + j as u64 {
            errs.push(format!("sender completion {}", dp::wc_str(w)));
        }
    }
    // Receiver: whatever arrives until quiet.
    let mut got = 0u32;
    let mut lastseen = Instant::now();
    let mut buf = zeroed::<[ibv_wc; 16]>();
    while lastseen.elapsed() < quiet {
        let k = dp::poll_once(&b.cq, &mut buf)?;
        if k == 0 {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        lastseen = Instant::now();
        for w in &buf[..k] {
            got += 1;
            if w.wr_id != rx.consumed {
                errs.push(format!(
                    "receive completion out of order (want wr_id {}): {}",
                    rx.consumed,
                    dp::wc_str(w)
                ));
            }
            let roff = rx.recv_off(w.wr_id);
            rx.consumed += 1;
            if w.status != IBV_WC_SUCCESS {
                errs.push(format!("receive completion {}", dp::wc_str(w)));
                continue;
            }
            // SAFETY: a union of two u32.
            let imm = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
            let (idx, kind, data) = if w.opcode == IBV_WC_RECV_RDMA_WITH_IMM {
                (
                    imm,
                    Kind::WriteImm,
                    b.mem(rx.write_off(imm), (w.byte_len as usize).min(max))
                        .to_vec(),
                )
            } else {
                let d = b.mem(roff, (w.byte_len as usize).min(max)).to_vec();
                let idx = if d.len() >= 4 {
                    u32::from_le_bytes([d[0], d[1], d[2], d[3]])
                } else {
                    u32::MAX
                };
                let kind = if w.wc_flags & IBV_WC_WITH_IMM != 0 {
                    Kind::SendImm
                } else {
                    Kind::Send
                };
                (idx, kind, d)
            };
            if idx < first || idx >= first + n {
                errs.push(format!(
                    "a message with index {idx} outside the batch {first}..{}: {}",
                    first + n,
                    dp::wc_str(w)
                ));
                continue;
            }
            let (wkind, want) = message(o.seed, idx, max);
            let mut why = Vec::new();
            if wkind != kind {
                why.push("wrong opcode/flags".to_owned());
            }
            if kind == Kind::SendImm && imm != idx ^ 0x8000_0000 {
                why.push(format!("imm {imm:#x}"));
            }
            if w.byte_len as usize != want.len() {
                why.push(format!("byte_len {} (sent {})", w.byte_len, want.len()));
            } else if data != want {
                let i = (0..want.len()).find(|&i| data[i] != want[i]).unwrap_or(0);
                why.push(format!("payload differs from byte {i}"));
            }
            if st.last.is_some_and(|l| idx <= l) {
                why.push(format!(
                    "after message {} (duplicate or reordered)",
                    st.last.unwrap_or(0)
                ));
            }
            if why.is_empty() {
                st.delivered += 1;
                st.by_kind[kind as usize] += 1;
            } else {
                errs.push(format!(
                    "message {idx}: {} ({})",
                    why.join(", "),
                    dp::wc_str(w)
                ));
            }
            st.last = Some(st.last.map_or(idx, |l| l.max(idx)));
        }
    }
    Ok(got)
}
