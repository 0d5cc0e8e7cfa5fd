//! QP types a RoCE device without XRC/raw support must refuse: XRC send (ibv_create_qp_ex,
//! IBV_QPT_XRC_SEND) → EOPNOTSUPP; raw packet → refused (EOPNOTSUPP expected, the errno is
//! reported); an XRC domain → refused. GSI/SMI QPs cannot be created from user space (no
//! ibv_qp_type for them): SKIP.

use rrxe_verbs_test::ffi::*;
use rrxe_verbs_test::util::{ename, errno, Report, EOPNOTSUPP};
use rrxe_verbs_test::verbs::Qp;

use crate::env::Env;

pub fn run(env: &Env, r: &mut Report) {
    if !r.wants_any("create") {
        return;
    }
    let name = "create.xrc_send_eopnotsupp";
    if r.wants(name) {
        let mut ia = ibv_qp_init_attr_ex {
            send_cq: env.cq.ptr,
            recv_cq: env.cq.ptr,
            cap: Env::default_cap(),
            qp_type: IBV_QPT_XRC_SEND,
            comp_mask: IBV_QP_INIT_ATTR_PD,
            pd: env.pd.ptr,
            ..zeroed()
        };
        ia.cap.max_recv_wr = 0;
        ia.cap.max_recv_sge = 0;
        // SAFETY: valid context, attr lives across the call.
        let p = unsafe { vt_create_qp_ex(env.ctx.ptr, &mut ia) };
        if p.is_null() {
            let e = errno();
            r.info(name, format!("ibv_create_qp_ex(XRC_SEND): {}", ename(e)));
            r.result(
                name,
                if e == EOPNOTSUPP {
                    Ok(())
                } else {
                    Err(format!("{} instead of EOPNOTSUPP", ename(e)))
                },
            );
        } else {
            // SAFETY: just created.
            unsafe { ibv_destroy_qp(p) };
            r.fail(name, "an XRC send QP was created");
        }
    }
    let name = "create.raw_packet_refused";
    if r.wants(name) {
        match Qp::create(
            &env.pd,
            &env.cq,
            IBV_QPT_RAW_PACKET,
            Env::default_cap(),
            false,
        ) {
            Ok(_) => r.fail(name, "a raw packet QP was created"),
            Err(e) => {
                r.info(name, format!("ibv_create_qp(RAW_PACKET): {}", ename(e)));
                r.result(
                    name,
                    if e == EOPNOTSUPP {
                        Ok(())
                    } else {
                        Err(format!("{} instead of EOPNOTSUPP", ename(e)))
                    },
                );
            }
        }
    }
    let name = "create.xrcd_refused";
    if r.wants(name) {
        let mut xa = ibv_xrcd_init_attr {
            comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        // SAFETY: valid context, attr lives across the call.
        let x = unsafe { vt_open_xrcd(env.ctx.ptr, &mut xa) };
        if x.is_null() {
            r.info(name, format!("ibv_open_xrcd: {}", ename(errno())));
            r.pass(name);
        } else {
            // SAFETY: just opened.
            unsafe { vt_close_xrcd(x) };
            r.fail(name, "an XRC domain was opened");
        }
    }
    if r.wants("create.gsi") {
        r.skip(
            "create.gsi",
            "GSI/SMI QPs are not creatable from user space (no ibv_qp_type)",
        );
    }
}
