//! The transport engine on the simulated wire (common/): the property test of random RC
//! operations over a faulty wire (loss, duplication, reordering, outages) against a placing
//! and a go-back-N peer, every byte and every atomic result checked against a reference.

use proptest::prelude::*;
use rrxe_host_tests::logic::{
    qp_state::{QpState, QpType},
    transport::*,
};
use rrxe_host_tests::uapi::{SendWqe, Sge};

mod common;
use common::*;
/// One random RC operation of the property test, with what it must leave behind.
#[derive(Clone, Debug)]
enum Want {
    Bytes {
        side_b: bool,
        key: u32,
        at: u64,
        src_b: bool,
        src: Vec<Sge>,
    },
    Faa {
        local: u64,
        add: u64,
    },
}

/// A packet lost this many times in a row: its WR may end in RETRY_EXC_ERR (each loss of a
/// request or of its first missing response costs a retry, two when a response past the gap
/// asked again at once; at 10% loss about one READ in 10^5 that needs recovery meets it).
const LOST_RETRIES: u32 = 4;

fn lossy_run(seed: u64, f: Faults, ops: &[(u8, u32, bool)], mtu: u32) -> Result<(), TestCaseError> {
    lossy_run_clocked(seed, f, ops, mtu, false)
}

/// [`lossy_run`], with `clock`: both requesters keep a round-trip estimate
/// ([`Env::clock_us`]) and retransmit at it, before the IBTA timeout.
fn lossy_run_clocked(
    seed: u64,
    f: Faults,
    ops: &[(u8, u32, bool)],
    mtu: u32,
    clock: bool,
) -> Result<(), TestCaseError> {
    lossy_run_peer(seed, f, ops, mtu, clock, false)
}

/// [`lossy_run_clocked`], with `gbn`: B's responder drops what arrives past a gap (a go-back-N
/// peer such as rdma_rxe) instead of placing RDMA WRITE packets ahead, and does not announce
/// placement: A must never resend a packet alone to it.
fn lossy_run_peer(
    seed: u64,
    f: Faults,
    ops: &[(u8, u32, bool)],
    mtu: u32,
    clock: bool,
    gbn: bool,
) -> Result<(), TestCaseError> {
    let mut p = Pair::new(QpType::Rc, mtu).faulty(f, seed);
    p.b.set_place_ahead(!gbn);
    p.sa.clock = clock;
    p.sb.clock = clock;
    let mut wants = Vec::new();
    let mut roff = 0u64;
    let base = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x103f_fff8, 8).try_into().unwrap());
    let mut adds = 0u64;
    for (i, &(op, len, fence)) in ops.iter().enumerate() {
        let i = i as u64;
        let src = Sge {
            addr: 0x1000_0000 + i * 8,
            length: len,
            lkey: 0x100,
        };
        let mut w = match op {
            0 => {
                p.sb.rq.push_back(recv(i, 0x2000_0000 + roff, len, 0x200));
                wants.push(Want::Bytes {
                    side_b: true,
                    key: 0x200,
                    at: 0x2000_0000 + roff,
                    src_b: false,
                    src: vec![src],
                });
                SendWqe {
                    imm_data: i as u32,
                    ..signaled(wr_opcode::SEND_WITH_IMM, i, 1)
                }
            }
            1 => {
                // Every third one with immediate: it takes a receive WQE.
                let imm = len % 3 == 0;
                let mut w = if imm {
                    p.sb.rq.push_back(recv(i, 0x2000_0000 + roff, 0, 0x200));
                    signaled(wr_opcode::RDMA_WRITE_WITH_IMM, i, 1)
                } else {
                    signaled(wr_opcode::RDMA_WRITE, i, 1)
                };
                w.imm_data = i as u32;
                w.remote_addr = 0x1020_0000 + roff;
                w.rkey = 0x100;
                wants.push(Want::Bytes {
                    side_b: true,
                    key: 0x100,
                    at: w.remote_addr,
                    src_b: false,
                    src: vec![src],
                });
                w
            }
            2 => {
                let mut w = signaled(wr_opcode::RDMA_READ, i, 1);
                w.remote_addr = 0x1000_0000 + roff;
                w.rkey = 0x100;
                let local = 0x2020_0000 + roff;
                wants.push(Want::Bytes {
                    side_b: false,
                    key: 0x200,
                    at: local,
                    src_b: true,
                    src: vec![Sge {
                        addr: w.remote_addr,
                        length: len,
                        lkey: 0x100,
                    }],
                });
                p.post_send(
                    SendWqe {
                        send_flags: w.send_flags | if fence { send_flags::FENCE } else { 0 },
                        ..w
                    },
                    &[Sge {
                        addr: local,
                        length: len,
                        lkey: 0x200,
                    }],
                    &[],
                );
                roff += u64::from(len) + 64;
                continue;
            }
            _ => {
                let mut w = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, i, 1);
                w.remote_addr = 0x103f_fff8;
                w.rkey = 0x100;
                w.compare_add = 1 << (i % 40);
                adds = adds.wrapping_add(w.compare_add);
                let local = 0x203f_0000 + i * 8;
                wants.push(Want::Faa {
                    local,
                    add: w.compare_add,
                });
                p.post_send(
                    w,
                    &[Sge {
                        addr: local,
                        length: 8,
                        lkey: 0x200,
                    }],
                    &[],
                );
                continue;
            }
        };
        if fence {
            w.send_flags |= send_flags::FENCE;
        }
        p.post_send(w, &[src], &[]);
        roff += u64::from(len) + 64;
    }
    p.run();
    prop_assert_eq!(p.sa.send_cq.len(), ops.len(), "every WR completes once");
    if p.longest_loss_run >= LOST_RETRIES {
        if let Some(k) =
            p.sa.send_cq
                .iter()
                .position(|c| c.status == wc_status::RETRY_EXC_ERR)
        {
            // The wire lost what the retries carried (IBTA: the requester gives up after
            // `retry_cnt` retries without progress). What came before completed.
            for (j, c) in p.sa.send_cq[..k].iter().enumerate() {
                prop_assert_eq!((c.wr_id, c.status), (j as u64, 0));
            }
            return Ok(());
        }
    }
    for (k, c) in p.sa.send_cq.iter().enumerate() {
        prop_assert_eq!(
            (c.wr_id, c.status),
            (k as u64, 0),
            "in SQ order, successfully"
        );
    }
    let recvs: Vec<u64> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.0 == 0 || (o.0 == 1 && o.1 % 3 == 0))
        .map(|(i, _)| i as u64)
        .collect();
    let got: Vec<u64> = p.sb.recv_cq.iter().map(|c| c.wr_id).collect();
    prop_assert_eq!(
        got,
        recvs,
        "every SEND and WRITE_WITH_IMM delivered once, in order"
    );
    for c in &p.sb.recv_cq {
        prop_assert_eq!(c.status, 0);
        prop_assert_eq!(c.imm_data, c.wr_id as u32);
    }
    let final_v = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x103f_fff8, 8).try_into().unwrap());
    prop_assert_eq!(
        final_v,
        base.wrapping_add(adds),
        "atomics applied exactly once"
    );
    let mut olds = Vec::new();
    for w in wants {
        match w {
            Want::Bytes {
                side_b,
                key,
                at,
                src_b,
                src,
            } => {
                let from = if src_b { &p.sb } else { &p.sa };
                let mut exp = Vec::new();
                for s in &src {
                    exp.extend(bytes(from, s.lkey, s.addr, s.length as usize));
                }
                let to = if side_b { &p.sb } else { &p.sa };
                prop_assert_eq!(bytes(to, key, at, exp.len()), exp);
            }
            Want::Faa { local, add } => {
                let old = u64::from_ne_bytes(bytes(&p.sa, 0x200, local, 8).try_into().unwrap());
                olds.push((old, add));
            }
        }
    }
    // The fetched values are the running sums in SQ order.
    let mut v = base;
    for (old, add) in olds {
        prop_assert_eq!(old, v);
        v = v.wrapping_add(add);
    }
    if gbn {
        // A peer that did not announce placement never sees the selective mode.
        prop_assert_eq!(p.sa.stat(Stat::SelectiveResends), 0);
        prop_assert_ne!(p.a.details().peer, PeerMode::Places);
    }
    Ok(())
}

fn faults_named(i: usize) -> Faults {
    match i {
        0 => Faults {
            loss: 1,
            ..Faults::default()
        },
        1 => Faults {
            loss: 10,
            ..Faults::default()
        },
        2 => Faults {
            reorder: 20,
            ..Faults::default()
        },
        3 => Faults {
            dup: 5,
            ..Faults::default()
        },
        4 => Faults {
            corrupt: 2,
            ..Faults::default()
        },
        _ => Faults {
            loss: 5,
            dup: 5,
            reorder: 10,
            corrupt: 1,
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(prop_cases(48)))]
    #[test]
    fn random_rc_ops_survive_a_faulty_wire(
        ops in proptest::collection::vec((0u8..4, 0u32..12_000, proptest::bool::weighted(0.2)), 1..24),
        mtu_i in 0usize..3,
        fault_i in 0usize..6,
        seed in any::<u64>(),
        clock in any::<bool>(),
        gbn in proptest::bool::weighted(0.3),
    ) {
        let mtu = [256u32, 1024, 4096][mtu_i];
        lossy_run_peer(seed, faults_named(fault_i), &ops, mtu, clock, gbn)?;
    }
}

#[test]
fn long_lossy_runs_with_fixed_seeds() {
    for seed in 1..=6u64 {
        let ops: Vec<(u8, u32, bool)> = (0..40u64)
            .map(|i| {
                (
                    ((i * 7 + seed) % 4) as u8,
                    ((i * 2654435761 + seed * 97) % 40_000) as u32,
                    i % 9 == 0,
                )
            })
            .collect();
        lossy_run(seed, faults_named(seed as usize % 6), &ops, 1024).unwrap();
        lossy_run_clocked(seed, faults_named(seed as usize % 6), &ops, 1024, true).unwrap();
        lossy_run_peer(
            seed,
            faults_named(seed as usize % 6),
            &ops,
            1024,
            true,
            true,
        )
        .unwrap();
    }
}

#[test]
fn broken_receive_ring_ends_in_err_without_spinning() {
    // Issue 9: a ring that answers Bad for ever must not keep flush() looping.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq_broken = true;
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
    assert_eq!(p.b.state(), QpState::Err);
    assert_eq!(p.sb.events, vec![Event::QpFatal]);
    assert!(p.sb.rq_takes <= 3, "{} takes", p.sb.rq_takes);
    p.b.set_state(&mut p.sb, QpState::Err, false);
    p.b.flush_if_err(&mut p.sb);
    assert!(p.sb.rq_takes <= 5);
}

#[test]
fn outage_shorter_than_the_retries_recovers() {
    // A window of WRITEs in flight, then everything is lost for three timeouts, then the
    // path heals: the requester must recover (progress restores the retries).
    for mtu in [256u32, 1024] {
        let mut p = Pair::with(QpType::Rc, mtu, |c| c.retry_cnt = 4);
        for i in 0..8u64 {
            let mut w = signaled(wr_opcode::RDMA_WRITE, i, 1);
            w.remote_addr = 0x1020_0000 + i * 0x1_0000;
            w.rkey = 0x100;
            p.post_send(
                w,
                &[Sge {
                    addr: 0x1000_0000,
                    length: 0x1_0000,
                    lkey: 0x100,
                }],
                &[],
            );
        }
        p.outage = Some((100, 3));
        p.run();
        assert_eq!(p.sa.send_cq.len(), 8, "mtu {mtu}: {:?}", statuses(&p.sa));
        assert!(
            p.sa.send_cq.iter().all(|c| c.status == 0),
            "mtu {mtu}: {:?}",
            statuses(&p.sa)
        );
        assert!(p.timeouts >= 1);
    }
}

/// Found by `random_rc_ops_survive_a_faulty_wire` (seventh session): a WRITE's last packet, NAKed and sent
/// again alone while a go-back had left the requester inside that same WRITE, was acknowledged
/// before the resend went out; the requester returned to its saved place inside the completed
/// WRITE and sent its tail at the next READ's PSN (the peer answered INVALID REQUEST).
#[test]
fn a_write_acknowledged_before_its_own_resend_goes_out_is_not_sent_again() {
    let ops = [
        (1, 1025, false),
        (1, 6145, false),
        (2, 0, false),
        (0, 0, false),
        (2, 6145, false),
        (3, 0, false),
        (1, 3073, false),
        (2, 0, false),
    ];
    lossy_run_peer(
        1027297519538696784,
        faults_named(5),
        &ops,
        1024,
        true,
        false,
    )
    .unwrap();
}

/// Found by the same runs, and no bug: at 10% loss the wire loses the first response of the
/// READ at index 10 at every one of its retransmissions, so it ends in RETRY_EXC_ERR after its
/// 7 retries, as the IBTA says it must. The property accepts that only because one packet was
/// lost 4 or more times in a row ([`LOST_RETRIES`]), and only with every WR before it complete.
#[test]
fn a_read_whose_response_the_wire_loses_at_every_retry_may_exhaust_its_retries() {
    let ops = [
        (0, 8193, false),
        (2, 8193, false),
        (3, 0, false),
        (0, 4097, false),
        (0, 4097, false),
        (0, 0, false),
        (0, 4097, false),
        (0, 4097, true),
        (2, 4097, false),
        (0, 8193, false),
        (2, 8193, false),
        (3, 0, false),
        (0, 0, false),
    ];
    lossy_run_peer(
        7338904244355771476,
        faults_named(1),
        &ops,
        4096,
        false,
        false,
    )
    .unwrap();
}

/// Found by the same property test run 96,000 times: a selective resend remembered how many
/// READs and atomics were outstanding where it took the requester back from; one of them was
/// answered while the resend went out, so the requester returned with a count one too high, and
/// a fenced SEND behind it waited for that READ for ever (no completion, no timer).
#[test]
fn a_read_answered_during_a_selective_resend_does_not_hold_a_fence_for_ever() {
    let ops = [
        (2, 0, false),
        (3, 0, false),
        (3, 0, false),
        (2, 8193, false),
        (1, 11265, false),
        (0, 0, true),
    ];
    lossy_run_peer(
        15031522090353088532,
        faults_named(5),
        &ops,
        1024,
        false,
        false,
    )
    .unwrap();
}
