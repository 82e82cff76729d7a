//! Threads sharing one address space: fault threads write patterns into their own regions and read them back
//! while another thread maps, unmaps, mprotects, mremaps, advises and forks in the holes between the regions
//! (its mappings merge with the regions' VMAs and split off again, so the VMAs the fault threads fault in are
//! write-locked, grown, split and recycled all the time).
//!
//! Checked:
//! - no lost write: every word a fault thread wrote reads back as written, in every round (a fault resolved
//!   against a stale VMA or entry, a table freed under a walker, or a copy-on-write after fork that lost a store
//!   made through the entry being write-protected would show as an older value);
//! - no fault succeeds in unmapped memory: the mutator's range reads and writes as SIGSEGV (EFAULT) after its
//!   munmap and after an mremap moved it away, and a fault thread's accesses to a range never mapped fail;
//! - afterwards the address space validates (no entry outside a VMA, rights within the VMA's) and the memory's
//!   accounting is exact (`Mm::check_memory`: every frame's mapcount and refcount, nothing leaked).
//!
//! Both fault modes run: the per-VMA lock (6.4 and later) and the mmap lock only. Iterations:
//! `VMSPACE_STRESS_ROUNDS` rounds per fault thread (default 1,000).
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_mm::{
    Access, Advice, Errno, FaultMode, MapFlags, Memory, MemoryConfig, Mm, MmConfig, MremapFlags, Prot, VmFile,
};

const P: u64 = 4096;
const B: u64 = 0x3000_0000_0000;
/// Each fault thread's region: `REGION` pages at `B + t * STRIDE`, followed by a hole of `STRIDE - REGION`
/// pages where the mutator works, whose last `NEVER` pages are never mapped.
const REGION: u64 = 16;
const STRIDE: u64 = 64 * P;
const NEVER: u64 = 8;
const THREADS: u64 = 3;
/// Word offsets written in every page.
const OFFSETS: [u64; 3] = [0, 2048, 4088];

fn rounds() -> u64 {
    std::env::var("VMSPACE_STRESS_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

fn word(t: u64, round: u64, page: u64) -> u64 {
    (t << 56) | (round << 16) | page
}

fn region(t: u64) -> u64 {
    B + t * STRIDE
}

/// The hole after region `t` that the mutator may map: `[start, end)`.
fn hole(t: u64) -> (u64, u64) {
    (region(t) + REGION * P, region(t) + STRIDE - NEVER * P)
}

fn fault_thread(mm: &Mm, t: u64, rounds: u64, stop: &AtomicBool, go: &AtomicBool) {
    // Relaxed: a start signal (the mutator is running), nothing published through it.
    while !go.load(Ordering::Relaxed) {
        std::thread::yield_now();
    }
    let base = region(t);
    let mut rng = SmallRng::seed_from_u64(t);
    for round in 1..=rounds {
        for page in 0..REGION {
            for off in OFFSETS {
                let a = base + page * P + off;
                mm.write(a, &word(t, round, page).to_le_bytes())
                    .unwrap_or_else(|f| panic!("write {a:#x}: {f}"));
            }
        }
        for page in 0..REGION {
            for off in OFFSETS {
                let a = base + page * P + off;
                let mut b = [0u8; 8];
                mm.read(a, &mut b).unwrap_or_else(|f| panic!("read {a:#x}: {f}"));
                assert_eq!(
                    u64::from_le_bytes(b),
                    word(t, round, page),
                    "lost write at {a:#x}, round {round}"
                );
            }
        }
        // Memory that is never mapped stays unmapped: every access is SIGSEGV.
        let never = region(t) + STRIDE - NEVER * P + rng.random_range(0..NEVER) * P;
        assert_eq!(mm.fault(never, Access::Read), Err(Errno::EFAULT));
        assert_eq!(mm.write(never, b"x").map_err(|f| f.addr), Err(never));
    }
    // Relaxed: a stop flag; the join publishes everything.
    stop.store(true, Ordering::Relaxed);
}

/// The mutator: one call after another in the holes, each checked.
fn mutator(mm: &Mm, file: &std::sync::Arc<VmFile>, stop: &AtomicBool, go: &AtomicBool) -> u64 {
    let mut rng = SmallRng::seed_from_u64(99);
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let mut calls = 0u64;
    let mut children = Vec::new();
    // Relaxed: a stop flag.
    while !stop.load(Ordering::Relaxed) || calls < 50 {
        let t = rng.random_range(0..THREADS);
        let (hs, he) = hole(t);
        let pages = (he - hs) / P;
        // A range in the hole, often touching the region (so that it merges with the region's VMA).
        let start = if rng.random_bool(0.5) { hs } else { hs + rng.random_range(0..pages / 2) * P };
        let len = rng.random_range(1..=(he - start) / P / 2).max(1) * P;
        match rng.random_range(0..10) {
            0 | 1 => {
                let file_backed = rng.random_bool(0.3);
                let r = if file_backed {
                    mm.mmap(start, len, Prot::RW, MapFlags::PRIVATE | MapFlags::FIXED, Some(file), 0)
                } else {
                    mm.mmap(start, len, Prot::RW, fixed, None, 0)
                };
                assert_eq!(r, Ok(start));
                mm.write(start + len - 8, b"mutator!").expect("just mapped");
            }
            2 => {
                mm.munmap(start, len).unwrap();
                assert_eq!(mm.fault(start, Access::Read), Err(Errno::EFAULT), "a fault in unmapped memory");
                assert_eq!(mm.write(start + len - 1, b"x").map_err(|f| f.addr), Err(start + len - 1));
            }
            3 => {
                // mprotect whatever is mapped there (ENOMEM over a hole, after the VMAs before it).
                let prot = if rng.random_bool(0.5) { Prot::READ } else { Prot::RW };
                let _ = mm.mprotect(start, len, prot);
                if prot == Prot::READ && mm.vma_at(start).is_some() {
                    assert_eq!(
                        mm.write(start, b"x").map_err(|f| f.addr),
                        Err(start),
                        "a write to a read-only page"
                    );
                }
            }
            4 => {
                // mremap a mapped range to the other half of the hole: the source is unmapped afterwards.
                let mid = hs + (pages / 2) * P;
                if start + len <= mid && mm.vma_at(start).is_some_and(|v| v.end >= start + len) {
                    let mut before = [0u8; 8];
                    let readable = mm.read(start, &mut before).is_ok();
                    let flags = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                    if mm.mremap(start, len, len, flags, mid) == Ok(mid) {
                        assert_eq!(
                            mm.read(start, &mut [0u8; 1]).map_err(|f| f.addr),
                            Err(start),
                            "the source moved away"
                        );
                        let mut after = [0u8; 8];
                        if readable {
                            mm.read(mid, &mut after).expect("moved");
                            assert_eq!(after, before, "mremap moved the contents");
                        }
                    }
                }
            }
            5 => {
                let advice = [Advice::DONTNEED, Advice::FREE, Advice::POPULATE_WRITE, Advice::COLD]
                    [rng.random_range(0..4)];
                let _ = mm.madvise(start, len, advice);
            }
            6 => {
                // A read of the hole: mapped or not, never a crash; mapped anonymous memory after DONTNEED
                // reads zeroes or the mutator's bytes.
                let _ = mm.read(start, &mut [0u8; 16]);
            }
            7 if children.len() < 2 && rng.random_bool(0.5) => {
                // fork write-protects every private page the fault threads are writing to.
                children.push(mm.fork().expect("fork"));
            }
            7 if !children.is_empty() => {
                let child: Mm = children.remove(0);
                child.validate().unwrap();
                drop(child);
            }
            _ => {
                let _ = mm.mmap(start, len, Prot::READ, fixed, None, 0);
            }
        }
        calls += 1;
        // Relaxed: a start signal.
        go.store(true, Ordering::Relaxed);
    }
    calls
}

fn run(mode: FaultMode) {
    let mem = Memory::new(MemoryConfig::default());
    let mm = Mm::with_memory(MmConfig { fault_mode: mode, ..MmConfig::default() }, mem);
    let file = VmFile::regular("/vmspace/stress", 1, 64 * P);
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    for t in 0..THREADS {
        mm.mmap(region(t), REGION * P, Prot::RW, fixed, None, 0).unwrap();
    }
    let stops: Vec<AtomicBool> = (0..THREADS).map(|_| AtomicBool::new(false)).collect();
    let all_stopped = AtomicBool::new(false);
    let go = AtomicBool::new(false);
    let n = rounds();
    let calls = std::thread::scope(|s| {
        for t in 0..THREADS {
            let (mm, stop, go) = (&mm, &stops[t as usize], &go);
            s.spawn(move || fault_thread(mm, t, n, stop, go));
        }
        let m = s.spawn(|| mutator(&mm, &file, &all_stopped, &go));
        // Relaxed: stop flags; the scope's joins publish the threads' work.
        while !stops.iter().all(|s| s.load(Ordering::Relaxed)) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        all_stopped.store(true, Ordering::Relaxed);
        m.join().unwrap()
    });
    mm.validate().unwrap();
    Mm::check_memory(&[&mm], &[&file]).unwrap();
    // Every fault thread's last round is still there.
    for t in 0..THREADS {
        let mut b = [0u8; 8];
        mm.read(region(t) + 7 * P + 2048, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), word(t, n, 7));
    }
    let stats = mm.fault_stats();
    eprintln!("{mode:?}: {calls} mutator calls, {stats:?}");
    match mode {
        FaultMode::PerVma => assert!(stats.vma_lock.success > 0, "{stats:?}"),
        // No fault takes a VMA lock (madvise's own lock_vma_under_rcu may count aborts and misses).
        FaultMode::MmapLock => assert_eq!(stats.vma_lock.success + stats.vma_lock.retry, 0, "{stats:?}"),
    }
}

#[test]
fn fault_threads_keep_their_writes_per_vma_lock() {
    run(FaultMode::PerVma);
}

#[test]
fn fault_threads_keep_their_writes_mmap_lock() {
    run(FaultMode::MmapLock);
}

/// `MADV_REMOVE` (a hole punched in the file, under the mmap read lock) against read faults of the same file
/// pages through another mapping: a fault must never map a page the punch is removing from the cache (the
/// punch unmaps and removes under the cache's mutex, which faults hold from lookup to installation), so after
/// each punch a store through one mapping is seen through the other. Afterwards every mapped file page is the
/// cache's page at its index (`validate`), and the accounting is exact. (The window the mutex closes is a few
/// instructions wide: this run rarely hits it; the test holds the semantics, the lock order is argued in
/// `vmspace_pgtable::PageCache::punch_hole`.)
#[test]
fn hole_punch_vs_faults() {
    let mem = Memory::new(MemoryConfig::default());
    let mm = Mm::with_memory(MmConfig::default(), mem);
    let file = VmFile::regular("/vmspace/punch", 1, 8 * P);
    let shared = MapFlags::SHARED | MapFlags::FIXED;
    mm.mmap(B, 8 * P, Prot::RW, shared, Some(&file), 0).unwrap();
    mm.mmap(B + 64 * P, 8 * P, Prot::READ, shared, Some(&file), 0).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..10 * rounds() {
                mm.madvise(B, 8 * P, Advice::REMOVE).unwrap();
                // A store through the first mapping is seen through the second: both map the cache's page (a
                // page the punch dropped but the other thread's fault mapped would keep the old bytes there).
                let page = round % 8;
                let byte = (round % 251) as u8 + 1;
                mm.fill(B + page * P, 16, byte).unwrap();
                let mut b = [0u8; 16];
                mm.read(B + 64 * P + page * P, &mut b).unwrap();
                assert_eq!(b, [byte; 16], "round {round}: the two mappings of the file disagree");
            }
            // Relaxed: a stop flag; the scope's join publishes the rest.
            stop.store(true, Ordering::Relaxed);
        });
        s.spawn(|| {
            let mut i = 0u64;
            // Relaxed: as above.
            while !stop.load(Ordering::Relaxed) {
                let mut b = [0u8; 16];
                mm.read(B + 64 * P + (i % 8) * P, &mut b).unwrap();
                i += 1;
            }
        });
    });
    mm.validate().unwrap();
    Mm::check_memory(&[&mm], &[&file]).unwrap();
}
