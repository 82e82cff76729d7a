//! Physical memory: the frame table (`struct page` / `struct folio` of order 0), the frame allocator, page
//! contents, the shared zero page, and the counted, fault-injectable allocation of everything the crate owns.
//!
//! # Frames
//!
//! [`Memory`] is the machine's memory: every page table, page cache and address space of one emulated machine
//! shares one (`Arc<Memory>`), as processes share the kernel's memory map. A frame is named by its [`Pfn`]; its
//! descriptor ([`Frame`], 64 bytes, the size of a `struct page`) lives in a frame table of fixed-size chunks
//! reached through a directory (`pfn_to_page` through `mem_section`, in miniature). Descriptors are
//! **type-stable**: a chunk is never freed before the `Memory`, so any PFN read from a page-table entry names a
//! valid descriptor forever, whatever happened to the frame since.
//!
//! A descriptor holds what the kernel's folio holds and the crate's callers need:
//! - `refcount` (`folio_ref_count`): one per mapping entry, one for the page cache's slot, one per transient
//!   user (a fault holding the page between lookup and mapping). The frame is freed when it drops to 0.
//! - `mapcount` (`folio_mapcount`, the kernel's `_mapcount + 1`): entries mapping the frame, over every page
//!   table. smaps divides PSS by it and calls a page shared when it is 2 or more.
//! - `flags` ([`FrameFlags`]): anonymous or file, `PG_swapbacked` (anonymous and shmem pages; cleared on an
//!   anonymous page by `MADV_FREE`, which makes it lazily freeable), `PG_dirty`, `PG_referenced`,
//!   `PageAnonExclusive` (the page may be written in place without copying: `do_wp_page`'s reuse test).
//! - `mapping` and `index` of a page-cache page (the owning [`crate::PageCache`]'s id and the page's index in
//!   the file); 0 and 0 for anonymous pages.
//! - `data`: the contents, 4 KiB of atomic words, allocated on the first write (a frame that was never
//!   written reads as zeroes and costs no contents). Words are atomics because the emulated MMU lets any
//!   thread read and write a mapped page at any time, as real CPUs do; copies (COW) read them with relaxed
//!   loads.
//!
//! PFN 0 is the shared **zero page** (`ZERO_PAGE(0)`): it has no contents (reads as zeroes), is never
//! refcounted, and is only ever mapped read-only in entries marked special.
//!
//! # Allocation and freeing
//!
//! Free frames wait in per-thread-shard lists (the kernel's per-CPU page lists): a thread allocates from its
//! own shard's list, refilled in batches from the shared free list (the buddy allocator's role), else from the
//! never-used part of the table (growing it a chunk at a time), else from the other shards; a shard's list that
//! grows beyond a bound returns frames to the shared list. No lock is shared by two threads faulting at the
//! same time, except for a refill or a spill.
//!
//! A freed frame keeps its contents buffer as a *spare* (not visible: the frame reads as zeroes): the next
//! first write to the frame zeroes and reuses it, so contents are recycled together with their PFN, through the
//! same per-shard lists, and a program that maps and unmaps memory in a loop costs no system allocation (a
//! fresh buffer costs the host a page fault per page of new heap: measured, more than half of an anonymous
//! fault's time). Spares are never given back before the `Memory` is dropped; they are bounded by the peak
//! number of frames with contents, as the emulated machine's RAM is.
//!
//! Buffers come from the memory's own arena ([`DataArena`]): chunks of the system's memory growing from
//! 64 KiB to 2 MiB (`vmspace_rcu::chunk`, huge pages where the host has them), cut into page-aligned 4 KiB
//! buffers handed out in order. Buffers from the global allocator (the first design) were each a separate
//! 4 KiB block at a 64-byte alignment, so a buffer straddled two host pages and every zeroing began with host
//! TLB misses, which in a virtual machine cost a two-dimensional page walk: measured, a one-byte write fault spent about three
//! times as long zeroing its page as a `memset` of the same 16 MiB of buffers laid out contiguously.
//! Contiguous, huge-page-backed buffers also give the frames of one mapping neighbouring contents, as the
//! kernel's direct map does.
//!
//! A frame that was mapped may still be reached by a lockless walker (the emulated MMU, a lockless smaps
//! reader) after its last entry is cleared, so it is not freed at once: the clearing operation collects it in
//! an [`crate::gather::MmuGather`], which frees the batch after an RCU grace period (`tlb_finish_mmu` after the TLB
//! flush, whose role the grace period plays). A walker that read the entry inside its read-side section can
//! therefore still read the frame's descriptor and contents, and the frame is not reused meanwhile. A frame
//! that was never published (a fault that lost a race, a failed operation) is freed at once.
//!
//! Every allocation (frames, contents, table pages, page-cache nodes, frame-table chunks) is counted
//! ([`MemoryStats`]) and passes one injection point ([`Memory::inject_alloc_failure`]), as the maple tree's
//! allocator does, so that tests can fail each allocation of an operation in turn and prove that the failed
//! operation changed and leaked nothing.

use std::sync::Arc;

use vmspace_rcu::CachePadded;
use vmspace_rcu::sync::{AtomicPtr, AtomicU32, AtomicU64, Mutex, Ordering};

use crate::arch::{PAGE_BYTES, PAGE_SIZE, PAGE_WORDS, Pfn};
use crate::counters::{Sharded, nshards, shard};

/// Frames per frame-table chunk (loom: 4).
#[cfg(not(loom))]
const CHUNK_SHIFT: u32 = 10;
#[cfg(loom)]
const CHUNK_SHIFT: u32 = 2;
const CHUNK: usize = 1 << CHUNK_SHIFT;
/// Chunks the directory can hold: 2^24 frames (64 GiB of emulated memory; loom: 64 frames).
#[cfg(not(loom))]
const DIR_LEN: usize = 1 << 14;
#[cfg(loom)]
const DIR_LEN: usize = 16;
/// The most frames a [`Memory`] can have (including the zero page).
pub const MAX_FRAMES: u64 = (DIR_LEN * CHUNK) as u64;
/// Frames a shard's list takes at a time from the shared free list or the never-used part of the table
/// (`pcp->batch`).
#[cfg(not(loom))]
const REFILL: u64 = 64;
#[cfg(loom)]
const REFILL: u64 = 1;
/// A shard's list longer than this gives its oldest frames back to the shared free list (`pcp->high`), so that
/// frames freed by one thread are found by the others before the table grows.
#[cfg(not(loom))]
const PCP_HIGH: usize = 1024;
#[cfg(loom)]
const PCP_HIGH: usize = 4;
/// A frame's state bits (a subset of the kernel's folio flags, plus `FREE` for the allocator).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FrameFlags(u32);

impl FrameFlags {
    /// `folio_test_anon`: an anonymous page (else a page-cache page, or one truncated out of its file).
    pub const ANON: FrameFlags = FrameFlags(1 << 0);
    /// `PG_swapbacked`: anonymous or shmem. An anonymous page without it is lazily freeable (`MADV_FREE`).
    pub const SWAPBACKED: FrameFlags = FrameFlags(1 << 1);
    /// `PG_dirty`: the page holds data its backing store has not seen (set when a dirty entry mapping a file
    /// page is zapped, on shared write faults, by page-cache writes).
    pub const DIRTY: FrameFlags = FrameFlags(1 << 2);
    /// `PG_referenced`: accessed through a mapping that is gone (`folio_mark_accessed` at zap).
    pub const REFERENCED: FrameFlags = FrameFlags(1 << 3);
    /// `PageAnonExclusive`: the one mapping may reuse the page on a write fault without copying.
    pub const ANON_EXCLUSIVE: FrameFlags = FrameFlags(1 << 4);
    /// On a free list (allocator bookkeeping; a live entry never maps such a frame).
    pub const FREE: FrameFlags = FrameFlags(1 << 5);
    /// The shared zero page.
    pub const ZERO: FrameFlags = FrameFlags(1 << 6);
    /// `PG_active`: on the active LRU list. Kept only as the state of `folio_mark_accessed` (a second mark
    /// activates the folio, at once or when the activation batch drains, and clears `PG_referenced`;
    /// `Memory::mark_accessed`); nothing is reclaimed.
    pub const ACTIVE: FrameFlags = FrameFlags(1 << 7);
    /// `PG_mlocked` (and so `PG_unevictable`): mapped by a `VM_LOCKED` VMA (`mlock_folio` when a locked VMA
    /// populates or mlocks the page, `munlock_folio` when the range is unlocked; the per-VMA `mlock_count`
    /// is not kept). Accessing such a page does not activate it, and `MADV_FREE` does not move it.
    pub const MLOCKED: FrameFlags = FrameFlags(1 << 8);
    /// `PG_readahead` (the bit `PG_reclaim` shares): a page-cache page whose fault starts the next readahead
    /// window, and which fault-around leaves alone (`crate::readahead`); also set on a dirty file page that
    /// `MADV_PAGEOUT` could not reclaim (`folio_set_reclaim`).
    pub const READAHEAD: FrameFlags = FrameFlags(1 << 9);
    /// `!PG_uptodate`: a page-cache page whose contents were never read (ext4's truncation caches the page of
    /// a partial block without reading a hole). Fault-around leaves it alone; a fault reads it first
    /// (`crate::cache` docs, "Pages not up to date").
    pub const NOT_UPTODATE: FrameFlags = FrameFlags(1 << 10);
    /// `PG_unevictable`: on the unevictable list. An mlocked page gets there when the CPU's mlock batch drains
    /// ([`Memory::lru_add_drain`]), not at once; reclaim, `MADV_FREE` and a second access leave it alone.
    pub const UNEVICTABLE: FrameFlags = FrameFlags(1 << 11);
    /// `PG_lru`: on an LRU list. A new folio waits in its CPU's `lru_add` batch without it until the batch
    /// moves (`Memory::folio_add_lru`); a folio queued in another per-CPU batch (activation, lazy free)
    /// loses it until that batch drains (`folio_batch_add_and_move`'s `folio_test_clear_lru`). Where it is
    /// missing, a second access cannot activate the folio by the batch (`folio_mark_accessed`).
    pub const LRU: FrameFlags = FrameFlags(1 << 12);
    /// Queued in the CPU's `lru_activate` batch (`folio_activate`): `PG_active` comes at its drain.
    pub const ACTIVATE: FrameFlags = FrameFlags(1 << 13);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: FrameFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Flags from raw bits.
    pub(crate) const fn from_bits(bits: u32) -> FrameFlags {
        FrameFlags(bits)
    }

    /// The order of the page-cache folio the page belongs to (0: a folio of one page).
    pub const fn order(self) -> u32 {
        (self.0 >> ORDER_SHIFT) & 0xf
    }

    /// These flags with folio order `order` (at most 15).
    pub const fn with_order(self, order: u32) -> FrameFlags {
        FrameFlags((self.0 & !(0xf << ORDER_SHIFT)) | ((order & 0xf) << ORDER_SHIFT))
    }

    /// The flags that belong to a folio rather than to one of its pages: kept on a large folio's head page.
    pub const FOLIO_STATE: FrameFlags = FrameFlags(
        FrameFlags::DIRTY.0
            | FrameFlags::REFERENCED.0
            | FrameFlags::ACTIVE.0
            | FrameFlags::READAHEAD.0
            | FrameFlags::NOT_UPTODATE.0
            | FrameFlags::LRU.0
            | FrameFlags::ACTIVATE.0,
    );

    /// Whether any bit of `other` is set.
    pub const fn intersects(self, other: FrameFlags) -> bool {
        self.0 & other.0 != 0
    }
    /// The union.
    pub const fn union(self, other: FrameFlags) -> FrameFlags {
        FrameFlags(self.0 | other.0)
    }
}

impl std::fmt::Debug for FrameFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.order() != 0 {
            write!(f, "order {} ", self.order())?;
        }
        let names = [
            (FrameFlags::ANON, "ANON"),
            (FrameFlags::SWAPBACKED, "SWAPBACKED"),
            (FrameFlags::DIRTY, "DIRTY"),
            (FrameFlags::REFERENCED, "REFERENCED"),
            (FrameFlags::ANON_EXCLUSIVE, "ANON_EXCLUSIVE"),
            (FrameFlags::FREE, "FREE"),
            (FrameFlags::ZERO, "ZERO"),
            (FrameFlags::ACTIVE, "ACTIVE"),
            (FrameFlags::MLOCKED, "MLOCKED"),
            (FrameFlags::READAHEAD, "READAHEAD"),
            (FrameFlags::NOT_UPTODATE, "NOT_UPTODATE"),
            (FrameFlags::UNEVICTABLE, "UNEVICTABLE"),
            (FrameFlags::LRU, "LRU"),
            (FrameFlags::ACTIVATE, "ACTIVATE"),
        ];
        let set: Vec<&str> = names.iter().filter(|(b, _)| self.contains(*b)).map(|(_, n)| *n).collect();
        write!(f, "FrameFlags({})", set.join("|"))
    }
}

/// `PAGEVEC_SIZE`: the pages a per-CPU folio batch holds before it moves them.
const LRU_BATCH: usize = 31;

/// Where [`FrameFlags::order`] lives in the flags word.
const ORDER_SHIFT: u32 = 24;

/// 4 KiB of page contents (loom: 16 bytes), as atomic words (module docs).
#[repr(C, align(64))]
pub(crate) struct PageData {
    pub(crate) w: [AtomicU64; PAGE_WORDS],
    /// Loom builds only: set instead of freeing, so that a late access fails the model.
    #[cfg(loom)]
    freed: vmspace_rcu::sync::AtomicBool,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<PageData>() == PAGE_SIZE as usize);

impl PageData {
    /// Word `i`. Relaxed: contents carry no synchronisation; the entry that maps the frame was loaded with
    /// Acquire, which orders the buffer's initialisation before this load.
    #[inline]
    pub(crate) fn word(&self, i: usize) -> u64 {
        #[cfg(loom)]
        assert!(!self.freed.load(Ordering::Relaxed), "pgtable: access to freed page contents");
        self.w[i].load(Ordering::Relaxed)
    }

    /// Sets word `i` (Relaxed: as [`PageData::word`]).
    #[inline]
    pub(crate) fn set_word(&self, i: usize, v: u64) {
        #[cfg(loom)]
        assert!(!self.freed.load(Ordering::Relaxed), "pgtable: access to freed page contents");
        self.w[i].store(v, Ordering::Relaxed);
    }

    /// Reads `buf.len()` bytes at byte offset `off` (within the page).
    pub(crate) fn read(&self, off: usize, buf: &mut [u8]) {
        for (k, b) in buf.iter_mut().enumerate() {
            let o = off + k;
            *b = if o < PAGE_BYTES { (self.word(o / 8) >> ((o % 8) * 8)) as u8 } else { 0 };
        }
    }

    /// Writes `data` at byte offset `off` (within the page). Whole words are stored; partial words are merged
    /// with a compare-and-swap loop, so that concurrent writers of other bytes of the same word are not lost
    /// (a CPU's byte stores do not disturb their neighbours either).
    pub(crate) fn write(&self, off: usize, data: &[u8]) {
        let mut k = 0;
        while k < data.len() {
            let o = off + k;
            if o >= PAGE_BYTES {
                break;
            }
            let wi = o / 8;
            let first = o % 8;
            let n = (8 - first).min(data.len() - k);
            if first == 0 && n == 8 {
                let mut b = [0u8; 8];
                b.copy_from_slice(&data[k..k + 8]);
                self.set_word(wi, u64::from_le_bytes(b));
            } else {
                let mut mask = 0u64;
                let mut val = 0u64;
                for j in 0..n {
                    mask |= 0xff << ((first + j) * 8);
                    val |= u64::from(data[k + j]) << ((first + j) * 8);
                }
                // Relaxed: as `set_word`; the loop only keeps other bytes of the word intact.
                let mut cur = self.w[wi].load(Ordering::Relaxed);
                loop {
                    let new = cur & !mask | val;
                    match self.w[wi].compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                        Ok(_) => break,
                        Err(c) => cur = c,
                    }
                }
            }
            k += n;
        }
    }

    /// Whether every word is zero.
    #[cfg(test)]
    pub(crate) fn is_zero(&self) -> bool {
        (0..PAGE_WORDS).all(|i| self.word(i) == 0)
    }
}

/// A frame descriptor (module docs). 64 bytes, one cache line, so that two threads' frames never share one.
#[repr(C, align(64))]
pub(crate) struct Frame {
    /// References (module docs). Increments are Relaxed (the caller already holds a reference or the lock that
    /// makes the frame reachable); the decrement that may free is Release, followed by an Acquire fence when it
    /// reaches 0 (the `Arc` pattern), so every use by other holders happens before the free.
    pub(crate) refcount: AtomicU32,
    /// Entries mapping the frame. Changed under the page-table lock of the entry that maps or unmaps (Relaxed:
    /// different page tables' locks do not order each other, and readers take it as a statistic).
    pub(crate) mapcount: AtomicU32,
    /// [`FrameFlags`] bits. Relaxed read-modify-writes; the frame's publication (an entry's Release store, or
    /// the page cache's mutex) orders the flags set at allocation.
    pub(crate) flags: AtomicU32,
    /// Owning page cache's id, 0 if anonymous or truncated. Written at allocation and at truncation (under the
    /// page cache's mutex); Relaxed.
    pub(crate) mapping: AtomicU64,
    /// Page index in the file (page caches only). Written at allocation; Relaxed.
    pub(crate) index: AtomicU64,
    /// The contents, null until first written. Installed with a Release compare-and-swap (paired with the
    /// Acquire load of readers, which then see the zeroed or copied words); detached only when the frame is
    /// freed, after its grace period.
    pub(crate) data: AtomicPtr<PageData>,
    /// A buffer kept from the frame's previous life (module docs), reused by its next first write; null if none.
    /// Touched only by whoever owns the frame's allocation state: the freeing path after the grace period, and
    /// the first writer through `ensure_data`/`copy_data`, which takes it with a swap (so two racing first
    /// writers never both get it). Not under loom, where a freed buffer is marked instead.
    #[cfg(not(loom))]
    spare: AtomicPtr<PageData>,
    /// For a page of a large page-cache folio (order in [`FrameFlags::order`]): the PFN of its head page, which
    /// carries the folio's flags ([`Memory::folio`]); 0 for a folio of one page. Written when the folio is made
    /// and when it is split, under the page cache's mutex; Relaxed (the mutex, or the entry's publication,
    /// orders it for readers).
    pub(crate) head: AtomicU64,
}

impl Frame {
    fn new_free() -> Frame {
        Frame {
            refcount: AtomicU32::new(0),
            mapcount: AtomicU32::new(0),
            flags: AtomicU32::new(FrameFlags::FREE.0),
            mapping: AtomicU64::new(0),
            index: AtomicU64::new(0),
            head: AtomicU64::new(0),
            data: AtomicPtr::new(std::ptr::null_mut()),
            #[cfg(not(loom))]
            spare: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The flags.
    #[inline]
    pub(crate) fn flags(&self) -> FrameFlags {
        // Relaxed: see the field.
        FrameFlags(self.flags.load(Ordering::Relaxed))
    }

    /// Sets `f`.
    #[inline]
    pub(crate) fn set(&self, f: FrameFlags) {
        // Relaxed: see the field.
        self.flags.fetch_or(f.0, Ordering::Relaxed);
    }

    /// Clears `f`.
    #[inline]
    pub(crate) fn clear(&self, f: FrameFlags) {
        // Relaxed: see the field.
        self.flags.fetch_and(!f.0, Ordering::Relaxed);
    }

    /// Clears `f` and tells whether all of it was set (`folio_test_clear_*`).
    #[inline]
    pub(crate) fn test_clear(&self, f: FrameFlags) -> bool {
        // Relaxed: see the field.
        FrameFlags(self.flags.fetch_and(!f.0, Ordering::Relaxed)).contains(f)
    }

    /// Sets the folio order ([`FrameFlags::order`]).
    pub(crate) fn set_order(&self, order: u32) {
        // Relaxed: see the field; the order changes only under the page cache's mutex.
        let _ = self
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(FrameFlags(v).with_order(order).0));
    }

    /// `folio_test_anon`.
    #[inline]
    pub(crate) fn is_anon(&self) -> bool {
        self.flags().contains(FrameFlags::ANON)
    }

    /// The contents if the frame was ever written.
    #[inline]
    pub(crate) fn data(&self) -> Option<&PageData> {
        // Acquire: pairs with the Release installation in `Memory::ensure_data` / `copy_data`.
        let p = self.data.load(Ordering::Acquire);
        // SAFETY: a non-null buffer stays allocated until the frame is freed, which happens only after every
        // holder of a reference or an RCU reader that reached the frame is done (module docs).
        unsafe { p.as_ref() }
    }

    /// `folio_get`.
    #[inline]
    pub(crate) fn get(&self) {
        // Relaxed: see the field.
        let old = self.refcount.fetch_add(1, Ordering::Relaxed);
        debug_assert!(old > 0, "folio_get on a frame with no reference");
    }

    /// `folio_try_get`: takes a reference unless the frame has none left (its last holder dropped it and it
    /// waits for its grace period, or it is free), so that a walker that found the frame without a lock never
    /// brings a dying frame back (which would free it twice). Returns whether it took one.
    #[inline]
    pub(crate) fn try_get(&self) -> bool {
        // Relaxed: as `get`; the holder the count proves keeps the frame alive (the walker's RCU section does
        // the rest).
        let mut cur = self.refcount.load(Ordering::Relaxed);
        while cur != 0 {
            match self.refcount.compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
        false
    }

    /// `folio_put` without the free: returns whether this dropped the last reference (the caller then retires
    /// the frame).
    #[inline]
    #[must_use]
    pub(crate) fn put(&self) -> bool {
        // Release: see the field.
        let old = self.refcount.fetch_sub(1, Ordering::Release);
        debug_assert!(old > 0, "folio_put on a frame with no reference");
        if old == 1 {
            // Acquire: pairs with the other holders' Release decrements.
            vmspace_rcu::sync::fence(Ordering::Acquire);
            true
        } else {
            false
        }
    }

    /// The mapcount.
    #[inline]
    pub(crate) fn mapcount(&self) -> u32 {
        // Relaxed: see the field.
        self.mapcount.load(Ordering::Relaxed)
    }

    /// The refcount.
    #[inline]
    pub(crate) fn refcount(&self) -> u32 {
        // Relaxed: a snapshot (reuse decisions are made under the page-table lock, and a stale high value only
        // makes `do_wp_page` copy instead of reuse).
        self.refcount.load(Ordering::Relaxed)
    }
}

/// What a newly allocated frame is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameInit {
    pub(crate) flags: FrameFlags,
    pub(crate) mapping: u64,
    pub(crate) index: u64,
    /// Initial refcount (>= 1).
    pub(crate) refcount: u32,
    /// Initial mapcount.
    pub(crate) mapcount: u32,
}

impl FrameInit {
    /// A new anonymous page about to be mapped once: `folio_add_new_anon_rmap` (exclusive, swap-backed).
    pub(crate) const fn anon_mapped() -> FrameInit {
        FrameInit {
            flags: FrameFlags(FrameFlags::ANON.0 | FrameFlags::SWAPBACKED.0 | FrameFlags::ANON_EXCLUSIVE.0),
            mapping: 0,
            index: 0,
            refcount: 1,
            mapcount: 1,
        }
    }
}

/// Counter indices of [`Memory`]'s statistics.
mod stat {
    pub(crate) const FRAMES_ALLOC: usize = 0;
    pub(crate) const FRAMES_RELEASED: usize = 1;
    pub(crate) const FRAMES_FREED: usize = 2;
    pub(crate) const TABLES_ALLOC: usize = 3;
    pub(crate) const TABLES_RELEASED: usize = 4;
    pub(crate) const TABLES_FREED: usize = 5;
    pub(crate) const DATA_ATTACHED: usize = 6;
    pub(crate) const DATA_DETACHED: usize = 7;
    pub(crate) const DATA_SYSTEM: usize = 8;
    pub(crate) const NODES_ALLOC: usize = 9;
    pub(crate) const NODES_FREED: usize = 10;
    pub(crate) const CHUNKS: usize = 11;
    pub(crate) const INJECTED: usize = 12;
    pub(crate) const N: usize = 13;
}
pub(crate) use stat::*;

/// Configuration of a [`Memory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    /// The most frames the memory may hold, the zero page included (at most [`MAX_FRAMES`]). Beyond it
    /// allocations fail as under memory pressure with nothing to reclaim.
    pub max_frames: u64,
    /// `/sys/kernel/mm/transparent_hugepage/...`'s sibling `fault_around_bytes` (debugfs; 65536 by default):
    /// the window a read fault on a file mapping maps from the page cache around the faulting page
    /// (`do_fault_around`). `PAGE_SIZE` or less disables fault-around.
    pub fault_around_bytes: u64,
    /// The most page-table pages that may exist at once (linked, or unlinked and waiting for their grace
    /// period); `u64::MAX`: no limit but the host's. Beyond it table allocations fail as frame allocations do
    /// beyond `max_frames` (the kernel takes both from one page allocator; here they are counted apart, so a
    /// bounded run bounds both).
    pub max_tables: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig { max_frames: MAX_FRAMES, fault_around_bytes: 65536, max_tables: u64::MAX }
    }
}

/// What a frame looks like now (tests, validation, debugging).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// `folio_ref_count`.
    pub refcount: u32,
    /// `folio_mapcount`.
    pub mapcount: u32,
    /// The flags.
    pub flags: FrameFlags,
    /// Owning page cache's id (0: anonymous or truncated).
    pub mapping: u64,
    /// Index in the file.
    pub index: u64,
    /// Whether contents were ever written (else the frame reads as zeroes).
    pub has_data: bool,
    /// The head page of its large folio (`None`: a folio of one page).
    pub head: Option<Pfn>,
}

/// Counts of everything a [`Memory`] allocated (module docs). "Pending" objects were retired and wait for an
/// RCU grace period; `vmspace_rcu::synchronize` lets them go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Frames handed out since creation (the zero page excluded).
    pub frames_allocated: u64,
    /// Frames allocated and not yet released (referenced by entries, page caches or in-flight operations).
    pub frames_in_use: u64,
    /// Frames released, waiting for their grace period.
    pub frames_pending_free: u64,
    /// Table pages handed out since creation.
    pub tables_allocated: u64,
    /// Table pages linked into page tables (or held by an operation in flight).
    pub tables_in_use: u64,
    /// Table pages unlinked, waiting for their grace period.
    pub tables_pending_free: u64,
    /// Content buffers attached to frames.
    pub data_in_use: u64,
    /// Content buffers ever taken from the system (cut from the memory's chunks; module docs).
    pub data_from_system: u64,
    /// Page-cache index nodes in use.
    pub cache_nodes_in_use: u64,
    /// Bytes of frame descriptors (the frame table's chunks).
    pub frame_table_bytes: u64,
    /// Allocations failed by injection.
    pub injected_failures: u64,
}

/// The machine's memory (module docs): frame table, frame allocator, zero page, allocation counters and the
/// failure injection point.
pub struct Memory {
    dir: Box<[AtomicPtr<Frame>]>,
    /// The first PFN never handed to a free list (frames below it exist in the table).
    grow: Mutex<u64>,
    /// Free PFNs per shard.
    free: Box<[CachePadded<Mutex<Vec<u64>>>]>,
    /// Free PFNs shared by all shards (module docs).
    global_free: Mutex<Vec<u64>>,
    pub(crate) stats: Sharded<{ stat::N }>,
    /// 0 = no injection; n = the n-th allocation from now fails (then injection switches off).
    fail_countdown: AtomicU64,
    max_frames: u64,
    /// [`MemoryConfig::max_tables`].
    pub(crate) max_tables: u64,
    pub(crate) fault_around_pages: u64,
    next_mapping: AtomicU64,
    /// The CPU's `lru_lazyfree` folio batch (`cpu_fbatches.lru_lazyfree`): pages `MADV_FREE` made lazily free,
    /// each holding a reference, whose LRU change waits for the next drain ([`Memory::lru_add_drain`]). One
    /// batch: the engine is one CPU, as the kernel runner pins itself to one.
    lazyfree: Mutex<Vec<u64>>,
    /// The CPU's mlock batch (`mlock_fbatch`): pages mlocked or munlocked since its last drain, each holding a
    /// reference; the drain puts them on or off the unevictable list.
    mlock: Mutex<Vec<u64>>,
    /// The CPUs' `lru_add` folio batches (`cpu_fbatches.lru_add`), one per thread shard: new folios, not yet
    /// on an LRU list ([`FrameFlags::LRU`]), by PFN ([`Memory::folio_add_lru`]). They hold no reference (a
    /// folio freed meanwhile is skipped when the batch moves); only the count, which moves the batch when
    /// full, and the membership, which a second access tests (`__lru_cache_activate_folio`), matter.
    lru_add: Box<[CachePadded<Mutex<Vec<u64>>>]>,
    /// The CPU's `lru_activate` batch (`cpu_fbatches.lru_activate`): folios a second access activates, which
    /// become active when it drains ([`FrameFlags::ACTIVATE`]; no reference held, as for `lru_add`).
    activate: Mutex<Vec<u64>>,
    /// Where content buffers come from (module docs).
    #[cfg(not(loom))]
    arena: DataArena,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("stats", &self.stats()).finish()
    }
}

impl Memory {
    /// A new memory with only the zero page.
    pub fn new(config: MemoryConfig) -> Arc<Memory> {
        let m = Memory {
            dir: (0..DIR_LEN).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            grow: Mutex::new(1),
            free: (0..nshards()).map(|_| CachePadded::new(Mutex::new(Vec::new()))).collect(),
            global_free: Mutex::new(Vec::new()),
            stats: Sharded::new(),
            fail_countdown: AtomicU64::new(0),
            max_frames: config.max_frames.clamp(2, MAX_FRAMES),
            max_tables: config.max_tables,
            // `fault_around_bytes_set`: rounded down to a power of two, at least one page.
            fault_around_pages: match config.fault_around_bytes / PAGE_SIZE {
                0 => 1,
                n => 1 << n.ilog2(),
            },
            next_mapping: AtomicU64::new(1),
            lazyfree: Mutex::new(Vec::new()),
            mlock: Mutex::new(Vec::new()),
            lru_add: (0..nshards()).map(|_| CachePadded::new(Mutex::new(Vec::new()))).collect(),
            activate: Mutex::new(Vec::new()),
            #[cfg(not(loom))]
            arena: DataArena::default(),
        };
        m.add_chunk(0);
        let z = m.frame(Pfn::ZERO);
        // Relaxed: not yet shared.
        z.flags.store(FrameFlags::ZERO.0, Ordering::Relaxed);
        Arc::new(m)
    }

    /// Creates chunk `c` (under the `grow` lock, or at creation).
    fn add_chunk(&self, c: usize) {
        let chunk: Box<[Frame]> = (0..CHUNK).map(|_| Frame::new_free()).collect();
        let p = Box::into_raw(chunk) as *mut Frame;
        // Release: pairs with the Acquire in `try_frame`, so the descriptors' initialisation is visible to anyone
        // who finds the chunk.
        self.dir[c].store(p, Ordering::Release);
        self.stats.add(CHUNKS, 1);
    }

    /// The descriptor of `pfn`, if the frame table has it.
    #[inline]
    pub(crate) fn try_frame(&self, pfn: Pfn) -> Option<&Frame> {
        let c = (pfn.0 >> CHUNK_SHIFT) as usize;
        // Acquire: pairs with the Release publication in `add_chunk`.
        let p = self.dir.get(c)?.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a published chunk holds CHUNK initialised descriptors and is freed only with the Memory.
        Some(unsafe { &*p.add(pfn.0 as usize & (CHUNK - 1)) })
    }

    /// The descriptor of `pfn`, which came from a live entry, a page cache or an allocation.
    #[inline]
    pub(crate) fn frame(&self, pfn: Pfn) -> &Frame {
        self.try_frame(pfn).expect("pgtable: a PFN from a live entry names an existing frame")
    }

    /// The descriptor that carries the folio state of `pfn`'s folio ([`FrameFlags::FOLIO_STATE`]): its head
    /// page for a page of a large page-cache folio, else the frame itself (`page_folio`).
    #[inline]
    pub(crate) fn folio(&self, pfn: Pfn) -> &Frame {
        let f = self.frame(pfn);
        // Relaxed: see `Frame::head`.
        match f.head.load(Ordering::Relaxed) {
            0 => f,
            h => self.frame(Pfn(h)),
        }
    }

    /// `folio_test_*` of `pfn`'s folio: the page's own flags with the folio state read from its head.
    pub(crate) fn folio_flags(&self, pfn: Pfn) -> FrameFlags {
        let own = self.frame(pfn).flags();
        let folio = self.folio(pfn).flags();
        FrameFlags((own.0 & !FrameFlags::FOLIO_STATE.0) | (folio.0 & FrameFlags::FOLIO_STATE.0))
    }

    /// `folio_mark_lazyfree`: an anonymous, swap-backed, evictable page joins the lazy-free batch (a reference
    /// held), which moves when it is full (`PAGEVEC_SIZE`, 31) or drained.
    pub(crate) fn mark_lazyfree(self: &Arc<Self>, pfn: Pfn) {
        let f = self.frame(pfn);
        let flags = f.flags();
        if !flags.contains(FrameFlags::ANON.union(FrameFlags::SWAPBACKED))
            || flags.contains(FrameFlags::UNEVICTABLE)
        {
            return;
        }
        // `folio_batch_add_and_move`: only a folio on an LRU list joins, leaving it until the drain.
        if !f.test_clear(FrameFlags::LRU) {
            return;
        }
        self.batch_add(&self.lazyfree, pfn);
    }

    /// `folio_add_lru` of a new folio (`pfn`: its head): it joins this CPU's `lru_add` batch, which moves to
    /// the LRU lists when it is full (`PAGEVEC_SIZE`) or when a large folio joins (`folio_batch_add_and_move`),
    /// or at a drain ([`Memory::lru_add_drain`]).
    pub(crate) fn folio_add_lru(&self, pfn: Pfn) {
        let large = self.frame(pfn).flags().order() > 0;
        let moved = {
            let mut b = self.lru_add[shard()].lock();
            b.push(pfn.0);
            if b.len() < LRU_BATCH && !large {
                return;
            }
            std::mem::take(&mut *b)
        };
        self.lru_add_move(&moved);
    }

    /// `lru_add` of each folio of a moved `lru_add` batch: it is on an LRU list from now on; an mlocked one
    /// goes to the unevictable list, inactive (`folio_evictable` false). A PFN freed since it joined (or now
    /// the tail of another folio) is skipped.
    fn lru_add_move(&self, pfns: &[u64]) {
        for &p in pfns {
            let f = self.frame(Pfn(p));
            let flags = f.flags();
            // Relaxed: see `Frame::head`.
            if flags.contains(FrameFlags::FREE) || f.head.load(Ordering::Relaxed) != 0 {
                continue;
            }
            if flags.contains(FrameFlags::MLOCKED) {
                f.clear(FrameFlags::ACTIVE);
                f.set(FrameFlags::UNEVICTABLE);
            }
            f.set(FrameFlags::LRU);
        }
    }

    /// `lru_activate` of each folio of a moved `lru_activate` batch: active unless unevictable, and back on
    /// its LRU list. A PFN no longer queued (freed and reused since) is skipped.
    fn activate_move(&self, pfns: &[u64]) {
        for &p in pfns {
            let f = self.frame(Pfn(p));
            if !f.test_clear(FrameFlags::ACTIVATE) {
                continue;
            }
            if !f.flags().intersects(FrameFlags::ACTIVE.union(FrameFlags::UNEVICTABLE)) {
                f.set(FrameFlags::ACTIVE);
            }
            f.set(FrameFlags::LRU);
        }
    }

    /// `mlock_folio` (`locked`) or `munlock_folio`: `PG_mlocked` changes now, the unevictable list at the mlock
    /// batch's drain. Folios of one page only (a large folio is mlocked only when mapped whole: not modelled).
    pub(crate) fn mlock_folio(self: &Arc<Self>, pfn: Pfn, locked: bool) {
        let f = self.frame(pfn);
        if f.flags().order() != 0 {
            return;
        }
        if locked {
            f.set(FrameFlags::MLOCKED);
        } else {
            f.clear(FrameFlags::MLOCKED);
        }
        self.batch_add(&self.mlock, pfn);
    }

    /// Adds `pfn` to a per-CPU batch with a reference; a full batch drains (`folio_batch_add` returning no room).
    ///
    /// The reference is taken with `folio_try_get`: a caller that found the frame without its PTE lock (GUP's
    /// lockless touch) may race with the zap of its last mapping; then the frame is left alone.
    fn batch_add(self: &Arc<Self>, batch: &Mutex<Vec<u64>>, pfn: Pfn) {
        if !self.frame(pfn).try_get() {
            return;
        }
        let full = {
            let mut b = batch.lock();
            b.push(pfn.0);
            b.len() >= LRU_BATCH
        };
        if full {
            self.lru_add_drain();
        }
    }

    /// `lru_add_drain`: this CPU's folio batches in the kernel's order (`lru_add_drain_cpu`, then
    /// `mlock_drain_local`). The `lru_add` batches move new folios to the LRU lists (every shard's: the kernel
    /// runner is one CPU, and so is the engine). Each page of the lazy-free batch (`lru_lazyfree`) still
    /// anonymous and swap-backed becomes lazily free (`PG_swapbacked` cleared) and inactive and unreferenced,
    /// whatever touched it since `MADV_FREE`. The activation batch (`lru_activate`) makes its folios active.
    /// Then the mlock batch's pages go on or off the unevictable list; then the batches' references go.
    /// Called where the kernel drains this CPU's batches: `MADV_FREE`, `MADV_COLD` and `MADV_PAGEOUT` first,
    /// `mlock_fixup` around its walk, the end of `populate_vma_page_range` (mlock, `MAP_POPULATE`, mprotect of
    /// a locked VMA), a full batch, and the kernel runner before it reads smaps. Unmapping does not drain:
    /// measured on 6.18, a page `MADV_FREE` queued, touched after a munmap, a `MAP_FIXED` mmap over another
    /// mapping or a `MADV_DONTNEED`, loses the touch at the runner's drain; a file page activated by the
    /// second zap of its young entry and zapped young twice more before a drain ends unreferenced.
    pub fn lru_add_drain(self: &Arc<Self>) {
        for b in self.lru_add.iter() {
            let moved = std::mem::take(&mut *b.lock());
            self.lru_add_move(&moved);
        }
        let batch = std::mem::take(&mut *self.lazyfree.lock());
        let activate = std::mem::take(&mut *self.activate.lock());
        self.activate_move(&activate);
        let mlock = std::mem::take(&mut *self.mlock.lock());
        if batch.is_empty() && mlock.is_empty() {
            return;
        }
        let mut put = Vec::with_capacity(batch.len() + mlock.len());
        for p in batch {
            let f = self.frame(Pfn(p));
            let flags = f.flags();
            // `lru_lazyfree` tests `folio_test_unevictable`, which a page mlocked since `MADV_FREE` does not pass
            // yet: its mlock batch drains after this one (`lru_add_drain_cpu`, then `mlock_drain_local`). A page
            // mlocked before never joined the batch (`MADV_FREE`'s own drain had made it unevictable).
            if flags.contains(FrameFlags::ANON.union(FrameFlags::SWAPBACKED)) {
                f.clear(FrameFlags::ACTIVE.union(FrameFlags::REFERENCED).union(FrameFlags::SWAPBACKED));
            }
            f.set(FrameFlags::LRU);
            put.push(p);
        }
        // `mlock_drain_local`, after the LRU batches: an mlocked page goes to the unevictable list, inactive
        // (`__mlock_folio`), an munlocked one comes back (`__munlock_folio`). A page not on an LRU list by now
        // is a new anonymous page of a locked VMA, which never joined an `lru_add` batch (`folio_add_lru_vma`
        // → `mlock_new_folio`): it goes to its list now (`__mlock_new_folio`, which leaves `PG_active`).
        for p in mlock {
            let f = self.frame(Pfn(p));
            let flags = f.flags();
            if !flags.contains(FrameFlags::LRU) {
                if flags.contains(FrameFlags::MLOCKED) {
                    f.set(FrameFlags::UNEVICTABLE);
                }
                f.set(FrameFlags::LRU);
            } else if flags.contains(FrameFlags::MLOCKED) {
                if !flags.contains(FrameFlags::UNEVICTABLE) {
                    f.clear(FrameFlags::ACTIVE);
                    f.set(FrameFlags::UNEVICTABLE);
                }
            } else {
                f.clear(FrameFlags::UNEVICTABLE);
            }
            put.push(p);
        }
        let mut tlb = crate::gather::MmuGather::new(self);
        for p in put {
            tlb.put_frame(Pfn(p));
        }
    }

    /// The references the lazy-free batch holds, by frame (whole-memory checks).
    pub(crate) fn batch_refs(&self) -> std::collections::HashMap<Pfn, u32> {
        let mut m = std::collections::HashMap::new();
        for &p in self.lazyfree.lock().iter().chain(self.mlock.lock().iter()) {
            *m.entry(Pfn(p)).or_insert(0) += 1;
        }
        m
    }

    /// `folio_mark_accessed` on `pfn`'s folio: a first access sets `PG_referenced`; a second one clears it
    /// and activates the folio, unless it is active already or unevictable (an mlocked one whose batch has not
    /// drained yet is not unevictable). A folio on an LRU list is activated through the CPU's activation batch
    /// (`folio_activate`: `PG_active` at its drain, [`Memory::lru_add_drain`]); one still in this CPU's
    /// `lru_add` batch becomes active at once (`__lru_cache_activate_folio`); one in no such place (queued
    /// in another batch, the activation batch included) only loses `PG_referenced`.
    pub(crate) fn mark_accessed(&self, pfn: Pfn) {
        let folio = self.folio(pfn);
        let flags = self.folio_flags(pfn);
        if !flags.contains(FrameFlags::REFERENCED) {
            folio.set(FrameFlags::REFERENCED);
        } else if !flags.contains(FrameFlags::ACTIVE) && !flags.contains(FrameFlags::UNEVICTABLE) {
            // Relaxed: see `Frame::head`.
            let head = match self.frame(pfn).head.load(Ordering::Relaxed) {
                0 => pfn,
                h => Pfn(h),
            };
            if folio.test_clear(FrameFlags::LRU) {
                folio.set(FrameFlags::ACTIVATE);
                let moved = {
                    let mut b = self.activate.lock();
                    b.push(head.0);
                    (b.len() >= LRU_BATCH || flags.order() > 0).then(|| std::mem::take(&mut *b))
                };
                if let Some(moved) = moved {
                    self.activate_move(&moved);
                }
            } else if self.lru_add[shard()].lock().contains(&head.0) {
                folio.set(FrameFlags::ACTIVE);
            }
            folio.clear(FrameFlags::REFERENCED);
        }
    }

    /// Takes the injection decision for one allocation. `false` = it must fail.
    #[inline]
    pub(crate) fn admit(&self) -> bool {
        // Relaxed: a test knob, changed only by the thread under test (a load and a store, as maple's).
        let c = self.fail_countdown.load(Ordering::Relaxed);
        if c != 0 {
            self.fail_countdown.store(c - 1, Ordering::Relaxed);
            if c == 1 {
                self.stats.add(INJECTED, 1);
                return false;
            }
        }
        true
    }

    /// Makes the `n`-th allocation from now fail (0 = the next one), once; `None` switches injection off.
    /// Every allocation of frames, contents, table pages and page-cache nodes counts.
    pub fn inject_alloc_failure(&self, n: Option<u64>) {
        // Relaxed: a test knob (see `admit`).
        self.fail_countdown.store(n.map_or(0, |n| n + 1), Ordering::Relaxed);
    }

    /// Allocates a frame described by `init`, with no contents. `None` = out of memory (or injected).
    pub(crate) fn alloc_frame(&self, init: FrameInit) -> Option<Pfn> {
        if !self.admit() {
            return None;
        }
        let pfn = self.take_free()?;
        let f = self.frame(pfn);
        // Relaxed: the frame is unreachable until its publication (an entry's Release store or the page
        // cache's mutex), which orders these stores.
        f.refcount.store(init.refcount, Ordering::Relaxed);
        f.mapcount.store(init.mapcount, Ordering::Relaxed);
        f.mapping.store(init.mapping, Ordering::Relaxed);
        f.index.store(init.index, Ordering::Relaxed);
        f.flags.store(init.flags.0, Ordering::Relaxed);
        f.head.store(0, Ordering::Relaxed);
        self.stats.add(FRAMES_ALLOC, 1);
        Some(pfn)
    }

    /// Pops a free PFN: this shard's list, else a refill from the shared list, else from the unused table, else
    /// another shard's list.
    fn take_free(&self) -> Option<Pfn> {
        let me = shard();
        if let Some(p) = self.free[me].lock().pop() {
            return Some(Pfn(p));
        }
        {
            let mut g = self.global_free.lock();
            if let Some(first) = g.pop() {
                let take = g.len().min(REFILL as usize - 1);
                let at = g.len() - take;
                let batch: Vec<u64> = g.drain(at..).collect();
                drop(g);
                self.free[me].lock().extend(batch);
                return Some(Pfn(first));
            }
        }
        // Refill from the never-used part of the table.
        {
            let mut next = self.grow.lock();
            if *next < self.max_frames {
                let end = (*next + REFILL).min(self.max_frames);
                let mut batch = Vec::with_capacity((end - *next) as usize);
                for pfn in *next..end {
                    let c = (pfn >> CHUNK_SHIFT) as usize;
                    // Relaxed: chunks are created under this lock.
                    if self.dir[c].load(Ordering::Relaxed).is_null() {
                        self.add_chunk(c);
                    }
                    batch.push(pfn);
                }
                *next = end;
                // Hand out the lowest, keep the rest in this shard in reverse so they pop in order.
                batch.reverse();
                let first = batch.pop();
                self.free[me].lock().extend(batch);
                return first.map(Pfn);
            }
        }
        // Steal half of another shard's list.
        let n = self.free.len();
        for k in 1..n {
            let other = (me + k) % n;
            let mut l = self.free[other].lock();
            if let Some(p) = l.pop() {
                let half = l.len() / 2;
                let at = l.len() - half;
                let moved: Vec<u64> = l.drain(at..).collect();
                drop(l);
                self.free[me].lock().extend(moved);
                return Some(Pfn(p));
            }
        }
        None
    }

    /// Frees a frame that was never published (no entry, page cache or walker can have seen it), whatever
    /// references the allocation gave it.
    pub(crate) fn free_unpublished(&self, pfn: Pfn) {
        // Relaxed: unpublished, ours alone.
        self.frame(pfn).refcount.store(0, Ordering::Relaxed);
        self.stats.add(FRAMES_RELEASED, 1);
        self.free_frames_released(&[pfn.0]);
    }

    /// Frees frames already counted as released, after their grace period: their contents go to the recycling
    /// cache and the PFNs back to this thread's free list.
    pub(crate) fn free_frames_released(&self, pfns: &[u64]) {
        if pfns.is_empty() {
            return;
        }
        let mut detached = 0i64;
        for &p in pfns {
            let f = self.frame(Pfn(p));
            debug_assert_eq!(f.refcount(), 0, "pgtable: freeing a referenced frame {p}");
            debug_assert!(!f.flags().contains(FrameFlags::FREE), "pgtable: double free of frame {p}");
            // Relaxed: after the grace period the frame is ours alone.
            f.flags.store(FrameFlags::FREE.0, Ordering::Relaxed);
            f.mapping.store(0, Ordering::Relaxed);
            f.head.store(0, Ordering::Relaxed);
            f.mapcount.store(0, Ordering::Relaxed);
            // Relaxed: ours alone (see above).
            let d = f.data.swap(std::ptr::null_mut(), Ordering::Relaxed);
            if !d.is_null() {
                detached += 1;
                self.keep_spare(f, d);
            }
        }
        self.stats.add(DATA_DETACHED, detached);
        let mut l = self.free[shard()].lock();
        l.extend_from_slice(pfns);
        if l.len() > PCP_HIGH {
            // `free_pcppages_bulk`: the oldest half goes back to the shared list.
            let half = l.len() / 2;
            let spill: Vec<u64> = l.drain(..half).collect();
            drop(l);
            self.global_free.lock().extend(spill);
        }
        self.stats.add(FRAMES_FREED, pfns.len() as i64);
    }

    /// A content buffer for frame `f`: its spare (zeroed if `zeroed`), else one from the arena (zeroed if
    /// `zeroed`). `None` = injected failure, or the system has no memory for a new chunk.
    fn alloc_data_buffer(&self, f: &Frame, zeroed: bool) -> Option<*mut PageData> {
        if !self.admit() {
            return None;
        }
        #[cfg(not(loom))]
        {
            // Acquire: pairs with the Release store in `keep_spare` (the buffer's last words are visible before we
            // overwrite them; the grace period already ordered them).
            let spare = f.spare.swap(std::ptr::null_mut(), Ordering::Acquire);
            if !spare.is_null() {
                if zeroed {
                    // SAFETY: a spare is unreachable and, once swapped out, ours alone; its atomics may be written
                    // non-atomically since no other thread can access them.
                    unsafe { std::ptr::write_bytes(spare, 0, 1) };
                }
                return Some(spare);
            }
            let (p, fresh) = self.arena.alloc()?;
            if fresh {
                self.stats.add(DATA_SYSTEM, 1);
            } else if zeroed {
                // SAFETY: a buffer from the arena's free list is unreachable and ours alone (as a spare above).
                unsafe { std::ptr::write_bytes(p, 0, 1) };
            }
            Some(p)
        }
        #[cfg(loom)]
        {
            let _ = (f, zeroed);
            self.stats.add(DATA_SYSTEM, 1);
            Some(Box::into_raw(Box::new(PageData {
                w: std::array::from_fn(|_| AtomicU64::new(0)),
                freed: vmspace_rcu::sync::AtomicBool::new(false),
            })))
        }
    }

    /// Keeps `p`, an unreachable buffer that was `f`'s contents or lost an installation race, as `f`'s spare
    /// (freed if `f` has one already).
    fn keep_spare(&self, f: &Frame, p: *mut PageData) {
        #[cfg(not(loom))]
        {
            // Release: pairs with the Acquire swap in `alloc_data_buffer`.
            let old = f.spare.swap(p, Ordering::Release);
            if !old.is_null() {
                self.free_data_now(old);
            }
        }
        #[cfg(loom)]
        {
            let _ = f;
            // SAFETY: loom keeps the buffer allocated and marks it, so that a late access fails the model.
            unsafe { &*p }.freed.store(true, Ordering::Relaxed);
        }
    }

    /// Installs `buf` as `pfn`'s contents unless a racing writer installed some first; returns the winner.
    fn install_data(&self, f: &Frame, buf: *mut PageData) -> &PageData {
        // AcqRel on success: Release publishes the buffer's words to readers' Acquire loads. Acquire on failure:
        // pairs with the winner's Release.
        match f.data.compare_exchange(std::ptr::null_mut(), buf, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                self.stats.add(DATA_ATTACHED, 1);
                // SAFETY: just installed; stays until the frame is freed (module docs).
                unsafe { &*buf }
            }
            Err(cur) => {
                self.keep_spare(f, buf);
                // SAFETY: as above, for the winner's buffer.
                unsafe { &*cur }
            }
        }
    }

    /// The contents of `pfn`, allocating zeroed contents on the first write. `None` = allocation failed.
    pub(crate) fn ensure_data(&self, pfn: Pfn) -> Option<&PageData> {
        debug_assert!(pfn != Pfn::ZERO, "the zero page is never written");
        let f = self.frame(pfn);
        if let Some(d) = f.data() {
            return Some(d);
        }
        let buf = self.alloc_data_buffer(f, true)?;
        Some(self.install_data(f, buf))
    }

    /// Gives `dst` (a new, unpublished frame) a copy of `src`'s contents (`copy_mc_user_highpage`). A source
    /// that was never written leaves `dst` without contents (zeroes). `Err` = allocation failed.
    pub(crate) fn copy_data(&self, src: Pfn, dst: Pfn) -> Result<(), ()> {
        let Some(s) = self.frame(src).data() else { return Ok(()) };
        let buf = self.alloc_data_buffer(self.frame(dst), false).ok_or(())?;
        #[cfg(not(loom))]
        {
            let d = buf as *mut u64;
            for i in 0..PAGE_WORDS {
                // SAFETY: the buffer is ours and unpublished (non-atomic stores into atomic words nobody else can
                // reach); the source words are read atomically since other threads may be writing them.
                unsafe { d.add(i).write(s.word(i)) };
            }
        }
        #[cfg(loom)]
        {
            // SAFETY: ours, unpublished.
            let b = unsafe { &*buf };
            for i in 0..PAGE_WORDS {
                b.set_word(i, s.word(i));
            }
        }
        let _ = self.install_data(self.frame(dst), buf);
        Ok(())
    }

    /// Reads `buf.len()` bytes of `pfn` at `off` (zeroes where the frame was never written).
    pub(crate) fn read_frame(&self, pfn: Pfn, off: usize, buf: &mut [u8]) {
        match self.frame(pfn).data() {
            Some(d) => d.read(off, buf),
            None => buf.fill(0),
        }
    }

    /// A new page-cache identity.
    pub(crate) fn new_mapping_id(&self) -> u64 {
        // Relaxed: unique numbers only.
        self.next_mapping.fetch_add(1, Ordering::Relaxed)
    }

    /// What frame `pfn` looks like now; `None` if the frame table has no such frame.
    pub fn frame_info(&self, pfn: Pfn) -> Option<FrameInfo> {
        let f = self.try_frame(pfn)?;
        Some(FrameInfo {
            refcount: f.refcount(),
            mapcount: f.mapcount(),
            flags: f.flags(),
            // Relaxed: a snapshot.
            mapping: f.mapping.load(Ordering::Relaxed),
            index: f.index.load(Ordering::Relaxed),
            has_data: f.data().is_some(),
            head: match f.head.load(Ordering::Relaxed) {
                0 => None,
                h => Some(Pfn(h)),
            },
        })
    }

    /// Reads `buf.len()` bytes of frame `pfn` at byte offset `off` (for tests and page-cache reads).
    ///
    /// ```compile_fail,E0133
    /// # use vmspace_pgtable::{Memory, MemoryConfig, Pfn};
    /// let mem = Memory::new(MemoryConfig::default());
    /// let mut buf = [0u8; 8];
    /// // Unsafe: the frame must not be freed (and its contents reused) during the read.
    /// mem.read_pfn(Pfn::ZERO, 0, &mut buf);
    /// ```
    ///
    /// # Safety
    ///
    /// The frame is not freed while the call runs: the caller holds a reference to it, or reached it through
    /// an entry inside an RCU read-side section that is still open, or stops every operation that could free
    /// it (a quiescent memory in a test). A freed frame's contents are recycled by non-atomic zeroing, which a
    /// read beside it would race with.
    pub unsafe fn read_pfn(&self, pfn: Pfn, off: usize, buf: &mut [u8]) {
        if self.try_frame(pfn).is_some() {
            self.read_frame(pfn, off, buf);
        } else {
            buf.fill(0);
        }
    }

    /// Every PFN the frame table has handed out at some time (for whole-memory checks in tests).
    pub fn frames_ever(&self) -> impl Iterator<Item = Pfn> {
        let end = *self.grow.lock();
        (1..end).map(Pfn)
    }

    /// Allocation counts (module docs).
    pub fn stats(&self) -> MemoryStats {
        let s = self.stats.sums().map(|v| v as u64);
        MemoryStats {
            frames_allocated: s[FRAMES_ALLOC],
            frames_in_use: s[FRAMES_ALLOC].wrapping_sub(s[FRAMES_RELEASED]),
            frames_pending_free: s[FRAMES_RELEASED].wrapping_sub(s[FRAMES_FREED]),
            tables_allocated: s[TABLES_ALLOC],
            tables_in_use: s[TABLES_ALLOC].wrapping_sub(s[TABLES_RELEASED]),
            tables_pending_free: s[TABLES_RELEASED].wrapping_sub(s[TABLES_FREED]),
            data_in_use: s[DATA_ATTACHED].wrapping_sub(s[DATA_DETACHED]),
            data_from_system: s[DATA_SYSTEM],
            cache_nodes_in_use: s[NODES_ALLOC].wrapping_sub(s[NODES_FREED]),
            frame_table_bytes: s[CHUNKS] * (CHUNK * std::mem::size_of::<Frame>()) as u64,
            injected_failures: s[INJECTED],
        }
    }
}

impl Drop for Memory {
    /// Frees the frame table. Content buffers go with the arena's chunks (`DataArena`'s drop); under loom each
    /// is freed here.
    fn drop(&mut self) {
        for slot in self.dir.iter() {
            // Relaxed: `&mut self`, no other user.
            let p = slot.load(Ordering::Relaxed);
            if p.is_null() {
                continue;
            }
            // SAFETY: the chunk is a leaked `Box<[Frame]>` of CHUNK descriptors (`add_chunk`).
            let chunk = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, CHUNK)) };
            #[cfg(loom)]
            for f in chunk.iter() {
                // Relaxed: exclusive access.
                let d = f.data.load(Ordering::Relaxed);
                if !d.is_null() {
                    self.free_data_now(d);
                }
            }
            drop(chunk);
        }
    }
}

/// Content buffers of one [`Memory`] (module docs): chunks of system memory cut into page-aligned buffers,
/// handed out in address order; buffers given back wait in a list for reuse. Chunks are unmapped only with the
/// memory, when no frame can refer to a buffer any more.
///
/// The first chunk is [`DATA_CHUNK_FIRST`] bytes and each next one twice the last, up to [`DATA_CHUNK`] (one
/// huge page): a memory that writes a few pages (a test, a fuzz input, a small process) costs a few small
/// mappings, not a 2 MiB huge page the host must zero, while a large one reaches huge-page chunks after five.
///
/// The mutex is taken only when a frame has no spare of its own, that is, while the machine's memory grows to
/// a new peak of frames with contents; in the steady state of a program that maps and unmaps, buffers recycle
/// through the frames' spares without it.
#[cfg(not(loom))]
#[derive(Default)]
struct DataArena {
    state: Mutex<ArenaState>,
}

/// Largest chunk of a [`DataArena`]: one huge page (Miri: 64 KiB, which it allocates and zeroes much faster).
#[cfg(not(any(loom, miri)))]
const DATA_CHUNK: usize = 2 << 20;
#[cfg(miri)]
const DATA_CHUNK: usize = 64 << 10;
/// First chunk of a [`DataArena`].
#[cfg(not(loom))]
const DATA_CHUNK_FIRST: usize = 64 << 10;

#[cfg(not(loom))]
#[derive(Default)]
struct ArenaState {
    /// Every chunk and its size, the last one being cut.
    chunks: Vec<(std::ptr::NonNull<u8>, usize)>,
    /// Buffers already cut from the last chunk.
    cut: usize,
    /// Buffers given back, not yet reused (zeroed again when reused).
    free: Vec<std::ptr::NonNull<PageData>>,
}

// SAFETY: the pointers name chunks owned by the arena and buffers nobody else refers to while they are listed
// here; they are only dereferenced by whoever takes them out under the mutex.
#[cfg(not(loom))]
unsafe impl Send for ArenaState {}

#[cfg(not(loom))]
impl DataArena {
    /// A buffer, and whether it is fresh from the system (then it is zero); `None` if the system has no memory.
    fn alloc(&self) -> Option<(*mut PageData, bool)> {
        let mut s = self.state.lock();
        if let Some(p) = s.free.pop() {
            return Some((p.as_ptr(), false));
        }
        let buf = std::mem::size_of::<PageData>();
        if s.chunks.last().is_none_or(|&(_, size)| s.cut == size / buf) {
            let size = s.chunks.last().map_or(DATA_CHUNK_FIRST, |&(_, size)| (2 * size).min(DATA_CHUNK));
            let c = vmspace_rcu::chunk::map(size)?;
            s.chunks.push((c, size));
            s.cut = 0;
        }
        let (base, _) = *s.chunks.last().expect("a chunk was just ensured");
        // SAFETY: `cut` is below the chunk's buffer count, so the buffer lies inside the chunk, which is mapped,
        // zeroed, aligned to its size (hence to the page) and not yet handed out.
        let p = unsafe { base.as_ptr().add(s.cut * buf) }.cast::<PageData>();
        s.cut += 1;
        Some((p, true))
    }

    /// Takes back a buffer nothing refers to.
    fn free(&self, p: *mut PageData) {
        if let Some(p) = std::ptr::NonNull::new(p) {
            self.state.lock().free.push(p);
        }
    }
}

#[cfg(not(loom))]
impl Drop for DataArena {
    fn drop(&mut self) {
        for (c, size) in self.state.get_mut().chunks.drain(..) {
            // SAFETY: mapped by `alloc` with this size; the arena's memory is being dropped, so no frame (and no
            // reader, which holds a reference to the memory) refers to a buffer any more.
            unsafe { vmspace_rcu::chunk::unmap(c, size) };
        }
    }
}

impl Memory {
    /// Gives back a buffer nothing can reach any more: a frame's second spare (and under loom, where buffers are
    /// boxes, every buffer at teardown).
    fn free_data_now(&self, p: *mut PageData) {
        #[cfg(not(loom))]
        self.arena.free(p);
        #[cfg(loom)]
        // SAFETY: a `Box<PageData>` from `alloc_data_buffer`; unreachable at teardown.
        drop(unsafe { Box::from_raw(p) });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn frames_are_counted_and_recycled() {
        let m = Memory::new(MemoryConfig::default());
        let a = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        let b = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, Pfn::ZERO);
        assert_eq!(m.stats().frames_in_use, 2);
        let info = m.frame_info(a).unwrap();
        assert_eq!((info.refcount, info.mapcount), (1, 1));
        assert!(info.flags.contains(FrameFlags::ANON.union(FrameFlags::ANON_EXCLUSIVE)));
        assert!(m.frame(a).put());
        m.free_unpublished(a);
        assert_eq!(m.stats().frames_in_use, 1);
        assert!(m.frame_info(a).unwrap().flags.contains(FrameFlags::FREE));
        // The freed frame comes back first (this thread's list).
        assert_eq!(m.alloc_frame(FrameInit::anon_mapped()), Some(a));
    }

    #[test]
    fn contents_appear_on_first_write_and_copy() {
        let m = Memory::new(MemoryConfig::default());
        let a = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        let mut buf = [9u8; 16];
        m.read_frame(a, 100, &mut buf);
        assert_eq!(buf, [0; 16]);
        assert_eq!(m.stats().data_in_use, 0);
        let d = m.ensure_data(a).unwrap();
        d.write(4093, b"abcdef"); // crosses the end of the page: the tail is dropped
        d.write(13, b"hello, world");
        m.read_frame(a, 13, &mut buf[..12]);
        assert_eq!(&buf[..12], b"hello, world");
        let mut tail = [0u8; 3];
        m.read_frame(a, 4093, &mut tail);
        assert_eq!(&tail, b"abc");
        let b = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        m.copy_data(a, b).unwrap();
        let mut c = [0u8; 12];
        m.read_frame(b, 13, &mut c);
        assert_eq!(&c, b"hello, world");
        assert_eq!(m.stats().data_in_use, 2);
        // Copying a never-written frame allocates nothing.
        let z = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        let w = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        m.copy_data(z, w).unwrap();
        assert_eq!(m.stats().data_in_use, 2);
        for p in [a, b, z, w] {
            assert!(m.frame(p).put());
            m.free_unpublished(p);
        }
        assert_eq!(m.stats().data_in_use, 0);
        // A recycled buffer comes back zeroed.
        let e = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        assert!(m.ensure_data(e).unwrap().is_zero());
    }

    #[test]
    fn contents_are_page_aligned_neighbours_and_a_returned_buffer_comes_back_zeroed() {
        let m = Memory::new(MemoryConfig::default());
        let a = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        let b = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        let da = std::ptr::from_ref(m.ensure_data(a).unwrap()).addr();
        let db = std::ptr::from_ref(m.ensure_data(b).unwrap()).addr();
        assert_eq!(da % PAGE_SIZE as usize, 0, "a buffer is one host page");
        assert_eq!(db, da + PAGE_SIZE as usize, "buffers are cut from the chunk in order");
        assert_eq!(m.stats().data_from_system, 2);
        // A buffer given back (a frame's second spare) is the next one handed out, zeroed.
        let (p, fresh) = m.arena.alloc().unwrap();
        assert!(fresh);
        // SAFETY: the buffer is ours alone.
        unsafe { &*p }.write(100, b"dirty");
        m.free_data_now(p);
        let c = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        let dc = m.ensure_data(c).unwrap();
        assert_eq!(std::ptr::from_ref(dc), p.cast_const());
        assert!(dc.is_zero());
        assert_eq!(m.stats().data_from_system, 2, "the returned buffer was not new");
    }

    #[test]
    fn injection_fails_exactly_the_nth_allocation() {
        let m = Memory::new(MemoryConfig::default());
        m.inject_alloc_failure(Some(1));
        assert!(m.alloc_frame(FrameInit::anon_mapped()).is_some());
        assert!(m.alloc_frame(FrameInit::anon_mapped()).is_none());
        assert!(m.alloc_frame(FrameInit::anon_mapped()).is_some());
        assert_eq!(m.stats().injected_failures, 1);
        assert_eq!(m.stats().frames_in_use, 2);
    }

    #[test]
    fn the_limit_is_out_of_memory() {
        let m = Memory::new(MemoryConfig { max_frames: 4, ..MemoryConfig::default() });
        let got: Vec<_> = (0..5).map(|_| m.alloc_frame(FrameInit::anon_mapped())).collect();
        assert_eq!(got.iter().filter(|p| p.is_some()).count(), 3, "PFN 0 is the zero page");
    }

    #[test]
    fn other_shards_lists_are_stolen_from() {
        let m = Memory::new(MemoryConfig { max_frames: 3, ..MemoryConfig::default() });
        let m2 = m.clone();
        // Another thread takes both frames and frees them into its own shard's list.
        std::thread::spawn(move || {
            let a = m2.alloc_frame(FrameInit::anon_mapped()).unwrap();
            let b = m2.alloc_frame(FrameInit::anon_mapped()).unwrap();
            for p in [a, b] {
                assert!(m2.frame(p).put());
                m2.free_unpublished(p);
            }
        })
        .join()
        .unwrap();
        assert!(m.alloc_frame(FrameInit::anon_mapped()).is_some());
        assert!(m.alloc_frame(FrameInit::anon_mapped()).is_some());
    }

    /// `folio_mark_accessed` against the CPU's batches (`mm/swap.c`): in the `lru_add` batch a second access
    /// activates at once; on an LRU list it queues the folio, which is active only at the drain, and two more
    /// accesses before it leave the folio unreferenced (scripts/regress/activate-batch-third-zap-clears-referenced.script).
    #[test]
    fn second_access_activates_by_batch() {
        let m = Memory::new(MemoryConfig::default());
        let state = |p: Pfn| {
            let f = m.frame(p).flags();
            (f.contains(FrameFlags::REFERENCED), f.contains(FrameFlags::ACTIVE), f.contains(FrameFlags::LRU))
        };
        let fresh = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        m.folio_add_lru(fresh);
        m.mark_accessed(fresh);
        m.mark_accessed(fresh);
        assert_eq!(state(fresh), (false, true, false));
        let p = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        m.folio_add_lru(p);
        m.lru_add_drain();
        assert_eq!(state(p), (false, false, true));
        m.mark_accessed(p);
        m.mark_accessed(p);
        assert_eq!(state(p), (false, false, false));
        m.mark_accessed(p);
        assert_eq!(state(p), (true, false, false));
        m.mark_accessed(p);
        assert_eq!(state(p), (false, false, false));
        m.lru_add_drain();
        assert_eq!(state(p), (false, true, true));
        assert!(!m.frame(p).flags().contains(FrameFlags::ACTIVATE));
        // A full `lru_add` batch moves by itself.
        let many: Vec<Pfn> =
            (0..LRU_BATCH).map(|_| m.alloc_frame(FrameInit::anon_mapped()).unwrap()).collect();
        for &q in &many {
            m.folio_add_lru(q);
        }
        assert!(many.iter().all(|&q| m.frame(q).flags().contains(FrameFlags::LRU)));
    }

    /// The mlock batch's drain puts an mlocked folio on the unevictable list inactive (`__mlock_folio`), so
    /// after munlock a second access activates it again (scripts/regress/mlock-drain-deactivates.script).
    #[test]
    fn mlock_drain_deactivates() {
        let m = Memory::new(MemoryConfig::default());
        let p = m.alloc_frame(FrameInit::anon_mapped()).unwrap();
        m.folio_add_lru(p);
        m.mark_accessed(p);
        m.mark_accessed(p);
        m.lru_add_drain();
        assert!(m.frame(p).flags().contains(FrameFlags::ACTIVE));
        m.mlock_folio(p, true);
        m.lru_add_drain();
        let f = m.frame(p).flags();
        assert!(f.contains(FrameFlags::UNEVICTABLE) && !f.contains(FrameFlags::ACTIVE));
        m.mlock_folio(p, false);
        m.lru_add_drain();
        m.mark_accessed(p);
        m.mark_accessed(p);
        m.lru_add_drain();
        let f = m.frame(p).flags();
        assert!(!f.contains(FrameFlags::UNEVICTABLE) && f.contains(FrameFlags::ACTIVE));
        assert!(!f.contains(FrameFlags::REFERENCED));
    }
}
