//! 7. Create/destroy cycles of every object (PD, CQ, RC/UC/UD QP, MR over a heap buffer, AH),
//!    `--cycles` each (1000 by default), plus a tenth as many RC QPs taken to RTS (address
//!    vector, sgid reference) before being destroyed. Every create and destroy must succeed;
//!    the INFO lines give the counts. (The guest script compares `rdma res show` and
//!    /proc/slabinfo before and after.)

use std::time::Instant;

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{ename, Report};
use rrxe_verbs_test::verbs::{Ah, Cq, Mr, Pd, Qp};

use crate::env::{Env, S};

enum Err {
    Create(String),
    Destroy(String),
}

fn d<T>(r: Result<T, i32>, what: &str) -> Result<T, Err> {
    r.map_err(|e| Err::Destroy(format!("{what}: {}", ename(e))))
}

fn c<T>(r: Result<T, i32>, what: &str) -> Result<T, Err> {
    r.map_err(|e| Err::Create(format!("{what}: {}", ename(e))))
}

pub const MR_ACCESS: u32 =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

pub fn run(env: &Env, r: &mut Report, n: u32) {
    if !r.wants_any("cycles") {
        return;
    }
    let qp = |t: u32| -> Result<(), Err> {
        let q = c(
            Qp::create(&env.pd, &env.cq, t, Env::default_cap(), false),
            "ibv_create_qp",
        )?;
        d(q.destroy(), "ibv_destroy_qp")
    };
    type Cycle<'a> = Box<dyn Fn() -> Result<(), Err> + 'a>;
    let kinds: Vec<(&str, u32, Cycle)> = vec![
        (
            "cycles.pd",
            n,
            Box::new(|| {
                let p = c(Pd::alloc(&env.ctx), "ibv_alloc_pd")?;
                d(p.destroy(), "ibv_dealloc_pd")
            }),
        ),
        (
            "cycles.cq",
            n,
            Box::new(|| {
                let q = c(Cq::create(&env.ctx, 64, 0), "ibv_create_cq")?;
                d(q.destroy(), "ibv_destroy_cq")
            }),
        ),
        ("cycles.qp_rc", n, Box::new(move || qp(IBV_QPT_RC))),
        ("cycles.qp_uc", n, Box::new(move || qp(IBV_QPT_UC))),
        ("cycles.qp_ud", n, Box::new(move || qp(IBV_QPT_UD))),
        (
            "cycles.mr",
            n,
            Box::new(|| {
                let m = c(Mr::reg(&env.pd, 64 * 1024, MR_ACCESS), "ibv_reg_mr")?;
                d(m.destroy(), "ibv_dereg_mr")
            }),
        ),
        (
            "cycles.ah",
            n,
            Box::new(|| {
                let a = c(
                    Ah::create(&env.pd, &env.ah_attr(&env.a, env.gid)),
                    "ibv_create_ah",
                )?;
                d(a.destroy(), "ibv_destroy_ah")
            }),
        ),
        (
            "cycles.qp_rc_rts",
            n.div_ceil(10),
            Box::new(|| {
                let q = c(
                    Qp::create(&env.pd, &env.cq, IBV_QPT_RC, Env::default_cap(), false),
                    "ibv_create_qp",
                )?;
                env.goto(&q, S::Rts).map_err(Err::Create)?;
                d(q.destroy(), "ibv_destroy_qp")
            }),
        ),
    ];
    for (name, count, cycle) in &kinds {
        if !r.wants(name) {
            continue;
        }
        let t0 = Instant::now();
        let (mut created, mut destroyed) = (0u32, 0u32);
        let mut err = None;
        for i in 0..*count {
            match cycle() {
                Ok(()) => {
                    created += 1;
                    destroyed += 1;
                }
                Err(Err::Create(e)) => {
                    err = Some(format!("cycle {i}: {e}"));
                    break;
                }
                Err(Err::Destroy(e)) => {
                    created += 1;
                    err = Some(format!("cycle {i}: {e}"));
                    break;
                }
            }
        }
        r.info(
            name,
            format!(
                "{created} created, {destroyed} destroyed of {count} in {:.1} s",
                t0.elapsed().as_secs_f64()
            ),
        );
        r.result(
            name,
            match err {
                Some(e) => Err(e),
                None => Ok(()),
            },
        );
    }
}
