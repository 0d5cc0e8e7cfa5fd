//! `check_modify`: the driver-facing state decision around `ib_modify_qp_is_ok()`.

use proptest::prelude::*;
use rrxe_host_tests::logic::qp_state::{
    check_modify, modify_is_ok, transition_masks, AttrMask, ModifyError, QpCurrent, QpState,
    QpType, EINVAL, EOPNOTSUPP,
};

fn qp(qp_type: QpType, state: QpState) -> QpCurrent {
    QpCurrent {
        qp_type,
        state,
        sq_draining: false,
    }
}

/// A modify to `next` with the required bits of `cur -> next` (plus `extra`).
fn to(cur: QpCurrent, next: QpState, extra: AttrMask) -> Result<QpState, ModifyError> {
    let (req, _) = transition_masks(cur.state, next, cur.qp_type).unwrap_or_default();
    check_modify(cur, AttrMask::STATE | req | extra, next.as_raw(), 0)
}

#[test]
fn rc_walks_reset_init_rtr_rts_sqd_rts_err_reset() {
    let path = [
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Rts,
        QpState::Err,
        QpState::Reset,
    ];
    let mut cur = qp(QpType::Rc, QpState::Reset);
    for next in path {
        assert_eq!(to(cur, next, AttrMask::EMPTY), Ok(next));
        cur.state = next;
    }
}

#[test]
fn without_state_bit_the_next_state_is_the_current_one() {
    let rts = qp(QpType::Rc, QpState::Rts);
    assert_eq!(
        check_modify(rts, AttrMask::ACCESS_FLAGS, 99, 99),
        Ok(QpState::Rts)
    );
    let init = qp(QpType::Ud, QpState::Init);
    assert_eq!(
        check_modify(init, AttrMask::QKEY | AttrMask::PKEY_INDEX, 0, 0),
        Ok(QpState::Init)
    );
    // The raw qp_state is ignored without IB_QP_STATE, even when out of range.
    assert_eq!(
        check_modify(init, AttrMask::EMPTY, u32::MAX, 0),
        Ok(QpState::Init)
    );
}

#[test]
fn without_state_bit_attributes_are_still_checked_against_the_cur_to_cur_row() {
    // RTS -> RTS does not accept SQ_PSN for RC.
    let rts = qp(QpType::Rc, QpState::Rts);
    assert_eq!(
        check_modify(rts, AttrMask::SQ_PSN, 0, 0),
        Err(ModifyError::ForbiddenExtra(AttrMask::SQ_PSN))
    );
    // RTR -> RTR does not exist: nothing can be modified in RTR without moving to RTS.
    let rtr = qp(QpType::Rc, QpState::Rtr);
    for mask in [
        AttrMask::EMPTY,
        AttrMask::ACCESS_FLAGS,
        AttrMask::MIN_RNR_TIMER,
    ] {
        assert_eq!(
            check_modify(rtr, mask, 0, 0),
            Err(ModifyError::InvalidTransition {
                cur: QpState::Rtr,
                next: QpState::Rtr
            })
        );
    }
}

#[test]
fn empty_mask_in_reset_is_a_no_op() {
    let reset = qp(QpType::Rc, QpState::Reset);
    assert_eq!(
        check_modify(reset, AttrMask::EMPTY, 0, 0),
        Ok(QpState::Reset)
    );
}

#[test]
fn out_of_range_requested_state_is_refused() {
    let init = qp(QpType::Rc, QpState::Init);
    for raw in [7, 8, 0xff, u32::MAX] {
        assert_eq!(
            check_modify(init, AttrMask::STATE, raw, 0),
            Err(ModifyError::InvalidState(raw))
        );
    }
}

#[test]
fn out_of_range_cur_state_is_refused() {
    let rts = qp(QpType::Rc, QpState::Rts);
    let m = AttrMask::STATE | AttrMask::CUR_STATE;
    assert_eq!(
        check_modify(rts, m, QpState::Rts.as_raw(), 7),
        Err(ModifyError::InvalidCurState(7))
    );
}

#[test]
fn cur_state_must_equal_the_actual_state() {
    let rts = qp(QpType::Rc, QpState::Rts);
    let m = AttrMask::STATE | AttrMask::CUR_STATE;
    // Claiming SQE while in RTS (SQE -> RTS would need no attribute for RC) is refused.
    assert_eq!(
        check_modify(rts, m, QpState::Rts.as_raw(), QpState::Sqe.as_raw()),
        Err(ModifyError::CurStateMismatch {
            actual: QpState::Rts,
            given: QpState::Sqe
        })
    );
    assert_eq!(
        check_modify(rts, m, QpState::Rts.as_raw(), QpState::Rts.as_raw()),
        Ok(QpState::Rts)
    );
}

#[test]
fn cur_state_is_refused_in_reset_init_and_err_even_when_it_matches() {
    for state in [QpState::Reset, QpState::Init, QpState::Err] {
        let cur = qp(QpType::Rc, state);
        let m = AttrMask::STATE | AttrMask::CUR_STATE;
        assert_eq!(
            check_modify(cur, m, QpState::Reset.as_raw(), state.as_raw()),
            Err(ModifyError::CurStateNotAllowed(state))
        );
    }
}

#[test]
fn cur_state_is_refused_where_the_row_does_not_list_it() {
    // RTS -> SQD lists only EN_SQD_ASYNC_NOTIFY.
    let rts = qp(QpType::Rc, QpState::Rts);
    let m = AttrMask::STATE | AttrMask::CUR_STATE;
    assert_eq!(
        check_modify(rts, m, QpState::Sqd.as_raw(), QpState::Rts.as_raw()),
        Err(ModifyError::ForbiddenExtra(AttrMask::CUR_STATE))
    );
}

#[test]
fn missing_required_bits_are_named() {
    let reset = qp(QpType::Rc, QpState::Reset);
    assert_eq!(
        check_modify(
            reset,
            AttrMask::STATE | AttrMask::PKEY_INDEX,
            QpState::Init.as_raw(),
            0
        ),
        Err(ModifyError::MissingRequired(
            AttrMask::PORT | AttrMask::ACCESS_FLAGS
        ))
    );
}

#[test]
fn forbidden_extra_bits_are_named() {
    let init = qp(QpType::Ud, QpState::Init);
    let (req, _) = transition_masks(QpState::Init, QpState::Rtr, QpType::Ud).unwrap();
    assert_eq!(
        check_modify(
            init,
            AttrMask::STATE | req | AttrMask::AV | AttrMask::DEST_QPN,
            QpState::Rtr.as_raw(),
            0
        ),
        Err(ModifyError::ForbiddenExtra(
            AttrMask::AV | AttrMask::DEST_QPN
        ))
    );
}

#[test]
fn invalid_transitions_are_named() {
    for (cur, next) in [
        (QpState::Reset, QpState::Err),
        (QpState::Rtr, QpState::Rtr),
        (QpState::Init, QpState::Rts),
        (QpState::Reset, QpState::Rts),
        (QpState::Err, QpState::Init),
        (QpState::Sqe, QpState::Sqd),
    ] {
        assert_eq!(
            to(qp(QpType::Rc, cur), next, AttrMask::EMPTY),
            Err(ModifyError::InvalidTransition { cur, next })
        );
    }
}

#[test]
fn bits_outside_standard_bits_are_eopnotsupp() {
    let rts = qp(QpType::Rc, QpState::Rts);
    for bit in 21..32 {
        let extra = AttrMask::from_bits(1 << bit);
        let err = check_modify(rts, AttrMask::STATE | extra, QpState::Rts.as_raw(), 0);
        assert_eq!(err, Err(ModifyError::UnsupportedMask(extra)));
        assert_eq!(err.unwrap_err().errno(), EOPNOTSUPP);
    }
    // Even RATE_LIMIT on RAW_PACKET, which the C table accepts.
    let raw = qp(QpType::RawPacket, QpState::Rts);
    let m = AttrMask::STATE | AttrMask::RATE_LIMIT;
    assert!(modify_is_ok(
        QpState::Rts,
        QpState::Rts,
        QpType::RawPacket,
        m
    ));
    assert_eq!(
        check_modify(raw, m, QpState::Rts.as_raw(), 0),
        Err(ModifyError::UnsupportedMask(AttrMask::RATE_LIMIT))
    );
}

#[test]
fn draining_sqd_can_only_go_to_reset_or_err() {
    let draining = QpCurrent {
        qp_type: QpType::Rc,
        state: QpState::Sqd,
        sq_draining: true,
    };
    assert_eq!(
        to(draining, QpState::Rts, AttrMask::EMPTY),
        Err(ModifyError::SqDraining)
    );
    assert_eq!(
        to(draining, QpState::Sqd, AttrMask::TIMEOUT),
        Err(ModifyError::SqDraining)
    );
    assert_eq!(
        check_modify(draining, AttrMask::TIMEOUT, 0, 0),
        Err(ModifyError::SqDraining)
    );
    assert_eq!(
        to(draining, QpState::Err, AttrMask::EMPTY),
        Ok(QpState::Err)
    );
    assert_eq!(
        to(draining, QpState::Reset, AttrMask::EMPTY),
        Ok(QpState::Reset)
    );
    // Once drained, SQD -> RTS is fine.
    let drained = QpCurrent {
        sq_draining: false,
        ..draining
    };
    assert_eq!(to(drained, QpState::Rts, AttrMask::EMPTY), Ok(QpState::Rts));
}

#[test]
fn sq_draining_outside_sqd_has_no_effect() {
    let rts = QpCurrent {
        qp_type: QpType::Rc,
        state: QpState::Rts,
        sq_draining: true,
    };
    assert_eq!(to(rts, QpState::Sqd, AttrMask::EMPTY), Ok(QpState::Sqd));
}

#[test]
fn every_refusal_is_einval_except_unsupported_mask() {
    let errors = [
        ModifyError::InvalidState(7),
        ModifyError::InvalidCurState(7),
        ModifyError::CurStateMismatch {
            actual: QpState::Rts,
            given: QpState::Sqe,
        },
        ModifyError::CurStateNotAllowed(QpState::Init),
        ModifyError::InvalidTransition {
            cur: QpState::Reset,
            next: QpState::Err,
        },
        ModifyError::MissingRequired(AttrMask::PORT),
        ModifyError::ForbiddenExtra(AttrMask::QKEY),
        ModifyError::SqDraining,
        ModifyError::InvalidPort(2),
        ModifyError::AltPathUnsupported,
        ModifyError::CapNotModifiable,
    ];
    for e in errors {
        assert_eq!(e.errno(), EINVAL, "{e:?}");
    }
    assert_eq!(EINVAL, 22);
    assert_eq!(EOPNOTSUPP, 95);
    assert_eq!(
        ModifyError::UnsupportedMask(AttrMask::RATE_LIMIT).errno(),
        EOPNOTSUPP
    );
}

fn any_state() -> impl Strategy<Value = QpState> {
    prop::sample::select(QpState::ALL.to_vec())
}

fn any_type() -> impl Strategy<Value = QpType> {
    prop::sample::select(QpType::ALL.to_vec())
}

/// Masks within the standard bits, biased towards ones that pass: required bits of a random
/// row plus a random subset of that row's optional bits, STATE and CUR_STATE, sometimes with
/// one random extra bit.
fn near_mask(cur: QpState, next: QpState, t: QpType) -> impl Strategy<Value = u32> {
    let (req, opt) = transition_masks(cur, next, t).unwrap_or_default();
    let allowed = opt.bits() | AttrMask::STATE.bits() | AttrMask::CUR_STATE.bits();
    (any::<u32>(), prop::option::of(0u32..21), any::<bool>()).prop_map(
        move |(subset, extra, drop_req)| {
            let mut m = req.bits() | (subset & allowed);
            if drop_req {
                m &= !(subset & req.bits());
            }
            if let Some(bit) = extra {
                m |= 1 << bit;
            }
            m
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// With a truthful CUR_STATE, no draining and a standard mask, check_modify accepts exactly
    /// what ib_modify_qp_is_ok accepts from the actual state (next = cur without IB_QP_STATE).
    #[test]
    fn check_modify_accepts_exactly_what_modify_is_ok_accepts(
        (cur, next, t, mask) in (any_state(), any_state(), any_type())
            .prop_flat_map(|(c, n, t)| (Just(c), Just(n), Just(t), near_mask(c, n, t))),
        random_mask in 0u32..(1 << 21),
    ) {
        for mask in [mask, random_mask] {
            let mask = AttrMask::from_bits(mask);
            let effective_next = if mask.contains(AttrMask::STATE) { next } else { cur };
            let got = check_modify(qp(t, cur), mask, next.as_raw(), cur.as_raw());
            let nonstandard = mask.difference(AttrMask::STANDARD_BITS);
            if !nonstandard.is_empty() {
                // Only RATE_LIMIT (RAW_PACKET's optional bit) can get here.
                prop_assert_eq!(got, Err(ModifyError::UnsupportedMask(nonstandard)));
                continue;
            }
            prop_assert_eq!(got.is_ok(), modify_is_ok(cur, effective_next, t, mask));
            if let Ok(n) = got {
                prop_assert_eq!(n, effective_next);
            }
        }
    }

    /// check_modify never panics, whatever the raw input, and refuses with a matching errno.
    #[test]
    fn check_modify_is_total_on_raw_input(
        cur in any_state(),
        t in any_type(),
        draining in any::<bool>(),
        mask in any::<u32>(),
        qp_state in prop_oneof![0u32..8, any::<u32>()],
        cur_qp_state in prop_oneof![0u32..8, any::<u32>()],
    ) {
        let current = QpCurrent { qp_type: t, state: cur, sq_draining: draining };
        match check_modify(current, AttrMask::from_bits(mask), qp_state, cur_qp_state) {
            Ok(next) => {
                prop_assert!(mask & !AttrMask::STANDARD_BITS.bits() == 0);
                prop_assert!(modify_is_ok(cur, next, t, AttrMask::from_bits(mask)));
            }
            Err(e) => prop_assert!(e.errno() == EINVAL || e.errno() == EOPNOTSUPP),
        }
    }
}
