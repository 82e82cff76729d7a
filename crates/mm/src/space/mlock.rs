//! mlock, mlock2, munlock, mlockall, munlockall (`mm/mlock.c`), and the mlock accounting every other call shares
//! (`mm->locked_vm`, `mm->def_flags`, `mlock_future_ok`).
//!
//! # mlock / mlock2 / munlock (`do_mlock`, `apply_vma_lock_flags`, `mlock_fixup`)
//!
//! 1. mlock2: flags other than `MLOCK_ONFAULT`: EINVAL. mlock and mlock2: no right to lock (`can_do_mlock`:
//!    CAP_IPC_LOCK or a non-zero `RLIMIT_MEMLOCK`): EPERM, before anything else (even for length 0).
//! 2. The range is rounded out to pages: `len = PAGE_ALIGN(len + offset_in_page(start))` (so `len` near
//!    `u64::MAX` wraps to 0: success with nothing done), `start` rounded down.
//! 3. Without CAP_IPC_LOCK, `locked_vm + len` pages must fit `RLIMIT_MEMLOCK`, counting the pages of the range
//!    already locked only once (`count_mm_mlocked_page_nr`); else ENOMEM.
//! 4. `apply_vma_lock_flags`: an end that wraps: EINVAL; empty: success; `start` not inside a VMA: ENOMEM;
//!    then each VMA in order gets `VM_LOCKED` (`| VM_LOCKONFAULT` for `MLOCK_ONFAULT`; munlock: neither)
//!    through `mlock_fixup`, which skips VMAs that cannot be locked (`VM_SPECIAL`, hugetlb, `VM_DROPPABLE`),
//!    merges or splits through `vma_modify_flags` (ENOMEM at `max_map_count`, unlike madvise's EAGAIN), and
//!    charges or uncharges `locked_vm` (a VMA that was locked already is not charged again; the count is the
//!    kernel's `int`). A hole stops the walk with ENOMEM after the VMAs before it changed.
//! 5. mlock then populates the range (`__mm_populate`): a populate error is mapped by
//!    `__mlock_posix_error_return` (EFAULT → ENOMEM, ENOMEM → EAGAIN). The VMAs stay locked: an mlock of a
//!    `PROT_NONE` range, of a file mapping past the end of its file or of a guard region locks it and fails
//!    with ENOMEM (all checked on the live kernel). munlock does not populate.
//!
//! # mlockall / munlockall (`apply_mlockall_flags`)
//!
//! Flags must be non-zero, only `MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT`, and not `MCL_ONFAULT` alone (EINVAL);
//! then the right to lock (EPERM); with `MCL_CURRENT` and without CAP_IPC_LOCK, `total_vm` must fit
//! `RLIMIT_MEMLOCK` (ENOMEM). `def_flags` loses `VM_LOCKED_MASK`; `MCL_FUTURE` sets `VM_LOCKED` (and
//! `VM_LOCKONFAULT` with `MCL_ONFAULT`) there, so later mmap, brk and stacks are locked. `MCL_CURRENT`
//! locks every VMA (`mlock_fixup` over each whole VMA, errors ignored) and populates everything, errors
//! ignored. munlockall is `apply_mlockall_flags(0)`: every VMA and `def_flags` unlocked.
//!
//! # Elsewhere
//!
//! `mlock_future_ok` guards every call that adds locked memory: mmap (EAGAIN), brk (refused), mremap growth
//! (EAGAIN), stack growth (the fault fails). Unmapping uncharges `VM_LOCKED` pages (`munmap::remove_from`);
//! fork starts the child at `locked_vm` 0 with `def_flags & VM_INIT_DEF_MASK` (`space::fork`).

use super::config::PAGE_SHIFT;
use super::tree::{V, VmaExt};
use super::{Errno, MclFlags, MlockFlags, Mm, MmWrite, PAGE_MASK, TASK_SIZE, VmFlags, page_align};

impl Mm {
    /// `mlock(start, len)`.
    pub fn mlock(&self, start: u64, len: u64) -> Result<(), Errno> {
        self.do_mlock(start, len, VmFlags::LOCKED)
    }

    /// `mlock2(start, len, flags)`: `MLOCK_ONFAULT` locks pages only as they are faulted in.
    pub fn mlock2(&self, start: u64, len: u64, flags: MlockFlags) -> Result<(), Errno> {
        if !MlockFlags::ONFAULT.contains(flags) {
            return Err(Errno::EINVAL);
        }
        let mut vm_flags = VmFlags::LOCKED;
        if flags.contains(MlockFlags::ONFAULT) {
            vm_flags |= VmFlags::LOCKONFAULT;
        }
        self.do_mlock(start, len, vm_flags)
    }

    /// `munlock(start, len)`.
    pub fn munlock(&self, start: u64, len: u64) -> Result<(), Errno> {
        let len = page_align(len.wrapping_add(start & !PAGE_MASK));
        let start = start & PAGE_MASK;
        self.locked(|mm| mm.apply_vma_lock_flags(start, len, VmFlags::NONE))
    }

    /// `mlockall(flags)`.
    pub fn mlockall(&self, flags: MclFlags) -> Result<(), Errno> {
        let valid = MclFlags::CURRENT | MclFlags::FUTURE | MclFlags::ONFAULT;
        if flags.is_empty() || !valid.contains(flags) || flags == MclFlags::ONFAULT {
            return Err(Errno::EINVAL);
        }
        if !self.can_do_mlock() {
            return Err(Errno::EPERM);
        }
        let limit = self.cfg.memlock_limit_pages();
        self.locked(|mm| {
            if !flags.contains(MclFlags::CURRENT) || mm.total_vm_locked() <= limit || mm.cfg.cap_ipc_lock {
                mm.apply_mlockall_flags(flags)
            } else {
                Err(Errno::ENOMEM)
            }
        })?;
        if flags.contains(MclFlags::CURRENT) {
            // After mmap_write_unlock: every VMA, errors ignored.
            self.mm_populate(0, TASK_SIZE, true).ok();
        }
        Ok(())
    }

    /// `munlockall()`.
    pub fn munlockall(&self) -> Result<(), Errno> {
        self.locked(|mm| mm.apply_mlockall_flags(MclFlags::empty()))
    }

    /// `can_do_mlock`: CAP_IPC_LOCK, or a non-zero `RLIMIT_MEMLOCK`.
    pub(crate) fn can_do_mlock(&self) -> bool {
        self.cfg.cap_ipc_lock || self.cfg.memlock_rlimit != 0
    }

    /// `vma_supports_mlock`: VMAs that never get `VM_LOCKED` (`VM_SPECIAL`, `VM_DROPPABLE`, hugetlb; DAX, the
    /// gate VMA and secretmem are not modelled).
    pub(crate) fn vma_supports_mlock(v: V) -> bool {
        !v.fl().intersects(VmFlags::SPECIAL | VmFlags::DROPPABLE | VmFlags::HUGETLB)
    }

    /// `do_mlock`.
    fn do_mlock(&self, start: u64, len: u64, flags: VmFlags) -> Result<(), Errno> {
        if !self.can_do_mlock() {
            return Err(Errno::EPERM);
        }
        let len = page_align(len.wrapping_add(start & !PAGE_MASK));
        let start = start & PAGE_MASK;
        let limit = self.cfg.memlock_limit_pages();
        let cap = self.cfg.cap_ipc_lock;
        self.locked(|mm| {
            let mut locked = (len >> PAGE_SHIFT).wrapping_add(mm.st.locked_vm);
            if locked > limit && !cap {
                // The range may cover pages locked already; they are not charged twice.
                locked = locked.wrapping_sub(mm.count_mm_mlocked_page_nr(start, len));
            }
            if locked <= limit || cap {
                mm.apply_vma_lock_flags(start, len, flags)
            } else {
                Err(Errno::ENOMEM)
            }
        })?;
        // After mmap_write_unlock: __mm_populate under the read lock.
        self.mm_populate(start, len, false).map_err(|e| match e {
            // __mlock_posix_error_return.
            Errno::EFAULT => Errno::ENOMEM,
            Errno::ENOMEM => Errno::EAGAIN,
            e => e,
        })
    }
}

impl MmWrite<'_> {
    /// `mlock_future_ok`: `bytes` more of memory with `flags` may be locked (not locked, CAP_IPC_LOCK, or
    /// `locked_vm` plus them within `RLIMIT_MEMLOCK`).
    pub(crate) fn mlock_future_ok(&self, flags: VmFlags, bytes: u64) -> bool {
        if !flags.intersects(VmFlags::LOCKED) || self.cfg.cap_ipc_lock {
            return true;
        }
        (bytes >> PAGE_SHIFT).wrapping_add(self.st.locked_vm) <= self.cfg.memlock_limit_pages()
    }

    /// `count_mm_mlocked_page_nr`: pages of `[start, start + len)` inside `VM_LOCKED` VMAs (the end clamped at
    /// `u64::MAX`), with the kernel's unsigned arithmetic.
    fn count_mm_mlocked_page_nr(&self, start: u64, len: u64) -> u64 {
        let end = start.saturating_add(len);
        let mut count: u64 = 0;
        for v in self.vmas_between(start, end) {
            if v.fl().intersects(VmFlags::LOCKED) {
                if start > v.start() {
                    count = count.wrapping_sub(start - v.start());
                }
                if end < v.end() {
                    count = count.wrapping_add(end - v.start());
                    break;
                }
                count = count.wrapping_add(v.end() - v.start());
            }
        }
        count >> PAGE_SHIFT
    }

    /// `apply_vma_lock_flags`: the walk of mlock and munlock (module docs, step 4).
    fn apply_vma_lock_flags(&mut self, start: u64, len: u64, flags: VmFlags) -> Result<(), Errno> {
        let end = start.wrapping_add(len);
        if end < start {
            return Err(Errno::EINVAL);
        }
        if end == start {
            return Ok(());
        }
        let Some(first) = self.lookup(start) else { return Err(Errno::ENOMEM) };
        // Worst case per VMA: two splits and the stores; reserved before anything changes.
        let n = self.vmas_between(start, end).count() as u64;
        self.reserve(3 * n)?;
        let mut nstart = start;
        let mut tmp = first.start();
        let mut cur = Some(first);
        while let Some(v) = cur {
            if v.start() != tmp {
                return Err(Errno::ENOMEM);
            }
            let newflags = (v.fl() & !VmFlags::LOCKED_MASK) | flags;
            tmp = v.end().min(end);
            tmp = self.mlock_fixup(v, nstart, tmp, newflags)?;
            nstart = tmp;
            cur = if tmp < end { self.next_from(tmp).filter(|n| n.start() < end) } else { None };
        }
        if tmp < end {
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }

    /// `mlock_fixup` for `[start, end)` inside `v`; returns the end of the VMA now covering `start` (where the
    /// walk's iterator stands).
    fn mlock_fixup(&mut self, v: V, start: u64, end: u64, mut newflags: VmFlags) -> Result<u64, Errno> {
        let oldflags = v.fl();
        if newflags == oldflags || !Mm::vma_supports_mlock(v) {
            // Neither locked nor counted.
            return Ok(v.end());
        }
        let name = v.anon_name();
        let t = self.vma_modify_flags(v, start, end, &mut newflags, name.as_ref())?;
        // The kernel counts in an `int`: `nr_pages = (end - start) >> PAGE_SHIFT`, negated for an unlock.
        let nr_pages = ((end - start) >> PAGE_SHIFT) as i32;
        if (end - start) >> PAGE_SHIFT > i32::MAX as u64 {
            self.st.locked_vm_truncated = true;
        }
        let delta: i64 = if !newflags.intersects(VmFlags::LOCKED) {
            -i64::from(nr_pages)
        } else if oldflags.intersects(VmFlags::LOCKED) {
            0
        } else {
            i64::from(nr_pages)
        };
        debug_assert!(
            delta >= 0 || self.st.locked_vm >= delta.unsigned_abs() || self.st.locked_vm_truncated,
            "locked_vm would underflow"
        );
        self.st.locked_vm = self.st.locked_vm.wrapping_add_signed(delta);
        self.set_flags(t, newflags);
        if newflags.intersects(VmFlags::LOCKED) != oldflags.intersects(VmFlags::LOCKED) {
            // mlock_vma_pages_range: the pages already mapped are mlocked or munlocked, between two drains of
            // the CPU's batches (so they are on or off the unevictable list when it returns).
            self.mm.memory().lru_add_drain();
            self.pt().mlock_range(t.start(), t.end(), newflags.intersects(VmFlags::LOCKED));
            self.mm.memory().lru_add_drain();
        }
        Ok(t.end())
    }

    /// `apply_mlockall_flags` (module docs): `def_flags`, then every VMA for `MCL_CURRENT` or munlockall.
    fn apply_mlockall_flags(&mut self, flags: MclFlags) -> Result<(), Errno> {
        // Merges need tree stores only; reserved before anything changes (an injected failure changes nothing).
        self.reserve(1)?;
        self.st.def_flags &= !VmFlags::LOCKED_MASK;
        if flags.contains(MclFlags::FUTURE) {
            self.st.def_flags |= VmFlags::LOCKED;
            if flags.contains(MclFlags::ONFAULT) {
                self.st.def_flags |= VmFlags::LOCKONFAULT;
            }
            if !flags.contains(MclFlags::CURRENT) {
                return Ok(());
            }
        }
        let mut to_add = VmFlags::NONE;
        if flags.contains(MclFlags::CURRENT) {
            to_add |= VmFlags::LOCKED;
            if flags.contains(MclFlags::ONFAULT) {
                to_add |= VmFlags::LOCKONFAULT;
            }
        }
        let mut cur = self.find(0);
        while let Some(v) = cur {
            let newflags = (v.fl() & !VmFlags::LOCKED_MASK) | to_add;
            // Errors ignored, as the kernel does; the walk goes on after the VMA now covering v's range.
            let next_from = self.mlock_fixup(v, v.start(), v.end(), newflags).unwrap_or(v.end());
            cur = self.next_from(next_from);
        }
        Ok(())
    }
}
