//! Integration tests of the ordinary (membarrier) build: retired objects are freed, but never while a guard
//! that predates their retirement is alive.
#![cfg(not(loom))]

mod common;

use common::{defer_count, hold_reader};

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

/// An object that is never freed (so a late reader cannot crash the test) but is marked when its grace period
/// has elapsed: a reader that still holds it then has found a reclamation bug.
struct Canary {
    reclaimed: AtomicUsize,
}

/// Readers keep loading the current object and check it is not reclaimed while they hold their guard; a writer
/// keeps replacing it and retiring the old one.
#[test]
fn readers_never_see_a_reclaimed_object() {
    use std::sync::atomic::{AtomicBool, AtomicPtr};
    let first: &'static Canary = Box::leak(Box::new(Canary { reclaimed: AtomicUsize::new(0) }));
    let slot = Arc::new(AtomicPtr::new(first as *const Canary as *mut Canary));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (slot, stop) = (slot.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let guard = vmspace_rcu::pin();
                    // SAFETY: canaries are leaked, so the reference is always valid memory.
                    let c = unsafe { &*slot.load(Ordering::Acquire) };
                    for _ in 0..16 {
                        assert_eq!(c.reclaimed.load(Ordering::SeqCst), 0, "object reclaimed under a reader");
                        std::hint::spin_loop();
                    }
                    drop(guard);
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let mut reclaimed_total = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        for _ in 0..1000 {
            let next: &'static Canary = Box::leak(Box::new(Canary { reclaimed: AtomicUsize::new(0) }));
            let old = slot.swap(next as *const Canary as *mut Canary, Ordering::AcqRel);
            // SAFETY: canaries are leaked, never freed.
            let old: &'static Canary = unsafe { &*old };
            reclaimed_total.push(old);
            vmspace_rcu::pin().defer(move || {
                old.reclaimed.store(1, Ordering::SeqCst);
            });
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    vmspace_rcu::synchronize();
    vmspace_rcu::synchronize();
    let done = reclaimed_total.iter().filter(|c| c.reclaimed.load(Ordering::SeqCst) == 1).count();
    assert_eq!(done, reclaimed_total.len(), "every retired object is reclaimed once readers are gone");
    // Readers are joined and every deferred closure has run: nothing refers to the canaries any more (Miri
    // reports what a test leaks).
    reclaimed_total.push(
        // SAFETY: the slot holds a leaked canary.
        unsafe { &*slot.load(Ordering::Relaxed) },
    );
    for c in reclaimed_total {
        // SAFETY: each canary came from `Box::leak` and appears once in the list; no reference outlives this.
        drop(unsafe { Box::from_raw(c as *const Canary as *mut Canary) });
    }
}

/// Readers read a published object's plain (non-atomic) fields while a writer replaces it and frees the old one
/// with `defer_destroy` (a real `Box` free). The canaries above are atomics, which ThreadSanitizer and Miri do
/// not check against a free; here a free that is not ordered after a reader's reads (the reader's release store
/// of `ctr` read by the reclaimer's acquire load, module docs of `memb`) is reported by either tool as a data
/// race or a use after free, whatever the timing. In a plain build such a read shows only if the memory was
/// reused meanwhile (the two fields stop matching).
#[test]
fn plain_reads_are_ordered_before_the_free() {
    use std::sync::atomic::{AtomicBool, AtomicPtr};
    struct Payload {
        a: u64,
        b: u64,
    }
    let new = |i: u64| Box::into_raw(Box::new(Payload { a: i, b: !i }));
    let slot = Arc::new(AtomicPtr::new(new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (slot, stop) = (slot.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) || reads == 0 {
                    let guard = vmspace_rcu::pin();
                    // SAFETY: the slot holds a live `Box`; it is freed only a grace period after it was replaced,
                    // and `guard` predates that replacement if the load saw it.
                    let p = unsafe { &*slot.load(Ordering::Acquire) };
                    assert_eq!(p.a, !p.b, "read an object after its free");
                    drop(guard);
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_millis(if cfg!(miri) { 50 } else { 500 });
    let mut i = 0u64;
    let min = if cfg!(miri) { 300 } else { 1000 };
    while Instant::now() < deadline || i < min {
        i += 1;
        let old = slot.swap(new(i), Ordering::AcqRel);
        // SAFETY: `old` came from `Box::into_raw`, was unpublished by the swap and is retired once.
        unsafe { vmspace_rcu::pin().defer_destroy(old) };
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    // SAFETY: the readers are joined; the last object was never retired.
    drop(unsafe { Box::from_raw(slot.load(Ordering::Relaxed)) });
    vmspace_rcu::synchronize();
}

/// `synchronize` returns only after a reader that was inside when it was called has left.
#[test]
fn synchronize_waits_for_preexisting_reader() {
    use std::sync::atomic::AtomicBool;
    let inside = Arc::new(AtomicBool::new(false));
    let left = Arc::new(AtomicBool::new(false));
    let reader = {
        let (inside, left) = (inside.clone(), left.clone());
        std::thread::spawn(move || {
            let guard = vmspace_rcu::pin();
            inside.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(200));
            left.store(true, Ordering::SeqCst);
            drop(guard);
        })
    };
    while !inside.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    vmspace_rcu::synchronize();
    assert!(left.load(Ordering::SeqCst), "synchronize returned while a pre-existing reader was inside");
    reader.join().unwrap();
}

#[test]
fn expedite_waits_for_the_readers_and_frees_the_batch() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (release, h) = hold_reader();
    defer_count(&runs);
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        drop(release);
    });
    vmspace_rcu::expedite(Duration::from_secs(30));
    // The batch is out of the queue: freed by this thread, or being freed by another thread's advance that
    // popped it meanwhile (tests run in parallel). Nothing more from this thread is needed.
    let t = Instant::now();
    while runs.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::yield_now();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "expedite returned with its batch still queued");
    releaser.join().unwrap();
    h.join().unwrap();
}

#[test]
fn expedite_gives_up_after_its_budget_and_leaves_the_batch_queued() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (release, h) = hold_reader();
    defer_count(&runs);
    let t = Instant::now();
    vmspace_rcu::expedite(Duration::from_millis(5));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "freed while a reader that predates the retirement was inside"
    );
    drop(release);
    h.join().unwrap();
    assert!(reclaim_until(|| runs.load(Ordering::SeqCst) == 1), "the queued batch was never freed");
}

#[test]
fn expedite_inside_a_section_does_not_wait_for_itself() {
    let runs = Arc::new(AtomicUsize::new(0));
    let g = vmspace_rcu::pin();
    defer_count(&runs);
    let t = Instant::now();
    vmspace_rcu::expedite(Duration::from_secs(30));
    assert!(t.elapsed() < Duration::from_secs(5), "expedite waited for its own section");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    drop(g);
    assert!(reclaim_until(|| runs.load(Ordering::SeqCst) == 1));
}

#[test]
fn expedite_with_nothing_new_frees_what_is_queued() {
    let runs = Arc::new(AtomicUsize::new(0));
    // A reader inside a section from before the retirement, for 20 ms.
    let (release, h) = hold_reader();
    {
        // Queued from inside a section, which holds it back too.
        let g = vmspace_rcu::pin();
        let r = runs.clone();
        g.defer(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        g.flush();
    }
    // The bag is empty now; expedite still waits for the queued batch until the reader leaves.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        drop(release);
    });
    vmspace_rcu::expedite(Duration::from_secs(30));
    releaser.join().unwrap();
    h.join().unwrap();
    let t = Instant::now();
    while runs.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::yield_now();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "expedite left the queued batch");
}
