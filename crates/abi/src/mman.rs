//! The memory-management call arguments of the Linux user ABI: the page size and the user address-space
//! limit, and typed `PROT_*`, `MAP_*`, `MREMAP_*`, `MADV_*`, `PKEY_*`, `MLOCK_*`, `MCL_*` and `MS_*` values.
//!
//! Values are Linux 6.18's for x86-64 (`include/uapi/asm-generic/mman-common.h`, `mman.h`,
//! `include/uapi/linux/mman.h`, `arch/x86/include/uapi/asm/mman.h`, `arch/x86/include/asm/page_types.h`,
//! `arch/x86/include/asm/page_64_types.h`).
//!
//! # Unknown bits are kept
//!
//! A caller can pass any number to `mmap`, and the kernel answers unknown bits with an errno (`EINVAL`,
//! `EOPNOTSUPP`) or ignores them, depending on the call. So every type here represents *every* raw value:
//! the flag words are [`bitflags`] types whose unknown bits are retained (`from_bits_retain`; the flag
//! definitions include `_ = !0`, so no operation truncates them), and [`Advice`] is a newtype over `i32`
//! with named constants rather than an enum. A value converts to the raw number and back without loss, which
//! is what the op-script format (raw numbers are valid there) and the differential tests need.

use core::fmt;

/// Page size (x86-64: 4 KiB). Fixed: the engine models x86-64 only.
pub const PAGE_SIZE: u64 = 4096;
/// `PAGE_SHIFT`: log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;
/// `PAGE_MASK`: clears the offset within a page.
pub const PAGE_MASK: u64 = !(PAGE_SIZE - 1);
/// x86-64 `TASK_SIZE` with 4-level paging (`TASK_SIZE_MAX`, `(1 << 47) - PAGE_SIZE`): the first address user
/// space cannot map.
pub const TASK_SIZE: u64 = 0x7fff_ffff_f000;

bitflags::bitflags! {
    /// `PROT_*`: the protection argument of `mmap` and `mprotect`. Unknown bits are kept (the kernel answers
    /// them with `EINVAL`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
    pub struct Prot: u32 {
        /// `PROT_READ` (0x1): readable.
        const READ = 0x1;
        /// `PROT_WRITE` (0x2): writable.
        const WRITE = 0x2;
        /// `PROT_EXEC` (0x4): executable.
        const EXEC = 0x4;
        /// `PROT_SEM` (0x8): usable for atomic operations (accepted and ignored on x86).
        const SEM = 0x8;
        /// `PROT_GROWSDOWN` (0x01000000): `mprotect` extends the change down to the start of a growsdown VMA.
        const GROWSDOWN = 0x0100_0000;
        /// `PROT_GROWSUP` (0x02000000): `mprotect` extends the change up to the end of a growsup VMA (no x86
        /// VMA grows up).
        const GROWSUP = 0x0200_0000;
        // Every other bit is kept as given.
        const _ = !0;
    }
}

impl Prot {
    /// `PROT_NONE`: no access.
    pub const NONE: Prot = Prot::empty();
    /// `PROT_READ`.
    pub const R: Prot = Prot::READ;
    /// `PROT_READ | PROT_WRITE`.
    pub const RW: Prot = Prot::READ.union(Prot::WRITE);
    /// `PROT_READ | PROT_EXEC`.
    pub const RX: Prot = Prot::READ.union(Prot::EXEC);
    /// `PROT_READ | PROT_WRITE | PROT_EXEC`.
    pub const RWX: Prot = Prot::RW.union(Prot::EXEC);
    /// The three access bits (read, write, exec).
    pub const ACCESS: Prot = Prot::RWX;
}

bitflags::bitflags! {
    /// `MAP_*`: the flags argument of `mmap`. The low four bits are the mapping type ([`MapFlags::TYPE`]:
    /// shared, private, shared-validate, droppable); the rest are independent flags. Unknown bits are kept:
    /// `MAP_SHARED` ignores flags outside [`MapFlags::LEGACY`], `MAP_SHARED_VALIDATE` refuses them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
    pub struct MapFlags: u32 {
        /// `MAP_SHARED` (0x01): changes are shared (type).
        const SHARED = 0x01;
        /// `MAP_PRIVATE` (0x02): changes are private, copy-on-write (type).
        const PRIVATE = 0x02;
        /// `MAP_SHARED_VALIDATE` (0x03): `MAP_SHARED` that refuses unknown flags (type).
        const SHARED_VALIDATE = 0x03;
        /// `MAP_DROPPABLE` (0x08): private anonymous memory the kernel may drop under pressure (type).
        const DROPPABLE = 0x08;
        /// `MAP_TYPE` (0x0f): the mask of the mapping type.
        const TYPE = 0x0f;
        /// `MAP_FIXED` (0x10): exactly at the address, replacing what is there.
        const FIXED = 0x10;
        /// `MAP_ANONYMOUS` (0x20): no file.
        const ANONYMOUS = 0x20;
        /// `MAP_32BIT` (0x40, x86-64): place the mapping in the first 2 GiB (`arch/x86/kernel/sys_x86_64.c:
        /// find_start_end`: bottom-up in `[0x40000000, 0x80000000)`).
        const BELOW_2G = 0x40;
        /// `MAP_ABOVE4G` (0x80, x86-64): search no lower than 4 GiB (`arch_get_unmapped_area_topdown`'s low
        /// limit); in `LEGACY_MAP_MASK` on this kernel.
        const ABOVE4G = 0x80;
        /// `MAP_GROWSDOWN` (0x100): a stack (`VM_GROWSDOWN`).
        const GROWSDOWN = 0x100;
        /// `MAP_DENYWRITE` (0x800): ignored.
        const DENYWRITE = 0x800;
        /// `MAP_EXECUTABLE` (0x1000): ignored.
        const EXECUTABLE = 0x1000;
        /// `MAP_LOCKED` (0x2000): `VM_LOCKED`, pages populated and locked.
        const LOCKED = 0x2000;
        /// `MAP_NORESERVE` (0x4000): no overcommit accounting (`VM_NORESERVE`).
        const NORESERVE = 0x4000;
        /// `MAP_POPULATE` (0x8000): fault the range in after mapping it.
        const POPULATE = 0x8000;
        /// `MAP_NONBLOCK` (0x10000): with `MAP_POPULATE`, do not block on I/O (ignored since 2.6.23).
        const NONBLOCK = 0x1_0000;
        /// `MAP_STACK` (0x20000): a thread stack (`VM_NOHUGEPAGE` since 6.7).
        const STACK = 0x2_0000;
        /// `MAP_HUGETLB` (0x40000): hugetlbfs pages (size in the `MAP_HUGE_*` bits).
        const HUGETLB = 0x4_0000;
        /// `MAP_SYNC` (0x80000): synchronous page faults for DAX (`MAP_SHARED_VALIDATE` only).
        const SYNC = 0x8_0000;
        /// `MAP_FIXED_NOREPLACE` (0x100000): exactly at the address, `EEXIST` if anything is there.
        const FIXED_NOREPLACE = 0x10_0000;
        /// `MAP_UNINITIALIZED` (0x4000000): no zeroing (honoured only without an MMU; ignored here). It
        /// shares its bit with the lowest bit of the `MAP_HUGE_*` size field, as in Linux.
        const UNINITIALIZED = 0x400_0000;
        /// `MAP_HUGE_MASK << MAP_HUGE_SHIFT` (bits 26..31): log2 of the huge page size with `MAP_HUGETLB`
        /// (0: the default huge page size).
        const HUGE_SIZE = 0x3f << 26;
        // Every other bit is kept as given.
        const _ = !0;
    }
}

impl MapFlags {
    /// `MAP_HUGE_2MB` (`21 << MAP_HUGE_SHIFT`): 2 MiB huge pages with `MAP_HUGETLB` (a value of the size field,
    /// not a single flag).
    pub const HUGE_2MB: MapFlags = MapFlags::from_bits_retain(21 << 26);
    /// `MAP_HUGE_1GB` (`30 << MAP_HUGE_SHIFT`): 1 GiB huge pages with `MAP_HUGETLB`.
    pub const HUGE_1GB: MapFlags = MapFlags::from_bits_retain(30 << 26);
    /// `LEGACY_MAP_MASK` of `include/linux/mman.h` on x86-64: the flags `MAP_SHARED` silently accepts and
    /// `MAP_SHARED_VALIDATE` validates against. Besides the historical flags it holds `MAP_32BIT`,
    /// `MAP_ABOVE4G`, `MAP_HUGE_2MB` and `MAP_HUGE_1GB` (bits 26..30 of the size field; bit 31 is not in it),
    /// checked against the live 6.18 kernel bit by bit: `MAP_SHARED_VALIDATE` of an ext4 file accepts exactly
    /// these (`MAP_SYNC` only where the file system supports it, `MAP_FIXED_NOREPLACE` never).
    pub const LEGACY: MapFlags = MapFlags::SHARED
        .union(MapFlags::PRIVATE)
        .union(MapFlags::FIXED)
        .union(MapFlags::ANONYMOUS)
        .union(MapFlags::DENYWRITE)
        .union(MapFlags::EXECUTABLE)
        .union(MapFlags::UNINITIALIZED)
        .union(MapFlags::GROWSDOWN)
        .union(MapFlags::LOCKED)
        .union(MapFlags::NORESERVE)
        .union(MapFlags::POPULATE)
        .union(MapFlags::NONBLOCK)
        .union(MapFlags::STACK)
        .union(MapFlags::HUGETLB)
        .union(MapFlags::BELOW_2G)
        .union(MapFlags::ABOVE4G)
        .union(MapFlags::HUGE_2MB)
        .union(MapFlags::HUGE_1GB);
    /// `MAP_HUGE_SHIFT`: where the log2 of the huge page size starts.
    pub const HUGE_SHIFT: u32 = 26;

    /// The `MAP_HUGE_*` size field: `(flags >> MAP_HUGE_SHIFT) & MAP_HUGE_MASK`, the log2 of the huge page size
    /// `MAP_HUGETLB` asks for (0: the default size). Its lowest bit is `MAP_UNINITIALIZED`'s.
    pub const fn huge_size_log(self) -> u32 {
        (self.bits() >> Self::HUGE_SHIFT) & 0x3f
    }

    /// The mapping type: `self & MAP_TYPE`.
    pub const fn map_type(self) -> MapFlags {
        self.intersection(MapFlags::TYPE)
    }
}

bitflags::bitflags! {
    /// `MREMAP_*`: the flags argument of `mremap`. Unknown bits are kept (the kernel answers them with
    /// `EINVAL`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
    pub struct MremapFlags: u32 {
        /// `MREMAP_MAYMOVE` (1): the mapping may move.
        const MAYMOVE = 1;
        /// `MREMAP_FIXED` (2): move to exactly `new_address` (needs `MAYMOVE`).
        const FIXED = 2;
        /// `MREMAP_DONTUNMAP` (4): move, leaving the old range mapped but empty (needs `MAYMOVE`).
        const DONTUNMAP = 4;
        // Every other bit is kept as given.
        const _ = !0;
    }
}

bitflags::bitflags! {
    /// `PKEY_*`: the access rights `pkey_alloc` gives a new protection key in the calling thread's PKRU
    /// (`include/uapi/asm-generic/mman-common.h`; x86 has no `PKEY_DISABLE_EXECUTE`). Unknown bits are kept
    /// (the kernel answers them with `EINVAL`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
    pub struct PkeyRights: u32 {
        /// `PKEY_DISABLE_ACCESS` (1): no data access through the key.
        const DISABLE_ACCESS = 1;
        /// `PKEY_DISABLE_WRITE` (2): no data writes through the key.
        const DISABLE_WRITE = 2;
        // Every other bit is kept as given.
        const _ = !0;
    }
}

impl PkeyRights {
    /// `PKEY_ACCESS_MASK`: the rights `pkey_alloc` accepts.
    pub const ACCESS_MASK: PkeyRights = PkeyRights::DISABLE_ACCESS.union(PkeyRights::DISABLE_WRITE);
}

bitflags::bitflags! {
    /// `MLOCK_*`: the flags argument of `mlock2`. Unknown bits are kept (the kernel answers them with
    /// `EINVAL`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
    pub struct MlockFlags: u32 {
        /// `MLOCK_ONFAULT` (1): lock pages as they are faulted in rather than populating the range now
        /// (`VM_LOCKONFAULT`).
        const ONFAULT = 1;
        // Every other bit is kept as given.
        const _ = !0;
    }
}

bitflags::bitflags! {
    /// `MCL_*`: the flags argument of `mlockall`. Unknown bits are kept (the kernel answers them with
    /// `EINVAL`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
    pub struct MclFlags: u32 {
        /// `MCL_CURRENT` (1): lock every current mapping.
        const CURRENT = 1;
        /// `MCL_FUTURE` (2): lock every future mapping (`mm->def_flags` gets `VM_LOCKED`).
        const FUTURE = 2;
        /// `MCL_ONFAULT` (4): with `CURRENT` or `FUTURE`, lock on fault (`VM_LOCKONFAULT`).
        const ONFAULT = 4;
        // Every other bit is kept as given.
        const _ = !0;
    }
}

bitflags::bitflags! {
    /// `MS_*`: the flags argument of `msync`. Unknown bits are kept (the kernel answers them with `EINVAL`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
    pub struct MsyncFlags: u32 {
        /// `MS_ASYNC` (1): schedule the write-back (a no-op since 2.6.19).
        const ASYNC = 1;
        /// `MS_INVALIDATE` (2): invalidate other mappings (`EBUSY` on a locked VMA).
        const INVALIDATE = 2;
        /// `MS_SYNC` (4): write back shared file mappings and wait (`vfs_fsync_range`).
        const SYNC = 4;
        // Every other bit is kept as given.
        const _ = !0;
    }
}

/// `MADV_*`: the advice argument of `madvise`. A newtype over the raw `int`, so that every value a caller can
/// pass (including unknown ones, which the kernel answers with `EINVAL`) is representable; the named constants
/// are the values Linux 6.18 defines.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Advice(i32);

/// (value, `MADV_*` name) of every advice Linux 6.18 defines, in value order.
const ADVICE_NAMES: &[(i32, &str)] = &[
    (0, "MADV_NORMAL"),
    (1, "MADV_RANDOM"),
    (2, "MADV_SEQUENTIAL"),
    (3, "MADV_WILLNEED"),
    (4, "MADV_DONTNEED"),
    (8, "MADV_FREE"),
    (9, "MADV_REMOVE"),
    (10, "MADV_DONTFORK"),
    (11, "MADV_DOFORK"),
    (12, "MADV_MERGEABLE"),
    (13, "MADV_UNMERGEABLE"),
    (14, "MADV_HUGEPAGE"),
    (15, "MADV_NOHUGEPAGE"),
    (16, "MADV_DONTDUMP"),
    (17, "MADV_DODUMP"),
    (18, "MADV_WIPEONFORK"),
    (19, "MADV_KEEPONFORK"),
    (20, "MADV_COLD"),
    (21, "MADV_PAGEOUT"),
    (22, "MADV_POPULATE_READ"),
    (23, "MADV_POPULATE_WRITE"),
    (24, "MADV_DONTNEED_LOCKED"),
    (25, "MADV_COLLAPSE"),
    (100, "MADV_HWPOISON"),
    (101, "MADV_SOFT_OFFLINE"),
    (102, "MADV_GUARD_INSTALL"),
    (103, "MADV_GUARD_REMOVE"),
];

impl Advice {
    /// `MADV_NORMAL` (0): no special treatment.
    pub const NORMAL: Self = Self(0);
    /// `MADV_RANDOM` (1): expect random access (`VM_RAND_READ`).
    pub const RANDOM: Self = Self(1);
    /// `MADV_SEQUENTIAL` (2): expect sequential access (`VM_SEQ_READ`).
    pub const SEQUENTIAL: Self = Self(2);
    /// `MADV_WILLNEED` (3): read ahead.
    pub const WILLNEED: Self = Self(3);
    /// `MADV_DONTNEED` (4): drop the pages.
    pub const DONTNEED: Self = Self(4);
    /// `MADV_FREE` (8): free private anonymous pages lazily.
    pub const FREE: Self = Self(8);
    /// `MADV_REMOVE` (9): free the range and its backing store (shared mappings).
    pub const REMOVE: Self = Self(9);
    /// `MADV_DONTFORK` (10): not inherited across fork (`VM_DONTCOPY`).
    pub const DONTFORK: Self = Self(10);
    /// `MADV_DOFORK` (11): inherited across fork again.
    pub const DOFORK: Self = Self(11);
    /// `MADV_MERGEABLE` (12): KSM may merge the pages (`VM_MERGEABLE`).
    pub const MERGEABLE: Self = Self(12);
    /// `MADV_UNMERGEABLE` (13): undo `MADV_MERGEABLE`.
    pub const UNMERGEABLE: Self = Self(13);
    /// `MADV_HUGEPAGE` (14): prefer transparent huge pages (`VM_HUGEPAGE`).
    pub const HUGEPAGE: Self = Self(14);
    /// `MADV_NOHUGEPAGE` (15): no transparent huge pages (`VM_NOHUGEPAGE`).
    pub const NOHUGEPAGE: Self = Self(15);
    /// `MADV_DONTDUMP` (16): excluded from core dumps (`VM_DONTDUMP`).
    pub const DONTDUMP: Self = Self(16);
    /// `MADV_DODUMP` (17): included in core dumps again.
    pub const DODUMP: Self = Self(17);
    /// `MADV_WIPEONFORK` (18): the child sees zeroes (`VM_WIPEONFORK`; private anonymous only).
    pub const WIPEONFORK: Self = Self(18);
    /// `MADV_KEEPONFORK` (19): undo `MADV_WIPEONFORK`.
    pub const KEEPONFORK: Self = Self(19);
    /// `MADV_COLD` (20): deactivate the pages.
    pub const COLD: Self = Self(20);
    /// `MADV_PAGEOUT` (21): reclaim the pages.
    pub const PAGEOUT: Self = Self(21);
    /// `MADV_POPULATE_READ` (22): prefault readable.
    pub const POPULATE_READ: Self = Self(22);
    /// `MADV_POPULATE_WRITE` (23): prefault writable.
    pub const POPULATE_WRITE: Self = Self(23);
    /// `MADV_DONTNEED_LOCKED` (24): `MADV_DONTNEED` that also drops locked pages.
    pub const DONTNEED_LOCKED: Self = Self(24);
    /// `MADV_COLLAPSE` (25): collapse into transparent huge pages synchronously.
    pub const COLLAPSE: Self = Self(25);
    /// `MADV_HWPOISON` (100): poison the pages (CAP_SYS_ADMIN).
    pub const HWPOISON: Self = Self(100);
    /// `MADV_SOFT_OFFLINE` (101): soft-offline the pages (CAP_SYS_ADMIN).
    pub const SOFT_OFFLINE: Self = Self(101);
    /// `MADV_GUARD_INSTALL` (102): install guard regions (faults raise SIGSEGV).
    pub const GUARD_INSTALL: Self = Self(102);
    /// `MADV_GUARD_REMOVE` (103): remove guard regions.
    pub const GUARD_REMOVE: Self = Self(103);

    /// The advice with this raw value (any `int`, named or not).
    pub const fn from_raw(v: i32) -> Self {
        Self(v)
    }

    /// The raw value.
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// The `MADV_*` name, `None` for a value Linux 6.18 does not define.
    pub fn name(self) -> Option<&'static str> {
        ADVICE_NAMES.iter().find(|(v, _)| *v == self.0).map(|(_, n)| *n)
    }

    /// The advice whose `MADV_*` name is `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        ADVICE_NAMES.iter().find(|(_, n)| *n == name).map(|(v, _)| Self(*v))
    }

    /// Every advice Linux 6.18 defines, in value order.
    pub fn known() -> impl Iterator<Item = Advice> {
        ADVICE_NAMES.iter().map(|(v, _)| Self(*v))
    }
}

impl fmt::Debug for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({})", self.0),
            None => write!(f, "Advice({})", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_bits_survive_every_operation() {
        let p = Prot::from_bits_retain(0x8000_0003);
        assert_eq!(p.bits(), 0x8000_0003);
        assert_eq!((p & !Prot::WRITE).bits(), 0x8000_0001);
        assert_eq!((!Prot::READ).bits(), !1);
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::from_bits_retain(1 << 31);
        assert_eq!(MapFlags::from_bits_retain(f.bits()), f);
        assert!(!MapFlags::LEGACY.contains(f));
        assert_eq!(f.difference(MapFlags::LEGACY).bits(), 1 << 31);
        assert_eq!(MremapFlags::from_bits_retain(0x10).bits(), 0x10);
        assert_eq!((MlockFlags::ONFAULT | MlockFlags::from_bits_retain(8)).bits(), 9);
        assert_eq!((MclFlags::from_bits_retain(0x18) - MclFlags::CURRENT).bits(), 0x18);
        assert_eq!(MsyncFlags::from_bits_retain(0x80).bits(), 0x80);
    }

    #[test]
    fn linux_values() {
        assert_eq!(MapFlags::BELOW_2G.bits(), 0x40);
        // Measured on the live 6.18 kernel: MAP_SHARED_VALIDATE of an ext4 file accepts exactly these bits.
        assert_eq!(MapFlags::LEGACY.bits(), 0x7c07_f9f3);
        assert_eq!(MapFlags::HUGE_2MB.huge_size_log(), 21);
        assert_eq!((MapFlags::HUGETLB | MapFlags::HUGE_1GB).huge_size_log(), 30);
        assert_eq!(MapFlags::UNINITIALIZED.huge_size_log(), 1);
        assert_eq!(PkeyRights::ACCESS_MASK.bits(), 3);
        assert_eq!(MapFlags::SHARED_VALIDATE.map_type(), MapFlags::SHARED | MapFlags::PRIVATE);
        assert_eq!(Prot::RWX.bits(), 7);
        assert_eq!(PAGE_SIZE, 1 << PAGE_SHIFT);
        assert_eq!(TASK_SIZE, (1 << 47) - PAGE_SIZE);
        assert_eq!(MlockFlags::ONFAULT.bits(), 1);
        assert_eq!((MclFlags::CURRENT | MclFlags::FUTURE | MclFlags::ONFAULT).bits(), 7);
        assert_eq!((MsyncFlags::ASYNC | MsyncFlags::INVALIDATE | MsyncFlags::SYNC).bits(), 7);
    }

    #[test]
    fn advice_round_trips_any_int() {
        for v in [i32::MIN, -1, 0, 4, 26, 99, 103, i32::MAX] {
            assert_eq!(Advice::from_raw(v).raw(), v);
        }
        for a in Advice::known() {
            assert_eq!(Advice::from_name(a.name().unwrap()), Some(a));
        }
        assert_eq!(Advice::from_raw(26).name(), None);
        assert_eq!(format!("{:?}", Advice::FREE), "MADV_FREE(8)");
        assert_eq!(format!("{:?}", Advice::from_raw(7)), "Advice(7)");
    }
}
