//! The responder's answers to duplicate READs: a replay budget per responder resource
//! (issue 25: a captured or spoofed duplicate must not make us resend a whole READ again and
//! again), and a new READ or atomic that takes the resource of an older READ whose duplicate
//! is still being replayed (issue 28: it used to be refused with NAK Invalid Request, and the
//! QP went to ERR).

use rrxe_host_tests::logic::{
    opcode::Operation,
    psn::Psn,
    qp_state::{QpState, QpType},
    transport::*,
    wire::{Packet, Syndrome},
};
use rrxe_host_tests::uapi::Sge;

mod common;
use common::*;

const MTU: u32 = 1024;
/// Response packets of the READs these tests record (16 KiB at a 1024-byte MTU).
const PKTS: u32 = 16;

fn info_from_a() -> RxInfo {
    RxInfo {
        grh: [0; GRH_LEN],
        src: GID_A,
        dst: GID_B,
    }
}

/// Hands a packet from A to B and lets B send at most `budget` owed packets (the shell's
/// pacing: a replay is not sent all at once).
fn to_b(p: &mut Pair, bytes: &[u8], budget: u32) {
    let pkt = Packet::parse(bytes).unwrap();
    p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &info_from_a());
    p.b.run_responder(&mut p.sb, &mut p.scratch, budget);
    p.b.flush_ack(&mut p.sb, &mut p.scratch);
}

/// The READ request `req` (as A sent it) asking again from its `k`-th response packet, as a
/// requester that received the first `k` re-reads it: PSN, address and length moved on.
fn reread_from(req: &[u8], k: u32) -> Vec<u8> {
    let mut b = req.to_vec();
    let psn = Packet::parse(req).unwrap().bth().psn.wrapping_add(k).get();
    b[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
    let reth = 12;
    let va = u64::from_be_bytes(b[reth..reth + 8].try_into().unwrap());
    let len = u32::from_be_bytes(b[reth + 12..reth + 16].try_into().unwrap());
    b[reth..reth + 8].copy_from_slice(&(va + u64::from(k * MTU)).to_be_bytes());
    b[reth + 12..reth + 16].copy_from_slice(&(len - k * MTU).to_be_bytes());
    b
}

/// B's packets since the last call: (operation, PSN, whether a NAK), drained.
fn from_b(p: &mut Pair) -> Vec<(Operation, u32, bool)> {
    p.sb.out
        .drain(..)
        .map(|(b, _)| {
            let pkt = Packet::parse(&b).unwrap();
            let nak = pkt
                .aeth()
                .is_some_and(|a| !matches!(Syndrome::decode(a.syndrome), Syndrome::Ack { .. }));
            (pkt.info().op, pkt.bth().psn.get(), nak)
        })
        .collect()
}

/// READ response packets B sent since the last call (drained).
fn responses_from_b(p: &mut Pair) -> usize {
    from_b(p)
        .iter()
        .filter(|(op, _, _)| *op == Operation::RdmaReadResponse)
        .count()
}

/// A pair whose A sent `reads` READs of `PKTS` packets each (at 0x1000_0000 + 64 KiB * i of
/// B); B answered them in full (the answers are dropped). Returns the requests as A sent them.
fn reads_answered(reads: u64) -> (Pair, Vec<Vec<u8>>) {
    let mut p = Pair::new(QpType::Rc, MTU);
    let reqs: Vec<Vec<u8>> = (0..reads).map(|i| read_request(&mut p, i)).collect();
    for r in &reqs {
        to_b(&mut p, r, 100_000);
    }
    assert_eq!(responses_from_b(&mut p), (PKTS as u64 * reads) as usize);
    (p, reqs)
}

// ---- issue 25: the replays of a READ are bounded ----

#[test]
fn a_captured_read_request_is_replayed_a_bounded_number_of_times() {
    // The same duplicate again and again (a captured request sent by someone else, or a
    // requester that retries without ever getting further): 8 replays, one more than a
    // requester's retry_cnt allows, then the duplicates are dropped.
    let (mut p, reqs) = reads_answered(1);
    let mut answered = Vec::new();
    for _ in 0..20 {
        to_b(&mut p, &reqs[0], 100_000);
        answered.push(responses_from_b(&mut p));
    }
    let mut want = vec![PKTS as usize; 8];
    want.resize(20, 0);
    assert_eq!(answered, want);
    assert_eq!(p.sb.stat(Stat::ReadReplays), 8);
    assert_eq!(p.sb.stat(Stat::ReadReplaysRefused), 12);
    assert_eq!(p.sb.stat(Stat::DuplicateRequests), 20);
    assert_eq!(p.b.counters.get(Stat::ReadReplaysRefused), 12);
    assert_eq!(p.b.state(), QpState::Rts);
    assert_eq!(p.sb.stat(Stat::ErrNaksSent), 0);
}

#[test]
fn a_duplicate_the_answer_in_progress_covers_spends_no_replay() {
    // A duplicate asking from a packet the replay under way has not sent yet changes nothing
    // (it is no replay, and does not count as one).
    let (mut p, reqs) = reads_answered(1);
    to_b(&mut p, &reqs[0], 4);
    assert_eq!(responses_from_b(&mut p), 4);
    for _ in 0..20 {
        to_b(&mut p, &reread_from(&reqs[0], 6), 0);
    }
    assert_eq!(p.sb.stat(Stat::ReadReplays), 1);
    p.b.run_responder(&mut p.sb, &mut p.scratch, 100_000);
    assert_eq!(responses_from_b(&mut p), PKTS as usize - 4);
    assert_eq!(p.sb.stat(Stat::ReadReplaysRefused), 0);
}

#[test]
fn a_requester_that_gets_further_is_answered_every_time() {
    // A requester that loses a response of each answer re-reads from further on each time:
    // every such re-read refills the budget, however many there are.
    let (mut p, reqs) = reads_answered(1);
    for k in 0..PKTS {
        // Twice from the same place (a lost answer, then progress).
        for _ in 0..2 {
            to_b(&mut p, &reread_from(&reqs[0], k), 100_000);
            assert_eq!(responses_from_b(&mut p), (PKTS - k) as usize, "from {k}");
        }
    }
    assert_eq!(p.sb.stat(Stat::ReadReplays), 2 * PKTS as u64);
    assert_eq!(p.sb.stat(Stat::ReadReplaysRefused), 0);
    // Stuck at the last packet from here on: 6 more replays (8 since the last progress).
    for _ in 0..10 {
        to_b(&mut p, &reread_from(&reqs[0], PKTS - 1), 100_000);
    }
    assert_eq!(p.sb.stat(Stat::ReadReplays), 2 * PKTS as u64 + 6);
    assert_eq!(p.sb.stat(Stat::ReadReplaysRefused), 4);
}

#[test]
fn alternating_duplicates_do_not_count_as_progress() {
    // Two captured re-reads of one READ sent in turn: the second one is "further" than the
    // first, but only once (the mark of how far the requester got never moves back).
    let (mut p, reqs) = reads_answered(1);
    let (a, b) = (reread_from(&reqs[0], 5), reread_from(&reqs[0], 6));
    let mut replayed = 0;
    for _ in 0..50 {
        for r in [&a, &b] {
            to_b(&mut p, r, 100_000);
            replayed += responses_from_b(&mut p);
        }
    }
    // 5 -> 6 is progress once: 8 replays from 6 on, 1 from 5 before it.
    assert_eq!(p.sb.stat(Stat::ReadReplays), 9);
    assert_eq!(p.sb.stat(Stat::ReadReplaysRefused), 100 - 9);
    assert!(replayed <= 9 * (PKTS as usize - 5), "{replayed}");
}

#[test]
fn a_younger_read_keeps_its_replays_while_an_older_one_gets_further() {
    // Go-back-N resends every READ after the one it goes back to: while the requester works
    // through a lossy older READ, the younger one is sent again each time without getting any
    // further itself. The older one's progress refills the younger one's budget.
    let (mut p, reqs) = reads_answered(2);
    for k in 0..PKTS {
        to_b(&mut p, &reread_from(&reqs[0], k), 100_000);
        to_b(&mut p, &reqs[1], 100_000);
        assert_eq!(
            responses_from_b(&mut p),
            (PKTS - k + PKTS) as usize,
            "round {k}"
        );
    }
    assert_eq!(p.sb.stat(Stat::ReadReplaysRefused), 0);
    assert_eq!(p.sb.stat(Stat::ReadReplays), 2 * PKTS as u64);
}

#[test]
fn a_lossy_wire_full_of_duplicates_still_completes_every_read() {
    // Reads behind reads over a wire that loses and duplicates: nothing is refused that a
    // requester needed (every WR completes, every byte arrives).
    for seed in 1..=12u64 {
        let mut p = Pair::new(QpType::Rc, 256).faulty(
            Faults {
                loss: 8,
                dup: 10,
                reorder: 5,
                corrupt: 0,
            },
            seed.wrapping_mul(0x9e37_79b9),
        );
        for i in 0..6u64 {
            let (w, sge) = read_wr(
                i + 1,
                0x1000_0000 + (i << 16),
                0x2000_0000 + (i << 16),
                8192,
            );
            p.post_send(w, &[sge], &[]);
        }
        p.run();
        let st = statuses(&p.sa);
        assert_eq!(
            st,
            (1..=6).map(|i| (i, 0)).collect::<Vec<_>>(),
            "seed {seed}"
        );
        for i in 0..6u64 {
            assert_eq!(
                bytes(&p.sa, 0x200, 0x2000_0000 + (i << 16), 8192),
                bytes(&p.sb, 0x100, 0x1000_0000 + (i << 16), 8192),
                "seed {seed}"
            );
        }
    }
}

// ---- issue 28: a new READ or atomic takes the resource of one being replayed ----

/// max_rd_atomic = max_dest_rd_atomic = 1. A sends a READ of `PKTS` packets; B answers it in
/// full, but the answers are late: A's timer fires first and re-reads (a probe), and B starts
/// a replay, paced (4 packets). Then the original answers reach A and complete the READ, and
/// A sends its next WR (`second`). Returns the pair, the replay packets B had sent, and the
/// packets of `second`, not yet delivered to B.
fn replay_under_way(second: impl FnOnce(&mut Pair)) -> (Pair, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut p = Pair::with(QpType::Rc, MTU, |c| {
        c.max_rd_atomic = 1;
        c.max_dest_rd_atomic = 1;
        c.timeout = 10;
    });
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, PKTS * MTU);
    p.post_send(w, &[sge], &[]);
    second(&mut p);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let req: Vec<_> = p.sa.out.drain(..).map(|(b, _)| b).collect();
    assert_eq!(req.len(), 1, "one READ outstanding at most");
    to_b(&mut p, &req[0], READ_BURST);
    let late: Vec<_> = p.sb.out.drain(..).map(|(b, _)| b).collect();
    assert_eq!(late.len(), PKTS as usize);
    // A hears nothing: its timer fires and it reads again.
    p.a.retry_timer_expired(&mut p.sa);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let probe: Vec<_> = p.sa.out.drain(..).map(|(b, _)| b).collect();
    assert_eq!(probe, req, "the timeout re-reads the READ in full");
    to_b(&mut p, &probe[0], 4);
    let replay: Vec<_> = p.sb.out.drain(..).map(|(b, _)| b).collect();
    assert_eq!(replay.len(), 4);
    assert!(p.b.responder_pending(), "the replay is under way");
    // The late answers complete the READ; A sends its next WR.
    for b in &late {
        p.deliver(b, false);
    }
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let next: Vec<_> = p.sa.out.drain(..).map(|(b, _)| b).collect();
    assert_eq!(next.len(), 1);
    (p, replay, next)
}

/// B's answer to `next` while the replay is under way: no NAK, the QP stays in RTS, and what
/// follows B's answer completes at A. Returns B's packets in answer to `next`.
fn answer_during_replay(
    p: &mut Pair,
    replay: Vec<Vec<u8>>,
    next: &[u8],
) -> Vec<(Operation, u32, bool)> {
    let next_psn = Packet::parse(next).unwrap().bth().psn;
    to_b(p, next, 4);
    let answer = from_b(p);
    assert!(
        answer.iter().all(|&(_, _, nak)| !nak),
        "B answered the new request with a NAK: {answer:x?}"
    );
    assert_eq!(p.b.state(), QpState::Rts);
    assert_eq!(p.sb.stat(Stat::ErrNaksSent), 0);
    // The evicted READ's replay stops: nothing more of it is sent, from now on.
    p.b.run_responder(&mut p.sb, &mut p.scratch, 100_000);
    let rest = from_b(p);
    let first = Psn::from_masked(0xff_fff0);
    assert!(
        rest.iter()
            .chain(&answer)
            .all(|&(_, psn, _)| !Psn::from_masked(psn).in_window(first, PKTS)),
        "the evicted READ's replay went on: {rest:x?}"
    );
    assert!(!answer.is_empty(), "the new request is answered");
    assert!(answer
        .iter()
        .all(|&(_, psn, _)| psn == next_psn.get() || Psn::from_masked(psn).after(next_psn)));
    // The replay's packets reach A late: stale, dropped; then everything completes.
    for b in &replay {
        p.deliver(b, false);
    }
    p.run();
    answer
}

#[test]
fn a_new_read_takes_the_resource_of_a_read_being_replayed() {
    let (mut p, replay, next) = replay_under_way(|p| {
        let (w, sge) = read_wr(2, 0x1001_0000, 0x2001_0000, 3000);
        p.post_send(w, &[sge], &[]);
    });
    assert_eq!(
        Packet::parse(&next[0]).unwrap().info().op,
        Operation::RdmaReadRequest
    );
    let answer = answer_during_replay(&mut p, replay, &next[0]);
    assert_eq!(
        answer[0].0,
        Operation::RdmaReadResponse,
        "the new READ is answered at once: {answer:x?}"
    );
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0)]);
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, (PKTS * MTU) as usize),
        bytes(&p.sb, 0x100, 0x1000_0000, (PKTS * MTU) as usize)
    );
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2001_0000, 3000),
        bytes(&p.sb, 0x100, 0x1001_0000, 3000)
    );
    assert_eq!(p.a.state(), QpState::Rts);
    assert_eq!(p.b.state(), QpState::Rts);
}

#[test]
fn a_new_atomic_takes_the_resource_of_a_read_being_replayed() {
    let (mut p, replay, next) = replay_under_way(|p| {
        let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 2, 1);
        a.remote_addr = 0x1003_0000;
        a.rkey = 0x100;
        a.compare_add = 5;
        p.post_send(
            a,
            &[Sge {
                addr: 0x2003_0000,
                length: 8,
                lkey: 0x200,
            }],
            &[],
        );
    });
    let before = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1003_0000, 8).try_into().unwrap());
    let answer = answer_during_replay(&mut p, replay, &next[0]);
    assert_eq!(answer[0].0, Operation::AtomicAcknowledge, "{answer:x?}");
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0)]);
    assert_eq!(p.sb.atomics_executed, 1);
    let after = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1003_0000, 8).try_into().unwrap());
    assert_eq!(after, before.wrapping_add(5));
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2003_0000, 8),
        before.to_ne_bytes().to_vec()
    );
    assert_eq!(p.b.state(), QpState::Rts);
}

#[test]
fn a_read_still_on_its_first_answer_is_not_evicted() {
    // A requester with more READs outstanding than B's max_dest_rd_atomic: the second READ
    // arrives while B still sends the first one's original answer (no duplicate was ever
    // seen). The requester cannot have finished with it: refused as before (NAK Invalid
    // Request), not answered by dropping the first READ's answer half-way.
    let mut p = Pair::with(QpType::Rc, MTU, |c| {
        c.max_rd_atomic = 2;
        c.max_dest_rd_atomic = 1;
    });
    for i in 0..2u64 {
        let (w, sge) = read_wr(
            i + 1,
            0x1000_0000 + (i << 16),
            0x2000_0000 + (i << 16),
            PKTS * MTU,
        );
        p.post_send(w, &[sge], &[]);
    }
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let reqs: Vec<_> = p.sa.out.drain(..).map(|(b, _)| b).collect();
    assert_eq!(reqs.len(), 2);
    to_b(&mut p, &reqs[0], 4);
    assert!(p.b.responder_pending());
    from_b(&mut p);
    to_b(&mut p, &reqs[1], 4);
    let out = from_b(&mut p);
    assert!(out.iter().any(|&(_, _, nak)| nak), "{out:x?}");
    assert_eq!(p.b.state(), QpState::Err);
}

// ---- what the budget charges: a requester asking again, not every READ a go-back resends ----

#[test]
fn a_go_back_sweep_is_charged_to_its_first_read_only() {
    // Go-back-N under reordering: the requester goes back to its oldest READ again and again,
    // and each time sends every younger READ again, in PSN order (it dropped their answers,
    // which came while an older READ was missing). Single-packet READs never ask "from further
    // on", so charging each READ of each sweep spent the youngest one's budget after eight
    // sweeps, and its answer, which the requester needs, was refused for good (the requester
    // waited out its retries: reliability-a's A.reorder and A.lossless "hang" of 2026-11-28).
    // Only the first READ of a sweep is charged.
    const N: usize = 12;
    let mut p = Pair::with(QpType::Rc, MTU, |c| {
        c.max_rd_atomic = 16;
        c.max_dest_rd_atomic = 16;
    });
    for i in 0..N as u64 {
        let (w, sge) = read_wr(i + 1, 0x1000_0000 + (i << 16), 0x2000_0000 + (i << 16), 512);
        p.post_send(w, &[sge], &[]);
    }
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let reqs: Vec<Vec<u8>> = p.sa.out.drain(..).map(|(b, _)| b).collect();
    assert_eq!(reqs.len(), N);
    for r in &reqs {
        to_b(&mut p, r, 100_000);
    }
    assert_eq!(responses_from_b(&mut p), N);
    // Sweep i goes back to READ i (the ones before it completed meanwhile) and sends the rest.
    for i in 0..N {
        for r in &reqs[i..] {
            to_b(&mut p, r, 100_000);
        }
        assert_eq!(responses_from_b(&mut p), N - i, "sweep {i}");
    }
    assert_eq!(p.sb.stat(Stat::ReadReplaysRefused), 0);
    assert_eq!(p.sb.stat(Stat::ReadReplays), (N * (N + 1) / 2) as u64);
    // The same sweep again and again without progress costs its first READ one replay each
    // time: after 8 (one was its own sweep's above), that READ is refused and the sweep breaks
    // there; the next READ starts a sweep of its own and pays for it.
    for _ in 0..7 {
        for r in &reqs[N - 3..] {
            to_b(&mut p, r, 100_000);
        }
        assert_eq!(responses_from_b(&mut p), 3);
    }
    for r in &reqs[N - 3..] {
        to_b(&mut p, r, 100_000);
    }
    assert_eq!(responses_from_b(&mut p), 2);
    assert_eq!(p.sb.stat(Stat::ReadReplaysRefused), 1);
    assert_eq!(p.b.state(), QpState::Rts);
}

#[test]
fn time_gives_replays_back() {
    // A requester that loses every answer asks again after each of its timeouts: the
    // budget is spent after 8 without progress, but every READ_REPLAY_REFILL_MS gives one
    // back, so a requester whose timeout is at least that long is answered every time; a
    // captured request gets one replay per period, never more than 8 at once.
    let (mut p, reqs) = reads_answered(1);
    for _ in 0..8 {
        to_b(&mut p, &reqs[0], 100_000);
        assert_eq!(responses_from_b(&mut p), PKTS as usize);
    }
    to_b(&mut p, &reqs[0], 100_000);
    assert_eq!(responses_from_b(&mut p), 0, "spent");
    // A requester at timeout 11 (8.4 ms): every ask after a timeout is answered.
    for round in 0..20 {
        p.sb.now_ms += READ_REPLAY_REFILL_MS;
        to_b(&mut p, &reqs[0], 100_000);
        assert_eq!(responses_from_b(&mut p), PKTS as usize, "round {round}");
        to_b(&mut p, &reqs[0], 100_000);
        assert_eq!(responses_from_b(&mut p), 0, "round {round}: one per period");
    }
    // A long quiet time refills the budget, to 8 at most.
    p.sb.now_ms += 1000 * READ_REPLAY_REFILL_MS;
    let mut answered = 0;
    for _ in 0..20 {
        to_b(&mut p, &reqs[0], 100_000);
        answered += responses_from_b(&mut p);
    }
    assert_eq!(answered, 8 * PKTS as usize);
    assert_eq!(p.b.state(), QpState::Rts);
}

// ---- issue 30: responder resources are allocated when a modify asks for them ----

/// A pair whose B has storage for `n` responder resources (B's `max_dest_rd_atomic` is 4).
fn pair_with_b_resources(n: usize) -> Pair {
    let mut p = Pair::new(QpType::Rc, MTU);
    p.sb = Side::default();
    p.b = engine_with_resources(cfg(QpType::Rc, 18, 17, MTU), n);
    Pair::connect(&mut p.b, &mut p.sb);
    p.sb.mr(
        0x100,
        0x1000_0000,
        4 << 20,
        access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
    );
    p
}

/// A's `i`-th READ request (of `PKTS` packets, from 0x1000_0000 + 64 KiB * i of B).
fn read_request(p: &mut Pair, i: u64) -> Vec<u8> {
    let (w, sge) = read_wr(
        i + 1,
        0x1000_0000 + (i << 16),
        0x2000_0000 + (i << 16),
        PKTS * MTU,
    );
    p.post_send(w, &[sge], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let mut reqs: Vec<Vec<u8>> = p.sa.out.drain(..).map(|(b, _)| b).collect();
    assert_eq!(reqs.len(), 1);
    reqs.remove(0)
}

#[test]
fn a_responder_with_no_resource_storage_refuses_reads() {
    // A QP is created with no storage (the shell allocates it when a modify sets
    // max_dest_rd_atomic): until then a READ finds no room, as with max_dest_rd_atomic 0.
    let mut p = pair_with_b_resources(0);
    assert_eq!(p.b.resource_storage(), 0);
    let r = read_request(&mut p, 0);
    to_b(&mut p, &r, 100_000);
    assert_eq!(
        from_b(&mut p),
        vec![(Operation::Acknowledge, r_psn(&r), true)]
    );
}

fn r_psn(req: &[u8]) -> u32 {
    Packet::parse(req).unwrap().bth().psn.get()
}

#[test]
fn growing_the_resource_storage_keeps_every_resource_in_use() {
    // Storage for 2 while max_dest_rd_atomic is 4: the third READ takes the first one's
    // resource, so the ring's oldest is at index 1. Grown to resources_for(4) = 4, the two
    // kept READs are still answered from their resources when duplicated, in their order,
    // and a fourth READ no longer evicts the second.
    let mut p = pair_with_b_resources(2);
    let reqs: Vec<Vec<u8>> = (0..3).map(|i| read_request(&mut p, i)).collect();
    for r in &reqs {
        to_b(&mut p, r, 100_000);
    }
    assert_eq!(responses_from_b(&mut p), 3 * PKTS as usize);
    assert_eq!(resources_for(4), 4);
    let old =
        p.b.grow_resources(vec![Resource::default(); resources_for(4)]);
    assert_eq!((old.len(), p.b.resource_storage()), (2, 4));
    // Not larger: the offered storage comes back and nothing changes.
    assert_eq!(p.b.grow_resources(vec![Resource::default(); 3]).len(), 3);
    assert_eq!(p.b.resource_storage(), 4);
    for r in &reqs[1..] {
        to_b(&mut p, r, 100_000);
        assert_eq!(responses_from_b(&mut p), PKTS as usize);
    }
    let fourth = read_request(&mut p, 3);
    to_b(&mut p, &fourth, 100_000);
    assert_eq!(responses_from_b(&mut p), PKTS as usize);
    to_b(&mut p, &reqs[1], 100_000);
    assert_eq!(
        responses_from_b(&mut p),
        PKTS as usize,
        "the second READ was evicted"
    );
    assert_eq!(p.sb.stat(Stat::ErrNaksSent), 0);
    assert_eq!(p.b.state(), QpState::Rts);
}

#[test]
fn resources_are_sized_as_rdma_rxe_sizes_them() {
    let want = [
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 4),
        (5, 8),
        (16, 16),
        (100, 128),
        (128, 128),
        (255, 128),
    ];
    for (n, r) in want {
        assert_eq!(resources_for(n), r, "max_dest_rd_atomic {n}");
    }
}
