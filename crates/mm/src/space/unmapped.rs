//! `get_unmapped_area`: where a mapping goes (`mm/mmap.c`, `mm/vma.c`, x86's
//! `arch_get_unmapped_area_topdown`).
//!
//! * `MAP_FIXED`: the address as given; only the final checks apply.
//! * A hint: used (page-aligned) when `[hint, hint+len)` fits below `TASK_SIZE` and ends at or below the
//!   next VMA's start gap (a growsdown VMA keeps `stack_guard_gap` free below it).
//! * Otherwise the highest free gap below `mmap_base` and above `mmap_min_addr` (`unmapped_area_topdown`:
//!   the tree's reverse gap search, O(log n) through the per-child max gaps, `MapleTree::empty_area_rev`; a
//!   candidate that ends inside the guard gap of a growsdown VMA above it lowers the limit and searches
//!   again); if none, the lowest gap above `TASK_UNMAPPED_BASE` (`unmapped_area`: `empty_area`, retried above
//!   a growsdown VMA whose guard gap the candidate would enter).
//! * Anonymous mappings without a hint whose length is a multiple of 2 MiB are placed 2 MiB-aligned
//!   (`thp_get_unmapped_area`: search `len + 2 MiB` and align within it).
//!
//! Final checks (`__get_unmapped_area`): a result ending beyond `TASK_SIZE` is ENOMEM, an unaligned one
//! EINVAL, one below `mmap_min_addr` EPERM without CAP_SYS_RAWIO.

use super::VmFlags;
use super::config::DEFAULT_MAP_WINDOW as DEFAULT_MAP_WINDOW_;
use super::{Errno, MapFlags, Mm, PAGE_MASK, PAGE_SIZE, TASK_SIZE};

/// `PMD_SIZE`.
const PMD_SIZE: u64 = 2 << 20;
/// x86-64 `TASK_UNMAPPED_BASE` (`PAGE_ALIGN(TASK_SIZE / 3)`), the bottom-up fallback's floor.
const TASK_UNMAPPED_BASE: u64 = (TASK_SIZE / 3 + PAGE_SIZE - 1) & PAGE_MASK;

impl Mm {
    /// `__get_unmapped_area(file, addr, len, pgoff, flags)`; `anon` is true without a file (shared
    /// anonymous memory counts as anonymous here: its shmem object does not exist yet).
    pub(crate) fn get_unmapped_area(
        &self,
        anon: bool,
        addr: u64,
        len: u64,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        let res = if anon && !flags.contains(MapFlags::SHARED) && addr == 0 && len.is_multiple_of(PMD_SIZE) {
            // thp_get_unmapped_area_vmflags.
            match self.thp_area(len, flags) {
                Some(a) => Ok(a),
                None => self.arch_get_unmapped_area_topdown(addr, len, flags),
            }
        } else {
            self.arch_get_unmapped_area_topdown(addr, len, flags)
        }?;
        if res > TASK_SIZE - len {
            return Err(Errno::ENOMEM);
        }
        if res & !PAGE_MASK != 0 {
            return Err(Errno::EINVAL);
        }
        if res < self.cfg.mmap_min_addr && !self.cfg.cap_sys_rawio {
            return Err(Errno::EPERM);
        }
        Ok(res)
    }

    /// `__thp_get_unmapped_area` with `off = 0`, size `PMD_SIZE`, top-down.
    fn thp_area(&self, len: u64, flags: MapFlags) -> Option<u64> {
        let len_pad = len.checked_add(PMD_SIZE)?;
        let ret = self.arch_get_unmapped_area_topdown(0, len_pad, flags).ok()?;
        let off_sub = 0u64.wrapping_sub(ret) & (PMD_SIZE - 1);
        if off_sub == 0 {
            return Some(ret + PMD_SIZE);
        }
        Some(ret + off_sub)
    }

    /// x86's `arch_get_unmapped_area_topdown`.
    fn arch_get_unmapped_area_topdown(&self, addr0: u64, len: u64, flags: MapFlags) -> Result<u64, Errno> {
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        if flags.contains(MapFlags::FIXED) {
            return Ok(addr0);
        }
        if addr0 != 0 {
            let addr = addr0 & PAGE_MASK;
            // mmap_address_hint_valid.
            let valid =
                TASK_SIZE - len >= addr && (addr > DEFAULT_MAP_WINDOW_) == (addr + len > DEFAULT_MAP_WINDOW_);
            if valid {
                match self.find(addr) {
                    None => return Ok(addr),
                    Some(v) if addr + len <= self.vm_start_gap(v) => return Ok(addr),
                    Some(_) => {}
                }
            }
        }
        let low = PAGE_SIZE.max(self.cfg.mmap_min_addr);
        if let Some(a) = self.unmapped_area_topdown(len, low, self.cfg.mmap_base) {
            return Ok(a);
        }
        // Bottom-up fallback (arch_get_unmapped_area).
        self.unmapped_area(len, TASK_UNMAPPED_BASE.max(self.cfg.mmap_min_addr), TASK_SIZE)
            .ok_or(Errno::ENOMEM)
    }

    /// `unmapped_area_topdown` (no alignment, no start gap: nothing here is a shadow stack): the highest
    /// `len`-byte hole in `[low, high)`, as the tree's reverse gap search finds it; a candidate that ends in
    /// the guard gap of a growsdown VMA above it lowers `high` to that gap and searches again.
    fn unmapped_area_topdown(&self, len: u64, low: u64, mut high: u64) -> Option<u64> {
        loop {
            if high <= low {
                return None;
            }
            let gap = self.tree().empty_area_rev(low, high - 1, len).ok()?;
            let gap_end = gap + len;
            if let Some(next) = self.next_from(gap_end)
                && next.flags().intersects(VmFlags::GROWSDOWN)
                && self.vm_start_gap(next) < gap_end
            {
                high = self.vm_start_gap(next);
                continue;
            }
            return Some(gap);
        }
    }

    /// `unmapped_area` (bottom-up): the lowest `len`-byte hole in `[low, high)` (the tree's forward gap
    /// search); a candidate that would enter the guard gap of a growsdown VMA after it moves `low` past that
    /// VMA and searches again.
    fn unmapped_area(&self, len: u64, mut low: u64, high: u64) -> Option<u64> {
        loop {
            if high <= low {
                return None;
            }
            let gap = self.tree().empty_area(low, high - 1, len).ok()?;
            if let Some(next) = self.next_from(gap + len)
                && next.flags().intersects(VmFlags::GROWSDOWN)
                && self.vm_start_gap(next) < gap + len
            {
                low = next.end();
                continue;
            }
            return Some(gap);
        }
    }
}
