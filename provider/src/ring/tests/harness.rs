//! Test stand-ins for the kernel: memory that plays the mapping, a "kernel" side of each ring
//! written independently of the provider code (raw header offsets from `rrxe_uapi`), WR list
//! builders and the expected-result oracles.

use core::ffi::c_int;
use core::mem::{offset_of, size_of};
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};

use rrxe_uapi::{Cqe, RecvWqe, RingHeader, RingInfo, SendWqe, Sge, RING_HEADER_SIZE};

use crate::abi::{
    ibv_ah, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
    IBV_SEND_FENCE, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED,
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_WRITE, IBV_WR_LOCAL_INV,
    IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV,
};
use crate::ring::{CqRing, RqRing, SendHooks, SqCaps, SqRing};

const PAGE: usize = 4096;

/// Anonymous memory that plays a ring mapping: `len` bytes, 64-byte aligned, ending (when
/// `len` is a multiple of 64) right before a PROT_NONE guard page, so an access past the end
/// of the ring faults instead of going unnoticed.
pub struct TestMem {
    map: *mut u8,
    map_len: usize,
    base: *mut u8,
    len: usize,
}

// SAFETY: plain memory owned by the test; the threads that share it follow the ring protocol.
unsafe impl Send for TestMem {}
// SAFETY: as above.
unsafe impl Sync for TestMem {}

impl TestMem {
    pub fn new(len: usize) -> TestMem {
        let pages = len.div_ceil(PAGE).max(1);
        let map_len = (pages + 1) * PAGE;
        // SAFETY: a fresh private anonymous mapping, then PROT_NONE on its last page.
        let map = unsafe {
            let p = libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(
                libc::mprotect(
                    p.cast::<u8>().add(pages * PAGE).cast(),
                    PAGE,
                    libc::PROT_NONE
                ),
                0
            );
            p.cast::<u8>()
        };
        let start = (pages * PAGE - len) & !63;
        // SAFETY: `start <= pages * PAGE - len` lies inside the readable part.
        let base = unsafe { map.add(start) };
        TestMem {
            map,
            map_len,
            base,
            len,
        }
    }

    /// A ring's memory with the header filled as the kernel would: geometry, and both indices
    /// at `start`.
    pub fn ring(slots: u32, slot_size: u32, start: u32) -> TestMem {
        let m = TestMem::new(RING_HEADER_SIZE + slots as usize * slot_size as usize);
        m.set_u32(offset_of!(RingHeader, log2_slots), slots.trailing_zeros());
        m.set_u32(offset_of!(RingHeader, slot_size), slot_size);
        m.set_u32(offset_of!(RingHeader, producer), start);
        m.set_u32(offset_of!(RingHeader, consumer), start);
        m
    }

    pub fn base(&self) -> *mut u8 {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Atomically writes the header word at `off` (a test scribbling, or the kernel's setup).
    pub fn set_u32(&self, off: usize, v: u32) {
        self.word(off).store(v, Ordering::SeqCst);
    }

    pub fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: aligned (64-aligned base), inside the memory, which lives as long as `self`;
        // header words are only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }
}

impl Drop for TestMem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

pub fn info(slots: u32, slot_size: u32) -> RingInfo {
    RingInfo {
        mmap_key: 0,
        bytes: (RING_HEADER_SIZE + slots as usize * slot_size as usize) as u64,
        slots,
        slot_size,
    }
}

pub fn cq_ring(slots: u32, start: u32) -> (TestMem, CqRing) {
    let m = TestMem::ring(slots, 64, start);
    // SAFETY: `m` outlives the ring in every test (returned together, ring dropped first by
    // declaration order at the call site or explicitly), and only the ring and the test kernel
    // (following the protocol) touch it.
    let r = unsafe { CqRing::from_raw(m.base(), m.len(), &info(slots, 64)) }.unwrap();
    (m, r)
}

pub fn sq_ring(slots: u32, caps: SqCaps, start: u32) -> (TestMem, SqRing) {
    let ss = SqRing::expected_slot_size(&caps) as u32;
    let m = TestMem::ring(slots, ss, start);
    // SAFETY: as in `cq_ring`.
    let r = unsafe { SqRing::from_raw(m.base(), m.len(), &info(slots, ss), caps) }.unwrap();
    (m, r)
}

pub fn rq_ring(slots: u32, max_sge: u32, start: u32) -> (TestMem, RqRing) {
    let ss = RqRing::expected_slot_size(max_sge) as u32;
    let m = TestMem::ring(slots, ss, start);
    // SAFETY: as in `cq_ring`.
    let r = unsafe { RqRing::from_raw(m.base(), m.len(), &info(slots, ss), max_sge) }.unwrap();
    (m, r)
}

/// The kernel's side of a ring, with its own private index.
pub struct Kernel {
    base: *mut u8,
    slots: u32,
    slot_size: u32,
    /// The kernel's index: consumer for SQ/RQ, producer for CQ.
    pub idx: u32,
}

// SAFETY: the memory outlives the kernel in every test; accesses follow the ring protocol.
unsafe impl Send for Kernel {}

/// A send WQE as the kernel sees it after copying the slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentWqe {
    pub hdr: SendWqe,
    pub sges: Vec<Sge>,
    pub inline: Vec<u8>,
}

/// A receive WQE as the kernel sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvdWqe {
    pub hdr: RecvWqe,
    pub sges: Vec<Sge>,
}

impl Kernel {
    /// The consumer of an SQ/RQ in `m` (starts at the header's consumer index).
    pub fn consumer_of(m: &TestMem) -> Kernel {
        let mut k = Kernel::attach(m.base());
        k.idx = k.consumer().load(Ordering::SeqCst);
        k
    }

    /// The producer of a CQ in `m`.
    pub fn producer_of(m: &TestMem) -> Kernel {
        let mut k = Kernel::attach(m.base());
        k.idx = k.producer().load(Ordering::SeqCst);
        k
    }

    /// Geometry from the header, as the kernel knows it.
    pub fn attach(base: *mut u8) -> Kernel {
        // SAFETY: the header of a live test ring.
        let (log2, ss) = unsafe {
            (
                ptr::read_volatile(base.add(offset_of!(RingHeader, log2_slots)).cast::<u32>()),
                ptr::read_volatile(base.add(offset_of!(RingHeader, slot_size)).cast::<u32>()),
            )
        };
        Kernel {
            base,
            slots: 1 << log2,
            slot_size: ss,
            idx: 0,
        }
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: an aligned header word of a live ring, accessed only atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    pub fn producer(&self) -> &AtomicU32 {
        self.word(offset_of!(RingHeader, producer))
    }

    pub fn consumer(&self) -> &AtomicU32 {
        self.word(offset_of!(RingHeader, consumer))
    }

    pub fn flags(&self) -> &AtomicU32 {
        self.word(offset_of!(RingHeader, flags))
    }

    /// Copies slot `idx` (masked) out, as the real kernel does before parsing it.
    fn copy_slot(&self, idx: u32) -> Vec<u8> {
        let mut v = vec![0u8; self.slot_size as usize];
        let at = RING_HEADER_SIZE + (idx & (self.slots - 1)) as usize * self.slot_size as usize;
        // SAFETY: the slot lies inside the ring; the producer index covering it was read with
        // acquire, so it is fully written.
        unsafe { ptr::copy_nonoverlapping(self.base.add(at), v.as_mut_ptr(), v.len()) };
        v
    }

    /// Entries published by the provider and not yet consumed (SQ/RQ), checked in range.
    pub fn pending(&self) -> u32 {
        let p = self.producer().load(Ordering::Acquire);
        let n = p.wrapping_sub(self.idx);
        assert!(
            n <= self.slots,
            "provider published {n} entries into {} slots",
            self.slots
        );
        n
    }

    pub fn pop_send(&mut self) -> Option<SentWqe> {
        if self.pending() == 0 {
            return None;
        }
        let raw = self.copy_slot(self.idx);
        let hdr: SendWqe = read_at(&raw, 0);
        let body = &raw[size_of::<SendWqe>()..];
        let sges = (0..hdr.num_sge as usize)
            .map(|i| read_at::<Sge>(body, i * size_of::<Sge>()))
            .collect();
        let inline = body[..hdr.inline_len as usize].to_vec();
        self.idx = self.idx.wrapping_add(1);
        self.consumer().store(self.idx, Ordering::Release);
        Some(SentWqe { hdr, sges, inline })
    }

    pub fn pop_recv(&mut self) -> Option<RecvdWqe> {
        if self.pending() == 0 {
            return None;
        }
        let raw = self.copy_slot(self.idx);
        let hdr: RecvWqe = read_at(&raw, 0);
        let body = &raw[size_of::<RecvWqe>()..];
        let sges = (0..hdr.num_sge as usize)
            .map(|i| read_at::<Sge>(body, i * size_of::<Sge>()))
            .collect();
        self.idx = self.idx.wrapping_add(1);
        self.consumer().store(self.idx, Ordering::Release);
        Some(RecvdWqe { hdr, sges })
    }

    /// Produces one CQE if the CQ has room.
    pub fn push_cqe(&mut self, c: &Cqe) -> bool {
        let cons = self.consumer().load(Ordering::Acquire);
        let used = self.idx.wrapping_sub(cons);
        assert!(used <= self.slots, "provider consumer index out of range");
        if used == self.slots {
            return false;
        }
        let at =
            RING_HEADER_SIZE + (self.idx & (self.slots - 1)) as usize * self.slot_size as usize;
        // SAFETY: a free slot inside the ring (the consumer released it with release, read
        // above with acquire).
        unsafe { ptr::write_unaligned(self.base.add(at).cast::<Cqe>(), *c) };
        self.idx = self.idx.wrapping_add(1);
        self.producer().store(self.idx, Ordering::Release);
        true
    }
}

/// Reads a `T` (a padding-free `repr(C)` ABI struct) at `off` of `buf`.
fn read_at<T: Copy>(buf: &[u8], off: usize) -> T {
    assert!(
        off + size_of::<T>() <= buf.len(),
        "entry crosses the slot end"
    );
    // SAFETY: in bounds (checked); the ABI structs are integers only.
    unsafe { ptr::read_unaligned(buf.as_ptr().add(off).cast::<T>()) }
}

// ---------------------------------------------------------------------------------------------
// Work requests.

/// One SGE of a test WR: for inline WRs `data` holds the payload and `addr`/`length` are taken
/// from it; otherwise `addr`/`length` are arbitrary numbers.
#[derive(Clone, Debug)]
pub struct SgeSpec {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
    pub data: Option<Vec<u8>>,
}

impl SgeSpec {
    pub fn plain(addr: u64, length: u32, lkey: u32) -> SgeSpec {
        SgeSpec {
            addr,
            length,
            lkey,
            data: None,
        }
    }

    pub fn bytes(data: &[u8]) -> SgeSpec {
        SgeSpec {
            addr: 0,
            length: data.len() as u32,
            lkey: 0,
            data: Some(data.to_vec()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct SendSpec {
    pub wr_id: u64,
    pub opcode: u32,
    pub flags: u32,
    pub imm: u32,
    pub sges: Vec<SgeSpec>,
    /// Overrides `num_sge` (e.g. negative); the list still holds `sges`.
    pub num_sge: Option<c_int>,
    /// A NULL `sg_list` even with entries.
    pub null_sg_list: bool,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// `Some(n)`: the fake AH pointer for number `n` (numbers >= `FOREIGN_AH` are unknown to
    /// the hooks); `None`: NULL.
    pub ah: Option<u32>,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

impl SendSpec {
    pub fn new(wr_id: u64, opcode: u32) -> SendSpec {
        SendSpec {
            wr_id,
            opcode,
            flags: IBV_SEND_SIGNALED,
            imm: 0,
            sges: vec![SgeSpec::plain(wr_id.wrapping_add(0x1000), 64, 7)],
            num_sge: None,
            null_sg_list: false,
            remote_addr: 0x8000,
            rkey: 0x55,
            compare_add: 0,
            swap: 0,
            ah: Some(1),
            remote_qpn: 0x11,
            remote_qkey: 0x22,
        }
    }

    pub fn inline(mut self, parts: &[&[u8]]) -> SendSpec {
        self.flags |= IBV_SEND_INLINE;
        self.sges = parts.iter().map(|p| SgeSpec::bytes(p)).collect();
        self
    }
}

/// AH numbers the test hooks resolve: `0..FOREIGN_AH`.
pub const FOREIGN_AH: u32 = 1000;

pub fn fake_ah(n: u32) -> *mut ibv_ah {
    ptr::without_provenance_mut(0x10_0000 + 0x40 * n as usize)
}

/// A linked `ibv_send_wr` list over `specs`, with the memory it points to.
pub struct SendList {
    wrs: Box<[ibv_send_wr]>,
    base: *mut ibv_send_wr,
    _sges: Vec<Box<[ibv_sge]>>,
    _data: Vec<Vec<u8>>,
}

impl SendList {
    pub fn new(specs: &[SendSpec]) -> SendList {
        let mut sges = Vec::new();
        let mut datas = Vec::new();
        let mut wrs: Box<[ibv_send_wr]> = specs.iter().map(|_| ibv_send_wr::default()).collect();
        for (w, s) in wrs.iter_mut().zip(specs) {
            let mut list: Box<[ibv_sge]> = s
                .sges
                .iter()
                .map(|g| match &g.data {
                    Some(d) => {
                        // The copy's heap buffer does not move when `datas` grows.
                        let d = d.clone();
                        let addr = if d.is_empty() {
                            0
                        } else {
                            d.as_ptr().expose_provenance() as u64
                        };
                        let length = d.len() as u32;
                        datas.push(d);
                        ibv_sge {
                            addr,
                            length,
                            lkey: g.lkey,
                        }
                    }
                    None => ibv_sge {
                        addr: g.addr,
                        length: g.length,
                        lkey: g.lkey,
                    },
                })
                .collect();
            w.wr_id = s.wr_id;
            w.opcode = s.opcode;
            w.send_flags = s.flags;
            w.num_sge = s.num_sge.unwrap_or(s.sges.len() as c_int);
            w.sg_list = if s.null_sg_list || list.is_empty() {
                ptr::null_mut()
            } else {
                list.as_mut_ptr()
            };
            w.__bindgen_anon_1.imm_data = s.imm;
            match s.opcode {
                IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD | IBV_WR_FLUSH => {
                    w.wr.atomic.remote_addr = s.remote_addr;
                    w.wr.atomic.rkey = s.rkey;
                    w.wr.atomic.compare_add = s.compare_add;
                    w.wr.atomic.swap = s.swap;
                }
                _ => {
                    // The ud member overlaps rdma's; UD specs are used on UD QPs only.
                    w.wr.rdma.remote_addr = s.remote_addr;
                    w.wr.rdma.rkey = s.rkey;
                }
            }
            sges.push(list);
        }
        let l = SendList {
            base: wrs.as_mut_ptr(),
            wrs,
            _sges: sges,
            _data: datas,
        };
        for i in 0..l.wrs.len() {
            let next = if i + 1 < l.wrs.len() {
                l.ptr(i + 1)
            } else {
                ptr::null_mut()
            };
            // SAFETY: `ptr(i)` is an element of the boxed slice.
            unsafe { (*l.ptr(i)).next = next };
        }
        l
    }

    /// Same as `new`, but with the UD fields filled (they overlap the RDMA ones).
    pub fn new_ud(specs: &[SendSpec]) -> SendList {
        let l = SendList::new(specs);
        for (i, s) in specs.iter().enumerate() {
            // SAFETY: element `i` of the list.
            unsafe {
                let w = &mut *l.ptr(i);
                w.wr.ud.ah = s.ah.map_or(ptr::null_mut(), fake_ah);
                w.wr.ud.remote_qpn = s.remote_qpn;
                w.wr.ud.remote_qkey = s.remote_qkey;
            }
        }
        l
    }

    pub fn for_qp(qp_type: u32, specs: &[SendSpec]) -> SendList {
        if qp_type == IBV_QPT_UD {
            SendList::new_ud(specs)
        } else {
            SendList::new(specs)
        }
    }

    pub fn head(&self) -> *mut ibv_send_wr {
        if self.wrs.is_empty() {
            ptr::null_mut()
        } else {
            self.base
        }
    }

    pub fn ptr(&self, i: usize) -> *mut ibv_send_wr {
        assert!(i < self.wrs.len());
        // SAFETY: in bounds.
        unsafe { self.base.add(i) }
    }

    /// The index of `p` in the list.
    pub fn index_of(&self, p: *mut ibv_send_wr) -> Option<usize> {
        (0..self.wrs.len()).find(|&i| self.ptr(i) == p)
    }
}

// SAFETY: the list's pointers only point into memory it owns.
unsafe impl Send for SendList {}

#[derive(Clone, Debug)]
pub struct RecvSpec {
    pub wr_id: u64,
    pub sges: Vec<(u64, u32, u32)>,
    pub num_sge: Option<c_int>,
    pub null_sg_list: bool,
}

impl RecvSpec {
    pub fn new(wr_id: u64, nsge: usize) -> RecvSpec {
        RecvSpec {
            wr_id,
            sges: (0..nsge as u64)
                .map(|i| {
                    (
                        wr_id.wrapping_mul(16).wrapping_add(0x4000 + i),
                        100 + i as u32,
                        9,
                    )
                })
                .collect(),
            num_sge: None,
            null_sg_list: false,
        }
    }
}

pub struct RecvList {
    wrs: Box<[ibv_recv_wr]>,
    base: *mut ibv_recv_wr,
    _sges: Vec<Box<[ibv_sge]>>,
}

// SAFETY: the list's pointers only point into memory it owns.
unsafe impl Send for RecvList {}

impl RecvList {
    pub fn new(specs: &[RecvSpec]) -> RecvList {
        let mut all = Vec::new();
        let mut wrs: Box<[ibv_recv_wr]> = specs.iter().map(|_| ibv_recv_wr::default()).collect();
        for (w, s) in wrs.iter_mut().zip(specs) {
            let mut list: Box<[ibv_sge]> = s
                .sges
                .iter()
                .map(|&(addr, length, lkey)| ibv_sge { addr, length, lkey })
                .collect();
            w.wr_id = s.wr_id;
            w.num_sge = s.num_sge.unwrap_or(s.sges.len() as c_int);
            w.sg_list = if s.null_sg_list || list.is_empty() {
                ptr::null_mut()
            } else {
                list.as_mut_ptr()
            };
            all.push(list);
        }
        let l = RecvList {
            base: wrs.as_mut_ptr(),
            wrs,
            _sges: all,
        };
        for i in 0..l.wrs.len() {
            let next = if i + 1 < l.wrs.len() {
                l.ptr(i + 1)
            } else {
                ptr::null_mut()
            };
            // SAFETY: element `i` of the boxed slice.
            unsafe { (*l.ptr(i)).next = next };
        }
        l
    }

    pub fn head(&self) -> *mut ibv_recv_wr {
        if self.wrs.is_empty() {
            ptr::null_mut()
        } else {
            self.base
        }
    }

    pub fn ptr(&self, i: usize) -> *mut ibv_recv_wr {
        assert!(i < self.wrs.len());
        // SAFETY: in bounds.
        unsafe { self.base.add(i) }
    }

    pub fn index_of(&self, p: *mut ibv_recv_wr) -> Option<usize> {
        (0..self.wrs.len()).find(|&i| self.ptr(i) == p)
    }
}

/// Test hooks: resolve fake AHs, count doorbells, optionally fail them.
#[derive(Default)]
pub struct Hooks {
    pub doorbells: u32,
    pub doorbell_errno: c_int,
}

impl SendHooks for Hooks {
    unsafe fn ah_num(&mut self, ah: *mut ibv_ah) -> Option<u32> {
        let a = ah.addr().checked_sub(0x10_0000)?;
        let n = u32::try_from(a / 0x40).ok()?;
        (a % 0x40 == 0 && n < FOREIGN_AH).then_some(n)
    }

    fn doorbell(&mut self) -> c_int {
        self.doorbells += 1;
        self.doorbell_errno
    }
}

/// Posts `l` and returns (errno, index of bad_wr if set, doorbells rung by this call).
pub fn post(sq: &SqRing, l: &SendList) -> (c_int, Option<usize>, u32) {
    let mut h = Hooks::default();
    let mut bad: *mut ibv_send_wr = ptr::null_mut();
    // SAFETY: `l` is a valid list whose inline sources are live; `bad` is writable.
    let rc = unsafe { sq.post_send(l.head(), &mut bad, &mut h) };
    (rc, l.index_of(bad), h.doorbells)
}

pub fn post_recv(rq: &RqRing, l: &RecvList) -> (c_int, Option<usize>) {
    let mut bad: *mut ibv_recv_wr = ptr::null_mut();
    // SAFETY: `l` is a valid list; `bad` is writable.
    let rc = unsafe { rq.post_recv(l.head(), &mut bad) };
    (rc, l.index_of(bad))
}

// ---------------------------------------------------------------------------------------------
// Oracles: written from the brief, independently of `ring::wqe`.

/// `IBV_WR_FLUSH` (rdma-core 45's value; rdma-core 44 lacks it).
pub const IBV_WR_FLUSH: u32 = 14;

pub const ALL_WR_OPCODES: [u32; 14] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 15];

/// Which opcodes each QP type takes (the brief's table).
pub fn oracle_opcode_ok(qp_type: u32, op: u32) -> bool {
    let rc = [
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV,
        IBV_WR_SEND_WITH_INV,
        IBV_WR_ATOMIC_WRITE,
        IBV_WR_FLUSH,
    ];
    match qp_type {
        IBV_QPT_RC => rc.contains(&op),
        IBV_QPT_UC => rc[..4].contains(&op),
        IBV_QPT_UD => rc[..2].contains(&op),
        _ => false,
    }
}

fn is_atomic(op: u32) -> bool {
    op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD
}

/// Whether `s` passes validation on a QP with `caps` (ring space aside).
pub fn oracle_valid(s: &SendSpec, caps: &SqCaps) -> bool {
    let ok_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;
    let inline = s.flags & IBV_SEND_INLINE != 0;
    let n = s.num_sge.unwrap_or(s.sges.len() as c_int);
    let total: u64 = s
        .sges
        .iter()
        .map(|g| g.data.as_ref().map_or(g.length, |d| d.len() as u32) as u64)
        .sum();
    if s.opcode == IBV_WR_FLUSH {
        // Fields in wr.atomic, the FETH in imm_data: a placement type of 1..=3, a level of
        // 0..=1; a 32-bit length; no data.
        let (ty, level) = (s.imm & 0xf, s.imm >> 4);
        return oracle_opcode_ok(caps.qp_type, s.opcode)
            && s.flags & !ok_flags == 0
            && !inline
            && n == 0
            && (1..=3).contains(&ty)
            && level <= 1
            && s.compare_add <= u64::from(u32::MAX);
    }
    if s.opcode == IBV_WR_ATOMIC_WRITE {
        // The 8 bytes come inline (rdma_rxe's atomic_wr is its inline area), whatever
        // max_inline_data is; the address is 8-byte aligned.
        return oracle_opcode_ok(caps.qp_type, s.opcode)
            && s.flags & !ok_flags == 0
            && n >= 0
            && !(n > 0 && s.null_sg_list)
            && inline
            && total == 8
            && s.remote_addr.is_multiple_of(8);
    }
    oracle_opcode_ok(caps.qp_type, s.opcode)
        && s.flags & !ok_flags == 0
        && n >= 0
        && (inline || n as u32 <= caps.max_sge)
        && !(n > 0 && s.null_sg_list)
        && !(inline && (s.opcode == IBV_WR_RDMA_READ || is_atomic(s.opcode)))
        && (!inline || total <= caps.max_inline as u64)
        && (!is_atomic(s.opcode) || (s.remote_addr.is_multiple_of(8) && total >= 8))
        && (caps.qp_type != IBV_QPT_UD || s.ah.is_some_and(|a| a < FOREIGN_AH))
}

/// The WQE the kernel must see for a valid `s`.
pub fn oracle_wqe(s: &SendSpec, qp_type: u32) -> SentWqe {
    let inline = s.flags & IBV_SEND_INLINE != 0;
    let mut hdr = SendWqe {
        wr_id: s.wr_id,
        opcode: s.opcode,
        send_flags: s.flags,
        ..Default::default()
    };
    if matches!(
        s.opcode,
        IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_SEND_WITH_INV | IBV_WR_LOCAL_INV
    ) {
        hdr.imm_data = s.imm;
    }
    if s.opcode == IBV_WR_FLUSH && qp_type == IBV_QPT_RC {
        hdr.imm_data = s.imm;
        hdr.remote_addr = s.remote_addr;
        hdr.rkey = s.rkey;
        hdr.compare_add = s.compare_add;
        return SentWqe {
            hdr,
            sges: Vec::new(),
            inline: Vec::new(),
        };
    }
    if s.opcode == IBV_WR_LOCAL_INV && qp_type != IBV_QPT_UD {
        // The key only: no body.
        hdr.send_flags &= !IBV_SEND_INLINE;
        return SentWqe {
            hdr,
            sges: Vec::new(),
            inline: Vec::new(),
        };
    }
    if s.opcode == IBV_WR_ATOMIC_WRITE && qp_type != IBV_QPT_UD {
        // The value travels in `swap`: no body.
        let data: Vec<u8> = s
            .sges
            .iter()
            .flat_map(|g| g.data.clone().unwrap_or_default())
            .collect();
        hdr.send_flags &= !IBV_SEND_INLINE;
        hdr.remote_addr = s.remote_addr;
        hdr.rkey = s.rkey;
        hdr.swap = u64::from_ne_bytes(data.try_into().expect("8 bytes"));
        return SentWqe {
            hdr,
            sges: Vec::new(),
            inline: Vec::new(),
        };
    }
    if qp_type == IBV_QPT_UD {
        hdr.ah_num = s.ah.unwrap();
        hdr.remote_qpn = s.remote_qpn;
        hdr.remote_qkey = s.remote_qkey;
    } else if matches!(
        s.opcode,
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ
    ) {
        hdr.remote_addr = s.remote_addr;
        hdr.rkey = s.rkey;
    } else if is_atomic(s.opcode) {
        hdr.remote_addr = s.remote_addr;
        hdr.rkey = s.rkey;
        hdr.compare_add = s.compare_add;
        hdr.swap = s.swap;
    }
    let mut sges = Vec::new();
    let mut data = Vec::new();
    if inline {
        for g in &s.sges {
            data.extend_from_slice(g.data.as_deref().unwrap_or(&[]));
        }
        hdr.inline_len = data.len() as u32;
    } else {
        sges = s
            .sges
            .iter()
            .map(|g| Sge {
                addr: g.addr,
                length: g.length,
                lkey: g.lkey,
            })
            .collect();
        hdr.num_sge = sges.len() as u32;
    }
    SentWqe {
        hdr,
        sges,
        inline: data,
    }
}

/// The fields of an `ibv_wc` (or of a CQE), comparable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WcFields {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

pub fn wc_fields(w: &ibv_wc) -> WcFields {
    WcFields {
        wr_id: w.wr_id,
        status: w.status,
        opcode: w.opcode,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        // SAFETY: both union members are `u32`.
        imm: unsafe { w.__bindgen_anon_1.imm_data },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

pub fn cqe_fields(c: &Cqe) -> WcFields {
    WcFields {
        wr_id: c.wr_id,
        status: c.status,
        opcode: c.opcode,
        vendor_err: c.vendor_err,
        byte_len: c.byte_len,
        imm: c.imm_data,
        qp_num: c.qp_num,
        src_qp: c.src_qp,
        wc_flags: c.wc_flags,
        pkey_index: c.pkey_index,
        slid: c.slid,
        sl: c.sl,
        dlid_path_bits: c.dlid_path_bits,
    }
}

/// Polls up to `n` completions.
pub fn poll(cq: &CqRing, n: usize) -> Result<Vec<ibv_wc>, crate::ring::RingError> {
    let mut out = vec![core::mem::MaybeUninit::<ibv_wc>::uninit(); n];
    let got = cq.poll(&mut out)?;
    // SAFETY: `poll` initialized the first `got` entries.
    Ok(out[..got]
        .iter()
        .map(|w| unsafe { w.assume_init() })
        .collect())
}

pub fn test_cqe(i: u64) -> Cqe {
    Cqe {
        wr_id: i,
        status: (i % 24) as u32,
        opcode: [0, 1, 2, 3, 4, 128, 129][(i % 7) as usize],
        vendor_err: i as u32 ^ 0x5a,
        byte_len: (i * 3) as u32,
        imm_data: (i as u32).swap_bytes(),
        qp_num: 17,
        src_qp: (i >> 3) as u32,
        wc_flags: (i % 16) as u32,
        pkey_index: i as u16,
        slid: (i >> 16) as u16,
        sl: (i % 16) as u8,
        dlid_path_bits: (i % 3) as u8,
        reserved: [0; 18],
    }
}
