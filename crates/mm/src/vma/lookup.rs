//! `lock_vma_under_rcu`: find the VMA that covers an address and read-lock it without mmap_lock (the page-fault
//! fast path, the 6.17+/6.18 form).
//!
//! ```text
//! loop {
//!     pin an RCU guard; walk the tree at addr
//!     no VMA                       -> abort, None        (the caller falls back to mmap_lock)
//!     vma_start_read(mm, vma):
//!         Detached (-EAGAIN)       -> miss, walk again   (the VMA was replaced or removed under us)
//!         any other failure        -> abort, None
//!     leave the RCU section
//!     addr outside [start, end)    -> unlock, abort, None (recycled within this mm at another range)
//!     success                      -> the VMA, read-locked
//! }
//! ```
//!
//! The retry on `Detached` terminates because writers update the tree *before* they detach a VMA: a walk that
//! starts after the detach finds the replacement (or nothing).
//!
//! The tree is abstracted by [`VmaLookup`] so that the lock protocol does not depend on one tree type; the
//! maple tree of VMAs implements it (the `mas_walk` and `mas_find` of the kernel).
//!
//! [`lock_next_vma`] is the reader side of `/proc/PID/maps` in per-VMA mode (`mm/mmap_lock.c`, 6.17+): the
//! next VMA at or after an address, read-locked, validated against false gaps, falling back to the mmap read
//! lock when in doubt.

use vmspace_maple::MapleTree;
use vmspace_rcu::Guard;

use super::lock::{VmaReadGuard, vma_start_read, vma_start_read_locked};
use super::mmap_lock::MmLocking;
use super::object::Vma;
use vmspace_abi::Errno;

/// A structure that maps an address to the VMA whose range contains it, readable under an RCU guard.
pub trait VmaLookup {
    /// The VMA stored for the range containing `addr`, if any. Called under `guard`; the result may be stale
    /// (detached, recycled) by the time it is used, which the caller detects.
    fn vma_at(&self, addr: u64, guard: &Guard) -> Option<&'static Vma>;
}

impl<T: VmaLookup + ?Sized> VmaLookup for &T {
    #[inline]
    fn vma_at(&self, addr: u64, guard: &Guard) -> Option<&'static Vma> {
        (**self).vma_at(addr, guard)
    }
}

/// A structure that can also find the next VMA at or after an address (what [`lock_next_vma`] walks).
pub trait VmaFind: VmaLookup {
    /// The first VMA whose stored range ends after `from` (the one containing `from`, or the next one), if any
    /// (`vma_iter_set(from)` + `vma_next`). Same staleness caveat as [`VmaLookup::vma_at`].
    fn vma_find(&self, from: u64, guard: &Guard) -> Option<&'static Vma>;
}

impl<T: VmaFind + ?Sized> VmaFind for &T {
    #[inline]
    fn vma_find(&self, from: u64, guard: &Guard) -> Option<&'static Vma> {
        (**self).vma_find(from, guard)
    }
}

/// The VMA tree: `mas_walk` is a point lookup of the range containing `addr`.
impl VmaLookup for MapleTree<&'static Vma> {
    #[inline]
    fn vma_at(&self, addr: u64, guard: &Guard) -> Option<&'static Vma> {
        self.load_in(addr, guard)
    }
}

/// The VMA tree: `mas_find` from `from` to the end of the address space.
impl VmaFind for MapleTree<&'static Vma> {
    #[inline]
    fn vma_find(&self, from: u64, guard: &Guard) -> Option<&'static Vma> {
        let (found, next) = self.find_next_hinted(from, guard);
        // A walk's next lookup is likely the next VMA: start loading it.
        prefetch_vma(next);
        found.map(|(_, _, v)| v)
    }
}

/// Finds and read-locks the VMA of `mm` covering `addr` without mmap_lock. `None` means "fall back to
/// mmap_lock" (no VMA, or it could not be locked). Counts success, abort and miss in `mm.stats()`.
pub fn lock_vma_under_rcu<T: VmaLookup + ?Sized>(
    mm: &MmLocking,
    tree: &T,
    addr: u64,
) -> Option<VmaReadGuard<'static>> {
    let (g, ev) = lock_vma_under_rcu_events(mm, tree, addr);
    for _ in 0..ev.misses {
        mm.stats().record_miss();
    }
    match g {
        Some(g) => {
            mm.stats().record_success();
            Some(g)
        }
        None => {
            mm.stats().record_abort();
            None
        }
    }
}

/// What one [`lock_vma_under_rcu_events`] call met besides its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockEvents {
    /// Walks restarted because the VMA found was detached (`VMA_LOCK_MISS`).
    pub misses: u32,
}

/// [`lock_vma_under_rcu`] without counting: the result and the events, for a caller that counts them its own
/// way (the fault path counts `/proc/vmstat`'s events, module docs of `space::fault`). A `None` is the
/// kernel's `VMA_LOCK_ABORT`.
pub fn lock_vma_under_rcu_events<T: VmaLookup + ?Sized>(
    mm: &MmLocking,
    tree: &T,
    addr: u64,
) -> (Option<VmaReadGuard<'static>>, LockEvents) {
    let mut ev = LockEvents::default();
    loop {
        let guard = vmspace_rcu::pin();
        let Some(vma) = tree.vma_at(addr, &guard) else {
            return (None, ev);
        };
        match vma_start_read(mm, vma) {
            Ok(locked) => {
                drop(guard);
                // The VMA may have been recycled within this mm at another range between the walk and the lock.
                if !locked.contains(addr) {
                    return (None, ev);
                }
                return (Some(locked), ev);
            }
            Err(fail) if fail.is_detached() => {
                drop(guard);
                ev.misses += 1;
            }
            Err(_) => return (None, ev),
        }
    }
}

/// `lock_next_vma` (6.17+): the first VMA of `mm` that ends after `from`, read-locked, or `None` if there is
/// none. Never reports a false gap: a VMA that lies after `from` is returned only if no VMA of the tree could
/// be hiding in `[from, vma.start)`.
///
/// 1. Note whether a writer is active (`mmap_lock_speculate_try_begin`).
/// 2. Under RCU, find the next VMA and `vma_start_read` it; `Detached` → start again; any other failure →
///    slow path.
/// 3. Validate: `from >= end` (it moved or shrank behind us) → unlock, slow path. `from < start` (a gap before
///    it): if a writer was active at step 1 or `mm_lock_seq` moved since, walk again from `from` and require
///    the same VMA to come first; otherwise unlock, slow path.
/// 4. Slow path: under the mmap read lock, find the next VMA and `vma_start_read_locked` it (`EAGAIN` if the
///    reader limit is reached).
///
/// The caller continues from the returned VMA's `end()` (the seq_file position).
///
/// # Panics
///
/// If `tree` is not `mm`'s (the slow path finds a VMA of another mm under `mm`'s read lock).
pub fn lock_next_vma<T: VmaFind + ?Sized>(
    mm: &MmLocking,
    tree: &T,
    from: u64,
) -> Result<Option<VmaReadGuard<'static>>, Errno> {
    loop {
        let spec = mm.speculate_try_begin();
        let guard = vmspace_rcu::pin();
        let Some(vma) = tree.vma_find(from, &guard) else {
            return Ok(None);
        };
        let locked = match vma_start_read(mm, vma) {
            Ok(l) => l,
            Err(f) if f.is_detached() => continue,
            Err(_) => break,
        };
        if from >= locked.end() {
            break;
        }
        if from < locked.start() {
            let unchanged = spec.is_some_and(|s| !mm.speculate_retry(s));
            if !unchanged {
                // A writer may have moved VMAs: the VMA found must still be the first one after `from`.
                let first = tree.vma_find(from, &guard);
                if !first.is_some_and(|f| std::ptr::eq(f, vma)) {
                    break;
                }
            }
        }
        return Ok(Some(locked));
    }
    // Slow path: the mmap read lock excludes writers, so the tree and the VMAs are stable.
    let _r = mm.read_lock();
    let guard = vmspace_rcu::pin();
    match tree.vma_find(from, &guard) {
        None => Ok(None),
        Some(vma) => {
            // `vma_start_read_locked` trusts the mmap read lock to keep writers out, which holds only for
            // `mm`'s own VMAs: a tree of another mm would hand out a read lock on a VMA its writer may hold
            // write-locked. So `vm_mm` is compared before the VMA is locked (the RCU guard keeps the VMA
            // readable): under `mm`'s read hold no VMA can be attached to `mm` or leave it, so an equal
            // `vm_mm` proves the VMA is `mm`'s and stays so. (Checking after the lock attempt would let another
            // mm's writer, holding the VMA write-locked, turn the misuse into a quiet `EAGAIN`.) One compare, on
            // the slow path only.
            assert_eq!(vma.mm_id(), mm.id(), "lock_next_vma: the tree holds a VMA of another mm");
            let locked = vma_start_read_locked(vma).map_err(|_| Errno::EAGAIN)?;
            Ok(Some(locked))
        }
    }
}

/// [`lock_next_vma`] over a run of VMAs (one chunk of a `/proc` read, `m_start` to `m_stop`): hands `step`
/// each VMA from the first one ending after `from`, read-locked, until `step` returns `false` (the guard it
/// was given is dropped, unlocking the VMA) or the VMAs end. Returns `Ok((stop, end_reached))`, `stop` being
/// the end of the last VMA `step` accepted (or `from`); `Err(at)` when [`lock_next_vma`] could not lock the VMA
/// at `at` even under the mmap read lock (its reader limit): the caller takes that one step another way.
///
/// As in 6.18 (`fs/proc/task_mmu.c: lock_vma_range` holds an RCU read-side section from `m_start` to
/// `m_stop`, and `mm/mmap_lock.c: lock_next_vma` steps `priv->iter`), one RCU section and one tree cursor (the
/// `vma_iterator`) serve consecutive VMAs: each is `vma_start_read` and checked exactly as [`lock_next_vma`]
/// checks (not behind the position; a VMA after a gap re-found from the position when a writer may have
/// moved things since the speculation began). A VMA that fails the fast path ends the RCU section and takes
/// one [`lock_next_vma`] step (its retries and its mmap-lock fallback); the fast path then resumes.
pub fn walk_vmas_locked(
    mm: &MmLocking,
    tree: &MapleTree<&'static Vma>,
    from: u64,
    step: impl FnMut(VmaReadGuard<'static>) -> bool,
) -> Result<(u64, bool), u64> {
    walk_chunk(
        tree,
        from,
        || mm.speculate_try_begin(),
        |spec, pos, (_, _, vma), guard| {
            let locked = vma_start_read(mm, vma).ok()?;
            if pos >= locked.end() {
                return None;
            }
            if pos < locked.start()
                && spec.is_none_or(|s| mm.speculate_retry(s))
                && !tree.vma_find(pos, guard).is_some_and(|f| std::ptr::eq(f, vma))
            {
                return None;
            }
            let end = locked.end();
            Some((locked, end))
        },
        |pos| match lock_next_vma(mm, tree, pos) {
            Ok(found) => Ok(found.map(|l| {
                let end = l.end();
                (l, end)
            })),
            Err(_) => Err(pos),
        },
        step,
    )
}

/// Starts loading the first two cache lines of the VMA at `addr` (a [`vmspace_maple::Cursor::next_slot_hint`],
/// which may be 0, stale or not a VMA at all) while the walk works on the current one: a chunk's VMAs lie
/// scattered in the pool, and each is otherwise a cache miss at the moment its copy starts. A prefetch
/// only hints the cache (it never faults and reads nothing the program sees).
#[inline(always)]
pub(crate) fn prefetch_vma(addr: usize) {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    if addr != 0 {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = std::ptr::without_provenance::<i8>(addr);
        // SAFETY: `sse` is part of the x86-64 baseline, so the instruction exists on every target this
        // builds for; a prefetch of any address, mapped or not, neither faults nor reads memory the
        // program observes.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    let _ = addr;
}

/// The shape of the `/proc` chunk walks ([`walk_vmas_locked`]; [`crate::walk_vmas_lockless`] writes the
/// same loop out, to keep its copy in one place): from
/// `from`, one RCU read-side section and one tree cursor step from entry to entry; `begin` runs before each
/// step's lookup (e.g. a speculation on `mm_lock_seq`) and `fast` turns its state, the position and the entry
/// found into an item and the item's end, or refuses the entry (`None`). A refusal ends the read-side section
/// and takes one `slow` step from the position (which may wait for a writer, or fail with `E`), after which the
/// fast path resumes. The cursor goes on from the end of each item, not from the end of the range it found
/// (which differ when a VMA changed between the lookup and its lock). Each item goes to `step` until it
/// returns `false` or the VMAs end; returns where the walk
/// stopped (the end of the last item `step` accepted, or `from`) and whether it reached the end.
pub(crate) fn walk_chunk<S, T, E>(
    tree: &MapleTree<&'static Vma>,
    from: u64,
    mut begin: impl FnMut() -> S,
    mut fast: impl FnMut(S, u64, (u64, u64, &'static Vma), &Guard) -> Option<(T, u64)>,
    mut slow: impl FnMut(u64) -> Result<Option<(T, u64)>, E>,
    mut step: impl FnMut(T) -> bool,
) -> Result<(u64, bool), E> {
    let mut pos = from;
    loop {
        {
            let guard = vmspace_rcu::pin();
            let mut cur = tree.cursor(&guard);
            cur.set(pos);
            loop {
                let state = begin();
                let Some(entry) = cur.find(u64::MAX) else { return Ok((pos, true)) };
                prefetch_vma(cur.next_slot_hint());
                let Some((item, end)) = fast(state, pos, entry, &guard) else { break };
                if cur.last().wrapping_add(1) != end {
                    // The item's range is not the one the cursor found (its VMA shrank or grew after the
                    // cursor read the tree): the cursor would go on from its own end and skip, or repeat,
                    // what lies between. The next step looks up from the item's end instead, as
                    // `lock_next_vma(end)` would.
                    cur.set(end);
                }
                if !step(item) {
                    return Ok((pos, false));
                }
                pos = end;
            }
        }
        let Some((item, end)) = slow(pos)? else { return Ok((pos, true)) };
        if !step(item) {
            return Ok((pos, false));
        }
        pos = end;
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
        v.set_range(mm, s, e);
        vma_start_write(mm, v);
        vma_mark_attached(mm, v);
        tree.insert_range(s, e - 1, v).unwrap();
        v
    }

    #[test]
    fn lock_vma_under_rcu_hits_misses_and_counts() {
        let (pool, mm, tree) = (VmaPool::leak_new(), MmLocking::new(), MapleTree::new());
        let v = map(pool, &mm, &tree, 0x10000, 0x12000);
        let g = lock_vma_under_rcu(&mm, &tree, 0x11fff).expect("covered");
        assert!(std::ptr::eq(g.vma(), v));
        assert_eq!(v.refcnt(), 2);
        drop(g);
        assert!(lock_vma_under_rcu(&mm, &tree, 0x12000).is_none());
        // Write-locked: abort (fall back).
        {
            let _w = mm.write_lock();
            vma_start_write(&mm, v);
            assert!(lock_vma_under_rcu(&mm, &tree, 0x10000).is_none());
        }
        let c = mm.stats().snapshot();
        assert_eq!((c.success, c.abort, c.miss), (1, 2, 0));
    }

    #[test]
    fn lock_vma_under_rcu_rejects_recycled_range() {
        // A stale tree (one that still maps the old range) returning a VMA recycled in the same mm at another
        // range: the address re-check refuses it.
        struct Stale(&'static Vma);
        impl VmaLookup for Stale {
            fn vma_at(&self, _: u64, _: &Guard) -> Option<&'static Vma> {
                Some(self.0)
            }
        }
        impl VmaFind for Stale {
            fn vma_find(&self, _: u64, _: &Guard) -> Option<&'static Vma> {
                Some(self.0)
            }
        }
        let (pool, mm, tree) = (VmaPool::leak_new(), MmLocking::new(), MapleTree::new());
        let v = map(pool, &mm, &tree, 0x10000, 0x12000);
        {
            let _w = mm.write_lock();
            vma_start_write(&mm, v);
            tree.erase(0x10000);
            vma_mark_detached(&mm, v);
        }
        pool.free(v);
        let again = map(pool, &mm, &tree, 0x40000, 0x41000);
        assert!(std::ptr::eq(again, v));
        assert!(lock_vma_under_rcu(&mm, &Stale(v), 0x10000).is_none());
        assert_eq!(v.refcnt(), 1, "the reference taken for the check was given back");
        assert!(lock_vma_under_rcu(&mm, &Stale(v), 0x40000).is_some());
    }

    #[test]
    fn lock_next_vma_walks_in_order_and_falls_back() {
        let (pool, mm, tree) = (VmaPool::leak_new(), MmLocking::new(), MapleTree::new());
        let a = map(pool, &mm, &tree, 0x10000, 0x12000);
        let b = map(pool, &mm, &tree, 0x20000, 0x21000);
        let mut seen = Vec::new();
        let mut from = 0;
        while let Some(g) = lock_next_vma(&mm, &tree, from).unwrap() {
            seen.push(g.vma() as *const Vma);
            from = g.end();
        }
        assert_eq!(seen, [a as *const Vma, b as *const Vma]);
        // From inside a VMA: that VMA.
        assert!(std::ptr::eq(lock_next_vma(&mm, &tree, 0x11000).unwrap().unwrap().vma(), a));
        // A write-locked VMA sends the reader to the mmap read lock, which waits for the writer.
        let w = mm.write_lock();
        vma_start_write(&mm, b);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                lock_next_vma(&mm, &tree, 0x12000).unwrap().map(|g| g.vma() as *const Vma as usize)
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(w);
            assert_eq!(h.join().unwrap(), Some(b as *const Vma as usize));
        });
        assert_eq!(b.refcnt(), 1);
    }
}
