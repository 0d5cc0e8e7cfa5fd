// SPDX-License-Identifier: GPL-2.0-only
//! modify_qp: the request validated in full against the QP's current state (the data path's,
//! where it moved the QP to ERR or SQE on its own) before anything is committed, then applied to
//! the engine under the QP lock by the QP's data-path half (`datapath/qp/state.rs`).

use super::{engine_config, entered_by_data_path, limits, port_mtu, QpAttrs, QpFacts, RrxeQp};
use crate::ib::{device::Device, objects::AddressVector, udata::Udata};
use crate::logic::{
    limits as lim,
    qp_attr::{self, ModifyRequest, PortInfo},
    qp_state::{AttrMask, QpCurrent, QpState},
    transport as tp,
};
use crate::verbs::{av, device::Rrxe, errno};
use kernel::prelude::*;

impl RrxeQp {
    /// `modify_qp`: the request is validated, its attributes committed, and the engine's
    /// configuration, path, PSNs and state applied by the data path ([`QpInner::apply`]).
    ///
    /// [`QpInner::apply`]: crate::datapath::qp::QpInner::apply
    pub(in crate::verbs) fn modify(
        &self,
        dev: &Device<Rrxe>,
        req: &ModifyRequest,
        avec: Option<&AddressVector>,
        udata: Option<&Udata>,
    ) -> Result {
        if let Some(u) = udata {
            u.expect_no_cmd()?;
        }
        let port = PortInfo {
            pkey_tbl_len: u32::from(lim::PKEY_TBL_LEN),
            active_mtu: port_mtu(dev),
        };
        let mut a = self.attrs.lock();
        // Everything is validated before anything is written: a refused modify changes nothing.
        let v = validate_now(self, &mut a, req, &port)?;
        let path = match avec {
            Some(avec) => {
                let dqpn = v.dest_qp_num.unwrap_or(a.dest_qp_num);
                let p = av::resolve(dev, avec, Some((self.qpn, dqpn)))?;
                dev.data().fabric.need_wire(&p)?;
                Some(p)
            }
            None => None,
        };
        // Resolving may have slept (route lookup, opening the namespace's socket), and the data path
        // may have moved the QP to ERR meanwhile: validate again against the state as it is now, so
        // the transition is the one IBTA allows from there (from ERR: only RESET or ERR). Nothing
        // sleeps from here to `apply`, and a move the data path makes in between is caught there,
        // under the QP lock (`QpState::modify_applies`): it is not overwritten.
        let v = if self.inner.snapshot().0 != a.state {
            validate_now(self, &mut a, req, &port)?
        } else {
            v
        };
        let from = a.state;

        let srq_sge = if self.has_srq {
            self.inner.srq_max_sge()
        } else {
            0
        };
        // What the engine's configuration is derived from besides the attributes.
        let facts = QpFacts {
            qpn: self.qpn,
            qp_type: self.qp_type,
            sq_sig_all: self.sq_sig_all,
            cap: &self.cap,
            has_srq: self.has_srq,
            srq_sge,
            local_ops: self.kernel,
        };
        // Room for a packet of the MTU the engine will run with (a datagram QP's is the port's
        // now, a connected one's its path MTU), allocated before anything is committed; kept,
        // never shrunk.
        let mtu = if self.qp_type.is_datagram() {
            port.active_mtu
        } else {
            v.path_mtu.unwrap_or(a.path_mtu)
        };
        self.inner.fit_scratch(tp::packet_room(mtu.bytes()))?;
        if v.next_state == QpState::Reset && a.state != QpState::Reset {
            // Back to RESET: the QP is as created, its queues emptied.
            *a = QpAttrs::reset();
            let cfg = engine_config(&facts, &a, port.active_mtu);
            self.inner.apply(
                cfg,
                None,
                Some(0),
                Some(0),
                Some((QpState::Reset, false)),
                from,
                (true, true),
            );
            return Ok(());
        }
        // Storage for the responder resources `max_dest_rd_atomic` asks for, allocated before
        // anything is committed (a refused allocation changes nothing); kept, never shrunk.
        if let Some(n) = v.max_dest_rd_atomic {
            let want = tp::resources_for(n);
            if want > self.inner.resource_storage() {
                let new = KVVec::from_elem(tp::Resource::default(), want, GFP_KERNEL_ACCOUNT)?;
                drop(self.inner.grow_resources(new));
            }
        }
        // Commit every attribute the request carried (validated above).
        macro_rules! commit {
            ($($field:ident),* $(,)?) => {$(
                if let Some(x) = v.$field {
                    a.$field = x;
                }
            )*};
        }
        commit!(
            path_mtu,
            path_mig_state,
            qkey,
            dest_qp_num,
            pkey_index,
            en_sqd_async_notify,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
        );
        if let Some(x) = v.rq_psn {
            a.rq_psn = x.get();
        }
        if let Some(x) = v.sq_psn {
            a.sq_psn = x.get();
        }
        if let Some(x) = v.qp_access_flags {
            a.access = x;
        }
        if path.is_some() {
            a.path = path;
        }
        let state_change = (v.next_state != a.state || v.mask.contains(AttrMask::STATE))
            .then_some((v.next_state, a.en_sqd_async_notify));
        a.state = v.next_state;
        let cfg = engine_config(&facts, &a, port.active_mtu);
        // The state the QP is in (the data path's ERR or SQE, if it moved meanwhile).
        a.state = self.inner.apply(
            cfg,
            path,
            v.sq_psn.map(|p| p.get()),
            v.rq_psn.map(|p| p.get()),
            state_change,
            from,
            (v.retry_cnt.is_some(), v.rnr_retry.is_some()),
        );
        Ok(())
    }
}

/// Brings `a.state` up to date with the data path (which moves the QP to ERR or SQE on its own)
/// and validates `req` against it, as rxe and IBTA do: the current state is the QP's, not the
/// one the last modify set.
fn validate_now(
    qp: &RrxeQp,
    a: &mut QpAttrs,
    req: &ModifyRequest,
    port: &PortInfo,
) -> Result<qp_attr::ValidatedModify> {
    let (dp_state, _, _, draining) = qp.inner.snapshot();
    if entered_by_data_path(dp_state) {
        a.state = dp_state;
    }
    a.sq_draining = draining && a.state == QpState::Sqd;
    let cur = QpCurrent {
        qp_type: qp.qp_type,
        state: a.state,
        sq_draining: a.sq_draining,
    };
    qp_attr::validate(req, &cur, &limits(), port).map_err(|e| errno(e.errno()))
}
