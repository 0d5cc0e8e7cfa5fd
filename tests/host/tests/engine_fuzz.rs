//! Fuzzing of the pure receive path: the packet parser and the transport engine take
//! mutated and random packets, in every QP state, from the right and from wrong addresses.
//! Nothing may panic, and no packet may make the engine emit more than a bounded burst or
//! owe more than its recorded responder resources allow.
//!
//! `RRXE_FUZZ_PACKETS` sets the number of packets (default 100,000; `make fuzz` runs 10^6),
//! `RRXE_FUZZ_SEED` the seed (printed). Prints the figures.

use rrxe_host_tests::logic::{
    psn::Psn,
    qp_state::{QpState, QpType},
    transport::*,
    wire::Packet,
};
use rrxe_host_tests::uapi::Sge;

mod common;
use common::*;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Packets of real conversations (both directions), the seeds of the mutations.
fn corpus() -> Vec<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let mut p = Pair::new(t, 256);
        let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let l2 = log.clone();
        p.drop_if = Some(Box::new(move |pkt, from_a| {
            l2.borrow_mut().push((pkt.bytes().to_vec(), from_a));
            false
        }));
        for i in 0..4 {
            p.sb.rq
                .push_back(recv(i, 0x2000_0000 + i * 0x1_0000, 0x1_0000, 0x200));
        }
        let mut s = signaled(wr_opcode::SEND_WITH_IMM, 1, 1);
        s.remote_qpn = 18;
        s.remote_qkey = 0x1111;
        p.post_send(
            s,
            &[Sge {
                addr: 0x1000_0000,
                length: if t == QpType::Ud { 200 } else { 1000 },
                lkey: 0x100,
            }],
            &[],
        );
        if t != QpType::Ud {
            let mut w = signaled(wr_opcode::RDMA_WRITE_WITH_IMM, 2, 1);
            w.remote_addr = 0x1000_8000;
            w.rkey = 0x100;
            p.post_send(
                w,
                &[Sge {
                    addr: 0x1000_0000,
                    length: 700,
                    lkey: 0x100,
                }],
                &[],
            );
        }
        if t == QpType::Rc {
            let (r, sge) = read_wr(3, 0x1000_0000, 0x2010_0000, 900);
            p.post_send(r, &[sge], &[]);
            for (k, op) in [
                (4, wr_opcode::ATOMIC_CMP_AND_SWP),
                (5, wr_opcode::ATOMIC_FETCH_AND_ADD),
            ] {
                let mut a = signaled(op, k, 1);
                a.remote_addr = 0x1000_0040;
                a.rkey = 0x100;
                p.post_send(
                    a,
                    &[Sge {
                        addr: 0x2020_0000,
                        length: 8,
                        lkey: 0x200,
                    }],
                    &[],
                );
            }
        }
        p.run();
        out.extend(log.borrow().iter().cloned());
    }
    out
}

/// One mutation of `b`.
fn mutate(rng: &mut Rng, b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    match rng.next() % 10 {
        0 => {
            // Truncated.
            let n = (rng.next() as usize) % (v.len() + 1);
            v.truncate(n);
        }
        1 => {
            // Extended with garbage.
            let n = (rng.next() % 64) as usize;
            v.extend((0..n).map(|_| rng.next() as u8));
        }
        2 => {
            // Any opcode, defined or not.
            if !v.is_empty() {
                v[0] = rng.next() as u8;
            }
        }
        3 if v.len() >= 12 => {
            // PSN near the edges.
            let d = (rng.next() % 8) as u32;
            let psn = [0u32, 0xff_ffff, 0x80_0000, 0xff_fff0 + d][(rng.next() % 4) as usize];
            v[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
        }
        4 if v.len() >= 8 => {
            // Another QPN (or ours).
            let q = [0u32, 1, 17, 18, 0xff_ffff][(rng.next() % 5) as usize];
            v[5..8].copy_from_slice(&q.to_be_bytes()[1..]);
        }
        5 if v.len() >= 28 => {
            // RETH / atomic ETH fields: va, rkey, length.
            let at = 12 + (rng.next() % 16) as usize;
            let end = (at + 4).min(v.len());
            for x in &mut v[at..end] {
                *x = rng.next() as u8;
            }
        }
        6 if v.len() >= 4 => {
            // P_Key and flags.
            v[1] = rng.next() as u8;
            v[2] = rng.next() as u8;
        }
        _ => {
            let flips = 1 + rng.next() % 4;
            for _ in 0..flips {
                if v.is_empty() {
                    break;
                }
                let i = (rng.next() as usize) % v.len();
                v[i] ^= 1 << (rng.next() % 8);
            }
        }
    }
    v
}

const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

#[test]
fn receive_path_survives_hostile_packets() {
    let n = env_u64("RRXE_FUZZ_PACKETS", 100_000);
    let seed = env_u64("RRXE_FUZZ_SEED", 0x5e_ed0f_f022);
    println!("fuzz: seed {seed:#x}, {n} packets");
    let corpus = corpus();
    let mut rng = Rng(seed | 1);
    let mut scratch = vec![0u8; MAX_PKT];
    let (mut parsed, mut handled, mut emitted, mut max_burst) = (0u64, 0u64, 0u64, 0usize);
    // A fresh set of QPs every few thousand packets, in every state.
    let mut pairs: Vec<Pair> = Vec::new();
    for k in 0..n {
        if k % 4096 == 0 {
            pairs.clear();
            for (i, t) in [QpType::Rc, QpType::Uc, QpType::Ud].into_iter().enumerate() {
                let st = if rng.next() % 5 < 3 {
                    QpState::Rts
                } else {
                    STATES[(rng.next() as usize + i) % STATES.len()]
                };
                let mut p = Pair::new(t, [256, 1024, 4096][(rng.next() % 3) as usize]);
                for j in 0..8 {
                    p.sb.rq.push_back(recv(
                        j,
                        0x2000_0000 + j * 0x1000,
                        0x800,
                        if j % 3 == 2 { 0x777 } else { 0x200 },
                    ));
                }
                p.sb.rq_broken = rng.next().is_multiple_of(16);
                p.b.set_state(&mut p.sb, st, false);
                pairs.push(p);
            }
        }
        let (bytes, _) = &corpus[(rng.next() as usize) % corpus.len()];
        let pkt_bytes = if rng.next().is_multiple_of(50) {
            (0..(rng.next() % 300) as usize)
                .map(|_| rng.next() as u8)
                .collect()
        } else {
            mutate(&mut rng, bytes)
        };
        let Ok(pkt) = Packet::parse(&pkt_bytes) else {
            continue;
        };
        parsed += 1;
        let p = &mut pairs[(rng.next() % 3) as usize];
        // A QP the fuzz killed comes back (RESET .. RTS) at a PSN near the corpus'.
        for (e, sd) in [(&mut p.a, &mut p.sa), (&mut p.b, &mut p.sb)] {
            if e.state() == QpState::Err && rng.next().is_multiple_of(4) {
                for st in [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts] {
                    e.set_state(sd, st, false);
                }
                let psn = 0xff_fff0 + (rng.next() % 8) as u32;
                e.set_psns(Some(psn), Some(psn));
                sd.rq
                    .extend((0..4).map(|j| recv(j, 0x2000_0000 + j * 0x1000, 0x800, 0x200)));
            }
        }
        let mut src = GID_A;
        if rng.next().is_multiple_of(8) {
            src[15] = rng.next() as u8;
        }
        let info = RxInfo {
            grh: [0; GRH_LEN],
            src,
            dst: GID_B,
        };
        // Either side: the responder gets requests, the requester responses.
        let (eng, side) = if rng.next().is_multiple_of(2) {
            (&mut p.b, &mut p.sb)
        } else {
            (&mut p.a, &mut p.sa)
        };
        eng.rx(side, &mut scratch, &pkt, &info);
        eng.run_responder(side, &mut scratch, READ_BURST);
        eng.flush_ack(side, &mut scratch);
        handled += 1;
        max_burst = max_burst.max(side.out.len());
        assert!(
            side.out.len() as u32 <= READ_BURST + 2,
            "one packet made {} packets",
            side.out.len()
        );
        emitted += side.out.len() as u64;
        side.out.clear();
        // What is owed drains in bounded time: at most the recorded resources.
        let mut calls = 0;
        while eng.responder_pending() {
            calls += 1;
            assert!(calls < 20_000, "responder never idles");
            eng.run_responder(side, &mut scratch, READ_BURST);
            emitted += side.out.len() as u64;
            side.out.clear();
        }
        if rng.next().is_multiple_of(16) {
            eng.retry_timer_expired(side);
            eng.run_requester(side, &mut scratch, 64);
            side.out.clear();
        }
        let _ = Psn::ZERO;
    }
    println!("fuzz: {n} packets, {parsed} parsed, {handled} handled, {emitted} emitted, largest burst {max_burst}, 0 crashes");
}
