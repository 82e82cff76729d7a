//! The type-stable VMA pool: VMAs are reused at once, without waiting for an RCU grace period (the kernel's
//! `SLAB_TYPESAFE_BY_RCU` `vm_area_cachep`, the per-VMA lock series).
//!
//! # Why the memory is type-stable
//!
//! Every VMA the pool creates is leaked: its memory is never returned to the allocator while the process lives, so every `&'static Vma` ever handed out stays a valid `Vma` forever. A freed VMA goes onto
//! the free list and the next [`VmaPool::alloc`] may hand it out again, to any mm, while RCU readers that found
//! it earlier still hold the pointer. Those readers only ever load atomics (and [`RcuArc`](super::RcuArc) cells, whose payloads
//! *are* reclaimed after a grace period), so what they read is always defined; the lock protocol tells them
//! whether it is still the VMA they looked up:
//!
//! - a free VMA has `vm_refcnt` 0, which no reader can raise, so `vma_start_read` fails with `Detached`;
//! - once reused and attached elsewhere, `vm_mm` differs (`OtherMm`); reused in the same mm, the caller's range
//!   re-check fails, or `vm_lock_seq` still shows the write epoch that set it up.
//!
//! This is also why freeing needs no grace period: nothing about a VMA's memory becomes invalid.
//!
//! # A slab of VMAs
//!
//! VMAs are created [`VMA_CHUNK`] at a time (or as many as a bulk allocation lacks), as one leaked array: they
//! sit `size_of::<Vma>()` (128) bytes apart with no allocator header or alignment padding between them, as
//! objects of the kernel's `vm_area_cachep` slab do, so that the bytes per VMA the benchmarks report are the
//! bytes each VMA occupies. (One `Box` per VMA took 192 bytes of heap for a 128-byte, 64-aligned object.) A
//! fork's child VMAs, created together, are also neighbours in memory.
//!
//! # What allocation and freeing touch
//!
//! The free list is a vector of pointers beside the VMAs, not a link stored inside them, so neither operation
//! overwrites a free VMA's `vm_refcnt`, `vm_mm` or `vm_lock_seq` with allocator metadata (as
//! `SLAB_TYPESAFE_BY_RCU` caches must not). [`VmaPool::free`] requires the VMA detached (`vm_refcnt` 0), clears its fields and attributes
//! (attributes are released after a grace period) and sets `vm_mm` to 0; it does not touch `vm_refcnt`.
//! [`VmaPool::alloc`] sets `vm_mm` to the new owner and `vm_lock_seq` to [`VM_LOCK_SEQ_NONE`]; `vm_refcnt` stays
//! 0 until `vma_mark_attached` publishes the VMA with a release store. Fork's batch hands each child VMA out
//! already filled (`VmaBatch::next_fork_copy`): `vm_mm`, the child's write epoch in `vm_lock_seq` and the copied
//! fields, in one write section of the lockless readers' count.
//!
//! # Failure injection and statistics
//!
//! [`VmaPool::fail_nth`] makes the n-th next allocation fail with `ENOMEM` (for "a failed call changes nothing"
//! tests); [`VmaPool::stats`] counts created, free and in-use VMAs (leak tests). Tests that inject failures or
//! check exact counts use their own pool ([`VmaPool::leak_new`]) so that tests running in parallel do not
//! disturb each other.

use std::fmt;

use vmspace_rcu::sync::{AtomicU64, Ordering};

use super::mmap_lock::MmLocking;
use super::object::{VM_LOCK_SEQ_NONE, Vma};
use vmspace_abi::Errno;

type Lock<T> = vmspace_rcu::sync::Mutex<T>;

/// VMAs created at a time when the free list runs dry (8 KiB; see the module docs).
pub const VMA_CHUNK: usize = 64;

fn lock<T>(l: &Lock<T>) -> vmspace_rcu::sync::MutexGuard<'_, T> {
    l.lock()
}

/// Counts of a pool's VMAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// VMAs ever created (memory taken from the system; never returned).
    pub created: u64,
    /// VMAs on the free list.
    pub free: u64,
    /// VMAs handed out and not freed (`created - free`).
    pub in_use: u64,
    /// Successful allocations.
    pub allocs: u64,
    /// Frees.
    pub frees: u64,
    /// Allocations refused by failure injection.
    pub injected_failures: u64,
}

/// A pool of type-stable VMAs (see the module docs).
pub struct VmaPool {
    free: Lock<Vec<&'static Vma>>,
    created: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    injected_failures: AtomicU64,
    /// 0: no injection. n > 0: the n-th allocation from now fails (then injection stops).
    fail_countdown: AtomicU64,
}

#[cfg(not(loom))]
static GLOBAL: VmaPool = VmaPool::new();

impl VmaPool {
    /// An empty pool.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            free: Lock::new(Vec::new()),
            created: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            injected_failures: AtomicU64::new(0),
            fail_countdown: AtomicU64::new(0),
        }
    }

    /// An empty pool.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            free: Lock::new(Vec::new()),
            created: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            injected_failures: AtomicU64::new(0),
            fail_countdown: AtomicU64::new(0),
        }
    }

    /// A new pool that lives for the rest of the process (its VMAs do anyway).
    pub fn leak_new() -> &'static Self {
        Box::leak(Box::new(Self::new()))
    }

    /// The process-wide pool.
    #[cfg(not(loom))]
    pub fn global() -> &'static Self {
        &GLOBAL
    }

    /// Makes the `n`-th allocation from now fail with `ENOMEM` (`n` = 1: the next one); 0 cancels.
    pub fn fail_nth(&self, n: u64) {
        // Relaxed: test control; the allocating thread is the one that set it, or ordered after it by the test.
        self.fail_countdown.store(n, Ordering::Relaxed);
    }

    fn injected_failure(&self) -> bool {
        // Relaxed: test control (see `fail_nth`).
        let r = self.fail_countdown.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        matches!(r, Ok(1))
    }

    /// Hands out a detached VMA owned by `mm` (`vm_mm` = `mm.id()`, `vm_lock_seq` = "never locked", fields
    /// cleared). `ENOMEM` only under failure injection.
    pub fn alloc(&self, mm: &MmLocking) -> Result<&'static Vma, Errno> {
        if self.injected_failure() {
            // Relaxed: statistics.
            self.injected_failures.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ENOMEM);
        }
        let vma = {
            let mut free = lock(&self.free);
            if free.is_empty() {
                self.grow(&mut free, VMA_CHUNK);
            }
            free.pop().expect("the free list was refilled")
        };
        // Relaxed: pool-private flag; the free list's lock orders it.
        let was = vma.in_pool.swap(0, Ordering::Relaxed);
        debug_assert_eq!(was, 1, "VMA on the free list not marked free");
        debug_assert_eq!(vma.refcnt(), 0, "free VMA with a non-zero refcount");
        // Relaxed: the VMA is detached; readers cannot lock it until `vma_mark_attached`'s release store, which
        // publishes these stores to them.
        vma.lock_seq_cell().store(VM_LOCK_SEQ_NONE, Ordering::Relaxed);
        vma.set_mm_id(mm.id());
        // Relaxed: statistics.
        self.allocs.fetch_add(1, Ordering::Relaxed);
        Ok(vma)
    }

    /// Takes `n` VMAs off the free list at once (creating what it lacks) for `mm`, to be handed out one by one
    /// by [`Iterator::next`] (each then as from [`VmaPool::alloc`]): `dup_mmap`'s allocation of a child's VMAs,
    /// with one acquisition of the free list's lock for the whole batch, and each VMA's lines touched only when it
    /// is handed out (right before it is filled). VMAs the batch still holds stay free (in the pool's sense)
    /// and go back to the free list when it is dropped. All or nothing: if an injected failure falls within the
    /// `n` allocations, `ENOMEM` and nothing is taken (as if the allocations before it had been undone).
    pub fn alloc_bulk<'p>(&'p self, mm: &MmLocking, n: usize) -> Result<VmaBatch<'p>, Errno> {
        // Relaxed: test control (see `fail_nth`).
        let countdown = self.fail_countdown.load(Ordering::Relaxed);
        if countdown != 0 {
            if countdown <= n as u64 {
                self.fail_countdown.store(0, Ordering::Relaxed);
                // Relaxed: statistics.
                self.injected_failures.fetch_add(1, Ordering::Relaxed);
                return Err(Errno::ENOMEM);
            }
            self.fail_countdown.store(countdown - n as u64, Ordering::Relaxed);
        }
        let mut vmas = Vec::with_capacity(n);
        {
            let mut free = lock(&self.free);
            let k = free.len().saturating_sub(n);
            vmas.extend(free.drain(k..));
            let lack = n - vmas.len();
            if lack > 0 {
                // Fresh VMAs in address order after the reused ones; the rest of the slab goes on the free list.
                let slab = self.make(lack.max(VMA_CHUNK));
                vmas.extend(&slab[..lack]);
                free.extend(slab[lack..].iter().rev());
            }
        }
        Ok(VmaBatch { pool: self, vmas, next: 0, mm_id: mm.id() })
    }

    /// Creates `n` free VMAs as one leaked array (module docs, "A slab of VMAs") and puts them on `free`, the
    /// first of them on top.
    fn grow(&self, free: &mut Vec<&'static Vma>, n: usize) {
        free.extend(self.make(n).iter().rev());
    }

    /// `n` new free VMAs, neighbours in memory (module docs, "A slab of VMAs"), counted as created.
    fn make(&self, n: usize) -> &'static [Vma] {
        let slab: &'static [Vma] = (0..n)
            .map(|_| {
                let v = Vma::new_detached();
                // Relaxed: not shared yet. Marked free: it is handed out like any free VMA.
                v.in_pool.store(1, Ordering::Relaxed);
                v
            })
            .collect::<Vec<Vma>>()
            .leak();
        // Relaxed: statistics.
        self.created.fetch_add(n as u64, Ordering::Relaxed);
        slab
    }

    /// Returns a detached VMA to the pool. It may be handed out again at once.
    ///
    /// The VMA must be detached (`vma_mark_detached` returned, or never attached) and unreachable for new
    /// lookups (removed from its tree); stale RCU readers are fine. Freeing an attached VMA or freeing twice is a
    /// bug, caught by assertions.
    pub fn free(&self, vma: &'static Vma) {
        assert_eq!(vma.refcnt(), 0, "freeing an attached VMA: {vma:?}");
        vma.clear_fields();
        vma.set_mm_id(0);
        // Relaxed: pool-private flag; the free list's lock orders it for the next `alloc`.
        let was = vma.in_pool.swap(1, Ordering::Relaxed);
        assert_eq!(was, 0, "VMA freed twice: {vma:?}");
        lock(&self.free).push(vma);
        // Relaxed: statistics.
        self.frees.fetch_add(1, Ordering::Relaxed);
    }

    /// Current counts (exact when no allocation or free is in flight).
    pub fn stats(&self) -> PoolStats {
        let free = lock(&self.free).len() as u64;
        // Relaxed: statistics.
        let created = self.created.load(Ordering::Relaxed);
        PoolStats {
            created,
            free,
            in_use: created.saturating_sub(free),
            allocs: self.allocs.load(Ordering::Relaxed),
            frees: self.frees.load(Ordering::Relaxed),
            injected_failures: self.injected_failures.load(Ordering::Relaxed),
        }
    }
}

/// VMAs taken off a pool's free list together ([`VmaPool::alloc_bulk`]), handed out in order by
/// [`Iterator::next`]. Until handed out they are free VMAs (`in_pool` 1, `vm_mm` 0, fields cleared); the ones
/// left when the batch is dropped go back to the free list. The pool's `allocs` statistic counts the VMAs handed
/// out when the batch is dropped.
pub struct VmaBatch<'p> {
    pool: &'p VmaPool,
    vmas: Vec<&'static Vma>,
    next: usize,
    mm_id: u64,
}

impl VmaBatch<'_> {
    /// The VMA `k` places after the next one to be handed out, without handing it out (to prefetch it).
    #[inline]
    pub fn peek(&self, k: usize) -> Option<&'static Vma> {
        self.vmas.get(self.next + k).copied()
    }

    /// How many VMAs are left to hand out.
    pub fn remaining(&self) -> usize {
        self.vmas.len() - self.next
    }
}

impl VmaBatch<'_> {
    /// Hands out the next VMA as fork's copy of `parent` (`dup_mmap`'s `vm_area_dup`): what [`Iterator::next`]
    /// stores (`in_pool` 0, `vm_mm`, `vm_lock_seq`) and the copied fields in one write section
    /// ([`Vma::init_fork_child`]), the VMA write-locked in epoch `lock_seq` as by `vma_start_write_unpublished`
    /// (`lock_seq` is `lock::unpublished_lock_seq` of the batch's mm, read once per fork: the caller holds that
    /// mm's mmap write lock throughout, and no other thread can reach the mm). `parent` is write-locked in its
    /// own mm. `None` once all are handed out.
    #[inline(always)]
    pub(crate) fn next_fork_copy(
        &mut self,
        lock_seq: u32,
        parent: &Vma,
        flags: super::VmFlags,
        anon: Option<super::AnonState>,
    ) -> Option<&'static Vma> {
        let v = *self.vmas.get(self.next)?;
        self.next += 1;
        v.init_fork_child(self.mm_id, lock_seq, parent, flags, anon);
        Some(v)
    }
}

/// Hands the batch's VMAs out in order.
impl Iterator for VmaBatch<'_> {
    type Item = &'static Vma;

    /// Hands out the next VMA, detached and owned by the batch's mm (`vm_mm` set, `vm_lock_seq` "never
    /// locked", fields cleared), as [`VmaPool::alloc`] would; `None` once all are handed out.
    #[inline]
    fn next(&mut self) -> Option<&'static Vma> {
        let v = *self.vmas.get(self.next)?;
        self.next += 1;
        debug_assert_eq!(v.refcnt(), 0, "free VMA with a non-zero refcount");
        // Relaxed: pool-private flag; the free list's lock ordered the batch's take, and only the batch's owner
        // changes the flag of a VMA the batch holds (a plain store, no RMW).
        debug_assert_eq!(v.in_pool.load(Ordering::Relaxed), 1, "VMA in a batch not marked free");
        v.in_pool.store(0, Ordering::Relaxed);
        // Relaxed: as in `alloc`, the VMA is detached; `vma_mark_attached`'s release store publishes these.
        v.lock_seq_cell().store(VM_LOCK_SEQ_NONE, Ordering::Relaxed);
        v.set_mm_id(self.mm_id);
        Some(v)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining(), Some(self.remaining()))
    }
}

impl Drop for VmaBatch<'_> {
    fn drop(&mut self) {
        // Relaxed: statistics, counted once for the VMAs handed out (an RMW per VMA would cost a locked
        // instruction each).
        self.pool.allocs.fetch_add(self.next as u64, Ordering::Relaxed);
        if self.next < self.vmas.len() {
            lock(&self.pool.free).extend_from_slice(&self.vmas[self.next..]);
        }
    }
}

impl Default for VmaPool {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for VmaPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.stats().fmt(f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_reuse_and_stats() {
        let pool = VmaPool::leak_new();
        let mm = MmLocking::new();
        let a = pool.alloc(&mm).unwrap();
        let b = pool.alloc(&mm).unwrap();
        assert_eq!(a.mm_id(), mm.id());
        assert_eq!(a.lock_seq(), VM_LOCK_SEQ_NONE);
        // Created a slab at a time, neighbours in memory, handed out in address order.
        assert_eq!(pool.stats().created, VMA_CHUNK as u64);
        assert_eq!(pool.stats().in_use, 2);
        assert_eq!(
            std::ptr::from_ref(b) as usize - std::ptr::from_ref(a) as usize,
            std::mem::size_of::<Vma>()
        );
        pool.free(a);
        assert_eq!(a.mm_id(), 0);
        assert_eq!(pool.stats().free, VMA_CHUNK as u64 - 1);
        let c = pool.alloc(&mm).unwrap();
        assert!(std::ptr::eq(a, c), "freed VMA reused at once");
        assert_eq!(
            pool.stats(),
            PoolStats {
                created: VMA_CHUNK as u64,
                free: VMA_CHUNK as u64 - 2,
                in_use: 2,
                allocs: 3,
                frees: 1,
                injected_failures: 0
            }
        );
        pool.free(b);
        pool.free(c);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn failure_injection() {
        let pool = VmaPool::leak_new();
        let mm = MmLocking::new();
        pool.fail_nth(2);
        let a = pool.alloc(&mm).unwrap();
        assert_eq!(pool.alloc(&mm).unwrap_err(), Errno::ENOMEM);
        let b = pool.alloc(&mm).unwrap();
        assert_eq!(pool.stats().injected_failures, 1);
        pool.fail_nth(1);
        pool.fail_nth(0);
        let c = pool.alloc(&mm).unwrap();
        for v in [a, b, c] {
            pool.free(v);
        }
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn a_bulk_allocation_beyond_the_free_list_creates_neighbours_in_order() {
        let pool = VmaPool::leak_new();
        let mm = MmLocking::new();
        let n = 3 * VMA_CHUNK + 5;
        let got: Vec<_> = pool.alloc_bulk(&mm, n).unwrap().collect();
        assert_eq!(pool.stats().created, n as u64, "exactly what the batch lacked");
        assert_eq!(pool.stats().free, 0);
        for w in got.windows(2) {
            let gap = std::ptr::from_ref(w[1]) as usize - std::ptr::from_ref(w[0]) as usize;
            assert_eq!(gap, std::mem::size_of::<Vma>(), "one array, in address order");
        }
        for v in got {
            pool.free(v);
        }
        // A small batch beyond an empty free list makes a whole slab and keeps the rest free.
        let pool = VmaPool::leak_new();
        let two: Vec<_> = pool.alloc_bulk(&mm, 2).unwrap().collect();
        assert_eq!((pool.stats().created, pool.stats().free), (VMA_CHUNK as u64, VMA_CHUNK as u64 - 2));
        let next = pool.alloc(&mm).unwrap();
        assert_eq!(
            std::ptr::from_ref(next) as usize - std::ptr::from_ref(two[1]) as usize,
            std::mem::size_of::<Vma>()
        );
    }

    #[test]
    fn free_clears_fields_and_attributes() {
        let pool = VmaPool::leak_new();
        let mm = MmLocking::new();
        let v = pool.alloc(&mm).unwrap();
        v.set_range(&mm, 0x1000, 0x2000);
        v.set_anon_name(&mm, Some("x".into()));
        pool.free(v);
        assert_eq!((v.start(), v.end()), (0, 0));
        assert!(v.anon_name().is_none());
    }

    #[test]
    fn bulk_alloc_reuses_counts_and_fails_whole() {
        let pool = VmaPool::leak_new();
        let mm = MmLocking::new();
        let a = pool.alloc(&mm).unwrap();
        pool.free(a);
        let mut b = pool.alloc_bulk(&mm, 3).unwrap();
        assert_eq!(b.remaining(), 3);
        let got: Vec<_> = b.by_ref().collect();
        assert_eq!(got.len(), 3);
        assert!(b.peek(0).is_none() && b.next().is_none());
        drop(b);
        assert!(got.iter().any(|v| std::ptr::eq(*v, a)), "the free VMA is reused");
        assert!(
            got.iter().all(|v| v.mm_id() == mm.id() && v.lock_seq() == VM_LOCK_SEQ_NONE && v.is_detached())
        );
        assert_eq!(
            pool.stats(),
            PoolStats {
                created: VMA_CHUNK as u64,
                free: VMA_CHUNK as u64 - 3,
                in_use: 3,
                allocs: 4,
                frees: 1,
                injected_failures: 0
            }
        );
        // What a batch did not hand out goes back to the free list, still free.
        let mut part = pool.alloc_bulk(&mm, 2).unwrap();
        let one = part.next().unwrap();
        let left = part.peek(0).unwrap();
        drop(part);
        let c = VMA_CHUNK as u64;
        assert_eq!((pool.stats().created, pool.stats().free, pool.stats().allocs), (c, c - 4, 5));
        assert_eq!(left.mm_id(), 0);
        assert!(std::ptr::eq(pool.alloc(&mm).unwrap(), left), "the unused VMA is reused");
        // The 2nd allocation from now fails: a batch of 2 fails whole, and the countdown stops.
        pool.fail_nth(2);
        assert_eq!(pool.alloc_bulk(&mm, 2).err(), Some(Errno::ENOMEM));
        assert_eq!(pool.stats().injected_failures, 1);
        // A failure beyond the batch is counted down by it: the 3rd from now is the 1st after a batch of 2.
        pool.fail_nth(3);
        let mut more = pool.alloc_bulk(&mm, 2).unwrap();
        let more: Vec<_> = more.by_ref().collect();
        assert_eq!(pool.alloc(&mm).unwrap_err(), Errno::ENOMEM);
        for v in got.into_iter().chain(more).chain([one, left]) {
            pool.free(v);
        }
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    #[should_panic(expected = "freed twice")]
    fn double_free_is_caught() {
        let pool = VmaPool::leak_new();
        let mm = MmLocking::new();
        let v = pool.alloc(&mm).unwrap();
        pool.free(v);
        pool.free(v);
    }

    #[test]
    fn vma_is_two_cache_lines() {
        assert_eq!(std::mem::size_of::<Vma>(), 128);
        assert_eq!(std::mem::align_of::<Vma>(), 64);
    }
}
