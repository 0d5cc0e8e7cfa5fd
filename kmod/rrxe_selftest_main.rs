// SPDX-License-Identifier: GPL-2.0-only
//! rrxe_selftest: a test-only module (never loaded in production) that cross-checks rrxe's QP
//! transition rules (`logic::qp_state`) against ib_core's exported `ib_modify_qp_is_ok()`.
//!
//! On load it compares both on every (current state, next state, QP type) triple, for the
//! required mask, required|optional, each single-bit variation of those two masks, the empty
//! mask and `IB_QP_STATE` alone, plus `IB_QP_RATE_LIMIT`. It prints one summary line and fails
//! to load (`EINVAL`) if anything differs, naming the first mismatches.

use kernel::prelude::*;

#[path = "ib/bindings.rs"]
mod bindings;
// This module uses one file of `logic` (`qp_state`); the rest is rrxe's, whose per-item
// `expect(dead_code)` judge rrxe, not this module.
#[allow(dead_code, unreachable_pub, unfulfilled_lint_expectations)]
mod logic;
#[allow(dead_code, unreachable_pub)]
#[path = "../uapi/src/rrxe_abi.rs"]
mod uapi;

use logic::qp_state::{transition_masks, AttrMask, QpState, QpType};

module! {
    type: Selftest,
    name: "rrxe_selftest",
    author: "The rrxe developers",
    description: "rrxe test-only module: QP rules vs ib_modify_qp_is_ok()",
    license: "GPL",
}

struct Selftest;

fn core_says(cur: QpState, next: QpState, t: QpType, mask: u32) -> bool {
    // SAFETY: `ib_modify_qp_is_ok` only reads its static table; `cur`/`next` are valid
    // `enum ib_qp_state` values and `t` a valid `enum ib_qp_type`, so it stays in bounds.
    unsafe { bindings::ib_modify_qp_is_ok(cur.as_raw(), next.as_raw(), t.as_raw(), mask) }
}

impl kernel::Module for Selftest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let (mut checked, mut mismatches) = (0u32, 0u32);
        for cur in QpState::ALL {
            for next in QpState::ALL {
                for t in QpType::ALL {
                    let (req, opt) = transition_masks(cur, next, t)
                        .unwrap_or((AttrMask::EMPTY, AttrMask::EMPTY));
                    let state = AttrMask::STATE.bits();
                    let base = [req.bits() | state, req.bits() | opt.bits() | state];
                    let mut masks = KVec::with_capacity(64, GFP_KERNEL)?;
                    masks.push(0u32, GFP_KERNEL)?;
                    masks.push(state, GFP_KERNEL)?;
                    masks.push(req.bits() | state | (1 << 25), GFP_KERNEL)?;
                    for m in base {
                        masks.push(m, GFP_KERNEL)?;
                        for bit in 0..21 {
                            masks.push(m ^ (1 << bit), GFP_KERNEL)?;
                        }
                    }
                    for &m in masks.iter() {
                        checked += 1;
                        let ours =
                            logic::qp_state::modify_is_ok(cur, next, t, AttrMask::from_bits(m));
                        if ours != core_says(cur, next, t, m) {
                            mismatches += 1;
                            if mismatches <= 10 {
                                pr_err!(
                                    "mismatch: cur={:?} next={:?} type={:?} mask={:#x} rrxe={}\n",
                                    cur,
                                    next,
                                    t,
                                    m,
                                    ours
                                );
                            }
                        }
                    }
                }
            }
        }
        pr_info!(
            "ib_modify_qp_is_ok cross-check: {} cases, {} mismatches\n",
            checked,
            mismatches
        );
        if mismatches != 0 {
            return Err(EINVAL);
        }
        Ok(Selftest)
    }
}
