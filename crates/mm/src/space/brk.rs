//! brk (`SYSCALL_DEFINE1(brk)` and `do_brk_flags`).
//!
//! The break moves within `[start_brk, ...)`: a request below `start_brk` is refused. Equal page-rounded
//! values just record the new break. Shrinking unmaps `[PAGE_ALIGN(brk), PAGE_ALIGN(old brk))` (refused if
//! no brk VMA lies there, or if a VMA there is sealed: the old break stays, checked on the live kernel). Growing needs the new range to pass the `MAP_FIXED` address checks and to keep a
//! page plus `stack_guard_gap` from the next VMA's start gap; the heap VMA (the VMA ending at the old break,
//! above `start_brk`) is extended when compatible (`vma_merge_new_range` in expand-only mode: never with the
//! next VMA), otherwise a new VMA `rw-` + `VM_ACCOUNT` (plus `mm->def_flags`) is created. brk never fails
//! with an errno: a refused request returns the old break.
//!
//! After `mlockall(MCL_FUTURE)` the new part is locked: growth must pass `mlock_future_ok` (`check_brk_limits`),
//! is charged to `locked_vm` (`do_brk_flags`), and is populated afterwards (`mm_populate`, a write fault that
//! gives the heap an anon_vma; nothing with `MCL_ONFAULT`). Shrinking uncharges through the unmap.

use vmspace_rcu::sync::Ordering;

use super::VmFlags;
use super::merge::VmaMergeStruct;
use super::tree::NewVma;
use super::{AnonState, Errno, Mm, MmWrite, PAGE_SIZE, config::PAGE_SHIFT, page_align};

impl Mm {
    /// `brk(brk)`: returns the resulting break.
    pub fn brk(&self, brk: u64) -> u64 {
        let (now, populate) = self.locked(|mm| {
            let origbrk = mm.st.brk;
            match mm.try_brk(brk) {
                Ok(populate) => (mm.st.brk, populate),
                Err(_) => {
                    mm.set_brk(origbrk);
                    (origbrk, None)
                }
            }
        });
        // After mmap_write_unlock: a locked extension is populated (`mm_populate`, errors ignored).
        if let Some((start, len)) = populate {
            self.mm_populate(start, len, true).ok();
        }
        now
    }
}

impl MmWrite<'_> {
    /// Moves the break: `mm->brk`, and its racy copy for the readers that hold no mmap lock.
    pub(super) fn set_brk(&mut self, brk: u64) {
        self.st.brk = brk;
        // Relaxed: read racily by `Mm::brk_pair_racy`, as the kernel reads `mm->brk` in
        // `vma_is_initial_heap`; the mmap write lock orders the writers.
        self.mm.brk_racy.brk.store(brk, Ordering::Relaxed);
    }

    /// The locked part of brk; `Ok` with the range to populate afterwards, if any.
    fn try_brk(&mut self, brk: u64) -> Result<Option<(u64, u64)>, Errno> {
        if brk < self.st.start_brk {
            return Err(Errno::EINVAL);
        }
        let newbrk = page_align(brk);
        let oldbrk = page_align(self.st.brk);
        if oldbrk == newbrk {
            self.set_brk(brk);
            return Ok(None);
        }
        if brk <= self.st.brk {
            // Always allow shrinking.
            match self.find_intersection(newbrk, oldbrk) {
                Some(v) if v.start() < oldbrk => {}
                _ => return Err(Errno::EINVAL),
            }
            self.reserve(3)?;
            self.set_brk(brk);
            self.gather_split(newbrk, oldbrk)?;
            // `do_vmi_align_munmap(.., unlock = true)`: the page tables are cleared after the downgrade
            // (module `munmap`), which is why the break moved first.
            self.remove_range(newbrk, oldbrk, true);
            return Ok(None);
        }
        // check_brk_limits: get_unmapped_area(NULL, oldbrk, len, 0, MAP_FIXED), then the mlock limit for
        // def_flags. A break within a page of 2^64 rounds up to 0, and the length wraps to more than TASK_SIZE:
        // ENOMEM, as in C.
        self.get_unmapped_area(None, oldbrk, newbrk.wrapping_sub(oldbrk), 0, super::MapFlags::FIXED)?;
        if !self.mlock_future_ok(self.st.def_flags, newbrk - oldbrk) {
            return Err(Errno::EAGAIN);
        }
        let guard_end = newbrk.saturating_add(PAGE_SIZE).saturating_add(self.cfg.stack_guard_gap);
        if let Some(next) = self.find_intersection(oldbrk, guard_end)
            && newbrk + PAGE_SIZE > self.vm_start_gap(next)
        {
            return Err(Errno::ENOMEM);
        }
        // do_brk_flags.
        let len = newbrk - oldbrk;
        let flags = VmFlags::READ
            | VmFlags::WRITE
            | VmFlags::MAYREAD
            | VmFlags::MAYWRITE
            | VmFlags::MAYEXEC
            | VmFlags::ACCOUNT
            | self.st.def_flags;
        if self.st.map_count > self.cfg.max_map_count {
            return Err(Errno::ENOMEM);
        }
        self.enough_memory(len >> PAGE_SHIFT)?;
        self.reserve(2)?;
        let start_brk = self.st.start_brk;
        let brkvma = self.prev_of(oldbrk).filter(|v| v.start() >= start_brk).map(|v| (v.start(), v.end()));
        let none = AnonState::default();
        if let Some((_, e)) = brkvma
            && e == oldbrk
        {
            let mut vmg =
                VmaMergeStruct::new_range(oldbrk, newbrk, flags, oldbrk >> PAGE_SHIFT, None, &none, None);
            vmg.just_expand = true;
            if self.vma_merge_new_range(&mut vmg).is_some() {
                return Ok(self.brk_grown(brk, oldbrk, newbrk, flags));
            }
        }
        self.insert_new(NewVma {
            start: oldbrk,
            end: newbrk,
            flags,
            pgoff: oldbrk >> PAGE_SHIFT,
            file: None,
            anon: AnonState::EMPTY,
            name: None,
        });
        Ok(self.brk_grown(brk, oldbrk, newbrk, flags))
    }

    /// The end of a successful brk growth: `do_brk_flags` charges a locked extension to `locked_vm`, the break
    /// moves, and with `VM_LOCKED` in `def_flags` the new part is to be populated once the lock is dropped
    /// (the range returned).
    fn brk_grown(&mut self, brk: u64, oldbrk: u64, newbrk: u64, flags: VmFlags) -> Option<(u64, u64)> {
        if flags.intersects(VmFlags::LOCKED) {
            self.st.locked_vm += (newbrk - oldbrk) >> PAGE_SHIFT;
        }
        self.set_brk(brk);
        self.st.def_flags.intersects(VmFlags::LOCKED).then_some((oldbrk, newbrk - oldbrk))
    }
}
