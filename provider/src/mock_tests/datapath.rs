//! The data path through the trampolines: rings are test memory attached to mock objects
//! (`/dev/null` answers every create with an all-zero driver response, i.e. no rings), the
//! doorbell goes to a pipe standing in for the uverbs file.

use super::*;
use crate::ring::tests::harness::{info, Kernel, RecvList, RecvSpec, SendList, SendSpec, TestMem};
use crate::ring::{RqRing, SqCaps, SqRing};
use crate::srq;
use rrxe_uapi::{CreateQpResp, RingHeader, RingInfo, SQ_FLAG_KERNEL_BUSY};

/// A pipe whose write end replaces the context's command fd: every `write()` libibverbs
/// issues lands in it; `ioctl()` on a pipe fails with `ENOTTY`, so write() is what it uses.
struct CmdPipe {
    rd: c_int,
}

impl CmdPipe {
    fn install(m: &Mock) -> CmdPipe {
        let mut fds = [0 as c_int; 2];
        // SAFETY: plain syscalls on fds we own.
        unsafe {
            assert_eq!(
                libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC),
                0
            );
            assert_eq!(libc::dup2(fds[1], (*m.ctx).cmd_fd), (*m.ctx).cmd_fd);
            libc::close(fds[1]);
        }
        CmdPipe { rd: fds[0] }
    }

    /// Everything written so far.
    fn take(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::read(self.rd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
    }
}

impl Drop for CmdPipe {
    fn drop(&mut self) {
        // SAFETY: our fd.
        unsafe { libc::close(self.rd) };
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap())
}

/// Checks that `bytes` is exactly one send doorbell for the QP handle `handle`: the legacy
/// header (`POST_SEND`, 8 in-words, 1 out-word) and `ib_uverbs_post_send` with a response
/// pointer, `wr_count == sge_count == 0` and `wqe_size == sizeof(struct ib_uverbs_send_wr)`.
fn assert_one_doorbell(bytes: &[u8], handle: u32) {
    assert_eq!(bytes.len(), 32, "one 32-byte POST_SEND write: {bytes:?}");
    assert_eq!(u32_at(bytes, 0), IB_USER_VERBS_CMD_POST_SEND);
    assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), 8, "in_words");
    assert_eq!(u16::from_ne_bytes([bytes[6], bytes[7]]), 1, "out_words");
    let response = u64::from_ne_bytes(bytes[8..16].try_into().unwrap());
    assert_ne!(response, 0, "response pointer");
    assert_eq!(u32_at(bytes, 16), handle, "qp_handle");
    assert_eq!(u32_at(bytes, 20), 0, "wr_count");
    assert_eq!(u32_at(bytes, 24), 0, "sge_count");
    assert_eq!(
        u32_at(bytes, 28) as usize,
        size_of::<ib_uverbs_send_wr>(),
        "wqe_size"
    );
}

/// Attaches a send ring of `slots` slots (test memory) to a mock QP, with the caps the QP
/// was created with.
///
/// # Safety
/// `qp` is a live QP of ours without a send ring; the returned memory must outlive it.
unsafe fn attach_sq(qp: *mut ibv_qp, caps: SqCaps, slots: u32) -> TestMem {
    let ss = SqRing::expected_slot_size(&caps) as u32;
    let m = TestMem::ring(slots, ss, 0);
    // SAFETY: `m` outlives the ring (contract), which is its only user in this process.
    let r = unsafe { SqRing::from_raw(m.base(), m.len(), &info(slots, ss), caps) }.unwrap();
    // SAFETY: `qp` is a live `RrxeQp` (contract).
    unsafe { (*qp.cast::<qp::RrxeQp>()).sq = Box::into_raw(Box::new(r)) };
    m
}

/// A receive ring of `slots` slots for `max_sge` entries, over test memory.
fn test_rq(slots: u32, max_sge: u32) -> (TestMem, Box<RqRing>) {
    let ss = RqRing::expected_slot_size(max_sge) as u32;
    let m = TestMem::ring(slots, ss, 0);
    // SAFETY: the caller keeps `m` alive for as long as the ring exists.
    let r = unsafe { RqRing::from_raw(m.base(), m.len(), &info(slots, ss), max_sge) }.unwrap();
    (m, Box::new(r))
}

/// Frees a mock QP and its rings (the kernel-side destroy is not run; see above).
///
/// # Safety
/// `qp` is a QP of ours that nothing uses any more.
unsafe fn reclaim_qp(qp: *mut ibv_qp) {
    // SAFETY: contract.
    unsafe {
        qp::RrxeQp::drop_rings(qp.cast());
        drop(CBox::from_raw(qp.cast::<qp::RrxeQp>()));
    }
}

fn send_wr_list(n: u64) -> SendList {
    let specs: Vec<SendSpec> = (0..n)
        .map(|i| SendSpec::new(100 + i, IBV_WR_SEND))
        .collect();
    SendList::new(&specs)
}

#[test]
fn qp_state_rules() {
    for s in [IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, 7, 1000] {
        assert!(!qp::send_state_ok(s), "send in {s}");
    }
    for s in [IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_SQE, IBV_QPS_ERR] {
        assert!(qp::send_state_ok(s), "send in {s}");
    }
    for s in [IBV_QPS_RESET, 7, 1000] {
        assert!(!qp::recv_state_ok(s), "recv in {s}");
    }
    for s in [
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QPS_SQD,
        IBV_QPS_SQE,
        IBV_QPS_ERR,
    ] {
        assert!(qp::recv_state_ok(s), "recv in {s}");
    }
}

#[test]
fn rc_post_send_and_recv_through_the_trampolines() {
    let m = Mock::open(c"/dev/null");
    let ctx = m.ctx;
    // SAFETY: objects created on this context as libibverbs would; the rings' test memory
    // outlives the QP (reclaimed at the end); WR lists are live locals.
    unsafe {
        let pd = pd::alloc_pd(ctx);
        let cq = cq::create_cq(ctx, 16, ptr::null_mut(), 0);
        let mut attr = rc_attr(cq);
        let qp = qp::create_qp(pd, &mut attr);
        assert!(!qp.is_null());
        (*qp).handle = 0x1234;
        let rqp = qp.cast::<qp::RrxeQp>();
        // The kernel announced no rings: the verbs stay unsupported (and never crash).
        assert!((*rqp).sq.is_null() && (*rqp).rq.is_null());
        let sends = send_wr_list(3);
        let recvs = RecvList::new(&[RecvSpec::new(7, 1), RecvSpec::new(8, 1)]);
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        let mut rbad: *mut ibv_recv_wr = ptr::null_mut();
        (*qp).state = IBV_QPS_RTS;
        assert_eq!(qp::post_send(qp, sends.head(), &mut bad), libc::EOPNOTSUPP);
        assert_eq!(bad, sends.head());
        assert_eq!(qp::post_recv(qp, recvs.head(), &mut rbad), libc::EOPNOTSUPP);
        assert_eq!(rbad, recvs.head());

        let caps = SqCaps {
            qp_type: IBV_QPT_RC,
            max_sge: attr.cap.max_send_sge,
            max_inline: attr.cap.max_inline_data,
        };
        let sq_mem = attach_sq(qp, caps, 4);
        let (rq_mem, rq) = test_rq(4, attr.cap.max_recv_sge);
        (*rqp).rq = Box::into_raw(rq);
        let mut sk = Kernel::consumer_of(&sq_mem);
        let mut rk = Kernel::consumer_of(&rq_mem);
        let pipe = CmdPipe::install(&m);

        // Before RTS nothing is sent, the first WR is reported, no doorbell.
        for st in [IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR] {
            (*qp).state = st;
            bad = ptr::null_mut();
            assert_eq!(
                qp::post_send(qp, sends.head(), &mut bad),
                libc::EINVAL,
                "state {st}"
            );
            assert_eq!(bad, sends.head());
        }
        assert_eq!(sk.pending(), 0);
        // Receives: refused in RESET only, and never a syscall.
        (*qp).state = IBV_QPS_RESET;
        rbad = ptr::null_mut();
        assert_eq!(qp::post_recv(qp, recvs.head(), &mut rbad), libc::EINVAL);
        assert_eq!(rbad, recvs.head());
        assert_eq!(rk.pending(), 0);
        (*qp).state = IBV_QPS_INIT;
        assert_eq!(qp::post_recv(qp, recvs.head(), &mut rbad), 0);
        let got: Vec<u64> = std::iter::from_fn(|| rk.pop_recv())
            .map(|w| w.hdr.wr_id)
            .collect();
        assert_eq!(got, [7, 8]);
        assert!(pipe.take().is_empty(), "post_recv made a syscall");

        // RTS: three WQEs, one doorbell carrying no WR.
        (*qp).state = IBV_QPS_RTS;
        bad = ptr::null_mut();
        assert_eq!(qp::post_send(qp, sends.head(), &mut bad), 0);
        assert!(bad.is_null());
        let got: Vec<u64> = std::iter::from_fn(|| sk.pop_send())
            .map(|w| w.hdr.wr_id)
            .collect();
        assert_eq!(got, [100, 101, 102]);
        assert_one_doorbell(&pipe.take(), 0x1234);

        // The kernel is draining: the WQEs go in, no doorbell.
        sk.flags()
            .store(SQ_FLAG_KERNEL_BUSY, core::sync::atomic::Ordering::SeqCst);
        assert_eq!(qp::post_send(qp, sends.head(), &mut bad), 0);
        assert_eq!(sk.pending(), 3);
        assert!(pipe.take().is_empty(), "doorbell while the kernel is busy");
        // Full ring: the fourth slot takes one WR, the next is reported with ENOMEM.
        sk.flags().store(0, core::sync::atomic::Ordering::SeqCst);
        assert_eq!(qp::post_send(qp, sends.head(), &mut bad), libc::ENOMEM);
        assert_eq!(bad, sends.ptr(1));
        assert_one_doorbell(&pipe.take(), 0x1234);
        while sk.pop_send().is_some() {}

        // A doorbell the kernel refuses is reported with the first WR as bad_wr (the kernel
        // was told about none of them); the WQEs stay in the ring.
        m.switch_to(c"/dev/full");
        bad = ptr::null_mut();
        assert_eq!(qp::post_send(qp, sends.head(), &mut bad), libc::ENOSPC);
        assert_eq!(bad, sends.head());
        assert_eq!(sk.pending(), 3);

        reclaim_qp(qp);
        cq::free_cq(cq.cast());
        m.switch_to(c"/dev/null");
        assert_eq!(pd::dealloc_pd(pd), 0);
        drop((sq_mem, rq_mem));
    }
}

#[test]
fn ud_post_send_names_ahs_by_their_kernel_number() {
    let m = Mock::open(c"/dev/null");
    let ctx = m.ctx;
    // SAFETY: as above. The foreign AH is a zeroed `ibv_ah` of another "context".
    unsafe {
        let pd = pd::alloc_pd(ctx);
        let cq = cq::create_cq(ctx, 16, ptr::null_mut(), 0);
        let mut attr = rc_attr(cq);
        attr.qp_type = IBV_QPT_UD;
        let qp = qp::create_qp(pd, &mut attr);
        assert!(!qp.is_null());
        let caps = SqCaps {
            qp_type: IBV_QPT_UD,
            max_sge: attr.cap.max_send_sge,
            max_inline: attr.cap.max_inline_data,
        };
        let sq_mem = attach_sq(qp, caps, 8);
        let mut sk = Kernel::consumer_of(&sq_mem);
        (*qp).state = IBV_QPS_RTS;

        let mut aha: ibv_ah_attr = zeroed();
        aha.port_num = 1;
        let ah = ah::create_ah(pd, &mut aha);
        assert!(!ah.is_null());
        // This kernel answered no AH number: the AH cannot be sent to.
        assert_eq!((*ah.cast::<ah::RrxeAh>()).ah_num, 0);
        assert_eq!(ah::ah_num_of(ah, ctx), None);
        (*ah.cast::<ah::RrxeAh>()).ah_num = 42;
        assert_eq!(ah::ah_num_of(ah, ctx), Some(42));
        // Another context's AH, and NULL, are refused.
        let mut foreign: ibv_ah = zeroed();
        foreign.context = ptr::without_provenance_mut(0x1000);
        assert_eq!(ah::ah_num_of(&mut foreign, ctx), None);
        assert_eq!(ah::ah_num_of(ptr::null_mut(), ctx), None);

        let specs: Vec<SendSpec> = (0..4)
            .map(|i| SendSpec::new(200 + i, IBV_WR_SEND))
            .collect();
        let l = SendList::new_ud(&specs);
        let ahs = [ah, ah, &raw mut foreign, ptr::null_mut()];
        for (i, a) in ahs.iter().enumerate() {
            (*l.ptr(i)).wr.ud.ah = *a;
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        assert_eq!(qp::post_send(qp, l.head(), &mut bad), libc::EINVAL);
        assert_eq!(bad, l.ptr(2), "the foreign AH's WR");
        let w: Vec<_> = std::iter::from_fn(|| sk.pop_send()).collect();
        assert_eq!(w.len(), 2);
        for (i, w) in w.iter().enumerate() {
            assert_eq!(w.hdr.wr_id, 200 + i as u64);
            assert_eq!(w.hdr.ah_num, 42);
            assert_eq!(w.hdr.remote_qpn, specs[i].remote_qpn);
            assert_eq!(w.hdr.remote_qkey, specs[i].remote_qkey);
        }
        bad = ptr::null_mut();
        assert_eq!(qp::post_send(qp, l.ptr(3), &mut bad), libc::EINVAL);
        assert_eq!(bad, l.ptr(3), "the NULL AH's WR");
        assert_eq!(sk.pending(), 0);

        assert_eq!(ah::destroy_ah(ah), 0);
        reclaim_qp(qp);
        cq::free_cq(cq.cast());
        assert_eq!(pd::dealloc_pd(pd), 0);
        drop(sq_mem);
    }
}

#[test]
fn srq_verbs_and_qps_on_an_srq() {
    let m = Mock::open(c"/dev/null");
    let ctx = m.ctx;
    // SAFETY: as above; the SRQ ring's test memory outlives the SRQ.
    unsafe {
        let pd = pd::alloc_pd(ctx);
        let cq = cq::create_cq(ctx, 16, ptr::null_mut(), 0);
        let mut sa: ibv_srq_init_attr = zeroed();
        sa.attr.max_wr = 4;
        sa.attr.max_sge = 2;
        let s = srq::create_srq(pd, &mut sa);
        assert!(!s.is_null());
        assert_eq!((*s).context, ctx);
        let rs = s.cast::<srq::RrxeSrq>();
        assert!((*rs).ring.is_null());
        let l = RecvList::new(&[
            RecvSpec::new(1, 2),
            RecvSpec::new(2, 1),
            RecvSpec::new(3, 3),
        ]);
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        assert_eq!(srq::post_srq_recv(s, l.head(), &mut bad), libc::EOPNOTSUPP);
        assert_eq!(bad, l.head());

        let (mem, ring) = test_rq(4, 2);
        (*rs).ring = Box::into_raw(ring);
        let mut k = Kernel::consumer_of(&mem);
        let pipe = CmdPipe::install(&m);
        bad = ptr::null_mut();
        // The third WR has more SGEs than the SRQ's max_sge.
        assert_eq!(srq::post_srq_recv(s, l.head(), &mut bad), libc::EINVAL);
        assert_eq!(bad, l.ptr(2));
        let got: Vec<(u64, usize)> = std::iter::from_fn(|| k.pop_recv())
            .map(|w| (w.hdr.wr_id, w.sges.len()))
            .collect();
        assert_eq!(got, [(1, 2), (2, 1)]);
        assert!(pipe.take().is_empty(), "post_srq_recv made a syscall");

        // modify/query go to the kernel.
        let mut a: ibv_srq_attr = zeroed();
        a.srq_limit = 1;
        assert_eq!(srq::modify_srq(s, &mut a, IBV_SRQ_LIMIT as c_int), 0);
        let cmd = pipe.take();
        assert_eq!(u32_at(&cmd, 0), IB_USER_VERBS_CMD_MODIFY_SRQ);
        assert_eq!(srq::query_srq(s, &mut a), 0);
        assert_eq!(u32_at(&pipe.take(), 0), IB_USER_VERBS_CMD_QUERY_SRQ);
        m.switch_to(c"/dev/null");

        // A QP on the SRQ has no receive ring of its own: post_recv is EINVAL in any state.
        let mut qa = rc_attr(cq);
        qa.srq = s;
        let qp = qp::create_qp(pd, &mut qa);
        assert!(!qp.is_null());
        assert_eq!((*qp).srq, s);
        for st in [IBV_QPS_INIT, IBV_QPS_RTS] {
            (*qp).state = st;
            let mut rbad: *mut ibv_recv_wr = ptr::null_mut();
            assert_eq!(qp::post_recv(qp, l.head(), &mut rbad), libc::EINVAL);
            assert_eq!(rbad, l.head());
        }
        assert_eq!(k.pending(), 0);

        // A refused destroy keeps the SRQ and its ring.
        m.switch_to(c"/dev/full");
        assert_eq!(srq::destroy_srq(s), libc::ENOSPC);
        assert!(!(*rs).ring.is_null());
        bad = ptr::null_mut();
        assert_eq!(srq::post_srq_recv(s, l.ptr(1), &mut bad), libc::EINVAL);
        assert_eq!(bad, l.ptr(2));
        assert_eq!(k.pop_recv().map(|w| w.hdr.wr_id), Some(2));
        // A refused create returns NULL with errno.
        assert!(srq::create_srq(pd, &mut sa).is_null());
        errno_is(libc::ENOSPC);

        // Reclaim directly (a destroy on the write() path waits for the kernel's event
        // count, which this fake kernel never writes).
        reclaim_qp(qp);
        drop(Box::from_raw((*rs).ring));
        drop(CBox::from_raw(rs));
        cq::free_cq(cq.cast());
        m.switch_to(c"/dev/null");
        assert_eq!(pd::dealloc_pd(pd), 0);
        drop(mem);
    }
}

#[test]
fn qp_ring_announcements_are_checked() {
    let cap = ibv_qp_cap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let ring = RingInfo {
        mmap_key: 0,
        bytes: 4096,
        slots: 4,
        slot_size: 128,
    };
    // Nothing announced: no rings, no mapping attempted (even on a bad fd).
    let none = qp::map_rings(-1, &CreateQpResp::default(), IBV_QPT_RC, &cap, false).unwrap();
    assert!(none.0.is_none() && none.1.is_none());
    // A receive ring for a QP with an SRQ is a protocol error, whatever else is announced.
    let rq_only = CreateQpResp {
        rq: ring,
        ..Default::default()
    };
    assert_eq!(
        qp::map_rings(-1, &rq_only, IBV_QPT_RC, &cap, true).err(),
        Some(libc::EPROTO)
    );
    // A ring that cannot be mapped reports mmap's errno.
    let sq_only = CreateQpResp {
        sq: ring,
        ..Default::default()
    };
    assert_eq!(
        qp::map_rings(-1, &sq_only, IBV_QPT_RC, &cap, false).err(),
        Some(libc::EBADF)
    );
    assert_eq!(
        qp::map_rings(-1, &rq_only, IBV_QPT_RC, &cap, false).err(),
        Some(libc::EBADF)
    );
    // A mapping that does not cover the announced slots is refused before any access: map
    // real shared memory (a memfd) of one page for a 64-slot ring.
    // SAFETY: plain syscalls on an fd we own.
    let fd = unsafe {
        let fd = libc::memfd_create(c"ring".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, 4096), 0);
        fd
    };
    let big = CreateQpResp {
        sq: RingInfo { slots: 64, ..ring },
        ..Default::default()
    };
    assert_eq!(
        qp::map_rings(fd, &big, IBV_QPT_RC, &cap, false).err(),
        Some(libc::EINVAL)
    );
    // The same page with a sane header maps as a working ring.
    let hdr_words = [
        (core::mem::offset_of!(RingHeader, log2_slots), 2u32),
        (core::mem::offset_of!(RingHeader, slot_size), 128),
    ];
    for (off, v) in hdr_words {
        // SAFETY: writing 4 bytes into the memfd at an offset inside it.
        let n = unsafe { libc::pwrite(fd, (&raw const v).cast(), 4, off as libc::off_t) };
        assert_eq!(n, 4);
    }
    let (sq, rq) = qp::map_rings(fd, &sq_only, IBV_QPT_RC, &cap, false).unwrap();
    assert!(rq.is_none());
    assert_eq!(sq.unwrap().caps().max_sge, 1);
    // SAFETY: our fd.
    unsafe { libc::close(fd) };
}

/// Calls through an `ibv_qp_ex`'s function pointers, as the `ibv_wr_*` inlines do.
struct Wr(*mut ibv_qp_ex);

impl Wr {
    /// Sets `wr_id`/`wr_flags` for the next builder.
    fn next(&self, id: u64, flags: u32) -> &Self {
        // SAFETY: a live QP with builders.
        unsafe {
            (*self.0).wr_id = id;
            (*self.0).wr_flags = flags;
        }
        self
    }
}

/// Calls the `$f` callback of `$w`'s `ibv_qp_ex` with the remaining arguments.
macro_rules! wr {
    ($w:expr, $f:ident $(, $a:expr)*) => {
        // (Used inside the tests' `unsafe` blocks: a live QP of ours with builders,
        // arguments as the API requires.)
        ((*$w.0).$f.unwrap())($w.0 $(, $a)*)
    };
}

/// Attaches a send ring of `slots` slots bounded to `max_wr` WQEs.
///
/// # Safety
/// As [`attach_sq`].
unsafe fn attach_sq_max(qp: *mut ibv_qp, caps: SqCaps, slots: u32, max_wr: u32) -> TestMem {
    let ss = SqRing::expected_slot_size(&caps) as u32;
    let m = TestMem::ring(slots, ss, 0);
    // SAFETY: as in `attach_sq`.
    let mut r = unsafe { SqRing::from_raw(m.base(), m.len(), &info(slots, ss), caps) }.unwrap();
    r.set_max_wr(max_wr).unwrap();
    // SAFETY: `qp` is a live `RrxeQp` (contract).
    unsafe { (*qp.cast::<qp::RrxeQp>()).sq = Box::into_raw(Box::new(r)) };
    m
}

#[test]
fn qp_ex_builders_post_whole_batches_with_one_doorbell() {
    let m = Mock::open(c"/dev/null");
    let ctx = m.ctx;
    // SAFETY: objects created on this context as libibverbs would; the ring's test memory
    // outlives the QP; every buffer handed to a setter is a live local.
    unsafe {
        let pd = pd::alloc_pd(ctx);
        let cq = cq::create_cq(ctx, 16, ptr::null_mut(), 0);
        let mut ax: ibv_qp_init_attr_ex = zeroed();
        ax.send_cq = cq;
        ax.recv_cq = cq;
        ax.qp_type = IBV_QPT_RC;
        ax.pd = pd;
        ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        ax.send_ops_flags = crate::util::supported_send_ops(IBV_QPT_RC);
        let qp = qp_ex::create_qp_ex(ctx, &mut ax);
        assert!(!qp.is_null());
        (*qp).handle = 0x99;
        let x = ibv_qp_to_qp_ex(qp);
        assert_eq!(x, qp.cast::<ibv_qp_ex>());
        let w = Wr(x);
        let caps = SqCaps {
            qp_type: IBV_QPT_RC,
            max_sge: 2,
            max_inline: 16,
        };
        let sq_mem = attach_sq_max(qp, caps, 8, 6);
        let mut sk = Kernel::consumer_of(&sq_mem);
        let pipe = CmdPipe::install(&m);
        (*qp).state = IBV_QPS_RTS;

        // One batch of six operations: every builder and setter, one doorbell.
        let list = [
            ibv_sge {
                addr: 0x3000,
                length: 10,
                lkey: 3,
            },
            ibv_sge {
                addr: 0x4000,
                length: 20,
                lkey: 4,
            },
        ];
        let parts = [
            ibv_data_buf {
                addr: b"ab".as_ptr().cast_mut().cast(),
                length: 2,
            },
            ibv_data_buf {
                addr: ptr::null_mut(),
                length: 0,
            },
            ibv_data_buf {
                addr: b"cde".as_ptr().cast_mut().cast(),
                length: 3,
            },
        ];
        let mut hello = *b"hello";
        wr!(w, wr_start);
        w.next(1, IBV_SEND_SIGNALED);
        wr!(w, wr_send);
        wr!(w, wr_set_sge, 5, 0x1000, 64);
        w.next(2, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
        wr!(w, wr_send_imm, 0xdead_beef);
        wr!(w, wr_set_inline_data, hello.as_mut_ptr().cast(), 5);
        hello[0] = b'X'; // copied at the call: later changes do not matter
        assert_eq!(hello[0], b'X');
        w.next(3, 0);
        wr!(w, wr_rdma_write, 7, 0x2000);
        wr!(w, wr_set_sge_list, 2, list.as_ptr());
        w.next(4, IBV_SEND_FENCE);
        wr!(w, wr_rdma_write_imm, 8, 0x2100, 0x0102_0304);
        wr!(w, wr_set_inline_data_list, 3, parts.as_ptr());
        w.next(5, IBV_SEND_SIGNALED);
        wr!(w, wr_atomic_cmp_swp, 9, 0x5000, 11, 22);
        wr!(w, wr_set_sge, 6, 0x6000, 8);
        w.next(6, IBV_SEND_SIGNALED);
        wr!(w, wr_atomic_fetch_add, 10, 0x5008, 33);
        wr!(w, wr_set_sge, 6, 0x6008, 8);
        assert!(pipe.take().is_empty(), "nothing before wr_complete");
        assert_eq!(sk.pending(), 0, "nothing published before wr_complete");
        assert_eq!(wr!(w, wr_complete), 0);
        assert_one_doorbell(&pipe.take(), 0x99);
        let got: Vec<_> = std::iter::from_fn(|| sk.pop_send()).collect();
        assert_eq!(got.len(), 6);
        let h: Vec<_> = got.iter().map(|g| g.hdr).collect();
        assert_eq!(
            h.iter().map(|h| h.wr_id).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(
            h.iter().map(|h| h.opcode).collect::<Vec<_>>(),
            [
                IBV_WR_SEND,
                IBV_WR_SEND_WITH_IMM,
                IBV_WR_RDMA_WRITE,
                IBV_WR_RDMA_WRITE_WITH_IMM,
                IBV_WR_ATOMIC_CMP_AND_SWP,
                IBV_WR_ATOMIC_FETCH_AND_ADD
            ]
        );
        assert_eq!(
            got[0].sges,
            [rrxe_uapi::Sge {
                addr: 0x1000,
                length: 64,
                lkey: 5
            }]
        );
        assert_eq!(h[0].send_flags, IBV_SEND_SIGNALED);
        // The INLINE flag comes from the setter, never from wr_flags alone.
        assert_eq!(
            h[1].send_flags,
            IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE
        );
        assert_eq!(h[1].imm_data, 0xdead_beef);
        assert_eq!((h[1].num_sge, h[1].inline_len), (0, 5));
        assert_eq!(got[1].inline, b"hello");
        assert_eq!(
            (h[2].rkey, h[2].remote_addr, h[2].send_flags),
            (7, 0x2000, 0)
        );
        assert_eq!(got[2].sges.len(), 2);
        assert_eq!(
            (
                got[2].sges[1].addr,
                got[2].sges[1].length,
                got[2].sges[1].lkey
            ),
            (0x4000, 20, 4)
        );
        assert_eq!(
            (h[3].rkey, h[3].remote_addr, h[3].imm_data),
            (8, 0x2100, 0x0102_0304)
        );
        assert_eq!(h[3].send_flags, IBV_SEND_FENCE | IBV_SEND_INLINE);
        assert_eq!(got[3].inline, b"abcde");
        assert_eq!(
            (h[4].rkey, h[4].remote_addr, h[4].compare_add, h[4].swap),
            (9, 0x5000, 11, 22)
        );
        assert_eq!(
            (h[5].rkey, h[5].remote_addr, h[5].compare_add),
            (10, 0x5008, 33)
        );
        assert_eq!(got[5].sges[0].addr, 0x6008);

        // More than max_send_wr (6) in one batch: ENOMEM, nothing posted, no doorbell.
        wr!(w, wr_start);
        for i in 0..7 {
            w.next(100 + i, 0);
            wr!(w, wr_send);
        }
        assert_eq!(wr!(w, wr_complete), libc::ENOMEM);
        assert_eq!(sk.pending(), 0);
        assert!(pipe.take().is_empty());
        // Ring occupancy counts: 4 waiting in the ring, then a batch of 3 does not fit.
        sk.flags()
            .store(SQ_FLAG_KERNEL_BUSY, core::sync::atomic::Ordering::SeqCst);
        wr!(w, wr_start);
        for i in 0..4 {
            w.next(200 + i, 0);
            wr!(w, wr_send);
        }
        assert_eq!(wr!(w, wr_complete), 0);
        assert!(
            pipe.take().is_empty(),
            "no doorbell while the kernel is busy"
        );
        wr!(w, wr_start);
        for i in 0..3 {
            w.next(300 + i, 0);
            wr!(w, wr_send);
        }
        assert_eq!(wr!(w, wr_complete), libc::ENOMEM);
        assert_eq!(sk.pending(), 4);
        while sk.pop_send().is_some() {}
        sk.flags().store(0, core::sync::atomic::Ordering::SeqCst);

        // A failing WR anywhere fails the whole batch (nothing posted).
        let too_many = [list[0], list[1], list[0]];
        wr!(w, wr_start);
        w.next(400, 0);
        wr!(w, wr_send);
        w.next(401, 0);
        wr!(w, wr_rdma_write, 1, 0x10);
        wr!(w, wr_set_sge_list, 3, too_many.as_ptr()); // > max_send_sge
        assert_eq!(wr!(w, wr_complete), libc::EINVAL);
        // Inline above max_inline_data (16).
        let big = [0u8; 17];
        wr!(w, wr_start);
        wr!(w, wr_send);
        wr!(w, wr_set_inline_data, big.as_ptr().cast_mut().cast(), 17);
        assert_eq!(wr!(w, wr_complete), libc::EINVAL);
        // A setter before any builder.
        wr!(w, wr_start);
        wr!(w, wr_set_sge, 1, 2, 3);
        wr!(w, wr_send);
        assert_eq!(wr!(w, wr_complete), libc::EINVAL);
        // An unaligned atomic (checked as post_send does).
        wr!(w, wr_start);
        wr!(w, wr_atomic_fetch_add, 1, 0x5004, 1);
        wr!(w, wr_set_sge, 6, 0x6000, 8);
        assert_eq!(wr!(w, wr_complete), libc::EINVAL);
        // Invalidation and ATOMIC WRITE: LOCAL_INV and SEND_WITH_INV carry the key in
        // imm_data; ATOMIC WRITE its 8 bytes in `swap` (read at the call).
        let mut value = *b"\x11\x22\x33\x44\x55\x66\x77\x88";
        wr!(w, wr_start);
        w.next(700, IBV_SEND_SIGNALED);
        wr!(w, wr_local_inv, 0x4401);
        w.next(701, IBV_SEND_SIGNALED);
        wr!(w, wr_send_inv, 0x4402);
        wr!(w, wr_set_sge, 5, 0x1000, 64);
        w.next(702, IBV_SEND_SIGNALED);
        wr!(w, wr_atomic_write, 12, 0x7008, value.as_ptr().cast());
        value[0] = 0; // copied at the call
        assert_eq!(wr!(w, wr_complete), 0);
        assert_one_doorbell(&pipe.take(), 0x99);
        let got: Vec<_> = std::iter::from_fn(|| sk.pop_send()).collect();
        let h: Vec<_> = got.iter().map(|g| g.hdr).collect();
        assert_eq!(
            h.iter().map(|h| (h.wr_id, h.opcode)).collect::<Vec<_>>(),
            vec![(700, 7), (701, 9), (702, 15)]
        );
        assert_eq!((h[0].imm_data, h[0].num_sge), (0x4401, 0));
        assert_eq!((h[1].imm_data, h[1].num_sge), (0x4402, 1));
        assert_eq!(
            (
                h[2].rkey,
                h[2].remote_addr,
                h[2].swap,
                h[2].num_sge,
                h[2].inline_len
            ),
            (
                12,
                0x7008,
                u64::from_ne_bytes(*b"\x11\x22\x33\x44\x55\x66\x77\x88"),
                0,
                0
            )
        );
        assert_eq!(h[2].send_flags, IBV_SEND_SIGNALED);
        // An unaligned ATOMIC WRITE.
        wr!(w, wr_start);
        wr!(w, wr_atomic_write, 12, 0x7004, value.as_ptr().cast());
        assert_eq!(wr!(w, wr_complete), libc::EINVAL);
        assert_eq!(sk.pending(), 0);
        assert!(pipe.take().is_empty());

        // wr_abort discards (and releases the batch lock: the next batch works).
        wr!(w, wr_start);
        w.next(500, 0);
        wr!(w, wr_send);
        wr!(w, wr_abort);
        wr!(w, wr_start);
        assert_eq!(wr!(w, wr_complete), 0, "an empty batch");
        assert!(pipe.take().is_empty(), "an empty batch rings nothing");
        assert_eq!(sk.pending(), 0);

        // Before RTS: EINVAL, nothing posted.
        (*qp).state = IBV_QPS_RTR;
        wr!(w, wr_start);
        wr!(w, wr_send);
        assert_eq!(wr!(w, wr_complete), libc::EINVAL);
        (*qp).state = IBV_QPS_RTS;

        // A refused doorbell is wr_complete's error.
        m.switch_to(c"/dev/full");
        wr!(w, wr_start);
        w.next(600, 0);
        wr!(w, wr_send);
        assert_eq!(wr!(w, wr_complete), libc::ENOSPC);
        m.switch_to(c"/dev/null");

        reclaim_qp(qp);
        cq::free_cq(cq.cast());
        assert_eq!(pd::dealloc_pd(pd), 0);
        drop(sq_mem);
    }
}

#[test]
fn qp_ex_ud_address_and_batch_lock() {
    let m = Mock::open(c"/dev/null");
    let ctx = m.ctx;
    // SAFETY: as above.
    unsafe {
        let pd = pd::alloc_pd(ctx);
        let cq = cq::create_cq(ctx, 16, ptr::null_mut(), 0);
        let mut ax: ibv_qp_init_attr_ex = zeroed();
        ax.send_cq = cq;
        ax.recv_cq = cq;
        ax.qp_type = IBV_QPT_UD;
        ax.pd = pd;
        ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        ax.send_ops_flags = u64::from(IBV_QP_EX_WITH_SEND);
        let qp = qp_ex::create_qp_ex(ctx, &mut ax);
        assert!(!qp.is_null());
        let w = Wr(ibv_qp_to_qp_ex(qp));
        let caps = SqCaps {
            qp_type: IBV_QPT_UD,
            max_sge: 1,
            max_inline: 0,
        };
        let sq_mem = attach_sq_max(qp, caps, 4, 4);
        let mut sk = Kernel::consumer_of(&sq_mem);
        (*qp).state = IBV_QPS_RTS;
        let mut aha: ibv_ah_attr = zeroed();
        let ah = ah::create_ah(pd, &mut aha);
        (*ah.cast::<ah::RrxeAh>()).ah_num = 42;

        wr!(w, wr_start);
        w.next(1, IBV_SEND_SIGNALED);
        wr!(w, wr_send_imm, 77);
        wr!(w, wr_set_ud_addr, ah, 0x11, 0x2222);
        wr!(w, wr_set_sge, 1, 0x100, 16);
        assert_eq!(wr!(w, wr_complete), 0);
        let s = sk.pop_send().unwrap();
        assert_eq!(
            (
                s.hdr.wr_id,
                s.hdr.opcode,
                s.hdr.imm_data,
                s.hdr.ah_num,
                s.hdr.remote_qpn,
                s.hdr.remote_qkey
            ),
            (1, IBV_WR_SEND_WITH_IMM, 77, 42, 0x11, 0x2222)
        );
        // No address, or an RDMA WRITE on UD: the batch fails.
        wr!(w, wr_start);
        wr!(w, wr_send);
        assert_eq!(wr!(w, wr_complete), libc::EINVAL);
        wr!(w, wr_start);
        wr!(w, wr_rdma_write, 1, 2);
        wr!(w, wr_set_ud_addr, ah, 0x11, 0x2222);
        assert_eq!(wr!(w, wr_complete), libc::EINVAL);
        assert_eq!(sk.pending(), 0);

        // The batch lock: a second thread's wr_start waits for wr_complete.
        wr!(w, wr_start);
        let addr = w.0 as usize;
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let w = Wr(addr as *mut ibv_qp_ex);
            // (Inside the test's `unsafe` block: the QP outlives the thread, joined below.)
            wr!(w, wr_start);
            tx.send(()).unwrap();
            wr!(w, wr_abort);
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        wr!(w, wr_abort);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        t.join().unwrap();

        assert_eq!(ah::destroy_ah(ah), 0);
        reclaim_qp(qp);
        cq::free_cq(cq.cast());
        assert_eq!(pd::dealloc_pd(pd), 0);
        drop(sq_mem);
    }
}

#[test]
fn capacities_are_the_ones_enforced() {
    // An RQ of 8 slots announced for max_recv_wr = 5: the sixth outstanding WR is ENOMEM.
    let (rq_mem, mut rq) = test_rq(8, 1);
    rq.set_max_wr(5).unwrap();
    assert!(rq.set_max_wr(9).is_err(), "more than the slots");
    let mut rk = Kernel::consumer_of(&rq_mem);
    let specs: Vec<RecvSpec> = (0..6).map(|i| RecvSpec::new(i, 1)).collect();
    let l = RecvList::new(&specs);
    let mut bad: *mut ibv_recv_wr = ptr::null_mut();
    // SAFETY: a live WR list; `bad` writable.
    assert_eq!(unsafe { rq.post_recv(l.head(), &mut bad) }, libc::ENOMEM);
    assert_eq!(bad, l.ptr(5));
    assert_eq!(rk.pending(), 5);
    // One taken by an incoming message: one more fits.
    assert!(rk.pop_recv().is_some());
    // SAFETY: as above.
    assert_eq!(unsafe { rq.post_recv(l.ptr(5), &mut bad) }, 0);
    // max_wr 0 takes nothing.
    let (_m0, mut rq0) = test_rq(1, 1);
    rq0.set_max_wr(0).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { rq0.post_recv(l.ptr(5), &mut bad) }, libc::ENOMEM);
    drop(rq);
    drop(rq_mem);
}
