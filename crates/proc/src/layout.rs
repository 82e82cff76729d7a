//! An address space as plain data: what `/proc/PID` shows of a process's memory map and the layout parameters
//! around it, the description `vmspace_mm::Mm::import` builds an engine address space from and
//! `vmspace_linux::procfs::read_layout` reads from a live process. It sits here, below both, so that neither
//! the engine nor the live-kernel crate depends on the other.
//!
//! The types are data only: which descriptions the engine accepts, how each field is used and what `/proc`
//! cannot tell are documented at `Mm::import` (`vmspace_mm`, module `space::import`); where each field comes
//! from on a live process at `read_layout`.

use vmspace_abi::VmFlags;

/// A process's address space as plain data (`Mm::import`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImportedLayout {
    /// The VMAs, in address order.
    pub vmas: Vec<ImportedVma>,
    /// The files the VMAs map ([`ImportedBacking::File`] indexes this list).
    pub files: Vec<ImportedFile>,
    /// `mm->mmap_base`: the top of the top-down search for mappings without a usable hint.
    pub mmap_base: u64,
    /// `mm->start_stack`: the VMA containing it is `[stack]`.
    pub start_stack: u64,
    /// `mm->start_brk`.
    pub start_brk: u64,
    /// `mm->brk`: the VMAs overlapping `(start_brk, brk)` are `[heap]`.
    pub brk: u64,
    /// `RLIMIT_STACK` (soft) in bytes, `u64::MAX` for unlimited: how far a growsdown VMA may expand.
    pub stack_rlimit: u64,
    /// `stack_guard_gap` in bytes (256 pages unless the kernel command line says otherwise).
    pub stack_guard_gap: u64,
    /// `mm->locked_vm` in pages, if known (`VmLck`): the import charges the larger of it and the pages of the
    /// `VM_LOCKED` VMAs.
    pub locked_vm: Option<u64>,
    /// The protection-key allocation, `None` on a host without PKU.
    pub pkeys: Option<ImportedPkeys>,
    /// The gate area (`[vsyscall]`), which is not a VMA but which the process's maps ends with: its flags,
    /// `None` if there is none (`Mm::import`).
    pub gate_area: Option<VmFlags>,
    /// The mm's `MMF_DISABLE_THP_COMPLETELY` (`prctl(PR_SET_THP_DISABLE, 1)`, inherited across fork and
    /// `execve`; `THP_enabled: 0` in `/proc/PID/status`): no VMA is THP-eligible (`vma_thp_disabled`).
    pub thp_disabled: bool,
}

/// One VMA of an [`ImportedLayout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedVma {
    /// First address (page-aligned).
    pub start: u64,
    /// One past the last address (page-aligned).
    pub end: u64,
    /// `vm_flags`: the smaps `VmFlags` mnemonics and the protection key.
    pub flags: VmFlags,
    /// `vm_pgoff`: the file offset in pages for a file VMA; for anonymous memory the kernel's hidden value
    /// (`Mm::import`), `start >> 12` when unknown.
    pub pgoff: u64,
    /// What backs it.
    pub backing: ImportedBacking,
    /// The anonymous name (`PR_SET_VMA_ANON_NAME`: `[anon:NAME]`, or `[anon_shmem:NAME]` on shared anonymous
    /// memory).
    pub anon_name: Option<String>,
    /// Whether the VMA has an anon_vma (private memory with anonymous pages, or that had some).
    pub anon_vma: bool,
}

/// What backs an [`ImportedVma`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportedBacking {
    /// Anonymous memory (no file, no `vm_ops`): the heap, the stack, private anonymous mappings.
    Anonymous,
    /// A file: the index of its [`ImportedFile`] in [`ImportedLayout::files`].
    File(usize),
    /// A special mapping named by the kernel (`[vdso]`, `[vvar]`, `[vvar_vclock]`, ...), brackets included.
    Special(String),
}

/// What kind of object an [`ImportedFile`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportedFileKind {
    /// A file of a disk file system (reads ahead as the engine's configured device does).
    Regular,
    /// A shmem or tmpfs file (memfd, SysV shared memory, a file in `/dev/shm`): no readahead.
    Shmem,
    /// The shmem object of shared anonymous memory (`/dev/zero (deleted)` on 00:01).
    SharedAnonymous,
}

/// A file mapped by imported VMAs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedFile {
    /// The path as `/proc/PID/maps` prints it, without ` (deleted)` (`/memfd:NAME`, `/SYSV0000002a`, ...).
    pub path: String,
    /// The file was unlinked (` (deleted)`).
    pub deleted: bool,
    /// Device major number.
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// Inode number.
    pub inode: u64,
    /// Size in bytes (`i_size`); faults beyond it are SIGBUS.
    pub size: u64,
    /// Regular, shmem, or shared anonymous memory.
    pub kind: ImportedFileKind,
    /// Whether the file was opened for writing (a shared mapping with `VM_MAYWRITE` proves it).
    pub writable: bool,
    /// The placement method of the file's file system (from its `statfs` magic number): where later
    /// mappings of the file go (`mremap` moving one of its VMAs; a new mapping of the same file).
    pub area: vmspace_abi::FileArea,
}

/// The protection-key state of an imported address space (`mm->context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportedPkeys {
    /// Bit `k` set: key `k` allocated. Key 0 is always allocated with PKU.
    pub allocated: u16,
    /// The execute-only key, if the process made one.
    pub execute_only: Option<u8>,
}
