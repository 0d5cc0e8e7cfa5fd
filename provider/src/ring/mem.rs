//! The raw shared mapping: the only place that turns addresses into memory accesses.
//!
//! [`Ring`] checks the geometry once, at construction, and afterwards computes every address
//! from its private copy of it (`slots`, `slot_size`), never from the mapping. Header indices
//! are accessed only atomically ([`AtomicU32::from_ptr`]); slot contents with unaligned raw
//! reads and writes that are bounds-checked against `slot_size`.

use core::ffi::c_int;
use core::mem::{offset_of, size_of};
use core::ptr::{self, NonNull};
use core::sync::atomic::AtomicU32;
use std::os::fd::RawFd;

use rrxe_uapi::{Cqe, RecvWqe, RingHeader, SendWqe, Sge, CACHELINE, RING_HEADER_SIZE};

use super::RingError;

/// An owned `mmap(MAP_SHARED)` of a ring, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Mapping` is only an address range; it hands out no references, and every access
// through it goes through a `Ring`, whose own rules apply. Unmapping from another thread is
// fine.
unsafe impl Send for Mapping {}
// SAFETY: as above: `&Mapping` allows nothing but reading the address and length.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` at `offset` read/write and shared, as the verbs do with the
    /// uverbs command fd and a [`rrxe_uapi::RingInfo`]'s `mmap_key`/`bytes`. On failure,
    /// returns the errno (`EINVAL` for a zero length or an offset beyond `off_t`).
    pub fn map_shared(fd: RawFd, offset: u64, len: usize) -> Result<Mapping, c_int> {
        let off = libc::off_t::try_from(offset).map_err(|_| libc::EINVAL)?;
        if len == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: a fresh mapping chosen by the kernel (no MAP_FIXED), so no existing memory
        // is affected; the arguments are plain values.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(crate::abi::errno());
        }
        match NonNull::new(p.cast::<u8>()) {
            Some(ptr) => Ok(Mapping { ptr, len }),
            None => Err(libc::EFAULT),
        }
    }

    /// The first byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a zero-length mapping cannot be made).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this object made and owns; every `Ring` over
        // it holds the `Mapping` and is being dropped too, so nothing refers to it any more.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Plain-old-data ring entries: `repr(C)` structs of integers with no padding, so any bytes
/// are a valid value and every byte of a value is initialized.
///
/// # Safety
/// Implement only for types with those properties.
pub(crate) unsafe trait Pod: Copy {}
// SAFETY: `repr(C)` structs of integers without padding (sizes pinned in rrxe_uapi: 64, 72, 16
// and 16 bytes equal the sums of their fields).
unsafe impl Pod for Cqe {}
// SAFETY: as above.
unsafe impl Pod for SendWqe {}
// SAFETY: as above.
unsafe impl Pod for RecvWqe {}
// SAFETY: as above.
unsafe impl Pod for Sge {}

const _: () = {
    // The padding-free claims above.
    assert!(size_of::<Cqe>() == 8 + 8 * 4 + 2 * 2 + 2 + 18);
    assert!(size_of::<SendWqe>() == 8 + 6 * 4 + 8 + 2 * 4 + 2 * 8 + 2 * 4);
    assert!(size_of::<RecvWqe>() == 8 + 2 * 4);
    assert!(size_of::<Sge>() == 8 + 2 * 4);
    // The flags word the send doorbell protocol uses.
    assert!(offset_of!(RingHeader, flags) == 2 * CACHELINE + 8);
};

/// Byte offset of the flags word (`RingHeader::flags`).
const FLAGS_OFFSET: usize = offset_of!(RingHeader, flags);

/// One shared ring: a checked view of a mapping (header plus slots).
///
/// Slot accesses take `&mut self`: the owner (a [`super::CqRing`], [`super::SqRing`] or
/// [`super::RqRing`]) keeps the `Ring` behind its lock, so at most one thread of this process
/// touches slots through it at a time. Header indices are atomics and take `&self`.
#[derive(Debug)]
pub(crate) struct Ring {
    base: NonNull<u8>,
    slots: u32,
    slot_size: u32,
    /// Keeps the memory mapped for as long as the ring exists (None: the creator of a
    /// [`Ring::from_raw`] ring guarantees it).
    _mapping: Option<Mapping>,
}

// SAFETY: the memory a `Ring` points to is valid for its whole lifetime (owned `Mapping`, or
// the `from_raw` contract), is not tied to a thread, and is only accessed through atomics
// (header) or through `&mut self` (slots).
unsafe impl Send for Ring {}

/// Where the geometry comes from: what the kernel's create response said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub slots: u32,
    pub slot_size: u32,
    /// The smallest acceptable slot (header plus the largest body the caps allow).
    pub min_slot_size: u64,
}

impl Ring {
    /// A ring over the mapping `m`, which it keeps alive. See [`Ring::from_raw`] for the checks.
    pub fn from_mapping(m: Mapping, geo: Geometry) -> Result<Ring, RingError> {
        // SAFETY: `m` is a live read/write mapping of `m.len()` bytes, which the ring then owns,
        // so it stays mapped for the ring's lifetime.
        let mut ring = unsafe { Ring::from_raw(m.as_ptr(), m.len(), geo)? };
        ring._mapping = Some(m);
        Ok(ring)
    }

    /// A ring over `len` bytes at `base`, checked against what the create response said:
    /// `slots` a non-zero power of two, `slot_size` a multiple of 8 of at least
    /// `min_slot_size`, the header's `log2_slots`/`slot_size` equal to those, `len` covering
    /// the header and all slots, `base` 64-byte aligned, and the two indices at most `slots`
    /// apart.
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `len` bytes for the whole lifetime of the
    /// returned ring (and of anything it is moved into), and not be accessed by this process
    /// other than through it (the other side of the ring is the kernel, or a test standing in
    /// for it, which follows the ring protocol). The header indices must only be accessed
    /// atomically.
    pub unsafe fn from_raw(base: *mut u8, len: usize, geo: Geometry) -> Result<Ring, RingError> {
        let Some(base) = NonNull::new(base) else {
            return Err(RingError::Invalid("ring mapping is NULL"));
        };
        if base.as_ptr().align_offset(CACHELINE) != 0 {
            return Err(RingError::Invalid("ring mapping is not 64-byte aligned"));
        }
        let Geometry {
            slots,
            slot_size,
            min_slot_size,
        } = geo;
        if slots == 0 || !slots.is_power_of_two() || slots > 1 << 31 {
            return Err(RingError::Invalid("slot count is not a power of two"));
        }
        if !slot_size.is_multiple_of(8) || u64::from(slot_size) < min_slot_size {
            return Err(RingError::Invalid(
                "slot size too small for the queue's caps",
            ));
        }
        let needed = (slots as usize)
            .checked_mul(slot_size as usize)
            .and_then(|n| n.checked_add(RING_HEADER_SIZE));
        if needed.is_none_or(|n| n > len) {
            return Err(RingError::Invalid("mapping shorter than header plus slots"));
        }
        let ring = Ring {
            base,
            slots,
            slot_size,
            _mapping: None,
        };
        // SAFETY: the header lies within the `len >= RING_HEADER_SIZE` valid bytes; the kernel
        // wrote the geometry before the create call returned, and nobody writes it afterwards.
        // Unaligned reads need no alignment argument.
        let (h_log2, h_size) = unsafe {
            let hdr = base.as_ptr();
            (
                ptr::read_volatile(hdr.add(offset_of!(RingHeader, log2_slots)).cast::<u32>()),
                ptr::read_volatile(hdr.add(offset_of!(RingHeader, slot_size)).cast::<u32>()),
            )
        };
        if h_log2 != slots.trailing_zeros() || h_size != slot_size {
            return Err(RingError::Invalid(
                "ring header geometry differs from create's answer",
            ));
        }
        let p = ring.producer().load(core::sync::atomic::Ordering::Acquire);
        let c = ring.consumer().load(core::sync::atomic::Ordering::Acquire);
        if p.wrapping_sub(c) > slots {
            return Err(RingError::Corrupt);
        }
        Ok(ring)
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    pub fn slot_size(&self) -> u32 {
        self.slot_size
    }

    /// An atomic `u32` of the header at byte offset `off` (4-aligned, within the header).
    fn header_word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= RING_HEADER_SIZE);
        // SAFETY: `base` is 64-aligned and `off` a multiple of 4 inside the header, so the
        // pointer is aligned and valid for the lifetime of `self` (the `from_raw` contract or
        // the owned mapping). Every access to the header words from this process is atomic (the
        // `from_raw` contract); the kernel side uses READ_ONCE/WRITE_ONCE/smp_* accessors.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off).cast::<u32>()) }
    }

    /// `RingHeader::producer`.
    pub fn producer(&self) -> &AtomicU32 {
        self.header_word(offset_of!(RingHeader, producer))
    }

    /// `RingHeader::consumer`.
    pub fn consumer(&self) -> &AtomicU32 {
        self.header_word(offset_of!(RingHeader, consumer))
    }

    /// `RingHeader::flags`: the send ring's flags ([`rrxe_uapi::SQ_FLAG_KERNEL_BUSY`]).
    pub fn flags(&self) -> &AtomicU32 {
        self.header_word(FLAGS_OFFSET)
    }

    /// The address of byte `off` of slot `idx` (masked), if `len` bytes from there stay inside
    /// the slot.
    fn slot_range(&self, idx: u32, off: usize, len: usize) -> Option<*mut u8> {
        let end = off.checked_add(len)?;
        if end > self.slot_size as usize {
            return None;
        }
        let slot = (idx & (self.slots - 1)) as usize;
        let at = RING_HEADER_SIZE + slot * self.slot_size as usize + off;
        // SAFETY: `slot < slots` and `off + len <= slot_size`, so `at + len` is at most
        // `RING_HEADER_SIZE + slots * slot_size <= len` of the mapping (checked in `from_raw`).
        Some(unsafe { self.base.as_ptr().add(at) })
    }

    /// Writes `val` at byte `off` of slot `idx`; `Invalid` (and nothing written) if it would
    /// cross the slot's end.
    pub fn write<T: Pod>(&mut self, idx: u32, off: usize, val: &T) -> Result<(), RingError> {
        let p = self
            .slot_range(idx, off, size_of::<T>())
            .ok_or(RingError::Invalid("WQE larger than the slot"))?;
        // SAFETY: `p` is valid for `size_of::<T>()` bytes (checked above); `&mut self` means no
        // other thread of this process accesses slots; the kernel reads this slot only after
        // the producer index covering it is published (release).
        unsafe { ptr::write_unaligned(p.cast::<T>(), *val) };
        Ok(())
    }

    /// Copies `len` bytes from `src` to byte `off` of slot `idx`; `Invalid` (and nothing
    /// written) if they would cross the slot's end.
    ///
    /// # Safety
    /// `src` must be valid for reading `len` bytes (unless `len == 0`).
    pub unsafe fn write_from(
        &mut self,
        idx: u32,
        off: usize,
        src: *const u8,
        len: usize,
    ) -> Result<(), RingError> {
        let p = self
            .slot_range(idx, off, len)
            .ok_or(RingError::Invalid("inline data larger than the slot"))?;
        if len != 0 {
            // SAFETY: destination checked above, source per this function's contract;
            // `copy` (memmove) allows the two to overlap. Exclusivity as in `write`.
            unsafe { ptr::copy(src, p, len) };
        }
        Ok(())
    }

    /// Reads a `T` at byte `off` of slot `idx`; `None` if it would cross the slot's end (or be
    /// misaligned, which the fixed layouts never are: slots are 8-byte aligned and every
    /// entry sits at a multiple of 8 inside one).
    pub fn read<T: Pod>(&mut self, idx: u32, off: usize) -> Option<T> {
        let p = self.slot_range(idx, off, size_of::<T>())?.cast::<T>();
        if !p.is_aligned() {
            return None;
        }
        // SAFETY: `p` is aligned and valid for reading a `T` (checked); any bytes are a valid
        // `T` (`Pod`); the caller read the producer index covering this slot with acquire, so
        // the kernel's writes to it are visible. Volatile: the memory is shared with the other
        // side, so it is copied out exactly once and never re-read.
        Some(unsafe { ptr::read_volatile(p.cast_const()) })
    }
}
