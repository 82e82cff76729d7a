//! `Vma`: the virtual memory area object (`struct vm_area_struct`), laid out for concurrent readers.
//!
//! # Who touches a VMA, and how
//!
//! - **Writers** hold the mm's mmap write lock and, for a VMA that is attached (in the tree), its VMA write lock
//!   ([`super::lock::vma_start_write`]); only then do they change its range, flags, pgoff or attributes. A VMA
//!   that is detached (fresh from the pool, or taken out of the tree) belongs to the thread that prepared it and
//!   may be changed without the VMA write lock, as long as it is not (re)inserted into a tree concurrently.
//! - **Locked readers** hold the VMA read lock ([`super::lock::vma_start_read`]) or the mmap read lock; no writer
//!   changes the VMA meanwhile, so every field they load is stable.
//! - **Stale readers** found the VMA in an RCU walk and may read it at any moment, even after it was freed to the
//!   pool and reused for another mm ([`super::pool`]). Every field a reader may read without a lock is therefore
//!   an atomic (or an [`RcuArc`]), never a plain field, so such reads are always defined; the lock protocol makes
//!   the reader detect that what it read is stale (`vm_refcnt` 0, `vm_mm` of another mm, `vm_lock_seq` of the
//!   current write epoch, or a range that no longer covers the address).
//!
//! Orderings: the range, flags, pgoff and `vm_mm` are stored and loaded `Relaxed`. Their publication to readers
//! is carried by the lock protocol, not by the fields: a new VMA is published by `vma_mark_attached`'s release
//! store of `vm_refcnt` (paired with `vma_start_read`'s acquire increment) and by the tree's release publication;
//! a change under the VMA write lock is published by `mmap_write_unlock`'s release of `mm_lock_seq` (paired with
//! `vma_start_read`'s acquire re-read) or by the release that ends a VMA writer's exclusion of readers.
//!
//! # Layout
//!
//! Two 64-byte lines (the kernel's `vm_area_struct` takes three):
//!
//! - line 0 holds what every walker, fault and `/proc` reader reads: the range, `vm_mm`, flags, pgoff,
//!   `vm_lock_seq`, the lockless readers' write count `vm_seq`, the file and the anon_vma;
//! - line 1 starts with `vm_refcnt`, the word that per-VMA readers increment, followed by what no walker or
//!   fault reads: the pool state, the anon name (read by `/proc` readers only), the file-mapping registration
//!   and the writer-only anon_vma chain. This is the kernel's split since 6.15, where `vm_refcnt` is
//!   `____cacheline_aligned_in_smp` and shares its line with the writer-only `shared` interval-tree node, the
//!   anon name and the userfaultfd context: readers' increments do not bounce the line the walkers read, and
//!   the rest of the object does not need a line of its own.
//!
//! `vm_lock_seq` is 32 bits, as the kernel's `unsigned int`: it holds the low 32 bits of the mm's
//! `mm_lock_seq` ([`vm_lock_seq_of`]). Line 0 is exactly 64 bytes, so with `repr(C)` `vm_refcnt` starts line
//! 1 without a padding field; compile-time assertions below check both offsets and the size. The pool's free
//! list keeps its links outside the VMA ([`super::pool`]), so a free VMA's `vm_refcnt`, `vm_mm` and
//! `vm_lock_seq` are never overwritten by allocator metadata.
//!
//! # The writer-only part
//!
//! The anon_vma chain ([`AnonState`]) is the writer's business alone (merge decisions, fork): readers see only
//! the `anon_vma` pointer, published in its RCU cell whenever the chain's owner changes. It sits behind a mutex
//! that is never contended (its users hold the mmap write lock, or own the detached VMA), which keeps the
//! access safe without an unsafe cell; Linux guards the same state with the mmap lock and the anon_vma lock.

use std::fmt;
use std::sync::Arc;

use vmspace_rcu::sync::{AtomicU32, AtomicU64, Ordering, fence};

use super::VmFlags;
use super::anon::{AnonState, AnonVma};
use super::attrs::{RcuArc, VmFile};
use super::lock::vma_is_write_locked;
use super::mmap_lock::MmLocking;

/// `vm_lock_seq` of a VMA that has never been write-locked in its current life (the kernel's `UINT_MAX`). Odd:
/// an `mm_lock_seq` whose low 32 bits equal it is a write epoch, and a VMA that was never locked in its current
/// life would look locked in it, as in the kernel (a per-VMA reader then falls back to the mmap lock; a writer
/// that skipped the lock would need the epoch to come round after 2^31 write sections).
pub const VM_LOCK_SEQ_NONE: u32 = u32::MAX;

/// The `vm_lock_seq` value of the write epoch `mm_seq` (an `mm_lock_seq` value): its low 32 bits, as the
/// kernel compares `vma->vm_lock_seq` with `mm->mm_lock_seq.sequence`, both `unsigned int`. Wrapping can only
/// make an old lock look current (the comparison's false "locked"), after 2^31 write sections without a lock
/// of that VMA.
#[inline(always)]
pub const fn vm_lock_seq_of(mm_seq: u64) -> u32 {
    mm_seq as u32
}

/// A virtual memory area: `[start, end)` of one mm with uniform flags and backing.
///
/// VMAs live in a type-stable pool (`VmaPool`) and are handled as `&'static Vma`. See the module
/// docs for the concurrency rules; each field's contract is on the field.
#[repr(C, align(64))]
pub struct Vma {
    // Line 0: what walkers, faults and readers read.
    /// First address (page aligned). Written by the owner of a detached VMA or under the VMA write lock;
    /// read by anyone (stable under the VMA read lock or the mmap lock).
    vm_start: AtomicU64,
    /// One past the last address (page aligned, exclusive). Same contract as `vm_start`.
    vm_end: AtomicU64,
    /// Identity of the owning mm ([`MmLocking::id`]), 0 while free in the pool. Written by the pool at
    /// allocation (before the VMA is attached) and at free (after it is detached); read by `vma_start_read`
    /// after its acquire increment of `vm_refcnt` to detect a VMA recycled into another mm.
    vm_mm: AtomicU64,
    /// `VmFlags` bits. Same contract as `vm_start`.
    vm_flags: AtomicU64,
    /// Offset of `vm_start` in the file, in pages (for anonymous VMAs: `vm_start >> PAGE_SHIFT` as Linux sets
    /// it). Same contract as `vm_start`.
    vm_pgoff: AtomicU64,
    /// [`vm_lock_seq_of`] the `mm_lock_seq` of the write epoch in which this VMA was write-locked
    /// ([`VM_LOCK_SEQ_NONE`] if never in its current life). Written only by the mmap write-lock holder:
    /// by `vma_start_write` while readers are excluded or the VMA is detached, by `vma_start_write_bulk`
    /// before it reads `vm_refcnt` (then waiting for any reader it counts: `vma::lock`, "Bulk write lock");
    /// read by `vma_start_read` (sequentially consistent, after its sequentially consistent increment).
    vm_lock_seq: AtomicU32,
    /// The write count of the lockless readers ([`super::lockless`]), never reset (the VMA object is
    /// type-stable). Even but inside the pool's two sections, which make it odd while they change the fields
    /// (`clear_fields` when the VMA is freed, `set_mm_id` when it is handed out or freed:
    /// [`Vma::write_seq_begin`] / [`Vma::write_seq_end`]); `vma_start_write` adds 2 before a write-locked
    /// VMA's fields change ([`Vma::write_seq_bump`]: that section's end is `mm_lock_seq`'s). 32 bits: a
    /// reader's copy takes nanoseconds, and only exactly 2^31 sections inside one copy could hide a change.
    vm_seq: AtomicU32,
    /// The model file of a file-backed VMA. Written under the VMA write lock (or by the owner of a detached
    /// VMA); read by anyone through [`RcuArc::load`].
    file: RcuArc<VmFile>,
    /// The anon_vma identity, once the VMA has private anonymous pages (or inherited one). Same contract as
    /// `file`.
    anon_vma: RcuArc<AnonVma>,
    // Line 1: `vm_refcnt` first, then what no walker or fault reads.
    /// The per-VMA lock: reader count plus the writer-exclusion flag, 0 = detached ([`super::lock`]). Changed
    /// by readers (acquire increment / release decrement) and by the mmap write-lock holder. Starts line 1.
    pub(crate) vm_refcnt: AtomicU32,
    /// 1 while the VMA sits free in the pool, 0 while allocated. Written by the pool only; read by assertions.
    pub(crate) in_pool: AtomicU32,
    /// The anonymous VMA name (`PR_SET_VMA_ANON_NAME`). Same contract as `file`.
    anon_name: RcuArc<Arc<str>>,
    /// The registration of a file VMA in its file's mapping registry (`vma_interval_tree_insert`: a
    /// `vmspace_pgtable::MappingId`), 0 for none. Written by the mmap write-lock holder when the VMA is
    /// registered and unregistered (`space::tree`); read by the same. Relaxed: a writer-only field, atomic only
    /// because the VMA is shared with readers.
    pub(crate) i_mmap: AtomicU64,
    /// The anon_vma and chain (writer-only, see the module docs). `anon_vma` above always mirrors
    /// `anon.anon_vma()`: [`Vma::set_anon`] writes both.
    anon: vmspace_rcu::sync::Mutex<AnonState>,
}

// The layout of the module docs: line 0 is exactly full, `vm_refcnt` starts line 1, two lines in all. Loom's
// atomics and mutex are larger; the layout is a property of the real build only.
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::offset_of!(Vma, vm_refcnt) == 64);
    assert!(std::mem::offset_of!(Vma, anon_vma) == 56);
    assert!(std::mem::size_of::<Vma>() == 128);
    assert!(std::mem::align_of::<Vma>() == 64);
};

/// A consistent copy of a VMA's fields, taken under the VMA read lock or the mmap lock.
#[derive(Clone, PartialEq, Eq)]
pub struct VmaSnapshot {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Flags.
    pub flags: VmFlags,
    /// File offset in pages.
    pub pgoff: u64,
    /// Owning mm identity.
    pub mm_id: u64,
    /// Model file.
    pub file: Option<Arc<VmFile>>,
    /// The identity of the VMA's anon_vma ([`AnonVma::id`]), if it has one. An identity, not a reference: a
    /// copy taken by a `/proc` reader must not touch the anon_vma's reference count, a line every reader and
    /// faulting thread would otherwise share.
    pub anon_vma_id: Option<u64>,
    /// Anonymous name.
    pub anon_name: Option<Arc<str>>,
}

impl fmt::Debug for VmaSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VmaSnapshot")
            .field("range", &format_args!("{:#x}-{:#x}", self.start, self.end))
            .field("flags", &self.flags)
            .field("pgoff", &self.pgoff)
            .field("mm_id", &self.mm_id)
            .field("file", &self.file.as_ref().map(|f| &f.name))
            .field("anon_vma", &self.anon_vma_id)
            .field("anon_name", &self.anon_name)
            .finish()
    }
}

impl Vma {
    /// A fresh, detached VMA belonging to no mm (used by the pool when it grows).
    pub(crate) fn new_detached() -> Self {
        Self {
            vm_start: AtomicU64::new(0),
            vm_end: AtomicU64::new(0),
            vm_mm: AtomicU64::new(0),
            vm_flags: AtomicU64::new(0),
            vm_pgoff: AtomicU64::new(0),
            vm_lock_seq: AtomicU32::new(VM_LOCK_SEQ_NONE),
            vm_seq: AtomicU32::new(0),
            file: RcuArc::empty(),
            anon_vma: RcuArc::empty(),
            vm_refcnt: AtomicU32::new(0),
            in_pool: AtomicU32::new(0),
            anon_name: RcuArc::empty(),
            i_mmap: AtomicU64::new(0),
            anon: vmspace_rcu::sync::Mutex::new(AnonState::EMPTY),
        }
    }

    /// First address.
    #[inline]
    pub fn start(&self) -> u64 {
        // Relaxed: see the module docs (publication is carried by the lock protocol).
        self.vm_start.load(Ordering::Relaxed)
    }

    /// One past the last address.
    #[inline]
    pub fn end(&self) -> u64 {
        // Relaxed: see the module docs.
        self.vm_end.load(Ordering::Relaxed)
    }

    /// `end - start` (0 for a VMA whose range is being set up).
    #[inline]
    pub fn len(&self) -> u64 {
        self.end().saturating_sub(self.start())
    }

    /// True if the range is empty (a VMA not yet set up).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if `addr` lies in `[start, end)`.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        self.start() <= addr && addr < self.end()
    }

    /// Flags.
    #[inline]
    pub fn flags(&self) -> VmFlags {
        // Relaxed: see the module docs.
        VmFlags::from_bits(self.vm_flags.load(Ordering::Relaxed))
    }

    /// File offset of `start`, in pages.
    #[inline]
    pub fn pgoff(&self) -> u64 {
        // Relaxed: see the module docs.
        self.vm_pgoff.load(Ordering::Relaxed)
    }

    /// Identity of the owning mm (`vm_mm`), 0 while free.
    #[inline]
    pub fn mm_id(&self) -> u64 {
        // Relaxed: see the module docs; `vma_start_read` orders its load after the acquire increment.
        self.vm_mm.load(Ordering::Relaxed)
    }

    /// The model file, if file-backed.
    #[inline]
    pub fn file(&self) -> Option<Arc<VmFile>> {
        self.file.load()
    }

    /// True if file-backed (without cloning the file).
    #[inline]
    pub fn is_file_backed(&self) -> bool {
        self.file.is_some()
    }

    /// The anon_vma, if any.
    #[inline]
    pub fn anon_vma(&self) -> Option<Arc<AnonVma>> {
        self.anon_vma.load()
    }

    /// True if the VMA has an anon_vma (without cloning it). Under the VMA read lock a concurrent
    /// `anon_vma_prepare` may set it at any time (never clear it): a `false` may be stale.
    #[inline]
    pub fn has_anon_vma(&self) -> bool {
        self.anon_vma.is_some()
    }

    /// True if this VMA's anon_vma is exactly `other` (pointer identity, both `None` included).
    #[inline]
    pub fn anon_vma_is(&self, other: Option<&Arc<AnonVma>>) -> bool {
        self.anon_vma.is(other)
    }

    /// True if this VMA's file is exactly `other` (pointer identity, both `None` included).
    #[inline]
    pub fn file_is(&self, other: Option<&Arc<VmFile>>) -> bool {
        self.file.is(other)
    }

    /// The anonymous name, if any.
    #[inline]
    pub fn anon_name(&self) -> Option<Arc<str>> {
        self.anon_name.load().map(|a| Arc::clone(&*a))
    }

    /// The raw `vm_refcnt` (diagnostics and tests).
    #[inline]
    pub fn refcnt(&self) -> u32 {
        // Relaxed: a snapshot.
        self.vm_refcnt.load(Ordering::Relaxed)
    }

    /// The raw `vm_lock_seq` (diagnostics and tests).
    #[inline]
    pub fn lock_seq(&self) -> u32 {
        // Relaxed: a snapshot.
        self.vm_lock_seq.load(Ordering::Relaxed)
    }

    /// True if detached (`vm_refcnt` 0): not in any tree.
    #[inline]
    pub fn is_detached(&self) -> bool {
        self.refcnt() == 0
    }

    /// Copies every field. Consistent only under the VMA read lock, the VMA write lock or the mmap lock (or
    /// when validated by a sequence count).
    pub fn snapshot(&self) -> VmaSnapshot {
        VmaSnapshot {
            start: self.start(),
            end: self.end(),
            flags: self.flags(),
            pgoff: self.pgoff(),
            mm_id: self.mm_id(),
            file: self.file(),
            anon_vma_id: self.anon_vma.with(|a| a.id()),
            anon_name: self.anon_name(),
        }
    }

    /// True if `mm` may change this VMA now: it belongs to `mm` and is either detached (owned by the thread
    /// preparing it) or write-locked in `mm`'s current write epoch.
    pub fn writable_by(&self, mm: &MmLocking) -> bool {
        self.mm_id() == mm.id() && (self.is_detached() || vma_is_write_locked(mm, self))
    }

    #[inline]
    fn assert_writable(&self, mm: &MmLocking) {
        debug_assert!(
            self.writable_by(mm),
            "VMA {:#x}-{:#x} changed without its write lock (vm_mm {}, mm {}, refcnt {:#x})",
            self.start(),
            self.end(),
            self.mm_id(),
            mm.id(),
            self.refcnt()
        );
    }

    testing_pub! {
    /// Sets the range. Requires [`Vma::writable_by`]`(mm)` (debug-asserted).
    #[inline]
    pub fn set_range(&self, mm: &MmLocking, start: u64, end: u64) {
        self.assert_writable(mm);
        debug_assert!(start <= end);
        // Relaxed: published by the lock protocol (module docs).
        self.vm_start.store(start, Ordering::Relaxed);
        self.vm_end.store(end, Ordering::Relaxed);
    }

    /// Sets `start` only. Requires [`Vma::writable_by`]`(mm)`.
    #[inline]
    pub fn set_start(&self, mm: &MmLocking, start: u64) {
        self.assert_writable(mm);
        // Relaxed: published by the lock protocol (module docs).
        self.vm_start.store(start, Ordering::Relaxed);
    }

    /// Sets `end` only. Requires [`Vma::writable_by`]`(mm)`.
    #[inline]
    pub fn set_end(&self, mm: &MmLocking, end: u64) {
        self.assert_writable(mm);
        // Relaxed: published by the lock protocol (module docs).
        self.vm_end.store(end, Ordering::Relaxed);
    }

    /// Sets the flags. Requires [`Vma::writable_by`]`(mm)`.
    #[inline]
    pub fn set_flags(&self, mm: &MmLocking, flags: VmFlags) {
        self.assert_writable(mm);
        // Relaxed: published by the lock protocol (module docs).
        self.vm_flags.store(flags.bits(), Ordering::Relaxed);
    }

    /// Sets the page offset. Requires [`Vma::writable_by`]`(mm)`.
    #[inline]
    pub fn set_pgoff(&self, mm: &MmLocking, pgoff: u64) {
        self.assert_writable(mm);
        // Relaxed: published by the lock protocol (module docs).
        self.vm_pgoff.store(pgoff, Ordering::Relaxed);
    }

    /// Sets the file. Requires [`Vma::writable_by`]`(mm)`. The old file reference is dropped after a grace
    /// period.
    #[inline]
    pub fn set_file(&self, mm: &MmLocking, file: Option<Arc<VmFile>>) {
        self.assert_writable(mm);
        self.file.store(file);
    }

    /// The writer-only anon_vma state (chain included). For the mmap write-lock holder, or the owner of a
    /// detached VMA: the lock is then never contended.
    pub fn anon(&self) -> vmspace_rcu::sync::MutexGuard<'_, AnonState> {
        self.anon.lock()
    }

    /// Replaces the anon_vma state and publishes its anon_vma to readers; the old state (and the counters it
    /// holds on its anon_vmas) is dropped. Requires [`Vma::writable_by`]`(mm)`.
    pub fn set_anon(&self, mm: &MmLocking, st: AnonState) {
        self.assert_writable(mm);
        if !self.anon_vma.is(st.anon_vma()) {
            self.anon_vma.store(st.anon_vma().cloned());
        }
        let old = std::mem::replace(&mut *self.anon(), st);
        drop(old);
    }

    /// `__anon_vma_prepare`'s store: gives a VMA that has no anon_vma the state `st` (a fresh chain of one) and
    /// publishes its anon_vma. The caller holds its mm's mmap lock, read or write (so the VMA is attached and
    /// stable), and its mm's `page_table_lock` (passed as `_ptl`), which serialises every such store: under the
    /// mmap read lock two faulting threads may prepare one VMA at once, and the second must see the first's
    /// anon_vma (it re-checks under the lock). Readers see the anon_vma appear (an RCU cell); writers that
    /// read the chain hold the mmap write lock, which excludes this path.
    pub fn set_anon_prepared(&self, st: AnonState, _ptl: &vmspace_rcu::sync::MutexGuard<'_, ()>) {
        debug_assert!(!self.has_anon_vma(), "anon_vma prepared twice");
        self.anon_vma.store(st.anon_vma().cloned());
        let old = std::mem::replace(&mut *self.anon(), st);
        drop(old);
    }

    /// `vma_flag_set_atomic`: adds `flag` (one of the flags the kernel sets under the mmap read lock:
    /// `VM_MAYBE_GUARD`) with an atomic update, without the VMA write lock. The caller holds the mmap lock (read
    /// or write) or the VMA read lock. No merge or split depends on such a flag (`VM_IGNORE_MERGE`).
    pub fn set_flag_atomic(&self, flag: VmFlags) {
        debug_assert!(VmFlags::STICKY.contains(flag), "only sticky flags are set without the write lock");
        // Relaxed: as the other fields (module docs); the flag publishes nothing else.
        self.vm_flags.fetch_or(flag.bits(), Ordering::Relaxed);
    }

    /// Sets the anonymous name. Requires [`Vma::writable_by`]`(mm)`.
    #[inline]
    pub fn set_anon_name(&self, mm: &MmLocking, name: Option<Arc<str>>) {
        self.assert_writable(mm);
        self.anon_name.store(name.map(Arc::new));
    }

    /// Copies range, flags, pgoff and attributes from `src` (the kernel's `vm_area_init_from` plus
    /// `anon_vma_clone`, used by split and mremap): the anon_vma chain is cloned. Lock state (`vm_refcnt`,
    /// `vm_lock_seq`) and `vm_mm` are not copied. Requires [`Vma::writable_by`]`(mm)` on `self`, and `src` stable
    /// (the caller holds its mm's lock).
    pub fn copy_fields_from(&self, mm: &MmLocking, src: &Vma) {
        self.set_range(mm, src.start(), src.end());
        self.set_flags(mm, src.flags());
        self.set_pgoff(mm, src.pgoff());
        self.set_file(mm, src.file());
        let anon = src.anon().clone();
        self.set_anon(mm, anon);
        self.set_anon_name(mm, src.anon_name());
    }
    }

    /// `vm_area_dup` for `dup_mmap`, fused with the pool's hand-out and the child's write lock: makes this free
    /// VMA of a pool batch (`in_pool` 1, `vm_mm` 0, fields cleared, detached) a VMA of the mm `mm_id`,
    /// write-locked in that mm's epoch `lock_seq` (what `vma_start_write_unpublished` stores), holding `parent`'s
    /// range, pgoff, file and anon name, `flags` as given (the parent's minus what fork drops) and the anon_vma
    /// state `anon` if any (the child's stays empty otherwise). One write section of the lockless readers' count
    /// (`vm_seq` odd, then even by a release store) covers every store, so a reader holding a stale pointer sees
    /// the VMA free, or the whole copy (of another mm), never a mix; the per-VMA readers see it only after
    /// `vma_mark_attached`'s release store. The file and name are shared by a strong-count increment each,
    /// without the read section and the swap a [`Vma::set_file`] costs; the anon_vma chain's mutex is taken only
    /// when there is a chain to store. The caller holds the batch (so it owns this VMA), the child's mmap write
    /// lock with no other thread able to reach the child, and `parent` write-locked in its mm's current write
    /// epoch (so none of its fields changes meanwhile).
    #[inline(always)]
    pub(crate) fn init_fork_child(
        &self,
        mm_id: u64,
        lock_seq: u32,
        parent: &Vma,
        flags: VmFlags,
        anon: Option<AnonState>,
    ) {
        debug_assert!(self.is_empty() && !self.file.is_some() && !self.anon_vma.is_some(), "a used VMA");
        debug_assert_eq!(self.refcnt(), 0, "fork copy into an attached VMA");
        self.write_seq_begin();
        // Relaxed, every store of the section: the section's end (a release store) publishes them to the
        // lockless readers, `vma_mark_attached`'s release store to the per-VMA readers (module docs).
        debug_assert_eq!(self.in_pool.load(Ordering::Relaxed), 1, "a fork copy into a VMA not free");
        self.in_pool.store(0, Ordering::Relaxed);
        self.vm_mm.store(mm_id, Ordering::Relaxed);
        self.vm_lock_seq.store(lock_seq, Ordering::Relaxed);
        self.vm_start.store(parent.start(), Ordering::Relaxed);
        self.vm_end.store(parent.end(), Ordering::Relaxed);
        self.vm_flags.store(flags.bits(), Ordering::Relaxed);
        self.vm_pgoff.store(parent.pgoff(), Ordering::Relaxed);
        // SAFETY: `parent` is write-locked by the caller, who holds its mm's mmap write lock, so no store to its
        // cells runs; `self` is detached and owned by the caller, and its cells are empty (asserted above for
        // the file; the pool clears every cell when it frees a VMA).
        unsafe {
            self.file.init_clone_from(&parent.file);
            self.anon_name.init_clone_from(&parent.anon_name);
        }
        if let Some(st) = anon {
            // The cell was empty (asserted above) and the chain's state is the pool's cleared one.
            self.anon_vma.store(st.anon_vma().cloned());
            let old = std::mem::replace(&mut *self.anon(), st);
            drop(old);
        }
        self.write_seq_end();
    }

    /// Resets range, flags, pgoff and attributes (the pool does this when a VMA is freed).
    pub(crate) fn clear_fields(&self) {
        // A lockless reader holding a stale pointer must see the change (module docs of `lockless`).
        self.write_seq_begin();
        // Relaxed: the VMA is detached (refcount 0), so no reader can take a lock on it and trust these.
        self.vm_start.store(0, Ordering::Relaxed);
        self.vm_end.store(0, Ordering::Relaxed);
        self.vm_flags.store(0, Ordering::Relaxed);
        self.vm_pgoff.store(0, Ordering::Relaxed);
        self.file.store(None);
        self.anon_vma.store(None);
        self.anon_name.store(None);
        debug_assert_eq!(
            self.i_mmap.load(Ordering::Relaxed),
            0,
            "a VMA freed while registered with its file"
        );
        let old = std::mem::take(&mut *self.anon());
        drop(old);
        self.write_seq_end();
    }

    /// The file-registry id ([`Vma::i_mmap`](Self) field docs), 0 for none.
    #[inline]
    pub(crate) fn i_mmap_id(&self) -> u64 {
        // Relaxed: a writer-only field (see the field).
        self.i_mmap.load(Ordering::Relaxed)
    }

    /// Sets the file-registry id (the mmap write-lock holder, or the owner of a detached VMA).
    #[inline]
    pub(crate) fn set_i_mmap_id(&self, id: u64) {
        // Relaxed: a writer-only field (see the field).
        self.i_mmap.store(id, Ordering::Relaxed);
    }

    /// Sets `vm_mm` (pool only: at allocation, before attach; at free, after detach).
    #[inline]
    pub(crate) fn set_mm_id(&self, id: u64) {
        // A new life (or the end of one): lockless readers with a stale pointer see the section.
        self.write_seq_begin();
        // Relaxed: published to readers by `vma_mark_attached`'s release store of `vm_refcnt`, which readers
        // acquire before they load `vm_mm` (and to lockless readers by `write_seq_end`).
        self.vm_mm.store(id, Ordering::Relaxed);
        self.write_seq_end();
    }

    /// The lockless readers' write count (`vm_seq`: see the field, and the `vma::lockless` module).
    #[inline]
    pub fn write_seq(&self) -> u32 {
        // Relaxed: a snapshot (diagnostics; the lockless reader loads it with its own orderings).
        self.vm_seq.load(Ordering::Relaxed)
    }

    /// The `vm_seq` cell for the lockless reader ([`super::lockless`]).
    #[inline]
    pub(crate) fn write_seq_cell(&self) -> &AtomicU32 {
        &self.vm_seq
    }

    /// Announces a change of a write-locked VMA's fields to lockless readers: `vma_start_write` calls it after
    /// it stored `vm_lock_seq` (the section ends when `mm_lock_seq` moves on), before the first field store.
    ///
    /// `vm_seq` has one writer at a time (the mmap write-lock holder of the VMA's mm, or the pool's owner of a
    /// detached VMA, which the pool's mutex orders), so its changes are a load and a store, not an RMW.
    #[inline]
    pub(crate) fn write_seq_bump(&self) {
        // Relaxed: our own last value (single writer, see above).
        let c = self.vm_seq.load(Ordering::Relaxed);
        // Release: every store made before it (the previous sections of this VMA, the `vm_lock_seq` store of
        // this one) is visible to a lockless reader whose acquire load of `vm_seq` reads this value
        // (`lockless::vma_snapshot_lockless`). +2: the count stays even (odd marks the pool's sections).
        self.vm_seq.store(c.wrapping_add(2), Ordering::Release);
        // Release fence: orders the bump before every field store that follows; pairs with the acquire fence
        // a lockless reader runs between its field loads and its re-read of `vm_seq`: a reader that loaded
        // any value stored after this fence re-reads this bump (or a later value) and retries.
        fence(Ordering::Release);
    }

    /// Opens a section in which the pool changes the fields of a detached VMA (the count becomes odd: lockless
    /// readers holding a stale pointer retry or refuse it).
    #[inline]
    fn write_seq_begin(&self) {
        // Relaxed: our own last value (single writer, see `write_seq_bump`).
        let c = self.vm_seq.load(Ordering::Relaxed);
        debug_assert!(c & 1 == 0, "nested VMA write sections");
        // Relaxed store, then a release fence: as in `write_seq_bump` (pairs with the reader's acquire fence).
        self.vm_seq.store(c.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Closes the section of [`Vma::write_seq_begin`] (even again).
    #[inline]
    fn write_seq_end(&self) {
        // Relaxed: our own last value (single writer).
        let c = self.vm_seq.load(Ordering::Relaxed);
        // Release: the section's stores are visible to a lockless reader whose acquire load reads this value.
        self.vm_seq.store(c.wrapping_add(1), Ordering::Release);
    }

    /// `vm_lock_seq` access for the lock module.
    #[inline]
    pub(crate) fn lock_seq_cell(&self) -> &AtomicU32 {
        &self.vm_lock_seq
    }
}

impl fmt::Debug for Vma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vma")
            .field("range", &format_args!("{:#x}-{:#x}", self.start(), self.end()))
            .field("flags", &self.flags())
            .field("pgoff", &self.pgoff())
            .field("mm_id", &self.mm_id())
            .field("refcnt", &format_args!("{:#x}", self.refcnt()))
            .field("lock_seq", &self.lock_seq())
            .finish()
    }
}
