//! Guard markers (`MADV_GUARD_INSTALL`): the pages of an address space that fault with SIGSEGV whatever
//! their VMA allows.
//!
//! # What Linux keeps, and what this keeps instead
//!
//! Linux 6.18 installs a guard region as *PTE markers* (`PTE_MARKER_GUARD`, `mm/madvise.c:
//! madvise_guard_install`): page-table entries that map nothing and make every fault on them fail
//! (`handle_pte_marker` returns `VM_FAULT_SIGSEGV`; GUP reports EFAULT). They live in the page tables, not in
//! the VMA, so they follow the page tables' life:
//!
//! - zapping pages leaves them (`zap_nonpresent_ptes` keeps guard markers unless the zap drops markers):
//!   `MADV_DONTNEED`, `MADV_FREE`, `MADV_REMOVE` and truncation keep them, and so does `mprotect`;
//! - unmapping removes them (`unmap_vmas` zaps with `ZAP_FLAG_DROP_MARKER`): munmap, a `MAP_FIXED` mapping over
//!   them, brk shrinking, mremap shrinking;
//! - `mremap` moves them with the page tables (`move_page_tables`), `MREMAP_DONTUNMAP` included (the old range
//!   keeps no page tables);
//! - fork copies them where it copies page tables (`vma_needs_copy`: the VMA has an anon_vma or a
//!   `VM_COPY_ON_FORK` flag, `VM_MAYBE_GUARD` among them), except into a `VM_WIPEONFORK` or `VM_DONTCOPY`
//!   VMA;
//! - `MADV_GUARD_REMOVE` clears them.
//!
//! The engine has no page tables yet, so it keeps the markers here, one structure per [`Mm`](super::Mm): the
//! set of guarded pages, stored as disjoint, non-adjacent half-open runs of page numbers (`first -> end`), so
//! that a guard over a huge range costs one entry. Every call that changes page tables in one of the ways
//! above maintains it (`space::munmap::remove_from` for every unmap, `mremap`'s move, `fork`, `madvise`), and
//! [`Mm::validate`](super::Mm::validate) checks its invariants:
//!
//! 1. runs are non-empty, disjoint, not adjacent (adjacent runs are coalesced), and below `TASK_SIZE`;
//! 2. every guarded page lies in a VMA, and that VMA has `VM_MAYBE_GUARD` (install sets it on the VMA before
//!    the markers; splits copy it; merges keep it, as it is sticky), with one exception Linux has too: naming
//!    a range (`PR_SET_VMA_ANON_NAME`) that merges with a neighbour resets the merged VMA's flags to those of
//!    the renamed part (`mm/madvise.c: madvise_update_vma` sets the flags it computed before
//!    `vma_modify_name`, which, unlike `vma_modify_flags`, does not hand back the sticky flags the merge
//!    kept), so a neighbour's markers can end up in a VMA without the flag. The check therefore applies only
//!    where anonymous VMA names are off (`CONFIG_ANON_VMA_NAME`).
//!
//! When page tables arrive, the markers move into them as PTE markers and this structure goes.

use std::collections::BTreeMap;

use super::config::PAGE_SHIFT;

/// The guarded pages of one address space (module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardMarkers {
    /// First page number of a run -> one past its last page number.
    runs: BTreeMap<u64, u64>,
}

impl GuardMarkers {
    /// No guarded page.
    pub fn new() -> Self {
        Self::default()
    }

    /// True if no page is guarded.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Number of guarded pages.
    pub fn pages(&self) -> u64 {
        self.runs.iter().map(|(s, e)| e - s).sum()
    }

    /// The guarded ranges as `[start, end)` addresses, in order.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs.iter().map(|(&s, &e)| (s << PAGE_SHIFT, e << PAGE_SHIFT))
    }

    /// Whether the page containing `addr` is guarded.
    pub fn contains(&self, addr: u64) -> bool {
        let p = addr >> PAGE_SHIFT;
        self.runs.range(..=p).next_back().is_some_and(|(_, &e)| p < e)
    }

    /// The first guarded page (its address) in `[start, end)`, if any.
    pub fn first_in(&self, start: u64, end: u64) -> Option<u64> {
        let (lo, hi) = (start >> PAGE_SHIFT, end.div_ceil(1 << PAGE_SHIFT));
        if lo >= hi {
            return None;
        }
        if let Some((_, &e)) = self.runs.range(..=lo).next_back()
            && lo < e
        {
            return Some(lo << PAGE_SHIFT);
        }
        self.runs.range(lo..hi).next().map(|(&s, _)| s << PAGE_SHIFT)
    }

    /// Guards every page of `[start, end)` (page-aligned); already guarded pages stay guarded.
    pub fn install(&mut self, start: u64, end: u64) {
        let (mut lo, mut hi) = (start >> PAGE_SHIFT, end >> PAGE_SHIFT);
        if lo >= hi {
            return;
        }
        // Absorb every run that overlaps or touches [lo, hi).
        if let Some((&s, &e)) = self.runs.range(..=lo).next_back()
            && e >= lo
        {
            lo = s;
            hi = hi.max(e);
            self.runs.remove(&s);
        }
        let absorbed: Vec<(u64, u64)> = self.runs.range(lo..=hi).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in absorbed {
            hi = hi.max(e);
            self.runs.remove(&s);
        }
        self.runs.insert(lo, hi);
    }

    /// Clears every guarded page of `[start, end)` (page-aligned); returns the cleared ranges (addresses), in
    /// order.
    pub fn clear(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let (lo, hi) = (start >> PAGE_SHIFT, end >> PAGE_SHIFT);
        let mut cleared = Vec::new();
        if lo >= hi {
            return cleared;
        }
        let first = match self.runs.range(..=lo).next_back() {
            Some((&s, &e)) if e > lo => s,
            _ => lo,
        };
        let hit: Vec<(u64, u64)> = self.runs.range(first..hi).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in hit {
            self.runs.remove(&s);
            if s < lo {
                self.runs.insert(s, lo);
            }
            if e > hi {
                self.runs.insert(hi, e);
            }
            cleared.push((s.max(lo) << PAGE_SHIFT, e.min(hi) << PAGE_SHIFT));
        }
        cleared
    }

    /// Moves the guarded pages of `[from, from + len)` to the same offsets from `to` (mremap's
    /// `move_page_tables`). The destination holds no guarded page before (it was free or just unmapped).
    pub fn relocate(&mut self, from: u64, len: u64, to: u64) {
        for (s, e) in self.clear(from, from + len) {
            self.install(s - from + to, e - from + to);
        }
    }

    /// The guarded pages of `[start, end)` only (what fork copies of one VMA).
    pub fn within(&self, start: u64, end: u64) -> GuardMarkers {
        let mut part = self.clone();
        part.clear(0, start);
        part.clear(end, !((1 << PAGE_SHIFT) - 1));
        part
    }

    /// Adds every guarded page of `other`.
    pub fn extend(&mut self, other: &GuardMarkers) {
        for (s, e) in other.ranges() {
            self.install(s, e);
        }
    }

    /// Checks invariant 1 of the module docs (the structure alone); invariant 2 needs the VMAs
    /// (`Mm::validate`).
    pub fn validate(&self) -> Result<(), String> {
        let mut prev_end = None;
        for (&s, &e) in &self.runs {
            if s >= e {
                return Err(format!("empty guard run {s:#x}..{e:#x}"));
            }
            if prev_end.is_some_and(|p| p >= s) {
                return Err(format!("guard run {s:#x}..{e:#x} overlaps or touches the one before"));
            }
            if e > super::TASK_SIZE >> PAGE_SHIFT {
                return Err(format!("guard run {s:#x}..{e:#x} beyond TASK_SIZE"));
            }
            prev_end = Some(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 4096;

    fn runs(g: &GuardMarkers) -> Vec<(u64, u64)> {
        g.ranges().map(|(s, e)| (s / P, e / P)).collect()
    }

    #[test]
    fn install_coalesces_and_clear_splits() {
        let mut g = GuardMarkers::new();
        g.install(10 * P, 12 * P);
        g.install(14 * P, 15 * P);
        assert_eq!(runs(&g), [(10, 12), (14, 15)]);
        // Touching runs coalesce; an install over both and the gap makes one run.
        g.install(12 * P, 13 * P);
        assert_eq!(runs(&g), [(10, 13), (14, 15)]);
        g.install(9 * P, 16 * P);
        assert_eq!(runs(&g), [(9, 16)]);
        assert_eq!(g.pages(), 7);
        g.validate().unwrap();
        assert_eq!(g.clear(11 * P, 13 * P), [(11 * P, 13 * P)]);
        assert_eq!(runs(&g), [(9, 11), (13, 16)]);
        assert!(g.contains(10 * P + 5) && !g.contains(11 * P) && g.contains(15 * P) && !g.contains(16 * P));
        assert_eq!(g.first_in(11 * P, 20 * P), Some(13 * P));
        assert_eq!(g.first_in(10 * P, 11 * P), Some(10 * P));
        assert_eq!(g.first_in(16 * P, 20 * P), None);
        assert_eq!(g.first_in(11 * P, 11 * P), None);
        // Clearing a range that covers runs partly at both ends.
        assert_eq!(g.clear(10 * P, 14 * P), [(10 * P, 11 * P), (13 * P, 14 * P)]);
        assert_eq!(runs(&g), [(9, 10), (14, 16)]);
        g.validate().unwrap();
        assert!(g.clear(20 * P, 30 * P).is_empty());
    }

    #[test]
    fn relocate_and_within() {
        let mut g = GuardMarkers::new();
        g.install(10 * P, 12 * P);
        g.install(13 * P, 14 * P);
        g.install(40 * P, 41 * P);
        g.relocate(11 * P, 3 * P, 100 * P);
        assert_eq!(runs(&g), [(10, 11), (40, 41), (100, 101), (102, 103)]);
        let part = g.within(40 * P, 101 * P);
        assert_eq!(runs(&part), [(40, 41), (100, 101)]);
        let mut other = GuardMarkers::new();
        other.extend(&part);
        assert_eq!(other, part);
        assert!(GuardMarkers::new().is_empty());
    }

    /// The interval set against a set of single pages, over random operations.
    #[test]
    fn model_against_a_page_set() {
        use std::collections::BTreeSet;
        let mut g = GuardMarkers::new();
        let mut model = BTreeSet::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        // Fewer steps under Miri, where each costs a hundred times more.
        let steps = if cfg!(miri) { 150 } else { 4000 };
        for _ in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = x % 64;
            let b = a + (x >> 8) % 12;
            match (x >> 20) % 3 {
                0 => {
                    g.install(a * P, b * P);
                    model.extend(a..b);
                }
                1 => {
                    let cleared: u64 = g.clear(a * P, b * P).iter().map(|(s, e)| (e - s) / P).sum();
                    let before = model.len();
                    model.retain(|&p| p < a || p >= b);
                    assert_eq!(cleared, (before - model.len()) as u64);
                }
                _ => {
                    let to = (x >> 32) % 200 + 100;
                    let moved: Vec<u64> = model.range(a..b).copied().collect();
                    // The destination is free in the model's use (mremap unmaps it first).
                    g.clear(to * P, (to + b - a) * P);
                    model.retain(|&p| p < to || p >= to + b - a);
                    g.relocate(a * P, (b - a) * P, to * P);
                    model.retain(|&p| p < a || p >= b);
                    model.extend(moved.iter().map(|p| p - a + to));
                }
            }
            g.validate().unwrap();
            let pages: BTreeSet<u64> = g.ranges().flat_map(|(s, e)| s / P..e / P).collect();
            assert_eq!(pages, model);
            assert_eq!(g.first_in(a * P, b * P), model.range(a..b).next().map(|p| p * P));
        }
    }
}
