//! Invariant checks, the debug dump, and node statistics. All run under the writer lock.
//!
//! [`validate`] walks every node and checks: kinds and alignment; parent words (root marker, parent address and
//! slot); no reachable node dead; pivots strictly increasing inside `[min, max]`, the end pivot equal to the
//! node max when stored, unused pivots, slots and gaps zero; internal metadata (end and largest-gap offset);
//! minimum occupancy except at the root; a root internal node with at least two children; all leaves at the
//! recorded height; no two adjacent NULL ranges (also across leaves); a leaf ends in NULL only at `u64::MAX`;
//! each internal gap equals the recomputed max gap of its child; the entry count equals `len()`; an empty tree
//! has no root node.

use std::fmt::Write as _;

use vmspace_rcu::sync::Ordering;

use crate::build::{Item, leaf_gap};
use crate::node::{
    Enode, INT_GAP_BASE, INT_META, INT_MIN, INT_PIVOTS, INT_SLOT_BASE, INT_SLOTS, KIND_INTERNAL, KIND_LEAF,
    LEAF_MIN, LEAF_PIVOTS, LEAF_SLOT_BASE, LEAF_SLOTS, Node, ROOT_PARENT, addr, is_leaf, node,
};
use crate::{Entry, NodeStats, Writer};

struct Walk {
    entries: u64,
    nodes: u64,
    prev_null: bool,
    leaf_depth: Option<usize>,
}

/// See the module docs.
pub(crate) fn validate<T: Entry>(w: &Writer<'_, T>) -> Result<(), String> {
    // Relaxed: the writer lock is held.
    let root = w.tree.root.load(Ordering::Relaxed) as usize;
    let len = w.tree.len.load(Ordering::Relaxed);
    if root == 0 {
        if w.st.height != 0 {
            return Err(format!("empty tree with height {}", w.st.height));
        }
        if len != 0 {
            return Err(format!("empty tree with len {len}"));
        }
        return Ok(());
    }
    // SAFETY: writer-side, reachable.
    if unsafe { node(root) }.parent_word() != ROOT_PARENT {
        return Err("root parent word is not the root marker".into());
    }
    let mut st = Walk { entries: 0, nodes: 0, prev_null: false, leaf_depth: None };
    let g = check(root, 0, u64::MAX, 0, true, &mut st)?;
    let _ = g;
    if st.leaf_depth.map(|d| d + 1) != Some(w.st.height) {
        return Err(format!("leaves at depth {:?} but height {}", st.leaf_depth, w.st.height));
    }
    if st.entries != len {
        return Err(format!("{} entries but len {len}", st.entries));
    }
    if is_leaf(root) && st.entries == 0 {
        return Err("a root leaf holding only NULL should be an empty tree".into());
    }
    Ok(())
}

/// Checks the subtree of `e` covering `[min, max]`; returns its max gap.
fn check(e: Enode, min: u64, max: u64, depth: usize, is_root: bool, st: &mut Walk) -> Result<u64, String> {
    let kind = e & 0xff;
    if kind != KIND_LEAF && kind != KIND_INTERNAL {
        return Err(format!("bad enode {e:#x}"));
    }
    // SAFETY: writer-side, reachable.
    let n = unsafe { node(e) };
    st.nodes += 1;
    if n.is_dead() {
        return Err(format!("reachable dead node {:#x}", addr(e)));
    }
    let leaf = is_leaf(e);
    let (np, ns, minocc) =
        if leaf { (LEAF_PIVOTS, LEAF_SLOTS, LEAF_MIN) } else { (INT_PIVOTS, INT_SLOTS, INT_MIN) };
    let end = n.end(np, max);
    let at = || format!("node {:#x} [{min:#x}, {max:#x}] depth {depth}", addr(e));
    // Pivots.
    let mut s = min;
    for i in 0..np {
        let p = n.pivot(i);
        if i < end {
            if p < s || p >= max {
                return Err(format!("{}: pivot[{i}] = {p:#x} out of order/range", at()));
            }
            s = p + 1;
        } else if i == end {
            if p != max {
                return Err(format!("{}: end pivot[{i}] = {p:#x} != max", at()));
            }
        } else if p != 0 {
            return Err(format!("{}: unused pivot[{i}] = {p:#x}", at()));
        }
    }
    if end < ns - 1 {
        for i in end + 1..ns {
            let base = if leaf { LEAF_SLOT_BASE } else { INT_SLOT_BASE };
            if n.word(base + i) != 0 || (!leaf && n.word(INT_GAP_BASE + i) != 0) {
                return Err(format!("{}: unused slot {i} not zero", at()));
            }
        }
    }
    if !is_root && end + 1 < minocc {
        return Err(format!("{}: {} slots < minimum {minocc}", at(), end + 1));
    }
    if leaf {
        if let Some(d) = st.leaf_depth {
            if d != depth {
                return Err(format!("{}: leaf at depth {depth}, others at {d}", at()));
            }
        } else {
            st.leaf_depth = Some(depth);
        }
        let mut items = Vec::with_capacity(end + 1);
        for i in 0..=end {
            let v = n.word(LEAF_SLOT_BASE + i) as usize;
            let l = if i < end { n.pivot(i) } else { max };
            if v == 0 {
                if st.prev_null {
                    return Err(format!("{}: adjacent NULL ranges at slot {i}", at()));
                }
            } else {
                st.entries += 1;
            }
            st.prev_null = v == 0;
            items.push(Item { last: l, slot: v, gap: 0 });
        }
        if st.prev_null && max != u64::MAX {
            return Err(format!("{}: leaf ends in NULL below u64::MAX", at()));
        }
        return Ok(leaf_gap(&items, min));
    }
    if n.word(INT_META + 1) != 0 {
        return Err(format!("{}: spare word not zero", at()));
    }
    let (mend, mgo) = n.meta();
    if mend != end {
        return Err(format!("{}: meta end {mend} != {end}", at()));
    }
    if is_root && end == 0 {
        return Err(format!("{}: root internal node with one child", at()));
    }
    let mut s = min;
    let (mut best, mut best_off) = (0u64, 0usize);
    for i in 0..=end {
        let l = if i < end { n.pivot(i) } else { max };
        let c = n.word(INT_SLOT_BASE + i) as usize;
        if c == 0 {
            return Err(format!("{}: null child {i}", at()));
        }
        // SAFETY: writer-side, reachable.
        let cn: &Node = unsafe { node(c) };
        if Node::decode_parent(cn.parent_word()) != Some((addr(e), i)) {
            return Err(format!("{}: child {i} parent word {:#x} wrong", at(), cn.parent_word()));
        }
        let g = check(c, s, l, depth + 1, false, st)?;
        if n.gap(i) != g {
            return Err(format!("{}: gap[{i}] = {} but child max gap is {g}", at(), n.gap(i)));
        }
        if g > best || i == 0 {
            best = g;
            best_off = i;
        }
        s = l.wrapping_add(1);
    }
    if n.gap(mgo) != best || mgo > end {
        return Err(format!(
            "{}: meta gap offset {mgo} does not hold the max gap {best} (at {best_off})",
            at()
        ));
    }
    Ok(best)
}

/// Node statistics (see [`NodeStats`]).
pub(crate) fn stats<T: Entry>(w: &Writer<'_, T>) -> NodeStats {
    fn count(e: Enode) -> u64 {
        if e == 0 {
            return 0;
        }
        if is_leaf(e) {
            return 1;
        }
        // SAFETY: writer-side, reachable.
        let n = unsafe { node(e) };
        let (end, _) = n.meta();
        1 + (0..=end).map(|i| count(n.word(INT_SLOT_BASE + i) as usize)).sum::<u64>()
    }
    let c = &w.tree.counters;
    // Acquire: pairs with the Release increments of `freed`, so that the later load of `released` counts every
    // node this count includes (see `Counters`).
    let freed = c.freed.load(Ordering::Acquire);
    // Relaxed: statistics, and the root under the writer lock.
    let released = c.released.load(Ordering::Relaxed);
    NodeStats {
        allocated: c.allocated.load(Ordering::Relaxed),
        freed,
        pending_free: released - freed,
        reserved: w.st.pool.len() as u64,
        live: count(w.tree.root.load(Ordering::Relaxed) as usize),
    }
}

/// A human-readable dump: one line per node, indented by depth.
pub(crate) fn dump<T: Entry>(w: &Writer<'_, T>) -> String {
    fn rec(out: &mut String, e: Enode, min: u64, max: u64, depth: usize) {
        // SAFETY: writer-side, reachable.
        let n = unsafe { node(e) };
        let pad = "  ".repeat(depth);
        if is_leaf(e) {
            let end = n.end(LEAF_PIVOTS, max);
            let _ = write!(out, "{pad}leaf {:#x} [{min:#x}, {max:#x}]:", addr(e));
            let mut s = min;
            for i in 0..=end {
                let l = if i < end { n.pivot(i) } else { max };
                let v = n.word(LEAF_SLOT_BASE + i);
                let _ = write!(out, " [{s:#x}-{l:#x}]={v:#x}");
                s = l.wrapping_add(1);
            }
            out.push('\n');
        } else {
            let (end, go) = n.meta();
            let _ = writeln!(out, "{pad}node {:#x} [{min:#x}, {max:#x}] end {end} gap_off {go}", addr(e));
            let mut s = min;
            for i in 0..=end {
                let l = if i < end { n.pivot(i) } else { max };
                let _ = writeln!(out, "{pad} slot {i} [{s:#x}-{l:#x}] gap {}", n.gap(i));
                rec(out, n.word(INT_SLOT_BASE + i) as usize, s, l, depth + 1);
                s = l.wrapping_add(1);
            }
        }
    }
    // Relaxed: writer lock held.
    let root = w.tree.root.load(Ordering::Relaxed) as usize;
    let mut out = format!("maple tree: height {} len {} rcu {}\n", w.st.height, w.tree.len(), w.st.rcu);
    if root != 0 {
        rec(&mut out, root, 0, u64::MAX, 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use crate::MapleTree;

    #[test]
    fn dump_and_stats_describe_the_tree() {
        let t = MapleTree::<NonZeroUsize>::new();
        for k in 0..40u64 {
            t.store_range(k * 10, k * 10 + 4, NonZeroUsize::new(k as usize + 1)).unwrap();
        }
        let d = t.dump();
        assert!(d.starts_with("maple tree: height 2 len 40 rcu true"), "{d}");
        assert!(d.contains("[0x0-0x4]=0x1"), "{d}");
        assert_eq!(
            d.lines().filter(|l| l.trim_start().starts_with("leaf")).count() as u64,
            t.node_stats().live - 1
        );
        t.validate().unwrap();
    }

    #[test]
    fn validate_reports_a_corrupted_gap() {
        let t = MapleTree::<NonZeroUsize>::new();
        for k in 0..40u64 {
            t.store_range(k * 10, k * 10 + 4, NonZeroUsize::new(k as usize + 1)).unwrap();
        }
        let w = t.lock();
        // Relaxed: test-only corruption under the writer lock.
        let root = w.tree.root.load(vmspace_rcu::sync::Ordering::Relaxed) as usize;
        // SAFETY: the root is live; we hold the writer lock.
        let n = unsafe { crate::node::node(root) };
        let g = n.gap(0);
        n.set_gap(0, g + 1);
        assert!(super::validate(&w).unwrap_err().contains("gap[0]"));
        n.set_gap(0, g);
        super::validate(&w).unwrap();
    }
}
