//! The range maps under test: one trait, [`RangeMap`], and its implementations for vmspace's maple tree and the
//! peer structures a Rust program would otherwise reach for.
//!
//! # The model every implementation serves
//!
//! A set of non-overlapping inclusive ranges `[first, last]` of `u64`, each with a non-zero `u64` value: the
//! shape of a process's VMAs. The benchmark workloads need exactly these operations:
//!
//! - [`RangeMap::lookup`]: the value of the range containing an address (the page-fault lookup), taking the
//!   structure's read-side protection (RCU guard, read lock, `ArcSwap` load, ...) *per lookup*;
//! - [`RangeMap::lookup_batch`]: the same over a slice of addresses with the protection taken *once* for the batch
//!   (where the structure has no read-side protection, the two are the same code);
//! - [`RangeMap::for_each`]: every range in ascending order;
//! - [`RangeMap::insert`] / [`RangeMap::remove`]: map a range into a free region, unmap a whole existing range
//!   (the tree-level shape of mmap and munmap). The harness only ever inserts into free space and removes
//!   ranges that exist, so the peers need not implement the maple tree's overwrite-and-split semantics;
//! - [`RangeMap::gap_rev`]: the highest free region of a given size inside `[min, max]` (top-down
//!   `get_unmapped_area`). The maple tree answers from its per-child max-gap tracking; the peers keep no gap
//!   information, so they answer by walking their sorted ranges downward from `max`: [`RangeMap::GAP_SEARCH`]
//!   says which, and the tables print it;
//! - [`RangeMap::dup`]: a full copy (fork's tree duplication; `clone` for the `BTreeMap`s).
//!
//! Structures that can be written through a shared reference while other threads read them also implement
//! [`SharedRangeMap`]; the concurrent workloads (a writer's churn with a reader beside it) use only those.
//!
//! # Keys
//!
//! The `BTreeMap`s and the skip list are keyed by `first` and find the range containing `addr` as the last entry
//! starting at or below `addr` (a reverse range query). `scc::TreeIndex` is keyed by `last` and finds the first
//! entry ending at or above `addr` (its forward `range`, one descent); both then check the other bound.

use arc_swap::ArcSwap;
use crossbeam_skiplist::SkipMap;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::num::NonZeroU64;
use std::ops::Bound;
use vmspace_maple::MapleTree;

/// One range and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First index of the range.
    pub first: u64,
    /// Last index of the range (inclusive).
    pub last: u64,
    /// The value (never 0: the maple tree stores `NonZeroU64`).
    pub value: u64,
}

/// How a structure answers [`RangeMap::gap_rev`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapSearch {
    /// From gap information kept in the structure (O(log n)).
    Native,
    /// By walking the ranges downward from `max` (O(ranges visited)).
    ScanDown,
}

impl GapSearch {
    /// A short description for tables and JSON.
    pub fn describe(self) -> &'static str {
        match self {
            GapSearch::Native => "native (per-node max gap)",
            GapSearch::ScanDown => "scan of sorted ranges downward from max",
        }
    }
}

/// A map of non-overlapping inclusive `u64` ranges to non-zero `u64` values; see the module documentation.
pub trait RangeMap: Sized + Send + Sync {
    /// Short name for tables and JSON.
    const NAME: &'static str;
    /// How [`RangeMap::gap_rev`] works.
    const GAP_SEARCH: GapSearch;
    /// What the read-side protection of [`RangeMap::lookup`] is, for the tables.
    const READ_SIDE: &'static str;
    /// A caveat about how this structure's lookups work, printed with its results (empty: none).
    const CAVEAT: &'static str = "";

    /// Builds the map from ranges sorted by `first` and non-overlapping.
    fn from_sorted(spans: &[Span]) -> Self;
    /// The value of the range containing `addr`, with the read-side protection taken for this lookup only.
    fn lookup(&self, addr: u64) -> Option<u64>;
    /// Looks up every address of `addrs` under one read-side protection; returns the wrapping sum of the values
    /// found (so that nothing can be optimised away) .
    fn lookup_batch(&self, addrs: &[u64]) -> u64;
    /// Calls `f(first, last, value)` for every range in ascending order.
    fn for_each<F: FnMut(u64, u64, u64)>(&self, f: F);
    /// Maps `[first, last]`, which the caller guarantees is free.
    fn insert(&mut self, first: u64, last: u64, value: u64);
    /// Unmaps the range `[first, last]`, which the caller guarantees is exactly one existing range. Returns
    /// whether it was found.
    fn remove(&mut self, first: u64, last: u64) -> bool;
    /// The start of the highest free region of `size` indices inside `[min, max]`, if any.
    fn gap_rev(&self, min: u64, max: u64, size: u64) -> Option<u64>;
    /// A full, independent copy.
    fn dup(&self) -> Self;
    /// The number of ranges.
    fn len(&self) -> usize;
    /// Whether there are no ranges.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A [`RangeMap`] that may be written through a shared reference while other threads read it.
pub trait SharedRangeMap: RangeMap {
    /// [`RangeMap::insert`] through `&self`.
    fn insert_shared(&self, first: u64, last: u64, value: u64);
    /// [`RangeMap::remove`] through `&self`.
    fn remove_shared(&self, first: u64, last: u64) -> bool;
}

/// Gap search over ranges visited in descending order (each `(first, last)`, only ranges with `first <= max`):
/// the highest `start` with `[start, start + size - 1]` free and inside `[min, max]`.
pub fn gap_rev_scan_down(
    desc: impl Iterator<Item = (u64, u64)>,
    min: u64,
    max: u64,
    size: u64,
) -> Option<u64> {
    if size == 0 || max < min || max - min < size - 1 {
        return None;
    }
    // `hi` is the top of the free region being grown downward: everything in (hi, max] has been examined.
    let mut hi = max;
    for (first, last) in desc {
        // The free region between this range and `hi`, clipped to `min`.
        if last < hi {
            let lo = (last + 1).max(min);
            if hi - lo >= size - 1 {
                return Some(hi - size + 1);
            }
        }
        if first <= min {
            return None;
        }
        hi = first - 1;
    }
    if hi - min >= size - 1 { Some(hi - size + 1) } else { None }
}

#[inline]
fn nz(value: u64) -> NonZeroU64 {
    NonZeroU64::new(value).expect("range values are never 0")
}

#[inline]
fn btree_lookup(map: &BTreeMap<u64, (u64, u64)>, addr: u64) -> Option<u64> {
    match map.range(..=addr).next_back() {
        Some((_, &(last, value))) if addr <= last => Some(value),
        _ => None,
    }
}

fn btree_from(spans: &[Span]) -> BTreeMap<u64, (u64, u64)> {
    spans.iter().map(|s| (s.first, (s.last, s.value))).collect()
}

fn btree_gap_rev(map: &BTreeMap<u64, (u64, u64)>, min: u64, max: u64, size: u64) -> Option<u64> {
    gap_rev_scan_down(map.range(..=max).rev().map(|(&f, &(l, _))| (f, l)), min, max, size)
}

fn btree_insert(map: &mut BTreeMap<u64, (u64, u64)>, first: u64, last: u64, value: u64) {
    let old = map.insert(first, (last, value));
    debug_assert!(old.is_none(), "insert into a free region only");
}

fn btree_remove(map: &mut BTreeMap<u64, (u64, u64)>, first: u64, last: u64) -> bool {
    match map.remove(&first) {
        Some((l, _)) => {
            debug_assert_eq!(l, last);
            true
        }
        None => false,
    }
}

/// `std::collections::BTreeMap`, keyed by `first`: the single-threaded baseline every ratio is taken against.
impl RangeMap for BTreeMap<u64, (u64, u64)> {
    const NAME: &'static str = "BTreeMap";
    const GAP_SEARCH: GapSearch = GapSearch::ScanDown;
    const READ_SIDE: &'static str = "none (exclusive owner)";

    fn from_sorted(spans: &[Span]) -> Self {
        btree_from(spans)
    }
    #[inline]
    fn lookup(&self, addr: u64) -> Option<u64> {
        btree_lookup(self, addr)
    }
    #[inline]
    fn lookup_batch(&self, addrs: &[u64]) -> u64 {
        addrs.iter().fold(0u64, |acc, &a| acc.wrapping_add(btree_lookup(self, a).unwrap_or(0)))
    }
    fn for_each<F: FnMut(u64, u64, u64)>(&self, mut f: F) {
        for (&first, &(last, value)) in self {
            f(first, last, value);
        }
    }
    fn insert(&mut self, first: u64, last: u64, value: u64) {
        btree_insert(self, first, last, value);
    }
    fn remove(&mut self, first: u64, last: u64) -> bool {
        btree_remove(self, first, last)
    }
    fn gap_rev(&self, min: u64, max: u64, size: u64) -> Option<u64> {
        btree_gap_rev(self, min, max, size)
    }
    fn dup(&self) -> Self {
        self.clone()
    }
    fn len(&self) -> usize {
        BTreeMap::len(self)
    }
}

/// `parking_lot::RwLock<BTreeMap>`: readers share a lock word (the `mmap_lock` shape).
#[derive(Debug, Default)]
pub struct RwLockMap(pub RwLock<BTreeMap<u64, (u64, u64)>>);

impl RangeMap for RwLockMap {
    const NAME: &'static str = "RwLock<BTreeMap>";
    const GAP_SEARCH: GapSearch = GapSearch::ScanDown;
    const READ_SIDE: &'static str = "parking_lot read lock";

    fn from_sorted(spans: &[Span]) -> Self {
        RwLockMap(RwLock::new(btree_from(spans)))
    }
    #[inline]
    fn lookup(&self, addr: u64) -> Option<u64> {
        btree_lookup(&self.0.read(), addr)
    }
    #[inline]
    fn lookup_batch(&self, addrs: &[u64]) -> u64 {
        let map = self.0.read();
        addrs.iter().fold(0u64, |acc, &a| acc.wrapping_add(btree_lookup(&map, a).unwrap_or(0)))
    }
    fn for_each<F: FnMut(u64, u64, u64)>(&self, mut f: F) {
        for (&first, &(last, value)) in self.0.read().iter() {
            f(first, last, value);
        }
    }
    fn insert(&mut self, first: u64, last: u64, value: u64) {
        self.insert_shared(first, last, value);
    }
    fn remove(&mut self, first: u64, last: u64) -> bool {
        self.remove_shared(first, last)
    }
    fn gap_rev(&self, min: u64, max: u64, size: u64) -> Option<u64> {
        btree_gap_rev(&self.0.read(), min, max, size)
    }
    fn dup(&self) -> Self {
        RwLockMap(RwLock::new(self.0.read().clone()))
    }
    fn len(&self) -> usize {
        self.0.read().len()
    }
}

impl SharedRangeMap for RwLockMap {
    fn insert_shared(&self, first: u64, last: u64, value: u64) {
        btree_insert(&mut self.0.write(), first, last, value);
    }
    fn remove_shared(&self, first: u64, last: u64) -> bool {
        btree_remove(&mut self.0.write(), first, last)
    }
}

/// `arc_swap::ArcSwap<BTreeMap>`: readers load the current snapshot without locking; a writer clones the whole
/// map, changes the copy and swaps it in (so every write costs O(n)).
#[derive(Debug)]
pub struct ArcSwapMap(pub ArcSwap<BTreeMap<u64, (u64, u64)>>);

impl RangeMap for ArcSwapMap {
    const NAME: &'static str = "ArcSwap<BTreeMap>";
    const GAP_SEARCH: GapSearch = GapSearch::ScanDown;
    const READ_SIDE: &'static str = "ArcSwap::load";

    fn from_sorted(spans: &[Span]) -> Self {
        ArcSwapMap(ArcSwap::from_pointee(btree_from(spans)))
    }
    #[inline]
    fn lookup(&self, addr: u64) -> Option<u64> {
        btree_lookup(&self.0.load(), addr)
    }
    #[inline]
    fn lookup_batch(&self, addrs: &[u64]) -> u64 {
        let map = self.0.load();
        addrs.iter().fold(0u64, |acc, &a| acc.wrapping_add(btree_lookup(&map, a).unwrap_or(0)))
    }
    fn for_each<F: FnMut(u64, u64, u64)>(&self, mut f: F) {
        for (&first, &(last, value)) in self.0.load().iter() {
            f(first, last, value);
        }
    }
    fn insert(&mut self, first: u64, last: u64, value: u64) {
        self.insert_shared(first, last, value);
    }
    fn remove(&mut self, first: u64, last: u64) -> bool {
        self.remove_shared(first, last)
    }
    fn gap_rev(&self, min: u64, max: u64, size: u64) -> Option<u64> {
        btree_gap_rev(&self.0.load(), min, max, size)
    }
    fn dup(&self) -> Self {
        ArcSwapMap(ArcSwap::from_pointee(BTreeMap::clone(&self.0.load())))
    }
    fn len(&self) -> usize {
        self.0.load().len()
    }
}

impl SharedRangeMap for ArcSwapMap {
    fn insert_shared(&self, first: u64, last: u64, value: u64) {
        self.0.rcu(|map| {
            let mut copy = BTreeMap::clone(map);
            btree_insert(&mut copy, first, last, value);
            copy
        });
    }
    fn remove_shared(&self, first: u64, last: u64) -> bool {
        let mut found = false;
        self.0.rcu(|map| {
            let mut copy = BTreeMap::clone(map);
            found = btree_remove(&mut copy, first, last);
            copy
        });
        found
    }
}

/// `scc::TreeIndex`, keyed by `last` (value `(first, value)`): a lock-free-read B+ tree with its own epoch
/// reclamation (`scc::Guard`, from `sdd`). Its ordered read API is `range`, a double-ended iterator whose start
/// and end are each found by a descent from the root (scc 3; scc 2.4 found the start by scanning leaves from
/// the smallest key): a lookup is `range(addr..).next()` (the first range ending at or after `addr`), and the
/// gap search walks `range(min..=top).rev()` downward from the range holding `max`.
#[derive(Debug, Default)]
pub struct SccMap(pub scc::TreeIndex<u64, (u64, u64)>);

#[inline]
fn scc_lookup(map: &scc::TreeIndex<u64, (u64, u64)>, addr: u64, guard: &scc::Guard) -> Option<u64> {
    match map.range(addr.., guard).next() {
        Some((_, &(first, value))) if first <= addr => Some(value),
        _ => None,
    }
}

impl RangeMap for SccMap {
    const NAME: &'static str = "scc::TreeIndex";
    const GAP_SEARCH: GapSearch = GapSearch::ScanDown;
    const READ_SIDE: &'static str = "scc::Guard";

    fn from_sorted(spans: &[Span]) -> Self {
        let map = scc::TreeIndex::new();
        for s in spans {
            let fresh = map.insert_sync(s.last, (s.first, s.value));
            debug_assert!(fresh.is_ok());
        }
        SccMap(map)
    }
    #[inline]
    fn lookup(&self, addr: u64) -> Option<u64> {
        scc_lookup(&self.0, addr, &scc::Guard::new())
    }
    #[inline]
    fn lookup_batch(&self, addrs: &[u64]) -> u64 {
        let guard = scc::Guard::new();
        addrs.iter().fold(0u64, |acc, &a| acc.wrapping_add(scc_lookup(&self.0, a, &guard).unwrap_or(0)))
    }
    fn for_each<F: FnMut(u64, u64, u64)>(&self, mut f: F) {
        let guard = scc::Guard::new();
        for (&last, &(first, value)) in self.0.iter(&guard) {
            f(first, last, value);
        }
    }
    fn insert(&mut self, first: u64, last: u64, value: u64) {
        self.insert_shared(first, last, value);
    }
    fn remove(&mut self, first: u64, last: u64) -> bool {
        self.remove_shared(first, last)
    }
    fn gap_rev(&self, min: u64, max: u64, size: u64) -> Option<u64> {
        let guard = scc::Guard::new();
        // The scan down must see the range holding `max` (if any) first: end the range at its key, else at
        // `max` (every range ending at or below `max` starts below it).
        let top = match self.0.range(max.., &guard).next() {
            Some((&last, &(first, _))) if first <= max => last,
            _ => max,
        };
        gap_rev_scan_down(self.0.range(min..=top, &guard).rev().map(|(&l, &(f, _))| (f, l)), min, max, size)
    }
    fn dup(&self) -> Self {
        SccMap(self.0.clone())
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl SharedRangeMap for SccMap {
    fn insert_shared(&self, first: u64, last: u64, value: u64) {
        let fresh = self.0.insert_sync(last, (first, value));
        debug_assert!(fresh.is_ok(), "insert into a free region only");
    }
    fn remove_shared(&self, _first: u64, last: u64) -> bool {
        self.0.remove_sync(&last)
    }
}

/// `crossbeam_skiplist::SkipMap`, keyed by `first`: a lock-free skip list on `crossbeam-epoch`. It pins an
/// epoch inside every call; the batch variant holds an outer pin so the inner ones are nested (cheap) pins.
#[derive(Debug, Default)]
pub struct SkipListMap(pub SkipMap<u64, (u64, u64)>);

#[inline]
fn skip_lookup(map: &SkipMap<u64, (u64, u64)>, addr: u64) -> Option<u64> {
    let e = map.upper_bound(Bound::Included(&addr))?;
    let &(last, value) = e.value();
    (addr <= last).then_some(value)
}

impl RangeMap for SkipListMap {
    const NAME: &'static str = "SkipMap";
    const GAP_SEARCH: GapSearch = GapSearch::ScanDown;
    const READ_SIDE: &'static str = "crossbeam-epoch pin (inside each call)";

    fn from_sorted(spans: &[Span]) -> Self {
        let map = SkipMap::new();
        for s in spans {
            map.insert(s.first, (s.last, s.value));
        }
        SkipListMap(map)
    }
    #[inline]
    fn lookup(&self, addr: u64) -> Option<u64> {
        skip_lookup(&self.0, addr)
    }
    #[inline]
    fn lookup_batch(&self, addrs: &[u64]) -> u64 {
        let _outer = crossbeam_epoch::pin();
        addrs.iter().fold(0u64, |acc, &a| acc.wrapping_add(skip_lookup(&self.0, a).unwrap_or(0)))
    }
    fn for_each<F: FnMut(u64, u64, u64)>(&self, mut f: F) {
        for e in self.0.iter() {
            let &(last, value) = e.value();
            f(*e.key(), last, value);
        }
    }
    fn insert(&mut self, first: u64, last: u64, value: u64) {
        self.insert_shared(first, last, value);
    }
    fn remove(&mut self, first: u64, last: u64) -> bool {
        self.remove_shared(first, last)
    }
    fn gap_rev(&self, min: u64, max: u64, size: u64) -> Option<u64> {
        gap_rev_scan_down(
            self.0.range(..=max).rev().map(|e| {
                let &(last, _) = e.value();
                (*e.key(), last)
            }),
            min,
            max,
            size,
        )
    }
    fn dup(&self) -> Self {
        let map = SkipMap::new();
        for e in self.0.iter() {
            map.insert(*e.key(), *e.value());
        }
        SkipListMap(map)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl SharedRangeMap for SkipListMap {
    fn insert_shared(&self, first: u64, last: u64, value: u64) {
        self.0.insert(first, (last, value));
    }
    fn remove_shared(&self, first: u64, _last: u64) -> bool {
        self.0.remove(&first).is_some()
    }
}

/// vmspace's maple tree (`MapleTree<NonZeroU64>`): lock-free readers under an RCU guard, one writer at a time
/// behind the tree's internal mutex, gap search from the per-child max gaps, `dup` by a depth-first copy.
#[derive(Debug)]
pub struct MapleMap(pub MapleTree<NonZeroU64>);

impl RangeMap for MapleMap {
    const NAME: &'static str = "vmspace MapleTree";
    const GAP_SEARCH: GapSearch = GapSearch::Native;
    const READ_SIDE: &'static str = "vmspace_rcu::pin per lookup (MapleTree::load)";

    fn from_sorted(spans: &[Span]) -> Self {
        let tree = MapleTree::from_sorted(spans.iter().map(|s| (s.first, s.last, nz(s.value))))
            .expect("layouts are sorted and non-overlapping, and allocation does not fail here");
        MapleMap(tree)
    }
    #[inline]
    fn lookup(&self, addr: u64) -> Option<u64> {
        self.0.load(addr).map(NonZeroU64::get)
    }
    #[inline]
    fn lookup_batch(&self, addrs: &[u64]) -> u64 {
        let guard = vmspace_rcu::pin();
        addrs
            .iter()
            .fold(0u64, |acc, &a| acc.wrapping_add(self.0.load_in(a, &guard).map_or(0, NonZeroU64::get)))
    }
    fn for_each<F: FnMut(u64, u64, u64)>(&self, mut f: F) {
        let guard = vmspace_rcu::pin();
        let mut cursor = self.0.cursor(&guard);
        while let Some((first, last, value)) = cursor.find(u64::MAX) {
            f(first, last, value.get());
        }
    }
    fn insert(&mut self, first: u64, last: u64, value: u64) {
        self.insert_shared(first, last, value);
    }
    fn remove(&mut self, first: u64, last: u64) -> bool {
        self.remove_shared(first, last)
    }
    fn gap_rev(&self, min: u64, max: u64, size: u64) -> Option<u64> {
        self.0.empty_area_rev(min, max, size).ok()
    }
    fn dup(&self) -> Self {
        let copy = self.0.dup(|_, _, v| Ok::<NonZeroU64, Infallible>(v), |_| {});
        MapleMap(copy.expect("node allocation does not fail outside failure injection"))
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl SharedRangeMap for MapleMap {
    fn insert_shared(&self, first: u64, last: u64, value: u64) {
        let fresh = self.0.insert_range(first, last, nz(value));
        debug_assert!(fresh.is_ok(), "insert into a free region only");
    }
    fn remove_shared(&self, first: u64, last: u64) -> bool {
        match self.0.erase(first) {
            Some((f, l, _)) => {
                debug_assert_eq!((f, l), (first, last));
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every implementation must agree with a brute-force model on a small index space, so that the benchmark
    //! compares structures doing the same work.

    use super::*;
    use crate::layout;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Indices below this bound are modelled one by one.
    const SPACE: u64 = 4000;

    /// A brute-force model: `owner[i]` is the `(first, last, value)` covering index `i`.
    struct Model {
        owner: Vec<Option<(u64, u64, u64)>>,
    }

    impl Model {
        fn new(spans: &[Span]) -> Self {
            let mut m = Model { owner: vec![None; SPACE as usize] };
            for s in spans {
                m.set(s.first, s.last, Some((s.first, s.last, s.value)));
            }
            m
        }
        fn set(&mut self, first: u64, last: u64, v: Option<(u64, u64, u64)>) {
            for i in first..=last {
                self.owner[i as usize] = v;
            }
        }
        fn lookup(&self, addr: u64) -> Option<u64> {
            self.owner.get(addr as usize).copied().flatten().map(|(_, _, v)| v)
        }
        fn spans(&self) -> Vec<Span> {
            let mut out: Vec<Span> = Vec::new();
            for o in self.owner.iter().flatten() {
                if out.last().is_none_or(|s| s.first != o.0) {
                    out.push(Span { first: o.0, last: o.1, value: o.2 });
                }
            }
            out
        }
        /// Highest fitting start, by trying every start from the top (the model has no range beyond SPACE).
        fn gap_rev(&self, min: u64, max: u64, size: u64) -> Option<u64> {
            if size == 0 || max < min || max - min < size - 1 {
                return None;
            }
            let free = |i: u64| i >= SPACE || self.owner[i as usize].is_none();
            let mut start = max - size + 1;
            loop {
                if (start..=start + size - 1).all(free) {
                    return Some(start);
                }
                if start == min {
                    return None;
                }
                start -= 1;
            }
        }
        /// A free region `[first, first + len - 1]` near `at`, if one exists there.
        fn free_at(&self, at: u64, len: u64) -> Option<(u64, u64)> {
            let last = at.checked_add(len - 1)?;
            (last < SPACE && (at..=last).all(|i| self.owner[i as usize].is_none())).then_some((at, last))
        }
    }

    fn collect<M: RangeMap>(m: &M) -> Vec<Span> {
        let mut out = Vec::new();
        m.for_each(|first, last, value| out.push(Span { first, last, value }));
        out
    }

    fn small_layout(seed: u64) -> Vec<Span> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut at = rng.random_range(0..5u64);
        let mut out = Vec::new();
        while at < SPACE - 40 {
            let len = rng.random_range(1..=12u64);
            out.push(Span { first: at, last: at + len - 1, value: at + 1 });
            at +=
                len + if rng.random_ratio(1, 8) { rng.random_range(10..30) } else { rng.random_range(1..4) };
        }
        out
    }

    /// Checks `M` against the model through a random mix of every operation.
    fn agrees<M: RangeMap>(seed: u64) {
        let spans = small_layout(seed);
        let mut map = M::from_sorted(&spans);
        let mut model = Model::new(&spans);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xabc);
        assert_eq!(collect(&map), model.spans(), "{}: from_sorted", M::NAME);
        for step in 0..600 {
            match rng.random_range(0..6) {
                0 => {
                    let spans_now = model.spans();
                    let s = spans_now[rng.random_range(0..spans_now.len())];
                    assert!(map.remove(s.first, s.last), "{}: remove {s:?}", M::NAME);
                    model.set(s.first, s.last, None);
                }
                1 => {
                    let at = rng.random_range(0..SPACE);
                    if let Some((first, last)) = model.free_at(at, rng.random_range(1..8)) {
                        let value = rng.random_range(1..u64::MAX);
                        map.insert(first, last, value);
                        model.set(first, last, Some((first, last, value)));
                    }
                }
                2 | 3 => {
                    let min = rng.random_range(0..SPACE);
                    let max = rng.random_range(min..SPACE + 50);
                    let size = rng.random_range(1..40);
                    assert_eq!(
                        map.gap_rev(min, max, size),
                        model.gap_rev(min, max, size),
                        "{}: gap_rev({min}, {max}, {size}) at step {step}",
                        M::NAME
                    );
                }
                _ => {
                    let addrs: Vec<u64> = (0..32).map(|_| rng.random_range(0..SPACE + 20)).collect();
                    let mut sum = 0u64;
                    for &a in &addrs {
                        assert_eq!(map.lookup(a), model.lookup(a), "{}: lookup({a}) at step {step}", M::NAME);
                        sum = sum.wrapping_add(model.lookup(a).unwrap_or(0));
                    }
                    assert_eq!(map.lookup_batch(&addrs), sum, "{}: lookup_batch", M::NAME);
                }
            }
        }
        let expect = model.spans();
        assert_eq!(collect(&map), expect, "{}: iteration after churn", M::NAME);
        assert_eq!(map.len(), expect.len());
        let mut copy = map.dup();
        assert_eq!(collect(&copy), expect, "{}: dup", M::NAME);
        let s = expect[0];
        assert!(copy.remove(s.first, s.last));
        assert_eq!(collect(&map), expect, "{}: changing the copy changed the original", M::NAME);
    }

    /// The shared-write entry points do what the exclusive ones do.
    fn shared_agrees<M: SharedRangeMap>() {
        let spans = layout::every_ten(50);
        let map = M::from_sorted(&spans);
        assert!(map.remove_shared(100, 105));
        assert_eq!(map.lookup(102), None);
        map.insert_shared(100, 107, 9);
        assert_eq!(map.lookup(107), Some(9));
        assert_eq!(map.len(), 50);
    }

    #[test]
    fn btreemap_agrees_with_the_model() {
        for seed in 0..3 {
            agrees::<BTreeMap<u64, (u64, u64)>>(seed);
        }
    }

    #[test]
    fn rwlock_agrees_with_the_model() {
        agrees::<RwLockMap>(11);
        shared_agrees::<RwLockMap>();
    }

    #[test]
    fn arcswap_agrees_with_the_model() {
        agrees::<ArcSwapMap>(12);
        shared_agrees::<ArcSwapMap>();
    }

    #[test]
    fn scc_agrees_with_the_model() {
        agrees::<SccMap>(13);
        shared_agrees::<SccMap>();
    }

    #[test]
    fn skipmap_agrees_with_the_model() {
        agrees::<SkipListMap>(14);
        shared_agrees::<SkipListMap>();
    }

    #[test]
    fn maple_agrees_with_the_model() {
        for seed in 20..23 {
            agrees::<MapleMap>(seed);
        }
        shared_agrees::<MapleMap>();
    }

    #[test]
    fn gap_scans_agree_with_brute_force() {
        let mut rng = SmallRng::seed_from_u64(5);
        for seed in 0..4 {
            let spans = small_layout(seed);
            let model = Model::new(&spans);
            for _ in 0..500 {
                let min = rng.random_range(0..SPACE);
                let max = rng.random_range(min..SPACE + 50);
                let size = rng.random_range(1..40);
                let want = model.gap_rev(min, max, size);
                let down = spans.iter().rev().filter(|s| s.first <= max).map(|s| (s.first, s.last));
                assert_eq!(gap_rev_scan_down(down, min, max, size), want, "down ({min}, {max}, {size})");
            }
        }
        assert_eq!(gap_rev_scan_down(std::iter::empty(), 0, u64::MAX, 1), Some(u64::MAX));
        assert_eq!(gap_rev_scan_down(std::iter::empty(), 5, 5, 1), Some(5));
        assert_eq!(gap_rev_scan_down(std::iter::empty(), 5, 5, 2), None);
        assert_eq!(gap_rev_scan_down([(0, 9)].into_iter(), 0, 9, 1), None);
    }

    #[test]
    fn kernel_awalk_answer() {
        let aw = layout::awalk();
        let model = Model::new(&aw);
        assert_eq!(model.gap_rev(0, 2000, 10), Some(1470));
        assert_eq!(BTreeMap::<u64, (u64, u64)>::from_sorted(&aw).gap_rev(0, 2000, 10), Some(1470));
    }
}
