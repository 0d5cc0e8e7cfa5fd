//! The completion ring: the kernel produces [`Cqe`]s, `poll_cq` consumes them without a
//! syscall.

use core::ffi::c_int;
use core::mem::{size_of, MaybeUninit};
use core::sync::atomic::Ordering;
use std::sync::Mutex;

use rrxe_uapi::{Cqe, RingInfo, CQE_SIZE};

use super::mem::{Geometry, Mapping, Ring};
use super::wqe::cqe_to_wc;
use super::{lock, RingError};
use crate::abi::ibv_wc;

/// The consumer side of a CQ ring. `poll` may be called from several threads (one at a time
/// gets the lock, like rdma-core's per-CQ spinlock).
#[derive(Debug)]
pub struct CqRing {
    inner: Mutex<CqInner>,
}

#[derive(Debug)]
struct CqInner {
    ring: Ring,
    /// Our consumer index (the copy in the mapping is only ever written from this).
    consumer: u32,
}

impl CqRing {
    fn geometry(info: &RingInfo) -> Geometry {
        Geometry {
            slots: info.slots,
            slot_size: info.slot_size,
            min_slot_size: CQE_SIZE as u64,
        }
    }

    fn new(ring: Ring) -> Result<CqRing, RingError> {
        if ring.slot_size() as usize != CQE_SIZE {
            return Err(RingError::Invalid("CQ slot size is not CQE_SIZE"));
        }
        let consumer = ring.consumer().load(Ordering::Relaxed);
        Ok(CqRing {
            inner: Mutex::new(CqInner { ring, consumer }),
        })
    }

    /// The CQ ring in `m` (`create_cq`'s [`rrxe_uapi::CreateCqResp::ring`] mapped), which it
    /// owns from now on. `EINVAL`-class errors when the geometry does not match `info`.
    pub fn from_mapping(m: Mapping, info: &RingInfo) -> Result<CqRing, RingError> {
        CqRing::new(Ring::from_mapping(m, CqRing::geometry(info))?)
    }

    /// The CQ ring at `base`, `len` bytes.
    ///
    /// # Safety
    /// As `Ring::from_raw`: `base` valid for reads and writes of `len` bytes for the lifetime
    /// of the returned object, accessed by this process only through it, header indices only
    /// atomically.
    pub unsafe fn from_raw(
        base: *mut u8,
        len: usize,
        info: &RingInfo,
    ) -> Result<CqRing, RingError> {
        // SAFETY: forwarded contract.
        CqRing::new(unsafe { Ring::from_raw(base, len, CqRing::geometry(info))? })
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        lock(&self.inner).ring.slots()
    }

    /// Moves up to `out.len()` completions, oldest first, into `out` (as `ibv_wc`), then
    /// releases their slots to the kernel with one release store of the consumer index.
    /// Returns how many were written: `min(out.len(), available)`. `Corrupt` if the kernel's
    /// producer index is more than `slots` ahead of ours, or behind it (nothing is read then).
    pub fn poll(&self, out: &mut [MaybeUninit<ibv_wc>]) -> Result<usize, RingError> {
        let mut g = lock(&self.inner);
        let CqInner { ring, consumer } = &mut *g;
        let producer = ring.producer().load(Ordering::Acquire);
        let avail = producer.wrapping_sub(*consumer);
        if avail > ring.slots() {
            return Err(RingError::Corrupt);
        }
        let n = out.len().min(avail as usize);
        let mut cons = *consumer;
        for slot in &mut out[..n] {
            let cqe: Cqe = ring.read(cons, 0).ok_or(RingError::Corrupt)?;
            slot.write(cqe_to_wc(&cqe));
            cons = cons.wrapping_add(1);
        }
        if n != 0 {
            *consumer = cons;
            ring.consumer().store(cons, Ordering::Release);
        }
        Ok(n)
    }

    /// Our consumer index: the next completion [`CqRing::peek`] can return.
    pub fn consumer(&self) -> u32 {
        lock(&self.inner).consumer
    }

    /// A copy of the completion at `pos` (our consumer index plus the number already peeked
    /// in this polling batch), or `None` when the kernel has not produced it yet. Nothing is
    /// released: [`CqRing::release_to`] does that. `Corrupt` as in [`CqRing::poll`], and when
    /// `pos` lies outside the produced range.
    pub fn peek(&self, pos: u32) -> Result<Option<Cqe>, RingError> {
        let mut g = lock(&self.inner);
        let CqInner { ring, consumer } = &mut *g;
        let producer = ring.producer().load(Ordering::Acquire);
        let avail = producer.wrapping_sub(*consumer);
        if avail > ring.slots() {
            return Err(RingError::Corrupt);
        }
        let ahead = pos.wrapping_sub(*consumer);
        if ahead > avail {
            return Err(RingError::Corrupt);
        }
        if ahead == avail {
            return Ok(None);
        }
        ring.read(pos, 0).map(Some).ok_or(RingError::Corrupt)
    }

    /// Releases the slots before `pos` (completions copied out with [`CqRing::peek`]) to the
    /// kernel with one release store of the consumer index. A `pos` behind our consumer index
    /// or beyond the produced range is ignored.
    pub fn release_to(&self, pos: u32) {
        let mut g = lock(&self.inner);
        let CqInner { ring, consumer } = &mut *g;
        let producer = ring.producer().load(Ordering::Acquire);
        let ahead = pos.wrapping_sub(*consumer);
        if ahead == 0 || ahead > producer.wrapping_sub(*consumer) || ahead > ring.slots() {
            return;
        }
        *consumer = pos;
        ring.consumer().store(pos, Ordering::Release);
    }

    /// `verbs_context_ops::poll_cq` over the ring: `ne <= 0` polls nothing and returns 0; else
    /// the number of completions written to `wc`, or a negative errno (`-EIO` for a corrupt
    /// ring, `-EINVAL` for a NULL `wc`), as libibverbs' own `ibv_cmd_poll_cq` reports errors.
    ///
    /// # Safety
    /// `wc` must be NULL or valid for writing `ne` `ibv_wc`s (the `ibv_poll_cq` contract).
    pub unsafe fn poll_raw(&self, ne: c_int, wc: *mut ibv_wc) -> c_int {
        let Ok(n) = usize::try_from(ne) else {
            return 0;
        };
        if n == 0 {
            return 0;
        }
        if wc.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: `wc` is valid for writing `n` entries (this function's contract); the
        // entries may be uninitialized, hence `MaybeUninit`, which has `ibv_wc`'s layout.
        let out = unsafe { core::slice::from_raw_parts_mut(wc.cast::<MaybeUninit<ibv_wc>>(), n) };
        match self.poll(out) {
            // `got <= ne`, so it fits.
            Ok(got) => c_int::try_from(got).unwrap_or(ne),
            Err(e) => -e.errno(),
        }
    }
}

const _: () = assert!(size_of::<Cqe>() == CQE_SIZE);
