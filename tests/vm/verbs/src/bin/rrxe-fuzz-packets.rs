//! rrxe-fuzz-packets: hostile RoCEv2 datagrams at UDP 4791 of an rrxe device while a verified
//! RC transfer runs on it (issue 9, section 2).
//!
//!   rrxe-fuzz-packets --dev rrxe0 --dev2 rrxe1 [--netns peer] [--packets N] [--seed S]
//!                     [--src 10.99.0.2] [--dst 10.99.0.1]
//!
//! The program opens `--dev` and creates its own target QPs there: RC, UC and UD, each in
//! RESET, INIT, RTR, RTS and ERR, the connected ones "connected" to a QP that does not exist at
//! `--src`; a live MR and a deregistered ("dead") one. A thread runs a verified RC transfer
//! (WRITE, READ back, SEND; every byte compared) between `--dev` and `--dev2`. The main thread
//! sends N datagrams from a raw IPv4 socket (created in network namespace `--netns`, so that
//! they arrive over the veth like real traffic) to `--dst`:4791, each built from a random
//! opcode of the table (or an undefined one) and a random target (own QPs in every state, the
//! live transfer's QP, unknown and edge QPNs), then maybe mutated: bad ICRC, forged source
//! address, wrong P_Key, bad TVer, undefined opcode, truncated headers, pad/length/MTU
//! disagreements. PSNs near, at, and far from the expected one; rkeys of the live and the dead
//! MR. Every packet is classified as "cannot be valid" (the device must drop or NAK it) or
//! "may be valid".
//!
//! Checks: the transfer completes with correct data; the drop counters of `rdma statistic`
//! (rx_icrc_errors + rx_bad_headers + rx_unknown_qp + rx_admission_drops + rx_bad_state +
//! rx_dropped_msgs + rx_bad_responses + duplicate_* + out_of_seq_requests + err_naks_sent +
//! rx_no_buffer) grew by at least the number of invalid packets (the table is printed); the
//! device still works afterwards (a fresh transfer). Seeded: `--seed` replays a run.

use rrxe_verbs_test::{dp, ffi, robust, util, verbs};

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dp::{Dev, Rng};
use ffi::*;
use rrxe_host_tests::logic::icrc;
use rrxe_host_tests::logic::opcode::{self, Ext, Operation, Position, Transport};
use rrxe_host_tests::logic::psn::Psn;
use rrxe_host_tests::logic::wire::Bth;
use util::{ename, Report};
use verbs::{Cq, Mr, Pd, Qp};

const QKEY: u32 = 0x2222_2222;
/// The remote QPN our connected target QPs are "connected" to (none exists there).
const FAKE_REMOTE_QPN: u32 = 0xfedcba;
const RQ_PSN: u32 = 0x00ff_fff0; // close to the wrap
const SQ_PSN: u32 = 0x10;

/// Counters whose growth accounts for packets that cannot be valid.
const DROP_COUNTERS: [&str; 14] = [
    "rx_icrc_errors",
    "rx_bad_headers",
    "rx_unknown_qp",
    "rx_admission_drops",
    "rx_bad_state",
    "rx_dropped_msgs",
    "rx_bad_responses",
    "rx_no_buffer",
    "duplicate_requests",
    "duplicate_responses",
    "duplicate_no_resource",
    "out_of_seq_requests",
    "err_naks_sent",
    "rnr_naks_sent",
];

struct Opts {
    dev: String,
    dev2: String,
    netns: Option<String>,
    packets: u64,
    seed: u64,
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dev: "rrxe0".into(),
        dev2: "rrxe1".into(),
        netns: None,
        packets: 100_000,
        seed: dp::clock_seed(),
        src: Ipv4Addr::new(10, 99, 0, 2),
        dst: Ipv4Addr::new(10, 99, 0, 1),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dev" => o.dev = dp::arg_val(&mut args, &a)?,
            "--dev2" => o.dev2 = dp::arg_val(&mut args, &a)?,
            "--netns" => o.netns = Some(dp::arg_val(&mut args, &a)?),
            "--packets" => o.packets = dp::arg_val(&mut args, &a)?,
            "--seed" => o.seed = dp::arg_val(&mut args, &a)?,
            "--src" => {
                o.src = dp::arg_val::<String>(&mut args, &a)?
                    .parse()
                    .map_err(|e| format!("--src: {e}"))?
            }
            "--dst" => {
                o.dst = dp::arg_val::<String>(&mut args, &a)?
                    .parse()
                    .map_err(|e| format!("--dst: {e}"))?
            }
            _ => return Err(format!("unknown argument {a} (see the source's header)")),
        }
    }
    Ok(o)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum QState {
    Reset,
    Init,
    Rtr,
    Rts,
    Err,
}

struct Target {
    qpn: u32,
    t: Transport,
    state: QState,
    /// The next PSN the responder expects (RTR/RTS).
    epsn: u32,
    /// Our own QP (false: the live transfer's, only hit with packets that cannot be valid).
    own: bool,
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rrxe-fuzz-packets: {e}");
            return ExitCode::from(2);
        }
    };
    let mut rep = Report::new(vec![], vec![]);
    if let Err(e) = run(&o, &mut rep) {
        rep.fail("fuzz_packets.setup", e);
    }
    rep.summary();
    if rep.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn mapped(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// Brings an own target QP to `st` (RTR/RTS connected to FAKE_REMOTE_QPN at `peer`).
fn bring(dev: &Dev, qp: &Qp, t: u32, st: QState, peer: [u8; 16]) -> Result<(), String> {
    if st == QState::Reset {
        return Ok(());
    }
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: dev.port,
        qkey: QKEY,
        qp_access_flags: dp::ACCESS_ALL & !IBV_ACCESS_LOCAL_WRITE,
        ..zeroed()
    };
    let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    mask |= if t == IBV_QPT_UD {
        IBV_QP_QKEY
    } else {
        IBV_QP_ACCESS_FLAGS
    };
    qp.modify(&a, mask)
        .map_err(|e| format!("->INIT: {}", ename(e)))?;
    if st == QState::Init {
        return Ok(());
    }
    if st == QState::Err {
        a.qp_state = IBV_QPS_ERR;
        return qp
            .modify(&a, IBV_QP_STATE)
            .map_err(|e| format!("->ERR: {}", ename(e)));
    }
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if t != IBV_QPT_UD {
        a.path_mtu = dev.port_attr.active_mtu;
        a.dest_qp_num = FAKE_REMOTE_QPN;
        a.rq_psn = RQ_PSN;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = dev.port;
        a.ah_attr.grh.dgid.raw = peer;
        a.ah_attr.grh.sgid_index = dev.gid_index;
        a.ah_attr.grh.hop_limit = 64;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    }
    if t == IBV_QPT_RC {
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 1;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    qp.modify(&a, mask)
        .map_err(|e| format!("->RTR: {}", ename(e)))?;
    if st == QState::Rtr {
        return Ok(());
    }
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = SQ_PSN;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if t == IBV_QPT_RC {
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 4;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    qp.modify(&a, mask)
        .map_err(|e| format!("->RTS: {}", ename(e)))
}

/// What a generated packet is, for the table.
#[derive(Default)]
struct Tally {
    /// category -> (sent, invalid)
    cat: BTreeMap<&'static str, (u64, u64)>,
    sent: u64,
    invalid: u64,
    send_errors: u64,
}

impl Tally {
    fn add(&mut self, c: &'static str, invalid: bool) {
        let e = self.cat.entry(c).or_default();
        e.0 += 1;
        self.sent += 1;
        if invalid {
            e.1 += 1;
            self.invalid += 1;
        }
    }
}

struct Gen<'a> {
    rng: Rng,
    targets: &'a [Target],
    mtu: usize,
    live_rkey: u32,
    live_addr: u64,
    live_len: u64,
    dead_rkey: u32,
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

/// One datagram: IPv4 header + UDP + RoCE; returns it and (category, invalid).
impl Gen<'_> {
    fn psn_for(&mut self, epsn: u32) -> u32 {
        let e = Psn::from_masked(epsn);
        match self.rng.below(9) {
            0..=2 => e.get(),
            3 => e.wrapping_sub(1).get(),
            4 => e.wrapping_add(1).get(),
            5 => e.wrapping_add(1 << 23).get(),
            6 => e.wrapping_sub((1 << 23) - 1).get(),
            7 => [0, 0xff_ffff, 0x80_0000][self.rng.below(3) as usize],
            _ => self.rng.u32() & 0xff_ffff,
        }
    }

    fn packet(&mut self) -> (Vec<u8>, &'static str, bool) {
        let r = &mut self.rng;
        // The target.
        let ti = r.below(self.targets.len() as u64 + 3) as usize;
        let (qpn, tgt) = if ti < self.targets.len() {
            (self.targets[ti].qpn, Some(ti))
        } else {
            let q = match r.below(4) {
                0 => 0,
                1 => 1,
                2 => 0xff_ffff,
                _ => r.u32() & 0xff_ffff,
            };
            // a random QPN may hit a live one: then it is one of the targets, else unknown
            match self.targets.iter().position(|t| t.qpn == q) {
                Some(i) => (q, Some(i)),
                None => (q, None),
            }
        };
        let live = tgt.map(|i| !self.targets[i].own).unwrap_or(false);
        // The opcode: mostly of the target's transport.
        let undefined = r.below(20) == 0;
        let op: u8 = if undefined {
            loop {
                let o = r.u32() as u8;
                if opcode::info(o).is_none() {
                    break o;
                }
            }
        } else {
            let base = match tgt.map(|i| self.targets[i].t) {
                Some(t) if r.below(8) != 0 => t.base(),
                _ => [Transport::Rc, Transport::Uc, Transport::Ud][r.below(3) as usize].base(),
            };
            loop {
                let o = base | (r.below(32) as u8);
                if opcode::info(o).is_some() {
                    break o;
                }
            }
        };
        let info = opcode::info(op);
        let hdr_len = info
            .map(|i| i.hdr_len())
            .unwrap_or(12 + 4 * r.below(8) as usize);
        // Payload length: by position, sometimes wrong.
        let mtu = self.mtu;
        let mut bad_len = false;
        let mut paylen = match info {
            Some(i) if i.payload => match i.position {
                Position::First | Position::Middle => {
                    if r.below(6) == 0 {
                        bad_len = true;
                        r.below(mtu as u64) as usize
                    } else {
                        mtu
                    }
                }
                _ => {
                    if r.below(10) == 0 {
                        bad_len = true;
                        mtu + 1 + r.below(1400 - mtu as u64 - hdr_len as u64) as usize
                    } else {
                        r.below(mtu.min(256) as u64 + 1) as usize
                    }
                }
            },
            Some(_) => 0,
            None => r.below(64) as usize,
        };
        if let Some(i) = info {
            if !i.payload && r.below(10) == 0 {
                paylen = 4 * (1 + r.below(16) as usize);
                bad_len = true;
            }
        }
        if mtu + hdr_len + 64 > 1400 {
            paylen = paylen.min(1400 - hdr_len - 64);
        }
        let mut pad = ((4 - paylen % 4) % 4) as u8;
        if r.below(20) == 0 {
            let p = r.below(4) as u8;
            if p != pad {
                // a pad count the length does not agree with: the payload loses bytes, which
                // is invalid only when the payload must be exact or becomes negative
                pad = p;
                if paylen < p as usize
                    || matches!(
                        info.map(|i| i.position),
                        Some(Position::First | Position::Middle)
                    )
                {
                    bad_len = true;
                }
            }
        }
        // The BTH.
        let epsn = tgt.map(|i| self.targets[i].epsn).unwrap_or(0);
        let psn = self.psn_for(epsn);
        let r = &mut self.rng;
        let bad_tver = r.below(40) == 0;
        let bad_pkey = r.below(40) == 0;
        let bth = Bth {
            opcode: op,
            se: r.coin(),
            mig: false,
            pad,
            tver: if bad_tver { 1 + r.below(15) as u8 } else { 0 },
            pkey: if bad_pkey {
                (r.u32() as u16) & 0x7ffe | 0x0100
            } else {
                0xffff
            },
            fecn: false,
            becn: false,
            dest_qp: qpn,
            ack_req: r.coin(),
            sel: r.coin(),
            hole: r.coin(),
            psn: Psn::from_masked(psn),
        };
        let mut roce = Vec::with_capacity(hdr_len + paylen + 4);
        roce.extend_from_slice(&bth.to_bytes());
        if let Some(i) = info {
            for e in i.headers.iter() {
                let start = roce.len();
                roce.resize(start + e.size(), 0);
                let h = &mut roce[start..];
                match e {
                    Ext::Deth => {
                        let qk = if r.below(6) == 0 { r.u32() } else { QKEY };
                        h[0..4].copy_from_slice(&qk.to_be_bytes());
                        h[4..8].copy_from_slice(&(r.u32() & 0xff_ffff).to_be_bytes());
                    }
                    Ext::Reth | Ext::AtomicEth => {
                        let rkey = match r.below(4) {
                            0 => self.dead_rkey,
                            1 => r.u32(),
                            _ => self.live_rkey,
                        };
                        let va = if r.below(4) == 0 {
                            r.u64()
                        } else {
                            self.live_addr + r.below(self.live_len)
                        };
                        h[0..8].copy_from_slice(&va.to_be_bytes());
                        h[8..12].copy_from_slice(&rkey.to_be_bytes());
                        if e == Ext::Reth {
                            let len = if r.below(4) == 0 {
                                r.u32()
                            } else {
                                paylen as u32
                            };
                            h[12..16].copy_from_slice(&len.to_be_bytes());
                        } else {
                            r.fill(&mut h[12..28]);
                        }
                    }
                    _ => r.fill(h),
                }
            }
        } else {
            let start = roce.len();
            roce.resize(hdr_len, 0);
            r.fill(&mut roce[start..]);
        }
        let start = roce.len();
        roce.resize(start + paylen + pad as usize, 0);
        r.fill(&mut roce[start..]);
        roce.extend_from_slice(&[0; 4]); // ICRC
                                         // Truncation: cut below the opcode's header length (+ICRC).
        let mut truncated = false;
        if r.below(25) == 0 {
            let min = hdr_len + 4;
            let l = r.below(min as u64) as usize;
            roce.truncate(l);
            truncated = true;
        }
        // The source: forged sometimes.
        let forged = r.below(12) == 0;
        let src = if forged {
            Ipv4Addr::new(10, 99, 0, 3 + r.below(200) as u8)
        } else {
            self.src
        };
        let mut pkt = ipv4_udp(src, self.dst, &roce, r.u32() as u16);
        let bad_icrc = r.below(12) == 0;
        if roce.len() >= 16 {
            let ip: [u8; 20] = pkt[..20].try_into().unwrap_or([0; 20]);
            if let Ok(c) = icrc::icrc_v4(&ip, &pkt[20..]) {
                let c = if bad_icrc { c ^ (1 << r.below(32)) } else { c };
                let n = pkt.len();
                pkt[n - 4..].copy_from_slice(&c.to_le_bytes());
            }
        }
        // Classify.
        let (cat, invalid) = if roce.len() < 16 {
            ("truncated_below_bth_icrc", true)
        } else if bad_icrc {
            ("bad_icrc", true)
        } else if undefined {
            ("undefined_opcode", true)
        } else if truncated {
            ("truncated_headers", true)
        } else if bad_tver {
            ("bad_tver", true)
        } else if tgt.is_none() {
            ("unknown_qpn", true)
        } else {
            let t = &self.targets[tgt.unwrap_or(0)];
            let i = info.expect("defined opcode");
            let connected = t.t != Transport::Ud;
            if i.transport != t.t {
                ("wrong_transport", true)
            } else if bad_pkey {
                ("bad_pkey", true)
            } else if forged && connected {
                ("forged_source", true)
            } else if matches!(t.state, QState::Reset | QState::Init | QState::Err) {
                ("qp_not_receiving", true)
            } else if bad_len {
                ("bad_length", true)
            } else if i.is_response() {
                // our targets never have anything outstanding; the live QP does
                if t.own {
                    ("unsolicited_response", true)
                } else {
                    ("live_response", false)
                }
            } else if !t.own {
                // never sent: see below
                ("live_request", false)
            } else if matches!(i.op, Operation::Flush | Operation::AtomicWrite) {
                ("flush_atomic_write", false)
            } else if forged {
                ("ud_forged_source", false)
            } else {
                ("maybe_valid_request", false)
            }
        };
        // Only packets dropped before they reach the live QP's engine may hit it: anything
        // it could accept or answer (a NAK would put it in ERR) gets its ICRC spoiled.
        const LIVE_SAFE: [&str; 8] = [
            "truncated_below_bth_icrc",
            "bad_icrc",
            "undefined_opcode",
            "truncated_headers",
            "bad_tver",
            "bad_pkey",
            "forged_source",
            "wrong_transport",
        ];
        if live && !LIVE_SAFE.contains(&cat) {
            let n = pkt.len();
            pkt[n - 1] ^= 0x5a;
            return (pkt, "live_qp_bad_icrc", true);
        }
        (pkt, cat, invalid)
    }
}

fn ipv4_udp(src: Ipv4Addr, dst: Ipv4Addr, roce: &[u8], id: u16) -> Vec<u8> {
    let udp_len = 8 + roce.len();
    let tot = 20 + udp_len;
    let mut p = Vec::with_capacity(tot);
    p.extend_from_slice(&[0x45, 0, (tot >> 8) as u8, tot as u8]);
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x40, 0, 64, 17, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    // IPv4 header checksum
    let mut s: u32 = 0;
    for c in p[..20].chunks(2) {
        s += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    let ck = !(s as u16);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    let sport = 0xc000u16 | (id & 0x3fff);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&4791u16.to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no UDP checksum (IPv4)
    p.extend_from_slice(roce);
    p
}

/// A raw socket in `--netns` (the fuzzing one is closed by now).
fn fd2(o: &Opts) -> Result<i32, String> {
    if let Some(ns) = &o.netns {
        robust::enter_netns(Some(ns))?;
    }
    let fd = raw_socket();
    if o.netns.is_some() {
        robust::enter_netns(None)?;
    }
    fd
}

/// Returns (receive completions, rx_icrc_errors delta).
fn icrc_probe(o: &Opts, dev: &Dev, pd: &Pd, fd: i32, k: usize) -> Result<(usize, u64), String> {
    let cq = Cq::create(&dev.ctx, 256, 0).map_err(|e| format!("create_cq: {}", ename(e)))?;
    let cap = ibv_qp_cap {
        max_send_wr: 4,
        max_recv_wr: 2 * k as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = Qp::create(pd, &cq, IBV_QPT_UD, cap, false)
        .map_err(|e| format!("create_qp: {}", ename(e)))?;
    bring(dev, &qp, IBV_QPT_UD, QState::Rts, mapped(o.src))?;
    let mr =
        Mr::reg(pd, 2 * k * 256, dp::ACCESS_ALL).map_err(|e| format!("reg_mr: {}", ename(e)))?;
    for i in 0..2 * k {
        // SAFETY: registered MR.
        let mut sge = unsafe {
            ibv_sge {
                addr: (*mr.ptr).addr as u64 + 256 * i as u64,
                length: 256,
                lkey: (*mr.ptr).lkey,
            }
        };
        let mut wr = ibv_recv_wr {
            wr_id: i as u64,
            sg_list: &mut sge,
            num_sge: 1,
            ..zeroed()
        };
        dp::post_recv(&qp, &mut wr)?;
    }
    let before = robust::stats(&o.dev).unwrap_or_default();
    let mut rng = Rng::new(o.seed ^ 0x1c7c);
    for i in 0..2 * k {
        let bth = Bth {
            opcode: 0x64,
            pkey: 0xffff,
            dest_qp: qp.qpn(),
            psn: Psn::from_masked(i as u32),
            ..Default::default()
        };
        let mut roce = bth.to_bytes().to_vec();
        roce.extend_from_slice(&QKEY.to_be_bytes());
        roce.extend_from_slice(&0x123u32.to_be_bytes());
        let mut payload = [0u8; 64];
        rng.fill(&mut payload);
        roce.extend_from_slice(&payload);
        roce.extend_from_slice(&[0; 4]);
        let mut pkt = ipv4_udp(o.src, o.dst, &roce, i as u16);
        let ip: [u8; 20] = pkt[..20].try_into().unwrap_or([0; 20]);
        let c = icrc::icrc_v4(&ip, &pkt[20..]).map_err(|e| format!("icrc: {e:?}"))?;
        let c = if i < k { c ^ 0x0100_0000 } else { c };
        let n = pkt.len();
        pkt[n - 4..].copy_from_slice(&c.to_le_bytes());
        send_raw(fd, &pkt, o.dst);
    }
    // SAFETY: our socket.
    unsafe { libc::close(fd) };
    let wcs = dp::drain(&cq, Duration::from_millis(1500));
    let after = robust::stats(&o.dev).unwrap_or_default();
    let d = after
        .get("rx_icrc_errors")
        .copied()
        .unwrap_or(0)
        .saturating_sub(before.get("rx_icrc_errors").copied().unwrap_or(0));
    let ok = wcs.iter().filter(|w| w.status == IBV_WC_SUCCESS).count();
    drop(qp);
    drop(mr);
    drop(cq);
    Ok((ok, d))
}

fn raw_socket() -> Result<i32, String> {
    // SAFETY: plain socket call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    if fd < 0 {
        return Err(format!(
            "socket(AF_INET, SOCK_RAW): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(fd)
}

fn send_raw(fd: i32, pkt: &[u8], dst: Ipv4Addr) -> bool {
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(dst.octets()),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: valid buffer and address.
    let n = unsafe {
        libc::sendto(
            fd,
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    n == pkt.len() as isize
}

/// sendmmsg of a batch; returns how many were sent (a datagram the stack refuses is retried
/// alone once, then counted as a send error).
fn send_batch(fd: i32, batch: &[(Vec<u8>, &'static str, bool)], dst: Ipv4Addr) -> usize {
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(dst.octets()),
        },
        sin_zero: [0; 8],
    };
    let mut iov: Vec<libc::iovec> = batch
        .iter()
        .map(|(p, _, _)| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (&sa as *const libc::sockaddr_in) as *mut libc::c_void;
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect();
    let mut done = 0usize;
    while done < msgs.len() {
        // SAFETY: valid message array.
        let r =
            unsafe { libc::sendmmsg(fd, msgs[done..].as_mut_ptr(), (msgs.len() - done) as u32, 0) };
        if r > 0 {
            done += r as usize;
        } else if send_raw(fd, &batch[done].0, dst) {
            done += 1;
        } else {
            return done;
        }
    }
    done
}

fn softnet_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|h| u64::from_str_radix(h, 16).ok())
        })
        .sum()
}

fn run(o: &Opts, rep: &mut Report) -> Result<(), String> {
    println!(
        "fuzz-packets: seed {} packets {} dev {} (live transfer to {}) src {} dst {} netns {}",
        o.seed,
        o.packets,
        o.dev,
        o.dev2,
        o.src,
        o.dst,
        o.netns.as_deref().unwrap_or("-")
    );
    let dev = Dev::open(&o.dev)?;
    let mtu = dev.mtu();
    let pd = Pd::alloc(&dev.ctx).map_err(|e| format!("alloc_pd: {}", ename(e)))?;
    let cq = Cq::create(&dev.ctx, 4096, 0).map_err(|e| format!("create_cq: {}", ename(e)))?;
    let live_mr =
        Mr::reg(&pd, 1 << 16, dp::ACCESS_ALL).map_err(|e| format!("reg_mr: {}", ename(e)))?;
    let dead_mr =
        Mr::reg(&pd, 1 << 16, dp::ACCESS_ALL).map_err(|e| format!("reg_mr: {}", ename(e)))?;
    // SAFETY: registered MRs.
    let (live_rkey, live_addr, dead_rkey) = unsafe {
        (
            (*live_mr.ptr).rkey,
            (*live_mr.ptr).addr as u64,
            (*dead_mr.ptr).rkey,
        )
    };
    dead_mr
        .destroy()
        .map_err(|e| format!("dereg_mr: {}", ename(e)))?;
    let peer = mapped(o.src);
    let mut qps = Vec::new();
    let mut targets = Vec::new();
    let cap = ibv_qp_cap {
        max_send_wr: 4,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    for (t, tt) in [
        (IBV_QPT_RC, Transport::Rc),
        (IBV_QPT_UC, Transport::Uc),
        (IBV_QPT_UD, Transport::Ud),
    ] {
        for st in [
            QState::Reset,
            QState::Init,
            QState::Rtr,
            QState::Rts,
            QState::Err,
        ] {
            let qp = Qp::create(&pd, &cq, t, cap, false)
                .map_err(|e| format!("create_qp type {t}: {}", ename(e)))?;
            bring(&dev, &qp, t, st, peer).map_err(|e| format!("qp type {t}: {e}"))?;
            if matches!(st, QState::Rtr | QState::Rts) {
                // some receive buffers, so that some SENDs land (the rest see RNR/no buffer)
                for k in 0..32u64 {
                    // SAFETY: live MR.
                    let mut sge = ibv_sge {
                        addr: live_addr + 1024 * (k % 64),
                        length: 2048,
                        lkey: unsafe { (*live_mr.ptr).lkey },
                    };
                    sge.length = 1024;
                    let mut wr = ibv_recv_wr {
                        wr_id: k,
                        sg_list: &mut sge,
                        num_sge: 1,
                        ..zeroed()
                    };
                    dp::post_recv(&qp, &mut wr)?;
                }
            }
            targets.push(Target {
                qpn: qp.qpn(),
                t: tt,
                state: st,
                epsn: RQ_PSN,
                own: true,
            });
            qps.push(qp);
        }
    }
    // The live transfer.
    let xfer = robust::Transfer::start(&o.dev, &o.dev2, o.seed ^ 0x5555, 16384);
    let (la, _lb) = match xfer.wait_qpns(Duration::from_secs(60)) {
        Some(q) => q,
        None => {
            let r = xfer.stop();
            return Err(format!(
                "live transfer did not start: {}",
                r.error.unwrap_or_default()
            ));
        }
    };
    targets.push(Target {
        qpn: la,
        t: Transport::Rc,
        state: QState::Rts,
        epsn: 0,
        own: false,
    });
    // The socket, in the peer namespace.
    if let Some(ns) = &o.netns {
        robust::enter_netns(Some(ns))?;
    }
    let fd = raw_socket();
    if o.netns.is_some() {
        robust::enter_netns(None)?;
    }
    let fd = fd?;
    let before = match robust::stats(&o.dev) {
        Ok(m) => m,
        Err(e) => {
            rep.info(
                "fuzz_packets.counters",
                format!("{e}: fuzzing anyway, the accounting check will fail"),
            );
            BTreeMap::new()
        }
    };
    let sn0 = softnet_drops();
    let mut g = Gen {
        rng: Rng::new(o.seed),
        targets: &targets,
        mtu,
        live_rkey,
        live_addr,
        live_len: 1 << 16,
        dead_rkey,
        src: o.src,
        dst: o.dst,
    };
    let mut tally = Tally::default();
    let t0 = Instant::now();
    let mut wc = zeroed::<[ibv_wc; 64]>();
    // batches of up to 32 datagrams per sendmmsg
    let mut n = 0u64;
    while n < o.packets {
        let k = (o.packets - n).min(32) as usize;
        let batch: Vec<(Vec<u8>, &'static str, bool)> = (0..k).map(|_| g.packet()).collect();
        let sent = send_batch(fd, &batch, o.dst);
        for (i, (_, cat, invalid)) in batch.iter().enumerate() {
            if i < sent {
                tally.add(cat, *invalid);
            } else {
                tally.send_errors += 1;
            }
        }
        let before_n = n;
        n += k as u64;
        // keep our CQ from overflowing
        let _ = dp::poll_once(&cq, &mut wc);
        if n / 20_000 != before_n / 20_000 {
            println!(
                "fuzz-packets: {n} packets, {:.1} s, live ops {}",
                t0.elapsed().as_secs_f64(),
                xfer.ops.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    // SAFETY: our socket.
    unsafe { libc::close(fd) };
    // Let the transfer run a little past the fuzzing, then stop it.
    std::thread::sleep(Duration::from_millis(500));
    let res = xfer.stop();
    std::thread::sleep(Duration::from_millis(200));
    let after = robust::stats(&o.dev).unwrap_or_default();
    let sn_drops = softnet_drops().saturating_sub(sn0);
    println!(
        "fuzz-packets: sent {} datagrams in {secs:.1} s ({:.0}/s), {} sendto errors, {} backlog drops (softnet)",
        tally.sent,
        tally.sent as f64 / secs.max(1e-9),
        tally.send_errors,
        sn_drops
    );
    println!(
        "fuzz-packets: {:<28} {:>10} {:>10}",
        "category", "sent", "invalid"
    );
    for (c, (s, i)) in &tally.cat {
        println!("fuzz-packets: {c:<28} {s:>10} {i:>10}");
    }
    println!(
        "fuzz-packets: {:<28} {:>10} {:>10}",
        "total", tally.sent, tally.invalid
    );
    println!("fuzz-packets: counter deltas ({}):", o.dev);
    let mut sum = 0u64;
    for (k, v) in &after {
        let d = v.saturating_sub(*before.get(k).unwrap_or(&0));
        let rel = DROP_COUNTERS.contains(&k.as_str());
        if rel {
            sum += d;
        }
        if d != 0 || rel {
            println!(
                "fuzz-packets:   {k:<26} {d:>10}{}",
                if rel { "  (drop/NAK)" } else { "" }
            );
        }
    }
    println!(
        "fuzz-packets: drop/NAK counters grew by {sum}; invalid packets sent {}",
        tally.invalid
    );
    // Checks.
    match (&res.error, res.ops) {
        (None, n) if n > 0 => {
            rep.pass("fuzz_packets.live_transfer_correct");
            println!(
                "fuzz-packets: live transfer: {} verified operations, {} bytes",
                res.ops, res.bytes
            );
        }
        (None, _) => rep.fail(
            "fuzz_packets.live_transfer_correct",
            "no operation completed",
        ),
        (Some(e), _) => rep.fail(
            "fuzz_packets.live_transfer_correct",
            format!("after {} ops: {e}", res.ops),
        ),
    }
    if after.is_empty() {
        rep.fail(
            "fuzz_packets.drops_accounted",
            format!(
                "{} exports no counters (rdma statistic show link {}/1)",
                o.dev, o.dev
            ),
        );
    } else if sum + sn_drops >= tally.invalid {
        rep.pass("fuzz_packets.drops_accounted");
    } else {
        rep.fail(
            "fuzz_packets.drops_accounted",
            format!("drop/NAK counters grew by {sum} (+{sn_drops} backlog drops) < {} invalid packets (seed {})", tally.invalid, o.seed),
        );
    }
    if tally.send_errors * 100 > tally.sent.max(1) {
        rep.fail(
            "fuzz_packets.sent",
            format!("{} sendto errors", tally.send_errors),
        );
    }
    // ICRC probe: 20 UD SENDs that are valid but for a wrong ICRC, then 20 valid ones, to a
    // fresh UD QP with 40 receives posted: exactly the valid ones may complete, and the bad
    // ones must show up in rx_icrc_errors.
    match icrc_probe(o, &dev, &pd, fd2(o)?, 20) {
        Ok((completed, icrc_delta)) => {
            println!("fuzz-packets: ICRC probe: 20 bad-ICRC + 20 valid UD SENDs -> {completed} receive completions, rx_icrc_errors +{icrc_delta}");
            if completed == 20 {
                rep.pass("fuzz_packets.icrc_probe.bad_icrc_not_delivered");
            } else {
                rep.fail("fuzz_packets.icrc_probe.bad_icrc_not_delivered", format!("{completed} receive completions for 20 valid + 20 bad-ICRC datagrams (expected 20)"));
            }
            if icrc_delta >= 20 {
                rep.pass("fuzz_packets.icrc_probe.counted_in_rx_icrc_errors");
            } else {
                rep.fail(
                    "fuzz_packets.icrc_probe.counted_in_rx_icrc_errors",
                    format!("rx_icrc_errors grew by {icrc_delta} for 20 bad-ICRC datagrams"),
                );
            }
        }
        Err(e) => rep.fail("fuzz_packets.icrc_probe", e),
    }
    // Our targets can still be destroyed, and the device still works.
    let mut errs = Vec::new();
    for q in qps {
        let n = q.qpn();
        if let Err(e) = q.destroy() {
            errs.push(format!("destroy qp {n:#x}: {}", ename(e)));
        }
    }
    drop(live_mr);
    drop(cq);
    drop(pd);
    rep.cases("fuzz_packets.targets_destroyed", errs, 15);
    let x2 = robust::Transfer::start(&o.dev, &o.dev2, o.seed ^ 0xaaaa, 4096);
    std::thread::sleep(Duration::from_secs(2));
    let r2 = x2.stop();
    match r2.error {
        None if r2.ops > 0 => rep.pass("fuzz_packets.device_works_afterwards"),
        e => rep.fail(
            "fuzz_packets.device_works_afterwards",
            format!("{} ops, {e:?}", r2.ops),
        ),
    }
    Ok(())
}
