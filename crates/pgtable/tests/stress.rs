//! Stress: threads fault, write and read back pages in disjoint ranges of one PTE table while a zapper runs
//! `MADV_DONTNEED` over parts of the table and over all of it (reclaiming the table under the faulters), and a
//! lockless smaps reader walks it. Each faulter checks that a page reads as its last write or as zeroes (zapped),
//! never anything else; at the end the accounting is exact and everything is freed. Runs `PGTABLE_STRESS_MS`
//! milliseconds (default 1500).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_pgtable::{
    FaultVma, Memory, MemoryConfig, MmuError, PAGE_SIZE, PMD_SIZE, PageTable, VmFault, ZapDetails,
    handle_mm_fault,
};

use common::{RW, check_memory, read_u64, write};

const PG: u64 = PAGE_SIZE;
const BASE: u64 = 0x7f00_0000_0000 - 64 * PMD_SIZE;
const FAULTERS: u64 = 2;
const PAGES_EACH: u64 = 200;

#[test]
fn faulters_zapper_and_lockless_reader_on_one_table() {
    let ms: u64 = std::env::var("PGTABLE_STRESS_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(1500);
    let mem = Memory::new(MemoryConfig::default());
    let pt = Arc::new(PageTable::new(&mem).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let zeroed = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for t in 0..FAULTERS {
        let (pt, stop, checks, zeroed) = (pt.clone(), stop.clone(), checks.clone(), zeroed.clone());
        hs.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(t);
            let mut vma = FaultVma::anonymous(BASE, BASE + PMD_SIZE, RW);
            let first = t * PAGES_EACH;
            let mut last = vec![0u64; PAGES_EACH as usize];
            while !stop.load(Ordering::Relaxed) {
                let i = rng.random_range(0..PAGES_EACH);
                let a = BASE + (first + i) * PG;
                let got = read_u64(&pt, &mut vma, a).unwrap();
                assert!(
                    got == last[i as usize] || got == 0,
                    "page {i}: read {got:#x}, wrote {:#x}",
                    last[i as usize]
                );
                if got == 0 && last[i as usize] != 0 {
                    zeroed.fetch_add(1, Ordering::Relaxed);
                }
                let v = rng.random::<u64>() | 1;
                write(&pt, &mut vma, a, &v.to_le_bytes()).unwrap();
                last[i as usize] = v;
                let got = read_u64(&pt, &mut vma, a).unwrap();
                assert!(got == v || got == 0, "page {i}: read {got:#x} right after writing {v:#x}");
                checks.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (pt, stop) = (pt.clone(), stop.clone());
        hs.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(99);
            let mut reclaimed = 0;
            while !stop.load(Ordering::Relaxed) {
                if rng.random_ratio(1, 8) {
                    reclaimed +=
                        pt.zap_range(BASE, BASE + PMD_SIZE, &ZapDetails::dontneed(false)).tables_freed;
                } else {
                    let s = BASE + rng.random_range(0..512) * PG;
                    let n = rng.random_range(1..64) * PG;
                    pt.zap_range(s, (s + n).min(BASE + PMD_SIZE), &ZapDetails::dontneed(false));
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            assert!(reclaimed > 0, "the table was never reclaimed under the faulters");
        }));
    }
    {
        let (pt, stop) = (pt.clone(), stop.clone());
        hs.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut acc = vmspace_proc::MemStatsAccumulator::default();
                pt.smaps_range_lockless(BASE, BASE + PMD_SIZE, false, &mut acc);
                assert!(acc.bytes.rss <= FAULTERS * PAGES_EACH * PG);
                assert_eq!(acc.bytes.anonymous, acc.bytes.rss);
            }
        }));
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(ms) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    println!(
        "{} write-read checks, {} pages found zapped, faults {:?}",
        checks.load(Ordering::Relaxed),
        zeroed.load(Ordering::Relaxed),
        pt.fault_stats()
    );
    assert!(checks.load(Ordering::Relaxed) > 1000);
    check_memory(&mem, &[&pt], &[]);
    drop(pt);
    vmspace_rcu::synchronize();
    let s = mem.stats();
    assert_eq!((s.frames_in_use, s.tables_in_use, s.data_in_use), (0, 0, 0), "{s:?}");
}

/// Where the unlink races run: a 512 GiB span of its own, so that `free_pgd_range(.., 0, 0)` frees its PUD table.
const FREE_BASE: u64 = 0x3000_0000_0000;

fn stress_ms() -> u64 {
    std::env::var("PGTABLE_STRESS_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(1500) / 2
}

/// `free_pgd_range` with no lock against every walker that does not populate: in rounds, the main thread faults
/// pages into four PTE tables under two PMD tables, then one thread zaps and frees the span's tables (PUD table
/// included) while another runs the locked walks (`change_protection`, `smaps_range`, `mlock_range`,
/// `madvise_free`, `mkold_range`, guard removal, a `MADV_DONTNEED` zap) and the lockless ones over the same span.
/// The walkers are in the upper tables the freer unlinks; they stay allocated until the walkers' sections end.
/// The accounting is exact after all rounds.
#[test]
fn free_pgd_range_beside_the_walkers_of_its_range() {
    use vmspace_pgtable::{ChangeProt, PUD_SIZE, PageProt};
    let mem = Memory::new(MemoryConfig::default());
    let pt = PageTable::new(&mem).unwrap();
    let spans = [0, PMD_SIZE, PUD_SIZE, PUD_SIZE + PMD_SIZE].map(|o| FREE_BASE + o);
    let end = FREE_BASE + PUD_SIZE + 2 * PMD_SIZE;
    let barrier = std::sync::Barrier::new(3);
    let stop = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    let freed = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            loop {
                barrier.wait();
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                pt.zap_range(FREE_BASE, end, &ZapDetails::UNMAP);
                freed.fetch_add(pt.free_pgd_range(FREE_BASE, end, 0, 0), Ordering::Relaxed);
                barrier.wait();
            }
        });
        s.spawn(|| {
            let ro = ChangeProt { newprot: PageProt::READONLY, try_change_writable: false, shared: false };
            loop {
                barrier.wait();
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                for _ in 0..4 {
                    pt.change_protection(FREE_BASE, end, &ro);
                    let mut acc = vmspace_proc::MemStatsAccumulator::default();
                    pt.smaps_range(FREE_BASE, end, false, &mut acc);
                    pt.smaps_range_lockless(FREE_BASE, end, false, &mut acc);
                    pt.mlock_range(FREE_BASE, end, false);
                    pt.madvise_free(FREE_BASE, end);
                    pt.mkold_range(FREE_BASE, end, false);
                    pt.remove_guard_markers(FREE_BASE, end);
                    pt.zap_range(FREE_BASE, FREE_BASE + PG, &ZapDetails::dontneed(false));
                    assert!(pt.entries(FREE_BASE, end).len() <= 4 * 8);
                }
                barrier.wait();
            }
        });
        let t0 = Instant::now();
        let mut vmas: Vec<FaultVma<'_>> =
            spans.iter().map(|&b| FaultVma::anonymous(b, b + PMD_SIZE, RW)).collect();
        while t0.elapsed() < Duration::from_millis(stress_ms()) {
            for (v, &b) in vmas.iter_mut().zip(&spans) {
                for i in 0..8 {
                    write(&pt, v, b + i * 64 * PG, &[1]).unwrap();
                }
            }
            barrier.wait();
            barrier.wait();
            rounds.fetch_add(1, Ordering::Relaxed);
        }
        stop.store(true, Ordering::Relaxed);
        barrier.wait();
    });
    let rounds = rounds.load(Ordering::Relaxed);
    assert!(rounds > 10, "{rounds} rounds");
    // Each round freed its four PTE tables (unless the DONTNEED zap reclaimed one first), two PMD tables and
    // the PUD table, each exactly once.
    let freed = freed.load(Ordering::Relaxed);
    assert!(freed >= 3 * rounds && freed <= 7 * rounds, "{freed} tables in {rounds} rounds");
    mem.lru_add_drain();
    check_memory(&mem, &[&pt], &[]);
    assert_eq!(pt.table_pages(), 1);
}

/// `free_pgd_range` with no lock beside faulters of its range (a caller breaking the contract of the zap
/// module's docs: tables may be populated while they are freed). Nothing is freed while it is in use: every
/// faulter reads back its last write or zeroes (its page was zapped, or faulted into a table that was being
/// unlinked), and nothing crashes; only a leak of such a table is allowed, so no exact accounting at the end.
#[test]
fn free_pgd_range_beside_faulters_of_its_range() {
    let mem = Memory::new(MemoryConfig::default());
    let pt = PageTable::new(&mem).unwrap();
    let end = FREE_BASE + 2 * PMD_SIZE;
    let stop = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    let freed = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                pt.zap_range(FREE_BASE, end, &ZapDetails::UNMAP);
                freed.fetch_add(pt.free_pgd_range(FREE_BASE, end, 0, 0), Ordering::Relaxed);
                // Room for the faulter to finish an access between two rounds.
                std::thread::sleep(Duration::from_micros(20));
            }
        });
        s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(7);
            let vma = FaultVma::anonymous(FREE_BASE, end, RW).with_anon_vma();
            while !stop.load(Ordering::Relaxed) {
                let a = FREE_BASE + rng.random_range(0..1024) * PG;
                let v = rng.random::<u64>() | 1;
                // Not `common::write`: the freer may undo the fault any number of times before the store lands.
                loop {
                    match pt.write(a, &v.to_le_bytes()) {
                        Ok(()) => break,
                        Err(MmuError::Fault { addr, access, .. }) => {
                            let r = handle_mm_fault(&pt, &vma, addr, access);
                            assert!(matches!(r, VmFault::Handled(_)), "{r:?}");
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
                let mut b = [0u8; 8];
                let got = match pt.read(a, &mut b) {
                    Ok(()) => u64::from_le_bytes(b),
                    // Zapped since: the page reads as zeroes once faulted again.
                    Err(MmuError::Fault { .. }) => 0,
                    Err(e) => panic!("{e:?}"),
                };
                assert!(got == v || got == 0, "read {got:#x} right after writing {v:#x}");
                checks.fetch_add(1, Ordering::Relaxed);
            }
        });
        std::thread::sleep(Duration::from_millis(stress_ms()));
        stop.store(true, Ordering::Relaxed);
    });
    assert!(checks.load(Ordering::Relaxed) > 1000);
    assert!(freed.load(Ordering::Relaxed) > 0, "the tables were never freed under the faulter");
    pt.zap_range(0, vmspace_pgtable::VA_END, &ZapDetails::UNMAP);
    pt.free_pgd_range(0, vmspace_pgtable::VA_END, 0, 0);
    vmspace_rcu::synchronize();
}
