// SPDX-License-Identifier: GPL-2.0-only
//! Work-request formats as the engine sees them: receive WQEs copied out of a ring, send WQEs
//! in the engine's private slots, their validation, and the gather/scatter between a message
//! and an SGE list.

use super::{
    flush, send_flags, wc_status, wr_opcode, Access, Config, Env, MemError, WrKind, MAX_MSG,
};
use crate::logic::{limits::MAX_SGE, qp_state::QpType};
use crate::uapi::{RecvWqe, SendWqe, Sge};
use core::mem::{offset_of, size_of};

/// A receive WQE in kernel memory.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr {
    /// The WR id.
    pub wr_id: u64,
    /// SGEs in use.
    pub num_sge: u32,
    /// The SGE list.
    pub sges: [Sge; MAX_SGE as usize],
}

impl Default for RecvWr {
    fn default() -> Self {
        RecvWr {
            wr_id: 0,
            num_sge: 0,
            sges: [Sge::default(); MAX_SGE as usize],
        }
    }
}

impl RecvWr {
    pub(super) fn sges(&self) -> &[Sge] {
        self.sges.get(..self.num_sge as usize).unwrap_or(&[])
    }

    /// Total bytes the WQE can receive (saturating).
    pub fn capacity(&self) -> u64 {
        self.sges().iter().map(|s| u64::from(s.length)).sum()
    }

    /// Decodes a receive slot (header then SGEs) copied from a ring, bounded by `max_sge`.
    pub fn decode(slot: &[u8], max_sge: u32) -> Option<RecvWr> {
        let hdr = RecvWqe {
            wr_id: rd_u64(slot, 0)?,
            num_sge: rd_u32(slot, 8)?,
            reserved: 0,
        };
        if hdr.num_sge > max_sge || hdr.num_sge > MAX_SGE {
            return None;
        }
        let mut w = RecvWr {
            wr_id: hdr.wr_id,
            num_sge: hdr.num_sge,
            ..RecvWr::default()
        };
        for i in 0..hdr.num_sge as usize {
            w.sges[i] = read_sge(slot, size_of::<RecvWqe>() + i * size_of::<Sge>())?;
        }
        Some(w)
    }
}

fn rd_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn rd_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

fn read_sge(b: &[u8], off: usize) -> Option<Sge> {
    Some(Sge {
        addr: rd_u64(b, off)?,
        length: rd_u32(b, off + 8)?,
        lkey: rd_u32(b, off + 12)?,
    })
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

fn wr_u32(b: &mut [u8], off: usize, v: u32) {
    if let Some(d) = b.get_mut(off..off + 4) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
}

fn wr_u64(b: &mut [u8], off: usize, v: u64) {
    if let Some(d) = b.get_mut(off..off + 8) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
}

/// Encodes the fixed part of a send slot (the inverse of [`decode_send_wqe`]; used for kernel
/// consumers' WRs, which the kernel writes into its own rings).
pub fn encode_send_wqe(w: &SendWqe) -> [u8; size_of::<SendWqe>()] {
    let mut b = [0u8; size_of::<SendWqe>()];
    wr_u64(&mut b, offset_of!(SendWqe, wr_id), w.wr_id);
    wr_u32(&mut b, offset_of!(SendWqe, opcode), w.opcode);
    wr_u32(&mut b, offset_of!(SendWqe, send_flags), w.send_flags);
    wr_u32(&mut b, offset_of!(SendWqe, imm_data), w.imm_data);
    wr_u32(&mut b, offset_of!(SendWqe, num_sge), w.num_sge);
    wr_u32(&mut b, offset_of!(SendWqe, inline_len), w.inline_len);
    wr_u32(&mut b, offset_of!(SendWqe, ah_num), w.ah_num);
    wr_u64(&mut b, offset_of!(SendWqe, remote_addr), w.remote_addr);
    wr_u32(&mut b, offset_of!(SendWqe, rkey), w.rkey);
    wr_u32(&mut b, offset_of!(SendWqe, remote_qpn), w.remote_qpn);
    wr_u64(&mut b, offset_of!(SendWqe, compare_add), w.compare_add);
    wr_u64(&mut b, offset_of!(SendWqe, swap), w.swap);
    wr_u32(&mut b, offset_of!(SendWqe, remote_qkey), w.remote_qkey);
    b
}

/// Encodes one SGE as slots carry it.
pub fn encode_sge(s: &Sge) -> [u8; size_of::<Sge>()] {
    let mut b = [0u8; size_of::<Sge>()];
    wr_u64(&mut b, 0, s.addr);
    wr_u32(&mut b, 8, s.length);
    wr_u32(&mut b, 12, s.lkey);
    b
}

/// Encodes the fixed part of a receive slot (the inverse of [`RecvWr::decode`]'s header).
pub fn encode_recv_wqe(wr_id: u64, num_sge: u32) -> [u8; size_of::<RecvWqe>()] {
    let mut b = [0u8; size_of::<RecvWqe>()];
    wr_u64(&mut b, 0, wr_id);
    wr_u32(&mut b, 8, num_sge);
    b
}

/// A send WR's data source: inline bytes or an SGE list, both inside the private slot.
pub(super) enum Source<'a> {
    Inline(&'a [u8]),
    Sges(&'a [u8], u32),
}

impl Source<'_> {
    pub(super) fn sge(&self, i: u32) -> Option<Sge> {
        match self {
            Source::Sges(b, n) if i < *n => read_sge(b, i as usize * size_of::<Sge>()),
            _ => None,
        }
    }

    fn nsge(&self) -> u32 {
        match self {
            Source::Sges(_, n) => *n,
            Source::Inline(_) => 0,
        }
    }

    /// Gathers `buf.len()` bytes at message offset `off`.
    pub(super) fn gather<E: Env>(&self, env: &mut E, off: u64, buf: &mut [u8]) -> Result<(), u32> {
        match self {
            Source::Inline(b) => {
                let s = usize::try_from(off)
                    .ok()
                    .and_then(|o| b.get(o..o + buf.len()));
                buf.copy_from_slice(s.ok_or(wc_status::LOC_LEN_ERR)?);
                Ok(())
            }
            Source::Sges(..) => {
                let mut off = off;
                let mut done = 0usize;
                let mut i = 0;
                while done < buf.len() {
                    let s = self.sge(i).ok_or(wc_status::LOC_LEN_ERR)?;
                    i += 1;
                    let slen = u64::from(s.length);
                    if off >= slen {
                        off -= slen;
                        continue;
                    }
                    let n = core::cmp::min(slen - off, (buf.len() - done) as u64) as usize;
                    let chunk = &mut buf[done..done + n];
                    env.mem_read(s.lkey, s.addr.wrapping_add(off), chunk, Access::LocalRead)
                        .map_err(local_status)?;
                    done += n;
                    off = 0;
                }
                Ok(())
            }
        }
    }

    /// Scatters `data` at message offset `off` (READ responses and atomic results).
    pub(super) fn scatter<E: Env>(&self, env: &mut E, off: u64, data: &[u8]) -> Result<(), u32> {
        let mut r = RecvWr::default();
        let n = self.nsge().min(MAX_SGE);
        for i in 0..n {
            r.sges[i as usize] = self.sge(i).ok_or(wc_status::LOC_QP_OP_ERR)?;
        }
        r.num_sge = n;
        scatter(env, &r, off, data)
    }
}

/// The data source of the WQE in `slot`.
pub(super) fn source<'a>(slot: &'a [u8], w: &SendWqe) -> Option<Source<'a>> {
    let body = slot.get(size_of::<SendWqe>()..)?;
    if w.send_flags & send_flags::INLINE != 0 {
        Some(Source::Inline(body.get(..w.inline_len as usize)?))
    } else {
        body.get(..w.num_sge as usize * size_of::<Sge>())?;
        Some(Source::Sges(body, w.num_sge))
    }
}

/// The kind a WQE's opcode names, for its completion (valid or not).
pub(super) fn kind_of_opcode(opcode: u32) -> WrKind {
    match opcode {
        wr_opcode::RDMA_WRITE | wr_opcode::RDMA_WRITE_WITH_IMM => WrKind::Write,
        wr_opcode::RDMA_READ => WrKind::Read,
        wr_opcode::ATOMIC_CMP_AND_SWP => WrKind::CmpSwap,
        wr_opcode::ATOMIC_FETCH_AND_ADD => WrKind::FetchAdd,
        wr_opcode::REG_MR => WrKind::RegMr,
        wr_opcode::LOCAL_INV => WrKind::LocalInv,
        wr_opcode::BIND_MW => WrKind::BindMw,
        wr_opcode::ATOMIC_WRITE => WrKind::AtomicWrite,
        wr_opcode::FLUSH => WrKind::Flush,
        _ => WrKind::Send,
    }
}

/// What a validated send WQE asks for.
pub(super) struct Checked {
    pub(super) kind: WrKind,
    pub(super) len: u32,
    pub(super) imm: bool,
    pub(super) inv: bool,
    pub(super) signaled: bool,
    pub(super) fence: bool,
}

/// Validates a send WQE when it is pushed; the error is the completion status.
pub(super) fn check_send_wqe(cfg: &Config, slot: &[u8]) -> Result<Checked, u32> {
    let w = decode_send_wqe(slot).ok_or(wc_status::LOC_QP_OP_ERR)?;
    let kind = match (w.opcode, cfg.qp_type) {
        (wr_opcode::SEND | wr_opcode::SEND_WITH_IMM, _) => WrKind::Send,
        (wr_opcode::RDMA_WRITE | wr_opcode::RDMA_WRITE_WITH_IMM, QpType::Rc | QpType::Uc) => {
            WrKind::Write
        }
        (wr_opcode::RDMA_READ, QpType::Rc) => WrKind::Read,
        (wr_opcode::ATOMIC_CMP_AND_SWP, QpType::Rc) => WrKind::CmpSwap,
        (wr_opcode::ATOMIC_FETCH_AND_ADD, QpType::Rc) => WrKind::FetchAdd,
        (wr_opcode::SEND_WITH_INV, QpType::Rc) => WrKind::Send,
        (wr_opcode::REG_MR, _) if cfg.local_ops => WrKind::RegMr,
        // A user ring may carry LOCAL_INV on RC (as rdma_rxe takes it); a kernel consumer's on
        // any QP type.
        (wr_opcode::LOCAL_INV, QpType::Rc) => WrKind::LocalInv,
        (wr_opcode::LOCAL_INV, _) if cfg.local_ops => WrKind::LocalInv,
        // Memory windows are a user's (ib_core has no kernel bind WR): RC and UC, as rdma_rxe.
        (wr_opcode::BIND_MW, QpType::Rc | QpType::Uc) if !cfg.local_ops => WrKind::BindMw,
        (wr_opcode::ATOMIC_WRITE, QpType::Rc) => WrKind::AtomicWrite,
        (wr_opcode::FLUSH, QpType::Rc) => WrKind::Flush,
        _ => return Err(wc_status::LOC_QP_OP_ERR),
    };
    let signaled = cfg.sq_sig_all || w.send_flags & send_flags::SIGNALED != 0;
    let fence = w.send_flags & send_flags::FENCE != 0;
    if matches!(kind, WrKind::AtomicWrite | WrKind::Flush) {
        // No data source: the 8 bytes of an ATOMIC WRITE travel in the WQE, and a FLUSH has no
        // payload (oA19-2).
        if w.num_sge != 0 || w.send_flags & send_flags::INLINE != 0 {
            return Err(wc_status::LOC_QP_OP_ERR);
        }
        let len = if kind == WrKind::AtomicWrite {
            // IBA A19.4.2: an 8-byte aligned target.
            if w.remote_addr % 8 != 0 {
                return Err(wc_status::LOC_LEN_ERR);
            }
            8
        } else {
            let ty = w.imm_data & flush::TYPE_MASK;
            let level = w.imm_data >> flush::LEVEL_SHIFT;
            if ty == 0
                || ty & !(flush::GLOBAL | flush::PERSISTENT) != 0
                || level > flush::MR
                || w.imm_data & !(flush::TYPE_MASK | flush::LEVEL_MASK << flush::LEVEL_SHIFT) != 0
            {
                return Err(wc_status::LOC_QP_OP_ERR);
            }
            u32::try_from(w.compare_add).map_err(|_| wc_status::LOC_LEN_ERR)?
        };
        return Ok(Checked {
            kind,
            len,
            imm: false,
            inv: false,
            signaled,
            fence,
        });
    }
    if kind.is_local() {
        // No data: the fields name the MR or window (see `wr_opcode::REG_MR`, `BIND_MW`).
        return Ok(Checked {
            kind,
            len: 0,
            imm: false,
            inv: false,
            signaled,
            fence,
        });
    }
    let inv = w.opcode == wr_opcode::SEND_WITH_INV;
    let imm = matches!(
        w.opcode,
        wr_opcode::SEND_WITH_IMM | wr_opcode::RDMA_WRITE_WITH_IMM
    );
    let inline = w.send_flags & send_flags::INLINE != 0;
    if inline && (w.inline_len > cfg.max_inline || kind.is_rd_atomic()) {
        return Err(wc_status::LOC_QP_OP_ERR);
    }
    if !inline && w.num_sge > cfg.max_send_sge {
        return Err(wc_status::LOC_QP_OP_ERR);
    }
    let src = source(slot, &w).ok_or(wc_status::LOC_QP_OP_ERR)?;
    let len: u64 = match &src {
        Source::Inline(b) => b.len() as u64,
        Source::Sges(..) => (0..w.num_sge)
            .filter_map(|i| src.sge(i))
            .map(|s| u64::from(s.length))
            .sum(),
    };
    if len > MAX_MSG {
        return Err(wc_status::LOC_LEN_ERR);
    }
    let atomic = matches!(kind, WrKind::CmpSwap | WrKind::FetchAdd);
    if atomic && (len < 8 || w.remote_addr % 8 != 0) {
        return Err(wc_status::LOC_LEN_ERR);
    }
    if cfg.qp_type == QpType::Ud && len > u64::from(cfg.mtu) {
        return Err(wc_status::LOC_LEN_ERR);
    }
    Ok(Checked {
        kind,
        len: if atomic { 8 } else { len as u32 },
        imm,
        inv,
        signaled,
        fence,
    })
}

/// Not a completion status: a gather or scatter met a page of an on-demand-paging MR that is
/// not present ([`MemError::NotPresent`]). Nothing that reaches a CQE carries it: each caller
/// answers it (RNR NAK, a held send queue, a dropped response or packet).
pub(super) const NOT_PRESENT: u32 = u32::MAX;

/// The status a local SGE's memory error gives: [`NOT_PRESENT`] for a page to be faulted in,
/// otherwise a local protection error.
pub(super) fn local_status(e: MemError) -> u32 {
    if e == MemError::NotPresent {
        NOT_PRESENT
    } else {
        wc_status::LOC_PROT_ERR
    }
}

/// Scatters `data` at message offset `off` into a receive WQE's SGEs.
pub(super) fn scatter<E: Env>(env: &mut E, r: &RecvWr, off: u64, data: &[u8]) -> Result<(), u32> {
    if data.is_empty() {
        return Ok(());
    }
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
        env.mem_write(
            s.lkey,
            s.addr.wrapping_add(off),
            &data[done..done + n],
            Access::LocalWrite,
        )
        .map_err(local_status)?;
        done += n;
        off = 0;
    }
    if done < data.len() {
        return Err(wc_status::LOC_LEN_ERR);
    }
    Ok(())
}
