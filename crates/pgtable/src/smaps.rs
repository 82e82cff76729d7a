//! `/proc/PID/smaps` page accounting (`fs/proc/task_mmu.c`: `smaps_pte_range`, `smaps_pte_entry`,
//! `smaps_account`, `smaps_page_accumulate`), in two reader modes.
//!
//! For every present entry that maps a frame (`vm_normal_page`: the zero page and other special entries count
//! for nothing, not even RSS) the page adds, in bytes, into a [`vmspace_proc::MemStatsAccumulator`] exactly what
//! Linux 6.18 adds:
//! - `Rss`; `Anonymous` for anonymous pages, and `LazyFree` for those without `PG_swapbacked` whose entry and
//!   frame are both clean; `Referenced` if the entry is young or the frame referenced;
//! - PSS, split by sharing: a frame whose refcount is 1 is mapped exactly once, so it adds a whole page to PSS
//!   and to `Private_*`; otherwise its mapcount decides: 2 or more is shared (`Shared_*`, PSS divided by the
//!   mapcount, in `PSS_SHIFT` fixed point), 1 is private. `Pss_Anon`, `Pss_Shmem` (swap-backed file pages) or
//!   `Pss_File` take the same share, and so does `Pss_Dirty` (and `*_Dirty`) when the entry or the frame is
//!   dirty, and `Locked` when the VMA is `VM_LOCKED`.
//!
//! Markers and empty entries count nothing; there is no swap, so `Swap` and `SwapPss` stay 0.
//!
//! [`PageTable::smaps_range`] is the kernel's reader: it takes each PTE table's lock (the caller holds the mmap
//! read lock or the VMA's read lock, as `show_smap` does), so each table's entries are a consistent snapshot.
//! [`PageTable::smaps_range_lockless`] takes no lock at all: it walks inside an RCU read-side section with
//! atomic loads, as fast GUP walks, so it never blocks a writer and never touches freed memory (tables and
//! frames are freed a grace period after they are unlinked); what it reports may mix entries from before and
//! after a concurrent change, and a frame's mapcount may be read while a zap or fork changes it.

use vmspace_proc::{MemStatsAccumulator, PSS_SHIFT};

use crate::arch::{PAGE_SIZE, Pte, VA_END};
use crate::frame::FrameFlags;
use crate::pgtable::PageTable;

impl PageTable {
    /// `smaps_pte_range` over `[start, end)` under each PTE table's lock (module docs). `locked`: the VMA is
    /// `VM_LOCKED`.
    pub fn smaps_range(&self, start: u64, end: u64, locked: bool, acc: &mut MemStatsAccumulator) {
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                self.smaps_pte_entry(g.get(addr), locked, acc);
                addr += PAGE_SIZE;
            }
        });
    }

    /// The lockless reader (module docs): the same accounting without any lock.
    pub fn smaps_range_lockless(&self, start: u64, end: u64, locked: bool, acc: &mut MemStatsAccumulator) {
        let _rcu = vmspace_rcu::pin();
        self.walk_lockless(start, end.min(VA_END), &mut |_, pte| self.smaps_pte_entry(pte, locked, acc));
    }

    /// GUP's `FOLL_TOUCH` on the present page at `addr` (`mm/gup.c: follow_page_pte`): a write through a
    /// clean entry of a clean page dirties the page (`folio_mark_dirty`), and the page is marked accessed
    /// (`folio_mark_accessed`: `PG_referenced` the first time, then `PG_active` with `PG_referenced` cleared,
    /// then `PG_referenced` again). The entry itself is not changed. Nothing for an empty, special or marker
    /// entry. `locked`: the VMA is `VM_LOCKED`, so the page is mlocked (`mlock_new_folio` /
    /// `mlock_vma_folio`), and marking an mlocked page accessed again has no effect (it is unevictable).
    ///
    /// The entry is read without the PTE lock, inside a read-side section, so the page may be unmapped by a
    /// racing zap (a truncation of the file, `MADV_DONTNEED` of another thread): it is then still allocated
    /// until the section ends, only its flags change, and the mlock batch takes its reference with
    /// `folio_try_get`, so a page whose last reference went is never brought back.
    pub fn gup_touch(&self, addr: u64, write: bool, locked: bool) {
        let rcu = vmspace_rcu::pin();
        self.gup_touch_entry(self.pte(addr), write, locked, &rcu);
    }

    /// [`PageTable::gup_touch`] for the entry `pte` the caller read inside the read-side section `_rcu` (GUP's
    /// common case: the page was already mapped as needed, so the entry read to decide that is the one
    /// followed, without a second walk). Should the entry have been replaced meanwhile (a racing fault of
    /// another thread), its old page is still allocated until the section ends and is the one marked. Any
    /// entry is memory-safe here (a page's descriptor is never freed, and the reference is only ever taken
    /// from a live one); one not read from this page table inside `_rcu` marks whatever page it names.
    pub fn gup_touch_entry(&self, pte: Pte, write: bool, locked: bool, _rcu: &vmspace_rcu::Guard) {
        self.touch(pte, write, locked);
    }

    /// `FOLL_TOUCH` on the page `pte` maps (see [`PageTable::gup_touch`]).
    fn touch(&self, pte: Pte, write: bool, locked: bool) {
        if !pte.is_present() || pte.is_special() {
            return;
        }
        if locked && !self.mem.frame(pte.pfn()).flags().contains(FrameFlags::MLOCKED) {
            self.mem.mlock_folio(pte.pfn(), true);
        }
        // The accessed and dirty state is the folio's (`folio_mark_accessed`, `folio_mark_dirty`).
        let f = self.mem.folio(pte.pfn());
        let flags = self.mem.folio_flags(pte.pfn());
        if write && !pte.is_dirty() && !flags.contains(FrameFlags::DIRTY) {
            f.set(FrameFlags::DIRTY);
        }
        self.mem.mark_accessed(pte.pfn());
    }

    /// `mlock_vma_pages_range`'s walk over `[start, end)`: every page mapped there becomes mlocked
    /// (`locked`) or not (`munlock_folio`). The caller holds the mmap write lock.
    pub fn mlock_range(&self, start: u64, end: u64, locked: bool) {
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                let pte = g.get(addr);
                if pte.is_present() && !pte.is_special() {
                    self.mem.mlock_folio(pte.pfn(), locked);
                }
                addr += PAGE_SIZE;
            }
        });
    }

    /// `smaps_pte_entry` + `smaps_account` for one order-0 page.
    fn smaps_pte_entry(&self, pte: Pte, locked: bool, acc: &mut MemStatsAccumulator) {
        if !pte.is_present() || pte.is_special() {
            return;
        }
        let f = self.mem.frame(pte.pfn());
        // `folio_test_dirty` / `folio_test_referenced`: a large folio's state is its head's.
        let flags = self.mem.folio_flags(pte.pfn());
        let b = &mut acc.bytes;
        let size = PAGE_SIZE;
        let young = pte.is_young();
        let dirty = pte.is_dirty();
        let anon = flags.contains(FrameFlags::ANON);
        if anon {
            b.anonymous += size;
            if !flags.contains(FrameFlags::SWAPBACKED) && !dirty && !flags.contains(FrameFlags::DIRTY) {
                b.lazyfree += size;
            }
        }
        b.rss += size;
        if young || flags.contains(FrameFlags::REFERENCED) {
            b.referenced += size;
        }
        let (pss, private) = if f.refcount() == 1 {
            (size << PSS_SHIFT, true)
        } else {
            let mapcount = f.mapcount();
            let pss = size << PSS_SHIFT;
            if mapcount >= 2 { (pss / u64::from(mapcount), false) } else { (pss, true) }
        };
        // `smaps_page_accumulate`.
        b.pss += pss;
        if anon {
            b.pss_anon += pss;
        } else if flags.contains(FrameFlags::SWAPBACKED) {
            b.pss_shmem += pss;
        } else {
            b.pss_file += pss;
        }
        if locked {
            b.locked += pss;
        }
        if dirty || flags.contains(FrameFlags::DIRTY) {
            b.pss_dirty += pss;
            if private {
                b.private_dirty += size;
            } else {
                b.shared_dirty += size;
            }
        } else if private {
            b.private_clean += size;
        } else {
            b.shared_clean += size;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::testutil::{RW, SHARED_RW, mem, read, smaps, write};
    use crate::{FaultVma, PAGE_SIZE, PageCache, PageTable};
    use vmspace_proc::MemStatsAccumulator;

    const A: u64 = 0x70_0000_0000;
    const PG: u64 = PAGE_SIZE;

    /// The live kernel's answers for a memfd of 64 pages, only `ftruncate`d (experiment in the crate's tests
    /// docs: a shared read-write mapping reads page 0 and writes page 1; a private one reads pages 0 and 3, then
    /// writes page 0).
    #[test]
    fn memfd_hole_scenario_matches_the_kernel() {
        let m = mem();
        let c = PageCache::new(&m, 64 * 4096, true);
        let pt = PageTable::new(&m).unwrap();
        let mut h = FaultVma::file(A, A + 64 * PG, 0, SHARED_RW, &c, false);
        read(&pt, &mut h, A, 1).unwrap();
        let s = smaps(&pt, A, A + 64 * PG);
        assert_eq!((s.rss, s.pss, s.private_clean, s.referenced), (4, 4, 4, 4));
        write(&pt, &mut h, A + PG, b"1").unwrap();
        let s = smaps(&pt, A, A + 64 * PG);
        assert_eq!((s.rss, s.pss, s.pss_dirty, s.private_clean, s.private_dirty), (8, 8, 4, 4, 4));
        let hp_start = A + 128 * PG;
        let mut hp = FaultVma::file(hp_start, hp_start + 64 * PG, 0, RW, &c, false);
        read(&pt, &mut hp, hp_start, 1).unwrap();
        read(&pt, &mut hp, hp_start + 3 * PG, 1).unwrap();
        let s = smaps(&pt, hp_start, hp_start + 64 * PG);
        assert_eq!(
            (s.rss, s.pss, s.pss_dirty, s.shared_clean, s.shared_dirty, s.private_clean),
            (12, 8, 2, 4, 4, 4)
        );
        write(&pt, &mut hp, hp_start, b"5").unwrap();
        let s = smaps(&pt, hp_start, hp_start + 64 * PG);
        assert_eq!(
            (s.rss, s.pss, s.pss_dirty, s.shared_dirty, s.private_clean, s.private_dirty, s.anonymous),
            (12, 10, 6, 4, 4, 4, 4)
        );
        assert_eq!(s.pss_anon + s.pss_shmem, s.pss, "{s:?}");
    }

    #[test]
    fn locked_vmas_count_their_pss_and_the_zero_page_counts_nothing() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 4 * PG, RW);
        read(&pt, &mut v, A, 1).unwrap();
        write(&pt, &mut v, A + PG, b"x").unwrap();
        let mut acc = MemStatsAccumulator::default();
        pt.smaps_range(A, A + 4 * PG, true, &mut acc);
        let s = acc.finish();
        assert_eq!((s.rss, s.locked, s.anonymous, s.swap), (4, 4, 4, 0));
    }
}
