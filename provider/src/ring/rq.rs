//! The receive ring (RQ or SRQ): `post_recv` produces [`RecvWqe`]s plus SGEs, the kernel
//! consumes them. No syscall: the kernel looks at the ring when a message arrives.

use core::ffi::c_int;
use core::mem::size_of;
use core::sync::atomic::Ordering;
use std::sync::Mutex;

use rrxe_uapi::{recv_slot_size, RecvWqe, RingInfo, Sge};

use super::mem::{Geometry, Mapping, Ring};
use super::sq::{free_slots, sge_slice};
use super::{lock, RingError};
use crate::abi::ibv_recv_wr;

/// The producer side of a receive ring (a QP's RQ or an SRQ).
#[derive(Debug)]
pub struct RqRing {
    inner: Mutex<RqInner>,
    max_sge: u32,
    /// WQEs the ring may hold at once (`max_recv_wr` / SRQ `max_wr`); at most `slots`.
    max_wr: u32,
}

#[derive(Debug)]
struct RqInner {
    ring: Ring,
    /// Our producer index (the copy in the mapping is only ever written from this).
    producer: u32,
}

/// The body offset inside a slot.
const BODY: usize = size_of::<RecvWqe>();

impl RqRing {
    fn geometry(info: &RingInfo, max_sge: u32) -> Geometry {
        Geometry {
            slots: info.slots,
            slot_size: info.slot_size,
            min_slot_size: BODY as u64 + u64::from(max_sge) * size_of::<Sge>() as u64,
        }
    }

    fn new(ring: Ring, max_sge: u32) -> RqRing {
        let producer = ring.producer().load(Ordering::Relaxed);
        let max_wr = ring.slots();
        RqRing {
            inner: Mutex::new(RqInner { ring, producer }),
            max_sge,
            max_wr,
        }
    }

    /// The receive ring in `m` ([`rrxe_uapi::CreateQpResp::rq`] or
    /// [`rrxe_uapi::CreateSrqResp::rq`] mapped), which it owns from now on; `max_sge` is the
    /// `max_recv_sge` (or SRQ `max_sge`) the kernel answered.
    pub fn from_mapping(m: Mapping, info: &RingInfo, max_sge: u32) -> Result<RqRing, RingError> {
        Ok(RqRing::new(
            Ring::from_mapping(m, RqRing::geometry(info, max_sge))?,
            max_sge,
        ))
    }

    /// The receive ring at `base`, `len` bytes.
    ///
    /// # Safety
    /// As `Ring::from_raw`: `base` valid for reads and writes of `len` bytes for the lifetime
    /// of the returned object, accessed by this process only through it, header indices only
    /// atomically.
    pub unsafe fn from_raw(
        base: *mut u8,
        len: usize,
        info: &RingInfo,
        max_sge: u32,
    ) -> Result<RqRing, RingError> {
        let geo = RqRing::geometry(info, max_sge);
        // SAFETY: forwarded contract.
        Ok(RqRing::new(
            unsafe { Ring::from_raw(base, len, geo)? },
            max_sge,
        ))
    }

    /// The SGE limit WRs are checked against.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Bounds the receive WQEs outstanding (posted, not yet taken by an incoming message) to
    /// `max_wr` (the `max_recv_wr` or SRQ `max_wr` the kernel answered; by default the slot
    /// count): a post beyond it fails with `ENOMEM`. `Invalid` when `max_wr` exceeds the slots.
    pub fn set_max_wr(&mut self, max_wr: u32) -> Result<(), RingError> {
        if max_wr > lock(&self.inner).ring.slots() {
            return Err(RingError::Invalid("max_wr above the ring's slots"));
        }
        self.max_wr = max_wr;
        Ok(())
    }

    /// The bound set by [`RqRing::set_max_wr`].
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// The slot size `rrxe_uapi` computes for `max_sge` (what the kernel should answer).
    pub fn expected_slot_size(max_sge: u32) -> usize {
        recv_slot_size(max_sge)
    }

    /// `verbs_context_ops::post_recv` / `post_srq_recv` over the ring.
    ///
    /// Writes the WRs of the list `wr` in order until one fails (`EINVAL`: negative
    /// `num_sge`, more than `max_sge`, or a NULL `sg_list` with entries; `ENOMEM`: `max_wr` WQEs outstanding;
    /// `EIO`: the kernel's consumer index is out of range); then `*bad_wr` is that WR (if
    /// `bad_wr` is not NULL) and its errno is returned, the WRs before it being posted. The
    /// producer index is published once, with a release store. No syscall.
    ///
    /// # Safety
    /// `wr` must be NULL or a valid `ibv_recv_wr` list (the `ibv_post_recv` contract), each
    /// `sg_list` valid for `num_sge` entries. `bad_wr` must be NULL or valid for writing.
    pub unsafe fn post_recv(
        &self,
        mut wr: *mut ibv_recv_wr,
        bad_wr: *mut *mut ibv_recv_wr,
    ) -> c_int {
        let mut g = lock(&self.inner);
        let RqInner { ring, producer } = &mut *g;
        let mut prod = *producer;
        let mut free = 0u32;
        let mut failed = None;
        while !wr.is_null() {
            // SAFETY: `wr` is a valid element of the list (contract).
            let w = unsafe { &*wr };
            // SAFETY: `w.sg_list` is valid for `num_sge` entries (contract).
            let res = unsafe { self.check(w) }.and_then(|sges| {
                if free == 0 {
                    free = free_slots(ring, prod, self.max_wr)?;
                    if free == 0 {
                        return Err(RingError::Full);
                    }
                }
                let hdr = RecvWqe {
                    wr_id: w.wr_id,
                    num_sge: sges.len() as u32,
                    reserved: 0,
                };
                ring.write(prod, 0, &hdr)?;
                for (i, s) in sges.iter().enumerate() {
                    let sge = Sge {
                        addr: s.addr,
                        length: s.length,
                        lkey: s.lkey,
                    };
                    ring.write(prod, BODY + i * size_of::<Sge>(), &sge)?;
                }
                Ok(())
            });
            if let Err(e) = res {
                failed = Some((e, wr));
                break;
            }
            prod = prod.wrapping_add(1);
            free -= 1;
            wr = w.next;
        }
        if prod != *producer {
            *producer = prod;
            ring.producer().store(prod, Ordering::Release);
        }
        drop(g);
        match failed {
            Some((e, at)) => {
                if !bad_wr.is_null() {
                    // SAFETY: `bad_wr` is valid for writing (contract).
                    unsafe { *bad_wr = at };
                }
                e.errno()
            }
            None => 0,
        }
    }

    /// Checks one WR and returns its SGEs.
    ///
    /// # Safety
    /// A non-NULL `w.sg_list` must be valid for `w.num_sge` entries.
    unsafe fn check<'a>(&self, w: &'a ibv_recv_wr) -> Result<&'a [crate::abi::ibv_sge], RingError> {
        if u32::try_from(w.num_sge).is_ok_and(|n| n > self.max_sge) {
            return Err(RingError::Invalid("num_sge above the queue's max_recv_sge"));
        }
        // SAFETY: forwarded contract.
        unsafe { sge_slice(w.sg_list, w.num_sge) }
    }
}
