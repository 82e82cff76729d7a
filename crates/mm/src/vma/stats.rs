//! Per-VMA-lock event counters (the kernel's `VMA_LOCK_SUCCESS`, `VMA_LOCK_ABORT`, `VMA_LOCK_RETRY`,
//! `VMA_LOCK_MISS` vm events).
//!
//! The kernel keeps them per CPU. Here each mm has [`SHARDS`] cache-line-sized shards and a thread adds to the
//! shard chosen by a per-thread index, so that two threads taking VMA locks on one mm do not bounce one cache
//! line on every lookup. [`VmaLockStats::snapshot`] sums the shards; the sum is a relaxed snapshot, exact once
//! the counting threads have stopped (or been joined).
//!
//! Meaning of the counters here:
//! - `success`: `lock_vma_under_rcu` returned a read-locked VMA (the kernel counts this in the fault handler
//!   after a fault that did not need a retry; [`VmaLockStats::record_fault_retry`] lets a fault path record the
//!   retries so that `success - retry` is the kernel's figure);
//! - `abort`: `lock_vma_under_rcu` gave up (no VMA, write-locked, recycled, wrong range, reader limit): the
//!   caller must fall back to mmap_lock;
//! - `retry`: recorded by a fault path whose per-VMA-locked fault had to be retried under mmap_lock;
//! - `miss`: the VMA found was detached under the reader (`-EAGAIN`) and the walk was restarted.

use std::cell::Cell;
use std::fmt;

use vmspace_rcu::CachePadded;
use vmspace_rcu::sync::{AtomicU64, Ordering};

/// Number of counter shards per mm.
pub const SHARDS: usize = 8;

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

thread_local! {
    /// This thread's shard index (threads are spread over the shards in creation order).
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Hands out shard indices to threads.
// Not a checked protocol (it only spreads threads), so std's atomic is used directly.
static NEXT_SHARD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[inline]
fn shard_index() -> usize {
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            // Relaxed: only spreads threads over shards.
            i = NEXT_SHARD.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

impl VmaLockStats {
    /// Zeroed counters.
    pub fn new() -> Self {
        let shards = (0..SHARDS)
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
    fn shard(&self) -> &Shard {
        &self.shards[shard_index()]
    }

    /// Counts a VMA returned read-locked.
    #[inline]
    pub fn record_success(&self) {
        // Relaxed: a statistic.
        self.shard().success.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a lookup that fell back to mmap_lock.
    #[inline]
    pub fn record_abort(&self) {
        // Relaxed: a statistic.
        self.shard().abort.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a per-VMA-locked fault that had to be retried under mmap_lock.
    #[inline]
    pub fn record_fault_retry(&self) {
        // Relaxed: a statistic.
        self.shard().retry.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a walk restarted because the VMA was detached.
    #[inline]
    pub fn record_miss(&self) {
        // Relaxed: a statistic.
        self.shard().miss.fetch_add(1, Ordering::Relaxed);
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
