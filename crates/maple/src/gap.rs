//! Gap searches (`mas_empty_area`, `mas_empty_area_rev`) in O(log n) through the per-child max gaps.
//!
//! A depth-first search over the children intersecting `[min, max]`, in index order (reverse order for the
//! highest area), descending only into children whose recorded max gap is at least `size`. A recorded gap can
//! be unusable only where `[min, max]` clips it, which happens on the two boundary paths, so the search visits
//! O(height) nodes beyond those it descends into successfully. At a leaf, each NULL range is clipped to
//! `[min, max]` and taken if it still holds `size` indices.
//!
//! The search is a reader: it checks each internal node it reads for death (after an Acquire fence), reads
//! each leaf inside its sequence count (`Node::read_begin` / `Node::read_check`: a leaf changed in place by a
//! slot store or an append meanwhile is not trusted), and restarts from the root if it meets a dead node or a
//! changed leaf. So every NULL range it returns a piece of existed, whole, in one state of its leaf.

use vmspace_rcu::Guard;
use vmspace_rcu::sync::AtomicU64;

use crate::MapleError;
use crate::node::{Enode, INT_PIVOTS, INT_SLOTS, LEAF_PIVOTS, LEAF_SLOTS, LeafRead};
use crate::read::{alive, load_root};

/// Met a dead node or a leaf changed in place: restart.
struct Retry;

/// See [`crate::MapleTree::empty_area`]; `rev` searches for the highest area and returns its start.
pub(crate) fn empty_area(
    root: &AtomicU64,
    min: u64,
    max: u64,
    size: u64,
    rev: bool,
    guard: &Guard,
) -> Result<u64, MapleError> {
    if size == 0 || min > max || max - min < size - 1 {
        return Err(MapleError::Invalid);
    }
    let area = Area { min, max, size, rev };
    loop {
        let Some(r) = load_root(root) else {
            return Ok(if rev { max - (size - 1) } else { min });
        };
        // A dead node or a changed leaf (`Err(Retry)`): `alive` / `read_check` issued the fence that lets the
        // restart see the replacement, and the restart's `read_begin` waits for an in-place store to end.
        if let Ok(found) = search(r, 0, u64::MAX, &area, guard) {
            return found.ok_or(MapleError::Busy);
        }
    }
}

/// The area asked for: `size` indices inside `[min, max]`, the lowest (or with `rev` the highest).
struct Area {
    min: u64,
    max: u64,
    size: u64,
    rev: bool,
}

/// Searches the subtree of `e`, which covers `[nmin, nmax]`.
fn search(e: Enode, nmin: u64, nmax: u64, area: &Area, guard: &Guard) -> Result<Option<u64>, Retry> {
    let &Area { min, max, size, rev } = area;
    let n = e.rcu(guard);
    let leaf = e.is_leaf();
    let (np, ns) = if leaf { (LEAF_PIVOTS, LEAF_SLOTS) } else { (INT_PIVOTS, INT_SLOTS) };
    // Snapshot the node: (first, last, slot, gap) per used slot.
    let begin = if leaf { n.read_begin().ok_or(Retry)? } else { 0 };
    let mut snap = [(0u64, 0u64, 0usize, 0u64); LEAF_SLOTS];
    let mut cnt = 0;
    let mut s = nmin;
    for i in 0..ns {
        let l = if i < np { n.pivot(i) } else { nmax };
        let l = if l >= nmax || i == np { nmax } else { l };
        let (v, g) = if leaf { (n.leaf_slot(i), 0) } else { (Enode::word_of(n.child(i)) as usize, n.gap(i)) };
        snap[cnt] = (s, l, v, g);
        cnt += 1;
        if l == nmax {
            break;
        }
        s = l + 1;
    }
    if leaf {
        if n.read_check(begin) != LeafRead::Current {
            return Err(Retry);
        }
    } else if !alive(n) {
        return Err(Retry);
    }
    let sizem1 = size - 1;
    for k in 0..cnt {
        let (s, l, v, g) = snap[if rev { cnt - 1 - k } else { k }];
        if l < min || s > max {
            continue;
        }
        if leaf {
            if v != 0 {
                continue;
            }
            let cs = s.max(min);
            let ce = l.min(max);
            if ce - cs >= sizem1 {
                return Ok(Some(if rev { ce - sizem1 } else { cs }));
            }
        } else {
            let Some(child) = Enode::from_word(v as u64) else { continue };
            if g < size {
                continue;
            }
            if let Some(x) = search(child, s, l, area, guard)? {
                return Ok(Some(x));
            }
        }
    }
    Ok(None)
}
