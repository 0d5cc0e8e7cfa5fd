//! Target `engine`: the transport engine (`kmod/logic/transport/`) of a pair of QPs (RC, UC
//! or UD), driven by a script decoded from the fuzzer's bytes: send and receive WRs posted
//! (well formed or raw slot bytes), modify_qp (validated by `qp_attr::validate` and committed
//! as `verbs/qp.rs` commits it), timer expiries, CQ overflows, broken receive rings, pushback
//! from the wire, and packets: the engines' own, delivered, dropped, duplicated, reordered or
//! corrupted, replayed from history with edits, or made up from raw bytes, from the peer or
//! from a stranger. The environment is `tests/common`'s model ([`Side`]), wrapped to count
//! what each engine call does.
//!
//! Invariants (a panic otherwise):
//! - nothing in the engine panics (overflow checks included);
//! - bounded work per call: packets emitted per call within the call's budget (0 for calls
//!   that send nothing), completions and receive-WQE takes bounded by what is queued, and the
//!   responder drains what it owes in a bounded number of calls;
//! - every packet emitted parses, carries the default P_Key, the QP's transport, its peer's
//!   QPN (or the WR's destination on UD) and at most one MTU of payload;
//! - every WR completes at most once, send WRs in SQ order and after their slot was released
//!   (`Side`), receive WRs in RQ order, within the receive buffer's capacity;
//! - a QP in ERR emits nothing; moved to ERR at the end, a QP has nothing outstanding and every
//!   signaled send WR and every receive WR it took has completed exactly once.

use super::Input;
use crate::common::{Eng, Side, GID_A, GID_B, SLOTS, SLOT_SIZE};
use rrxe_host_tests::logic::{
    limits,
    opcode::Transport,
    port::IbMtu,
    qp_attr::{self, DeviceLimits, ModifyRequest, PortInfo},
    qp_state::{transition_masks, AttrMask, QpCurrent, QpState, QpType},
    transport::*,
    wire::{self, Packet, MASK24},
};
use rrxe_host_tests::uapi::{Cqe, SendWqe, Sge};
use std::collections::VecDeque;

/// The two QPs' numbers and addresses.
const QPN: [u32; 2] = [17, 18];
const GID: [[u8; 16]; 2] = [GID_A, GID_B];
const STRANGER: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 99];
/// Registered memory per side: 0x100 everything, 0x200 local write, 0x300 remote read only,
/// 0x400 a fast-registration MR (kernel consumers' QPs).
const MR_LEN: usize = 32 << 10;
const FAST_LEN: usize = 16 << 10;
const KEYS: [u32; 6] = [0x100, 0x200, 0x300, 0x400, 0x401, 0x0bad];
/// Script steps at most.
const MAX_OPS: usize = 256;
/// Packets kept for replays.
const HISTORY: usize = 32;
/// The shell's requester budget (`verbs/dp.rs` BUDGET).
const BUDGET: u32 = 64;

const LIMITS: DeviceLimits = DeviceLimits {
    phys_port_cnt: limits::PHYS_PORT_CNT,
    max_qp_wr: limits::MAX_QP_WR,
    max_send_sge: limits::MAX_SGE,
    max_recv_sge: limits::MAX_SGE,
    max_inline_data: limits::MAX_INLINE_DATA,
    max_qp_rd_atom: limits::MAX_QP_RD_ATOM,
    max_qp_init_rd_atom: limits::MAX_QP_INIT_RD_ATOM,
};

pub fn run(data: &[u8]) {
    let trace = std::env::var_os("RRXE_FUZZ_TRACE").is_some();
    let mut inp = Input::new(data);
    let mut w = World::new(&mut inp);
    w.trace = trace;
    if trace {
        let c = w.e[0].config();
        eprintln!(
            "engine: {:?} mtu {} caps {:?} cfg {c:?}",
            w.caps.t, c.mtu, w.caps
        );
    }
    for _ in 0..MAX_OPS {
        if inp.is_empty() {
            break;
        }
        w.step(&mut inp);
    }
    w.finish();
}

struct SendRec {
    signaled: bool,
    /// REG_MR or LOCAL_INV (executed without a packet).
    local: bool,
    done: u32,
}

struct RecvRec {
    cap: u64,
    done: u32,
}

/// `Side` with bookkeeping: what one engine call did, and every WR's completions.
struct Model {
    qpn: u32,
    side: Side,
    /// Per call.
    emits: u32,
    completes: u32,
    takes: u32,
    calls: u32,
    /// The next this many packets are pushed back ([`Emit::Congested`]).
    congest: u32,
    send: Vec<SendRec>,
    recv: Vec<RecvRec>,
    last_send_done: u64,
    last_recv_done: u64,
    /// A RESET discarded WRs (they never complete).
    had_reset: bool,
    rq_was_broken: bool,
}

impl Model {
    fn begin(&mut self) {
        self.emits = 0;
        self.completes = 0;
        self.takes = 0;
        self.calls = 0;
    }

    /// Refuses what no MR can hold (a range that wraps), before the model's arithmetic.
    fn range_ok(addr: u64, len: u64) -> Result<(), MemError> {
        addr.checked_add(len).map(|_| ()).ok_or(MemError::Bounds)
    }
}

impl Env for Model {
    fn mem_check(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(), MemError> {
        self.calls += 1;
        Self::range_ok(addr, len)?;
        self.side.mem_check(key, addr, len, acc)
    }
    fn mem_read(
        &mut self,
        key: u32,
        addr: u64,
        out: &mut [u8],
        acc: Access,
    ) -> Result<(), MemError> {
        self.calls += 1;
        Self::range_ok(addr, out.len() as u64)?;
        self.side.mem_read(key, addr, out, acc)
    }
    fn mem_write(&mut self, key: u32, addr: u64, data: &[u8], acc: Access) -> Result<(), MemError> {
        self.calls += 1;
        Self::range_ok(addr, data.len() as u64)?;
        self.side.mem_write(key, addr, data, acc)
    }
    fn mem_atomic(&mut self, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.calls += 1;
        Self::range_ok(addr, 8)?;
        self.side.mem_atomic(key, addr, op)
    }
    fn mem_flush(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        whole_mr: bool,
        need: u32,
    ) -> Result<(), MemError> {
        self.calls += 1;
        Self::range_ok(addr, len)?;
        self.side.mem_flush(key, addr, len, whole_mr, need)
    }
    fn emit(&mut self, pkt: &[u8], dest: Dest) -> Emit {
        self.calls += 1;
        self.emits += 1;
        if self.congest > 0 {
            self.congest -= 1;
            // Pushed back (the packet counts as lost), or dropped before it left.
            return if self.congest.is_multiple_of(2) {
                Emit::Congested
            } else {
                Emit::Dropped
            };
        }
        self.side.emit(pkt, dest)
    }
    fn complete(&mut self, cq: CqSel, c: &Cqe, solicited: bool) -> bool {
        self.calls += 1;
        self.completes += 1;
        assert_eq!(c.qp_num, self.qpn, "completion for another QP");
        let ok = c.status == wc_status::SUCCESS;
        match cq {
            CqSel::Send => {
                let id = c.wr_id;
                let rec = usize::try_from(id)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| self.send.get_mut(i))
                    .unwrap_or_else(|| panic!("send completion of unknown wr_id {id:#x}"));
                rec.done += 1;
                assert_eq!(rec.done, 1, "send WR {id} completed twice");
                assert!(
                    id > self.last_send_done,
                    "send WR {id} completed after WR {} (out of SQ order)",
                    self.last_send_done
                );
                self.last_send_done = id;
                assert_eq!(
                    solicited, !ok,
                    "a send completion is solicited iff unsuccessful"
                );
            }
            CqSel::Recv => {
                let id = c.wr_id;
                let rec = usize::try_from(id)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| self.recv.get_mut(i))
                    .unwrap_or_else(|| panic!("receive completion of unknown wr_id {id:#x}"));
                rec.done += 1;
                assert_eq!(rec.done, 1, "receive WR {id} completed twice");
                assert!(
                    id > self.last_recv_done,
                    "receive WR {id} completed after WR {} (out of RQ order)",
                    self.last_recv_done
                );
                self.last_recv_done = id;
                if ok && c.opcode == wc_opcode::RECV {
                    // (RECV_RDMA_WITH_IMM reports the WRITE's length, placed elsewhere.)
                    assert!(
                        u64::from(c.byte_len) <= rec.cap,
                        "receive WR {id} got {} bytes, holds {}",
                        c.byte_len,
                        rec.cap
                    );
                }
                if !ok {
                    assert!(solicited, "an unsuccessful completion is solicited");
                }
            }
        }
        self.side.complete(cq, c, solicited)
    }
    fn event(&mut self, ev: Event) {
        self.calls += 1;
        self.side.event(ev)
    }
    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake {
        self.calls += 1;
        self.takes += 1;
        self.side.recv_take(out)
    }
    fn arm_rnr_timer(&mut self, usecs: u32) {
        self.calls += 1;
        self.side.arm_rnr_timer(usecs)
    }
    fn set_retry_timer(&mut self, usecs: Option<u64>) {
        self.calls += 1;
        self.side.set_retry_timer(usecs)
    }
    fn set_reack_timer(&mut self, usecs: Option<u32>) {
        self.calls += 1;
        self.side.set_reack_timer(usecs)
    }
    fn stat(&mut self, s: Stat, n: u64) {
        Env::stat(&mut self.side, s, n)
    }
    fn in_transit(&mut self) -> bool {
        self.calls += 1;
        self.side.in_transit()
    }
    fn sq_retired(&mut self, outstanding: u32) {
        self.calls += 1;
        self.side.sq_retired(outstanding)
    }
    fn mr_register(&mut self, key: u32, iova: u64, len: u64, access: u32) -> Result<(), u32> {
        self.calls += 1;
        self.side.mr_register(key, iova, len, access)
    }
    fn mr_invalidate(&mut self, key: u32, remote: bool) -> Result<(), u32> {
        self.calls += 1;
        self.side.mr_invalidate(key, remote)
    }
}

/// The committed attributes of a QP (`verbs/qp.rs` QpAttrs), as far as the engine sees them.
#[derive(Clone, Copy)]
struct Attrs {
    path_mtu: IbMtu,
    qkey: u32,
    dest_qpn: u32,
    access: u32,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    notify: bool,
}

/// What creation fixed.
#[derive(Clone, Copy, Debug)]
struct Caps {
    t: QpType,
    port_mtu: IbMtu,
    sq_sig_all: bool,
    has_srq: bool,
    local_ops: bool,
    max_send_sge: u32,
    max_inline: u32,
    max_recv_sge: u32,
}

struct World {
    caps: Caps,
    e: [Eng; 2],
    m: [Model; 2],
    attrs: [Attrs; 2],
    /// The MTU a QP segments with changed since creation (its packets' lengths are then only
    /// bounded, not checked against the position rules).
    mtu_changed: [bool; 2],
    /// `wire[i]`: packets QP `i` sent, not yet delivered.
    wire: [VecDeque<Vec<u8>>; 2],
    history: VecDeque<(Vec<u8>, usize)>,
    scratch: Vec<u8>,
    /// RRXE_FUZZ_TRACE: every call and packet on standard error (to read a crash's input).
    trace: bool,
}

const MTUS: [IbMtu; 5] = [
    IbMtu::Mtu256,
    IbMtu::Mtu512,
    IbMtu::Mtu1024,
    IbMtu::Mtu2048,
    IbMtu::Mtu4096,
];

fn psn_choice(inp: &mut Input<'_>) -> u32 {
    match inp.u8() % 4 {
        0 => 0,
        1 => 0xff_fff0 + u32::from(inp.u8() % 16),
        2 => 0x7f_fff8 + u32::from(inp.u8() % 16),
        _ => inp.u32() & MASK24,
    }
}

impl World {
    fn new(inp: &mut Input<'_>) -> World {
        let t = inp.pick(&[QpType::Rc, QpType::Uc, QpType::Ud]);
        let f = inp.u8();
        let port_mtu = inp.pick(&MTUS);
        let path_mtu = inp.pick(&MTUS).min(port_mtu);
        let caps = Caps {
            t,
            port_mtu,
            sq_sig_all: f & 1 != 0,
            has_srq: f & 2 != 0,
            local_ops: f & 4 != 0,
            max_send_sge: u32::from(inp.u8() % 9),
            max_inline: inp.pick(&[0, 16, 64, 256]),
            max_recv_sge: 1 + u32::from(inp.u8() % 8),
        };
        let a = Attrs {
            path_mtu,
            qkey: 0x1111,
            dest_qpn: 0,
            access: access::LOCAL_WRITE
                | if f & 8 != 0 {
                    u32::from(inp.u8() & 0xe)
                } else {
                    access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC
                },
            max_rd_atomic: inp.u8() % 9,
            max_dest_rd_atomic: inp.u8() % 9,
            min_rnr_timer: inp.u8() % 32,
            timeout: inp.pick(&[0, 1, 14, 31]),
            retry_cnt: inp.u8() % 8,
            rnr_retry: inp.u8() % 8,
            notify: f & 16 != 0,
        };
        let attrs = [
            Attrs {
                dest_qpn: QPN[1],
                ..a
            },
            Attrs {
                dest_qpn: QPN[0],
                ..a
            },
        ];
        let psn_a = psn_choice(inp);
        let psn_b = psn_choice(inp);
        // Mostly the peers agree on the PSNs.
        let (rq_a, rq_b) = if f & 32 != 0 {
            (psn_choice(inp), psn_choice(inp))
        } else {
            (psn_b, psn_a)
        };
        let mk = |i: usize| {
            let mut side = Side::default();
            let all = access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC;
            side.mr(0x100, 0x1000_0000, MR_LEN, all);
            side.mr(0x200, 0x2000_0000, MR_LEN, access::LOCAL_WRITE);
            side.mr(0x300, 0x3000_0000, 4096, access::REMOTE_READ);
            if caps.local_ops {
                side.fast_mr(0x400, FAST_LEN);
            }
            Model {
                qpn: QPN[i],
                side,
                emits: 0,
                completes: 0,
                takes: 0,
                calls: 0,
                congest: 0,
                send: Vec::new(),
                recv: Vec::new(),
                last_send_done: 0,
                last_recv_done: 0,
                had_reset: false,
                rq_was_broken: false,
            }
        };
        let cfg0 = config(&caps, &attrs[0], 0);
        let cfg1 = config(&caps, &attrs[1], 1);
        let eng = |c: Config| {
            Eng::new(
                c,
                vec![0; SLOTS * SLOT_SIZE],
                vec![SqEntry::default(); SLOTS],
                vec![Resource::default(); limits::MAX_QP_RD_ATOM as usize],
                SLOT_SIZE,
            )
            .expect("engine")
        };
        let mut w = World {
            caps,
            e: [eng(cfg0), eng(cfg1)],
            m: [mk(0), mk(1)],
            attrs,
            mtu_changed: [false; 2],
            wire: [VecDeque::new(), VecDeque::new()],
            history: VecDeque::new(),
            scratch: vec![0; MAX_PKT],
            trace: false,
        };
        for (i, (sq, rq)) in [(psn_a, rq_a), (psn_b, rq_b)].into_iter().enumerate() {
            w.call(i, 0, "bring-up", |e, m, _| {
                for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
                    e.set_state(m, s, false);
                }
                e.set_psns(Some(sq), Some(rq));
            });
        }
        w
    }

    /// One engine call on QP `i`, and the checks of what it did: at most `bound` packets.
    fn call<R>(
        &mut self,
        i: usize,
        bound: u32,
        what: &str,
        f: impl FnOnce(&mut Eng, &mut Model, &mut [u8]) -> R,
    ) -> R {
        let before = self.e[i].state();
        let queued = self.m[i].side.rq.len() as u32;
        let events = self.m[i].side.events.len();
        self.m[i].begin();
        let r = f(&mut self.e[i], &mut self.m[i], &mut self.scratch);
        let (e, m) = (&self.e[i], &self.m[i]);
        assert!(
            m.emits <= bound,
            "{what} on QP {i}: {} packets in one call (at most {bound})",
            m.emits
        );
        if before == QpState::Err && e.state() == QpState::Err {
            assert_eq!(m.emits, 0, "{what} on QP {i} in ERR emitted packets");
        }
        assert!(
            m.takes <= queued + 2,
            "{what} on QP {i}: {} receive WQEs taken, {queued} queued",
            m.takes
        );
        assert!(
            m.completes <= SLOTS as u32 + queued + 2,
            "{what} on QP {i}: {} completions in one call",
            m.completes
        );
        assert!(
            m.calls <= 100_000,
            "{what} on QP {i}: {} environment calls",
            m.calls
        );
        let d = e.details();
        assert!(d.sq_outstanding <= SLOTS as u32 && d.sq_unsent <= d.sq_outstanding);
        assert!(d.backoff <= 2 && d.retry_left <= 7 && d.rnr_left <= 7);
        if e.state() == QpState::Err {
            assert!(!e.requester_ready(), "QP {i} in ERR has requester work");
            assert!(
                m.side.retry_timer.is_none(),
                "{what} on QP {i}: retransmit timer armed in ERR"
            );
        }
        if e.sq_draining() {
            assert_eq!(e.state(), QpState::Sqd, "QP {i} drains its SQ outside SQD");
        }
        // The affiliated events the call raised fit the state it left the QP in.
        for ev in &m.side.events[events..] {
            match ev {
                Event::QpFatal => assert_eq!(e.state(), QpState::Err, "QP_FATAL outside ERR"),
                Event::LastWqeReached => {
                    assert!(self.caps.has_srq, "LAST_WQE_REACHED without an SRQ");
                    assert_eq!(e.state(), QpState::Err, "LAST_WQE_REACHED outside ERR");
                }
                Event::SqDrained => {
                    // (A completion lost to a full CQ may move it on to ERR in the same call.)
                    assert!(
                        e.state() == QpState::Sqd && !e.sq_draining() || e.state() == QpState::Err,
                        "{what} on QP {i}: SQ_DRAINED, now {:?} (draining {})",
                        e.state(),
                        e.sq_draining()
                    )
                }
                Event::CommEst => assert_eq!(before, QpState::Rtr, "COMM_EST outside RTR"),
                Event::QpReqErr | Event::QpAccessErr => {
                    assert_eq!(e.state(), QpState::Err, "{ev:?} outside ERR")
                }
            }
        }
        if self.trace {
            eprintln!(
                "  {what} QP {i}: {before:?} -> {:?}, {} packets, {} completions, {d:?}",
                e.state(),
                m.emits,
                m.completes
            );
        }
        self.collect(i);
        r
    }

    /// Checks the packets QP `i` emitted and puts them on the wire.
    fn collect(&mut self, i: usize) {
        let out = std::mem::take(&mut self.m[i].side.out);
        let cfg = *self.e[i].config();
        for (bytes, dest) in out {
            let p = Packet::parse(&bytes).unwrap_or_else(|e| {
                panic!("QP {i} emitted a packet that does not parse ({e:?}): {bytes:02x?}")
            });
            if self.trace {
                let b = p.bth();
                eprintln!(
                    "    QP {i} sends {} psn {:#x} len {} aeth {:?} reth {:?}",
                    p.info().name,
                    b.psn.get(),
                    p.payload().len(),
                    p.aeth(),
                    p.reth()
                );
            }
            assert!(
                bytes.len() <= MAX_PKT,
                "QP {i} emitted {} bytes",
                bytes.len()
            );
            assert_eq!(p.bth().pkey, wire::BTH_DEF_PKEY);
            let tr = match cfg.qp_type {
                QpType::Rc => Transport::Rc,
                QpType::Uc => Transport::Uc,
                _ => Transport::Ud,
            };
            assert_eq!(p.info().transport, tr, "QP {i} emitted {}", p.info().name);
            let len = p.payload().len();
            assert!(len <= 4096, "QP {i} emitted {len} bytes of payload");
            if !self.mtu_changed[i] {
                assert!(
                    len <= cfg.mtu as usize,
                    "QP {i}: {len} bytes at MTU {}",
                    cfg.mtu
                );
                assert!(
                    wire::payload_len_ok(p.info(), len, cfg.mtu as usize),
                    "QP {i}: {} with {len} bytes at MTU {}",
                    p.info().name,
                    cfg.mtu
                );
            }
            match dest {
                Dest::Connected => {
                    assert!(cfg.qp_type != QpType::Ud, "a UD packet to a connected peer");
                    assert_eq!(p.bth().dest_qp, cfg.dest_qpn & MASK24);
                }
                Dest::Ah { qpn, .. } => {
                    assert_eq!(
                        cfg.qp_type,
                        QpType::Ud,
                        "an address handle on a connected QP"
                    );
                    assert_eq!(p.bth().dest_qp, qpn & MASK24);
                }
            }
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            self.history.push_back((bytes.clone(), i));
            self.wire[i].push_back(bytes);
        }
    }

    /// The QP a packet is for (the device's QP table): none for other QPNs.
    fn route(bytes: &[u8]) -> Option<usize> {
        let qpn = wire::Bth::decode(bytes)?.dest_qp;
        QPN.iter().position(|&q| q == qpn)
    }

    /// The shell's receive path (`verbs/dp.rs` QpInner::rx): the packet, the responder's turn,
    /// then the requester if an ACK opened the window. `bare`: the packet only.
    fn deliver(&mut self, bytes: &[u8], src: [u8; 16], grh: [u8; GRH_LEN], bare: bool) {
        let Ok(pkt) = Packet::parse(bytes) else {
            return;
        };
        let Some(j) = Self::route(bytes) else {
            return;
        };
        let info = RxInfo {
            grh,
            src,
            dst: GID[j],
        };
        let go = self.call(j, 2, "rx", |e, m, s| e.rx(m, s, &pkt, &info));
        if bare {
            return;
        }
        self.respond(j);
        if go {
            self.run_req(j, 4 * BUDGET);
        }
    }

    fn respond(&mut self, j: usize) -> u32 {
        self.call(j, READ_BURST + 1, "respond", |e, m, s| {
            let mut n = 0;
            if e.responder_pending() {
                n = e.run_responder(m, s, READ_BURST);
            }
            e.flush_ack(m, s);
            n.max(m.emits)
        })
    }

    fn run_req(&mut self, i: usize, budget: u32) -> u32 {
        self.call(i, budget, "run_requester", |e, m, s| {
            let n = e.run_requester(m, s, budget);
            assert!(n <= budget);
            n
        })
    }

    fn post_send(&mut self, i: usize, inp: &mut Input<'_>, raw: bool) {
        let caps = self.caps;
        let wr_id = self.m[i].send.len() as u64 + 1;
        let Some(slot) = self.e[i].sq_slot_mut() else {
            // Full: the shell leaves the WQE in the ring.
            return;
        };
        slot.fill(0);
        let hdr = core::mem::size_of::<SendWqe>();
        if raw {
            let n = inp.u8() as usize * 4;
            let b = inp.bytes(n.min(slot.len()));
            slot[..b.len()].copy_from_slice(b);
        } else {
            let opcode = inp.pick(&[
                wr_opcode::SEND,
                wr_opcode::SEND_WITH_IMM,
                wr_opcode::RDMA_WRITE,
                wr_opcode::RDMA_WRITE_WITH_IMM,
                wr_opcode::RDMA_READ,
                wr_opcode::ATOMIC_CMP_AND_SWP,
                wr_opcode::ATOMIC_FETCH_AND_ADD,
                wr_opcode::SEND_WITH_INV,
                wr_opcode::REG_MR,
                wr_opcode::LOCAL_INV,
            ]);
            let fl = inp.u8();
            let len: u32 = match inp.u8() % 8 {
                0 => 0,
                1 => 8,
                2 => 1 + u32::from(inp.u8()),
                3 => u32::from(inp.u16()) % (MR_LEN as u32 + 64),
                4 => inp.pick(&[255, 256, 257, 1024, 2048, 4096, 4097, 8192]),
                5 => 12,
                _ => u32::from(inp.u8()) * 16,
            };
            let nsge = u32::from(inp.u8()) % (caps.max_send_sge + 2);
            let lkey = inp.pick(&KEYS);
            let base = |k: u32| match k {
                0x200 => 0x2000_0000u64,
                0x300 => 0x3000_0000,
                0x400 | 0x401 => 0,
                _ => 0x1000_0000,
            };
            let off = u64::from(inp.u16() & 0x7ff8);
            let rkey = inp.pick(&KEYS);
            let remote_addr = match inp.u8() % 4 {
                0 => inp.u64(),
                _ => base(rkey) + off,
            };
            let mut w = SendWqe {
                wr_id,
                opcode,
                send_flags: u32::from(fl) & 0xf,
                imm_data: if opcode == wr_opcode::SEND_WITH_INV || opcode == wr_opcode::LOCAL_INV {
                    inp.pick(&KEYS)
                } else {
                    inp.u32()
                },
                num_sge: nsge,
                ah_num: u32::from(inp.u8() % 4),
                remote_addr,
                rkey,
                remote_qpn: inp.pick(&[QPN[0], QPN[1], 0xff_ffff, 1]),
                compare_add: u64::from(inp.u16()),
                swap: u64::from(inp.u8()),
                remote_qkey: inp.pick(&[0x1111, wire::GSI_QKEY, 0x2222]),
                ..SendWqe::default()
            };
            if opcode == wr_opcode::REG_MR {
                w.rkey = inp.pick(&[0x400, 0x401, 0x4ff, 0x100]);
                w.compare_add = u64::from(len);
                w.swap = u64::from(inp.u8() & 0xf);
            }
            let inline = w.send_flags & send_flags::INLINE != 0;
            if inline {
                w.num_sge = 0;
                w.inline_len = len.min(caps.max_inline + 8).min((SLOT_SIZE - hdr) as u32);
            }
            let h = crate::common::unsafe_free_bytes(&w);
            slot[..h.len()].copy_from_slice(&h);
            if inline {
                for (k, b) in slot[hdr..hdr + w.inline_len as usize]
                    .iter_mut()
                    .enumerate()
                {
                    *b = k as u8 ^ 0x3c;
                }
            } else {
                let mut at = hdr;
                let mut left = len;
                for k in 0..nsge {
                    if at + 16 > slot.len() {
                        break;
                    }
                    let l = if k + 1 == nsge { left } else { left / 2 };
                    left -= l;
                    let key = if k == 0 { lkey } else { inp.pick(&KEYS) };
                    let s = Sge {
                        addr: base(key) + u64::from(inp.u16() & 0x3fff),
                        length: l,
                        lkey: key,
                    };
                    slot[at..at + 8].copy_from_slice(&s.addr.to_ne_bytes());
                    slot[at + 8..at + 12].copy_from_slice(&s.length.to_ne_bytes());
                    slot[at + 12..at + 16].copy_from_slice(&s.lkey.to_ne_bytes());
                    at += 16;
                }
            }
        }
        // Our wr_id, whatever the bytes said, so that completions can be told apart.
        slot[..8].copy_from_slice(&wr_id.to_ne_bytes());
        let opcode = u32::from_ne_bytes(slot[8..12].try_into().unwrap());
        let flags = u32::from_ne_bytes(slot[12..16].try_into().unwrap());
        self.m[i].send.push(SendRec {
            signaled: caps.sq_sig_all || flags & send_flags::SIGNALED != 0,
            local: matches!(opcode, wr_opcode::REG_MR | wr_opcode::LOCAL_INV),
            done: 0,
        });
        self.m[i].side.sq_log.push(wr_id);
        self.call(i, 0, "sq_pushed", |e, m, _| e.sq_pushed(m));
    }

    fn post_recv(&mut self, i: usize, inp: &mut Input<'_>) {
        let wr_id = self.m[i].recv.len() as u64 + 1;
        let n = (inp.u8() as u32 % 4).min(self.caps.max_recv_sge);
        let mut r = RecvWr {
            wr_id,
            num_sge: n,
            ..RecvWr::default()
        };
        for k in 0..n as usize {
            let key = inp.pick(&KEYS);
            let addr = match key {
                0x200 => 0x2000_0000u64,
                0x300 => 0x3000_0000,
                0x400 | 0x401 => 0,
                _ => 0x1000_0000,
            } + u64::from(inp.u16() & 0x3fff);
            let length = match inp.u8() % 6 {
                0 => 0,
                1 => 64,
                2 => 4096,
                3 => 16 << 10,
                4 => u32::from(inp.u16()),
                _ => inp.u32(),
            };
            r.sges[k] = Sge {
                addr,
                length,
                lkey: key,
            };
        }
        self.m[i].recv.push(RecvRec {
            cap: r.capacity(),
            done: 0,
        });
        self.m[i].side.rq.push_back(r);
        // The RQ doorbell: a QP in ERR flushes what was posted.
        self.call(i, 0, "flush_if_err", |e, m, _| e.flush_if_err(m));
    }

    /// modify_qp on QP `i`: validated as `verbs/qp.rs` validates it, committed as it commits.
    fn modify(&mut self, i: usize, inp: &mut Input<'_>) {
        let t = self.caps.t;
        let from = self.e[i].state();
        let Some(next) = QpState::from_raw(u32::from(inp.u8() % 7)) else {
            return;
        };
        let Some((req, opt)) = transition_masks(from, next, t) else {
            return;
        };
        let mask = AttrMask::STATE
            .union(req)
            .union(AttrMask::from_bits(inp.u32()).intersection(opt));
        let mut r = ModifyRequest {
            mask,
            qp_state: next.as_raw(),
            port_num: 1,
            ..ModifyRequest::default()
        };
        let has = |b: AttrMask| mask.contains(b);
        if has(AttrMask::PATH_MTU) {
            r.path_mtu = 1 + u32::from(inp.u8() % 5);
        }
        if has(AttrMask::QKEY) {
            r.qkey = inp.pick(&[0x1111, 0x2222]);
        }
        if has(AttrMask::RQ_PSN) {
            r.rq_psn = psn_choice(inp);
        }
        if has(AttrMask::SQ_PSN) {
            r.sq_psn = psn_choice(inp);
        }
        if has(AttrMask::DEST_QPN) {
            r.dest_qp_num = inp.pick(&[QPN[1 - i], QPN[1 - i], QPN[i], 0x12_3456]);
        }
        if has(AttrMask::ACCESS_FLAGS) {
            r.qp_access_flags = u32::from(inp.u8() & 0xf);
        }
        if has(AttrMask::EN_SQD_ASYNC_NOTIFY) {
            r.en_sqd_async_notify = inp.u8() & 1;
        }
        if has(AttrMask::MAX_QP_RD_ATOMIC) {
            r.max_rd_atomic = inp.u8() % 17;
        }
        if has(AttrMask::MAX_DEST_RD_ATOMIC) {
            r.max_dest_rd_atomic = inp.u8() % 17;
        }
        if has(AttrMask::MIN_RNR_TIMER) {
            r.min_rnr_timer = inp.u8() % 32;
        }
        if has(AttrMask::TIMEOUT) {
            r.timeout = inp.u8() % 32;
        }
        if has(AttrMask::RETRY_CNT) {
            r.retry_cnt = inp.u8() % 8;
        }
        if has(AttrMask::RNR_RETRY) {
            r.rnr_retry = inp.u8() % 8;
        }
        if has(AttrMask::PATH_MIG_STATE) {
            r.path_mig_state = u32::from(inp.u8() % 3);
        }
        let cur = QpCurrent {
            qp_type: t,
            state: from,
            sq_draining: from == QpState::Sqd && self.e[i].sq_draining(),
        };
        let port = PortInfo {
            pkey_tbl_len: u32::from(limits::PKEY_TBL_LEN),
            active_mtu: self.caps.port_mtu,
        };
        let Ok(v) = qp_attr::validate(&r, &cur, &LIMITS, &port) else {
            return;
        };
        let a = &mut self.attrs[i];
        if let Some(x) = v.path_mtu {
            if x != a.path_mtu && t != QpType::Ud {
                self.mtu_changed[i] = true;
            }
            a.path_mtu = x;
        }
        macro_rules! commit {
            ($($f:ident => $g:ident),*) => {$(
                if let Some(x) = v.$f {
                    a.$g = x;
                }
            )*};
        }
        commit!(qkey => qkey, dest_qp_num => dest_qpn, qp_access_flags => access,
            max_rd_atomic => max_rd_atomic, max_dest_rd_atomic => max_dest_rd_atomic,
            min_rnr_timer => min_rnr_timer, timeout => timeout, retry_cnt => retry_cnt,
            rnr_retry => rnr_retry, en_sqd_async_notify => notify);
        let cfg = config(&self.caps, &self.attrs[i], i);
        let notify = self.attrs[i].notify;
        let (sq, rq) = (v.sq_psn.map(|p| p.get()), v.rq_psn.map(|p| p.get()));
        if next == QpState::Reset {
            // discard_rings: what was posted is gone, and never completes.
            let m = &mut self.m[i];
            m.had_reset = true;
            if !self.caps.has_srq {
                m.side.rq.clear();
            }
        }
        self.call(i, 0, "modify", |e, m, _| {
            e.set_config(cfg, v.retry_cnt.is_some(), v.rnr_retry.is_some());
            if QpState::modify_applies(from, e.state(), next) {
                e.set_state(m, next, notify);
            }
            e.set_psns(sq, rq);
        });
    }

    /// Runs both QPs and carries every packet, in order, until nothing moves (at most
    /// `rounds` rounds); no timer fires. Returns whether anything moved.
    fn pump(&mut self, rounds: u32) -> bool {
        let mut any = false;
        for _ in 0..rounds {
            let mut moved = false;
            for i in 0..2 {
                moved |= self.run_req(i, 16) > 0;
                moved |= self.respond(i) > 0;
            }
            for (i, gid) in GID.into_iter().enumerate() {
                while let Some(b) = self.wire[i].pop_front() {
                    moved = true;
                    self.deliver(&b, gid, [0x47; GRH_LEN], false);
                }
            }
            any |= moved;
            if !moved {
                break;
            }
        }
        any
    }

    /// Fires the armed timers of QP `i` (as the shell does, then a bounded requester run).
    fn timers(&mut self, i: usize, which: u8) -> bool {
        let mut fired = false;
        if which & 1 != 0 && self.m[i].side.rnr_armed > 0 {
            self.m[i].side.rnr_armed = 0;
            self.call(i, 0, "rnr_timer_expired", |e, _, _| e.rnr_timer_expired());
            self.run_req(i, BUDGET);
            fired = true;
        }
        if which & 2 != 0 && self.m[i].side.reack_timer.take().is_some() {
            self.call(i, 1, "reack_timer_expired", |e, m, s| {
                e.reack_timer_expired(m, s)
            });
            fired = true;
        }
        if which & 4 != 0 && self.m[i].side.retry_timer.take().is_some() {
            self.call(i, 0, "retry_timer_expired", |e, m, _| {
                e.retry_timer_expired(m)
            });
            self.run_req(i, BUDGET);
            fired = true;
        }
        fired
    }

    fn step(&mut self, inp: &mut Input<'_>) {
        let op = inp.u8();
        let i = usize::from((op >> 4) & 1);
        let x = op >> 5;
        if self.trace {
            eprintln!("step {:#04x}: kind {} QP {i} x {x}", op, op & 0xf);
        }
        match op & 0xf {
            0 | 1 => {
                self.post_send(i, inp, false);
                if x & 1 != 0 {
                    self.run_req(i, BUDGET);
                }
            }
            2 => self.post_send(i, inp, true),
            3 => {
                for _ in 0..=x {
                    self.post_recv(i, inp);
                }
            }
            4 => {
                self.run_req(i, 1 + u32::from(x) * 8);
            }
            5 => {
                let b = 1 + u32::from(x) * 8;
                self.call(i, b + 1, "run_responder", |e, m, s| {
                    let n = e.run_responder(m, s, b);
                    assert!(n <= b);
                    e.flush_ack(m, s);
                });
            }
            6 => {
                // The wire from QP i.
                let q = &mut self.wire[i];
                if q.is_empty() {
                    return;
                }
                match x {
                    0..=3 => {
                        let b = q.pop_front().unwrap();
                        self.deliver(&b, GID[i], [0x47; GRH_LEN], false);
                    }
                    4 => {
                        q.pop_front();
                    }
                    5 => {
                        let b = q[0].clone();
                        self.deliver(&b, GID[i], [0x47; GRH_LEN], false);
                    }
                    6 => {
                        if q.len() >= 2 {
                            q.swap(0, 1);
                        }
                    }
                    _ => {
                        let mut b = q.pop_front().unwrap();
                        let at = inp.u16() as usize % b.len().max(1);
                        if let Some(v) = b.get_mut(at) {
                            *v ^= inp.u8() | 1;
                        }
                        self.deliver(&b, GID[i], [0x47; GRH_LEN], false);
                    }
                }
            }
            7 => {
                // Made-up bytes.
                let n = inp.u8() as usize;
                let b = inp.bytes(n).to_vec();
                let src = inp.pick(&[GID[0], GID[1], STRANGER]);
                let mut grh = [0x47; GRH_LEN];
                grh[..16].copy_from_slice(&src);
                self.deliver(&b, src, grh, x & 1 != 0);
            }
            8 => {
                // A packet from history, again, edited.
                if self.history.is_empty() {
                    return;
                }
                let k = inp.u8() as usize % self.history.len();
                let (mut b, from) = self.history[k].clone();
                for _ in 0..(x % 4) {
                    edit(&mut b, inp);
                }
                let src = if x & 4 != 0 { STRANGER } else { GID[from] };
                self.deliver(&b, src, [0x47; GRH_LEN], false);
            }
            9 => self.modify(i, inp),
            10 => {
                self.timers(i, if x < 6 { 1 << (x % 3) } else { 7 });
            }
            11 => match x {
                0 => {
                    let m = &mut self.m[i];
                    let n = m.side.send_cq.len().max(m.side.recv_cq.len());
                    m.side.cq_cap = Some(n + usize::from(inp.u8() % 4));
                }
                1 => self.m[i].side.cq_cap = None,
                2 => {
                    let m = &mut self.m[i];
                    m.side.rq_broken = !m.side.rq_broken;
                    m.rq_was_broken = true;
                }
                3 => {
                    let m = &mut self.m[i];
                    m.side.in_transit = !m.side.in_transit;
                }
                4 => self.m[i].congest = u32::from(inp.u8() % 4),
                _ => self.call(i, 0, "flush_if_err", |e, m, _| e.flush_if_err(m)),
            },
            12 => {
                self.pump(1 + u32::from(x));
            }
            13 => {
                // The bare receive path: no responder turn after it.
                let q = &mut self.wire[i];
                if let Some(b) = q.pop_front() {
                    self.deliver(&b, GID[i], [0x47; GRH_LEN], true);
                }
            }
            14 => {
                self.call(i, 1, "flush_ack", |e, m, s| e.flush_ack(m, s));
            }
            _ => {
                // A burst of the same kind of WR (fills the SQ).
                let save = *inp;
                for _ in 0..=x * 2 {
                    *inp = save;
                    self.post_send(i, inp, false);
                }
                self.run_req(i, BUDGET);
            }
        }
    }

    /// Quiesces (timers included), checks the responder drains, moves both QPs to ERR and
    /// checks that everything completed.
    fn finish(&mut self) {
        for m in &mut self.m {
            m.congest = 0;
        }
        let mut quiet = false;
        for _ in 0..500 {
            if self.pump(4) {
                continue;
            }
            let mut fired = false;
            for i in 0..2 {
                fired |= self.timers(i, 3);
            }
            if !fired {
                for i in 0..2 {
                    fired |= self.timers(i, 4);
                }
            }
            if !fired {
                quiet = true;
                break;
            }
        }
        // Nothing moves and no timer is armed: a QP in RTS has no send WR left waiting, unless
        // it is RC without a retransmit timer (timeout 0), where a lost packet strands its WR,
        // or RC with `max_rd_atomic` 0, where a READ or atomic waits for a modify to raise it.
        for i in 0..2 {
            let (e, m) = (&self.e[i], &self.m[i]);
            if quiet
                && e.state() == QpState::Rts
                && (self.caps.t != QpType::Rc
                    || (e.config().timeout != 0 && e.config().max_rd_atomic != 0))
            {
                let d = e.details();
                assert_eq!(
                    d.sq_outstanding, 0,
                    "QP {i}: {d:?} with no timer armed and nothing moving (stranded)"
                );
                assert!(m.side.rnr_armed == 0 && !d.rnr_wait);
            }
        }
        for i in 0..2 {
            let mut calls = 0;
            while self.e[i].responder_pending() && self.e[i].state() != QpState::Err {
                calls += 1;
                assert!(calls <= 64, "QP {i}: the responder never idles");
                self.call(i, READ_BURST, "run_responder", |e, m, s| {
                    e.run_responder(m, s, READ_BURST)
                });
                self.wire[i].clear();
            }
        }
        for i in 0..2 {
            let m = &mut self.m[i];
            m.side.rq_broken = false;
            m.side.cq_cap = None;
            if self.e[i].state() == QpState::Reset {
                continue;
            }
            self.call(i, 0, "modify to ERR", |e, m, _| {
                e.set_state(m, QpState::Err, false)
            });
            self.call(i, 0, "flush_if_err", |e, m, _| e.flush_if_err(m));
            self.call(i, 0, "run_requester in ERR", |e, m, s| {
                e.run_requester(m, s, BUDGET)
            });
            self.call(i, 0, "run_responder in ERR", |e, m, s| {
                e.run_responder(m, s, BUDGET)
            });
            let e = &self.e[i];
            let m = &self.m[i];
            let d = e.details();
            assert_eq!(
                (d.sq_outstanding, d.sq_unsent),
                (0, 0),
                "QP {i} in ERR still has send WRs"
            );
            assert!(!e.responder_pending(), "QP {i} in ERR still owes responses");
            if m.had_reset {
                continue;
            }
            assert_eq!(
                m.side.sq_released,
                m.side.sq_log.len(),
                "QP {i}: send slots never released"
            );
            for (k, s) in m.send.iter().enumerate() {
                assert!(
                    !s.signaled || s.done == 1,
                    "QP {i}: signaled send WR {} never completed",
                    k + 1
                );
            }
            if m.rq_was_broken {
                continue;
            }
            let left = m.side.rq.len();
            if !self.caps.has_srq {
                assert_eq!(left, 0, "QP {i} in ERR left receive WRs in its RQ");
            }
            for (k, r) in m.recv.iter().enumerate().take(m.recv.len() - left) {
                assert_eq!(r.done, 1, "QP {i}: receive WR {} never completed", k + 1);
            }
        }
    }
}

/// One edit of a packet from history.
fn edit(b: &mut Vec<u8>, inp: &mut Input<'_>) {
    let len = b.len().max(1);
    match inp.u8() % 8 {
        0 => {
            let at = inp.u16() as usize % len;
            if let Some(v) = b.get_mut(at) {
                *v = inp.u8();
            }
        }
        1 if b.len() >= 12 => {
            // The PSN, moved a little.
            let psn = u32::from_be_bytes([0, b[9], b[10], b[11]]);
            let d = i32::from(inp.u8() as i8);
            let p = (psn.wrapping_add(d as u32) & MASK24).to_be_bytes();
            b[9..12].copy_from_slice(&p[1..]);
        }
        2 if !b.is_empty() => b[0] = inp.u8(),
        3 => {
            let n = inp.u16() as usize % (b.len() + 1);
            b.truncate(n);
        }
        4 => {
            let n = inp.u8() as usize;
            b.extend_from_slice(inp.bytes(n));
        }
        5 if b.len() >= 8 => {
            let q = inp.pick(&[QPN[0], QPN[1]]).to_be_bytes();
            b[5..8].copy_from_slice(&q[1..]);
        }
        6 if !b.is_empty() => {
            let at = inp.u16() as usize % b.len();
            b[at] ^= 1 << (inp.u8() % 8);
        }
        _ if b.len() >= 32 => {
            // A 32-bit field of the extension headers (RETH va/rkey/len, AETH, atomic).
            let at = 12 + usize::from(inp.u8() % 5) * 4;
            let v = inp.u32().to_be_bytes();
            b[at..at + 4].copy_from_slice(&v);
        }
        _ => {}
    }
}

/// The engine configuration `verbs/qp.rs` engine_config builds from the attributes.
fn config(caps: &Caps, a: &Attrs, i: usize) -> Config {
    let ud = caps.t == QpType::Ud;
    Config {
        qp_type: caps.t,
        qpn: QPN[i],
        dest_qpn: a.dest_qpn,
        mtu: if ud {
            caps.port_mtu.bytes()
        } else {
            a.path_mtu.bytes()
        },
        qkey: a.qkey,
        access: a.access,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        rnr_retry: a.rnr_retry,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        peer: if ud {
            None
        } else {
            Some(PeerAddr {
                local: GID[i],
                remote: GID[1 - i],
            })
        },
        sq_sig_all: caps.sq_sig_all,
        max_send_sge: caps.max_send_sge,
        max_inline: caps.max_inline,
        max_recv_sge: caps.max_recv_sge,
        has_srq: caps.has_srq,
        local_ops: caps.local_ops,
    }
}
