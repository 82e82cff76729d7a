//! The address space: `Mm` (mmap_lock, `mm_lock_seq`, the VMA maple tree), `Vma` with its per-VMA lock, the
//! Linux 6.18 syscall surface with its merge/split rules, and the readers.
//!
//! ```
//! use vmspace_mm::{Errno, MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, VmFlags};
//!
//! let mut mm = Mm::new(MmConfig::default());
//! // mmap: an anonymous private read-write mapping of four pages, placed top-down below mmap_base.
//! let a = mm.mmap(0, 4 * PAGE_SIZE, Prot::RW, MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0)?;
//! // mprotect the second page read-only: the VMA splits in three.
//! mm.mprotect(a + PAGE_SIZE, PAGE_SIZE, Prot::READ)?;
//! assert_eq!(mm.map_count(), 3);
//! let middle = mm.vma_at(a + PAGE_SIZE).expect("mapped");
//! assert_eq!((middle.start, middle.end), (a + PAGE_SIZE, a + 2 * PAGE_SIZE));
//! assert!(!middle.flags.contains(VmFlags::WRITE));
//! // Writing there faults (EFAULT stands for the SIGSEGV); writing the first page is fine.
//! assert_eq!(mm.fault(a + PAGE_SIZE, true), Err(Errno::EFAULT));
//! mm.fault(a, true)?;
//! // Restoring the protection merges the three VMAs back into one; /proc/PID/maps shows it.
//! mm.mprotect(a + PAGE_SIZE, PAGE_SIZE, Prot::RW)?;
//! assert_eq!(mm.vmas().count(), 1);
//! assert!(mm.maps_text().starts_with(&format!("{a:012x}-{:012x} rw-p", a + 4 * PAGE_SIZE)));
//! mm.validate().expect("invariants hold");
//! # Ok::<(), Errno>(())
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
//! [`Vma`] (whose getters are the reader's view; its setters are crate-private).
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
//!   calls), merge/split, get_unmapped_area, the mlock accounting, the guard markers and the hugetlb pools.
//!
//! Depends on `abi`, `host` (for [`MmConfig::host`]), `rcu`, `maple` and `proc`; never on op scripts (the
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

pub use space::{GuardMarkers, HugetlbConfig, HugetlbPool, Mm, MmConfig, MmShared, Overcommit, ThpMode};
pub use vma::{
    AnonVma, FileKind, FileSize, HugeObject, HugePool, HugeRef, MmLocking, MmapReadGuard, VmFile, Vma,
    VmaFind, VmaLockCounts, VmaLockStats, VmaLookup, VmaReadGuard, VmaSnapshot, lock_next_vma,
    lock_vma_under_rcu,
};
pub use vmspace_abi::{
    Advice, Errno, MapFlags, MclFlags, MlockFlags, MremapFlags, MsyncFlags, PAGE_SIZE, PkeyRights, Prot,
    TASK_SIZE, VmFlags,
};
