//! Tear-down unpublishes before it frees, on every path (ARCHITECTURE.md: "a writer unpublishes before it
//! retires").
//!
//! Readers hold the tree through [`MmShared`](vmspace_mm::space::MmShared), which outlives the `Mm`. When the
//! `Mm` is dropped (exit, the kernel's `exit_mmap`), its VMAs are detached and freed to the pool; if the tree
//! still mapped one of them, a concurrent `lock_vma_under_rcu` would find it detached, retry (a detached VMA
//! means "replaced, walk again", `mm/mmap_lock.c: lock_vma_under_rcu`) and find it again, forever. So
//! tear-down must empty the tree before it detaches anything, even when the tree's node allocator fails
//! (injected here): a reader must answer within a bounded time and then see an empty address space.
//!
//! Fork's failure path (`dup_mmap` unwinding a half-built child) frees the child's VMAs; the child's tree was
//! never visible to a reader, and the test checks that every VMA and tree node it made comes back.
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use vmspace_mm::space::{Advice, Errno, MapFlags, Mm, MmConfig, Prot};
use vmspace_mm::vma::VmaPool;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const RW: Prot = Prot::RW;
const AF: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);
/// VMAs in the test address space: enough for a tree of several levels, so that erasing any one VMA alone
/// would need a new node.
const VMAS: u64 = 300;
/// How long a reader may take to answer after the drop. It normally answers in microseconds; the bound only
/// separates "answers" from "spins forever" on a machine shared with other jobs.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// `VMAS` one-page VMAs with a one-page hole after each, in a private pool (nothing else recycles them).
fn populated(pool: &'static VmaPool) -> Mm {
    let m = Mm::with_pool(MmConfig::default(), pool);
    for i in 0..VMAS {
        m.mmap(B + 2 * i * P, P, RW, AF, None, 0).unwrap();
    }
    m.validate().unwrap();
    assert_eq!(m.map_count(), VMAS);
    m
}

/// Drops an address space (with `inject` applied to its tree allocator first, its tree's node reserve released
/// first if `release_reserve`) while a reader thread runs
/// `lock_vma_under_rcu` over every VMA's address; the reader must then answer for every address within
/// [`ANSWER_WITHIN`], and every answer after the drop must be "no VMA".
fn drop_under_reader(inject: Option<u64>, release_reserve: bool) {
    let pool = VmaPool::leak_new();
    let m = populated(pool);
    if release_reserve {
        // Without the reserve, the first node the tear-down needs comes from the (failing) allocator.
        m.tree().lock().release_reserve();
    }
    let shared = m.shared();
    let dropped = Arc::new(AtomicBool::new(false));
    let looked_up = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let reader = {
        let (shared, dropped, looked_up) = (shared.clone(), dropped.clone(), looked_up.clone());
        std::thread::spawn(move || {
            let mut found_before = 0u64;
            loop {
                // Acquire: pairs with the Release store after the drop; every lookup of this pass starts after
                // the drop returned.
                let after = dropped.load(Ordering::Acquire);
                let mut found = 0u64;
                for i in 0..VMAS {
                    let addr = B + 2 * i * P;
                    if let Some(g) = shared.lock_vma_under_rcu(addr) {
                        assert!(g.contains(addr), "a reader got a VMA that does not cover {addr:#x}");
                        found += 1;
                    }
                    // Relaxed: a progress count read by the main thread only to wait for the first pass.
                    looked_up.fetch_add(1, Ordering::Relaxed);
                }
                if after {
                    tx.send((found_before, found)).unwrap();
                    return;
                }
                found_before += found;
            }
        })
    };
    // Let the reader run against the live address space first.
    // Relaxed: progress only.
    while looked_up.load(Ordering::Relaxed) < VMAS {
        std::thread::yield_now();
    }
    m.inject_tree_alloc_failure(inject);
    drop(m);
    // Release: pairs with the reader's Acquire load above.
    dropped.store(true, Ordering::Release);
    let (found_before, found_after) = rx.recv_timeout(ANSWER_WITHIN).unwrap_or_else(|_| {
        panic!("lock_vma_under_rcu gave no answer within {ANSWER_WITHIN:?} of the Mm's drop ({inject:?})")
    });
    reader.join().unwrap();
    assert!(found_before > 0, "the reader never found a VMA while the address space was live");
    assert_eq!(found_after, 0, "a reader found a VMA after the Mm was dropped");
    assert!(shared.tree().is_empty(), "the dropped Mm's tree still maps {} ranges", shared.tree().len());
    shared.tree().validate().unwrap();
    let s = pool.stats();
    assert_eq!(s.in_use, 0, "VMAs not returned to the pool: {s:?}");
}

/// The reported failure: the Mm dropped with a tree-allocation failure injected. The injected failure hits
/// the `(k + 1)`-th node allocation once; the tree's reserve (left from the last call) serves the first
/// allocations, so several `k` cover a failure at the first store and later ones.
#[test]
fn drop_with_tree_allocation_failure_unpublishes_before_freeing() {
    for k in [0, 1, 20, 100, 250] {
        drop_under_reader(Some(k), false);
        drop_under_reader(Some(k), true);
    }
}

/// The ordinary exit path under a reader.
#[test]
fn drop_under_a_reader_empties_the_tree_first() {
    drop_under_reader(None, false);
}

/// Accounting that must come back to where it was: the pool's VMAs in use, and the tree nodes of the
/// parent's allocation domain (shared with every child tree `dup` makes) not accounted for by the parent's
/// tree (a child's nodes, or a leak).
fn in_use(pool: &VmaPool, m: &Mm) -> (u64, i64) {
    (pool.stats().in_use, m.tree().node_stats().unaccounted())
}

/// Fork failing at every tree allocation (the copy and the clearing of `VM_DONTCOPY` ranges) and at every pool
/// allocation: ENOMEM, the parent unchanged, and every VMA and node the half-built child took given back.
#[test]
fn failed_fork_frees_everything_it_made() {
    let pool = VmaPool::leak_new();
    let m = populated(pool);
    // Two DONTCOPY ranges so that the child's tree needs stores after the copy.
    m.madvise(B + 4 * P, P, Advice::DONTFORK).unwrap();
    m.madvise(B + 200 * P, P, Advice::DONTFORK).unwrap();
    let maps = m.maps_text();
    let base = in_use(pool, &m);
    assert_eq!(base.1, 0, "the parent's nodes are not all accounted for");
    let mut tree_failures = 0;
    for k in 0.. {
        m.inject_tree_alloc_failure(Some(k));
        let r = m.fork();
        m.inject_tree_alloc_failure(None);
        m.validate().unwrap();
        assert_eq!(m.maps_text(), maps);
        match r {
            Err(e) => {
                assert_eq!(e, Errno::ENOMEM);
                tree_failures += 1;
                assert_eq!(in_use(pool, &m), base, "tree failure after {k}: leak");
            }
            Ok(child) => {
                child.validate().unwrap();
                assert_eq!(child.map_count(), VMAS - 2);
                drop(child);
                assert_eq!(in_use(pool, &m), base, "child dropped: leak");
                break;
            }
        }
        assert!(k < 1000, "fork never succeeds");
    }
    assert!(tree_failures > 0, "no injected tree failure reached fork");
    let mut pool_failures = 0;
    for n in 1..=VMAS + 1 {
        pool.fail_nth(n);
        let r = m.fork();
        pool.fail_nth(0);
        m.validate().unwrap();
        match r {
            Err(e) => {
                assert_eq!(e, Errno::ENOMEM);
                pool_failures += 1;
                assert_eq!(in_use(pool, &m), base, "pool failure at {n}: leak");
            }
            Ok(child) => {
                child.validate().unwrap();
                drop(child);
                assert_eq!(in_use(pool, &m), base);
            }
        }
    }
    assert!(pool_failures > 0, "no injected pool failure reached fork");
}
