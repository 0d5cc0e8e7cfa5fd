//! 8. `--hold`: creates one of each object and sleeps until killed, so that the guest script
//!    can SIGKILL it and check that the kernel releases everything. Prints one line
//!    `HOLDING pd=N cq=N qp=N mr=N ah=N` (what this process holds) once all exist.

use std::io::Write;
use std::time::Duration;

use rrxe_verbs_test::util::ename;
use rrxe_verbs_test::verbs::{Ah, Mr};

use crate::env::{Env, S, TYPES};

pub fn run(env: &Env) -> Result<(), String> {
    let mut qps = Vec::new();
    for t in TYPES {
        let qp = env.new_qp(t)?;
        env.goto(&qp, S::Rts)?;
        qps.push(qp);
    }
    let mr = Mr::reg(&env.pd, 64 * 1024, super::cycles::MR_ACCESS)
        .map_err(|e| format!("ibv_reg_mr: {}", ename(e)))?;
    let ah = Ah::create(&env.pd, &env.ah_attr(&env.a, env.gid))
        .map_err(|e| format!("ibv_create_ah: {}", ename(e)))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "HOLDING pd=1 cq=1 qp={} mr=1 ah=1", qps.len());
    let _ = out.flush();
    drop(out);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
        // Never reached in practice; keeps the objects alive.
        let _ = (&qps, &mr, &ah);
    }
}
