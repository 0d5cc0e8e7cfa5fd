//! libibverbs (rdma-core 44) bindings: bindgen output for `<infiniband/verbs.h>` plus the
//! out-of-line wrappers of its `static inline` verbs from `shim.c`.
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/verbs_sys.rs"));

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
    pub fn vt_create_cq_ex(ctx: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
}
