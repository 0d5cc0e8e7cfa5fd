//! Host tests of the CQ verbs over test rings: the `ibv_cq_ex` polling batch, its lock, and
//! `resize_cq` against concurrent polling (a test "kernel" that moves pending completions into
//! a new ring, as rrxe's `replace_ring` does).

use core::mem::MaybeUninit;
use core::ptr;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use rrxe_uapi::{Cqe, RING_HEADER_SIZE};

use crate::abi::{ibv_cq, ibv_cq_ex, ibv_poll_cq_attr, ibv_wc};
use crate::cq::{self, CqCore, Resize};
use crate::ring::tests::harness::{cq_ring, info, test_cqe, Kernel, TestMem};
use crate::ring::CqRing;

/// A test CQ (no kernel object) with the `ibv_cq_ex` callbacks, over `ring`.
fn ex_cq(ring: CqRing) -> *mut ibv_cq_ex {
    let cq = cq::test_cq(ptr::null_mut(), Some(ring));
    // SAFETY: a fresh CQ of ours.
    unsafe { cq::install_ex(cq.cast()) };
    cq.cast()
}

/// Calls through the `ibv_cq_ex` function pointers, as the `ibv_*` inlines do.
struct Ex(*mut ibv_cq_ex);

impl Ex {
    fn start(&self) -> i32 {
        let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
        // SAFETY: a CQ from `ex_cq`; `attr` is a live local.
        unsafe { ((*self.0).start_poll.unwrap())(self.0, &mut attr) }
    }
    fn next(&self) -> i32 {
        // SAFETY: inside a batch.
        unsafe { ((*self.0).next_poll.unwrap())(self.0) }
    }
    fn end(&self) {
        // SAFETY: inside a batch.
        unsafe { ((*self.0).end_poll.unwrap())(self.0) }
    }
    /// The current completion as the `read_*` callbacks and the `status`/`wr_id` fields give
    /// it, in `Cqe` form.
    fn current(&self) -> Cqe {
        let x = self.0;
        // SAFETY: inside a batch; every reader is set.
        unsafe {
            Cqe {
                wr_id: (*x).wr_id,
                status: (*x).status,
                opcode: ((*x).read_opcode.unwrap())(x),
                vendor_err: ((*x).read_vendor_err.unwrap())(x),
                byte_len: ((*x).read_byte_len.unwrap())(x),
                imm_data: ((*x).read_imm_data.unwrap())(x),
                qp_num: ((*x).read_qp_num.unwrap())(x),
                src_qp: ((*x).read_src_qp.unwrap())(x),
                wc_flags: ((*x).read_wc_flags.unwrap())(x),
                pkey_index: 0,
                slid: ((*x).read_slid.unwrap())(x) as u16,
                sl: ((*x).read_sl.unwrap())(x),
                dlid_path_bits: ((*x).read_dlid_path_bits.unwrap())(x),
                reserved: [0; 18],
            }
        }
    }
}

fn expect(c: Cqe) -> Cqe {
    Cqe {
        pkey_index: 0,
        reserved: [0; 18],
        ..c
    }
}

fn legacy_poll(cq: *mut ibv_cq, n: usize) -> Vec<u64> {
    let mut wc = vec![MaybeUninit::<ibv_wc>::uninit(); n];
    // SAFETY: room for `n` entries.
    let got = unsafe { cq::poll_cq(cq, n as i32, wc.as_mut_ptr().cast()) };
    assert!(got >= 0, "poll_cq = {got}");
    // SAFETY: `got` entries were written.
    wc[..got as usize]
        .iter()
        .map(|w| unsafe { w.assume_init() }.wr_id)
        .collect()
}

#[test]
fn ex_batch_reads_every_field_and_releases_at_end_poll() {
    let start = u32::MAX - 1; // indices wrap inside the batch
    let (m, ring) = cq_ring(8, start);
    let mut k = Kernel::producer_of(&m);
    let x = Ex(ex_cq(ring));
    assert_eq!(x.start(), libc::ENOENT, "empty CQ");
    for i in 10..13 {
        assert!(k.push_cqe(&test_cqe(i)));
    }
    assert_eq!(x.start(), 0);
    assert_eq!(x.current(), expect(test_cqe(10)));
    assert_eq!(x.next(), 0);
    assert_eq!(x.current(), expect(test_cqe(11)));
    assert_eq!(
        k.consumer().load(Ordering::SeqCst),
        start,
        "nothing released yet"
    );
    assert_eq!(x.next(), 0);
    assert_eq!(x.current(), expect(test_cqe(12)));
    assert_eq!(x.next(), libc::ENOENT);
    // A completion that arrives during the batch is seen by the next `next_poll`.
    assert!(k.push_cqe(&test_cqe(13)));
    assert_eq!(x.next(), 0);
    assert_eq!(x.current(), expect(test_cqe(13)));
    assert_eq!(x.next(), libc::ENOENT);
    x.end();
    assert_eq!(k.consumer().load(Ordering::SeqCst), start.wrapping_add(4));
    // The lock is free again: the legacy poll works and finds nothing.
    assert!(legacy_poll(x.0.cast(), 4).is_empty());
    assert_eq!(x.start(), libc::ENOENT);
    // Legacy and ex polling share one consumer.
    assert!(k.push_cqe(&test_cqe(20)));
    assert!(k.push_cqe(&test_cqe(21)));
    assert_eq!(legacy_poll(x.0.cast(), 1), vec![20]);
    assert_eq!(x.start(), 0);
    assert_eq!(x.current().wr_id, 21);
    x.end();
    // A non-zero attr comp_mask is refused without taking the lock.
    let mut attr = ibv_poll_cq_attr { comp_mask: 1 };
    // SAFETY: as in `Ex::start`.
    let ret = unsafe { ((*x.0).start_poll.unwrap())(x.0, &mut attr) };
    assert_eq!(ret, libc::EINVAL);
    assert!(legacy_poll(x.0.cast(), 4).is_empty());
    // A corrupt producer index: EIO, lock released.
    k.producer()
        .store(start.wrapping_add(100), Ordering::SeqCst);
    assert_eq!(x.start(), libc::EIO);
    // SAFETY: a CQ from `test_cq`, no longer used.
    unsafe { cq::free_cq(x.0.cast()) };
    drop(m);
}

#[test]
fn ex_batch_holds_the_cq_lock_until_end_poll() {
    let (m, ring) = cq_ring(4, 0);
    let mut k = Kernel::producer_of(&m);
    let x = Ex(ex_cq(ring));
    assert!(k.push_cqe(&test_cqe(1)));
    assert!(k.push_cqe(&test_cqe(2)));
    assert_eq!(x.start(), 0);
    let (tx, rx) = mpsc::channel();
    let addr = x.0 as usize;
    let t = std::thread::spawn(move || {
        tx.send(legacy_poll(addr as *mut ibv_cq, 4)).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "poll_cq ran inside an ibv_cq_ex batch"
    );
    x.end();
    // The batch consumed 1; the other thread then gets the 2nd.
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), vec![2]);
    t.join().unwrap();
    // SAFETY: no longer used.
    unsafe { cq::free_cq(x.0.cast()) };
    drop(m);
}

#[test]
fn resize_outcomes_keep_or_break_the_ring_visibly() {
    let (ma, ra) = cq_ring(4, 0);
    let mut ka = Kernel::producer_of(&ma);
    let core = CqCore::new(Some(ra));
    let mut out = vec![MaybeUninit::<ibv_wc>::uninit(); 4];
    assert!(ka.push_cqe(&test_cqe(1)));
    // The kernel refused: the old ring keeps working.
    assert_eq!(core.resize(|| Resize::Refused(libc::ENOMEM)), libc::ENOMEM);
    assert_eq!(core.poll(&mut out), Ok(Some(1)));
    // The kernel switched rings but ours could not be mapped: polls fail loudly.
    assert!(ka.push_cqe(&test_cqe(2)));
    assert_eq!(core.resize(|| Resize::Lost(libc::ENOMEM)), libc::ENOMEM);
    assert_eq!(core.poll(&mut out), Err(libc::ENOMEM));
    assert_eq!(core.start_poll(), libc::ENOMEM);
    assert_eq!(
        core.poll(&mut out),
        Err(libc::ENOMEM),
        "start_poll released the lock"
    );
    // A later successful resize recovers.
    let (mb, rb) = cq_ring(8, 0);
    let mut kb = Kernel::producer_of(&mb);
    assert!(kb.push_cqe(&test_cqe(3)));
    assert_eq!(core.resize(|| Resize::Mapped(Some(rb))), 0);
    assert_eq!(core.poll(&mut out), Ok(Some(1)));
    // SAFETY: written by `poll`.
    assert_eq!(unsafe { out[0].assume_init() }.wr_id, 3);
    // A kernel that stops announcing a ring for a ring-backed CQ is a protocol error.
    assert_eq!(core.resize(|| Resize::Mapped(None)), libc::EPROTO);
    assert_eq!(core.poll(&mut out), Err(libc::EPROTO));
    // A CQ that never had a ring stays kernel-polled.
    let k = CqCore::new(None);
    assert_eq!(k.resize(|| Resize::Mapped(None)), 0);
    assert_eq!(k.poll(&mut out), Ok(None));
    drop(core);
    drop((ma, mb));
}

/// The test kernel of the stress test: produces completions with consecutive `wr_id`s into
/// the current ring; a resize moves the pending ones into a fresh ring, reading the
/// provider's consumer index, exactly as rrxe's kernel does.
struct FakeKernel {
    k: Kernel,
    mem: Arc<TestMem>,
    slots: u32,
    next: u64,
}

impl FakeKernel {
    fn resize(&mut self, slots: u32, graveyard: &mut Vec<Arc<TestMem>>) -> CqRing {
        let cons = self.k.consumer().load(Ordering::Acquire);
        let pending = self.k.idx.wrapping_sub(cons);
        assert!(pending <= self.slots, "consumer index out of range");
        // Never smaller than what is pending (rrxe's kernel would drop the excess).
        let slots = slots.max(pending.next_power_of_two());
        let new = Arc::new(TestMem::ring(slots, 64, 0));
        for i in 0..pending {
            let from = cons.wrapping_add(i) & (self.slots - 1);
            let to = i;
            // SAFETY: both slots lie inside their rings; 64-byte CQEs.
            unsafe {
                ptr::copy_nonoverlapping(
                    self.mem.base().add(RING_HEADER_SIZE + from as usize * 64),
                    new.base().add(RING_HEADER_SIZE + to as usize * 64),
                    64,
                );
            }
        }
        let mut k = Kernel::attach(new.base());
        k.idx = pending;
        k.producer().store(pending, Ordering::Release);
        graveyard.push(core::mem::replace(&mut self.mem, new.clone()));
        self.k = k;
        self.slots = slots;
        // SAFETY: `new` is kept alive (in `self.mem`, later in the graveyard) for the test.
        unsafe { CqRing::from_raw(new.base(), new.len(), &info(slots, 64)) }.unwrap()
    }
}

#[test]
fn resize_never_races_poll_no_loss_no_duplicate() {
    const N: u64 = 20_000;
    let mem = Arc::new(TestMem::ring(8, 64, 0));
    // SAFETY: `mem` outlives the ring (kept in the fake kernel / graveyard).
    let ring = unsafe { CqRing::from_raw(mem.base(), mem.len(), &info(8, 64)) }.unwrap();
    let fk = Arc::new(Mutex::new(FakeKernel {
        k: Kernel::producer_of(&mem),
        mem,
        slots: 8,
        next: 0,
    }));
    let x = ex_cq(ring);
    let addr = x as usize;
    let seen = Arc::new(Mutex::new(Vec::<(usize, u64)>::new()));
    let got = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut threads = Vec::new();
    // Producer.
    {
        let fk = fk.clone();
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || loop {
            let mut g = fk.lock().unwrap();
            if g.next == N || stop.load(Ordering::SeqCst) {
                break;
            }
            let c = test_cqe(g.next);
            if g.k.push_cqe(&c) {
                g.next += 1;
            }
            drop(g);
            std::thread::yield_now();
        }));
    }
    // Pollers: one legacy, one through the ibv_cq_ex batch.
    for who in 0..2 {
        let (seen, got, stop) = (seen.clone(), got.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let cq = addr as *mut ibv_cq;
            let x = Ex(addr as *mut ibv_cq_ex);
            while got.load(Ordering::SeqCst) < N && !stop.load(Ordering::SeqCst) {
                let ids = if who == 0 {
                    legacy_poll(cq, 3)
                } else {
                    let mut ids = Vec::new();
                    let r = x.start();
                    if r == 0 {
                        ids.push(x.current().wr_id);
                        while ids.len() < 5 && x.next() == 0 {
                            ids.push(x.current().wr_id);
                        }
                        x.end();
                    } else {
                        assert_eq!(r, libc::ENOENT);
                    }
                    ids
                };
                got.fetch_add(ids.len() as u64, Ordering::SeqCst);
                seen.lock()
                    .unwrap()
                    .extend(ids.into_iter().map(|i| (who, i)));
                std::thread::yield_now();
            }
        }));
    }
    // Resizer (this thread).
    let mut graveyard = Vec::new();
    let mut resizes = 0u32;
    let core = {
        // SAFETY: `x` is a live CQ of ours.
        unsafe { &*(*x.cast::<cq::RrxeCq>()).core }
    };
    while got.load(Ordering::SeqCst) < N {
        assert!(
            Instant::now() < deadline,
            "stuck: {} of {N}",
            got.load(Ordering::SeqCst)
        );
        let slots = [8u32, 16, 32][(resizes % 3) as usize];
        let r = core.resize(|| {
            let mut g = fk.lock().unwrap();
            Resize::Mapped(Some(g.resize(slots, &mut graveyard)))
        });
        assert_eq!(r, 0);
        resizes += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as u64, N, "a completion was lost or duplicated");
    let ids: BTreeSet<u64> = seen.iter().map(|&(_, i)| i).collect();
    assert_eq!(ids.len() as u64, N, "duplicate completions");
    assert_eq!(ids.iter().next_back(), Some(&(N - 1)));
    // Each poller sees its completions in order.
    for who in 0..2 {
        let mine: Vec<u64> = seen.iter().filter(|s| s.0 == who).map(|s| s.1).collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "poller {who} out of order"
        );
    }
    assert!(resizes > 10, "only {resizes} resizes");
    // SAFETY: no thread uses the CQ any more.
    unsafe { cq::free_cq(x.cast()) };
    drop(graveyard);
}
