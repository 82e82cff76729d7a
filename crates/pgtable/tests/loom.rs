//! Loom models of the page table's concurrent protocols (`RUSTFLAGS="--cfg loom" cargo test --release -p
//! vmspace-pgtable --test loom`).
//!
//! Under `--cfg loom` tables have 4 entries (a PTE table spans 16 KiB), a page holds 16 bytes, and a freed
//! table page or content buffer is kept and marked instead of freed: every access through a table entry or to
//! page contents asserts the mark is clear, so a walker that could reach memory after its grace period fails
//! the model. The crate's `vmspace_rcu::pin` is the RCU crate's reclamation model, which frees retired objects
//! exactly when no guard that existed at their retirement is left.
//!
//! Models:
//! - `lockless_walker_vs_zap_and_table_free`: the emulated MMU and a lockless smaps reader walk a PTE table
//!   while `MADV_DONTNEED` zaps its only page and reclaims the table; the walkers see the page or nothing, never
//!   freed memory, and everything is freed once they are done.
//! - `two_faulters_install_one_table`: two write faults in one not-yet-existing PTE table race to install it
//!   and then on its lock; one table survives, both pages are mapped, the loser's table is freed.
//! - `two_faulters_same_page`: the same address: one new page, one spurious fault, no leak.
//! - `fault_vs_reclaim`: a fault in a table that a concurrent `MADV_DONTNEED` reclaims: the faulter's lock
//!   re-check sends it to a new table or the zap removes its page; never a page in an unlinked table.
//! - `two_free_pgd_range_free_each_table_once`: two unlocked `free_pgd_range` calls over one emptied range race
//!   on every table: each table (PTE, PMD, PUD) is freed exactly once, and neither call reaches a table the
//!   other freed (the upper tables are unlinked by swap and walked inside a read-side section).
//! - `locked_walk_vs_free_pgd_range`: a locked walk (`change_protection`) through the upper tables while
//!   `free_pgd_range` unlinks and retires them: the walker never reaches a freed table.
//! - `mmu_write_vs_zap_keeps_dirty`: a store through a shared file mapping races the zap of its entry: if the
//!   store completed, the zap saw the dirty bit and marked the page dirty (no lost write-back).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use vmspace_abi::VmFlags;
use vmspace_pgtable::{
    Access, ChangeProt, FaultKind, FaultVma, Memory, MemoryConfig, MmuError, PAGE_SIZE, PMD_SIZE, PageCache,
    PageProt, PageTable, VA_END, VmFault, ZapDetails, handle_mm_fault,
};

const RW: VmFlags = VmFlags::READ.union(VmFlags::WRITE).union(VmFlags::MAYREAD).union(VmFlags::MAYWRITE);
const PG: u64 = PAGE_SIZE;

/// Runs `f` under loom with preemption bound `bound`; returns the number of executions explored.
fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.max_branches = 5_000_000;
    b.check(move || {
        // Relaxed: a counter outside the model (std atomic, not tracked by loom).
        r.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let n = runs.load(Ordering::Relaxed);
    println!("explored {n} executions");
    assert!(n > 1, "the model explored a single execution");
    n
}

fn memory() -> std::sync::Arc<Memory> {
    Memory::new(MemoryConfig { max_frames: 64, fault_around_bytes: 0, max_tables: u64::MAX })
}

/// Everything given back once no guard is left (the model runs deferred frees when the last guard drops).
fn assert_all_freed(m: &Memory) {
    vmspace_rcu::synchronize();
    let s = m.stats();
    assert_eq!((s.frames_in_use, s.frames_pending_free), (0, 0), "{s:?}");
    assert_eq!((s.tables_in_use, s.tables_pending_free), (0, 0), "{s:?}");
}

/// One execution of a model: a page table over a fresh memory, given to `f` with the memory; after `f` the
/// table is dropped and everything must be given back.
fn with_table(f: impl FnOnce(&Memory, &Arc<PageTable>)) {
    let m = memory();
    let pt = Arc::new(PageTable::new(&m).unwrap());
    f(&m, &pt);
    drop(pt);
    assert_all_freed(&m);
}

/// A private anonymous read-write VMA over `[0, len)` with an anon_vma.
fn anon(len: u64) -> FaultVma<'static> {
    FaultVma::anonymous(0, len, RW).with_anon_vma()
}

/// A write fault at `addr` in `anon(len)`.
fn write_fault(pt: &PageTable, len: u64, addr: u64) -> VmFault {
    handle_mm_fault(pt, &anon(len), addr, Access::Write)
}

/// Runs `f` on `pt` in another model thread.
fn on_thread<T: Send + 'static>(
    pt: &Arc<PageTable>,
    f: impl FnOnce(&PageTable) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let pt = pt.clone();
    thread::spawn(move || f(&pt))
}

const NEW: VmFault = VmFault::Handled(FaultKind::AnonNew);

#[test]
fn lockless_walker_vs_zap_and_table_free() {
    model(3, || {
        with_table(|_, pt| {
            assert_eq!(write_fault(pt, PMD_SIZE, 0), NEW);
            pt.write(0, &[7]).unwrap();
            let reader = on_thread(pt, |pt| {
                let mut b = [0u8; 1];
                match pt.read(0, &mut b) {
                    Ok(()) => assert_eq!(b, [7]),
                    Err(MmuError::Fault { protection: false, .. }) => {}
                    Err(e) => panic!("{e:?}"),
                }
                let mut acc = vmspace_proc::MemStatsAccumulator::default();
                pt.smaps_range_lockless(0, PMD_SIZE, false, &mut acc);
                assert!(acc.bytes.rss == 0 || acc.bytes.rss == PG, "{acc:?}");
            });
            let s = pt.zap_range(0, PMD_SIZE, &ZapDetails::dontneed(false));
            assert_eq!((s.present, s.tables_freed), (1, 1));
            reader.join().unwrap();
            pt.validate().unwrap();
        });
    });
}

#[test]
fn two_faulters_install_one_table() {
    model(2, || {
        with_table(|m, pt| {
            // Upper tables exist (a page in another PTE table of the same PMD table); the first span has no
            // table.
            assert!(matches!(write_fault(pt, 4 * PMD_SIZE, 3 * PMD_SIZE), VmFault::Handled(_)));
            let other = on_thread(pt, |pt| assert_eq!(write_fault(pt, 4 * PMD_SIZE, PG), NEW));
            assert_eq!(write_fault(pt, 4 * PMD_SIZE, 0), NEW);
            other.join().unwrap();
            assert!(pt.pte(0).is_present() && pt.pte(PG).is_present());
            let c = pt.validate().unwrap();
            assert_eq!(c.tables, 5, "PGD, PUD, PMD and two PTE tables: the race's loser freed its table");
            assert_eq!(m.stats().frames_in_use, 3);
        });
    });
}

#[test]
fn two_faulters_same_page() {
    model(2, || {
        with_table(|m, pt| {
            let other = on_thread(pt, |pt| write_fault(pt, PMD_SIZE, 0));
            let mine = write_fault(pt, PMD_SIZE, 0);
            let theirs = other.join().unwrap();
            let new = [mine, theirs].iter().filter(|r| **r == NEW).count();
            assert_eq!(new, 1, "{mine:?} {theirs:?}");
            assert_eq!(m.stats().frames_in_use, 1);
            pt.validate().unwrap();
        });
    });
}

#[test]
fn fault_vs_reclaim() {
    model(2, || {
        with_table(|m, pt| {
            assert_eq!(write_fault(pt, PMD_SIZE, PG), NEW);
            let faulter = on_thread(pt, |pt| write_fault(pt, PMD_SIZE, 2 * PG));
            let s = pt.zap_range(0, PMD_SIZE, &ZapDetails::dontneed(false));
            assert_eq!(faulter.join().unwrap(), NEW);
            let c = pt.validate().unwrap();
            // Either the zap took both pages and the table, or the fault came after and built a new table.
            let mapped = pt.pte(2 * PG).is_present();
            assert_eq!(c.rss.anon, i64::from(mapped));
            assert_eq!(m.stats().frames_in_use, u64::from(mapped));
            assert!(s.present >= 1);
        });
    });
}

#[test]
fn mmu_write_vs_zap_keeps_dirty() {
    model(3, || {
        let m = memory();
        let c = Arc::new(PageCache::new(&m, PG, true));
        let pt = Arc::new(PageTable::new(&m).unwrap());
        let flags = RW | VmFlags::SHARED | VmFlags::MAYSHARE;
        let vma = FaultVma::file(0, PG, 0, flags, &c, false);
        // A read fault maps the shmem page writable and clean.
        assert_eq!(handle_mm_fault(&pt, &vma, 0, Access::Read), VmFault::Handled(FaultKind::Read));
        let page = c.page(0).unwrap();
        let writer = on_thread(&pt, |pt| pt.write(0, &[5]).is_ok());
        let s = pt.zap_range(0, PG, &ZapDetails::mapping(true));
        let wrote = writer.join().unwrap();
        let info = m.frame_info(page).unwrap();
        if wrote {
            assert_eq!(s.dirty_file, 1, "the store's dirty bit was lost");
            assert!(info.flags.contains(vmspace_pgtable::FrameFlags::DIRTY));
            let mut b = [0u8; 1];
            c.read(0, &mut b);
            assert_eq!(b, [5]);
        } else {
            assert_eq!(s.dirty_file, 0);
        }
        drop(pt);
        drop(c);
        assert_all_freed(&m);
    });
}

/// A table tree over `[0, PMD_SIZE)` whose only page was zapped: PTE, PMD and PUD tables left to free.
fn emptied(pt: &PageTable) {
    assert_eq!(write_fault(pt, PMD_SIZE, 0), NEW);
    pt.zap_range(0, PMD_SIZE, &ZapDetails::UNMAP);
}

#[test]
fn two_free_pgd_range_free_each_table_once() {
    model(2, || {
        with_table(|_, pt| {
            emptied(pt);
            let other = on_thread(pt, |pt| pt.free_pgd_range(0, VA_END, 0, 0));
            let mine = pt.free_pgd_range(0, VA_END, 0, 0);
            let theirs = other.join().unwrap();
            assert_eq!(mine + theirs, 3, "the PTE, PMD and PUD tables, each once");
            assert_eq!(pt.table_pages(), 1);
        });
    });
}

#[test]
fn locked_walk_vs_free_pgd_range() {
    model(2, || {
        with_table(|_, pt| {
            emptied(pt);
            let walker = on_thread(pt, |pt| {
                let ro =
                    ChangeProt { newprot: PageProt::READONLY, try_change_writable: false, shared: false };
                assert_eq!(pt.change_protection(0, PMD_SIZE, &ro), 0);
            });
            assert_eq!(pt.free_pgd_range(0, VA_END, 0, 0), 3);
            walker.join().unwrap();
        });
    });
}
