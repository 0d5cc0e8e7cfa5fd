//! IBA 1.5 memory placement in the engine, over the simulated wire of `common`: ATOMIC WRITE
//! (opcode 0x1D: an 8-byte payload placed in one store at the RETH address) and RDMA FLUSH
//! (opcode 0x1C: FETH placement type and selectivity, then a RETH), both answered with a READ
//! RESPONSE ONLY without payload as rdma_rxe answers them; the rights each needs (REMOTE_WRITE;
//! `IB_ACCESS_FLUSH_*` on the QP and the MR); duplicates answered without a second execution;
//! and LOCAL_INV from a user QP (no `local_ops`), with rdma_rxe's rule that only a
//! fast-registration MR may be invalidated.

use rrxe_host_tests::logic::{
    opcode::{self, Operation},
    qp_state::{QpState, QpType},
    transport::*,
    wire::Packet,
};
use rrxe_host_tests::uapi::SendWqe;
use std::{cell::RefCell, rc::Rc};

mod common;
use common::*;

/// B's MR that FLUSHes may name: global and persistent rights, and REMOTE_WRITE.
const FLUSH_MR: u32 = 0x300;
const FLUSH_VA: u64 = 0x3000_0000;
/// B's MR with every right but REMOTE_WRITE.
const NO_WRITE_MR: u32 = 0x400;
const NO_WRITE_VA: u64 = 0x4000_0000;

const FLUSH_QP: u32 = access::FLUSH_GLOBAL | access::FLUSH_PERSISTENT;

fn pair(qp_access: u32) -> Pair {
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.access |= qp_access);
    p.sb.mr(
        FLUSH_MR,
        FLUSH_VA,
        1 << 16,
        access::LOCAL_WRITE | access::REMOTE_WRITE | FLUSH_QP,
    );
    p.sb.mr(
        NO_WRITE_MR,
        NO_WRITE_VA,
        1 << 16,
        access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC | FLUSH_QP,
    );
    p
}

fn atomic_write(wr_id: u64, rkey: u32, va: u64, value: [u8; 8]) -> SendWqe {
    SendWqe {
        wr_id,
        opcode: wr_opcode::ATOMIC_WRITE,
        send_flags: send_flags::SIGNALED,
        rkey,
        remote_addr: va,
        swap: u64::from_ne_bytes(value),
        ..SendWqe::default()
    }
}

fn flush_wr(wr_id: u64, rkey: u32, va: u64, len: u64, ty: u32, level: u32) -> SendWqe {
    SendWqe {
        wr_id,
        opcode: wr_opcode::FLUSH,
        send_flags: send_flags::SIGNALED,
        rkey,
        remote_addr: va,
        compare_add: len,
        imm_data: ty | level << flush::LEVEL_SHIFT,
        ..SendWqe::default()
    }
}

fn ops(s: &Side) -> Vec<(u64, u32, u32)> {
    s.send_cq
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.status))
        .collect()
}

/// Every packet carried, as (sent by A, bytes).
type Tap = Rc<RefCell<Vec<(bool, Vec<u8>)>>>;

fn tap(p: &mut Pair) -> Tap {
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    p.drop_if = Some(Box::new(move |pkt: &Packet<'_>, from_a| {
        let end = pkt.payload_range().end + pkt.bth().pad as usize + 4;
        l.borrow_mut()
            .push((from_a, pkt.bytes().get(..end).unwrap_or_default().to_vec()));
        false
    }));
    log
}

#[test]
fn atomic_write_places_eight_bytes_and_completes_as_atomic_write() {
    let mut p = pair(0);
    let log = tap(&mut p);
    let value = *b"\x01\x23\x45\x67\x89\xab\xcd\xef";
    p.post_send(atomic_write(1, 0x100, 0x1000_0010, value), &[], &[]);
    p.run();
    assert_eq!(
        ops(&p.sa),
        vec![(1, wc_opcode::ATOMIC_WRITE, wc_status::SUCCESS)]
    );
    assert_eq!(p.sa.send_cq[0].byte_len, 8);
    assert_eq!(bytes(&p.sb, 0x100, 0x1000_0010, 8), value.to_vec());
    // The neighbours are untouched.
    let orig = |i: u64| (i as u8).wrapping_mul(31).wrapping_add(0x100u32 as u8);
    assert_eq!(
        bytes(&p.sb, 0x100, 0x1000_0008, 8),
        (8..16).map(orig).collect::<Vec<_>>()
    );
    assert_eq!(
        bytes(&p.sb, 0x100, 0x1000_0018, 8),
        (24..32).map(orig).collect::<Vec<_>>()
    );
    // On the wire: ATOMIC WRITE with a RETH of length 8 and the 8 bytes as payload; the answer
    // is a READ RESPONSE ONLY without payload, for the request's PSN (as rdma_rxe sends).
    let log = log.borrow();
    assert_eq!(log.len(), 2);
    let req = Packet::parse(&log[0].1).unwrap();
    assert!(log[0].0);
    assert_eq!(req.bth().opcode, opcode::RC_ATOMIC_WRITE);
    assert_eq!(req.info().op, Operation::AtomicWrite);
    let reth = req.reth().unwrap();
    assert_eq!((reth.va, reth.rkey, reth.len), (0x1000_0010, 0x100, 8));
    assert_eq!(req.payload(), &value);
    assert!(req.bth().ack_req);
    let resp = Packet::parse(&log[1].1).unwrap();
    assert!(!log[1].0);
    assert_eq!(resp.bth().opcode, opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(resp.bth().psn, req.bth().psn);
    assert!(resp.payload().is_empty());
    assert!(resp.aeth().is_some());
}

#[test]
fn atomic_write_needs_remote_write_on_mr_and_qp() {
    // The MR lacks REMOTE_WRITE (REMOTE_ATOMIC is not what ATOMIC WRITE needs).
    let mut p = pair(0);
    let before = bytes(&p.sb, NO_WRITE_MR, NO_WRITE_VA, 8);
    p.post_send(atomic_write(1, NO_WRITE_MR, NO_WRITE_VA, [7; 8]), &[], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
    assert_eq!(bytes(&p.sb, NO_WRITE_MR, NO_WRITE_VA, 8), before);
    assert_eq!(p.b.state(), QpState::Err);

    // The responder QP lacks REMOTE_WRITE.
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.access &= !access::REMOTE_WRITE);
    let before = bytes(&p.sb, 0x100, 0x1000_0000, 8);
    p.post_send(atomic_write(1, 0x100, 0x1000_0000, [7; 8]), &[], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
    assert_eq!(bytes(&p.sb, 0x100, 0x1000_0000, 8), before);

    // Outside the MR.
    let mut p = pair(0);
    p.post_send(
        atomic_write(1, 0x100, 0x1000_0000 + (4 << 20), [7; 8]),
        &[],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
}

#[test]
fn atomic_write_wr_checks() {
    // An unaligned target is refused before anything is sent.
    let mut p = pair(0);
    p.post_send(atomic_write(1, 0x100, 0x1000_0004, [1; 8]), &[], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::LOC_LEN_ERR)]);
    assert!(p.sb.recv_cq.is_empty() && p.b.state() == QpState::Rts);
    // SGEs are not how the value travels.
    let mut p = pair(0);
    let mut w = atomic_write(1, 0x100, 0x1000_0000, [1; 8]);
    w.num_sge = 1;
    p.post_send(
        w,
        &[rrxe_host_tests::uapi::Sge {
            addr: 0x2000_0000,
            length: 8,
            lkey: 0x200,
        }],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::LOC_QP_OP_ERR)]);
    // RC only.
    for t in [QpType::Uc, QpType::Ud] {
        let mut p = Pair::new(t, 1024);
        p.post_send(atomic_write(1, 0x100, 0x1000_0000, [1; 8]), &[], &[]);
        p.run();
        assert_eq!(
            statuses(&p.sa),
            vec![(1, wc_status::LOC_QP_OP_ERR)],
            "{t:?}"
        );
    }
}

#[test]
fn responder_refuses_a_malformed_atomic_write() {
    // A request whose RETH length is not 8, and one aimed at an unaligned address (a peer
    // that does not check): NAK Invalid Request, and nothing is placed.
    for (len, va) in [(16u32, 0x1000_0000u64), (8, 0x1000_0004)] {
        let mut p = pair(0);
        let log = tap(&mut p);
        p.post_send(atomic_write(1, 0x100, 0x1000_0000, [9; 8]), &[], &[]);
        p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
        let mut pkt = p.take_out(true).remove(0);
        // RETH (after the 12-byte BTH): va 8 bytes, rkey 4, length 4; the ICRC is not checked
        // by the engine.
        pkt[12..20].copy_from_slice(&va.to_be_bytes());
        pkt[24..28].copy_from_slice(&len.to_be_bytes());
        let before = bytes(&p.sb, 0x100, 0x1000_0000, 16);
        p.carry(pkt, true);
        p.run();
        assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_INV_REQ_ERR)]);
        assert_eq!(bytes(&p.sb, 0x100, 0x1000_0000, 16), before);
        assert_eq!(p.sb.atomics_executed, 0);
        drop(log);
    }
}

#[test]
fn flush_global_and_persistent_range_and_mr() {
    let mut p = pair(FLUSH_QP);
    let log = tap(&mut p);
    p.post_send(
        flush_wr(
            1,
            FLUSH_MR,
            FLUSH_VA + 64,
            4096,
            flush::GLOBAL,
            flush::RANGE,
        ),
        &[],
        &[],
    );
    p.post_send(
        flush_wr(2, FLUSH_MR, 0, 0, flush::PERSISTENT, flush::MR),
        &[],
        &[],
    );
    p.post_send(
        flush_wr(
            3,
            FLUSH_MR,
            FLUSH_VA,
            1 << 16,
            flush::GLOBAL | flush::PERSISTENT,
            flush::RANGE,
        ),
        &[],
        &[],
    );
    p.run();
    assert_eq!(
        ops(&p.sa),
        vec![
            (1, wc_opcode::FLUSH, wc_status::SUCCESS),
            (2, wc_opcode::FLUSH, wc_status::SUCCESS),
            (3, wc_opcode::FLUSH, wc_status::SUCCESS),
        ]
    );
    assert_eq!(
        p.sb.flushes,
        vec![
            (FLUSH_MR, Some((FLUSH_VA + 64, 4096)), access::FLUSH_GLOBAL),
            (FLUSH_MR, None, access::FLUSH_PERSISTENT),
            (FLUSH_MR, Some((FLUSH_VA, 1 << 16)), FLUSH_QP),
        ]
    );
    // On the wire: FLUSH with the FETH (type in bits 3-0, level in bits 5-4) before the RETH,
    // no payload; each answered with an empty READ RESPONSE ONLY.
    let log = log.borrow();
    let reqs: Vec<_> = log.iter().filter(|(a, _)| *a).collect();
    let resps: Vec<_> = log.iter().filter(|(a, _)| !*a).collect();
    assert_eq!((reqs.len(), resps.len()), (3, 3));
    let r0 = Packet::parse(&reqs[0].1).unwrap();
    assert_eq!(r0.bth().opcode, opcode::RC_FLUSH);
    assert_eq!(&reqs[0].1[12..16], &[0, 0, 0, 0x01]);
    let reth = r0.reth().unwrap();
    assert_eq!(
        (reth.va, reth.rkey, reth.len),
        (FLUSH_VA + 64, FLUSH_MR, 4096)
    );
    assert!(r0.payload().is_empty());
    assert_eq!(&reqs[1].1[12..16], &[0, 0, 0, 0x12]);
    assert_eq!(&reqs[2].1[12..16], &[0, 0, 0, 0x03]);
    for (req, resp) in reqs.iter().zip(&resps) {
        let (q, r) = (
            Packet::parse(&req.1).unwrap(),
            Packet::parse(&resp.1).unwrap(),
        );
        assert_eq!(r.bth().opcode, opcode::RC_RDMA_READ_RESPONSE_ONLY);
        assert_eq!(r.bth().psn, q.bth().psn);
        assert!(r.payload().is_empty());
    }
}

#[test]
fn flush_needs_the_placement_rights_on_qp_and_mr() {
    // The QP allows global visibility only: a persistent FLUSH is an access error.
    let mut p = pair(access::FLUSH_GLOBAL);
    p.post_send(
        flush_wr(1, FLUSH_MR, FLUSH_VA, 8, flush::PERSISTENT, flush::RANGE),
        &[],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
    assert!(p.sb.flushes.is_empty());

    // The MR (0x100) has no FLUSH right at all.
    for level in [flush::RANGE, flush::MR] {
        let mut p = pair(FLUSH_QP);
        p.post_send(
            flush_wr(1, 0x100, 0x1000_0000, 8, flush::GLOBAL, level),
            &[],
            &[],
        );
        p.run();
        assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
        assert!(p.sb.flushes.is_empty());
    }

    // A range past the MR; the same address with memory-region selectivity is fine (the
    // range is not looked at, as rdma_rxe does).
    let mut p = pair(FLUSH_QP);
    p.post_send(
        flush_wr(
            1,
            FLUSH_MR,
            FLUSH_VA + 4096,
            1 << 16,
            flush::GLOBAL,
            flush::RANGE,
        ),
        &[],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
    let mut p = pair(FLUSH_QP);
    p.post_send(
        flush_wr(
            1,
            FLUSH_MR,
            FLUSH_VA + 4096,
            1 << 16,
            flush::GLOBAL,
            flush::MR,
        ),
        &[],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::SUCCESS)]);

    // A bad key.
    let mut p = pair(FLUSH_QP);
    p.post_send(flush_wr(1, 0x999, 0, 0, flush::GLOBAL, flush::MR), &[], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
}

#[test]
fn flush_wr_checks() {
    for imm in [
        0,
        0x4,
        0x8 | flush::GLOBAL,
        flush::GLOBAL | 2 << 4,
        0x100 | 1,
    ] {
        let mut p = pair(FLUSH_QP);
        let mut w = flush_wr(1, FLUSH_MR, FLUSH_VA, 8, 0, 0);
        w.imm_data = imm;
        p.post_send(w, &[], &[]);
        p.run();
        assert_eq!(
            statuses(&p.sa),
            vec![(1, wc_status::LOC_QP_OP_ERR)],
            "{imm:#x}"
        );
    }
    let mut p = pair(FLUSH_QP);
    p.post_send(
        flush_wr(1, FLUSH_MR, FLUSH_VA, 1 << 32, flush::GLOBAL, flush::RANGE),
        &[],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::LOC_LEN_ERR)]);
}

#[test]
fn a_lost_answer_gets_the_answer_again_without_a_second_execution() {
    for op in [Operation::AtomicWrite, Operation::Flush] {
        let mut p = pair(FLUSH_QP);
        let mut dropped = false;
        let sent = Rc::new(std::cell::Cell::new(0));
        let n = sent.clone();
        p.drop_if = Some(Box::new(move |pkt: &Packet<'_>, from_a| {
            if from_a && pkt.info().op == op {
                n.set(n.get() + 1);
            }
            if !from_a && pkt.info().op == Operation::RdmaReadResponse && !dropped {
                dropped = true;
                return true;
            }
            false
        }));
        let w = match op {
            Operation::AtomicWrite => atomic_write(1, 0x100, 0x1000_0000, [0x5a; 8]),
            _ => flush_wr(1, FLUSH_MR, FLUSH_VA, 64, flush::GLOBAL, flush::RANGE),
        };
        p.post_send(w, &[], &[]);
        // An RDMA WRITE after it over the same bytes: a second execution of the ATOMIC WRITE
        // would undo it.
        let mut wr = signaled(wr_opcode::RDMA_WRITE, 2, 1);
        wr.remote_addr = 0x1000_0000;
        wr.rkey = 0x100;
        p.post_send(
            wr,
            &[rrxe_host_tests::uapi::Sge {
                addr: 0x2000_0000,
                length: 8,
                lkey: 0x200,
            }],
            &[],
        );
        p.run();
        assert!(sent.get() > 1, "{op:?}: the request went out again");
        let want = if op == Operation::AtomicWrite {
            wc_opcode::ATOMIC_WRITE
        } else {
            wc_opcode::FLUSH
        };
        assert_eq!(
            ops(&p.sa),
            vec![
                (1, want, wc_status::SUCCESS),
                (2, wc_opcode::RDMA_WRITE, wc_status::SUCCESS)
            ],
            "{op:?}"
        );
        assert!(p.sb.stat(Stat::DuplicateRequests) > 0);
        if op == Operation::AtomicWrite {
            assert_eq!(p.sb.atomics_executed, 1);
        } else {
            assert_eq!(p.sb.flushes.len(), 1);
        }
        assert_eq!(
            bytes(&p.sb, 0x100, 0x1000_0000, 8),
            bytes(&p.sa, 0x200, 0x2000_0000, 8)
        );
    }
}

#[test]
fn placements_mixed_with_sends_on_a_faulty_wire() {
    for seed in 1..60u64 {
        let mut p = pair(FLUSH_QP).faulty(
            Faults {
                loss: 8,
                dup: 5,
                reorder: 8,
                corrupt: 0,
            },
            seed,
        );
        let mut want = Vec::new();
        for i in 0..12u64 {
            let (w, op) = match i % 3 {
                0 => (
                    atomic_write(i, 0x100, 0x1000_0000 + 8 * i, (i * 0x0101).to_ne_bytes()),
                    wc_opcode::ATOMIC_WRITE,
                ),
                1 => (
                    flush_wr(i, FLUSH_MR, FLUSH_VA, 4096, flush::GLOBAL, flush::RANGE),
                    wc_opcode::FLUSH,
                ),
                _ => {
                    p.sb.rq.push_back(recv(100 + i, 0x2000_0000, 4096, 0x200));
                    (
                        SendWqe {
                            num_sge: 1,
                            ..signaled(wr_opcode::SEND, i, 1)
                        },
                        wc_opcode::SEND,
                    )
                }
            };
            let sges = if op == wc_opcode::SEND {
                vec![rrxe_host_tests::uapi::Sge {
                    addr: 0x1000_0000,
                    length: 2000,
                    lkey: 0x100,
                }]
            } else {
                vec![]
            };
            p.post_send(w, &sges, &[]);
            want.push((i, op, wc_status::SUCCESS));
        }
        p.run();
        assert_eq!(ops(&p.sa), want, "seed {seed}");
        for i in (0..12u64).step_by(3) {
            assert_eq!(
                bytes(&p.sb, 0x100, 0x1000_0000 + 8 * i, 8),
                (i * 0x0101).to_ne_bytes().to_vec(),
                "seed {seed}"
            );
        }
        assert_eq!(p.sb.atomics_executed, 4, "seed {seed}");
    }
}

#[test]
fn user_qp_local_inv_follows_rdma_rxe() {
    // A user QP (no `local_ops`) may post LOCAL_INV on RC: a fast-registration MR of its PD is
    // invalidated; an MR registered through reg_mr is not (rdma_rxe: only IB_MR_TYPE_MEM_REG),
    // and the WR completes with LOC_QP_OP_ERR.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sa.fast_mr(0x4400, 4096);
    p.sa.mrs.last_mut().unwrap().valid = true;
    let inv = |wr_id, key| SendWqe {
        wr_id,
        opcode: wr_opcode::LOCAL_INV,
        send_flags: send_flags::SIGNALED,
        imm_data: key,
        ..SendWqe::default()
    };
    p.post_send(inv(1, 0x4400), &[], &[]);
    p.run();
    assert_eq!(
        ops(&p.sa),
        vec![(1, wc_opcode::LOCAL_INV, wc_status::SUCCESS)]
    );
    assert!(!p.sa.mrs.last().unwrap().valid);
    p.post_send(inv(2, 0x100), &[], &[]);
    p.run();
    assert_eq!(
        ops(&p.sa)[1..],
        [(2, wc_opcode::LOCAL_INV, wc_status::LOC_QP_OP_ERR)]
    );
    assert_eq!(p.a.state(), QpState::Err);
    // Not on UC or UD from a user ring.
    for t in [QpType::Uc, QpType::Ud] {
        let mut p = Pair::new(t, 1024);
        p.post_send(inv(1, 0x100), &[], &[]);
        p.run();
        assert_eq!(statuses(&p.sa), vec![(1, wc_status::LOC_QP_OP_ERR)]);
    }
}

#[test]
fn flush_icrc_is_rdma_rxe_s() {
    use rrxe_host_tests::logic::icrc;
    // rdma_rxe 6.12's opcode table gives RC FLUSH no payload offset: its ICRC covers the
    // masked pseudo-header, BTH and FETH+RETH as usual, then BTH..RETH again, raw. Every other
    // opcode's ICRC is the IBTA's.
    let mut ip = [0u8; icrc::IPV4_HDR_LEN];
    ip[0] = 0x45;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 99, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 99, 0, 2]);
    let mut p = pair(FLUSH_QP);
    p.post_send(
        flush_wr(1, FLUSH_MR, FLUSH_VA, 64, flush::GLOBAL, flush::RANGE),
        &[],
        &[],
    );
    p.post_send(atomic_write(2, 0x100, 0x1000_0000, [3; 8]), &[], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let pkts = p.take_out(true);
    assert_eq!(pkts.len(), 2);
    for roce in pkts {
        let mut udp = vec![0x12, 0x34, 0x12, 0xb7, 0, 0, 0, 0];
        let n = (udp.len() + roce.len()) as u16;
        udp[4..6].copy_from_slice(&n.to_be_bytes());
        udp.extend_from_slice(&roce);
        let ibta = icrc::icrc_v4(&ip, &udp).unwrap();
        let rxe = icrc::icrc_v4_rxe(&ip, &udp).unwrap();
        if roce[0] == opcode::RC_FLUSH {
            let mut c = icrc::Icrc::new_v4(
                &ip,
                udp[..8].try_into().unwrap(),
                roce[..12].try_into().unwrap(),
            );
            c.update(&roce[12..roce.len() - 4]);
            assert_eq!(c.finish(), ibta);
            let mut c = icrc::Icrc::new_v4(
                &ip,
                udp[..8].try_into().unwrap(),
                roce[..12].try_into().unwrap(),
            );
            c.update(&roce[12..roce.len() - 4]);
            c.update(&roce[..roce.len() - 4]);
            assert_eq!(c.finish(), rxe);
            assert_ne!(ibta, rxe);
            assert_eq!(icrc::rxe_flush_tail(&roce).map(|t| t.len()), Some(32));
        } else {
            assert_eq!(ibta, rxe, "opcode {:#x}", roce[0]);
            assert!(icrc::rxe_flush_tail(&roce).is_none());
        }
    }
}
