//! A QP's scratch packet is sized by its MTU (`packet_room`, issue 30 §5: an RC QP at the
//! usual 1024-byte MTU holds a 1,088-byte buffer, not 4,160). Every operation, with the
//! largest headers it can carry and full-MTU payloads, is assembled into exactly that room at
//! each MTU, on RC, UC and UD, and arrives intact.

use rrxe_host_tests::logic::{qp_state::QpType, transport::*};
use rrxe_host_tests::uapi::{wc_status, wr_opcode, Sge};

mod common;
use common::*;

const MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

#[test]
fn the_room_is_the_largest_packet_at_4096() {
    assert_eq!(packet_room(4096), MAX_PKT);
    assert_eq!(packet_room(1024), 1024 + 64);
    assert!(MTUS.iter().all(|&m| packet_room(m) == m as usize + 64));
}

#[test]
fn every_operation_fits_the_room_of_its_mtu() {
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for mtu in MTUS {
            let mut p = Pair::new(t, mtu);
            p.scratch = vec![0; packet_room(mtu)];
            let mut want = 0;
            for i in 0..3 {
                p.sb.rq
                    .push_back(recv(i, 0x2000_0000 + i * 0x1_0000, 0x1_0000, 0x200));
            }
            // SEND with immediate: UD at exactly the MTU (DETH + ImmDt), else three packets
            // and a bit (first, middle, last with ImmDt).
            let len = if t == QpType::Ud { mtu } else { 3 * mtu + 5 };
            let mut s = signaled(wr_opcode::SEND_WITH_IMM, 1, 1);
            s.remote_qpn = 18;
            s.remote_qkey = 0x1111;
            p.post_send(s, &[sge(0x1000_0000, len, 0x100)], &[]);
            want += 1;
            if t != QpType::Ud {
                // WRITE with immediate: RETH on the first packet, ImmDt on the last; and a
                // WRITE of exactly one MTU (RETH and ImmDt on one packet).
                for (k, n) in [(2, 3 * mtu + 7), (3, mtu)] {
                    let mut w = signaled(wr_opcode::RDMA_WRITE_WITH_IMM, k, 1);
                    w.remote_addr = 0x1010_0000 + k * 0x1_0000;
                    w.rkey = 0x100;
                    p.post_send(w, &[sge(0x1000_0000, n, 0x100)], &[]);
                    p.sb.rq
                        .push_back(recv(10 + k, 0x2010_0000 + k * 0x1_0000, 16, 0x200));
                    want += 1;
                }
            }
            if t == QpType::Rc {
                // READ responses of full MTUs (AETH on the first and last), and an atomic.
                let (r, s) = read_wr(4, 0x1000_0000, 0x2030_0000, 3 * mtu + 9);
                p.post_send(r, &[s], &[]);
                let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 5, 1);
                a.remote_addr = 0x1000_0040;
                a.rkey = 0x100;
                p.post_send(a, &[sge(0x2038_0000, 8, 0x200)], &[]);
                want += 2;
            }
            p.run();
            let st = statuses(&p.sa);
            assert_eq!(st.len(), want, "{t:?} MTU {mtu}: {st:?}");
            assert!(
                st.iter().all(|&(_, s)| s == wc_status::SUCCESS),
                "{t:?} MTU {mtu}: {st:?}"
            );
            // A UD receive starts with the 40-byte GRH.
            let at = if t == QpType::Ud { GRH_LEN as u64 } else { 0 };
            assert_eq!(
                bytes(&p.sb, 0x200, 0x2000_0000 + at, len as usize),
                bytes(&p.sa, 0x100, 0x1000_0000, len as usize),
                "{t:?} MTU {mtu}: the SEND's bytes"
            );
        }
    }
}

#[test]
fn a_room_one_byte_short_of_a_full_packet_fails_the_wr() {
    // The room is what a full packet needs, so it is not larger than it has to be for the
    // common case: a full-MTU SEND with immediate on UD (BTH + DETH + ImmDt + ICRC) fits
    // `packet_room` and fails locally with a buffer the size of its headers short.
    let mtu = 1024;
    let mut p = Pair::new(QpType::Ud, mtu);
    p.scratch = vec![0; mtu as usize + 12 + 8 + 4 + 4 - 1];
    p.sb.rq.push_back(recv(1, 0x2000_0000, 0x1_0000, 0x200));
    let mut s = signaled(wr_opcode::SEND_WITH_IMM, 1, 1);
    s.remote_qpn = 18;
    s.remote_qkey = 0x1111;
    p.post_send(s, &[sge(0x1000_0000, mtu, 0x100)], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::LOC_LEN_ERR)]);
}
