//! uapi ring geometry: what the provider will map for a CQ.
use rrxe_uapi::*;

#[test]
fn cq_rings_have_power_of_two_slots_covering_the_request() {
    for cqe in 1..70_000u32 {
        let s = cq_ring_slots(cqe);
        assert!(
            s.is_power_of_two() && s >= cqe && s / 2 < cqe.max(1),
            "cqe {cqe} -> {s}"
        );
    }
}

#[test]
fn the_largest_cq_fits_in_a_small_mapping() {
    // max_cqe (32767) -> 32768 slots of 64 bytes + a 192-byte header: 2 MiB + 1 page.
    let bytes = ring_bytes(cq_ring_slots(32767), CQE_SIZE, 4096);
    assert_eq!(bytes, 2 * 1024 * 1024 + 4096);
    assert_eq!(ring_bytes(1, CQE_SIZE, 4096), 4096);
}

#[test]
fn indices_sit_on_separate_cache_lines() {
    assert_eq!(
        core::mem::offset_of!(RingHeader, consumer) - core::mem::offset_of!(RingHeader, producer),
        CACHELINE
    );
    assert_eq!(core::mem::align_of::<RingHeader>(), CACHELINE);
}
