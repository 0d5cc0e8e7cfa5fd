//! Construction checks, and real shared mappings (a memfd mapped twice).

use core::mem::offset_of;
use core::ptr;
use core::sync::atomic::Ordering;

use rrxe_uapi::{recv_slot_size, send_slot_size, RingHeader, RingInfo, CQE_SIZE, RING_HEADER_SIZE};

use super::harness::*;
use crate::abi::{IBV_QPT_RAW_PACKET, IBV_QPT_RC, IBV_QPT_UD, IBV_QPT_XRC_SEND, IBV_WR_SEND};
use crate::ring::{CqRing, Mapping, RingError, RqRing, SqCaps, SqRing};

const RC: SqCaps = SqCaps {
    qp_type: IBV_QPT_RC,
    max_sge: 2,
    max_inline: 32,
};

fn cq(m: &TestMem, len: usize, i: &RingInfo) -> Result<CqRing, RingError> {
    // SAFETY: `m` outlives the result within each check.
    unsafe { CqRing::from_raw(m.base(), len, i) }
}

#[test]
fn cq_geometry_checks() {
    let m = TestMem::ring(8, 64, 0);
    let full = m.len();
    assert!(cq(&m, full, &info(8, 64)).is_ok());
    // Mapping too short by one byte.
    assert!(matches!(
        cq(&m, full - 1, &info(8, 64)),
        Err(RingError::Invalid(_))
    ));
    // Geometry that differs from the header, or is not a power of two, or zero.
    for (slots, ss) in [(4, 64), (16, 64), (8, 128), (0, 64), (6, 64), (8, 0)] {
        assert!(
            matches!(cq(&m, full, &info(slots, ss)), Err(RingError::Invalid(_))),
            "{slots}x{ss}"
        );
    }
    // CQ slots must be exactly CQE_SIZE, even when the header agrees.
    let m2 = TestMem::ring(4, 128, 0);
    assert!(matches!(
        cq(&m2, m2.len(), &info(4, 128)),
        Err(RingError::Invalid(_))
    ));
    // Header log2 mismatch.
    m.set_u32(offset_of!(RingHeader, log2_slots), 2);
    assert!(matches!(
        cq(&m, full, &info(8, 64)),
        Err(RingError::Invalid(_))
    ));
    m.set_u32(offset_of!(RingHeader, log2_slots), 3);
    // Indices more than `slots` apart.
    m.set_u32(offset_of!(RingHeader, producer), 9);
    assert_eq!(cq(&m, full, &info(8, 64)).unwrap_err(), RingError::Corrupt);
    m.set_u32(offset_of!(RingHeader, producer), 8);
    assert!(cq(&m, full, &info(8, 64)).is_ok(), "a full ring is fine");
    // NULL and misaligned bases.
    // SAFETY: these fail before touching memory.
    unsafe {
        assert!(matches!(
            CqRing::from_raw(ptr::null_mut(), full, &info(8, 64)),
            Err(RingError::Invalid(_))
        ));
        let r = CqRing::from_raw(m.base().add(8), full - 8, &info(8, 64));
        assert!(matches!(r, Err(RingError::Invalid(_))));
    }
    // Huge slot counts do not overflow the size computation.
    // SAFETY: fails on the size check before touching memory past the header.
    let r = unsafe { CqRing::from_raw(m.base(), full, &info(1 << 31, 64)) };
    assert!(matches!(r, Err(RingError::Invalid(_))));
    // SAFETY: as above.
    let r = unsafe { CqRing::from_raw(m.base(), full, &info(1 << 31, u32::MAX - 7)) };
    assert!(matches!(r, Err(RingError::Invalid(_))));
    assert_eq!(CQE_SIZE, 64);
}

#[test]
fn send_and_recv_slots_must_hold_the_caps() {
    let ss = send_slot_size(RC.max_sge, RC.max_inline) as u32; // 72 + 32 -> 128
    assert_eq!(ss, 128);
    let m = TestMem::ring(4, ss, 0);
    // SAFETY: `m` outlives the results.
    unsafe {
        assert!(SqRing::from_raw(m.base(), m.len(), &info(4, ss), RC).is_ok());
        // 72 + 4 * 16 = 136 > 128.
        let c = SqCaps { max_sge: 4, ..RC };
        assert!(matches!(
            SqRing::from_raw(m.base(), m.len(), &info(4, ss), c),
            Err(RingError::Invalid(_))
        ));
        let c = SqCaps {
            max_inline: 57,
            ..RC
        };
        assert!(matches!(
            SqRing::from_raw(m.base(), m.len(), &info(4, ss), c),
            Err(RingError::Invalid(_))
        ));
        // Caps exactly filling the slot are fine.
        let c = SqCaps {
            max_inline: 56,
            max_sge: 3,
            ..RC
        };
        assert!(SqRing::from_raw(m.base(), m.len(), &info(4, ss), c).is_ok());
        for qpt in [IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, 0, 99] {
            let c = SqCaps { qp_type: qpt, ..RC };
            assert!(matches!(
                SqRing::from_raw(m.base(), m.len(), &info(4, ss), c),
                Err(RingError::Invalid(_))
            ));
        }
        let c = SqCaps {
            qp_type: IBV_QPT_UD,
            ..RC
        };
        assert!(SqRing::from_raw(m.base(), m.len(), &info(4, ss), c).is_ok());
        // Huge caps do not overflow.
        let c = SqCaps {
            max_sge: u32::MAX,
            max_inline: u32::MAX,
            ..RC
        };
        assert!(SqRing::from_raw(m.base(), m.len(), &info(4, ss), c).is_err());
    }
    let rs = recv_slot_size(3) as u32; // 16 + 48 -> 64
    let m = TestMem::ring(2, rs, 0);
    // SAFETY: as above.
    unsafe {
        assert!(RqRing::from_raw(m.base(), m.len(), &info(2, rs), 3).is_ok());
        assert!(RqRing::from_raw(m.base(), m.len(), &info(2, rs), 4).is_err());
        assert!(RqRing::from_raw(m.base(), m.len(), &info(2, rs), u32::MAX).is_err());
    }
    assert_eq!(SqRing::expected_slot_size(&RC), 128);
    assert_eq!(RqRing::expected_slot_size(3), 64);
}

#[test]
fn errno_mapping() {
    assert_eq!(RingError::Full.errno(), libc::ENOMEM);
    assert_eq!(RingError::Invalid("x").errno(), libc::EINVAL);
    assert_eq!(RingError::Corrupt.errno(), libc::EIO);
    assert_eq!(RingError::Invalid("why").to_string(), "invalid: why");
}

/// A memfd of `len` bytes.
fn memfd(len: usize) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscalls; the fd is owned by the returned object.
    unsafe {
        let fd = libc::memfd_create(c"rrxe-ring-test".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
        std::os::fd::OwnedFd::from_raw_fd(fd)
    }
}

#[test]
fn mapping_errors() {
    use std::os::fd::AsRawFd;
    let fd = memfd(4096);
    assert_eq!(
        Mapping::map_shared(fd.as_raw_fd(), 0, 0).unwrap_err(),
        libc::EINVAL
    );
    assert_eq!(
        Mapping::map_shared(fd.as_raw_fd(), u64::MAX, 4096).unwrap_err(),
        libc::EINVAL
    );
    assert_eq!(Mapping::map_shared(-1, 0, 4096).unwrap_err(), libc::EBADF);
    let m = Mapping::map_shared(fd.as_raw_fd(), 0, 4096).unwrap();
    assert_eq!((m.len(), m.is_empty()), (4096, false));
}

#[test]
fn two_views_of_one_memfd() {
    use std::os::fd::AsRawFd;
    // The "kernel" and the provider see the same pages at different addresses, as with the
    // real mmap of the uverbs fd.
    let caps = SqCaps {
        qp_type: IBV_QPT_RC,
        max_sge: 1,
        max_inline: 0,
    };
    let ss = send_slot_size(1, 0) as u32;
    let len = rrxe_uapi::ring_bytes(4, ss as usize, 4096);
    let fd = memfd(len);
    let kview = Mapping::map_shared(fd.as_raw_fd(), 0, len).unwrap();
    // The kernel fills the header before handing the ring out.
    // SAFETY: the header of the kernel's view, not yet shared with any ring object.
    unsafe {
        let h = kview.as_ptr();
        ptr::write(h.add(offset_of!(RingHeader, log2_slots)).cast::<u32>(), 2);
        ptr::write(h.add(offset_of!(RingHeader, slot_size)).cast::<u32>(), ss);
        ptr::write(
            h.add(offset_of!(RingHeader, producer)).cast::<u32>(),
            u32::MAX,
        );
        ptr::write(
            h.add(offset_of!(RingHeader, consumer)).cast::<u32>(),
            u32::MAX,
        );
    }
    let pview = Mapping::map_shared(fd.as_raw_fd(), 0, len).unwrap();
    assert_ne!(pview.as_ptr(), kview.as_ptr());
    let rinfo = RingInfo {
        mmap_key: 0,
        bytes: len as u64,
        slots: 4,
        slot_size: ss,
    };
    let sq = SqRing::from_mapping(pview, &rinfo, caps).unwrap();
    let mut k = Kernel::attach(kview.as_ptr());
    k.idx = k.consumer().load(Ordering::SeqCst);
    let specs: Vec<_> = (0..5).map(|i| SendSpec::new(i, IBV_WR_SEND)).collect();
    assert_eq!(
        post(&sq, &SendList::new(&specs)),
        (libc::ENOMEM, Some(4), 1)
    );
    for s in &specs[..4] {
        assert_eq!(k.pop_send().unwrap(), oracle_wqe(s, IBV_QPT_RC));
    }
    drop(sq); // unmaps the provider's view
    assert_eq!(k.producer().load(Ordering::SeqCst), 3);
    assert!(RING_HEADER_SIZE + 4 * ss as usize <= len);

    // A CQ and an RQ from mappings too.
    let fd = memfd(4096);
    let kview = Mapping::map_shared(fd.as_raw_fd(), 0, 4096).unwrap();
    // SAFETY: as above.
    unsafe {
        let h = kview.as_ptr();
        ptr::write(h.add(offset_of!(RingHeader, log2_slots)).cast::<u32>(), 1);
        ptr::write(h.add(offset_of!(RingHeader, slot_size)).cast::<u32>(), 64);
    }
    let m = || Mapping::map_shared(fd.as_raw_fd(), 0, 4096).unwrap();
    let cq = CqRing::from_mapping(m(), &info(2, 64)).unwrap();
    assert_eq!(cq.slots(), 2);
    let mut k = Kernel::attach(kview.as_ptr());
    assert!(k.push_cqe(&test_cqe(3)));
    assert_eq!(poll(&cq, 2).unwrap()[0].wr_id, 3);
    drop(cq);
    let rq = RqRing::from_mapping(m(), &info(2, 64), 3).unwrap();
    assert_eq!(rq.max_sge(), 3);
    let mut k = Kernel::attach(kview.as_ptr());
    k.idx = k.consumer().load(Ordering::SeqCst);
    assert_eq!(
        post_recv(&rq, &RecvList::new(&[RecvSpec::new(8, 3)])),
        (0, None)
    );
    assert_eq!(k.pop_recv().unwrap().sges.len(), 3);
    assert!(matches!(
        CqRing::from_mapping(m(), &info(4, 64)),
        Err(RingError::Invalid(_))
    ));
}
