//! Compiles kmod's pure logic on the host, exactly as the kernel module compiles it.
//!
//! A plain `cargo build` builds this crate as `no_std`, which proves that `kmod/logic` needs
//! nothing from `std`; the tests under `tests/` then exercise it with the full host toolbox.
#![cfg_attr(not(test), no_std)]

#[path = "../../../kmod/logic/mod.rs"]
pub mod logic;

/// The ABI crate under the name the kernel crate gives it (`crate::uapi`), for `logic`.
pub use rrxe_uapi as uapi;
