//! Linux user-ABI values that every layer of vmspace shares, defined once: the errno type that the engine
//! returns, the op-script output prints and the live-kernel runner reads back from real syscalls; the page size
//! and `TASK_SIZE`; and the typed arguments of the memory-management calls ([`Prot`], [`MapFlags`],
//! [`MremapFlags`], [`Advice`], [`PkeyRights`], [`MlockFlags`], [`MclFlags`], [`MsyncFlags`]); and [`VmFlags`], a
//! VMA's `vm_flags` word with its smaps mnemonics, which the
//! engine keeps and the `/proc` formats print; and [`FileArea`], the placement method a mapped file's file
//! system installs (known from its `statfs` magic number); and the [`Signal`] a failed user-mode access ends in,
//! with its `siginfo` code.
//!
//! ```
//! use vmspace_abi::{Advice, Errno, MapFlags, PAGE_SIZE, Prot};
//!
//! // Typed flags, with Linux's values...
//! let flags = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
//! assert_eq!(flags.bits(), 0x22);
//! assert_eq!(Prot::RW.bits(), 3);
//! // ...that keep whatever raw bits a caller passes (the kernel answers unknown ones with an errno).
//! let odd = MapFlags::from_bits_retain(flags.bits() | 1 << 31);
//! assert_eq!(odd.bits(), 0x8000_0022);
//! assert!(!MapFlags::LEGACY.contains(odd));
//! // Advice is any int, named or not.
//! assert_eq!(Advice::from_raw(4), Advice::DONTNEED);
//! assert_eq!(Advice::from_raw(-7).name(), None);
//! // Errnos print as op-script results do.
//! assert_eq!(Errno::ENOMEM.to_string(), "-ENOMEM");
//! assert_eq!(PAGE_SIZE, 4096);
//! ```
//!
//! One home for these types, so that the engine and the kernel's answers compare without conversion tables.
//! Depends on nothing but `bitflags`.

mod errno;
mod fs;
mod mman;
mod signal;
mod vmflags;

pub use errno::Errno;
pub use fs::{
    BTRFS_SUPER_MAGIC, EROFS_SUPER_MAGIC_V1, EXT4_SUPER_MAGIC, FileArea, TMPFS_MAGIC, XFS_SUPER_MAGIC,
};
pub use mman::{
    Advice, MapFlags, MclFlags, MlockFlags, MremapFlags, MsyncFlags, PAGE_MASK, PAGE_SHIFT, PAGE_SIZE,
    PkeyRights, Prot, TASK_SIZE,
};
pub use signal::{BusCode, SI_KERNEL, SIGBUS, SIGKILL, SIGSEGV, SegvCode, Signal};
pub use vmflags::VmFlags;
