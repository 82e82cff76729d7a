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
//!   that ended before it.
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
use vmspace_rcu::sync::{Ordering, fence, spin_loop, yield_now};

use std::sync::Arc;

use super::VmFlags;
use super::attrs::VmFile;
use super::lookup::prefetch_vma;
use super::mmap_lock::MmLocking;
use super::object::{Vma, VmaSnapshot};

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
    copy_end(mm, vma, c0, snap.mm_id(), start, end)?;
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
    copy_end(mm, vma, c0, snap.mm_id(), start, end)?;
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
    if s0 == super::object::vm_lock_seq_of(m0) {
        return Err(SnapshotFail::WriteLocked);
    }
    Ok(c0)
}

/// The protocol's second half, after the copy's loads: the write count still `c0`, and the copy's `vm_mm`
/// and range those of a live VMA of `mm`.
#[inline(always)]
fn copy_end(
    mm: &MmLocking,
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
    if mm_id != mm.id() || start >= end {
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
pub fn next_vma_lockless(
    mm: &MmLocking,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    retries: &mut u64,
) -> Option<VmaSnapshot> {
    next_copy_lockless(mm, tree, from, retries)
}

/// [`next_vma_lockless`] for any [`VmaCopy`].
#[inline]
pub(crate) fn next_copy_lockless<C: VmaCopy>(
    mm: &MmLocking,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    retries: &mut u64,
) -> Option<C> {
    let mut spins = 0;
    loop {
        let guard = vmspace_rcu::pin();
        let (first, last, vma) = tree.find_next_in(from, &guard)?;
        if let Ok(s) = copy_lockless::<C>(mm, vma)
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
/// was made (moving a copy through `Result`s and `Option`s costs more than making it). The same checks;
/// also prefetches the VMA in the slot after the one found (a walk's next step).
#[inline(always)]
pub(crate) fn next_copy_lockless_with<C: VmaCopy, R>(
    mm: &MmLocking,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    retries: &mut u64,
    f: impl FnOnce(&C) -> R,
) -> Option<R> {
    let mut spins = 0;
    loop {
        let guard = vmspace_rcu::pin();
        let (found, next) = tree.find_next_hinted(from, &guard);
        let (first, last, vma) = found?;
        // A walk's next step is likely the next VMA: start loading it.
        prefetch_vma(next);
        if let Ok(c0) = copy_begin(mm, vma) {
            let s = C::copy(vma);
            let (start, end) = s.range();
            if copy_end(mm, vma, c0, s.mm_id(), start, end).is_ok()
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
/// (`prefetch_vma`).
#[inline(always)]
pub fn walk_vmas_lockless(
    mm: &MmLocking,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    retries: &mut u64,
    mut step: impl FnMut(&VmaSnapshot) -> bool,
) -> (u64, bool) {
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
                let Ok(c0) = copy_begin(mm, vma) else { break };
                let s = vma_copy(vma);
                if copy_end(mm, vma, c0, s.mm_id, s.start, s.end).is_err() {
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
        let Some(s) = next_vma_lockless(mm, tree, pos, retries) else { return (pos, true) };
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
