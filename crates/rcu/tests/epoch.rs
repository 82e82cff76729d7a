//! Integration tests of the ordinary (crossbeam-epoch) build: retired objects are freed, but never while a guard
//! that predates their retirement is alive.
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Drives reclamation until `cond` holds or a deadline passes.
fn reclaim_until(cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        vmspace_rcu::pin().flush();
        std::thread::yield_now();
    }
    cond()
}

#[test]
fn retired_box_is_freed_after_guards_drop() {
    let freed = Arc::new(AtomicUsize::new(0));
    let reader = vmspace_rcu::pin();
    {
        let writer = vmspace_rcu::pin();
        let p = Box::into_raw(Box::new(Counted(freed.clone())));
        // SAFETY: `p` was never published; it is retired once.
        unsafe { writer.defer_destroy(p) };
        writer.flush();
    }
    // The reader's guard predates the retirement: nothing may be freed while it lives.
    for _ in 0..64 {
        reader.flush();
    }
    assert_eq!(
        freed.load(Ordering::SeqCst),
        0,
        "freed while a reader that predates the retirement was pinned"
    );
    drop(reader);
    assert!(reclaim_until(|| freed.load(Ordering::SeqCst) == 1), "retired object never freed");
}

#[test]
fn deferred_closures_run_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..100 {
        let runs = runs.clone();
        vmspace_rcu::pin().defer(move || {
            runs.fetch_add(1, Ordering::SeqCst);
        });
    }
    assert!(reclaim_until(|| runs.load(Ordering::SeqCst) == 100));
}
