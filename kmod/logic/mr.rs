// SPDX-License-Identifier: GPL-2.0-only
//! Memory region rules.

use super::errno::{EINVAL, EOPNOTSUPP};
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
/// write is invalid (IBTA o10-23); on-demand paging is not supported;
/// `FLUSH_PERSISTENT` is invalid, as rdma_rxe refuses it for memory that is not persistent
/// memory (rrxe registers no persistent memory); unknown bits are invalid.
pub const fn check_mr_access(flags: u32) -> Result<(), i32> {
    if flags & access::ON_DEMAND != 0 {
        return Err(EOPNOTSUPP);
    }
    if flags & !MR_ACCEPTED != 0 {
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
