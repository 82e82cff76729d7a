//! The node slab: where every maple node's memory comes from (the kernel's `kmem_cache` for maple nodes,
//! `maple_node_cache` in `lib/maple_tree.c`, served by SLUB: `mm/slub.c`).
//!
//! # Why
//!
//! A node is 256 bytes and 256-byte aligned. Taken one at a time from the system allocator that is an aligned
//! `malloc` (`posix_memalign`), whose split-and-return path fragments glibc's heap: with many trees alive (fork,
//! the `dup` benchmark) about 45% of a copy's instructions were in `_int_malloc`, `_int_free`, `_int_memalign`
//! and `malloc_consolidate` (callgrind, before the slab; BENCHMARKS.md at commit 595bad7, "Range trees"). The
//! slab carves nodes from large aligned chunks instead and keeps freed nodes on per-thread lists, so the common
//! allocation and free are a `Vec` push or pop.
//!
//! # Algorithm
//!
//! * **Chunks.** Memory comes from the system in chunks of `1 << shift` bytes aligned to their size
//!   ([`NODE_CHUNK_SHIFT`]: 2 MiB for the process's node slab, an anonymous `mmap` marked `MADV_HUGEPAGE` so
//!   that a chunk is one huge page when transparent huge pages are on in `madvise` mode). A chunk's first slots
//!   hold its [header](Header) (a free count, its place in the depot's list, and a bitmap with one bit per slot,
//!   set = free); the other slots are nodes. The chunk of a node is its address with the low `shift` bits
//!   cleared, so freeing needs no lookup (SLUB finds the `struct slab` of an object from its page the same way).
//! * **Depot** (SLUB's per-node partial lists). Under one mutex: the list of chunks that have a free slot. Taking
//!   `n` nodes scans the bitmap of the last listed chunk (nodes of one chunk come out in address order, so a
//!   bulk allocation, as `dup` makes, writes memory sequentially) and unlists a chunk that becomes full;
//!   when no chunk has a free slot a new one is mapped. Giving nodes back sets their bits, lists a chunk that
//!   was full, and when a chunk becomes entirely free and more than `keep_empty` chunks are already entirely
//!   free, unmaps it: memory goes back to the system.
//! * **Magazines** (SLUB's per-CPU slabs). Each thread keeps a stack of free nodes ([`Magazine`]); allocation
//!   pops, free pushes, with no lock and no atomic. An empty magazine is refilled with [`MAG_REFILL`] nodes
//!   from the depot in one lock; a magazine above [`MAG_MAX`] gives its oldest half back in one lock. Bulk
//!   allocation ([`Magazine::alloc_bulk`], for `dup` and `Writer::reserve`) takes what the magazine has and the
//!   rest from the depot in one step; bulk free ([`Magazine::free_bulk`], a retired batch after its grace
//!   period, a dropped tree) fills the magazine and gives the rest to the depot in one step. A thread's
//!   magazine goes back to the depot when the thread exits.
//!
//! # Invariants
//!
//! 1. Every slot of every chunk is in exactly one state: header (never handed out), free in the depot (its bit
//!    set), in one magazine, or handed out (owned by an allocation domain: a tree's node, a reserve, a stash,
//!    or retired and waiting for its grace period). So a node is never handed out twice: the property test
//!    against a `HashSet` oracle checks it.
//! 2. A chunk's header `free` equals the number of set bits of its bitmap; a chunk is in the depot's list iff
//!    `free > 0`, and its header records its position there; `empty` counts listed chunks with every slot free.
//! 3. A chunk is unmapped only when every node slot is free in the depot: no magazine, tree or reader can hold
//!    one of its nodes. The RCU rule holds above this module: a published node reaches the slab only after its
//!    grace period (`write::retire`, `Counters::retire_batch`), so a reader never sees a recycled or unmapped node.
//! 4. Bounded memory: besides the nodes in use, the slab keeps at most `keep_empty` entirely free chunks
//!    ([`NODE_KEEP_EMPTY_BYTES`]: 16 MiB), the free slots of partly used chunks, and up to [`MAG_MAX`] nodes per
//!    thread. After a big tree is dropped its chunks go back to the system but for that bound.
//!
//! Node contents are not touched by the slab (the header lives in the chunk's own first slots, the free state in
//! bits): a new chunk is zero (fresh anonymous memory), a recycled node holds stale words that every allocator
//! caller overwrites before publication, as before the slab.
//!
//! Order of reuse: last freed, first reused (the magazine is a stack), so a churning writer reuses the nodes of
//! its own previous batch while they are still in its caches. Handing out the oldest free node first, so that a
//! writer does not write lines a reader has just read (a FIFO magazine), made no measurable difference for a
//! writer beside a reader, neither with the per-domain cache this slab replaced nor on the slab
//! (BENCHMARKS.md at commit 595bad7, "The node slab"), so the simpler stack stays.
//!
//! # Concurrency and loom
//!
//! The shared state is the depot, only under its mutex (`vmspace_rcu::sync::Mutex`); the headers are read and
//! written only under it too. Magazines are thread-local and unshared. Nothing here is lock-free. Under
//! `--cfg loom` the tree does not use the slab (every node is a separate model object, marked instead of freed,
//! so that a late access is caught); `tests/loom.rs` instead models threads exchanging nodes through one
//! [`Slab`]'s depot with their own magazines, checking that no node is handed out twice.

use std::ptr::NonNull;

use vmspace_rcu::sync::Mutex;

/// Bytes of one node slot (`Node` is 256 bytes, 256-byte aligned).
pub(crate) const SLOT: usize = 256;
const SLOT_SHIFT: u32 = 8;
const _: () = assert!(1 << SLOT_SHIFT == SLOT);

/// Chunk size (log2) of the process's node slab: 2 MiB, one huge page. Chosen by measurement against 64 KiB
/// chunks and against 2 MiB without `MADV_HUGEPAGE` (BENCHMARKS.md at commit 595bad7,
/// "The node slab").
pub const NODE_CHUNK_SHIFT: u32 = 21;
/// Entirely free chunks the process's node slab keeps (in bytes) before it returns the next one to the system.
/// The same bound as the per-domain cache of recycled nodes that the slab replaces: it absorbs the backlog of
/// retired nodes that returns at once after a long grace period (a reader preempted inside its read-side
/// section) without a round trip through `munmap` and page faults.
pub const NODE_KEEP_EMPTY_BYTES: usize = 16 << 20;

/// A magazine above this many nodes gives its oldest half back to the depot (128 KiB per thread). Larger than
/// a retired batch (`RETIRE_BATCH`, 512) so that a churning writer's batch, back from its grace period, is
/// reused from the writer's own magazine without touching the depot.
#[cfg(not(loom))]
pub(crate) const MAG_MAX: usize = 1024;
#[cfg(loom)]
pub(crate) const MAG_MAX: usize = 2;
/// Nodes an empty magazine takes from the depot at once.
#[cfg(not(loom))]
pub(crate) const MAG_REFILL: usize = 128;
#[cfg(loom)]
pub(crate) const MAG_REFILL: usize = 2;

/// Position of an unlisted (full) chunk.
const UNLISTED: u32 = u32::MAX;

/// The head of every chunk, in its first slots; read and written only under the depot's mutex. Followed by the
/// bitmap: `words` `u64`s, bit `i` set when slot `i` is free.
#[repr(C)]
struct Header {
    /// Free node slots (set bits).
    free: u32,
    /// Index in `Depot::partial`, or [`UNLISTED`].
    pos: u32,
    /// Bitmap words before this one are all zero (a search hint).
    first: u32,
    _pad: u32,
}

/// A chunk's base address, as the depot holds it (with its provenance, so that Miri sees the chunk as reachable
/// from the depot).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Chunk(NonNull<u8>);

/// The shared part of a slab. See the module docs.
struct Depot {
    /// Chunks with at least one free slot (each header's `pos` is its index here).
    partial: Vec<Chunk>,
    /// Listed chunks whose every node slot is free.
    empty: usize,
    /// Chunks mapped.
    chunks: usize,
    /// Free node slots over all chunks (in the depot; magazines not included).
    free: usize,
    /// Unit tests: this many more chunk mappings fail (the system out of memory).
    #[cfg(test)]
    fail_maps: usize,
}

impl Depot {
    const fn new() -> Depot {
        Depot {
            partial: Vec::new(),
            empty: 0,
            chunks: 0,
            free: 0,
            #[cfg(test)]
            fail_maps: 0,
        }
    }
}

// SAFETY: the depot owns its chunks' memory; it is reached only under the slab's mutex, so moving it (with the
// mutex) to another thread shares nothing unsynchronised.
unsafe impl Send for Depot {}

/// Memory held by a slab (see [`crate::slab_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlabStats {
    /// Chunks mapped.
    pub chunks: usize,
    /// Bytes mapped (chunks times the chunk size).
    pub bytes: usize,
    /// Free node slots in the depot (not counting the threads' magazines).
    pub free_nodes: usize,
    /// Chunks whose every node slot is free in the depot.
    pub empty_chunks: usize,
}

/// A slab of 256-byte node slots: chunks and the depot. See the module docs.
pub struct Slab {
    shift: u32,
    keep_empty: usize,
    depot: Mutex<Depot>,
}

impl Slab {
    /// A slab of `1 << shift`-byte chunks (at least a page) that keeps up to `keep_empty` entirely free chunks.
    #[cfg(not(loom))]
    pub const fn new(shift: u32, keep_empty: usize) -> Slab {
        assert!(shift >= 12 && shift <= 26);
        Slab { shift, keep_empty, depot: Mutex::new(Depot::new()) }
    }

    /// A slab (loom: its mutex belongs to the current model execution).
    #[cfg(loom)]
    pub fn new(shift: u32, keep_empty: usize) -> Slab {
        assert!((12..=26).contains(&shift));
        Slab { shift, keep_empty, depot: Mutex::new(Depot::new()) }
    }

    fn size(&self) -> usize {
        1 << self.shift
    }

    fn slots(&self) -> usize {
        1 << (self.shift - SLOT_SHIFT)
    }

    fn words(&self) -> usize {
        self.slots().div_ceil(64)
    }

    /// Slots taken by the header and its bitmap.
    fn header_slots(&self) -> usize {
        (size_of::<Header>() + self.words() * 8).div_ceil(SLOT)
    }

    /// Node slots per chunk.
    pub fn capacity(&self) -> usize {
        self.slots() - self.header_slots()
    }

    /// The memory this slab holds.
    pub fn stats(&self) -> SlabStats {
        let d = self.depot.lock();
        SlabStats {
            chunks: d.chunks,
            bytes: d.chunks << self.shift,
            free_nodes: d.free,
            empty_chunks: d.empty,
        }
    }

    /// The header of chunk `c`.
    ///
    /// # Safety
    ///
    /// `c` is a chunk of this slab (mapped), and the depot's mutex is held for as long as the result is used.
    #[allow(clippy::mut_from_ref)] // The depot's mutex, not `&self`, makes the access exclusive.
    unsafe fn header(&self, c: Chunk) -> &mut Header {
        // SAFETY: the caller's contract: the header was written by `map_chunk` and only the mutex holder
        // touches it (no node is ever in the header slots).
        unsafe { &mut *c.0.as_ptr().cast::<Header>() }
    }

    /// Bitmap word `i` of chunk `c`.
    ///
    /// # Safety
    ///
    /// As [`Slab::header`], and `i < self.words()`.
    #[allow(clippy::mut_from_ref)] // As in `header`.
    unsafe fn word(&self, c: Chunk, i: usize) -> &mut u64 {
        // SAFETY: the caller's contract; the bitmap follows the header inside the header slots (8-byte aligned:
        // the header is 16 bytes at a chunk-aligned base).
        unsafe { &mut *c.0.as_ptr().add(size_of::<Header>()).cast::<u64>().add(i) }
    }

    /// The chunk holding node address `a`.
    fn chunk_of(&self, a: usize) -> Chunk {
        let base = a & !(self.size() - 1);
        Chunk(
            NonNull::new(std::ptr::with_exposed_provenance_mut::<u8>(base)).expect("node address in a chunk"),
        )
    }

    /// Maps a new chunk, every node slot free, and lists it. `false` if the system has no memory.
    fn map_chunk(&self, d: &mut Depot) -> bool {
        #[cfg(test)]
        if d.fail_maps > 0 {
            d.fail_maps -= 1;
            return false;
        }
        let Some(base) = vmspace_rcu::chunk::map(self.size()) else { return false };
        // Node addresses are integers in the tree's atomic words and in the magazines; `Enode` and `chunk_of`
        // turn them back into pointers from the exposed provenance of the chunk.
        let _ = base.as_ptr().expose_provenance();
        let c = Chunk(base);
        let (hs, slots) = (self.header_slots(), self.slots());
        // SAFETY: the chunk is new, mapped, zero and ours; the mutex is held.
        let h = unsafe { self.header(c) };
        h.free = (slots - hs) as u32;
        h.pos = d.partial.len() as u32;
        h.first = (hs / 64) as u32;
        for i in 0..self.words() {
            let lo = (i * 64).max(hs);
            let hi = ((i + 1) * 64).min(slots);
            let bits = if lo >= hi { 0 } else { (u64::MAX >> (64 - (hi - lo))) << (lo - i * 64) };
            // SAFETY: `i < words`; the mutex is held.
            unsafe { *self.word(c, i) = bits };
        }
        d.partial.push(c);
        d.empty += 1;
        d.chunks += 1;
        d.free += slots - hs;
        true
    }

    /// Removes chunk `c` (at `pos`) from the list.
    fn unlist(&self, d: &mut Depot, c: Chunk, pos: usize) {
        debug_assert_eq!(d.partial[pos], c);
        d.partial.swap_remove(pos);
        if let Some(&moved) = d.partial.get(pos) {
            // SAFETY: listed chunks are mapped; the mutex is held.
            unsafe { self.header(moved).pos = pos as u32 };
        }
        // SAFETY: as above.
        unsafe { self.header(c).pos = UNLISTED };
    }

    /// Takes `n` nodes into `out` under one lock, mapping chunks as needed. `false` (and nothing added) if a
    /// chunk could not be mapped.
    pub(crate) fn take(&self, n: usize, out: &mut Vec<usize>) -> bool {
        let mut d = self.depot.lock();
        let start = out.len();
        let target = start + n;
        out.reserve(n);
        while out.len() < target {
            let Some(&c) = d.partial.last() else {
                if self.map_chunk(&mut d) {
                    continue;
                }
                let got = out.split_off(start);
                self.give_locked(&mut d, &got);
                return false;
            };
            let cap = self.capacity() as u32;
            let base = c.0.as_ptr().addr();
            // SAFETY: listed chunks are mapped; the mutex is held.
            let h = unsafe { self.header(c) };
            let was_empty = h.free == cap;
            let mut i = h.first as usize;
            let mut took = 0u32;
            while out.len() < target && took < h.free {
                // SAFETY: a chunk with free slots has a set bit at or after `first` (invariant 2), so `i` stays
                // below `words` while `took < free`; the mutex is held.
                let w = unsafe { self.word(c, i) };
                while *w != 0 && out.len() < target {
                    let b = w.trailing_zeros() as usize;
                    *w &= *w - 1;
                    out.push(base + ((i * 64 + b) << SLOT_SHIFT));
                    took += 1;
                }
                if *w == 0 {
                    i += 1;
                }
            }
            // SAFETY: as above (the `w` borrow has ended).
            let h = unsafe { self.header(c) };
            h.first = i as u32;
            h.free -= took;
            d.free -= took as usize;
            if was_empty && took > 0 {
                d.empty -= 1;
            }
            if h.free == 0 {
                let pos = h.pos as usize;
                self.unlist(&mut d, c, pos);
            }
        }
        true
    }

    /// Gives nodes back under one lock; unmaps chunks that become entirely free beyond the bound.
    ///
    /// # Safety
    ///
    /// Every address was handed out by this slab ([`Slab::take`]), is given back once, and nothing uses it
    /// afterwards (for a node that was published: its grace period has passed).
    pub(crate) unsafe fn give(&self, nodes: &[usize]) {
        if nodes.is_empty() {
            return;
        }
        let mut d = self.depot.lock();
        self.give_locked(&mut d, nodes);
    }

    fn give_locked(&self, d: &mut Depot, nodes: &[usize]) {
        let cap = self.capacity() as u32;
        for &a in nodes {
            let c = self.chunk_of(a);
            let slot = (a - c.0.as_ptr().addr()) >> SLOT_SHIFT;
            assert!(
                a & (SLOT - 1) == 0 && slot >= self.header_slots(),
                "maple slab: {a:#x} is not a node slot"
            );
            // SAFETY: `a` came from this slab (the caller's contract), so its chunk is mapped: it holds a node
            // that is not free; the mutex is held.
            let w = unsafe { self.word(c, slot / 64) };
            let bit = 1u64 << (slot % 64);
            assert!(*w & bit == 0, "maple slab: node {a:#x} freed twice");
            *w |= bit;
            // SAFETY: as above.
            let h = unsafe { self.header(c) };
            h.first = h.first.min((slot / 64) as u32);
            h.free += 1;
            d.free += 1;
            if h.free == 1 {
                h.pos = d.partial.len() as u32;
                d.partial.push(c);
            }
            if h.free == cap {
                d.empty += 1;
                if d.empty > self.keep_empty {
                    let pos = h.pos as usize;
                    self.unlist(d, c, pos);
                    d.empty -= 1;
                    d.chunks -= 1;
                    d.free -= cap as usize;
                    // SAFETY: every node slot of the chunk is free in the depot (`free == cap`): nothing holds a
                    // node of it (invariant 3), and it is no longer listed.
                    unsafe { vmspace_rcu::chunk::unmap(c.0, self.size()) };
                }
            }
        }
    }
}

impl Drop for Slab {
    /// Unmaps the entirely free chunks. A chunk with a node still handed out stays mapped (its holder may still
    /// use it); the process's slab is a `static` and is never dropped.
    fn drop(&mut self) {
        let cap = self.capacity() as u32;
        let d = self.depot.get_mut();
        for c in std::mem::take(&mut d.partial) {
            // SAFETY: listed chunks are mapped; `&mut self` excludes every other access.
            if unsafe { self.header(c).free } == cap {
                // SAFETY: every node slot is free: nothing refers to the chunk.
                unsafe { vmspace_rcu::chunk::unmap(c.0, 1 << self.shift) };
            }
        }
    }
}

/// A thread's stack of free nodes in front of a [`Slab`] (see the module docs). The owner gives it back with
/// [`Magazine::flush`]; the process slab's thread-local magazine does that when its thread exits.
pub struct Magazine {
    nodes: Vec<usize>,
}

impl Magazine {
    /// An empty magazine.
    pub const fn new() -> Magazine {
        Magazine { nodes: Vec::new() }
    }

    /// Nodes held.
    #[cfg(any(test, loom))]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if the magazine holds no node.
    #[cfg(any(test, loom))]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// One node; `None` if the system has no memory.
    #[inline]
    pub fn alloc(&mut self, slab: &Slab) -> Option<usize> {
        if let Some(a) = self.nodes.pop() {
            return Some(a);
        }
        if !slab.take(MAG_REFILL, &mut self.nodes) {
            return None;
        }
        self.nodes.pop()
    }

    /// Appends `n` nodes to `out`, from this magazine and the rest from the depot in one step; `false` (and
    /// nothing appended) if the system has no memory.
    #[cfg_attr(loom, allow(dead_code))] // The tree does not use the slab under loom.
    pub(crate) fn alloc_bulk(&mut self, slab: &Slab, n: usize, out: &mut Vec<usize>) -> bool {
        let here = n.min(self.nodes.len());
        let at = self.nodes.len() - here;
        if here < n && !slab.take(n - here, out) {
            return false;
        }
        out.extend(self.nodes.drain(at..).rev());
        true
    }

    /// Gives the oldest half back when the magazine is over its bound.
    #[inline]
    fn trim(&mut self, slab: &Slab) {
        if self.nodes.len() > MAG_MAX {
            let half = self.nodes.len() - MAG_MAX / 2;
            // SAFETY: magazine nodes are free and ours (the callers' contracts).
            unsafe { slab.give(&self.nodes[..half]) };
            self.nodes.drain(..half);
        }
    }

    /// Frees one node.
    ///
    /// # Safety
    ///
    /// As [`Slab::give`].
    #[inline]
    pub unsafe fn free(&mut self, slab: &Slab, a: usize) {
        self.nodes.push(a);
        self.trim(slab);
    }

    /// Frees many nodes: the magazine keeps up to its bound, the depot takes the rest in one step.
    ///
    /// # Safety
    ///
    /// As [`Slab::give`], for every node.
    #[cfg_attr(loom, allow(dead_code))] // As `alloc_bulk`.
    pub(crate) unsafe fn free_bulk(&mut self, slab: &Slab, nodes: &[usize]) {
        let room = MAG_MAX.saturating_sub(self.nodes.len()).min(nodes.len());
        let (rest, keep) = nodes.split_at(nodes.len() - room);
        // SAFETY: the caller's contract.
        unsafe { slab.give(rest) };
        self.nodes.extend_from_slice(keep);
    }

    /// Gives every node back to the depot.
    pub fn flush(&mut self, slab: &Slab) {
        // SAFETY: magazine nodes are free and were handed out by `slab` (the callers' contracts).
        unsafe { slab.give(&self.nodes) };
        self.nodes.clear();
    }
}

impl Default for Magazine {
    fn default() -> Self {
        Magazine::new()
    }
}

impl Drop for Magazine {
    fn drop(&mut self) {
        debug_assert!(
            self.nodes.is_empty() || std::thread::panicking(),
            "maple slab: magazine dropped unflushed"
        );
    }
}

/// The process's node slab, and the thread-local magazines in front of it (not under loom: see the module
/// docs).
#[cfg(not(loom))]
mod process {
    use std::cell::RefCell;

    use super::{Magazine, NODE_CHUNK_SHIFT, NODE_KEEP_EMPTY_BYTES, Slab, SlabStats};

    /// The node slab every allocation domain takes its nodes from.
    static NODE_SLAB: Slab = Slab::new(NODE_CHUNK_SHIFT, NODE_KEEP_EMPTY_BYTES >> NODE_CHUNK_SHIFT);

    /// A thread's magazine of the process slab; flushed when the thread exits.
    struct Local(Magazine);

    impl Drop for Local {
        fn drop(&mut self) {
            self.0.flush(&NODE_SLAB);
        }
    }

    thread_local! {
        static MAGAZINE: RefCell<Local> = const { RefCell::new(Local(Magazine::new())) };
    }

    /// Runs `f` on this thread's magazine, or on a temporary one flushed at once while the thread-local one is
    /// gone (a deferred free running during thread exit) or in use.
    #[inline]
    fn with<R>(f: impl FnOnce(&mut Magazine) -> R) -> R {
        let mut f = Some(f);
        let r = MAGAZINE.try_with(|m| match m.try_borrow_mut() {
            Ok(mut m) => Some((f.take().expect("called once"))(&mut m.0)),
            Err(_) => None,
        });
        match r {
            Ok(Some(r)) => r,
            _ => {
                let mut tmp = Magazine::new();
                let r = (f.take().expect("not called yet"))(&mut tmp);
                tmp.flush(&NODE_SLAB);
                r
            }
        }
    }

    /// One node of the process slab; `None` if the system has no memory.
    #[inline]
    pub(crate) fn alloc() -> Option<usize> {
        with(|m| m.alloc(&NODE_SLAB))
    }

    /// `n` nodes appended to `out` in one step; `false` (nothing appended) if the system has no memory.
    pub(crate) fn alloc_bulk(n: usize, out: &mut Vec<usize>) -> bool {
        with(|m| m.alloc_bulk(&NODE_SLAB, n, out))
    }

    /// Frees one node.
    ///
    /// # Safety
    ///
    /// `a` came from [`alloc`] or [`alloc_bulk`], is freed once, and nothing uses it afterwards.
    #[inline]
    pub(crate) unsafe fn free(a: usize) {
        // SAFETY: the caller's contract.
        with(|m| unsafe { m.free(&NODE_SLAB, a) })
    }

    /// Frees many nodes.
    ///
    /// # Safety
    ///
    /// As [`free`], for every node.
    pub(crate) unsafe fn free_bulk(nodes: &[usize]) {
        // SAFETY: the caller's contract.
        with(|m| unsafe { m.free_bulk(&NODE_SLAB, nodes) })
    }

    /// Gives this thread's magazine back to the depot.
    pub(crate) fn flush_local() {
        with(|m| m.flush(&NODE_SLAB))
    }

    /// See [`crate::slab_stats`].
    pub(crate) fn stats() -> SlabStats {
        NODE_SLAB.stats()
    }
}
#[cfg(not(loom))]
pub(crate) use process::{alloc, alloc_bulk, flush_local, free, free_bulk, stats};

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    /// Writes and reads back every word of node `a` (it must be usable memory of its own).
    fn touch(a: usize, tag: u64) {
        let p = std::ptr::with_exposed_provenance_mut::<u64>(a);
        for i in 0..SLOT / 8 {
            // SAFETY: `a` is a node slot handed out to the test, 256 bytes of mapped memory nobody else uses.
            unsafe {
                p.add(i).write(tag + i as u64);
                assert_eq!(p.add(i).read(), tag + i as u64);
            }
        }
    }

    /// Free slots in the depot plus magazines plus handed out = every node slot of every chunk.
    fn conserved(s: &Slab, mags: &[&Magazine], held: usize) {
        let st = s.stats();
        let mags: usize = mags.iter().map(|m| m.len()).sum();
        assert_eq!(
            st.free_nodes + mags + held,
            st.chunks * s.capacity(),
            "{st:?}, {mags} in magazines, {held} held"
        );
        assert_eq!(st.bytes, st.chunks << s.shift);
    }

    #[test]
    fn header_and_capacity() {
        for (shift, hs, cap) in [(12, 1, 15), (16, 1, 255), (21, 5, 8187)] {
            let s = Slab::new(shift, 0);
            assert_eq!((s.header_slots(), s.capacity()), (hs, cap), "shift {shift}");
        }
    }

    /// Nodes are 256-byte aligned slots after the header of size-aligned chunks, distinct, usable, carved in
    /// address order from a fresh chunk; a second chunk is mapped when the first is full; both go back to the
    /// system when every node is free (no empty chunk kept).
    #[test]
    fn carving_alignment_and_chunk_return() {
        let s = Slab::new(16, 0);
        let mut m = Magazine::new();
        let cap = s.capacity();
        let mut got = Vec::new();
        for i in 0..cap + 1 {
            let a = m.alloc(&s).unwrap();
            assert_eq!(a % SLOT, 0);
            let base = a & !((1 << 16) - 1);
            assert!(a - base >= s.header_slots() * SLOT, "node in the header");
            touch(a, i as u64 * 1000);
            got.push(a);
        }
        assert_eq!(got.iter().collect::<HashSet<_>>().len(), got.len());
        // The first refill came out of a fresh chunk in address order (the magazine pops its last first).
        let first: Vec<usize> = got[..MAG_REFILL].to_vec();
        assert!(first.windows(2).all(|w| w[0] == w[1] + SLOT), "not sequential");
        assert_eq!(s.stats().chunks, 2);
        conserved(&s, &[&m], got.len());
        for &a in &got {
            // SAFETY: ours, freed once.
            unsafe { m.free(&s, a) };
        }
        m.flush(&s);
        assert_eq!(s.stats(), SlabStats::default());
    }

    /// Entirely free chunks beyond the bound go back to the system; the bound is kept.
    #[test]
    fn empty_chunks_are_kept_up_to_the_bound() {
        let s = Slab::new(12, 2);
        let mut m = Magazine::new();
        let mut got = Vec::new();
        assert!(m.alloc_bulk(&s, 10 * s.capacity(), &mut got));
        assert_eq!(s.stats().chunks, 10);
        // SAFETY: ours, freed once.
        unsafe { m.free_bulk(&s, &got) };
        m.flush(&s);
        let st = s.stats();
        assert_eq!((st.chunks, st.empty_chunks, st.bytes, st.free_nodes), (2, 2, 2 * 4096, 2 * s.capacity()));
        // They are reused before anything new is mapped.
        let mut again = Vec::new();
        assert!(m.alloc_bulk(&s, 2 * s.capacity(), &mut again));
        assert_eq!(s.stats().chunks, 2);
        // SAFETY: ours.
        unsafe { m.free_bulk(&s, &again) };
        m.flush(&s);
    }

    /// A magazine refills in one batch when empty and gives its oldest half back above its bound.
    #[test]
    fn magazine_refill_and_drain() {
        let s = Slab::new(16, 8);
        let mut m = Magazine::new();
        let a = m.alloc(&s).unwrap();
        assert_eq!(m.len(), MAG_REFILL - 1);
        assert_eq!(s.stats().free_nodes, s.capacity() - MAG_REFILL);
        let mut got = vec![a];
        assert!(m.alloc_bulk(&s, MAG_MAX + 1 - MAG_REFILL, &mut got));
        // The bulk allocation took the magazine's nodes first and the rest from the depot.
        assert_eq!(m.len(), 0);
        conserved(&s, &[&m], got.len());
        for (i, &a) in got.iter().enumerate() {
            // SAFETY: ours, freed once.
            unsafe { m.free(&s, a) };
            assert_eq!(m.len(), if i < MAG_MAX { i + 1 } else { MAG_MAX / 2 });
        }
        conserved(&s, &[&m], 0);
        // Bulk free fills the magazine to its bound and gives the rest to the depot.
        let mut more = Vec::new();
        assert!(m.alloc_bulk(&s, 3 * MAG_MAX, &mut more));
        // SAFETY: ours.
        unsafe { m.free_bulk(&s, &more) };
        assert_eq!(m.len(), MAG_MAX);
        conserved(&s, &[&m], 0);
        m.flush(&s);
        assert!(m.is_empty());
        conserved(&s, &[], 0);
    }

    /// Nodes allocated on one thread and freed on another come back through the depot; threads allocating at
    /// the same time never get the same node.
    #[test]
    fn threads_refill_and_drain_through_the_depot() {
        let s = std::sync::Arc::new(Slab::new(16, 1));
        let held = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
        let (tx, rx) = std::sync::mpsc::channel::<Vec<usize>>();
        let mut hs = Vec::new();
        for t in 0..2u64 {
            let (s, held, tx) = (s.clone(), held.clone(), tx.clone());
            hs.push(std::thread::spawn(move || {
                let mut m = Magazine::new();
                for round in 0..if cfg!(miri) { 3 } else { 20 } {
                    let mut batch = Vec::new();
                    for _ in 0..300 {
                        let a = m.alloc(&s).unwrap();
                        assert!(held.lock().unwrap().insert(a), "node {a:#x} handed out twice");
                        touch(a, t << 32 | round);
                        batch.push(a);
                    }
                    for &a in &batch {
                        held.lock().unwrap().remove(&a);
                    }
                    tx.send(batch).unwrap();
                }
                m.flush(&s);
            }));
        }
        drop(tx);
        // This thread frees what the others allocated.
        let mut m = Magazine::new();
        for batch in rx {
            for a in batch {
                // SAFETY: allocated by another thread, sent here, freed once.
                unsafe { m.free(&s, a) };
            }
        }
        for h in hs {
            h.join().unwrap();
        }
        m.flush(&s);
        conserved(&s, &[], 0);
        let st = s.stats();
        assert!(st.chunks <= 1 && st.empty_chunks == st.chunks, "{st:?}");
    }

    /// A failed chunk mapping fails the whole request and leaves nothing taken.
    #[test]
    fn map_failure_takes_nothing() {
        let s = Slab::new(12, 4);
        let cap = s.capacity();
        let mut keep = Vec::new();
        assert!(s.take(5, &mut keep));
        let before = s.stats();
        // The depot has 10 free nodes: a request for more needs a chunk, whose mapping fails.
        s.depot.lock().fail_maps = 1;
        let mut out = vec![7];
        assert!(!s.take(3 * cap, &mut out));
        assert_eq!(out, vec![7]);
        assert_eq!(s.stats(), before);
        let mut m = Magazine::new();
        s.depot.lock().fail_maps = 1;
        assert!(!m.alloc_bulk(&s, 3 * cap, &mut out));
        assert_eq!((out, m.len()), (vec![7], 0));
        assert_eq!(s.stats(), before);
        // An empty magazine in front of an empty depot: a single allocation needs a chunk.
        let mut rest = Vec::new();
        assert!(s.take(s.stats().free_nodes, &mut rest));
        s.depot.lock().fail_maps = 1;
        assert_eq!(m.alloc(&s), None);
        assert_eq!(m.len(), 0);
        let x = m.alloc(&s).expect("the next mapping succeeds");
        // SAFETY: ours, freed once.
        unsafe {
            m.free(&s, x);
            s.give(&keep);
            s.give(&rest);
        }
        m.flush(&s);
        conserved(&s, &[], 0);
    }

    #[test]
    #[should_panic(expected = "freed twice")]
    #[cfg_attr(miri, ignore)] // The panic leaves the chunk mapped: Miri would report the leak.
    fn double_free_is_caught() {
        let s = Slab::new(12, 0);
        let mut v = Vec::new();
        // Two nodes of one fresh chunk: the one kept keeps the chunk mapped.
        assert!(s.take(2, &mut v));
        // SAFETY: deliberately wrong, to see the check fire (the slot is free, so nothing is corrupted).
        unsafe {
            s.give(&v[..1]);
            s.give(&v[..1]);
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(usize),
        Bulk(usize, usize),
        Free(usize, usize),
        FreeBulk(usize, usize),
        Flush(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..2usize).prop_map(Op::Alloc),
            2 => (0..2usize, 0..70usize).prop_map(|(m, n)| Op::Bulk(m, n)),
            4 => (0..2usize, any::<usize>()).prop_map(|(m, i)| Op::Free(m, i)),
            1 => (0..2usize, 0..80usize).prop_map(|(m, n)| Op::FreeBulk(m, n)),
            1 => (0..2usize).prop_map(Op::Flush),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 64 },
            // No failure file: Miri's isolation forbids the current directory it would need.
            failure_persistence: None,
            ..ProptestConfig::default()
        })]
        /// Against a `HashSet` of the nodes handed out: no node is handed out twice, every node is an aligned
        /// slot, and depot + magazines + handed out always add up to every slot of every chunk; at the end
        /// everything goes back and only the bounded empty chunks remain.
        #[test]
        fn never_hands_out_a_node_twice(ops in proptest::collection::vec(op(), 1..300)) {
            let s = Slab::new(12, 1);
            let mut mags = [Magazine::new(), Magazine::new()];
            let mut held: Vec<usize> = Vec::new();
            let mut set: HashSet<usize> = HashSet::new();
            for op in ops {
                let mut fresh = Vec::new();
                match op {
                    Op::Alloc(m) => fresh.push(mags[m].alloc(&s).unwrap()),
                    Op::Bulk(m, n) => prop_assert!(mags[m].alloc_bulk(&s, n, &mut fresh)),
                    Op::Free(m, i) => {
                        if !held.is_empty() {
                            let a = held.swap_remove(i % held.len());
                            set.remove(&a);
                            // SAFETY: handed out, freed once.
                            unsafe { mags[m].free(&s, a) };
                        }
                    }
                    Op::FreeBulk(m, n) => {
                        let n = n.min(held.len());
                        let gone: Vec<usize> = held.drain(..n).collect();
                        for a in &gone {
                            set.remove(a);
                        }
                        // SAFETY: as above.
                        unsafe { mags[m].free_bulk(&s, &gone) };
                    }
                    Op::Flush(m) => mags[m].flush(&s),
                }
                for a in fresh {
                    prop_assert_eq!(a % SLOT, 0);
                    prop_assert!(set.insert(a), "node {:#x} handed out twice", a);
                    held.push(a);
                }
                conserved(&s, &[&mags[0], &mags[1]], held.len());
            }
            for m in &mut mags {
                // SAFETY: as above.
                unsafe { m.free_bulk(&s, &held) };
                held.clear();
                m.flush(&s);
            }
            let st = s.stats();
            prop_assert!(st.chunks <= 1 && st.empty_chunks == st.chunks, "{:?}", st);
        }
    }
}
