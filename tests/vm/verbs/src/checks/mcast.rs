//! 5b. Multicast (UD), through the verbs a raw-verbs application uses:
//!    - `max_mcast_grp` / `max_mcast_qp_attach` are advertised (INFO);
//!    - an address handle to a group (::ffff:239.1.2.9) is accepted;
//!    - a UD QP attaches, attaches again (uverbs answers 0 without a second attachment),
//!      detaches, and a second detach is EINVAL;
//!    - an RC QP, and a unicast GID, are refused (EINVAL);
//!    - a group takes `max_mcast_qp_attach` QPs and refuses one more (ENOMEM, as rdma_rxe);
//!    - the group's MAC is in the netdev's filter while it has members and gone after the last
//!      detach; destroying a QP still attached is EBUSY (ib_core: the application detaches).

use std::net::Ipv4Addr;

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{ename, Report, EINVAL};
use rrxe_verbs_test::verbs::{Ah, Qp};

use crate::env::{v4_mapped, Env};

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 9);
/// The group's Ethernet address as `/proc/net/dev_mcast` prints it (01:00:5e + low 23 bits).
const GROUP_MAC: &str = "01005e010209";

/// Whether some netdev's multicast filter holds `mac`.
fn in_dev_mcast(mac: &str) -> bool {
    std::fs::read_to_string("/proc/net/dev_mcast")
        .map(|t| t.lines().any(|l| l.split_whitespace().nth(4) == Some(mac)))
        .unwrap_or(false)
}

fn attach(qp: &Qp, gid: [u8; 16]) -> Result<(), i32> {
    let g = ibv_gid { raw: gid };
    // SAFETY: a live QP of ours and a GID on the stack; returns an errno, not -1.
    match unsafe { ibv_attach_mcast(qp.ptr, &g, 0) } {
        0 => Ok(()),
        e => Err(e),
    }
}

fn detach(qp: &Qp, gid: [u8; 16]) -> Result<(), i32> {
    let g = ibv_gid { raw: gid };
    // SAFETY: as in `attach`.
    match unsafe { ibv_detach_mcast(qp.ptr, &g, 0) } {
        0 => Ok(()),
        e => Err(e),
    }
}

fn expect(what: &str, got: Result<(), i32>, want: Option<i32>) -> Result<(), String> {
    match (got, want) {
        (Ok(()), None) => Ok(()),
        (Err(e), Some(w)) if e == w => Ok(()),
        (Ok(()), Some(w)) => Err(format!("{what}: succeeded, expected {}", ename(w))),
        (Err(e), _) => Err(format!(
            "{what}: {}{}",
            ename(e),
            want.map(|w| format!(", expected {}", ename(w)))
                .unwrap_or_default()
        )),
    }
}

pub fn run(env: &Env, r: &mut Report) {
    if !r.wants_any("mcast") {
        return;
    }
    let group = v4_mapped(GROUP);
    let name = "mcast.device_limits";
    if r.wants(name) {
        let (g, q) = (env.dev.max_mcast_grp, env.dev.max_mcast_qp_attach);
        r.info(
            name,
            format!(
                "max_mcast_grp {g}, max_mcast_qp_attach {q}, max_total_mcast_qp_attach {}",
                env.dev.max_total_mcast_qp_attach
            ),
        );
        r.result(
            name,
            if g > 0 && q > 0 {
                Ok(())
            } else {
                Err("no multicast advertised".into())
            },
        );
    }
    let name = "mcast.ah_to_group";
    if r.wants(name) {
        let mut attr = env.ah_attr(&env.a, env.gid);
        attr.grh.dgid.raw = group;
        let res = Ah::create(&env.pd, &attr)
            .map_err(|e| format!("ibv_create_ah to a group: {}", ename(e)))
            .and_then(|ah| {
                ah.destroy()
                    .map_err(|e| format!("ibv_destroy_ah: {}", ename(e)))
            });
        r.result(name, res);
    }
    let name = "mcast.attach_detach";
    if r.wants(name) {
        let res = env.new_qp(IBV_QPT_UD).and_then(|qp| {
            expect("attach", attach(&qp, group), None)?;
            expect("attach again", attach(&qp, group), None)?;
            expect("detach", detach(&qp, group), None)?;
            expect("detach again", detach(&qp, group), Some(EINVAL))?;
            qp.destroy()
                .map_err(|e| format!("ibv_destroy_qp: {}", ename(e)))
        });
        r.result(name, res);
    }
    let name = "mcast.rc_qp_refused";
    if r.wants(name) {
        let res = env
            .new_qp(IBV_QPT_RC)
            .and_then(|qp| expect("attach of an RC QP", attach(&qp, group), Some(EINVAL)));
        r.result(name, res);
    }
    let name = "mcast.unicast_gid_refused";
    if r.wants(name) {
        let res = env.new_qp(IBV_QPT_UD).and_then(|qp| {
            expect(
                "attach to a unicast GID",
                attach(&qp, v4_mapped(Ipv4Addr::new(10, 99, 0, 1))),
                Some(EINVAL),
            )
        });
        r.result(name, res);
    }
    let name = "mcast.group_full";
    if r.wants(name) {
        let max = env.dev.max_mcast_qp_attach.clamp(0, 1024) as usize;
        let res = (|| {
            let mut qps = Vec::with_capacity(max + 1);
            for i in 0..=max {
                let qp = env.new_qp(IBV_QPT_UD)?;
                let want = if i < max { None } else { Some(libc::ENOMEM) };
                expect(
                    &format!("attach of QP {} of {max}", i + 1),
                    attach(&qp, group),
                    want,
                )?;
                qps.push(qp);
            }
            // The netdev accepts the group's MAC while it has members.
            if !in_dev_mcast(GROUP_MAC) {
                return Err(format!(
                    "{GROUP_MAC} not in /proc/net/dev_mcast while attached"
                ));
            }
            // ib_core refuses to destroy a QP that is still attached (EBUSY: the application
            // detaches first; only process exit detaches for it).
            if let Some(qp) = qps.first() {
                let p = qp.ptr;
                // SAFETY: a live QP of ours; on success it is gone, and `qps` must not drop it.
                match unsafe { ibv_destroy_qp(p) } {
                    libc::EBUSY => {}
                    0 => {
                        std::mem::forget(qps.remove(0));
                        return Err("ibv_destroy_qp of an attached QP succeeded".into());
                    }
                    e => return Err(format!("ibv_destroy_qp of an attached QP: {}", ename(e))),
                }
            }
            for (i, qp) in qps.into_iter().enumerate() {
                if i < max {
                    expect("detach", detach(&qp, group), None)?;
                }
                qp.destroy()
                    .map_err(|e| format!("ibv_destroy_qp after detach: {}", ename(e)))?;
            }
            if in_dev_mcast(GROUP_MAC) {
                return Err(format!(
                    "{GROUP_MAC} still in /proc/net/dev_mcast after the last detach"
                ));
            }
            // The group is gone with its last member: a new one can be made and left.
            let qp = env.new_qp(IBV_QPT_UD)?;
            expect("attach after the group emptied", attach(&qp, group), None)?;
            expect("detach", detach(&qp, group), None)
        })();
        r.result(name, res);
    }
}
