//! The address space: `Mm` (mmap_lock, `mm_lock_seq`, the VMA maple tree, the page table), `Vma` with its
//! per-VMA lock, the Linux 6.18 syscall surface with its merge/split rules, the fault path, and the readers.
//!
//! ```
//! use vmspace_mm::{Access, Errno, FaultKind, MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, SegvCode, Signal, VmFlags};
//!
//! let mm = Mm::new(MmConfig::default());
//! // mmap: an anonymous private read-write mapping of four pages, placed top-down below mmap_base.
//! let a = mm.mmap(0, 4 * PAGE_SIZE, Prot::RW, MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0)?;
//! // mprotect the second page read-only: the VMA splits in three.
//! mm.mprotect(a + PAGE_SIZE, PAGE_SIZE, Prot::READ)?;
//! assert_eq!(mm.map_count(), 3);
//! let middle = mm.vma_at(a + PAGE_SIZE).expect("mapped");
//! assert_eq!((middle.start, middle.end), (a + PAGE_SIZE, a + 2 * PAGE_SIZE));
//! assert!(!middle.flags.contains(VmFlags::WRITE));
//! // Stores go through the emulated MMU and fault as a CPU's would: the first page takes them, the second
//! // refuses (the address that faulted comes back with the signal the kernel would deliver).
//! mm.write(a + 8, b"hello").expect("writable");
//! let f = mm.write(a + PAGE_SIZE, b"no").unwrap_err();
//! assert_eq!((f.addr, f.signal), (a + PAGE_SIZE, Signal::Segv(SegvCode::AccErr)));
//! let mut buf = [0u8; 5];
//! mm.read(a + 8, &mut buf).expect("readable");
//! assert_eq!(&buf, b"hello");
//! // A fault can also be taken directly: reading the read-only page maps the zero page.
//! assert_eq!(mm.fault(a + PAGE_SIZE, Access::Read), Ok(FaultKind::AnonZero));
//! assert_eq!(mm.fault(a + PAGE_SIZE, Access::Write), Err(Errno::EFAULT));
//! // Restoring the protection merges the three VMAs back into one; /proc/PID/maps shows it.
//! mm.mprotect(a + PAGE_SIZE, PAGE_SIZE, Prot::RW)?;
//! assert_eq!(mm.vmas().count(), 1);
//! assert!(mm.maps_text().starts_with(&format!("{a:012x}-{:012x} rw-p", a + 4 * PAGE_SIZE)));
//! mm.validate().expect("invariants hold");
//! # Ok::<(), Errno>(())
//! ```
//!
//! # Threads
//!
//! An [`Mm`] is shared by threads as a process's address space is: every call takes `&self` and locks as
//! Linux 6.18 does (the mmap write lock for calls that change VMAs, the read lock or a VMA's own read lock
//! for faults and most madvise advice). Here threads fault in their own regions (each fault under its VMA's
//! read lock) while another thread maps and unmaps regions between them:
//!
//! ```
//! use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, Prot};
//!
//! const P: u64 = PAGE_SIZE;
//! let mm = Mm::new(MmConfig::default());
//! let base = 0x6000_0000_0000;
//! let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
//! // Four regions of 16 pages with a 16-page hole after each, where the fourth thread maps and unmaps.
//! for t in 0..3u64 {
//!     mm.mmap(base + t * 32 * P, 16 * P, Prot::RW, fixed, None, 0).expect("mmap");
//! }
//! std::thread::scope(|s| {
//!     for t in 0..3u64 {
//!         let mm = &mm;
//!         s.spawn(move || {
//!             let region = base + t * 32 * P;
//!             for round in 0..50u8 {
//!                 for page in 0..16 {
//!                     mm.fill(region + page * P, P, round ^ t as u8).expect("my own region");
//!                 }
//!                 let mut byte = [0u8];
//!                 mm.read(region + 5 * P + 7, &mut byte).expect("my own region");
//!                 assert_eq!(byte[0], round ^ t as u8, "a write was lost");
//!             }
//!         });
//!     }
//!     s.spawn(|| {
//!         for round in 0..50u64 {
//!             let hole = base + (round % 3) * 32 * P + 16 * P;
//!             mm.mmap(hole, 16 * P, Prot::RW, fixed, None, 0).expect("mmap the neighbour");
//!             mm.write(hole, b"neighbour").expect("mapped");
//!             mm.munmap(hole, 16 * P).expect("munmap");
//!             // The neighbour is gone: touching it is a SIGSEGV.
//!             assert_eq!(mm.read(hole, &mut [0u8; 1]).map_err(|f| f.addr), Err(hole));
//!         }
//!     });
//! });
//! // The faulting threads took the VMA read lock; the mapping thread the mmap write lock.
//! let stats = mm.fault_stats();
//! assert!(stats.vma_lock.success >= 3 * 16, "{stats:?}");
//! assert_eq!(mm.rss().anon, 3 * 16, "each region's pages, nothing of the neighbours");
//! mm.validate().expect("invariants hold");
//! ```
//!
//! # The public surface
//!
//! The crate root is the facade: [`Mm`] and its calls (which take `vmspace_abi`'s typed [`Prot`],
//! [`MapFlags`], [`MremapFlags`], [`Advice`], [`PkeyRights`], [`MlockFlags`], [`MclFlags`], [`MsyncFlags`] and
//! answer with an [`Errno`]), [`MmConfig`] (with the host's hugetlb pools, [`HugetlbConfig`]), the value type
//! [`VmaSnapshot`] that lookups and iteration return ([`Mm::vma_at`], [`Mm::find_vma`], [`Mm::vmas`]), the
//! model files ([`VmFile`], truncatable with [`VmFile::ftruncate`]; hugetlb objects draw on a [`HugePool`]),
//! and the reader entry points: [`Mm::shared`] hands out an [`MmShared`] on which
//! [`lock_vma_under_rcu`] and [`lock_next_vma`] work from other threads, returning a [`VmaReadGuard`] on the
//! [`Vma`] (whose getters are the reader's view; its setters are crate-private), and whose page table
//! ([`MmShared::page_table`]) lockless walkers read. Memory: [`Mm::fault`] / [`Mm::fault_with`] (the 6.18
//! fault path, [`FaultMode`]; [`Mm::do_user_addr_fault`] answers the signal), [`Mm::read`], [`Mm::read_chunks`],
//! [`Mm::write`], [`Mm::touch`], [`Mm::fill`] (accesses through the emulated MMU; a failed one is a [`Fault`]: the
//! address and the [`Signal`] the kernel would deliver, with its [`SegvCode`] or [`BusCode`]), [`Mm::fault_stats`] ([`MmFaultStats`]), [`Mm::rss`]; fork in either tree mode
//! ([`Mm::fork_with`], [`ForkMode`]). A running process's address space becomes an engine one with
//! [`Mm::import`] from a plain description ([`import::ImportedLayout`], which `vmspace_linux::procfs` reads
//! from `/proc/PID`; what is and is not imported: module `space::import`). Pages live in a [`Memory`] (the process-wide one, or one per address
//! space family: [`Mm::with_memory`]); the page-table types come from `vmspace_pgtable` ([`Access`],
//! [`FaultKind`], [`FaultStats`], [`Rss`], [`PageTable`]).
//!
//! The modules themselves (`vma`'s lock protocol, the pool, the raw tree of `space::tree`), the `Vma`
//! setters and the test knobs (`Mm::inject_alloc_failure`, `Mm::inject_tree_alloc_failure`, `Mm::with_pool`,
//! raw `&Vma` lookups, `Mm::tree`) are public only with the `testing` cargo feature, which this crate's own
//! tests, the loom models and the stress tests enable.
//!
//! # Layout
//!
//! Two modules split the crate along the kernel's own seam:
//! - `vma`: the VMA object and every lock that protects it: the per-VMA lock (a reference count carrying the
//!   writer-exclusion flag), the mmap_lock reader/writer semaphore with `mm_lock_seq`, the type-stable VMA
//!   pool, the anon_vma and its chain, the model files, and `lock_vma_under_rcu`.
//! - `space`: the address space built from them: `Mm` over one VMA maple tree, the calls (mmap, munmap,
//!   mprotect, mremap, madvise, mlock, mlockall, msync, brk, fork, anon names, mseal, the protection-key
//!   calls), merge/split, get_unmapped_area, the mlock accounting, the hugetlb pools, the fault path and the
//!   page-level side of every call (`space::pages`: file registration, unmapping, exit, protection changes).
//!
//! Depends on `abi`, `host` (for [`MmConfig::host`]), `rcu`, `maple`, `pgtable` and `proc`; never on op scripts (the
//! engine's script target lives in `vmspace-replay`), the live kernel (`linux`) or benchmarks.

/// Declares the methods inside `pub` with the `testing` feature and `pub(crate)` without: the test knobs and
/// the raw accessors that the crate uses internally and its tests use from outside. The visibility written on
/// each method is ignored.
macro_rules! testing_pub {
    ($($(#[$m:meta])* $_vis:vis fn $name:ident ($($args:tt)*) $(-> $ret:ty)? $body:block)*) => {
        $(
            #[cfg(feature = "testing")]
            $(#[$m])* pub fn $name($($args)*) $(-> $ret)? $body
            #[cfg(not(feature = "testing"))]
            #[allow(dead_code)]
            $(#[$m])* pub(crate) fn $name($($args)*) $(-> $ret)? $body
        )*
    };
}

#[cfg(feature = "testing")]
pub mod space;
#[cfg(not(feature = "testing"))]
mod space;
#[cfg(feature = "testing")]
pub mod vma;
#[cfg(not(feature = "testing"))]
mod vma;

pub use space::{
    Fault, FaultMode, ForkMode, HugetlbConfig, HugetlbPool, Mm, MmConfig, MmFaultStats, MmShared, Overcommit,
    ProcFile, ProcFileKind, ProcReader, ReaderMode, RecordHook, ThpMode,
};
/// `PROCMAP_QUERY`'s request and answer ([`ProcReader::query`]), and its flags, from `vmspace_proc::query`.
pub use vmspace_proc::query::{
    PROCMAP_QUERY_COVERING_OR_NEXT_VMA, PROCMAP_QUERY_FILE_BACKED_VMA, PROCMAP_QUERY_VMA_EXECUTABLE,
    PROCMAP_QUERY_VMA_READABLE, PROCMAP_QUERY_VMA_SHARED, PROCMAP_QUERY_VMA_WRITABLE, QueryAnswer,
    QueryRequest,
};
/// Importing a process's address space: the description types of [`Mm::import`] (`space::import`).
pub mod import {
    pub use crate::space::import::{
        ImportedBacking, ImportedFile, ImportedFileKind, ImportedLayout, ImportedPkeys, ImportedVma,
    };
}
pub use vma::{
    AnonVma, FileKind, FilePages, FileSize, HugeObject, HugePool, HugeRef, MmLocking, MmapReadGuard,
    SnapshotFail, VmFile, Vma, VmaFind, VmaLockCounts, VmaLockStats, VmaLookup, VmaReadGuard, VmaSnapshot,
    lock_next_vma, lock_vma_under_rcu, next_vma_lockless, vma_snapshot_lockless, walk_vmas_locked,
    walk_vmas_lockless,
};
pub use vmspace_abi::{
    Advice, BusCode, Errno, FileArea, MapFlags, MclFlags, MlockFlags, MremapFlags, MsyncFlags, PAGE_SIZE,
    PkeyRights, Prot, SegvCode, Signal, TASK_SIZE, VmFlags,
};
pub use vmspace_pgtable::{Access, FaultKind, FaultStats, Memory, MemoryConfig, PageTable, Rss};

// The address space is shared by threads.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Mm>();
    shared::<MmShared>();
};
