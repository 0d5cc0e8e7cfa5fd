//! Thin owning wrappers over the libibverbs objects the test creates. Every wrapper destroys
//! its object on drop; `destroy()` does it explicitly and reports the verb's result.
//!
//! Drop order matters (a QP before its CQ and PD, everything before the context): callers
//! declare objects in creation order so that Rust drops them in reverse.

use std::ffi::CStr;
use std::ptr;

use crate::ffi::*;
use crate::util::{ename, errno, ret_errno};

/// An open device context.
pub struct Ctx {
    pub ptr: *mut ibv_context,
}

impl Ctx {
    /// Opens the device called `name`.
    pub fn open(name: &str) -> Result<Ctx, String> {
        // SAFETY: the list is used only between get and free; names are NUL-terminated.
        unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            if list.is_null() {
                return Err(format!("ibv_get_device_list: {}", ename(errno())));
            }
            let mut found = ptr::null_mut();
            let mut names = Vec::new();
            for i in 0..n.max(0) as usize {
                let d = *list.add(i);
                let nm = CStr::from_ptr(ibv_get_device_name(d))
                    .to_string_lossy()
                    .into_owned();
                if nm == name {
                    found = d;
                }
                names.push(nm);
            }
            let res = if found.is_null() {
                Err(format!(
                    "no RDMA device {name} (libibverbs sees: {})",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ))
            } else {
                let c = ibv_open_device(found);
                if c.is_null() {
                    Err(format!("ibv_open_device({name}): {}", ename(errno())))
                } else {
                    Ok(Ctx { ptr: c })
                }
            };
            ibv_free_device_list(list);
            res
        }
    }

    pub fn query_device(&self) -> Result<ibv_device_attr, i32> {
        let mut a = zeroed::<ibv_device_attr>();
        // SAFETY: valid context and output buffer.
        ret_errno(unsafe { ibv_query_device(self.ptr, &mut a) })?;
        Ok(a)
    }

    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr, i32> {
        let mut a = zeroed::<ibv_port_attr>();
        // SAFETY: valid context and output buffer.
        ret_errno(unsafe { vt_query_port(self.ptr, port, &mut a) })?;
        Ok(a)
    }

    /// The GID table entry `index` of `port`, or the errno (`ENODATA` for an empty entry).
    pub fn query_gid_ex(&self, port: u8, index: u32) -> Result<ibv_gid_entry, i32> {
        let mut e = zeroed::<ibv_gid_entry>();
        // SAFETY: valid context and output buffer.
        ret_errno(unsafe { vt_query_gid_ex(self.ptr, port.into(), index, &mut e) })?;
        Ok(e)
    }

    pub fn num_comp_vectors(&self) -> i32 {
        // SAFETY: the context is valid while self lives.
        unsafe { (*self.ptr).num_comp_vectors }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: opened by us, closed once.
        unsafe { ibv_close_device(self.ptr) };
    }
}

/// A protection domain.
pub struct Pd {
    pub ptr: *mut ibv_pd,
}

impl Pd {
    pub fn alloc(ctx: &Ctx) -> Result<Pd, i32> {
        // SAFETY: valid context.
        let p = unsafe { ibv_alloc_pd(ctx.ptr) };
        if p.is_null() {
            Err(errno())
        } else {
            Ok(Pd { ptr: p })
        }
    }

    pub fn destroy(self) -> Result<(), i32> {
        let p = self.ptr;
        std::mem::forget(self);
        // SAFETY: allocated by us, freed once.
        ret_errno(unsafe { ibv_dealloc_pd(p) })
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated by us, freed once.
        unsafe { ibv_dealloc_pd(self.ptr) };
    }
}

/// A completion queue.
pub struct Cq {
    pub ptr: *mut ibv_cq,
}

impl Cq {
    pub fn create(ctx: &Ctx, cqe: i32, comp_vector: i32) -> Result<Cq, i32> {
        Self::create_on(ctx, cqe, comp_vector, None)
    }

    /// A CQ whose events go to `chan` (none: no events).
    pub fn create_on(
        ctx: &Ctx,
        cqe: i32,
        comp_vector: i32,
        chan: Option<&Channel>,
    ) -> Result<Cq, i32> {
        let ch = chan.map_or(ptr::null_mut(), |c| c.ptr);
        // SAFETY: valid context; `ch` is null or a live channel of this context, which the
        // caller keeps alive longer than the CQ; no user context.
        let p = unsafe { ibv_create_cq(ctx.ptr, cqe, ptr::null_mut(), ch, comp_vector) };
        if p.is_null() {
            Err(errno())
        } else {
            Ok(Cq { ptr: p })
        }
    }

    /// The number of entries the CQ got (at least what was asked for).
    pub fn cqe(&self) -> i32 {
        // SAFETY: valid CQ.
        unsafe { (*self.ptr).cqe }
    }

    pub fn destroy(self) -> Result<(), i32> {
        let p = self.ptr;
        std::mem::forget(self);
        // SAFETY: created by us, destroyed once.
        ret_errno(unsafe { ibv_destroy_cq(p) })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once.
        unsafe { ibv_destroy_cq(self.ptr) };
    }
}

/// A queue pair, with what its creation asked for and got.
/// A completion channel whose file descriptor does not block.
pub struct Channel {
    pub ptr: *mut ibv_comp_channel,
}

impl Channel {
    pub fn create(ctx: &Ctx) -> Result<Channel, i32> {
        // SAFETY: valid context.
        let p = unsafe { ibv_create_comp_channel(ctx.ptr) };
        if p.is_null() {
            return Err(errno());
        }
        let ch = Channel { ptr: p };
        // SAFETY: `fd` of a live channel; F_GETFL/F_SETFL take and return plain flags.
        unsafe {
            let fd = (*p).fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(errno());
            }
        }
        Ok(ch)
    }

    /// Waits up to `timeout` for a completion event: `Ok(true)` when one came (it is
    /// acknowledged), `Ok(false)` when none did.
    pub fn wait(&self, timeout: std::time::Duration) -> Result<bool, i32> {
        let mut pfd = libc::pollfd {
            // SAFETY: a live channel.
            fd: unsafe { (*self.ptr).fd },
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            return Err(errno());
        }
        if n == 0 {
            return Ok(false);
        }
        let mut cq = ptr::null_mut();
        let mut cq_ctx = ptr::null_mut();
        // SAFETY: a live channel; the out-pointers are valid.
        if unsafe { ibv_get_cq_event(self.ptr, &mut cq, &mut cq_ctx) } != 0 {
            return Err(errno());
        }
        // SAFETY: `cq` is the live CQ the event came from.
        unsafe { ibv_ack_cq_events(cq, 1) };
        Ok(true)
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: created by us; every CQ on it was destroyed before (declared after it).
        unsafe { ibv_destroy_comp_channel(self.ptr) };
    }
}

pub struct Qp {
    pub ptr: *mut ibv_qp,
    pub qp_type: u32,
    /// The capacities `ibv_create_qp` wrote back (the actual ones).
    pub cap: ibv_qp_cap,
}

impl Qp {
    pub fn create(
        pd: &Pd,
        cq: &Cq,
        qp_type: u32,
        cap: ibv_qp_cap,
        sq_sig_all: bool,
    ) -> Result<Qp, i32> {
        let mut ia = ibv_qp_init_attr {
            send_cq: cq.ptr,
            recv_cq: cq.ptr,
            cap,
            qp_type,
            sq_sig_all: sq_sig_all as i32,
            ..zeroed()
        };
        // SAFETY: valid PD/CQ; the init attr lives across the call.
        let p = unsafe { ibv_create_qp(pd.ptr, &mut ia) };
        if p.is_null() {
            Err(errno())
        } else {
            Ok(Qp {
                ptr: p,
                qp_type,
                cap: ia.cap,
            })
        }
    }

    pub fn qpn(&self) -> u32 {
        // SAFETY: valid QP.
        unsafe { (*self.ptr).qp_num }
    }

    pub fn modify(&self, attr: &ibv_qp_attr, mask: u32) -> Result<(), i32> {
        let mut a = attr.bitcopy();
        // SAFETY: valid QP; attr copied so the provider may scribble on it.
        ret_errno(unsafe { ibv_modify_qp(self.ptr, &mut a, mask as i32) })
    }

    /// `ibv_query_qp` with every standard mask bit.
    pub fn query(&self) -> Result<(ibv_qp_attr, ibv_qp_init_attr), i32> {
        let mut a = zeroed::<ibv_qp_attr>();
        let mut ia = zeroed::<ibv_qp_init_attr>();
        // SAFETY: valid QP and output buffers.
        ret_errno(unsafe { ibv_query_qp(self.ptr, &mut a, 0x1f_ffff, &mut ia) })?;
        Ok((a, ia))
    }

    pub fn destroy(self) -> Result<(), i32> {
        let p = self.ptr;
        std::mem::forget(self);
        // SAFETY: created by us, destroyed once.
        ret_errno(unsafe { ibv_destroy_qp(p) })
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once.
        unsafe { ibv_destroy_qp(self.ptr) };
    }
}

/// A memory region over a heap buffer the wrapper owns.
pub struct Mr {
    pub ptr: *mut ibv_mr,
    _buf: Vec<u8>,
}

impl Mr {
    pub fn reg(pd: &Pd, len: usize, access: u32) -> Result<Mr, i32> {
        let mut buf = vec![0u8; len];
        // SAFETY: the buffer outlives the registration (owned by the Mr, dropped after it).
        let p = unsafe { ibv_reg_mr(pd.ptr, buf.as_mut_ptr().cast(), len, access as i32) };
        if p.is_null() {
            Err(errno())
        } else {
            Ok(Mr { ptr: p, _buf: buf })
        }
    }

    pub fn destroy(mut self) -> Result<(), i32> {
        let p = self.ptr;
        self.ptr = ptr::null_mut();
        // SAFETY: registered by us, deregistered once (Drop sees null).
        ret_errno(unsafe { ibv_dereg_mr(p) })
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: registered by us, deregistered once.
            unsafe { ibv_dereg_mr(self.ptr) };
        }
    }
}

/// An address handle.
pub struct Ah {
    pub ptr: *mut ibv_ah,
}

impl Ah {
    pub fn create(pd: &Pd, attr: &ibv_ah_attr) -> Result<Ah, i32> {
        let mut a = *attr;
        // SAFETY: valid PD; attr copied.
        let p = unsafe { ibv_create_ah(pd.ptr, &mut a) };
        if p.is_null() {
            Err(errno())
        } else {
            Ok(Ah { ptr: p })
        }
    }

    pub fn destroy(self) -> Result<(), i32> {
        let p = self.ptr;
        std::mem::forget(self);
        // SAFETY: created by us, destroyed once.
        ret_errno(unsafe { ibv_destroy_ah(p) })
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once.
        unsafe { ibv_destroy_ah(self.ptr) };
    }
}
