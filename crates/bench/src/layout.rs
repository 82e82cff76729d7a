//! The range layouts the tree benchmark runs on: the kernel's own benchmark shapes (`lib/test_maple_tree.c`)
//! and VMA-like address spaces at scale.
//!
//! Every layout is a sorted, non-overlapping list of [`Span`]s with non-zero values, so every [`RangeMap`]
//! implementation can be built from it with `from_sorted`.
//!
//! [`RangeMap`]: crate::rangemap::RangeMap

use crate::rangemap::Span;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The 4 KiB page.
pub const PAGE: u64 = 4096;

/// `n` ranges `[i * 10, i * 10 + 5]` (BENCH_LOAD, BENCH_AWALK, BENCH_FORK; and the kernel's `check_forking`).
pub fn every_ten(n: u64) -> Vec<Span> {
    (0..n).map(|i| Span { first: i * 10, last: i * 10 + 5, value: i + 1 }).collect()
}

/// BENCH_MAS_FOR_EACH: a range every 5 indices below 2500 (500 ranges), `[i, i + 4]`, or `[i, i + 3]` when `i` is
/// a multiple of 30 (leaving a one-index hole after it).
pub fn mas_for_each() -> Vec<Span> {
    (0..2500u64)
        .step_by(5)
        .map(|i| Span { first: i, last: i + if i % 30 == 0 { 3 } else { 4 }, value: i + 1 })
        .collect()
}

/// BENCH_AWALK: [`every_ten`]`(250)` with the range `[1470, 1475]` removed.
pub fn awalk() -> Vec<Span> {
    every_ten(250).into_iter().filter(|s| s.first != 1470).collect()
}

/// The size of the large gaps of [`vma_like`], in pages; gap searches at scale ask for half of it.
pub const BIG_GAP_PAGES: u64 = 64;
/// One gap in this many of [`vma_like`] is [`BIG_GAP_PAGES`] wide.
pub const BIG_GAP_EVERY: u32 = 64;

/// A VMA-like address space of `n` page-aligned ranges, from `0x1000_0000` upward: each 1 to 16 pages long,
/// separated by gaps of 1 to 4 pages, except that one gap in [`BIG_GAP_EVERY`] is [`BIG_GAP_PAGES`] pages (so a
/// gap search for `BIG_GAP_PAGES / 2` pages has to pass over about [`BIG_GAP_EVERY`] ranges on average).
/// Deterministic for a given `seed`.
pub fn vma_like(n: usize, seed: u64) -> Vec<Span> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut at = 0x1000_0000u64;
    let mut spans = Vec::with_capacity(n);
    for i in 0..n {
        let pages = rng.random_range(1..=16u64);
        let first = at;
        let last = first + pages * PAGE - 1;
        spans.push(Span { first, last, value: i as u64 + 1 });
        let gap = if rng.random_ratio(1, BIG_GAP_EVERY) { BIG_GAP_PAGES } else { rng.random_range(1..=4u64) };
        at = last + 1 + gap * PAGE;
    }
    spans
}

/// `count` addresses, each inside a range of `spans` chosen uniformly (so every lookup hits), at a random offset
/// within it. Precomputed so that address generation is not timed.
pub fn hit_addresses(spans: &[Span], count: usize, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let s = spans[rng.random_range(0..spans.len())];
            rng.random_range(s.first..=s.last)
        })
        .collect()
}

/// `count` indices into `spans`, uniform: the order in which churn unmaps and remaps ranges.
pub fn churn_order(len: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count).map(|_| rng.random_range(0..len)).collect()
}

/// `count` upper bounds for top-down gap searches: uniform between the start of the layout and just past its
/// end.
pub fn gap_ceilings(spans: &[Span], count: usize, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let lo = spans.first().map_or(0, |s| s.first);
    let hi = spans.last().map_or(0, |s| s.last) + BIG_GAP_PAGES * PAGE;
    (0..count).map(|_| rng.random_range(lo..=hi)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_disjoint(spans: &[Span]) -> bool {
        spans.iter().all(|s| s.first <= s.last && s.value != 0)
            && spans.windows(2).all(|w| w[0].last < w[1].first)
    }

    #[test]
    fn kernel_shapes() {
        let load = every_ten(250);
        assert_eq!(load.len(), 250);
        assert!(sorted_disjoint(&load));
        assert_eq!(load[147], Span { first: 1470, last: 1475, value: 148 });
        let fe = mas_for_each();
        assert_eq!(fe.len(), 500);
        assert!(sorted_disjoint(&fe));
        assert_eq!(fe[6].last, 33);
        assert_eq!(fe[7].first, 35);
        let aw = awalk();
        assert_eq!(aw.len(), 249);
        assert!(aw.iter().all(|s| s.first != 1470));
    }

    #[test]
    fn vma_like_is_page_aligned_and_deterministic() {
        let a = vma_like(1000, 7);
        assert_eq!(a, vma_like(1000, 7));
        assert!(sorted_disjoint(&a));
        assert!(a.iter().all(|s| s.first % PAGE == 0 && (s.last + 1) % PAGE == 0));
        assert!(a.windows(2).all(|w| w[1].first - w[0].last > 1));
        let addrs = hit_addresses(&a, 100, 1);
        assert!(addrs.iter().all(|&x| a.iter().any(|s| s.first <= x && x <= s.last)));
    }
}
