// SPDX-License-Identifier: GPL-2.0-only
//! The per-device data-path state: the QP, MR, window and AH tables, the loopback buffer pool,
//! the RoCEv2 socket and the multicast groups, shared with the receive path.
//!
//! A QP holds its device's fabric, and the fabric's QP table holds QPs: the table's entry type
//! is a parameter (`Q`, the QP's data-path half, which the receive dispatch reaches through
//! `rx::Receive`), so that this file, below the QP, never names it.

use crate::datapath::{
    loopback::{Outbox, Pool},
    mcast::Mcast,
    mr::MrInner,
    mw::MwInner,
    path::{AhInner, Path},
    stats::DevStats,
    table::Table,
};
use crate::ib::{
    bh::with_bh_disabled,
    inflight::{Gauge, TxWaker},
    netdev::NetDev,
    udp::{LazyUdp, TxPath, XmitError},
};
use crate::logic::stats::Stat;
use crate::logic::{
    dcqcn,
    mw::{self, MrRef},
    roce, wire,
};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::{
    new_spinlock,
    sync::{Arc, SpinLock},
};

/// Per-device data-path state, shared with the receive path; `Q` is the QP table's entry.
#[pin_data]
pub(crate) struct Fabric<Q> {
    #[pin]
    pub(crate) qps: Table<Q>,
    #[pin]
    pub(crate) mrs: Table<MrInner>,
    #[pin]
    pub(crate) ahs: Table<AhInner>,
    /// Memory windows, by key index (MRs and windows take their indices from one allocator,
    /// so an index is in one table at most).
    #[pin]
    pub(crate) mws: Table<MwInner>,
    /// The next QP identity (`QpInner::serial`): what a type-2 window is tied to (a QP number
    /// is reused, this never).
    pub(crate) qp_serial: AtomicU64,
    /// Device-wide data-path counters (`rdma statistic`).
    pub(crate) stats: Arc<DevStats>,
    /// SQ/RQ/SRQ rings found with an index out of range (a process broke its own queue).
    pub(crate) bad_rings: AtomicU64,
    /// DCQCN's parameters (`logic::dcqcn`), written by the `dcqcn` sysfs file under this
    /// lock. The data path does not take it per packet: a QP keeps a copy ([`DcqcnCopy`]) and
    /// takes it again only when [`Fabric::dcqcn_gen`] moved on.
    #[pin]
    pub(crate) dcqcn: SpinLock<dcqcn::Params>,
    /// Bumped (under the `dcqcn` lock) by every write of the settings: a QP whose copy has an
    /// older generation refreshes it.
    pub(crate) dcqcn_gen: AtomicU64,
    /// Packets leave ECN-capable (ECT(0)); CE-marked arrivals make CNPs.
    pub(crate) ecn: AtomicBool,
    /// QPs react to CNPs: rate cuts, and RC requests paced to the rate.
    pub(crate) cc: AtomicBool,
    /// Free loopback packet buffers (`loopback::POOL_BUFS` in all, lent to deliveries).
    #[pin]
    pub(super) pool: SpinLock<Pool>,
    /// The RoCEv2 socket of the netdev's namespace, opened on first use.
    #[pin]
    pub(crate) udp: LazyUdp,
    /// Multicast groups and their attached UD QPs.
    #[pin]
    pub(crate) mcast: Mcast,
}

impl<Q: Send + Sync> Fabric<Q> {
    pub(crate) fn new(netdev: &NetDev, stats: Arc<DevStats>) -> Result<impl PinInit<Self, Error>> {
        let (q, m, a, w) = (
            Table::new(crate::logic::limits::MAX_QP + 64)?,
            Table::new(crate::logic::limits::MAX_MR + 64)?,
            Table::new(crate::logic::limits::MAX_AH + 64)?,
            Table::new(crate::logic::limits::MAX_MR + 64)?,
        );
        let udp = LazyUdp::new(netdev);
        let mcast = Mcast::new(crate::ib::netdev::NetDevRef::new(netdev));
        let bufs = Pool::new()?;
        Ok(try_pin_init!(Fabric {
            qps <- q,
            mrs <- m,
            ahs <- a,
            mws <- w,
            qp_serial: AtomicU64::new(1),
            stats,
            bad_rings: AtomicU64::new(0),
            dcqcn <- new_spinlock!(dcqcn::Params::default(), "rrxe:dcqcn"),
            dcqcn_gen: AtomicU64::new(1),
            ecn: AtomicBool::new(true),
            cc: AtomicBool::new(true),
            pool <- new_spinlock!(bufs, "rrxe:lbpool"),
            udp <- udp,
            mcast <- mcast,
        }? Error))
    }

    /// An empty loopback queue for a delivery that may generate `bulk` bulk packets, driven by
    /// the doorbell of QP `driver` if any.
    pub(super) fn outbox(&self, bulk: u32, driver: Option<&Q>) -> Outbox<'_> {
        Outbox::new(&self.pool, bulk, driver)
    }

    /// Opens the UDP socket if a path needs the wire (process context). `EADDRINUSE` when
    /// another driver (rdma_rxe) holds UDP port 4791 in this namespace, except for a multicast
    /// path (its members on this device are reached without the socket).
    pub(crate) fn need_wire(&self, path: &Path) -> Result {
        if path.loopback {
            return Ok(());
        }
        let opened = self.udp.open();
        if path.multicast {
            // A group's members on this device are reached without the socket.
            return Ok(());
        }
        opened
    }

    /// The DCQCN settings as the device's `dcqcn` sysfs file shows them.
    pub(crate) fn dcqcn_settings(&self) -> dcqcn::Settings {
        dcqcn::Settings {
            ecn: self.ecn.load(Ordering::Relaxed),
            cc: self.cc.load(Ordering::Relaxed),
            params: with_bh_disabled(|| *self.dcqcn.lock()),
        }
    }

    /// A write to the `dcqcn` file: one `name value` line; `EINVAL`, changing nothing, for
    /// an unknown name or a value out of range.
    pub(crate) fn set_dcqcn(&self, line: &[u8]) -> Result {
        with_bh_disabled(|| {
            let mut p = self.dcqcn.lock();
            let mut s = dcqcn::Settings {
                ecn: self.ecn.load(Ordering::Relaxed),
                cc: self.cc.load(Ordering::Relaxed),
                params: *p,
            };
            s.apply(line).map_err(|_| EINVAL)?;
            *p = s.params;
            self.ecn.store(s.ecn, Ordering::Relaxed);
            self.cc.store(s.cc, Ordering::Relaxed);
            // Release: a QP that sees the new generation sees the switches stored above (and
            // takes the lock, so the parameters too).
            self.dcqcn_gen.fetch_add(1, Ordering::Release);
            Ok(())
        })
    }

    /// Brings a QP's copy of the DCQCN settings up to date: one atomic load when it is, the
    /// `dcqcn` lock once per settings write when not. Called under the QP lock (the `dcqcn`
    /// lock nests inside it, never the other way).
    pub(crate) fn dcqcn_refresh(&self, c: &mut DcqcnCopy) {
        let gen = self.dcqcn_gen.load(Ordering::Acquire);
        if gen != c.gen {
            self.dcqcn_reload(c, gen);
        }
    }

    /// Takes a fresh copy of the settings at generation `gen` (read before the lock: a write
    /// that races with this bumps it again, so the next refresh catches it).
    #[cold]
    pub(crate) fn dcqcn_reload(&self, c: &mut DcqcnCopy, gen: u64) {
        c.settings.params = with_bh_disabled(|| *self.dcqcn.lock());
        c.settings.ecn = self.ecn.load(Ordering::Relaxed);
        c.settings.cc = self.cc.load(Ordering::Relaxed);
        c.gen = gen;
    }

    /// A QP's DCQCN rate limit started (`true`) or ended: the `rate_limited_qps` gauge.
    pub(crate) fn rate_limited(&self, on: bool) {
        if on {
            self.stats.add(Stat::RateLimitedQps, 1);
        } else {
            self.stats.sub(Stat::RateLimitedQps, 1);
        }
    }

    /// A window stopped using MR `mr` (unbound, invalidated or deallocated): one window fewer
    /// keeps it registered. Nothing if the MR is gone (bottom halves disabled).
    pub(crate) fn unbind_mr(&self, mr: MrRef) {
        if let Some(m) = self.mrs.get(mr.index).filter(|m| m.key == mr.key) {
            let _ = m
                .windows
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                    Some(mw::mr_unbind_ref(c))
                });
        }
    }

    /// Opens the UDP socket for receiving (process context), whatever the paths.
    pub(crate) fn open_wire(&self) -> Result {
        self.udp.open()
    }

    /// Sends a packet on the wire; `false` when it was not sent (no source GID, or the stack
    /// refused or dropped it).
    pub(super) fn send<T: TxWaker>(
        &self,
        path: &Path,
        sport: u16,
        pkt: &[u8],
        gauge: &Arc<Gauge<T>>,
    ) -> Result<(), XmitError> {
        let Some(sgid) = path.av.sgid.map(|s| s.gid) else {
            return Err(XmitError::Failed(EINVAL));
        };
        let tx = TxPath {
            sgid,
            dgid: path.av.dgid,
            is_v4: matches!(roce::gid_to_addr(sgid), roce::GidAddr::V4(_)),
            udp_sport: sport,
            tclass: dcqcn::tos(
                path.av.traffic_class,
                self.ecn.load(Ordering::Relaxed),
                pkt.first() == Some(&wire::CNP_OPCODE),
            ),
            hop_limit: path.hop_limit,
            flow_label: path.av.flow_label,
        };
        self.udp.xmit(&tx, pkt, Some(gauge))
    }
}

/// A QP's copy of its device's DCQCN settings (under the QP lock), so that its packets take
/// no device-wide lock: [`Fabric::dcqcn_refresh`] renews it when the settings change.
#[derive(Clone, Copy)]
pub(crate) struct DcqcnCopy {
    /// The device's [`Fabric::dcqcn_gen`] when copied; 0 (never a generation) before the
    /// first copy.
    pub(crate) gen: u64,
    pub(crate) settings: dcqcn::Settings,
}

impl DcqcnCopy {
    /// Stale: the first refresh copies.
    pub(crate) fn new() -> Self {
        DcqcnCopy {
            gen: 0,
            settings: dcqcn::Settings::default(),
        }
    }
}
