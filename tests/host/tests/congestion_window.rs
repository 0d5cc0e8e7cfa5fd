//! Issue 29: the RC requester's window as the bottleneck's guard. A QP on a network path starts
//! with [`INITIAL_WINDOW`] packets and slow-starts from there; a CNP from the peer halves the
//! window once per window of data (RFC 3168, 6.1.2), and a loss in a window already cut for
//! congestion does not halve it again. DCQCN's rate (`dcqcn_props.rs`) bounds how fast packets
//! leave; the window bounds how many can wait in the bottleneck's queue.

use rrxe_host_tests::logic::{
    qp_state::{QpState, QpType},
    transport::*,
    wire::Packet,
};

mod common;
use common::*;

/// A pair whose requester A starts as on a network path.
fn network_pair() -> Pair {
    let mut p = Pair::new(QpType::Rc, 4096);
    p.a.set_initial_window(INITIAL_WINDOW);
    p
}

/// Carries A's packets to B and B's answers back, one exchange.
fn exchange(p: &mut Pair, sent: &[Vec<u8>]) {
    for b in sent {
        p.deliver(b, true);
    }
    for b in p.take_out(false) {
        p.deliver(&b, false);
    }
}

#[test]
fn a_network_path_starts_with_the_initial_window_and_slow_starts() {
    let mut p = network_pair();
    post_writes(&mut p, 32, 4096 * 16);
    assert_eq!(p.a.details().cwnd, INITIAL_WINDOW);
    let mut rounds = Vec::new();
    loop {
        let sent = send_held(&mut p, RC_WINDOW as usize);
        if sent.is_empty() {
            break;
        }
        rounds.push(sent.len());
        exchange(&mut p, &sent);
    }
    // Each round trip doubles the window until it is whole: 16, 32, 64, 128, 256, then the
    // remaining 16 of the 512 packets posted.
    assert_eq!(rounds, [16, 32, 64, 128, 256, 16], "{rounds:?}");
    assert_eq!(p.a.details().cwnd, RC_WINDOW);
    same_bytes(&p, 32 * 4096 * 16);
}

#[test]
fn the_packet_that_fills_the_initial_window_asks_for_an_ack() {
    // Otherwise a small window would stay closed until the ACK poll.
    let mut p = network_pair();
    post_writes(&mut p, 1, 4096 * 32);
    let sent = send_held(&mut p, 64);
    assert_eq!(sent.len(), INITIAL_WINDOW as usize);
    let last = Packet::parse(sent.last().unwrap()).unwrap();
    assert!(last.bth().ack_req, "the window's last packet asks");
}

#[test]
fn a_loopback_path_starts_with_the_whole_window() {
    // `Pair::new` is what the shell does for a loopback path.
    let mut p = Pair::new(QpType::Rc, 4096);
    post_writes(&mut p, 4, 4096 * 64);
    assert_eq!(send_held(&mut p, RC_WINDOW as usize).len(), 256);
}

#[test]
fn the_initial_window_comes_back_after_a_reset_and_after_a_flush() {
    let mut p = network_pair();
    post_writes(&mut p, 8, 4096 * 16);
    p.run();
    assert!(p.a.details().cwnd > INITIAL_WINDOW, "opened by the traffic");
    let mut s = Side::default();
    p.a.set_state(&mut s, QpState::Err, false);
    assert_eq!(p.a.details().cwnd, INITIAL_WINDOW, "after the flush");
    p.a.set_state(&mut s, QpState::Reset, false);
    assert_eq!(p.a.details().cwnd, INITIAL_WINDOW, "after the reset");
}

#[test]
fn a_cnp_halves_the_window_once_per_window_of_data() {
    let mut p = Pair::new(QpType::Rc, 4096);
    post_writes(&mut p, 32, 4096 * 16);
    // 12 whole messages, each of which asks for its ACK at its end.
    let first = send_held(&mut p, 192);
    assert_eq!(first.len(), 192);
    assert!(p.a.congestion_notified(), "the first notice cuts");
    let d = p.a.details();
    assert_eq!((d.cwnd, d.ssthresh), (96, 96), "half of the 192 in flight");
    assert!(
        !p.a.congestion_notified(),
        "a second notice in the same window does not cut again"
    );
    assert_eq!(p.a.details().cwnd, 96);
    // Nothing more goes out while 192 are in flight and the window is 96.
    assert!(send_held(&mut p, 16).is_empty());
    // Once everything in flight at the cut is acknowledged, the next notice cuts again.
    exchange(&mut p, &first);
    let d = p.a.details();
    assert!(
        d.cwnd > 96 && d.cwnd < RC_WINDOW,
        "congestion avoidance: {d:?}"
    );
    let next = send_held(&mut p, 64);
    assert!(!next.is_empty());
    assert!(p.a.congestion_notified(), "a new window, a new cut");
    assert!(p.a.details().cwnd < d.cwnd);
}

#[test]
fn a_loss_in_a_window_cut_for_a_cnp_does_not_halve_it_again() {
    let mut p = Pair::new(QpType::Rc, 4096);
    p.b.set_place_ahead(false);
    p.a.set_peer_mode(PeerMode::GoBackN);
    post_writes(&mut p, 32, 4096 * 16);
    let first = send_held(&mut p, 200);
    assert!(p.a.congestion_notified());
    assert_eq!(p.a.details().ssthresh, 100);
    // The fourth packet was lost (the queue that marked also dropped): B NAKs the gap.
    assert_eq!(deliver_but(&mut p, &first, 3), 1);
    let d = p.a.details();
    assert_eq!(
        d.ssthresh, 100,
        "the loss belongs to the congestion already answered: {d:?}"
    );
    // And the data still arrives whole.
    p.run();
    same_bytes(&p, 32 * 4096 * 16);
}

#[test]
fn a_cnp_after_a_loss_in_the_same_window_does_not_halve_it_again() {
    let mut p = Pair::new(QpType::Rc, 4096);
    p.b.set_place_ahead(false);
    p.a.set_peer_mode(PeerMode::GoBackN);
    post_writes(&mut p, 32, 4096 * 16);
    let first = send_held(&mut p, 200);
    assert_eq!(deliver_but(&mut p, &first, 3), 1);
    let before = p.a.details();
    assert!(before.ssthresh < RC_WINDOW, "the NAK cut: {before:?}");
    assert!(!p.a.congestion_notified(), "one cut per window");
    assert_eq!(p.a.details().ssthresh, before.ssthresh);
    p.run();
    same_bytes(&p, 32 * 4096 * 16);
}

#[test]
fn uc_and_ud_windows_ignore_congestion_notices() {
    for t in [QpType::Uc, QpType::Ud] {
        let mut p = Pair::new(t, 4096);
        assert!(!p.a.congestion_notified(), "{t:?}");
    }
}

#[test]
fn senders_starting_together_put_at_most_their_initial_windows_into_a_queue() {
    // Four QPs start writing 128 KiB each at once into one bottleneck that holds 400 KB (the
    // incast of tests/vm/cc.sh): before any answer, they emit 4 x 16 packets of 4 KiB, 256
    // KiB, not 4 x 32 (512 KiB, more than the queue holds).
    let mut queued = 0usize;
    for _ in 0..4 {
        let mut p = network_pair();
        post_writes(&mut p, 2, 65536);
        queued += send_held(&mut p, RC_WINDOW as usize)
            .iter()
            .map(Vec::len)
            .sum::<usize>();
    }
    assert!(queued < 400_000, "{queued} bytes");
    assert!(queued >= 4 * 16 * 4096, "{queued} bytes");
}

#[test]
fn after_a_cnp_the_window_grows_back_by_acknowledgements_only() {
    // The rate DCQCN recovers on its timers; the window only by what the peer acknowledges,
    // so a QP that stalled (a retransmission backed off) cannot come back with a whole window.
    let mut p = Pair::new(QpType::Rc, 4096);
    post_writes(&mut p, 32, 4096 * 16);
    let first = send_held(&mut p, 64);
    assert!(p.a.congestion_notified());
    let cut = p.a.details().cwnd;
    assert_eq!(cut, 32);
    p.tick(10_000_000);
    assert_eq!(p.a.details().cwnd, cut, "time alone opens nothing");
    exchange(&mut p, &first);
    assert!(p.a.details().cwnd <= cut + 2 * 64 / cut + 1);
}

#[test]
fn a_window_the_sender_does_not_fill_does_not_grow() {
    // RFC 7661: a QP held back by its DCQCN rate or its application (here one 4-packet WRITE
    // at a time) keeps 4 packets out. Their acknowledgements do not show that 16 fit, so the
    // window stays at 16 instead of growing to the whole RC window, which the QP could later
    // empty into a bottleneck's queue at once (the incast of `tests/vm/cc.sh` dropped 2
    // packets at the full queue in a CI run with windows grown that way).
    let mut p = network_pair();
    for _ in 0..64 {
        post_writes(&mut p, 1, 4096 * 4);
        let sent = send_held(&mut p, RC_WINDOW as usize);
        assert_eq!(sent.len(), 4);
        exchange(&mut p, &sent);
    }
    assert_eq!(p.a.details().cwnd, INITIAL_WINDOW);
    // A sender that fills it makes it grow as before: slow start doubles it per round trip.
    post_writes(&mut p, 8, 4096 * 16);
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let sent = send_held(&mut p, RC_WINDOW as usize);
        rounds.push(sent.len());
        exchange(&mut p, &sent);
    }
    assert_eq!(rounds, [16, 32, 64], "{rounds:?}");
    assert_eq!(p.a.details().cwnd, 128);
}

#[test]
fn a_sender_that_fills_half_its_window_still_slow_starts_to_twice_that() {
    // As Linux does in slow start: a window up to twice what was in flight when an ACK came
    // counts as used, so a sender that fills it in bursts is not held back by the rule above
    // (here two ACKs, the one that ACK_REQ_EVERY asks for and the WR's: 16 + 6 of the 12).
    let mut p = network_pair();
    post_writes(&mut p, 1, 4096 * 12);
    let sent = send_held(&mut p, RC_WINDOW as usize);
    assert_eq!(sent.len(), 12);
    exchange(&mut p, &sent);
    let cwnd = p.a.details().cwnd;
    assert!(cwnd > INITIAL_WINDOW && cwnd <= 24, "{cwnd}");
}
