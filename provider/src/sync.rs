//! A lock that can be taken in one verb and released in another (`ibv_start_poll` ..
//! `ibv_end_poll`, `ibv_wr_start` .. `ibv_wr_complete`), which a `std::sync::Mutex` guard
//! cannot express across `extern "C"` calls.

use core::cell::UnsafeCell;

/// A `pthread_mutex_t` (default type). It must not move once used: keep it inside a `Box` or
/// another allocation that never moves.
pub struct RawMutex(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is designed to be shared between threads; all access goes through
// `pthread_mutex_lock`/`unlock`.
unsafe impl Send for RawMutex {}
// SAFETY: as above.
unsafe impl Sync for RawMutex {}

impl RawMutex {
    /// An unlocked mutex (`PTHREAD_MUTEX_INITIALIZER`).
    pub const fn new() -> RawMutex {
        RawMutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER))
    }

    /// Blocks until the calling thread owns the mutex.
    pub fn lock(&self) {
        // SAFETY: the mutex is initialised and does not move (type contract).
        let r = unsafe { libc::pthread_mutex_lock(self.0.get()) };
        debug_assert_eq!(r, 0);
    }

    /// Takes the mutex if it is free.
    pub fn try_lock(&self) -> bool {
        // SAFETY: as in `lock`.
        unsafe { libc::pthread_mutex_trylock(self.0.get()) == 0 }
    }

    /// Releases the mutex.
    ///
    /// # Safety
    /// The calling thread must own it (from `lock`/`try_lock`).
    pub unsafe fn unlock(&self) {
        // SAFETY: the caller owns the mutex.
        let r = unsafe { libc::pthread_mutex_unlock(self.0.get()) };
        debug_assert_eq!(r, 0);
    }
}

impl Default for RawMutex {
    fn default() -> Self {
        RawMutex::new()
    }
}

impl Drop for RawMutex {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: nobody holds or waits for the mutex.
        unsafe { libc::pthread_mutex_destroy(self.0.get()) };
    }
}
