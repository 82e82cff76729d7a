//! Per-thread sharded counters: the kernel's `percpu_counter` (RSS, `mm->rss_stat`) and per-CPU event counts
//! (`vm_event_states`), so that two threads faulting in one address space never write the same cache line.
//!
//! A counter set is [`nshards`] cache-padded rows of `K` atomic words: the usable CPUs rounded up to a power of
//! two, at least 8, as the kernel sizes its per-CPU data by the possible CPUs. A thread writes the row its shard
//! hint selects ([`shard`]: assigned round-robin on the thread's first use, so the first `nshards()` threads of
//! the process never share a row: on a machine with as many faulting threads as CPUs, no two share one);
//! readers sum the rows. Updates are `Relaxed` read-modify-writes: a row may still be
//! shared by two threads once more than `nshards()` exist, and a sum is a statistic, not a synchronisation point
//! (a sum read while updates run may be off by the updates in flight, as a `percpu_counter_sum` is). Values are
//! kept as wrapping `u64` and read as `i64`, so a decrement on one row and the matching increment on another
//! sum to zero.
//!
//! Under loom there is one row and every thread uses it.

use vmspace_rcu::CachePadded;
use vmspace_rcu::sync::{AtomicU64, Ordering};

/// The fewest rows per counter set.
#[cfg(not(loom))]
const MIN_SHARDS: usize = 8;
/// The most rows per counter set (each counter set costs 64 bytes per row).
#[cfg(not(loom))]
const MAX_SHARDS: usize = 1024;

/// Rows per counter set and free-list shards per memory for a machine of `cpus` usable CPUs: `cpus` rounded up
/// to a power of two, within [8, 1024].
#[cfg(not(loom))]
pub(crate) fn shards_for(cpus: usize) -> usize {
    cpus.max(1).next_power_of_two().clamp(MIN_SHARDS, MAX_SHARDS)
}

/// Rows per counter set and free-list shards per memory on this machine: its usable CPUs
/// (`std::thread::available_parallelism`: the CPUs this process may run on) rounded up to a power of two, within
/// [8, 1024]; fixed at the first call.
#[cfg(not(loom))]
pub fn nshards() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| shards_for(std::thread::available_parallelism().map_or(1, |n| n.get())))
}

/// Rows per counter set (loom: one).
#[cfg(loom)]
pub fn nshards() -> usize {
    1
}

#[cfg(not(loom))]
vmspace_rcu::statics! {
    /// Source of shard hints: the n-th thread to ask gets `n % nshards()`.
    static NEXT_SHARD: vmspace_rcu::sync::AtomicUsize = vmspace_rcu::sync::AtomicUsize::new(0);
}

#[cfg(not(loom))]
thread_local! {
    static SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// This thread's row in every counter set and its free-frame list in [`crate::Memory`].
#[cfg(not(loom))]
#[inline]
pub(crate) fn shard() -> usize {
    SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        // Relaxed: only a distribution hint.
        let n = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % nshards();
        s.set(n);
        n
    })
}

/// This thread's row (loom: the only one).
#[cfg(loom)]
#[inline]
pub(crate) fn shard() -> usize {
    0
}

/// `K` counters, sharded by thread.
pub(crate) struct Sharded<const K: usize> {
    rows: Box<[CachePadded<[AtomicU64; K]>]>,
}

impl<const K: usize> Sharded<K> {
    pub(crate) fn new() -> Self {
        Sharded {
            rows: (0..nshards())
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Adds `delta` (may be negative) to counter `k` on this thread's row.
    #[inline]
    pub(crate) fn add(&self, k: usize, delta: i64) {
        // Relaxed: a statistic (module docs).
        self.rows[shard()][k].fetch_add(delta as u64, Ordering::Relaxed);
    }

    /// The sum of counter `k` over all rows.
    pub(crate) fn sum(&self, k: usize) -> i64 {
        // Relaxed: a statistic (module docs).
        self.rows.iter().fold(0u64, |a, r| a.wrapping_add(r[k].load(Ordering::Relaxed))) as i64
    }

    /// All `K` sums.
    pub(crate) fn sums(&self) -> [i64; K] {
        std::array::from_fn(|k| self.sum(k))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sums_across_threads_and_signs() {
        let c = std::sync::Arc::new(Sharded::<2>::new());
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(0, 1);
                        c.add(1, if i % 2 == 0 { 3 } else { -3 });
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(c.sums(), [4000, 0]);
    }

    #[test]
    fn a_thread_keeps_its_shard() {
        let a = shard();
        assert_eq!(a, shard());
        assert!(a < nshards());
    }

    #[test]
    fn shards_follow_the_usable_cpus() {
        assert_eq!(shards_for(0), 8);
        assert_eq!(shards_for(2), 8);
        assert_eq!(shards_for(8), 8);
        assert_eq!(shards_for(9), 16);
        assert_eq!(shards_for(64), 64);
        assert_eq!(shards_for(96), 128);
        assert_eq!(shards_for(100_000), 1024);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(nshards() >= cpus.min(1024) && nshards().is_power_of_two());
    }
}
