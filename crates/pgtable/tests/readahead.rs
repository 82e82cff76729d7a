//! Readahead and fault-around against what Linux 6.18 did on a host with `read_ahead_kb` 8192 (2,048-page
//! windows), 4 MiB requests and ext4 (large folios), measured with `mincore`, `/proc/self/pagemap`,
//! `/proc/kpageflags` (the `PG_readahead` bit) and the `readahead:*` / `filemap:*` trace events of the probe's
//! own process. Each test is one measured scenario: which file pages the cache holds afterwards, which carry
//! the readahead mark, which the page table maps. Sparse files, fresh caches, fault-around 64 KiB; every
//! mapping starts 2 MiB-aligned, so fault-around windows are aligned on file pages too.

mod common;

use std::sync::Arc;

use common::{RW, SHARED_RW, check_memory, read, write};
use vmspace_abi::VmFlags;
use vmspace_pgtable::{
    Access, Bdi, FaultVma, FrameFlags, MMAP_LOTSAMISS, Memory, MemoryConfig, PageCache, PageTable, Pfn,
    VmFault, handle_mm_fault,
};

const PG: u64 = 4096;
/// A 2 MiB-aligned address.
const A: u64 = 0x7000_0000_0000;
/// The host's device.
const HOST: Bdi = Bdi { ra_pages: 2048, io_pages: 1024, large_folios: true };
const RO: VmFlags = VmFlags::READ.union(VmFlags::MAYREAD).union(VmFlags::MAYWRITE);

struct File {
    mem: Arc<Memory>,
    cache: PageCache,
    pt: Arc<PageTable>,
}

fn file(pages: u64) -> File {
    file_in(Memory::new(MemoryConfig::default()), pages)
}

fn file_in(mem: Arc<Memory>, pages: u64) -> File {
    let cache = PageCache::with_bdi(&mem, pages * PG, false, HOST);
    let pt = Arc::new(PageTable::new(&mem).unwrap());
    File { mem, cache, pt }
}

impl File {
    /// A VMA of `pages` pages at `A + at` pages mapping file pages from `pgoff`.
    fn vma(&self, at: u64, pages: u64, pgoff: u64, flags: VmFlags) -> FaultVma<'_> {
        FaultVma::file(A + at * PG, A + (at + pages) * PG, pgoff, flags, &self.cache, true)
    }

    /// The cached file pages, as inclusive runs.
    fn cached(&self) -> Vec<(u64, u64)> {
        runs(self.cache.pages().into_iter().map(|(i, _)| i))
    }

    /// The flags of the folio holding cached page `pfn` (its head's, for a large folio).
    fn folio_flags(&self, pfn: Pfn) -> FrameFlags {
        let info = self.mem.frame_info(pfn).unwrap();
        info.head.map_or(info.flags, |h| self.mem.frame_info(h).unwrap().flags)
    }

    /// The cached pages whose folio carries the readahead mark, as runs.
    fn marked(&self) -> Vec<(u64, u64)> {
        let pages = self.cache.pages();
        runs(
            pages
                .into_iter()
                .filter_map(|(i, p)| self.folio_flags(p).contains(FrameFlags::READAHEAD).then_some(i)),
        )
    }

    /// The mapped pages of the VMA at `A + at` pages, counted from its start, as runs.
    fn mapped(&self, at: u64, pages: u64) -> Vec<(u64, u64)> {
        runs((0..pages).filter(|&i| self.pt.pte(A + (at + i) * PG).is_present()))
    }

    /// Registers the VMA of `pages` pages at `A` from file page `pgoff` with the cache (`i_mmap`), so that
    /// writeback and truncation reach its entries.
    fn register(&self, pgoff: u64, pages: u64) -> vmspace_pgtable::MappingId {
        self.cache.i_mmap_insert(vmspace_pgtable::FileMapping {
            pt: Arc::clone(&self.pt),
            start: A,
            end: A + pages * PG,
            pgoff,
            recency: true,
        })
    }

    fn check(&self) {
        check_memory(&self.mem, &[&self.pt], &[&self.cache]);
        self.pt.validate().unwrap();
    }
}

fn runs(it: impl Iterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = Vec::new();
    for i in it {
        match v.last_mut() {
            Some((_, b)) if *b + 1 == i => *b = i,
            _ => v.push((i, i)),
        }
    }
    v
}

/// A 64-page file read at page 0: the read-around window (2,048 pages from 0) is cut at the end of the file,
/// so its mark (page 1,536) is never made; the retry's fault-around maps 0-15. A read of page 40 then maps
/// 32-47 from the cache, without a fault on the file.
#[test]
fn a_small_file_is_read_whole_and_mapped_a_window_at_a_time() {
    let f = file(64);
    let mut v = f.vma(0, 64, 0, RO);
    read(&f.pt, &mut v, A, 1).unwrap();
    assert_eq!(f.cached(), [(0, 63)]);
    assert_eq!(f.marked(), []);
    assert_eq!(f.mapped(0, 64), [(0, 15)]);
    read(&f.pt, &mut v, A + 40 * PG, 1).unwrap();
    assert_eq!(f.mapped(0, 64), [(0, 15), (32, 47)]);
    assert_eq!(f.cached(), [(0, 63)]);
    f.check();
}

/// A 1 GiB file: the first read caches 0-2047 with the mark on 1536. Reading the marked page: fault-around
/// leaves it out (1537-1551 mapped), the fault finds it marked and reads the next window (2048-4095, folios of
/// order 2, the first one marked), and the retry maps 1536. The next marked page moves on again at order 4.
#[test]
fn the_marked_page_starts_the_next_window() {
    let f = file(262_144);
    let mut v = f.vma(0, 4096, 0, RO);
    read(&f.pt, &mut v, A, 1).unwrap();
    assert_eq!(
        (f.cached(), f.marked(), f.mapped(0, 4096)),
        (vec![(0, 2047)], vec![(1536, 1536)], vec![(0, 15)])
    );
    // The first try: fault-around maps the window but the marked page, then the async window is read.
    v.tried = false;
    assert_eq!(handle_mm_fault(&f.pt, &v, A + 1536 * PG, Access::Read), VmFault::RetryIo { major: false });
    assert_eq!(f.mapped(0, 4096), [(0, 15), (1537, 1551)]);
    assert_eq!((f.cached(), f.marked()), (vec![(0, 4095)], vec![(2048, 2051)]));
    read(&f.pt, &mut v, A + 1536 * PG, 1).unwrap();
    assert_eq!(f.mapped(0, 4096), [(0, 15), (1536, 1551)]);
    read(&f.pt, &mut v, A + 2048 * PG, 1).unwrap();
    assert_eq!((f.cached(), f.marked()), (vec![(0, 6143)], vec![(4096, 4111)]));
    assert_eq!(f.mapped(0, 4096), [(0, 15), (1536, 1551), (2048, 2063)]);
    f.check();
}

/// Read-around starts half a window before the page (100976-103023 for file page 102000, the mark on 102512);
/// a miss below the cached run fills only the gap (99876-100975) and makes no mark, since its mark's page was
/// cached already.
#[test]
fn read_around_is_centred_and_fills_only_gaps() {
    let f = file(262_144);
    let mut v = f.vma(0, 4096, 100_000, RO);
    read(&f.pt, &mut v, A + 2000 * PG, 1).unwrap();
    assert_eq!((f.cached(), f.marked()), (vec![(100_976, 103_023)], vec![(102_512, 102_512)]));
    assert_eq!(f.mapped(0, 4096), [(2000, 2015)]);
    read(&f.pt, &mut v, A + 2512 * PG, 1).unwrap();
    assert_eq!((f.cached(), f.marked()), (vec![(100_976, 105_071)], vec![(103_024, 103_027)]));
    read(&f.pt, &mut v, A + 900 * PG, 1).unwrap();
    assert_eq!(f.cached(), [(99_876, 105_071)]);
    assert_eq!(f.marked(), [(103_024, 103_027)]);
    f.check();
}

/// `MADV_RANDOM`: one page per miss, fault-around still maps what is cached. `MADV_SEQUENTIAL`: a first miss at
/// page 0 reads 2,048 pages marked at 1024; a first miss elsewhere reads 2,048 pages from it, unmarked.
#[test]
fn random_and_sequential_advice() {
    let f = file(262_144);
    let mut v = f.vma(0, 4096, 0, RO | VmFlags::RAND_READ);
    for p in [0, 1, 5, 20, 40] {
        read(&f.pt, &mut v, A + p * PG, 1).unwrap();
    }
    assert_eq!(f.cached(), [(0, 1), (5, 5), (20, 20), (40, 40)]);
    assert_eq!(f.mapped(0, 4096), f.cached());

    let f = file(262_144);
    let mut v = f.vma(0, 4096, 0, RO | VmFlags::SEQ_READ);
    read(&f.pt, &mut v, A, 1).unwrap();
    assert_eq!(
        (f.cached(), f.marked(), f.mapped(0, 4096)),
        (vec![(0, 2047)], vec![(1024, 1024)], vec![(0, 15)])
    );
    read(&f.pt, &mut v, A + 1024 * PG, 1).unwrap();
    assert_eq!((f.cached(), f.marked()), (vec![(0, 4095)], vec![(2048, 2051)]));

    let f = file(262_144);
    let mut v = f.vma(0, 4096, 0, RO | VmFlags::SEQ_READ);
    read(&f.pt, &mut v, A + 1000 * PG, 1).unwrap();
    assert_eq!((f.cached(), f.marked(), f.mapped(0, 4096)), (vec![(1000, 3047)], vec![], vec![(1000, 1007)]));
    f.check();
}

/// Write faults read around as read faults do but never fault around: only the written page is mapped (an
/// anonymous copy in a private mapping, the dirty file page in a shared one); a read next to it then maps the
/// window around it, leaving the written page as it is.
#[test]
fn write_faults_read_around_without_fault_around() {
    let f = file(64);
    let mut v = f.vma(0, 64, 0, RW).with_anon_vma();
    write(&f.pt, &mut v, A + 5 * PG, b"w").unwrap();
    assert_eq!((f.cached(), f.mapped(0, 64)), (vec![(0, 63)], vec![(5, 5)]));
    assert_eq!(f.pt.rss().anon, 1);
    read(&f.pt, &mut v, A + 6 * PG, 1).unwrap();
    assert_eq!(f.mapped(0, 64), [(0, 15)]);
    assert_eq!((f.pt.rss().anon, f.pt.rss().file), (1, 15));

    let f = file(64);
    let mut v = f.vma(0, 64, 0, SHARED_RW);
    write(&f.pt, &mut v, A + 5 * PG, b"w").unwrap();
    assert_eq!((f.cached(), f.mapped(0, 64)), (vec![(0, 63)], vec![(5, 5)]));
    read(&f.pt, &mut v, A + 6 * PG, 1).unwrap();
    assert_eq!((f.mapped(0, 64), f.pt.rss().file), (vec![(0, 15)], 16));
    f.check();
}

/// `MADV_WILLNEED` (`force_page_cache_ra`) caches exactly the range, unmarked and unmapped, at most the larger
/// of the window and the request size.
#[test]
fn willneed_reads_the_range_only() {
    let f = file(262_144);
    f.cache.willneed(100, 16);
    assert_eq!((f.cached(), f.marked()), (vec![(100, 115)], vec![]));
    let mut v = f.vma(0, 4096, 0, RO);
    read(&f.pt, &mut v, A + 103 * PG, 1).unwrap();
    assert_eq!(f.mapped(0, 4096), [(100, 111)]);
    let f = file(262_144);
    f.cache.willneed(100, 3000);
    assert_eq!(f.cached(), [(100, 2147)]);
    f.check();
}

/// The miss count (`mmap_miss`): a fault that reads around and is then served by fault-around gains one miss
/// and loses 16 hits, so ordinary faults never stop readahead. Without fault-around (a memory without it, as
/// GUP through `/proc/PID/mem`, which is not retried, sees it) the 101st miss in a row reads its page alone,
/// and hits bring readahead back.
#[test]
fn misses_past_lotsamiss_stop_read_around() {
    let f = file(1 << 19);
    let mut v = f.vma(0, 1 << 19, 0, RO);
    for k in 0..120 {
        read(&f.pt, &mut v, A + k * 4096 * PG, 1).unwrap();
    }
    assert_eq!(f.cache.nr_pages(), 120 * 2048, "every miss read around");

    let f = file_in(Memory::new(MemoryConfig { fault_around_bytes: 0, ..MemoryConfig::default() }), 1 << 19);
    let mut v = f.vma(0, 1 << 19, 0, RO);
    for k in 0..u64::from(MMAP_LOTSAMISS) {
        read(&f.pt, &mut v, A + k * 4096 * PG, 1).unwrap();
    }
    let before = f.cache.nr_pages();
    read(&f.pt, &mut v, A + 400_000 * PG, 1).unwrap();
    assert_eq!(f.cache.nr_pages(), before + 1, "the 101st miss reads one page");
    f.check();
}

/// The last page of a 40-page file: the fault-around window is cut at the end of the file and at the end of the
/// VMA, never moved down (32-39 for an aligned VMA; with the VMA 3 pages past alignment, 29-39).
#[test]
fn fault_around_at_the_end_of_the_file() {
    for (at, pages, want) in [(0, 40, (32, 39)), (3, 40, (29, 39)), (12, 40, (36, 39)), (0, 64, (32, 39))] {
        let f = file(40);
        let mut v = f.vma(at, pages, 0, RO);
        read(&f.pt, &mut v, A + (at + 39) * PG, 1).unwrap();
        assert_eq!(f.cached(), [(0, 39)]);
        assert_eq!(f.mapped(at, pages), [want], "VMA at +{at} pages, {pages} pages");
        f.check();
    }
}

/// An executable mapping reads from the page to the end of the VMA (at most a window), unmarked.
#[test]
fn exec_mappings_read_forward_within_the_vma() {
    let f = file(262_144);
    let mut v = f.vma(0, 300, 5000, RO | VmFlags::EXEC | VmFlags::MAYEXEC);
    read(&f.pt, &mut v, A + 10 * PG, 1).unwrap();
    assert_eq!((f.cached(), f.marked()), (vec![(5010, 5299)], vec![]));
    f.check();
}

/// `MADV_PAGEOUT` of a file mapping: clean pages this mapping maps alone leave the cache; dirty ones are
/// unmapped but stay cached with the reclaim bit, which is the readahead mark's: fault-around then leaves them
/// out, and a fault on one starts an (empty) asynchronous window and clears it. Cached pages nobody maps, and
/// pages another page table maps too, stay.
#[test]
fn pageout_frees_clean_pages_and_marks_dirty_ones() {
    let f = file(64);
    let other = PageTable::new(&f.mem).unwrap();
    let mut v = f.vma(0, 64, 0, SHARED_RW);
    let mut ov = FaultVma::file(A, A + 64 * PG, 0, SHARED_RW, &f.cache, true);
    write(&f.pt, &mut v, A + 3 * PG, b"d").unwrap();
    write(&f.pt, &mut v, A + 20 * PG, b"d").unwrap();
    read(&f.pt, &mut v, A, 1).unwrap();
    read(&other, &mut ov, A + 10 * PG, 1).unwrap();
    assert_eq!(f.mapped(0, 64), [(0, 15), (20, 20)]);
    f.cache.pageout(&f.pt, A, A + 64 * PG);
    // The other table maps 0-15 too (its fault-around): those stay. Page 20, dirty, is unmapped and marked.
    assert_eq!(f.mapped(0, 64), [(0, 15)]);
    assert_eq!((f.cached(), f.marked()), (vec![(0, 63)], vec![(20, 20)]));
    other.zap_range(A, A + 64 * PG, &vmspace_pgtable::ZapDetails::UNMAP);
    f.cache.pageout(&f.pt, A, A + 64 * PG);
    assert_eq!((f.cached(), f.mapped(0, 64)), (vec![(3, 3), (16, 63)], vec![]));
    assert_eq!(f.marked(), [(3, 3), (20, 20)]);
    // Read 0 again: read-around fills the gap, fault-around maps 0-15 but the marked page 3.
    read(&f.pt, &mut v, A, 1).unwrap();
    assert_eq!((f.cached(), f.mapped(0, 64)), (vec![(0, 63)], vec![(0, 2), (4, 15)]));
    read(&f.pt, &mut v, A + 3 * PG, 1).unwrap();
    assert_eq!((f.mapped(0, 64), f.marked()), (vec![(0, 15)], vec![(20, 20)]));
    assert!(f.mem.frame_info(f.cache.page(3).unwrap()).unwrap().flags.contains(FrameFlags::DIRTY));
    check_memory(&f.mem, &[&f.pt, &other], &[&f.cache]);
}

/// Writeback (`msync(MS_SYNC)`, `fsync`): dirty pages of the range become clean and their entries read-only and
/// clean, so the next write faults again; pages outside the range stay dirty.
#[test]
fn writeback_cleans_and_write_protects() {
    let f = file(64);
    let mut v = f.vma(0, 64, 0, SHARED_RW);
    let reg = f.register(0, 64);
    write(&f.pt, &mut v, A + 3 * PG, b"d").unwrap();
    write(&f.pt, &mut v, A + 40 * PG, b"d").unwrap();
    let dirty = |i| f.mem.frame_info(f.cache.page(i).unwrap()).unwrap().flags.contains(FrameFlags::DIRTY);
    assert!(dirty(3) && dirty(40));
    assert_eq!(f.cache.writeback(0, 31), 1);
    assert!(!dirty(3) && dirty(40));
    let (p3, p40) = (f.pt.pte(A + 3 * PG), f.pt.pte(A + 40 * PG));
    assert!(p3.is_present() && !p3.is_write() && !p3.is_dirty());
    assert!(p40.is_write() && p40.is_dirty());
    let wp = f.pt.fault_stats().wp_shared;
    write(&f.pt, &mut v, A + 3 * PG, b"e").unwrap();
    assert_eq!(f.pt.fault_stats().wp_shared, wp + 1, "the next write faults");
    assert!(dirty(3));
    f.cache.i_mmap_remove(reg);
    f.check();
}

/// ext4's truncation caches the page of the partial block at the end of file without reading it (the new end
/// when the file shrinks or keeps its size, the old end when it grows from an unaligned size): fault-around
/// leaves that page out and read-around skips it; a fault on it reads it and retries, without reading ahead
/// (the page was found). Measured: a file of 8 pages cut to 0x1800 bytes, mapped and read at page 0, shows
/// 4 kB; read at page 1, 4 kB too.
#[test]
fn truncation_caches_the_partial_block_unread() {
    assert_eq!(vmspace_pgtable::partial_block_page(8 * PG, 0x1800), Some(1));
    assert_eq!(vmspace_pgtable::partial_block_page(0x1800, 0x1800), Some(1));
    assert_eq!(vmspace_pgtable::partial_block_page(0x1800, 8 * PG), Some(1));
    assert_eq!(vmspace_pgtable::partial_block_page(0, 0x1800), None);
    assert_eq!(vmspace_pgtable::partial_block_page(8 * PG, 2 * PG), None);

    let f = file(8);
    f.cache.truncate(0x1800);
    assert_eq!(f.cached(), [(1, 1)]);
    let unread =
        |i| f.mem.frame_info(f.cache.page(i).unwrap()).unwrap().flags.contains(FrameFlags::NOT_UPTODATE);
    assert!(unread(1));
    let mut v = f.vma(0, 7, 0, RO);
    read(&f.pt, &mut v, A, 1).unwrap();
    assert_eq!((f.cached(), f.mapped(0, 7)), (vec![(0, 1)], vec![(0, 0)]));
    v.tried = false;
    assert_eq!(handle_mm_fault(&f.pt, &v, A + PG, Access::Read), VmFault::RetryIo { major: false });
    assert!(!unread(1));
    read(&f.pt, &mut v, A + PG, 1).unwrap();
    assert_eq!(f.mapped(0, 7), [(0, 1)]);
    f.check();

    // Growing from an unaligned size caches the old end's page the same way.
    let f = file(2);
    f.cache.truncate(0x1800);
    f.cache.truncate(8 * PG);
    let mut v = f.vma(0, 7, 0, RO);
    read(&f.pt, &mut v, A + PG, 1).unwrap();
    assert_eq!((f.cached(), f.mapped(0, 7)), (vec![(1, 1)], vec![(1, 1)]));
    f.check();
}

/// Pages evicted after writeback come back with their bytes when read in again.
#[test]
fn evicted_pages_are_read_back() {
    let f = file(16);
    let mut v = f.vma(0, 16, 0, SHARED_RW);
    let reg = f.register(0, 16);
    write(&f.pt, &mut v, A + 2 * PG + 5, b"kept").unwrap();
    f.cache.writeback(0, 15);
    f.cache.pageout(&f.pt, A, A + 16 * PG);
    assert!(f.cache.page(2).is_none(), "clean and mapped once: evicted");
    let mut b = [0u8; 4];
    f.cache.read(2 * PG + 5, &mut b);
    assert_eq!(&b, b"kept");
    assert_eq!(read(&f.pt, &mut v, A + 2 * PG + 5, 4).unwrap(), b"kept");
    f.cache.truncate(2 * PG + 6);
    f.cache.truncate(16 * PG);
    assert_eq!(read(&f.pt, &mut v, A + 2 * PG + 5, 4).unwrap(), b"k\0\0\0");
    f.cache.i_mmap_remove(reg);
    f.check();
}

/// Windows after the first are large folios (order 2, 4, 6, ...), each marked on its first folio; 6.18's
/// fault-around maps a large folio whole when it lies in the VMA and the page table, beyond its 16-page window
/// (measured: reading file page 6144 mapped 6144-6207, the order-6 folio).
#[test]
fn later_windows_are_large_folios_mapped_whole() {
    let f = file(262_144);
    let mut v = f.vma(0, 16_384, 0, RO);
    for p in [0, 1536, 2048, 4096] {
        read(&f.pt, &mut v, A + p * PG, 1).unwrap();
    }
    assert_eq!((f.cached(), f.marked()), (vec![(0, 8191)], vec![(6144, 6207)]));
    let order = |i| f.mem.frame_info(f.cache.page(i).unwrap()).unwrap().flags.order();
    assert_eq!((order(2048), order(4096), order(6144), order(100)), (2, 4, 6, 0));
    read(&f.pt, &mut v, A + 6144 * PG, 1).unwrap();
    assert_eq!(order(8192), 8);
    assert_eq!(f.mapped(6000, 300), [(144, 207)]);
    f.check();
}

/// `MADV_HUGEPAGE` reads two PMD-sized windows at the PMD order, cut to the file: an 8-page file becomes one
/// folio of order 3, and a write through a shared mapping dirties all of it, so a private mapping's read-only
/// pages of it count as dirty in smaps (a script the generator found: `scripts/regress/readahead-folio.script`).
/// Truncating into the folio keeps it whole while it is dirty (ext4 cannot split it: the pages past the end stay
/// cached, zeroed; `scripts/regress/readahead-truncate-dirty-folio.script`) and splits it when clean, the pages
/// keeping its state.
#[test]
fn hugepage_windows_make_one_folio_of_a_small_file() {
    let f = file(8);
    let mut v = f.vma(0, 8, 0, SHARED_RW | VmFlags::HUGEPAGE);
    write(&f.pt, &mut v, A + 7 * PG, b"x").unwrap();
    let info = |i| f.mem.frame_info(f.cache.page(i).unwrap()).unwrap();
    assert_eq!((info(0).flags.order(), info(7).head), (3, f.cache.page(0)));
    assert!(!info(5).flags.contains(FrameFlags::DIRTY) && info(0).flags.contains(FrameFlags::DIRTY));
    f.cache.truncate(0x5800);
    assert_eq!(f.cached(), [(0, 7)], "dirty: not split");
    assert_eq!(info(6).flags.order(), 3);
    let mut b = [1u8; 1];
    f.cache.truncate(8 * PG);
    f.cache.read(7 * PG, &mut b);
    assert_eq!(b, [0], "the page past the old end was zeroed");
    f.check();

    let f = file(8);
    let mut v = f.vma(0, 8, 0, RO | VmFlags::HUGEPAGE);
    read(&f.pt, &mut v, A, 1).unwrap();
    let info = |i| f.mem.frame_info(f.cache.page(i).unwrap()).unwrap();
    assert_eq!(info(0).flags.order(), 3);
    f.cache.truncate(0x5800);
    assert_eq!(f.cached(), [(0, 5)], "clean: split, the pages past the end dropped");
    for i in 0..6 {
        assert_eq!((info(i).head, info(i).flags.order()), (None, 0), "page {i} split off");
    }
    f.check();
}
