// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! rrxe user ABI: everything the kernel module and the userspace provider exchange.
//!
//! Written once, `#[repr(C)]`, `no_std`, with no dependency; compiled into `rrxe.ko` (by path)
//! and into `librrxe-rdmav34.so` (as the `rrxe-uapi` crate). Every struct's size and field
//! offsets are pinned by the compile-time assertions at the end of this file, so a change that
//! moves a field breaks both builds instead of silently breaking the ABI.
//!
//! Versioning: [`UABI_VERSION`] is bumped on every incompatible change. The kernel publishes it
//! in the per-device sysfs attribute [`SYSFS_UABI_ATTR`] and in [`AllocUcontextResp`]; the
//! provider refuses to open a device whose version differs from the one it was built with.

/// `ib_device_ops.uverbs_abi_ver`: the uverbs command ABI the provider's `match_*_abi_version`
/// range must contain.
pub const UVERBS_ABI_VERSION: u32 = 1;

/// Version of the driver-private udata ABI defined in this file. 2: the context handshake
/// carries [`LAYOUT_FINGERPRINT`]; kernel-consumer opcodes and `WITH_INV` completions.
pub const UABI_VERSION: u32 = 2;

/// Magic in [`AllocUcontextResp::magic`]: ASCII "RRXE".
pub const UABI_MAGIC: u32 = 0x5252_5845;

/// Read-only sysfs attribute under `/sys/class/infiniband/<ibdev>/` that holds
/// [`UABI_VERSION`] as decimal text. Its presence identifies an rrxe device whatever name the
/// administrator gave it; the provider's `match_device` reads it.
pub const SYSFS_UABI_ATTR: &str = "rrxe_uabi";

/// Vendor id reported by `query_device` (none assigned; 0 like rdma_rxe would be misleading).
pub const VENDOR_ID: u32 = 0x0052_5258;
/// Vendor part id reported by `query_device`.
pub const VENDOR_PART_ID: u32 = 0x0001;
/// Hardware version reported by `query_device`: the uABI version.
pub const HW_VER: u32 = UABI_VERSION;

/// Driver-private input of `alloc_ucontext` (the provider's `ibv_get_context` command tail).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocUcontextCmd {
    /// The provider's [`UABI_VERSION`]. The kernel refuses a context with `EPROTO` when it
    /// differs from its own.
    pub uabi_version: u32,
    /// The provider's [`LAYOUT_FINGERPRINT`]. The kernel refuses a context with `EPROTO` when
    /// it differs from its own (the two were built from different ring or command layouts).
    pub layout: u32,
}

/// Driver-private output of `alloc_ucontext`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocUcontextResp {
    /// Always [`UABI_MAGIC`].
    pub magic: u32,
    /// The kernel's [`UABI_VERSION`].
    pub uabi_version: u32,
    /// Largest inline payload a send WQE may carry (`max_inline_data`).
    pub max_inline_data: u32,
    /// The kernel's [`LAYOUT_FINGERPRINT`]; the provider refuses the context when it differs
    /// from its own.
    pub layout: u32,
}

/// Cache line size that separates the ring indices (x86-64).
pub const CACHELINE: usize = 64;

/// The header at offset 0 of every shared ring mapping (CQ, and later SQ, RQ and SRQ).
///
/// Indices are free-running `u32` counters (masked with `slots - 1` on use), so full and empty
/// are told apart without a spare slot. Each index lives on its own cache line: the producer
/// side writes only `producer`, the consumer side only `consumer`, each publishing with a
/// release store and reading the other's with an acquire load. For a CQ the kernel produces
/// and the provider consumes.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RingHeader {
    /// Next slot the producer will fill.
    pub producer: u32,
    _pad_producer: [u8; CACHELINE - 4],
    /// Next slot the consumer will read.
    pub consumer: u32,
    _pad_consumer: [u8; CACHELINE - 4],
    /// log2 of the number of slots.
    pub log2_slots: u32,
    /// Bytes per slot.
    pub slot_size: u32,
    /// Send rings: [`SQ_FLAG_KERNEL_BUSY`] while the kernel is draining (written by the kernel
    /// only). The doorbell protocol: the provider writes its slots, release-stores `producer`,
    /// issues a full fence, then reads `flags` and rings only if BUSY is clear. The kernel sets
    /// BUSY before a drain pass; at the end it clears BUSY, issues a full fence and re-reads
    /// `producer`, draining again if it moved; a doorbell that arrives during a pass causes one
    /// more pass.
    pub flags: u32,
    /// Reserved, zero.
    pub reserved: [u32; 13],
}

/// Bytes of a [`RingHeader`]; slots start right after it.
pub const RING_HEADER_SIZE: usize = 3 * CACHELINE;

/// One completion, as the kernel writes it into a CQ ring. `wc_flags` carries libibverbs'
/// `IBV_WC_*` values (the kernel's `IB_WC_*` bits 2 and 3 are swapped relative to them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    /// Vendor error (0).
    pub vendor_err: u32,
    /// Bytes received or transferred.
    pub byte_len: u32,
    /// Immediate data (network order) or invalidated rkey.
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP (UD).
    pub src_qp: u32,
    /// `IBV_WC_*` flags.
    pub wc_flags: u32,
    /// P_Key index (UD).
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits (0 on RoCE).
    pub dlid_path_bits: u8,
    /// Reserved, zero.
    pub reserved: [u8; 18],
}

/// `enum ibv_wc_status` values a [`Cqe::status`] carries (libibverbs' numbering; the
/// provider's tests check each against libibverbs' headers).
pub mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    /// A memory-window bind was refused (a rule of [`super::wr_opcode::BIND_MW`] broken).
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const GENERAL_ERR: u32 = 21;
}

/// `enum ibv_wc_opcode` values.
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    /// Memory-window bind (`IBV_WC_BIND_MW`).
    pub const BIND_MW: u32 = 5;
    /// Local invalidation.
    pub const LOCAL_INV: u32 = 6;
    /// RDMA FLUSH (`IBV_WC_FLUSH`, `IB_UVERBS_WC_FLUSH`).
    pub const FLUSH: u32 = 8;
    /// ATOMIC WRITE (`IBV_WC_ATOMIC_WRITE`).
    pub const ATOMIC_WRITE: u32 = 9;
    /// Fast registration (kernel consumers; ib_core's `IB_WC_REG_MR`, which follows
    /// `IB_WC_ATOMIC_WRITE`; no libibverbs value).
    pub const REG_MR: u32 = 10;
    pub const RECV: u32 = 128;
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
}

/// `IBV_WC_*` completion flags (libibverbs values, not the kernel's `IB_WC_*`).
pub mod wc_flags {
    pub const GRH: u32 = 1 << 0;
    pub const WITH_IMM: u32 = 1 << 1;
    /// The sender asked us to invalidate the rkey in `imm_data` (SEND with invalidate), and we
    /// did.
    pub const WITH_INV: u32 = 1 << 3;
}

/// `enum ibv_wr_opcode` values.
pub mod wr_opcode {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// Local invalidation of the key in `imm_data`: an MR of the QP's PD that may be
    /// invalidated (a fast-registration MR, as rdma_rxe allows; an MR registered through
    /// `reg_mr` may not be, and the WR completes with LOC_QP_OP_ERR).
    pub const LOCAL_INV: u32 = 7;
    /// Memory-window bind (`IBV_WR_BIND_MW`, RC and UC), executed in SQ order. The fields:
    /// - `imm_data`: the window, by its rkey as the process knows it (only the index part,
    ///   `imm_data >> 8`, is used: the bind names the `ibv_mw` object, whose rkey in user
    ///   memory may be stale after a type-2 window was invalidated and bound again);
    /// - `rkey`: the window's new rkey (same index; its key byte becomes the window's);
    /// - `remote_addr`, `compare_add`: the window's start address and length (length 0 unbinds
    ///   a type-1 window);
    /// - `remote_qkey`: the lkey of the MR the window is bound to (unused for length 0);
    /// - `swap`: the window's access flags (`IBV_ACCESS_*`; the upper 32 bits must be 0);
    /// - `remote_qpn`: [`super::bind_flags`] (which verb posted it). No SGE, not inline.
    pub const BIND_MW: u32 = 8;
    /// SEND asking the responder to invalidate the rkey in `imm_data` (RC).
    pub const SEND_WITH_INV: u32 = 9;
    /// RDMA FLUSH (IBTA 1.5, RC): `remote_addr`, `rkey`, length in `compare_add`, and the
    /// FETH in `imm_data` (placement type in bits 3-0, selectivity level in bits 5-4).
    pub const FLUSH: u32 = 14;
    /// ATOMIC WRITE (IBTA 1.5, RC): the 8 bytes in `swap` (as they lie in memory) are placed
    /// at `remote_addr` (8-byte aligned) under `rkey`. No SGE.
    pub const ATOMIC_WRITE: u32 = 15;
    /// Fast registration (ib_core's `IB_WR_REG_MR`; kernel consumers only, refused in a user
    /// ring): the MR of key `rkey` (its index) becomes valid under that key for
    /// `[remote_addr, remote_addr + compare_add)` with access `swap`, over the pages mapped
    /// into it by `map_mr_sg`.
    pub const REG_MR: u32 = 0x20;
}

/// The `remote_qpn` field of a [`wr_opcode::BIND_MW`] WQE.
pub mod bind_flags {
    /// Posted by the Bind Memory Window verb (`ibv_bind_mw`, type-1 windows only); without it
    /// the WQE is a bind work request (`IBV_WR_BIND_MW`, `ibv_wr_bind_mw`: type-2 windows only).
    pub const VERB: u32 = 1;
}

/// `IBV_SEND_*` flags.
pub mod send_flags {
    pub const FENCE: u32 = 1 << 0;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
}

/// Bytes per CQ slot.
pub const CQE_SIZE: usize = 64;

/// Slots of a CQ ring that must hold `cqe` completions: the next power of two (0 when that
/// overflows; callers refuse 0).
pub const fn cq_ring_slots(cqe: u32) -> u32 {
    if cqe <= 1 {
        1
    } else {
        match cqe.checked_next_power_of_two() {
            Some(n) => n,
            None => 0,
        }
    }
}

/// Bytes of a ring mapping with `slots` slots of `slot_size` bytes, rounded up to whole pages.
pub const fn ring_bytes(slots: u32, slot_size: usize, page_size: usize) -> usize {
    let raw = RING_HEADER_SIZE + slots as usize * slot_size;
    raw.div_ceil(page_size) * page_size
}

/// A scatter/gather element, as in `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address in the MR.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// The MR's lkey.
    pub lkey: u32,
}

/// The fixed part of a send WQE. A slot holds this header, then either `num_sge` [`Sge`]s or
/// `inline_len` bytes of inline data. The kernel copies a whole slot into private memory
/// before looking at any field, and bounds every count by the QP's caps.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendWqe {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    /// `IBV_SEND_*` flags.
    pub send_flags: u32,
    /// Immediate data (network order) or the rkey to invalidate.
    pub imm_data: u32,
    /// Scatter/gather entries after the header (0 with `IBV_SEND_INLINE`).
    pub num_sge: u32,
    /// Inline payload bytes after the header (only with `IBV_SEND_INLINE`).
    pub inline_len: u32,
    /// UD: the address handle number from [`CreateAhResp`].
    pub ah_num: u32,
    /// RDMA and atomic: the remote virtual address.
    pub remote_addr: u64,
    /// RDMA and atomic: the remote key.
    pub rkey: u32,
    /// UD: the destination QP number.
    pub remote_qpn: u32,
    /// Atomic: compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand.
    pub compare_add: u64,
    /// Atomic: swap operand.
    pub swap: u64,
    /// UD: the destination Q_Key.
    pub remote_qkey: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// The fixed part of a receive WQE (RQ and SRQ): `num_sge` [`Sge`]s follow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWqe {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// Scatter/gather entries after the header.
    pub num_sge: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// Bytes of a send slot for the given caps: header plus the larger of the SGE list and the
/// inline payload, rounded up to a power of two (at least 64).
pub const fn send_slot_size(max_sge: u32, max_inline: u32) -> usize {
    let sges = max_sge as usize * core::mem::size_of::<Sge>();
    let body = if sges > max_inline as usize {
        sges
    } else {
        max_inline as usize
    };
    let n = core::mem::size_of::<SendWqe>() + body;
    if n <= 64 {
        64
    } else {
        n.next_power_of_two()
    }
}

/// Bytes of a receive slot for `max_sge` entries, rounded up to a power of two (at least 32).
pub const fn recv_slot_size(max_sge: u32) -> usize {
    let n = core::mem::size_of::<RecvWqe>() + max_sge as usize * core::mem::size_of::<Sge>();
    if n <= 32 {
        32
    } else {
        n.next_power_of_two()
    }
}

/// Where the provider finds one ring: `mmap(cmd_fd, offset = mmap_key)` of `bytes` bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingInfo {
    /// The mmap offset (an `rdma_user_mmap_entry` key).
    pub mmap_key: u64,
    /// Bytes to map (header and slots, whole pages).
    pub bytes: u64,
    /// Slots (a power of two).
    pub slots: u32,
    /// Bytes per slot.
    pub slot_size: u32,
}

/// Driver-private response of `create_cq` and `resize_cq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateCqResp {
    /// The completion ring (the kernel produces, the provider consumes).
    pub ring: RingInfo,
}

/// Driver-private response of `create_qp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQpResp {
    /// The send ring (the provider produces, the kernel consumes).
    pub sq: RingInfo,
    /// The receive ring; all zero when the QP uses an SRQ.
    pub rq: RingInfo,
}

/// Driver-private response of `create_srq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateSrqResp {
    /// The receive ring.
    pub rq: RingInfo,
}

/// Driver-private response of `create_ah`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateAhResp {
    /// The number a UD send WQE names the AH by ([`SendWqe::ah_num`]).
    pub ah_num: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// Set by the kernel in [`RingHeader::flags`] of a send ring while it is draining the ring: the
/// provider then skips the doorbell (at most one doorbell per `post_send`, none when the kernel
/// is already busy).
pub const SQ_FLAG_KERNEL_BUSY: u32 = 1;

/// A fingerprint of everything the kernel and the provider must agree on beyond the version
/// number: the size and every field offset of each struct in this file, the ring geometry
/// constants and the numbering of opcodes, statuses and flags (FNV-1a over them, at compile
/// time). Exchanged in the context handshake ([`AllocUcontextCmd::layout`],
/// [`AllocUcontextResp::layout`]): a module and a provider built from different layouts refuse
/// each other with one clear message instead of misreading the rings.
pub const LAYOUT_FINGERPRINT: u32 = layout_fingerprint();

const fn layout_fingerprint() -> u32 {
    use core::mem::{offset_of, size_of};
    let items: [usize; 66] = [
        size_of::<AllocUcontextCmd>(),
        offset_of!(AllocUcontextCmd, layout),
        size_of::<AllocUcontextResp>(),
        offset_of!(AllocUcontextResp, uabi_version),
        offset_of!(AllocUcontextResp, max_inline_data),
        offset_of!(AllocUcontextResp, layout),
        CACHELINE,
        RING_HEADER_SIZE,
        offset_of!(RingHeader, producer),
        offset_of!(RingHeader, consumer),
        offset_of!(RingHeader, log2_slots),
        offset_of!(RingHeader, slot_size),
        offset_of!(RingHeader, flags),
        SQ_FLAG_KERNEL_BUSY as usize,
        CQE_SIZE,
        size_of::<Cqe>(),
        offset_of!(Cqe, status),
        offset_of!(Cqe, opcode),
        offset_of!(Cqe, vendor_err),
        offset_of!(Cqe, byte_len),
        offset_of!(Cqe, imm_data),
        offset_of!(Cqe, qp_num),
        offset_of!(Cqe, src_qp),
        offset_of!(Cqe, wc_flags),
        offset_of!(Cqe, pkey_index),
        offset_of!(Cqe, slid),
        offset_of!(Cqe, sl),
        offset_of!(Cqe, dlid_path_bits),
        size_of::<Sge>(),
        offset_of!(Sge, length),
        offset_of!(Sge, lkey),
        size_of::<SendWqe>(),
        offset_of!(SendWqe, opcode),
        offset_of!(SendWqe, send_flags),
        offset_of!(SendWqe, imm_data),
        offset_of!(SendWqe, num_sge),
        offset_of!(SendWqe, inline_len),
        offset_of!(SendWqe, ah_num),
        offset_of!(SendWqe, remote_addr),
        offset_of!(SendWqe, rkey),
        offset_of!(SendWqe, remote_qpn),
        offset_of!(SendWqe, compare_add),
        offset_of!(SendWqe, swap),
        offset_of!(SendWqe, remote_qkey),
        size_of::<RecvWqe>(),
        offset_of!(RecvWqe, num_sge),
        size_of::<RingInfo>(),
        offset_of!(RingInfo, bytes),
        offset_of!(RingInfo, slots),
        offset_of!(RingInfo, slot_size),
        size_of::<CreateCqResp>(),
        size_of::<CreateQpResp>(),
        offset_of!(CreateQpResp, rq),
        size_of::<CreateSrqResp>(),
        size_of::<CreateAhResp>(),
        send_slot_size(1, 0),
        recv_slot_size(1),
        wr_opcode::SEND_WITH_IMM as usize,
        wr_opcode::REG_MR as usize,
        wc_opcode::RECV as usize,
        wc_opcode::REG_MR as usize,
        wc_status::GENERAL_ERR as usize,
        wc_flags::WITH_INV as usize,
        send_flags::INLINE as usize,
        cq_ring_slots(3) as usize,
        ring_bytes(1, 64, 4096),
    ];
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < items.len() {
        let mut v = items[i] as u64;
        let mut b = 0;
        while b < 8 {
            h ^= (v & 0xff) as u32;
            h = h.wrapping_mul(0x0100_0193);
            v >>= 8;
            b += 1;
        }
        i += 1;
    }
    h
}

// Layout pins: these are part of the ABI.
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<AllocUcontextCmd>() == 8);
    assert!(align_of::<AllocUcontextCmd>() == 4);
    assert!(offset_of!(AllocUcontextCmd, uabi_version) == 0);
    assert!(offset_of!(AllocUcontextCmd, layout) == 4);
    assert!(size_of::<AllocUcontextResp>() == 16);
    assert!(align_of::<AllocUcontextResp>() == 4);
    assert!(offset_of!(AllocUcontextResp, magic) == 0);
    assert!(offset_of!(AllocUcontextResp, uabi_version) == 4);
    assert!(offset_of!(AllocUcontextResp, max_inline_data) == 8);
    assert!(offset_of!(AllocUcontextResp, layout) == 12);
    assert!(size_of::<RingHeader>() == RING_HEADER_SIZE);
    assert!(offset_of!(RingHeader, producer) == 0);
    assert!(offset_of!(RingHeader, consumer) == CACHELINE);
    assert!(offset_of!(RingHeader, log2_slots) == 2 * CACHELINE);
    assert!(offset_of!(RingHeader, slot_size) == 2 * CACHELINE + 4);
    assert!(offset_of!(RingHeader, flags) == 2 * CACHELINE + 8);
    assert!(size_of::<Cqe>() == CQE_SIZE);
    assert!(offset_of!(Cqe, wr_id) == 0);
    assert!(offset_of!(Cqe, status) == 8);
    assert!(offset_of!(Cqe, byte_len) == 20);
    assert!(offset_of!(Cqe, wc_flags) == 36);
    assert!(offset_of!(Cqe, pkey_index) == 40);
    assert!(offset_of!(Cqe, sl) == 44);
    assert!(size_of::<Sge>() == 16);
    assert!(size_of::<SendWqe>() == 72);
    assert!(offset_of!(SendWqe, remote_addr) == 32);
    assert!(offset_of!(SendWqe, compare_add) == 48);
    assert!(offset_of!(SendWqe, remote_qkey) == 64);
    assert!(size_of::<RecvWqe>() == 16);
    assert!(size_of::<RingInfo>() == 24);
    assert!(size_of::<CreateCqResp>() == 24);
    assert!(size_of::<CreateQpResp>() == 48);
    assert!(size_of::<CreateAhResp>() == 8);
};
