//! Model-based property tests: random sequences of posts/polls and kernel steps against a
//! simple queue model, with indices starting anywhere (including just below `u32::MAX`).

use std::collections::VecDeque;

use core::ffi::c_int;
use core::sync::atomic::Ordering;

use proptest::prelude::*;
use proptest::sample::select;

use rrxe_uapi::{Cqe, RecvWqe, Sge, SQ_FLAG_KERNEL_BUSY};

use super::harness::*;
use crate::abi::{
    IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_SEND_FENCE, IBV_SEND_INLINE, IBV_SEND_SIGNALED,
    IBV_SEND_SOLICITED,
};
use crate::ring::{cqe_to_wc, RingError, SqCaps};

fn start_index() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(u32::MAX),
        (u32::MAX - 20)..=u32::MAX,
        any::<u32>(),
    ]
}

fn sge_plain() -> impl Strategy<Value = SgeSpec> {
    (any::<u64>(), 0u32..=64, any::<u32>()).prop_map(|(a, l, k)| SgeSpec::plain(a, l, k))
}

fn sge_inline() -> impl Strategy<Value = SgeSpec> {
    (prop::collection::vec(any::<u8>(), 0..48), any::<u32>()).prop_map(|(d, lkey)| SgeSpec {
        lkey,
        ..SgeSpec::bytes(&d)
    })
}

fn send_spec(qp_type: u32) -> impl Strategy<Value = SendSpec> {
    let good: Vec<u32> = ALL_WR_OPCODES
        .into_iter()
        .filter(|&o| oracle_opcode_ok(qp_type, o))
        .collect();
    let opcode = prop_oneof![
        12 => select(good),
        2 => select(ALL_WR_OPCODES.to_vec()),
        1 => any::<u32>(),
    ];
    let flags = (
        select(vec![
            0,
            IBV_SEND_SIGNALED,
            IBV_SEND_FENCE | IBV_SEND_SOLICITED,
            IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
        ]),
        prop::bool::weighted(0.3),
        prop_oneof![20 => Just(0u32), 1 => any::<u32>()],
    )
        .prop_map(|(base, inline, junk)| base | if inline { IBV_SEND_INLINE } else { 0 } | junk);
    let sges = (
        prop::collection::vec(sge_plain(), 0..=5),
        prop::collection::vec(sge_inline(), 0..=4),
    );
    let odd = (
        prop_oneof![30 => Just(None), 1 => (-3i32..0).prop_map(Some)],
        prop::bool::weighted(0.03),
    );
    let remote = (
        prop_oneof![
            Just(0x1000u64),
            any::<u64>().prop_map(|a| a & !7),
            any::<u64>()
        ],
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
    );
    let ud = (
        prop_oneof![12 => (0..FOREIGN_AH).prop_map(Some), 1 => Just(None), 1 => Just(Some(FOREIGN_AH + 3))],
        any::<u32>(),
        any::<u32>(),
    );
    (
        any::<u64>(),
        opcode,
        flags,
        any::<u32>(),
        sges,
        odd,
        remote,
        ud,
    )
        .prop_map(
            |(wr_id, opcode, flags, imm, (plain, data), (num_sge, null_sg_list), r, u)| SendSpec {
                wr_id,
                opcode,
                flags,
                imm,
                sges: if flags & IBV_SEND_INLINE != 0 {
                    data
                } else {
                    plain
                },
                num_sge,
                null_sg_list,
                remote_addr: r.0,
                rkey: r.1,
                compare_add: r.2,
                swap: r.3,
                ah: u.0,
                remote_qpn: u.1,
                remote_qkey: u.2,
            },
        )
}

#[derive(Clone, Debug)]
enum SqOp {
    Post(Vec<SendSpec>),
    Consume(usize),
    Busy(bool),
}

fn sq_case() -> impl Strategy<Value = (SqCaps, u32, u32, Vec<SqOp>)> {
    (
        select(vec![IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD]),
        0u32..=4,
        select(vec![0u32, 16, 64, 100]),
        0u32..4,
        start_index(),
    )
        .prop_flat_map(|(qp_type, max_sge, max_inline, log2, start)| {
            let op = prop_oneof![
                4 => prop::collection::vec(send_spec(qp_type), 0..8).prop_map(SqOp::Post),
                3 => (0usize..10).prop_map(SqOp::Consume),
                1 => any::<bool>().prop_map(SqOp::Busy),
            ];
            (
                Just(SqCaps {
                    qp_type,
                    max_sge,
                    max_inline,
                }),
                Just(1u32 << log2),
                Just(start),
                prop::collection::vec(op, 1..40),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every valid WR the provider accepts is consumed exactly once, in order, with identical
    /// contents; failures (`EINVAL` for invalid WRs, `ENOMEM` exactly when the ring is full)
    /// stop the list at the right WR; one doorbell per call that posted something while the
    /// kernel was not busy, none otherwise.
    #[test]
    fn sq_matches_the_queue_model((caps, slots, start, ops) in sq_case()) {
        let (m, sq) = sq_ring(slots, caps, start);
        let mut k = Kernel::consumer_of(&m);
        let mut model: VecDeque<SentWqe> = VecDeque::new();
        let mut published = start;
        let mut busy = false;
        for op in ops {
            match op {
                SqOp::Post(specs) => {
                    let mut want: (c_int, Option<usize>) = (0, None);
                    let mut posted = 0;
                    for (i, s) in specs.iter().enumerate() {
                        if !oracle_valid(s, &caps) {
                            want = (libc::EINVAL, Some(i));
                            break;
                        }
                        if model.len() == slots as usize {
                            want = (libc::ENOMEM, Some(i));
                            break;
                        }
                        model.push_back(oracle_wqe(s, caps.qp_type));
                        posted += 1;
                    }
                    let l = SendList::for_qp(caps.qp_type, &specs);
                    let (rc, bad, db) = post(&sq, &l);
                    prop_assert_eq!((rc, bad), want, "specs {:?}", specs);
                    prop_assert_eq!(db, u32::from(posted > 0 && !busy));
                    published = published.wrapping_add(posted);
                    prop_assert_eq!(k.producer().load(Ordering::SeqCst), published);
                }
                SqOp::Consume(n) => {
                    for _ in 0..n {
                        let got = k.pop_send();
                        prop_assert_eq!(got, model.pop_front());
                    }
                }
                SqOp::Busy(b) => {
                    busy = b;
                    k.flags().store(if b { SQ_FLAG_KERNEL_BUSY } else { 0 }, Ordering::SeqCst);
                }
            }
        }
        while let Some(w) = k.pop_send() {
            prop_assert_eq!(Some(w), model.pop_front());
        }
        prop_assert!(model.is_empty());
    }

    /// Whatever a scribbler writes into the consumer index, `post_send` either works within
    /// the bound it implies or reports `EIO`, and never writes outside the ring (the ring ends
    /// at a guard page).
    #[test]
    fn sq_survives_any_consumer_index(start in start_index(), delta in any::<u32>(), near in -6i32..6, n in 0usize..6, use_near in any::<bool>()) {
        let caps = SqCaps { qp_type: IBV_QPT_RC, max_sge: 1, max_inline: 0 };
        let (m, sq) = sq_ring(4, caps, start);
        let k = Kernel::consumer_of(&m);
        let v = if use_near { start.wrapping_add_signed(near) } else { delta };
        k.consumer().store(v, Ordering::SeqCst);
        let specs: Vec<_> = (0..n as u64).map(|i| SendSpec::new(i, crate::abi::IBV_WR_SEND)).collect();
        let (rc, bad, db) = post(&sq, &SendList::new(&specs));
        let used = start.wrapping_sub(v);
        if n == 0 {
            prop_assert_eq!((rc, bad, db), (0, None, 0));
        } else if used > 4 {
            prop_assert_eq!((rc, bad, db), (libc::EIO, Some(0), 0));
            prop_assert_eq!(k.producer().load(Ordering::SeqCst), start);
        } else {
            let free = (4 - used) as usize;
            let posted = n.min(free);
            let want = if n > free { (libc::ENOMEM, Some(free)) } else { (0, None) };
            prop_assert_eq!((rc, bad), want);
            prop_assert_eq!(db, u32::from(posted > 0));
            prop_assert_eq!(k.producer().load(Ordering::SeqCst), start.wrapping_add(posted as u32));
        }
    }
}

fn cqe() -> impl Strategy<Value = Cqe> {
    (
        (
            any::<u64>(),
            0u32..=24,
            select(vec![0u32, 1, 2, 3, 4, 5, 6, 7, 128, 129]),
            any::<u32>(),
        ),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            0u32..128,
        ),
        (any::<u16>(), any::<u16>(), 0u8..16, any::<u8>()),
    )
        .prop_map(
            |(
                (wr_id, status, opcode, vendor_err),
                (byte_len, imm_data, qp_num, src_qp, wc_flags),
                (pkey_index, slid, sl, dlid_path_bits),
            )| Cqe {
                wr_id,
                status,
                opcode,
                vendor_err,
                byte_len,
                imm_data,
                qp_num,
                src_qp,
                wc_flags,
                pkey_index,
                slid,
                sl,
                dlid_path_bits,
                reserved: [0; 18],
            },
        )
}

#[derive(Clone, Debug)]
enum CqOp {
    Produce(Vec<Cqe>),
    Poll(usize),
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// `poll` returns `min(n, available)` completions, oldest first, each translated exactly;
    /// the kernel never finds the ring fuller than the model says.
    #[test]
    fn cq_matches_the_queue_model(
        log2 in 0u32..5,
        start in start_index(),
        ops in prop::collection::vec(prop_oneof![
            prop::collection::vec(cqe(), 0..12).prop_map(CqOp::Produce),
            (0usize..12).prop_map(CqOp::Poll),
        ], 1..40),
    ) {
        let slots = 1u32 << log2;
        let (m, cq) = cq_ring(slots, start);
        let mut k = Kernel::producer_of(&m);
        let mut model: VecDeque<Cqe> = VecDeque::new();
        for op in ops {
            match op {
                CqOp::Produce(cqes) => {
                    for c in cqes {
                        let pushed = k.push_cqe(&c);
                        prop_assert_eq!(pushed, model.len() < slots as usize);
                        if pushed {
                            model.push_back(c);
                        }
                    }
                }
                CqOp::Poll(n) => {
                    let got = poll(&cq, n).unwrap();
                    prop_assert_eq!(got.len(), n.min(model.len()));
                    for w in &got {
                        let c = model.pop_front().unwrap();
                        prop_assert_eq!(wc_fields(w), cqe_fields(&c));
                    }
                }
            }
        }
        let rest = poll(&cq, slots as usize + 1).unwrap();
        prop_assert_eq!(rest.len(), model.len());
    }

    /// Any producer index a scribbler writes: `poll` reads at most `slots` entries and
    /// reports `Corrupt` beyond that, never reading outside the ring.
    #[test]
    fn cq_survives_any_producer_index(start in start_index(), delta in any::<u32>(), near in -10i32..10, use_near in any::<bool>(), n in 0usize..12) {
        let (m, cq) = cq_ring(8, start);
        let k = Kernel::producer_of(&m);
        let v = if use_near { start.wrapping_add_signed(near) } else { delta };
        k.producer().store(v, Ordering::SeqCst);
        let avail = v.wrapping_sub(start);
        match poll(&cq, n) {
            Ok(w) => {
                prop_assert!(avail <= 8);
                prop_assert_eq!(w.len(), n.min(avail as usize));
                prop_assert_eq!(k.consumer().load(Ordering::SeqCst), start.wrapping_add(w.len() as u32));
            }
            Err(e) => {
                prop_assert_eq!(e, RingError::Corrupt);
                prop_assert!(avail > 8);
                prop_assert_eq!(k.consumer().load(Ordering::SeqCst), start);
            }
        }
    }

    /// The translation is a field-for-field copy, i.e. the first 46 bytes of both layouts.
    #[test]
    fn cqe_to_wc_copies_every_field(c in cqe()) {
        let w = cqe_to_wc(&c);
        prop_assert_eq!(wc_fields(&w), cqe_fields(&c));
    }
}

#[derive(Clone, Debug)]
enum RqOp {
    Post(Vec<RecvSpec>),
    Consume(usize),
}

fn recv_spec(max_sge: u32) -> impl Strategy<Value = RecvSpec> {
    (
        any::<u64>(),
        prop::collection::vec(
            (any::<u64>(), any::<u32>(), any::<u32>()),
            0..=(max_sge as usize + 1),
        ),
        prop_oneof![30 => Just(None), 1 => (-2i32..0).prop_map(Some)],
        prop::bool::weighted(0.03),
    )
        .prop_map(|(wr_id, sges, num_sge, null_sg_list)| RecvSpec {
            wr_id,
            sges,
            num_sge,
            null_sg_list,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Receive WQEs: exactly once, in order, identical; `EINVAL`/`ENOMEM` at the right WR.
    #[test]
    fn rq_matches_the_queue_model(
        (max_sge, ops) in (0u32..=4).prop_flat_map(|max_sge| (
            Just(max_sge),
            prop::collection::vec(prop_oneof![
                prop::collection::vec(recv_spec(max_sge), 0..8).prop_map(RqOp::Post),
                (0usize..10).prop_map(RqOp::Consume),
            ], 1..40),
        )),
        log2 in 0u32..4,
        start in start_index(),
    ) {
        let slots = 1u32 << log2;
        let (m, rq) = rq_ring(slots, max_sge, start);
        let mut k = Kernel::consumer_of(&m);
        let mut model: VecDeque<RecvdWqe> = VecDeque::new();
        for op in ops {
            match op {
                RqOp::Post(specs) => {
                    let mut want: (c_int, Option<usize>) = (0, None);
                    for (i, s) in specs.iter().enumerate() {
                        let n = s.num_sge.unwrap_or(s.sges.len() as c_int);
                        if n < 0 || n as u32 > max_sge || (n > 0 && s.null_sg_list) {
                            want = (libc::EINVAL, Some(i));
                            break;
                        }
                        if model.len() == slots as usize {
                            want = (libc::ENOMEM, Some(i));
                            break;
                        }
                        model.push_back(RecvdWqe {
                            hdr: RecvWqe { wr_id: s.wr_id, num_sge: n as u32, reserved: 0 },
                            sges: s.sges.iter().map(|&(addr, length, lkey)| Sge { addr, length, lkey }).collect(),
                        });
                    }
                    prop_assert_eq!(post_recv(&rq, &RecvList::new(&specs)), want);
                }
                RqOp::Consume(n) => {
                    for _ in 0..n {
                        prop_assert_eq!(k.pop_recv(), model.pop_front());
                    }
                }
            }
        }
        while let Some(w) = k.pop_recv() {
            prop_assert_eq!(Some(w), model.pop_front());
        }
        prop_assert!(model.is_empty());
    }
}
