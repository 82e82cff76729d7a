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
//! [`MmWrite::remove_from`], which also uncharges the `VM_LOCKED` pages from `locked_vm`
//! (`vms_complete_munmap_vmas`), zaps the pages of the removed VMAs (guard markers included) and frees their
//! page tables between the neighbours that stay (`vms_clear_ptes`, [`super::pages`]), and gives hugetlb pages
//! and reservations no mapping holds any more back to their pool.

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
    /// `munmap(start, len)`.
    pub fn munmap(&self, start: u64, len: u64) -> Result<(), Errno> {
        self.locked(|mm| mm.do_munmap(start, len, true))
    }
}

impl MmWrite<'_> {
    /// `do_vmi_munmap`; `reserve` is false when the caller already reserved its worst case.
    pub(crate) fn do_munmap(&mut self, start: u64, len: u64, reserve: bool) -> Result<(), Errno> {
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
        self.remove_from(inside, end);
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
    /// range (`vma_iter_clear_gfp`), then each VMA is detached and freed ([`MmWrite::remove_span`]).
    pub(crate) fn remove_range(&mut self, start: u64, end: u64) -> Gathered {
        match self.next_from(start).filter(|v| v.start() < end) {
            Some(inside) => self.remove_from(inside, end),
            None => Gathered::default(),
        }
    }

    /// [`MmWrite::remove_range`] from `inside`, the first VMA of the range, to `end`.
    pub(crate) fn remove_from(&mut self, inside: V, end: u64) -> Gathered {
        let (g, gone) = self.take_out(inside, end, false);
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
        self.take_out(inside, end, true)
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
    /// registrations, their charges); out of the tree too unless `keep_in_tree`, in which case they are
    /// returned, write-locked and unregistered, for [`MmWrite::clear_for_replace`]'s caller.
    fn take_out(&mut self, inside: V, end: u64, keep_in_tree: bool) -> (Gathered, Vec<V>) {
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
        let huge = self.hugetlb_ranges(gone);
        let range = |v: &V| (v.start(), v.end(), vma_has_recency(v.fl()));
        let one_range = [range(&inside)];
        let run_ranges: Vec<(u64, u64, bool)> = run.iter().map(range).collect();
        let ranges: &[(u64, u64, bool)] = if run.is_empty() { &one_range } else { &run_ranges };
        let floor = self.prev_of(inside.start()).map_or(0, |p| p.end());
        let ceiling = self.next_from(last.end()).map_or(0, |n| n.start());
        let kept = if keep_in_tree {
            for &v in gone {
                self.write_lock_vma(v);
                self.i_mmap_unregister(v);
            }
            gone.to_vec()
        } else {
            self.remove_span(gone);
            Vec::new()
        };
        // vms_clear_ptes: the pages and the tables of the range (the VMAs left their files' registries above).
        self.unmap_pages(ranges, floor, ceiling);
        // hugetlb pages and reservations no mapping holds any more go back to the pool.
        self.hugetlb_release(huge);
        debug_assert!(
            self.st.locked_vm >= g.locked,
            "locked_vm {} below the locked pages unmapped",
            self.st.locked_vm
        );
        self.st.locked_vm = self.st.locked_vm.saturating_sub(g.locked);
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
