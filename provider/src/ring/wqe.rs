//! Pure rules: which send opcodes and flags a QP type takes, and the CQE -> `ibv_wc`
//! translation. No memory access beyond the values passed in.

use core::ffi::c_int;

use rrxe_uapi::{bind_flags, wr_opcode, Cqe, SendWqe};

use super::RingError;
use crate::abi::{
    ibv_wc, ibv_wc__bindgen_ty_1, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_SEND_FENCE,
    IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_WRITE, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV,
    IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV,
};

/// `IBV_WR_FLUSH` (`IB_UVERBS_WR_FLUSH`; rdma-core 45's value): rdma-core 44 has neither the
/// opcode nor `ibv_wr_flush`, so rrxe takes RDMA FLUSH through `ibv_post_send`, with its
/// fields in `wr.atomic`: `remote_addr`, `rkey`, the length in `compare_add`, and in
/// `invalidate_rkey` (the `imm_data` union) the placement type (`IB_FLUSH_GLOBAL` 1,
/// `IB_FLUSH_PERSISTENT` 2, or both) in bits 3-0 and the selectivity level (`IB_FLUSH_RANGE`
/// 0, `IB_FLUSH_MR` 1) in bits 5-4, as the FETH carries them. No SGE, not inline.
pub const IBV_WR_FLUSH: u32 = 14;

/// The `ibv_wr_opcode`s a send WQE may carry (on an RC QP; see [`opcode_allowed`]). The rest
/// (`TSO`, `DRIVER1`, unknown values) are refused with `EINVAL`.
pub const SUPPORTED_SEND_OPCODES: [u32; 12] = [
    IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM,
    IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM,
    IBV_WR_RDMA_READ,
    IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_LOCAL_INV,
    IBV_WR_BIND_MW,
    IBV_WR_SEND_WITH_INV,
    IBV_WR_FLUSH,
    IBV_WR_ATOMIC_WRITE,
];

/// The `IBV_SEND_*` flags a send WR may carry; any other bit (`IP_CSUM`, which the device
/// does not offer, or an unknown one) is `EINVAL`.
pub const SUPPORTED_SEND_FLAGS: u32 =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

/// Whether a QP of `qp_type` may post `opcode`: UD only sends, UC no RDMA READ, no atomics,
/// no invalidation and no IBA 1.5 placement (but memory-window binds, as rdma_rxe), RC
/// everything in [`SUPPORTED_SEND_OPCODES`]; other QP types nothing.
pub fn opcode_allowed(qp_type: u32, opcode: u32) -> bool {
    match qp_type {
        IBV_QPT_RC => SUPPORTED_SEND_OPCODES.contains(&opcode),
        IBV_QPT_UC => matches!(
            opcode,
            IBV_WR_SEND
                | IBV_WR_SEND_WITH_IMM
                | IBV_WR_RDMA_WRITE
                | IBV_WR_RDMA_WRITE_WITH_IMM
                | IBV_WR_BIND_MW
        ),
        IBV_QPT_UD => matches!(opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM),
        _ => false,
    }
}

/// What part of `ibv_send_wr::wr` an opcode uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Remote {
    /// `wr.ud` (UD sends).
    Ud,
    /// Nothing (RC/UC sends).
    None,
    /// `wr.rdma` (RDMA WRITE/READ).
    Rdma,
    /// `wr.atomic`.
    Atomic,
    /// The key to invalidate in `invalidate_rkey` (LOCAL_INV: the SGE list is checked as for
    /// any WR but not used, as rdma_rxe ignores it).
    LocalInv,
    /// `wr.rdma`, and the 8 bytes to place as the WR's inline data (ATOMIC WRITE, as rdma_rxe
    /// takes them from its inline area).
    AtomicWrite,
    /// `wr.atomic`: `remote_addr`, `rkey`, the length in `compare_add`, and the FETH (placement
    /// type, selectivity level << 4) in `invalidate_rkey` (see [`IBV_WR_FLUSH`]).
    Flush,
    /// `bind_mw`: the window, its new rkey and the bind info (see [`bind_wqe`]; the SGE list
    /// is checked as for any WR but not used).
    BindMw,
}

/// The checks of a send WR that need only its scalar fields. `num_sge` is checked against
/// `max_sge` unless the WR is inline (the SGEs of an inline WR only gather the payload, which
/// [`check_inline_len`] bounds). Returns which remote fields the WQE takes.
pub(crate) fn check_send_scalars(
    qp_type: u32,
    max_sge: u32,
    opcode: u32,
    send_flags: u32,
    num_sge: c_int,
) -> Result<Remote, RingError> {
    if !opcode_allowed(qp_type, opcode) {
        return Err(RingError::Invalid("opcode not supported on this QP type"));
    }
    if send_flags & !SUPPORTED_SEND_FLAGS != 0 {
        return Err(RingError::Invalid("unsupported send flag"));
    }
    let Ok(n) = u32::try_from(num_sge) else {
        return Err(RingError::Invalid("negative num_sge"));
    };
    let inline = send_flags & IBV_SEND_INLINE != 0;
    let remote = match opcode {
        _ if qp_type == IBV_QPT_UD => Remote::Ud,
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV => Remote::None,
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => Remote::Rdma,
        IBV_WR_RDMA_READ => Remote::Rdma,
        IBV_WR_LOCAL_INV => Remote::LocalInv,
        IBV_WR_BIND_MW => Remote::BindMw,
        IBV_WR_ATOMIC_WRITE => Remote::AtomicWrite,
        IBV_WR_FLUSH => Remote::Flush,
        _ => Remote::Atomic,
    };
    if inline && (opcode == IBV_WR_RDMA_READ || remote == Remote::Atomic) {
        return Err(RingError::Invalid("inline RDMA READ or atomic"));
    }
    match remote {
        // The 8 bytes are the WR's inline data (rdma_rxe's `atomic_wr` is its inline area).
        Remote::AtomicWrite if !inline => {
            return Err(RingError::Invalid(
                "ATOMIC WRITE without its 8 bytes inline",
            ));
        }
        Remote::AtomicWrite => return Ok(remote),
        Remote::Flush if inline || n != 0 => {
            return Err(RingError::Invalid("FLUSH with data"));
        }
        _ => {}
    }
    if !inline && n > max_sge {
        return Err(RingError::Invalid("num_sge above the QP's max_send_sge"));
    }
    Ok(remote)
}

/// What a memory-window bind asks, as [`bind_wqe`] encodes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bind {
    /// The window's rkey as the process knows it (`ibv_mw::rkey`).
    pub mw_rkey: u32,
    /// The new rkey.
    pub new_rkey: u32,
    /// The MR's lkey (0 without an MR).
    pub mr_lkey: u32,
    /// Start address.
    pub addr: u64,
    /// Length (0: unbind a type-1 window).
    pub length: u64,
    /// `mw_access_flags`.
    pub access: u32,
    /// Posted by `ibv_bind_mw` (type 1) rather than as a work request (type 2).
    pub verb: bool,
}

/// The WQE header of a bind (`rrxe_uapi::wr_opcode::BIND_MW` documents the fields; the kernel
/// checks every rule and completes a bad bind with `IBV_WC_MW_BIND_ERR`).
pub(crate) fn bind_wqe(wr_id: u64, send_flags: u32, b: &Bind) -> SendWqe {
    SendWqe {
        wr_id,
        opcode: wr_opcode::BIND_MW,
        // A bind has no data.
        send_flags: send_flags & !IBV_SEND_INLINE,
        imm_data: b.mw_rkey,
        remote_addr: b.addr,
        rkey: b.new_rkey,
        compare_add: b.length,
        remote_qkey: b.mr_lkey,
        swap: u64::from(b.access),
        remote_qpn: if b.verb { bind_flags::VERB } else { 0 },
        ..SendWqe::default()
    }
}

/// An inline payload of `total` bytes must fit `max_inline`.
pub(crate) fn check_inline_len(total: u64, max_inline: u32) -> Result<u32, RingError> {
    match u32::try_from(total) {
        Ok(t) if t <= max_inline => Ok(t),
        _ => Err(RingError::Invalid(
            "inline data above the QP's max_inline_data",
        )),
    }
}

/// An atomic needs an 8-byte aligned remote address and room for the 8-byte original value
/// (as rdma-core's rxe checks).
pub(crate) fn check_atomic(remote_addr: u64, total_len: u64) -> Result<(), RingError> {
    if !remote_addr.is_multiple_of(8) || total_len < 8 {
        return Err(RingError::Invalid(
            "atomic: unaligned remote address or SGE under 8 bytes",
        ));
    }
    Ok(())
}

/// Whether `opcode` carries immediate data.
pub(crate) fn has_imm(opcode: u32) -> bool {
    matches!(opcode, IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM)
}

/// Whether `opcode` names a key to invalidate (`invalidate_rkey`, the union member of
/// `imm_data`).
pub(crate) fn has_inv(opcode: u32) -> bool {
    matches!(opcode, IBV_WR_SEND_WITH_INV | IBV_WR_LOCAL_INV)
}

/// An ATOMIC WRITE needs an 8-byte aligned remote address and exactly 8 bytes of data.
pub(crate) fn check_atomic_write(remote_addr: u64, total_len: u64) -> Result<(), RingError> {
    if !remote_addr.is_multiple_of(8) || total_len != 8 {
        return Err(RingError::Invalid(
            "ATOMIC WRITE: unaligned remote address or data other than 8 bytes",
        ));
    }
    Ok(())
}

/// A CQE as libibverbs' `struct ibv_wc`: a field-for-field copy (the kernel already writes
/// `ibv_wc_status`, `ibv_wc_opcode` and `IBV_WC_*` flag values; `imm_data` stays in network
/// order, and is the invalidated rkey with `IBV_WC_WITH_INV`, the same union member).
pub fn cqe_to_wc(c: &Cqe) -> ibv_wc {
    ibv_wc {
        wr_id: c.wr_id,
        status: c.status,
        opcode: c.opcode,
        vendor_err: c.vendor_err,
        byte_len: c.byte_len,
        __bindgen_anon_1: ibv_wc__bindgen_ty_1 {
            imm_data: c.imm_data,
        },
        qp_num: c.qp_num,
        src_qp: c.src_qp,
        wc_flags: c.wc_flags,
        pkey_index: c.pkey_index,
        slid: c.slid,
        sl: c.sl,
        dlid_path_bits: c.dlid_path_bits,
    }
}
