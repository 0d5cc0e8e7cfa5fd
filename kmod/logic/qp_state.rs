// SPDX-License-Identifier: GPL-2.0-only
//! QP states, QP types, the modify attribute mask, and the state-transition rules.
//!
//! [`transition_masks`] and [`modify_is_ok`] replicate `qp_state_table` and
//! `ib_modify_qp_is_ok()` from Linux 6.12 `drivers/infiniband/core/verbs.c` exactly, for every
//! QP type the table has a column for. [`check_modify`] is the driver's entry point: it adds
//! what a driver must decide around that check (the current state comes from the QP, a missing
//! `IB_QP_STATE` means "stay in the current state", `IB_QP_CUR_STATE` must match) and says
//! precisely why a request is refused.
//!
//! Value rules for the individual attributes live in [`super::qp_attr`].

use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Not};

pub use super::errno::{EINVAL, EOPNOTSUPP};

/// A QP state: `enum ib_qp_state`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// `IB_QPS_RESET`.
    Reset = 0,
    /// `IB_QPS_INIT`.
    Init = 1,
    /// `IB_QPS_RTR`: ready to receive.
    Rtr = 2,
    /// `IB_QPS_RTS`: ready to send.
    Rts = 3,
    /// `IB_QPS_SQD`: send queue drain(ing/ed).
    Sqd = 4,
    /// `IB_QPS_SQE`: send queue error.
    Sqe = 5,
    /// `IB_QPS_ERR`.
    Err = 6,
}

impl QpState {
    /// Every state, in numeric order.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// The state whose `enum ib_qp_state` value is `raw`, or `None` above `IB_QPS_ERR`.
    pub const fn from_raw(raw: u32) -> Option<QpState> {
        match raw {
            0 => Some(QpState::Reset),
            1 => Some(QpState::Init),
            2 => Some(QpState::Rtr),
            3 => Some(QpState::Rts),
            4 => Some(QpState::Sqd),
            5 => Some(QpState::Sqe),
            6 => Some(QpState::Err),
            _ => None,
        }
    }

    /// The `enum ib_qp_state` value.
    pub const fn as_raw(self) -> u32 {
        self as u32
    }

    /// Whether a modify to `target`, validated while the QP was in `validated_from`, still sets
    /// its state when the QP is found in `now` as the modify is applied (under the QP lock).
    ///
    /// Only the data path moves a QP between validation and application, and only into ERR
    /// (a fatal error) or SQE (a send error on UC/UD). Such a move is ordered after the modify:
    /// it sticks, unless the modify itself goes to RESET or ERR, which IBTA allows from every
    /// state. Without a move (`now == validated_from`) the modify always applies.
    pub const fn modify_applies(validated_from: QpState, now: QpState, target: QpState) -> bool {
        if now as u32 == validated_from as u32 {
            return true;
        }
        match now {
            QpState::Err | QpState::Sqe => matches!(target, QpState::Reset | QpState::Err),
            _ => true,
        }
    }

    /// The IBTA short name ("RESET", "INIT", "RTR", ...), for log messages.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
}

/// A QP type: `enum ib_qp_type`, restricted to the types `qp_state_table` has a column for
/// (`IB_QPT_MAX` is 11; value 7 is unused, and `IB_QPT_DRIVER`/reserved types are driver
/// private).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// `IB_QPT_SMI`: QP0.
    Smi = 0,
    /// `IB_QPT_GSI`: QP1.
    Gsi = 1,
    /// `IB_QPT_RC`: reliable connected.
    Rc = 2,
    /// `IB_QPT_UC`: unreliable connected.
    Uc = 3,
    /// `IB_QPT_UD`: unreliable datagram.
    Ud = 4,
    /// `IB_QPT_RAW_IPV6`.
    RawIpv6 = 5,
    /// `IB_QPT_RAW_ETHERTYPE`.
    RawEthertype = 6,
    /// `IB_QPT_RAW_PACKET`.
    RawPacket = 8,
    /// `IB_QPT_XRC_INI`: XRC initiator.
    XrcIni = 9,
    /// `IB_QPT_XRC_TGT`: XRC target.
    XrcTgt = 10,
}

impl QpType {
    /// Every type, in numeric order.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const ALL: [QpType; 10] = [
        QpType::Smi,
        QpType::Gsi,
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::RawIpv6,
        QpType::RawEthertype,
        QpType::RawPacket,
        QpType::XrcIni,
        QpType::XrcTgt,
    ];

    /// The type whose `enum ib_qp_type` value is `raw`, or `None` for 7, values from
    /// `IB_QPT_MAX` (11) up, `IB_QPT_DRIVER` and the reserved range.
    pub const fn from_raw(raw: u32) -> Option<QpType> {
        match raw {
            0 => Some(QpType::Smi),
            1 => Some(QpType::Gsi),
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            5 => Some(QpType::RawIpv6),
            6 => Some(QpType::RawEthertype),
            8 => Some(QpType::RawPacket),
            9 => Some(QpType::XrcIni),
            10 => Some(QpType::XrcTgt),
            _ => None,
        }
    }

    /// The `enum ib_qp_type` value.
    pub const fn as_raw(self) -> u32 {
        self as u32
    }

    /// Whether the type carries a Q_Key (the datagram types UD, GSI and SMI).
    pub const fn is_datagram(self) -> bool {
        matches!(self, QpType::Ud | QpType::Gsi | QpType::Smi)
    }
}

/// The attribute mask of a modify: `enum ib_qp_attr_mask`.
///
/// A plain set of bits; any `u32` is representable (unknown bits included), so a mask from
/// user space can be carried as is and refused later with the offending bits named.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AttrMask(u32);

impl AttrMask {
    /// No bit.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const EMPTY: AttrMask = AttrMask(0);
    /// `IB_QP_STATE`.
    pub const STATE: AttrMask = AttrMask(1);
    /// `IB_QP_CUR_STATE`.
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    /// `IB_QP_EN_SQD_ASYNC_NOTIFY`.
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    /// `IB_QP_ACCESS_FLAGS`.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// `IB_QP_PKEY_INDEX`.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// `IB_QP_PORT`.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// `IB_QP_QKEY`.
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    /// `IB_QP_AV`: the primary path's address vector.
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// `IB_QP_PATH_MTU`.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// `IB_QP_TIMEOUT`.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// `IB_QP_RETRY_CNT`.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// `IB_QP_RNR_RETRY`.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// `IB_QP_RQ_PSN`.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// `IB_QP_MAX_QP_RD_ATOMIC`: `max_rd_atomic`, the initiator depth.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// `IB_QP_ALT_PATH`.
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    /// `IB_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// `IB_QP_SQ_PSN`.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// `IB_QP_MAX_DEST_RD_ATOMIC`: `max_dest_rd_atomic`, the responder resources.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// `IB_QP_PATH_MIG_STATE`.
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    /// `IB_QP_CAP`.
    pub const CAP: AttrMask = AttrMask(1 << 19);
    /// `IB_QP_DEST_QPN`.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);
    /// `IB_QP_RATE_LIMIT` (bits 21..=24 are `IB_QP_RESERVED1..4`).
    pub const RATE_LIMIT: AttrMask = AttrMask(1 << 25);
    /// `IB_QP_ATTR_STANDARD_BITS`, `GENMASK(20, 0)`: the bits the non-extended uverbs
    /// modify command accepts, and the only ones rxe, rdmavt and rrxe accept.
    pub const STANDARD_BITS: AttrMask = AttrMask(0x001f_ffff);

    /// The mask with exactly the bits of `bits`, known or not.
    pub const fn from_bits(bits: u32) -> AttrMask {
        AttrMask(bits)
    }

    /// The raw bits.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `self` and `other` share a bit.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub const fn intersects(self, other: AttrMask) -> bool {
        self.0 & other.0 != 0
    }

    /// `self | other`.
    pub const fn union(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }

    /// `self & other`.
    pub const fn intersection(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & other.0)
    }

    /// `self & !other`: the bits of `self` that are not in `other`.
    pub const fn difference(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & !other.0)
    }
}

impl BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, rhs: AttrMask) -> AttrMask {
        self.union(rhs)
    }
}

impl BitOrAssign for AttrMask {
    fn bitor_assign(&mut self, rhs: AttrMask) {
        *self = self.union(rhs);
    }
}

impl BitAnd for AttrMask {
    type Output = AttrMask;
    fn bitand(self, rhs: AttrMask) -> AttrMask {
        self.intersection(rhs)
    }
}

impl BitAndAssign for AttrMask {
    fn bitand_assign(&mut self, rhs: AttrMask) {
        *self = self.intersection(rhs);
    }
}

impl Not for AttrMask {
    type Output = AttrMask;
    fn not(self) -> AttrMask {
        AttrMask(!self.0)
    }
}

/// Names of the mask bits, for `Debug`.
const MASK_NAMES: [(u32, &str); 22] = [
    (AttrMask::STATE.0, "STATE"),
    (AttrMask::CUR_STATE.0, "CUR_STATE"),
    (AttrMask::EN_SQD_ASYNC_NOTIFY.0, "EN_SQD_ASYNC_NOTIFY"),
    (AttrMask::ACCESS_FLAGS.0, "ACCESS_FLAGS"),
    (AttrMask::PKEY_INDEX.0, "PKEY_INDEX"),
    (AttrMask::PORT.0, "PORT"),
    (AttrMask::QKEY.0, "QKEY"),
    (AttrMask::AV.0, "AV"),
    (AttrMask::PATH_MTU.0, "PATH_MTU"),
    (AttrMask::TIMEOUT.0, "TIMEOUT"),
    (AttrMask::RETRY_CNT.0, "RETRY_CNT"),
    (AttrMask::RNR_RETRY.0, "RNR_RETRY"),
    (AttrMask::RQ_PSN.0, "RQ_PSN"),
    (AttrMask::MAX_QP_RD_ATOMIC.0, "MAX_QP_RD_ATOMIC"),
    (AttrMask::ALT_PATH.0, "ALT_PATH"),
    (AttrMask::MIN_RNR_TIMER.0, "MIN_RNR_TIMER"),
    (AttrMask::SQ_PSN.0, "SQ_PSN"),
    (AttrMask::MAX_DEST_RD_ATOMIC.0, "MAX_DEST_RD_ATOMIC"),
    (AttrMask::PATH_MIG_STATE.0, "PATH_MIG_STATE"),
    (AttrMask::CAP.0, "CAP"),
    (AttrMask::DEST_QPN.0, "DEST_QPN"),
    (AttrMask::RATE_LIMIT.0, "RATE_LIMIT"),
];

impl fmt::Debug for AttrMask {
    /// Prints `AttrMask(STATE | PKEY_INDEX | 0x400000)`: known bits by name, the rest in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AttrMask(")?;
        let mut rest = self.0;
        let mut first = true;
        for (bit, name) in MASK_NAMES {
            if rest & bit != 0 {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                rest &= !bit;
                first = false;
            }
        }
        if rest != 0 || first {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{rest:#x}")?;
        }
        f.write_str(")")
    }
}

// Short names for the table below, as plain bits so that `|` works in `const` context.
const CUR: u32 = AttrMask::CUR_STATE.0;
const EN_SQD: u32 = AttrMask::EN_SQD_ASYNC_NOTIFY.0;
const ACC: u32 = AttrMask::ACCESS_FLAGS.0;
const PKEY: u32 = AttrMask::PKEY_INDEX.0;
const PORT: u32 = AttrMask::PORT.0;
const QKEY: u32 = AttrMask::QKEY.0;
const AV: u32 = AttrMask::AV.0;
const MTU: u32 = AttrMask::PATH_MTU.0;
const TIMEOUT: u32 = AttrMask::TIMEOUT.0;
const RETRY: u32 = AttrMask::RETRY_CNT.0;
const RNR_RETRY: u32 = AttrMask::RNR_RETRY.0;
const RQ_PSN: u32 = AttrMask::RQ_PSN.0;
const MRA: u32 = AttrMask::MAX_QP_RD_ATOMIC.0;
const ALT: u32 = AttrMask::ALT_PATH.0;
const RNRT: u32 = AttrMask::MIN_RNR_TIMER.0;
const SQ_PSN: u32 = AttrMask::SQ_PSN.0;
const MDRA: u32 = AttrMask::MAX_DEST_RD_ATOMIC.0;
const MIG: u32 = AttrMask::PATH_MIG_STATE.0;
const DQPN: u32 = AttrMask::DEST_QPN.0;
const RATE: u32 = AttrMask::RATE_LIMIT.0;

/// `qp_state_table[cur][next]`: `None` when `.valid` is 0, else `(req_param, opt_param)` of
/// the `qp_type` column. Written in the order of verbs.c so the two can be read side by side;
/// a type the C initializer does not name gets 0.
const fn table(cur: QpState, next: QpState, qp_type: QpType) -> Option<(u32, u32)> {
    use QpState as S;
    use QpType as T;
    let t = qp_type;
    let entry = match (cur, next) {
        (S::Reset, S::Reset) => (0, 0),
        (S::Reset, S::Init) => {
            let req = match t {
                T::Ud => PKEY | PORT | QKEY,
                T::RawPacket => PORT,
                T::Uc | T::Rc | T::XrcIni | T::XrcTgt => PKEY | PORT | ACC,
                T::Smi | T::Gsi => PKEY | QKEY,
                T::RawIpv6 | T::RawEthertype => 0,
            };
            (req, 0)
        }
        (S::Init, S::Reset) | (S::Init, S::Err) => (0, 0),
        (S::Init, S::Init) => {
            let opt = match t {
                T::Ud => PKEY | PORT | QKEY,
                T::Uc | T::Rc | T::XrcIni | T::XrcTgt => PKEY | PORT | ACC,
                T::Smi | T::Gsi => PKEY | QKEY,
                T::RawIpv6 | T::RawEthertype | T::RawPacket => 0,
            };
            (0, opt)
        }
        (S::Init, S::Rtr) => {
            let req = match t {
                T::Uc | T::XrcIni => AV | MTU | DQPN | RQ_PSN,
                T::Rc | T::XrcTgt => AV | MTU | DQPN | RQ_PSN | MDRA | RNRT,
                T::Ud | T::Smi | T::Gsi | T::RawIpv6 | T::RawEthertype | T::RawPacket => 0,
            };
            let opt = match t {
                T::Ud | T::Smi | T::Gsi => PKEY | QKEY,
                T::Uc | T::Rc | T::XrcIni | T::XrcTgt => ALT | ACC | PKEY,
                T::RawIpv6 | T::RawEthertype | T::RawPacket => 0,
            };
            (req, opt)
        }
        (S::Rtr, S::Reset) | (S::Rtr, S::Err) => (0, 0),
        (S::Rtr, S::Rts) => {
            let req = match t {
                T::Ud | T::Uc | T::Smi | T::Gsi => SQ_PSN,
                T::Rc | T::XrcIni => TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | MRA,
                T::XrcTgt => TIMEOUT | SQ_PSN,
                T::RawIpv6 | T::RawEthertype | T::RawPacket => 0,
            };
            let opt = match t {
                T::Ud | T::Smi | T::Gsi => CUR | QKEY,
                T::Uc | T::XrcIni => CUR | ALT | ACC | MIG,
                T::Rc | T::XrcTgt => CUR | ALT | ACC | RNRT | MIG,
                T::RawPacket => RATE,
                T::RawIpv6 | T::RawEthertype => 0,
            };
            (req, opt)
        }
        (S::Rts, S::Reset) | (S::Rts, S::Err) => (0, 0),
        (S::Rts, S::Rts) => {
            let opt = match t {
                T::Ud | T::Smi | T::Gsi => CUR | QKEY,
                T::Uc | T::XrcIni => CUR | ACC | ALT | MIG,
                T::Rc | T::XrcTgt => CUR | ACC | ALT | MIG | RNRT,
                T::RawPacket => RATE,
                T::RawIpv6 | T::RawEthertype => 0,
            };
            (0, opt)
        }
        (S::Rts, S::Sqd) => {
            let opt = match t {
                T::Ud | T::Uc | T::Rc | T::XrcIni | T::XrcTgt | T::Smi | T::Gsi => EN_SQD,
                T::RawIpv6 | T::RawEthertype | T::RawPacket => 0,
            };
            (0, opt)
        }
        (S::Sqd, S::Reset) | (S::Sqd, S::Err) => (0, 0),
        (S::Sqd, S::Rts) => {
            let opt = match t {
                T::Ud | T::Smi | T::Gsi => CUR | QKEY,
                T::Uc | T::XrcIni => CUR | ALT | ACC | MIG,
                T::Rc | T::XrcTgt => CUR | ALT | ACC | RNRT | MIG,
                T::RawIpv6 | T::RawEthertype | T::RawPacket => 0,
            };
            (0, opt)
        }
        (S::Sqd, S::Sqd) => {
            let opt = match t {
                T::Ud | T::Smi | T::Gsi => PKEY | QKEY,
                T::Uc => AV | ALT | ACC | PKEY | MIG,
                T::Rc => {
                    PORT | AV
                        | TIMEOUT
                        | RETRY
                        | RNR_RETRY
                        | MRA
                        | MDRA
                        | ALT
                        | ACC
                        | PKEY
                        | RNRT
                        | MIG
                }
                T::XrcIni => PORT | AV | TIMEOUT | RETRY | RNR_RETRY | MRA | ALT | ACC | PKEY | MIG,
                T::XrcTgt => PORT | AV | TIMEOUT | MDRA | ALT | ACC | PKEY | RNRT | MIG,
                T::RawIpv6 | T::RawEthertype | T::RawPacket => 0,
            };
            (0, opt)
        }
        (S::Sqe, S::Reset) | (S::Sqe, S::Err) => (0, 0),
        (S::Sqe, S::Rts) => {
            let opt = match t {
                T::Ud | T::Smi | T::Gsi => CUR | QKEY,
                T::Uc => CUR | ACC,
                T::Rc | T::XrcIni | T::XrcTgt | T::RawIpv6 | T::RawEthertype | T::RawPacket => 0,
            };
            (0, opt)
        }
        (S::Err, S::Reset) | (S::Err, S::Err) => (0, 0),
        _ => return None,
    };
    Some(entry)
}

/// Whether `qp_state_table[cur][next].valid`: the transition exists at all, for every type.
///
/// Valid: RESET→{RESET, INIT}; INIT→{RESET, ERR, INIT, RTR}; RTR→{RESET, ERR, RTS};
/// RTS→{RESET, ERR, RTS, SQD}; SQD→{RESET, ERR, RTS, SQD}; SQE→{RESET, ERR, RTS};
/// ERR→{RESET, ERR}. Notably RESET→ERR, RTR→RTR and INIT→RTS are not.
#[cfg_attr(MODULE, expect(dead_code))]
pub const fn transition_is_valid(cur: QpState, next: QpState) -> bool {
    // The validity does not depend on the type; any column answers.
    table(cur, next, QpType::Rc).is_some()
}

/// The `(required, optional)` attribute masks of `cur → next` for `qp_type`, or `None` when
/// the transition is invalid. `IB_QP_STATE` is in neither: it is always allowed and never
/// required by the table.
#[cfg_attr(MODULE, expect(dead_code))]
pub const fn transition_masks(
    cur: QpState,
    next: QpState,
    qp_type: QpType,
) -> Option<(AttrMask, AttrMask)> {
    match table(cur, next, qp_type) {
        Some((req, opt)) => Some((AttrMask(req), AttrMask(opt))),
        None => None,
    }
}

/// `ib_modify_qp_is_ok(cur, next, qp_type, mask)`, bit for bit.
///
/// False when `mask` has `IB_QP_CUR_STATE` and `cur` is not RTR, RTS, SQD or SQE; when the
/// transition is invalid; when a required bit is missing; or when a bit outside
/// `required | optional | IB_QP_STATE` is set. Note that it does not look at whether
/// `IB_QP_STATE` is set, nor at `IB_QP_ATTR_STANDARD_BITS`.
pub const fn modify_is_ok(cur: QpState, next: QpState, qp_type: QpType, mask: AttrMask) -> bool {
    if mask.0 & CUR != 0
        && !matches!(
            cur,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    {
        return false;
    }
    let (req, opt) = match table(cur, next, qp_type) {
        Some(entry) => entry,
        None => return false,
    };
    if mask.0 & req != req {
        return false;
    }
    mask.0 & !(req | opt | AttrMask::STATE.0) == 0
}

/// [`modify_is_ok`] on raw `enum` values, as a driver (or a differential test) sees them.
///
/// Returns false for a state above `IB_QPS_ERR` and for a value that is not a QP type
/// (7, and 11 and up). This is the one place where it departs from C, on inputs C cannot take:
/// a state above `IB_QPS_ERR` or a type from `IB_QPT_MAX` (11) up would index `qp_state_table`
/// out of bounds (ib_uverbs refuses such states with `EINVAL` before any driver is called),
/// and type 7 would read an all-zero column although no QP can have that type.
#[cfg_attr(MODULE, expect(dead_code))]
pub const fn modify_is_ok_raw(cur: u32, next: u32, qp_type: u32, mask: u32) -> bool {
    match (
        QpState::from_raw(cur),
        QpState::from_raw(next),
        QpType::from_raw(qp_type),
    ) {
        (Some(cur), Some(next), Some(qp_type)) => modify_is_ok(cur, next, qp_type, AttrMask(mask)),
        _ => false,
    }
}

/// What the driver knows about a QP when a modify arrives (read under the QP's state lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCurrent {
    /// The QP's type.
    pub qp_type: QpType,
    /// The QP's state now.
    pub state: QpState,
    /// In SQD, whether the send queue is still draining (outstanding WRs not yet completed).
    pub sq_draining: bool,
}

/// Why a modify is refused. Every variant maps to an errno with [`ModifyError::errno`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModifyError {
    /// The mask has bits outside `IB_QP_ATTR_STANDARD_BITS` (these are the bits);
    /// `EOPNOTSUPP`, as in rxe, rdmavt and ib_uverbs.
    UnsupportedMask(AttrMask),
    /// `IB_QP_STATE` is set and `qp_state` is not an `enum ib_qp_state` value.
    InvalidState(u32),
    /// `IB_QP_CUR_STATE` is set and `cur_qp_state` is not an `enum ib_qp_state` value.
    InvalidCurState(u32),
    /// `IB_QP_CUR_STATE` names a state other than the QP's.
    CurStateMismatch {
        /// The QP's state.
        actual: QpState,
        /// The state the caller claimed.
        given: QpState,
    },
    /// `IB_QP_CUR_STATE` is set while the QP is not in RTR, RTS, SQD or SQE (the first test
    /// of `ib_modify_qp_is_ok`).
    CurStateNotAllowed(QpState),
    /// `qp_state_table[cur][next]` is not valid.
    InvalidTransition {
        /// The QP's state.
        cur: QpState,
        /// The requested state (the current one when `IB_QP_STATE` is absent).
        next: QpState,
    },
    /// Required attributes of the transition are absent from the mask (these are the bits).
    MissingRequired(AttrMask),
    /// The mask has attributes the transition does not accept (these are the bits).
    ForbiddenExtra(AttrMask),
    /// The QP is in SQD and still draining: only RESET and ERR are reachable.
    SqDraining,
    /// `port_num` is not a port of the device.
    InvalidPort(u32),
    /// `pkey_index` is not below the P_Key table length.
    InvalidPkeyIndex(u16),
    /// `path_mtu` is not an `enum ib_mtu` value (1..=5).
    InvalidPathMtu(u32),
    /// `path_mtu` (raw `enum ib_mtu`) exceeds the port's active MTU (raw `enum ib_mtu`).
    PathMtuAboveActive {
        /// The requested `enum ib_mtu`.
        requested: u32,
        /// The port's active `enum ib_mtu`.
        active: u32,
    },
    /// `IB_QP_QKEY` on a QP type without a Q_Key (the value is the type).
    QkeyNotAllowed(QpType),
    /// `IB_QP_ACCESS_FLAGS` on a QP type other than RC and UC (the value is the type).
    AccessFlagsNotAllowed(QpType),
    /// `qp_access_flags` has bits a QP does not accept (these are the bits).
    InvalidAccessFlags(u32),
    /// `rq_psn` does not fit in 24 bits.
    InvalidRqPsn(u32),
    /// `sq_psn` does not fit in 24 bits.
    InvalidSqPsn(u32),
    /// `dest_qp_num` does not fit in 24 bits.
    InvalidDestQpn(u32),
    /// `timeout` exceeds 31 (5 bits).
    InvalidTimeout(u8),
    /// `retry_cnt` exceeds 7 (3 bits).
    InvalidRetryCnt(u8),
    /// `rnr_retry` exceeds 7 (3 bits).
    InvalidRnrRetry(u8),
    /// `min_rnr_timer` exceeds 31 (5 bits).
    InvalidMinRnrTimer(u8),
    /// `max_rd_atomic` exceeds the device's `max_qp_init_rd_atom`.
    MaxRdAtomicTooLarge {
        /// The requested value.
        requested: u8,
        /// The device limit.
        limit: u32,
    },
    /// `max_dest_rd_atomic` exceeds the device's `max_qp_rd_atom`.
    MaxDestRdAtomicTooLarge {
        /// The requested value.
        requested: u8,
        /// The device limit.
        limit: u32,
    },
    /// `path_mig_state` is not an `enum ib_mig_state` value (0..=2).
    InvalidPathMigState(u32),
    /// `IB_QP_ALT_PATH`: RoCE has no alternate path (ib_core refuses it first).
    AltPathUnsupported,
    /// `IB_QP_CAP`: QP capacities cannot be changed by a modify.
    CapNotModifiable,
}

impl ModifyError {
    /// The positive errno to return (negated) from `modify_qp`: `EOPNOTSUPP` for
    /// [`ModifyError::UnsupportedMask`], `EINVAL` for everything else.
    pub const fn errno(&self) -> i32 {
        match self {
            ModifyError::UnsupportedMask(_) => EOPNOTSUPP,
            _ => EINVAL,
        }
    }
}

/// Decides the state part of a modify: returns the next state, or why the request is refused.
///
/// `mask` is the modify's attribute mask; `qp_state` and `cur_qp_state` are the raw
/// `ib_qp_attr` fields, read only when `IB_QP_STATE` / `IB_QP_CUR_STATE` are set.
///
/// Semantics (rdmavt/mlx4 style, stricter than rxe):
/// - bits outside `IB_QP_ATTR_STANDARD_BITS` are refused ([`ModifyError::UnsupportedMask`]);
/// - without `IB_QP_STATE` the next state is the current one, and the mask is still checked
///   against the `cur → cur` row (so attributes can change only where the table allows them,
///   e.g. RTS→RTS, and never in RTR);
/// - with `IB_QP_CUR_STATE`, the claimed state must be the QP's actual state; the transition
///   is always checked from the actual state;
/// - in SQD while the send queue drains, only RESET and ERR are reachable;
/// - otherwise the result agrees with [`modify_is_ok`]`(current.state, next, type, mask)`.
///
/// Checks run in that order, so the error names the first rule broken.
pub const fn check_modify(
    current: QpCurrent,
    mask: AttrMask,
    qp_state: u32,
    cur_qp_state: u32,
) -> Result<QpState, ModifyError> {
    let unsupported = mask.difference(AttrMask::STANDARD_BITS);
    if !unsupported.is_empty() {
        return Err(ModifyError::UnsupportedMask(unsupported));
    }
    let cur = current.state;
    let next = if mask.contains(AttrMask::STATE) {
        match QpState::from_raw(qp_state) {
            Some(state) => state,
            None => return Err(ModifyError::InvalidState(qp_state)),
        }
    } else {
        cur
    };
    if mask.contains(AttrMask::CUR_STATE) {
        let given = match QpState::from_raw(cur_qp_state) {
            Some(state) => state,
            None => return Err(ModifyError::InvalidCurState(cur_qp_state)),
        };
        if given as u32 != cur as u32 {
            return Err(ModifyError::CurStateMismatch { actual: cur, given });
        }
        if !matches!(
            cur,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Err(ModifyError::CurStateNotAllowed(cur));
        }
    }
    let (req, opt) = match table(cur, next, current.qp_type) {
        Some(entry) => entry,
        None => return Err(ModifyError::InvalidTransition { cur, next }),
    };
    let missing = req & !mask.0;
    if missing != 0 {
        return Err(ModifyError::MissingRequired(AttrMask(missing)));
    }
    let extra = mask.0 & !(req | opt | AttrMask::STATE.0);
    if extra != 0 {
        return Err(ModifyError::ForbiddenExtra(AttrMask(extra)));
    }
    if current.sq_draining
        && matches!(cur, QpState::Sqd)
        && !matches!(next, QpState::Reset | QpState::Err)
    {
        return Err(ModifyError::SqDraining);
    }
    Ok(next)
}
