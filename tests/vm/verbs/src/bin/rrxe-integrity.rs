//! rrxe-integrity: data integrity of the data path. Two QPs (both on one device, looping back,
//! or one on each of two devices) exchange random operations, one at a time in random
//! directions; every byte of every buffer involved is verified, including guard bytes around
//! each target (nothing written outside it) and data sent inline (the source is overwritten
//! right after the post).
//!
//!   rrxe-integrity --dev rrxe0 [--dev2 rrxe1] [--types rc,uc,ud] [--ops N] [--ud-ops N]
//!                  [--seed S] [--max-size BYTES] [--ops-mix write,read,send,atomic]
//!                  [--timeout N] [--retry-cnt N] [--wc-timeout SECS] [--bytes N]
//!                  [--atomic-counter N] [--bursts N] [--max-read BYTES]
//!
//! RC: SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP,
//! ATOMIC_FETCH_AND_ADD; UC: the sends and writes; UD: the sends (payload <= MTU, the GRH in
//! the first 40 bytes of the receive buffer, its IPv4 header checked). Sizes 0 B..1 MiB,
//! random SGE lists up to the QP's max_send_sge / max_recv_sge (max_sge_rd for reads), inline
//! when the payload fits. The seed is printed; `--seed` replays a run. Prints PASS/FAIL lines
//! and "N passed, N failed"; exits non-zero on failure.
//!
//! Options for the reliability suite (the defaults keep the behaviour above):
//!   --ops-mix      the operation families drawn from: write (RDMA_WRITE[_WITH_IMM]), read,
//!                  send (SEND[_WITH_IMM]), atomic (CMP_AND_SWP, FETCH_AND_ADD); default all
//!   --max-size     largest message (default 1 MiB; up to 4 MiB and more: the MRs grow with it)
//!   --max-read     largest RDMA READ (default --max-size); sizes are drawn as without it and
//!                  then capped, so a seed replays the same operations
//!   --timeout, --retry-cnt  the RC QPs' local ACK timeout (4.096 us * 2^N) and retry count
//!                  (default 18 and 7)
//!   --wc-timeout   seconds each completion may take (default 30; 120 for very lossy links)
//!   --bytes N      keep drawing operations until N payload bytes moved (suffixes K, M, G);
//!                  --ops still caps the count when given too
//!   --atomic-counter N  RC only, after the random operations: N FETCH_AND_ADDs per direction
//!                  on one counter, up to max_rd_atomic outstanding; each returned value must
//!                  be the counter before that add (all distinct) and the final value the
//!                  sum of the adds: an atomic executed twice or lost shows (exactly-once)
//!   --bursts N     RC only: N bursts of up to 16 RDMA WRITEs and READs posted at once on
//!                  disjoint buffers (several messages in flight), every byte verified

use rrxe_verbs_test::{dp, ffi, util, verbs};

use std::process::ExitCode;
use std::time::{Duration, Instant};

use dp::{Dev, Rng, Side};
use ffi::*;
use util::{ename, Report};
use verbs::Ah;

const QKEY: u32 = 0x1111_1111;
const GRH: usize = 40;
const GUARD: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    Cas,
    Faa,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Send => "SEND",
            Op::SendImm => "SEND_WITH_IMM",
            Op::Write => "RDMA_WRITE",
            Op::WriteImm => "RDMA_WRITE_WITH_IMM",
            Op::Read => "RDMA_READ",
            Op::Cas => "ATOMIC_CMP_AND_SWP",
            Op::Faa => "ATOMIC_FETCH_AND_ADD",
        }
    }
}

const RC_OPS: [Op; 7] = [
    Op::Send,
    Op::SendImm,
    Op::Write,
    Op::WriteImm,
    Op::Read,
    Op::Cas,
    Op::Faa,
];
const UC_OPS: [Op; 4] = [Op::Send, Op::SendImm, Op::Write, Op::WriteImm];
const UD_OPS: [Op; 2] = [Op::Send, Op::SendImm];

struct Opts {
    dev: String,
    dev2: Option<String>,
    types: Vec<String>,
    ops: u32,
    ops_given: bool,
    ud_ops: u32,
    seed: u64,
    max_size: usize,
    max_read: Option<usize>,
    mix: Vec<Op>,
    rc: dp::RcParams,
    wc_timeout: Duration,
    bytes: Option<u64>,
    atomic_counter: u32,
    bursts: u32,
}

fn parse_mix(v: &str) -> Result<Vec<Op>, String> {
    let mut out = Vec::new();
    for f in v.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        match f {
            "write" => out.extend([Op::Write, Op::WriteImm]),
            "read" => out.push(Op::Read),
            "send" => out.extend([Op::Send, Op::SendImm]),
            "atomic" => out.extend([Op::Cas, Op::Faa]),
            _ => {
                return Err(format!(
                    "--ops-mix: unknown family {f} (write, read, send, atomic)"
                ))
            }
        }
    }
    if out.is_empty() {
        return Err("--ops-mix: empty".into());
    }
    Ok(out)
}

fn parse_bytes(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let (num, mul) = match v.char_indices().last() {
        Some((i, 'K' | 'k')) => (&v[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&v[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .map(|n| n * mul)
        .map_err(|e| format!("--bytes {v}: {e}"))
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dev: "rrxe0".to_owned(),
        dev2: None,
        types: vec!["rc".into(), "uc".into(), "ud".into()],
        ops: 300,
        ud_ops: 100,
        seed: dp::clock_seed(),
        max_size: 1 << 20,
        max_read: None,
        mix: RC_OPS.to_vec(),
        ops_given: false,
        rc: dp::RcParams::default(),
        wc_timeout: Duration::from_secs(30),
        bytes: None,
        atomic_counter: 0,
        bursts: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dev" => o.dev = dp::arg_val(&mut args, &a)?,
            "--dev2" => o.dev2 = Some(dp::arg_val(&mut args, &a)?),
            "--types" => {
                o.types = dp::arg_val::<String>(&mut args, &a)?
                    .split(',')
                    .map(str::to_owned)
                    .collect()
            }
            "--ops" => {
                o.ops = dp::arg_val(&mut args, &a)?;
                o.ops_given = true;
            }
            "--ops-mix" => o.mix = parse_mix(&dp::arg_val::<String>(&mut args, &a)?)?,
            "--timeout" => o.rc.timeout = dp::arg_val(&mut args, &a)?,
            "--retry-cnt" => o.rc.retry_cnt = dp::arg_val(&mut args, &a)?,
            "--wc-timeout" => o.wc_timeout = Duration::from_secs(dp::arg_val(&mut args, &a)?),
            "--bytes" => o.bytes = Some(parse_bytes(&dp::arg_val::<String>(&mut args, &a)?)?),
            "--atomic-counter" => o.atomic_counter = dp::arg_val(&mut args, &a)?,
            "--bursts" => o.bursts = dp::arg_val(&mut args, &a)?,
            "--ud-ops" => o.ud_ops = dp::arg_val(&mut args, &a)?,
            "--seed" => o.seed = dp::arg_val(&mut args, &a)?,
            "--max-size" => o.max_size = dp::arg_val(&mut args, &a)?,
            "--max-read" => o.max_read = Some(dp::arg_val(&mut args, &a)?),
            "-h" | "--help" => {
                println!("see the header of tests/vm/verbs/src/bin/rrxe-integrity.rs");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.max_size < 64 {
        return Err("--max-size must be at least 64".into());
    }
    if o.rc.retry_cnt > 7 || o.rc.timeout > 31 {
        return Err("--retry-cnt is 0..7, --timeout 0..31".into());
    }
    Ok(o)
}

/// The SGE list of a `total`-byte buffer scattered over `base..base + area`: up to `max_sge`
/// pieces (0 or 1 for an empty buffer) at random offsets with random gaps between them.
fn scatter(
    rng: &mut Rng,
    base: usize,
    area: usize,
    total: usize,
    max_sge: usize,
) -> Vec<(usize, usize)> {
    if total == 0 {
        return if rng.coin() || max_sge == 0 {
            Vec::new()
        } else {
            vec![(base + GUARD + rng.below(64) as usize, 0)]
        };
    }
    let n = (1 + rng.below(max_sge.max(1) as u64) as usize).min(total);
    let mut cuts: Vec<usize> = (0..n - 1)
        .map(|_| 1 + rng.below(total as u64 - 1) as usize)
        .collect();
    cuts.push(0);
    cuts.push(total);
    cuts.sort_unstable();
    cuts.dedup();
    let lens: Vec<usize> = cuts.windows(2).map(|w| w[1] - w[0]).collect();
    let slack = area - total - 2 * GUARD - lens.len() * 64;
    let mut cur = base + GUARD + rng.below(slack.min(65536) as u64) as usize;
    let mut out = Vec::new();
    for l in lens {
        out.push((cur, l));
        cur += l + rng.below(64) as usize;
    }
    out
}

fn span(sges: &[(usize, usize)], lo_limit: usize, hi_limit: usize) -> (usize, usize) {
    let lo = sges.iter().map(|s| s.0).min().unwrap_or(lo_limit + GUARD);
    let hi = sges.iter().map(|s| s.0 + s.1).max().unwrap_or(lo);
    (
        lo.saturating_sub(GUARD).max(lo_limit),
        (hi + GUARD).min(hi_limit),
    )
}

/// Fills `lo..hi` of `side` with random bytes and returns a copy (what must stay there,
/// except where the operation writes).
fn poison(side: &Side, rng: &mut Rng, lo: usize, hi: usize) -> Vec<u8> {
    let m = side.mem(lo, hi - lo);
    rng.fill(m);
    m.to_vec()
}

/// Writes `stream` into `expected` (a copy of `lo..`) along the SGE list.
fn place(expected: &mut [u8], lo: usize, sges: &[(usize, usize)], stream: &[u8]) {
    let mut pos = 0;
    for &(off, len) in sges {
        if pos >= stream.len() {
            break;
        }
        let n = len.min(stream.len() - pos);
        expected[off - lo..off - lo + n].copy_from_slice(&stream[pos..pos + n]);
        pos += n;
    }
}

fn gather(side: &Side, sges: &[(usize, usize)], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    for &(off, len) in sges {
        let k = len.min(n - out.len());
        out.extend_from_slice(side.mem(off, k));
        if out.len() == n {
            break;
        }
    }
    out
}

fn compare(side: &Side, lo: usize, expected: &[u8], what: &str) -> Result<(), String> {
    let got = side.mem(lo, expected.len());
    let bad: Vec<usize> = (0..expected.len())
        .filter(|&i| got[i] != expected[i])
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    let i = bad[0];
    Err(format!(
        "{what}: {} of {} bytes differ, first at MR offset {:#x} (got {:#04x}, want {:#04x})",
        bad.len(),
        expected.len(),
        lo + i,
        got[i],
        expected[i]
    ))
}

fn sge_list(side: &Side, sges: &[(usize, usize)]) -> Vec<ibv_sge> {
    sges.iter().map(|&(o, l)| side.sge(o, l)).collect()
}

fn one_wc(side: &Side, who: &str, timeout: Duration) -> Result<ibv_wc, String> {
    match dp::poll_n(&side.cq, 1, timeout) {
        Ok(v) => Ok(v[0].bitcopy()),
        Err((_, e)) => Err(format!("{who}: {e}")),
    }
}

struct Stats {
    count: [u32; 7],
    bytes: u64,
    inline: u32,
    max_sges: usize,
    zero: u32,
    big: u32,
}

struct Pair<'a> {
    t: u32,
    da: &'a Dev,
    db: &'a Dev,
    a: &'a Side,
    b: &'a Side,
    ah_ab: Option<&'a Ah>,
    ah_ba: Option<&'a Ah>,
    half: usize,
    max_size: usize,
    max_read: usize,
    send_sge: usize,
    recv_sge: usize,
    rd_sge: usize,
    inline: usize,
    mtu: usize,
    wc_timeout: Duration,
    mix: Vec<Op>,
}

impl Pair<'_> {
    fn pick_size(&self, rng: &mut Rng) -> usize {
        if self.t == IBV_QPT_UD {
            return if rng.below(10) == 0 {
                self.mtu
            } else {
                rng.below(self.mtu as u64 + 1) as usize
            };
        }
        let c = rng.below(100);
        let s = match c {
            0..=9 => 0,
            10..=34 => rng.range(1, 64),
            35..=59 => rng.range(65, 4096),
            60..=84 => rng.range(4097, 65536),
            _ => rng.range(65537, self.max_size as u64),
        } as usize;
        if c >= 97 {
            self.max_size
        } else {
            s.min(self.max_size)
        }
    }

    /// One operation `i` from `s` to `r`; Err describes the first mismatch.
    fn op(
        &self,
        i: u64,
        op: Op,
        fwd: bool,
        rng: &mut Rng,
        st: &mut Stats,
    ) -> Result<String, String> {
        let (s, ds, r, dr) = if fwd {
            (self.a, self.da, self.b, self.db)
        } else {
            (self.b, self.db, self.a, self.da)
        };
        let half = self.half;
        let mut wr = ibv_send_wr {
            wr_id: i,
            send_flags: IBV_SEND_SIGNALED,
            ..zeroed()
        };
        let imm = rng.u32();
        let with_imm = matches!(op, Op::SendImm | Op::WriteImm);
        if with_imm {
            wr.imm_data_invalidated_rkey_union.imm_data = imm;
        }
        let size = match op {
            Op::Cas | Op::Faa => 8,
            Op::Read => self.pick_size(rng).min(self.max_read),
            _ => self.pick_size(rng),
        };
        let mut desc = format!("op {i} {} {} B {}->{}", op.name(), size, ds.name, dr.name);
        st.count[RC_OPS.iter().position(|&o| o == op).unwrap_or(0)] += 1;
        st.bytes += size as u64;
        if size == 0 {
            st.zero += 1;
        }
        if size > 65536 {
            st.big += 1;
        }

        // Source data (sends and writes): scattered in s's first half.
        let mut src = Vec::new();
        let mut payload = Vec::new();
        if matches!(op, Op::Send | Op::SendImm | Op::Write | Op::WriteImm) {
            src = scatter(rng, 0, half, size, self.send_sge);
            for &(o, l) in &src {
                let m = s.mem(o, l);
                rng.fill(m);
                payload.extend_from_slice(m);
            }
        }
        let mut sg = sge_list(s, &src);
        let inline = !src.is_empty() && self.inline > 0 && size <= self.inline && rng.coin();
        if inline {
            wr.send_flags |= IBV_SEND_INLINE;
            st.inline += 1;
            desc.push_str(" inline");
        }
        st.max_sges = st.max_sges.max(src.len());
        desc.push_str(&format!(" sges {}", src.len()));

        // What the receiver must see.
        let mut rsges = Vec::new();
        let mut rspan = (0, 0);
        let mut rbefore = Vec::new();
        let mut recv_wr = ibv_recv_wr {
            wr_id: i,
            ..zeroed()
        };
        let grh = if self.t == IBV_QPT_UD { GRH } else { 0 };
        let want_recv = matches!(op, Op::Send | Op::SendImm | Op::WriteImm);
        if matches!(op, Op::Send | Op::SendImm) {
            let extra = if rng.coin() {
                0
            } else {
                rng.below(64) as usize
            };
            rsges = scatter(rng, half, half, grh + size + extra, self.recv_sge);
            if rsges.is_empty() && grh + size > 0 {
                return Err(format!("{desc}: internal: empty receive list"));
            }
            rspan = span(&rsges, half, 2 * half);
            rbefore = poison(r, rng, rspan.0, rspan.1);
            desc.push_str(&format!(" recv sges {}", rsges.len()));
        }
        if want_recv {
            let mut rrecv = sge_list(r, &rsges);
            recv_wr.num_sge = rrecv.len() as i32;
            recv_wr.sg_list = rrecv.as_mut_ptr();
            dp::post_recv(&r.qp, &mut recv_wr).map_err(|e| format!("{desc}: {e}"))?;
        }

        // Remote / local targets of writes, reads and atomics.
        let mut tgt = (0, 0);
        let mut tbefore = Vec::new();
        let mut lsges = Vec::new();
        let mut atomic = (0u64, 0u64);
        match op {
            Op::Write | Op::WriteImm => {
                let off = half + GUARD + rng.below((half - size - 2 * GUARD) as u64) as usize;
                tgt = (off, off + size);
                tbefore = poison(r, rng, off - GUARD, off + size + GUARD);
                wr.wr.rdma.remote_addr = r.addr() + off as u64;
                wr.wr.rdma.rkey = r.rkey();
            }
            Op::Read => {
                let off = rng.below((half - size) as u64) as usize;
                payload = {
                    let m = r.mem(off, size);
                    rng.fill(m);
                    m.to_vec()
                };
                lsges = scatter(rng, half, half, size, self.rd_sge);
                tgt = span(&lsges, half, 2 * half);
                tbefore = poison(s, rng, tgt.0, tgt.1);
                sg = sge_list(s, &lsges);
                wr.wr.rdma.remote_addr = r.addr() + off as u64;
                wr.wr.rdma.rkey = r.rkey();
                st.max_sges = st.max_sges.max(lsges.len());
                desc.push_str(&format!(" read sges {}", lsges.len()));
            }
            Op::Cas | Op::Faa => {
                let off = half + 64 + 8 * rng.below(((half - 128) / 8) as u64) as usize;
                tgt = (off, off + 8);
                tbefore = poison(r, rng, off - 16, off + 24);
                let orig = rng.u64();
                r.mem(off, 8).copy_from_slice(&orig.to_ne_bytes());
                tbefore[16..24].copy_from_slice(&orig.to_ne_bytes());
                let (cmp, swap) = (if rng.coin() { orig } else { rng.u64() }, rng.u64());
                let new = if op == Op::Faa {
                    orig.wrapping_add(cmp)
                } else if cmp == orig {
                    swap
                } else {
                    orig
                };
                atomic = (orig, new);
                wr.wr.atomic.remote_addr = r.addr() + off as u64;
                wr.wr.atomic.rkey = r.rkey();
                wr.wr.atomic.compare_add = cmp;
                wr.wr.atomic.swap = swap;
                let loff = half + 64 + 8 * rng.below(((half - 128) / 8) as u64) as usize;
                lsges = vec![(loff, 8)];
                rbefore = poison(s, rng, loff - 16, loff + 24);
                rspan = (loff - 16, loff + 24);
                sg = sge_list(s, &lsges);
                desc.push_str(&format!(
                    " orig {orig:#x} {} {cmp:#x} swap {swap:#x}",
                    if op == Op::Faa { "add" } else { "compare" }
                ));
            }
            _ => {}
        }

        wr.opcode = match op {
            Op::Send => IBV_WR_SEND,
            Op::SendImm => IBV_WR_SEND_WITH_IMM,
            Op::Write => IBV_WR_RDMA_WRITE,
            Op::WriteImm => IBV_WR_RDMA_WRITE_WITH_IMM,
            Op::Read => IBV_WR_RDMA_READ,
            Op::Cas => IBV_WR_ATOMIC_CMP_AND_SWP,
            Op::Faa => IBV_WR_ATOMIC_FETCH_AND_ADD,
        };
        wr.num_sge = sg.len() as i32;
        wr.sg_list = sg.as_mut_ptr();
        if self.t == IBV_QPT_UD {
            let ah = if fwd { self.ah_ab } else { self.ah_ba };
            wr.wr.ud.ah = ah.map_or(std::ptr::null_mut(), |a| a.ptr);
            wr.wr.ud.remote_qpn = r.qp.qpn();
            wr.wr.ud.remote_qkey = QKEY;
        }
        dp::post_send(&s.qp, &mut wr).map_err(|e| format!("{desc}: {e}"))?;
        if inline {
            // The data was copied at post time: the buffer is the caller's again.
            for &(o, l) in &src {
                rng.fill(s.mem(o, l));
            }
        }

        // Completions.
        let w = one_wc(s, "sender", self.wc_timeout).map_err(|e| format!("{desc}: {e}"))?;
        let want_op = match op {
            Op::Send | Op::SendImm => IBV_WC_SEND,
            Op::Write | Op::WriteImm => IBV_WC_RDMA_WRITE,
            Op::Read => IBV_WC_RDMA_READ,
            Op::Cas => IBV_WC_COMP_SWAP,
            Op::Faa => IBV_WC_FETCH_ADD,
        };
        let mut errs = Vec::new();
        if w.status != IBV_WC_SUCCESS
            || w.wr_id != i
            || w.opcode != want_op
            || w.qp_num != s.qp.qpn()
        {
            errs.push(format!("sender completion {}", dp::wc_str(&w)));
        }
        if matches!(op, Op::Read | Op::Cas | Op::Faa) && w.byte_len as usize != size {
            errs.push(format!("sender byte_len {} (want {size})", w.byte_len));
        }
        if want_recv {
            let w = one_wc(r, "receiver", self.wc_timeout).map_err(|e| format!("{desc}: {e}"))?;
            let want_op = if op == Op::WriteImm {
                IBV_WC_RECV_RDMA_WITH_IMM
            } else {
                IBV_WC_RECV
            };
            // SAFETY: a union of two u32.
            let got_imm = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
            let flags_ok = (w.wc_flags & IBV_WC_WITH_IMM != 0) == with_imm
                && (self.t != IBV_QPT_UD || w.wc_flags & IBV_WC_GRH != 0);
            if w.status != IBV_WC_SUCCESS
                || w.wr_id != i
                || w.opcode != want_op
                || w.qp_num != r.qp.qpn()
                || w.byte_len as usize != grh + size
                || !flags_ok
                || (with_imm && got_imm != imm)
                || (self.t == IBV_QPT_UD && w.src_qp != s.qp.qpn())
            {
                errs.push(format!(
                    "receiver completion {} (want {} len {} imm {})",
                    dp::wc_str(&w),
                    dp::wc_opcode_str(want_op),
                    grh + size,
                    if with_imm {
                        format!("{imm:#x}")
                    } else {
                        "none".into()
                    }
                ));
            }
        }
        if !errs.is_empty() {
            return Err(format!("{desc}: {}", errs.join("; ")));
        }
        if self.t == IBV_QPT_UC && op == Op::Write {
            // UC has no acknowledgements: the sender's completion does not mean the data
            // landed. A zero-length SEND behind it (UC delivers in order) does.
            self.fence(s, r, i)
                .map_err(|e| format!("{desc}: fence: {e}"))?;
        }

        // Every byte.
        match op {
            Op::Send | Op::SendImm => {
                let mut stream = Vec::with_capacity(grh + size);
                if grh > 0 {
                    let g = gather(r, &rsges, GRH);
                    check_grh(&g, ds, dr).map_err(|e| format!("{desc}: {e}"))?;
                    stream.extend_from_slice(&g);
                }
                stream.extend_from_slice(&payload);
                place(&mut rbefore, rspan.0, &rsges, &stream);
                compare(r, rspan.0, &rbefore, "receive buffers")
                    .map_err(|e| format!("{desc}: {e}"))?;
            }
            Op::Write | Op::WriteImm => {
                tbefore[GUARD..GUARD + size].copy_from_slice(&payload);
                compare(r, tgt.0 - GUARD, &tbefore, "write target")
                    .map_err(|e| format!("{desc}: {e}"))?;
            }
            Op::Read => {
                place(&mut tbefore, tgt.0, &lsges, &payload);
                compare(s, tgt.0, &tbefore, "read destination")
                    .map_err(|e| format!("{desc}: {e}"))?;
            }
            Op::Cas | Op::Faa => {
                tbefore[16..24].copy_from_slice(&atomic.1.to_ne_bytes());
                compare(r, tgt.0 - 16, &tbefore, "atomic target")
                    .map_err(|e| format!("{desc}: {e}"))?;
                rbefore[16..24].copy_from_slice(&atomic.0.to_ne_bytes());
                compare(s, rspan.0, &rbefore, "atomic result")
                    .map_err(|e| format!("{desc}: {e}"))?;
            }
        }
        Ok(desc)
    }
}

impl Pair<'_> {
    fn fence(&self, s: &Side, r: &Side, i: u64) -> Result<(), String> {
        let id = i | 1 << 63;
        let mut rw = ibv_recv_wr {
            wr_id: id,
            ..zeroed()
        };
        dp::post_recv(&r.qp, &mut rw)?;
        let mut sw = ibv_send_wr {
            wr_id: id,
            opcode: IBV_WR_SEND,
            send_flags: IBV_SEND_SIGNALED,
            ..zeroed()
        };
        dp::post_send(&s.qp, &mut sw)?;
        for (side, who) in [(s, "sender"), (r, "receiver")] {
            let w = one_wc(side, who, self.wc_timeout)?;
            if w.status != IBV_WC_SUCCESS || w.wr_id != id || w.byte_len != 0 && who == "receiver" {
                return Err(format!("{who} completion {}", dp::wc_str(&w)));
            }
        }
        Ok(())
    }
}

impl Pair<'_> {
    /// `n` bursts of up to 16 RDMA WRITEs and READs (those of the mix) posted as one list,
    /// each on its own slot of the MRs, in a random direction per burst; completions must come
    /// back in order, and every slot hold exactly what it should. Returns (WRs, bytes).
    fn bursts(&self, n: u32, rng: &mut Rng) -> Result<(u64, u64), String> {
        const K: usize = 16;
        let ops: Vec<Op> = [Op::Write, Op::Read]
            .into_iter()
            .filter(|o| self.mix.contains(o))
            .collect();
        if ops.is_empty() {
            return Ok((0, 0));
        }
        let half = self.half;
        let slot = ((half - 64) / K) & !63;
        let maxp = (slot - 2 * GUARD).min(65536).min(self.max_size);
        let (mut wrs_done, mut bytes) = (0u64, 0u64);
        for b in 0..u64::from(n) {
            let fwd = rng.coin();
            let (s, ds, r, dr) = if fwd {
                (self.a, self.da, self.b, self.db)
            } else {
                (self.b, self.db, self.a, self.da)
            };
            let k = 1 + rng.below(K as u64) as usize;
            let mut plan = Vec::with_capacity(k);
            let mut sges = Vec::with_capacity(k);
            for j in 0..k {
                let op = ops[rng.below(ops.len() as u64) as usize];
                let size = if rng.below(4) == 0 {
                    maxp
                } else {
                    rng.below(maxp as u64 + 1) as usize
                };
                let lo = j * slot;
                // (payload, side checked, slot start in that side, expected slot content)
                let (payload, expect_side_is_r, tlo) = match op {
                    Op::Write => {
                        let m = s.mem(lo + GUARD, size);
                        rng.fill(m);
                        (m.to_vec(), true, half + lo)
                    }
                    _ => {
                        let m = r.mem(lo + GUARD, size);
                        rng.fill(m);
                        (m.to_vec(), false, half + lo)
                    }
                };
                let tside = if expect_side_is_r { r } else { s };
                let mut expected = poison(tside, rng, tlo, tlo + slot);
                expected[GUARD..GUARD + size].copy_from_slice(&payload);
                sges.push(if op == Op::Write {
                    s.sge(lo + GUARD, size)
                } else {
                    s.sge(half + lo + GUARD, size)
                });
                plan.push((op, size, expect_side_is_r, tlo, expected));
                bytes += size as u64;
            }
            let mut wrs: Vec<ibv_send_wr> = (0..k)
                .map(|j| {
                    let (op, _, _, _, _) = &plan[j];
                    let mut wr = ibv_send_wr {
                        wr_id: b << 8 | j as u64,
                        send_flags: IBV_SEND_SIGNALED,
                        num_sge: 1,
                        ..zeroed()
                    };
                    let lo = j * slot;
                    if *op == Op::Write {
                        wr.opcode = IBV_WR_RDMA_WRITE;
                        wr.wr.rdma.remote_addr = r.addr() + (half + lo + GUARD) as u64;
                    } else {
                        wr.opcode = IBV_WR_RDMA_READ;
                        wr.wr.rdma.remote_addr = r.addr() + (lo + GUARD) as u64;
                    }
                    wr.wr.rdma.rkey = r.rkey();
                    wr
                })
                .collect();
            for j in 0..k {
                wrs[j].sg_list = &mut sges[j];
                if j + 1 < k {
                    let next: *mut ibv_send_wr = &mut wrs[j + 1];
                    wrs[j].next = next;
                }
            }
            let desc = format!(
                "burst {b} {}->{}: {}",
                ds.name,
                dr.name,
                plan.iter()
                    .map(|(op, size, ..)| format!(
                        "{} {size}",
                        if *op == Op::Write { "W" } else { "R" }
                    ))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            dp::post_send(&s.qp, &mut wrs[0]).map_err(|e| format!("{desc}: {e}"))?;
            let wcs = dp::poll_n(&s.cq, k, self.wc_timeout).map_err(|(got, e)| {
                format!(
                    "{desc}: sender: {e} (got {})",
                    got.iter().map(dp::wc_str).collect::<Vec<_>>().join("; ")
                )
            })?;
            for (j, w) in wcs.iter().enumerate() {
                let want = if plan[j].0 == Op::Write {
                    IBV_WC_RDMA_WRITE
                } else {
                    IBV_WC_RDMA_READ
                };
                if w.status != IBV_WC_SUCCESS || w.wr_id != b << 8 | j as u64 || w.opcode != want {
                    return Err(format!("{desc}: completion {j}: {}", dp::wc_str(w)));
                }
            }
            for (j, (op, size, on_r, tlo, expected)) in plan.iter().enumerate() {
                let side = if *on_r { r } else { s };
                compare(
                    side,
                    *tlo,
                    expected,
                    &format!("WR {j} ({} {size} B) slot", op.name()),
                )
                .map_err(|e| format!("{desc}: {e}"))?;
            }
            wrs_done += k as u64;
        }
        Ok((wrs_done, bytes))
    }

    /// `n` FETCH_AND_ADDs on one counter of the responder, up to 16 posted at a time: the
    /// returned values must be the running sums (so all distinct) and the final value the
    /// total; an atomic lost, executed twice or replayed with a fresh result shows.
    fn atomic_counter(&self, n: u32, fwd: bool, rng: &mut Rng) -> Result<String, String> {
        const K: u64 = 16;
        let (s, ds, r, dr) = if fwd {
            (self.a, self.da, self.b, self.db)
        } else {
            (self.b, self.db, self.a, self.da)
        };
        let half = self.half;
        let off = half + 64;
        let mut guard = poison(r, rng, off - 16, off + 24);
        let v0 = rng.u64();
        r.mem(off, 8).copy_from_slice(&v0.to_ne_bytes());
        let slot = |j: u64| half + 4096 + 16 * (j % K) as usize;
        let adds: Vec<u64> = (0..n).map(|_| rng.u64() | 1).collect();
        let desc = format!(
            "atomic counter {}->{} ({n} FETCH_AND_ADD, start {v0:#x})",
            ds.name, dr.name
        );
        let post = |j: u64, rng: &mut Rng| -> Result<(), String> {
            rng.fill(s.mem(slot(j), 8));
            let mut sge = s.sge(slot(j), 8);
            let mut wr = ibv_send_wr {
                wr_id: j,
                opcode: IBV_WR_ATOMIC_FETCH_AND_ADD,
                send_flags: IBV_SEND_SIGNALED,
                num_sge: 1,
                sg_list: &mut sge,
                ..zeroed()
            };
            wr.wr.atomic.remote_addr = r.addr() + off as u64;
            wr.wr.atomic.rkey = r.rkey();
            wr.wr.atomic.compare_add = adds[j as usize];
            dp::post_send(&s.qp, &mut wr)
        };
        let n = u64::from(n);
        let mut posted = 0u64;
        while posted < n.min(K) {
            post(posted, rng).map_err(|e| format!("{desc}: WR {posted}: {e}"))?;
            posted += 1;
        }
        let mut expect = v0;
        let mut seen = std::collections::HashSet::new();
        for j in 0..n {
            let w = one_wc(s, "requester", self.wc_timeout)
                .map_err(|e| format!("{desc}: WR {j}: {e}"))?;
            if w.status != IBV_WC_SUCCESS
                || w.wr_id != j
                || w.opcode != IBV_WC_FETCH_ADD
                || w.byte_len != 8
            {
                return Err(format!("{desc}: WR {j}: completion {}", dp::wc_str(&w)));
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(s.mem(slot(j), 8));
            let got = u64::from_ne_bytes(b);
            if !seen.insert(got) {
                return Err(format!(
                    "{desc}: WR {j} returned {got:#x} again (an add executed twice?)"
                ));
            }
            if got != expect {
                return Err(format!(
                    "{desc}: WR {j} returned {got:#x}, want {expect:#x} (the counter before it)"
                ));
            }
            expect = expect.wrapping_add(adds[j as usize]);
            if posted < n {
                post(posted, rng).map_err(|e| format!("{desc}: WR {posted}: {e}"))?;
                posted += 1;
            }
        }
        guard[16..24].copy_from_slice(&expect.to_ne_bytes());
        compare(
            r,
            off - 16,
            &guard,
            "counter (and 16 guard bytes each side)",
        )
        .map_err(|e| format!("{desc}: final: {e}"))?;
        if let Some(w) = dp::drain(&s.cq, Duration::from_millis(50)).first() {
            return Err(format!(
                "{desc}: extra completion after the last: {}",
                dp::wc_str(w)
            ));
        }
        Ok(format!(
            "{desc}: {n} distinct running sums, final {expect:#x}: exactly once"
        ))
    }
}

/// The RoCE v2 (IPv4) GRH area: bytes 20..40 hold the IPv4 header of the packet.
fn check_grh(g: &[u8], from: &Dev, to: &Dev) -> Result<(), String> {
    let ip = &g[20..40];
    let src = std::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = std::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    if ip[0] != 0x45 || ip[9] != 17 || src != from.ipv4() || dst != to.ipv4() {
        return Err(format!(
            "GRH: IPv4 header {:02x?} (want version 4, UDP, {} -> {})",
            ip,
            from.ipv4(),
            to.ipv4()
        ));
    }
    Ok(())
}

fn tname(t: u32) -> &'static str {
    match t {
        IBV_QPT_RC => "rc",
        IBV_QPT_UC => "uc",
        _ => "ud",
    }
}

fn run(o: &Opts, da: &Dev, db: &Dev, t: u32, r: &mut Report, name: &str) -> Result<(), String> {
    let seed = o.seed ^ u64::from(t).wrapping_mul(0x1000_0000_01b3);
    let mut rng = Rng::new(seed);
    let ops = if t == IBV_QPT_UD { o.ud_ops } else { o.ops };
    let max_sge = da.attr.max_sge.min(db.attr.max_sge).clamp(1, 8) as u32;
    let rd_sge = (da.attr.max_sge_rd.min(db.attr.max_sge_rd).max(1) as u32).min(max_sge);
    let cap = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: max_sge,
        max_recv_sge: max_sge,
        max_inline_data: 256,
    };
    let half = o.max_size + (1 << 16) + (8 << 10);
    let a = Side::new(da, t, cap, 64, 2 * half)?;
    let b = Side::new(db, t, cap, 64, 2 * half)?;
    dp::connect_with(da, &a, db, &b, t, QKEY, &mut rng, o.rc)?;
    let ah = |d: &Dev, s: &Side, to: &Dev| {
        let mut at = ibv_ah_attr {
            is_global: 1,
            port_num: d.port,
            ..zeroed()
        };
        at.grh.dgid.raw = to.gid;
        at.grh.sgid_index = d.gid_index;
        at.grh.hop_limit = 64;
        Ah::create(&s.pd, &at).map_err(|e| format!("ibv_create_ah: {}", ename(e)))
    };
    let (ah_ab, ah_ba) = if t == IBV_QPT_UD {
        (Some(ah(da, &a, db)?), Some(ah(db, &b, da)?))
    } else {
        (None, None)
    };
    let inline = a.qp.cap.max_inline_data.min(b.qp.cap.max_inline_data) as usize;
    let p = Pair {
        t,
        da,
        db,
        a: &a,
        b: &b,
        ah_ab: ah_ab.as_ref(),
        ah_ba: ah_ba.as_ref(),
        half,
        max_size: o.max_size,
        max_read: o.max_read.unwrap_or(o.max_size),
        send_sge: max_sge as usize,
        recv_sge: max_sge as usize,
        rd_sge: rd_sge as usize,
        inline,
        mtu: da.mtu().min(db.mtu()),
        wc_timeout: o.wc_timeout,
        mix: o.mix.clone(),
    };
    r.info(
        name,
        format!(
            "seed {:#x} (--seed {:#x}) qpn {:#x} <-> {:#x} sge {max_sge} rd_sge {rd_sge} inline {inline} mtu {}{}",
            seed,
            o.seed,
            a.qp.qpn(),
            b.qp.qpn(),
            p.mtu,
            if t == IBV_QPT_RC {
                format!(" timeout {} retry_cnt {}", o.rc.timeout, o.rc.retry_cnt)
            } else {
                String::new()
            }
        ),
    );
    let all: &[Op] = match t {
        IBV_QPT_RC => &RC_OPS,
        IBV_QPT_UC => &UC_OPS,
        _ => &UD_OPS,
    };
    let menu: Vec<Op> = all
        .iter()
        .copied()
        .filter(|op| o.mix.contains(op))
        .collect();
    if menu.is_empty() && ops > 0 {
        return Err(format!(
            "--ops-mix leaves no operation a {} QP can do",
            tname(t)
        ));
    }
    let mut st = Stats {
        count: [0; 7],
        bytes: 0,
        inline: 0,
        max_sges: 0,
        zero: 0,
        big: 0,
    };
    let start = Instant::now();
    // --bytes: draw until that much moved (capped by --ops only when given explicitly).
    let limit = match (o.bytes, o.ops_given) {
        (Some(_), false) => u64::MAX,
        _ => u64::from(ops),
    };
    let mut i = 0u64;
    while i < limit && !menu.is_empty() {
        if o.bytes.is_some_and(|b| st.bytes >= b) {
            break;
        }
        let op = menu[rng.below(menu.len() as u64) as usize];
        let fwd = rng.coin();
        p.op(i, op, fwd, &mut rng, &mut st)?;
        i += 1;
    }
    let ops = i;
    if t == IBV_QPT_RC && o.bursts > 0 {
        let (n, bytes) = p.bursts(o.bursts, &mut rng)?;
        st.bytes += bytes;
        r.info(
            name,
            format!("{} bursts: {n} WRs, {bytes} bytes, all verified", o.bursts),
        );
    }
    if t == IBV_QPT_RC && o.atomic_counter > 0 {
        for fwd in [true, false] {
            let msg = p.atomic_counter(o.atomic_counter, fwd, &mut rng)?;
            r.info(name, msg);
        }
    }
    let left_a = dp::drain(&a.cq, Duration::from_millis(100));
    let left_b = dp::drain(&b.cq, Duration::ZERO);
    if let Some(w) = left_a.iter().chain(left_b.iter()).next() {
        return Err(format!(
            "{} unexpected completion(s) after the run, e.g. {}",
            left_a.len() + left_b.len(),
            dp::wc_str(w)
        ));
    }
    let counts: Vec<String> = RC_OPS
        .iter()
        .zip(st.count.iter())
        .filter(|(_, &c)| c > 0)
        .map(|(o, c)| format!("{} {c}", o.name()))
        .collect();
    let secs = start.elapsed().as_secs_f64();
    r.info(
        name,
        format!(
            "moved {:.2} MiB in {secs:.1} s ({:.2} MiB/s)",
            st.bytes as f64 / 1048576.0,
            st.bytes as f64 / 1048576.0 / secs.max(1e-9)
        ),
    );
    r.info(
        name,
        format!(
            "{ops} ops in {:.1} s, {} bytes ({} empty, {} > 64 KiB, {} inline, up to {} SGEs): {}",
            start.elapsed().as_secs_f64(),
            st.bytes,
            st.zero,
            st.big,
            st.inline,
            st.max_sges,
            counts.join(", ")
        ),
    );
    drop(ah_ab);
    drop(ah_ba);
    Ok(())
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rrxe-integrity: {e}");
            return ExitCode::from(2);
        }
    };
    let mut r = Report::new(Vec::new(), Vec::new());
    let da = match Dev::open(&o.dev) {
        Ok(d) => d,
        Err(e) => {
            r.fail("integrity.setup", e);
            r.summary();
            return ExitCode::FAILURE;
        }
    };
    let db = match &o.dev2 {
        Some(n) => match Dev::open(n) {
            Ok(d) => Some(d),
            Err(e) => {
                r.fail("integrity.setup", e);
                r.summary();
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let mode = if db.is_some() {
        "two_devices"
    } else {
        "loopback"
    };
    for t in &o.types {
        let qt = match t.as_str() {
            "rc" => IBV_QPT_RC,
            "uc" => IBV_QPT_UC,
            "ud" => IBV_QPT_UD,
            _ => {
                r.fail("integrity.setup", format!("unknown QP type {t}"));
                continue;
            }
        };
        let name = format!("integrity.{}.{mode}", tname(qt));
        let res = run(&o, &da, db.as_ref().unwrap_or(&da), qt, &mut r, &name);
        r.result(&name, res.map_err(|e| format!("{e} (seed {:#x})", o.seed)));
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
