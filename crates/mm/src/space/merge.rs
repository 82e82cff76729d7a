//! VMA merging (`mm/vma.c`: `vma_merge_new_range`, `vma_merge_existing_range`, `vma_modify`).
//!
//! # Mergeability
//!
//! A proposed range ([`Cand`]) can join a neighbour when: flags are identical but for `VM_IGNORE_MERGE`
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

/// A proposed range and its attributes (the kernel's `vma_merge_struct` fields that decide a merge).
pub(crate) struct Cand<'a> {
    pub start: u64,
    pub end: u64,
    pub flags: VmFlags,
    pub pgoff: u64,
    pub file: Option<&'a Arc<VmFile>>,
    pub anon: &'a AnonState,
    pub name: Option<&'a Arc<str>>,
    /// The source VMA (`vmg->middle`) is a fork child's (existing-range merges only).
    pub src_uncowed: bool,
    /// The VMA an mremap copies from is a fork child's (`vmg->copied_from`).
    pub copied_uncowed: bool,
}

impl Cand<'_> {
    fn pages(&self) -> u64 {
        (self.end - self.start) >> PAGE_SHIFT
    }
}

/// `is_mergeable_vma`.
fn mergeable_vma(t: V, c: &Cand<'_>) -> bool {
    ((t.fl() ^ c.flags) & !VmFlags::IGNORE_MERGE).is_empty() && t.file_is(c.file) && t.name_is(c.name)
}

/// `is_mergeable_anon_vma`.
fn mergeable_anon(t: V, c: &Cand<'_>) -> bool {
    let st = t.anon();
    match (st.is_some(), c.anon.is_some()) {
        (false, true) => !c.src_uncowed && !c.copied_uncowed,
        (true, false) => !st.had_uncowed_parents(),
        _ => st.same_anon(c.anon),
    }
}

/// `can_vma_merge_after` (the range joins `prev` on its right).
fn can_merge_after(prev: V, c: &Cand<'_>) -> bool {
    mergeable_vma(prev, c) && mergeable_anon(prev, c) && prev.pgoff().wrapping_add(prev.pages()) == c.pgoff
}

/// `can_vma_merge_before` (the range joins `next` on its left).
fn can_merge_before(next: V, c: &Cand<'_>) -> bool {
    mergeable_vma(next, c) && mergeable_anon(next, c) && next.pgoff() == c.pgoff.wrapping_add(c.pages())
}

/// `can_vma_merge_left`.
fn can_merge_left(prev: Option<V>, c: &Cand<'_>) -> bool {
    prev.is_some_and(|p| p.end() == c.start && can_merge_after(p, c))
}

/// `can_vma_merge_right`.
fn can_merge_right(prev: Option<V>, next: Option<V>, c: &Cand<'_>, left: bool) -> bool {
    let Some(n) = next else { return false };
    if n.start() != c.end || !can_merge_before(n, c) {
        return false;
    }
    if !left {
        return true;
    }
    let p = prev.expect("left merge implies prev");
    let (pa, na) = (p.anon(), n.anon());
    !pa.is_some() || !na.is_some() || pa.same_anon(&na)
}

/// Which neighbours a merge of a proposed range joins.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NewMerge {
    /// No merge.
    None,
    /// Expand prev over the range.
    Left(V),
    /// Expand next back over the range.
    Right(V),
    /// Expand prev over the range and next; remove next.
    Both(V, V),
}

impl NewMerge {
    pub(crate) fn is_none(&self) -> bool {
        matches!(self, NewMerge::None)
    }
}

impl MmWrite<'_> {
    /// The decision of `vma_merge_new_range` for `c` (an empty range): prev is the VMA before `c.start`, next
    /// the first at or after `c.end`. `just_expand` (brk) disables merging right.
    pub(crate) fn plan_new_merge(&self, c: &Cand<'_>, just_expand: bool) -> NewMerge {
        if c.flags.intersects(VmFlags::SPECIAL) {
            return NewMerge::None;
        }
        // The range is free, so one tree position gives both neighbours; or (`MAP_FIXED`) it still holds the
        // write-locked VMAs the new mapping replaces (`MmWrite::clear_for_replace`), and the neighbours are the
        // VMAs around it.
        let (prev, next) = match self.lookup(c.start) {
            None => match self.gap_neighbours(c.start) {
                // Part of the range still holds a VMA being replaced: the next neighbour lies beyond the end.
                (p, Some(n)) if n.start() < c.end => (p, self.next_from(c.end)),
                pn => pn,
            },
            Some(_) => (self.prev_of(c.start), self.next_from(c.end)),
        };
        if prev.is_none() && next.is_none() {
            return NewMerge::None;
        }
        let left = can_merge_left(prev, c);
        let right = !just_expand && can_merge_right(prev, next, c, left);
        match (left, right) {
            (true, true) => NewMerge::Both(prev.unwrap(), next.unwrap()),
            (true, false) => NewMerge::Left(prev.unwrap()),
            (false, true) => NewMerge::Right(next.unwrap()),
            (false, false) => NewMerge::None,
        }
    }

    /// Executes a [`NewMerge`] (`vma_expand`): the target grows over the range (and next); a target without
    /// anon_vma adopts the removed next's, else the range's (`dup_anon_vma`); the target gets the sticky flags
    /// of the range (`c_flags`), its own and the removed next's. Returns the target.
    pub(crate) fn apply_new_merge(
        &mut self,
        m: NewMerge,
        c_start: u64,
        c_end: u64,
        c_pgoff: u64,
        c_anon: &AnonState,
        c_flags: VmFlags,
    ) -> V {
        let sticky = c_flags & VmFlags::STICKY;
        let target = match m {
            NewMerge::None => unreachable!("apply_new_merge without a merge"),
            NewMerge::Left(p) => {
                self.set_end(p, c_end);
                self.adopt_anon(p, c_anon);
                p
            }
            NewMerge::Right(n) => {
                self.set_range(n, c_start, n.end(), c_pgoff);
                self.adopt_anon(n, c_anon);
                n
            }
            NewMerge::Both(p, n) => {
                let next_anon = n.anon().clone();
                let next_sticky = n.fl() & VmFlags::STICKY;
                // prev's store covers the range and next; next then leaves.
                self.set_end(p, n.end());
                self.remove(n);
                if next_anon.is_some() {
                    self.adopt_anon(p, &next_anon);
                } else {
                    self.adopt_anon(p, c_anon);
                }
                self.add_sticky(p, next_sticky);
                p
            }
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

    /// `vma_merge_existing_range`: tries to give `[start, end)` (inside `middle`) the attributes `flags` /
    /// `name` by merging with middle's neighbours. Returns the VMA now covering the range, or `None` if no
    /// merge applies (nothing changed).
    pub(crate) fn merge_existing(
        &mut self,
        middle: V,
        start: u64,
        end: u64,
        flags: VmFlags,
        name: Option<&Arc<str>>,
    ) -> Option<V> {
        let (m_start, m_end, m_pgoff) = (middle.start(), middle.end(), middle.pgoff());
        let left_side = start == m_start;
        let right_side = end == m_end;
        if flags.intersects(VmFlags::SPECIAL) || (!left_side && !right_side) {
            return None;
        }
        let prev = self.prev_of(m_start);
        let next = self.next_from(m_start + 1);
        let (merge_left, merge_right) = {
            let file = middle.file();
            let m_anon = middle.anon();
            let c = Cand {
                start,
                end,
                flags,
                pgoff: middle.pgoff_at(start),
                file: file.as_ref(),
                anon: &m_anon,
                name,
                src_uncowed: m_anon.had_uncowed_parents(),
                copied_uncowed: false,
            };
            // Holding middle's anon state while the checks lock prev's and next's (distinct VMAs).
            let l = left_side && can_merge_left(prev, &c);
            (l, right_side && can_merge_right(prev, next, &c, l))
        };
        if !merge_left && !merge_right {
            return None;
        }
        let remove_middle = left_side && right_side;
        let mid_anon = middle.anon().clone();
        // The requested flags' sticky bits, the merged neighbours' added below.
        let mut sticky = flags & VmFlags::STICKY;
        if merge_right {
            sticky |= next.unwrap().fl() & VmFlags::STICKY;
        }
        if merge_left {
            sticky |= prev.unwrap().fl() & VmFlags::STICKY;
        }
        let target = if merge_left && merge_right {
            let (p, n) = (prev.unwrap(), next.unwrap());
            let next_anon = n.anon().clone();
            // prev's store covers middle and next; both then leave.
            self.set_end(p, n.end());
            self.remove(middle);
            self.remove(n);
            self.adopt_anon(p, if next_anon.is_some() { &next_anon } else { &mid_anon });
            p
        } else if merge_left {
            let p = prev.unwrap();
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
            let n = next.unwrap();
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
        if let Some(v) = self.merge_existing(middle, start, end, flags, name) {
            return Ok(v);
        }
        self.split_to(middle, start, end)
    }

    /// `vma_modify` when no merge applies: the part below `start` splits off as a new VMA (`new_below`) and so
    /// does the part above `end`, so `middle` itself becomes the VMA of `[start, end)`.
    fn split_to(&mut self, middle: V, start: u64, end: u64) -> Result<V, Errno> {
        if middle.start() < start {
            self.split_checked(middle, start, true)?;
        }
        if middle.end() > end {
            self.split_checked(middle, end, false)?;
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
        if let Some(v) = self.merge_existing(middle, start, end, *flags, name) {
            *flags = v.fl();
            return Ok(v);
        }
        self.split_to(middle, start, end)
    }
}
