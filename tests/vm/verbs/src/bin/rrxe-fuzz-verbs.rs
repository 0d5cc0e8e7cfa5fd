//! rrxe-fuzz-verbs: random verb sequences with hostile arguments, random mmap offsets on the
//! device fd and garbage written into the shared rings while the kernel consumes them
//! (issue 9, section 3).
//!
//!   rrxe-fuzz-verbs --dev rrxe0 [--ops N] [--seed S] [--segment N]
//!
//! The work runs in child processes of `--segment` operations each (forked before any verb;
//! segment k uses seed S+k), so that a process the provider cannot survive (it trusts its own
//! shared memory, which the fuzzer scribbles on) only ends its segment: that is the offending
//! process suffering, which is allowed. Each child opens two contexts and does random:
//! alloc/dealloc PD; create/resize/destroy CQ (random cqe and vector, with or without a
//! channel); create QP (random type, caps, CQs and SRQ from either context), modify with random
//! attributes and masks (and sometimes a proper INIT->RTR->RTS to a QP of the pool), query,
//! destroy; reg/rereg/dereg MR (valid, unmapped and absurd ranges, random access bits); create
//! AH (random attributes) and destroy; create/modify/query/destroy SRQ; post_send (random
//! opcodes, flags, SGE lists with live, dead and random lkeys and unmapped addresses, random
//! remote addresses and rkeys), post_recv and post_srq_recv likewise; poll and arm CQs; query
//! device/port/GID/P_Key with random indices; mmap of random offsets and sizes on the command
//! fd; writes of random values into the uverbs ring mappings of /proc/self/maps (indices,
//! geometry, flags, WQE fields), by the main thread before a doorbell and by a second thread
//! concurrently. Raw uverbs commands bypass libibverbs: `ioctl(RDMA_VERBS_IOCTL)` with real
//! and random object/method ids (every default object: device, PD, CQ, QP, SRQ, AH, MR, MW,
//! flow, XRCD, WQ, flow action, DM, counters, async event; `INVOKE_WRITE` carrying POST_SEND
//! WR lists) and random attributes (ids, the driver's UHW pair, flags, handles of live and
//! dead objects, inline values, pointers to user, kernel and non-canonical memory with random
//! lengths, malformed headers; well-formed queries whose output points at kernel, non-canonical
//! or NULL memory, which must fail), and `write()` commands (POST_SEND WR lists with hostile
//! counts, sizes, addresses and response pointers; memory window, XRC and extended flow/WQ
//! commands rrxe does not offer; random command ids and words).
//!
//! Three racing threads work on objects of their own (two RC QPs connected to each other, a
//! UD QP, a CQ, an MR, an AH): a poster (valid and hostile sends, receives, polls, raw
//! POST_SEND on the same QP), a modify_qp thread (RTS, ERR, RESET, INIT, SQD, random states on
//! the QPs being posted to) and a ring-index mover (the SQ, RQ and CQ producer and consumer
//! indices set near or far from their values), in bursts paced by the main thread's progress
//! over the whole segment; they take a quarter of the op budget. Half of the segments destroy
//! one racing QP or the MR from the kernel's side (a raw destroy ioctl) at a random op while
//! the racers keep using it. Objects are destroyed in random order (EBUSY is fine), and at the
//! end either explicitly (racers stopped first) or by exit with the racers still running.
//!
//! The seed is printed; `--seed` replays a run: every thread draws its sequence from it (the
//! interleaving of the threads is the scheduler's).
//!
//! Prints per verb: calls, successes, errnos seen; per segment whether the child exited or
//! died (and by which signal). Fails when a verb returned something other than 0 or a clean
//! errno (1..=133), a raw command was accepted that must not be (a WR list on a user QP, an
//! object rrxe does not offer, a query writing to a hostile address), or a child hung (each
//! segment is bounded). The kernel's side (oops, WARN, KASAN, lockdep, kmemleak) is judged by
//! the guest harness.

use rrxe_verbs_test::{dp, ffi, util};

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io::Write;
use std::process::ExitCode;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use dp::Rng;
use ffi::*;

struct Opts {
    dev: String,
    ops: u64,
    seed: u64,
    segment: u64,
    seg_timeout: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dev: "rrxe0".into(),
        ops: 10_000,
        seed: dp::clock_seed(),
        segment: 1000,
        seg_timeout: 120,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dev" => o.dev = dp::arg_val(&mut args, &a)?,
            "--ops" => o.ops = dp::arg_val(&mut args, &a)?,
            "--seed" => o.seed = dp::arg_val(&mut args, &a)?,
            "--segment" => o.segment = dp::arg_val(&mut args, &a)?,
            "--segment-timeout" => o.seg_timeout = dp::arg_val(&mut args, &a)?,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(o)
}

/// A child's statistics, sent to the parent through a pipe as text lines
/// `verb calls ok errno:count,...`.
#[derive(Default)]
struct Stats {
    verbs: BTreeMap<&'static str, (u64, u64, BTreeMap<i32, u64>)>,
    unclean: Vec<String>,
}

impl Stats {
    fn rec(&mut self, verb: &'static str, ok: bool, err: i32) {
        let e = self.verbs.entry(verb).or_default();
        e.0 += 1;
        if ok {
            e.1 += 1;
        } else {
            *e.2.entry(err).or_default() += 1;
            if !(1..=133).contains(&err) && self.unclean.len() < 20 {
                self.unclean.push(format!("{verb}: errno {err}"));
            }
        }
    }
}

fn errno() -> i32 {
    util::errno()
}

/// A pointer result: success, or the errno.
fn ptr_res<T>(p: *mut T) -> (bool, i32) {
    if p.is_null() {
        (false, errno())
    } else {
        (true, 0)
    }
}

/// An int result as libibverbs returns them.
fn int_res(r: i32) -> (bool, i32) {
    match util::ret_errno(r) {
        Ok(()) => (true, 0),
        Err(e) => (false, e),
    }
}

struct Ctx {
    ctx: *mut ibv_context,
    gid: [u8; 16],
    gid_index: u8,
    mtu: u32,
}

/// A context shared with the racing threads (libibverbs contexts are thread-safe).
struct SendCtx(Ctx);
// SAFETY: `ibv_context` may be used from any thread; the struct only carries its pointer and
// plain values.
unsafe impl Send for SendCtx {}
// SAFETY: as above.
unsafe impl Sync for SendCtx {}

struct MrObj {
    mr: *mut ibv_mr,
    _buf: Option<Vec<u8>>,
}

#[derive(Default)]
struct Pools {
    pds: Vec<*mut ibv_pd>,
    cqs: Vec<*mut ibv_cq>,
    chans: Vec<*mut ibv_comp_channel>,
    qps: Vec<*mut ibv_qp>,
    mrs: Vec<MrObj>,
    dead_keys: Vec<u32>,
    ahs: Vec<*mut ibv_ah>,
    srqs: Vec<*mut ibv_srq>,
}

fn pick<T: Copy>(r: &mut Rng, v: &[T]) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        Some(v[r.below(v.len() as u64) as usize])
    }
}

/// The uverbs mappings of this process (start, length).
fn ring_maps() -> Vec<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines()
        .filter(|l| l.contains("/dev/infiniband/uverbs"))
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.starts_with("rw"))
        })
        .filter_map(|l| {
            let r = l.split_whitespace().next()?;
            let (a, b) = r.split_once('-')?;
            let a = usize::from_str_radix(a, 16).ok()?;
            let b = usize::from_str_radix(b, 16).ok()?;
            Some((a, b - a))
        })
        .collect()
}

/// One hostile write into a ring mapping.
fn scribble(r: &mut Rng, maps: &[(usize, usize)]) -> bool {
    let Some((start, len)) = pick(r, maps) else {
        return false;
    };
    let off = match r.below(4) {
        0 => [0usize, 64, 128, 132, 136][r.below(5) as usize],
        _ => (r.below(len as u64 / 4) * 4) as usize,
    };
    let v: u32 = match r.below(6) {
        0 => 0xffff_ffff,
        1 => 0x8000_0000,
        2 => r.below(70) as u32,
        3 => r.u32() & 0xffff,
        _ => r.u32(),
    };
    // SAFETY: inside a mapping listed in /proc/self/maps as rw, which stays mapped while the
    // caller holds the lock that every unmapping operation takes for writing. The kernel must
    // cope with any value here; our own provider may not, which only ends this child.
    unsafe { std::ptr::write_volatile((start + off) as *mut u32, v) };
    true
}

fn child(o: &Opts, seg: u64, nops: u64, out: &mut std::fs::File) -> i32 {
    let mut r = Rng::new(o.seed.wrapping_add(seg));
    let mut st = Stats::default();
    let ctxs = match open_ctxs(&o.dev) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(out, "setup {e}");
            return 3;
        }
    };
    let lock = Arc::new(RwLock::new(ring_maps()));
    let stop = Arc::new(AtomicBool::new(false));
    // The concurrent scribbler.
    let (l2, s2) = (lock.clone(), stop.clone());
    let sseed = r.u64();
    let scrib = std::thread::spawn(move || {
        let mut r = Rng::new(sseed);
        let mut n = 0u64;
        while !s2.load(Ordering::Relaxed) {
            if let Ok(m) = l2.read() {
                if r.below(4) == 0 && scribble(&mut r, &m) {
                    n += 1;
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        n
    });
    // The racers: a poster, a modify_qp thread and a ring-index mover on objects of their
    // own, each with a seed drawn here (the seed replays every thread's sequence; their
    // interleaving is the scheduler's). Half of the segments destroy one of those objects
    // from the kernel's side at a random op while they run.
    // SAFETY: verbs on the first context; the objects live until `race_teardown` or exit.
    let mut race = unsafe { race_setup(&ctxs[0], &mut r, &mut st) }.map(Arc::new);
    let race_handles: Vec<u32> = race.as_ref().map_or(Vec::new(), |x| x.handles.clone());
    let destroy_at = r.coin().then(|| r.below((nops - nops / 4).max(1)));
    let shared = Arc::new(Mutex::new(Stats::default()));
    // The op budget is shared: a quarter of it goes to the racers' bursts (on average two
    // calls each), the rest to the main thread.
    let race_ops = if race.is_some() { nops / 8 } else { 0 };
    let main_ops = nops - 2 * race_ops;
    let progress = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let rstop = Arc::new(AtomicBool::new(false));
    let mut racers = Vec::new();
    if let Some(rc) = &race {
        let c0 = Ctx {
            ctx: ctxs[0].ctx,
            gid: ctxs[0].gid,
            gid_index: ctxs[0].gid_index,
            mtu: ctxs[0].mtu,
        };
        let c0 = Arc::new(SendCtx(c0));
        for (kind, budget) in [(0u8, race_ops / 2), (1, race_ops / 4), (2, race_ops / 4)] {
            let (rc, c0, sh, stop) = (rc.clone(), c0.clone(), shared.clone(), rstop.clone());
            let progress = progress.clone();
            let seed = r.u64();
            racers.push(std::thread::spawn(move || {
                let mut r = Rng::new(seed);
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Paced by the main thread's progress, so that the racers' ops spread over
                    // the whole segment; the poster keeps posting past its budget (exit under
                    // traffic), the others stop there.
                    if k < budget {
                        if progress.load(Ordering::Relaxed) < k * main_ops / budget.max(1) {
                            std::thread::sleep(Duration::from_millis(1));
                            continue;
                        }
                    } else if kind != 0 {
                        break;
                    } else {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    k += 1;
                    // A burst of 1-3 ops: posts and state changes close together.
                    for _ in 0..1 + r.below(3) {
                        // SAFETY: the racing objects stay alive until the racers are stopped
                        // or the process exits; hostile values are the point.
                        unsafe {
                            match kind {
                                0 => race_post(&rc, &c0.0, &mut r, &sh),
                                1 => race_modify(&rc, &c0.0, &mut r, &sh),
                                _ => race_index(&rc, &mut r, &sh),
                            }
                        }
                    }
                }
            }));
        }
    }
    let mut p = Pools::default();
    for i in 0..main_ops {
        progress.store(i, Ordering::Relaxed);
        let what = r.below(100);
        // Verbs that may unmap (or map) anything take the lock for writing.
        let fast = (60..94).contains(&what);
        let guard = if fast {
            None
        } else {
            Some(lock.write().unwrap_or_else(|e| e.into_inner()))
        };
        // SAFETY: the fuzzed verbs get valid object pointers from the pools (or null where
        // libibverbs allows it) and buffers that live across each call; the values are hostile
        // on purpose. A crash of this child is tolerated by the parent.
        unsafe { one_op(what, &mut r, &ctxs, &mut p, &mut st, &lock, &race_handles) };
        if destroy_at == Some(i) {
            if let Some(rc) = &race {
                // SAFETY: a raw ioctl naming the racing objects' handles.
                let x = unsafe { race_destroy(rc, &ctxs[0], &mut r) };
                st.rec(x.name, x.ok, x.err);
            }
        }
        if let Some(mut g) = guard {
            *g = ring_maps();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let scribbles = scrib.join().unwrap_or(0);
    st.rec("concurrent_scribbles", true, 0);
    if let Some(e) = st.verbs.get_mut("concurrent_scribbles") {
        e.0 = scribbles;
        e.1 = scribbles;
    }
    // Tear down: explicitly (reverse order) half of the time, else by exit with the racers
    // still running (exit under traffic).
    let explicit = r.coin();
    if explicit {
        rstop.store(true, Ordering::Relaxed);
        for t in racers.drain(..) {
            let _ = t.join();
        }
        if let Some(rc) = race.take().and_then(Arc::into_inner) {
            // SAFETY: the racers are stopped; nothing else uses these objects.
            unsafe { race_teardown(rc, &mut st) };
        }
        unsafe {
            for q in p.qps.drain(..) {
                let x = int_res(ibv_destroy_qp(q));
                st.rec("teardown_destroy_qp", x.0, x.1);
            }
            for s in p.srqs.drain(..) {
                let x = int_res(ibv_destroy_srq(s));
                st.rec("teardown_destroy_srq", x.0, x.1);
            }
            for a in p.ahs.drain(..) {
                let x = int_res(ibv_destroy_ah(a));
                st.rec("teardown_destroy_ah", x.0, x.1);
            }
            for m in p.mrs.drain(..) {
                let x = int_res(ibv_dereg_mr(m.mr));
                st.rec("teardown_dereg_mr", x.0, x.1);
            }
            for c in p.cqs.drain(..) {
                let x = int_res(ibv_destroy_cq(c));
                st.rec("teardown_destroy_cq", x.0, x.1);
            }
            for c in p.chans.drain(..) {
                let x = int_res(ibv_destroy_comp_channel(c));
                st.rec("teardown_destroy_channel", x.0, x.1);
            }
            for d in p.pds.drain(..) {
                let x = int_res(ibv_dealloc_pd(d));
                st.rec("teardown_dealloc_pd", x.0, x.1);
            }
            for c in &ctxs {
                let x = int_res(ibv_close_device(c.ctx));
                st.rec("teardown_close_device", x.0, x.1);
            }
        }
    }
    {
        let sh = shared.lock().unwrap_or_else(|e| e.into_inner());
        for (v, (n, ok, errs)) in &sh.verbs {
            let e = st.verbs.entry(v).or_default();
            e.0 += n;
            e.1 += ok;
            for (k, c) in errs {
                *e.2.entry(*k).or_default() += c;
            }
        }
        st.unclean.extend(sh.unclean.iter().cloned());
    }
    for (v, (n, ok, errs)) in &st.verbs {
        let e: Vec<String> = errs.iter().map(|(k, c)| format!("{k}:{c}")).collect();
        let _ = writeln!(
            out,
            "verb {v} {n} {ok} {}",
            if e.is_empty() {
                "-".into()
            } else {
                e.join(",")
            }
        );
    }
    for u in &st.unclean {
        let _ = writeln!(out, "unclean {u}");
    }
    let _ = writeln!(
        out,
        "teardown {}",
        if explicit { "explicit" } else { "exit" }
    );
    0
}

fn open_ctxs(name: &str) -> Result<Vec<Ctx>, String> {
    let mut v = Vec::new();
    for _ in 0..2 {
        let d = dp::Dev::open(name)?;
        let c = Ctx {
            ctx: d.ctx.ptr,
            gid: d.gid,
            gid_index: d.gid_index,
            mtu: d.port_attr.active_mtu,
        };
        std::mem::forget(d); // keep the context open; closed at teardown or exit
        v.push(c);
    }
    Ok(v)
}

fn rand_bytes<T: Zeroed>(r: &mut Rng) -> T {
    let mut t: T = zeroed();
    // SAFETY: T is a plain C struct without pointers (callers only use it for such types).
    let b = unsafe {
        std::slice::from_raw_parts_mut((&mut t as *mut T).cast::<u8>(), std::mem::size_of::<T>())
    };
    r.fill(b);
    t
}

fn small_or_wild(r: &mut Rng, small: u64) -> u32 {
    match r.below(8) {
        0 => r.u32(),
        1 => 0,
        2 | 3 => r.below(small + 1) as u32,
        _ => 1 + r.below(small.min(8)) as u32,
    }
}

/// A list of SGEs pointing at live MRs (in or out of bounds), dead keys, or random memory.
fn sges(r: &mut Rng, p: &Pools, n: usize) -> Vec<ibv_sge> {
    (0..n)
        .map(|_| {
            let m = pick(r, &p.mrs.iter().map(|m| m.mr).collect::<Vec<_>>());
            match (r.below(4), m) {
                (0 | 1, Some(m)) => unsafe {
                    let (a, l) = ((*m).addr as u64, (*m).length as u64);
                    let off = if r.below(3) == 0 {
                        r.below(2 * l.max(1))
                    } else {
                        r.below(l.max(1))
                    };
                    ibv_sge {
                        addr: a + off,
                        length: r.below(l.max(1) + 64) as u32,
                        lkey: (*m).lkey,
                    }
                },
                (2, _) => ibv_sge {
                    addr: r.u64(),
                    length: r.u32() & 0xffff,
                    lkey: pick(r, &p.dead_keys).unwrap_or(r.u32()),
                },
                _ => ibv_sge {
                    addr: r.u64(),
                    length: r.u32(),
                    lkey: r.u32(),
                },
            }
        })
        .collect()
}

unsafe fn one_op(
    what: u64,
    r: &mut Rng,
    ctxs: &[Ctx],
    p: &mut Pools,
    st: &mut Stats,
    lock: &RwLock<Vec<(usize, usize)>>,
    race: &[u32],
) {
    let c = &ctxs[r.below(ctxs.len() as u64) as usize];
    match what {
        0..=4 => {
            let pd = ibv_alloc_pd(c.ctx);
            let x = ptr_res(pd);
            st.rec("alloc_pd", x.0, x.1);
            if x.0 {
                p.pds.push(pd);
            }
        }
        5 => {
            if let Some(i) = (!p.pds.is_empty()).then(|| r.below(p.pds.len() as u64) as usize) {
                let x = int_res(ibv_dealloc_pd(p.pds[i]));
                st.rec("dealloc_pd", x.0, x.1);
                if x.0 {
                    p.pds.swap_remove(i);
                }
            }
        }
        6..=10 => {
            let cqe = match r.below(6) {
                0 => r.u32() as i32,
                1 => -(r.below(10) as i32),
                _ => r.below(2048) as i32,
            };
            let vec = if r.below(4) == 0 { r.u32() as i32 } else { 0 };
            let ch = if r.below(3) == 0 {
                let ch = ibv_create_comp_channel(c.ctx);
                let x = ptr_res(ch);
                st.rec("create_comp_channel", x.0, x.1);
                if x.0 {
                    p.chans.push(ch);
                }
                ch
            } else {
                null_mut()
            };
            let cq = ibv_create_cq(c.ctx, cqe, null_mut(), ch, vec);
            let x = ptr_res(cq);
            st.rec("create_cq", x.0, x.1);
            if x.0 {
                p.cqs.push(cq);
            }
        }
        11 => {
            if let Some(i) = (!p.cqs.is_empty()).then(|| r.below(p.cqs.len() as u64) as usize) {
                let x = int_res(ibv_destroy_cq(p.cqs[i]));
                st.rec("destroy_cq", x.0, x.1);
                if x.0 {
                    p.cqs.swap_remove(i);
                }
            }
        }
        12 | 13 => {
            if let Some(cq) = pick(r, &p.cqs) {
                let n = match r.below(4) {
                    0 => r.u32() as i32,
                    _ => r.below(4096) as i32,
                };
                let x = int_res(ibv_resize_cq(cq, n));
                st.rec("resize_cq", x.0, x.1);
            }
        }
        14..=21 => {
            // create QP
            let (Some(pd), Some(scq), Some(rcq)) =
                (pick(r, &p.pds), pick(r, &p.cqs), pick(r, &p.cqs))
            else {
                return;
            };
            let t = match r.below(8) {
                0 => r.below(256) as u32,
                1 | 2 => IBV_QPT_UD,
                3 | 4 => IBV_QPT_UC,
                _ => IBV_QPT_RC,
            };
            let mut ia = ibv_qp_init_attr {
                send_cq: scq,
                recv_cq: rcq,
                srq: if r.below(4) == 0 {
                    pick(r, &p.srqs).unwrap_or(null_mut())
                } else {
                    null_mut()
                },
                cap: ibv_qp_cap {
                    max_send_wr: small_or_wild(r, 256),
                    max_recv_wr: small_or_wild(r, 256),
                    max_send_sge: small_or_wild(r, 40),
                    max_recv_sge: small_or_wild(r, 40),
                    max_inline_data: small_or_wild(r, 512),
                },
                qp_type: t,
                sq_sig_all: r.coin() as i32,
                ..zeroed()
            };
            let qp = ibv_create_qp(pd, &mut ia);
            let x = ptr_res(qp);
            st.rec("create_qp", x.0, x.1);
            if x.0 {
                p.qps.push(qp);
            }
        }
        22..=24 => {
            if let Some(i) = (!p.qps.is_empty()).then(|| r.below(p.qps.len() as u64) as usize) {
                let x = int_res(ibv_destroy_qp(p.qps[i]));
                st.rec("destroy_qp", x.0, x.1);
                if x.0 {
                    p.qps.swap_remove(i);
                }
            }
        }
        25..=31 => {
            // modify QP: random attributes and mask
            let Some(qp) = pick(r, &p.qps) else { return };
            let mut a: ibv_qp_attr = rand_bytes(r);
            if r.coin() {
                a.qp_state = r.below(8) as u32;
                a.port_num = 1;
                a.pkey_index = 0;
                a.path_mtu = 1 + r.below(5) as u32;
                a.ah_attr.grh.sgid_index = c.gid_index;
                a.ah_attr.is_global = 1;
                a.ah_attr.port_num = 1;
            }
            let mask = match r.below(4) {
                0 => r.u32() as i32,
                _ => (r.u32() & 0x1f_ffff) as i32,
            };
            let x = int_res(ibv_modify_qp(qp, &mut a, mask));
            st.rec("modify_qp_random", x.0, x.1);
        }
        32..=35 => {
            // a proper bring-up to RTS, connected to a QP of the pool (so that posts run)
            let (Some(qp), Some(peer)) = (pick(r, &p.qps), pick(r, &p.qps)) else {
                return;
            };
            let ok = bring_up(qp, (*peer).qp_num, c, r);
            st.rec("modify_qp_to_rts", ok.0, ok.1);
        }
        37 | 98 => {
            // raw ioctl commands
            for _ in 0..1 + r.below(4) {
                let x = if r.below(3) == 0 {
                    raw_query(r, c, p, race)
                } else {
                    raw_ioctl(r, c, p, race)
                };
                st.rec(x.name, x.ok, x.err);
                if let Some(u) = x.unclean.filter(|_| st.unclean.len() < 20) {
                    st.unclean.push(u);
                }
            }
        }
        99 if r.below(4) != 0 => {
            // raw write commands
            for _ in 0..1 + r.below(4) {
                let x = raw_write(r, c, p, race);
                st.rec(x.name, x.ok, x.err);
                if let Some(u) = x.unclean.filter(|_| st.unclean.len() < 20) {
                    st.unclean.push(u);
                }
            }
        }
        36 => {
            let Some(qp) = pick(r, &p.qps) else { return };
            let mut a = zeroed::<ibv_qp_attr>();
            let mut ia = zeroed::<ibv_qp_init_attr>();
            let x = int_res(ibv_query_qp(qp, &mut a, r.u32() as i32, &mut ia));
            st.rec("query_qp", x.0, x.1);
        }
        38..=42 => {
            // reg MR: valid buffer, unmapped/absurd range, random access
            let Some(pd) = pick(r, &p.pds) else { return };
            let access = match r.below(4) {
                0 => r.u32() as i32,
                1 => (r.u32() & 0x1f) as i32,
                _ => dp::ACCESS_ALL as i32,
            };
            let (addr, len, buf) = match r.below(6) {
                0 => (
                    r.u64() as *mut libc::c_void,
                    r.u64() as usize & 0xffff_ffff,
                    None,
                ),
                1 => (
                    (r.below(1 << 20) << 12) as *mut libc::c_void,
                    (r.below(64) as usize + 1) << 12,
                    None,
                ),
                _ => {
                    let n = r.below(1 << 16) as usize + 1;
                    let mut b = vec![0u8; n];
                    (
                        b.as_mut_ptr().cast(),
                        if r.below(8) == 0 { 0 } else { n },
                        Some(b),
                    )
                }
            };
            let mr = ibv_reg_mr(pd, addr, len, access);
            let x = ptr_res(mr);
            st.rec("reg_mr", x.0, x.1);
            if x.0 {
                p.mrs.push(MrObj { mr, _buf: buf });
            }
        }
        43 | 44 => {
            if let Some(i) = (!p.mrs.is_empty()).then(|| r.below(p.mrs.len() as u64) as usize) {
                let (lk, rk) = ((*p.mrs[i].mr).lkey, (*p.mrs[i].mr).rkey);
                let x = int_res(ibv_dereg_mr(p.mrs[i].mr));
                st.rec("dereg_mr", x.0, x.1);
                if x.0 {
                    p.mrs.swap_remove(i);
                    p.dead_keys.push(lk);
                    p.dead_keys.push(rk);
                }
            }
        }
        45 => {
            if let Some(m) = p
                .mrs
                .iter()
                .map(|m| m.mr)
                .nth(r.below(p.mrs.len().max(1) as u64) as usize)
            {
                let pd = pick(r, &p.pds).unwrap_or(null_mut());
                let flags = (r.u32() & 0xf) as i32;
                let x = ibv_rereg_mr(
                    m,
                    flags,
                    pd,
                    (*m).addr,
                    (*m).length,
                    (r.u32() & 0x1f) as i32,
                );
                // rereg returns 0 or an IBV_REREG_MR_ERR_* (negative) code
                st.rec(
                    "rereg_mr",
                    x == 0,
                    if x == 0 { 0 } else { x.unsigned_abs() as i32 },
                );
            }
        }
        46..=49 => {
            let Some(pd) = pick(r, &p.pds) else { return };
            let mut a: ibv_ah_attr = rand_bytes(r);
            if r.coin() {
                a.port_num = 1;
                a.is_global = 1;
                a.grh.sgid_index = c.gid_index;
                if r.coin() {
                    a.grh.dgid.raw = c.gid;
                }
            }
            let ah = ibv_create_ah(pd, &mut a);
            let x = ptr_res(ah);
            st.rec("create_ah", x.0, x.1);
            if x.0 {
                p.ahs.push(ah);
            }
        }
        50 => {
            if let Some(i) = (!p.ahs.is_empty()).then(|| r.below(p.ahs.len() as u64) as usize) {
                let x = int_res(ibv_destroy_ah(p.ahs[i]));
                st.rec("destroy_ah", x.0, x.1);
                if x.0 {
                    p.ahs.swap_remove(i);
                }
            }
        }
        51..=53 => {
            let Some(pd) = pick(r, &p.pds) else { return };
            let mut a = ibv_srq_init_attr {
                attr: ibv_srq_attr {
                    max_wr: small_or_wild(r, 512),
                    max_sge: small_or_wild(r, 40),
                    srq_limit: small_or_wild(r, 64),
                },
                ..zeroed()
            };
            let s = ibv_create_srq(pd, &mut a);
            let x = ptr_res(s);
            st.rec("create_srq", x.0, x.1);
            if x.0 {
                p.srqs.push(s);
            }
        }
        54 => {
            let Some(s) = pick(r, &p.srqs) else { return };
            let mut a: ibv_srq_attr = rand_bytes(r);
            let x = int_res(ibv_modify_srq(s, &mut a, (r.u32() & 0x7) as i32));
            st.rec("modify_srq", x.0, x.1);
            let x = int_res(ibv_query_srq(s, &mut a));
            st.rec("query_srq", x.0, x.1);
        }
        55 => {
            if let Some(i) = (!p.srqs.is_empty()).then(|| r.below(p.srqs.len() as u64) as usize) {
                let x = int_res(ibv_destroy_srq(p.srqs[i]));
                st.rec("destroy_srq", x.0, x.1);
                if x.0 {
                    p.srqs.swap_remove(i);
                }
            }
        }
        56 | 57 => {
            let mut a = zeroed::<ibv_port_attr>();
            let port = if r.coin() { 1 } else { r.u32() as u8 };
            let x = int_res(vt_query_port(c.ctx, port, &mut a));
            st.rec("query_port", x.0, x.1);
            let mut g = zeroed::<ibv_gid>();
            let x = int_res(ibv_query_gid(
                c.ctx,
                port,
                small_or_wild(r, 32) as i32,
                &mut g,
            ));
            st.rec("query_gid", x.0, x.1);
            let mut k = 0u16;
            let x = int_res(ibv_query_pkey(
                c.ctx,
                port,
                small_or_wild(r, 4) as i32,
                &mut k,
            ));
            st.rec("query_pkey", x.0, x.1);
            let mut d = zeroed::<ibv_device_attr>();
            let x = int_res(ibv_query_device(c.ctx, &mut d));
            st.rec("query_device", x.0, x.1);
        }
        58 | 59 => {
            // random mmap offsets and sizes on the command fd
            let fd = (*c.ctx).cmd_fd;
            let len = match r.below(3) {
                0 => 4096,
                1 => (r.below(64) as usize + 1) << 12,
                _ => r.u32() as usize,
            };
            let off = match r.below(4) {
                0 => (r.below(64) << 12) as i64,
                1 => r.u64() as i64 & !0xfff,
                2 => r.u64() as i64,
                _ => (r.below(8) << 12) as i64,
            };
            let m = libc::mmap(
                null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                off,
            );
            if m == libc::MAP_FAILED {
                st.rec("mmap_random", false, errno());
            } else {
                st.rec("mmap_random", true, 0);
                // touching the first page of something the kernel agreed to map must work
                let _ = std::ptr::read_volatile(m as *const u8);
                libc::munmap(m, len);
            }
        }
        60..=67 | 86..=93 => {
            // post_send with hostile WRs
            let Some(qp) = pick(r, &p.qps) else { return };
            if r.below(4) == 0 {
                // The same WR list written straight into a uverbs POST_SEND command, as a
                // process that bypasses the provider would (issue 25): inline or not, from
                // user, kernel, unmapped and non-canonical addresses. A user QP's WRs travel
                // through its SQ ring only: every such list must be refused (the driver says
                // EINVAL; ib_uverbs may refuse first, e.g. ENOENT for an AH handle it cannot
                // find). Accepting one is the failure.
                let addrs = [
                    0xffff_ffff_8100_0000u64,
                    0xffff_8880_0000_0000,
                    0xffff_ffff_ff00_0000,
                    0x8000_0000_0000_0000,
                    r.u64(),
                ];
                let mut sge = ibv_sge {
                    addr: addrs[r.below(addrs.len() as u64) as usize],
                    length: r.below(256) as u32,
                    lkey: r.u32(),
                };
                let mut w = ibv_send_wr {
                    wr_id: r.u64(),
                    opcode: r.below(16) as u32,
                    send_flags: r.u32() & 0x1f,
                    num_sge: 1 + r.below(2) as i32,
                    sg_list: &mut sge,
                    ..zeroed()
                };
                w.num_sge = w.num_sge.min(1);
                if (*qp).qp_type == IBV_QPT_UD {
                    // libibverbs reads the AH's handle to marshal a UD WR.
                    let Some(ah) = pick(r, &p.ahs) else { return };
                    w.wr.ud.ah = ah;
                }
                let mut bad = null_mut();
                let rc = ibv_cmd_post_send(qp, &mut w, &mut bad);
                st.rec("raw_post_send", rc == 0, rc);
                if rc == 0 && st.unclean.len() < 20 {
                    st.unclean.push(format!(
                        "raw_post_send of a WR list was accepted (addr {:#x})",
                        sge.addr
                    ));
                }
                return;
            }
            let n = 1 + r.below(4) as usize;
            let mut lists: Vec<Vec<ibv_sge>> = (0..n)
                .map(|_| {
                    let k = if r.below(6) == 0 {
                        r.below(40)
                    } else {
                        r.below(3)
                    } as usize;
                    sges(r, p, k)
                })
                .collect();
            let mut wrs: Vec<ibv_send_wr> = (0..n).map(|_| zeroed()).collect();
            for (i, w) in wrs.iter_mut().enumerate() {
                w.wr_id = r.u64();
                w.opcode = if r.below(5) == 0 {
                    r.below(20) as u32
                } else {
                    [
                        IBV_WR_SEND,
                        IBV_WR_RDMA_WRITE,
                        IBV_WR_RDMA_READ,
                        IBV_WR_SEND_WITH_IMM,
                        IBV_WR_ATOMIC_FETCH_AND_ADD,
                    ][r.below(5) as usize]
                };
                w.send_flags = (r.u32() & 0xf) & !IBV_SEND_INLINE;
                w.num_sge = lists[i].len() as i32;
                w.sg_list = lists[i].as_mut_ptr();
                w.wr.rdma.remote_addr = r.u64();
                w.wr.rdma.rkey = pick(r, &p.dead_keys)
                    .filter(|_| r.coin())
                    .unwrap_or(r.u32());
                if (*qp).qp_type == IBV_QPT_UD {
                    let Some(ah) = pick(r, &p.ahs) else { return };
                    w.wr.ud.ah = ah;
                    w.wr.ud.remote_qpn = r.u32() & 0xff_ffff;
                    w.wr.ud.remote_qkey = r.u32();
                }
            }
            for i in 0..n - 1 {
                let next: *mut ibv_send_wr = &mut wrs[i + 1];
                wrs[i].next = next;
            }
            let mut bad = null_mut();
            let x = int_res(vt_post_send(qp, wrs.as_mut_ptr(), &mut bad));
            st.rec("post_send", x.0, x.1);
            drop(lists.drain(..));
        }
        68..=71 => {
            let Some(qp) = pick(r, &p.qps) else { return };
            let k = if r.below(6) == 0 {
                r.below(40)
            } else {
                r.below(3)
            } as usize;
            let mut l = sges(r, p, k);
            let mut w = ibv_recv_wr {
                wr_id: r.u64(),
                sg_list: l.as_mut_ptr(),
                num_sge: l.len() as i32,
                ..zeroed()
            };
            let mut bad = null_mut();
            let x = int_res(vt_post_recv(qp, &mut w, &mut bad));
            st.rec("post_recv", x.0, x.1);
            if let Some(s) = pick(r, &p.srqs) {
                let mut bad = null_mut();
                if let Some(f) = (*(*s).context).ops.post_srq_recv {
                    let x = int_res(f(s, &mut w, &mut bad));
                    st.rec("post_srq_recv", x.0, x.1);
                }
            }
        }
        72..=76 => {
            let Some(cq) = pick(r, &p.cqs) else { return };
            let mut wc = zeroed::<[ibv_wc; 32]>();
            let n = vt_poll_cq(cq, 1 + r.below(32) as i32, wc.as_mut_ptr());
            st.rec("poll_cq", n >= 0, if n >= 0 { 0 } else { -n });
            if r.below(4) == 0 {
                let x = int_res(vt_req_notify_cq(cq, r.coin() as i32));
                st.rec("req_notify_cq", x.0, x.1);
            }
        }
        77..=85 => {
            // scribble then ring a doorbell (the kernel consumes what we wrote)
            let maps = lock.read().map(|m| m.clone()).unwrap_or_default();
            for _ in 0..1 + r.below(8) {
                scribble(r, &maps);
            }
            st.rec("scribble", true, 0);
            if let Some(qp) = pick(r, &p.qps) {
                let mut l = sges(r, p, 1);
                let mut w = ibv_send_wr {
                    wr_id: 7,
                    opcode: IBV_WR_SEND,
                    sg_list: l.as_mut_ptr(),
                    num_sge: 1,
                    ..zeroed()
                };
                if (*qp).qp_type == IBV_QPT_UD {
                    let Some(ah) = pick(r, &p.ahs) else { return };
                    w.wr.ud.ah = ah;
                }
                let mut bad = null_mut();
                let x = int_res(vt_post_send(qp, &mut w, &mut bad));
                st.rec("post_send_after_scribble", x.0, x.1);
            }
        }
        94..=97 => {
            // bring a QP up properly (more QPs in RTS: more of the data path under fire)
            let (Some(qp), Some(peer)) = (pick(r, &p.qps), pick(r, &p.qps)) else {
                return;
            };
            let ok = bring_up(qp, (*peer).qp_num, c, r);
            st.rec("modify_qp_to_rts", ok.0, ok.1);
        }
        _ => {
            // a whole-context event: close and reopen is not possible with live objects in
            // the pools; query the device list instead (sysfs reads under load)
            let mut n = 0;
            let l = ibv_get_device_list(&mut n);
            st.rec("get_device_list", !l.is_null(), errno());
            if !l.is_null() {
                for i in 0..n.max(0) as usize {
                    let _ = CStr::from_ptr(ibv_get_device_name(*l.add(i)));
                }
                ibv_free_device_list(l);
            }
        }
    }
}

unsafe fn bring_up(qp: *mut ibv_qp, peer: u32, c: &Ctx, r: &mut Rng) -> (bool, i32) {
    let t = (*qp).qp_type;
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RESET,
        ..zeroed()
    };
    let _ = ibv_modify_qp(qp, &mut a, IBV_QP_STATE as i32);
    a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        qkey: 0x1234,
        qp_access_flags: dp::ACCESS_ALL & !IBV_ACCESS_LOCAL_WRITE,
        ..zeroed()
    };
    let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    mask |= if t == IBV_QPT_UD {
        IBV_QP_QKEY
    } else {
        IBV_QP_ACCESS_FLAGS
    };
    let x = int_res(ibv_modify_qp(qp, &mut a, mask as i32));
    if !x.0 {
        return x;
    }
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if t != IBV_QPT_UD {
        a.path_mtu = c.mtu;
        a.dest_qp_num = peer;
        a.rq_psn = r.u32() & 0xff_ffff;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.dgid.raw = c.gid;
        a.ah_attr.grh.sgid_index = c.gid_index;
        a.ah_attr.grh.hop_limit = 64;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    }
    if t == IBV_QPT_RC {
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 1;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    let x = int_res(ibv_modify_qp(qp, &mut a, mask as i32));
    if !x.0 {
        return x;
    }
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = r.u32() & 0xff_ffff;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if t == IBV_QPT_RC {
        a.timeout = 8;
        a.retry_cnt = 1;
        a.rnr_retry = 1;
        a.max_rd_atomic = 1;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    int_res(ibv_modify_qp(qp, &mut a, mask as i32))
}

// ---- Raw uverbs commands: ioctl() and write() on the command fd, bypassing libibverbs ----

/// `RDMA_VERBS_IOCTL`: `_IOWR(RDMA_IOCTL_MAGIC 0x1b, 1, struct ib_uverbs_ioctl_hdr)` (24 bytes).
const RDMA_VERBS_IOCTL: libc::c_ulong = 0xc018_1b01;
/// `UVERBS_ATTR_F_MANDATORY`, `UVERBS_ATTR_F_VALID_OUTPUT`.
const ATTR_F_MANDATORY: u16 = 1;
const ATTR_F_VALID_OUTPUT: u16 = 2;
/// `UVERBS_ATTR_UHW_IN` / `UHW_OUT` (driver data, `UVERBS_UDATA_DRIVER_DATA_FLAG`).
const ATTR_UHW_IN: u16 = 0x1000;
const ATTR_UHW_OUT: u16 = 0x1001;
/// `enum uverbs_default_objects`, for the statistics.
const IOCTL_OBJECTS: [&str; 18] = [
    "ioctl_device",
    "ioctl_pd",
    "ioctl_comp_channel",
    "ioctl_cq",
    "ioctl_qp",
    "ioctl_srq",
    "ioctl_ah",
    "ioctl_mr",
    "ioctl_mw",
    "ioctl_flow",
    "ioctl_xrcd",
    "ioctl_rwq_ind_tbl",
    "ioctl_wq",
    "ioctl_flow_action",
    "ioctl_dm",
    "ioctl_counters",
    "ioctl_async_event",
    "ioctl_other",
];
/// `IB_USER_VERBS_CMD_*` used by name.
const CMD_ALLOC_MW: u32 = 14;
const CMD_POST_SEND: u32 = 28;
const CMD_OPEN_XRCD: u32 = 37;
/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`; extended command ids from `IB_USER_VERBS_CMD_THRESHOLD`.
const CMD_FLAG_EXTENDED: u32 = 0x8000_0000;
const EX_CMD_FIRST_UNSUPPORTED: u32 = 50; // CREATE_FLOW, DESTROY_FLOW, CREATE_WQ, ...

/// `struct ib_uverbs_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct UAttr {
    attr_id: u16,
    len: u16,
    flags: u16,
    attr_data: u16,
    data: u64,
}

/// Addresses a hostile process names: user (its own buffer), kernel text and direct map, the
/// top page, non-canonical, NULL, random.
fn hostile_addr(r: &mut Rng, user: u64) -> u64 {
    match r.below(8) {
        0 | 1 => user,
        2 => 0xffff_ffff_8100_0000,
        3 => 0xffff_8880_0000_0000 + (r.below(1 << 20) << 12),
        4 => 0xffff_ffff_ffff_f000,
        5 => [
            0x8000_0000_0000_0000,
            0x0000_8000_0000_0000,
            0xdead_beef_0000_0000,
        ][r.below(3) as usize],
        6 => 0,
        _ => r.u64(),
    }
}

/// Handles a command may name: the pools' live objects (and the racing ones), or garbage.
fn some_handle(r: &mut Rng, p: &Pools, race: &[u32]) -> u32 {
    // SAFETY (of the reads below): pool pointers are live libibverbs objects.
    unsafe {
        match r.below(9) {
            0 => pick(r, &p.pds).map_or(0, |x| (*x).handle),
            1 => pick(r, &p.cqs).map_or(0, |x| (*x).handle),
            2 => pick(r, &p.qps).map_or(0, |x| (*x).handle),
            3 => pick(r, &p.srqs).map_or(0, |x| (*x).handle),
            4 => pick(r, &p.ahs).map_or(0, |x| (*x).handle),
            5 => {
                pick(r, &p.mrs.iter().map(|m| m.mr).collect::<Vec<_>>()).map_or(0, |x| (*x).handle)
            }
            6 => pick(r, race).unwrap_or(0),
            7 => r.below(64) as u32,
            _ => r.u32(),
        }
    }
}

/// One `struct ib_uverbs_post_send` (without the write header) carrying `nwr` WRs of one SGE
/// each on `qp_handle`, with hostile opcodes, flags, lengths and addresses.
fn post_send_cmd(r: &mut Rng, qp_handle: u32, nwr: u32, resp: u64, user: u64) -> Vec<u8> {
    let mut b = Vec::new();
    let wqe_size: u32 = if r.below(6) == 0 {
        r.below(128) as u32
    } else {
        56
    };
    b.extend_from_slice(&resp.to_ne_bytes());
    b.extend_from_slice(&qp_handle.to_ne_bytes());
    b.extend_from_slice(&nwr.to_ne_bytes());
    let sge_count = if r.below(6) == 0 {
        r.below(8) as u32
    } else {
        nwr
    };
    b.extend_from_slice(&sge_count.to_ne_bytes());
    b.extend_from_slice(&wqe_size.to_ne_bytes());
    for _ in 0..nwr {
        let mut w = [0u8; 56];
        r.fill(&mut w);
        w[8..12].copy_from_slice(&1u32.to_ne_bytes()); // num_sge
        w[12..16].copy_from_slice(&(r.below(16) as u32).to_ne_bytes()); // opcode
        w[16..20].copy_from_slice(&(r.u32() & 0x3f).to_ne_bytes()); // send_flags (INLINE = 8)
        b.extend_from_slice(&w);
    }
    for _ in 0..sge_count {
        b.extend_from_slice(&hostile_addr(r, user).to_ne_bytes());
        b.extend_from_slice(&(r.below(512) as u32).to_ne_bytes());
        b.extend_from_slice(&r.u32().to_ne_bytes());
    }
    b
}

/// A raw `ioctl(RDMA_VERBS_IOCTL)`: `object`/`method` ids (real ones, mostly), with random
/// attributes: ids around the real ones and the driver's UHW pair, handles, inline values,
/// pointers to user, kernel and non-canonical memory with random lengths and flags. Clean
/// errnos are expected; success is fine for what a process may do, never for a method of an
/// object rrxe does not offer, nor for a WR list on a user QP.
unsafe fn raw_ioctl(r: &mut Rng, c: &Ctx, p: &Pools, race: &[u32]) -> Rec {
    let fd = (*c.ctx).cmd_fd;
    let mut ubuf = vec![0u8; 512];
    r.fill(&mut ubuf);
    let user = ubuf.as_mut_ptr() as u64;
    let (object, method) = match r.below(10) {
        0 => (r.u32() as u16, r.u32() as u16),
        1 => ((r.below(17) as u16) | 0x1000, r.below(8) as u16),
        _ => {
            let nm = if r.below(4) == 0 { 16 } else { 6 };
            (r.below(17) as u16, r.below(nm) as u16)
        }
    };
    let mut attrs: Vec<UAttr> = Vec::new();
    let mut payload = Vec::new();
    let mut post_wrs = 0;
    if object == 0 && method == 0 && r.coin() {
        // INVOKE_WRITE: a write() command through ioctl, often POST_SEND with a WR list.
        let cmd = if r.below(3) == 0 {
            r.below(45) as u32
        } else {
            CMD_POST_SEND
        };
        let qp = race
            .first()
            .copied()
            .filter(|_| r.coin())
            .unwrap_or_else(|| some_handle(r, p, race));
        post_wrs = if cmd == CMD_POST_SEND {
            1 + r.below(3) as u32
        } else {
            0
        };
        let resp = hostile_addr(r, user);
        payload = post_send_cmd(r, qp, post_wrs, resp, user);
        attrs.push(UAttr {
            attr_id: 2,
            len: 4,
            flags: ATTR_F_MANDATORY,
            data: u64::from(cmd),
            ..Default::default()
        });
        attrs.push(UAttr {
            attr_id: 0,
            len: payload.len() as u16,
            flags: ATTR_F_MANDATORY,
            data: if r.below(5) == 0 {
                hostile_addr(r, user)
            } else {
                payload.as_ptr() as u64
            },
            ..Default::default()
        });
        if r.coin() {
            attrs.push(UAttr {
                attr_id: 1,
                len: 4 + r.below(16) as u16,
                data: hostile_addr(r, user),
                ..Default::default()
            });
        }
    }
    for _ in 0..r.below(7) {
        let attr_id = match r.below(8) {
            0 => ATTR_UHW_IN,
            1 => ATTR_UHW_OUT,
            2 => r.u32() as u16,
            _ => r.below(10) as u16,
        };
        let flags = match r.below(6) {
            0 => r.u32() as u16,
            1 => ATTR_F_VALID_OUTPUT,
            2 | 3 => ATTR_F_MANDATORY,
            _ => 0,
        };
        let (len, data) = match r.below(6) {
            // an object handle (IDR attributes carry it inline)
            0 | 1 => (
                if r.below(8) == 0 {
                    r.below(9) as u16
                } else {
                    0
                },
                u64::from(some_handle(r, p, race)),
            ),
            // an inline value
            2 => (1 + r.below(8) as u16, r.u64()),
            // a pointer with its length
            3 | 4 => (
                match r.below(4) {
                    0 => r.u32() as u16,
                    _ => 9 + r.below(256) as u16,
                },
                hostile_addr(r, user),
            ),
            // an fd (comp channel, async event, dmabuf)
            _ => (
                0,
                [0, 1, 2, fd as u64, u64::MAX, r.below(64)][r.below(6) as usize],
            ),
        };
        attrs.push(UAttr {
            attr_id,
            len,
            flags,
            attr_data: if r.below(8) == 0 { r.u32() as u16 } else { 0 },
            data,
        });
    }
    // The header, now and then malformed (length, count, reserved words).
    let n = attrs.len();
    let mut buf = vec![0u64; 3 + 2 * n];
    let mut length = (24 + 16 * n) as u16;
    let mut num_attrs = n as u16;
    let (mut res1, mut res2) = (0u64, 0u32);
    match r.below(16) {
        0 => length = r.u32() as u16,
        1 => {
            // fewer attributes than the buffer holds, the length matching them or not
            num_attrs = r.below(n as u64 + 1) as u16;
            if r.coin() {
                length = 24 + 16 * num_attrs;
            }
        }
        2 => res1 = r.u64(),
        3 => res2 = r.u32(),
        _ => {}
    }
    let hdr = [
        u64::from(length)
            | u64::from(object) << 16
            | u64::from(method) << 32
            | u64::from(num_attrs) << 48,
        res1,
        u64::from(r.u32() & 0x1f) | u64::from(res2) << 32,
    ];
    buf[..3].copy_from_slice(&hdr);
    for (i, a) in attrs.iter().enumerate() {
        buf[3 + 2 * i] = u64::from(a.attr_id)
            | u64::from(a.len) << 16
            | u64::from(a.flags) << 32
            | u64::from(a.attr_data) << 48;
        buf[4 + 2 * i] = a.data;
    }
    let arg = if r.below(16) == 0 {
        hostile_addr(r, user)
    } else {
        buf.as_mut_ptr() as u64
    };
    let rc = libc::ioctl(fd, RDMA_VERBS_IOCTL, arg as usize as *mut libc::c_void);
    let e = if rc == 0 { 0 } else { errno() };
    let name = IOCTL_OBJECTS[(object as usize).min(IOCTL_OBJECTS.len() - 1)];
    let mut unclean = None;
    if rc == 0 {
        if matches!(object, 8..=15) || (object == 7 && matches!(method, 0 | 2 | 4)) {
            unclean = Some(format!(
                "ioctl object {object} method {method} succeeded (rrxe offers no such object)"
            ));
        }
        if post_wrs > 0 {
            unclean = Some(format!(
                "ioctl INVOKE_WRITE POST_SEND of {post_wrs} WRs was accepted"
            ));
        }
    }
    drop(payload);
    drop(ubuf);
    Rec {
        name,
        ok: rc == 0,
        err: e,
        unclean,
    }
}

/// An attribute of a well-formed command: id, length, data (inline value or handle), output.
type QAttr = (u16, u16, u64, bool);

/// A well-formed query through ioctl (QUERY_CONTEXT, QUERY_PORT, QUERY_GID_ENTRY, QUERY_MR of
/// a live MR) whose output attributes point at our buffer, or (half of the time) one of them at
/// kernel, non-canonical, NULL or random memory: that one must fail (EFAULT), never succeed.
unsafe fn raw_query(r: &mut Rng, c: &Ctx, p: &Pools, race: &[u32]) -> Rec {
    let fd = (*c.ctx).cmd_fd;
    let mut out = vec![0u64; 64];
    let user = out.as_mut_ptr() as u64;
    let mr_handle = pick(r, &p.mrs.iter().map(|m| m.mr).collect::<Vec<_>>())
        .map(|m| (*m).handle)
        .or_else(|| race.last().copied())
        .unwrap_or(0);
    // (object, method, [(attr id, len, data, is an output)])
    let (object, method, spec): (u16, u16, Vec<QAttr>) = match r.below(4) {
        0 => (0, 4, vec![(0, 4, 0, true), (1, 8, 0, true)]),
        1 => (0, 2, vec![(0, 1, 1, false), (1, 48, 0, true)]),
        2 => (
            0,
            6,
            vec![
                (0, 4, 1, false),
                (1, 4, r.below(3), false),
                (2, 4, 0, false),
                (3, 32, 0, true),
            ],
        ),
        _ => (
            7,
            3,
            vec![
                (0, 0, u64::from(mr_handle), false),
                (1, 4, 0, true),
                (2, 4, 0, true),
                (3, 8, 0, true),
                (4, 8, 0, true),
            ],
        ),
    };
    let outs = spec.iter().filter(|a| a.3).count() as u64;
    let bad = if r.coin() { Some(r.below(outs)) } else { None };
    let mut k = 0u64;
    let mut bad_addr = 0u64;
    let mut buf = vec![0u64; 3 + 2 * spec.len()];
    let n = spec.len() as u64;
    buf[0] = (24 + 16 * n) | u64::from(object) << 16 | u64::from(method) << 32 | n << 48;
    for (i, &(id, len, data, is_out)) in spec.iter().enumerate() {
        let data = if is_out {
            let a = if bad == Some(k) {
                bad_addr = loop {
                    let h = hostile_addr(r, user);
                    if h != user {
                        break h;
                    }
                };
                bad_addr
            } else {
                user + 64 * k
            };
            k += 1;
            a
        } else {
            data
        };
        buf[3 + 2 * i] = u64::from(id) | u64::from(len) << 16;
        buf[4 + 2 * i] = data;
    }
    let rc = libc::ioctl(fd, RDMA_VERBS_IOCTL, buf.as_mut_ptr());
    let e = if rc == 0 { 0 } else { errno() };
    let unclean = (rc == 0 && bad.is_some()).then(|| {
        format!(
            "ioctl query (object {object} method {method}) succeeded with an output at \
             {bad_addr:#x}"
        )
    });
    drop(out);
    Rec {
        name: if bad.is_some() {
            "ioctl_query_hostile_out"
        } else {
            "ioctl_query"
        },
        ok: rc == 0,
        err: e,
        unclean,
    }
}

/// A raw `write()` command on the command fd: POST_SEND with a WR list (hostile addresses,
/// counts and sizes, response to user, kernel or non-canonical memory), a command rrxe does not
/// offer (memory windows, XRC, extended flow/WQ commands), or a random command id with random
/// words and handles. Each must end in a clean errno, or in success for what a process may do.
unsafe fn raw_write(r: &mut Rng, c: &Ctx, p: &Pools, race: &[u32]) -> Rec {
    let fd = (*c.ctx).cmd_fd;
    let mut ubuf = vec![0u8; 512];
    let user = ubuf.as_mut_ptr() as u64;
    let mut post_wrs = 0;
    let (mut cmd, body) = match r.below(4) {
        0 | 1 => {
            let qp = race
                .first()
                .copied()
                .filter(|_| r.coin())
                .unwrap_or_else(|| some_handle(r, p, race));
            post_wrs = 1 + r.below(4) as u32;
            let resp = hostile_addr(r, user);
            (CMD_POST_SEND, post_send_cmd(r, qp, post_wrs, resp, user))
        }
        2 => {
            let mut b = vec![0u8; 8 * (1 + r.below(12) as usize)];
            r.fill(&mut b);
            b[..8].copy_from_slice(&hostile_addr(r, user).to_ne_bytes());
            let h = some_handle(r, p, race);
            if b.len() >= 12 {
                b[8..12].copy_from_slice(&h.to_ne_bytes());
            }
            let cmd = match r.below(3) {
                0 => CMD_ALLOC_MW,
                1 => CMD_OPEN_XRCD,
                _ => CMD_FLAG_EXTENDED | (EX_CMD_FIRST_UNSUPPORTED + r.below(7) as u32),
            };
            (cmd, b)
        }
        _ => {
            let mut b = vec![0u8; 4 * r.below(40) as usize];
            r.fill(&mut b);
            if b.len() >= 12 {
                b[..8].copy_from_slice(&hostile_addr(r, user).to_ne_bytes());
                b[8..12].copy_from_slice(&some_handle(r, p, race).to_ne_bytes());
            }
            (
                r.below(48) as u32
                    | if r.below(8) == 0 {
                        CMD_FLAG_EXTENDED
                    } else {
                        0
                    },
                b,
            )
        }
    };
    let mut msg = Vec::with_capacity(8 + 16 + body.len());
    let mut in_words = ((8 + body.len()) / 4) as u16;
    let out_words = if r.below(4) == 0 { r.u32() as u16 } else { 1 };
    if r.below(12) == 0 {
        in_words = r.u32() as u16;
    }
    if cmd & CMD_FLAG_EXTENDED != 0 {
        // struct ib_uverbs_ex_cmd_hdr: response, provider_in_words, provider_out_words,
        // cmd_hdr_reserved
        in_words = (body.len() / 8) as u16;
        msg.extend_from_slice(&cmd.to_ne_bytes());
        msg.extend_from_slice(&in_words.to_ne_bytes());
        msg.extend_from_slice(&out_words.to_ne_bytes());
        msg.extend_from_slice(&hostile_addr(r, user).to_ne_bytes());
        msg.extend_from_slice(&(r.below(4) as u16).to_ne_bytes());
        msg.extend_from_slice(&(r.below(4) as u16).to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
    } else {
        msg.extend_from_slice(&cmd.to_ne_bytes());
        msg.extend_from_slice(&in_words.to_ne_bytes());
        msg.extend_from_slice(&out_words.to_ne_bytes());
    }
    msg.extend_from_slice(&body);
    if r.below(16) == 0 {
        cmd = u32::MAX; // only for the statistics: a truncated message
        msg.truncate(r.below(msg.len() as u64) as usize);
    }
    let n = libc::write(fd, msg.as_ptr().cast(), msg.len());
    let ok = n >= 0;
    let e = if ok { 0 } else { errno() };
    let name = match cmd {
        CMD_POST_SEND => "write_post_send",
        CMD_ALLOC_MW | CMD_OPEN_XRCD => "write_unsupported",
        x if x & CMD_FLAG_EXTENDED != 0 && x != u32::MAX => "write_extended",
        u32::MAX => "write_truncated",
        _ => "write_random",
    };
    let mut unclean = None;
    if ok {
        if cmd == CMD_POST_SEND && post_wrs > 0 {
            unclean = Some(format!("write POST_SEND of {post_wrs} WRs was accepted"));
        }
        if name == "write_unsupported"
            || (name == "write_extended" && (cmd & !CMD_FLAG_EXTENDED) >= EX_CMD_FIRST_UNSUPPORTED)
        {
            unclean = Some(format!(
                "write command {cmd:#x} succeeded (rrxe offers no such object)"
            ));
        }
    }
    drop(ubuf);
    Rec {
        name,
        ok,
        err: e,
        unclean,
    }
}

// ---- Racing threads on objects of their own: posts, modify_qp, ring indices, destroy ----

/// A recorded outcome of one call, for callers that share statistics between threads.
struct Rec {
    name: &'static str,
    ok: bool,
    err: i32,
    unclean: Option<String>,
}

fn rec_into(st: &Mutex<Stats>, x: Rec) {
    let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
    s.rec(x.name, x.ok, x.err);
    if let Some(u) = x.unclean {
        if s.unclean.len() < 20 {
            s.unclean.push(u);
        }
    }
}

/// Objects the racing threads work on, never in the main thread's pools (so that no verb of
/// the main thread frees them under the racers): two RC QPs connected to each other and a UD
/// QP, one CQ, one MR over `buf`, one AH to our own GID. Pointers as `usize` so that the
/// threads can share them; they stay valid until the explicit teardown, which stops the
/// racers first (or until exit, which does not).
struct Race {
    pd: usize,
    cq: usize,
    qps: Vec<usize>,
    mr: usize,
    ah: usize,
    buf: Vec<u8>,
    /// The rings these objects added to the process (start, length): header at offset 0.
    maps: Vec<(usize, usize)>,
    /// uverbs handles of the QPs and the MR (for raw commands).
    handles: Vec<u32>,
}

unsafe fn race_setup(c: &Ctx, r: &mut Rng, st: &mut Stats) -> Option<Race> {
    let before = ring_maps();
    let pd = ibv_alloc_pd(c.ctx);
    if pd.is_null() {
        st.rec("race_setup", false, errno());
        return None;
    }
    let cq = ibv_create_cq(c.ctx, 256, null_mut(), null_mut(), 0);
    if cq.is_null() {
        st.rec("race_setup", false, errno());
        ibv_dealloc_pd(pd);
        return None;
    }
    let mut buf = vec![0u8; 64 << 10];
    let mr = ibv_reg_mr(
        pd,
        buf.as_mut_ptr().cast(),
        buf.len(),
        dp::ACCESS_ALL as i32,
    );
    let mut qps = Vec::new();
    for t in [IBV_QPT_RC, IBV_QPT_RC, IBV_QPT_UD] {
        let mut ia = ibv_qp_init_attr {
            send_cq: cq,
            recv_cq: cq,
            cap: ibv_qp_cap {
                max_send_wr: 32,
                max_recv_wr: 32,
                max_send_sge: 2,
                max_recv_sge: 2,
                max_inline_data: 64,
            },
            qp_type: t,
            sq_sig_all: r.coin() as i32,
            ..zeroed()
        };
        let qp = ibv_create_qp(pd, &mut ia);
        if !qp.is_null() {
            qps.push(qp);
        }
    }
    let mut a = ibv_ah_attr {
        is_global: 1,
        port_num: 1,
        ..zeroed()
    };
    a.grh.dgid.raw = c.gid;
    a.grh.sgid_index = c.gid_index;
    a.grh.hop_limit = 64;
    let ah = ibv_create_ah(pd, &mut a);
    let ok = qps.len() == 3 && !mr.is_null();
    st.rec("race_setup", ok, if ok { 0 } else { errno() });
    if qps.len() == 3 {
        let (a, b) = ((*qps[0]).qp_num, (*qps[1]).qp_num);
        let x = bring_up(qps[0], b, c, r);
        st.rec("race_modify_qp", x.0, x.1);
        let x = bring_up(qps[1], a, c, r);
        st.rec("race_modify_qp", x.0, x.1);
        let x = bring_up(qps[2], 0, c, r);
        st.rec("race_modify_qp", x.0, x.1);
    }
    let maps: Vec<(usize, usize)> = ring_maps()
        .into_iter()
        .filter(|m| !before.contains(m))
        .collect();
    let mut handles: Vec<u32> = qps.iter().map(|q| (**q).handle).collect();
    if !mr.is_null() {
        handles.push((*mr).handle);
    }
    Some(Race {
        pd: pd as usize,
        cq: cq as usize,
        qps: qps.into_iter().map(|q| q as usize).collect(),
        mr: mr as usize,
        ah: ah as usize,
        buf,
        maps,
        handles,
    })
}

/// The poster: valid and hostile sends (through the provider and as raw POST_SEND commands),
/// receives and polls on the racing QPs, while the other racers move their state and indices.
unsafe fn race_post(race: &Race, c: &Ctx, r: &mut Rng, st: &Mutex<Stats>) {
    let qp = race.qps[r.below(race.qps.len() as u64) as usize] as *mut ibv_qp;
    let mr = race.mr as *mut ibv_mr;
    let cq = race.cq as *mut ibv_cq;
    let base = race.buf.as_ptr() as u64;
    let (lkey, rkey) = if mr.is_null() {
        (0, 0)
    } else {
        ((*mr).lkey, (*mr).rkey)
    };
    match r.below(10) {
        0..=4 => {
            let mut sge = if r.below(4) == 0 {
                ibv_sge {
                    addr: hostile_addr(r, base),
                    length: r.below(4096) as u32,
                    lkey: r.u32(),
                }
            } else {
                ibv_sge {
                    addr: base + r.below(32 << 10),
                    length: r.below(4096) as u32,
                    lkey,
                }
            };
            let mut w = ibv_send_wr {
                wr_id: r.u64(),
                opcode: [
                    IBV_WR_SEND,
                    IBV_WR_RDMA_WRITE,
                    IBV_WR_RDMA_READ,
                    IBV_WR_SEND_WITH_IMM,
                ][r.below(4) as usize],
                send_flags: if r.coin() { IBV_SEND_SIGNALED } else { 0 }
                    | if r.below(4) == 0 { IBV_SEND_INLINE } else { 0 },
                num_sge: 1,
                sg_list: &mut sge,
                ..zeroed()
            };
            w.wr.rdma.remote_addr = base + r.below(32 << 10);
            w.wr.rdma.rkey = rkey;
            if (*qp).qp_type == IBV_QPT_UD {
                if race.ah == 0 {
                    return;
                }
                w.opcode = IBV_WR_SEND;
                w.wr.ud.ah = race.ah as *mut ibv_ah;
                w.wr.ud.remote_qpn = (*qp).qp_num;
                w.wr.ud.remote_qkey = 0x1234;
            }
            let mut bad = null_mut();
            let x = int_res(vt_post_send(qp, &mut w, &mut bad));
            rec_into(
                st,
                Rec {
                    name: "race_post_send",
                    ok: x.0,
                    err: x.1,
                    unclean: None,
                },
            );
        }
        5 | 6 => {
            let mut sge = ibv_sge {
                addr: base + (32 << 10) + r.below(16 << 10),
                length: 4096,
                lkey,
            };
            let mut w = ibv_recv_wr {
                wr_id: r.u64(),
                sg_list: &mut sge,
                num_sge: 1,
                ..zeroed()
            };
            let mut bad = null_mut();
            let x = int_res(vt_post_recv(qp, &mut w, &mut bad));
            rec_into(
                st,
                Rec {
                    name: "race_post_recv",
                    ok: x.0,
                    err: x.1,
                    unclean: None,
                },
            );
        }
        7 | 8 => {
            let mut wc = zeroed::<[ibv_wc; 16]>();
            let n = vt_poll_cq(cq, 16, wc.as_mut_ptr());
            rec_into(
                st,
                Rec {
                    name: "race_poll_cq",
                    ok: n >= 0,
                    err: if n >= 0 { 0 } else { -n },
                    unclean: None,
                },
            );
        }
        _ => {
            // The same QP's handle in a raw POST_SEND with a WR list: refused in every state.
            let h = (*qp).handle;
            rec_into(st, raw_write(r, c, &Pools::default(), &[h]));
        }
    }
}

/// The state mover: modify_qp on the racing QPs, to RTS (a full bring-up), ERR, RESET, INIT,
/// SQD or a random state, while the poster posts on them.
unsafe fn race_modify(race: &Race, c: &Ctx, r: &mut Rng, st: &Mutex<Stats>) {
    let i = r.below(race.qps.len() as u64) as usize;
    let qp = race.qps[i] as *mut ibv_qp;
    let peer = race.qps[if i == 0 { 1 } else { 0 }] as *mut ibv_qp;
    let x = match r.below(8) {
        0 | 1 => bring_up(qp, (*peer).qp_num, c, r),
        2 => {
            let mut a = ibv_qp_attr {
                qp_state: IBV_QPS_INIT,
                port_num: 1,
                qkey: 0x1234,
                ..zeroed()
            };
            let mask = IBV_QP_STATE
                | IBV_QP_PKEY_INDEX
                | IBV_QP_PORT
                | if (*qp).qp_type == IBV_QPT_UD {
                    IBV_QP_QKEY
                } else {
                    IBV_QP_ACCESS_FLAGS
                };
            int_res(ibv_modify_qp(qp, &mut a, mask as i32))
        }
        s => {
            let mut a = ibv_qp_attr {
                qp_state: match s {
                    3 | 4 => IBV_QPS_ERR,
                    5 => IBV_QPS_RESET,
                    6 => IBV_QPS_SQD,
                    _ => r.below(8) as u32,
                },
                ..zeroed()
            };
            int_res(ibv_modify_qp(qp, &mut a, IBV_QP_STATE as i32))
        }
    };
    rec_into(
        st,
        Rec {
            name: "race_modify_qp",
            ok: x.0,
            err: x.1,
            unclean: None,
        },
    );
}

/// The index mover: a producer or consumer index of one of the racing rings (SQ, RQ, CQ) set
/// to a value near or far from its current one.
unsafe fn race_index(race: &Race, r: &mut Rng, st: &Mutex<Stats>) {
    let Some((start, len)) = pick(r, &race.maps) else {
        return;
    };
    if len < 192 {
        return;
    }
    let off = if r.coin() { 0 } else { 64 };
    let p = (start + off) as *mut u32;
    // SAFETY: the racing objects' rings stay mapped until the racers are stopped (explicit
    // teardown) or the process exits.
    let cur = std::ptr::read_volatile(p);
    let v = match r.below(8) {
        0 => cur.wrapping_add(1),
        1 => cur.wrapping_sub(1),
        2 => cur.wrapping_add(1 << r.below(12)),
        3 => cur ^ 0x8000_0000,
        4 => 0,
        5 => u32::MAX,
        _ => r.u32(),
    };
    std::ptr::write_volatile(p, v);
    rec_into(
        st,
        Rec {
            name: "race_ring_index",
            ok: true,
            err: 0,
            unclean: None,
        },
    );
}

/// Destroys one racing QP (or the MR) from the kernel's side with a raw ioctl while the
/// racers still use it through the provider: the kernel object goes, the process's mappings
/// and the provider's state stay, and every later doorbell or post on it must fail cleanly.
unsafe fn race_destroy(race: &Race, c: &Ctx, r: &mut Rng) -> Rec {
    let fd = (*c.ctx).cmd_fd;
    let mut resp = [0u32; 4];
    let mr = r.below(4) == 0 && race.mr != 0;
    let (object, method, handle) = if mr {
        (7u64, 1u64, (*(race.mr as *mut ibv_mr)).handle)
    } else {
        let q = race.qps[r.below(race.qps.len() as u64) as usize] as *mut ibv_qp;
        (4u64, 1u64, (*q).handle)
    };
    let nattr: u64 = if mr { 1 } else { 2 };
    let mut buf = [0u64; 3 + 4];
    buf[0] = (24 + 16 * nattr) | object << 16 | method << 32 | nattr << 48;
    // attr 0: the handle (IDR, mandatory)
    buf[3] = u64::from(ATTR_F_MANDATORY) << 32;
    buf[4] = u64::from(handle);
    // attr 1 (QP): UVERBS_ATTR_DESTROY_QP_RESP, 4 bytes out
    buf[5] = 1 | 4 << 16 | u64::from(ATTR_F_MANDATORY) << 32;
    buf[6] = resp.as_mut_ptr() as u64;
    let rc = libc::ioctl(fd, RDMA_VERBS_IOCTL, buf.as_mut_ptr());
    Rec {
        name: if mr {
            "race_destroy_mr_under_traffic"
        } else {
            "race_destroy_qp_under_traffic"
        },
        ok: rc == 0,
        err: if rc == 0 { 0 } else { errno() },
        unclean: None,
    }
}

/// Explicit teardown of the racing objects (the racers are stopped): failures for objects the
/// kernel already destroyed are expected (clean errnos).
unsafe fn race_teardown(race: Race, st: &mut Stats) {
    for q in &race.qps {
        let x = int_res(ibv_destroy_qp(*q as *mut ibv_qp));
        st.rec("teardown_race_qp", x.0, x.1);
    }
    if race.ah != 0 {
        let x = int_res(ibv_destroy_ah(race.ah as *mut ibv_ah));
        st.rec("teardown_race_ah", x.0, x.1);
    }
    if race.mr != 0 {
        let x = int_res(ibv_dereg_mr(race.mr as *mut ibv_mr));
        st.rec("teardown_race_mr", x.0, x.1);
    }
    let x = int_res(ibv_destroy_cq(race.cq as *mut ibv_cq));
    st.rec("teardown_race_cq", x.0, x.1);
    let x = int_res(ibv_dealloc_pd(race.pd as *mut ibv_pd));
    st.rec("teardown_race_pd", x.0, x.1);
    drop(race.buf);
}

unsafe extern "C" {
    /// libibverbs' private `ibv_cmd_post_send`: the WR list goes into the uverbs command itself
    /// (the provider never does this: its WRs go through the SQ ring). Returns 0 or an errno.
    fn ibv_cmd_post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> i32;
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rrxe-fuzz-verbs: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "fuzz-verbs: seed {} ops {} segments of {} dev {}",
        o.seed, o.ops, o.segment, o.dev
    );
    let mut total: BTreeMap<String, (u64, u64, BTreeMap<i32, u64>)> = BTreeMap::new();
    let mut unclean = Vec::new();
    let (mut died, mut hung, mut exited, mut setup_fail) = (0u64, 0u64, 0u64, 0u64);
    let mut signals: BTreeMap<i32, u64> = BTreeMap::new();
    let t0 = Instant::now();
    let nseg = o.ops.div_ceil(o.segment.max(1));
    for seg in 0..nseg {
        let nops = o.segment.min(o.ops - seg * o.segment);
        let path = format!("/tmp/rrxe-fuzz-verbs.{}.{seg}", std::process::id());
        let mut f = match std::fs::File::create(&path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("fuzz-verbs: {path}: {e}");
                return ExitCode::FAILURE;
            }
        };
        // SAFETY: fork from a single-threaded parent that has not touched libibverbs.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let rc = child(&o, seg, nops, &mut f);
            let _ = f.flush();
            // SAFETY: leave without running the parent's atexit handlers twice.
            unsafe { libc::_exit(rc) };
        }
        drop(f);
        let start = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: our child.
            let w = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if w == pid {
                break;
            }
            if start.elapsed() > Duration::from_secs(o.seg_timeout) {
                hung += 1;
                println!(
                    "fuzz-verbs: segment {seg} (seed {}) still running after {} s: SIGKILL",
                    o.seed + seg,
                    o.seg_timeout
                );
                // SAFETY: our child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if libc::WIFSIGNALED(status) {
            let s = libc::WTERMSIG(status);
            if s != libc::SIGKILL {
                died += 1;
                *signals.entry(s).or_default() += 1;
            }
        } else if libc::WEXITSTATUS(status) == 3 {
            setup_fail += 1;
        } else {
            exited += 1;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        for l in text.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.first() {
                Some(&"verb") if w.len() == 5 => {
                    let e = total.entry(w[1].to_owned()).or_default();
                    e.0 += w[2].parse::<u64>().unwrap_or(0);
                    e.1 += w[3].parse::<u64>().unwrap_or(0);
                    for kv in w[4].split(',').filter(|s| *s != "-") {
                        if let Some((k, v)) = kv.split_once(':') {
                            *e.2.entry(k.parse().unwrap_or(-1)).or_default() +=
                                v.parse::<u64>().unwrap_or(0);
                        }
                    }
                }
                Some(&"unclean") => unclean.push(format!("segment {seg}: {}", &l[8..])),
                Some(&"setup") => println!("fuzz-verbs: segment {seg}: {l}"),
                _ => {}
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut calls = 0;
    println!(
        "fuzz-verbs: {:<26} {:>8} {:>8}  errnos",
        "verb", "calls", "ok"
    );
    for (v, (n, ok, errs)) in &total {
        calls += n;
        let e: Vec<String> = errs
            .iter()
            .map(|(k, c)| format!("{}x{c}", util::ename(*k)))
            .collect();
        println!("fuzz-verbs: {v:<26} {n:>8} {ok:>8}  {}", e.join(" "));
    }
    println!(
        "fuzz-verbs: {calls} calls in {secs:.1} s; {nseg} segments: {exited} exited, {died} died by a signal {:?} (the offending process itself), {hung} hung, {setup_fail} could not open the device",
        signals
    );
    let mut failed = 0;
    if unclean.is_empty() {
        println!("PASS fuzz_verbs.clean_errnos");
    } else {
        failed += 1;
        println!("FAIL fuzz_verbs.clean_errnos: {}", unclean.join("; "));
    }
    if hung == 0 {
        println!("PASS fuzz_verbs.no_hung_process");
    } else {
        failed += 1;
        println!(
            "FAIL fuzz_verbs.no_hung_process: {hung} segments hung (seed {})",
            o.seed
        );
    }
    if setup_fail == 0 && calls > 0 {
        println!("PASS fuzz_verbs.ran");
    } else {
        failed += 1;
        println!(
            "FAIL fuzz_verbs.ran: {setup_fail} segments could not open {}, {calls} calls",
            o.dev
        );
    }
    println!("{} passed, {failed} failed", 3 - failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
