//! The reader entry points check the lock they are given against the mm they read, in every build: a
//! reference or a VMA read lock obtained under another mm's lock would not keep this mm's writers out.
//! (The raw unlocks, `VmaReadGuard::from_raw`, `mm_lock_seq`'s writer side and `MmLocking::with_id` left the
//! safe API: their `compile_fail` doctests in `vma::mmap_lock` and `vma::lock` show that the former safe calls
//! no longer compile from outside the crate.)

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, lock_next_vma, lock_vma_under_rcu};

const P: u64 = PAGE_SIZE;
const A: u64 = 0x3000_0000_0000;
const FIXED: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

/// Keeps the expected panics ("... of another mm") out of the test output; every other panic is reported as
/// usual.
fn quiet_expected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.contains("of another mm") {
                default(info);
            }
        }));
    });
}

/// Sets the flag when dropped: a failed assertion of the main thread (which unwinds out of the scope) still
/// stops the writer, so the scope's join does not hang.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A thread that keeps changing `mm`'s VMA at `A` (mprotect splits and merges it; the mapping at `A + 4P`
/// comes and goes) until `stop`; counts its calls in `calls`.
fn churn(mm: &Mm, stop: &AtomicBool, calls: &AtomicU64) {
    while !stop.load(Ordering::Relaxed) {
        mm.mprotect(A + P, P, Prot::READ).expect("mprotect");
        mm.mprotect(A + P, P, Prot::RW).expect("mprotect");
        mm.mmap(A + 4 * P, P, Prot::RW, FIXED, None, 0).expect("mmap");
        mm.munmap(A + 4 * P, P).expect("munmap");
        calls.fetch_add(4, Ordering::Relaxed);
    }
}

/// `MmShared::vma_locked` with another mm's read lock panics (release builds included), while this mm's writer
/// runs; with its own mm's read lock it answers, and the VMA it returns stays as it was while the lock is held.
#[test]
fn vma_locked_refuses_another_mms_lock_beside_a_writer() {
    quiet_expected_panics();
    let (a, b) = (Mm::new(MmConfig::default()), Mm::new(MmConfig::default()));
    a.mmap(A, 3 * P, Prot::RW, FIXED, None, 0).unwrap();
    b.mmap(A, 3 * P, Prot::RW, FIXED, None, 0).unwrap();
    let (sa, sb) = (a.shared(), b.shared());
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| churn(&a, &stop, &calls));
        let stopper = StopOnDrop(&stop);
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut refused, mut answered) = (0u32, 0u32);
        while (refused < 200 || calls.load(Ordering::Relaxed) < 400) && Instant::now() < deadline {
            // Another mm's read lock (b's): refused, whatever a's writer is doing.
            let foreign = sb.locking.read_lock();
            let r = catch_unwind(AssertUnwindSafe(|| sa.vma_locked(&foreign, A).map(|v| v.start())));
            drop(foreign);
            assert!(r.is_err(), "vma_locked answered under another mm's read lock: {r:?}");
            refused += 1;
            // Its own read lock: the VMA at A is found and cannot change while the lock is held.
            let own = sa.locking.read_lock();
            let v = sa.vma_locked(&own, A).expect("A is mapped");
            let before = (v.start(), v.end(), v.flags());
            std::thread::yield_now();
            assert_eq!((v.start(), v.end(), v.flags()), before, "a VMA changed under the mmap read lock");
            drop(own);
            answered += 1;
        }
        drop(stopper);
        assert!(refused >= 200 && answered >= 200, "{refused} refused, {answered} answered");
    });
    assert!(calls.load(Ordering::Relaxed) >= 400, "the writer made no progress");
    // b's own lock still works, and both address spaces are intact.
    let own = sb.locking.read_lock();
    assert_eq!(sb.vma_locked(&own, A).map(|v| (v.start(), v.end())), Some((A, A + 3 * P)));
    drop(own);
    a.validate().unwrap();
    b.validate().unwrap();
}

/// `lock_next_vma` given one mm's locks and another mm's tree panics instead of read-locking the other mm's
/// VMA under a lock that does not keep its writer out; `lock_vma_under_rcu` refuses it (the VMA's `vm_mm`
/// differs), as it always did. With matching arguments both work beside the writer.
#[test]
fn lock_next_vma_refuses_another_mms_tree_beside_a_writer() {
    quiet_expected_panics();
    let (a, b) = (Mm::new(MmConfig::default()), Mm::new(MmConfig::default()));
    a.mmap(A, 3 * P, Prot::RW, FIXED, None, 0).unwrap();
    let (sa, sb) = (a.shared(), b.shared());
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| churn(&a, &stop, &calls));
        let _stopper = StopOnDrop(&stop);
        for _ in 0..200 {
            let r = catch_unwind(AssertUnwindSafe(|| {
                lock_next_vma(&sb.locking, &*sa, 0).map(|g| g.map(|g| g.start()))
            }));
            assert!(r.is_err(), "lock_next_vma read-locked a VMA of another mm: {r:?}");
            assert!(lock_vma_under_rcu(&sb.locking, &*sa, A).is_none());
            // Matching arguments: the first VMA is the one at A (it may be split for a moment).
            if let Ok(Some(g)) = lock_next_vma(&sa.locking, &*sa, 0) {
                assert_eq!(g.start(), A);
            }
            if let Some(g) = lock_vma_under_rcu(&sa.locking, &*sa, A) {
                assert!(g.contains(A));
            }
        }
    });
    // b's lock was left unlocked by the panics (the guards unwound).
    assert!(sb.locking.try_write_lock().is_some());
    a.validate().unwrap();
}

/// The calls that left the safe API still work as `unsafe` calls whose contract is met (so the `compile_fail`
/// doctests fail for the missing `unsafe` alone, not for a typo): each raw release gives up a hold the caller
/// took, and the lock is free afterwards.
#[test]
fn raw_releases_work_inside_unsafe_with_their_contract_met() {
    let mm = Mm::new(MmConfig::default());
    mm.mmap(A, P, Prot::RW, FIXED, None, 0).unwrap();
    let l = mm.locking();
    let seq = l.lock_seq();
    let free = || {
        let w = l.try_write_lock();
        w.is_some() && !l.is_contended()
    };

    l.raw_read_lock();
    assert!(l.try_write_lock().is_none());
    // SAFETY: the read hold taken just above is ours and released once.
    unsafe { l.raw_read_unlock() };
    assert!(free());

    l.raw_write_lock();
    assert_eq!(l.lock_seq() & 1, 1, "a write epoch is open");
    // SAFETY: the write hold taken just above is ours; the downgrade leaves us one read hold ...
    unsafe { l.raw_write_downgrade() };
    assert!(l.try_read_lock().is_some() && l.try_write_lock().is_none());
    // SAFETY: ... which is released once here.
    unsafe { l.raw_read_unlock() };
    l.raw_write_lock();
    // SAFETY: the write hold taken just above is ours and released once.
    unsafe { l.raw_write_unlock() };
    assert!(free());
    assert_eq!(l.lock_seq(), seq + 8, "four write epochs: two raw, two of `free`");

    // The raw semaphore itself.
    let raw = l.mmap_lock();
    raw.read();
    // SAFETY: the read hold taken just above is ours and released once.
    unsafe { raw.read_unlock() };
    raw.write();
    // SAFETY: the write hold taken just above is ours; then the read hold the downgrade left, once.
    unsafe {
        raw.downgrade();
        raw.read_unlock();
    }
    assert!(raw.try_write());
    // SAFETY: the write hold `try_write` took is ours and released once.
    unsafe { raw.write_unlock() };
    assert!(free());

    // A VMA read lock given up and re-wrapped once.
    let shared = mm.shared();
    let g = shared.lock_vma_under_rcu(A).expect("mapped, not write-locked");
    let refs = g.refcnt();
    let raw_vma = g.into_raw();
    assert_eq!(raw_vma.refcnt(), refs, "into_raw keeps the read lock");
    // SAFETY: `raw_vma`'s read lock was given up by `into_raw` just above and is re-wrapped once.
    drop(unsafe { vmspace_mm::VmaReadGuard::from_raw(raw_vma) });
    assert_eq!(raw_vma.refcnt(), refs - 1);
    mm.munmap(A, P).unwrap();
    mm.validate().unwrap();
}
