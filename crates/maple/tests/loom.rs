//! Loom models of node publication and retirement, and of the in-place leaf stores, with a concurrent reader.
//!
//! Under `--cfg loom` a reclaimed node is not freed but marked, and every node access asserts the mark is clear,
//! so a reader that could reach a node after its grace period fails the model. Each model checks that the reader
//! sees every entry as before or after the write (with its exact range: never a torn range) and always finds
//! the entries the writer does not touch.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p vmspace-maple --test loom`.
#![cfg(loom)]

use std::num::NonZeroUsize;

use loom::sync::Arc;
use loom::thread;
use vmspace_maple::MapleTree;

type V = NonZeroUsize;

fn nz(x: usize) -> V {
    NonZeroUsize::new(x).unwrap()
}

/// Runs `f` under loom with preemption bound 3; returns the number of executions explored (printed with
/// `--nocapture`, so that a model that explores suspiciously little is noticed).
fn model(f: impl Fn() + Sync + Send + 'static) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.max_branches = 1_000_000;
    b.check(move || {
        // Relaxed: a counter outside the model (std atomic, not tracked by loom).
        r.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let n = runs.load(Ordering::Relaxed);
    println!("explored {n} executions");
    assert!(n > 1, "the model explored a single execution");
    n
}

/// The reader's view of one index: (first, last, value) or None.
fn view(t: &MapleTree<V>, i: u64) -> Option<(u64, u64, usize)> {
    let g = vmspace_rcu::pin();
    t.load_range_in(i, &g).map(|(a, b, v)| (a, b, v.get()))
}

/// A node store into a root leaf (two slots become four; rewritten in place under the leaf's sequence count)
/// while the reader looks up two entries.
#[test]
fn root_leaf_node_store() {
    let _ = model(|| {
        let t = Arc::new(MapleTree::<V>::from_sorted([(10, 19, nz(1)), (30, 39, nz(2))]).unwrap());
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                assert_eq!(t.load(15), Some(nz(1)));
                let v = view(&t, 35);
                assert!(v == Some((30, 39, 2)) || v == Some((25, 35, 3)), "torn: {v:?}");
            })
        };
        t.store_range(25, 35, Some(nz(3))).unwrap();
        r.join().unwrap();
        assert_eq!(view(&t, 35), Some((25, 35, 3)));
        t.validate().unwrap();
    });
}

/// Twenty ranges `[10k, 10k + 4] = k + 1` under an internal root (height 2): the tree the models of stores below
/// the root start from.
fn two_level_tree() -> Arc<MapleTree<V>> {
    let t = Arc::new(
        MapleTree::<V>::from_sorted((0..20u64).map(|k| (k * 10, k * 10 + 4, nz(k as usize + 1)))).unwrap(),
    );
    assert!(t.lock().height() == 2);
    t
}

/// A store into a leaf under an internal root (a slot store there) while the reader walks from the root.
#[test]
fn leaf_under_internal_root() {
    let _ = model(|| {
        let t = two_level_tree();
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                assert_eq!(t.load(2), Some(nz(1)));
                let v = view(&t, 192);
                assert!(v == Some((190, 194, 20)) || v == Some((188, 194, 99)), "torn: {v:?}");
            })
        };
        t.store_range(188, 194, Some(nz(99))).unwrap();
        r.join().unwrap();
        t.validate().unwrap();
    });
}

/// The root leaf splits: a new internal root with two new leaves replaces it.
#[test]
fn root_split() {
    let _ = model(|| {
        let t = Arc::new(
            MapleTree::<V>::from_sorted((0..8u64).map(|k| (k * 10, k * 10 + 4, nz(k as usize + 1)))).unwrap(),
        );
        assert!(t.lock().height() == 1);
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                assert_eq!(t.load(71), Some(nz(8)));
                let v = view(&t, 6);
                assert!(v.is_none() || v == Some((5, 6, 50)), "torn: {v:?}");
            })
        };
        // One store adding two ranges' worth of slots pushes the root leaf over 16 slots.
        let mut w = t.lock();
        w.store_range(5, 6, Some(nz(50))).unwrap();
        drop(w);
        r.join().unwrap();
        t.validate().unwrap();
    });
}

/// An exact-fit store changes one slot in place; the reader sees the old or the new value with the same range.
#[test]
fn exact_fit_in_place() {
    let _ = model(|| {
        let t = Arc::new(MapleTree::<V>::from_sorted([(10, 19, nz(1)), (20, 29, nz(2))]).unwrap());
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                let v = view(&t, 25);
                assert!(v == Some((20, 29, 2)) || v == Some((20, 29, 7)), "{v:?}");
                let g = vmspace_rcu::pin();
                let mut c = t.cursor(&g);
                let a = c.find(u64::MAX).map(|x| x.0);
                assert_eq!(a, Some(10));
            })
        };
        t.store_range(20, 29, Some(nz(7))).unwrap();
        r.join().unwrap();
        assert_eq!(t.store_stats().exact_fit, 1);
        t.validate().unwrap();
    });
}

/// The state of one in-place model: the leaf's entries before and after the store.
#[derive(Clone, Copy)]
struct InPlace {
    before: &'static [(u64, u64, usize)],
    after: &'static [(u64, u64, usize)],
}

impl InPlace {
    /// True if `(s, e, v)` is an entry of the state before or of the state after the store.
    fn whole(&self, x: (u64, u64, usize)) -> bool {
        self.before.contains(&x) || self.after.contains(&x)
    }

    /// The entry a state has at index `i`.
    fn at(state: &[(u64, u64, usize)], i: u64) -> Option<(u64, u64, usize)> {
        state.iter().copied().find(|&(s, e, _)| (s..=e).contains(&i))
    }

    /// Checks a point view: the entry at `i` as before or as after, with its whole range.
    fn check_view(&self, t: &MapleTree<V>, i: u64) {
        let v = view(t, i);
        assert!(v == Self::at(self.before, i) || v == Self::at(self.after, i), "torn at {i}: {v:?}");
    }

    /// A forward cursor pass (a walk, then cached steps through the leaf): every entry it returns is a whole
    /// entry of one of the two states, and the ranges never go backwards.
    fn check_forward(&self, t: &MapleTree<V>, from: u64) {
        let g = vmspace_rcu::pin();
        let mut c = t.cursor(&g);
        c.set(from);
        let mut last = None;
        while let Some((s, e, v)) = c.find(u64::MAX) {
            assert!(self.whole((s, e, v.get())), "torn cursor step: {:?}", (s, e, v.get()));
            if let Some(p) = last {
                assert!(e > p, "went backwards");
            }
            last = Some(e);
        }
    }

    /// A backward cursor pass, mirror image of `check_forward`.
    fn check_backward(&self, t: &MapleTree<V>, from: u64) {
        let g = vmspace_rcu::pin();
        let mut c = t.cursor(&g);
        c.set(from);
        let mut first = None;
        while let Some((s, e, v)) = c.find_rev(0) {
            assert!(self.whole((s, e, v.get())), "torn cursor step back: {:?}", (s, e, v.get()));
            if let Some(p) = first {
                assert!(s < p, "went forwards");
            }
            first = Some(s);
        }
    }
}

/// Runs one in-place model: a root leaf holding `m.before`, a reader doing a point view at `probe` and a
/// cursor pass (forward, or backward with `back`), the writer storing `store` (a value, or NULL for 0); then
/// checks that the store took the expected path (`kind` of the store statistics), allocated no node (the leaf
/// changed in place) and left `m.after`.
fn in_place_model(
    m: InPlace,
    store: (u64, u64, usize),
    probe: u64,
    back: bool,
    kind: fn(&vmspace_maple::StoreStats) -> u64,
) {
    let _ = model(move || {
        let t =
            Arc::new(MapleTree::<V>::from_sorted(m.before.iter().map(|&(s, e, v)| (s, e, nz(v)))).unwrap());
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                m.check_view(&t, probe);
                if back {
                    m.check_backward(&t, u64::MAX);
                } else {
                    m.check_forward(&t, 0);
                }
            })
        };
        let allocated = t.node_stats().allocated;
        t.store_range(store.0, store.1, NonZeroUsize::new(store.2)).unwrap();
        r.join().unwrap();
        let st = t.store_stats();
        assert_eq!((kind(&st), st.total()), (1, 1), "{st:?}");
        assert_eq!(t.node_stats().allocated, allocated, "the store allocated a node: not in place");
        let g = vmspace_rcu::pin();
        let mut c = t.cursor(&g);
        let mut all = Vec::new();
        while let Some((s, e, v)) = c.find(u64::MAX) {
            all.push((s, e, v.get()));
        }
        assert_eq!(all, m.after);
        t.validate().unwrap();
    });
}

/// Slot store, forward direction (`mas_wr_slot_store`, the store starts at a slot's first index and ends
/// inside the next slot): `[10, 24] = 3` over `[10, 19] = 1, [20, 29] = 2` moves one pivot and one slot in
/// place; the reader's view of 22 and its cursor's steps see the old or the new ranges, never `[20, 29] = 3`
/// or `[10, 24] = 1`.
#[test]
fn slot_store_forward_in_place() {
    in_place_model(
        InPlace { before: &[(10, 19, 1), (20, 29, 2)], after: &[(10, 24, 3), (25, 29, 2)] },
        (10, 24, 3),
        22,
        false,
        |s| s.slot_store,
    );
}

/// Slot store, backward direction (the store starts inside a slot and ends at the next slot's last index):
/// `[15, 29] = 3`; the reader walks backwards with cached steps (`find_rev`).
#[test]
fn slot_store_backward_in_place() {
    in_place_model(
        InPlace { before: &[(10, 19, 1), (20, 29, 2)], after: &[(10, 14, 1), (15, 29, 3)] },
        (15, 29, 3),
        17,
        true,
        |s| s.slot_store,
    );
}

/// Append at the end of a leaf, new range after the old last range (`mas_wr_append`, "append to end of range"):
/// `[30, MAX] = 3` splits the last range `[20, MAX] = 2`; the leaf grows by one slot in place.
#[test]
fn append_end_in_place() {
    in_place_model(
        InPlace {
            before: &[(10, 19, 1), (20, u64::MAX, 2)],
            after: &[(10, 19, 1), (20, 29, 2), (30, u64::MAX, 3)],
        },
        (30, u64::MAX, 3),
        25,
        false,
        |s| s.append,
    );
}

/// Append at the start of the last range (`mas_wr_append`, "append to start of range"): `[20, 29] = 3` takes
/// the old last slot and the old content `2` moves one slot right, to `[30, MAX]`.
#[test]
fn append_start_in_place() {
    in_place_model(
        InPlace {
            before: &[(10, 19, 1), (20, u64::MAX, 2)],
            after: &[(10, 19, 1), (20, 29, 3), (30, u64::MAX, 2)],
        },
        (20, 29, 3),
        35,
        true,
        |s| s.append,
    );
}

/// In-place node store, the slot count shrinking (`mas_wr_node_store` rewritten in place under the leaf's
/// sequence count, the churn's munmap): erasing `[20, 29]` between two NULL ranges joins three slots into one
/// NULL `[15, 34]`, and the tail of the leaf moves two slots left. The reader's view of 40 and its forward
/// cursor steps see the old or the new leaf, never `[40, 49]` with a value of another slot.
#[test]
fn node_store_shrink_in_place() {
    in_place_model(
        InPlace {
            before: &[(10, 14, 1), (20, 29, 2), (35, 39, 3), (40, 49, 4)],
            after: &[(10, 14, 1), (35, 39, 3), (40, 49, 4)],
        },
        (20, 29, 0),
        40,
        false,
        |s| s.node_store,
    );
}

/// In-place node store, the slot count growing (the churn's mmap into a gap that is not the leaf's last
/// range): `[20, 29] = 2` inside the NULL `[15, 34]` splits one slot into three and the tail moves two slots
/// right; the reader walks backwards with cached steps.
#[test]
fn node_store_grow_in_place() {
    in_place_model(
        InPlace {
            before: &[(10, 14, 1), (35, 39, 3), (40, 49, 4)],
            after: &[(10, 14, 1), (20, 29, 2), (35, 39, 3), (40, 49, 4)],
        },
        (20, 29, 2),
        37,
        true,
        |s| s.node_store,
    );
}

/// A wide erase collapses a two-level tree into a root leaf while a reader iterates with a cursor across the
/// leaf boundary: the entries the writer does not touch are each seen exactly once, in order.
#[test]
fn collapse_while_iterating() {
    let _ = model(|| {
        let t = Arc::new(
            MapleTree::<V>::from_sorted((0..18u64).map(|k| (k * 10, k * 10 + 4, nz(k as usize + 1))))
                .unwrap(),
        );
        assert!(t.lock().height() == 2);
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                let g = vmspace_rcu::pin();
                let mut c = t.cursor(&g);
                let mut seen = Vec::new();
                let mut last_end = None;
                while let Some((s, e, v)) = c.find(u64::MAX) {
                    if let Some(p) = last_end {
                        assert!(e > p, "went backwards");
                    }
                    last_end = Some(e);
                    if !(20..150).contains(&s) {
                        seen.push((s, v.get()));
                    }
                }
                assert_eq!(seen, vec![(0, 1), (10, 2), (150, 16), (160, 17), (170, 18)]);
            })
        };
        t.erase_range(20, 149).unwrap();
        r.join().unwrap();
        assert_eq!(t.lock().height(), 1);
        t.validate().unwrap();
    });
}

/// A gap search beside an append that fills the head of the right-most NULL range (`[20, 29] = 3` into
/// `[20, MAX]` = NULL): the lowest free area of 5 indices from 15 is 20 before and 30 after, never none (which
/// a torn read of the new value with the old pivot would give).
#[test]
fn append_gap_search_in_place() {
    let _ = model(|| {
        let t = Arc::new(MapleTree::<V>::from_sorted([(0, 9, nz(5)), (10, 19, nz(1))]).unwrap());
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                let a = t.empty_area(15, 1000, 5);
                assert!(a == Ok(20) || a == Ok(30), "{a:?}");
                let a = t.empty_area_rev(0, 24, 5);
                assert!(a == Ok(20) || a.is_err(), "{a:?}");
            })
        };
        t.store_range(20, 29, Some(nz(3))).unwrap();
        r.join().unwrap();
        assert_eq!(t.store_stats().append, 1);
        t.validate().unwrap();
    });
}

/// The node slab's shared depot (`src/slab.rs`): two threads with their own magazines (refills and drains of
/// two nodes under loom) allocate, free into their magazines (one frees a node the other allocated) and flush,
/// in every interleaving of their depot locks. No node is handed out twice, and at the end every slot is back
/// and the chunk unmapped (no empty chunk is kept). The tree itself does not use the slab under loom (every node
/// is its own model object there, so that a late reader is caught): this model is where the slab is checked.
#[test]
fn slab_depot_exchange() {
    use std::collections::HashSet;
    use vmspace_maple::slab_model::{Magazine, Slab};
    let _ = model(|| {
        let s = Arc::new(Slab::new(12, 0));
        // The oracle stands outside the model (a std mutex: no loom operation runs while it is held).
        let held = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
        let take = |m: &mut Magazine, s: &Slab, held: &std::sync::Mutex<HashSet<usize>>| {
            let a = m.alloc(s).unwrap();
            assert!(held.lock().unwrap().insert(a), "node {a:#x} handed out twice");
            a
        };
        let mut m = Magazine::new();
        let given = take(&mut m, &s, &held);
        let h = {
            let (s, held) = (s.clone(), held.clone());
            thread::spawn(move || {
                let mut m = Magazine::new();
                let a = take(&mut m, &s, &held);
                let b = take(&mut m, &s, &held);
                let c = take(&mut m, &s, &held);
                for x in [a, b, c, given] {
                    held.lock().unwrap().remove(&x);
                    // SAFETY: handed out to this model (`given` by the main thread, before the spawn), freed once.
                    unsafe { m.free(&s, x) };
                }
                m.flush(&s);
            })
        };
        let a = take(&mut m, &s, &held);
        let b = take(&mut m, &s, &held);
        for x in [a, b] {
            held.lock().unwrap().remove(&x);
            // SAFETY: as above.
            unsafe { m.free(&s, x) };
        }
        m.flush(&s);
        h.join().unwrap();
        assert_eq!(m.len(), 0);
        let st = s.stats();
        assert_eq!((st.chunks, st.free_nodes), (0, 0), "{st:?}");
    });
}

/// The NULL-tail shortcut (module `write`, `mas_wr_null_tail`): erasing `[70, 74]`, the last range of the
/// first leaf, joins the NULLs around it with the second leaf's leading NULL; the two leaves and the root are
/// replaced by copies with the boundary moved (`[80, 84]` moves into the first leaf). A reader walking from the
/// root sees `[70, 74] = 8` or nothing there, `[80, 84] = 9` whole in either state, and a cursor crossing the
/// boundary sees every untouched entry once, in order.
#[test]
fn null_tail_while_reading() {
    let _ = model(|| {
        let t = two_level_tree();
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                let v = view(&t, 72);
                assert!(v == Some((70, 74, 8)) || v.is_none(), "torn: {v:?}");
                assert_eq!(view(&t, 82), Some((80, 84, 9)));
                let g = vmspace_rcu::pin();
                let mut c = t.cursor(&g);
                c.set(60);
                let mut seen = Vec::new();
                while let Some((s, e, v)) = c.find(99) {
                    seen.push((s, e, v.get()));
                }
                seen.retain(|&(s, _, _)| s != 70);
                assert_eq!(seen, vec![(60, 64, 7), (80, 84, 9), (90, 94, 10)]);
            })
        };
        let st = t.store_stats();
        assert_eq!(t.erase(70).map(|(s, e, v)| (s, e, v.get())), Some((70, 74, 8)));
        assert_eq!(t.store_stats().null_tail, st.null_tail + 1);
        r.join().unwrap();
        assert_eq!(view(&t, 72), None);
        t.validate().unwrap();
    });
}

/// The churn's node stores below the root (module `write`, `mas_wr_node_store_churn`, which the root-leaf
/// models above do not reach): an erase of `[20, 24]` between the gaps `[15, 19]` and `[25, 29]` of a leaf
/// under an internal root joins three slots into one NULL `[15, 29]`, and inserting it back splits that NULL
/// again (from the state the erase left), the leaf's tail moving two slots each time under its sequence count. A reader walking from the root
/// sees `[20, 24]` whole or absent and the moved `[40, 44]` whole, never a torn range; each store is one node
/// store that allocates nothing.
#[test]
fn churn_node_stores_below_the_root() {
    for insert in [false, true] {
        let _ = model(move || {
            let t = two_level_tree();
            if insert {
                // The insert model starts where the erase model ends (the bulk build packs the first leaf full).
                assert!(t.erase(22).is_some());
            }
            let st0 = t.store_stats();
            let r = {
                let t = t.clone();
                thread::spawn(move || {
                    let v = view(&t, 22);
                    assert!(v.is_none() || v == Some((20, 24, 3)), "torn: {v:?}");
                    assert_eq!(view(&t, 42), Some((40, 44, 5)));
                })
            };
            let allocated = t.node_stats().allocated;
            if insert {
                t.insert_range(20, 24, nz(3)).unwrap();
            } else {
                assert_eq!(t.erase(22).map(|(s, e, v)| (s, e, v.get())), Some((20, 24, 3)));
            }
            r.join().unwrap();
            let st = t.store_stats();
            assert_eq!((st.node_store - st0.node_store, st.total() - st0.total()), (1, 1), "{st:?}");
            assert_eq!(t.node_stats().allocated, allocated, "the store allocated a node: not in place");
            assert_eq!(view(&t, 22), if insert { Some((20, 24, 3)) } else { None });
            t.validate().unwrap();
        });
    }
}
