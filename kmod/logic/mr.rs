// SPDX-License-Identifier: GPL-2.0-only
//! Memory region rules.

use super::errno::EINVAL;
use super::qp_attr::access;

/// Access bits an MR may carry: local write, the remote rights, memory-window binding, RDMA
/// FLUSH with the global visibility placement type, zero-based and huge-page hints, plus the "optional" range that
/// devices may ignore (`IB_ACCESS_RELAXED_ORDERING` ...; perftest sets it).
pub const MR_ACCEPTED: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND
    | access::FLUSH_GLOBAL
    | access::ZERO_BASED
    | access::HUGETLB
    | access::OPTIONAL;

/// Checks MR access flags; the positive errno on refusal. Remote write or atomic without local
/// write is invalid (IBTA o10-23); on-demand paging (explicit ODP MRs) is accepted;
/// `FLUSH_PERSISTENT` is invalid, as rdma_rxe refuses it for memory that is not persistent
/// memory (rrxe registers no persistent memory); unknown bits are invalid.
pub const fn check_mr_access(flags: u32) -> Result<(), i32> {
    if flags & !(MR_ACCEPTED | access::ON_DEMAND) != 0 {
        return Err(EINVAL);
    }
    if flags & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
        && flags & access::LOCAL_WRITE == 0
    {
        return Err(EINVAL);
    }
    Ok(())
}

/// Checks an MR's address range: non-empty, no wrap-around, within `max_mr_size`.
pub const fn check_mr_range(
    start: u64,
    length: u64,
    iova: u64,
    max_mr_size: u64,
) -> Result<(), i32> {
    if length == 0 || length > max_mr_size {
        return Err(EINVAL);
    }
    if start.checked_add(length).is_none() || iova.checked_add(length).is_none() {
        return Err(EINVAL);
    }
    Ok(())
}

/// How an access reaches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Gathering a local SGE (lkey).
    LocalRead,
    /// Scattering into a local SGE (lkey; the MR needs LOCAL_WRITE).
    LocalWrite,
    /// RDMA READ target (rkey, REMOTE_READ).
    RemoteRead,
    /// RDMA WRITE target (rkey, REMOTE_WRITE).
    RemoteWrite,
    /// Atomic target (rkey, REMOTE_ATOMIC).
    RemoteAtomic,
}

impl Access {
    /// The MR rights (`IB_ACCESS_*`) this access needs.
    pub const fn rights(self) -> u32 {
        match self {
            Access::LocalRead => 0,
            Access::LocalWrite => access::LOCAL_WRITE,
            Access::RemoteRead => access::REMOTE_READ,
            Access::RemoteWrite => access::REMOTE_WRITE,
            Access::RemoteAtomic => access::REMOTE_ATOMIC,
        }
    }
}

/// Why a memory access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// No MR with that key (or a stale key).
    BadKey,
    /// The MR belongs to another PD.
    BadPd,
    /// Outside the MR.
    Bounds,
    /// The MR lacks the right.
    Access,
    /// An on-demand-paging MR's page is not present now: nothing was accessed; the shell has
    /// queued the fault (process context), and the access is to be tried again later.
    NotPresent,
}

/// An atomic operation on 8 bytes of registered memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare and swap.
    CmpSwap { compare: u64, swap: u64 },
    /// Fetch and add.
    FetchAdd { add: u64 },
    /// ATOMIC WRITE (IBTA 1.5): the 8 bytes are stored as one, after every earlier placement
    /// (a release store); the target needs REMOTE_WRITE, not REMOTE_ATOMIC.
    Write { value: u64 },
}

impl AtomicOp {
    /// The access an atomic of this kind is checked for.
    pub const fn access(self) -> Access {
        match self {
            AtomicOp::Write { .. } => Access::RemoteWrite,
            _ => Access::RemoteAtomic,
        }
    }
}
