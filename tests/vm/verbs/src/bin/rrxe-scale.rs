//! rrxe-scale: the control path at scale, on any device (issue 30 §5).
//!
//!   rrxe-scale --dev DEV [--cycles 1000] [--qps 10000] [--mrs 65000] [--big-mib 1024]
//!
//! Prints one `SCALE DEV METRIC VALUE UNIT` line per measurement:
//! * `cq_cycle`, `qp_rc_cycle`, `mr_cycle`: create+destroy pairs per second (`cycles` pairs;
//!   a CQ of 64 entries, an RC QP with 64-entry queues, a 4 KiB MR);
//! * `hold_create_qps`, `hold_create_mrs`: objects created per second by a child process that
//!   then holds `qps` RC QPs and `mrs` 4 KiB MRs (capped by the device's limits, printed);
//! * `kmem_per_qp`, `kmem_per_mr`: kernel memory (slab plus vmalloc, from /proc/meminfo) those
//!   objects took, per object: the rings, the QP's engine state, the MR's page list;
//! * `exit_with_objects`: seconds from SIGKILL of that child to its reaping, which includes the
//!   kernel's teardown of everything it held (ib_uverbs cleans up in the exiting task);
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

/// Create+destroy pairs per second of `f`, over `n` pairs.
fn rate(n: u32, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let t = Instant::now();
    for _ in 0..n {
        f()?;
    }
    Ok(f64::from(n) / t.elapsed().as_secs_f64().max(1e-9))
}

fn cycles(a: &Args, ctx: &Ctx, pd: &Pd) -> Result<(), String> {
    if a.cycles == 0 {
        return Ok(());
    }
    let dev = &a.dev;
    let cq = Cq::create(ctx, 64, 0).map_err(|x| e("ibv_create_cq", x))?;
    let r = rate(a.cycles, || {
        Cq::create(ctx, 64, 0)
            .map_err(|x| e("ibv_create_cq", x))?
            .destroy()
            .map_err(|x| e("ibv_destroy_cq", x))
    })?;
    println!("SCALE {dev} cq_cycle {r:.0} per_s");
    let r = rate(a.cycles, || {
        Qp::create(pd, &cq, IBV_QPT_RC, cap(), false)
            .map_err(|x| e("ibv_create_qp", x))?
            .destroy()
            .map_err(|x| e("ibv_destroy_qp", x))
    })?;
    println!("SCALE {dev} qp_rc_cycle {r:.0} per_s");
    let r = rate(a.cycles, || {
        Mr::reg(pd, 4096, ACCESS)
            .map_err(|x| e("ibv_reg_mr", x))?
            .destroy()
            .map_err(|x| e("ibv_dereg_mr", x))
    })?;
    println!("SCALE {dev} mr_cycle {r:.0} per_s");
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

/// Kernel memory in use, KiB: slab plus vmalloc (/proc/meminfo).
fn kmem_kib() -> Result<u64, String> {
    let m = std::fs::read_to_string("/proc/meminfo").map_err(|x| x.to_string())?;
    let field = |k: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Ok(field("Slab:") + field("VmallocUsed:"))
}

fn exit_with_objects(a: &Args, qps: u32, mrs: u32) -> Result<(), String> {
    if qps == 0 && mrs == 0 {
        return Ok(());
    }
    let me = std::env::current_exe().map_err(|x| x.to_string())?;
    let mut child = Command::new(me)
        .args(["--hold", "--dev", &a.dev, "--qps", &qps.to_string()])
        .args(["--mrs", &mrs.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|x| format!("spawn: {x}"))?;
    let k0 = kmem_kib()?;
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().ok_or("no child stdout")?);
    out.read_line(&mut line).map_err(|x| x.to_string())?;
    let k1 = kmem_kib()?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(b"g").map_err(|x| x.to_string())?;
    }
    line.clear();
    out.read_line(&mut line).map_err(|x| x.to_string())?;
    let k2 = kmem_kib()?;
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
        let per = k1.saturating_sub(k0) as f64 * 1024.0 / f64::from(qps);
        println!("SCALE {dev} kmem_per_qp {per:.0} bytes");
    }
    if mrs > 0 {
        let per = k2.saturating_sub(k1) as f64 * 1024.0 / f64::from(mrs);
        println!("SCALE {dev} kmem_per_mr {per:.0} bytes");
    }
    let t = Instant::now();
    child.kill().map_err(|x| format!("kill: {x}"))?;
    child.wait().map_err(|x| format!("wait: {x}"))?;
    println!(
        "SCALE {dev} exit_with_objects {:.3} s ({qps} RC QPs, {mrs} MRs)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
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
    exit_with_objects(a, qps, mrs)?;
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
