//! Stores: one algorithm for every shape of change, level by level from the leaves up.
//!
//! A store of `[first, last]` first tries the **exact fit**: the range is exactly one existing leaf slot and
//! the store keeps every invariant (no NULL next to a NULL, no NULL at the end of a non-right-most leaf); then
//! one Release store of the slot suffices (plus in-place max-gap bookkeeping when the slot changes between
//! NULL and non-NULL).
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
//! Every allocation happens before anything visible changes; on ENOMEM the new nodes are freed and the tree is
//! untouched. Then: adopt children (parent words), publish (one Release store), update gaps upward in place,
//! mark each replaced node dead (Release) and retire it (RCU mode: after a grace period; non-RCU: at once). In
//! non-RCU mode the final one-for-one node is rewritten in place instead of copied.
//!
//! Worst case per level: 49 gathered leaf slots (16 + 1 + 16 + 16), or 34 internal ones, hence at most 4 new
//! nodes per level plus a new root: [`crate::MapleTree::worst_case_nodes`] = `4 * height + 1`.

use std::sync::Arc;

use vmspace_rcu::sync::Ordering;

use crate::build::{
    Big, Item, adopt, alloc, build_nodes, distribute, fill_node, leaf_gap, node_count, node_items,
};
use crate::node::{
    Counters, Enode, INT_MIN, INT_PIVOTS, INT_SLOTS, KIND_LEAF, LEAF_MIN, LEAF_PIVOTS, LEAF_SLOTS,
    MAX_HEIGHT, RETIRE_BATCH, is_leaf, node,
};
use crate::{Entry, MapleError, WState, Writer};

/// One level of a writer's path.
#[derive(Clone, Copy, Default)]
pub(crate) struct Lvl {
    pub(crate) e: Enode,
    pub(crate) min: u64,
    pub(crate) max: u64,
    pub(crate) off: usize,
}

/// A root-to-depth path.
pub(crate) struct Path {
    pub(crate) lv: [Lvl; MAX_HEIGHT],
}

/// Walks from `root` to `depth` along `key` (writer side: the lock is held, every node is live).
pub(crate) fn walk(root: Enode, key: u64, depth: usize) -> Path {
    let mut p = Path { lv: [Lvl::default(); MAX_HEIGHT] };
    let (mut e, mut min, mut max) = (root, 0u64, u64::MAX);
    for d in 0..=depth {
        // SAFETY: writer-side, reachable from the root.
        let n = unsafe { node(e) };
        let np = if is_leaf(e) { LEAF_PIVOTS } else { INT_PIVOTS };
        let mut i = 0;
        while i < np && n.pivot(i) < key {
            i += 1;
        }
        p.lv[d] = Lvl { e, min, max, off: i };
        if d == depth || is_leaf(e) {
            break;
        }
        let s = if i == 0 { min } else { n.pivot(i - 1) + 1 };
        let l = if i < np { n.pivot(i) } else { max };
        (e, min, max) = (n.word(crate::node::INT_SLOT_BASE + i) as usize, s, l);
    }
    p
}

/// Max gap of a live leaf.
fn leaf_node_gap(e: Enode, min: u64, max: u64) -> u64 {
    let mut b = Big::new(min);
    node_items(e, min, max, &mut b, false);
    leaf_gap(b.items(), min)
}

/// Records child `off`'s new max gap `g` in the path's node at `depth` and propagates upward while the node's
/// max gap changes (the kernel's `mas_update_gap`). In place: gaps are only read by gap searches.
fn propagate_gap(p: &Path, mut depth: usize, mut g: u64) {
    loop {
        let lv = p.lv[depth];
        // SAFETY: writer-side, live.
        let n = unsafe { node(lv.e) };
        if n.gap(lv.off) == g {
            // Unchanged: no store at all, so that readers' cached copies of this node stay valid.
            return;
        }
        let (end, go) = n.meta();
        let old_max = n.gap(go);
        n.set_gap(lv.off, g);
        let (mut m, mut mo) = (0, 0);
        for i in 0..=end {
            let gi = n.gap(i);
            if gi > m || i == 0 {
                m = gi;
                mo = i;
            }
        }
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

/// Stores raw `val` (0 = NULL) over `[first, last]`; returns the replaced (clipped) raw entries. With
/// `insert`, fails with EEXIST (before allocating or changing anything) if any index of the range is taken.
pub(crate) fn store<T: Entry>(
    w: &mut Writer<'_, T>,
    first: u64,
    last: u64,
    val: usize,
    insert: bool,
) -> Result<Vec<(u64, u64, usize)>, MapleError> {
    if first > last {
        return Err(MapleError::Invalid);
    }
    let tree = w.tree;
    let counters = &tree.counters;
    let st: &mut WState = &mut w.st;
    // Relaxed: the writer reads its own stores.
    let root = tree.root.load(Ordering::Relaxed) as usize;
    if root == 0 {
        if val == 0 {
            return Ok(Vec::new());
        }
        let mut b = Big::new(0);
        if first > 0 {
            b.push_leaf(first - 1, 0);
        }
        b.push_leaf(last, val);
        if last < u64::MAX {
            b.push_leaf(u64::MAX, 0);
        }
        let a = alloc(st, counters).ok_or(MapleError::NoMem)?;
        let e = a | KIND_LEAF;
        fill_node(e, b.items(), 0, u64::MAX);
        // SAFETY: our new node.
        unsafe { node(e) }.set_parent(None);
        // Release: publishes the filled leaf (pairs with readers' Acquire root load).
        tree.root.store(e as u64, Ordering::Release);
        st.height = 1;
        tree.len.fetch_add(1, Ordering::Relaxed);
        return Ok(Vec::new());
    }
    let h = st.height;
    let leaf_d = h - 1;

    let p = walk(root, first, leaf_d);
    // Exact fit: one slot store in place.
    {
        let lv = p.lv[leaf_d];
        // SAFETY: writer-side, live.
        let n = unsafe { node(lv.e) };
        let i = lv.off;
        let s = if i == 0 { lv.min } else { n.pivot(i - 1) + 1 };
        let l = if i < LEAF_PIVOTS { n.pivot(i) } else { lv.max };
        if s == first && l == last {
            let end = n.end(LEAF_PIVOTS, lv.max);
            let old = n.word(crate::node::LEAF_SLOT_BASE + i) as usize;
            if insert && old != 0 {
                return Err(MapleError::Exists);
            }
            let ok = val != 0
                || old == 0
                || ((i == 0 || n.word(crate::node::LEAF_SLOT_BASE + i - 1) != 0)
                    && if i < end {
                        n.word(crate::node::LEAF_SLOT_BASE + i + 1) != 0
                    } else {
                        lv.max == u64::MAX
                    });
            if ok {
                if old == val {
                    return Ok(if old != 0 { vec![(s, l, old)] } else { Vec::new() });
                }
                n.set_leaf_slot(i, val);
                if (old == 0) != (val == 0) {
                    if leaf_d > 0 {
                        propagate_gap(&p, leaf_d - 1, leaf_node_gap(lv.e, lv.min, lv.max));
                    }
                    add_len(tree, if val == 0 { -1 } else { 1 });
                }
                return Ok(if old != 0 { vec![(s, l, old)] } else { Vec::new() });
            }
        }
    }

    // Node store: the change stays inside one leaf that still satisfies every invariant (the kernel's
    // `wr_node_store`): one new leaf (RCU) or an in-place rewrite (non-RCU), published in the parent's slot.
    {
        let lv = p.lv[leaf_d];
        if last <= lv.max {
            let mut big = Big::new(lv.min);
            let mut replaced = Vec::new();
            let (mut inserted, mut survivors) = (false, 0i64);
            gather_leaf(lv, first, last, val, &mut big, &mut inserted, &mut replaced, &mut survivors);
            if insert && !replaced.is_empty() {
                return Err(MapleError::Exists);
            }
            let ok = big.len() <= LEAF_SLOTS
                && (leaf_d == 0 || big.len() >= LEAF_MIN)
                && !(big.last_is_null() && lv.max != u64::MAX)
                && !(leaf_d == 0 && big.len() == 1 && big.items()[0].slot == 0);
            if ok {
                let len_delta = (val != 0) as i64 + survivors - replaced.len() as i64;
                let e = if st.rcu { alloc(st, counters).ok_or(MapleError::NoMem)? | KIND_LEAF } else { lv.e };
                let g = fill_node(e, big.items(), lv.min, lv.max);
                if e != lv.e {
                    if leaf_d == 0 {
                        // SAFETY: our new node.
                        unsafe { node(e) }.set_parent(None);
                        // Release: publishes the new leaf (pairs with readers' Acquire root load).
                        tree.root.store(e as u64, Ordering::Release);
                    } else {
                        let pl = p.lv[leaf_d - 1];
                        // SAFETY: our new node; the parent is live.
                        unsafe { node(e) }.set_parent(Some((pl.e, pl.off)));
                        // SAFETY: writer-side, live parent. Release (inside set_child): publishes the new leaf.
                        unsafe { node(pl.e) }.set_child(pl.off, e);
                    }
                    // SAFETY: the old leaf was just unpublished.
                    unsafe { node(lv.e) }.mark_dead();
                    // SAFETY: unpublished, marked dead, retired once.
                    unsafe { retire(st, counters, crate::node::addr(lv.e)) };
                }
                if leaf_d > 0 {
                    propagate_gap(&p, leaf_d - 1, g);
                }
                add_len(tree, len_delta);
                return Ok(replaced);
            }
        }
    }

    let mut fresh: Vec<usize> = Vec::new();
    let r = rebuild(st, counters, root, h, first, last, val, insert, &mut fresh);
    match r {
        Err(e) => {
            for a in fresh {
                // SAFETY: never published.
                unsafe { counters.free_now(a) };
            }
            Err(e)
        }
        Ok(mut plan) => {
            let replaced = std::mem::take(&mut plan.replaced);
            commit(tree, st, counters, plan);
            Ok(replaced)
        }
    }
}

/// Gathers leaf `x`'s slots into `big` for a store of `val` over `[first, last]`: slots outside the range are
/// kept, overlapped ones clipped (their overlapped parts recorded in `replaced`, surviving pieces of non-NULL
/// entries counted in `survivors`), and the new entry inserted once.
#[allow(clippy::too_many_arguments)]
#[inline]
fn gather_leaf(
    x: Lvl,
    first: u64,
    last: u64,
    val: usize,
    big: &mut Big,
    inserted: &mut bool,
    replaced: &mut Vec<(u64, u64, usize)>,
    survivors: &mut i64,
) {
    // SAFETY: writer-side, live.
    let n = unsafe { node(x.e) };
    let end = n.end(LEAF_PIVOTS, x.max);
    let mut s = x.min;
    for i in 0..=end {
        let l = if i < end { n.pivot(i) } else { x.max };
        let v = n.word(crate::node::LEAF_SLOT_BASE + i) as usize;
        if l < first || s > last {
            big.push_leaf(l, v);
        } else {
            if s < first {
                big.push_leaf(first - 1, v);
                *survivors += (v != 0) as i64;
            }
            if !*inserted {
                big.push_leaf(last, val);
                *inserted = true;
            }
            if v != 0 {
                replaced.push((s.max(first), l.min(last), v));
            }
            if l > last {
                big.push_leaf(l, v);
                *survivors += (v != 0) as i64;
            }
        }
        s = l.wrapping_add(1);
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
    in_place: Enode,
    /// Change of the entry count.
    len_delta: i64,
    /// New height.
    height: usize,
    /// Path to the top's parent (for Top::Slot).
    path: Option<Path>,
    /// The replaced entries, clipped.
    replaced: Vec<(u64, u64, usize)>,
}

enum Top {
    /// New root (0 = empty tree).
    Root(Enode),
    /// New node in `path.lv[depth]`'s slot `off`, with max gap `gap`.
    Slot { depth: usize, e: Enode, gap: u64 },
}

#[allow(clippy::too_many_arguments)]
fn rebuild(
    st: &mut WState,
    counters: &Counters,
    root: Enode,
    h: usize,
    first: u64,
    last: u64,
    val: usize,
    insert: bool,
    fresh: &mut Vec<usize>,
) -> Result<Plan, MapleError> {
    let mut d = h - 1;
    let mut retire: Vec<Enode> = Vec::new();
    let mut adopt_list: Vec<Enode> = Vec::new();
    let mut replaced: Vec<(u64, u64, usize)> = Vec::new();
    let mut survivors = 0i64;

    // 1. Leaf level.
    let lo_p = walk(root, first, d);
    let hi_e = walk(root, last, d).lv[d].e;
    let mut big = Big::new(lo_p.lv[d].min);
    let mut x = lo_p.lv[d];
    let mut inserted = false;
    let mut old_count = 0usize;
    let (mut lc, mut hc);
    lc = x.min;
    loop {
        gather_leaf(x, first, last, val, &mut big, &mut inserted, &mut replaced, &mut survivors);
        retire.push(x.e);
        old_count += 1;
        hc = x.max;
        if x.e == hi_e {
            break;
        }
        x = walk(root, x.max + 1, d).lv[d];
    }
    if insert && !replaced.is_empty() {
        return Err(MapleError::Exists);
    }
    let len_delta = (val != 0) as i64 + survivors - replaced.len() as i64;

    // Leaf constraints.
    loop {
        if big.last_is_null() && hc != u64::MAX {
            let y = walk(root, hc + 1, d).lv[d];
            node_items(y.e, y.min, y.max, &mut big, true);
            retire.push(y.e);
            old_count += 1;
            hc = y.max;
            continue;
        }
        if big.len() < LEAF_MIN && !(lc == 0 && hc == u64::MAX) {
            retire.push(extend(root, d, &mut big, &mut lc, &mut hc, true));
            old_count += 1;
            continue;
        }
        break;
    }
    if big.len() > LEAF_SLOTS && old_count == 1 && d > 0 {
        push_data(root, d, &mut big, &mut lc, &mut hc, true, &mut retire, &mut old_count);
    }
    let mut up: Vec<Item> = Vec::with_capacity(4);
    let mut item_h = 1usize;
    let mut sizes = [0usize; 16];
    if lc == 0 && hc == u64::MAX && big.len() == 1 && big.items()[0].slot == 0 {
        // The tree becomes empty.
    } else {
        let k = distribute(big.items(), true, &mut sizes).ok_or(MapleError::Invalid)?;
        if k == 1 && old_count == 1 && !st.rcu {
            let e = retire.pop().unwrap_or(0);
            let g = fill_node(e, big.items(), lc, hc);
            return Ok(finish_in_place(root, h, d, e, g, lc, len_delta, retire, adopt_list, replaced));
        }
        build_nodes(st, counters, big.items(), lc, true, &sizes[..k], &mut up, fresh)?;
    }

    // 4. Up.
    loop {
        if d == 0 {
            let top = match up.len() {
                0 => 0,
                1 => up[0].slot,
                _ => {
                    let a = alloc(st, counters).ok_or(MapleError::NoMem)?;
                    fresh.push(a);
                    let e = a | crate::node::KIND_INTERNAL;
                    fill_node(e, &up, 0, u64::MAX);
                    adopt_list.push(e);
                    item_h += 1;
                    e
                }
            };
            let height = if top == 0 { 0 } else { item_h };
            return Ok(Plan {
                top: Top::Root(top),
                retire,
                adopt: adopt_list,
                in_place: 0,
                len_delta,
                height,
                path: None,
                replaced,
            });
        }
        if old_count == 1 && up.len() == 1 {
            let p = walk(root, lc, d - 1);
            return Ok(Plan {
                top: Top::Slot { depth: d - 1, e: up[0].slot, gap: up[0].gap },
                retire,
                adopt: adopt_list,
                in_place: 0,
                len_delta,
                height: h,
                path: Some(p),
                replaced,
            });
        }
        d -= 1;
        let lo_p = walk(root, lc, d);
        let hi_e = walk(root, hc, d).lv[d].e;
        let (clo, chi) = (lc, hc);
        let mut big = Big::new(lo_p.lv[d].min);
        let mut x = lo_p.lv[d];
        lc = x.min;
        old_count = 0;
        let mut inserted = false;
        loop {
            // SAFETY: writer-side, live.
            let n = unsafe { node(x.e) };
            let end = n.end(INT_PIVOTS, x.max);
            let mut s = x.min;
            for i in 0..=end {
                let l = if i < end { n.pivot(i) } else { x.max };
                if l < clo || s > chi {
                    big.push(Item { last: l, slot: n.child(i), gap: n.gap(i) });
                } else if !inserted {
                    for it in &up {
                        big.push(*it);
                    }
                    inserted = true;
                }
                s = l.wrapping_add(1);
            }
            retire.push(x.e);
            old_count += 1;
            hc = x.max;
            if x.e == hi_e {
                break;
            }
            x = walk(root, x.max + 1, d).lv[d];
        }
        if !inserted {
            for it in &up {
                big.push(*it);
            }
        }
        while big.len() < INT_MIN && !(lc == 0 && hc == u64::MAX) {
            retire.push(extend(root, d, &mut big, &mut lc, &mut hc, false));
            old_count += 1;
        }
        if big.len() > INT_SLOTS && old_count == 1 && d > 0 {
            push_data(root, d, &mut big, &mut lc, &mut hc, false, &mut retire, &mut old_count);
        }
        up.clear();
        if big.len() == 0 {
            // Everything below was erased (only possible when the level covers the whole key space).
            continue;
        }
        if lc == 0 && hc == u64::MAX && big.len() == 1 {
            // Pass through: a single child covering everything needs no node above it.
            up.push(big.items()[0]);
            continue;
        }
        let k = distribute(big.items(), false, &mut sizes).ok_or(MapleError::Invalid)?;
        if k == 1 && old_count == 1 && !st.rcu {
            let e = retire.pop().unwrap_or(0);
            let g = fill_node(e, big.items(), lc, hc);
            adopt_list.push(e);
            return Ok(finish_in_place(root, h, d, e, g, lc, len_delta, retire, adopt_list, replaced));
        }
        let before = fresh.len();
        build_nodes(st, counters, big.items(), lc, false, &sizes[..k], &mut up, fresh)?;
        for it in &up {
            adopt_list.push(it.slot);
        }
        debug_assert_eq!(fresh.len() - before, k);
        item_h += 1;
    }
}

/// The plan when the final one-for-one node was rewritten in place (non-RCU).
#[allow(clippy::too_many_arguments)]
fn finish_in_place(
    root: Enode,
    h: usize,
    d: usize,
    e: Enode,
    g: u64,
    lc: u64,
    len_delta: i64,
    retire: Vec<Enode>,
    mut adopt_list: Vec<Enode>,
    replaced: Vec<(u64, u64, usize)>,
) -> Plan {
    if !is_leaf(e) && !adopt_list.contains(&e) {
        adopt_list.push(e);
    }
    if d == 0 {
        Plan {
            top: Top::Root(e),
            retire,
            adopt: adopt_list,
            in_place: e,
            len_delta,
            height: h,
            path: None,
            replaced,
        }
    } else {
        let p = walk(root, lc, d - 1);
        Plan {
            top: Top::Slot { depth: d - 1, e, gap: g },
            retire,
            adopt: adopt_list,
            in_place: e,
            len_delta,
            height: h,
            path: Some(p),
            replaced,
        }
    }
}

/// Adds the neighbour at depth `d` to the right of `[lc, hc]` (or to the left at the right edge); returns it.
fn extend(root: Enode, d: usize, big: &mut Big, lc: &mut u64, hc: &mut u64, leaf: bool) -> Enode {
    if *hc != u64::MAX {
        let y = walk(root, *hc + 1, d).lv[d];
        node_items(y.e, y.min, y.max, big, leaf);
        *hc = y.max;
        y.e
    } else {
        let y = walk(root, *lc - 1, d).lv[d];
        let mut front = Big::new(y.min);
        node_items(y.e, y.min, y.max, &mut front, leaf);
        big.prepend(y.min, front.items(), leaf);
        *lc = y.min;
        y.e
    }
}

/// `mas_push_data`: a single overflowing node absorbs a sibling under the same parent if the two fit in two nodes
/// with a slot to spare (one more at the leaf level).
#[allow(clippy::too_many_arguments)]
fn push_data(
    root: Enode,
    d: usize,
    big: &mut Big,
    lc: &mut u64,
    hc: &mut u64,
    leaf: bool,
    retire: &mut Vec<Enode>,
    old_count: &mut usize,
) {
    let cap = if leaf { LEAF_SLOTS } else { INT_SLOTS };
    let limit = 2 * cap - if leaf { 2 } else { 1 };
    let p = walk(root, *lc, d - 1).lv[d - 1];
    // SAFETY: writer-side, live.
    let pn = unsafe { node(p.e) };
    let pend = pn.end(INT_PIVOTS, p.max);
    if p.off > 0 {
        let smin = if p.off == 1 { p.min } else { pn.pivot(p.off - 2) + 1 };
        let smax = pn.pivot(p.off - 1);
        let sib = pn.child(p.off - 1);
        if node_count(sib, smax) + big.len() <= limit {
            let mut front = Big::new(smin);
            node_items(sib, smin, smax, &mut front, leaf);
            big.prepend(smin, front.items(), leaf);
            *lc = smin;
            retire.push(sib);
            *old_count += 1;
            return;
        }
    }
    if p.off < pend {
        let smax = if p.off + 1 < INT_PIVOTS { pn.pivot(p.off + 1) } else { p.max };
        let sib = pn.child(p.off + 1);
        if node_count(sib, smax) + big.len() <= limit {
            node_items(sib, *hc + 1, smax, big, leaf);
            *hc = smax;
            retire.push(sib);
            *old_count += 1;
        }
    }
}

/// Makes a plan visible: adopt, publish, gaps, kill and retire.
fn commit<T: Entry>(tree: &crate::MapleTree<T>, st: &mut WState, counters: &Arc<Counters>, plan: Plan) {
    for &e in &plan.adopt {
        adopt(e);
    }
    match plan.top {
        Top::Root(e) => {
            if e != 0 {
                // SAFETY: `e` is the new (or rewritten) root.
                unsafe { node(e) }.set_parent(None);
            }
            if e != tree.root.load(Ordering::Relaxed) as usize {
                // Release: publishes the new nodes (pairs with readers' Acquire root load).
                tree.root.store(e as u64, Ordering::Release);
            }
        }
        Top::Slot { depth, e, gap } => {
            let path = plan.path.as_ref();
            if let Some(p) = path {
                let lv = p.lv[depth];
                // SAFETY: writer-side, live parent.
                let pn = unsafe { node(lv.e) };
                // SAFETY: `e` is the new (or rewritten) child.
                unsafe { node(e) }.set_parent(Some((lv.e, lv.off)));
                if pn.child(lv.off) != e {
                    // Release (inside set_child): publishes the new subtree.
                    pn.set_child(lv.off, e);
                }
                propagate_gap(p, depth, gap);
            }
        }
    }
    st.height = plan.height;
    for &e in &plan.retire {
        if e == plan.in_place || e == 0 {
            continue;
        }
        // SAFETY: `e` was replaced above and is unreachable from the root now.
        let n = unsafe { node(e) };
        n.mark_dead();
        if st.rcu {
            // SAFETY: unpublished and marked dead; retired exactly once (each old node is listed once).
            unsafe { retire(st, counters, crate::node::addr(e)) };
        } else {
            // SAFETY: non-RCU mode: no reader can hold it.
            unsafe { counters.free_now(crate::node::addr(e)) };
        }
    }
    add_len(tree, plan.len_delta);
}

fn add_len<T: Entry>(tree: &crate::MapleTree<T>, d: i64) {
    // Relaxed: a statistic maintained by the (single) writer.
    if d >= 0 {
        tree.len.fetch_add(d as u64, Ordering::Relaxed);
    } else {
        tree.len.fetch_sub((-d) as u64, Ordering::Relaxed);
    }
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
    fn rec(e: Enode, out: &mut Vec<usize>) {
        if !is_leaf(e) {
            // SAFETY: exclusively owned (drop).
            let n = unsafe { node(e) };
            let (end, _) = n.meta();
            for i in 0..=end {
                rec(n.word(crate::node::INT_SLOT_BASE + i) as usize, out);
            }
        }
        out.push(crate::node::addr(e));
    }
    // Relaxed: the tree is being dropped; nobody else can access it.
    let root = w.tree.root.load(Ordering::Relaxed) as usize;
    let mut all = Vec::new();
    if root != 0 {
        rec(root, &mut all);
    }
    // Relaxed: as above.
    w.tree.root.store(0, Ordering::Relaxed);
    // Retired nodes not yet handed to RCU: the tree is being dropped, so no reader can be inside them (readers
    // borrow the tree); nodes already handed over are freed by their deferred call.
    let retired = std::mem::take(&mut w.st.retired);
    // SAFETY: exclusively owned and unreachable, each listed once; the retired ones were counted as released
    // by `retire`.
    unsafe {
        w.tree.counters.free_many(all);
        w.tree.counters.free_released(retired);
    }
    release_reserve(w);
}

/// See [`Writer::reserve`].
pub(crate) fn reserve<T: Entry>(w: &mut Writer<'_, T>, nodes: usize) -> Result<(), MapleError> {
    let c = &w.tree.counters;
    let mut got = Vec::with_capacity(nodes);
    let mut stash = crate::node::Stash::for_count(nodes);
    for _ in 0..nodes {
        match c.alloc_stashed(&mut stash) {
            Some(a) => got.push(a),
            None => {
                c.return_stash(stash);
                // SAFETY: never published.
                unsafe { c.free_many(got) };
                return Err(MapleError::NoMem);
            }
        }
    }
    c.return_stash(stash);
    w.st.pool.extend(got);
    Ok(())
}

/// See [`Writer::release_reserve`].
pub(crate) fn release_reserve<T: Entry>(w: &mut Writer<'_, T>) {
    let pool = std::mem::take(&mut w.st.pool);
    // SAFETY: reserved nodes were never published.
    unsafe { w.tree.counters.free_many(pool) };
}
