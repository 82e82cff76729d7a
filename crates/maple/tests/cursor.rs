//! The write cursor ([`WriteCursor`], the writer's `ma_state`): a model test of random positionings, steps,
//! stores, inserts, erasures, writer stores beside the cursor (which make it descend again), pauses and
//! allocation failures against a `BTreeMap` oracle with `validate()` after every operation; and unit tests of
//! when the cursor reuses its path and when it walks from the root again ([`Writer::descents`]).

use std::num::NonZeroUsize;

use proptest::prelude::*;
use vmspace_maple::{MapleError, MapleTree, Writer};

mod common;
use common::Oracle;

type V = NonZeroUsize;

fn nz(x: usize) -> V {
    NonZeroUsize::new(x).unwrap()
}

impl Oracle {
    /// The range holding `i`: an entry, or the whole empty range around `i`.
    fn range(&self, i: u64) -> (u64, u64, Option<usize>) {
        if let Some((s, (e, x))) = self.0.range(..=i).next_back()
            && *e >= i
        {
            return (*s, *e, Some(*x));
        }
        let lo = self.0.range(..=i).next_back().map_or(0, |(_, (e, _))| e + 1);
        let hi = self.0.range(i..).next().map_or(u64::MAX, |(s, _)| s - 1);
        (lo, hi, None)
    }

    /// `WriteCursor::next`'s contract on the model: returns the entry and the cursor's new index.
    fn next(&self, mut idx: u64, max: u64) -> (Option<(u64, u64, usize)>, u64) {
        loop {
            let (_, l, _) = self.range(idx);
            if l >= max {
                return (None, idx);
            }
            idx = l + 1;
            if let (f, l, Some(x)) = self.range(idx) {
                return (Some((f, l, x)), idx);
            }
        }
    }

    fn prev(&self, mut idx: u64, min: u64) -> (Option<(u64, u64, usize)>, u64) {
        loop {
            let (f, _, _) = self.range(idx);
            if f <= min {
                return (None, idx);
            }
            idx = f - 1;
            if let (f, l, Some(x)) = self.range(idx) {
                return (Some((f, l, x)), idx);
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Set(u64),
    Range,
    Next(u64),
    Prev(u64),
    Find(u64),
    Store(u64, u64, Option<usize>),
    /// A boundary move relative to the cursor's current range (drives the in-place stores).
    Grow(u64, bool),
    Insert(u64, u64, usize),
    Erase,
    /// A store through the writer beside the cursor.
    WriterStore(u64, u64, Option<usize>),
    /// Pause, release the lock, take it again, resume.
    Pause,
    /// Many small entries at once (the tree grows to height 3 and more).
    Fill(u64),
    /// A store with the allocator failing and no reserve: ENOMEM or a store that needs no node.
    Failing(u64, u64, Option<usize>),
    /// A store reaching `u64::MAX`.
    Top(u64, Option<usize>),
}

const KEYS: u64 = 6000;

fn op() -> impl Strategy<Value = Op> {
    let val = prop_oneof![3 => (1usize..1000).prop_map(Some), 1 => Just(None)];
    let range = (0..KEYS, 0u64..60).prop_map(|(f, w)| (f, f + w));
    prop_oneof![
        2 => (0..KEYS).prop_map(Op::Set),
        1 => Just(Op::Range),
        3 => (0..KEYS + 100).prop_map(Op::Next),
        3 => (0..KEYS).prop_map(Op::Prev),
        1 => (0..KEYS + 100).prop_map(Op::Find),
        6 => (range.clone(), val.clone()).prop_map(|((f, l), v)| Op::Store(f, l, v)),
        4 => (1u64..40, any::<bool>()).prop_map(|(d, up)| Op::Grow(d, up)),
        1 => (range.clone(), 1usize..1000).prop_map(|((f, l), v)| Op::Insert(f, l, v)),
        2 => Just(Op::Erase),
        1 => (range.clone(), val.clone()).prop_map(|((f, l), v)| Op::WriterStore(f, l, v)),
        1 => Just(Op::Pause),
        1 => (0..KEYS).prop_map(Op::Fill),
        1 => (range, val.clone()).prop_map(|((f, l), v)| Op::Failing(f, l, v)),
        1 => (0u64..50, val).prop_map(|(w, v)| Op::Top(w, v)),
    ]
}

fn raw(v: Vec<(u64, u64, V)>) -> Vec<(u64, u64, usize)> {
    v.into_iter().map(|(s, e, x)| (s, e, x.get())).collect()
}

fn some_raw(x: Option<(u64, u64, V)>) -> Option<(u64, u64, usize)> {
    x.map(|(s, e, v)| (s, e, v.get()))
}

/// The whole tree against the model, read lock-free.
fn same_contents(t: &MapleTree<V>, m: &Oracle) {
    let g = vmspace_rcu::pin();
    let mut c = t.cursor(&g);
    let mut got = Vec::new();
    while let Some((s, e, v)) = c.find(u64::MAX) {
        got.push((s, e, v.get()));
    }
    let want: Vec<(u64, u64, usize)> = m.0.iter().map(|(s, (e, x))| (*s, *e, *x)).collect();
    assert_eq!(got, want);
}

/// Runs `ops` against the model; returns the descents made by the cursor and the writer.
fn run(ops: &[Op]) {
    let t = MapleTree::<V>::new();
    let mut m = Oracle::default();
    let mut idx = 0u64;
    let mut w = t.lock();
    let mut first = true;
    for o in ops {
        let mut c = if std::mem::take(&mut first) { w.cursor(0) } else { w.resume_cursor() };
        assert_eq!(c.index(), idx);
        let mut changed = false;
        match *o {
            Op::Set(i) => {
                c.set(i);
                idx = i;
            }
            Op::Range => {
                let (f, l, v) = c.range();
                assert_eq!((f, l, v.map(|v| v.get())), m.range(idx));
            }
            Op::Next(max) => {
                let (want, i) = m.next(idx, max);
                assert_eq!(some_raw(c.next(max)), want, "next({max}) from {idx}");
                idx = i;
            }
            Op::Prev(min) => {
                let (want, i) = m.prev(idx, min);
                assert_eq!(some_raw(c.prev(min)), want, "prev({min}) from {idx}");
                idx = i;
            }
            Op::Find(max) => {
                let got = some_raw(c.find(max));
                if idx > max {
                    assert_eq!(got, None);
                } else {
                    match m.range(idx) {
                        (f, l, Some(x)) => assert_eq!(got, Some((f, l, x))),
                        _ => {
                            let (want, i) = m.next(idx, max);
                            assert_eq!(got, want);
                            idx = i;
                        }
                    }
                }
            }
            Op::Store(f, l, v) => {
                let got = c.store_range(f, l, v.map(nz)).unwrap();
                assert_eq!(raw(got), m.store(f, l, v));
                idx = f;
                changed = true;
            }
            Op::Grow(d, up) => {
                // Move one boundary of the current range: the store starts at the range's first index and ends
                // `d` beyond its last (or `d` before it), with the range's own value.
                let (f, l, v) = m.range(idx);
                let last = if up { l.saturating_add(d) } else { l.saturating_sub(d).max(f) };
                // Through `store`, which answers only how many entries it replaced.
                let got = c.store(f, last, v.map(nz)).unwrap();
                assert_eq!(got, m.store(f, last, v).len());
                idx = f;
                changed = true;
            }
            Op::Insert(f, l, v) => {
                let free = m.0.range(..=l).next_back().is_none_or(|(_, (e, _))| *e < f);
                let r = c.insert_range(f, l, nz(v));
                if free {
                    r.unwrap();
                    m.store(f, l, Some(v));
                    idx = f;
                    changed = true;
                } else {
                    assert_eq!(r, Err(MapleError::Exists));
                    // Nothing changed; the cursor was positioned at `f` before the store failed.
                    idx = f;
                }
            }
            Op::Erase => {
                let got = some_raw(c.erase().unwrap());
                match m.range(idx) {
                    (f, l, Some(x)) => {
                        assert_eq!(got, Some((f, l, x)));
                        m.store(f, l, None);
                        idx = f;
                        changed = true;
                    }
                    _ => assert_eq!(got, None),
                }
            }
            Op::WriterStore(f, l, v) => {
                let got = c.writer_mut().store_range(f, l, v.map(nz)).unwrap();
                assert_eq!(raw(got), m.store(f, l, v));
                changed = true;
            }
            Op::Pause => {
                // The cursor's borrow of the writer ended with its last use; its state stays with the tree.
                drop(w);
                w = t.lock();
                continue;
            }
            Op::Fill(at) => {
                for k in 0..64u64 {
                    let f = at + k * 3;
                    c.store_range(f, f + 1, Some(nz(2000 + k as usize))).unwrap();
                    m.store(f, f + 1, Some(2000 + k as usize));
                }
                idx = at + 63 * 3;
                changed = true;
            }
            Op::Failing(f, l, v) => {
                let reserved = c.writer().reserved();
                c.writer_mut().release_reserve();
                c.writer().tree().inject_alloc_failure(Some(0));
                let r = c.store_range(f, l, v.map(nz));
                c.writer().tree().inject_alloc_failure(None);
                c.writer_mut().reserve(reserved).unwrap();
                idx = f;
                match r {
                    Ok(got) => {
                        assert_eq!(raw(got), m.store(f, l, v));
                        changed = true;
                    }
                    Err(e) => assert_eq!(e, MapleError::NoMem),
                }
            }
            Op::Top(w0, v) => {
                let f = u64::MAX - w0;
                let got = c.store_range(f, u64::MAX, v.map(nz)).unwrap();
                assert_eq!(raw(got), m.store(f, u64::MAX, v));
                idx = f;
                changed = true;
            }
        }
        c.writer().validate().unwrap_or_else(|e| panic!("after {o:?}: {e}\n{}", c.writer().dump()));
        if changed {
            same_contents(c.writer().tree(), &m);
        }
        assert_eq!(c.index(), idx, "cursor index after {o:?}");
        // The cursor's view of its range after every operation.
        let (f, l, v) = c.range();
        assert_eq!((f, l, v.map(|v| v.get())), m.range(idx), "range after {o:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn cursor_matches_model(ops in proptest::collection::vec(op(), 1..160)) {
        run(&ops);
    }
}

/// A tree of `n` ranges `[10k, 10k + 4]` (gaps between), height 3 or more for n = 1000.
fn tree_of(n: u64) -> MapleTree<V> {
    MapleTree::from_sorted((0..n).map(|k| (10 * k, 10 * k + 4, nz(k as usize + 1)))).unwrap()
}

/// Descents made by `f` on a fresh writer of `t`, less one for each rebuild `f` made (a rebuild may replace
/// the root, after which the cursor walks from the new root; each store makes at most one rebuild).
fn descents_of(t: &MapleTree<V>, f: impl FnOnce(&mut Writer<'_, V>)) -> u64 {
    let mut w = t.lock();
    let (d0, r0) = (w.descents(), w.store_stats().rebuild);
    f(&mut w);
    let (d, r) = (w.descents() - d0, w.store_stats().rebuild - r0);
    assert!(d >= 1 || r == 0);
    d - d.saturating_sub(1).min(r)
}

/// An mmap and an munmap as the address space makes them: read the neighbours of a gap, store into it, read
/// around the stored range, erase it: one descent for each call's cursor, however many reads and stores.
#[test]
fn one_descent_per_cursor() {
    let t = tree_of(1000);
    assert!(t.lock().height() >= 3);
    for round in 0..50u64 {
        let gap = 10 * (round * 17 % 1000) + 6;
        let d = descents_of(&t, |w| {
            let mut c = w.cursor(gap);
            assert_eq!(c.load(), None);
            let prev = c.prev(0).map(|x| x.1);
            let next = c.next(u64::MAX).map(|x| x.0);
            assert_eq!(prev, Some(gap - 2));
            assert_eq!(next, if gap + 4 < 10_000 { Some(gap + 4) } else { None });
            c.store_range(gap, gap + 1, Some(nz(7777))).unwrap();
            assert_eq!(c.range(), (gap, gap + 1, Some(nz(7777))));
        });
        assert_eq!(d, 1, "mmap-like call, round {round}");
        let d = descents_of(&t, |w| {
            let mut c = w.cursor(gap);
            assert_eq!(c.find(gap + 1).map(|x| x.0), Some(gap));
            let floor = c.prev(0).map(|x| x.1);
            c.set(gap);
            c.range();
            let ceiling = c.next(u64::MAX).map(|x| x.0);
            assert_eq!((floor, ceiling.is_some()), (Some(gap - 2), gap + 4 < 10_000));
            c.set(gap);
            assert_eq!(c.erase().unwrap().map(|x| x.2), Some(nz(7777)));
            assert_eq!(c.load(), None);
        });
        assert_eq!(d, 1, "munmap-like call, round {round}");
        t.validate().unwrap();
    }
    // The same calls through the writer alone descend on every store (and the cursor's reads are extra
    // lock-free walks, not counted here).
    let d = descents_of(&t, |w| {
        w.store_range(6, 7, Some(nz(1))).unwrap();
        w.erase_range(6, 7).unwrap();
    });
    assert_eq!(d, 2);
}

/// Steps across leaves and far jumps re-walk from a cached ancestor, not from the root.
#[test]
fn steps_and_jumps_reuse_ancestors() {
    let t = tree_of(1000);
    let d = descents_of(&t, |w| {
        let mut c = w.cursor(0);
        let mut n = 0i32;
        while c.next(u64::MAX).is_some() {
            n += 1;
        }
        assert_eq!(n, 999);
        // The last `next` left the cursor on the empty range after the last entry: 1000 entries back.
        while c.prev(0).is_some() {
            n -= 1;
        }
        assert_eq!(n, -1);
        for k in [999u64, 3, 500, 0, 998] {
            c.set(10 * k + 2);
            assert_eq!(c.load(), Some(nz(k as usize + 1)));
            c.store_range(10 * k + 5, 10 * k + 6, Some(nz(9))).unwrap();
        }
    });
    assert_eq!(d, 1);
    t.validate().unwrap();
}

/// A store the cursor did not make (through the writer, or between two lock sessions) makes it descend again;
/// a resumed cursor with no store since keeps its path; a new cursor walks from the root.
#[test]
fn foreign_stores_make_the_cursor_descend() {
    let t = tree_of(1000);
    let mut w = t.lock();
    let d0 = w.descents();
    let mut c = w.cursor(5006);
    c.load();
    assert_eq!(c.writer().descents() - d0, 1);
    c.writer_mut().store_range(3006, 3007, Some(nz(1))).unwrap();
    assert_eq!(c.writer().descents() - d0, 2);
    assert_eq!(c.load(), None);
    assert_eq!(c.writer().descents() - d0, 3, "the writer's store invalidated the path");
    drop(w);
    let mut w = t.lock();
    let mut c = w.resume_cursor();
    assert_eq!(c.index(), 5006);
    c.store_range(5006, 5007, Some(nz(2))).unwrap();
    assert_eq!(c.writer().descents() - d0, 3, "nothing stored between the sessions: the path holds");
    drop(w);
    t.store_range(7006, 7007, Some(nz(3))).unwrap();
    let mut w = t.lock();
    let d1 = w.descents();
    let mut c = w.resume_cursor();
    assert_eq!(c.range(), (5006, 5007, Some(nz(2))));
    assert_eq!(c.writer().descents() - d1, 1, "a store between the sessions invalidated the path");
    drop(w);
    let mut w = t.lock();
    let d2 = w.descents();
    let mut c = w.cursor(5006);
    assert_eq!(c.range(), (5006, 5007, Some(nz(2))));
    assert_eq!(c.writer().descents() - d2, 1, "a new cursor walks from the root");
    drop(w);
    t.validate().unwrap();
}

/// After a store that copied the leaf, or rebuilt below a parent, the cursor keeps the untouched levels and
/// stays usable; a store that replaced the root makes it walk again (counted); a failed store changes nothing
/// and keeps the path.
#[test]
fn path_refreshed_after_every_kind_of_store() {
    let t = MapleTree::<V>::new();
    let mut w = t.lock();
    let mut c = w.cursor(0);
    // Empty tree: the first store makes a root leaf and the cursor walks it (one descent).
    c.store_range(100, 109, Some(nz(1))).unwrap();
    assert_eq!(c.writer().descents(), 1);
    // Growing the tree: root splits replace the root (one descent each), every other store none.
    let mut k = 1u64;
    while c.writer().height() < 3 {
        c.store_range(100 + 20 * k, 109 + 20 * k, Some(nz(k as usize + 1))).unwrap();
        assert_eq!(c.range(), (100 + 20 * k, 109 + 20 * k, Some(nz(k as usize + 1))));
        k += 1;
    }
    // Only stores that replaced the root descend: some rebuilds (a split below the root) and the first store.
    let root_changes = |w: &Writer<'_, V>| w.store_stats().rebuild + w.store_stats().empty;
    assert!(c.writer().descents() <= root_changes(c.writer()), "{:?}", c.writer().store_stats());
    let growth = c.writer().descents();
    let before = c.writer().store_stats();
    // Node stores (a value inside a gap that is not the leaf's last slot) and rebuilds (many in one leaf).
    for j in 0..200u64 {
        let f = 100 + 20 * (j % k) + 12;
        c.store_range(f, f + 2, Some(nz(5000 + j as usize))).unwrap();
        assert_eq!(c.load(), Some(nz(5000 + j as usize)));
        c.writer().validate().unwrap();
    }
    let after = c.writer().store_stats();
    assert!(after.node_store > before.node_store && after.rebuild > before.rebuild, "{after:?}");
    assert!(
        c.writer().descents() - growth <= after.rebuild - before.rebuild,
        "only root replacements descend"
    );
    // A failed store: ENOMEM, nothing changed, the path still used (no descent). A store across leaves (a
    // store inside one leaf rewrites it in place and allocates nothing).
    let d = c.writer().descents();
    c.writer_mut().release_reserve();
    c.writer().tree().inject_alloc_failure(Some(0));
    let g = c.writer().tree().len();
    assert_eq!(c.store_range(1, 5000, Some(nz(1))), Err(MapleError::NoMem));
    c.writer().tree().inject_alloc_failure(None);
    assert_eq!(c.writer().tree().len(), g);
    assert_eq!(c.range(), (0, 99, None));
    assert_eq!(c.writer().descents(), d);
    // Emptying the tree: no path; the next store builds a root again.
    c.store_range(0, u64::MAX, None).unwrap();
    assert_eq!(c.range(), (0, u64::MAX, None));
    c.store_range(5, 5, Some(nz(1))).unwrap();
    assert_eq!(c.range(), (5, 5, Some(nz(1))));
    c.writer().validate().unwrap();
}

/// A store made through the writer walks down from the writer cursor's path while that path is still the
/// tree's (`CursorState::take_finger`): an erase (a cursor's store) and the insert of the same range back
/// (an munmap and an mmap of the same place) walk from the root once, the insert starting at the erase's
/// leaf; two writer stores in a row descend twice (a store without the cursor does not keep its path).
/// The contents and `validate()` are checked after every pair.
#[test]
fn writer_store_starts_from_a_valid_cursor_path() {
    let t = tree_of(1000);
    assert!(t.lock().height() >= 3);
    for round in 0..200u64 {
        let k = round * 37 % 1000;
        let (s, e) = (10 * k, 10 * k + 4);
        let d = descents_of(&t, |w| {
            assert_eq!(w.erase(s + 2), Some((s, e, nz(k as usize + 1))));
            w.insert_range(s, e, nz(k as usize + 1)).unwrap();
        });
        assert_eq!(d, 1, "erase and insert back, round {round}");
        let mut w = t.lock();
        let d0 = w.descents();
        w.store_range(s + 5, s + 5, Some(nz(1))).unwrap();
        w.store_range(s + 5, s + 5, None).unwrap();
        assert_eq!(w.descents() - d0, 2, "two writer stores, round {round}");
        drop(w);
        let g = vmspace_rcu::pin();
        assert_eq!(t.load_range_in(s, &g), Some((s, e, nz(k as usize + 1))));
        assert_eq!(t.load_range_in(s + 5, &g), None);
        drop(g);
        t.validate().unwrap();
    }
    assert_eq!(t.len(), 1000);
}
