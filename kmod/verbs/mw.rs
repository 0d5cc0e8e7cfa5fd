// SPDX-License-Identifier: GPL-2.0-only
//! Memory windows (user contexts only: ib_core offers kernel consumers none). The rules are
//! `logic::mw`'s; binds run in SQ order in the data path (`qp::env::Ctx::mw_bind`).

use super::{device::Rrxe, pd::RrxePd};
use crate::datapath::mw::MwInner;
use crate::ib::{bh::with_bh_disabled, device::Device, udata::Udata};
use crate::logic::{
    idalloc, limits as lim,
    mw::{MwType, Window},
};
use kernel::{prelude::*, sync::Arc};

/// A memory window: its key index (the data path's state lives in the device's window table).
pub(crate) struct RrxeMw {
    index: u32,
}

/// `alloc_mw`: a window of type `ty` in `pd`, with an rkey from the MRs' key space. A type-1
/// window starts valid and unbound, a type-2 window free.
pub(super) fn alloc(
    dev: &Device<Rrxe>,
    pd: &RrxePd,
    ty: u32,
    udata: Option<&Udata>,
) -> Result<(RrxeMw, u32)> {
    if let Some(u) = udata {
        u.expect_no_cmd()?;
    }
    let ty = MwType::from_raw(ty).ok_or(EINVAL)?;
    let data = dev.data();
    let quota = data.quota.mw.reserve(lim::MAX_MW, udata.is_some())?;
    let (index, key_byte) = data.reserve_mr_index()?;
    let rkey = idalloc::make_key(index.id(), key_byte);
    let win = Window::new(ty, pd as *const RrxePd as usize, rkey);
    let inner = Arc::pin_init(MwInner::new(win), GFP_KERNEL_ACCOUNT)?;
    data.fabric.mws.insert(index.id(), inner)?;
    quota.keep();
    Ok((
        RrxeMw {
            index: index.keep(),
        },
        rkey,
    ))
}

/// `dealloc_mw`: the window leaves the table (no access reaches it after this), stops keeping
/// its MR registered, and is dropped here, in process context.
pub(super) fn dealloc(dev: &Device<Rrxe>, w: &RrxeMw) {
    let data = dev.data();
    let fab = &data.fabric;
    if let Some(inner) = fab.mws.remove_and_wait(w.index) {
        with_bh_disabled(|| {
            let old = inner.win.lock().dealloc();
            if let Some(mr) = old {
                fab.unbind_mr(mr);
            }
        });
        drop(inner);
    }
    data.free_mr_index(w.index);
    data.quota.mw.release();
}
