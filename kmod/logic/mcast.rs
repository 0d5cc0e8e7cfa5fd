// SPDX-License-Identifier: GPL-2.0-only
//! Multicast groups: which UD QPs are attached to which group, and the MAC address a group's
//! packets carry on Ethernet.
//!
//! The table keeps its groups sorted by GID in caller-provided storage (`S`, anything that
//! derefs to a slice of [`Group`] slots, of which the first `len` are in use), so a received
//! multicast packet finds its group by binary search, and the kernel shell can allocate bigger
//! storage outside any lock ([`Table::regrow`]). Attachments are counted per (group, QP): each successful
//! `attach` is undone by one `detach`, which is what ib_core's `usecnt` on the QP assumes.

use super::errno;
use super::limits::{MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH};
use super::roce::{self, GidAddr};
use core::ops::DerefMut;

/// Attachments a group can hold (`max_mcast_qp_attach`).
pub const GROUP_QPS: usize = MAX_MCAST_QP_ATTACH as usize;

/// Why an attach or a detach was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McastError {
    /// The GID is not a multicast address (`EINVAL`).
    NotMulticast,
    /// The group is full, or the device has `max_mcast_grp` groups already (`ENOMEM`, as
    /// rdma_rxe answers).
    Full,
    /// The storage has no free slot for a new group: grow it and try again.
    NoRoom,
    /// Detach of a QP that is not attached to the group (`EINVAL`).
    NotAttached,
}

impl McastError {
    /// The positive errno an attach or a detach fails with.
    pub const fn errno(self) -> i32 {
        match self {
            McastError::NotMulticast | McastError::NotAttached => errno::EINVAL,
            McastError::Full | McastError::NoRoom => errno::ENOMEM,
        }
    }
}

/// What an attach or a detach did to the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The first attachment created the group: the netdev must start accepting its MAC.
    GroupCreated,
    /// The last detach removed the group: the netdev may stop accepting its MAC.
    GroupRemoved,
    /// The group stays (another attachment, or one of several counted attachments ended).
    Same,
}

/// One attached QP and how many times it was attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Member {
    qpn: u32,
    refs: u32,
}

/// A multicast group and its attached QPs (the first `n` of `members`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    gid: [u8; 16],
    n: u32,
    members: [Member; GROUP_QPS],
}

impl Group {
    /// An unused slot.
    pub const EMPTY: Group = Group {
        gid: [0; 16],
        n: 0,
        members: [Member { qpn: 0, refs: 0 }; GROUP_QPS],
    };

    /// The attached QP numbers.
    fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.members.iter().take(self.n as usize).map(|m| m.qpn)
    }
}

/// The groups of one device, in storage `S` (the first `len` slots, sorted by GID).
pub struct Table<S> {
    slots: S,
    len: usize,
}

impl<S: DerefMut<Target = [Group]>> Table<S> {
    /// An empty table over `slots` (their contents are ignored).
    pub fn new(slots: S) -> Self {
        Table { slots, len: 0 }
    }

    /// Groups in use.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no group exists.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots available, used or not.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn groups(&self) -> &[Group] {
        self.slots.get(..self.len).unwrap_or(&[])
    }

    fn find(&self, gid: &[u8; 16]) -> Result<usize, usize> {
        self.groups().binary_search_by(|g| g.gid.cmp(gid))
    }

    /// Attaches `qpn` to the group `gid`, creating the group if it is new.
    pub fn attach(&mut self, gid: [u8; 16], qpn: u32) -> Result<Change, McastError> {
        if !roce::gid_is_multicast(gid) {
            return Err(McastError::NotMulticast);
        }
        let len = self.len;
        match self.find(&gid) {
            Ok(i) => {
                let g = self.slots.get_mut(i).ok_or(McastError::NoRoom)?;
                let n = g.n as usize;
                if let Some(m) = g.members.iter_mut().take(n).find(|m| m.qpn == qpn) {
                    m.refs = m.refs.checked_add(1).ok_or(McastError::Full)?;
                    return Ok(Change::Same);
                }
                let m = g.members.get_mut(n).ok_or(McastError::Full)?;
                *m = Member { qpn, refs: 1 };
                g.n += 1;
                Ok(Change::Same)
            }
            Err(i) => {
                if len >= MAX_MCAST_GRP as usize {
                    return Err(McastError::Full);
                }
                let slots = &mut *self.slots;
                if len >= slots.len() {
                    return Err(McastError::NoRoom);
                }
                // Open slot `i` by moving `i..len` one up (slot `len` is free).
                let open = slots.get_mut(i..=len).ok_or(McastError::NoRoom)?;
                open.rotate_right(1);
                let mut g = Group::EMPTY;
                g.gid = gid;
                g.n = 1;
                g.members[0] = Member { qpn, refs: 1 };
                open[0] = g;
                self.len = len + 1;
                Ok(Change::GroupCreated)
            }
        }
    }

    /// Ends one attachment of `qpn` to the group `gid`.
    pub fn detach(&mut self, gid: [u8; 16], qpn: u32) -> Result<Change, McastError> {
        if !roce::gid_is_multicast(gid) {
            return Err(McastError::NotMulticast);
        }
        let i = self.find(&gid).map_err(|_| McastError::NotAttached)?;
        let len = self.len;
        let slots = &mut *self.slots;
        let g = slots.get_mut(i).ok_or(McastError::NotAttached)?;
        let n = g.n as usize;
        let k = g
            .members
            .iter()
            .take(n)
            .position(|m| m.qpn == qpn)
            .ok_or(McastError::NotAttached)?;
        let live = g.members.get_mut(k..n).ok_or(McastError::NotAttached)?;
        live[0].refs = live[0].refs.saturating_sub(1);
        if live[0].refs > 0 {
            return Ok(Change::Same);
        }
        // Remove member `k`; the order of members carries no meaning.
        live.rotate_left(1);
        g.n -= 1;
        if g.n > 0 {
            return Ok(Change::Same);
        }
        if let Some(tail) = slots.get_mut(i..len) {
            tail.rotate_left(1);
        }
        self.len = len - 1;
        Ok(Change::GroupRemoved)
    }

    /// Whether the group `gid` exists (has at least one attached QP).
    pub fn has_group(&self, gid: &[u8; 16]) -> bool {
        self.find(gid).is_ok()
    }

    /// Copies the QP numbers attached to `gid` into `out`; returns how many (0: no group).
    pub fn members(&self, gid: &[u8; 16], out: &mut [u32; GROUP_QPS]) -> usize {
        let Ok(i) = self.find(gid) else {
            return 0;
        };
        let Some(g) = self.groups().get(i) else {
            return 0;
        };
        let mut k = 0;
        for (o, q) in out.iter_mut().zip(g.qpns()) {
            *o = q;
            k += 1;
        }
        k
    }

    /// The GIDs of every group (teardown: the netdev filters to drop).
    pub fn gids(&self) -> impl Iterator<Item = [u8; 16]> + '_ {
        self.groups().iter().map(|g| g.gid)
    }

    /// The capacity to grow to when an attach found [`McastError::NoRoom`].
    pub fn grown_capacity(&self) -> usize {
        (self.capacity() * 2).clamp(4, MAX_MCAST_GRP as usize)
    }

    /// Moves the groups into `bigger` (at least [`Self::len`] slots) and returns the old
    /// storage, or gives `bigger` back if it is too small.
    pub fn regrow(&mut self, mut bigger: S) -> Result<S, S> {
        let len = self.len;
        match bigger.get_mut(..len) {
            // (`zip`, not `copy_from_slice`: no length-mismatch panic path, whose noreturn call
            // 6.12's objtool does not recognise.)
            Some(dst) => dst.iter_mut().zip(self.groups()).for_each(|(d, g)| *d = *g),
            None => return Err(bigger),
        }
        Ok(core::mem::replace(&mut self.slots, bigger))
    }
}

/// The Ethernet destination address of a multicast group (RFC 1112 and RFC 2464: the low 23
/// bits of an IPv4 group after `01:00:5e`, the low 32 bits of an IPv6 group after `33:33`), or
/// `None` if `gid` is not a multicast address.
pub fn mac_of(gid: [u8; 16]) -> Option<[u8; 6]> {
    if !roce::gid_is_multicast(gid) {
        return None;
    }
    Some(match roce::gid_to_addr(gid) {
        GidAddr::V4(a) => [0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]],
        GidAddr::V6(g) => [0x33, 0x33, g[12], g[13], g[14], g[15]],
    })
}
