// SPDX-License-Identifier: GPL-2.0-only
//! Memory windows (IBTA 10.6.7), type 1 and type 2 (2B, as rdma_rxe offers them): the bind
//! rules, a window's states, remote access through a window's rkey, invalidation, and the
//! count of windows bound to an MR that keeps it from being deregistered.
//!
//! A window is a [`Window`] value guarded by the shell's lock. It names the MR it is bound to
//! by index and key ([`MrRef`]), never by reference: an access through the window looks the MR
//! up again and finds it gone (or replaced) if it was deregistered, so no lifetime ties the two
//! objects together. The MR's count of bound windows ([`mr_bind_ref`], [`mr_dereg`]) keeps it
//! registered while windows use it, as IBA 10.6.7.2.6 asks (rdma_rxe: `EINVAL`).
//!
//! Where rrxe is stricter than rdma_rxe 6.12:
//! - a type-1 window is bound by the Bind MW verb only and a type-2 window by a bind work
//!   request only ([`crate::uapi::bind_flags::VERB`]; rxe takes either for both);
//! - a type-2 bind must change the key byte (rxe takes the old one again), and the new rkey
//!   must keep the window's index (rxe silently keeps only the key byte);
//! - a zero-based window must lie inside the MR from its start address (rxe checks only its
//!   length against the MR's);
//! - invalidating a window that is not bound fails (rxe takes a free type-2 window);
//! - a remote invalidation (SEND with invalidate) of a type-2 window must arrive on the QP the
//!   window is bound to, as an access through it must; a local one must come from a QP of the
//!   window's PD (rxe checks neither).

use super::mr::MemError;
use super::qp_attr::access;
use crate::uapi::{bind_flags, SendWqe};

/// `EINVAL`.
const EINVAL: i32 = 22;

/// Access bits a window may be bound with: the remote rights, RDMA FLUSH with global
/// visibility, zero-based addressing (type 2 only), and local write (meaningless for a window,
/// accepted as rdma_rxe accepts it; pyverbs binds with it).
pub const MW_ACCEPTED: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::FLUSH_GLOBAL
    | access::ZERO_BASED;

/// `enum ib_mw_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MwType {
    /// Bound by the Bind MW verb, any QP of the PD may use it.
    One,
    /// Bound by a work request, usable only through the QP that bound it.
    Two,
}

impl MwType {
    /// `IB_MW_TYPE_1` (1) or `IB_MW_TYPE_2` (2).
    pub const fn from_raw(t: u32) -> Option<MwType> {
        match t {
            1 => Some(MwType::One),
            2 => Some(MwType::Two),
            _ => None,
        }
    }
}

/// A window's state (rdma_rxe's `enum rxe_mw_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A type-2 window not bound (just allocated, or invalidated): only a bind WR may bind it.
    Free,
    /// A type-1 window (bound or not), or a bound type-2 window.
    Valid,
    /// Deallocated: nothing reaches it any more.
    Invalid,
}

/// An MR by index and key: the MR a window is bound to, looked up again at each use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrRef {
    /// The MR's key index.
    pub index: u32,
    /// The MR's key (lkey; rkey and lkey are one key in rrxe).
    pub key: u32,
}

/// What a window is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The MR.
    pub mr: MrRef,
    /// Offset of the window's first byte in the MR.
    pub mr_off: u64,
    /// The window's start address (its first byte is remote address 0 if zero-based).
    pub addr: u64,
    /// Bytes.
    pub length: u64,
    /// Its rights (`IB_ACCESS_*`).
    pub access: u32,
    /// Type 2: the identity of the QP that bound it (0 for type 1).
    pub qp: u64,
}

/// A memory window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Type 1 or 2.
    pub ty: MwType,
    /// The PD's identity.
    pub pd: usize,
    /// Its current rkey (index << 8 | key byte).
    pub rkey: u32,
    /// Free, valid or invalid.
    pub state: State,
    /// The binding, if bound.
    pub bound: Option<Bound>,
}

/// A bind as its WQE asks it (see [`crate::uapi::wr_opcode::BIND_MW`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindWr {
    /// The window's key index.
    pub mw_index: u32,
    /// The new rkey.
    pub new_rkey: u32,
    /// Start address.
    pub addr: u64,
    /// Length (0: unbind a type-1 window).
    pub length: u64,
    /// The MR's lkey.
    pub mr_lkey: u32,
    /// The window's rights.
    pub access: u32,
    /// Posted by the Bind MW verb.
    pub verb: bool,
}

/// Why a bind failed (every one completes the WR with `MW_BIND_ERR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindError {
    /// The WQE's fields do not make a bind (access above 32 bits, unknown flags).
    Malformed,
    /// No window with that index (or it was deallocated).
    NoWindow,
    /// A type-1 window in a bind WR, or a type-2 window through the Bind MW verb.
    WrongVerb,
    /// A type-2 window not in the free state (o10-37.2.30).
    NotFree,
    /// Access bits a window cannot have.
    AccessBits,
    /// A zero-based type-1 window (o10-36.2.2).
    ZeroBasedType1,
    /// A type-2 bind with length 0 (o10-37.2.40: a type-2 window is unbound by invalidation).
    ZeroLength,
    /// The new rkey names another index.
    KeyIndex,
    /// A type-2 bind that keeps the key byte.
    KeyUnchanged,
    /// The QP's PD is not the window's (C10-72).
    QpPd,
    /// No MR with that lkey.
    NoMr,
    /// An MR that cannot host a window (a kernel consumer's DMA or fast-registration MR).
    MrNotBindable,
    /// The MR's PD is not the QP's.
    MrPd,
    /// A zero-based MR.
    MrZeroBased,
    /// The MR lacks `MW_BIND` (C10-73).
    MrNoBindRight,
    /// Remote write or atomic rights over an MR without local write (C10-74).
    NeedsLocalWrite,
    /// The window is not inside the MR (C10-75).
    Bounds,
}

/// A remote access as the responder asks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    /// The remote address (an offset in the window if it is zero-based).
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// The rights it needs (`IB_ACCESS_*`).
    pub need: u32,
    /// The whole window (an RDMA FLUSH of MR selectivity): `addr` and `len` are not looked at.
    pub whole: bool,
}

/// An invalidation was refused (LOCAL_INV completes `LOC_QP_OP_ERR`, a SEND with invalidate
/// fails the receive with `REM_INV_REQ_ERR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotInvalidated;

/// What a bind needs to know of the MR named by its lkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrFacts {
    /// Index and key.
    pub mr: MrRef,
    /// The MR's PD identity.
    pub pd: usize,
    /// Its access flags.
    pub access: u32,
    /// Its start address.
    pub iova: u64,
    /// Its length.
    pub length: u64,
    /// Registered user memory (a window can be bound to nothing else).
    pub bindable: bool,
}

impl BindWr {
    /// Decodes a bind WQE's fields; nothing is trusted yet.
    pub fn decode(w: &SendWqe) -> Result<BindWr, BindError> {
        let access = u32::try_from(w.swap).map_err(|_| BindError::Malformed)?;
        if w.remote_qpn & !bind_flags::VERB != 0 {
            return Err(BindError::Malformed);
        }
        Ok(BindWr {
            mw_index: w.imm_data >> 8,
            new_rkey: w.rkey,
            addr: w.remote_addr,
            length: w.compare_add,
            mr_lkey: w.remote_qkey,
            access,
            verb: w.remote_qpn & bind_flags::VERB != 0,
        })
    }

    /// The WQE of this bind (the inverse of [`BindWr::decode`], with the window's rkey in
    /// `imm_data`).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn encode(&self, wr_id: u64, send_flags: u32, mw_rkey: u32) -> SendWqe {
        SendWqe {
            wr_id,
            opcode: crate::uapi::wr_opcode::BIND_MW,
            send_flags,
            imm_data: mw_rkey,
            remote_addr: self.addr,
            rkey: self.new_rkey,
            compare_add: self.length,
            remote_qkey: self.mr_lkey,
            swap: u64::from(self.access),
            remote_qpn: if self.verb { bind_flags::VERB } else { 0 },
            ..SendWqe::default()
        }
    }
}

impl Window {
    /// A new window of `ty` in PD `pd` with rkey `rkey`: a type-1 window is valid (and
    /// unbound), a type-2 window free.
    pub const fn new(ty: MwType, pd: usize, rkey: u32) -> Window {
        Window {
            ty,
            pd,
            rkey,
            state: match ty {
                MwType::One => State::Valid,
                MwType::Two => State::Free,
            },
            bound: None,
        }
    }

    /// Checks bind `wr` on a QP of PD `qp_pd`; `mr`: the MR its lkey's index names, if any
    /// (not looked at for a length-0 type-1 bind).
    pub fn check_bind(
        &self,
        wr: &BindWr,
        qp_pd: usize,
        mr: Option<&MrFacts>,
    ) -> Result<(), BindError> {
        if self.state == State::Invalid {
            return Err(BindError::NoWindow);
        }
        if wr.access & !MW_ACCEPTED != 0 {
            return Err(BindError::AccessBits);
        }
        if wr.new_rkey >> 8 != self.rkey >> 8 {
            return Err(BindError::KeyIndex);
        }
        match self.ty {
            MwType::One => {
                if !wr.verb {
                    return Err(BindError::WrongVerb);
                }
                if wr.access & access::ZERO_BASED != 0 {
                    return Err(BindError::ZeroBasedType1);
                }
            }
            MwType::Two => {
                if wr.verb {
                    return Err(BindError::WrongVerb);
                }
                if self.state != State::Free {
                    return Err(BindError::NotFree);
                }
                if wr.length == 0 {
                    return Err(BindError::ZeroLength);
                }
                if wr.new_rkey & 0xff == self.rkey & 0xff {
                    return Err(BindError::KeyUnchanged);
                }
            }
        }
        if qp_pd != self.pd {
            return Err(BindError::QpPd);
        }
        if wr.length == 0 {
            // Unbinding a type-1 window names no memory.
            return Ok(());
        }
        let mr = mr
            .filter(|m| m.mr.key == wr.mr_lkey)
            .ok_or(BindError::NoMr)?;
        if !mr.bindable {
            return Err(BindError::MrNotBindable);
        }
        if mr.pd != qp_pd {
            return Err(BindError::MrPd);
        }
        if mr.access & access::ZERO_BASED != 0 {
            return Err(BindError::MrZeroBased);
        }
        if mr.access & access::MW_BIND == 0 {
            return Err(BindError::MrNoBindRight);
        }
        if wr.access & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
            && mr.access & access::LOCAL_WRITE == 0
        {
            return Err(BindError::NeedsLocalWrite);
        }
        // The window lies inside the MR, zero-based or not (its first byte is `addr`).
        let inside = wr.addr >= mr.iova
            && match (
                wr.addr.checked_add(wr.length),
                mr.iova.checked_add(mr.length),
            ) {
                (Some(end), Some(mr_end)) => end <= mr_end,
                _ => false,
            };
        if !inside {
            return Err(BindError::Bounds);
        }
        Ok(())
    }

    /// Binds (after [`Window::check_bind`] passed with the same `mr`): the key byte of
    /// `wr.new_rkey` becomes the window's, and a type-2 window is tied to QP `qp`. Returns the
    /// MR the window was bound to before, whose count of bound windows drops.
    pub fn apply_bind(&mut self, wr: &BindWr, mr: Option<&MrFacts>, qp: u64) -> Option<MrRef> {
        let old = self.bound.take().map(|b| b.mr);
        self.rkey = (self.rkey & !0xff) | (wr.new_rkey & 0xff);
        self.state = State::Valid;
        self.bound = match mr {
            Some(m) if wr.length != 0 => Some(Bound {
                mr: m.mr,
                mr_off: wr.addr - m.iova,
                addr: wr.addr,
                length: wr.length,
                access: wr.access,
                qp: if self.ty == MwType::Two { qp } else { 0 },
            }),
            _ => None,
        };
        old
    }

    /// Resolves remote access `req` through rkey `key` from QP `qp` (of PD `qp_pd`). Returns
    /// the MR and the offset in it.
    pub fn resolve(
        &self,
        key: u32,
        qp_pd: usize,
        qp: u64,
        req: &Reach,
    ) -> Result<(MrRef, u64), MemError> {
        let Reach {
            addr,
            len,
            need,
            whole,
        } = *req;
        if self.state != State::Valid || key != self.rkey {
            return Err(MemError::BadKey);
        }
        if self.pd != qp_pd {
            return Err(MemError::BadPd);
        }
        let b = self.bound.ok_or(MemError::BadKey)?;
        if self.ty == MwType::Two && b.qp != qp {
            return Err(MemError::BadKey);
        }
        if b.access & need != need {
            return Err(MemError::Access);
        }
        if whole {
            return Ok((b.mr, b.mr_off));
        }
        let in_win = if b.access & access::ZERO_BASED != 0 {
            addr
        } else {
            addr.checked_sub(b.addr).ok_or(MemError::Bounds)?
        };
        match in_win.checked_add(len) {
            Some(end) if end <= b.length => Ok((b.mr, b.mr_off + in_win)),
            _ => Err(MemError::Bounds),
        }
    }

    /// Invalidates the window under rkey `key`: LOCAL_INV from a QP of PD `qp_pd`, or with
    /// `remote` a SEND with invalidate received by QP `qp`. Only a bound type-2 window can be
    /// invalidated (o10-37.2.26); it becomes free. Returns the MR it was bound to.
    pub fn invalidate(
        &mut self,
        key: u32,
        qp_pd: usize,
        qp: u64,
        remote: bool,
    ) -> Result<Option<MrRef>, NotInvalidated> {
        if self.ty != MwType::Two || self.state != State::Valid || key != self.rkey {
            return Err(NotInvalidated);
        }
        if self.pd != qp_pd {
            return Err(NotInvalidated);
        }
        if remote && self.bound.is_some_and(|b| b.qp != qp) {
            return Err(NotInvalidated);
        }
        self.state = State::Free;
        Ok(self.bound.take().map(|b| b.mr))
    }

    /// Deallocates the window: nothing reaches it any more. Returns the MR it was bound to.
    pub fn dealloc(&mut self) -> Option<MrRef> {
        self.state = State::Invalid;
        self.bound.take().map(|b| b.mr)
    }
}

/// An MR's count of bound windows: bit 31 says the MR is being deregistered (no window may
/// bind to it any more).
pub const MR_DYING: u32 = 1 << 31;

/// One more window bound to an MR whose count is `c`: `None` once it is being deregistered
/// (or at the count's limit).
pub const fn mr_bind_ref(c: u32) -> Option<u32> {
    if c & MR_DYING != 0 || c + 1 == MR_DYING {
        None
    } else {
        Some(c + 1)
    }
}

/// One window fewer bound to an MR whose count is `c`.
pub const fn mr_unbind_ref(c: u32) -> u32 {
    ((c & !MR_DYING).saturating_sub(1)) | (c & MR_DYING)
}

/// Deregistration of an MR whose count is `c`: the new count (dying) when no window is bound,
/// `EINVAL` while one is (IBA 10.6.7.2.6, as rdma_rxe refuses it).
pub const fn mr_dereg(c: u32) -> Result<u32, i32> {
    if c & !MR_DYING != 0 {
        Err(EINVAL)
    } else {
        Ok(MR_DYING)
    }
}
