//! The VMA object and every lock that protects it (`include/linux/mmap_lock.h`, `mm/mmap_lock.c`; the per-VMA lock series).
//!
//! # Pieces
//!
//! - [`VmFlags`] (defined in `vmspace_abi`, re-exported): the `vm_flags` word with Linux 6.18 x86-64 bit values
//!   and smaps mnemonics.
//! - [`Vma`] ([`object`]): start, end, flags, pgoff, `vm_mm`, the lock words, and the reference-counted
//!   attributes ([`VmFile`], [`AnonVma`], the anon name, in RCU-safe cells: [`attrs`]). Every field a reader may
//!   load without a lock is atomic; each field documents who writes it under which lock. The writer-only
//!   anon_vma chain ([`AnonState`], [`anon`]) lives in the VMA too: the VMA object is the only record of a
//!   mapping, as `vm_area_struct` is in Linux.
//! - [`MmLocking`] ([`mmap_lock`]): the lock side of an mm, embedded by the address space's `Mm`: identity,
//!   [`MmapLock`] (writer-preferring rwsem with contention reporting), `mm_lock_seq`, speculation, stats.
//! - The per-VMA lock ([`lock`]): `vm_refcnt` with the writer-exclusion flag and `vm_lock_seq`;
//!   [`vma_start_read`], [`vma_end_read`], [`vma_start_write`], [`vma_mark_attached`], [`vma_mark_detached`],
//!   [`vma_start_read_locked`]; all VMA write locks end together at `mmap_write_unlock`.
//! - [`VmaPool`] ([`pool`]): type-stable VMAs reused without a grace period.
//! - [`lock_vma_under_rcu`] ([`lookup`]): the fault path's RCU walk plus per-VMA read lock; [`lock_next_vma`]:
//!   the maps reader's next-VMA step with false-gap validation and mmap_lock fall-back. Both walk any tree that
//!   implements [`VmaLookup`] (point lookup) / [`VmaFind`] (next VMA from an address); `MapleTree<&'static
//!   Vma>` implements both.
//! - The lockless reader ([`lockless`]): [`vma_snapshot_lockless`] copies a VMA's fields under RCU and
//!   validates them by the VMA's write count (`vm_seq`) and `vm_lock_seq`/`mm_lock_seq`, holding nothing a
//!   writer waits for; [`next_vma_lockless`] is the `/proc` walk's step on top of it.
//!
//! # The writer's protocol (what the address-space code must do)
//!
//! ```text
//! let w = mm.write_lock();                    // mmap_write_lock: mm_lock_seq odd
//! vma_start_write(&mm, vma);                  // for every attached VMA that will change or go
//! new = pool.alloc(&mm)?;                     // allocate everything before the point of no return
//! new.set_range(..); vma_start_write(&mm, new); vma_mark_attached(&mm, new);
//! tree.store(range, new);                     // publish the new VMA / unpublish the old one ...
//! vma_mark_detached(&mm, old);                // ... then detach the old one (waits for stragglers)
//! pool.free(old);                             // reusable at once
//! drop(w);                                    // mmap_write_unlock: every VMA write lock ends
//! ```
//!
//! The tree must be updated before a VMA is detached (so that a reader that finds it detached and walks again
//! does not find it again).

// Without the `testing` feature this module is private: the re-exports and helpers that only tests use from
// outside are then unused.
#![cfg_attr(not(feature = "testing"), allow(unused_imports, dead_code))]

pub mod anon;
pub mod attrs;

pub mod lock;
pub mod lockless;
pub mod lookup;
pub mod mmap_lock;
pub mod object;
mod park;
pub mod pool;
pub mod stats;

pub use anon::{AnonRef, AnonState, AnonVma, ChainLink};
pub use attrs::{
    FileKind, FilePages, FileSize, HugeObject, HugePool, HugeRef, MAX_LFS_FILESIZE, RcuArc, VmFile,
};
pub use lock::{
    VMA_LOCK_OFFSET, VMA_REF_LIMIT, VmaLockFail, VmaReadGuard, vma_assert_write_locked, vma_end_read,
    vma_is_write_locked, vma_mark_attached, vma_mark_detached, vma_start_read, vma_start_read_locked,
    vma_start_write, vma_start_write_bulk, vma_start_write_unpublished,
};
pub use lockless::{
    LocklessEpoch, SnapshotFail, next_vma_lockless, vma_snapshot_lockless, walk_vmas_lockless,
};
pub use lookup::{
    LockEvents, VmaFind, VmaLookup, lock_next_vma, lock_vma_under_rcu, lock_vma_under_rcu_events,
    walk_vmas_locked,
};
pub use mmap_lock::{MmLocking, MmapLock, MmapReadGuard, MmapWriteGuard};
pub use object::{VM_LOCK_SEQ_NONE, Vma, VmaSnapshot, vm_lock_seq_of};
pub use pool::{PoolStats, VmaBatch, VmaPool};
pub use stats::{VmaLockCounts, VmaLockStats};
pub use vmspace_abi::{Errno, PAGE_SHIFT, PAGE_SIZE, VmFlags};
