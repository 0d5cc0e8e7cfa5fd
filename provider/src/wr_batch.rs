//! The batch of an `ibv_qp_ex` between `ibv_wr_start` and `ibv_wr_complete`: owned copies of the
//! WRs the builders record (scalar fields, SGE values, inline bytes) and the lock that keeps two
//! threads from interleaving builders on one QP. The builders themselves are in
//! [`crate::qp_ex`]; a QP holds its batch in `RrxeQp::ex`.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::ptr;

use crate::abi::{ibv_ah, ibv_send_wr, ibv_sge, ibv_wr_opcode, IBV_SEND_INLINE};
use crate::sync::RawMutex;

/// The recorded body of a WR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Body {
    /// No data (zero-length operations).
    #[default]
    None,
    /// `sges[start..start + len]`.
    Sges { start: usize, len: usize },
    /// `inline[start..start + len]`.
    Inline { start: usize, len: usize },
}

/// One WR of a batch.
struct Pending {
    /// Everything but `next`, `sg_list`, `num_sge` and the INLINE flag (set at completion).
    wr: ibv_send_wr,
    body: Body,
}

/// The batch between `wr_start` and `wr_complete` (see the module docs).
#[derive(Default)]
pub struct Batch {
    wrs: Vec<Pending>,
    sges: Vec<ibv_sge>,
    inline: Vec<u8>,
    /// The first error (positive errno), or 0.
    pub(crate) err: c_int,
}

impl Batch {
    /// The WRs recorded so far.
    pub(crate) fn len(&self) -> usize {
        self.wrs.len()
    }

    pub(crate) fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
        self.err = 0;
    }

    pub(crate) fn fail(&mut self, e: c_int) {
        if self.err == 0 {
            self.err = e;
        }
    }

    /// Starts a new WR with `opcode`, `wr_id` and the flags (INLINE excepted: only the inline
    /// setters make a WR inline). Returns it for the opcode's fields.
    pub(crate) fn push(
        &mut self,
        opcode: ibv_wr_opcode,
        wr_id: u64,
        flags: u32,
    ) -> &mut ibv_send_wr {
        let wr = ibv_send_wr {
            wr_id,
            opcode,
            send_flags: flags & !IBV_SEND_INLINE,
            ..Default::default()
        };
        self.wrs.push(Pending {
            wr,
            body: Body::None,
        });
        &mut self.wrs.last_mut().expect("just pushed").wr
    }

    /// The last WR, for the setters; `EINVAL` (recorded) when there is none.
    fn last(&mut self) -> Option<&mut Pending> {
        if self.wrs.is_empty() {
            self.fail(libc::EINVAL);
            return None;
        }
        self.wrs.last_mut()
    }

    /// `wr_set_sge_list` (and `wr_set_sge` with one entry): the last WR's SGEs are `list`.
    pub fn set_sges(&mut self, list: &[ibv_sge]) {
        let start = self.sges.len();
        if self.last().is_none() {
            return;
        }
        self.sges.extend_from_slice(list);
        let p = self.wrs.last_mut().expect("checked");
        p.body = if list.is_empty() {
            Body::None
        } else {
            Body::Sges {
                start,
                len: list.len(),
            }
        };
    }

    /// `wr_set_inline_data(_list)`: the last WR carries the concatenation of `parts` inline.
    /// More than `max_inline` bytes is `EINVAL` (recorded), without copying.
    ///
    /// # Safety
    /// Every `(addr, len)` part must be readable for `len` bytes.
    pub unsafe fn set_inline(&mut self, parts: &[(*const u8, usize)], max_inline: u32) {
        if self.last().is_none() {
            return;
        }
        let total = parts.iter().try_fold(0usize, |t, &(_, l)| t.checked_add(l));
        match total {
            Some(t) if t <= max_inline as usize => {}
            _ => return self.fail(libc::EINVAL),
        }
        let start = self.inline.len();
        for &(addr, len) in parts {
            if len == 0 {
                continue;
            }
            if addr.is_null() {
                return self.fail(libc::EINVAL);
            }
            // SAFETY: readable for `len` bytes (contract).
            self.inline
                .extend_from_slice(unsafe { core::slice::from_raw_parts(addr, len) });
        }
        let len = self.inline.len() - start;
        self.wrs.last_mut().expect("checked").body = Body::Inline { start, len };
    }

    /// The 8 bytes of an ATOMIC WRITE, as the last WR's inline data (not bounded by
    /// `max_inline_data`: they travel in the WQE header).
    pub fn set_atomic_value(&mut self, value: [u8; 8]) {
        if self.last().is_none() {
            return;
        }
        let start = self.inline.len();
        self.inline.extend_from_slice(&value);
        self.wrs.last_mut().expect("checked").body = Body::Inline { start, len: 8 };
    }

    /// `wr_set_ud_addr`.
    pub fn set_ud(&mut self, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
        if let Some(p) = self.last() {
            p.wr.wr.ud.ah = ah;
            p.wr.wr.ud.remote_qpn = remote_qpn;
            p.wr.wr.ud.remote_qkey = remote_qkey;
        }
    }

    /// Links the recorded WRs into an `ibv_send_wr` list over the batch's own SGE and inline
    /// storage and returns its head (NULL for an empty batch). The list points into `self`
    /// and is valid until the batch is changed.
    pub fn link(&mut self) -> *mut ibv_send_wr {
        let Batch {
            wrs, sges, inline, ..
        } = self;
        // Where each WR's SGEs start and how many; an inline WR gets one SGE over its bytes,
        // appended after the recorded ones.
        let layout: Vec<(usize, usize, bool)> = wrs
            .iter()
            .map(|p| match p.body {
                Body::None => (0, 0, false),
                Body::Sges { start, len } => (start, len, false),
                Body::Inline { start, len } => {
                    sges.push(ibv_sge {
                        addr: inline.as_ptr().wrapping_add(start) as u64,
                        length: len as u32,
                        lkey: 0,
                    });
                    (sges.len() - 1, 1, true)
                }
            })
            .collect();
        // Pointers only now: `sges` does not grow any more.
        let base = sges.as_mut_ptr();
        let mut next: *mut ibv_send_wr = ptr::null_mut();
        for (p, &(start, num, is_inline)) in wrs.iter_mut().zip(&layout).rev() {
            let w = &mut p.wr;
            w.next = next;
            w.num_sge = num as c_int;
            w.sg_list = if num == 0 {
                ptr::null_mut()
            } else {
                base.wrapping_add(start)
            };
            if is_inline {
                w.send_flags |= IBV_SEND_INLINE;
            }
            next = w;
        }
        next
    }
}

/// A QP's batch and its lock (`RrxeQp::ex`, boxed so the mutex never moves).
pub struct QpEx {
    pub(crate) lock: RawMutex,
    pub(crate) batch: UnsafeCell<Batch>,
}

// SAFETY: `batch` is only accessed by the thread holding `lock` (between `wr_start` and
// `wr_complete`/`wr_abort`: the `ibv_qp_ex` contract).
unsafe impl Sync for QpEx {}
// SAFETY: as above.
unsafe impl Send for QpEx {}

impl QpEx {
    pub fn new() -> QpEx {
        QpEx {
            lock: RawMutex::new(),
            batch: UnsafeCell::new(Batch::default()),
        }
    }
}

impl Default for QpEx {
    fn default() -> Self {
        QpEx::new()
    }
}
