//! Per-thread sharded counters: the kernel's `percpu_counter` (RSS, `mm->rss_stat`) and per-CPU event counts
//! (`vm_event_states`), so that two threads faulting in one address space never write the same cache line.
//!
//! A counter set is [`NSHARDS`] cache-padded rows of `K` atomic words. A thread writes the row its shard hint
//! selects ([`shard`]: assigned round-robin on the thread's first use, so the first `NSHARDS` threads of the
//! process never share a row); readers sum the rows. Updates are `Relaxed` read-modify-writes: a row may still be
//! shared by two threads once more than `NSHARDS` exist, and a sum is a statistic, not a synchronisation point
//! (a sum read while updates run may be off by the updates in flight, as a `percpu_counter_sum` is). Values are
//! kept as wrapping `u64` and read as `i64`, so a decrement on one row and the matching increment on another
//! sum to zero.
//!
//! Under loom there is one row and every thread uses it.

use vmspace_rcu::CachePadded;
use vmspace_rcu::sync::{AtomicU64, Ordering};

/// Rows per counter set.
#[cfg(not(loom))]
pub(crate) const NSHARDS: usize = 8;
/// Rows per counter set (loom: one).
#[cfg(loom)]
pub(crate) const NSHARDS: usize = 1;

#[cfg(not(loom))]
vmspace_rcu::statics! {
    /// Source of shard hints: the n-th thread to ask gets `n % NSHARDS`.
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
        let n = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % NSHARDS;
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
            rows: (0..NSHARDS)
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
        assert!(a < NSHARDS);
    }
}
