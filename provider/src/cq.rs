//! Completion queues (trampolines called by libibverbs).
//!
//! The kernel answers `create_cq` with a completion ring ([`rrxe_uapi::CreateCqResp`]); the
//! provider maps it and `poll_cq` reads completions from it with no syscall. A CQ without a
//! ring (a kernel that announced none) is polled through the kernel (`ibv_cmd_poll_cq`).
//! `req_notify_cq` is `ibv_cmd_req_notify_cq` (`REQ_NOTIFY_CQ`).
//!
//! `create_cq_ex` makes the same kernel object through the same command (`CQ_CREATE` with no
//! flags: what `ibv_cmd_create_cq_ex` would send for the flags rrxe accepts) and fills the
//! `ibv_cq_ex` polling callbacks (`start_poll`/`next_poll`/`end_poll`/`read_*`), which read the
//! same ring with no syscall.
//!
//! # Locking
//!
//! libibverbs does not serialise `poll_cq`, the `ibv_cq_ex` polling batch and `resize_cq`, so
//! each CQ has one lock ([`CqCore`]): `poll_cq` takes it for one call, `start_poll` takes it and
//! `end_poll` (or a failing `start_poll`) releases it, and `resize_cq` holds it from before the
//! `RESIZE_CQ` command (the kernel moves the completions not yet consumed into the new ring,
//! reading our consumer index) until the new ring is mapped and the old one unmapped. A poll
//! therefore never reads a ring that is being replaced, and never consumes a completion that
//! the kernel has just copied into the new ring.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::mem::{offset_of, size_of_val, MaybeUninit};
use core::ptr;

use rrxe_uapi::Cqe;

use crate::abi::{
    cmd_errno, ibv_cmd_create_cq, ibv_cmd_destroy_cq, ibv_cmd_poll_cq, ibv_cmd_req_notify_cq,
    ibv_cmd_resize_cq, ibv_comp_channel, ibv_context, ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex,
    ibv_poll_cq_attr, ibv_wc, ibv_wc_opcode, rrxe_create_cq, rrxe_create_cq_resp, rrxe_resize_cq,
    rrxe_resize_cq_resp, set_errno, verbs_cq, CBox, ZeroInit,
};
use crate::log::trace;
use crate::ring::{CqRing, Mapping};
use crate::sync::RawMutex;
use crate::util::check_create_cq_ex;

/// The provider's CQ: libibverbs' `verbs_cq` (the application's `ibv_cq`, or `ibv_cq_ex`, at
/// offset 0), then the ring state. The full `verbs_cq` (`ibv_cq_ex`-sized) is allocated so
/// that libibverbs' `ibv_cq_ex` accessors never read past the object.
#[repr(C)]
pub struct RrxeCq {
    pub vcq: verbs_cq,
    /// The ring and its lock (`Box::into_raw`); never null for a CQ handed to libibverbs.
    pub(crate) core: *mut CqCore,
}

const _: () = assert!(offset_of!(RrxeCq, vcq) == 0);

// SAFETY: `verbs_cq` is a union of `ibv_cq`/`ibv_cq_ex`: pointers, integers, pthread
// mutex/cond (all-zero = PTHREAD_*_INITIALIZER in glibc) and `Option<fn>`s; `core` is a raw
// pointer (null until set); no drop glue.
unsafe impl ZeroInit for RrxeCq {}

/// What a resize did, as the closure given to [`CqCore::resize`] reports it.
pub enum Resize {
    /// The kernel refused (positive errno): it kept the old ring, and so does the CQ.
    Refused(c_int),
    /// The kernel switched to a new ring and it is mapped (`None`: the kernel announced no
    /// ring, which is only consistent for a CQ that never had one).
    Mapped(Option<CqRing>),
    /// The kernel switched to a new ring but it could not be mapped (errno): the old ring no
    /// longer receives completions, so the CQ is broken until a later resize succeeds.
    Lost(c_int),
}

/// A CQ's ring behind the CQ lock, plus the `ibv_cq_ex` polling cursor.
pub struct CqCore {
    lock: RawMutex,
    st: UnsafeCell<CqState>,
}

// SAFETY: `st` is only accessed with `lock` held (every method below), so sharing a `CqCore`
// between threads is sound; `CqRing` is `Send`.
unsafe impl Sync for CqCore {}
// SAFETY: as above.
unsafe impl Send for CqCore {}

struct CqState {
    /// `None`: polled through the kernel (no ring announced).
    ring: Option<CqRing>,
    /// Non-zero: a resize lost the ring (the errno of the failed mapping); polls fail with it.
    broken: c_int,
    /// `ibv_cq_ex` batch: the position of the next completion to read.
    pos: u32,
    /// `ibv_cq_ex` batch: a copy of the current completion (what `read_*` return).
    cur: Cqe,
}

impl CqCore {
    /// A CQ over `ring` (`None`: polled through the kernel).
    pub fn new(ring: Option<CqRing>) -> CqCore {
        CqCore {
            lock: RawMutex::new(),
            st: UnsafeCell::new(CqState {
                ring,
                broken: 0,
                pos: 0,
                cur: Cqe::default(),
            }),
        }
    }

    /// The state; the caller holds the lock.
    ///
    /// # Safety
    /// The calling thread must hold `self.lock`, and no other reference from `st` may be live.
    #[allow(clippy::mut_from_ref)]
    unsafe fn st(&self) -> &mut CqState {
        // SAFETY: exclusive by the lock (contract).
        unsafe { &mut *self.st.get() }
    }

    /// Runs `f` on the state with the lock held.
    fn with<R>(&self, f: impl FnOnce(&mut CqState) -> R) -> R {
        self.lock.lock();
        // SAFETY: locked just above; the reference ends before the unlock.
        let r = f(unsafe { self.st() });
        // SAFETY: locked above by this thread.
        unsafe { self.lock.unlock() };
        r
    }

    /// Whether the CQ has a ring (else it is polled through the kernel).
    pub fn has_ring(&self) -> bool {
        self.with(|st| st.ring.is_some())
    }

    /// `poll_cq` over the ring: `Ok(Some(n))` completions written, `Ok(None)` when there is no
    /// ring (poll through the kernel), `Err(errno)` for a corrupt ring or a CQ whose ring a
    /// resize lost.
    pub fn poll(&self, out: &mut [MaybeUninit<ibv_wc>]) -> Result<Option<usize>, c_int> {
        self.with(|st| {
            if st.broken != 0 {
                return Err(st.broken);
            }
            match &st.ring {
                None => Ok(None),
                Some(r) => r.poll(out).map(Some).map_err(|e| e.errno()),
            }
        })
    }

    /// `ibv_start_poll`: 0 with the lock held and the first completion current; else the lock
    /// is released and `ENOENT` (empty), `EIO` (corrupt ring), `EOPNOTSUPP` (no ring) or the
    /// errno that broke the CQ is returned.
    pub fn start_poll(&self) -> c_int {
        self.lock.lock();
        // SAFETY: locked just above.
        let st = unsafe { self.st() };
        let r = if st.broken != 0 {
            st.broken
        } else {
            match &st.ring {
                None => libc::EOPNOTSUPP,
                Some(ring) => {
                    st.pos = ring.consumer();
                    Self::advance(st)
                }
            }
        };
        if r != 0 {
            // SAFETY: locked above by this thread.
            unsafe { self.lock.unlock() };
        }
        r
    }

    /// Reads the completion at `pos` into `cur`: 0, `ENOENT` or `EIO`.
    fn advance(st: &mut CqState) -> c_int {
        let Some(ring) = &st.ring else {
            return libc::EOPNOTSUPP;
        };
        match ring.peek(st.pos) {
            Ok(Some(c)) => {
                st.cur = c;
                st.pos = st.pos.wrapping_add(1);
                0
            }
            Ok(None) => libc::ENOENT,
            Err(e) => e.errno(),
        }
    }

    /// `ibv_next_poll`: 0 with the next completion current, `ENOENT` when there is none (yet),
    /// `EIO` for a corrupt ring. The lock stays held either way (`end_poll` releases it).
    ///
    /// # Safety
    /// The calling thread must be inside a batch: `start_poll` returned 0 and `end_poll` has
    /// not been called.
    pub unsafe fn next_poll(&self) -> c_int {
        // SAFETY: the batch holds the lock (contract).
        Self::advance(unsafe { self.st() })
    }

    /// `ibv_end_poll`: releases the completions read in the batch to the kernel, then the lock.
    ///
    /// # Safety
    /// As [`CqCore::next_poll`].
    pub unsafe fn end_poll(&self) {
        // SAFETY: the batch holds the lock (contract).
        let st = unsafe { self.st() };
        if let Some(ring) = &st.ring {
            ring.release_to(st.pos);
        }
        // SAFETY: held since `start_poll` (contract).
        unsafe { self.lock.unlock() };
    }

    /// The current completion of the batch.
    ///
    /// # Safety
    /// As [`CqCore::next_poll`].
    pub unsafe fn current(&self) -> Cqe {
        // SAFETY: the batch holds the lock (contract).
        unsafe { self.st() }.cur
    }

    /// `resize_cq`: runs `f` (the `RESIZE_CQ` command and the mapping of the new ring) with the
    /// lock held, then installs the new ring and drops (unmaps) the old one only once the new
    /// one is in place. Returns 0 or a positive errno:
    /// * [`Resize::Refused`]: the error; the old ring keeps working;
    /// * [`Resize::Lost`]: the error; the CQ is marked broken (every poll fails with it) until
    ///   a later resize succeeds, rather than silently never completing.
    pub fn resize(&self, f: impl FnOnce() -> Resize) -> c_int {
        self.with(|st| match f() {
            Resize::Refused(e) => e,
            Resize::Mapped(Some(new)) => {
                let old = st.ring.replace(new);
                st.broken = 0;
                drop(old);
                0
            }
            Resize::Mapped(None) if st.ring.is_none() => 0,
            Resize::Mapped(None) => {
                st.ring = None;
                st.broken = libc::EPROTO;
                libc::EPROTO
            }
            Resize::Lost(e) => {
                st.ring = None;
                st.broken = e;
                e
            }
        })
    }
}

/// Maps the ring the kernel announced; `None` when it announced none.
fn map_ring(ctx: *mut ibv_context, r: &rrxe_uapi::CreateCqResp) -> Result<Option<CqRing>, c_int> {
    if r.ring.bytes == 0 {
        return Ok(None);
    }
    // SAFETY: `ctx` is a live context of ours; `cmd_fd` is its uverbs file.
    let fd = unsafe { (*ctx).cmd_fd };
    let len = usize::try_from(r.ring.bytes).map_err(|_| libc::EINVAL)?;
    let m = Mapping::map_shared(fd, r.ring.mmap_key, len)?;
    let ring = CqRing::from_mapping(m, &r.ring).map_err(|e| e.errno())?;
    Ok(Some(ring))
}

impl RrxeCq {
    /// The `ibv_cq` inside `cq`.
    fn ibv_cq(cq: &CBox<RrxeCq>) -> *mut ibv_cq {
        // SAFETY: only computes a field address inside the live allocation (union field
        // `cq` at offset 0; `ManuallyDrop<ibv_cq>` is `repr(transparent)`).
        unsafe { (&raw mut (*cq.as_ptr()).vcq.cq).cast() }
    }

    /// The lock and ring of a CQ of ours.
    ///
    /// # Safety
    /// `cq` must be a live CQ made by this module (offset 0 of an `RrxeCq`).
    unsafe fn core<'a>(cq: *mut ibv_cq) -> &'a CqCore {
        // SAFETY: contract; `core` is set before the CQ is handed out and freed only with it.
        unsafe { &*(*cq.cast::<RrxeCq>()).core }
    }
}

/// The common create path: `ibv_cmd_create_cq` (ioctl `CQ_CREATE`, write() `CREATE_CQ`
/// fallback), then the ring is mapped. `need_ring`: fail (`EOPNOTSUPP`) when the kernel
/// announced none. Returns the CQ still owned, or sets `errno` and returns `None`.
///
/// # Safety
/// `ctx` a context of ours; `channel` valid or null.
unsafe fn create_common(
    what: &str,
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    need_ring: bool,
) -> Option<CBox<RrxeCq>> {
    let Some(cq) = CBox::<RrxeCq>::new_zeroed() else {
        set_errno(libc::ENOMEM);
        return None;
    };
    let mut cmd = rrxe_create_cq::default();
    let mut resp = rrxe_create_cq_resp::default();
    // SAFETY: `ctx`/`channel` as received from libibverbs; the CQ is a live zeroed object;
    // `cmd`/`resp` are writable buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_cq(
            ctx,
            cqe,
            channel,
            comp_vector,
            RrxeCq::ibv_cq(&cq),
            (&raw mut cmd).cast(),
            size_of_val(&cmd),
            (&raw mut resp).cast(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        trace!("{what}(cqe {cqe}, vector {comp_vector}) = {ret}");
        set_errno(cmd_errno(ret));
        return None;
    }
    let ring = match map_ring(ctx, &resp.drv_payload) {
        Ok(None) if need_ring => Err(libc::EOPNOTSUPP),
        other => other,
    };
    match ring {
        Ok(ring) => {
            // SAFETY: `cq` is ours until handed out.
            unsafe { (*cq.as_ptr()).core = Box::into_raw(Box::new(CqCore::new(ring))) };
        }
        Err(e) => {
            trace!("{what}: mapping the ring failed: {e}");
            // SAFETY: the kernel CQ exists; destroy it again, then report the mapping error.
            unsafe { ibv_cmd_destroy_cq(RrxeCq::ibv_cq(&cq)) };
            set_errno(e);
            return None;
        }
    }
    let p = RrxeCq::ibv_cq(&cq);
    // SAFETY: `p` is live and filled by the helper.
    let (handle, got) = unsafe { ((*p).handle, (*p).cqe) };
    trace!("{what}(cqe {cqe}, vector {comp_vector}) = {p:p} (handle {handle}, cqe {got})");
    Some(cq)
}

/// A CQ of ours with no kernel object behind it (context set, handle 0), for tests; free
/// with [`free_cq`].
#[cfg(test)]
pub(crate) fn test_cq(ctx: *mut ibv_context, ring: Option<CqRing>) -> *mut ibv_cq {
    let cq = CBox::<RrxeCq>::new_zeroed().expect("calloc");
    // SAFETY: `cq` is ours; the `ibv_cq` view is at offset 0.
    unsafe {
        (*cq.as_ptr()).core = Box::into_raw(Box::new(CqCore::new(ring)));
        (*RrxeCq::ibv_cq(&cq)).context = ctx;
    }
    cq.into_raw().cast()
}

/// `verbs_context_ops::create_cq`: `ibv_cmd_create_cq` (ioctl `CQ_CREATE`, write()
/// `CREATE_CQ` fallback). libibverbs (`ibv_create_cq`) then initialises the channel,
/// `cq_context`, event counters, mutex and cond.
///
/// # Safety
/// Called by libibverbs only, with a context of ours and a valid (or null) channel.
pub unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: forwarded contract.
    match unsafe { create_common("create_cq", ctx, cqe, channel, comp_vector, false) } {
        Some(cq) => cq.into_raw().cast(),
        None => ptr::null_mut(),
    }
}

/// `verbs_context_ops::create_cq_ex` (`ibv_create_cq_ex`): the same kernel object as
/// `create_cq` (`CQ_CREATE` without flags), plus the `ibv_cq_ex` polling callbacks over the
/// ring. `wc_flags` beyond the standard fields (completion timestamps: there is no clock the
/// completion could honestly be stamped with; CVLAN, flow tag, TM info), `comp_mask` with a
/// parent domain, and create flags other than `SINGLE_THREADED` (a hint) fail with
/// `EOPNOTSUPP` before any kernel call ([`check_create_cq_ex`]). All standard `read_*` are
/// set whatever `wc_flags` asked for. libibverbs then initialises the channel, context,
/// counters, mutex and cond, as for `create_cq`.
///
/// # Safety
/// Called by libibverbs only, with a context of ours and a valid `attr`.
pub unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: `attr` is valid (libibverbs' contract).
    let a = unsafe { &*attr };
    let flags = if a.comp_mask & crate::abi::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        a.flags
    } else {
        0
    };
    if let Err(e) = check_create_cq_ex(a.wc_flags, a.comp_mask, flags) {
        trace!(
            "create_cq_ex(wc_flags {:#x}, comp_mask {:#x}, flags {flags:#x}) = {e}",
            a.wc_flags,
            a.comp_mask
        );
        set_errno(e);
        return ptr::null_mut();
    }
    let (Ok(cqe), Ok(vector)) = (c_int::try_from(a.cqe), c_int::try_from(a.comp_vector)) else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    // SAFETY: forwarded contract.
    let Some(cq) = (unsafe { create_common("create_cq_ex", ctx, cqe, a.channel, vector, true) })
    else {
        return ptr::null_mut();
    };
    // SAFETY: `cq` is ours and not shared yet.
    unsafe { install_ex(cq.as_ptr()) };
    cq.into_raw().cast()
}

/// Fills the `ibv_cq_ex` polling callbacks of `cq`.
///
/// # Safety
/// `cq` a live CQ of ours that no other thread uses yet.
pub(crate) unsafe fn install_ex(cq: *mut RrxeCq) {
    // SAFETY: contract; the `ibv_cq_ex` view of the union covers the whole object.
    let x = unsafe { &mut *(&raw mut (*cq).vcq.cq_ex).cast::<ibv_cq_ex>() };
    x.start_poll = Some(ex_start_poll);
    x.next_poll = Some(ex_next_poll);
    x.end_poll = Some(ex_end_poll);
    x.read_opcode = Some(ex_read_opcode);
    x.read_vendor_err = Some(ex_read_vendor_err);
    x.read_byte_len = Some(ex_read_byte_len);
    x.read_imm_data = Some(ex_read_imm_data);
    x.read_qp_num = Some(ex_read_qp_num);
    x.read_src_qp = Some(ex_read_src_qp);
    x.read_wc_flags = Some(ex_read_wc_flags);
    x.read_slid = Some(ex_read_slid);
    x.read_sl = Some(ex_read_sl);
    x.read_dlid_path_bits = Some(ex_read_dlid_path_bits);
}

/// Sets `status`/`wr_id` of the `ibv_cq_ex` from the current completion.
///
/// # Safety
/// `cq` a CQ of ours inside a polling batch.
unsafe fn publish_current(cq: *mut ibv_cq_ex) {
    // SAFETY: contract.
    unsafe {
        let c = RrxeCq::core(cq.cast()).current();
        (*cq).status = c.status;
        (*cq).wr_id = c.wr_id;
    }
}

/// `ibv_cq_ex::start_poll`. `attr->comp_mask` must be 0 (`EINVAL`).
///
/// # Safety
/// Called by applications with a CQ from [`create_cq_ex`] and a valid `attr`.
unsafe extern "C" fn ex_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: `attr` is valid or NULL (contract).
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: `cq` is a CQ of ours (contract).
    let core = unsafe { RrxeCq::core(cq.cast()) };
    let r = core.start_poll();
    if r == 0 {
        // SAFETY: the batch started.
        unsafe { publish_current(cq) };
    }
    r
}

/// `ibv_cq_ex::next_poll`.
///
/// # Safety
/// Called by applications inside a batch on a CQ from [`create_cq_ex`].
unsafe extern "C" fn ex_next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: contract.
    let r = unsafe { RrxeCq::core(cq.cast()).next_poll() };
    if r == 0 {
        // SAFETY: inside the batch.
        unsafe { publish_current(cq) };
    }
    r
}

/// `ibv_cq_ex::end_poll`.
///
/// # Safety
/// Called by applications to end a batch on a CQ from [`create_cq_ex`].
unsafe extern "C" fn ex_end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: contract.
    unsafe { RrxeCq::core(cq.cast()).end_poll() }
}

/// The `read_*` callbacks: one field of the current completion.
macro_rules! ex_readers {
    ($($name:ident -> $ty:ty = |$c:ident| $e:expr;)*) => {$(
        #[doc = concat!("`ibv_cq_ex::", stringify!($name), "` (without the `ex_` prefix).")]
        ///
        /// # Safety
        /// Called by applications inside a batch on a CQ from [`create_cq_ex`].
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $ty {
            // SAFETY: contract.
            let $c = unsafe { RrxeCq::core(cq.cast()).current() };
            $e
        }
    )*};
}

ex_readers! {
    ex_read_opcode -> ibv_wc_opcode = |c| c.opcode;
    ex_read_vendor_err -> u32 = |c| c.vendor_err;
    ex_read_byte_len -> u32 = |c| c.byte_len;
    ex_read_imm_data -> u32 = |c| c.imm_data;
    ex_read_qp_num -> u32 = |c| c.qp_num;
    ex_read_src_qp -> u32 = |c| c.src_qp;
    ex_read_wc_flags -> core::ffi::c_uint = |c| c.wc_flags;
    ex_read_slid -> u32 = |c| u32::from(c.slid);
    ex_read_sl -> u8 = |c| c.sl;
    ex_read_dlid_path_bits -> u8 = |c| c.dlid_path_bits;
}

/// `verbs_context_ops::resize_cq`: `ibv_cmd_resize_cq` (`RESIZE_CQ`, which updates
/// `cq->cqe`), under the CQ lock ([`CqCore::resize`]): the old ring stays mapped until the new
/// one is; a kernel refusal keeps the old ring working; a new ring that cannot be mapped
/// marks the CQ broken (polls fail with that errno) and returns the error.
///
/// # Safety
/// Called by libibverbs only, with a CQ made by [`create_cq`] or [`create_cq_ex`].
pub unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: `cq` is a live CQ of ours.
    let core = unsafe { RrxeCq::core(cq) };
    let ret = core.resize(|| {
        let mut cmd = rrxe_resize_cq::default();
        let mut resp = rrxe_resize_cq_resp::default();
        // SAFETY: `cq` is a live CQ of ours; `cmd`/`resp` are writable buffers of the sizes
        // passed.
        let ret = unsafe {
            ibv_cmd_resize_cq(
                cq,
                cqe,
                (&raw mut cmd).cast(),
                size_of_val(&cmd),
                (&raw mut resp).cast(),
                size_of_val(&resp),
            )
        };
        if ret != 0 {
            return Resize::Refused(cmd_errno(ret));
        }
        // SAFETY: `cq` is live; its context is ours.
        match map_ring(unsafe { (*cq).context }, &resp.drv_payload) {
            Ok(r) => Resize::Mapped(r),
            Err(e) => Resize::Lost(e),
        }
    });
    trace!("resize_cq({cq:p}, {cqe}) = {ret}");
    ret
}

/// `verbs_context_ops::destroy_cq`: `ibv_cmd_destroy_cq` (which also waits for the
/// application to acknowledge the CQ's events), then frees the CQ (kept on failure).
///
/// # Safety
/// Called by libibverbs only, with a CQ made by [`create_cq`] or [`create_cq_ex`].
pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: `cq` is a live CQ of ours.
    let ret = unsafe { ibv_cmd_destroy_cq(cq) };
    trace!("destroy_cq({cq:p}) = {ret}");
    if ret == 0 {
        // SAFETY: the kernel object is gone; `cq` is the `RrxeCq` from `create_cq[_ex]`
        // (offset 0) and libibverbs does not use it after a successful destroy.
        unsafe { free_cq(cq.cast()) };
    }
    ret
}

/// Frees a CQ object whose kernel object is gone (or was never handed out).
///
/// # Safety
/// `rc` from `CBox::<RrxeCq>::into_raw`, its `core` null or from `Box::into_raw`; nothing may
/// use either afterwards.
pub(crate) unsafe fn free_cq(rc: *mut RrxeCq) {
    // SAFETY: contract.
    unsafe {
        let core = core::mem::replace(&mut (*rc).core, ptr::null_mut());
        if !core.is_null() {
            drop(Box::from_raw(core));
        }
        drop(CBox::from_raw(rc));
    }
}

/// `verbs_context_ops::poll_cq` (copied into `ibv_context.ops`): the ring under the CQ lock
/// (no syscall), or `ibv_cmd_poll_cq` (`POLL_CQ`) for a CQ without a ring. Returns the number
/// of completions, or a negative errno (`-EIO` corrupt ring, `-EINVAL` NULL `wc`, or the
/// errno of a resize that lost the ring).
///
/// # Safety
/// Called by libibverbs/applications only, with a CQ of ours and `wc` valid for
/// `num_entries` entries.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    let Ok(n) = usize::try_from(num_entries) else {
        return 0;
    };
    if n == 0 {
        return 0;
    }
    if wc.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: `wc` is valid for writing `n` entries (contract), possibly uninitialized.
    let out = unsafe { core::slice::from_raw_parts_mut(wc.cast::<MaybeUninit<ibv_wc>>(), n) };
    // SAFETY: `cq` is a live CQ of ours.
    match unsafe { RrxeCq::core(cq) }.poll(out) {
        // `got <= n`, so it fits.
        Ok(Some(got)) => c_int::try_from(got).unwrap_or(num_entries),
        Ok(None) => {
            // SAFETY: arguments as received; the helper writes at most `num_entries` entries.
            let n = unsafe { ibv_cmd_poll_cq(cq, num_entries, wc) };
            if n < 0 {
                trace!("poll_cq({cq:p}, {num_entries}) = {n}");
            }
            n
        }
        Err(e) => -e,
    }
}

/// `verbs_context_ops::req_notify_cq` (copied into `ibv_context.ops`):
/// `ibv_cmd_req_notify_cq` (`REQ_NOTIFY_CQ`).
///
/// # Safety
/// Called by libibverbs/applications only, with a CQ of ours.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: `cq` is a live CQ of ours.
    let ret = unsafe { ibv_cmd_req_notify_cq(cq, solicited_only) };
    trace!("req_notify_cq({cq:p}, solicited_only {solicited_only}) = {ret}");
    ret
}
