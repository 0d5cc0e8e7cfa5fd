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
//! concurrently. Objects are destroyed in random order (EBUSY is fine), and at the end either
//! explicitly or by exit.
//!
//! Prints per verb: calls, successes, errnos seen; per segment whether the child exited or
//! died (and by which signal). Fails when a verb returned something other than 0 or a clean
//! errno (1..=133), or a child hung (each segment is bounded).

use rrxe_verbs_test::{dp, ffi, util};

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io::Write;
use std::process::ExitCode;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
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
    let mut p = Pools::default();
    for _ in 0..nops {
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
        unsafe { one_op(what, &mut r, &ctxs, &mut p, &mut st, &lock) };
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
    // Tear down: explicitly (reverse order) half of the time, else by exit.
    let explicit = r.coin();
    if explicit {
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
        36 | 37 => {
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
