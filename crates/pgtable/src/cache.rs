//! The page cache of one file (`struct address_space`): its pages by index, its size, truncation, and the
//! registry of the mappings that map it (`i_mmap`).
//!
//! # Pages
//!
//! [`PageCache`] maps page indexes to frames in a small radix tree (64 slots per node, grown in height as the
//! file's pages reach further; the kernel's XArray in miniature), under one mutex (`i_pages`' lock and the
//! folio locks in one). Every page-cache frame carries the cache's id and its index, and holds one reference
//! for its slot. A page is created, zero-filled and without contents, the first time a fault or a write needs
//! it below the file's size (`filemap_fault` reading a hole, `shmem_get_folio` allocating one); it stays until
//! the file is truncated below it, reclaim evicts it (`MADV_PAGEOUT` of a clean page) or the cache is dropped.
//! There is no device: the cache is the file's contents, writeback only cleans pages (and records that their
//! blocks are allocated, which ext4's truncation tells apart from holes), and a page evicted after writeback
//! keeps its bytes in the cache's state until it is read in again (a page never written back was a hole).
//!
//! A shmem cache (`MAP_SHARED | MAP_ANONYMOUS` mappings, memfd, tmpfs) marks its frames swap-backed, which
//! smaps and the RSS counters tell apart from ordinary file pages.
//!
//! # Faults, truncation and the lock order
//!
//! The fault core holds the cache's mutex from the lookup of a page until the entry mapping it is installed
//! (cache mutex, then PTE lock), and refuses indexes at or beyond the size (`SIGBUS`). Truncation
//! ([`PageCache::truncate`], `truncate_setsize` + `truncate_pagecache`) sets the size under the mutex first,
//! then unmaps every page at or beyond the new end from every mapping (`unmap_mapping_range(.., even_cows =
//! 1)`: private copies included, since they shadow file contents that no longer exist), then removes the pages
//! from the cache (`truncate_inode_pages_range`), zeroing the tail of a partial last page. A fault that looked
//! the page up before the size changed has installed its entry before the unmap starts (it held the mutex), and
//! one that comes later sees the new size: no entry beyond the end survives, without the kernel's second unmap.
//!
//! # The i_mmap registry
//!
//! Truncation must reach every address space that maps the file. The caller (the address space, which owns
//! VMAs) registers each file VMA's page table, range, file offset and recency with [`PageCache::i_mmap_insert`]
//! when the VMA is linked and keeps the record current ([`PageCache::i_mmap_update`] on split, merge, move or a
//! change of the VMA's `VM_SEQ_READ` / `VM_RAND_READ` flags,
//! [`PageCache::i_mmap_remove`] when the VMA goes), as the kernel's `vma_interval_tree_insert` /
//! `vma_interval_tree_remove` under `i_mmap_rwsem` do. Truncation zaps through the registry while holding its
//! mutex (registry, then PTE locks), so an update waits for a truncation in progress. The caller must remove a
//! record before it frees the range's page tables (`free_pgtables` unlinks the file VMA first) and must keep
//! the record valid while the range's entries can exist.
//!
//! Lock order: cache mutex → PTE locks; registry mutex → PTE locks; the two mutexes are never held together.

use std::sync::Arc;

use vmspace_abi::Errno;
use vmspace_rcu::sync::{Mutex, MutexGuard};

use crate::arch::{PAGE_SIZE, Pfn};
use crate::frame::{FrameFlags, FrameInit, Memory, NODES_ALLOC, NODES_FREED};
use crate::gather::MmuGather;
use crate::pgtable::PageTable;
use crate::readahead::{Bdi, RaState};
use crate::zap::ZapDetails;

/// log2 of the slots of one radix node.
const RADIX_SHIFT: u32 = 6;
const RADIX: usize = 1 << RADIX_SHIFT;

/// The page ext4 caches when a truncation from `old` to `new` bytes zeroes a partial block through the page
/// cache (`ext4_setattr`; `ext4_truncate` → `ext4_block_truncate_page`): the page of the new end of file when
/// the file shrinks or keeps its size and the new size is not block-aligned, the page of the old end of file
/// when it grows from a size that is not. The engine's block is the page. Measured on Linux 6.18 / ext4 (a
/// truncation from 8 pages to 0x1800 bytes, or a growth from 0x1800 bytes, leaves page 1 cached and unread).
pub fn partial_block_page(old: u64, new: u64) -> Option<u64> {
    let at = if new <= old { new } else { old };
    (at % PAGE_SIZE != 0).then_some(at / PAGE_SIZE)
}

/// A radix node: leaves hold PFNs (0 = empty), inner nodes children.
enum Node {
    Leaf(Box<[u64; RADIX]>),
    Inner(Box<[Option<Node>; RADIX]>),
}

/// The index → PFN map. Nodes are counted in the [`Memory`]'s statistics and pass its injection point.
struct Radix {
    root: Option<Node>,
    /// Levels: the root covers `RADIX^height` indexes (0 when empty).
    height: u32,
    count: u64,
}

fn capacity(height: u32) -> u128 {
    1u128 << (RADIX_SHIFT * height)
}

fn digit(index: u64, level: u32) -> usize {
    ((index >> (RADIX_SHIFT * level)) as usize) & (RADIX - 1)
}

impl Radix {
    const fn new() -> Radix {
        Radix { root: None, height: 0, count: 0 }
    }

    fn get(&self, index: u64) -> Option<Pfn> {
        if u128::from(index) >= capacity(self.height) {
            return None;
        }
        let mut n = self.root.as_ref()?;
        let mut level = self.height - 1;
        loop {
            match n {
                Node::Leaf(s) => {
                    let v = s[digit(index, 0)];
                    return (v != 0).then_some(Pfn(v));
                }
                Node::Inner(c) => {
                    n = c[digit(index, level)].as_ref()?;
                    level -= 1;
                }
            }
        }
    }

    /// New nodes an insertion at `index` needs.
    fn nodes_needed(&self, index: u64) -> u32 {
        let mut h = self.height.max(1);
        while u128::from(index) >= capacity(h) {
            h += 1;
        }
        let Some(root) = self.root.as_ref() else { return h };
        if h > self.height {
            // New roots above the old one, and the path below the top diverges from the old root (child 0).
            return (h - self.height) + (h - 1);
        }
        let mut n = root;
        let mut level = h - 1;
        loop {
            match n {
                Node::Leaf(_) => return 0,
                Node::Inner(c) => match c[digit(index, level)].as_ref() {
                    Some(child) => {
                        n = child;
                        level -= 1;
                    }
                    None => return level,
                },
            }
        }
    }

    fn new_node(level: u32, stats: &Memory) -> Node {
        stats.stats.add(NODES_ALLOC, 1);
        if level == 0 {
            Node::Leaf(Box::new([0; RADIX]))
        } else {
            Node::Inner(Box::new(std::array::from_fn(|_| None)))
        }
    }

    /// Inserts `pfn` at the empty `index`, allocating nodes. Errors: `ENOMEM` (nothing changed).
    fn insert(&mut self, index: u64, pfn: Pfn, mem: &Memory) -> Result<(), Errno> {
        let need = self.nodes_needed(index);
        for _ in 0..need {
            if !mem.admit() {
                return Err(Errno::ENOMEM);
            }
        }
        let mut h = self.height.max(1);
        while u128::from(index) >= capacity(h) {
            h += 1;
        }
        match self.root.take() {
            None => self.root = Some(Self::new_node(h - 1, mem)),
            Some(old) => {
                let mut r = old;
                for level in self.height..h {
                    let Node::Inner(mut c) = Self::new_node(level, mem) else { unreachable!("inner level") };
                    c[0] = Some(r);
                    r = Node::Inner(c);
                }
                self.root = Some(r);
            }
        }
        self.height = h;
        let mut n = self.root.as_mut().expect("root exists");
        let mut level = h - 1;
        loop {
            match n {
                Node::Leaf(s) => {
                    debug_assert_eq!(s[digit(index, 0)], 0);
                    s[digit(index, 0)] = pfn.0;
                    self.count += 1;
                    return Ok(());
                }
                Node::Inner(c) => {
                    let slot = &mut c[digit(index, level)];
                    if slot.is_none() {
                        *slot = Some(Self::new_node(level - 1, mem));
                    }
                    n = slot.as_mut().expect("just filled");
                    level -= 1;
                }
            }
        }
    }

    /// Every entry, as `(index, pfn)`, in index order.
    /// Whether any index of `[first, last]` holds a page: a descent that skips empty subtrees, so a sparse
    /// range costs its populated nodes, not its length.
    fn any_in(&self, first: u64, last: u64) -> bool {
        fn rec(n: &Node, level: u32, base: u64, first: u64, last: u64) -> bool {
            let span = 1u64.checked_shl(RADIX_SHIFT * level).unwrap_or(0);
            // The slots of this node that overlap [first, last] (base is the node's first index).
            let lo = if first > base { digit(first, level) } else { 0 };
            let hi = match span.checked_mul(RADIX as u64).and_then(|w| base.checked_add(w - 1)) {
                Some(node_last) if last < node_last => digit(last, level),
                _ => RADIX - 1,
            };
            match n {
                Node::Leaf(s) => s[lo..=hi].iter().any(|&v| v != 0),
                Node::Inner(c) => (lo..=hi).any(|i| {
                    c[i].as_ref().is_some_and(|child| {
                        rec(child, level - 1, base.wrapping_add((i as u64).wrapping_mul(span)), first, last)
                    })
                }),
            }
        }
        if first > last || u128::from(first) >= capacity(self.height) {
            return false;
        }
        let last =
            if u128::from(last) >= capacity(self.height) { (capacity(self.height) - 1) as u64 } else { last };
        self.root.as_ref().is_some_and(|root| rec(root, self.height - 1, 0, first, last))
    }

    fn entries(&self) -> Vec<(u64, Pfn)> {
        fn rec(n: &Node, level: u32, base: u64, out: &mut Vec<(u64, Pfn)>) {
            let span = 1u64.checked_shl(RADIX_SHIFT * level).unwrap_or(0);
            match n {
                Node::Leaf(s) => out.extend(
                    s.iter().enumerate().filter(|(_, v)| **v != 0).map(|(i, v)| (base + i as u64, Pfn(*v))),
                ),
                Node::Inner(c) => {
                    for (i, child) in c.iter().enumerate() {
                        if let Some(child) = child {
                            rec(child, level - 1, base.wrapping_add((i as u64).wrapping_mul(span)), out);
                        }
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(self.count as usize);
        if let Some(root) = self.root.as_ref() {
            rec(root, self.height - 1, 0, &mut out);
        }
        out
    }

    /// Removes every entry in `[first, last]` into `out` (as `(index, pfn)`), freeing nodes left empty.
    fn drain(&mut self, first: u64, last: u64, mem: &Memory, out: &mut Vec<(u64, Pfn)>) {
        fn rec(
            n: &mut Node,
            level: u32,
            base: u64,
            first: u64,
            last: u64,
            mem: &Memory,
            out: &mut Vec<(u64, Pfn)>,
        ) -> bool {
            let span = 1u64.checked_shl(RADIX_SHIFT * level).unwrap_or(0);
            match n {
                Node::Leaf(s) => {
                    for (i, v) in s.iter_mut().enumerate() {
                        let idx = base + i as u64;
                        if *v != 0 && idx >= first && idx <= last {
                            out.push((idx, Pfn(*v)));
                            *v = 0;
                        }
                    }
                    s.iter().all(|&v| v == 0)
                }
                Node::Inner(c) => {
                    for (i, slot) in c.iter_mut().enumerate() {
                        // u128: the top node of a tall tree spans more than the u64 index space.
                        let lo = u128::from(base) + i as u128 * u128::from(span);
                        let hi = lo + u128::from(span) - 1;
                        if hi < u128::from(first) || lo > u128::from(last) {
                            continue;
                        }
                        let lo = lo as u64;
                        if let Some(child) = slot.as_mut()
                            && rec(child, level - 1, lo, first, last, mem, out)
                        {
                            *slot = None;
                            mem.stats.add(NODES_FREED, 1);
                        }
                    }
                    c.iter().all(|s| s.is_none())
                }
            }
        }
        let before = out.len();
        if let Some(root) = self.root.as_mut()
            && rec(root, self.height - 1, 0, first, last, mem, out)
        {
            self.root = None;
            self.height = 0;
            mem.stats.add(NODES_FREED, 1);
        }
        self.count -= (out.len() - before) as u64;
    }
}

/// One registered mapping of the file (a file VMA): `[start, end)` of `pt` maps the file from page `pgoff`.
#[derive(Clone)]
pub struct FileMapping {
    /// The mapping address space's page table.
    pub pt: Arc<PageTable>,
    /// First address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// File page mapped at `start`.
    pub pgoff: u64,
    /// The VMA has recency ([`crate::vma_has_recency`] of its flags): a zap through the registry marks young
    /// pages accessed ([`ZapDetails::recency`]). `madvise` can change it without a range change; the caller keeps
    /// it current with [`PageCache::i_mmap_update`].
    pub recency: bool,
}

impl std::fmt::Debug for FileMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FileMapping({:#x}-{:#x} pgoff {} recency {})",
            self.start, self.end, self.pgoff, self.recency
        )
    }
}

/// A registration in a page cache's [`FileMapping`] registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MappingId(u64);

impl MappingId {
    /// The id as a number (never 0), for a caller that keeps it in an atomic word.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The id [`MappingId::get`] returned.
    pub fn from_raw(v: u64) -> MappingId {
        MappingId(v)
    }
}

struct State {
    size: u64,
    pages: Radix,
    /// The open file's readahead state (`file->f_ra`; `crate::readahead`).
    ra: RaState,
    /// The bytes of pages that reclaim evicted after writeback (the file's blocks on disk, for the pages not
    /// cached): a page read in again gets them back. Pages never written back have no entry (a hole, or
    /// contents that only ever lived in the cache).
    evicted: std::collections::BTreeMap<u64, Vec<u8>>,
    /// The pages whose block is allocated on disk: written back at least once, and not truncated away or
    /// punched out since. The runner's files start sparse, and ext4 allocates a block when it writes a page
    /// back (a dirty page's block is reserved by delayed allocation, which counts as mapped, but such a page is
    /// dirty anyway). Truncation's zeroing of the partial block dirties the page of an allocated block only
    /// ([`PageCache::truncate`]).
    on_disk: std::collections::BTreeSet<u64>,
    /// Whether a large folio was ever made here (removals then split the folios they cut).
    has_large: bool,
}

impl State {
    /// Removes pages `[first, last]` into `out`, splitting first every large folio with a page among them
    /// (`split_folio`, as truncation and reclaim of part of a folio do): the pages left of a folio cut at either
    /// end become folios of one page each, inheriting its state, and no longer mapped (`unmap` is called with
    /// each split folio's pages: splitting a mapped file folio unmaps it everywhere, `unmap_folio`).
    fn remove(
        &mut self,
        first: u64,
        last: u64,
        mem: &Memory,
        out: &mut Vec<(u64, Pfn)>,
        unmap: &dyn Fn(u64, u64),
    ) {
        if self.has_large {
            let cut: Vec<(u64, Pfn)> = self
                .pages
                .entries()
                .into_iter()
                .filter(|&(i, p)| (first..=last).contains(&i) && mem.frame(p).flags().order() > 0)
                .collect();
            for (i, p) in cut {
                self.split_folio(i, p, mem, unmap);
            }
        }
        self.pages.drain(first, last, mem, out);
    }

    /// `split_folio` of the large folio holding page `index` (`pfn`): its pages are unmapped from every mapping
    /// first (`unmap_folio`: a file folio is not remapped after the split, unlike an anonymous one), then every
    /// page becomes a folio of its own, the tails taking the head's dirty, referenced, active, LRU and
    /// up-to-date state (`__split_folio_to_order` copies those, not `PG_readahead`, which stays on the head). Nothing for a
    /// folio of one page.
    fn split_folio(&mut self, index: u64, pfn: Pfn, mem: &Memory, unmap: &dyn Fn(u64, u64)) {
        let order = mem.frame(pfn).flags().order();
        if order == 0 {
            return;
        }
        let n = 1u64 << order;
        let first = index & !(n - 1);
        unmap(first, first + n - 1);
        let head = mem.folio(pfn);
        let copied =
            FrameFlags::FOLIO_STATE.bits() & !FrameFlags::READAHEAD.bits() & !FrameFlags::ACTIVATE.bits();
        let state = head.flags().bits() & copied;
        for j in first..first + n {
            if let Some(q) = self.pages.get(j) {
                let f = mem.frame(q);
                f.set(FrameFlags::from_bits(state));
                f.set_order(0);
                // Relaxed: under the cache's mutex, as `Frame::head`'s writes are.
                f.head.store(0, vmspace_rcu::sync::Ordering::Relaxed);
            }
        }
    }
}

struct IMmap {
    next: u64,
    maps: Vec<(u64, FileMapping)>,
}

/// A file's page cache (module docs).
pub struct PageCache {
    mem: Arc<Memory>,
    id: u64,
    shmem: bool,
    /// The backing device's readahead settings ([`Bdi::NONE`] for shmem).
    bdi: Bdi,
    state: Mutex<State>,
    i_mmap: Mutex<IMmap>,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("id", &self.id)
            .field("shmem", &self.shmem)
            .field("size", &self.size())
            .field("pages", &self.nr_pages())
            .finish()
    }
}

/// Why a page could not be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PageError {
    /// At or beyond the end of the file (`VM_FAULT_SIGBUS`).
    BeyondEof,
    /// Allocation failed (`VM_FAULT_OOM`).
    NoMem,
}

/// The cache's mutex, held (the fault core's view).
pub(crate) struct CacheGuard<'a> {
    cache: &'a PageCache,
    st: MutexGuard<'a, State>,
}

impl CacheGuard<'_> {
    /// The memory the pages live in.
    pub(crate) fn memory(&self) -> &Arc<Memory> {
        &self.cache.mem
    }

    /// The backing device's readahead settings.
    pub(crate) fn bdi(&self) -> Bdi {
        self.cache.bdi
    }

    /// Whether the file is shmem (`shmem_fault` never reads ahead; `filemap_fault` does).
    pub(crate) fn is_shmem(&self) -> bool {
        self.cache.shmem
    }

    /// Records that a large folio exists here (removals must split).
    pub(crate) fn note_large_folio(&mut self) {
        self.st.has_large = true;
    }

    /// The open file's readahead state.
    pub(crate) fn ra_state(&mut self) -> &mut RaState {
        &mut self.st.ra
    }

    /// Whether any page of `[first, last]` is cached.
    pub(crate) fn any_cached(&self, first: u64, last: u64) -> bool {
        self.st.pages.any_in(first, last)
    }

    /// A new zero-filled page at `index` (free, below the end of the file) with `extra` flags (the readahead
    /// mark), not mapped anywhere.
    pub(crate) fn add_page(&mut self, index: u64, extra: FrameFlags) -> Result<Pfn, PageError> {
        debug_assert!(self.st.pages.get(index).is_none() && index < self.size_pages());
        let c = self.cache;
        let flags = if c.shmem { FrameFlags::SWAPBACKED } else { FrameFlags::default() };
        let init = FrameInit { flags: flags.union(extra), mapping: c.id, index, refcount: 1, mapcount: 0 };
        let pfn = c.mem.alloc_frame(init).ok_or(PageError::NoMem)?;
        // Read from "disk": the bytes an eviction kept.
        if let Some(bytes) = self.st.evicted.get(&index) {
            let Some(d) = c.mem.ensure_data(pfn) else {
                c.mem.free_unpublished(pfn);
                return Err(PageError::NoMem);
            };
            d.write(0, bytes);
        }
        if self.st.pages.insert(index, pfn, &c.mem).is_err() {
            c.mem.free_unpublished(pfn);
            return Err(PageError::NoMem);
        }
        self.st.evicted.remove(&index);
        // `filemap_add_folio` → `folio_add_lru`; a large folio's head joins once its pages are made.
        if extra.order() == 0 {
            c.mem.folio_add_lru(pfn);
        }
        Ok(pfn)
    }

    /// `filemap_read_folio` of a page found not up to date (module docs, "Pages not up to date"): read, so
    /// up to date from now on.
    pub(crate) fn read_folio(&mut self, pfn: Pfn) {
        self.cache.mem.folio(pfn).clear(FrameFlags::NOT_UPTODATE);
    }

    /// Removes pages `[first, last]`, which no entry maps, from the cache and frees them (a folio whose
    /// allocation failed half-way; reclaim of clean pages).
    pub(crate) fn remove_unmapped(&mut self, first: u64, last: u64) {
        let mut removed = Vec::new();
        // A folio whose allocation failed half-way: never mapped.
        self.st.remove(first, last, &self.cache.mem, &mut removed, &|_, _| {});
        self.cache.release_pages(removed);
    }

    /// The file's size in pages, rounded up.
    pub(crate) fn size_pages(&self) -> u64 {
        self.st.size.div_ceil(PAGE_SIZE)
    }

    /// The page at `index` if cached.
    pub(crate) fn find(&self, index: u64) -> Option<Pfn> {
        self.st.pages.get(index)
    }

    /// The page at `index`, created zero-filled if missing (`filemap_fault`, `shmem_fault`). The cache's mutex
    /// keeps it cached while the guard lives.
    pub(crate) fn find_or_create(&mut self, index: u64) -> Result<Pfn, PageError> {
        if index >= self.size_pages() {
            return Err(PageError::BeyondEof);
        }
        if let Some(p) = self.st.pages.get(index) {
            return Ok(p);
        }
        self.add_page(index, FrameFlags::default())
    }
}

impl PageCache {
    /// A new, empty cache of a file of `size` bytes in `mem`; `shmem` for tmpfs, memfd and shared anonymous
    /// memory (no readahead). A regular file reads ahead as a block device does by default ([`Bdi`]).
    pub fn new(mem: &Arc<Memory>, size: u64, shmem: bool) -> PageCache {
        PageCache::with_bdi(mem, size, shmem, if shmem { Bdi::NONE } else { Bdi::default() })
    }

    /// [`PageCache::new`] on a device with the readahead settings `bdi` (`file_ra_state_init` at open).
    pub fn with_bdi(mem: &Arc<Memory>, size: u64, shmem: bool, bdi: Bdi) -> PageCache {
        PageCache {
            mem: Arc::clone(mem),
            id: mem.new_mapping_id(),
            shmem,
            bdi,
            state: Mutex::new(State {
                size,
                pages: Radix::new(),
                ra: RaState::new(&bdi),
                evicted: std::collections::BTreeMap::new(),
                on_disk: std::collections::BTreeSet::new(),
                has_large: false,
            }),
            i_mmap: Mutex::new(IMmap { next: 1, maps: Vec::new() }),
        }
    }

    /// The memory its pages live in.
    pub fn memory(&self) -> &Arc<Memory> {
        &self.mem
    }

    /// The id its frames carry as their mapping ([`crate::FrameInfo::mapping`]).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether the pages are swap-backed (shmem).
    pub fn is_shmem(&self) -> bool {
        self.shmem
    }

    /// The file's size in bytes (`i_size_read`).
    pub fn size(&self) -> u64 {
        self.state.lock().size
    }

    /// Pages in the cache (`mapping->nrpages`).
    pub fn nr_pages(&self) -> u64 {
        self.state.lock().pages.count
    }

    /// The page cached at `index`, if any.
    pub fn page(&self, index: u64) -> Option<Pfn> {
        self.state.lock().pages.get(index)
    }

    /// Whether any page of `[first, last]` is cached (one lock, empty subtrees skipped).
    pub fn has_pages(&self, first: u64, last: u64) -> bool {
        self.state.lock().pages.any_in(first, last)
    }

    /// Every cached page, as `(index, pfn)` in index order (a snapshot, for whole-memory checks).
    pub fn pages(&self) -> Vec<(u64, Pfn)> {
        self.state.lock().pages.entries()
    }

    pub(crate) fn lock(&self) -> CacheGuard<'_> {
        CacheGuard { cache: self, st: self.state.lock() }
    }

    /// Reads up to `buf.len()` bytes at `offset`, stopping at the end of the file (`read(2)`); returns the
    /// bytes read. Holes read as zeroes.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> usize {
        let st = self.state.lock();
        let n = st.size.saturating_sub(offset).min(buf.len() as u64) as usize;
        let mut done = 0;
        while done < n {
            let o = offset + done as u64;
            let off = (o % PAGE_SIZE) as usize;
            let k = (PAGE_SIZE as usize - off).min(n - done);
            match st.pages.get(o / PAGE_SIZE) {
                Some(p) => {
                    // `filemap_read` reads a page that is not up to date first.
                    self.mem.folio(p).clear(FrameFlags::NOT_UPTODATE);
                    self.mem.read_frame(p, off, &mut buf[done..done + k]);
                }
                None => match st.evicted.get(&(o / PAGE_SIZE)) {
                    Some(b) => buf[done..done + k].copy_from_slice(&b[off..off + k]),
                    None => buf[done..done + k].fill(0),
                },
            }
            done += k;
        }
        n
    }

    /// Writes `data` at `offset`, extending the file if it ends beyond (`write(2)` into the cache: the pages
    /// are created and dirtied). Returns the bytes written; a write that cannot allocate stops short and fails
    /// with `ENOMEM` only if it wrote nothing, as `write(2)` does. The size grows only over what was written.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<usize, Errno> {
        let mut g = self.lock();
        let mut done = 0;
        while done < data.len() {
            let o = offset + done as u64;
            let off = (o % PAGE_SIZE) as usize;
            let k = (PAGE_SIZE as usize - off).min(data.len() - done);
            let index = o / PAGE_SIZE;
            let old_size = g.st.size;
            g.st.size = g.st.size.max(index * PAGE_SIZE + 1);
            let page = match g.find_or_create(index) {
                Ok(p) => p,
                Err(_) => {
                    g.st.size = old_size;
                    break;
                }
            };
            let Some(d) = self.mem.ensure_data(page) else {
                g.st.size = old_size;
                break;
            };
            d.write(off, &data[done..done + k]);
            self.mem.folio(page).set(FrameFlags::DIRTY);
            // `write_begin` reads a page that is not up to date (a whole-page write needs nothing read).
            self.mem.folio(page).clear(FrameFlags::NOT_UPTODATE);
            g.st.size = old_size.max(o + k as u64);
            done += k;
        }
        if done == 0 && !data.is_empty() { Err(Errno::ENOMEM) } else { Ok(done) }
    }

    /// Sets the size (`truncate_setsize` + `truncate_pagecache`, module docs): shrinking unmaps every page at
    /// or beyond the new end from every registered mapping, private copies included, drops them from the cache
    /// and zeroes the tail of a partial last page; growing zeroes the tail of the old size's partial last page
    /// (bytes a shared mapping stored beyond the old end of file read back as zeroes, to the end of the page
    /// even when the new size ends inside it: ext4's extending `ext4_setattr` on Linux 6.18, measured; the
    /// file system's block is the page here). Allocates nothing.
    ///
    /// A dirty large folio across the new end of a regular file stays whole (`truncate_inode_partial_folio`
    /// cannot split it: ext4's dirty buffers cannot be released), unmapped everywhere (the failed split unmapped it
    /// first), its pages past the end zeroed and still cached, so growing the file again exposes them dirty.
    ///
    /// A regular file then zeroes its partial block through the cache ([`partial_block_page`]; ext4's
    /// `__ext4_block_zero_page_range`): a hole's page is cached unread if it was not cached, and the page of a
    /// block allocated by an earlier writeback is read if needed and dirtied.
    pub fn truncate(&self, new_size: u64) {
        let old = {
            let mut st = self.state.lock();
            std::mem::replace(&mut st.size, new_size)
        };
        if new_size >= old {
            if new_size > old {
                self.zero_partial(old, None);
            }
        } else {
            let first = new_size.div_ceil(PAGE_SIZE);
            self.unmap_mapping_range(first, u64::MAX, true);
            // `truncate_inode_partial_folio`: a dirty large folio across the new end cannot be split (ext4's
            // dirty buffers cannot be released), so it stays whole, its pages past the end zeroed and cached.
            let kept = self.unsplittable_tail(first);
            if kept > first {
                // The failed split has unmapped the whole folio first (`unmap_folio`; a file folio is not
                // remapped), its pages before the new end too.
                self.unmap_mapping_range(self.folio_head(first), kept - 1, false);
            }
            for i in first..kept {
                self.zero_page(i);
            }
            self.drop_pages(kept, u64::MAX);
            {
                let mut st = self.state.lock();
                st.evicted.retain(|&i, _| i < first);
                st.on_disk.retain(|&i| i < first);
            }
            self.zero_partial(new_size, None);
        }
        if !self.shmem
            && let Some(index) = partial_block_page(old, new_size)
        {
            self.zero_partial_block(index);
        }
    }

    /// ext4's zeroing of the partial block at the end of file through the page cache
    /// (`__ext4_block_zero_page_range`, after [`PageCache::zero_partial`] zeroed the bytes): the page is looked
    /// up or created (`FGP_CREAT | FGP_ACCESSED`: a cached page is marked accessed, `folio_mark_accessed`, which
    /// activates one already referenced; a created one is referenced). A hole's block stays unmapped: a page
    /// created for it stays not up to date ([`PageCache::cache_not_uptodate`]), a cached one clean. An allocated
    /// block is read if the page is not cached, zeroed and marked dirty (`mark_buffer_dirty`), so the page is
    /// dirty again after a writeback.
    fn zero_partial_block(&self, index: u64) {
        {
            let mut g = self.lock();
            if index < g.size_pages() && g.st.on_disk.contains(&index) {
                let page = match g.find(index) {
                    Some(p) => {
                        self.mem.mark_accessed(p);
                        Some(p)
                    }
                    // Read from disk: `add_page` takes the bytes an eviction kept (already zeroed past the end).
                    // An allocation failure leaves it uncached, as a failed `__filemap_get_folio` fails the
                    // zeroing quietly here.
                    None => g.add_page(index, FrameFlags::REFERENCED).ok(),
                };
                if let Some(p) = page {
                    self.mem.folio(p).set(FrameFlags::DIRTY);
                }
                return;
            }
        }
        self.cache_not_uptodate(index);
    }

    /// The end (exclusive) of the dirty large folio of a regular file holding pages `first - 1` and `first`, or
    /// `first` if there is none (module docs of [`PageCache::truncate`]).
    fn unsplittable_tail(&self, first: u64) -> u64 {
        if self.shmem || first == 0 {
            return first;
        }
        let st = self.state.lock();
        let Some(p) = st.pages.get(first) else { return first };
        let order = self.mem.frame(p).flags().order();
        let n = 1u64 << order;
        let head = first & !(n - 1);
        if order == 0 || head == first || !self.mem.folio_flags(p).contains(FrameFlags::DIRTY) {
            return first;
        }
        head + n
    }

    /// The first page of the folio holding cached page `index` (`index` itself if it is not cached).
    fn folio_head(&self, index: u64) -> u64 {
        let st = self.state.lock();
        st.pages.get(index).map_or(index, |p| index & !((1u64 << self.mem.frame(p).flags().order()) - 1))
    }

    /// Zeroes cached page `index`'s contents (a page past the end of file kept in its folio).
    fn zero_page(&self, index: u64) {
        let st = self.state.lock();
        if let Some(p) = st.pages.get(index)
            && let Some(d) = self.mem.frame(p).data()
        {
            d.write(0, &vec![0u8; PAGE_SIZE as usize]);
        }
    }

    /// The lookup of page `index` (below the end of file) that ext4's zeroing of a hole's partial block makes
    /// (`__filemap_get_folio(FGP_CREAT | FGP_ACCESSED)`): a cached page is marked accessed
    /// (`folio_mark_accessed`), a missing one cached not up to date (module docs, "Pages not up to date") and
    /// referenced. An allocation failure leaves it uncached, as the kernel's `__filemap_get_folio` failure fails
    /// the truncation's zeroing quietly here.
    pub fn cache_not_uptodate(&self, index: u64) {
        let mut g = self.lock();
        if index < g.size_pages() {
            match g.find(index) {
                Some(p) => self.mem.mark_accessed(p),
                None => {
                    let _ = g.add_page(index, FrameFlags::NOT_UPTODATE.union(FrameFlags::REFERENCED));
                }
            }
        }
    }

    /// Punches a hole of `[offset, offset + len)` (`truncate_pagecache_range`, for `fallocate(PUNCH_HOLE)` and
    /// `MADV_REMOVE`): whole pages are unmapped from every mapping and dropped, partial pages zeroed over the
    /// hole; private copies made from the pages stay (`unmap_mapping_range` without `even_cows`, unlike
    /// truncation; the live kernel keeps them, for shmem and ext4 alike). The size does not change.
    pub fn punch_hole(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = offset.saturating_add(len);
        let first = offset.div_ceil(PAGE_SIZE);
        let last_excl = end / PAGE_SIZE;
        if first < last_excl {
            let mut removed = Vec::new();
            {
                // The size does not change, so unlike truncation nothing stops a fault from mapping a page of
                // the hole again between the unmap and the removal, but for the cache's mutex: a fault looks a
                // page up and maps it under it (lock order: cache mutex, then the registry's, then PTE locks).
                let mut st = self.state.lock();
                self.unmap_mapping_range(first, last_excl - 1, false);
                st.remove(first, last_excl - 1, &self.mem, &mut removed, &|a, b| {
                    self.unmap_mapping_range(a, b, false)
                });
                st.evicted.retain(|&i, _| i < first || i >= last_excl);
                st.on_disk.retain(|&i| i < first || i >= last_excl);
            }
            self.release_pages(removed);
        }
        self.zero_partial(offset, Some(end));
    }

    /// Zeroes the bytes `[from, to)` (to the end of its page when `None`) of the page containing `from`, and
    /// the head of the page containing `to` if it is another page.
    fn zero_partial(&self, from: u64, to: Option<u64>) {
        let mut st = self.state.lock();
        let mut zero = |page: u64, a: usize, b: usize| {
            if a >= b {
                return;
            }
            if let Some(p) = st.pages.get(page)
                && let Some(d) = self.mem.frame(p).data()
            {
                d.write(a, &vec![0u8; b - a]);
            }
            if let Some(bytes) = st.evicted.get_mut(&page) {
                bytes[a..b].fill(0);
            }
        };
        let fp = from / PAGE_SIZE;
        let fo = (from % PAGE_SIZE) as usize;
        match to {
            None => {
                if fo != 0 {
                    zero(fp, fo, PAGE_SIZE as usize);
                }
            }
            Some(to) => {
                let tp = to / PAGE_SIZE;
                let to_off = (to % PAGE_SIZE) as usize;
                if fp == tp {
                    zero(fp, fo, to_off);
                } else {
                    if fo != 0 {
                        zero(fp, fo, PAGE_SIZE as usize);
                    }
                    zero(tp, 0, to_off);
                }
            }
        }
    }

    /// `truncate_inode_pages_range` for whole pages `[first, last]`: removes them from the cache and drops the
    /// cache's references (a frame still mapped elsewhere lives on, no longer part of the file).
    fn drop_pages(&self, first: u64, last: u64) {
        let mut removed = Vec::new();
        {
            let mut st = self.state.lock();
            st.remove(first, last, &self.mem, &mut removed, &|a, b| self.unmap_mapping_range(a, b, false));
        }
        self.release_pages(removed);
    }

    /// Gives up the cache's references to pages drained from it.
    fn release_pages(&self, removed: Vec<(u64, Pfn)>) {
        let mut tlb = MmuGather::new(&self.mem);
        for (_, pfn) in removed {
            let f = self.mem.frame(pfn);
            // Relaxed: a truncated frame's mapping is only a statistic for its remaining users.
            f.mapping.store(0, vmspace_rcu::sync::Ordering::Relaxed);
            tlb.put_frame(pfn);
        }
    }

    /// Writeback of the dirty pages of `[first, last]` (`file_write_and_wait_range`, as `fsync` and `msync(MS_SYNC)`
    /// start it): each page is cleaned for I/O (`folio_clear_dirty_for_io`: every entry mapping it loses its
    /// dirty and write bits, `folio_mkclean`, so the next write through a shared mapping faults and dirties it
    /// again) and, the engine's file having no backing store but its cache, is clean at once. Only shared
    /// mappings can map a page-cache page writable or dirty, so the registry's other mappings are left as
    /// they are. Shmem is never written back (`noop_fsync`). Returns the pages cleaned.
    pub fn writeback(&self, first: u64, last: u64) -> u64 {
        if self.shmem || first > last {
            return 0;
        }
        let mut st = self.state.lock();
        let dirty: Vec<(u64, Pfn)> = st
            .pages
            .entries()
            .into_iter()
            .filter(|&(i, p)| {
                (first..=last).contains(&i) && self.mem.folio_flags(p).contains(FrameFlags::DIRTY)
            })
            .collect();
        if dirty.is_empty() {
            return 0;
        }
        // Lock order: the cache's mutex, then the registry's (as hole punching), then PTE locks.
        let maps = self.i_mmap.lock();
        for &(index, pfn) in &dirty {
            for (_, m) in maps.maps.iter() {
                let pages = (m.end - m.start) / PAGE_SIZE;
                if index >= m.pgoff && index - m.pgoff < pages {
                    m.pt.mkclean_entry(m.start + (index - m.pgoff) * PAGE_SIZE, pfn);
                }
            }
        }
        // Cleared after every page's entries: a large folio's pages share the one dirty bit.
        for &(index, pfn) in &dirty {
            self.mem.folio(pfn).clear(FrameFlags::DIRTY);
            st.on_disk.insert(index);
        }
        dirty.len() as u64
    }

    /// `POSIX_FADV_WILLNEED` over `nr` pages from `index` (`generic_fadvise` → `force_page_cache_readahead`;
    /// `crate::readahead`): missing pages of the range below the end of the file are read in, unmapped and
    /// unmarked, up to the device's limit. Shmem has no readahead.
    pub fn willneed(&self, index: u64, nr: u64) {
        if self.shmem {
            return;
        }
        self.lock().force_page_cache_ra(index, nr);
    }

    /// `MADV_PAGEOUT`'s reclaim of this file's pages that `pt` maps in `[start, end)` (`reclaim_pages` →
    /// `shrink_folio_list` with the references ignored). Only folios this mapping maps alone are taken
    /// (`folio_mapcount` equal to the folio's pages; mlocked ones are put back); a large folio the range does
    /// not map whole is split first, unless it is mapped elsewhere too. Each is unmapped (`try_to_unmap`: a dirty entry dirties
    /// the page); a clean page then leaves the cache and is freed, a dirty one stays cached, unmapped, active and
    /// marked for reclaim (`folio_set_reclaim`, the readahead mark's bit: fault-around then leaves it alone and
    /// a fault on it starts an asynchronous readahead, as on the live kernel) since only the flusher writes file
    /// pages back. A shmem page is unmapped too; with no swap to write it to (`shmem_writeout` redirties it) a
    /// dirty one stays cached and active, a clean one (a hole read, all zeroes) leaves the cache. Returns the
    /// pages freed.
    pub fn pageout(&self, pt: &PageTable, start: u64, end: u64) -> u64 {
        if !Arc::ptr_eq(&self.mem, &pt.mem) {
            // Another memory's page table maps none of this cache's pages.
            return 0;
        }
        let mut found = Vec::new();
        pt.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                let pte = g.get(addr);
                if pte.is_present() && !pte.is_special() {
                    let f = self.mem.frame(pte.pfn());
                    let flags = f.flags();
                    // Relaxed: the mapping id is set before publication and cleared only by truncation, which
                    // the cache's mutex orders before the check below.
                    if f.mapping.load(vmspace_rcu::sync::Ordering::Relaxed) == self.id
                        && !flags.contains(FrameFlags::ANON)
                        && !flags.contains(FrameFlags::UNEVICTABLE)
                    {
                        found.push((addr, pte.pfn()));
                    }
                }
                addr += PAGE_SIZE;
            }
        });
        let mut freed = 0;
        let mut st = self.state.lock();
        let maps_page = |st: &State, addr: u64, index: u64| {
            let p = pt.pte(addr);
            p.is_present() && st.pages.get(index) == Some(p.pfn())
        };
        for (addr, pfn) in found {
            let f = self.mem.frame(pfn);
            // Relaxed: as above; the cache's mutex is held.
            let index = f.index.load(vmspace_rcu::sync::Ordering::Relaxed);
            // With the cache's mutex held no fault can map a page of the file again, so each entry maps what
            // the walk saw, or was zapped meanwhile (or by an earlier folio of this loop).
            if st.pages.get(index) != Some(pfn) || !maps_page(&st, addr, index) {
                continue;
            }
            // A large folio is taken whole if this mapping maps all of it within the range; else it is split
            // first (`madvise_cold_or_pageout_pte_range`), unless some page of it is mapped elsewhere too.
            let mut unit = (index, 1, addr);
            let order = f.flags().order();
            if order > 0 {
                let n = 1u64 << order;
                let h = index & !(n - 1);
                let a0 = addr - (index - h) * PAGE_SIZE;
                let pages = || (0..n).filter_map(|j| st.pages.get(h + j));
                if pages().any(|p| self.mem.frame(p).mapcount() > 1) {
                    continue;
                }
                let full = a0 >= start
                    && a0 + n * PAGE_SIZE <= end
                    && (0..n).all(|j| maps_page(&st, a0 + j * PAGE_SIZE, h + j));
                if full {
                    unit = (h, n, a0);
                } else {
                    st.split_folio(index, pfn, &self.mem, &|a, b| self.unmap_mapping_range(a, b, false));
                }
            }
            let (first, n, a0) = unit;
            // `folio_mapcount(folio) != folio_nr_pages(folio)`: mapped elsewhere too.
            if (first..first + n).any(|i| st.pages.get(i).is_none_or(|p| self.mem.frame(p).mapcount() != 1)) {
                continue;
            }
            // `try_to_unmap`.
            pt.zap_range(a0, a0 + n * PAGE_SIZE, &ZapDetails::mapping(false));
            if (first..first + n).any(|i| st.pages.get(i).is_some_and(|p| self.mem.frame(p).mapcount() != 0))
            {
                continue;
            }
            let folio = self.mem.folio(pfn);
            folio.clear(FrameFlags::REFERENCED);
            if folio.flags().contains(FrameFlags::DIRTY) {
                // `shrink_folio_list`: a dirty file folio is marked for reclaim and activated; a dirty shmem
                // folio goes to `pageout`, whose failed write clears the mark again.
                folio.set(if self.shmem {
                    FrameFlags::ACTIVE
                } else {
                    FrameFlags::READAHEAD.union(FrameFlags::ACTIVE)
                });
            } else {
                // Clean: its bytes are on "disk" (the file's blocks), for the pages that ever had any.
                for i in first..first + n {
                    if let Some(p) = st.pages.get(i)
                        && self.mem.frame(p).data().is_some()
                    {
                        let mut bytes = vec![0u8; PAGE_SIZE as usize];
                        self.mem.read_frame(p, 0, &mut bytes);
                        st.evicted.insert(i, bytes);
                    }
                }
                let mut removed = Vec::new();
                st.remove(first, first + n - 1, &self.mem, &mut removed, &|a, b| {
                    self.unmap_mapping_range(a, b, false)
                });
                freed += removed.len() as u64;
                self.release_pages(removed);
            }
        }
        freed
    }

    /// `unmap_mapping_range`: zaps file pages `[first, last]` in every registered mapping; anonymous copies in
    /// private mappings too if `even_cows`. Allocates nothing.
    pub fn unmap_mapping_range(&self, first: u64, last: u64, even_cows: bool) {
        let maps = self.i_mmap.lock();
        for (_, m) in maps.maps.iter() {
            let pages = (m.end - m.start) / PAGE_SIZE;
            let vlast = m.pgoff + pages - 1;
            if pages == 0 || last < m.pgoff || first > vlast {
                continue;
            }
            let a = first.max(m.pgoff);
            let b = last.min(vlast);
            let zs = m.start + (a - m.pgoff) * PAGE_SIZE;
            let ze = m.start + (b - m.pgoff + 1) * PAGE_SIZE;
            m.pt.zap_range(zs, ze, &ZapDetails::mapping(even_cows).with_recency(m.recency));
        }
    }

    /// Registers a mapping of the file (`vma_interval_tree_insert`; module docs).
    pub fn i_mmap_insert(&self, m: FileMapping) -> MappingId {
        let mut im = self.i_mmap.lock();
        let id = im.next;
        im.next += 1;
        im.maps.push((id, m));
        MappingId(id)
    }

    /// Changes a registered mapping's range, offset and recency (a VMA split, merged or moved, or advised
    /// `MADV_RANDOM`, `MADV_SEQUENTIAL` or `MADV_NORMAL`). Returns whether the id was registered.
    pub fn i_mmap_update(&self, id: MappingId, start: u64, end: u64, pgoff: u64, recency: bool) -> bool {
        let mut im = self.i_mmap.lock();
        match im.maps.iter_mut().find(|(i, _)| *i == id.0) {
            Some((_, m)) => {
                m.start = start;
                m.end = end;
                m.pgoff = pgoff;
                m.recency = recency;
                true
            }
            None => false,
        }
    }

    /// Unregisters a mapping (`vma_interval_tree_remove`), returning its record.
    pub fn i_mmap_remove(&self, id: MappingId) -> Option<FileMapping> {
        let mut im = self.i_mmap.lock();
        let at = im.maps.iter().position(|(i, _)| *i == id.0)?;
        Some(im.maps.swap_remove(at).1)
    }

    /// A registered mapping's record, if the id is registered.
    pub fn i_mmap_get(&self, id: MappingId) -> Option<FileMapping> {
        self.i_mmap.lock().maps.iter().find(|(i, _)| *i == id.0).map(|(_, m)| m.clone())
    }

    /// Registered mappings.
    pub fn i_mmap_count(&self) -> usize {
        self.i_mmap.lock().maps.len()
    }
}

impl Drop for PageCache {
    /// The inode's eviction (`truncate_inode_pages_final`): the cache's references go; frames still mapped live
    /// on until unmapped.
    fn drop(&mut self) {
        self.i_mmap.get_mut().maps.clear();
        self.drop_pages(0, u64::MAX);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::MemoryConfig;

    #[test]
    fn radix_grows_and_shrinks_with_counted_nodes() {
        let m = Memory::new(MemoryConfig::default());
        let mut r = Radix::new();
        let idx = [0u64, 5, 63, 64, 4095, 4096, 1 << 30, u64::MAX / 2];
        for (k, &i) in idx.iter().enumerate() {
            r.insert(i, Pfn(k as u64 + 1), &m).unwrap();
        }
        for (k, &i) in idx.iter().enumerate() {
            assert_eq!(r.get(i), Some(Pfn(k as u64 + 1)), "index {i}");
        }
        assert_eq!(r.get(6), None);
        assert_eq!(r.count, idx.len() as u64);
        assert!(m.stats().cache_nodes_in_use > 0);
        let mut out = Vec::new();
        r.drain(64, 1 << 30, &m, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(r.get(64), None);
        assert_eq!(r.get(63), Some(Pfn(3)));
        r.drain(0, u64::MAX, &m, &mut out);
        assert_eq!(r.count, 0);
        assert!(r.root.is_none());
        assert_eq!(m.stats().cache_nodes_in_use, 0);
    }

    #[test]
    fn radix_any_in_matches_a_scan() {
        let m = Memory::new(MemoryConfig::default());
        let mut r = Radix::new();
        assert!(!r.any_in(0, u64::MAX), "empty");
        let idx = [3u64, 64, 700, 4095, 262_144, 1 << 33, u64::MAX - 1];
        for (k, &i) in idx.iter().enumerate() {
            r.insert(i, Pfn(k as u64 + 1), &m).unwrap();
        }
        let scan = |a: u64, b: u64| idx.iter().any(|&i| a <= i && i <= b);
        let mut probes = vec![(0, 2), (0, 3), (4, 63), (4, 64), (65, 699), (701, 4094), (4096, 262_143)];
        probes.extend([(262_144, 262_144), (262_145, (1 << 33) - 1), ((1 << 33) + 1, u64::MAX - 2)]);
        probes.extend([(u64::MAX - 1, u64::MAX), (u64::MAX, u64::MAX), (0, u64::MAX), (5, 4), (512, 1023)]);
        for (a, b) in probes {
            assert_eq!(r.any_in(a, b), scan(a, b), "[{a}, {b}]");
        }
        // Every window of 512 over the first 8,192 indexes, as the collapse scan asks.
        for first in (0..8192u64).step_by(97) {
            assert_eq!(r.any_in(first, first + 511), scan(first, first + 511), "window at {first}");
        }
        let mut out = Vec::new();
        r.drain(0, u64::MAX, &m, &mut out);
    }

    #[test]
    fn radix_insert_failure_changes_nothing() {
        let m = Memory::new(MemoryConfig::default());
        let mut r = Radix::new();
        r.insert(3, Pfn(9), &m).unwrap();
        for target in [10u64, 100_000, 1 << 40] {
            let mut i = 0;
            loop {
                let before = m.stats().cache_nodes_in_use;
                m.inject_alloc_failure(Some(i));
                let res = r.insert(target, Pfn(7), &m);
                m.inject_alloc_failure(None);
                if res.is_ok() {
                    break;
                }
                assert_eq!(m.stats().cache_nodes_in_use, before);
                assert_eq!(r.get(target), None);
                assert_eq!(r.get(3), Some(Pfn(9)));
                i += 1;
            }
            assert_eq!(r.get(target), Some(Pfn(7)));
            let mut out = Vec::new();
            r.drain(target, target, &m, &mut out);
        }
    }

    #[test]
    fn write_read_and_truncate_zero_the_tail() {
        let m = Memory::new(MemoryConfig::default());
        let c = PageCache::new(&m, 0, true);
        assert_eq!(c.write(4000, &[7u8; 200]).unwrap(), 200);
        assert_eq!(c.size(), 4200);
        assert_eq!(c.nr_pages(), 2);
        let mut b = [0u8; 300];
        assert_eq!(c.read(3950, &mut b), 250);
        assert_eq!(&b[..50], &[0u8; 50]);
        assert_eq!(&b[50..250], &[7u8; 200]);
        c.truncate(4050);
        assert_eq!(c.nr_pages(), 1);
        c.truncate(8192);
        let mut b = [1u8; 200];
        assert_eq!(c.read(4000, &mut b), 200);
        assert_eq!(&b[..50], &[7u8; 50]);
        assert_eq!(&b[50..], &[0u8; 150], "the truncated tail reads as zeroes after growing again");
        drop(c);
        vmspace_rcu::synchronize();
        assert_eq!(m.stats().frames_in_use, 0);
        assert_eq!(m.stats().cache_nodes_in_use, 0);
    }

    #[test]
    fn growing_zeroes_what_lies_beyond_the_old_end_in_its_page() {
        let m = Memory::new(MemoryConfig::default());
        let c = PageCache::new(&m, 0, false);
        c.write(0, &[5u8; 2 * 4096]).unwrap();
        c.truncate(4096 + 100);
        // A shared mapping's store beyond the end of file, in the last page (what `write` cannot do).
        let page = c.lock().st.pages.get(1).unwrap();
        c.mem.frame(page).data().unwrap().write(100, &[7u8; 4096 - 100]);
        c.truncate(4096 + 200);
        let mut b = vec![9u8; 4096];
        c.mem.read_frame(page, 0, &mut b);
        assert!(b[..100].iter().all(|&x| x == 5));
        assert!(b[100..].iter().all(|&x| x == 0), "zeroed to the end of the page, past the new size too");
        // Growing from a page boundary zeroes nothing.
        c.truncate(3 * 4096);
        c.write(2 * 4096, &[6u8; 4096]).unwrap();
        c.truncate(4 * 4096);
        c.read(2 * 4096, &mut b);
        assert!(b.iter().all(|&x| x == 6));
    }

    #[test]
    fn truncation_dirties_the_partial_block_only_where_a_block_is_allocated() {
        let m = Memory::new(MemoryConfig::default());
        let c = PageCache::new(&m, 4 * 4096, false);
        let dirty = |i: u64| c.mem.folio_flags(c.page(i).unwrap()).contains(FrameFlags::DIRTY);
        // Pages 0 and 1 written and written back (blocks allocated); page 2 read from a hole.
        c.write(0, &[3u8; 2 * 4096]).unwrap();
        assert_eq!(c.writeback(0, 3), 2);
        c.lock().find_or_create(2).unwrap();
        assert!(!dirty(0) && !dirty(1) && !dirty(2));
        // Cutting inside page 2, a hole: its cached page stays clean.
        c.truncate(2 * 4096 + 100);
        assert!(!dirty(2));
        // Cutting inside page 1, written back: ext4 zeroes its block through the cache and dirties it.
        c.truncate(4096 + 100);
        assert!(dirty(1) && !dirty(0));
        let mut b = [9u8; 4096];
        c.mem.read_frame(c.page(1).unwrap(), 0, &mut b);
        assert!(b[..100].iter().all(|&x| x == 3) && b[100..].iter().all(|&x| x == 0));
        // Growing from the unaligned end zeroes the same block: written back again, it is dirtied again.
        assert_eq!(c.writeback(0, 3), 1);
        c.truncate(3 * 4096);
        assert!(dirty(1));
        // A truncation frees the blocks past the new end: page 1 cut away and read again is a hole.
        c.writeback(0, 3);
        c.truncate(4096);
        c.truncate(2 * 4096 + 100);
        c.lock().find_or_create(1).unwrap();
        c.truncate(4096 + 50);
        assert!(!dirty(1), "a block freed by truncation is a hole again");
    }

    #[test]
    fn truncation_marks_the_partial_block_page_accessed() {
        let m = Memory::new(MemoryConfig::default());
        let c = PageCache::new(&m, 4 * 4096, false);
        let flags = |i: u64| {
            let f = c.mem.folio_flags(c.page(i).unwrap());
            (f.contains(FrameFlags::REFERENCED), f.contains(FrameFlags::ACTIVE))
        };
        // Page 2 read from a hole, page 1 written and written back (an allocated block).
        c.lock().find_or_create(2).unwrap();
        c.write(4096, &[3u8; 4096]).unwrap();
        c.writeback(0, 3);
        c.mem.folio(c.page(1).unwrap()).clear(FrameFlags::REFERENCED.union(FrameFlags::ACTIVE));
        assert_eq!(flags(2), (false, false));
        // `FGP_ACCESSED`: the first lookup references the page, the second activates it.
        c.truncate(2 * 4096 + 100);
        assert_eq!(flags(2), (true, false));
        c.truncate(2 * 4096 + 200);
        assert_eq!(flags(2), (false, true));
        c.truncate(4096 + 100);
        assert_eq!(flags(1), (true, false));
        // Growing from the unaligned end zeroes the same block: a second lookup.
        c.truncate(2 * 4096);
        assert_eq!(flags(1), (false, true));
        // From and to aligned sizes no block is zeroed.
        c.truncate(3 * 4096);
        c.truncate(2 * 4096);
        assert_eq!(flags(1), (false, true));
    }

    #[test]
    fn punch_hole_drops_whole_pages_and_zeroes_edges() {
        let m = Memory::new(MemoryConfig::default());
        let c = PageCache::new(&m, 0, false);
        c.write(0, &[5u8; 4 * 4096]).unwrap();
        c.punch_hole(100, 2 * 4096 + 100);
        assert_eq!(c.size(), 4 * 4096);
        assert_eq!(c.nr_pages(), 3, "page 1 dropped");
        let mut b = vec![0u8; 4 * 4096];
        c.read(0, &mut b);
        assert!(b[..100].iter().all(|&x| x == 5));
        assert!(b[100..2 * 4096 + 200].iter().all(|&x| x == 0));
        assert!(b[2 * 4096 + 200..].iter().all(|&x| x == 5));
    }

    use crate::testutil::{RW, SHARED_RW, read, write};
    use crate::{Access, FaultVma, VmFault, handle_mm_fault, vma_has_recency};
    use vmspace_abi::VmFlags;

    const A: u64 = 0x80_0000_0000;
    const PG: u64 = PAGE_SIZE;

    #[test]
    fn truncate_unmaps_shared_pages_and_private_copies_beyond_the_end() {
        let m = Memory::new(MemoryConfig::default());
        let c = PageCache::new(&m, 0, false);
        c.write(0, &[6u8; 8 * 4096]).unwrap();
        let pt = Arc::new(PageTable::new(&m).unwrap());
        let other = Arc::new(PageTable::new(&m).unwrap());
        let mut sv = FaultVma::file(A, A + 8 * PG, 0, SHARED_RW, &c, false);
        // A private mapping of the file's second half, at another address space.
        let mut pv = FaultVma::file(A + 64 * PG, A + 68 * PG, 4, RW, &c, false);
        for i in 0..8 {
            read(&pt, &mut sv, A + i * PG, 1).unwrap();
        }
        read(&other, &mut pv, A + 64 * PG, 1).unwrap();
        write(&other, &mut pv, A + 66 * PG, b"cow").unwrap(); // file page 6, copied
        let s_id = c.i_mmap_insert(FileMapping {
            pt: pt.clone(),
            start: A,
            end: A + 8 * PG,
            pgoff: 0,
            recency: true,
        });
        let _p_id = c.i_mmap_insert(FileMapping {
            pt: other.clone(),
            start: A + 64 * PG,
            end: A + 68 * PG,
            pgoff: 4,
            recency: true,
        });
        assert_eq!(c.i_mmap_count(), 2);
        c.truncate(5 * 4096 + 10);
        // Pages 6 and 7 are gone everywhere, the private copy of page 6 too (even_cows); page 5 stays.
        assert!(pt.pte(A + 5 * PG).is_present());
        assert!(pt.pte(A + 6 * PG).is_none() && pt.pte(A + 7 * PG).is_none());
        assert!(other.pte(A + 66 * PG).is_none());
        assert!(other.pte(A + 65 * PG).is_present());
        assert_eq!(c.nr_pages(), 6);
        // Page 5's tail beyond the new end reads as zeroes through the mapping.
        assert_eq!(read(&pt, &mut sv, A + 5 * PG + 8, 4).unwrap(), vec![6, 6, 0, 0]);
        // And faults beyond the end raise SIGBUS.
        assert_eq!(handle_mm_fault(&pt, &sv, A + 6 * PG, Access::Read), VmFault::SigBus);
        assert_eq!(handle_mm_fault(&other, &pv.with_anon_vma(), A + 66 * PG, Access::Write), VmFault::SigBus);
        pt.validate().unwrap();
        other.validate().unwrap();
        // A registration moves with its VMA.
        assert!(c.i_mmap_update(s_id, A + PG, A + 8 * PG, 1, true));
        assert!(c.i_mmap_remove(s_id).is_some());
        assert!(c.i_mmap_remove(s_id).is_none());
    }

    #[test]
    fn unmapping_and_punching_a_hole_spare_cows() {
        let m = Memory::new(MemoryConfig::default());
        let c = PageCache::new(&m, 0, true);
        c.write(0, &[1u8; 4 * 4096]).unwrap();
        let pt = Arc::new(PageTable::new(&m).unwrap());
        let mut pv = FaultVma::file(A, A + 4 * PG, 0, RW, &c, false);
        read(&pt, &mut pv, A, 1).unwrap();
        write(&pt, &mut pv, A + PG, b"mine").unwrap();
        c.i_mmap_insert(FileMapping { pt: pt.clone(), start: A, end: A + 4 * PG, pgoff: 0, recency: true });
        c.unmap_mapping_range(0, 3, false);
        assert!(pt.pte(A).is_none(), "file page unmapped");
        assert!(pt.pte(A + PG).is_present(), "the private copy stays without even_cows");
        read(&pt, &mut pv, A + 2 * PG, 1).unwrap();
        c.punch_hole(0, 3 * 4096);
        assert!(pt.pte(A + PG).is_present(), "punching a hole spares private copies (live kernel)");
        assert_eq!(read(&pt, &mut pv, A + PG, 4).unwrap(), b"mine".to_vec());
        assert!(pt.pte(A + 2 * PG).is_none(), "the file page in the hole is unmapped");
        assert_eq!(read(&pt, &mut pv, A + 2 * PG, 1).unwrap(), vec![0], "the hole reads as zeroes");
        assert_eq!(read(&pt, &mut pv, A + 3 * PG, 1).unwrap(), vec![1]);
    }

    #[test]
    fn zaps_mark_young_pages_accessed_only_with_recency() {
        let m = Memory::new(MemoryConfig::default());
        // Without readahead: each read maps the pages it read, young, and nothing marks them accessed.
        let c = PageCache::with_bdi(&m, 4 * 4096, false, Bdi::NONE);
        let pt = Arc::new(PageTable::new(&m).unwrap());
        let mut sv = FaultVma::file(A, A + 4 * PG, 0, SHARED_RW, &c, true);
        let referenced = |i: u64| m.folio_flags(c.page(i).unwrap()).contains(FrameFlags::REFERENCED);
        let id = c.i_mmap_insert(FileMapping {
            pt: pt.clone(),
            start: A,
            end: A + 4 * PG,
            pgoff: 0,
            recency: false,
        });
        for i in 0..4 {
            read(&pt, &mut sv, A + i * PG, 1).unwrap();
        }
        assert!((0..4).all(|i| pt.pte(A + i * PG).is_young() && !referenced(i)));
        // munmap of a VM_RAND_READ / VM_SEQ_READ VMA, then truncation's zap through a registration without recency.
        pt.zap_range(A, A + PG, &ZapDetails::UNMAP.with_recency(false));
        c.unmap_mapping_range(1, 1, false);
        assert!(pt.pte(A).is_none() && pt.pte(A + PG).is_none());
        assert!(!referenced(0) && !referenced(1), "no recency: the young entries marked nothing");
        // MADV_NORMAL again: the registration follows, and zaps mark young pages accessed.
        assert!(c.i_mmap_update(id, A, A + 4 * PG, 0, true));
        pt.zap_range(A + 2 * PG, A + 3 * PG, &ZapDetails::UNMAP);
        c.unmap_mapping_range(3, 3, false);
        assert!(referenced(2) && referenced(3));
        assert!(vma_has_recency(SHARED_RW));
        assert!(!vma_has_recency(SHARED_RW.union(VmFlags::SEQ_READ)));
        assert!(!vma_has_recency(SHARED_RW.union(VmFlags::RAND_READ)));
        pt.validate().unwrap();
    }
}
