//! Deterministic tests of the completion ring.

use core::mem::{offset_of, MaybeUninit};
use core::ptr;
use core::sync::atomic::Ordering;

use rrxe_uapi::{Cqe, RingHeader};

use super::harness::*;
use crate::abi::{
    ibv_wc, IBV_WC_BIND_MW, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_GRH, IBV_WC_IP_CSUM_OK,
    IBV_WC_LOCAL_INV, IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM,
    IBV_WC_SEND, IBV_WC_TM_ERR, IBV_WC_TSO, IBV_WC_WITH_IMM, IBV_WC_WITH_INV,
};
use crate::ring::{cqe_to_wc, RingError};

const OPCODES: [u32; 10] = [
    IBV_WC_SEND,
    IBV_WC_RDMA_WRITE,
    IBV_WC_RDMA_READ,
    IBV_WC_COMP_SWAP,
    IBV_WC_FETCH_ADD,
    IBV_WC_BIND_MW,
    IBV_WC_LOCAL_INV,
    IBV_WC_TSO,
    IBV_WC_RECV,
    IBV_WC_RECV_RDMA_WITH_IMM,
];

const FLAGS: [u32; 6] = [
    0,
    IBV_WC_GRH,
    IBV_WC_WITH_IMM,
    IBV_WC_IP_CSUM_OK,
    IBV_WC_WITH_INV,
    IBV_WC_GRH | IBV_WC_WITH_IMM,
];

#[test]
fn every_status_opcode_and_flag_is_translated() {
    let (m, cq) = cq_ring(8, 0);
    let mut k = Kernel::producer_of(&m);
    let mut n = 0u64;
    for status in 0..=IBV_WC_TM_ERR + 1 {
        for &opcode in &OPCODES {
            for &flags in &FLAGS {
                let c = Cqe {
                    wr_id: n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    status,
                    opcode,
                    vendor_err: status * 3,
                    byte_len: 0x1000 + n as u32,
                    imm_data: 0x1234_5678u32.to_be(),
                    qp_num: 0x00ab_cdef,
                    src_qp: 0x0012_3456,
                    wc_flags: flags,
                    pkey_index: 0xfffe,
                    slid: 0xbeef,
                    sl: 15,
                    dlid_path_bits: 0x7f,
                    reserved: [0xff; 18],
                };
                assert!(k.push_cqe(&c));
                let w = poll(&cq, 4).unwrap();
                assert_eq!(w.len(), 1);
                let w = &w[0];
                assert_eq!(
                    (w.wr_id, w.status, w.opcode, w.wc_flags),
                    (c.wr_id, status, opcode, flags)
                );
                assert_eq!(
                    (w.vendor_err, w.byte_len, w.qp_num, w.src_qp),
                    (status * 3, c.byte_len, 0x00ab_cdef, 0x0012_3456)
                );
                // SAFETY: both union members are u32.
                let (imm, inv) = unsafe {
                    (
                        w.__bindgen_anon_1.imm_data,
                        w.__bindgen_anon_1.invalidated_rkey,
                    )
                };
                assert_eq!((imm, inv), (0x1234_5678u32.to_be(), 0x1234_5678u32.to_be()));
                assert_eq!(
                    (w.pkey_index, w.slid, w.sl, w.dlid_path_bits),
                    (0xfffe, 0xbeef, 15, 0x7f)
                );
                n += 1;
            }
        }
    }
}

#[test]
fn cqe_and_wc_share_their_first_46_bytes() {
    // The two layouts coincide up to dlid_path_bits (offsets pinned in uapi and in the v44 fact
    // sheet), so the translation is a byte copy of them.
    let c = test_cqe(0x0102_0304_0506_0708);
    let w = cqe_to_wc(&c);
    // SAFETY: both are padding-free up to byte 46 and live for the reads.
    let (cb, wb) = unsafe {
        (
            core::slice::from_raw_parts(ptr::from_ref(&c).cast::<u8>(), 46),
            core::slice::from_raw_parts(ptr::from_ref(&w).cast::<u8>(), 46),
        )
    };
    assert_eq!(cb, wb);
}

#[test]
fn poll_returns_min_of_room_and_available() {
    let (m, cq) = cq_ring(8, u32::MAX - 3);
    let mut k = Kernel::producer_of(&m);
    assert!(poll(&cq, 4).unwrap().is_empty());
    for i in 0..5 {
        assert!(k.push_cqe(&test_cqe(i)));
    }
    assert!(poll(&cq, 0).unwrap().is_empty());
    let a = poll(&cq, 2).unwrap();
    let b = poll(&cq, 16).unwrap();
    let c = poll(&cq, 16).unwrap();
    assert_eq!((a.len(), b.len(), c.len()), (2, 3, 0));
    let ids: Vec<u64> = a.iter().chain(&b).map(|w| w.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    for w in a.iter().chain(&b) {
        assert_eq!(wc_fields(w), cqe_fields(&test_cqe(w.wr_id)));
    }
    // The consumer index went across the wrap and is published.
    assert_eq!(k.consumer().load(Ordering::SeqCst), 1);
}

#[test]
fn full_cq_is_drained_across_the_wrap() {
    let (m, cq) = cq_ring(4, u32::MAX - 1);
    let mut k = Kernel::producer_of(&m);
    let mut next = 0;
    let mut want = 0;
    for _ in 0..10 {
        while k.push_cqe(&test_cqe(next)) {
            next += 1;
        }
        assert_eq!(next - want, 4, "the kernel filled all 4 slots");
        for w in poll(&cq, 3).unwrap() {
            assert_eq!(w.wr_id, want);
            want += 1;
        }
    }
}

#[test]
fn poll_raw_follows_the_ibv_poll_cq_contract() {
    let (m, cq) = cq_ring(4, 0);
    let mut k = Kernel::producer_of(&m);
    for i in 0..3 {
        assert!(k.push_cqe(&test_cqe(i)));
    }
    let mut wc = [MaybeUninit::<ibv_wc>::uninit(); 2];
    // SAFETY: NULL, or room for `ne` entries.
    unsafe {
        assert_eq!(cq.poll_raw(0, ptr::null_mut()), 0);
        assert_eq!(cq.poll_raw(-5, ptr::null_mut()), 0);
        assert_eq!(cq.poll_raw(1, ptr::null_mut()), -libc::EINVAL);
        assert_eq!(cq.poll_raw(2, wc.as_mut_ptr().cast()), 2);
        assert_eq!(wc[1].assume_init().wr_id, 1);
        assert_eq!(cq.poll_raw(2, wc.as_mut_ptr().cast()), 1);
        assert_eq!(wc[0].assume_init().wr_id, 2);
        assert_eq!(cq.poll_raw(2, wc.as_mut_ptr().cast()), 0);
    }
    // Corrupt: negative errno.
    k.producer().store(100, Ordering::SeqCst);
    // SAFETY: as above.
    let rc = unsafe { cq.poll_raw(2, wc.as_mut_ptr().cast()) };
    assert_eq!(rc, -libc::EIO);
}

#[test]
fn corrupt_producer_index_reads_nothing() {
    let (m, cq) = cq_ring(4, 7);
    let mut k = Kernel::producer_of(&m);
    assert!(k.push_cqe(&test_cqe(1)));
    for scribble in [7 + 5, 7 + 1000, 6, 0, u32::MAX] {
        k.producer().store(scribble, Ordering::SeqCst);
        assert_eq!(
            poll(&cq, 8).err(),
            Some(RingError::Corrupt),
            "producer {scribble}"
        );
        assert_eq!(k.consumer().load(Ordering::SeqCst), 7, "nothing consumed");
    }
    // Exactly `slots` ahead is a full ring, not corruption (the other 3 slots hold zeros).
    k.producer().store(7 + 4, Ordering::SeqCst);
    let w = poll(&cq, 8).unwrap();
    assert_eq!(w.len(), 4);
    assert_eq!(w[0].wr_id, 1);
    assert_eq!(k.consumer().load(Ordering::SeqCst), 11);
}

#[test]
fn scribbled_geometry_and_consumer_do_not_matter() {
    let (m, cq) = cq_ring(2, 0);
    let mut k = Kernel::producer_of(&m);
    m.set_u32(offset_of!(RingHeader, log2_slots), 30);
    m.set_u32(offset_of!(RingHeader, slot_size), 1 << 30);
    // Our consumer index is private: a scribble is overwritten by the next poll.
    assert!(k.push_cqe(&test_cqe(5)));
    m.set_u32(offset_of!(RingHeader, consumer), 12345);
    assert_eq!(poll(&cq, 4).unwrap()[0].wr_id, 5);
    assert_eq!(k.consumer().load(Ordering::SeqCst), 1);
    // A slots=2 ring ends at the guard page: polling its last slot repeatedly is in bounds.
    for i in 0..6 {
        assert!(k.push_cqe(&test_cqe(i)));
        assert_eq!(poll(&cq, 1).unwrap()[0].wr_id, i);
    }
}
