//! Node construction: the "big node" a change gathers its slots into, how slots are distributed over new
//! nodes, filling a node, and the bulk builder for sorted input.
//!
//! A level of a change is described by a run of [`Item`]s covering `[min, max]` of the key space: item `i`
//! covers `[previous last + 1, last]`. At the leaf level `slot` is a value (0 = NULL); at internal levels it is
//! an encoded child and `gap` that child's max gap.
//!
//! Distribution ([`distribute`]): `k = ceil(n / capacity)` nodes of near-equal size; at the leaf level a
//! boundary never falls right after a NULL (a non-right-most leaf must not end in NULL; since NULLs never touch,
//! moving the boundary by one fixes it); if the constraints cannot be met, `k` grows by one.

use std::sync::Arc;

use crate::node::{
    Counters, Enode, INT_GAP_BASE, INT_META, INT_MIN, INT_PIVOTS, INT_SLOT_BASE, INT_SLOTS, LEAF_MIN,
    LEAF_PIVOTS, LEAF_SLOT_BASE, LEAF_SLOTS, Locked, range_size,
};
use crate::{Entry, MapleError, WState, Writer};

/// One slot of a level being rebuilt.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    /// Last index the slot covers.
    pub(crate) last: u64,
    /// The slot's word: a value (0 = NULL) at the leaf level, an [`Enode`]'s word at internal levels.
    pub(crate) slot: usize,
    /// Internal levels: the child's max gap.
    pub(crate) gap: u64,
}

impl Item {
    /// The child of an internal-level item.
    #[inline]
    pub(crate) fn child(&self) -> Enode {
        Enode::from_word(self.slot as u64).expect("maple: an internal item holds a child")
    }
}

/// Capacity of a big node: a change gathers at most 2 nodes' slots + 3 (leaf) plus one neighbour's.
pub(crate) const BIG: usize = 64;

/// A fixed-capacity run of items on the stack (the kernel's `maple_big_node`). Items beyond `len` are
/// uninitialised, so that creating one costs nothing.
pub(crate) struct Big {
    /// First index covered (kept for debugging and dumps of the big node).
    #[allow(dead_code)]
    pub(crate) min: u64,
    items: [std::mem::MaybeUninit<Item>; BIG],
    len: usize,
}

impl Big {
    #[inline]
    pub(crate) fn new(min: u64) -> Self {
        Big { min, items: [const { std::mem::MaybeUninit::uninit() }; BIG], len: 0 }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn items(&self) -> &[Item] {
        // SAFETY: the first `len` items are initialised (`push` writes before it increments `len`);
        // `MaybeUninit<Item>` has the layout of `Item`.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast::<Item>(), self.len) }
    }

    #[inline]
    fn last_mut(&mut self) -> &mut Item {
        debug_assert!(self.len > 0);
        // SAFETY: `len > 0` (callers check), so the item is initialised.
        unsafe { self.items[self.len - 1].assume_init_mut() }
    }

    #[inline]
    pub(crate) fn last_is_null(&self) -> bool {
        self.len > 0 && self.items()[self.len - 1].slot == 0
    }

    /// Appends an internal item.
    #[inline]
    pub(crate) fn push(&mut self, it: Item) {
        assert!(self.len < BIG, "maple: big node overflow (internal invariant)");
        self.items[self.len].write(it);
        self.len += 1;
    }

    /// Appends a leaf item, merging a NULL into a preceding NULL.
    #[inline]
    pub(crate) fn push_leaf(&mut self, last: u64, slot: usize) {
        if slot == 0 && self.last_is_null() {
            self.last_mut().last = last;
        } else {
            self.push(Item { last, slot, gap: 0 });
        }
    }

    /// Puts `front` (covering `[min, self.min - 1]`) before the current items.
    pub(crate) fn prepend(&mut self, min: u64, front: &[Item], leaf: bool) {
        let mut b = Big::new(min);
        for it in front.iter().chain(self.items()) {
            if leaf {
                b.push_leaf(it.last, it.slot);
            } else {
                b.push(*it);
            }
        }
        *self = b;
    }
}

/// The largest NULL range among leaf items covering from `min`.
pub(crate) fn leaf_gap(items: &[Item], min: u64) -> u64 {
    leaf_gap_of(min, items.iter().map(|it| (it.last, it.slot)))
}

/// [`leaf_gap`] over `(last, slot)` pairs in index order starting at `min` (a leaf's slots read in place).
#[inline]
pub(crate) fn leaf_gap_of(min: u64, slots: impl Iterator<Item = (u64, usize)>) -> u64 {
    let mut s = min;
    let mut g = 0;
    for (last, slot) in slots {
        if slot == 0 {
            g = g.max(range_size(s, last));
        }
        s = last.wrapping_add(1);
    }
    g
}

/// Appends the items of node `e` (whose maximum is `max`) to `out`; at the leaf level with `leaf_merge`, a
/// NULL merges into a NULL before it.
pub(crate) fn node_items(lk: Locked<'_>, e: Enode, max: u64, out: &mut Big, leaf_merge: bool) {
    let n = e.locked(lk);
    if e.is_leaf() {
        let end = n.end(LEAF_PIVOTS, max);
        for i in 0..=end {
            let l = if i < end { n.pivot(i) } else { max };
            if leaf_merge {
                out.push_leaf(l, n.leaf_slot_locked(i));
            } else {
                out.push(Item { last: l, slot: n.leaf_slot_locked(i), gap: 0 });
            }
        }
    } else {
        let end = n.end(INT_PIVOTS, max);
        for i in 0..=end {
            let l = if i < end { n.pivot(i) } else { max };
            out.push(Item {
                last: l,
                slot: n.word(INT_SLOT_BASE + i) as usize,
                gap: n.word(INT_GAP_BASE + i),
            });
        }
    }
}

/// Number of used slots of node `e` with maximum `max`.
pub(crate) fn node_count(lk: Locked<'_>, e: Enode, max: u64) -> usize {
    e.locked(lk).end(crate::node::pivots(e.is_leaf()), max) + 1
}

/// Writes `items` (covering `[min, max]`) into node `e`, every word (unused ones zeroed); returns its max gap.
/// Children's parent words are not touched (see [`adopt`]); this node's keeps its parent but its sequence
/// count restarts at 0.
///
/// `e` is the writer's fresh (unpublished) node, or in non-RCU mode a node no reader can see.
#[allow(clippy::needless_range_loop)] // parallel word arrays indexed by slot
pub(crate) fn fill_node(lk: Locked<'_>, e: Enode, items: &[Item], min: u64, max: u64) -> u64 {
    let n = e.locked(lk);
    debug_assert!(!items.is_empty());
    debug_assert_eq!(items[items.len() - 1].last, max);
    // A fresh node starts its leaf sequence count at 0 (module `node`); the parent word is set by the caller.
    n.clear_seq();
    let end = items.len() - 1;
    // Pivots: each item's last index, the node's `max` for the last item, 0 past it.
    for i in 0..crate::node::pivots(e.is_leaf()) {
        n.set_word(
            i,
            match i.cmp(&end) {
                std::cmp::Ordering::Less => items[i].last,
                std::cmp::Ordering::Equal => max,
                std::cmp::Ordering::Greater => 0,
            },
        );
    }
    if e.is_leaf() {
        debug_assert!(items.len() <= LEAF_SLOTS);
        for i in 0..LEAF_SLOTS {
            n.set_word(LEAF_SLOT_BASE + i, if i <= end { items[i].slot as u64 } else { 0 });
        }
        leaf_gap(items, min)
    } else {
        debug_assert!(items.len() <= INT_SLOTS);
        let (mut g, mut go) = (0, 0);
        for i in 0..INT_SLOTS {
            let (c, gi) = if i <= end { (items[i].slot as u64, items[i].gap) } else { (0, 0) };
            n.set_word(INT_SLOT_BASE + i, c);
            n.set_word(INT_GAP_BASE + i, gi);
            if i <= end && (gi > g || i == 0) {
                g = gi;
                go = i;
            }
        }
        n.set_word(INT_META, end as u64 | (go as u64) << 8);
        n.set_word(INT_META + 1, 0);
        g
    }
}

/// Sets the parent word of every child of internal node `e` (the kernel's `mas_adopt_children`).
pub(crate) fn adopt(lk: Locked<'_>, e: Enode) {
    if e.is_leaf() {
        return;
    }
    let n = e.locked(lk);
    let (end, _) = n.meta();
    for i in 0..=end {
        n.child_locked(i).locked(lk).set_parent(Some((e, i)));
    }
}

/// Node sizes for a level of `n` items: balanced, each in `[min, cap]` (when more than one), no leaf boundary
/// right after a NULL. Returns the sizes in `out` and their number, or None if no layout was found.
pub(crate) fn distribute(items: &[Item], leaf: bool, out: &mut [usize; 16]) -> Option<usize> {
    let (cap, min) = if leaf { (LEAF_SLOTS, LEAF_MIN) } else { (INT_SLOTS, INT_MIN) };
    let n = items.len();
    if n <= cap {
        out[0] = n;
        return Some(1);
    }
    let mut k = n.div_ceil(cap);
    while k <= 15 && k <= n {
        let mut b = [0usize; 17];
        for (j, bj) in b.iter_mut().enumerate().take(k + 1) {
            *bj = n * j / k;
        }
        let mut ok = true;
        if leaf {
            for j in 1..k {
                if items[b[j] - 1].slot != 0 {
                    continue;
                }
                let fits = |x: usize| {
                    x - b[j - 1] >= min && x - b[j - 1] <= cap && b[j + 1] - x >= min && b[j + 1] - x <= cap
                };
                if fits(b[j] + 1) {
                    b[j] += 1;
                } else if fits(b[j] - 1) {
                    b[j] -= 1;
                } else {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            for j in 0..k {
                let sz = b[j + 1] - b[j];
                if sz < min || sz > cap {
                    ok = false;
                }
                out[j] = sz;
            }
        }
        if ok {
            return Some(k);
        }
        k += 1;
    }
    None
}

/// Takes a node from the writer's reserve, else allocates one (may fail by injection).
pub(crate) fn alloc(st: &mut WState, counters: &Counters) -> Option<usize> {
    st.pool.pop().or_else(|| counters.alloc())
}

/// Builds nodes for `items` (covering `[min, ..]`) split as `sizes`; appends `(last, enode, gap)` items for the
/// parent level to `up` and every allocated node to `fresh`. ENOMEM leaves the allocated nodes in `fresh`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_nodes(
    lk: Locked<'_>,
    st: &mut WState,
    counters: &Counters,
    items: &[Item],
    min: u64,
    leaf: bool,
    sizes: &[usize],
    up: &mut Vec<Item>,
    fresh: &mut Vec<usize>,
) -> Result<(), MapleError> {
    let mut pos = 0;
    let mut lo = min;
    for &sz in sizes {
        let a = alloc(st, counters).ok_or(MapleError::NoMem)?;
        fresh.push(a);
        let e = Enode::new(a, leaf);
        let chunk = &items[pos..pos + sz];
        let hi = chunk[sz - 1].last;
        let g = fill_node(lk, e, chunk, lo, hi);
        up.push(Item { last: hi, slot: e.word() as usize, gap: g });
        pos += sz;
        lo = hi.wrapping_add(1);
    }
    Ok(())
}

/// Greedy dense packing for the bulk builder: full nodes, one fewer slot where a leaf would end in NULL, the
/// last two nodes rebalanced if the last is under the minimum.
fn pack(items: &[Item], leaf: bool) -> Vec<usize> {
    let (cap, min) = if leaf { (LEAF_SLOTS, LEAF_MIN) } else { (INT_SLOTS, INT_MIN) };
    let n = items.len();
    let mut sizes = Vec::with_capacity(n / (cap - 1) + 2);
    let mut pos = 0;
    while n - pos > cap {
        let mut take = cap;
        if leaf && items[pos + take - 1].slot == 0 {
            take -= 1;
        }
        sizes.push(take);
        pos += take;
    }
    let rest = n - pos;
    if rest < min && !sizes.is_empty() {
        let prev = sizes.pop().unwrap_or(0);
        let start = pos - prev;
        let mut out = [0usize; 16];
        let k = distribute(&items[start..], leaf, &mut out).unwrap_or_else(|| {
            out[0] = prev;
            out[1] = rest;
            2
        });
        sizes.extend_from_slice(&out[..k]);
    } else {
        sizes.push(rest);
    }
    sizes
}

/// The bulk builder behind [`crate::MapleTree::from_sorted`] (the tree is new and empty).
pub(crate) fn from_sorted<T: Entry>(
    w: &mut Writer<'_, T>,
    iter: impl IntoIterator<Item = (u64, u64, T)>,
) -> Result<(), MapleError> {
    let mut items: Vec<Item> = Vec::new();
    let mut next: Option<u64> = Some(0);
    let mut count = 0u64;
    for (f, l, v) in iter {
        let Some(nx) = next else { return Err(MapleError::Invalid) };
        if f > l || f < nx {
            return Err(MapleError::Invalid);
        }
        if f > nx {
            items.push(Item { last: f - 1, slot: 0, gap: 0 });
        }
        items.push(Item { last: l, slot: v.into_raw().get(), gap: 0 });
        count += 1;
        next = l.checked_add(1);
    }
    if count == 0 {
        return Ok(());
    }
    if next.is_some() {
        items.push(Item { last: u64::MAX, slot: 0, gap: 0 });
    }
    let (tree, lk, st) = w.parts();
    let counters = Arc::clone(&tree.counters);
    let mut fresh = Vec::new();
    let mut leaf = true;
    let mut height = 0;
    let root = loop {
        let sizes = pack(&items, leaf);
        let mut up = Vec::with_capacity(sizes.len());
        if let Err(e) = build_nodes(lk, st, &counters, &items, 0, leaf, &sizes, &mut up, &mut fresh) {
            for a in fresh {
                // SAFETY: never published.
                unsafe { counters.free_now(a) };
            }
            return Err(e);
        }
        height += 1;
        if up.len() == 1 {
            break up[0].child();
        }
        items = up;
        leaf = false;
    };
    adopt_tree(lk, root);
    root.locked(lk).set_parent(None);
    // Release: publishes the filled nodes (pairs with readers' Acquire root load).
    tree.root.store(root.word(), vmspace_rcu::sync::Ordering::Release);
    // Relaxed: a statistic maintained by the writer.
    tree.len.store(count, vmspace_rcu::sync::Ordering::Relaxed);
    st.height = height;
    Ok(())
}

/// Adopts every internal node's children in the subtree of `e` (used on freshly built subtrees).
pub(crate) fn adopt_tree(lk: Locked<'_>, e: Enode) {
    if e.is_leaf() {
        return;
    }
    adopt(lk, e);
    let n = e.locked(lk);
    let (end, _) = n.meta();
    for i in 0..=end {
        adopt_tree(lk, n.child_locked(i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf_items(pattern: &[usize]) -> Vec<Item> {
        pattern.iter().enumerate().map(|(i, &s)| Item { last: i as u64 * 10 + 9, slot: s, gap: 0 }).collect()
    }

    #[test]
    fn distribute_balances_and_respects_bounds() {
        let mut out = [0; 16];
        for n in 1..=BIG {
            let items = leaf_items(&vec![1; n]);
            let k = distribute(&items, true, &mut out).unwrap();
            assert_eq!(out[..k].iter().sum::<usize>(), n);
            if k > 1 {
                assert!(
                    out[..k].iter().all(|&s| (LEAF_MIN..=LEAF_SLOTS).contains(&s)),
                    "{n}: {:?}",
                    &out[..k]
                );
            }
            let k = distribute(&items, false, &mut out).unwrap();
            assert_eq!(out[..k].iter().sum::<usize>(), n);
            if k > 1 {
                assert!(out[..k].iter().all(|&s| (INT_MIN..=INT_SLOTS).contains(&s)));
            }
        }
    }

    #[test]
    fn distribute_never_splits_after_null() {
        let mut out = [0; 16];
        for n in 17..=BIG {
            for phase in 0..2 {
                let pat: Vec<usize> = (0..n).map(|i| if (i + phase) % 2 == 0 { 0 } else { 1 }).collect();
                let items = leaf_items(&pat);
                let k = distribute(&items, true, &mut out).unwrap();
                let mut pos = 0;
                for &sz in &out[..k - 1] {
                    pos += sz;
                    assert_ne!(items[pos - 1].slot, 0, "n={n} phase={phase} sizes={:?}", &out[..k]);
                }
            }
        }
    }

    #[test]
    fn leaf_gap_counts_null_ranges() {
        let items = [
            Item { last: 9, slot: 0, gap: 0 },
            Item { last: 19, slot: 1, gap: 0 },
            Item { last: u64::MAX, slot: 0, gap: 0 },
        ];
        assert_eq!(leaf_gap(&items[..2], 0), 10);
        assert_eq!(leaf_gap(&items, 0), u64::MAX - 19);
        assert_eq!(leaf_gap(&[Item { last: u64::MAX, slot: 0, gap: 0 }], 0), u64::MAX);
    }

    #[test]
    fn pack_is_dense_and_valid() {
        let items = leaf_items(&vec![1; 1000]);
        let sizes = pack(&items, true);
        assert_eq!(sizes.iter().sum::<usize>(), 1000);
        assert!(sizes.iter().all(|&s| (LEAF_MIN..=LEAF_SLOTS).contains(&s)));
        assert!(sizes.len() <= 1000 / 16 + 2);
    }
}
