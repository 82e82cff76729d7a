//! Memory footprint of the page tables, asserted exactly: bytes of page-table memory per faulted page in a
//! dense and in sparse layouts, against what the kernel's tables cost for the same pages.
//!
//! Measured elsewhere: the anonymous fault *rates* on one and two threads by `vmspace bench faults` (engine
//! beside the live kernel, its targets judged there and by `vmspace report`; a rate bound in a test would pass
//! or fail with the machine's load); that a loop which maps, writes and unmaps memory takes no memory from the
//! system after its first round by `crates/mm/tests/unmap_frees_at_once.rs` (alone in its binary: the frame
//! allocator's per-thread lists make that count depend on what other threads of the process free).

mod common;

use vmspace_pgtable::{
    FaultVma, Memory, MemoryConfig, PAGE_SIZE, PMD_SIZE, PUD_SIZE, PageTable, TABLE_BYTES,
};

use common::{RW, write};

const BASE: u64 = 0x10_0000_0000;

/// What one x86-64 page-table page costs the kernel: its 4 KiB page and that page's 64-byte `struct page`.
const KERNEL_TABLE_BYTES: u64 = 4096 + 64;

/// Faults one page at each of `count` addresses `stride` apart; returns the table pages and the table bytes.
fn tables_for(count: u64, stride: u64) -> (u64, u64) {
    let mem = Memory::new(MemoryConfig::default());
    let pt = PageTable::new(&mem).unwrap();
    let mut v = FaultVma::anonymous(BASE, BASE + count * stride, RW);
    for i in 0..count {
        write(&pt, &mut v, BASE + i * stride, &[1]).unwrap();
    }
    assert_eq!(pt.rss().anon as u64, count);
    pt.validate().unwrap();
    assert_eq!(pt.table_bytes(), mem.stats().tables_in_use * TABLE_BYTES as u64);
    (pt.table_pages(), pt.table_bytes())
}

/// The x86-64 4-level tables the kernel needs for `count` pages `stride` apart from `BASE`: the PGD, and per
/// level one table per distinct index range the pages fall into.
fn kernel_tables(count: u64, stride: u64) -> u64 {
    let last = BASE + (count - 1) * stride;
    let tables_over = |span: u64| {
        // Pages `stride` apart meet a new table of `span` bytes each time their address crosses a multiple of
        // `span`; with `stride >= span` every page has one of its own.
        if stride >= span { count } else { last / span - BASE / span + 1 }
    };
    1 + tables_over(PUD_SIZE * 512) + tables_over(PUD_SIZE) + tables_over(PMD_SIZE)
}

#[test]
fn page_table_bytes_per_faulted_page_are_the_kernels() {
    // A table page costs what the kernel's does: the page and its descriptor.
    assert_eq!(TABLE_BYTES as u64, KERNEL_TABLE_BYTES);
    for (count, stride, tables, what) in [
        // 32 PTE tables, one PMD, one PUD and the PGD for 16,384 contiguous pages.
        (16384, PAGE_SIZE, 32 + 3, "dense"),
        // One PTE table per page, plus a PMD, a PUD and the PGD shared by all.
        (512, PMD_SIZE, 512 + 3, "one page per 2 MiB"),
        // A PTE table and a PMD table per page, plus a PUD and the PGD.
        (64, PUD_SIZE, 2 * 64 + 2, "one page per 1 GiB"),
    ] {
        assert_eq!(kernel_tables(count, stride), tables, "{what}: the kernel's count");
        let (pages, bytes) = tables_for(count, stride);
        assert_eq!(pages, tables, "{what}: table pages");
        assert_eq!(bytes, tables * KERNEL_TABLE_BYTES, "{what}: table bytes");
    }
    // So the bytes per faulted page are the kernel's: dense 35 x 4,160 / 16,384 = 8.887 (tending to 4,160 / 512
    // = 8.125, one PTE table per 512 pages); one page per 2 MiB 515 x 4,160 / 512 = 4,184.375; one page per
    // 1 GiB 130 x 4,160 / 64 = 8,450.
}
