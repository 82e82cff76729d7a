//! A reclamation model for loom: the grace-period rule made explicit on loom's atomics.
//!
//! Other crates' loom models should spend their budget on *their* protocols, not on the reclamation
//! implementation, so under loom the crate's `pin` is this model. (The real reader protocol, `memb`, is checked
//! on its own by this crate's `tests/loom.rs`.) The model keeps the one property those protocols rely on:
//!
//! > an object retired at time R is freed only when no guard that existed at R still exists.
//!
//! It counts live guards in one atomic. [`pin`] increments it with an acquire-release RMW; dropping a guard
//! decrements it the same way and, if it reaches zero, runs everything retired so far (re-checking the
//! count with the queue locked). [`Guard::defer`] queues
//! the closure and runs the queue at once if its own RMW on the counter (`fetch_add(0)`) reads 1 (itself).
//!
//! Why an RMW and not a load: the retire path and a concurrent `pin` are ordered in the counter's modification
//! order. If the retiring RMW comes first, the reader's pin RMW reads from it (RMWs extend release sequences), so
//! the writer's unpublishing store happens-before the reader's later pointer loads: the reader cannot find the
//! retired object. If the pin comes first, the retire path sees a count above its own and defers the free to the
//! last guard's drop, whose release RMW orders the reader's accesses before the free.

use std::fmt;

use loom::sync::Mutex;
use loom::sync::atomic::{AtomicUsize, Ordering};

type Deferred = Box<dyn FnOnce() + Send>;

struct Domain {
    /// Live guards, on every thread.
    guards: AtomicUsize,
    /// Closures waiting for a moment with no guard alive.
    retired: Mutex<Vec<Deferred>>,
}

loom::lazy_static! {
    static ref DOMAIN: Domain = Domain { guards: AtomicUsize::new(0), retired: Mutex::new(Vec::new()) };
}

/// An RCU read-side critical section (loom model).
pub struct Guard {
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Enters a read-side critical section (loom model).
pub fn pin() -> Guard {
    // AcqRel: acquire pairs with the release of an earlier retire RMW (so unpublishing stores are visible to
    // this reader's later loads); release is not needed here but harmless.
    DOMAIN.guards.fetch_add(1, Ordering::AcqRel);
    Guard { _not_send: std::marker::PhantomData }
}

/// Runs the queue if, with the queue locked, no guard is alive. Retirers push under the lock while holding a
/// guard, so a zero count read under the lock means every guard that existed at any queued retirement is gone;
/// a guard taken after this RMW is ordered after the retirers' unpublishing stores and cannot reach the objects.
fn try_run_all() {
    let batch: Vec<Deferred> = {
        let mut queue = DOMAIN.retired.lock().unwrap();
        if DOMAIN.guards.fetch_add(0, Ordering::AcqRel) != 0 {
            return;
        }
        std::mem::take(&mut *queue)
    };
    for f in batch {
        f();
    }
}

impl Guard {
    /// Runs `f` once no guard that exists now is alive.
    pub fn defer<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        DOMAIN.retired.lock().unwrap().push(Box::new(f));
        // The caller holds `self`, so the count is at least 1; the queue drains when the last guard drops.
        // AcqRel RMW: the release half publishes the caller's unpublishing stores to any later pin.
        DOMAIN.guards.fetch_add(0, Ordering::AcqRel);
    }

    /// Frees a `Box<T>` after a grace period.
    ///
    /// # Safety
    ///
    /// As for the ordinary build: `ptr` is an unpublished, uniquely retired `Box<T>`.
    pub unsafe fn defer_destroy<T>(&self, ptr: *mut T) {
        let addr = ptr as usize;
        // SAFETY: the caller's contract; the closure runs after the grace period.
        self.defer(move || unsafe { drop(Box::from_raw(addr as *mut T)) });
    }

    /// No-op in the model (retirement is immediate bookkeeping).
    pub fn flush(&self) {}

    /// Leaves and re-enters the critical section.
    pub fn repin(&mut self) {
        leave();
        DOMAIN.guards.fetch_add(1, Ordering::AcqRel);
    }
}

fn leave() {
    // AcqRel: release orders this reader's accesses before whatever the last guard frees; acquire makes the
    // retirers' stores visible to the thread that runs the queue.
    if DOMAIN.guards.fetch_sub(1, Ordering::AcqRel) == 1 {
        try_run_all();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        leave();
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("rcu::Guard(loom)")
    }
}

/// Frees whatever is queued if no guard is alive. In the model, reclamation already happens as soon as the last
/// guard drops, so there is nothing to wait for; this exists so that code calling `synchronize` builds under loom.
pub fn synchronize() {
    try_run_all();
}

/// Starts the grace period of this thread's retired objects (the real one may wait for it a bounded time; the
/// model frees as soon as the last guard drops, so there is nothing to wait for).
pub fn expedite(_budget: std::time::Duration) {
    try_run_all();
}

/// The loom model uses no barrier tricks.
pub fn uses_membarrier() -> bool {
    false
}
