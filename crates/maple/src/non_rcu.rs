//! The tree in non-RCU mode: [`NonRcuMapleTree`], a separate type whose writes need `&mut`.
//!
//! In non-RCU mode (the kernel's tree without `MT_FLAGS_USE_RCU`, `lib/maple_tree.c: mt_clear_in_rcu`) a store
//! rewrites nodes in place (a change confined to one leaf rewrites that leaf; the final one-for-one node of a
//! larger change is rewritten instead of copied) and frees replaced nodes at once. A lock-free reader running
//! beside such a store could read a node while it is rewritten (a range that never existed) or after it was
//! freed (use after free). The kernel relies on its callers to use the mode only on trees no reader can reach.
//! Here the type system enforces it:
//!
//! * [`crate::MapleTree`] is always in RCU mode: it can be shared (`&`, `Arc`) between lock-free readers and one
//!   writer at a time, and it has no way to leave RCU mode.
//! * [`NonRcuMapleTree`] is always in non-RCU mode, and every operation that changes it takes `&mut self`. The
//!   borrow checker therefore rules out a reader (which holds `&self`, possibly on another thread) while a
//!   change runs: reads may share the tree with each other, never with a write. [`NonRcuMapleTree::into_rcu`]
//!   consumes it and returns the same nodes as a [`crate::MapleTree`], ready to be published.
//!
//! [`NonRcuMapleTree`]'s docs name its users and show what the borrow checker refuses.

use vmspace_rcu::Guard;

use crate::node::Counters;
use crate::{Cursor, DupError, Entry, MapleError, MapleTree, NodeStats, PausedCursor};

/// A maple tree in non-RCU mode: stores rewrite nodes in place and free replaced nodes at once. Every change takes
/// `&mut self`, so no reader can run beside it; reads take `&self`.
///
/// The operations are those of [`MapleTree`] and its [`crate::Writer`], with the same results and errors.
///
/// Users: in Linux, `kernel/fork.c: dup_mmap` clears RCU mode on the child's private tree while it fills it and
/// sets it again before the child can run, and `mm/mmap.c: exit_mmap` clears it on a tree being torn down. In
/// this workspace nothing outside this crate uses non-RCU mode: `vmspace-mm` keeps every address space's tree in
/// RCU mode (`MapleTree::new`; fork's `MapleTree::dup` of an RCU tree is an RCU tree, and the child's
/// `VM_DONTCOPY` ranges are cleared with RCU-mode stores) and `vmspace-bench` builds with
/// `MapleTree::from_sorted` and copies with `MapleTree::dup`, both RCU. Its users are this crate's tests
/// (`tests/model.rs`, `tests/smoke.rs`, `tests/alloc_fail.rs`, `tests/api.rs`), which run every operation in both
/// modes against the same oracles, so the in-place write paths stay correct for a caller that wants them.
///
/// A reader beside a writer does not compile:
///
/// ```compile_fail
/// use std::num::NonZeroUsize;
/// use vmspace_maple::NonRcuMapleTree;
///
/// let mut t = NonRcuMapleTree::<NonZeroUsize>::new();
/// std::thread::scope(|s| {
///     s.spawn(|| t.load(5)); // a reader holds `&t` ...
///     t.store_range(0, 9, NonZeroUsize::new(1)).unwrap(); // ... so this `&mut t` is refused
/// });
/// ```
///
/// while the same program on the RCU-mode tree does:
///
/// ```
/// use std::num::NonZeroUsize;
/// use vmspace_maple::MapleTree;
///
/// let t = MapleTree::<NonZeroUsize>::new();
/// std::thread::scope(|s| {
///     s.spawn(|| t.load(5));
///     t.store_range(0, 9, NonZeroUsize::new(1)).unwrap();
/// });
/// ```
pub struct NonRcuMapleTree<T: Entry> {
    /// The tree, with its writer state's mode set to non-RCU. Never handed out by reference: its `&self`
    /// methods include stores.
    tree: MapleTree<T>,
}

impl<T: Entry> Default for NonRcuMapleTree<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Entry> std::fmt::Debug for NonRcuMapleTree<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonRcuMapleTree").field("len", &self.len()).finish()
    }
}

impl<T: Entry> NonRcuMapleTree<T> {
    /// An empty tree in non-RCU mode, with gap tracking.
    pub fn new() -> Self {
        NonRcuMapleTree { tree: MapleTree::with_mode(false, Counters::new()) }
    }

    /// Wraps a tree made in non-RCU mode (by [`NonRcuMapleTree::dup`]).
    pub(crate) fn from_tree(tree: MapleTree<T>) -> Self {
        debug_assert!(!tree.lock().is_rcu());
        NonRcuMapleTree { tree }
    }

    /// Switches to RCU mode (`mt_set_in_rcu`) and returns the tree, ready to be shared with lock-free readers.
    pub fn into_rcu(self) -> MapleTree<T> {
        let tree = self.tree;
        tree.lock().st.rcu = true;
        tree
    }

    /// See [`MapleTree::load`].
    pub fn load(&self, index: u64) -> Option<T> {
        self.tree.load(index)
    }

    /// The entry at `index` with its whole range (see [`MapleTree::load_range_in`]).
    pub fn load_range(&self, index: u64) -> Option<(u64, u64, T)> {
        let g = vmspace_rcu::pin();
        self.tree.load_range_in(index, &g)
    }

    /// See [`MapleTree::find`].
    pub fn find(&self, from: u64, max: u64) -> Option<(u64, u64, T)> {
        self.tree.find(from, max)
    }

    /// See [`MapleTree::find_rev`].
    pub fn find_rev(&self, from: u64, min: u64) -> Option<(u64, u64, T)> {
        self.tree.find_rev(from, min)
    }

    /// See [`MapleTree::cursor`]. The cursor borrows the tree, so no change can run while it lives.
    pub fn cursor<'g>(&'g self, guard: &'g Guard) -> Cursor<'g, T> {
        self.tree.cursor(guard)
    }

    /// Re-attaches a paused cursor (see [`PausedCursor::resume`]).
    pub fn resume<'g>(&'g self, paused: PausedCursor, guard: &'g Guard) -> Cursor<'g, T> {
        paused.resume(&self.tree, guard)
    }

    /// See [`MapleTree::empty_area`].
    pub fn empty_area(&self, min: u64, max: u64, size: u64) -> Result<u64, MapleError> {
        self.tree.empty_area(min, max, size)
    }

    /// See [`MapleTree::empty_area_rev`].
    pub fn empty_area_rev(&self, min: u64, max: u64, size: u64) -> Result<u64, MapleError> {
        self.tree.empty_area_rev(min, max, size)
    }

    /// Number of non-NULL ranges.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// True if no index holds an entry.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Height in levels (0 = empty).
    pub fn height(&self) -> usize {
        self.tree.lock().height()
    }

    /// See [`MapleTree::store_range`].
    pub fn store_range(
        &mut self,
        first: u64,
        last: u64,
        value: Option<T>,
    ) -> Result<Vec<(u64, u64, T)>, MapleError> {
        self.tree.lock().store_range(first, last, value)
    }

    /// See [`MapleTree::insert_range`].
    pub fn insert_range(&mut self, first: u64, last: u64, value: T) -> Result<(), MapleError> {
        self.tree.lock().insert_range(first, last, value)
    }

    /// See [`MapleTree::erase`].
    pub fn erase(&mut self, index: u64) -> Option<(u64, u64, T)> {
        self.tree.lock().erase(index)
    }

    /// See [`crate::Writer::try_erase`].
    pub fn try_erase(&mut self, index: u64) -> Result<Option<(u64, u64, T)>, MapleError> {
        self.tree.lock().try_erase(index)
    }

    /// See [`MapleTree::erase_range`].
    pub fn erase_range(&mut self, first: u64, last: u64) -> Result<Vec<(u64, u64, T)>, MapleError> {
        self.tree.lock().erase_range(first, last)
    }

    /// See [`crate::Writer::reserve`].
    pub fn reserve(&mut self, nodes: usize) -> Result<(), MapleError> {
        self.tree.lock().reserve(nodes)
    }

    /// See [`crate::Writer::release_reserve`].
    pub fn release_reserve(&mut self) {
        self.tree.lock().release_reserve()
    }

    /// See [`crate::Writer::reserved`].
    pub fn reserved(&self) -> usize {
        self.tree.lock().reserved()
    }

    /// See [`crate::Writer::worst_case`].
    pub fn worst_case(&self, stores: usize) -> usize {
        self.tree.lock().worst_case(stores)
    }

    /// See [`MapleTree::dup`]; the copy is in non-RCU mode too.
    pub fn dup<U: Entry, E>(
        &self,
        map: impl FnMut(u64, u64, T) -> Result<U, E>,
        undo: impl FnMut(U),
    ) -> Result<NonRcuMapleTree<U>, DupError<E>> {
        self.tree.dup(map, undo).map(NonRcuMapleTree::from_tree)
    }

    /// See [`MapleTree::validate`].
    pub fn validate(&self) -> Result<(), String> {
        self.tree.validate()
    }

    /// See [`MapleTree::dump`].
    pub fn dump(&self) -> String {
        self.tree.dump()
    }

    /// See [`MapleTree::node_stats`].
    pub fn node_stats(&self) -> NodeStats {
        self.tree.node_stats()
    }

    /// See [`MapleTree::inject_alloc_failure`].
    pub fn inject_alloc_failure(&self, after: Option<u64>) {
        self.tree.inject_alloc_failure(after)
    }
}
