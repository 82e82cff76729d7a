//! fork's bulk write lock of the parent's VMAs (`vma::lock`, "Bulk write lock"; `space::fork`) against
//! threads that read-lock those VMAs and fault in them while the parent forks, again and again.
//!
//! The parent has `VMAS` single-page VMAs that cannot merge (a page-sized hole between two). Even VMAs are
//! "stable": written once before the threads start, never again. Odd VMAs are "live": fault threads write them
//! over and over (write faults, most of them speculative since their PTE tables stay in place) and empty them
//! again with `MADV_DONTNEED`. Beside them, reader threads take VMA read locks (`lock_vma_under_rcu`) of live
//! VMAs and hold each for a while: a fork that starts meanwhile must wait for the holder before it
//! write-protects the VMA's entry (the slow path of the bulk lock). Each holder checks it: an entry present
//! and writable when it took the lock is never found present and write-protected while it holds it (only
//! fork's copy write-protects here, and only under the VMA write lock).
//!
//! After each fork: the child validates; its stable pages hold their bytes; and its live pages hold what they
//! held at fork, whatever the parent's threads write afterwards (read once right after the fork, again after
//! the threads ran on: equal). At the end, the threads stopped and the children gone, the parent validates,
//! its stable pages hold their bytes, and the memory's accounting is exact (`Mm::check_memory`). Iterations: `VMSPACE_FORK_LOCK_ROUNDS` forks (default 60).
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use vmspace_mm::{Access, Advice, MapFlags, Memory, MemoryConfig, Mm, MmConfig, Prot, lock_vma_under_rcu};

const P: u64 = 4096;
const B: u64 = 0x2000_0000_0000;
/// VMAs of the parent (single pages, one page apart): a few PTE tables' worth, many batches of the bulk lock.
const VMAS: u64 = 1200;
const FAULTERS: u64 = 2;
const READERS: u64 = 2;

fn rounds() -> u64 {
    std::env::var("VMSPACE_FORK_LOCK_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(60)
}

/// The address of VMA `i`.
fn addr(i: u64) -> u64 {
    B + 2 * i * P
}

/// The byte of stable VMA `i` (even `i`).
fn stable_byte(i: u64) -> u8 {
    (i % 251 + 1) as u8
}

fn byte(m: &Mm, a: u64) -> u8 {
    let mut b = [0u8];
    m.read(a, &mut b).unwrap_or_else(|f| panic!("read {a:#x}: {f}"));
    b[0]
}

/// A simple generator of live VMA indexes for thread `t`.
fn next_live(state: &mut u64) -> u64 {
    *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    2 * ((*state >> 33) % (VMAS / 2)) + 1
}

/// Writes live VMAs until `stop`: a write fault per page (a changing byte), and now and then an emptied page.
fn faulter(mm: &Mm, t: u64, stop: &AtomicBool, writes: &AtomicU64) {
    let mut s = t * 7919 + 1;
    let mut n = 0u64;
    // Relaxed: a stop flag.
    while !stop.load(Ordering::Relaxed) {
        let a = addr(next_live(&mut s));
        mm.write(a, &[(n % 255 + 1) as u8]).unwrap_or_else(|f| panic!("write {a:#x}: {f}"));
        n += 1;
        if n.is_multiple_of(16) {
            mm.madvise(a, P, Advice::DONTNEED).unwrap();
        }
    }
    // Relaxed: read after the join.
    writes.fetch_add(n, Ordering::Relaxed);
}

/// Read-locks live VMAs until `stop`, holding each across a few yields and faulting its page in under the
/// lock's cover; checks that no write protection lands on its entry while it holds the lock (module docs).
fn reader(mm: &Mm, t: u64, stop: &AtomicBool, held: &AtomicU64) {
    let shared = mm.shared();
    let mut s = t * 104729 + 3;
    let mut n = 0u64;
    // Relaxed: a stop flag.
    while !stop.load(Ordering::Relaxed) {
        let a = addr(next_live(&mut s));
        let Some(g) = lock_vma_under_rcu(&shared.locking, &*shared, a) else {
            // Write-locked (a fork is running): try another.
            std::thread::yield_now();
            continue;
        };
        assert!(g.contains(a), "the locked VMA does not cover {a:#x}");
        let before = mm.page_table().pte(a);
        for _ in 0..4 {
            std::thread::yield_now();
        }
        let after = mm.page_table().pte(a);
        // The same page made read-only is a write protection; another page read-only is a faulter's
        // MADV_DONTNEED (allowed under the read lock) followed by another reader's read fault mapping the zero
        // page.
        assert!(
            !(before.is_present()
                && before.is_write()
                && after.is_present()
                && !after.is_write()
                && after.pfn() == before.pfn()),
            "{a:#x} write-protected while its VMA was read-locked"
        );
        drop(g);
        // A fault of its own (read: maps the page or the zero page; the VMA lock again, or speculative).
        let _ = mm.fault(a, Access::Read);
        n += 1;
    }
    // Relaxed: read after the join.
    held.fetch_add(n, Ordering::Relaxed);
}

#[test]
fn fork_while_vmas_are_read_locked_and_faulted() {
    let mm = Mm::with_memory(MmConfig::default(), Memory::new(MemoryConfig::default()));
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    for i in 0..VMAS {
        mm.mmap(addr(i), P, Prot::RW, fixed, None, 0).unwrap();
        // Every VMA gets its anon_vma and page; live ones start at 0x80.
        mm.write(addr(i), &[if i % 2 == 0 { stable_byte(i) } else { 0x80 }]).unwrap();
    }
    assert_eq!(mm.map_count(), VMAS);
    let stop = AtomicBool::new(false);
    let (writes, held) = (AtomicU64::new(0), AtomicU64::new(0));
    let rounds = rounds();
    std::thread::scope(|sc| {
        for t in 0..FAULTERS {
            let (mm, stop, writes) = (&mm, &stop, &writes);
            sc.spawn(move || faulter(mm, t, stop, writes));
        }
        for t in 0..READERS {
            let (mm, stop, held) = (&mm, &stop, &held);
            sc.spawn(move || reader(mm, t, stop, held));
        }
        // Stop the threads on a panic of the forker too, so that the scope ends.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                // Relaxed: a stop flag.
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        for round in 0..rounds {
            let child = mm.fork().unwrap();
            child.validate().unwrap_or_else(|e| panic!("round {round}: child: {e}"));
            assert_eq!(child.map_count(), VMAS);
            let live: Vec<u8> = (0..VMAS / 2).map(|k| byte(&child, addr(2 * k + 1))).collect();
            // Let the parent's threads write on before the child is read again.
            for _ in 0..20 {
                std::thread::yield_now();
            }
            for i in 0..VMAS {
                let b = byte(&child, addr(i));
                if i % 2 == 0 {
                    assert_eq!(b, stable_byte(i), "round {round}: stable VMA {i} in the child");
                } else {
                    assert_eq!(b, live[(i / 2) as usize], "round {round}: live VMA {i} changed in the child");
                }
            }
        }
    });
    mm.validate().unwrap();
    for i in (0..VMAS).step_by(2) {
        assert_eq!(byte(&mm, addr(i)), stable_byte(i), "stable VMA {i} in the parent");
    }
    Mm::check_memory(&[&mm], &[]).unwrap();
    // Relaxed: the threads were joined.
    let (w, h) = (writes.load(Ordering::Relaxed), held.load(Ordering::Relaxed));
    assert!(w > 0 && h > 0, "the threads ran ({w} writes, {h} read locks held)");
}
