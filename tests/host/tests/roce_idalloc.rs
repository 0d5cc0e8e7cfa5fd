//! RoCE addressing rules and the id allocator.
use proptest::prelude::*;
use rrxe_host_tests::logic::{idalloc, roce};

#[test]
fn udp_sport_matches_ib_core_examples() {
    // flow label given: folded into 0xC000..; none: derived from the QP numbers, symmetrically.
    assert_eq!(roce::flow_label_to_udp_sport(0), 0xc000);
    assert_eq!(roce::flow_label_to_udp_sport(0x3fff), 0xffff);
    assert_eq!(roce::flow_label_to_udp_sport(0x4000), 0xc001);
    assert_eq!(
        roce::udp_sport(0, 17, 17),
        roce::flow_label_to_udp_sport(roce::calc_flow_label(17, 17))
    );
    assert_eq!(roce::calc_flow_label(17, 17), 289);
}

proptest! {
    #[test]
    fn udp_sport_is_in_the_roce_range_and_symmetric(fl in any::<u32>(), a in 0u32..1 << 24, b in 0u32..1 << 24) {
        let p = roce::udp_sport(fl, a, b);
        prop_assert!(p >= 0xc000);
        prop_assert_eq!(roce::udp_sport(0, a, b), roce::udp_sport(0, b, a));
        prop_assert!(roce::calc_flow_label(a, b) <= roce::FLOW_LABEL_MASK);
    }

    #[test]
    fn allocated_ids_are_unique_in_range_and_freeable(ops in proptest::collection::vec(any::<(bool, u8)>(), 0..400)) {
        let mut bits = [0u64; 2];
        let mut a = idalloc::IdAlloc::new(2);
        let mut live = std::collections::BTreeSet::new();
        for (alloc, pick) in ops {
            if alloc || live.is_empty() {
                match a.alloc(&mut bits) {
                    Some(id) => { prop_assert!((2..130).contains(&id)); prop_assert!(live.insert(id)); }
                    None => prop_assert_eq!(live.len(), 128),
                }
            } else {
                let id = *live.iter().nth(pick as usize % live.len()).unwrap();
                prop_assert!(a.free(&mut bits, id));
                prop_assert!(!a.free(&mut bits, id));
                live.remove(&id);
            }
            prop_assert_eq!(a.in_use() as usize, live.len());
        }
    }

    /// The word-at-a-time scan hands out exactly the id a bit-by-bit round-robin search from
    /// the cursor would (the next free id after the last one handed out, wrapping).
    #[test]
    fn alloc_is_the_next_free_id_after_the_cursor(
        words in 1usize..5,
        ops in proptest::collection::vec(any::<(u8, u16)>(), 0..600),
    ) {
        let n = words as u32 * 64;
        let mut bits = vec![0u64; words];
        let mut a = idalloc::IdAlloc::new(1);
        let mut live = vec![false; n as usize];
        let mut cursor = 0u32;
        for (op, pick) in ops {
            if op % 3 != 0 {
                let want = (0..n).map(|s| (cursor + s) % n).find(|&i| !live[i as usize]);
                let got = a.alloc(&mut bits);
                prop_assert_eq!(got, want.map(|i| i + 1));
                if let Some(i) = want {
                    live[i as usize] = true;
                    cursor = (i + 1) % n;
                }
            } else {
                let i = pick as u32 % n;
                prop_assert_eq!(a.free(&mut bits, i + 1), live[i as usize]);
                live[i as usize] = false;
            }
        }
    }
}

#[test]
fn gids_map_to_ip_addresses() {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[10, 99, 0, 1]);
    assert_eq!(roce::gid_to_addr(g), roce::GidAddr::V4([10, 99, 0, 1]));
    assert!(!roce::gid_is_multicast(g));
    g[12] = 239;
    assert!(roce::gid_is_multicast(g));
    let mut l = [0u8; 16];
    l[0] = 0xfe;
    l[1] = 0x80;
    assert_eq!(roce::gid_to_addr(l), roce::GidAddr::V6(l));
}

#[test]
fn freed_ids_are_reused_last_and_keys_rotate() {
    let mut bits = [0u64; 1];
    let mut a = idalloc::IdAlloc::new(16);
    let x = a.alloc(&mut bits).unwrap();
    assert!(a.free(&mut bits, x));
    assert_ne!(
        a.alloc(&mut bits).unwrap(),
        x,
        "round-robin: not the id just freed"
    );
    assert!(!a.free(&mut bits, 3), "below the range");
    assert_eq!(idalloc::key_index(idalloc::make_key(77, 0xab)), 77);
    assert_ne!(idalloc::make_key(77, 1), idalloc::make_key(77, 2));
}

#[test]
fn key_byte_is_the_random_byte_unless_it_repeats() {
    assert_eq!(idalloc::next_key_byte(0x1234_56ab, 0x00), 0xab);
    assert_eq!(idalloc::next_key_byte(0xffff_ff10, 0x11), 0x10);
    // Never the previous key byte of the index, for any random value.
    for last in 0..=255u8 {
        for r in [0u32, 1, 0xff, 0x100, 0xdead_beef, u32::MAX] {
            assert_ne!(
                idalloc::next_key_byte(r.wrapping_add(u32::from(last)), last),
                last
            );
        }
        assert_eq!(
            idalloc::next_key_byte(u32::from(last), last),
            last.wrapping_add(1)
        );
    }
}

#[test]
fn key_bytes_follow_the_random_source_not_a_sequence() {
    // A deterministic stand-in for get_random_u32: successive keys at one index are not
    // consecutive (the old allocator rotated 0, 1, 2, ...), and every byte value is reachable.
    let mut x = 0x9e37_79b9u32;
    let mut last = 0u8;
    let mut seen = [false; 256];
    let mut consecutive = 0;
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let k = idalloc::next_key_byte(x, last);
        assert_ne!(k, last);
        consecutive += usize::from(k == last.wrapping_add(1));
        seen[usize::from(k)] = true;
        let key = idalloc::make_key(7, k);
        assert_eq!(idalloc::key_index(key), 7);
        assert_eq!(key & 0xff, u32::from(k));
        last = k;
    }
    assert!(seen.iter().all(|&s| s));
    assert!(
        consecutive < 100,
        "{consecutive} consecutive key bytes out of 4096"
    );
}

#[test]
fn stat_names_are_nul_terminated_for_the_kernel() {
    use rrxe_host_tests::logic::stats;
    for (i, n) in stats::NAMES.iter().enumerate() {
        assert!(
            n.ends_with('\0') && !n[..n.len() - 1].contains('\0'),
            "{n:?}"
        );
        assert_eq!(stats::ALL[i].index(), i);
        assert!(!stats::ALL[i].name().is_empty());
    }
}
