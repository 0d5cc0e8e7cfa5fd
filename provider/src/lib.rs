//! librrxe: the rdma-core userspace provider of rrxe (Soft-RoCE in Rust).
//!
//! Built as `librrxe.so` and installed as `librrxe-rdmav34.so`: libibverbs 44 (Debian 12)
//! `dlopen`s it, its ELF constructor registers [`provider::RRXE_DEVICE_OPS`] through
//! `verbs_register_driver_34`, and libibverbs then calls the trampolines in [`device`] and
//! [`context`].
//!
//! Layout: `abi/` declares everything shared with libibverbs and the kernel (and holds most
//! of the `unsafe`), `device`/`context`/`pd`/`cq`/`qp`/`srq`/`ah` are the thin `extern "C"` trampolines, `util` the
//! pure, unit-tested logic. Set `RRXE_DEBUG=1` for a trace on stderr.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod abi;
pub mod ah;
pub mod context;
pub mod cq;
pub mod device;
mod log;
pub mod mw;
pub mod pd;
pub mod provider;
pub mod qp;
pub mod qp_ex;
pub mod ring;
pub mod srq;
pub mod sync;
pub mod util;
pub mod wr_batch;

#[cfg(test)]
mod mock_tests;

#[cfg(test)]
mod cq_tests;
