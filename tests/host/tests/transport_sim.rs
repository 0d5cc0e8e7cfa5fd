//! The transport engine driven by a simulated wire, the basics (operations, errors, forged
//! packets; the other themes are transport_timeouts.rs, transport_acks.rs and
//! transport_props.rs): two QPs (RC, UC or UD) with their own
//! memory, receive queues and CQs, packets carried between them in order, or through a seeded
//! faulty wire (loss, duplication, reordering; corruption is loss, as the ICRC check in the
//! shell makes it), or with chosen packets dropped; every byte checked. Timers fire when the
//! wire is quiet: the retransmit timeout is always longer than a round trip here.

use proptest::prelude::*;
use rrxe_host_tests::logic::{
    opcode::Operation,
    psn::Psn,
    qp_state::{QpState, QpType},
    transport::*,
    wire::Packet,
};
use rrxe_host_tests::uapi::{SendWqe, Sge};

mod common;
use common::*;

#[test]
fn rc_send_segments_and_completes() {
    for len in [0u32, 1, 1023, 1024, 1025, 5000, 65536] {
        let mut p = Pair::new(QpType::Rc, 1024);
        p.sb.rq.push_back(recv(7, 0x2000_0000, 70000, 0x200));
        p.post_send(
            signaled(wr_opcode::SEND, 1, 1),
            &[Sge {
                addr: 0x1000_0010,
                length: len,
                lkey: 0x100,
            }],
            &[],
        );
        p.run();
        assert_eq!(p.sa.send_cq.len(), 1, "len {len}");
        assert_eq!(p.sa.send_cq[0].status, wc_status::SUCCESS);
        assert_eq!(p.sb.recv_cq.len(), 1);
        assert_eq!(p.sb.recv_cq[0].byte_len, len);
        assert_eq!(p.sb.recv_cq[0].wr_id, 7);
        assert_eq!(
            bytes(&p.sb, 0x200, 0x2000_0000, len as usize),
            bytes(&p.sa, 0x100, 0x1000_0010, len as usize)
        );
    }
}

#[test]
fn rc_write_read_atomics() {
    let mut p = Pair::new(QpType::Rc, 256);
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 2);
    w.remote_addr = 0x1000_1000;
    w.rkey = 0x100;
    p.post_send(
        w,
        &[
            Sge {
                addr: 0x1000_0000,
                length: 300,
                lkey: 0x100,
            },
            Sge {
                addr: 0x1000_2000,
                length: 500,
                lkey: 0x100,
            },
        ],
        &[],
    );
    let mut r = signaled(wr_opcode::RDMA_READ, 2, 1);
    r.remote_addr = 0x1000_3000;
    r.rkey = 0x100;
    p.post_send(
        r,
        &[Sge {
            addr: 0x2000_0000,
            length: 1000,
            lkey: 0x200,
        }],
        &[],
    );
    let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 3, 1);
    a.remote_addr = 0x1000_0008;
    a.rkey = 0x100;
    a.compare_add = 5;
    p.post_send(
        a,
        &[Sge {
            addr: 0x2000_1000,
            length: 8,
            lkey: 0x200,
        }],
        &[],
    );
    let before = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0008, 8).try_into().unwrap());
    p.run();
    let st: Vec<_> = p.sa.send_cq.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, 0), (2, 0), (3, 0)]);
    let mut src = bytes(&p.sa, 0x100, 0x1000_0000, 300);
    src.extend(bytes(&p.sa, 0x100, 0x1000_2000, 500));
    assert_eq!(bytes(&p.sb, 0x100, 0x1000_1000, 800), src);
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 1000),
        bytes(&p.sb, 0x100, 0x1000_3000, 1000)
    );
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_1000, 8),
        before.to_ne_bytes().to_vec()
    );
    let after = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0008, 8).try_into().unwrap());
    assert_eq!(after, before.wrapping_add(5));
}

#[test]
fn rc_big_read_is_paced_and_acks_stay_in_order() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let mut r = signaled(wr_opcode::RDMA_READ, 1, 1);
    r.remote_addr = 0x1000_0000;
    r.rkey = 0x100;
    p.post_send(
        r,
        &[Sge {
            addr: 0x2000_0000,
            length: 1 << 20,
            lkey: 0x200,
        }],
        &[],
    );
    p.sb.rq.push_back(recv(5, 0x2010_0000, 100, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 2, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    // One requester step: the READ request and the SEND reach the responder, which owes
    // 1024 READ response packets but sends at most READ_BURST of them at once.
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let pkts: Vec<_> = p.sa.out.drain(..).collect();
    for (b, _) in &pkts {
        let pkt = Packet::parse(b).unwrap();
        p.b.rx(
            &mut p.sb,
            &mut p.scratch,
            &pkt,
            &RxInfo {
                grh: [0; GRH_LEN],
                src: GID_A,
                dst: GID_B,
            },
        );
        p.b.run_responder(&mut p.sb, &mut p.scratch, READ_BURST);
        p.b.flush_ack(&mut p.sb, &mut p.scratch);
    }
    assert!(!p.sb.out.is_empty());
    assert!(
        p.sb.out.len() as u32 <= READ_BURST,
        "{} packets at once",
        p.sb.out.len()
    );
    assert!(p.b.responder_pending());
    // No ACK overtakes the owed READ responses.
    assert!(p
        .sb
        .out
        .iter()
        .all(|(b, _)| Packet::parse(b).unwrap().info().op
            != rrxe_host_tests::logic::opcode::Operation::Acknowledge));
    p.run();
    assert_eq!(
        p.sa.send_cq
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect::<Vec<_>>(),
        vec![(1, 0), (2, 0)]
    );
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 1 << 20),
        bytes(&p.sb, 0x100, 0x1000_0000, 1 << 20)
    );
}

#[test]
fn rc_bad_rkey_naks_and_flushes() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 1);
    w.remote_addr = 0x1000_0000;
    w.rkey = 0x999;
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 64,
            lkey: 0x100,
        }],
        &[],
    );
    p.post_send(signaled(wr_opcode::SEND, 2, 0), &[], &[]);
    p.run();
    let st: Vec<_> = p.sa.send_cq.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        st,
        vec![(1, wc_status::REM_ACCESS_ERR), (2, wc_status::WR_FLUSH_ERR)]
    );
    assert_eq!(p.a.state(), QpState::Err);
}

#[test]
fn rc_bad_lkey_is_local_protection_error() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(7, 0x2000_0000, 100, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 64,
            lkey: 0x777,
        }],
        &[],
    );
    p.run();
    assert_eq!(p.sa.send_cq[0].status, wc_status::LOC_PROT_ERR);
    assert_eq!(p.sa.events, vec![Event::QpFatal]);
}

#[test]
fn rc_rnr_then_recovers() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 3000,
            lkey: 0x100,
        }],
        &[],
    );
    // No receive posted: RNR NAK, the timer fires (the sim fires at once) ... post it late.
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let pkts: Vec<_> = p.sa.out.drain(..).collect();
    for (b, _) in &pkts {
        let pkt = Packet::parse(b).unwrap();
        p.b.rx(
            &mut p.sb,
            &mut p.scratch,
            &pkt,
            &RxInfo {
                grh: [0; GRH_LEN],
                src: GID_A,
                dst: GID_B,
            },
        );
    }
    assert_eq!(p.b.counters.get(Stat::RxNoBuffer), 1);
    p.sb.rq.push_back(recv(9, 0x2000_0000, 4000, 0x200));
    p.run();
    assert_eq!(p.sa.send_cq.len(), 1);
    assert_eq!(p.sa.send_cq[0].status, 0);
    assert_eq!(p.sb.recv_cq[0].byte_len, 3000);
    assert!(p.a.counters.get(Stat::RnrNaksRcvd) >= 1);
}

#[test]
fn rc_lost_packet_recovers_through_sequence_nak() {
    let mut p = Pair::new(QpType::Rc, 256);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_2000, 4096, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 2000,
            lkey: 0x100,
        }],
        &[],
    );
    p.post_send(
        signaled(wr_opcode::SEND, 2, 1),
        &[Sge {
            addr: 0x1000_4000,
            length: 2000,
            lkey: 0x100,
        }],
        &[],
    );
    p.drop_nth = Some(3);
    p.run();
    assert_eq!(
        p.sa.send_cq.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![0, 0]
    );
    assert_eq!(
        bytes(&p.sb, 0x200, 0x2000_2000, 2000),
        bytes(&p.sa, 0x100, 0x1000_4000, 2000)
    );
    assert!(p.b.counters.get(Stat::SeqNaksSent) >= 1);
}

#[test]
fn uc_gap_drops_whole_message() {
    let mut p = Pair::new(QpType::Uc, 256);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_2000, 4096, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 1000,
            lkey: 0x100,
        }],
        &[],
    );
    p.post_send(
        signaled(wr_opcode::SEND, 2, 1),
        &[Sge {
            addr: 0x1000_4000,
            length: 1000,
            lkey: 0x100,
        }],
        &[],
    );
    p.drop_nth = Some(1);
    p.run();
    // Both sends complete locally; only the second message arrives, into the first WQE.
    assert_eq!(p.sa.send_cq.len(), 2);
    assert_eq!(p.sb.recv_cq.len(), 1);
    assert_eq!(p.sb.recv_cq[0].wr_id, 1);
    assert_eq!(p.sb.recv_cq[0].byte_len, 1000);
    assert_eq!(
        bytes(&p.sb, 0x200, 0x2000_0000, 1000),
        bytes(&p.sa, 0x100, 0x1000_4000, 1000)
    );
}

#[test]
fn ud_grh_and_qkey() {
    let mut p = Pair::new(QpType::Ud, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 2000, 0x200));
    let mut w = signaled(wr_opcode::SEND_WITH_IMM, 1, 1);
    w.remote_qpn = 18;
    w.remote_qkey = 0x1111;
    w.imm_data = 0x1234_5678;
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 500,
            lkey: 0x100,
        }],
        &[],
    );
    let mut bad = w;
    bad.remote_qkey = 0x2222;
    p.post_send(
        bad,
        &[Sge {
            addr: 0x1000_0000,
            length: 500,
            lkey: 0x100,
        }],
        &[],
    );
    p.run();
    assert_eq!(p.sa.send_cq.len(), 2);
    assert_eq!(p.sb.recv_cq.len(), 1);
    let c = p.sb.recv_cq[0];
    assert_eq!(c.byte_len, 540);
    assert_eq!(c.src_qp, 17);
    assert_eq!(c.imm_data, 0x1234_5678);
    assert_eq!(c.wc_flags, wc_flags::GRH | wc_flags::WITH_IMM);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_0000, 40), vec![0x47; 40]);
    assert_eq!(
        bytes(&p.sb, 0x200, 0x2000_0028, 500),
        bytes(&p.sa, 0x100, 0x1000_0000, 500)
    );
    assert_eq!(p.b.counters.get(Stat::RxDroppedMsgs), 1);
    // Larger than the MTU: refused locally.
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 1025,
            lkey: 0x100,
        }],
        &[],
    );
    assert_eq!(p.sa.send_cq[2].status, wc_status::LOC_LEN_ERR);
}

#[test]
fn inline_send_and_unsignaled() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 200, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_1000, 200, 0x200));
    let mut w = SendWqe {
        wr_id: 1,
        opcode: wr_opcode::SEND,
        send_flags: send_flags::INLINE,
        inline_len: 100,
        ..SendWqe::default()
    };
    p.post_send(w, &[], &[0xab; 100]);
    w.wr_id = 2;
    w.send_flags |= send_flags::SIGNALED;
    p.post_send(w, &[], &[0xcd; 100]);
    p.run();
    assert_eq!(p.sa.send_cq.len(), 1);
    assert_eq!(p.sa.send_cq[0].wr_id, 2);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_0000, 100), vec![0xab; 100]);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_1000, 100), vec![0xcd; 100]);
}

#[test]
fn recv_too_small_is_length_error() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 100, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 200,
            lkey: 0x100,
        }],
        &[],
    );
    p.run();
    assert_eq!(p.sb.recv_cq[0].status, wc_status::LOC_LEN_ERR);
    assert_eq!(p.sa.send_cq[0].status, wc_status::REM_INV_REQ_ERR);
}

#[test]
fn destroy_flushes_outstanding() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 100, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    p.post_send(
        signaled(wr_opcode::SEND, 2, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    p.a.set_state(&mut p.sa, QpState::Err, false);
    p.b.set_state(&mut p.sb, QpState::Err, false);
    assert_eq!(
        p.sa.send_cq.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![5, 5]
    );
    assert_eq!(
        p.sb.recv_cq.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![5]
    );
}

#[test]
fn psn_wraps_during_transfer() {
    let mut p = Pair::new(QpType::Rc, 256);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 1 << 20, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 100_000,
            lkey: 0x100,
        }],
        &[],
    );
    p.run();
    assert_eq!(p.sa.send_cq[0].status, 0);
    assert!(p.a.sq_psn() < 0x1000, "wrapped: {:#x}", p.a.sq_psn());
    let _ = Psn::ZERO;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(prop_cases(24)))]
    #[test]
    fn random_ops_move_every_byte(ops in proptest::collection::vec((0u8..5, 0u32..20_000, 1u32..4), 1..12), mtu_i in 0usize..4) {
        let mtu = [256u32, 512, 1024, 4096][mtu_i];
        let mut p = Pair::new(QpType::Rc, mtu);
        let mut expect = Vec::new();
        let mut roff = 0u64;
        for (i, (op, len, nsge)) in ops.iter().enumerate() {
            let len = *len;
            let per = len / nsge;
            let mut sges = Vec::new();
            let mut left = len;
            for k in 0..*nsge {
                let l = if k + 1 == *nsge { left } else { per };
                left -= l;
                sges.push(Sge { addr: 0x1000_0000 + (k as u64) * 0x1_0000 + i as u64, length: l, lkey: 0x100 });
            }
            let dst = 0x1010_0000 + roff;
            match op {
                0 | 1 => {
                    p.sb.rq.push_back(recv(i as u64, 0x2000_0000 + roff, len, 0x200));
                    let mut w = signaled(if *op == 0 { wr_opcode::SEND } else { wr_opcode::SEND_WITH_IMM }, i as u64, *nsge);
                    w.imm_data = i as u32;
                    p.post_send(w, &sges, &[]);
                    expect.push((0u8, 0x2000_0000 + roff, sges.clone()));
                }
                2 | 3 => {
                    let mut w = signaled(wr_opcode::RDMA_WRITE, i as u64, *nsge);
                    w.remote_addr = dst;
                    w.rkey = 0x100;
                    p.post_send(w, &sges, &[]);
                    expect.push((1, dst, sges.clone()));
                }
                _ => {
                    let mut w = signaled(wr_opcode::RDMA_READ, i as u64, 1);
                    w.remote_addr = 0x1000_0000 + roff;
                    w.rkey = 0x100;
                    let local = 0x2020_0000 + roff;
                    p.post_send(w, &[Sge { addr: local, length: len, lkey: 0x200 }], &[]);
                    expect.push((2, local, vec![Sge { addr: 0x1000_0000 + roff, length: len, lkey: 0 }]));
                }
            }
            roff += u64::from(len) + 64;
        }
        p.run();
        prop_assert_eq!(p.sa.send_cq.len(), ops.len());
        prop_assert!(p.sa.send_cq.iter().all(|c| c.status == 0));
        for (kind, at, sges) in expect {
            let mut src = Vec::new();
            for s in &sges {
                let from = if kind == 2 { &p.sb } else { &p.sa };
                src.extend(bytes(from, 0x100, s.addr, s.length as usize));
            }
            let got = match kind {
                0 => bytes(&p.sb, 0x200, at, src.len()),
                1 => bytes(&p.sb, 0x100, at, src.len()),
                _ => bytes(&p.sa, 0x200, at, src.len()),
            };
            prop_assert_eq!(got, src);
        }
    }
}

#[test]
fn fenced_wr_waits_for_earlier_reads() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(9, 0x2010_0000, 100, 0x200));
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 4000);
    p.post_send(w, &[sge], &[]);
    let mut s = signaled(wr_opcode::SEND, 2, 1);
    s.send_flags |= send_flags::FENCE;
    p.post_send(
        s,
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let ops: Vec<_> =
        p.sa.out
            .iter()
            .map(|(b, _)| Packet::parse(b).unwrap().info().op)
            .collect();
    assert_eq!(
        ops,
        vec![Operation::RdmaReadRequest],
        "the fenced SEND waits"
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0)]);
}

#[test]
fn forged_packets_from_elsewhere_are_dropped() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let (b, _) = p.sa.out.pop().unwrap();
    let pkt = Packet::parse(&b).unwrap();
    let mut evil = GID_B;
    evil[15] = 66;
    for (src, dst) in [(evil, GID_B), (GID_A, evil)] {
        p.b.rx(
            &mut p.sb,
            &mut p.scratch,
            &pkt,
            &RxInfo {
                grh: [0; GRH_LEN],
                src,
                dst,
            },
        );
    }
    assert_eq!(p.sb.stat(Stat::RxAdmissionDrops), 2);
    assert!(p.sb.recv_cq.is_empty());
    assert_eq!(p.sb.rq.len(), 1);
    // A forged NAK does not kill the requester either.
    p.deliver(&b, true);
    p.b.flush_ack(&mut p.sb, &mut p.scratch);
    let (ack, _) = p.sb.out.pop().unwrap();
    let ack = Packet::parse(&ack).unwrap();
    p.a.rx(
        &mut p.sa,
        &mut p.scratch,
        &ack,
        &RxInfo {
            grh: [0; GRH_LEN],
            src: evil,
            dst: GID_A,
        },
    );
    assert_eq!(p.sa.stat(Stat::RxAdmissionDrops), 1);
    assert!(p.sa.send_cq.is_empty());
    p.a.rx(
        &mut p.sa,
        &mut p.scratch,
        &ack,
        &RxInfo {
            grh: [0; GRH_LEN],
            src: GID_B,
            dst: GID_A,
        },
    );
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
}

#[test]
fn local_error_completes_after_older_wrs_in_sq_order() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    // WR 1 is in flight when WR 2 fails its lkey check.
    p.post_send(
        signaled(wr_opcode::SEND, 2, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x777,
        }],
        &[],
    );
    p.post_send(
        signaled(wr_opcode::SEND, 3, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    assert_eq!(
        statuses(&p.sa),
        vec![
            (1, wc_status::WR_FLUSH_ERR),
            (2, wc_status::LOC_PROT_ERR),
            (3, wc_status::WR_FLUSH_ERR)
        ]
    );
}

#[test]
fn nak_is_charged_to_the_wr_that_caused_it() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let (r, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 100);
    p.post_send(r, &[sge], &[]);
    let mut w = signaled(wr_opcode::RDMA_WRITE, 2, 1);
    w.remote_addr = 0x1000_0000;
    w.rkey = 0x999;
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 64,
            lkey: 0x100,
        }],
        &[],
    );
    p.drop_if = Some(Box::new(|pkt, from_a| {
        !from_a && is_op(pkt, Operation::RdmaReadResponse)
    }));
    p.run();
    assert_eq!(
        statuses(&p.sa),
        vec![(1, wc_status::WR_FLUSH_ERR), (2, wc_status::REM_ACCESS_ERR)]
    );
}

#[test]
fn responder_errors_nak_and_move_to_err() {
    // A bad rkey: NAK, and the responder QP goes to ERR too (class C).
    let mut p = Pair::new(QpType::Rc, 1024);
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 1);
    w.remote_addr = 0x1000_0000;
    w.rkey = 0x999;
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
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
    assert_eq!(p.b.state(), QpState::Err);
    // A receive WQE whose lkey fails: Remote Operational Error, LOC_PROT_ERR on our side.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x777));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_OP_ERR)]);
    assert_eq!(p.sb.recv_cq[0].status, wc_status::LOC_PROT_ERR);
    assert_eq!(p.b.state(), QpState::Err);
    assert_eq!(p.sb.events, vec![Event::QpFatal]);
}

#[test]
fn cq_overflow_moves_the_qp_to_err() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sa.cq_cap = Some(1);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_2000, 4096, 0x200));
    for i in 1..=2 {
        p.post_send(
            signaled(wr_opcode::SEND, i, 1),
            &[Sge {
                addr: 0x1000_0000,
                length: 10,
                lkey: 0x100,
            }],
            &[],
        );
    }
    p.run();
    assert_eq!(p.a.state(), QpState::Err);
    assert!(p.sa.stat(Stat::CqOverflows) >= 1);
}

#[test]
fn err_qp_sends_nothing() {
    let mut p = Pair::new(QpType::Rc, 256);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 1 << 16);
    p.post_send(w, &[sge], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let (b, _) = p.sa.out.pop().unwrap();
    let info = RxInfo {
        grh: [0; GRH_LEN],
        src: GID_A,
        dst: GID_B,
    };
    p.b.rx(
        &mut p.sb,
        &mut p.scratch,
        &Packet::parse(&b).unwrap(),
        &info,
    );
    assert!(p.b.responder_pending());
    p.b.set_state(&mut p.sb, QpState::Err, false);
    assert!(!p.b.responder_pending());
    assert_eq!(p.b.run_responder(&mut p.sb, &mut p.scratch, 1000), 0);
    p.b.flush_ack(&mut p.sb, &mut p.scratch);
    assert!(p.sb.out.is_empty());
}

#[test]
fn duplicate_read_is_answered_from_its_record_only() {
    let mut p = Pair::new(QpType::Rc, 256);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 512);
    p.post_send(w, &[sge], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let (b, _) = p.sa.out.pop().unwrap();
    let info = RxInfo {
        grh: [0; GRH_LEN],
        src: GID_A,
        dst: GID_B,
    };
    p.b.rx(
        &mut p.sb,
        &mut p.scratch,
        &Packet::parse(&b).unwrap(),
        &info,
    );
    p.b.run_responder(&mut p.sb, &mut p.scratch, 100);
    assert_eq!(p.sb.out.len(), 2);
    p.sb.out.clear();
    // The same READ again, claiming a huge length: answered from the record (2 packets).
    let mut forged = b.clone();
    let reth_at = 12;
    forged[reth_at + 12..reth_at + 16].copy_from_slice(&(1u32 << 30).to_be_bytes());
    p.b.rx(
        &mut p.sb,
        &mut p.scratch,
        &Packet::parse(&forged).unwrap(),
        &info,
    );
    p.b.run_responder(&mut p.sb, &mut p.scratch, 100_000);
    assert_eq!(p.sb.out.len(), 2);
    // Another rkey: not a duplicate of anything recorded.
    p.sb.out.clear();
    forged[reth_at + 8..reth_at + 12].copy_from_slice(&0x777u32.to_be_bytes());
    p.b.rx(
        &mut p.sb,
        &mut p.scratch,
        &Packet::parse(&forged).unwrap(),
        &info,
    );
    p.b.run_responder(&mut p.sb, &mut p.scratch, 100_000);
    assert!(p.sb.out.is_empty());
    assert_eq!(p.sb.stat(Stat::DuplicateNoResource), 1);
}
