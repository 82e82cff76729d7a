//! The address space: [`Mm`], its VMAs, its page table, and the Linux 6.18 calls that change them.
//!
//! # Model
//!
//! An [`Mm`] is a set of non-overlapping, page-aligned VMAs, each a pool [`Vma`](crate::vma::Vma) with its
//! flags, file and page offset, anon_vma state and anonymous name, kept in one maple tree ([`tree`]); a page
//! table ([`vmspace_pgtable::PageTable`]) whose entries map frames of a [`Memory`] (the machine's memory, shared
//! with fork children and with the page caches of the files mapped); the program break and the layout
//! (`mmap_base`, `start_stack`), the mlock state (`mm->locked_vm`, `mm->def_flags`) and the protection-key state.
//! The calls (`mmap`, `munmap`, `mprotect`, `mremap`, `madvise`, `mlock`, `mlock2`, `munlock`, `mlockall`,
//! `munlockall`, `msync`, `brk`, `set_anon_name`, `mseal`, the pkey calls, `fork`) follow the kernel's code
//! paths step for step: the same argument checks in the same order (so the same errno wins when several
//! apply), the same split-then-merge decisions (`vma_merge_new_range`, `vma_merge_existing_range`,
//! `vma_modify`, `__split_vma`), the same partial-progress behaviour where Linux has it (mprotect stops at the
//! first hole after changing the VMAs before it; madvise skips holes and reports ENOMEM at the end), and the
//! same page-table work (munmap zaps and frees tables between the neighbours, mprotect rewrites protections,
//! mremap moves tables, fork copies them, madvise zaps or marks pages, populate faults pages in). User accesses
//! go through [`Mm::fault`] (the x86 page fault, [`fault`]) and the emulated MMU ([`Mm::read`],
//! [`Mm::write`]).
//!
//! # Threads and locks
//!
//! `Mm` is `Send + Sync` and every call takes `&self`: threads share one address space as a process's threads
//! do, and each call synchronises inside as Linux 6.18 does:
//!
//! - the calls that change VMAs take the mmap write lock ([`Mm::locked`]); the state only they change (the
//!   break, `locked_vm`, `def_flags`, the key allocation map, the VMA stash, `map_count`) lives in
//!   [`MmState`] behind an [`MmapCell`], whose `&mut` is handed out only against the held write lock (and `&`
//!   against a held read lock);
//!   `munmap`, brk shrinking and mremap shrinking in place then downgrade it (`mmap_write_downgrade`, ending
//!   every VMA write lock of the call) and clear the removed range's page tables under the read hold, as
//!   `vms_complete_munmap_vmas` does with `unlock` (module `munmap`);
//! - the calls Linux runs under the mmap read lock take it ([`Mm::read_locked`]): most madvise advice
//!   (`get_lock_mode`), msync, and the population that follows mmap (`MAP_POPULATE`, `MAP_LOCKED`), mlock,
//!   mlockall, brk and mremap once their write lock is dropped (`__mm_populate`); `MADV_DONTNEED` / `FREE`
//!   try the VMA's own read lock first;
//! - faults take the VMA read lock (`lock_vma_under_rcu`) and fall back to the mmap read lock
//!   ([`fault`]); a stack that must grow takes the mmap write lock for the expansion only;
//! - state that changes under a read lock has its own synchronisation: a VMA's first anon_vma is prepared under
//!   the mmap read lock and `page_table_lock` (`__anon_vma_prepare`), the hugetlb pools and objects have
//!   mutexes, counters are sharded atomics, page-table entries have their split locks (the `pgtable` crate).
//!
//! Lock order: mmap_lock, VMA write locks, the tree's writer mutex; `page_table_lock` and a file's rmap lock
//! (taken under the mmap lock, never the other way) before the page cache's mutexes and PTE locks.
//!
//! # Readers' view
//!
//! The tree is in RCU mode and every change is made under the mmap write lock with the kernel's per-VMA lock
//! protocol ([`tree`] describes the protocol and the store order that keeps lock-free readers from seeing
//! false gaps). [`Mm::shared`] hands readers the locks, the tree and the page table; `lock_vma_under_rcu` and
//! `lock_next_vma` work on it, and lockless page-table walkers (the emulated MMU, smaps) walk the page table
//! under RCU. `fork` builds the child's tree with the tree's O(n) copy (or, for comparison, by inserting each
//! VMA: [`ForkMode`]).
//!
//! # Failure
//!
//! Every call first validates its arguments and reserves the VMA objects and tree nodes its worst case needs
//! (`reserve`), so an allocation failure (injected with [`Mm::inject_alloc_failure`]) is reported before
//! anything changes; the page-table allocations of a call (mremap's destination tables, fork's copy) come
//! before its VMA changes, or are undone completely (fork tears the child down). Failures that Linux detects
//! mid-way (the `max_map_count` check of a second split, a hole met by mprotect) leave exactly the state Linux
//! leaves, which the differential tests compare.
//!
//! # Invariants ([`Mm::validate`])
//!
//! The tree is valid and exact (each range is its VMA's range); VMAs are non-empty, page-aligned, below
//! `TASK_SIZE`, attached and of this mm; `map_count` is their number; a VMA's anon_vma chain is empty exactly
//! when it has no anon_vma, and the published anon_vma is the chain's; shared VMAs never have an anon_vma;
//! `locked_vm` is at least the pages of the `VM_LOCKED` VMAs (more only after `MREMAP_DONTUNMAP` of a locked
//! VMA, which Linux does not uncharge); every file VMA is registered with its file's page cache and every
//! registration is a VMA's. The page table validates (`PageTable::validate`: table and RSS counters, frame
//! states) and agrees with the VMAs ([`pages`]): every entry lies inside a VMA, a guard marker only in a
//! `VM_MAYBE_GUARD` VMA, a present entry's rights within its VMA's (writable only in a `VM_WRITE` VMA,
//! executable only in a `VM_EXEC` one, `PROT_NONE` exactly in an inaccessible one), an anonymous page never in
//! a shared VMA. Adjacent VMAs that Linux would have merged are *not* an invariant: Linux does not merge on
//! every path (munmap never merges; a failed second split leaves two identical neighbours), so neither does the
//! engine.

// Without the `testing` feature this module is private: the re-exports and helpers that only tests use from
// outside are then unused.
#![cfg_attr(not(feature = "testing"), allow(unused_imports, dead_code))]

mod brk;
pub mod config;

pub mod fault;
mod fork;
mod hugetlb;
pub mod import;
mod madvise;
mod maps;
mod merge;
mod mirror;
mod mlock;
mod mmap;
mod mprotect;
mod mremap;
mod mseal;
mod msync;
mod munmap;
pub mod pages;
mod pkeys;
mod populate;
pub mod reader;
pub mod tree;
mod unmapped;

use std::cell::UnsafeCell;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use vmspace_pgtable::{Memory, PageTable};
use vmspace_rcu::sync::{AtomicU32, AtomicU64, Mutex};

pub use crate::vma::{AnonState, AnonVma, FileKind, VmFile, VmFlags, VmaSnapshot};
pub use config::{HugetlbConfig, HugetlbPool, MmConfig, Overcommit, PAGE_SIZE, TASK_SIZE, ThpMode};
pub use fault::{Fault, FaultMode, MmFaultStats};
pub use fork::ForkMode;
pub use import::{
    ImportedBacking, ImportedFile, ImportedFileKind, ImportedLayout, ImportedPkeys, ImportedVma,
};
#[cfg(all(feature = "testing", not(loom)))]
pub use munmap::set_downgraded_unmap_hook;
pub use reader::{ProcFile, ProcFileKind, ProcReader, ReaderMode, RecordHook};
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

/// The end of the range `[start, start + PAGE_ALIGN(len_in))` that madvise (`madvise_should_skip`), mseal
/// (`do_mseal`) and the anonymous-name prctl (`madvise_set_anon_name`) work on, after the checks they share:
/// `start` page-aligned, the length rounding up without wrapping to 0, the end without overflow (EINVAL
/// otherwise). `Ok(None)` for an empty range, which these calls accept doing nothing.
pub(crate) fn nonempty_page_range(start: u64, len_in: u64) -> Result<Option<u64>, Errno> {
    if start & !PAGE_MASK != 0 {
        return Err(Errno::EINVAL);
    }
    let len = page_align(len_in);
    if len_in != 0 && len == 0 {
        return Err(Errno::EINVAL);
    }
    let end = start.checked_add(len).ok_or(Errno::EINVAL)?;
    Ok((end != start).then_some(end))
}

/// The machine's memory every address space of the process uses unless it is given its own
/// ([`Mm::with_memory`]): one emulated machine, as the processes of one kernel share its memory map. Created
/// at the first use; never dropped.
#[cfg(not(loom))]
fn default_memory() -> Arc<Memory> {
    static MEM: std::sync::OnceLock<Arc<Memory>> = std::sync::OnceLock::new();
    MEM.get_or_init(|| Memory::new(vmspace_pgtable::MemoryConfig::default())).clone()
}

/// Under loom every address space gets its own (small) memory: a process-wide one cannot outlive a model run.
#[cfg(loom)]
fn default_memory() -> Arc<Memory> {
    Memory::new(vmspace_pgtable::MemoryConfig { max_frames: 64, fault_around_bytes: 0, max_tables: u64::MAX })
}

/// The state of an [`Mm`] that only the mmap write lock changes (module docs, "Threads and locks").
#[derive(Debug)]
pub(crate) struct MmState {
    /// `mm->brk`.
    pub brk: u64,
    /// `mm->start_brk`.
    pub start_brk: u64,
    /// Allocations left before an injected failure (`None`: never fail).
    pub alloc_budget: Option<u64>,
    /// `mm->locked_vm`: pages charged to `RLIMIT_MEMLOCK` (mlock, `MAP_LOCKED`, `MCL_FUTURE` mappings).
    pub locked_vm: u64,
    /// `mlock_fixup` truncated a range of 2^31 pages or more to its `int` count (as `mm/mlock.c` does): from
    /// then on `locked_vm` no longer covers the locked VMAs' pages, and `validate` stops requiring it.
    pub locked_vm_truncated: bool,
    /// `mm->def_flags`: flags every new mapping, brk extension and stack gets (`VM_LOCKED` and
    /// `VM_LOCKONFAULT` after `mlockall(MCL_FUTURE)`).
    pub def_flags: VmFlags,
    /// Protection keys ([`pkeys`]).
    pub pkeys: pkeys::PkeyState,
    /// Whether any VMA may be sealed (set by the first `mseal`, copied by fork): munmap's seal walk is skipped
    /// while it is false.
    pub sealed: bool,
    /// Pool VMAs reserved for the current call.
    pub stash: Vec<V>,
    /// `mm->map_count`.
    pub map_count: u64,
}

/// A cell for state that the mmap write lock protects (module docs): `&mut` only against the held write lock,
/// `&` against a held read or write lock, both of this mm (checked by the lock's mm id).
pub(crate) struct MmapCell<T> {
    /// The owning mm's [`MmLocking::id`](crate::vma::MmLocking::id).
    owner: u64,
    v: UnsafeCell<T>,
}

// SAFETY: the value is reached only through `write` (with the owner's mmap write lock held, which excludes
// every other holder of the lock, reader or writer: one `&mut` at a time, borrowed from the exclusive borrow
// of the write guard) or `read` (with a read hold: only `&`, which `T: Sync` allows to share). `T: Send` lets
// the value be used from whichever thread holds the lock.
unsafe impl<T: Send + Sync> Sync for MmapCell<T> {}

impl<T> MmapCell<T> {
    fn new(owner: u64, v: T) -> Self {
        MmapCell { owner, v: UnsafeCell::new(v) }
    }

    /// The value, mutably, for as long as the write lock `w` of the owner is borrowed.
    fn write<'a>(&'a self, w: &'a mut crate::vma::MmapWriteGuard<'_>) -> &'a mut T {
        assert_eq!(w.mm().id(), self.owner, "the write lock of another mm");
        // SAFETY: the owner's write lock is held (`w`), and it is borrowed mutably for 'a, so no other
        // reference from this cell can be made through it while the result lives (type docs).
        unsafe { &mut *self.v.get() }
    }

    /// The value, shared, for as long as the read lock `r` of the owner is borrowed.
    fn read<'a>(&'a self, r: &'a crate::vma::MmapReadGuard<'_>) -> &'a T {
        assert_eq!(r.mm().id(), self.owner, "the read lock of another mm");
        // SAFETY: a read hold excludes the write lock, the only source of `&mut` (type docs).
        unsafe { &*self.v.get() }
    }
}

/// An address space (module docs).
pub struct Mm {
    /// The configuration (immutable).
    cfg: MmConfig,
    /// The VMA tree, the locks, the page table and the pool.
    vmas: Vmas,
    /// What only the mmap write lock changes.
    state: MmapCell<MmState>,
    /// The PKRU of the threads making the calls ([`pkeys`]): read by madvise under the VMA read lock, written
    /// under the mmap write lock. Relaxed: a value with no data behind it.
    pkru: AtomicU32,
    /// Next inode number for shmem and hugetlbfs objects (the kernel's `get_next_ino`; copied by fork).
    next_shmem_ino: AtomicU64,
    /// The hugetlb pools, one per huge page size ([`hugetlb`]); shared with fork children.
    huge: Arc<Vec<Arc<crate::vma::HugePool>>>,
    /// `mm->page_table_lock` in its `__anon_vma_prepare` role: serialises the anon_vma preparation of faults
    /// that hold only the mmap read lock.
    page_table_lock: Mutex<()>,
    /// The machine's memory: frames of the page table, of the files' page caches, of fork children.
    mem: Arc<Memory>,
    /// The per-VMA-lock events of the fault path, as `/proc/vmstat` counts them ([`fault`]).
    vmstat: crate::vma::VmaLockStats,
    /// [`FaultMode`] as a number (per-Mm default of [`Mm::fault`]).
    fault_mode: AtomicU32,
    /// `mm->start_brk` and `mm->brk` as the readers without the mmap lock see them ([`BrkRacy`]), alone on
    /// their cache line.
    brk_racy: vmspace_rcu::CachePadded<BrkRacy>,
}

/// The break as the `/proc` readers without the mmap lock read it: for every VMA they show (the `[heap]`
/// name, `vma_is_initial_heap`). Kept off the lines of the write-locked state ([`MmState`]), which the writer
/// changes on every call: a per-VMA reader's load of a word on such a line took the line from the writer
/// between its stores, and the writer's next store had to take it back (BENCHMARKS.md "Contention", the
/// twin baseline).
pub(crate) struct BrkRacy {
    /// `mm->start_brk`, which never moves after the address space is made.
    pub(crate) start_brk: u64,
    /// `mm->brk` (`MmWrite::set_brk` stores it). Relaxed: a value with no data behind it.
    pub(crate) brk: AtomicU64,
}

/// The mmap write lock held: the address space's view for the calls that change VMAs. Dereferences to the
/// [`Mm`] (shared parts, the tree, the page table) and holds the write-locked [`MmState`] (`st`) and the
/// call's one cursor into the VMA tree (`cur`, the kernel's `vma_iterator`: module `tree`, "One cursor per
/// call").
pub(crate) struct MmWrite<'a> {
    /// The address space.
    pub mm: &'a Mm,
    /// Its write-locked state.
    pub st: &'a mut MmState,
    /// The call's tree cursor.
    pub(crate) cur: tree::CallCursor<'a>,
    /// The page-level work of an unmap made with `unlock` (`munmap`, brk shrinking, mremap shrinking in place:
    /// [`MmWrite::do_munmap`]), which [`Mm::locked`] runs after downgrading the lock (module [`munmap`]).
    pub(crate) pending: Option<munmap::ClearPtes>,
}

impl<'a> MmWrite<'a> {
    /// The write-locked view of `mm` (the caller holds its mmap write lock), with a cursor that has not walked.
    pub(crate) fn new(mm: &'a Mm, st: &'a mut MmState) -> Self {
        MmWrite { mm, st, cur: tree::CallCursor::new(&mm.vmas.shared.tree), pending: None }
    }
}

impl Drop for MmWrite<'_> {
    fn drop(&mut self) {
        // Only `Mm::locked` runs a downgraded unmap's page work; a view made elsewhere must not queue one.
        debug_assert!(
            self.pending.is_none() || std::thread::panicking(),
            "an unmap's page work queued outside Mm::locked"
        );
    }
}

impl Deref for MmWrite<'_> {
    type Target = Mm;
    #[inline]
    fn deref(&self) -> &Mm {
        self.mm
    }
}

/// The mmap read lock held: the address space with a shared view of its [`MmState`].
pub(crate) struct MmRead<'a> {
    /// The address space.
    pub mm: &'a Mm,
    /// Its state (read-only).
    pub st: &'a MmState,
}

impl Deref for MmRead<'_> {
    type Target = Mm;
    #[inline]
    fn deref(&self) -> &Mm {
        self.mm
    }
}

impl fmt::Debug for Mm {
    /// The VMAs (snapshots, in order), then the mlock state and the page table's counters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.read_locked(|r| {
            let vmas: Vec<VmaSnapshot> = r.areas().map(|v| v.snapshot()).collect();
            f.debug_struct("Mm")
                .field("vmas", &vmas)
                .field("locked_vm", &r.st.locked_vm)
                .field("def_flags", &r.st.def_flags)
                .field("rss", &r.pt().rss())
                .finish()
        })
    }
}

impl Mm {
    /// An empty address space with configuration `cfg` (the break at `cfg.start_brk`), its VMAs from the
    /// process-wide pool and its pages from the process-wide memory.
    pub fn new(cfg: MmConfig) -> Mm {
        Mm::with_memory(cfg, default_memory())
    }

    /// The same with pages from `mem` (tests that count every frame use a memory of their own). The page
    /// table's top level is allocated here, outside failure injection's reach.
    pub fn with_memory(cfg: MmConfig, mem: Arc<Memory>) -> Mm {
        #[cfg(not(loom))]
        let pool = crate::vma::VmaPool::global();
        // Loom models cannot share a process-wide pool across model iterations; each Mm gets its own.
        #[cfg(loom)]
        let pool = crate::vma::VmaPool::leak_new();
        Mm::with_pool_and_memory(cfg, pool, mem)
    }

    testing_pub! {
    /// The same with VMAs from `pool` (tests inject pool failures into a private pool).
    pub fn with_pool(cfg: MmConfig, pool: &'static crate::vma::VmaPool) -> Mm {
        Mm::with_pool_and_memory(cfg, pool, default_memory())
    }

    /// The same with VMAs from `pool` and pages from `mem`.
    pub fn with_pool_and_memory(cfg: MmConfig, pool: &'static crate::vma::VmaPool, mem: Arc<Memory>) -> Mm {
        let pt = PageTable::new(&mem).expect("the top-level table of a new page table");
        Mm::from_parts(cfg, Vmas::new(pool, Arc::new(pt)), mem, MmParts::default())
    }
    }

    /// An address space around `vmas` (a new or a forked tree) with the inherited `parts`.
    fn from_parts(cfg: MmConfig, vmas: Vmas, mem: Arc<Memory>, parts: MmParts) -> Mm {
        let id = vmas.shared.locking.id();
        let st = MmState {
            brk: parts.brk.unwrap_or(cfg.start_brk),
            start_brk: parts.start_brk.unwrap_or(cfg.start_brk),
            alloc_budget: parts.alloc_budget,
            locked_vm: 0,
            locked_vm_truncated: false,
            def_flags: parts.def_flags,
            pkeys: parts.pkeys.unwrap_or_else(|| pkeys::PkeyState::new(cfg.pku)),
            sealed: parts.sealed,
            stash: Vec::new(),
            map_count: parts.map_count,
        };
        let (brk, start_brk) = (st.brk, st.start_brk);
        Mm {
            pkru: AtomicU32::new(parts.pkru.unwrap_or(if cfg.pku { pkeys::INIT_PKRU } else { 0 })),
            next_shmem_ino: AtomicU64::new(parts.next_shmem_ino.unwrap_or(1)),
            huge: parts.huge.unwrap_or_else(|| Mm::new_huge_pools(&cfg)),
            cfg,
            vmas,
            state: MmapCell::new(id, st),
            page_table_lock: Mutex::new(()),
            mem,
            vmstat: crate::vma::VmaLockStats::new(),
            fault_mode: AtomicU32::new(0),
            brk_racy: vmspace_rcu::CachePadded::new(BrkRacy { start_brk, brk: AtomicU64::new(brk) }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MmConfig {
        &self.cfg
    }

    /// The machine's memory this address space's pages live in.
    pub fn memory(&self) -> &Arc<Memory> {
        &self.mem
    }

    /// The page table, read-only: a [`PageTableView`](vmspace_pgtable::PageTableView) exposes the emulated
    /// MMU, the lockless walks and the counters, nothing that changes an entry or a table (also reachable from
    /// [`MmShared::page_table`]). The address space alone changes its page table, under its own locks.
    ///
    /// ```compile_fail,E0599
    /// # use vmspace_mm::{Mm, MmConfig};
    /// let mm = Mm::new(MmConfig::default());
    /// // Freeing tables, zapping, changing protections or moving entries behind the address space's back
    /// // does not compile.
    /// mm.page_table().free_pgd_range(0, 1 << 47, 0, 0);
    /// ```
    pub fn page_table(&self) -> vmspace_pgtable::PageTableView<'_> {
        self.vmas.shared.pt.view()
    }

    testing_pub! {
    /// The page table itself, for the address space's own calls (which hold the locks its operations' docs
    /// name) and for tests.
    pub fn pt(&self) -> &Arc<PageTable> {
        &self.vmas.shared.pt
    }
    }

    /// The current program break.
    pub fn brk_value(&self) -> u64 {
        self.read_locked(|r| r.st.brk)
    }

    /// The hugetlb pools (one per huge page size) with the pages they have left.
    pub fn huge_pools(&self) -> Vec<Arc<crate::vma::HugePool>> {
        self.huge.to_vec()
    }

    /// `mm->locked_vm` in pages (`VmLck` of `/proc/PID/status` is this times 4 kB).
    pub fn locked_vm(&self) -> u64 {
        self.read_locked(|r| r.st.locked_vm)
    }

    /// `mm->def_flags`: the flags new mappings get (`VM_LOCKED`, `VM_LOCKONFAULT` after `mlockall(MCL_FUTURE)`).
    pub fn def_flags(&self) -> VmFlags {
        self.read_locked(|r| r.st.def_flags)
    }

    /// `mm->total_vm` in pages: every mapped page.
    pub fn total_vm(&self) -> u64 {
        self.read_locked(|r| r.total_vm_locked())
    }

    /// Pages mapped by the page table, by kind (`RssAnon`, `RssFile`, `RssShmem` of `/proc/PID/status`).
    pub fn rss(&self) -> vmspace_pgtable::Rss {
        self.pt().rss()
    }

    /// Bytes of page-table memory (`VmPTE`, with each table's 64-byte descriptor).
    pub fn page_table_bytes(&self) -> u64 {
        self.pt().table_bytes()
    }

    // ----- the facade's reads: snapshots under the mmap read lock, never a `&Vma` a later call could change -----

    /// The VMA containing `addr` (`vma_lookup`), as a snapshot.
    pub fn vma_at(&self, addr: u64) -> Option<VmaSnapshot> {
        self.read_locked(|r| r.lookup(addr).map(|v| v.snapshot()))
    }

    /// The first VMA ending above `addr` (`find_vma`: the one containing `addr`, else the next one), as a
    /// snapshot.
    pub fn find_vma(&self, addr: u64) -> Option<VmaSnapshot> {
        self.read_locked(|r| r.find(addr).map(|v| v.snapshot()))
    }

    /// Every VMA in address order, as snapshots (one O(n) pass over the tree under the mmap read lock).
    pub fn vmas(&self) -> impl Iterator<Item = VmaSnapshot> + use<> {
        self.read_locked(|r| r.areas().map(|v| v.snapshot()).collect::<Vec<_>>()).into_iter()
    }

    /// Live nodes of the VMA tree (each a 256-byte maple node, as in the kernel): the tree's share of the
    /// memory an address space costs.
    pub fn tree_nodes(&self) -> u64 {
        self.tree().node_stats().live
    }

    testing_pub! {
    /// Makes the allocation after the next `n` fail (VMA objects and tree nodes alike); `None` removes the
    /// injection. Each call reserves its worst case before changing anything, so a failure leaves the address
    /// space unchanged. Page-level allocations (frames, tables) have their own injection point:
    /// `Memory::inject_alloc_failure` of [`Mm::memory`].
    pub fn inject_alloc_failure(&self, n: Option<u64>) {
        self.locked(|w| w.st.alloc_budget = n);
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

    /// `mm->total_vm` (the caller holds the mmap lock).
    fn total_vm_locked(&self) -> u64 {
        self.areas().map(|v| v.pages()).sum()
    }

    // ----- anon_vma -----

    /// `__anon_vma_prepare` for `v` (the caller holds the mmap lock, read or write): nothing if it has one;
    /// else, under `page_table_lock` (faults of other threads may prepare the same VMA under the read lock;
    /// the loser finds the winner's), reuse a neighbour's (`find_mergeable_anon_vma`: the next VMA first, then
    /// the previous, each only if adjacent, compatible (same file, flags equal but for access bits, linear
    /// pgoff) and with a singular chain), or a new one.
    pub(crate) fn anon_vma_prepare(&self, v: V) {
        if v.has_anon_vma() {
            return;
        }
        let ptl = self.page_table_lock.lock();
        if v.has_anon_vma() {
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
        v.set_anon_prepared(AnonState::prepare(reuse.as_ref()), &ptl);
    }
}

/// What a forked address space inherits (defaults: a new one).
#[derive(Default)]
pub(crate) struct MmParts {
    brk: Option<u64>,
    start_brk: Option<u64>,
    alloc_budget: Option<u64>,
    def_flags: VmFlags,
    pkeys: Option<pkeys::PkeyState>,
    pkru: Option<u32>,
    sealed: bool,
    map_count: u64,
    next_shmem_ino: Option<u64>,
    huge: Option<Arc<Vec<Arc<crate::vma::HugePool>>>>,
}

impl Mm {
    /// Runs `f` under the mmap write lock: the whole call is one write epoch, and every VMA write lock taken
    /// in it ends when it returns. If `f` ended with an unmap made with `unlock` (its page-level work queued in
    /// [`MmWrite::pending`]), the lock is downgraded (`mmap_write_downgrade`: `mm_lock_seq` advances, so every
    /// VMA write lock ends there) and the work runs under the read hold that remains, as
    /// `vms_complete_munmap_vmas` does (module [`munmap`]).
    pub(crate) fn locked<R>(&self, f: impl FnOnce(&mut MmWrite<'_>) -> R) -> R {
        let mut w = self.locking().write_lock();
        let st = self.state.write(&mut w);
        let mut mw = MmWrite::new(self, st);
        let r = f(&mut mw);
        let pending = mw.pending.take();
        // The tree's writer mutex goes with the view, before the downgrade lets readers in.
        drop(mw);
        if let Some(ptes) = pending {
            let held = w.downgrade();
            munmap::downgraded_unmap_hook();
            self.clear_ptes(ptes);
            drop(held);
        }
        r
    }

    /// Runs `f` under the mmap read lock (the calls Linux runs under `mmap_read_lock`). `f` changes no VMA but
    /// through the read-lock paths (`anon_vma_prepare`, `Vma::set_flag_atomic`) and may change page tables.
    pub(crate) fn read_locked<R>(&self, f: impl FnOnce(&MmRead<'_>) -> R) -> R {
        let r = self.locking().read_lock();
        let st = self.state.read(&r);
        f(&MmRead { mm: self, st })
    }
}

impl MmWrite<'_> {
    /// Reserves `n` allocations (VMA objects plus tree preallocation) or fails with ENOMEM.
    fn reserve(&mut self, n: u64) -> Result<(), Errno> {
        self.charge_budget(n)?;
        self.reserve_objects(n)
    }

    /// Draws `n` allocations from the injected-failure budget.
    fn charge_budget(&mut self, n: u64) -> Result<(), Errno> {
        match &mut self.st.alloc_budget {
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
}
