//! VMA merging (`mm/vma.c`: `vma_merge_new_range`, `vma_merge_existing_range`, `vma_modify`), §6.1–6.5.
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

use super::flags::*;
use super::{AnonState, Area, Errno, MapFile, Mm, config::PAGE_SHIFT};

/// A proposed range and its attributes (the kernel's `vma_merge_struct` fields that decide a merge).
pub(crate) struct Cand<'a> {
    pub start: u64,
    pub end: u64,
    pub flags: u64,
    pub pgoff: u64,
    pub file: Option<&'a Arc<MapFile>>,
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

fn names_eq(a: Option<&Arc<str>>, b: Option<&Arc<str>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => **x == **y,
        _ => false,
    }
}

/// `is_mergeable_vma`.
fn mergeable_vma(t: &Area, c: &Cand<'_>) -> bool {
    (t.flags ^ c.flags) & !VM_SOFTDIRTY == 0 && t.same_file(c.file) && names_eq(t.name.as_ref(), c.name)
}

/// `is_mergeable_anon_vma`.
fn mergeable_anon(t: &Area, c: &Cand<'_>) -> bool {
    match (t.anon.is_some(), c.anon.is_some()) {
        (false, true) => !c.src_uncowed && !c.copied_uncowed,
        (true, false) => !t.anon.had_uncowed_parents(),
        _ => t.anon.same_anon(c.anon),
    }
}

/// `can_vma_merge_after` (the range joins `prev` on its right).
fn can_merge_after(prev: &Area, c: &Cand<'_>) -> bool {
    mergeable_vma(prev, c) && mergeable_anon(prev, c) && prev.pgoff.wrapping_add(prev.pages()) == c.pgoff
}

/// `can_vma_merge_before` (the range joins `next` on its left).
fn can_merge_before(next: &Area, c: &Cand<'_>) -> bool {
    mergeable_vma(next, c) && mergeable_anon(next, c) && next.pgoff == c.pgoff.wrapping_add(c.pages())
}

/// `can_vma_merge_left`.
fn can_merge_left(prev: Option<&Area>, c: &Cand<'_>) -> bool {
    prev.is_some_and(|p| p.end == c.start && can_merge_after(p, c))
}

/// `can_vma_merge_right`.
fn can_merge_right(prev: Option<&Area>, next: Option<&Area>, c: &Cand<'_>, left: bool) -> bool {
    let Some(n) = next else { return false };
    if n.start != c.end || !can_merge_before(n, c) {
        return false;
    }
    if !left {
        return true;
    }
    let p = prev.expect("left merge implies prev");
    !p.anon.is_some() || !n.anon.is_some() || p.anon.same_anon(&n.anon)
}

/// Which neighbours a merge of a proposed range joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NewMerge {
    /// No merge.
    None,
    /// Expand prev (keyed) over the range.
    Left(u64),
    /// Expand next (keyed) back over the range.
    Right(u64),
    /// Expand prev over the range and next; remove next.
    Both(u64, u64),
}

impl Mm {
    /// The decision of `vma_merge_new_range` for `c` (an empty range): prev is the VMA before `c.start`, next
    /// the first at or after `c.end`. `just_expand` (brk) disables merging right.
    pub(crate) fn plan_new_merge(&self, c: &Cand<'_>, just_expand: bool) -> NewMerge {
        if c.flags & VM_SPECIAL != 0 {
            return NewMerge::None;
        }
        let prev = self.vmas.range(..c.start).next_back().map(|(_, a)| a);
        let next = self.next_from(c.end);
        if prev.is_none() && next.is_none() {
            return NewMerge::None;
        }
        let left = can_merge_left(prev, c);
        let right = !just_expand && can_merge_right(prev, next, c, left);
        match (left, right) {
            (true, true) => NewMerge::Both(prev.unwrap().start, next.unwrap().start),
            (true, false) => NewMerge::Left(prev.unwrap().start),
            (false, true) => NewMerge::Right(next.unwrap().start),
            (false, false) => NewMerge::None,
        }
    }

    /// Executes a [`NewMerge`] (`vma_expand`): the target grows over the range (and next); a target without
    /// anon_vma adopts the removed next's, else the range's (`dup_anon_vma`). Returns the target's key.
    pub(crate) fn apply_new_merge(
        &mut self,
        m: NewMerge,
        c_start: u64,
        c_end: u64,
        c_pgoff: u64,
        c_anon: &AnonState,
    ) -> u64 {
        self.mark_dirty(c_start, c_end);
        match m {
            NewMerge::None => unreachable!("apply_new_merge without a merge"),
            NewMerge::Left(p) => {
                let a = self.get_mut(p);
                a.end = c_end;
                if !a.anon.is_some() && c_anon.is_some() {
                    a.anon = c_anon.clone();
                }
                p
            }
            NewMerge::Right(n) => {
                let mut a = self.remove(n);
                a.start = c_start;
                a.pgoff = c_pgoff;
                if !a.anon.is_some() && c_anon.is_some() {
                    a.anon = c_anon.clone();
                }
                self.insert(a);
                c_start
            }
            NewMerge::Both(p, n) => {
                let next = self.remove(n);
                let a = self.get_mut(p);
                a.end = next.end;
                if !a.anon.is_some() {
                    if next.anon.is_some() {
                        a.anon = next.anon.clone();
                    } else if c_anon.is_some() {
                        a.anon = c_anon.clone();
                    }
                }
                p
            }
        }
    }

    /// `vma_merge_existing_range`: tries to give `[start, end)` (inside the VMA keyed `middle`) the attributes
    /// `flags` / `name` by merging with middle's neighbours. Returns the key of the VMA now covering the
    /// range, or `None` if no merge applies (nothing changed).
    pub(crate) fn merge_existing(
        &mut self,
        middle: u64,
        start: u64,
        end: u64,
        flags: u64,
        name: Option<&Arc<str>>,
    ) -> Option<u64> {
        let m = &self.vmas[&middle];
        let left_side = start == m.start;
        let right_side = end == m.end;
        if flags & VM_SPECIAL != 0 || (!left_side && !right_side) {
            return None;
        }
        let c = Cand {
            start,
            end,
            flags,
            pgoff: m.pgoff_at(start),
            file: m.file.as_ref(),
            anon: &m.anon,
            name,
            src_uncowed: m.anon.had_uncowed_parents(),
            copied_uncowed: false,
        };
        let prev = self.prev_of(middle);
        let next = self.vmas.range(m.start + 1..).next().map(|(_, a)| a);
        let merge_left = left_side && can_merge_left(prev, &c);
        let merge_right = right_side && can_merge_right(prev, next, &c, merge_left);
        if !merge_left && !merge_right {
            return None;
        }
        let remove_middle = left_side && right_side;
        let (m_start, m_end, m_pgoff) = (m.start, m.end, m.pgoff);
        let prev_key = prev.map(|p| p.start);
        let next_key = next.map(|n| n.start);
        if merge_left && merge_right {
            let (p, n) = (prev_key.unwrap(), next_key.unwrap());
            let mid = self.remove(middle);
            let next = self.remove(n);
            let a = self.get_mut(p);
            a.end = next.end;
            if !a.anon.is_some() {
                a.anon = if next.anon.is_some() { next.anon.clone() } else { mid.anon.clone() };
            }
            Some(p)
        } else if merge_left {
            let p = prev_key.unwrap();
            let mid_anon = self.vmas[&middle].anon.clone();
            if remove_middle {
                self.remove(middle);
            } else {
                let pg = m_pgoff.wrapping_add((end - m_start) >> PAGE_SHIFT);
                self.set_range(middle, end, m_end, pg);
            }
            let a = self.get_mut(p);
            a.end = end;
            if !a.anon.is_some() && mid_anon.is_some() {
                a.anon = mid_anon;
            }
            Some(p)
        } else {
            let n = next_key.unwrap();
            let mid_anon = self.vmas[&middle].anon.clone();
            let next_pgoff = self.vmas[&n].pgoff;
            let next_end = self.vmas[&n].end;
            let new_pgoff = next_pgoff.wrapping_sub((n - start) >> PAGE_SHIFT);
            if remove_middle {
                self.remove(middle);
            } else {
                self.get_mut(middle).end = start;
            }
            self.set_range(n, start, next_end, new_pgoff);
            let a = self.get_mut(start);
            if !a.anon.is_some() && mid_anon.is_some() {
                a.anon = mid_anon;
            }
            Some(start)
        }
    }

    /// `vma_modify`: makes `[start, end)` (inside the VMA keyed `middle`) a VMA of its own, by merging with a
    /// neighbour when the new attributes allow it, else by splitting off the parts below `start` and above
    /// `end` (each split refused at `max_map_count` with ENOMEM; a refused second split leaves the first, as
    /// Linux does). Returns the key of the VMA covering `[start, end)`; the caller then sets the attributes.
    pub(crate) fn vma_modify(
        &mut self,
        middle: u64,
        start: u64,
        end: u64,
        flags: u64,
        name: Option<&Arc<str>>,
    ) -> Result<u64, Errno> {
        if let Some(k) = self.merge_existing(middle, start, end, flags, name) {
            return Ok(k);
        }
        let mut key = middle;
        if self.vmas[&key].start < start {
            self.split_checked(key, start)?;
            key = start;
        }
        if self.vmas[&key].end > end {
            self.split_checked(key, end)?;
        }
        Ok(key)
    }
}
