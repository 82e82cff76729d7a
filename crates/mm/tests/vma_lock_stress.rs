//! Stress test of the per-VMA lock protocol on a real maple tree.
//!
//! One writer thread maps, unmaps, splits, shrinks and recycles VMAs of mm A in an arena (and sometimes hands
//! the freed VMAs at once to mm B's tree), following the writer protocol of `vmspace_mm::vma`. Reader threads
//! lock VMAs by address with `lock_vma_under_rcu` (falling back to the mmap read lock), and also retry stale
//! VMA pointers they saw earlier with `vma_start_read`. Every VMA a reader holds must:
//!
//! - belong to mm A and cover the address (for lookups by address);
//! - be internally consistent: the writer encodes each VMA's range into its pgoff and flags, so a torn or stale
//!   view of a VMA under a read lock shows up as a mismatch;
//! - stay unchanged for as long as the read lock is held (the reader re-reads it after a pause);
//! - be attached (refcount >= 2 while held).
//!
//! A third reader scans the arena as `/proc/PID/maps` does in per-VMA mode (`lock_next_vma` from the end of the
//! last VMA reported): each VMA reported must end after the previous one (positions never go backwards; a VMA
//! that grew may legitimately be reported again), and three sentinel VMAs that the writer never touches
//! (before, inside and after the arena) must be reported by every scan (no false gap).
//!
//! At the end every VMA is unmapped and the pool must have no VMA in use (no leak). The run lasts
//! `VMSPACE_STRESS_MS` milliseconds (default 2000).
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use vmspace_maple::MapleTree;
use vmspace_mm::vma::{
    MmLocking, PAGE_SIZE, VmFlags, Vma, VmaPool, lock_next_vma, lock_vma_under_rcu, vma_mark_attached,
    vma_mark_detached, vma_start_read, vma_start_read_locked, vma_start_write,
};

const ARENA: u64 = 0x7000_0000_0000;
const SLOTS: u64 = 48;
const SLOT_PAGES: u64 = 8;
const ARENA_END: u64 = ARENA + SLOTS * SLOT_PAGES * PAGE_SIZE;
/// The slot held by the middle sentinel for the whole run.
const SENTINEL_SLOT: u64 = SLOTS / 2;
/// The three sentinel ranges.
const SENTINELS: [(u64, u64); 3] = [
    (ARENA - 2 * PAGE_SIZE, ARENA - PAGE_SIZE),
    (
        ARENA + SENTINEL_SLOT * SLOT_PAGES * PAGE_SIZE,
        ARENA + SENTINEL_SLOT * SLOT_PAGES * PAGE_SIZE + PAGE_SIZE,
    ),
    (ARENA_END + PAGE_SIZE, ARENA_END + 2 * PAGE_SIZE),
];

/// The pgoff the writer gives a VMA over `[start, end)`: both bounds folded in, so that a reader can check a
/// VMA's fields against each other.
fn stamp(start: u64, end: u64) -> u64 {
    (start >> 12) ^ ((end >> 12) << 20)
}

/// Flags carrying the VMA's length in pages in the high (unnamed) bits, plus ordinary access bits.
fn flags_for(start: u64, end: u64) -> VmFlags {
    VmFlags::READ
        | VmFlags::WRITE
        | VmFlags::MAYREAD
        | VmFlags::MAYWRITE
        | VmFlags::from_bits(((end - start) >> 12) << 48)
}

fn consistent(v: &Vma) -> bool {
    let (s, e) = (v.start(), v.end());
    s < e && v.pgoff() == stamp(s, e) && v.flags() == flags_for(s, e)
}

struct Space {
    mm: MmLocking,
    tree: MapleTree<&'static Vma>,
    /// Writer-private shadow: the mapped VMAs, by start.
    mapped: parking_lot::Mutex<Vec<&'static Vma>>,
}

impl Space {
    fn new() -> Self {
        Self { mm: MmLocking::new(), tree: MapleTree::new(), mapped: parking_lot::Mutex::new(Vec::new()) }
    }

    /// Maps a fresh VMA over `[s, e)` (which must be free).
    fn map(&self, pool: &VmaPool, s: u64, e: u64) {
        let v = self.map_untracked(pool, s, e);
        self.mapped.lock().push(v);
    }

    /// Maps a VMA the writer's random operations never pick (a sentinel).
    fn map_untracked(&self, pool: &VmaPool, s: u64, e: u64) -> &'static Vma {
        let mm = &self.mm;
        let v = pool.alloc(mm).expect("alloc");
        let _w = mm.write_lock();
        v.set_range(mm, s, e);
        v.set_pgoff(mm, stamp(s, e));
        v.set_flags(mm, flags_for(s, e));
        vma_start_write(mm, v);
        vma_mark_attached(mm, v);
        self.tree.insert_range(s, e - 1, v).expect("insert");
        v
    }

    /// Unmaps `v` entirely and frees it to the pool.
    fn unmap(&self, pool: &VmaPool, v: &'static Vma) {
        let mm = &self.mm;
        {
            let _w = mm.write_lock();
            vma_start_write(mm, v);
            self.tree.store_range(v.start(), v.end() - 1, None).expect("erase");
            vma_mark_detached(mm, v);
        }
        self.mapped.lock().retain(|x| !std::ptr::eq(*x, v));
        pool.free(v);
    }

    /// Replaces `v` by two new VMAs split at `mid`, then frees `v`.
    fn split(&self, pool: &VmaPool, v: &'static Vma, mid: u64) {
        let mm = &self.mm;
        // Allocate before the point of no return.
        let lo = pool.alloc(mm).expect("alloc");
        let hi = pool.alloc(mm).expect("alloc");
        {
            let _w = mm.write_lock();
            vma_start_write(mm, v);
            let (s, e) = (v.start(), v.end());
            for (n, a, b) in [(lo, s, mid), (hi, mid, e)] {
                n.set_range(mm, a, b);
                n.set_pgoff(mm, stamp(a, b));
                n.set_flags(mm, flags_for(a, b));
                vma_start_write(mm, n);
                vma_mark_attached(mm, n);
                self.tree.store_range(a, b - 1, Some(n)).expect("store");
            }
            vma_mark_detached(mm, v);
        }
        let mut m = self.mapped.lock();
        m.retain(|x| !std::ptr::eq(*x, v));
        m.push(lo);
        m.push(hi);
        drop(m);
        pool.free(v);
    }

    /// Shrinks `v` in place to `[start, new_end)`.
    fn shrink(&self, v: &'static Vma, new_end: u64) {
        let mm = &self.mm;
        let _w = mm.write_lock();
        vma_start_write(mm, v);
        let (s, e) = (v.start(), v.end());
        self.tree.store_range(new_end, e - 1, None).expect("erase tail");
        v.set_end(mm, new_end);
        v.set_pgoff(mm, stamp(s, new_end));
        v.set_flags(mm, flags_for(s, new_end));
    }

    fn teardown(&self, pool: &VmaPool) {
        let all: Vec<_> = self.mapped.lock().clone();
        for v in all {
            self.unmap(pool, v);
        }
        assert!(self.tree.is_empty());
    }
}

fn free_run(a: &Space, slot: u64) -> Option<(u64, u64)> {
    let s = ARENA + slot * SLOT_PAGES * PAGE_SIZE;
    let e = s + SLOT_PAGES * PAGE_SIZE;
    let g = vmspace_rcu::pin();
    (a.tree.find_in(s, e - 1, &g).is_none()).then_some((s, e))
}

#[test]
fn readers_lock_by_address_while_writer_maps_unmaps_and_recycles() {
    let ms: u64 = std::env::var("VMSPACE_STRESS_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let pool = VmaPool::leak_new();
    let a = Arc::new(Space::new());
    let b = Arc::new(Space::new());
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let stale_hits = Arc::new(AtomicU64::new(0));
    let sentinels: Vec<&'static Vma> = SENTINELS.iter().map(|&(s, e)| a.map_untracked(pool, s, e)).collect();
    let scans = Arc::new(AtomicU64::new(0));
    let scanner = {
        let (a, stop, scans) = (a.clone(), stop.clone(), scans.clone());
        std::thread::spawn(move || {
            let mm = &a.mm;
            while !stop.load(Ordering::Relaxed) {
                let mut from = ARENA - 4 * PAGE_SIZE;
                let mut found = [false; 3];
                while let Some(g) = lock_next_vma(mm, &a.tree, from).expect("lock_next_vma") {
                    assert!(g.end() > from, "VMA {:?} ends at or before {from:#x}", g.vma());
                    assert_eq!(g.mm_id(), mm.id());
                    assert!(consistent(&g), "torn VMA in scan: {:?}", g.vma());
                    for (i, &(s, e)) in SENTINELS.iter().enumerate() {
                        if (g.start(), g.end()) == (s, e) {
                            found[i] = true;
                        }
                    }
                    from = g.end();
                }
                assert_eq!(found, [true; 3], "a VMA present for the whole scan was not reported (false gap)");
                scans.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (a, stop, checked, stale_hits) =
                (a.clone(), stop.clone(), checked.clone(), stale_hits.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x5eed + t);
                let mut seen: Vec<&'static Vma> = Vec::new();
                let mm = &a.mm;
                while !stop.load(Ordering::Relaxed) {
                    let addr = rng.random_range(ARENA..ARENA_END) & !(PAGE_SIZE - 1);
                    if let Some(g) = lock_vma_under_rcu(mm, &a.tree, addr) {
                        assert_eq!(g.mm_id(), mm.id(), "VMA of another mm returned");
                        assert!(g.contains(addr), "VMA {:?} does not cover {addr:#x}", g.vma());
                        assert!(consistent(&g), "torn VMA under read lock: {:?}", g.vma());
                        assert!(g.refcnt() >= 2);
                        let before = g.snapshot();
                        for _ in 0..rng.random_range(0..50) {
                            std::hint::spin_loop();
                        }
                        assert_eq!(before, g.snapshot(), "VMA changed under its read lock");
                        if seen.len() < 64 {
                            seen.push(g.vma());
                        } else {
                            let i = rng.random_range(0..seen.len());
                            seen[i] = g.vma();
                        }
                        checked.fetch_add(1, Ordering::Relaxed);
                    } else {
                        // Fall back to the mmap read lock, as the fault path does.
                        let _r = mm.read_lock();
                        if let Some(v) = a.tree.load(addr) {
                            let g = vma_start_read_locked(v).expect("locked read under mmap_lock");
                            assert!(g.contains(addr));
                            assert_eq!(g.mm_id(), mm.id());
                            assert!(consistent(&g));
                        }
                    }
                    // A stale pointer: it may have been freed, recycled to mm B, or reused in mm A elsewhere.
                    if !seen.is_empty() {
                        let v = seen[rng.random_range(0..seen.len())];
                        if let Ok(g) = vma_start_read(mm, v) {
                            assert_eq!(g.mm_id(), mm.id());
                            assert!(
                                consistent(&g),
                                "stale VMA locked in an inconsistent state: {:?}",
                                g.vma()
                            );
                            stale_hits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();

    let mut rng = SmallRng::seed_from_u64(7);
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut ops = 0u64;
    while Instant::now() < deadline {
        ops += 1;
        let slot = rng.random_range(0..SLOTS);
        let pick = |sp: &Space, rng: &mut SmallRng| {
            let m = sp.mapped.lock();
            (!m.is_empty()).then(|| m[rng.random_range(0..m.len())])
        };
        match rng.random_range(0..10) {
            0..=3 => {
                if let Some((s, e)) = free_run(&a, slot) {
                    a.map(pool, s, e);
                }
            }
            4 | 5 => {
                if let Some(v) = pick(&a, &mut rng) {
                    a.unmap(pool, v);
                }
            }
            6 | 7 => {
                if let Some(v) = pick(&a, &mut rng) {
                    let pages = (v.end() - v.start()) / PAGE_SIZE;
                    if pages >= 2 {
                        let mid = v.start() + rng.random_range(1..pages) * PAGE_SIZE;
                        a.split(pool, v, mid);
                    }
                }
            }
            8 => {
                if let Some(v) = pick(&a, &mut rng) {
                    let pages = (v.end() - v.start()) / PAGE_SIZE;
                    if pages >= 2 {
                        a.shrink(v, v.start() + rng.random_range(1..pages) * PAGE_SIZE);
                    }
                }
            }
            _ => {
                // Recycle into mm B: the VMAs just freed by mm A are handed out at once.
                if let Some((s, e)) = free_run(&b, slot) {
                    b.map(pool, s, e);
                }
                if rng.random_bool(0.5)
                    && let Some(v) = pick(&b, &mut rng)
                {
                    b.unmap(pool, v);
                }
            }
        }
        if ops.is_multiple_of(64) {
            std::thread::yield_now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader panicked");
    }
    scanner.join().expect("scanner panicked");
    for v in sentinels {
        a.unmap(pool, v);
    }
    a.tree.validate().expect("tree A valid");
    a.teardown(pool);
    b.teardown(pool);
    let st = pool.stats();
    assert_eq!(st.in_use, 0, "leaked VMAs: {st:?}");
    let counts = a.mm.stats().snapshot();
    let checked = checked.load(Ordering::Relaxed);
    eprintln!(
        "stress: {ops} writer ops, {checked} locked lookups, {} stale re-locks, {} maps scans, pool {st:?}, \
         counters {counts:?}",
        stale_hits.load(Ordering::Relaxed),
        scans.load(Ordering::Relaxed)
    );
    assert!(scans.load(Ordering::Relaxed) > 0, "scanner made no progress");
    assert!(ops > 100, "writer made no progress");
    assert!(checked > 100, "readers made no progress");
    assert_eq!(counts.success, checked);
}
