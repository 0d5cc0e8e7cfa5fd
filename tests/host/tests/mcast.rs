//! Multicast group table and group MAC addresses, against a model.
use proptest::prelude::*;
use rrxe_host_tests::logic::limits::MAX_MCAST_QP_ATTACH;
use rrxe_host_tests::logic::mcast::{self, Change, Group, McastError, Table, GROUP_QPS};
use std::collections::BTreeMap;

fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

fn members(t: &Table<Vec<Group>>, gid: [u8; 16]) -> Vec<u32> {
    let mut out = [0u32; GROUP_QPS];
    let n = t.members(&gid, &mut out);
    let mut v = out[..n].to_vec();
    v.sort();
    v
}

/// Attach, growing the storage the way the kernel shell does on `NoRoom`.
fn attach(t: &mut Table<Vec<Group>>, gid: [u8; 16], qpn: u32) -> Result<Change, McastError> {
    loop {
        match t.attach(gid, qpn) {
            Err(McastError::NoRoom) => {
                let bigger = vec![Group::EMPTY; t.grown_capacity()];
                assert!(bigger.len() > t.capacity(), "grow must make room");
                t.regrow(bigger).expect("bigger storage");
            }
            r => return r,
        }
    }
}

#[test]
fn group_macs_follow_rfc_1112_and_2464() {
    assert_eq!(
        mcast::mac_of(v4([239, 129, 1, 2])),
        Some([0x01, 0, 0x5e, 0x01, 1, 2])
    );
    assert_eq!(
        mcast::mac_of(v4([224, 0, 0, 251])),
        Some([0x01, 0, 0x5e, 0, 0, 251])
    );
    let mut g6 = [0u8; 16];
    g6[0] = 0xff;
    g6[1] = 0x0e;
    g6[12..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(
        mcast::mac_of(g6),
        Some([0x33, 0x33, 0xde, 0xad, 0xbe, 0xef])
    );
    assert_eq!(mcast::mac_of(v4([10, 0, 0, 1])), None);
    assert_eq!(
        mcast::mac_of([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        None
    );
}

#[test]
fn unicast_gids_are_refused_and_unknown_detach_is_einval() {
    let mut t = Table::new(Vec::<Group>::new());
    assert_eq!(
        t.attach(v4([10, 0, 0, 1]), 5),
        Err(McastError::NotMulticast)
    );
    assert_eq!(
        t.detach(v4([239, 0, 0, 1]), 5),
        Err(McastError::NotAttached)
    );
    assert_eq!(
        attach(&mut t, v4([239, 0, 0, 1]), 5),
        Ok(Change::GroupCreated)
    );
    assert_eq!(
        t.detach(v4([239, 0, 0, 1]), 6),
        Err(McastError::NotAttached)
    );
    assert_eq!(t.detach(v4([239, 0, 0, 1]), 5), Ok(Change::GroupRemoved));
    assert!(t.is_empty());
}

#[test]
fn a_group_holds_max_mcast_qp_attach_qps() {
    let mut t = Table::new(Vec::<Group>::new());
    let g = v4([239, 1, 1, 1]);
    for q in 0..MAX_MCAST_QP_ATTACH {
        attach(&mut t, g, 100 + q).unwrap();
    }
    assert_eq!(attach(&mut t, g, 7), Err(McastError::Full));
    // Attaching a member again is counted, not refused.
    assert_eq!(attach(&mut t, g, 100), Ok(Change::Same));
    assert_eq!(members(&t, g).len(), MAX_MCAST_QP_ATTACH as usize);
}

proptest! {
    #[test]
    fn table_matches_a_model(ops in proptest::collection::vec((any::<bool>(), 0u8..12, 0u32..6), 0..300)) {
        let mut t = Table::new(Vec::<Group>::new());
        let mut model: BTreeMap<[u8; 16], BTreeMap<u32, u32>> = BTreeMap::new();
        for (att, gi, qpn) in ops {
            let gid = v4([239, 0, gi / 4, gi]);
            if att {
                let existed = model.contains_key(&gid);
                let r = attach(&mut t, gid, qpn);
                *model.entry(gid).or_default().entry(qpn).or_default() += 1;
                prop_assert_eq!(r, Ok(if existed { Change::Same } else { Change::GroupCreated }));
            } else {
                let r = t.detach(gid, qpn);
                match model.get_mut(&gid).and_then(|m| m.get_mut(&qpn)) {
                    None => prop_assert_eq!(r, Err(McastError::NotAttached)),
                    Some(refs) => {
                        *refs -= 1;
                        if *refs == 0 {
                            model.get_mut(&gid).unwrap().remove(&qpn);
                        }
                        let gone = model[&gid].is_empty();
                        if gone {
                            model.remove(&gid);
                        }
                        prop_assert_eq!(r, Ok(if gone { Change::GroupRemoved } else { Change::Same }));
                    }
                }
            }
            prop_assert_eq!(t.len(), model.len());
            let gids: Vec<_> = t.gids().collect();
            let want: Vec<_> = model.keys().copied().collect();
            prop_assert_eq!(gids, want);
            for (g, m) in &model {
                prop_assert!(t.has_group(g));
                prop_assert_eq!(members(&t, *g), m.keys().copied().collect::<Vec<_>>());
            }
            prop_assert!(!t.has_group(&v4([239, 9, 9, 9])));
        }
    }
}
