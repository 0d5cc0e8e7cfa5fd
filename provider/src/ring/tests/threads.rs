//! Concurrency: the provider side in several threads against a "kernel" thread.
//!
//! The send test's kernel thread follows the documented drain protocol exactly and only ever
//! starts draining because of a doorbell (never on a timer), so a lost doorbell leaves WQEs in
//! the ring for good and fails the test at its deadline.

use core::ffi::c_int;
use core::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rrxe_uapi::SQ_FLAG_KERNEL_BUSY;

use super::harness::*;
use crate::abi::{ibv_ah, ibv_recv_wr, ibv_send_wr, IBV_QPT_RC, IBV_WR_RDMA_WRITE, IBV_WR_SEND};
use crate::ring::{SendHooks, SqCaps};

const DEADLINE: Duration = Duration::from_secs(60);

/// A tiny deterministic generator (test inputs only).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Sets the flag when dropped (also while unwinding).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A reusable barrier that gives up (panics) at the deadline instead of hanging when a
/// thread died.
struct SpinBarrier {
    arrived: AtomicU64,
    n: u64,
}

impl SpinBarrier {
    fn new(n: u64) -> SpinBarrier {
        SpinBarrier {
            arrived: AtomicU64::new(0),
            n,
        }
    }

    fn wait(&self, begin: Instant) {
        // The k-th wait of every thread completes when n * k arrivals happened.
        let me = self.arrived.fetch_add(1, Ordering::SeqCst);
        let target = (me / self.n + 1) * self.n;
        while self.arrived.load(Ordering::SeqCst) < target {
            assert!(
                begin.elapsed() < DEADLINE,
                "a poster never reached the barrier"
            );
            thread::yield_now();
        }
    }
}

/// The doorbell: a counter the kernel thread sleeps on.
#[derive(Default)]
struct Bell {
    rung: Mutex<u64>,
    cv: Condvar,
}

struct BellHooks<'a> {
    bell: &'a Bell,
    calls: u32,
}

impl SendHooks for BellHooks<'_> {
    unsafe fn ah_num(&mut self, _: *mut ibv_ah) -> Option<u32> {
        None
    }

    fn doorbell(&mut self) -> c_int {
        self.calls += 1;
        *self.bell.rung.lock().unwrap() += 1;
        self.bell.cv.notify_one();
        0
    }
}

fn thread_spec(t: u64, seq: u64) -> SendSpec {
    let id = t << 32 | seq;
    let mut s = SendSpec::new(
        id,
        if seq.is_multiple_of(2) {
            IBV_WR_SEND
        } else {
            IBV_WR_RDMA_WRITE
        },
    );
    if seq.is_multiple_of(3) {
        s = s.inline(&[&id.to_le_bytes(), &seq.to_be_bytes()[..(seq % 8) as usize]]);
    } else {
        s.sges = vec![SgeSpec::plain(id, seq as u32, t as u32)];
    }
    s
}

/// `threads` posters each post `per_thread` WRs in random batches into a `slots`-slot SQ; the
/// kernel thread drains with the BUSY protocol. Returns the number of doorbells.
///
/// With `lockstep`, the posters post one batch each, then all wait until the kernel has
/// consumed everything posted so far, then start the next round together: every batch is
/// then "the last one" for a moment, so a doorbell lost in any round stalls that round (and
/// the next round's posts race with the kernel's clear/fence/re-check, right where the
/// protocol matters). Without it, posters run freely (more contention on a full ring).
fn run_sq(slots: u32, threads: u64, per_thread: u64, start: u32, lockstep: bool) -> u64 {
    let caps = SqCaps {
        qp_type: IBV_QPT_RC,
        max_sge: 1,
        max_inline: 16,
    };
    let (m, sq) = sq_ring(slots, caps, start);
    let bell = Bell::default();
    let stop = AtomicBool::new(false);
    let consumed = AtomicU64::new(0);
    let posted = AtomicU64::new(0);
    let barrier = SpinBarrier::new(threads);
    let begin = Instant::now();
    let (seen_by_kernel, doorbells, total) = thread::scope(|s| {
        // On any panic below, let the kernel thread exit so the scope can end.
        let _stop = StopOnDrop(&stop);
        let kernel = s.spawn(|| {
            let mut k = Kernel::consumer_of(&m);
            let mut got = Vec::new();
            let mut seen = 0u64;
            let mut rng = Lcg(7);
            loop {
                {
                    let mut g = bell.rung.lock().unwrap();
                    while *g == seen && !stop.load(Ordering::SeqCst) {
                        g = bell
                            .cv
                            .wait_timeout(g, Duration::from_millis(20))
                            .unwrap()
                            .0;
                    }
                    if *g == seen {
                        break; // stopped
                    }
                    seen = *g;
                }
                // K0: committed to a drain that ends with K1-K3.
                k.flags().store(SQ_FLAG_KERNEL_BUSY, Ordering::Relaxed);
                loop {
                    while let Some(w) = k.pop_send() {
                        got.push(w);
                        consumed.fetch_add(1, Ordering::SeqCst);
                    }
                    // Sometimes linger with the ring empty and BUSY still set (a preempted
                    // kernel): posts landing now skip their doorbell and must be found by
                    // the re-check below.
                    if rng.next(2) == 0 {
                        thread::yield_now();
                    }
                    // K1 clear, K2 full fence, K3 re-check.
                    k.flags().store(0, Ordering::Relaxed);
                    if rng.next(4) == 0 {
                        thread::yield_now(); // widen the window
                    }
                    fence(Ordering::SeqCst);
                    if k.producer().load(Ordering::Acquire) == k.idx {
                        break; // sleep
                    }
                    k.flags().store(SQ_FLAG_KERNEL_BUSY, Ordering::Relaxed);
                }
            }
            got
        });
        let posters: Vec<_> = (0..threads)
            .map(|t| {
                let (sq, bell, posted, consumed, barrier) =
                    (&sq, &bell, &posted, &consumed, &barrier);
                s.spawn(move || {
                    let mut rng = Lcg(t + 1);
                    let mut doorbells = 0u64;
                    let mut seq = 0;
                    let mut rounds = 0;
                    loop {
                        let n = 1 + rng.next(5);
                        let end = if lockstep {
                            seq + n
                        } else {
                            (seq + n).min(per_thread)
                        };
                        // Post seq..end, the rest again after an ENOMEM.
                        while seq < end {
                            let specs: Vec<_> = (seq..end).map(|i| thread_spec(t, i)).collect();
                            let l = SendList::new(&specs);
                            let mut h = BellHooks { bell, calls: 0 };
                            let mut bad: *mut ibv_send_wr = core::ptr::null_mut();
                            // SAFETY: a valid list; `bad` writable.
                            let rc = unsafe { sq.post_send(l.head(), &mut bad, &mut h) };
                            assert!(h.calls <= 1, "{} doorbells in one post_send", h.calls);
                            doorbells += u64::from(h.calls);
                            let ok = match rc {
                                0 => specs.len() as u64,
                                libc::ENOMEM => {
                                    assert!(
                                        begin.elapsed() < DEADLINE,
                                        "SQ stuck full: lost doorbell?"
                                    );
                                    thread::yield_now();
                                    l.index_of(bad).unwrap() as u64
                                }
                                e => panic!("post_send = {e}"),
                            };
                            seq += ok;
                            posted.fetch_add(ok, Ordering::SeqCst);
                        }
                        if lockstep {
                            barrier.wait(begin);
                            let target = posted.load(Ordering::SeqCst);
                            while consumed.load(Ordering::SeqCst) < target {
                                assert!(
                                    begin.elapsed() < DEADLINE,
                                    "lost doorbell: round stalled at {} of {target}",
                                    consumed.load(Ordering::SeqCst)
                                );
                                thread::yield_now();
                            }
                            barrier.wait(begin);
                            rounds += 1;
                            if rounds == per_thread {
                                break;
                            }
                        } else if seq == per_thread {
                            break;
                        }
                    }
                    doorbells
                })
            })
            .collect();
        let doorbells: u64 = posters.into_iter().map(|p| p.join().unwrap()).sum();
        let total = posted.load(Ordering::SeqCst);
        // Everything posted must be consumed without any further doorbell.
        while consumed.load(Ordering::SeqCst) < total {
            if begin.elapsed() > DEADLINE {
                stop.store(true, Ordering::SeqCst);
                panic!(
                    "lost doorbell: {} of {total} WQEs consumed, kernel asleep",
                    consumed.load(Ordering::SeqCst)
                );
            }
            thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::SeqCst);
        (kernel.join().unwrap(), doorbells, total)
    });
    assert_eq!(seen_by_kernel.len() as u64, total);
    let mut next = vec![0u64; threads as usize];
    for w in &seen_by_kernel {
        let (t, seq) = (w.hdr.wr_id >> 32, w.hdr.wr_id & 0xffff_ffff);
        assert_eq!(seq, next[t as usize], "thread {t} out of order");
        next[t as usize] += 1;
        assert_eq!(*w, oracle_wqe(&thread_spec(t, seq), IBV_QPT_RC));
    }
    doorbells
}

#[test]
fn sq_busy_protocol_never_loses_a_doorbell() {
    // `per_thread` counts rounds here.
    for (slots, start) in [(4, u32::MAX - 2), (64, 12345)] {
        let db = run_sq(slots, 3, 2000, start, true);
        assert!(db >= 1);
    }
}

#[test]
fn sq_free_running_posters_on_a_small_ring() {
    for (slots, start) in [(1, u32::MAX), (2, 0), (8, u32::MAX - 100)] {
        let db = run_sq(slots, 3, 3000, start, false);
        assert!(db >= 1);
    }
}

#[test]
fn cq_one_producer_two_pollers() {
    const N: u64 = 40_000;
    let (m, cq) = cq_ring(16, u32::MAX - 5);
    let taken = AtomicU64::new(0);
    let begin = Instant::now();
    let lists: Vec<Vec<u64>> = thread::scope(|s| {
        s.spawn(|| {
            let mut k = Kernel::producer_of(&m);
            for i in 0..N {
                while !k.push_cqe(&test_cqe(i)) {
                    assert!(begin.elapsed() < DEADLINE, "CQ never drained");
                    thread::yield_now();
                }
            }
        });
        let pollers: Vec<_> = (0..2u64)
            .map(|p| {
                let (cq, taken) = (&cq, &taken);
                s.spawn(move || {
                    let mut rng = Lcg(p + 100);
                    let mut ids = Vec::new();
                    while taken.load(Ordering::SeqCst) < N {
                        let got = poll(cq, 1 + rng.next(8) as usize).unwrap();
                        taken.fetch_add(got.len() as u64, Ordering::SeqCst);
                        for w in &got {
                            assert_eq!(wc_fields(w), cqe_fields(&test_cqe(w.wr_id)));
                            ids.push(w.wr_id);
                        }
                        if got.is_empty() {
                            assert!(begin.elapsed() < DEADLINE);
                            thread::yield_now();
                        }
                    }
                    ids
                })
            })
            .collect();
        pollers.into_iter().map(|p| p.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = Vec::new();
    for l in &lists {
        assert!(
            l.windows(2).all(|w| w[0] < w[1]),
            "a poller saw completions out of order"
        );
        all.extend(l);
    }
    all.sort_unstable();
    assert_eq!(all, (0..N).collect::<Vec<_>>());
}

#[test]
fn rq_three_posters_one_consumer() {
    const PER: u64 = 8000;
    let (m, rq) = rq_ring(8, 2, u32::MAX - 3);
    let done = AtomicU64::new(0);
    let begin = Instant::now();
    let got = thread::scope(|s| {
        let kernel = s.spawn(|| {
            let mut k = Kernel::consumer_of(&m);
            let mut got = Vec::new();
            while (got.len() as u64) < 3 * PER {
                match k.pop_recv() {
                    Some(w) => got.push(w),
                    None => {
                        assert!(begin.elapsed() < DEADLINE);
                        thread::yield_now();
                    }
                }
            }
            got
        });
        for t in 0..3u64 {
            let (rq, done) = (&rq, &done);
            s.spawn(move || {
                let mut rng = Lcg(t + 50);
                let mut seq = 0;
                while seq < PER {
                    let n = (1 + rng.next(4)).min(PER - seq);
                    let specs: Vec<_> = (seq..seq + n)
                        .map(|i| RecvSpec::new(t << 32 | i, (i % 3) as usize))
                        .collect();
                    let l = RecvList::new(&specs);
                    let mut bad: *mut ibv_recv_wr = core::ptr::null_mut();
                    // SAFETY: a valid list; `bad` writable.
                    match unsafe { rq.post_recv(l.head(), &mut bad) } {
                        0 => seq += n,
                        libc::ENOMEM => {
                            seq += l.index_of(bad).unwrap() as u64;
                            assert!(begin.elapsed() < DEADLINE, "RQ never drained");
                            thread::yield_now();
                        }
                        e => panic!("post_recv = {e}"),
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        kernel.join().unwrap()
    });
    assert_eq!(done.load(Ordering::SeqCst), 3);
    let mut next = [0u64; 3];
    for w in &got {
        let (t, seq) = (w.hdr.wr_id >> 32, w.hdr.wr_id & 0xffff_ffff);
        assert_eq!(seq, next[t as usize]);
        next[t as usize] += 1;
        let s = RecvSpec::new(w.hdr.wr_id, (seq % 3) as usize);
        assert_eq!(w.sges.len(), s.sges.len());
        for (g, &(addr, length, lkey)) in w.sges.iter().zip(&s.sges) {
            assert_eq!((g.addr, g.length, g.lkey), (addr, length, lkey));
        }
    }
}
