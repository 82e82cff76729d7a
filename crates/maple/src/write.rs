//! Stores: one algorithm for every shape of change, level by level from the leaves up, and shortcuts that
//! change one leaf, under the kernel's names (`lib/maple_tree.c`, the `mas_wr_*` family).
//!
//! A store of `[first, last]` into an empty tree makes one root leaf ([`store_empty`]). Otherwise it walks to
//! the leaf holding `first` (or, made through a write cursor, starts from the path the cursor cached there:
//! [`store_at`], module `cursor`; nothing else differs; a plain store starts from the cursor's path too while
//! it is valid: [`store`]). The churn's two node stores (an erase of a range between two gaps, an insert
//! strictly inside a gap) are recognised first from the words around the store's slot and made in
//! straight-line code ([`mas_wr_node_store_churn`], with the result the general path would give); otherwise
//! [`mas_wr_store_type`] decides the store's shape
//! ([`StoreType`], the kernel's `enum store_type`) from that leaf's pivots and slots alone, before anything is
//! gathered or allocated (a NULL store first takes in the NULL ranges it touches, `mas_wr_extend_null`; the new
//! slot count is `mas_wr_new_end`'s), and [`mas_wr_store_entry`] carries it out:
//!
//! | kernel (`lib/maple_tree.c`) | here | what changes |
//! |---|---|---|
//! | `mas_wr_store_type` / `enum store_type` | [`mas_wr_store_type`] / [`StoreType`] | nothing: decides the shape |
//! | `mas_wr_store_entry` | [`mas_wr_store_entry`] (through [`store_on_path`]) | dispatches on the shape |
//! | `mas_new_root`, `mas_store_root` (`wr_new_root`, `wr_store_root`) | [`store_empty`] | a store into the empty tree: one root leaf |
//! | `wr_exact_fit` (one `rcu_assign_pointer`) | [`mas_wr_exact_fit`] | one slot word of a live leaf (both modes) |
//! | `mas_wr_slot_store` | [`mas_wr_slot_store`] | one pivot and at most one slot of a live leaf, under its sequence count |
//! | `mas_wr_append` | [`mas_wr_append`] | one or two slots more at a live leaf's end, under its sequence count |
//! | `mas_wr_node_store` | [`mas_wr_node_store`] | one leaf whose slot count changes: rewritten in place under its sequence count (the kernel copies it in RCU mode) |
//! | (the same two shapes of it, decided before `mas_wr_store_type`) | [`mas_wr_node_store_churn`] | an erase between two gaps (three slots become one), an insert strictly inside a gap (one becomes three) |
//! | `mas_wr_split` | [`mas_wr_split`] → [`mas_wr_bnode`] | the leaf overflows: split, ancestors as far as they overflow |
//! | `mas_wr_rebalance` | [`mas_wr_rebalance`] → [`mas_wr_bnode`] | the leaf underflows: merged with a neighbour, ancestors as far as they underflow |
//! | `mas_wr_spanning_store` (`mas_is_span_wr`) | [`mas_wr_spanning_store`] → [`mas_wr_bnode`] | a store across leaves, or a NULL at the end of a leaf that is not the right-most |
//! | (the kernel rebuilds here) | [`mas_wr_null_tail`] | that NULL when the next leaf is a sibling starting with a NULL: two new leaves and a new parent, without the big nodes |
//! | `mas_wr_bnode`, `maple_big_node`, `mas_push_data` | [`mas_wr_bnode`] ([`Rebuild`], [`Gather`], [`Gather::push_data`]) | the general rebuild below |
//!
//! The leaf stores in detail:
//!
//! * the **exact fit**: the range is exactly one existing leaf slot and the store keeps every invariant (no NULL
//!   next to a NULL, no NULL at the end of a non-right-most leaf); one Release store of the slot, in place in
//!   both modes (plus in-place max-gap bookkeeping when the slot changes between NULL and non-NULL). A reader
//!   sees the old or the new value with the same range.
//! * In RCU mode three shapes change the live leaf in place inside one write section of the leaf's sequence
//!   count (module `node`, "the leaf sequence count": `WRITING` set, `fence(Release)`, the words, count plus
//!   one with Release):
//!   * the **slot store** (`mas_wr_slot_store` as the kernel allows it in RCU mode, `offset_end - offset == 1`):
//!     the slot count is unchanged, one pivot `j` moves and at most one of slots `j`, `j + 1` changes. Both
//!     directions: the store starts at slot `j`'s first index and ends inside slot `j + 1` (slot `j` takes the
//!     new value, `pivot[j] = last`), or starts inside slot `j` and ends at slot `j + 1`'s last index
//!     (`pivot[j] = first - 1`, slot `j + 1` takes the value). A VMA that grows into or shrinks from a gap, or
//!     a boundary between two VMAs that moves, is this shape (the moved pivot alone, with no slot store, when
//!     the value stays or NULLs merge);
//!   * the **append** (`mas_wr_append`): the store lies in the leaf's last range, and the leaf grows by one
//!     slot at its end (the store ends at the leaf's max: the old content keeps `[min, first - 1]` and the
//!     value takes a new last slot; or it starts at the range's first index: the value takes the old last
//!     slot and the old content moves one slot right) or by two (strictly inside: the content is kept on both
//!     sides), within the leaf's 16 slots;
//!   * the **node store** (`mas_wr_node_store`): the change stays inside the leaf, whose slot count changes
//!     (an mmap into a gap: one slot becomes three; an munmap between two gaps: three become one) and the new
//!     leaf satisfies every invariant (NULLs merged, min fill, no NULL at the end of a non-right-most leaf).
//!     Its slots are gathered and every word that differs is stored ([`rewrite_live_leaf`]: the tail of the
//!     leaf moves by one or two slots). The kernel copies the leaf here, because its readers have no way to
//!     notice a leaf changing under them; ours check the leaf's sequence count around every read, so the
//!     copy, its publication in the parent's slot, the dead mark, the grace period and the recycled node
//!     (each a line a reader of the same tree shares) are not needed.
//!
//!   A shape above whose leaf's sequence count is at its last value (a fresh copy starts again from 0, so a
//!   count never repeats during a leaf's life) or whose parent's address reaches the count's bits (never on the
//!   supported platforms: module `node`) is a node store that fills one new leaf and publishes it in the
//!   parent's slot (or as the root). In non-RCU mode, where no reader exists, the node store rewrites the leaf
//!   in place without the count.
//!
//! The commonest spanning store, an munmap of a leaf's last range (a NULL that would end a leaf that is not the
//! right-most, so it joins the next leaf's leading NULL and the boundary between the leaves moves), is made by
//! [`mas_wr_null_tail`] when the next leaf is a sibling under the same parent and starts with a NULL: the two
//! leaves' slots are split evenly over two new leaves and the parent is copied with the boundary pivot moved,
//! filled and published exactly as the rebuild below would publish the same result (allocation first, one
//! Release publication, adoption, dead marks, retirement), in straight-line code over at most 32 slots.
//!
//! Otherwise it rebuilds the affected part of the tree (the kernel's big-node approach):
//!
//! 1. **Leaf level.** Gather, into a big node, the slots of every leaf intersecting `[first, last]`: those
//!    outside the range are kept, the overlapped ones are clipped and the new entry goes in between; NULLs
//!    coalesce. The overlapped parts are the *replaced* entries. The big node covers `[lc, hc]` (the first
//!    leaf's min to the last leaf's max).
//! 2. **Constraints.** If it ends in NULL below `u64::MAX`, append the next leaf (so a NULL range never
//!    straddles leaves). If it has fewer slots than the minimum and does not cover the whole key space, append
//!    the next node (or prepend the previous one at the right edge). If it overflows a single node and replaces
//!    a single node, first try to absorb a sibling under the same parent (the kernel's `mas_push_data`): two
//!    nodes then replace two, and the parent keeps its slot count.
//! 3. **Distribute** over `k` new nodes ([`crate::build::distribute`]).
//! 4. **Up.** If one old node became one new node, publish it in the parent's slot (same range, so the parent
//!    is unchanged but for its gap) and stop. Otherwise move to the parent level: gather the slots of every node
//!    there that intersects `[lc, hc]`, keeping children outside `[lc, hc]` and splicing the new nodes in place
//!    of those inside, and continue at step 2. A level whose big node is a single child covering everything is
//!    passed through (the tree shrinks); new nodes at the root level get a new root above them (the tree grows).
//!
//! Readers never see a leaf half-way through an in-place store: every leaf read (lookups, cursor walks and
//! cached cursor steps, gap searches) is bracketed by the leaf's `read_begin` / `read_check` and read again (or
//! the cursor re-walks) if the count moved; see the crate docs, "Readers and writers". [`StoreStats`] counts
//! the stores by path.
//!
//! Every allocation happens before anything visible changes; on ENOMEM the new nodes are freed and the tree is
//! untouched. Then: adopt children (parent words), publish (one Release store), update gaps upward in place,
//! mark each replaced node dead (Release) and retire it (RCU mode: after a grace period; non-RCU: at once). In
//! non-RCU mode the final one-for-one node is rewritten in place instead of copied.
//!
//! Worst case per level: 49 gathered leaf slots (16 + 1 + 16 + 16), or 34 internal ones, hence at most 4 new
//! nodes per level plus a new root: [`crate::MapleTree::worst_case_nodes`] = `4 * height + 1`.

use std::sync::Arc;

use vmspace_rcu::sync::Ordering;

use crate::build::{Big, Item, adopt, alloc, build_nodes, distribute, fill_node, node_count, node_items};
use crate::node::{
    ADDR_LIMIT, Counters, Enode, INT_MIN, INT_PIVOTS, INT_SLOT_BASE, INT_SLOTS, LEAF_MIN, LEAF_PIVOTS,
    LEAF_SLOTS, Level, Locked, MAX_HEIGHT, RETIRE_BATCH, pivots, range_size,
};
use crate::{Entry, MapleError, MapleTree, StoreStats, WState, Writer};

/// A root-to-depth path.
pub(crate) struct Path {
    pub(crate) lv: [Level; MAX_HEIGHT],
}

/// The writer's descent (the lock is held, every node is live): from level `from`, whose node `start` covers
/// `key` within `[start.min, start.max]`, down along `key` to `depth` or to the leaf, whichever comes first.
/// `visit(d, lvl)` sees every level passed, with its offset recomputed; the last level is returned.
///
/// Always inlined: its callers keep the levels they want (the whole path, or only the last) in their own
/// storage, and a visitor that writes into a path returned by value then builds it in the caller's slot (an
/// outlined walk on a local made the compiler copy the 640-byte path out).
#[inline(always)]
fn descend(
    lk: Locked<'_>,
    start: Level,
    from: usize,
    key: u64,
    depth: usize,
    mut visit: impl FnMut(usize, Level),
) -> Level {
    let Level { mut e, mut min, mut max, .. } = start;
    debug_assert!(min <= key && key <= max, "descent from level {from} does not cover {key}");
    let mut d = from;
    loop {
        let n = e.locked(lk);
        let np = pivots(e.is_leaf());
        let i = n.scan(np, key);
        let lvl = Level { e, min, max, off: i, seq: 0 };
        visit(d, lvl);
        if d >= depth || e.is_leaf() {
            return lvl;
        }
        (e, min, max) = (n.child_locked(i), n.slot_first(i, min), n.slot_last(np, i, max));
        d += 1;
    }
}

/// Walks from `root` to `depth` along `key` (writer side: the lock is held, every node is live).
pub(crate) fn walk(lk: Locked<'_>, root: Enode, key: u64, depth: usize) -> Path {
    let top = Level::root(root);
    let mut p = Path { lv: [top; MAX_HEIGHT] };
    descend(lk, top, 0, key, depth, |d, l| p.lv[d] = l);
    p
}

/// Walks path `p` from its level `from` down to `depth` along `key`: level `from`'s node, `min` and `max` are
/// kept (its node covers `key`), its offset and every level below are recomputed. [`walk`] is this from the
/// root; a write cursor ([`crate::WriteCursor`]) starts it at the deepest cached level that covers `key`.
#[inline]
pub(crate) fn walk_from(lk: Locked<'_>, p: &mut Path, from: usize, key: u64, depth: usize) {
    descend(lk, p.lv[from], from, key, depth, |d, l| p.lv[d] = l);
}

/// The node at depth `d` holding `key` ([`walk`] keeping only the last level: no path is built).
fn node_at(lk: Locked<'_>, root: Enode, key: u64, d: usize) -> Level {
    descend(lk, Level::root(root), 0, key, d, |_, _| {})
}

/// Max gap of a live leaf: one pass over its slots in place, to its end.
fn leaf_node_gap(lk: Locked<'_>, e: Enode, min: u64, max: u64) -> u64 {
    let n = e.locked(lk);
    let (mut s, mut g) = (min, 0);
    for i in 0..LEAF_SLOTS {
        let l = if i < LEAF_PIVOTS { n.pivot(i).min(max) } else { max };
        if n.leaf_slot_locked(i) == 0 {
            g = g.max(range_size(s, l));
        }
        if l >= max {
            break;
        }
        s = l + 1;
    }
    g
}

/// Max gap of a leaf whose end (last used slot) is `end`: one pass over its used slots (NULLs are never
/// adjacent, so each NULL slot is a whole NULL range).
#[inline]
fn leaf_gap_to(n: &crate::node::Node, min: u64, max: u64, end: usize) -> u64 {
    let (mut s, mut g) = (min, 0);
    for i in 0..end {
        let l = n.pivot(i);
        if n.leaf_slot_locked(i) == 0 {
            g = g.max(range_size(s, l));
        }
        s = l.wrapping_add(1);
    }
    if n.leaf_slot_locked(end) == 0 {
        g = g.max(range_size(s, max));
    }
    g
}

/// The largest gap word of internal node `n` and the first slot holding it. Over all its slots, with no bound
/// to test: the gap words past the node's end are zero (as `validate` checks), so they never win.
#[inline]
fn max_gap_of(n: &crate::node::Node) -> (u64, usize) {
    let (mut m, mut mo) = (n.gap(0), 0);
    for i in 1..INT_SLOTS {
        let gi = n.gap(i);
        if gi > m {
            (m, mo) = (gi, i);
        }
    }
    (m, mo)
}

/// Records child `off`'s new max gap `g` in the path's node at `depth` and propagates upward while the node's
/// max gap changes (the kernel's `mas_update_gap`). In place: gaps are only read by gap searches.
fn propagate_gap(lk: Locked<'_>, p: &Path, mut depth: usize, mut g: u64) {
    loop {
        let lv = p.lv[depth];
        let n = lv.e.locked(lk);
        if n.gap(lv.off) == g {
            // Unchanged: no store at all, so that readers' cached copies of this node stay valid.
            return;
        }
        let (end, go) = n.meta();
        let old_max = n.gap(go);
        n.set_gap(lv.off, g);
        // The node's max gap (the first slot holding it, as a full scan finds it): only a fall of the slot that
        // held it needs the scan; a rise or a change elsewhere is decided by one comparison.
        let (m, mo) = if g > old_max || (g == old_max && lv.off < go) {
            (g, lv.off)
        } else if lv.off != go {
            (old_max, go)
        } else {
            max_gap_of(n)
        };
        if mo != go {
            n.set_meta(end, mo);
        }
        if m == old_max || depth == 0 {
            return;
        }
        g = m;
        depth -= 1;
    }
}

/// A store: raw `val` (0 = NULL) over `[first, last]`; with `insert`, only if the whole range is empty.
#[derive(Clone, Copy)]
struct Req {
    first: u64,
    last: u64,
    val: usize,
    insert: bool,
}

/// Replaced entries, clipped to the store's range. Inline up to two: the address space's stores replace at most
/// one or two entries apart from a munmap over many VMAs, so the common store allocates nothing for them.
pub(crate) type Replaced = smallvec::SmallVec<[(u64, u64, usize); 2]>;

/// The slot word of an optional value: 0 (NULL) for None, else the value's raw word.
#[inline]
pub(crate) fn raw_word<T: Entry>(value: Option<T>) -> usize {
    value.map_or(0, |v| v.into_raw().get())
}

/// Typed copies of the entries a store replaced.
///
/// # Safety
///
/// Every word of `replaced` is a non-NULL leaf word of a tree of `T`, so it came from [`Entry::into_raw`] of a
/// `T` (a store reports only the non-NULL entries it replaced).
pub(crate) unsafe fn typed_replaced<T: Entry>(replaced: Replaced) -> Vec<(u64, u64, T)> {
    replaced
        .into_iter()
        .map(|(s, e, r)| {
            // SAFETY: the caller's contract: `r` is non-zero and was produced by `T::into_raw`.
            (s, e, unsafe { T::from_raw(std::num::NonZeroUsize::new_unchecked(r)) })
        })
        .collect()
}

/// Stores raw `val` (0 = NULL) over `[first, last]`; returns the replaced (clipped) raw entries. With
/// `insert`, fails with EEXIST (before allocating or changing anything) if any index of the range is taken.
///
/// Tries, in order: a store into the empty tree, the exact fit, the node store, the NULL-tail shortcut, and the
/// general rebuild (see the module docs). The leaf is found from the writer cursor's path when that is still
/// the tree's (`CursorState::take_finger`: a walk down from its deepest level covering `first`, the leaf
/// itself for an insert after an erase of the same range), else by a walk from the root into the cursor's
/// boxed path storage (`CursorState::take_scratch`), so that no 20-level path is initialised or copied per
/// store.
pub(crate) fn store<T: Entry>(
    w: &mut Writer<'_, T>,
    first: u64,
    last: u64,
    val: usize,
    insert: bool,
) -> Result<Replaced, MapleError> {
    let (tree, lk, st) = w.parts();
    // Relaxed: the writer reads its own stores.
    let root = match Enode::from_word(tree.root.load(Ordering::Relaxed)) {
        Some(root) if first <= last => root,
        _ => return store_at(tree, lk, st, first, last, val, insert, None).map(|(r, _)| r),
    };
    let leaf_d = st.height - 1;
    let p = match st.cursor.take_finger(st.stamp, first, leaf_d) {
        // The writer's cursor path is still the tree's (`CursorState::take_finger`): walk down from its deepest
        // level covering `first` (the leaf itself after an erase of the same range: no walk but the leaf's
        // scan). A walk from its level 0 starts at the root: counted as a descent.
        Some((mut p, d)) => {
            debug_assert!(p.lv[0].e == root, "a valid cursor path starts at the root");
            st.descents += (d == 0) as u64;
            walk_from(lk, &mut p, d, first, leaf_d);
            p
        }
        // The walk from the root, into the cursor's boxed path storage (see `CursorState::take_scratch`):
        // counted as the descent `store_at` would count for it.
        None => {
            st.descents += 1;
            let mut p = st.cursor.take_scratch(root);
            walk_from(lk, &mut p, 0, first, leaf_d);
            p
        }
    };
    let r = store_at(tree, lk, st, first, last, val, insert, Some(&p));
    st.cursor.put_scratch(p);
    r.map(|(r, _)| r)
}

/// What a store left of the path it started from, for a write cursor to refresh only the replaced part
/// ([`crate::WriteCursor`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum After {
    /// Every node of the path is still in the tree with its range (an in-place store, a non-RCU rewrite, or no
    /// change); only the leaf's offsets may have moved.
    Kept,
    /// The leaf was copied: this new leaf, with the same range, replaced the path's leaf.
    Leaf(Enode),
    /// The subtree below the path's node at `depth` was replaced: `e` now sits in that node's slot (same range,
    /// same height); the levels `0..=depth` are unchanged.
    Below { depth: usize, e: Enode },
    /// The root changed (tree growth, collapse, empty tree): the whole path is stale.
    Root,
}

/// [`store`] given the tree's parts; `cached`, if given, is the path a walk from the root to the leaf along
/// `first` would return (a write cursor's, positioned at `first`), and replaces that walk: every other step of
/// the store is the same. Without it, the store walks from the root and counts a descent
/// ([`crate::Writer::descents`]). Returns what the store left of the path ([`After`]).
#[allow(clippy::too_many_arguments)] // The request's four words and the writer's three parts, passed by value.
pub(crate) fn store_at<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    first: u64,
    last: u64,
    val: usize,
    insert: bool,
    cached: Option<&Path>,
) -> Result<(Replaced, After), MapleError> {
    if first > last {
        return Err(MapleError::Invalid);
    }
    // Every store may change the tree's nodes: a write cursor positioned before it re-walks (module `cursor`).
    st.stamp += 1;
    let req = Req { first, last, val, insert };
    // Relaxed: the writer reads its own stores.
    let Some(root) = Enode::from_word(tree.root.load(Ordering::Relaxed)) else {
        return store_empty(tree, lk, st, req).map(|r| (r, After::Root));
    };
    match cached {
        Some(p) => {
            debug_assert!(p.lv[0].e == root && p.lv[st.height - 1].e.is_leaf(), "stale cached path");
            store_on_path(tree, lk, st, req, root, p)
        }
        None => {
            st.descents += 1;
            // Walked in place (the path is 20 levels: no copy of it on the way).
            let p = walk(lk, root, first, st.height - 1);
            store_on_path(tree, lk, st, req, root, &p)
        }
    }
}

/// The shape of a store, as the kernel's `enum store_type` (`include/linux/maple_tree.h`) names it; decided by
/// [`mas_wr_store_type`] from the leaf holding the store's first index, before anything is gathered or
/// allocated, and carried out by [`mas_wr_store_entry`]. The store into an empty tree (`wr_new_root` /
/// `wr_store_root`) is decided before a leaf exists ([`store_empty`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreType {
    /// `wr_exact_fit`: the range is exactly one slot; one slot word changes ([`mas_wr_exact_fit`]).
    ExactFit,
    /// `wr_slot_store`: one pivot moves, at most one of its two slots changes, in place under the leaf's
    /// sequence count ([`mas_wr_slot_store`]).
    SlotStore,
    /// `wr_append`: the leaf's last range is split, one or two slots more at its end, in place under the
    /// sequence count ([`mas_wr_append`]).
    Append,
    /// `wr_node_store`: the change stays in the leaf, whose slot count changes ([`mas_wr_node_store`]).
    NodeStore,
    /// `wr_split_store`: the leaf overflows ([`mas_wr_split`]).
    SplitStore,
    /// `wr_rebalance`: the leaf underflows, or the tree empties ([`mas_wr_rebalance`]).
    Rebalance,
    /// `wr_spanning_store`: the store ends beyond the leaf, or leaves a NULL at the end of a leaf that is not
    /// the right-most (`mas_is_span_wr`: the NULL spans into the next leaf) ([`mas_wr_spanning_store`]).
    SpanningStore,
}

/// What [`mas_wr_store_type`] found in the leaf (the part of the kernel's `ma_wr_state` the leaf stores use):
/// the store's slots before and after the NULL ranges it touches are taken in.
#[derive(Clone, Copy)]
struct WrLeaf {
    /// The leaf's path level (`off`: the slot holding the store's first index).
    lv: Level,
    /// The leaf's depth.
    leaf_d: usize,
    /// The slots holding the store's first and last index (`offset`, `offset_end`).
    i0: usize,
    oe0: usize,
    /// The same after a NULL store took in the NULL ranges it touches (`mas_wr_extend_null`), with the
    /// store's range widened to match.
    i: usize,
    oe: usize,
    first: u64,
    last: u64,
    /// The (widened) range starts at slot `i`'s first index / ends at slot `oe`'s last index.
    at_min: bool,
    at_max: bool,
    /// Slots the store adds beside the ones it covers (one per side where it does not reach its slot's edge).
    extra: usize,
    /// The leaf's last used slot before the store.
    end: usize,
    /// RCU mode and the leaf can take an in-place store under its sequence count ([`seq_usable`]); decided
    /// only for the in-leaf shapes (false for the exact fit and the spanning store, which do not use it).
    live: bool,
}

/// `mas_wr_store_type`: the shape of store `req` in the leaf on path `p` (see [`StoreType`]), from the leaf's
/// pivots and slots alone (the new slot count is `mas_wr_new_end`'s). `Err(Exists)` for an insert over a taken
/// index of the leaf (a spanning insert is checked by the rebuild).
fn mas_wr_store_type(
    lk: Locked<'_>,
    st: &WState,
    p: &Path,
    req: Req,
) -> Result<(StoreType, WrLeaf), MapleError> {
    let Req { first: first0, last: last0, val, insert } = req;
    let leaf_d = st.height - 1;
    let lv = p.lv[leaf_d];
    let n = lv.e.locked(lk);
    // Slot `k` is the leaf's last (its end) iff its pivot is implied or equals the leaf's max.
    let is_end = |k: usize| k == LEAF_PIVOTS || n.pivot(k) >= lv.max;
    let slot = |k: usize| n.leaf_slot_locked(k);
    let rmin = |k: usize| n.slot_first(k, lv.min);
    let rmax = |k: usize| n.slot_last(LEAF_PIVOTS, k, lv.max);
    let i0 = lv.off;
    let mut w = WrLeaf {
        lv,
        leaf_d,
        i0,
        oe0: i0,
        i: i0,
        oe: i0,
        first: first0,
        last: last0,
        at_min: false,
        at_max: false,
        extra: 0,
        end: i0,
        live: false,
    };
    if last0 > lv.max {
        return Ok((StoreType::SpanningStore, w));
    }
    while !is_end(w.oe0) && n.pivot(w.oe0) < last0 {
        w.oe0 += 1;
    }
    if insert && (i0..=w.oe0).any(|k| slot(k) != 0) {
        return Err(MapleError::Exists);
    }
    let oe0 = w.oe0;
    if oe0 == i0 && rmin(i0) == first0 && rmax(i0) == last0 {
        // A NULL may not land next to a NULL, nor at the end of a leaf that is not the right-most.
        let old = slot(i0);
        let ok = val != 0
            || old == 0
            || ((i0 == 0 || slot(i0 - 1) != 0)
                && if !is_end(i0) { slot(i0 + 1) != 0 } else { lv.max == u64::MAX });
        if ok {
            return Ok((StoreType::ExactFit, w));
        }
    }
    let (mut i, mut oe, mut first, mut last) = (i0, oe0, first0, last0);
    if val == 0 {
        if slot(i) == 0 {
            first = rmin(i);
        } else if first == rmin(i) && i > 0 && slot(i - 1) == 0 {
            i -= 1;
            first = rmin(i);
        }
        if slot(oe) == 0 {
            last = rmax(oe);
        } else if last == rmax(oe) && !is_end(oe) && slot(oe + 1) == 0 {
            oe += 1;
            last = rmax(oe);
        }
    }
    let mut end = oe;
    while !is_end(end) {
        end += 1;
    }
    let (at_min, at_max) = (first == rmin(i), last == rmax(oe));
    let extra = !at_min as usize + !at_max as usize;
    w = WrLeaf { i, oe, first, last, at_min, at_max, extra, end, ..w };
    // `mas_wr_new_end`: the slots before `i` and after `oe`, the store's, and the remainders beside it.
    let new_count = i + 1 + extra + (end - oe);
    let last_val = if oe == end && at_max { val } else { slot(end) };
    if last_val == 0 && lv.max != u64::MAX {
        return Ok((StoreType::SpanningStore, w));
    }
    w.live = st.rcu && seq_usable(lk, p, leaf_d);
    if w.live {
        if oe == i + 1 && extra == 1 {
            return Ok((StoreType::SlotStore, w));
        }
        if i == oe && oe == end && extra > 0 && new_count <= LEAF_SLOTS {
            return Ok((StoreType::Append, w));
        }
    }
    Ok(if new_count > LEAF_SLOTS {
        (StoreType::SplitStore, w)
    } else if (leaf_d > 0 && new_count < LEAF_MIN) || (leaf_d == 0 && new_count == 1 && last_val == 0) {
        (StoreType::Rebalance, w)
    } else {
        (StoreType::NodeStore, w)
    })
}

/// [`store_at`] once the path `p` to the leaf holding the store's first index is known: the kernel's
/// `mas_wr_store_entry`, which carries out the shape [`mas_wr_store_type`] decided.
fn store_on_path<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    req: Req,
    root: Enode,
    p: &Path,
) -> Result<(Replaced, After), MapleError> {
    mas_wr_store_entry(tree, lk, st, req, root, p)
}

/// `mas_wr_store_entry`: see [`store_on_path`].
fn mas_wr_store_entry<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    req: Req,
    root: Enode,
    p: &Path,
) -> Result<(Replaced, After), MapleError> {
    if let Some(r) = mas_wr_node_store_churn(tree, lk, st, p, req) {
        return Ok((r, After::Kept));
    }
    let (ty, w) = mas_wr_store_type(lk, st, p, req)?;
    match ty {
        StoreType::ExactFit => Ok((mas_wr_exact_fit(tree, lk, p, &w, req, &mut st.stores), After::Kept)),
        StoreType::SlotStore => Ok((mas_wr_slot_store(tree, lk, st, p, &w, req), After::Kept)),
        StoreType::Append => Ok((mas_wr_append(tree, lk, st, p, &w, req), After::Kept)),
        StoreType::NodeStore if w.live => Ok((mas_wr_node_store_live(tree, lk, st, p, &w, req), After::Kept)),
        StoreType::NodeStore => match mas_wr_node_store(tree, lk, st, p, req) {
            Some(r) => {
                let leaf = w.lv.e;
                r.map(|(r, e)| (r, if e == leaf { After::Kept } else { After::Leaf(e) }))
            }
            None => mas_wr_bnode(tree, lk, st, req, root),
        },
        StoreType::SplitStore => mas_wr_split(tree, lk, st, req, root),
        StoreType::Rebalance => mas_wr_rebalance(tree, lk, st, req, root),
        StoreType::SpanningStore => match mas_wr_null_tail(tree, lk, st, p, &w, req) {
            Some(r) => r,
            None => mas_wr_spanning_store(tree, lk, st, req, root),
        },
    }
}

/// The spanning store of a NULL that would end a leaf that is not the right-most (`mas_is_span_wr`'s second
/// case: an munmap of a leaf's last range), when the next leaf is the leaf's sibling under the same parent and
/// starts with a NULL: the NULL joins that leading NULL, so the boundary between the two leaves moves. Instead
/// of the general rebuild ([`mas_wr_bnode`]: gathering both leaves and the parent into big nodes, distributing
/// them, walking again to publish) it makes the result the rebuild would make of two leaves under one parent,
/// in straight-line code, and publishes it the same way:
///
/// * the two leaves' slots after the store (the left leaf's before the store, with the part of slot `w.i`
///   before it; the merged NULL, from `w.first` to the end of the next leaf's leading NULL; the next leaf's
///   others) split evenly over two new leaves `L'` and `R'`, at a boundary that leaves both within their
///   minimum and capacity and does not follow a NULL (no leaf but the right-most ends in NULL). Both are new
///   nodes, because both ranges change: a reader that reached an old leaf through the old parent reads a leaf
///   that never changes again and is then marked dead. Splitting evenly (rather than only moving the NULL)
///   keeps the next leaf from filling up as the churn moves ranges into it;
/// * the parent `P'`: a copy with the boundary pivot moved, the two children and their gaps replaced, its
///   largest-gap offset recomputed; published in the grandparent's slot (Release) or as the root.
///
/// Then the children are adopted, the gap is propagated above `P'`, and the three old nodes are marked dead and
/// retired. Every node is allocated and filled before anything is published; on ENOMEM nothing changed. None
/// (the caller rebuilds) when the shape does not apply: non-RCU mode, a root leaf, the next leaf under another
/// parent or not starting with a NULL, or no even split that fits.
fn mas_wr_null_tail<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    p: &Path,
    w: &WrLeaf,
    req: Req,
) -> Option<Result<(Replaced, After), MapleError>> {
    let (lv, leaf_d) = (w.lv, w.leaf_d);
    if !st.rcu || leaf_d == 0 || req.val != 0 || req.last > lv.max || !(w.oe == w.end && w.at_max) {
        return None;
    }
    // The left leaf keeps slots `0..i` and, if the store starts inside slot `i`, that slot's first part.
    let keep = w.i + !w.at_min as usize;
    let pl = p.lv[leaf_d - 1];
    let pn = pl.e.locked(lk);
    let k = pl.off;
    let (pend, _) = pn.meta();
    if k >= pend {
        return None;
    }
    let re = pn.child_locked(k + 1);
    let rn = re.locked(lk);
    let rmax = pn.slot_last(INT_PIVOTS, k + 1, pl.max);
    if rn.leaf_slot_locked(0) != 0 {
        return None;
    }
    let r0_last = rn.slot_last(LEAF_PIVOTS, 0, rmax);
    let n = lv.e.locked(lk);
    // The two leaves' slots after the store: the left leaf's kept ones, the merged NULL, the next leaf's others,
    // split evenly (as the rebuild's rebalance of two leaves would) at a boundary that leaves both within their
    // minimum and capacity and does not follow a NULL.
    let mut items = [Item::default(); 2 * LEAF_SLOTS];
    for (j, it) in items.iter_mut().enumerate().take(keep) {
        let last = if j + 1 == keep { w.first - 1 } else { n.pivot(j) };
        *it = Item { last, slot: n.leaf_slot_locked(j), gap: 0 };
    }
    let rend = rn.end(LEAF_PIVOTS, rmax);
    items[keep] = Item { last: r0_last, slot: 0, gap: 0 };
    for j in 1..=rend {
        items[keep + j] =
            Item { last: rn.slot_last(LEAF_PIVOTS, j, rmax), slot: rn.leaf_slot_locked(j), gap: 0 };
    }
    let total = keep + rend + 1;
    let fits = |s: usize| {
        (LEAF_MIN..=LEAF_SLOTS).contains(&s)
            && (LEAF_MIN..=LEAF_SLOTS).contains(&(total - s))
            && items[s - 1].slot != 0
    };
    let split = [total / 2, total / 2 + 1, (total / 2).saturating_sub(1)].into_iter().find(|&s| fits(s))?;
    // Allocate all three first: on failure nothing visible changed.
    let mut got = [0usize; 3];
    for j in 0..3 {
        match alloc(st, &tree.counters) {
            Some(a) => got[j] = a,
            None => {
                for &a in &got[..j] {
                    // SAFETY: never published.
                    unsafe { tree.counters.free_now(a) };
                }
                return Some(Err(MapleError::NoMem));
            }
        }
    }
    let (replaced, delta) = wr_replaced(n, w, req);
    let (le, re2, pe) = (Enode::new(got[0], true), Enode::new(got[1], true), Enode::new(got[2], false));
    let new_lmax = items[split - 1].last;
    let lgap = fill_node(lk, le, &items[..split], lv.min, new_lmax);
    let rgap = fill_node(lk, re2, &items[split..total], new_lmax + 1, rmax);
    // P': the parent with the boundary pivot moved and the two children replaced.
    let pn2 = pe.locked(lk);
    pn2.copy_words_from(pn);
    pn2.clear_seq();
    pn2.set_word(k, new_lmax);
    pn2.set_word(INT_SLOT_BASE + k, le.word());
    pn2.set_word(INT_SLOT_BASE + k + 1, re2.word());
    pn2.set_gap(k, lgap);
    pn2.set_gap(k + 1, rgap);
    let (pg, pgo) = max_gap_of(pn2);
    pn2.set_meta(pend, pgo);
    adopt(lk, pe);
    // Publish P' (Release: its contents and its children's happen-before a reader that loads it).
    let after = if leaf_d == 1 {
        pn2.set_parent(None);
        tree.root.store(pe.word(), Ordering::Release);
        After::Root
    } else {
        let gl = p.lv[leaf_d - 2];
        pn2.set_parent(Some((gl.e, gl.off)));
        // Release (inside set_child): publishes the new subtree.
        gl.e.locked(lk).set_child(gl.off, pe);
        propagate_gap(lk, p, leaf_d - 2, pg);
        After::Below { depth: leaf_d - 2, e: pe }
    };
    for old in [lv.e, re, pl.e] {
        old.locked(lk).mark_dead();
        // SAFETY: unpublished above (the parent's replacement no longer names them), marked dead, retired once.
        unsafe { retire(st, &tree.counters, old.addr()) };
    }
    st.stores.rebuild += 1;
    st.stores.null_tail += 1;
    add_len(tree, delta);
    Some(Ok((replaced, after)))
}

/// `mas_wr_split`: the leaf overflows; the rebuild ([`mas_wr_bnode`]) splits it (absorbing a sibling first when
/// the two fit in two nodes, `mas_push_data`) and splits its ancestors as far as they overflow.
fn mas_wr_split<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    req: Req,
    root: Enode,
) -> Result<(Replaced, After), MapleError> {
    mas_wr_bnode(tree, lk, st, req, root)
}

/// `mas_wr_rebalance`: the leaf underflows (or the tree empties); the rebuild ([`mas_wr_bnode`]) merges it with
/// a neighbour and the ancestors as far as they underflow (the tree may shrink).
fn mas_wr_rebalance<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    req: Req,
    root: Enode,
) -> Result<(Replaced, After), MapleError> {
    mas_wr_bnode(tree, lk, st, req, root)
}

/// `mas_wr_spanning_store`: the store crosses leaves (or leaves a NULL at a leaf's end, which then spans into
/// the next leaf); the rebuild ([`mas_wr_bnode`]) gathers every leaf it touches.
fn mas_wr_spanning_store<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    req: Req,
    root: Enode,
) -> Result<(Replaced, After), MapleError> {
    mas_wr_bnode(tree, lk, st, req, root)
}

/// `mas_wr_bnode`: the general store through big nodes, level by level from the leaves up (module docs,
/// [`Rebuild`]); every node allocated first, then [`commit`]. On failure nothing changed.
fn mas_wr_bnode<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    req: Req,
    root: Enode,
) -> Result<(Replaced, After), MapleError> {
    let counters = &tree.counters;
    let mut rb = Rebuild {
        lk,
        root,
        h: st.height,
        st,
        counters,
        fresh: Vec::new(),
        retire: Vec::new(),
        adopt: Vec::new(),
    };
    match rb.run(req) {
        Err(e) => {
            for a in rb.fresh {
                // SAFETY: never published.
                unsafe { counters.free_now(a) };
            }
            Err(e)
        }
        Ok(mut plan) => {
            rb.st.stores.rebuild += 1;
            let replaced = std::mem::take(&mut plan.replaced);
            plan.retire = rb.retire;
            plan.adopt = rb.adopt;
            let after = match plan.top {
                Top::Root(_) => After::Root,
                Top::Slot { depth, e, .. } => After::Below { depth, e },
            };
            commit(tree, lk, rb.st, counters, plan);
            Ok((replaced, after))
        }
    }
}

/// A store into the empty tree: one root leaf (with NULL ranges around the entry).
fn store_empty<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    req: Req,
) -> Result<Replaced, MapleError> {
    let Req { first, last, val, .. } = req;
    if val == 0 {
        return Ok(Replaced::new());
    }
    let mut b = Big::new(0);
    if first > 0 {
        b.push_leaf(first - 1, 0);
    }
    b.push_leaf(last, val);
    if last < u64::MAX {
        b.push_leaf(u64::MAX, 0);
    }
    let e = Enode::new(alloc(st, &tree.counters).ok_or(MapleError::NoMem)?, true);
    fill_node(lk, e, b.items(), 0, u64::MAX);
    e.locked(lk).set_parent(None);
    // Release: publishes the filled leaf (pairs with readers' Acquire root load).
    tree.root.store(e.word(), Ordering::Release);
    st.height = 1;
    st.stores.empty += 1;
    add_len(tree, 1);
    Ok(Replaced::new())
}

/// `mas_wr_exact_fit` (the kernel's `wr_exact_fit` case of `mas_wr_store_entry`): `[first, last]` is exactly
/// slot `w.i0` of the leaf and storing the value there keeps every invariant ([`mas_wr_store_type`] checked).
/// One Release store of the slot, in place in both modes, plus gap bookkeeping when the slot changes between
/// NULL and non-NULL. A reader sees the old or the new value with the same range.
fn mas_wr_exact_fit<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    p: &Path,
    w: &WrLeaf,
    req: Req,
    stats: &mut StoreStats,
) -> Replaced {
    let (lv, i, leaf_d) = (w.lv, w.i0, w.leaf_d);
    let n = lv.e.locked(lk);
    let old = n.leaf_slot_locked(i);
    let mut replaced = Replaced::new();
    if old != 0 {
        replaced.push((req.first, req.last, old));
    }
    if old == req.val {
        return replaced;
    }
    n.set_leaf_slot(i, req.val);
    stats.exact_fit += 1;
    if (old == 0) != (req.val == 0) {
        if leaf_d > 0 {
            propagate_gap(lk, p, leaf_d - 1, leaf_node_gap(lk, lv.e, lv.min, lv.max));
        }
        add_len(tree, if req.val == 0 { -1 } else { 1 });
    }
    replaced
}

/// `mas_wr_node_store`: the change stays inside the leaf on path `p` and the leaf still satisfies every
/// invariant afterwards; its slot count changes (or a shape above could not be made in place). The leaf's new
/// slots are gathered ([`Gathered::leaf`]) and written: in place under the leaf's sequence count
/// ([`rewrite_live_leaf`]; RCU mode, the count has room), as a new leaf published in the parent's slot (or as
/// the root) with the old one retired (RCU mode, the count at its last value), or rewritten in place (non-RCU
/// mode, where no reader exists). Returns the replaced entries and the leaf now in the tree. None if the
/// gathered leaf does not fit after all (the caller rebuilds).
fn mas_wr_node_store<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    p: &Path,
    req: Req,
) -> Option<Result<(Replaced, Enode), MapleError>> {
    let leaf_d = st.height - 1;
    let lv = p.lv[leaf_d];
    if req.last > lv.max {
        return None;
    }
    let mut big = Big::new(lv.min);
    let mut g = Gathered::default();
    g.leaf(lk, lv, req, &mut big);
    if req.insert && !g.replaced.is_empty() {
        return Some(Err(MapleError::Exists));
    }
    let fits = big.len() <= LEAF_SLOTS
        && (leaf_d == 0 || big.len() >= LEAF_MIN)
        && !(big.last_is_null() && lv.max != u64::MAX)
        && !(leaf_d == 0 && big.len() == 1 && big.items()[0].slot == 0);
    if !fits {
        return None;
    }
    let len_delta = g.len_delta(req);
    st.stores.node_store += 1;
    // RCU mode: rewritten in place under the leaf's sequence count when the count has room and the parent's
    // address stays below the count's bits (always, on the supported platforms); copied otherwise.
    let live = st.rcu && seq_usable(lk, p, leaf_d);
    let e = if st.rcu && !live {
        match alloc(st, &tree.counters) {
            Some(a) => Enode::new(a, true),
            None => return Some(Err(MapleError::NoMem)),
        }
    } else {
        lv.e
    };
    let gap = if live {
        rewrite_live_leaf(lk, e, big.items(), lv.min, lv.max)
    } else {
        fill_node(lk, e, big.items(), lv.min, lv.max)
    };
    if e != lv.e {
        if leaf_d == 0 {
            e.locked(lk).set_parent(None);
            // Release: publishes the new leaf (pairs with readers' Acquire root load).
            tree.root.store(e.word(), Ordering::Release);
        } else {
            let pl = p.lv[leaf_d - 1];
            e.locked(lk).set_parent(Some((pl.e, pl.off)));
            // Release (inside set_child): publishes the new leaf.
            pl.e.locked(lk).set_child(pl.off, e);
        }
        lv.e.locked(lk).mark_dead();
        // SAFETY: unpublished above, marked dead, retired once; not used afterwards.
        unsafe { retire(st, &tree.counters, lv.e.addr()) };
    }
    if leaf_d > 0 {
        propagate_gap(lk, p, leaf_d - 1, gap);
    }
    add_len(tree, len_delta);
    Some(Ok((g.replaced, e)))
}

/// `mas_wr_node_store` on a live leaf in RCU mode (the common node store: an mmap into a gap, an munmap between
/// gaps): the leaf's new tail is built straight from what [`mas_wr_store_type`] found (the slots before `w.i`
/// stay; then the part of slot `w.i` before the store, the store, the part of slot `w.oe` after it, and the
/// slots after `w.oe`; no NULL lands next to a NULL, because the classification took the touched NULL ranges
/// in) and every word from slot `w.i` on that differs is stored, inside one write section of the leaf's
/// sequence count ([`rewrite_live_leaf`] is the same for gathered slots). The classification guarantees the
/// new slot count fits the leaf and its minimum, and that the leaf does not end in NULL unless it is the
/// right-most.
fn mas_wr_node_store_live<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    p: &Path,
    w: &WrLeaf,
    req: Req,
) -> Replaced {
    let lv = w.lv;
    let n = lv.e.locked(lk);
    let (i, oe, end) = (w.i, w.oe, w.end);
    // The new slots from `i`: the head (the part of slot `i` before the store, the store, the part of slot `oe`
    // after it), then slots `oe + 1..=end` moved by `shift`.
    let head = 1 + !w.at_min as usize + !w.at_max as usize;
    let new_end = i + head - 1 + (end - oe);
    debug_assert!(new_end < LEAF_SLOTS);
    let shift = new_end as isize - end as isize;
    // The head's old words, read before anything moves.
    let (vi, vo, lo) = (n.leaf_slot_locked(i), n.leaf_slot_locked(oe), n.slot_last(LEAF_PIVOTS, oe, lv.max));
    let (replaced, delta) = wr_replaced(n, w, req);
    // The largest NULL range the store touches (0: none), for the leaf's new max gap below.
    let mut touched = 0;
    for j in i..=oe {
        if n.leaf_slot_locked(j) == 0 {
            touched = touched.max(range_size(n.slot_first(j, lv.min), n.slot_last(LEAF_PIVOTS, j, lv.max)));
        }
    }
    // Slot `j` takes `(last, v)`: only the words that differ are stored (the pivot of slot 15 is implied).
    let put = |j: usize, l: u64, v: usize| {
        if j < LEAF_PIVOTS && n.pivot(j) != l {
            n.set_pivot_live(j, l);
        }
        if n.leaf_slot_locked(j) != v {
            n.set_leaf_slot(j, v);
        }
    };
    let mv = |j: usize| {
        let t = (j as isize + shift) as usize;
        put(t, n.slot_last(LEAF_PIVOTS, j, lv.max), n.leaf_slot_locked(j));
    };
    let seq = n.write_begin();
    // The tail moves first (toward the end from its last slot, toward the start from its first, so that no slot
    // is overwritten before it is read); words past the new end are cleared (unused words are zero: validate).
    if shift > 0 {
        (oe + 1..=end).rev().for_each(mv);
    } else if shift < 0 {
        (oe + 1..=end).for_each(mv);
        for j in new_end + 1..=end {
            put(j, 0, 0);
        }
    }
    let mut j = i;
    if !w.at_min {
        put(j, w.first - 1, vi);
        j += 1;
    }
    put(j, w.last, req.val);
    if !w.at_max {
        put(j + 1, lo, vo);
    }
    n.write_end(seq);
    st.stores.node_store += 1;
    if w.leaf_d > 0 && (req.val == 0 || touched > 0) {
        // The leaf's max gap, exact without a scan in the churn's two shapes: a NULL store makes one NULL range
        // `[first, last]` of the ranges it took in, so the max is the larger of the old max (the parent's gap
        // word, exact) and that range; a value that shrinks only NULL ranges smaller than the old max leaves it.
        let pl = p.lv[w.leaf_d - 1];
        let old = pl.e.locked(lk).gap(pl.off);
        let g = if req.val == 0 {
            old.max(range_size(w.first, w.last))
        } else if touched < old {
            old
        } else {
            leaf_gap_to(n, lv.min, lv.max, new_end)
        };
        propagate_gap(lk, p, w.leaf_d - 1, g);
    }
    add_len(tree, delta);
    replaced
}

/// The two node stores an munmap and an mmap between other mappings make, decided from the leaf's words around
/// the store's slot alone and carried out in place, before (and instead of) the general classification
/// [`mas_wr_store_type`] and [`mas_wr_node_store_live`], whose results for these shapes they equal:
///
/// * the **erase between two gaps**: a NULL store of exactly the range of slot `i` holding a value, where
///   slots `i - 1` and `i + 1` are NULL and slot `i + 1` is not the leaf's last. The three slots become one
///   NULL (`[slot i - 1's first, slot i + 1's last]`), the tail `i + 2..=end` moves two slots left and the
///   two words past the new end are cleared; the leaf keeps at least [`LEAF_MIN`] slots. The leaf's new max
///   gap is the larger of its old one (the parent's gap word) and the merged NULL;
/// * the **insert into a gap**: a value stored strictly inside NULL slot `i`, which is not the leaf's last.
///   Slot `i` becomes three (NULL, the value, NULL), the tail `i + 1..=end` moves two slots right, within the
///   leaf's 16 slots. The max gap is unchanged unless the split NULL held it (then one pass over the leaf).
///
/// Both run inside one write section of the leaf's sequence count (RCU mode; the count has room: [`seq_usable`])
/// and only below the root (the parent holds the leaf's gap word). None: another shape, or a condition not met
/// (the general path decides it, with the same result where it is one of these).
#[inline]
fn mas_wr_node_store_churn<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    p: &Path,
    req: Req,
) -> Option<Replaced> {
    let leaf_d = st.height - 1;
    if !st.rcu || leaf_d == 0 {
        return None;
    }
    let lv = p.lv[leaf_d];
    let n = lv.e.locked(lk);
    let i = lv.off;
    // Used slot `k` is not the leaf's last (its pivot is below the leaf's max, not implied).
    let inner = |k: usize| k < LEAF_PIVOTS && n.pivot(k) < lv.max;
    let Req { first, last, val, .. } = req;
    let (replaced, delta, gap);
    if val == 0 {
        // The erase between two gaps.
        let v = n.leaf_slot_locked(i);
        // Slot `i` ends at `last`, below the leaf's max: so slot `i + 1` exists (`inner` reads only used slots:
        // the pivot words past the end are zero).
        if v == 0
            || i == 0
            || last >= lv.max
            || !inner(i + 1)
            || n.pivot(i - 1).wrapping_add(1) != first
            || n.pivot(i) != last
            || n.leaf_slot_locked(i - 1) != 0
            || n.leaf_slot_locked(i + 1) != 0
        {
            return None;
        }
        let mut end = i + 2;
        while inner(end) {
            end += 1;
        }
        // The new slot count is `end - 1`.
        if end - 1 < LEAF_MIN || !seq_usable(lk, p, leaf_d) {
            return None;
        }
        let (nf, nl) = (n.slot_first(i - 1, lv.min), n.pivot(i + 1));
        let seq = n.write_begin();
        n.set_pivot_live(i - 1, nl);
        for j in i + 2..=end {
            if j - 2 < LEAF_PIVOTS {
                n.set_pivot_live(j - 2, n.slot_last(LEAF_PIVOTS, j, lv.max));
            }
            n.set_leaf_slot(j - 2, n.leaf_slot_locked(j));
        }
        // Unused words are zero (as `validate` checks).
        for j in end - 1..=end {
            if j < LEAF_PIVOTS {
                n.set_pivot_live(j, 0);
            }
            n.set_leaf_slot(j, 0);
        }
        n.write_end(seq);
        let pl = p.lv[leaf_d - 1];
        gap = pl.e.locked(lk).gap(pl.off).max(range_size(nf, nl));
        replaced = Replaced::from_buf_and_len([(first, last, v), (0, 0, 0)], 1);
        delta = -1;
    } else {
        // The insert into a gap.
        if n.leaf_slot_locked(i) != 0 || !inner(i) {
            return None;
        }
        let (nf, nl) = (n.slot_first(i, lv.min), n.pivot(i));
        if !(nf < first && last < nl) {
            return None;
        }
        let mut end = i + 1;
        while inner(end) {
            end += 1;
        }
        // The new slot count is `end + 3`; the leaf's last slot keeps its value (a leaf that is not the
        // right-most does not end in NULL).
        if end + 3 > LEAF_SLOTS || !seq_usable(lk, p, leaf_d) {
            return None;
        }
        let seq = n.write_begin();
        for j in (i + 1..=end).rev() {
            if j + 2 < LEAF_PIVOTS {
                n.set_pivot_live(j + 2, n.slot_last(LEAF_PIVOTS, j, lv.max));
            }
            n.set_leaf_slot(j + 2, n.leaf_slot_locked(j));
        }
        n.set_pivot_live(i + 1, last);
        n.set_leaf_slot(i + 1, val);
        if i + 2 < LEAF_PIVOTS {
            n.set_pivot_live(i + 2, nl);
        }
        n.set_leaf_slot(i + 2, 0);
        n.set_pivot_live(i, first - 1);
        n.write_end(seq);
        let pl = p.lv[leaf_d - 1];
        let old = pl.e.locked(lk).gap(pl.off);
        gap = if range_size(nf, nl) < old { old } else { leaf_gap_to(n, lv.min, lv.max, end + 2) };
        replaced = Replaced::new();
        delta = 1;
    }
    st.stores.node_store += 1;
    propagate_gap(lk, p, leaf_d - 1, gap);
    add_len(tree, delta);
    Some(replaced)
}

/// The entries an in-place store of `w` replaces (clipped to the store's own range `req`) and the change of the
/// entry count it makes.
fn wr_replaced(n: &crate::node::Node, w: &WrLeaf, req: Req) -> (Replaced, i64) {
    let lv = w.lv;
    let mut replaced = Replaced::new();
    let mut survivors = 0i64;
    for k in w.i0..=w.oe0 {
        let v = n.leaf_slot_locked(k);
        if v != 0 {
            let (s, l) = (n.slot_first(k, lv.min), n.slot_last(LEAF_PIVOTS, k, lv.max));
            replaced.push((s.max(req.first), l.min(req.last), v));
            survivors += (s < req.first) as i64 + (l > req.last) as i64;
        }
    }
    let delta = (req.val != 0) as i64 + survivors - replaced.len() as i64;
    (replaced, delta)
}

/// After an in-place store of `w`: the leaf's max gap up the path if a NULL range was touched, and the count.
fn wr_in_place_done<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    p: &Path,
    w: &WrLeaf,
    nulls: bool,
    delta: i64,
) {
    if nulls && w.leaf_d > 0 {
        let lv = w.lv;
        propagate_gap(lk, p, w.leaf_d - 1, leaf_node_gap(lk, lv.e, lv.min, lv.max));
    }
    add_len(tree, delta);
}

/// `mas_wr_slot_store` as the kernel allows it in RCU mode (`offset_end - offset == 1`): the slot count is
/// unchanged, one pivot `i` moves and at most one of slots `i`, `i + 1` changes, inside one write section of
/// the leaf's sequence count. From slot `i`'s first index: slot `i` takes the value and `pivot[i] = last`; or
/// up to slot `i + 1`'s last index: `pivot[i] = first - 1` and slot `i + 1` takes the value.
#[inline(never)] // Kept out of `store`, whose other paths it would otherwise slow down.
fn mas_wr_slot_store<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    p: &Path,
    w: &WrLeaf,
    req: Req,
) -> Replaced {
    let n = w.lv.e.locked(lk);
    let (i, oe, val) = (w.i, w.oe, req.val);
    let nulls = val == 0 || n.leaf_slot_locked(i) == 0 || n.leaf_slot_locked(oe) == 0;
    let (replaced, delta) = wr_replaced(n, w, req);
    let seq = n.write_begin();
    if w.at_min {
        if n.leaf_slot_locked(i) != val {
            n.set_leaf_slot(i, val);
        }
        n.set_pivot_live(i, w.last);
    } else {
        if n.leaf_slot_locked(oe) != val {
            n.set_leaf_slot(oe, val);
        }
        n.set_pivot_live(i, w.first - 1);
    }
    n.write_end(seq);
    st.stores.slot_store += 1;
    wr_in_place_done(tree, lk, p, w, nulls, delta);
    replaced
}

/// `mas_wr_append`: the store lies in the leaf's last range, and the leaf grows by one slot at its end (the
/// store ends at the leaf's max: the old content keeps `[min, first - 1]` and the value takes a new last slot;
/// or it starts at the range's first index: the value takes the old last slot and the old content moves one
/// slot right) or by two (strictly inside: the content is kept on both sides), within the leaf's 16 slots;
/// inside one write section of the leaf's sequence count.
#[inline(never)] // As `mas_wr_slot_store`.
fn mas_wr_append<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    p: &Path,
    w: &WrLeaf,
    req: Req,
) -> Replaced {
    let n = w.lv.e.locked(lk);
    let (end, val) = (w.end, req.val);
    let new_end = end + w.extra;
    let c = n.leaf_slot_locked(end);
    let nulls = val == 0 || c == 0;
    let (replaced, delta) = wr_replaced(n, w, req);
    let seq = n.write_begin();
    // As the kernel's: the new slots and pivots beyond the old end first, then the old end's.
    if new_end < LEAF_PIVOTS {
        n.set_pivot_live(new_end, w.lv.max);
    }
    if w.at_max {
        n.set_leaf_slot(end + 1, val);
        n.set_pivot_live(end, w.first - 1);
    } else if w.at_min {
        n.set_leaf_slot(end + 1, c);
        n.set_leaf_slot(end, val);
        n.set_pivot_live(end, w.last);
    } else {
        n.set_leaf_slot(end + 2, c);
        n.set_leaf_slot(end + 1, val);
        n.set_pivot_live(end + 1, w.last);
        n.set_pivot_live(end, w.first - 1);
    }
    n.write_end(seq);
    st.stores.append += 1;
    wr_in_place_done(tree, lk, p, w, nulls, delta);
    replaced
}

/// True if the leaf at depth `leaf_d` of path `p` can take one more in-place store under its sequence count:
/// the count is not at its last value, and the parent's address is below the count's bits (the hard check
/// behind `Enode::new`'s debug assertion, module `node`).
#[inline]
fn seq_usable(lk: Locked<'_>, p: &Path, leaf_d: usize) -> bool {
    p.lv[leaf_d].e.locked(lk).seq_has_room() && (leaf_d == 0 || p.lv[leaf_d - 1].e.addr() < ADDR_LIMIT)
}

/// Rewrites the live leaf `e` (covering `[min, max]`) to hold `items` in place, inside one write section of its
/// sequence count (module `node`): the in-place `mas_wr_node_store` of RCU mode. Only the words that change
/// are stored (a slot count that grows or shrinks by one or two moves the tail of the leaf; the words before
/// the store's slot keep their lines clean). A reader that overlaps the section sees the count move in its
/// `read_check` and reads again, so it never combines words of the two states. Returns the leaf's max gap.
#[allow(clippy::needless_range_loop)] // parallel word arrays indexed by slot, as `fill_node`
fn rewrite_live_leaf(lk: Locked<'_>, e: Enode, items: &[Item], min: u64, max: u64) -> u64 {
    let n = e.locked(lk);
    debug_assert!(!items.is_empty() && items.len() <= LEAF_SLOTS);
    debug_assert_eq!(items[items.len() - 1].last, max);
    let end = items.len() - 1;
    let w = n.write_begin();
    for i in 0..LEAF_PIVOTS {
        let v = match i.cmp(&end) {
            std::cmp::Ordering::Less => items[i].last,
            std::cmp::Ordering::Equal => max,
            std::cmp::Ordering::Greater => 0,
        };
        if n.pivot(i) != v {
            n.set_pivot_live(i, v);
        }
    }
    for i in 0..LEAF_SLOTS {
        let v = if i <= end { items[i].slot } else { 0 };
        if n.leaf_slot_locked(i) != v {
            n.set_leaf_slot(i, v);
        }
    }
    n.write_end(w);
    crate::build::leaf_gap(items, min)
}

/// What gathering leaves for a store found besides the slots.
#[derive(Default)]
struct Gathered {
    /// The new entry was placed.
    inserted: bool,
    /// The overlapped parts of the entries it replaces.
    replaced: Replaced,
    /// Pieces of replaced non-NULL entries that survive (outside `[first, last]`).
    survivors: i64,
}

impl Gathered {
    /// Gathers leaf `x`'s slots into `big` for the store `req`: slots outside the range are kept, overlapped
    /// ones clipped (their overlapped parts recorded in `replaced`, surviving pieces of non-NULL entries counted
    /// in `survivors`), and the new entry inserted once.
    #[inline]
    fn leaf(&mut self, lk: Locked<'_>, x: Level, req: Req, big: &mut Big) {
        let Req { first, last, val, .. } = req;
        let n = x.e.locked(lk);
        let end = n.end(LEAF_PIVOTS, x.max);
        let mut s = x.min;
        for i in 0..=end {
            let l = if i < end { n.pivot(i) } else { x.max };
            let v = n.leaf_slot_locked(i);
            if l < first || s > last {
                big.push_leaf(l, v);
            } else {
                if s < first {
                    big.push_leaf(first - 1, v);
                    self.survivors += (v != 0) as i64;
                }
                if !self.inserted {
                    big.push_leaf(last, val);
                    self.inserted = true;
                }
                if v != 0 {
                    self.replaced.push((s.max(first), l.min(last), v));
                }
                if l > last {
                    big.push_leaf(l, v);
                    self.survivors += (v != 0) as i64;
                }
            }
            s = l.wrapping_add(1);
        }
    }

    /// Change of the entry count once the store is made.
    fn len_delta(&self, req: Req) -> i64 {
        (req.val != 0) as i64 + self.survivors - self.replaced.len() as i64
    }
}

/// What a rebuild decided, to be made visible by [`commit`].
pub(crate) struct Plan {
    /// How the new top is attached.
    top: Top,
    /// Old nodes to kill.
    retire: Vec<Enode>,
    /// New internal nodes whose children need adopting (and the in-place node, if any).
    adopt: Vec<Enode>,
    /// Node rewritten in place (non-RCU), not retired.
    in_place: Option<Enode>,
    /// Change of the entry count.
    len_delta: i64,
    /// New height.
    height: usize,
    /// The replaced entries, clipped.
    replaced: Replaced,
}

/// How a plan's new top is attached.
// The path makes `Slot` large; a plan lives on the stack for one store, and boxing it would cost every such
// store a heap allocation.
#[allow(clippy::large_enum_variant)]
enum Top {
    /// New root (None: the tree is now empty).
    Root(Option<Enode>),
    /// New node `e`, with max gap `gap`, in the slot of `path.lv[depth]`.
    Slot { path: Path, depth: usize, e: Enode, gap: u64 },
}

/// One level of a rebuild (the kernel's big node with the range it covers, `mas_wr_bnode`): the slots gathered
/// at depth `d` cover `[lc, hc]` and replace `old` nodes there.
struct Gather {
    d: usize,
    big: Big,
    lc: u64,
    hc: u64,
    old: usize,
}

impl Gather {
    /// True if the level covers the whole key space.
    fn covers_all(&self) -> bool {
        self.lc == 0 && self.hc == u64::MAX
    }

    /// Adds the neighbour to the right of `[lc, hc]` (or to the left at the right edge); returns it.
    fn extend(&mut self, lk: Locked<'_>, root: Enode, leaf: bool) -> Enode {
        if self.hc != u64::MAX {
            let y = node_at(lk, root, self.hc + 1, self.d);
            node_items(lk, y.e, y.max, &mut self.big, leaf);
            self.hc = y.max;
            y.e
        } else {
            let y = node_at(lk, root, self.lc - 1, self.d);
            let mut front = Big::new(y.min);
            node_items(lk, y.e, y.max, &mut front, leaf);
            self.big.prepend(y.min, front.items(), leaf);
            self.lc = y.min;
            y.e
        }
    }

    /// `mas_push_data`: a single overflowing node absorbs a sibling under the same parent if the two fit in two
    /// nodes with a slot to spare (one more at the leaf level). Returns the absorbed sibling.
    fn push_data(&mut self, lk: Locked<'_>, root: Enode, leaf: bool) -> Option<Enode> {
        let cap = if leaf { LEAF_SLOTS } else { INT_SLOTS };
        let limit = 2 * cap - if leaf { 2 } else { 1 };
        let p = node_at(lk, root, self.lc, self.d - 1);
        let pn = p.e.locked(lk);
        let pend = pn.end(INT_PIVOTS, p.max);
        if p.off > 0 {
            let smin = pn.slot_first(p.off - 1, p.min);
            let smax = pn.pivot(p.off - 1);
            let sib = pn.child_locked(p.off - 1);
            if node_count(lk, sib, smax) + self.big.len() <= limit {
                let mut front = Big::new(smin);
                node_items(lk, sib, smax, &mut front, leaf);
                self.big.prepend(smin, front.items(), leaf);
                self.lc = smin;
                return Some(sib);
            }
        }
        if p.off < pend {
            let smax = pn.slot_last(INT_PIVOTS, p.off + 1, p.max);
            let sib = pn.child_locked(p.off + 1);
            if node_count(lk, sib, smax) + self.big.len() <= limit {
                node_items(lk, sib, smax, &mut self.big, leaf);
                self.hc = smax;
                return Some(sib);
            }
        }
        None
    }
}

/// The state of a general store (the kernel's big-node rebuild), level by level from the leaves up; see the
/// module docs.
struct Rebuild<'w, 's> {
    lk: Locked<'w>,
    root: Enode,
    /// Height before the store.
    h: usize,
    st: &'s mut WState,
    counters: &'s Counters,
    /// Every node allocated so far (freed if the store fails).
    fresh: Vec<usize>,
    /// Old nodes the store replaces.
    retire: Vec<Enode>,
    /// New internal nodes whose children need adopting.
    adopt: Vec<Enode>,
}

impl Rebuild<'_, '_> {
    /// Plans the store (allocating every node it needs); nothing visible changes.
    fn run(&mut self, req: Req) -> Result<Plan, MapleError> {
        let (mut lvl, g) = self.gather_leaves(req)?;
        let (len_delta, replaced) = (g.len_delta(req), g.replaced);
        let mut up: Vec<Item> = Vec::with_capacity(4);
        let mut item_h = 1usize;
        // A single NULL over the whole key space: the tree becomes empty.
        let empties = lvl.covers_all() && lvl.big.len() == 1 && lvl.big.items()[0].slot == 0;
        if !empties && let Some((e, gap)) = self.build_level(&lvl, true, &mut up)? {
            return Ok(self.in_place_plan(&lvl, e, gap, len_delta, replaced));
        }
        loop {
            if lvl.d == 0 {
                let top = match up.len() {
                    0 => None,
                    1 => Some(up[0].child()),
                    _ => Some(self.new_root(&up)?),
                };
                let height = if top.is_none() { 0 } else { item_h + (up.len() > 1) as usize };
                return Ok(self.plan(Top::Root(top), height, len_delta, replaced));
            }
            if lvl.old == 1 && up.len() == 1 {
                // One node became one: publish it in the parent's slot (same range) and stop.
                let path = walk(self.lk, self.root, lvl.lc, lvl.d - 1);
                let top = Top::Slot { path, depth: lvl.d - 1, e: up[0].child(), gap: up[0].gap };
                return Ok(self.plan(top, self.h, len_delta, replaced));
            }
            lvl = self.gather_parents(&lvl, &up);
            up.clear();
            if lvl.big.len() == 0 {
                // Everything below was erased (only possible when the level covers the whole key space).
                continue;
            }
            if lvl.covers_all() && lvl.big.len() == 1 {
                // Pass through: a single child covering everything needs no node above it.
                up.push(lvl.big.items()[0]);
                continue;
            }
            if let Some((e, gap)) = self.build_level(&lvl, false, &mut up)? {
                return Ok(self.in_place_plan(&lvl, e, gap, len_delta, replaced));
            }
            item_h += 1;
        }
    }

    /// Steps 1 and 2 at the leaf level: gathers every leaf intersecting `[first, last]`, then neighbours until
    /// the constraints hold.
    fn gather_leaves(&mut self, req: Req) -> Result<(Gather, Gathered), MapleError> {
        let (lk, root) = (self.lk, self.root);
        let d = self.h - 1;
        let mut x = node_at(lk, root, req.first, d);
        let hi = node_at(lk, root, req.last, d).e;
        let mut lvl = Gather { d, big: Big::new(x.min), lc: x.min, hc: x.max, old: 0 };
        let mut g = Gathered::default();
        loop {
            g.leaf(lk, x, req, &mut lvl.big);
            self.retire.push(x.e);
            lvl.old += 1;
            lvl.hc = x.max;
            if x.e == hi {
                break;
            }
            x = node_at(lk, root, x.max + 1, d);
        }
        if req.insert && !g.replaced.is_empty() {
            return Err(MapleError::Exists);
        }
        loop {
            if lvl.big.last_is_null() && lvl.hc != u64::MAX {
                // A NULL range never straddles two leaves: take in the next leaf.
                let y = node_at(lk, root, lvl.hc + 1, d);
                node_items(lk, y.e, y.max, &mut lvl.big, true);
                self.retire.push(y.e);
                lvl.old += 1;
                lvl.hc = y.max;
            } else if lvl.big.len() < LEAF_MIN && !lvl.covers_all() {
                self.retire.push(lvl.extend(lk, root, true));
                lvl.old += 1;
            } else {
                break;
            }
        }
        if lvl.big.len() > LEAF_SLOTS && lvl.old == 1 && d > 0 {
            self.push_data(&mut lvl, true);
        }
        Ok((lvl, g))
    }

    /// Step 4, one level up from `below`: gathers the slots of every node intersecting `[below.lc, below.hc]`,
    /// keeping the children outside it and splicing the new nodes `up` in place of those inside, then
    /// neighbours until the constraints hold.
    fn gather_parents(&mut self, below: &Gather, up: &[Item]) -> Gather {
        let (lk, root) = (self.lk, self.root);
        let d = below.d - 1;
        let (clo, chi) = (below.lc, below.hc);
        let mut x = node_at(lk, root, clo, d);
        let hi = node_at(lk, root, chi, d).e;
        let mut lvl = Gather { d, big: Big::new(x.min), lc: x.min, hc: x.max, old: 0 };
        let mut inserted = false;
        loop {
            let n = x.e.locked(lk);
            let end = n.end(INT_PIVOTS, x.max);
            let mut s = x.min;
            for i in 0..=end {
                let l = if i < end { n.pivot(i) } else { x.max };
                if l < clo || s > chi {
                    lvl.big.push(Item { last: l, slot: n.child_locked(i).word() as usize, gap: n.gap(i) });
                } else if !inserted {
                    up.iter().for_each(|it| lvl.big.push(*it));
                    inserted = true;
                }
                s = l.wrapping_add(1);
            }
            self.retire.push(x.e);
            lvl.old += 1;
            lvl.hc = x.max;
            if x.e == hi {
                break;
            }
            x = node_at(lk, root, x.max + 1, d);
        }
        if !inserted {
            up.iter().for_each(|it| lvl.big.push(*it));
        }
        while lvl.big.len() < INT_MIN && !lvl.covers_all() {
            self.retire.push(lvl.extend(lk, root, false));
            lvl.old += 1;
        }
        if lvl.big.len() > INT_SLOTS && lvl.old == 1 && d > 0 {
            self.push_data(&mut lvl, false);
        }
        lvl
    }

    /// [`Gather::push_data`], retiring the absorbed sibling.
    fn push_data(&mut self, lvl: &mut Gather, leaf: bool) {
        if let Some(sib) = lvl.push_data(self.lk, self.root, leaf) {
            self.retire.push(sib);
            lvl.old += 1;
        }
    }

    /// Step 3: distributes the level over new nodes, appending them to `up`. In non-RCU mode a one-for-one
    /// level is instead rewritten into its old node, returned with its max gap (the store ends there).
    fn build_level(
        &mut self,
        lvl: &Gather,
        leaf: bool,
        up: &mut Vec<Item>,
    ) -> Result<Option<(Enode, u64)>, MapleError> {
        let mut sizes = [0usize; 16];
        let k = distribute(lvl.big.items(), leaf, &mut sizes).ok_or(MapleError::Invalid)?;
        if k == 1 && lvl.old == 1 && !self.st.rcu {
            // The level's only old node is the last one retired.
            let e = self.retire.pop().ok_or(MapleError::Invalid)?;
            let gap = fill_node(self.lk, e, lvl.big.items(), lvl.lc, lvl.hc);
            return Ok(Some((e, gap)));
        }
        let before = (self.fresh.len(), up.len());
        let (lk, items) = (self.lk, lvl.big.items());
        build_nodes(lk, self.st, self.counters, items, lvl.lc, leaf, &sizes[..k], up, &mut self.fresh)?;
        if !leaf {
            self.adopt.extend(up[before.1..].iter().map(Item::child));
        }
        debug_assert_eq!(self.fresh.len() - before.0, k);
        Ok(None)
    }

    /// A new internal root above the nodes `up`.
    fn new_root(&mut self, up: &[Item]) -> Result<Enode, MapleError> {
        let a = alloc(self.st, self.counters).ok_or(MapleError::NoMem)?;
        self.fresh.push(a);
        let e = Enode::new(a, false);
        fill_node(self.lk, e, up, 0, u64::MAX);
        self.adopt.push(e);
        Ok(e)
    }

    /// The plan when the final one-for-one node `e` (at `lvl`) was rewritten in place (non-RCU).
    fn in_place_plan(
        &mut self,
        lvl: &Gather,
        e: Enode,
        gap: u64,
        len_delta: i64,
        replaced: Replaced,
    ) -> Plan {
        if !e.is_leaf() && !self.adopt.contains(&e) {
            self.adopt.push(e);
        }
        let top = if lvl.d == 0 {
            Top::Root(Some(e))
        } else {
            Top::Slot { path: walk(self.lk, self.root, lvl.lc, lvl.d - 1), depth: lvl.d - 1, e, gap }
        };
        let mut plan = self.plan(top, self.h, len_delta, replaced);
        plan.in_place = Some(e);
        plan
    }

    /// A plan (the retire and adopt lists are attached by [`store`]).
    fn plan(&self, top: Top, height: usize, len_delta: i64, replaced: Replaced) -> Plan {
        Plan { top, retire: Vec::new(), adopt: Vec::new(), in_place: None, len_delta, height, replaced }
    }
}

/// Makes a plan visible: adopt, publish, gaps, kill and retire.
fn commit<T: Entry>(
    tree: &MapleTree<T>,
    lk: Locked<'_>,
    st: &mut WState,
    counters: &Arc<Counters>,
    plan: Plan,
) {
    for &e in &plan.adopt {
        adopt(lk, e);
    }
    match plan.top {
        Top::Root(e) => {
            if let Some(e) = e {
                e.locked(lk).set_parent(None);
            }
            // Relaxed: the writer reads its own stores.
            if Enode::word_of(e) != tree.root.load(Ordering::Relaxed) {
                // Release: publishes the new nodes (pairs with readers' Acquire root load).
                tree.root.store(Enode::word_of(e), Ordering::Release);
            }
        }
        Top::Slot { path, depth, e, gap } => {
            let lv = path.lv[depth];
            let pn = lv.e.locked(lk);
            e.locked(lk).set_parent(Some((lv.e, lv.off)));
            if pn.child_locked(lv.off) != e {
                // Release (inside set_child): publishes the new subtree.
                pn.set_child(lv.off, e);
            }
            propagate_gap(lk, &path, depth, gap);
        }
    }
    st.height = plan.height;
    for &e in &plan.retire {
        if Some(e) == plan.in_place {
            continue;
        }
        // `e` was replaced above and is unreachable from the root now.
        e.locked(lk).mark_dead();
        if st.rcu {
            // SAFETY: unpublished and marked dead; retired exactly once (each old node is listed once).
            unsafe { retire(st, counters, e.addr()) };
        } else {
            // SAFETY: non-RCU mode: no reader can hold it; listed once, not used afterwards.
            unsafe { counters.free_now(e.addr()) };
        }
    }
    add_len(tree, plan.len_delta);
}

fn add_len<T: Entry>(tree: &MapleTree<T>, d: i64) {
    // Relaxed: a statistic maintained by the (single) writer, under its lock: a load and a store, no
    // read-modify-write (readers only load it).
    let l = tree.len.load(Ordering::Relaxed);
    tree.len.store(l.wrapping_add_signed(d), Ordering::Relaxed);
}

/// Retires an unpublished, dead node: it is freed after a grace period. Nodes are handed to RCU in batches of
/// [`RETIRE_BATCH`] (one deferred call per batch); a batch not yet handed over is freed when the tree is dropped.
/// Retiring later than the unpublishing store is always safe: the grace period then starts later.
///
/// # Safety
///
/// `a` came from the tree's allocator, is unpublished and marked dead, and is retired once.
unsafe fn retire(st: &mut WState, counters: &Arc<Counters>, a: usize) {
    // Relaxed: statistics; the grace period orders it before the deferred free's Release increment of `freed`.
    counters.released.fetch_add(1, Ordering::Relaxed);
    st.retired.push(a);
    if st.retired.len() >= RETIRE_BATCH {
        let batch = std::mem::replace(&mut st.retired, Vec::with_capacity(RETIRE_BATCH));
        let guard = vmspace_rcu::pin();
        // SAFETY: the caller's contract, for every node of the batch.
        unsafe { counters.retire_batch(batch, &guard) };
        // Start the grace period now rather than when the thread's RCU bag fills, so that retired nodes come
        // back to the domain's cache (and the next allocations avoid the system allocator).
        guard.flush();
    }
}

/// See [`Writer::flush_retired`].
pub(crate) fn flush_retired<T: Entry>(w: &mut Writer<'_, T>) {
    let batch = std::mem::take(&mut w.st.retired);
    let guard = vmspace_rcu::pin();
    // SAFETY: every node in the batch was unpublished, marked dead and counted by `retire`.
    unsafe { w.tree.counters.retire_batch(batch, &guard) };
    guard.flush();
}

/// Frees every node of the tree and the reserve at once (the tree is being dropped).
pub(crate) fn free_all<T: Entry>(w: &mut Writer<'_, T>) {
    fn rec(lk: Locked<'_>, e: Enode, out: &mut Vec<usize>) {
        if !e.is_leaf() {
            let n = e.locked(lk);
            let (end, _) = n.meta();
            for i in 0..=end {
                rec(lk, n.child_locked(i), out);
            }
        }
        out.push(e.addr());
    }
    let (tree, lk, st) = w.parts();
    // Relaxed: the tree is being dropped; nobody else can access it.
    let root = Enode::from_word(tree.root.load(Ordering::Relaxed));
    let mut all = Vec::new();
    if let Some(root) = root {
        rec(lk, root, &mut all);
    }
    // Relaxed: as above.
    tree.root.store(0, Ordering::Relaxed);
    // Retired nodes not yet handed to RCU: the tree is being dropped, so no reader can be inside them (readers
    // borrow the tree); nodes already handed over are freed by their deferred call.
    let retired = std::mem::take(&mut st.retired);
    // SAFETY: exclusively owned and unreachable, each listed once; the retired ones were counted as released
    // by `retire`.
    unsafe {
        tree.counters.free_many(all);
        tree.counters.free_released(retired);
    }
    release_reserve(w);
}

/// See [`Writer::reserve`].
pub(crate) fn reserve<T: Entry>(w: &mut Writer<'_, T>, nodes: usize) -> Result<(), MapleError> {
    let c = &w.tree.counters;
    let pool = &mut w.st.pool;
    // Straight into the pool (no temporary vector per call); on failure the nodes added here come off again.
    let base = pool.len();
    pool.reserve(nodes);
    let mut stash = crate::node::Stash::for_count(nodes);
    for _ in 0..nodes {
        match c.alloc_stashed(&mut stash) {
            Some(a) => pool.push(a),
            None => {
                c.return_stash(stash);
                let got = pool.split_off(base);
                // SAFETY: never published.
                unsafe { c.free_many(got) };
                return Err(MapleError::NoMem);
            }
        }
    }
    c.return_stash(stash);
    Ok(())
}

/// See [`Writer::release_reserve`].
pub(crate) fn release_reserve<T: Entry>(w: &mut Writer<'_, T>) {
    let pool = std::mem::take(&mut w.st.pool);
    // SAFETY: reserved nodes were never published.
    unsafe { w.tree.counters.free_many(pool) };
}
