//! rrxe-scale: the control path at scale, on any device (issue 30 §5).
//!
//!   rrxe-scale --dev DEV [--cycles 1000] [--qps 10000] [--mrs 65000] [--big-mib 1024]
//!
//! Prints one `SCALE DEV METRIC VALUE UNIT` line per measurement:
//! * `cq_cycle`, `qp_rc_cycle`, `mr_cycle`: create+destroy pairs per second (`cycles` pairs;
//!   a CQ of 64 entries, an RC QP with 64-entry queues, a 4 KiB MR), and `*_create`,
//!   `*_destroy`: the rate of each half of those pairs alone (per second of time spent in it);
//! * `hold_create_qps`, `hold_create_mrs`: objects created per second by a child process that
//!   then holds `qps` RC QPs and `mrs` 4 KiB MRs (capped by the device's limits, printed);
//! * `kmem_per_qp`, `kmem_per_mr`: kernel memory (slab plus vmalloc, from /proc/meminfo) those
//!   objects took, per object: the rings, the QP's engine state, the MR's page list;
//! * `mem_per_qp`, `mem_per_mr`: all memory they took, per object: the fall of MemFree less
//!   the child's own anonymous memory (its RssAnon: the MR buffers, its bookkeeping), so page
//!   allocations outside slab and vmalloc (rings in contiguous pages, page tables) count too;
//! * `exit_with_qps`, `exit_with_mrs`: seconds from SIGKILL of such a child to its reaping, which
//!   includes the kernel's teardown of everything it held (ib_uverbs cleans up in the exiting
//!   task): one child holds the QPs, another the MRs; `exit_qps_rate`, `exit_mrs_rate`: objects
//!   torn down per second of it; `exit_with_objects`: the sum;
//! * `big_mr_reg`, `big_mr_dereg`: seconds to register and deregister one `big-mib` MiB MR.
//!
//! A count of 0 skips that part. Every failed verb is an error line and exit status 1; the
//! figures are for comparison in one boot (run rdma_rxe's device beside it), not pass/fail.

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::verbs::{Cq, Ctx, Mr, Pd, Qp};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

const ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

struct Args {
    dev: String,
    cycles: u32,
    qps: u32,
    mrs: u32,
    big_mib: usize,
    hold: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        dev: String::new(),
        cycles: 1000,
        qps: 10_000,
        mrs: 65_000,
        big_mib: 1024,
        hold: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut num = |what: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{what} needs a number"))
        };
        match k.as_str() {
            "--dev" => a.dev = it.next().ok_or("--dev needs a name")?,
            "--cycles" => a.cycles = num("--cycles")? as u32,
            "--qps" => a.qps = num("--qps")? as u32,
            "--mrs" => a.mrs = num("--mrs")? as u32,
            "--big-mib" => a.big_mib = num("--big-mib")? as usize,
            "--hold" => a.hold = true,
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    if a.dev.is_empty() {
        return Err(
            "usage: rrxe-scale --dev DEV [--cycles N] [--qps N] [--mrs N] [--big-mib N]".into(),
        );
    }
    Ok(a)
}

fn cap() -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn e(what: &str, errno: i32) -> String {
    format!("{what}: {}", std::io::Error::from_raw_os_error(errno))
}

/// Runs `n` create+destroy pairs and prints `NAME_cycle` (pairs per second), `NAME_create` and
/// `NAME_destroy` (each half per second of the time spent in it).
fn rates<T>(
    dev: &str,
    name: &str,
    n: u32,
    mut create: impl FnMut() -> Result<T, String>,
    mut destroy: impl FnMut(T) -> Result<(), String>,
) -> Result<(), String> {
    let (mut tc, mut td) = (0f64, 0f64);
    let t = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        let o = create()?;
        let t1 = Instant::now();
        destroy(o)?;
        tc += (t1 - t0).as_secs_f64();
        td += t1.elapsed().as_secs_f64();
    }
    let per = |secs: f64| f64::from(n) / secs.max(1e-9);
    println!(
        "SCALE {dev} {name}_cycle {:.0} per_s",
        per(t.elapsed().as_secs_f64())
    );
    println!("SCALE {dev} {name}_create {:.0} per_s", per(tc));
    println!("SCALE {dev} {name}_destroy {:.0} per_s", per(td));
    Ok(())
}

fn cycles(a: &Args, ctx: &Ctx, pd: &Pd) -> Result<(), String> {
    if a.cycles == 0 {
        return Ok(());
    }
    let dev = &a.dev;
    let cq = Cq::create(ctx, 64, 0).map_err(|x| e("ibv_create_cq", x))?;
    rates(
        dev,
        "cq",
        a.cycles,
        || Cq::create(ctx, 64, 0).map_err(|x| e("ibv_create_cq", x)),
        |c| c.destroy().map_err(|x| e("ibv_destroy_cq", x)),
    )?;
    rates(
        dev,
        "qp_rc",
        a.cycles,
        || Qp::create(pd, &cq, IBV_QPT_RC, cap(), false).map_err(|x| e("ibv_create_qp", x)),
        |q| q.destroy().map_err(|x| e("ibv_destroy_qp", x)),
    )?;
    rates(
        dev,
        "mr",
        a.cycles,
        || Mr::reg(pd, 4096, ACCESS).map_err(|x| e("ibv_reg_mr", x)),
        |m| m.destroy().map_err(|x| e("ibv_dereg_mr", x)),
    )?;
    Ok(())
}

/// The child: creates and holds the objects, says READY, then waits to be killed.
fn hold(a: &Args) -> Result<(), String> {
    let ctx = Ctx::open(&a.dev)?;
    let pd = Pd::alloc(&ctx).map_err(|x| e("ibv_alloc_pd", x))?;
    let cq = Cq::create(&ctx, 64, 0).map_err(|x| e("ibv_create_cq", x))?;
    let t = Instant::now();
    let mut qps = Vec::with_capacity(a.qps as usize);
    for _ in 0..a.qps {
        qps.push(
            Qp::create(&pd, &cq, IBV_QPT_RC, cap(), false).map_err(|x| e("ibv_create_qp", x))?,
        );
    }
    let tq = t.elapsed().as_secs_f64();
    // The parent samples kernel memory between the QPs and the MRs.
    println!("QPS");
    std::io::stdout().flush().map_err(|x| x.to_string())?;
    let mut go = [0u8; 1];
    std::io::stdin()
        .read_exact(&mut go)
        .map_err(|x| x.to_string())?;
    let t = Instant::now();
    let mut mrs = Vec::with_capacity(a.mrs as usize);
    for _ in 0..a.mrs {
        mrs.push(Mr::reg(&pd, 4096, ACCESS).map_err(|x| e("ibv_reg_mr", x))?);
    }
    let tm = t.elapsed().as_secs_f64();
    println!("READY {tq:.3} {tm:.3}");
    std::io::stdout().flush().map_err(|x| x.to_string())?;
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// The KiB value of field `k` ("Name:") of a /proc file's text.
fn kib_field(text: &str, k: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(k))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Memory samples, KiB: kernel memory in slab plus vmalloc, memory in use system-wide
/// (MemTotal - MemFree), and the child's anonymous memory.
#[derive(Clone, Copy)]
struct Mem {
    kmem: u64,
    used: u64,
    anon: u64,
}

fn mem_sample(child: u32) -> Result<Mem, String> {
    let m = std::fs::read_to_string("/proc/meminfo").map_err(|x| x.to_string())?;
    let st = std::fs::read_to_string(format!("/proc/{child}/status")).unwrap_or_default();
    Ok(Mem {
        kmem: kib_field(&m, "Slab:") + kib_field(&m, "VmallocUsed:"),
        used: kib_field(&m, "MemTotal:").saturating_sub(kib_field(&m, "MemFree:")),
        anon: kib_field(&st, "RssAnon:"),
    })
}

/// Bytes per object between two samples: (kernel memory, all memory less the child's own).
fn per_object(a: Mem, b: Mem, n: u32) -> (f64, f64) {
    let k = b.kmem.saturating_sub(a.kmem) as f64 * 1024.0 / f64::from(n);
    let all = (b.used.saturating_sub(a.used)).saturating_sub(b.anon.saturating_sub(a.anon));
    (k, all as f64 * 1024.0 / f64::from(n))
}

/// One holding child with `qps` QPs and `mrs` MRs: prints its figures and returns the seconds
/// its exit took (0 when it holds nothing).
fn exit_with_objects(a: &Args, qps: u32, mrs: u32) -> Result<f64, String> {
    if qps == 0 && mrs == 0 {
        return Ok(0.0);
    }
    let me = std::env::current_exe().map_err(|x| x.to_string())?;
    let mut child = Command::new(me)
        .args(["--hold", "--dev", &a.dev, "--qps", &qps.to_string()])
        .args(["--mrs", &mrs.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|x| format!("spawn: {x}"))?;
    let k0 = mem_sample(child.id())?;
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().ok_or("no child stdout")?);
    out.read_line(&mut line).map_err(|x| x.to_string())?;
    let k1 = mem_sample(child.id())?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(b"g").map_err(|x| x.to_string())?;
    }
    line.clear();
    out.read_line(&mut line).map_err(|x| x.to_string())?;
    let k2 = mem_sample(child.id())?;
    let w: Vec<f64> = line
        .strip_prefix("READY ")
        .map(|r| {
            r.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [tq, tm] = w[..] else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("the holding child failed: {:?}", line.trim()));
    };
    let dev = &a.dev;
    if qps > 0 {
        println!(
            "SCALE {dev} hold_create_qps {:.0} per_s",
            f64::from(qps) / tq.max(1e-9)
        );
    }
    if mrs > 0 {
        println!(
            "SCALE {dev} hold_create_mrs {:.0} per_s",
            f64::from(mrs) / tm.max(1e-9)
        );
    }
    // The first sample comes before the child opened its context: its PD and CQ count too,
    // a rounding error over thousands of QPs.
    if qps > 0 {
        let (k, all) = per_object(k0, k1, qps);
        println!("SCALE {dev} kmem_per_qp {k:.0} bytes");
        println!("SCALE {dev} mem_per_qp {all:.0} bytes");
    }
    if mrs > 0 {
        let (k, all) = per_object(k1, k2, mrs);
        println!("SCALE {dev} kmem_per_mr {k:.0} bytes");
        println!("SCALE {dev} mem_per_mr {all:.0} bytes");
    }
    let t = Instant::now();
    child.kill().map_err(|x| format!("kill: {x}"))?;
    child.wait().map_err(|x| format!("wait: {x}"))?;
    let secs = t.elapsed().as_secs_f64();
    let what = if mrs == 0 { "qps" } else { "mrs" };
    println!("SCALE {dev} exit_with_{what} {secs:.3} s ({qps} RC QPs, {mrs} MRs)");
    println!(
        "SCALE {dev} exit_{what}_rate {:.0} per_s",
        f64::from(qps + mrs) / secs.max(1e-9)
    );
    Ok(secs)
}

fn big_mr(a: &Args, pd: &Pd) -> Result<(), String> {
    if a.big_mib == 0 {
        return Ok(());
    }
    let t = Instant::now();
    let m = Mr::reg(pd, a.big_mib << 20, ACCESS).map_err(|x| e("ibv_reg_mr (big)", x))?;
    let reg = t.elapsed().as_secs_f64();
    let t = Instant::now();
    m.destroy().map_err(|x| e("ibv_dereg_mr (big)", x))?;
    let dereg = t.elapsed().as_secs_f64();
    let dev = &a.dev;
    println!("SCALE {dev} big_mr_reg {reg:.3} s ({} MiB)", a.big_mib);
    println!("SCALE {dev} big_mr_dereg {dereg:.3} s ({} MiB)", a.big_mib);
    Ok(())
}

fn run(a: &Args) -> Result<(), String> {
    if a.hold {
        return hold(a);
    }
    let ctx = Ctx::open(&a.dev)?;
    let attr = ctx.query_device().map_err(|x| e("ibv_query_device", x))?;
    // One QP, CQ, PD and MR for this process and the child's own PD and CQ: keep room.
    let qps = a.qps.min((attr.max_qp.max(0) as u32).saturating_sub(8));
    let mrs = a.mrs.min((attr.max_mr.max(0) as u32).saturating_sub(8));
    println!(
        "INFO {}: max_qp {} max_mr {}: holding {qps} QPs and {mrs} MRs",
        a.dev, attr.max_qp, attr.max_mr
    );
    let pd = Pd::alloc(&ctx).map_err(|x| e("ibv_alloc_pd", x))?;
    cycles(a, &ctx, &pd)?;
    // Two children, one holding the QPs and one the MRs, killed one after the other: the exit
    // time of each kind apart, and their sum as before (one child held both until 2026-11-29).
    let tq = exit_with_objects(a, qps, 0)?;
    let tm = exit_with_objects(a, 0, mrs)?;
    if qps > 0 && mrs > 0 {
        println!(
            "SCALE {} exit_with_objects {:.3} s ({qps} RC QPs, {mrs} MRs)",
            a.dev,
            tq + tm
        );
    }
    big_mr(a, &pd)
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(m) => {
            eprintln!("rrxe-scale: {m}");
            return ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(m) => {
            println!("ERROR {}: {m}", a.dev);
            ExitCode::from(1)
        }
    }
}
