//! `SeqCount`: the kernel's sequence counter (`seqcount_t`) on the loom seam.
//!
//! Protocol:
//!
//! ```text
//! writer (serialised by an outer lock)      reader
//! write_begin():  seq += 1  (now odd)       s = read_begin()        (waits while odd)
//!   ... modify the protected data ...         ... copy the protected data ...
//! write_end():    seq += 1  (now even)      if read_retry(s) { start again }
//! ```
//!
//! A reader whose snapshot `s` is unchanged at `read_retry` saw no writer inside during its copy. The data the
//! reader copies must itself be read with atomics (possibly `Relaxed`): the sequence only tells whether the copy
//! can be trusted, it does not make racing plain reads defined.
//!
//! Orderings, as `include/linux/seqlock.h` places its barriers:
//! - `write_begin`: the increment is a release store (what came before it, e.g. the previous write sections the
//!   writer's outer lock ordered before it, is visible to a reader that reads the odd value) followed by a
//!   release fence, so it is visible before any data store
//!   (pairs with the reader's acquire fence in `read_retry`: a reader that read new data sees an odd or newer
//!   count there).
//! - `write_end`: a release store of the even value, after the data stores (pairs with `read_begin`'s acquire
//!   load: a reader that sees the new even value sees all the data).
//! - `read_retry`: an acquire fence before re-reading the count (orders the data loads before it).

use crate::sync::{AtomicU64, Ordering, fence, spin_loop};

/// A sequence counter: even when no writer is inside, odd while one is.
#[derive(Debug, Default)]
pub struct SeqCount {
    seq: AtomicU64,
}

impl SeqCount {
    /// A counter at 0 (stable).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self { seq: AtomicU64::new(0) }
    }

    /// A counter at 0 (stable).
    #[cfg(loom)]
    pub fn new() -> Self {
        Self { seq: AtomicU64::new(0) }
    }

    /// Waits until no writer is inside and returns the (even) sequence to validate against.
    #[inline]
    pub fn read_begin(&self) -> u64 {
        loop {
            // Acquire: pairs with `write_end`'s release store; the data written before it is visible.
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 0 {
                return s;
            }
            spin_loop();
        }
    }

    /// Returns the sequence if no writer is inside, `None` otherwise (the kernel's `raw_seqcount_try_begin`,
    /// used by `mmap_lock_speculate_try_begin`).
    #[inline]
    pub fn try_read_begin(&self) -> Option<u64> {
        // Acquire: as in `read_begin`.
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 0 { Some(s) } else { None }
    }

    /// True if a writer entered since `start` was read: the copy taken since then must be discarded.
    #[inline]
    pub fn read_retry(&self, start: u64) -> bool {
        // Acquire fence: the data loads above cannot be reordered after the re-read of the count. Pairs with the
        // release fence in `write_begin`.
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) != start
    }

    /// The current value, odd or even (the kernel's `raw_read_seqcount`), with acquire ordering.
    #[inline]
    pub fn raw_read(&self) -> u64 {
        // Acquire: pairs with `write_end`'s release store (used by `vma_start_read`'s re-check of
        // `mm_lock_seq`, which pairs with the release in `vma_end_write_all`).
        self.seq.load(Ordering::Acquire)
    }

    /// Enters the write side. Writers must be serialised by the caller (an outer lock).
    #[inline]
    pub fn write_begin(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "SeqCount::write_begin while a writer is inside");
        // Release: a reader whose acquire load reads the odd value also sees everything before it (for the mmap
        // lock: the previous write sections, which the writer acquired with the lock), so a reader that copies
        // while a writer is inside starts from the state the writer started from (the lockless `/proc`
        // readers of `vmspace-mm` validate per VMA while `mm_lock_seq` is odd).
        self.seq.store(s.wrapping_add(1), Ordering::Release);
        // Release fence: the odd value is ordered before every data store that follows; pairs with the acquire
        // fence in `read_retry`.
        fence(Ordering::Release);
    }

    /// Leaves the write side.
    #[inline]
    pub fn write_end(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 1, "SeqCount::write_end without write_begin");
        // Release: every data store of this write section is visible to a reader that sees the even value.
        self.seq.store(s.wrapping_add(1), Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::SeqCount;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn even_when_stable_odd_inside() {
        let s = SeqCount::new();
        assert_eq!(s.try_read_begin(), Some(0));
        s.write_begin();
        assert_eq!(s.raw_read(), 1);
        assert_eq!(s.try_read_begin(), None);
        s.write_end();
        assert_eq!(s.read_begin(), 2);
    }

    #[test]
    fn retry_detects_a_completed_write() {
        let s = SeqCount::new();
        let start = s.read_begin();
        assert!(!s.read_retry(start));
        s.write_begin();
        s.write_end();
        assert!(s.read_retry(start));
    }

    /// Readers validating copies of a two-word value never accept a torn copy while a writer keeps changing it.
    #[test]
    fn concurrent_readers_never_accept_torn_copies() {
        use std::sync::atomic::AtomicBool;
        use std::time::{Duration, Instant};
        let seq = Arc::new(SeqCount::new());
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (seq, words, stop) = (seq.clone(), words.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    seq.write_begin();
                    words[0].store(i, Ordering::Relaxed);
                    words[1].store(i, Ordering::Relaxed);
                    seq.write_end();
                    // Leave readers windows with no writer inside, as a real writer between calls does.
                    for _ in 0..64 {
                        std::hint::spin_loop();
                    }
                }
                i
            })
        };
        // Miri runs about a thousand times slower; a thousand accepted copies still interleave with many writes.
        let want: u64 = if cfg!(miri) { 1_000 } else { 100_000 };
        let (mut accepted, mut retried) = (0u64, 0u64);
        let deadline = Instant::now() + Duration::from_secs(20);
        // Read only once the writer runs (on a busy machine its thread may start late; reading before would
        // test nothing).
        while words[0].load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        while accepted < want && Instant::now() < deadline {
            let s = seq.read_begin();
            let a = words[0].load(Ordering::Relaxed);
            let b = words[1].load(Ordering::Relaxed);
            if seq.read_retry(s) {
                retried += 1;
            } else {
                assert_eq!(a, b, "accepted a torn copy");
                accepted += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let writes = writer.join().unwrap();
        assert_eq!(
            accepted, want,
            "readers starved: {accepted} accepted, {retried} retried, {writes} writes"
        );
        assert!(writes > 0);
    }
}
