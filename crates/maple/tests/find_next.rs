//! `MapleTree::find_next_in`, the one-descent lookup of the first entry at or after an index (`find_vma`):
//! a model test against `find_in(from, u64::MAX)` and a BTreeMap oracle over random trees with NULL ranges
//! (so that leaves end in NULL ranges and the cursor fallback runs), and a stress test in which a writer
//! moves the boundaries of entries whose values encode their own range (the in-place slot stores and
//! appends, and leaf copies) while readers check every answer: the value encodes the range found, the range
//! ends at or after the index asked, and a stable entry after the window is always found.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_maple::MapleTree;

type V = NonZeroUsize;

fn nz(x: usize) -> V {
    NonZeroUsize::new(x).unwrap()
}

/// The oracle's answer: the entry holding `from`, else the first one starting after it.
fn oracle_find(o: &BTreeMap<u64, (u64, usize)>, from: u64) -> Option<(u64, u64, usize)> {
    let at = o.range(..=from).next_back().filter(|(_, (e, _))| *e >= from);
    at.or_else(|| o.range(from..).next()).map(|(s, (e, x))| (*s, *e, *x))
}

proptest! {
    #[test]
    fn find_next_matches_find_and_the_oracle(
        stores in proptest::collection::vec((0u64..5_000, 1u64..40, proptest::option::of(1usize..1000)), 1..400),
        probes in proptest::collection::vec(0u64..5_100, 1..200),
    ) {
        let t = MapleTree::<V>::new();
        let mut o: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
        for (f, len, v) in stores {
            let l = f + len - 1;
            t.store_range(f, l, v.map(nz)).unwrap();
            // The oracle: cut what overlaps, then insert.
            let over: Vec<(u64, (u64, usize))> =
                o.range(..=l).filter(|(_, (e, _))| *e >= f).map(|(s, x)| (*s, *x)).collect();
            for (s, (e, x)) in over {
                o.remove(&s);
                if s < f {
                    o.insert(s, (f - 1, x));
                }
                if e > l {
                    o.insert(l + 1, (e, x));
                }
            }
            if let Some(x) = v {
                o.insert(f, (l, x));
            }
        }
        t.validate().map_err(TestCaseError::fail)?;
        let g = vmspace_rcu::pin();
        // Every probe, and every range boundary (the first and last index of each entry and of each gap).
        let edges = o.iter().flat_map(|(s, (e, _))| [s.saturating_sub(1), *s, *e, e + 1]);
        for from in probes.into_iter().chain(edges).chain([0, u64::MAX]) {
            let got = t.find_next_in(from, &g).map(|(s, e, x)| (s, e, x.get()));
            let cursor = t.find_in(from, u64::MAX, &g).map(|(s, e, x)| (s, e, x.get()));
            prop_assert_eq!(got, cursor, "from {}", from);
            prop_assert_eq!(got, oracle_find(&o, from), "from {}", from);
        }
    }
}

#[test]
fn empty_tree_and_key_space_ends() {
    let t = MapleTree::<V>::new();
    let g = vmspace_rcu::pin();
    assert_eq!(t.find_next_in(0, &g), None);
    t.store_range(u64::MAX - 9, u64::MAX, Some(nz(7))).unwrap();
    assert_eq!(t.find_next_in(0, &g), Some((u64::MAX - 9, u64::MAX, nz(7))));
    assert_eq!(t.find_next_in(u64::MAX, &g), Some((u64::MAX - 9, u64::MAX, nz(7))));
    t.store_range(0, 0, Some(nz(3))).unwrap();
    assert_eq!(t.find_next_in(0, &g), Some((0, 0, nz(3))));
    assert_eq!(t.find_next_in(1, &g), Some((u64::MAX - 9, u64::MAX, nz(7))));
}

/// The window tiled by entries whose values encode their last index; a stable entry follows it.
const WIN: (u64, u64) = (1_000_000, 1_000_399);
const STABLE: u64 = 2_000_000;

fn enc_last(e: u64) -> V {
    nz((e as usize) << 2 | 1)
}

#[test]
fn find_next_never_tears_under_in_place_stores() {
    let ms = std::env::var("MAPLE_STRESS_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(800u64);
    let t = MapleTree::<V>::new();
    // Filler before the window, so that the window spans several leaves of a deeper tree.
    for k in 0..2_000u64 {
        t.store_range(k * 10, k * 10 + 4, Some(nz(1 << 40 | k as usize))).unwrap();
    }
    let mut s = WIN.0;
    while s <= WIN.1 {
        let e = (s + 7).min(WIN.1);
        t.store_range(s, e, Some(enc_last(e))).unwrap();
        s = e + 1;
    }
    t.store_range(STABLE, STABLE + 99, Some(nz(5))).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        for seed in 0..2u64 {
            let (t, stop) = (&t, &stop);
            sc.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed);
                let mut checked = 0u64;
                while !stop.load(Ordering::Relaxed) || checked == 0 {
                    let g = vmspace_rcu::pin();
                    let i = rng.random_range(WIN.0..=WIN.1);
                    let (s, e, v) = t.find_next_in(i, &g).expect("the window is tiled");
                    assert!(s <= i && i <= e && s >= WIN.0 && e <= WIN.1, "[{s}, {e}] for {i}");
                    assert_eq!(v, enc_last(e), "torn range [{s}, {e}]");
                    let j = rng.random_range(WIN.1 + 1..=STABLE + 99);
                    assert_eq!(t.find_next_in(j, &g), Some((STABLE, STABLE + 99, nz(5))), "from {j}");
                    checked += 1;
                }
            });
        }
        // The writer: stores over [first of an entry, any later index in the window], so every entry after
        // the stored range keeps its last index (and its value stays right); boundary moves take the in-place
        // paths, wider stores copy leaves.
        let mut rng = SmallRng::seed_from_u64(99);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(ms) {
            let i = rng.random_range(WIN.0..=WIN.1);
            let g = vmspace_rcu::pin();
            let (s, _, _) = t.load_range_in(i, &g).unwrap();
            drop(g);
            let l = (i + rng.random_range(0..12)).min(WIN.1);
            t.store_range(s, l, Some(enc_last(l))).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    t.validate().unwrap();
    assert!(t.store_stats().in_place() > 0, "the in-place stores ran");
}
