// SPDX-License-Identifier: GPL-2.0-only
//! Receive dispatch: a packet from the wire (UDP receive softirq) or from a loopback delivery,
//! parsed and handed to its QP, or to every UD QP attached to its multicast group.

use crate::datapath::{
    fabric::Fabric,
    loopback::{deliver, Outbox},
    mcast,
    qp::BUDGET,
};
use crate::logic::{
    dcqcn, iphdr,
    stats::Stat,
    transport::RxInfo,
    wire::{self, Packet},
};

/// Bulk packets one packet from the wire may trigger (an ACK opening the window).
pub(super) const RX_BULK: u32 = 4 * BUDGET;

/// Handles one packet (BTH .. ICRC, ICRC already checked or not needed). `info.grh` is the GRH
/// a UD receiver gets (loopback packets synthesise one); `ce`: the IP header carried
/// Congestion Experienced. A CNP goes to its QP's DCQCN reaction point.
pub(super) fn rx_packet(
    fabric: &Fabric,
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
        mcast::fan_out(fabric, &info.dst, |qpn| {
            if let Some(qp) = fabric.qps.get(qpn) {
                qp.rx(&pkt, info, ce, out);
            }
        });
        return;
    }
    let Some(qp) = fabric.qps.get(dest_qp) else {
        fabric.stats.add(Stat::RxUnknownQp, 1);
        return;
    };
    qp.rx(&pkt, info, ce, out);
}

/// Packets from the wire (softirq): the device's entry in the receive table.
impl crate::ib::rxtable::Receiver for Fabric {
    fn receive(&self, meta: &crate::ib::rxtable::RxMeta, pkt: &[u8]) {
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
        let mut out = Outbox::new(self, RX_BULK, None);
        rx_packet(self, pkt, &info, dcqcn::is_ce(meta.tclass), &mut out);
        deliver(self, &mut out);
    }
}
