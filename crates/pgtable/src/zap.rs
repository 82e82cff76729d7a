//! Unmapping: `unmap_page_range` / `zap_pte_range` (clear entries, drop the frames' mappings and references),
//! the reclaim of emptied PTE tables (`mm/pt_reclaim.c`), and `free_pgd_range` (free the tables of an unmapped
//! range between its neighbours).
//!
//! # zap
//!
//! [`PageTable::zap_range`] walks the range's existing tables (it allocates nothing) and, under each PTE table's
//! lock, clears entries as `zap_present_ptes` and `zap_nonpresent_ptes` of Linux 6.18 do:
//! - a present entry is cleared with one atomic swap, so the MMU's last accessed/dirty update is in the value
//!   read. For a file page, a dirty entry marks the frame dirty (`folio_mark_dirty`) and a young one marks it
//!   accessed (`folio_mark_accessed`) if the details say `recency`: only where the VMA has recency
//!   (`vma_has_recency`: neither `VM_SEQ_READ` nor `VM_RAND_READ`). The frame's mapcount drops and its reference goes to the gather,
//!   which frees the frame after a grace period if it was the last. The zero page is just cleared.
//! - anonymous pages are skipped unless the details say `even_cows` (`should_zap_folio`): truncating a file
//!   keeps a private mapping's copied pages only when asked to (`unmap_mapping_range(.., even_cows = 0)`).
//! - markers (`zap_nonpresent_ptes`): a guard marker is dropped only with `drop_markers` (munmap, exit); a
//!   uffd-wp marker always in an anonymous VMA, else only with `drop_markers`; a poison marker whenever
//!   `even_cows`.
//!
//! With `reclaim_pt` (`MADV_DONTNEED`, `CONFIG_PT_RECLAIM=y` on the live kernel) a PTE table whose whole 2 MiB
//! span was zapped, that skipped nothing and is empty afterwards, is unlinked under its own lock and freed after
//! a grace period (`try_get_and_clear_pmd` + `free_pte`), as the live kernel's `VmPTE` shows.
//!
//! Caller contract (for the result the kernel's caller gets, not for memory safety): the range's VMAs are
//! stable (mmap lock or the VMA lock held: zap may run beside faults in the same range, which the PTE locks
//! serialise) and no `free_pgd_range` or `move_page_tables` runs on it. Every PTE table is reached by its own
//! walk from the PGD inside an RCU read-side section that lasts while its lock is held, so a zap beside anything
//! (a `free_pgd_range` of the same range included) never touches a freed table.
//!
//! # free_pgd_range
//!
//! [`PageTable::free_pgd_range`] is the kernel's function line for line: it frees every PTE table of the
//! range's 2 MiB spans that lie within `[floor, ceiling)` (the neighbouring VMAs' bounds, rounded), then a PMD
//! table when its whole 1 GiB span is, and a PUD table when its whole 512 GiB span is. The entries must have
//! been zapped first; a table that still holds one (or whose child does) is kept. A PTE table is unlinked
//! under its lock (the protocol `lock_pte` relies on); a PMD or PUD table by an atomic swap of its parent
//! entry, so that of two callers racing over one range only the one whose swap took the table out retires it;
//! the call walks the upper tables inside one RCU read-side section, so a table another caller retires stays
//! allocated while it is walked. All tables go through a gather and are freed a grace period after their
//! unlink.
//!
//! It is a safe function: no interleaving with any other operation frees a table twice or frees one in use.
//! Its contract is the kernel's, for an exact result: no VMA covers the freed spans (the kernel calls it from
//! `free_pgtables` after the VMAs left the tree), so no operation other than lockless walkers runs in them. A
//! caller that populates the range meanwhile (faults, table moves) can lose tables it links there: a table a
//! faulter links into an upper table that is being unlinked becomes unreachable and is never freed (a leak,
//! which `check_memory` reports).

use vmspace_abi::VmFlags;
use vmspace_rcu::sync::{AtomicU64, Ordering};

use crate::arch::{Marker, PAGE_SIZE, PGDIR_SIZE, PMD_SIZE, PUD_SIZE, VA_END, addr_end, index};
use crate::frame::FrameFlags;
use crate::gather::MmuGather;
use crate::pgtable::{MM_ANONPAGES, MM_FILEPAGES, MM_SHMEMPAGES, NR_MM_COUNTERS, PageTable, PteGuard, Rss};
use crate::table::{entry_addr, table_of};

/// What a zap may remove (`struct zap_details`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZapDetails {
    /// Zap anonymous (copied-on-write) pages too (`even_cows`; `should_zap_cows`). When false only page-cache
    /// pages go, as `unmap_mapping_range(.., even_cows = 0)` wants.
    pub even_cows: bool,
    /// Drop guard and uffd-wp markers (`ZAP_FLAG_DROP_MARKER`: munmap and exit).
    pub drop_markers: bool,
    /// Reclaim PTE tables left empty (`reclaim_pt`: `MADV_DONTNEED`).
    pub reclaim_pt: bool,
    /// The VMA is file-backed (`!vma_is_anonymous`): its uffd-wp markers survive a zap without
    /// `drop_markers`.
    pub file_vma: bool,
    /// A young entry of a file page marks the page accessed (`folio_mark_accessed`). `zap_present_folio_ptes`
    /// does so only when `vma_has_recency(vma)`: false for a VMA with `VM_SEQ_READ` or `VM_RAND_READ`
    /// (`MADV_SEQUENTIAL`, `MADV_RANDOM`; the kernel's `FMODE_NOREUSE` file has no counterpart here).
    pub recency: bool,
}

impl ZapDetails {
    /// `unmap_vmas` (munmap, exit): everything goes, markers included.
    pub const UNMAP: ZapDetails =
        ZapDetails { even_cows: true, drop_markers: true, reclaim_pt: false, file_vma: false, recency: true };

    /// `madvise_dontneed_single_vma`: every page, guard markers kept, empty tables reclaimed.
    pub const fn dontneed(file_vma: bool) -> ZapDetails {
        ZapDetails { even_cows: true, drop_markers: false, reclaim_pt: true, file_vma, recency: true }
    }

    /// `unmap_mapping_range`'s details: page-cache pages, and copied ones if `even_cows`.
    pub const fn mapping(even_cows: bool) -> ZapDetails {
        ZapDetails { even_cows, drop_markers: false, reclaim_pt: false, file_vma: true, recency: true }
    }

    /// These details for a VMA with (`vma_has_recency`) or without recency ([`ZapDetails::recency`]).
    pub const fn with_recency(self, recency: bool) -> ZapDetails {
        ZapDetails { recency, ..self }
    }
}

/// `vma_has_recency` for a VMA's flags: whether its accesses count for the page's recency (a zap of a young entry
/// marks the page accessed). Not with `VM_SEQ_READ` or `VM_RAND_READ` (`include/linux/mm_inline.h`).
pub const fn vma_has_recency(flags: VmFlags) -> bool {
    !flags.intersects(VmFlags::SEQ_READ.union(VmFlags::RAND_READ))
}

/// What a zap did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZapStats {
    /// Present entries cleared (the zero page included).
    pub present: u64,
    /// Mapped pages removed, by kind (the RSS decrease).
    pub rss: Rss,
    /// File pages marked dirty from a dirty entry (`folio_mark_dirty`).
    pub dirty_file: u64,
    /// Marker entries cleared.
    pub markers: u64,
    /// Entries kept because the details excluded them.
    pub skipped: u64,
    /// PTE tables reclaimed.
    pub tables_freed: u64,
}

impl PageTable {
    /// `unmap_page_range` over `[start, end)` with `details` (module docs). Allocates nothing.
    pub fn zap_range(&self, start: u64, end: u64, details: &ZapDetails) -> ZapStats {
        let mut stats = ZapStats::default();
        let mut tlb = MmuGather::new(&self.mem);
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            self.zap_pte_range(g, from, to, details, &mut tlb, &mut stats)
        });
        stats
    }

    /// `zap_pte_range`: one locked PTE table's part `[start, end)` of the range.
    fn zap_pte_range(
        &self,
        g: &PteGuard<'_>,
        start: u64,
        end: u64,
        d: &ZapDetails,
        tlb: &mut MmuGather,
        stats: &mut ZapStats,
    ) {
        let mut skipped = false;
        // The RSS decrease by kind, added to the counters once for the table as `zap_pte_range` does
        // (`add_mm_rss_vec`), instead of one counter update per page.
        let mut rss = [0i64; NR_MM_COUNTERS];
        let mut addr = start;
        while addr != end {
            let pte = g.get(addr);
            if pte.is_none() {
            } else if pte.is_present() {
                if pte.is_special() {
                    // The zero page: nothing to account (`vm_normal_page` is NULL).
                    g.take(addr);
                    stats.present += 1;
                } else {
                    let pfn = pte.pfn();
                    let f = self.mem.frame(pfn);
                    let flags = f.flags();
                    if flags.contains(FrameFlags::ANON) && !d.even_cows {
                        skipped = true;
                        stats.skipped += 1;
                    } else {
                        let old = g.take(addr);
                        stats.present += 1;
                        if !flags.contains(FrameFlags::ANON) {
                            // `folio_mark_dirty`, `folio_mark_accessed`: on the folio.
                            let folio = self.mem.folio(old.pfn());
                            if old.is_dirty() {
                                folio.set(FrameFlags::DIRTY);
                                stats.dirty_file += 1;
                            }
                            if old.is_young() && d.recency {
                                self.mem.mark_accessed(old.pfn());
                            }
                        }
                        let kind = PageTable::rss_kind(flags);
                        rss[kind] += 1;
                        match kind {
                            MM_ANONPAGES => stats.rss.anon += 1,
                            MM_SHMEMPAGES => stats.rss.shmem += 1,
                            MM_FILEPAGES => stats.rss.file += 1,
                            _ => {}
                        }
                        // Relaxed: under the page-table lock (see `Frame::mapcount`).
                        f.mapcount.fetch_sub(1, Ordering::Relaxed);
                        tlb.put_frame(pfn);
                    }
                }
            } else if let Some(m) = pte.as_marker() {
                let keep = if m.contains(Marker::GUARD) {
                    !d.drop_markers
                } else if m.contains(Marker::UFFD_WP) {
                    d.file_vma && !d.drop_markers
                } else {
                    // Poison markers.
                    !d.even_cows
                };
                // The whole run of identical markers at once (a guard region is one).
                let pages = g.run(addr, end, pte);
                if keep {
                    skipped = true;
                    stats.skipped += pages;
                } else {
                    g.clear_non_present(addr, pages);
                    stats.markers += pages;
                }
                addr += pages * PAGE_SIZE;
                continue;
            } else {
                debug_assert!(false, "unknown non-present entry {pte:?} at {addr:#x}");
                skipped = true;
            }
            addr += PAGE_SIZE;
        }
        for (kind, &n) in rss.iter().enumerate() {
            if n != 0 {
                self.add_rss(kind, -n);
            }
        }
        // `try_to_free_pte`: only when this zap covered the table's whole span.
        let span_start = start & !(PMD_SIZE - 1);
        if d.reclaim_pt
            && !skipped
            && start == span_start
            && end == span_start + PMD_SIZE
            && g.table().is_empty()
            && g.unlink()
        {
            self.count_table(0, -1);
            tlb.remove_table(g.table_addr());
            stats.tables_freed += 1;
        }
    }

    /// `free_pgd_range` (module docs). `ceiling` 0 means the top of the address space. Returns the tables it
    /// freed.
    pub fn free_pgd_range(&self, addr: u64, end: u64, floor: u64, ceiling: u64) -> u64 {
        let mut addr = addr & !(PMD_SIZE - 1);
        let mut end = end.min(VA_END);
        let mut ceiling = ceiling;
        if addr < floor {
            addr += PMD_SIZE;
            if addr == 0 {
                return 0;
            }
        }
        if ceiling != 0 {
            ceiling &= !(PMD_SIZE - 1);
            if ceiling == 0 {
                return 0;
            }
        }
        if end.wrapping_sub(1) > ceiling.wrapping_sub(1) {
            end -= PMD_SIZE;
        }
        if addr > end.wrapping_sub(1) {
            return 0;
        }
        // Declared before the section, so dropped after it: the gather's end may wait for its grace period,
        // which a section of this thread would hold back.
        let mut tlb = MmuGather::new(&self.mem);
        // Every upper table this call reaches is used inside this section, so one that a racing call unlinks
        // and retires stays allocated until the walk is done.
        let rcu = vmspace_rcu::pin();
        let mut freed = 0u64;
        let pgd = self.pgd();
        let mut a = addr;
        loop {
            let next = addr_end(a, end, 3);
            let slot = &pgd.e[index(a, 3)];
            // Acquire: pairs with the link.
            if slot.load(Ordering::Acquire) != 0 {
                freed += self.free_pud_range(&mut tlb, &rcu, slot, a, next, floor, ceiling);
            }
            a = next;
            if a == end {
                break;
            }
        }
        freed
    }

    /// `free_pud_range` (with the folded P4D level's tail, which frees the PUD table).
    #[allow(clippy::too_many_arguments)]
    fn free_pud_range(
        &self,
        tlb: &mut MmuGather,
        rcu: &vmspace_rcu::Guard,
        pgd_slot: &AtomicU64,
        addr: u64,
        end: u64,
        floor: u64,
        ceiling: u64,
    ) -> u64 {
        // Acquire: pairs with the link.
        let v = pgd_slot.load(Ordering::Acquire);
        if v == 0 {
            return 0;
        }
        // SAFETY: inside the caller's section `rcu`, entered before the load, which outlives every use of the
        // table here: a racing unlinker's retirement waits for it.
        let pud = unsafe { table_of(v) };
        let mut freed = 0;
        let mut a = addr;
        loop {
            let next = addr_end(a, end, 2);
            let slot = &pud.e[index(a, 2)];
            if slot.load(Ordering::Acquire) != 0 {
                freed += self.free_pmd_range(tlb, rcu, slot, a, next, floor, ceiling);
            }
            a = next;
            if a == end {
                break;
            }
        }
        if !Self::span_free(addr, end, PGDIR_SIZE, floor, ceiling) {
            return freed;
        }
        freed + self.unlink_upper(tlb, pgd_slot, v, 2)
    }

    /// `free_pmd_range`.
    #[allow(clippy::too_many_arguments)]
    fn free_pmd_range(
        &self,
        tlb: &mut MmuGather,
        rcu: &vmspace_rcu::Guard,
        pud_slot: &AtomicU64,
        addr: u64,
        end: u64,
        floor: u64,
        ceiling: u64,
    ) -> u64 {
        // Acquire: pairs with the link.
        let v = pud_slot.load(Ordering::Acquire);
        if v == 0 {
            return 0;
        }
        // SAFETY: as in `free_pud_range`.
        let pmd = unsafe { table_of(v) };
        let mut freed = 0;
        let mut a = addr;
        loop {
            let next = addr_end(a, end, 1);
            let slot = &pmd.e[index(a, 1)];
            if slot.load(Ordering::Acquire) != 0 {
                freed += self.free_pte_range(tlb, rcu, slot);
            }
            a = next;
            if a == end {
                break;
            }
        }
        if !Self::span_free(addr, end, PUD_SIZE, floor, ceiling) {
            return freed;
        }
        freed + self.unlink_upper(tlb, pud_slot, v, 1)
    }

    /// Unlinks the empty upper-level table `v` (a PUD table if `child_level` is 2, a PMD table if 1) from
    /// `slot` and retires it; returns 1 if this call did, 0 if the table still holds entries or another caller
    /// unlinked it first.
    ///
    /// The unlink is a swap, so of two racing callers only the one whose swap took `v` out retires it (the
    /// other's swap finds 0, or a table linked since, which it puts back). A table that is not empty stays: a
    /// table below it still holds entries the caller did not zap. A linker can add a child between the
    /// emptiness check and the swap only if the caller runs a populating operation (a fault, a table move) in
    /// the range it frees, which breaks the contract of the module docs; the swapped-out table is then linked
    /// again if its slot is still empty, and otherwise left allocated and unreachable (a leak, never a free
    /// of a table in use).
    fn unlink_upper(
        &self,
        tlb: &mut MmuGather,
        slot: &AtomicU64,
        v: u64,
        child_level: crate::arch::Level,
    ) -> u64 {
        // SAFETY: `v` was loaded inside the caller's read-side section, which is still open.
        let t = unsafe { table_of(v) };
        if !t.is_empty() {
            return 0;
        }
        // AcqRel: Release orders the table's last changes (its children's unlinks) before the unlink, for
        // lockless walkers; Acquire pairs with the Release of a racing unlinker or linker whose value we take.
        let took = slot.swap(0, Ordering::AcqRel);
        if took != v {
            if took != 0 {
                // Not ours: a table linked after a racing unlink of `v`. Put it back unless the slot was
                // filled again meanwhile (then `took` is unreachable; module docs: a leak, never a free).
                // AcqRel: Release publishes it again as its link did; Acquire pairs with a racing link.
                let _ = slot.compare_exchange(0, took, Ordering::AcqRel, Ordering::Acquire);
            }
            return 0;
        }
        if !t.is_empty() {
            // A racing linker added a child after the check (see above): link the table again if we can.
            // AcqRel: as above.
            let _ = slot.compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire);
            return 0;
        }
        self.count_table(child_level, -1);
        tlb.remove_table(entry_addr(v));
        1
    }

    /// `free_pte_range`: unlinks the PTE table under its lock and retires it. A table that still holds
    /// entries (a range not zapped first) stays.
    fn free_pte_range(&self, tlb: &mut MmuGather, _rcu: &vmspace_rcu::Guard, pmd_slot: &AtomicU64) -> u64 {
        // SAFETY: `pmd_slot` was reached inside the caller's section `_rcu`, which outlives the guard returned
        // (a nested section of this thread, dropped before the call returns).
        let Ok(Some(g)) = (unsafe { self.lock_pte_at(pmd_slot, false, vmspace_rcu::pin()) }) else {
            return 0;
        };
        if !g.table().is_empty() || !g.unlink() {
            return 0;
        }
        self.count_table(0, -1);
        tlb.remove_table(g.table_addr());
        1
    }

    /// The tail test of `free_pmd_range` / `free_pud_range`: whether the span (`size`) containing `addr` starts
    /// at or above `floor` and `end` does not pass `ceiling` rounded down to the span (the caller vouches that
    /// nothing else is mapped between `floor` and `ceiling`).
    fn span_free(addr: u64, end: u64, size: u64, floor: u64, ceiling: u64) -> bool {
        let start = addr & !(size - 1);
        if start < floor {
            return false;
        }
        let mut ceiling = ceiling;
        if ceiling != 0 {
            ceiling &= !(size - 1);
            if ceiling == 0 {
                return false;
            }
        }
        end.wrapping_sub(1) <= ceiling.wrapping_sub(1)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testutil::{RW, SHARED_RW, mem, read, write};
    use crate::{FaultVma, GuardInstall, PageCache, Pte};

    const A: u64 = 0x20_0000_0000;
    const PG: u64 = PAGE_SIZE;

    #[test]
    fn zap_drops_pages_and_accounts_by_kind() {
        let m = mem();
        let c = PageCache::new(&m, 0, false);
        c.write(0, &[3u8; 4 * 4096]).unwrap();
        let pt = PageTable::new(&m).unwrap();
        let mut anon = FaultVma::anonymous(A, A + 8 * PG, RW);
        let mut file = FaultVma::file(A + 8 * PG, A + 12 * PG, 0, SHARED_RW, &c, false);
        for i in 0..4 {
            write(&pt, &mut anon, A + i * PG, &[1]).unwrap();
        }
        read(&pt, &mut anon, A + 5 * PG, 1).unwrap(); // the zero page
        read(&pt, &mut file, A + 8 * PG, 1).unwrap(); // fault-around maps all four
        write(&pt, &mut file, A + 9 * PG, &[2]).unwrap(); // dirty entry
        assert_eq!((pt.rss().anon, pt.rss().file), (4, 4));
        let before = m.stats().frames_in_use;
        let s = pt.zap_range(A, A + 12 * PG, &ZapDetails::UNMAP);
        assert_eq!(s.present, 9);
        assert_eq!((s.rss.anon, s.rss.file, s.rss.shmem), (4, 4, 0));
        assert_eq!(s.dirty_file, 1);
        assert_eq!(pt.rss(), Rss::default());
        let p9 = c.page(1).unwrap();
        let info = m.frame_info(p9).unwrap();
        assert!(info.flags.contains(FrameFlags::DIRTY.union(FrameFlags::REFERENCED)));
        assert_eq!((info.refcount, info.mapcount), (1, 0), "only the cache's reference is left");
        // The anonymous frames wait for the grace period, then go.
        assert_eq!(m.stats().frames_in_use, before - 4);
        vmspace_rcu::synchronize();
        assert_eq!(m.stats().frames_pending_free, 0);
        pt.validate().unwrap();
    }

    #[test]
    fn markers_and_cows_survive_the_zaps_that_must_keep_them() {
        let m = mem();
        // Without readahead, so that the read maps page 0 alone.
        let c = PageCache::with_bdi(&m, 4 * 4096, false, crate::Bdi::NONE);
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::file(A, A + 4 * PG, 0, RW, &c, false);
        read(&pt, &mut v, A, 1).unwrap();
        write(&pt, &mut v, A + PG, b"cow").unwrap();
        assert_eq!(
            pt.install_guard_markers(A + 2 * PG, A + 3 * PG).unwrap(),
            GuardInstall::Done { installed: 1 }
        );
        // unmap_mapping_range without even_cows: the file page goes, the copy and the marker stay.
        let s = pt.zap_range(A, A + 4 * PG, &ZapDetails::mapping(false));
        assert_eq!((s.present, s.skipped), (1, 2));
        assert!(pt.pte(A).is_none() && pt.pte(A + PG).is_present());
        // MADV_DONTNEED: the copy goes, the guard marker stays.
        let s = pt.zap_range(A, A + 4 * PG, &ZapDetails::dontneed(true));
        assert_eq!((s.present, s.markers, s.skipped), (1, 0, 1));
        assert_eq!(pt.pte(A + 2 * PG), Pte::marker(Marker::GUARD));
        // munmap: the marker too.
        let s = pt.zap_range(A, A + 4 * PG, &ZapDetails::UNMAP);
        assert_eq!(s.markers, 1);
        assert_eq!(pt.validate().unwrap().markers, 0);
    }

    #[test]
    fn uffd_wp_markers_follow_the_vma_kind_and_poison_follows_even_cows() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        // Place markers by hand (userfaultfd and poisoning are not modelled beyond their entries).
        let put = |addr: u64, mk: Marker| {
            let g = pt.lock_pte(addr, true).unwrap().unwrap();
            g.set(addr, Pte::marker(mk));
        };
        put(A, Marker::UFFD_WP);
        put(A + PG, Marker::POISONED);
        let s = pt.zap_range(A, A + 2 * PG, &ZapDetails::dontneed(true));
        assert_eq!((s.markers, s.skipped), (1, 1), "file VMA keeps uffd-wp, poison goes");
        let s = pt.zap_range(A, A + 2 * PG, &ZapDetails::dontneed(false));
        assert_eq!(s.markers, 1, "anonymous VMA drops uffd-wp");
        put(A, Marker::POISONED);
        let s = pt.zap_range(A, A + PG, &ZapDetails::mapping(false));
        assert_eq!(s.skipped, 1, "without even_cows poison stays");
    }

    #[test]
    fn dontneed_reclaims_a_fully_zapped_empty_table_only() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let base = A;
        let mut v = FaultVma::anonymous(base, base + 2 * PMD_SIZE, RW);
        for i in 0..4 {
            write(&pt, &mut v, base + i * PMD_SIZE / 2, &[1]).unwrap();
        }
        assert_eq!(pt.pte_table_pages(), 2);
        // Half a table: no reclaim (as the live kernel's VmPTE shows).
        let s = pt.zap_range(base, base + PMD_SIZE / 2 + PG, &ZapDetails::dontneed(false));
        assert_eq!(s.tables_freed, 0);
        // The whole second table: reclaimed.
        let s = pt.zap_range(base + PMD_SIZE, base + 2 * PMD_SIZE, &ZapDetails::dontneed(false));
        assert_eq!(s.tables_freed, 1);
        assert_eq!(pt.pte_table_pages(), 1);
        // A marker in a table blocks its reclaim.
        pt.install_guard_markers(base, base + PG).unwrap();
        let s = pt.zap_range(base, base + PMD_SIZE, &ZapDetails::dontneed(false));
        assert_eq!(s.tables_freed, 0);
        // A fault after the reclaim gets a new table.
        write(&pt, &mut v, base + PMD_SIZE + 3 * PG, &[9]).unwrap();
        assert_eq!(pt.pte_table_pages(), 2);
        pt.validate().unwrap();
        drop(pt);
        vmspace_rcu::synchronize();
        assert_eq!(m.stats().tables_in_use, 0);
        assert_eq!(m.stats().tables_pending_free, 0);
    }

    #[test]
    fn free_pgd_range_respects_floor_and_ceiling() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        // Three 2 MiB spans with one page each: [A, A+2M), [A+2M, A+4M), [A+4M, A+6M).
        let mut v = FaultVma::anonymous(A, A + 3 * PMD_SIZE, RW);
        for i in 0..3 {
            write(&pt, &mut v, A + i * PMD_SIZE + 5 * PG, &[1]).unwrap();
        }
        let tables = pt.table_pages();
        assert_eq!(tables, 1 + 1 + 1 + 3, "PGD, PUD, PMD and three PTE tables");
        // Unmap the middle span's page; the neighbouring VMAs end/start inside the outer spans.
        pt.zap_range(A + PMD_SIZE + 5 * PG, A + PMD_SIZE + 6 * PG, &ZapDetails::UNMAP);
        let freed = pt.free_pgd_range(
            A + PMD_SIZE + 5 * PG,
            A + PMD_SIZE + 6 * PG,
            A + 6 * PG,
            A + 2 * PMD_SIZE + 5 * PG,
        );
        assert_eq!(freed, 1, "only the middle PTE table lies between floor and ceiling");
        assert_eq!(pt.table_pages(), tables - 1);
        // A floor inside the span keeps its table.
        pt.zap_range(A + 5 * PG, A + 6 * PG, &ZapDetails::UNMAP);
        assert_eq!(pt.free_pgd_range(A + 5 * PG, A + 6 * PG, A + PG, 0), 0);
        // Everything: the PMD and PUD tables go too.
        pt.zap_range(0, VA_END, &ZapDetails::UNMAP);
        assert_eq!(pt.free_pgd_range(0, VA_END, 0, 0), 4);
        assert_eq!(pt.table_pages(), 1);
        pt.validate().unwrap();
    }

    /// Two threads free the same range's tables at once, again and again: each table is unlinked and freed
    /// exactly once (the swaps decide who frees), the upper tables one thread is still walking stay allocated
    /// (the other's retirement waits for its section), and the frame and table accounting is exact after
    /// every round. The old plain load-and-store unlink freed a PMD or PUD table twice here.
    #[test]
    fn racing_free_pgd_range_frees_each_table_once() {
        let rounds = if cfg!(miri) { 3 } else { 2000 };
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        // PUD tables (one per 512 GiB span: eight, two under Miri to keep it fast), each with two PMD tables
        // of one PTE table.
        let puds: u64 = if cfg!(miri) { 2 } else { 8 };
        let bases: Vec<u64> =
            (0..puds).flat_map(|i| [A + i * PGDIR_SIZE, A + i * PGDIR_SIZE + PUD_SIZE]).collect();
        let mut vmas: Vec<FaultVma<'_>> =
            bases.iter().map(|&b| FaultVma::anonymous(b, b + PMD_SIZE, RW)).collect();
        let barrier = std::sync::Barrier::new(2);
        for round in 0..rounds {
            for (v, &b) in vmas.iter_mut().zip(&bases) {
                write(&pt, v, b + (round % 512) * PG, &[round as u8]).unwrap();
            }
            let tables = pt.table_pages() - 1;
            assert_eq!(tables, 5 * puds, "PUD, PMD and PTE tables");
            pt.zap_range(0, VA_END, &ZapDetails::UNMAP);
            let freed: u64 = std::thread::scope(|s| {
                let hs: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            pt.free_pgd_range(0, VA_END, 0, 0)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(freed, tables, "round {round}: every table freed exactly once");
            assert_eq!(pt.table_pages(), 1, "round {round}");
            pt.validate().unwrap();
        }
        crate::check_memory(&m, &[&pt], &[]).unwrap();
        assert_eq!(m.stats().tables_in_use, 1, "the PGD alone");
        assert_eq!(m.stats().frames_in_use, 0);
    }

    /// `free_pgd_range` over a range whose entries were not zapped frees nothing that holds them: the PTE
    /// table with an entry stays, and so do the PMD and PUD tables above it.
    #[test]
    fn free_pgd_range_keeps_tables_that_still_hold_entries() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 2 * PMD_SIZE, RW);
        write(&pt, &mut v, A, b"kept").unwrap();
        write(&pt, &mut v, A + PMD_SIZE, b"zapped").unwrap();
        pt.zap_range(A + PMD_SIZE, A + 2 * PMD_SIZE, &ZapDetails::UNMAP);
        assert_eq!(pt.free_pgd_range(0, VA_END, 0, 0), 1, "only the emptied PTE table");
        assert_eq!(read(&pt, &mut v, A, 4).unwrap(), b"kept");
        pt.validate().unwrap();
        crate::check_memory(&m, &[&pt], &[]).unwrap();
    }
}
