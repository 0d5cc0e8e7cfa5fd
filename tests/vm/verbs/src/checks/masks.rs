//! 2. Attribute masks. For each QP type and each transition of the walk:
//!    - `mask.<t>.<cur>_<next>.missing`: leaving out any one required bit is refused with
//!      EINVAL and changes nothing;
//!    - `mask.<t>.<cur>_<next>.extra`: adding any one bit of IBV_QP_STATE..IBV_QP_DEST_QPN
//!      that is neither required nor optional is refused with EINVAL and changes nothing.
//!
//!    The refused modifies carry the "B" values (different from the committed "A" ones), so
//!    that a partly applied modify shows in `ibv_query_qp`.
//!
//!    Also, per type: a mask bit beyond the standard ones (IBV_QP_RATE_LIMIT) gives
//!    EOPNOTSUPP; and modifies without IBV_QP_STATE are checked against the cur→cur row of the
//!    table (RTR→RTR does not exist; RTS→RTS allows only its optional bits).

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{bits, ename, mask_str, Report, EINVAL, EOPNOTSUPP};

use crate::env::{req_opt, sname, tname, Env, PATH, S, STANDARD_BITS, STATE, TYPES};

pub fn run(env: &Env, r: &mut Report) {
    for t in TYPES {
        let tn = tname(t);
        if !r.wants_any(&format!("mask.{tn}")) {
            continue;
        }
        let qp = match env.new_qp(t) {
            Ok(q) => q,
            Err(e) => {
                r.fail(&format!("mask.{tn}"), e);
                continue;
            }
        };
        for (cur, next) in PATH {
            let Some((req, opt)) = req_opt(cur, next, t) else {
                continue;
            };
            let base = req | STATE;
            let stem = format!("mask.{tn}.{}_{}", sname(cur), sname(next));

            let name = format!("{stem}.missing");
            if req != 0 && r.wants(&name) {
                match env.goto(&qp, cur) {
                    Err(e) => r.fail(&name, format!("cannot reach {}: {e}", cur.name())),
                    Ok(()) => {
                        let mut errs = Vec::new();
                        let mut n = 0;
                        for bit in bits(req) {
                            n += 1;
                            let attr = env.attr(&env.b, &qp, next, cur);
                            if let Err(e) = env.expect_errno(&qp, cur, &attr, base & !bit, EINVAL) {
                                errs.push(format!("without {}: {e}", mask_str(bit)));
                            }
                        }
                        r.cases(&name, errs, n);
                    }
                }
            }

            let name = format!("{stem}.extra");
            if r.wants(&name) {
                match env.goto(&qp, cur) {
                    Err(e) => r.fail(&name, format!("cannot reach {}: {e}", cur.name())),
                    Ok(()) => {
                        let mut errs = Vec::new();
                        let mut n = 0;
                        for bit in bits(STANDARD_BITS & !(req | opt | STATE)) {
                            n += 1;
                            let attr = env.attr(&env.b, &qp, next, cur);
                            if let Err(e) = env.expect_errno(&qp, cur, &attr, base | bit, EINVAL) {
                                errs.push(format!("with {}: {e}", mask_str(bit)));
                            }
                        }
                        r.cases(&name, errs, n);
                    }
                }
            }
        }

        // A bit outside IB_QP_ATTR_STANDARD_BITS: EOPNOTSUPP (from libibverbs or the kernel).
        let name = format!("mask.{tn}.beyond_standard_bits");
        if r.wants(&name) {
            let res = env.goto(&qp, S::Rts).and_then(|()| {
                let mut attr = env.attr(&env.a, &qp, S::Rts, S::Rts);
                attr.rate_limit = 1000;
                env.expect_errno(&qp, S::Rts, &attr, STATE | IBV_QP_RATE_LIMIT, EOPNOTSUPP)
            });
            r.result(&name, res);
        }

        // Without IBV_QP_STATE: the next state is the current one.
        let name = format!("mask.{tn}.nostate_in_rtr");
        if r.wants(&name) {
            // RTR→RTR is not a transition: nothing may change in RTR.
            let res = env.goto(&qp, S::Rtr).and_then(|()| {
                let attr = env.attr(&env.b, &qp, S::Rtr, S::Rtr);
                let mut errs = Vec::new();
                for bit in [
                    IBV_QP_PKEY_INDEX,
                    IBV_QP_MIN_RNR_TIMER,
                    IBV_QP_QKEY,
                    IBV_QP_RQ_PSN,
                ] {
                    if let Err(e) = env.expect_errno(&qp, S::Rtr, &attr, bit, EINVAL) {
                        errs.push(format!("{}: {e}", mask_str(bit)));
                    }
                }
                if errs.is_empty() {
                    Ok(())
                } else {
                    Err(errs.join("; "))
                }
            });
            r.result(&name, res);
        }
        let name = format!("mask.{tn}.nostate_rts_forbidden");
        if r.wants(&name) {
            // RTS→RTS allows only its optional bits.
            let (_, opt) = req_opt(S::Rts, S::Rts, t).unwrap_or_default();
            let res = env.goto(&qp, S::Rts).and_then(|()| {
                let attr = env.attr(&env.b, &qp, S::Rts, S::Rts);
                let mut errs = Vec::new();
                let mut n = 0;
                for bit in bits(STANDARD_BITS & !(opt | STATE)) {
                    n += 1;
                    if let Err(e) = env.expect_errno(&qp, S::Rts, &attr, bit, EINVAL) {
                        errs.push(format!("{}: {e}", mask_str(bit)));
                    }
                }
                if errs.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{} of {n}: {}", errs.len(), errs.join("; ")))
                }
            });
            r.result(&name, res);
        }
        let name = format!("mask.{tn}.nostate_rts_allowed");
        if r.wants(&name) {
            // An optional RTS→RTS attribute without IBV_QP_STATE is applied.
            let res = env.goto(&qp, S::Rts).and_then(|()| {
                let attr = env.attr(&env.b, &qp, S::Rts, S::Rts);
                let (bit, field, want) = if t == IBV_QPT_UD {
                    (IBV_QP_QKEY, "qkey", u64::from(env.b.qkey))
                } else {
                    (
                        IBV_QP_ACCESS_FLAGS,
                        "qp_access_flags",
                        u64::from(env.b.access),
                    )
                };
                qp.modify(&attr, bit)
                    .map_err(|e| format!("{} refused: {}", mask_str(bit), ename(e)))?;
                let got = env.snapshot(&qp)?;
                let bad = crate::env::mismatches(
                    &got,
                    &[("qp_state", u64::from(S::Rts.as_raw())), (field, want)],
                );
                if bad.is_empty() {
                    Ok(())
                } else {
                    Err(bad.join(", "))
                }
            });
            r.result(&name, res);
        }
        drop(qp);
    }
}
