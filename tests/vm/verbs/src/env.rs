//! The test environment (device, port, GID, a PD and a CQ) and the QP helpers every check
//! uses: two sets of valid attribute values, attribute filling, state driving, snapshots and
//! "this modify must be refused and change nothing".

use std::net::{Ipv4Addr, Ipv6Addr};
use std::thread::sleep;
use std::time::Duration;

use rrxe_host_tests::logic::qp_state::{transition_masks, QpState, QpType};
use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{ename, mask_str};
use rrxe_verbs_test::verbs::{Cq, Ctx, Pd, Qp};

pub type S = QpState;

/// `IBV_QP_STATE`.
pub const STATE: u32 = 1;
/// Every standard mask bit, `IBV_QP_STATE`..=`IBV_QP_DEST_QPN`.
pub const STANDARD_BITS: u32 = 0x1f_ffff;

/// The QP types a user can create on a RoCE device, in test order.
pub const TYPES: [u32; 3] = [IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD];

/// The transitions of the walk every type takes.
pub const PATH: [(S, S); 7] = [
    (S::Reset, S::Init),
    (S::Init, S::Rtr),
    (S::Rtr, S::Rts),
    (S::Rts, S::Sqd),
    (S::Sqd, S::Rts),
    (S::Rts, S::Err),
    (S::Err, S::Reset),
];

pub fn qtype(t: u32) -> QpType {
    match t {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        _ => QpType::Ud,
    }
}

pub fn tname(t: u32) -> &'static str {
    match t {
        IBV_QPT_RC => "rc",
        IBV_QPT_UC => "uc",
        IBV_QPT_UD => "ud",
        _ => "other",
    }
}

pub fn sname(s: S) -> String {
    s.name().to_ascii_lowercase()
}

pub fn state_name(raw: u32) -> String {
    match S::from_raw(raw) {
        Some(s) => s.name().to_owned(),
        None => format!("state{raw}"),
    }
}

/// `(required, optional)` bits of `cur → next` for `t` (from kmod/logic, = `qp_state_table`),
/// or `None` for an invalid transition.
pub fn req_opt(cur: S, next: S, t: u32) -> Option<(u32, u32)> {
    transition_masks(cur, next, qtype(t)).map(|(r, o)| (r.bits(), o.bits()))
}

pub fn gid_str(g: &[u8; 16]) -> String {
    Ipv6Addr::from(*g).to_string()
}

pub fn v4_mapped(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// One set of attribute values, all valid for the device, used to fill an `ibv_qp_attr`.
#[derive(Clone, Copy)]
pub struct Vals {
    pub path_mtu: u32,
    pub mig: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    /// `dest_qp_num` is the QP's own number plus this (0: loopback to itself).
    pub dest_delta: u32,
    pub access: u32,
    pub en_sqd: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub hop_limit: u8,
    pub tclass: u8,
    pub flow_label: u32,
}

/// The device under test and the objects shared by the checks. Fields drop in declaration
/// order: the CQ and PD before the context.
pub struct Env {
    pub cq: Cq,
    pub pd: Pd,
    pub name: String,
    pub dev: ibv_device_attr,
    pub port: u8,
    pub port_attr: ibv_port_attr,
    pub gid_index: u8,
    pub gid: [u8; 16],
    pub peer_ip: Option<Ipv4Addr>,
    /// The values positive steps use.
    pub a: Vals,
    /// Different valid values, for modifies that must be refused (so that a partly applied
    /// refused modify shows in `ibv_query_qp`).
    pub b: Vals,
    pub ctx: Ctx,
}

fn pow2_le(n: u32) -> u8 {
    if n == 0 {
        0
    } else {
        (1u32 << (31 - n.leading_zeros())).min(128) as u8
    }
}

impl Env {
    pub fn open(
        name: &str,
        port: u8,
        gid_index: Option<u32>,
        peer: Option<Ipv4Addr>,
    ) -> Result<Env, String> {
        let ctx = Ctx::open(name)?;
        let dev = ctx
            .query_device()
            .map_err(|e| format!("ibv_query_device: {}", ename(e)))?;
        let port_attr = ctx
            .query_port(port)
            .map_err(|e| format!("ibv_query_port({port}): {}", ename(e)))?;
        let (gid_index, gid) = match gid_index {
            Some(i) => {
                let e = ctx
                    .query_gid_ex(port, i)
                    .map_err(|e| format!("GID index {i}: {}", ename(e)))?;
                // SAFETY: every bit pattern is a valid [u8; 16].
                (i, unsafe { e.gid.raw })
            }
            None => find_roce_v2_ipv4_gid(&ctx, port, port_attr.gid_tbl_len)?,
        };
        let gid_index = u8::try_from(gid_index)
            .map_err(|_| format!("GID index {gid_index} does not fit sgid_index (u8)"))?;
        let own_ip = Ipv6Addr::from(gid).to_ipv4_mapped();
        let peer_ip = peer.or(match own_ip {
            Some(ip) if ip == Ipv4Addr::new(10, 99, 0, 1) => Some(Ipv4Addr::new(10, 99, 0, 2)),
            Some(ip) if ip == Ipv4Addr::new(10, 99, 0, 2) => Some(Ipv4Addr::new(10, 99, 0, 1)),
            _ => None,
        });
        let pd = Pd::alloc(&ctx).map_err(|e| format!("ibv_alloc_pd: {}", ename(e)))?;
        let cq = Cq::create(&ctx, 64, 0).map_err(|e| format!("ibv_create_cq: {}", ename(e)))?;

        let active = port_attr.active_mtu.clamp(IBV_MTU_256, IBV_MTU_1024);
        let mra = pow2_le(dev.max_qp_init_rd_atom.clamp(0, 4) as u32);
        let mdra = pow2_le(dev.max_qp_rd_atom.clamp(0, 4) as u32);
        let a = Vals {
            path_mtu: active,
            mig: IBV_MIG_MIGRATED,
            qkey: 0x1111_1111,
            rq_psn: 0x12_3456,
            sq_psn: 0xab_cdef,
            dest_delta: 0,
            access: IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE,
            en_sqd: 0,
            max_rd_atomic: mra,
            max_dest_rd_atomic: mdra,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            hop_limit: 64,
            tclass: 0x20,
            flow_label: 0x1_2345,
        };
        let b = Vals {
            path_mtu: if active > IBV_MTU_256 {
                active - 1
            } else {
                active
            },
            mig: IBV_MIG_MIGRATED,
            qkey: 0x2222_2222,
            rq_psn: 0x65_4321,
            sq_psn: 0xfe_dcba,
            dest_delta: 1,
            access: IBV_ACCESS_REMOTE_READ,
            en_sqd: 1,
            max_rd_atomic: if mra >= 2 { mra / 2 } else { mra },
            max_dest_rd_atomic: if mdra >= 2 { mdra / 2 } else { mdra },
            min_rnr_timer: 20,
            timeout: 18,
            retry_cnt: 3,
            rnr_retry: 5,
            hop_limit: 64,
            tclass: 0x40,
            flow_label: 0x5_4321,
        };
        Ok(Env {
            cq,
            pd,
            name: name.to_owned(),
            dev,
            port,
            port_attr,
            gid_index,
            gid,
            peer_ip,
            a,
            b,
            ctx,
        })
    }

    /// A global-route address vector to `dgid` from our GID, with `v`'s GRH values.
    #[allow(clippy::field_reassign_with_default)]
    pub fn ah_attr(&self, v: &Vals, dgid: [u8; 16]) -> ibv_ah_attr {
        let mut ah = zeroed::<ibv_ah_attr>();
        ah.is_global = 1;
        ah.port_num = self.port;
        ah.grh.dgid.raw = dgid;
        ah.grh.sgid_index = self.gid_index;
        ah.grh.hop_limit = v.hop_limit;
        ah.grh.traffic_class = v.tclass;
        ah.grh.flow_label = v.flow_label;
        ah
    }

    /// An `ibv_qp_attr` with every field set to a valid value from `v`; the mask decides which
    /// of them the modify carries. The AV loops back to our own GID (and, with
    /// `dest_delta` 0, to the QP itself).
    #[allow(clippy::field_reassign_with_default)]
    pub fn attr(&self, v: &Vals, qp: &Qp, next: S, cur: S) -> ibv_qp_attr {
        let mut a = zeroed::<ibv_qp_attr>();
        a.qp_state = next.as_raw();
        a.cur_qp_state = cur.as_raw();
        a.path_mtu = v.path_mtu;
        a.path_mig_state = v.mig;
        a.qkey = v.qkey;
        a.rq_psn = v.rq_psn;
        a.sq_psn = v.sq_psn;
        a.dest_qp_num = (qp.qpn() + v.dest_delta) & 0xff_ffff;
        a.qp_access_flags = v.access;
        a.cap = qp.cap;
        a.ah_attr = self.ah_attr(v, self.gid);
        a.alt_ah_attr = a.ah_attr;
        a.pkey_index = 0;
        a.alt_pkey_index = 0;
        a.en_sqd_async_notify = v.en_sqd;
        a.max_rd_atomic = v.max_rd_atomic;
        a.max_dest_rd_atomic = v.max_dest_rd_atomic;
        a.min_rnr_timer = v.min_rnr_timer;
        a.port_num = self.port;
        a.timeout = v.timeout;
        a.retry_cnt = v.retry_cnt;
        a.rnr_retry = v.rnr_retry;
        a.alt_port_num = self.port;
        a.alt_timeout = v.timeout;
        a
    }

    pub fn default_cap() -> ibv_qp_cap {
        ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }

    pub fn new_qp(&self, t: u32) -> Result<Qp, String> {
        Qp::create(&self.pd, &self.cq, t, Self::default_cap(), false)
            .map_err(|e| format!("ibv_create_qp({}): {}", tname(t), ename(e)))
    }

    pub fn state(&self, qp: &Qp) -> Result<u32, String> {
        qp.query()
            .map(|(a, _)| a.qp_state)
            .map_err(|e| format!("ibv_query_qp: {}", ename(e)))
    }

    pub fn snapshot(&self, qp: &Qp) -> Result<Fields, String> {
        qp.query()
            .map(|(a, ia)| fields(&a, &ia))
            .map_err(|e| format!("ibv_query_qp: {}", ename(e)))
    }

    /// Waits until the send queue of a QP in SQD has drained (`sq_draining` clear).
    pub fn wait_drained(&self, qp: &Qp) -> Result<(), String> {
        for _ in 0..300 {
            let (a, _) = qp
                .query()
                .map_err(|e| format!("ibv_query_qp: {}", ename(e)))?;
            if a.sq_draining == 0 {
                return Ok(());
            }
            sleep(Duration::from_millis(10));
        }
        Err("SQD: sq_draining still set after 3 s (empty send queue)".to_owned())
    }

    /// Modifies `cur → next` with `attr`/`mask`, which must succeed and leave the QP in
    /// `next` (after the drain, for SQD).
    pub fn step_attr(
        &self,
        qp: &Qp,
        cur: S,
        next: S,
        attr: &ibv_qp_attr,
        mask: u32,
    ) -> Result<(), String> {
        qp.modify(attr, mask).map_err(|e| {
            format!(
                "{}->{} with {}: {}",
                cur.name(),
                next.name(),
                mask_str(mask),
                ename(e)
            )
        })?;
        if next == S::Sqd {
            self.wait_drained(qp)?;
        }
        let st = self.state(qp)?;
        if st != next.as_raw() {
            return Err(format!(
                "{}->{} succeeded but ibv_query_qp says {}",
                cur.name(),
                next.name(),
                state_name(st)
            ));
        }
        Ok(())
    }

    /// `cur → next` with exactly the required bits (plus `IBV_QP_STATE`) and values `v`.
    pub fn step(&self, qp: &Qp, cur: S, next: S, v: &Vals) -> Result<(), String> {
        let (req, _) = req_opt(cur, next, qp.qp_type)
            .ok_or_else(|| format!("{}->{} is not a transition", cur.name(), next.name()))?;
        let attr = self.attr(v, qp, next, cur);
        self.step_attr(qp, cur, next, &attr, req | STATE)
    }

    /// Brings the QP to `target` (through RESET unless it is already there) with values A.
    pub fn goto(&self, qp: &Qp, target: S) -> Result<(), String> {
        let st = self.state(qp)?;
        if st == target.as_raw() {
            if target == S::Sqd {
                self.wait_drained(qp)?;
            }
            return Ok(());
        }
        if st != S::Reset.as_raw() {
            let cur = S::from_raw(st).unwrap_or(S::Err);
            let attr = self.attr(&self.a, qp, S::Reset, cur);
            self.step_attr(qp, cur, S::Reset, &attr, STATE)?;
        }
        let path: &[(S, S)] = match target {
            S::Reset => &[],
            S::Init => &PATH[..1],
            S::Rtr => &PATH[..2],
            S::Rts => &PATH[..3],
            S::Sqd => &PATH[..4],
            S::Err => &[(S::Reset, S::Init), (S::Init, S::Err)],
            S::Sqe => return Err("SQE cannot be reached without a send error".to_owned()),
        };
        for &(c, n) in path {
            self.step(qp, c, n, &self.a)?;
        }
        Ok(())
    }

    /// Issues a modify that must fail; returns its errno, or why not. Whatever happens, the
    /// QP must be unchanged (`ibv_query_qp` before = after); if it is not, or the modify was
    /// accepted, the QP is brought back to `cur`.
    pub fn expect_fail(
        &self,
        qp: &Qp,
        cur: S,
        attr: &ibv_qp_attr,
        mask: u32,
    ) -> Result<i32, String> {
        let before = self.snapshot(qp)?;
        let r = qp.modify(attr, mask);
        let after = self.snapshot(qp);
        let changes = match &after {
            Ok(a) => diff(&before, a),
            Err(e) => vec![e.clone()],
        };
        let res = match r {
            Ok(()) => Err(if changes.is_empty() {
                "accepted".to_owned()
            } else {
                format!("accepted, changed {}", changes.join(", "))
            }),
            Err(e) if !changes.is_empty() => Err(format!(
                "refused with {} but changed {}",
                ename(e),
                changes.join(", ")
            )),
            Err(e) => Ok(e),
        };
        if r.is_ok() || !changes.is_empty() {
            if let Err(e) = self.goto(qp, cur) {
                return Err(format!(
                    "{}; then restoring {} failed: {e}",
                    res.err().unwrap_or_default(),
                    cur.name()
                ));
            }
        }
        res
    }

    /// Like [`Env::expect_fail`], and the errno must be `want`.
    pub fn expect_errno(
        &self,
        qp: &Qp,
        cur: S,
        attr: &ibv_qp_attr,
        mask: u32,
        want: i32,
    ) -> Result<(), String> {
        match self.expect_fail(qp, cur, attr, mask)? {
            e if e == want => Ok(()),
            e => Err(format!("{} instead of {}", ename(e), ename(want))),
        }
    }
}

fn find_roce_v2_ipv4_gid(ctx: &Ctx, port: u8, tbl_len: i32) -> Result<(u32, [u8; 16]), String> {
    let mut seen = Vec::new();
    for i in 0..tbl_len.max(0) as u32 {
        let Ok(e) = ctx.query_gid_ex(port, i) else {
            continue;
        };
        // SAFETY: every bit pattern is a valid [u8; 16].
        let raw = unsafe { e.gid.raw };
        let v4 = Ipv6Addr::from(raw).to_ipv4_mapped().is_some();
        if e.gid_type == IBV_GID_TYPE_ROCE_V2 && v4 {
            return Ok((i, raw));
        }
        seen.push(format!("[{i}] {} type {}", gid_str(&raw), e.gid_type));
    }
    Err(format!(
        "no RoCE v2 GID of an IPv4 address on port {port} (GID table: {})",
        if seen.is_empty() {
            "empty".to_owned()
        } else {
            seen.join(", ")
        }
    ))
}

/// Named values of what `ibv_query_qp` returns (without `sq_draining`, which moves by itself,
/// and `en_sqd_async_notify`, which the uverbs response does not carry).
pub type Fields = Vec<(&'static str, u64)>;

pub fn fields(a: &ibv_qp_attr, ia: &ibv_qp_init_attr) -> Fields {
    let g = &a.ah_attr.grh;
    // SAFETY: every bit pattern is a valid [u8; 16].
    let dgid = unsafe { g.dgid.raw };
    let hi = u64::from_be_bytes(dgid[..8].try_into().unwrap_or_default());
    let lo = u64::from_be_bytes(dgid[8..].try_into().unwrap_or_default());
    vec![
        ("qp_state", a.qp_state.into()),
        ("cur_qp_state", a.cur_qp_state.into()),
        ("path_mtu", a.path_mtu.into()),
        ("path_mig_state", a.path_mig_state.into()),
        ("qkey", a.qkey.into()),
        ("rq_psn", a.rq_psn.into()),
        ("sq_psn", a.sq_psn.into()),
        ("dest_qp_num", a.dest_qp_num.into()),
        ("qp_access_flags", a.qp_access_flags.into()),
        ("pkey_index", a.pkey_index.into()),
        ("max_rd_atomic", a.max_rd_atomic.into()),
        ("max_dest_rd_atomic", a.max_dest_rd_atomic.into()),
        ("min_rnr_timer", a.min_rnr_timer.into()),
        ("port_num", a.port_num.into()),
        ("timeout", a.timeout.into()),
        ("retry_cnt", a.retry_cnt.into()),
        ("rnr_retry", a.rnr_retry.into()),
        ("alt_port_num", a.alt_port_num.into()),
        ("alt_timeout", a.alt_timeout.into()),
        ("alt_pkey_index", a.alt_pkey_index.into()),
        ("ah.is_global", a.ah_attr.is_global.into()),
        ("ah.port_num", a.ah_attr.port_num.into()),
        ("ah.dlid", a.ah_attr.dlid.into()),
        ("ah.sl", a.ah_attr.sl.into()),
        ("ah.static_rate", a.ah_attr.static_rate.into()),
        ("ah.dgid_hi", hi),
        ("ah.dgid_lo", lo),
        ("ah.sgid_index", g.sgid_index.into()),
        ("ah.hop_limit", g.hop_limit.into()),
        ("ah.traffic_class", g.traffic_class.into()),
        ("ah.flow_label", g.flow_label.into()),
        ("cap.max_send_wr", a.cap.max_send_wr.into()),
        ("cap.max_recv_wr", a.cap.max_recv_wr.into()),
        ("cap.max_send_sge", a.cap.max_send_sge.into()),
        ("cap.max_recv_sge", a.cap.max_recv_sge.into()),
        ("cap.max_inline_data", a.cap.max_inline_data.into()),
        ("init.cap.max_send_wr", ia.cap.max_send_wr.into()),
        ("init.cap.max_recv_wr", ia.cap.max_recv_wr.into()),
        ("init.cap.max_send_sge", ia.cap.max_send_sge.into()),
        ("init.cap.max_recv_sge", ia.cap.max_recv_sge.into()),
        ("init.cap.max_inline_data", ia.cap.max_inline_data.into()),
        ("init.qp_type", ia.qp_type.into()),
        ("init.sq_sig_all", (ia.sq_sig_all as u32).into()),
    ]
}

pub fn fmt_field(name: &str, v: u64) -> String {
    match name {
        "qp_state" | "cur_qp_state" => state_name(v as u32),
        "ah.dgid_hi" | "ah.dgid_lo" | "qkey" | "rq_psn" | "sq_psn" | "dest_qp_num"
        | "ah.flow_label" | "ah.traffic_class" | "qp_access_flags" => format!("{v:#x}"),
        _ => v.to_string(),
    }
}

/// `name old->new` for every field that differs.
pub fn diff(before: &Fields, after: &Fields) -> Vec<String> {
    before
        .iter()
        .zip(after.iter())
        .filter(|(b, a)| b.1 != a.1)
        .map(|(b, a)| format!("{} {}->{}", b.0, fmt_field(b.0, b.1), fmt_field(a.0, a.1)))
        .collect()
}

/// `name: got X, want Y` for every expected field the query disagrees with.
pub fn mismatches(got: &Fields, want: &[(&'static str, u64)]) -> Vec<String> {
    want.iter()
        .filter_map(|(n, w)| {
            let g = got.iter().find(|(gn, _)| gn == n).map(|x| x.1);
            match g {
                Some(g) if g == *w => None,
                Some(g) => Some(format!(
                    "{n} is {} (want {})",
                    fmt_field(n, g),
                    fmt_field(n, *w)
                )),
                None => Some(format!("{n} not queried")),
            }
        })
        .collect()
}
