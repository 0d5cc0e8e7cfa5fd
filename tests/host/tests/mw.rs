//! Memory windows (`logic::mw`): every bind rule, the states, remote access through a window's
//! rkey (bounds, zero-based addressing, rights, PD and type-2 QP association), invalidation,
//! the MR's count of bound windows, and the bind WQE's encoding between provider and kernel.

use rrxe_host_tests::logic::mw::*;
use rrxe_host_tests::logic::qp_attr::access::*;
use rrxe_host_tests::logic::transport::MemError;
use rrxe_host_tests::uapi::{bind_flags, wr_opcode, SendWqe};

const PD: usize = 0x1000;
const OTHER_PD: usize = 0x2000;
const QP: u64 = 7;
const MW_RKEY: u32 = 0x0042_0011;
const MR: MrRef = MrRef {
    index: 0x51,
    key: 0x5133,
};
const IOVA: u64 = 0x10_0000;
const MR_LEN: u64 = 0x1_0000;
const RW: u32 = REMOTE_WRITE | REMOTE_READ;

fn mr() -> MrFacts {
    MrFacts {
        mr: MR,
        pd: PD,
        access: LOCAL_WRITE | MW_BIND,
        iova: IOVA,
        length: MR_LEN,
        bindable: true,
    }
}

fn wr(ty: MwType, addr: u64, length: u64, access: u32) -> BindWr {
    BindWr {
        mw_index: MW_RKEY >> 8,
        new_rkey: (MW_RKEY & !0xff) | ((MW_RKEY + 1) & 0xff),
        addr,
        length,
        mr_lkey: MR.key,
        access,
        verb: ty == MwType::One,
    }
}

fn check(w: &Window, b: &BindWr, m: Option<&MrFacts>) -> Result<(), BindError> {
    w.check_bind(b, PD, m)
}

fn bound(ty: MwType, addr: u64, length: u64, access: u32) -> (Window, BindWr) {
    let mut w = Window::new(ty, PD, MW_RKEY);
    let b = wr(ty, addr, length, access);
    let m = mr();
    assert_eq!(check(&w, &b, Some(&m)), Ok(()));
    assert_eq!(w.apply_bind(&b, Some(&m), QP), None);
    (w, b)
}

fn reach(addr: u64, len: u64, need: u32) -> Reach {
    Reach {
        addr,
        len,
        need,
        whole: false,
    }
}

#[test]
fn new_windows_start_valid_type1_free_type2() {
    assert_eq!(MwType::from_raw(1), Some(MwType::One));
    assert_eq!(MwType::from_raw(2), Some(MwType::Two));
    assert_eq!(MwType::from_raw(0), None);
    assert_eq!(MwType::from_raw(3), None);
    let w1 = Window::new(MwType::One, PD, MW_RKEY);
    let w2 = Window::new(MwType::Two, PD, MW_RKEY);
    assert_eq!((w1.state, w1.bound), (State::Valid, None));
    assert_eq!((w2.state, w2.bound), (State::Free, None));
    // An unbound window reaches nothing.
    for w in [w1, w2] {
        assert!(w.resolve(MW_RKEY, PD, QP, &reach(IOVA, 8, 0)).is_err());
    }
}

#[test]
fn every_bind_rule() {
    let m = mr();
    let w1 = Window::new(MwType::One, PD, MW_RKEY);
    let w2 = Window::new(MwType::Two, PD, MW_RKEY);
    let ok1 = wr(MwType::One, IOVA, 4096, RW);
    let ok2 = wr(MwType::Two, IOVA, 4096, RW);
    assert_eq!(check(&w1, &ok1, Some(&m)), Ok(()));
    assert_eq!(check(&w2, &ok2, Some(&m)), Ok(()));
    let cases: Vec<(&str, Window, BindWr, Option<MrFacts>, BindError)> = vec![
        (
            "type 1 through a bind WR",
            w1,
            BindWr { verb: false, ..ok1 },
            Some(m),
            BindError::WrongVerb,
        ),
        (
            "type 2 through the verb",
            w2,
            BindWr { verb: true, ..ok2 },
            Some(m),
            BindError::WrongVerb,
        ),
        (
            "zero-based type 1 (o10-36.2.2)",
            w1,
            BindWr {
                access: RW | ZERO_BASED,
                ..ok1
            },
            Some(m),
            BindError::ZeroBasedType1,
        ),
        (
            "type 2 with length 0 (o10-37.2.40)",
            w2,
            BindWr { length: 0, ..ok2 },
            Some(m),
            BindError::ZeroLength,
        ),
        (
            "type 2 keeping its key byte",
            w2,
            BindWr {
                new_rkey: MW_RKEY,
                ..ok2
            },
            Some(m),
            BindError::KeyUnchanged,
        ),
        (
            "a new rkey of another index",
            w1,
            BindWr {
                new_rkey: ok1.new_rkey ^ 0x100,
                ..ok1
            },
            Some(m),
            BindError::KeyIndex,
        ),
        (
            "unknown access bits",
            w2,
            BindWr {
                access: RW | MW_BIND,
                ..ok2
            },
            Some(m),
            BindError::AccessBits,
        ),
        ("no MR", w2, ok2, None, BindError::NoMr),
        (
            "an MR whose key is not the lkey named (stale)",
            w2,
            BindWr {
                mr_lkey: MR.key ^ 1,
                ..ok2
            },
            Some(m),
            BindError::NoMr,
        ),
        (
            "a kernel MR",
            w2,
            ok2,
            Some(MrFacts {
                bindable: false,
                ..m
            }),
            BindError::MrNotBindable,
        ),
        (
            "an MR of another PD",
            w2,
            ok2,
            Some(MrFacts { pd: OTHER_PD, ..m }),
            BindError::MrPd,
        ),
        (
            "a zero-based MR",
            w2,
            ok2,
            Some(MrFacts {
                access: m.access | ZERO_BASED,
                ..m
            }),
            BindError::MrZeroBased,
        ),
        (
            "an MR without MW_BIND (C10-73)",
            w2,
            ok2,
            Some(MrFacts {
                access: LOCAL_WRITE,
                ..m
            }),
            BindError::MrNoBindRight,
        ),
        (
            "remote write over an MR without local write (C10-74)",
            w2,
            ok2,
            Some(MrFacts {
                access: MW_BIND,
                ..m
            }),
            BindError::NeedsLocalWrite,
        ),
        (
            "remote atomic over an MR without local write (C10-74)",
            w1,
            BindWr {
                access: REMOTE_ATOMIC,
                ..ok1
            },
            Some(MrFacts {
                access: MW_BIND,
                ..m
            }),
            BindError::NeedsLocalWrite,
        ),
        (
            "below the MR (C10-75)",
            w2,
            BindWr {
                addr: IOVA - 1,
                ..ok2
            },
            Some(m),
            BindError::Bounds,
        ),
        (
            "past the MR's end",
            w2,
            BindWr {
                addr: IOVA + MR_LEN - 4095,
                ..ok2
            },
            Some(m),
            BindError::Bounds,
        ),
        (
            "a range that wraps",
            w1,
            BindWr {
                addr: u64::MAX - 10,
                length: 100,
                ..ok1
            },
            Some(MrFacts {
                iova: u64::MAX - 100,
                length: 100,
                ..m
            }),
            BindError::Bounds,
        ),
        (
            "zero-based type 2 past the MR from its start",
            w2,
            BindWr {
                addr: IOVA + 8,
                length: MR_LEN,
                access: RW | ZERO_BASED,
                ..ok2
            },
            Some(m),
            BindError::Bounds,
        ),
    ];
    for (what, w, b, m, want) in cases {
        assert_eq!(check(&w, &b, m.as_ref()), Err(want), "{what}");
    }
    // The QP's PD must be the window's (C10-72).
    assert_eq!(
        w2.check_bind(&ok2, OTHER_PD, Some(&m)),
        Err(BindError::QpPd)
    );
    // A read-only window over an MR without local write is fine.
    let ro = BindWr {
        access: REMOTE_READ,
        ..ok2
    };
    let no_lw = MrFacts {
        access: MW_BIND,
        ..m
    };
    assert_eq!(check(&w2, &ro, Some(&no_lw)), Ok(()));
    // The whole MR, exactly.
    let whole = BindWr {
        addr: IOVA,
        length: MR_LEN,
        ..ok2
    };
    assert_eq!(check(&w2, &whole, Some(&m)), Ok(()));
    // Unbinding a type-1 window needs no MR.
    let unbind = BindWr {
        length: 0,
        mr_lkey: 0,
        ..ok1
    };
    assert_eq!(check(&w1, &unbind, None), Ok(()));
}

#[test]
fn type2_must_be_free_and_a_deallocated_window_binds_nothing() {
    let (mut w, b) = bound(MwType::Two, IOVA, 4096, RW);
    assert_eq!(w.state, State::Valid);
    let again = BindWr {
        new_rkey: (w.rkey & !0xff) | ((w.rkey + 1) & 0xff),
        ..b
    };
    assert_eq!(check(&w, &again, Some(&mr())), Err(BindError::NotFree));
    assert_eq!(w.dealloc(), Some(MR));
    assert_eq!(w.state, State::Invalid);
    assert_eq!(check(&w, &again, Some(&mr())), Err(BindError::NoWindow));
    let mut w1 = Window::new(MwType::One, PD, MW_RKEY);
    w1.dealloc();
    assert_eq!(
        check(&w1, &wr(MwType::One, IOVA, 8, RW), Some(&mr())),
        Err(BindError::NoWindow)
    );
}

#[test]
fn bind_takes_the_new_key_byte_and_type1_rebinds_replace() {
    let (mut w, b) = bound(MwType::One, IOVA + 0x100, 0x200, RW);
    assert_eq!(w.rkey, b.new_rkey);
    assert_eq!(
        w.bound,
        Some(Bound {
            mr: MR,
            mr_off: 0x100,
            addr: IOVA + 0x100,
            length: 0x200,
            access: RW,
            qp: 0,
        })
    );
    // A type-1 rebind replaces the binding and hands back the old MR.
    let b2 = BindWr {
        new_rkey: (w.rkey & !0xff) | ((w.rkey + 1) & 0xff),
        addr: IOVA,
        length: 16,
        ..b
    };
    assert_eq!(check(&w, &b2, Some(&mr())), Ok(()));
    assert_eq!(w.apply_bind(&b2, Some(&mr()), QP), Some(MR));
    assert_eq!(w.rkey, b2.new_rkey);
    // Length 0 unbinds: the window stays valid, reaches nothing, and lets its MR go.
    let b3 = BindWr {
        new_rkey: (w.rkey & !0xff) | ((w.rkey + 1) & 0xff),
        length: 0,
        ..b
    };
    assert_eq!(check(&w, &b3, None), Ok(()));
    assert_eq!(w.apply_bind(&b3, None, QP), Some(MR));
    assert_eq!((w.state, w.bound), (State::Valid, None));
    assert_eq!(
        w.resolve(w.rkey, PD, QP, &reach(IOVA, 1, 0)),
        Err(MemError::BadKey)
    );
}

#[test]
fn resolution_bounds_and_offsets() {
    let (w, _) = bound(MwType::One, IOVA + 0x1000, 0x2000, RW);
    let k = w.rkey;
    let base = IOVA + 0x1000;
    // Inside, at both edges: the MR offset is from the MR's start.
    assert_eq!(
        w.resolve(k, PD, QP, &reach(base, 0x2000, REMOTE_WRITE)),
        Ok((MR, 0x1000))
    );
    assert_eq!(
        w.resolve(k, PD, QP, &reach(base + 0x1ff8, 8, REMOTE_READ)),
        Ok((MR, 0x2ff8))
    );
    // One byte outside on either side, an overflowing length.
    for (addr, len) in [
        (base - 1, 1),
        (base + 0x1ff9, 8),
        (base, 0x2001),
        (base + 8, u64::MAX),
        (u64::MAX, 2),
    ] {
        assert_eq!(
            w.resolve(k, PD, QP, &reach(addr, len, REMOTE_WRITE)),
            Err(MemError::Bounds),
            "{addr:#x}+{len:#x}"
        );
    }
    // A whole-window flush starts at the window's first byte.
    let whole = Reach {
        addr: 0,
        len: 0,
        need: 0,
        whole: true,
    };
    assert_eq!(w.resolve(k, PD, QP, &whole), Ok((MR, 0x1000)));
}

#[test]
fn zero_based_windows_address_from_zero() {
    let (w, _) = bound(MwType::Two, IOVA + 0x3000, 0x1000, RW | ZERO_BASED);
    let k = w.rkey;
    assert_eq!(
        w.resolve(k, PD, QP, &reach(0, 8, REMOTE_WRITE)),
        Ok((MR, 0x3000))
    );
    assert_eq!(
        w.resolve(k, PD, QP, &reach(0xff8, 8, REMOTE_READ)),
        Ok((MR, 0x3ff8))
    );
    assert_eq!(
        w.resolve(k, PD, QP, &reach(0xff9, 8, REMOTE_READ)),
        Err(MemError::Bounds)
    );
    // The VA of the window's first byte is not an offset into it.
    assert_eq!(
        w.resolve(k, PD, QP, &reach(IOVA + 0x3000, 8, REMOTE_READ)),
        Err(MemError::Bounds)
    );
}

#[test]
fn rights_key_pd_and_qp_association() {
    let (w1, _) = bound(MwType::One, IOVA, 0x1000, REMOTE_READ);
    let k = w1.rkey;
    assert_eq!(
        w1.resolve(k, PD, QP, &reach(IOVA, 8, REMOTE_READ)),
        Ok((MR, 0))
    );
    // Rights the window lacks (whatever the MR has).
    for need in [REMOTE_WRITE, REMOTE_ATOMIC, FLUSH_GLOBAL] {
        assert_eq!(
            w1.resolve(k, PD, QP, &reach(IOVA, 8, need)),
            Err(MemError::Access)
        );
    }
    // The old key, another key byte, another PD.
    assert_eq!(
        w1.resolve(MW_RKEY, PD, QP, &reach(IOVA, 8, REMOTE_READ)),
        Err(MemError::BadKey)
    );
    assert_eq!(
        w1.resolve(k ^ 0x80, PD, QP, &reach(IOVA, 8, REMOTE_READ)),
        Err(MemError::BadKey)
    );
    assert_eq!(
        w1.resolve(k, OTHER_PD, QP, &reach(IOVA, 8, REMOTE_READ)),
        Err(MemError::BadPd)
    );
    // Type 1: any QP of the PD. Type 2: only the QP that bound it.
    assert!(w1
        .resolve(k, PD, QP + 1, &reach(IOVA, 8, REMOTE_READ))
        .is_ok());
    let (w2, _) = bound(MwType::Two, IOVA, 0x1000, RW);
    let k2 = w2.rkey;
    assert!(w2
        .resolve(k2, PD, QP, &reach(IOVA, 8, REMOTE_WRITE))
        .is_ok());
    assert_eq!(
        w2.resolve(k2, PD, QP + 1, &reach(IOVA, 8, REMOTE_WRITE)),
        Err(MemError::BadKey)
    );
}

#[test]
fn invalidation_rules() {
    // Type 1 cannot be invalidated (o10-37.2.26), bound or not, locally or remotely.
    let (mut w1, _) = bound(MwType::One, IOVA, 0x1000, RW);
    let k1 = w1.rkey;
    assert_eq!(w1.invalidate(k1, PD, QP, false), Err(NotInvalidated));
    assert_eq!(w1.invalidate(k1, PD, QP, true), Err(NotInvalidated));
    assert!(w1.resolve(k1, PD, QP, &reach(IOVA, 8, REMOTE_READ)).is_ok());

    // Type 2: the exact rkey, from the window's PD; remotely only on its QP.
    let (mut w2, _) = bound(MwType::Two, IOVA, 0x1000, RW);
    let k2 = w2.rkey;
    assert_eq!(w2.invalidate(MW_RKEY, PD, QP, false), Err(NotInvalidated));
    assert_eq!(w2.invalidate(k2, OTHER_PD, QP, false), Err(NotInvalidated));
    assert_eq!(w2.invalidate(k2, PD, QP + 1, true), Err(NotInvalidated));
    assert_eq!(w2.state, State::Valid);
    assert_eq!(w2.invalidate(k2, PD, QP, true), Ok(Some(MR)));
    assert_eq!((w2.state, w2.bound), (State::Free, None));
    assert_eq!(
        w2.resolve(k2, PD, QP, &reach(IOVA, 8, REMOTE_READ)),
        Err(MemError::BadKey)
    );
    // Not twice.
    assert_eq!(w2.invalidate(k2, PD, QP, false), Err(NotInvalidated));
    // Free again: it binds again with a new key byte, and a local invalidation from another
    // QP of the PD works.
    let b = BindWr {
        mw_index: k2 >> 8,
        new_rkey: (k2 & !0xff) | ((k2 + 1) & 0xff),
        ..wr(MwType::Two, IOVA, 0x100, RW)
    };
    assert_eq!(check(&w2, &b, Some(&mr())), Ok(()));
    assert_eq!(w2.apply_bind(&b, Some(&mr()), QP), None);
    assert_eq!(w2.invalidate(b.new_rkey, PD, QP + 5, false), Ok(Some(MR)));
    // Deallocation invalidates whatever the state.
    let (mut w3, _) = bound(MwType::Two, IOVA, 0x1000, RW);
    let k3 = w3.rkey;
    assert_eq!(w3.dealloc(), Some(MR));
    assert_eq!(
        w3.resolve(k3, PD, QP, &reach(IOVA, 8, REMOTE_READ)),
        Err(MemError::BadKey)
    );
    assert_eq!(w3.invalidate(k3, PD, QP, false), Err(NotInvalidated));
}

#[test]
fn mr_window_count_keeps_it_registered() {
    // No window: dereg goes ahead and marks the MR dying; no bind takes it afterwards.
    assert_eq!(mr_dereg(0), Ok(MR_DYING));
    assert_eq!(mr_bind_ref(MR_DYING), None);
    // Bound windows: EINVAL (IBA 10.6.7.2.6), until the last one goes.
    let c = mr_bind_ref(0).unwrap();
    let c = mr_bind_ref(c).unwrap();
    assert_eq!(c, 2);
    assert_eq!(mr_dereg(c), Err(22));
    let c = mr_unbind_ref(c);
    assert_eq!(mr_dereg(c), Err(22));
    let c = mr_unbind_ref(c);
    assert_eq!(mr_dereg(c), Ok(MR_DYING));
    // Never below zero, never into the dying bit.
    assert_eq!(mr_unbind_ref(0), 0);
    assert_eq!(mr_unbind_ref(MR_DYING), MR_DYING);
    assert_eq!(mr_bind_ref(MR_DYING - 1), None);
}

#[test]
fn bind_wqe_encoding_round_trips() {
    let b = BindWr {
        mw_index: 0x42,
        new_rkey: 0x4208,
        addr: 0x7000_1000,
        length: 0x2000,
        mr_lkey: 0x5133,
        access: REMOTE_WRITE | ZERO_BASED,
        verb: true,
    };
    let w = b.encode(9, 2, 0x4207);
    // The fields as the uapi documents them (what the provider writes).
    assert_eq!(
        w,
        SendWqe {
            wr_id: 9,
            opcode: wr_opcode::BIND_MW,
            send_flags: 2,
            imm_data: 0x4207,
            remote_addr: 0x7000_1000,
            rkey: 0x4208,
            compare_add: 0x2000,
            remote_qkey: 0x5133,
            swap: u64::from(REMOTE_WRITE | ZERO_BASED),
            remote_qpn: bind_flags::VERB,
            ..SendWqe::default()
        }
    );
    assert_eq!(BindWr::decode(&w), Ok(b));
    assert_eq!(
        BindWr::decode(&BindWr { verb: false, ..b }.encode(9, 2, 0x4207)),
        Ok(BindWr { verb: false, ..b })
    );
    // Untrusted fields: rights above 32 bits, unknown flags.
    assert_eq!(
        BindWr::decode(&SendWqe { swap: 1 << 32, ..w }),
        Err(BindError::Malformed)
    );
    assert_eq!(
        BindWr::decode(&SendWqe { remote_qpn: 2, ..w }),
        Err(BindError::Malformed)
    );
}
