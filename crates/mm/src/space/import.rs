//! Importing an address space: [`Mm::import`] builds an [`Mm`] equal to a description of a real process's
//! memory map ([`ImportedLayout`]), so that later engine calls start from where the process stands.
//!
//! # What a description holds
//!
//! The description is plain data: every VMA ([`ImportedVma`]: range, `vm_flags` with every bit smaps shows
//! and the protection-key bits, file offset, backing, anonymous name, whether it has an anon_vma), the files
//! the VMAs map ([`ImportedFile`]: path, ` (deleted)`, device, inode, size, kind), and the layout parameters
//! the kernel fixed at `execve` and that shape later calls: `mmap_base` (the top of the top-down search of
//! `get_unmapped_area`), `start_stack` (which VMA is `[stack]`), `start_brk` and `brk` (which VMAs are
//! `[heap]`, where `brk` grows from), `RLIMIT_STACK` (how far a growsdown VMA may expand) and
//! `stack_guard_gap`, and the protection-key allocation ([`ImportedPkeys`]). It depends on nothing of the
//! live kernel: `vmspace_linux::procfs::read_layout` fills one from `/proc/PID`, and a test can write one by
//! hand.
//!
//! # How the engine takes it
//!
//! The description is checked first, whole, before anything is built: VMAs sorted, non-empty, page-aligned,
//! non-overlapping, below `TASK_SIZE`, no more than `vm.max_map_count` of them; file references in range; no
//! anon_vma in a shared VMA; a shared VMA only with a file (Linux gives shared anonymous memory a shmem
//! file); an anonymous name only on anonymous memory or shared anonymous shmem; protection keys only with
//! PKU; the break not below `start_brk`. A bad description is `EINVAL` (too many VMAs: `ENOMEM`), what the
//! engine cannot represent `EOPNOTSUPP` (hugetlb VMAs, which need a hugetlbfs object and its pool pages); no
//! description panics. Then, under the new address space's mmap write lock, every VMA is created directly
//! in the tree with exactly the given attributes (`space::tree`'s `insert_new`, the primitive every new VMA
//! goes through): **no merge** with its neighbours, since the kernel's VMAs are as they are (a VMA the
//! kernel did not merge, because of its history or a `vm_file` the description cannot tell apart, stays
//! separate even where a new mapping would merge), and file VMAs are registered with their file's page
//! cache as any file mapping is. The page table stays empty: no page is imported.
//!
//! # Identities the kernel does not show
//!
//! - **Files.** One [`VmFile`] per [`ImportedFile`]: VMAs that name the same entry share it (`vm_file`
//!   identity, which merging compares). The kernel compares `struct file`s, one per `open`; two mappings of
//!   one inode through two opens are the same file here. The file is a size-only identity: its page cache is
//!   empty and reads as zeroes (the engine never reads the real file).
//! - **Special mappings** (`[vdso]`, `[vvar]`, `[vvar_vclock]`, `[uprobes]`, ...: the kernel's
//!   `vm_special_mapping`, a VMA with `vm_ops->name` and no file) become a [`VmFile`] named by the bracketed
//!   name on device 00:00, inode 0, sized to the VMA: the maps line, the smaps header and a PROCMAP_QUERY
//!   answer then read as the kernel's (offset 0, `00:00 0`, the name), and such a VMA is not anonymous for
//!   the engine, as it is not for the kernel (`vma_is_anonymous`: it has `vm_ops`). What the special
//!   mapping's operations refuse (`special_mapping_split`: no split; `special_mapping_mremap`: no resize) is
//!   not modelled.
//! - **anon_vma.** Only whether a VMA has one is imported ([`ImportedVma::anon_vma`]); which one is not. Two
//!   adjacent VMAs that both have one share it when they are anon_vma-compatible (same file, flags equal but
//!   for the access bits, linear offsets: what a split or `find_mergeable_anon_vma` would have left);
//!   otherwise each gets a new root anon_vma with a chain of one, as in a process that has not forked since
//!   its `execve` (a forked child without `execve` has longer chains, which `/proc` does not show: its
//!   merges would be refused on Linux and may be allowed here).
//! - **Anonymous page offsets.** `/proc` prints offset 0 for anonymous memory; an anonymous VMA that `mremap`
//!   moved keeps its old `vm_pgoff` in the kernel, which decides merges with its neighbours. The description's
//!   [`ImportedVma::pgoff`] is taken as given (a reader without better knowledge passes `start >> 12`, what
//!   `mmap` gives).
//! - **`mm->def_flags`** (`mlockall(MCL_FUTURE)`) and the threads' PKRU are not in the description: the
//!   imported address space has none and the initial PKRU.
//! - **`locked_vm`** is the pages of the `VM_LOCKED` VMAs, or [`ImportedLayout::locked_vm`] if larger
//!   (`VmLck` of `/proc/PID/status`).
//!
//! The gate area (`[vsyscall]` on x86-64) is not a VMA (`get_gate_vma`): a description does not list it, and
//! [`ImportedLayout::gate_area`] only says whether the process's maps ends with it (`MmConfig` has no switch
//! for it: the engine's maps never prints it).

use std::collections::HashMap;
use std::sync::Arc;

use super::tree::{NewVma, V, VmaExt};
use super::{
    AnonState, Errno, FileKind, Mm, MmConfig, MmWrite, PAGE_MASK, PAGE_SIZE, TASK_SIZE, VmFile, VmFlags,
};
use crate::vma::{FilePages, FileSize, MAX_LFS_FILESIZE};

/// A process's address space as plain data (module docs).
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
    /// Whether the process's maps ends with the gate area (`[vsyscall]`), which is not a VMA (module docs).
    pub gate_area: bool,
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
    /// (module docs), `start >> 12` when unknown.
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
}

/// The protection-key state of an imported address space (`mm->context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportedPkeys {
    /// Bit `k` set: key `k` allocated. Key 0 is always allocated with PKU.
    pub allocated: u16,
    /// The execute-only key, if the process made one.
    pub execute_only: Option<u8>,
}

impl ImportedLayout {
    /// The checks of the module docs, in order: the first failing one's errno.
    fn check(&self, cfg: &MmConfig) -> Result<(), Errno> {
        if self.vmas.len() as u64 > cfg.max_map_count {
            return Err(Errno::ENOMEM);
        }
        let aligned = |x: u64| x & !PAGE_MASK == 0;
        let mut prev_end = 0;
        for v in &self.vmas {
            if !aligned(v.start) || !aligned(v.end) || v.start >= v.end || v.end > TASK_SIZE {
                return Err(Errno::EINVAL);
            }
            if v.start < prev_end {
                return Err(Errno::EINVAL);
            }
            prev_end = v.end;
            if v.flags.intersects(VmFlags::HUGETLB) {
                return Err(Errno::EOPNOTSUPP);
            }
            let shared = v.flags.intersects(VmFlags::MAYSHARE);
            if shared && v.anon_vma {
                return Err(Errno::EINVAL);
            }
            match self.pkeys {
                None if v.flags.pkey() != 0 => return Err(Errno::EINVAL),
                Some(p)
                    if p.allocated & (1 << v.flags.pkey()) == 0
                        && p.execute_only != Some(v.flags.pkey() as u8) =>
                {
                    return Err(Errno::EINVAL);
                }
                _ => {}
            }
            match &v.backing {
                ImportedBacking::Anonymous if shared => return Err(Errno::EINVAL),
                ImportedBacking::Anonymous => {}
                ImportedBacking::File(i) => {
                    let f = self.files.get(*i).ok_or(Errno::EINVAL)?;
                    if v.anon_name.is_some() && f.kind != ImportedFileKind::SharedAnonymous {
                        return Err(Errno::EINVAL);
                    }
                }
                ImportedBacking::Special(name) => {
                    if v.anon_name.is_some() || name.is_empty() {
                        return Err(Errno::EINVAL);
                    }
                }
            }
        }
        if self.brk < self.start_brk || self.mmap_base > TASK_SIZE || !aligned(self.mmap_base) {
            return Err(Errno::EINVAL);
        }
        if self.pkeys.is_some() != cfg.pku {
            return Err(Errno::EINVAL);
        }
        if let Some(p) = self.pkeys
            && (p.allocated & 1 == 0 || p.execute_only.is_some_and(|k| k > 15))
        {
            return Err(Errno::EINVAL);
        }
        for f in &self.files {
            if f.size > MAX_LFS_FILESIZE {
                return Err(Errno::EINVAL);
            }
        }
        Ok(())
    }

    /// The configuration an import of this layout runs with: `cfg` with the layout's parameters.
    pub fn config(&self, cfg: &MmConfig) -> MmConfig {
        MmConfig {
            mmap_base: self.mmap_base,
            start_stack: self.start_stack,
            start_brk: self.start_brk,
            stack_rlimit: self.stack_rlimit,
            stack_guard_gap: self.stack_guard_gap,
            ..cfg.clone()
        }
    }
}

impl ImportedFile {
    /// The engine's file: a size-only identity (module docs).
    fn to_vm_file(&self, cfg: &MmConfig) -> VmFile {
        let (kind, bdi) = match self.kind {
            ImportedFileKind::Regular => (FileKind::Regular, cfg.file_bdi),
            ImportedFileKind::Shmem => (FileKind::Regular, vmspace_pgtable::Bdi::NONE),
            ImportedFileKind::SharedAnonymous => (FileKind::ShmemZero, vmspace_pgtable::Bdi::NONE),
        };
        VmFile {
            name: self.path.clone(),
            deleted: self.deleted,
            dev_major: self.dev_major,
            dev_minor: self.dev_minor,
            inode: self.inode,
            size: FileSize::new(self.size),
            readable: true,
            writable: self.writable,
            noexec: false,
            kind,
            dax: false,
            max_bytes: cfg.file_max_bytes.max(self.size),
            fsize_limit: cfg.fsize_rlimit,
            huge: None,
            bdi,
            pages: FilePages::default(),
        }
    }
}

/// The engine's file standing for a special mapping (module docs): the bracketed name on 00:00, inode 0,
/// `size` bytes (the end of its furthest VMA in the file).
fn special_file(name: &str, size: u64) -> VmFile {
    VmFile { writable: false, bdi: vmspace_pgtable::Bdi::NONE, ..(*VmFile::regular(name, 0, size)).clone() }
}

impl Mm {
    /// An address space equal to `layout` (module docs): `cfg` with the layout's parameters
    /// ([`ImportedLayout::config`]), every VMA created as described, unmerged, the break and the key state set.
    /// `EINVAL` / `ENOMEM` / `EOPNOTSUPP` for a description the checks refuse (module docs), with nothing
    /// built.
    pub fn import(cfg: &MmConfig, layout: &ImportedLayout) -> Result<Mm, Errno> {
        layout.check(cfg)?;
        let cfg = layout.config(cfg);
        let files: Vec<Arc<VmFile>> = layout.files.iter().map(|f| Arc::new(f.to_vm_file(&cfg))).collect();
        let mm = Mm::new(cfg);
        mm.locked(|w| w.import_vmas(layout, &files))?;
        Ok(mm)
    }
}

/// Whether `b` (right after `a`) could share `a`'s anon_vma: `anon_vma_compatible`'s test.
fn anon_compatible(a: V, b: &ImportedVma, b_file: Option<&Arc<VmFile>>) -> bool {
    a.end() == b.start
        && a.file_is(b_file)
        && ((a.fl() ^ b.flags) & !(VmFlags::ACCESS_FLAGS | VmFlags::IGNORE_MERGE)).is_empty()
        && b.pgoff == a.pgoff_at(b.start)
}

impl MmWrite<'_> {
    /// The import proper, under the mmap write lock of the new, empty address space.
    fn import_vmas(&mut self, layout: &ImportedLayout, files: &[Arc<VmFile>]) -> Result<(), Errno> {
        self.reserve(layout.vmas.len() as u64)?;
        // One file per special name, sized to cover every VMA of that name.
        let mut sizes: HashMap<&str, u64> = HashMap::new();
        for v in &layout.vmas {
            if let ImportedBacking::Special(name) = &v.backing {
                let end = v.pgoff.saturating_add((v.end - v.start) / PAGE_SIZE).saturating_mul(PAGE_SIZE);
                let size = sizes.entry(name.as_str()).or_insert(0);
                *size = (*size).max(end);
            }
        }
        let specials: HashMap<&str, Arc<VmFile>> =
            sizes.into_iter().map(|(name, size)| (name, Arc::new(special_file(name, size)))).collect();
        let mut prev: Option<V> = None;
        let mut locked = 0u64;
        for v in &layout.vmas {
            let file = match &v.backing {
                ImportedBacking::Anonymous => None,
                ImportedBacking::File(i) => Some(files[*i].clone()),
                ImportedBacking::Special(name) => specials.get(name.as_str()).cloned(),
            };
            let anon = if v.anon_vma {
                let reuse = prev
                    .filter(|p| p.has_anon_vma() && anon_compatible(p, v, file.as_ref()))
                    .and_then(|p| p.anon().anon_vma().cloned());
                AnonState::prepare(reuse.as_ref())
            } else {
                AnonState::EMPTY
            };
            if v.flags.intersects(VmFlags::LOCKED) {
                locked += (v.end - v.start) / PAGE_SIZE;
            }
            let new = self.insert_new(NewVma {
                start: v.start,
                end: v.end,
                flags: v.flags,
                pgoff: v.pgoff,
                file,
                anon,
                name: v.anon_name.as_deref().map(Arc::from),
            });
            prev = Some(new);
        }
        self.st.locked_vm = locked.max(layout.locked_vm.unwrap_or(0));
        self.set_brk(layout.brk);
        if let Some(p) = layout.pkeys {
            self.st.pkeys = super::pkeys::PkeyState::imported(p.allocated, p.execute_only);
        }
        Ok(())
    }
}
