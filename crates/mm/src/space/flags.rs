//! The `VM_*` flag bits the address space uses, with Linux 6.18's x86-64 values, and the `PROT_*` / `MAP_*` /
//! `MREMAP_*` / `MADV_*` call arguments.
//!
//! Flags are a plain `u64` here (the kernel's `vm_flags_t`); the values are those of `include/linux/mm.h` and
//! `include/uapi/asm-generic/mman*.h`, so that a flag word can be compared with the kernel's smaps `VmFlags`.

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

/// `PROT_READ`.
pub const PROT_READ: u32 = 0x1;
/// `PROT_WRITE`.
pub const PROT_WRITE: u32 = 0x2;
/// `PROT_EXEC`.
pub const PROT_EXEC: u32 = 0x4;
/// `PROT_SEM` (accepted, ignored).
pub const PROT_SEM: u32 = 0x8;
/// `PROT_GROWSDOWN` (mprotect only).
pub const PROT_GROWSDOWN: u32 = 0x0100_0000;
/// `PROT_GROWSUP` (mprotect only; no x86 VMA grows up).
pub const PROT_GROWSUP: u32 = 0x0200_0000;

/// `MAP_SHARED`.
pub const MAP_SHARED: u32 = 0x01;
/// `MAP_PRIVATE`.
pub const MAP_PRIVATE: u32 = 0x02;
/// `MAP_SHARED_VALIDATE`.
pub const MAP_SHARED_VALIDATE: u32 = 0x03;
/// `MAP_TYPE` mask.
pub const MAP_TYPE: u32 = 0x0f;
/// `MAP_FIXED`.
pub const MAP_FIXED: u32 = 0x10;
/// `MAP_ANONYMOUS`.
pub const MAP_ANONYMOUS: u32 = 0x20;
/// `MAP_GROWSDOWN`.
pub const MAP_GROWSDOWN: u32 = 0x100;
/// `MAP_DENYWRITE` (ignored).
pub const MAP_DENYWRITE: u32 = 0x800;
/// `MAP_EXECUTABLE` (ignored).
pub const MAP_EXECUTABLE: u32 = 0x1000;
/// `MAP_LOCKED` (not modelled: rejected by the engine's callers).
pub const MAP_LOCKED: u32 = 0x2000;
/// `MAP_NORESERVE`.
pub const MAP_NORESERVE: u32 = 0x4000;
/// `MAP_POPULATE`.
pub const MAP_POPULATE: u32 = 0x8000;
/// `MAP_NONBLOCK`.
pub const MAP_NONBLOCK: u32 = 0x10000;
/// `MAP_STACK`.
pub const MAP_STACK: u32 = 0x20000;
/// `MAP_HUGETLB`.
pub const MAP_HUGETLB: u32 = 0x40000;
/// `MAP_FIXED_NOREPLACE`.
pub const MAP_FIXED_NOREPLACE: u32 = 0x100000;
/// `MAP_UNINITIALIZED` (ignored).
pub const MAP_UNINITIALIZED: u32 = 0x4000000;
/// `LEGACY_MAP_MASK`: the flags `MAP_SHARED` silently accepts and `MAP_SHARED_VALIDATE` validates against.
pub const LEGACY_MAP_MASK: u32 = MAP_SHARED
    | MAP_PRIVATE
    | MAP_FIXED
    | MAP_ANONYMOUS
    | MAP_DENYWRITE
    | MAP_EXECUTABLE
    | MAP_UNINITIALIZED
    | MAP_GROWSDOWN
    | MAP_LOCKED
    | MAP_NORESERVE
    | MAP_POPULATE
    | MAP_NONBLOCK
    | MAP_STACK
    | MAP_HUGETLB;

/// `MREMAP_MAYMOVE`.
pub const MREMAP_MAYMOVE: u32 = 1;
/// `MREMAP_FIXED`.
pub const MREMAP_FIXED: u32 = 2;
/// `MREMAP_DONTUNMAP`.
pub const MREMAP_DONTUNMAP: u32 = 4;

/// `MADV_DONTNEED`.
pub const MADV_DONTNEED: i32 = 4;
/// `MADV_FREE`.
pub const MADV_FREE: i32 = 8;
/// `MADV_DONTFORK`.
pub const MADV_DONTFORK: i32 = 10;
/// `MADV_DOFORK`.
pub const MADV_DOFORK: i32 = 11;
/// `MADV_WIPEONFORK`.
pub const MADV_WIPEONFORK: i32 = 18;
/// `MADV_KEEPONFORK`.
pub const MADV_KEEPONFORK: i32 = 19;

/// `calc_vm_prot_bits` without protection keys.
pub fn prot_to_vm(prot: u32) -> u64 {
    let mut f = 0;
    if prot & PROT_READ != 0 {
        f |= VM_READ;
    }
    if prot & PROT_WRITE != 0 {
        f |= VM_WRITE;
    }
    if prot & PROT_EXEC != 0 {
        f |= VM_EXEC;
    }
    f
}
