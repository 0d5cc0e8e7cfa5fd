//! Issue 28, section 4: protocol defects found by reading the engine against the IBTA and
//! rdma_rxe 6.12, each reproduced by its packet sequence.

use rrxe_host_tests::logic::{
    opcode::Operation,
    psn::PSN_HALF,
    qp_state::{QpState, QpType},
    stats::NAMES,
    transport::*,
    wire::{self, NakCode, Packet, Syndrome},
};
use rrxe_host_tests::uapi::{SendWqe, Sge};

mod common;
use common::*;

fn info_from_a() -> RxInfo {
    RxInfo {
        grh: [0; GRH_LEN],
        src: GID_A,
        dst: GID_B,
    }
}

/// Hands a packet from A to B and lets B answer (up to `READ_BURST` packets).
fn to_b(p: &mut Pair, bytes: &[u8]) {
    let pkt = Packet::parse(bytes).unwrap();
    p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &info_from_a());
    p.b.run_responder(&mut p.sb, &mut p.scratch, READ_BURST);
    p.b.flush_ack(&mut p.sb, &mut p.scratch);
}

/// A's packets so far (drained).
fn from_a(p: &mut Pair) -> Vec<Vec<u8>> {
    p.sa.out.drain(..).map(|(b, _)| b).collect()
}

/// The NAK codes in B's packets so far (drained).
fn naks_from_b(p: &mut Pair) -> Vec<NakCode> {
    p.sb.out
        .drain(..)
        .filter_map(|(b, _)| {
            let pkt = Packet::parse(&b).unwrap();
            match Syndrome::decode(pkt.aeth()?.syndrome) {
                Syndrome::Nak(c) => Some(c),
                _ => None,
            }
        })
        .collect()
}

/// Sets the RETH DMA length of a request packet (BTH, then the RETH: va, rkey, length).
fn set_reth_len(b: &mut [u8], len: u32) {
    b[wire::BTH_LEN + 12..wire::BTH_LEN + 16].copy_from_slice(&len.to_be_bytes());
}

fn write_wr(wr_id: u64, op: u32, len: u32) -> (SendWqe, Sge) {
    let mut w = signaled(op, wr_id, 1);
    w.remote_addr = 0x1010_0000;
    w.rkey = 0x100;
    (
        w,
        Sge {
            addr: 0x1000_0000,
            length: len,
            lkey: 0x100,
        },
    )
}

/// B got a request it must refuse with NAK `code`: it went to ERR with the event `ev`.
fn assert_refused(p: &mut Pair, code: NakCode, ev: Event) {
    assert_eq!(naks_from_b(p), vec![code]);
    assert_eq!(p.b.state(), QpState::Err);
    assert_eq!(p.sb.events, vec![ev]);
}

// ---- C9-92: a WRITE's payload is its RETH DMA length ----

#[test]
fn a_write_shorter_than_its_reth_length_is_refused() {
    // RDMA WRITE only, 100 bytes of payload under a RETH that says 200.
    let mut p = Pair::new(QpType::Rc, 1024);
    let (w, s) = write_wr(1, wr_opcode::RDMA_WRITE, 100);
    p.post_send(w, &[s], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let mut pkts = from_a(&mut p);
    set_reth_len(&mut pkts[0], 200);
    to_b(&mut p, &pkts[0]);
    assert_refused(&mut p, NakCode::InvalidRequest, Event::QpReqErr);
}

#[test]
fn a_multi_packet_write_whose_last_packet_comes_short_is_refused() {
    // 2500 bytes (1024 + 1024 + 452) under a RETH that says 3000 (the last packet owes 952).
    let mut p = Pair::new(QpType::Rc, 1024);
    let (w, s) = write_wr(1, wr_opcode::RDMA_WRITE, 2500);
    p.post_send(w, &[s], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let mut pkts = from_a(&mut p);
    assert_eq!(pkts.len(), 3);
    set_reth_len(&mut pkts[0], 3000);
    for b in &pkts {
        to_b(&mut p, b);
    }
    assert_refused(&mut p, NakCode::InvalidRequest, Event::QpReqErr);
}

#[test]
fn a_short_write_with_immediate_is_refused_not_reported_at_its_reth_length() {
    // It used to complete the receive with SUCCESS and byte_len 200 (the RETH's), with 100
    // bytes placed.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(7, 0x2000_0000, 4096, 0x200));
    let (w, s) = write_wr(1, wr_opcode::RDMA_WRITE_WITH_IMM, 100);
    p.post_send(w, &[s], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let mut pkts = from_a(&mut p);
    set_reth_len(&mut pkts[0], 200);
    to_b(&mut p, &pkts[0]);
    assert_refused(&mut p, NakCode::InvalidRequest, Event::QpReqErr);
    assert!(p.sb.recv_cq.iter().all(|c| c.status != wc_status::SUCCESS));
    // The right length completes with it.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(7, 0x2000_0000, 4096, 0x200));
    let (w, s) = write_wr(1, wr_opcode::RDMA_WRITE_WITH_IMM, 100);
    p.post_send(w, &[s], &[]);
    p.run();
    assert_eq!(p.sb.recv_cq.len(), 1);
    assert_eq!(p.sb.recv_cq[0].status, wc_status::SUCCESS);
    assert_eq!(p.sb.recv_cq[0].byte_len, 100);
}

#[test]
fn a_write_with_a_reth_length_beyond_2_31_is_refused() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let (w, s) = write_wr(1, wr_opcode::RDMA_WRITE, 100);
    p.post_send(w, &[s], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let mut pkts = from_a(&mut p);
    set_reth_len(&mut pkts[0], 0x8000_0001);
    to_b(&mut p, &pkts[0]);
    assert_refused(&mut p, NakCode::InvalidRequest, Event::QpReqErr);
}

// ---- C9-94: a READ's DMA length is at most 2^31; and its responses fit half the PSNs ----

fn one_read(mtu: u32, len: u32) -> (Pair, Vec<u8>) {
    let mut p = Pair::new(QpType::Rc, mtu);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 4096);
    p.post_send(w, &[sge], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let mut pkts = from_a(&mut p);
    set_reth_len(&mut pkts[0], len);
    (p, pkts.remove(0))
}

#[test]
fn a_read_longer_than_2_31_is_refused() {
    let (mut p, req) = one_read(1024, 0x8000_0001);
    to_b(&mut p, &req);
    assert_refused(&mut p, NakCode::InvalidRequest, Event::QpReqErr);
    // 2^31 itself is a length the IBTA allows (here beyond the MR: an access error).
    let (mut p, req) = one_read(1024, 0x8000_0000);
    to_b(&mut p, &req);
    assert_refused(&mut p, NakCode::RemoteAccessError, Event::QpAccessErr);
}

#[test]
fn a_read_of_half_the_psn_space_is_refused() {
    // 2^31 bytes at a 256-byte MTU: 2^23 response packets, half the PSN space. The responder
    // used to record it and move its expected PSN by 2^23, so that the READ's own first PSN
    // (and a duplicate of it) no longer counted as old.
    let (mut p, req) = one_read(256, 0x8000_0000);
    to_b(&mut p, &req);
    assert_refused(&mut p, NakCode::InvalidRequest, Event::QpReqErr);
    // One packet less fits (here beyond the MR: an access error, not a length error).
    let (mut p, req) = one_read(256, 0x8000_0000 - 256);
    to_b(&mut p, &req);
    assert_refused(&mut p, NakCode::RemoteAccessError, Event::QpAccessErr);
}

#[test]
fn the_requester_keeps_its_outstanding_psns_within_half_the_space() {
    // A READ that cannot fit fails before it is sent...
    let mut p = Pair::new(QpType::Rc, 256);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 0x8000_0000);
    p.post_send(w, &[sge], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    assert!(from_a(&mut p).is_empty());
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::LOC_LEN_ERR)]);
    // ...and one that fits alone waits for what is before it to be acknowledged.
    let mut p = Pair::new(QpType::Rc, 256);
    let (w, s) = write_wr(1, wr_opcode::RDMA_WRITE, 64);
    p.post_send(w, &[s], &[]);
    let (w, sge) = read_wr(2, 0x1000_0000, 0x2000_0000, PSN_HALF * 256 - 256);
    p.post_send(w, &[sge], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let pkts = from_a(&mut p);
    assert_eq!(pkts.len(), 1, "the WRITE only");
    to_b(&mut p, &pkts[0]);
    let acks: Vec<_> = p.sb.out.drain(..).map(|(b, _)| b).collect();
    for b in &acks {
        p.deliver(b, false);
    }
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let pkts = from_a(&mut p);
    assert_eq!(pkts.len(), 1);
    let pkt = Packet::parse(&pkts[0]).unwrap();
    assert_eq!(pkt.info().op, Operation::RdmaReadRequest);
}

// ---- the Solicited Event bit ----

#[test]
fn the_solicited_event_bit_is_only_on_messages_that_consume_a_receive() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let solicited = |mut w: SendWqe| {
        w.send_flags |= send_flags::SOLICITED;
        w
    };
    let (w, s) = read_wr(1, 0x1000_0000, 0x2000_0000, 3000);
    p.post_send(solicited(w), &[s], &[]);
    let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 2, 1);
    a.remote_addr = 0x1003_0000;
    a.rkey = 0x100;
    let s8 = Sge {
        addr: 0x2003_0000,
        length: 8,
        lkey: 0x200,
    };
    p.post_send(solicited(a), &[s8], &[]);
    let (w, s) = write_wr(3, wr_opcode::RDMA_WRITE, 3000);
    p.post_send(solicited(w), &[s], &[]);
    let (w, s) = write_wr(4, wr_opcode::RDMA_WRITE_WITH_IMM, 3000);
    p.post_send(solicited(w), &[s], &[]);
    let (mut w, s) = write_wr(5, wr_opcode::SEND, 3000);
    w.remote_addr = 0;
    p.post_send(solicited(w), &[s], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let se: Vec<(Operation, bool, bool)> = from_a(&mut p)
        .iter()
        .map(|b| {
            let pkt = Packet::parse(b).unwrap();
            (pkt.info().op, pkt.info().position.is_end(), pkt.bth().se)
        })
        .collect();
    let with_se: Vec<_> = se.iter().filter(|x| x.2).collect();
    assert_eq!(
        with_se,
        vec![
            &(Operation::RdmaWrite, true, true),
            &(Operation::Send, true, true)
        ],
        "{se:?}"
    );
    // The WRITE with SE is the one with immediate (its last packet).
    let last_writes: Vec<_> = se
        .iter()
        .filter(|x| x.0 == Operation::RdmaWrite && x.1)
        .map(|x| x.2)
        .collect();
    assert_eq!(last_writes, vec![false, true]);
}

// ---- max_rd_atomic 0 ----

#[test]
fn max_rd_atomic_0_sends_no_read_until_a_modify_raises_it() {
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.max_rd_atomic = 0);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 3000);
    p.post_send(w, &[sge], &[]);
    p.run();
    assert!(p.sa.send_cq.is_empty());
    assert_eq!(p.carried, 0, "nothing went out");
    assert_eq!(p.a.details().sq_unsent, 1);
    let mut c = *p.a.config();
    c.max_rd_atomic = 1;
    p.a.set_config(c, false, false);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::SUCCESS)]);
}

// ---- the retry counters start over only when a modify sets them ----

#[test]
fn a_modify_that_does_not_set_the_retry_counts_keeps_the_retries_in_use() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let (w, s) = write_wr(1, wr_opcode::RDMA_WRITE, 100);
    p.post_send(w, &[s], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    from_a(&mut p); // lost
    p.a.retry_timer_expired(&mut p.sa);
    p.a.retry_timer_expired(&mut p.sa);
    assert_eq!(p.a.details().retry_left, 5);
    // A modify of something else (say the timeout): the retries spent stay spent.
    let mut c = *p.a.config();
    c.timeout = 15;
    p.a.set_config(c, false, false);
    assert_eq!(p.a.details().retry_left, 5);
    assert_eq!(p.a.details().rnr_left, 7);
    // A modify that sets retry_cnt starts them over.
    p.a.set_config(c, true, false);
    assert_eq!(p.a.details().retry_left, 7);
}

#[test]
fn rnr_retries_in_use_survive_a_modify_that_does_not_set_rnr_retry() {
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.rnr_retry = 3);
    let (mut w, s) = write_wr(1, wr_opcode::SEND, 10);
    w.remote_addr = 0;
    p.post_send(w, &[s], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let pkts = from_a(&mut p);
    to_b(&mut p, &pkts[0]); // no receive posted: RNR NAK
    let naks: Vec<_> = p.sb.out.drain(..).map(|(b, _)| b).collect();
    p.deliver(&naks[0], false);
    assert_eq!(p.a.details().rnr_left, 2);
    let c = *p.a.config();
    p.a.set_config(c, false, false);
    assert_eq!(p.a.details().rnr_left, 2);
    p.a.set_config(c, false, true);
    assert_eq!(p.a.details().rnr_left, 3);
}

// ---- responder errors raise their affiliated events ----

#[test]
fn a_responder_access_error_raises_qp_access_err() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let (mut w, s) = write_wr(1, wr_opcode::RDMA_WRITE, 100);
    w.rkey = 0x999;
    p.post_send(w, &[s], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
    assert_eq!(p.sb.events, vec![Event::QpAccessErr]);
    assert!(
        p.sa.events.is_empty(),
        "the requester learns it from its completion"
    );
}

#[test]
fn a_responder_invalid_request_raises_qp_req_err() {
    // An opcode out of sequence (a WRITE MIDDLE with no message in progress).
    let mut p = Pair::new(QpType::Rc, 1024);
    let (w, s) = write_wr(1, wr_opcode::RDMA_WRITE, 3000);
    p.post_send(w, &[s], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let pkts = from_a(&mut p);
    let mut mid = pkts[1].clone();
    // Its PSN as the first one's: in sequence, but no message in progress.
    mid[9..12].copy_from_slice(&pkts[0][9..12]);
    to_b(&mut p, &mid);
    assert_refused(&mut p, NakCode::InvalidRequest, Event::QpReqErr);
}

// ---- a CNP is no bad header ----

#[test]
fn a_received_cnp_is_counted_as_such() {
    // BTH (opcode 0x81, dest QP, PSN 0), 16 reserved bytes, ICRC (RoCEv2 Annex A17).
    let mut cnp = vec![0u8; wire::BTH_LEN + 16 + 4];
    cnp[0] = wire::CNP_OPCODE;
    cnp[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    cnp[5..8].copy_from_slice(&[0, 0, 18]);
    assert!(Packet::parse(&cnp).is_err(), "no request or response");
    assert_eq!(wire::unparsed_stat(&cnp), Stat::RxCnps);
    assert_eq!(NAMES[Stat::RxCnps.index()], "rx_cnps\0");
    // Anything else that does not parse is a bad header.
    let mut junk = cnp.clone();
    junk[0] = 0x82;
    assert_eq!(wire::unparsed_stat(&junk), Stat::RxBadHeaders);
    assert_eq!(wire::unparsed_stat(&[]), Stat::RxBadHeaders);
}

// ---- responder resources: max_dest_rd_atomic rounded up to a power of two ----

#[test]
fn responder_resources_are_rounded_up_to_a_power_of_two() {
    // rdma_rxe rounds max_rd_atomic up to a power of two: a requester set to 3 keeps 4 READs
    // outstanding. B, set to max_dest_rd_atomic 3, must have room for all 4 while the first
    // is still being answered (it used to NAK the fourth with Invalid Request).
    let mut p = Pair::with(QpType::Rc, 1024, |c| {
        c.max_rd_atomic = 4;
        c.max_dest_rd_atomic = 3;
    });
    for i in 0..4u64 {
        let (w, sge) = read_wr(
            i + 1,
            0x1000_0000 + (i << 16),
            0x2000_0000 + (i << 16),
            16 * 1024,
        );
        p.post_send(w, &[sge], &[]);
    }
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    let reqs = from_a(&mut p);
    assert_eq!(reqs.len(), 4);
    for r in &reqs {
        let pkt = Packet::parse(r).unwrap();
        p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &info_from_a());
        p.b.run_responder(&mut p.sb, &mut p.scratch, 2);
    }
    assert_eq!(p.b.state(), QpState::Rts);
    assert!(naks_from_b_peek(&p).is_empty());
    p.run();
    assert_eq!(statuses(&p.sa), (1..=4).map(|i| (i, 0)).collect::<Vec<_>>());
    // 5 rounds up to 8; beyond the resources there are, no more than they.
    for (set, room) in [(5u8, 8usize), (1, 1), (100, 16)] {
        let mut p = Pair::with(QpType::Rc, 1024, |c| {
            c.max_rd_atomic = 16;
            c.max_dest_rd_atomic = set;
        });
        for i in 0..(room as u64 + 1).min(16) {
            let (w, sge) = read_wr(
                i + 1,
                0x1000_0000 + (i << 16),
                0x2000_0000 + (i << 16),
                16 * 1024,
            );
            p.post_send(w, &[sge], &[]);
        }
        p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
        let reqs = from_a(&mut p);
        let mut refused_at = None;
        for (k, r) in reqs.iter().enumerate() {
            let pkt = Packet::parse(r).unwrap();
            p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &info_from_a());
            if p.b.state() == QpState::Err && refused_at.is_none() {
                refused_at = Some(k);
            }
        }
        let want = (room < 16).then_some(room);
        assert_eq!(refused_at, want, "max_dest_rd_atomic {set}");
    }
}

fn naks_from_b_peek(p: &Pair) -> Vec<NakCode> {
    p.sb.out
        .iter()
        .filter_map(|(b, _)| {
            let pkt = Packet::parse(b).unwrap();
            match Syndrome::decode(pkt.aeth()?.syndrome) {
                Syndrome::Nak(c) => Some(c),
                _ => None,
            }
        })
        .collect()
}
