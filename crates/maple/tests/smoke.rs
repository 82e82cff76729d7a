//! Deterministic smoke tests of the basic API against a brute-force oracle (randomised, fixed seeds).

use std::num::NonZeroUsize;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_maple::MapleTree;

mod common;
use common::{Oracle, Tree, V};

fn v(x: usize) -> V {
    NonZeroUsize::new(x).unwrap()
}

impl Oracle {
    fn load(&self, i: u64) -> Option<usize> {
        self.entry_at(i).map(|(_, _, x)| x)
    }
}

fn check(t: &Tree, o: &Oracle) {
    if let Err(e) = t.validate() {
        panic!("{e}\n{}", t.dump());
    }
    assert_eq!(t.len(), o.0.len());
    let want: Vec<(u64, u64, usize)> = o.0.iter().map(|(s, (e, x))| (*s, *e, *x)).collect();
    assert_eq!(t.contents(), want);
}

#[test]
fn random_stores_small_keyspace() {
    for seed in 0..20u64 {
        let mut r = SmallRng::seed_from_u64(seed);
        let mut t = Tree::Rcu(MapleTree::<V>::new());
        let mut o = Oracle::default();
        for step in 0..400 {
            let f = r.random_range(0..2000u64);
            let w = if r.random_bool(0.1) { 500 } else { 8 };
            let l = f + r.random_range(0..w);
            let val = if r.random_bool(0.3) { None } else { Some(step + 1) };
            t.store_range(f, l, val.map(v)).unwrap();
            o.store(f, l, val);
            check(&t, &o);
            for _ in 0..5 {
                let i = r.random_range(0..2100u64);
                assert_eq!(t.load(i).map(|x| x.get()), o.load(i), "load {i}");
            }
        }
    }
}

fn run(seed: u64, rcu: bool, keys: u64, steps: usize) -> usize {
    let mut r = SmallRng::seed_from_u64(seed);
    let mut t = Tree::new(rcu);
    let mut o = Oracle::default();
    let mut maxh = 0;
    for step in 0..steps {
        let f = r.random_range(0..keys);
        let w = if r.random_bool(0.05) { keys / 20 } else { 8 };
        let l = f + r.random_range(0..w);
        let val = if r.random_bool(0.25) { None } else { Some(step + 1) };
        let got = t.store_range(f, l, val.map(v)).unwrap();
        let want: Vec<(u64, u64, usize)> =
            o.0.iter()
                .filter(|(s, (e, _))| **s <= l && *e >= f)
                .map(|(s, (e, x))| ((*s).max(f), (*e).min(l), *x))
                .collect();
        assert_eq!(got.iter().map(|(a, b, x)| (*a, *b, x.get())).collect::<Vec<_>>(), want);
        o.store(f, l, val);
        if step % 97 == 0 || steps < 1000 {
            check(&t, &o);
        }
        maxh = maxh.max(t.height());
    }
    check(&t, &o);
    maxh
}

#[test]
fn random_stores_both_modes_tall() {
    let mut maxh = 0;
    for seed in 0..3 {
        maxh = maxh.max(run(seed, true, 200_000, 6000));
        maxh = maxh.max(run(seed + 100, false, 200_000, 6000));
    }
    assert!(maxh >= 3, "height {maxh}");
}
