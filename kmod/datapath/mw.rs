// SPDX-License-Identifier: GPL-2.0-only
//! Memory windows as the data path sees them. Allocated by `verbs/mw.rs`; bound, invalidated and
//! resolved in SQ order by the QP's engine environment (`qp/env.rs`).

use crate::logic::mw::Window;
use kernel::{new_spinlock, prelude::*, sync::SpinLock};

/// A memory window as the data path sees it: its state, under its lock (taken inside the QP
/// lock; a table lookup may be made under it).
#[pin_data]
pub(crate) struct MwInner {
    #[pin]
    pub(crate) win: SpinLock<Window>,
}

impl MwInner {
    pub(crate) fn new(win: Window) -> impl PinInit<Self> {
        pin_init!(MwInner {
            win <- new_spinlock!(win, "rrxe:mw"),
        })
    }
}
