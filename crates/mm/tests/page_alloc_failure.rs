//! Page-level allocation failures: every allocation of a fault (frames, contents, page-table pages, page-cache
//! nodes) and of fork (the child's VMAs, tree nodes, top table, tables and frames of the copy) is made to fail
//! in turn, and the call must then fail with ENOMEM having changed and leaked nothing:
//!
//! - a fault that fails leaves every entry, every frame's contents and every page-cache page as they were
//!   (it may leave an empty page table, as the kernel's do; those are not entries), and retrying it without
//!   injection succeeds with the same result as a run that never failed;
//! - a fork that fails leaves the parent's VMAs, entries (but for the write protection of private pages, which
//!   copy-on-write needs and Linux keeps too) and contents as they were, and the child is torn down
//!   completely: no frame, table, VMA or tree node is left over.
//!
//! Each world has a memory and a VMA pool of its own, so the accounting is exact: `Mm::check_memory` (every
//! frame's mapcount and refcount against the entries and page-cache slots of the family) after every attempt,
//! the pool's VMAs in use, and the tree's node domain.
#![cfg(not(loom))]

use std::sync::Arc;

use vmspace_mm::vma::VmaPool;
use vmspace_mm::{
    Access, Advice, Errno, FaultKind, ForkMode, MapFlags, Memory, MemoryConfig, Mm, MmConfig, Prot, VmFile,
};
use vmspace_pgtable::{Bdi, Pte, VA_END, bits};

const P: u64 = 4096;
const B: u64 = 0x2000_0000_0000;
/// Anonymous private, 16 pages: pages 0-3 written, 4-5 read (the zero page), page 8 guarded.
const ANON: u64 = B;
/// The file shared, 16 pages: pages 0-7 written.
const SHARED: u64 = B + 64 * P;
/// The same file private, 16 pages: pages 0-3 read, page 2 written (a copy).
const PRIVATE: u64 = B + 128 * P;
/// Shared anonymous memory, 8 pages: pages 0-1 written.
const SHM: u64 = B + 192 * P;
/// Anonymous private, 4 pages, 1 GiB away from everything else (no page-table page exists there).
const FAR: u64 = B + (1 << 30);

const AF: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

struct World {
    mm: Mm,
    file: Arc<VmFile>,
    mem: Arc<Memory>,
    pool: &'static VmaPool,
}

fn world() -> World {
    let mem = Memory::new(MemoryConfig::default());
    let pool = VmaPool::leak_new();
    let mm = Mm::with_pool_and_memory(MmConfig::default(), pool, mem.clone());
    // No readahead here, so that every allocation a fault makes is its own (readahead's are below).
    let file = Arc::new(VmFile {
        bdi: Bdi { ra_pages: 0, ..Bdi::default() },
        ..(*VmFile::regular("/vmspace/f", 1, 16 * P)).clone()
    });
    mm.mmap(ANON, 16 * P, Prot::RW, AF, None, 0).unwrap();
    for i in 0..4 {
        mm.fill(ANON + i * P, P, 0x10 + i as u8).unwrap();
    }
    mm.read(ANON + 4 * P, &mut [0u8; 8]).unwrap();
    mm.read(ANON + 5 * P, &mut [0u8; 8]).unwrap();
    mm.madvise(ANON + 8 * P, P, Advice::GUARD_INSTALL).unwrap();
    let shared = MapFlags::SHARED | MapFlags::FIXED;
    mm.mmap(SHARED, 16 * P, Prot::RW, shared, Some(&file), 0).unwrap();
    for i in 0..8 {
        mm.fill(SHARED + i * P + 100, 200, 0x40 + i as u8).unwrap();
    }
    mm.mmap(PRIVATE, 16 * P, Prot::RW, MapFlags::PRIVATE | MapFlags::FIXED, Some(&file), 0).unwrap();
    for i in 0..4 {
        mm.read(PRIVATE + i * P, &mut [0u8; 8]).unwrap();
    }
    mm.write(PRIVATE + 2 * P + 7, b"copied").unwrap();
    mm.mmap(SHM, 8 * P, Prot::RW, MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED, None, 0).unwrap();
    mm.fill(SHM, 2 * P, 0x77).unwrap();
    mm.mmap(FAR, 4 * P, Prot::RW, AF, None, 0).unwrap();
    mm.validate().unwrap();
    World { mm, file, mem, pool }
}

/// Everything a user or the memory can see: the maps, every entry (accessed and dirty bits aside, and the
/// write bit too when `ignore_write`) with its page's bytes, and the file's cached pages with theirs.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    maps: String,
    entries: Vec<(u64, u64, Vec<u8>)>,
    cache: Vec<(u64, Vec<u8>)>,
}

fn snapshot(w: &World, ignore_write: bool) -> Snapshot {
    let mut mask = bits::ACCESSED | bits::DIRTY;
    if ignore_write {
        mask |= bits::RW;
    }
    let page = |pfn| {
        let mut b = vec![0u8; P as usize];
        // SAFETY: the snapshot runs with nothing else on the memory, so no frame the page table maps is freed
        // during the read.
        unsafe { w.mem.read_pfn(pfn, 0, &mut b) };
        b
    };
    let entries =
        w.mm.page_table()
            .entries(0, VA_END)
            .into_iter()
            .map(|(a, pte): (u64, Pte)| {
                let bytes = if pte.is_present() { page(pte.pfn()) } else { Vec::new() };
                (a, pte.raw() & !mask, bytes)
            })
            .collect();
    let cache = match w.file.page_cache() {
        Some(c) => c.pages().into_iter().map(|(i, pfn)| (i, page(pfn))).collect(),
        None => Vec::new(),
    };
    Snapshot { maps: w.mm.maps_text(), entries, cache }
}

fn check_memory(family: &[&Mm], w: &World) {
    Mm::check_memory(family, &[&w.file]).unwrap_or_else(|e| panic!("memory accounting: {e}"));
}

type FaultOp = (&'static str, fn(&World) -> Result<FaultKind, Errno>);

/// One fault of each kind, each from the world's state (a fork first where the kind needs a shared page).
const FAULTS: &[FaultOp] = &[
    ("anonymous write", |w| w.mm.fault(ANON + 6 * P, Access::Write)),
    ("anonymous write, new tables", |w| w.mm.fault(FAR + P, Access::Write)),
    ("zero page, new tables", |w| w.mm.fault(FAR + 2 * P, Access::Read)),
    ("write to the zero page", |w| w.mm.fault(ANON + 4 * P, Access::Write)),
    ("file read", |w| w.mm.fault(PRIVATE + 9 * P, Access::Read)),
    ("private file write (copy)", |w| w.mm.fault(PRIVATE + 10 * P, Access::Write)),
    ("private file write over a mapped page", |w| w.mm.fault(PRIVATE + P, Access::Write)),
    ("shared file write, new page", |w| w.mm.fault(SHARED + 12 * P, Access::Write)),
    ("shared anonymous write", |w| w.mm.fault(SHM + 5 * P, Access::Write)),
];

#[test]
fn every_fault_allocation_fails_cleanly() {
    for (what, op) in FAULTS {
        let reference = world();
        let want = op(&reference).unwrap_or_else(|e| panic!("{what}: {e:?} without injection"));
        let want_snap = snapshot(&reference, false);
        let mut failures = 0;
        for k in 0.. {
            let w = world();
            let before = snapshot(&w, false);
            w.mem.inject_alloc_failure(Some(k));
            let r = op(&w);
            w.mem.inject_alloc_failure(None);
            check_memory(&[&w.mm], &w);
            match r {
                Err(Errno::ENOMEM) => {
                    failures += 1;
                    assert_eq!(
                        snapshot(&w, false),
                        before,
                        "{what}: failure at allocation {k} changed something"
                    );
                    // The same fault without injection now succeeds as it would have at first.
                    assert_eq!(op(&w), Ok(want), "{what}: retry after failure {k}");
                    assert_eq!(snapshot(&w, false), want_snap, "{what}: retry after failure {k}");
                    check_memory(&[&w.mm], &w);
                }
                other => {
                    assert_eq!(other, Ok(want), "{what} (failure at {k} not reached)");
                    assert_eq!(snapshot(&w, false), want_snap, "{what}");
                    break;
                }
            }
        }
        assert!(failures > 0, "{what}: no allocation to fail");
        assert_eq!(reference.mm.fault_stats().faults.oom, 0);
    }
}

/// Readahead's allocations fail quietly: a read fault on a file that reads ahead a 32-page window, with each
/// allocation failing in turn, either reads part of the window and maps its page (the failed page and those
/// after it are simply not read ahead), or fails with ENOMEM where the fault's own page or table could not be
/// had; in both cases nothing leaks and every cached page is one of the window's.
#[test]
fn readahead_allocation_failures_are_quiet() {
    const F: u64 = B + 512 * P;
    for k in 0.. {
        let mem = Memory::new(MemoryConfig::default());
        let pool = VmaPool::leak_new();
        let mm = Mm::with_pool_and_memory(MmConfig::default(), pool, mem.clone());
        let file = VmFile::regular("/vmspace/ra", 1, 256 * P);
        mm.mmap(F, 256 * P, Prot::READ, MapFlags::PRIVATE | MapFlags::FIXED, Some(&file), 0).unwrap();
        mem.inject_alloc_failure(Some(k));
        let r = mm.fault(F + 100 * P, Access::Read);
        mem.inject_alloc_failure(None);
        Mm::check_memory(&[&mm], &[&file]).unwrap_or_else(|e| panic!("failure at {k}: {e}"));
        mm.validate().unwrap();
        let cached: Vec<u64> = file.page_cache().unwrap().pages().iter().map(|&(i, _)| i).collect();
        // The read-around window of a 32-page device: pages 84..116.
        assert!(cached.iter().all(|i| (84..116).contains(i)), "failure at {k}: {cached:?}");
        match r {
            Ok(_) => {
                assert!(cached.contains(&100), "failure at {k}: the faulting page is cached");
                assert!(mm.page_table().pte(F + 100 * P).is_present(), "failure at {k}: and mapped");
                if cached.len() == 32 {
                    break;
                }
            }
            Err(e) => assert_eq!(e, Errno::ENOMEM, "failure at {k}"),
        }
        assert!(k < 200, "readahead never completed");
    }
}

/// Copy-on-write after fork: the child's first write to a shared anonymous page copies it; each allocation of
/// the copy fails in turn, and neither side changes.
#[test]
fn cow_fault_allocation_fails_cleanly() {
    for k in 0.. {
        let w = world();
        let child = w.mm.fork().unwrap();
        let cw = World { mm: child, file: w.file.clone(), mem: w.mem.clone(), pool: w.pool };
        let (parent_before, child_before) = (snapshot(&w, false), snapshot(&cw, false));
        w.mem.inject_alloc_failure(Some(k));
        let r = cw.mm.fault(ANON + P, Access::Write);
        w.mem.inject_alloc_failure(None);
        check_memory(&[&w.mm, &cw.mm], &w);
        assert_eq!(snapshot(&w, false), parent_before, "the parent changed (failure at {k})");
        match r {
            Err(Errno::ENOMEM) => assert_eq!(snapshot(&cw, false), child_before, "failure at {k}"),
            other => {
                assert_eq!(other, Ok(FaultKind::WpCopy));
                assert!(k > 0, "a copy allocates");
                break;
            }
        }
    }
}

type ForkInjection = (&'static str, fn(&World, u64), fn(&World));

/// The four allocators fork draws on, each made to fail at its `k`-th allocation.
const FORK_INJECTIONS: &[ForkInjection] = &[
    ("pages and tables", |w, k| w.mem.inject_alloc_failure(Some(k)), |w| w.mem.inject_alloc_failure(None)),
    ("allocation budget", |w, k| w.mm.inject_alloc_failure(Some(k)), |w| w.mm.inject_alloc_failure(None)),
    ("VMA pool", |w, k| w.pool.fail_nth(k + 1), |w| w.pool.fail_nth(0)),
    ("tree nodes", |w, k| w.mm.inject_tree_alloc_failure(Some(k)), |w| w.mm.inject_tree_alloc_failure(None)),
];

/// Nodes of the VMA tree's allocation domain (the parent's tree and every copy made from it) not accounted for
/// by the parent's tree, once retired nodes have had their grace period.
fn tree_nodes_unaccounted(mm: &Mm) -> i64 {
    mm.tree().lock().flush_retired();
    vmspace_rcu::synchronize();
    mm.tree().lock().flush_retired();
    vmspace_rcu::synchronize();
    mm.tree().node_stats().unaccounted()
}

#[test]
fn every_fork_allocation_fails_cleanly() {
    // `ForkMode::Reinsert` builds the child's tree from nothing: a tree of its own, whose node allocations the
    // parent's tree injection does not reach (its failures free the new tree: `reinsert_tree`).
    let runs = FORK_INJECTIONS
        .iter()
        .flat_map(|i| [(i, ForkMode::Dup), (i, ForkMode::Reinsert)])
        .filter(|((what, ..), mode)| !(*what == "tree nodes" && *mode == ForkMode::Reinsert));
    for ((what, inject, clear), mode) in runs {
        let mut failures = 0;
        for k in 0.. {
            let w = world();
            let before = snapshot(&w, true);
            let vmas_before = w.pool.stats().in_use;
            let nodes_before = tree_nodes_unaccounted(&w.mm);
            inject(&w, k);
            let r = w.mm.fork_with(mode);
            clear(&w);
            match r {
                Err(e) => {
                    assert_eq!(e, Errno::ENOMEM, "{what} {mode:?} (failure at {k})");
                    failures += 1;
                    assert_eq!(snapshot(&w, true), before, "{what}: a failed fork changed the parent ({k})");
                    check_memory(&[&w.mm], &w);
                    assert_eq!(w.pool.stats().in_use, vmas_before, "{what}: VMAs leaked ({k})");
                    assert_eq!(
                        tree_nodes_unaccounted(&w.mm),
                        nodes_before,
                        "{what}: tree nodes leaked ({k})"
                    );
                    // The parent's pages are intact: its private pages are still its own.
                    let mut b = [0u8; 4];
                    w.mm.read(ANON + 3 * P, &mut b).unwrap();
                    assert_eq!(b, [0x13; 4]);
                    let copies = w.mm.fault_stats().faults.wp_copy;
                    w.mm.write(ANON + 3 * P, b"mine").unwrap();
                    assert_eq!(w.mm.fault_stats().faults.wp_copy, copies, "the parent reuses its page");
                }
                Ok(child) => {
                    let cw = World { mm: child, file: w.file.clone(), mem: w.mem.clone(), pool: w.pool };
                    check_memory(&[&w.mm, &cw.mm], &w);
                    let mut b = [0u8; 6];
                    cw.mm.read(PRIVATE + 2 * P + 7, &mut b).unwrap();
                    assert_eq!(&b, b"copied", "the child sees the parent's private copy");
                    cw.mm.read(ANON + 8 * P, &mut b).expect_err("the guard region is copied");
                    drop(cw);
                    check_memory(&[&w.mm], &w);
                    assert_eq!(w.pool.stats().in_use, vmas_before, "{what}: the child's VMAs freed");
                    break;
                }
            }
        }
        assert!(failures > 0, "{what} {mode:?}: fork never failed");
    }
}
