//! Entry rewrites in place: `change_protection` (mprotect), `madvise_free_pte_range` (`MADV_FREE`), and the
//! guard markers of `MADV_GUARD_INSTALL` / `MADV_GUARD_REMOVE` (`mm/madvise.c`).
//!
//! # change_protection
//!
//! [`PageTable::change_protection`] rewrites every present entry of the range (`PROT_NONE` ones included) with
//! `pte_modify(old, newprot)`: the frame and the accessed, dirty, soft-dirty, special and uffd-wp bits stay, the
//! protection bits come from the VMA's new `vm_page_prot`. Since a private mapping's `vm_page_prot` is never
//! writable, mprotect would leave every page to take a write fault; with `MM_CP_TRY_CHANGE_WRITABLE` (the
//! caller's `try_change_writable`, set when `vma_wants_manual_pte_write_upgrade`) an entry is made writable at
//! once where the write fault would have reused the page anyway (`can_change_pte_writable`): an exclusive
//! anonymous page in a private mapping, a dirty entry in a shared one. Each entry changes with one
//! compare-and-swap loop, so a concurrent dirty update by the MMU is never lost. Markers and empty entries are
//! left alone. Caller contract: the mmap write lock with the range's VMAs write-locked (no faults in it).
//!
//! # MADV_FREE
//!
//! [`PageTable::madvise_free`] makes the range's anonymous pages lazily freeable: the entry loses its dirty and
//! accessed bits, the frame `PG_swapbacked`, `PG_referenced` and `PG_active` (`folio_mark_lazyfree`,
//! `lru_lazyfree`). smaps counts such a page as `LazyFree` until it is written again (the MMU sets dirty). A
//! page dirty as a folio (`PG_dirty`) is cleaned only if this entry is its one mapping, and skipped otherwise
//! (`madvise_free_pte_range`: `folio_mapcount != folio_nr_pages`); a clean page shared with a fork child is
//! made lazily freeable all the same (measured on the live kernel). `PG_swapbacked` (and `PG_referenced`,
//! `PG_active`) are cleared when the CPU's lazy-free batch drains (`lru_lazyfree`; `Memory::lru_add_drain`), so
//! an access between `MADV_FREE` and the drain is forgotten, and smaps counts the page `LazyFree` only then.
//!
//! # MADV_COLD and MADV_PAGEOUT
//!
//! [`PageTable::mkold_range`] is the page-table half of `madvise_cold_or_pageout_pte_range`: every present
//! entry of a page this page table maps alone (`folio_maybe_mapped_shared` pages are left to their other
//! users) loses its accessed bit (`ptep_test_and_clear_young`, a compare-and-swap against the MMU) and its frame
//! `PG_referenced` (`folio_clear_referenced`), so smaps stops counting it as referenced. What the kernel then
//! does with the page (deactivation, or reclaim for `PAGEOUT`) needs LRU lists and a backing store the crate
//! does not have: the page stays mapped and keeps its contents.
//!
//! # Guard markers
//!
//! [`PageTable::install_guard_markers`] puts a guard marker into every empty entry of the range, allocating
//! tables as needed (`guard_install_pte_entry`, `guard_install_set_pte`); an entry that maps something (or holds
//! another marker) stops it with [`GuardInstall::Busy`], and the caller zaps the range and tries again, as
//! `madvise_guard_install` does. Markers already placed stay (the kernel's walk is not undone either), and so
//! do those placed before an allocation failure. [`PageTable::remove_guard_markers`] clears guard markers only
//! (`guard_remove_pte_entry`).

use vmspace_abi::Errno;
use vmspace_rcu::sync::Ordering;

use crate::arch::{Marker, PAGE_SIZE, PageProt, Pfn, Pte, VA_END, addr_end};
use crate::frame::FrameFlags;
use crate::pgtable::PageTable;

/// How to rewrite protections (`change_protection`'s `newprot` and `cp_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeProt {
    /// The VMA's new `vm_page_prot`.
    pub newprot: PageProt,
    /// `MM_CP_TRY_CHANGE_WRITABLE`: make entries writable where a write fault would reuse the page.
    pub try_change_writable: bool,
    /// The VMA is `VM_SHARED`.
    pub shared: bool,
}

/// The outcome of [`PageTable::install_guard_markers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardInstall {
    /// Every entry of the range holds a guard marker; `installed` of them are new.
    Done {
        /// Markers placed by this call.
        installed: u64,
    },
    /// The entry at `addr` maps a page or holds another marker: zap the range and call again.
    Busy {
        /// The first such entry.
        addr: u64,
    },
}

impl PageTable {
    /// `change_protection` over `[start, end)` (module docs). Returns the number of entries changed.
    pub fn change_protection(&self, start: u64, end: u64, cp: &ChangeProt) -> u64 {
        let mut changed = 0;
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                let (old, new) = g.update(addr, |old| {
                    if !old.is_present() {
                        return old;
                    }
                    let mut new = old.modify(cp.newprot);
                    if cp.try_change_writable
                        && !new.is_write()
                        && self.can_change_pte_writable(cp.shared, new)
                    {
                        new = new.mkwrite();
                    }
                    new
                });
                if old != new {
                    changed += 1;
                }
                addr += PAGE_SIZE;
            }
        });
        changed
    }

    /// `can_change_pte_writable` for an entry already rewritten with the new protection.
    fn can_change_pte_writable(&self, shared: bool, pte: Pte) -> bool {
        if pte.is_protnone() || !pte.is_hw_present() || pte.is_uffd_wp() {
            return false;
        }
        if !shared {
            if pte.is_special() {
                return false;
            }
            let f = self.mem.frame(pte.pfn());
            return f.flags().contains(FrameFlags::ANON.union(FrameFlags::ANON_EXCLUSIVE));
        }
        pte.is_dirty()
    }

    /// `madvise_free_pte_range` over `[start, end)` of an anonymous VMA (module docs). Returns the pages made
    /// lazily freeable. The caller drains the CPU's batches first ([`crate::Memory::lru_add_drain`], as
    /// `madvise_free_single_vma` does): a page still in an `lru_add` batch is not queued.
    pub fn madvise_free(&self, start: u64, end: u64) -> u64 {
        let mut n = 0;
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                let pte = g.get(addr);
                addr += PAGE_SIZE;
                if !pte.is_present() || pte.is_special() {
                    continue;
                }
                let f = self.mem.frame(pte.pfn());
                if !f.is_anon() {
                    continue;
                }
                // A page dirty as a folio (not only through entries) is cleaned only when this is its one
                // mapping; a clean one shared with a fork child still loses this entry's dirty bit and
                // becomes lazily freeable (`madvise_free_pte_range`, `lru_lazyfree`).
                if f.flags().contains(FrameFlags::DIRTY) {
                    if f.mapcount() != 1 {
                        continue;
                    }
                    f.clear(FrameFlags::DIRTY);
                }
                if pte.is_young() || pte.is_dirty() {
                    g.update(addr - PAGE_SIZE, |p| if p.is_present() { p.mkold().mkclean() } else { p });
                }
                // `folio_mark_lazyfree`: a swap-backed, evictable folio joins the CPU's lazy-free batch, whose
                // drain makes it lazily free, inactive and unreferenced (`Memory::lru_add_drain`); one lazily
                // free already, or mlocked, stays as it is.
                self.mem.mark_lazyfree(pte.pfn());
                n += 1;
            }
        });
        n
    }

    /// `madvise_cold_or_pageout_pte_range`'s page-table part over `[start, end)` (module docs). Returns the
    /// pages marked old. With `pageout` the entries keep their accessed bit (6.18 clears it only for
    /// `MADV_COLD`: `if (!pageout && pte_young(ptent))`), and an anonymous swap-backed page, which reclaim
    /// cannot write out without swap, comes back active (`shrink_folio_list`'s `activate_locked`).
    pub fn mkold_range(&self, start: u64, end: u64, pageout: bool) -> u64 {
        let mut n = 0;
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                let pte = g.get(addr);
                if pte.is_present() && !pte.is_special() {
                    let f = self.mem.frame(pte.pfn());
                    if f.mapcount() <= 1 {
                        if !pageout {
                            g.update(addr, |p| if p.is_present() { p.mkold() } else { p });
                        }
                        self.mem.folio(pte.pfn()).clear(FrameFlags::REFERENCED);
                        if pageout && f.flags().contains(FrameFlags::ANON.union(FrameFlags::SWAPBACKED)) {
                            f.set(FrameFlags::ACTIVE);
                        }
                        n += 1;
                    }
                }
                addr += PAGE_SIZE;
            }
        });
        n
    }

    /// `page_mkclean_one` at `addr`: if the entry maps `pfn` writable or dirty, it loses both bits (a
    /// compare-and-swap against the MMU, so a store in between is not lost: its dirty bit is then in the value
    /// replaced, and the page is written back with it). Returns whether it changed.
    pub fn mkclean_entry(&self, addr: u64, pfn: Pfn) -> bool {
        let Ok(Some(g)) = self.lock_pte(addr, false) else { return false };
        let p = g.get(addr);
        if !p.is_present() || p.pfn() != pfn || !(p.is_write() || p.is_dirty()) {
            return false;
        }
        g.update(addr, |p| if p.is_present() && p.pfn() == pfn { p.wrprotect().mkclean() } else { p });
        true
    }

    /// `MADV_GUARD_INSTALL`'s page-table walk over `[start, end)` (module docs). Errors: `ENOMEM` allocating a
    /// table (markers placed so far stay).
    pub fn install_guard_markers(&self, start: u64, end: u64) -> Result<GuardInstall, Errno> {
        let end = end.min(VA_END).next_multiple_of(PAGE_SIZE);
        let mut installed = 0;
        let mut addr = start & !(PAGE_SIZE - 1);
        while addr < end {
            let next = addr_end(addr, end, 1);
            let g = self.lock_pte(addr, true)?.expect("allocating lock_pte returns a table");
            let mut a = addr;
            while a != next {
                let p = g.get(a);
                if !p.is_none() && p.as_marker() != Some(Marker::GUARD) {
                    return Ok(GuardInstall::Busy { addr: a });
                }
                a += PAGE_SIZE;
            }
            let mut a = addr;
            while a != next {
                if g.get(a).is_none() {
                    g.set(a, Pte::marker(Marker::GUARD));
                    installed += 1;
                }
                a += PAGE_SIZE;
            }
            addr = next;
        }
        Ok(GuardInstall::Done { installed })
    }

    /// `MADV_GUARD_REMOVE`'s walk: clears every guard marker in `[start, end)`. Returns how many.
    pub fn remove_guard_markers(&self, start: u64, end: u64) -> u64 {
        let mut n = 0;
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                if g.get(addr).as_marker().is_some_and(|m| m.contains(Marker::GUARD)) {
                    // Release: as `PteGuard::set`; a marker is never touched by the MMU.
                    g.slot(addr).store(0, Ordering::Release);
                    n += 1;
                }
                addr += PAGE_SIZE;
            }
        });
        n
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testutil::{RW, SHARED_RW, mem, read, smaps, write};
    use crate::{Access, CopyVma, FaultVma, Memory, MmuError, PageCache};
    use std::sync::Arc;
    use vmspace_abi::VmFlags;

    const A: u64 = 0x30_0000_0000;
    const PG: u64 = PAGE_SIZE;

    fn prot(flags: VmFlags, try_w: bool) -> ChangeProt {
        ChangeProt {
            newprot: PageProt::from_vm_flags(flags),
            try_change_writable: try_w,
            shared: flags.intersects(VmFlags::SHARED),
        }
    }

    #[test]
    fn read_only_then_back_restores_write_only_where_reuse_would() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 4 * PG, RW);
        write(&pt, &mut v, A, b"x").unwrap();
        read(&pt, &mut v, A + PG, 1).unwrap(); // zero page
        let ro = VmFlags::READ | VmFlags::MAYREAD | VmFlags::MAYWRITE;
        assert_eq!(
            pt.change_protection(A, A + 4 * PG, &prot(ro, false)),
            1,
            "the zero page is already read-only"
        );
        assert!(matches!(pt.access(A, Access::Write), Err(MmuError::Fault { protection: true, .. })));
        assert!(pt.pte(A).is_dirty(), "pte_modify keeps dirty");
        pt.change_protection(A, A + 4 * PG, &prot(RW, true));
        assert!(pt.pte(A).is_write(), "an exclusive anonymous page is made writable at once");
        assert!(!pt.pte(A + PG).is_write(), "the zero page is not");
        // After fork the page is shared: mprotect must not make it writable.
        let child = PageTable::new(&m).unwrap();
        pt.copy_page_range(&child, &CopyVma { start: A, end: A + 4 * PG, flags: RW, dst_uffd_wp: false })
            .unwrap();
        pt.change_protection(A, A + 4 * PG, &prot(ro, false));
        pt.change_protection(A, A + 4 * PG, &prot(RW, true));
        assert!(!pt.pte(A).is_write());
        pt.validate().unwrap();
    }

    #[test]
    fn exec_and_shared_dirty_rules() {
        let m = mem();
        let c = PageCache::new(&m, 2 * 4096, false);
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::file(A, A + 2 * PG, 0, SHARED_RW, &c, true);
        write(&pt, &mut v, A, b"d").unwrap();
        read(&pt, &mut v, A + PG, 1).unwrap();
        let rx = VmFlags::READ | VmFlags::EXEC | VmFlags::SHARED | VmFlags::MAYSHARE | VmFlags::MAYWRITE;
        pt.change_protection(A, A + 2 * PG, &prot(rx, false));
        assert!(pt.access(A, Access::Exec).is_ok());
        // Back to RW with write notification: vm_page_prot is read-only; only the dirty entry becomes writable.
        let cp = ChangeProt {
            newprot: PageProt::for_vma(SHARED_RW, true),
            try_change_writable: true,
            shared: true,
        };
        pt.change_protection(A, A + 2 * PG, &cp);
        assert!(pt.pte(A).is_write() && !pt.pte(A + PG).is_write());
        assert!(matches!(pt.access(A, Access::Exec), Err(MmuError::Fault { .. })));
    }

    /// A four-page private anonymous VMA at `A` with its first three pages written, the third also mapped by
    /// a child (`copy_page_range` of that page alone): the memory, the page table, the child's and the VMA.
    fn three_pages_one_shared() -> (Arc<Memory>, PageTable, PageTable, FaultVma<'static>) {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 4 * PG, RW);
        for i in 0..3 {
            write(&pt, &mut v, A + i * PG, b"w").unwrap();
        }
        let child = PageTable::new(&m).unwrap();
        pt.copy_page_range(
            &child,
            &CopyVma { start: A + 2 * PG, end: A + 3 * PG, flags: RW, dst_uffd_wp: false },
        )
        .unwrap();
        (m, pt, child, v)
    }

    #[test]
    fn madvise_free_makes_pages_lazyfree_until_written() {
        let (m, pt, _child, mut v) = three_pages_one_shared();
        // The page shared with the child is clean as a folio (only its entries are dirty): it is made lazily
        // freeable too, as 6.18 does (scripts/regress/smaps-dontneed-free.script). `madvise_free_single_vma`
        // drains first: only pages on an LRU list join the lazy-free batch.
        m.lru_add_drain();
        assert_eq!(pt.madvise_free(A, A + 4 * PG), 3);
        // Clean and old at once; lazily free when the CPU's batch drains.
        let s = smaps(&pt, A, A + 4 * PG);
        assert_eq!((s.rss, s.lazyfree, s.private_clean, s.shared_clean), (12, 0, 8, 4));
        m.lru_add_drain();
        let s = smaps(&pt, A, A + 4 * PG);
        assert_eq!((s.rss, s.lazyfree, s.private_clean, s.shared_clean, s.referenced), (12, 12, 8, 4, 0));
        write(&pt, &mut v, A + PG, b"again").unwrap();
        let s = smaps(&pt, A, A + 4 * PG);
        assert_eq!((s.lazyfree, s.private_dirty), (8, 4));
    }

    #[test]
    fn mkold_clears_referenced_state_of_pages_mapped_once() {
        let (_m, pt, _child, mut v) = three_pages_one_shared();
        assert_eq!(smaps(&pt, A, A + 4 * PG).referenced, 12);
        assert_eq!(pt.mkold_range(A, A + 4 * PG, false), 2, "the page shared with the child is left alone");
        let s = smaps(&pt, A, A + 4 * PG);
        assert_eq!((s.rss, s.referenced), (12, 4));
        assert!(!pt.pte(A).is_young() && pt.pte(A + 2 * PG).is_young());
        // The contents stay: the page is still mapped.
        assert_eq!(read(&pt, &mut v, A, 1).unwrap(), b"w");
        pt.validate().unwrap();
    }

    #[test]
    fn guard_install_stops_at_a_mapped_page_and_allocates_tables() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 1024 * PG, RW);
        write(&pt, &mut v, A + 700 * PG, b"p").unwrap();
        assert_eq!(
            pt.install_guard_markers(A, A + 1024 * PG).unwrap(),
            GuardInstall::Busy { addr: A + 700 * PG }
        );
        assert_eq!(pt.validate().unwrap().markers, 512, "the first table's markers stay");
        crate::PageTable::zap_range(&pt, A, A + 1024 * PG, &crate::ZapDetails::dontneed(false));
        assert_eq!(
            pt.install_guard_markers(A, A + 1024 * PG).unwrap(),
            GuardInstall::Done { installed: 512 }
        );
        assert_eq!(pt.remove_guard_markers(A + PG, A + 1023 * PG), 1022);
        assert_eq!(pt.validate().unwrap().markers, 2);
        m.inject_alloc_failure(Some(0));
        assert_eq!(pt.install_guard_markers(A + 4 * PMD_SIZE_T, A + 4 * PMD_SIZE_T + PG), Err(Errno::ENOMEM));
    }

    const PMD_SIZE_T: u64 = crate::PMD_SIZE;
}
