//! libibverbs' private provider ABI, rdma-core 44 (`IBVERBS_PRIVATE_34`), declared by hand.
//!
//! `infiniband/driver.h` is not installed by Debian, so the structures a provider shares with
//! libibverbs are written out here from the v44.0 sources (facts:
//! `/work/shared/notes/provider-abi-v44/README.md`). Every size, alignment and field offset is
//! pinned by `layout_v44.rs` against the values measured from the v44 headers.
//!
//! Names follow C (`verbs_device_ops`, ...) so that the layout tables and the C sources can be
//! compared line by line.
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_void};

use super::cmd::{
    ibv_alloc_mw, ibv_alloc_pd, ibv_create_cq, ibv_create_qp, ibv_create_qp_ex, ibv_create_srq,
    ibv_get_context, ibv_modify_qp, ibv_modify_srq, ibv_query_port, ibv_query_qp, ibv_query_srq,
    ibv_reg_mr, ibv_resize_cq,
};
use super::sys::*;

/// ccan `struct list_node`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct list_node {
    pub next: *mut list_node,
    pub prev: *mut list_node,
}

// ------------------------------------------------------------------------------------------
// Device matching and registration
// ------------------------------------------------------------------------------------------

/// `enum verbs_match_kind` values (`verbs_match_ent::kind`).
pub const VERBS_MATCH_SENTINEL: u8 = 0;
pub const VERBS_MATCH_PCI: u8 = 1;
pub const VERBS_MATCH_MODALIAS: u8 = 2;
pub const VERBS_MATCH_DRIVER_ID: u8 = 3;

/// `enum rdma_driver_id`: the id of every out-of-tree driver, including rrxe.
pub const RDMA_DRIVER_UNKNOWN: u32 = 0;

/// The anonymous union of `struct verbs_match_ent`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union verbs_match_ent_u {
    pub modalias: *const c_char,
    pub driver_id: u64,
}

/// `struct verbs_match_ent`: one entry of a provider's match table.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct verbs_match_ent {
    pub driver_data: *mut c_void,
    pub u: verbs_match_ent_u,
    pub vendor: u16,
    pub device: u16,
    pub kind: u8,
}

impl verbs_match_ent {
    /// The all-zero terminator (`{}` in C).
    pub const SENTINEL: Self = Self {
        driver_data: core::ptr::null_mut(),
        u: verbs_match_ent_u { driver_id: 0 },
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_SENTINEL,
    };
}

// SAFETY: a match table is immutable `'static` data; its pointers are never written through
// (libibverbs only reads them), so sharing it between threads is sound.
unsafe impl Sync for verbs_match_ent {}

/// `struct verbs_sysfs_dev`: what libibverbs learnt about one uverbs device (netlink/sysfs).
#[repr(C)]
pub struct verbs_sysfs_dev {
    pub entry: list_node,
    pub provider_data: *mut c_void,
    pub match_: *const verbs_match_ent,
    pub flags: c_uint,
    pub sysfs_name: [c_char; 64],
    pub sysfs_cdev: libc::dev_t,
    pub ibdev_name: [c_char; 64],
    pub ibdev_path: [c_char; 256],
    pub modalias: [c_char; 512],
    pub node_guid: u64,
    pub driver_id: u32,
    pub node_type: ibv_node_type,
    pub ibdev_idx: c_int,
    pub num_ports: u32,
    pub abi_ver: u32,
    pub time_created: libc::timespec,
}

/// `struct verbs_device_ops`: the provider's registration record.
#[repr(C)]
pub struct verbs_device_ops {
    pub name: *const c_char,
    pub match_min_abi_version: u32,
    pub match_max_abi_version: u32,
    pub match_table: *const verbs_match_ent,
    pub static_providers: *mut *const verbs_device_ops,
    pub match_device: Option<unsafe extern "C" fn(sysfs_dev: *mut verbs_sysfs_dev) -> bool>,
    pub alloc_context: Option<
        unsafe extern "C" fn(
            device: *mut ibv_device,
            cmd_fd: c_int,
            private_data: *mut c_void,
        ) -> *mut verbs_context,
    >,
    pub import_context:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut verbs_context>,
    pub alloc_device:
        Option<unsafe extern "C" fn(sysfs_dev: *mut verbs_sysfs_dev) -> *mut verbs_device>,
    pub uninit_device: Option<unsafe extern "C" fn(device: *mut verbs_device)>,
}

// SAFETY: the provider's `verbs_device_ops` is an immutable `'static` value whose pointers
// refer to other immutable `'static` data (name, match table) or are null; libibverbs only
// reads it.
unsafe impl Sync for verbs_device_ops {}

/// `struct verbs_device`: libibverbs' device object, embedded at offset 0 of the provider's.
#[repr(C)]
pub struct verbs_device {
    pub device: ibv_device,
    pub ops: *const verbs_device_ops,
    pub refcount: c_int, // atomic_int
    pub entry: list_node,
    pub sysfs: *mut verbs_sysfs_dev,
    pub core_support: u64,
}

// ------------------------------------------------------------------------------------------
// verbs_context_ops
// ------------------------------------------------------------------------------------------

/// Declares `struct verbs_context_ops` from one list, so that the struct, its all-`None`
/// value and the list of entry names can never disagree.
macro_rules! context_ops {
    ($( $name:ident : fn($($arg:ty),* $(,)?) $(-> $ret:ty)? ;)*) => {
        /// `struct verbs_context_ops`: 76 function pointers in alphabetical order; the order is
        /// ABI. `verbs_set_ops` copies the non-`None` entries; `None` keeps libibverbs' dummy
        /// (which returns `EOPNOTSUPP`).
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub struct verbs_context_ops {
            $( pub $name: Option<unsafe extern "C" fn($($arg),*) $(-> $ret)?>, )*
        }

        impl verbs_context_ops {
            /// Every entry `None`.
            pub const EMPTY: Self = Self { $( $name: None, )* };
        }

        /// The entry names, in declaration (= ABI) order.
        pub const VERBS_CONTEXT_OPS_NAMES: &[&str] = &[ $( stringify!($name), )* ];
    };
}

context_ops! {
    advise_mr: fn(*mut ibv_pd, ib_uverbs_advise_mr_advice, u32, *mut ibv_sge, u32) -> c_int;
    alloc_dm: fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm;
    alloc_mw: fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw;
    alloc_null_mr: fn(*mut ibv_pd) -> *mut ibv_mr;
    alloc_parent_domain: fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;
    alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
    alloc_td: fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td;
    async_event: fn(*mut ibv_context, *mut ibv_async_event);
    attach_counters_point_flow: fn(*mut ibv_counters, *mut ibv_counter_attach_attr, *mut ibv_flow) -> c_int;
    attach_mcast: fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int;
    bind_mw: fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
    close_xrcd: fn(*mut ibv_xrcd) -> c_int;
    cq_event: fn(*mut ibv_cq);
    create_ah: fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
    create_counters: fn(*mut ibv_context, *mut ibv_counters_init_attr) -> *mut ibv_counters;
    create_cq: fn(*mut ibv_context, c_int, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    create_cq_ex: fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
    create_flow: fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow;
    create_flow_action_esp: fn(*mut ibv_context, *mut ibv_flow_action_esp_attr) -> *mut ibv_flow_action;
    create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    create_qp_ex: fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
    create_rwq_ind_table: fn(*mut ibv_context, *mut ibv_rwq_ind_table_init_attr) -> *mut ibv_rwq_ind_table;
    create_srq: fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
    create_srq_ex: fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
    create_wq: fn(*mut ibv_context, *mut ibv_wq_init_attr) -> *mut ibv_wq;
    dealloc_mw: fn(*mut ibv_mw) -> c_int;
    dealloc_pd: fn(*mut ibv_pd) -> c_int;
    dealloc_td: fn(*mut ibv_td) -> c_int;
    dereg_mr: fn(*mut verbs_mr) -> c_int;
    destroy_ah: fn(*mut ibv_ah) -> c_int;
    destroy_counters: fn(*mut ibv_counters) -> c_int;
    destroy_cq: fn(*mut ibv_cq) -> c_int;
    destroy_flow: fn(*mut ibv_flow) -> c_int;
    destroy_flow_action: fn(*mut ibv_flow_action) -> c_int;
    destroy_qp: fn(*mut ibv_qp) -> c_int;
    destroy_rwq_ind_table: fn(*mut ibv_rwq_ind_table) -> c_int;
    destroy_srq: fn(*mut ibv_srq) -> c_int;
    destroy_wq: fn(*mut ibv_wq) -> c_int;
    detach_mcast: fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int;
    free_context: fn(*mut ibv_context);
    free_dm: fn(*mut ibv_dm) -> c_int;
    get_srq_num: fn(*mut ibv_srq, *mut u32) -> c_int;
    import_dm: fn(*mut ibv_context, u32) -> *mut ibv_dm;
    import_mr: fn(*mut ibv_pd, u32) -> *mut ibv_mr;
    import_pd: fn(*mut ibv_context, u32) -> *mut ibv_pd;
    modify_cq: fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> c_int;
    modify_flow_action_esp: fn(*mut ibv_flow_action, *mut ibv_flow_action_esp_attr) -> c_int;
    modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    modify_qp_rate_limit: fn(*mut ibv_qp, *mut ibv_qp_rate_limit_attr) -> c_int;
    modify_srq: fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int;
    modify_wq: fn(*mut ibv_wq, *mut ibv_wq_attr) -> c_int;
    open_qp: fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp;
    open_xrcd: fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
    poll_cq: fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
    post_recv: fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
    post_send: fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
    post_srq_ops: fn(*mut ibv_srq, *mut ibv_ops_wr, *mut *mut ibv_ops_wr) -> c_int;
    post_srq_recv: fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
    query_device_ex: fn(*mut ibv_context, *const ibv_query_device_ex_input, *mut ibv_device_attr_ex, usize) -> c_int;
    query_ece: fn(*mut ibv_qp, *mut ibv_ece) -> c_int;
    query_port: fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    query_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int;
    query_qp_data_in_order: fn(*mut ibv_qp, ibv_wr_opcode, u32) -> c_int;
    query_rt_values: fn(*mut ibv_context, *mut ibv_values_ex) -> c_int;
    query_srq: fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int;
    read_counters: fn(*mut ibv_counters, *mut u64, u32, u32) -> c_int;
    reg_dm_mr: fn(*mut ibv_pd, *mut ibv_dm, u64, usize, c_uint) -> *mut ibv_mr;
    reg_dmabuf_mr: fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr;
    reg_mr: fn(*mut ibv_pd, *mut c_void, usize, u64, c_int) -> *mut ibv_mr;
    req_notify_cq: fn(*mut ibv_cq, c_int) -> c_int;
    rereg_mr: fn(*mut verbs_mr, c_int, *mut ibv_pd, *mut c_void, usize, c_int) -> c_int;
    resize_cq: fn(*mut ibv_cq, c_int) -> c_int;
    set_ece: fn(*mut ibv_qp, *mut ibv_ece) -> c_int;
    unimport_dm: fn(*mut ibv_dm);
    unimport_mr: fn(*mut ibv_mr);
    unimport_pd: fn(*mut ibv_pd);
}

// ------------------------------------------------------------------------------------------
// Object wrappers (driver.h); the provider embeds these in its own objects.
// ------------------------------------------------------------------------------------------

/// `enum ibv_mr_type`.
pub type ibv_mr_type = c_uint;
pub const IBV_MR_TYPE_MR: ibv_mr_type = 0;
pub const IBV_MR_TYPE_NULL_MR: ibv_mr_type = 1;
pub const IBV_MR_TYPE_IMPORTED_MR: ibv_mr_type = 2;
pub const IBV_MR_TYPE_DMABUF_MR: ibv_mr_type = 3;

/// `struct verbs_mr`.
#[repr(C)]
pub struct verbs_mr {
    pub ibv_mr: ibv_mr,
    pub mr_type: ibv_mr_type,
    pub access: c_int,
}

/// `struct verbs_xrcd`.
#[repr(C)]
pub struct verbs_xrcd {
    pub xrcd: ibv_xrcd,
    pub comp_mask: u32,
    pub handle: u32,
}

/// `verbs_qp::comp_mask` bits (`enum verbs_qp_mask`).
pub const VERBS_QP_XRCD: u32 = 1 << 0;
pub const VERBS_QP_EX: u32 = 1 << 1;

/// The anonymous union at the start of `struct verbs_qp`.
#[repr(C)]
pub union verbs_qp_u {
    pub qp: core::mem::ManuallyDrop<ibv_qp>,
    pub qp_ex: core::mem::ManuallyDrop<ibv_qp_ex>,
}

/// `struct verbs_qp`. libibverbs writes `comp_mask` with its own (v44) layout, which is why the
/// provider is pinned to that exact version.
#[repr(C)]
pub struct verbs_qp {
    pub u: verbs_qp_u,
    pub comp_mask: u32,
    pub xrcd: *mut verbs_xrcd,
}

/// `struct verbs_cq` (a struct holding only an anonymous union, i.e. this union).
#[repr(C)]
pub union verbs_cq {
    pub cq: core::mem::ManuallyDrop<ibv_cq>,
    pub cq_ex: core::mem::ManuallyDrop<ibv_cq_ex>,
}

/// `struct verbs_srq`.
#[repr(C)]
pub struct verbs_srq {
    pub srq: ibv_srq,
    pub srq_type: ibv_srq_type,
    pub xrcd: *mut verbs_xrcd,
    pub cq: *mut ibv_cq,
    pub srq_num: u32,
}

// ------------------------------------------------------------------------------------------
// Exported libibverbs functions (all bind to version IBVERBS_PRIVATE_34).
// ------------------------------------------------------------------------------------------

#[link(name = "ibverbs")]
unsafe extern "C" {
    /// `verbs_register_driver_34`: adds `ops` (kept forever) to libibverbs' provider list.
    pub fn verbs_register_driver_34(ops: *const verbs_device_ops);

    /// Callocs `alloc_size` bytes and initialises the `verbs_context` found `context_offset`
    /// bytes into them (the offset is passed as a pointer value). Closes `cmd_fd` on failure.
    pub fn _verbs_init_and_alloc_context(
        device: *mut ibv_device,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut verbs_context,
        driver_id: u32,
    ) -> *mut c_void;

    /// Frees `priv`, closes `cmd_fd`/`async_fd`, drops the device reference. Does not free the
    /// provider's allocation.
    pub fn verbs_uninit_context(ctx: *mut verbs_context);

    /// Copies the non-`None` entries of `ops` into the context.
    pub fn verbs_set_ops(vctx: *mut verbs_context, ops: *const verbs_context_ops);

    /// `GET_CONTEXT`. Bytes of `cmd` past `sizeof(struct ibv_get_context)` are the driver udata
    /// input; bytes of `resp` past `sizeof(struct ib_uverbs_get_context_resp)` the output.
    /// Returns 0 or a positive errno.
    pub fn ibv_cmd_get_context(
        ctx: *mut verbs_context,
        cmd: *mut ibv_get_context,
        cmd_size: usize,
        resp: *mut ib_uverbs_get_context_resp,
        resp_size: usize,
    ) -> c_int;

    /// `QUERY_DEVICE` / `EX_QUERY_DEVICE`. Fills `attr` (except `fw_ver`). Returns 0 or a
    /// positive errno.
    pub fn ibv_cmd_query_device_any(
        ctx: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
        attr_size: usize,
        resp: *mut ib_uverbs_ex_query_device_resp,
        resp_size: *mut usize,
    ) -> c_int;

    /// `QUERY_PORT`; `cmd` is scratch space of `sizeof(struct ibv_query_port)` bytes. Returns 0
    /// or a positive errno.
    pub fn ibv_cmd_query_port(
        ctx: *mut ibv_context,
        port_num: u8,
        port_attr: *mut ibv_port_attr,
        cmd: *mut ibv_query_port,
        cmd_size: usize,
    ) -> c_int;

    // --------------------------------------------------------------------------------------
    // Control-path helpers. Unless noted they return 0 or a positive errno (errno is usually
    // set too). Bytes of a `cmd` buffer past `sizeof(<the legacy struct>)` are the driver's
    // udata input, bytes of a `resp` buffer past `sizeof(<the core response>)` its output
    // (`_write_set_uhw`); libibverbs writes the header and the core request into `cmd`, so
    // `cmd` buffers must be writable and complete.
    // --------------------------------------------------------------------------------------

    /// `ALLOC_PD` (write() or ioctl `INVOKE_WRITE`). Sets `pd->handle` and `pd->context`.
    pub fn ibv_cmd_alloc_pd(
        ctx: *mut ibv_context,
        pd: *mut ibv_pd,
        cmd: *mut ibv_alloc_pd,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_pd_resp,
        resp_size: usize,
    ) -> c_int;

    /// `PD_DESTROY` (ioctl, falling back to `DEALLOC_PD`).
    pub fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int;

    /// `REG_MR` (write() or ioctl `INVOKE_WRITE`); `access` goes to the kernel unchanged. Fills
    /// `vmr->ibv_mr.{handle,lkey,rkey,context}`, `mr_type` (`IBV_MR_TYPE_MR`) and `access`.
    pub fn ibv_cmd_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        vmr: *mut verbs_mr,
        cmd: *mut ibv_reg_mr,
        cmd_size: usize,
        resp: *mut ib_uverbs_reg_mr_resp,
        resp_size: usize,
    ) -> c_int;

    /// `MR_DESTROY` (ioctl, falling back to `DEREG_MR`).
    pub fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int;

    /// `ADVISE_MR` (ioctl): the kernel's `advise_mr` on `num_sge` SGEs of `sg_list`. Returns 0
    /// or a positive errno.
    pub fn ibv_cmd_advise_mr(
        pd: *mut ibv_pd,
        advice: ib_uverbs_advise_mr_advice,
        flags: u32,
        sg_list: *mut ibv_sge,
        num_sge: u32,
    ) -> c_int;

    /// `ALLOC_MW` (write() or ioctl `INVOKE_WRITE`). Sets `mw->{context,pd,rkey,handle,type}`.
    pub fn ibv_cmd_alloc_mw(
        pd: *mut ibv_pd,
        ty: ibv_mw_type,
        mw: *mut ibv_mw,
        cmd: *mut ibv_alloc_mw,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_mw_resp,
        resp_size: usize,
    ) -> c_int;

    /// `MW_DESTROY` (ioctl, falling back to `DEALLOC_MW`).
    pub fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int;

    /// `CQ_CREATE` (ioctl, falling back to `CREATE_CQ`). Sets `cq->{context,handle,cqe}`.
    pub fn ibv_cmd_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
        cq: *mut ibv_cq,
        cmd: *mut ibv_create_cq,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_cq_resp,
        resp_size: usize,
    ) -> c_int;

    /// `RESIZE_CQ` (write() or ioctl `INVOKE_WRITE`). Sets `cq->cqe`.
    pub fn ibv_cmd_resize_cq(
        cq: *mut ibv_cq,
        cqe: c_int,
        cmd: *mut ibv_resize_cq,
        cmd_size: usize,
        resp: *mut ib_uverbs_resize_cq_resp,
        resp_size: usize,
    ) -> c_int;

    /// `POLL_CQ` through the kernel (write() or ioctl `INVOKE_WRITE`, no udata). Returns the
    /// number of completions written to `wc`, or -1.
    pub fn ibv_cmd_poll_cq(cq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int;

    /// `REQ_NOTIFY_CQ` (write() or ioctl `INVOKE_WRITE`).
    pub fn ibv_cmd_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;

    /// `CQ_DESTROY` (ioctl, falling back to `DESTROY_CQ`); then waits until the application
    /// has acknowledged every event the kernel reported for the CQ.
    pub fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int;

    /// `QP_CREATE` (ioctl, falling back to `CREATE_QP`). Fills the `ibv_qp` (handle, qp_num,
    /// context, pd, CQs, srq, type, state, mutex/cond) and updates `attr->cap` from the kernel.
    /// Does not touch the `verbs_qp` fields after the `ibv_qp`.
    pub fn ibv_cmd_create_qp(
        pd: *mut ibv_pd,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_init_attr,
        cmd: *mut ibv_create_qp,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;

    /// `QP_CREATE` (ioctl, falling back to `CREATE_QP` / `EX_CREATE_QP`) from an
    /// `ibv_qp_init_attr_ex`. As [`ibv_cmd_create_qp`], plus `qp->comp_mask` (set to 0, or
    /// `VERBS_QP_XRCD`).
    pub fn ibv_cmd_create_qp_ex2(
        ctx: *mut ibv_context,
        qp: *mut verbs_qp,
        attr_ex: *mut ibv_qp_init_attr_ex,
        cmd: *mut ibv_create_qp_ex,
        cmd_size: usize,
        resp: *mut ib_uverbs_ex_create_qp_resp,
        resp_size: usize,
    ) -> c_int;

    /// `MODIFY_QP` (write() or ioctl `INVOKE_WRITE`); `EOPNOTSUPP` for masks from
    /// `IBV_QP_RATE_LIMIT` on.
    pub fn ibv_cmd_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: *mut ibv_modify_qp,
        cmd_size: usize,
    ) -> c_int;

    /// `QUERY_QP` (write() or ioctl `INVOKE_WRITE`); fills `attr` and `init_attr`.
    pub fn ibv_cmd_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
        cmd: *mut ibv_query_qp,
        cmd_size: usize,
    ) -> c_int;

    /// `QP_DESTROY` (ioctl, falling back to `DESTROY_QP`); then waits until the application
    /// has acknowledged every async event reported for the QP.
    pub fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int;

    /// `CREATE_AH` (write() or ioctl `INVOKE_WRITE`; the command buffer is libibverbs' own).
    /// Sets `ah->{handle,context}`.
    pub fn ibv_cmd_create_ah(
        pd: *mut ibv_pd,
        ah: *mut ibv_ah,
        attr: *mut ibv_ah_attr,
        resp: *mut ib_uverbs_create_ah_resp,
        resp_size: usize,
    ) -> c_int;

    /// `AH_DESTROY` (ioctl, falling back to `DESTROY_AH`).
    pub fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int;

    /// `ATTACH_MCAST` (write() or ioctl `INVOKE_WRITE`): attaches a UD QP to a multicast group.
    pub fn ibv_cmd_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;

    /// `DETACH_MCAST` (write() or ioctl `INVOKE_WRITE`): ends one attachment.
    pub fn ibv_cmd_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;

    /// `POST_SEND` (write() or ioctl `INVOKE_WRITE`, no udata): copies the WR list into one
    /// command (`struct ibv_post_send`, then `wr_count` `struct ib_uverbs_send_wr`s, then
    /// `sge_count` SGEs) with `wqe_size = sizeof(struct ib_uverbs_send_wr)`. With `wr == NULL`
    /// that is `wr_count == sge_count == 0`: rrxe's send doorbell. On failure `*bad_wr` is set
    /// (to `wr`, i.e. NULL for the doorbell).
    pub fn ibv_cmd_post_send(
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad_wr: *mut *mut ibv_send_wr,
    ) -> c_int;

    /// `SRQ_CREATE` (ioctl, falling back to `CREATE_SRQ`). Sets `srq->{context,handle}`,
    /// initialises its mutex/cond and writes the kernel's `max_wr`/`max_sge` back to
    /// `attr->attr`.
    pub fn ibv_cmd_create_srq(
        pd: *mut ibv_pd,
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_init_attr,
        cmd: *mut ibv_create_srq,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_srq_resp,
        resp_size: usize,
    ) -> c_int;

    /// `MODIFY_SRQ` (write() or ioctl `INVOKE_WRITE`).
    pub fn ibv_cmd_modify_srq(
        srq: *mut ibv_srq,
        srq_attr: *mut ibv_srq_attr,
        srq_attr_mask: c_int,
        cmd: *mut ibv_modify_srq,
        cmd_size: usize,
    ) -> c_int;

    /// `QUERY_SRQ` (write() or ioctl `INVOKE_WRITE`); fills `srq_attr`.
    pub fn ibv_cmd_query_srq(
        srq: *mut ibv_srq,
        srq_attr: *mut ibv_srq_attr,
        cmd: *mut ibv_query_srq,
        cmd_size: usize,
    ) -> c_int;

    /// `SRQ_DESTROY` (ioctl, falling back to `DESTROY_SRQ`); then waits until the application
    /// has acknowledged every async event reported for the SRQ.
    pub fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int;

    /// Reads `<ibdev_path>/<printf(fnfmt, ...)>` into `buf`, strips one trailing newline and
    /// NUL-terminates. Returns the length, or -1.
    pub fn ibv_read_ibdev_sysfs_file(
        buf: *mut c_char,
        size: usize,
        sysfs_dev: *mut verbs_sysfs_dev,
        fnfmt: *const c_char,
        ...
    ) -> c_int;
}
