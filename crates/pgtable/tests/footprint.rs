//! Measurements, printed (`cargo test -p vmspace-pgtable --test footprint -- --nocapture`; the rates with
//! `--release -- --ignored --nocapture`): bytes of page-table memory per faulted page in a dense and in sparse
//! layouts, and the anonymous write-fault rate on one and two threads. Benchmarks proper live in
//! `crates/bench`; these only keep the numbers honest and their bounds checked.

mod common;

use std::sync::Arc;
use std::time::Instant;

use vmspace_pgtable::{
    FaultVma, Memory, MemoryConfig, PAGE_SIZE, PMD_SIZE, PUD_SIZE, PageTable, TABLE_BYTES, ZapDetails,
};

use common::{RW, write};

const BASE: u64 = 0x10_0000_0000;

/// Faults one page at each of `count` addresses `stride` apart; returns the table pages and the table bytes per
/// faulted page.
fn bytes_per_page(count: u64, stride: u64) -> (u64, f64) {
    let mem = Memory::new(MemoryConfig::default());
    let pt = PageTable::new(&mem).unwrap();
    let mut v = FaultVma::anonymous(BASE, BASE + count * stride, RW);
    for i in 0..count {
        write(&pt, &mut v, BASE + i * stride, &[1]).unwrap();
    }
    assert_eq!(pt.rss().anon as u64, count);
    pt.validate().unwrap();
    assert_eq!(pt.table_bytes(), mem.stats().tables_in_use * TABLE_BYTES as u64);
    (pt.table_pages(), pt.table_bytes() as f64 / count as f64)
}

#[test]
fn page_table_bytes_per_faulted_page() {
    let (dense_t, dense) = bytes_per_page(16384, PAGE_SIZE);
    let (sparse_2m_t, sparse_2m) = bytes_per_page(512, PMD_SIZE);
    let (sparse_1g_t, sparse_1g) = bytes_per_page(64, PUD_SIZE);
    println!("page-table bytes per faulted page (4,160-byte table pages: a 4 KiB page and its descriptor):");
    println!("  dense, 16,384 contiguous pages:      {dense:8.1}");
    println!("  sparse, one page per 2 MiB (512):    {sparse_2m:8.1}");
    println!("  sparse, one page per 1 GiB (64):     {sparse_1g:8.1}");
    println!("  (the kernel's tables: the same counts of 4 KiB pages, each with its 64-byte struct page)");
    // 32 PTE tables, one PMD, one PUD and the PGD for 16,384 pages (a PTE table per 512 pages in the limit).
    assert_eq!(dense_t, 32 + 3, "{dense}");
    // One PTE table per page, plus a PMD, a PUD and the PGD shared by all.
    assert_eq!(sparse_2m_t, 512 + 3, "{sparse_2m}");
    // A PTE table and a PMD table per page, plus a PUD and the PGD.
    assert_eq!(sparse_1g_t, 2 * 64 + 2, "{sparse_1g}");
}

/// Anonymous write faults (fault + the store that allocates the contents), the way a program first touches its
/// heap: `pages` per thread, each thread in its own 2 MiB-aligned range of one address space.
fn fault_rate(threads: u64, pages: u64) -> f64 {
    let mem = Memory::new(MemoryConfig::default());
    let pt = Arc::new(PageTable::new(&mem).unwrap());
    let span = pages * PAGE_SIZE;
    let t0 = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let pt = pt.clone();
            std::thread::spawn(move || {
                let start = BASE + t * span.next_multiple_of(PMD_SIZE) * 2;
                let mut v = FaultVma::anonymous(start, start + span, RW).with_anon_vma();
                let t0 = Instant::now();
                for i in 0..pages {
                    write(&pt, &mut v, start + i * PAGE_SIZE, &[1]).unwrap();
                }
                t0.elapsed()
            })
        })
        .collect();
    let per_thread: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let wall = t0.elapsed();
    assert_eq!(pt.fault_stats().anon_new, threads * pages);
    let rate = (threads * pages) as f64 / wall.as_secs_f64();
    println!("  {threads} thread(s): {rate:>12.0} faults/s ({per_thread:?} per thread)");
    pt.zap_range(0, vmspace_pgtable::VA_END, &ZapDetails::UNMAP);
    rate
}

/// The same in a loop that unmaps and faults again, so that frames and contents come back recycled (the
/// steady state of a program that maps and unmaps memory): the median rate of the rounds after the first
/// (which takes its memory from the system).
fn steady_fault_rate(threads: u64, pages: u64, rounds: u32) -> f64 {
    let mem = Memory::new(MemoryConfig::default());
    let pt = Arc::new(PageTable::new(&mem).unwrap());
    let span = pages * PAGE_SIZE;
    let mut rates = Vec::new();
    for _ in 0..rounds {
        let barrier = Arc::new(std::sync::Barrier::new(threads as usize));
        let t0 = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (pt, barrier) = (pt.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let start = BASE + t * span.next_multiple_of(PMD_SIZE) * 2;
                    let mut v = FaultVma::anonymous(start, start + span, RW).with_anon_vma();
                    barrier.wait();
                    let t0 = Instant::now();
                    for i in 0..pages {
                        write(&pt, &mut v, start + i * PAGE_SIZE, &[1]).unwrap();
                    }
                    let took = t0.elapsed();
                    barrier.wait();
                    pt.zap_range(start, start + span, &ZapDetails::dontneed(false));
                    took
                })
            })
            .collect();
        let took: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let _ = t0;
        let slowest = took.iter().max().expect("a thread").as_secs_f64();
        if std::env::var("PGTABLE_VERBOSE").is_ok() {
            println!("    {took:?}");
        }
        rates.push((threads * pages) as f64 / slowest);
        vmspace_rcu::synchronize();
    }
    rates.remove(0);
    rates.sort_by(f64::total_cmp);
    let rate = rates[rates.len() / 2];
    println!(
        "  steady, {threads} thread(s): {rate:>12.0} faults/s (fault + first store; the zap is not timed)"
    );
    rate
}

#[test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn steady_anonymous_fault_rate() {
    // PGTABLE_ROUNDS: more rounds for profiling the steady state.
    let rounds = std::env::var("PGTABLE_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    for pages in [16384, 1024] {
        println!("anonymous write faults on recycled memory, {pages} pages per thread:");
        let one = steady_fault_rate(1, pages, rounds);
        let two = steady_fault_rate(2, pages, rounds);
        println!("  two threads: {:.2}x one thread", two / one);
    }
}

#[test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn anonymous_fault_rate() {
    println!("anonymous write faults, 262,144 pages per thread (1 GiB):");
    // Warm the allocator once.
    fault_rate(1, 65536);
    let one = fault_rate(1, 262_144);
    let two = fault_rate(2, 262_144);
    println!("  two threads: {:.2}x one thread", two / one);
}
