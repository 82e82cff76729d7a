//! Readers against a writer on a real address space: reader threads look VMAs up by address with
//! `lock_vma_under_rcu` through the VMA tree while the writer maps, unmaps, mprotects, mremaps and faults in
//! the same small region (so VMAs are split, merged, detached and recycled through the pool all the time). A
//! reader must never get a VMA that does not cover its address or that belongs to another mm; and the writer's
//! address space stays valid (`validate`: the tree is exact, every VMA in it attached and of this mm).
//!
//! A second test checks the writer's store order: in a block that stays mapped throughout (only mprotect,
//! madvise, anon names and faults touch it, which split and merge VMAs but never unmap), a lock-free tree
//! lookup must always find a VMA. A primitive that erased a VMA's old range before its neighbour took the range
//! over would show readers a false gap.
//!
//! Iterations: `VMSPACE_STRESS_OPS` (default 20,000 writer calls).
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vmspace_mm::Access;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_mm::space::{Advice, MapFlags, MremapFlags, Prot};
use vmspace_mm::space::{Mm, MmConfig};

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const PAGES: u64 = 64;

/// Waits until `n` reader threads have started (on a busy machine they may start after a short writer run
/// would have ended, and the test would then check nothing).
fn wait_for(started: &AtomicU64, n: u64) {
    // Relaxed: a start signal only.
    while started.load(Ordering::Relaxed) < n {
        std::thread::yield_now();
    }
}

#[test]
fn readers_never_see_a_wrong_vma() {
    let ops: u64 = std::env::var("VMSPACE_STRESS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let mm = Mm::new(MmConfig::default());
    // A second address space whose VMAs recycle through the same pool.
    let other = Mm::new(MmConfig::default());
    let shared = mm.shared();
    let stop = Arc::new(AtomicBool::new(false));
    let found = Arc::new(AtomicU64::new(0));
    let started = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let shared = shared.clone();
            let stop = stop.clone();
            let found = found.clone();
            let started = started.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let mut n = 0u64;
                // Relaxed: a start signal; nothing is published through it.
                started.fetch_add(1, Ordering::Relaxed);
                // Ordering: Relaxed: a stop flag; nothing is published through it. A reader goes on until it
                // has found one VMA (the writer leaves the region mapped when it stops).
                while !stop.load(Ordering::Relaxed) || n == 0 {
                    let addr = B + rng.random_range(0..PAGES) * P + rng.random_range(0..P);
                    if let Some(g) = shared.lock_vma_under_rcu(addr) {
                        let v = g.vma();
                        assert!(v.start() <= addr && addr < v.end(), "VMA {v:?} does not cover {addr:#x}");
                        assert_eq!(v.mm_id(), shared.locking.id(), "VMA of another mm: {v:?}");
                        n += 1;
                    }
                }
                // Ordering: Relaxed: a statistic read after join.
                found.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    wait_for(&started, 2);
    let mut rng = SmallRng::seed_from_u64(42);
    let prots = [Prot::READ, Prot::RW, Prot::NONE, Prot::RX];
    for i in 0..ops {
        let a = B + rng.random_range(0..PAGES) * P;
        let len = rng.random_range(1..8) * P;
        let prot = prots[rng.random_range(0..prots.len())];
        let af = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        let _ = match rng.random_range(0..6) {
            0 | 1 => mm.mmap(a, len, prot, af, None, 0).map(|_| ()),
            2 => mm.munmap(a, len),
            3 => mm.mprotect(a, len, prot),
            4 => mm.mremap(a, len, len + P, MremapFlags::MAYMOVE, 0).map(|_| ()),
            _ => mm.fault(a, Access::Write).map(|_| ()),
        };
        if i % 7 == 0 {
            let _ = other.mmap(a, len, prot, af, None, 0);
            let _ = other.munmap(B + rng.random_range(0..PAGES) * P, len);
        }
        if i % 64 == 0 {
            mm.validate().unwrap_or_else(|e| panic!("after {i} calls: {e}"));
        }
    }
    // The readers' last lookups find the whole region mapped.
    mm.mmap(B, PAGES * P, Prot::READ, MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED, None, 0)
        .unwrap();
    // Ordering: Relaxed: see the readers.
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader panicked");
    }
    mm.validate().unwrap();
    other.validate().unwrap();
    // Ordering: Relaxed: the readers were joined.
    assert!(found.load(Ordering::Relaxed) > 0, "readers never found a VMA");
}

#[test]
fn readers_never_see_a_false_gap() {
    let ops: u64 = std::env::var("VMSPACE_STRESS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let mm = Mm::new(MmConfig { anon_vma_name: true, ..MmConfig::default() });
    let af = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    mm.mmap(B, PAGES * P, Prot::READ | Prot::WRITE, af, None, 0).unwrap();
    let shared = mm.shared();
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let started = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let shared = shared.clone();
            let stop = stop.clone();
            let lookups = lookups.clone();
            let started = started.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(100 + t);
                let mut n = 0u64;
                // Relaxed: a start signal; nothing is published through it.
                started.fetch_add(1, Ordering::Relaxed);
                // Ordering: Relaxed: a stop flag; nothing is published through it. At least one lookup each.
                while !stop.load(Ordering::Relaxed) || n == 0 {
                    let addr = B + rng.random_range(0..PAGES * P);
                    assert!(shared.tree().load(addr).is_some(), "false gap at {addr:#x}");
                    n += 1;
                }
                // Ordering: Relaxed: a statistic read after join.
                lookups.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    wait_for(&started, 2);
    let mut rng = SmallRng::seed_from_u64(7);
    let prots = [Prot::READ, Prot::RW, Prot::NONE, Prot::RX];
    let names = [None, Some("a"), Some("b")];
    for i in 0..ops {
        let a = B + rng.random_range(0..PAGES) * P;
        let len = rng.random_range(1..(B + PAGES * P - a) / P + 1).min(12) * P;
        let _ = match rng.random_range(0..5) {
            0 | 1 => mm.mprotect(a, len, prots[rng.random_range(0..prots.len())]),
            2 => mm.madvise(a, len, if rng.random_bool(0.5) { Advice::DONTFORK } else { Advice::DOFORK }),
            3 => mm.set_anon_name(a, len, names[rng.random_range(0..names.len())]),
            _ => mm.fault(a, Access::Write).map(|_| ()),
        };
        if i % 64 == 0 {
            mm.validate().unwrap_or_else(|e| panic!("after {i} calls: {e}"));
            assert_eq!(mm.find_intersection(B, B + PAGES * P).map(|v| v.start()), Some(B));
        }
    }
    // Ordering: Relaxed: see the readers.
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader panicked");
    }
    mm.validate().unwrap();
    let covered: u64 = mm.areas().map(|v| v.end() - v.start()).sum();
    assert_eq!(covered, PAGES * P, "the block stayed mapped");
    // Ordering: Relaxed: the readers were joined.
    assert!(lookups.load(Ordering::Relaxed) > 0);
}
