//! Lock-free readers: point lookups and the cursor.
//!
//! Every reader runs under an RCU guard (the caller's, or one pinned per call) and reaches nodes through
//! [`Enode::rcu`], borrowed for that guard. Per internal node it (1) loads pivots (Relaxed) and a child
//! (Acquire), then (2) asks [`alive`]: a `fence(Acquire)` orders those loads before (3) the load of the node's
//! parent word; if the node is dead, another `fence(Acquire)` synchronises with the writer's Release dead-mark
//! (which follows its Release publication) and the reader restarts from the root, or — for a cursor —
//! re-walks from the root to the index it was about to visit.
//!
//! A leaf can also change in place under a reader (the slot store and the append, module `write`), so a leaf
//! read is a seqlock read combined with the dead check: [`Node::read_begin`] (an Acquire load of the parent
//! word, waiting while an in-place store is in progress), the pivot and slot loads, then
//! [`Node::read_check`] (`fence(Acquire)`, the parent word again): dead as above; a changed sequence count
//! means the words may mix two states, and the reader reads the leaf again. A cursor keeps the parent word of
//! its leaf with its cached path, and every cached step (the next or previous slot of that leaf, with no new
//! `read_begin`) checks that word again: if the leaf changed since the cursor read it, the cached offset may
//! name another range now, and the cursor re-walks from the root to the index it was about to visit. So no
//! reader ever combines a range from one state of a leaf with a value or range from another. Lookups
//! allocate nothing and take no lock.

use std::mem::MaybeUninit;
use std::num::NonZeroUsize;

use vmspace_rcu::Guard;
use vmspace_rcu::sync::{AtomicU64, Ordering, fence};

use crate::node::{Enode, INT_PIVOTS, INT_SLOTS, LEAF_PIVOTS, LEAF_SLOTS, LeafRead, Level, MAX_HEIGHT, Node};
use crate::{Entry, MapleTree};

/// The dead-node check every reader makes after loading what it needs from a node (the kernel's
/// `ma_dead_node`): true if `n` was alive after those loads, so they are current. False if it is dead: the
/// reader must restart from the root (or re-walk to its index) and the restart sees the replacement.
#[inline(always)]
pub(crate) fn alive(n: &Node) -> bool {
    // Acquire fence: the pivot and slot loads before it happen before the parent-word load in `is_dead`.
    fence(Ordering::Acquire);
    if n.is_dead() {
        // Acquire: pairs with the writer's Release dead-mark (and so with its earlier publication).
        fence(Ordering::Acquire);
        return false;
    }
    true
}

/// Loads the root word (Acquire: pairs with the Release store that published the root node).
#[inline(always)]
pub(crate) fn load_root(root: &AtomicU64) -> Option<Enode> {
    Enode::from_word(root.load(Ordering::Acquire))
}

/// The one read-and-restart descent every lock-free reader makes (the kernel's `mtree_range_walk` with its
/// `ma_dead_node` checks): from `start` (a node covering `index` at depth `depth`) down along `index` to the leaf
/// holding it, then `read` of that leaf inside its sequence count. Per internal node: the scan and the child
/// load, then [`alive`] (dead: `None`, the caller restarts from the root or re-walks to its index). At the
/// leaf: [`Node::read_begin`] (dead: `None`), `read(leaf, level)` (which sets `level.off` to the slot it
/// stopped at), [`Node::read_check`]: current, the answer is returned; dead, `None`; changed by an in-place
/// store meanwhile, the leaf is read again. `visit(depth, level)` sees every level passed, the leaf last
/// (with its `seq`), after its check: a cursor caches the path through it.
///
/// With `BOUNDS`, each level's `[min, max]` is computed on the way down (the range of the slot found, a
/// cursor's cached path); without, only the slot is (`load`: the hot lookup pays nothing for ranges).
#[inline(always)]
fn descend_read<R, const BOUNDS: bool>(
    mut lv: Level,
    mut depth: usize,
    index: u64,
    guard: &Guard,
    mut visit: impl FnMut(usize, Level),
    mut read: impl FnMut(&Node, &mut Level) -> R,
) -> Option<R> {
    loop {
        if depth >= MAX_HEIGHT {
            return None;
        }
        let n = lv.e.rcu(guard);
        if lv.e.is_leaf() {
            loop {
                lv.seq = n.read_begin()?;
                let r = read(n, &mut lv);
                match n.read_check(lv.seq) {
                    LeafRead::Current => {
                        visit(depth, lv);
                        return Some(r);
                    }
                    LeafRead::Dead => return None,
                    LeafRead::Changed => {}
                }
            }
        }
        let i = n.scan(INT_PIVOTS, index);
        let (s, l) = if BOUNDS {
            (n.slot_first(i, lv.min), n.slot_last(INT_PIVOTS, i, lv.max))
        } else {
            (0, u64::MAX)
        };
        // SAFETY: `scan` found the slot holding `index`, a used one (see `Node::used_child`).
        let c = unsafe { n.used_child(i) };
        if !alive(n) {
            return None;
        }
        lv.off = i;
        visit(depth, lv);
        lv = Level::at(c, s, l);
        depth += 1;
    }
}

/// [`descend_read`] from the root, restarting from the root word whenever it meets a dead node; `empty` for an
/// empty tree.
#[inline(always)]
fn read_restart<R, const BOUNDS: bool>(
    root: &AtomicU64,
    index: u64,
    guard: &Guard,
    empty: R,
    mut read: impl FnMut(&Node, &mut Level) -> R,
) -> R {
    loop {
        let Some(e) = load_root(root) else { return empty };
        if let Some(r) = descend_read::<R, BOUNDS>(Level::root(e), 0, index, guard, |_, _| {}, &mut read) {
            return r;
        }
    }
}

/// The raw entry at `index`.
#[inline]
pub(crate) fn load_raw(root: &AtomicU64, index: u64, guard: &Guard) -> Option<NonZeroUsize> {
    read_restart::<_, false>(root, index, guard, None, |n, _| {
        NonZeroUsize::new(n.leaf_slot(n.scan(LEAF_PIVOTS, index)))
    })
}

/// The raw slot holding `index` with its range (value 0 for NULL).
#[inline]
pub(crate) fn load_range_raw(root: &AtomicU64, index: u64, guard: &Guard) -> (u64, u64, usize) {
    read_restart::<_, true>(root, index, guard, (0, u64::MAX, 0), |n, lv| {
        let i = n.scan(LEAF_PIVOTS, index);
        (n.slot_first(i, lv.min), n.slot_last(LEAF_PIVOTS, i, lv.max), n.leaf_slot(i))
    })
}

/// The first entry intersecting `[from, u64::MAX]` in one descent (what [`MapleTree::find_next_in`] returns
/// when it can decide in the leaf holding `from`): `Some(Some((first, last, raw)))` for a non-NULL entry,
/// `Some(None)` when no entry follows (the tree is empty, or the leaf is the right-most one and the rest of
/// it is NULL), `None` when the rest of the leaf holding `from` is NULL but other leaves follow (the caller
/// steps on with a cursor). Adjacent NULL ranges are coalesced, so a NULL slot not at a leaf's end is
/// followed by a non-NULL one in the same leaf: the fallback is rare.
#[inline]
fn find_next_raw(root: &AtomicU64, from: u64, guard: &Guard) -> Option<Option<(u64, u64, usize, usize)>> {
    read_restart::<_, true>(root, from, guard, Some(None), |n, lv| {
        let (min, max) = (lv.min, lv.max);
        let mut i = n.scan(LEAF_PIVOTS, from);
        let mut s = n.slot_first(i, min);
        loop {
            let l = n.slot_last(LEAF_PIVOTS, i, max);
            let v = n.leaf_slot(i);
            if v != 0 {
                // The next slot's word, a hint only (not covered by the leaf's check).
                let hint = if i + 1 < LEAF_SLOTS { n.leaf_slot(i + 1) } else { 0 };
                break Some(Some((s, l, v, hint)));
            }
            if l >= max || i + 1 >= LEAF_SLOTS {
                // The leaf's end: nothing follows in the key space, or the next leaf decides.
                break if l == u64::MAX { Some(None) } else { None };
            }
            s = l + 1;
            i += 1;
        }
    })
}

impl<T: Entry> MapleTree<T> {
    /// The first entry intersecting `[from, u64::MAX]`, with its range, under the caller's guard: exactly
    /// [`MapleTree::find_in`]`(from, u64::MAX, guard)` (the kernel's `mas_find` from a fresh state, what
    /// `find_vma` and `vma_find` ask), but in one descent from the root without a cursor's cached path: the
    /// answer is the entry holding `from` or the next one in the same leaf, which covers every lookup but one
    /// whose leaf ends in a NULL range (that one continues with a cursor).
    #[inline]
    pub fn find_next_in(&self, from: u64, guard: &Guard) -> Option<(u64, u64, T)> {
        self.find_next_hinted(from, guard).0
    }

    /// [`MapleTree::find_next_in`] and, as a hint, the raw word of the slot after the entry found in its
    /// leaf (0 when there is none or the lookup took the cursor): what a caller walking entries in order
    /// may prefetch for its next lookup. Like [`Cursor::next_slot_hint`], it is read without the leaf's
    /// check and may be stale or NULL: never dereference it.
    #[inline]
    pub fn find_next_hinted(&self, from: u64, guard: &Guard) -> (Option<(u64, u64, T)>, usize) {
        match find_next_raw(&self.root, from, guard) {
            Some(Some((s, l, v, hint))) => {
                // SAFETY: non-zero leaf words were stored from `T::into_raw`.
                (Some((s, l, unsafe { T::from_raw(NonZeroUsize::new_unchecked(v)) })), hint)
            }
            Some(None) => (None, 0),
            None => (self.find_in(from, u64::MAX, guard), 0),
        }
    }
}

/// A cached step's check of the cursor's leaf `n`, read earlier with parent word `seq`: true if the words just
/// loaded belong to that same state of the live leaf; false if it died or changed in place since (the caller
/// re-walks from the root).
#[inline(always)]
fn leaf_unchanged(n: &Node, seq: u64) -> bool {
    n.read_check(seq) == LeafRead::Current
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// Not walked: the next operation starts at `index`.
    Start,
    /// `index..=last` is the slot at the cached path.
    Active,
    /// Path dropped; forward operations resume at `last + 1`, backward ones at `index - 1`.
    Paused,
}

/// A read cursor over a [`MapleTree`] under an RCU guard (the kernel's `ma_state` for readers).
///
/// States: *start* (after [`Cursor::set`]: the next operation walks to the set index), *active* (positioned on
/// an entry, `index()..=last()`), *paused* (after [`Cursor::pause`] or a search that found nothing: forward
/// operations resume at `last() + 1`, backward ones at `index() - 1`, like `mas_pause`).
///
/// * [`Cursor::find`]`(max)`: from start, the first entry intersecting `[index, max]`; when active, the next
///   entry after the current one that starts at or before `max`.
/// * [`Cursor::find_rev`]`(min)`: mirror image.
/// * [`Cursor::next`]`(max)` / [`Cursor::prev`]`(min)`: the entry after / before the current one (from start:
///   after / before the range holding the set index).
///
/// A cursor re-walks from the root when it meets a dead node, so each returned entry is current at the time it
/// is read. Forward iteration never goes backwards: each entry intersects `[previous last + 1, max]` (its start
/// may lie before that if a writer stored it meanwhile, exactly as with `mas_find`), and it never skips a range
/// that existed throughout.
pub struct Cursor<'g, T: Entry> {
    tree: &'g MapleTree<T>,
    guard: &'g Guard,
    /// The cached path from the root: levels `0..depth` are initialised (written by [`Cursor::descend`]
    /// before `depth` covers them), the others are not. Left uninitialised by [`Cursor::new`]: a lookup
    /// that descends once would otherwise pay for clearing all `MAX_HEIGHT` levels (800 bytes).
    path: [MaybeUninit<Level>; MAX_HEIGHT],
    depth: usize,
    status: Status,
    index: u64,
    last: u64,
}

/// A cursor without a guard (after [`Cursor::into_paused`]): resume it later under a new guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PausedCursor {
    status: Status,
    index: u64,
    last: u64,
}

impl PausedCursor {
    /// A paused position from which forward searches resume at `last + 1` and backward ones at `index - 1`.
    pub fn at(index: u64, last: u64) -> Self {
        PausedCursor { status: Status::Paused, index, last }
    }

    /// Re-attaches to `tree` under `guard`.
    pub fn resume<'g, T: Entry>(self, tree: &'g MapleTree<T>, guard: &'g Guard) -> Cursor<'g, T> {
        let mut c = Cursor::new(tree, guard);
        c.status = self.status;
        c.index = self.index;
        c.last = self.last;
        c
    }
}

impl<'g, T: Entry> Cursor<'g, T> {
    pub(crate) fn new(tree: &'g MapleTree<T>, guard: &'g Guard) -> Self {
        Cursor {
            tree,
            guard,
            path: [MaybeUninit::uninit(); MAX_HEIGHT],
            depth: 0,
            status: Status::Start,
            index: 0,
            last: 0,
        }
    }

    /// Moves to `index` (state start).
    pub fn set(&mut self, index: u64) {
        self.status = Status::Start;
        self.index = index;
        self.last = index;
    }

    /// First index of the current entry (or the set/paused position).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Last index of the current entry (or the paused position).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The raw word of the slot after the current entry in the cursor's cached leaf (0 when there is none,
    /// or the cursor is not on an entry): a hint for prefetching the next entry's pointee while the current
    /// one is used, as a walk does. Only a hint: it is read without the leaf's sequence check, so it may be
    /// stale, NULL, or a slot past the leaf's end; never dereference it.
    #[inline]
    pub fn next_slot_hint(&self) -> usize {
        if self.status != Status::Active || self.depth == 0 {
            return 0;
        }
        let lv = self.lvl(self.depth - 1);
        if lv.off + 1 >= LEAF_SLOTS {
            return 0;
        }
        self.level_node(lv).leaf_slot(lv.off + 1)
    }

    /// Drops the cached path (the kernel's `mas_pause`): the next forward operation resumes at `last + 1`, the
    /// next backward one at `index - 1`.
    pub fn pause(&mut self) {
        if self.status == Status::Active {
            self.status = Status::Paused;
        }
    }

    /// Pauses and detaches from the guard.
    pub fn into_paused(mut self) -> PausedCursor {
        self.pause();
        PausedCursor { status: self.status, index: self.index, last: self.last }
    }

    /// Walks from the root to the slot holding `key`, caching the path.
    fn walk(&mut self, key: u64) -> (u64, u64, usize) {
        loop {
            let Some(e) = load_root(&self.tree.root) else {
                self.depth = 0;
                return (0, u64::MAX, 0);
            };
            if let Some(r) = self.descend(0, e, 0, u64::MAX, key) {
                return r;
            }
        }
    }

    /// The node of a cached path level.
    #[inline(always)]
    fn level_node(&self, lv: Level) -> &'g Node {
        lv.e.rcu(self.guard)
    }

    /// Cached path level `level`, which must be below `depth`.
    #[inline(always)]
    fn lvl(&self, level: usize) -> Level {
        assert!(level < self.depth);
        // SAFETY: levels below `depth` are initialised (see the field `path`), checked just above.
        unsafe { self.path[level].assume_init() }
    }

    /// Sets the offset of cached level `level` (below `depth`).
    #[inline(always)]
    fn set_off(&mut self, level: usize, off: usize) {
        assert!(level < self.depth);
        // SAFETY: as in `lvl`: the level is initialised.
        unsafe { self.path[level].assume_init_mut().off = off };
    }

    /// Descends from node `e` (covering `[min, max]`) at `level` to the leaf slot holding `key`, caching the
    /// path ([`descend_read`]). None if a dead node was met (the caller restarts from the root).
    #[inline]
    fn descend(&mut self, level: usize, e: Enode, min: u64, max: u64, key: u64) -> Option<(u64, u64, usize)> {
        let path = &mut self.path;
        let mut depth = level;
        let r = descend_read::<_, true>(
            Level::at(e, min, max),
            level,
            key,
            self.guard,
            |d, lv| {
                path[d].write(lv);
                depth = d + 1;
            },
            |n, lv| {
                let i = n.scan(LEAF_PIVOTS, key);
                lv.off = i;
                (n.slot_first(i, lv.min), n.slot_last(LEAF_PIVOTS, i, lv.max), n.leaf_slot(i))
            },
        )?;
        self.depth = depth;
        Some(r)
    }

    /// Fast path of an active forward search: scans the rest of the current leaf for the next non-NULL entry,
    /// with one dead check for the whole scan. `Some(result)` if decided inside the leaf; None to fall back to
    /// the general step (end of leaf, or the leaf died).
    #[inline]
    fn leaf_next(&mut self, max: u64) -> Option<Option<(u64, u64, T)>> {
        if self.depth == 0 || self.last == u64::MAX {
            return None;
        }
        let d = self.depth - 1;
        let lv = self.lvl(d);
        let n = self.level_node(lv);
        let mut off = lv.off;
        let mut s = self.last + 1;
        while s <= lv.max && off + 1 < LEAF_SLOTS {
            if s > max {
                // Nothing more at or before `max`: leave the decision (and the paused position) to the slow path.
                return None;
            }
            off += 1;
            let l = n.slot_last(LEAF_PIVOTS, off, lv.max);
            let v = n.leaf_slot(off);
            if v != 0 {
                if !leaf_unchanged(n, lv.seq) {
                    return None;
                }
                self.set_off(d, off);
                return Some(self.found(s, l, v));
            }
            if l == u64::MAX {
                return None;
            }
            s = l + 1;
        }
        None
    }

    /// Mirror image of [`Cursor::leaf_next`] for backward searches.
    #[inline]
    fn leaf_prev(&mut self, min: u64) -> Option<Option<(u64, u64, T)>> {
        if self.depth == 0 || self.index == 0 {
            return None;
        }
        let d = self.depth - 1;
        let lv = self.lvl(d);
        let n = self.level_node(lv);
        let mut off = lv.off;
        let mut l = self.index - 1;
        while l >= lv.min && off > 0 {
            if l < min {
                return None;
            }
            off -= 1;
            let s = n.slot_first(off, lv.min);
            let v = n.leaf_slot(off);
            if v != 0 {
                if !leaf_unchanged(n, lv.seq) {
                    return None;
                }
                self.set_off(d, off);
                return Some(self.found(s, l, v));
            }
            if s == 0 {
                return None;
            }
            l = s - 1;
        }
        None
    }

    /// The slot after the current one (`[last + 1, ..]`), or None at the end of the key space.
    fn step_fwd(&mut self) -> Option<(u64, u64, usize)> {
        if self.last == u64::MAX {
            return None;
        }
        let key = self.last + 1;
        Some(self.step_fwd_cached(key).unwrap_or_else(|| self.walk(key)))
    }

    /// [`Cursor::step_fwd`] through the cached path: the next slot of the leaf, else the next child of the
    /// lowest ancestor that has one. None if the path cannot be used (none cached, a dead node, the end).
    fn step_fwd_cached(&mut self, key: u64) -> Option<(u64, u64, usize)> {
        let d = self.depth.checked_sub(1)?;
        let lv = self.lvl(d);
        if key <= lv.max {
            let n = self.level_node(lv);
            let off = lv.off + 1;
            if off >= LEAF_SLOTS {
                return None;
            }
            let l = n.slot_last(LEAF_PIVOTS, off, lv.max);
            let v = n.leaf_slot(off);
            if !leaf_unchanged(n, lv.seq) {
                return None;
            }
            self.set_off(d, off);
            return Some((key, l, v));
        }
        let level = (0..d).rev().find(|&level| key <= self.lvl(level).max)?;
        let p = self.lvl(level);
        let pn = self.level_node(p);
        let off = p.off + 1;
        if off >= INT_SLOTS {
            return None;
        }
        let cmax = pn.slot_last(INT_PIVOTS, off, p.max);
        let c = pn.child(off);
        if !alive(pn) {
            return None;
        }
        self.set_off(level, off);
        self.descend(level + 1, c?, key, cmax, key)
    }

    /// The slot before the current one (`[.., index - 1]`), or None at index 0.
    fn step_back(&mut self) -> Option<(u64, u64, usize)> {
        if self.index == 0 {
            return None;
        }
        let key = self.index - 1;
        Some(self.step_back_cached(key).unwrap_or_else(|| self.walk(key)))
    }

    /// Mirror image of [`Cursor::step_fwd_cached`].
    fn step_back_cached(&mut self, key: u64) -> Option<(u64, u64, usize)> {
        let d = self.depth.checked_sub(1)?;
        let lv = self.lvl(d);
        if key >= lv.min && lv.off > 0 {
            let n = self.level_node(lv);
            let off = lv.off - 1;
            let s = n.slot_first(off, lv.min);
            let v = n.leaf_slot(off);
            if !leaf_unchanged(n, lv.seq) {
                return None;
            }
            self.set_off(d, off);
            return Some((s, key, v));
        }
        let level = (0..d).rev().find(|&level| {
            let lv = self.lvl(level);
            key >= lv.min && lv.off > 0
        })?;
        let p = self.lvl(level);
        let pn = self.level_node(p);
        let off = p.off - 1;
        let cmin = pn.slot_first(off, p.min);
        let c = pn.child(off);
        if !alive(pn) {
            return None;
        }
        self.set_off(level, off);
        self.descend(level + 1, c?, cmin, key, key)
    }

    #[inline]
    fn found(&mut self, s: u64, l: u64, v: usize) -> Option<(u64, u64, T)> {
        self.status = Status::Active;
        self.index = s;
        self.last = l;
        // SAFETY: non-zero leaf words were stored from `T::into_raw`.
        Some((s, l, unsafe { T::from_raw(NonZeroUsize::new_unchecked(v)) }))
    }

    /// Scans forward from candidate `c` for a non-NULL entry starting at or before `max`.
    fn scan_fwd(&mut self, mut c: Option<(u64, u64, usize)>, max: u64) -> Option<(u64, u64, T)> {
        loop {
            let Some((s, l, v)) = c else {
                self.status = Status::Paused;
                self.last = u64::MAX;
                return None;
            };
            if s > max {
                self.status = Status::Paused;
                self.index = s;
                self.last = s - 1;
                return None;
            }
            self.index = s;
            self.last = l;
            if v != 0 {
                return self.found(s, l, v);
            }
            c = self.step_fwd();
        }
    }

    /// Scans backward from candidate `c` for a non-NULL entry ending at or after `min`.
    fn scan_back(&mut self, mut c: Option<(u64, u64, usize)>, min: u64) -> Option<(u64, u64, T)> {
        loop {
            let Some((s, l, v)) = c else {
                self.status = Status::Paused;
                self.index = 0;
                return None;
            };
            if l < min {
                self.status = Status::Paused;
                self.index = l + 1;
                self.last = l;
                return None;
            }
            self.index = s;
            self.last = l;
            if v != 0 {
                return self.found(s, l, v);
            }
            c = self.step_back();
        }
    }

    /// See the type docs: the first entry intersecting `[index, max]` from start, else the next one.
    ///
    /// The step to the next entry of the cached leaf is inlined into the caller; everything else (a walk
    /// from the root, the step to another leaf) is not.
    #[inline]
    pub fn find(&mut self, max: u64) -> Option<(u64, u64, T)> {
        if self.status == Status::Active
            && let Some(r) = self.leaf_next(max)
        {
            return r;
        }
        self.find_slow(max)
    }

    /// [`Cursor::find`] but its cached leaf step.
    #[inline(never)]
    fn find_slow(&mut self, max: u64) -> Option<(u64, u64, T)> {
        let c = match self.status {
            Status::Start => Some(self.walk(self.index)),
            Status::Active => self.step_fwd(),
            Status::Paused => {
                if self.last == u64::MAX {
                    return None;
                }
                Some(self.walk(self.last + 1))
            }
        };
        self.scan_fwd(c, max)
    }

    /// See the type docs: the last entry intersecting `[min, index]` from start, else the previous one.
    pub fn find_rev(&mut self, min: u64) -> Option<(u64, u64, T)> {
        let c = match self.status {
            Status::Start => Some(self.walk(self.index)),
            Status::Active => {
                if let Some(r) = self.leaf_prev(min) {
                    return r;
                }
                self.step_back()
            }
            Status::Paused => {
                if self.index == 0 {
                    return None;
                }
                Some(self.walk(self.index - 1))
            }
        };
        self.scan_back(c, min)
    }

    /// The next entry (starting at or before `max`) after the current one; from start, after the range holding
    /// the set index.
    pub fn next(&mut self, max: u64) -> Option<(u64, u64, T)> {
        if self.status == Status::Start {
            let (s, l, _) = self.walk(self.index);
            self.index = s;
            self.last = l;
            self.status = Status::Active;
        }
        self.find(max)
    }

    /// The previous entry (ending at or after `min`) before the current one; from start, before the range
    /// holding the set index.
    pub fn prev(&mut self, min: u64) -> Option<(u64, u64, T)> {
        if self.status == Status::Start {
            let (s, l, _) = self.walk(self.index);
            self.index = s;
            self.last = l;
            self.status = Status::Active;
        }
        self.find_rev(min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_stops_at_end_pivot() {
        let c = crate::node::Counters::new();
        let a = c.alloc().unwrap();
        // Our own unpublished node.
        let n = Enode::new(a, true).locked(crate::node::Locked::new());
        n.set_pivot(0, 9);
        n.set_pivot(1, 19);
        n.set_pivot(2, 100);
        assert_eq!(n.scan(LEAF_PIVOTS, 0), 0);
        assert_eq!(n.scan(LEAF_PIVOTS, 9), 0);
        assert_eq!(n.scan(LEAF_PIVOTS, 10), 1);
        assert_eq!(n.scan(LEAF_PIVOTS, 100), 2);
        assert_eq!((n.slot_first(1, 0), n.slot_last(LEAF_PIVOTS, 1, 100), n.leaf_slot(1)), (10, 19, 0));
        assert!(alive(n));
        n.mark_dead();
        assert!(!alive(n));
        // SAFETY: as above.
        unsafe { c.free_now(a) };
    }
}
