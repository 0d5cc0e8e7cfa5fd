//! Command buffers handed to libibverbs' `ibv_cmd_*` helpers (rdma-core 44 `kern-abi.h`), and
//! rrxe's driver-private commands built on them (`DECLARE_DRV_CMD`).
//!
//! A legacy command is `{ struct ib_uverbs_cmd_hdr hdr; struct <kabi> core_payload; }`, an
//! extended one `{ struct ex_hdr hdr; struct <kabi> core_payload; }`. libibverbs takes
//! `sizeof` of *its own* copy of these when it splits a buffer into core and driver parts, so
//! their sizes are ABI (checked in `layout_v44.rs`). In the write() fallback libibverbs writes
//! the header and the core request into the caller's buffer, so buffers must be writable and
//! complete even when the provider has no driver data.
#![allow(non_camel_case_types)]

use core::mem::{align_of, offset_of, size_of};

use rrxe_uapi::{AllocUcontextCmd, AllocUcontextResp};

use super::sys::*;

/// rdma-core's `struct ex_hdr`: the header of extended commands.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ex_hdr {
    pub hdr: ib_uverbs_cmd_hdr,
    pub ex_hdr: ib_uverbs_ex_cmd_hdr,
}

/// `DECLARE_CMD(_enum, name, kabi)` / `DECLARE_CMD_EX(...)`.
macro_rules! declare_cmd {
    ($($name:ident = $hdr:ty, $kabi:ty;)*) => {$(
        #[doc = concat!("`struct ", stringify!($name), "` = { `", stringify!($hdr), "`, `struct ",
                        stringify!($kabi), "` }.")]
        #[repr(C)]
        #[derive(Default)]
        pub struct $name {
            pub hdr: $hdr,
            pub core_payload: $kabi,
        }
        const _: () = assert!(size_of::<$name>() == size_of::<$hdr>() + size_of::<$kabi>());
    )*};
}

declare_cmd! {
    ibv_alloc_mw = ib_uverbs_cmd_hdr, ib_uverbs_alloc_mw;
    ibv_alloc_pd = ib_uverbs_cmd_hdr, ib_uverbs_alloc_pd;
    ibv_create_ah = ib_uverbs_cmd_hdr, ib_uverbs_create_ah;
    ibv_create_cq = ib_uverbs_cmd_hdr, ib_uverbs_create_cq;
    ibv_create_qp = ib_uverbs_cmd_hdr, ib_uverbs_create_qp;
    ibv_create_srq = ib_uverbs_cmd_hdr, ib_uverbs_create_srq;
    ibv_create_xsrq = ib_uverbs_cmd_hdr, ib_uverbs_create_xsrq;
    ibv_get_context = ib_uverbs_cmd_hdr, ib_uverbs_get_context;
    ibv_modify_qp = ib_uverbs_cmd_hdr, ib_uverbs_modify_qp;
    ibv_modify_srq = ib_uverbs_cmd_hdr, ib_uverbs_modify_srq;
    ibv_post_send = ib_uverbs_cmd_hdr, ib_uverbs_post_send;
    ibv_query_port = ib_uverbs_cmd_hdr, ib_uverbs_query_port;
    ibv_query_qp = ib_uverbs_cmd_hdr, ib_uverbs_query_qp;
    ibv_query_srq = ib_uverbs_cmd_hdr, ib_uverbs_query_srq;
    ibv_reg_mr = ib_uverbs_cmd_hdr, ib_uverbs_reg_mr;
    ibv_resize_cq = ib_uverbs_cmd_hdr, ib_uverbs_resize_cq;
    ibv_create_cq_ex = ex_hdr, ib_uverbs_ex_create_cq;
    ibv_create_qp_ex = ex_hdr, ib_uverbs_ex_create_qp;
    ibv_query_device_ex = ex_hdr, ib_uverbs_ex_query_device;
}

/// `DECLARE_DRV_CMD(name, enum, drv_req, drv_resp)`: a driver request appended to the full
/// legacy (or extended) request and a driver response appended to the core response, with the
/// same no-padding rules rdma-core's static asserts enforce. `$align` is `IBV_ABI_ALIGN` (4 for
/// legacy commands, 8 for extended ones).
macro_rules! declare_drv_cmd {
    ($name:ident, $resp:ident = $abi_req:ty, $kabi_req:ty, $kabi_resp:ty, $align:expr;
     $drv_req:ty, $drv_resp:ty) => {
        #[doc = concat!("Driver command: `", stringify!($abi_req), "` + `", stringify!($drv_req), "`.")]
        #[repr(C)]
        #[derive(Default)]
        pub struct $name {
            pub ibv_cmd: $abi_req,
            pub drv_payload: $drv_req,
        }

        #[doc = concat!("Driver response: `", stringify!($kabi_resp), "` + `", stringify!($drv_resp), "`.")]
        #[repr(C)]
        #[derive(Default)]
        pub struct $resp {
            pub ibv_resp: $kabi_resp,
            pub drv_payload: $drv_resp,
        }

        impl $name {
            /// `(name, udata inlen, udata outlen)`: the bytes libibverbs hands to the kernel
            /// beyond the core request / response it knows (`_write_set_uhw`).
            pub const UDATA_LENS: (&'static str, usize, usize) = (
                stringify!($name),
                size_of::<$name>() - size_of::<$abi_req>(),
                size_of::<$resp>() - size_of::<$kabi_resp>(),
            );
        }

        const _: () = {
            assert!(size_of::<$kabi_req>() % align_of::<$drv_req>() == 0, "Bad kabi req struct length");
            assert!(offset_of!($name, drv_payload) == size_of::<$abi_req>());
            assert!(size_of::<$name>() == size_of::<$abi_req>() + size_of::<$drv_req>(), "Bad req size");
            assert!(size_of::<$name>() % $align == 0, "Bad kabi req alignment");
            assert!(size_of::<$kabi_resp>() % align_of::<$drv_resp>() == 0, "Bad kabi resp struct length");
            assert!(offset_of!($resp, drv_payload) == size_of::<$kabi_resp>());
            assert!(size_of::<$resp>() == size_of::<$kabi_resp>() + size_of::<$drv_resp>(), "Bad resp size");
            assert!(size_of::<$resp>() % $align == 0, "Bad kabi resp alignment");
        };
    };
}

declare_drv_cmd! {
    rrxe_get_context, rrxe_get_context_resp =
        ibv_get_context, ib_uverbs_get_context, ib_uverbs_get_context_resp, 4;
        AllocUcontextCmd, AllocUcontextResp
}

/// rdma-core's `struct empty {}`: a driver part of zero bytes (the kernel sees a udata length
/// of 0 on that side).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Empty {}

const _: () = assert!(size_of::<Empty>() == 0 && align_of::<Empty>() == 1);

declare_drv_cmd! {
    rrxe_alloc_pd, rrxe_alloc_pd_resp =
        ibv_alloc_pd, ib_uverbs_alloc_pd, ib_uverbs_alloc_pd_resp, 4;
        Empty, Empty
}

declare_drv_cmd! {
    rrxe_reg_mr, rrxe_reg_mr_resp =
        ibv_reg_mr, ib_uverbs_reg_mr, ib_uverbs_reg_mr_resp, 4;
        Empty, Empty
}

declare_drv_cmd! {
    rrxe_create_cq, rrxe_create_cq_resp =
        ibv_create_cq, ib_uverbs_create_cq, ib_uverbs_create_cq_resp, 4;
        Empty, rrxe_uapi::CreateCqResp
}

declare_drv_cmd! {
    rrxe_resize_cq, rrxe_resize_cq_resp =
        ibv_resize_cq, ib_uverbs_resize_cq, ib_uverbs_resize_cq_resp, 4;
        Empty, rrxe_uapi::CreateCqResp
}

declare_drv_cmd! {
    rrxe_create_qp, rrxe_create_qp_resp =
        ibv_create_qp, ib_uverbs_create_qp, ib_uverbs_create_qp_resp, 4;
        Empty, rrxe_uapi::CreateQpResp
}

declare_drv_cmd! {
    rrxe_create_qp_ex, rrxe_create_qp_ex_resp =
        ibv_create_qp_ex, ib_uverbs_ex_create_qp, ib_uverbs_ex_create_qp_resp, 8;
        Empty, rrxe_uapi::CreateQpResp
}

declare_drv_cmd! {
    rrxe_create_ah, rrxe_create_ah_resp =
        ibv_create_ah, ib_uverbs_create_ah, ib_uverbs_create_ah_resp, 4;
        Empty, rrxe_uapi::CreateAhResp
}

declare_drv_cmd! {
    rrxe_create_srq, rrxe_create_srq_resp =
        ibv_create_srq, ib_uverbs_create_srq, ib_uverbs_create_srq_resp, 4;
        Empty, rrxe_uapi::CreateSrqResp
}

/// The driver udata lengths (bytes) the kernel sees for each rrxe command: `(name, inlen,
/// outlen)`. No command carries driver input beyond GET_CONTEXT; the ring-backed objects (CQ,
/// QP, SRQ) and AHs carry their driver response; see README.md.
pub const DRV_UDATA_LENS: &[(&str, usize, usize)] = &[
    rrxe_get_context::UDATA_LENS,
    rrxe_alloc_pd::UDATA_LENS,
    rrxe_reg_mr::UDATA_LENS,
    rrxe_create_cq::UDATA_LENS,
    rrxe_resize_cq::UDATA_LENS,
    rrxe_create_qp::UDATA_LENS,
    rrxe_create_qp_ex::UDATA_LENS,
    rrxe_create_ah::UDATA_LENS,
    rrxe_create_srq::UDATA_LENS,
];

// The udata sizes the kernel sees for GET_CONTEXT (inlen / outlen); see README.md.
const _: () = {
    assert!(size_of::<rrxe_get_context>() == 24);
    assert!(size_of::<rrxe_get_context>() - size_of::<ibv_get_context>() == 8);
    assert!(size_of::<rrxe_get_context_resp>() == 24);
    assert!(size_of::<rrxe_get_context_resp>() - size_of::<ib_uverbs_get_context_resp>() == 16);
};
