//! Readers against a writer on a real address space: reader threads look VMAs up by address with
//! `lock_vma_under_rcu` through the published tree while the writer maps, unmaps, mprotects, mremaps and
//! faults in the same small region (so VMAs are split, merged, detached and recycled through the pool all the
//! time). A reader must never get a VMA that does not cover its address or that belongs to another mm; and the
//! writer's address space stays valid (model and published tree agree) after every call.
//!
//! Iterations: `VMSPACE_STRESS_OPS` (default 20,000 writer calls).
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_mm::space::flags::*;
use vmspace_mm::space::{Mm, MmConfig};
use vmspace_mm::vma::lock_vma_under_rcu;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const PAGES: u64 = 64;

#[test]
fn readers_never_see_a_wrong_vma() {
    let ops: u64 = std::env::var("VMSPACE_STRESS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let mut mm = Mm::new(MmConfig::default());
    // A second address space whose VMAs recycle through the same pool.
    let mut other = Mm::new(MmConfig::default());
    let shared = mm.shared();
    let stop = Arc::new(AtomicBool::new(false));
    let found = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let shared = shared.clone();
            let stop = stop.clone();
            let found = found.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let mut n = 0u64;
                // Ordering: Relaxed: a stop flag; nothing is published through it.
                while !stop.load(Ordering::Relaxed) {
                    let addr = B + rng.random_range(0..PAGES) * P + rng.random_range(0..P);
                    if let Some(g) = lock_vma_under_rcu(&shared.locking, &*shared, addr) {
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
    let mut rng = SmallRng::seed_from_u64(42);
    let prots = [PROT_READ, PROT_READ | PROT_WRITE, 0, PROT_READ | PROT_EXEC];
    for i in 0..ops {
        let a = B + rng.random_range(0..PAGES) * P;
        let len = rng.random_range(1..8) * P;
        let prot = prots[rng.random_range(0..prots.len())];
        let af = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
        let _ = match rng.random_range(0..6) {
            0 | 1 => mm.mmap(a, len, prot, af, None, 0).map(|_| ()),
            2 => mm.munmap(a, len),
            3 => mm.mprotect(a, len, prot),
            4 => mm.mremap(a, len, len + P, MREMAP_MAYMOVE, 0).map(|_| ()),
            _ => mm.fault(a, true),
        };
        if i % 7 == 0 {
            let _ = other.mmap(a, len, prot, af, None, 0);
            let _ = other.munmap(B + rng.random_range(0..PAGES) * P, len);
        }
        if i % 64 == 0 {
            mm.validate().unwrap_or_else(|e| panic!("after {i} calls: {e}"));
        }
    }
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
