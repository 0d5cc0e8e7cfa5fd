//! 3. `ibv_query_qp` echoes what was set. Per type, one QP (RC with sq_sig_all) is taken
//!    RESET→INIT→RTR→RTS→RTS→SQD→SQD→RTS→ERR→RESET with required and optional attributes;
//!    after every step the query must show the state (qp_state, cur_qp_state) and every value
//!    set so far: path_mtu, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, pkey_index,
//!    port_num, timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic,
//!    max_dest_rd_atomic and the AV (is_global, port, dgid, sgid_index, hop_limit,
//!    traffic_class, flow_label). `query.<t>.init_attr` checks the init attributes: cap (the
//!    values ibv_create_qp returned, each at least the requested one), qp_type, sq_sig_all.
//!
//!    The hop limit of a connected QP's AV is replaced by the kernel with the route's hop
//!    limit when it resolves the address (ib_resolve_eth_dmac); the test sets 64, the IPv4
//!    default TTL, so that both agree.

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{ename, mask_str, Report};
use rrxe_verbs_test::verbs::Qp;

use crate::env::{fields, mismatches, tname, Env, Vals, S, STATE, TYPES};

type Want = Vec<(&'static str, u64)>;

fn set(w: &mut Want, name: &'static str, v: u64) {
    match w.iter_mut().find(|(n, _)| *n == name) {
        Some(e) => e.1 = v,
        None => w.push((name, v)),
    }
}

fn set_state(w: &mut Want, s: S) {
    set(w, "qp_state", s.as_raw().into());
    set(w, "cur_qp_state", s.as_raw().into());
}

fn set_av(w: &mut Want, env: &Env, v: &Vals) {
    let hi = u64::from_be_bytes(env.gid[..8].try_into().unwrap_or_default());
    let lo = u64::from_be_bytes(env.gid[8..].try_into().unwrap_or_default());
    set(w, "ah.is_global", 1);
    set(w, "ah.port_num", env.port.into());
    set(w, "ah.dgid_hi", hi);
    set(w, "ah.dgid_lo", lo);
    set(w, "ah.sgid_index", env.gid_index.into());
    set(w, "ah.hop_limit", v.hop_limit.into());
    set(w, "ah.traffic_class", v.tclass.into());
    set(w, "ah.flow_label", v.flow_label.into());
}

/// Applies `attr`/`mask` (must succeed), then compares the query with `want`.
#[allow(clippy::too_many_arguments)]
fn step_and_check(
    env: &Env,
    r: &mut Report,
    qp: &Qp,
    name: &str,
    cur: S,
    next: S,
    attr: &ibv_qp_attr,
    mask: u32,
    want: &Want,
) -> bool {
    if let Err(e) = env.step_attr(qp, cur, next, attr, mask) {
        r.fail(name, e);
        return false;
    }
    if !r.wants(name) {
        return true;
    }
    match env.snapshot(qp) {
        Err(e) => {
            r.fail(name, e);
            false
        }
        Ok(got) => {
            let bad = mismatches(&got, want);
            if bad.is_empty() {
                r.pass(name);
            } else {
                r.fail(
                    name,
                    format!(
                        "after {}->{} with {}: {}",
                        cur.name(),
                        next.name(),
                        mask_str(mask),
                        bad.join(", ")
                    ),
                );
            }
            true
        }
    }
}

pub fn run(env: &Env, r: &mut Report) {
    for t in TYPES {
        let tn = tname(t);
        if !r.wants_any(&format!("query.{tn}")) {
            continue;
        }
        let rc = t == IBV_QPT_RC;
        let conn = t != IBV_QPT_UD;
        let cap = ibv_qp_cap {
            max_send_wr: 8,
            max_recv_wr: 4,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 16,
        };
        let qp = match Qp::create(&env.pd, &env.cq, t, cap, rc) {
            Ok(q) => q,
            Err(e) => {
                r.fail(
                    &format!("query.{tn}"),
                    format!("ibv_create_qp: {}", ename(e)),
                );
                continue;
            }
        };

        // --- init attributes
        let name = format!("query.{tn}.init_attr");
        if r.wants(&name) {
            let res = qp
                .query()
                .map_err(|e| format!("ibv_query_qp: {}", ename(e)))
                .and_then(|(a, ia)| {
                    let got = fields(&a, &ia);
                    let c = qp.cap;
                    let want: Want = vec![
                        ("init.qp_type", t.into()),
                        ("init.sq_sig_all", u64::from(rc)),
                        ("init.cap.max_send_wr", c.max_send_wr.into()),
                        ("init.cap.max_recv_wr", c.max_recv_wr.into()),
                        ("init.cap.max_send_sge", c.max_send_sge.into()),
                        ("init.cap.max_recv_sge", c.max_recv_sge.into()),
                        ("init.cap.max_inline_data", c.max_inline_data.into()),
                        ("cap.max_send_wr", c.max_send_wr.into()),
                        ("cap.max_recv_wr", c.max_recv_wr.into()),
                        ("cap.max_send_sge", c.max_send_sge.into()),
                        ("cap.max_recv_sge", c.max_recv_sge.into()),
                        ("cap.max_inline_data", c.max_inline_data.into()),
                    ];
                    let mut bad = mismatches(&got, &want);
                    let q = cap;
                    for (n, got, asked) in [
                        ("max_send_wr", c.max_send_wr, q.max_send_wr),
                        ("max_recv_wr", c.max_recv_wr, q.max_recv_wr),
                        ("max_send_sge", c.max_send_sge, q.max_send_sge),
                        ("max_recv_sge", c.max_recv_sge, q.max_recv_sge),
                        ("max_inline_data", c.max_inline_data, q.max_inline_data),
                    ] {
                        if got < asked {
                            bad.push(format!("create returned {n} {got} < requested {asked}"));
                        }
                    }
                    if bad.is_empty() {
                        Ok(())
                    } else {
                        Err(bad.join(", "))
                    }
                });
            r.result(&name, res);
        }
        if !r.wants_any(&format!("query.{tn}")) {
            continue;
        }

        let (a, b) = (env.a, env.b);
        let mut w: Want = Vec::new();

        // RESET→INIT: required only.
        set_state(&mut w, S::Init);
        set(&mut w, "pkey_index", 0);
        set(&mut w, "port_num", env.port.into());
        let mut mask = STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if conn {
            mask |= IBV_QP_ACCESS_FLAGS;
            set(&mut w, "qp_access_flags", a.access.into());
        } else {
            mask |= IBV_QP_QKEY;
            set(&mut w, "qkey", a.qkey.into());
        }
        let attr = env.attr(&a, &qp, S::Init, S::Reset);
        if !step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.init"),
            S::Reset,
            S::Init,
            &attr,
            mask,
            &w,
        ) {
            continue;
        }

        // INIT→RTR: required plus an optional one changed to B (access / qkey).
        set_state(&mut w, S::Rtr);
        let mut attr = env.attr(&a, &qp, S::Rtr, S::Init);
        let mut mask = STATE;
        if conn {
            mask |=
                IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_ACCESS_FLAGS;
            attr.qp_access_flags = b.access;
            set(&mut w, "qp_access_flags", b.access.into());
            set(&mut w, "path_mtu", a.path_mtu.into());
            set(&mut w, "dest_qp_num", qp.qpn().into());
            set(&mut w, "rq_psn", a.rq_psn.into());
            set_av(&mut w, env, &a);
            if rc {
                mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
                set(&mut w, "max_dest_rd_atomic", a.max_dest_rd_atomic.into());
                set(&mut w, "min_rnr_timer", a.min_rnr_timer.into());
            }
        } else {
            mask |= IBV_QP_QKEY;
            attr.qkey = b.qkey;
            set(&mut w, "qkey", b.qkey.into());
        }
        if !step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.rtr"),
            S::Init,
            S::Rtr,
            &attr,
            mask,
            &w,
        ) {
            continue;
        }

        // RTR→RTS: required plus IBV_QP_CUR_STATE.
        set_state(&mut w, S::Rts);
        let attr = env.attr(&a, &qp, S::Rts, S::Rtr);
        let mut mask = STATE | IBV_QP_SQ_PSN | IBV_QP_CUR_STATE;
        set(&mut w, "sq_psn", a.sq_psn.into());
        if rc {
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
            set(&mut w, "timeout", a.timeout.into());
            set(&mut w, "retry_cnt", a.retry_cnt.into());
            set(&mut w, "rnr_retry", a.rnr_retry.into());
            set(&mut w, "max_rd_atomic", a.max_rd_atomic.into());
        }
        if !step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.rts"),
            S::Rtr,
            S::Rts,
            &attr,
            mask,
            &w,
        ) {
            continue;
        }

        // RTS→RTS: optional attributes back to A (access / qkey), RC also min_rnr_timer to B.
        let mut attr = env.attr(&a, &qp, S::Rts, S::Rts);
        let mask = if conn {
            set(&mut w, "qp_access_flags", a.access.into());
            if rc {
                attr.min_rnr_timer = b.min_rnr_timer;
                set(&mut w, "min_rnr_timer", b.min_rnr_timer.into());
                STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER
            } else {
                STATE | IBV_QP_ACCESS_FLAGS
            }
        } else {
            set(&mut w, "qkey", a.qkey.into());
            STATE | IBV_QP_QKEY
        };
        if !step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.rts_rts"),
            S::Rts,
            S::Rts,
            &attr,
            mask,
            &w,
        ) {
            continue;
        }

        // RTS→SQD.
        set_state(&mut w, S::Sqd);
        let attr = env.attr(&a, &qp, S::Sqd, S::Rts);
        if !step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.sqd"),
            S::Rts,
            S::Sqd,
            &attr,
            STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY,
            &w,
        ) {
            continue;
        }

        // SQD→SQD: the attributes SQD allows, changed to B.
        let mut attr = env.attr(&b, &qp, S::Sqd, S::Sqd);
        attr.dest_qp_num = qp.qpn();
        let mask = match t {
            IBV_QPT_RC => {
                set(&mut w, "timeout", b.timeout.into());
                set(&mut w, "retry_cnt", b.retry_cnt.into());
                set(&mut w, "rnr_retry", b.rnr_retry.into());
                set(&mut w, "max_rd_atomic", b.max_rd_atomic.into());
                set(&mut w, "max_dest_rd_atomic", b.max_dest_rd_atomic.into());
                set(&mut w, "min_rnr_timer", b.min_rnr_timer.into());
                set(&mut w, "qp_access_flags", b.access.into());
                set_av(&mut w, env, &b);
                STATE
                    | IBV_QP_AV
                    | IBV_QP_PORT
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_MAX_QP_RD_ATOMIC
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER
                    | IBV_QP_ACCESS_FLAGS
                    | IBV_QP_PKEY_INDEX
            }
            IBV_QPT_UC => {
                // No AV: for a modify that is not to RTR, uverbs adds IB_QP_PORT to IB_QP_AV,
                // and PORT is not an SQD→SQD attribute of UC.
                set(&mut w, "qp_access_flags", b.access.into());
                STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX
            }
            _ => {
                set(&mut w, "qkey", b.qkey.into());
                STATE | IBV_QP_QKEY | IBV_QP_PKEY_INDEX
            }
        };
        if !step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.sqd_sqd"),
            S::Sqd,
            S::Sqd,
            &attr,
            mask,
            &w,
        ) {
            continue;
        }

        // SQD→RTS with IBV_QP_CUR_STATE: everything kept.
        set_state(&mut w, S::Rts);
        let attr = env.attr(&a, &qp, S::Rts, S::Sqd);
        if !step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.sqd_rts"),
            S::Sqd,
            S::Rts,
            &attr,
            STATE | IBV_QP_CUR_STATE,
            &w,
        ) {
            continue;
        }

        // RTS→ERR and ERR→RESET: only the state is defined afterwards.
        let mut ws: Want = Vec::new();
        set_state(&mut ws, S::Err);
        let attr = env.attr(&a, &qp, S::Err, S::Rts);
        if !step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.err"),
            S::Rts,
            S::Err,
            &attr,
            STATE,
            &ws,
        ) {
            continue;
        }
        set_state(&mut ws, S::Reset);
        let attr = env.attr(&a, &qp, S::Reset, S::Err);
        step_and_check(
            env,
            r,
            &qp,
            &format!("query.{tn}.reset"),
            S::Err,
            S::Reset,
            &attr,
            STATE,
            &ws,
        );
    }
}
