//! VMA merging (`mm/vma.c`: `vma_merge_new_range`, `vma_merge_existing_range`, `vma_modify`).
//!
//! # Mergeability
//!
//! A proposed range ([`Cand`]) can join a neighbour when: flags are identical (`VM_SOFTDIRTY` aside), the file
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
use super::{AnonState, Errno, Mm, VmFile, config::PAGE_SHIFT};

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
    ((t.fl() ^ c.flags) & !VmFlags::SOFTDIRTY).is_empty() && t.file_is(c.file) && t.name_is(c.name)
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

impl Mm {
    /// The decision of `vma_merge_new_range` for `c` (an empty range): prev is the VMA before `c.start`, next
    /// the first at or after `c.end`. `just_expand` (brk) disables merging right.
    pub(crate) fn plan_new_merge(&self, c: &Cand<'_>, just_expand: bool) -> NewMerge {
        if c.flags.intersects(VmFlags::SPECIAL) {
            return NewMerge::None;
        }
        // The range is free (unmapped first, or found free), so one tree position gives both neighbours.
        let (prev, next) = self.gap_neighbours(c.start);
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
    /// anon_vma adopts the removed next's, else the range's (`dup_anon_vma`). Returns the target.
    pub(crate) fn apply_new_merge(
        &mut self,
        m: NewMerge,
        c_start: u64,
        c_end: u64,
        c_pgoff: u64,
        c_anon: &AnonState,
    ) -> V {
        match m {
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
                // prev's store covers the range and next; next then leaves.
                self.set_end(p, n.end());
                self.remove(n);
                if next_anon.is_some() {
                    self.adopt_anon(p, &next_anon);
                } else {
                    self.adopt_anon(p, c_anon);
                }
                p
            }
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
        if merge_left && merge_right {
            let (p, n) = (prev.unwrap(), next.unwrap());
            let next_anon = n.anon().clone();
            // prev's store covers middle and next; both then leave.
            self.set_end(p, n.end());
            self.remove(middle);
            self.remove(n);
            self.adopt_anon(p, if next_anon.is_some() { &next_anon } else { &mid_anon });
            Some(p)
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
            Some(p)
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
            Some(n)
        }
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
        // As `vma_modify`: the part below `start` splits off as a new VMA (`new_below`) and so does the part
        // above `end`, so `middle` itself becomes the VMA of `[start, end)`.
        if middle.start() < start {
            self.split_checked(middle, start, true)?;
        }
        if middle.end() > end {
            self.split_checked(middle, end, false)?;
        }
        Ok(middle)
    }
}
