//! `move_page_tables` (`mm/mremap.c`): moving a range's entries to a new address for mremap.
//!
//! The range is moved in extents that stop at every 2 MiB boundary of the old *and* the new address
//! (`get_extent(NORMAL_PMD, ..)`). An extent that is a whole, aligned 2 MiB span on both sides, whose new PMD
//! entry is empty, moves its PTE table as a whole: the PMD entry is cleared at the old address and set at the
//! new one, under the table's lock (`move_normal_pmd`), so no entry is touched. Any other extent moves entry by
//! entry (`move_ptes`): with the old table's lock and then the new table's (one lock when both addresses are in
//! the same table), each entry is swapped out of the old slot and stored in the new one. Mapcounts, refcounts and
//! RSS do not change: the same address space maps the same frames. Moved entries get the soft-dirty bit when
//! the configuration tracks it (`move_soft_dirty_pte`), and lose their uffd-wp state when the destination does
//! not want it (`need_clear_uffd_wp`: a uffd-wp-only marker is dropped, other entries lose the bit).
//!
//! The old range keeps its (now empty) tables: for a plain mremap the caller then unmaps the old range (zap and
//! `free_pgd_range`, which frees them); with `MREMAP_DONTUNMAP` the old VMA stays, empty, and so do they.
//!
//! Tables for the new range are allocated as extents need them. If one cannot be, the extents already moved
//! are moved back (which needs no allocation: their old tables are still linked) and the call fails with
//! `ENOMEM`, leaving every entry where it was, as mremap's `move_vma` does by moving back; tables allocated at
//! the new address stay, empty, as the kernel's do.
//!
//! Caller contract (for an exact result; memory safety does not rest on it): the mmap write lock, both VMAs
//! write-locked, the ranges disjoint; no zap or `free_pgd_range` runs on either range. The walks run inside an
//! RCU read-side section and a whole table is linked at its new place by a compare-and-swap of the empty entry
//! (a racing `pte_alloc` there makes the extent move entry by entry), and an entry is only ever moved into an
//! empty one, so a race breaking the contract never links one table twice or maps one page from two entries.

use vmspace_abi::Errno;
use vmspace_rcu::sync::{AtomicU64, Ordering};

use crate::arch::{Marker, PAGE_SIZE, PMD_SIZE, Pte, VA_END};
use crate::pgtable::PageTable;

/// Entry transformations of a move (`move_page_tables`' flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoveFlags {
    /// `need_clear_uffd_wp`: the destination VMA does not keep userfaultfd write protection.
    pub clear_uffd_wp: bool,
    /// `CONFIG_MEM_SOFT_DIRTY`: mark moved entries soft-dirty (off on the live kernel).
    pub soft_dirty: bool,
}

/// One extent already moved, for moving back.
#[derive(Clone, Copy)]
struct Done {
    old: u64,
    new: u64,
    len: u64,
    whole_table: bool,
}

impl PageTable {
    /// `move_page_tables(old, new, len)` (module docs). Returns the number of entries moved (a whole table
    /// counts its non-empty entries). Errors: `ENOMEM` (nothing moved); `EINVAL` for unaligned arguments and
    /// `EFAULT` for a range beyond the translated address space (nothing done).
    pub fn move_page_tables(&self, old: u64, new: u64, len: u64, flags: &MoveFlags) -> Result<u64, Errno> {
        if len == 0 {
            return Ok(0);
        }
        if !(old | new | len).is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        if old.checked_add(len).is_none_or(|e| e > VA_END) || new.checked_add(len).is_none_or(|e| e > VA_END)
        {
            return Err(Errno::EFAULT);
        }
        let mut done: Vec<Done> = Vec::new();
        let mut moved = 0u64;
        let mut off = 0u64;
        while off < len {
            let (o, n) = (old + off, new + off);
            let extent = (PMD_SIZE - o % PMD_SIZE).min(PMD_SIZE - n % PMD_SIZE).min(len - off);
            match self.move_extent(o, n, extent, flags) {
                Ok(Some((count, whole_table))) => {
                    moved += count;
                    done.push(Done { old: o, new: n, len: extent, whole_table });
                }
                Ok(None) => {}
                Err(e) => {
                    for d in done.iter().rev() {
                        self.move_back(d);
                    }
                    return Err(e);
                }
            }
            off += extent;
        }
        Ok(moved)
    }

    /// Moves one extent. `Ok(None)`: nothing there.
    fn move_extent(
        &self,
        o: u64,
        n: u64,
        extent: u64,
        flags: &MoveFlags,
    ) -> Result<Option<(u64, bool)>, Errno> {
        // Both PMD entries are used inside this section (the guards of the locks taken below nest in it), so
        // their PMD tables stay allocated whatever unlinks them meanwhile.
        let rcu = vmspace_rcu::pin();
        let Some(old_pmd) = self.entry_slot(o, 1, false, &rcu)? else { return Ok(None) };
        // Acquire: pairs with the table's link.
        if old_pmd.load(Ordering::Acquire) == 0 {
            return Ok(None);
        }
        let new_pmd = self.entry_slot(n, 1, true, &rcu)?.expect("allocating walk");
        if extent == PMD_SIZE && new_pmd.load(Ordering::Acquire) == 0 {
            // SAFETY: both entries were reached inside `rcu`, which outlives the call.
            if let Some(c) = unsafe { self.move_normal_pmd(old_pmd, new_pmd) } {
                return Ok(Some((c, true)));
            }
        }
        // SAFETY: as above.
        Ok(Some((unsafe { self.move_ptes(old_pmd, new_pmd, o, n, extent, flags, true) }?, false)))
    }

    /// `move_normal_pmd`: relinks the PTE table of `old_pmd` at `new_pmd`, if it is empty. Returns the entries
    /// the table holds; `None` if there was no table or `new_pmd` was not empty (then nothing changed).
    ///
    /// Under the table's lock the table is first linked at `new_pmd` by a compare-and-swap of the empty entry
    /// (a racing `pte_alloc` there makes it fail, and the caller moves entry by entry), then unlinked from
    /// `old_pmd`; for that moment it is linked twice, which is harmless since every user of a PTE table takes
    /// its lock and re-checks the entry it came through, and every unlinking holds the lock.
    ///
    /// # Safety
    ///
    /// Both entries belong to PMD tables of this page table reached inside a read-side section of the caller
    /// that outlives the call.
    unsafe fn move_normal_pmd(&self, old_pmd: &AtomicU64, new_pmd: &AtomicU64) -> Option<u64> {
        // SAFETY: the caller's section covers `old_pmd`'s table and outlives the guard.
        let g = unsafe { self.lock_pte_at(old_pmd, false, vmspace_rcu::pin()) }.ok()??;
        let count = g.table().e.iter().filter(|e| e.load(Ordering::Relaxed) != 0).count() as u64;
        // AcqRel on success: Release publishes the table at its new place (its entries were initialised long ago;
        // the lock we hold is the table's own, so a faulter at the new address that finds it waits for us).
        // Acquire on failure: pairs with the racing link.
        if new_pmd.compare_exchange(0, g.entry(), Ordering::AcqRel, Ordering::Acquire).is_err() {
            return None;
        }
        let unlinked = g.unlink();
        debug_assert!(unlinked, "the locked table's entry changed");
        Some(count)
    }

    /// `move_ptes`: moves the entries of `[o, o + len)` to `[n, n + len)` under both tables' locks.
    ///
    /// # Safety
    ///
    /// As [`PageTable::move_normal_pmd`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn move_ptes(
        &self,
        old_pmd: &AtomicU64,
        new_pmd: &AtomicU64,
        o: u64,
        n: u64,
        len: u64,
        flags: &MoveFlags,
        alloc: bool,
    ) -> Result<u64, Errno> {
        // The new table first (it may need allocating), then both locks, the old one first.
        if alloc {
            // SAFETY: the caller's section covers `new_pmd`'s table and outlives the guard, dropped at once.
            drop(unsafe { self.lock_pte_at(new_pmd, true, vmspace_rcu::pin()) }?);
        }
        // SAFETY: the caller's section covers `old_pmd`'s table and outlives the guard (dropped on return).
        let Some(og) = (unsafe { self.lock_pte_at(old_pmd, false, vmspace_rcu::pin()) })? else {
            return Ok(0);
        };
        let same = new_pmd.load(Ordering::Acquire) == og.entry();
        let ng = if same {
            None
        } else {
            // A racing reclaim (`MADV_DONTNEED` beside the move, which the caller's locks exclude) may have
            // emptied the new entry since: then nothing moves.
            // SAFETY: as for `og`, for `new_pmd`.
            let Some(ng) = (unsafe { self.lock_pte_at(new_pmd, false, vmspace_rcu::pin()) })? else {
                return Ok(0);
            };
            Some(ng)
        };
        let mut count = 0;
        let mut off = 0;
        while off < len {
            let dst = ng.as_ref().unwrap_or(&og);
            // Only into an empty entry (the caller's new range is empty): an entry is never overwritten, so
            // every mapping keeps exactly one entry.
            if !dst.get(n + off).is_none() {
                debug_assert!(false, "mremap onto a populated entry");
                off += PAGE_SIZE;
                continue;
            }
            let pte = og.take(o + off);
            if !pte.is_none() {
                let moved = Self::move_pte(pte, flags);
                if let Some(m) = moved {
                    dst.set(n + off, m);
                    count += 1;
                }
            }
            off += PAGE_SIZE;
        }
        Ok(count)
    }

    /// What a moved entry becomes (`move_pte`, `move_soft_dirty_pte`, the uffd-wp clearing). `None`: dropped.
    fn move_pte(pte: Pte, flags: &MoveFlags) -> Option<Pte> {
        let mut p = pte;
        if flags.soft_dirty {
            p = p.mksoft_dirty();
        }
        if flags.clear_uffd_wp {
            if p.as_marker() == Some(Marker::UFFD_WP) {
                return None;
            }
            p = p.clear_uffd_wp();
        }
        Some(p)
    }

    /// Undoes one moved extent (no allocation: the old tables are still linked).
    fn move_back(&self, d: &Done) {
        let rcu = vmspace_rcu::pin();
        let new_pmd =
            self.entry_slot(d.new, 1, false, &rcu).ok().flatten().expect("moved extent's tables exist");
        let old_pmd = self.entry_slot(d.old, 1, false, &rcu).ok().flatten().expect("old tables are kept");
        // SAFETY: both entries were reached inside `rcu`, which outlives the calls.
        unsafe {
            if d.whole_table {
                self.move_normal_pmd(new_pmd, old_pmd);
            } else {
                self.move_ptes(new_pmd, old_pmd, d.new, d.old, d.len, &MoveFlags::default(), false)
                    .expect("moving back allocates nothing");
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testutil::{RW, mem, read, write};
    use crate::{FaultVma, GuardInstall, PageCache, ZapDetails};

    const A: u64 = 0x40_0000_0000;
    const PG: u64 = PAGE_SIZE;

    fn fill(pt: &PageTable, v: &mut FaultVma<'_>, start: u64, pages: u64) {
        for i in 0..pages {
            write(pt, v, start + i * PG, &(i as u32 + 1).to_le_bytes()).unwrap();
        }
    }

    fn check(pt: &PageTable, v: &mut FaultVma<'_>, start: u64, pages: u64) {
        for i in 0..pages {
            assert_eq!(read(pt, v, start + i * PG, 4).unwrap(), (i as u32 + 1).to_le_bytes(), "page {i}");
        }
    }

    #[test]
    fn entries_move_across_tables_and_the_old_range_empties() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let old = A + 500 * PG; // straddles a table boundary
        let new = A + 10 * PMD_SIZE + 3 * PG;
        let mut v = FaultVma::anonymous(A, A + 20 * PMD_SIZE, RW);
        fill(&pt, &mut v, old, 40);
        pt.install_guard_markers(old + 40 * PG, old + 41 * PG).unwrap();
        let frames = m.stats().frames_in_use;
        assert_eq!(pt.move_page_tables(old, new, 41 * PG, &MoveFlags::default()).unwrap(), 41);
        assert!(pt.entries(old, old + 41 * PG).is_empty());
        check(&pt, &mut v, new, 40);
        assert_eq!(pt.pte(new + 40 * PG).as_marker(), Some(Marker::GUARD));
        assert_eq!(m.stats().frames_in_use, frames, "the same frames");
        assert_eq!(pt.rss().anon, 40);
        pt.validate().unwrap();
    }

    #[test]
    fn an_aligned_span_moves_its_whole_table() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 8 * PMD_SIZE, RW);
        fill(&pt, &mut v, A, 512);
        let tables = m.stats().tables_allocated;
        assert_eq!(pt.move_page_tables(A, A + 4 * PMD_SIZE, PMD_SIZE, &MoveFlags::default()).unwrap(), 512);
        assert_eq!(m.stats().tables_allocated, tables, "no new PTE table: the old one was relinked");
        check(&pt, &mut v, A + 4 * PMD_SIZE, 512);
        assert!(pt.pte(A).is_none());
        pt.validate().unwrap();
    }

    #[test]
    fn dontunmap_leaves_an_empty_old_range_that_faults_afresh() {
        let m = mem();
        let c = PageCache::new(&m, 0, false);
        c.write(0, &[4u8; 4 * 4096]).unwrap();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::file(A, A + 4 * PG, 0, RW, &c, false);
        read(&pt, &mut v, A, 1).unwrap();
        write(&pt, &mut v, A + PG, b"private").unwrap();
        pt.move_page_tables(A, A + 64 * PG, 4 * PG, &MoveFlags::default()).unwrap();
        // The old VMA stays (MREMAP_DONTUNMAP): it faults in from the file again, without the private copy.
        assert_eq!(read(&pt, &mut v, A + PG, 1).unwrap(), vec![4]);
        let mut nv = FaultVma::file(A + 64 * PG, A + 68 * PG, 0, RW, &c, false).with_anon_vma();
        assert_eq!(read(&pt, &mut nv, A + 65 * PG, 7).unwrap(), b"private");
        pt.validate().unwrap();
    }

    #[test]
    fn a_failed_move_leaves_every_entry_in_place() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 4 * PMD_SIZE, RW);
        let old = A + 300 * PG;
        fill(&pt, &mut v, old, 600);
        assert_eq!(
            pt.install_guard_markers(old + 600 * PG, old + 601 * PG).unwrap(),
            GuardInstall::Done { installed: 1 }
        );
        let before = pt.entries(0, VA_END);
        let new = 0x50_0000_0000 + 7 * PG;
        let mut i = 0;
        loop {
            m.inject_alloc_failure(Some(i));
            let r = pt.move_page_tables(old, new, 601 * PG, &MoveFlags::default());
            m.inject_alloc_failure(None);
            match r {
                Err(Errno::ENOMEM) => {
                    assert_eq!(pt.entries(0, VA_END), before, "failure {i} moved something");
                    pt.validate().unwrap();
                    i += 1;
                }
                Ok(n) => {
                    assert_eq!(n, 601);
                    break;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        // Tables allocated by a failed attempt stay (empty), so later attempts need fewer: at least the PMD table
        // and one PTE table failed.
        assert!(i >= 2, "{i}");
        let mut nv = FaultVma::anonymous(new, new + 601 * PG, RW);
        check(&pt, &mut nv, new, 600);
        pt.zap_range(0, VA_END, &ZapDetails::UNMAP);
    }
}
