//! 1. RC, UC and UD QPs walk RESET→INIT→RTR→RTS→SQD→RTS→ERR→RESET, each step with exactly
//!    the required attributes (RC/UC address vectors loop back to the device's own GID and
//!    the QP's own QPN), and `ibv_query_qp` shows every new state.

use rrxe_verbs_test::util::Report;

use crate::env::{sname, tname, Env, PATH, TYPES};

pub fn run(env: &Env, r: &mut Report) {
    for t in TYPES {
        let name = format!("walk.{}", tname(t));
        if !r.wants(&name) {
            continue;
        }
        let res = (|| {
            let qp = env.new_qp(t)?;
            let st = env.state(&qp)?;
            if st != 0 {
                return Err(format!("a new QP is in state {st}, not RESET"));
            }
            let mut done = Vec::new();
            for (cur, next) in PATH {
                env.step(&qp, cur, next, &env.a)
                    .map_err(|e| format!("after {}: {e}", walked(&done)))?;
                done.push(sname(next));
            }
            qp.destroy()
                .map_err(|e| format!("ibv_destroy_qp: {}", rrxe_verbs_test::util::ename(e)))
        })();
        r.result(&name, res);
    }
}

fn walked(done: &[String]) -> String {
    if done.is_empty() {
        "create".to_owned()
    } else {
        format!("reset->{}", done.join("->"))
    }
}
