//! Allocation-failure injection at every allocation of every operation that allocates: the n-th allocation
//! fails, for n = 0, 1, ... until the operation succeeds. After each failure the operation's visible state is
//! what it was (every entry of every page table, RSS, the page cache's pages and contents, frames, contents
//! buffers and cache nodes in use), and tearing the world down gives every frame, table, buffer and node back.
//!
//! One thing a failure may leave, as the kernel's does: empty page-table pages allocated on the way down
//! (`__handle_mm_fault`'s `pud_alloc`/`pmd_alloc` before a failing page allocation, `move_page_tables`' new
//! tables). They map nothing, `validate` accepts them, and teardown frees them. Fork's failure leaves the
//! parent's entries write-protected (compared here without the writable bit), as `copy_page_range`'s does.

mod common;

use std::sync::Arc;

use vmspace_pgtable::{
    Access, Bdi, CopyVma, FaultVma, Memory, MemoryConfig, MoveFlags, PAGE_SIZE, PMD_SIZE, PageCache,
    PageTable, VA_END, VmFault, bits, handle_mm_fault,
};

use common::{RW, SHARED_RW, check_memory, read, write};

const PG: u64 = PAGE_SIZE;
const A: u64 = 0x5555_0000_0000;

/// One test world: a memory, two address spaces and a file with some pages.
struct World {
    mem: Arc<Memory>,
    pt: PageTable,
    child: PageTable,
    file: PageCache,
}

#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    entries: Vec<Vec<(u64, u64)>>,
    rss: Vec<vmspace_pgtable::Rss>,
    /// The file's contents, hashed (FNV-1a), so that a failure message stays readable.
    cache: u64,
    cache_pages: u64,
    frames: u64,
    data: u64,
    nodes: u64,
}

impl World {
    fn new() -> World {
        // Without fault-around: a read fault maps the cached pages around it before it allocates its own, and
        // those mappings stay when that allocation fails (as the kernel's `do_fault_around` ones do), which
        // would hide what the failed allocation itself left. Without readahead for the same reason: its pages
        // stay when the fault's own allocation fails (`vmspace-mm`'s `page_alloc_failure.rs` fails readahead's allocations).
        let mem = Memory::new(MemoryConfig { fault_around_bytes: 0, ..MemoryConfig::default() });
        let pt = PageTable::new(&mem).unwrap();
        let child = PageTable::new(&mem).unwrap();
        let file = PageCache::with_bdi(&mem, 0, false, Bdi::NONE);
        file.write(0, &[3u8; 2 * 4096]).unwrap();
        file.truncate(8 * 4096);
        World { mem, pt, child, file }
    }

    fn snapshot(&self) -> Snapshot {
        vmspace_rcu::synchronize();
        // The writable bit is left out: a failed fork may have write-protected the parent (module docs).
        let strip = |pt: &PageTable| {
            pt.entries(0, VA_END).into_iter().map(|(a, p)| (a, p.raw() & !bits::RW)).collect::<Vec<_>>()
        };
        let mut bytes = vec![0u8; 8 * 4096];
        self.file.read(0, &mut bytes);
        let cache = bytes
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let s = self.mem.stats();
        Snapshot {
            entries: vec![strip(&self.pt), strip(&self.child)],
            rss: vec![self.pt.rss(), self.child.rss()],
            cache,
            cache_pages: self.file.nr_pages(),
            frames: s.frames_in_use,
            data: s.data_in_use,
            nodes: s.cache_nodes_in_use,
        }
    }

    fn check_and_tear_down(self) {
        check_memory(&self.mem, &[&self.pt, &self.child], &[&self.file]);
        let mem = self.mem.clone();
        drop(self);
        vmspace_rcu::synchronize();
        let s = mem.stats();
        assert_eq!(
            (s.frames_in_use, s.tables_in_use, s.data_in_use, s.cache_nodes_in_use, s.frames_pending_free),
            (0, 0, 0, 0, 0),
            "{s:?}"
        );
    }
}

/// Runs `op` on a fresh world (prepared by `prep`) with the n-th allocation failing, for every n until it
/// succeeds; checks each failure (module docs). Returns how many allocations the operation makes.
fn fail_each(name: &str, prep: impl Fn(&World), op: impl Fn(&World) -> bool) -> u64 {
    let mut n = 0;
    loop {
        let w = World::new();
        prep(&w);
        let before = w.snapshot();
        w.mem.inject_alloc_failure(Some(n));
        let ok = op(&w);
        w.mem.inject_alloc_failure(None);
        if ok {
            w.check_and_tear_down();
            return n;
        }
        assert_eq!(w.mem.stats().injected_failures, 1, "{name}: failure {n} not from the injection");
        assert_eq!(w.snapshot(), before, "{name}: failure at allocation {n} changed something");
        w.check_and_tear_down();
        n += 1;
        assert!(n < 64, "{name} never succeeded");
    }
}

fn anon<'a>() -> FaultVma<'a> {
    FaultVma::anonymous(A, A + 4 * PMD_SIZE, RW).with_anon_vma()
}

#[test]
fn faults() {
    let handled = |r: VmFault| matches!(r, VmFault::Handled(_));
    // PUD, PMD and PTE tables (left if a later one fails), then the frame.
    assert_eq!(
        fail_each("anonymous write", |_| {}, |w| handled(handle_mm_fault(&w.pt, &anon(), A, Access::Write))),
        4
    );
    // Tables, the page-cache frame (the radix leaf for the file's first 64 pages exists already).
    fn fv(w: &World) -> FaultVma<'_> {
        FaultVma::file(A, A + 8 * PG, 0, RW, &w.file, false).with_anon_vma()
    }
    assert_eq!(
        fail_each(
            "file read, new cache page",
            |_| {},
            |w| handled(handle_mm_fault(&w.pt, &fv(w), A + 5 * PG, Access::Read))
        ),
        4
    );
    // Tables, the anonymous frame, then the contents copied from a written cache page.
    assert_eq!(
        fail_each("cow fault", |_| {}, |w| handled(handle_mm_fault(&w.pt, &fv(w), A, Access::Write))),
        5
    );
    // Tables and the page-cache frame of the hole at page 6.
    fn sv(w: &World) -> FaultVma<'_> {
        FaultVma::file(A, A + 8 * PG, 0, SHARED_RW, &w.file, true)
    }
    assert_eq!(
        fail_each(
            "shared fault",
            |_| {},
            |w| handled(handle_mm_fault(&w.pt, &sv(w), A + 6 * PG, Access::Write))
        ),
        4
    );
    // After fork: the copy of a shared anonymous page needs a frame and its contents.
    let forked = |w: &World| {
        let mut v = anon();
        write(&w.pt, &mut v, A, b"shared").unwrap();
        w.pt.copy_page_range(
            &w.child,
            &CopyVma { start: A, end: A + 4 * PMD_SIZE, flags: RW, dst_uffd_wp: false },
        )
        .unwrap();
    };
    assert_eq!(
        fail_each("wp copy", forked, |w| handled(handle_mm_fault(&w.child, &anon(), A, Access::Write))),
        2
    );
}

#[test]
fn the_first_store_to_a_frame_allocates_its_contents() {
    let prep = |w: &World| {
        assert!(matches!(handle_mm_fault(&w.pt, &anon(), A, Access::Write), VmFault::Handled(_)));
    };
    assert_eq!(fail_each("store", prep, |w| w.pt.write(A + 8, b"x").is_ok()), 1);
    let w = World::new();
    prep(&w);
    w.mem.inject_alloc_failure(Some(0));
    assert_eq!(w.pt.write(A, b"x"), Err(vmspace_pgtable::MmuError::NoMem));
    let mut v = anon();
    assert_eq!(read(&w.pt, &mut v, A, 1).unwrap(), vec![0]);
    w.check_and_tear_down();
}

#[test]
fn fork_move_and_new_page_tables() {
    let prep = |w: &World| {
        let mut v = anon();
        for i in 0..3 {
            write(&w.pt, &mut v, A + i * PMD_SIZE + 7 * PG, &[i as u8 + 1]).unwrap();
        }
        w.pt.install_guard_markers(A + 2 * PG, A + 3 * PG).unwrap();
    };
    let copy = |w: &World| {
        let ok = w.pt.copy_page_range(
            &w.child,
            &CopyVma { start: A, end: A + 4 * PMD_SIZE, flags: RW, dst_uffd_wp: false },
        );
        if ok.is_err() {
            // dup_mmap's failure path: the child is torn down.
            w.child.zap_range(0, VA_END, &vmspace_pgtable::ZapDetails::UNMAP);
            w.child.free_pgd_range(0, VA_END, 0, 0);
        }
        ok.is_ok()
    };
    // The child's PUD, PMD and three PTE tables.
    assert_eq!(fail_each("copy_page_range", prep, copy), 5);
    let mv = |w: &World| {
        w.pt.move_page_tables(A + 5 * PG, A + 64 * PMD_SIZE + 9 * PG, 3 * PMD_SIZE, &MoveFlags::default())
            .is_ok()
    };
    assert!(fail_each("move_page_tables", prep, mv) >= 2);
    let m = Memory::new(MemoryConfig::default());
    m.inject_alloc_failure(Some(0));
    assert!(PageTable::new(&m).is_err());
    assert_eq!(m.stats().tables_in_use, 0);
    assert!(PageTable::new(&m).is_ok());
}

#[test]
fn page_cache_writes_stop_short_and_leak_nothing() {
    for n in 0..6 {
        let w = World::new();
        w.mem.inject_alloc_failure(Some(n));
        let r = w.file.write(3 * 4096 - 10, &[9u8; 4096]);
        w.mem.inject_alloc_failure(None);
        let size = w.file.size();
        match r {
            Ok(k) => assert_eq!(size, (3 * 4096 - 10 + k as u64).max(8 * 4096)),
            Err(e) => assert_eq!((e, size), (vmspace_abi::Errno::ENOMEM, 8 * 4096)),
        }
        w.check_and_tear_down();
    }
}
