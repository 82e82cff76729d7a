//! Importing an address space: [`Mm::import`] builds an [`Mm`] equal to a description of a real process's
//! memory map ([`ImportedLayout`]), so that later engine calls start from where the process stands.
//!
//! # What a description holds
//!
//! The description is plain data: every VMA ([`ImportedVma`]: range, `vm_flags` with every bit smaps shows
//! and the protection-key bits, file offset, backing, anonymous name, whether it has an anon_vma), the files
//! the VMAs map ([`ImportedFile`]: path, ` (deleted)`, device, inode, size, kind, placement method), and the layout parameters
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
//! The gate area (`[vsyscall]` on x86-64) is not a VMA (`get_gate_vma`): a description does not list it among
//! the VMAs; [`ImportedLayout::gate_area`] says whether the process's maps ends with it (with its flags), and
//! the import passes it on to [`MmConfig::gate_area`], so that the engine's `maps` and `smaps` end with it
//! too.

use std::collections::HashMap;
use std::sync::Arc;

pub use vmspace_proc::layout::{
    ImportedBacking, ImportedFile, ImportedFileKind, ImportedLayout, ImportedPkeys, ImportedVma,
};

use super::tree::{NewVma, V, VmaExt};
use super::{
    AnonState, Errno, FileKind, Mm, MmConfig, MmWrite, PAGE_MASK, PAGE_SIZE, TASK_SIZE, VmFile, VmFlags,
};
use crate::vma::{FilePages, FileSize, MAX_LFS_FILESIZE};

/// The checks of the module docs, in order: the first failing one's errno.
fn check(layout: &ImportedLayout, cfg: &MmConfig) -> Result<(), Errno> {
    if layout.vmas.len() as u64 > cfg.max_map_count {
        return Err(Errno::ENOMEM);
    }
    let aligned = |x: u64| x & !PAGE_MASK == 0;
    let mut prev_end = 0;
    for v in &layout.vmas {
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
        match layout.pkeys {
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
                let f = layout.files.get(*i).ok_or(Errno::EINVAL)?;
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
    if layout.brk < layout.start_brk || layout.mmap_base > TASK_SIZE || !aligned(layout.mmap_base) {
        return Err(Errno::EINVAL);
    }
    if layout.pkeys.is_some() != cfg.pku {
        return Err(Errno::EINVAL);
    }
    if let Some(p) = layout.pkeys
        && (p.allocated & 1 == 0 || p.execute_only.is_some_and(|k| k > 15))
    {
        return Err(Errno::EINVAL);
    }
    for f in &layout.files {
        if f.size > MAX_LFS_FILESIZE {
            return Err(Errno::EINVAL);
        }
    }
    Ok(())
}

impl MmConfig {
    /// The configuration an import of `layout` runs with: this one with the layout's parameters
    /// (`mmap_base`, `start_stack`, `start_brk`, `RLIMIT_STACK`, `stack_guard_gap`, the gate area, the mm's
    /// THP disable).
    pub fn with_layout(&self, layout: &ImportedLayout) -> MmConfig {
        MmConfig {
            mmap_base: layout.mmap_base,
            start_stack: layout.start_stack,
            start_brk: layout.start_brk,
            stack_rlimit: layout.stack_rlimit,
            stack_guard_gap: layout.stack_guard_gap,
            gate_area: layout.gate_area,
            thp_disabled: layout.thp_disabled,
            ..self.clone()
        }
    }
}

/// The engine's file for `f`: a size-only identity (module docs).
fn vm_file(f: &ImportedFile, cfg: &MmConfig) -> VmFile {
    let (kind, bdi) = match f.kind {
        ImportedFileKind::Regular => (FileKind::Regular, cfg.file_bdi),
        ImportedFileKind::Shmem => (FileKind::Regular, vmspace_pgtable::Bdi::NONE),
        ImportedFileKind::SharedAnonymous => (FileKind::ShmemZero, vmspace_pgtable::Bdi::NONE),
    };
    VmFile {
        name: f.path.clone(),
        deleted: f.deleted,
        dev_major: f.dev_major,
        dev_minor: f.dev_minor,
        inode: f.inode,
        size: FileSize::new(f.size),
        readable: true,
        writable: f.writable,
        noexec: false,
        kind,
        dax: false,
        max_bytes: cfg.file_max_bytes.max(f.size),
        fsize_limit: cfg.fsize_rlimit,
        area: f.area,
        huge: None,
        bdi,
        pages: FilePages::default(),
    }
}

/// The engine's file standing for a special mapping (module docs): the bracketed name on 00:00, inode 0,
/// `size` bytes (the end of its furthest VMA in the file).
fn special_file(name: &str, size: u64) -> VmFile {
    VmFile { writable: false, bdi: vmspace_pgtable::Bdi::NONE, ..(*VmFile::regular(name, 0, size)).clone() }
}

impl Mm {
    /// An address space equal to `layout` (module docs): `cfg` with the layout's parameters
    /// ([`MmConfig::with_layout`]), every VMA created as described, unmerged, the break and the key state set.
    /// `EINVAL` / `ENOMEM` / `EOPNOTSUPP` for a description the checks refuse (module docs), with nothing
    /// built.
    pub fn import(cfg: &MmConfig, layout: &ImportedLayout) -> Result<Mm, Errno> {
        check(layout, cfg)?;
        let cfg = cfg.with_layout(layout);
        let files: Vec<Arc<VmFile>> = layout.files.iter().map(|f| Arc::new(vm_file(f, &cfg))).collect();
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

impl VmFile {
    /// The engine's file for `f` under `cfg`, as [`Mm::import`] makes one for each [`ImportedFile`]: a
    /// size-only identity (module docs). A caller that mirrors a process's later file mappings (`vmspace
    /// shadow`, one per open descriptor) makes its files this way, so that they read like the imported ones.
    pub fn imported(f: &ImportedFile, cfg: &MmConfig) -> Arc<VmFile> {
        Arc::new(vm_file(f, cfg))
    }
}
