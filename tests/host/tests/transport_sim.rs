//! The transport engine driven by a simulated wire: two QPs (RC, UC or UD) with their own
//! memory, receive queues and CQs, packets carried between them in order (or with chosen
//! packets dropped), every byte checked.

use proptest::prelude::*;
use rrxe_host_tests::logic::{
    psn::Psn,
    qp_state::{QpState, QpType},
    transport::*,
    wire::Packet,
};
use rrxe_host_tests::uapi::{Cqe, SendWqe, Sge};
use std::collections::VecDeque;

const SLOTS: usize = 64;
const SLOT_SIZE: usize = 1024;

struct Mr {
    key: u32,
    addr: u64,
    access: u32,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Side {
    mrs: Vec<Mr>,
    rq: VecDeque<RecvWr>,
    send_cq: Vec<Cqe>,
    recv_cq: Vec<Cqe>,
    events: Vec<Event>,
    out: Vec<(Vec<u8>, Dest)>,
    rnr_armed: u32,
}

impl Side {
    fn mr(&mut self, key: u32, addr: u64, len: usize, access: u32) {
        let bytes = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(key as u8)).collect();
        self.mrs.push(Mr { key, addr, access, bytes });
    }

    fn find(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(&mut Mr, usize), MemError> {
        let m = self.mrs.iter_mut().find(|m| m.key == key).ok_or(MemError::BadKey)?;
        let need = match acc {
            Access::LocalRead => 0,
            Access::LocalWrite => access::LOCAL_WRITE,
            Access::RemoteRead => access::REMOTE_READ,
            Access::RemoteWrite => access::REMOTE_WRITE,
            Access::RemoteAtomic => access::REMOTE_ATOMIC,
        };
        if m.access & need != need {
            return Err(MemError::Access);
        }
        let off = addr.checked_sub(m.addr).ok_or(MemError::Bounds)?;
        if off + len > m.bytes.len() as u64 {
            return Err(MemError::Bounds);
        }
        Ok((m, off as usize))
    }
}

impl Env for Side {
    fn mem_check(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        self.find(key, addr, len, acc).map(|_| ())
    }
    fn mem_read(&mut self, key: u32, addr: u64, out: &mut [u8], acc: Access) -> Result<(), MemError> {
        let (m, off) = self.find(key, addr, out.len() as u64, acc)?;
        out.copy_from_slice(&m.bytes[off..off + out.len()]);
        Ok(())
    }
    fn mem_write(&mut self, key: u32, addr: u64, data: &[u8], acc: Access) -> Result<(), MemError> {
        let (m, off) = self.find(key, addr, data.len() as u64, acc)?;
        m.bytes[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn mem_atomic(&mut self, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        let (m, off) = self.find(key, addr, 8, Access::RemoteAtomic)?;
        let old = u64::from_ne_bytes(m.bytes[off..off + 8].try_into().unwrap());
        let new = match op {
            AtomicOp::CmpSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
        };
        m.bytes[off..off + 8].copy_from_slice(&new.to_ne_bytes());
        Ok(old)
    }
    fn emit(&mut self, pkt: &[u8], dest: Dest) {
        self.out.push((pkt.to_vec(), dest));
    }
    fn complete(&mut self, cq: CqSel, cqe: &Cqe) -> bool {
        match cq {
            CqSel::Send => self.send_cq.push(*cqe),
            CqSel::Recv => self.recv_cq.push(*cqe),
        }
        true
    }
    fn event(&mut self, ev: Event) {
        self.events.push(ev);
    }
    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake {
        match self.rq.pop_front() {
            Some(r) => {
                *out = r;
                RecvTake::Taken
            }
            None => RecvTake::Empty,
        }
    }
    fn arm_rnr_timer(&mut self, _usecs: u32) {
        self.rnr_armed += 1;
    }
}

type Eng = Engine<Vec<u8>, Vec<SqEntry>>;

struct Pair {
    a: Eng,
    b: Eng,
    sa: Side,
    sb: Side,
    scratch: Vec<u8>,
    /// Drop the n-th packet carried (counting from 0), once.
    drop_nth: Option<usize>,
    carried: usize,
}

fn cfg(t: QpType, qpn: u32, dest: u32, mtu: u32) -> Config {
    Config {
        qp_type: t,
        qpn,
        dest_qpn: dest,
        mtu,
        qkey: 0x1111,
        access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        rnr_retry: 7,
        sq_sig_all: false,
        max_send_sge: 8,
        max_inline: 256,
        max_recv_sge: 8,
        has_srq: false,
    }
}

impl Pair {
    fn new(t: QpType, mtu: u32) -> Pair {
        let mk = |c| Eng::new(c, vec![0; SLOTS * SLOT_SIZE], vec![SqEntry::default(); SLOTS], SLOT_SIZE).unwrap();
        let mut p = Pair {
            a: mk(cfg(t, 17, 18, mtu)),
            b: mk(cfg(t, 18, 17, mtu)),
            sa: Side::default(),
            sb: Side::default(),
            scratch: vec![0; MAX_PKT],
            drop_nth: None,
            carried: 0,
        };
        for (e, s) in [(&mut p.a, &mut p.sa), (&mut p.b, &mut p.sb)] {
            e.set_psns(Some(0xff_fff0), Some(0xff_fff0));
            for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
                e.set_state(s, st, false);
            }
            s.mr(0x100, 0x1000_0000, 4 << 20, access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC);
            s.mr(0x200, 0x2000_0000, 4 << 20, access::LOCAL_WRITE);
        }
        p
    }

    fn post_send(&mut self, w: SendWqe, sges: &[Sge], inline: &[u8]) {
        let slot = self.a.sq_slot_mut().expect("room");
        slot.fill(0);
        let h = unsafe_free_bytes(&w);
        slot[..h.len()].copy_from_slice(&h);
        let mut off = h.len();
        for s in sges {
            slot[off..off + 8].copy_from_slice(&s.addr.to_ne_bytes());
            slot[off + 8..off + 12].copy_from_slice(&s.length.to_ne_bytes());
            slot[off + 12..off + 16].copy_from_slice(&s.lkey.to_ne_bytes());
            off += 16;
        }
        slot[h.len()..h.len() + inline.len()].copy_from_slice(inline);
        self.a.sq_pushed(&mut self.sa);
    }

    /// Runs both engines and carries packets until nothing moves.
    fn run(&mut self) {
        for _ in 0..100_000 {
            let mut moved = self.a.run_requester(&mut self.sa, &mut self.scratch, 16) > 0;
            moved |= self.b.run_requester(&mut self.sb, &mut self.scratch, 16) > 0;
            moved |= self.a.run_responder(&mut self.sa, &mut self.scratch, 16) > 0;
            moved |= self.b.run_responder(&mut self.sb, &mut self.scratch, 16) > 0;
            for from_a in [true, false] {
                let pkts: Vec<_> = if from_a { self.sa.out.drain(..).collect() } else { self.sb.out.drain(..).collect() };
                for (bytes, _dest) in pkts {
                    moved = true;
                    let n = self.carried;
                    self.carried += 1;
                    if self.drop_nth == Some(n) {
                        continue;
                    }
                    let pkt = Packet::parse(&bytes).expect("engine emits valid packets");
                    let info = RxInfo { grh: [0x47; GRH_LEN] };
                    let (eng, side) = if from_a { (&mut self.b, &mut self.sb) } else { (&mut self.a, &mut self.sa) };
                    eng.rx(side, &mut self.scratch, &pkt, &info);
                    eng.flush_ack(side, &mut self.scratch);
                }
            }
            if self.sa.rnr_armed > 0 {
                self.sa.rnr_armed = 0;
                self.a.rnr_timer_expired();
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("no quiescence");
    }
}

fn unsafe_free_bytes(w: &SendWqe) -> Vec<u8> {
    let mut v = vec![0u8; core::mem::size_of::<SendWqe>()];
    v[0..8].copy_from_slice(&w.wr_id.to_ne_bytes());
    v[8..12].copy_from_slice(&w.opcode.to_ne_bytes());
    v[12..16].copy_from_slice(&w.send_flags.to_ne_bytes());
    v[16..20].copy_from_slice(&w.imm_data.to_ne_bytes());
    v[20..24].copy_from_slice(&w.num_sge.to_ne_bytes());
    v[24..28].copy_from_slice(&w.inline_len.to_ne_bytes());
    v[28..32].copy_from_slice(&w.ah_num.to_ne_bytes());
    v[32..40].copy_from_slice(&w.remote_addr.to_ne_bytes());
    v[40..44].copy_from_slice(&w.rkey.to_ne_bytes());
    v[44..48].copy_from_slice(&w.remote_qpn.to_ne_bytes());
    v[48..56].copy_from_slice(&w.compare_add.to_ne_bytes());
    v[56..64].copy_from_slice(&w.swap.to_ne_bytes());
    v[64..68].copy_from_slice(&w.remote_qkey.to_ne_bytes());
    v
}

fn recv(wr_id: u64, addr: u64, len: u32, key: u32) -> RecvWr {
    let mut r = RecvWr { wr_id, num_sge: 1, ..RecvWr::default() };
    r.sges[0] = Sge { addr, length: len, lkey: key };
    r
}

fn bytes(s: &Side, key: u32, addr: u64, len: usize) -> Vec<u8> {
    let m = s.mrs.iter().find(|m| m.key == key).unwrap();
    let off = (addr - m.addr) as usize;
    m.bytes[off..off + len].to_vec()
}

fn signaled(op: u32, wr_id: u64, num_sge: u32) -> SendWqe {
    SendWqe { wr_id, opcode: op, send_flags: send_flags::SIGNALED, num_sge, ..SendWqe::default() }
}

#[test]
fn rc_send_segments_and_completes() {
    for len in [0u32, 1, 1023, 1024, 1025, 5000, 65536] {
        let mut p = Pair::new(QpType::Rc, 1024);
        p.sb.rq.push_back(recv(7, 0x2000_0000, 70000, 0x200));
        p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0010, length: len, lkey: 0x100 }], &[]);
        p.run();
        assert_eq!(p.sa.send_cq.len(), 1, "len {len}");
        assert_eq!(p.sa.send_cq[0].status, wc_status::SUCCESS);
        assert_eq!(p.sb.recv_cq.len(), 1);
        assert_eq!(p.sb.recv_cq[0].byte_len, len);
        assert_eq!(p.sb.recv_cq[0].wr_id, 7);
        assert_eq!(bytes(&p.sb, 0x200, 0x2000_0000, len as usize), bytes(&p.sa, 0x100, 0x1000_0010, len as usize));
    }
}

#[test]
fn rc_write_read_atomics() {
    let mut p = Pair::new(QpType::Rc, 256);
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 2);
    w.remote_addr = 0x1000_1000;
    w.rkey = 0x100;
    p.post_send(w, &[Sge { addr: 0x1000_0000, length: 300, lkey: 0x100 }, Sge { addr: 0x1000_2000, length: 500, lkey: 0x100 }], &[]);
    let mut r = signaled(wr_opcode::RDMA_READ, 2, 1);
    r.remote_addr = 0x1000_3000;
    r.rkey = 0x100;
    p.post_send(r, &[Sge { addr: 0x2000_0000, length: 1000, lkey: 0x200 }], &[]);
    let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 3, 1);
    a.remote_addr = 0x1000_0008;
    a.rkey = 0x100;
    a.compare_add = 5;
    p.post_send(a, &[Sge { addr: 0x2000_1000, length: 8, lkey: 0x200 }], &[]);
    let before = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0008, 8).try_into().unwrap());
    p.run();
    let st: Vec<_> = p.sa.send_cq.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, 0), (2, 0), (3, 0)]);
    let mut src = bytes(&p.sa, 0x100, 0x1000_0000, 300);
    src.extend(bytes(&p.sa, 0x100, 0x1000_2000, 500));
    assert_eq!(bytes(&p.sb, 0x100, 0x1000_1000, 800), src);
    assert_eq!(bytes(&p.sa, 0x200, 0x2000_0000, 1000), bytes(&p.sb, 0x100, 0x1000_3000, 1000));
    assert_eq!(bytes(&p.sa, 0x200, 0x2000_1000, 8), before.to_ne_bytes().to_vec());
    let after = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0008, 8).try_into().unwrap());
    assert_eq!(after, before.wrapping_add(5));
}

#[test]
fn rc_big_read_is_paced_and_acks_stay_in_order() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let mut r = signaled(wr_opcode::RDMA_READ, 1, 1);
    r.remote_addr = 0x1000_0000;
    r.rkey = 0x100;
    p.post_send(r, &[Sge { addr: 0x2000_0000, length: 1 << 20, lkey: 0x200 }], &[]);
    p.sb.rq.push_back(recv(5, 0x2010_0000, 100, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 2, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    // One requester step: the READ request and the SEND reach the responder, which owes
    // 1024 READ response packets but sends at most READ_BURST of them at once.
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let pkts: Vec<_> = p.sa.out.drain(..).collect();
    for (b, _) in &pkts {
        let pkt = Packet::parse(b).unwrap();
        p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &RxInfo { grh: [0; GRH_LEN] });
        p.b.run_responder(&mut p.sb, &mut p.scratch, READ_BURST);
        p.b.flush_ack(&mut p.sb, &mut p.scratch);
    }
    assert!(!p.sb.out.is_empty());
    assert!(p.sb.out.len() as u32 <= READ_BURST, "{} packets at once", p.sb.out.len());
    assert!(p.b.responder_pending());
    // No ACK overtakes the owed READ responses.
    assert!(p.sb.out.iter().all(|(b, _)| Packet::parse(b).unwrap().info().op != rrxe_host_tests::logic::opcode::Operation::Acknowledge));
    p.run();
    assert_eq!(p.sa.send_cq.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, 0), (2, 0)]);
    assert_eq!(bytes(&p.sa, 0x200, 0x2000_0000, 1 << 20), bytes(&p.sb, 0x100, 0x1000_0000, 1 << 20));
}

#[test]
fn rc_bad_rkey_naks_and_flushes() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 1);
    w.remote_addr = 0x1000_0000;
    w.rkey = 0x999;
    p.post_send(w, &[Sge { addr: 0x1000_0000, length: 64, lkey: 0x100 }], &[]);
    p.post_send(signaled(wr_opcode::SEND, 2, 0), &[], &[]);
    p.run();
    let st: Vec<_> = p.sa.send_cq.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, wc_status::REM_ACCESS_ERR), (2, wc_status::WR_FLUSH_ERR)]);
    assert_eq!(p.a.state(), QpState::Err);
}

#[test]
fn rc_bad_lkey_is_local_protection_error() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(7, 0x2000_0000, 100, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 64, lkey: 0x777 }], &[]);
    p.run();
    assert_eq!(p.sa.send_cq[0].status, wc_status::LOC_PROT_ERR);
    assert_eq!(p.sa.events, vec![Event::QpFatal]);
}

#[test]
fn rc_rnr_then_recovers() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 3000, lkey: 0x100 }], &[]);
    // No receive posted: RNR NAK, the timer fires (the sim fires at once) ... post it late.
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let pkts: Vec<_> = p.sa.out.drain(..).collect();
    for (b, _) in &pkts {
        let pkt = Packet::parse(b).unwrap();
        p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &RxInfo { grh: [0; GRH_LEN] });
    }
    assert_eq!(p.b.counters.rx_no_wqe, 1);
    p.sb.rq.push_back(recv(9, 0x2000_0000, 4000, 0x200));
    p.run();
    assert_eq!(p.sa.send_cq.len(), 1);
    assert_eq!(p.sa.send_cq[0].status, 0);
    assert_eq!(p.sb.recv_cq[0].byte_len, 3000);
    assert!(p.a.counters.rewinds >= 1);
}

#[test]
fn rc_lost_packet_recovers_through_sequence_nak() {
    let mut p = Pair::new(QpType::Rc, 256);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_2000, 4096, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 2000, lkey: 0x100 }], &[]);
    p.post_send(signaled(wr_opcode::SEND, 2, 1), &[Sge { addr: 0x1000_4000, length: 2000, lkey: 0x100 }], &[]);
    p.drop_nth = Some(3);
    p.run();
    assert_eq!(p.sa.send_cq.iter().map(|c| c.status).collect::<Vec<_>>(), vec![0, 0]);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_2000, 2000), bytes(&p.sa, 0x100, 0x1000_4000, 2000));
    assert!(p.b.counters.tx_nak >= 1);
}

#[test]
fn uc_gap_drops_whole_message() {
    let mut p = Pair::new(QpType::Uc, 256);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_2000, 4096, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 1000, lkey: 0x100 }], &[]);
    p.post_send(signaled(wr_opcode::SEND, 2, 1), &[Sge { addr: 0x1000_4000, length: 1000, lkey: 0x100 }], &[]);
    p.drop_nth = Some(1);
    p.run();
    // Both sends complete locally; only the second message arrives, into the first WQE.
    assert_eq!(p.sa.send_cq.len(), 2);
    assert_eq!(p.sb.recv_cq.len(), 1);
    assert_eq!(p.sb.recv_cq[0].wr_id, 1);
    assert_eq!(p.sb.recv_cq[0].byte_len, 1000);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_0000, 1000), bytes(&p.sa, 0x100, 0x1000_4000, 1000));
}

#[test]
fn ud_grh_and_qkey() {
    let mut p = Pair::new(QpType::Ud, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 2000, 0x200));
    let mut w = signaled(wr_opcode::SEND_WITH_IMM, 1, 1);
    w.remote_qpn = 18;
    w.remote_qkey = 0x1111;
    w.imm_data = 0x1234_5678;
    p.post_send(w, &[Sge { addr: 0x1000_0000, length: 500, lkey: 0x100 }], &[]);
    let mut bad = w;
    bad.remote_qkey = 0x2222;
    p.post_send(bad, &[Sge { addr: 0x1000_0000, length: 500, lkey: 0x100 }], &[]);
    p.run();
    assert_eq!(p.sa.send_cq.len(), 2);
    assert_eq!(p.sb.recv_cq.len(), 1);
    let c = p.sb.recv_cq[0];
    assert_eq!(c.byte_len, 540);
    assert_eq!(c.src_qp, 17);
    assert_eq!(c.imm_data, 0x1234_5678);
    assert_eq!(c.wc_flags, wc_flags::GRH | wc_flags::WITH_IMM);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_0000, 40), vec![0x47; 40]);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_0028, 500), bytes(&p.sa, 0x100, 0x1000_0000, 500));
    assert_eq!(p.b.counters.rx_bad_qkey, 1);
    // Larger than the MTU: refused locally.
    p.post_send(w, &[Sge { addr: 0x1000_0000, length: 1025, lkey: 0x100 }], &[]);
    assert_eq!(p.sa.send_cq[2].status, wc_status::LOC_LEN_ERR);
}

#[test]
fn inline_send_and_unsignaled() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 200, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_1000, 200, 0x200));
    let mut w = SendWqe { wr_id: 1, opcode: wr_opcode::SEND, send_flags: send_flags::INLINE, inline_len: 100, ..SendWqe::default() };
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
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 200, lkey: 0x100 }], &[]);
    p.run();
    assert_eq!(p.sb.recv_cq[0].status, wc_status::LOC_LEN_ERR);
    assert_eq!(p.sa.send_cq[0].status, wc_status::REM_INV_REQ_ERR);
}

#[test]
fn destroy_flushes_outstanding() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 100, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.post_send(signaled(wr_opcode::SEND, 2, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.a.set_state(&mut p.sa, QpState::Err, false);
    p.b.set_state(&mut p.sb, QpState::Err, false);
    assert_eq!(p.sa.send_cq.iter().map(|c| c.status).collect::<Vec<_>>(), vec![5, 5]);
    assert_eq!(p.sb.recv_cq.iter().map(|c| c.status).collect::<Vec<_>>(), vec![5]);
}

#[test]
fn psn_wraps_during_transfer() {
    let mut p = Pair::new(QpType::Rc, 256);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 1 << 20, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 100_000, lkey: 0x100 }], &[]);
    p.run();
    assert_eq!(p.sa.send_cq[0].status, 0);
    assert!(p.a.sq_psn() < 0x1000, "wrapped: {:#x}", p.a.sq_psn());
    let _ = Psn::ZERO;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
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
