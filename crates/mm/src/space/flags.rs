//! The `VM_*` flag bits the address space uses, with Linux 6.18's x86-64 values, and `calc_vm_prot_bits`.
//! The call arguments (`PROT_*`, `MAP_*`, `MREMAP_*`, `MADV_*`) are `vmspace_abi`'s typed values.
//!
//! Flags are a plain `u64` here (the kernel's `vm_flags_t`); the values are those of `include/linux/mm.h`, so
//! that a flag word can be compared with the kernel's smaps `VmFlags`.

use vmspace_abi::Prot;

/// `VM_READ`.
pub const VM_READ: u64 = 0x1;
/// `VM_WRITE`.
pub const VM_WRITE: u64 = 0x2;
/// `VM_EXEC`.
pub const VM_EXEC: u64 = 0x4;
/// `VM_SHARED`.
pub const VM_SHARED: u64 = 0x8;
/// `VM_MAYREAD`.
pub const VM_MAYREAD: u64 = 0x10;
/// `VM_MAYWRITE`.
pub const VM_MAYWRITE: u64 = 0x20;
/// `VM_MAYEXEC`.
pub const VM_MAYEXEC: u64 = 0x40;
/// `VM_MAYSHARE`.
pub const VM_MAYSHARE: u64 = 0x80;
/// `VM_GROWSDOWN`.
pub const VM_GROWSDOWN: u64 = 0x100;
/// `VM_PFNMAP`.
pub const VM_PFNMAP: u64 = 0x400;
/// `VM_LOCKED`.
pub const VM_LOCKED: u64 = 0x2000;
/// `VM_IO`.
pub const VM_IO: u64 = 0x4000;
/// `VM_DONTCOPY`.
pub const VM_DONTCOPY: u64 = 0x20000;
/// `VM_DONTEXPAND`.
pub const VM_DONTEXPAND: u64 = 0x40000;
/// `VM_LOCKONFAULT`.
pub const VM_LOCKONFAULT: u64 = 0x80000;
/// `VM_ACCOUNT`.
pub const VM_ACCOUNT: u64 = 0x100000;
/// `VM_NORESERVE`.
pub const VM_NORESERVE: u64 = 0x200000;
/// `VM_HUGETLB`.
pub const VM_HUGETLB: u64 = 0x400000;
/// `VM_WIPEONFORK`.
pub const VM_WIPEONFORK: u64 = 0x2000000;
/// `VM_SOFTDIRTY` (0 on the hosts here: `CONFIG_MEM_SOFT_DIRTY` is off, so it never differs).
pub const VM_SOFTDIRTY: u64 = 0;
/// `VM_MIXEDMAP`.
pub const VM_MIXEDMAP: u64 = 0x10000000;
/// Protection-key bits (x86: four, bits 32..35).
pub const VM_PKEY_MASK: u64 = 0xf << 32;

/// `VM_ACCESS_FLAGS`.
pub const VM_ACCESS_FLAGS: u64 = VM_READ | VM_WRITE | VM_EXEC;
/// `VM_SPECIAL`: never merged.
pub const VM_SPECIAL: u64 = VM_IO | VM_DONTEXPAND | VM_PFNMAP | VM_MIXEDMAP;
/// `VM_LOCKED_MASK`.
pub const VM_LOCKED_MASK: u64 = VM_LOCKED | VM_LOCKONFAULT;

/// `calc_vm_prot_bits` without protection keys.
pub fn prot_to_vm(prot: Prot) -> u64 {
    let mut f = 0;
    if prot.contains(Prot::READ) {
        f |= VM_READ;
    }
    if prot.contains(Prot::WRITE) {
        f |= VM_WRITE;
    }
    if prot.contains(Prot::EXEC) {
        f |= VM_EXEC;
    }
    f
}
