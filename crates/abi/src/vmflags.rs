//! `VmFlags`: a VMA's `vm_flags` word with the bit values of Linux 6.18 on x86-64.
//!
//! The values follow `include/linux/mm.h` of 6.18 for an x86-64 build (`CONFIG_MMU`, `CONFIG_64BIT`,
//! `CONFIG_ARCH_USES_HIGH_VMA_FLAGS`, `CONFIG_ARCH_HAS_PKEYS`). The low 32 bits are stable across 6.x; the high
//! bits (pkeys, shadow stack, uffd-minor, droppable, sealed) moved between releases and are given here as the
//! 6.18 layout is understood (marked where that is not verified against a tagged release). Bits that only exist
//! under configuration options the engine may model (soft-dirty, shadow stack) are defined anyway: whether the
//! engine ever sets them is a property of its config, not of this table.
//!
//! [`VmFlags::smaps_mnemonics`] renders the `VmFlags:` line of `/proc/PID/smaps`: one two-letter mnemonic per set
//! bit, in bit order, each followed by a space; bits without a mnemonic (the protection-key bits, which smaps
//! prints as `ProtectionKey:` instead) are skipped.
//!
//! `VmFlags` is a plain `Copy` value; the engine's VMA stores it in an atomic word (`vmspace_mm`'s
//! `Vma::flags`). It is the one `vm_flags` type of vmspace: the engine's flag logic, the smaps renderer and
//! parser of `vmspace_proc`, and the VMA snapshots all use it and its one mnemonic table.

use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, BitXor, Not};

/// A set of `VM_*` flags (the kernel's `vm_flags_t`, 64 bits on x86-64).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct VmFlags(u64);

/// Bit number, constant name and smaps mnemonic of every flag this table knows, in bit order.
const TABLE: &[(u32, &str, &str)] = &[
    (0, "READ", "rd"),
    (1, "WRITE", "wr"),
    (2, "EXEC", "ex"),
    (3, "SHARED", "sh"),
    (4, "MAYREAD", "mr"),
    (5, "MAYWRITE", "mw"),
    (6, "MAYEXEC", "me"),
    (7, "MAYSHARE", "ms"),
    (8, "GROWSDOWN", "gd"),
    (9, "UFFD_MISSING", "um"),
    (10, "PFNMAP", "pf"),
    (11, "MAYBE_GUARD", "gu"),
    (12, "UFFD_WP", "uw"),
    (13, "LOCKED", "lo"),
    (14, "IO", "io"),
    (15, "SEQ_READ", "sr"),
    (16, "RAND_READ", "rr"),
    (17, "DONTCOPY", "dc"),
    (18, "DONTEXPAND", "de"),
    (19, "LOCKONFAULT", "lf"),
    (20, "ACCOUNT", "ac"),
    (21, "NORESERVE", "nr"),
    (22, "HUGETLB", "ht"),
    (23, "SYNC", "sf"),
    (24, "ARCH_1", "ar"),
    (25, "WIPEONFORK", "wf"),
    (26, "DONTDUMP", "dd"),
    (27, "SOFTDIRTY", "sd"),
    (28, "MIXEDMAP", "mm"),
    (29, "HUGEPAGE", "hg"),
    (30, "NOHUGEPAGE", "nh"),
    (31, "MERGEABLE", "mg"),
    (32, "PKEY_BIT0", ""),
    (33, "PKEY_BIT1", ""),
    (34, "PKEY_BIT2", ""),
    (35, "PKEY_BIT3", ""),
    (37, "SHADOW_STACK", "ss"),
    (40, "DROPPABLE", "dp"),
    (41, "UFFD_MINOR", "ui"),
    (42, "SEALED", "sl"),
];

impl VmFlags {
    /// No flag (`VM_NONE`).
    pub const NONE: Self = Self(0);
    /// `VM_READ` (0x1): readable.
    pub const READ: Self = Self(0x1);
    /// `VM_WRITE` (0x2): writable.
    pub const WRITE: Self = Self(0x2);
    /// `VM_EXEC` (0x4): executable.
    pub const EXEC: Self = Self(0x4);
    /// `VM_SHARED` (0x8): shared and writable-shared (a `MAP_SHARED` mapping of a file opened for writing).
    pub const SHARED: Self = Self(0x8);
    /// `VM_MAYREAD` (0x10): mprotect may add READ.
    pub const MAYREAD: Self = Self(0x10);
    /// `VM_MAYWRITE` (0x20): mprotect may add WRITE.
    pub const MAYWRITE: Self = Self(0x20);
    /// `VM_MAYEXEC` (0x40): mprotect may add EXEC.
    pub const MAYEXEC: Self = Self(0x40);
    /// `VM_MAYSHARE` (0x80): a `MAP_SHARED` mapping (the `s` in the maps permission column).
    pub const MAYSHARE: Self = Self(0x80);
    /// `VM_GROWSDOWN` (0x100): a stack that grows down.
    pub const GROWSDOWN: Self = Self(0x100);
    /// `VM_UFFD_MISSING` (0x200): userfaultfd missing-page tracking.
    pub const UFFD_MISSING: Self = Self(0x200);
    /// `VM_PFNMAP` (0x400): raw PFN mapping, no struct pages.
    pub const PFNMAP: Self = Self(0x400);
    /// `VM_MAYBE_GUARD` (0x800): may contain guard regions. Set on the whole VMA by `MADV_GUARD_INSTALL` (never
    /// cleared, not even by `MADV_GUARD_REMOVE`), sticky on merge and copy-on-fork. From the 6.19 series
    /// "mm: introduce VM_MAYBE_GUARD", which the 6.18 stable kernels carry (the live 6.18.44 kernel shows `gu`
    /// in smaps after a guard install); 6.18.0 set no flag and gave the VMA an anon_vma instead.
    pub const MAYBE_GUARD: Self = Self(0x800);
    /// `VM_UFFD_WP` (0x1000): userfaultfd write-protect tracking.
    pub const UFFD_WP: Self = Self(0x1000);
    /// `VM_LOCKED` (0x2000): mlocked.
    pub const LOCKED: Self = Self(0x2000);
    /// `VM_IO` (0x4000): memory-mapped I/O.
    pub const IO: Self = Self(0x4000);
    /// `VM_SEQ_READ` (0x8000): `MADV_SEQUENTIAL`.
    pub const SEQ_READ: Self = Self(0x8000);
    /// `VM_RAND_READ` (0x10000): `MADV_RANDOM`.
    pub const RAND_READ: Self = Self(0x10000);
    /// `VM_DONTCOPY` (0x20000): not copied on fork (`MADV_DONTFORK`).
    pub const DONTCOPY: Self = Self(0x20000);
    /// `VM_DONTEXPAND` (0x40000): cannot be grown by mremap.
    pub const DONTEXPAND: Self = Self(0x40000);
    /// `VM_LOCKONFAULT` (0x80000): lock pages as they are faulted in (`MLOCK_ONFAULT`).
    pub const LOCKONFAULT: Self = Self(0x80000);
    /// `VM_ACCOUNT` (0x100000): counted against the commit limit.
    pub const ACCOUNT: Self = Self(0x100000);
    /// `VM_NORESERVE` (0x200000): no swap reservation (`MAP_NORESERVE`).
    pub const NORESERVE: Self = Self(0x200000);
    /// `VM_HUGETLB` (0x400000): hugetlbfs mapping.
    pub const HUGETLB: Self = Self(0x400000);
    /// `VM_SYNC` (0x800000): synchronous page faults (`MAP_SYNC`).
    pub const SYNC: Self = Self(0x800000);
    /// `VM_ARCH_1` (0x1000000): architecture flag (x86: `VM_PAT`).
    pub const ARCH_1: Self = Self(0x1000000);
    /// `VM_WIPEONFORK` (0x2000000): the child gets zero-filled memory (`MADV_WIPEONFORK`).
    pub const WIPEONFORK: Self = Self(0x2000000);
    /// `VM_DONTDUMP` (0x4000000): excluded from core dumps.
    pub const DONTDUMP: Self = Self(0x4000000);
    /// `VM_SOFTDIRTY` (0x8000000): soft-dirty tracking (only with `CONFIG_MEM_SOFT_DIRTY`; the host here has it
    /// off, where the kernel defines `VM_SOFTDIRTY` as 0).
    pub const SOFTDIRTY: Self = Self(0x8000000);
    /// `VM_MIXEDMAP` (0x10000000): mixed struct-page and raw-PFN mapping.
    pub const MIXEDMAP: Self = Self(0x10000000);
    /// `VM_HUGEPAGE` (0x20000000): `MADV_HUGEPAGE`.
    pub const HUGEPAGE: Self = Self(0x20000000);
    /// `VM_NOHUGEPAGE` (0x40000000): `MADV_NOHUGEPAGE`.
    pub const NOHUGEPAGE: Self = Self(0x40000000);
    /// `VM_MERGEABLE` (0x80000000): KSM may merge pages.
    pub const MERGEABLE: Self = Self(0x80000000);
    /// `VM_PKEY_BIT0` (bit 32, `VM_HIGH_ARCH_0`): protection key, bit 0.
    pub const PKEY_BIT0: Self = Self(1 << 32);
    /// `VM_PKEY_BIT1` (bit 33): protection key, bit 1.
    pub const PKEY_BIT1: Self = Self(1 << 33);
    /// `VM_PKEY_BIT2` (bit 34): protection key, bit 2.
    pub const PKEY_BIT2: Self = Self(1 << 34);
    /// `VM_PKEY_BIT3` (bit 35): protection key, bit 3 (x86 keys are 4 bits).
    pub const PKEY_BIT3: Self = Self(1 << 35);
    /// `VM_SHADOW_STACK` (bit 37, `VM_HIGH_ARCH_5`): x86 user shadow stack (`CONFIG_X86_USER_SHADOW_STACK`).
    pub const SHADOW_STACK: Self = Self(1 << 37);
    /// `VM_DROPPABLE` (bit 40): contents may be dropped under memory pressure (`MAP_DROPPABLE`).
    /// Bit position as understood for 6.18, UNCONFIRMED against the tag.
    pub const DROPPABLE: Self = Self(1 << 40);
    /// `VM_UFFD_MINOR` (bit 41): userfaultfd minor faults. Bit position UNCONFIRMED for 6.18 (38 in older
    /// releases).
    pub const UFFD_MINOR: Self = Self(1 << 41);
    /// `VM_SEALED` (bit 42): mseal()ed. Bit position UNCONFIRMED for 6.18 (bit 63 in 6.10 … 6.14); the live
    /// 6.18 kernel prints `sl` after `dp` in smaps, as bit order 40 < 42 gives.
    pub const SEALED: Self = Self(1 << 42);

    /// `VM_SPECIAL`: mappings that are never merged and never grown (`IO | DONTEXPAND | PFNMAP | MIXEDMAP`).
    pub const SPECIAL: Self = Self(Self::IO.0 | Self::DONTEXPAND.0 | Self::PFNMAP.0 | Self::MIXEDMAP.0);
    /// `VM_ACCESS_FLAGS`: `READ | WRITE | EXEC`.
    pub const ACCESS_FLAGS: Self = Self(Self::READ.0 | Self::WRITE.0 | Self::EXEC.0);
    /// The protection-key bits (`VM_PKEY_BIT0..3`).
    pub const PKEY_MASK: Self =
        Self(Self::PKEY_BIT0.0 | Self::PKEY_BIT1.0 | Self::PKEY_BIT2.0 | Self::PKEY_BIT3.0);
    /// `VM_STACK` on x86-64: `GROWSDOWN`.
    pub const STACK: Self = Self::GROWSDOWN;
    /// `VM_DATA_DEFAULT_FLAGS` on x86-64 (`VM_DATA_FLAGS_TSK_EXEC` without READ_IMPLIES_EXEC):
    /// `READ | WRITE | MAYREAD | MAYWRITE | MAYEXEC`.
    pub const DATA_DEFAULT: Self =
        Self(Self::READ.0 | Self::WRITE.0 | Self::MAYREAD.0 | Self::MAYWRITE.0 | Self::MAYEXEC.0);
    /// `VM_STACK_DEFAULT_FLAGS` | `VM_STACK` | `VM_ACCOUNT` as set on the initial stack:
    /// `DATA_DEFAULT | GROWSDOWN | ACCOUNT`.
    pub const STACK_DEFAULT: Self = Self(Self::DATA_DEFAULT.0 | Self::GROWSDOWN.0 | Self::ACCOUNT.0);
    /// `VM_LOCKED_MASK`: `LOCKED | LOCKONFAULT`.
    pub const LOCKED_MASK: Self = Self(Self::LOCKED.0 | Self::LOCKONFAULT.0);
    /// The `VM_MAY*` bits.
    pub const MAY_MASK: Self = Self(Self::MAYREAD.0 | Self::MAYWRITE.0 | Self::MAYEXEC.0 | Self::MAYSHARE.0);
    /// `VM_UFFD_MISSING | VM_UFFD_WP | VM_UFFD_MINOR` (`__VM_UFFD_FLAGS`).
    pub const UFFD_FLAGS: Self = Self(Self::UFFD_MISSING.0 | Self::UFFD_WP.0 | Self::UFFD_MINOR.0);
    /// `VM_STICKY`: flags that survive a merge when only one side has them (the merged VMA gets the union):
    /// `SOFTDIRTY | MAYBE_GUARD` (`include/linux/mm.h` of the 6.18 stable kernels).
    pub const STICKY: Self = Self(Self::SOFTDIRTY.0 | Self::MAYBE_GUARD.0);
    /// `VM_IGNORE_MERGE`: flags whose difference does not prevent a merge: `SOFTDIRTY | STICKY`.
    pub const IGNORE_MERGE: Self = Self(Self::SOFTDIRTY.0 | Self::STICKY.0);
    /// `VM_COPY_ON_FORK`: flags that make fork copy the page tables even without an anon_vma (`vma_needs_copy`):
    /// `PFNMAP | MIXEDMAP | UFFD_WP | MAYBE_GUARD`.
    pub const COPY_ON_FORK: Self =
        Self(Self::PFNMAP.0 | Self::MIXEDMAP.0 | Self::UFFD_WP.0 | Self::MAYBE_GUARD.0);
    /// `VM_NO_KHUGEPAGED`: VMAs khugepaged and `MADV_COLLAPSE` never touch: `SPECIAL | HUGETLB`.
    pub const NO_KHUGEPAGED: Self = Self(Self::SPECIAL.0 | Self::HUGETLB.0);
    /// `VM_INIT_DEF_MASK`: the part of `mm->def_flags` a forked mm inherits: `NOHUGEPAGE`.
    pub const INIT_DEF_MASK: Self = Self::NOHUGEPAGE;

    /// The flags whose bits are `bits`.
    #[inline]
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The raw bits.
    #[inline]
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// True if no flag is set.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True if every flag of `other` is set in `self`.
    #[inline]
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any flag of `other` is set in `self`.
    #[inline]
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// `self` with the flags of `other` added.
    #[inline]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// `self` with the flags of `other` removed.
    #[inline]
    pub const fn difference(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// The flags set in both.
    #[inline]
    pub const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// The x86 protection key stored in the `PKEY` bits (`arch/x86/include/asm/pkeys.h: vma_pkey`).
    #[inline]
    pub const fn pkey(self) -> u32 {
        ((self.0 >> 32) & 0xf) as u32
    }

    /// The `PKEY` bits of protection key `key` (`arch_calc_vm_prot_bits`: bit 0 of the key to `VM_PKEY_BIT0`
    /// and so on; x86 keys are 4 bits, higher key bits are dropped as the kernel's macro drops them).
    #[inline]
    pub const fn from_pkey(key: u32) -> Self {
        Self(((key & 0xf) as u64) << 32)
    }

    /// The flag whose smaps mnemonic is `m` (`"gd"` gives `GROWSDOWN`), `None` for an unknown mnemonic.
    pub fn from_mnemonic(m: &str) -> Option<Self> {
        TABLE.iter().find(|(_, _, x)| !x.is_empty() && *x == m).map(|(b, _, _)| Self(1u64 << b))
    }

    /// The smaps mnemonic of a single flag bit (`bit` in 0..64), `None` if the bit has none.
    pub fn mnemonic(bit: u32) -> Option<&'static str> {
        TABLE.iter().find(|(b, _, m)| *b == bit && !m.is_empty()).map(|(_, _, m)| *m)
    }

    /// The `VmFlags:` value of smaps: each set flag's mnemonic followed by a space, in bit order. Bits without a
    /// mnemonic are skipped, as the kernel does.
    pub fn smaps_mnemonics(self) -> String {
        let mut out = String::with_capacity(3 * self.0.count_ones() as usize);
        for &(bit, _, m) in TABLE {
            if self.0 & (1u64 << bit) != 0 && !m.is_empty() {
                out.push_str(m);
                out.push(' ');
            }
        }
        out
    }
}

impl BitOr for VmFlags {
    type Output = Self;
    #[inline]
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl BitOrAssign for VmFlags {
    #[inline]
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for VmFlags {
    type Output = Self;
    #[inline]
    fn bitand(self, rhs: Self) -> Self {
        self.intersection(rhs)
    }
}

impl BitAndAssign for VmFlags {
    #[inline]
    fn bitand_assign(&mut self, rhs: Self) {
        self.0 &= rhs.0;
    }
}

impl BitXor for VmFlags {
    type Output = Self;
    /// The flags set in exactly one of the two (what differs).
    #[inline]
    fn bitxor(self, rhs: Self) -> Self {
        Self(self.0 ^ rhs.0)
    }
}

impl Not for VmFlags {
    type Output = Self;
    #[inline]
    fn not(self) -> Self {
        Self(!self.0)
    }
}

impl fmt::Debug for VmFlags {
    /// `VmFlags(READ | WRITE | 0x…)`: known names, then any unknown bits in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("VmFlags(")?;
        let mut rest = self.0;
        let mut first = true;
        for &(bit, name, _) in TABLE {
            if rest & (1u64 << bit) != 0 {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !(1u64 << bit);
            }
        }
        if rest != 0 || first {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{rest:#x}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_constants_and_is_in_bit_order() {
        let consts = [
            VmFlags::READ,
            VmFlags::WRITE,
            VmFlags::EXEC,
            VmFlags::SHARED,
            VmFlags::MAYREAD,
            VmFlags::MAYWRITE,
            VmFlags::MAYEXEC,
            VmFlags::MAYSHARE,
            VmFlags::GROWSDOWN,
            VmFlags::UFFD_MISSING,
            VmFlags::PFNMAP,
            VmFlags::MAYBE_GUARD,
            VmFlags::UFFD_WP,
            VmFlags::LOCKED,
            VmFlags::IO,
            VmFlags::SEQ_READ,
            VmFlags::RAND_READ,
            VmFlags::DONTCOPY,
            VmFlags::DONTEXPAND,
            VmFlags::LOCKONFAULT,
            VmFlags::ACCOUNT,
            VmFlags::NORESERVE,
            VmFlags::HUGETLB,
            VmFlags::SYNC,
            VmFlags::ARCH_1,
            VmFlags::WIPEONFORK,
            VmFlags::DONTDUMP,
            VmFlags::SOFTDIRTY,
            VmFlags::MIXEDMAP,
            VmFlags::HUGEPAGE,
            VmFlags::NOHUGEPAGE,
            VmFlags::MERGEABLE,
            VmFlags::PKEY_BIT0,
            VmFlags::PKEY_BIT1,
            VmFlags::PKEY_BIT2,
            VmFlags::PKEY_BIT3,
            VmFlags::SHADOW_STACK,
            VmFlags::DROPPABLE,
            VmFlags::UFFD_MINOR,
            VmFlags::SEALED,
        ];
        assert_eq!(consts.len(), TABLE.len());
        for (c, &(bit, _, _)) in consts.iter().zip(TABLE) {
            assert_eq!(c.bits(), 1u64 << bit);
        }
        assert!(TABLE.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn kernel_values_of_common_flags() {
        assert_eq!(VmFlags::STICKY.bits(), 0x0800_0800);
        assert_eq!(VmFlags::IGNORE_MERGE, VmFlags::STICKY);
        assert_eq!(VmFlags::COPY_ON_FORK.bits(), 0x1000_1c00);
        assert_eq!(VmFlags::NO_KHUGEPAGED.bits(), 0x1044_4400);
        assert_eq!(VmFlags::SPECIAL.bits(), 0x1004_4400);
        assert_eq!(VmFlags::DONTCOPY.bits(), 0x20000);
        assert_eq!(VmFlags::WIPEONFORK.bits(), 0x0200_0000);
        assert_eq!(VmFlags::ACCOUNT.bits(), 0x0010_0000);
        assert_eq!(VmFlags::NORESERVE.bits(), 0x0020_0000);
        assert_eq!(VmFlags::LOCKED.bits(), 0x2000);
        assert_eq!(VmFlags::MERGEABLE.bits(), 0x8000_0000);
    }

    #[test]
    fn smaps_line_in_bit_order_skipping_pkeys() {
        // A private rw anonymous mapping as the kernel shows it: "rd wr mr mw me ac ".
        let f = VmFlags::READ | VmFlags::WRITE | VmFlags::MAYREAD | VmFlags::MAYWRITE | VmFlags::MAYEXEC;
        assert_eq!((f | VmFlags::ACCOUNT).smaps_mnemonics(), "rd wr mr mw me ac ");
        assert_eq!((VmFlags::READ | VmFlags::PKEY_BIT0 | VmFlags::SEALED).smaps_mnemonics(), "rd sl ");
        assert_eq!(VmFlags::STACK_DEFAULT.smaps_mnemonics(), "rd wr mr mw me gd ac ");
        assert_eq!(VmFlags::NONE.smaps_mnemonics(), "");
        assert_eq!(VmFlags::mnemonic(8), Some("gd"));
        assert_eq!(VmFlags::mnemonic(32), None);
        assert_eq!(VmFlags::mnemonic(36), None);
        assert_eq!(VmFlags::from_mnemonic("gd"), Some(VmFlags::GROWSDOWN));
        assert_eq!(VmFlags::from_mnemonic("sl"), Some(VmFlags::SEALED));
        assert_eq!(VmFlags::from_mnemonic("zz"), None);
        assert_eq!(VmFlags::from_mnemonic(""), None);
    }

    #[test]
    fn set_operations() {
        let f = VmFlags::READ | VmFlags::WRITE;
        assert!(f.contains(VmFlags::READ));
        assert!(!f.contains(VmFlags::READ | VmFlags::EXEC));
        assert!(f.intersects(VmFlags::ACCESS_FLAGS));
        assert_eq!(f.difference(VmFlags::WRITE), VmFlags::READ);
        assert_eq!(f & !VmFlags::READ, VmFlags::WRITE);
        assert_eq!(VmFlags::from_bits(3u64 << 32 | 1).pkey(), 3);
        assert_eq!(VmFlags::from_pkey(5), VmFlags::PKEY_BIT0 | VmFlags::PKEY_BIT2);
        assert_eq!(VmFlags::from_pkey(15), VmFlags::PKEY_MASK);
        assert_eq!(VmFlags::from_pkey(9).pkey(), 9);
        assert_eq!(
            format!("{:?}", f | VmFlags::from_bits(1 << 50)),
            "VmFlags(READ | WRITE | 0x4000000000000)"
        );
        assert_eq!(format!("{:?}", VmFlags::NONE), "VmFlags(0x0)");
    }
}
