//! The speculative fault (`space::fault`, "Speculative faults": a VMA copied without a reference, validated by
//! its write count under the PTE lock) against the calls that change the very VMA it faults in.
//!
//! Fault threads fault pages of one shared region in, over and over (writes and reads, each page emptied
//! again by `MADV_DONTNEED`, which leaves the PTE tables in place, so that most faults take the speculative
//! path), while a mutator thread, in a loop, `mprotect`s the region read-only and back, unmaps it and maps it
//! again, moves it away with `mremap` and back, and forks. Right after each call returns it checks what the
//! call promises, whatever faults were in flight when it began:
//! - after `mprotect(PROT_READ)`: no entry of the region is writable (a fault that copied the VMA before the
//!   change must not install a writable page after it);
//! - after `munmap` and after `mremap` moved the region away: no entry at all in the old range (a fault in
//!   flight must not map a page where no VMA is);
//! - after `fork`: the child validates (every entry within a VMA, within its rights).
//!
//! Afterwards the address space validates and the memory's accounting is exact (`Mm::check_memory`: no frame
//! leaked by a fault that gave up, none mapped twice). The counters must show speculative faults and
//! fallbacks both (the race was run). Iterations: `VMSPACE_SPECULATIVE_ROUNDS` mutator rounds (default 100; each
//! round is the five calls).
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use vmspace_mm::{Access, Advice, Errno, MapFlags, Memory, MemoryConfig, Mm, MmConfig, MremapFlags, Prot};

const P: u64 = 4096;
/// The region: 3 PTE tables' worth (1,536 pages), 2 MiB-aligned, so that calls cross table boundaries.
const R: u64 = 0x3000_0000_0000;
const PAGES: u64 = 1536;
/// Where `mremap` moves the region and back from.
const AWAY: u64 = 0x3100_0000_0000;
const FAULTERS: u64 = 2;

fn rounds() -> u64 {
    std::env::var("VMSPACE_SPECULATIVE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(100)
}

/// Faults pages of the region in until `stop`: a write fault or a read fault per page, in a stride of its own;
/// every few pages it empties a batch again. Any answer is acceptable (the region may be read-only, unmapped
/// or moved); the mutator checks the outcome.
fn faulter(mm: &Mm, t: u64, stop: &AtomicBool, faults: &AtomicU64) {
    let mut i = t * 7919;
    let mut n = 0u64;
    // Relaxed: a stop flag.
    while !stop.load(Ordering::Relaxed) {
        i = i.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let page = (i >> 33) % PAGES;
        let a = R + page * P;
        let access = if i & 1 == 0 { Access::Write } else { Access::Read };
        if mm.fault(a, access).is_ok() {
            n += 1;
            if n <= WARM_FAULTS {
                // Relaxed: a progress count the mutator waits for; nothing is published through it.
                faults.fetch_add(1, Ordering::Relaxed);
            }
        }
        if n % 64 == 63 {
            let from = R + ((i >> 40) % (PAGES - 64)) * P;
            let _ = mm.madvise(from, 64 * P, Advice::DONTNEED);
        }
    }
    // Relaxed: read after the join.
    faults.fetch_add(n.saturating_sub(WARM_FAULTS), Ordering::Relaxed);
}

/// Faults each faulter counts at once (the rest at its end), so that the mutator starts only once every faulter
/// runs: on a busy machine the faulters may otherwise not be scheduled before the mutator's rounds are over.
const WARM_FAULTS: u64 = 16;

/// The entries of `[start, start + PAGES * P)`: `(present, writable)` for each.
fn entries(mm: &Mm, start: u64) -> impl Iterator<Item = (u64, bool, bool)> + '_ {
    let pt = mm.page_table();
    (0..PAGES).map(move |p| {
        let a = start + p * P;
        let e = pt.pte(a);
        (a, e.is_present(), e.is_present() && e.is_write())
    })
}

fn mutator(mm: &Mm, rounds: u64) {
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    for round in 0..rounds {
        // Let faults land between the calls.
        std::thread::yield_now();
        mm.mprotect(R, PAGES * P, Prot::READ).unwrap();
        for (a, _, w) in entries(mm, R) {
            assert!(!w, "round {round}: a writable entry at {a:#x} after mprotect(PROT_READ)");
        }
        mm.mprotect(R, PAGES * P, Prot::RW).unwrap();
        std::thread::yield_now();
        mm.munmap(R, PAGES * P).unwrap();
        for (a, present, _) in entries(mm, R) {
            assert!(!present, "round {round}: an entry at {a:#x} after munmap");
        }
        assert_eq!(mm.fault(R, Access::Write), Err(Errno::EFAULT));
        assert_eq!(mm.mmap(R, PAGES * P, Prot::RW, fixed, None, 0), Ok(R));
        // The anon_vma first (a fault under the locks), so that the faulters' next faults may be speculative.
        mm.write(R, &[1]).unwrap();
        std::thread::yield_now();
        let flags = MremapFlags::MAYMOVE | MremapFlags::FIXED;
        assert_eq!(mm.mremap(R, PAGES * P, PAGES * P, flags, AWAY), Ok(AWAY));
        for (a, present, _) in entries(mm, R) {
            assert!(!present, "round {round}: an entry at {a:#x} after mremap moved the range away");
        }
        assert_eq!(mm.mremap(AWAY, PAGES * P, PAGES * P, flags, R), Ok(R));
        std::thread::yield_now();
        if round % 8 == 0 {
            let child = mm.fork().unwrap();
            child.validate().unwrap();
            drop(child);
        }
    }
}

#[test]
fn speculative_faults_vs_mprotect_munmap_mremap_fork() {
    let mm = Mm::with_memory(MmConfig::default(), Memory::new(MemoryConfig::default()));
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    assert_eq!(mm.mmap(R, PAGES * P, Prot::RW, fixed, None, 0), Ok(R));
    mm.write(R, &[1]).unwrap();
    let before = mm.fault_stats();
    let stop = AtomicBool::new(false);
    let faults = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..FAULTERS {
            let (mm, stop, faults) = (&mm, &stop, &faults);
            s.spawn(move || faulter(mm, t, stop, faults));
        }
        /// Stops the fault threads however the mutator ends (a failed check must not leave them running).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                // Relaxed: a stop flag; the scope's joins publish the threads' work.
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        let waiting = std::time::Instant::now();
        // Relaxed: a progress count (above).
        while faults.load(Ordering::Relaxed) < FAULTERS * WARM_FAULTS
            && waiting.elapsed() < std::time::Duration::from_secs(30)
        {
            std::thread::yield_now();
        }
        mutator(&mm, rounds());
    });
    mm.validate().unwrap();
    Mm::check_memory(&[&mm], &[]).unwrap();
    let after = mm.fault_stats();
    // The speculative faults are counted as `vma_lock_success` without a lookup of the lock's own statistics,
    // which counts the faults that fell back to `lock_vma_under_rcu`.
    let lookups = mm.shared().locking.stats().snapshot();
    let successes = after.vma_lock.success - before.vma_lock.success;
    eprintln!(
        "{} faults resolved; vma_lock_success {successes}, lock_vma_under_rcu {lookups:?}; {:?}",
        faults.load(Ordering::Relaxed),
        after.faults
    );
    assert!(faults.load(Ordering::Relaxed) > 0);
    assert!(successes > lookups.success, "some faults were speculative: {successes} vs {lookups:?}");
}
