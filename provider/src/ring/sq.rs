//! The send ring: `post_send` produces [`SendWqe`]s (plus SGEs or inline bytes), the kernel
//! consumes them; at most one doorbell per call (see the module docs for the protocol).

use core::ffi::c_int;
use core::mem::size_of;
use core::sync::atomic::{fence, Ordering};
use std::sync::Mutex;

use rrxe_uapi::{send_slot_size, RingInfo, SendWqe, Sge, SQ_FLAG_KERNEL_BUSY};

use super::mem::{Geometry, Mapping, Ring};
use super::wqe::{
    bind_wqe, check_atomic, check_atomic_write, check_inline_len, check_send_scalars, has_imm,
    has_inv, Bind, Remote,
};
use super::{lock, RingError};
use crate::abi::{
    ibv_ah, ibv_send_wr, ibv_sge, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_SEND_INLINE,
};

/// What the QP was created with (the caps the kernel answered `create_qp` with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqCaps {
    /// `IBV_QPT_RC`, `IBV_QPT_UC` or `IBV_QPT_UD`.
    pub qp_type: u32,
    /// `cap.max_send_sge`.
    pub max_sge: u32,
    /// `cap.max_inline_data`.
    pub max_inline: u32,
}

/// What `post_send` needs from the QP around the ring.
pub trait SendHooks {
    /// The [`rrxe_uapi::CreateAhResp::ah_num`] of a UD WR's address handle, or `None` (NULL
    /// or not an AH of this provider): the WR then fails with `EINVAL`.
    ///
    /// # Safety
    /// `ah` is the `wr.ud.ah` of a WR being posted: NULL or a live `ibv_ah` (the
    /// `ibv_post_send` contract), which the implementation may read.
    unsafe fn ah_num(&mut self, ah: *mut ibv_ah) -> Option<u32>;

    /// Tells the kernel the ring has new WQEs: `write()` of `IB_USER_VERBS_CMD_POST_SEND` with
    /// `wr_count == 0`. Returns 0 or a positive errno. Called at most once per `post_send`,
    /// after the ring's lock is released.
    fn doorbell(&mut self) -> c_int;
}

/// The producer side of a send ring.
#[derive(Debug)]
pub struct SqRing {
    inner: Mutex<SqInner>,
    caps: SqCaps,
    /// WQEs the ring may hold at once (`max_send_wr`); at most `slots`.
    max_wr: u32,
}

#[derive(Debug)]
struct SqInner {
    ring: Ring,
    /// Our producer index (the copy in the mapping is only ever written from this).
    producer: u32,
}

/// Header of the WQE, and where its body comes from.
struct Encoded<'a> {
    hdr: SendWqe,
    sges: &'a [ibv_sge],
    inline: bool,
}

/// The body offset inside a slot.
const BODY: usize = size_of::<SendWqe>();

impl SqRing {
    fn geometry(info: &RingInfo, caps: &SqCaps) -> Result<Geometry, RingError> {
        if !matches!(caps.qp_type, IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD) {
            return Err(RingError::Invalid("send ring for an unsupported QP type"));
        }
        let body = (u64::from(caps.max_sge) * size_of::<Sge>() as u64).max(caps.max_inline.into());
        Ok(Geometry {
            slots: info.slots,
            slot_size: info.slot_size,
            min_slot_size: BODY as u64 + body,
        })
    }

    fn new(ring: Ring, caps: SqCaps) -> SqRing {
        let producer = ring.producer().load(Ordering::Relaxed);
        let max_wr = ring.slots();
        SqRing {
            inner: Mutex::new(SqInner { ring, producer }),
            caps,
            max_wr,
        }
    }

    /// The send ring in `m` ([`rrxe_uapi::CreateQpResp::sq`] mapped), which it owns from now
    /// on. The slot must hold a [`SendWqe`] plus `max(max_sge SGEs, max_inline bytes)`.
    pub fn from_mapping(m: Mapping, info: &RingInfo, caps: SqCaps) -> Result<SqRing, RingError> {
        let geo = SqRing::geometry(info, &caps)?;
        Ok(SqRing::new(Ring::from_mapping(m, geo)?, caps))
    }

    /// The send ring at `base`, `len` bytes.
    ///
    /// # Safety
    /// As `Ring::from_raw`: `base` valid for reads and writes of `len` bytes for the lifetime
    /// of the returned object, accessed by this process only through it, header indices only
    /// atomically.
    pub unsafe fn from_raw(
        base: *mut u8,
        len: usize,
        info: &RingInfo,
        caps: SqCaps,
    ) -> Result<SqRing, RingError> {
        let geo = SqRing::geometry(info, &caps)?;
        // SAFETY: forwarded contract.
        Ok(SqRing::new(
            unsafe { Ring::from_raw(base, len, geo)? },
            caps,
        ))
    }

    /// The caps WRs are checked against.
    pub fn caps(&self) -> SqCaps {
        self.caps
    }

    /// Bounds the WQEs in the ring to `max_wr` (the `max_send_wr` the kernel answered; by
    /// default the slot count): a post that would leave more than `max_wr` WQEs not yet taken
    /// by the kernel fails with `ENOMEM`. `Invalid` when `max_wr` exceeds the slots.
    pub fn set_max_wr(&mut self, max_wr: u32) -> Result<(), RingError> {
        if max_wr > lock(&self.inner).ring.slots() {
            return Err(RingError::Invalid("max_send_wr above the ring's slots"));
        }
        self.max_wr = max_wr;
        Ok(())
    }

    /// The bound set by [`SqRing::set_max_wr`].
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// The slot size `rrxe_uapi` computes for these caps (what the kernel should answer).
    pub fn expected_slot_size(caps: &SqCaps) -> usize {
        send_slot_size(caps.max_sge, caps.max_inline)
    }

    /// `verbs_context_ops::post_send` over the ring.
    ///
    /// Writes the WRs of the list `wr` in order until one fails: `EINVAL` when its opcode is
    /// not allowed on this QP type, it has a send flag other than FENCE/SIGNALED/SOLICITED/
    /// INLINE, a negative `num_sge` or (not inline) more than `max_sge`, an inline payload
    /// above `max_inline` or an inline READ/atomic, an unaligned atomic or one under 8 bytes,
    /// a NULL `sg_list` with `num_sge > 0`, or (UD) an AH `ah_num` does not know; `ENOMEM`
    /// when the ring is full; `EIO` when the kernel's consumer index is out of range. Then
    /// `*bad_wr` is that WR (if `bad_wr` is not NULL) and its errno is returned; the WRs before
    /// it are posted.
    ///
    /// Publishes the producer index once, and if at least one WQE was written and the kernel
    /// is not draining ([`SQ_FLAG_KERNEL_BUSY`] clear after a full fence), calls
    /// `hooks.doorbell()` exactly once, after the lock is released. A failed doorbell wins:
    /// its error is returned with `*bad_wr` the first WR of the list, since the kernel was not
    /// told about any WQE of this call (they stay in the ring, and a later doorbell would still
    /// send them; a doorbell only fails when the QP is gone or unusable).
    ///
    /// # Safety
    /// `wr` must be NULL or a valid `ibv_send_wr` list (the `ibv_post_send` contract): each
    /// `sg_list` valid for `num_sge` entries, and for inline WRs each SGE's `addr` readable for
    /// `length` bytes. `bad_wr` must be NULL or valid for writing.
    pub unsafe fn post_send(
        &self,
        wr: *mut ibv_send_wr,
        bad_wr: *mut *mut ibv_send_wr,
        hooks: &mut impl SendHooks,
    ) -> c_int {
        // SAFETY: forwarded contract.
        let (failed, ring) = unsafe { self.produce(wr, hooks) };
        let db = if ring { hooks.doorbell() } else { 0 };
        if db != 0 {
            if !bad_wr.is_null() {
                // SAFETY: `bad_wr` is valid for writing (contract).
                unsafe { *bad_wr = wr };
            }
            return db;
        }
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

    /// The `ibv_wr_complete` path: writes every WR of the list `wr` or none. Each WR is
    /// checked as by [`SqRing::post_send`] first; then, if the ring has room for all of them
    /// (else `ENOMEM`), they are written and the producer index is published once, and the
    /// doorbell is rung at most once (after the lock is released). Returns 0, the errno of the
    /// first failing WR (nothing written), or the doorbell's error.
    ///
    /// # Safety
    /// As [`SqRing::post_send`] for `wr`.
    pub unsafe fn post_all(&self, wr: *mut ibv_send_wr, hooks: &mut impl SendHooks) -> c_int {
        // SAFETY: forwarded contract.
        match unsafe { self.produce_all(wr, hooks, false) } {
            Ok(true) => hooks.doorbell(),
            Ok(false) => 0,
            Err(e) => e.errno(),
        }
    }

    /// The Bind MW verb (`ibv_bind_mw`, type-1 windows): posts the one `IBV_WR_BIND_MW` WR
    /// `wr` marked as the verb's ([`rrxe_uapi::bind_flags::VERB`]), as [`SqRing::post_all`].
    ///
    /// # Safety
    /// As [`SqRing::post_send`] for `wr` (a single WR whose `bind_mw.mw` and
    /// `bind_mw.bind_info.mr` are live or NULL).
    pub unsafe fn post_bind_verb(&self, wr: *mut ibv_send_wr, hooks: &mut impl SendHooks) -> c_int {
        // SAFETY: forwarded contract.
        match unsafe { self.produce_all(wr, hooks, true) } {
            Ok(true) => hooks.doorbell(),
            Ok(false) => 0,
            Err(e) => e.errno(),
        }
    }

    /// The locked half of `post_all`: `Ok(ring the doorbell?)`.
    ///
    /// # Safety
    /// As `post_send` for `wr`.
    unsafe fn produce_all(
        &self,
        mut wr: *mut ibv_send_wr,
        hooks: &mut impl SendHooks,
        bind_verb: bool,
    ) -> Result<bool, RingError> {
        let mut encoded = Vec::new();
        while !wr.is_null() {
            // SAFETY: `wr` is a valid element of the list (contract).
            let w = unsafe { &*wr };
            // SAFETY: `w` is a valid WR (contract).
            encoded.push(unsafe { self.encode(w, hooks, bind_verb) }?);
            wr = w.next;
        }
        if encoded.is_empty() {
            return Ok(false);
        }
        let mut g = lock(&self.inner);
        let SqInner { ring, producer } = &mut *g;
        let free = free_slots(ring, *producer, self.max_wr)?;
        if encoded.len() > free as usize {
            return Err(RingError::Full);
        }
        let mut prod = *producer;
        for enc in &encoded {
            // SAFETY: `enc` comes from a WR whose inline sources are readable (contract).
            unsafe { write_wqe(ring, prod, enc) }?;
            prod = prod.wrapping_add(1);
        }
        *producer = prod;
        ring.producer().store(prod, Ordering::Release);
        // As in `produce`.
        fence(Ordering::SeqCst);
        Ok(ring.flags().load(Ordering::Relaxed) & SQ_FLAG_KERNEL_BUSY == 0)
    }

    /// The locked half of `post_send`: writes and publishes, and says whether to ring.
    ///
    /// # Safety
    /// As `post_send` for `wr`.
    unsafe fn produce(
        &self,
        mut wr: *mut ibv_send_wr,
        hooks: &mut impl SendHooks,
    ) -> (Option<(RingError, *mut ibv_send_wr)>, bool) {
        let mut g = lock(&self.inner);
        let SqInner { ring, producer } = &mut *g;
        let start = *producer;
        let mut prod = start;
        let mut free = 0u32;
        let mut failed = None;
        while !wr.is_null() {
            // SAFETY: `wr` is a valid element of the list (contract).
            let w = unsafe { &*wr };
            // SAFETY: `w` is a valid WR (contract).
            let res = unsafe { self.encode(w, hooks, false) }.and_then(|enc| {
                if free == 0 {
                    free = free_slots(ring, prod, self.max_wr)?;
                    if free == 0 {
                        return Err(RingError::Full);
                    }
                }
                // SAFETY: `enc` comes from `w`, whose inline sources are readable (contract).
                unsafe { write_wqe(ring, prod, &enc) }
            });
            if let Err(e) = res {
                failed = Some((e, wr));
                break;
            }
            prod = prod.wrapping_add(1);
            free -= 1;
            wr = w.next;
        }
        if prod == start {
            return (failed, false);
        }
        *producer = prod;
        ring.producer().store(prod, Ordering::Release);
        // Publish, full fence, then look at the kernel's flag: pairs with the kernel's
        // "clear BUSY; smp_mb(); re-read producer" (module docs). Relaxed suffices for the
        // load: the two SeqCst-class fences order it against the other side's store.
        fence(Ordering::SeqCst);
        let busy = ring.flags().load(Ordering::Relaxed) & SQ_FLAG_KERNEL_BUSY != 0;
        (failed, !busy)
    }

    /// Checks one WR and gathers what its WQE needs (no ring access). `bind_verb`: a bind is
    /// the Bind MW verb's.
    ///
    /// # Safety
    /// `w.sg_list` must be valid for `w.num_sge` entries when `num_sge > 0` and the pointer
    /// is not NULL; for an inline WR (and an ATOMIC WRITE, always inline) each SGE's `addr`
    /// must be readable for its `length` bytes; a bind's `bind_mw.mw` and
    /// `bind_mw.bind_info.mr` must be live or NULL.
    unsafe fn encode<'a>(
        &self,
        w: &'a ibv_send_wr,
        hooks: &mut impl SendHooks,
        bind_verb: bool,
    ) -> Result<Encoded<'a>, RingError> {
        let caps = &self.caps;
        let remote = check_send_scalars(
            caps.qp_type,
            caps.max_sge,
            w.opcode,
            w.send_flags,
            w.num_sge,
        )?;
        // SAFETY: forwarded contract.
        let sges = unsafe { sge_slice(w.sg_list, w.num_sge)? };
        let inline = w.send_flags & IBV_SEND_INLINE != 0;
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        let mut hdr = SendWqe {
            wr_id: w.wr_id,
            opcode: w.opcode,
            send_flags: w.send_flags,
            num_sge: if inline { 0 } else { sges.len() as u32 },
            ..SendWqe::default()
        };
        if inline && remote != Remote::AtomicWrite {
            hdr.inline_len = check_inline_len(total, caps.max_inline)?;
        }
        if has_imm(w.opcode) || has_inv(w.opcode) || remote == Remote::Flush {
            // SAFETY: a union of two `u32`s (`imm_data`, `invalidate_rkey`); any bits are valid.
            hdr.imm_data = unsafe { w.__bindgen_anon_1.imm_data };
        }
        match remote {
            Remote::None => {}
            Remote::BindMw => {
                // SAFETY: a union of plain structs (pointers and integers); the bind variant
                // is the one an `IBV_WR_BIND_MW` WR fills.
                let bm = unsafe { w.__bindgen_anon_2.bind_mw };
                if bm.mw.is_null() {
                    return Err(RingError::Invalid("BIND_MW without a window"));
                }
                let info = bm.bind_info;
                let mr_lkey = if info.mr.is_null() {
                    if info.length != 0 {
                        return Err(RingError::Invalid("BIND_MW of a length without an MR"));
                    }
                    0
                } else {
                    // SAFETY: a live MR (contract).
                    unsafe { (*info.mr).lkey }
                };
                let bind = Bind {
                    // SAFETY: a live window (contract).
                    mw_rkey: unsafe { (*bm.mw).rkey },
                    new_rkey: bm.rkey,
                    mr_lkey,
                    addr: info.addr,
                    length: info.length,
                    access: info.mw_access_flags,
                    verb: bind_verb,
                };
                return Ok(Encoded {
                    hdr: bind_wqe(w.wr_id, w.send_flags, &bind),
                    sges: &[],
                    inline: false,
                });
            }
            Remote::LocalInv => {
                // No data: the WQE names the key only.
                hdr.send_flags &= !IBV_SEND_INLINE;
                hdr.num_sge = 0;
                hdr.inline_len = 0;
                return Ok(Encoded {
                    hdr,
                    sges: &[],
                    inline: false,
                });
            }
            Remote::AtomicWrite => {
                // SAFETY: as below (integers only).
                let r = unsafe { w.wr.rdma };
                check_atomic_write(r.remote_addr, total)?;
                let mut value = [0u8; 8];
                let mut off = 0;
                for s in sges.iter().filter(|s| s.length != 0) {
                    let len = s.length as usize;
                    // SAFETY: the WR's inline source, readable for `len` bytes (contract);
                    // the lengths add up to 8 (checked above).
                    unsafe {
                        core::ptr::copy_nonoverlapping(
                            core::ptr::with_exposed_provenance::<u8>(s.addr as usize),
                            value.as_mut_ptr().add(off),
                            len,
                        );
                    }
                    off += len;
                }
                hdr.remote_addr = r.remote_addr;
                hdr.rkey = r.rkey;
                hdr.swap = u64::from_ne_bytes(value);
                // The value travels in the header: no body.
                hdr.send_flags &= !IBV_SEND_INLINE;
                hdr.num_sge = 0;
                hdr.inline_len = 0;
                return Ok(Encoded {
                    hdr,
                    sges: &[],
                    inline: false,
                });
            }
            Remote::Flush => {
                // SAFETY: as below (integers only).
                let a = unsafe { w.wr.atomic };
                let feth = hdr.imm_data;
                let (ty, level) = (feth & 0xf, feth >> 4);
                if ty == 0 || ty & !3 != 0 || level > 1 || a.compare_add > u64::from(u32::MAX) {
                    return Err(RingError::Invalid(
                        "FLUSH: bad placement type or level, or a length above 4 GiB - 1",
                    ));
                }
                hdr.remote_addr = a.remote_addr;
                hdr.rkey = a.rkey;
                hdr.compare_add = a.compare_add;
            }
            Remote::Ud => {
                // SAFETY: a union of plain structs (pointers and integers); any bits are
                // valid, and the AH pointer is only passed to `hooks`, never dereferenced here.
                let ud = unsafe { w.wr.ud };
                // SAFETY: `w` is a WR of the list being posted on a UD QP, so `ud.ah` is NULL
                // or a live AH (this function's contract).
                hdr.ah_num = unsafe { hooks.ah_num(ud.ah) }
                    .ok_or(RingError::Invalid("UD WR without a valid AH"))?;
                hdr.remote_qpn = ud.remote_qpn;
                hdr.remote_qkey = ud.remote_qkey;
            }
            Remote::Rdma => {
                // SAFETY: as above (integers only).
                let r = unsafe { w.wr.rdma };
                hdr.remote_addr = r.remote_addr;
                hdr.rkey = r.rkey;
            }
            Remote::Atomic => {
                // SAFETY: as above (integers only).
                let a = unsafe { w.wr.atomic };
                check_atomic(a.remote_addr, total)?;
                hdr.remote_addr = a.remote_addr;
                hdr.rkey = a.rkey;
                hdr.compare_add = a.compare_add;
                hdr.swap = a.swap;
            }
        }
        Ok(Encoded { hdr, sges, inline })
    }
}

/// The SGE array of a WR: empty for `num_sge == 0`, `EINVAL` for a negative count or a NULL
/// or misaligned `sg_list` with entries.
///
/// # Safety
/// A non-NULL `sg_list` must be valid for reading `num_sge` entries for `'a`.
pub(crate) unsafe fn sge_slice<'a>(
    sg_list: *mut ibv_sge,
    num_sge: c_int,
) -> Result<&'a [ibv_sge], RingError> {
    let n = usize::try_from(num_sge).map_err(|_| RingError::Invalid("negative num_sge"))?;
    if n == 0 {
        return Ok(&[]);
    }
    if sg_list.is_null() || !sg_list.is_aligned() {
        return Err(RingError::Invalid("NULL or misaligned sg_list"));
    }
    // SAFETY: non-NULL, aligned, valid for `n` entries (contract).
    Ok(unsafe { core::slice::from_raw_parts(sg_list, n) })
}

/// Free entries for a producer at `prod` in a ring bounded to `max_wr` entries, from the
/// kernel's consumer index (acquire: the kernel's reads of the slots it released happen
/// before we overwrite them). `Corrupt` when the consumer index is out of range.
pub(crate) fn free_slots(ring: &Ring, prod: u32, max_wr: u32) -> Result<u32, RingError> {
    let cons = ring.consumer().load(Ordering::Acquire);
    let used = prod.wrapping_sub(cons);
    if used > ring.slots() {
        return Err(RingError::Corrupt);
    }
    Ok(max_wr.min(ring.slots()).saturating_sub(used))
}

/// Writes one send WQE into slot `idx`.
///
/// # Safety
/// For an inline WQE, every SGE's `addr` must be readable for its `length` bytes.
unsafe fn write_wqe(ring: &mut Ring, idx: u32, enc: &Encoded<'_>) -> Result<(), RingError> {
    ring.write(idx, 0, &enc.hdr)?;
    if enc.inline {
        let mut off = BODY;
        for s in enc.sges.iter().filter(|s| s.length != 0) {
            let len = s.length as usize;
            // SAFETY: the application's inline source, readable for `len` bytes (contract).
            unsafe {
                ring.write_from(
                    idx,
                    off,
                    core::ptr::with_exposed_provenance(s.addr as usize),
                    len,
                )?;
            }
            off += len;
        }
    } else {
        for (i, s) in enc.sges.iter().enumerate() {
            let sge = Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
            ring.write(idx, BODY + i * size_of::<Sge>(), &sge)?;
        }
    }
    Ok(())
}
