//! `dup`: an O(n) depth-first, pre-order copy of the node structure (`__mt_dup` in `lib/maple_tree.c`).
//!
//! Each source node is visited once: a new node is allocated for it *before* its children (pre-order), its
//! pivots, gaps and metadata are copied word for word, leaf values go through the caller's `map`, and children
//! are copied recursively and adopted (parent words point to the new nodes). No per-entry tree walk happens.
//! The caller's `ahead` sees every value once, in order, one leaf ahead of `map`: a leaf's values are shown to it
//! when the copy of the leaf before it (under the same parent) starts, or when the leaf's own copy starts if it
//! is its parent's first (or the root). Fork queues the VMAs they point to and prefetches them a few places
//! ahead of the one it copies, so that cache misses overlap instead of following each other.
//!
//! Failure (a node allocation, or `map` returning an error) unwinds: the values already produced in the failing
//! leaf and in every completed subtree are passed to `undo`, and every node allocated so far is freed, so the
//! allocation domain's counters come back to where they were. The new tree's root is published only on success.

use std::num::NonZeroUsize;
use std::sync::Arc;

use vmspace_rcu::sync::Ordering;

use crate::node::{
    Counters, Enode, INT_PIVOTS, INT_SLOT_BASE, LEAF_PIVOTS, LEAF_SLOT_BASE, Locked, Node, Stash,
};
use crate::{DupError, Entry, MapleTree, Writer};

/// Copies the tree of `w` (module docs). `look`: whether to call `ahead` at all. Without it the look-ahead is skipped rather than run with an empty
/// callback: its loads of every leaf slot are atomic, and the compiler keeps them even when nothing uses them.
pub(crate) fn dup<T: Entry, U: Entry, E>(
    w: &Writer<'_, T>,
    look: bool,
    mut ahead: impl FnMut(T),
    mut map: impl FnMut(u64, u64, T) -> Result<U, E>,
    mut undo: impl FnMut(U),
) -> Result<MapleTree<U>, DupError<E>> {
    let src = w.tree;
    let c = Arc::clone(&src.counters);
    let mut new = MapleTree::<U>::with_mode(w.st.rcu, Arc::clone(&c));
    // Relaxed: the writer lock is held; the source is stable.
    let Some(root) = Enode::from_word(src.root.load(Ordering::Relaxed)) else {
        return Ok(new);
    };
    let mut stash = Stash::new();
    let mut cx = Copier {
        look,
        c: &c,
        lk: w.locked(),
        stash: &mut stash,
        ahead: &mut ahead,
        map: &mut map,
        undo: &mut undo,
    };
    let r = cx.copy(root, 0, u64::MAX, false);
    c.return_stash(stash);
    let r = r?;
    // `r` is our new, unpublished root, owned under the source's writer lock like every node of the copy.
    r.locked(w.locked()).init_parent(None);
    // Release: publishes the copied nodes to any reader of the new tree.
    new.root.store(r.word(), Ordering::Release);
    // Relaxed: statistics; the new tree is not shared yet.
    new.len.store(src.len.load(Ordering::Relaxed), Ordering::Relaxed);
    // Exclusive access: no lock to take.
    new.w.get_mut().height = w.st.height;
    Ok(new)
}

/// The state of one copy: the source is read and the copy's nodes are written under the source's writer lock
/// (`lk`); the copy's nodes are the writer's own until the copy is published.
struct Copier<'a, 'w, A, M, D> {
    /// Whether `ahead` is called (see [`dup`]).
    look: bool,
    c: &'a Counters,
    lk: Locked<'w>,
    stash: &'a mut Stash,
    ahead: &'a mut A,
    map: &'a mut M,
    undo: &'a mut D,
}

impl<A, M, D> Copier<'_, '_, A, M, D> {
    /// Shows the values of leaf `e` (whose range ends at `max`) to `ahead`, in order.
    fn look_ahead<T: Entry>(&mut self, e: Enode, max: u64)
    where
        A: FnMut(T),
    {
        let n = e.locked(self.lk);
        for i in 0..=n.end(LEAF_PIVOTS, max) {
            if let Some(raw) = NonZeroUsize::new(n.leaf_slot_locked(i)) {
                // SAFETY: non-zero leaf words were stored from `T::into_raw`.
                (self.ahead)(unsafe { T::from_raw(raw) });
            }
        }
    }

    /// Copies the subtree of `e` (covering `[min, max]`); returns the copy's root. `seen`: `e` is a leaf whose
    /// values `ahead` has already seen (module docs).
    fn copy<T: Entry, U: Entry, E>(
        &mut self,
        e: Enode,
        min: u64,
        max: u64,
        seen: bool,
    ) -> Result<Enode, DupError<E>>
    where
        A: FnMut(T),
        M: FnMut(u64, u64, T) -> Result<U, E>,
        D: FnMut(U),
    {
        let (c, lk) = (self.c, self.lk);
        let a = c.alloc_stashed(self.stash).ok_or(DupError::NoMem)?;
        let ne = e.same_kind_at(a);
        let (n, nn) = (e.locked(lk), ne.locked(lk));
        // Every word (a recycled node is stale): pivots and slots; leaf values are then replaced by their maps,
        // child slots by the copies below.
        nn.copy_words_from(n);
        let end = n.end(if e.is_leaf() { LEAF_PIVOTS } else { INT_PIVOTS }, max);
        // Leaf children are shown to `ahead` one ahead of their copy (module docs).
        let leaf_kids = !e.is_leaf() && n.child_locked(0).is_leaf();
        if self.look {
            if e.is_leaf() && !seen {
                self.look_ahead::<T>(e, max);
            } else if leaf_kids {
                self.look_ahead::<T>(n.child_locked(0), if end == 0 { max } else { n.pivot(0) });
            }
        }
        let mut s = min;
        for i in 0..=end {
            let l = if i < end { n.pivot(i) } else { max };
            let r = if e.is_leaf() {
                self.copy_value::<T, U, E>(n, nn, i, s, l)
            } else {
                // The source node copied after the next one starts loading now (under leaf children the next
                // one is being read by the look-ahead).
                let later = if leaf_kids { i + 2 } else { i + 1 };
                if later <= end {
                    prefetch_node(n.child_locked(later));
                }
                if self.look && leaf_kids && i < end {
                    let next_max = if i + 1 < end { n.pivot(i + 1) } else { max };
                    self.look_ahead::<T>(n.child_locked(i + 1), next_max);
                }
                self.copy_child(n, nn, ne, i, s, l, leaf_kids)
            };
            if let Err(err) = r {
                if e.is_leaf() {
                    undo_leaf::<U>(nn, i, self.undo);
                } else {
                    for j in 0..i {
                        destroy::<U>(lk, c, nn.child_locked(j), self.undo);
                    }
                }
                // SAFETY: never published.
                unsafe { c.free_now(a) };
                return Err(err);
            }
            s = l.wrapping_add(1);
        }
        Ok(ne)
    }

    /// Maps the value in leaf slot `i` (covering `[s, l]`) of `n` into the copy `nn`.
    fn copy_value<T: Entry, U: Entry, E>(
        &mut self,
        n: &Node,
        nn: &Node,
        i: usize,
        s: u64,
        l: u64,
    ) -> Result<(), DupError<E>>
    where
        M: FnMut(u64, u64, T) -> Result<U, E>,
    {
        let Some(raw) = NonZeroUsize::new(n.leaf_slot_locked(i)) else {
            return Ok(());
        };
        // SAFETY: non-zero leaf words were stored from `T::into_raw`.
        let t = unsafe { T::from_raw(raw) };
        let u = (self.map)(s, l, t).map_err(DupError::Map)?;
        nn.set_word(LEAF_SLOT_BASE + i, u.into_raw().get() as u64);
        Ok(())
    }

    /// Copies child `i` (covering `[s, l]`) of `n` and links the copy into `nn` (whose encoded pointer is `ne`);
    /// `seen` as for [`Copier::copy`].
    #[allow(clippy::too_many_arguments)] // One recursion step's state; a struct would only rename it.
    fn copy_child<T: Entry, U: Entry, E>(
        &mut self,
        n: &Node,
        nn: &Node,
        ne: Enode,
        i: usize,
        s: u64,
        l: u64,
        seen: bool,
    ) -> Result<(), DupError<E>>
    where
        A: FnMut(T),
        M: FnMut(u64, u64, T) -> Result<U, E>,
        D: FnMut(U),
    {
        let ce = self.copy::<T, U, E>(n.child_locked(i), s, l, seen)?;
        nn.set_word(INT_SLOT_BASE + i, ce.word());
        ce.locked(self.lk).init_parent(Some((ne, i)));
        Ok(())
    }
}

/// Starts loading the four lines of node `e` (a hint: never faults, changes nothing the program sees).
#[inline(always)]
fn prefetch_node(e: Enode) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let base = e.addr() as *const i8;
        for line in 0..std::mem::size_of::<Node>() / 64 {
            // SAFETY: `prefetcht0` never faults and has no effect the program can observe; the address is
            // inside a live node of the source tree (its writer lock is held).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(line * 64)) };
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = e;
}

/// Undoes the first `upto` slots of a new leaf.
fn undo_leaf<U: Entry>(nn: &Node, upto: usize, undo: &mut impl FnMut(U)) {
    for i in 0..upto {
        if let Some(raw) = NonZeroUsize::new(nn.leaf_slot_locked(i)) {
            // SAFETY: produced by `U::into_raw` above.
            undo(unsafe { U::from_raw(raw) });
        }
    }
}

/// Frees a completed new subtree, undoing its values.
fn destroy<U: Entry>(lk: Locked<'_>, c: &Counters, e: Enode, undo: &mut impl FnMut(U)) {
    let n = e.locked(lk);
    if e.is_leaf() {
        undo_leaf::<U>(n, crate::node::LEAF_SLOTS, undo);
    } else {
        let (end, _) = n.meta();
        for i in 0..=end {
            destroy::<U>(lk, c, n.child_locked(i), undo);
        }
    }
    // SAFETY: never published, freed once.
    unsafe { c.free_now(e.addr()) };
}
