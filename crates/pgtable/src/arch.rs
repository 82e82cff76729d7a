//! The x86-64 page-table geometry and entry formats (`arch/x86/include/asm/pgtable_types.h`,
//! `pgtable_64_types.h`, `include/linux/swapops.h`).
//!
//! # Geometry
//!
//! Four levels of tables of [`PTRS_PER_TABLE`] 8-byte entries (512 on x86-64): the PGD (bits 39-47 of an
//! address), PUD (30-38), PMD (21-29) and PTE table (12-20), covering `2^48` bytes; the user half is the lower
//! `2^47` (`TASK_SIZE`). The kernel's P4D level is folded (4-level paging, as the live kernel runs without
//! `la57`). Under `--cfg loom` the tables have 4 entries and a page holds 16 bytes of contents, so that a
//! model's tables and pages stay small enough to explore; every shift below is derived from
//! [`TABLE_SHIFT`], so the code is the same.
//!
//! # Leaf entries ([`Pte`])
//!
//! A present entry is the hardware format: bit 0 present, 1 writable, 2 user, 5 accessed, 6 dirty, 63 NX, the
//! page frame number in bits 12-51; the three software bits the kernel uses on x86-64 are bit 9 `_PAGE_SPECIAL`
//! (no `struct page` behind it: the shared zero page), bit 10 `_PAGE_UFFD_WP` and bit 11 `_PAGE_SOFT_DIRTY`.
//! Bit 8 (`_PAGE_GLOBAL`, never set in user entries) doubles as `_PAGE_PROTNONE` when bit 0 is clear: a
//! `PROT_NONE` mapping keeps its pages mapped in entries the MMU treats as absent but the kernel treats as
//! present (`pte_present` is `P | PROTNONE`).
//!
//! A non-present, non-zero entry with bit 8 clear is a *swap entry*: a type in bits 59-63 and an offset in bits
//! 9-58, plus three software bits in bits 1-3 (`_PAGE_SWP_SOFT_DIRTY`, `_PAGE_SWP_UFFD_WP`,
//! `_PAGE_SWP_EXCLUSIVE`). vmspace has no swap device; the one swap type it uses is the kernel's *PTE marker*
//! (`SWP_PTE_MARKER`), whose offset is a [`Marker`] bit set: `PTE_MARKER_UFFD_WP`, `PTE_MARKER_POISONED` and
//! `PTE_MARKER_GUARD` (the guard regions of `MADV_GUARD_INSTALL`). The kernel stores the offset inverted (an
//! L1TF mitigation); the value is irrelevant here, so it is stored plainly.
//!
//! # Protections ([`PageProt`])
//!
//! A VMA's `vm_page_prot` is the template for its entries: `protection_map[]` of x86-64 indexed by
//! `VM_READ|VM_WRITE|VM_EXEC|VM_SHARED` (`vm_get_page_prot`). Every value carries `_PAGE_ACCESSED` (`___A`), so
//! an entry made from it is young at once; private mappings never carry `_PAGE_RW` (writes go through the COW
//! fault), nor do shared mappings that want write notification (`vma_set_page_prot`).

use vmspace_abi::VmFlags;

/// log2 of the entries in one table: 9 on x86-64 (loom: 2).
#[cfg(not(loom))]
pub const TABLE_SHIFT: u32 = 9;
/// log2 of the entries in one table: 9 on x86-64 (loom: 2).
#[cfg(loom)]
pub const TABLE_SHIFT: u32 = 2;
/// Entries in one table (`PTRS_PER_PTE`, `PTRS_PER_PMD`, `PTRS_PER_PUD`, `PTRS_PER_PGD`).
pub const PTRS_PER_TABLE: usize = 1 << TABLE_SHIFT;
/// `PAGE_SHIFT`.
pub const PAGE_SHIFT: u32 = vmspace_abi::PAGE_SHIFT;
/// `PAGE_SIZE`.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// `PMD_SHIFT`: the span of one PTE table is `1 << PMD_SHIFT` bytes (2 MiB).
pub const PMD_SHIFT: u32 = PAGE_SHIFT + TABLE_SHIFT;
/// `PUD_SHIFT` (1 GiB).
pub const PUD_SHIFT: u32 = PMD_SHIFT + TABLE_SHIFT;
/// `PGDIR_SHIFT` (512 GiB).
pub const PGDIR_SHIFT: u32 = PUD_SHIFT + TABLE_SHIFT;
/// Bytes mapped by one PMD entry (one PTE table).
pub const PMD_SIZE: u64 = 1 << PMD_SHIFT;
/// Bytes mapped by one PUD entry (one PMD table).
pub const PUD_SIZE: u64 = 1 << PUD_SHIFT;
/// Bytes mapped by one PGD entry (one PUD table).
pub const PGDIR_SIZE: u64 = 1 << PGDIR_SHIFT;
/// The end of the address space the four levels translate (`2^48`; loom: `2^20`). Addresses at or above it
/// are never mapped.
pub const VA_END: u64 = 1 << (PGDIR_SHIFT + TABLE_SHIFT);
/// 64-bit words of contents in one page: 512 (loom: 2, so that a page is two model atomics).
#[cfg(not(loom))]
pub const PAGE_WORDS: usize = 512;
/// 64-bit words of contents in one page: 512 (loom: 2, so that a page is two model atomics).
#[cfg(loom)]
pub const PAGE_WORDS: usize = 2;
/// Bytes of contents in one page as stored (`PAGE_SIZE`; loom: 16). Offsets at or beyond it read as zero and
/// cannot be written (loom only).
pub const PAGE_BYTES: usize = PAGE_WORDS * 8;

/// The table level of an entry: 0 = PTE, 1 = PMD, 2 = PUD, 3 = PGD.
pub(crate) type Level = u32;

/// The shift of the addresses one entry at `level` maps.
#[inline(always)]
pub(crate) const fn level_shift(level: Level) -> u32 {
    PAGE_SHIFT + TABLE_SHIFT * level
}

/// Index of `addr`'s entry in its table at `level` (`pte_index`, `pmd_index`, ...).
#[inline(always)]
pub(crate) const fn index(addr: u64, level: Level) -> usize {
    ((addr >> level_shift(level)) as usize) & (PTRS_PER_TABLE - 1)
}

/// The end of the span of `addr`'s entry at `level`, capped at `end` (`pmd_addr_end` and friends; the
/// kernel's `boundary - 1 < end - 1` comparison, so that an `end` of 0 means the top of the address space).
#[inline(always)]
pub(crate) const fn addr_end(addr: u64, end: u64, level: Level) -> u64 {
    let size = 1u64 << level_shift(level);
    let boundary = (addr + size) & !(size - 1);
    if boundary.wrapping_sub(1) < end.wrapping_sub(1) { boundary } else { end }
}

/// Entry bits, named as in `pgtable_types.h`.
pub mod bits {
    /// `_PAGE_PRESENT`.
    pub const PRESENT: u64 = 1 << 0;
    /// `_PAGE_RW`.
    pub const RW: u64 = 1 << 1;
    /// `_PAGE_USER`.
    pub const USER: u64 = 1 << 2;
    /// `_PAGE_PWT`.
    pub const PWT: u64 = 1 << 3;
    /// `_PAGE_PCD`.
    pub const PCD: u64 = 1 << 4;
    /// `_PAGE_ACCESSED`: set by the MMU on any access (the "young" bit).
    pub const ACCESSED: u64 = 1 << 5;
    /// `_PAGE_DIRTY`: set by the MMU on a write.
    pub const DIRTY: u64 = 1 << 6;
    /// `_PAGE_GLOBAL`; `_PAGE_PROTNONE` when `PRESENT` is clear.
    pub const PROTNONE: u64 = 1 << 8;
    /// `_PAGE_SPECIAL` (`_PAGE_SOFTW1`): no refcounted frame behind the entry (the zero page).
    pub const SPECIAL: u64 = 1 << 9;
    /// `_PAGE_UFFD_WP` (`_PAGE_SOFTW2`): userfaultfd write-protected.
    pub const UFFD_WP: u64 = 1 << 10;
    /// `_PAGE_SOFT_DIRTY` (`_PAGE_SOFTW3`). The live kernel is built without `CONFIG_MEM_SOFT_DIRTY`; the bit is
    /// kept so that the soft-dirty rules (set on write faults and moves) can be modelled when a config wants it.
    pub const SOFT_DIRTY: u64 = 1 << 11;
    /// `_PAGE_NX`.
    pub const NX: u64 = 1 << 63;
    /// The page frame number field, bits 12-51 (`PTE_PFN_MASK`).
    pub const PFN_MASK: u64 = ((1u64 << 52) - 1) & !((1u64 << 12) - 1);
    /// `_PAGE_CHG_MASK`: what `pte_modify` keeps from the old entry (the frame, cache bits, special, accessed,
    /// dirty, soft-dirty, uffd-wp); everything else comes from the new protection.
    pub const CHG_MASK: u64 = PFN_MASK | PCD | PWT | SPECIAL | ACCESSED | DIRTY | SOFT_DIRTY | UFFD_WP;

    /// `_PAGE_SWP_SOFT_DIRTY` (non-present entries).
    pub const SWP_SOFT_DIRTY: u64 = 1 << 1;
    /// `_PAGE_SWP_UFFD_WP` (non-present entries).
    pub const SWP_UFFD_WP: u64 = 1 << 2;
    /// `_PAGE_SWP_EXCLUSIVE` (non-present entries).
    pub const SWP_EXCLUSIVE: u64 = 1 << 3;
    /// First bit of a swap entry's offset.
    pub const SWP_OFFSET_SHIFT: u32 = 9;
    /// First bit of a swap entry's type (5 bits).
    pub const SWP_TYPE_SHIFT: u32 = 59;
    /// The swap type of PTE markers (`SWP_PTE_MARKER`, the last type).
    pub const SWP_PTE_MARKER: u64 = 31;
}

/// A PTE marker's bits (`pte_marker` in `include/linux/swapops.h`): what a non-present entry that maps nothing
/// still records.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Marker(u64);

impl Marker {
    /// `PTE_MARKER_UFFD_WP`: a userfaultfd write-protection survives the page's absence.
    pub const UFFD_WP: Marker = Marker(1 << 0);
    /// `PTE_MARKER_POISONED`: the page was lost to a memory error (`MADV_HWPOISON` leaves these behind on swapin
    /// failure; an access raises `SIGBUS`).
    pub const POISONED: Marker = Marker(1 << 1);
    /// `PTE_MARKER_GUARD`: a guard region (`MADV_GUARD_INSTALL`): any access raises `SIGSEGV`.
    pub const GUARD: Marker = Marker(1 << 2);
    /// Every defined marker bit.
    pub const ALL: Marker = Marker(0b111);

    /// The raw bits.
    pub const fn bits(self) -> u64 {
        self.0
    }
    /// The marker with exactly `bits` (undefined bits dropped).
    pub const fn from_bits_truncate(bits: u64) -> Marker {
        Marker(bits & Marker::ALL.0)
    }
    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Marker) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether any bit of `other` is set.
    pub const fn intersects(self, other: Marker) -> bool {
        self.0 & other.0 != 0
    }
    /// The union.
    pub const fn union(self, other: Marker) -> Marker {
        Marker(self.0 | other.0)
    }
    /// The bits of `self` that are also in `other`.
    pub const fn intersection(self, other: Marker) -> Marker {
        Marker(self.0 & other.0)
    }
    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::fmt::Debug for Marker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        for (m, n) in [(Marker::UFFD_WP, "UFFD_WP"), (Marker::POISONED, "POISONED"), (Marker::GUARD, "GUARD")]
        {
            if self.contains(m) {
                parts.push(n);
            }
        }
        write!(f, "Marker({})", parts.join("|"))
    }
}

/// A page frame number: the index of a frame in [`crate::Memory`]'s frame table. PFN 0 is the shared zero page.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Pfn(pub(crate) u64);

impl Pfn {
    /// The shared zero page (`my_zero_pfn`): mapped read-only by anonymous read faults, never refcounted.
    pub const ZERO: Pfn = Pfn(0);

    /// The frame number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// One page-table entry's value (`pte_t`). A plain word; tables hold them in atomics.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Pte(pub(crate) u64);

impl Pte {
    /// The empty entry (`pte_none`).
    pub const NONE: Pte = Pte(0);

    /// The raw word.
    pub const fn raw(self) -> u64 {
        self.0
    }
    /// An entry from its raw word (no check: any word is some entry).
    pub const fn from_raw(v: u64) -> Pte {
        Pte(v)
    }
    /// `mk_pte(page, prot)`: frame `pfn` mapped with `prot`.
    pub const fn new(pfn: Pfn, prot: PageProt) -> Pte {
        Pte((pfn.0 << PAGE_SHIFT) & bits::PFN_MASK | prot.0)
    }
    /// A PTE marker entry (`make_pte_marker`). `m` must not be empty.
    pub const fn marker(m: Marker) -> Pte {
        Pte(bits::SWP_PTE_MARKER << bits::SWP_TYPE_SHIFT | m.0 << bits::SWP_OFFSET_SHIFT)
    }

    /// `pte_none`.
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }
    /// `pte_present`: mapped, possibly `PROT_NONE` (the MMU may still refuse it).
    pub const fn is_present(self) -> bool {
        self.0 & (bits::PRESENT | bits::PROTNONE) != 0
    }
    /// Whether the MMU translates through the entry (`_PAGE_PRESENT`).
    pub const fn is_hw_present(self) -> bool {
        self.0 & bits::PRESENT != 0
    }
    /// `pte_protnone`: mapped but inaccessible (a `PROT_NONE` VMA's pages).
    pub const fn is_protnone(self) -> bool {
        self.0 & (bits::PRESENT | bits::PROTNONE) == bits::PROTNONE
    }
    /// `is_swap_pte`: not none and not present (here: a marker).
    pub const fn is_swap(self) -> bool {
        !self.is_none() && !self.is_present()
    }
    /// The marker bits of a marker entry (`is_pte_marker` + `pte_marker_get`), `None` for anything else.
    pub const fn as_marker(self) -> Option<Marker> {
        if self.is_swap() && self.0 >> bits::SWP_TYPE_SHIFT == bits::SWP_PTE_MARKER {
            Some(Marker::from_bits_truncate(
                (self.0 >> bits::SWP_OFFSET_SHIFT)
                    & ((1 << (bits::SWP_TYPE_SHIFT - bits::SWP_OFFSET_SHIFT)) - 1),
            ))
        } else {
            None
        }
    }
    /// `pte_pfn`: the frame of a present entry.
    pub const fn pfn(self) -> Pfn {
        Pfn((self.0 & bits::PFN_MASK) >> PAGE_SHIFT)
    }
    /// `pte_write`.
    pub const fn is_write(self) -> bool {
        self.0 & bits::RW != 0
    }
    /// `pte_dirty`.
    pub const fn is_dirty(self) -> bool {
        self.0 & bits::DIRTY != 0
    }
    /// `pte_young`.
    pub const fn is_young(self) -> bool {
        self.0 & bits::ACCESSED != 0
    }
    /// `pte_special`.
    pub const fn is_special(self) -> bool {
        self.0 & bits::SPECIAL != 0
    }
    /// `pte_exec`: instruction fetches allowed (NX clear).
    pub const fn is_exec(self) -> bool {
        self.0 & bits::NX == 0
    }
    /// `pte_uffd_wp` (present entries).
    pub const fn is_uffd_wp(self) -> bool {
        self.0 & bits::UFFD_WP != 0
    }
    /// `pte_soft_dirty` (present entries).
    pub const fn is_soft_dirty(self) -> bool {
        self.0 & bits::SOFT_DIRTY != 0
    }

    /// `pte_mkwrite`.
    pub const fn mkwrite(self) -> Pte {
        Pte(self.0 | bits::RW)
    }
    /// `pte_wrprotect`.
    pub const fn wrprotect(self) -> Pte {
        Pte(self.0 & !bits::RW)
    }
    /// `pte_mkdirty` (also soft-dirty, as x86's does).
    pub const fn mkdirty(self) -> Pte {
        Pte(self.0 | bits::DIRTY | bits::SOFT_DIRTY)
    }
    /// `pte_mkclean`.
    pub const fn mkclean(self) -> Pte {
        Pte(self.0 & !bits::DIRTY)
    }
    /// `pte_mkyoung`.
    pub const fn mkyoung(self) -> Pte {
        Pte(self.0 | bits::ACCESSED)
    }
    /// `pte_mkold`.
    pub const fn mkold(self) -> Pte {
        Pte(self.0 & !bits::ACCESSED)
    }
    /// `pte_mkspecial`.
    pub const fn mkspecial(self) -> Pte {
        Pte(self.0 | bits::SPECIAL)
    }
    /// `pte_clear_uffd_wp` (present) / `pte_swp_clear_uffd_wp` (non-present).
    pub const fn clear_uffd_wp(self) -> Pte {
        if self.is_present() { Pte(self.0 & !bits::UFFD_WP) } else { Pte(self.0 & !bits::SWP_UFFD_WP) }
    }
    /// `pte_mksoft_dirty` / `pte_swp_mksoft_dirty`.
    pub const fn mksoft_dirty(self) -> Pte {
        if self.is_present() { Pte(self.0 | bits::SOFT_DIRTY) } else { Pte(self.0 | bits::SWP_SOFT_DIRTY) }
    }
    /// `pte_modify(pte, newprot)`: the frame and the state bits of `self`, the protection of `prot`.
    pub const fn modify(self, prot: PageProt) -> Pte {
        Pte(self.0 & bits::CHG_MASK | prot.0 & !bits::CHG_MASK)
    }
}

impl std::fmt::Debug for Pte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_none() {
            return f.write_str("Pte(none)");
        }
        if let Some(m) = self.as_marker() {
            return write!(f, "Pte({m:?})");
        }
        if !self.is_present() {
            return write!(f, "Pte(swap {:#x})", self.0);
        }
        let flag = |b: bool, c: char| if b { c } else { '-' };
        write!(
            f,
            "Pte(pfn {} {}{}{}{}{}{}{})",
            self.pfn().0,
            flag(self.is_hw_present(), 'p'),
            flag(self.is_write(), 'w'),
            flag(self.is_exec(), 'x'),
            flag(self.is_young(), 'a'),
            flag(self.is_dirty(), 'd'),
            flag(self.is_special(), 's'),
            flag(self.is_protnone(), 'n'),
        )
    }
}

/// A page protection (`pgprot_t`): the bits a new entry takes from its VMA (`vm_page_prot`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageProt(pub(crate) u64);

impl PageProt {
    /// `PAGE_NONE`: inaccessible (`_PAGE_PROTNONE` with the accessed bit).
    pub const NONE: PageProt = PageProt(bits::ACCESSED | bits::PROTNONE);
    /// `PAGE_READONLY` (also `PAGE_COPY`: private mappings are read-only until a write fault copies).
    pub const READONLY: PageProt = PageProt(bits::PRESENT | bits::USER | bits::ACCESSED | bits::NX);
    /// `PAGE_READONLY_EXEC` (also `PAGE_COPY_EXEC`).
    pub const READONLY_EXEC: PageProt = PageProt(bits::PRESENT | bits::USER | bits::ACCESSED);
    /// `PAGE_SHARED`: writable (shared mappings without write notification).
    pub const SHARED: PageProt = PageProt(bits::PRESENT | bits::RW | bits::USER | bits::ACCESSED | bits::NX);
    /// `PAGE_SHARED_EXEC`.
    pub const SHARED_EXEC: PageProt = PageProt(bits::PRESENT | bits::RW | bits::USER | bits::ACCESSED);

    /// The raw bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// `vm_get_page_prot(vm_flags)`: x86-64's `protection_map[]` entry for `VM_READ|VM_WRITE|VM_EXEC|VM_SHARED`.
    /// Write-only and execute-only mappings are readable (x86 has no write-only pages; execute-only needs
    /// protection keys).
    pub fn from_vm_flags(flags: VmFlags) -> PageProt {
        let r = flags.intersects(VmFlags::READ);
        let w = flags.intersects(VmFlags::WRITE);
        let x = flags.intersects(VmFlags::EXEC);
        let shared = flags.intersects(VmFlags::SHARED);
        match (r || w || x, w && shared, x) {
            (false, _, _) => PageProt::NONE,
            (true, false, false) => PageProt::READONLY,
            (true, false, true) => PageProt::READONLY_EXEC,
            (true, true, false) => PageProt::SHARED,
            (true, true, true) => PageProt::SHARED_EXEC,
        }
    }

    /// `vma_set_page_prot`: [`PageProt::from_vm_flags`], but without `VM_SHARED` when the mapping wants write
    /// notification (`vma_wants_writenotify`: a shared writable mapping of a file whose first write to a clean
    /// page must be seen, e.g. for dirty accounting; shmem and memfd do not), so that those writes fault.
    pub fn for_vma(flags: VmFlags, writenotify: bool) -> PageProt {
        if writenotify {
            PageProt::from_vm_flags(flags & !VmFlags::SHARED)
        } else {
            PageProt::from_vm_flags(flags)
        }
    }

    /// Whether entries made from it are writable.
    pub const fn is_write(self) -> bool {
        self.0 & bits::RW != 0
    }
}

impl std::fmt::Debug for PageProt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageProt({:?})", Pte(self.0))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn geometry_is_x86_64_four_level() {
        assert_eq!(PTRS_PER_TABLE, 512);
        assert_eq!(PMD_SIZE, 2 << 20);
        assert_eq!(PUD_SIZE, 1 << 30);
        assert_eq!(PGDIR_SIZE, 512 << 30);
        assert_eq!(VA_END, 1 << 48);
        assert_eq!(index(0x7fff_ffff_f000, 3), 255);
        assert_eq!(index(0x7fff_ffff_f000, 0), 511);
        assert_eq!(index(0x20_1000, 1), 1);
        assert_eq!(index(0x20_1000, 0), 1);
    }

    #[test]
    fn addr_end_caps_and_wraps_like_the_kernel() {
        assert_eq!(addr_end(0x1000, 0x5000, 1), 0x5000);
        assert_eq!(addr_end(0x1000, 0x40_0000, 1), 0x20_0000);
        // end 0 = the top of the address space: the boundary wins.
        assert_eq!(addr_end(0x1000, 0, 1), 0x20_0000);
        // The last PGD entry's boundary wraps to 0, which is less than no end.
        assert_eq!(addr_end(VA_END - PGDIR_SIZE, VA_END, 3), VA_END);
    }

    #[test]
    fn present_entries_round_trip() {
        let p = Pte::new(Pfn(0x12345), PageProt::READONLY);
        assert!(p.is_present() && p.is_hw_present() && !p.is_protnone());
        assert_eq!(p.pfn(), Pfn(0x12345));
        assert!(!p.is_write() && p.is_young() && !p.is_dirty() && !p.is_exec());
        let w = p.mkwrite().mkdirty();
        assert!(w.is_write() && w.is_dirty() && w.is_soft_dirty());
        assert_eq!(w.wrprotect().mkclean().mkold().pfn(), Pfn(0x12345));
        assert!(p.as_marker().is_none());
        assert!(Pte::new(Pfn::ZERO, PageProt::READONLY).mkspecial().is_special());
    }

    #[test]
    fn protnone_is_present_but_not_to_the_mmu() {
        let p = Pte::new(Pfn(7), PageProt::READONLY).mkdirty();
        let n = p.modify(PageProt::NONE);
        assert!(n.is_present() && n.is_protnone() && !n.is_hw_present());
        assert_eq!(n.pfn(), Pfn(7));
        assert!(n.is_dirty(), "pte_modify keeps the dirty bit");
        let back = n.modify(PageProt::SHARED_EXEC);
        assert!(back.is_hw_present() && back.is_write() && back.is_exec() && back.is_dirty());
        assert!(!n.is_swap());
    }

    #[test]
    fn markers_round_trip_and_are_not_present() {
        for m in [Marker::GUARD, Marker::UFFD_WP, Marker::POISONED, Marker::GUARD.union(Marker::UFFD_WP)] {
            let e = Pte::marker(m);
            assert!(!e.is_none() && !e.is_present() && e.is_swap());
            assert_eq!(e.as_marker(), Some(m));
        }
    }

    #[test]
    fn protection_map_matches_x86() {
        let rw = VmFlags::READ | VmFlags::WRITE;
        assert_eq!(PageProt::from_vm_flags(rw), PageProt::READONLY, "private: PAGE_COPY");
        assert_eq!(PageProt::from_vm_flags(rw | VmFlags::SHARED), PageProt::SHARED);
        assert_eq!(PageProt::for_vma(rw | VmFlags::SHARED, true), PageProt::READONLY);
        assert_eq!(PageProt::from_vm_flags(VmFlags::NONE), PageProt::NONE);
        assert_eq!(PageProt::from_vm_flags(VmFlags::WRITE | VmFlags::SHARED), PageProt::SHARED);
        assert_eq!(PageProt::from_vm_flags(VmFlags::EXEC), PageProt::READONLY_EXEC);
        assert!(PageProt::from_vm_flags(VmFlags::READ).0 & bits::ACCESSED != 0);
    }
}
