//! munmap (`mm/vma.c: do_vmi_munmap` → `do_vmi_align_munmap`).
//!
//! Arguments: `EINVAL` for an unaligned start, a start beyond `TASK_SIZE`, a length reaching past it, or a
//! length that rounds to zero. A range with no VMA succeeds without change. Otherwise the VMAs in the range
//! are gathered (`vms_gather_munmap_vmas`): the first is split at `start` if it begins below it (refused with
//! ENOMEM when the range lies strictly inside one VMA and `map_count >= max_map_count`: unmapping would add a
//! VMA; with EPERM when it is sealed; a hugetlb VMA splits only at a huge page boundary, EINVAL otherwise);
//! then each VMA of the range is checked for a seal (EPERM, keeping the split already made) and the last is
//! split at `end` if it extends past it; then every VMA in the range is removed. munmap never merges. Every
//! unmap (munmap, a `MAP_FIXED` mapping over old ones, brk shrinking, mremap) goes through
//! [`MmWrite::remove_from`] (or, for `MAP_FIXED`, [`MmWrite::clear_for_replace`]), which also uncharges the
//! `VM_LOCKED` pages from `locked_vm` (`vms_complete_munmap_vmas`), zaps the pages of the removed VMAs (guard
//! markers included) and frees their page tables between the neighbours that stay (`vms_clear_ptes`,
//! [`super::pages`]), and gives hugetlb pages and reservations no mapping holds any more back to their pool.
//!
//! # What runs under which lock
//!
//! As in Linux 6.18, the unmaps that are the last change of their call clear their page tables under the read
//! hold of a downgraded mmap lock; the others under the write lock:
//!
//! | step | lock | kernel |
//! |---|---|---|
//! | argument checks, splits, seal checks, `max_map_count`, reservation | mmap write lock | `do_vmi_munmap`, `vms_gather_munmap_vmas` |
//! | each VMA of the range write-locked, the range cleared in the tree by one store, each VMA unregistered from its file, detached and freed; `map_count`, `locked_vm` lowered | mmap write lock (and the VMAs' write locks) | `vms_gather_munmap_vmas`, `vma_iter_clear_gfp`, `vms_complete_munmap_vmas` before its downgrade |
//! | `mmap_write_downgrade`: `mm_lock_seq` advances, so every VMA write lock of the call ends at once | | `vms_complete_munmap_vmas` with `vms->unlock` |
//! | zap of the removed ranges, `free_pgd_range` between the neighbours that stay, hugetlb pages given back | mmap read hold ([`Mm::clear_ptes`]) | `vms_clear_ptes` (`unmap_vmas`, `free_pgtables`), `remove_vma` |
//!
//! The downgrade is taken by `munmap` (`__vm_munmap(.., unlock = true)`), brk shrinking (`SYSCALL_DEFINE1(brk)`:
//! `do_vmi_align_munmap(.., unlock = true)`, after `mm->brk` moved) and mremap shrinking in place
//! (`shrink_vma(vrm, drop_lock = true)`, then `vrm->mmap_locked = false`): [`MmWrite::do_munmap`] and
//! [`MmWrite::remove_range`] with `unlock` queue the page-level work ([`ClearPtes`]) in the call's
//! [`MmWrite::pending`], which [`Mm::locked`] runs after the downgrade, so nothing may change the address
//! space after it in that call. A `MAP_FIXED` mapping over old ones, mremap's unmap of the destination, of the
//! tail before a move and of the old range after one clear under the write lock (`unlock == false`: the call
//! goes on in the range).
//!
//! Why the page-level work is safe under the read hold, beside faults in the neighbours (under their VMA read
//! locks, which the downgrade let in again, or under the mmap read lock), `MADV_DONTNEED` / `FREE` in them
//! (which zap and reclaim empty PTE tables under the same locks) and every other reader of the mmap lock:
//! - no VMA covers the range any more and none can until the read hold ends (a new mapping, a stack growing
//!   into it and every other change of a VMA need the write lock), so no fault, advice or walk of a VMA
//!   reaches the range: a fault there finds no VMA (SIGSEGV, as the kernel's does meanwhile), and a
//!   speculative fault that copied a removed VMA before it left fails its validation under the PTE lock (the
//!   VMA's write count moved at `vma_start_write` and it is detached, `copy_still_valid`);
//! - the page tables the range shares with a neighbour are kept: `free_pgd_range` frees a PTE table only when
//!   its whole 2 MiB span lies between the neighbours' bounds (`floor`, `ceiling`, computed under the write
//!   lock), an upper table only when its whole span does, exactly `free_pgtables`' rule; a neighbour's fault
//!   may link tables only in spans outside those bounds, and `MADV_DONTNEED` reclaims only a PTE table whose
//!   whole span its own VMA covers;
//! - the zap changes entries only under their PTE locks, as a zap beside faults in the same table always
//!   does, and frames and tables go back to the memory a grace period after they were unlinked (the page
//!   table's gathers);
//! - nothing of the removed VMAs is read after they were freed: [`ClearPtes`] holds their ranges and recency,
//!   the bounds and the hugetlb ranges, taken under the write lock.
//!
//! So a thread faulting in the part of a merged VMA that stays waits for another thread's unmap of the other
//! part only for its VMA changes, not for its zap (`crates/mm/tests/unmap_downgrade.rs` parks an unmap
//! before its zap with the `testing` hook `set_downgraded_unmap_hook` and shows the neighbour's fault
//! completing).

use vmspace_pgtable::vma_has_recency;

use super::VmFlags;
use super::tree::{V, VmaExt};
use super::{Errno, Mm, MmWrite, PAGE_MASK, TASK_SIZE, page_align};

/// What a gather found: VMAs removed and their accounted pages.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Gathered {
    /// Pages unmapped.
    pub pages: u64,
    /// Pages of VM_ACCOUNT VMAs unmapped.
    pub accounted: u64,
    /// Pages of VM_LOCKED VMAs unmapped (uncharged from `locked_vm`).
    pub locked: u64,
}

impl Mm {
    /// `munmap(start, len)` (`__vm_munmap(start, len, unlock = true)`: the page tables are cleared under the
    /// downgraded lock, module docs).
    pub fn munmap(&self, start: u64, len: u64) -> Result<(), Errno> {
        self.locked(|mm| mm.do_munmap(start, len, true, true))
    }
}

/// How [`MmWrite::take_out`] deals with the pages and tables of the VMAs it takes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clear {
    /// `vms_clear_ptes` at once, under the write lock (`unlock == false`: the call goes on with the range).
    Now,
    /// After the call, under the read hold its downgrade leaves (`unlock == true`): queued in
    /// [`MmWrite::pending`] for [`Mm::locked`].
    Downgraded,
    /// Now, with the VMAs kept in the tree ([`MmWrite::clear_for_replace`]).
    KeepInTree,
}

/// The page-level work left of an unmap once its VMAs are out of the tree (`vms_clear_ptes` and what
/// `remove_vma` gives back): the removed ranges, the neighbours' bounds, the hugetlb ranges. It reads nothing
/// of the removed VMAs (they may be freed and reused already), so it can run after the write lock is gone.
pub(crate) struct ClearPtes {
    /// The only range when `run` is empty (no allocation for the common single VMA).
    one: (u64, u64, bool),
    /// The ranges of a run of VMAs (address order, each with its VMA's recency, `vma_has_recency`).
    run: Vec<(u64, u64, bool)>,
    /// The end of the VMA below (0 if none).
    floor: u64,
    /// The start of the VMA above (0 if none).
    ceiling: u64,
    /// The removed hugetlb ranges ([`Mm::hugetlb_release`]).
    huge: Vec<super::hugetlb::HugeRange>,
}

impl ClearPtes {
    fn ranges(&self) -> &[(u64, u64, bool)] {
        if self.run.is_empty() { std::slice::from_ref(&self.one) } else { &self.run }
    }
}

impl Mm {
    /// `vms_clear_ptes` and the rest of `vms_complete_munmap_vmas` for VMAs already out of the tree and their
    /// files' registries: zap the ranges, free the page tables between the neighbours that stay, give back
    /// the hugetlb pages and reservations no mapping holds any more. Under the mmap write lock, or under the
    /// read hold its downgrade left (module docs: why that is safe beside faults and `MADV_DONTNEED` in the
    /// neighbours).
    pub(crate) fn clear_ptes(&self, c: ClearPtes) {
        self.unmap_pages(c.ranges(), c.floor, c.ceiling);
        self.hugetlb_release(c.huge);
    }
}

/// The test hook of the downgraded unmaps (`testing` feature, not under loom), per thread.
#[cfg(all(feature = "testing", not(loom)))]
type DowngradedHook = std::cell::RefCell<Option<Box<dyn FnMut()>>>;

#[cfg(all(feature = "testing", not(loom)))]
thread_local! {
    static DOWNGRADED_HOOK: DowngradedHook = const { std::cell::RefCell::new(None) };
}

/// Test hook (`testing` feature): from now on, every unmap this thread makes whose page tables are cleared
/// under the downgraded mmap lock (`munmap`, brk shrinking, mremap shrinking in place) calls `hook` after the
/// downgrade and before the zap; `None` removes it. A test parks the unmap there to show what runs beside it
/// (faults in the neighbours, readers under the mmap read lock) and what does not (writers).
#[cfg(all(feature = "testing", not(loom)))]
pub fn set_downgraded_unmap_hook(hook: Option<Box<dyn FnMut()>>) {
    DOWNGRADED_HOOK.with(|h| *h.borrow_mut() = hook);
}

/// Runs this thread's [`set_downgraded_unmap_hook`] hook, if any.
#[inline]
pub(crate) fn downgraded_unmap_hook() {
    #[cfg(all(feature = "testing", not(loom)))]
    DOWNGRADED_HOOK.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f();
        }
    });
}

impl MmWrite<'_> {
    /// `do_vmi_munmap`; `reserve` is false when the caller already reserved its worst case; `unlock` (the
    /// kernel's argument of that name) when the unmap is the call's last change and its page tables are to be
    /// cleared after the downgrade (munmap, mremap shrinking in place): then the call must change nothing after
    /// it (the range's pages are still there until [`Mm::locked`] clears them).
    pub(crate) fn do_munmap(
        &mut self,
        start: u64,
        len: u64,
        reserve: bool,
        unlock: bool,
    ) -> Result<(), Errno> {
        if start & !PAGE_MASK != 0 || start > TASK_SIZE || len > TASK_SIZE - start {
            return Err(Errno::EINVAL);
        }
        let end = start + page_align(len);
        if end == start {
            return Err(Errno::EINVAL);
        }
        let Some(first) = self.find_intersection(start, end) else { return Ok(()) };
        if reserve {
            // Worst case: two split VMAs and the tree store.
            self.reserve(3)?;
        }
        let inside = self.gather_split_from(first, start, end)?;
        self.remove_from(inside, end, unlock);
        Ok(())
    }

    /// `vms_gather_munmap_vmas`' splits: after it, no VMA straddles `start` or `end`.
    pub(crate) fn gather_split(&mut self, start: u64, end: u64) -> Result<(), Errno> {
        match self.find_intersection(start, end) {
            Some(first) => self.gather_split_from(first, start, end).map(|_| ()),
            None => Ok(()),
        }
    }

    /// [`MmWrite::gather_split`] given the first VMA intersecting the range; returns the first VMA inside it after
    /// the splits.
    pub(crate) fn gather_split_from(&mut self, first: V, start: u64, end: u64) -> Result<V, Errno> {
        let (fs, fe) = (first.start(), first.end());
        let inside = first;
        if fs < start {
            if end < fe && self.st.map_count >= self.cfg.max_map_count {
                return Err(Errno::ENOMEM);
            }
            // Don't split a VMA that cannot be unmapped anyway.
            if super::mseal::vma_is_sealed(first) {
                return Err(Errno::EPERM);
            }
            // `__split_vma(vma, start, new_below = 1)`: the part that stays mapped is the new VMA.
            self.__split_vma(first, start, true)?;
        }
        // Each VMA of the range in turn: a sealed one stops the gather (the split above stays).
        if self.any_sealed_in(start, end) {
            return Err(Errno::EPERM);
        }
        // The VMA holding `end - 1`: the first one inside when it reaches that far (no walk), else the last
        // one starting below `end`.
        let last = if inside.end() >= end { Some(inside) } else { self.prev_of(end) };
        if let Some(last) = last
            && last.end() > end
            && last.start() < end
        {
            self.__split_vma(last, end, false)?;
        }
        Ok(inside)
    }

    /// Detaches and frees every VMA inside `[start, end)` (which no VMA straddles): one tree store clears the
    /// range (`vma_iter_clear_gfp`), then each VMA is detached and freed ([`MmWrite::remove_span`]); the pages
    /// are cleared now, or after the downgrade with `unlock` ([`MmWrite::do_munmap`]).
    pub(crate) fn remove_range(&mut self, start: u64, end: u64, unlock: bool) -> Gathered {
        match self.next_from(start).filter(|v| v.start() < end) {
            Some(inside) => self.remove_from(inside, end, unlock),
            None => Gathered::default(),
        }
    }

    /// [`MmWrite::remove_range`] from `inside`, the first VMA of the range, to `end`.
    pub(crate) fn remove_from(&mut self, inside: V, end: u64, unlock: bool) -> Gathered {
        let (g, gone) = self.take_out(inside, end, if unlock { Clear::Downgraded } else { Clear::Now });
        debug_assert!(gone.is_empty());
        g
    }

    /// The munmap half of a `MAP_FIXED` mapping over `[inside.start(), end)` (`mm/vma.c: __mmap_region`:
    /// `vms_gather_munmap_vmas`, `vms_clean_up_area`): the VMAs of the range are write-locked, leave their
    /// files' registries and lose their pages and tables, but stay in the tree until the new mapping's store
    /// overwrites their range, so that a reader walking the tree under RCU never sees a gap where memory stays
    /// mapped: it finds the old VMAs write-locked, falls back to (or, lockless, retries until) the end of the
    /// call, and sees the new one. The caller then stores the new VMA (or a merge) over the range and hands the
    /// returned VMAs to [`MmWrite::free_replaced`], or, if the mapping fails after all, to
    /// [`MmWrite::abort_replace`].
    pub(crate) fn clear_for_replace(&mut self, inside: V, end: u64) -> (Gathered, Vec<V>) {
        self.take_out(inside, end, Clear::KeepInTree)
    }

    /// Detaches and frees the VMAs [`MmWrite::clear_for_replace`] left in the tree, once a new store has taken
    /// their whole range over (`vms_complete_munmap_vmas`).
    pub(crate) fn free_replaced(&mut self, gone: Vec<V>) {
        for v in gone {
            self.free_detached(v);
        }
    }

    /// A mapping failed after [`MmWrite::clear_for_replace`] (its file's mmap hook refused it): the range, whose
    /// pages are gone already, becomes a hole (`vms_abort_munmap_vmas` once the PTEs were cleared).
    pub(crate) fn abort_replace(&mut self, gone: Vec<V>) {
        let (Some(first), Some(last)) = (gone.first(), gone.last()) else { return };
        self.unpublish_range(first.start(), last.end());
        self.free_replaced(gone);
    }

    /// Takes the VMAs from `inside` up to `end` out of the address space (their pages and tables, their file
    /// registrations, their charges); out of the tree too unless `clear` is [`Clear::KeepInTree`], in which
    /// case they are returned, write-locked and unregistered, for [`MmWrite::clear_for_replace`]'s caller.
    /// Everything that needs the write lock (`map_count`, `locked_vm`, the tree) is done here; the page-level
    /// work ([`ClearPtes`]) runs here too, or, with [`Clear::Downgraded`], is queued for [`Mm::locked`] to run
    /// after the downgrade (`vms_complete_munmap_vmas`).
    fn take_out(&mut self, inside: V, end: u64, clear: Clear) -> (Gathered, Vec<V>) {
        debug_assert!(
            self.pending.is_none(),
            "a change after an unmap whose pages are cleared after the call"
        );
        // The common single VMA stays on the stack (no allocation per call); a run goes to a vector.
        let one = [inside];
        let mut run: Vec<V> = Vec::new();
        let mut last = inside;
        while last.end() < end {
            match self.next_from(last.end()) {
                Some(n) if n.start() < end => {
                    if run.is_empty() {
                        run.push(inside);
                    }
                    run.push(n);
                    last = n;
                }
                _ => break,
            }
        }
        let gone: &[V] = if run.is_empty() { &one } else { &run };
        let mut g = Gathered::default();
        for v in gone {
            debug_assert!(v.end() <= end);
            g.pages += v.pages();
            if v.fl().intersects(VmFlags::ACCOUNT) {
                g.accounted += v.pages();
            }
            if v.fl().intersects(VmFlags::LOCKED) {
                g.locked += v.pages();
            }
        }
        let range = |v: &V| (v.start(), v.end(), vma_has_recency(v.fl()));
        let ptes = ClearPtes {
            one: range(&inside),
            run: run.iter().map(range).collect(),
            floor: self.prev_of(inside.start()).map_or(0, |p| p.end()),
            ceiling: self.next_from(last.end()).map_or(0, |n| n.start()),
            huge: self.hugetlb_ranges(gone),
        };
        let kept = if clear == Clear::KeepInTree {
            for &v in gone {
                self.write_lock_vma(v);
                self.i_mmap_unregister(v);
            }
            gone.to_vec()
        } else {
            // Write-locked, out of the tree (one store), out of their files' registries, detached and freed;
            // `map_count` drops with each (`vms_complete_munmap_vmas` before its downgrade).
            self.remove_span(gone);
            Vec::new()
        };
        // `locked_vm` too before any downgrade, as the kernel does.
        debug_assert!(
            self.st.locked_vm >= g.locked,
            "locked_vm {} below the locked pages unmapped",
            self.st.locked_vm
        );
        self.st.locked_vm = self.st.locked_vm.saturating_sub(g.locked);
        if clear == Clear::Downgraded {
            self.pending = Some(ptes);
        } else {
            // vms_clear_ptes: the pages and the tables of the range (the VMAs left their files' registries
            // above), then the hugetlb pages and reservations no mapping holds any more.
            self.clear_ptes(ptes);
        }
        (g, kept)
    }

    /// Pages of VM_ACCOUNT VMAs inside `[start, end)` after [`MmWrite::gather_split`].
    pub(crate) fn accounted_in(&self, start: u64, end: u64) -> (u64, u64) {
        let mut pages = 0;
        let mut acc = 0;
        for v in self.vmas_between(start, end) {
            pages += v.pages();
            if v.fl().intersects(VmFlags::ACCOUNT) {
                acc += v.pages();
            }
        }
        (pages, acc)
    }
}
