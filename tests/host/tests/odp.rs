//! On-demand paging in the transport engine (docs/odp.md): an access that meets a page that is
//! not present ([`MemError::NotPresent`]) changes nothing, and each place answers it so that
//! nothing is lost and nothing is done twice once the shell has faulted the page in: the RC
//! responder sends an RNR NAK for the request's PSN, the requester's gather holds the send
//! queue, the completer drops the response, a UD receive completes in error.

use rrxe_host_tests::logic::{qp_state::QpType, transport::*};
use rrxe_host_tests::uapi::Sge;

mod common;
use common::*;

fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

#[test]
fn rc_write_into_absent_pages_is_rnr_naked_then_placed_once() {
    let mut p = Pair::new(QpType::Rc, 1024);
    // Three pages of the target absent, the middle of a 10 KiB WRITE.
    p.sb.odp_absent.push((0x100, 0x1000_1000, 0x3000));
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 1);
    w.remote_addr = 0x1000_0800;
    w.rkey = 0x100;
    p.post_send(w, &[sge(0x1000_0000, 10_000, 0x100)], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(
        bytes(&p.sb, 0x100, 0x1000_0800, 10_000),
        bytes(&p.sa, 0x100, 0x1000_0000, 10_000)
    );
    assert!(p.sb.odp_absent.is_empty());
    assert!(p.b.counters.get(Stat::OdpMisses) >= 1);
    assert_eq!(
        p.b.counters.get(Stat::RnrNaksSent),
        p.b.counters.get(Stat::OdpMisses)
    );
    assert_eq!(p.a.counters.get(Stat::RetryExceeded), 0);
    assert_eq!(p.sa.stat(Stat::RnrRetryExceeded), 0);
}

#[test]
fn rc_send_into_absent_receive_buffer_keeps_its_wqe() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(7, 0x2000_0000, 8192, 0x200));
    p.sb.rq.push_back(recv(8, 0x2000_4000, 8192, 0x200));
    p.sb.odp_absent.push((0x200, 0x2000_1000, 0x1000));
    p.post_send(
        signaled(wr_opcode::SEND, 1, 1),
        &[sge(0x1000_0000, 5000, 0x100)],
        &[],
    );
    p.post_send(
        signaled(wr_opcode::SEND, 2, 1),
        &[sge(0x1000_2000, 100, 0x100)],
        &[],
    );
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0)]);
    let rc: Vec<_> =
        p.sb.recv_cq
            .iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect();
    assert_eq!(rc, vec![(7, 0, 5000), (8, 0, 100)]);
    assert_eq!(
        bytes(&p.sb, 0x200, 0x2000_0000, 5000),
        bytes(&p.sa, 0x100, 0x1000_0000, 5000)
    );
    assert!(p.b.counters.get(Stat::OdpMisses) >= 1);
}

#[test]
fn rc_gather_from_absent_pages_holds_the_send_queue() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sa.odp_absent.push((0x100, 0x1000_0000, 0x1000));
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 1);
    w.remote_addr = 0x1000_8000;
    w.rkey = 0x100;
    p.post_send(w, &[sge(0x1000_0000, 3000, 0x100)], &[]);
    // Nothing goes out while the page is absent, and nothing fails.
    let sent = p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    assert_eq!(sent, 0);
    assert!(p.sa.out.is_empty());
    assert!(p.sa.send_cq.is_empty());
    assert_eq!(p.a.counters.get(Stat::OdpMisses), 1);
    assert_eq!(p.sa.odp_missed.len(), 1);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(
        bytes(&p.sb, 0x100, 0x1000_8000, 3000),
        bytes(&p.sa, 0x100, 0x1000_0000, 3000)
    );
    assert_eq!(p.a.counters.get(Stat::Retransmits), 0);
}

#[test]
fn rc_read_from_and_into_absent_pages() {
    let mut p = Pair::new(QpType::Rc, 1024);
    // The responder's source and the requester's sink both start absent.
    p.sb.odp_absent.push((0x100, 0x1000_3000, 0x1000));
    p.sa.odp_absent.push((0x200, 0x2000_0000, 0x1000));
    let (r, s) = read_wr(1, 0x1000_3000, 0x2000_0000, 6000);
    p.post_send(r, &[s], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_0000, 6000),
        bytes(&p.sb, 0x100, 0x1000_3000, 6000)
    );
    assert!(p.b.counters.get(Stat::OdpMisses) >= 1);
    assert!(p.a.counters.get(Stat::OdpMisses) >= 1);
}

#[test]
fn rc_atomics_on_absent_pages_execute_once() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.odp_absent.push((0x100, 0x1000_0000, 0x1000));
    p.sa.odp_absent.push((0x200, 0x2000_1000, 0x1000));
    let before = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0008, 8).try_into().unwrap());
    let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 1, 1);
    a.remote_addr = 0x1000_0008;
    a.rkey = 0x100;
    a.compare_add = 5;
    p.post_send(a, &[sge(0x2000_1000, 8, 0x200)], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(p.sb.atomics_executed, 1);
    let after = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0008, 8).try_into().unwrap());
    assert_eq!(after, before.wrapping_add(5));
    assert_eq!(
        bytes(&p.sa, 0x200, 0x2000_1000, 8),
        before.to_ne_bytes().to_vec()
    );
}

#[test]
fn ud_receive_into_absent_page_completes_in_error_and_the_qp_goes_on() {
    let mut p = Pair::new(QpType::Ud, 1024);
    p.sb.odp_absent.push((0x200, 0x2000_0000, 0x1000));
    p.sb.rq.push_back(recv(1, 0x2000_0000, 2000, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_0000, 2000, 0x200));
    let mut w = signaled(wr_opcode::SEND, 1, 1);
    w.remote_qpn = 18;
    w.remote_qkey = 0x1111;
    p.post_send(w, &[sge(0x1000_0000, 500, 0x100)], &[]);
    p.run();
    assert_eq!(p.sb.recv_cq.len(), 1);
    assert_eq!(p.sb.recv_cq[0].status, wc_status::LOC_PROT_ERR);
    assert_eq!(p.b.counters.get(Stat::OdpMisses), 1);
    // Faulted in by now: the next datagram lands.
    p.post_send(w, &[sge(0x1000_0000, 500, 0x100)], &[]);
    p.run();
    assert_eq!(p.sb.recv_cq.len(), 2);
    assert_eq!(p.sb.recv_cq[1].status, 0);
    assert_eq!(
        bytes(&p.sb, 0x200, 0x2000_0028, 500),
        bytes(&p.sa, 0x100, 0x1000_0000, 500)
    );
}
