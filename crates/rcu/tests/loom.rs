//! Loom models of the protocols this crate provides: the reclamation model's grace period (publish, unpublish,
//! retire against a concurrent reader) and the seqcount's reader/writer validation.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p vmspace-rcu --test loom`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use vmspace_rcu::SeqCount;
use vmspace_rcu::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// An object whose destructor marks it freed, so a reader can assert it never reads a freed object.
struct Obj {
    value: AtomicU64,
    freed: Arc<AtomicBool>,
}

impl Drop for Obj {
    fn drop(&mut self) {
        self.freed.store(true, Ordering::Relaxed);
    }
}

/// A writer replaces the published object and retires the old one while a reader loads and reads it: the reader
/// sees the old or the new object, and never one that has been freed while it still held its guard.
#[test]
fn retire_waits_for_reader() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let old_freed = Arc::new(AtomicBool::new(false));
        let new_freed = Arc::new(AtomicBool::new(false));
        let old = Box::into_raw(Box::new(Obj { value: AtomicU64::new(1), freed: old_freed.clone() }));
        let slot = Arc::new(AtomicPtr::new(old));

        let reader = {
            let slot = slot.clone();
            thread::spawn(move || {
                let guard = vmspace_rcu::pin();
                // Acquire: pairs with the writer's release publication of the new object.
                let p = slot.load(Ordering::Acquire);
                // SAFETY: `p` was published and we hold a guard: it cannot be freed until the guard drops.
                let obj = unsafe { &*p };
                assert!(!obj.freed.load(Ordering::Relaxed), "reader reached a freed object");
                let v = obj.value.load(Ordering::Relaxed);
                assert!(v == 1 || v == 2);
                drop(guard);
            })
        };

        let new = Box::into_raw(Box::new(Obj { value: AtomicU64::new(2), freed: new_freed.clone() }));
        let guard = vmspace_rcu::pin();
        // Release: the new object's contents are visible to a reader that loads the pointer.
        let prev = slot.swap(new, Ordering::AcqRel);
        // SAFETY: `prev` is unpublished (swapped out) and retired once.
        unsafe { guard.defer_destroy(prev) };
        drop(guard);
        reader.join().unwrap();
        // Both guards are gone: the old object has been reclaimed.
        assert!(old_freed.load(Ordering::Relaxed));
        // Clean up the live object.
        // SAFETY: no other thread remains.
        unsafe { drop(Box::from_raw(slot.load(Ordering::Relaxed))) };
        assert!(new_freed.load(Ordering::Relaxed));
    });
}

/// A seqcount reader that validates its copy never accepts a torn pair written by a concurrent writer.
#[test]
fn seqcount_reader_never_accepts_torn_copy() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let seq = Arc::new(SeqCount::new());
        let a = Arc::new(AtomicU64::new(0));
        let b = Arc::new(AtomicU64::new(0));
        let writer = {
            let (seq, a, b) = (seq.clone(), a.clone(), b.clone());
            thread::spawn(move || {
                seq.write_begin();
                a.store(1, Ordering::Relaxed);
                b.store(1, Ordering::Relaxed);
                seq.write_end();
            })
        };
        if let Some(s) = seq.try_read_begin() {
            let x = a.load(Ordering::Relaxed);
            let y = b.load(Ordering::Relaxed);
            if !seq.read_retry(s) {
                assert_eq!(x, y, "validated copy is torn");
            }
        }
        writer.join().unwrap();
    });
}
