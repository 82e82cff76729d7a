//! Readahead: how a fault on a regular-file mapping fills the page cache beyond the page it needs
//! (`mm/filemap.c`: `do_sync_mmap_readahead`, `do_async_mmap_readahead`, `filemap_map_pages`' miss count;
//! `mm/readahead.c`; `mm/fadvise.c` for `MADV_WILLNEED`).
//!
//! # The state
//!
//! Each open file carries a `file_ra_state` ([`RaState`]): the last window read (`start`, `size`, and
//! `async_size`, the tail of the window whose first page carries the readahead mark), the folio order the
//! next window asks for, the per-file count of page-cache misses seen by faults (`mmap_miss`), and the
//! position of the last `read(2)` (`prev_pos`, which only `read` moves: -1 here, since the engine has no
//! `read`). A [`crate::PageCache`] belongs to one open file (the engine's `VmFile` is inode and open file in
//! one), so the state lives under the cache's mutex; the kernel reads and writes it without a lock.
//! `ra_pages` and `io_pages` come from the file's backing device ([`Bdi`]: `read_ahead_kb` and
//! `max_sectors_kb` of its queue), copied into the state when the cache is created (`file_ra_state_init`).
//!
//! # A fault that finds no page (`do_sync_mmap_readahead`)
//!
//! In order, first match wins:
//! - `VM_HUGEPAGE` (transparent huge pages built in): two PMD-sized windows from the PMD-aligned index (one if
//!   `VM_RAND_READ`), the second marked, at the PMD order, even with `ra_pages` 0;
//! - `VM_RAND_READ` without `VM_EXEC`, or `ra_pages` 0: nothing (the fault reads its page alone);
//! - `VM_SEQ_READ`: `page_cache_sync_ra` for `ra_pages` pages;
//! - otherwise the miss is counted (`mmap_miss`, saturating at ten times `MMAP_LOTSAMISS`); past
//!   `MMAP_LOTSAMISS` (100) nothing is read ahead;
//! - `VM_EXEC`: from the page (aligned to the architecture's exec folio order, 0 on x86) up to `ra_pages` pages,
//!   cut at the end of the VMA, unmarked;
//! - otherwise the read-around: `ra_pages` pages from half a window before the page (not below 0), the page
//!   `ra_pages / 4` before the window's end marked.
//!
//! Every branch that reads drops the fault's lock for the I/O (`maybe_unlock_mmap_for_io`), so the fault
//! answers `VM_FAULT_RETRY` after creating its page and is made again (`FAULT_FLAG_TRIED`), and the retry's
//! fault-around maps what the window brought in (`crate::fault`).
//!
//! # A fault that finds its page (`do_async_mmap_readahead`)
//!
//! Unless `VM_RAND_READ`, `ra_pages` 0, or the fault is a retry: `mmap_miss` goes down by one (the page is
//! never locked here: no I/O is in flight), and a page carrying the readahead mark starts the next window
//! (`page_cache_async_ra`: the mark is cleared; a hit at the expected index moves the window on and grows it,
//! any other hit sizes the window from the cached pages after the page; the folio order grows by two and the
//! window's end is aligned to it; the whole window is asynchronous, so its first folio carries the mark),
//! dropping the lock (a retry, not a major fault).
//!
//! # Windows
//!
//! `page_cache_ra_order` fills a window with folios of the state's order (capped at the mapping's largest
//! folio order and at `ilog2(size)`; smaller where the index is not aligned or the file ends), marking the
//! folio that holds `start + size - async_size`; it stops at the first page already cached and reads the rest
//! of the window page by page (`do_page_cache_ra`: cut at the end of the file, cached pages skipped, the mark
//! then counted from the cut length). A file system without large folios goes straight to the page-by-page
//! read. An allocation failure ends the read quietly: readahead is a hint.
//!
//! A folio of order k is its 2^k pages, each a frame of its own, the first its head: the others point at it
//! (`Frame::head`), and the folio's state (dirty, referenced, active, the readahead mark) lives on the head
//! (`Memory::folio`), so a mark skips the whole folio in fault-around and a write dirties all of it, as in the
//! kernel. Mapcounts stay per page (`CONFIG_PAGE_MAPCOUNT`). Removing part of a folio from the cache splits it
//! first (`crate::cache`).
//!
//! # Pages read in
//!
//! Pages come in up to date at once: a hole zero-filled, as ext4 fills a sparse file's holes without I/O, and a
//! page that reclaim evicted after writeback with the bytes it had (the cache keeps them for it: `crate::cache`).
//! The kernel reads such a page by I/O, which the retry's fault-around may overtake (`docs/DIVERGENCES.md`).

use vmspace_abi::VmFlags;

use crate::arch::Pfn;
use crate::cache::CacheGuard;
use crate::frame::FrameFlags;

/// `MMAP_LOTSAMISS`: past this many misses more than hits, a file's faults stop reading ahead.
pub const MMAP_LOTSAMISS: u32 = 100;
/// `HPAGE_PMD_ORDER` on x86-64.
const HPAGE_PMD_ORDER: u32 = 9;
/// `MAX_PAGECACHE_ORDER` on x86-64 (the PMD order), which is also ext4's largest folio order with 4 KiB blocks.
pub const MAX_PAGECACHE_ORDER: u32 = HPAGE_PMD_ORDER;
/// `force_page_cache_ra`'s chunk: 2 MiB of pages.
const FORCE_CHUNK: u64 = (2 << 20) / crate::arch::PAGE_SIZE;
/// `VM_READAHEAD_PAGES`: the kernel's default `read_ahead_kb` (128 KiB).
pub const VM_READAHEAD_PAGES: u64 = 32;

/// What a file's backing device says about readahead (`struct backing_dev_info`), and whether its file system
/// caches large folios.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bdi {
    /// `ra_pages`: `read_ahead_kb / 4`.
    pub ra_pages: u64,
    /// `io_pages`: `max_sectors_kb / 4`, the largest request (`force_page_cache_ra` reads up to the larger of
    /// the two).
    pub io_pages: u64,
    /// `mapping_large_folio_support`: ext4 since 6.16 for ordinary files (folios up to
    /// [`MAX_PAGECACHE_ORDER`]).
    pub large_folios: bool,
}

impl Default for Bdi {
    /// The kernel's defaults for a block device: 128 KiB readahead, 1280 KiB requests, large folios (ext4).
    fn default() -> Self {
        Bdi { ra_pages: VM_READAHEAD_PAGES, io_pages: 320, large_folios: true }
    }
}

impl Bdi {
    /// No readahead at all (shmem, hugetlbfs: `noop_backing_dev_info`).
    pub const NONE: Bdi = Bdi { ra_pages: 0, io_pages: 0, large_folios: false };
}

/// `struct file_ra_state` (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaState {
    /// First page of the last window.
    pub start: u64,
    /// Pages in the last window.
    pub size: u64,
    /// Pages at the window's end whose first one carries the mark.
    pub async_size: u64,
    /// The largest window (`bdi->ra_pages`, copied at open).
    pub ra_pages: u64,
    /// Folio order the next window asks for.
    pub order: u32,
    /// Faults that found no page, less those that found one (`unsigned short` in the kernel; saturating).
    pub mmap_miss: u32,
    /// Byte position of the last `read(2)` (-1: none).
    pub prev_pos: i64,
}

impl RaState {
    /// `file_ra_state_init`.
    pub fn new(bdi: &Bdi) -> RaState {
        RaState {
            start: 0,
            size: 0,
            async_size: 0,
            ra_pages: bdi.ra_pages,
            order: 0,
            mmap_miss: 0,
            prev_pos: -1,
        }
    }
}

/// `get_init_ra_size`: the first window for a request of `size` pages.
fn init_ra_size(size: u64, max: u64) -> u64 {
    let n = size.next_power_of_two();
    if n <= max / 32 {
        n * 4
    } else if n <= max / 4 {
        n * 2
    } else {
        max
    }
}

/// `get_next_ra_size`: the window after one of `cur` pages.
fn next_ra_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        4 * cur
    } else if cur <= max / 2 {
        2 * cur
    } else {
        max
    }
}

/// `ilog2` of a positive number.
fn ilog2(n: u64) -> u32 {
    63 - n.max(1).leading_zeros()
}

/// Why a folio could not be added.
enum AddError {
    /// A page of its range is cached already (`-EEXIST`).
    Exists,
    /// Allocation failed.
    NoMem,
}

impl CacheGuard<'_> {
    /// `ra_alloc_folio`: the folio of `2^order` pages at `index` (aligned by the caller), marked if it holds
    /// `mark`. A large folio's pages point at its first, which carries its state (`Memory::folio`). Nothing is
    /// added on failure.
    fn add_folio(&mut self, index: u64, order: u32, mark: u64) -> Result<(), AddError> {
        let n = 1u64 << order;
        if self.any_cached(index, index + n - 1) {
            return Err(AddError::Exists);
        }
        let flags = if mark.wrapping_sub(index) < n { FrameFlags::READAHEAD } else { FrameFlags::default() };
        let mut head = None;
        for i in 0..n {
            // The mark is the folio's: on its head only.
            let extra = if i == 0 { flags } else { FrameFlags::default() };
            match self.add_page(index + i, extra.with_order(order)) {
                Ok(p) => {
                    let h = *head.get_or_insert(p);
                    if order > 0 {
                        self.note_large_folio();
                        // Relaxed: published by the cache's mutex, held.
                        self.memory().frame(p).head.store(h.0, vmspace_rcu::sync::Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    // The folio is one allocation in the kernel: drop the pages added so far.
                    if i > 0 {
                        self.remove_unmapped(index, index + i - 1);
                    }
                    return Err(AddError::NoMem);
                }
            }
        }
        // `filemap_add_folio` → `folio_add_lru` of the whole folio.
        if order > 0
            && let Some(h) = head
        {
            self.memory().folio_add_lru(h);
        }
        Ok(())
    }

    /// The last page index of the file (`(i_size - 1) >> PAGE_SHIFT`); `None` for an empty file.
    fn last_index(&self) -> Option<u64> {
        self.size_pages().checked_sub(1)
    }

    /// `page_cache_ra_unbounded`: `nr` pages from `index`, skipping cached ones, the `nr - lookahead`th marked
    /// if it is created here. Stops at an allocation failure.
    fn ra_unbounded(&mut self, index: u64, nr: u64, lookahead: u64) {
        let mark = if lookahead <= nr { nr - lookahead } else { u64::MAX };
        for i in 0..nr {
            if self.find(index + i).is_some() {
                continue;
            }
            let flags = if i == mark { FrameFlags::READAHEAD } else { FrameFlags::default() };
            if self.add_page(index + i, flags).is_err() {
                return;
            }
        }
    }

    /// `do_page_cache_ra`: [`CacheGuard::ra_unbounded`] cut at the end of the file.
    fn do_page_cache_ra(&mut self, index: u64, nr: u64, lookahead: u64) {
        let Some(end) = self.last_index() else { return };
        if index > end {
            return;
        }
        let nr = nr.min(end - index + 1);
        self.ra_unbounded(index, nr, lookahead);
    }

    /// `page_cache_ra_order`: the window the state describes, from `ra.start` (module docs, "Windows").
    fn ra_order(&mut self) {
        let Some(eof) = self.last_index() else { return };
        let ra = *self.ra_state();
        let start = ra.start;
        let mark = start.wrapping_add(ra.size).wrapping_sub(ra.async_size);
        let mut index = start;
        if !self.bdi().large_folios {
            self.ra_state().order = 0;
        } else {
            let limit = eof.min(start.saturating_add(ra.size).saturating_sub(1));
            let new_order = ra.order.min(MAX_PAGECACHE_ORDER).min(ilog2(ra.size));
            self.ra_state().order = new_order;
            let mut failed = false;
            while index <= limit {
                let mut order = new_order;
                if index & ((1 << order) - 1) != 0 {
                    order = index.trailing_zeros();
                }
                while order > 0 && index + (1 << order) - 1 > limit {
                    order -= 1;
                }
                if self.add_folio(index, order, mark).is_err() {
                    failed = true;
                    break;
                }
                index += 1 << order;
            }
            if !failed {
                return;
            }
        }
        if ra.size > index - start {
            self.do_page_cache_ra(index, ra.size - (index - start), ra.async_size);
        }
    }

    /// `force_page_cache_ra`: `nr` pages from `index` in 2 MiB chunks, unmarked, at most the larger of
    /// `io_pages` and `ra_pages` (`MADV_WILLNEED`, `POSIX_FADV_WILLNEED`).
    pub(crate) fn force_page_cache_ra(&mut self, mut index: u64, nr: u64) {
        let bdi = self.bdi();
        let mut nr = nr.min(bdi.io_pages.max(self.ra_state().ra_pages));
        while nr > 0 {
            let chunk = nr.min(FORCE_CHUNK);
            self.do_page_cache_ra(index, chunk, 0);
            index = index.saturating_add(chunk);
            nr -= chunk;
        }
    }

    /// `ractl_max_pages`: a request larger than the window may read up to the device's request size.
    fn max_pages(&mut self, req: u64) -> u64 {
        let max = self.ra_state().ra_pages;
        let io = self.bdi().io_pages;
        if req > max && io > max { req.min(io) } else { max }
    }

    /// `page_cache_prev_miss(index, max_scan)`: the first index at or below `index` that holds no page;
    /// `u64::MAX` if every page down to 0 is cached; `index - max_scan` if none within the scan.
    fn prev_miss(&self, index: u64, max_scan: u64) -> u64 {
        let mut i = index;
        for _ in 0..max_scan {
            if self.find(i).is_none() {
                return i;
            }
            if i == 0 {
                return u64::MAX;
            }
            i -= 1;
        }
        index.wrapping_sub(max_scan)
    }

    /// `page_cache_next_miss(index, max_scan)`: the first index at or above `index` that holds no page;
    /// `index + max_scan` if none within the scan.
    fn next_miss(&self, index: u64, max_scan: u64) -> u64 {
        for k in 0..max_scan {
            let i = index.wrapping_add(k);
            if self.find(i).is_none() {
                return i;
            }
        }
        index.wrapping_add(max_scan)
    }

    /// `page_cache_sync_ra` for a miss at `index` asking for `req` pages (`VM_SEQ_READ` faults).
    fn sync_ra(&mut self, index: u64, req: u64) {
        if self.ra_state().ra_pages == 0 {
            // Readahead disabled: the forced read of the one page.
            self.force_page_cache_ra(index, 1);
            return;
        }
        let max = self.max_pages(req);
        let prev_index = (self.ra_state().prev_pos as u64) >> crate::arch::PAGE_SHIFT;
        if index == 0 || req > max || index.wrapping_sub(prev_index) <= 1 {
            let size = init_ra_size(req, max);
            let ra = self.ra_state();
            ra.start = index;
            ra.size = size;
            ra.async_size = if size > req { size - req } else { size >> 1 };
        } else {
            let miss = self.prev_miss(index - 1, max);
            let mut contig = index.wrapping_sub(miss).wrapping_sub(1);
            if contig <= req {
                // A small random read: as is, the state untouched.
                self.do_page_cache_ra(index, req, 0);
                return;
            }
            if miss == u64::MAX {
                // Cached from the start of the file: a long stream.
                contig *= 2;
            }
            let ra = self.ra_state();
            ra.start = index;
            ra.size = (contig + req).min(max);
            ra.async_size = 1;
        }
        self.ra_state().order = 0;
        self.ra_order();
    }

    /// `page_cache_async_ra`: a fault found marked page `index` (of `pfn`) asking for `req` pages.
    fn async_ra(&mut self, index: u64, pfn: Pfn, req: u64) {
        if self.ra_state().ra_pages == 0 {
            return;
        }
        let folio_pages = self.clear_mark(pfn);
        let max = self.max_pages(req);
        let ra = *self.ra_state();
        let expected = ra.start.wrapping_add(ra.size).wrapping_sub(ra.async_size) & !(folio_pages - 1);
        if index == expected {
            let size = ra.size.max(next_ra_size(ra.size, max));
            let st = self.ra_state();
            st.start = ra.start + ra.size;
            st.size = size;
        } else {
            let start = self.next_miss(index + 1, max);
            if start == 0 || start - index > max {
                return;
            }
            let size = next_ra_size(start - index + req, max);
            let st = self.ra_state();
            st.start = start;
            st.size = size;
        }
        // The window's end aligned to its folio order (at most the window limit's own alignment), and all
        // of it asynchronous: the mark goes on its first folio.
        let st = self.ra_state();
        st.order += 2;
        let align = 1u64 << st.order.min(max.trailing_zeros());
        let end = st.start + st.size;
        let aligned_end = end & !(align - 1);
        if aligned_end > st.start {
            st.size -= end - aligned_end;
        }
        st.async_size = st.size;
        self.ra_order();
    }

    /// `folio_clear_readahead` on the folio of `pfn`; returns its pages (`folio_nr_pages`).
    fn clear_mark(&mut self, pfn: Pfn) -> u64 {
        let mem = self.memory();
        mem.folio(pfn).clear(FrameFlags::READAHEAD);
        1 << mem.frame(pfn).flags().order()
    }

    /// `do_sync_mmap_readahead` for a fault at file page `pgoff` that found no page, in a VMA with `flags`
    /// mapping file pages `[vma_pgoff, vma_pgoff + vma_pages)` (module docs). Returns whether the fault's lock
    /// was dropped for the I/O (the fault is then retried).
    pub(crate) fn sync_mmap_readahead(
        &mut self,
        flags: VmFlags,
        vma_pgoff: u64,
        vma_pages: u64,
        pgoff: u64,
    ) -> bool {
        if flags.intersects(VmFlags::HUGEPAGE) {
            let pmd = 1u64 << HPAGE_PMD_ORDER;
            let ra = self.ra_state();
            ra.start = pgoff & !(pmd - 1);
            ra.size = if flags.intersects(VmFlags::RAND_READ) { pmd } else { 2 * pmd };
            ra.async_size = pmd;
            ra.order = HPAGE_PMD_ORDER;
            self.ra_order();
            return true;
        }
        let ra_pages = self.ra_state().ra_pages;
        if (flags.intersects(VmFlags::RAND_READ) && !flags.intersects(VmFlags::EXEC)) || ra_pages == 0 {
            return false;
        }
        if flags.intersects(VmFlags::SEQ_READ) {
            self.sync_ra(pgoff, ra_pages);
            return true;
        }
        let ra = self.ra_state();
        let mut miss = ra.mmap_miss;
        if miss < MMAP_LOTSAMISS * 10 {
            miss += 1;
            ra.mmap_miss = miss;
        }
        if miss > MMAP_LOTSAMISS {
            return false;
        }
        if flags.intersects(VmFlags::EXEC) {
            // x86 asks for no particular exec folio order (`exec_folio_order` is 0).
            let end = vma_pgoff + vma_pages;
            ra.order = 0;
            ra.start = pgoff.max(vma_pgoff);
            ra.size = (ra.start + ra_pages).min(end) - ra.start;
            ra.async_size = 0;
        } else {
            ra.start = pgoff.saturating_sub(ra_pages / 2);
            ra.size = ra_pages;
            ra.async_size = ra_pages / 4;
            ra.order = 0;
        }
        self.ra_order();
        true
    }

    /// `do_async_mmap_readahead` for a first-try fault at `pgoff` that found its page `pfn` (module docs).
    /// Returns whether the fault's lock was dropped (the fault is then retried).
    pub(crate) fn async_mmap_readahead(&mut self, flags: VmFlags, pgoff: u64, pfn: Pfn) -> bool {
        let ra = self.ra_state();
        if flags.intersects(VmFlags::RAND_READ) || ra.ra_pages == 0 {
            return false;
        }
        ra.mmap_miss = ra.mmap_miss.saturating_sub(1);
        if !self.memory().folio_flags(pfn).contains(FrameFlags::READAHEAD) {
            return false;
        }
        let req = self.ra_state().ra_pages;
        self.async_ra(pgoff, pfn, req);
        true
    }

    /// The end of `filemap_map_pages`: `counted` pages of the window were found (`mmap_miss` goes down by as
    /// many, not below 0).
    pub(crate) fn fault_around_hits(&mut self, counted: u32) {
        let ra = self.ra_state();
        ra.mmap_miss = ra.mmap_miss.saturating_sub(counted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_sizes_follow_the_kernel_formulas() {
        assert_eq!(init_ra_size(2048, 2048), 2048);
        assert_eq!(init_ra_size(1, 2048), 4);
        assert_eq!(init_ra_size(100, 2048), 256);
        assert_eq!(init_ra_size(32, 32), 32);
        assert_eq!(next_ra_size(4, 2048), 16);
        assert_eq!(next_ra_size(512, 2048), 1024);
        assert_eq!(next_ra_size(1536, 2048), 2048);
        assert_eq!(ilog2(2048), 11);
        assert_eq!(ilog2(3), 1);
    }
}
