//! The address space: [`Mm`], its VMAs, and the Linux 6.18 calls that change them.
//!
//! # Model
//!
//! An [`Mm`] is a set of non-overlapping, page-aligned VMAs, each a pool [`Vma`](crate::vma::Vma) with its
//! flags, file and page offset, anon_vma state and anonymous name, kept in one maple tree ([`tree`]), plus the
//! program break and the layout (`mmap_base`, `start_stack`), the mlock state (`mm->locked_vm`,
//! `mm->def_flags`) and the guard markers ([`guard`]: the page-table state `MADV_GUARD_INSTALL` leaves, kept
//! aside until the engine has page tables). The calls (`mmap`, `munmap`, `mprotect`, `mremap`, `madvise`,
//! `mlock`, `mlock2`, `munlock`, `mlockall`, `munlockall`, `msync`, `brk`, `set_anon_name`, `fault`, `fork`)
//! follow the kernel's code paths step for step:
//! the same argument checks in the same order (so the same errno wins when several apply), the same
//! split-then-merge decisions (`vma_merge_new_range`, `vma_merge_existing_range`, `vma_modify`, `__split_vma`;
//! the kernel's rules), and the same partial-progress behaviour where Linux has it (mprotect stops at the
//! first hole after changing the VMAs before it; madvise skips holes and reports ENOMEM at the end).
//!
//! # Readers' view
//!
//! The tree is in RCU mode and every change is made under the mmap write lock with the kernel's per-VMA lock
//! protocol ([`tree`] describes the protocol and the store order that keeps lock-free readers from seeing
//! false gaps). [`Mm::shared`] hands readers the locks and the tree; `lock_vma_under_rcu` works on it.
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
//! The tree is valid and exact (each range is its VMA's range); VMAs are non-empty, page-aligned, below
//! `TASK_SIZE`, attached and of this mm; `map_count` is their number; a VMA's anon_vma chain is empty exactly
//! when it has no anon_vma, and the published anon_vma is the chain's; shared VMAs never have an anon_vma;
//! every guarded page lies in a `VM_MAYBE_GUARD` VMA ([`guard`]); `locked_vm` is at least the pages of the
//! `VM_LOCKED` VMAs (more only after `MREMAP_DONTUNMAP` of a locked VMA, which Linux does not uncharge).
//! Adjacent VMAs that Linux would have merged are *not* an invariant: Linux does not merge on every path
//! (munmap never merges; a failed second split leaves two identical neighbours), so neither does the engine.

// Without the `testing` feature this module is private: the re-exports and helpers that only tests use from
// outside are then unused.
#![cfg_attr(not(feature = "testing"), allow(unused_imports, dead_code))]

mod brk;
pub mod config;

mod fork;
pub mod guard;
mod hugetlb;
mod madvise;
mod maps;
mod merge;
mod mlock;
mod mmap;
mod mprotect;
mod mremap;
mod mseal;
mod msync;
mod munmap;
mod pkeys;
mod populate;
pub mod tree;
mod unmapped;

use std::fmt;
use std::sync::Arc;

pub use crate::vma::{AnonState, AnonVma, FileKind, VmFile, VmFlags, VmaSnapshot};
pub use config::{HugetlbConfig, HugetlbPool, MmConfig, Overcommit, PAGE_SIZE, TASK_SIZE, ThpMode};
pub use guard::GuardMarkers;
pub use tree::MmShared;
use tree::{V, VmaExt, Vmas};
pub use vmspace_abi::{
    Advice, Errno, MapFlags, MclFlags, MlockFlags, MremapFlags, MsyncFlags, PkeyRights, Prot,
};

/// Page mask (`PAGE_MASK` is `!(PAGE_SIZE - 1)`).
const PAGE_MASK: u64 = !(PAGE_SIZE - 1);

/// `PAGE_ALIGN` with C's wrap-around (a length within a page of `u64::MAX` becomes 0).
pub(crate) fn page_align(x: u64) -> u64 {
    x.wrapping_add(PAGE_SIZE - 1) & PAGE_MASK
}

/// An address space.
pub struct Mm {
    cfg: MmConfig,
    /// `mm->brk`.
    brk: u64,
    /// `mm->start_brk`.
    start_brk: u64,
    /// Allocations left before an injected failure (`None`: never fail).
    alloc_budget: Option<u64>,
    /// Next inode number for shmem and hugetlbfs objects.
    next_shmem_ino: u64,
    /// `mm->locked_vm`: pages charged to `RLIMIT_MEMLOCK` (mlock, `MAP_LOCKED`, `MCL_FUTURE` mappings).
    locked_vm: u64,
    /// `mm->def_flags`: flags every new mapping, brk extension and stack gets (`VM_LOCKED` and
    /// `VM_LOCKONFAULT` after `mlockall(MCL_FUTURE)`).
    def_flags: VmFlags,
    /// The guard markers `MADV_GUARD_INSTALL` left ([`guard`]).
    guards: GuardMarkers,
    /// The VMA tree, the locks and the pool.
    vmas: Vmas,
    /// Protection keys ([`pkeys`]).
    pkeys: pkeys::PkeyState,
    /// Whether any VMA may be sealed (set by the first `mseal`, copied by fork): munmap's seal walk is skipped
    /// while it is false.
    sealed: bool,
    /// The hugetlb pools, one per huge page size ([`hugetlb`]); shared with fork children.
    huge: Arc<Vec<Arc<crate::vma::HugePool>>>,
}

impl fmt::Debug for Mm {
    /// The VMAs (snapshots, in order), then the mlock state and the guard markers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vmas: Vec<VmaSnapshot> = self.areas().map(|v| v.snapshot()).collect();
        f.debug_struct("Mm")
            .field("vmas", &vmas)
            .field("locked_vm", &self.locked_vm)
            .field("def_flags", &self.def_flags)
            .field("guards", &self.guards)
            .finish()
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

    testing_pub! {
    /// The same with VMAs from `pool` (tests inject pool failures into a private pool).
    pub fn with_pool(cfg: MmConfig, pool: &'static crate::vma::VmaPool) -> Mm {
        Mm {
            brk: cfg.start_brk,
            start_brk: cfg.start_brk,
            pkeys: pkeys::PkeyState::new(cfg.pku),
            sealed: false,
            huge: Mm::new_huge_pools(&cfg),
            cfg,
            alloc_budget: None,
            next_shmem_ino: 1,
            locked_vm: 0,
            def_flags: VmFlags::NONE,
            guards: GuardMarkers::new(),
            vmas: Vmas::new(pool),
        }
    }
    }

    /// The configuration.
    pub fn config(&self) -> &MmConfig {
        &self.cfg
    }

    /// The current program break.
    pub fn brk_value(&self) -> u64 {
        self.brk
    }

    /// The hugetlb pools (one per huge page size) with the pages they have left.
    pub fn huge_pools(&self) -> Vec<Arc<crate::vma::HugePool>> {
        self.huge.to_vec()
    }

    /// `mm->locked_vm` in pages (`VmLck` of `/proc/PID/status` is this times 4 kB).
    pub fn locked_vm(&self) -> u64 {
        self.locked_vm
    }

    /// `mm->def_flags`: the flags new mappings get (`VM_LOCKED`, `VM_LOCKONFAULT` after `mlockall(MCL_FUTURE)`).
    pub fn def_flags(&self) -> VmFlags {
        self.def_flags
    }

    /// `mm->total_vm` in pages: every mapped page.
    pub fn total_vm(&self) -> u64 {
        self.areas().map(|v| v.pages()).sum()
    }

    /// The guard markers ([`GuardMarkers`]): which pages `MADV_GUARD_INSTALL` guards.
    pub fn guard_markers(&self) -> &GuardMarkers {
        &self.guards
    }

    // ----- the facade's reads: snapshots, never a `&Vma` a later call could change -----

    /// The VMA containing `addr` (`vma_lookup`), as a snapshot.
    pub fn vma_at(&self, addr: u64) -> Option<VmaSnapshot> {
        self.lookup(addr).map(|v| v.snapshot())
    }

    /// The first VMA ending above `addr` (`find_vma`: the one containing `addr`, else the next one), as a
    /// snapshot.
    pub fn find_vma(&self, addr: u64) -> Option<VmaSnapshot> {
        self.find(addr).map(|v| v.snapshot())
    }

    /// Every VMA in address order, as snapshots (one O(n) pass over the tree).
    pub fn vmas(&self) -> impl Iterator<Item = VmaSnapshot> + use<> {
        self.areas().map(|v| v.snapshot())
    }

    /// Live nodes of the VMA tree (each a 256-byte maple node, as in the kernel): the tree's share of the
    /// memory an address space costs.
    pub fn tree_nodes(&self) -> u64 {
        self.tree().node_stats().live
    }

    testing_pub! {
    /// Makes the allocation after the next `n` fail (VMA objects and tree nodes alike); `None` removes the
    /// injection. Each call reserves its worst case before changing anything, so a failure leaves the address
    /// space unchanged.
    pub fn inject_alloc_failure(&mut self, n: Option<u64>) {
        self.alloc_budget = n;
    }
    }

    /// Reserves `n` allocations (VMA objects plus tree preallocation) or fails with ENOMEM.
    fn reserve(&mut self, n: u64) -> Result<(), Errno> {
        self.charge_budget(n)?;
        self.reserve_objects(n)
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

    /// `security_vm_enough_memory_mm` under the configured overcommit policy.
    fn enough_memory(&self, pages: u64) -> Result<(), Errno> {
        match self.cfg.overcommit {
            Overcommit::Always | Overcommit::Never => Ok(()),
            Overcommit::Guess { limit_pages } if pages > limit_pages => Err(Errno::ENOMEM),
            Overcommit::Guess { .. } => Ok(()),
        }
    }

    /// `vm_start_gap`: a growsdown VMA keeps `stack_guard_gap` free below it.
    fn vm_start_gap(&self, v: V) -> u64 {
        if v.fl().intersects(VmFlags::GROWSDOWN) {
            v.start().saturating_sub(self.cfg.stack_guard_gap)
        } else {
            v.start()
        }
    }

    // ----- anon_vma -----

    /// `anon_vma_prepare` for `v`: no-op if it has one; else reuse a neighbour's (`find_mergeable_anon_vma`:
    /// the next VMA first, then the previous, each only if adjacent, compatible (same file, flags equal but
    /// for access bits, linear pgoff) and with a singular chain), or a new one.
    fn anon_vma_prepare(&mut self, v: V) {
        if v.anon().is_some() {
            return;
        }
        let compatible = |x: V, y: V| {
            x.end() == y.start()
                && x.file_is(y.file().as_ref())
                && ((x.fl() ^ y.fl()) & !(VmFlags::ACCESS_FLAGS | VmFlags::IGNORE_MERGE)).is_empty()
                && y.pgoff() == x.pgoff_at(y.start())
        };
        let reusable = |old: V| {
            let st = old.anon();
            if st.chain_len() == 1 { st.anon_vma().cloned() } else { None }
        };
        let mut reuse = None;
        if let Some(next) = self.next_from(v.end())
            && compatible(v, next)
        {
            reuse = reusable(next);
        }
        if reuse.is_none()
            && let Some(prev) = self.prev_of(v.start())
            && compatible(prev, v)
        {
            reuse = reusable(prev);
        }
        self.set_anon(v, AnonState::prepare(reuse.as_ref()));
    }

    // ----- faults -----

    /// A user-mode access to `addr` (an x86 page fault): finds the VMA (growing a growsdown VMA down to the
    /// page, as `expand_stack` does, before the access check), checks the access (a write needs `VM_WRITE`;
    /// a read any of read, write or exec: x86 page tables cannot express write-only or exec-only) and, for a
    /// file, the file size (SIGBUS beyond it), and on a write to a private VMA gives it an anon_vma; a page with
    /// a guard marker faults (SIGSEGV) whatever the VMA allows, before any anon_vma is prepared; a hugetlb page
    /// comes from its pool (SIGBUS when there is none). Only VMA state changes: page tables are not modelled
    /// here, and neither is PKRU (protection keys restrict user-mode accesses once page tables arrive:
    /// `pkeys`). `EFAULT` for an access that raises SIGSEGV/SIGBUS.
    pub fn fault(&mut self, addr: u64, write: bool) -> Result<(), Errno> {
        self.locked(|mm| mm.access(addr, write, false))
    }

    /// The same access made through GUP (`process_vm_readv`/`writev`: `mm/gup.c: __get_user_pages` without
    /// `FOLL_FORCE`): no stack expansion (GUP stopped growing stacks in 6.5), and a read needs `VM_READ`.
    pub fn gup_access(&mut self, addr: u64, write: bool) -> Result<(), Errno> {
        self.locked(|mm| mm.access(addr, write, true))
    }

    fn access(&mut self, addr: u64, write: bool, gup: bool) -> Result<(), Errno> {
        let addr = addr & PAGE_MASK;
        let Some(mut v) = self.find(addr) else { return Err(Errno::EFAULT) };
        if v.start() > addr {
            if gup || !v.fl().intersects(VmFlags::GROWSDOWN) {
                return Err(Errno::EFAULT);
            }
            self.expand_downwards(v, addr).map_err(|_| Errno::EFAULT)?;
            v = self.lookup(addr).expect("expanded VMA covers the address");
        }
        let fl = v.fl();
        let ok = if write {
            fl.intersects(VmFlags::WRITE)
        } else if gup {
            fl.intersects(VmFlags::READ)
        } else {
            fl.intersects(VmFlags::ACCESS_FLAGS)
        };
        if !ok || (gup && fl.intersects(VmFlags::IO | VmFlags::PFNMAP)) {
            return Err(Errno::EFAULT);
        }
        self.fault_range(v, addr, addr + PAGE_SIZE, write)
    }

    /// `expand_downwards`: grows the growsdown VMA `v` down to `addr` (page-aligned).
    fn expand_downwards(&mut self, v: V, addr: u64) -> Result<(), Errno> {
        if addr < self.cfg.mmap_min_addr {
            return Err(Errno::EPERM);
        }
        if let Some(prev) = self.prev_of(v.start())
            && !prev.fl().intersects(VmFlags::GROWSDOWN)
            && prev.fl().intersects(VmFlags::ACCESS_FLAGS)
            && addr - prev.end() < self.cfg.stack_guard_gap
        {
            return Err(Errno::ENOMEM);
        }
        self.reserve(1)?;
        self.anon_vma_prepare(v);
        let size = v.end() - addr;
        let grow = (v.start() - addr) >> config::PAGE_SHIFT;
        // acct_stack_growth: the stack rlimit, then the mlock limit, then overcommit.
        if grow > v.pgoff() || size > self.cfg.stack_rlimit {
            return Err(Errno::ENOMEM);
        }
        if !self.mlock_future_ok(v.fl(), grow << config::PAGE_SHIFT) {
            return Err(Errno::ENOMEM);
        }
        self.enough_memory(grow)?;
        let (end, pgoff) = (v.end(), v.pgoff() - grow);
        self.set_range(v, addr, end, pgoff);
        if v.fl().intersects(VmFlags::LOCKED) {
            self.locked_vm += grow;
        }
        Ok(())
    }
}
