// SPDX-License-Identifier: GPL-2.0-only
//! Device limits: what `query_device` reports and what the verbs enforce.
//!
//! One table, so the advertised numbers and the checks cannot drift apart.

/// Queue pairs per device.
pub const MAX_QP: u32 = 16 * 1024;

/// Share of every per-device object limit that user contexts may take: the rest (1/64 of
/// the limit) is kept for kernel consumers (ib_mad's GSI QP, ib_cm and rdma_cm, nvmet and the
/// storage ULPs), so that one user who creates objects until refused cannot starve them.
/// Per-user limits beyond that are the rdma cgroup's (`rdma.max`), which ib_core charges.
pub const fn user_max(max: u32) -> u32 {
    max - max / 64
}
/// Work requests per send or receive queue.
pub const MAX_QP_WR: u32 = 16 * 1024;
/// Scatter/gather entries per send or receive WR.
pub const MAX_SGE: u32 = 32;
/// Scatter/gather entries per RDMA READ WR.
pub const MAX_SGE_RD: u32 = 32;
/// Completion queues per device.
pub const MAX_CQ: u32 = 16 * 1024;
/// Entries per completion queue (the ring has `MAX_CQE + 1` slots, a power of two).
pub const MAX_CQE: u32 = 32 * 1024 - 1;
/// Memory regions per device (rdma_rxe: 524,287). The MR table costs 8 bytes per entry.
pub const MAX_MR: u32 = 256 * 1024;
/// Memory windows per device (rdma_rxe: 524,287). Their rkeys come from the MRs' key space,
/// so MRs and windows together are bounded by [`MAX_MR`] as well.
pub const MAX_MW: u32 = 64 * 1024;
/// Largest memory region, in bytes.
pub const MAX_MR_SIZE: u64 = 1 << 40;
/// Protection domains per device.
pub const MAX_PD: u32 = 64 * 1024;
/// Outstanding RDMA READ/atomic requests a QP may initiate.
pub const MAX_QP_INIT_RD_ATOM: u32 = 128;
/// Outstanding RDMA READ/atomic requests a QP may accept as responder.
pub const MAX_QP_RD_ATOM: u32 = 128;
/// Responder resources for the whole device.
pub const MAX_RES_RD_ATOM: u32 = MAX_QP_RD_ATOM * MAX_QP;
/// Shared receive queues per device.
pub const MAX_SRQ: u32 = 4 * 1024;
/// Work requests per SRQ.
pub const MAX_SRQ_WR: u32 = 16 * 1024;
/// Scatter/gather entries per SRQ WR.
pub const MAX_SRQ_SGE: u32 = 32;
/// Address handles per device.
pub const MAX_AH: u32 = 64 * 1024;
/// Multicast groups per device (`max_mcast_grp`, rdma_rxe's value).
pub const MAX_MCAST_GRP: u32 = 8192;
/// UD QPs attached to one multicast group (`max_mcast_qp_attach`, rdma_rxe's value).
pub const MAX_MCAST_QP_ATTACH: u32 = 56;
/// Attachments per device, all groups together (`max_total_mcast_qp_attach`).
pub const MAX_TOTAL_MCAST_QP_ATTACH: u32 = MAX_MCAST_GRP * MAX_MCAST_QP_ATTACH;
/// Bytes of inline data a send WR may carry.
pub const MAX_INLINE_DATA: u32 = 256;
/// Pages of a fast-registration MR (`max_fast_reg_page_list_len`, rxe's value).
pub const MAX_FAST_REG_PAGES: u32 = 512;
/// Entries in the P_Key table.
pub const PKEY_TBL_LEN: u16 = 1;
/// The one P_Key: the default full-membership key.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// Entries in the GID table (RoCEv2 only: one per netdev IP address).
pub const GID_TBL_LEN: u32 = 32;
/// Largest message, in bytes (2 GiB, as the IBTA allows).
pub const MAX_MSG_SZ: u32 = 1 << 31;
/// Completion vectors.
pub const NUM_COMP_VECTORS: u32 = 1;
/// Physical ports.
pub const PHYS_PORT_CNT: u32 = 1;
/// Local CA ACK delay (4.096 us * 2^n) reported to peers.
pub const LOCAL_CA_ACK_DELAY: u8 = 15;
/// Firmware version reported as `fw_ver` (major << 32 | minor << 16 | sub): 0.1.0.
pub const FW_VER: u64 = 1 << 16;
/// Size of a management datagram (`IB_MGMT_MAD_SIZE`), reported as the port's MAD size.
pub const IB_MGMT_MAD_SIZE: u32 = 256;
