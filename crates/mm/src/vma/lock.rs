//! The per-VMA lock (Linux 6.15 – 6.18, the per-VMA lock series).
//!
//! # State
//!
//! The lock is two words: `vm_refcnt` in the VMA, and `vm_lock_seq` in the VMA compared against the mm's
//! `mm_lock_seq`.
//!
//! ```text
//! vm_refcnt            meaning
//! 0                    detached (not in a tree); readers can never raise it from 0
//! 1                    attached, no reader (unlocked, or write-locked: that is recorded in vm_lock_seq)
//! 2 ..= LIMIT          attached with n-1 readers (some may be transient, about to back off)
//! FLAG                 detached while a writer excludes readers (only goes down)
//! FLAG+1               attached, a writer has excluded every reader (or detaching with one straggler)
//! > FLAG+1             a writer waits for readers to leave
//! ```
//!
//! with `FLAG` = [`VMA_LOCK_OFFSET`] = 1 << 30 and `LIMIT` = [`VMA_REF_LIMIT`] = `FLAG - 1`. A VMA is
//! write-locked iff `vm_lock_seq == mm_lock_seq` (meaningful while the mmap write lock is held: the sequence is
//! odd then, and `mmap_write_unlock` makes it even, releasing every VMA write lock at once).
//!
//! # Operations
//!
//! - [`vma_start_read`]: never blocks. Fails if the VMA is write-locked (cheap check, then re-check), detached
//!   ([`VmaLockFail::Detached`], the kernel's `-EAGAIN`, on which the caller re-walks), over the reader limit or
//!   being excluded by a writer (the increment is limited to `LIMIT`, so a set FLAG refuses it), or recycled into
//!   another mm (`vm_mm` differs). The increment is sequentially consistent (an acquire, and ordered before
//!   the SeqCst re-read of `vm_lock_seq` for the bulk write lock below); `vm_mm` and `vm_lock_seq` are read
//!   after it, and `mm_lock_seq` with acquire (pairs with the release in `vma_end_write_all`).
//! - [`vma_end_read`] (`unsafe`: the caller must own the lock it puts; safe code drops a [`VmaReadGuard`]
//!   instead): release decrement; if what is left is the writer alone
//!   (FLAG set and at most FLAG+1), wakes the waiting writer.
//! - [`vma_start_write`] (mmap write lock held): returns at once if already write-locked in this epoch; if the
//!   VMA is detached just records the epoch; otherwise adds FLAG (shutting out new readers), waits for the
//!   count to fall to FLAG+1, stores `vm_lock_seq`, and subtracts FLAG with release ordering.
//! - [`vma_mark_attached`]: detached and write-locked → release store of 1.
//! - [`vma_mark_detached`]: attached and write-locked → decrement; if transient readers remain, add FLAG, wait
//!   for the count to reach FLAG, subtract FLAG (0).
//! - [`vma_start_read_locked`]: under the mmap read lock no writer can interfere, so only the reader limit can
//!   make it fail.
//! - [`vma_start_write_bulk`] (mmap write lock held): [`vma_start_write`] of a batch of VMAs with no
//!   read-modify-write for a VMA that has no reader (below, "Bulk write lock"); fork's parent (`dup_mmap`).
//! - [`vma_start_write_unpublished`]: a detached VMA of an mm that no other thread can reach yet (fork's child)
//!   is write-locked without the sequentially consistent fence, which pairs only with faults in that mm. Fork
//!   itself stores the same epoch (`unpublished_lock_seq`) in the write section that fills each child VMA
//!   (`VmaBatch::next_fork_copy`).
//!
//! After any successful read lock taken outside the mmap lock the caller must still check the VMA's range: the
//! VMA may have been recycled *within the same mm* at another address (`lock_vma_under_rcu` does this).
//!
//! # Bulk write lock
//!
//! [`vma_start_write`] shuts readers out with two read-modify-writes of `vm_refcnt` (add FLAG, subtract FLAG)
//! around its store of `vm_lock_seq`, and ends with a sequentially consistent fence: three full barriers per
//! VMA, each of which waits for the writer's store buffer to drain. `dup_mmap` write-locks every VMA of the
//! parent, so on a many-VMA fork these dominate. [`vma_start_write_bulk`] locks a batch instead:
//!
//! ```text
//! writer (mmap write lock held)                     reader (vma_start_read)
//! for each VMA: vm_lock_seq = epoch  (release) W1   vm_refcnt += 1             (SeqCst RMW)     W2
//!               vm_seq += 2          (release)      vm_lock_seq == epoch?      (SeqCst load)    R2
//! fence(SeqCst)                                FX       yes: back off (put the reference)
//! for each VMA: vm_refcnt            (acquire) R1
//!     1: no reader, locked (nothing written)
//!     more: readers present: add FLAG, wait for FLAG+1, subtract FLAG (the slow path of vma_start_write)
//! ```
//!
//! This is the store-buffering pattern: each side stores, then loads the other's word. It is sound because
//! at least one side sees the other's store. Suppose neither did: the reader's `R2` read a `vm_lock_seq` older
//! than `W1`, and the writer's `R1` read a count older than `W2`. In the single total order `S` of sequentially
//! consistent operations and fences (C++20 `[atomics.order]` p4, Rust's model): `R2` is a SeqCst operation
//! coherence-ordered before `W1`, which happens before the SeqCst fence `FX`, so `R2` precedes `FX`; `FX`
//! happens before `R1`, which is coherence-ordered before the SeqCst operation `W2`, so `FX` precedes `W2`; and
//! `W2` is sequenced before `R2`, both SeqCst, so `W2` precedes `R2`. That is a cycle in `S`: impossible. So
//! either the writer counts the reader (and waits for it, as `vma_start_write` would), or the reader sees the
//! lock and backs off, or both. A reader that finished before `R1` read its decrement: `R1`'s acquire reads a
//! value of the release sequence of `vm_refcnt`'s RMWs, so that reader's section happens before the writer's
//! changes (as `wait_for_refcnt`'s acquire). On x86 the reader's half is free: its increment is a locked
//! instruction either way and a SeqCst load is a plain load; the writer pays one fence per batch.
//!
//! The ordering pairs: `W1`/`FX` (writer) with `W2`/`R2` (reader), as above; `W1` (release) with `R2` (at
//! least acquire), so a reader that sees the epoch also reads `mm_lock_seq` at that epoch or later (the
//! `mm_lock_seq` store of `mmap_write_lock` precedes `W1`), as [`vma_start_write`]'s release store gives the
//! lockless readers; the `vm_seq` bump after `W1`, then `FX`, is exactly [`vma_start_write`]'s bump and fence
//! for the lockless readers (`vma::lockless`) and the speculative fault (`space::fault`), whose arguments
//! therefore hold unchanged (one fence after several bumps orders each of them before the page-table work that
//! follows). A VMA found with readers takes the slow path of [`vma_start_write`] after its `vm_lock_seq` is
//! already stored: readers that arrive meanwhile see the lock (or the FLAG) and back off, and those that
//! hold it are waited for. Loom does not model SeqCst loads and read-modify-writes (it treats them as
//! acquire/release), so the loom build also places a SeqCst fence between the reader's `W2` and `R2`, the form
//! loom checks (`crates/mm/tests/loom.rs`, `bulk_write_lock_*`); by the argument above the SeqCst accesses
//! alone suffice.
//!
//! # Waiting
//!
//! A writer waits on a key equal to the address of the VMA's `vm_refcnt` (`park`). The kernel waits
//! on the mm's `vma_writer_wait` and a reader of a recycled VMA pins the other mm to wake it; keying the wait on
//! the type-stable VMA itself gives the reader the right queue without knowing the mm.

use std::fmt;

use vmspace_rcu::sync::{Ordering, fence};

use super::mmap_lock::MmLocking;
use super::object::{Vma, vm_lock_seq_of};
use super::park::{park, spin_once, unpark_all};

/// The writer-exclusion flag in `vm_refcnt` (bit 30), the kernel's `VMA_LOCK_OFFSET`.
pub const VMA_LOCK_OFFSET: u32 = 1 << 30;
/// The largest `vm_refcnt` a reader may create (`VMA_LOCK_OFFSET - 1`), the kernel's `VMA_REF_LIMIT`.
pub const VMA_REF_LIMIT: u32 = VMA_LOCK_OFFSET - 1;

/// Why a VMA read lock was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmaLockFail {
    /// The VMA is detached (`vm_refcnt` 0): removed from the tree, maybe freed. The kernel's `-EAGAIN`; the
    /// caller should walk the tree again.
    Detached,
    /// The VMA is write-locked in the current write epoch, or a writer is excluding readers.
    WriteLocked,
    /// The reader count is at [`VMA_REF_LIMIT`].
    RefLimit,
    /// The VMA was freed and reused by another mm while the caller held a stale pointer.
    OtherMm,
}

impl VmaLockFail {
    /// True for [`VmaLockFail::Detached`] (retry the walk); every other failure means "fall back to
    /// mmap_lock".
    #[inline]
    pub fn is_detached(self) -> bool {
        self == Self::Detached
    }
}

impl fmt::Display for VmaLockFail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Detached => "VMA detached (EAGAIN)",
            Self::WriteLocked => "VMA write-locked",
            Self::RefLimit => "VMA reader limit reached",
            Self::OtherMm => "VMA recycled into another mm",
        })
    }
}

/// A VMA read lock: the VMA cannot be changed (nor detached, nor freed) while this guard lives. Dropping it is
/// `vma_end_read`.
#[must_use = "dropping the guard releases the VMA read lock at once"]
pub struct VmaReadGuard<'v> {
    vma: &'v Vma,
}

impl<'v> VmaReadGuard<'v> {
    /// The locked VMA.
    #[inline]
    pub fn vma(&self) -> &'v Vma {
        self.vma
    }

    /// Gives up the guard without unlocking: the read lock stays held (a leak, as `mem::forget` of the guard,
    /// unless it is re-wrapped with [`VmaReadGuard::from_raw`] or released with `vma_end_read`).
    #[inline]
    pub fn into_raw(self) -> &'v Vma {
        let vma = self.vma;
        std::mem::forget(self);
        vma
    }

    /// Re-wraps a read lock given up with [`VmaReadGuard::into_raw`].
    ///
    /// # Safety
    ///
    /// The caller owns exactly one read lock on `vma` (given up with [`VmaReadGuard::into_raw`] or taken by a
    /// raw path) that no other guard or call will release; the guard returned takes it over. A guard made
    /// without such a lock puts a reference it never took at its drop: the count of an attached VMA could
    /// reach 0, the value that means "detached", after which every reader refuses the VMA (the fault path
    /// retries its walk forever), and a writer waiting for the count would no longer wait for the readers
    /// still inside (munmap could free page tables under a fault).
    ///
    /// ```compile_fail,E0133
    /// // Forging a second guard from safe code: refused (its drop would put a reference never taken).
    /// use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, VmaReadGuard, lock_vma_under_rcu};
    /// let mm = Mm::new(MmConfig::default());
    /// let a = mm.mmap(0, PAGE_SIZE, Prot::RW, MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0).unwrap();
    /// let shared = mm.shared();
    /// let g = lock_vma_under_rcu(&shared.locking, &*shared, a).unwrap();
    /// drop(VmaReadGuard::from_raw(g.vma()));
    /// ```
    #[inline]
    pub unsafe fn from_raw(vma: &'v Vma) -> Self {
        Self { vma }
    }
}

impl std::ops::Deref for VmaReadGuard<'_> {
    type Target = Vma;
    #[inline]
    fn deref(&self) -> &Vma {
        self.vma
    }
}

impl Drop for VmaReadGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: a guard owns one read lock (made only by a successful `vma_start_read*`, or by `from_raw`,
        // whose caller hands one over) and is dropped once.
        unsafe { vma_end_read(self.vma) };
    }
}

impl fmt::Debug for VmaReadGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("VmaReadGuard").field(self.vma).finish()
    }
}

#[inline]
fn wait_key(vma: &Vma) -> usize {
    &vma.vm_refcnt as *const _ as usize
}

/// True if the count shows only the writer left (FLAG set, at most FLAG+1): the value at which a waiting writer
/// must be woken (the kernel's `is_vma_writer_only`).
#[inline]
fn is_writer_only(cnt: u32) -> bool {
    cnt & VMA_LOCK_OFFSET != 0 && cnt <= VMA_LOCK_OFFSET + 1
}

/// Adds one reference unless the count is 0 or the result would exceed [`VMA_REF_LIMIT`]; returns the old
/// value on failure. Acquire on success (`__refcount_inc_not_zero_limited_acquire`).
#[inline]
fn inc_not_zero_limited(vma: &Vma) -> Result<(), u32> {
    // Acquire, also on the failure paths: a reader that finds the VMA detached (0) synchronises with the
    // detach (`vma_mark_detached`'s release RMWs), which the writer performs after it updated the tree, so the
    // reader's re-walk sees the update and the `Detached` retry loop of `lock_vma_under_rcu` terminates.
    let mut old = vma.vm_refcnt.load(Ordering::Acquire);
    loop {
        if old == 0 || old >= VMA_REF_LIMIT {
            return Err(old);
        }
        // SeqCst on success (an acquire, and `W2` of the bulk write lock, module docs): the acquire pairs with the
        // release of `vma_mark_attached`'s store, a writer's `fetch_sub(FLAG)` in `vma_start_write`, and readers'
        // release decrements (one release sequence of RMWs), so the fields and `vm_lock_seq` written before them
        // are visible to the loads that follow; SeqCst orders the increment before `vma_start_read`'s SeqCst
        // re-check of `vm_lock_seq` against `vma_start_write_bulk`'s fence. Acquire on failure: see above.
        match vma.vm_refcnt.compare_exchange_weak(old, old + 1, Ordering::SeqCst, Ordering::Acquire) {
            Ok(_) => return Ok(()),
            Err(now) => old = now,
        }
    }
}

/// Drops one reader reference and wakes a writer left alone with the VMA (`vma_refcount_put`).
#[inline]
fn refcount_put(vma: &Vma) {
    // Release: this reader's section happens-before the writer that acquires the count it waits for.
    let old = vma.vm_refcnt.fetch_sub(1, Ordering::Release);
    debug_assert!(old != 0 && old != VMA_LOCK_OFFSET, "vma_end_read without a read lock (refcnt {old:#x})");
    if is_writer_only(old - 1) {
        unpark_all(wait_key(vma));
    }
}

/// True if `vma` is write-locked in `mm`'s current write epoch. Meaningful for the mmap write-lock holder (and
/// as a best-effort answer for anyone else).
#[inline]
pub fn vma_is_write_locked(mm: &MmLocking, vma: &Vma) -> bool {
    // Relaxed: the holder reads its own stores; others get a snapshot.
    vma.lock_seq_cell().load(Ordering::Relaxed) == mm_seq_relaxed(mm)
}

/// `mm_lock_seq` as a `vm_lock_seq` value ([`vm_lock_seq_of`]: its low 32 bits).
#[inline]
fn mm_seq_relaxed(mm: &MmLocking) -> u32 {
    // `raw_read` is acquire; a relaxed read would do for the cheap checks, the extra ordering is free on x86.
    vm_lock_seq_of(mm.mm_lock_seq().raw_read())
}

/// `vma_start_read`: tries to read-lock `vma` of `mm` without blocking. See the module docs for the failure
/// cases. The caller found `vma` in an RCU walk (or holds it otherwise); VMA memory is type-stable, so a stale
/// pointer is safe to pass and is detected.
pub fn vma_start_read<'v>(mm: &MmLocking, vma: &'v Vma) -> Result<VmaReadGuard<'v>, VmaLockFail> {
    // 1. Cheap check: write-locked in the current epoch. Relaxed: a false "unlocked" is caught by step 4.
    if vma.lock_seq_cell().load(Ordering::Relaxed) == mm_seq_relaxed(mm) {
        return Err(VmaLockFail::WriteLocked);
    }
    // 2. Limited increment with acquire.
    if let Err(old) = inc_not_zero_limited(vma) {
        return Err(if old == 0 {
            VmaLockFail::Detached
        } else if old & VMA_LOCK_OFFSET != 0 {
            VmaLockFail::WriteLocked
        } else {
            VmaLockFail::RefLimit
        });
    }
    let guard = VmaReadGuard { vma };
    // 3. Recycled into another mm? `vm_mm` is read after the acquire increment, so it is at least as new as the
    //    attach that made the count non-zero. Dropping the guard puts the reference and may wake the other mm's
    //    writer (keyed by the VMA, see the module docs).
    if vma.mm_id() != mm.id() {
        return Err(VmaLockFail::OtherMm);
    }
    // 4. Re-check the write lock. `vm_lock_seq` is ordered after the increment: by its acquire against
    //    `vma_start_write` (which stores it while readers are excluded), and as `R2` after the SeqCst increment
    //    `W2` against `vma_start_write_bulk` (which stores it, then fences, then reads the count: module docs,
    //    "Bulk write lock"; under loom by a SeqCst fence, which loom models). SeqCst, which is also an acquire
    //    pairing with the release store of `vm_lock_seq`: a reader that sees the epoch reads `mm_lock_seq` at
    //    that epoch or later. `mm_lock_seq` is read with acquire, pairing with the release in
    //    `vma_end_write_all`: if it shows the write epoch that locked the VMA as over, the changes made in it
    //    are visible. A sequence that wrapped could only produce a false "locked" (a harmless fall-back), never
    //    a false "unlocked".
    #[cfg(loom)]
    fence(Ordering::SeqCst);
    if vma.lock_seq_cell().load(Ordering::SeqCst) == vm_lock_seq_of(mm.mm_lock_seq().raw_read()) {
        return Err(VmaLockFail::WriteLocked);
    }
    Ok(guard)
}

/// `vma_start_read_locked`: read-locks `vma` while the caller holds `mm`'s mmap read lock (so no writer can
/// interfere). Fails only at the reader limit (or, on a misuse, on a detached VMA).
pub fn vma_start_read_locked(vma: &Vma) -> Result<VmaReadGuard<'_>, VmaLockFail> {
    match inc_not_zero_limited(vma) {
        Ok(()) => Ok(VmaReadGuard { vma }),
        Err(0) => {
            debug_assert!(false, "vma_start_read_locked on a detached VMA");
            Err(VmaLockFail::Detached)
        }
        Err(_) => Err(VmaLockFail::RefLimit),
    }
}

/// `vma_end_read`: releases one read lock on `vma` (taken by [`vma_start_read`] or
/// [`vma_start_read_locked`] and given up with [`VmaReadGuard::into_raw`]).
///
/// # Safety
///
/// The caller owns a read lock on `vma` and gives it up here (as for [`VmaReadGuard::from_raw`]).
#[inline]
pub unsafe fn vma_end_read(vma: &Vma) {
    refcount_put(vma);
}

/// Adds FLAG unless the count is 0 (`refcount_add_not_zero`). Acquire: the readers' sections that ended before
/// are visible.
#[inline]
fn add_flag_not_zero(vma: &Vma) -> bool {
    // Relaxed: the CAS carries the ordering.
    let mut old = vma.vm_refcnt.load(Ordering::Relaxed);
    loop {
        if old == 0 {
            return false;
        }
        debug_assert!(old & VMA_LOCK_OFFSET == 0, "two writers excluding readers on one VMA");
        // Acquire: pairs with readers' release decrements.
        match vma.vm_refcnt.compare_exchange_weak(
            old,
            old + VMA_LOCK_OFFSET,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return true,
            Err(now) => old = now,
        }
    }
}

/// Waits until `vm_refcnt == target` (spin, then park on the VMA's key).
fn wait_for_refcnt(vma: &Vma, target: u32) {
    let mut spins = 0;
    loop {
        // Acquire: reading `target` synchronises with the last reader's release decrement (all decrements are
        // RMWs in one release sequence), so every reader's section happens-before what the writer does next.
        if vma.vm_refcnt.load(Ordering::Acquire) == target {
            return;
        }
        if spin_once(&mut spins) {
            continue;
        }
        park(wait_key(vma), || {
            // Relaxed under the queue lock: a reader decrements before it takes the same lock to wake us.
            vma.vm_refcnt.load(Ordering::Relaxed) != target
        });
    }
}

/// `__vma_enter_locked`: adds FLAG (if attached) and waits for readers to leave. Returns false if the VMA is
/// detached (nothing to wait for).
fn enter_locked(vma: &Vma, detaching: bool) -> bool {
    if !add_flag_not_zero(vma) {
        return false;
    }
    wait_for_refcnt(vma, if detaching { VMA_LOCK_OFFSET } else { VMA_LOCK_OFFSET + 1 });
    true
}

/// `__vma_exit_locked`: subtracts FLAG with release ordering (readers that increment afterwards see every store
/// made while they were excluded, in particular `vm_lock_seq`). Returns the new count.
fn exit_locked(vma: &Vma) -> u32 {
    // Release: pairs with the acquire increment in `inc_not_zero_limited`.
    let old = vma.vm_refcnt.fetch_sub(VMA_LOCK_OFFSET, Ordering::Release);
    debug_assert!(old & VMA_LOCK_OFFSET != 0);
    old - VMA_LOCK_OFFSET
}

/// `vma_start_write`: write-locks `vma` for the rest of `mm`'s current write epoch, waiting for its readers to
/// leave. The caller holds `mm`'s mmap write lock and `vma` belongs to `mm`. The lock is released by
/// `mmap_write_unlock` / `mmap_write_downgrade` (there is no per-VMA unlock).
pub fn vma_start_write(mm: &MmLocking, vma: &Vma) {
    debug_assert!(mm.is_write_locked(), "vma_start_write without the mmap write lock");
    debug_assert_eq!(vma.mm_id(), mm.id(), "vma_start_write on another mm's VMA");
    let seq = mm_seq_relaxed(mm);
    // Relaxed: only this thread (the mmap write-lock holder) stores the current epoch.
    if vma.lock_seq_cell().load(Ordering::Relaxed) == seq {
        return;
    }
    if enter_locked(vma, false) {
        // Release (for the lockless readers; the per-VMA readers' publication is `exit_locked`'s release to
        // readers that increment afterwards, and readers that incremented before are the ones we waited for):
        // a lockless reader whose acquire load reads this epoch also reads `mm_lock_seq` at this epoch or
        // later (`lockless::snapshot`'s "write-locked now" check).
        vma.lock_seq_cell().store(seq, Ordering::Release);
        let left = exit_locked(vma);
        debug_assert_eq!(left, 1, "readers entered while excluded");
    } else {
        // Detached: no reader can take a reference; `vma_mark_attached`'s release store publishes this.
        // Release: as above, for the lockless readers.
        vma.lock_seq_cell().store(seq, Ordering::Release);
    }
    // The fields change after this: lockless readers (which take no reference, so the wait above never waits
    // for them) detect it by the VMA's write count (`Vma::write_seq_bump`, after the `vm_lock_seq` store).
    vma.write_seq_bump();
    // SeqCst: pairs with the speculative fault's fence under its PTE lock (`space::fault`, "Speculative
    // faults"): a fault whose table this writer's page-table walk finds empty reads the bump above.
    fence(Ordering::SeqCst);
}

/// [`vma_start_write`] of every VMA of `vmas` (module docs, "Bulk write lock"): each `vm_lock_seq` stored and
/// `vm_seq` bumped, one sequentially consistent fence, then each `vm_refcnt` read; a VMA with no reader is then
/// write-locked without any read-modify-write, one with readers waits for them as [`vma_start_write`] does. The
/// caller holds `mm`'s mmap write lock and every VMA of `vmas` belongs to `mm`. On return every VMA of `vmas`
/// is write-locked for the rest of the write epoch, exactly as after [`vma_start_write`] on each.
pub fn vma_start_write_bulk(mm: &MmLocking, vmas: &[&Vma]) {
    debug_assert!(mm.is_write_locked(), "vma_start_write_bulk without the mmap write lock");
    let seq = mm_seq_relaxed(mm);
    for vma in vmas {
        debug_assert_eq!(vma.mm_id(), mm.id(), "vma_start_write_bulk on another mm's VMA");
        // Relaxed: only this thread (the mmap write-lock holder) stores the current epoch.
        if vma.lock_seq_cell().load(Ordering::Relaxed) != seq {
            // Release (`W1`): pairs with `vma_start_read`'s SeqCst (acquire) re-check and the lockless readers'
            // acquire load, as in `vma_start_write`.
            vma.lock_seq_cell().store(seq, Ordering::Release);
            // As in `vma_start_write`: lockless readers detect the changes that follow by the write count.
            vma.write_seq_bump();
        }
    }
    // SeqCst (`FX`): orders every `vm_lock_seq` store above before the `vm_refcnt` loads below, against the
    // readers' SeqCst increment and re-check (module docs); and, as `vma_start_write`'s fence, every bump above
    // before the page-table work that follows, for the speculative fault's fence under its PTE lock.
    fence(Ordering::SeqCst);
    for vma in vmas {
        // Acquire (`R1`): reading the count a finished reader's release decrement left synchronises with it
        // (one release sequence of RMWs), so its section happens-before the writer's changes.
        let refs = vma.vm_refcnt.load(Ordering::Acquire);
        // 0: detached (no reader can take a reference); 1: attached, no reader.
        if refs > 1 && enter_locked(vma, false) {
            // Readers hold references (holders, or transient ones that will see the lock and back off): shut
            // new ones out and wait for these to leave, as `vma_start_write` does.
            let left = exit_locked(vma);
            debug_assert_eq!(left, 1, "readers entered while excluded");
        }
    }
}

/// [`vma_start_write`] of a detached VMA of an mm that no thread but the caller can reach yet (fork's child
/// before `fork` returns): records the epoch and bumps the write count, without the sequentially consistent
/// fence. That fence pairs with a speculative fault in the VMA's mm (`space::fault`), and no fault can run in
/// an mm no other thread holds; a per-VMA reader cannot take a reference from a detached VMA, and a lockless
/// reader holding a stale pointer to it sees another mm's `vm_mm` (or the bump) and refuses its copy. The
/// caller holds `mm`'s mmap write lock.
pub fn vma_start_write_unpublished(mm: &MmLocking, vma: &Vma) {
    debug_assert!(mm.is_write_locked(), "vma_start_write_unpublished without the mmap write lock");
    debug_assert_eq!(vma.mm_id(), mm.id(), "vma_start_write_unpublished on another mm's VMA");
    debug_assert_eq!(vma.refcnt(), 0, "vma_start_write_unpublished on an attached VMA");
    // Release: as in `vma_start_write` (published to readers by `vma_mark_attached`'s release store).
    vma.lock_seq_cell().store(mm_seq_relaxed(mm), Ordering::Release);
    vma.write_seq_bump();
}

/// The `vm_lock_seq` that [`vma_start_write_unpublished`] stores, for a caller that stores it itself inside a
/// write section of its own (`VmaBatch::next_fork_copy`: fork's child VMAs, the epoch stored in the same pool
/// section as `vm_mm` and the copied fields). The caller holds `mm`'s mmap write lock, and no thread but the
/// caller can reach `mm` yet.
#[inline]
pub(crate) fn unpublished_lock_seq(mm: &MmLocking) -> u32 {
    debug_assert!(mm.is_write_locked(), "an unpublished VMA write lock without the mmap write lock");
    mm_seq_relaxed(mm)
}

/// `vma_assert_write_locked` as a predicate for the holder: true if `vma` is write-locked in `mm`'s current
/// epoch and `mm` is write-locked.
#[inline]
pub fn vma_assert_write_locked(mm: &MmLocking, vma: &Vma) -> bool {
    mm.is_write_locked() && vma_is_write_locked(mm, vma)
}

/// `vma_mark_attached`: a detached, write-locked VMA becomes attached (count 1). Call it when (or right before)
/// the VMA is stored in the tree.
pub fn vma_mark_attached(mm: &MmLocking, vma: &Vma) {
    debug_assert!(vma_assert_write_locked(mm, vma), "vma_mark_attached without the VMA write lock");
    debug_assert_eq!(vma.refcnt(), 0, "vma_mark_attached on an attached VMA");
    // Release: the fields, `vm_mm` and `vm_lock_seq` set while detached are visible to a reader whose acquire
    // increment reads this value (or a later one in its release sequence).
    vma.vm_refcnt.store(1, Ordering::Release);
}

/// `vma_mark_detached`: an attached, write-locked VMA becomes detached (count 0), waiting for any transient
/// reader still holding a reference. Call it after the VMA was removed from (or replaced in) the tree; once it
/// returns the VMA may be freed to the pool.
pub fn vma_mark_detached(mm: &MmLocking, vma: &Vma) {
    debug_assert!(vma_assert_write_locked(mm, vma), "vma_mark_detached without the VMA write lock");
    // AcqRel: the release orders the writer's earlier stores before the detached state; the acquire (when the
    // count reaches 0 here) orders readers' sections before whatever follows (freeing).
    let old = vma.vm_refcnt.fetch_sub(1, Ordering::AcqRel);
    debug_assert!(old != 0 && old & VMA_LOCK_OFFSET == 0, "vma_mark_detached on a detached VMA ({old:#x})");
    if old != 1 && enter_locked(vma, true) {
        // Transient readers held references (they saw the write lock and are backing off): we waited for them.
        let left = exit_locked(vma);
        debug_assert_eq!(left, 0);
    }
    // SeqCst: as in `vma_start_write`, for a speculative fault that copied the VMA after its write epoch ended
    // but before it was freed (it checks that the VMA is attached).
    fence(Ordering::SeqCst);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::vma::pool::VmaPool;

    fn setup() -> (&'static VmaPool, MmLocking) {
        (VmaPool::leak_new(), MmLocking::new())
    }

    /// Allocates a VMA in `mm`, sets a range and attaches it (count 1) inside a write section.
    fn attached(pool: &VmaPool, mm: &MmLocking, start: u64, end: u64) -> &'static Vma {
        let vma = pool.alloc(mm).expect("alloc");
        let _w = mm.write_lock();
        vma.set_range(mm, start, end);
        vma_start_write(mm, vma);
        vma_mark_attached(mm, vma);
        vma
    }

    #[test]
    fn constants() {
        assert_eq!(VMA_LOCK_OFFSET, 0x4000_0000);
        assert_eq!(VMA_REF_LIMIT, 0x3fff_ffff);
    }

    #[test]
    fn fresh_vma_is_detached_and_refuses_readers() {
        let (pool, mm) = setup();
        let vma = pool.alloc(&mm).unwrap();
        assert_eq!(vma.refcnt(), 0);
        assert_eq!(vma_start_read(&mm, vma).unwrap_err(), VmaLockFail::Detached);
        assert_eq!(vma.refcnt(), 0);
    }

    #[test]
    fn attach_then_read_lock_counts() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x3000);
        // 0 -> 1 (attached), write lock dropped by the guard above.
        assert_eq!(vma.refcnt(), 1);
        let r1 = vma_start_read(&mm, vma).unwrap();
        assert_eq!(vma.refcnt(), 2);
        let r2 = vma_start_read(&mm, vma).unwrap();
        assert_eq!(vma.refcnt(), 3);
        drop(r1);
        drop(r2);
        assert_eq!(vma.refcnt(), 1);
    }

    #[test]
    fn write_locked_refuses_readers_until_mmap_write_unlock() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x3000);
        let w = mm.write_lock();
        vma_start_write(&mm, vma);
        // Write-locked: count stays 1, vm_lock_seq is the (odd) epoch.
        assert_eq!(vma.refcnt(), 1);
        assert_eq!(vma.lock_seq(), vm_lock_seq_of(mm.mm_lock_seq().raw_read()));
        assert_eq!(vma.lock_seq() & 1, 1);
        assert!(vma_is_write_locked(&mm, vma));
        assert_eq!(vma_start_read(&mm, vma).unwrap_err(), VmaLockFail::WriteLocked);
        assert_eq!(vma.refcnt(), 1);
        // Idempotent within the epoch.
        vma_start_write(&mm, vma);
        assert_eq!(vma.refcnt(), 1);
        drop(w);
        // mmap_write_unlock released the VMA write lock.
        assert!(!vma_is_write_locked(&mm, vma));
        let r = vma_start_read(&mm, vma).unwrap();
        assert_eq!(vma.refcnt(), 2);
        drop(r);
    }

    #[test]
    fn downgrade_releases_vma_write_locks() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x2000);
        let w = mm.write_lock();
        vma_start_write(&mm, vma);
        let r = w.downgrade();
        assert!(!mm.is_write_locked());
        let g = vma_start_read(&mm, vma).unwrap();
        drop(g);
        // Under the mmap read lock, the locked variant works too.
        let g = vma_start_read_locked(vma).unwrap();
        assert_eq!(vma.refcnt(), 2);
        drop(g);
        drop(r);
    }

    #[test]
    fn writer_excluding_readers_refuses_them() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x2000);
        // Simulate the middle of vma_start_write: FLAG added, readers excluded.
        vma.vm_refcnt.fetch_add(VMA_LOCK_OFFSET, Ordering::Relaxed);
        assert_eq!(vma.refcnt(), VMA_LOCK_OFFSET + 1);
        assert_eq!(vma_start_read(&mm, vma).unwrap_err(), VmaLockFail::WriteLocked);
        assert_eq!(vma_start_read_locked(vma).unwrap_err(), VmaLockFail::RefLimit);
        assert_eq!(vma.refcnt(), VMA_LOCK_OFFSET + 1);
        vma.vm_refcnt.fetch_sub(VMA_LOCK_OFFSET, Ordering::Relaxed);
    }

    #[test]
    fn reader_limit() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x2000);
        vma.vm_refcnt.store(VMA_REF_LIMIT - 1, Ordering::Relaxed);
        let g = vma_start_read(&mm, vma).unwrap();
        assert_eq!(vma.refcnt(), VMA_REF_LIMIT);
        assert_eq!(vma_start_read(&mm, vma).unwrap_err(), VmaLockFail::RefLimit);
        assert_eq!(vma_start_read_locked(vma).unwrap_err(), VmaLockFail::RefLimit);
        drop(g);
        vma.vm_refcnt.store(1, Ordering::Relaxed);
    }

    #[test]
    fn detach_with_no_readers_and_free() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x2000);
        {
            let _w = mm.write_lock();
            vma_start_write(&mm, vma);
            vma_mark_detached(&mm, vma);
            assert_eq!(vma.refcnt(), 0);
        }
        assert_eq!(vma_start_read(&mm, vma).unwrap_err(), VmaLockFail::Detached);
        pool.free(vma);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn detach_waits_for_straggler() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x2000);
        let w = mm.write_lock();
        vma_start_write(&mm, vma);
        // A transient reader: it incremented before seeing the write lock (count 2), and will back off.
        vma.vm_refcnt.fetch_add(1, Ordering::Acquire);
        std::thread::scope(|s| {
            s.spawn(|| {
                // The detacher dropped its own reference and excludes readers: FLAG + 1 (one straggler).
                wait_refcnt(vma, VMA_LOCK_OFFSET + 1);
                assert_eq!(vma_start_read(&mm, vma).unwrap_err(), VmaLockFail::WriteLocked);
                assert_eq!(vma_start_read_locked(vma).unwrap_err(), VmaLockFail::RefLimit);
                // SAFETY: the transient reference added above is this thread's to put.
                unsafe { vma_end_read(vma) };
            });
            vma_mark_detached(&mm, vma);
            // FLAG -> 0 once the straggler left.
            assert_eq!(vma.refcnt(), 0);
        });
        drop(w);
        assert_eq!(vma_start_read(&mm, vma).unwrap_err(), VmaLockFail::Detached);
    }

    /// Waits (bounded) until the VMA's count shows `v`.
    fn wait_refcnt(vma: &Vma, v: u32) {
        let t = std::time::Instant::now();
        while vma.refcnt() != v {
            assert!(t.elapsed().as_secs() < 10, "refcnt stuck at {:#x}, want {v:#x}", vma.refcnt());
            std::thread::yield_now();
        }
    }

    /// Takes `lock` under the mmap write lock while another thread holds a read lock of `read`, and checks that
    /// `lock` returned only after that reader saw the writer waiting (`vm_refcnt` at FLAG + 2: the writer added
    /// FLAG and counts the reader), was shut out when it tried again, and left.
    fn write_lock_waits_for_reader(mm: &MmLocking, read: &Vma, lock: impl FnOnce()) {
        let r = vma_start_read(mm, read).unwrap();
        assert_eq!(read.refcnt(), 2);
        let released = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                wait_refcnt(read, VMA_LOCK_OFFSET + 2);
                // New readers are shut out meanwhile.
                assert_eq!(vma_start_read(mm, read).unwrap_err(), VmaLockFail::WriteLocked);
                released.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(r);
            });
            let _w = mm.write_lock();
            lock();
            assert!(released.load(std::sync::atomic::Ordering::SeqCst));
        });
    }

    #[test]
    fn start_write_waits_for_reader() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x2000);
        write_lock_waits_for_reader(&mm, vma, || {
            vma_start_write(&mm, vma);
            // FLAG + 1 -> store vm_lock_seq -> minus FLAG: back to 1, write-locked.
            assert_eq!(vma.refcnt(), 1);
            assert!(vma_is_write_locked(&mm, vma));
        });
    }

    #[test]
    fn bulk_write_lock_without_readers_changes_no_count() {
        let (pool, mm) = setup();
        let a = attached(pool, &mm, 0x1000, 0x2000);
        let b = attached(pool, &mm, 0x3000, 0x4000);
        let w = mm.write_lock();
        let seqs = (a.write_seq(), b.write_seq());
        // `a` twice: a VMA already locked in the epoch is left as it is.
        vma_start_write_bulk(&mm, &[a, b, a]);
        assert!(vma_is_write_locked(&mm, a) && vma_is_write_locked(&mm, b));
        assert_eq!((a.refcnt(), b.refcnt()), (1, 1));
        assert_eq!((a.write_seq(), b.write_seq()), (seqs.0 + 2, seqs.1 + 2), "one bump per VMA");
        assert_eq!(vma_start_read(&mm, a).unwrap_err(), VmaLockFail::WriteLocked);
        assert_eq!(vma_start_read(&mm, b).unwrap_err(), VmaLockFail::WriteLocked);
        assert_eq!((a.refcnt(), b.refcnt()), (1, 1), "refused readers put their references back");
        // Idempotent within the epoch, alone or in bulk.
        vma_start_write(&mm, a);
        vma_start_write_bulk(&mm, &[b]);
        assert_eq!((a.write_seq(), b.write_seq()), (seqs.0 + 2, seqs.1 + 2));
        drop(w);
        assert!(!vma_is_write_locked(&mm, a) && !vma_is_write_locked(&mm, b));
        drop(vma_start_read(&mm, a).unwrap());
    }

    #[test]
    fn bulk_write_lock_waits_for_reader() {
        let (pool, mm) = setup();
        let a = attached(pool, &mm, 0x1000, 0x2000);
        let b = attached(pool, &mm, 0x3000, 0x4000);
        // The bulk writer stores the epoch, then counts `b`'s reader and shuts others out.
        write_lock_waits_for_reader(&mm, b, || {
            vma_start_write_bulk(&mm, &[a, b]);
            assert_eq!((a.refcnt(), b.refcnt()), (1, 1));
            assert!(vma_is_write_locked(&mm, a) && vma_is_write_locked(&mm, b));
        });
    }

    #[test]
    fn unpublished_write_lock_records_epoch() {
        let (pool, mm) = setup();
        let v = pool.alloc(&mm).unwrap();
        let _w = mm.write_lock();
        let seq = v.write_seq();
        vma_start_write_unpublished(&mm, v);
        assert!(vma_is_write_locked(&mm, v));
        assert_eq!((v.refcnt(), v.write_seq()), (0, seq + 2));
        vma_mark_attached(&mm, v);
        assert_eq!(vma_start_read(&mm, v).unwrap_err(), VmaLockFail::WriteLocked);
    }

    #[test]
    fn start_write_on_detached_only_records_epoch() {
        let (pool, mm) = setup();
        let vma = pool.alloc(&mm).unwrap();
        let _w = mm.write_lock();
        vma_start_write(&mm, vma);
        assert_eq!(vma.refcnt(), 0);
        assert!(vma_is_write_locked(&mm, vma));
        vma_mark_attached(&mm, vma);
        assert_eq!(vma.refcnt(), 1);
        // Attached but still write-locked in this epoch: readers refused.
        assert_eq!(vma_start_read(&mm, vma).unwrap_err(), VmaLockFail::WriteLocked);
    }

    #[test]
    fn recycled_into_other_mm_is_refused() {
        let pool = VmaPool::leak_new();
        let a = MmLocking::new();
        let b = MmLocking::new();
        let vma = attached(pool, &a, 0x1000, 0x2000);
        {
            let _w = a.write_lock();
            vma_start_write(&a, vma);
            vma_mark_detached(&a, vma);
        }
        pool.free(vma);
        // The same object is handed to mm b and attached there.
        let again = attached(pool, &b, 0x5000, 0x6000);
        assert!(std::ptr::eq(again, vma));
        // A stale reader of mm a: the increment succeeds, vm_mm differs, the reference is given back.
        assert_eq!(vma_start_read(&a, vma).unwrap_err(), VmaLockFail::OtherMm);
        assert_eq!(vma.refcnt(), 1);
        assert!(vma_start_read(&b, vma).is_ok());
    }

    #[test]
    fn guard_raw_round_trip() {
        let (pool, mm) = setup();
        let vma = attached(pool, &mm, 0x1000, 0x2000);
        let raw = vma_start_read(&mm, vma).unwrap().into_raw();
        assert_eq!(vma.refcnt(), 2);
        // SAFETY: `raw`'s read lock was given up by `into_raw` and is re-wrapped once.
        drop(unsafe { VmaReadGuard::from_raw(raw) });
        assert_eq!(vma.refcnt(), 1);
        let raw = vma_start_read(&mm, vma).unwrap().into_raw();
        // SAFETY: as above, released once.
        unsafe { vma_end_read(raw) };
        assert_eq!(vma.refcnt(), 1);
    }
}
