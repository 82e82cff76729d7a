//! Faulting ranges in: the VMA-level effects of the kernel's page faults and GUP population
//! (`mm/gup.c: __get_user_pages`, `populate_vma_page_range`, `__mm_populate`, `faultin_page_range`).
//!
//! The engine has no pages, so a fault here is only what it does to VMA state and whether it fails:
//!
//! - a page with a guard marker fails (`handle_pte_marker`: `VM_FAULT_SIGSEGV`, GUP's EFAULT) before anything
//!   else happens to it;
//! - a write fault on a private VMA gives it an anon_vma (`do_anonymous_page`, and `do_cow_fault`, which
//!   prepares the anon_vma before it reads the file page, so a write beyond the end of the file still leaves
//!   one);
//! - a page of a file mapping beyond the end of the file fails (SIGBUS, GUP's EFAULT).
//!
//! GUP walks a range page by page and stops at the first page that fails, so for a range inside one VMA the
//! outcome is: the anon_vma is prepared if the range is a write to a private VMA whose first page is not a
//! guard page (that first fault prepares it; any later one finds it), and the call fails with EFAULT if any
//! page is a guard page or beyond the end of the file. [`Mm::fault_range`] computes that without visiting
//! every page (a populate can cover terabytes).
//!
//! The three callers differ in how they find VMAs and map errors:
//!
//! - [`Mm::mm_populate`] (`__mm_populate`: mmap's `MAP_POPULATE` and `MAP_LOCKED`, mlock, mlockall, brk and
//!   mremap of locked memory) skips holes and `VM_IO | VM_PFNMAP` VMAs; per VMA `populate_vma_page_range`
//!   does nothing for `VM_LOCKONFAULT`, fails `PROT_NONE` with EFAULT, and faults writable private VMAs with
//!   writes and the rest with forced reads; errors stop it or are ignored (`MAP_POPULATE`, mlockall).
//! - `MADV_POPULATE_READ` / `WRITE` ([`Mm::faultin_page_range`], `FOLL_MADV_POPULATE`): a hole is ENOMEM, a
//!   VMA the access is not allowed on (`check_vma_flags`: `VM_IO | VM_PFNMAP`, a write without `VM_WRITE`, a
//!   read without `VM_READ`; no `FOLL_FORCE`) is EINVAL, a failing page EFAULT.
//! - single accesses ([`Mm::fault`](super::Mm::fault), [`Mm::gup_access`](super::Mm::gup_access)) check the
//!   VMA themselves and call [`Mm::fault_range`] for one page.

use super::tree::{V, VmaExt};
use super::{Errno, Mm, PAGE_SIZE, VmFlags};

impl Mm {
    /// The faults of `[start, end)` (page-aligned, non-empty, inside `v`, access already allowed): see the
    /// module docs. EFAULT if a page fails.
    pub(crate) fn fault_range(&mut self, v: V, start: u64, end: u64, write: bool) -> Result<(), Errno> {
        debug_assert!(v.start() <= start && start < end && end <= v.end());
        // hugetlb pages come from the pool one huge page at a time (`hugetlb_fault`), with their own
        // end-of-object check; guard markers never sit in hugetlb VMAs (`is_valid_guard_vma`).
        if v.fl().intersects(VmFlags::HUGETLB) {
            let size = v.file().and_then(|f| f.huge_page_size()).unwrap_or(PAGE_SIZE);
            let mut a = start & !(size - 1);
            while a < end {
                self.hugetlb_fault(v, a)?;
                a += size;
            }
            return Ok(());
        }
        let guard = self.guards.first_in(start, end);
        if write && !v.fl().intersects(VmFlags::SHARED) && guard != Some(start) {
            self.anon_vma_prepare(v);
        }
        if guard.is_some() {
            return Err(Errno::EFAULT);
        }
        if let Some(f) = v.file() {
            // Pages at or past this file page raise SIGBUS (the file's size now: `ftruncate` may have changed it
            // since the mapping was made, and a page touched before still faults); compare in pages so that no
            // address overflows.
            let last_pgoff = v.pgoff_at(end - PAGE_SIZE);
            if last_pgoff >= f.size().div_ceil(PAGE_SIZE) {
                return Err(Errno::EFAULT);
            }
        }
        Ok(())
    }

    /// `populate_vma_page_range` for `[start, end)` inside `v`: nothing for `VM_LOCKONFAULT`; EFAULT for an
    /// inaccessible VMA; else write faults for a writable private VMA, forced reads otherwise.
    pub(crate) fn populate_vma_page_range(&mut self, v: V, start: u64, end: u64) -> Result<(), Errno> {
        let fl = v.fl();
        if fl.intersects(VmFlags::LOCKONFAULT) {
            return Ok(());
        }
        if !fl.intersects(VmFlags::ACCESS_FLAGS) {
            return Err(Errno::EFAULT);
        }
        let write = fl.intersection(VmFlags::WRITE | VmFlags::SHARED) == VmFlags::WRITE;
        // check_vma_flags with FOLL_FORCE: a forced read of an unreadable VMA still needs VM_MAYREAD.
        if !write && !fl.intersects(VmFlags::READ) && !fl.intersects(VmFlags::MAYREAD) {
            return Err(Errno::EFAULT);
        }
        self.fault_range(v, start, end, write)
    }

    /// `__mm_populate(start, len, ignore_errors)`: each VMA intersecting the range, in order, holes and
    /// `VM_IO | VM_PFNMAP` VMAs skipped, through [`Mm::populate_vma_page_range`]. The first error is returned
    /// unless `ignore_errors`.
    pub(crate) fn mm_populate(&mut self, start: u64, len: u64, ignore_errors: bool) -> Result<(), Errno> {
        let end = start.saturating_add(len);
        let mut nstart = start;
        while nstart < end {
            let Some(v) = self.find_intersection(nstart, end) else { break };
            let nend = end.min(v.end());
            if !v.fl().intersects(VmFlags::IO | VmFlags::PFNMAP) {
                let from = nstart.max(v.start());
                if let Err(e) = self.populate_vma_page_range(v, from, nend)
                    && !ignore_errors
                {
                    return Err(e);
                }
            }
            nstart = nend;
        }
        Ok(())
    }

    /// `faultin_page_range` (`MADV_POPULATE_READ` / `MADV_POPULATE_WRITE`): see the module docs.
    pub(crate) fn faultin_page_range(&mut self, start: u64, end: u64, write: bool) -> Result<(), Errno> {
        let mut pos = start;
        while pos < end {
            let Some(v) = self.lookup(pos) else { return Err(Errno::ENOMEM) };
            let fl = v.fl();
            let allowed = !fl.intersects(VmFlags::IO | VmFlags::PFNMAP)
                && fl.intersects(if write { VmFlags::WRITE } else { VmFlags::READ });
            if !allowed {
                return Err(Errno::EINVAL);
            }
            let seg_end = end.min(v.end());
            self.fault_range(v, pos, seg_end, write)?;
            pos = seg_end;
        }
        Ok(())
    }
}
