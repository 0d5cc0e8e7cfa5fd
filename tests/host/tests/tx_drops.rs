//! Issue 28, section 4 (Medium): a packet that this end's own stack drops before it leaves
//! (NET_XMIT_DROP/CN, no memory for the skb, an empty loopback pool; [`Emit::Dropped`]) is no
//! loss on the wire. It used to be counted as sent, so only the retransmit timer recovered
//! it, a timeout per drop, and with `timeout` 0 (no timer) a dropped tail left its WR
//! uncompleted for good. The engine now rewinds to it and sends it again at its next chance.

use rrxe_host_tests::logic::{
    opcode::Operation,
    qp_state::{QpState, QpType},
    transport::*,
    wire::Packet,
};
use rrxe_host_tests::uapi::Sge;

mod common;
use common::*;

/// Drops the `nth` packet (from 1) this side emits that `pick` selects, once.
fn drop_once(nth: u32, pick: impl Fn(&Packet<'_>) -> bool + 'static) -> TxDropFn {
    let mut seen = 0;
    Box::new(move |b: &[u8]| {
        let pkt = Packet::parse(b).unwrap();
        if !pick(&pkt) {
            return false;
        }
        seen += 1;
        seen == nth
    })
}

fn writes(p: &mut Pair, n: u64, len: u32) {
    for i in 0..n {
        let mut w = signaled(wr_opcode::RDMA_WRITE, i + 1, 1);
        w.remote_addr = 0x1010_0000 + (i << 16);
        w.rkey = 0x100;
        p.post_send(
            w,
            &[Sge {
                addr: 0x1000_0000 + (i << 16),
                length: len,
                lkey: 0x100,
            }],
            &[],
        );
    }
}

fn all_ok(p: &Pair, n: u64) {
    assert_eq!(statuses(&p.sa), (1..=n).map(|i| (i, 0)).collect::<Vec<_>>());
    assert_eq!(p.a.state(), QpState::Rts);
    assert_eq!(p.sa.stat(Stat::Timeouts), 0, "no timeout was needed");
}

#[test]
fn a_dropped_tail_request_is_sent_again_without_a_timer() {
    // Three 3-packet WRITEs; the last packet (the tail: no later packet makes the responder
    // see a gap) is dropped on transmit. timeout 0: no timer would ever resend it.
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 0);
    p.sa.drop_tx = Some(drop_once(9, |_| true));
    writes(&mut p, 3, 3000);
    p.run();
    assert_eq!(p.sa.tx_dropped, 1);
    all_ok(&p, 3);
    assert_eq!(
        bytes(&p.sb, 0x100, 0x1010_0000 + (2 << 16), 3000),
        bytes(&p.sa, 0x100, 0x1000_0000 + (2 << 16), 3000)
    );
}

#[test]
fn a_dropped_request_in_mid_stream_costs_no_sequence_nak_and_no_timeout() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sa.drop_tx = Some(drop_once(4, |_| true));
    writes(&mut p, 3, 3000);
    p.run();
    all_ok(&p, 3);
    assert_eq!(p.sb.stat(Stat::SeqNaksSent), 0, "B never saw a gap");
}

#[test]
fn a_dropped_read_request_and_read_response_are_sent_again() {
    for (on_a, nth) in [(true, 1), (false, 1), (false, 3)] {
        let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 0);
        let f = drop_once(nth, |pkt| {
            matches!(
                pkt.info().op,
                Operation::RdmaReadRequest | Operation::RdmaReadResponse
            )
        });
        if on_a {
            p.sa.drop_tx = Some(f);
        } else {
            p.sb.drop_tx = Some(f);
        }
        let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 3000);
        p.post_send(w, &[sge], &[]);
        p.run();
        assert_eq!(p.sa.tx_dropped + p.sb.tx_dropped, 1);
        all_ok(&p, 1);
        assert_eq!(
            bytes(&p.sa, 0x200, 0x2000_0000, 3000),
            bytes(&p.sb, 0x100, 0x1000_0000, 3000),
            "dropped on {} #{nth}",
            if on_a { "A" } else { "B" }
        );
    }
}

#[test]
fn a_dropped_ack_and_atomic_acknowledge_are_sent_again() {
    // The ACK of a lone WRITE, then an atomic's acknowledge.
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 0);
    p.sb.drop_tx = Some(drop_once(1, |_| true));
    writes(&mut p, 1, 100);
    p.run();
    assert_eq!(p.sb.tx_dropped, 1);
    all_ok(&p, 1);

    let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 0);
    p.sb.drop_tx = Some(drop_once(1, |_| true));
    let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 1, 1);
    a.remote_addr = 0x1003_0000;
    a.rkey = 0x100;
    a.compare_add = 3;
    p.post_send(
        a,
        &[Sge {
            addr: 0x2003_0000,
            length: 8,
            lkey: 0x200,
        }],
        &[],
    );
    p.run();
    assert_eq!(p.sb.tx_dropped, 1);
    all_ok(&p, 1);
    assert_eq!(p.sb.atomics_executed, 1, "executed once");
}

#[test]
fn many_transmit_drops_never_need_the_timer() {
    // Every 5th packet either end sends is dropped before it leaves.
    for mtu in [256u32, 1024] {
        let mut p = Pair::with(QpType::Rc, mtu, |c| c.timeout = 0);
        for s in [&mut p.sa, &mut p.sb] {
            let mut k = 0u32;
            s.drop_tx = Some(Box::new(move |_| {
                k += 1;
                k.is_multiple_of(5)
            }));
        }
        writes(&mut p, 4, 5000);
        for i in 0..4u64 {
            let (w, sge) = read_wr(
                10 + i,
                0x1020_0000 + (i << 16),
                0x2000_0000 + (i << 16),
                5000,
            );
            p.post_send(w, &[sge], &[]);
        }
        p.run();
        assert!(p.sa.tx_dropped + p.sb.tx_dropped > 10);
        let st = statuses(&p.sa);
        assert_eq!(st.len(), 8, "mtu {mtu}: {st:?}");
        assert!(st.iter().all(|s| s.1 == 0), "mtu {mtu}: {st:?}");
        for i in 0..4u64 {
            assert_eq!(
                bytes(&p.sa, 0x200, 0x2000_0000 + (i << 16), 5000),
                bytes(&p.sb, 0x100, 0x1020_0000 + (i << 16), 5000)
            );
        }
    }
}

#[test]
fn ud_loses_what_it_dropped_and_completes_once() {
    let mut p = Pair::new(QpType::Ud, 1024);
    p.sa.drop_tx = Some(drop_once(1, |_| true));
    p.sb.rq.push_back(recv(1, 0x2000_0000, 2048, 0x200));
    let mut w = signaled(wr_opcode::SEND, 1, 1);
    w.remote_qpn = 18;
    w.remote_qkey = 0x1111;
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 64,
            lkey: 0x100,
        }],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert!(p.sb.recv_cq.is_empty(), "lost, as on the wire");
}

#[test]
fn a_request_held_back_before_it_left_is_no_retransmission_and_keeps_the_rtt_sample() {
    // A request the sender's own stack (or the DCQCN pacer) held back never left: when it goes,
    // it is a first transmission. Before, `retransmits` counted every packet the pacer held
    // (as many as `rate_paced` in the incast benchmark, with nothing dropped on the wire), and
    // each one ended the round-trip sample under way.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sa.clock = true;
    p.sb.clock = true;
    p.sa.drop_tx = Some(drop_once(2, |_| true));
    writes(&mut p, 3, 3000);
    // The first packet asks for nothing and is not timed; the second is held back; send what
    // goes in one run, as the shell does before the pacer lets it go again.
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    assert_eq!(p.sa.tx_dropped, 1);
    p.run();
    all_ok(&p, 3);
    assert_eq!(p.sa.stat(Stat::Retransmits), 0, "the held packet went once");
    assert!(p.a.details().srtt_us > 0, "a round-trip sample was taken");
}
