//! The loom seam: the atomics, fences and spin hints every lock-free protocol in vmspace uses.
//!
//! In ordinary builds these are `std`'s; under `--cfg loom` they are loom's, so that `cargo test` with
//! `RUSTFLAGS="--cfg loom"` model-checks the same source. No other module in the workspace may name
//! `std::sync::atomic` or `loom::sync::atomic` directly.

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

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
