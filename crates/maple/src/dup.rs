//! `dup`: an O(n) depth-first, pre-order copy of the node structure (seed 004's `__mt_dup`).
//!
//! Each source node is visited once: a new node is allocated for it *before* its children (pre-order), its
//! pivots, gaps and metadata are copied word for word, leaf values go through the caller's `map`, and children
//! are copied recursively and adopted (parent words point to the new nodes). No per-entry tree walk happens.
//!
//! Failure (a node allocation, or `map` returning an error) unwinds: the values already produced in the failing
//! leaf and in every completed subtree are passed to `undo`, and every node allocated so far is freed, so the
//! allocation domain's counters come back to where they were. The new tree's root is published only on success.

use std::num::NonZeroUsize;
use std::sync::Arc;

use vmspace_rcu::sync::Ordering;

use crate::node::{
    Counters, Enode, INT_PIVOTS, INT_SLOT_BASE, LEAF_PIVOTS, LEAF_SLOT_BASE, Stash, addr, is_leaf, node,
};
use crate::{DupError, Entry, MapleTree, Writer};

pub(crate) fn dup<T: Entry, U: Entry, E>(
    w: &Writer<'_, T>,
    mut map: impl FnMut(u64, u64, T) -> Result<U, E>,
    mut undo: impl FnMut(U),
) -> Result<MapleTree<U>, DupError<E>> {
    let src = w.tree;
    let c = Arc::clone(&src.counters);
    let new = MapleTree::<U>::with_mode(w.st.rcu, Arc::clone(&c));
    // Relaxed: the writer lock is held; the source is stable.
    let root = src.root.load(Ordering::Relaxed) as usize;
    if root == 0 {
        return Ok(new);
    }
    let mut stash = Stash::new();
    let r = copy::<T, U, E>(&c, &mut stash, root, 0, u64::MAX, &mut map, &mut undo);
    c.return_stash(stash);
    let r = r?;
    // SAFETY: `r` is our new, unpublished root.
    unsafe { node(r) }.set_parent(None);
    // Release: publishes the copied nodes to any reader of the new tree.
    new.root.store(r as u64, Ordering::Release);
    // Relaxed: statistics; the new tree is not shared yet.
    new.len.store(src.len.load(Ordering::Relaxed), Ordering::Relaxed);
    new.lock().st.height = w.st.height;
    Ok(new)
}

fn copy<T: Entry, U: Entry, E>(
    c: &Counters,
    stash: &mut Stash,
    e: Enode,
    min: u64,
    max: u64,
    map: &mut impl FnMut(u64, u64, T) -> Result<U, E>,
    undo: &mut impl FnMut(U),
) -> Result<Enode, DupError<E>> {
    let a = c.alloc_stashed(stash).ok_or(DupError::NoMem)?;
    let ne = a | (e & 0xff);
    // SAFETY: the source is live under the writer lock; `ne` is ours.
    let (n, nn) = unsafe { (node(e), node(ne)) };
    if is_leaf(e) {
        let end = n.end(LEAF_PIVOTS, max);
        // Every word (a recycled node is stale): pivots and slots; values are then replaced by their maps.
        for i in 0..31 {
            nn.set_word(i, n.word(i));
        }
        let mut s = min;
        for i in 0..=end {
            let l = if i < end { n.pivot(i) } else { max };
            let v = n.word(LEAF_SLOT_BASE + i) as usize;
            if let Some(raw) = NonZeroUsize::new(v) {
                // SAFETY: non-zero leaf words were stored from `T::into_raw`.
                let t = unsafe { T::from_raw(raw) };
                match map(s, l, t) {
                    Ok(u) => nn.set_word(LEAF_SLOT_BASE + i, u.into_raw().get() as u64),
                    Err(err) => {
                        undo_leaf::<U>(nn, i, undo);
                        // SAFETY: never published.
                        unsafe { c.free_now(a) };
                        return Err(DupError::Map(err));
                    }
                }
            }
            s = l.wrapping_add(1);
        }
        return Ok(ne);
    }
    let end = n.end(INT_PIVOTS, max);
    // Every word (a recycled node is stale); child slots are replaced by the copies below.
    for i in 0..31 {
        nn.set_word(i, n.word(i));
    }
    let mut s = min;
    for i in 0..=end {
        let l = if i < end { n.pivot(i) } else { max };
        let child = n.word(INT_SLOT_BASE + i) as usize;
        match copy::<T, U, E>(c, stash, child, s, l, map, undo) {
            Ok(ce) => {
                nn.set_word(INT_SLOT_BASE + i, ce as u64);
                // SAFETY: `ce` is our new node.
                unsafe { node(ce) }.set_parent(Some((ne, i)));
            }
            Err(err) => {
                for j in 0..i {
                    destroy::<U>(c, nn.word(INT_SLOT_BASE + j) as usize, undo);
                }
                // SAFETY: never published.
                unsafe { c.free_now(a) };
                return Err(err);
            }
        }
        s = l.wrapping_add(1);
    }
    Ok(ne)
}

/// Undoes the first `upto` slots of a new leaf.
fn undo_leaf<U: Entry>(nn: &crate::node::Node, upto: usize, undo: &mut impl FnMut(U)) {
    for i in 0..upto {
        if let Some(raw) = NonZeroUsize::new(nn.word(LEAF_SLOT_BASE + i) as usize) {
            // SAFETY: produced by `U::into_raw` above.
            undo(unsafe { U::from_raw(raw) });
        }
    }
}

/// Frees a completed new subtree, undoing its values.
fn destroy<U: Entry>(c: &Counters, e: Enode, undo: &mut impl FnMut(U)) {
    // SAFETY: our own unpublished subtree.
    let n = unsafe { node(e) };
    if is_leaf(e) {
        undo_leaf::<U>(n, crate::node::LEAF_SLOTS, undo);
    } else {
        let (end, _) = n.meta();
        for i in 0..=end {
            destroy::<U>(c, n.word(INT_SLOT_BASE + i) as usize, undo);
        }
    }
    // SAFETY: never published, freed once.
    unsafe { c.free_now(addr(e)) };
}
