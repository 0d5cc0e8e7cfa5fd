// SPDX-License-Identifier: GPL-2.0-only
//! Receive dispatch: a packet from the wire (UDP receive softirq) or from a loopback delivery,
//! parsed and handed to its QP, or to every UD QP attached to its multicast group; and the
//! loopback deliveries themselves.
//!
//! The dispatch sits below the QP: a QP sends into a delivery and then delivers it
//! ([`deliver`]), and a delivery hands packets to QPs. So the dispatch reaches QPs through
//! [`Receive`], which the QP's data-path half implements, and the fabric's QP table holds
//! whatever implements it: nothing here names the QP.

use crate::datapath::{
    fabric::Fabric,
    loopback::{self, Outbox, OUT_CAP, RX_BULK},
};
use crate::ib::rxtable::{Receiver, RxMeta};
use crate::logic::{
    dcqcn, iphdr,
    mcast::GROUP_QPS,
    stats::Stat,
    transport::RxInfo,
    wire::{self, Packet},
};

/// Packets one delivery processes at most (a safety net: the budgets of `loopback.rs` end it
/// sooner).
const DELIVER_MAX: u32 = 8 * (RX_BULK + OUT_CAP as u32);

/// A QP as the receive dispatch reaches it (bottom halves disabled throughout; `out` is the
/// delivery in progress, into which the QP queues what it sends to our own GID).
pub(crate) trait Receive: Send + Sync + 'static {
    /// Handles a packet addressed to this QP. `ce`: it arrived marked Congestion Experienced.
    fn rx(&self, pkt: &Packet<'_>, info: &RxInfo, ce: bool, out: &mut Outbox<'_>);

    /// A CNP for this QP arrived from `src`.
    fn on_cnp(&self, src: &[u8; 16]);

    /// The delivery `out` has delivered the output it held for this QP ([`Outbox::hold`]):
    /// the QP may answer and send again.
    fn delivered(&self, out: &mut Outbox<'_>);
}

/// Handles one packet (BTH .. ICRC, ICRC already checked or not needed). `info.grh` is the GRH
/// a UD receiver gets (loopback packets synthesise one); `ce`: the IP header carried
/// Congestion Experienced. A CNP goes to its QP's DCQCN reaction point.
pub(super) fn rx_packet<Q: Receive>(
    fabric: &Fabric<Q>,
    bytes: &[u8],
    info: &RxInfo,
    ce: bool,
    out: &mut Outbox<'_>,
) {
    if let Some(qpn) = dcqcn::cnp_dest_qp(bytes) {
        fabric.stats.add(Stat::RxCnps, 1);
        match fabric.qps.get(qpn) {
            Some(qp) => qp.on_cnp(&info.src),
            None => fabric.stats.add(Stat::RxUnknownQp, 1),
        }
        return;
    }
    let pkt = match Packet::parse(bytes) {
        Ok(p) => p,
        Err(_) => {
            fabric.stats.add(wire::unparsed_stat(bytes), 1);
            return;
        }
    };
    fabric.stats.add(Stat::RcvdPkts, 1);
    fabric.stats.add(Stat::RcvdBytes, bytes.len() as u64);
    let dest_qp = pkt.bth().dest_qp;
    if dest_qp == wire::MULTICAST_QPN {
        // A copy for each UD QP attached to the destination group (their own checks apply).
        // The members are copied out first, so no QP lock is taken under the group table's.
        let mut qpns = [0u32; GROUP_QPS];
        let n = fabric.mcast.members(&info.dst, &mut qpns);
        if n == 0 {
            fabric.stats.add(Stat::RxUnknownQp, 1);
        }
        for &qpn in qpns.iter().take(n) {
            if let Some(qp) = fabric.qps.get(qpn) {
                qp.rx(&pkt, info, ce, out);
            }
        }
        return;
    }
    let Some(qp) = fabric.qps.get(dest_qp) else {
        fabric.stats.add(Stat::RxUnknownQp, 1);
        return;
    };
    qp.rx(&pkt, info, ce, out);
}

/// Delivers queued loopback packets (and those their processing queues) to `fabric`'s QPs.
pub(super) fn deliver<Q: Receive>(fabric: &Fabric<Q>, out: &mut Outbox<'_>) {
    let mut n = 0u32;
    loop {
        deliver_queue(fabric, out, &mut n);
        // Delivered: the QPs whose output this was get their turns back (and may queue more,
        // within the budget).
        let Some(qpn) = out.unhold() else { break };
        if let Some(qp) = fabric.qps.get(qpn) {
            qp.delivered(out);
        }
    }
}

/// Processes the queue until it is empty (`n`: packets this delivery processed so far).
fn deliver_queue<Q: Receive>(fabric: &Fabric<Q>, out: &mut Outbox<'_>, n: &mut u32) {
    while let Some(buf) = out.pop() {
        *n += 1;
        if *n > DELIVER_MAX {
            fabric.stats.add(Stat::TxDrops, 1);
        } else {
            let (pkt, info) = loopback::unpack(&buf);
            rx_packet(fabric, pkt, &info, false, out);
        }
        out.release(buf);
    }
}

/// Packets from the wire (softirq): the device's entry in the receive table.
impl<Q: Receive> Receiver for Fabric<Q> {
    fn receive(&self, meta: &RxMeta, pkt: &[u8]) {
        if meta.bad_header {
            self.stats.add(Stat::RxBadHeaders, 1);
            return;
        }
        if meta.bad_icrc {
            self.stats.add(Stat::RxIcrcErrors, 1);
            return;
        }
        let grh = iphdr::grh(
            meta.sgid,
            meta.dgid,
            meta.tclass,
            meta.hop_limit,
            meta.flow_label,
            pkt.len(),
        );
        let info = RxInfo {
            grh,
            src: meta.sgid,
            dst: meta.dgid,
        };
        let mut out = self.outbox(RX_BULK, None);
        rx_packet(self, pkt, &info, dcqcn::is_ce(meta.tclass), &mut out);
        deliver(self, &mut out);
    }
}
