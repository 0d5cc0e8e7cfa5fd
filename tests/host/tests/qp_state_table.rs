//! The QP state table against an independent transcription of Linux 6.12's `qp_state_table`.
//!
//! The data below was not written from `kmod/logic/qp_state.rs`: [`VALID`] and [`ROWS`] were
//! dumped by compiling the real `qp_state_table` and `ib_modify_qp_is_ok()` (lines 1400..1731 of
//! `drivers/infiniband/core/verbs.c` in linux-source-6.12, with the enums from
//! `include/rdma/ib_verbs.h`) with gcc and printing `valid`, `req_param[t]` and `opt_param[t]`
//! for every `[cur][next]` and every `t < IB_QPT_MAX`; entries whose masks are both 0 are left
//! out. The oracle [`c_is_ok`] is `ib_modify_qp_is_ok()` rewritten by hand on raw numbers.
//! `qp_state_c_digest.rs` additionally compares against the compiled C function over every
//! standard mask.
//!
//! The mask bit values here are numbers from `enum ib_qp_attr_mask`, not the crate's constants.

use proptest::prelude::*;
use rrxe_host_tests::logic::qp_state::{
    modify_is_ok, modify_is_ok_raw, transition_is_valid, transition_masks, AttrMask, QpState,
    QpType,
};

// enum ib_qp_attr_mask (include/rdma/ib_verbs.h).
const STATE: u32 = 0x1;
const CUR_STATE: u32 = 0x2;
const EN_SQD_ASYNC_NOTIFY: u32 = 0x4;
const ACCESS_FLAGS: u32 = 0x8;
const PKEY_INDEX: u32 = 0x10;
const PORT: u32 = 0x20;
const QKEY: u32 = 0x40;
const AV: u32 = 0x80;
const PATH_MTU: u32 = 0x100;
const TIMEOUT: u32 = 0x200;
const RETRY_CNT: u32 = 0x400;
const RNR_RETRY: u32 = 0x800;
const RQ_PSN: u32 = 0x1000;
const MAX_QP_RD_ATOMIC: u32 = 0x2000;
const ALT_PATH: u32 = 0x4000;
const MIN_RNR_TIMER: u32 = 0x8000;
const SQ_PSN: u32 = 0x10000;
const MAX_DEST_RD_ATOMIC: u32 = 0x20000;
const PATH_MIG_STATE: u32 = 0x40000;
const CAP: u32 = 0x80000;
const DEST_QPN: u32 = 0x100000;
const RATE_LIMIT: u32 = 0x2000000;

// enum ib_qp_state.
const RESET: u32 = 0;
const INIT: u32 = 1;
const RTR: u32 = 2;
const RTS: u32 = 3;
const SQD: u32 = 4;
const SQE: u32 = 5;
const ERR: u32 = 6;

// enum ib_qp_type.
const SMI: u32 = 0;
const GSI: u32 = 1;
const RC: u32 = 2;
const UC: u32 = 3;
const UD: u32 = 4;
const RAW_IPV6: u32 = 5;
const RAW_ETHERTYPE: u32 = 6;
const RAW_PACKET: u32 = 8;
const XRC_INI: u32 = 9;
const XRC_TGT: u32 = 10;
const IB_QPT_MAX: u32 = 11;
const IB_QPT_DRIVER: u32 = 0xff;

/// `qp_state_table[cur][next].valid`.
const VALID: [[bool; 7]; 7] = [
    // next: RESET  INIT   RTR    RTS    SQD    SQE    ERR
    [true, true, false, false, false, false, false], // RESET
    [true, true, true, false, false, false, true],   // INIT
    [true, false, false, true, false, false, true],  // RTR
    [true, false, false, true, true, false, true],   // RTS
    [true, false, false, true, true, false, true],   // SQD
    [true, false, false, true, false, false, true],  // SQE
    [true, false, false, false, false, false, true], // ERR
];

/// One non-zero `(req_param[t], opt_param[t])` of `qp_state_table[cur][next]`.
struct Row {
    cur: u32,
    next: u32,
    qp_type: u32,
    req: u32,
    opt: u32,
}

/// Every non-zero column of `qp_state_table`, in verbs.c order (63 entries).
const ROWS: &[Row] = &[
    Row {
        cur: RESET,
        next: INIT,
        qp_type: SMI,
        req: PKEY_INDEX | QKEY,
        opt: 0,
    },
    Row {
        cur: RESET,
        next: INIT,
        qp_type: GSI,
        req: PKEY_INDEX | QKEY,
        opt: 0,
    },
    Row {
        cur: RESET,
        next: INIT,
        qp_type: RC,
        req: ACCESS_FLAGS | PKEY_INDEX | PORT,
        opt: 0,
    },
    Row {
        cur: RESET,
        next: INIT,
        qp_type: UC,
        req: ACCESS_FLAGS | PKEY_INDEX | PORT,
        opt: 0,
    },
    Row {
        cur: RESET,
        next: INIT,
        qp_type: UD,
        req: PKEY_INDEX | PORT | QKEY,
        opt: 0,
    },
    Row {
        cur: RESET,
        next: INIT,
        qp_type: RAW_PACKET,
        req: PORT,
        opt: 0,
    },
    Row {
        cur: RESET,
        next: INIT,
        qp_type: XRC_INI,
        req: ACCESS_FLAGS | PKEY_INDEX | PORT,
        opt: 0,
    },
    Row {
        cur: RESET,
        next: INIT,
        qp_type: XRC_TGT,
        req: ACCESS_FLAGS | PKEY_INDEX | PORT,
        opt: 0,
    },
    Row {
        cur: INIT,
        next: INIT,
        qp_type: SMI,
        req: 0,
        opt: PKEY_INDEX | QKEY,
    },
    Row {
        cur: INIT,
        next: INIT,
        qp_type: GSI,
        req: 0,
        opt: PKEY_INDEX | QKEY,
    },
    Row {
        cur: INIT,
        next: INIT,
        qp_type: RC,
        req: 0,
        opt: ACCESS_FLAGS | PKEY_INDEX | PORT,
    },
    Row {
        cur: INIT,
        next: INIT,
        qp_type: UC,
        req: 0,
        opt: ACCESS_FLAGS | PKEY_INDEX | PORT,
    },
    Row {
        cur: INIT,
        next: INIT,
        qp_type: UD,
        req: 0,
        opt: PKEY_INDEX | PORT | QKEY,
    },
    Row {
        cur: INIT,
        next: INIT,
        qp_type: XRC_INI,
        req: 0,
        opt: ACCESS_FLAGS | PKEY_INDEX | PORT,
    },
    Row {
        cur: INIT,
        next: INIT,
        qp_type: XRC_TGT,
        req: 0,
        opt: ACCESS_FLAGS | PKEY_INDEX | PORT,
    },
    Row {
        cur: INIT,
        next: RTR,
        qp_type: SMI,
        req: 0,
        opt: PKEY_INDEX | QKEY,
    },
    Row {
        cur: INIT,
        next: RTR,
        qp_type: GSI,
        req: 0,
        opt: PKEY_INDEX | QKEY,
    },
    Row {
        cur: INIT,
        next: RTR,
        qp_type: RC,
        req: AV | PATH_MTU | RQ_PSN | MIN_RNR_TIMER | MAX_DEST_RD_ATOMIC | DEST_QPN,
        opt: ACCESS_FLAGS | PKEY_INDEX | ALT_PATH,
    },
    Row {
        cur: INIT,
        next: RTR,
        qp_type: UC,
        req: AV | PATH_MTU | RQ_PSN | DEST_QPN,
        opt: ACCESS_FLAGS | PKEY_INDEX | ALT_PATH,
    },
    Row {
        cur: INIT,
        next: RTR,
        qp_type: UD,
        req: 0,
        opt: PKEY_INDEX | QKEY,
    },
    Row {
        cur: INIT,
        next: RTR,
        qp_type: XRC_INI,
        req: AV | PATH_MTU | RQ_PSN | DEST_QPN,
        opt: ACCESS_FLAGS | PKEY_INDEX | ALT_PATH,
    },
    Row {
        cur: INIT,
        next: RTR,
        qp_type: XRC_TGT,
        req: AV | PATH_MTU | RQ_PSN | MIN_RNR_TIMER | MAX_DEST_RD_ATOMIC | DEST_QPN,
        opt: ACCESS_FLAGS | PKEY_INDEX | ALT_PATH,
    },
    Row {
        cur: RTR,
        next: RTS,
        qp_type: SMI,
        req: SQ_PSN,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: RTR,
        next: RTS,
        qp_type: GSI,
        req: SQ_PSN,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: RTR,
        next: RTS,
        qp_type: RC,
        req: TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC | SQ_PSN,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | MIN_RNR_TIMER | PATH_MIG_STATE,
    },
    Row {
        cur: RTR,
        next: RTS,
        qp_type: UC,
        req: SQ_PSN,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE,
    },
    Row {
        cur: RTR,
        next: RTS,
        qp_type: UD,
        req: SQ_PSN,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: RTR,
        next: RTS,
        qp_type: RAW_PACKET,
        req: 0,
        opt: RATE_LIMIT,
    },
    Row {
        cur: RTR,
        next: RTS,
        qp_type: XRC_INI,
        req: TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC | SQ_PSN,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE,
    },
    Row {
        cur: RTR,
        next: RTS,
        qp_type: XRC_TGT,
        req: TIMEOUT | SQ_PSN,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | MIN_RNR_TIMER | PATH_MIG_STATE,
    },
    Row {
        cur: RTS,
        next: RTS,
        qp_type: SMI,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: RTS,
        next: RTS,
        qp_type: GSI,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: RTS,
        next: RTS,
        qp_type: RC,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | MIN_RNR_TIMER | PATH_MIG_STATE,
    },
    Row {
        cur: RTS,
        next: RTS,
        qp_type: UC,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE,
    },
    Row {
        cur: RTS,
        next: RTS,
        qp_type: UD,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: RTS,
        next: RTS,
        qp_type: RAW_PACKET,
        req: 0,
        opt: RATE_LIMIT,
    },
    Row {
        cur: RTS,
        next: RTS,
        qp_type: XRC_INI,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE,
    },
    Row {
        cur: RTS,
        next: RTS,
        qp_type: XRC_TGT,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | MIN_RNR_TIMER | PATH_MIG_STATE,
    },
    Row {
        cur: RTS,
        next: SQD,
        qp_type: SMI,
        req: 0,
        opt: EN_SQD_ASYNC_NOTIFY,
    },
    Row {
        cur: RTS,
        next: SQD,
        qp_type: GSI,
        req: 0,
        opt: EN_SQD_ASYNC_NOTIFY,
    },
    Row {
        cur: RTS,
        next: SQD,
        qp_type: RC,
        req: 0,
        opt: EN_SQD_ASYNC_NOTIFY,
    },
    Row {
        cur: RTS,
        next: SQD,
        qp_type: UC,
        req: 0,
        opt: EN_SQD_ASYNC_NOTIFY,
    },
    Row {
        cur: RTS,
        next: SQD,
        qp_type: UD,
        req: 0,
        opt: EN_SQD_ASYNC_NOTIFY,
    },
    Row {
        cur: RTS,
        next: SQD,
        qp_type: XRC_INI,
        req: 0,
        opt: EN_SQD_ASYNC_NOTIFY,
    },
    Row {
        cur: RTS,
        next: SQD,
        qp_type: XRC_TGT,
        req: 0,
        opt: EN_SQD_ASYNC_NOTIFY,
    },
    Row {
        cur: SQD,
        next: RTS,
        qp_type: SMI,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: SQD,
        next: RTS,
        qp_type: GSI,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: SQD,
        next: RTS,
        qp_type: RC,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | MIN_RNR_TIMER | PATH_MIG_STATE,
    },
    Row {
        cur: SQD,
        next: RTS,
        qp_type: UC,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE,
    },
    Row {
        cur: SQD,
        next: RTS,
        qp_type: UD,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: SQD,
        next: RTS,
        qp_type: XRC_INI,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE,
    },
    Row {
        cur: SQD,
        next: RTS,
        qp_type: XRC_TGT,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS | ALT_PATH | MIN_RNR_TIMER | PATH_MIG_STATE,
    },
    Row {
        cur: SQD,
        next: SQD,
        qp_type: SMI,
        req: 0,
        opt: PKEY_INDEX | QKEY,
    },
    Row {
        cur: SQD,
        next: SQD,
        qp_type: GSI,
        req: 0,
        opt: PKEY_INDEX | QKEY,
    },
    Row {
        cur: SQD,
        next: SQD,
        qp_type: RC,
        req: 0,
        opt: ACCESS_FLAGS
            | PKEY_INDEX
            | PORT
            | AV
            | TIMEOUT
            | RETRY_CNT
            | RNR_RETRY
            | MAX_QP_RD_ATOMIC
            | ALT_PATH
            | MIN_RNR_TIMER
            | MAX_DEST_RD_ATOMIC
            | PATH_MIG_STATE,
    },
    Row {
        cur: SQD,
        next: SQD,
        qp_type: UC,
        req: 0,
        opt: ACCESS_FLAGS | PKEY_INDEX | AV | ALT_PATH | PATH_MIG_STATE,
    },
    Row {
        cur: SQD,
        next: SQD,
        qp_type: UD,
        req: 0,
        opt: PKEY_INDEX | QKEY,
    },
    Row {
        cur: SQD,
        next: SQD,
        qp_type: XRC_INI,
        req: 0,
        opt: ACCESS_FLAGS
            | PKEY_INDEX
            | PORT
            | AV
            | TIMEOUT
            | RETRY_CNT
            | RNR_RETRY
            | MAX_QP_RD_ATOMIC
            | ALT_PATH
            | PATH_MIG_STATE,
    },
    Row {
        cur: SQD,
        next: SQD,
        qp_type: XRC_TGT,
        req: 0,
        opt: ACCESS_FLAGS
            | PKEY_INDEX
            | PORT
            | AV
            | TIMEOUT
            | ALT_PATH
            | MIN_RNR_TIMER
            | MAX_DEST_RD_ATOMIC
            | PATH_MIG_STATE,
    },
    Row {
        cur: SQE,
        next: RTS,
        qp_type: SMI,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: SQE,
        next: RTS,
        qp_type: GSI,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
    Row {
        cur: SQE,
        next: RTS,
        qp_type: UC,
        req: 0,
        opt: CUR_STATE | ACCESS_FLAGS,
    },
    Row {
        cur: SQE,
        next: RTS,
        qp_type: UD,
        req: 0,
        opt: CUR_STATE | QKEY,
    },
];

/// `(valid, req, opt)` of the C table for in-range arguments; `None` when C would index out of
/// bounds.
fn c_entry(cur: u32, next: u32, qp_type: u32) -> Option<(bool, u32, u32)> {
    if cur > ERR || next > ERR || qp_type >= IB_QPT_MAX {
        return None;
    }
    let valid = VALID[cur as usize][next as usize];
    let (req, opt) = ROWS
        .iter()
        .find(|r| r.cur == cur && r.next == next && r.qp_type == qp_type)
        .map_or((0, 0), |r| (r.req, r.opt));
    Some((valid, req, opt))
}

/// `ib_modify_qp_is_ok()` by hand, on raw values; `None` where C has undefined behaviour.
fn c_is_ok(cur: u32, next: u32, qp_type: u32, mask: u32) -> Option<bool> {
    let (valid, req, opt) = c_entry(cur, next, qp_type)?;
    if mask & CUR_STATE != 0 && cur != RTR && cur != RTS && cur != SQD && cur != SQE {
        return Some(false);
    }
    if !valid {
        return Some(false);
    }
    if mask & req != req {
        return Some(false);
    }
    Some(mask & !(req | opt | STATE) == 0)
}

/// What `modify_is_ok_raw` must answer: C's answer, except false where C is undefined and for
/// type 7 (a hole in `enum ib_qp_type` that no QP can have; C reads an all-zero column).
fn expected_raw(cur: u32, next: u32, qp_type: u32, mask: u32) -> bool {
    qp_type != 7 && c_is_ok(cur, next, qp_type, mask).unwrap_or(false)
}

/// Raw states tried: all 7 plus the first out-of-range value and the largest.
const RAW_STATES: [u32; 9] = [0, 1, 2, 3, 4, 5, 6, 7, u32::MAX];

/// Raw types tried: every index of the C table (incl. the hole 7), `IB_QPT_MAX`,
/// `IB_QPT_DRIVER` and the first reserved type.
const RAW_TYPES: [u32; 14] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xff, 0x1000];

/// Masks that probe every boundary of a `(req, opt)` pair: empty; each single bit alone and
/// with STATE; the required set with and without STATE and optionals; everything allowed plus
/// each single extra bit; everything allowed minus each single required bit; CUR_STATE added.
fn structured_masks(req: u32, opt: u32) -> Vec<u32> {
    let all = req | opt | STATE;
    let mut masks = vec![0, req, req | STATE, req | opt, all, req | CUR_STATE | STATE];
    for bit in 0..32 {
        let b = 1u32 << bit;
        masks.push(b);
        masks.push(STATE | b);
        masks.push(req | STATE | b);
        masks.push(all | b);
        if req & b != 0 {
            masks.push(all & !b);
        }
    }
    masks
}

fn state(raw: u32) -> QpState {
    QpState::from_raw(raw).unwrap()
}

fn qp_type(raw: u32) -> QpType {
    QpType::from_raw(raw).unwrap()
}

#[test]
fn transcription_is_well_formed() {
    assert_eq!(ROWS.len(), 63);
    for r in ROWS {
        assert!(
            VALID[r.cur as usize][r.next as usize],
            "row on an invalid pair"
        );
        assert_eq!(r.req & r.opt, 0, "a bit both required and optional");
        assert_eq!((r.req | r.opt) & STATE, 0, "STATE listed in the table");
        assert!(r.qp_type < IB_QPT_MAX && r.qp_type != 7);
    }
    // No duplicate (cur, next, type).
    for (i, a) in ROWS.iter().enumerate() {
        for b in &ROWS[i + 1..] {
            assert!((a.cur, a.next, a.qp_type) != (b.cur, b.next, b.qp_type));
        }
    }
}

#[test]
fn transition_validity_matrix_matches_verbs_c() {
    for cur in QpState::ALL {
        for next in QpState::ALL {
            assert_eq!(
                transition_is_valid(cur, next),
                VALID[cur.as_raw() as usize][next.as_raw() as usize],
                "{cur:?} -> {next:?}"
            );
        }
    }
}

#[test]
fn required_and_optional_masks_match_verbs_c_for_every_pair_and_type() {
    let mut checked = 0;
    for cur in QpState::ALL {
        for next in QpState::ALL {
            for t in QpType::ALL {
                let (valid, req, opt) = c_entry(cur.as_raw(), next.as_raw(), t.as_raw()).unwrap();
                let got = transition_masks(cur, next, t);
                if valid {
                    let (r, o) = got.unwrap_or_else(|| panic!("{cur:?}->{next:?} {t:?} invalid"));
                    assert_eq!(
                        (r.bits(), o.bits()),
                        (req, opt),
                        "{cur:?} -> {next:?} {t:?}"
                    );
                } else {
                    assert_eq!(got, None, "{cur:?} -> {next:?} {t:?}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 7 * 7 * 10);
}

#[test]
fn modify_is_ok_raw_agrees_with_verbs_c_on_every_boundary_mask() {
    let mut cases = 0u64;
    for cur in RAW_STATES {
        for next in RAW_STATES {
            for t in RAW_TYPES {
                // The boundaries of this entry, and of every real entry (so that masks built for
                // one type are also tried on the others).
                let (_, req, opt) = c_entry(cur, next, t).unwrap_or((false, 0, 0));
                let mut masks = structured_masks(req, opt);
                for other in 0..IB_QPT_MAX {
                    if let Some((_, r, o)) = c_entry(cur, next, other) {
                        masks.extend(structured_masks(r, o));
                    }
                }
                for mask in masks {
                    assert_eq!(
                        modify_is_ok_raw(cur, next, t, mask),
                        expected_raw(cur, next, t, mask),
                        "cur {cur} next {next} type {t} mask {mask:#x}"
                    );
                    cases += 1;
                }
            }
        }
    }
    // 9 * 9 * 14 (cur, next, type) triples, each with ~12 mask families of up to 130 masks.
    assert!(cases > 1_000_000, "{cases}");
}

#[test]
fn modify_is_ok_typed_equals_raw_for_every_in_range_input() {
    for cur in QpState::ALL {
        for next in QpState::ALL {
            for t in QpType::ALL {
                let (req, opt) = transition_masks(cur, next, t).unwrap_or_default();
                for mask in structured_masks(req.bits(), opt.bits()) {
                    assert_eq!(
                        modify_is_ok(cur, next, t, AttrMask::from_bits(mask)),
                        modify_is_ok_raw(cur.as_raw(), next.as_raw(), t.as_raw(), mask),
                    );
                }
            }
        }
    }
}

#[test]
fn out_of_range_states_and_types_are_never_ok() {
    for mask in [0, STATE, u32::MAX] {
        for bad in [7, 8, 0xff, u32::MAX] {
            for good in 0..=6 {
                assert!(!modify_is_ok_raw(bad, good, RC, mask));
                assert!(!modify_is_ok_raw(good, bad, RC, mask));
            }
        }
        for bad_type in [7, IB_QPT_MAX, IB_QPT_DRIVER, 0x1000, u32::MAX] {
            for cur in 0..=6 {
                for next in 0..=6 {
                    assert!(!modify_is_ok_raw(cur, next, bad_type, mask));
                }
            }
        }
    }
}

#[test]
fn reset_to_err_is_invalid_for_every_type() {
    for t in QpType::ALL {
        assert!(!modify_is_ok(
            QpState::Reset,
            QpState::Err,
            t,
            AttrMask::STATE
        ));
    }
}

#[test]
fn rtr_to_rtr_is_invalid_for_every_type() {
    for t in QpType::ALL {
        assert_eq!(transition_masks(QpState::Rtr, QpState::Rtr, t), None);
        assert!(!modify_is_ok(
            QpState::Rtr,
            QpState::Rtr,
            t,
            AttrMask::STATE
        ));
    }
}

#[test]
fn init_to_rts_is_invalid_for_every_type() {
    for t in QpType::ALL {
        assert!(!modify_is_ok(
            QpState::Init,
            QpState::Rts,
            t,
            AttrMask::STATE
        ));
    }
}

#[test]
fn reset_to_init_rc_requires_exactly_pkey_port_access() {
    let (req, opt) = transition_masks(QpState::Reset, QpState::Init, QpType::Rc).unwrap();
    assert_eq!(req.bits(), PKEY_INDEX | PORT | ACCESS_FLAGS);
    assert!(opt.is_empty());
    let full = AttrMask::from_bits(STATE | PKEY_INDEX | PORT | ACCESS_FLAGS);
    assert!(modify_is_ok(
        QpState::Reset,
        QpState::Init,
        QpType::Rc,
        full
    ));
    for missing in [PKEY_INDEX, PORT, ACCESS_FLAGS] {
        let m = AttrMask::from_bits(full.bits() & !missing);
        assert!(!modify_is_ok(QpState::Reset, QpState::Init, QpType::Rc, m));
    }
    // QKEY is a UD attribute.
    let with_qkey = AttrMask::from_bits(full.bits() | QKEY);
    assert!(!modify_is_ok(
        QpState::Reset,
        QpState::Init,
        QpType::Rc,
        with_qkey
    ));
}

#[test]
fn init_to_rtr_rc_requires_av_mtu_dqpn_rq_psn_mdra_rnrt() {
    let (req, opt) = transition_masks(QpState::Init, QpState::Rtr, QpType::Rc).unwrap();
    assert_eq!(
        req.bits(),
        AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
    );
    assert_eq!(opt.bits(), ALT_PATH | ACCESS_FLAGS | PKEY_INDEX);
}

#[test]
fn rtr_to_rts_rc_requires_timeout_retry_rnr_retry_sq_psn_mra() {
    let (req, _) = transition_masks(QpState::Rtr, QpState::Rts, QpType::Rc).unwrap();
    assert_eq!(
        req.bits(),
        TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC
    );
}

#[test]
fn every_transition_to_reset_or_err_accepts_exactly_state() {
    for cur in QpState::ALL {
        for next in [QpState::Reset, QpState::Err] {
            for t in QpType::ALL {
                let Some((req, opt)) = transition_masks(cur, next, t) else {
                    assert_eq!((cur, next), (QpState::Reset, QpState::Err));
                    continue;
                };
                assert!(req.is_empty() && opt.is_empty(), "{cur:?}->{next:?} {t:?}");
                assert!(modify_is_ok(cur, next, t, AttrMask::STATE));
                assert!(modify_is_ok(cur, next, t, AttrMask::EMPTY));
                for bit in 1..32 {
                    let m = AttrMask::from_bits(STATE | 1 << bit);
                    assert!(
                        !modify_is_ok(cur, next, t, m),
                        "{cur:?}->{next:?} {t:?} {m:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn state_bit_is_always_allowed_where_the_rest_of_the_mask_is() {
    for cur in QpState::ALL {
        for next in QpState::ALL {
            for t in QpType::ALL {
                let Some((req, opt)) = transition_masks(cur, next, t) else {
                    continue;
                };
                let m = req | opt;
                assert_eq!(
                    modify_is_ok(cur, next, t, m),
                    modify_is_ok(cur, next, t, m | AttrMask::STATE)
                );
            }
        }
    }
}

#[test]
fn cur_state_is_accepted_only_where_the_table_lists_it_optional() {
    for cur in QpState::ALL {
        for next in QpState::ALL {
            for t in QpType::ALL {
                let (_, req, opt) = c_entry(cur.as_raw(), next.as_raw(), t.as_raw()).unwrap();
                let m = AttrMask::from_bits(req | CUR_STATE | STATE);
                let listed =
                    VALID[cur.as_raw() as usize][next.as_raw() as usize] && opt & CUR_STATE != 0;
                assert_eq!(
                    modify_is_ok(cur, next, t, m),
                    listed,
                    "{cur:?}->{next:?} {t:?}"
                );
                if listed {
                    assert!(matches!(
                        cur,
                        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                    ));
                }
            }
        }
    }
}

#[test]
fn rate_limit_is_optional_only_for_raw_packet_into_rts() {
    for cur in QpState::ALL {
        for next in QpState::ALL {
            for t in QpType::ALL {
                let ok = modify_is_ok(cur, next, t, AttrMask::from_bits(STATE | RATE_LIMIT));
                let expected = t == QpType::RawPacket
                    && next == QpState::Rts
                    && matches!(cur, QpState::Rtr | QpState::Rts);
                assert_eq!(ok, expected, "{cur:?}->{next:?} {t:?}");
            }
        }
    }
}

#[test]
fn cap_and_en_sqd_masks_follow_the_table() {
    // IB_QP_CAP is in no row: never accepted.
    for cur in QpState::ALL {
        for next in QpState::ALL {
            for t in QpType::ALL {
                if let Some((req, opt)) = transition_masks(cur, next, t) {
                    assert!(!(req | opt).intersects(AttrMask::from_bits(CAP)));
                }
            }
        }
    }
    // EN_SQD_ASYNC_NOTIFY only on RTS -> SQD, for every type but the raw ones.
    for t in QpType::ALL {
        let ok = modify_is_ok(
            QpState::Rts,
            QpState::Sqd,
            t,
            AttrMask::from_bits(STATE | EN_SQD_ASYNC_NOTIFY),
        );
        let raw = matches!(
            t,
            QpType::RawIpv6 | QpType::RawEthertype | QpType::RawPacket
        );
        assert_eq!(ok, !raw, "{t:?}");
    }
}

#[test]
fn state_and_type_enums_carry_the_kernel_values() {
    for (raw, s) in [
        (RESET, QpState::Reset),
        (INIT, QpState::Init),
        (RTR, QpState::Rtr),
        (RTS, QpState::Rts),
        (SQD, QpState::Sqd),
        (SQE, QpState::Sqe),
        (ERR, QpState::Err),
    ] {
        assert_eq!(state(raw), s);
        assert_eq!(s.as_raw(), raw);
    }
    assert_eq!(QpState::from_raw(7), None);
    for (raw, t) in [
        (SMI, QpType::Smi),
        (GSI, QpType::Gsi),
        (RC, QpType::Rc),
        (UC, QpType::Uc),
        (UD, QpType::Ud),
        (RAW_IPV6, QpType::RawIpv6),
        (RAW_ETHERTYPE, QpType::RawEthertype),
        (RAW_PACKET, QpType::RawPacket),
        (XRC_INI, QpType::XrcIni),
        (XRC_TGT, QpType::XrcTgt),
    ] {
        assert_eq!(qp_type(raw), t);
        assert_eq!(t.as_raw(), raw);
    }
    for raw in [7, IB_QPT_MAX, IB_QPT_DRIVER, 0x1000] {
        assert_eq!(QpType::from_raw(raw), None);
    }
}

#[test]
fn attr_mask_constants_carry_the_kernel_values() {
    let pairs = [
        (AttrMask::STATE, STATE),
        (AttrMask::CUR_STATE, CUR_STATE),
        (AttrMask::EN_SQD_ASYNC_NOTIFY, EN_SQD_ASYNC_NOTIFY),
        (AttrMask::ACCESS_FLAGS, ACCESS_FLAGS),
        (AttrMask::PKEY_INDEX, PKEY_INDEX),
        (AttrMask::PORT, PORT),
        (AttrMask::QKEY, QKEY),
        (AttrMask::AV, AV),
        (AttrMask::PATH_MTU, PATH_MTU),
        (AttrMask::TIMEOUT, TIMEOUT),
        (AttrMask::RETRY_CNT, RETRY_CNT),
        (AttrMask::RNR_RETRY, RNR_RETRY),
        (AttrMask::RQ_PSN, RQ_PSN),
        (AttrMask::MAX_QP_RD_ATOMIC, MAX_QP_RD_ATOMIC),
        (AttrMask::ALT_PATH, ALT_PATH),
        (AttrMask::MIN_RNR_TIMER, MIN_RNR_TIMER),
        (AttrMask::SQ_PSN, SQ_PSN),
        (AttrMask::MAX_DEST_RD_ATOMIC, MAX_DEST_RD_ATOMIC),
        (AttrMask::PATH_MIG_STATE, PATH_MIG_STATE),
        (AttrMask::CAP, CAP),
        (AttrMask::DEST_QPN, DEST_QPN),
        (AttrMask::RATE_LIMIT, RATE_LIMIT),
    ];
    for (c, v) in pairs {
        assert_eq!(c.bits(), v);
    }
    // IB_QP_ATTR_STANDARD_BITS = GENMASK(20, 0).
    assert_eq!(AttrMask::STANDARD_BITS.bits(), (1 << 21) - 1);
}

#[test]
fn attr_mask_debug_names_known_bits_and_shows_the_rest_in_hex() {
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::from_bits(1 << 22);
    assert_eq!(format!("{m:?}"), "AttrMask(STATE | PKEY_INDEX | 0x400000)");
    assert_eq!(format!("{:?}", AttrMask::EMPTY), "AttrMask(0x0)");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn modify_is_ok_raw_agrees_with_verbs_c_on_random_masks(
        cur in prop::sample::select(RAW_STATES.to_vec()),
        next in prop::sample::select(RAW_STATES.to_vec()),
        t in prop::sample::select(RAW_TYPES.to_vec()),
        mask in any::<u32>(),
        // Random masks almost never pass; also try random subsets of the allowed bits.
        subset in any::<u32>(),
    ) {
        prop_assert_eq!(modify_is_ok_raw(cur, next, t, mask), expected_raw(cur, next, t, mask));
        let (_, req, opt) = c_entry(cur, next, t).unwrap_or((false, 0, 0));
        let near = req | (subset & (opt | STATE | CUR_STATE));
        prop_assert_eq!(modify_is_ok_raw(cur, next, t, near), expected_raw(cur, next, t, near));
    }
}
