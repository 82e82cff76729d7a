//! The `/proc` readers (`Mm::reader`): smaps records, smaps_rollup and PROCMAP_QUERY of the engine, in both
//! reader modes, against hand-computed expectations from `fs/proc/task_mmu.c` (the live kernel's answers for
//! the same calls are held by the op scripts `scripts/regress/smaps-*.script` and `query-*.script`).

use vmspace_mm::{Errno, MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, ReaderMode, VmFile};
use vmspace_proc::query::{
    PROCMAP_QUERY_COVERING_OR_NEXT_VMA, PROCMAP_QUERY_FILE_BACKED_VMA, PROCMAP_QUERY_VMA_EXECUTABLE,
    PROCMAP_QUERY_VMA_READABLE, PROCMAP_QUERY_VMA_SHARED, PROCMAP_QUERY_VMA_WRITABLE,
};
use vmspace_proc::{MemStats, QueryRequest, parse_smaps};

const P: u64 = PAGE_SIZE;
const A: u64 = 0x2000_0000_0000;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

fn stats(mm: &Mm, addr: u64, mode: ReaderMode) -> MemStats {
    mm.reader_with(mode).smaps_record(addr).expect("mapped").stats
}

#[test]
fn private_anonymous_pages_zero_page_and_dirty() {
    let mm = Mm::new(MmConfig::default());
    mm.mmap(A, 8 * P, Prot::RW, ANON, None, 0).unwrap();
    mm.write(A, b"x").unwrap();
    mm.write(A + P, b"y").unwrap();
    // A read of an untouched page maps the zero page: not counted at all.
    mm.read(A + 2 * P, &mut [0u8; 1]).unwrap();
    for mode in [ReaderMode::MmapLock, ReaderMode::PerVma] {
        let s = stats(&mm, A, mode);
        assert_eq!(
            (s.rss, s.pss, s.pss_dirty, s.private_dirty, s.anonymous, s.referenced),
            (8, 8, 8, 8, 8, 8)
        );
        assert_eq!((s.shared_clean, s.shared_dirty, s.private_clean, s.locked, s.lazyfree), (0, 0, 0, 0, 0));
    }
    let r = mm.reader().smaps_record(A).unwrap();
    assert_eq!((r.size_kb, r.kernel_page_size_kb, r.mmu_page_size_kb, r.thp_eligible), (32, 4, 4, 0));
    assert_eq!(r.vm_flags.mnemonics.join(" "), "rd wr mr mw me ac");
    mm.validate().unwrap();
}

#[test]
fn fork_shares_pss_between_parent_and_child_until_cow() {
    let mm = Mm::new(MmConfig::default());
    mm.mmap(A, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    mm.fill(A, 4 * P, 7).unwrap();
    let child = mm.fork().unwrap();
    for m in [&mm, &child] {
        let s = stats(m, A, ReaderMode::MmapLock);
        assert_eq!((s.rss, s.pss, s.shared_dirty, s.private_dirty, s.pss_dirty), (16, 8, 16, 0, 8), "{s:?}");
    }
    // The child writes one page: its own copy is private; the parent's page is its own again.
    child.write(A, b"c").unwrap();
    let s = stats(&child, A, ReaderMode::MmapLock);
    assert_eq!((s.rss, s.pss, s.shared_dirty, s.private_dirty), (16, 10, 12, 4), "{s:?}");
    let s = stats(&mm, A, ReaderMode::MmapLock);
    assert_eq!((s.rss, s.pss, s.shared_dirty, s.private_dirty), (16, 10, 12, 4), "{s:?}");
    drop(child);
    let s = stats(&mm, A, ReaderMode::MmapLock);
    assert_eq!((s.rss, s.pss, s.shared_dirty, s.private_dirty), (16, 16, 0, 16), "{s:?}");
}

#[test]
fn mlock_counts_locked_as_pss_and_dontneed_drops_rss() {
    let mm = Mm::new(MmConfig::default());
    mm.mmap(A, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    mm.mlock(A, 4 * P).unwrap();
    let s = stats(&mm, A, ReaderMode::MmapLock);
    assert_eq!((s.rss, s.locked, s.private_dirty), (16, 16, 16), "{s:?}");
    mm.munlock(A, 4 * P).unwrap();
    mm.madvise(A, 2 * P, vmspace_mm::Advice::DONTNEED).unwrap();
    let s = stats(&mm, A, ReaderMode::MmapLock);
    assert_eq!((s.rss, s.locked), (8, 0), "{s:?}");
    mm.madvise(A + 2 * P, P, vmspace_mm::Advice::FREE).unwrap();
    // The page is lazily free once the CPU's lazy-free batch drains (`Memory::lru_add_drain`); until then it
    // is only clean.
    let s = stats(&mm, A, ReaderMode::MmapLock);
    assert_eq!((s.rss, s.private_clean, s.private_dirty), (8, 4, 4), "{s:?}");
    mm.memory().lru_add_drain();
    let s = stats(&mm, A, ReaderMode::MmapLock);
    assert_eq!((s.rss, s.lazyfree, s.private_clean, s.private_dirty), (8, 4, 4, 4), "{s:?}");
}

#[test]
fn rollup_is_the_sum_of_the_records() {
    let mm = Mm::new(MmConfig::default());
    let f = VmFile::regular("/vmspace/f", 1, 16 * P);
    mm.mmap(A, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    mm.mmap(A + 8 * P, 4 * P, Prot::READ, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0).unwrap();
    mm.mmap(A + 16 * P, 4 * P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 0).unwrap();
    mm.fill(A, 3 * P, 1).unwrap();
    mm.read(A + 8 * P, &mut [0u8; 2 * 4096]).unwrap();
    mm.fill(A + 16 * P, P, 2).unwrap();
    let child = mm.fork().unwrap();
    child.write(A + P, b"z").unwrap();
    for m in [&mm, &child] {
        let reader = m.reader();
        let records = parse_smaps(&reader.smaps()).unwrap();
        assert_eq!(records.len(), 3);
        let rollup = reader.smaps_rollup();
        assert_eq!((rollup.start, rollup.end), (A, A + 20 * P));
        let sum = |f: fn(&MemStats) -> u64| records.iter().map(|r| f(&r.stats)).sum::<u64>();
        let s = rollup.stats;
        assert_eq!(s.rss, sum(|m| m.rss));
        assert_eq!(s.shared_clean, sum(|m| m.shared_clean));
        assert_eq!(s.shared_dirty, sum(|m| m.shared_dirty));
        assert_eq!(s.private_clean, sum(|m| m.private_clean));
        assert_eq!(s.private_dirty, sum(|m| m.private_dirty));
        assert_eq!(s.anonymous, sum(|m| m.anonymous));
        assert_eq!(s.referenced, sum(|m| m.referenced));
        // PSS sums in fixed point before the conversion: within a kB per record of the printed sum.
        let pss = sum(|m| m.pss);
        assert!(s.pss >= pss && s.pss <= pss + records.len() as u64, "{} vs {pss}", s.pss);
        assert_eq!(s.pss, s.pss_anon + s.pss_file + s.pss_shmem);
        let text = rollup.render();
        assert!(text.starts_with("200000000000-200000014000 ---p 00000000 00:00 0"), "{text}");
        assert!(text.lines().next().unwrap().ends_with(" [rollup]"));
        assert_eq!(vmspace_proc::SmapsRollup::parse(&text).unwrap(), rollup);
        assert_eq!(reader.maps(), m.maps_text());
    }
    // An empty address space: the range 0-0.
    let empty = Mm::new(MmConfig::default());
    assert!(empty.reader().smaps_rollup().render().starts_with("00000000-00000000 ---p 00000000 00:00 0 "));
}

#[test]
fn query_flags_filters_and_errors() {
    let mm = Mm::new(MmConfig::default());
    let f = VmFile::regular("/vmspace/f", 1, 16 * P);
    mm.mmap(A, 2 * P, Prot::READ, ANON, None, 0).unwrap();
    mm.mmap(A + 4 * P, 2 * P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 2 * P).unwrap();
    mm.mmap(A + 8 * P, 2 * P, Prot::RX, ANON, None, 0).unwrap();
    for mode in [ReaderMode::MmapLock, ReaderMode::PerVma] {
        let r = mm.reader_with(mode);
        let q = |flags: u64, addr: u64| r.query(&QueryRequest::new(flags, addr));
        let a = q(0, A + P).unwrap();
        assert_eq!((a.vma_start, a.vma_end, a.vma_flags, a.vma_page_size), (A, A + 2 * P, 1, P));
        assert_eq!(a.name, None);
        assert_eq!(q(0, A + 2 * P), Err(Errno::ENOENT));
        let cov = PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
        let a = q(cov, A + 2 * P).unwrap();
        assert_eq!(a.vma_start, A + 4 * P);
        assert_eq!(
            a.vma_flags,
            PROCMAP_QUERY_VMA_READABLE | PROCMAP_QUERY_VMA_WRITABLE | PROCMAP_QUERY_VMA_SHARED
        );
        assert_eq!((a.vma_offset, a.inode), (2 * P, 1));
        assert_eq!(q(cov | PROCMAP_QUERY_VMA_EXECUTABLE, A).unwrap().vma_start, A + 8 * P);
        assert_eq!(q(PROCMAP_QUERY_VMA_WRITABLE, A), Err(Errno::ENOENT));
        assert_eq!(q(cov | PROCMAP_QUERY_FILE_BACKED_VMA, A + 6 * P), Err(Errno::ENOENT));
        assert_eq!(q(cov, A + 10 * P), Err(Errno::ENOENT));
        assert_eq!(q(0x40, A), Err(Errno::EINVAL));
        // A name buffer: the path with its NUL, or ENAMETOOLONG when it does not fit.
        let named = |cap: u32| {
            r.query(&QueryRequest {
                vma_name_size: cap,
                vma_name_addr: 0x1000,
                ..QueryRequest::new(0, A + 4 * P)
            })
        };
        assert_eq!(named(64).unwrap().name.as_deref(), Some("/vmspace/f"));
        assert_eq!(named(64).unwrap().name_size(64), Ok(11));
        assert_eq!(named(11).map(|a| a.vma_start), Ok(A + 4 * P));
        assert_eq!(named(10), Err(Errno::ENAMETOOLONG));
        assert_eq!(r.query(&QueryRequest { size: 8, ..QueryRequest::new(0, A) }), Err(Errno::EINVAL));
        assert_eq!(r.query(&QueryRequest { size: 5000, ..QueryRequest::new(0, A) }), Err(Errno::E2BIG));
    }
}

/// A reader thread renders smaps and queries while another thread maps, writes and unmaps: every record it
/// produces parses, and every VMA it reports is one the writer made whole.
#[test]
fn readers_run_beside_writers() {
    let mm = Mm::new(MmConfig::default());
    mm.mmap(A, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    std::thread::scope(|s| {
        for mode in [ReaderMode::MmapLock, ReaderMode::PerVma] {
            let mm = &mm;
            s.spawn(move || {
                let r = mm.reader_with(mode);
                for _ in 0..200 {
                    let recs = parse_smaps(&r.smaps()).expect("well-formed");
                    for rec in &recs {
                        let len = rec.header.end - rec.header.start;
                        assert!(len == 4 * P || len == 8 * P, "{:?}", rec.header);
                        assert!(rec.stats.rss <= len >> 10);
                    }
                    let a = r.query(&QueryRequest::new(PROCMAP_QUERY_COVERING_OR_NEXT_VMA, A)).unwrap();
                    assert_eq!(a.vma_start, A);
                }
            });
        }
        s.spawn(|| {
            for i in 0..200u64 {
                let at = A + 16 * P;
                mm.mmap(at, 8 * P, Prot::RW, ANON, None, 0).unwrap();
                mm.fill(at, (i % 8 + 1) * P, 3).unwrap();
                mm.munmap(at, 8 * P).unwrap();
            }
        });
    });
    mm.validate().unwrap();
}

/// `MAP_FIXED` over part of a mapping (the split of `proc-maps-race.c`'s `test_maps_tearing_from_split`):
/// the old VMA stays in the tree, write-locked, until the new one's store takes its range over
/// (`mm/vma.c: __mmap_region`), so a reader in any mode sees the range mapped throughout: before (one VMA) or
/// after (two), never a gap (a VMA may be reported twice, before and after the change).
#[test]
fn map_fixed_over_a_mapping_shows_no_gap() {
    let mm = Mm::new(MmConfig::default());
    mm.mmap(A, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for mode in [ReaderMode::MmapLock, ReaderMode::PerVma] {
            let (mm, stop) = (&mm, &stop);
            s.spawn(move || {
                let r = mm.reader_with(mode);
                // Relaxed: a stop flag; the scope's join publishes the rest.
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let text = r.maps();
                    let mut covered = A;
                    for line in text.lines() {
                        let (range, _) = line.split_once(' ').unwrap();
                        let (lo, hi) = range.split_once('-').unwrap();
                        let (lo, hi) =
                            (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap());
                        if hi <= A || lo >= A + 4 * P {
                            continue;
                        }
                        // A record read after a change may start below the last one's end (the merged VMA
                        // after the split one): reported twice, which is allowed; a gap is not.
                        assert!(lo <= covered, "{mode:?}: a gap at {covered:#x} in\n{text}");
                        covered = covered.max(hi);
                    }
                    assert_eq!(covered, A + 4 * P, "{mode:?}: the range ends early in\n{text}");
                }
            });
        }
        // Half a second of splits and merges: each reader reads thousands of times meanwhile.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(500);
        while std::time::Instant::now() < until {
            mm.mmap(A + 3 * P, P, Prot::READ, ANON, None, 0).unwrap();
            mm.mmap(A + 3 * P, P, Prot::RW, ANON, None, 0).unwrap();
        }
        // Relaxed: as above.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    mm.validate().unwrap();
}
