//! The provider half of the data path's shared-memory queues (wired into the verbs by `cq`, `qp`
//! and `srq`).
//!
//! Every queue is one mapping laid out as in `rrxe_uapi`: a
//! [`RingHeader`](rrxe_uapi::RingHeader) (producer index on cache line 0, consumer index on line 1, geometry and flags on line 2), then `slots` slots of
//! `slot_size` bytes. Indices are free-running `u32` counters, masked with `slots - 1` on use:
//! empty is `producer == consumer`, full is `producer - consumer == slots` (wrapping). The
//! producer fills a slot, then publishes `producer + 1` with a release store; the consumer
//! reads the producer index with an acquire load, copies the slot out, then publishes
//! `consumer + 1` with a release store.
//!
//! | ring | type | provider | kernel | syscall |
//! |---|---|---|---|---|
//! | CQ | [`CqRing`] | consumes `Cqe`s in `poll_cq` | produces | none |
//! | SQ | [`SqRing`] | produces `SendWqe` + `Sge`s / inline bytes in `post_send` | consumes | at most one doorbell per `post_send` |
//! | RQ, SRQ | [`RqRing`] | produces `RecvWqe` + `Sge`s in `post_recv` | consumes | none |
//!
//! The provider keeps its own index (the one it publishes) in private memory and never reads
//! it back from the mapping; the other side's index is read from the mapping and bounded
//! before use (an index that claims more than `slots` entries is [`RingError::Corrupt`],
//! never an out-of-bounds access). Slot addresses are computed from the geometry checked once
//! at construction, never from the mapping.
//!
//! # The send doorbell and `SQ_FLAG_KERNEL_BUSY`
//!
//! `post_send` writes as many WQEs as fit, publishes the producer index **once**, and then
//! decides whether to ring the doorbell (one `write()` of `IB_USER_VERBS_CMD_POST_SEND` with
//! `wr_count == 0`, modelled by [`SendHooks::doorbell`]):
//!
//! ```text
//! provider (post_send, under the SQ lock)      kernel (the SQ drainer, one pass at a time per QP)
//! ---------------------------------------      --------------------------------------------------
//! write the slots                              on a doorbell (or any other reason to run):
//! P1 producer.store(p, Release)                  K0 WRITE_ONCE(hdr->flags, BUSY)  
//! P2 fence(SeqCst)                               loop {
//! P3 busy = flags.load() & BUSY                       while cons != smp_load_acquire(&hdr->producer):
//! (unlock)                                               copy the slot out, bound it, process it;
//! P4 if !busy { doorbell() }   // at most once           smp_store_release(&hdr->consumer, ++cons)
//!                                                    K1 WRITE_ONCE(hdr->flags, 0)      
//!                                                    K2 smp_mb()
//!                                                    K3 if smp_load_acquire(&hdr->producer) == cons: break (sleep)
//!                                                       else: WRITE_ONCE(hdr->flags, BUSY); continue
//!                                                }
//! ```
//!
//! P1-P2-P3 and K1-K2-K3 are the two halves of a store-buffering (Dekker) pattern: each side
//! stores, issues a full fence, then loads what the other side stored, so at least one side
//! sees the other's store. Either the provider sees `BUSY` clear and rings, or the kernel's
//! re-check sees the new producer index and keeps draining: a published WQE is never left
//! behind by a sleeping kernel. The kernel must therefore:
//!
//! 1. clear `BUSY` (K1), then `smp_mb()` (K2), then re-read the producer index (K3) before it
//!    stops draining; re-checking before clearing, or not re-checking, loses doorbells
//!    (`tests::protocol_model` finds the interleavings; it also shows that a provider reading
//!    `BUSY` before publishing, which P2 prevents on x86, loses them);
//! 2. set `BUSY` only while a drain that will end in K1-K2-K3 is committed to run;
//! 3. treat a doorbell that arrives while a pass is still running, even after its K3, as a
//!    request for one more full pass (tasklet/work "rerun" semantics, like rxe's
//!    `rxe_sched_task`): the provider may have seen `BUSY` clear at K1 while K3 missed its
//!    producer index, and then its doorbell is the only thing left to wake the kernel;
//! 4. treat the flag word and the producer index as untrusted user memory: bound
//!    `producer - consumer <= slots`, copy each slot out before parsing, bound every count.
//!
//! The doorbell itself is a `POST_SEND` write with `wr_count == 0` and `sge_count == 0`;
//! uverbs still requires `wqe_size >= sizeof(struct ib_uverbs_send_wr)`, and then calls
//! `ops.post_send` with `wr == NULL` (as rdma-core's rxe does).
//!
//! # Locking
//!
//! Like rdma-core's per-queue spinlocks: each ring's producer (SQ/RQ) or consumer (CQ) side is
//! behind a `Mutex`, so several threads may post or poll the same queue. The doorbell is rung
//! after the lock is released.

mod cq;
mod mem;
mod rq;
mod sq;
mod wqe;

#[cfg(test)]
pub(crate) mod tests;

use core::ffi::c_int;
use core::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use cq::CqRing;
pub use mem::Mapping;
pub use rq::RqRing;
pub use sq::{SendHooks, SqCaps, SqRing};
pub use wqe::{cqe_to_wc, opcode_allowed, SUPPORTED_SEND_FLAGS, SUPPORTED_SEND_OPCODES};

/// Why a ring operation failed. [`RingError::errno`] gives what the verbs return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// The ring has no free slot (`ENOMEM`, as every provider's `post_send`/`post_recv`).
    Full,
    /// A work request, or the geometry handed to a constructor, is invalid (`EINVAL`).
    Invalid(&'static str),
    /// The other side's index in the mapping is out of range (it claims more than `slots`
    /// entries, or runs behind ours): the ring was scribbled over (`EIO`). Nothing is read or
    /// written out of bounds; the ring stays unusable until the index is sane again.
    Corrupt,
}

impl RingError {
    /// The positive errno for this error.
    pub fn errno(self) -> c_int {
        match self {
            RingError::Full => libc::ENOMEM,
            RingError::Invalid(_) => libc::EINVAL,
            RingError::Corrupt => libc::EIO,
        }
    }
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::Full => f.write_str("ring full"),
            RingError::Invalid(why) => write!(f, "invalid: {why}"),
            RingError::Corrupt => f.write_str("ring index out of range (corrupt mapping)"),
        }
    }
}

/// Locks `m`, ignoring poisoning: the protected state is a plain index that is only ever
/// updated after the work it describes is complete, so it is consistent even after a panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
