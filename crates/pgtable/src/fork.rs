//! `copy_page_range` (`mm/memory.c`): fork's copy of one VMA's entries into the child's page table.
//!
//! For each existing PTE table of the parent's range, under the parent table's lock and the child's (allocated
//! as needed), every entry is copied as `copy_present_ptes` and `copy_nonpresent_pte` of Linux 6.18 do:
//! - a page: the frame gains a reference and a mapping (`folio_try_dup_anon_rmap_pte`,
//!   `folio_dup_file_rmap_pte`), and an anonymous page loses `PageAnonExclusive`, so that the next write on
//!   either side copies it unless the other side has unmapped it by then. In a COW mapping (private and
//!   may-write) a writable entry is write-protected on both sides (`wrprotect_ptes`, atomic against the MMU's
//!   dirty updates in the parent). The child's entry is old (`pte_mkold`), and clean in a shared mapping; it
//!   keeps its uffd-wp bit only if the child's VMA wants it. The zero page is copied as it is.
//! - a marker: guard and poison markers always (`copy_pte_marker`), uffd-wp markers only if the child's VMA
//!   wants them.
//!
//! The kernel copies immediately, instead of sharing, an anonymous page that may be pinned by DMA
//! (`folio_maybe_dma_pinned`); vmspace has no pins, so pages are always shared.
//!
//! Whether a VMA's entries are copied at all is the caller's decision, [`vma_needs_copy`]: without an anon_vma
//! (no private page was ever made) the child faults the pages in again from the page cache, which is cheaper
//! than copying.
//!
//! Failure: if a table of the child cannot be allocated, the call fails with `ENOMEM` and the child holds a
//! prefix of the copy; the caller tears the child down, as `dup_mmap`'s failure path does (`exit_mmap`).
//! The parent's entries that were write-protected stay so (the kernel's do too); that changes no contents,
//! only makes the next write fault and reuse the page.
//!
//! Caller contract: the parent's mmap write lock with its VMAs write-locked (no faults in the parent's range);
//! the child's page table is not yet visible to anyone. After the last VMA, before the child runs, the caller
//! waits for a grace period ([`PageTable::flush_tlb`]): the parent's other threads may be completing a write
//! through an entry this copy write-protected, and the kernel's `flush_tlb_mm` at the end of `dup_mmap` is
//! what makes such a write land before fork returns.

use vmspace_abi::{Errno, VmFlags};
use vmspace_rcu::sync::Ordering;

use crate::arch::{Marker, PAGE_SIZE, Pte};
use crate::frame::FrameFlags;
use crate::pgtable::PageTable;

/// The source VMA as `copy_page_range` needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyVma {
    /// First address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// The parent VMA's `vm_flags` (`VM_SHARED` and `VM_MAYWRITE` decide COW).
    pub flags: VmFlags,
    /// The child's VMA has userfaultfd write protection (`userfaultfd_wp(dst_vma)`).
    pub dst_uffd_wp: bool,
}

/// `is_cow_mapping`: private and may be written.
pub fn is_cow_mapping(flags: VmFlags) -> bool {
    flags & (VmFlags::SHARED | VmFlags::MAYWRITE) == VmFlags::MAYWRITE
}

/// `vma_needs_copy`: whether fork must copy the VMA's entries (else the child faults them in again). Yes when
/// the child's VMA keeps uffd-wp state in its entries, for raw PFN mappings, and whenever the VMA has an
/// anon_vma (it may hold private pages, or markers: `MADV_GUARD_INSTALL` prepares one for that reason).
pub fn vma_needs_copy(src_flags: VmFlags, src_has_anon_vma: bool, dst_uffd_wp: bool) -> bool {
    dst_uffd_wp || src_flags.intersects(VmFlags::PFNMAP | VmFlags::MIXEDMAP) || src_has_anon_vma
}

impl PageTable {
    /// `copy_page_range` from `self` (the parent) into `dst` (module docs). Returns the entries copied.
    /// Errors: `ENOMEM` allocating a table; `EINVAL` if `dst` maps another [`crate::Memory`] (its frames are
    /// not this page table's) or is this page table itself (nothing copied either way).
    pub fn copy_page_range(&self, dst: &PageTable, vma: &CopyVma) -> Result<u64, Errno> {
        if !std::sync::Arc::ptr_eq(&self.mem, &dst.mem) || std::ptr::eq(self, dst) {
            return Err(Errno::EINVAL);
        }
        let cow = is_cow_mapping(vma.flags);
        let shared = vma.flags.intersects(VmFlags::SHARED);
        let mut err = None;
        let mut copied = 0u64;
        self.for_each_pte_table(vma.start, vma.end, &mut |src, from, to| {
            if err.is_some() {
                return;
            }
            let dg = match dst.lock_pte(from, true) {
                Ok(g) => g.expect("allocating lock_pte returns a table"),
                Err(e) => {
                    err = Some(e);
                    return;
                }
            };
            let mut addr = from;
            while addr != to {
                let pte = src.get(addr);
                if pte.is_none() {
                } else if let Some(m) = pte.as_marker() {
                    // `copy_pte_marker`, for the whole run of identical markers (a guard region is one).
                    let mut keep = m.intersection(Marker::POISONED.union(Marker::GUARD));
                    if m.contains(Marker::UFFD_WP) && vma.dst_uffd_wp {
                        keep = keep.union(Marker::UFFD_WP);
                    }
                    let pages = src.run(addr, to, pte);
                    if !keep.is_empty() {
                        dg.fill(addr, pages, Pte::marker(keep));
                        copied += pages;
                    }
                    addr += pages * PAGE_SIZE;
                    continue;
                } else if pte.is_present() {
                    let mut child = pte;
                    if !pte.is_special() {
                        let f = self.mem.frame(pte.pfn());
                        f.get();
                        // Relaxed: under the parent's page-table lock (see `Frame::mapcount`).
                        f.mapcount.fetch_add(1, Ordering::Relaxed);
                        let flags = f.flags();
                        if flags.contains(FrameFlags::ANON) {
                            f.clear(FrameFlags::ANON_EXCLUSIVE);
                        }
                        dst.add_rss(PageTable::rss_kind(flags), 1);
                    }
                    if cow && pte.is_write() {
                        src.update(addr, |p| if p.is_present() { p.wrprotect() } else { p });
                        child = child.wrprotect();
                    }
                    if shared {
                        child = child.mkclean();
                    }
                    child = child.mkold();
                    if !vma.dst_uffd_wp {
                        child = child.clear_uffd_wp();
                    }
                    dg.set(addr, child);
                    copied += 1;
                } else {
                    debug_assert!(false, "unknown non-present entry {pte:?}");
                }
                addr += PAGE_SIZE;
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(copied),
        }
    }

    /// `flush_tlb_mm` for the emulated MMU: waits until every access that translated through an entry before
    /// this call has completed (an RCU grace period: accesses run inside read-side sections). Needed where the
    /// kernel's flush orders user stores before the call's return: after fork's write-protection, and after
    /// write-protecting or unmapping entries that other threads may be writing through when the caller must
    /// promise those writes are done. Blocking; costs a grace period.
    pub fn flush_tlb(&self) {
        vmspace_rcu::synchronize();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testutil::{RW, SHARED_RW, mem, read, smaps, write};
    use crate::{FaultVma, PageCache, ZapDetails};

    const A: u64 = 0x60_0000_0000;
    const PG: u64 = PAGE_SIZE;

    #[test]
    fn cow_rules_and_markers() {
        let m = mem();
        let parent = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 8 * PG, RW);
        write(&parent, &mut v, A, b"p").unwrap();
        read(&parent, &mut v, A + PG, 1).unwrap();
        parent.install_guard_markers(A + 2 * PG, A + 3 * PG).unwrap();
        {
            let g = parent.lock_pte(A + 3 * PG, false).unwrap().unwrap();
            g.set(A + 3 * PG, Pte::marker(Marker::UFFD_WP));
        }
        let child = PageTable::new(&m).unwrap();
        let n = parent
            .copy_page_range(&child, &CopyVma { start: A, end: A + 8 * PG, flags: RW, dst_uffd_wp: false });
        assert_eq!(n, Ok(3), "page, zero page, guard; the uffd-wp marker is not wanted");
        let (p, c) = (parent.pte(A), child.pte(A));
        assert_eq!(p.pfn(), c.pfn());
        assert!(!p.is_write() && !c.is_write(), "write-protected on both sides");
        assert!(p.is_dirty() && c.is_dirty() && p.is_young() && !c.is_young(), "the child's entry is old");
        assert!(child.pte(A + PG).is_special());
        assert_eq!(child.pte(A + 2 * PG).as_marker(), Some(Marker::GUARD));
        assert!(child.pte(A + 3 * PG).is_none());
        let info = m.frame_info(p.pfn()).unwrap();
        assert_eq!((info.refcount, info.mapcount), (2, 2));
        assert!(!info.flags.contains(FrameFlags::ANON_EXCLUSIVE));
        assert_eq!(child.rss().anon, 1);
        child.validate().unwrap();
        parent.validate().unwrap();
        // With uffd-wp wanted, the marker comes along.
        let child2 = PageTable::new(&m).unwrap();
        parent
            .copy_page_range(&child2, &CopyVma { start: A, end: A + 8 * PG, flags: RW, dst_uffd_wp: true })
            .unwrap();
        assert_eq!(child2.pte(A + 3 * PG).as_marker(), Some(Marker::UFFD_WP));
        parent.zap_range(A, A + 8 * PG, &ZapDetails::UNMAP);
    }

    #[test]
    fn shared_mappings_stay_writable_and_the_child_starts_clean() {
        let m = mem();
        let c = PageCache::new(&m, 2 * 4096, true);
        let parent = PageTable::new(&m).unwrap();
        let mut v = FaultVma::file(A, A + 2 * PG, 0, SHARED_RW, &c, false);
        write(&parent, &mut v, A, b"s").unwrap();
        let child = PageTable::new(&m).unwrap();
        parent
            .copy_page_range(
                &child,
                &CopyVma { start: A, end: A + 2 * PG, flags: SHARED_RW, dst_uffd_wp: false },
            )
            .unwrap();
        assert!(parent.pte(A).is_write() && parent.pte(A).is_dirty());
        assert!(child.pte(A).is_write() && !child.pte(A).is_dirty());
        // The child writes without a fault; the parent sees it.
        child.write(A + 1, b"t").unwrap();
        assert_eq!(read(&parent, &mut v, A, 2).unwrap(), b"st");
        assert_eq!(child.rss().shmem, 1);
        let s = smaps(&child, A, A + 2 * PG);
        assert_eq!((s.rss, s.pss, s.shared_dirty), (4, 2, 4), "the frame is dirty from the parent's fault");
    }

    #[test]
    fn a_failed_copy_leaves_a_child_that_tears_down_cleanly() {
        let m = mem();
        let parent = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 4 * PMD_SIZE_T, RW);
        for i in 0..4 {
            write(&parent, &mut v, A + i * PMD_SIZE_T, &[i as u8]).unwrap();
        }
        let mut i = 0;
        loop {
            let child = PageTable::new(&m).unwrap();
            m.inject_alloc_failure(Some(i));
            let r = parent.copy_page_range(
                &child,
                &CopyVma { start: A, end: A + 4 * PMD_SIZE_T, flags: RW, dst_uffd_wp: false },
            );
            m.inject_alloc_failure(None);
            child.validate().unwrap();
            drop(child);
            vmspace_rcu::synchronize();
            parent.validate().unwrap();
            for k in 0..4 {
                assert_eq!(m.frame_info(parent.pte(A + k * PMD_SIZE_T).pfn()).unwrap().mapcount, 1);
            }
            if r.is_ok() {
                break;
            }
            i += 1;
        }
        assert_eq!(i, 6, "PUD, PMD and four PTE tables");
        assert_eq!(m.stats().frames_in_use, 4);
    }

    const PMD_SIZE_T: u64 = crate::PMD_SIZE;

    #[test]
    fn needs_copy_follows_the_kernel() {
        assert!(!vma_needs_copy(RW, false, false));
        assert!(vma_needs_copy(RW, true, false));
        assert!(vma_needs_copy(RW, false, true));
        assert!(vma_needs_copy(VmFlags::PFNMAP, false, false));
        assert!(is_cow_mapping(RW));
        assert!(!is_cow_mapping(SHARED_RW));
        assert!(!is_cow_mapping(VmFlags::READ | VmFlags::MAYREAD));
    }
}
