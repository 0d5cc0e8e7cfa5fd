//! Issue 28: go-back-N that keeps its speed under loss. A sequence NAK resends at once, once
//! per episode, and only the halved window; the window grows back (slow start, then congestion
//! avoidance); a round-trip estimate (RFC 6298, Karn) fires the retransmit timer sooner than
//! the QP's IBTA `timeout`, which alone still spends `retry_cnt`; the responder's resources are
//! searched from an index, not scanned whole per packet.

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

fn psn_of(b: &[u8]) -> Psn {
    Packet::parse(b).unwrap().bth().psn
}

#[test]
fn a_sequence_nak_resends_at_once_only_the_halved_window_and_once_per_episode() {
    // 200 packets in flight, the fourth lost. B NAKs the gap once; A goes back at once
    // (no timer), with the window halved from the 197 packets in flight past the 3 the NAK
    // acknowledges: it resends 98 packets, not the 197 it had sent from the gap on (before
    // issue 28: the whole window, up to 512). B is a go-back-N responder (rdma_rxe), known
    // to be one.
    let mut p = Pair::new(QpType::Rc, 256);
    p.b.set_place_ahead(false);
    p.a.set_peer_mode(PeerMode::GoBackN);
    post_writes(&mut p, 4, 64 * 256);
    let first = send_held(&mut p, 200);
    assert_eq!(first.len(), 200);
    for (k, b) in first.iter().enumerate() {
        if k != 3 {
            p.deliver(b, true);
        }
    }
    let answers = p.take_out(false);
    let naks: Vec<_> = answers.iter().filter(|b| is_seq_nak(b)).collect();
    assert_eq!(naks.len(), 1, "one NAK per gap");
    for b in &answers {
        p.deliver(b, false);
    }
    assert_eq!(p.sa.stat(Stat::SeqNaksRcvd), 1);
    let d = p.a.details();
    assert_eq!(
        d.cwnd, 98,
        "the window halves from the 197 packets in flight"
    );
    assert_eq!(d.ssthresh, 98);
    // The go-back starts at once, at the lost packet, and sends what the window allows.
    let resent = send_held(&mut p, 1000);
    assert_eq!(psn_of(&resent[0]), psn_of(&first[3]));
    assert_eq!(resent.len(), 98, "the halved window");
    // A duplicate of the NAK (the network duplicated it) starts nothing new.
    p.deliver(naks[0], false);
    assert!(send_held(&mut p, 1000).is_empty(), "no second go-back");
    assert_eq!(p.a.details().cwnd, 98, "and no second halving");
    assert_eq!(p.a.details().retry_left, 6, "one retry for the episode");
    // Everything then completes, with no timer.
    for b in resent {
        p.deliver(&b, true);
    }
    p.run();
    assert_eq!(p.timeouts, 0);
    assert_eq!(
        statuses(&p.sa),
        vec![(0, 0), (1, 0), (2, 0), (3, 0)],
        "every WR completes once, in order"
    );
    assert_eq!(
        bytes(&p.sb, 0x100, 0x1020_0000, 4 * 64 * 256),
        bytes(&p.sa, 0x100, 0x1000_0000, 4 * 64 * 256)
    );
    assert!(p.a.details().cwnd > 98, "the window grows back");
}

#[test]
fn the_window_grows_back_slowly_above_the_threshold() {
    // After a NAK halved the window, each window's worth of acknowledged PSNs opens it by
    // two packets (congestion avoidance), not by one per PSN (slow start). Against a
    // go-back-N peer (a selective resend keeps the window as it is).
    let mut p = Pair::new(QpType::Rc, 256);
    p.b.set_place_ahead(false);
    p.a.set_peer_mode(PeerMode::GoBackN);
    post_writes(&mut p, 8, 64 * 256);
    let mut n = 0;
    p.drop_if = Some(Box::new(move |_, from_a| {
        n += usize::from(from_a);
        from_a && n == 40
    }));
    p.run();
    assert_eq!(p.timeouts, 0);
    assert_eq!(p.sa.stat(Stat::SeqNaksRcvd), 1);
    let d = p.a.details();
    assert!(d.ssthresh >= 8 && d.ssthresh < RC_WINDOW, "{d:?}");
    // 512 - 40 PSNs acknowledged after the loss: about 2 * 472 / ssthresh packets more.
    assert!(d.cwnd > d.ssthresh && d.cwnd < RC_WINDOW, "{d:?}");
    assert_eq!(statuses(&p.sa).len(), 8);
}

#[test]
fn a_lost_tail_is_resent_at_the_round_trip_estimate_without_spending_a_retry() {
    // With a clock, a QP whose `timeout` is 18 (1.07 s) recovers a lost last packet after
    // a few RTO_MIN, not after seconds; the early expiries spend no retry and are no timeouts.
    // (One: with a peer that places, the expiry sends the oldest unacknowledged packet alone.)
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 18);
    p.sa.clock = true;
    p.sb.clock = true;
    post_writes(&mut p, 1, 8 * 1024);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0)]);
    assert!(p.a.details().srtt_us > 0, "a sample was taken");
    let t0 = p.sa.now_ms;
    post_writes(&mut p, 1, 4 * 1024);
    let mut n = 0;
    p.drop_if = Some(Box::new(move |_, from_a| {
        n += usize::from(from_a);
        from_a && n == 4
    }));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (0, 0)]);
    let waited = p.sa.now_ms - t0;
    assert!(
        waited * 1000 < 4 * RTO_MIN_US,
        "recovered after {waited} ms (timeout 18 is 1,073 ms)"
    );
    assert_eq!(p.sa.stat(Stat::Timeouts), 0);
    // One: the early expiry sends the lost packet alone to a peer that places (a probe first,
    // then a go-back, took two).
    assert_eq!(p.sa.stat(Stat::RtoExpiries), 1);
    assert_eq!(p.a.details().retry_left, 7);
}

#[test]
fn without_a_clock_the_timer_waits_the_ibta_timeout() {
    // The same loss with no clock (Env::clock_us None): the timer waits `timeout` as before.
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 18);
    post_writes(&mut p, 1, 8 * 1024);
    p.run();
    let t0 = p.sa.now_ms;
    post_writes(&mut p, 1, 4 * 1024);
    let mut n = 0;
    p.drop_if = Some(Box::new(move |_, from_a| {
        n += usize::from(from_a);
        from_a && n == 4
    }));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (0, 0)]);
    assert!(p.sa.now_ms - t0 >= 2 * 1073);
    assert_eq!(p.sa.stat(Stat::RtoExpiries), 0);
    assert_eq!(p.sa.stat(Stat::Timeouts), 2);
}

#[test]
fn a_dead_path_still_spends_retry_cnt_at_the_ibta_timeout_only() {
    // The early expiries resend and back off, but only an expiry at the QP's timeout (with
    // its 1, 2, 4x backoff) spends a retry: RETRY_EXC_ERR comes after retry_cnt + 1 of them,
    // and no sooner than those timeouts add up to, as without a clock.
    for retry_cnt in [0u8, 3, 7] {
        let mut p = Pair::with(QpType::Rc, 1024, |c| {
            c.timeout = 14;
            c.retry_cnt = retry_cnt;
        });
        p.sa.clock = true;
        p.sb.clock = true;
        post_writes(&mut p, 1, 2048);
        p.run();
        assert!(p.a.details().srtt_us > 0);
        let t0 = p.sa.now_ms;
        post_writes(&mut p, 1, 2048);
        p.drop_if = Some(Box::new(|_, from_a| from_a));
        p.run();
        assert_eq!(statuses(&p.sa), vec![(0, 0), (0, wc_status::RETRY_EXC_ERR)]);
        assert_eq!(p.a.state(), QpState::Err);
        assert_eq!(p.sa.stat(Stat::Timeouts), u64::from(retry_cnt) + 1);
        assert!(p.sa.stat(Stat::RtoExpiries) > 0);
        // 4.096 us * 2^14 = 67 ms; waits of 1, 2, 4, 4, ... times that.
        let full: u64 = (0..=u32::from(retry_cnt)).map(|k| 67 << k.min(2)).sum();
        let took = p.sa.now_ms - t0;
        assert!(
            took >= full && took <= full + 2 * (u64::from(retry_cnt) + 1),
            "retry_cnt {retry_cnt}: failed after {took} ms, IBTA timeouts add up to {full}"
        );
    }
}

#[test]
fn karn_a_retransmitted_packet_gives_no_sample() {
    // The only packet of a WRITE is lost; its retransmission is answered after the early
    // expiry. That answer could be to either copy: it gives no round-trip sample, so the
    // estimate stays what the first WR's clean exchange made it.
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 18);
    p.sa.clock = true;
    p.sb.clock = true;
    post_writes(&mut p, 1, 512);
    p.run();
    let srtt = p.a.details().srtt_us;
    assert!(srtt > 0);
    post_writes(&mut p, 1, 512);
    let mut n = 0;
    p.drop_if = Some(Box::new(move |_, from_a| {
        n += usize::from(from_a);
        from_a && n == 1
    }));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (0, 0)]);
    assert_eq!(p.sa.stat(Stat::RtoExpiries), 1);
    assert_eq!(
        p.a.details().srtt_us,
        srtt,
        "no sample from the retransmission"
    );
}

#[test]
fn many_reads_outstanding_are_answered_in_order_through_the_index() {
    // 60 READs outstanding at once (max_rd_atomic 128), some of their responses lost:
    // the owed responses are found from the responder's index; every READ completes with
    // its data (a debug assertion checks the index against a full scan on every search).
    let mut p = Pair::with(QpType::Rc, 1024, |c| {
        c.max_rd_atomic = 128;
        c.max_dest_rd_atomic = 128;
    })
    .faulty(
        Faults {
            loss: 3,
            reorder: 5,
            ..Faults::default()
        },
        7,
    );
    for i in 0..60u64 {
        let mut w = signaled(wr_opcode::RDMA_READ, i, 1);
        w.remote_addr = 0x1000_0000 + i * 3000;
        w.rkey = 0x100;
        p.post_send(
            w,
            &[Sge {
                addr: 0x2000_0000 + i * 3000,
                length: 2500,
                lkey: 0x200,
            }],
            &[],
        );
    }
    p.run();
    let st = statuses(&p.sa);
    assert_eq!(st.len(), 60);
    assert!(st.iter().enumerate().all(|(k, s)| *s == (k as u64, 0)));
    for i in 0..60u64 {
        assert_eq!(
            bytes(&p.sa, 0x200, 0x2000_0000 + i * 3000, 2500),
            bytes(&p.sb, 0x100, 0x1000_0000 + i * 3000, 2500)
        );
    }
}

/// Posts one 16-packet READ and returns its responses, in the order B sent them.
fn read_responses(p: &mut Pair) -> Vec<Vec<u8>> {
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 16 * 1024);
    p.post_send(w, &[sge], &[]);
    let req = send_held(p, 1);
    assert_eq!(req.len(), 1);
    p.deliver(&req[0], true);
    let resp = drain_b(p);
    assert_eq!(resp.len(), 16);
    resp
}

/// Everything B sends now, held.
fn drain_b(p: &mut Pair) -> Vec<Vec<u8>> {
    while p.b.run_responder(&mut p.sb, &mut p.scratch, 64) > 0 {}
    p.take_out(false)
}

fn read_requests(out: &[Vec<u8>]) -> Vec<Psn> {
    out.iter()
        .filter(|b| is_op(&Packet::parse(b).unwrap(), Operation::RdmaReadRequest))
        .map(|b| psn_of(b))
        .collect()
}

#[test]
fn reordered_read_responses_are_placed_at_once_and_never_asked_for_again() {
    // Responses 3 and 4 swap, and 7 arrives after 12 (netem's delay-based reordering):
    // before, each one past a gap started a re-read of everything after the gap.
    let mut p = Pair::new(QpType::Rc, 1024);
    let resp = read_responses(&mut p);
    let order = [0, 1, 2, 4, 3, 5, 6, 8, 9, 10, 11, 12, 7, 13, 14, 15];
    for (n, &k) in order.iter().enumerate() {
        p.deliver(&resp[k], false);
        if n == 11 {
            assert_eq!(p.a.details().reads_ahead, 5, "8..=12 wait for 7");
        }
    }
    assert!(
        read_requests(&send_held(&mut p, 100)).is_empty(),
        "no re-read"
    );
    p.run();
    assert_eq!(p.sa.stat(Stat::ReadResponsesAhead), 6);
    assert_eq!(p.sa.stat(Stat::ImpliedNaks), 0);
    assert_eq!(p.a.details().reads_ahead, 0);
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 16 * 1024),
        bytes(&p.sb, 0x100, 0x1000_0000, 16 * 1024)
    );
}

#[test]
fn a_lost_read_response_is_re_read_once_from_the_gap_when_the_last_one_arrives() {
    // Response 5 is lost. 6..14 are placed and remembered; the last one makes the gap a
    // loss: one re-read from 5, whose replayed 6..15 are duplicates.
    let mut p = Pair::new(QpType::Rc, 1024);
    let resp = read_responses(&mut p);
    let first = psn_of(&resp[0]);
    for (k, b) in resp.iter().enumerate() {
        if k != 5 {
            p.deliver(b, false);
        }
        if k == 14 {
            assert!(
                read_requests(&p.sa.out.iter().map(|(b, _)| b.clone()).collect::<Vec<_>>())
                    .is_empty(),
                "no re-read before the last response"
            );
        }
    }
    let again = send_held(&mut p, 100);
    assert_eq!(
        read_requests(&again),
        vec![first.wrapping_add(5)],
        "one re-read, from the gap"
    );
    assert_eq!(p.sa.stat(Stat::ImpliedNaks), 1);
    for b in &again {
        p.deliver(b, true);
    }
    let replay = drain_b(&mut p);
    assert_eq!(replay.len(), 11, "5..=15 again");
    let dups = p.sa.stat(Stat::DuplicateResponses);
    for b in &replay {
        p.deliver(b, false);
    }
    assert_eq!(
        p.sa.stat(Stat::DuplicateResponses) - dups,
        10,
        "6..=15 were placed already"
    );
    p.run();
    assert_eq!(p.timeouts, 0);
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 16 * 1024),
        bytes(&p.sb, 0x100, 0x1000_0000, 16 * 1024)
    );
}

/// Posts `n` 16-packet READs (wr_id 1..=n), 16 KiB apart, B's MR 0x100 into A's 0x200.
fn post_reads(p: &mut Pair, n: u64) {
    for k in 0..n {
        let (w, sge) = read_wr(
            k + 1,
            0x1000_0000 + k * 0x4000,
            0x2000_0000 + k * 0x4000,
            16 * 1024,
        );
        p.post_send(w, &[sge], &[]);
    }
}

#[test]
fn a_read_missing_responses_is_asked_again_alone_and_the_reads_after_it_are_not() {
    // Three 16-packet READs outstanding; response 3 of the first is lost. The responses of
    // the second and third arrive after the first's (the responder answers in order) and are
    // placed at once. Only the first READ is asked again, from its gap: going back N asked
    // the second and third again too, and a responder that replays a READ in full from the
    // PSN asked (rdma_rxe, and rrxe) sent them twice at every loss (clean-clone make test of
    // 2026-11-29 and the B.loss1 loops of the seventh session: rdma_rxe fell seconds behind
    // on such replays and another WR's retries ran out).
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.max_rd_atomic = 4);
    post_reads(&mut p, 3);
    let reqs = send_held(&mut p, 3);
    assert_eq!(read_requests(&reqs).len(), 3);
    let first = psn_of(&reqs[0]);
    for b in &reqs {
        p.deliver(b, true);
    }
    let resp = drain_b(&mut p);
    assert_eq!(resp.len(), 48);
    for (k, b) in resp.iter().enumerate() {
        if k != 3 {
            p.deliver(b, false);
        }
    }
    let again = send_held(&mut p, 100);
    assert_eq!(
        read_requests(&again),
        vec![first.wrapping_add(3)],
        "the first READ alone, from its gap"
    );
    assert_eq!(
        p.sa.stat(Stat::ReadResponsesAhead),
        12 + 32,
        "the rest of all three placed"
    );
    for b in &again {
        p.deliver(b, true);
    }
    let replay = drain_b(&mut p);
    assert_eq!(
        replay.len(),
        13,
        "3..=15 of the first READ, nothing of the others"
    );
    for b in &replay {
        p.deliver(b, false);
    }
    assert_eq!(
        statuses(&p.sa),
        vec![(1, 0), (2, 0), (3, 0)],
        "all three complete with the first one's last response"
    );
    assert!(read_requests(&send_held(&mut p, 100)).is_empty());
    p.run();
    assert_eq!(p.timeouts, 0);
    assert_eq!(
        p.sa.stat(Stat::Retransmits),
        1,
        "one READ request sent again"
    );
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 3 * 0x4000),
        bytes(&p.sb, 0x100, 0x1000_0000, 3 * 0x4000)
    );
}

#[test]
fn a_later_read_with_a_gap_of_its_own_is_asked_again_when_it_reaches_the_front() {
    // Two 16-packet READs; response 3 of the first and response 5 of the second are lost. The
    // second's responses past its own gap cannot be kept while the first waits; once the first
    // is answered, the second is asked again from its gap at once: nothing past it would imply
    // the loss, and waiting for the round-trip estimate made READ between two rrxe ends twice
    // as slow at 1% loss (docs/bench/loss-2026-11-29-3b40d88-read-bench.md).
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.max_rd_atomic = 4);
    post_reads(&mut p, 2);
    let reqs = send_held(&mut p, 2);
    let (a, b) = (psn_of(&reqs[0]), psn_of(&reqs[1]));
    for r in &reqs {
        p.deliver(r, true);
    }
    let resp = drain_b(&mut p);
    assert_eq!(resp.len(), 32);
    for (k, r) in resp.iter().enumerate() {
        if k != 3 && k != 16 + 5 {
            p.deliver(r, false);
        }
    }
    let again = send_held(&mut p, 100);
    assert_eq!(read_requests(&again), vec![a.wrapping_add(3)]);
    for r in &again {
        p.deliver(r, true);
    }
    for r in &drain_b(&mut p) {
        p.deliver(r, false);
    }
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    let next = send_held(&mut p, 100);
    assert_eq!(
        read_requests(&next),
        vec![b.wrapping_add(5)],
        "the second READ from its own gap, at once"
    );
    for r in &next {
        p.deliver(r, true);
    }
    p.run();
    assert_eq!(p.timeouts, 0);
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0)]);
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 2 * 0x4000),
        bytes(&p.sb, 0x100, 0x1000_0000, 2 * 0x4000)
    );
}

#[test]
fn a_read_answered_before_its_second_request_went_out_leaves_no_count_behind() {
    // The first READ's missing response comes late (reordered past an ACK that implied it
    // lost): it completes the READ while the request asking for it again is still waiting to
    // go out. The requester returns to where it stood, with the READ no longer counted as
    // outstanding, and the fenced SENDs behind it go. (The property test's saved case in
    // transport_props.proptest-regressions is the one that found a count left behind.)
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.max_rd_atomic = 1);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 4 * 1024);
    p.post_send(w, &[sge], &[]);
    p.post_send(
        signaled(wr_opcode::SEND, 2, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    let mut fenced = signaled(wr_opcode::SEND, 3, 1);
    fenced.send_flags |= send_flags::FENCE;
    p.post_send(
        fenced,
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    let mut fenced = signaled(wr_opcode::SEND, 4, 1);
    fenced.send_flags |= send_flags::FENCE;
    p.post_send(
        fenced,
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    for k in 0..3 {
        p.sb.rq
            .push_back(recv(8 + k, 0x2010_0000 + k * 0x1000, 100, 0x200));
    }
    let reqs = send_held(&mut p, 10);
    assert_eq!(reqs.len(), 2, "READ and SEND; the fenced SENDs wait");
    for b in &reqs {
        p.deliver(b, true);
    }
    let answers = drain_b(&mut p);
    assert_eq!(answers.len(), 5, "4 READ responses and the SEND's ACK");
    // Response 1 comes last: the ACK before it implies it lost, and the READ is asked again.
    for k in [0, 2, 3, 4] {
        p.deliver(&answers[k], false);
    }
    assert!(p.sa.stat(Stat::ImpliedNaks) >= 1);
    p.deliver(&answers[1], false);
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0)]);
    assert_eq!(p.a.details().rd_atomic, 0);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0), (3, 0), (4, 0)]);
}

#[test]
fn responses_streaming_past_a_gap_hold_off_the_round_trip_estimate() {
    // A 64-packet READ whose response 2 is lost, answered at 5 ms a packet (rdma_rxe under
    // TCG). The retransmit timer runs at the round-trip estimate, far shorter than the READ
    // takes: its expiries while the rest streams in ask nothing again (each request makes a
    // responder replay the READ from the gap to its end: a B.loss1 capture had 13 such
    // replays of 230 packets, one per 75 ms expiry). The last response makes the gap a loss:
    // the READ is asked again once, from the gap.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sa.clock = true;
    p.sb.clock = true;
    post_writes(&mut p, 1, 1024);
    p.run();
    let (w, sge) = read_wr(9, 0x1000_0000, 0x2000_0000, 64 * 1024);
    p.post_send(w, &[sge], &[]);
    let req = send_held(&mut p, 1);
    let first = psn_of(&req[0]);
    p.deliver(&req[0], true);
    let resp = drain_b(&mut p);
    assert_eq!(resp.len(), 64);
    let mut expiries = 0;
    for (k, b) in resp.iter().enumerate() {
        if k == 2 {
            continue;
        }
        p.tick(5_000);
        p.deliver(b, false);
        if k > 3 && k % 3 == 0 && p.sa.retry_timer.is_some() {
            p.a.retry_timer_expired(&mut p.sa);
            expiries += 1;
        }
        let out = send_held(&mut p, 100);
        if k < 63 {
            assert!(
                read_requests(&out).is_empty(),
                "asked again at response {k}"
            );
        } else {
            assert_eq!(read_requests(&out), vec![first.wrapping_add(2)]);
            for b in &out {
                p.deliver(b, true);
            }
        }
    }
    assert!(expiries > 10, "{expiries}");
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (9, 0)]);
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 64 * 1024),
        bytes(&p.sb, 0x100, 0x1000_0000, 64 * 1024)
    );
}

#[test]
fn responses_ahead_are_remembered_across_the_whole_window() {
    // A 200-packet READ whose first response comes after 198 others (every word of the
    // record): all are placed once, and the first one completes the READ but for its last.
    let mut p = Pair::new(QpType::Rc, 256);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 200 * 256);
    p.post_send(w, &[sge], &[]);
    let req = send_held(&mut p, 1);
    p.deliver(&req[0], true);
    let resp = drain_b(&mut p);
    assert_eq!(resp.len(), 200);
    for b in &resp[1..199] {
        p.deliver(b, false);
    }
    assert_eq!(p.a.details().reads_ahead, 198);
    p.deliver(&resp[0], false);
    assert_eq!(p.a.details().reads_ahead, 0);
    assert!(statuses(&p.sa).is_empty(), "the last response is still due");
    p.deliver(&resp[199], false);
    assert!(
        read_requests(&send_held(&mut p, 100)).is_empty(),
        "no re-read"
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 200 * 256),
        bytes(&p.sb, 0x100, 0x1000_0000, 200 * 256)
    );
}

// Selective recovery between two rrxe ends (IRN-lite): B places RDMA WRITE packets that arrive
// past a gap, A sends only the missing one again.

/// PSN of A's `k`-th packet of a fresh pair.
fn nth_psn(k: u32) -> u32 {
    (0xff_fff0 + k) & 0xff_ffff
}

/// Drops the first transmission of each of A's packets at the given offsets (retransmissions
/// go through).
fn drop_first_sends(p: &mut Pair, ks: &[u32]) {
    let mut left: Vec<u32> = ks.iter().map(|&k| nth_psn(k)).collect();
    p.drop_if = Some(Box::new(move |pkt, from_a| {
        let psn = pkt.bth().psn.get();
        if std::env::var("TRACE").is_ok() {
            let k = psn.wrapping_sub(0xff_fff0) & 0xff_ffff;
            let nak = pkt.aeth().map(|a| Syndrome::decode(a.syndrome));
            eprintln!("{} {k} {:?}", if from_a { "A>" } else { "<B" }, nak);
        }
        if from_a && is_op(pkt, Operation::RdmaWrite) {
            if let Some(i) = left.iter().position(|&x| x == psn) {
                left.remove(i);
                return true;
            }
        }
        false
    }));
}

#[test]
fn a_lost_middle_packet_is_resent_alone() {
    // One 64-packet WRITE, its 10th packet lost: B places the 53 after it, NAKs the hole once;
    // A sends that one packet again and nothing else; B's expected PSN jumps to the end.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 64 * 256);
    drop_first_sends(&mut p, &[10]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0)]);
    assert_eq!(p.timeouts, 0);
    assert_eq!(p.sb.stat(Stat::SeqNaksSent), 1);
    // Those that left A before the NAK came back (the rest follow in order).
    assert!(p.sb.stat(Stat::WritePacketsAhead) >= 5);
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 1);
    assert_eq!(p.sa.stat(Stat::Retransmits), 1, "the lost packet only");
    assert_eq!(p.sb.stat(Stat::DuplicateRequests), 0);
    assert_eq!(p.a.details().peer, PeerMode::Places);
    assert_eq!(p.b.details().writes_ahead, 0);
    assert_eq!(p.a.details().cwnd, RC_WINDOW, "the window stays open");
    same_bytes(&p, 64 * 256);
}

#[test]
fn several_holes_in_a_window_are_each_resent_alone() {
    // Four WRITEs of 32 packets, five packets lost across them (none a first packet, none
    // next to another): each hole is asked for and sent again alone, and every WR completes
    // once, in order.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 4, 32 * 256);
    drop_first_sends(&mut p, &[3, 30, 50, 77, 120]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
    assert_eq!(p.timeouts, 0);
    assert_eq!(p.sa.stat(Stat::Retransmits), 5, "the lost packets only");
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 5);
    assert_eq!(p.a.details().peer, PeerMode::Places);
    same_bytes(&p, 4 * 32 * 256);
}

#[test]
fn a_run_of_losses_is_resent_packet_by_packet_and_keeps_the_window() {
    // Packets 30 and 31 lost: 30 is sent again alone, and the NAK that then asks for 31 (a
    // run of losses) has 31 sent alone in turn, not the whole window again; the window stays.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 4, 32 * 256);
    drop_first_sends(&mut p, &[30, 31, 100]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
    assert_eq!(p.timeouts, 0);
    assert_eq!(p.a.details().peer, PeerMode::Places);
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 3, "30, 31 and 100");
    assert_eq!(p.sa.stat(Stat::Retransmits), 3, "the lost packets only");
    assert_eq!(p.a.details().cwnd, RC_WINDOW, "the window stays open");
    same_bytes(&p, 4 * 32 * 256);
}

#[test]
fn a_lost_first_packet_is_resent_with_its_message_only() {
    // The first packet of the second of four 32-packet WRITEs is lost: B cannot place the
    // rest of that message (its RETH is in the first), but places the two WRITEs after it.
    // A sends that message again and nothing past it.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 4, 32 * 256);
    let pkts = send_held(&mut p, 128);
    assert_eq!(pkts.len(), 128);
    for (k, b) in pkts.iter().enumerate() {
        if k != 32 {
            p.deliver(b, true);
        }
    }
    assert_eq!(
        p.sb.stat(Stat::WritePacketsAhead),
        64,
        "the two WRITEs after it"
    );
    for b in p.take_out(false) {
        p.deliver(&b, false);
    }
    let resent = send_held(&mut p, 1000);
    let psns: Vec<u32> = resent.iter().map(|b| psn_of(b).get()).collect();
    let want: Vec<u32> = (32..64).map(nth_psn).collect();
    assert_eq!(psns, want, "the lost message, and nothing past it");
    for b in &resent {
        p.deliver(b, true);
    }
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
    assert_eq!(p.sa.stat(Stat::Retransmits), 32);
    assert_eq!(p.a.details().peer, PeerMode::Places);
    same_bytes(&p, 4 * 32 * 256);
}

#[test]
fn a_reordered_packet_causes_no_resend_beyond_one_packet() {
    // Packet 5 of 16 arrives after packet 8: B places 6..=8 past the gap and moves over them
    // when 5 comes. A sends at most the one packet again (the NAK crossed packet 5).
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 16 * 256);
    let pkts = send_held(&mut p, 16);
    assert_eq!(pkts.len(), 16);
    for k in [0, 1, 2, 3, 4, 6, 7, 8, 5] {
        p.deliver(&pkts[k], true);
    }
    assert_eq!(p.sb.stat(Stat::WritePacketsAhead), 3);
    assert_eq!(p.b.details().writes_ahead, 0, "5 filled the hole");
    for b in &pkts[9..] {
        p.deliver(b, true);
    }
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0)]);
    assert!(p.sa.stat(Stat::Retransmits) <= 1);
    assert_eq!(p.timeouts, 0);
    same_bytes(&p, 16 * 256);
}

#[test]
fn write_with_imm_whose_last_packet_came_before_a_hole_completes_when_it_fills() {
    let mut p = Pair::new(QpType::Rc, 256);
    p.sb.rq.push_back(recv(77, 0x2000_0000, 0, 0x200));
    let mut w = signaled(wr_opcode::RDMA_WRITE_WITH_IMM, 1, 1);
    w.remote_addr = 0x1020_0000;
    w.rkey = 0x100;
    w.imm_data = 0xabcd_0123;
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 8 * 256 - 100,
            lkey: 0x100,
        }],
        &[],
    );
    let pkts = send_held(&mut p, 8);
    assert_eq!(pkts.len(), 8);
    for k in [0, 1, 2, 4, 5, 6, 7] {
        p.deliver(&pkts[k], true);
    }
    assert!(p.sb.recv_cq.is_empty(), "not before the hole fills");
    assert_eq!(p.b.details().writes_ahead, 4);
    assert_eq!(p.sb.rq.len(), 1, "its receive WQE not taken yet");
    p.deliver(&pkts[3], true);
    assert_eq!(p.sb.recv_cq.len(), 1);
    let c = p.sb.recv_cq[0];
    assert_eq!((c.wr_id, c.status, c.byte_len), (77, 0, 8 * 256 - 100));
    assert_eq!(c.opcode, wc_opcode::RECV_RDMA_WITH_IMM);
    assert_eq!(c.imm_data, 0xabcd_0123);
    assert_ne!(c.wc_flags & wc_flags::WITH_IMM, 0);
    p.take_out(true);
    let acks = p.take_out(false);
    assert!(
        acks.iter()
            .any(|b| !is_seq_nak(b) && psn_of(b).get() == nth_psn(7)),
        "the whole WRITE acknowledged"
    );
    for b in &acks {
        p.deliver(b, false);
    }
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(p.sb.recv_cq.len(), 1, "completed once");
    same_bytes(&p, 8 * 256 - 100);
}

#[test]
fn a_duplicate_of_a_placed_packet_is_not_placed_again() {
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 8 * 256);
    let pkts = send_held(&mut p, 8);
    p.deliver(&pkts[0], true);
    p.deliver(&pkts[3], true);
    assert_eq!(p.sb.stat(Stat::WritePacketsAhead), 1);
    // Overwrite what was placed: a second placement would write it again.
    let at = 0x1020_0000 + 3 * 256;
    let mr = p.sb.mrs.iter_mut().find(|m| m.key == 0x100).unwrap();
    let off = (at - mr.addr) as usize;
    mr.bytes[off..off + 256].fill(0x5a);
    p.deliver(&pkts[3], true);
    assert_eq!(p.sb.stat(Stat::WritePacketsAhead), 1, "placed once");
    assert_eq!(p.sb.stat(Stat::DuplicateRequests), 1);
    assert_eq!(bytes(&p.sb, 0x100, at, 256), vec![0x5a; 256]);
    assert_eq!(p.sb.stat(Stat::SeqNaksSent), 1, "one NAK for the gap");
}

#[test]
fn a_peer_that_does_not_announce_placement_gets_go_back_n_from_the_first_loss() {
    // B drops what arrives past a gap (rdma_rxe) and its answers do not carry the BTH
    // announcement: A takes it for go-back-N at its first answer and never sends a packet
    // alone (exactly the IBTA behaviour, before issue 28's selective resend).
    let mut p = Pair::new(QpType::Rc, 256);
    p.b.set_place_ahead(false);
    post_writes(&mut p, 4, 64 * 256);
    drop_first_sends(&mut p, &[10, 80, 150, 220]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
    assert_eq!(p.a.details().peer, PeerMode::GoBackN);
    assert_eq!(
        p.sa.stat(Stat::SelectiveResends),
        0,
        "never one packet alone"
    );
    assert_eq!(p.sb.stat(Stat::WritePacketsAhead), 0);
    assert_eq!(p.timeouts, 0);
    same_bytes(&p, 4 * 64 * 256);
}

/// Clears the BTH announcement of selective recovery (byte 8, bit 6) in a packet, as a
/// requester or responder that does not know it (rdma_rxe, hardware) sends it. The packets
/// here start at the BTH, and the host harness does not check the ICRC.
fn unannounced(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    v[8] &= !0x40;
    v
}

#[test]
fn every_rc_packet_announces_and_only_rc_packets() {
    // A's requests and B's acknowledgements carry the bit; UC requests do not.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 4 * 256);
    let pkts = send_held(&mut p, 4);
    assert_eq!(pkts.len(), 4);
    assert!(pkts.iter().all(|b| Packet::parse(b).unwrap().bth().sel));
    for b in &pkts {
        p.deliver(b, true);
    }
    let acks = p.take_out(false);
    assert!(!acks.is_empty());
    assert!(acks.iter().all(|b| Packet::parse(b).unwrap().bth().sel));
    // A responder that does not place does not announce.
    let mut q = Pair::new(QpType::Rc, 256);
    q.b.set_place_ahead(false);
    post_writes(&mut q, 1, 4 * 256);
    for b in &send_held(&mut q, 4) {
        q.deliver(b, true);
    }
    let acks = q.take_out(false);
    assert!(!acks.is_empty());
    assert!(acks.iter().all(|b| !Packet::parse(b).unwrap().bth().sel));
    let mut u = Pair::new(QpType::Uc, 256);
    post_writes(&mut u, 1, 4 * 256);
    let pkts = send_held(&mut u, 4);
    assert_eq!(pkts.len(), 4);
    assert!(pkts.iter().all(|b| !Packet::parse(b).unwrap().bth().sel));
}

#[test]
fn a_requester_that_does_not_announce_is_served_by_go_back_n() {
    // The B.loss10 stall of 2026-11-29: rdma_rxe's requester, answered by an ACK that jumped
    // past what it was resending, stopped. A placing responder must not place for a requester
    // that did not announce: packets past the gap are dropped, one NAK asks for the gap, and
    // the answer to the resent packet acknowledges that packet only.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 16 * 256);
    let pkts: Vec<Vec<u8>> = send_held(&mut p, 16)
        .iter()
        .map(|b| unannounced(b))
        .collect();
    assert_eq!(pkts.len(), 16);
    for (k, b) in pkts.iter().enumerate() {
        if k != 5 {
            p.deliver(b, true);
        }
    }
    assert_eq!(p.sb.stat(Stat::WritePacketsAhead), 0, "nothing placed");
    assert_eq!(p.b.details().writes_ahead, 0);
    assert_eq!(p.sb.stat(Stat::SeqNaksSent), 1);
    p.take_out(false);
    p.deliver(&pkts[5], true);
    let answers = p.take_out(false);
    assert!(answers.iter().all(|b| {
        let a = Packet::parse(b).unwrap();
        !a.bth().psn.after(psn_of(&pkts[5]))
    }));
    // A go-back-N requester sends the rest again; everything is placed once, in order.
    for b in &pkts[6..] {
        p.deliver(b, true);
    }
    assert_eq!(p.b.rq_psn(), psn_of(&pkts[15]).next().get());
}

#[test]
fn acknowledgements_without_the_announcement_turn_a_requester_to_go_back_n() {
    // B places (it would announce), but its answers reach A with the bit cleared (a peer
    // that does not know it): A never sends a packet alone, and the transfer completes.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 2, 32 * 256);
    let pkts = send_held(&mut p, 64);
    assert_eq!(pkts.len(), 64);
    for (k, b) in pkts.iter().enumerate() {
        if k != 7 {
            p.deliver(b, true);
        }
    }
    for b in p.take_out(false) {
        p.deliver(&unannounced(&b), false);
    }
    assert_eq!(p.a.details().peer, PeerMode::GoBackN);
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 0);
    let resent = send_held(&mut p, 1000);
    assert!(resent.len() > 1, "it goes back N");
    assert_eq!(psn_of(&resent[0]), psn_of(&pkts[7]));
    for b in &resent {
        p.deliver(b, true);
    }
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0)]);
    same_bytes(&p, 2 * 32 * 256);
}

#[test]
fn a_placing_peer_is_not_taken_for_a_go_back_n_one() {
    // Adjacent losses look like a go-back-N answer once; a later jump clears the vote.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 4, 64 * 256);
    drop_first_sends(&mut p, &[10, 11, 80, 150, 151, 220]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
    assert_eq!(p.a.details().peer, PeerMode::Places);
    assert_eq!(p.timeouts, 0);
    same_bytes(&p, 4 * 64 * 256);
}

#[test]
fn an_rnr_nak_for_the_packet_before_placed_writes_is_kept() {
    // A SEND whose receive WQE is missing, then a WRITE whose packets came first and were
    // placed: the SEND, when it arrives, is RNR NAKed (not sequence NAKed), and once a receive
    // WQE is there everything completes once, in order.
    let mut p = Pair::new(QpType::Rc, 256);
    p.post_send(
        signaled(wr_opcode::SEND, 0, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 64,
            lkey: 0x100,
        }],
        &[],
    );
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 1);
    w.remote_addr = 0x1020_0000;
    w.rkey = 0x100;
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 4 * 256,
            lkey: 0x100,
        }],
        &[],
    );
    let pkts = send_held(&mut p, 5);
    assert_eq!(pkts.len(), 5);
    for b in &pkts[1..] {
        p.deliver(b, true);
    }
    assert_eq!(p.b.details().writes_ahead, 4);
    p.take_out(false);
    p.deliver(&pkts[0], true);
    let out = p.take_out(false);
    assert_eq!(out.len(), 1);
    let a = Packet::parse(&out[0]).unwrap().aeth().unwrap();
    assert!(
        matches!(Syndrome::decode(a.syndrome), Syndrome::RnrNak { .. }),
        "{:?}",
        Syndrome::decode(a.syndrome)
    );
    p.sb.rq.push_back(recv(9, 0x2000_0000, 64, 0x200));
    p.deliver(&out[0], false);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (1, 0)]);
    assert_eq!(p.sb.recv_cq.len(), 1);
    same_bytes(&p, 4 * 256);
}

/// Packets A sends (first transmissions and resends) and timeouts to move 32 WRITEs of 16 KiB
/// over a faulty wire, against a placing (`place`) or go-back-N responder.
fn write_cost(f: Faults, seed: u64, place: bool) -> (u64, u64, u32) {
    let mut p = Pair::new(QpType::Rc, 1024).faulty(f, seed);
    // The clock the kernel's engine has: the round-trip estimate times the retransmit timer.
    p.sa.clock = true;
    p.sb.clock = true;
    p.b.set_place_ahead(place);
    post_writes(&mut p, 32, 16 * 1024);
    p.run();
    assert_eq!(statuses(&p.sa).len(), 32);
    assert!(statuses(&p.sa)
        .iter()
        .enumerate()
        .all(|(i, &(w, s))| w == i as u64 && s == 0));
    same_bytes(&p, 32 * 16 * 1024);
    (
        p.a.counters.get(Stat::SentPkts),
        p.sa.stat(Stat::Retransmits),
        p.timeouts,
    )
}

#[test]
fn selective_recovery_resends_less_than_go_back_n() {
    // 512 packets; summed over 8 seeds. Printed for docs/bench (`--nocapture`).
    for (name, f) in [
        (
            "loss 1%",
            Faults {
                loss: 1,
                ..Faults::default()
            },
        ),
        (
            "loss 10%",
            Faults {
                loss: 10,
                ..Faults::default()
            },
        ),
        (
            "reorder 20%",
            Faults {
                reorder: 20,
                ..Faults::default()
            },
        ),
    ] {
        let (mut sel, mut gbn) = ((0, 0, 0), (0, 0, 0));
        for seed in 1..=8 {
            let s = write_cost(f, seed, true);
            let g = write_cost(f, seed, false);
            sel = (sel.0 + s.0, sel.1 + s.1, sel.2 + s.2);
            gbn = (gbn.0 + g.0, gbn.1 + g.1, gbn.2 + g.2);
        }
        eprintln!(
            "{name}: placing peer: {} sent, {} resent, {} timeouts; go-back-N peer: {} sent, {} resent, {} timeouts",
            sel.0, sel.1, sel.2, gbn.0, gbn.1, gbn.2
        );
        assert!(sel.1 <= gbn.1, "{name}: {sel:?} vs {gbn:?}");
    }
}

/// Runs the pair to the end: the one 64-packet WRITE completed, no timeout, `resends` packets
/// sent again, B's bytes A's.
fn completes_with_resends(p: &mut Pair, resends: u64) {
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0)]);
    assert_eq!(p.timeouts, 0);
    assert_eq!(p.sa.stat(Stat::Retransmits), resends);
    same_bytes(p, 64 * 256);
}

/// Delivers A's packets `pkts` to B but those at the given offsets (`nth_psn`).
fn deliver_all_but(p: &mut Pair, pkts: &[Vec<u8>], lost: &[u32]) {
    for b in pkts {
        if !lost.iter().any(|&k| psn_of(b).get() == nth_psn(k)) {
            p.deliver(b, true);
        }
    }
}

/// B's answers since the last call, carried to A; returns how many were sequence NAKs.
fn answers_to_a(p: &mut Pair) -> usize {
    let answers = p.take_out(false);
    let naks = answers.iter().filter(|b| is_seq_nak(b)).count();
    for b in &answers {
        p.deliver(b, false);
    }
    naks
}

#[test]
fn a_lost_nak_is_repeated_while_packets_are_placed_past_its_hole() {
    // One 64-packet WRITE, its 4th packet lost and B's NAK for it lost too: B repeats the NAK
    // after RENAK_EVERY more packets placed past the hole, and A sends the packet alone then,
    // with no timeout (before, only the retransmit timer could end that silence).
    let r = RENAK_EVERY as usize;
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 64 * 256);
    let pkts = send_held(&mut p, 64);
    assert_eq!(pkts.len(), 64);
    for b in &pkts[..8] {
        if psn_of(b).get() != nth_psn(3) {
            p.deliver(b, true);
        }
    }
    let lost: Vec<_> = p.take_out(false);
    assert_eq!(
        lost.iter().filter(|b| is_seq_nak(b)).count(),
        1,
        "the first NAK (lost)"
    );
    // Counted from the packet after the one that was NAKed (4..=7 placed: 3 counted).
    let mut naks = 0;
    for b in &pkts[8..8 + r - 3] {
        p.deliver(b, true);
        naks += answers_to_a(&mut p);
    }
    assert_eq!(
        naks, 1,
        "the NAK, again, after RENAK_EVERY packets placed past the hole"
    );
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 1);
    let resent = send_held(&mut p, 1);
    assert_eq!(resent.len(), 1);
    assert_eq!(psn_of(&resent[0]).get(), nth_psn(3), "the hole alone");
    p.deliver(&resent[0], true);
    for b in &pkts[8 + r - 3..] {
        p.deliver(b, true);
    }
    completes_with_resends(&mut p, 1);
}

#[test]
fn a_lost_resend_goes_again_on_the_repeated_nak_once_a_round_trip_has_passed() {
    // With a clock: the 4th packet of a 64-packet WRITE is lost, and so is its resend. B
    // repeats its NAK while packets keep arriving past the hole; a repeat that comes within a
    // round trip of the resend crossed it (nothing sent), one that comes later means it was
    // lost: the packet goes out again alone, no retry spent, no timeout.
    let r = RENAK_EVERY as usize;
    let (a, b) = (8 + r - 3, 8 + 2 * r - 3);
    let mut p = Pair::new(QpType::Rc, 256);
    p.sa.clock = true;
    p.sb.clock = true;
    post_writes(&mut p, 1, 256);
    p.tick(2_000);
    p.run();
    let srtt = p.a.details().srtt_us;
    assert!(srtt > 0, "a round-trip sample");
    post_writes(&mut p, 1, 64 * 256);
    let pkts = send_held(&mut p, 64);
    assert_eq!(pkts.len(), 64);
    for b in &pkts[..8] {
        if psn_of(b).get() != nth_psn(1 + 3) {
            p.deliver(b, true);
        }
    }
    assert_eq!(answers_to_a(&mut p), 1, "the NAK");
    let resent = send_held(&mut p, 1);
    assert_eq!(
        psn_of(&resent[0]).get(),
        nth_psn(1 + 3),
        "sent alone (and lost)"
    );
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 1);
    // RENAK_EVERY placed since the NAK, no time passed: the repeat crossed the resend.
    let mut naks = 0;
    for b in &pkts[8..a] {
        p.deliver(b, true);
        naks += answers_to_a(&mut p);
    }
    assert_eq!(naks, 1);
    assert_eq!(
        p.sa.stat(Stat::SelectiveResends),
        1,
        "not sent again within a round trip"
    );
    assert!(send_held(&mut p, 1)
        .iter()
        .all(|b| psn_of(b).get() != nth_psn(4)));
    // A round trip later, RENAK_EVERY more placed: the repeat finds the resend lost.
    p.tick(3 * srtt + 1_000);
    naks = 0;
    for b in &pkts[a..b] {
        p.deliver(b, true);
        naks += answers_to_a(&mut p);
    }
    assert_eq!(naks, 1);
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 2);
    let again = send_held(&mut p, 1);
    assert_eq!(
        psn_of(&again[0]).get(),
        nth_psn(4),
        "the hole, alone, again"
    );
    p.deliver(&again[0], true);
    for b in &pkts[b..] {
        p.deliver(b, true);
    }
    p.run();
    assert_eq!(statuses(&p.sa), vec![(0, 0), (0, 0)]);
    assert_eq!(p.sa.stat(Stat::Timeouts), 0);
    assert_eq!(p.sa.stat(Stat::RtoExpiries), 0);
    assert_eq!(p.sa.stat(Stat::Retransmits), 2);
    assert_eq!(p.a.details().retry_left, 7, "the episode spent one retry");
}

/// Whether `b` is a hole report.
fn is_hole_report(b: &[u8]) -> bool {
    Packet::parse(b).unwrap().bth().hole && is_seq_nak(b)
}

#[test]
fn a_second_hole_is_reported_and_resent_without_waiting_for_the_first() {
    // One 64-packet WRITE, packets 3 and 10 lost: B NAKs 3 (the first hole) and reports 10
    // once packet 10 + HOLE_AFTER is placed; A sends both alone at once, side by side, not one
    // per round trip.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 64 * 256);
    let pkts = send_held(&mut p, 64);
    assert_eq!(pkts.len(), 64);
    assert!(pkts.iter().all(|b| Packet::parse(b).unwrap().bth().hole));
    deliver_all_but(&mut p, &pkts, &[3, 10]);
    let answers = p.take_out(false);
    let reports: Vec<u32> = answers
        .iter()
        .filter(|b| is_hole_report(b))
        .map(|b| psn_of(b).get())
        .collect();
    assert_eq!(reports, vec![nth_psn(10)]);
    assert_eq!(p.sb.stat(Stat::HoleReports), 1);
    // The NAKs (the first and its repeats) all name the first hole; the report is counted
    // apart.
    assert!(answers
        .iter()
        .filter(|b| is_seq_nak(b) && !is_hole_report(b))
        .all(|b| psn_of(b).get() == nth_psn(3)));
    for b in &answers {
        p.deliver(b, false);
    }
    // The report acknowledged nothing: 3 is still the oldest unacknowledged PSN.
    let resent: Vec<u32> = send_held(&mut p, 4)
        .iter()
        .map(|b| psn_of(b).get())
        .collect();
    assert_eq!(
        resent,
        vec![nth_psn(3), nth_psn(10)],
        "both holes, alone, now"
    );
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 2);
    for k in [3, 10] {
        let b = pkts.iter().find(|b| psn_of(b).get() == nth_psn(k)).unwrap();
        p.deliver(b, true);
    }
    completes_with_resends(&mut p, 2);
}

#[test]
fn holes_are_reported_only_to_a_requester_that_takes_reports() {
    // The same two holes, from a requester whose packets announce placement but not hole
    // reports (an rrxe of before the reports): B places, NAKs the first hole and reports
    // nothing, which such a requester would take for a NAK acknowledging the first hole.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 64 * 256);
    let pkts: Vec<Vec<u8>> = send_held(&mut p, 64)
        .iter()
        .map(|b| {
            let mut v = b.clone();
            v[8] &= !0x20;
            v
        })
        .collect();
    deliver_all_but(&mut p, &pkts, &[3, 10]);
    let answers = p.take_out(false);
    assert!(answers
        .iter()
        .all(|b| !Packet::parse(b).unwrap().bth().hole));
    assert_eq!(p.sb.stat(Stat::HoleReports), 0);
    assert!(
        p.sb.stat(Stat::WritePacketsAhead) > 50,
        "placed all the same"
    );
}

#[test]
fn a_hole_report_for_a_psn_not_in_flight_is_refused() {
    // A report names a PSN the requester has not sent (or has had acknowledged): counted as a
    // bad response, nothing sent, nothing acknowledged.
    let mut p = Pair::new(QpType::Rc, 256);
    post_writes(&mut p, 1, 8 * 256);
    let pkts = send_held(&mut p, 8);
    for b in &pkts[..4] {
        p.deliver(b, true);
    }
    let answers = p.take_out(false);
    for b in &answers {
        p.deliver(b, false);
    }
    let mut report = answers
        .iter()
        .find(|b| Packet::parse(b).unwrap().aeth().is_some())
        .expect("an ACK")
        .clone();
    // Far past what was sent, marked as a report, with a sequence-error syndrome.
    report[8] |= 0x20;
    report[9..12].copy_from_slice(&nth_psn(1000).to_be_bytes()[1..]);
    report[12] = 0x60;
    let bad = p.sa.stat(Stat::RxBadResponses);
    p.deliver(&report, false);
    assert!(p.sa.stat(Stat::RxBadResponses) > bad);
    assert_eq!(p.sa.stat(Stat::SelectiveResends), 0);
    assert!(send_held(&mut p, 8)
        .iter()
        .all(|b| !psn_of(b).before(psn_of(&pkts[4]))));
}
