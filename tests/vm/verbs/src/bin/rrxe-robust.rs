//! rrxe-robust: the helper programs of tests/vm/robust.sh (issue 9, sections 4-6).
//!
//!   rrxe-robust transfer --dev A [--dev2 B] [--until FILE] [--secs S] [--seed S] [--max-size N]
//!       a verified RC transfer (WRITE, READ back, SEND; every byte compared); prints RUNNING
//!       once connected and "RESULT ok OPS BYTES" or "RESULT failed OPS: why"; exit 0 on ok
//!   rrxe-robust shared-cq --dev A [--threads N] [--ops N]
//!       N threads, each with its own loopback RC QP pair, all on ONE CQ, posting and polling
//!       it concurrently; every WR must complete exactly once, successfully
//!   rrxe-robust teardown --dev A [--dev2 B]
//!       a thread keeps RDMA WRITEs in flight; the target MR is deregistered under it, then the
//!       QPs are destroyed with WRs outstanding; all bounded; then a fresh transfer must work
//!   rrxe-robust failnth --dev A --path ctx|pd|cq|qp-rc|qp-uc|qp-ud|qp-rtr|mr|ah|srq [--max N]
//!       fails the 1st, 2nd, ... fault site (/proc/thread-self/fail-nth) of one create path
//!       until the call succeeds with nothing injected; every failure must be a clean errno
//!   rrxe-robust linkadd-failnth --name NAME --netdev IF [--type rrxe] [--max N] [--first N]
//!       the same for `rdma link add NAME type rrxe netdev IF` (RDMA netlink NEWLINK sent by
//!       this thread); after each failure NAME must not exist (a lost answer, ENOBUFS from recv:
//!       the device may exist and is deleted)
//!   rrxe-robust scale --dev A [--qps N] [--mrs N]
//!       creates and destroys N QPs and N MRs (capped by ibv_query_device), printing time per
//!       create and kernel memory per object (/proc/meminfo Slab + VmallocUsed deltas)

use rrxe_verbs_test::{dp, ffi, robust, util, verbs};

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dp::{Dev, Rng, Side};
use ffi::*;
use util::{ename, errno, Report};
use verbs::{Cq, Mr, Pd, Qp};

struct Args(Vec<String>);

impl Args {
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == k)
            .and_then(|i| self.0.get(i + 1))
            .map(|s| s.as_str())
    }
    fn num(&self, k: &str, d: u64) -> u64 {
        self.get(k).and_then(|v| v.parse().ok()).unwrap_or(d)
    }
}

fn main() -> ExitCode {
    let v: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = v.first().cloned() else {
        eprintln!("usage: rrxe-robust transfer|shared-cq|teardown|failnth|linkadd-failnth|scale ... (see the source)");
        return ExitCode::from(2);
    };
    let a = Args(v);
    let dev = a.get("--dev").unwrap_or("rrxe0").to_owned();
    let mut rep = Report::new(vec![], vec![]);
    let res = match cmd.as_str() {
        "transfer" => return transfer(&a, &dev),
        "shared-cq" => shared_cq(&a, &dev, &mut rep),
        "teardown" => teardown(&a, &dev, &mut rep),
        "failnth" => failnth(&a, &dev, &mut rep),
        "linkadd-failnth" => linkadd_failnth(&a, &mut rep),
        "scale" => scale(&a, &dev, &mut rep),
        c => Err(format!("unknown command {c}")),
    };
    if let Err(e) = res {
        rep.fail(&format!("{cmd}.setup"), e);
    }
    rep.summary();
    if rep.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn out(s: String) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

// ---------------------------------------------------------------------------------- transfer

fn transfer(a: &Args, dev: &str) -> ExitCode {
    let dev2 = a.get("--dev2").unwrap_or(dev).to_owned();
    let seed = a.num("--seed", dp::clock_seed());
    let secs = a.num("--secs", 0);
    let until = a.get("--until").map(|s| s.to_owned());
    let x = robust::Transfer::start(dev, &dev2, seed, a.num("--max-size", 16384) as usize);
    if x.wait_qpns(Duration::from_secs(60)).is_none() {
        let r = x.stop();
        out(format!(
            "RESULT failed 0: setup: {}",
            r.error.unwrap_or_default()
        ));
        return ExitCode::FAILURE;
    }
    out(format!("RUNNING seed {seed}"));
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if secs > 0 && t0.elapsed() >= Duration::from_secs(secs) {
            break;
        }
        if until
            .as_deref()
            .is_some_and(|f| std::path::Path::new(f).exists())
        {
            break;
        }
        if x.handle_finished() {
            break;
        }
    }
    let r = x.stop();
    match r.error {
        None => {
            out(format!("RESULT ok {} {}", r.ops, r.bytes));
            ExitCode::SUCCESS
        }
        Some(e) => {
            out(format!("RESULT failed {}: {e}", r.ops));
            ExitCode::FAILURE
        }
    }
}

// --------------------------------------------------------------------------------- shared-cq

struct SendPtr<T>(*mut T);
// SAFETY: libibverbs objects may be used from any thread (the provider locks per CQ/QP).
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

fn shared_cq(a: &Args, dev: &str, rep: &mut Report) -> Result<(), String> {
    let threads = a.num("--threads", 4) as usize;
    let ops = a.num("--ops", 500);
    let depth = 16u32;
    let d = Dev::open(dev)?;
    let pd = Pd::alloc(&d.ctx).map_err(|e| format!("alloc_pd: {}", ename(e)))?;
    let cq = Cq::create(&d.ctx, (threads as u32 * depth * 4 + 64) as i32, 0)
        .map_err(|e| format!("create_cq: {}", ename(e)))?;
    let mr = Mr::reg(&pd, threads * 2 * 4096, dp::ACCESS_ALL)
        .map_err(|e| format!("reg_mr: {}", ename(e)))?;
    // SAFETY: registered MR.
    let (base, lkey, rkey) = unsafe { ((*mr.ptr).addr as u64, (*mr.ptr).lkey, (*mr.ptr).rkey) };
    let cap = ibv_qp_cap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut pairs = Vec::new();
    let mut rng = Rng::new(1);
    for _ in 0..threads {
        let qa = Qp::create(&pd, &cq, IBV_QPT_RC, cap, false)
            .map_err(|e| format!("create_qp: {}", ename(e)))?;
        let qb = Qp::create(&pd, &cq, IBV_QPT_RC, cap, false)
            .map_err(|e| format!("create_qp: {}", ename(e)))?;
        let (pa, pb) = (rng.u32() & 0xff_ffff, rng.u32() & 0xff_ffff);
        dp::to_rts(&d, &qa, IBV_QPT_RC, qb.qpn(), d.gid, pb, pa, 0)?;
        dp::to_rts(&d, &qb, IBV_QPT_RC, qa.qpn(), d.gid, pa, pb, 0)?;
        pairs.push((qa, qb));
    }
    let seen = Arc::new(Mutex::new(BTreeMap::<u64, u32>::new()));
    let bad = Arc::new(Mutex::new(Vec::<String>::new()));
    let done = Arc::new(AtomicU64::new(0));
    let cqp = Arc::new(SendPtr(cq.ptr));
    let t0 = Instant::now();
    let mut hs = Vec::new();
    for (i, (qa, qb)) in pairs.iter().enumerate() {
        let (qa, qb) = (Arc::new(SendPtr(qa.ptr)), Arc::new(SendPtr(qb.ptr)));
        let (seen, bad, done, cqp) = (seen.clone(), bad.clone(), done.clone(), cqp.clone());
        hs.push(std::thread::spawn(move || {
            let tag = (i as u64 + 1) << 40;
            let my_total = 2 * ops; // each SEND: a send and a recv completion
            let mut posted = 0u64;
            let mut wc = zeroed::<[ibv_wc; 8]>();
            let end = Instant::now() + Duration::from_secs(120);
            let mine_done = || {
                seen.lock()
                    .map(|m| m.range(tag..tag + (1 << 40)).count() as u64)
                    .unwrap_or(0)
            };
            while mine_done() < my_total {
                if Instant::now() > end {
                    bad.lock().unwrap().push(format!(
                        "thread {i}: timeout, {} of {my_total} completions",
                        mine_done()
                    ));
                    return;
                }
                // keep a few in flight
                if posted < ops && posted - (mine_done() / 2).min(posted) < (depth / 2) as u64 {
                    let off = base + (2 * i as u64) * 4096;
                    let mut rs = ibv_sge {
                        addr: off + 4096,
                        length: 64,
                        lkey,
                    };
                    let mut rw = ibv_recv_wr {
                        wr_id: tag | (1 << 39) | posted,
                        sg_list: &mut rs,
                        num_sge: 1,
                        ..zeroed()
                    };
                    let mut b = null_mut();
                    // SAFETY: valid QP and WR.
                    if unsafe { vt_post_recv(qb.0, &mut rw, &mut b) } != 0 {
                        bad.lock()
                            .unwrap()
                            .push(format!("thread {i}: post_recv failed"));
                        return;
                    }
                    let mut ss = ibv_sge {
                        addr: off,
                        length: 64,
                        lkey,
                    };
                    let mut sw = ibv_send_wr {
                        wr_id: tag | posted,
                        sg_list: &mut ss,
                        num_sge: 1,
                        opcode: IBV_WR_SEND,
                        send_flags: IBV_SEND_SIGNALED,
                        ..zeroed()
                    };
                    let _ = rkey;
                    let mut b = null_mut();
                    // SAFETY: valid QP and WR.
                    if unsafe { vt_post_send(qa.0, &mut sw, &mut b) } != 0 {
                        bad.lock()
                            .unwrap()
                            .push(format!("thread {i}: post_send failed"));
                        return;
                    }
                    posted += 1;
                }
                // SAFETY: the shared CQ; the provider serializes pollers.
                let n = unsafe { vt_poll_cq(cqp.0, wc.len() as i32, wc.as_mut_ptr()) };
                if n < 0 {
                    bad.lock().unwrap().push(format!("thread {i}: poll_cq {n}"));
                    return;
                }
                for w in &wc[..n as usize] {
                    if w.status != IBV_WC_SUCCESS {
                        bad.lock()
                            .unwrap()
                            .push(format!("thread {i}: {}", dp::wc_str(w)));
                    }
                    let mut m = seen.lock().unwrap();
                    let c = m.entry(w.wr_id).or_default();
                    *c += 1;
                    if *c > 1 {
                        bad.lock()
                            .unwrap()
                            .push(format!("wr_id {:#x} completed twice", w.wr_id));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                if n == 0 {
                    std::thread::yield_now();
                }
            }
        }));
    }
    for h in hs {
        let _ = h.join();
    }
    let secs = t0.elapsed().as_secs_f64();
    let total = done.load(Ordering::Relaxed);
    out(format!(
        "shared-cq: {threads} threads x {ops} SENDs on one CQ: {total} completions in {secs:.1} s"
    ));
    let b = bad.lock().unwrap().clone();
    if b.is_empty() && total == 2 * ops * threads as u64 {
        rep.pass("shared_cq.every_wr_completed_once");
    } else {
        rep.fail(
            "shared_cq.every_wr_completed_once",
            format!(
                "{total} of {} completions; {}",
                2 * ops * threads as u64,
                b.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
            ),
        );
    }
    drop(pairs);
    drop(mr);
    Ok(())
}

// ---------------------------------------------------------------------------------- teardown

fn teardown(a: &Args, dev: &str, rep: &mut Report) -> Result<(), String> {
    let dev2 = a.get("--dev2").unwrap_or(dev).to_owned();
    let da = Dev::open(dev)?;
    let db = Dev::open(&dev2)?;
    let cap = ibv_qp_cap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let sa = Side::new(&da, IBV_QPT_RC, cap, 256, 1 << 20)?;
    let sb = Side::new(&db, IBV_QPT_RC, cap, 256, 1 << 20)?;
    dp::connect(&da, &sa, &db, &sb, IBV_QPT_RC, 0, &mut Rng::new(7))?;
    let stop = Arc::new(AtomicBool::new(false));
    let (qp, cq) = (SendPtr(sa.qp.ptr), SendPtr(sa.cq.ptr));
    let (laddr, lkey, raddr, rkey) = (sa.addr(), sa.lkey(), sb.addr(), sb.rkey());
    let s2 = stop.clone();
    let stats = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let st2 = stats.clone();
    let poster = std::thread::spawn(move || {
        let (qp, cq) = (qp, cq);
        let mut wc = zeroed::<[ibv_wc; 16]>();
        let mut n = 0u64;
        while !s2.load(Ordering::Relaxed) {
            let mut sge = ibv_sge {
                addr: laddr,
                length: 65536,
                lkey,
            };
            let mut w = ibv_send_wr {
                wr_id: n,
                sg_list: &mut sge,
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: IBV_SEND_SIGNALED,
                ..zeroed()
            };
            w.wr.rdma.remote_addr = raddr;
            w.wr.rdma.rkey = rkey;
            let mut b = null_mut();
            // SAFETY: the QP lives until this thread is joined.
            let _ = unsafe { vt_post_send(qp.0, &mut w, &mut b) };
            n += 1;
            // SAFETY: likewise the CQ.
            let k = unsafe { vt_poll_cq(cq.0, 16, wc.as_mut_ptr()) };
            for w in &wc[..k.max(0) as usize] {
                *st2.lock()
                    .unwrap()
                    .entry(dp::status_str(w.status))
                    .or_default() += 1;
            }
            if k <= 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    });
    std::thread::sleep(Duration::from_millis(1500));
    // Deregister the target MR while WRITEs stream into it.
    let Side {
        qp: qb,
        mr: mb,
        cq: cb,
        pd: pb,
    } = sb;
    let t = Instant::now();
    let r = mb.destroy();
    out(format!(
        "teardown: dereg of the target MR under traffic: {:?} in {:?}",
        r.map_err(ename),
        t.elapsed()
    ));
    rep.result(
        "teardown.dereg_mr_under_traffic",
        r.map_err(|e| format!("ibv_dereg_mr: {}", ename(e))),
    );
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::Relaxed);
    let _ = poster.join();
    out(format!(
        "teardown: completions seen by the poster: {:?}",
        stats.lock().unwrap()
    ));
    // Destroy everything with WRs possibly outstanding, receiver first.
    let t = Instant::now();
    let mut errs = Vec::new();
    if let Err(e) = qb.destroy() {
        errs.push(format!("destroy qp b: {}", ename(e)));
    }
    let Side {
        qp: qa,
        mr: ma,
        cq: ca,
        pd: pa,
    } = sa;
    if let Err(e) = qa.destroy() {
        errs.push(format!("destroy qp a: {}", ename(e)));
    }
    if let Err(e) = ma.destroy() {
        errs.push(format!("dereg mr a: {}", ename(e)));
    }
    if let Err(e) = ca.destroy() {
        errs.push(format!("destroy cq a: {}", ename(e)));
    }
    if let Err(e) = cb.destroy() {
        errs.push(format!("destroy cq b: {}", ename(e)));
    }
    if let Err(e) = pa.destroy() {
        errs.push(format!("dealloc pd a: {}", ename(e)));
    }
    if let Err(e) = pb.destroy() {
        errs.push(format!("dealloc pd b: {}", ename(e)));
    }
    out(format!(
        "teardown: destroy with WRs outstanding took {:?}",
        t.elapsed()
    ));
    rep.cases("teardown.destroy_with_outstanding_wrs", errs, 7);
    let x = robust::Transfer::start(dev, &dev2, 9, 8192);
    std::thread::sleep(Duration::from_secs(2));
    let r = x.stop();
    match r.error {
        None if r.ops > 0 => rep.pass("teardown.fresh_transfer_works"),
        e => rep.fail(
            "teardown.fresh_transfer_works",
            format!("{} ops, {e:?}", r.ops),
        ),
    }
    Ok(())
}

// ----------------------------------------------------------------------------------- failnth

fn fail_nth_path() -> String {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    format!("/proc/self/task/{tid}/fail-nth")
}

/// Arms fail-nth with `n` (0 disarms); returns the open file to read it back through.
fn arm(f: &mut std::fs::File, n: u64) -> bool {
    // proc's fail-nth has no llseek: positioned I/O (pwrite/pread) only
    use std::os::unix::fs::FileExt;
    f.write_at(n.to_string().as_bytes(), 0).is_ok()
}

fn injected(f: &mut std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 32];
    let k = f.read_at(&mut b, 0).unwrap_or(0);
    let s = String::from_utf8_lossy(&b[..k]).into_owned();
    if std::env::var_os("RRXE_FAILNTH_DEBUG").is_some() {
        eprintln!("fail-nth reads {s:?}");
    }
    s.trim().parse::<u64>().map(|v| v == 0).unwrap_or(false)
}

fn open_failnth() -> Result<std::fs::File, String> {
    let p = fail_nth_path();
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .map_err(|e| format!("{p}: {e} (CONFIG_FAULT_INJECTION?)"))
}

/// Runs `call` with the n-th fault site failing, for n = 1, 2, ... until it succeeds with
/// nothing injected. `call` returns Ok(cleanup) or Err(errno).
fn sweep(
    name: &str,
    max: u64,
    rep: &mut Report,
    mut call: impl FnMut() -> Result<Box<dyn FnOnce()>, i32>,
) -> Result<(), String> {
    let mut f = open_failnth()?;
    let mut errnos: BTreeMap<i32, u64> = BTreeMap::new();
    let mut unclean = Vec::new();
    let mut tolerated = 0u64;
    let t0 = Instant::now();
    for n in 1..=max {
        if !arm(&mut f, n) {
            return Err("cannot write fail-nth".into());
        }
        let r = call();
        let inj = injected(&mut f);
        arm(&mut f, 0);
        match r {
            Ok(cleanup) => {
                cleanup();
                if !inj {
                    out(format!(
                        "failnth: {name}: {} fault sites, each failed once in {:.1} s: errnos {:?}, {tolerated} failures absorbed (call succeeded)",
                        n - 1,
                        t0.elapsed().as_secs_f64(),
                        errnos.iter().map(|(e, c)| format!("{}x{c}", ename(*e))).collect::<Vec<_>>()
                    ));
                    rep.cases(
                        &format!("failnth.{name}.clean_errnos"),
                        unclean,
                        n as usize - 1,
                    );
                    return Ok(());
                }
                tolerated += 1;
            }
            Err(e) => {
                *errnos.entry(e).or_default() += 1;
                if !(1..=133).contains(&e) {
                    unclean.push(format!("fault {n}: errno {e}"));
                }
                if !inj {
                    unclean.push(format!(
                        "fault {n}: failed ({}) with nothing injected",
                        ename(e)
                    ));
                }
            }
        }
    }
    rep.fail(
        &format!("failnth.{name}.clean_errnos"),
        format!("still failing after {max} fault sites"),
    );
    Ok(())
}

fn failnth(a: &Args, dev: &str, rep: &mut Report) -> Result<(), String> {
    let path = a.get("--path").unwrap_or("pd").to_owned();
    let max = a.num("--max", 3000);
    let d = Dev::open(dev)?;
    let ctx = d.ctx.ptr;
    let pd = Pd::alloc(&d.ctx).map_err(|e| format!("alloc_pd: {}", ename(e)))?;
    let cq = Cq::create(&d.ctx, 16, 0).map_err(|e| format!("create_cq: {}", ename(e)))?;
    let (pdp, cqp) = (pd.ptr, cq.ptr);
    let cap = ibv_qp_cap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp_of = move |t: u32| -> Result<*mut ibv_qp, i32> {
        let mut ia = ibv_qp_init_attr {
            send_cq: cqp,
            recv_cq: cqp,
            cap,
            qp_type: t,
            ..zeroed()
        };
        // SAFETY: valid PD and CQ.
        let q = unsafe { ibv_create_qp(pdp, &mut ia) };
        if q.is_null() {
            Err(errno())
        } else {
            Ok(q)
        }
    };
    let destroy_qp = |q: *mut ibv_qp| -> Box<dyn FnOnce()> {
        // SAFETY: created by us.
        Box::new(move || unsafe {
            ibv_destroy_qp(q);
        })
    };
    match path.as_str() {
        "ctx" => {
            let mut n = 0;
            // SAFETY: list used only inside.
            let list = unsafe { ibv_get_device_list(&mut n) };
            let mut devp = null_mut();
            for i in 0..n.max(0) as usize {
                // SAFETY: valid list entries.
                unsafe {
                    let dd = *list.add(i);
                    if std::ffi::CStr::from_ptr(ibv_get_device_name(dd)).to_str() == Ok(dev) {
                        devp = dd;
                    }
                }
            }
            if devp.is_null() {
                return Err(format!("no device {dev}"));
            }
            sweep("ctx", max, rep, || {
                // SAFETY: a device of the live list.
                let c = unsafe { ibv_open_device(devp) };
                if c.is_null() {
                    Err(errno())
                } else {
                    Ok(Box::new(move || unsafe {
                        ibv_close_device(c);
                    }))
                }
            })?;
            // SAFETY: from ibv_get_device_list.
            unsafe { ibv_free_device_list(list) };
        }
        "pd" => sweep("pd", max, rep, || {
            // SAFETY: valid context.
            let p = unsafe { ibv_alloc_pd(ctx) };
            if p.is_null() {
                Err(errno())
            } else {
                Ok(Box::new(move || unsafe {
                    ibv_dealloc_pd(p);
                }))
            }
        })?,
        "cq" => sweep("cq", max, rep, || {
            // SAFETY: valid context.
            let c = unsafe { ibv_create_cq(ctx, 64, null_mut(), null_mut(), 0) };
            if c.is_null() {
                Err(errno())
            } else {
                Ok(Box::new(move || unsafe {
                    ibv_destroy_cq(c);
                }))
            }
        })?,
        "qp-rc" => sweep("qp-rc", max, rep, || qp_of(IBV_QPT_RC).map(destroy_qp))?,
        "qp-uc" => sweep("qp-uc", max, rep, || qp_of(IBV_QPT_UC).map(destroy_qp))?,
        "qp-ud" => sweep("qp-ud", max, rep, || qp_of(IBV_QPT_UD).map(destroy_qp))?,
        "qp-rtr" => {
            // INIT -> RTR of an RC QP (address resolution, route, responder resources)
            let peer = Qp::create(&pd, &cq, IBV_QPT_RC, cap, false)
                .map_err(|e| format!("create_qp: {}", ename(e)))?;
            let pq = peer.qpn();
            let dd = &d;
            let mut f = open_failnth()?;
            let mut errnos: BTreeMap<i32, u64> = BTreeMap::new();
            let mut unclean = Vec::new();
            let mut n = 1;
            loop {
                let q = qp_of(IBV_QPT_RC).map_err(|e| format!("create_qp: {}", ename(e)))?;
                let qw = Qp {
                    ptr: q,
                    qp_type: IBV_QPT_RC,
                    cap,
                };
                let init = ibv_qp_attr {
                    qp_state: IBV_QPS_INIT,
                    port_num: dd.port,
                    qp_access_flags: IBV_ACCESS_REMOTE_WRITE,
                    ..zeroed()
                };
                qw.modify(
                    &init,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                )
                .map_err(|e| format!("->INIT: {}", ename(e)))?;
                let mut at = ibv_qp_attr {
                    qp_state: IBV_QPS_RTR,
                    path_mtu: dd.port_attr.active_mtu,
                    dest_qp_num: pq,
                    rq_psn: 1,
                    max_dest_rd_atomic: 1,
                    min_rnr_timer: 1,
                    ..zeroed()
                };
                at.ah_attr.is_global = 1;
                at.ah_attr.port_num = dd.port;
                at.ah_attr.grh.dgid.raw = dd.gid;
                at.ah_attr.grh.sgid_index = dd.gid_index;
                at.ah_attr.grh.hop_limit = 64;
                let mask = IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER;
                arm(&mut f, n);
                let r = qw.modify(&at, mask);
                let inj = injected(&mut f);
                arm(&mut f, 0);
                drop(qw);
                match r {
                    Ok(()) if !inj => break,
                    Ok(()) => {}
                    Err(e) => {
                        *errnos.entry(e).or_default() += 1;
                        if !(1..=133).contains(&e) || !inj {
                            unclean.push(format!("fault {n}: {}", ename(e)));
                        }
                    }
                }
                n += 1;
                if n > max {
                    unclean.push(format!("still failing after {max}"));
                    break;
                }
            }
            out(format!(
                "failnth: qp-rtr: {} fault sites: errnos {:?}",
                n - 1,
                errnos
                    .iter()
                    .map(|(e, c)| format!("{}x{c}", ename(*e)))
                    .collect::<Vec<_>>()
            ));
            rep.cases("failnth.qp-rtr.clean_errnos", unclean, n as usize);
            drop(peer);
        }
        "mr" => {
            let mut buf = vec![0u8; 1 << 16];
            let bp = buf.as_mut_ptr();
            sweep("mr", max, rep, || {
                // SAFETY: valid PD; the buffer outlives the sweep.
                let m = unsafe { ibv_reg_mr(pdp, bp.cast(), 1 << 16, dp::ACCESS_ALL as i32) };
                if m.is_null() {
                    Err(errno())
                } else {
                    Ok(Box::new(move || unsafe {
                        ibv_dereg_mr(m);
                    }))
                }
            })?;
            drop(buf);
        }
        "ah" => {
            let mut at = ibv_ah_attr {
                is_global: 1,
                port_num: d.port,
                ..zeroed()
            };
            at.grh.dgid.raw = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 2];
            at.grh.sgid_index = d.gid_index;
            at.grh.hop_limit = 64;
            sweep("ah", max, rep, || {
                let mut x = at;
                // SAFETY: valid PD and attributes.
                let h = unsafe { ibv_create_ah(pdp, &mut x) };
                if h.is_null() {
                    Err(errno())
                } else {
                    Ok(Box::new(move || unsafe {
                        ibv_destroy_ah(h);
                    }))
                }
            })?;
        }
        "srq" => sweep("srq", max, rep, || {
            let mut ia = ibv_srq_init_attr {
                attr: ibv_srq_attr {
                    max_wr: 16,
                    max_sge: 1,
                    srq_limit: 0,
                },
                ..zeroed()
            };
            // SAFETY: valid PD.
            let s = unsafe { ibv_create_srq(pdp, &mut ia) };
            if s.is_null() {
                Err(errno())
            } else {
                Ok(Box::new(move || unsafe {
                    ibv_destroy_srq(s);
                }))
            }
        })?,
        p => return Err(format!("unknown path {p}")),
    }
    drop(cq);
    drop(pd);
    Ok(())
}

// --------------------------------------------------------------------------- linkadd-failnth

fn nl_attr(buf: &mut Vec<u8>, ty: u16, val: &[u8]) {
    let len = 4 + val.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(val);
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// How an RDMA netlink request failed.
enum NlErr {
    /// The request failed with this errno (sending it, or in the kernel's answer).
    Op(i32),
    /// The request was handled but its answer was lost: `recv` failed with ENOBUFS, which is
    /// how netlink reports that it could not allocate the acknowledgement (`netlink_ack()`),
    /// so the outcome is unknown to the caller.
    ReplyLost,
}

/// One RDMA netlink request (NEWLINK/DELLINK) from this thread.
fn nl_link(cmd: u16, name: &str, netdev: &str, ty: &str) -> Result<(), NlErr> {
    const NLDEV: u16 = 5;
    const ATTR_DEV_NAME: u16 = 2;
    const ATTR_NDEV_NAME: u16 = 51;
    const ATTR_LINK_TYPE: u16 = 65;
    // SAFETY: plain socket calls on buffers we own.
    unsafe {
        let fd = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 20);
        if fd < 0 {
            return Err(NlErr::Op(errno()));
        }
        let mut body = Vec::new();
        let z = |s: &str| {
            let mut v = s.as_bytes().to_vec();
            v.push(0);
            v
        };
        nl_attr(&mut body, ATTR_DEV_NAME, &z(name));
        if cmd == 3 {
            nl_attr(&mut body, ATTR_LINK_TYPE, &z(ty));
            nl_attr(&mut body, ATTR_NDEV_NAME, &z(netdev));
        }
        let mut msg = Vec::new();
        let len = 16 + body.len();
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&((NLDEV << 10) + cmd).to_ne_bytes());
        msg.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
        msg.extend_from_slice(&1u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&body);
        let mut sa: libc::sockaddr_nl = std::mem::zeroed();
        sa.nl_family = libc::AF_NETLINK as u16;
        let n = libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        );
        if n < 0 {
            let e = errno();
            libc::close(fd);
            return Err(NlErr::Op(e));
        }
        let mut rb = [0u8; 4096];
        let n = libc::recv(fd, rb.as_mut_ptr().cast(), rb.len(), 0);
        let e = errno();
        libc::close(fd);
        if n < 0 {
            return Err(if e == libc::ENOBUFS {
                NlErr::ReplyLost
            } else {
                NlErr::Op(e)
            });
        }
        if n >= 20 && u16::from_ne_bytes([rb[4], rb[5]]) == libc::NLMSG_ERROR as u16 {
            let err = i32::from_ne_bytes([rb[16], rb[17], rb[18], rb[19]]);
            return if err == 0 {
                Ok(())
            } else {
                Err(NlErr::Op(-err))
            };
        }
        Err(NlErr::Op(libc::EPROTO))
    }
}

fn rdma_link_delete(name: &str) -> bool {
    std::process::Command::new("rdma")
        .args(["link", "delete", name])
        .status()
        .is_ok_and(|s| s.success())
}

fn linkadd_failnth(a: &Args, rep: &mut Report) -> Result<(), String> {
    let name = a.get("--name").unwrap_or("rrxef0").to_owned();
    let netdev = a.get("--netdev").ok_or("--netdev IF needed")?.to_owned();
    let ty = a.get("--type").unwrap_or("rrxe").to_owned();
    let max = a.num("--max", 20000);
    // Registration has hundreds of fault sites (every sysfs file of the device): past
    // --stride-after, only every --stride-th is failed; --max-secs bounds the sweep.
    let stride_after = a.num("--stride-after", u64::MAX);
    let stride = a.num("--stride", 1).max(1);
    let max_secs = a.num("--max-secs", 0);
    let mut tried = 0u64;
    let exists = |n: &str| std::path::Path::new(&format!("/sys/class/infiniband/{n}")).exists();
    if exists(&name) {
        return Err(format!("{name} exists already"));
    }
    let mut f = open_failnth()?;
    let mut errnos: BTreeMap<i32, u64> = BTreeMap::new();
    let mut unclean = Vec::new();
    let mut left = Vec::new();
    let mut lost = 0u64;
    let t0 = Instant::now();
    // --first N starts the sweep at fault site N (to repeat the end of a long sweep).
    let mut n = a.num("--first", 1).max(1);
    loop {
        if max_secs > 0 && t0.elapsed() > Duration::from_secs(max_secs) {
            out(format!("failnth: rdma link add: time limit ({max_secs} s) reached at fault site {n} ({tried} tried): sweep incomplete"));
            rep.info(
                "failnth.link_add.sweep",
                format!("incomplete: {tried} fault sites up to #{n} tried in {max_secs} s"),
            );
            break;
        }
        tried += 1;
        arm(&mut f, n);
        let r = nl_link(3, &name, &netdev, &ty);
        let inj = injected(&mut f);
        arm(&mut f, 0);
        match r {
            Err(NlErr::ReplyLost) => {
                // The device was created or not; either is clean. One that exists must work
                // like any other: deleting it is the check.
                lost += 1;
                if !inj {
                    unclean.push(format!("fault {n}: answer lost with nothing injected"));
                }
                if exists(&name) && !rdma_link_delete(&name) {
                    return Err(format!(
                        "rdma link delete {name} after fault {n} (reply lost) failed"
                    ));
                }
            }
            Ok(()) => {
                if !exists(&name) {
                    left.push(format!(
                        "fault {n}: NEWLINK succeeded but {name} does not exist"
                    ));
                } else if !rdma_link_delete(&name) {
                    return Err(format!("rdma link delete {name} after fault {n} failed"));
                }
                if !inj {
                    break;
                }
            }
            Err(NlErr::Op(e)) => {
                *errnos.entry(e).or_default() += 1;
                if !(1..=133).contains(&e) || !inj {
                    unclean.push(format!(
                        "fault {n}: {}{}",
                        ename(e),
                        if inj { "" } else { " with nothing injected" }
                    ));
                }
                // nothing may be left behind (give asynchronous unregistration a moment)
                let mut k = 0;
                while exists(&name) && k < 50 {
                    std::thread::sleep(Duration::from_millis(100));
                    k += 1;
                }
                if exists(&name) {
                    left.push(format!("fault {n}: {name} exists after {}", ename(e)));
                    let _ = rdma_link_delete(&name);
                }
            }
        }
        n += if n >= stride_after { stride } else { 1 };
        if n > max {
            unclean.push(format!("still failing after {max} fault sites"));
            break;
        }
    }
    out(format!(
        "failnth: rdma link add {name} type {ty} netdev {netdev}: {tried} fault sites failed (up to #{}, every {stride}th past #{}) in {:.1} s, errnos {:?}, {lost} answers lost (netlink_ack)",
        n - 1,
        stride_after.min(n),
        t0.elapsed().as_secs_f64(),
        errnos.iter().map(|(e, c)| format!("{}x{c}", ename(*e))).collect::<Vec<_>>()
    ));
    let total = n as usize;
    rep.cases("failnth.link_add.clean_errnos", unclean, total);
    rep.cases("failnth.link_add.nothing_left_behind", left, total);
    Ok(())
}

// ------------------------------------------------------------------------------------- scale

fn meminfo() -> BTreeMap<String, u64> {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_owned(), v.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

fn kmem_kib() -> u64 {
    let m = meminfo();
    m.get("Slab").copied().unwrap_or(0)
        + m.get("VmallocUsed").copied().unwrap_or(0)
        + m.get("Percpu").copied().unwrap_or(0)
        + m.get("PageTables").copied().unwrap_or(0)
}

fn settle() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    if let Ok(d) = std::fs::read_dir("/sys/kernel/slab") {
        for e in d.flatten() {
            let _ = std::fs::write(e.path().join("shrink"), "1");
        }
    }
}

fn scale(a: &Args, dev: &str, rep: &mut Report) -> Result<(), String> {
    let d = Dev::open(dev)?;
    let want_qps = a.num("--qps", 10_000);
    let want_mrs = a.num("--mrs", 100_000);
    let max_qp = d.attr.max_qp.max(0) as u64;
    let max_mr = d.attr.max_mr.max(0) as u64;
    // other processes and our own setup hold a few
    let nq = want_qps.min(max_qp.saturating_sub(16));
    let nm = want_mrs.min(max_mr.saturating_sub(16));
    out(format!("scale: device limits max_qp {max_qp} max_mr {max_mr} max_cqe {}; creating {nq} QPs{} and {nm} MRs{}",
        d.attr.max_cqe,
        if nq < want_qps { format!(" (asked {want_qps}: device limit)") } else { String::new() },
        if nm < want_mrs { format!(" (asked {want_mrs}: device limit)") } else { String::new() }));
    let pd = Pd::alloc(&d.ctx).map_err(|e| format!("alloc_pd: {}", ename(e)))?;
    let cq = Cq::create(&d.ctx, 16, 0).map_err(|e| format!("create_cq: {}", ename(e)))?;
    let cap = ibv_qp_cap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    // QPs
    settle();
    let m0 = kmem_kib();
    let t0 = Instant::now();
    let mut qps = Vec::with_capacity(nq as usize);
    let mut err = None;
    for i in 0..nq {
        match Qp::create(
            &pd,
            &cq,
            if i % 2 == 0 { IBV_QPT_RC } else { IBV_QPT_UD },
            cap,
            false,
        ) {
            Ok(q) => qps.push(q),
            Err(e) => {
                err = Some(format!("create_qp #{i}: {}", ename(e)));
                break;
            }
        }
    }
    let tc = t0.elapsed();
    let m1 = kmem_kib();
    let got = qps.len() as u64;
    let t1 = Instant::now();
    let mut derr = 0;
    for q in qps.drain(..) {
        if q.destroy().is_err() {
            derr += 1;
        }
    }
    let td = t1.elapsed();
    settle();
    let m2 = kmem_kib();
    out(format!(
        "scale: {got} QPs (RC/UD alternating, 1 WR each way): create {:.0} us/QP, destroy {:.0} us/QP; kernel memory +{} KiB = {:.1} KiB/QP while alive (Slab+VmallocUsed+Percpu+PageTables; KASAN redzones included), {} KiB above baseline after destroy",
        tc.as_micros() as f64 / got.max(1) as f64,
        td.as_micros() as f64 / got.max(1) as f64,
        m1 as i64 - m0 as i64,
        (m1 as f64 - m0 as f64) / got.max(1) as f64,
        m2 as i64 - m0 as i64
    ));
    match err {
        None if got == nq && derr == 0 => rep.pass("scale.qps"),
        e => rep.fail(
            "scale.qps",
            format!("{got} of {nq} created, {derr} destroy errors, {e:?}"),
        ),
    }
    // MRs: small, over the same few pages
    let mut buf = vec![0u8; 1 << 16];
    let bp = buf.as_mut_ptr();
    settle();
    let m0 = kmem_kib();
    let t0 = Instant::now();
    let mut mrs = Vec::with_capacity(nm as usize);
    let mut err = None;
    for i in 0..nm {
        let off = (i as usize % 16) * 4096;
        // SAFETY: valid PD; the buffer outlives every registration.
        let m = unsafe {
            ibv_reg_mr(
                pd.ptr,
                bp.add(off).cast(),
                4096,
                (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as i32,
            )
        };
        if m.is_null() {
            err = Some(format!("reg_mr #{i}: {}", ename(errno())));
            break;
        }
        mrs.push(m);
    }
    let tc = t0.elapsed();
    let m1 = kmem_kib();
    let got = mrs.len() as u64;
    let t1 = Instant::now();
    let mut derr = 0;
    for m in mrs.drain(..) {
        // SAFETY: registered above.
        if unsafe { ibv_dereg_mr(m) } != 0 {
            derr += 1;
        }
    }
    let td = t1.elapsed();
    settle();
    let m2 = kmem_kib();
    out(format!(
        "scale: {got} MRs of 4 KiB: create {:.0} us/MR, destroy {:.0} us/MR; kernel memory +{} KiB = {:.2} KiB/MR while alive, {} KiB above baseline after destroy",
        tc.as_micros() as f64 / got.max(1) as f64,
        td.as_micros() as f64 / got.max(1) as f64,
        m1 as i64 - m0 as i64,
        (m1 as f64 - m0 as f64) / got.max(1) as f64,
        m2 as i64 - m0 as i64
    ));
    match err {
        None if got == nm && derr == 0 => rep.pass("scale.mrs"),
        e => rep.fail(
            "scale.mrs",
            format!("{got} of {nm} registered, {derr} dereg errors, {e:?}"),
        ),
    }
    drop(buf);
    drop(cq);
    drop(pd);
    let _ = Mr::reg;
    Ok(())
}
