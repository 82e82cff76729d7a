//! The address space: [`Mm`], its VMAs, and the Linux 6.18 calls that change them.
//!
//! # Model
//!
//! An [`Mm`] is a set of non-overlapping, page-aligned VMAs ([`Area`]), each with its flags, file and page
//! offset, anon_vma state ([`anon_vma`]) and anonymous name, plus the program break and the layout
//! (`mmap_base`, `start_stack`). The calls (`mmap`, `munmap`, `mprotect`, `mremap`, `madvise`, `brk`,
//! `set_anon_name`, `fault`, `fork`) follow the kernel's code paths step for step: the same argument checks in
//! the same order (so the same errno wins when several apply), the same split-then-merge decisions
//! (`vma_merge_new_range`, `vma_merge_existing_range`, `vma_modify`, `__split_vma`; §6 of the reference),
//! and the same partial-progress behaviour where Linux has it (mprotect stops at the first hole after
//! changing the VMAs before it; madvise skips holes and reports ENOMEM at the end).
//!
//! # Readers' view
//!
//! What other threads see is the published structure ([`publish`]): the VMA maple tree in RCU mode, holding
//! type-stable pool VMAs ([`crate::vma::Vma`]) that are changed only under the mmap write lock with the
//! per-VMA lock protocol. Each call computes its effect on the writer's model first (the [`Area`] map, which
//! also keeps what only the writer needs, such as anon_vma chains), then publishes the changed range before
//! returning. [`Mm::shared`] hands readers the locks and the tree; `lock_vma_under_rcu` works on it.
//! `fork` builds the child's tree with the tree's O(n) copy.
//!
//! # Failure
//!
//! Every call first validates its arguments and reserves the VMA objects and tree nodes its worst case needs
//! (`reserve`), so an allocation failure (injected with [`Mm::inject_alloc_failure`]) is reported before
//! anything changes. Failures that Linux detects mid-way (the `max_map_count` check of a second split, a hole
//! met by mprotect) leave exactly the state Linux leaves, which the differential tests compare.
//!
//! # Invariants ([`Mm::validate`])
//!
//! VMAs are sorted, non-empty, page-aligned, non-overlapping, below `TASK_SIZE`; the index key of each VMA is
//! its start; `map_count` is their number; a VMA's anon_vma chain is empty exactly when it has no anon_vma;
//! shared VMAs never have an anon_vma. Adjacent VMAs that Linux would have merged are *not* an invariant:
//! Linux does not merge on every path (munmap never merges; a failed second split leaves two identical
//! neighbours), so neither does the engine.

pub mod anon_vma;
mod brk;
pub mod config;
mod engine;

pub mod flags;
mod fork;
mod madvise;
mod maps;
mod merge;
mod mmap;
mod mprotect;
mod mremap;
mod munmap;
pub mod publish;
mod unmapped;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

pub use anon_vma::{AnonState, AnonVma};
pub use config::{MmConfig, Overcommit, PAGE_SIZE, TASK_SIZE};
pub use engine::EngineTarget;
use flags::*;
use publish::Published;
pub use publish::{Handle, MmShared};
pub use vmspace_abi::Errno;

/// Page mask (`PAGE_MASK` is `!(PAGE_SIZE - 1)`).
const PAGE_MASK: u64 = !(PAGE_SIZE - 1);

/// `PAGE_ALIGN` with C's wrap-around (a length within a page of `u64::MAX` becomes 0).
pub(crate) fn page_align(x: u64) -> u64 {
    x.wrapping_add(PAGE_SIZE - 1) & PAGE_MASK
}

/// What kind of object a file-backed VMA maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file (ext4, tmpfs...): pages beyond its size raise SIGBUS.
    Regular,
    /// The shmem object behind a shared anonymous mapping (`shmem_zero_setup`): shows as `/dev/zero
    /// (deleted)`, device 00:01, sized to the mapping.
    ShmemZero,
}

/// A model file: what a file-backed VMA shows in maps and what bounds its faults. Identity is the `Arc`:
/// two VMAs map "the same file" (`vm_file` equality, needed to merge) when they hold the same `Arc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapFile {
    /// The path in the maps name column.
    pub path: String,
    /// Whether the path was unlinked (` (deleted)`).
    pub deleted: bool,
    /// Device major.
    pub dev_major: u32,
    /// Device minor.
    pub dev_minor: u32,
    /// Inode number.
    pub inode: u64,
    /// Size in bytes.
    pub size: u64,
    /// The file was opened for reading (`FMODE_READ`).
    pub readable: bool,
    /// The file was opened for writing (`FMODE_WRITE`).
    pub writable: bool,
    /// The file system is mounted noexec.
    pub noexec: bool,
    /// Regular file or shmem.
    pub kind: FileKind,
    /// The file as published VMAs carry it (`crate::vma::VmFile`): identity follows this `MapFile`.
    pub vm: Arc<crate::vma::VmFile>,
}

impl MapFile {
    /// A regular file opened read-write on an exec-allowed file system (what op scripts create).
    pub fn regular(path: impl Into<String>, inode: u64, size: u64) -> Arc<MapFile> {
        let path = path.into();
        let vm = Arc::new(crate::vma::VmFile { name: path.clone(), dev_major: 0, dev_minor: 0, inode, size });
        Arc::new(MapFile {
            vm,
            path,
            deleted: false,
            dev_major: 0,
            dev_minor: 0,
            inode,
            size,
            readable: true,
            writable: true,
            noexec: false,
            kind: FileKind::Regular,
        })
    }
}

/// One VMA of the model: `[start, end)` with its attributes.
#[derive(Clone)]
pub struct Area {
    /// First address (page-aligned).
    pub start: u64,
    /// One past the last address (page-aligned).
    pub end: u64,
    /// `vm_flags`.
    pub flags: u64,
    /// `vm_pgoff`: file page of `start` (anonymous private: `start >> 12` when mapped, kept by moves of faulted
    /// memory).
    pub pgoff: u64,
    /// The mapped file (`None` for anonymous private memory).
    pub file: Option<Arc<MapFile>>,
    /// anon_vma and chain.
    pub anon: AnonState,
    /// Anonymous VMA name (`PR_SET_VMA_ANON_NAME`).
    pub name: Option<Arc<str>>,
    /// The published VMA (none until the next publication for a new or copied model VMA).
    pub vma: Handle,
}

impl Area {
    /// Length in pages.
    pub fn pages(&self) -> u64 {
        (self.end - self.start) >> config::PAGE_SHIFT
    }

    /// `vma_is_anonymous`: no file and no vm_ops (shared anonymous memory has shmem's).
    pub fn is_anonymous(&self) -> bool {
        self.file.is_none()
    }

    /// `linear_page_index`: the pgoff of `addr` inside this VMA.
    pub fn pgoff_at(&self, addr: u64) -> u64 {
        self.pgoff.wrapping_add((addr - self.start) >> config::PAGE_SHIFT)
    }

    fn same_file(&self, f: Option<&Arc<MapFile>>) -> bool {
        match (&self.file, f) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl fmt::Debug for Area {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:x}-{:x} fl={:#x} pgoff={:#x} file={:?} anon={:?} name={:?}",
            self.start,
            self.end,
            self.flags,
            self.pgoff,
            self.file.as_ref().map(|x| &x.path),
            self.anon,
            self.name
        )
    }
}

/// An address space.
pub struct Mm {
    cfg: MmConfig,
    /// The VMAs, keyed by start.
    vmas: BTreeMap<u64, Area>,
    /// `mm->brk`.
    brk: u64,
    /// `mm->start_brk`.
    start_brk: u64,
    /// Allocations left before an injected failure (`None`: never fail).
    alloc_budget: Option<u64>,
    /// Next inode number for shmem objects.
    next_shmem_ino: u64,
    /// The readers' view: locks, tree, pool VMAs.
    pubs: Published,
}

impl fmt::Debug for Mm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for a in self.vmas.values() {
            l.entry(a);
        }
        l.finish()
    }
}

impl Mm {
    /// An empty address space with configuration `cfg` (the break at `cfg.start_brk`), its VMAs from the
    /// process-wide pool.
    pub fn new(cfg: MmConfig) -> Mm {
        #[cfg(not(loom))]
        let pool = crate::vma::VmaPool::global();
        // Loom models cannot share a process-wide pool across model iterations; each Mm gets its own.
        #[cfg(loom)]
        let pool = crate::vma::VmaPool::leak_new();
        Mm::with_pool(cfg, pool)
    }

    /// The same with VMAs from `pool` (tests inject pool failures into a private pool).
    pub fn with_pool(cfg: MmConfig, pool: &'static crate::vma::VmaPool) -> Mm {
        Mm {
            brk: cfg.start_brk,
            start_brk: cfg.start_brk,
            cfg,
            vmas: BTreeMap::new(),
            alloc_budget: None,
            next_shmem_ino: 1,
            pubs: Published::new(pool),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MmConfig {
        &self.cfg
    }

    /// Number of VMAs (`mm->map_count`).
    pub fn map_count(&self) -> u64 {
        self.vmas.len() as u64
    }

    /// The VMAs in address order.
    pub fn areas(&self) -> impl Iterator<Item = &Area> {
        self.vmas.values()
    }

    /// The VMA containing `addr` (`vma_lookup`).
    pub fn lookup(&self, addr: u64) -> Option<&Area> {
        self.vmas.range(..=addr).next_back().map(|(_, a)| a).filter(|a| a.end > addr)
    }

    /// The first VMA ending above `addr` (`find_vma`).
    pub fn find(&self, addr: u64) -> Option<&Area> {
        if let Some(a) = self.lookup(addr) {
            return Some(a);
        }
        self.vmas.range(addr..).next().map(|(_, a)| a)
    }

    /// The first VMA intersecting `[start, end)` (`find_vma_intersection`).
    pub fn find_intersection(&self, start: u64, end: u64) -> Option<&Area> {
        self.find(start).filter(|a| a.start < end)
    }

    /// The current program break.
    pub fn brk_value(&self) -> u64 {
        self.brk
    }

    /// Makes the allocation after the next `n` fail (VMA objects and tree nodes alike); `None` removes the
    /// injection. Each call reserves its worst case before changing anything, so a failure leaves the address
    /// space unchanged.
    pub fn inject_alloc_failure(&mut self, n: Option<u64>) {
        self.alloc_budget = n;
    }

    /// Reserves `n` allocations (VMA objects plus tree preallocation) or fails with ENOMEM.
    fn reserve(&mut self, n: u64) -> Result<(), Errno> {
        self.charge_budget(n)?;
        self.reserve_published(n)
    }

    /// Draws `n` allocations from the injected-failure budget.
    fn charge_budget(&mut self, n: u64) -> Result<(), Errno> {
        match &mut self.alloc_budget {
            None => Ok(()),
            Some(left) if *left >= n => {
                *left -= n;
                Ok(())
            }
            Some(left) => {
                *left = 0;
                Err(Errno::ENOMEM)
            }
        }
    }

    /// Checks every invariant (module docs); returns the first violation.
    pub fn validate(&self) -> Result<(), String> {
        let mut prev_end = 0u64;
        for (k, a) in &self.vmas {
            if *k != a.start {
                return Err(format!("key {k:#x} != start of {a:?}"));
            }
            if a.start >= a.end {
                return Err(format!("empty VMA {a:?}"));
            }
            if a.start & !PAGE_MASK != 0 || a.end & !PAGE_MASK != 0 {
                return Err(format!("unaligned VMA {a:?}"));
            }
            if a.start < prev_end {
                return Err(format!("overlap at {a:?}"));
            }
            if a.end > TASK_SIZE {
                return Err(format!("beyond TASK_SIZE {a:?}"));
            }
            if a.anon.is_some() == (a.anon.chain_len() == 0) {
                return Err(format!("anon_vma/chain mismatch {a:?}"));
            }
            if a.flags & VM_MAYSHARE != 0 && a.anon.is_some() {
                return Err(format!("shared VMA with anon_vma {a:?}"));
            }
            prev_end = a.end;
        }
        if self.pubs.dirty.is_none() {
            self.validate_published()?;
        }
        Ok(())
    }

    // ----- index primitives (the tree's load / prev / next / store) -----

    /// The VMA before the one starting at `start` (any distance): `vma_prev`.
    fn prev_of(&self, start: u64) -> Option<&Area> {
        self.vmas.range(..start).next_back().map(|(_, a)| a)
    }

    /// The first VMA starting at or after `addr`: `vma_next` from a gap.
    fn next_from(&self, addr: u64) -> Option<&Area> {
        self.vmas.range(addr..).next().map(|(_, a)| a)
    }

    fn get_mut(&mut self, start: u64) -> &mut Area {
        let end = self.vmas[&start].end;
        self.mark_dirty(start, end);
        self.vmas.get_mut(&start).expect("VMA key present")
    }

    fn remove(&mut self, start: u64) -> Area {
        let a = self.vmas.remove(&start).expect("VMA key present");
        self.mark_dirty(a.start, a.end);
        a
    }

    fn insert(&mut self, a: Area) {
        debug_assert!(a.start < a.end);
        self.mark_dirty(a.start, a.end);
        self.vmas.insert(a.start, a);
    }

    /// Moves the VMA keyed `old_start` to `[start, end)` with `pgoff` (`vma_set_range` plus the tree store).
    fn set_range(&mut self, old_start: u64, start: u64, end: u64, pgoff: u64) {
        let mut a = self.remove(old_start);
        a.start = start;
        a.end = end;
        a.pgoff = pgoff;
        self.insert(a);
    }

    /// `__split_vma`: splits the VMA keyed `start` at `addr` (strictly inside). Both halves keep the
    /// attributes; the upper half's pgoff advances; the anon_vma chain is cloned. No limit check.
    fn split_at(&mut self, start: u64, addr: u64) {
        let a = self.get_mut(start);
        debug_assert!(a.start < addr && addr < a.end);
        let mut upper = a.clone();
        upper.pgoff = a.pgoff_at(addr);
        upper.start = addr;
        a.end = addr;
        self.insert(upper);
    }

    /// `split_vma`: the same, refused with ENOMEM when `map_count >= max_map_count`.
    fn split_checked(&mut self, start: u64, addr: u64) -> Result<(), Errno> {
        if self.map_count() >= self.cfg.max_map_count {
            return Err(Errno::ENOMEM);
        }
        self.split_at(start, addr);
        Ok(())
    }

    /// `security_vm_enough_memory_mm` under the configured overcommit policy.
    fn enough_memory(&self, pages: u64) -> Result<(), Errno> {
        match self.cfg.overcommit {
            Overcommit::Always | Overcommit::Never => Ok(()),
            Overcommit::Guess { limit_pages } if pages > limit_pages => Err(Errno::ENOMEM),
            Overcommit::Guess { .. } => Ok(()),
        }
    }

    /// `vm_start_gap`: a growsdown VMA keeps `stack_guard_gap` free below it.
    fn vm_start_gap(&self, a: &Area) -> u64 {
        if a.flags & VM_GROWSDOWN != 0 { a.start.saturating_sub(self.cfg.stack_guard_gap) } else { a.start }
    }

    // ----- anon_vma -----

    /// `anon_vma_prepare` for the VMA keyed `start`: no-op if it has one; else reuse a neighbour's
    /// (`find_mergeable_anon_vma`: the next VMA first, then the previous, each only if adjacent, compatible
    /// (same file, flags equal but for access bits, linear pgoff) and with a singular chain), or a new one.
    fn anon_vma_prepare(&mut self, start: u64) {
        let a = &self.vmas[&start];
        if a.anon.is_some() {
            return;
        }
        let compatible = |x: &Area, y: &Area| {
            x.end == y.start
                && x.same_file(y.file.as_ref())
                && (x.flags ^ y.flags) & !(VM_ACCESS_FLAGS | VM_SOFTDIRTY) == 0
                && y.pgoff == x.pgoff.wrapping_add((y.start - x.start) >> config::PAGE_SHIFT)
        };
        let reusable =
            |old: &Area| if old.anon.chain_len() == 1 { old.anon.anon_vma().cloned() } else { None };
        let mut reuse = None;
        if let Some(next) = self.vmas.get(&a.end)
            && compatible(a, next)
        {
            reuse = reusable(next);
        }
        if reuse.is_none()
            && let Some(prev) = self.prev_of(start)
            && compatible(prev, a)
        {
            reuse = reusable(prev);
        }
        let st = AnonState::prepare(reuse.as_ref());
        self.get_mut(start).anon = st;
    }

    // ----- faults -----

    /// A user-mode access to `addr` (an x86 page fault): finds the VMA (growing a growsdown VMA down to the
    /// page, as `expand_stack` does, before the access check), checks the access (a write needs `VM_WRITE`;
    /// a read any of read, write or exec: x86 page tables cannot express write-only or exec-only) and, for a
    /// file, the file size (SIGBUS beyond it), and on a write to a private VMA gives it an anon_vma. Only VMA
    /// state changes: page tables are not modelled here. `EFAULT` for an access that raises SIGSEGV/SIGBUS.
    pub fn fault(&mut self, addr: u64, write: bool) -> Result<(), Errno> {
        let r = self.access(addr, write, false);
        self.publish();
        r
    }

    /// The same access made through GUP (`process_vm_readv`/`writev`, as the op-script `touch` does on the
    /// live kernel): no stack expansion (GUP stopped growing stacks in 6.5), and a read needs `VM_READ`.
    pub fn gup_access(&mut self, addr: u64, write: bool) -> Result<(), Errno> {
        let r = self.access(addr, write, true);
        self.publish();
        r
    }

    fn access(&mut self, addr: u64, write: bool, gup: bool) -> Result<(), Errno> {
        let addr = addr & PAGE_MASK;
        let Some(a) = self.find(addr) else { return Err(Errno::EFAULT) };
        let mut start = a.start;
        if a.start > addr {
            if gup || a.flags & VM_GROWSDOWN == 0 {
                return Err(Errno::EFAULT);
            }
            start = self.expand_downwards(start, addr).map_err(|_| Errno::EFAULT)?;
        }
        let a = &self.vmas[&start];
        let ok = if write {
            a.flags & VM_WRITE != 0
        } else if gup {
            a.flags & VM_READ != 0
        } else {
            a.flags & VM_ACCESS_FLAGS != 0
        };
        if !ok || (gup && a.flags & (VM_IO | VM_PFNMAP) != 0) {
            return Err(Errno::EFAULT);
        }
        // A write to a private VMA prepares the anon_vma before the page is read from the file
        // (`do_cow_fault`: `vmf_anon_prepare` first), so a write beyond the end of the file still leaves one.
        if write && a.flags & VM_SHARED == 0 {
            self.anon_vma_prepare(start);
        }
        let a = &self.vmas[&start];
        if let Some(f) = &a.file {
            let page = a.pgoff_at(addr);
            if page >= f.size.div_ceil(PAGE_SIZE) {
                return Err(Errno::EFAULT);
            }
        }
        Ok(())
    }

    /// `expand_downwards`: grows the growsdown VMA keyed `start` down to `addr` (page-aligned). Returns the
    /// VMA's new key.
    fn expand_downwards(&mut self, start: u64, addr: u64) -> Result<u64, Errno> {
        if addr < self.cfg.mmap_min_addr {
            return Err(Errno::EPERM);
        }
        if let Some(prev) = self.prev_of(start)
            && prev.flags & VM_GROWSDOWN == 0
            && prev.flags & VM_ACCESS_FLAGS != 0
            && addr - prev.end < self.cfg.stack_guard_gap
        {
            return Err(Errno::ENOMEM);
        }
        self.reserve(1)?;
        self.anon_vma_prepare(start);
        let a = &self.vmas[&start];
        let size = a.end - addr;
        let grow = (a.start - addr) >> config::PAGE_SHIFT;
        if grow > a.pgoff || size > self.cfg.stack_rlimit {
            return Err(Errno::ENOMEM);
        }
        self.enough_memory(grow)?;
        let (end, pgoff) = (a.end, a.pgoff - grow);
        self.set_range(start, addr, end, pgoff);
        Ok(addr)
    }
}
