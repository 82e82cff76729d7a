//! The writer's cursor: the kernel's `ma_state` as a writer holds it (`struct vma_iterator` in `mm/vma.h`).
//!
//! A [`WriteCursor`] borrows a [`Writer`] and keeps the path of one walk: the node at every depth from the root
//! to the leaf holding its index, with each node's `[min, max]` and the offset followed. A call that reads the
//! neighbours of a range and then changes it (`vma_prev`, `vma_next`, `vma_iter_load`, then
//! `vma_iter_store_gfp` / `mas_store_prealloc` in `mm/vma.c`) walks the tree once through it:
//!
//! * **Positioning.** An operation at index `i` starts from the deepest cached level whose `[min, max]`
//!   covers `i` (the leaf, when `i` stays in it: no walk at all) and walks down from there
//!   (`write::walk_from`); only a cursor without a valid path walks from the root word (a **descent**,
//!   counted in [`Writer::descents`]).
//! * **Steps.** [`WriteCursor::next`] and [`WriteCursor::prev`] move one slot within the cached leaf, or
//!   climb to the nearest cached ancestor that covers the neighbouring index and walk down from it (as
//!   `mas_next_node` / `mas_prev_node` climb to the common ancestor).
//! * **Stores.** [`WriteCursor::store_range`], `insert_range` and `erase` position the path at the store's
//!   first index and hand it to the store (`write::store_at`) in place of the walk from the root that a plain
//!   [`Writer::store_range`] makes: that walk is exactly what is skipped, and every other step of the store
//!   (exact fit, slot store, append under the leaf's sequence count, node store, rebuild, gap propagation,
//!   allocation from the reserve) is the same code. Lock-free readers therefore see exactly the stores they
//!   saw before; nothing in the read protocol changes, and the cursor adds no lock-free interaction (it reads
//!   nodes only with the writer lock held, `Enode::locked`), so it needs no loom model of its own.
//!
//! # Validity across stores
//!
//! The path is only followed under the writer lock, when every node of the tree is live; it stays valid as
//! long as the nodes it names are still the tree's with the same ranges. Every store bumps a count in the
//! writer state (`WState::stamp`); a cursor keeps the count of its last walk and, when they differ (a store it
//! did not make: through the [`Writer`]'s own store methods, or by another writer between two lock sessions),
//! drops its path and descends again. After a store of its own it keeps what the store did not replace (the store reports it,
//! `write::After`):
//!
//! * an **in-place store** (exact fit, slot store, append, node store; and every non-RCU rewrite) keeps every
//!   node: only the leaf's offset is scanned again (its pivots may have moved; its `[min, max]` did not), and
//!   only when the next operation needs it (the path is kept but marked not positioned, so a cursor dropped
//!   after its store, as [`Writer::erase`]'s, scans nothing more);
//! * a **node store** at a leaf's last sequence count copies the leaf: the copy, with the same range, takes the
//!   leaf's place in the path (its offset found again as above);
//! * a **rebuild** that ends by publishing a new subtree in a parent's slot keeps the levels from the root to
//!   that parent (their nodes and pivots are unchanged) and walks down again from there, into the new nodes;
//! * a rebuild that **replaces the root** (the tree grows, shrinks or empties) leaves nothing: the cursor
//!   descends again (counted).
//!
//! A store made **without** the cursor ([`Writer::store_range`] and the other plain stores, `write::store`)
//! uses the cursor's path as a finger while it is still valid (no store since its last walk or refresh): it
//! walks down from the path's deepest level whose `[min, max]` covers its first index (counted as a descent
//! only when that is the root), and the path stops being trusted afterwards, as after any store the cursor did
//! not make. So an insert right after a [`Writer::erase`] (whose cursor left its path valid) of the same range
//! starts at the erase's leaf: an munmap followed by an mmap of the same place walks from the root once.
//!
//! The state (index and path) lives in the writer state under the tree's mutex (`WState::cursor`, one per
//! tree: a tree has one writer at a time), so it outlives a lock session at no cost: [`Writer::cursor`] starts
//! a new cursor (its first operation walks from the root, as a new `ma_state` does), and
//! [`Writer::resume_cursor`] takes the cursor up where the last one stopped (`mas_pause` keeps only the index;
//! this keeps the path too, trusted again only if no store was made meanwhile). The path is boxed, allocated
//! once per tree at its first cursor, so that handing it to a store moves a pointer, not 20 levels.

use std::num::NonZeroUsize;

use vmspace_rcu::sync::Ordering;

use crate::node::{Enode, LEAF_PIVOTS, Level, Locked};
use crate::write::{After, Path, Replaced, raw_word, store_at, typed_replaced, walk, walk_from};
use crate::{Entry, MapleError, Writer};

/// The writer's cursor state (`WState::cursor`).
pub(crate) struct CursorState {
    /// The index the cursor is at.
    index: u64,
    /// The path of the last walk (allocated at the first walk; `None` also while a store borrows it).
    path: Option<Box<Path>>,
    /// The path is the tree's as of `stamp` (else it is only storage).
    valid: bool,
    /// The writer's store count when `path` was last walked or refreshed.
    stamp: u64,
    /// The path's offsets are those of `index` (else only its levels' nodes and ranges are known).
    at: bool,
}

impl CursorState {
    pub(crate) fn new() -> Self {
        CursorState { index: 0, path: None, valid: false, stamp: 0, at: false }
    }

    /// The cursor's path storage for a store made without the cursor (`write::store`): the store walks from the
    /// root into it instead of into a fresh 20-level path on the stack (no initialisation of unused levels, no
    /// copy of the path out of the walk). The cursor's path stops being trusted (the store changes the tree
    /// anyway, and bumps the writer's store count); hand it back with [`CursorState::put_scratch`].
    #[inline]
    pub(crate) fn take_scratch(&mut self, root: Enode) -> Box<Path> {
        self.valid = false;
        self.at = false;
        match self.path.take() {
            Some(mut p) => {
                p.lv[0] = Level::root(root);
                p
            }
            None => {
                let top = Level::root(root);
                Box::new(Path { lv: [top; crate::node::MAX_HEIGHT] })
            }
        }
    }

    /// The cursor's path as a **finger** for a store made without the cursor (`write::store`), if it is still
    /// the tree's (walked or refreshed since the last store: `valid` and `stamp`, under the writer lock, so
    /// every node it names is live with the range it records): the path and its deepest level whose
    /// `[min, max]` covers `key` (level 0, the root, covers every key). The store walks down from that level
    /// instead of from the root word: a plain insert right after a [`Writer::erase`] of the same range (an
    /// mmap after an munmap) starts at the erase's leaf. As [`CursorState::take_scratch`], the cursor stops
    /// trusting the path; hand it back with [`CursorState::put_scratch`]. None: no valid path (walk from the
    /// root into [`CursorState::take_scratch`]'s storage).
    #[inline]
    pub(crate) fn take_finger(&mut self, stamp: u64, key: u64, leaf_d: usize) -> Option<(Box<Path>, usize)> {
        if !(self.valid && self.stamp == stamp) {
            return None;
        }
        let p = self.path.take()?;
        self.valid = false;
        self.at = false;
        let mut d = leaf_d;
        while d > 0 && !(p.lv[d].min <= key && key <= p.lv[d].max) {
            d -= 1;
        }
        Some((p, d))
    }

    /// Returns the storage taken by [`CursorState::take_scratch`].
    #[inline]
    pub(crate) fn put_scratch(&mut self, p: Box<Path>) {
        self.path = Some(p);
    }
}

/// A writer's cursor: the maple tree's `ma_state` held by a writer (module docs). Borrows the [`Writer`], whose
/// state keeps the cursor's index and path when it is dropped ([`Writer::resume_cursor`]).
///
/// Positions are ranges: the cursor is at an index, and "the current range" is the slot holding it (an
/// entry's whole range, or a whole empty range). Reads ([`WriteCursor::range`], `load`, `next`, `prev`,
/// `find`) and stores (`store_range`, `insert_range`, `erase`) reuse the cached path; see the module docs.
pub struct WriteCursor<'w, 'a, T: Entry> {
    w: &'w mut Writer<'a, T>,
}

/// Rebuilds a value from a raw leaf word (0 = NULL).
#[inline]
fn value<T: Entry>(raw: usize) -> Option<T> {
    NonZeroUsize::new(raw).map(|r| {
        // SAFETY: every non-zero leaf word was stored from `T::into_raw`.
        unsafe { T::from_raw(r) }
    })
}

impl<'w, 'a, T: Entry> WriteCursor<'w, 'a, T> {
    /// A new cursor at `index` (`fresh`: its path is not trusted, it walks from the root) or the last one.
    pub(crate) fn new(w: &'w mut Writer<'a, T>, index: Option<u64>) -> Self {
        if let Some(index) = index {
            let cs = &mut w.st.cursor;
            cs.index = index;
            cs.valid = false;
            cs.at = false;
        }
        WriteCursor { w }
    }

    /// The writer (read-only: validation, statistics).
    pub fn writer(&self) -> &Writer<'a, T> {
        self.w
    }

    /// The writer itself. A store made through it (not through the cursor) makes the cursor descend again on
    /// its next operation.
    pub fn writer_mut(&mut self) -> &mut Writer<'a, T> {
        self.w
    }

    /// The index the cursor is at.
    pub fn index(&self) -> u64 {
        self.w.st.cursor.index
    }

    /// Moves the cursor to `index` (`mas_set`); the walk happens on the next operation, from the deepest
    /// cached level that covers `index`.
    pub fn set(&mut self, index: u64) {
        let cs = &mut self.w.st.cursor;
        if index != cs.index {
            cs.index = index;
            cs.at = false;
        }
    }

    /// Positions the path at the cursor's index; returns the leaf's depth, or None for an empty tree.
    #[inline]
    fn ensure(&mut self) -> Option<usize> {
        let st = &*self.w.st;
        let cs = &st.cursor;
        if cs.at && cs.valid && cs.stamp == st.stamp {
            // Positioned and still the tree's (a valid path implies a non-empty tree).
            return Some(st.height - 1);
        }
        self.position()
    }

    /// [`WriteCursor::ensure`] when the path is not at the index: a walk from the deepest cached level that
    /// covers it, or from the root.
    #[inline(never)]
    fn position(&mut self) -> Option<usize> {
        let tree = self.w.tree;
        let lk = Locked::new();
        let st = &mut *self.w.st;
        if st.height == 0 {
            st.cursor.valid = false;
            return None;
        }
        let leaf_d = st.height - 1;
        let cs = &mut st.cursor;
        let idx = cs.index;
        match &mut cs.path {
            Some(p) if cs.valid && cs.stamp == st.stamp => {
                if !cs.at {
                    // Level 0 (the root) covers every index.
                    let mut d = leaf_d;
                    while d > 0 && !(p.lv[d].min <= idx && idx <= p.lv[d].max) {
                        d -= 1;
                    }
                    walk_from(lk, p, d, idx, leaf_d);
                }
            }
            path => {
                // Relaxed: the writer reads its own stores.
                let root = Enode::from_word(tree.root.load(Ordering::Relaxed))?;
                st.descents += 1;
                let root_lvl = Level::root(root);
                match path {
                    Some(p) => {
                        p.lv[0] = root_lvl;
                        walk_from(lk, p, 0, idx, leaf_d);
                    }
                    None => *path = Some(Box::new(walk(lk, root, idx, leaf_d))),
                }
                cs.valid = true;
                cs.stamp = st.stamp;
            }
        }
        cs.at = true;
        Some(leaf_d)
    }

    /// The path's level `d` (the cursor is positioned).
    #[inline]
    fn level(&self, d: usize) -> Level {
        match &self.w.st.cursor.path {
            Some(p) => p.lv[d],
            None => unreachable!("a positioned cursor has a path"),
        }
    }

    /// The current slot of a positioned cursor whose leaf is at depth `d`: `(first, last, raw value)`.
    #[inline]
    fn slot(&self, d: usize) -> (u64, u64, usize) {
        let lv = self.level(d);
        let n = lv.e.locked(self.w.locked());
        (n.slot_first(lv.off, lv.min), n.slot_last(LEAF_PIVOTS, lv.off, lv.max), n.leaf_slot_locked(lv.off))
    }

    /// The current range: `(first, last, entry)` of the slot holding the index (`vma_iter_load` with its
    /// range). `(0, u64::MAX, None)` in an empty tree.
    #[inline]
    pub fn range(&mut self) -> (u64, u64, Option<T>) {
        let Some(d) = self.ensure() else { return (0, u64::MAX, None) };
        let (f, l, v) = self.slot(d);
        (f, l, value(v))
    }

    /// The entry at the index (`mas_walk` / `vma_iter_load`).
    pub fn load(&mut self) -> Option<T> {
        self.range().2
    }

    /// Moves to the slot after the current range, which ends at `l < u64::MAX` (the cursor is positioned, its
    /// leaf at depth `d`); returns the new leaf's depth (a slot step in the leaf, or a walk from the nearest
    /// cached ancestor that covers `l + 1`).
    #[inline]
    fn step_forward(&mut self, d: usize, l: u64) -> usize {
        let cs = &mut self.w.st.cursor;
        cs.index = l + 1;
        if let Some(p) = &mut cs.path
            && l < p.lv[d].max
        {
            p.lv[d].off += 1;
            return d;
        }
        cs.at = false;
        self.position().unwrap_or(d)
    }

    /// Moves to the slot before the current range, which starts at `f > 0` (as [`WriteCursor::step_forward`]).
    #[inline]
    fn step_back(&mut self, d: usize, f: u64) -> usize {
        let cs = &mut self.w.st.cursor;
        cs.index = f - 1;
        if let Some(p) = &mut cs.path
            && f > p.lv[d].min
        {
            p.lv[d].off -= 1;
            return d;
        }
        cs.at = false;
        self.position().unwrap_or(d)
    }

    /// The next entry after the current range that starts at or below `max`, with its whole range; the cursor
    /// moves to it (`mas_next` / `vma_next`). None if there is none: the cursor is then left on the last range
    /// it looked at (at most the one holding `max`).
    pub fn next(&mut self, max: u64) -> Option<(u64, u64, T)> {
        let mut d = self.ensure()?;
        loop {
            let (_, l, _) = self.slot(d);
            if l >= max {
                return None;
            }
            d = self.step_forward(d, l);
            let (f, l, v) = self.slot(d);
            if let Some(v) = value(v) {
                return Some((f, l, v));
            }
        }
    }

    /// The last entry before the current range that ends at or above `min`, with its whole range; the cursor
    /// moves to it (`mas_prev` / `vma_prev`). None if there is none: the cursor is then left on the last range
    /// it looked at (at least the one holding `min`).
    pub fn prev(&mut self, min: u64) -> Option<(u64, u64, T)> {
        let mut d = self.ensure()?;
        loop {
            let (f, _, _) = self.slot(d);
            if f <= min {
                return None;
            }
            d = self.step_back(d, f);
            let (f, l, v) = self.slot(d);
            if let Some(v) = value(v) {
                return Some((f, l, v));
            }
        }
    }

    /// The first entry intersecting `[index, max]`, with its whole range (the current range's entry if there
    /// is one, else [`WriteCursor::next`]); the cursor moves to it (`mas_find` from a set index).
    pub fn find(&mut self, max: u64) -> Option<(u64, u64, T)> {
        if self.index() > max {
            return None;
        }
        match self.range() {
            (f, l, Some(v)) => Some((f, l, v)),
            _ => self.next(max),
        }
    }

    /// Stores `value` over `[first, last]` (None erases) through the cached path, as
    /// [`Writer::store_range`] does (same result, same errors, nothing changed on error); the cursor is then at
    /// `first`, its path refreshed where the store replaced nodes (module docs).
    pub fn store_range(
        &mut self,
        first: u64,
        last: u64,
        value: Option<T>,
    ) -> Result<Vec<(u64, u64, T)>, MapleError> {
        let out = self.store_raw(first, last, raw_word(value), false)?;
        // SAFETY: the replaced words are non-NULL leaf words of this tree of `T`.
        Ok(unsafe { typed_replaced(out) })
    }

    /// [`WriteCursor::store_range`] without the replaced entries (the kernel's `mas_store_gfp`): returns how many
    /// entries the store replaced. Stores that replace at most two allocate nothing for them.
    pub fn store(&mut self, first: u64, last: u64, value: Option<T>) -> Result<usize, MapleError> {
        self.store_raw(first, last, raw_word(value), false).map(|r| r.len())
    }

    /// Stores `value` over `[first, last]` only if every index there is empty (`EEXIST` otherwise, nothing
    /// changed), through the cached path.
    pub fn insert_range(&mut self, first: u64, last: u64, value: T) -> Result<(), MapleError> {
        self.store_raw(first, last, value.into_raw().get(), true).map(|_| ())
    }

    /// Erases the current range's entry (its whole range), through the cached path; returns it, or None if
    /// the current range is empty (`mas_erase` at the index).
    pub fn erase(&mut self) -> Result<Option<(u64, u64, T)>, MapleError> {
        match self.range() {
            (f, l, Some(v)) => {
                self.store_raw(f, l, 0, false)?;
                Ok(Some((f, l, v)))
            }
            _ => Ok(None),
        }
    }

    fn store_raw(&mut self, first: u64, last: u64, raw: usize, insert: bool) -> Result<Replaced, MapleError> {
        if first > last {
            return Err(MapleError::Invalid);
        }
        self.set(first);
        let leaf_d = self.ensure();
        let tree = self.w.tree;
        let lk = Locked::new();
        let st = &mut *self.w.st;
        // The store borrows the path (a pointer move) while it has the writer state.
        let mut path = if leaf_d.is_some() { st.cursor.path.take() } else { None };
        let r = store_at(tree, lk, st, first, last, raw, insert, path.as_deref());
        let out = match r {
            Err(e) => {
                // Nothing changed (module `write`): the path still holds.
                st.cursor.stamp = st.stamp;
                Err(e)
            }
            Ok((replaced, after)) => {
                // The cursor is at `first` after the store. Where the leaf (or its copy) kept its range, its
                // offset is found again lazily, by the next operation's positioning (`position`: the leaf covers
                // `first`), so that a cursor dropped after its store (`Writer::erase`) scans nothing more.
                let mut at = true;
                match (after, &mut path, leaf_d) {
                    (After::Kept, Some(_), Some(_)) => at = false,
                    (After::Leaf(e), Some(p), Some(d)) => {
                        p.lv[d].e = e;
                        at = false;
                    }
                    (After::Below { depth, e }, Some(p), Some(d)) => {
                        walk_from(lk, p, depth, first, d);
                        debug_assert!(p.lv[depth + 1].e == e, "the new subtree is not on the path");
                    }
                    _ => {
                        // The root changed: walk again from it (a tree that became empty has no path).
                        // Relaxed: the writer reads its own stores.
                        match Enode::from_word(tree.root.load(Ordering::Relaxed)) {
                            Some(root) => {
                                st.descents += 1;
                                let p = walk(lk, root, first, st.height - 1);
                                match &mut path {
                                    Some(b) => **b = p,
                                    None => path = Some(Box::new(p)),
                                }
                                st.cursor.valid = true;
                            }
                            None => st.cursor.valid = false,
                        }
                    }
                }
                st.cursor.stamp = st.stamp;
                st.cursor.at = at;
                Ok(replaced)
            }
        };
        if path.is_some() {
            st.cursor.path = path;
        }
        out
    }
}
