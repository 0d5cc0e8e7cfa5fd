//! 4. Attribute values. Each case is a modify that is valid except for one value, issued
//!    from the state where the attribute belongs; it must be refused with EINVAL and change
//!    nothing (`values.<t>.<case>`). Limits come from ibv_query_device/ibv_query_port.
//!
//!    `values.<t>.rq_psn_25_bits` / `sq_psn_25_bits` are about what arrives: ib_core masks
//!    PSNs to 24 bits (with a warning) before the driver sees them, so the modify succeeds
//!    and the query shows the masked PSN; refusing with EINVAL (and no change) also passes.
//!    The INFO line says which happened.

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{ename, Report, EINVAL};
use rrxe_verbs_test::verbs::Qp;

use crate::env::{mismatches, req_opt, tname, Env, S, STATE, TYPES};

type Tweak = Box<dyn Fn(&mut ibv_qp_attr)>;

struct Case {
    name: &'static str,
    cur: S,
    next: S,
    /// Bits added to `required | IBV_QP_STATE`.
    extra: u32,
    /// Bits removed from it.
    without: u32,
    tweak: Tweak,
    /// Why the case cannot be run on this device, if it cannot.
    skip: Option<String>,
}

fn case(name: &'static str, cur: S, next: S, extra: u32, tweak: Tweak) -> Case {
    Case {
        name,
        cur,
        next,
        extra,
        without: 0,
        tweak,
        skip: None,
    }
}

fn cases(env: &Env, t: u32) -> Vec<Case> {
    let conn = t != IBV_QPT_UD;
    let rc = t == IBV_QPT_RC;
    let (si, sn, st, ss) = (S::Init, S::Rtr, S::Rts, S::Reset);
    let mut v = Vec::new();
    let port = env.port;
    let nports = env.dev.phys_port_cnt;
    let pkeys = env.port_attr.pkey_tbl_len;

    // RESET→INIT values, every type.
    v.push(case("port_num_0", ss, si, 0, Box::new(|a| a.port_num = 0)));
    v.push(case(
        "port_num_above_phys_port_cnt",
        ss,
        si,
        0,
        Box::new(move |a| a.port_num = nports.saturating_add(1)),
    ));
    let mut c = case(
        "pkey_index_beyond_table",
        ss,
        si,
        0,
        Box::new(move |a| a.pkey_index = pkeys),
    );
    if pkeys == u16::MAX {
        c.skip = Some("pkey_tbl_len is 65535".into());
    }
    v.push(c);
    if conn {
        v.push(case(
            "qkey_not_allowed",
            ss,
            si,
            IBV_QP_QKEY,
            Box::new(|_| ()),
        ));
        v.push(case(
            "access_flags_mw_bind",
            ss,
            si,
            0,
            Box::new(|a| a.qp_access_flags |= IBV_ACCESS_MW_BIND),
        ));
        v.push(case(
            "access_flags_zero_based",
            ss,
            si,
            0,
            Box::new(|a| a.qp_access_flags |= IBV_ACCESS_ZERO_BASED),
        ));
        v.push(case(
            "access_flags_undefined_bit",
            ss,
            si,
            0,
            Box::new(|a| a.qp_access_flags |= 1 << 12),
        ));
    } else {
        v.push(case(
            "access_flags_not_allowed",
            ss,
            si,
            IBV_QP_ACCESS_FLAGS,
            Box::new(|_| ()),
        ));
    }

    // INIT→RTR values.
    if conn {
        let active = env.port_attr.active_mtu;
        let mut c = case(
            "path_mtu_above_active",
            si,
            sn,
            0,
            Box::new(move |a| a.path_mtu = active + 1),
        );
        if active >= IBV_MTU_4096 {
            c.skip = Some("active_mtu is already 4096".into());
        }
        v.push(c);
        v.push(case("path_mtu_0", si, sn, 0, Box::new(|a| a.path_mtu = 0)));
        v.push(case("path_mtu_6", si, sn, 0, Box::new(|a| a.path_mtu = 6)));
        v.push(case(
            "dest_qpn_over_24_bits",
            si,
            sn,
            0,
            Box::new(|a| a.dest_qp_num |= 1 << 24),
        ));
        v.push(case(
            "av_port_num_0",
            si,
            sn,
            0,
            Box::new(|a| a.ah_attr.port_num = 0),
        ));
        v.push(case(
            "av_port_num_other",
            si,
            sn,
            0,
            Box::new(move |a| a.ah_attr.port_num = port.wrapping_add(1)),
        ));
    }
    if rc {
        v.push(case(
            "min_rnr_timer_32",
            si,
            sn,
            0,
            Box::new(|a| a.min_rnr_timer = 32),
        ));
        let lim = env.dev.max_qp_rd_atom;
        let mut c = case(
            "max_dest_rd_atomic_above_limit",
            si,
            sn,
            0,
            Box::new(move |a| a.max_dest_rd_atomic = (lim + 1).clamp(0, 255) as u8),
        );
        if lim >= 255 {
            c.skip = Some(format!("max_qp_rd_atom {lim} fills the u8"));
        }
        v.push(c);
    }

    // RTR→RTS values.
    if rc {
        v.push(case("timeout_32", sn, st, 0, Box::new(|a| a.timeout = 32)));
        v.push(case(
            "retry_cnt_8",
            sn,
            st,
            0,
            Box::new(|a| a.retry_cnt = 8),
        ));
        v.push(case(
            "rnr_retry_8",
            sn,
            st,
            0,
            Box::new(|a| a.rnr_retry = 8),
        ));
        let lim = env.dev.max_qp_init_rd_atom;
        let mut c = case(
            "max_rd_atomic_above_limit",
            sn,
            st,
            0,
            Box::new(move |a| a.max_rd_atomic = (lim + 1).clamp(0, 255) as u8),
        );
        if lim >= 255 {
            c.skip = Some(format!("max_qp_init_rd_atom {lim} fills the u8"));
        }
        v.push(c);
        v.push(case(
            "path_mig_state_3",
            sn,
            st,
            IBV_QP_PATH_MIG_STATE,
            Box::new(|a| a.path_mig_state = 3),
        ));
    }

    // The state fields.
    v.push(case("qp_state_7", sn, st, 0, Box::new(|a| a.qp_state = 7)));
    v.push(case(
        "cur_qp_state_7",
        sn,
        st,
        IBV_QP_CUR_STATE,
        Box::new(|a| a.cur_qp_state = 7),
    ));
    // Claims the QP is in RTS while it is in RTR (the request is otherwise a valid RTR→RTS).
    v.push(case(
        "cur_qp_state_mismatch",
        sn,
        st,
        IBV_QP_CUR_STATE,
        Box::new(|a| a.cur_qp_state = IBV_QPS_RTS),
    ));
    // In RTR, claims SQD and asks for RTS with only STATE|CUR_STATE (valid SQD→RTS): must be
    // judged from the real state (RTR→RTS lacks its required attributes).
    let mut c = case(
        "cur_qp_state_lie_sqd",
        sn,
        st,
        IBV_QP_CUR_STATE,
        Box::new(|a| a.cur_qp_state = IBV_QPS_SQD),
    );
    c.without = !(STATE | IBV_QP_CUR_STATE);
    v.push(c);
    v
}

fn run_case(env: &Env, qp: &Qp, t: u32, c: &Case) -> Result<(), String> {
    let (req, _) = req_opt(c.cur, c.next, t).unwrap_or_default();
    let mask = ((req | STATE) & !c.without) | c.extra;
    env.goto(qp, c.cur)?;
    let mut attr = env.attr(&env.b, qp, c.next, c.cur);
    (c.tweak)(&mut attr);
    env.expect_errno(qp, c.cur, &attr, mask, EINVAL)
}

/// A PSN with bit 24 set: accepted and masked, or refused without change.
fn psn_case(env: &Env, r: &mut Report, qp: &Qp, name: &str, rq: bool) {
    let (cur, next) = if rq {
        (S::Init, S::Rtr)
    } else {
        (S::Rtr, S::Rts)
    };
    let res = (|| {
        env.goto(qp, cur)?;
        let (req, _) = req_opt(cur, next, qp.qp_type).unwrap_or_default();
        let mut attr = env.attr(&env.b, qp, next, cur);
        let psn = if rq { env.b.rq_psn } else { env.b.sq_psn };
        if rq {
            attr.rq_psn = psn | 1 << 24;
        } else {
            attr.sq_psn = psn | 1 << 24;
        }
        let before = env.snapshot(qp)?;
        match qp.modify(&attr, req | STATE) {
            Ok(()) => {
                let got = env.snapshot(qp)?;
                let field = if rq { "rq_psn" } else { "sq_psn" };
                let bad = mismatches(&got, &[(field, psn.into())]);
                r.info(name, format!("{field} {:#x} accepted", psn | 1 << 24));
                if bad.is_empty() {
                    Ok(())
                } else {
                    Err(format!("accepted but {}", bad.join(", ")))
                }
            }
            Err(e) => {
                let after = env.snapshot(qp)?;
                let d = crate::env::diff(&before, &after);
                r.info(name, format!("refused with {}", ename(e)));
                if e != EINVAL {
                    Err(format!(
                        "refused with {} (want EINVAL or accepted-and-masked)",
                        ename(e)
                    ))
                } else if !d.is_empty() {
                    Err(format!("refused but changed {}", d.join(", ")))
                } else {
                    Ok(())
                }
            }
        }
    })();
    r.result(name, res);
}

pub fn run(env: &Env, r: &mut Report) {
    for t in TYPES {
        let tn = tname(t);
        if !r.wants_any(&format!("values.{tn}")) {
            continue;
        }
        let qp = match env.new_qp(t) {
            Ok(q) => q,
            Err(e) => {
                r.fail(&format!("values.{tn}"), e);
                continue;
            }
        };
        for c in cases(env, t) {
            let name = format!("values.{tn}.{}", c.name);
            if !r.wants(&name) {
                continue;
            }
            if let Some(why) = &c.skip {
                r.skip(&name, why);
                continue;
            }
            let res = run_case(env, &qp, t, &c);
            r.result(&name, res);
        }
        if t == IBV_QPT_RC {
            for (n, rq) in [("rq_psn_25_bits", true), ("sq_psn_25_bits", false)] {
                let name = format!("values.{tn}.{n}");
                if r.wants(&name) {
                    psn_case(env, r, &qp, &name, rq);
                }
            }
        }
    }
}
