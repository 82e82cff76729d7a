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
use vmspace_pgtable::{FaultVma, Memory, MemoryConfig, PAGE_SIZE, PMD_SIZE, PageTable, ZapDetails};

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
