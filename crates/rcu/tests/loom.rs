//! Loom models of the protocols this crate provides: the reclamation model's grace period (publish, unpublish,
//! retire against a concurrent reader), the real reader protocol of `memb` (its fence fallback, which has the
//! fast path's orderings with `membarrier` and the compiler barrier strengthened to `fence(SeqCst)`), and the
//! seqcount's reader/writer validation.
//!
//! The `memb` models read the retired object's contents through a `loom::cell::UnsafeCell` and write it in the
//! destructor, so loom reports any free that does not happen after every read of a section that could see the
//! object (a use-after-free in the real build).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p vmspace-rcu --test loom`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use vmspace_rcu::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use vmspace_rcu::{SeqCount, memb};

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

/// An object whose contents loom tracks: a read that does not happen before the destructor's write is a race.
struct Cell {
    value: loom::cell::UnsafeCell<u64>,
    freed: Arc<AtomicBool>,
}

impl Cell {
    fn boxed(value: u64, freed: &Arc<AtomicBool>) -> *mut Cell {
        Box::into_raw(Box::new(Cell { value: loom::cell::UnsafeCell::new(value), freed: freed.clone() }))
    }

    /// Reads the contents (loom checks the read against the destructor's write).
    fn read(&self) -> u64 {
        // SAFETY: loom's cell checks the access; a race fails the model instead of being UB.
        self.value.with(|v| unsafe { *v })
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        // SAFETY: as in `read`; this write is what a read racing with the free would conflict with.
        self.value.with_mut(|v| unsafe { *v = 0 });
        self.freed.store(true, Ordering::Relaxed);
    }
}

/// The writer side of the `memb` models: publishes a new object, retires the old one and waits for a grace
/// period, after which the old object must have been freed.
fn memb_replace_and_synchronize(slot: &AtomicPtr<Cell>, new: *mut Cell, old_freed: &AtomicBool) {
    // AcqRel: release publishes the new object's contents; acquire makes the old one ours to retire.
    let old = slot.swap(new, Ordering::AcqRel);
    {
        let guard = memb::pin();
        // SAFETY: `old` is unpublished (swapped out) and retired once.
        unsafe { guard.defer_destroy(old) };
    }
    memb::synchronize();
    assert!(old_freed.load(Ordering::Relaxed), "synchronize returned before the retired object was freed");
}

/// The reader of the `memb` models that check the writer: loads the published object inside a section and
/// reads it (1 or 2, never a freed object's 0).
fn memb_read(slot: &AtomicPtr<Cell>) {
    let guard = memb::pin();
    // Acquire: pairs with the writer's release swap.
    // SAFETY: published objects are freed only after a grace period; we hold a guard.
    let obj = unsafe { &*slot.load(Ordering::Acquire) };
    let v = obj.read();
    assert!(v == 1 || v == 2, "read {v}: a freed object");
    drop(guard);
}

/// Frees what is still published once every thread of the model is done.
fn memb_cleanup(slot: &AtomicPtr<Cell>) {
    // SAFETY: every other thread has been joined; nothing else can reach the object.
    unsafe { drop(Box::from_raw(slot.load(Ordering::Relaxed))) };
}

/// A `memb` model: `read` on a thread of its own against `write`, which replaces the published object (holding
/// 1) with a new one (holding 2) and retires the old one. With `settle`, once both are done the old object must
/// be freed by the next grace period at the latest.
fn memb_model(read: fn(&AtomicPtr<Cell>), write: fn(&AtomicPtr<Cell>, *mut Cell, &AtomicBool), settle: bool) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let old_freed = Arc::new(AtomicBool::new(false));
        let new_freed = Arc::new(AtomicBool::new(false));
        let slot = Arc::new(AtomicPtr::new(Cell::boxed(1, &old_freed)));
        let reader = {
            let slot = slot.clone();
            thread::spawn(move || read(&slot))
        };
        write(&slot, Cell::boxed(2, &new_freed), &old_freed);
        reader.join().unwrap();
        if settle {
            // Whatever the writer left queued goes with the next grace period.
            memb::synchronize();
            assert!(old_freed.load(Ordering::Relaxed), "the retired object was never freed");
        }
        memb_cleanup(&slot);
    });
}

/// The real protocol: a reader that loads the published pointer inside a section never reads an object the
/// concurrent writer has freed (the store-load pairing of the entry store and fence against the reclaimer's
/// grace-period increment, fence and scan).
#[test]
fn memb_retire_waits_for_reader() {
    memb_model(memb_read, memb_replace_and_synchronize, true);
}

/// `expedite`: the writer waits a bounded number of scans for the reader instead of a full `synchronize`, and
/// frees the old object only if the scans after its one heavy barrier show the reader gone or past the
/// retirement; the reader never reads a freed object either way.
#[test]
fn memb_expedite_frees_only_after_the_reader() {
    memb_model(
        memb_read,
        |slot, new, _| {
            // AcqRel: release publishes the new object; acquire makes the old one ours to retire.
            let old = slot.swap(new, Ordering::AcqRel);
            {
                let guard = memb::pin();
                // SAFETY: `old` is unpublished (swapped out) and retired once.
                unsafe { guard.defer_destroy(old) };
            }
            memb::expedite(std::time::Duration::from_micros(50));
        },
        true,
    );
}

/// The reader's entry store must be a release store: a reader that read the old object in one section, left and
/// entered a new section that a reclaimer's scan then observes (new snapshot, so the batch is freed) must have
/// its first section's reads ordered before the free. With a relaxed entry store loom reports the first
/// section's read racing with the destructor.
#[test]
fn entry_store_orders_previous_section() {
    memb_model(
        |slot| {
            let guard = memb::pin();
            // Acquire: pairs with the writer's release swap.
            // SAFETY: as in `memb_retire_waits_for_reader`.
            let obj = unsafe { &*slot.load(Ordering::Acquire) };
            assert!(obj.read() != 0, "read a freed object");
            drop(guard);
            // A second section that reads nothing: only its entry store matters.
            drop(memb::pin());
        },
        memb_replace_and_synchronize,
        false,
    );
}

/// As `entry_store_orders_previous_section`, with the section renewed by `Guard::repin`.
#[test]
fn repin_orders_previous_section() {
    memb_model(
        |slot| {
            let mut guard = memb::pin();
            // Acquire: pairs with the writer's release swap.
            // SAFETY: as in `memb_retire_waits_for_reader`.
            let obj = unsafe { &*slot.load(Ordering::Acquire) };
            assert!(obj.read() != 0, "read a freed object");
            guard.repin();
            // Acquire: as above; the reload is what a paused walk does after `repin`.
            // SAFETY: as above, under the renewed section.
            let obj = unsafe { &*slot.load(Ordering::Acquire) };
            assert!(obj.read() != 0, "read a freed object after repin");
            drop(guard);
        },
        memb_replace_and_synchronize,
        false,
    );
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
