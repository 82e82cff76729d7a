//! Loom models of node publication and retirement with a concurrent reader.
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

/// Copy-on-write replacement of a root leaf (node store): the new root is published, the old one marked dead
/// and retired while the reader may be inside it.
#[test]
fn root_leaf_cow() {
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

/// A leaf under an internal root is replaced (published into the parent's slot) while the reader walks.
#[test]
fn leaf_under_internal_root_cow() {
    let _ = model(|| {
        let t = Arc::new(
            MapleTree::<V>::from_sorted((0..20u64).map(|k| (k * 10, k * 10 + 4, nz(k as usize + 1))))
                .unwrap(),
        );
        assert!(t.lock().height() == 2);
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
    });
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
