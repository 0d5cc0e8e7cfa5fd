//! 6. Creation limits (from ibv_query_device): a QP with max_send_wr/max_recv_wr above
//!    max_qp_wr, max_send_sge/max_recv_sge above max_sge, or an absurd max_inline_data
//!    (1 MiB; the device limit is not queryable) is refused with EINVAL; at the limits it is
//!    created. A CQ with cqe above max_cqe is refused (EINVAL), with cqe == max_cqe created;
//!    a comp_vector outside 0..num_comp_vectors is refused (EINVAL).

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{ename, Report, EINVAL};
use rrxe_verbs_test::verbs::{Cq, Qp};

use crate::env::{Env, TYPES};

fn qp_refused(env: &Env, f: &dyn Fn(&mut ibv_qp_cap)) -> Result<(), String> {
    let mut errs = Vec::new();
    for t in TYPES {
        let mut cap = Env::default_cap();
        f(&mut cap);
        match Qp::create(&env.pd, &env.cq, t, cap, false) {
            Ok(_) => errs.push(format!("{} created", crate::env::tname(t))),
            Err(e) if e != EINVAL => errs.push(format!(
                "{}: {} instead of EINVAL",
                crate::env::tname(t),
                ename(e)
            )),
            Err(_) => {}
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

fn qp_created(env: &Env, f: &dyn Fn(&mut ibv_qp_cap)) -> Result<(), String> {
    let mut cap = Env::default_cap();
    f(&mut cap);
    let qp = Qp::create(&env.pd, &env.cq, IBV_QPT_RC, cap, false).map_err(|e| {
        format!(
            "send_wr {} recv_wr {} send_sge {} recv_sge {}: {}",
            cap.max_send_wr,
            cap.max_recv_wr,
            cap.max_send_sge,
            cap.max_recv_sge,
            ename(e)
        )
    })?;
    qp.destroy()
        .map_err(|e| format!("ibv_destroy_qp: {}", ename(e)))
}

pub fn run(env: &Env, r: &mut Report) {
    if !r.wants_any("limits") {
        return;
    }
    let d = &env.dev;
    let wr = d.max_qp_wr.max(0) as u32;
    let sge = d.max_sge.max(0) as u32;
    r.info(
        "limits",
        format!(
            "max_qp_wr {} max_sge {} max_cqe {} max_qp_rd_atom {} max_qp_init_rd_atom {} num_comp_vectors {}",
            d.max_qp_wr, d.max_sge, d.max_cqe, d.max_qp_rd_atom, d.max_qp_init_rd_atom,
            env.ctx.num_comp_vectors()
        ),
    );
    type CapTweak = Box<dyn Fn(&mut ibv_qp_cap)>;
    let qp_cases: [(&str, CapTweak); 5] = [
        (
            "limits.qp.max_send_wr_above_max_qp_wr",
            Box::new(move |c| c.max_send_wr = wr + 1),
        ),
        (
            "limits.qp.max_recv_wr_above_max_qp_wr",
            Box::new(move |c| c.max_recv_wr = wr + 1),
        ),
        (
            "limits.qp.max_send_sge_above_max_sge",
            Box::new(move |c| c.max_send_sge = sge + 1),
        ),
        (
            "limits.qp.max_recv_sge_above_max_sge",
            Box::new(move |c| c.max_recv_sge = sge + 1),
        ),
        (
            "limits.qp.max_inline_data_1mib",
            Box::new(|c| c.max_inline_data = 1 << 20),
        ),
    ];
    for (name, f) in &qp_cases {
        if r.wants(name) {
            r.result(name, qp_refused(env, f.as_ref()));
        }
    }
    let name = "limits.qp.max_wr_at_limit";
    if r.wants(name) {
        r.result(
            name,
            qp_created(env, &|c| {
                c.max_send_wr = wr;
                c.max_recv_wr = wr;
            }),
        );
    }
    let name = "limits.qp.max_sge_at_limit";
    if r.wants(name) {
        r.result(
            name,
            qp_created(env, &|c| {
                c.max_send_sge = sge;
                c.max_recv_sge = sge;
            }),
        );
    }
    let name = "limits.qp.max_inline_data_reported";
    if r.wants(name) {
        // What a QP asking for 64 bytes inline gets (at least 64).
        let res = Qp::create(
            &env.pd,
            &env.cq,
            IBV_QPT_RC,
            ibv_qp_cap {
                max_inline_data: 64,
                ..Env::default_cap()
            },
            false,
        )
        .map_err(|e| format!("max_inline_data 64: {}", ename(e)))
        .and_then(|qp| {
            r.info(name, format!("asked 64, got {}", qp.cap.max_inline_data));
            if qp.cap.max_inline_data < 64 {
                Err(format!(
                    "got max_inline_data {} < 64",
                    qp.cap.max_inline_data
                ))
            } else {
                Ok(())
            }
        });
        r.result(name, res);
    }

    let name = "limits.cq.cqe_above_max_cqe";
    if r.wants(name) {
        let res = match Cq::create(&env.ctx, d.max_cqe.saturating_add(1), 0) {
            Ok(cq) => Err(format!("created with {} entries", cq.cqe())),
            Err(e) if e != EINVAL => Err(format!("{} instead of EINVAL", ename(e))),
            Err(_) => Ok(()),
        };
        r.result(name, res);
    }
    let name = "limits.cq.cqe_at_max_cqe";
    if r.wants(name) {
        let res = Cq::create(&env.ctx, d.max_cqe, 0)
            .map_err(|e| format!("cqe {}: {}", d.max_cqe, ename(e)))
            .and_then(|cq| {
                let got = cq.cqe();
                let res = if got < d.max_cqe {
                    Err(format!("asked {} entries, got {got}", d.max_cqe))
                } else {
                    Ok(())
                };
                cq.destroy()
                    .map_err(|e| format!("ibv_destroy_cq: {}", ename(e)))
                    .and(res)
            });
        r.result(name, res);
    }
    let name = "limits.cq.comp_vector_out_of_range";
    if r.wants(name) {
        let n = env.ctx.num_comp_vectors();
        let mut errs = Vec::new();
        for v in [n, -1] {
            match Cq::create(&env.ctx, 16, v) {
                Ok(_) => errs.push(format!("comp_vector {v} accepted")),
                Err(e) if e != EINVAL => {
                    errs.push(format!("comp_vector {v}: {} instead of EINVAL", ename(e)))
                }
                Err(_) => {}
            }
        }
        r.result(
            name,
            if errs.is_empty() {
                Ok(())
            } else {
                Err(errs.join("; "))
            },
        );
    }
}
