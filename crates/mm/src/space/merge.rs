//! VMA merging (`mm/vma.c`: `vma_merge_new_range`, `vma_merge_existing_range`, `vma_modify`).
//!
//! # Mergeability
//!
//! The state of one merge attempt is a [`VmaMergeStruct`] (the kernel's `vma_merge_struct`, `vmg`): the
//! neighbours (`prev`, `middle`, `next`), the proposed range and the attributes it would have. The range can
//! join a neighbour when: flags are identical but for `VM_IGNORE_MERGE`
//! (`VM_SOFTDIRTY` and the sticky flags), the file
//! is the same object, the anonymous names are equal, the page offsets continue linearly across the boundary,
//! the two touch, and the anon_vmas are compatible (`is_mergeable_anon_vma`):
//!
//! 1. neighbour without anon_vma, range with one: allowed unless the range's source VMA (or the VMA an mremap
//!    copies from) is a fork child's (`vma_had_uncowed_parents`): the neighbour will adopt the anon_vma;
//! 2. neighbour with one, range without: allowed unless the neighbour is a fork child's;
//! 3. both: the same anon_vma.
//!
//! Merging with both neighbours additionally needs the two neighbours' anon_vmas to be compatible with each
//! other. `VM_SPECIAL` VMAs never merge. (`can_merge_remove_vma` always holds: no modelled VMA has a `close`
//! operation.)
//!
//! # Sticky flags
//!
//! `VM_STICKY` flags (`VM_MAYBE_GUARD`, and `VM_SOFTDIRTY` where configured) do not prevent a merge, and the
//! merged VMA gets every sticky flag any of its parts had (the range's, the target's, and a removed
//! neighbour's: `vma_expand`, `vma_merge_existing_range`), so a guard region's `VM_MAYBE_GUARD` survives the
//! merge. [`MmWrite::vma_modify_flags`] then hands the merged flags back to the caller, which sets them (the
//! `vm_flags_ptr` of the kernel's `vma_modify_flags`).
//!
//! # New ranges (mmap, brk, mremap targets)
//!
//! ```text
//!   merge left        merge right        merge both
//! |prev|new|        |new|next|        |prev|new|next|
//! |prev----|        |--------next|    |prev---------|
//! ```
//!
//! # Existing ranges (mprotect, madvise, names: a change of `[start, end)` inside `middle`)
//!
//! Only a range touching one of middle's edges can merge; otherwise the caller splits (`vma_modify`).
//!
//! ```text
//!   merge both              merge left (full/partial)     merge right (full/partial)
//! |prev|middle|next|      |prev|middle|   |prev|mid.de|  |middle|next|  |midd|le.next|
//! |prev-----------|       |prev-------|   |prev----|de|  |-------next|  |midd|---next|
//! ```

use std::sync::Arc;

use super::VmFlags;
use super::tree::{V, VmaExt};
use super::{AnonState, Errno, MmWrite, VmFile, config::PAGE_SHIFT};

/// One merge attempt (the kernel's `vma_merge_struct`): the neighbours and the proposed range with the
/// attributes that decide a merge. For a new range ([`MmWrite::vma_merge_new_range`]) `middle` is `None` and
/// `prev`/`next` are found by the merge; for an existing range ([`MmWrite::vma_merge_existing_range`])
/// `middle` is the VMA that holds `[start, end)`.
pub(crate) struct VmaMergeStruct<'a> {
    /// The VMA before the range (`vmg->prev`), once looked up.
    pub prev: Option<V>,
    /// The VMA the range lies in (`vmg->middle`; existing-range merges only).
    pub middle: Option<V>,
    /// The VMA after the range (`vmg->next`), once looked up.
    pub next: Option<V>,
    /// The range's start (`vmg->start`).
    pub start: u64,
    /// The range's end (`vmg->end`).
    pub end: u64,
    /// The range's page offset (`vmg->pgoff`).
    pub pgoff: u64,
    /// The range's flags (`vmg->vm_flags`).
    pub flags: VmFlags,
    /// The range's file (`vmg->file`).
    pub file: Option<&'a Arc<VmFile>>,
    /// The range's anon_vma state (`vmg->anon_vma`).
    pub anon_vma: &'a AnonState,
    /// The range's anonymous name (`vmg->anon_name`).
    pub anon_name: Option<&'a Arc<str>>,
    /// brk's expansion: never merge with `next` (`vmg->just_expand`).
    pub just_expand: bool,
    /// The VMA an mremap copies from is a fork child's (`vmg->copied_from`, `vma_had_uncowed_parents`).
    pub copied_from_uncowed: bool,
}

impl<'a> VmaMergeStruct<'a> {
    /// `VMG_STATE`: a proposed new range (neighbours unknown yet).
    pub(crate) fn new_range(
        start: u64,
        end: u64,
        flags: VmFlags,
        pgoff: u64,
        file: Option<&'a Arc<VmFile>>,
        anon_vma: &'a AnonState,
        anon_name: Option<&'a Arc<str>>,
    ) -> Self {
        VmaMergeStruct {
            prev: None,
            middle: None,
            next: None,
            start,
            end,
            pgoff,
            flags,
            file,
            anon_vma,
            anon_name,
            just_expand: false,
            copied_from_uncowed: false,
        }
    }

    fn pages(&self) -> u64 {
        (self.end - self.start) >> PAGE_SHIFT
    }

    /// The range's source VMA (`vmg->middle`) is a fork child's (an existing range's `anon_vma` is middle's).
    fn middle_uncowed(&self) -> bool {
        self.middle.is_some() && self.anon_vma.had_uncowed_parents()
    }
}

/// `is_mergeable_vma`: the neighbour on the merge's side (`next` with `merge_next`, else `prev`) has the
/// range's flags (but for `VM_IGNORE_MERGE`), file and anonymous name.
fn is_mergeable_vma(vmg: &VmaMergeStruct<'_>, merge_next: bool) -> bool {
    let Some(t) = (if merge_next { vmg.next } else { vmg.prev }) else { return false };
    ((t.fl() ^ vmg.flags) & !VmFlags::IGNORE_MERGE).is_empty()
        && t.file_is(vmg.file)
        && t.name_is(vmg.anon_name)
}

/// `is_mergeable_anon_vma` between the neighbour on the merge's side and the range (module docs).
fn is_mergeable_anon_vma(vmg: &VmaMergeStruct<'_>, merge_next: bool) -> bool {
    let Some(t) = (if merge_next { vmg.next } else { vmg.prev }) else { return false };
    let st = t.anon();
    match (st.is_some(), vmg.anon_vma.is_some()) {
        (false, true) => !vmg.middle_uncowed() && !vmg.copied_from_uncowed,
        (true, false) => !st.had_uncowed_parents(),
        _ => st.same_anon(vmg.anon_vma),
    }
}

/// `can_vma_merge_after`: the range can join `prev` on its right (its page offsets continue prev's).
fn can_vma_merge_after(vmg: &VmaMergeStruct<'_>) -> bool {
    let Some(prev) = vmg.prev else { return false };
    is_mergeable_vma(vmg, false)
        && is_mergeable_anon_vma(vmg, false)
        && prev.pgoff().wrapping_add(prev.pages()) == vmg.pgoff
}

/// `can_vma_merge_before`: the range can join `next` on its left (next's page offsets continue the range's).
fn can_vma_merge_before(vmg: &VmaMergeStruct<'_>) -> bool {
    let Some(next) = vmg.next else { return false };
    is_mergeable_vma(vmg, true)
        && is_mergeable_anon_vma(vmg, true)
        && next.pgoff() == vmg.pgoff.wrapping_add(vmg.pages())
}

/// `can_vma_merge_left`: `prev` touches the range and can take it.
fn can_vma_merge_left(vmg: &VmaMergeStruct<'_>) -> bool {
    vmg.prev.is_some_and(|p| p.end() == vmg.start) && can_vma_merge_after(vmg)
}

/// `can_vma_merge_right`: `next` touches the range and can take it; when prev merges too, the two
/// neighbours' anon_vmas must also be compatible with each other.
fn can_vma_merge_right(vmg: &VmaMergeStruct<'_>, can_merge_left: bool) -> bool {
    let Some(n) = vmg.next else { return false };
    if n.start() != vmg.end || !can_vma_merge_before(vmg) {
        return false;
    }
    if !can_merge_left {
        return true;
    }
    let p = vmg.prev.expect("a left merge has prev");
    let (pa, na) = (p.anon(), n.anon());
    !pa.is_some() || !na.is_some() || pa.same_anon(&na)
}

impl MmWrite<'_> {
    /// `vma_merge_new_range`: tries to map the empty range of `vmg` by growing a neighbour over it (`prev`
    /// is the VMA before `vmg.start`, `next` the first at or after `vmg.end`; `vmg.just_expand` (brk) never
    /// merges with next). On a merge, the target grows (`vma_expand`) and is returned, with the range's
    /// anon_vma and sticky flags; `None` changes nothing.
    pub(crate) fn vma_merge_new_range(&mut self, vmg: &mut VmaMergeStruct<'_>) -> Option<V> {
        if vmg.flags.intersects(VmFlags::SPECIAL) {
            return None;
        }
        // The range is free, so one tree position gives both neighbours; or (`MAP_FIXED`) it still holds the
        // write-locked VMAs the new mapping replaces (`MmWrite::clear_for_replace`), and the neighbours are the
        // VMAs around it.
        let (prev, next) = match self.lookup(vmg.start) {
            None => match self.gap_neighbours(vmg.start) {
                // Part of the range still holds a VMA being replaced: the next neighbour lies beyond the end.
                (p, Some(n)) if n.start() < vmg.end => (p, self.next_from(vmg.end)),
                pn => pn,
            },
            Some(_) => (self.prev_of(vmg.start), self.next_from(vmg.end)),
        };
        vmg.prev = prev;
        vmg.next = next;
        if prev.is_none() && next.is_none() {
            return None;
        }
        let left = can_vma_merge_left(vmg);
        let right = !vmg.just_expand && can_vma_merge_right(vmg, left);
        if !left && !right {
            return None;
        }
        if !left {
            // Only next merges: it expands backwards over the range.
            vmg.prev = None;
        }
        if !right {
            vmg.next = None;
        }
        Some(self.vma_expand(vmg))
    }

    /// `vma_expand` for a new range: the target (`prev` if set, else `next`) grows over the range (and over
    /// `next`, which leaves, when both merge); a target without anon_vma adopts the removed next's, else the
    /// range's (`dup_anon_vma`); the target gets the sticky flags of the range, its own and the removed
    /// next's. Returns the target.
    fn vma_expand(&mut self, vmg: &VmaMergeStruct<'_>) -> V {
        let sticky = vmg.flags & VmFlags::STICKY;
        let target = match (vmg.prev, vmg.next) {
            (Some(p), None) => {
                self.set_end(p, vmg.end);
                self.adopt_anon(p, vmg.anon_vma);
                p
            }
            (None, Some(n)) => {
                self.set_range(n, vmg.start, n.end(), vmg.pgoff);
                self.adopt_anon(n, vmg.anon_vma);
                n
            }
            (Some(p), Some(n)) => {
                let next_anon = n.anon().clone();
                let next_sticky = n.fl() & VmFlags::STICKY;
                // prev's store covers the range and next; next then leaves.
                self.set_end(p, n.end());
                self.remove(n);
                if next_anon.is_some() {
                    self.adopt_anon(p, &next_anon);
                } else {
                    self.adopt_anon(p, vmg.anon_vma);
                }
                self.add_sticky(p, next_sticky);
                p
            }
            (None, None) => unreachable!("vma_expand without a neighbour"),
        };
        self.add_sticky(target, sticky);
        target
    }

    /// `vm_flags_set(target, sticky_flags)` after a merge.
    fn add_sticky(&mut self, target: V, sticky: VmFlags) {
        let fl = target.fl();
        if !fl.contains(sticky) {
            self.set_flags(target, fl | sticky);
        }
    }

    /// `dup_anon_vma`: a merge target without anon_vma takes `src`'s (if any).
    fn adopt_anon(&mut self, t: V, src: &AnonState) {
        if src.is_some() && !t.anon().is_some() {
            self.set_anon(t, src.clone());
        }
    }

    /// `vma_merge_existing_range`: tries to give `[vmg.start, vmg.end)` (inside `vmg.middle`) the attributes
    /// `vmg.flags` / `vmg.anon_name` by merging with middle's neighbours. Returns the VMA now covering the
    /// range, or `None` if no merge applies (nothing changed).
    pub(crate) fn vma_merge_existing_range(&mut self, vmg: &mut VmaMergeStruct<'_>) -> Option<V> {
        let middle = vmg.middle.expect("an existing-range merge has a middle");
        let (m_start, m_end, m_pgoff) = (middle.start(), middle.end(), middle.pgoff());
        let left_side = vmg.start == m_start;
        let right_side = vmg.end == m_end;
        if vmg.flags.intersects(VmFlags::SPECIAL) || (!left_side && !right_side) {
            return None;
        }
        vmg.prev = self.prev_of(m_start);
        vmg.next = self.next_from(m_start + 1);
        let merge_left = left_side && can_vma_merge_left(vmg);
        let merge_right = right_side && can_vma_merge_right(vmg, merge_left);
        if !merge_left && !merge_right {
            return None;
        }
        let (start, end) = (vmg.start, vmg.end);
        let remove_middle = left_side && right_side;
        let mid_anon = middle.anon().clone();
        // The requested flags' sticky bits, the merged neighbours' added below.
        let mut sticky = vmg.flags & VmFlags::STICKY;
        if merge_right {
            sticky |= vmg.next.unwrap().fl() & VmFlags::STICKY;
        }
        if merge_left {
            sticky |= vmg.prev.unwrap().fl() & VmFlags::STICKY;
        }
        let target = if merge_left && merge_right {
            let (p, n) = (vmg.prev.unwrap(), vmg.next.unwrap());
            let next_anon = n.anon().clone();
            // prev's store covers middle and next; both then leave.
            self.set_end(p, n.end());
            self.remove(middle);
            self.remove(n);
            self.adopt_anon(p, if next_anon.is_some() { &next_anon } else { &mid_anon });
            p
        } else if merge_left {
            let p = vmg.prev.unwrap();
            // prev grows over the range first; middle's tree range then already is its new one.
            self.set_end(p, end);
            if remove_middle {
                self.remove(middle);
            } else {
                let pg = m_pgoff.wrapping_add((end - m_start) >> PAGE_SHIFT);
                self.set_range(middle, end, m_end, pg);
            }
            self.adopt_anon(p, &mid_anon);
            p
        } else {
            let n = vmg.next.unwrap();
            let new_pgoff = n.pgoff().wrapping_sub((n.start() - start) >> PAGE_SHIFT);
            // next grows back over the range first; then middle shrinks or leaves.
            self.set_range(n, start, n.end(), new_pgoff);
            if remove_middle {
                self.remove(middle);
            } else {
                self.set_end(middle, start);
            }
            self.adopt_anon(n, &mid_anon);
            n
        };
        self.add_sticky(target, sticky);
        Some(target)
    }

    /// The merge state of a change of `[start, end)` inside `middle` to `flags` / `name` (`VMG_VMA_STATE`).
    fn existing_range<'a>(
        middle: V,
        start: u64,
        end: u64,
        flags: VmFlags,
        file: Option<&'a Arc<VmFile>>,
        anon_vma: &'a AnonState,
        name: Option<&'a Arc<str>>,
    ) -> VmaMergeStruct<'a> {
        let mut vmg =
            VmaMergeStruct::new_range(start, end, flags, middle.pgoff_at(start), file, anon_vma, name);
        vmg.middle = Some(middle);
        vmg
    }

    /// `vma_modify`: makes `[start, end)` (inside `middle`) a VMA of its own, by merging with a neighbour when
    /// the new attributes allow it, else by splitting off the parts below `start` and above `end` (each split
    /// refused at `max_map_count` with ENOMEM; a refused second split leaves the first, as Linux does). Returns
    /// the VMA covering `[start, end)`; the caller then sets the attributes.
    pub(crate) fn vma_modify(
        &mut self,
        middle: V,
        start: u64,
        end: u64,
        flags: VmFlags,
        name: Option<&Arc<str>>,
    ) -> Result<V, Errno> {
        let file = middle.file();
        let anon = middle.anon().clone();
        let mut vmg = Self::existing_range(middle, start, end, flags, file.as_ref(), &anon, name);
        if let Some(v) = self.vma_merge_existing_range(&mut vmg) {
            return Ok(v);
        }
        self.split_to(middle, start, end)
    }

    /// `vma_modify` when no merge applies: the part below `start` splits off as a new VMA (`new_below`) and so
    /// does the part above `end`, so `middle` itself becomes the VMA of `[start, end)`.
    fn split_to(&mut self, middle: V, start: u64, end: u64) -> Result<V, Errno> {
        if middle.start() < start {
            self.split_vma(middle, start, true)?;
        }
        if middle.end() > end {
            self.split_vma(middle, end, false)?;
        }
        Ok(middle)
    }

    /// `vma_modify_flags`: [`MmWrite::vma_modify`] for a change of flags to `*flags`; after a merge, `*flags`
    /// becomes the merged VMA's flags (the requested ones plus the sticky flags the merge kept), which the
    /// caller then sets.
    pub(crate) fn vma_modify_flags(
        &mut self,
        middle: V,
        start: u64,
        end: u64,
        flags: &mut VmFlags,
        name: Option<&Arc<str>>,
    ) -> Result<V, Errno> {
        let file = middle.file();
        let anon = middle.anon().clone();
        let mut vmg = Self::existing_range(middle, start, end, *flags, file.as_ref(), &anon, name);
        if let Some(v) = self.vma_merge_existing_range(&mut vmg) {
            *flags = v.fl();
            return Ok(v);
        }
        self.split_to(middle, start, end)
    }
}
