//! The address space: `Mm` (mmap_lock, `mm_lock_seq`, the VMA maple tree), `Vma` with its per-VMA lock, the
//! Linux 6.18 syscall surface with its merge/split rules, and the readers.
//!
//! Two modules split the crate along the kernel's own seam:
//! - [`vma`]: the VMA object and every lock that protects it: `VmFlags`, the per-VMA lock (a reference count
//!   carrying the writer-exclusion flag, seed 003), the mmap_lock reader/writer semaphore with `mm_lock_seq`,
//!   the type-stable VMA pool, the anon_vma and its chain, the model files, and `lock_vma_under_rcu`.
//! - [`space`]: the address space built from them: `Mm` over one VMA maple tree, the calls (mmap, munmap,
//!   mprotect, mremap, madvise, brk, fork, anon names), merge/split, get_unmapped_area.
//!
//! Depends on `abi`, `rcu`, `maple` and `proc`; never on op scripts (the engine's script target lives in
//! `vmspace-replay`), the live kernel (`linux`) or benchmarks.

pub mod space;
pub mod vma;
