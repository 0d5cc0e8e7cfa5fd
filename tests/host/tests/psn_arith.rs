//! 24-bit PSN arithmetic: wrap-around, signed distance, circular order.

use proptest::prelude::*;
use rrxe_host_tests::logic::psn::{Psn, PSN_HALF, PSN_MASK, PSN_MODULUS};

fn psn(raw: u32) -> Psn {
    Psn::new(raw).unwrap()
}

fn any_psn() -> impl Strategy<Value = Psn> {
    prop_oneof![
        (0..=PSN_MASK).prop_map(psn),
        // Near the wrap point and near the half-way point.
        (PSN_MASK - 16..=PSN_MASK).prop_map(psn),
        (0u32..16).prop_map(psn),
        (PSN_HALF - 8..PSN_HALF + 8).prop_map(psn),
    ]
}

#[test]
fn constants_are_the_24_bit_circle() {
    assert_eq!(PSN_MASK, 0xff_ffff);
    assert_eq!(PSN_MODULUS, 1 << 24);
    assert_eq!(PSN_HALF, 1 << 23);
    assert_eq!(Psn::MAX.get(), 0xff_ffff);
    assert_eq!(Psn::ZERO.get(), 0);
}

#[test]
fn new_accepts_exactly_24_bit_values() {
    assert_eq!(Psn::new(0).map(Psn::get), Some(0));
    assert_eq!(Psn::new(0xff_ffff).map(Psn::get), Some(0xff_ffff));
    assert_eq!(Psn::new(0x100_0000), None);
    assert_eq!(Psn::new(u32::MAX), None);
}

#[test]
fn from_masked_keeps_the_low_24_bits() {
    assert_eq!(Psn::from_masked(0x1234_5678).get(), 0x34_5678);
    assert_eq!(Psn::from_masked(u32::MAX), Psn::MAX);
}

#[test]
fn max_plus_one_wraps_to_zero() {
    assert_eq!(Psn::MAX.next(), Psn::ZERO);
    assert_eq!(Psn::MAX.wrapping_add(2), psn(1));
    assert_eq!(Psn::ZERO.wrapping_sub(1), Psn::MAX);
    assert_eq!(
        psn(5).wrapping_add(u32::MAX),
        psn(4),
        "u32::MAX is -1 modulo 2^24"
    );
}

#[test]
fn max_is_before_zero_across_the_wrap() {
    assert!(Psn::MAX.before(Psn::ZERO));
    assert!(Psn::ZERO.after(Psn::MAX));
    assert_eq!(Psn::ZERO.diff(Psn::MAX), 1);
    assert_eq!(Psn::MAX.diff(Psn::ZERO), -1);
}

#[test]
fn exactly_half_the_circle_apart_is_before_in_both_directions() {
    let a = psn(0);
    let b = psn(PSN_HALF);
    assert_eq!(a.diff(b), -(PSN_HALF as i32));
    assert_eq!(b.diff(a), -(PSN_HALF as i32));
    assert!(a.before(b) && b.before(a));
}

#[test]
fn diff_matches_rxe_psn_compare_sign() {
    // rxe: static inline int psn_compare(u32 psn_a, u32 psn_b)
    //      { s32 diff; diff = (psn_a - psn_b) << 8; return diff; }
    let rxe = |a: u32, b: u32| (a.wrapping_sub(b) << 8) as i32;
    for (a, b) in [
        (0, 0),
        (1, 0),
        (0, 1),
        (0xff_ffff, 0),
        (0, 0xff_ffff),
        (5, 0x80_0005),
    ] {
        assert_eq!(
            psn(a).diff(psn(b)).signum(),
            rxe(a, b).signum(),
            "{a:#x} {b:#x}"
        );
    }
}

#[test]
fn in_window_covers_first_to_first_plus_len_minus_one_across_the_wrap() {
    let first = psn(0xff_fffe);
    assert!(psn(0xff_fffe).in_window(first, 4));
    assert!(psn(0xff_ffff).in_window(first, 4));
    assert!(psn(0).in_window(first, 4));
    assert!(psn(1).in_window(first, 4));
    assert!(!psn(2).in_window(first, 4));
    assert!(!psn(0xff_fffd).in_window(first, 4));
    assert!(!first.in_window(first, 0));
    assert!(psn(12345).in_window(first, PSN_MODULUS));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn results_always_stay_within_24_bits(a in any_psn(), n in any::<u32>()) {
        prop_assert!(a.wrapping_add(n).get() <= PSN_MASK);
        prop_assert!(a.wrapping_sub(n).get() <= PSN_MASK);
        prop_assert!(a.next().get() <= PSN_MASK);
    }

    #[test]
    fn wrapping_add_is_addition_modulo_2_pow_24(a in any_psn(), n in any::<u32>()) {
        let expected = ((u64::from(a.get()) + u64::from(n)) % u64::from(PSN_MODULUS)) as u32;
        prop_assert_eq!(a.wrapping_add(n).get(), expected);
    }

    #[test]
    fn wrapping_sub_undoes_wrapping_add(a in any_psn(), n in any::<u32>()) {
        prop_assert_eq!(a.wrapping_add(n).wrapping_sub(n), a);
        prop_assert_eq!(a.wrapping_sub(n).wrapping_add(n), a);
    }

    #[test]
    fn adding_2_pow_24_is_the_identity(a in any_psn(), k in 0u32..=255) {
        prop_assert_eq!(a.wrapping_add(k.wrapping_mul(PSN_MODULUS)), a);
    }

    #[test]
    fn diff_is_the_signed_step_count_within_half_the_circle(
        a in any_psn(),
        n in -(PSN_HALF as i32 - 1)..(PSN_HALF as i32),
    ) {
        let b = a.wrapping_add(n as u32);
        prop_assert_eq!(b.diff(a), n);
    }

    #[test]
    fn diff_stays_in_minus_half_to_half(a in any_psn(), b in any_psn()) {
        let d = a.diff(b);
        prop_assert!((-(PSN_HALF as i32)..PSN_HALF as i32).contains(&d));
    }

    #[test]
    fn diff_is_antisymmetric_except_at_exactly_half(a in any_psn(), b in any_psn()) {
        if a.distance_from(b) == PSN_HALF {
            prop_assert_eq!(a.diff(b), b.diff(a));
        } else {
            prop_assert_eq!(a.diff(b), -b.diff(a));
        }
    }

    #[test]
    fn diff_is_zero_iff_equal(a in any_psn(), b in any_psn()) {
        prop_assert_eq!(a.diff(b) == 0, a == b);
    }

    #[test]
    fn a_psn_is_before_every_psn_less_than_half_the_circle_ahead(
        a in any_psn(),
        n in 1u32..PSN_HALF,
    ) {
        let b = a.wrapping_add(n);
        prop_assert!(a.before(b));
        prop_assert!(b.after(a));
        prop_assert!(!a.after(b));
        prop_assert!(!b.before(a));
    }

    #[test]
    fn before_after_and_equal_are_exclusive_and_exhaustive(a in any_psn(), b in any_psn()) {
        let count = [a.before(b), a.after(b), a == b].iter().filter(|&&x| x).count();
        prop_assert_eq!(count, 1);
        prop_assert_eq!(a.before(b), b.after(a) || a.distance_from(b) == PSN_HALF);
    }

    #[test]
    fn order_is_transitive_inside_a_window_smaller_than_half(
        base in any_psn(),
        x in 0u32..PSN_HALF / 2,
        y in 0u32..PSN_HALF / 2,
        z in 0u32..PSN_HALF / 2,
    ) {
        // Any three PSNs within a window of under 2^22 compare like their offsets.
        let (a, b, c) = (base.wrapping_add(x), base.wrapping_add(y), base.wrapping_add(z));
        prop_assert_eq!(a.before(b), x < y);
        if a.before(b) && b.before(c) {
            prop_assert!(a.before(c));
        }
    }

    #[test]
    fn distance_from_is_the_forward_step_count(a in any_psn(), n in 0u32..PSN_MODULUS) {
        prop_assert_eq!(a.wrapping_add(n).distance_from(a), n);
    }

    #[test]
    fn in_window_agrees_with_distance(p in any_psn(), first in any_psn(), len in any::<u32>()) {
        prop_assert_eq!(p.in_window(first, len), p.distance_from(first) < len);
    }

    #[test]
    fn from_masked_equals_new_on_24_bit_values_and_masks_the_rest(raw in any::<u32>()) {
        prop_assert_eq!(Psn::from_masked(raw).get(), raw & PSN_MASK);
        prop_assert_eq!(Psn::new(raw).is_some(), raw <= PSN_MASK);
        if let Some(p) = Psn::new(raw) {
            prop_assert_eq!(p, Psn::from_masked(raw));
        }
    }
}

#[test]
fn stat_names_match_indices() {
    use rrxe_host_tests::logic::stats::{ALL, COUNT, NAMES};
    assert_eq!(ALL.len(), COUNT);
    for (i, s) in ALL.iter().enumerate() {
        assert_eq!(s.index(), i);
        assert!(NAMES[i].ends_with('\0') && !s.name().contains('\0') && !s.name().is_empty());
    }
    let mut names: Vec<_> = NAMES.to_vec();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), COUNT, "counter names are unique");
}
