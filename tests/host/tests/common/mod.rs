//! The simulated wire and the environment the transport tests drive the engine with: two
//! QPs with their own memory, receive queues and CQs, packets carried between them in order
//! or through a seeded faulty wire. Timers fire when the wire is quiet.
#![allow(dead_code)]

use rrxe_host_tests::logic::{
    opcode::Operation,
    psn::Psn,
    qp_state::{QpState, QpType},
    stats::COUNT,
    transport::*,
    wire::{Packet, Reth, Syndrome},
};
use rrxe_host_tests::uapi::{Cqe, SendWqe, Sge};
use std::collections::VecDeque;

pub const SLOTS: usize = 64;
pub const SLOT_SIZE: usize = 1024;
pub const GID_A: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
pub const GID_B: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];

pub struct Mr {
    pub key: u32,
    pub addr: u64,
    pub access: u32,
    pub bytes: Vec<u8>,
    /// A fast-registration MR (valid only between REG_MR and an invalidation).
    pub fast: bool,
    pub valid: bool,
}

/// Decides which packets a side's own stack drops ([`Side::drop_tx`]).
pub type TxDropFn = Box<dyn FnMut(&[u8]) -> bool>;

#[derive(Default)]
pub struct Side {
    pub mrs: Vec<Mr>,
    pub rq: VecDeque<RecvWr>,
    pub send_cq: Vec<Cqe>,
    pub recv_cq: Vec<Cqe>,
    /// CQ capacity (completions beyond it are lost and reported as overflow).
    pub cq_cap: Option<usize>,
    pub events: Vec<Event>,
    pub out: Vec<(Vec<u8>, Dest)>,
    pub rnr_armed: u32,
    pub retry_timer: Option<u64>,
    /// How many times the engine set or stopped the retransmit timer (a restart at the same
    /// value included).
    pub timer_sets: u32,
    /// The responder's re-acknowledgement timer (microseconds), if armed.
    pub reack_timer: Option<u32>,
    /// For each completion in `recv_cq` / `send_cq`: whether it was solicited.
    pub recv_solicited: Vec<bool>,
    pub send_solicited: Vec<bool>,
    pub stats: Vec<u64>,
    pub atomics_executed: u32,
    /// The RQ ring is broken (a scribbled producer): every take answers Bad.
    pub rq_broken: bool,
    pub rq_takes: u32,
    /// What `Env::in_transit` answers (the shell: another CPU still delivers loopback
    /// packets), and how many times the engine asked.
    pub in_transit: bool,
    pub transit_asks: u32,
    /// Local operations executed, in order: ("reg" | "inv" | "remote-inv", key).
    pub local_ops: Vec<(&'static str, u32)>,
    /// `wr_id`s of the send WRs pushed, in SQ order, and how many of them the engine released
    /// (`Env::sq_retired`): every send completion must come after its WR's release.
    pub sq_log: Vec<u64>,
    pub sq_released: usize,
    /// What `Env::now_ms` answers: [`Pair::run`] moves it on by each timer that fires.
    pub now_ms: u64,
    /// `Env::clock_us` answers `now_ms` in microseconds (the requester keeps a round-trip
    /// estimate); `false`: no clock, the IBTA timeout alone.
    pub clock: bool,
    /// Packets this says to are dropped by the sender's own stack ([`Emit::Dropped`]: not
    /// carried, and not recorded in `out`).
    pub drop_tx: Option<TxDropFn>,
    /// Packets dropped so by `drop_tx`.
    pub tx_dropped: u32,
    /// FLUSHes executed.
    pub flushes: Vec<FlushDone>,
    /// On-demand paging: byte ranges (key, address, length) whose pages are not present; an
    /// access that touches one fails with [`MemError::NotPresent`] and is noted in
    /// `odp_missed` (the shell queues its fault), which [`Pair::run`] then faults in.
    pub odp_absent: Vec<(u32, u64, u64)>,
    pub odp_missed: Vec<(u32, u64, u64)>,
}

/// A FLUSH the responder executed: (key, the range or `None` for the whole MR, the rights it
/// asked for).
pub type FlushDone = (u32, Option<(u64, u64)>, u32);

impl Side {
    pub fn mr(&mut self, key: u32, addr: u64, len: usize, access: u32) {
        let bytes = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(key as u8))
            .collect();
        self.mrs.push(Mr {
            key,
            addr,
            access,
            bytes,
            fast: false,
            valid: true,
        });
    }

    /// A fast-registration MR of `len` bytes, invalid until a REG_MR; its key's index is
    /// `key >> 8`.
    pub fn fast_mr(&mut self, key: u32, len: usize) {
        self.mrs.push(Mr {
            key,
            addr: 0,
            access: 0,
            bytes: (0..len).map(|i| (i as u8) ^ 0x5a).collect(),
            fast: true,
            valid: false,
        });
    }

    pub fn stat(&self, s: Stat) -> u64 {
        self.stats.get(s.index()).copied().unwrap_or(0)
    }

    pub fn find(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        acc: Access,
    ) -> Result<(&mut Mr, usize), MemError> {
        let m = self
            .mrs
            .iter_mut()
            .find(|m| m.key == key && m.valid)
            .ok_or(MemError::BadKey)?;
        let need = acc.rights();
        if m.access & need != need {
            return Err(MemError::Access);
        }
        let off = addr.checked_sub(m.addr).ok_or(MemError::Bounds)?;
        if off + len > m.bytes.len() as u64 {
            return Err(MemError::Bounds);
        }
        if self
            .odp_absent
            .iter()
            .any(|&(k, a, l)| k == key && addr < a + l && a < addr + len.max(1))
        {
            self.odp_missed.push((key, addr, len));
            return Err(MemError::NotPresent);
        }
        let m = self
            .mrs
            .iter_mut()
            .find(|m| m.key == key && m.valid)
            .ok_or(MemError::BadKey)?;
        Ok((m, off as usize))
    }

    /// The shell's fault work: makes present every absent range a miss touched; whether any
    /// was.
    pub fn odp_fault_in(&mut self) -> bool {
        let missed = std::mem::take(&mut self.odp_missed);
        let before = self.odp_absent.len();
        self.odp_absent.retain(|&(k, a, l)| {
            !missed
                .iter()
                .any(|&(mk, ma, ml)| mk == k && ma < a + l && a < ma + ml.max(1))
        });
        self.odp_absent.len() != before
    }
}

impl Env for Side {
    fn mem_check(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        self.find(key, addr, len, acc).map(|_| ())
    }
    fn mem_read(
        &mut self,
        key: u32,
        addr: u64,
        out: &mut [u8],
        acc: Access,
    ) -> Result<(), MemError> {
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
        let (m, off) = self.find(key, addr, 8, op.access())?;
        let old = u64::from_ne_bytes(m.bytes[off..off + 8].try_into().unwrap());
        let new = match op {
            AtomicOp::Write { value } => value,
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
    fn mem_flush(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        whole_mr: bool,
        need: u32,
    ) -> Result<(), MemError> {
        let m = self
            .mrs
            .iter()
            .find(|m| m.key == key && m.valid)
            .ok_or(MemError::BadKey)?;
        if m.access & need != need {
            return Err(MemError::Access);
        }
        if !whole_mr {
            let off = addr.checked_sub(m.addr).ok_or(MemError::Bounds)?;
            if off + len > m.bytes.len() as u64 {
                return Err(MemError::Bounds);
            }
        }
        self.flushes
            .push((key, if whole_mr { None } else { Some((addr, len)) }, need));
        Ok(())
    }
    fn emit(&mut self, pkt: &[u8], dest: Dest) -> Emit {
        if self.drop_tx.as_mut().is_some_and(|f| f(pkt)) {
            self.tx_dropped += 1;
            return Emit::Dropped;
        }
        self.out.push((pkt.to_vec(), dest));
        Emit::Sent
    }
    fn complete(&mut self, cq: CqSel, cqe: &Cqe, solicited: bool) -> bool {
        if cq == CqSel::Send {
            assert!(
                self.sq_log[..self.sq_released].contains(&cqe.wr_id),
                "send completion of wr_id {:#x} before its SQ slot was released",
                cqe.wr_id
            );
        }
        let q = match cq {
            CqSel::Send => &mut self.send_cq,
            CqSel::Recv => &mut self.recv_cq,
        };
        if self.cq_cap.is_some_and(|c| q.len() >= c) {
            return false;
        }
        q.push(*cqe);
        if cq == CqSel::Recv {
            self.recv_solicited.push(solicited);
        } else {
            self.send_solicited.push(solicited);
        }
        true
    }
    fn event(&mut self, ev: Event) {
        self.events.push(ev);
    }
    fn sq_retired(&mut self, outstanding: u32) {
        let released = self.sq_log.len() - outstanding as usize;
        assert!(released > self.sq_released, "release without progress");
        self.sq_released = released;
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
        self.timer_sets += 1;
    }
    fn set_reack_timer(&mut self, usecs: Option<u32>) {
        self.reack_timer = usecs;
    }
    fn stat(&mut self, s: Stat, n: u64) {
        if self.stats.len() < COUNT {
            self.stats.resize(COUNT, 0);
        }
        self.stats[s.index()] += n;
    }
    fn in_transit(&mut self) -> bool {
        self.transit_asks += 1;
        self.in_transit
    }
    fn now_ms(&mut self) -> u64 {
        self.now_ms
    }
    fn clock_us(&mut self) -> Option<u64> {
        self.clock.then_some(self.now_ms * 1000)
    }
    fn mr_register(&mut self, key: u32, iova: u64, len: u64, acc: u32) -> Result<(), u32> {
        self.local_ops.push(("reg", key));
        let m = self
            .mrs
            .iter_mut()
            .find(|m| m.fast && m.key >> 8 == key >> 8)
            .ok_or(wc_status::LOC_PROT_ERR)?;
        if len > m.bytes.len() as u64 {
            return Err(wc_status::LOC_PROT_ERR);
        }
        m.key = key;
        m.addr = iova;
        m.access = acc;
        m.valid = true;
        Ok(())
    }
    fn mr_invalidate(&mut self, key: u32, remote: bool) -> Result<(), u32> {
        self.local_ops
            .push((if remote { "remote-inv" } else { "inv" }, key));
        let m = self
            .mrs
            .iter_mut()
            .find(|m| m.fast && m.key == key)
            .ok_or(wc_status::LOC_PROT_ERR)?;
        m.valid = false;
        Ok(())
    }
}

pub type Eng = Engine<Vec<u8>, Vec<SqEntry>, Vec<Resource>>;

/// A small seeded generator (xorshift64*), so that every faulty run can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u32) -> bool {
        (self.next() % 1000) < u64::from(pct) * 10
    }
}

/// Faults of the simulated wire, in percent per packet.
#[derive(Clone, Copy, Default, Debug)]
pub struct Faults {
    pub loss: u32,
    pub dup: u32,
    pub reorder: u32,
    pub corrupt: u32,
}

pub type DropFn = Box<dyn FnMut(&Packet<'_>, bool) -> bool>;

pub struct Pair {
    pub a: Eng,
    pub b: Eng,
    pub sa: Side,
    pub sb: Side,
    pub scratch: Vec<u8>,
    /// Drop the n-th packet carried (counting from 0), once.
    pub drop_nth: Option<usize>,
    /// Drops the packets this says to (packet, sent by `a`).
    pub drop_if: Option<DropFn>,
    pub carried: usize,
    pub faults: Faults,
    pub rng: Rng,
    /// A packet held back to be delivered after the next one (reordering).
    pub held: Option<(Vec<u8>, bool)>,
    /// Retransmit timeouts fired.
    pub timeouts: u32,
    /// An outage: from the packet with this index on, everything is lost until this many
    /// timeouts have fired (in time, not in packets: a timeout resends as much as it will).
    pub outage: Option<(usize, u32)>,
    /// The path MTU both engines use.
    pub mtu: u32,
    /// PSN ranges (sent by `a`, first PSN, PSNs) of every READ and atomic request carried.
    pub rd_atomic: Vec<(bool, Psn, u32)>,
    /// Response packets a delivered packet may trigger at once (the shell's pacing: what is
    /// left is sent by later rounds of [`Pair::run`], interleaved with the packets the other
    /// end sends meanwhile, as the kernel's continuation sends it).
    pub resp_burst: u32,
    /// How often in a row the random loss of [`Faults`] dropped each packet (sent by `a`,
    /// opcode, PSN) since it last got through, and the longest such run: a packet the wire
    /// loses at every retransmission legitimately ends the WR in RETRY_EXC_ERR.
    pub lost_in_a_row: std::collections::HashMap<(bool, u8, u32), u32>,
    pub longest_loss_run: u32,
}

/// The number of cases a property test runs: `n` in `make test` (whose property tests replay
/// fixed cases, `PROPTEST_RNG_SEED` in scripts/test-host), scaled up by `RRXE_PROP_SCALE` in
/// `make fuzz` (random cases).
pub fn prop_cases(n: u32) -> u32 {
    let scale = std::env::var("RRXE_PROP_SCALE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1);
    n.saturating_mul(scale.max(1))
}

/// [`Pair::resp_burst`] by default: a replay or a long READ answer goes out over several
/// rounds, so that new requests can arrive while it is under way.
pub const RESP_BURST: u32 = 4;

pub fn cfg(t: QpType, qpn: u32, dest: u32, mtu: u32) -> Config {
    let (local, remote) = if qpn == 17 {
        (GID_A, GID_B)
    } else {
        (GID_B, GID_A)
    };
    Config {
        qp_type: t,
        qpn,
        dest_qpn: dest,
        mtu,
        qkey: 0x1111,
        access: access::LOCAL_WRITE
            | access::REMOTE_WRITE
            | access::REMOTE_READ
            | access::REMOTE_ATOMIC,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        rnr_retry: 7,
        timeout: 14,
        retry_cnt: 7,
        peer: if t == QpType::Ud {
            None
        } else {
            Some(PeerAddr { local, remote })
        },
        sq_sig_all: false,
        max_send_sge: 8,
        max_inline: 256,
        max_recv_sge: 8,
        has_srq: false,
        local_ops: false,
    }
}

pub fn engine(c: Config) -> Eng {
    engine_with_resources(c, 16)
}

/// An engine in RESET with storage for `n` responder resources (the shell starts with none
/// and grows it when a modify sets `max_dest_rd_atomic`).
pub fn engine_with_resources(c: Config, n: usize) -> Eng {
    Eng::new(
        c,
        vec![0; SLOTS * SLOT_SIZE],
        vec![SqEntry::default(); SLOTS],
        vec![Resource::default(); n],
        SLOT_SIZE,
    )
    .unwrap()
}

impl Pair {
    pub fn new(t: QpType, mtu: u32) -> Pair {
        Self::with(t, mtu, |_| {})
    }

    pub fn with(t: QpType, mtu: u32, tweak: impl Fn(&mut Config)) -> Pair {
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
            outage: None,
            mtu,
            rd_atomic: Vec::new(),
            resp_burst: RESP_BURST,
            lost_in_a_row: std::collections::HashMap::new(),
            longest_loss_run: 0,
        };
        for (e, s) in [(&mut p.a, &mut p.sa), (&mut p.b, &mut p.sb)] {
            Self::connect(e, s);
        }
        for s in [&mut p.sa, &mut p.sb] {
            s.mr(
                0x100,
                0x1000_0000,
                4 << 20,
                access::LOCAL_WRITE
                    | access::REMOTE_WRITE
                    | access::REMOTE_READ
                    | access::REMOTE_ATOMIC,
            );
            s.mr(0x200, 0x2000_0000, 4 << 20, access::LOCAL_WRITE);
        }
        p
    }

    /// Brings a fresh engine to RTS the way [`Pair::with`] brings both ends there.
    pub fn connect(e: &mut Eng, s: &mut Side) {
        // Two rrxe ends place WRITE packets past a gap for each other (the default); tests of
        // a go-back-N peer turn it off (`Engine::set_place_ahead`).
        e.set_psns(Some(0xff_fff0), Some(0xff_fff0));
        // The whole window from the start, as over loopback; the initial window's own tests
        // (`congestion_window.rs`) set `INITIAL_WINDOW`.
        e.set_initial_window(RC_WINDOW);
        for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
            e.set_state(s, st, false);
        }
    }

    /// Moves both ends' clocks on by `us` microseconds.
    pub fn tick(&mut self, us: u64) {
        let ms = us.div_ceil(1000);
        self.sa.now_ms += ms;
        self.sb.now_ms += ms;
    }

    pub fn faulty(mut self, f: Faults, seed: u64) -> Pair {
        self.faults = f;
        self.rng = Rng(seed | 1);
        self
    }

    pub fn post_send(&mut self, w: SendWqe, sges: &[Sge], inline: &[u8]) {
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
        self.sa.sq_log.push(w.wr_id);
        self.a.sq_pushed(&mut self.sa);
    }

    pub fn deliver(&mut self, bytes: &[u8], from_a: bool) {
        let pkt = Packet::parse(bytes).expect("engine emits valid packets");
        let (src, dst) = if from_a {
            (GID_A, GID_B)
        } else {
            (GID_B, GID_A)
        };
        let info = RxInfo {
            grh: [0x47; GRH_LEN],
            src,
            dst,
        };
        let (eng, side) = if from_a {
            (&mut self.b, &mut self.sb)
        } else {
            (&mut self.a, &mut self.sa)
        };
        eng.rx(side, &mut self.scratch, &pkt, &info);
        eng.run_responder(side, &mut self.scratch, self.resp_burst);
        eng.flush_ack(side, &mut self.scratch);
    }

    /// Checks what an engine emits against what a requester may be sent: a plain ACK never
    /// names a PSN inside a READ or atomic request (their responses acknowledge them; rdma_rxe
    /// completes a pending READ or atomic on a plain ACK at its last PSN, with nothing
    /// placed).
    fn check_emitted(&mut self, pkt: &Packet<'_>, from_a: bool) {
        let psn = pkt.bth().psn;
        match pkt.info().op {
            Operation::RdmaReadRequest => {
                let len = pkt.reth().map_or(0, |r| r.len);
                let n = len.div_ceil(self.mtu).max(1);
                self.rd_atomic.push((from_a, psn, n));
            }
            Operation::CompareSwap
            | Operation::FetchAdd
            | Operation::AtomicWrite
            | Operation::Flush => self.rd_atomic.push((from_a, psn, 1)),
            Operation::Acknowledge => {
                let ack = pkt
                    .aeth()
                    .is_some_and(|a| matches!(Syndrome::decode(a.syndrome), Syndrome::Ack { .. }));
                if let Some(&(_, first, n)) = self
                    .rd_atomic
                    .iter()
                    .find(|&&(by_a, first, n)| ack && by_a != from_a && psn.in_window(first, n))
                {
                    panic!(
                        "plain ACK at PSN {:#x} inside a READ/atomic request {:#x}+{n}",
                        psn.get(),
                        first.get()
                    );
                }
            }
            _ => {}
        }
    }

    /// Carries one packet through the faulty wire.
    pub fn carry(&mut self, bytes: Vec<u8>, from_a: bool) {
        let pkt = Packet::parse(&bytes).expect("engine emits valid packets");
        self.check_emitted(&pkt, from_a);
        let n = self.carried;
        self.carried += 1;
        if self.drop_nth == Some(n) {
            return;
        }
        if self
            .outage
            .is_some_and(|(from, until)| n >= from && self.timeouts < until)
        {
            return;
        }
        if let Some(f) = self.drop_if.as_mut() {
            if f(&pkt, from_a) {
                return;
            }
        }
        let f = self.faults;
        let key = (from_a, pkt.bth().opcode, pkt.bth().psn.get());
        if self.rng.chance(f.loss) || self.rng.chance(f.corrupt) {
            let run = self.lost_in_a_row.entry(key).or_insert(0);
            *run += 1;
            self.longest_loss_run = self.longest_loss_run.max(*run);
            return;
        }
        self.lost_in_a_row.remove(&key);
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

    /// Takes the packets A (`from_a`) or B has emitted and not yet had carried.
    pub fn take_out(&mut self, from_a: bool) -> Vec<Vec<u8>> {
        let side = if from_a { &mut self.sa } else { &mut self.sb };
        side.out.drain(..).map(|(b, _dest)| b).collect()
    }

    /// Carries what both engines have emitted so far (A's packets first), once; returns how
    /// many packets were carried.
    pub fn carry_out(&mut self) -> usize {
        let mut n = 0;
        for from_a in [true, false] {
            for bytes in self.take_out(from_a) {
                n += 1;
                self.carry(bytes, from_a);
            }
        }
        n
    }

    /// Runs both engines and carries packets until nothing moves and no timer is armed.
    pub fn run(&mut self) {
        for _ in 0..1_000_000 {
            let mut moved = self.a.run_requester(&mut self.sa, &mut self.scratch, 16) > 0;
            moved |= self.b.run_requester(&mut self.sb, &mut self.scratch, 16) > 0;
            moved |= self.a.run_responder(&mut self.sa, &mut self.scratch, 16) > 0;
            moved |= self.b.run_responder(&mut self.sb, &mut self.scratch, 16) > 0;
            moved |= self.carry_out() > 0;
            if moved {
                continue;
            }
            if let Some((b, fa)) = self.held.take() {
                self.deliver(&b, fa);
                continue;
            }
            // The work items that fault in what the data path missed (on-demand paging), then
            // resume the QP (its requester runs at the top of the loop).
            let faulted_a = self.sa.odp_fault_in();
            let faulted_b = self.sb.odp_fault_in();
            if faulted_a || faulted_b {
                if faulted_b {
                    self.b
                        .run_responder(&mut self.sb, &mut self.scratch, self.resp_burst);
                }
                continue;
            }
            if self.sa.rnr_armed > 0 {
                self.sa.rnr_armed = 0;
                self.a.rnr_timer_expired();
                continue;
            }
            // The wire is quiet: the responders' re-acknowledgement timers fire first (they are
            // the shorter), then the retransmit timers. With a clock (a round-trip estimate
            // makes the retransmit timer the shorter one), whichever is due first.
            let retry_first = (self.sa.clock || self.sb.clock) && {
                let retry = [self.sa.retry_timer, self.sb.retry_timer];
                let reack = [self.sa.reack_timer, self.sb.reack_timer];
                match (retry.iter().flatten().min(), reack.iter().flatten().min()) {
                    (Some(&t), Some(&r)) => t <= u64::from(r),
                    _ => false,
                }
            };
            if retry_first {
                // Both re-acknowledgement timers run down by the time that passes.
                let t = [self.sa.retry_timer, self.sb.retry_timer]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(0);
                for r in [&mut self.sa.reack_timer, &mut self.sb.reack_timer] {
                    if let Some(v) = r.as_mut() {
                        *v = v.saturating_sub(t.min(u64::from(u32::MAX)) as u32);
                    }
                }
            } else if let Some(us) = self.sa.reack_timer.take() {
                self.tick(u64::from(us));
                self.a.reack_timer_expired(&mut self.sa, &mut self.scratch);
                continue;
            }
            if !retry_first {
                if let Some(us) = self.sb.reack_timer.take() {
                    self.tick(u64::from(us));
                    self.b.reack_timer_expired(&mut self.sb, &mut self.scratch);
                    continue;
                }
            }
            let mut fired = false;
            let due = [self.sa.retry_timer, self.sb.retry_timer];
            if let Some(us) = due.iter().flatten().min() {
                self.tick(*us);
            }
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

pub fn unsafe_free_bytes(w: &SendWqe) -> Vec<u8> {
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

pub fn recv(wr_id: u64, addr: u64, len: u32, key: u32) -> RecvWr {
    let mut r = RecvWr {
        wr_id,
        num_sge: 1,
        ..RecvWr::default()
    };
    r.sges[0] = Sge {
        addr,
        length: len,
        lkey: key,
    };
    r
}

pub fn bytes(s: &Side, key: u32, addr: u64, len: usize) -> Vec<u8> {
    let m = s.mrs.iter().find(|m| m.key == key).unwrap();
    let off = (addr - m.addr) as usize;
    m.bytes[off..off + len].to_vec()
}

pub fn signaled(op: u32, wr_id: u64, num_sge: u32) -> SendWqe {
    SendWqe {
        wr_id,
        opcode: op,
        send_flags: send_flags::SIGNALED,
        num_sge,
        ..SendWqe::default()
    }
}

pub fn is_op(p: &Packet<'_>, op: Operation) -> bool {
    p.info().op == op
}

pub fn statuses(s: &Side) -> Vec<(u64, u32)> {
    s.send_cq.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// Records every RDMA READ request `a` sends (its PSN and RETH) and drops the `drop_nth`-th
/// READ response `b` sends (counting from 1; 0 drops none).
pub fn watch_reads(
    p: &mut Pair,
    drop_nth: usize,
) -> std::rc::Rc<std::cell::RefCell<Vec<(u32, Reth)>>> {
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    let mut responses = 0;
    p.drop_if = Some(Box::new(move |pkt, from_a| {
        if from_a && pkt.info().op == Operation::RdmaReadRequest {
            log.borrow_mut()
                .push((pkt.bth().psn.get(), pkt.reth().unwrap()));
        }
        if !from_a && pkt.info().op == Operation::RdmaReadResponse {
            responses += 1;
            return responses == drop_nth;
        }
        false
    }));
    seen
}

pub fn read_wr(wr_id: u64, remote: u64, local: u64, len: u32) -> (SendWqe, Sge) {
    let mut r = signaled(wr_opcode::RDMA_READ, wr_id, 1);
    r.remote_addr = remote;
    r.rkey = 0x100;
    (
        r,
        Sge {
            addr: local,
            length: len,
            lkey: 0x200,
        },
    )
}

/// Posts `n` signaled RDMA WRITEs of `len` bytes each, from A's MR 0x100 to B's.
pub fn post_writes(p: &mut Pair, n: u64, len: u32) {
    for i in 0..n {
        let mut w = signaled(wr_opcode::RDMA_WRITE, i, 1);
        w.remote_addr = 0x1020_0000 + i * u64::from(len);
        w.rkey = 0x100;
        p.post_send(
            w,
            &[Sge {
                addr: 0x1000_0000 + i * u64::from(len),
                length: len,
                lkey: 0x100,
            }],
            &[],
        );
    }
}

/// Sends `n` packets from A without carrying them.
pub fn send_held(p: &mut Pair, n: usize) -> Vec<Vec<u8>> {
    while p.sa.out.len() < n {
        let budget = (n - p.sa.out.len()).min(16) as u32;
        if p.a.run_requester(&mut p.sa, &mut p.scratch, budget) == 0 {
            break;
        }
    }
    p.take_out(true)
}

/// B's MR 0x100 holds what A's MR 0x100 held, `len` bytes from where `post_writes` puts them.
pub fn same_bytes(p: &Pair, len: usize) {
    assert_eq!(
        bytes(&p.sb, 0x100, 0x1020_0000, len),
        bytes(&p.sa, 0x100, 0x1000_0000, len),
        "data equal to the source"
    );
}

/// Whether `b` is a NAK for a PSN sequence error.
#[allow(dead_code)]
pub fn is_seq_nak(b: &[u8]) -> bool {
    Packet::parse(b).unwrap().aeth().is_some_and(|a| {
        matches!(
            Syndrome::decode(a.syndrome),
            Syndrome::Nak(rrxe_host_tests::logic::wire::NakCode::PsnSeqError)
        )
    })
}

/// Delivers A's packets `pkts` to B, all but the one at index `lost`, then B's answers back
/// to A; returns how many of the answers were sequence NAKs.
#[allow(dead_code)]
pub fn deliver_but(p: &mut Pair, pkts: &[Vec<u8>], lost: usize) -> usize {
    for (k, b) in pkts.iter().enumerate() {
        if k != lost {
            p.deliver(b, true);
        }
    }
    let answers = p.take_out(false);
    let naks = answers.iter().filter(|b| is_seq_nak(b)).count();
    for b in &answers {
        p.deliver(b, false);
    }
    naks
}
