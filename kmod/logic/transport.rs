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
//! Loss recovery (retransmit timer) is not here yet: the engine is correct on a lossless path
//! and recovers from PSN sequence NAKs and RNR NAKs.

use crate::logic::{
    opcode::{self, Operation, Position, Transport},
    psn::Psn,
    qp_state::{QpState, QpType},
    wire::{
        self, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Headers, ImmDt, NakCode, Packet, Reth, Segmentation,
        Syndrome, AETH_ACK_UNLIMITED, BTH_DEF_PKEY,
    },
};
pub use crate::uapi::{send_flags, wc_flags, wc_opcode, wc_status, wr_opcode};
use crate::uapi::{Cqe, RecvWqe, SendWqe, Sge};
pub use crate::logic::stats::Stat;
use core::mem::{offset_of, size_of};
use core::ops::DerefMut;

/// `IB_ACCESS_*` bits of an MR or a QP.
pub mod access {
    pub const LOCAL_WRITE: u32 = 1 << 0;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
}

/// Bytes of the GRH area at the start of a UD receive buffer.
pub const GRH_LEN: usize = 40;
/// Largest message (IBTA: 2^31).
pub const MAX_MSG: u64 = 1 << 31;
/// RC requester window: unacknowledged packets in flight at most.
pub const RC_WINDOW: u32 = 512;
/// READ response packets the responder emits per call before yielding to the caller, who
/// continues later ([`Engine::run_responder`]): a 1 MiB READ must not flood the path at once.
pub const READ_BURST: u32 = 128;
/// Responses (READ, atomic) the responder can have queued.
pub const RESP_QUEUE: usize = 16;
/// The requester asks for an ACK at least every this many packets.
pub const ACK_REQ_EVERY: u32 = 64;
/// Bytes a packet (BTH .. ICRC) can take: headers, a 4096-byte payload, pad and ICRC.
pub const MAX_PKT: usize = 4096 + 64;

/// How an access reaches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Gathering a local SGE (lkey).
    LocalRead,
    /// Scattering into a local SGE (lkey; the MR needs LOCAL_WRITE).
    LocalWrite,
    /// RDMA READ target (rkey, REMOTE_READ).
    RemoteRead,
    /// RDMA WRITE target (rkey, REMOTE_WRITE).
    RemoteWrite,
    /// Atomic target (rkey, REMOTE_ATOMIC).
    RemoteAtomic,
}

impl Access {
    fn is_local(self) -> bool {
        matches!(self, Access::LocalRead | Access::LocalWrite)
    }
}

/// Why a memory access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// No MR with that key (or a stale key).
    BadKey,
    /// The MR belongs to another PD.
    BadPd,
    /// Outside the MR.
    Bounds,
    /// The MR lacks the right.
    Access,
}

/// An atomic operation on 8 bytes of registered memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare and swap.
    CmpSwap { compare: u64, swap: u64 },
    /// Fetch and add.
    FetchAdd { add: u64 },
}

/// Where an emitted packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// The connected peer of the QP (its path).
    Connected,
    /// A UD destination: the address handle number and destination QP of the WQE.
    Ah { ah: u32, qpn: u32 },
}

/// Which completion queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqSel {
    /// The send CQ.
    Send,
    /// The receive CQ.
    Recv,
}

/// Affiliated asynchronous events the engine raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A local error moved the QP to ERR.
    QpFatal,
    /// First packet received in RTR.
    CommEst,
    /// The SQ drained after a move to SQD.
    SqDrained,
    /// An SRQ-attached QP in ERR will consume no more receive WQEs.
    LastWqeReached,
}

/// What a receive queue (RQ or SRQ) answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvTake {
    /// A WQE was taken and copied into the engine.
    Taken,
    /// The queue is empty.
    Empty,
    /// The next WQE is malformed (it was consumed).
    Bad,
}

/// A receive WQE in kernel memory.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr {
    /// The WR id.
    pub wr_id: u64,
    /// SGEs in use.
    pub num_sge: u32,
    /// The SGE list.
    pub sges: [Sge; crate::logic::limits::MAX_SGE as usize],
}

impl Default for RecvWr {
    fn default() -> Self {
        RecvWr { wr_id: 0, num_sge: 0, sges: [Sge::default(); crate::logic::limits::MAX_SGE as usize] }
    }
}

impl RecvWr {
    fn sges(&self) -> &[Sge] {
        self.sges.get(..self.num_sge as usize).unwrap_or(&[])
    }

    /// Total bytes the WQE can receive (saturating).
    pub fn capacity(&self) -> u64 {
        self.sges().iter().map(|s| u64::from(s.length)).sum()
    }

    /// Decodes a receive slot (header then SGEs) copied from a ring, bounded by `max_sge`.
    pub fn decode(slot: &[u8], max_sge: u32) -> Option<RecvWr> {
        let hdr = RecvWqe { wr_id: rd_u64(slot, 0)?, num_sge: rd_u32(slot, 8)?, reserved: 0 };
        if hdr.num_sge > max_sge || hdr.num_sge > crate::logic::limits::MAX_SGE {
            return None;
        }
        let mut w = RecvWr { wr_id: hdr.wr_id, num_sge: hdr.num_sge, ..RecvWr::default() };
        for i in 0..hdr.num_sge as usize {
            w.sges[i] = read_sge(slot, size_of::<RecvWqe>() + i * size_of::<Sge>())?;
        }
        Some(w)
    }
}

/// What the engine needs from the world.
pub trait Env {
    /// Checks that `len` bytes at `addr` are reachable through `key` for `acc` (PD, bounds,
    /// rights), without moving data. A zero length always passes.
    fn mem_check(&mut self, key: u32, addr: u64, len: u64, acc: Access) -> Result<(), MemError>;
    /// Reads registered memory.
    fn mem_read(&mut self, key: u32, addr: u64, out: &mut [u8], acc: Access) -> Result<(), MemError>;
    /// Writes registered memory.
    fn mem_write(&mut self, key: u32, addr: u64, data: &[u8], acc: Access) -> Result<(), MemError>;
    /// Performs an atomic on registered memory; returns the original value.
    fn mem_atomic(&mut self, key: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError>;
    /// Sends a packet (BTH .. ICRC; the ICRC is computed by the caller of the wire).
    /// [`Emit::Congested`] says the packet was dropped or the path pushes back: the engine
    /// stops sending in this call (the packet counts as lost, and the retransmit timer or the
    /// shell's continuation resumes).
    fn emit(&mut self, pkt: &[u8], dest: Dest) -> Emit;
    /// Posts a completion; `false` when the CQ overflowed (the completion is lost).
    fn complete(&mut self, cq: CqSel, cqe: &Cqe) -> bool;
    /// Raises an affiliated event.
    fn event(&mut self, ev: Event);
    /// Takes the next receive WQE (RQ or SRQ) into `out`.
    fn recv_take(&mut self, out: &mut RecvWr) -> RecvTake;
    /// Arms the RNR timer; [`Engine::rnr_timer_expired`] is to be called when it fires.
    fn arm_rnr_timer(&mut self, usecs: u32);
    /// Arms (restarts) the retransmit timer to fire in `usecs` microseconds, or stops it
    /// (`None`); [`Engine::retry_timer_expired`] is to be called when it fires.
    fn set_retry_timer(&mut self, usecs: Option<u64>);
    /// Adds `n` to a device-wide counter (the engine keeps its own per-QP copy).
    fn stat(&mut self, s: Stat, n: u64);
}

/// What the wire answered to [`Env::emit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// Handed to the wire (or queued for local delivery).
    Sent,
    /// Dropped or pushed back (NET_XMIT_DROP/CN, no memory, a full local queue).
    Congested,
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
    pub max_recv_sge: u32,
    /// The QP receives through an SRQ.
    pub has_srq: bool,
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
}

impl WrKind {
    fn is_rd_atomic(self) -> bool {
        matches!(self, WrKind::Read | WrKind::CmpSwap | WrKind::FetchAdd)
    }

    fn wc_opcode(self) -> u32 {
        match self {
            WrKind::Send => wc_opcode::SEND,
            WrKind::Write => wc_opcode::RDMA_WRITE,
            WrKind::Read => wc_opcode::RDMA_READ,
            WrKind::CmpSwap => wc_opcode::COMP_SWAP,
            WrKind::FetchAdd => wc_opcode::FETCH_ADD,
        }
    }
}

/// Requester bookkeeping of one private send slot.
#[derive(Clone, Copy, Debug, Default)]
pub struct SqEntry {
    kind: WrKind,
    len: u32,
    imm: bool,
    signaled: bool,
    /// First PSN of the WR (set when its first packet goes out).
    first_psn: Psn,
    /// PSNs the WR consumes (a READ consumes one per response packet).
    npkts: u32,
    /// Completed already (with an error status, before a flush).
    completed: bool,
}

/// Counters of what the engine dropped or refused, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets for a QP in a state that does not receive.
    pub rx_bad_state: u64,
    /// Packets of the wrong transport or opcode sequence.
    pub rx_bad_opcode: u64,
    /// Duplicate packets (answered or ignored).
    pub rx_duplicate: u64,
    /// Out-of-sequence packets.
    pub rx_out_of_seq: u64,
    /// UD packets with a wrong Q_Key.
    pub rx_bad_qkey: u64,
    /// Messages dropped for want of a receive WQE (UC, UD) or RNR NAKs sent (RC).
    pub rx_no_wqe: u64,
    /// UC/UD messages dropped on a PSN gap or length error.
    pub rx_dropped_msg: u64,
    /// Responses that matched nothing outstanding.
    pub rx_bad_response: u64,
    /// Completions lost to a full CQ.
    pub cq_overflow: u64,
    /// NAKs sent.
    pub tx_nak: u64,
    /// ACKs sent.
    pub tx_ack: u64,
    /// Retransmissions after a NAK.
    pub rewinds: u64,
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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum InMsg {
    #[default]
    None,
    Send,
    Write,
}

/// A response the responder still owes, in PSN order.
#[derive(Clone, Copy, Debug, Default)]
enum Owed {
    #[default]
    Nothing,
    /// READ response packets `next..count` of a READ at `psn`.
    Read { rkey: u32, va: u64, len: u32, psn: Psn, next: u32, count: u32, msn: u32 },
    /// An atomic acknowledge.
    Atomic { psn: Psn, orig: u64, msn: u32 },
}

/// Responder state.
#[derive(Debug)]
struct Responder {
    /// Responses owed, oldest first (a ring of [`RESP_QUEUE`]).
    owed: [Owed; RESP_QUEUE],
    owed_head: usize,
    owed_len: usize,
    epsn: Psn,
    msn: u32,
    in_msg: InMsg,
    /// Bytes of the current message received so far.
    msg_off: u64,
    /// The receive WQE of the current SEND / WRITE_WITH_IMM (taken at its first packet).
    recv: Option<RecvWr>,
    /// RDMA WRITE target of the current message.
    wr_va: u64,
    wr_rkey: u32,
    wr_len: u64,
    /// A PSN sequence NAK was sent and no good packet came since.
    nak_sent: bool,
    /// UC: drop packets until the next first/only.
    uc_drop: bool,
    /// PSN to acknowledge at the next [`Engine::flush_ack`].
    ack_pending: Option<Psn>,
    /// The last atomic (PSN, original value), to answer a duplicate.
    last_atomic: Option<(Psn, u64)>,
    comm_est_sent: bool,
}

impl Responder {
    fn new() -> Self {
        Responder {
            owed: [Owed::Nothing; RESP_QUEUE],
            owed_head: 0,
            owed_len: 0,
            epsn: Psn::ZERO,
            msn: 0,
            in_msg: InMsg::None,
            msg_off: 0,
            recv: None,
            wr_va: 0,
            wr_rkey: 0,
            wr_len: 0,
            nak_sent: false,
            uc_drop: false,
            ack_pending: None,
            last_atomic: None,
            comm_est_sent: false,
        }
    }
}

/// Requester and completer state.
#[derive(Debug)]
struct Requester {
    /// Next PSN to send.
    psn: Psn,
    /// Oldest unacknowledged PSN.
    acked: Psn,
    /// Packet index in the WR at `next` (0: not started).
    cur_pkt: u32,
    /// READ/atomic requests outstanding.
    rd_atomic: u32,
    /// Waiting for the RNR timer.
    rnr_wait: bool,
    rnr_left: u8,
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

/// The transport engine of one QP.
#[derive(Debug)]
pub struct Engine<B, M> {
    cfg: Config,
    state: QpState,
    /// SQD requested: start no new WR; raise SQ_DRAINED once idle.
    sq_draining: bool,
    sqd_notify: bool,
    last_wqe_sent: bool,
    sq: Sq<B, M>,
    req: Requester,
    resp: Responder,
    /// Statistics.
    pub counters: Counters,
}

fn rd_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn rd_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

fn read_sge(b: &[u8], off: usize) -> Option<Sge> {
    Some(Sge { addr: rd_u64(b, off)?, length: rd_u32(b, off + 8)?, lkey: rd_u32(b, off + 12)? })
}

/// Decodes the fixed part of a send slot.
pub fn decode_send_wqe(slot: &[u8]) -> Option<SendWqe> {
    Some(SendWqe {
        wr_id: rd_u64(slot, offset_of!(SendWqe, wr_id))?,
        opcode: rd_u32(slot, offset_of!(SendWqe, opcode))?,
        send_flags: rd_u32(slot, offset_of!(SendWqe, send_flags))?,
        imm_data: rd_u32(slot, offset_of!(SendWqe, imm_data))?,
        num_sge: rd_u32(slot, offset_of!(SendWqe, num_sge))?,
        inline_len: rd_u32(slot, offset_of!(SendWqe, inline_len))?,
        ah_num: rd_u32(slot, offset_of!(SendWqe, ah_num))?,
        remote_addr: rd_u64(slot, offset_of!(SendWqe, remote_addr))?,
        rkey: rd_u32(slot, offset_of!(SendWqe, rkey))?,
        remote_qpn: rd_u32(slot, offset_of!(SendWqe, remote_qpn))?,
        compare_add: rd_u64(slot, offset_of!(SendWqe, compare_add))?,
        swap: rd_u64(slot, offset_of!(SendWqe, swap))?,
        remote_qkey: rd_u32(slot, offset_of!(SendWqe, remote_qkey))?,
        reserved: 0,
    })
}

/// A send WR's data source: inline bytes or an SGE list, both inside the private slot.
enum Source<'a> {
    Inline(&'a [u8]),
    Sges(&'a [u8], u32),
}

impl Source<'_> {
    fn sge(&self, i: u32) -> Option<Sge> {
        match self {
            Source::Sges(b, n) if i < *n => read_sge(b, i as usize * size_of::<Sge>()),
            _ => None,
        }
    }
}

fn source<'a>(slot: &'a [u8], w: &SendWqe) -> Option<Source<'a>> {
    let body = slot.get(size_of::<SendWqe>()..)?;
    if w.send_flags & send_flags::INLINE != 0 {
        Some(Source::Inline(body.get(..w.inline_len as usize)?))
    } else {
        body.get(..w.num_sge as usize * size_of::<Sge>())?;
        Some(Source::Sges(body, w.num_sge))
    }
}

/// Why a send WQE is refused when it is pushed.
fn check_send_wqe(cfg: &Config, slot: &[u8]) -> Result<(SendWqe, SqEntry), u32> {
    let w = decode_send_wqe(slot).ok_or(wc_status::LOC_QP_OP_ERR)?;
    let kind = match (w.opcode, cfg.qp_type) {
        (wr_opcode::SEND | wr_opcode::SEND_WITH_IMM, _) => WrKind::Send,
        (wr_opcode::RDMA_WRITE | wr_opcode::RDMA_WRITE_WITH_IMM, QpType::Rc | QpType::Uc) => WrKind::Write,
        (wr_opcode::RDMA_READ, QpType::Rc) => WrKind::Read,
        (wr_opcode::ATOMIC_CMP_AND_SWP, QpType::Rc) => WrKind::CmpSwap,
        (wr_opcode::ATOMIC_FETCH_AND_ADD, QpType::Rc) => WrKind::FetchAdd,
        _ => return Err(wc_status::LOC_QP_OP_ERR),
    };
    let imm = matches!(w.opcode, wr_opcode::SEND_WITH_IMM | wr_opcode::RDMA_WRITE_WITH_IMM);
    let inline = w.send_flags & send_flags::INLINE != 0;
    if inline && (w.inline_len > cfg.max_inline || kind == WrKind::Read || kind.is_rd_atomic()) {
        return Err(wc_status::LOC_QP_OP_ERR);
    }
    if !inline && w.num_sge > cfg.max_send_sge {
        return Err(wc_status::LOC_QP_OP_ERR);
    }
    let src = source(slot, &w).ok_or(wc_status::LOC_QP_OP_ERR)?;
    let len: u64 = match &src {
        Source::Inline(b) => b.len() as u64,
        Source::Sges(..) => (0..w.num_sge).filter_map(|i| src.sge(i)).map(|s| u64::from(s.length)).sum(),
    };
    if len > MAX_MSG {
        return Err(wc_status::LOC_LEN_ERR);
    }
    if matches!(kind, WrKind::CmpSwap | WrKind::FetchAdd) && (len < 8 || w.remote_addr % 8 != 0) {
        return Err(wc_status::LOC_LEN_ERR);
    }
    if cfg.qp_type == QpType::Ud && len > u64::from(cfg.mtu) {
        return Err(wc_status::LOC_LEN_ERR);
    }
    let signaled = cfg.sq_sig_all || w.send_flags & send_flags::SIGNALED != 0;
    let len = if kind.is_rd_atomic() && kind != WrKind::Read { 8 } else { len as u32 };
    Ok((w, SqEntry { kind, len, imm, signaled, ..SqEntry::default() }))
}

fn map_mem_err(acc: Access) -> u32 {
    if acc.is_local() {
        wc_status::LOC_PROT_ERR
    } else {
        wc_status::REM_ACCESS_ERR
    }
}

/// Copies between a message offset and an SGE list: `read` gathers `buf.len()` bytes at
/// message offset `off` out of the SGEs; otherwise scatters `buf` into them.
fn sg_copy<E: Env>(
    env: &mut E,
    sge_at: impl Fn(u32) -> Option<Sge>,
    nsge: u32,
    mut off: u64,
    buf: &mut [u8],
    read: bool,
) -> Result<(), u32> {
    let mut done = 0usize;
    let mut i = 0;
    while done < buf.len() {
        if i >= nsge {
            return Err(wc_status::LOC_LEN_ERR);
        }
        let s = sge_at(i).ok_or(wc_status::LOC_LEN_ERR)?;
        i += 1;
        let slen = u64::from(s.length);
        if off >= slen {
            off -= slen;
            continue;
        }
        let n = core::cmp::min(slen - off, (buf.len() - done) as u64) as usize;
        let addr = s.addr.wrapping_add(off);
        let chunk = &mut buf[done..done + n];
        let r = if read {
            env.mem_read(s.lkey, addr, chunk, Access::LocalRead)
        } else {
            env.mem_write(s.lkey, addr, chunk, Access::LocalWrite)
        };
        r.map_err(|_| wc_status::LOC_PROT_ERR)?;
        done += n;
        off = 0;
    }
    Ok(())
}

fn cqe(wr_id: u64, status: u32, opcode: u32, qpn: u32) -> Cqe {
    Cqe { wr_id, status, opcode, qp_num: qpn, ..Cqe::default() }
}

/// Request opcode for a WR kind at a position.
fn request_opcode(t: Transport, kind: WrKind, pos: Position, imm: bool) -> u8 {
    use opcode::*;
    let rc = match (kind, pos, imm) {
        (WrKind::Send, Position::First, _) => RC_SEND_FIRST,
        (WrKind::Send, Position::Middle, _) => RC_SEND_MIDDLE,
        (WrKind::Send, Position::Last, false) => RC_SEND_LAST,
        (WrKind::Send, Position::Last, true) => RC_SEND_LAST_WITH_IMMEDIATE,
        (WrKind::Send, Position::Only, false) => RC_SEND_ONLY,
        (WrKind::Send, Position::Only, true) => RC_SEND_ONLY_WITH_IMMEDIATE,
        (WrKind::Write, Position::First, _) => RC_RDMA_WRITE_FIRST,
        (WrKind::Write, Position::Middle, _) => RC_RDMA_WRITE_MIDDLE,
        (WrKind::Write, Position::Last, false) => RC_RDMA_WRITE_LAST,
        (WrKind::Write, Position::Last, true) => RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (WrKind::Write, Position::Only, false) => RC_RDMA_WRITE_ONLY,
        (WrKind::Write, Position::Only, true) => RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (WrKind::Read, _, _) => RC_RDMA_READ_REQUEST,
        (WrKind::CmpSwap, _, _) => RC_COMPARE_SWAP,
        (WrKind::FetchAdd, _, _) => RC_FETCH_ADD,
    };
    t.base() | rc
}

fn read_resp_opcode(pos: Position) -> u8 {
    match pos {
        Position::First => opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Position::Middle => opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Position::Last => opcode::RC_RDMA_READ_RESPONSE_LAST,
        Position::Only => opcode::RC_RDMA_READ_RESPONSE_ONLY,
    }
}

fn transport_of(t: QpType) -> Transport {
    match t {
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
        _ => Transport::Rc,
    }
}

/// Writes headers, then lets `fill` put the payload, then zeroes pad and ICRC. Returns the
/// packet length.
fn assemble(
    out: &mut [u8],
    h: &Headers,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), u32>,
) -> Result<usize, u32> {
    let info = h.check().map_err(|_| wc_status::GENERAL_ERR)?;
    let total = wire::packet_len(info, len).ok_or(wc_status::LOC_LEN_ERR)?;
    if out.len() < total {
        return Err(wc_status::LOC_LEN_ERR);
    }
    let mut h = *h;
    h.bth.pad = wire::pad_for(len);
    let hl = h.write(out).map_err(|_| wc_status::GENERAL_ERR)?;
    fill(&mut out[hl..hl + len])?;
    out[hl + len..total].fill(0);
    Ok(total)
}

impl<B: DerefMut<Target = [u8]>, M: DerefMut<Target = [SqEntry]>> Engine<B, M> {
    /// An engine in RESET over private send storage: `slots` holds `meta.len()` slots of
    /// `slot_size` bytes; `meta.len()` must be a power of two.
    pub fn new(cfg: Config, slots: B, meta: M, slot_size: usize) -> Option<Self> {
        let n = meta.len();
        if n == 0 || !n.is_power_of_two() || slots.len() < n * slot_size || slot_size < size_of::<SendWqe>() {
            return None;
        }
        Some(Engine {
            cfg,
            state: QpState::Reset,
            sq_draining: false,
            sqd_notify: false,
            last_wqe_sent: false,
            sq: Sq { slots, meta, slot_size, mask: n as u32 - 1, head: 0, next: 0, done: 0 },
            req: Requester { psn: Psn::ZERO, acked: Psn::ZERO, cur_pkt: 0, rd_atomic: 0, rnr_wait: false, rnr_left: 0 },
            resp: Responder::new(),
            counters: Counters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Replaces the configuration (a committed modify_qp).
    pub fn set_config(&mut self, cfg: Config) {
        self.cfg = cfg;
        self.req.rnr_left = cfg.rnr_retry;
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

    /// Sets the send PSN / expected receive PSN (modify_qp with SQ_PSN / RQ_PSN).
    pub fn set_psns(&mut self, sq_psn: Option<u32>, rq_psn: Option<u32>) {
        if let Some(p) = sq_psn {
            self.req.psn = Psn::from_masked(p);
            self.req.acked = self.req.psn;
        }
        if let Some(p) = rq_psn {
            self.resp.epsn = Psn::from_masked(p);
        }
    }

    /// A committed state change. Entering ERR flushes; entering RESET forgets everything.
    pub fn set_state<E: Env>(&mut self, env: &mut E, s: QpState, sqd_notify: bool) {
        let old = self.state;
        self.state = s;
        match s {
            QpState::Reset => self.reset(),
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

    fn reset(&mut self) {
        let (head, cfg) = (self.sq.head, self.cfg);
        self.sq.next = head;
        self.sq.done = head;
        self.req = Requester { psn: Psn::ZERO, acked: Psn::ZERO, cur_pkt: 0, rd_atomic: 0, rnr_wait: false, rnr_left: cfg.rnr_retry };
        self.resp = Responder::new();
        self.sq_draining = false;
        self.last_wqe_sent = false;
    }

    /// Room for more WQEs in the private SQ.
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
        self.sq.slots.deref_mut().get_mut(i..i + ss)
    }

    /// The slot from [`Self::sq_slot_mut`] is filled: validate and queue it. A malformed WQE
    /// completes in error (LOC_QP_OP_ERR or LOC_LEN_ERR) and moves the QP to ERR. WQEs pushed
    /// while in ERR complete with WR_FLUSH_ERR.
    pub fn sq_pushed<E: Env>(&mut self, env: &mut E) {
        if self.sq_room() == 0 {
            return;
        }
        let idx = self.sq.head & self.sq.mask;
        let i = idx as usize * self.sq.slot_size;
        let slot = &self.sq.slots.deref()[i..i + self.sq.slot_size];
        let (wr_id, opcode) = decode_send_wqe(slot).map_or((0, 0), |w| (w.wr_id, w.opcode));
        let r = check_send_wqe(&self.cfg, slot);
        self.sq.head = self.sq.head.wrapping_add(1);
        match r {
            Ok((_, e)) => {
                self.sq.meta.deref_mut()[idx as usize] = e;
                if self.state == QpState::Err {
                    self.flush(env);
                }
            }
            Err(status) => {
                let kind = match opcode {
                    wr_opcode::RDMA_WRITE | wr_opcode::RDMA_WRITE_WITH_IMM => WrKind::Write,
                    wr_opcode::RDMA_READ => WrKind::Read,
                    wr_opcode::ATOMIC_CMP_AND_SWP => WrKind::CmpSwap,
                    wr_opcode::ATOMIC_FETCH_AND_ADD => WrKind::FetchAdd,
                    _ => WrKind::Send,
                };
                self.sq.meta.deref_mut()[idx as usize] = SqEntry { kind, completed: true, ..SqEntry::default() };
                let status = if self.state == QpState::Err { wc_status::WR_FLUSH_ERR } else { status };
                self.post(env, CqSel::Send, &cqe(wr_id, status, kind.wc_opcode(), self.cfg.qpn));
                if self.state != QpState::Err {
                    self.fatal(env, true);
                } else {
                    self.flush(env);
                }
            }
        }
    }

    fn post<E: Env>(&mut self, env: &mut E, cq: CqSel, c: &Cqe) {
        if !env.complete(cq, c) {
            self.counters.cq_overflow += 1;
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

    /// Flushes every outstanding send WR and (for a QP with its own RQ) every posted receive
    /// WR with WR_FLUSH_ERR. Called on entering ERR and whenever work arrives in ERR.
    pub fn flush<E: Env>(&mut self, env: &mut E) {
        let qpn = self.cfg.qpn;
        while self.sq.done != self.sq.head {
            let idx = (self.sq.done & self.sq.mask) as usize;
            let e = self.sq.meta.deref()[idx];
            if !e.completed {
                let off = idx * self.sq.slot_size;
                let wr_id = decode_send_wqe(&self.sq.slots.deref()[off..off + self.sq.slot_size]).map_or(0, |w| w.wr_id);
                self.post(env, CqSel::Send, &cqe(wr_id, wc_status::WR_FLUSH_ERR, e.kind.wc_opcode(), qpn));
            }
            self.sq.done = self.sq.done.wrapping_add(1);
        }
        self.sq.next = self.sq.head;
        self.req.cur_pkt = 0;
        self.req.rd_atomic = 0;
        self.req.rnr_wait = false;
        if let Some(r) = self.resp.recv.take() {
            self.post(env, CqSel::Recv, &cqe(r.wr_id, wc_status::WR_FLUSH_ERR, wc_opcode::RECV, qpn));
        }
        self.resp.in_msg = InMsg::None;
        if self.cfg.has_srq {
            if !self.last_wqe_sent {
                // Once per entry to ERR: no WQE will be taken from the SRQ any more.
                self.last_wqe_sent = true;
                env.event(Event::LastWqeReached);
            }
        } else {
            let mut r = RecvWr::default();
            loop {
                match env.recv_take(&mut r) {
                    RecvTake::Taken => {
                        self.post(env, CqSel::Recv, &cqe(r.wr_id, wc_status::WR_FLUSH_ERR, wc_opcode::RECV, qpn));
                    }
                    RecvTake::Bad => {
                        self.post(env, CqSel::Recv, &cqe(0, wc_status::WR_FLUSH_ERR, wc_opcode::RECV, qpn));
                    }
                    RecvTake::Empty => break,
                }
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

    fn slot(&self, idx: u32) -> &[u8] {
        let off = (idx & self.sq.mask) as usize * self.sq.slot_size;
        &self.sq.slots.deref()[off..off + self.sq.slot_size]
    }

    /// Whether the requester has work it could do now.
    pub fn requester_ready(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
            && !self.req.rnr_wait
            && self.sq.next != self.sq.head
            && !(self.state == QpState::Sqd && self.req.cur_pkt == 0)
    }

    /// Sends up to `budget` packets; returns how many went out.
    pub fn run_requester<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], budget: u32) -> u32 {
        let mut sent = 0;
        while sent < budget && self.requester_ready() {
            let idx = self.sq.next;
            let e = self.sq.meta.deref()[(idx & self.sq.mask) as usize];
            let rc = self.cfg.qp_type == QpType::Rc;
            if self.req.cur_pkt == 0 {
                if rc && e.kind.is_rd_atomic() && self.req.rd_atomic >= u32::from(self.cfg.max_rd_atomic) {
                    break;
                }
                if rc && self.req.psn.distance_from(self.req.acked) >= RC_WINDOW {
                    break;
                }
                let npkts = match e.kind {
                    WrKind::Send | WrKind::Write | WrKind::Read => {
                        Segmentation::new(e.len, self.cfg.mtu).map_or(1, |s| s.count())
                    }
                    _ => 1,
                };
                let m = &mut self.sq.meta.deref_mut()[(idx & self.sq.mask) as usize];
                m.first_psn = self.req.psn;
                m.npkts = npkts;
            } else if rc && self.req.psn.distance_from(self.req.acked) >= RC_WINDOW {
                break;
            }
            let e = self.sq.meta.deref()[(idx & self.sq.mask) as usize];
            match self.send_packet(env, scratch, idx, &e) {
                Ok(()) => {}
                Err(status) => {
                    let wr_id = decode_send_wqe(self.slot(idx)).map_or(0, |w| w.wr_id);
                    self.sq.meta.deref_mut()[(idx & self.sq.mask) as usize].completed = true;
                    self.post(env, CqSel::Send, &cqe(wr_id, status, e.kind.wc_opcode(), self.cfg.qpn));
                    self.fatal(env, true);
                    return sent;
                }
            }
            sent += 1;
            let req_pkts = if e.kind == WrKind::Send || e.kind == WrKind::Write { e.npkts } else { 1 };
            self.req.cur_pkt += 1;
            self.req.psn = self.req.psn.next();
            if self.req.cur_pkt >= req_pkts {
                if e.kind == WrKind::Read {
                    self.req.psn = e.first_psn.wrapping_add(e.npkts);
                }
                self.req.cur_pkt = 0;
                self.sq.next = idx.wrapping_add(1);
                if rc {
                    if e.kind.is_rd_atomic() {
                        self.req.rd_atomic += 1;
                    }
                } else {
                    // UC and UD complete as soon as the last packet left.
                    self.complete_front(env, wc_status::SUCCESS);
                    self.req.acked = self.req.psn;
                }
            }
        }
        self.check_drained(env);
        sent
    }

    fn complete_front<E: Env>(&mut self, env: &mut E, status: u32) {
        let idx = self.sq.done;
        let e = self.sq.meta.deref()[(idx & self.sq.mask) as usize];
        if !e.completed && (e.signaled || status != wc_status::SUCCESS) {
            let w = decode_send_wqe(self.slot(idx)).unwrap_or_default();
            let mut c = cqe(w.wr_id, status, e.kind.wc_opcode(), self.cfg.qpn);
            if status == wc_status::SUCCESS {
                c.byte_len = e.len;
            }
            self.post(env, CqSel::Send, &c);
        }
        self.sq.done = idx.wrapping_add(1);
    }

    fn send_packet<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], idx: u32, e: &SqEntry) -> Result<(), u32> {
        let cfg = self.cfg;
        let t = transport_of(cfg.qp_type);
        let off = (idx & self.sq.mask) as usize * self.sq.slot_size;
        let slot = &self.sq.slots.deref()[off..off + self.sq.slot_size];
        let w = decode_send_wqe(slot).ok_or(wc_status::LOC_QP_OP_ERR)?;
        let src = source(slot, &w).ok_or(wc_status::LOC_QP_OP_ERR)?;
        let pkt_i = self.req.cur_pkt;
        let (pos, pay_off, pay_len) = match e.kind {
            WrKind::Send | WrKind::Write => {
                let seg = Segmentation::new(e.len, cfg.mtu).ok_or(wc_status::GENERAL_ERR)?;
                let s = seg.segment(pkt_i).ok_or(wc_status::GENERAL_ERR)?;
                (s.position, s.offset, s.len)
            }
            _ => (Position::Only, 0, 0),
        };
        let opc = request_opcode(t, e.kind, pos, e.imm);
        let psn = self.req.psn;
        let dest_qp = if cfg.qp_type == QpType::Ud { w.remote_qpn } else { cfg.dest_qpn };
        let end = pos.is_end();
        let ack_req = cfg.qp_type == QpType::Rc
            && (end || psn.get() % ACK_REQ_EVERY == 0 || e.kind.is_rd_atomic());
        let mut h = Headers::new(Bth {
            opcode: opc,
            se: end && w.send_flags & send_flags::SOLICITED != 0,
            pkey: BTH_DEF_PKEY,
            dest_qp,
            ack_req,
            psn,
            ..Bth::default()
        });
        let info = opcode::info(opc).ok_or(wc_status::GENERAL_ERR)?;
        if info.headers.has(opcode::Ext::Reth) {
            h.reth = Some(Reth { va: w.remote_addr, rkey: w.rkey, len: e.len });
        }
        if info.headers.has(opcode::Ext::ImmDt) {
            h.immdt = Some(ImmDt { imm: u32::from_be_bytes(w.imm_data.to_ne_bytes()) });
        }
        if info.headers.has(opcode::Ext::Deth) {
            let qkey = if w.remote_qkey & 0x8000_0000 != 0 { cfg.qkey } else { w.remote_qkey };
            h.deth = Some(Deth { qkey, src_qp: cfg.qpn });
        }
        if info.headers.has(opcode::Ext::AtomicEth) {
            let (swap_add, compare) = match e.kind {
                WrKind::CmpSwap => (w.swap, w.compare_add),
                _ => (w.compare_add, 0),
            };
            h.atmeth = Some(AtomicEth { va: w.remote_addr, rkey: w.rkey, swap_add, compare });
        }
        let len = assemble(scratch, &h, pay_len as usize, |buf| match &src {
            Source::Inline(b) => {
                let s = b.get(pay_off as usize..pay_off as usize + buf.len()).ok_or(wc_status::LOC_LEN_ERR)?;
                buf.copy_from_slice(s);
                Ok(())
            }
            Source::Sges(_, n) => {
                let n: u32 = *n;
                sg_copy(env, |i| src.sge(i), n, u64::from(pay_off), buf, true)
            }
        })?;
        let dest = if cfg.qp_type == QpType::Ud { Dest::Ah { ah: w.ah_num, qpn: w.remote_qpn } } else { Dest::Connected };
        env.emit(&scratch[..len], dest);
        Ok(())
    }

    /// The RNR timer fired: the requester may resend.
    pub fn rnr_timer_expired(&mut self) {
        self.req.rnr_wait = false;
    }

    /// Handles a received packet addressed to this QP (ICRC already checked). Returns whether
    /// the requester may have work again (an ACK opened the window).
    pub fn rx<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>, info: &RxInfo) -> bool {
        let t = pkt.info().transport;
        if t != transport_of(self.cfg.qp_type) {
            self.counters.rx_bad_opcode += 1;
            return false;
        }
        if pkt.info().is_response() {
            self.rx_response(env, pkt)
        } else {
            match self.state {
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe => {}
                _ => {
                    self.counters.rx_bad_state += 1;
                    return false;
                }
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
    }

    fn rx_ud<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>, info: &RxInfo) {
        let Some(deth) = pkt.deth() else {
            self.counters.rx_bad_opcode += 1;
            return;
        };
        if deth.qkey != self.cfg.qkey {
            self.counters.rx_bad_qkey += 1;
            return;
        }
        let payload = pkt.payload();
        if payload.len() > self.cfg.mtu as usize {
            self.counters.rx_dropped_msg += 1;
            return;
        }
        let mut r = RecvWr::default();
        match env.recv_take(&mut r) {
            RecvTake::Taken => {}
            RecvTake::Empty => {
                self.counters.rx_no_wqe += 1;
                return;
            }
            RecvTake::Bad => {
                self.fatal(env, true);
                return;
            }
        }
        let total = GRH_LEN + payload.len();
        let mut c = cqe(r.wr_id, wc_status::SUCCESS, wc_opcode::RECV, self.cfg.qpn);
        if r.capacity() < total as u64 {
            c.status = wc_status::LOC_LEN_ERR;
            self.post(env, CqSel::Recv, &c);
            return;
        }
        let placed = scatter(env, &r, 0, &info.grh).and_then(|()| scatter(env, &r, GRH_LEN as u64, payload));
        match placed {
            Ok(()) => {
                c.byte_len = total as u32;
                c.src_qp = deth.src_qp;
                c.wc_flags = wc_flags::GRH;
                if let Some(imm) = pkt.immdt() {
                    c.imm_data = u32::from_ne_bytes(imm.imm.to_be_bytes());
                    c.wc_flags |= wc_flags::WITH_IMM;
                }
                c.pkey_index = 0;
                self.post(env, CqSel::Recv, &c);
            }
            Err(status) => {
                c.status = status;
                self.post(env, CqSel::Recv, &c);
                self.fatal(env, true);
            }
        }
    }

    fn send_ack<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], psn: Psn, aeth: Aeth) {
        let mut h = Headers::new(Bth {
            opcode: opcode::RC_ACKNOWLEDGE,
            pkey: BTH_DEF_PKEY,
            dest_qp: self.cfg.dest_qpn,
            psn,
            ..Bth::default()
        });
        h.aeth = Some(aeth);
        if let Ok(len) = assemble(scratch, &h, 0, |_| Ok(())) {
            env.emit(&scratch[..len], Dest::Connected);
        }
        if matches!(aeth.syndrome(), Syndrome::Ack { .. }) {
            self.counters.tx_ack += 1;
        } else {
            self.counters.tx_nak += 1;
        }
    }

    fn nak<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], psn: Psn, code: NakCode) {
        let a = Aeth::nak(self.resp.msn, code);
        self.send_ack(env, scratch, psn, a);
    }

    /// Sends the coalesced ACK, if one is pending.
    pub fn flush_ack<E: Env>(&mut self, env: &mut E, scratch: &mut [u8]) {
        if self.resp.owed_len > 0 {
            // Responses go out in PSN order: the ACK waits for the owed READ/atomic responses.
            return;
        }
        if let Some(p) = self.resp.ack_pending.take() {
            let a = Aeth::ack(self.resp.msn, AETH_ACK_UNLIMITED);
            self.send_ack(env, scratch, p, a);
        }
    }

    /// Abandons the message in progress (UC drop / RC error); a taken receive WQE is kept for
    /// the next message.
    fn abandon_msg(&mut self) {
        self.resp.in_msg = InMsg::None;
        self.resp.msg_off = 0;
    }

    fn rx_request<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let rc = self.cfg.qp_type == QpType::Rc;
        let info = pkt.info();
        let bth = *pkt.bth();
        let psn = bth.psn;
        let d = psn.diff(self.resp.epsn);
        if rc {
            if d > 0 {
                self.counters.rx_out_of_seq += 1;
                if !self.resp.nak_sent {
                    self.resp.nak_sent = true;
                    let e = self.resp.epsn;
                    self.nak(env, scratch, e, NakCode::PsnSeqError);
                }
                return;
            }
            if d < 0 {
                self.counters.rx_duplicate += 1;
                self.rx_duplicate(env, scratch, pkt);
                return;
            }
            self.resp.nak_sent = false;
        } else {
            // UC: a gap loses the message in progress; a new message may start anywhere.
            if d != 0 || self.resp.uc_drop {
                if info.position.is_start() {
                    self.resp.uc_drop = false;
                    self.abandon_msg();
                } else {
                    if self.resp.in_msg != InMsg::None {
                        self.counters.rx_dropped_msg += 1;
                    }
                    self.abandon_msg();
                    self.resp.uc_drop = true;
                    self.resp.epsn = psn.next();
                    return;
                }
            }
        }
        // Opcode sequence.
        let want = match info.op {
            Operation::Send => InMsg::Send,
            Operation::RdmaWrite => InMsg::Write,
            _ => InMsg::None,
        };
        let seq_ok = if info.position.is_start() {
            self.resp.in_msg == InMsg::None
        } else {
            self.resp.in_msg == want && want != InMsg::None
        };
        if !seq_ok {
            self.counters.rx_bad_opcode += 1;
            if rc {
                self.nak(env, scratch, psn, NakCode::InvalidRequest);
                self.fatal(env, false);
            } else {
                self.abandon_msg();
                if !info.position.is_start() {
                    self.resp.uc_drop = true;
                    self.resp.epsn = psn.next();
                    return;
                }
            }
            if rc {
                return;
            }
        }
        match info.op {
            Operation::Send | Operation::RdmaWrite => self.rx_send_write(env, scratch, pkt),
            Operation::RdmaReadRequest if rc => self.rx_read(env, scratch, pkt, false),
            Operation::CompareSwap | Operation::FetchAdd if rc => self.rx_atomic(env, scratch, pkt),
            _ => {
                self.counters.rx_bad_opcode += 1;
                if rc {
                    self.nak(env, scratch, psn, NakCode::InvalidRequest);
                    self.fatal(env, false);
                }
            }
        }
    }

    fn take_recv<E: Env>(&mut self, env: &mut E) -> Result<bool, ()> {
        if self.resp.recv.is_some() {
            return Ok(true);
        }
        let mut r = RecvWr::default();
        match env.recv_take(&mut r) {
            RecvTake::Taken => {
                self.resp.recv = Some(r);
                Ok(true)
            }
            RecvTake::Empty => Ok(false),
            RecvTake::Bad => Err(()),
        }
    }

    fn rx_send_write<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let rc = self.cfg.qp_type == QpType::Rc;
        let info = pkt.info();
        let psn = pkt.bth().psn;
        let payload = pkt.payload();
        if !wire::payload_len_ok(info, payload.len(), self.cfg.mtu as usize) {
            self.counters.rx_bad_opcode += 1;
            if rc {
                self.nak(env, scratch, psn, NakCode::InvalidRequest);
                self.fatal(env, false);
            } else {
                self.abandon_msg();
                self.resp.uc_drop = !info.position.is_end();
                self.resp.epsn = psn.next();
            }
            return;
        }
        let is_send = info.op == Operation::Send;
        // A receive WQE: at the start of a SEND, or for the immediate of a WRITE.
        if info.needs_recv_wqe() {
            match self.take_recv(env) {
                Ok(true) => {}
                Ok(false) => {
                    self.counters.rx_no_wqe += 1;
                    if rc {
                        let a = Aeth::rnr_nak(self.resp.msn, self.cfg.min_rnr_timer);
                        self.send_ack(env, scratch, psn, a);
                    } else {
                        self.abandon_msg();
                        self.resp.uc_drop = !info.position.is_end();
                        self.resp.epsn = psn.next();
                    }
                    return;
                }
                Err(()) => {
                    self.fatal(env, true);
                    return;
                }
            }
        }
        if info.position.is_start() {
            self.resp.msg_off = 0;
            if !is_send {
                let Some(reth) = pkt.reth() else { return };
                if self.cfg.access & access::REMOTE_WRITE == 0 && reth.len != 0 {
                    self.remote_access_error(env, scratch, psn);
                    return;
                }
                if env.mem_check(reth.rkey, reth.va, u64::from(reth.len), Access::RemoteWrite).is_err() {
                    self.remote_access_error(env, scratch, psn);
                    return;
                }
                self.resp.wr_va = reth.va;
                self.resp.wr_rkey = reth.rkey;
                self.resp.wr_len = u64::from(reth.len);
            }
        }
        // Place the payload.
        let off = self.resp.msg_off;
        let placed = if is_send {
            match &self.resp.recv {
                Some(r) => {
                    let r = *r;
                    if off + payload.len() as u64 > r.capacity() {
                        Err(wc_status::LOC_LEN_ERR)
                    } else {
                        scatter(env, &r, off, payload)
                    }
                }
                None => Err(wc_status::LOC_QP_OP_ERR),
            }
        } else if off + payload.len() as u64 > self.resp.wr_len {
            Err(wc_status::REM_INV_REQ_ERR)
        } else if payload.is_empty() {
            Ok(())
        } else {
            env.mem_write(self.resp.wr_rkey, self.resp.wr_va.wrapping_add(off), payload, Access::RemoteWrite)
                .map_err(|_| wc_status::REM_ACCESS_ERR)
        };
        if let Err(status) = placed {
            if status == wc_status::REM_ACCESS_ERR {
                self.remote_access_error(env, scratch, psn);
                return;
            }
            // A receive that cannot hold the message, or a write past its RETH length.
            if let Some(r) = self.resp.recv.take() {
                let c = cqe(r.wr_id, status, wc_opcode::RECV, self.cfg.qpn);
                self.post(env, CqSel::Recv, &c);
            }
            if rc {
                self.nak(env, scratch, psn, NakCode::InvalidRequest);
                self.fatal(env, false);
            } else {
                self.counters.rx_dropped_msg += 1;
                self.abandon_msg();
                self.resp.uc_drop = !info.position.is_end();
                self.resp.epsn = psn.next();
            }
            return;
        }
        self.resp.msg_off = off + payload.len() as u64;
        self.resp.in_msg = if is_send { InMsg::Send } else { InMsg::Write };
        self.resp.epsn = psn.next();
        if info.position.is_end() {
            self.resp.in_msg = InMsg::None;
            self.resp.msn = (self.resp.msn + 1) & wire::MASK24;
            if info.completes_recv() {
                if let Some(r) = self.resp.recv.take() {
                    let mut c = cqe(r.wr_id, wc_status::SUCCESS, wc_opcode::RECV, self.cfg.qpn);
                    if !is_send {
                        c.opcode = wc_opcode::RECV_RDMA_WITH_IMM;
                        c.byte_len = self.resp.wr_len as u32;
                    } else {
                        c.byte_len = self.resp.msg_off as u32;
                    }
                    if let Some(imm) = pkt.immdt() {
                        c.imm_data = u32::from_ne_bytes(imm.imm.to_be_bytes());
                        c.wc_flags |= wc_flags::WITH_IMM;
                    }
                    c.src_qp = self.cfg.dest_qpn;
                    self.post(env, CqSel::Recv, &c);
                }
            }
        }
        if rc && pkt.bth().ack_req {
            self.resp.ack_pending = Some(psn);
        }
    }

    fn remote_access_error<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], psn: Psn) {
        if self.cfg.qp_type == QpType::Rc {
            self.nak(env, scratch, psn, NakCode::RemoteAccessError);
            // The message is lost; the requester moves to ERR on the NAK. The responder keeps
            // its receive WQE and waits for the next message.
            self.abandon_msg();
            self.resp.nak_sent = true;
        } else {
            self.counters.rx_dropped_msg += 1;
            self.abandon_msg();
            self.resp.uc_drop = true;
            self.resp.epsn = psn.next();
        }
    }

    fn rx_read<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>, duplicate: bool) {
        let psn = pkt.bth().psn;
        let Some(reth) = pkt.reth() else { return };
        if self.cfg.max_dest_rd_atomic == 0 {
            self.nak(env, scratch, psn, NakCode::InvalidRequest);
            self.fatal(env, false);
            return;
        }
        if reth.len != 0
            && (self.cfg.access & access::REMOTE_READ == 0
                || env.mem_check(reth.rkey, reth.va, u64::from(reth.len), Access::RemoteRead).is_err())
        {
            self.remote_access_error(env, scratch, psn);
            return;
        }
        let Some(seg) = Segmentation::new(reth.len, self.cfg.mtu) else { return };
        if duplicate {
            // A repeated READ (its responses were lost): answer it again, from memory as it is.
            let owed = Owed::Read { rkey: reth.rkey, va: reth.va, len: reth.len, psn, next: 0, count: seg.count(), msn: self.resp.msn };
            let mut o = owed;
            while !matches!(o, Owed::Nothing) {
                o = self.emit_owed(env, scratch, o);
            }
            return;
        }
        let limit = usize::from(self.cfg.max_dest_rd_atomic).min(RESP_QUEUE);
        if self.resp.owed_len >= limit {
            // More READ/atomic requests outstanding than max_dest_rd_atomic allows.
            self.nak(env, scratch, psn, NakCode::InvalidRequest);
            self.fatal(env, false);
            return;
        }
        self.resp.msn = (self.resp.msn + 1) & wire::MASK24;
        self.resp.epsn = psn.wrapping_add(seg.count());
        let owed = Owed::Read { rkey: reth.rkey, va: reth.va, len: reth.len, psn, next: 0, count: seg.count(), msn: self.resp.msn };
        // Sent by the caller's `run_responder`, which paces it.
        self.push_owed(owed);
    }

    fn push_owed(&mut self, o: Owed) {
        let i = (self.resp.owed_head + self.resp.owed_len) % RESP_QUEUE;
        self.resp.owed[i] = o;
        self.resp.owed_len += 1;
    }

    /// Whether READ/atomic responses are still owed ([`Engine::run_responder`] sends them).
    pub fn responder_pending(&self) -> bool {
        self.resp.owed_len > 0
    }

    /// Sends up to `budget` owed response packets, oldest first, then the coalesced ACK once
    /// nothing is owed. Returns the packets sent.
    pub fn run_responder<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], budget: u32) -> u32 {
        let mut sent = 0;
        while sent < budget && self.resp.owed_len > 0 {
            let o = self.resp.owed[self.resp.owed_head];
            let rest = self.emit_owed(env, scratch, o);
            sent += 1;
            if matches!(rest, Owed::Nothing) {
                self.resp.owed[self.resp.owed_head] = Owed::Nothing;
                self.resp.owed_head = (self.resp.owed_head + 1) % RESP_QUEUE;
                self.resp.owed_len -= 1;
            } else {
                self.resp.owed[self.resp.owed_head] = rest;
            }
        }
        if self.resp.owed_len == 0 {
            self.flush_ack(env, scratch);
        }
        sent
    }

    /// Sends one packet of `o`; returns what is still owed of it.
    fn emit_owed<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], o: Owed) -> Owed {
        match o {
            Owed::Nothing => Owed::Nothing,
            Owed::Atomic { psn, orig, msn } => {
                self.send_atomic_ack(env, scratch, psn, orig, msn);
                Owed::Nothing
            }
            Owed::Read { rkey, va, len, psn, next, count, msn } => {
                let Some(seg) = Segmentation::new(len, self.cfg.mtu) else { return Owed::Nothing };
                let Some(s) = seg.segment(next) else { return Owed::Nothing };
                let mut h = Headers::new(Bth {
                    opcode: read_resp_opcode(s.position),
                    pkey: BTH_DEF_PKEY,
                    dest_qp: self.cfg.dest_qpn,
                    psn: s.psn(psn),
                    ..Bth::default()
                });
                if s.position != Position::Middle {
                    h.aeth = Some(Aeth::ack(msn, AETH_ACK_UNLIMITED));
                }
                let at = va.wrapping_add(u64::from(s.offset));
                let r = assemble(scratch, &h, s.len as usize, |buf| {
                    env.mem_read(rkey, at, buf, Access::RemoteRead).map_err(|_| wc_status::REM_ACCESS_ERR)
                });
                match r {
                    Ok(n) => env.emit(&scratch[..n], Dest::Connected),
                    Err(_) => {
                        // The MR went away under the READ.
                        let p = s.psn(psn);
                        self.nak(env, scratch, p, NakCode::RemoteAccessError);
                        return Owed::Nothing;
                    }
                }
                if next + 1 >= count {
                    Owed::Nothing
                } else {
                    Owed::Read { rkey, va, len, psn, next: next + 1, count, msn }
                }
            }
        }
    }

    fn rx_atomic<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let psn = pkt.bth().psn;
        let Some(a) = pkt.atmeth() else { return };
        if self.cfg.max_dest_rd_atomic == 0 || a.va % 8 != 0 {
            self.nak(env, scratch, psn, NakCode::InvalidRequest);
            self.fatal(env, false);
            return;
        }
        if self.cfg.access & access::REMOTE_ATOMIC == 0 {
            self.remote_access_error(env, scratch, psn);
            return;
        }
        let op = if pkt.info().op == Operation::CompareSwap {
            AtomicOp::CmpSwap { compare: a.compare, swap: a.swap_add }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let orig = match env.mem_atomic(a.rkey, a.va, op) {
            Ok(v) => v,
            Err(_) => {
                self.remote_access_error(env, scratch, psn);
                return;
            }
        };
        self.resp.msn = (self.resp.msn + 1) & wire::MASK24;
        self.resp.last_atomic = Some((psn, orig));
        self.resp.epsn = psn.next();
        let msn = self.resp.msn;
        if self.resp.owed_len == 0 {
            self.send_atomic_ack(env, scratch, psn, orig, msn);
        } else if self.resp.owed_len < RESP_QUEUE {
            self.push_owed(Owed::Atomic { psn, orig, msn });
        }
    }

    fn send_atomic_ack<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], psn: Psn, orig: u64, msn: u32) {
        let mut h = Headers::new(Bth {
            opcode: opcode::RC_ATOMIC_ACKNOWLEDGE,
            pkey: BTH_DEF_PKEY,
            dest_qp: self.cfg.dest_qpn,
            psn,
            ..Bth::default()
        });
        h.aeth = Some(Aeth::ack(msn, AETH_ACK_UNLIMITED));
        h.atmack = Some(AtomicAckEth { orig });
        if let Ok(len) = assemble(scratch, &h, 0, |_| Ok(())) {
            env.emit(&scratch[..len], Dest::Connected);
        }
    }

    fn rx_duplicate<E: Env>(&mut self, env: &mut E, scratch: &mut [u8], pkt: &Packet<'_>) {
        let psn = pkt.bth().psn;
        match pkt.info().op {
            Operation::RdmaReadRequest => self.rx_read(env, scratch, pkt, true),
            Operation::CompareSwap | Operation::FetchAdd => {
                if let Some((p, orig)) = self.resp.last_atomic {
                    if p == psn {
                        let msn = self.resp.msn;
                        self.send_atomic_ack(env, scratch, psn, orig, msn);
                    }
                }
            }
            _ => {
                // Re-acknowledge everything received so far.
                self.resp.ack_pending = Some(self.resp.epsn.wrapping_sub(1));
            }
        }
    }

    // ---- completer ----

    /// Completes every fully sent SEND/WRITE whose last PSN is at or before `psn`.
    fn ack_upto<E: Env>(&mut self, env: &mut E, psn: Psn) {
        while self.sq.done != self.sq.next {
            let e = self.sq.meta.deref()[(self.sq.done & self.sq.mask) as usize];
            if e.kind.is_rd_atomic() {
                break;
            }
            let last = e.first_psn.wrapping_add(e.npkts.saturating_sub(1));
            if last.after(psn) {
                break;
            }
            self.complete_front(env, wc_status::SUCCESS);
        }
        if psn.next().after(self.req.acked) && !psn.next().after(self.req.psn) {
            self.req.acked = psn.next();
        }
        self.check_drained(env);
    }

    /// Restarts sending at `psn` (a PSN sequence or RNR NAK).
    fn rewind(&mut self, psn: Psn) {
        let mut i = self.sq.done;
        loop {
            let at_cur = i == self.sq.next;
            if !at_cur && i == self.sq.head {
                return;
            }
            let e = self.sq.meta.deref()[(i & self.sq.mask) as usize];
            let started = !at_cur || self.req.cur_pkt > 0;
            if started && psn.in_window(e.first_psn, e.npkts.max(1)) {
                let (p, k) = if e.kind == WrKind::Send || e.kind == WrKind::Write {
                    (psn, psn.distance_from(e.first_psn))
                } else {
                    (e.first_psn, 0)
                };
                self.counters.rewinds += 1;
                self.sq.next = i;
                self.req.cur_pkt = k;
                self.req.psn = p;
                // READ/atomics from `i` on will be re-sent.
                let mut n = 0;
                let mut j = self.sq.done;
                while j != i {
                    if self.sq.meta.deref()[(j & self.sq.mask) as usize].kind.is_rd_atomic() {
                        n += 1;
                    }
                    j = j.wrapping_add(1);
                }
                self.req.rd_atomic = n;
                return;
            }
            if at_cur {
                return;
            }
            i = i.wrapping_add(1);
        }
    }

    fn fail_front<E: Env>(&mut self, env: &mut E, status: u32) {
        if self.sq.done != self.sq.next || self.req.cur_pkt > 0 {
            if self.sq.done == self.sq.next {
                self.sq.next = self.sq.next.wrapping_add(1);
                self.req.cur_pkt = 0;
            }
            self.complete_front(env, status);
        }
        self.fatal(env, false);
    }

    fn rx_response<E: Env>(&mut self, env: &mut E, pkt: &Packet<'_>) -> bool {
        if !matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            self.counters.rx_bad_state += 1;
            return false;
        }
        let psn = pkt.bth().psn;
        // A response must answer something we sent.
        if !psn.before(self.req.psn) {
            self.counters.rx_bad_response += 1;
            return false;
        }
        match pkt.info().op {
            Operation::Acknowledge => {
                let Some(aeth) = pkt.aeth() else { return false };
                match aeth.syndrome() {
                    Syndrome::Ack { .. } => {
                        self.ack_upto(env, psn);
                        self.req.rnr_left = self.cfg.rnr_retry;
                    }
                    Syndrome::RnrNak { timer } => {
                        self.ack_upto(env, psn.wrapping_sub(1));
                        if self.cfg.rnr_retry != 7 {
                            if self.req.rnr_left == 0 {
                                self.fail_front(env, wc_status::RNR_RETRY_EXC_ERR);
                                return false;
                            }
                            self.req.rnr_left -= 1;
                        }
                        self.rewind(psn);
                        self.req.rnr_wait = true;
                        env.arm_rnr_timer(wire::rnr_timer_usecs(timer));
                    }
                    Syndrome::Nak(code) => {
                        self.ack_upto(env, psn.wrapping_sub(1));
                        match code {
                            NakCode::PsnSeqError => self.rewind(psn),
                            NakCode::InvalidRequest => self.fail_front(env, wc_status::REM_INV_REQ_ERR),
                            NakCode::RemoteAccessError => self.fail_front(env, wc_status::REM_ACCESS_ERR),
                            _ => self.fail_front(env, wc_status::REM_OP_ERR),
                        }
                    }
                    Syndrome::Reserved(_) => {
                        self.counters.rx_bad_response += 1;
                    }
                }
            }
            Operation::RdmaReadResponse => {
                self.ack_upto(env, psn.wrapping_sub(1));
                if self.sq.done == self.sq.next {
                    self.counters.rx_bad_response += 1;
                    return false;
                }
                let idx = self.sq.done;
                let e = self.sq.meta.deref()[(idx & self.sq.mask) as usize];
                if e.kind != WrKind::Read || !psn.in_window(e.first_psn, e.npkts) {
                    self.counters.rx_bad_response += 1;
                    return false;
                }
                let k = psn.distance_from(e.first_psn);
                let Some(seg) = Segmentation::new(e.len, self.cfg.mtu) else { return false };
                let Some(s) = seg.segment(k) else { return false };
                let payload = pkt.payload();
                let pos_ok = matches!(
                    (s.position, pkt.info().position),
                    (Position::Only, Position::Only)
                        | (Position::First, Position::First)
                        | (Position::Middle, Position::Middle)
                        | (Position::Last, Position::Last)
                );
                if !pos_ok || payload.len() != s.len as usize {
                    self.fail_front(env, wc_status::BAD_RESP_ERR);
                    return false;
                }
                let slot_off = (idx & self.sq.mask) as usize * self.sq.slot_size;
                let slot = &self.sq.slots.deref()[slot_off..slot_off + self.sq.slot_size];
                let r = match decode_send_wqe(slot).and_then(|w| source(slot, &w).map(|s| (w, s))) {
                    Some((_, src)) => {
                        let n = match src {
                            Source::Sges(_, n) => n,
                            Source::Inline(_) => 0,
                        };
                        scatter_src(env, &src, n, u64::from(s.offset), payload)
                    }
                    None => Err(wc_status::LOC_QP_OP_ERR),
                };
                if let Err(status) = r {
                    self.fail_front(env, status);
                    return false;
                }
                if s.position.is_end() {
                    self.req.rd_atomic = self.req.rd_atomic.saturating_sub(1);
                    self.complete_front(env, wc_status::SUCCESS);
                    let p = e.first_psn.wrapping_add(e.npkts);
                    if p.after(self.req.acked) {
                        self.req.acked = p;
                    }
                    self.check_drained(env);
                }
            }
            Operation::AtomicAcknowledge => {
                self.ack_upto(env, psn.wrapping_sub(1));
                if self.sq.done == self.sq.next {
                    self.counters.rx_bad_response += 1;
                    return false;
                }
                let idx = self.sq.done;
                let e = self.sq.meta.deref()[(idx & self.sq.mask) as usize];
                if !matches!(e.kind, WrKind::CmpSwap | WrKind::FetchAdd) || e.first_psn != psn {
                    self.counters.rx_bad_response += 1;
                    return false;
                }
                let Some(ack) = pkt.atmack() else { return false };
                let slot_off = (idx & self.sq.mask) as usize * self.sq.slot_size;
                let slot = &self.sq.slots.deref()[slot_off..slot_off + self.sq.slot_size];
                let r = match decode_send_wqe(slot).and_then(|w| source(slot, &w)) {
                    Some(src) => {
                        let n = match src {
                            Source::Sges(_, n) => n,
                            Source::Inline(_) => 0,
                        };
                        scatter_src(env, &src, n, 0, &ack.orig.to_ne_bytes())
                    }
                    None => Err(wc_status::LOC_QP_OP_ERR),
                };
                if let Err(status) = r {
                    self.fail_front(env, status);
                    return false;
                }
                self.req.rd_atomic = self.req.rd_atomic.saturating_sub(1);
                self.complete_front(env, wc_status::SUCCESS);
                if psn.next().after(self.req.acked) {
                    self.req.acked = psn.next();
                }
                self.check_drained(env);
            }
            _ => {
                self.counters.rx_bad_response += 1;
                return false;
            }
        }
        self.requester_ready()
    }
}

fn scatter<E: Env>(env: &mut E, r: &RecvWr, off: u64, data: &[u8]) -> Result<(), u32> {
    if data.is_empty() {
        return Ok(());
    }
    // `sg_copy` needs a mutable buffer only for reads; writes go through `mem_write`.
    let mut done = 0usize;
    let mut off = off;
    for s in r.sges() {
        if done == data.len() {
            break;
        }
        let slen = u64::from(s.length);
        if off >= slen {
            off -= slen;
            continue;
        }
        let n = core::cmp::min(slen - off, (data.len() - done) as u64) as usize;
        env.mem_write(s.lkey, s.addr.wrapping_add(off), &data[done..done + n], Access::LocalWrite)
            .map_err(|_| map_mem_err(Access::LocalWrite))?;
        done += n;
        off = 0;
    }
    if done < data.len() {
        return Err(wc_status::LOC_LEN_ERR);
    }
    Ok(())
}

fn scatter_src<E: Env>(env: &mut E, src: &Source<'_>, n: u32, off: u64, data: &[u8]) -> Result<(), u32> {
    let mut r = RecvWr::default();
    let n = n.min(crate::logic::limits::MAX_SGE);
    for i in 0..n {
        r.sges[i as usize] = src.sge(i).ok_or(wc_status::LOC_QP_OP_ERR)?;
    }
    r.num_sge = n;
    scatter(env, &r, off, data)
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

/// The 40-byte GRH of a RoCEv2 packet from `sgid` to `dgid` carrying `roce_len` bytes of UDP
/// payload: an IPv6 header, or for IPv4-mapped GIDs 20 zero bytes then an IPv4 header (the
/// layout libibverbs' `ibv_init_ah_from_wc` expects).
pub fn make_grh(sgid: [u8; 16], dgid: [u8; 16], tclass: u8, hop_limit: u8, flow_label: u32, roce_len: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let udp_len = roce_len + 8;
    match (crate::logic::roce::gid_to_addr(sgid), crate::logic::roce::gid_to_addr(dgid)) {
        (crate::logic::roce::GidAddr::V4(s), crate::logic::roce::GidAddr::V4(d)) => {
            let h = &mut g[20..];
            h[0] = 0x45;
            h[1] = tclass;
            h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            h[6] = 0x40;
            h[8] = hop_limit;
            h[9] = 17;
            h[12..16].copy_from_slice(&s);
            h[16..20].copy_from_slice(&d);
            let mut sum = 0u32;
            for i in 0..10 {
                sum += u32::from(u16::from_be_bytes([h[2 * i], h[2 * i + 1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        _ => {
            let w = 0x6000_0000 | (u32::from(tclass) << 20) | (flow_label & 0xf_ffff);
            g[0..4].copy_from_slice(&w.to_be_bytes());
            g[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            g[6] = 17;
            g[7] = hop_limit;
            g[8..24].copy_from_slice(&sgid);
            g[24..40].copy_from_slice(&dgid);
        }
    }
    g
}
