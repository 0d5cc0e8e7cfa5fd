//! 5. Address resolution, on an RC QP's INIT→RTR (address vector) and on UD address handles:
//!    - a bad sgid_index (beyond the GID table: EINVAL; an empty entry: fails) is refused;
//!    - an AV without GRH, or on another port, is refused (EINVAL);
//!    - an unreachable dgid (::ffff:203.0.113.7: the guest has no route to it; the resolution
//!      at most sends ARP requests on the test link) fails; the INFO line gives the errno and
//!      how long the modify took;
//!    - our own GID and the GID of the link's other address (::ffff:10.99.0.2 for rrxe0 on
//!      veth0; ::ffff:10.99.0.1 for rxe0 on veth1) are accepted.

use std::net::Ipv4Addr;
use std::time::Instant;

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{ename, Report, EINVAL};
use rrxe_verbs_test::verbs::{Ah, Qp};

use crate::env::{gid_str, v4_mapped, Env, S, STATE};

const UNREACHABLE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 7);

/// An sgid_index below the table length whose entry is empty, if any (highest first).
fn empty_gid_index(env: &Env) -> Option<u8> {
    let len = env.port_attr.gid_tbl_len.clamp(0, 256) as u32;
    (0..len)
        .rev()
        .find(|&i| env.ctx.query_gid_ex(env.port, i).is_err())
        .map(|i| i as u8)
}

/// INIT→RTR of an RC QP with the usual required attributes and the AV changed by `f`.
fn rtr_attr(env: &Env, qp: &Qp, f: &dyn Fn(&mut ibv_ah_attr)) -> (ibv_qp_attr, u32) {
    let mut attr = env.attr(&env.a, qp, S::Rtr, S::Init);
    f(&mut attr.ah_attr);
    let (req, _) = crate::env::req_opt(S::Init, S::Rtr, IBV_QPT_RC).unwrap_or_default();
    (attr, req | STATE)
}

pub fn run(env: &Env, r: &mut Report) {
    if !r.wants_any("addr") {
        return;
    }
    let qp = match env.new_qp(IBV_QPT_RC) {
        Ok(q) => q,
        Err(e) => {
            r.fail("addr", e);
            return;
        }
    };
    let tbl = env.port_attr.gid_tbl_len;
    let empty = empty_gid_index(env);
    let unreach = v4_mapped(UNREACHABLE);
    let peer = env.peer_ip.map(v4_mapped);

    // --- refused address vectors (QP stays in INIT)
    let name = "addr.qp.sgid_index_beyond_table";
    if r.wants(name) {
        if tbl > 255 {
            r.skip(
                name,
                format!("gid_tbl_len {tbl} is beyond what sgid_index (u8) can name"),
            );
        } else {
            let res = env.goto(&qp, S::Init).and_then(|()| {
                let (attr, mask) = rtr_attr(env, &qp, &|ah| ah.grh.sgid_index = tbl as u8);
                env.expect_errno(&qp, S::Init, &attr, mask, EINVAL)
            });
            r.result(name, res);
        }
    }
    let name = "addr.qp.sgid_index_empty_entry";
    if r.wants(name) {
        match empty {
            None => r.skip(name, "every GID table entry is in use"),
            Some(i) => {
                let res = env.goto(&qp, S::Init).and_then(|()| {
                    let (attr, mask) = rtr_attr(env, &qp, &|ah| ah.grh.sgid_index = i);
                    env.expect_fail(&qp, S::Init, &attr, mask)
                });
                if let Ok(e) = res {
                    r.info(name, format!("sgid_index {i} (empty): {}", ename(e)));
                }
                r.result(name, res.map(|_| ()));
            }
        }
    }
    let name = "addr.qp.av_without_grh";
    if r.wants(name) {
        let res = env.goto(&qp, S::Init).and_then(|()| {
            let (attr, mask) = rtr_attr(env, &qp, &|ah| ah.is_global = 0);
            env.expect_errno(&qp, S::Init, &attr, mask, EINVAL)
        });
        r.result(name, res);
    }
    let name = "addr.qp.unreachable_dgid";
    if r.wants(name) {
        let t0 = Instant::now();
        let res = env.goto(&qp, S::Init).and_then(|()| {
            let (attr, mask) = rtr_attr(env, &qp, &|ah| ah.grh.dgid.raw = unreach);
            env.expect_fail(&qp, S::Init, &attr, mask)
        });
        if let Ok(e) = res {
            r.info(
                name,
                format!(
                    "dgid {}: {} after {} ms",
                    gid_str(&unreach),
                    ename(e),
                    t0.elapsed().as_millis()
                ),
            );
        }
        r.result(name, res.map(|_| ()));
    }

    // --- accepted address vectors
    let name = "addr.qp.own_gid";
    if r.wants(name) {
        let res = env.goto(&qp, S::Init).and_then(|()| {
            let (attr, mask) = rtr_attr(env, &qp, &|_| ());
            env.step_attr(&qp, S::Init, S::Rtr, &attr, mask)
        });
        r.result(name, res);
    }
    let name = "addr.qp.neighbour_gid";
    if r.wants(name) {
        match peer {
            None => r.skip(name, "no peer address (use --peer)"),
            Some(p) => {
                let res = env.goto(&qp, S::Init).and_then(|()| {
                    let (attr, mask) = rtr_attr(env, &qp, &|ah| ah.grh.dgid.raw = p);
                    env.step_attr(&qp, S::Init, S::Rtr, &attr, mask)
                });
                r.result(name, res.map_err(|e| format!("dgid {}: {e}", gid_str(&p))));
            }
        }
    }
    drop(qp);

    // --- UD address handles
    let ah_case =
        |r: &mut Report, name: &str, f: &dyn Fn(&mut ibv_ah_attr), ok: bool, want: Option<i32>| {
            if !r.wants(name) {
                return;
            }
            let mut attr = env.ah_attr(&env.a, env.gid);
            f(&mut attr);
            let t0 = Instant::now();
            let res = Ah::create(&env.pd, &attr);
            let ms = t0.elapsed().as_millis();
            let dg = gid_str(&unsafe { attr.grh.dgid.raw });
            match (res, ok) {
                (Ok(ah), true) => r.result(
                    name,
                    ah.destroy()
                        .map_err(|e| format!("ibv_destroy_ah: {}", ename(e))),
                ),
                (Ok(_), false) => r.fail(name, format!("ibv_create_ah to {dg} succeeded")),
                (Err(e), true) => r.fail(name, format!("ibv_create_ah to {dg}: {}", ename(e))),
                (Err(e), false) => {
                    r.info(
                        name,
                        format!("ibv_create_ah to {dg}: {} after {ms} ms", ename(e)),
                    );
                    match want {
                        Some(w) if w != e => {
                            r.fail(name, format!("{} instead of {}", ename(e), ename(w)))
                        }
                        _ => r.pass(name),
                    }
                }
            }
        };
    ah_case(r, "addr.ah.own_gid", &|_| (), true, None);
    match peer {
        Some(p) => ah_case(
            r,
            "addr.ah.neighbour_gid",
            &|ah| ah.grh.dgid.raw = p,
            true,
            None,
        ),
        None => {
            if r.wants("addr.ah.neighbour_gid") {
                r.skip("addr.ah.neighbour_gid", "no peer address (use --peer)")
            }
        }
    }
    if tbl <= 255 {
        ah_case(
            r,
            "addr.ah.sgid_index_beyond_table",
            &|ah| ah.grh.sgid_index = tbl as u8,
            false,
            Some(EINVAL),
        );
    } else if r.wants("addr.ah.sgid_index_beyond_table") {
        r.skip(
            "addr.ah.sgid_index_beyond_table",
            format!("gid_tbl_len {tbl} > 255"),
        );
    }
    if let Some(i) = empty {
        ah_case(
            r,
            "addr.ah.sgid_index_empty_entry",
            &|ah| ah.grh.sgid_index = i,
            false,
            None,
        );
    }
    ah_case(
        r,
        "addr.ah.without_grh",
        &|ah| ah.is_global = 0,
        false,
        Some(EINVAL),
    );
    ah_case(
        r,
        "addr.ah.unreachable_dgid",
        &|ah| ah.grh.dgid.raw = unreach,
        false,
        None,
    );
}
