// SPDX-License-Identifier: GPL-2.0-only
//! Value rules for QP attributes: `modify_qp` validation and `create_qp` capacity checks.
//!
//! A driver's `modify_qp` copies the `ib_qp_attr` fields it cares about into a
//! [`ModifyRequest`], reads a [`QpCurrent`] under the QP's state lock, and calls [`validate`].
//! Only on `Ok` does it commit the [`ValidatedModify`] (still under the lock, with the state
//! unchanged since it was read): nothing is written before everything is known to be valid,
//! so a refused modify leaves the QP untouched (rxe, by contrast, commits the state first).
//!
//! What ib_core already does before the driver is called (checked again here anyway, since
//! kernel callers skip ib_uverbs): ib_uverbs refuses states above `IB_QPS_ERR` and, on the
//! non-extended command, mask bits outside `IB_QP_ATTR_STANDARD_BITS`; `_ib_modify_qp()`
//! masks `rq_psn`/`sq_psn` to 24 bits (with a warning), refuses `IB_QP_ALT_PATH` on RoCE and
//! checks port numbers. Nothing in ib_core checks `dest_qp_num`, `timeout`, `retry_cnt`,
//! `rnr_retry`, `min_rnr_timer`, `path_mtu` or the rd_atomic depths.
//!
//! The contents of the address vector (`IB_QP_AV`: sgid_index, GID type, hop limit, ...) are
//! not checked here; the address-handle code owns them.

use super::port::IbMtu;
use super::psn::{Psn, PSN_MASK};
use super::qp_state::{check_modify, AttrMask, ModifyError, QpCurrent, QpState, QpType, EINVAL};

/// Largest `timeout` (5 bits; 4.096 µs · 2^timeout, 0 = infinite).
pub const MAX_TIMEOUT: u8 = 31;
/// Largest `retry_cnt` (3 bits).
pub const MAX_RETRY_CNT: u8 = 7;
/// Largest `rnr_retry` (3 bits; 7 = retry forever).
pub const MAX_RNR_RETRY: u8 = 7;
/// Largest `min_rnr_timer` (5 bits; an index into the IBTA RNR timer table).
pub const MAX_MIN_RNR_TIMER: u8 = 31;
/// Mask of a 24-bit QP number (`dest_qp_num`, `BTH.DestQP`).
pub const QPN_MASK: u32 = 0x00ff_ffff;

// A QPN and a PSN are both 24-bit BTH fields; keep the two names tied.
const _: () = assert!(QPN_MASK == PSN_MASK);

/// A path migration state: `enum ib_mig_state`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MigState {
    /// `IB_MIG_MIGRATED`.
    Migrated = 0,
    /// `IB_MIG_REARM`.
    Rearm = 1,
    /// `IB_MIG_ARMED`.
    Armed = 2,
}

impl MigState {
    /// The state whose `enum ib_mig_state` value is `raw` (0..=2), else `None`.
    pub const fn from_raw(raw: u32) -> Option<MigState> {
        match raw {
            0 => Some(MigState::Migrated),
            1 => Some(MigState::Rearm),
            2 => Some(MigState::Armed),
            _ => None,
        }
    }
}

/// `enum ib_access_flags` bits, and which of them a QP accepts.
pub mod access {
    /// `IB_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: u32 = 1;
    /// `IB_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// `IB_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// `IB_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    /// `IB_ACCESS_MW_BIND`.
    pub const MW_BIND: u32 = 1 << 4;
    /// `IB_ZERO_BASED`.
    pub const ZERO_BASED: u32 = 1 << 5;
    /// `IB_ACCESS_ON_DEMAND`.
    pub const ON_DEMAND: u32 = 1 << 6;
    /// `IB_ACCESS_HUGETLB`.
    pub const HUGETLB: u32 = 1 << 7;
    /// `IB_ACCESS_FLUSH_GLOBAL`.
    pub const FLUSH_GLOBAL: u32 = 1 << 8;
    /// `IB_ACCESS_FLUSH_PERSISTENT`.
    pub const FLUSH_PERSISTENT: u32 = 1 << 9;
    /// `IB_ACCESS_RELAXED_ORDERING` (`IB_UVERBS_ACCESS_OPTIONAL_FIRST`).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const RELAXED_ORDERING: u32 = 1 << 20;
    /// `IB_ACCESS_OPTIONAL`: bits 20..=29. By the uverbs contract a device that does not
    /// support one of these ignores it instead of failing.
    pub const OPTIONAL: u32 = 0x3ff0_0000;

    /// The bits that mean something on a QP: which remote operations the responder allows
    /// (the `FLUSH_*` bits: which RDMA FLUSH placement types, as rdma_rxe checks them).
    pub const QP_REMOTE: u32 =
        REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC | FLUSH_GLOBAL | FLUSH_PERSISTENT;

    /// The bits [`super::validate`] accepts in `qp_access_flags`: [`QP_REMOTE`], plus
    /// `LOCAL_WRITE` (meaningless on a QP, but rdma-core users pass it and rxe accepts it),
    /// plus the [`OPTIONAL`] range (ignored). Everything else is refused with `EINVAL`:
    /// `MW_BIND`, `ZERO_BASED`, `ON_DEMAND`, `HUGETLB` and undefined bits.
    pub const QP_ACCEPTED: u32 = QP_REMOTE | LOCAL_WRITE | OPTIONAL;
}

/// Device-wide limits a modify or create is checked against (`ib_device_attr` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Number of ports; valid `port_num`s are `1..=phys_port_cnt`. 1 for rrxe.
    pub phys_port_cnt: u32,
    /// Largest `max_send_wr` / `max_recv_wr`.
    pub max_qp_wr: u32,
    /// Largest `max_send_sge`.
    pub max_send_sge: u32,
    /// Largest `max_recv_sge`.
    pub max_recv_sge: u32,
    /// Largest `max_inline_data`.
    pub max_inline_data: u32,
    /// Largest `max_dest_rd_atomic`: RDMA read/atomic requests a QP can have outstanding as
    /// the responder.
    pub max_qp_rd_atom: u32,
    /// Largest `max_rd_atomic`: RDMA read/atomic requests a QP can have outstanding as the
    /// initiator.
    pub max_qp_init_rd_atom: u32,
}

/// Per-port values a modify is checked against (`ib_port_attr` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// P_Key table length; valid `pkey_index`es are below it.
    pub pkey_tbl_len: u32,
    /// The port's active MTU now (from the netdev MTU); `path_mtu` may not exceed it.
    pub active_mtu: IbMtu,
}

/// The `ib_qp_attr` fields a RoCE modify can carry, raw, plus the mask. A field is read only
/// when its mask bit is set; the others may hold anything.
///
/// Not carried: `ah_attr` (checked by the address-handle code), `alt_*` (`IB_QP_ALT_PATH` is
/// refused), `cap` (`IB_QP_CAP` is refused) and `rate_limit` (not a standard bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyRequest {
    /// `attr_mask`.
    pub mask: AttrMask,
    /// `qp_state` (`IB_QP_STATE`).
    pub qp_state: u32,
    /// `cur_qp_state` (`IB_QP_CUR_STATE`).
    pub cur_qp_state: u32,
    /// `path_mtu`, an `enum ib_mtu` (`IB_QP_PATH_MTU`).
    pub path_mtu: u32,
    /// `path_mig_state`, an `enum ib_mig_state` (`IB_QP_PATH_MIG_STATE`).
    pub path_mig_state: u32,
    /// `qkey` (`IB_QP_QKEY`).
    pub qkey: u32,
    /// `rq_psn` (`IB_QP_RQ_PSN`).
    pub rq_psn: u32,
    /// `sq_psn` (`IB_QP_SQ_PSN`).
    pub sq_psn: u32,
    /// `dest_qp_num` (`IB_QP_DEST_QPN`).
    pub dest_qp_num: u32,
    /// `qp_access_flags`, the C `int` reinterpreted as bits (`IB_QP_ACCESS_FLAGS`).
    pub qp_access_flags: u32,
    /// `pkey_index` (`IB_QP_PKEY_INDEX`).
    pub pkey_index: u16,
    /// `en_sqd_async_notify` (`IB_QP_EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: u8,
    /// `max_rd_atomic` (`IB_QP_MAX_QP_RD_ATOMIC`).
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic` (`IB_QP_MAX_DEST_RD_ATOMIC`).
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer` (`IB_QP_MIN_RNR_TIMER`).
    pub min_rnr_timer: u8,
    /// `port_num` (`IB_QP_PORT`).
    pub port_num: u32,
    /// `timeout` (`IB_QP_TIMEOUT`).
    pub timeout: u8,
    /// `retry_cnt` (`IB_QP_RETRY_CNT`).
    pub retry_cnt: u8,
    /// `rnr_retry` (`IB_QP_RNR_RETRY`).
    pub rnr_retry: u8,
}

/// A modify that passed every check, in typed form: what the driver commits. Each field is
/// `Some` exactly when its mask bit was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidatedModify {
    /// The QP's state when validated (the commit must still see this state).
    pub cur_state: QpState,
    /// The state to move to (equal to `cur_state` when `IB_QP_STATE` was absent).
    pub next_state: QpState,
    /// The request's mask (only `IB_QP_ATTR_STANDARD_BITS`, by now).
    pub mask: AttrMask,
    /// `path_mtu`.
    pub path_mtu: Option<IbMtu>,
    /// `path_mig_state`.
    pub path_mig_state: Option<MigState>,
    /// `qkey`.
    pub qkey: Option<u32>,
    /// `rq_psn`: the first PSN the responder expects.
    pub rq_psn: Option<Psn>,
    /// `sq_psn`: the first PSN the requester sends.
    pub sq_psn: Option<Psn>,
    /// `dest_qp_num`, 24 bits.
    pub dest_qp_num: Option<u32>,
    /// `qp_access_flags`, reduced to the bits that act on a QP ([`access::QP_REMOTE`] and
    /// `LOCAL_WRITE`); optional-range bits are dropped.
    pub qp_access_flags: Option<u32>,
    /// `pkey_index`, below the P_Key table length.
    pub pkey_index: Option<u16>,
    /// `en_sqd_async_notify`, as a boolean.
    pub en_sqd_async_notify: Option<bool>,
    /// `max_rd_atomic`, at most `max_qp_init_rd_atom`.
    pub max_rd_atomic: Option<u8>,
    /// `max_dest_rd_atomic`, at most `max_qp_rd_atom`.
    pub max_dest_rd_atomic: Option<u8>,
    /// `min_rnr_timer`, at most 31.
    pub min_rnr_timer: Option<u8>,
    /// `port_num`, a port of the device.
    pub port_num: Option<u32>,
    /// `timeout`, at most 31.
    pub timeout: Option<u8>,
    /// `retry_cnt`, at most 7.
    pub retry_cnt: Option<u8>,
    /// `rnr_retry`, at most 7.
    pub rnr_retry: Option<u8>,
}

impl ValidatedModify {
    /// Whether the modify changes the state.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn changes_state(&self) -> bool {
        self.cur_state as u32 != self.next_state as u32
    }
}

/// Checks a whole modify: the state machine ([`check_modify`]) first, then every attribute
/// value ([`check_values`]). Pure: reads nothing but its arguments, writes nothing.
///
/// The driver must read `current` and commit the result under the same hold of the QP's
/// state lock, so that the state cannot change in between.
pub fn validate(
    req: &ModifyRequest,
    current: &QpCurrent,
    limits: &DeviceLimits,
    port: &PortInfo,
) -> Result<ValidatedModify, ModifyError> {
    let next_state = check_modify(*current, req.mask, req.qp_state, req.cur_qp_state)?;
    check_values(
        req,
        current.state,
        next_state,
        current.qp_type,
        limits,
        port,
    )
}

/// Checks the value of every attribute whose bit is in `req.mask`, in mask-bit order, and
/// returns them typed. Does not check the state machine (see [`validate`]): `cur_state` and
/// `next_state` are only copied into the result.
///
/// Rules: bits outside `IB_QP_ATTR_STANDARD_BITS` → `EOPNOTSUPP`; `IB_QP_ALT_PATH` and
/// `IB_QP_CAP` refused; `qp_access_flags` only on RC and UC, within
/// [`access::QP_ACCEPTED`]; `pkey_index < pkey_tbl_len`; `1 <= port_num <= phys_port_cnt`;
/// `qkey` only on UD/GSI/SMI; `path_mtu` in 1..=5 and at most the active MTU;
/// `timeout <= 31`; `retry_cnt <= 7`; `rnr_retry <= 7`; `rq_psn`, `sq_psn`, `dest_qp_num`
/// within 24 bits; `max_rd_atomic <= max_qp_init_rd_atom`;
/// `max_dest_rd_atomic <= max_qp_rd_atom`; `min_rnr_timer <= 31`; `path_mig_state` in 0..=2.
pub fn check_values(
    req: &ModifyRequest,
    cur_state: QpState,
    next_state: QpState,
    qp_type: QpType,
    limits: &DeviceLimits,
    port: &PortInfo,
) -> Result<ValidatedModify, ModifyError> {
    let mask = req.mask;
    let unsupported = mask.difference(AttrMask::STANDARD_BITS);
    if !unsupported.is_empty() {
        return Err(ModifyError::UnsupportedMask(unsupported));
    }
    let has = |bit: AttrMask| mask.contains(bit);
    let mut out = ValidatedModify {
        cur_state,
        next_state,
        mask,
        path_mtu: None,
        path_mig_state: None,
        qkey: None,
        rq_psn: None,
        sq_psn: None,
        dest_qp_num: None,
        qp_access_flags: None,
        pkey_index: None,
        en_sqd_async_notify: None,
        max_rd_atomic: None,
        max_dest_rd_atomic: None,
        min_rnr_timer: None,
        port_num: None,
        timeout: None,
        retry_cnt: None,
        rnr_retry: None,
    };

    if has(AttrMask::EN_SQD_ASYNC_NOTIFY) {
        out.en_sqd_async_notify = Some(req.en_sqd_async_notify != 0);
    }
    if has(AttrMask::ACCESS_FLAGS) {
        if !matches!(qp_type, QpType::Rc | QpType::Uc) {
            return Err(ModifyError::AccessFlagsNotAllowed(qp_type));
        }
        let bad = req.qp_access_flags & !access::QP_ACCEPTED;
        if bad != 0 {
            return Err(ModifyError::InvalidAccessFlags(bad));
        }
        out.qp_access_flags = Some(req.qp_access_flags & (access::QP_REMOTE | access::LOCAL_WRITE));
    }
    if has(AttrMask::PKEY_INDEX) {
        if u32::from(req.pkey_index) >= port.pkey_tbl_len {
            return Err(ModifyError::InvalidPkeyIndex(req.pkey_index));
        }
        out.pkey_index = Some(req.pkey_index);
    }
    if has(AttrMask::PORT) {
        if req.port_num == 0 || req.port_num > limits.phys_port_cnt {
            return Err(ModifyError::InvalidPort(req.port_num));
        }
        out.port_num = Some(req.port_num);
    }
    if has(AttrMask::QKEY) {
        if !qp_type.is_datagram() {
            return Err(ModifyError::QkeyNotAllowed(qp_type));
        }
        out.qkey = Some(req.qkey);
    }
    if has(AttrMask::PATH_MTU) {
        let mtu = match IbMtu::from_raw(req.path_mtu) {
            Some(mtu) => mtu,
            None => return Err(ModifyError::InvalidPathMtu(req.path_mtu)),
        };
        if mtu > port.active_mtu {
            return Err(ModifyError::PathMtuAboveActive {
                requested: mtu as u32,
                active: port.active_mtu as u32,
            });
        }
        out.path_mtu = Some(mtu);
    }
    if has(AttrMask::TIMEOUT) {
        if req.timeout > MAX_TIMEOUT {
            return Err(ModifyError::InvalidTimeout(req.timeout));
        }
        out.timeout = Some(req.timeout);
    }
    if has(AttrMask::RETRY_CNT) {
        if req.retry_cnt > MAX_RETRY_CNT {
            return Err(ModifyError::InvalidRetryCnt(req.retry_cnt));
        }
        out.retry_cnt = Some(req.retry_cnt);
    }
    if has(AttrMask::RNR_RETRY) {
        if req.rnr_retry > MAX_RNR_RETRY {
            return Err(ModifyError::InvalidRnrRetry(req.rnr_retry));
        }
        out.rnr_retry = Some(req.rnr_retry);
    }
    if has(AttrMask::RQ_PSN) {
        match Psn::new(req.rq_psn) {
            Some(psn) => out.rq_psn = Some(psn),
            None => return Err(ModifyError::InvalidRqPsn(req.rq_psn)),
        }
    }
    if has(AttrMask::MAX_QP_RD_ATOMIC) {
        if u32::from(req.max_rd_atomic) > limits.max_qp_init_rd_atom {
            return Err(ModifyError::MaxRdAtomicTooLarge {
                requested: req.max_rd_atomic,
                limit: limits.max_qp_init_rd_atom,
            });
        }
        out.max_rd_atomic = Some(req.max_rd_atomic);
    }
    if has(AttrMask::ALT_PATH) {
        return Err(ModifyError::AltPathUnsupported);
    }
    if has(AttrMask::MIN_RNR_TIMER) {
        if req.min_rnr_timer > MAX_MIN_RNR_TIMER {
            return Err(ModifyError::InvalidMinRnrTimer(req.min_rnr_timer));
        }
        out.min_rnr_timer = Some(req.min_rnr_timer);
    }
    if has(AttrMask::SQ_PSN) {
        match Psn::new(req.sq_psn) {
            Some(psn) => out.sq_psn = Some(psn),
            None => return Err(ModifyError::InvalidSqPsn(req.sq_psn)),
        }
    }
    if has(AttrMask::MAX_DEST_RD_ATOMIC) {
        if u32::from(req.max_dest_rd_atomic) > limits.max_qp_rd_atom {
            return Err(ModifyError::MaxDestRdAtomicTooLarge {
                requested: req.max_dest_rd_atomic,
                limit: limits.max_qp_rd_atom,
            });
        }
        out.max_dest_rd_atomic = Some(req.max_dest_rd_atomic);
    }
    if has(AttrMask::PATH_MIG_STATE) {
        match MigState::from_raw(req.path_mig_state) {
            Some(state) => out.path_mig_state = Some(state),
            None => return Err(ModifyError::InvalidPathMigState(req.path_mig_state)),
        }
    }
    if has(AttrMask::CAP) {
        return Err(ModifyError::CapNotModifiable);
    }
    if has(AttrMask::DEST_QPN) {
        if req.dest_qp_num & !QPN_MASK != 0 {
            return Err(ModifyError::InvalidDestQpn(req.dest_qp_num));
        }
        out.dest_qp_num = Some(req.dest_qp_num);
    }
    Ok(out)
}

/// Requested queue capacities: `struct ib_qp_cap`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCap {
    /// `max_send_wr`.
    pub max_send_wr: u32,
    /// `max_recv_wr`.
    pub max_recv_wr: u32,
    /// `max_send_sge`.
    pub max_send_sge: u32,
    /// `max_recv_sge`.
    pub max_recv_sge: u32,
    /// `max_inline_data`.
    pub max_inline_data: u32,
}

/// Which capacity of a [`QpCap`] is over its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapField {
    /// `max_send_wr` over `max_qp_wr`.
    SendWr,
    /// `max_recv_wr` over `max_qp_wr`.
    RecvWr,
    /// `max_send_sge` over `max_send_sge`.
    SendSge,
    /// `max_recv_sge` over `max_recv_sge`.
    RecvSge,
    /// `max_inline_data` over `max_inline_data`.
    InlineData,
}

/// A `create_qp` capacity over the device limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapError {
    /// The capacity.
    pub field: CapField,
    /// What was asked for.
    pub requested: u32,
    /// The device's limit.
    pub limit: u32,
}

impl CapError {
    /// The positive errno to return (negated) from `create_qp`: `EINVAL`.
    pub const fn errno(&self) -> i32 {
        EINVAL
    }
}

/// Checks `create_qp` capacities against the device limits, as rxe's `rxe_qp_chk_cap()`:
/// send WRs, send SGEs and inline data always; receive WRs and SGEs only without an SRQ
/// (with one, the QP has no receive queue and ib_core ignores them). Zero is allowed
/// everywhere. The first capacity over its limit, in [`CapField`] order, is reported.
pub const fn check_caps(cap: &QpCap, has_srq: bool, limits: &DeviceLimits) -> Result<(), CapError> {
    const fn over(field: CapField, requested: u32, limit: u32) -> Result<(), CapError> {
        if requested > limit {
            Err(CapError {
                field,
                requested,
                limit,
            })
        } else {
            Ok(())
        }
    }
    if let Err(e) = over(CapField::SendWr, cap.max_send_wr, limits.max_qp_wr) {
        return Err(e);
    }
    if !has_srq {
        if let Err(e) = over(CapField::RecvWr, cap.max_recv_wr, limits.max_qp_wr) {
            return Err(e);
        }
    }
    if let Err(e) = over(CapField::SendSge, cap.max_send_sge, limits.max_send_sge) {
        return Err(e);
    }
    if !has_srq {
        if let Err(e) = over(CapField::RecvSge, cap.max_recv_sge, limits.max_recv_sge) {
            return Err(e);
        }
    }
    over(
        CapField::InlineData,
        cap.max_inline_data,
        limits.max_inline_data,
    )
}
