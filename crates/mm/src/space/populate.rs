//! Faulting ranges in: GUP's population (`mm/gup.c: __get_user_pages`, `populate_vma_page_range`,
//! `__mm_populate`, `faultin_page_range`), with real faults page by page ([`super::fault`]).
//!
//! GUP walks a range page by page: a page already mapped with the access needed is touched, any other is faulted
//! in (`faultin_page` → `handle_mm_fault`); the first page that fails stops the walk, the pages before it stay
//! populated. A guard marker fails (`handle_pte_marker`: `VM_FAULT_SIGSEGV`), so does a file page beyond the end
//! of its file (`VM_FAULT_SIGBUS`): both are `EFAULT`; an allocation failure is `ENOMEM`. A write fault on a
//! private VMA gives it an anon_vma and private pages (`do_anonymous_page`, `do_cow_fault`, which prepares the
//! anon_vma before it reads the file page, so a write beyond the end of the file still leaves one).
//!
//! The three callers differ in how they find VMAs and map errors:
//!
//! - [`Mm::mm_populate`] (`__mm_populate`: mmap's `MAP_POPULATE` and `MAP_LOCKED`, mlock, mlockall, brk and
//!   mremap of locked memory, each after its write lock was dropped) takes the mmap read lock, skips holes and
//!   `VM_IO | VM_PFNMAP` VMAs; per VMA `populate_vma_page_range` does nothing for `VM_LOCKONFAULT`, fails
//!   `PROT_NONE` with EFAULT, and faults writable private VMAs with writes and the rest with forced reads;
//!   errors stop it or are ignored (`MAP_POPULATE`, mlockall).
//! - `MADV_POPULATE_READ` / `WRITE` ([`MmRead::faultin_page_range`], `FOLL_MADV_POPULATE`, under the read
//!   lock): a hole is ENOMEM, a VMA the access is not allowed on (`check_vma_flags`: `VM_IO | VM_PFNMAP`, a
//!   write without `VM_WRITE`, a read without `VM_READ`; no `FOLL_FORCE`) is EINVAL, a failing page EFAULT.
//! - mprotect's population of a locked VMA made writable calls [`Mm::populate_vma_page_range`] under the
//!   write lock, as `mprotect_fixup` does.

use super::fault::FaultError;
use super::tree::{V, VmaExt};
use super::{Errno, Mm, MmRead, PAGE_SIZE, VmFlags};

impl Mm {
    /// GUP over `[start, end)` inside `v` (page-aligned, access already allowed), page by page: module docs.
    /// The caller holds the mmap lock.
    pub(crate) fn gup_range(&self, v: V, start: u64, end: u64, write: bool) -> Result<(), Errno> {
        debug_assert!(v.start() <= start && start < end && end <= v.end());
        let mut a = start;
        while a < end {
            self.gup_page(v, a, write).map_err(FaultError::gup_errno)?;
            a += PAGE_SIZE;
        }
        Ok(())
    }

    /// `populate_vma_page_range` for `[start, end)` inside `v`: nothing for `VM_LOCKONFAULT`; EFAULT for an
    /// inaccessible VMA; else write faults for a writable private VMA, forced reads otherwise. The caller holds
    /// the mmap lock.
    pub(crate) fn populate_vma_page_range(&self, v: V, start: u64, end: u64) -> Result<(), Errno> {
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
        let r = self.gup_range(v, start, end, write);
        // It ends with `lru_add_drain`: the pages it mlocked are unevictable and those `MADV_FREE` queued lazily
        // free from here on (measured: a later touch of either keeps its mark). `MADV_POPULATE_*`
        // (`faultin_page_range`) does not drain.
        self.mem.lru_add_drain();
        r
    }

    /// `__mm_populate(start, len, ignore_errors)` under the mmap read lock: each VMA intersecting the range, in
    /// order, holes and `VM_IO | VM_PFNMAP` VMAs skipped, through [`Mm::populate_vma_page_range`]. The first
    /// error is returned unless `ignore_errors`.
    pub(crate) fn mm_populate(&self, start: u64, len: u64, ignore_errors: bool) -> Result<(), Errno> {
        self.read_locked(|r| {
            let end = start.saturating_add(len);
            let mut nstart = start;
            while nstart < end {
                let Some(v) = r.find_intersection(nstart, end) else { break };
                let nend = end.min(v.end());
                if !v.fl().intersects(VmFlags::IO | VmFlags::PFNMAP) {
                    let from = nstart.max(v.start());
                    if let Err(e) = r.populate_vma_page_range(v, from, nend)
                        && !ignore_errors
                    {
                        return Err(e);
                    }
                }
                nstart = nend;
            }
            Ok(())
        })
    }
}

impl MmRead<'_> {
    /// `faultin_page_range` (`MADV_POPULATE_READ` / `MADV_POPULATE_WRITE`): see the module docs.
    pub(crate) fn faultin_page_range(&self, start: u64, end: u64, write: bool) -> Result<(), Errno> {
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
            self.gup_range(v, pos, seg_end, write)?;
            pos = seg_end;
        }
        Ok(())
    }
}
