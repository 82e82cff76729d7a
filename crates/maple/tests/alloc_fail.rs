//! Allocation-failure injection at every allocation site of stores, `reserve` and `dup`: a failed operation
//! leaves the tree exactly as it was (full contents compared, `validate()`), and the node counters show that
//! every node allocated by the failed attempt was freed.

use std::num::NonZeroUsize;

use vmspace_maple::{DupError, MapleError, MapleTree};

mod common;
use common::{Tree, V};

fn nz(x: usize) -> V {
    NonZeroUsize::new(x).unwrap()
}

fn build(n: u64, rcu: bool) -> Tree {
    let mut t = Tree::new(rcu);
    for k in 0..n {
        t.store_range(k * 10, k * 10 + 5, Some(nz(k as usize + 1))).unwrap();
    }
    t
}

/// [`build`] in RCU mode, for the tests of the writer's own API.
fn build_rcu(n: u64) -> MapleTree<V> {
    let Tree::Rcu(t) = build(n, true) else { unreachable!("build(_, true) is in RCU mode") };
    t
}

/// Nodes allocated and not yet released or queued for release.
fn outstanding(s: &vmspace_maple::NodeStats) -> u64 {
    s.allocated - s.freed - s.pending_free
}

/// Store shapes exercising every path: exact fit, node store, split with push, multi-level split, spanning
/// store across subtrees, erasures causing rebalance and height shrink, growth of an empty tree.
fn shapes() -> Vec<(u64, u64, Option<usize>)> {
    vec![
        (100, 105, Some(7)),                // exact fit (no allocation)
        (106, 107, Some(8)),                // node store into the gap after an entry
        (101, 103, Some(9)),                // split an entry in three
        (1000, 1000, None),                 // erase part of an entry
        (55, 5555, Some(10)),               // spanning store over many leaves
        (100, 15_000, None),                // wide erase: rebalance, height change
        (0, u64::MAX, Some(11)),            // everything
        (0, u64::MAX, None),                // empty the tree
        (u64::MAX - 5, u64::MAX, Some(12)), // right edge
        (3, 3, None),                       // erase inside the first entry
    ]
}

fn check_failure_injection(rcu: bool) {
    for (si, &(f, l, v)) in shapes().iter().enumerate() {
        let mut t = build(1500, rcu);
        let before = t.contents();
        let mut i = 0u64;
        loop {
            let s0 = t.node_stats();
            assert_eq!(s0.unaccounted(), 0, "{s0:?}");
            t.inject_alloc_failure(Some(i));
            let r = t.store_range(f, l, v.map(nz));
            t.inject_alloc_failure(None);
            match r {
                Err(MapleError::NoMem) => {
                    assert_eq!(t.contents(), before, "shape {si} fail at {i}: contents changed");
                    t.validate().unwrap_or_else(|e| panic!("shape {si} fail at {i}: {e}"));
                    let s1 = t.node_stats();
                    assert_eq!(s1.unaccounted(), 0, "shape {si} fail at {i}: leak {s1:?}");
                    assert_eq!(s1.live, s0.live);
                    assert_eq!(outstanding(&s1), outstanding(&s0), "shape {si} fail at {i}");
                    i += 1;
                }
                Ok(_) => {
                    t.validate().unwrap();
                    assert_eq!(t.node_stats().unaccounted(), 0);
                    break;
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
            assert!(i < 200, "shape {si} never succeeded");
        }
    }
}

#[test]
fn store_failure_at_every_allocation_rcu() {
    check_failure_injection(true);
}

#[test]
fn store_failure_at_every_allocation_non_rcu() {
    check_failure_injection(false);
}

#[test]
fn reserve_makes_stores_infallible() {
    for &(f, l, v) in &shapes() {
        let t = build_rcu(1500);
        let mut w = t.lock();
        let n = w.worst_case(3);
        w.reserve(n).unwrap();
        w.tree().inject_alloc_failure(Some(0));
        w.store_range(f, l, v.map(nz)).unwrap();
        w.store_range(f / 2, f / 2 + 3, Some(nz(77))).unwrap();
        w.store_range(l / 3, l / 3 + 40, None).unwrap();
        w.tree().inject_alloc_failure(None);
        w.release_reserve();
        drop(w);
        t.validate().unwrap();
        assert_eq!(t.node_stats().unaccounted(), 0);
    }
}

#[test]
fn reserve_failure_adds_nothing() {
    let t = build_rcu(100);
    let mut w = t.lock();
    for i in 0..5 {
        w.tree().inject_alloc_failure(Some(i));
        assert_eq!(w.reserve(5), Err(MapleError::NoMem));
        assert_eq!(w.reserved(), 0);
    }
    w.tree().inject_alloc_failure(None);
    drop(w);
    assert_eq!(t.node_stats().unaccounted(), 0);
}

#[test]
fn dup_failure_at_every_allocation() {
    for rcu in [true, false] {
        let t = build(2000, rcu);
        let live = t.node_stats().live;
        let want = t.contents();
        let mut i = 0u64;
        loop {
            let s0 = t.node_stats();
            let mut produced = 0usize;
            let mut undone = 0usize;
            t.inject_alloc_failure(Some(i));
            let r = t.dup(
                |_, _, x: V| {
                    produced += 1;
                    Ok::<V, ()>(x)
                },
                |_| undone += 1,
            );
            t.inject_alloc_failure(None);
            match r {
                Err(DupError::NoMem) => {
                    assert_eq!(produced, undone, "fail at {i}");
                    let s1 = t.node_stats();
                    assert_eq!(outstanding(&s1), outstanding(&s0), "dup leak at {i}");
                    assert_eq!(s1.unaccounted(), 0);
                    i += 1;
                }
                Ok(d) => {
                    assert_eq!(i, live, "dup allocates exactly one node per source node");
                    d.validate().unwrap();
                    assert_eq!(d.contents(), want);
                    let s = t.node_stats();
                    let sd = d.node_stats();
                    assert_eq!(s.allocated - s.freed - s.pending_free, s.live + sd.live);
                    drop(d);
                    assert_eq!(t.node_stats().unaccounted(), 0);
                    break;
                }
                Err(DupError::Map(())) => panic!("map never fails here"),
            }
        }
    }
}

#[test]
fn dup_map_failure_at_every_entry() {
    let t = build(300, true);
    let n = t.len();
    for fail in 0..n {
        let s0 = t.node_stats();
        let mut produced = Vec::new();
        let mut undone = Vec::new();
        let r = t.dup(
            |s, _, x: V| {
                if produced.len() == fail {
                    return Err(s);
                }
                produced.push(x.get());
                Ok(x)
            },
            |u: V| undone.push(u.get()),
        );
        assert_eq!(r.err(), Some(DupError::Map(fail as u64 * 10)));
        undone.sort();
        produced.sort();
        assert_eq!(produced, undone);
        let s1 = t.node_stats();
        assert_eq!(outstanding(&s1), outstanding(&s0));
    }
}

#[test]
fn retired_nodes_are_freed_after_a_grace_period() {
    let t = build_rcu(3000);
    for k in 0..2000u64 {
        t.store_range(k * 10 + 6, k * 10 + 8, Some(nz(5))).unwrap();
        t.erase_range(k * 7, k * 7 + 30).unwrap();
    }
    let mut w = t.lock();
    w.flush_retired();
    drop(w);
    vmspace_rcu::synchronize();
    let s = t.node_stats();
    assert_eq!(s.pending_free, 0, "{s:?}");
    assert_eq!(s.allocated - s.freed, s.live + s.reserved, "{s:?}");
    t.validate().unwrap();
}

#[test]
fn worst_case_reserve_bound_holds_for_random_stores() {
    // Every store, after reserving `worst_case(1)` nodes, must succeed with the allocator failing.
    for rcu in [true, false] {
        let mut t = build(2000, rcu);
        let mut x = 0x2545F4914F6CDD1Du64;
        for i in 0..3000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = x % 25_000;
            let w = match i % 5 {
                0 => x % 4000,
                1 => 0,
                _ => x % 9,
            };
            let val = if i % 3 == 0 { None } else { Some(nz(i as usize + 1)) };
            let (need, r) = t.reserved_store(f, f + w, val);
            r.unwrap_or_else(|e| {
                panic!("store {i} [{f}, {}] failed with {e:?} after reserving {need}", f + w)
            });
        }
        t.validate().unwrap();
        assert_eq!(t.node_stats().unaccounted(), 0);
    }
}

/// Emptying the tree (NULL over the whole key space) never allocates: the tree becomes empty and every node is
/// retired. Tear-down relies on it (the VMA tree's owner clears it before freeing what it mapped, and must be
/// able to when allocations fail).
#[test]
fn clearing_everything_needs_no_allocation() {
    for n in [1, 2, 17, 300, 1500] {
        for rcu in [true, false] {
            let mut t = build(n, rcu);
            t.release_reserve();
            t.inject_alloc_failure(Some(0));
            let gone = t.store_range(0, u64::MAX, None).expect("clearing allocates nothing");
            t.inject_alloc_failure(None);
            assert_eq!(gone.len() as u64, n);
            assert_eq!(t.len(), 0);
            assert_eq!(t.contents(), Vec::new());
            t.validate().unwrap();
            let s = t.node_stats();
            assert_eq!((s.live, s.unaccounted()), (0, 0), "{n} entries, rcu {rcu}: {s:?}");
        }
    }
}
