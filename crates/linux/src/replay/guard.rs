//! The guard: before a call that can change memory, the runner checks that the pages the kernel would act on
//! hold no mapping of its own, and stops the run with a refusal instead of corrupting itself. "Module docs"
//! below means the docs of the `replay` module (`mod.rs`), whose section "Guard" lists which pages each call
//! reaches.
//!
//! Invariants:
//! - the arena is the script's; outside it a VMA is the runner's unless the script's own calls mapped those
//!   pages (`Ranges`, kept in the target's `script_pages`: added by a successful mmap or mremap and by an
//!   access that grew a script VMA down, removed by munmap and by a shrinking or moving mremap, and read again
//!   from the maps after a failed fixed mmap or mremap);
//! - the page ranges follow the kernel's arithmetic for each call (`PAGE_ALIGN` wrapping, mlock's rounded-down
//!   start, TASK_SIZE bounding only mmap, munmap and mremap; the walking calls stop at the first hole);
//! - `/proc/self/maps` is streamed through the buffer allocated when the child starts, never collected: near
//!   `max_map_count` an allocation that needs a VMA of its own would fail;
//! - `[vsyscall]` is not a VMA and never the runner's.

use super::target::KernelTarget;
use super::{PAGE, TASK_SIZE, read_maps};
use std::ffi::c_void;
use vmspace_script::Arena;

/// A set of page ranges, kept as sorted, disjoint, non-adjacent `[start, end)` pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Ranges(pub(super) Vec<(u64, u64)>);

impl Ranges {
    /// Adds `[start, end)`.
    pub(super) fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        // Absorb every range that overlaps or touches [s, e).
        self.0.retain(|&(a, b)| {
            if b < s || a > e {
                true
            } else {
                s = s.min(a);
                e = e.max(b);
                false
            }
        });
        let at = self.0.partition_point(|&(a, _)| a < s);
        self.0.insert(at, (s, e));
    }

    /// Removes `[start, end)`.
    pub(super) fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut out = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b <= start || a >= end {
                out.push((a, b));
                continue;
            }
            if a < start {
                out.push((a, start));
            }
            if b > end {
                out.push((end, b));
            }
        }
        self.0 = out;
    }

    /// Whether `[start, end)` lies entirely in the set (an empty range does).
    pub(super) fn covers(&self, start: u64, end: u64) -> bool {
        start >= end || self.0.iter().any(|&(a, b)| a <= start && end <= b)
    }
}

impl KernelTarget {
    /// Whether the part `[start, end)` of the VMA `l` is the runner's: `l` lies outside the arena (and is a
    /// VMA: not `[vsyscall]`) and the script's own calls did not map all of that part.
    fn is_own(arena: Arena, script_pages: &Ranges, start: u64, end: u64, l: &vmspace_proc::MapsLine) -> bool {
        if is_vsyscall(l) || arena.overlaps(l.start, l.end) {
            return false;
        }
        let (s, e) = (start.max(l.start), end.min(l.end));
        s < e && !script_pages.covers(s, e)
    }

    /// Stops the run for a call on `[start, end)` that reaches the runner's mapping `hit`, if any.
    fn refuse_hit(&self, what: &str, start: u64, end: u64, hit: Option<String>) {
        if let Some(l) = hit {
            self.refuse(format!(
                "{what} {start:#x}..{end:#x} reaches outside the arena into the runner's own mapping {l}"
            ));
        }
    }

    /// The page range a bounded [`Self::guard`] (mmap, munmap, mremap) checks, or `None` when it leaves the
    /// range to the kernel (empty, unaligned, wrapping or past TASK_SIZE: refused before anything changes).
    pub(super) fn guarded_range(addr: u64, len: u64) -> Option<(u64, u64)> {
        if len == 0 || !addr.is_multiple_of(PAGE) {
            return None;
        }
        let end = addr.checked_add(len).and_then(|e| e.checked_next_multiple_of(PAGE))?;
        (end <= TASK_SIZE).then_some((addr, end))
    }

    /// The guard for calls that act on every VMA of their page range (module docs, "Guard"): refuses when
    /// `[addr, addr + len)` overlaps a mapping of the runner. `bounded`: the kernel refuses ranges past
    /// TASK_SIZE before acting (mmap, munmap, mremap), so those are left to it. Reads the maps without
    /// collecting them: near `max_map_count` an allocation that needs a VMA of its own would fail.
    pub(super) fn guard(&mut self, what: &str, addr: u64, len: u64, bounded: bool) {
        if len == 0 || !addr.is_multiple_of(PAGE) {
            return;
        }
        let Some(end) = addr.checked_add(len).and_then(|e| e.checked_next_multiple_of(PAGE)) else {
            return;
        };
        debug_assert!(!bounded || end > TASK_SIZE || Self::guarded_range(addr, len) == Some((addr, end)));
        if (bounded && end > TASK_SIZE) || (addr >= self.arena.base && end <= self.arena.end()) {
            return;
        }
        let (arena, pages) = (self.arena, std::mem::take(&mut self.script_pages));
        let hit = read_maps(&mut self.maps_buf)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse::<vmspace_proc::MapsLine>().ok())
            .find(|l| l.start < end && l.end > addr && Self::is_own(arena, &pages, addr, end, l))
            .map(|l| l.to_string());
        self.script_pages = pages;
        self.refuse_hit(what, addr, end, hit);
    }

    /// The guard for calls that walk the VMAs of `[start, end)` from the one containing `start` and stop at
    /// the first hole (`mm/mlock.c: apply_vma_lock_flags`, `mm/mprotect.c: do_mprotect_pkey`, `mm/mseal.c`):
    /// a call whose start lies in a hole changes nothing, so only the contiguous run of VMAs from `start` is
    /// checked. `from_first`: the walk starts at the first VMA that intersects the range instead, all of
    /// which the call may change (`PROT_GROWSDOWN` moves mprotect's start to that VMA's start). `start` and
    /// `end` are the page range the kernel computes; TASK_SIZE bounds none of these calls.
    pub(super) fn guard_walk(&mut self, what: &str, start: u64, end: u64, from_first: bool) {
        if start >= end || (start >= self.arena.base && end <= self.arena.end() && !from_first) {
            return;
        }
        let (arena, pages) = (self.arena, std::mem::take(&mut self.script_pages));
        let mut hit = None;
        {
            let text = read_maps(&mut self.maps_buf).unwrap_or_default();
            let vmas = text
                .lines()
                .filter_map(|l| l.parse::<vmspace_proc::MapsLine>().ok())
                .filter(|l| !is_vsyscall(l));
            // The walk: from the first VMA (containing the start, or meeting the range) while contiguous.
            let mut reach: Option<u64> = None;
            for l in vmas {
                let from = match reach {
                    None if from_first && l.end > start && l.start < end => l.start,
                    None if !from_first && l.start <= start && start < l.end => start,
                    None => continue,
                    Some(r) if l.start == r && l.start < end => start,
                    Some(_) => break,
                };
                if Self::is_own(arena, &pages, from, end, &l) {
                    hit = Some(l.to_string());
                    break;
                }
                reach = Some(l.end);
            }
        }
        self.script_pages = pages;
        self.refuse_hit(what, start, end, hit);
    }

    /// After a call that may have unmapped part of `[start, end)`: keeps of the script's pages there only
    /// those still mapped. Streams the maps (no allocation per line: see [`Self::guard`]); the kept pieces are
    /// parts of script pages, as few as the script's own VMAs there.
    pub(super) fn recheck(&mut self, start: u64, end: u64) {
        let mut pages = std::mem::take(&mut self.script_pages);
        let mut keep = Ranges::default();
        if pages.0.iter().any(|&(a, b)| a < end && b > start) {
            for l in read_maps(&mut self.maps_buf)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.parse::<vmspace_proc::MapsLine>().ok())
                .filter(|l| l.start < end && l.end > start)
            {
                for &(a, b) in pages.0.iter().filter(|&&(a, b)| a < l.end && b > l.start) {
                    keep.add(a.max(l.start).max(start), b.min(l.end).min(end));
                }
            }
            pages.remove(start, end);
            for &(a, b) in &keep.0 {
                pages.add(a, b);
            }
        }
        self.script_pages = pages;
    }

    /// The page range of mlock/munlock (`mm/mlock.c: do_mlock`, `sys_munlock`): the start rounded down, the
    /// length plus the start's offset rounded up, both with the kernel's wrapping arithmetic; `None` when the
    /// kernel refuses or does nothing (empty or wrapping range).
    pub(super) fn lock_range(addr: u64, len: u64) -> Option<(u64, u64)> {
        let len = len.wrapping_add(addr & (PAGE - 1)).wrapping_add(PAGE - 1) & !(PAGE - 1);
        let start = addr & !(PAGE - 1);
        start.checked_add(len).filter(|_| len > 0).map(|end| (start, end))
    }

    /// The page range of mseal and pkey_mprotect: the start must be aligned (else EINVAL), the length is
    /// rounded up (`PAGE_ALIGN`, wrapping); `None` when the kernel refuses or does nothing.
    pub(super) fn aligned_range(addr: u64, len: u64) -> Option<(u64, u64)> {
        let len = len.wrapping_add(PAGE - 1) & !(PAGE - 1);
        if !addr.is_multiple_of(PAGE) || len == 0 {
            return None;
        }
        addr.checked_add(len).map(|end| (addr, end))
    }

    /// The guard of mlock, mlock2 and munlock: a walk from the start over [`Self::lock_range`].
    pub(super) fn guard_lock(&mut self, what: &str, addr: u64, len: u64) {
        if let Some((start, end)) = Self::lock_range(addr, len) {
            self.guard_walk(what, start, end, false);
        }
    }

    /// Where a growth of a script VMA by an access to `page` would end (module docs, "Guard"): a fault on an
    /// unmapped page below a growsdown VMA grows the VMA down to that page, so when `page` lies outside the
    /// arena, is not mapped, and the next VMA above it is the script's (it overlaps the arena, or its lowest
    /// page is a script page), the pages `[page, that VMA's start)` become the script's if the access
    /// succeeds. `None` otherwise (inside the arena, already mapped, or below a runner's VMA: a growth of the
    /// runner's own stack stays the runner's). Costs one `mincore` per page outside the arena and the script's
    /// pages, and a streamed read of the maps (no allocation) per unmapped one.
    pub(super) fn script_growth_end(&mut self, page: u64) -> Option<u64> {
        if self.arena.contains(page) || page >= TASK_SIZE || self.script_pages.covers(page, page + PAGE) {
            return None;
        }
        if is_mapped(page) {
            return None;
        }
        let (arena, pages) = (self.arena, std::mem::take(&mut self.script_pages));
        let above = read_maps(&mut self.maps_buf)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse::<vmspace_proc::MapsLine>().ok())
            .find(|l| l.end > page && !is_vsyscall(l))
            .filter(|l| {
                l.start > page && (arena.overlaps(l.start, l.end) || pages.covers(l.start, l.start + PAGE))
            })
            .map(|l| l.start);
        self.script_pages = pages;
        above
    }
}

/// Whether a VMA covers `page` (page-aligned): `mincore` answers ENOMEM where nothing is mapped, whatever the
/// protection of what is.
pub(super) fn is_mapped(page: u64) -> bool {
    let mut vec = [0u8; 1];
    // SAFETY: mincore only reports on `[page, page + PAGE)` and writes one byte per page into `vec`, which
    // holds one.
    unsafe { libc::mincore(page as *mut c_void, PAGE as usize, vec.as_mut_ptr()) == 0 }
}

/// The `[vsyscall]` line: x86-64's gate page, which `/proc/PID/maps` shows but which is not a VMA.
fn is_vsyscall(l: &vmspace_proc::MapsLine) -> bool {
    matches!(&l.name, Some(vmspace_proc::MapsName::Special(n)) if n == "[vsyscall]")
}
