//! Raw node layout, tagged pointers, and the one place nodes are allocated and freed: the allocation domains
//! ([`Counters`]: accounting and failure injection) in front of the node slab (module `slab`: the memory).
//!
//! A node is 32 machine words (256 bytes, 256-aligned), all atomics so that lock-free readers may load them
//! while a writer stores to them (see the crate docs for which stores a live node can see). Word 0 is the
//! parent word; the other 31 are interpreted by node kind:
//!
//! ```text
//! leaf     : w[0..15]  pivot[0..15]   w[15..31] slot[0..16]  (values; 0 = NULL)
//! internal : w[0..9]   pivot[0..9]    w[9..19]  slot[0..10]  (encoded child pointers)
//!            w[19..29] gap[0..10]     w[29]     meta (end | gap_offset << 8)      w[30] unused (0)
//! ```
//!
//! The node's *end* (index of its last used slot) is implied by the pivots and the node's maximum, which every
//! walker knows from the parent pivot: `pivot[end] == max` when `end < pivots`, otherwise `end == pivots`
//! (implied pivot). Used pivots are strictly increasing; pivots and slots after `end` are 0. So a reader's
//! linear scan for the first `pivot >= index` always stops at or before `end` without knowing it.
//!
//! Encoded node pointers ([`Enode`], used in internal slots and the tree root) are the node address with the
//! node kind in the low bits ([`KIND_LEAF`] or [`KIND_INTERNAL`]); the word 0 means "no node". Code reaches a
//! node only through [`Enode::rcu`] (a reader, borrowed for its guard) or [`Enode::locked`] (the writer,
//! borrowed for its [`Locked`] proof of the lock): the two places that turn a word back into a reference.
//!
//! Parent word (bit 63 on the left):
//!
//! ```text
//!   63 ........ 48   47 ............... 8    7         6 .. 3     2 1   0
//! [ seq (16 bits) | parent address >> 8   | WRITING | slot (4)  | tag | root ]
//! ```
//!
//! [`ROOT_PARENT`] (bit 0) for the root; `parent address | slot << PARENT_SLOT_SHIFT | PARENT_TAG` (tag `0b110`)
//! for others; the node's own address (every other bit clear) once it is dead (replaced and unpublished; freed
//! after a grace period). Node addresses are 256-byte aligned, so the low byte never reaches the address.
//!
//! **The leaf sequence count** (bits 48..63 and the `WRITING` bit 7) makes a leaf's multi-word in-place
//! stores (the slot store, the append and the node store, module `write`) a seqlock: the writer sets `WRITING` (Relaxed),
//! issues `fence(Release)`, stores the leaf's words, then stores the word with `WRITING` clear and the count
//! plus one (Release) ([`Node::write_begin`], [`Node::write_end`]). A reader loads the parent word (Acquire,
//! [`Node::read_begin`]; it waits while `WRITING` is set), loads the leaf's words, issues `fence(Acquire)`
//! and loads the parent word again ([`Node::read_check`]): dead, or `WRITING`/count changed, means the words
//! may mix two states and are read again. The count of one node never repeats during the node's life: when
//! it would wrap, the writer copies the leaf instead (a fresh node, the old one dead), so a reader can never
//! see the same count around a store (no ABA). Re-parenting ([`Node::set_parent`]) keeps the count and the
//! dead mark replaces the whole word (readers test for death first).
//!
//! The count needs the parent's address below 2^48: node addresses are user-space heap addresses, below 2^47
//! on x86-64 and arm64 Linux unless a program maps memory above it on purpose (5-level paging, explicit hint),
//! which the system allocator never does. [`Enode::new`] asserts it in debug builds, and the in-place stores
//! check it (`write::seq_usable`) and copy the leaf instead if the parent's address ever reached 2^48. `WRITING` is a
//! bit that no address sets, so a reader never waits on a word that only looks busy.

use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::sync::Arc;

use vmspace_rcu::sync::{AtomicU64, Ordering};

/// Slots in a leaf.
pub(crate) const LEAF_SLOTS: usize = 16;
/// Pivots in a leaf.
pub(crate) const LEAF_PIVOTS: usize = 15;
/// Slots (children) in an allocation-range internal node.
pub(crate) const INT_SLOTS: usize = 10;
/// Pivots in an internal node.
pub(crate) const INT_PIVOTS: usize = 9;
/// Minimum used slots of a non-root leaf (the kernel's `mt_min_slots` for range nodes).
pub(crate) const LEAF_MIN: usize = LEAF_SLOTS / 2 - 2;
/// Minimum used slots of a non-root internal node (`mt_min_slots` for arange nodes).
pub(crate) const INT_MIN: usize = INT_SLOTS / 2 - 1;
/// Maximum tree height handled. The kernel allows 31; with minimum occupancy a tree of height 20 already holds
/// more than 6 * 4^18 ranges (over 10^11, terabytes of nodes), so 20 bounds every real tree and keeps paths small.
pub(crate) const MAX_HEIGHT: usize = 20;

/// Low bits of an [`Enode`]: leaf.
const KIND_LEAF: usize = 1;
/// Low bits of an [`Enode`]: internal allocation-range node.
const KIND_INTERNAL: usize = 2;
/// The kind bits of an [`Enode`].
const KIND_MASK: usize = 3;
/// The address bits of an [`Enode`] or a parent word (nodes are 256-byte aligned).
const ADDR_MASK: usize = !0xff;

/// Parent word of the root node (bit 0 set: no parent address has it).
pub(crate) const ROOT_PARENT: u64 = 1;
/// Low bits of a non-root parent word: bit 0 clear, bits 1 and 2 set (the kernel's `MAPLE_PARENT_RANGE64`-style
/// type bits; this crate has one parent type, so they only tell a parent word from the root marker).
const PARENT_TAG: u64 = 0b110;
/// The slot in the parent is stored at this bit...
const PARENT_SLOT_SHIFT: u32 = 3;
/// ...in this many bits (4: up to 16 slots, more than [`INT_SLOTS`]), below [`PARENT_WRITING`].
const PARENT_SLOT_MASK: u64 = 0xf;
/// Parent-word bit 7: an in-place multi-word store of this leaf is in progress (see the module docs).
pub(crate) const PARENT_WRITING: u64 = 1 << 7;
const _: () = assert!(
    INT_SLOTS as u64 <= PARENT_SLOT_MASK + 1 && (PARENT_SLOT_MASK << PARENT_SLOT_SHIFT) < PARENT_WRITING
);
/// The leaf sequence count occupies the parent word's bits from here up.
const SEQ_SHIFT: u32 = 48;
/// One completed in-place store in the sequence count.
pub(crate) const SEQ_ONE: u64 = 1 << SEQ_SHIFT;
/// The sequence-count bits of a parent word.
pub(crate) const SEQ_MASK: u64 = !0 << SEQ_SHIFT;
/// The bits of a parent word that change when an in-place store begins or ends.
const SEQ_STATE: u64 = SEQ_MASK | PARENT_WRITING;
/// Node addresses are below this (user-space heap; see the module docs), so that parent addresses never reach
/// the sequence count.
pub(crate) const ADDR_LIMIT: usize = 1 << 47;
/// The address bits of a parent word.
const PARENT_ADDR_MASK: u64 = (ADDR_MASK as u64) & !SEQ_MASK;

/// Word index of leaf slot 0.
pub(crate) const LEAF_SLOT_BASE: usize = LEAF_PIVOTS;
/// Word index of internal child 0.
pub(crate) const INT_SLOT_BASE: usize = INT_PIVOTS;
/// Word index of internal gap 0.
pub(crate) const INT_GAP_BASE: usize = INT_SLOT_BASE + INT_SLOTS;
/// Word index of the internal metadata.
pub(crate) const INT_META: usize = INT_GAP_BASE + INT_SLOTS;

/// An encoded node pointer (the kernel's `maple_enode`): the node's address with its kind in the low bits
/// ([`Enode::is_leaf`]). Never 0: "no node" (an empty tree's root word, an unused slot) is `None`.
///
/// # Dereferencing
///
/// An `Enode` is made only from a tree's root or child word ([`Enode::from_word`]) or from a fresh allocation
/// ([`Enode::new`]), and it is dereferenced only through one of two accessors whose borrow lasts as long as what
/// keeps the node allocated (the kernel's `mas_slot` and `mas_slot_locked`):
///
/// * [`Enode::rcu`] for a reader, borrowed for its RCU guard: the reader loaded the word under that guard, and
///   a node is freed only a grace period after it became unreachable, so it stays allocated until the guard is
///   dropped (it may die meanwhile; readers check that, see the crate docs, "Dead nodes");
/// * [`Enode::locked`] for the writer, borrowed for its [`Locked`] proof of the writer lock: under the lock every
///   node reachable from the root is live, a fresh node is the writer's own, and the writer frees or retires a
///   node (through the `unsafe` functions of [`Counters`] and `write::retire`) only after its last use.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Enode(NonZeroUsize);

/// One level of a walk from the root (the part of the kernel's `ma_state` a walk keeps per depth): node `e`,
/// the range `[min, max]` it covers, and the offset `off` of the slot the walk followed or stopped at. The one
/// path-level type of the crate: the writer's paths (module `write`, the write cursor), the read cursor's
/// cached path and every reader's descent (module `read`) use it.
///
/// `seq` is meaningful only at a leaf reached by a lock-free reader: the leaf's parent word when the reader
/// read it ([`Node::read_begin`]), which a cursor's cached steps check again ([`Node::read_check`]). The
/// writer, which reads under the lock, leaves it 0.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Level {
    pub(crate) e: Enode,
    pub(crate) min: u64,
    pub(crate) max: u64,
    pub(crate) off: usize,
    pub(crate) seq: u64,
}

impl Level {
    /// The root level: node `e` covers the whole key space.
    #[inline(always)]
    pub(crate) fn root(e: Enode) -> Level {
        Level { e, min: 0, max: u64::MAX, off: 0, seq: 0 }
    }

    /// Node `e` covering `[min, max]`, not yet scanned.
    #[inline(always)]
    pub(crate) fn at(e: Enode, min: u64, max: u64) -> Level {
        Level { e, min, max, off: 0, seq: 0 }
    }
}

/// Proof that the tree's writer lock is held for `'w` (see [`Enode::locked`]); made by `Writer::locked` and
/// `Writer::parts` (and by unit tests, for nodes they allocated and own).
#[derive(Clone, Copy)]
pub(crate) struct Locked<'w>(PhantomData<&'w ()>);

impl Locked<'_> {
    /// The proof for a writer lock the caller holds for the proof's lifetime (or for nodes it owns outright).
    pub(crate) fn new() -> Self {
        Locked(PhantomData)
    }
}

impl Enode {
    /// Encodes node address `addr` (from the allocator: non-zero, 256-byte aligned) as a leaf or internal node.
    #[inline]
    pub(crate) fn new(addr: usize, leaf: bool) -> Enode {
        debug_assert!(addr != 0 && addr & !ADDR_MASK == 0);
        // The leaf sequence count (bits 48..63 of a child's parent word) needs parent addresses below 2^48;
        // `write::seq_usable` re-checks it before every in-place store (see the module docs).
        debug_assert!(addr < ADDR_LIMIT, "maple: node address {addr:#x} above 2^47");
        let kind = if leaf { KIND_LEAF } else { KIND_INTERNAL };
        Enode(NonZeroUsize::new(addr | kind).unwrap_or(NonZeroUsize::MIN))
    }

    /// Decodes a root or child word (0: no node).
    #[inline(always)]
    pub(crate) fn from_word(w: u64) -> Option<Enode> {
        NonZeroUsize::new(w as usize).map(Enode)
    }

    /// The word stored in a root or child slot.
    #[inline(always)]
    pub(crate) fn word(self) -> u64 {
        self.0.get() as u64
    }

    /// The word of an optional node (0 = none).
    #[inline(always)]
    pub(crate) fn word_of(e: Option<Enode>) -> u64 {
        e.map_or(0, Enode::word)
    }

    /// True for a leaf, false for an internal node.
    #[inline(always)]
    pub(crate) fn is_leaf(self) -> bool {
        self.0.get() & KIND_MASK == KIND_LEAF
    }

    /// The node's address (what the allocator handed out).
    #[inline(always)]
    pub(crate) fn addr(self) -> usize {
        self.0.get() & ADDR_MASK
    }

    /// True if the kind bits name a node kind (validation).
    pub(crate) fn kind_is_valid(self) -> bool {
        matches!(self.0.get() & 0xff, KIND_LEAF | KIND_INTERNAL)
    }

    /// A node of this one's kind at `addr` (a copy of it).
    #[inline]
    pub(crate) fn same_kind_at(self, addr: usize) -> Enode {
        Enode::new(addr, self.is_leaf())
    }

    /// The node, for a reader: borrowed for as long as the guard under which the reader loaded this pointer (see
    /// the type docs).
    #[inline(always)]
    pub(crate) fn rcu(self, _guard: &vmspace_rcu::Guard) -> &Node {
        // SAFETY: the type docs: a node read under `_guard` is freed only after the guard is dropped.
        unsafe { self.deref() }
    }

    /// The node, for the writer: borrowed for as long as the writer lock (see the type docs).
    #[inline(always)]
    pub(crate) fn locked<'w>(self, _lock: Locked<'w>) -> &'w Node {
        // SAFETY: the type docs: under the writer lock a reachable or fresh node is freed only by the writer,
        // after its last use.
        unsafe { self.deref() }
    }

    /// # Safety
    ///
    /// The node is allocated for `'a`.
    #[inline(always)]
    unsafe fn deref<'a>(self) -> &'a Node {
        let p = std::ptr::with_exposed_provenance::<Node>(self.addr());
        // SAFETY: the caller's contract; the allocator exposed the address's provenance (the slab when it maps a
        // chunk; under loom, the per-node `Box`).
        let n = unsafe { &*p };
        #[cfg(loom)]
        assert!(!n.freed.load(Ordering::Relaxed), "maple: access to a reclaimed node");
        n
    }
}

/// One 256-byte tree node. See the module docs for the layout.
#[repr(C, align(256))]
pub(crate) struct Node {
    parent: AtomicU64,
    w: [AtomicU64; 31],
    /// Loom builds only: set instead of freeing, so that a reader touching a reclaimed node fails the model.
    #[cfg(loom)]
    freed: vmspace_rcu::sync::AtomicBool,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Node>() == 256 && std::mem::align_of::<Node>() == 256);
const _: () =
    assert!(usize::BITS == 64, "the maple tree stores u64 pivots and usize slots in the same words");

impl Node {
    /// A zeroed node (loom's per-node allocation; the slab's chunks are zero when mapped).
    #[cfg(loom)]
    fn zeroed() -> Self {
        Node {
            parent: AtomicU64::new(0),
            w: std::array::from_fn(|_| AtomicU64::new(0)),
            #[cfg(loom)]
            freed: vmspace_rcu::sync::AtomicBool::new(false),
        }
    }

    /// Pivot `i` (Relaxed: a reader reached this node through an Acquire load of its pointer, which orders the
    /// initialising stores; a published leaf's pivots change only inside a write section of its sequence count,
    /// which the reader's `read_begin` / `read_check` bracket; an internal node's never change in RCU mode).
    #[inline(always)]
    pub(crate) fn pivot(&self, i: usize) -> u64 {
        self.w[i].load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(crate) fn set_pivot(&self, i: usize, v: u64) {
        // Relaxed: written before publication (ordered by the publishing Release store) or in non-RCU mode.
        self.w[i].store(v, Ordering::Relaxed);
    }

    /// Leaf slot `i` (Acquire: pairs with the Release of an in-place store of the slot (exact fit, slot store,
    /// append), so a value's pointee initialisation is visible; the leaf's `read_check` orders it before its
    /// parent-word load with its own fence).
    #[inline(always)]
    pub(crate) fn leaf_slot(&self, i: usize) -> usize {
        self.w[LEAF_SLOT_BASE + i].load(Ordering::Acquire) as usize
    }

    /// Stores leaf slot `i`. Release: pairs with [`Node::leaf_slot`]'s Acquire (in-place stores on a live leaf:
    /// the exact fit's one slot, the slot store's and the append's inside their write section); before
    /// publication it is ordered anyway by the publishing store.
    #[inline(always)]
    pub(crate) fn set_leaf_slot(&self, i: usize, v: usize) {
        self.w[LEAF_SLOT_BASE + i].store(v as u64, Ordering::Release);
    }

    /// Internal slot `i`, an encoded child pointer, for a reader (Acquire: pairs with the Release store that
    /// published the child, so the child's initialised contents are visible). None for an unused slot.
    #[inline(always)]
    pub(crate) fn child(&self, i: usize) -> Option<Enode> {
        Enode::from_word(self.w[INT_SLOT_BASE + i].load(Ordering::Acquire))
    }

    /// Internal slot `i`, known to be used, for a reader's descent (Acquire, as [`Node::child`]). Unlike
    /// [`Node::child`] it checks nothing: the lookups' hot loop pays no test for a case that cannot happen.
    ///
    /// # Safety
    ///
    /// `i` is at or before the node's end, as the slot [`Node::scan`] finds in any node a reader can reach (live,
    /// or dead and frozen as it was: pivots of published nodes never change), and every used slot of an internal
    /// node holds a child (a child slot is only ever overwritten with another child).
    #[inline(always)]
    pub(crate) unsafe fn used_child(&self, i: usize) -> Enode {
        let w = self.w[INT_SLOT_BASE + i].load(Ordering::Acquire) as usize;
        debug_assert!(w != 0, "maple: a used internal slot without a child");
        // SAFETY: the caller's contract: a used slot holds a child, whose word is non-zero.
        Enode(unsafe { NonZeroUsize::new_unchecked(w) })
    }

    /// Internal slot `i` for the writer, which reads only its own stores (Relaxed; the kernel's
    /// `mas_slot_locked`). Every used slot of an internal node holds a child.
    #[inline(always)]
    pub(crate) fn child_locked(&self, i: usize) -> Enode {
        let c = Enode::from_word(self.w[INT_SLOT_BASE + i].load(Ordering::Relaxed));
        c.expect("maple: a used internal slot holds a child")
    }

    /// Publishes child `i` (Release: the child's contents happen-before any reader that loads the pointer).
    #[inline(always)]
    pub(crate) fn set_child(&self, i: usize, e: Enode) {
        self.w[INT_SLOT_BASE + i].store(e.word(), Ordering::Release);
    }

    /// Leaf slot `i` for the writer (Relaxed: the writer reads its own stores).
    #[inline(always)]
    pub(crate) fn leaf_slot_locked(&self, i: usize) -> usize {
        self.w[LEAF_SLOT_BASE + i].load(Ordering::Relaxed) as usize
    }

    /// Max gap recorded for child `i` (Relaxed: gaps are hints for the gap search; a concurrent lock-free
    /// search tolerates a stale value, the writer reads its own stores).
    #[inline(always)]
    pub(crate) fn gap(&self, i: usize) -> u64 {
        self.w[INT_GAP_BASE + i].load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn set_gap(&self, i: usize, g: u64) {
        // Relaxed: see `gap`.
        self.w[INT_GAP_BASE + i].store(g, Ordering::Relaxed);
    }

    /// Internal-node metadata: (end, offset of the largest gap).
    #[inline]
    pub(crate) fn meta(&self) -> (usize, usize) {
        // Relaxed: written by the writer only; readers do not use it.
        let m = self.w[INT_META].load(Ordering::Relaxed);
        ((m & 0xff) as usize, ((m >> 8) & 0xff) as usize)
    }

    #[inline]
    pub(crate) fn set_meta(&self, end: usize, gap_off: usize) {
        // Relaxed: writer-only field.
        self.w[INT_META].store(end as u64 | (gap_off as u64) << 8, Ordering::Relaxed);
    }

    /// Raw word `i` (for dump/validate/copy).
    #[inline]
    pub(crate) fn word(&self, i: usize) -> u64 {
        // Relaxed: used by the writer (its own stores) and by dup under the writer lock.
        self.w[i].load(Ordering::Relaxed)
    }

    /// Copies the 31 words after the parent word (pivots, slots, metadata) of `src` into `self`, with 16-byte
    /// moves rather than 31 pairs of atomic loads and stores (dup's copy of a node). Not through `memcpy`: for
    /// 248 bytes glibc's `rep movsb` path costs more than the copy itself.
    ///
    /// `self` must be unpublished (no other thread can reach it) and `src` must not change meanwhile (the
    /// caller holds the writer lock of `src`'s tree). Lock-free readers may read `src` concurrently: reads do
    /// not conflict with reads, so the non-atomic read of `src` is not a data race.
    #[inline]
    pub(crate) fn copy_words_from(&self, src: &Node) {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
            let (s, d) = (src.w.as_ptr().cast::<u64>(), self.w.as_ptr() as *mut u64);
            // SAFETY: both arrays are 31 `AtomicU64`s (the size and alignment of `u64`, with interior
            // mutability, so writing through a pointer derived from `&self` is allowed); words 0..30 are read
            // and written in 15 unaligned 16-byte pairs and word 30 alone, all inside the arrays, which do not
            // overlap (`self` is a fresh node, not `src`). No other thread writes `src` (the writer lock) or
            // accesses `self` (unpublished), so no access here races with a write. SSE2 is part of x86-64.
            unsafe {
                for i in (0..30).step_by(2) {
                    _mm_storeu_si128(d.add(i).cast::<__m128i>(), _mm_loadu_si128(s.add(i).cast::<__m128i>()));
                }
                d.add(30).write(s.add(30).read());
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        for i in 0..self.w.len() {
            self.set_word(i, src.word(i));
        }
    }

    #[inline]
    pub(crate) fn set_word(&self, i: usize, v: u64) {
        // Relaxed: only on unpublished nodes.
        self.w[i].store(v, Ordering::Relaxed);
    }

    /// The parent word.
    #[inline]
    pub(crate) fn parent_word(&self) -> u64 {
        // Relaxed: used by the writer (its own stores) and validate; readers use `read_begin` / `read_check`.
        self.parent.load(Ordering::Relaxed)
    }

    /// Sets the parent word of a node to (parent, slot) or [`ROOT_PARENT`], keeping its sequence count (a live
    /// leaf being re-parented keeps counting; see the module docs).
    #[inline]
    pub(crate) fn set_parent(&self, parent: Option<(Enode, usize)>) {
        let base = match parent {
            None => ROOT_PARENT,
            Some((p, slot)) => p.addr() as u64 | (slot as u64) << PARENT_SLOT_SHIFT | PARENT_TAG,
        };
        // Relaxed: the writer reads its own stores.
        let old = self.parent.load(Ordering::Relaxed);
        debug_assert!(old & PARENT_WRITING == 0 || old == self.dead_word(), "maple: re-parenting mid-store");
        // A dead or never-used node's word is its address, whose bits 48.. are clear (`ADDR_LIMIT`): a fresh node
        // starts counting from 0; a parent address at or above 2^48 gets no count and no in-place store (`write::seq_usable`).
        let seq = if base & SEQ_MASK == 0 { old & SEQ_MASK } else { 0 };
        // Relaxed: readers compare the parent word with the node's own address (no live node's word equals it)
        // and compare only the sequence bits, which this store keeps: any value they read of a re-parenting
        // store is "alive and unchanged", which is true.
        self.parent.store(base | seq, Ordering::Relaxed);
    }

    /// Sets the parent word of a fresh node (a copy made by `dup`) to (parent, slot) or [`ROOT_PARENT`], with the
    /// sequence count at 0 (a recycled node's stale word may hold the count of its earlier life).
    #[inline]
    pub(crate) fn init_parent(&self, parent: Option<(Enode, usize)>) {
        self.clear_seq();
        self.set_parent(parent);
    }

    /// Clears the sequence count of a node no reader can see (fresh, or rewritten in non-RCU mode): see
    /// [`Node::init_parent`].
    #[inline]
    pub(crate) fn clear_seq(&self) {
        // Relaxed: the node is unpublished or the tree has no readers (non-RCU mode).
        let w = self.parent.load(Ordering::Relaxed);
        self.parent.store(w & !SEQ_STATE, Ordering::Relaxed);
    }

    /// Decodes a non-root parent word into (parent address, slot); None for the root marker or a dead node.
    #[inline]
    pub(crate) fn decode_parent(w: u64) -> Option<(usize, usize)> {
        if w & ROOT_PARENT == 0 && w & PARENT_TAG == PARENT_TAG {
            Some(((w & PARENT_ADDR_MASK) as usize, ((w >> PARENT_SLOT_SHIFT) & PARENT_SLOT_MASK) as usize))
        } else {
            None
        }
    }

    /// True if parent word `w` is the root marker (with any sequence count).
    #[inline]
    pub(crate) fn is_root_word(w: u64) -> bool {
        w & !SEQ_MASK == ROOT_PARENT
    }

    /// The sequence count of parent word `w` (validation, tests).
    #[inline]
    pub(crate) fn seq_of(w: u64) -> u64 {
        w >> SEQ_SHIFT
    }

    /// This node's address, as its parent word holds it once the node is dead.
    #[inline(always)]
    fn dead_word(&self) -> u64 {
        (self as *const Node).addr() as u64
    }

    /// Marks this (already unpublished) node dead: parent = self.
    #[inline]
    pub(crate) fn mark_dead(&self) {
        // Release: the store that unpublished this node (program-order earlier) happens-before any reader that
        // sees the node dead and then (after its Acquire fence in `read::alive` / `read::leaf_check`) re-reads
        // the root.
        self.parent.store(self.dead_word(), Ordering::Release);
    }

    /// True if the node was replaced. Call after loading the fields you want to trust and an Acquire fence
    /// (`fence(Acquire)` orders those loads before this one; pairs with nothing by itself).
    #[inline(always)]
    pub(crate) fn is_dead(&self) -> bool {
        // Relaxed: ordering comes from the caller's fences (see the crate docs, "dead nodes").
        self.parent.load(Ordering::Relaxed) == self.dead_word()
    }

    /// Reader, before loading a leaf's words (the seqlock's read begin): the parent word to hand to
    /// [`Node::read_check`], or None if the node is dead (after an Acquire load of the dead mark: the caller
    /// restarts and sees the replacement). Waits while an in-place store is in progress (a few stores by a
    /// writer that holds no lock a reader needs and allocates nothing).
    #[inline(always)]
    pub(crate) fn read_begin(&self) -> Option<u64> {
        loop {
            // Acquire: pairs with the Release store of `write_end` (the words of every completed in-place store
            // are visible to the loads that follow) and with the Release dead mark (`mark_dead`).
            let w = self.parent.load(Ordering::Acquire);
            if w & PARENT_WRITING == 0 {
                return if w == self.dead_word() { None } else { Some(w) };
            }
            vmspace_rcu::sync::spin_loop();
        }
    }

    /// Reader, after loading a leaf's words (the seqlock's read retry, combined with the dead check): were they
    /// one state of the live leaf, the one current when [`Node::read_begin`] returned `begin`?
    #[inline(always)]
    pub(crate) fn read_check(&self, begin: u64) -> LeafRead {
        // Acquire fence: the word loads before it happen before the parent-word load below; if one of them
        // read a store of an in-place store that began later, that store's `WRITING` store (ordered before its
        // data stores by the writer's Release fence) is visible to the load below.
        vmspace_rcu::sync::fence(Ordering::Acquire);
        // Relaxed: ordered by the fence above.
        let w = self.parent.load(Ordering::Relaxed);
        if w == self.dead_word() {
            // Acquire: pairs with the writer's Release dead mark (and so with its earlier publication).
            vmspace_rcu::sync::fence(Ordering::Acquire);
            return LeafRead::Dead;
        }
        if (w ^ begin) & SEQ_STATE != 0 {
            return LeafRead::Changed;
        }
        LeafRead::Current
    }

    /// Writer: begins an in-place multi-word store of this live leaf (the seqlock's write begin); returns the
    /// word to hand to [`Node::write_end`]. The caller checked [`Node::seq_has_room`].
    #[inline]
    pub(crate) fn write_begin(&self) -> u64 {
        // Relaxed: the writer reads its own stores.
        let w = self.parent.load(Ordering::Relaxed);
        debug_assert!(w & PARENT_WRITING == 0 && w & SEQ_MASK != SEQ_MASK);
        // Relaxed, then the Release fence: the fence orders this store before every data store that follows,
        // so a reader whose load reads one of those data stores sees this bit or a later count in
        // `read_check` (pairs with its Acquire fence).
        self.parent.store(w | PARENT_WRITING, Ordering::Relaxed);
        vmspace_rcu::sync::fence(Ordering::Release);
        w
    }

    /// Writer: ends the in-place store begun by [`Node::write_begin`] (which returned `w`): `WRITING` clear, count
    /// plus one. Release: pairs with [`Node::read_begin`]'s Acquire load, so a reader that begins after this
    /// sees every word the store wrote.
    #[inline]
    pub(crate) fn write_end(&self, w: u64) {
        self.parent.store(w + SEQ_ONE, Ordering::Release);
    }

    /// True if the leaf's sequence count can take one more in-place store without wrapping (a leaf at the last
    /// count is copied instead, see the module docs).
    #[inline]
    pub(crate) fn seq_has_room(&self) -> bool {
        self.parent_word() & SEQ_MASK != SEQ_MASK
    }

    /// Stores pivot `i` of a live leaf inside an in-place store (between [`Node::write_begin`] and
    /// [`Node::write_end`]). Relaxed: the seqlock's fences and Release store order it for readers.
    #[inline]
    pub(crate) fn set_pivot_live(&self, i: usize, v: u64) {
        self.w[i].store(v, Ordering::Relaxed);
    }

    /// First slot whose pivot is `>= index` (or `np`, the slot with the implied pivot): the slot holding `index`.
    #[inline(always)]
    pub(crate) fn scan(&self, np: usize, index: u64) -> usize {
        let mut i = 0;
        while i < np && self.pivot(i) < index {
            i += 1;
        }
        i
    }

    /// First index of slot `i` of this node, whose minimum is `min`.
    #[inline(always)]
    pub(crate) fn slot_first(&self, i: usize, min: u64) -> u64 {
        // Wrapping: a reader may compute this from words torn by an in-place store, which `read_check` then
        // rejects; a valid state never wraps (the pivot before a used slot is below the node's max).
        if i == 0 { min } else { self.pivot(i - 1).wrapping_add(1) }
    }

    /// Last index of slot `i` of this node (`np` pivots), whose maximum is `max`.
    #[inline(always)]
    pub(crate) fn slot_last(&self, np: usize, i: usize, max: u64) -> u64 {
        if i < np { self.pivot(i) } else { max }
    }

    /// Leaf: end (last used slot) given the node maximum.
    #[inline(always)]
    pub(crate) fn end(&self, np: usize, max: u64) -> usize {
        let mut i = 0;
        while i < np {
            if self.pivot(i) >= max {
                return i;
            }
            i += 1;
        }
        np
    }
}

/// What a reader's [`Node::read_check`] found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum LeafRead {
    /// The words read form the leaf's state current at `read_begin`; the leaf was alive after the loads.
    Current,
    /// The leaf is dead: restart from the root (or re-walk to the saved index).
    Dead,
    /// An in-place store ran meanwhile: read the leaf again.
    Changed,
}

/// Pivots of a leaf (`leaf`) or internal node.
#[inline(always)]
pub(crate) fn pivots(leaf: bool) -> usize {
    if leaf { LEAF_PIVOTS } else { INT_PIVOTS }
}

/// The largest batch a stash takes at a time (see [`Counters::alloc_stashed`]).
#[cfg(not(loom))]
const STASH_REFILL: usize = 256;
/// Under loom every node is a model object: refill one at a time.
#[cfg(loom)]
const STASH_REFILL: usize = 1;

/// Nodes taken from a domain in batches for a run of allocations (`dup`, `reserve`), counted as allocated
/// when taken; give the rest back with [`Counters::return_stash`].
pub(crate) struct Stash {
    nodes: Vec<usize>,
    /// Size of the next refill.
    refill: usize,
}

impl Stash {
    /// A stash for an unknown number of allocations (refills double from 4).
    pub(crate) fn new() -> Self {
        Stash { nodes: spare::take(), refill: 4.min(STASH_REFILL) }
    }

    /// A stash for about `n` allocations: the first refill takes that many (up to the largest batch).
    pub(crate) fn for_count(n: usize) -> Self {
        Stash { nodes: spare::take(), refill: n.clamp(1, STASH_REFILL) }
    }
}

/// The thread's spare stash vector: a stash borrows it and [`Counters::return_stash`] puts it back empty, so that
/// a small `dup` (a few nodes) does not pay a `malloc` and a `free` for its list of stashed nodes.
mod spare {
    #[cfg(not(loom))]
    std::thread_local! {
        static SPARE: std::cell::Cell<Vec<usize>> = const { std::cell::Cell::new(Vec::new()) };
    }

    /// Capacity above which a returned vector is dropped instead of kept (a huge dup's list).
    #[cfg(not(loom))]
    const KEEP: usize = 4096;

    /// The spare vector (empty), or a new one.
    #[inline]
    pub(super) fn take() -> Vec<usize> {
        #[cfg(not(loom))]
        {
            SPARE.try_with(std::cell::Cell::take).unwrap_or_default()
        }
        #[cfg(loom)]
        Vec::new()
    }

    /// Keeps `v` (emptied) as the spare unless it is too large.
    #[inline]
    pub(super) fn give(mut v: Vec<usize>) {
        v.clear();
        #[cfg(not(loom))]
        if v.capacity() <= KEEP {
            // A thread being torn down drops it instead.
            let _ = SPARE.try_with(|s| s.set(v));
        }
    }
}

/// Retired nodes a writer batches before handing them to RCU in one deferred call and starting a grace period
/// (loom: 1, so that every model exercises the grace period).
///
/// Each grace period costs the writer a `membarrier(PRIVATE_EXPEDITED)`, which interrupts every CPU running one
/// of the process's threads and waits for it: cheap when the writer runs alone, several microseconds when a
/// reader thread is running on the other CPU (measured through the batch size: at 32 nodes per batch a writer
/// beside a reader lost about 370 ns per unmap+map more than at 128). 512 nodes (128 KiB, about 256 churn
/// operations) amortise it to a few ns per operation while the recycled nodes still fit in the L2 cache.
#[cfg(not(loom))]
pub(crate) const RETIRE_BATCH: usize = 512;
#[cfg(loom)]
pub(crate) const RETIRE_BATCH: usize = 1;

/// One allocation domain: node counters and failure injection, shared (Arc) by a tree, the trees `dup` made
/// from it, and the deferred frees, so that nodes freed after a grace period are still counted. The memory
/// itself comes from the process's node slab (module `slab`: per-thread magazines in front of a shared depot
/// of 2 MiB chunks); a domain owns no memory of its own, only the nodes it has handed out.
///
/// Accounting: `allocated` counts nodes handed out (fresh or recycled), `released` nodes the domain's trees
/// gave up (freed at once, or retired to wait for a grace period), `freed` nodes whose memory went back (to
/// the slab). Nodes waiting for their grace period are `released - freed`. A deferred free only moves `freed`,
/// so `allocated - released` (what the trees own) never changes under a reader of the counters when a grace
/// period ends; and because `freed` is incremented with Release after the matching `released` increment, a
/// reader that loads `freed` (Acquire) before `released` always sees `freed <= released`.
pub(crate) struct Counters {
    pub(crate) allocated: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) freed: AtomicU64,
    /// 0 = no injection; n = the n-th allocation from now fails (then injection switches off).
    pub(crate) fail_countdown: AtomicU64,
}

impl Counters {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Counters {
            allocated: AtomicU64::new(0),
            released: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            fail_countdown: AtomicU64::new(0),
        })
    }

    /// Takes the injection decision. `false` = this allocation must fail.
    #[inline]
    fn injection_allows(&self) -> bool {
        // Relaxed: a test knob, changed only by the allocating writer (a load and a store, not a locked
        // read-modify-write: see `alloc_stashed`).
        let c = self.fail_countdown.load(Ordering::Relaxed);
        if c != 0 {
            self.fail_countdown.store(c - 1, Ordering::Relaxed);
            if c == 1 {
                return false;
            }
        }
        true
    }

    /// Allocates one node, honouring failure injection. `None` = ENOMEM (injected, or the system has no memory
    /// for a new slab chunk; nothing is counted then). A recycled node's words are stale: every caller writes
    /// every word (`fill_node`, `dup`) and the parent word before publishing it.
    pub(crate) fn alloc(&self) -> Option<usize> {
        if !self.injection_allows() {
            return None;
        }
        let a = mem::alloc()?;
        // Relaxed: statistics.
        self.allocated.fetch_add(1, Ordering::Relaxed);
        Some(a)
    }

    /// Allocates like [`Counters::alloc`] from `stash`, which is refilled in batches (one bulk allocation from
    /// the slab: the thread's magazine, the rest from the depot in one step) that double from 4 to 256 nodes,
    /// so that a small copy takes few; for `dup` and `reserve`, which allocate many nodes in a row. Return the
    /// stash with [`Counters::return_stash`].
    ///
    /// A refill counts its nodes as allocated at once and `return_stash` takes back what was not used: one
    /// locked read-modify-write per batch instead of one per node. That matters: on x86 a locked instruction
    /// waits for the store buffer to drain, so a per-node increment would stall the copy behind the cache
    /// misses of the previous node's stores.
    pub(crate) fn alloc_stashed(&self, stash: &mut Stash) -> Option<usize> {
        if !self.injection_allows() {
            return None;
        }
        if stash.nodes.is_empty() {
            let want = stash.refill;
            if !mem::alloc_bulk(want, &mut stash.nodes) {
                return None;
            }
            stash.refill = (want * 2).min(STASH_REFILL);
            // Relaxed: statistics (counted before any of these nodes can be freed, so `allocated` never lags).
            self.allocated.fetch_add(want as u64, Ordering::Relaxed);
        }
        stash.nodes.pop()
    }

    /// Puts unused stashed nodes back and uncounts them (see [`Counters::alloc_stashed`]).
    pub(crate) fn return_stash(&self, stash: Stash) {
        let stash = stash.nodes;
        if !stash.is_empty() {
            // Relaxed: statistics.
            self.allocated.fetch_sub(stash.len() as u64, Ordering::Relaxed);
            // SAFETY: stashed nodes were never handed out: owned here and unreachable.
            unsafe { mem::free_bulk(&stash) };
        }
        spare::give(stash);
    }

    /// Frees many unreachable nodes in one step.
    ///
    /// # Safety
    ///
    /// As [`Counters::free_now`], for every node.
    pub(crate) unsafe fn free_many(&self, nodes: Vec<usize>) {
        // Relaxed: statistics; ordered before the Release increment of `freed` below.
        self.released.fetch_add(nodes.len() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract; the nodes are now counted as released.
        unsafe { self.free_released(nodes) };
    }

    /// Frees nodes already counted in `released` (retired nodes after their grace period, or when their tree
    /// is dropped).
    ///
    /// # Safety
    ///
    /// As [`Counters::free_now`], for every node.
    pub(crate) unsafe fn free_released(&self, nodes: Vec<usize>) {
        if nodes.is_empty() {
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { mem::free_bulk(&nodes) };
        // Release: pairs with the Acquire load in the tree's `stats`, so that a reader seeing this count also
        // sees the `released` increment of these nodes (freed <= released).
        self.freed.fetch_add(nodes.len() as u64, Ordering::Release);
    }

    /// Frees a node no reader can reach (never published, non-RCU mode, or after its grace period).
    ///
    /// # Safety
    ///
    /// `a` came from [`Counters::alloc`] and is freed once; no reference to it is used afterwards.
    pub(crate) unsafe fn free_now(&self, a: usize) {
        // Relaxed: statistics; ordered before the Release increment of `freed` below.
        self.released.fetch_add(1, Ordering::Relaxed);
        // Release: as in `free_released`.
        self.freed.fetch_add(1, Ordering::Release);
        // SAFETY: the caller's contract.
        unsafe { mem::free(a) };
    }

    /// Hands a batch of retired (unpublished, dead) nodes to RCU: they are freed after a grace period.
    ///
    /// # Safety
    ///
    /// Every address came from [`Counters::alloc`], has been unpublished and marked dead, and is retired once;
    /// each was counted in `released` when it was retired.
    pub(crate) unsafe fn retire_batch(self: &Arc<Self>, batch: Vec<usize>, guard: &vmspace_rcu::Guard) {
        if batch.is_empty() {
            return;
        }
        let c = Arc::clone(self);
        guard.defer(move || {
            // SAFETY: every guard that could have reached the nodes is gone (grace period); retired once, and
            // counted in `released` by `retire`.
            unsafe { c.free_released(batch) };
        });
    }
}

/// Node memory: the process's node slab (module `slab`).
#[cfg(not(loom))]
mod mem {
    pub(super) use crate::slab::{alloc, alloc_bulk, free, free_bulk};
}

/// Node memory under loom: one model object per node, never reused. A freed node is only marked, so that a
/// reader touching it after its grace period trips the assertion in `Enode::deref` (reuse would hide that).
#[cfg(loom)]
mod mem {
    use super::{Node, Ordering};

    /// A fresh, zeroed node, its address exposed so that `Enode`s can be turned back into references.
    pub(super) fn alloc() -> Option<usize> {
        Some(Box::into_raw(Box::new(Node::zeroed())).expose_provenance())
    }

    pub(super) fn alloc_bulk(n: usize, out: &mut Vec<usize>) -> bool {
        out.extend((0..n).filter_map(|_| alloc()));
        true
    }

    /// Marks a node freed (its memory is kept for the rest of the model execution).
    ///
    /// # Safety
    ///
    /// `a` came from [`alloc`] and is freed once.
    pub(super) unsafe fn free(a: usize) {
        // SAFETY: the node is still allocated (never freed under loom).
        let n = unsafe { &*std::ptr::with_exposed_provenance::<Node>(a) };
        // Relaxed: pairs with nothing; a reader may load the mark only if the grace period (which loom orders
        // through the reclamation model's own synchronisation) failed to cover its access, which is the bug the
        // assertion reports.
        n.freed.store(true, Ordering::Relaxed);
    }

    /// # Safety
    ///
    /// As [`free`], for every node.
    pub(super) unsafe fn free_bulk(nodes: &[usize]) {
        for &a in nodes {
            // SAFETY: the caller's contract.
            unsafe { free(a) };
        }
    }
}

/// Size in keys of `[s, e]`, saturating at `u64::MAX` (the whole key space).
#[inline]
pub(crate) fn range_size(s: u64, e: u64) -> u64 {
    (e - s).saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_256_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 256);
        assert_eq!(std::mem::align_of::<Node>(), 256);
        assert_eq!(LEAF_SLOT_BASE + LEAF_SLOTS, 31);
        const { assert!(INT_META < 31) };
    }

    #[test]
    fn enode_and_parent_encoding() {
        let c = Counters::new();
        let a = c.alloc().unwrap();
        let b = c.alloc().unwrap();
        assert_eq!(a & 0xff, 0);
        let e = Enode::new(a, false);
        assert!(!e.is_leaf());
        assert!(Enode::new(b, true).is_leaf());
        assert_eq!(e.addr(), a);
        assert_eq!(Enode::from_word(e.word()), Some(e));
        assert_eq!(Enode::from_word(0), None);
        // Both nodes are fresh and ours: the proof stands for that here.
        let nb = Enode::new(b, true).locked(Locked::new());
        nb.set_parent(Some((e, 7)));
        assert_eq!(Node::decode_parent(nb.parent_word()), Some((a, 7)));
        nb.set_parent(Some((e, INT_SLOTS - 1)));
        assert_eq!(Node::decode_parent(nb.parent_word()), Some((a, INT_SLOTS - 1)));
        nb.set_parent(None);
        assert_eq!(nb.parent_word(), ROOT_PARENT);
        assert_eq!(Node::decode_parent(nb.parent_word()), None);
        assert!(!nb.is_dead());
        nb.mark_dead();
        assert!(nb.is_dead());
        assert_eq!(Node::decode_parent(nb.parent_word()), None);
        // SAFETY: both nodes are ours and unpublished.
        unsafe {
            c.free_now(a);
            c.free_now(b);
        }
        assert_eq!(c.allocated.load(Ordering::Relaxed), 2);
        assert_eq!(c.freed.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn end_from_pivots() {
        let c = Counters::new();
        let a = c.alloc().unwrap();
        // Our own unpublished node.
        let n = Enode::new(a, true).locked(Locked::new());
        n.set_pivot(0, 10);
        n.set_pivot(1, 20);
        n.set_pivot(2, 99);
        assert_eq!(n.end(LEAF_PIVOTS, 99), 2);
        for i in 0..LEAF_PIVOTS {
            n.set_pivot(i, i as u64 * 10);
        }
        assert_eq!(n.end(LEAF_PIVOTS, 1000), LEAF_PIVOTS);
        // SAFETY: as above.
        unsafe { c.free_now(a) };
    }

    #[test]
    fn injection_fails_once() {
        let c = Counters::new();
        c.fail_countdown.store(2, Ordering::Relaxed);
        let a = c.alloc().unwrap();
        assert!(c.alloc().is_none());
        let b = c.alloc().unwrap();
        // SAFETY: ours.
        unsafe {
            c.free_now(a);
            c.free_now(b);
        }
    }
}
