// SPDX-License-Identifier: GPL-2.0-only
//! Driver-private command and response buffers (`struct ib_udata`).

use super::bindings as b;
use crate::uapi;
use core::mem::size_of;
use kernel::{
    prelude::*,
    types::{AsBytes, FromBytes},
    uaccess::UserSlice,
};

/// The user buffers of one verb call. Each buffer is read or written at most once per call
/// (no double fetch).
pub(crate) struct Udata {
    raw: *mut b::ib_udata,
    inbuf: usize,
    inlen: usize,
    outbuf: usize,
    outlen: usize,
}

impl Udata {
    /// # Safety
    ///
    /// `udata` must be NULL or point to an `ib_udata` valid for the duration of the call.
    pub(crate) unsafe fn from_raw(udata: *mut b::ib_udata) -> Option<Self> {
        if udata.is_null() {
            return None;
        }
        // SAFETY: non-null and valid per the caller.
        let u = unsafe { &*udata };
        Some(Udata {
            raw: udata,
            inbuf: u.inbuf as usize,
            inlen: u.inlen,
            outbuf: u.outbuf as usize,
            outlen: u.outlen,
        })
    }

    /// The user context of the verb call (NULL-free: `None` only for a kernel caller).
    pub(crate) fn ucontext(&self) -> Option<*mut b::ib_ucontext> {
        // SAFETY: a user verb's udata is the `driver_udata` of a live attribute bundle.
        let c = unsafe { b::rrxe_udata_to_ucontext(self.raw) };
        (!c.is_null()).then_some(c)
    }

    /// Bytes the caller sent.
    pub(crate) fn inlen(&self) -> usize {
        self.inlen
    }

    /// Bytes the caller can receive.
    pub(crate) fn outlen(&self) -> usize {
        self.outlen
    }

    /// Reads the command. A shorter command (an older provider) leaves the remaining fields
    /// zero; a longer one must carry only zeros past what we know, else `EOPNOTSUPP`.
    pub(crate) fn read_cmd<T: FromBytes + AsBytes + Default>(&self) -> Result<T> {
        let mut cmd = T::default();
        let known = size_of::<T>().min(self.inlen);
        let mut reader = UserSlice::new(self.inbuf, self.inlen).reader();
        // SAFETY: `T: FromBytes + AsBytes` means any byte pattern is a valid `T` and `T` has no
        // padding, so viewing it as bytes and overwriting a prefix is sound.
        let bytes = unsafe {
            core::slice::from_raw_parts_mut((&mut cmd as *mut T).cast::<u8>(), size_of::<T>())
        };
        reader.read_slice(&mut bytes[..known])?;
        let mut rest = self.inlen - known;
        let mut chunk = [0u8; 32];
        while rest > 0 {
            let n = rest.min(chunk.len());
            reader.read_slice(&mut chunk[..n])?;
            if chunk[..n].iter().any(|&c| c != 0) {
                return Err(super::eopnotsupp());
            }
            rest -= n;
        }
        Ok(cmd)
    }

    /// For verbs with no driver-private command: accepts only an empty or all-zero buffer.
    pub(crate) fn expect_no_cmd(&self) -> Result {
        let _: NoCmd = self.read_cmd()?;
        Ok(())
    }

    /// Writes the response, truncated to what the caller can receive.
    pub(crate) fn respond<T: AsBytes>(&self, resp: &T) -> Result {
        let n = size_of::<T>().min(self.outlen);
        // SAFETY: `T: AsBytes` has no padding or interior mutability, so its bytes are
        // initialised and may be read as a slice.
        let bytes =
            unsafe { core::slice::from_raw_parts((resp as *const T).cast::<u8>(), size_of::<T>()) };
        UserSlice::new(self.outbuf, self.outlen)
            .writer()
            .write_slice(&bytes[..n])
    }
}

// SAFETY: plain `#[repr(C)]` structs of `u32`s with no padding (sizes pinned in the uapi file):
// every byte pattern is valid and every byte is initialised.
unsafe impl FromBytes for uapi::AllocUcontextCmd {}
// SAFETY: as above.
unsafe impl AsBytes for uapi::AllocUcontextCmd {}
// SAFETY: as above.
unsafe impl FromBytes for uapi::AllocUcontextResp {}
// SAFETY: as above.
unsafe impl AsBytes for uapi::AllocUcontextResp {}

/// A zero-length command.
#[derive(Default)]
struct NoCmd;
// SAFETY: a zero-sized type has no bytes.
unsafe impl FromBytes for NoCmd {}
// SAFETY: a zero-sized type has no bytes.
unsafe impl AsBytes for NoCmd {}

macro_rules! plain_abi {
    ($($t:ty),*) => {$(
        // SAFETY: `#[repr(C)]` structs of integers whose sizes the uapi file pins with no
        // padding: every byte pattern is valid and every byte is initialised.
        unsafe impl FromBytes for $t {}
        // SAFETY: as above.
        unsafe impl AsBytes for $t {}
    )*};
}
plain_abi!(
    uapi::CreateCqResp,
    uapi::CreateQpResp,
    uapi::CreateSrqResp,
    uapi::CreateAhResp
);
