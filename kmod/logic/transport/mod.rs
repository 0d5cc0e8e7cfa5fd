// SPDX-License-Identifier: GPL-2.0-only
//! The RoCEv2 transport engine of one QP: requester, completer and responder, for RC, UC and
//! UD, as a pure state machine.
//!
//! The engine never touches memory, queues or the network itself: it asks its [`Env`] to read
//! and write registered memory (which checks keys, PD, bounds and access), to hand out receive
//! WQEs, to post completions and events, and to emit packets. The kernel implements [`Env`] over
//! MRs, shared rings and the UDP socket; the host tests implement it over plain buffers and a
//! simulated wire. Send WQEs are copied by the shell into the engine's private slots
//! ([`Engine::sq_slot_mut`] then [`Engine::sq_pushed`]) before the engine looks at them, so
//! user space can never change a WQE under the engine's feet.
//!
//! The engine is split by role, as rxe splits `rxe_req.c`, `rxe_comp.c` and `rxe_resp.c`:
//! [`requester`] sends request packets and retransmits (go-back-N on a timeout, a sequence NAK
//! or an implied NAK), [`completer`] takes ACKs and responses and completes send WRs strictly in
//! SQ order, [`responder`] takes requests, keeps the responder resources that answer duplicate
//! READs and atomics, and paces its responses. [`wqe`] holds the slot formats.
//!
//! Recovery model (RC): one retransmit timer per QP (4.096 us * 2^`timeout`, 0: none) runs
//! while any sent PSN is unacknowledged and restarts on progress; each expiry, sequence NAK or
//! implied NAK costs one of `retry_cnt` retries (reset by progress), and exhausting them
//! completes the oldest WR with RETRY_EXC_ERR and moves the QP to ERR.

mod ahead;
mod completer;
mod env;
mod requester;
mod responder;
mod selective;
mod timer;
mod wqe;

pub use self::responder::Resource;
// Responder resources by `max_dest_rd_atomic`: used by the verbs shell (rrxe.ko), not by
// rrxe_selftest.ko.
#[allow(unused_imports)]
pub use self::responder::resources_for;
pub use self::selective::PeerMode;
// The round-trip estimate's floor: for the host tests.
#[allow(unused_imports)]
pub use self::timer::RTO_MIN_US;
// The replay budget's refill period: for the host tests (the shell only supplies the clock).
#[allow(unused_imports)]
pub use self::responder::READ_REPLAY_REFILL_MS;
pub use self::wqe::{decode_send_wqe, RecvWr};
// The kernel-consumer encoders: used by the verbs shell (rrxe.ko), not by rrxe_selftest.ko.
pub use self::env::{CqSel, Dest, Emit, Env, Event, RecvTake};
#[allow(unused_imports)]
pub use self::wqe::{encode_recv_wqe, encode_send_wqe, encode_sge};
pub use crate::logic::mr::{Access, AtomicOp};
// Named by the verbs shell's `Env` (rrxe.ko), not by rrxe_selftest.ko.
#[allow(unused_imports)]
pub use crate::logic::mr::MemError;
pub use crate::logic::stats::{Counters, Stat};
use crate::logic::{
    limits,
    opcode::{self, Transport},
    psn::Psn,
    qp_state::{QpState, QpType},
    wire::{self, Headers, Packet},
};
pub use crate::uapi::{send_flags, wc_flags, wc_opcode, wc_status, wr_opcode};
use crate::uapi::{Cqe, SendWqe};
use core::mem::{offset_of, size_of};
use core::ops::DerefMut;

/// `IB_ACCESS_*` bits of an MR or a QP.
pub mod access {
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const LOCAL_WRITE: u32 = 1 << 0;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    /// `IB_ACCESS_FLUSH_GLOBAL`: RDMA FLUSH with the global visibility placement type.
    pub const FLUSH_GLOBAL: u32 = 1 << 8;
    /// `IB_ACCESS_FLUSH_PERSISTENT`: RDMA FLUSH with the persistence placement type.
    pub const FLUSH_PERSISTENT: u32 = 1 << 9;
}

/// RDMA FLUSH placement types (FETH bits 3-0; `IB_FLUSH_GLOBAL`, `IB_FLUSH_PERSISTENT`) and
/// selectivity levels (FETH bits 5-4; `IB_FLUSH_RANGE`, `IB_FLUSH_MR`). A FLUSH WQE carries
/// them in `imm_data` as the FETH does: `type | level << 4`.
pub mod flush {
    /// Placement type: global visibility.
    pub const GLOBAL: u32 = 1 << 0;
    /// Placement type: persistence.
    pub const PERSISTENT: u32 = 1 << 1;
    /// Selectivity: the byte range the RETH names.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const RANGE: u32 = 0;
    /// Selectivity: the whole memory region the R_Key names.
    pub const MR: u32 = 1;
    /// Mask of the placement type in the FETH.
    pub const TYPE_MASK: u32 = 0xf;
    /// Shift of the selectivity level in the FETH.
    pub const LEVEL_SHIFT: u32 = 4;
    /// Mask of the selectivity level (after the shift).
    pub const LEVEL_MASK: u32 = 0x3;

    /// The MR rights a FLUSH of placement type `ty` needs (`IB_ACCESS_FLUSH_*`).
    pub const fn rights(ty: u32) -> u32 {
        let mut r = 0;
        if ty & GLOBAL != 0 {
            r |= super::access::FLUSH_GLOBAL;
        }
        if ty & PERSISTENT != 0 {
            r |= super::access::FLUSH_PERSISTENT;
        }
        r
    }
}

/// Bytes of the GRH area at the start of a UD receive buffer.
pub const GRH_LEN: usize = crate::logic::iphdr::IPV6_LEN;
/// Largest message (IBTA: 2^31).
pub const MAX_MSG: u64 = 1 << 31;
/// RC requester window: unacknowledged packets in flight at most.
pub const RC_WINDOW: u32 = 512;
/// An RC requester's window when the QP starts (and after a reset): 16 packets, 64 KiB at
/// MTU 4096. It grows by each PSN acknowledged (slow start) until a loss or a congestion
/// notice, so a fast path reaches [`RC_WINDOW`] within five round trips, while N senders
/// starting at once into one bottleneck queue put N x 16 packets into it, not N windows, before
/// the first mark can come back (RFC 3390's reasoning for TCP's initial window).
pub const INITIAL_WINDOW: u32 = 16;
/// READ response packets the responder emits per call before yielding to the caller, who
/// continues later ([`Engine::run_responder`]): a 1 MiB READ must not flood the path at once.
pub const READ_BURST: u32 = 128;
/// The requester asks for an ACK at least every this many packets.
pub const ACK_REQ_EVERY: u32 = 16;

/// A placing responder repeats its sequence NAK after this many packets placed past the hole:
/// the requester goes on sending while a hole is open, so the hole's NAK or its resend, when
/// lost (each one time in ten at 10% loss), is asked for again within about a round trip, not
/// after a retransmit timeout of at least 10 ms in which the requester fills its window.
pub const RENAK_EVERY: u32 = 8;

/// A placing responder reports a PSN missing past the first hole once the packet this many
/// PSNs after it has been placed: packets reordered by less are not reported (each report of
/// one only reordered costs a packet sent twice).
pub const HOLE_AFTER: u32 = 8;
/// How long an unsignaled tail that never asked for an ACK waits before the requester asks
/// (an ACK poll; at most the retransmit timeout). Two jiffies at HZ 250: a stream that keeps
/// asking every [`ACK_REQ_EVERY`] packets never waits this long between asks.
pub const ACK_POLL_US: u64 = 8_000;
/// Bytes a packet (BTH .. ICRC) can take: headers, a 4096-byte payload, pad and ICRC.
pub const MAX_PKT: usize = packet_room(4096);

/// Bytes a packet (BTH .. ICRC) of a QP whose MTU is `mtu` can take: its payload, at most
/// 64 bytes of transport headers, pad and ICRC. The shell sizes a QP's scratch packet with it.
pub const fn packet_room(mtu: u32) -> usize {
    let payload = if mtu < 4096 { mtu } else { 4096 };
    payload as usize + 64
}

/// A QP's transport state for diagnostics (`rdma resource show qp -dd`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Details {
    /// Slots of the engine's private SQ.
    pub sq_slots: u32,
    /// Send WRs taken from the ring and not yet completed.
    pub sq_outstanding: u32,
    /// Of those, WRs the requester has not started (or must send again).
    pub sq_unsent: u32,
    /// Oldest unacknowledged PSN.
    pub acked_psn: u32,
    /// READ/atomic requests outstanding.
    pub rd_atomic: u32,
    /// Retries left before RETRY_EXC_ERR.
    pub retry_left: u8,
    /// RNR retries left.
    pub rnr_left: u8,
    /// Retransmit timer backoff (0..=2: 1x, 2x, 4x the timeout).
    pub backoff: u8,
    /// Waiting for the RNR timer.
    pub rnr_wait: bool,
    /// The retransmit timer is armed.
    pub timer_armed: bool,
    /// Unacknowledged PSNs the requester allows in flight now, and its slow-start threshold.
    pub cwnd: u32,
    pub ssthresh: u32,
    /// The round-trip estimate (microseconds; 0: no sample yet, or no clock).
    pub srtt_us: u64,
    /// READ responses placed ahead of a gap in the front READ, not yet in order.
    pub reads_ahead: u32,
    /// WRITE packets the responder placed past a hole, not yet in order.
    pub writes_ahead: u32,
    /// Whether the peer places WRITE packets past a gap, as learnt so far.
    pub peer: PeerMode,
    /// Responder resources there is storage for ([`resources_for`] the largest
    /// `max_dest_rd_atomic` set so far).
    pub resp_resources: u32,
}

/// The per-QP configuration the engine runs with (a copy of the committed QP attributes).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Our QP number.
    pub qpn: u32,
    /// The connected peer's QP number.
    pub dest_qpn: u32,
    /// Path MTU in bytes (UD: the port MTU).
    pub mtu: u32,
    /// Our Q_Key (UD).
    pub qkey: u32,
    /// `qp_access_flags`.
    pub access: u32,
    /// Outstanding READ/atomic requests we may have.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic requests we accept.
    pub max_dest_rd_atomic: u8,
    /// RNR timer code we ask peers to wait.
    pub min_rnr_timer: u8,
    /// RNR retries (7: infinite).
    pub rnr_retry: u8,
    /// Local ACK timeout code: the retransmit timer waits 4.096 us * 2^timeout (0: never).
    pub timeout: u8,
    /// Retransmissions after a timeout or sequence NAK before RETRY_EXC_ERR (7 is not infinite).
    pub retry_cnt: u8,
    /// The connected peer's address (RC/UC): packets from any other source are dropped.
    pub peer: Option<PeerAddr>,
    /// Initial send PSN / expected receive PSN, applied by [`Engine::set_psns`].
    pub sq_sig_all: bool,
    /// `cap.max_send_sge`.
    pub max_send_sge: u32,
    /// `cap.max_inline_data`.
    pub max_inline: u32,
    /// `cap.max_recv_sge` (RQ; the SRQ's own for SRQ QPs).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub max_recv_sge: u32,
    /// The QP receives through an SRQ.
    pub has_srq: bool,
    /// A kernel consumer's QP: fast registration is allowed in its SQ, and local invalidation
    /// on every QP type (a user ring may carry LOCAL_INV on RC only, as rdma_rxe takes it, and
    /// never REG_MR).
    pub local_ops: bool,
}

/// The addresses a connected QP's packets travel between (GIDs, IPv4 mapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    /// Our GID (the packets' destination address).
    pub local: [u8; 16],
    /// The peer's GID (the packets' source address).
    pub remote: [u8; 16],
}

/// The kind of a send WR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WrKind {
    #[default]
    /// SEND.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomic compare-and-swap.
    CmpSwap,
    /// Atomic fetch-and-add.
    FetchAdd,
    /// Fast registration: a local operation, no packet.
    RegMr,
    /// Local invalidation: a local operation, no packet.
    LocalInv,
    /// Memory-window bind: a local operation, no packet.
    BindMw,
    /// ATOMIC WRITE (IBTA 1.5): 8 bytes placed at once; answered like a READ.
    AtomicWrite,
    /// RDMA FLUSH (IBTA 1.5): answered like a zero-length READ.
    Flush,
}

impl WrKind {
    /// Answered by a response (not an ACK), and counted against `max_rd_atomic`: READs,
    /// atomics, ATOMIC WRITE and FLUSH (rdma_rxe answers the last two with a zero-length READ
    /// response and keeps a responder resource for each).
    fn is_rd_atomic(self) -> bool {
        matches!(
            self,
            WrKind::Read | WrKind::CmpSwap | WrKind::FetchAdd | WrKind::AtomicWrite | WrKind::Flush
        )
    }

    /// Executed by the requester in SQ order, without a packet.
    fn is_local(self) -> bool {
        matches!(self, WrKind::RegMr | WrKind::LocalInv | WrKind::BindMw)
    }

    fn wc_opcode(self) -> u32 {
        match self {
            WrKind::Send => wc_opcode::SEND,
            WrKind::Write => wc_opcode::RDMA_WRITE,
            WrKind::Read => wc_opcode::RDMA_READ,
            WrKind::CmpSwap => wc_opcode::COMP_SWAP,
            WrKind::FetchAdd => wc_opcode::FETCH_ADD,
            WrKind::RegMr => wc_opcode::REG_MR,
            WrKind::LocalInv => wc_opcode::LOCAL_INV,
            WrKind::BindMw => wc_opcode::BIND_MW,
            WrKind::AtomicWrite => wc_opcode::ATOMIC_WRITE,
            WrKind::Flush => wc_opcode::FLUSH,
        }
    }
}

/// Requester bookkeeping of one private send slot.
#[derive(Clone, Copy, Debug, Default)]
pub struct SqEntry {
    kind: WrKind,
    len: u32,
    imm: bool,
    /// SEND with invalidate.
    inv: bool,
    signaled: bool,
    fence: bool,
    /// Its first packet went out at least once (`first_psn` and `npkts` are set).
    started: bool,
    /// First PSN of the WR.
    first_psn: Psn,
    /// PSNs the WR consumes (a READ consumes one per response packet).
    npkts: u32,
    /// READ: response packets received and placed, in order.
    read_done: u32,
    /// READ: a response past its next expected one came while an older WR was at the front,
    /// and could not be kept: asked for again as soon as it is the front.
    read_gap: bool,
    /// The status the WR completes with when it reaches the front (an error found early).
    err: Option<u32>,
}

impl SqEntry {
    /// The last PSN of the WR.
    fn last_psn(&self) -> Psn {
        self.first_psn.wrapping_add(self.npkts.saturating_sub(1))
    }

    /// The PSN a retransmission of this WR starts at (a READ resumes after what arrived).
    fn resume_psn(&self) -> Psn {
        match self.kind {
            WrKind::Read => self.first_psn.wrapping_add(self.read_done),
            _ => self.first_psn,
        }
    }
}

/// Facts about a received packet the packet bytes do not carry.
#[derive(Clone, Copy, Debug)]
pub struct RxInfo {
    /// The 40-byte GRH a UD receive buffer gets (IPv6 header, or 20 zero bytes then the IPv4
    /// header).
    pub grh: [u8; GRH_LEN],
    /// The packet's source address as a GID (IPv4 mapped).
    pub src: [u8; 16],
    /// The packet's destination address as a GID.
    pub dst: [u8; 16],
}

/// The private send queue: slots the shell copies WQEs into, and their bookkeeping.
///
/// Indices are free-running: `done <= next <= head`, `head - done <= slots`. WRs in
/// `done..next` are fully sent and wait for completion (RC); `next` is being sent.
#[derive(Debug)]
struct Sq<B, M> {
    slots: B,
    meta: M,
    slot_size: usize,
    mask: u32,
    head: u32,
    next: u32,
    done: u32,
}

impl<B: DerefMut<Target = [u8]>, M: DerefMut<Target = [SqEntry]>> Sq<B, M> {
    fn entry(&self, i: u32) -> SqEntry {
        self.meta[(i & self.mask) as usize]
    }

    fn entry_mut(&mut self, i: u32) -> &mut SqEntry {
        &mut self.meta[(i & self.mask) as usize]
    }

    /// The started WR that `psn` belongs to, looked for from index `from` over at most `limit`
    /// WRs (local operations, which take no PSN, passed over); `None` at the first WR not
    /// started.
    fn holding(&self, psn: Psn, from: u32, limit: u32) -> Option<(u32, SqEntry)> {
        let mut i = from;
        let mut n = 0;
        while i != self.head && n < limit {
            let e = self.entry(i);
            if !e.started {
                return None;
            }
            if !e.kind.is_local() && psn.in_window(e.first_psn, e.npkts.max(1)) {
                return Some((i, e));
            }
            i = i.wrapping_add(1);
            n += 1;
        }
        None
    }

    fn slot(&self, i: u32) -> &[u8] {
        let off = (i & self.mask) as usize * self.slot_size;
        &self.slots[off..off + self.slot_size]
    }

    fn wr_id(&self, i: u32) -> u64 {
        decode_send_wqe(self.slot(i)).map_or(0, |w| w.wr_id)
    }
}

/// The transport engine of one QP.
#[derive(Debug)]
pub struct Engine<B, M, R> {
    cfg: Config,
    state: QpState,
    /// SQD requested: start no new WR; raise SQ_DRAINED once idle.
    sq_draining: bool,
    sqd_notify: bool,
    last_wqe_sent: bool,
    /// A completion was lost to a full CQ: the QP goes to ERR at the end of this call.
    cq_overflow: bool,
    sq: Sq<B, M>,
    req: requester::Requester,
    resp: responder::Responder<R>,
    /// Per-QP statistics (the same events also reach [`Env::stat`]).
    pub counters: Counters,
}

pub(super) fn cqe(wr_id: u64, status: u32, opcode: u32, qpn: u32) -> Cqe {
    Cqe {
        wr_id,
        status,
        opcode,
        qp_num: qpn,
        ..Cqe::default()
    }
}

fn transport_of(t: QpType) -> Transport {
    match t {
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
        _ => Transport::Rc,
    }
}

/// Writes headers, then lets `fill` put the payload, then zeroes pad and ICRC
/// ([`wire::write_packet_with`]). Returns the packet length, or a work-completion status.
fn assemble(
    out: &mut [u8],
    h: &Headers,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), u32>,
) -> Result<usize, u32> {
    wire::write_packet_with(out, h, len, fill).map_err(|e| match e {
        wire::PacketError::Wire(wire::WireError::Truncated) => wc_status::LOC_LEN_ERR,
        wire::PacketError::Wire(_) => wc_status::GENERAL_ERR,
        wire::PacketError::Fill(status) => status,
    })
}

/// Whether a BTH P_Key matches ours (the low 15 bits; one of the two must be a full member).
fn pkey_ok(ours: u16, theirs: u16) -> bool {
    (ours & 0x7fff) == (theirs & 0x7fff) && (ours | theirs) & 0x8000 != 0 && (theirs & 0x7fff) != 0
}

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// An engine in RESET over private storage: `slots` holds `meta.len()` send slots of
    /// `slot_size` bytes (`meta.len()` a power of two); `res` holds the responder resources
    /// (possibly none: [`Engine::grow_resources`] adds storage; `max_dest_rd_atomic` beyond
    /// `res.len()` is capped to it).
    pub fn new(cfg: Config, slots: B, meta: M, res: R, slot_size: usize) -> Option<Self> {
        let n = meta.len();
        if n == 0
            || !n.is_power_of_two()
            || slots.len() < n * slot_size
            || slot_size < size_of::<SendWqe>()
        {
            return None;
        }
        Some(Engine {
            cfg,
            state: QpState::Reset,
            sq_draining: false,
            sqd_notify: false,
            last_wqe_sent: false,
            cq_overflow: false,
            sq: Sq {
                slots,
                meta,
                slot_size,
                mask: n as u32 - 1,
                head: 0,
                next: 0,
                done: 0,
            },
            req: requester::Requester::new(&cfg),
            resp: responder::Responder::new(res),
            counters: Counters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Replaces the configuration (a committed modify_qp). The retry counters in use start
    /// over only when the modify set them (`retry_cnt`, `rnr_retry`): any other modify (an
    /// SQD -> RTS, a new timeout) leaves a retransmission in progress with the retries it has.
    pub fn set_config(&mut self, cfg: Config, retry_cnt_set: bool, rnr_retry_set: bool) {
        self.cfg = cfg;
        if rnr_retry_set {
            self.req.rnr_left = cfg.rnr_retry;
        }
        if retry_cnt_set {
            self.req.retry_left = cfg.retry_cnt;
        }
    }

    /// The data-path state (can differ from the last modify: a fatal error moves to ERR).
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The next send PSN (for query_qp).
    pub fn sq_psn(&self) -> u32 {
        self.req.psn.get()
    }

    /// The expected receive PSN (for query_qp).
    pub fn rq_psn(&self) -> u32 {
        self.resp.epsn.get()
    }

    /// Whether the SQ is still draining after a move to SQD.
    pub fn sq_draining(&self) -> bool {
        self.sq_draining && !self.sq_idle()
    }

    /// Whether the responder places RDMA WRITE packets that arrive past a gap from a
    /// requester that announces it takes the jumping ACK ([`crate::logic::wire::Bth::sel`]),
    /// and announces so on its acknowledgements; on by default. Off, it drops them as a
    /// go-back-N responder does (tests model rdma_rxe's responder with it).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn set_place_ahead(&mut self, on: bool) {
        self.resp.place_ahead = on;
        self.resp.ahead.clear();
    }

    /// Sets what the requester takes the peer's responder for ([`PeerMode`]; announced by the
    /// peer's acknowledgements otherwise).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn set_peer_mode(&mut self, m: PeerMode) {
        self.req.peer = m;
    }

    /// Sets the window the RC requester starts with (clamped to 1..=[`RC_WINDOW`]): the shell
    /// gives a path through the network [`INITIAL_WINDOW`] (the default) and a loopback path,
    /// which has no bottleneck queue to fill (its packets wait in the device's own bounded
    /// queue), the whole window. Takes effect at once if nothing is in flight, else at the
    /// next flush or reset.
    pub fn set_initial_window(&mut self, n: u32) {
        let n = n.clamp(1, RC_WINDOW);
        self.req.initial = n;
        if self.req.high == self.req.acked && self.req.cwr.is_none() {
            self.req.cwnd = n;
        }
    }

    /// Sets the send PSN / expected receive PSN (modify_qp with SQ_PSN / RQ_PSN).
    pub fn set_psns(&mut self, sq_psn: Option<u32>, rq_psn: Option<u32>) {
        if let Some(p) = sq_psn {
            self.req.psn = Psn::from_masked(p);
            self.req.acked = self.req.psn;
            self.req.high = self.req.psn;
            self.req.asked = self.req.psn;
        }
        if let Some(p) = rq_psn {
            self.resp.epsn = Psn::from_masked(p);
            self.resp.ahead.clear();
        }
    }

    /// A committed state change. Entering ERR flushes; entering RESET forgets everything.
    pub fn set_state<E: Env>(&mut self, env: &mut E, s: QpState, sqd_notify: bool) {
        let old = self.state;
        self.state = s;
        match s {
            QpState::Reset => self.reset(env),
            QpState::Err if old != QpState::Err => self.flush(env),
            QpState::Sqd => {
                self.sq_draining = true;
                self.sqd_notify = sqd_notify;
                self.check_drained(env);
            }
            QpState::Rts => {
                self.sq_draining = false;
            }
            _ => {}
        }
    }

    fn reset<E: Env>(&mut self, env: &mut E) {
        let head = self.sq.head;
        self.sq.next = head;
        self.sq.done = head;
        let initial = self.req.initial;
        self.req = requester::Requester::new(&self.cfg);
        self.req.initial = initial;
        self.req.cwnd = initial;
        self.resp.reset();
        self.sq_draining = false;
        self.last_wqe_sent = false;
        self.cq_overflow = false;
        env.set_retry_timer(None);
    }

    /// Room for more WQEs in the private SQ.
    /// What `rdma resource show qp -dd` reports of the transport (see [`Details`]).
    pub fn details(&self) -> Details {
        Details {
            sq_slots: self.sq.mask + 1,
            sq_outstanding: self.sq.head.wrapping_sub(self.sq.done),
            sq_unsent: self.sq.head.wrapping_sub(self.sq.next),
            acked_psn: self.req.acked.get(),
            rd_atomic: self.req.rd_atomic,
            retry_left: self.req.retry_left,
            rnr_left: self.req.rnr_left,
            backoff: self.req.backoff,
            rnr_wait: self.req.rnr_wait,
            timer_armed: self.req.timer_armed,
            cwnd: self.req.cwnd,
            ssthresh: self.req.ssthresh,
            srtt_us: self.req.srtt_us,
            reads_ahead: self.req.ahead.count(),
            writes_ahead: self.resp.ahead.count(),
            peer: self.req.peer,
            resp_resources: self.resource_storage() as u32,
        }
    }

    pub fn sq_room(&self) -> u32 {
        (self.sq.mask + 1) - self.sq.head.wrapping_sub(self.sq.done)
    }

    /// The private slot the next WQE is to be copied into (`None` when full).
    pub fn sq_slot_mut(&mut self) -> Option<&mut [u8]> {
        if self.sq_room() == 0 {
            return None;
        }
        let i = (self.sq.head & self.sq.mask) as usize * self.sq.slot_size;
        let ss = self.sq.slot_size;
        self.sq.slots.get_mut(i..i + ss)
    }

    /// The slot from [`Self::sq_slot_mut`] is filled: validate and queue it. A malformed WQE
    /// completes in error (LOC_QP_OP_ERR or LOC_LEN_ERR, after every older WR) and moves the
    /// QP to ERR. WQEs pushed while in ERR complete with WR_FLUSH_ERR.
    pub fn sq_pushed<E: Env>(&mut self, env: &mut E) {
        if self.sq_room() == 0 {
            return;
        }
        let idx = self.sq.head;
        let slot = self.sq.slot(idx);
        let opcode = decode_send_wqe(slot).map_or(0, |w| w.opcode);
        let r = wqe::check_send_wqe(&self.cfg, slot);
        self.sq.head = self.sq.head.wrapping_add(1);
        match r {
            Ok(c) => {
                *self.sq.entry_mut(idx) = SqEntry {
                    kind: c.kind,
                    len: c.len,
                    imm: c.imm,
                    inv: c.inv,
                    signaled: c.signaled,
                    fence: c.fence,
                    ..SqEntry::default()
                };
                if self.state == QpState::Err {
                    self.flush(env);
                }
            }
            Err(status) => {
                *self.sq.entry_mut(idx) = SqEntry {
                    kind: wqe::kind_of_opcode(opcode),
                    err: Some(status),
                    ..SqEntry::default()
                };
                if self.state == QpState::Err {
                    self.flush(env);
                } else {
                    self.fatal(env, true);
                }
            }
        }
        self.settle(env);
    }

    /// Retires the oldest send WR: its slot is released (see [`Env::sq_retired`]), then its
    /// completion, if any, is posted.
    pub(super) fn retire_front<E: Env>(&mut self, env: &mut E, c: Option<&Cqe>) {
        self.sq.done = self.sq.done.wrapping_add(1);
        env.sq_retired(self.sq.head.wrapping_sub(self.sq.done));
        if let Some(c) = c {
            self.post(env, CqSel::Send, c);
        }
    }

    /// Posts a completion; a full CQ moves the QP to ERR at the end of the current call. An
    /// unsuccessful one is solicited (see [`Env::complete`]).
    fn post<E: Env>(&mut self, env: &mut E, cq: CqSel, c: &Cqe) {
        self.post_se(env, cq, c, false);
    }

    /// Posts a completion of a message whose last packet carried the Solicited Event bit `se`.
    fn post_se<E: Env>(&mut self, env: &mut E, cq: CqSel, c: &Cqe, se: bool) {
        if !env.complete(cq, c, se || c.status != wc_status::SUCCESS) {
            self.stat(env, Stat::CqOverflows, 1);
            self.cq_overflow = true;
        }
    }

    fn stat<E: Env>(&mut self, env: &mut E, s: Stat, n: u64) {
        self.counters.add(s, n);
        env.stat(s, n);
    }

    /// Applies what the call left pending: a CQ overflow moves the QP to ERR (CQ_ERR is the
    /// shell's to raise).
    fn settle<E: Env>(&mut self, env: &mut E) {
        if self.cq_overflow {
            self.cq_overflow = false;
            if self.state != QpState::Err && self.state != QpState::Reset {
                self.fatal(env, true);
            }
        }
    }

    /// A local or remote error: the QP goes to ERR and everything outstanding is flushed.
    fn fatal<E: Env>(&mut self, env: &mut E, local: bool) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        if local {
            env.event(Event::QpFatal);
        }
        self.flush(env);
    }

    /// Completes every send WR not yet completed, in SQ order (an error found for a WR is its
    /// status, WR_FLUSH_ERR otherwise), and (for a QP with its own RQ) every posted receive WR
    /// with WR_FLUSH_ERR; drops everything owed to the peer. Called on entering ERR and
    /// whenever work arrives in ERR.
    pub fn flush<E: Env>(&mut self, env: &mut E) {
        let qpn = self.cfg.qpn;
        while self.sq.done != self.sq.head {
            let i = self.sq.done;
            let e = self.sq.entry(i);
            let c = cqe(
                self.sq.wr_id(i),
                e.err.unwrap_or(wc_status::WR_FLUSH_ERR),
                e.kind.wc_opcode(),
                qpn,
            );
            self.retire_front(env, Some(&c));
        }
        self.sq.next = self.sq.head;
        self.req.on_flush();
        env.set_retry_timer(None);
        if let Some(r) = self.resp.recv.take() {
            self.post(
                env,
                CqSel::Recv,
                &cqe(r.wr_id, wc_status::WR_FLUSH_ERR, wc_opcode::RECV, qpn),
            );
        }
        // Flushes repeat while work arrives in ERR: the timer is stopped once.
        if self.resp.on_flush() {
            env.set_reack_timer(None);
        }
        if self.cfg.has_srq {
            if !self.last_wqe_sent {
                // Once per entry to ERR: no WQE will be taken from the SRQ any more.
                self.last_wqe_sent = true;
                env.event(Event::LastWqeReached);
            }
        } else {
            let mut r = RecvWr::default();
            // At most one ring's worth per pass (a ring has at most MAX_QP_WR slots): the
            // producer is user-writable and is read again on every take, so a user that keeps
            // posting would otherwise keep this loop (under the QP lock) going for ever. WRs
            // posted during the pass are flushed by the next one (their doorbell). A broken
            // ring answers Bad once and the flush stops there.
            for _ in 0..limits::MAX_QP_WR {
                if env.recv_take(&mut r) != RecvTake::Taken {
                    break;
                }
                self.post(
                    env,
                    CqSel::Recv,
                    &cqe(r.wr_id, wc_status::WR_FLUSH_ERR, wc_opcode::RECV, qpn),
                );
            }
        }
    }

    /// Flushes work posted since the QP entered ERR (nothing in other states).
    pub fn flush_if_err<E: Env>(&mut self, env: &mut E) {
        if self.state == QpState::Err {
            self.flush(env);
        }
    }

    fn sq_idle(&self) -> bool {
        self.sq.done == self.sq.next && self.req.cur_pkt == 0
    }

    fn check_drained<E: Env>(&mut self, env: &mut E) {
        if self.state == QpState::Sqd && self.sq_draining && self.sq_idle() {
            self.sq_draining = false;
            if self.sqd_notify {
                env.event(Event::SqDrained);
            }
        }
    }

    /// Handles a received packet addressed to this QP (ICRC already checked). Returns whether
    /// the requester may have work again (an ACK opened the window).
    pub fn rx<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        pkt: &Packet<'_>,
        info: &RxInfo,
    ) -> bool {
        let go = self.rx_inner(env, scratch, pkt, info);
        self.settle(env);
        go
    }

    fn rx_inner<E: Env>(
        &mut self,
        env: &mut E,
        scratch: &mut [u8],
        pkt: &Packet<'_>,
        info: &RxInfo,
    ) -> bool {
        if pkt.info().transport != transport_of(self.cfg.qp_type) {
            self.stat(env, Stat::RxBadState, 1);
            return false;
        }
        if !self.admit(pkt, info) {
            self.stat(env, Stat::RxAdmissionDrops, 1);
            return false;
        }
        if pkt.info().is_response() {
            return self.rx_response(env, pkt);
        }
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            self.stat(env, Stat::RxBadState, 1);
            return false;
        }
        if self.state == QpState::Rtr && !self.resp.comm_est_sent {
            self.resp.comm_est_sent = true;
            env.event(Event::CommEst);
        }
        match self.cfg.qp_type {
            QpType::Ud => self.rx_ud(env, pkt, info),
            _ => self.rx_request(env, scratch, pkt),
        }
        false
    }

    /// Admission of a packet to a connected QP (rxe's `check_addr` and `check_keys`): the
    /// P_Key must match, and it must come from the peer of the QP's path to our address.
    fn admit(&self, pkt: &Packet<'_>, info: &RxInfo) -> bool {
        if !pkey_ok(wire::BTH_DEF_PKEY, pkt.bth().pkey) {
            return false;
        }
        if self.cfg.qp_type == QpType::Ud {
            return true;
        }
        match self.cfg.peer {
            Some(p) => p.remote == info.src && p.local == info.dst,
            // No path yet (RESET/INIT): nothing is received anyway.
            None => true,
        }
    }
}

/// The bytes of a completion as the CQ ring holds them (`uapi::Cqe`, native endianness).
pub fn encode_cqe(c: &Cqe) -> [u8; crate::uapi::CQE_SIZE] {
    let mut b = [0u8; crate::uapi::CQE_SIZE];
    let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
    put(offset_of!(Cqe, wr_id), &c.wr_id.to_ne_bytes());
    put(offset_of!(Cqe, status), &c.status.to_ne_bytes());
    put(offset_of!(Cqe, opcode), &c.opcode.to_ne_bytes());
    put(offset_of!(Cqe, vendor_err), &c.vendor_err.to_ne_bytes());
    put(offset_of!(Cqe, byte_len), &c.byte_len.to_ne_bytes());
    put(offset_of!(Cqe, imm_data), &c.imm_data.to_ne_bytes());
    put(offset_of!(Cqe, qp_num), &c.qp_num.to_ne_bytes());
    put(offset_of!(Cqe, src_qp), &c.src_qp.to_ne_bytes());
    put(offset_of!(Cqe, wc_flags), &c.wc_flags.to_ne_bytes());
    put(offset_of!(Cqe, pkey_index), &c.pkey_index.to_ne_bytes());
    put(offset_of!(Cqe, slid), &c.slid.to_ne_bytes());
    put(offset_of!(Cqe, sl), &[c.sl]);
    put(offset_of!(Cqe, dlid_path_bits), &[c.dlid_path_bits]);
    b
}

/// Decodes a completion written by [`encode_cqe`] (a kernel consumer's `poll_cq`).
pub fn decode_cqe(b: &[u8; crate::uapi::CQE_SIZE]) -> Cqe {
    let u32_at = |off: usize| u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
    let u16_at = |off: usize| u16::from_ne_bytes([b[off], b[off + 1]]);
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[offset_of!(Cqe, wr_id)..offset_of!(Cqe, wr_id) + 8]);
    Cqe {
        wr_id: u64::from_ne_bytes(w),
        status: u32_at(offset_of!(Cqe, status)),
        opcode: u32_at(offset_of!(Cqe, opcode)),
        vendor_err: u32_at(offset_of!(Cqe, vendor_err)),
        byte_len: u32_at(offset_of!(Cqe, byte_len)),
        imm_data: u32_at(offset_of!(Cqe, imm_data)),
        qp_num: u32_at(offset_of!(Cqe, qp_num)),
        src_qp: u32_at(offset_of!(Cqe, src_qp)),
        wc_flags: u32_at(offset_of!(Cqe, wc_flags)),
        pkey_index: u16_at(offset_of!(Cqe, pkey_index)),
        slid: u16_at(offset_of!(Cqe, slid)),
        sl: b[offset_of!(Cqe, sl)],
        dlid_path_bits: b[offset_of!(Cqe, dlid_path_bits)],
        reserved: [0; 18],
    }
}
