//! Deterministic tests of the receive ring.

use core::ptr;
use core::sync::atomic::Ordering;

use rrxe_uapi::{RecvWqe, Sge};

use super::harness::*;
use crate::abi::ibv_recv_wr;

#[test]
fn recv_wqes_reach_the_kernel_in_order() {
    let (m, rq) = rq_ring(4, 3, u32::MAX - 2);
    let mut k = Kernel::consumer_of(&m);
    let specs: Vec<_> = (0..4).map(|i| RecvSpec::new(i, i as usize % 4)).collect();
    assert_eq!(post_recv(&rq, &RecvList::new(&specs)), (0, None));
    for s in &specs {
        let got = k.pop_recv().unwrap();
        assert_eq!(
            got.hdr,
            RecvWqe {
                wr_id: s.wr_id,
                num_sge: s.sges.len() as u32,
                reserved: 0
            }
        );
        let want: Vec<Sge> = s
            .sges
            .iter()
            .map(|&(addr, length, lkey)| Sge { addr, length, lkey })
            .collect();
        assert_eq!(got.sges, want);
    }
    assert!(k.pop_recv().is_none());
    assert_eq!(
        k.producer().load(Ordering::SeqCst),
        1,
        "published across the wrap"
    );
}

#[test]
fn recv_validation_and_full() {
    let (m, rq) = rq_ring(2, 2, 0);
    let mut k = Kernel::consumer_of(&m);
    let mut too_many = RecvSpec::new(9, 3);
    assert_eq!(
        post_recv(
            &rq,
            &RecvList::new(&[RecvSpec::new(0, 1), too_many.clone()])
        ),
        (libc::EINVAL, Some(1))
    );
    too_many.sges.truncate(2);
    too_many.num_sge = Some(-1);
    assert_eq!(
        post_recv(&rq, &RecvList::new(&[too_many.clone()])),
        (libc::EINVAL, Some(0))
    );
    too_many.num_sge = None;
    too_many.null_sg_list = true;
    assert_eq!(
        post_recv(&rq, &RecvList::new(&[too_many])),
        (libc::EINVAL, Some(0))
    );
    let l = RecvList::new(&[
        RecvSpec::new(1, 2),
        RecvSpec::new(2, 0),
        RecvSpec::new(3, 0),
    ]);
    assert_eq!(post_recv(&rq, &l), (libc::ENOMEM, Some(1)));
    assert_eq!(k.pop_recv().unwrap().hdr.wr_id, 0);
    assert_eq!(
        post_recv(&rq, &RecvList::new(&[RecvSpec::new(2, 0)])),
        (0, None)
    );
    let ids: Vec<u64> = core::iter::from_fn(|| k.pop_recv())
        .map(|w| w.hdr.wr_id)
        .collect();
    assert_eq!(ids, [1, 2]);
}

#[test]
fn recv_null_bad_wr_null_list_and_corrupt_consumer() {
    let (m, rq) = rq_ring(2, 1, 5);
    let k = Kernel::consumer_of(&m);
    // SAFETY: NULL list, NULL bad_wr.
    assert_eq!(unsafe { rq.post_recv(ptr::null_mut(), ptr::null_mut()) }, 0);
    let l = RecvList::new(&[
        RecvSpec::new(1, 1),
        RecvSpec::new(2, 1),
        RecvSpec::new(3, 1),
    ]);
    // SAFETY: a valid list, NULL bad_wr.
    let rc = unsafe { rq.post_recv(l.head(), ptr::null_mut()) };
    assert_eq!(rc, libc::ENOMEM);
    k.consumer().store(100, Ordering::SeqCst);
    let mut bad: *mut ibv_recv_wr = ptr::null_mut();
    // SAFETY: a valid list; `bad` writable.
    assert_eq!(unsafe { rq.post_recv(l.head(), &mut bad) }, libc::EIO);
    assert_eq!(l.index_of(bad), Some(0));
    assert_eq!(k.producer().load(Ordering::SeqCst), 7);
}
