//! Kernel consumers' local operations in the engine: fast registration (REG_MR) and local
//! invalidation run in SQ order without a packet and complete in SQ order; SEND with
//! invalidate carries the rkey in an IETH and the responder invalidates it before reporting
//! the receive; a user QP (no `local_ops`) refuses them. Driven over the simulated wire of
//! `common`, lossless and faulty.

use rrxe_host_tests::logic::{qp_state::QpType, transport::*};
use rrxe_host_tests::uapi::{SendWqe, Sge};

mod common;
use common::*;

/// The fast MR of side B: index 0x33 (its keys are 0x33xx).
const FAST: u32 = 0x3300;

fn kernel_pair() -> Pair {
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.local_ops = true);
    p.sa.fast_mr(0x4400, 1 << 20);
    p.sb.fast_mr(FAST, 1 << 20);
    p
}

fn reg_mr(wr_id: u64, key: u32, iova: u64, len: u64, acc: u32) -> SendWqe {
    SendWqe {
        wr_id,
        opcode: wr_opcode::REG_MR,
        send_flags: send_flags::SIGNALED,
        rkey: key,
        remote_addr: iova,
        compare_add: len,
        swap: u64::from(acc),
        ..SendWqe::default()
    }
}

fn send(wr_id: u64, len: u32, lkey: u32, addr: u64) -> (SendWqe, Sge) {
    (
        signaled(wr_opcode::SEND, wr_id, 1),
        Sge {
            addr,
            length: len,
            lkey,
        },
    )
}

fn ops(s: &Side) -> Vec<(u64, u32, u32)> {
    s.send_cq
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.status))
        .collect()
}

#[test]
fn reg_mr_then_send_from_it_in_sq_order() {
    let mut p = kernel_pair();
    p.sb.rq.push_back(recv(9, 0x2000_0000, 8192, 0x200));
    // A SEND from ordinary memory, REG_MR of A's fast MR, then a SEND gathered from it.
    let (w1, s1) = send(1, 3000, 0x100, 0x1000_0000);
    p.post_send(w1, &[s1], &[]);
    p.post_send(
        reg_mr(2, 0x4401, 0x7000_0000, 4096, access::LOCAL_WRITE),
        &[],
        &[],
    );
    p.sb.rq.push_back(recv(10, 0x2000_4000, 8192, 0x200));
    let (w3, s3) = send(3, 4096, 0x4401, 0x7000_0000);
    p.post_send(w3, &[s3], &[]);
    p.run();
    assert_eq!(
        ops(&p.sa),
        vec![
            (1, wc_opcode::SEND, wc_status::SUCCESS),
            (2, wc_opcode::REG_MR, wc_status::SUCCESS),
            (3, wc_opcode::SEND, wc_status::SUCCESS),
        ]
    );
    assert_eq!(p.sa.local_ops, vec![("reg", 0x4401)]);
    assert_eq!(
        bytes(&p.sb, 0x200, 0x2000_4000, 4096),
        bytes(&p.sa, 0x4401, 0x7000_0000, 4096)
    );
}

#[test]
fn local_inv_makes_the_key_unusable_after_it() {
    let mut p = kernel_pair();
    p.post_send(
        reg_mr(1, 0x4401, 0x7000_0000, 4096, access::LOCAL_WRITE),
        &[],
        &[],
    );
    p.post_send(
        SendWqe {
            wr_id: 2,
            opcode: wr_opcode::LOCAL_INV,
            send_flags: send_flags::SIGNALED,
            imm_data: 0x4401,
            ..SendWqe::default()
        },
        &[],
        &[],
    );
    p.sb.rq.push_back(recv(9, 0x2000_0000, 8192, 0x200));
    let (w3, s3) = send(3, 100, 0x4401, 0x7000_0000);
    p.post_send(w3, &[s3], &[]);
    p.run();
    assert_eq!(
        ops(&p.sa),
        vec![
            (1, wc_opcode::REG_MR, wc_status::SUCCESS),
            (2, wc_opcode::LOCAL_INV, wc_status::SUCCESS),
            (3, wc_opcode::SEND, wc_status::LOC_PROT_ERR),
        ]
    );
}

#[test]
fn local_op_after_outstanding_send_completes_only_after_it() {
    let mut p = kernel_pair();
    p.sb.rq.push_back(recv(9, 0x2000_0000, 65536, 0x200));
    let (w1, s1) = send(1, 20000, 0x100, 0x1000_0000);
    p.post_send(w1, &[s1], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    p.post_send(reg_mr(2, 0x4402, 0x7000_0000, 4096, 0), &[], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 64);
    // Executed where the requester reached it, but the SEND is not acknowledged yet.
    assert_eq!(p.sa.local_ops, vec![("reg", 0x4402)]);
    assert!(p.sa.send_cq.is_empty());
    p.run();
    assert_eq!(
        ops(&p.sa),
        vec![
            (1, wc_opcode::SEND, wc_status::SUCCESS),
            (2, wc_opcode::REG_MR, wc_status::SUCCESS),
        ]
    );
}

/// Found by the coverage-guided engine target: a local operation executed while a READ or
/// an atomic before it was outstanding completed only with a later ACK, so with nothing after
/// it it stayed outstanding for ever (no completion, no timer).
#[test]
fn local_op_behind_a_read_or_atomic_completes_with_its_answer() {
    for atomic in [false, true] {
        let mut p = kernel_pair();
        let (w1, s1) = if atomic {
            let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 1, 1);
            a.remote_addr = 0x1003_0000;
            a.rkey = 0x100;
            a.compare_add = 5;
            (
                a,
                Sge {
                    addr: 0x2003_0000,
                    length: 8,
                    lkey: 0x200,
                },
            )
        } else {
            read_wr(1, 0x1000_0000, 0x2000_0000, 4096)
        };
        p.post_send(w1, &[s1], &[]);
        p.post_send(reg_mr(2, 0x4402, 0x7000_0000, 4096, 0), &[], &[]);
        p.run();
        let first = if atomic {
            wc_opcode::FETCH_ADD
        } else {
            wc_opcode::RDMA_READ
        };
        assert_eq!(
            ops(&p.sa),
            vec![
                (1, first, wc_status::SUCCESS),
                (2, wc_opcode::REG_MR, wc_status::SUCCESS),
            ],
            "atomic: {atomic}"
        );
        assert_eq!(p.a.details().sq_outstanding, 0, "atomic: {atomic}");
    }
}

#[test]
fn send_with_invalidate_invalidates_the_responders_rkey() {
    let mut p = kernel_pair();
    // B registers its fast MR for remote writes (as a target would, then hands out the key).
    p.b.sq_slot_mut().unwrap().fill(0);
    {
        let w = reg_mr(
            1,
            FAST | 1,
            0x9000_0000,
            8192,
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        );
        let h = unsafe_free_bytes(&w);
        p.b.sq_slot_mut().unwrap()[..h.len()].copy_from_slice(&h);
        p.sb.sq_log.push(w.wr_id);
        p.b.sq_pushed(&mut p.sb);
    }
    p.run();
    assert_eq!(p.sb.send_cq.len(), 1);
    // A writes into it, then SENDs with invalidate.
    let mut w = signaled(wr_opcode::RDMA_WRITE, 2, 1);
    w.remote_addr = 0x9000_0000;
    w.rkey = FAST | 1;
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 5000,
            lkey: 0x100,
        }],
        &[],
    );
    p.sb.rq.push_back(recv(7, 0x2000_0000, 4096, 0x200));
    let mut s = signaled(wr_opcode::SEND_WITH_INV, 3, 1);
    s.imm_data = FAST | 1;
    p.post_send(
        s,
        &[Sge {
            addr: 0x1000_0000,
            length: 64,
            lkey: 0x100,
        }],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(2, 0), (3, 0)]);
    let r = p.sb.recv_cq[0];
    assert_eq!(r.status, wc_status::SUCCESS);
    assert_ne!(r.wc_flags & wc_flags::WITH_INV, 0);
    assert_eq!(r.imm_data, FAST | 1);
    assert_eq!(p.sb.local_ops.last(), Some(&("remote-inv", FAST | 1)));
    assert_eq!(
        bytes(&p.sb, FAST | 1, 0x9000_0000, 5000).len(),
        5000,
        "still readable by the harness"
    );
    // The key is dead now: a WRITE through it is a remote access error.
    let mut w = signaled(wr_opcode::RDMA_WRITE, 4, 1);
    w.remote_addr = 0x9000_0000;
    w.rkey = FAST | 1;
    p.post_send(
        w,
        &[Sge {
            addr: 0x1000_0000,
            length: 10,
            lkey: 0x100,
        }],
        &[],
    );
    p.run();
    assert_eq!(p.sa.send_cq[2].wr_id, 4);
    assert_eq!(p.sa.send_cq[2].status, wc_status::REM_ACCESS_ERR);
}

#[test]
fn invalidating_an_unknown_key_fails_the_receive_and_the_qp() {
    let mut p = kernel_pair();
    p.sb.rq.push_back(recv(7, 0x2000_0000, 4096, 0x200));
    let mut s = signaled(wr_opcode::SEND_WITH_INV, 1, 1);
    s.imm_data = 0x7777;
    p.post_send(
        s,
        &[Sge {
            addr: 0x1000_0000,
            length: 64,
            lkey: 0x100,
        }],
        &[],
    );
    p.run();
    assert_eq!(p.sb.recv_cq[0].status, wc_status::REM_INV_REQ_ERR);
    assert_eq!(p.b.state(), rrxe_host_tests::logic::qp_state::QpState::Err);
}

#[test]
fn user_qp_refuses_local_operations() {
    // `local_ops` is false for every QP a process creates: a REG_MR written into its ring
    // fails with LOC_QP_OP_ERR and the QP goes to ERR.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sa.fast_mr(0x4400, 4096);
    p.post_send(reg_mr(1, 0x4401, 0x7000_0000, 4096, 0), &[], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::LOC_QP_OP_ERR)]);
    assert!(p.sa.local_ops.is_empty());
}

#[test]
fn local_ops_stay_in_order_through_a_lossy_wire() {
    for seed in 1..40u64 {
        let mut p = kernel_pair().faulty(
            Faults {
                loss: 10,
                dup: 5,
                reorder: 10,
                corrupt: 0,
            },
            seed,
        );
        let mut want = Vec::new();
        for i in 0..12u64 {
            if i % 3 == 1 {
                let key = 0x4400 | (i as u32 & 0xff);
                p.post_send(reg_mr(i, key, 0x7000_0000, 4096, 0), &[], &[]);
                want.push((i, wc_opcode::REG_MR, wc_status::SUCCESS));
            } else {
                p.sb.rq.push_back(recv(i, 0x2000_0000, 8192, 0x200));
                let (w, s) = send(i, 3000, 0x100, 0x1000_0000);
                p.post_send(w, &[s], &[]);
                want.push((i, wc_opcode::SEND, wc_status::SUCCESS));
            }
        }
        p.run();
        assert_eq!(ops(&p.sa), want, "seed {seed}");
        // Each REG_MR ran exactly once, in order, whatever was retransmitted around it.
        let regs: Vec<u32> = p.sa.local_ops.iter().map(|(_, k)| *k).collect();
        assert_eq!(regs, vec![0x4401, 0x4404, 0x4407, 0x440a], "seed {seed}");
    }
}
