//! The control-path trampolines driven through the real libibverbs 44 helpers, without RDMA
//! hardware or the module: a context is opened with `_verbs_init_and_alloc_context` on a
//! character device standing in for `/dev/infiniband/uverbsN`.
//!
//! * `/dev/null` is a kernel that accepts every command: `ioctl` fails with `ENOTTY`, so
//!   libibverbs falls back to `write()`, which succeeds and leaves the (zeroed) responses
//!   alone. This drives every create path to success, and the PD/MR/AH back through destroy.
//! * `/dev/full` is a kernel that refuses every command (`write()` fails with `ENOSPC`): create
//!   paths must return NULL with `errno` set (and free their object), destroy paths must return
//!   the error and keep the object.
//!
//! Run under valgrind to check for leaks: see README.md.

use core::ffi::{c_int, CStr};
use core::mem::{offset_of, size_of, zeroed};
use core::ptr;

use crate::abi::*;

#[link(name = "ibverbs")]
unsafe extern "C" {
    /// libibverbs' own `ibv_qp_to_qp_ex` (reads `verbs_qp::comp_mask` at its v44 offset).
    fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex;
}
use crate::context::RRXE_CTX_OPS;
use crate::context::{free_context, RrxeContext};
use crate::device::RrxeDevice;
use crate::provider::RRXE_DEVICE_OPS;
use crate::{ah, cq, pd, qp, qp_ex};

/// A context on a fake device, closed (and the device freed) on drop.
struct Mock {
    dev: *mut RrxeDevice,
    ctx: *mut ibv_context,
}

impl Mock {
    fn open(path: &CStr) -> Mock {
        // SAFETY: plain allocation; zeroed `RrxeDevice` is valid (see device::alloc_device).
        let dev = unsafe { libc::calloc(1, size_of::<RrxeDevice>()) }.cast::<RrxeDevice>();
        assert!(!dev.is_null());
        // SAFETY: `path` is a C string; the fd's ownership passes to libibverbs below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        assert!(fd >= 0, "open {path:?}");
        // SAFETY: `dev` is live. One reference held by "libibverbs" keeps the count above zero,
        // so `uninit_device` is never called on this test-owned device.
        let ctx = unsafe {
            (*dev).vdev.refcount = 1;
            (*dev).vdev.ops = &RRXE_DEVICE_OPS;
            _verbs_init_and_alloc_context(
                &raw mut (*dev).vdev.device,
                fd,
                size_of::<RrxeContext>(),
                offset_of!(RrxeContext, vctx) as *mut verbs_context,
                RDMA_DRIVER_UNKNOWN,
            )
        }
        .cast::<RrxeContext>();
        assert!(!ctx.is_null(), "_verbs_init_and_alloc_context");
        // SAFETY: `ctx` is a freshly initialised context; the ops table is a static.
        unsafe {
            verbs_set_ops(&raw mut (*ctx).vctx, &RRXE_CTX_OPS);
            Mock {
                dev,
                ctx: &raw mut (*ctx).vctx.context,
            }
        }
    }

    /// Points the context's command fd at another device (`dup2`).
    fn switch_to(&self, path: &CStr) {
        // SAFETY: plain syscalls on fds we own.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            assert!(fd >= 0);
            assert_eq!(libc::dup2(fd, (*self.ctx).cmd_fd), (*self.ctx).cmd_fd);
            libc::close(fd);
        }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        // SAFETY: the context came from `Mock::open` and is closed once; the device is
        // test-owned and still holds one reference, so libibverbs never frees it.
        unsafe {
            free_context(self.ctx);
            assert_eq!((*self.dev).vdev.refcount, 1);
            libc::free(self.dev.cast());
        }
    }
}

fn errno_is(e: c_int) {
    assert_eq!(errno(), e, "errno");
}

/// The attributes of a small RC QP on `cq`.
fn rc_attr(cq: *mut ibv_cq) -> ibv_qp_init_attr {
    // SAFETY: all-zero is a valid `ibv_qp_init_attr` (pointers, integers, C enums).
    let mut a: ibv_qp_init_attr = unsafe { zeroed() };
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a
}

#[test]
fn accepting_kernel_every_object_round_trips() {
    let m = Mock::open(c"/dev/null");
    let ctx = m.ctx;
    let mut buf = vec![0u8; 4096];
    // SAFETY: every call passes objects created just above on this context, as libibverbs
    // would; buffers and attribute structs are live locals.
    unsafe {
        let pd = pd::alloc_pd(ctx);
        assert!(!pd.is_null());

        // Access flags reach the helper unchanged (RELAXED_ORDERING included).
        let access = (IBV_ACCESS_LOCAL_WRITE
            | IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_RELAXED_ORDERING) as c_int;
        let mr = pd::reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 0x1000, access);
        assert!(!mr.is_null());
        let vmr = mr.cast::<verbs_mr>();
        assert_eq!((*vmr).access, access);
        assert_eq!((*vmr).mr_type, IBV_MR_TYPE_MR);
        assert_eq!((*mr).context, ctx);

        let cq = cq::create_cq(ctx, 16, ptr::null_mut(), 0);
        assert!(!cq.is_null());
        assert_eq!((*cq).context, ctx);
        assert_eq!(cq::resize_cq(cq, 32), 0);
        assert_eq!(cq::req_notify_cq(cq, 0), 0);

        let mut attr = rc_attr(cq);
        let qp = qp::create_qp(pd, &mut attr);
        assert!(!qp.is_null());
        assert_eq!((*qp).context, ctx);
        assert_eq!((*qp).pd, pd);
        assert_eq!((*qp).send_cq, cq);
        assert_eq!((*qp).qp_type, IBV_QPT_RC);
        assert_eq!((*qp).state, IBV_QPS_RESET);
        // A legacy QP is still a full verbs_qp with comp_mask 0 (ibv_qp_to_qp_ex reads it).
        assert_eq!((*qp.cast::<verbs_qp>()).comp_mask, 0);

        let mut qa: ibv_qp_attr = zeroed();
        qa.qp_state = IBV_QPS_INIT;
        qa.port_num = 1;
        let mask = (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) as c_int;
        assert_eq!(qp::modify_qp(qp, &mut qa, mask), 0);
        let mut qia: ibv_qp_init_attr = zeroed();
        assert_eq!(
            qp::query_qp(qp, &mut qa, IBV_QP_STATE as c_int, &mut qia),
            0
        );
        assert_eq!(qia.send_cq, cq);
        // IBV_QP_RATE_LIMIT needs the _ex command: libibverbs refuses it without the kernel.
        assert_eq!(
            qp::modify_qp(qp, &mut qa, IBV_QP_RATE_LIMIT as c_int),
            libc::EOPNOTSUPP
        );

        // create_qp_ex: PD (+ create flags) go to the kernel, the rest is refused up front.
        let mut ax: ibv_qp_init_attr_ex = zeroed();
        ax.send_cq = cq;
        ax.recv_cq = cq;
        ax.qp_type = IBV_QPT_UD;
        ax.pd = pd;
        ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        let qp2 = qp_ex::create_qp_ex(ctx, &mut ax);
        assert!(!qp2.is_null());
        assert_eq!((*qp2.cast::<verbs_qp>()).comp_mask, 0);
        // SEND_OPS_FLAGS: the builders, for what the QP type offers; the rest is refused
        // before the kernel is asked.
        ax.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        for bad in [
            IBV_QP_EX_WITH_RDMA_READ,
            IBV_QP_EX_WITH_LOCAL_INV,
            IBV_QP_EX_WITH_SEND_WITH_INV,
            IBV_QP_EX_WITH_BIND_MW,
            IBV_QP_EX_WITH_TSO,
        ] {
            ax.send_ops_flags = u64::from(IBV_QP_EX_WITH_SEND | bad);
            assert!(qp_ex::create_qp_ex(ctx, &mut ax).is_null(), "{bad:#x}");
            errno_is(libc::EOPNOTSUPP);
        }
        ax.send_ops_flags = u64::from(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
        let qp3 = qp_ex::create_qp_ex(ctx, &mut ax);
        assert!(!qp3.is_null());
        assert_eq!((*qp3.cast::<verbs_qp>()).comp_mask, VERBS_QP_EX);
        assert_eq!(ibv_qp_to_qp_ex(qp3), qp3.cast::<ibv_qp_ex>());
        assert!(
            ibv_qp_to_qp_ex(qp2).is_null(),
            "no builders without SEND_OPS_FLAGS"
        );
        assert!(ibv_qp_to_qp_ex(qp).is_null());

        let mut aha: ibv_ah_attr = zeroed();
        aha.port_num = 1;
        aha.is_global = 1;
        let ah = ah::create_ah(pd, &mut aha);
        assert!(!ah.is_null());
        assert_eq!((*ah).context, ctx);

        assert_eq!(ah::destroy_ah(ah), 0);
        assert_eq!(pd::dereg_mr(vmr), 0);
        assert_eq!(pd::dealloc_pd(pd), 0);
        // Destroying a CQ/QP on the write() path makes libibverbs wait until the application
        // has acknowledged as many events as the kernel reports in the destroy response, which
        // this fake kernel never writes; reclaim those directly (the VM tests destroy them).
        for q in [qp, qp2, qp3] {
            qp::RrxeQp::drop_rings(q.cast());
            drop(CBox::from_raw(q.cast::<qp::RrxeQp>()));
        }
        cq::free_cq(cq.cast());
    }
}

#[test]
fn refusing_kernel_every_create_fails_cleanly() {
    let m = Mock::open(c"/dev/full");
    let ctx = m.ctx;
    let mut buf = [0u8; 64];
    // SAFETY: as above. The PD/CQ used as parents are zeroed stand-ins owned by this test
    // (the helpers only read their handle and context).
    unsafe {
        assert!(pd::alloc_pd(ctx).is_null());
        errno_is(libc::ENOSPC);

        let mut fake_pd: ibv_pd = zeroed();
        fake_pd.context = ctx;
        let fake = cq::test_cq(ctx, None);
        let fake_cq = fake;

        assert!(pd::reg_mr(&mut fake_pd, buf.as_mut_ptr().cast(), buf.len(), 0, 1).is_null());
        errno_is(libc::ENOSPC);
        assert!(cq::create_cq(ctx, 16, ptr::null_mut(), 0).is_null());
        errno_is(libc::ENOSPC);
        let mut attr = rc_attr(fake_cq);
        assert!(qp::create_qp(&mut fake_pd, &mut attr).is_null());
        errno_is(libc::ENOSPC);
        let mut ax: ibv_qp_init_attr_ex = zeroed();
        ax.send_cq = fake_cq;
        ax.recv_cq = fake_cq;
        ax.qp_type = IBV_QPT_RC;
        ax.pd = &mut fake_pd;
        ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        assert!(qp_ex::create_qp_ex(ctx, &mut ax).is_null());
        errno_is(libc::ENOSPC);
        let mut aha: ibv_ah_attr = zeroed();
        assert!(ah::create_ah(&mut fake_pd, &mut aha).is_null());
        errno_is(libc::ENOSPC);

        // Through-the-kernel polling reports an error, never a completion count.
        let mut wc: [ibv_wc; 4] = zeroed();
        assert_eq!(cq::poll_cq(fake_cq, 4, wc.as_mut_ptr()), -1);
        assert_eq!(cq::req_notify_cq(fake_cq, 1), libc::ENOSPC);
        assert_eq!(cq::resize_cq(fake_cq, 8), libc::ENOSPC);
        cq::free_cq(fake.cast());
    }
}

#[test]
fn failed_destroy_keeps_the_object() {
    let m = Mock::open(c"/dev/null");
    let ctx = m.ctx;
    let mut buf = [0u8; 64];
    // SAFETY: as above; after the kernel "refuses" to destroy, the objects are still ours and
    // are reclaimed (freed) explicitly, as a later successful destroy would.
    unsafe {
        let pd = pd::alloc_pd(ctx);
        let mr = pd::reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 0, 1);
        let cq = cq::create_cq(ctx, 4, ptr::null_mut(), 0);
        let mut attr = rc_attr(cq);
        let qp = qp::create_qp(pd, &mut attr);
        let mut aha: ibv_ah_attr = zeroed();
        let ah = ah::create_ah(pd, &mut aha);
        assert!(!pd.is_null() && !mr.is_null() && !cq.is_null() && !qp.is_null() && !ah.is_null());

        m.switch_to(c"/dev/full");
        assert_eq!(ah::destroy_ah(ah), libc::ENOSPC);
        assert_eq!(qp::destroy_qp(qp), libc::ENOSPC);
        assert_eq!(cq::destroy_cq(cq), libc::ENOSPC);
        assert_eq!(pd::dereg_mr(mr.cast()), libc::ENOSPC);
        assert_eq!(pd::dealloc_pd(pd), libc::ENOSPC);
        // Still live objects of ours: their fields are intact.
        assert_eq!((*qp).context, ctx);
        assert_eq!((*cq).context, ctx);

        m.switch_to(c"/dev/null");
        assert_eq!(ah::destroy_ah(ah), 0);
        assert_eq!(pd::dereg_mr(mr.cast()), 0);
        assert_eq!(pd::dealloc_pd(pd), 0);
        // Reclaim the CQ/QP directly (see accepting_kernel_every_object_round_trips).
        drop(CBox::from_raw(qp.cast::<qp::RrxeQp>()));
        cq::free_cq(cq.cast());
    }
}

mod datapath;
