//! The rrxe kernel <-> provider ABI.
//!
//! The definitions live in [`rrxe_abi.rs`](rrxe_abi) so that the kernel module can include the
//! very same file by path (`#[path = "../uapi/src/rrxe_abi.rs"]`); this crate root only adds the
//! `no_std` attribute for userspace users.
#![no_std]

mod rrxe_abi;
pub use rrxe_abi::*;
