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
    Enode, INT_GAP_BASE, INT_META, INT_MIN, INT_PIVOTS, INT_SLOT_BASE, INT_SLOTS, LEAF_MIN, LEAF_PIVOTS,
    LEAF_SLOT_BASE, LEAF_SLOTS, Locked, Node, PARENT_WRITING,
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
    let lk = w.locked();
    // Relaxed: the writer lock is held.
    let root = Enode::from_word(w.tree.root.load(Ordering::Relaxed));
    let len = w.tree.len.load(Ordering::Relaxed);
    let Some(root) = root else {
        if w.st.height != 0 {
            return Err(format!("empty tree with height {}", w.st.height));
        }
        if len != 0 {
            return Err(format!("empty tree with len {len}"));
        }
        return Ok(());
    };
    if !Node::is_root_word(root.locked(lk).parent_word()) {
        return Err("root parent word is not the root marker".into());
    }
    let mut st = Walk { entries: 0, nodes: 0, prev_null: false, leaf_depth: None };
    check(lk, root, 0, u64::MAX, 0, true, &mut st)?;
    if st.leaf_depth.map(|d| d + 1) != Some(w.st.height) {
        return Err(format!("leaves at depth {:?} but height {}", st.leaf_depth, w.st.height));
    }
    if st.entries != len {
        return Err(format!("{} entries but len {len}", st.entries));
    }
    if root.is_leaf() && st.entries == 0 {
        return Err("a root leaf holding only NULL should be an empty tree".into());
    }
    Ok(())
}

/// Checks the subtree of `e` covering `[min, max]`; returns its max gap.
fn check(
    lk: Locked<'_>,
    e: Enode,
    min: u64,
    max: u64,
    depth: usize,
    is_root: bool,
    st: &mut Walk,
) -> Result<u64, String> {
    if !e.kind_is_valid() {
        return Err(format!("bad enode {:#x}", e.word()));
    }
    let n = e.locked(lk);
    st.nodes += 1;
    if n.is_dead() {
        return Err(format!("reachable dead node {:#x}", e.addr()));
    }
    let pw = n.parent_word();
    if pw & PARENT_WRITING != 0 {
        return Err(format!("node {:#x}: an in-place store left unfinished (parent word {pw:#x})", e.addr()));
    }
    if !e.is_leaf() && Node::seq_of(pw) != 0 {
        return Err(format!("internal node {:#x} with a sequence count (parent word {pw:#x})", e.addr()));
    }
    let end = n.end(if e.is_leaf() { LEAF_PIVOTS } else { INT_PIVOTS }, max);
    let at = At { lk, e, n, min, max, depth, end };
    check_layout(&at, is_root)?;
    if e.is_leaf() { check_leaf(&at, st) } else { check_children(&at, is_root, st) }
}

/// The node [`check`] is looking at: encoded pointer, node, range, depth and end.
struct At<'w> {
    lk: Locked<'w>,
    e: Enode,
    n: &'w Node,
    min: u64,
    max: u64,
    depth: usize,
    end: usize,
}

impl At<'_> {
    /// The node's description, for error messages.
    fn name(&self) -> String {
        format!("node {:#x} [{:#x}, {:#x}] depth {}", self.e.addr(), self.min, self.max, self.depth)
    }
}

/// Pivots in order inside the range (the end pivot equal to the maximum when stored), unused pivots, slots
/// and gaps zero, minimum occupancy.
fn check_layout(at: &At<'_>, is_root: bool) -> Result<(), String> {
    let &At { n, min, max, end, .. } = at;
    let leaf = at.e.is_leaf();
    let (np, ns, minocc) =
        if leaf { (LEAF_PIVOTS, LEAF_SLOTS, LEAF_MIN) } else { (INT_PIVOTS, INT_SLOTS, INT_MIN) };
    // Pivots.
    let mut s = min;
    for i in 0..np {
        let p = n.pivot(i);
        if i < end {
            if p < s || p >= max {
                return Err(format!("{}: pivot[{i}] = {p:#x} out of order/range", at.name()));
            }
            s = p + 1;
        } else if i == end {
            if p != max {
                return Err(format!("{}: end pivot[{i}] = {p:#x} != max", at.name()));
            }
        } else if p != 0 {
            return Err(format!("{}: unused pivot[{i}] = {p:#x}", at.name()));
        }
    }
    if end < ns - 1 {
        for i in end + 1..ns {
            let base = if leaf { LEAF_SLOT_BASE } else { INT_SLOT_BASE };
            if n.word(base + i) != 0 || (!leaf && n.word(INT_GAP_BASE + i) != 0) {
                return Err(format!("{}: unused slot {i} not zero", at.name()));
            }
        }
    }
    if !is_root && end + 1 < minocc {
        return Err(format!("{}: {} slots < minimum {minocc}", at.name(), end + 1));
    }
    Ok(())
}

/// A leaf: depth equal to the other leaves', no adjacent NULLs (across leaves too), no NULL at the end below
/// `u64::MAX`; counts its entries. Returns its max gap.
fn check_leaf(at: &At<'_>, st: &mut Walk) -> Result<u64, String> {
    let &At { n, min, max, depth, end, .. } = at;
    if let Some(d) = st.leaf_depth {
        if d != depth {
            return Err(format!("{}: leaf at depth {depth}, others at {d}", at.name()));
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
                return Err(format!("{}: adjacent NULL ranges at slot {i}", at.name()));
            }
        } else {
            st.entries += 1;
        }
        st.prev_null = v == 0;
        items.push(Item { last: l, slot: v, gap: 0 });
    }
    if st.prev_null && max != u64::MAX {
        return Err(format!("{}: leaf ends in NULL below u64::MAX", at.name()));
    }
    Ok(leaf_gap(&items, min))
}

/// An internal node: spare word, metadata, children's parent words and gaps (recursing into them). Returns its
/// max gap.
fn check_children(at: &At<'_>, is_root: bool, st: &mut Walk) -> Result<u64, String> {
    let &At { lk, e, n, min, max, depth, end } = at;
    if n.word(INT_META + 1) != 0 {
        return Err(format!("{}: spare word not zero", at.name()));
    }
    let (mend, mgo) = n.meta();
    if mend != end {
        return Err(format!("{}: meta end {mend} != {end}", at.name()));
    }
    if is_root && end == 0 {
        return Err(format!("{}: root internal node with one child", at.name()));
    }
    let mut s = min;
    let (mut best, mut best_off) = (0u64, 0usize);
    for i in 0..=end {
        let l = if i < end { n.pivot(i) } else { max };
        let Some(c) = Enode::from_word(n.word(INT_SLOT_BASE + i)) else {
            return Err(format!("{}: null child {i}", at.name()));
        };
        let cn: &Node = c.locked(lk);
        if Node::decode_parent(cn.parent_word()) != Some((e.addr(), i)) {
            return Err(format!("{}: child {i} parent word {:#x} wrong", at.name(), cn.parent_word()));
        }
        let g = check(lk, c, s, l, depth + 1, false, st)?;
        if n.gap(i) != g {
            return Err(format!("{}: gap[{i}] = {} but child max gap is {g}", at.name(), n.gap(i)));
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
            at.name()
        ));
    }
    Ok(best)
}

/// Node statistics (see [`NodeStats`]).
pub(crate) fn stats<T: Entry>(w: &Writer<'_, T>) -> NodeStats {
    fn count(lk: Locked<'_>, e: Option<Enode>) -> u64 {
        let Some(e) = e else { return 0 };
        if e.is_leaf() {
            return 1;
        }
        let n = e.locked(lk);
        let (end, _) = n.meta();
        1 + (0..=end).map(|i| count(lk, Enode::from_word(n.word(INT_SLOT_BASE + i)))).sum::<u64>()
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
        live: count(w.locked(), Enode::from_word(w.tree.root.load(Ordering::Relaxed))),
    }
}

/// A human-readable dump: one line per node, indented by depth.
pub(crate) fn dump<T: Entry>(w: &Writer<'_, T>) -> String {
    fn rec(lk: Locked<'_>, out: &mut String, e: Enode, min: u64, max: u64, depth: usize) {
        let n = e.locked(lk);
        let pad = "  ".repeat(depth);
        if e.is_leaf() {
            let end = n.end(LEAF_PIVOTS, max);
            let _ = write!(out, "{pad}leaf {:#x} [{min:#x}, {max:#x}]:", e.addr());
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
            let _ = writeln!(out, "{pad}node {:#x} [{min:#x}, {max:#x}] end {end} gap_off {go}", e.addr());
            let mut s = min;
            for i in 0..=end {
                let l = if i < end { n.pivot(i) } else { max };
                let _ = writeln!(out, "{pad} slot {i} [{s:#x}-{l:#x}] gap {}", n.gap(i));
                match Enode::from_word(n.word(INT_SLOT_BASE + i)) {
                    Some(c) => rec(lk, out, c, s, l, depth + 1),
                    None => {
                        let _ = writeln!(out, "{pad}  (no child)");
                    }
                }
                s = l.wrapping_add(1);
            }
        }
    }
    // Relaxed: writer lock held.
    let root = Enode::from_word(w.tree.root.load(Ordering::Relaxed));
    let mut out = format!("maple tree: height {} len {} rcu {}\n", w.st.height, w.tree.len(), w.st.rcu);
    if let Some(root) = root {
        rec(w.locked(), &mut out, root, 0, u64::MAX, 0);
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
        let root = w.tree.root.load(vmspace_rcu::sync::Ordering::Relaxed);
        let n = crate::node::Enode::from_word(root).unwrap().locked(w.locked());
        let g = n.gap(0);
        n.set_gap(0, g + 1);
        assert!(super::validate(&w).unwrap_err().contains("gap[0]"));
        n.set_gap(0, g);
        super::validate(&w).unwrap();
    }
}
