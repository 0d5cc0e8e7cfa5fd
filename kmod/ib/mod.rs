// SPDX-License-Identifier: GPL-2.0-only
//! The abstraction layer: safe Rust types over ib_core and the netdev core.
//!
//! This directory is the only place in rrxe with `unsafe` code. It turns C callbacks into calls
//! of the [`device::IbDriver`] and [`link::LinkDriver`] traits through `extern "C"` trampolines,
//! owns the lifetime rules of the C objects (who allocates, who frees, which references are
//! held) and states each rule where it is relied on (`// SAFETY:` / `// INVARIANT:`). The driver
//! in `verbs/` is written against these types in safe Rust.

pub(crate) mod bh;
pub(crate) mod bindings;
pub(crate) mod device;
pub(crate) mod driver;
pub(crate) mod inflight;
pub(crate) mod kmem;
pub(crate) mod kverbs;
pub(crate) mod link;
pub(crate) mod netdev;
pub(crate) mod objects;
pub(crate) mod ops;
pub(crate) mod restrack;
pub(crate) mod ring;
pub(crate) mod route;
pub(crate) mod rxtable;
pub(crate) mod sysfs;

pub(crate) mod timer;
pub(crate) mod udata;

pub(crate) mod udp;

pub(crate) mod umem;
pub(crate) mod work;

use kernel::error::Error;

/// The `Error` for a positive errno: one of `logic::errno`'s, or a binding's constant.
pub(crate) fn errno(e: i32) -> Error {
    Error::from_errno(-e)
}

/// `EOPNOTSUPP`, which `kernel::error::code` lacks in 6.12.
pub(crate) fn eopnotsupp() -> Error {
    errno(crate::logic::errno::EOPNOTSUPP)
}

/// `EPROTO`, which `kernel::error::code` lacks in 6.12.
pub(crate) fn eproto() -> Error {
    Error::from_errno(-(bindings::EPROTO as i32))
}

/// A fresh random 32-bit value (`get_random_u32`); any context.
pub(crate) fn random_u32() -> u32 {
    // SAFETY: `get_random_u32` has no preconditions and may be called in any context.
    unsafe { bindings::get_random_u32() }
}

/// Whether a message may be printed now (the kernel's shared printk rate limit, as
/// `printk_ratelimit()`): for messages that user space can trigger at will.
pub(crate) fn printk_ratelimit() -> bool {
    // SAFETY: `__printk_ratelimit` takes a NUL-terminated name (used in its "callbacks
    // suppressed" message) and may be called in any context.
    unsafe { bindings::__printk_ratelimit(c"rrxe".as_ptr().cast()) != 0 }
}
