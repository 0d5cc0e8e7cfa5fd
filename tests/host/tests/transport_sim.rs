//! The transport engine driven by a simulated wire: two QPs (RC, UC or UD) with their own
//! memory, receive queues and CQs, packets carried between them in order, or through a seeded
//! faulty wire (loss, duplication, reordering; corruption is loss, as the ICRC check in the
//! shell makes it), or with chosen packets dropped; every byte checked. Timers fire when the
//! wire is quiet: the retransmit timeout is always longer than a round trip here.

use proptest::prelude::*;
use rrxe_host_tests::logic::{
    opcode::Operation,
    psn::Psn,
    qp_state::{QpState, QpType},
    stats::COUNT,
    transport::*,
    wire::Packet,
};
use rrxe_host_tests::uapi::{Cqe, SendWqe, Sge};
use std::collections::VecDeque;

const SLOTS: usize = 64;
const SLOT_SIZE: usize = 1024;
const GID_A: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
const GID_B: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];

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
    /// CQ capacity (completions beyond it are lost and reported as overflow).
    cq_cap: Option<usize>,
    events: Vec<Event>,
    out: Vec<(Vec<u8>, Dest)>,
    rnr_armed: u32,
    retry_timer: Option<u64>,
    stats: Vec<u64>,
    atomics_executed: u32,
    /// The RQ ring is broken (a scribbled producer): every take answers Bad.
    rq_broken: bool,
    rq_takes: u32,
}

impl Side {
    fn mr(&mut self, key: u32, addr: u64, len: usize, access: u32) {
        let bytes = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(key as u8)).collect();
        self.mrs.push(Mr { key, addr, access, bytes });
    }

    fn stat(&self, s: Stat) -> u64 {
        self.stats.get(s.index()).copied().unwrap_or(0)
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
        self.atomics_executed += 1;
        Ok(old)
    }
    fn emit(&mut self, pkt: &[u8], dest: Dest) -> Emit {
        self.out.push((pkt.to_vec(), dest));
        Emit::Sent
    }
    fn complete(&mut self, cq: CqSel, cqe: &Cqe) -> bool {
        let q = match cq {
            CqSel::Send => &mut self.send_cq,
            CqSel::Recv => &mut self.recv_cq,
        };
        if self.cq_cap.is_some_and(|c| q.len() >= c) {
            return false;
        }
        q.push(*cqe);
        true
    }
    fn event(&mut self, ev: Event) {
        self.events.push(ev);
    }
    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake {
        self.rq_takes += 1;
        if self.rq_broken {
            return RecvTake::Bad;
        }
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
    fn set_retry_timer(&mut self, usecs: Option<u64>) {
        self.retry_timer = usecs;
    }
    fn stat(&mut self, s: Stat, n: u64) {
        if self.stats.len() < COUNT {
            self.stats.resize(COUNT, 0);
        }
        self.stats[s.index()] += n;
    }
}

type Eng = Engine<Vec<u8>, Vec<SqEntry>, Vec<Resource>>;

/// A small seeded generator (xorshift64*), so that every faulty run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `pct` percent.
    fn chance(&mut self, pct: u32) -> bool {
        (self.next() % 1000) < u64::from(pct) * 10
    }
}

/// Faults of the simulated wire, in percent per packet.
#[derive(Clone, Copy, Default, Debug)]
struct Faults {
    loss: u32,
    dup: u32,
    reorder: u32,
    corrupt: u32,
}

type DropFn = Box<dyn FnMut(&Packet<'_>, bool) -> bool>;

struct Pair {
    a: Eng,
    b: Eng,
    sa: Side,
    sb: Side,
    scratch: Vec<u8>,
    /// Drop the n-th packet carried (counting from 0), once.
    drop_nth: Option<usize>,
    /// Drops the packets this says to (packet, sent by `a`).
    drop_if: Option<DropFn>,
    carried: usize,
    faults: Faults,
    rng: Rng,
    /// A packet held back to be delivered after the next one (reordering).
    held: Option<(Vec<u8>, bool)>,
    /// Retransmit timeouts fired.
    timeouts: u32,
}

fn cfg(t: QpType, qpn: u32, dest: u32, mtu: u32) -> Config {
    let (local, remote) = if qpn == 17 { (GID_A, GID_B) } else { (GID_B, GID_A) };
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
        timeout: 14,
        retry_cnt: 7,
        peer: if t == QpType::Ud { None } else { Some(PeerAddr { local, remote }) },
        sq_sig_all: false,
        max_send_sge: 8,
        max_inline: 256,
        max_recv_sge: 8,
        has_srq: false,
    }
}

fn engine(c: Config) -> Eng {
    Eng::new(c, vec![0; SLOTS * SLOT_SIZE], vec![SqEntry::default(); SLOTS], vec![Resource::default(); 16], SLOT_SIZE)
        .unwrap()
}

impl Pair {
    fn new(t: QpType, mtu: u32) -> Pair {
        Self::with(t, mtu, |_| {})
    }

    fn with(t: QpType, mtu: u32, tweak: impl Fn(&mut Config)) -> Pair {
        let (mut ca, mut cb) = (cfg(t, 17, 18, mtu), cfg(t, 18, 17, mtu));
        tweak(&mut ca);
        tweak(&mut cb);
        let mut p = Pair {
            a: engine(ca),
            b: engine(cb),
            sa: Side::default(),
            sb: Side::default(),
            scratch: vec![0; MAX_PKT],
            drop_nth: None,
            drop_if: None,
            carried: 0,
            faults: Faults::default(),
            rng: Rng(0x9e37_79b9_7f4a_7c15),
            held: None,
            timeouts: 0,
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

    fn faulty(mut self, f: Faults, seed: u64) -> Pair {
        self.faults = f;
        self.rng = Rng(seed | 1);
        self
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

    fn deliver(&mut self, bytes: &[u8], from_a: bool) {
        let pkt = Packet::parse(bytes).expect("engine emits valid packets");
        let (src, dst) = if from_a { (GID_A, GID_B) } else { (GID_B, GID_A) };
        let info = RxInfo { grh: [0x47; GRH_LEN], src, dst };
        let (eng, side) = if from_a { (&mut self.b, &mut self.sb) } else { (&mut self.a, &mut self.sa) };
        eng.rx(side, &mut self.scratch, &pkt, &info);
        eng.run_responder(side, &mut self.scratch, READ_BURST);
        eng.flush_ack(side, &mut self.scratch);
    }

    /// Carries one packet through the faulty wire.
    fn carry(&mut self, bytes: Vec<u8>, from_a: bool) {
        let n = self.carried;
        self.carried += 1;
        if self.drop_nth == Some(n) {
            return;
        }
        if let Some(f) = self.drop_if.as_mut() {
            if f(&Packet::parse(&bytes).unwrap(), from_a) {
                return;
            }
        }
        let f = self.faults;
        if self.rng.chance(f.loss) || self.rng.chance(f.corrupt) {
            return;
        }
        let dup = self.rng.chance(f.dup);
        if self.held.is_none() && self.rng.chance(f.reorder) {
            self.held = Some((bytes, from_a));
            return;
        }
        self.deliver(&bytes, from_a);
        if dup {
            self.deliver(&bytes, from_a);
        }
        if let Some((b, fa)) = self.held.take() {
            self.deliver(&b, fa);
        }
    }

    /// Runs both engines and carries packets until nothing moves and no timer is armed.
    fn run(&mut self) {
        for _ in 0..1_000_000 {
            let mut moved = self.a.run_requester(&mut self.sa, &mut self.scratch, 16) > 0;
            moved |= self.b.run_requester(&mut self.sb, &mut self.scratch, 16) > 0;
            moved |= self.a.run_responder(&mut self.sa, &mut self.scratch, 16) > 0;
            moved |= self.b.run_responder(&mut self.sb, &mut self.scratch, 16) > 0;
            for from_a in [true, false] {
                let pkts: Vec<_> = if from_a { self.sa.out.drain(..).collect() } else { self.sb.out.drain(..).collect() };
                for (bytes, _dest) in pkts {
                    moved = true;
                    self.carry(bytes, from_a);
                }
            }
            if moved {
                continue;
            }
            if let Some((b, fa)) = self.held.take() {
                self.deliver(&b, fa);
                continue;
            }
            if self.sa.rnr_armed > 0 {
                self.sa.rnr_armed = 0;
                self.a.rnr_timer_expired();
                continue;
            }
            // The wire is quiet: the retransmit timers fire.
            let mut fired = false;
            if self.sa.retry_timer.take().is_some() {
                self.a.retry_timer_expired(&mut self.sa);
                fired = true;
            }
            if self.sb.retry_timer.take().is_some() {
                self.b.retry_timer_expired(&mut self.sb);
                fired = true;
            }
            if !fired {
                return;
            }
            self.timeouts += 1;
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
        p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &RxInfo { grh: [0; GRH_LEN], src: GID_A, dst: GID_B });
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
        p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &RxInfo { grh: [0; GRH_LEN], src: GID_A, dst: GID_B });
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
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 2000, lkey: 0x100 }], &[]);
    p.post_send(signaled(wr_opcode::SEND, 2, 1), &[Sge { addr: 0x1000_4000, length: 2000, lkey: 0x100 }], &[]);
    p.drop_nth = Some(3);
    p.run();
    assert_eq!(p.sa.send_cq.iter().map(|c| c.status).collect::<Vec<_>>(), vec![0, 0]);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_2000, 2000), bytes(&p.sa, 0x100, 0x1000_4000, 2000));
    assert!(p.b.counters.get(Stat::SeqNaksSent) >= 1);
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
    assert_eq!(p.b.counters.get(Stat::RxDroppedMsgs), 1);
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

// ---- loss recovery (reliability issue): each case on its own, then a property test ----

fn is_op(p: &Packet<'_>, op: Operation) -> bool {
    p.info().op == op
}

fn statuses(s: &Side) -> Vec<(u64, u32)> {
    s.send_cq.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn read_wr(wr_id: u64, remote: u64, local: u64, len: u32) -> (SendWqe, Sge) {
    let mut r = signaled(wr_opcode::RDMA_READ, wr_id, 1);
    r.remote_addr = remote;
    r.rkey = 0x100;
    (r, Sge { addr: local, length: len, lkey: 0x200 })
}

#[test]
fn tail_loss_is_recovered_by_the_timer() {
    let mut p = Pair::new(QpType::Rc, 256);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 1000, lkey: 0x100 }], &[]);
    // The 4th packet is the last request: no later packet exposes the gap.
    p.drop_nth = Some(3);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_0000, 1000), bytes(&p.sa, 0x100, 0x1000_0000, 1000));
    assert!(p.sa.stat(Stat::Timeouts) >= 1 && p.sa.stat(Stat::Retransmits) >= 1);
    assert_eq!(p.sb.recv_cq.len(), 1, "delivered once");
}

#[test]
fn lost_final_ack_is_recovered() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.sb.rq.push_back(recv(2, 0x2000_2000, 4096, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 100, lkey: 0x100 }], &[]);
    let mut acks = 0;
    p.drop_if = Some(Box::new(move |pkt, from_a| {
        if !from_a && is_op(pkt, Operation::Acknowledge) {
            acks += 1;
            return acks == 1;
        }
        false
    }));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(p.sb.recv_cq.len(), 1, "the retransmitted SEND is a duplicate, not a second message");
    assert!(p.sb.stat(Stat::DuplicateRequests) >= 1);
}

#[test]
fn lost_sequence_nak_is_recovered() {
    let mut p = Pair::new(QpType::Rc, 256);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 2000, lkey: 0x100 }], &[]);
    p.drop_nth = Some(2);
    p.drop_if = Some(Box::new(|pkt, from_a| !from_a && is_op(pkt, Operation::Acknowledge) && pkt.aeth().is_some_and(|a| matches!(a.syndrome(), rrxe_host_tests::logic::wire::Syndrome::Nak(_)))));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(bytes(&p.sb, 0x200, 0x2000_0000, 2000), bytes(&p.sa, 0x100, 0x1000_0000, 2000));
    assert!(p.sb.stat(Stat::SeqNaksSent) >= 1 && p.sa.stat(Stat::Timeouts) >= 1);
}

#[test]
fn lost_read_response_first_middle_or_last_leaves_no_hole() {
    for (which, name) in [(0u32, "first"), (3, "middle"), (7, "last")] {
        let mut p = Pair::new(QpType::Rc, 256);
        let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 2048);
        p.post_send(w, &[sge], &[]);
        let mut k = 0;
        p.drop_if = Some(Box::new(move |pkt, from_a| {
            if !from_a && is_op(pkt, Operation::RdmaReadResponse) {
                k += 1;
                return k == which + 1;
            }
            false
        }));
        p.run();
        assert_eq!(statuses(&p.sa), vec![(1, 0)], "{name}");
        assert_eq!(bytes(&p.sa, 0x200, 0x2000_0000, 2048), bytes(&p.sb, 0x100, 0x1000_0000, 2048), "{name}");
    }
}

#[test]
fn read_gap_asks_only_for_the_missing_part() {
    let mut p = Pair::new(QpType::Rc, 256);
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 2048);
    p.post_send(w, &[sge], &[]);
    let mut k = 0;
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen2 = seen.clone();
    p.drop_if = Some(Box::new(move |pkt, from_a| {
        if from_a && is_op(pkt, Operation::RdmaReadRequest) {
            let r = pkt.reth().unwrap();
            seen2.borrow_mut().push((pkt.bth().psn.get(), r.va, r.len));
        }
        if !from_a && is_op(pkt, Operation::RdmaReadResponse) {
            k += 1;
            return k == 4;
        }
        false
    }));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    let s = seen.borrow();
    assert_eq!(s.len(), 2, "{s:x?}");
    assert_eq!(s[1], (Psn::from_masked(0xff_fff0 + 3).get(), 0x1000_0000 + 3 * 256, 2048 - 3 * 256));
    assert_eq!(bytes(&p.sa, 0x200, 0x2000_0000, 2048), bytes(&p.sb, 0x100, 0x1000_0000, 2048));
}

#[test]
fn lost_atomic_ack_replays_and_never_executes_twice() {
    let mut p = Pair::new(QpType::Rc, 1024);
    let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, 1, 1);
    a.remote_addr = 0x1000_0008;
    a.rkey = 0x100;
    a.compare_add = 3;
    let before = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0008, 8).try_into().unwrap());
    p.post_send(a, &[Sge { addr: 0x2000_0000, length: 8, lkey: 0x200 }], &[]);
    let mut n = 0;
    p.drop_if = Some(Box::new(move |pkt, from_a| {
        if !from_a && is_op(pkt, Operation::AtomicAcknowledge) {
            n += 1;
            return n == 1;
        }
        false
    }));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
    assert_eq!(p.sb.atomics_executed, 1);
    let after = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0008, 8).try_into().unwrap());
    assert_eq!(after, before.wrapping_add(3));
    assert_eq!(bytes(&p.sa, 0x200, 0x2000_0000, 8), before.to_ne_bytes().to_vec());
}

#[test]
fn duplicated_atomic_is_executed_once() {
    let mut p = Pair::new(QpType::Rc, 1024).faulty(Faults { dup: 100, ..Faults::default() }, 7);
    for i in 0..4 {
        let mut a = signaled(wr_opcode::ATOMIC_FETCH_AND_ADD, i, 1);
        a.remote_addr = 0x1000_0010;
        a.rkey = 0x100;
        a.compare_add = 1;
        p.post_send(a, &[Sge { addr: 0x2000_0000 + i * 8, length: 8, lkey: 0x200 }], &[]);
    }
    let before = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0010, 8).try_into().unwrap());
    p.run();
    assert_eq!(p.sa.send_cq.len(), 4);
    assert!(p.sa.send_cq.iter().all(|c| c.status == 0));
    assert_eq!(p.sb.atomics_executed, 4);
    let after = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x1000_0010, 8).try_into().unwrap());
    assert_eq!(after, before + 4);
    for i in 0..4u64 {
        assert_eq!(bytes(&p.sa, 0x200, 0x2000_0000 + i * 8, 8), (before + i).to_ne_bytes().to_vec());
    }
}

#[test]
fn ack_past_an_outstanding_read_is_an_implied_nak() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(9, 0x2010_0000, 100, 0x200));
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 512);
    p.post_send(w, &[sge], &[]);
    p.post_send(signaled(wr_opcode::SEND, 2, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    let mut n = 0;
    p.drop_if = Some(Box::new(move |pkt, from_a| {
        if !from_a && is_op(pkt, Operation::RdmaReadResponse) {
            n += 1;
            return n == 1;
        }
        false
    }));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0)]);
    assert!(p.sa.stat(Stat::ImpliedNaks) >= 1);
    assert_eq!(p.sa.stat(Stat::Timeouts), 0, "recovered without waiting for the timer");
    assert_eq!(bytes(&p.sa, 0x200, 0x2000_0000, 512), bytes(&p.sb, 0x100, 0x1000_0000, 512));
    assert_eq!(p.sb.recv_cq.len(), 1);
}

#[test]
fn retries_exhausted_fail_with_retry_exc_err() {
    for retry_cnt in [0u8, 3, 7] {
        let mut p = Pair::with(QpType::Rc, 1024, |c| c.retry_cnt = retry_cnt);
        p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
        p.post_send(signaled(wr_opcode::SEND, 2, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
        p.drop_if = Some(Box::new(|_, from_a| from_a));
        p.run();
        assert_eq!(statuses(&p.sa), vec![(1, wc_status::RETRY_EXC_ERR), (2, wc_status::WR_FLUSH_ERR)]);
        assert_eq!(p.a.state(), QpState::Err);
        assert_eq!(p.sa.stat(Stat::Timeouts), u64::from(retry_cnt) + 1, "retry_cnt {retry_cnt}: 7 is not infinite");
        assert!(p.sa.retry_timer.is_none());
    }
}

#[test]
fn timeout_zero_never_retransmits() {
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.timeout = 0);
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.drop_if = Some(Box::new(|_, from_a| from_a));
    p.run();
    assert!(p.sa.send_cq.is_empty());
    assert_eq!(p.sa.stat(Stat::Timeouts), 0);
    assert_eq!(timeout_usecs(14), Some(67_108));
    assert_eq!(timeout_usecs(0), None);
}

#[test]
fn rnr_retries_exhausted() {
    let mut p = Pair::with(QpType::Rc, 1024, |c| c.rnr_retry = 2);
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::RNR_RETRY_EXC_ERR)]);
    assert_eq!(p.sa.stat(Stat::RnrNaksRcvd), 3);
    assert_eq!(p.a.state(), QpState::Err);
}

#[test]
fn fenced_wr_waits_for_earlier_reads() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(9, 0x2010_0000, 100, 0x200));
    let (w, sge) = read_wr(1, 0x1000_0000, 0x2000_0000, 4000);
    p.post_send(w, &[sge], &[]);
    let mut s = signaled(wr_opcode::SEND, 2, 1);
    s.send_flags |= send_flags::FENCE;
    p.post_send(s, &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let ops: Vec<_> = p.sa.out.iter().map(|(b, _)| Packet::parse(b).unwrap().info().op).collect();
    assert_eq!(ops, vec![Operation::RdmaReadRequest], "the fenced SEND waits");
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, 0), (2, 0)]);
}

#[test]
fn forged_packets_from_elsewhere_are_dropped() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    let (b, _) = p.sa.out.pop().unwrap();
    let pkt = Packet::parse(&b).unwrap();
    let mut evil = GID_B;
    evil[15] = 66;
    for (src, dst) in [(evil, GID_B), (GID_A, evil)] {
        p.b.rx(&mut p.sb, &mut p.scratch, &pkt, &RxInfo { grh: [0; GRH_LEN], src, dst });
    }
    assert_eq!(p.sb.stat(Stat::RxAdmissionDrops), 2);
    assert!(p.sb.recv_cq.is_empty());
    assert_eq!(p.sb.rq.len(), 1);
    // A forged NAK does not kill the requester either.
    p.deliver(&b, true);
    p.b.flush_ack(&mut p.sb, &mut p.scratch);
    let (ack, _) = p.sb.out.pop().unwrap();
    let ack = Packet::parse(&ack).unwrap();
    p.a.rx(&mut p.sa, &mut p.scratch, &ack, &RxInfo { grh: [0; GRH_LEN], src: evil, dst: GID_A });
    assert_eq!(p.sa.stat(Stat::RxAdmissionDrops), 1);
    assert!(p.sa.send_cq.is_empty());
    p.a.rx(&mut p.sa, &mut p.scratch, &ack, &RxInfo { grh: [0; GRH_LEN], src: GID_B, dst: GID_A });
    assert_eq!(statuses(&p.sa), vec![(1, 0)]);
}

#[test]
fn local_error_completes_after_older_wrs_in_sq_order() {
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x200));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    // WR 1 is in flight when WR 2 fails its lkey check.
    p.post_send(signaled(wr_opcode::SEND, 2, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x777 }], &[]);
    p.post_send(signaled(wr_opcode::SEND, 3, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.a.run_requester(&mut p.sa, &mut p.scratch, 16);
    assert_eq!(
        statuses(&p.sa),
        vec![(1, wc_status::WR_FLUSH_ERR), (2, wc_status::LOC_PROT_ERR), (3, wc_status::WR_FLUSH_ERR)]
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
    p.post_send(w, &[Sge { addr: 0x1000_0000, length: 64, lkey: 0x100 }], &[]);
    p.drop_if = Some(Box::new(|pkt, from_a| !from_a && is_op(pkt, Operation::RdmaReadResponse)));
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::WR_FLUSH_ERR), (2, wc_status::REM_ACCESS_ERR)]);
}

#[test]
fn responder_errors_nak_and_move_to_err() {
    // A bad rkey: NAK, and the responder QP goes to ERR too (class C).
    let mut p = Pair::new(QpType::Rc, 1024);
    let mut w = signaled(wr_opcode::RDMA_WRITE, 1, 1);
    w.remote_addr = 0x1000_0000;
    w.rkey = 0x999;
    p.post_send(w, &[Sge { addr: 0x1000_0000, length: 64, lkey: 0x100 }], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_ACCESS_ERR)]);
    assert_eq!(p.b.state(), QpState::Err);
    // A receive WQE whose lkey fails: Remote Operational Error, LOC_PROT_ERR on our side.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq.push_back(recv(1, 0x2000_0000, 4096, 0x777));
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
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
        p.post_send(signaled(wr_opcode::SEND, i, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
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
    let info = RxInfo { grh: [0; GRH_LEN], src: GID_A, dst: GID_B };
    p.b.rx(&mut p.sb, &mut p.scratch, &Packet::parse(&b).unwrap(), &info);
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
    let info = RxInfo { grh: [0; GRH_LEN], src: GID_A, dst: GID_B };
    p.b.rx(&mut p.sb, &mut p.scratch, &Packet::parse(&b).unwrap(), &info);
    p.b.run_responder(&mut p.sb, &mut p.scratch, 100);
    assert_eq!(p.sb.out.len(), 2);
    p.sb.out.clear();
    // The same READ again, claiming a huge length: answered from the record (2 packets).
    let mut forged = b.clone();
    let reth_at = 12;
    forged[reth_at + 12..reth_at + 16].copy_from_slice(&(1u32 << 30).to_be_bytes());
    p.b.rx(&mut p.sb, &mut p.scratch, &Packet::parse(&forged).unwrap(), &info);
    p.b.run_responder(&mut p.sb, &mut p.scratch, 100_000);
    assert_eq!(p.sb.out.len(), 2);
    // Another rkey: not a duplicate of anything recorded.
    p.sb.out.clear();
    forged[reth_at + 8..reth_at + 12].copy_from_slice(&0x777u32.to_be_bytes());
    p.b.rx(&mut p.sb, &mut p.scratch, &Packet::parse(&forged).unwrap(), &info);
    p.b.run_responder(&mut p.sb, &mut p.scratch, 100_000);
    assert!(p.sb.out.is_empty());
    assert_eq!(p.sb.stat(Stat::DuplicateNoResource), 1);
}

/// One random RC operation of the property test, with what it must leave behind.
#[derive(Clone, Debug)]
enum Want {
    Bytes { side_b: bool, key: u32, at: u64, src_b: bool, src: Vec<Sge> },
    Faa { local: u64, add: u64 },
}

fn lossy_run(seed: u64, f: Faults, ops: &[(u8, u32, bool)], mtu: u32) -> Result<(), TestCaseError> {
    let mut p = Pair::new(QpType::Rc, mtu).faulty(f, seed);
    let mut wants = Vec::new();
    let mut roff = 0u64;
    let base = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x103f_fff8, 8).try_into().unwrap());
    let mut adds = 0u64;
    for (i, &(op, len, fence)) in ops.iter().enumerate() {
        let i = i as u64;
        let src = Sge { addr: 0x1000_0000 + i * 8, length: len, lkey: 0x100 };
        let mut w = match op {
            0 => {
                p.sb.rq.push_back(recv(i, 0x2000_0000 + roff, len, 0x200));
                wants.push(Want::Bytes { side_b: true, key: 0x200, at: 0x2000_0000 + roff, src_b: false, src: vec![src] });
                signaled(wr_opcode::SEND_WITH_IMM, i, 1)
            }
            1 => {
                let mut w = signaled(wr_opcode::RDMA_WRITE, i, 1);
                w.remote_addr = 0x1020_0000 + roff;
                w.rkey = 0x100;
                wants.push(Want::Bytes { side_b: true, key: 0x100, at: w.remote_addr, src_b: false, src: vec![src] });
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
                    src: vec![Sge { addr: w.remote_addr, length: len, lkey: 0x100 }],
                });
                p.post_send(
                    SendWqe { send_flags: w.send_flags | if fence { send_flags::FENCE } else { 0 }, ..w },
                    &[Sge { addr: local, length: len, lkey: 0x200 }],
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
                wants.push(Want::Faa { local, add: w.compare_add });
                p.post_send(w, &[Sge { addr: local, length: 8, lkey: 0x200 }], &[]);
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
    for (k, c) in p.sa.send_cq.iter().enumerate() {
        prop_assert_eq!((c.wr_id, c.status), (k as u64, 0), "in SQ order, successfully");
    }
    let sends = ops.iter().filter(|o| o.0 == 0).count();
    prop_assert_eq!(p.sb.recv_cq.len(), sends, "every SEND delivered once");
    let final_v = u64::from_ne_bytes(bytes(&p.sb, 0x100, 0x103f_fff8, 8).try_into().unwrap());
    prop_assert_eq!(final_v, base.wrapping_add(adds), "atomics applied exactly once");
    let mut olds = Vec::new();
    for w in wants {
        match w {
            Want::Bytes { side_b, key, at, src_b, src } => {
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
    Ok(())
}

fn faults_named(i: usize) -> Faults {
    match i {
        0 => Faults { loss: 1, ..Faults::default() },
        1 => Faults { loss: 10, ..Faults::default() },
        2 => Faults { reorder: 20, ..Faults::default() },
        3 => Faults { dup: 5, ..Faults::default() },
        4 => Faults { corrupt: 2, ..Faults::default() },
        _ => Faults { loss: 5, dup: 5, reorder: 10, corrupt: 1 },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_rc_ops_survive_a_faulty_wire(
        ops in proptest::collection::vec((0u8..4, 0u32..12_000, proptest::bool::weighted(0.2)), 1..24),
        mtu_i in 0usize..3,
        fault_i in 0usize..6,
        seed in any::<u64>(),
    ) {
        let mtu = [256u32, 1024, 4096][mtu_i];
        lossy_run(seed, faults_named(fault_i), &ops, mtu)?;
    }
}

#[test]
fn long_lossy_runs_with_fixed_seeds() {
    for seed in 1..=6u64 {
        let ops: Vec<(u8, u32, bool)> =
            (0..40u64).map(|i| (((i * 7 + seed) % 4) as u8, ((i * 2654435761 + seed * 97) % 40_000) as u32, i % 9 == 0)).collect();
        lossy_run(seed, faults_named(seed as usize % 6), &ops, 1024).unwrap();
    }
}



#[test]
fn broken_receive_ring_ends_in_err_without_spinning() {
    // Issue 9: a ring that answers Bad for ever must not keep flush() looping.
    let mut p = Pair::new(QpType::Rc, 1024);
    p.sb.rq_broken = true;
    p.post_send(signaled(wr_opcode::SEND, 1, 1), &[Sge { addr: 0x1000_0000, length: 10, lkey: 0x100 }], &[]);
    p.run();
    assert_eq!(statuses(&p.sa), vec![(1, wc_status::REM_OP_ERR)]);
    assert_eq!(p.b.state(), QpState::Err);
    assert_eq!(p.sb.events, vec![Event::QpFatal]);
    assert!(p.sb.rq_takes <= 3, "{} takes", p.sb.rq_takes);
    p.b.set_state(&mut p.sb, QpState::Err, false);
    p.b.flush_if_err(&mut p.sb);
    assert!(p.sb.rq_takes <= 5);
}
