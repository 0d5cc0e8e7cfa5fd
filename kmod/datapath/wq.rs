// SPDX-License-Identifier: GPL-2.0-only
//! The shared work-queue rings as the kernel side reads and writes them: header indices, and
//! receive slots (a QP's RQ and an SRQ share the format).

use crate::ib::ring::SharedRing;
use crate::logic::transport as tp;
use crate::logic::transport::{RecvTake, RecvWr};
use crate::uapi;
use crate::uapi::{RingHeader, Sge};
use core::mem::{offset_of, size_of, size_of_val};
use kernel::prelude::*;

pub(super) const PROD: usize = offset_of!(RingHeader, producer);

pub(super) const CONS: usize = offset_of!(RingHeader, consumer);

pub(super) const FLAGS: usize = offset_of!(RingHeader, flags);

pub(super) const HDR: usize = uapi::RING_HEADER_SIZE;

/// Writes a receive WQE into the slot at `off`.
pub(super) fn write_recv_slot(
    r: &SharedRing,
    off: usize,
    slot_size: usize,
    wr_id: u64,
    sges: &[Sge],
) -> Result {
    let body = off + size_of::<uapi::RecvWqe>();
    if body + size_of_val(sges) > off + slot_size {
        return Err(EINVAL);
    }
    r.write(off, &tp::encode_recv_wqe(wr_id, sges.len() as u32))?;
    for (i, s) in sges.iter().enumerate() {
        r.write(body + i * size_of::<Sge>(), &tp::encode_sge(s))?;
    }
    Ok(())
}

/// Takes the next receive WQE from a ring whose kernel-side consumer index is `cons`. A
/// producer index out of range breaks the ring for good: `broken` latches, this call answers
/// [`RecvTake::Bad`] (the engine moves the QP to ERR once) and later calls [`RecvTake::Empty`]
/// without reading the ring again.
pub(super) fn take_from_ring(
    ring: &SharedRing,
    slots: u32,
    slot_size: usize,
    cons: &mut u32,
    broken: &mut bool,
    max_sge: u32,
    out: &mut RecvWr,
) -> RecvTake {
    if *broken {
        return RecvTake::Empty;
    }
    let prod = ring.load_acquire(PROD);
    let avail = prod.wrapping_sub(*cons);
    if avail == 0 {
        return RecvTake::Empty;
    }
    if avail > slots {
        // The producer index is garbage: this process broke its own queue.
        *broken = true;
        return RecvTake::Bad;
    }
    let mut buf = [0u8; uapi::recv_slot_size(crate::logic::limits::MAX_SGE)];
    let n = slot_size.min(buf.len());
    let off = HDR + (*cons & (slots - 1)) as usize * slot_size;
    let ok = ring.read(off, &mut buf[..n]).is_ok();
    *cons = cons.wrapping_add(1);
    ring.store_release(CONS, *cons);
    match (ok, RecvWr::decode(&buf[..n], max_sge)) {
        (true, Some(w)) => {
            *out = w;
            RecvTake::Taken
        }
        _ => RecvTake::Bad,
    }
}
