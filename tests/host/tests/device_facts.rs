//! Host tests of the device-level pure logic: MTU mapping, port state, GUID, link rules, limits.
use port::{active_mtu_for_netdev_mtu, IbMtu, LinkFacts, PhysState, PortState};
use rrxe_host_tests::logic::{guid, limits, link, port};

#[test]
fn active_mtu_matches_ib_core_iboe_get_mtu_at_the_edges() {
    // iboe_get_mtu() reserves 96 bytes: 1500 -> 1404 -> 1024, 9000 -> 4096.
    assert_eq!(active_mtu_for_netdev_mtu(1500), Some(IbMtu::Mtu1024));
    assert_eq!(active_mtu_for_netdev_mtu(9000), Some(IbMtu::Mtu4096));
    assert_eq!(active_mtu_for_netdev_mtu(4096 + 96), Some(IbMtu::Mtu4096));
    assert_eq!(active_mtu_for_netdev_mtu(4096 + 95), Some(IbMtu::Mtu2048));
    assert_eq!(active_mtu_for_netdev_mtu(256 + 96), Some(IbMtu::Mtu256));
    assert_eq!(active_mtu_for_netdev_mtu(256 + 95), None);
    assert_eq!(active_mtu_for_netdev_mtu(0), None);
    assert_eq!(active_mtu_for_netdev_mtu(68), None);
}

#[test]
fn active_mtu_payload_plus_headers_always_fits_and_is_maximal() {
    for mtu in 0..70_000u32 {
        match active_mtu_for_netdev_mtu(mtu) {
            None => assert!(mtu < 256 + port::ROCE_HEADER_RESERVE),
            Some(m) => {
                assert!(m.bytes() + port::ROCE_HEADER_RESERVE <= mtu);
                assert!(m <= IbMtu::MAX);
                if m < IbMtu::MAX {
                    let next = IbMtu::from_raw(m as u32 + 1).unwrap();
                    assert!(next.bytes() + port::ROCE_HEADER_RESERVE > mtu);
                }
            }
        }
    }
}

#[test]
fn ib_mtu_codes_round_trip_and_reject_garbage() {
    for raw in 0..10u32 {
        match IbMtu::from_raw(raw) {
            Some(m) => {
                assert_eq!(m as u32, raw);
                assert_eq!(m.bytes(), 128 << raw);
            }
            None => assert!(raw == 0 || raw > 5),
        }
    }
}

#[test]
fn port_is_active_only_when_up_with_carrier_and_usable_mtu() {
    let up = LinkFacts {
        running: true,
        carrier: true,
        mtu: 1500,
    };
    assert_eq!(port::port_state(up), (PortState::Active, PhysState::LinkUp));
    for l in [
        LinkFacts {
            running: false,
            ..up
        },
        LinkFacts {
            carrier: false,
            ..up
        },
        LinkFacts { mtu: 300, ..up },
    ] {
        assert_eq!(port::port_state(l), (PortState::Down, PhysState::Disabled));
    }
}

#[test]
fn node_guid_is_modified_eui64_of_the_mac() {
    let g = guid::node_guid_from_mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    assert_eq!(g, [0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56]);
}

#[test]
fn link_names_starting_with_rxe_are_refused() {
    assert_eq!(
        link::check_ibdev_name(b"rxe0"),
        Err(link::LinkError::ReservedName)
    );
    assert_eq!(
        link::check_ibdev_name(b"rxe"),
        Err(link::LinkError::ReservedName)
    );
    assert_eq!(link::check_ibdev_name(b""), Err(link::LinkError::BadName));
    assert_eq!(
        link::check_ibdev_name(&[b'a'; 64]),
        Err(link::LinkError::BadName)
    );
    assert_eq!(
        link::check_ibdev_name(b"a\0b"),
        Err(link::LinkError::BadName)
    );
    assert_eq!(link::check_ibdev_name(b"rrxe0"), Ok(()));
    assert_eq!(link::check_ibdev_name(b"myrxe"), Ok(()));
    assert_eq!(link::LinkError::ReservedName.errno(), 22);
    assert_eq!(link::LinkError::Exists.errno(), 17);
}

#[test]
fn only_plain_ethernet_netdevs_are_accepted() {
    let eth = link::NetdevKind {
        arphrd: 1,
        addr_len: 6,
        is_vlan: false,
    };
    assert_eq!(link::check_netdev(eth), Ok(()));
    let lo = link::NetdevKind {
        arphrd: 772,
        addr_len: 6,
        is_vlan: false,
    };
    assert_eq!(link::check_netdev(lo), Err(link::LinkError::NotEthernet));
    assert!(link::check_netdev(link::NetdevKind {
        is_vlan: true,
        ..eth
    })
    .is_err());
    assert!(link::check_netdev(link::NetdevKind { addr_len: 0, ..eth }).is_err());
}

#[test]
fn limits_are_self_consistent() {
    // The CQ ring has MAX_CQE + 1 slots and must be a power of two.
    assert!((limits::MAX_CQE + 1).is_power_of_two());
    assert!(limits::MAX_QP_WR.is_power_of_two());
    const { assert!(limits::MAX_SGE_RD <= limits::MAX_SGE) };
    assert_eq!(
        limits::MAX_RES_RD_ATOM,
        limits::MAX_QP_RD_ATOM * limits::MAX_QP
    );
    assert_eq!(limits::PKEY_TBL_LEN, 1);
}
