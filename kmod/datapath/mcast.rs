// SPDX-License-Identifier: GPL-2.0-only
//! Multicast (UD): attach and detach, the netdev's link-layer filter, and the groups' members
//! for the receive fan-out (`rx.rs`).
//!
//! ib_core has checked a QP is UD and a GID multicast before `attach_mcast`, and holds the QP
//! (`usecnt`) while it is attached, so a QP cannot be destroyed with a group still naming it.
//! Groups are found by the destination GID of a packet sent to QP 0xFFFFFF; each attached QP
//! then receives it as if addressed to it (its own Q_Key and state checks apply).
//!
//! A packet sent to a group with members on this device is delivered to them by the driver
//! itself (see `Env::emit`), as an HCA loops multicast back to its own QPs; the RoCEv2 socket
//! keeps the UDP-tunnel default of no IP multicast loopback, so no second copy comes back
//! through the stack.
//!
//! For remote senders the IP-level membership (IGMP, and the stack accepting the group's
//! datagrams) is the caller's: rdma_cm joins IPv4 groups itself on RoCEv2, as it does for
//! rdma_rxe. What the driver adds is the Ethernet filter (`dev_mc_add` of the group's MAC),
//! held while the group has members.

use crate::ib::{bh::with_bh_disabled, netdev::NetDevRef};
use crate::logic::mcast::{self, Change, Group, McastError, Table, GROUP_QPS};
use kernel::{new_mutex, new_spinlock, prelude::*, sync::Mutex, sync::SpinLock};

/// The device's multicast groups.
#[pin_data(PinnedDrop)]
pub(crate) struct Mcast {
    /// Serialises attach and detach (which sleep: storage growth, the netdev filter), so a
    /// group's filter is added and removed in the order its table changes were made.
    #[pin]
    ctl: Mutex<()>,
    /// The groups, read by the receive path (softirq) under this lock.
    #[pin]
    table: SpinLock<Table<KVVec<Group>>>,
    netdev: NetDevRef,
}

fn errno_of(e: McastError) -> Error {
    crate::ib::errno(e.errno())
}

impl Mcast {
    /// No groups yet; `netdev` is the device whose filter the groups' MACs go into.
    pub(crate) fn new(netdev: NetDevRef) -> impl PinInit<Self, Error> {
        try_pin_init!(Mcast {
            ctl <- new_mutex!((), "rrxe:mcast_ctl"),
            table <- new_spinlock!(Table::new(KVVec::new()), "rrxe:mcast"),
            netdev,
        }? Error)
    }

    /// Attaches UD QP `qpn` to the group `gid` (process context).
    pub(crate) fn attach(&self, gid: [u8; 16], qpn: u32) -> Result {
        let mac = mcast::mac_of(gid).ok_or(EINVAL)?;
        let _ctl = self.ctl.lock();
        let change = loop {
            match with_bh_disabled(|| self.table.lock().attach(gid, qpn)) {
                Err(McastError::NoRoom) => self.grow()?,
                r => break r.map_err(errno_of)?,
            }
        };
        if change == Change::GroupCreated {
            if let Err(e) = self.netdev.mc_add(&mac) {
                // Undo: the group has this one attachment only.
                let _ = with_bh_disabled(|| self.table.lock().detach(gid, qpn));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Ends one attachment of `qpn` to `gid` (process context).
    pub(crate) fn detach(&self, gid: [u8; 16], qpn: u32) -> Result {
        let mac = mcast::mac_of(gid).ok_or(EINVAL)?;
        let _ctl = self.ctl.lock();
        let change = with_bh_disabled(|| self.table.lock().detach(gid, qpn)).map_err(errno_of)?;
        if change == Change::GroupRemoved {
            self.netdev.mc_del(&mac);
        }
        Ok(())
    }

    /// Doubles the storage (called with `ctl` held, so nothing else changes the table; the
    /// receive path only reads it). The new slots are allocated outside the spinlock; the copy
    /// into them happens under it.
    fn grow(&self) -> Result {
        let cap = with_bh_disabled(|| self.table.lock().grown_capacity());
        let bigger = KVVec::from_elem(Group::EMPTY, cap, GFP_KERNEL_ACCOUNT)?;
        let old = with_bh_disabled(|| self.table.lock().regrow(bigger));
        // The old storage (or, if someone else grew it meanwhile, which `ctl` rules out, the
        // new one) is freed here, outside the spinlock.
        drop(old);
        Ok(())
    }

    /// Whether a QP of this device is attached to `gid` (any context).
    pub(crate) fn has_members(&self, gid: &[u8; 16]) -> bool {
        with_bh_disabled(|| self.table.lock().has_group(gid))
    }

    /// The QPs attached to `gid`, copied into `out`; returns how many (receive path, bottom
    /// halves disabled).
    pub(super) fn members(&self, gid: &[u8; 16], out: &mut [u32; GROUP_QPS]) -> usize {
        self.table.lock().members(gid, out)
    }
}

#[pinned_drop]
impl PinnedDrop for Mcast {
    fn drop(self: Pin<&mut Self>) {
        // ib_core detaches every QP before it destroys it, so no group should remain; if one
        // does (a kernel consumer that never detached), the netdev filter is still given back.
        let t = with_bh_disabled(|| {
            let mut g = self.table.lock();
            core::mem::replace(&mut *g, Table::new(KVVec::new()))
        });
        for gid in t.gids() {
            if let Some(mac) = mcast::mac_of(gid) {
                self.netdev.mc_del(&mac);
            }
        }
    }
}
