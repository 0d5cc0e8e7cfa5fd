// SPDX-License-Identifier: GPL-2.0-only
//! The data-path counters: one list, shared by the engine (which counts per QP and reports to
//! its environment), the kernel shell (which keeps device-wide totals) and `rdma statistic`
//! (which shows them under these names).

/// A data-path counter. The discriminant is the index in [`NAMES`] and in the arrays that hold
/// the values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Stat {
    /// Packets handed to the wire or to local delivery (device-wide: counted by the shell where
    /// they leave; per QP: counted by the engine, refused ones included).
    SentPkts,
    /// Payload-carrying bytes (BTH .. ICRC) sent.
    SentBytes,
    /// Packets received that passed the ICRC and header checks.
    RcvdPkts,
    /// Bytes (BTH .. ICRC) of those packets.
    RcvdBytes,
    /// Request packets sent again (go-back-N after a timeout, a NAK or an implied NAK).
    Retransmits,
    /// Retransmit timer expiries with work outstanding.
    Timeouts,
    /// Expiries passed over because the peer was answering older (duplicate) requests.
    PeerBusyWaits,
    /// Packets sent again only to ask for the ACK of an unsignaled tail that never asked for
    /// one (see `Engine::retry_timer_expired`); not retransmits.
    AckPolls,
    /// PSN sequence NAKs sent by the responder.
    SeqNaksSent,
    /// PSN sequence NAKs received by the requester.
    SeqNaksRcvd,
    /// RNR NAKs sent (no receive WQE).
    RnrNaksSent,
    /// RNR NAKs received.
    RnrNaksRcvd,
    /// Responses that skipped an outstanding READ or atomic (IBTA implied NAK), and READ
    /// responses that arrived past the next expected PSN.
    ImpliedNaks,
    /// Duplicate requests received (answered from the responder resources or re-acknowledged).
    DuplicateRequests,
    /// Duplicate or stale responses received (dropped).
    DuplicateResponses,
    /// Requests received beyond the expected PSN (dropped, one NAK per gap).
    OutOfSeqRequests,
    /// Duplicate READ or atomic requests with no recorded responder resource (dropped).
    DuplicateNoResource,
    /// ACKs sent again after a retransmission episode went quiet (see
    /// `Engine::reack_timer_expired`).
    ReAcks,
    /// WRs completed with RETRY_EXC_ERR.
    RetryExceeded,
    /// WRs completed with RNR_RETRY_EXC_ERR.
    RnrRetryExceeded,
    /// NAKs other than sequence and RNR sent (invalid request, access, operational).
    ErrNaksSent,
    /// Received packets dropped: bad ICRC.
    RxIcrcErrors,
    /// Received packets dropped: malformed headers or lengths.
    RxBadHeaders,
    /// Received packets dropped: no such QP.
    RxUnknownQp,
    /// Received packets dropped: wrong source address, destination address or P_Key for the QP.
    RxAdmissionDrops,
    /// Messages dropped for want of a receive WQE (UC, UD).
    RxNoBuffer,
    /// Packets dropped: the QP's state or transport does not take them.
    RxBadState,
    /// UC/UD messages dropped (PSN gap, length, Q_Key).
    RxDroppedMsgs,
    /// Responses that matched nothing outstanding.
    RxBadResponses,
    /// Packets the stack refused or dropped on transmit (NET_XMIT_DROP/CN, no route, no memory).
    TxDrops,
    /// Times a QP stopped sending because it had 64 packets in the network stack not yet freed
    /// (it resumes when they fall below 16).
    TxInflightWaits,
    /// Completions lost to a full CQ.
    CqOverflows,
    /// Answers to a READ started again for a duplicate of it (a replay from its first or a
    /// later packet, or a rewind of one in progress).
    ReadReplays,
    /// Duplicate READs refused (dropped) because their resource had spent its replays without
    /// the requester getting any further (a captured or spoofed request sent again and again).
    ReadReplaysRefused,
    /// RoCEv2 Congestion Notification Packets received (BTH opcode 0x81): each is handed to
    /// its QP's DCQCN reaction point (`logic::dcqcn`).
    RxCnps,
    /// Packets received with Congestion Experienced in their ECN field.
    RxEcnCe,
    /// CNPs sent (at most one per QP per `np_min_time_between_cnps`).
    TxCnps,
    /// DCQCN rate cuts made (a CNP within `rp_rate_reduce_monitor_period` of the last cut
    /// makes none).
    RateCuts,
    /// Requests held back by a QP's DCQCN rate (sent later, by the pacing timer).
    RatePaced,
    /// Retransmit timer expiries at the RTT-based timeout, before the QP's IBTA `timeout`
    /// ran out (no retry spent; see `Engine::retry_timer_expired`).
    RtoExpiries,
    /// READ responses that arrived past a gap (reordered, or after a loss) and were placed
    /// at once instead of being asked for again.
    ReadResponsesAhead,
    /// RDMA WRITE packets the responder placed past a gap (reordered, or after a loss) at
    /// once; the expected PSN later moves over them without their being sent again.
    WritePacketsAhead,
    /// Requester: single packets sent again on a sequence NAK to a peer that places
    /// out-of-order WRITE packets, instead of going back N.
    SelectiveResends,
    /// Requester: retransmission timeouts that proved spurious (two acknowledgements in a row
    /// of packets the timeout's probe had not sent again); the window they closed went back to
    /// half of what was in flight.
    SpuriousTimeouts,
    /// Requester: RC windows halved for a CNP (at most one cut per window of data; DCQCN
    /// cuts the rate as well, counted as `rate_cuts`).
    CnpWindowCuts,
    /// Accesses that met a page of an on-demand-paging MR that was not present (the fault is
    /// taken in process context; RC requests are answered with an RNR NAK, the requester's
    /// own gather waits, a response is dropped and asked for again, UD drops).
    OdpMisses,
    /// A gauge, not a count: QPs whose rate DCQCN limits now (cut by a CNP and not yet
    /// recovered to the line rate).
    RateLimitedQps,
    /// RCU grace periods object teardown waited for (QP destroy, MR deregistration, MW
    /// deallocation): one only when a data-path reader held an entry of the object's table as
    /// the object left it, so an idle teardown of any number of objects adds none.
    TeardownGracePeriods,
    /// Responder: hole reports sent (a sequence NAK for a hole past the first, to a requester
    /// that announced it takes them; see `Bth::hole`).
    HoleReports,
}

/// Number of counters.
pub const COUNT: usize = Stat::HoleReports as usize + 1;

/// Every counter, in index order.
#[cfg_attr(MODULE, expect(dead_code))]
pub const ALL: [Stat; COUNT] = [
    Stat::SentPkts,
    Stat::SentBytes,
    Stat::RcvdPkts,
    Stat::RcvdBytes,
    Stat::Retransmits,
    Stat::Timeouts,
    Stat::PeerBusyWaits,
    Stat::AckPolls,
    Stat::SeqNaksSent,
    Stat::SeqNaksRcvd,
    Stat::RnrNaksSent,
    Stat::RnrNaksRcvd,
    Stat::ImpliedNaks,
    Stat::DuplicateRequests,
    Stat::DuplicateResponses,
    Stat::OutOfSeqRequests,
    Stat::DuplicateNoResource,
    Stat::ReAcks,
    Stat::RetryExceeded,
    Stat::RnrRetryExceeded,
    Stat::ErrNaksSent,
    Stat::RxIcrcErrors,
    Stat::RxBadHeaders,
    Stat::RxUnknownQp,
    Stat::RxAdmissionDrops,
    Stat::RxNoBuffer,
    Stat::RxBadState,
    Stat::RxDroppedMsgs,
    Stat::RxBadResponses,
    Stat::TxDrops,
    Stat::TxInflightWaits,
    Stat::CqOverflows,
    Stat::ReadReplays,
    Stat::ReadReplaysRefused,
    Stat::RxCnps,
    Stat::RxEcnCe,
    Stat::TxCnps,
    Stat::RateCuts,
    Stat::RatePaced,
    Stat::RtoExpiries,
    Stat::ReadResponsesAhead,
    Stat::WritePacketsAhead,
    Stat::SelectiveResends,
    Stat::SpuriousTimeouts,
    Stat::CnpWindowCuts,
    Stat::OdpMisses,
    Stat::RateLimitedQps,
    Stat::TeardownGracePeriods,
    Stat::HoleReports,
];

/// The names `rdma statistic` shows, in index order (NUL-terminated for the kernel's
/// `rdma_stat_desc`).
pub const NAMES: [&str; COUNT] = [
    "sent_pkts\0",
    "sent_bytes\0",
    "rcvd_pkts\0",
    "rcvd_bytes\0",
    "retransmits\0",
    "timeouts\0",
    "peer_busy_waits\0",
    "ack_polls\0",
    "seq_naks_sent\0",
    "seq_naks_rcvd\0",
    "rnr_naks_sent\0",
    "rnr_naks_rcvd\0",
    "implied_naks\0",
    "duplicate_requests\0",
    "duplicate_responses\0",
    "out_of_seq_requests\0",
    "duplicate_no_resource\0",
    "reacks_sent\0",
    "retry_exceeded_err\0",
    "retry_rnr_exceeded_err\0",
    "err_naks_sent\0",
    "rx_icrc_errors\0",
    "rx_bad_headers\0",
    "rx_unknown_qp\0",
    "rx_admission_drops\0",
    "rx_no_buffer\0",
    "rx_bad_state\0",
    "rx_dropped_msgs\0",
    "rx_bad_responses\0",
    "tx_drops\0",
    "tx_inflight_waits\0",
    "cq_overflows\0",
    "read_replays\0",
    "read_replays_refused\0",
    "rx_cnps\0",
    "rx_ecn_ce\0",
    "tx_cnps\0",
    "rate_cuts\0",
    "rate_paced\0",
    "rto_expiries\0",
    "read_responses_ahead\0",
    "write_packets_ahead\0",
    "selective_resends\0",
    "spurious_timeouts\0",
    "cnp_window_cuts\0",
    "odp_misses\0",
    "rate_limited_qps\0",
    "teardown_grace_periods\0",
    "hole_reports\0",
];

impl Stat {
    /// Index in [`NAMES`] and in value arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The name without its NUL.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn name(self) -> &'static str {
        let n = NAMES[self.index()];
        &n[..n.len() - 1]
    }
}

/// A set of counter values (per QP in the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters(pub [u64; COUNT]);

impl Default for Counters {
    fn default() -> Self {
        Counters([0; COUNT])
    }
}

impl Counters {
    /// Adds `n` to `s`.
    pub fn add(&mut self, s: Stat, n: u64) {
        self.0[s.index()] = self.0[s.index()].wrapping_add(n);
    }

    /// The value of `s`.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn get(&self, s: Stat) -> u64 {
        self.0[s.index()]
    }
}
