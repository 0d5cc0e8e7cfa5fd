//! libibverbs (rdma-core 44) for the test programs.
//!
//! The public verbs API (types, exported functions, constants) comes from the `rdma-sys` crate,
//! which binds `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>` from the installed headers. This
//! module re-exports it under the names the programs use: `rdma-sys` turns some C enums into
//! modules (`ibv_qp_state::IBV_QPS_RTS`, type `ibv_qp_state::Type`) and the flag enums into
//! newtypes (`ibv_access_flags(u32)`), while the programs use the plain C names and `u32`
//! values, as a C program does. `rdma-sys` derives no `Default`; [`zeroed`] stands in for it
//! (bindgen's `Default` was all-zero bytes too).
//!
//! Own declarations remain only for the `static inline` verbs of rdma-core 44, called through
//! the out-of-line wrappers in `shim.c` (compiled against the installed header, so they are
//! exactly what a C application gets). `rdma-sys` has Rust re-implementations of some of
//! these inlines, but with other signatures (`Option` returns) and not always the rdma-core 44
//! body (its `___ibv_query_port` skips the `memset` of the compat path), so they are not used.
// The C names (`ibv_qp_state`, `IBV_QPS_RTS`), as the programs use them.
#![allow(non_camel_case_types, non_upper_case_globals)]

use std::ffi::c_uint;

pub use rdma_sys::*;

/// Re-exports the constants of a C enum that `rdma-sys` turns into a module of constants
/// (`constified_enum_module`) under their C names, and names its type like the C enum.
macro_rules! enum_consts {
    ($($ty:ident { $($n:ident),* $(,)? })*) => { $(
        pub type $ty = rdma_sys::$ty::Type;
        pub use rdma_sys::$ty::{$($n),*};
    )* };
}

/// Re-exports the values of a C flag enum that `rdma-sys` turns into a newtype
/// (`bitfield_enum`) as plain `c_uint` constants, and names the type like the C enum.
macro_rules! flag_consts {
    ($($ty:ident { $($n:ident),* $(,)? })*) => { $(
        pub type $ty = c_uint;
        $(pub const $n: $ty = rdma_sys::$ty::$n.0;)*
    )* };
}

enum_consts! {
    ibv_qp_state {
        IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_SQE,
        IBV_QPS_ERR, IBV_QPS_UNKNOWN,
    }
    ibv_qp_type {
        IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV, IBV_QPT_DRIVER,
    }
    ibv_mtu { IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096 }
    ibv_mig_state { IBV_MIG_MIGRATED, IBV_MIG_REARM, IBV_MIG_ARMED }
    ibv_port_state {
        IBV_PORT_NOP, IBV_PORT_DOWN, IBV_PORT_INIT, IBV_PORT_ARMED, IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
    }
    ibv_wc_status {
        IBV_WC_SUCCESS, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR, IBV_WC_MW_BIND_ERR, IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR,
        IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_LOC_RDD_VIOL_ERR,
        IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_REM_ABORT_ERR, IBV_WC_INV_EECN_ERR,
        IBV_WC_INV_EEC_STATE_ERR, IBV_WC_FATAL_ERR, IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_GENERAL_ERR,
        IBV_WC_TM_ERR, IBV_WC_TM_RNDV_INCOMPLETE,
    }
    ibv_wc_opcode {
        IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW, IBV_WC_LOCAL_INV, IBV_WC_TSO, IBV_WC_ATOMIC_WRITE, IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_TM_ADD, IBV_WC_TM_DEL, IBV_WC_TM_SYNC, IBV_WC_TM_RECV,
        IBV_WC_TM_NO_TAG, IBV_WC_DRIVER1, IBV_WC_DRIVER2, IBV_WC_DRIVER3,
    }
    ibv_wr_opcode {
        IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV, IBV_WR_TSO, IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
    }
}

flag_consts! {
    ibv_access_flags {
        IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_MW_BIND, IBV_ACCESS_ZERO_BASED, IBV_ACCESS_ON_DEMAND,
        IBV_ACCESS_HUGETLB, IBV_ACCESS_RELAXED_ORDERING,
    }
    ibv_qp_attr_mask {
        IBV_QP_STATE, IBV_QP_CUR_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_TIMEOUT,
        IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_MAX_QP_RD_ATOMIC,
        IBV_QP_ALT_PATH, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN, IBV_QP_MAX_DEST_RD_ATOMIC,
        IBV_QP_PATH_MIG_STATE, IBV_QP_CAP, IBV_QP_DEST_QPN, IBV_QP_RATE_LIMIT,
    }
    ibv_send_flags {
        IBV_SEND_FENCE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_SEND_INLINE, IBV_SEND_IP_CSUM,
    }
    ibv_wc_flags {
        IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_IP_CSUM_OK, IBV_WC_WITH_INV, IBV_WC_TM_SYNC_REQ,
        IBV_WC_TM_MATCH, IBV_WC_TM_DATA_VALID,
    }
    ibv_create_cq_wc_flags {
        IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_IMM, IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP, IBV_WC_EX_WITH_SLID, IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WC_EX_WITH_CVLAN,
        IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_TM_INFO,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
    }
    ibv_qp_create_send_ops_flags {
        IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QP_EX_WITH_RDMA_READ, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_LOCAL_INV, IBV_QP_EX_WITH_BIND_MW,
        IBV_QP_EX_WITH_SEND_WITH_INV, IBV_QP_EX_WITH_TSO, IBV_QP_EX_WITH_ATOMIC_WRITE,
    }
    ibv_qp_init_attr_mask {
        IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_XRCD, IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER, IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_RX_HASH,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
    }
    ibv_xrcd_init_attr_mask {
        IBV_XRCD_INIT_ATTR_FD, IBV_XRCD_INIT_ATTR_OFLAGS, IBV_XRCD_INIT_ATTR_RESERVED,
    }
}

/// `rdma-sys` makes `enum ibv_event_type` a Rust enum (the type of `ibv_async_event::event_type`);
/// its values as `c_uint` constants, to compare with `event_type as u32`.
macro_rules! event_consts {
    ($($n:ident),* $(,)?) => { $(pub const $n: c_uint = rdma_sys::ibv_event_type::$n as c_uint;)* };
}

event_consts! {
    IBV_EVENT_CQ_ERR, IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR,
    IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED, IBV_EVENT_PATH_MIG, IBV_EVENT_PATH_MIG_ERR,
    IBV_EVENT_DEVICE_FATAL, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR, IBV_EVENT_LID_CHANGE,
    IBV_EVENT_PKEY_CHANGE, IBV_EVENT_SM_CHANGE, IBV_EVENT_SRQ_ERR, IBV_EVENT_SRQ_LIMIT_REACHED,
    IBV_EVENT_QP_LAST_WQE_REACHED, IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_GID_CHANGE,
    IBV_EVENT_WQ_FATAL,
}

/// Plain C data: C structs of integers, raw pointers, `Option<extern fn>`, C enums represented
/// as integers, unions and arrays of those, and `ibv_event_type`, whose variant 0 is
/// `IBV_EVENT_CQ_ERR`. All-zero bytes are a valid value, and a bitwise copy is a valid value
/// that owns nothing (what bindgen's `Default` and `Copy` gave; `rdma-sys` derives neither for
/// some of these types).
///
/// # Safety
/// Implement it only for such types.
pub unsafe trait Zeroed: Sized {
    /// A bitwise copy, as `Copy` would make.
    fn bitcopy(&self) -> Self {
        // SAFETY: `Self: Zeroed` is plain C data that owns nothing.
        unsafe { std::ptr::read(self) }
    }
}

/// The all-zero value of `T`: what bindgen's derived `Default` gave, and what a C program
/// gets from `= {}` or `memset(&x, 0, sizeof(x))`.
pub fn zeroed<T: Zeroed>() -> T {
    // SAFETY: `T: Zeroed` promises that all-zero bytes are a valid `T`.
    unsafe { std::mem::zeroed() }
}

// SAFETY: an array of all-zero-valid elements is all-zero-valid.
unsafe impl<T: Zeroed, const N: usize> Zeroed for [T; N] {}

macro_rules! zeroed_types {
    ($($t:ty),* $(,)?) => { $(
        // SAFETY: a plain C struct or union of rdma-core's verbs.h (see `Zeroed`).
        unsafe impl Zeroed for $t {}
    )* };
}

zeroed_types!(
    ibv_ah_attr,
    ibv_async_event,
    ibv_cq_init_attr_ex,
    ibv_data_buf,
    ibv_device_attr,
    ibv_device_attr_ex,
    ibv_gid,
    ibv_gid_entry,
    ibv_global_route,
    ibv_poll_cq_attr,
    ibv_port_attr,
    ibv_qp_attr,
    ibv_qp_cap,
    ibv_qp_init_attr,
    ibv_qp_init_attr_ex,
    ibv_recv_wr,
    ibv_send_wr,
    ibv_sge,
    ibv_srq_attr,
    ibv_srq_init_attr,
    ibv_wc,
    ibv_xrcd_init_attr,
);

// `rdma-sys` writes the verbs.h structs that contain anonymous unions by hand (`ibv_wc`,
// `ibv_send_wr`, `ibv_ah_attr`, `ibv_global_route`, `ibv_gid`, `ibv_async_event`); their
// sizes and alignments are pinned here to rdma-core 44's (`sizeof`/`_Alignof` in C on x86_64),
// with the rest of the structs the programs hand to libibverbs.
macro_rules! pin_layout {
    ($($t:ty: $size:expr, $align:expr;)*) => { $(
        const _: () = assert!(
            std::mem::size_of::<$t>() == $size && std::mem::align_of::<$t>() == $align
        );
    )* };
}

pin_layout! {
    ibv_wc: 48, 8;
    ibv_send_wr: 128, 8;
    ibv_recv_wr: 32, 8;
    ibv_sge: 16, 8;
    ibv_ah_attr: 32, 8;
    ibv_global_route: 24, 8;
    ibv_gid: 16, 8;
    ibv_async_event: 16, 8;
    ibv_qp_attr: 144, 8;
    ibv_qp_init_attr: 64, 8;
    ibv_qp_init_attr_ex: 136, 8;
    ibv_qp_cap: 20, 4;
    ibv_port_attr: 52, 4;
    ibv_device_attr: 232, 8;
    ibv_gid_entry: 32, 8;
    ibv_cq_init_attr_ex: 56, 8;
    ibv_qp_ex: 352, 8;
    ibv_cq_ex: 288, 8;
    ibv_srq_attr: 12, 4;
    ibv_srq_init_attr: 24, 8;
    ibv_xrcd_init_attr: 12, 4;
    ibv_poll_cq_attr: 4, 4;
    ibv_data_buf: 16, 8;
    ibv_mr: 48, 8;
    ibv_qp: 160, 8;
    ibv_cq: 128, 8;
    ibv_context: 328, 8;
}
const _: () = assert!(std::mem::offset_of!(ibv_send_wr, wr) == 40);
const _: () = assert!(std::mem::offset_of!(ibv_send_wr, imm_data_invalidated_rkey_union) == 36);
const _: () = assert!(std::mem::offset_of!(ibv_send_wr, qp_type) == 72);
const _: () = assert!(std::mem::offset_of!(ibv_wc, imm_data_invalidated_rkey_union) == 24);

unsafe extern "C" {
    /// `ibv_query_port()` (the inline that asks the provider for the full `ibv_port_attr`).
    pub fn vt_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> i32;
    /// `ibv_query_gid_ex(ctx, port, index, entry, 0)`.
    pub fn vt_query_gid_ex(
        ctx: *mut ibv_context,
        port: u32,
        index: u32,
        entry: *mut ibv_gid_entry,
    ) -> i32;
    /// `ibv_create_qp_ex()`.
    pub fn vt_create_qp_ex(ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
    /// `ibv_open_xrcd()`.
    pub fn vt_open_xrcd(ctx: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
    /// `ibv_close_xrcd()`.
    pub fn vt_close_xrcd(xrcd: *mut ibv_xrcd) -> i32;
    /// `ibv_post_send()`.
    pub fn vt_post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> i32;
    /// `ibv_post_recv()`.
    pub fn vt_post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> i32;
    /// `ibv_poll_cq()`.
    pub fn vt_poll_cq(cq: *mut ibv_cq, num_entries: i32, wc: *mut ibv_wc) -> i32;
    /// `ibv_req_notify_cq()`.
    pub fn vt_req_notify_cq(cq: *mut ibv_cq, solicited_only: i32) -> i32;
    /// `ibv_create_cq_ex()`.
    pub fn vt_query_device_ex(ctx: *mut ibv_context, attr: *mut ibv_device_attr_ex) -> i32;
    pub fn vt_alloc_mw(pd: *mut ibv_pd, type_: i32) -> *mut ibv_mw;
    pub fn vt_dealloc_mw(mw: *mut ibv_mw) -> i32;
    /// `ibv_bind_mw` (type-1 windows): 0 or a positive errno.
    pub fn vt_bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> i32;
    pub fn vt_create_cq_ex(ctx: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex)
        -> *mut ibv_cq_ex;
}
