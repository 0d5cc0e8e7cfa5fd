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

/// Version of the driver-private udata ABI defined in this file.
pub const UABI_VERSION: u32 = 1;

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
    /// Must be zero.
    pub reserved: u32,
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
    /// Must be zero.
    pub reserved: u32,
}

// Layout pins: these are part of the ABI.
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<AllocUcontextCmd>() == 8);
    assert!(align_of::<AllocUcontextCmd>() == 4);
    assert!(offset_of!(AllocUcontextCmd, uabi_version) == 0);
    assert!(offset_of!(AllocUcontextCmd, reserved) == 4);
    assert!(size_of::<AllocUcontextResp>() == 16);
    assert!(align_of::<AllocUcontextResp>() == 4);
    assert!(offset_of!(AllocUcontextResp, magic) == 0);
    assert!(offset_of!(AllocUcontextResp, uabi_version) == 4);
    assert!(offset_of!(AllocUcontextResp, max_inline_data) == 8);
    assert!(offset_of!(AllocUcontextResp, reserved) == 12);
};
