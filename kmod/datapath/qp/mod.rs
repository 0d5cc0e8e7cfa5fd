// SPDX-License-Identifier: GPL-2.0-only
//! A QP's data-path half: its state under the QP lock, creation, the application of a modify
//! and shutdown (`state.rs`), the doorbells (`send.rs`), scheduling and timers (`sched.rs`), and
//! the engine's environment (`env.rs`). The verbs (`verbs/qp/`) create, modify and destroy it.

mod env;
mod sched;
mod send;
mod state;

pub(crate) use state::{Eng, QpInner, QpParts};
