// SPDX-License-Identifier: GPL-2.0-only
//! The storage of the responder's resources: how many a QP uses for its `max_dest_rd_atomic`,
//! and the larger storage a modify hands the engine (the QP starts with none).

use super::*;

/// Responder resources a responder with `max_dest_rd_atomic` uses at most: rounded up to a
/// power of two (0 stays 0), as rdma_rxe sizes its own, and at most
/// [`limits::MAX_QP_RD_ATOM`](crate::logic::limits::MAX_QP_RD_ATOM).
pub fn resources_for(max_dest_rd_atomic: u8) -> usize {
    match max_dest_rd_atomic {
        0 => 0,
        n => usize::from(n)
            .next_power_of_two()
            .min(crate::logic::limits::MAX_QP_RD_ATOM as usize),
    }
}

impl<R: DerefMut<Target = [Resource]>> Responder<R> {
    /// Moves the resources into `new` if it has room for more, oldest first, and returns the
    /// storage not kept: the old one, or `new` itself if it was not larger. Nothing in use is
    /// lost, and a resource's place in the age order is all that refers to it.
    pub(super) fn regrow(&mut self, mut new: R) -> R {
        if new.len() <= self.res.len() {
            return new;
        }
        for (k, slot) in new.iter_mut().enumerate() {
            *slot = if k < self.res_len {
                self.res[self.at(k)]
            } else {
                Resource::default()
            };
        }
        self.res_head = 0;
        core::mem::replace(&mut self.res, new)
    }
}

impl<B, M, R> Engine<B, M, R>
where
    B: DerefMut<Target = [u8]>,
    M: DerefMut<Target = [SqEntry]>,
    R: DerefMut<Target = [Resource]>,
{
    /// Responder resources in use at most: `max_dest_rd_atomic` rounded up to a power of two
    /// (0 stays 0), as rdma_rxe sizes its own (`rxe_qp_from_attr`), at most the resources
    /// there are. A peer whose requester is rdma_rxe rounds its `max_rd_atomic` up the same
    /// way: set to 3, it keeps 4 READs outstanding, and a responder with room for 3 would
    /// refuse the fourth (NAK Invalid Request, the QP in ERR).
    pub(super) fn capacity(&self) -> usize {
        resources_for(self.cfg.max_dest_rd_atomic).min(self.resp.res.len())
    }

    /// Responder resources there is storage for.
    pub fn resource_storage(&self) -> usize {
        self.resp.res.len()
    }

    /// Gives the responder the storage `new` if it is larger than what it has (the resources in
    /// use move into it), and returns the storage not kept, for the caller to free. The shell
    /// grows the storage to [`resources_for`] when a modify raises `max_dest_rd_atomic`, so a
    /// QP that never takes a READ or an atomic holds no resources.
    pub fn grow_resources(&mut self, new: R) -> R {
        self.resp.regrow(new)
    }
}
