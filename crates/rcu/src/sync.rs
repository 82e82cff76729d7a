//! The loom seam: the atomics, fences, mutexes, process-wide statics and spin hints every concurrent protocol in
//! vmspace uses.
//!
//! In ordinary builds these are `std`'s; under `--cfg loom` they are loom's, so that `cargo test` with
//! `RUSTFLAGS="--cfg loom"` model-checks the same source. No other module of the engine's crates (`rcu`,
//! `maple`, `mm`) may name `std::sync::atomic`, `loom::sync`, `std::sync::Mutex` or `parking_lot::Mutex`
//! directly (tests that stand outside the model, and the `loom_model` reclamation model itself, excepted; the
//! lab's crates, which loom never checks, use `std` freely).
//!
//! Three things need more than a re-export:
//! - [`Mutex`]: `std::sync::Mutex` and `loom::sync::Mutex` differ in construction (std's `new` is `const`,
//!   loom's is not, since a loom object belongs to one model execution) and both poison. The wrapper has one
//!   `lock` that ignores poisoning, as `parking_lot` does: every structure behind one of vmspace's mutexes is
//!   either checked by a `validate()` or is a free list whose invariant holds between any two statements.
//! - process-wide statics ([`statics!`](crate::statics)): a loom atomic cannot be built in a `static` (it must be
//!   created inside each model execution, and is reset with it). The macro declares a plain `static` in
//!   ordinary builds and a `loom::lazy_static!` (created on first use, once per execution) under loom; both
//!   are used the same way (`NAME.fetch_add(1, Ordering::Relaxed)`).
//! - [`spin_loop`] and [`yield_now`]: under loom a spin loop must yield, or the model never lets the other
//!   thread run.

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// The guard of a locked [`Mutex`]; the lock is released when it drops.
#[cfg(not(loom))]
pub type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;
/// The guard of a locked [`Mutex`]; the lock is released when it drops.
#[cfg(loom)]
pub type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

/// A mutual-exclusion lock: `std::sync::Mutex` (a futex word on Linux) in ordinary builds, loom's under loom.
///
/// Poisoning is ignored (see the module docs): [`Mutex::lock`] always returns the guard.
pub struct Mutex<T> {
    #[cfg(not(loom))]
    inner: std::sync::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`. `const`, so it can initialise a `static`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Self { inner: std::sync::Mutex::new(value) }
    }

    /// A new unlocked mutex holding `value` (loom: belongs to the current model execution).
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Self { inner: loom::sync::Mutex::new(value) }
    }

    /// Blocks until the lock is ours. A panic while another holder held it does not poison it.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the lock if it is free now.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        // loom's mutex reports with std's error type too.
        use std::sync::TryLockError;
        match self.inner.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The protected value, through exclusive access (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Consumes the mutex and returns the protected value.
    pub fn into_inner(self) -> T {
        self.inner.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.try_lock() {
            Some(g) => f.debug_struct("Mutex").field("data", &&*g).finish(),
            None => f.write_str("Mutex { <locked> }"),
        }
    }
}

#[cfg(loom)]
#[doc(hidden)]
pub use loom as __loom;

/// Declares process-wide statics built from the seam's types (atomics, [`Mutex`]es).
///
/// ```
/// vmspace_rcu::statics! {
///     /// Source of identities.
///     static NEXT_ID: vmspace_rcu::sync::AtomicU64 = vmspace_rcu::sync::AtomicU64::new(1);
/// }
/// let id = NEXT_ID.fetch_add(1, vmspace_rcu::sync::Ordering::Relaxed);
/// assert!(id >= 1);
/// ```
///
/// In ordinary builds each item is a plain `static` with a `const` initialiser. Under loom it is a
/// `loom::lazy_static!`: created on first use within each model execution and dropped with it, so loom tracks
/// it like any other object of the model. Items are private to the declaring module (loom's macro cannot
/// forward an arbitrary visibility).
#[cfg(not(loom))]
#[macro_export]
macro_rules! statics {
    ($($(#[$attr:meta])* static $name:ident : $t:ty = $init:expr;)*) => {
        $($(#[$attr])* static $name: $t = $init;)*
    };
}

/// Declares process-wide statics built from the seam's types (atomics, [`Mutex`]es).
///
/// In ordinary builds each item is a plain `static` with a `const` initialiser. Under loom it is a
/// `loom::lazy_static!`: created on first use within each model execution and dropped with it.
#[cfg(loom)]
#[macro_export]
macro_rules! statics {
    ($($(#[$attr:meta])* static $name:ident : $t:ty = $init:expr;)*) => {
        $($crate::sync::__loom::lazy_static! { $(#[$attr])* static ref $name: $t = $init; })*
    };
}

/// Tells the CPU (or loom's scheduler) that this thread is spinning on a condition another thread will change.
///
/// Under loom a spin loop must yield, or the model never lets the other thread run.
#[inline]
pub fn spin_loop() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Gives up the CPU: used by waits that may last longer than a spin (a writer waiting for readers to drain).
#[inline]
pub fn yield_now() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{AtomicU64, Mutex, Ordering};

    crate::statics! {
        /// A static mutex: `Mutex::new` must be `const`.
        static LIST: Mutex<Vec<u32>> = Mutex::new(Vec::new());
        /// A static atomic.
        static COUNT: AtomicU64 = AtomicU64::new(7);
    }

    #[test]
    fn static_mutex_and_atomic_work() {
        LIST.lock().push(3);
        assert!(LIST.lock().contains(&3));
        assert!(COUNT.fetch_add(1, Ordering::Relaxed) >= 7);
    }

    #[test]
    fn poisoned_mutex_still_locks() {
        let m = std::sync::Arc::new(Mutex::new(1u32));
        let m2 = m.clone();
        let r = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison the lock");
        })
        .join();
        assert!(r.is_err());
        *m.lock() += 1;
        assert_eq!(*m.lock(), 2);
        assert!(m.try_lock().is_some());
        let Ok(m) = std::sync::Arc::try_unwrap(m) else { panic!("the spawned thread released its clone") };
        assert_eq!(m.into_inner(), 2);
    }
}
