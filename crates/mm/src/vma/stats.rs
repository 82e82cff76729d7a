//! Per-VMA-lock event counters (the kernel's `VMA_LOCK_SUCCESS`, `VMA_LOCK_ABORT`, `VMA_LOCK_RETRY`,
//! `VMA_LOCK_MISS` vm events).
//!
//! The kernel keeps them per CPU and increments them without a locked instruction (`this_cpu_inc`). Here each
//! mm has [`slots`] cache-line-sized shards plus one shared shard. A thread claims one of [`slots`]
//! process-wide *slots* the first time it counts and keeps it until it exits; while it owns slot *i* it is the
//! only writer of shard *i* of every mm, so it counts with a plain load and store (no `lock` prefix, which on
//! x86 would also drain the store buffer on every lookup). Threads beyond [`slots`] count into the shared
//! shard with an atomic add. A slot passes to another thread only through the slot table's Release/Acquire
//! pair, so the new owner continues from the old owner's last count. [`VmaLockStats::snapshot`] sums the
//! shards; the sum is a relaxed snapshot, exact once the counting threads have stopped (or been joined).
//!
//! Under loom every increment is an atomic add: loom's threads share one OS thread's thread-locals, so a slot
//! would not be exclusive there.
//!
//! Meaning of the counters here:
//! - `success`: `lock_vma_under_rcu` returned a read-locked VMA (the kernel counts this in the fault handler
//!   after a fault that did not need a retry; [`VmaLockStats::record_fault_retry`] lets a fault path record the
//!   retries so that `success - retry` is the kernel's figure);
//! - `abort`: `lock_vma_under_rcu` gave up (no VMA, write-locked, recycled, wrong range, reader limit): the
//!   caller must fall back to mmap_lock;
//! - `retry`: recorded by a fault path whose per-VMA-locked fault had to be retried under mmap_lock;
//! - `miss`: the VMA found was detached under the reader (`-EAGAIN`) and the walk was restarted.

use std::fmt;

use vmspace_rcu::CachePadded;
use vmspace_rcu::sync::{AtomicU64, Ordering};

/// Number of thread slots, hence of exclusively written counter shards per mm (each mm has one more, shared):
/// the page tables' shard count (`vmspace_pgtable::nshards`, the usable CPUs rounded up to a power of two, at
/// least 8), at most 64 (the slot table is one word). Fixed at the first call.
pub fn slots() -> usize {
    #[cfg(not(loom))]
    {
        static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *N.get_or_init(|| vmspace_pgtable::nshards().min(64))
    }
    #[cfg(loom)]
    8
}

struct Shard {
    success: AtomicU64,
    abort: AtomicU64,
    retry: AtomicU64,
    miss: AtomicU64,
}

/// A summed copy of the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VmaLockCounts {
    /// VMAs returned read-locked by `lock_vma_under_rcu`.
    pub success: u64,
    /// Lookups that fell back (the caller must use mmap_lock).
    pub abort: u64,
    /// Per-VMA-locked faults retried under mmap_lock (recorded by the fault path).
    pub retry: u64,
    /// Walks restarted because the VMA was detached under the reader.
    pub miss: u64,
}

/// The per-mm VMA-lock counters (sharded; see the module docs).
pub struct VmaLockStats {
    shards: Box<[CachePadded<Shard>]>,
}

// Loom builds never use slots (see the module docs).
#[cfg(not(loom))]
vmspace_rcu::statics! {
    /// The process-wide slot table: bit *i* set while a thread owns slot *i*.
    static SLOTS: AtomicU64 = AtomicU64::new(0);
}

/// A thread's claim on a slot ([`slots`] = none: it counts into the shared shard).
#[cfg(not(loom))]
struct Slot(usize);

#[cfg(not(loom))]
impl Slot {
    fn claim() -> Slot {
        let mut cur = SLOTS.load(Ordering::Relaxed);
        loop {
            let free = (!cur).trailing_zeros() as usize;
            if free >= slots() {
                return Slot(slots());
            }
            // Acquire: pairs with the Release in `drop` of the slot's previous owner, so that this thread's
            // plain increments continue from that owner's last counts.
            match SLOTS.compare_exchange_weak(cur, cur | 1 << free, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Slot(free),
                Err(now) => cur = now,
            }
        }
    }
}

#[cfg(not(loom))]
impl Drop for Slot {
    fn drop(&mut self) {
        if self.0 < slots() {
            // Release: publishes this thread's last counts to the slot's next owner (see `claim`).
            SLOTS.fetch_and(!(1 << self.0), Ordering::Release);
        }
    }
}

#[cfg(not(loom))]
thread_local! {
    static SLOT: Slot = Slot::claim();
}

/// The calling thread's slot, or [`slots`] (shared shard) when it has none or its thread-locals are gone.
#[inline]
fn slot_index() -> usize {
    #[cfg(not(loom))]
    return SLOT.try_with(|s| s.0).unwrap_or_else(|_| slots());
    #[cfg(loom)]
    slots()
}

/// Adds one to `c`, a counter of shard `slot`: a plain load and store when the caller owns the slot (module
/// docs), an atomic add on the shared shard.
#[inline]
fn bump(c: &AtomicU64, slot: usize) {
    if slot < slots() {
        // Relaxed: a statistic with a single writer (this thread owns the slot).
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    } else {
        // Relaxed: a statistic.
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl VmaLockStats {
    /// Zeroed counters.
    pub fn new() -> Self {
        let shards = (0..=slots())
            .map(|_| {
                CachePadded::new(Shard {
                    success: AtomicU64::new(0),
                    abort: AtomicU64::new(0),
                    retry: AtomicU64::new(0),
                    miss: AtomicU64::new(0),
                })
            })
            .collect();
        Self { shards }
    }

    #[inline]
    fn count(&self, which: impl FnOnce(&Shard) -> &AtomicU64) {
        let slot = slot_index();
        bump(which(&self.shards[slot]), slot);
    }

    /// Counts a VMA returned read-locked.
    #[inline]
    pub fn record_success(&self) {
        self.count(|s| &s.success);
    }

    /// Counts a lookup that fell back to mmap_lock.
    #[inline]
    pub fn record_abort(&self) {
        self.count(|s| &s.abort);
    }

    /// Counts a per-VMA-locked fault that had to be retried under mmap_lock.
    #[inline]
    pub fn record_fault_retry(&self) {
        self.count(|s| &s.retry);
    }

    /// Counts a walk restarted because the VMA was detached.
    #[inline]
    pub fn record_miss(&self) {
        self.count(|s| &s.miss);
    }

    /// The counters summed over the shards.
    pub fn snapshot(&self) -> VmaLockCounts {
        let mut c = VmaLockCounts::default();
        for s in self.shards.iter() {
            // Relaxed: a statistic snapshot.
            c.success += s.success.load(Ordering::Relaxed);
            c.abort += s.abort.load(Ordering::Relaxed);
            c.retry += s.retry.load(Ordering::Relaxed);
            c.miss += s.miss.load(Ordering::Relaxed);
        }
        c
    }
}

impl Default for VmaLockStats {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for VmaLockStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// More threads than slots, in waves (so that slots are released and claimed again): every increment is
    /// counted exactly, by slot owners (plain increments) and by the shared shard alike.
    #[test]
    fn counts_are_exact_across_threads_and_slot_reuse() {
        let stats = VmaLockStats::new();
        let per_thread = 20_000u64;
        let mut threads = 0u64;
        for _wave in 0..3 {
            std::thread::scope(|s| {
                for _ in 0..(slots() + 4) {
                    threads += 1;
                    s.spawn(|| {
                        for i in 0..per_thread {
                            stats.record_success();
                            if i % 4 == 0 {
                                stats.record_miss();
                            }
                        }
                        stats.record_abort();
                        stats.record_fault_retry();
                    });
                }
            });
        }
        let c = stats.snapshot();
        assert_eq!(c.success, threads * per_thread);
        assert_eq!(c.miss, threads * per_thread / 4);
        assert_eq!((c.abort, c.retry), (threads, threads));
    }
}
