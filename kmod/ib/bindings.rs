// SPDX-License-Identifier: GPL-2.0-only
//! rrxe's RDMA bindings, generated at build time by bindgen (see `Kbuild`).
//!
//! Items the kernel crate already binds come from `kernel::bindings` (the glob below); the
//! generated file adds ib_core's types and functions, plus full definitions of the types the
//! kernel crate only has as placeholders (`net_device`, ...). Only `ib/` may use this module.
#![allow(
    clippy::all,
    missing_docs,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    dead_code,
    unused_imports,
    clippy::undocumented_unsafe_blocks,
    unnecessary_transmutes
)]

pub(crate) use kernel::bindings::*;
use kernel::ffi;

// `rust/bindgen_parameters` maps these to Rust types by hand; do the same.
type __kernel_size_t = usize;
type __kernel_ssize_t = isize;
type __kernel_ptrdiff_t = isize;

include!("rrxe_bindings_generated.rs");
