//! The maple tree: an RCU-safe range B-tree with gap tracking and O(n) duplication (`lib/maple_tree.c`; `__mt_dup` for fork).
//!
//! Depends only on `rcu`.
//!
//! # Model
//!
//! A [`MapleTree<T>`] maps every index of `[0, u64::MAX]` (`u64::MAX` plays `ULONG_MAX`) to an entry or to
//! nothing (NULL). Stored entries are non-overlapping inclusive ranges `[first, last]`; adjacent NULL ranges are
//! always coalesced. Values are pointer-sized non-zero words ([`Entry`]); the tree never dereferences them.
//!
//! # Node layout
//!
//! Every node is 256 bytes, 256-byte aligned, and made of 32 atomic words:
//!
//! ```text
//!            word 0      1 ............ 15   16 ........................... 31
//! leaf     [ parent | pivot 0..14 (15)     | slot 0..15 (16 values)          ]
//!
//!            word 0      1 ...... 9   10 ...... 19   20 ...... 29   30     31
//! internal [ parent | pivot 0..8  | child 0..9   | gap 0..9     | meta | 0  ]
//!                                                                  end | gap_offset << 8
//! ```
//!
//! Metadata: an internal node keeps its `end` and the offset of its largest gap in word 30. A leaf has no room
//! for metadata (15 pivots + 16 slots fill it, as in the kernel when the last slot is used) and needs none: its
//! end is implied by the pivots (see below).
//!
//! Internal nodes are always the kernel's *allocation-range* kind (10 children, 9 pivots, a max gap per child):
//! gap tracking is always on because the address space needs `get_unmapped_area`. A tree without gap tracking
//! would use 16-way internal nodes (`maple_range_64`) instead; this crate does not provide that variant.
//!
//! ## Pivots
//!
//! A node covers `[min, max]`, known to every walker from the parent's pivots (`[0, u64::MAX]` at the root).
//! Slot `i` covers `[pivot[i-1] + 1, pivot[i]]`, with `pivot[-1] + 1 = min`. The last used slot (`end`) ends
//! at `max`: when `end < pivots` its pivot is stored and equals `max`, otherwise it is implied. Used pivots
//! strictly increase; unused pivots and slots are 0. A lookup therefore scans pivots linearly for the first
//! `pivot >= index` and never needs `end`.
//!
//! ## Tagged words
//!
//! * Child pointers and the root word: node address | kind (1 = leaf, 2 = internal); 0 = no node (the root is 0
//!   for an empty tree).
//! * Parent word: 1 for the root; `parent address | slot_in_parent << 3 | 0b110` otherwise; **the node's own
//!   address when the node is dead**. A leaf's parent word also carries its **sequence count** (bits 48..63)
//!   and a *writing* bit (bit 7), the seqlock of its in-place stores (below; module `node` has the layout).
//!
//! ## Structural invariants (checked by [`MapleTree::validate`])
//!
//! All leaves are at one depth; no two adjacent NULL ranges (within or across leaves); a leaf ends with a NULL
//! only if its max is `u64::MAX`, so a NULL range never straddles two leaves; non-root leaves have at least 6
//! used slots and non-root internal nodes at least 4; a root internal node has at least 2 children; every
//! internal `gap[i]` equals the largest NULL range inside child `i`; the tree of a single NULL range is empty
//! (root word 0).
//!
//! # Readers and writers
//!
//! Readers ([`MapleTree::load`], `find`, cursors, gap searches) take no lock: they run under an RCU guard
//! ([`vmspace_rcu::pin`]), load the root and child pointers with Acquire (pairing with the Release that
//! published them), and read pivots and slots with atomic loads. Writers are serialised by an internal mutex
//! ([`MapleTree::lock`] returns a [`Writer`]); readers never wait for it.
//!
//! A [`MapleTree`] is always in **RCU mode**. An internal node's pivots never change once it is published,
//! and every store that changes more than one leaf (a split, a rebalance, a spanning store, and its shortcut
//! for a NULL at a leaf's end, `write::mas_wr_null_tail`) builds new nodes (copy-on-write): it publishes the top of the new subtree with one Release store (a parent
//! slot or the root), marks the replaced nodes dead, and retires them (freed after a grace period). Exactly
//! these stores touch a live node in place (module `write` has the details):
//!
//! 1. the **exact-fit store** (`mas_wr_exact_fit`): one Release store of one leaf slot whose range
//!    `[first, last]` is exactly the store's, when the new value keeps every invariant (a NULL lands next to no
//!    NULL, and not at the end of a leaf that is not the right-most); readers see the old or the new value;
//! 2. the **slot store** (`mas_wr_slot_store`): two adjacent leaf slots keep their count, one pivot moves and at
//!    most one of the two slots changes (a boundary moves: a range grows into its neighbour or a gap, or shrinks);
//! 3. the **append** (`mas_wr_append`): the leaf's last range is split, the leaf growing by one slot (the new
//!    range after the old content, or at its start with the old content moved one slot right) or two (inside
//!    it), within 16 slots;
//! 4. the **node store** (`mas_wr_node_store`): any other change inside one leaf, whose slot count changes
//!    (an mmap into a gap, an munmap between gaps): the leaf's words that differ are rewritten in place (the
//!    kernel copies the leaf here); those two shapes (an insert strictly inside a gap, an erase of a range
//!    between two gaps) are recognised from the words around the store's slot before the general
//!    classification and made in straight-line code (`write::mas_wr_node_store_churn`);
//! 5. **publication**: one Release store of a new child into its parent's slot (the child covers the range of
//!    the one it replaces, so the parent's pivots stay), or of a new root;
//! 6. **max-gap bookkeeping**: the per-child gap words and the largest-gap offset of the internal nodes on the
//!    store's path (`mas_update_gap`), which only gap searches read and which they take as hints;
//! 7. **parent words**: re-parenting the children of new internal nodes (keeping a leaf's sequence count), the
//!    dead mark of replaced nodes, and a leaf's sequence count around its slot stores, appends and node stores.
//!
//! The slot store, the append and the node store write several words (a pivot and a slot, up to three pivots
//! and three slots, or the tail of the leaf), so each is made inside one write section of the leaf's **sequence count**, a seqlock in the spare
//! bits of the leaf's parent word: the writer sets the writing bit (Relaxed), issues `fence(Release)`, stores
//! the words, and stores the word with the bit clear and the count plus one (Release). Every reader of a leaf
//! (lookups, cursor walks, cached cursor steps, gap searches) loads the parent word first (Acquire; it waits
//! while the writing bit is set, a few stores), then the pivots and slots, then `fence(Acquire)` and the parent
//! word again, the check it already made for a dead node: dead, restart; count changed, read the leaf again (a
//! cursor whose cached leaf changed re-walks to the index it was about to visit, as after a dead node). A count
//! never repeats during a leaf's life (a leaf at the last count is copied instead), so a reader whose two loads
//! agree read one state of the leaf: **no reader ever sees a torn range** (an old pivot with a new value).
//! The kernel makes the same stores in RCU mode without a count and lets its readers check the VMA they find;
//! this tree's readers return ranges, so it pays one parent-word load per leaf read instead, and saves the node
//! copy (a 256-byte allocation, the copy, the publication in the parent's slot, the dead mark and the
//! retirement, each a cache line that a reader of the same tree then misses on) on every boundary move and on
//! every change of a leaf's slot count; only a leaf whose count is at its last value is copied.
//!
//! A [`NonRcuMapleTree`] is always in **non-RCU mode**, and every change to it takes `&mut self`, so no reader
//! runs beside one (module `non_rcu` explains why a separate type, and who uses it). A change confined to one
//! leaf rewrites that leaf in place, the final one-for-one node of any larger change is rewritten in place
//! instead of copied, and replaced nodes are freed at once. [`NonRcuMapleTree::into_rcu`] switches to RCU mode.
//!
//! A reader sees each index's entry as before or after any concurrent write, never a torn range, and never
//! misses a range that existed for its whole read, because every node it reads is either live (and, for a
//! leaf, read within one value of its sequence count) or a frozen (dead, never modified again) copy of a
//! consistent earlier state.
//!
//! # Dead nodes
//!
//! Writer: (1) fill the new nodes; (2) publish with a Release store; (3) store `parent = self` into each
//! replaced node with Release; (4) retire it (freed after a grace period). Reader: load a node's pivots and
//! slot, then `fence(Acquire)`, then load its parent word; if it equals the node's address the node is dead:
//! `fence(Acquire)` (synchronising with step 3, hence with step 2) and restart from the root (or, for a cursor,
//! re-walk to the saved index). Data read from a node that was alive after those loads is current (for a leaf:
//! with its sequence count unchanged); data from a dead node is a consistent earlier state, which is never
//! returned.
//!
//! # Allocation and reclamation
//!
//! Every node is counted by one *allocation domain* (a tree and the trees [`MapleTree::dup`] made from it share
//! one): it counts allocations and frees ([`NodeStats`]) and honours failure injection
//! ([`MapleTree::inject_alloc_failure`]). The memory comes from the process's **node slab** (module `slab`, the
//! kernel's `kmem_cache` of maple nodes): 256-byte slots carved from 2 MiB chunks (aligned, `MADV_HUGEPAGE`),
//! a shared depot of chunks with free slots (one bitmap per chunk) under a mutex, and a per-thread magazine of
//! free nodes in front of it, so that the common allocation and free touch no lock and no shared line. `dup`
//! and [`Writer::reserve`] take their nodes in batches (one bulk allocation per batch: the magazine, then the
//! depot in one step). Memory goes back to the system when a chunk becomes entirely free and more than
//! [`NODE_KEEP_EMPTY_BYTES`] (16 MiB) of free chunks are already kept; [`slab_stats`] reports what is held.
//!
//! Every allocation of a store happens before anything visible changes, so ENOMEM (injected, or no memory for
//! a new chunk) leaves the tree as it was; [`Writer::reserve`] preallocates the worst case
//! ([`MapleTree::worst_case_nodes`], [`Writer::worst_case`]) so that a sequence of stores cannot fail.
//! Replaced nodes are retired in batches: a writer collects them and hands each full batch to RCU with one
//! deferred call; a grace period later they go back to the slab (into the magazine of the thread that runs the
//! deferred call), which is the only way a published node's memory is reused. In non-RCU mode, and for nodes
//! never published, they are freed at once.
//!
//! # Modules
//!
//! `node` (layout, tagged words, allocation domains and counters), `slab` (node memory), `read` (lookups and the cursor), `write` (stores),
//! `cursor` (the writer's cursor, [`WriteCursor`]: the kernel's `ma_state` of a writer, whose stores start
//! from its cached path),
//! `build` (node construction and distribution, shared by stores and the bulk builder), `gap` (empty-area
//! searches), `dup` (the O(n) copy), `validate` (invariant checks, dump, statistics), `non_rcu`
//! ([`NonRcuMapleTree`]).

#![cfg_attr(not(loom), warn(missing_docs))]

mod build;
mod cursor;
mod dup;
mod gap;
mod node;
mod non_rcu;
mod read;
mod slab;
mod validate;
mod write;

use std::fmt;
use std::marker::PhantomData;
use std::num::{NonZeroU64, NonZeroUsize};
use std::sync::Arc;

use vmspace_rcu::sync::{AtomicU64, Mutex, MutexGuard, Ordering};
use vmspace_rcu::{CachePadded, Guard};

pub use cursor::WriteCursor;
pub use non_rcu::NonRcuMapleTree;
pub use read::{Cursor, PausedCursor};
pub use slab::{NODE_CHUNK_SHIFT, NODE_KEEP_EMPTY_BYTES, SlabStats};

use node::Counters;

/// A value the tree can store: pointer-sized, non-zero, `Copy`.
///
/// The tree stores the raw word in an atomic slot (as the kernel stores pointers) and hands copies back to
/// readers on any thread. The lifetime of whatever a value points to is the caller's business (VMAs are
/// type-stable: recycled, never unmapped, while readers may hold them).
///
/// # Safety
///
/// `from_raw(into_raw(v))` must give back a value equal to `v`, and a value rebuilt from its raw word on another
/// thread must be valid there (hence `Send + Sync`).
pub unsafe trait Entry: Copy + Send + Sync + 'static {
    /// The raw word stored in a slot.
    fn into_raw(self) -> NonZeroUsize;
    /// Rebuilds a value from a word produced by [`Entry::into_raw`].
    ///
    /// # Safety
    ///
    /// `raw` was produced by `into_raw` of a value of this type.
    unsafe fn from_raw(raw: NonZeroUsize) -> Self;
}

// SAFETY: the identity on a non-zero word.
unsafe impl Entry for NonZeroUsize {
    #[inline]
    fn into_raw(self) -> NonZeroUsize {
        self
    }
    #[inline]
    unsafe fn from_raw(raw: NonZeroUsize) -> Self {
        raw
    }
}

// SAFETY: usize is 64 bits (asserted in `node`), so the conversion is lossless both ways.
unsafe impl Entry for NonZeroU64 {
    #[inline]
    fn into_raw(self) -> NonZeroUsize {
        // 64-bit only (asserted in `node`): lossless.
        NonZeroUsize::new(self.get() as usize).unwrap_or(NonZeroUsize::MIN)
    }
    #[inline]
    unsafe fn from_raw(raw: NonZeroUsize) -> Self {
        NonZeroU64::new(raw.get() as u64).unwrap_or(NonZeroU64::MIN)
    }
}

// SAFETY: a `&'static U` is a non-null address valid forever on every thread (`U: Sync`). The slot words are
// integers (atomics shared with pivots), so the pointer crosses them as an integer: `into_raw` *exposes* the
// reference's provenance and `from_raw` takes it back from the exposed set (`with_exposed_provenance`). A bare
// `addr()` would drop it, and a reference rebuilt from that integer would point at nothing (undefined behaviour,
// which Miri reports).
unsafe impl<U: Sync + 'static> Entry for &'static U {
    #[inline]
    fn into_raw(self) -> NonZeroUsize {
        std::ptr::NonNull::from(self).expose_provenance()
    }
    #[inline]
    unsafe fn from_raw(raw: NonZeroUsize) -> Self {
        let p = std::ptr::NonNull::<U>::with_exposed_provenance(raw);
        // SAFETY: `raw` came from `into_raw` of a `&'static U`, which exposed the provenance of that reference:
        // `p` is a valid, aligned, forever-live pointer to a `U`.
        unsafe { p.as_ref() }
    }
}

/// The memory of the process's node slab, which every maple tree's nodes come from (module docs, "Allocation
/// and reclamation"): chunks mapped, free node slots in its shared depot. Nodes in threads' magazines count as
/// in use here; [`flush_thread_nodes`] gives the calling thread's back first.
#[cfg(not(loom))]
pub fn slab_stats() -> SlabStats {
    slab::stats()
}

/// Gives the calling thread's cached free nodes (its slab magazine, up to 1,024 nodes) back to the shared depot,
/// so that [`slab_stats`] sees them and entirely free chunks can go back to the system. A thread does this by
/// itself when it exits.
#[cfg(not(loom))]
pub fn flush_thread_nodes() {
    slab::flush_local()
}

/// The slab's parts for the loom models (`tests/loom.rs`): not an API.
#[cfg(loom)]
#[doc(hidden)]
pub mod slab_model {
    pub use crate::slab::{Magazine, Slab};
}

/// Errors, as Linux errno values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapleError {
    /// A node allocation failed (`ENOMEM`). Nothing was changed.
    NoMem,
    /// `insert_range` found an index already occupied (`EEXIST`).
    Exists,
    /// Bad arguments, e.g. `first > last` (`EINVAL`).
    Invalid,
    /// No free area of the requested size (`EBUSY`).
    Busy,
}

impl MapleError {
    /// The positive errno value (ENOMEM 12, EEXIST 17, EINVAL 22, EBUSY 16).
    pub fn errno(&self) -> i32 {
        match self {
            MapleError::NoMem => 12,
            MapleError::Exists => 17,
            MapleError::Invalid => 22,
            MapleError::Busy => 16,
        }
    }
}

impl fmt::Display for MapleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            MapleError::NoMem => "ENOMEM",
            MapleError::Exists => "EEXIST",
            MapleError::Invalid => "EINVAL",
            MapleError::Busy => "EBUSY",
        };
        f.write_str(s)
    }
}

impl std::error::Error for MapleError {}

/// Why [`MapleTree::dup`] failed. Either way nothing was left allocated and `undo` saw every produced value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DupError<E> {
    /// A node allocation failed.
    NoMem,
    /// The map function failed with this error.
    Map(E),
}

/// Node accounting, for leak tests (see [`MapleTree::node_stats`]).
///
/// `allocated`, `freed` and `pending_free` count the tree's allocation domain: the tree and every tree
/// [`MapleTree::dup`] made from it (or that it was made from) share one. `reserved` and `live` are this tree's.
/// Without leaks, `allocated - freed - pending_free` equals the sum of `live + reserved` over the domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeStats {
    /// Nodes ever allocated in the domain.
    pub allocated: u64,
    /// Nodes whose memory was released (at once, or after their grace period).
    pub freed: u64,
    /// Nodes retired and waiting for their grace period. A writer hands retired nodes to RCU in batches (512
    /// nodes; see [`Writer::flush_retired`]), so up to a batch can wait here while the tree is idle.
    pub pending_free: u64,
    /// Nodes preallocated by [`Writer::reserve`] and not used yet (this tree).
    pub reserved: u64,
    /// Nodes reachable from this tree's root.
    pub live: u64,
}

impl NodeStats {
    /// `allocated - freed - pending_free - live - reserved`: zero for a single tree with no leak.
    pub fn unaccounted(&self) -> i64 {
        self.allocated as i64
            - self.freed as i64
            - self.pending_free as i64
            - self.live as i64
            - self.reserved as i64
    }
}

/// Writer-side state, under the tree's mutex.
pub(crate) struct WState {
    /// Levels of nodes (0 = empty tree, 1 = a root leaf).
    pub(crate) height: usize,
    /// RCU mode (copy-on-write; every `MapleTree`) or not (in place, immediate frees; a `NonRcuMapleTree`).
    pub(crate) rcu: bool,
    /// Preallocated nodes (addresses).
    pub(crate) pool: Vec<usize>,
    /// Unpublished, dead nodes waiting to be handed to RCU as one batch (counted as pending).
    pub(crate) retired: Vec<usize>,
    /// Stores by path (see [`StoreStats`]).
    pub(crate) stores: StoreStats,
    /// Stores begun so far: a [`WriteCursor`] whose saved count differs re-walks from the root (module
    /// `cursor`).
    pub(crate) stamp: u64,
    /// Walks from the root word to a leaf made to position a store or a write cursor (see
    /// [`Writer::descents`]).
    pub(crate) descents: u64,
    /// The writer's cursor (index and cached path; module `cursor`).
    pub(crate) cursor: cursor::CursorState,
}

/// Stores by the path they took, for tests and benchmarks ([`MapleTree::store_stats`]): the in-place stores on a
/// live leaf by kind (module `write`), and the stores that copied a leaf or rebuilt more. Counted by the writer
/// under its lock (plain integers, no shared-line traffic); a store that changes nothing is not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// One leaf slot replaced in place, its range unchanged (`mas_wr_exact_fit`'s single slot store).
    pub exact_fit: u64,
    /// Two adjacent slots, one pivot moved and at most one slot changed, in place under the leaf's sequence
    /// count (`mas_wr_slot_store`).
    pub slot_store: u64,
    /// The last range of a leaf split, the leaf growing by one or two slots at its end, in place under the
    /// leaf's sequence count (`mas_wr_append`).
    pub append: u64,
    /// One leaf rewritten, its slot count changed (`mas_wr_node_store`): in place under its sequence count (RCU
    /// mode; copied when the count is at its last value) or in place (non-RCU mode).
    pub node_store: u64,
    /// Stores that rebuilt more than one leaf (split, rebalance, spanning store, tree growth or collapse).
    pub rebuild: u64,
    /// Of the `rebuild` stores, those made by the NULL-tail shortcut (module `write`, `mas_wr_null_tail`): a
    /// NULL store that would leave a NULL at the end of a leaf that is not the right-most, joined with the next
    /// leaf's leading NULL: the two leaves' slots split evenly over two new leaves and their parent copied, without
    /// the general rebuild.
    pub null_tail: u64,
    /// Stores into an empty tree.
    pub empty: u64,
}

impl StoreStats {
    /// Stores that changed a live leaf in place under RCU without a change of its slot count, or by one or two
    /// slots at its end (exact fit, slot store, append; the node store, which counts separately, is in place too
    /// unless its leaf's sequence count was at its last value).
    pub fn in_place(&self) -> u64 {
        self.exact_fit + self.slot_store + self.append
    }

    /// Every counted store.
    pub fn total(&self) -> u64 {
        self.in_place() + self.node_store + self.rebuild + self.empty
    }
}

/// The maple tree. See the crate docs.
///
/// `Send + Sync`: share it with `&` or `Arc`; readers on any thread, one writer at a time.
pub struct MapleTree<T: Entry> {
    /// Encoded root node, or 0 for an empty tree. Alone on its cache line (128 bytes with the adjacent-line
    /// prefetch pair): every lookup reads it, so the words a writer changes on every store (the entry count, the
    /// writer mutex) must not share its line, or each store would take the line from every reader.
    root: CachePadded<AtomicU64>,
    /// Number of non-NULL ranges.
    len: AtomicU64,
    w: Mutex<WState>,
    counters: Arc<Counters>,
    _t: PhantomData<T>,
}

/// The writer: holds the tree's writer mutex; all mutating operations. Readers keep running meanwhile.
///
/// While a thread holds a `Writer`, it must not call the locking convenience methods of the same tree
/// ([`MapleTree::store_range`], `insert_range`, `erase`, `erase_range`, `dup`, `validate`, `dump`,
/// `node_stats`): they would wait for the mutex it holds. Use the `Writer`'s own methods; lock-free reads
/// (`load`, `find`, cursors, `empty_area`) through [`Writer::tree`] are fine.
pub struct Writer<'a, T: Entry> {
    tree: &'a MapleTree<T>,
    st: MutexGuard<'a, WState>,
}

impl<T: Entry> Default for MapleTree<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Entry> fmt::Debug for MapleTree<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapleTree").field("len", &self.len()).finish()
    }
}

impl<T: Entry> MapleTree<T> {
    fn with_mode(rcu: bool, counters: Arc<Counters>) -> Self {
        MapleTree {
            root: CachePadded::new(AtomicU64::new(0)),
            len: AtomicU64::new(0),
            w: Mutex::new(WState {
                height: 0,
                rcu,
                pool: Vec::new(),
                retired: Vec::new(),
                stores: StoreStats::default(),
                stamp: 0,
                descents: 0,
                cursor: cursor::CursorState::new(),
            }),
            counters,
            _t: PhantomData,
        }
    }

    /// An empty tree in RCU mode with gap tracking (the VMA tree's configuration).
    pub fn new() -> Self {
        Self::with_mode(true, Counters::new())
    }

    /// Takes the writer mutex. Every mutating operation goes through the returned [`Writer`]; the convenience
    /// methods on `MapleTree` take and release it per call.
    pub fn lock(&self) -> Writer<'_, T> {
        Writer { tree: self, st: self.w.lock() }
    }

    /// The entry at `index`, if any (one guard pinned for the call).
    #[inline]
    pub fn load(&self, index: u64) -> Option<T> {
        let g = vmspace_rcu::pin();
        self.load_in(index, &g)
    }

    /// The entry at `index` under the caller's guard.
    #[inline]
    pub fn load_in(&self, index: u64, guard: &Guard) -> Option<T> {
        read::load_raw(&self.root, index, guard).map(|r| {
            // SAFETY: every non-zero leaf word was stored from `T::into_raw`.
            unsafe { T::from_raw(r) }
        })
    }

    /// The entry at `index` with its whole range `[first, last]`.
    #[inline]
    pub fn load_range_in(&self, index: u64, guard: &Guard) -> Option<(u64, u64, T)> {
        let (s, e, v) = read::load_range_raw(&self.root, index, guard);
        NonZeroUsize::new(v).map(|r| {
            // SAFETY: as in `load_in`.
            (s, e, unsafe { T::from_raw(r) })
        })
    }

    /// The first entry intersecting `[from, max]`, with its range.
    pub fn find(&self, from: u64, max: u64) -> Option<(u64, u64, T)> {
        let g = vmspace_rcu::pin();
        self.find_in(from, max, &g)
    }

    /// [`MapleTree::find`] under the caller's guard.
    pub fn find_in(&self, from: u64, max: u64, guard: &Guard) -> Option<(u64, u64, T)> {
        if from > max {
            return None;
        }
        let mut c = self.cursor(guard);
        c.set(from);
        c.find(max)
    }

    /// The last entry intersecting `[min, from]`, with its range.
    pub fn find_rev(&self, from: u64, min: u64) -> Option<(u64, u64, T)> {
        let g = vmspace_rcu::pin();
        self.find_rev_in(from, min, &g)
    }

    /// [`MapleTree::find_rev`] under the caller's guard.
    pub fn find_rev_in(&self, from: u64, min: u64, guard: &Guard) -> Option<(u64, u64, T)> {
        if from < min {
            return None;
        }
        let mut c = self.cursor(guard);
        c.set(from);
        c.find_rev(min)
    }

    /// A read cursor positioned at index 0 (state "start"). See [`Cursor`].
    pub fn cursor<'g>(&'g self, guard: &'g Guard) -> Cursor<'g, T> {
        Cursor::new(self, guard)
    }

    /// The lowest `s` such that `[s, s + size - 1]` lies in `[min, max]` and holds no entry.
    ///
    /// `EINVAL` if `size == 0`, `min > max` or `max - min < size - 1`; `EBUSY` if there is no such area.
    /// O(log n) through the per-child max gaps. Lock-free (exact when no writer runs concurrently; a
    /// concurrent writer makes the answer one of the states during the call).
    pub fn empty_area(&self, min: u64, max: u64, size: u64) -> Result<u64, MapleError> {
        let g = vmspace_rcu::pin();
        gap::empty_area(&self.root, min, max, size, false, &g)
    }

    /// The highest free area of `size` within `[min, max]`; returns its start. Errors as [`MapleTree::empty_area`].
    pub fn empty_area_rev(&self, min: u64, max: u64, size: u64) -> Result<u64, MapleError> {
        let g = vmspace_rcu::pin();
        gap::empty_area(&self.root, min, max, size, true, &g)
    }

    /// Number of non-NULL ranges.
    #[inline]
    pub fn len(&self) -> usize {
        // Relaxed: a statistic maintained by the writer.
        self.len.load(Ordering::Relaxed) as usize
    }

    /// True if no index holds an entry.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores `value` over `[first, last]` (None erases), overwriting whatever was there.
    ///
    /// Returns the entries it replaced, **clipped to `[first, last]`**, in order. `EINVAL` if `first > last`,
    /// `ENOMEM` if a node allocation failed (nothing changed). NULL over the whole key space (`0..=u64::MAX`)
    /// allocates nothing and cannot fail: the tree becomes empty (the kernel's `__mt_destroy`), its nodes retired.
    pub fn store_range(
        &self,
        first: u64,
        last: u64,
        value: Option<T>,
    ) -> Result<Vec<(u64, u64, T)>, MapleError> {
        self.lock().store_range(first, last, value)
    }

    /// Stores `value` over `[first, last]` only if every index there is empty; `EEXIST` otherwise.
    pub fn insert_range(&self, first: u64, last: u64, value: T) -> Result<(), MapleError> {
        self.lock().insert_range(first, last, value)
    }

    /// Removes the whole range holding `index`; returns it. An allocation failure leaves it in place and
    /// returns None (use [`Writer::try_erase`] to see the error).
    pub fn erase(&self, index: u64) -> Option<(u64, u64, T)> {
        self.lock().erase(index)
    }

    /// Erases `[first, last]`; returns the removed entries clipped to it.
    pub fn erase_range(&self, first: u64, last: u64) -> Result<Vec<(u64, u64, T)>, MapleError> {
        self.lock().erase_range(first, last)
    }

    /// An O(n) depth-first pre-order copy of the node structure, with `map` applied to each value (given its
    /// range). The copy shares this tree's allocation domain (node counters and failure injection); it is in RCU mode.
    ///
    /// On any failure (a node allocation: [`DupError::NoMem`]; `map`: [`DupError::Map`]) every node allocated
    /// is freed and `undo` is called on every value `map` already produced.
    pub fn dup<U: Entry, E>(
        &self,
        map: impl FnMut(u64, u64, T) -> Result<U, E>,
        undo: impl FnMut(U),
    ) -> Result<MapleTree<U>, DupError<E>> {
        self.lock().dup(map, undo)
    }

    /// [`MapleTree::dup`] with a look-ahead: `ahead` is called on every value once, in order, up to one leaf
    /// ahead of `map` (the values of a leaf when the copy of the leaf before it starts), so that the caller can
    /// start loading what they point to (a prefetch) while `map` works on earlier ones. `ahead` must not change
    /// anything `map` or `undo` depend on.
    pub fn dup_ahead<U: Entry, E>(
        &self,
        ahead: impl FnMut(T),
        map: impl FnMut(u64, u64, T) -> Result<U, E>,
        undo: impl FnMut(U),
    ) -> Result<MapleTree<U>, DupError<E>> {
        dup::dup(&self.lock(), true, ahead, map, undo)
    }

    /// Builds a tree from sorted, non-overlapping `(first, last, value)` ranges, packing leaves densely.
    /// `EINVAL` for unsorted, overlapping or reversed ranges; `ENOMEM` on allocation failure.
    pub fn from_sorted(iter: impl IntoIterator<Item = (u64, u64, T)>) -> Result<Self, MapleError> {
        let t = Self::new();
        {
            let mut w = t.lock();
            build::from_sorted(&mut w, iter)?;
        }
        Ok(t)
    }

    /// Checks every structural invariant (see the crate docs); `Err` describes the first violation.
    pub fn validate(&self) -> Result<(), String> {
        let w = self.lock();
        validate::validate(&w)
    }

    /// A human-readable dump of the node structure.
    pub fn dump(&self) -> String {
        let w = self.lock();
        validate::dump(&w)
    }

    /// Node accounting (see [`NodeStats`]).
    pub fn node_stats(&self) -> NodeStats {
        let w = self.lock();
        validate::stats(&w)
    }

    /// Stores so far by the path they took (see [`StoreStats`]).
    pub fn store_stats(&self) -> StoreStats {
        self.lock().store_stats()
    }

    /// Root descents of the writer side so far (see [`Writer::descents`]).
    pub fn descents(&self) -> u64 {
        self.lock().descents()
    }

    /// Makes the `(after + 1)`-th node allocation from now fail (once); `None` switches injection off. Applies to
    /// stores, [`Writer::reserve`] and [`MapleTree::dup`] (the whole allocation domain).
    pub fn inject_alloc_failure(&self, after: Option<u64>) {
        // Relaxed: a test knob read by the allocating writer.
        self.counters.fail_countdown.store(after.map_or(0, |a| a.saturating_add(1)), Ordering::Relaxed);
    }

    /// Nodes a single store may allocate in the worst case for a tree of `height` levels (every level gathers
    /// at most 49 slots into at most 4 new nodes, plus one new root).
    pub fn worst_case_nodes(height: usize) -> usize {
        4 * height + 1
    }
}

impl<T: Entry> Drop for MapleTree<T> {
    fn drop(&mut self) {
        let mut st = self.lock();
        // Owning the tree means no reader holds a borrow of it: free everything at once.
        write::free_all(&mut st);
    }
}

impl<'a, T: Entry> Writer<'a, T> {
    /// The tree this writer locks.
    pub fn tree(&self) -> &'a MapleTree<T> {
        self.tree
    }

    /// Height in levels (0 = empty).
    pub fn height(&self) -> usize {
        self.st.height
    }

    /// Proof that this writer holds the lock, for reading nodes ([`node::Enode::locked`]).
    pub(crate) fn locked(&self) -> node::Locked<'_> {
        node::Locked::new()
    }

    /// The tree, the lock proof and the writer state at once: a store reads nodes while it allocates.
    pub(crate) fn parts(&mut self) -> (&'a MapleTree<T>, node::Locked<'_>, &mut WState) {
        (self.tree, node::Locked::new(), &mut self.st)
    }

    /// True in RCU mode: always for a [`MapleTree`]'s writer (a [`NonRcuMapleTree`] uses one internally).
    pub(crate) fn is_rcu(&self) -> bool {
        self.st.rcu
    }

    /// Preallocates nodes so that the following stores, up to `nodes` allocations in total, cannot fail (the
    /// kernel's `mas_preallocate`). `ENOMEM` (with nothing added to the reserve) if an allocation fails.
    /// Unused reserved nodes stay reserved until [`Writer::release_reserve`] or the tree is dropped.
    pub fn reserve(&mut self, nodes: usize) -> Result<(), MapleError> {
        write::reserve(self, nodes)
    }

    /// Frees unused reserved nodes.
    pub fn release_reserve(&mut self) {
        write::release_reserve(self)
    }

    /// Nodes currently reserved.
    pub fn reserved(&self) -> usize {
        self.st.pool.len()
    }

    /// Worst-case nodes for `stores` consecutive stores starting from the current height (each store may grow
    /// the tree by one level): reserve this many to make a multi-step change atomic.
    pub fn worst_case(&self, stores: usize) -> usize {
        (0..stores).map(|i| MapleTree::<T>::worst_case_nodes(self.st.height + i)).sum::<usize>().max(1)
    }

    /// See [`MapleTree::store_range`].
    pub fn store_range(
        &mut self,
        first: u64,
        last: u64,
        value: Option<T>,
    ) -> Result<Vec<(u64, u64, T)>, MapleError> {
        let out = write::store(self, first, last, write::raw_word(value), false)?;
        // SAFETY: the replaced words are non-NULL leaf words of this tree of `T`.
        Ok(unsafe { write::typed_replaced(out) })
    }

    /// See [`MapleTree::insert_range`].
    pub fn insert_range(&mut self, first: u64, last: u64, value: T) -> Result<(), MapleError> {
        write::store(self, first, last, value.into_raw().get(), true).map(|_| ())
    }

    /// Removes the whole range holding `index`; `Ok(None)` if it is empty.
    pub fn try_erase(&mut self, index: u64) -> Result<Option<(u64, u64, T)>, MapleError> {
        // One walk: the cursor finds the range and stores NULL over it from the same path (`mas_erase`).
        self.cursor(index).erase()
    }

    /// See [`MapleTree::erase`].
    pub fn erase(&mut self, index: u64) -> Option<(u64, u64, T)> {
        self.try_erase(index).ok().flatten()
    }

    /// See [`MapleTree::erase_range`].
    pub fn erase_range(&mut self, first: u64, last: u64) -> Result<Vec<(u64, u64, T)>, MapleError> {
        self.store_range(first, last, None)
    }

    /// [`MapleTree::empty_area`] under the writer lock (exact).
    pub fn empty_area(&self, min: u64, max: u64, size: u64) -> Result<u64, MapleError> {
        let g = vmspace_rcu::pin();
        gap::empty_area(&self.tree.root, min, max, size, false, &g)
    }

    /// [`MapleTree::empty_area_rev`] under the writer lock (exact).
    pub fn empty_area_rev(&self, min: u64, max: u64, size: u64) -> Result<u64, MapleError> {
        let g = vmspace_rcu::pin();
        gap::empty_area(&self.tree.root, min, max, size, true, &g)
    }

    /// [`MapleTree::validate`] while holding the lock.
    pub fn validate(&self) -> Result<(), String> {
        validate::validate(self)
    }

    /// [`MapleTree::dump`] while holding the lock.
    pub fn dump(&self) -> String {
        validate::dump(self)
    }

    /// [`MapleTree::node_stats`] while holding the lock.
    pub fn node_stats(&self) -> NodeStats {
        validate::stats(self)
    }

    /// [`MapleTree::store_stats`] while holding the lock.
    pub fn store_stats(&self) -> StoreStats {
        self.st.stores
    }

    /// Root descents of the writer side so far: walks that start at the root word to find a leaf, made by
    /// every store that is not given a cached path ([`Writer::store_range`], `insert_range`, `erase_range`,
    /// the convenience methods of [`MapleTree`]) and by a [`WriteCursor`] when it has no valid path (its first
    /// positioning, after a store it did not make, after a store that replaced the root). Not counted: a
    /// cursor's re-walks from a cached ancestor that covers the index (as `mas_next_node` climbs to the common
    /// ancestor), a store without a cursor that walks down from a level below the root of the writer cursor's
    /// path while that path is still the tree's (module `cursor`, "Validity across stores": an insert right
    /// after a [`Writer::erase`] of the same range starts at the erase's leaf), the rebuild's own walks to
    /// neighbouring nodes (module `write`), and lock-free readers.
    pub fn descents(&self) -> u64 {
        self.st.descents
    }

    /// A new write cursor at `index` (the kernel's `ma_state` of a writer; see [`WriteCursor`]): its first
    /// operation walks from the root (a descent).
    pub fn cursor(&mut self, index: u64) -> WriteCursor<'_, 'a, T> {
        WriteCursor::new(self, Some(index))
    }

    /// The writer's cursor where the last one left it, in this lock session or an earlier one (the tree keeps
    /// one cursor state): its cached path is used again if no store was made since; otherwise it walks from
    /// the root on its first operation.
    pub fn resume_cursor(&mut self) -> WriteCursor<'_, 'a, T> {
        WriteCursor::new(self, None)
    }

    /// Hands the nodes retired so far to RCU now (they are otherwise batched, see [`NodeStats::pending_free`])
    /// and starts a grace period. After this and a grace period (e.g. [`vmspace_rcu::synchronize`] followed by a
    /// flush), `pending_free` drops to zero.
    pub fn flush_retired(&mut self) {
        write::flush_retired(self)
    }

    /// See [`MapleTree::dup`]; the source is stable because this writer holds its lock.
    pub fn dup<U: Entry, E>(
        &self,
        map: impl FnMut(u64, u64, T) -> Result<U, E>,
        undo: impl FnMut(U),
    ) -> Result<MapleTree<U>, DupError<E>> {
        dup::dup(self, false, |_| {}, map, undo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `&'static U` rebuilt from its raw word must still point into `U` (with its provenance), not just at its
    /// address: `cargo miri test -p vmspace-maple entry_ref_round_trip` checks that reading through it is defined.
    #[test]
    fn entry_ref_round_trip_keeps_provenance() {
        static A: [u64; 2] = [7, 8];
        let raw = <&'static [u64; 2] as Entry>::into_raw(&A);
        // SAFETY: `raw` came from `into_raw` of a `&'static [u64; 2]`.
        let back = unsafe { <&'static [u64; 2] as Entry>::from_raw(raw) };
        assert!(std::ptr::eq(back, &A));
        assert_eq!(back[1], 8);
    }
}
