//! Review leads that can be checked on the host: the receive flush of a QP in ERR against a
//! producer that keeps moving, and the id range the MR key-byte table must cover.

use rrxe_host_tests::logic::{
    idalloc, limits,
    qp_state::{QpState, QpType},
    transport::*,
};
use rrxe_host_tests::uapi::Cqe;

mod common;
use common::*;

/// An RQ whose user-writable producer is bumped again every time the kernel looks at it (a
/// second user thread posting as fast as the flush consumes): every take answers `Taken`.
/// `give_up` only stops an unbounded flush so that the test fails instead of hanging.
#[derive(Default)]
struct RacingRq {
    takes: u32,
    give_up: u32,
    flushed: u32,
}

impl Env for RacingRq {
    fn mem_check(&mut self, _: u32, _: u64, _: u64, _: Access) -> Result<(), MemError> {
        Err(MemError::BadKey)
    }
    fn mem_read(&mut self, _: u32, _: u64, _: &mut [u8], _: Access) -> Result<(), MemError> {
        Err(MemError::BadKey)
    }
    fn mem_write(&mut self, _: u32, _: u64, _: &[u8], _: Access) -> Result<(), MemError> {
        Err(MemError::BadKey)
    }
    fn mem_atomic(&mut self, _: u32, _: u64, _: AtomicOp) -> Result<u64, MemError> {
        Err(MemError::BadKey)
    }
    fn mem_flush(&mut self, _: u32, _: u64, _: u64, _: bool, _: u32) -> Result<(), MemError> {
        Err(MemError::BadKey)
    }
    fn emit(&mut self, _: &[u8], _: Dest) -> Emit {
        Emit::Sent
    }
    fn complete(&mut self, cq: CqSel, c: &Cqe, _: bool) -> bool {
        if cq == CqSel::Recv && c.status == wc_status::WR_FLUSH_ERR {
            self.flushed += 1;
        }
        true
    }
    fn event(&mut self, _: Event) {}
    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake {
        self.takes += 1;
        if self.takes > self.give_up {
            return RecvTake::Empty;
        }
        *out = RecvWr::default();
        out.wr_id = self.takes as u64;
        RecvTake::Taken
    }
    fn arm_rnr_timer(&mut self, _: u32) {}
    fn set_retry_timer(&mut self, _: Option<u64>) {}
    fn set_reack_timer(&mut self, _: Option<u32>) {}
    fn stat(&mut self, _: Stat, _: u64) {}
}

#[test]
fn rq_flush_in_err_is_bounded_by_one_ring() {
    let ring = limits::MAX_QP_WR;
    let mut env = RacingRq {
        give_up: 4 * ring,
        ..RacingRq::default()
    };
    let mut e = engine(cfg(QpType::Rc, 17, 18, 1024));
    // Entering ERR flushes: one pass may drain at most the largest ring.
    e.set_state(&mut env, QpState::Err, false);
    assert!(
        env.flushed <= ring,
        "one flush pass completed {} receive WRs (ring at most {ring})",
        env.flushed
    );
    assert!(env.takes <= ring + 1, "{} takes in one pass", env.takes);
    // Work posted in ERR is flushed by the next pass (the next doorbell), again bounded.
    let (f0, t0) = (env.flushed, env.takes);
    e.flush_if_err(&mut env);
    assert!(env.flushed > f0, "the next pass flushes what is left");
    assert!(env.flushed - f0 <= ring);
    assert!(env.takes - t0 <= ring + 1);
}

#[test]
fn rq_flush_in_err_drains_a_full_ring_in_one_pass() {
    // The bound must not leave WRs that were posted before the flush behind: a ring holds at
    // most MAX_QP_WR WRs (slots are max_recv_wr rounded up to a power of two).
    let ring = limits::MAX_QP_WR;
    assert!(ring.is_power_of_two());
    let mut env = RacingRq {
        give_up: ring,
        ..RacingRq::default()
    };
    let mut e = engine(cfg(QpType::Rc, 17, 18, 1024));
    e.set_state(&mut env, QpState::Err, false);
    assert_eq!(env.flushed, ring);
}

#[test]
fn mr_key_byte_table_must_cover_the_last_index() {
    // `RrxeDev` allocates MR indices from `IdAlloc::new(1)` over `MAX_MR.div_ceil(64)` words and
    // keeps each index's last key byte in a table indexed by the index itself: the highest
    // index handed out is `first + 64 * words - 1`, so the table needs `first + 64 * words`
    // entries, not `64 * words` (with only `64 * words`, the last index always got key byte 0).
    let first = 1u32;
    let words = limits::MAX_MR.div_ceil(64) as usize;
    let mut bits = vec![0u64; words];
    let mut a = idalloc::IdAlloc::new(first);
    let mut max = 0;
    while let Some(i) = a.alloc(&mut bits) {
        max = max.max(i);
    }
    assert_eq!(a.in_use() as usize, words * 64);
    assert_eq!(max as usize, first as usize + words * 64 - 1);
    assert!(
        (max as usize) >= words * 64,
        "the last index is past a 64*words table"
    );
    // And its key fits the 24-bit index field.
    assert_eq!(idalloc::key_index(idalloc::make_key(max, 0xab)), max);
}

/// A move to ERR (or SQE) that the data path made between a modify's validation and its
/// application sticks, unless the modify itself goes to RESET or ERR; with no move in between,
/// every validated modify applies.
#[test]
fn a_data_path_move_to_err_is_not_overwritten_by_a_racing_modify() {
    use QpState::*;
    // RTR -> RTS validated; the data path went to ERR meanwhile: ERR stays.
    assert!(!QpState::modify_applies(Rtr, Err, Rts));
    assert!(!QpState::modify_applies(Rts, Err, Rts));
    assert!(!QpState::modify_applies(Rts, Err, Sqd));
    assert!(!QpState::modify_applies(Rts, Sqe, Rts));
    // RESET and ERR are reachable from every state, so they still apply.
    assert!(QpState::modify_applies(Rts, Err, Reset));
    assert!(QpState::modify_applies(Rts, Err, Err));
    assert!(QpState::modify_applies(Rts, Sqe, Err));
    // No move in between: whatever was validated applies.
    for from in QpState::ALL {
        for to in QpState::ALL {
            assert!(
                QpState::modify_applies(from, from, to),
                "{from:?} -> {to:?}"
            );
        }
    }
}

/// Users may fill every object table only up to `user_max`: a reserve stays for kernel
/// consumers (ib_cm, rdma_cm, nvmet) on every limit.
#[test]
fn every_object_limit_keeps_a_reserve_for_kernel_consumers() {
    for max in [
        limits::MAX_QP,
        limits::MAX_CQ,
        limits::MAX_PD,
        limits::MAX_AH,
        limits::MAX_SRQ,
    ] {
        let user = limits::user_max(max);
        assert!(user < max, "{max}: no reserve");
        assert!(max - user >= 64, "{max}: reserve of {} only", max - user);
        assert!(
            user >= max - max / 32,
            "{max}: users lose too much ({user})"
        );
    }
}
