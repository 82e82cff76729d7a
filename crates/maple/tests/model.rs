//! Model tests: random operation sequences against a BTreeMap oracle, `validate()` after every operation.
//!
//! The oracle is a map `range start -> (last, value)` with brute-force implementations of every operation.
//! Sequences mix small stores (node stores, splits, pushes), wide stores and erasures (spanning stores,
//! rebalancing, height changes), bulk fills (height >= 3), and every read: load, find, find_rev, cursor walks
//! with pause/resume, gap searches both ways, and dup (with and without a failing map). Boundary moves (an
//! entry grows into its neighbour or gap or shrinks, as VMAs do; an entry is split at its head or tail) drive
//! the in-place stores of RCU mode (slot store, append); `in_place_paths_taken` checks that a run of them
//! takes every in-place path. Set `PROPTEST_CASES` to run more cases than the default.

use std::num::NonZeroUsize;

use proptest::prelude::*;
use vmspace_maple::{DupError, MapleError, PausedCursor};

mod common;
use common::{Oracle, Tree, V};

fn nz(x: usize) -> V {
    NonZeroUsize::new(x).unwrap()
}

impl Oracle {
    fn find(&self, from: u64, max: u64) -> Option<(u64, u64, usize)> {
        if from > max {
            return None;
        }
        self.entry_at(from).or_else(|| self.0.range(from..=max).next().map(|(s, (e, x))| (*s, *e, *x)))
    }
    fn find_rev(&self, from: u64, min: u64) -> Option<(u64, u64, usize)> {
        if from < min {
            return None;
        }
        self.0.range(..=from).next_back().filter(|(_, (e, _))| *e >= min).map(|(s, (e, x))| (*s, *e, *x))
    }
    fn empty_area(&self, min: u64, max: u64, size: u64, rev: bool) -> Result<u64, MapleError> {
        if size == 0 || min > max || max - min < size - 1 {
            return Err(MapleError::Invalid);
        }
        // Free intervals within [min, max], in order.
        let mut free = Vec::new();
        let mut cand = Some(min);
        for (s, e, _) in self.overlapping(min, max) {
            if let Some(c) = cand
                && s > c
            {
                free.push((c, s - 1));
            }
            cand = e.checked_add(1);
        }
        if let Some(c) = cand
            && c <= max
        {
            free.push((c, max));
        }
        let fits = |&(a, b): &(u64, u64)| b - a >= size - 1;
        let r = if rev {
            free.iter().rev().find(|x| fits(x)).map(|&(_, b)| b - (size - 1))
        } else {
            free.iter().find(|x| fits(x)).map(|&(a, _)| a)
        };
        r.ok_or(MapleError::Busy)
    }
    fn all(&self) -> Vec<(u64, u64, usize)> {
        self.0.iter().map(|(s, (e, x))| (*s, *e, *x)).collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Store(u64, u64, bool),
    Insert(u64, u64),
    Erase(u64),
    EraseRange(u64, u64),
    Bulk(u64, u64, u64, u64),
    Load(u64),
    Find(u64, u64),
    FindRev(u64, u64),
    Walk(u64, u64, u8),
    WalkRev(u64, u64),
    Area(u64, u64, u64, bool),
    Dup(Option<u16>),
    NextPrev(u64, Vec<bool>),
    /// The entry at or after the key moves a boundary by the amount: 0 grow its end, 1 grow its start, 2 shrink
    /// its end, 3 shrink its start, 4 a new entry over its head, 5 a new entry over its tail, 6 a new entry over
    /// all of it.
    Move(u64, u64, u8),
}

const SPACE: u64 = 100_000;

fn key() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0..SPACE,
        1 => Just(0u64),
        1 => u64::MAX - 100..=u64::MAX,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (key(), 0..20u64, any::<bool>()).prop_map(|(f, w, s)| Op::Store(f, f.saturating_add(w), s)),
        4 => (key(), 0..5000u64, any::<bool>()).prop_map(|(f, w, s)| Op::Store(f, f.saturating_add(w), s)),
        4 => (key(), 0..10u64).prop_map(|(f, w)| Op::Insert(f, f.saturating_add(w))),
        5 => key().prop_map(Op::Erase),
        3 => (key(), 0..3000u64).prop_map(|(f, w)| Op::EraseRange(f, f.saturating_add(w))),
        2 => (0..SPACE, 1..400u64, 1..12u64, 0..5u64).prop_map(|(s, n, w, g)| Op::Bulk(s, n, w, g)),
        6 => key().prop_map(Op::Load),
        4 => (key(), key()).prop_map(|(a, b)| Op::Find(a, b)),
        4 => (key(), key()).prop_map(|(a, b)| Op::FindRev(a, b)),
        3 => (key(), 1..200u64, any::<u8>()).prop_map(|(a, n, p)| Op::Walk(a, n, p)),
        2 => (key(), 1..200u64).prop_map(|(a, n)| Op::WalkRev(a, n)),
        5 => (key(), key(), prop_oneof![1..20u64, 1..3000u64, Just(1u64)], any::<bool>())
            .prop_map(|(a, b, s, r)| Op::Area(a.min(b), a.max(b), s, r)),
        1 => proptest::option::of(any::<u16>()).prop_map(Op::Dup),
        3 => (key(), proptest::collection::vec(any::<bool>(), 1..40)).prop_map(|(a, v)| Op::NextPrev(a, v)),
        12 => (key(), 1..40u64, 0..7u8).prop_map(|(a, d, k)| Op::Move(a, d, k)),
    ]
}

fn unraw(v: Vec<(u64, u64, V)>) -> Vec<(u64, u64, usize)> {
    v.into_iter().map(|(a, b, x)| (a, b, x.get())).collect()
}

fn run(ops: Vec<Op>, rcu: bool) -> Result<usize, TestCaseError> {
    run_with(ops, rcu, |_| {})
}

/// [`run`], handing the tree to `end` after the last operation (the store statistics).
fn run_with(ops: Vec<Op>, rcu: bool, end: impl FnOnce(&Tree)) -> Result<usize, TestCaseError> {
    let mut max_height = 0;
    let mut t = Tree::new(rcu);
    let mut o = Oracle::default();
    let mut next_val = 1usize;
    for op in ops {
        match op {
            Op::Store(f, l, some) => {
                let val = some.then(|| {
                    next_val += 1;
                    next_val
                });
                let got = unraw(t.store_range(f, l, val.map(nz)).unwrap());
                prop_assert_eq!(got, o.store(f, l, val));
            }
            Op::Insert(f, l) => {
                next_val += 1;
                let r = t.insert_range(f, l, nz(next_val));
                if o.overlapping(f, l).is_empty() {
                    prop_assert_eq!(r, Ok(()));
                    o.store(f, l, Some(next_val));
                } else {
                    prop_assert_eq!(r, Err(MapleError::Exists));
                }
            }
            Op::Erase(i) => {
                let want = o.entry_at(i);
                let got = t.erase(i).map(|(a, b, x)| (a, b, x.get()));
                prop_assert_eq!(got, want);
                if let Some((s, e, _)) = want {
                    o.store(s, e, None);
                }
            }
            Op::EraseRange(f, l) => {
                let got = unraw(t.erase_range(f, l).unwrap());
                prop_assert_eq!(got, o.store(f, l, None));
            }
            Op::Bulk(s, n, w, g) => {
                let mut stores = Vec::new();
                for k in 0..n {
                    let f = s + k * (w + g);
                    next_val += 1;
                    stores.push((f, f + w - 1, Some(nz(next_val))));
                    o.store(f, f + w - 1, Some(next_val));
                }
                t.store_many(&stores).unwrap();
            }
            Op::Load(i) => {
                prop_assert_eq!(t.load(i).map(|x| x.get()), o.entry_at(i).map(|e| e.2));
                prop_assert_eq!(t.load_range(i).map(|(a, b, x)| (a, b, x.get())), o.entry_at(i));
            }
            Op::Find(a, b) => {
                prop_assert_eq!(t.find(a, b).map(|(s, e, x)| (s, e, x.get())), o.find(a, b));
            }
            Op::FindRev(a, b) => {
                prop_assert_eq!(t.find_rev(a, b).map(|(s, e, x)| (s, e, x.get())), o.find_rev(a, b));
            }
            Op::Walk(a, n, pause_at) => {
                let mut want = Vec::new();
                let mut from = Some(a);
                while let Some(f) = from {
                    if want.len() >= n as usize {
                        break;
                    }
                    match o.find(f, u64::MAX) {
                        Some(x) => {
                            want.push(x);
                            from = x.1.checked_add(1);
                        }
                        None => break,
                    }
                }
                let mut got = Vec::new();
                let mut pc: Option<PausedCursor> = None;
                while got.len() < n as usize {
                    let g = vmspace_rcu::pin();
                    let mut c = match pc.take() {
                        Some(p) => t.resume(p, &g),
                        None => {
                            let mut c = t.cursor(&g);
                            c.set(a);
                            c
                        }
                    };
                    let mut stop = false;
                    for _ in 0..(pause_at as usize % 7 + 1) {
                        if got.len() >= n as usize {
                            break;
                        }
                        match c.find(u64::MAX) {
                            Some((s, e, x)) => got.push((s, e, x.get())),
                            None => {
                                stop = true;
                                break;
                            }
                        }
                    }
                    if stop {
                        break;
                    }
                    pc = Some(c.into_paused());
                }
                prop_assert_eq!(got, want);
            }
            Op::WalkRev(a, n) => {
                let mut want = Vec::new();
                let mut from = Some(a);
                while let Some(f) = from {
                    if want.len() >= n as usize {
                        break;
                    }
                    match o.find_rev(f, 0) {
                        Some(x) => {
                            want.push(x);
                            from = x.0.checked_sub(1);
                        }
                        None => break,
                    }
                }
                let g = vmspace_rcu::pin();
                let mut c = t.cursor(&g);
                c.set(a);
                let mut got = Vec::new();
                while got.len() < n as usize {
                    match c.find_rev(0) {
                        Some((s, e, x)) => got.push((s, e, x.get())),
                        None => break,
                    }
                }
                prop_assert_eq!(got, want);
            }
            Op::NextPrev(a, dirs) => {
                // next from start = first entry starting after `a`; prev = last entry ending before `a`; then
                // each step moves relative to the current entry. Stops at the first None.
                let g = vmspace_rcu::pin();
                let mut c = t.cursor(&g);
                c.set(a);
                // From start the cursor is "on" the range holding `a` (an entry, or the gap around `a`).
                let mut cur: Option<(u64, u64)> = o.entry_at(a).map(|(s, e, _)| (s, e));
                for fwd in dirs {
                    let want = if fwd {
                        let after = cur.map_or(a, |(_, e)| e);
                        after
                            .checked_add(1)
                            .and_then(|x| o.0.range(x..).next().map(|(s, (e, v))| (*s, *e, *v)))
                    } else {
                        let before = cur.map_or(a, |(s, _)| s);
                        before.checked_sub(1).and_then(|x| o.find_rev(x, 0))
                    };
                    let got = if fwd { c.next(u64::MAX) } else { c.prev(0) };
                    let got = got.map(|(s, e, v)| (s, e, v.get()));
                    prop_assert_eq!(got, want, "next/prev from {} fwd {}", a, fwd);
                    match got {
                        Some((s, e, _)) => cur = Some((s, e)),
                        None => break,
                    }
                }
            }
            Op::Move(a, d, kind) => {
                if let Some((s, l, v)) = o.find(a, u64::MAX) {
                    let store = match kind {
                        0 => Some((s, l.saturating_add(d), Some(v))),
                        1 => Some((s.saturating_sub(d), l, Some(v))),
                        2 if l - s >= d => Some((l - d + 1, l, None)),
                        3 if l - s >= d => Some((s, s + d - 1, None)),
                        4 if l - s >= d => Some((s, s + d - 1, Some(0))),
                        5 if l - s >= d => Some((l - d + 1, l, Some(0))),
                        6 => Some((s, l, Some(0))),
                        _ => None,
                    };
                    if let Some((f, l, val)) = store {
                        let val = val.map(|x| {
                            if x == 0 {
                                next_val += 1;
                                next_val
                            } else {
                                x
                            }
                        });
                        let got = unraw(t.store_range(f, l, val.map(nz)).unwrap());
                        prop_assert_eq!(got, o.store(f, l, val));
                        for i in [f.saturating_sub(1), f, l, l.saturating_add(1)] {
                            prop_assert_eq!(t.load_range(i).map(|(a, b, x)| (a, b, x.get())), o.entry_at(i));
                        }
                    }
                }
            }
            Op::Area(a, b, s, rev) => {
                let got = t.empty_area(a, b, s, rev);
                prop_assert_eq!(got, o.empty_area(a, b, s, rev), "area {} {} {} rev {}", a, b, s, rev);
            }
            Op::Dup(fail) => {
                let before = t.node_stats();
                let n = t.len();
                let mut produced = 0usize;
                let mut undone = 0usize;
                let fail_at = fail.map(|f| f as usize % (n + 1));
                let r = t.dup(
                    |_, _, x: V| {
                        if Some(produced) == fail_at {
                            return Err("map failed");
                        }
                        produced += 1;
                        Ok(nz(x.get() * 2))
                    },
                    |_| undone += 1,
                );
                match r {
                    Ok(d) => {
                        prop_assert!(fail_at.is_none() || fail_at == Some(n));
                        d.validate().map_err(TestCaseError::fail)?;
                        let want: Vec<_> = o.all().into_iter().map(|(a, b, x)| (a, b, x * 2)).collect();
                        prop_assert_eq!(d.contents(), want);
                        prop_assert_eq!(d.node_stats().live, before.live);
                    }
                    Err(e) => {
                        prop_assert_eq!(e, DupError::Map("map failed"));
                        prop_assert_eq!(produced, undone);
                        let after = t.node_stats();
                        prop_assert_eq!(
                            after.allocated - after.freed - after.pending_free,
                            before.allocated - before.freed - before.pending_free
                        );
                    }
                }
            }
        }
        if let Err(e) = t.validate() {
            return Err(TestCaseError::fail(format!("{e}\n{}", t.dump())));
        }
        prop_assert_eq!(t.len(), o.0.len());
        max_height = max_height.max(t.height());
    }
    prop_assert_eq!(t.contents(), o.all());
    end(&t);
    Ok(max_height)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn model_rcu(ops in proptest::collection::vec(op(), 1..160)) {
        let _ = run(ops, true)?;
    }

    #[test]
    fn model_non_rcu(ops in proptest::collection::vec(op(), 1..160)) {
        let _ = run(ops, false)?;
    }
}

#[test]
fn tall_tree_model() {
    // A deterministic long sequence reaching height >= 3 (bulk fills, then churn and wide erasures).
    let mut ops = vec![Op::Bulk(0, 3000, 4, 2), Op::Bulk(30_000, 2000, 1, 1)];
    let mut x = 12345u64;
    for i in 0..600u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let k = (x >> 20) % 40_000;
        ops.push(match i % 9 {
            0 => Op::EraseRange(k, k + (x >> 50) % 800),
            1 => Op::Area(k, k + 5000, 1 + (x >> 55) % 16, i % 2 == 0),
            2 => Op::Walk(k, 50, (x >> 40) as u8),
            3 => Op::Store(k, k + (x >> 58), false),
            4 => Op::FindRev(k, k.saturating_sub(100)),
            5 => Op::Dup(if i % 4 == 0 { Some((x >> 33) as u16) } else { None }),
            _ => Op::Store(k, k + (x >> 59), true),
        });
    }
    let h = run(ops.clone(), true).unwrap();
    assert!(h >= 3, "height {h}");
    run(ops, false).unwrap();
}

/// VMA-like boundary moves over a filled tree (growth into gaps and neighbours, shrinking, splits at a head or
/// tail), `validate()` and the oracle after every operation, in RCU mode: every in-place path is taken, and
/// the in-place stores are the majority of the stores (the rest copy a leaf or rebuild).
#[test]
fn in_place_paths_taken() {
    let mut ops = vec![Op::Bulk(0, 2000, 6, 4)];
    let mut x = 777u64;
    for i in 0..3000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let k = (x >> 20) % 20_000;
        ops.push(match i % 10 {
            0 => Op::Walk(k, 20, (x >> 40) as u8),
            1 => Op::Load(k),
            _ => Op::Move(k, 1 + (x >> 58) % 4, ((x >> 40) % 7) as u8),
        });
    }
    let mut stats = None;
    run_with(ops.clone(), true, |t| stats = t.store_stats()).unwrap();
    let st = stats.expect("an RCU tree");
    assert!(st.exact_fit > 0 && st.slot_store > 0 && st.append > 0, "{st:?}");
    assert!(st.in_place() > st.node_store + st.rebuild, "{st:?}");
    run(ops, false).unwrap();
}

/// A leaf's sequence count never wraps: after 65,535 in-place stores on one leaf (the count's last value),
/// the next store copies the leaf (a fresh leaf counts from 0 again), then in-place stores resume. Two entries
/// trade a boundary back and forth (slot stores in both directions), `validate()` and the contents checked
/// after every store.
#[test]
fn sequence_count_never_wraps() {
    let t = vmspace_maple::MapleTree::<V>::from_sorted([(10, 19, nz(1)), (20, 29, nz(2))]).unwrap();
    let n = 70_000u64;
    for i in 0..n {
        let m = if i % 2 == 0 { 24 } else { 19 };
        if m == 24 {
            t.store_range(10, 24, Some(nz(1))).unwrap();
        } else {
            t.store_range(20, 29, Some(nz(2))).unwrap();
        }
        t.validate().unwrap();
        let got: Vec<_> = {
            let g = vmspace_rcu::pin();
            let mut c = t.cursor(&g);
            std::iter::from_fn(|| c.find(u64::MAX).map(|(s, e, v)| (s, e, v.get()))).collect()
        };
        assert_eq!(got, vec![(10, m, 1), (m + 1, 29, 2)]);
    }
    let st = t.store_stats();
    assert_eq!((st.node_store, st.rebuild, st.slot_store), (1, 0, n - 1), "{st:?}");
}

/// The churn of `vmspace bench tree` (remove a range between gaps, insert it back) in random order over a
/// random layout, against the oracle, `validate()` after every store: the node stores it makes (a leaf's slot
/// count changes by two) rewrite the leaf in place under its sequence count, so every store that neither
/// rebuilt nor copied a leaf at its count's last value allocates no node.
fn churn_model(n: u64, gap: u64, order: Vec<u64>) -> Result<(), TestCaseError> {
    let spans: Vec<(u64, u64)> = (0..n).map(|k| (k * (10 + gap), k * (10 + gap) + 9)).collect();
    let t =
        vmspace_maple::MapleTree::<V>::from_sorted(spans.iter().map(|&(s, e)| (s, e, nz(s as usize + 1))))
            .unwrap();
    let mut o = Oracle::default();
    for &(s, e) in &spans {
        o.store(s, e, Some(s as usize + 1));
    }
    let long = order.len() >= 100;
    for k in order {
        let (s, e) = spans[(k % n) as usize];
        for insert in [false, true] {
            let (a, st) = (t.node_stats().allocated, t.store_stats());
            if insert {
                t.insert_range(s, e, nz(s as usize + 1)).unwrap();
                o.store(s, e, Some(s as usize + 1));
            } else {
                prop_assert_eq!(t.erase(s).map(|(f, l, v)| (f, l, v.get())), Some((s, e, s as usize + 1)));
                o.store(s, e, None);
            }
            t.validate().unwrap();
            let st2 = t.store_stats();
            if st2.rebuild == st.rebuild && st2.empty == st.empty && st2.node_store == st.node_store {
                prop_assert_eq!(t.node_stats().allocated, a, "an in-place store allocated: {:?}", st2);
            }
        }
        let g = vmspace_rcu::pin();
        let mut c = t.cursor(&g);
        let all: Vec<_> = std::iter::from_fn(|| c.find(u64::MAX).map(|(s, e, v)| (s, e, v.get()))).collect();
        prop_assert_eq!(all, o.all());
    }
    let st = t.store_stats();
    // The in-place node store is the common path of this churn (with gaps: three slots become one and back;
    // a leaf's last range goes through the rebuild, about one store in eight).
    if gap > 0 && n > 40 && long {
        prop_assert!(st.node_store > st.rebuild, "{:?}", st);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn churn_in_place_against_oracle(
        n in 1..300u64,
        gap in prop_oneof![Just(0u64), 1..20u64],
        order in proptest::collection::vec(any::<u64>(), 1..200),
    ) {
        churn_model(n, gap, order)?;
    }
}

/// The NULL-tail shortcut (module `write`, `mas_wr_null_tail`): erasing a leaf's last range between gaps moves
/// the merged NULL into the next leaf's leading NULL by copying the two leaves and their parent. A churn over
/// a tree of several levels takes it, and also the general rebuild it falls back to (a left leaf that would
/// fall below its minimum, a next leaf under another parent); `validate()` and the oracle after every store.
#[test]
fn null_tail_shortcut_and_fallback() {
    let n = 2000u64;
    let spans: Vec<(u64, u64)> = (0..n).map(|k| (k * 16, k * 16 + 9 - k % 5)).collect();
    let t =
        vmspace_maple::MapleTree::<V>::from_sorted(spans.iter().map(|&(s, e)| (s, e, nz(s as usize + 1))))
            .unwrap();
    assert!(t.lock().height() >= 3);
    let mut o = Oracle::default();
    for &(s, e) in &spans {
        o.store(s, e, Some(s as usize + 1));
    }
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for step in 0..6000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (s, e) = spans[(x % n) as usize];
        assert_eq!(t.erase(s).map(|(f, l, v)| (f, l, v.get())), Some((s, e, s as usize + 1)));
        o.store(s, e, None);
        t.validate().unwrap_or_else(|m| panic!("step {step}, erase [{s:#x}, {e:#x}]: {m}"));
        {
            // The merged NULL range is whole (no NULL straddles two leaves): the gap search finds it.
            let g = vmspace_rcu::pin();
            assert!(t.load_range_in(s, &g).is_none());
            let size = 16 + (e - s + 1);
            let w = t.lock();
            assert_eq!(w.empty_area(0, n * 16, size), o.empty_area(0, n * 16, size, false), "step {step}");
            assert_eq!(w.empty_area_rev(0, n * 16, size), o.empty_area(0, n * 16, size, true), "step {step}");
        }
        t.insert_range(s, e, nz(s as usize + 1)).unwrap();
        o.store(s, e, Some(s as usize + 1));
        t.validate().unwrap_or_else(|m| panic!("step {step}, insert [{s:#x}, {e:#x}]: {m}"));
    }
    let g = vmspace_rcu::pin();
    let mut c = t.cursor(&g);
    let all: Vec<_> = std::iter::from_fn(|| c.find(u64::MAX).map(|(s, e, v)| (s, e, v.get()))).collect();
    assert_eq!(all, o.all());
    let st = t.store_stats();
    assert!(st.null_tail > 100, "the shortcut: {st:?}");
    assert!(st.rebuild > st.null_tail + 10, "the fallback: {st:?}");
}

/// The NULL-tail shortcut allocates its three nodes before changing anything: a failed allocation (of the
/// first, second or third) leaves the tree as it was, and the same erase succeeds afterwards.
#[test]
fn null_tail_shortcut_alloc_failure() {
    let n = 600u64;
    let spans: Vec<(u64, u64)> = (0..n).map(|k| (k * 16, k * 16 + 9)).collect();
    let t =
        vmspace_maple::MapleTree::<V>::from_sorted(spans.iter().map(|&(s, e)| (s, e, nz(s as usize + 1))))
            .unwrap();
    let mut taken = 0;
    for &(s, e) in &spans {
        // An erase that allocates fails at each of its allocations in turn, leaving the tree as it was.
        let mut failed = 0;
        for fail in 0..3 {
            let (dump, len) = (t.lock().dump(), t.len());
            t.inject_alloc_failure(Some(fail));
            let r = t.lock().try_erase(s);
            t.inject_alloc_failure(None);
            match r {
                Err(err) => {
                    assert_eq!(err, MapleError::NoMem);
                    assert_eq!((t.lock().dump(), t.len()), (dump, len), "failure {fail} changed the tree");
                    t.validate().unwrap();
                    failed += 1;
                }
                Ok(r) => {
                    assert_eq!(r.map(|(f, l, v)| (f, l, v.get())), Some((s, e, s as usize + 1)));
                    t.insert_range(s, e, nz(s as usize + 1)).unwrap();
                    break;
                }
            }
        }
        if failed < 3 {
            continue;
        }
        let before = t.store_stats();
        assert!(t.erase(s).is_some());
        let after = t.store_stats();
        taken += (after.null_tail == before.null_tail + 1) as usize;
        t.validate().unwrap();
        t.insert_range(s, e, nz(s as usize + 1)).unwrap();
        t.validate().unwrap();
    }
    assert!(taken > 10, "the shortcut was taken {taken} times");
}

/// The churn's two node stores decided from the leaf alone (module `write`, `mas_wr_node_store_churn`: an
/// erase between two gaps, an insert strictly inside a gap) and every case where they hand over to the general
/// path: a leaf that would fall below its minimum (rebalance), a full leaf (split), a range next to the leaf's
/// last slot (the NULL-tail shortcut, the append), a gap at a leaf's edge. Small ranges are inserted at random
/// places inside gaps and random ranges erased, in RCU mode, `validate()` and the oracle after every store;
/// every second store runs with the allocator failing, which fails (ENOMEM, the tree unchanged) exactly when
/// the store needs a node.
#[test]
fn churn_node_stores_at_the_edges() {
    let n = 300u64;
    let t = vmspace_maple::MapleTree::<V>::from_sorted(
        (0..n).map(|k| (k * 100, k * 100 + 9, nz(k as usize + 1))),
    )
    .unwrap();
    let mut o = Oracle::default();
    for k in 0..n {
        o.store(k * 100, k * 100 + 9, Some(k as usize + 1));
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut failed, mut done) = (0, 0);
    for step in 0..8000u64 {
        let fail = step % 2 == 1;
        let dump = t.lock().dump();
        let before = (dump, t.len(), t.store_stats());
        if fail {
            t.inject_alloc_failure(Some(0));
        }
        let r = if rnd() % 3 == 0 {
            // Erase the entry nearest to a random index, if any.
            let k = rnd() % (n * 100);
            match o.0.range(k..).next().map(|(&s, &(e, v))| (s, e, v)) {
                Some((s, e, v)) => t.lock().try_erase(s).map(|r| {
                    assert_eq!(r.map(|(f, l, x)| (f, l, x.get())), Some((s, e, v)), "step {step}");
                    o.store(s, e, None);
                }),
                None => Ok(()),
            }
        } else {
            // Insert 1 to 4 indices strictly inside the gap around a random index, if it is free there.
            let k = rnd() % (n * 100);
            let len = 1 + rnd() % 4;
            let free = k > 0 && o.overlapping(k - 1, k + len).is_empty();
            if free {
                let v = (k + 1) as usize;
                t.insert_range(k, k + len - 1, nz(v)).map(|()| {
                    o.store(k, k + len - 1, Some(v));
                })
            } else {
                Ok(())
            }
        };
        t.inject_alloc_failure(None);
        match r {
            Ok(()) => done += 1,
            Err(e) => {
                assert!(fail, "step {step}: {e:?} without an allocation failure");
                assert_eq!(e, MapleError::NoMem, "step {step}");
                let dump = t.lock().dump();
                let after = (dump, t.len(), t.store_stats());
                assert_eq!(after, before, "step {step}: a failed store changed the tree");
                failed += 1;
            }
        }
        t.validate().unwrap_or_else(|m| panic!("step {step}: {m}"));
    }
    let g = vmspace_rcu::pin();
    let mut c = t.cursor(&g);
    let all: Vec<_> = std::iter::from_fn(|| c.find(u64::MAX).map(|(s, e, v)| (s, e, v.get()))).collect();
    assert_eq!(all, o.all());
    let st = t.store_stats();
    assert!(failed > 10 && done > 4000, "failed {failed}, done {done}");
    assert!(st.node_store > 1000 && st.rebuild > 100 && st.append > 10, "{st:?}");
}
