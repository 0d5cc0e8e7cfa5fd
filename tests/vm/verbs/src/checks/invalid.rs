//! 2b. Invalid transitions (`qp_state_table[cur][next]` not valid: RESET→RTR, RESET→ERR,
//!     INIT→RTS, RTR→RTR, RTS→INIT, ERR→RTS, anything→SQE, ...), from every state a QP can be
//!     put in, for every type: refused with EINVAL and nothing changes. Each is tried with
//!     IBV_QP_STATE alone and with the attributes the target state would normally need.

use rrxe_host_tests::logic::qp_state::transition_is_valid;
use rrxe_verbs_test::util::{Report, EINVAL};

use crate::env::{req_opt, sname, tname, Env, S, STATE, TYPES};

/// The bits a QP normally brings into `next` (what its usual predecessor requires).
fn natural(next: S, t: u32) -> u32 {
    let from = match next {
        S::Init => S::Reset,
        S::Rtr => S::Init,
        S::Rts => S::Rtr,
        _ => return 0,
    };
    req_opt(from, next, t).map(|(r, _)| r).unwrap_or(0)
}

pub fn run(env: &Env, r: &mut Report) {
    for t in TYPES {
        let tn = tname(t);
        if !r.wants_any(&format!("invalid_transition.{tn}")) {
            continue;
        }
        let qp = match env.new_qp(t) {
            Ok(q) => q,
            Err(e) => {
                r.fail(&format!("invalid_transition.{tn}"), e);
                continue;
            }
        };
        for cur in [S::Reset, S::Init, S::Rtr, S::Rts, S::Sqd, S::Err] {
            for next in S::ALL {
                if transition_is_valid(cur, next) {
                    continue;
                }
                let name = format!("invalid_transition.{tn}.{}_{}", sname(cur), sname(next));
                if !r.wants(&name) {
                    continue;
                }
                if let Err(e) = env.goto(&qp, cur) {
                    r.fail(&name, format!("cannot reach {}: {e}", cur.name()));
                    continue;
                }
                let mut errs = Vec::new();
                let mut masks = vec![STATE];
                let nat = natural(next, t);
                if nat != 0 {
                    masks.push(STATE | nat);
                }
                for &m in &masks {
                    let attr = env.attr(&env.b, &qp, next, cur);
                    if let Err(e) = env.expect_errno(&qp, cur, &attr, m, EINVAL) {
                        errs.push(format!("with {}: {e}", rrxe_verbs_test::util::mask_str(m)));
                    }
                }
                r.cases(&name, errs, masks.len());
            }
        }
    }
}
