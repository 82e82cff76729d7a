//! Read-side guards and deferred reclamation on `crossbeam-epoch`'s global collector.
//!
//! A [`Guard`] is an RCU read-side critical section. Guards nest cheaply: pinning while the thread is already
//! pinned only bumps a thread-local count, so a caller that holds one guard over a batch of lookups pays the
//! entry cost (one fence) once.

use std::fmt;

/// An RCU read-side critical section: while it lives, nothing retired after it was taken is freed.
///
/// Obtained from [`pin`]. Not `Send`: a critical section belongs to one thread.
pub struct Guard {
    inner: crossbeam_epoch::Guard,
}

/// Enters a read-side critical section.
///
/// The first guard on a thread costs one full fence (it must be visible to writers before the thread loads any
/// shared pointer); nested guards cost a thread-local increment.
#[inline]
pub fn pin() -> Guard {
    Guard { inner: crossbeam_epoch::pin() }
}

impl Guard {
    /// Runs `f` after a grace period: after every guard that exists now (on any thread) has been dropped.
    ///
    /// Call it only after the object `f` frees has been unpublished, so that no guard taken from now on can
    /// reach it.
    #[inline]
    pub fn defer<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        self.inner.defer(f);
    }

    /// Frees `ptr` (a pointer obtained from `Box::into_raw`) after a grace period.
    ///
    /// # Safety
    ///
    /// `ptr` came from `Box::<T>::into_raw`, is retired exactly once, and has been unpublished: no guard taken
    /// after this call can obtain it. `T`'s destructor must be safe to run on any thread at any later time.
    #[inline]
    pub unsafe fn defer_destroy<T>(&self, ptr: *mut T) {
        let addr = ptr as usize;
        // SAFETY: the caller guarantees `ptr` is an unpublished, uniquely retired `Box<T>`; the closure runs
        // after every guard that could still hold it is gone. The address travels as `usize` because raw
        // pointers are not `Send`; ownership is what moves, and it is unique.
        unsafe {
            self.inner.defer_unchecked(move || drop(Box::from_raw(addr as *mut T)));
        }
    }

    /// Pushes this thread's retired objects to the global queue and tries to advance the epoch, so that
    /// reclamation does not wait for the thread's local bag to fill.
    #[inline]
    pub fn flush(&self) {
        self.inner.flush();
    }

    /// Leaves and re-enters the critical section, letting reclamation progress during a long walk. Every
    /// pointer loaded under the old section must be considered stale afterwards (the kernel's `mas_pause`).
    #[inline]
    pub fn repin(&mut self) {
        self.inner.repin();
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("rcu::Guard")
    }
}
