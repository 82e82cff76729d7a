//! `get_unmapped_area`: where a mapping goes (`mm/mmap.c`, `mm/vma.c`, x86's `arch/x86/kernel/sys_x86_64.c:
//! arch_get_unmapped_area_topdown`, `arch_get_unmapped_area`, `find_start_end`; `fs/hugetlbfs/inode.c:
//! hugetlb_get_unmapped_area`; `mm/huge_memory.c: thp_get_unmapped_area`; `mm/shmem.c:
//! shmem_get_unmapped_area`).
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
//! * The file's own method (`file_operations.get_unmapped_area`, [`VmFile::area`]), when it has one:
//!   - `thp_get_unmapped_area` (ext2/ext4, xfs, btrfs, erofs; only with `CONFIG_TRANSPARENT_HUGEPAGE`, and
//!     whatever the THP sysfs modes say): when the file range `[off, off + len)` covers a whole 2 MiB-aligned
//!     block of offsets, search `len + 2 MiB` bytes (with the caller's hint) and move the result up so that
//!     address and file offset agree modulo 2 MiB, by a whole 2 MiB when they already do
//!     (`__thp_get_unmapped_area`, [`thp_placement`]); a result equal to the hint (free for the padded
//!     length; `MAP_FIXED`) is used as is; if the padded search fails or nothing is to be aligned, the plain
//!     search.
//!   - `shmem_get_unmapped_area` (tmpfs, memfd, SysV shared memory, and shared anonymous memory, whose object
//!     `shmem_zero_setup` makes on the internal mount): the plain search, then, with THP configured and
//!     `shmem_enabled` not `deny`, unless `MAP_FIXED` or a free hint, when the mount allows huge pages
//!     (`huge=` not `never`; the internal mount follows `shmem_enabled`) or `shmem_enabled` is `force`, a
//!     second search of `len + 2 MiB - 4 KiB` placed at the file offset modulo 2 MiB ([`shmem_placement`]).
//! * Anonymous private mappings without a hint whose length is a multiple of 2 MiB are placed 2 MiB-aligned
//!   when THP is configured (`thp_get_unmapped_area_vmflags` with offset 0; a `MAP_FIXED` mapping at 0 stays
//!   at 0).
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
use super::{Errno, FileKind, MapFlags, MmWrite, PAGE_MASK, PAGE_SIZE, TASK_SIZE, ThpMode, VmFile};
use vmspace_abi::{FileArea, PAGE_SHIFT};

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
    /// anonymous memory included: its shmem object does not exist yet), whose `pgoff` counts as 0.
    pub(crate) fn get_unmapped_area(
        &self,
        file: Option<&VmFile>,
        addr: u64,
        len: u64,
        pgoff: u64,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        let thp = self.cfg.transparent_hugepage;
        let res = match file {
            Some(f) => match (f.huge_page_size(), f.area) {
                (Some(size), _) => self.hugetlb_get_unmapped_area(size, addr, len, flags),
                // Without CONFIG_TRANSPARENT_HUGEPAGE `thp_get_unmapped_area` is NULL: the file system installs
                // no method.
                (None, FileArea::Thp) if thp => self.thp_get_unmapped_area(addr, len, pgoff, flags),
                (None, FileArea::Shmem { huge }) => {
                    // The shmem object of shared anonymous memory lives on the internal mount, whose `huge` is
                    // the last `shmem_enabled` mode that was not `deny` or `force`.
                    let huge = if f.kind == FileKind::ShmemZero { self.shm_mnt_huge() } else { huge };
                    self.shmem_get_unmapped_area(huge, addr, len, pgoff, flags)
                }
                (None, _) => self.mm_get_unmapped_area(addr, len, flags),
            },
            // shmem_zero_setup will make the object: shmem's method, with the internal mount (`shm_mnt`).
            None if flags.contains(MapFlags::SHARED) => {
                self.shmem_get_unmapped_area(self.shm_mnt_huge(), addr, len, 0, flags)
            }
            // Larger anonymous mappings without a hint are THP aligned.
            None if thp && addr == 0 && len.is_multiple_of(PMD_SIZE) => {
                self.thp_get_unmapped_area(addr, len, 0, flags)
            }
            None => self.mm_get_unmapped_area(addr, len, flags),
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

    /// `mm_get_unmapped_area`: the address space's own search (top-down: `mm->get_unmapped_area` is
    /// `arch_get_unmapped_area_topdown` under `MMF_TOPDOWN`, the engine's only layout).
    fn mm_get_unmapped_area(&self, addr: u64, len: u64, flags: MapFlags) -> Result<u64, Errno> {
        self.arch_get_unmapped_area_topdown(addr, len, flags, PAGE_SIZE)
    }

    /// `thp_get_unmapped_area_vmflags`: [`thp_placement`]'s PMD-aligned placement, else (nothing to align,
    /// or no room for the padded length) the plain search.
    fn thp_get_unmapped_area(&self, addr: u64, len: u64, pgoff: u64, flags: MapFlags) -> Result<u64, Errno> {
        let placed = thp_placement(addr, len, pgoff, PMD_SIZE, |len_pad| {
            self.mm_get_unmapped_area(addr, len_pad, flags).ok().filter(|&r| !is_err_value(r))
        });
        match placed {
            Some(a) => Ok(a),
            None => self.mm_get_unmapped_area(addr, len, flags),
        }
    }

    /// Whether the internal shmem mount (`shm_mnt`, behind shared anonymous memory) allows huge pages: its
    /// `huge` is set from `shmem_enabled` whenever that is written with a mode above `deny` (`shmem_init`,
    /// `shmem_enabled_store`), and the per-size setting of the PMD size inherits it (the kernel's default
    /// `huge_shmem_orders_inherit`; other sizes `never`). `deny` and `force` are answered before the mount
    /// is asked.
    fn shm_mnt_huge(&self) -> bool {
        matches!(self.cfg.thp_shmem_enabled, ThpMode::Always | ThpMode::WithinSize | ThpMode::Madvise)
    }

    /// `shmem_get_unmapped_area` (`mm/shmem.c`) for a file on a mount whose `huge=` is not `never` (`huge`):
    /// the plain search first; with THP configured, not `deny`, not `MAP_FIXED`, not at a hint that was free,
    /// and a mapping of at least one huge page (`force` or a huge mount), [`shmem_placement`] moves it so that
    /// address and file offset agree modulo the huge page size.
    fn shmem_get_unmapped_area(
        &self,
        huge: bool,
        uaddr: u64,
        len: u64,
        pgoff: u64,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        let addr = self.mm_get_unmapped_area(uaddr, len, flags)?;
        if !self.cfg.transparent_hugepage
            || is_err_value(addr)
            || addr & !PAGE_MASK != 0
            || addr > TASK_SIZE - len
            || self.cfg.thp_shmem_enabled == ThpMode::Deny
            || flags.contains(MapFlags::FIXED)
            || uaddr == addr
            || (self.cfg.thp_shmem_enabled != ThpMode::Force && !huge)
        {
            return Ok(addr);
        }
        let placed = shmem_placement(addr, len, pgoff, PMD_SIZE, |inflated_len| {
            self.mm_get_unmapped_area(uaddr, inflated_len, flags).ok().filter(|&r| !is_err_value(r))
        });
        Ok(placed.unwrap_or(addr))
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

/// `__thp_get_unmapped_area` (`mm/huge_memory.c`) for a mapping of `len` bytes at file page `pgoff`, top-down
/// (`MMF_TOPDOWN`), 64-bit: `None` when it does not apply (the caller then searches for `len` bytes as usual),
/// else the address. It applies when the file range `[off, off + len)` covers a whole `size`-aligned block
/// (`off_end - round_up(off, size) >= size`); it searches for `len + size` bytes with the caller's hint
/// (`search`, which answers `None` for a failed search); a result equal to the hint is used as is (the hint
/// was free for the padded length); otherwise the result moves up by `(off - ret) mod size`, so that address
/// and file offset agree modulo `size`, and by a whole `size` when they already agree (the top-down search
/// returns the top of the gap: the mapping then leaves `size` bytes below it rather than none above).
/// File offsets are the kernel's `loff_t`, wrapping as the kernel's C does.
pub(crate) fn thp_placement(
    addr: u64,
    len: u64,
    pgoff: u64,
    size: u64,
    search: impl FnOnce(u64) -> Option<u64>,
) -> Option<u64> {
    let off = (pgoff << PAGE_SHIFT) as i64;
    let off_end = off.wrapping_add(len as i64);
    // round_up(off, size) on a loff_t.
    let off_align = (off.wrapping_sub(1) | (size as i64 - 1)).wrapping_add(1);
    if off_end <= off_align || (off_end.wrapping_sub(off_align) as u64) < size {
        return None;
    }
    let len_pad = len.checked_add(size)?;
    if (off as u64).wrapping_add(len_pad) < off as u64 {
        return None;
    }
    let ret = search(len_pad)?;
    if ret == addr {
        return Some(addr);
    }
    let off_sub = (off as u64).wrapping_sub(ret) & (size - 1);
    if off_sub == 0 {
        return Some(ret + size);
    }
    Some(ret + off_sub)
}

/// The alignment step of `shmem_get_unmapped_area` (`mm/shmem.c`) for `len` bytes at file page `pgoff`, the
/// plain search having returned `addr`: `None` keeps `addr`. Nothing moves a mapping shorter than a huge
/// page (`size`), one whose offset within a huge page is not 0 and that does not reach the end of the second
/// huge page of the file range it starts in, or one already placed at its offset modulo `size`. Otherwise the
/// search is repeated for `len + size - PAGE_SIZE` bytes (`search`, `None` when it fails) and the result moved
/// up to the next address that agrees with the file offset modulo `size`; `None` if that would end beyond
/// `TASK_SIZE`.
pub(crate) fn shmem_placement(
    addr: u64,
    len: u64,
    pgoff: u64,
    size: u64,
    search: impl FnOnce(u64) -> Option<u64>,
) -> Option<u64> {
    if len < size {
        return None;
    }
    let offset = (pgoff << PAGE_SHIFT) & (size - 1);
    if offset != 0 && offset + len < 2 * size {
        return None;
    }
    if addr & (size - 1) == offset {
        return None;
    }
    let inflated_len = len.checked_add(size - PAGE_SIZE)?;
    if inflated_len > TASK_SIZE {
        return None;
    }
    let inflated_addr = search(inflated_len)?;
    if inflated_addr & !PAGE_MASK != 0 {
        return None;
    }
    let inflated_offset = inflated_addr & (size - 1);
    let mut placed = inflated_addr.wrapping_add(offset).wrapping_sub(inflated_offset);
    if inflated_offset > offset {
        placed = placed.wrapping_add(size);
    }
    if placed > TASK_SIZE - len {
        return None;
    }
    Some(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = PMD_SIZE;
    const P: u64 = PAGE_SIZE;

    /// A search that answers `at` and records the length it was asked for.
    fn at(addr: u64, asked: &mut Option<u64>) -> impl FnOnce(u64) -> Option<u64> + '_ {
        move |len| {
            *asked = Some(len);
            Some(addr)
        }
    }

    #[test]
    fn thp_applies_only_to_a_whole_aligned_block_of_offsets() {
        let mut asked = None;
        // [0, 2 MiB - 4 KiB): no whole block; nothing searched.
        assert_eq!(thp_placement(0, M - P, 0, M, at(0x7f00_0010_0000, &mut asked)), None);
        assert_eq!(asked, None);
        // [4 KiB, 2 MiB + 8 KiB): the only aligned offset inside is 2 MiB, and the range ends 8 KiB past it.
        assert_eq!(thp_placement(0, M + P, 1, M, at(0x7f00_0010_0000, &mut asked)), None);
        // [2 MiB, 4 MiB - 4 KiB): short of the block's end.
        assert_eq!(thp_placement(0, M - P, 512, M, at(0x7f00_0010_0000, &mut asked)), None);
        assert_eq!(asked, None);
        // [0, 2 MiB): the padded search (len + 2 MiB).
        assert!(thp_placement(0, M, 0, M, at(0x7f00_0010_0000, &mut asked)).is_some());
        assert_eq!(asked, Some(2 * M));
        // [4 KiB, 4 MiB): covers [2 MiB, 4 MiB).
        assert!(thp_placement(0, 2 * M - P, 1, M, at(0x7f00_0010_0000, &mut asked)).is_some());
        assert_eq!(asked, Some(3 * M - P));
    }

    #[test]
    fn thp_moves_up_to_the_file_offset_modulo_2m() {
        let mut asked = None;
        // Offset 0, result 1 MiB into a block: up to the next 2 MiB boundary.
        assert_eq!(thp_placement(0, M, 0, M, at(0x7f00_0010_0000, &mut asked)), Some(0x7f00_0020_0000));
        // Offset 4 KiB: address = 4 KiB modulo 2 MiB, the next such above the result.
        assert_eq!(
            thp_placement(0, 2 * M - P, 1, M, at(0x7f00_0010_0000, &mut asked)),
            Some(0x7f00_0000_1000 + M)
        );
        assert_eq!(
            thp_placement(0, 2 * M - P, 1, M, at(0x7f00_0000_0000, &mut asked)),
            Some(0x7f00_0000_1000)
        );
        // Offset 2 MiB + 12 KiB: 12 KiB modulo 2 MiB.
        assert_eq!(thp_placement(0, 2 * M, 515, M, at(0x7f00_0000_5000, &mut asked)), Some(0x7f00_0020_3000));
    }

    /// Top-down (`MMF_TOPDOWN`): a result already at the file offset modulo 2 MiB moves up by a whole 2 MiB,
    /// to the top of the padded gap, as the anonymous placement does.
    #[test]
    fn thp_already_aligned_moves_a_whole_block_up() {
        let mut asked = None;
        assert_eq!(thp_placement(0, M, 0, M, at(0x7f00_0020_0000, &mut asked)), Some(0x7f00_0040_0000));
        assert_eq!(thp_placement(0, 2 * M, 1, M, at(0x7f00_0000_1000, &mut asked)), Some(0x7f00_0020_1000));
    }

    #[test]
    fn thp_keeps_a_result_equal_to_the_hint_and_gives_up_on_a_failed_search() {
        let hint = 0x2000_0000_1000;
        let mut asked = None;
        assert_eq!(thp_placement(hint, M, 0, M, at(hint, &mut asked)), Some(hint), "the hint, unaligned");
        assert_eq!(thp_placement(0, M, 0, M, |_| None), None, "no room for the padding: the plain search");
        // The padded length overflows: no search.
        assert_eq!(thp_placement(0, u64::MAX - M / 2, 0, M, |_| panic!("searched")), None);
    }

    /// File offsets are `loff_t`: a page offset whose byte offset wraps the sign bit gives a negative `off`,
    /// and `off + len_pad` wrapping past 2^64 refuses the alignment.
    #[test]
    fn thp_offsets_wrap_as_loff_t() {
        // off = 2^63 - 2 MiB (positive), [off, off + 4 MiB) crosses the sign: off_end negative, below off_align.
        let pgoff = ((1u64 << 63) - M) >> PAGE_SHIFT;
        assert_eq!(thp_placement(0, 2 * M, pgoff, M, |_| panic!("searched")), None);
        // off = -4 MiB (pgoff near 2^52): [off, off + 4 MiB) covers [-4 MiB, -2 MiB), but off + len_pad
        // (6 MiB) wraps past 2^64.
        let pgoff = (0u64.wrapping_sub(2 * M) >> PAGE_SHIFT) & ((1 << 52) - 1);
        assert_eq!(thp_placement(0, 2 * M, pgoff, M, |_| panic!("searched")), None);
    }

    #[test]
    fn shmem_moves_to_the_file_offset_modulo_the_huge_page() {
        let mut asked = None;
        // Offset 0, 2 MiB, placed at 1 MiB into a block: searched again with len + 2 MiB - 4 KiB, moved up.
        assert_eq!(
            shmem_placement(0x7f00_0010_0000, M, 0, M, at(0x7f00_0030_0000, &mut asked)),
            Some(0x7f00_0040_0000)
        );
        assert_eq!(asked, Some(2 * M - P));
        // Already at its offset modulo 2 MiB: kept (no +2 MiB as in thp).
        assert_eq!(shmem_placement(0x7f00_0020_0000, M, 0, M, |_| panic!("searched")), None);
        // Offset 4 KiB, long enough to reach past the second huge page: 4 KiB modulo 2 MiB.
        assert_eq!(
            shmem_placement(0x7f00_0000_0000, 2 * M, 1, M, at(0x7f00_0000_0000, &mut asked)),
            Some(0x7f00_0000_1000)
        );
        // The inflated result's offset above the file's: the next block.
        assert_eq!(
            shmem_placement(0x7f00_0000_0000, 2 * M, 1, M, at(0x7f00_0000_5000, &mut asked)),
            Some(0x7f00_0020_1000)
        );
    }

    #[test]
    fn shmem_leaves_short_or_misaligned_short_ranges_alone() {
        let never = |_| panic!("searched");
        assert_eq!(shmem_placement(0x7f00_0010_0000, M - P, 0, M, never), None, "shorter than a huge page");
        // Offset 4 KiB and offset + len below 4 MiB: nothing to gain.
        assert_eq!(shmem_placement(0x7f00_0010_0000, M, 1, M, |_| panic!("searched")), None);
        assert_eq!(shmem_placement(0x7f00_0010_0000, M, 0, M, |_| None), None, "the second search failed");
        // A result that would end beyond TASK_SIZE keeps the first placement.
        let top = TASK_SIZE - 2 * M;
        assert_eq!(shmem_placement(top + P, M, 0, M, |_| Some(top + M + P)), None);
    }
}
