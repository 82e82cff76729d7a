//! `get_unmapped_area`: where a mapping goes (`mm/mmap.c`, `mm/vma.c`, x86's `arch/x86/kernel/sys_x86_64.c:
//! arch_get_unmapped_area_topdown`, `arch_get_unmapped_area`, `find_start_end`; `fs/hugetlbfs/inode.c:
//! hugetlb_get_unmapped_area`).
//!
//! * `MAP_FIXED`: the address as given; only the final checks apply.
//! * `MAP_32BIT`: bottom-up in `[1 GiB, 2 GiB)` (`find_start_end`; the kernel moves the start up by a random
//!   number of pages below 32 MiB, the engine starts at [`MmConfig::map_32bit_base`](super::MmConfig)); a
//!   hint is rounded *up* to a page and used if the mapping then ends below 2 GiB and fits before the next
//!   VMA's start gap; ENOMEM when no gap of that window fits (no fallback).
//! * A hint: used (rounded down to a page) when `[hint, hint+len)` fits below `TASK_SIZE` and ends at or below
//!   the next VMA's start gap (a growsdown VMA keeps `stack_guard_gap` free below it).
//! * Otherwise the highest free gap below `mmap_base` and above the effective `mmap_min_addr` (the larger of
//!   the sysctl and `CONFIG_LSM_MMAP_MIN_ADDR`, [`super::MmConfig::min_addr`]; 4 GiB with `MAP_ABOVE4G`)
//!   (`unmapped_area_topdown`: the tree's reverse gap search, O(log n) through the per-child max gaps,
//!   `MapleTree::empty_area_rev`; a candidate that ends inside the guard gap of a growsdown VMA above it lowers
//!   the limit and searches again); if none, the bottom-up search above `TASK_UNMAPPED_BASE`
//!   (`arch_get_unmapped_area`, which first retries the hint rounded up).
//! * Anonymous private mappings without a hint whose length is a multiple of 2 MiB are placed 2 MiB-aligned
//!   when THP is configured (`thp_get_unmapped_area`: search `len + 2 MiB` and align within it; a `MAP_FIXED`
//!   mapping at 0 stays at 0).
//! * hugetlb (`hugetlb_get_unmapped_area`): the length must be a multiple of the huge page size and a
//!   `MAP_FIXED` address aligned to it (EINVAL); a hint is rounded up to a huge page; searches return
//!   huge-page aligned addresses (`info.align_mask`, here by searching `len + size - PAGE_SIZE` and aligning
//!   within the gap found).
//!
//! Final checks (`__get_unmapped_area`): a result in the kernel's error range (the top 4095 values, which only
//! a `MAP_FIXED` address can produce) is returned as that error: `IS_ERR_VALUE(addr)` holds, so the address is
//! handed back unchanged and the syscall's caller reads it as `-errno` (`0xffffffffffffffff` is EPERM,
//! `0xffffffffffffff00` errno 256); then a result ending beyond `TASK_SIZE` is ENOMEM, an unaligned one EINVAL,
//! one below the sysctl `vm.mmap_min_addr` EPERM without CAP_SYS_RAWIO (`cap_mmap_addr`). Of the calls that return an address only mmap can
//! meet the error range: mremap checks its new address against `TASK_SIZE - new_len` first
//! (`check_mremap_params`, EINVAL), and a break there rounds up to 0 and asks for a length beyond `TASK_SIZE`
//! (`check_brk_limits`, which brk answers with the old break); `scripts/regress/top-of-address-space.script`.

use super::VmFlags;
use super::config::DEFAULT_MAP_WINDOW as DEFAULT_MAP_WINDOW_;
use super::{Errno, MapFlags, MmWrite, PAGE_MASK, PAGE_SIZE, TASK_SIZE, VmFile};

/// `PMD_SIZE`.
const PMD_SIZE: u64 = 2 << 20;
/// x86-64 `TASK_UNMAPPED_BASE` (`PAGE_ALIGN(TASK_SIZE / 3)`), the bottom-up fallback's floor.
const TASK_UNMAPPED_BASE: u64 = (TASK_SIZE / 3 + PAGE_SIZE - 1) & PAGE_MASK;
/// The end of the `MAP_32BIT` window (`find_start_end`).
const MAP_32BIT_END: u64 = 0x8000_0000;
/// `SZ_4G`: the low limit of a `MAP_ABOVE4G` search.
const SZ_4G: u64 = 1 << 32;
/// `MAX_ERRNO`: the top 4095 values of an address are error codes (`IS_ERR_VALUE`).
const MAX_ERRNO: u64 = 4095;

/// `IS_ERR_VALUE(x)`: `x` is the negation of an errno.
pub(crate) fn is_err_value(x: u64) -> bool {
    x >= MAX_ERRNO.wrapping_neg()
}

/// Under the mmap write lock: the VMA reads (`find`, `next_from`) go through the call's tree cursor, the gap
/// searches through the tree's max gaps (their own walk, as the kernel's `vma_iter_area_lowest` /
/// `vma_iter_area_highest` use an iterator of their own).
impl MmWrite<'_> {
    /// `__get_unmapped_area(file, addr, len, pgoff, flags)`; `file` is `None` for anonymous memory (shared
    /// anonymous memory included: its shmem object does not exist yet).
    pub(crate) fn get_unmapped_area(
        &self,
        file: Option<&VmFile>,
        addr: u64,
        len: u64,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        let res = if let Some(size) = file.and_then(VmFile::huge_page_size) {
            self.hugetlb_get_unmapped_area(size, addr, len, flags)
        } else if self.cfg.transparent_hugepage
            && file.is_none()
            && !flags.contains(MapFlags::SHARED)
            && addr == 0
            && len.is_multiple_of(PMD_SIZE)
        {
            // thp_get_unmapped_area_vmflags.
            match self.thp_area(len, flags) {
                Some(a) => Ok(a),
                None => self.arch_get_unmapped_area_topdown(addr, len, flags, PAGE_SIZE),
            }
        } else {
            self.arch_get_unmapped_area_topdown(addr, len, flags, PAGE_SIZE)
        }?;
        if is_err_value(res) {
            return Err(Errno::from_raw(res.wrapping_neg() as i32));
        }
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

    /// `hugetlb_get_unmapped_area` for huge pages of `size` bytes.
    fn hugetlb_get_unmapped_area(
        &self,
        size: u64,
        addr: u64,
        len: u64,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        if len & (size - 1) != 0 {
            return Err(Errno::EINVAL);
        }
        if flags.contains(MapFlags::FIXED) && addr & (size - 1) != 0 {
            return Err(Errno::EINVAL);
        }
        // ALIGN(addr, size), wrapping as C does.
        let addr0 = if addr != 0 { addr.wrapping_add(size - 1) & !(size - 1) } else { 0 };
        self.arch_get_unmapped_area_topdown(addr0, len, flags, size)
    }

    /// `__thp_get_unmapped_area` with `off = 0`, size `PMD_SIZE`, top-down.
    fn thp_area(&self, len: u64, flags: MapFlags) -> Option<u64> {
        let len_pad = len.checked_add(PMD_SIZE)?;
        let ret = self.arch_get_unmapped_area_topdown(0, len_pad, flags, PAGE_SIZE).ok()?;
        // Do not align when the placement is exactly the address asked for (only `MAP_FIXED` at 0 gets here).
        if ret == 0 {
            return Some(0);
        }
        let off_sub = 0u64.wrapping_sub(ret) & (PMD_SIZE - 1);
        if off_sub == 0 {
            return Some(ret + PMD_SIZE);
        }
        Some(ret + off_sub)
    }

    /// x86's `arch_get_unmapped_area_topdown`; `align` is the placement alignment of a search (a page, or a
    /// huge page: `info.align_mask`).
    fn arch_get_unmapped_area_topdown(
        &self,
        addr0: u64,
        len: u64,
        flags: MapFlags,
        align: u64,
    ) -> Result<u64, Errno> {
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        if flags.contains(MapFlags::FIXED) {
            return Ok(addr0);
        }
        // MAP_32BIT mappings use the legacy bottom-up layout.
        if !flags.contains(MapFlags::BELOW_2G) {
            if addr0 != 0 {
                let addr = addr0 & PAGE_MASK;
                // mmap_address_hint_valid.
                let valid = TASK_SIZE - len >= addr
                    && (addr > DEFAULT_MAP_WINDOW_) == (addr + len > DEFAULT_MAP_WINDOW_);
                if valid {
                    match self.find(addr) {
                        None => return Ok(addr),
                        Some(v) if addr + len <= self.vm_start_gap(v) => return Ok(addr),
                        Some(_) => {}
                    }
                }
            }
            let floor = if flags.contains(MapFlags::ABOVE4G) { SZ_4G } else { PAGE_SIZE };
            let low = floor.max(self.cfg.min_addr());
            if let Some(a) = self.unmapped_area_topdown(len, align, low, self.cfg.mmap_base) {
                return Ok(a);
            }
        }
        self.arch_get_unmapped_area(addr0, len, flags, align)
    }

    /// x86's `arch_get_unmapped_area` (bottom-up; `find_start_end` picks the window).
    fn arch_get_unmapped_area(&self, addr: u64, len: u64, flags: MapFlags, align: u64) -> Result<u64, Errno> {
        if flags.contains(MapFlags::FIXED) {
            return Ok(addr);
        }
        let (begin, end) = if flags.contains(MapFlags::BELOW_2G) {
            (self.cfg.map_32bit_base, MAP_32BIT_END)
        } else {
            (TASK_UNMAPPED_BASE, TASK_SIZE)
        };
        if len > end {
            return Err(Errno::ENOMEM);
        }
        if addr != 0 {
            let addr = addr.wrapping_add(PAGE_SIZE - 1) & PAGE_MASK;
            let fits = end - len >= addr
                && match self.find(addr) {
                    None => true,
                    Some(v) => addr + len <= self.vm_start_gap(v),
                };
            if fits {
                return Ok(addr);
            }
        }
        self.unmapped_area(len, align, begin.max(self.cfg.min_addr()), end).ok_or(Errno::ENOMEM)
    }

    /// `unmapped_area_topdown` (no start gap: nothing here is a shadow stack): the highest `align`-aligned
    /// `len`-byte hole in `[low, high)`, as the tree's reverse gap search finds it (searching `len + align -
    /// PAGE_SIZE` bytes and aligning down from the top of the gap); a candidate that ends in the guard gap of a
    /// growsdown VMA above it lowers `high` to that gap and searches again.
    fn unmapped_area_topdown(&self, len: u64, align: u64, low: u64, mut high: u64) -> Option<u64> {
        let padded = len.checked_add(align - PAGE_SIZE)?;
        loop {
            if high <= low {
                return None;
            }
            let gap = self.tree().empty_area_rev(low, high - 1, padded).ok()?;
            let gap_end = gap + padded;
            if let Some(next) = self.next_from(gap_end)
                && next.flags().intersects(VmFlags::GROWSDOWN)
                && self.vm_start_gap(next) < gap_end
            {
                high = self.vm_start_gap(next);
                continue;
            }
            return Some((gap_end - len) & !(align - 1));
        }
    }

    /// `unmapped_area` (bottom-up): the lowest `align`-aligned `len`-byte hole in `[low, high)` (the tree's
    /// forward gap search for `len + align - PAGE_SIZE` bytes, aligned up within it); a candidate that would
    /// enter the guard gap of a growsdown VMA after it moves `low` past that VMA and searches again.
    fn unmapped_area(&self, len: u64, align: u64, mut low: u64, high: u64) -> Option<u64> {
        let padded = len.checked_add(align - PAGE_SIZE)?;
        loop {
            if high <= low {
                return None;
            }
            let gap = self.tree().empty_area(low, high - 1, padded).ok()?;
            if let Some(next) = self.next_from(gap + padded)
                && next.flags().intersects(VmFlags::GROWSDOWN)
                && self.vm_start_gap(next) < gap + padded
            {
                low = next.end();
                continue;
            }
            return Some(gap.wrapping_add(align - 1) & !(align - 1));
        }
    }
}
