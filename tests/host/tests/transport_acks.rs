//! The transport engine on the simulated wire (common/): what the responder acknowledges
//! (duplicates, re-acknowledgements, the solicited-event bit) and when the requester asks for
//! an ACK (every ACK_REQ_EVERY PSNs, polls for an unsignaled tail, SQD drains).

use rrxe_host_tests::logic::{
    opcode::Operation,
    qp_state::{QpState, QpType},
    transport::*,
    wire::Packet,
};
use rrxe_host_tests::uapi::{SendWqe, Sge};

mod common;
use common::*;
/// A duplicate SEND or WRITE is acknowledged again, but never with a PSN inside a READ or an
/// atomic: a READ's or atomic's own response acknowledges it, and rdma_rxe's completer takes a
/// plain ACK at a pending READ's or atomic's last PSN as that WR's completion (rxe_comp.c:
/// check_psn -> check_ack -> COMPST_WRITE_SEND -> COMPST_COMP_ACK), so a READ whose response
/// was lost completed IBV_WC_SUCCESS with nothing placed (seen as wrong bytes in reliability.sh
/// B.loss1, rxe0 reading from rrxe1).
#[test]
fn duplicate_write_is_never_acknowledged_inside_a_read_or_atomic() {
    // (ops after the WRITE, the responder's max_dest_rd_atomic, the PSN offset from the WRITE
    // that the re-ACK must carry)
    let cases: [(&[u32], u8, u32); 5] = [
        (&[wr_opcode::RDMA_READ], 4, 0),
        (
            &[wr_opcode::RDMA_READ, wr_opcode::ATOMIC_FETCH_AND_ADD],
            4,
            0,
        ),
        (
            &[wr_opcode::ATOMIC_FETCH_AND_ADD, wr_opcode::RDMA_READ],
            4,
            0,
        ),
        // READ (2 PSNs) then a WRITE: the WRITE's PSN is the highest one outside them.
        (&[wr_opcode::RDMA_READ, wr_opcode::RDMA_WRITE], 4, 3),
        // One resource: the second READ evicts the first, whose range is then unknown, so the
        // duplicate's own PSN is acknowledged.
        (&[wr_opcode::RDMA_READ, wr_opcode::RDMA_READ], 1, 0),
    ];
    for (after, depth, want) in cases {
        let mut p = Pair::with(QpType::Rc, 256, |c| {
            if c.qpn != 17 {
                c.max_dest_rd_atomic = depth;
            }
        });
        let remote = |op: u32, id: u64, at: u64| {
            let mut w = signaled(op, id, 1);
            w.remote_addr = at;
            w.rkey = 0x100;
            w
        };
        let write = |id: u64| remote(wr_opcode::RDMA_WRITE, id, 0x1000_1000);
        let src = Sge {
            addr: 0x1000_0000,
            length: 100,
            lkey: 0x100,
        };
        p.post_send(write(1), &[src], &[]);
        for (i, &op) in after.iter().enumerate() {
            let id = 2 + i as u64;
            match op {
                wr_opcode::RDMA_READ => {
                    let (w, sge) = read_wr(id, 0x1000_3000, 0x2000_0000, 512);
                    p.post_send(w, &[sge], &[]);
                }
                wr_opcode::ATOMIC_FETCH_AND_ADD => {
                    let mut a = remote(op, id, 0x1000_0008);
                    a.compare_add = 1;
                    let sge = Sge {
                        addr: 0x2000_1000,
                        length: 8,
                        lkey: 0x200,
                    };
                    p.post_send(a, &[sge], &[]);
                }
                _ => p.post_send(write(id), &[src], &[]),
            }
        }
        p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
        let reqs: Vec<Vec<u8>> = p.sa.out.drain(..).map(|(b, _)| b).collect();
        assert_eq!(reqs.len(), 1 + after.len());
        let info = RxInfo {
            grh: [0; GRH_LEN],
            src: GID_A,
            dst: GID_B,
        };
        for b in &reqs {
            p.b.rx(&mut p.sb, &mut p.scratch, &Packet::parse(b).unwrap(), &info);
            p.b.run_responder(&mut p.sb, &mut p.scratch, 100);
        }
        assert_eq!(p.b.state(), QpState::Rts, "{after:?}");
        p.sb.out.clear();
        // The first WRITE again (its ACK was lost, the requester went back to it).
        p.b.rx(
            &mut p.sb,
            &mut p.scratch,
            &Packet::parse(&reqs[0]).unwrap(),
            &info,
        );
        p.b.run_responder(&mut p.sb, &mut p.scratch, 100);
        assert_eq!(p.sb.out.len(), 1, "{after:?}");
        let ack = Packet::parse(&p.sb.out[0].0).unwrap();
        assert!(is_op(&ack, Operation::Acknowledge), "{after:?}");
        let first = Packet::parse(&reqs[0]).unwrap().bth().psn;
        assert_eq!(
            ack.bth().psn.distance_from(first),
            want,
            "{after:?}: re-ACK at the wrong PSN"
        );
    }
}

/// The ACKs B sent since the last call (drained), as PSNs.
fn acks_from_b(p: &mut Pair) -> Vec<u32> {
    p.sb.out
        .drain(..)
        .filter_map(|(b, _)| {
            let pkt = Packet::parse(&b).ok()?;
            is_op(&pkt, Operation::Acknowledge).then(|| pkt.bth().psn.get())
        })
        .collect()
}

#[test]
fn a_responder_acknowledges_again_when_a_retransmission_goes_quiet() {
    // rdma_rxe's completer takes an ACK that arrives while it is still resending the WR the ACK
    // covers as a partial ACK: it moves its expected PSN past the WR without completing it, and
    // with nothing unacknowledged its timer never fires again. The WR then waits for another
    // ACK that names it; if the answers to the retransmission are lost, none ever comes (docs/reliability.md,
    // "rdma_rxe strands a WR it has sent in full"). So when a retransmission has been answered
    // and the requester goes quiet, the responder sends the same ACK again: at most 4 times,
    // with growing waits (8, 32, 128, 512 ms).
    let mut p = Pair::new(QpType::Rc, 1024);
    post_writes(&mut p, 1, 3000);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let sent: Vec<_> = p.sa.out.drain(..).collect();
    assert_eq!(sent.len(), 3);
    let last = Packet::parse(&sent[2].0).unwrap().bth().psn.get();
    for (b, _) in &sent {
        p.deliver(b, true);
    }
    assert_eq!(
        acks_from_b(&mut p).last(),
        Some(&last),
        "the first answers (lost)"
    );
    assert_eq!(
        p.sb.reack_timer, None,
        "nothing to repeat without a retransmission"
    );
    // The requester retransmits everything; B answers each duplicate (all lost).
    for (b, _) in &sent {
        p.deliver(b, true);
    }
    assert_eq!(acks_from_b(&mut p), vec![last; 3]);
    assert_eq!(p.sb.stat(Stat::DuplicateRequests), 3);
    // The requester is quiet: the same ACK again, with growing waits, then nothing.
    let mut waits = Vec::new();
    while let Some(us) = p.sb.reack_timer.take() {
        waits.push(us);
        p.b.reack_timer_expired(&mut p.sb, &mut p.scratch);
        assert_eq!(acks_from_b(&mut p), vec![last]);
        assert!(waits.len() <= 4, "bounded");
    }
    assert_eq!(waits, vec![8_000, 32_000, 128_000, 512_000]);
    assert_eq!(p.sb.stat(Stat::ReAcks), 4);
    // A late expiry (the kernel timer raced a stop) sends nothing.
    p.b.reack_timer_expired(&mut p.sb, &mut p.scratch);
    assert!(p.sb.out.is_empty());
}

/// A pair where A posted `n` one-packet WRITEs and sent the first, which B received twice and
/// answered twice (the answers drained).
fn answered_duplicate(n: u64) -> Pair {
    let mut p = Pair::new(QpType::Rc, 1024);
    post_writes(&mut p, n, 512);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 1);
    let first: Vec<_> = p.sa.out.drain(..).collect();
    p.deliver(&first[0].0, true);
    p.deliver(&first[0].0, true);
    acks_from_b(&mut p);
    p
}

#[test]
fn a_new_request_ends_the_re_acknowledgements() {
    let mut p = answered_duplicate(2);
    assert_eq!(p.sb.reack_timer, Some(8_000), "armed by the duplicate");
    // The requester goes on with the next WR: the timer stops, and an expiry already under way
    // finds nothing to send.
    p.a.run_requester(&mut p.sa, &mut p.scratch, 1);
    let second: Vec<_> = p.sa.out.drain(..).collect();
    p.deliver(&second[0].0, true);
    assert_eq!(p.sb.reack_timer, None);
    acks_from_b(&mut p);
    p.b.reack_timer_expired(&mut p.sb, &mut p.scratch);
    assert!(p.sb.out.is_empty());
    assert_eq!(p.sb.stat(Stat::ReAcks), 0);
    // Both WRITEs complete.
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0)]);
}

#[test]
fn re_acknowledgements_end_when_the_qp_fails() {
    let mut p = answered_duplicate(1);
    assert!(p.sb.reack_timer.is_some());
    p.b.set_state(&mut p.sb, QpState::Err, false);
    p.sb.out.clear();
    p.b.reack_timer_expired(&mut p.sb, &mut p.scratch);
    assert!(p.sb.out.is_empty(), "a QP in ERR sends nothing");
}

#[test]
fn receive_completions_carry_the_solicited_event_bit() {
    // `ibv_req_notify_cq(cq, 1)` wakes for a receive of a message sent with IBV_SEND_SOLICITED
    // (the Solicited Event bit of its last packet) and for an unsuccessful completion, not for
    // other receives (IBTA 11.4.2.2). Multi-packet SENDs carry SE in their last packet only.
    for t in [QpType::Rc, QpType::Uc] {
        let mut p = Pair::new(t, 1024);
        for i in 0..5 {
            p.sb.rq
                .push_back(recv(10 + i, 0x2000_0000 + i * 8192, 4096, 0x200));
        }
        let sge = |len| Sge {
            addr: 0x1000_0000,
            length: len,
            lkey: 0x100,
        };
        let mut w = signaled(wr_opcode::SEND, 1, 1);
        w.send_flags |= send_flags::SOLICITED;
        p.post_send(w, &[sge(3000)], &[]);
        p.post_send(signaled(wr_opcode::SEND, 2, 1), &[sge(3000)], &[]);
        let mut w = signaled(wr_opcode::RDMA_WRITE_WITH_IMM, 3, 1);
        w.send_flags |= send_flags::SOLICITED;
        w.remote_addr = 0x1020_0000;
        w.rkey = 0x100;
        p.post_send(w, &[sge(100)], &[]);
        p.post_send(signaled(wr_opcode::SEND_WITH_IMM, 4, 1), &[sge(64)], &[]);
        // Longer than the receive buffer: LOC_LEN_ERR, unsolicited by the sender.
        p.post_send(signaled(wr_opcode::SEND, 5, 1), &[sge(5000)], &[]);
        p.run();
        let got: Vec<_> =
            p.sb.recv_cq
                .iter()
                .map(|c| (c.wr_id, c.status))
                .zip(p.sb.recv_solicited.iter().copied())
                .collect();
        assert_eq!(
            got[..4],
            [
                ((10, wc_status::SUCCESS), true),
                ((11, wc_status::SUCCESS), false),
                ((12, wc_status::SUCCESS), true),
                ((13, wc_status::SUCCESS), false),
            ],
            "{t:?}"
        );
        assert_eq!(got[4], ((14, wc_status::LOC_LEN_ERR), true), "{t:?}");
        // Send completions: only the unsuccessful ones are solicited.
        for (c, s) in p.sa.send_cq.iter().zip(&p.sa.send_solicited) {
            assert_eq!(*s, c.status != wc_status::SUCCESS, "{t:?} {c:?}");
        }
    }
}

// ---- ACK requests (performance issue): an unsignaled stream asks every ACK_REQ_EVERY PSNs ----

fn small_send(wr_id: u64, signaled: bool) -> (SendWqe, Sge) {
    let w = SendWqe {
        wr_id,
        opcode: wr_opcode::SEND,
        send_flags: if signaled { send_flags::SIGNALED } else { 0 },
        num_sge: 1,
        ..SendWqe::default()
    };
    let sge = Sge {
        addr: 0x1000_0000 + wr_id * 64,
        length: 64,
        lkey: 0x100,
    };
    (w, sge)
}

/// Posts `n` unsignaled one-packet SENDs from A, with a receive for each at B.
fn post_unsignaled(p: &mut Pair, n: u64) {
    for i in 0..n {
        p.sb.rq.push_back(recv(i, 0x2000_0000 + i * 64, 64, 0x200));
        let (w, sge) = small_send(i, false);
        p.post_send(w, &[sge], &[]);
    }
}

/// Drops the `nth` (1-based) transmission of PSN `psn` from A.
fn drop_send_of(p: &mut Pair, psn: u32, nth: u32) {
    let mut seen = 0;
    p.drop_if = Some(Box::new(move |pkt, from_a| {
        if from_a && pkt.bth().psn.get() == psn {
            seen += 1;
            return seen == nth;
        }
        false
    }));
}

/// Counts the ACKs B sends (nothing dropped).
fn count_acks(p: &mut Pair) -> std::rc::Rc<std::cell::Cell<u32>> {
    let n = std::rc::Rc::new(std::cell::Cell::new(0));
    let m = n.clone();
    p.drop_if = Some(Box::new(move |pkt, from_a| {
        if !from_a && is_op(pkt, Operation::Acknowledge) {
            m.set(m.get() + 1);
        }
        false
    }));
    n
}

/// 47 unsignaled one-packet SENDs and a signaled one: the requester asks for an ACK at every
/// 16th PSN and at the signaled end, so B answers 48 messages with 4 ACKs (it sent one per
/// message when every message end asked), and nothing is sent twice.
#[test]
fn an_unsignaled_stream_asks_for_an_ack_every_16_packets() {
    let mut p = Pair::new(QpType::Rc, 1024);
    for i in 0..48 {
        p.sb.rq.push_back(recv(i, 0x2000_0000 + i * 64, 64, 0x200));
    }
    let acks = count_acks(&mut p);
    for i in 0..48 {
        let (w, sge) = small_send(i, i == 47);
        p.post_send(w, &[sge], &[]);
    }
    p.run();
    assert_eq!(statuses(&p.sa), vec![(47, 0)]);
    assert_eq!(p.sb.recv_cq.len(), 48);
    assert_eq!(p.sa.sq_released, 48);
    assert_eq!(acks.get(), 4, "ACKs for 48 messages");
    for s in [Stat::Retransmits, Stat::Timeouts, Stat::AckPolls] {
        assert_eq!(p.sa.stat(s), 0, "{s:?}");
    }
}

/// A tail of unsignaled SENDs that never asked for an ACK is not a loss: the timer, armed for
/// ACK_POLL_US instead of the retransmit timeout, sends the newest packet again asking for an
/// ACK. No retry is spent (with retry_cnt 0 a timeout would fail the QP), nothing counts as a
/// retransmit, the SQ slots are released, and B takes the poll as the duplicate it is.
#[test]
fn an_unsignaled_tail_is_polled_for_its_ack_without_a_retry() {
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.retry_cnt = 0);
    let acks = count_acks(&mut p);
    post_unsignaled(&mut p, 3);
    // PSN 0xfffff0 (a multiple of 16) asks; 0xfffff1 and 0xfffff2 do not.
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    assert_eq!(
        p.sa.retry_timer,
        Some(67_108),
        "an asked PSN is outstanding"
    );
    p.carry_out();
    assert_eq!(acks.get(), 1);
    assert_eq!(
        p.sa.retry_timer,
        Some(ACK_POLL_US),
        "only the unasked tail is outstanding"
    );
    p.run();
    assert_eq!(p.a.state(), QpState::Rts);
    assert!(p.sa.send_cq.is_empty(), "unsignaled WRs complete silently");
    assert_eq!(p.sa.sq_released, 3);
    assert_eq!(
        p.sb.recv_cq.len(),
        3,
        "the poll is a duplicate, not a message"
    );
    assert_eq!(p.sa.stat(Stat::AckPolls), 1);
    assert_eq!(p.sa.stat(Stat::Retransmits), 0);
    assert_eq!(p.sa.stat(Stat::Timeouts), 0);
    assert_eq!(p.sb.stat(Stat::DuplicateRequests), 1);
    // The first SEND's ACK, the poll's, and B's re-acknowledgements of the duplicate.
    assert!(acks.get() >= 2, "{}", acks.get());
}

/// A requester held back in mid-stream (its budget spent: in the shell, a full loopback queue
/// or a congested path) with an unasked tail outstanding is not at a tail: its next packets
/// ask. The timer runs for the retransmit timeout, not for a poll: a poll resent while the
/// packets before it were still being delivered on another CPU overtook them, and B took it
/// for a gap (CI: 720 out-of-sequence requests, 23 sequence NAKs and 1,020 retransmissions in
/// 32 loopback 1 MiB WRITEs).
#[test]
fn a_requester_held_back_in_mid_stream_is_not_polled() {
    let mut p = Pair::new(QpType::Rc, 1024);
    post_unsignaled(&mut p, 5);
    // PSN 0xfffff0 asks; 0xfffff1 and 0xfffff2 do not, and 0xfffff3.. wait for the budget.
    assert_eq!(p.a.run_requester(&mut p.sa, &mut p.scratch, 3), 3);
    p.carry_out();
    assert_eq!(
        p.sa.retry_timer,
        Some(67_108),
        "more can be sent: not an unasked tail"
    );
    // The rest goes out: now the two packets and the last three are a tail.
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    assert_eq!(p.sa.retry_timer, Some(ACK_POLL_US));
    p.run();
    assert_eq!(p.sa.sq_released, 5);
    assert_eq!(p.sb.recv_cq.len(), 5);
    assert_eq!(p.sa.stat(Stat::AckPolls), 1);
    for s in [Stat::Retransmits, Stat::Timeouts] {
        assert_eq!(p.sa.stat(s), 0, "{s:?}");
    }
}

/// A timer armed for a poll that expires after more WRs were posted (and before the shell ran
/// the requester) neither polls nor counts a timeout: it runs again for the full timeout.
#[test]
fn a_poll_timer_finding_new_work_waits_a_full_timeout() {
    let mut p = Pair::new(QpType::Rc, 1024);
    post_unsignaled(&mut p, 3);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    p.carry_out();
    assert_eq!(p.sa.retry_timer, Some(ACK_POLL_US));
    post_unsignaled(&mut p, 2);
    p.sa.retry_timer = None;
    p.a.retry_timer_expired(&mut p.sa);
    assert_eq!(p.sa.retry_timer, Some(67_108));
    assert!(p.take_out(true).is_empty(), "nothing sent again");
    for s in [Stat::AckPolls, Stat::Timeouts, Stat::Retransmits] {
        assert_eq!(p.sa.stat(s), 0, "{s:?}");
    }
    p.run();
    assert_eq!(p.sa.sq_released, 5);
    assert_eq!(p.sb.recv_cq.len(), 5);
}

/// A poll for an unasked tail waits while packets are still on their way inside the host
/// (the shell: another CPU, its vCPU stalled, is still delivering loopback packets): sent then,
/// it would overtake the tail, B would take it for a gap and NAK, and A would go back N. Once
/// the tail has arrived, the poll goes, and nothing is sent twice but the poll.
#[test]
fn an_ack_poll_waits_for_packets_still_in_transit() {
    let mut p = Pair::new(QpType::Rc, 1024);
    post_unsignaled(&mut p, 3);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let mut on_the_way = p.take_out(true);
    assert_eq!(on_the_way.len(), 3);
    // The first packet asks, and its ACK comes back; the tail has not reached B yet when the
    // poll timer fires.
    p.carry(on_the_way.remove(0), true);
    p.carry_out();
    assert_eq!(p.sa.retry_timer, Some(ACK_POLL_US));
    p.sa.in_transit = true;
    p.sa.retry_timer = None;
    p.a.retry_timer_expired(&mut p.sa);
    assert_eq!(p.sa.transit_asks, 1);
    assert_eq!(p.sa.retry_timer, Some(ACK_POLL_US), "another poll interval");
    assert!(p.take_out(true).is_empty(), "no poll overtakes the tail");
    for b in on_the_way {
        p.carry(b, true);
    }
    p.sa.in_transit = false;
    p.run();
    assert_eq!(p.sa.sq_released, 3);
    assert_eq!(p.sb.recv_cq.len(), 3);
    assert_eq!(p.sa.stat(Stat::AckPolls), 1);
    for s in [Stat::Retransmits, Stat::Timeouts, Stat::SeqNaksRcvd] {
        assert_eq!(p.sa.stat(s), 0, "{s:?}");
    }
    assert_eq!(p.sb.stat(Stat::OutOfSeqRequests), 0);
}

/// Packets in transit put a poll off a bounded number of times (on a busy device they need not
/// be ours): then it goes, and the tail is acknowledged without a timeout.
#[test]
fn packets_in_transit_put_a_poll_off_a_few_times_only() {
    let mut p = Pair::new(QpType::Rc, 1024);
    post_unsignaled(&mut p, 3);
    p.sa.in_transit = true;
    p.run();
    assert_eq!(p.sa.sq_released, 3);
    assert_eq!(p.sa.stat(Stat::AckPolls), 1);
    assert_eq!(p.sa.stat(Stat::Timeouts), 0);
    assert_eq!(p.sa.transit_asks, 4, "four waits, then the poll");
    // Progress starts the count over: the next tail waits as long again.
    post_unsignaled(&mut p, 3);
    p.run();
    assert_eq!(p.sa.sq_released, 6);
    assert_eq!(p.sa.stat(Stat::AckPolls), 2);
    assert_eq!(p.sa.transit_asks, 8);
}

/// The poll asks: when it is lost too, the next expiry is a timeout, and go-back-N recovers.
#[test]
fn a_lost_ack_poll_makes_the_next_expiry_a_timeout() {
    let mut p = Pair::new(QpType::Rc, 1024);
    post_unsignaled(&mut p, 3);
    drop_send_of(&mut p, 0xff_fff2, 2);
    p.run();
    assert_eq!(p.a.state(), QpState::Rts);
    assert_eq!(p.sa.sq_released, 3);
    assert_eq!(p.sb.recv_cq.len(), 3);
    assert_eq!(p.sa.stat(Stat::AckPolls), 1);
    assert!(p.sa.stat(Stat::Timeouts) >= 1);
}

/// SQD waits for the unsignaled tail's ACK; the poll gets it, even though SQD starts no WR.
#[test]
fn sqd_drains_an_unsignaled_tail_through_a_poll() {
    let mut p = Pair::new(QpType::Rc, 1024);
    post_unsignaled(&mut p, 3);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    p.a.set_state(&mut p.sa, QpState::Sqd, true);
    assert!(p.a.sq_draining());
    assert!(!p.sa.events.contains(&Event::SqDrained));
    p.run();
    assert!(p.sa.events.contains(&Event::SqDrained));
    assert!(!p.a.sq_draining());
    assert_eq!(p.sa.sq_released, 3);
    assert_eq!(p.sa.stat(Stat::AckPolls), 1);
    assert_eq!(p.sa.stat(Stat::Timeouts), 0);
}

/// Without a retransmit timer (timeout 0) nothing could poll later: every message end asks.
#[test]
fn without_a_timer_every_message_end_asks() {
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 0);
    let acks = count_acks(&mut p);
    post_unsignaled(&mut p, 8);
    p.run();
    assert_eq!(p.sa.sq_released, 8);
    assert_eq!(acks.get(), 8);
    assert_eq!(p.sa.stat(Stat::AckPolls), 0);
}

/// A READ asks for all its responses: while some are outstanding the timer runs for the
/// retransmit timeout, not for an ACK poll, and a slow answer is not polled for (a poll would
/// re-read what is on its way).
#[test]
fn a_read_with_responses_outstanding_is_not_an_unasked_tail() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 4096);
    p.post_send(w, &[sge], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    for b in p.take_out(true) {
        p.carry(b, true);
    }
    let resp = p.take_out(false);
    assert_eq!(resp.len(), 4);
    // Only the first response arrives for now.
    p.carry(resp[0].clone(), false);
    assert_eq!(
        p.sa.retry_timer,
        Some(67_108),
        "the READ's other responses are asked for"
    );
    for b in resp[1..].iter().cloned() {
        p.carry(b, false);
    }
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(p.sa.stat(Stat::AckPolls), 0);
    assert_eq!(p.sb.stat(Stat::DuplicateRequests), 0);
}

/// SQD starts no new WR, but one already started is sent again when a timeout goes back to it
/// (here at its first packet, where the old rule, "nothing at a WR boundary in SQD", stranded
/// it until the retries ran out), and the drain then completes.
#[test]
fn sqd_resends_a_started_wr_after_a_timeout() {
    let mut p = Pair::new(QpType::Rc, 1024);
    for i in 0..2 {
        p.sb.rq.push_back(recv(i, 0x2000_0000 + i * 64, 64, 0x200));
        let (w, sge) = small_send(i, true);
        p.post_send(w, &[sge], &[]);
    }
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    p.a.set_state(&mut p.sa, QpState::Sqd, true);
    drop_send_of(&mut p, 0xff_fff1, 1);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0)]);
    assert_eq!(p.sb.recv_cq.len(), 2);
    assert!(p.sa.stat(Stat::Timeouts) >= 1);
    assert!(p.sa.events.contains(&Event::SqDrained));
}
