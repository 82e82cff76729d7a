//! The lockless VMA reader: a VMA's fields copied under RCU and validated by sequence counts, taking no lock
//! that a writer waits for and holding nothing a writer waits for (the `/proc` readers' `Lockless` mode,
//! `space::reader`).
//!
//! # Why not the per-VMA lock
//!
//! A per-VMA reader holds a reference in `vm_refcnt`, and `vma_start_write` / `vma_mark_detached` wait for
//! it: a reader preempted inside a record delays the writer of that VMA. The lockless reader takes no
//! reference: it copies the fields (a [`VmaSnapshot`]) and then checks that no writer touched the VMA while it
//! copied, retrying if one did. Writers never learn that it exists.
//!
//! # What the writer provides
//!
//! - `mm_lock_seq` ([`MmLocking::mm_lock_seq`]): odd while the mmap write lock is held; its stores are release
//!   stores (`SeqCount::write_begin` / `write_end`), so a reader that reads a value sees every write section
//!   that ended before it. With it, once per 2^19 write sections, the epoch's high bits (below, "The cached
//!   epoch").
//! - `vm_lock_seq`: the epoch in which the VMA was last write-locked, stored with release ordering by
//!   `vma_start_write`; the VMA is being changed iff it equals the current `mm_lock_seq`.
//! - `vm_seq` (the VMA's write count, [`Vma::write_seq`]): raised by 2 (a release store, then a release fence)
//!   by `vma_start_write` after it stores `vm_lock_seq`, before any field changes; and made odd, then even
//!   again, around the pool's changes of a detached VMA (when it is freed: fields cleared, `vm_mm` reset; when
//!   it is handed out: `vm_mm` set), a seqcount's write section. Never reset (VMA objects are type-stable), so
//!   a VMA freed and reused, even by another mm and back, never shows the same count again (no ABA, but at
//!   2^32 changes).
//!
//! Two changes are not bumped, as in the kernel they are single-word updates under the mmap *read* lock: a
//! sticky flag (`VM_MAYBE_GUARD`, `Vma::set_flag_atomic`) and a first anon_vma (`__anon_vma_prepare`). A copy
//! sees each old or new, never a torn word.
//!
//! # The reader's protocol ([`vma_snapshot_lockless`])
//!
//! ```text
//! c0 = vm_seq           (acquire)  odd: the pool is changing the VMA -> Changed (retry)
//!                                  else the section whose bump it reads, and everything before, is visible
//! s0 = vm_lock_seq      (acquire)  the epoch of that section (or a later one)
//! m0 = mm_lock_seq      (acquire)  s0 == m0: the VMA is write-locked now -> WriteLocked (retry later)
//!                                  else that epoch ended before m0 was stored: its stores are visible
//!                                  (a walk or query mostly skips this load: "The cached epoch")
//! copy the fields       (relaxed atomics; the file and names through RCU cells)
//! fence(acquire)                   pairs with the release fence after every bump
//! c1 = vm_seq           (relaxed)  c1 != c0: a writer began a change while we copied -> Changed
//! vm_mm != this mm, or an empty range: a stale pointer (freed, reused) -> Stale
//! ```
//!
//! Why an accepted copy is one state of the VMA: every store the copy may have read was made either after a
//! bump later than `c0` (then the fence pairing makes `c1` read that bump: rejected) or before it, in the
//! write section of `c0` or earlier. The section of `c0` is complete and visible: if it is a write-lock
//! section of epoch `E`, `vm_lock_seq` was set to `E` before the bump, so `s0 >= E` and `m0 >= s0` (acquire
//! chains); `s0 == m0` is refused, and `m0 > s0 >= E` means `E`'s end (a release store) was read. If it is the
//! end of one of the pool's sections (even, a release store after the section's stores), the section is complete
//! and visible: a freed VMA shows an empty range and `vm_mm` 0, one handed out to another mm that mm's id:
//! refused. So a copy either is refused or mixes no two states. (The pool's sections need their own end:
//! a VMA may be freed after its mm's write section ended, as the loom model `lockless_snapshot_vs_recycle`
//! does; an odd count alone marks them, since the pool never writes a VMA a reader could lock.)
//!
//! # The cached epoch ([`LocklessEpoch`])
//!
//! `mm_lock_seq` is the one word of the mm the writer stores on every call (twice: `mmap_write_lock`, and
//! `mmap_write_unlock` or the downgrade), and the protocol above reads it for every VMA: a scanner of
//! thousands of VMAs beside a mapper takes that line from the mapper's cache over and over, and each of the
//! mapper's stores takes it back. A walk or a query does not need it for most VMAs. It keeps `seen`, the
//! latest `mm_lock_seq` value it read (acquire), and skips the re-read when `s0` is an epoch that ended
//! before `seen`:
//!
//! ```text
//! c0 = vm_seq           (acquire)  as above
//! s0 = vm_lock_seq      (acquire)  as above
//! s0 older than seen (32-bit wrapping), and hi <= seen_hi + 1 (below, "Wrapping"):
//!                                  epoch s0 ended before seen was stored: no re-read
//! else: m0 = mm_lock_seq (acquire), seen = m0; s0 == m0 -> WriteLocked; else as above
//! copy, fence(acquire), c1, vm_mm and range checks: as above
//! ```
//!
//! Why a skipped re-read changes nothing. The argument above uses `m0` for two things, and `seen` gives
//! both. (1) The check passes: `m0`, had it been read after `s0`, would be `seen` or a later value (read-read
//! coherence of one location: `seen` was read earlier by this thread, or published to it, below), so
//! `m0 >= seen > s0` and `s0 != m0`: the original protocol would have gone on too. (2) The section of `c0`
//! (of epoch `E <= s0`) is complete and visible: the store that ended epoch `s0` precedes the store of `seen`
//! (the write-lock holders store `mm_lock_seq` one after another, each having acquired the lock from the
//! last), `seen` was read with acquire before `c0` was, so that end, and `E`'s, happen before the copy's
//! loads. In the words of the proposal this implements: a VMA whose last lock is of an epoch older than the
//! cached one cannot be write-locked now without a new `vma_start_write`, which stores a newer `vm_lock_seq`
//! and then bumps `vm_seq`: if that lock came before `c0` was read, `s0` shows it (acquire chain) and the
//! reader re-reads `mm_lock_seq`; if after, `c1` shows the bump (fence pairing) and the copy is refused.
//!
//! A `vm_lock_seq` that is not an epoch of this mm (the pool's [`super::VM_LOCK_SEQ_NONE`] of a VMA handed
//! out and not locked yet, or another mm's epoch in a VMA recycled from there) makes the skip no less sound:
//! the copy is then refused by the same checks as before (an empty range or another `vm_mm`: `Stale`; or a
//! pool section after `c0`, which moved `vm_seq`: `Changed`), whatever `mm_lock_seq` holds.
//!
//! Where `seen` lives. A walk ([`walk_vmas_lockless`], one chunk of a `/proc` read, and its fallback steps)
//! and a query (one PROCMAP_QUERY answer) start from the value the mm's lockless readers last published
//! (`LocklessEpochs`, a field of [`MmLocking`] alone on its cache line, which only readers write) and
//! publish what they re-read when they end. The publication is a release store and the start an acquire
//! load, so a reader that starts from another's value has that reader's acquire of `mm_lock_seq` (and every
//! section it showed as ended) happening before its own loads: (1) and (2) hold for it as for the reader that
//! read `mm_lock_seq`. Any value once read stays valid; an older one (a slower reader's store after a newer
//! one) only makes the next reader re-read sooner. A reader re-reads at most once per VMA locked since the
//! value it holds, so a scanner beside a mapper reads the mapper's line about once per mapper call that
//! locked a VMA ahead of it, instead of once per VMA.
//!
//! Wrapping. `vm_lock_seq` holds the low 32 bits of its epoch, so "older" is a wrapping comparison, exact
//! only while the VMA's epoch lies within 2^31 values of `seen`. An old one lying further behind is harmless
//! (seen as newer: a re-read), but a newer one 2^31 values or more ahead of a cache that stayed that long
//! would pass for older: a false "unlocked", which the kernel's comparisons never give (its wrap gives only a
//! false "locked", `vma_start_read`). So the writer also publishes the high bits of the epoch,
//! `mm_lock_seq >> 20`, stored once per 2^19 write sections when a section opens in a new bucket, before any
//! `vm_lock_seq` store of it (`LocklessEpochs::note_write_begin`), on a line of their own. The reader loads them
//! after `s0` (so it reads at least the bucket of `s0`'s epoch, by the acquire chain) and skips only if they
//! are at most one bucket past `seen`'s: then `s0`'s epoch is less than 2^21 values ahead of `seen`, and the
//! 32-bit comparison is exact. A cache of any age is therefore safe; a stale one costs re-reads, not
//! correctness.
//!
//! The per-VMA reader (`vma_start_read`) keeps the kernel's protocol and reads `mm_lock_seq` for every VMA,
//! twice, as 6.18's does; the speculative fault (one VMA per fault) keeps the uncached protocol above.
//!
//! # The walk ([`next_vma_lockless`])
//!
//! The `/proc` walk needs more than a consistent VMA: no false gap in memory that stays mapped. Writers keep
//! the tree free of false gaps (a VMA that grows is stored before its neighbour shrinks: `space::tree`), so
//! the reader trusts the tree for gaps and the snapshot for the rest:
//! - find the first entry ending after `from` under RCU (none: the walk is over);
//! - copy and validate the VMA stored there;
//! - require the tree's range for it to be the snapshot's range (a VMA half-way through a writer's call, whose
//!   tree range and fields disagree, is retried after the writer's store);
//! - if the snapshot starts after `from` (a gap before it), walk again after the copy and require the same
//!   VMA with the same range to come first: a VMA that split or moved into the gap meanwhile is then found.
//!
//! Retries spin a little, then yield: the reader waits for a writer's call on *this* VMA to end (it needs the
//! before or the after state), never the other way round.

use vmspace_maple::MapleTree;
use vmspace_rcu::CachePadded;
use vmspace_rcu::sync::{AtomicU64, Ordering, fence, spin_loop, yield_now};

use std::sync::Arc;

use super::VmFlags;
use super::attrs::VmFile;
use super::lookup::prefetch_vma;
use super::mmap_lock::MmLocking;
use super::object::{Vma, VmaSnapshot, vm_lock_seq_of};

/// Why a lockless copy of a VMA was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotFail {
    /// The VMA is write-locked in the current write epoch: a writer is changing it.
    WriteLocked,
    /// A writer began a change (or the pool reused the VMA) while the reader copied.
    Changed,
    /// The VMA belongs to no mm or another one, or has an empty range: a stale pointer.
    Stale,
}

/// `log2` of the bucket of `mm_lock_seq` values that [`LocklessEpochs`]'s high bits count: the writer stores
/// them once per 2^20 values (2^19 write sections).
const EPOCH_HI_SHIFT: u32 = 20;

/// The mm-level half of the cached epoch (module docs, "The cached epoch"), a field of [`MmLocking`]: what
/// the writer tells lockless readers besides `mm_lock_seq`, and where readers leave the epoch they last read
/// for the next walk or query. Each word is alone on its cache line: the first is written once per 2^19 write
/// sections, the second only by readers, so neither is a line the mapper writes per call.
pub struct LocklessEpochs {
    /// `mm_lock_seq >> EPOCH_HI_SHIFT` of the latest write section: stored by the write-lock holder when it
    /// opens the first write section of a new bucket of 2^20 values ([`LocklessEpochs::note_write_begin`]),
    /// before any `vm_lock_seq` store of that section. A reader that skips its re-read of `mm_lock_seq` reads
    /// it to know that the 32-bit comparison of `vm_lock_seq` with its cached epoch cannot have wrapped.
    hi: CachePadded<AtomicU64>,
    /// The latest `mm_lock_seq` value a lockless reader read (with acquire) and published (with release) for
    /// the walks and queries after it. Written by readers only; any value once read is a valid one to start
    /// from (module docs).
    seen: CachePadded<AtomicU64>,
}

impl LocklessEpochs {
    /// The state of a new mm (`mm_lock_seq` 0: every value below is the initial one).
    pub(crate) fn new() -> Self {
        Self { hi: CachePadded::new(AtomicU64::new(0)), seen: CachePadded::new(AtomicU64::new(0)) }
    }

    /// The writer's half, called by the mmap write-lock holder right after it made `mm_lock_seq` the odd value
    /// `seq` (`MmLocking`'s write lock): the first write section of a bucket stores the bucket's number.
    /// Values grow by one per write lock and per unlock, so every bucket's first odd value is seen here.
    #[inline(always)]
    pub(crate) fn note_write_begin(&self, seq: u64) {
        if seq & ((1 << EPOCH_HI_SHIFT) - 1) == 1 {
            // Relaxed: ordered before every `vm_lock_seq` store of this and later write sections by their
            // release (and by the mmap lock's hand-over between writers), so a reader whose acquire load of
            // a `vm_lock_seq` reads one of them reads this value or a later one (write-read coherence).
            self.hi.store(seq >> EPOCH_HI_SHIFT, Ordering::Relaxed);
        }
    }
}

/// A lockless reader's cached epoch for one walk or query (module docs, "The cached epoch"): the mm's
/// identity (immutable, copied once) and the latest `mm_lock_seq` value this reader has read. A VMA whose
/// `vm_lock_seq` is an epoch that ended before that value is copied without reading `mm_lock_seq` again.
/// Taken from the mm's published value ([`LocklessEpoch::load`]) or read afresh ([`LocklessEpoch::new`]);
/// dropping it publishes what it re-read, for the next reader.
pub struct LocklessEpoch<'m> {
    mm: &'m MmLocking,
    id: u64,
    /// The latest `mm_lock_seq` value this reader read with acquire (or took, with acquire, from a reader
    /// that did).
    seen: u64,
    /// What `seen` was when this cache was taken from the mm: it is published on drop only if it moved.
    start: u64,
}

impl<'m> LocklessEpoch<'m> {
    /// A cache holding `mm_lock_seq` read now (published when dropped, as a re-read value is).
    #[inline]
    pub fn new(mm: &'m MmLocking) -> Self {
        // Acquire (`raw_read`): pairs with the release stores of `mm_lock_seq`: every write section that
        // ended before the value read is visible to this thread's later loads.
        let seen = mm.mm_lock_seq().raw_read();
        // `start` is no value `seen` can hold (`mm_lock_seq` does not reach 2^64): the drop publishes.
        Self { mm, id: mm.id(), seen, start: u64::MAX }
    }

    /// A cache holding the value the mm's lockless readers last published (no load of `mm_lock_seq`).
    #[inline]
    pub fn load(mm: &'m MmLocking) -> Self {
        // Acquire: pairs with the release store in `Drop`: the publishing reader's acquire load of that
        // value, and every write section it showed as ended, happen before this thread's later loads.
        let seen = mm.lockless_epochs().seen.load(Ordering::Acquire);
        Self { mm, id: mm.id(), seen, start: seen }
    }

    /// The cached `mm_lock_seq` value (for tests and diagnostics).
    #[inline]
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// [`vma_snapshot_lockless`] with this cache: the same validation, `mm_lock_seq` re-read only when the
    /// VMA's `vm_lock_seq` is not an epoch that ended before the cached one.
    #[inline]
    pub fn snapshot(&mut self, vma: &Vma) -> Result<VmaSnapshot, SnapshotFail> {
        self.copy(vma)
    }

    /// [`copy_lockless`] with this cache.
    #[inline(always)]
    pub(crate) fn copy<C: VmaCopy>(&mut self, vma: &Vma) -> Result<C, SnapshotFail> {
        let c0 = self.begin(vma)?;
        let snap = C::copy(vma);
        let (start, end) = snap.range();
        copy_end(self.id, vma, c0, snap.mm_id(), start, end)?;
        Ok(snap)
    }

    /// The protocol's first half with the cached epoch (module docs, "The cached epoch"): the write count
    /// `c0` to hand to [`copy_end`], or why the VMA cannot be copied now.
    #[inline(always)]
    fn begin(&mut self, vma: &Vma) -> Result<u32, SnapshotFail> {
        // Acquire: as in `copy_begin`.
        let c0 = vma.write_seq_cell().load(Ordering::Acquire);
        if c0 & 1 == 1 {
            return Err(SnapshotFail::Changed);
        }
        // Acquire: as in `copy_begin`; also orders the load of the epoch's high bits below after it.
        let s0 = vma.lock_seq_cell().load(Ordering::Acquire);
        if !self.ended_before_seen(s0) {
            // Acquire (`raw_read`): as in `copy_begin`.
            let m0 = self.mm.mm_lock_seq().raw_read();
            self.seen = m0;
            if s0 == vm_lock_seq_of(m0) {
                return Err(SnapshotFail::WriteLocked);
            }
        }
        Ok(c0)
    }

    /// True if `s0`, a `vm_lock_seq` read with acquire, is a write epoch that ended before the cached value
    /// was stored: strictly older in 32-bit wrapping order, and the mm less than 2^21 values past the cached
    /// one, so that no epoch the VMA can hold is 2^31 or more ahead of it (module docs, "Wrapping").
    #[inline(always)]
    fn ended_before_seen(&self, s0: u32) -> bool {
        (vm_lock_seq_of(self.seen).wrapping_sub(s0) as i32) > 0 && {
            // Relaxed: read after the acquire load of `s0`, so at least the bucket of the epoch `s0` was
            // stored in (`LocklessEpochs::note_write_begin`).
            let hi = self.mm.lockless_epochs().hi.load(Ordering::Relaxed);
            hi <= (self.seen >> EPOCH_HI_SHIFT) + 1
        }
    }
}

impl Drop for LocklessEpoch<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.seen != self.start {
            // Release: pairs with the acquire load in `LocklessEpoch::load` (see there). A value older than
            // another reader's may overwrite it: every value once read is valid, an older one only makes the
            // next reader re-read sooner.
            self.mm.lockless_epochs().seen.store(self.seen, Ordering::Release);
        }
    }
}

/// A copy of every field of `vma` a reader reports (what [`Vma::snapshot`] copies), reading each RCU cell
/// only when it holds something: an anonymous VMA without pages pays one cell read (its name), not three.
/// A cell found empty by its presence test is a state the cell had, exactly as `snapshot`'s read of it
/// would have found: an anon_vma set concurrently (`__anon_vma_prepare`, under the mmap or VMA read lock)
/// is then seen as not there yet. Consistent under the same conditions as `snapshot` (a lock that excludes
/// writers of the VMA, or the lockless validation around it).
#[inline(always)]
pub(crate) fn vma_copy(vma: &Vma) -> VmaSnapshot {
    if vma.has_anon_vma() {
        // The anon_vma's identity is read through its cell (no accessor short of a reference count).
        return vma.snapshot();
    }
    VmaSnapshot {
        start: vma.start(),
        end: vma.end(),
        flags: vma.flags(),
        pgoff: vma.pgoff(),
        mm_id: vma.mm_id(),
        file: if vma.is_file_backed() { vma.file() } else { None },
        anon_vma_id: None,
        anon_name: vma.anon_name(),
    }
}

/// The fields of a VMA that a PROCMAP_QUERY answer without a name reads (range, flags, file offset, file):
/// a [`VmaSnapshot`] without the RCU cells of the name and the anon_vma, for the query's lean path.
#[derive(Clone, Debug)]
pub(crate) struct VmaCore {
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
}

/// A copy of some of a VMA's fields that a lockless reader validates ([`vma_snapshot_lockless`] copies a
/// [`VmaSnapshot`], the query's lean path a [`VmaCore`]): which fields, and the two the validation checks.
pub(crate) trait VmaCopy: Sized {
    /// Copies the fields (consistent under a lock that excludes the VMA's writers, or inside the lockless
    /// validation).
    fn copy(vma: &Vma) -> Self;
    /// `vm_mm` as copied.
    fn mm_id(&self) -> u64;
    /// `[start, end)` as copied.
    fn range(&self) -> (u64, u64);
}

impl VmaCopy for VmaSnapshot {
    #[inline(always)]
    fn copy(vma: &Vma) -> Self {
        vma_copy(vma)
    }
    #[inline(always)]
    fn mm_id(&self) -> u64 {
        self.mm_id
    }
    #[inline(always)]
    fn range(&self) -> (u64, u64) {
        (self.start, self.end)
    }
}

impl VmaCopy for VmaCore {
    #[inline(always)]
    fn copy(vma: &Vma) -> Self {
        VmaCore {
            start: vma.start(),
            end: vma.end(),
            flags: vma.flags(),
            pgoff: vma.pgoff(),
            mm_id: vma.mm_id(),
            file: if vma.is_file_backed() { vma.file() } else { None },
        }
    }
    #[inline(always)]
    fn mm_id(&self) -> u64 {
        self.mm_id
    }
    #[inline(always)]
    fn range(&self) -> (u64, u64) {
        (self.start, self.end)
    }
}

/// Copies `vma`'s fields without any lock and validates the copy (module docs, "The reader's protocol").
/// The caller found `vma` in `mm`'s tree under RCU, or holds a stale pointer: VMAs are type-stable.
pub fn vma_snapshot_lockless(mm: &MmLocking, vma: &Vma) -> Result<VmaSnapshot, SnapshotFail> {
    copy_lockless(mm, vma)
}

/// [`vma_snapshot_lockless`] for any [`VmaCopy`]: the protocol is the same whatever fields are copied.
#[inline(always)]
pub(crate) fn copy_lockless<C: VmaCopy>(mm: &MmLocking, vma: &Vma) -> Result<C, SnapshotFail> {
    let c0 = copy_begin(mm, vma)?;
    let snap = C::copy(vma);
    let (start, end) = snap.range();
    copy_end(mm.id(), vma, c0, snap.mm_id(), start, end)?;
    Ok(snap)
}

/// The fields of a VMA the speculative fault path reads (`space::fault`, "Speculative faults"): range, flags,
/// file offset, owner, and whether it is file-backed or has an anon_vma, with no RCU cell read (a fault on a
/// file VMA takes the locked path).
#[derive(Clone, Copy, Debug)]
pub(crate) struct VmaFaultCopy {
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
    /// A file is mapped.
    pub file_backed: bool,
    /// The anon_vma is prepared (a single-word change under the mmap read lock: read old or new, and a
    /// prepared anon_vma stays for the VMA's life).
    pub anon_vma: bool,
}

impl VmaCopy for VmaFaultCopy {
    #[inline(always)]
    fn copy(vma: &Vma) -> Self {
        VmaFaultCopy {
            start: vma.start(),
            end: vma.end(),
            flags: vma.flags(),
            pgoff: vma.pgoff(),
            mm_id: vma.mm_id(),
            file_backed: vma.is_file_backed(),
            anon_vma: vma.has_anon_vma(),
        }
    }
    #[inline(always)]
    fn mm_id(&self) -> u64 {
        self.mm_id
    }
    #[inline(always)]
    fn range(&self) -> (u64, u64) {
        (self.start, self.end)
    }
}

/// [`copy_lockless`] that also returns the write count the copy was validated against, for a caller that checks
/// later that the VMA is still the one copied ([`copy_still_valid`]).
#[inline(always)]
pub(crate) fn copy_lockless_seq<C: VmaCopy>(mm: &MmLocking, vma: &Vma) -> Result<(C, u32), SnapshotFail> {
    let c0 = copy_begin(mm, vma)?;
    let snap = C::copy(vma);
    let (start, end) = snap.range();
    copy_end(mm.id(), vma, c0, snap.mm_id(), start, end)?;
    Ok((snap, c0))
}

/// Whether a copy of `vma` validated against write count `c0` ([`copy_lockless_seq`]) still describes it: the
/// count has not moved (no `vma_start_write` since, no pool section) and the VMA is attached (a VMA detached
/// before the copy, after its write epoch ended, keeps its count until it is freed). Loads only; the caller
/// orders them (the speculative fault runs it under the PTE lock, after a sequentially consistent fence).
#[inline]
pub(crate) fn copy_still_valid(vma: &Vma, c0: u32) -> bool {
    // Relaxed: ordered by the caller's lock acquisition and fence (`space::fault`, "Speculative faults").
    let refs = vma.refcnt();
    // 0, or the exclusion flag alone: detached.
    vma.write_seq_cell().load(Ordering::Relaxed) == c0 && refs != 0 && refs != super::lock::VMA_LOCK_OFFSET
}

/// The protocol's first half (module docs): the write count `c0` to hand to [`copy_end`], or why the VMA
/// cannot be copied now. The copy's loads follow it.
#[inline(always)]
fn copy_begin(mm: &MmLocking, vma: &Vma) -> Result<u32, SnapshotFail> {
    // Acquire: pairs with the release bump (`Vma::write_seq_bump`): the section it opened, and all before it,
    // is visible to the loads below.
    let c0 = vma.write_seq_cell().load(Ordering::Acquire);
    if c0 & 1 == 1 {
        // The pool is changing the VMA (freeing it, or handing it out).
        return Err(SnapshotFail::Changed);
    }
    // Acquire: pairs with `vma_start_write`'s release store, so `mm_lock_seq` below is read at that epoch or
    // later.
    let s0 = vma.lock_seq_cell().load(Ordering::Acquire);
    // Acquire (`raw_read`): pairs with the release stores of `mm_lock_seq` (write_begin / write_end): an
    // epoch seen as over has its stores visible.
    let m0 = mm.mm_lock_seq().raw_read();
    if s0 == vm_lock_seq_of(m0) {
        return Err(SnapshotFail::WriteLocked);
    }
    Ok(c0)
}

/// The protocol's second half, after the copy's loads: the write count still `c0`, and the copy's `vm_mm`
/// and range those of a live VMA of `mm`.
#[inline(always)]
fn copy_end(
    mm_id_expected: u64,
    vma: &Vma,
    c0: u32,
    mm_id: u64,
    start: u64,
    end: u64,
) -> Result<(), SnapshotFail> {
    // Acquire fence: the field loads above are ordered before the re-read of the count; pairs with the
    // release fence after every bump.
    fence(Ordering::Acquire);
    // Relaxed: ordered by the fence.
    if vma.write_seq_cell().load(Ordering::Relaxed) != c0 {
        return Err(SnapshotFail::Changed);
    }
    if mm_id != mm_id_expected || start >= end {
        return Err(SnapshotFail::Stale);
    }
    Ok(())
}

/// Backs off before a retry: spins a little, then yields (the writer on another thread needs the CPU).
#[inline]
fn backoff(spins: &mut u32) {
    if *spins < 32 {
        *spins += 1;
        spin_loop();
    } else {
        yield_now();
    }
}

/// The lockless `/proc` walk's step (module docs, "The walk"): a validated copy of the first VMA of `mm`
/// ending after `from`, or `None` if there is none. Takes no lock and holds nothing when it returns; retries
/// (and yields) while a writer's call changes that VMA. `retries` counts the copies and walks thrown away.
/// Starts from the epoch the mm's lockless readers last published and publishes what it re-read (module
/// docs, "The cached epoch").
pub fn next_vma_lockless(
    mm: &MmLocking,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    retries: &mut u64,
) -> Option<VmaSnapshot> {
    next_copy_lockless(&mut LocklessEpoch::load(mm), tree, from, retries)
}

/// [`next_vma_lockless`] for any [`VmaCopy`], with the caller's cached epoch.
#[inline]
pub(crate) fn next_copy_lockless<C: VmaCopy>(
    ep: &mut LocklessEpoch<'_>,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    retries: &mut u64,
) -> Option<C> {
    let mut spins = 0;
    loop {
        let guard = vmspace_rcu::pin();
        let (first, last, vma) = tree.find_next_in(from, &guard)?;
        if let Ok(s) = ep.copy::<C>(vma)
            && let (start, end) = s.range()
            && end > from
            && first == start
            && last.wrapping_add(1) == end
        {
            if start <= from {
                return Some(s);
            }
            // A gap [from, start): nothing may have moved into it while we copied.
            match tree.find_next_in(from, &guard) {
                Some((f, l, v)) if std::ptr::eq(v, vma) && f == first && l == last => return Some(s),
                _ => {}
            }
        }
        drop(guard);
        *retries += 1;
        backoff(&mut spins);
    }
}

/// [`next_copy_lockless`] lending the accepted copy to `f` instead of returning it: the copy stays where it
/// was made (moving a copy through `Result`s and `Option`s costs more than making it). The same checks, from
/// the mm's published epoch (module docs, "The cached epoch": a PROCMAP_QUERY scanner's queries, one VMA
/// each, read `mm_lock_seq` only for VMAs locked since); also prefetches the VMA in the slot after the one
/// found (a walk's next step).
#[inline(always)]
pub(crate) fn next_copy_lockless_with<C: VmaCopy, R>(
    mm: &MmLocking,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    retries: &mut u64,
    f: impl FnOnce(&C) -> R,
) -> Option<R> {
    let mut ep = LocklessEpoch::load(mm);
    let mut spins = 0;
    loop {
        let guard = vmspace_rcu::pin();
        let (found, next) = tree.find_next_hinted(from, &guard);
        let (first, last, vma) = found?;
        // A walk's next step is likely the next VMA: start loading it.
        prefetch_vma(next);
        if let Ok(c0) = ep.begin(vma) {
            let s = C::copy(vma);
            let (start, end) = s.range();
            if copy_end(ep.id, vma, c0, s.mm_id(), start, end).is_ok()
                && end > from
                && first == start
                && last.wrapping_add(1) == end
            {
                if start <= from {
                    return Some(f(&s));
                }
                // A gap [from, start): nothing may have moved into it while we copied.
                match tree.find_next_in(from, &guard) {
                    Some((f1, l1, v)) if std::ptr::eq(v, vma) && f1 == first && l1 == last => {
                        return Some(f(&s));
                    }
                    _ => {}
                }
            }
        }
        drop(guard);
        *retries += 1;
        backoff(&mut spins);
    }
}

/// The lockless walk over a run of VMAs (one chunk of a `/proc` read): hands `step` a validated copy of each
/// VMA from the first one ending after `from`, as repeated [`next_vma_lockless`] calls would, until `step`
/// returns `false` or the VMAs end. Returns where the walk stopped (the end of the last VMA `step` accepted,
/// or `from`) and whether it reached the end.
///
/// The fast path keeps one RCU read-side section and one tree cursor (the kernel's `vma_iterator`) across
/// consecutive VMAs instead of a descent from the root per VMA: each entry the cursor steps to is checked
/// exactly as [`next_vma_lockless`] checks the entry it finds (the tree's range equals the copy's; a copy
/// starting after the position re-finds it from the position). The cursor's own guarantee (forward
/// iteration never goes backwards and never skips a range that existed throughout: `Cursor` docs) makes its
/// next entry the one `find_in(position)` would return at that moment. A copy refused on the fast path
/// (a writer is changing that VMA) ends the RCU section and takes one [`next_vma_lockless`] step, which waits
/// for the writer outside any read-side section; the fast path then resumes after it. `step` runs inside
/// the fast path's read-side section, which no writer waits for; it borrows the copy, which is made once
/// per VMA and never moved. While `step` works on a VMA, the next one's first two cache lines are prefetched
/// (`prefetch_vma`). One cached epoch serves the whole walk (module docs, "The cached epoch"): it starts from
/// the mm's published value, so a walk reads `mm_lock_seq` only for VMAs locked since, and publishes what it
/// re-read when it returns.
#[inline(always)]
pub fn walk_vmas_lockless(
    mm: &MmLocking,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    retries: &mut u64,
    mut step: impl FnMut(&VmaSnapshot) -> bool,
) -> (u64, bool) {
    let mut ep = LocklessEpoch::load(mm);
    // `walk_chunk`'s shape, written out: the copy stays one local, validated in place and lent to `step`
    // (moving the 80-byte copy through `Result`s and `Option`s costs more than the copy).
    let mut pos = from;
    loop {
        {
            let guard = vmspace_rcu::pin();
            let mut cur = tree.cursor(&guard);
            cur.set(pos);
            loop {
                let Some((first, last, vma)) = cur.find(u64::MAX) else { return (pos, true) };
                prefetch_vma(cur.next_slot_hint());
                let Ok(c0) = ep.begin(vma) else { break };
                let s = vma_copy(vma);
                if copy_end(ep.id, vma, c0, s.mm_id, s.start, s.end).is_err() {
                    break;
                }
                let consistent = s.end > pos && first == s.start && last.wrapping_add(1) == s.end;
                let no_gap_change = s.start <= pos
                    || matches!(tree.find_next_in(pos, &guard),
                        Some((f, l, v)) if std::ptr::eq(v, vma) && f == first && l == last);
                if !(consistent && no_gap_change) {
                    break;
                }
                if !step(&s) {
                    return (pos, false);
                }
                pos = s.end;
            }
        }
        // Refused on the fast path: one step that retries (and yields) until the writer is done.
        *retries += 1;
        let Some(s) = next_copy_lockless::<VmaSnapshot>(&mut ep, tree, pos, retries) else {
            return (pos, true);
        };
        if !step(&s) {
            return (pos, false);
        }
        pos = s.end;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::vma::lock::{vma_mark_attached, vma_mark_detached, vma_start_write};
    use crate::vma::pool::VmaPool;

    fn map(pool: &VmaPool, mm: &MmLocking, tree: &MapleTree<&'static Vma>, s: u64, e: u64) -> &'static Vma {
        let v = pool.alloc(mm).unwrap();
        let _w = mm.write_lock();
        vma_start_write(mm, v);
        v.set_range(mm, s, e);
        vma_mark_attached(mm, v);
        tree.insert_range(s, e - 1, v).unwrap();
        v
    }

    #[test]
    fn copies_refuses_write_locked_and_detects_changes() {
        let (pool, mm, tree) = (VmaPool::leak_new(), MmLocking::new(), MapleTree::new());
        let v = map(pool, &mm, &tree, 0x10000, 0x12000);
        let s = vma_snapshot_lockless(&mm, v).unwrap();
        assert_eq!((s.start, s.end), (0x10000, 0x12000));
        let c = v.write_seq();
        {
            let _w = mm.write_lock();
            // Not yet locked in this epoch: readable (the writer has not announced a change).
            assert!(vma_snapshot_lockless(&mm, v).is_ok());
            vma_start_write(&mm, v);
            assert_eq!(v.write_seq(), c.wrapping_add(2));
            assert_eq!(vma_snapshot_lockless(&mm, v), Err(SnapshotFail::WriteLocked));
            // The reader never holds a reference: the writer's lock did not wait, the count is untouched.
            assert_eq!(v.refcnt(), 1);
            v.set_end(&mm, 0x11000);
        }
        let s = vma_snapshot_lockless(&mm, v).unwrap();
        assert_eq!((s.start, s.end), (0x10000, 0x11000));
        // Another mm's reader (a stale pointer) is refused.
        assert_eq!(vma_snapshot_lockless(&MmLocking::new(), v), Err(SnapshotFail::Stale));
    }

    #[test]
    fn freed_and_reused_vma_is_refused() {
        let (pool, mm, tree) = (VmaPool::leak_new(), MmLocking::new(), MapleTree::new());
        let v = map(pool, &mm, &tree, 0x10000, 0x12000);
        let c = v.write_seq();
        {
            let _w = mm.write_lock();
            vma_start_write(&mm, v);
            tree.erase(0x10000);
            vma_mark_detached(&mm, v);
        }
        pool.free(v);
        assert_eq!(vma_snapshot_lockless(&mm, v), Err(SnapshotFail::Stale));
        let other = MmLocking::new();
        let again = pool.alloc(&other).unwrap();
        assert!(std::ptr::eq(again, v));
        // Locked once (+2), freed (two sections: fields cleared, vm_mm reset), handed out again (one).
        assert_eq!(v.write_seq(), c.wrapping_add(2 + 2 * 3));
        assert_eq!(vma_snapshot_lockless(&mm, v), Err(SnapshotFail::Stale));
    }

    #[test]
    fn cached_epoch_rereads_only_for_vmas_locked_since() {
        let (pool, mm, tree) = (VmaPool::leak_new(), MmLocking::new(), MapleTree::new());
        let a = map(pool, &mm, &tree, 0x10000, 0x12000);
        let b = map(pool, &mm, &tree, 0x20000, 0x22000);
        let mut ep = LocklessEpoch::new(&mm);
        let seen = ep.seen();
        assert_eq!(seen, mm.lock_seq());
        // Both were last locked in epochs that ended before `seen`: copied without a re-read.
        assert!(ep.snapshot(a).is_ok() && ep.snapshot(b).is_ok());
        assert_eq!(ep.seen(), seen);
        {
            let _w = mm.write_lock();
            // A lock taken after the cache was read: `b`'s epoch is not older, the copy re-reads and refuses.
            vma_start_write(&mm, b);
            assert_eq!(ep.snapshot(b), Err(SnapshotFail::WriteLocked));
            assert_eq!(ep.seen(), mm.lock_seq());
            // `a` is older than the value re-read: copied without another re-read.
            assert!(ep.snapshot(a).is_ok());
            b.set_flags(&mm, VmFlags::READ);
        }
        // `b`'s epoch is the cached (odd) value: not older, so re-read; the epoch is over, the copy is the new
        // state.
        let s = ep.snapshot(b).unwrap();
        assert_eq!((s.start, s.end, s.flags), (0x20000, 0x22000, VmFlags::READ));
        assert_eq!(ep.seen(), mm.lock_seq());
        drop(ep);
        // Published for the next walk or query.
        assert_eq!(LocklessEpoch::load(&mm).seen(), mm.lock_seq());
        // A walk from the published value reads each VMA's current state.
        let mut retries = 0;
        let mut seen_ranges = Vec::new();
        walk_vmas_lockless(&mm, &tree, 0, &mut retries, |v| {
            seen_ranges.push((v.start, v.end));
            true
        });
        assert_eq!(seen_ranges, [(0x10000, 0x12000), (0x20000, 0x22000)]);
        assert_eq!(retries, 0);
    }

    /// The epoch's high bits: a cache more than one bucket (2^20 values) behind the mm is never trusted to
    /// skip the re-read, even for a VMA whose epoch looks older in 32 bits (module docs, "Wrapping").
    #[test]
    fn cached_epoch_too_far_behind_is_not_trusted() {
        let (pool, mm, tree) = (VmaPool::leak_new(), MmLocking::new(), MapleTree::new());
        let a = map(pool, &mm, &tree, 0x10000, 0x12000);
        let mut ep = LocklessEpoch::new(&mm);
        let seen = ep.seen();
        // One bucket on: still trusted (no re-read).
        while mm.lock_seq() < ((seen >> EPOCH_HI_SHIFT) + 1) << EPOCH_HI_SHIFT {
            drop(mm.write_lock());
        }
        assert!(ep.snapshot(a).is_ok());
        assert_eq!(ep.seen(), seen);
        // Two buckets on: re-read.
        while mm.lock_seq() < ((seen >> EPOCH_HI_SHIFT) + 2) << EPOCH_HI_SHIFT {
            drop(mm.write_lock());
        }
        drop(mm.write_lock());
        assert!(ep.snapshot(a).is_ok());
        assert_eq!(ep.seen(), mm.lock_seq());
    }

    #[test]
    fn walk_finds_each_vma_and_none_after_the_last() {
        let (pool, mm, tree) = (VmaPool::leak_new(), MmLocking::new(), MapleTree::new());
        map(pool, &mm, &tree, 0x10000, 0x12000);
        map(pool, &mm, &tree, 0x20000, 0x21000);
        let mut retries = 0;
        let mut from = 0;
        let mut seen = Vec::new();
        while let Some(s) = next_vma_lockless(&mm, &tree, from, &mut retries) {
            seen.push((s.start, s.end));
            from = s.end;
        }
        assert_eq!(seen, [(0x10000, 0x12000), (0x20000, 0x21000)]);
        assert_eq!(retries, 0);
    }
}
