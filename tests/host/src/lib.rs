//! Compiles kmod's pure logic on the host, exactly as the kernel module compiles it.
//!
//! A plain `cargo build` builds this crate as `no_std`, which proves that `kmod/logic` needs
//! nothing from `std`; the tests under `tests/` then exercise it with the full host toolbox.
#![cfg_attr(not(test), no_std)]
// `logic` keeps to the kernel's minimum Rust (1.78, its clippy MSRV), so it writes `x % n == 0`
// where newer code would call `is_multiple_of` (Rust 1.87).
#![allow(clippy::manual_is_multiple_of)]

#[path = "../../../kmod/logic/mod.rs"]
pub mod logic;

/// The ABI crate under the name the kernel crate gives it (`crate::uapi`), for `logic`.
pub use rrxe_uapi as uapi;
