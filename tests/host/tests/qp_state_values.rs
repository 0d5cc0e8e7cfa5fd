//! `validate` / `check_values` (modify_qp attribute values) and `check_caps` (create_qp).

use proptest::prelude::*;
use rrxe_host_tests::logic::port::IbMtu;
use rrxe_host_tests::logic::psn::Psn;
use rrxe_host_tests::logic::qp_attr::{
    access, check_caps, check_values, validate, CapError, CapField, DeviceLimits, MigState,
    ModifyRequest, PortInfo, QpCap,
};
use rrxe_host_tests::logic::qp_state::{
    transition_masks, AttrMask, ModifyError, QpCurrent, QpState, QpType, EINVAL, EOPNOTSUPP,
};

const LIMITS: DeviceLimits = DeviceLimits {
    phys_port_cnt: 1,
    max_qp_wr: 16384,
    max_send_sge: 32,
    max_recv_sge: 32,
    max_inline_data: 256,
    max_qp_rd_atom: 16,
    max_qp_init_rd_atom: 8,
};

const PORT: PortInfo = PortInfo {
    pkey_tbl_len: 1,
    active_mtu: IbMtu::Mtu1024,
};

fn qp(qp_type: QpType, state: QpState) -> QpCurrent {
    QpCurrent {
        qp_type,
        state,
        sq_draining: false,
    }
}

/// A request with every field set to a valid value and the given mask.
fn good(mask: AttrMask, next: QpState) -> ModifyRequest {
    ModifyRequest {
        mask,
        qp_state: next.as_raw(),
        cur_qp_state: 0,
        path_mtu: IbMtu::Mtu1024 as u32,
        path_mig_state: 0,
        qkey: 0x1111_1111,
        rq_psn: 0x12_3456,
        sq_psn: 0xab_cdef,
        dest_qp_num: 0x11,
        qp_access_flags: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        pkey_index: 0,
        en_sqd_async_notify: 1,
        max_rd_atomic: 8,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        port_num: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
    }
}

/// Every attribute bit whose value `check_values` accepts (AV has no value rule here; ALT_PATH
/// and CAP are always refused).
const VALUE_BITS: AttrMask = AttrMask::from_bits(
    AttrMask::EN_SQD_ASYNC_NOTIFY.bits()
        | AttrMask::ACCESS_FLAGS.bits()
        | AttrMask::PKEY_INDEX.bits()
        | AttrMask::PORT.bits()
        | AttrMask::PATH_MTU.bits()
        | AttrMask::TIMEOUT.bits()
        | AttrMask::RETRY_CNT.bits()
        | AttrMask::RNR_RETRY.bits()
        | AttrMask::RQ_PSN.bits()
        | AttrMask::MAX_QP_RD_ATOMIC.bits()
        | AttrMask::MIN_RNR_TIMER.bits()
        | AttrMask::SQ_PSN.bits()
        | AttrMask::MAX_DEST_RD_ATOMIC.bits()
        | AttrMask::PATH_MIG_STATE.bits()
        | AttrMask::DEST_QPN.bits(),
);

/// `check_values` on an RC QP with just `bit` set (and `req` filled by `edit`).
fn rc_value(bit: AttrMask, edit: impl FnOnce(&mut ModifyRequest)) -> Result<(), ModifyError> {
    let mut req = good(bit, QpState::Rts);
    edit(&mut req);
    check_values(&req, QpState::Rts, QpState::Rts, QpType::Rc, &LIMITS, &PORT).map(|_| ())
}

/// Drives `current` to `next` with the required bits of the transition (plus `extra`).
fn step(current: &mut QpCurrent, next: QpState, extra: AttrMask) -> ModifyRequest {
    let (req, _) = transition_masks(current.state, next, current.qp_type).unwrap();
    let r = good(AttrMask::STATE | req | extra, next);
    let v = validate(&r, current, &LIMITS, &PORT).unwrap();
    assert_eq!(v.cur_state, current.state);
    assert_eq!(v.next_state, next);
    current.state = next;
    r
}

#[test]
fn rc_bring_up_with_typical_values_is_accepted_and_typed() {
    let mut cur = qp(QpType::Rc, QpState::Reset);
    step(&mut cur, QpState::Init, AttrMask::EMPTY);
    let r = good(
        AttrMask::STATE
            | AttrMask::AV
            | AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN
            | AttrMask::MAX_DEST_RD_ATOMIC
            | AttrMask::MIN_RNR_TIMER,
        QpState::Rtr,
    );
    let v = validate(&r, &cur, &LIMITS, &PORT).unwrap();
    assert!(v.changes_state());
    assert_eq!(v.path_mtu, Some(IbMtu::Mtu1024));
    assert_eq!(v.dest_qp_num, Some(0x11));
    assert_eq!(v.rq_psn, Psn::new(0x12_3456));
    assert_eq!(v.max_dest_rd_atomic, Some(16));
    assert_eq!(v.min_rnr_timer, Some(12));
    assert_eq!(v.sq_psn, None, "not in the mask");
    assert_eq!(v.timeout, None, "not in the mask");
    cur.state = QpState::Rtr;
    let r = step(&mut cur, QpState::Rts, AttrMask::EMPTY);
    let v = check_values(&r, QpState::Rtr, QpState::Rts, QpType::Rc, &LIMITS, &PORT).unwrap();
    assert_eq!(v.sq_psn, Psn::new(0xab_cdef));
    assert_eq!(v.timeout, Some(14));
    assert_eq!(v.retry_cnt, Some(7));
    assert_eq!(v.rnr_retry, Some(7));
    assert_eq!(v.max_rd_atomic, Some(8));
}

#[test]
fn ud_bring_up_is_accepted_and_carries_the_qkey() {
    let mut cur = qp(QpType::Ud, QpState::Reset);
    let r = step(&mut cur, QpState::Init, AttrMask::EMPTY);
    let v = validate(&r, &qp(QpType::Ud, QpState::Reset), &LIMITS, &PORT).unwrap();
    assert_eq!(v.qkey, Some(0x1111_1111));
    assert_eq!(v.port_num, Some(1));
    assert_eq!(v.pkey_index, Some(0));
    step(&mut cur, QpState::Rtr, AttrMask::EMPTY);
    step(&mut cur, QpState::Rts, AttrMask::EMPTY);
}

#[test]
fn uc_bring_up_is_accepted() {
    let mut cur = qp(QpType::Uc, QpState::Reset);
    step(&mut cur, QpState::Init, AttrMask::EMPTY);
    step(&mut cur, QpState::Rtr, AttrMask::ACCESS_FLAGS);
    step(&mut cur, QpState::Rts, AttrMask::EMPTY);
    step(&mut cur, QpState::Sqd, AttrMask::EN_SQD_ASYNC_NOTIFY);
    step(&mut cur, QpState::Rts, AttrMask::EMPTY);
}

#[test]
fn fields_outside_the_mask_are_not_read() {
    let mut r = ModifyRequest {
        mask: AttrMask::STATE,
        qp_state: QpState::Err.as_raw(),
        cur_qp_state: u32::MAX,
        path_mtu: u32::MAX,
        path_mig_state: u32::MAX,
        qkey: u32::MAX,
        rq_psn: u32::MAX,
        sq_psn: u32::MAX,
        dest_qp_num: u32::MAX,
        qp_access_flags: u32::MAX,
        pkey_index: u16::MAX,
        en_sqd_async_notify: u8::MAX,
        max_rd_atomic: u8::MAX,
        max_dest_rd_atomic: u8::MAX,
        min_rnr_timer: u8::MAX,
        port_num: u32::MAX,
        timeout: u8::MAX,
        retry_cnt: u8::MAX,
        rnr_retry: u8::MAX,
    };
    let v = validate(&r, &qp(QpType::Rc, QpState::Rts), &LIMITS, &PORT).unwrap();
    assert_eq!(v.next_state, QpState::Err);
    assert_eq!(v.qkey, None);
    r.mask = AttrMask::EMPTY;
    let v = validate(&r, &qp(QpType::Rc, QpState::Rts), &LIMITS, &PORT).unwrap();
    assert!(!v.changes_state());
}

#[test]
fn state_machine_errors_take_precedence_over_value_errors() {
    // ACCESS_FLAGS on UD: the table refuses it before the value rule would.
    let r = good(
        AttrMask::STATE | AttrMask::ACCESS_FLAGS | AttrMask::PKEY_INDEX | AttrMask::PORT,
        QpState::Init,
    );
    let mut r2 = r;
    r2.port_num = 9;
    assert_eq!(
        validate(&r2, &qp(QpType::Ud, QpState::Reset), &LIMITS, &PORT),
        Err(ModifyError::MissingRequired(AttrMask::QKEY))
    );
}

#[test]
fn port_must_be_one_on_a_single_port_device() {
    assert_eq!(rc_value(AttrMask::PORT, |r| r.port_num = 1), Ok(()));
    for bad in [0, 2, 255, u32::MAX] {
        assert_eq!(
            rc_value(AttrMask::PORT, |r| r.port_num = bad),
            Err(ModifyError::InvalidPort(bad))
        );
    }
}

#[test]
fn pkey_index_must_be_below_the_table_length() {
    assert_eq!(rc_value(AttrMask::PKEY_INDEX, |r| r.pkey_index = 0), Ok(()));
    assert_eq!(
        rc_value(AttrMask::PKEY_INDEX, |r| r.pkey_index = 1),
        Err(ModifyError::InvalidPkeyIndex(1))
    );
}

#[test]
fn path_mtu_must_be_an_ib_mtu_not_above_the_active_mtu() {
    for ok in 1..=3 {
        assert_eq!(rc_value(AttrMask::PATH_MTU, |r| r.path_mtu = ok), Ok(()));
    }
    for above in 4..=5 {
        assert_eq!(
            rc_value(AttrMask::PATH_MTU, |r| r.path_mtu = above),
            Err(ModifyError::PathMtuAboveActive {
                requested: above,
                active: 3
            })
        );
    }
    for bad in [0, 6, u32::MAX] {
        assert_eq!(
            rc_value(AttrMask::PATH_MTU, |r| r.path_mtu = bad),
            Err(ModifyError::InvalidPathMtu(bad))
        );
    }
}

#[test]
fn access_flags_are_only_for_rc_and_uc() {
    let r = good(AttrMask::ACCESS_FLAGS, QpState::Rts);
    for t in [QpType::Rc, QpType::Uc] {
        assert!(check_values(&r, QpState::Rts, QpState::Rts, t, &LIMITS, &PORT).is_ok());
    }
    for t in QpType::ALL {
        if matches!(t, QpType::Rc | QpType::Uc) {
            continue;
        }
        assert_eq!(
            check_values(&r, QpState::Rts, QpState::Rts, t, &LIMITS, &PORT),
            Err(ModifyError::AccessFlagsNotAllowed(t))
        );
    }
}

#[test]
fn access_flags_accept_remote_bits_local_write_and_the_optional_range_only() {
    let ok = [
        0,
        access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
        access::LOCAL_WRITE,
        access::RELAXED_ORDERING | access::REMOTE_READ,
        access::OPTIONAL,
        // RDMA FLUSH placement types the responder allows (rdma_rxe checks them on the QP).
        access::FLUSH_GLOBAL | access::REMOTE_WRITE,
        access::FLUSH_GLOBAL | access::FLUSH_PERSISTENT,
        // An MR's on-demand-paging flag, ignored on a QP (pyverbs' ODP tests pass it).
        access::ON_DEMAND | access::LOCAL_WRITE | access::REMOTE_WRITE,
    ];
    for flags in ok {
        assert_eq!(
            rc_value(AttrMask::ACCESS_FLAGS, |r| r.qp_access_flags = flags),
            Ok(())
        );
    }
    for bad in [
        access::MW_BIND,
        access::ZERO_BASED,
        access::HUGETLB,
        1 << 10,
        1 << 19,
        1 << 30,
        1 << 31,
    ] {
        assert_eq!(
            rc_value(AttrMask::ACCESS_FLAGS, |r| r.qp_access_flags =
                bad | access::REMOTE_READ),
            Err(ModifyError::InvalidAccessFlags(bad))
        );
    }
}

#[test]
fn accepted_access_flags_drop_the_optional_bits() {
    let mut r = good(AttrMask::ACCESS_FLAGS, QpState::Rts);
    r.qp_access_flags =
        access::REMOTE_WRITE | access::LOCAL_WRITE | access::RELAXED_ORDERING | access::ON_DEMAND;
    let v = check_values(&r, QpState::Rts, QpState::Rts, QpType::Rc, &LIMITS, &PORT).unwrap();
    assert_eq!(
        v.qp_access_flags,
        Some(access::REMOTE_WRITE | access::LOCAL_WRITE)
    );
}

#[test]
fn access_flag_values_match_the_kernel_enum() {
    assert_eq!(access::LOCAL_WRITE, 1);
    assert_eq!(access::REMOTE_WRITE, 2);
    assert_eq!(access::REMOTE_READ, 4);
    assert_eq!(access::REMOTE_ATOMIC, 8);
    assert_eq!(access::MW_BIND, 16);
    assert_eq!(access::ZERO_BASED, 32);
    assert_eq!(access::ON_DEMAND, 64);
    assert_eq!(access::HUGETLB, 128);
    assert_eq!(access::FLUSH_GLOBAL, 256);
    assert_eq!(access::FLUSH_PERSISTENT, 512);
    assert_eq!(access::RELAXED_ORDERING, 1 << 20);
    // IB_UVERBS_ACCESS_OPTIONAL_RANGE: ((1 << 29) << 1) - 1 & ~((1 << 20) - 1).
    assert_eq!(
        access::OPTIONAL,
        (((1u32 << 29) << 1) - 1) & !((1u32 << 20) - 1)
    );
}

#[test]
fn qkey_is_only_for_datagram_types() {
    let r = good(AttrMask::QKEY, QpState::Rts);
    for t in QpType::ALL {
        let got = check_values(&r, QpState::Rts, QpState::Rts, t, &LIMITS, &PORT);
        if matches!(t, QpType::Ud | QpType::Gsi | QpType::Smi) {
            assert_eq!(got.unwrap().qkey, Some(0x1111_1111));
        } else {
            assert_eq!(got, Err(ModifyError::QkeyNotAllowed(t)));
        }
    }
}

#[test]
fn alt_path_is_refused_even_where_the_table_allows_it() {
    let mut cur = qp(QpType::Rc, QpState::Reset);
    step(&mut cur, QpState::Init, AttrMask::EMPTY);
    let (req, opt) = transition_masks(QpState::Init, QpState::Rtr, QpType::Rc).unwrap();
    assert!(opt.contains(AttrMask::ALT_PATH));
    let r = good(AttrMask::STATE | req | AttrMask::ALT_PATH, QpState::Rtr);
    assert_eq!(
        validate(&r, &cur, &LIMITS, &PORT),
        Err(ModifyError::AltPathUnsupported)
    );
}

#[test]
fn cap_is_refused_by_check_values_too() {
    assert_eq!(
        rc_value(AttrMask::CAP, |_| ()),
        Err(ModifyError::CapNotModifiable)
    );
}

#[test]
fn check_values_refuses_nonstandard_bits_with_eopnotsupp() {
    let e = rc_value(AttrMask::RATE_LIMIT, |_| ()).unwrap_err();
    assert_eq!(e, ModifyError::UnsupportedMask(AttrMask::RATE_LIMIT));
    assert_eq!(e.errno(), EOPNOTSUPP);
}

#[test]
fn path_mig_state_must_be_an_ib_mig_state() {
    for (raw, s) in [
        (0, MigState::Migrated),
        (1, MigState::Rearm),
        (2, MigState::Armed),
    ] {
        let mut r = good(AttrMask::PATH_MIG_STATE, QpState::Rts);
        r.path_mig_state = raw;
        let v = check_values(&r, QpState::Rts, QpState::Rts, QpType::Rc, &LIMITS, &PORT);
        assert_eq!(v.unwrap().path_mig_state, Some(s));
    }
    assert_eq!(
        rc_value(AttrMask::PATH_MIG_STATE, |r| r.path_mig_state = 3),
        Err(ModifyError::InvalidPathMigState(3))
    );
}

#[test]
fn en_sqd_async_notify_is_a_boolean() {
    for (raw, b) in [(0u8, false), (1, true), (255, true)] {
        let mut r = good(AttrMask::EN_SQD_ASYNC_NOTIFY, QpState::Sqd);
        r.en_sqd_async_notify = raw;
        let v = check_values(&r, QpState::Rts, QpState::Sqd, QpType::Rc, &LIMITS, &PORT);
        assert_eq!(v.unwrap().en_sqd_async_notify, Some(b));
    }
}

#[test]
fn value_errors_are_einval() {
    for e in [
        rc_value(AttrMask::TIMEOUT, |r| r.timeout = 32),
        rc_value(AttrMask::DEST_QPN, |r| r.dest_qp_num = 1 << 24),
        rc_value(AttrMask::PORT, |r| r.port_num = 0),
        rc_value(AttrMask::QKEY, |_| ()),
    ] {
        assert_eq!(e.unwrap_err().errno(), EINVAL);
    }
}

/// Sets one raw field of a request.
type Setter = fn(&mut ModifyRequest, u32);
/// Whether a raw field value is in range.
type Rule = fn(u32) -> bool;

/// One field's rule: the mask bit, a setter, and "is this value valid".
fn field_case(
    bit: AttrMask,
    set: Setter,
    valid: Rule,
    values: impl Strategy<Value = u32>,
) -> impl Strategy<Value = (AttrMask, Setter, Rule, u32)> {
    values.prop_map(move |v| (bit, set, valid, v))
}

fn u8_values() -> impl Strategy<Value = u32> {
    any::<u8>().prop_map(u32::from)
}

fn u32_values() -> impl Strategy<Value = u32> {
    prop_oneof![any::<u32>(), 0u32..0x0200_0000, 0x00ff_fff0u32..0x0100_0010]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// For each field, on its own: check_values accepts the value iff it is in range.
    #[test]
    fn each_field_is_accepted_iff_its_value_is_in_range(
        (bit, set, valid, value) in prop_oneof![
            field_case(AttrMask::TIMEOUT, |r, v| r.timeout = v as u8, |v| v <= 31, u8_values()),
            field_case(AttrMask::RETRY_CNT, |r, v| r.retry_cnt = v as u8, |v| v <= 7, u8_values()),
            field_case(AttrMask::RNR_RETRY, |r, v| r.rnr_retry = v as u8, |v| v <= 7, u8_values()),
            field_case(AttrMask::MIN_RNR_TIMER, |r, v| r.min_rnr_timer = v as u8, |v| v <= 31,
                u8_values()),
            field_case(AttrMask::MAX_QP_RD_ATOMIC, |r, v| r.max_rd_atomic = v as u8,
                |v| v <= LIMITS.max_qp_init_rd_atom, u8_values()),
            field_case(AttrMask::MAX_DEST_RD_ATOMIC, |r, v| r.max_dest_rd_atomic = v as u8,
                |v| v <= LIMITS.max_qp_rd_atom, u8_values()),
            field_case(AttrMask::RQ_PSN, |r, v| r.rq_psn = v, |v| v < 1 << 24, u32_values()),
            field_case(AttrMask::SQ_PSN, |r, v| r.sq_psn = v, |v| v < 1 << 24, u32_values()),
            field_case(AttrMask::DEST_QPN, |r, v| r.dest_qp_num = v, |v| v < 1 << 24,
                u32_values()),
            field_case(AttrMask::PORT, |r, v| r.port_num = v, |v| v == 1, u32_values()),
            field_case(AttrMask::PATH_MTU, |r, v| r.path_mtu = v, |v| (1..=3).contains(&v),
                prop_oneof![0u32..8, any::<u32>()]),
            field_case(AttrMask::PATH_MIG_STATE, |r, v| r.path_mig_state = v, |v| v <= 2,
                prop_oneof![0u32..8, any::<u32>()]),
            field_case(AttrMask::PKEY_INDEX, |r, v| r.pkey_index = v as u16, |v| v == 0,
                any::<u16>().prop_map(u32::from)),
            field_case(AttrMask::ACCESS_FLAGS, |r, v| r.qp_access_flags = v,
                |v| v & !(0xf | 0x40 | 0x300 | 0x3ff0_0000) == 0, prop_oneof![0u32..0x400, any::<u32>()]),
        ],
    ) {
        let mut r = good(bit, QpState::Rts);
        set(&mut r, value);
        let got = check_values(&r, QpState::Rts, QpState::Rts, QpType::Rc, &LIMITS, &PORT);
        prop_assert_eq!(got.is_ok(), valid(value), "{:?} = {:#x}: {:?}", bit, value, got);
    }

    /// validate is total: any request, any QP, never panics; an accepted request has exactly
    /// the typed fields its mask names, all in range.
    #[test]
    fn validate_is_total_and_ok_fields_follow_the_mask(
        mask in prop_oneof![any::<u32>(), 0u32..(1 << 21)],
        state in prop::sample::select(QpState::ALL.to_vec()),
        t in prop::sample::select(QpType::ALL.to_vec()),
        draining in any::<bool>(),
        raw in (any::<[u32; 10]>(), any::<u16>(), any::<[u8; 7]>()),
        next_raw in 0u32..8,
    ) {
        let (w, pkey_index, b) = raw;
        let r = ModifyRequest {
            mask: AttrMask::from_bits(mask),
            qp_state: next_raw,
            cur_qp_state: w[0] % 8,
            path_mtu: w[1] % 8,
            path_mig_state: w[2] % 4,
            qkey: w[3],
            rq_psn: w[4],
            sq_psn: w[5],
            dest_qp_num: w[6],
            qp_access_flags: w[7],
            pkey_index,
            en_sqd_async_notify: b[0],
            max_rd_atomic: b[1],
            max_dest_rd_atomic: b[2],
            min_rnr_timer: b[3],
            port_num: w[8] % 3,
            timeout: b[4],
            retry_cnt: b[5],
            rnr_retry: b[6],
        };
        let current = QpCurrent { qp_type: t, state, sq_draining: draining };
        if let Ok(v) = validate(&r, &current, &LIMITS, &PORT) {
            let m = r.mask;
            prop_assert_eq!(v.mask, m);
            prop_assert_eq!(v.cur_state, state);
            prop_assert_eq!(v.path_mtu.is_some(), m.contains(AttrMask::PATH_MTU));
            prop_assert_eq!(v.qkey.is_some(), m.contains(AttrMask::QKEY));
            prop_assert_eq!(v.rq_psn.is_some(), m.contains(AttrMask::RQ_PSN));
            prop_assert_eq!(v.sq_psn.is_some(), m.contains(AttrMask::SQ_PSN));
            prop_assert_eq!(v.dest_qp_num.is_some(), m.contains(AttrMask::DEST_QPN));
            prop_assert_eq!(v.qp_access_flags.is_some(), m.contains(AttrMask::ACCESS_FLAGS));
            prop_assert_eq!(v.pkey_index.is_some(), m.contains(AttrMask::PKEY_INDEX));
            prop_assert_eq!(v.port_num.is_some(), m.contains(AttrMask::PORT));
            prop_assert_eq!(v.timeout.is_some(), m.contains(AttrMask::TIMEOUT));
            prop_assert_eq!(v.retry_cnt.is_some(), m.contains(AttrMask::RETRY_CNT));
            prop_assert_eq!(v.rnr_retry.is_some(), m.contains(AttrMask::RNR_RETRY));
            prop_assert_eq!(v.min_rnr_timer.is_some(), m.contains(AttrMask::MIN_RNR_TIMER));
            prop_assert_eq!(v.max_rd_atomic.is_some(), m.contains(AttrMask::MAX_QP_RD_ATOMIC));
            prop_assert_eq!(
                v.max_dest_rd_atomic.is_some(),
                m.contains(AttrMask::MAX_DEST_RD_ATOMIC)
            );
            prop_assert_eq!(v.path_mig_state.is_some(), m.contains(AttrMask::PATH_MIG_STATE));
            prop_assert_eq!(
                v.en_sqd_async_notify.is_some(),
                m.contains(AttrMask::EN_SQD_ASYNC_NOTIFY)
            );
            prop_assert!(!m.intersects(AttrMask::ALT_PATH | AttrMask::CAP));
            prop_assert!(v.dest_qp_num.is_none_or(|q| q < 1 << 24));
            prop_assert!(v.timeout.is_none_or(|x| x <= 31));
            prop_assert!(v.min_rnr_timer.is_none_or(|x| x <= 31));
            prop_assert!(v.retry_cnt.is_none_or(|x| x <= 7));
            prop_assert!(v.rnr_retry.is_none_or(|x| x <= 7));
            prop_assert!(v.port_num.is_none_or(|p| p == 1));
        }
    }

    /// With every value-checked bit set at once, check_values accepts valid values.
    #[test]
    fn all_value_bits_together_accept_valid_values(
        timeout in 0u8..=31,
        retry in 0u8..=7,
        rnr_retry in 0u8..=7,
        rnr_timer in 0u8..=31,
        rq_psn in 0u32..1 << 24,
        sq_psn in 0u32..1 << 24,
        dqpn in 0u32..1 << 24,
        mtu in 1u32..=3,
    ) {
        let mut r = good(VALUE_BITS, QpState::Sqd);
        (r.timeout, r.retry_cnt, r.rnr_retry, r.min_rnr_timer) = (timeout, retry, rnr_retry, rnr_timer);
        (r.rq_psn, r.sq_psn, r.dest_qp_num, r.path_mtu) = (rq_psn, sq_psn, dqpn, mtu);
        let v = check_values(&r, QpState::Sqd, QpState::Sqd, QpType::Rc, &LIMITS, &PORT);
        prop_assert!(v.is_ok(), "{:?}", v);
    }
}

// create_qp capacities.

fn cap(
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
) -> QpCap {
    QpCap {
        max_send_wr,
        max_recv_wr,
        max_send_sge,
        max_recv_sge,
        max_inline_data,
    }
}

#[test]
fn caps_at_the_limits_and_zero_are_accepted() {
    assert_eq!(
        check_caps(&cap(16384, 16384, 32, 32, 256), false, &LIMITS),
        Ok(())
    );
    assert_eq!(check_caps(&QpCap::default(), false, &LIMITS), Ok(()));
}

#[test]
fn each_cap_over_its_limit_is_named() {
    let cases = [
        (cap(16385, 0, 0, 0, 0), CapField::SendWr, 16385, 16384),
        (cap(0, 16385, 0, 0, 0), CapField::RecvWr, 16385, 16384),
        (cap(0, 0, 33, 0, 0), CapField::SendSge, 33, 32),
        (cap(0, 0, 0, 33, 0), CapField::RecvSge, 33, 32),
        (cap(0, 0, 0, 0, 257), CapField::InlineData, 257, 256),
    ];
    for (c, field, requested, limit) in cases {
        let e = check_caps(&c, false, &LIMITS).unwrap_err();
        assert_eq!(
            e,
            CapError {
                field,
                requested,
                limit
            }
        );
        assert_eq!(e.errno(), EINVAL);
    }
}

#[test]
fn with_an_srq_the_receive_caps_are_ignored() {
    let c = cap(1, u32::MAX, 1, u32::MAX, 0);
    assert_eq!(check_caps(&c, true, &LIMITS), Ok(()));
    assert_eq!(
        check_caps(&c, false, &LIMITS).unwrap_err().field,
        CapField::RecvWr
    );
    // The send side still counts.
    assert_eq!(
        check_caps(&cap(u32::MAX, 0, 0, 0, 0), true, &LIMITS)
            .unwrap_err()
            .field,
        CapField::SendWr
    );
}

proptest! {
    #[test]
    fn check_caps_accepts_iff_every_applicable_cap_is_within_its_limit(
        c in any::<[u32; 5]>().prop_map(|a| cap(a[0] % 20000, a[1] % 20000, a[2] % 40, a[3] % 40,
            a[4] % 300)),
        has_srq in any::<bool>(),
    ) {
        let within = c.max_send_wr <= LIMITS.max_qp_wr
            && c.max_send_sge <= LIMITS.max_send_sge
            && c.max_inline_data <= LIMITS.max_inline_data
            && (has_srq
                || (c.max_recv_wr <= LIMITS.max_qp_wr && c.max_recv_sge <= LIMITS.max_recv_sge));
        prop_assert_eq!(check_caps(&c, has_srq, &LIMITS).is_ok(), within);
    }
}
