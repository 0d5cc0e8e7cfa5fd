//! Deterministic tests of the send ring.

use core::ptr;

use rrxe_uapi::{SendWqe, Sge, SQ_FLAG_KERNEL_BUSY};

use super::harness::*;
use crate::abi::{
    ibv_send_wr, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_SEND_FENCE, IBV_SEND_INLINE,
    IBV_SEND_IP_CSUM, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_WRITE, IBV_WR_BIND_MW, IBV_WR_DRIVER1,
    IBV_WR_LOCAL_INV, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV, IBV_WR_TSO,
};
use crate::ring::{opcode_allowed, SqCaps};

const RC: SqCaps = SqCaps {
    qp_type: IBV_QPT_RC,
    max_sge: 4,
    max_inline: 64,
};

fn caps(qp_type: u32) -> SqCaps {
    SqCaps { qp_type, ..RC }
}

/// A WR of `op` that is otherwise valid on every QP type.
fn spec(id: u64, op: u32) -> SendSpec {
    let mut s = SendSpec::new(id, op);
    s.imm = 0xdead_beef;
    s.compare_add = 3;
    s.swap = 4;
    s
}

#[test]
fn opcode_table_per_qp_type() {
    use IBV_WR_ATOMIC_CMP_AND_SWP as CAS;
    use IBV_WR_ATOMIC_FETCH_AND_ADD as FAA;
    let table: [(u32, &[u32]); 3] = [
        (
            IBV_QPT_RC,
            &[
                IBV_WR_SEND,
                IBV_WR_SEND_WITH_IMM,
                IBV_WR_RDMA_WRITE,
                IBV_WR_RDMA_WRITE_WITH_IMM,
                IBV_WR_RDMA_READ,
                CAS,
                FAA,
                IBV_WR_LOCAL_INV,
                IBV_WR_BIND_MW,
                IBV_WR_SEND_WITH_INV,
                IBV_WR_ATOMIC_WRITE,
                IBV_WR_FLUSH,
            ],
        ),
        (
            IBV_QPT_UC,
            &[
                IBV_WR_SEND,
                IBV_WR_SEND_WITH_IMM,
                IBV_WR_RDMA_WRITE,
                IBV_WR_RDMA_WRITE_WITH_IMM,
                IBV_WR_BIND_MW,
            ],
        ),
        (IBV_QPT_UD, &[IBV_WR_SEND, IBV_WR_SEND_WITH_IMM]),
    ];
    for (qpt, ok) in table {
        for op in (0..20).chain([255, u32::MAX]) {
            let want = ok.contains(&op);
            assert_eq!(opcode_allowed(qpt, op), want, "qp type {qpt} opcode {op}");
            let (_m, sq) = sq_ring(4, caps(qpt), 0);
            let mut sp = spec(1, op);
            if op == IBV_WR_ATOMIC_WRITE {
                // Its 8 bytes inline.
                sp.flags |= IBV_SEND_INLINE;
                sp.sges = vec![SgeSpec::bytes(&[1; 8])];
            }
            if op == IBV_WR_FLUSH {
                // No data; global visibility of a range.
                sp.sges = vec![];
                sp.imm = 1;
            }
            let l = SendList::for_qp(qpt, &[sp]);
            // A bind names a window (its rkey is all the WQE takes from it).
            let mut mw = crate::abi::ibv_mw {
                rkey: 0x1234_5601,
                ..Default::default()
            };
            if op == IBV_WR_BIND_MW {
                // SAFETY: element 0 of the list; `mw` outlives the post.
                unsafe { (*l.ptr(0)).__bindgen_anon_2.bind_mw.mw = &mut mw };
            }
            let (rc, bad, db) = post(&sq, &l);
            if want {
                assert_eq!((rc, bad, db), (0, None, 1), "qp type {qpt} opcode {op}");
            } else {
                assert_eq!(
                    (rc, bad, db),
                    (libc::EINVAL, Some(0), 0),
                    "qp type {qpt} opcode {op}"
                );
            }
        }
    }
    // Other QP types cannot even have a send ring.
    assert!(!opcode_allowed(crate::abi::IBV_QPT_RAW_PACKET, IBV_WR_SEND));
}

#[test]
fn unsupported_opcodes_are_einval() {
    for op in [IBV_WR_TSO, IBV_WR_DRIVER1] {
        let (m, sq) = sq_ring(4, RC, 0);
        let l = SendList::new(&[spec(1, IBV_WR_SEND), spec(2, op), spec(3, IBV_WR_SEND)]);
        assert_eq!(post(&sq, &l), (libc::EINVAL, Some(1), 1), "opcode {op}");
        let mut k = Kernel::consumer_of(&m);
        assert_eq!(k.pop_send().unwrap().hdr.wr_id, 1);
        assert!(k.pop_send().is_none());
    }
}

#[test]
fn every_field_reaches_the_kernel() {
    for qpt in [IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD] {
        for op in ALL_WR_OPCODES
            .into_iter()
            .filter(|&op| oracle_opcode_ok(qpt, op))
            // No body reaches the kernel for these (tested below).
            .filter(|&op| ![IBV_WR_LOCAL_INV, IBV_WR_ATOMIC_WRITE, IBV_WR_FLUSH].contains(&op))
        {
            let mut s = spec(0x1234_5678_9abc_def0, op);
            s.flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_FENCE;
            s.sges = vec![
                SgeSpec::plain(0x1111_2222_3333_4440, 8, 0xa),
                SgeSpec::plain(5, 6, 7),
            ];
            s.remote_addr = 0xfeed_0000_0000_1000;
            s.rkey = 0xabcd;
            s.compare_add = 0x0102_0304_0506_0708;
            s.swap = 0x1112_1314_1516_1718;
            s.ah = Some(42);
            s.remote_qpn = 0x00ff_ffff;
            s.remote_qkey = 0x8000_0001;
            let (m, sq) = sq_ring(2, caps(qpt), 7);
            let l = SendList::for_qp(qpt, core::slice::from_ref(&s));
            assert_eq!(post(&sq, &l), (0, None, 1));
            let got = Kernel::consumer_of(&m).pop_send().unwrap();
            assert_eq!(got, oracle_wqe(&s, qpt), "qp type {qpt} opcode {op}");
            // Spot checks of the oracle itself.
            assert_eq!(got.hdr.opcode, op);
            assert_eq!(
                got.sges[0],
                Sge {
                    addr: 0x1111_2222_3333_4440,
                    length: 8,
                    lkey: 0xa
                }
            );
            let imm = op == IBV_WR_SEND_WITH_IMM
                || op == IBV_WR_RDMA_WRITE_WITH_IMM
                || op == IBV_WR_SEND_WITH_INV;
            assert_eq!(got.hdr.imm_data, if imm { 0xdead_beef } else { 0 });
            if qpt == IBV_QPT_UD {
                assert_eq!(
                    (got.hdr.ah_num, got.hdr.remote_qpn, got.hdr.remote_qkey),
                    (42, 0x00ff_ffff, 0x8000_0001)
                );
                assert_eq!(got.hdr.remote_addr, 0);
            } else if op == IBV_WR_ATOMIC_CMP_AND_SWP {
                assert_eq!(
                    (got.hdr.compare_add, got.hdr.swap),
                    (0x0102_0304_0506_0708, 0x1112_1314_1516_1718)
                );
            }
        }
    }
}

#[test]
fn send_flags() {
    for (flags, ok) in [
        (0, true),
        (
            IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
            true,
        ),
        (IBV_SEND_IP_CSUM, false),
        (1 << 5, false),
        (1 << 31, false),
    ] {
        let (_m, sq) = sq_ring(4, RC, 0);
        let mut s = spec(1, IBV_WR_SEND);
        s.flags = flags;
        let want = if ok {
            (0, None, 1)
        } else {
            (libc::EINVAL, Some(0), 0)
        };
        assert_eq!(post(&sq, &SendList::new(&[s])), want, "flags {flags:#x}");
    }
}

#[test]
fn sge_count_limits() {
    let (m, sq) = sq_ring(8, RC, 0);
    let mut k = Kernel::consumer_of(&m);
    let with = |n: usize| {
        let mut s = spec(n as u64, IBV_WR_SEND);
        s.sges = (0..n as u64).map(|i| SgeSpec::plain(i, 1, 2)).collect();
        s
    };
    // 0..=max_sge fine, with a NULL sg_list for 0.
    for n in 0..=4 {
        assert_eq!(post(&sq, &SendList::new(&[with(n)])), (0, None, 1));
        assert_eq!(k.pop_send().unwrap().sges.len(), n);
    }
    assert_eq!(
        post(&sq, &SendList::new(&[with(5)])),
        (libc::EINVAL, Some(0), 0)
    );
    let mut neg = with(1);
    neg.num_sge = Some(-1);
    assert_eq!(
        post(&sq, &SendList::new(&[neg])),
        (libc::EINVAL, Some(0), 0)
    );
    let mut null = with(2);
    null.null_sg_list = true;
    assert_eq!(
        post(&sq, &SendList::new(&[null])),
        (libc::EINVAL, Some(0), 0)
    );
    assert!(k.pop_send().is_none());
}

#[test]
fn inline_payload() {
    let (m, sq) = sq_ring(8, RC, u32::MAX);
    let mut k = Kernel::consumer_of(&m);
    let a: Vec<u8> = (0..40).collect();
    let b: Vec<u8> = (100..124).collect();
    // Exactly max_inline, gathered from two SGEs and an empty one.
    let s = spec(1, IBV_WR_SEND).inline(&[&a, &[], &b]);
    assert_eq!(post(&sq, &SendList::new(&[s])), (0, None, 1));
    let got = k.pop_send().unwrap();
    assert_eq!(got.hdr.inline_len, 64);
    assert_eq!(got.hdr.num_sge, 0);
    assert_eq!(got.inline, [a.as_slice(), b.as_slice()].concat());
    // RDMA WRITE inline; more SGEs than max_sge is fine for inline (they only gather).
    let parts: Vec<&[u8]> = (0..6).map(|_| &a[..5]).collect();
    let s = spec(2, IBV_WR_RDMA_WRITE_WITH_IMM).inline(&parts);
    assert_eq!(
        post(&sq, &SendList::new(core::slice::from_ref(&s))),
        (0, None, 1)
    );
    assert_eq!(k.pop_send().unwrap(), oracle_wqe(&s, IBV_QPT_RC));
    // One byte too many.
    let big = vec![7u8; 65];
    let s = spec(3, IBV_WR_SEND).inline(&[&big]);
    assert_eq!(post(&sq, &SendList::new(&[s])), (libc::EINVAL, Some(0), 0));
    // Inline READ / atomic make no sense.
    for op in [IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD] {
        let s = spec(4, op).inline(&[&a[..8]]);
        assert_eq!(post(&sq, &SendList::new(&[s])), (libc::EINVAL, Some(0), 0));
    }
    // Zero-length inline.
    let s = spec(5, IBV_WR_SEND).inline(&[]);
    assert_eq!(post(&sq, &SendList::new(&[s])), (0, None, 1));
    assert_eq!(k.pop_send().unwrap().hdr.inline_len, 0);
    assert!(k.pop_send().is_none());
}

#[test]
fn inline_with_zero_max_inline() {
    let c = SqCaps {
        max_inline: 0,
        ..RC
    };
    let (_m, sq) = sq_ring(2, c, 0);
    let s = spec(1, IBV_WR_SEND).inline(&[b"x"]);
    assert_eq!(post(&sq, &SendList::new(&[s])), (libc::EINVAL, Some(0), 0));
}

#[test]
fn atomics_need_alignment_and_eight_bytes() {
    let (_m, sq) = sq_ring(8, RC, 0);
    for (addr, len, ok) in [
        (0x1000, 8, true),
        (0x1004, 8, false),
        (0x1000, 7, false),
        (0x1000, 16, true),
    ] {
        let mut s = spec(1, IBV_WR_ATOMIC_CMP_AND_SWP);
        s.remote_addr = addr;
        s.sges = vec![SgeSpec::plain(0x2000, len, 1)];
        let want = if ok {
            (0, None, 1)
        } else {
            (libc::EINVAL, Some(0), 0)
        };
        assert_eq!(
            post(&sq, &SendList::new(&[s])),
            want,
            "addr {addr:#x} len {len}"
        );
    }
}

#[test]
fn ud_needs_a_known_ah() {
    let (_m, sq) = sq_ring(4, caps(IBV_QPT_UD), 0);
    for (ah, ok) in [
        (Some(0), true),
        (Some(999), true),
        (None, false),
        (Some(FOREIGN_AH), false),
    ] {
        let mut s = spec(1, IBV_WR_SEND);
        s.ah = ah;
        let want = if ok {
            (0, None, 1)
        } else {
            (libc::EINVAL, Some(0), 0)
        };
        assert_eq!(post(&sq, &SendList::new_ud(&[s])), want, "ah {ah:?}");
    }
}

#[test]
fn full_ring_is_enomem_at_the_first_wr_that_does_not_fit() {
    let (m, sq) = sq_ring(4, RC, u32::MAX - 1);
    let specs: Vec<_> = (0..6).map(|i| spec(i, IBV_WR_SEND)).collect();
    let l = SendList::new(&specs);
    assert_eq!(post(&sq, &l), (libc::ENOMEM, Some(4), 1));
    // Header: producer advanced by 4 across the u32 wrap.
    let mut k = Kernel::consumer_of(&m);
    assert_eq!(k.producer().load(core::sync::atomic::Ordering::SeqCst), 2);
    // Nothing fits until the kernel consumes.
    assert_eq!(
        post(&sq, &SendList::new(&[spec(9, IBV_WR_SEND)])),
        (libc::ENOMEM, Some(0), 0)
    );
    assert_eq!(k.pop_send().unwrap().hdr.wr_id, 0);
    // The freed slot is found by re-reading the consumer index mid-list.
    let l = SendList::new(&[spec(10, IBV_WR_SEND), spec(11, IBV_WR_SEND)]);
    assert_eq!(post(&sq, &l), (libc::ENOMEM, Some(1), 1));
    let ids: Vec<u64> = core::iter::from_fn(|| k.pop_send())
        .map(|w| w.hdr.wr_id)
        .collect();
    assert_eq!(ids, [1, 2, 3, 10]);
}

#[test]
fn a_bad_wr_in_the_middle_posts_the_ones_before_it() {
    let (m, sq) = sq_ring(8, RC, 0);
    let mut bad = spec(2, IBV_WR_SEND);
    bad.num_sge = Some(99);
    let l = SendList::new(&[
        spec(0, IBV_WR_SEND),
        spec(1, IBV_WR_RDMA_WRITE),
        bad,
        spec(3, IBV_WR_SEND),
    ]);
    assert_eq!(post(&sq, &l), (libc::EINVAL, Some(2), 1));
    let mut k = Kernel::consumer_of(&m);
    let ids: Vec<u64> = core::iter::from_fn(|| k.pop_send())
        .map(|w| w.hdr.wr_id)
        .collect();
    assert_eq!(ids, [0, 1]);
}

#[test]
fn doorbell_once_per_call_and_never_when_busy() {
    let (m, sq) = sq_ring(16, RC, 0);
    let mut k = Kernel::consumer_of(&m);
    let five: Vec<_> = (0..5).map(|i| spec(i, IBV_WR_SEND)).collect();
    assert_eq!(post(&sq, &SendList::new(&five)), (0, None, 1));
    k.flags()
        .store(SQ_FLAG_KERNEL_BUSY, core::sync::atomic::Ordering::SeqCst);
    assert_eq!(post(&sq, &SendList::new(&five)), (0, None, 0));
    // Other bits of the flags word do not matter.
    k.flags()
        .store(!SQ_FLAG_KERNEL_BUSY, core::sync::atomic::Ordering::SeqCst);
    assert_eq!(post(&sq, &SendList::new(&five[..1])), (0, None, 1));
    k.flags().store(0, core::sync::atomic::Ordering::SeqCst);
    // Nothing posted: no doorbell.
    assert_eq!(post(&sq, &SendList::new(&[])), (0, None, 0));
    let mut bad = spec(1, IBV_WR_SEND);
    bad.flags = IBV_SEND_IP_CSUM;
    assert_eq!(
        post(&sq, &SendList::new(&[bad])),
        (libc::EINVAL, Some(0), 0)
    );
    assert_eq!(core::iter::from_fn(|| k.pop_send()).count(), 11);
}

#[test]
fn doorbell_error_is_returned_with_the_first_wr() {
    let (m, sq) = sq_ring(4, RC, 0);
    let l = SendList::new(&[spec(1, IBV_WR_SEND)]);
    let mut h = Hooks {
        doorbells: 0,
        doorbell_errno: libc::EIO,
    };
    let sentinel = ptr::dangling_mut::<ibv_send_wr>();
    let mut bad = sentinel;
    // SAFETY: a valid list; `bad` writable.
    let rc = unsafe { sq.post_send(l.head(), &mut bad, &mut h) };
    assert_eq!((rc, bad, h.doorbells), (libc::EIO, l.head(), 1));
    // The WQE is in the ring all the same (a later doorbell would send it).
    assert_eq!(Kernel::consumer_of(&m).pop_send().unwrap().hdr.wr_id, 1);
    // A doorbell error wins over a WR error: the kernel was told about none of the WQEs.
    let mut s = spec(2, IBV_WR_SEND);
    s.opcode = IBV_WR_TSO;
    let l = SendList::new(&[spec(1, IBV_WR_SEND), s]);
    // SAFETY: as above.
    let rc = unsafe { sq.post_send(l.head(), &mut bad, &mut h) };
    assert_eq!((rc, l.index_of(bad), h.doorbells), (libc::EIO, Some(0), 2));
    // Without a doorbell error, the failing WR.
    h.doorbell_errno = 0;
    bad = sentinel;
    // SAFETY: as above.
    let rc = unsafe { sq.post_send(l.head(), &mut bad, &mut h) };
    assert_eq!(
        (rc, l.index_of(bad), h.doorbells),
        (libc::EINVAL, Some(1), 3)
    );
}

#[test]
fn null_bad_wr_and_null_list() {
    let (_m, sq) = sq_ring(1, RC, 0);
    let mut h = Hooks::default();
    let l = SendList::new(&[spec(1, IBV_WR_SEND), spec(2, IBV_WR_SEND)]);
    // SAFETY: a valid list; NULL bad_wr is allowed.
    let rc = unsafe { sq.post_send(l.head(), ptr::null_mut(), &mut h) };
    assert_eq!((rc, h.doorbells), (libc::ENOMEM, 1));
    // SAFETY: an empty list.
    let rc = unsafe { sq.post_send(ptr::null_mut(), ptr::null_mut(), &mut h) };
    assert_eq!((rc, h.doorbells), (0, 1));
}

#[test]
fn corrupt_consumer_index_is_eio_and_touches_nothing() {
    let (m, sq) = sq_ring(4, RC, 10);
    let mut k = Kernel::consumer_of(&m);
    for scribble in [5, 11, 15, u32::MAX, 0x8000_0000] {
        k.consumer()
            .store(scribble, core::sync::atomic::Ordering::SeqCst);
        let l = SendList::new(&[spec(1, IBV_WR_SEND)]);
        assert_eq!(
            post(&sq, &l),
            (libc::EIO, Some(0), 0),
            "consumer {scribble}"
        );
        assert_eq!(k.producer().load(core::sync::atomic::Ordering::SeqCst), 10);
    }
    // Sane again: usable again.
    k.consumer().store(10, core::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        post(&sq, &SendList::new(&[spec(1, IBV_WR_SEND)])),
        (0, None, 1)
    );
    assert_eq!(k.pop_send().unwrap().hdr.wr_id, 1);
}

#[test]
fn scribbled_header_geometry_is_ignored_after_construction() {
    let (m, sq) = sq_ring(2, RC, 0);
    m.set_u32(core::mem::offset_of!(rrxe_uapi::RingHeader, log2_slots), 31);
    m.set_u32(
        core::mem::offset_of!(rrxe_uapi::RingHeader, slot_size),
        u32::MAX,
    );
    let l = SendList::new(&(0..3).map(|i| spec(i, IBV_WR_SEND)).collect::<Vec<_>>());
    assert_eq!(post(&sq, &l), (libc::ENOMEM, Some(2), 1));
}

#[test]
fn slot_one_and_last_slot_reach_the_guard_page() {
    // A 1-slot ring and the last slot of a bigger one, both ending at the guard page (an
    // out-of-bounds write would fault).
    for slots in [1, 8] {
        let c = SqCaps {
            max_sge: 1,
            max_inline: 56,
            ..RC
        }; // 72 + 56 = 128 bytes
        let (m, sq) = sq_ring(slots, c, 0);
        assert_eq!(m.len(), 192 + slots as usize * 128);
        let mut k = Kernel::consumer_of(&m);
        let max = vec![0xeeu8; 56];
        for i in 0..slots as u64 * 3 {
            let s = spec(i, IBV_WR_SEND).inline(&[&max]);
            assert_eq!(post(&sq, &SendList::new(&[s])), (0, None, 1));
            assert_eq!(k.pop_send().unwrap().inline, max);
        }
    }
}

#[test]
fn wqe_header_layout_is_the_abi() {
    // The kernel reads the header at offset 0 and the SGEs right after it.
    assert_eq!(core::mem::size_of::<SendWqe>(), 72);
    let (m, sq) = sq_ring(1, RC, 0);
    let mut s = spec(0x0102_0304_0506_0708, IBV_WR_SEND);
    s.sges = vec![SgeSpec::plain(0xaabb, 0x10, 0x20)];
    assert_eq!(post(&sq, &SendList::new(&[s])), (0, None, 1));
    // SAFETY: slot 0 of the live ring; the WQE was published.
    let raw = unsafe { core::slice::from_raw_parts(m.base().add(192), 72 + 16) };
    assert_eq!(&raw[0..8], &0x0102_0304_0506_0708u64.to_ne_bytes());
    assert_eq!(&raw[8..12], &IBV_WR_SEND.to_ne_bytes());
    assert_eq!(&raw[20..24], &1u32.to_ne_bytes()); // num_sge
    assert_eq!(&raw[72..80], &0xaabbu64.to_ne_bytes());
    assert_eq!(&raw[80..84], &0x10u32.to_ne_bytes());
    assert_eq!(&raw[84..88], &0x20u32.to_ne_bytes());
    let _ = IBV_SEND_INLINE;
}

#[test]
fn invalidation_and_atomic_write_wqes() {
    // LOCAL_INV: the key in imm_data, no body (its SGE list is not used); SEND_WITH_INV: the
    // key in imm_data and the data as for a SEND.
    let (m, sq) = sq_ring(4, RC, 0);
    let mut inv = spec(1, IBV_WR_LOCAL_INV);
    inv.imm = 0x1234_5601;
    let mut sinv = spec(2, IBV_WR_SEND_WITH_INV);
    sinv.imm = 0x1234_5602;
    // ATOMIC WRITE: the 8 inline bytes go to `swap`, no body, INLINE cleared; max_inline
    // does not bound them.
    let mut aw = spec(3, IBV_WR_ATOMIC_WRITE);
    aw.flags |= IBV_SEND_INLINE;
    aw.sges = vec![SgeSpec::bytes(&[1, 2, 3]), SgeSpec::bytes(&[4, 5, 6, 7, 8])];
    aw.remote_addr = 0x9008;
    let l = SendList::new(&[inv.clone(), sinv.clone(), aw.clone()]);
    assert_eq!(post(&sq, &l), (0, None, 1));
    let mut k = Kernel::consumer_of(&m);
    let got = k.pop_send().unwrap();
    assert_eq!(
        (got.hdr.opcode, got.hdr.imm_data),
        (IBV_WR_LOCAL_INV, 0x1234_5601)
    );
    assert!(got.sges.is_empty() && got.hdr.num_sge == 0);
    let got = k.pop_send().unwrap();
    assert_eq!(got, oracle_wqe(&sinv, IBV_QPT_RC));
    assert_eq!((got.hdr.imm_data, got.hdr.num_sge), (0x1234_5602, 1));
    let got = k.pop_send().unwrap();
    assert_eq!(got, oracle_wqe(&aw, IBV_QPT_RC));
    assert_eq!(got.hdr.swap, u64::from_ne_bytes([1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!((got.hdr.remote_addr, got.hdr.rkey), (0x9008, 0x55));
    assert_eq!(got.hdr.send_flags & IBV_SEND_INLINE, 0);
    assert!(got.sges.is_empty() && got.inline.is_empty());

    // ATOMIC WRITE refusals: not inline, not 8 bytes, unaligned.
    for (flags, data, addr) in [
        (0, &[0u8; 8][..], 0x9000u64),
        (IBV_SEND_INLINE, &[0u8; 7][..], 0x9000),
        (IBV_SEND_INLINE, &[0u8; 9][..], 0x9000),
        (IBV_SEND_INLINE, &[0u8; 8][..], 0x9004),
    ] {
        let (_m, sq) = sq_ring(4, RC, 0);
        let mut aw = spec(1, IBV_WR_ATOMIC_WRITE);
        aw.flags |= flags;
        aw.sges = vec![SgeSpec::bytes(data)];
        aw.remote_addr = addr;
        assert_eq!(
            post(&sq, &SendList::new(&[aw])),
            (libc::EINVAL, Some(0), 0),
            "{flags:#x} {} {addr:#x}",
            data.len()
        );
    }
    // FLUSH: wr.atomic's address, rkey and length (compare_add), the FETH in imm_data.
    let (m, sq) = sq_ring(4, RC, 0);
    let mut fl = spec(1, IBV_WR_FLUSH);
    fl.sges = vec![];
    fl.imm = 0x12;
    fl.compare_add = 4096;
    assert_eq!(post(&sq, &SendList::new(&[fl.clone()])), (0, None, 1));
    let got = Kernel::consumer_of(&m).pop_send().unwrap();
    assert_eq!(got, oracle_wqe(&fl, IBV_QPT_RC));
    assert_eq!(
        (
            got.hdr.remote_addr,
            got.hdr.rkey,
            got.hdr.compare_add,
            got.hdr.imm_data
        ),
        (0x8000, 0x55, 4096, 0x12)
    );
    for (imm, len, sges) in [
        (0x0, 8u64, 0usize),
        (0x4, 8, 0),
        (0x21, 8, 0),
        (0x1, 1 << 32, 0),
        (0x1, 8, 1),
    ] {
        let (_m, sq) = sq_ring(4, RC, 0);
        let mut fl = spec(1, IBV_WR_FLUSH);
        fl.sges.truncate(sges);
        fl.imm = imm;
        fl.compare_add = len;
        assert_eq!(
            post(&sq, &SendList::new(&[fl])),
            (libc::EINVAL, Some(0), 0),
            "{imm:#x} {len} {sges}"
        );
    }
    // Not on UC.
    let (_m, sq) = sq_ring(4, caps(IBV_QPT_UC), 0);
    let l = SendList::for_qp(IBV_QPT_UC, &[spec(1, IBV_WR_SEND_WITH_INV)]);
    assert_eq!(post(&sq, &l), (libc::EINVAL, Some(0), 0));
}

#[test]
fn bind_mw_encoding() {
    // The fields as `rrxe_uapi::wr_opcode::BIND_MW` documents them: the window's rkey in
    // imm_data, the new rkey, the range, the MR's lkey in remote_qkey, the rights in swap, no
    // body; `post_send` marks it a bind WR (type 2), `post_bind_verb` the Bind MW verb's.
    let (m, sq) = sq_ring(4, RC, 0);
    let mut mw = crate::abi::ibv_mw {
        rkey: 0x0000_4207,
        ..Default::default()
    };
    let mut mr = crate::abi::ibv_mr {
        lkey: 0x0000_5133,
        ..Default::default()
    };
    let mut sp = spec(9, IBV_WR_BIND_MW);
    sp.flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    let l = SendList::new(&[sp.clone(), sp]);
    for i in 0..2 {
        // SAFETY: elements of the list; `mw` and `mr` outlive the posts.
        unsafe {
            let b = &mut (*l.ptr(i)).__bindgen_anon_2.bind_mw;
            b.mw = &mut mw;
            b.rkey = 0x0000_4208;
            b.bind_info.mr = &mut mr;
            b.bind_info.addr = 0x7000_1000;
            b.bind_info.length = 0x2000;
            b.bind_info.mw_access_flags = 0x2 | 0x20;
        }
    }
    let mut h = Hooks::default();
    // SAFETY: a valid list of one WR (the first), its window and MR live.
    unsafe { (*l.ptr(0)).next = ptr::null_mut() };
    assert_eq!(post(&sq, &l), (0, None, 1));
    // SAFETY: as above, the second WR alone.
    assert_eq!(unsafe { sq.post_bind_verb(l.ptr(1), &mut h) }, 0);
    let mut k = Kernel::consumer_of(&m);
    for verb in [0, rrxe_uapi::bind_flags::VERB] {
        let got = k.pop_send().unwrap();
        let want = SendWqe {
            wr_id: 9,
            opcode: rrxe_uapi::wr_opcode::BIND_MW,
            send_flags: IBV_SEND_SIGNALED,
            imm_data: 0x4207,
            remote_addr: 0x7000_1000,
            rkey: 0x4208,
            compare_add: 0x2000,
            remote_qkey: 0x5133,
            swap: 0x22,
            remote_qpn: verb,
            ..SendWqe::default()
        };
        assert_eq!(got.hdr, want);
        assert!(got.sges.is_empty() && got.inline.is_empty());
    }
    // No window, or a range without an MR: EINVAL.
    // SAFETY: element 0, alone.
    unsafe { (*l.ptr(0)).__bindgen_anon_2.bind_mw.mw = ptr::null_mut() };
    assert_eq!(post(&sq, &l), (libc::EINVAL, Some(0), 0));
    // SAFETY: as above.
    unsafe {
        let b = &mut (*l.ptr(0)).__bindgen_anon_2.bind_mw;
        b.mw = &mut mw;
        b.bind_info.mr = ptr::null_mut();
    }
    assert_eq!(post(&sq, &l), (libc::EINVAL, Some(0), 0));
    // A type-1 unbind (length 0) needs no MR.
    // SAFETY: as above.
    unsafe { (*l.ptr(0)).__bindgen_anon_2.bind_mw.bind_info.length = 0 };
    assert_eq!(post(&sq, &l), (0, None, 1));
    assert_eq!(k.pop_send().unwrap().hdr.remote_qkey, 0);
}
