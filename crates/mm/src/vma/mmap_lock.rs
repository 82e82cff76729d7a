//! The mmap_lock (a reader/writer semaphore with writer preference and contention reporting) and
//! [`MmLocking`], the per-mm bundle of every lock-side field: mm identity, mmap_lock, `mm_lock_seq`, and the
//! per-VMA-lock statistics.
//!
//! # `MmapLock`: the algorithm
//!
//! One atomic word holds the whole state:
//!
//! ```text
//! bit 0   WRITER    a writer owns the lock, or has claimed it and is waiting for readers to drain
//! bit 1   PARKED    threads are parked (or about to park) on key K, waiting for WRITER to clear
//! bit 2   DRAINING  the writer is parked (or about to park) on key K+1, waiting for the reader count to reach 0
//! bits 3+ readers   number of read holders
//! ```
//!
//! - A reader enters with a CAS that adds one reader, allowed only while WRITER is clear.
//! - A writer first claims WRITER (allowed while WRITER is clear, whatever the reader count), which at once
//!   shuts out new readers, then waits for the readers already inside to leave. This is the writer preference
//!   mmap_lock needs: a waiting writer gets in ahead of readers that arrive after it, so a stream of readers
//!   (e.g. `/proc` scanners) cannot starve `mmap()`.
//! - Waiting: spin a little, then set PARKED (or DRAINING) and park with a validation that re-checks the state
//!   under the parking queue's lock (see `park`); the releasing side clears the bit and unparks.
//! - `write_unlock` wakes the queue as `kernel/locking/rwsem.c: rwsem_mark_wake` does (the **hand-off**): if
//!   the first thread parked on K is a reader, every parked reader is granted its read hold by the unlocker, in
//!   the same atomic step that clears WRITER (under the parking queue's lock), and wakes already owning the
//!   lock; writers parked behind stay parked (PARKED stays set). If the first is a writer, only it is woken,
//!   to compete for WRITER. So, as in the kernel, a reader that is not running may hold the lock: a starved
//!   `/proc` reader granted the lock at a writer's unlock blocks the next writer until it is scheduled, the
//!   priority inversion mmap_lock is known for. Under loom, where parking is a yield, there is no hand-off
//!   (every waiter retries), which the models cover.
//! - `downgrade` turns the write hold into one read hold in a single RMW and wakes K, letting waiting readers in.
//!
//! `is_contended` reports queued waiters as `rwsem_is_contended` does: PARKED or DRAINING set, or a writer that
//! has claimed WRITER while readers are still inside (it is waiting, parked or spinning).
//!
//! Why not `parking_lot::RawRwLock`: it lets a parked writer block new readers, but it does not expose whether
//! anyone is waiting, which `mmap_lock_is_contended` (smaps_rollup's drop-and-resume) needs; and under loom it
//! cannot run. This lock is built on the loom seam and runs in the loom models.
//!
//! # `mm_lock_seq`
//!
//! A [`SeqCount`] advanced right after the write lock is taken (odd: write-locked) and right before it is
//! released or downgraded (even). Its odd value is the epoch of the current write section: a VMA whose
//! `vm_lock_seq` equals it is write-locked ([`super::lock`]), so advancing it at unlock releases every VMA write
//! lock at once (`vma_end_write_all`). The release store of the even value pairs with the acquire re-read in
//! `vma_start_read`, and also serves the speculative readers ([`MmLocking::speculate_try_begin`]).

use std::fmt;

use vmspace_rcu::SeqCount;
use vmspace_rcu::sync::{AtomicU64, Ordering};

use super::lockless::LocklessEpochs;
use super::park::{Parked, Waiter, park, park_as, spin_once, unpark_all, unpark_reader_batch};
use crate::vma::stats::VmaLockStats;

const WRITER: u64 = 1;
const PARKED: u64 = 2;
const DRAINING: u64 = 4;
const ONE_READER: u64 = 8;
const READER_SHIFT: u32 = 3;

#[inline]
fn readers(s: u64) -> u64 {
    s >> READER_SHIFT
}

/// A reader/writer semaphore with writer preference and contention reporting (the kernel's `rw_semaphore` as
/// mmap_lock uses it). See the module docs for the algorithm.
///
/// It is a raw lock: the releasing methods ([`MmapLock::read_unlock`], [`MmapLock::write_unlock`],
/// [`MmapLock::downgrade`]) are `unsafe`, because the lock is what makes the address space's write-locked state
/// (`MmapCell` in `space`) and the per-VMA write locks sound: a release by a thread that does not hold that
/// side would let a second writer in beside the first. Taking the lock is safe (a hold that is never released
/// only blocks others, as a leaked guard does). The address space and [`MmLocking`]'s guards are the callers.
pub struct MmapLock {
    state: AtomicU64,
    /// Threads enqueued on the waiters key right now (unit tests wait for it to order their threads).
    #[cfg(test)]
    queued: std::sync::atomic::AtomicU64,
}

impl MmapLock {
    /// An unlocked semaphore.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            #[cfg(test)]
            queued: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// An unlocked semaphore.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            #[cfg(test)]
            queued: std::sync::atomic::AtomicU64::new(0),
        }
    }

    #[inline]
    fn key_waiters(&self) -> usize {
        &self.state as *const AtomicU64 as usize
    }

    #[inline]
    fn key_drain(&self) -> usize {
        self.key_waiters() + 1
    }

    /// Takes a read hold if no writer owns or has claimed the lock.
    #[inline]
    pub fn try_read(&self) -> bool {
        // Relaxed: the CAS below carries the ordering.
        let mut s = self.state.load(Ordering::Relaxed);
        while s & WRITER == 0 {
            // Acquire on success: pairs with the release in `write_unlock`/`downgrade`, so the previous write
            // section happens-before this read section.
            match self.state.compare_exchange_weak(s, s + ONE_READER, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }

    /// Takes a read hold, waiting while a writer owns or has claimed the lock.
    pub fn read(&self) {
        if self.try_read() {
            return;
        }
        let mut spins = 0;
        loop {
            if self.try_read() {
                return;
            }
            if spin_once(&mut spins) {
                continue;
            }
            // Relaxed: only decides whether to announce ourselves; `park`'s validation re-checks under the queue
            // lock.
            let s = self.state.load(Ordering::Relaxed);
            if s & WRITER == 0 {
                continue;
            }
            if s & PARKED == 0
                // Relaxed: the bit is a hint to the unlocker; the queue lock orders the wake-up.
                && self.state.compare_exchange(s, s | PARKED, Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                continue;
            }
            let parked = park_as(self.key_waiters(), Waiter::Reader, || {
                // Relaxed under the queue lock: `write_unlock` changes the bits under the same lock.
                let s = self.state.load(Ordering::Relaxed);
                self.note_queued(s & WRITER != 0 && s & PARKED != 0)
            });
            if self.note_dequeued(parked) == Parked::Handed {
                // The leaving writer added our read hold before waking us. Acquire: reads its release RMW (or a
                // later RMW of its release sequence), so its write section happens-before our read section.
                let _ = self.state.load(Ordering::Acquire);
                return;
            }
            spins = 0;
        }
    }

    /// Counts a thread that a park validation lets into the queue (unit tests only); returns `parks`.
    #[inline]
    fn note_queued(&self, parks: bool) -> bool {
        #[cfg(test)]
        if parks {
            self.queued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        parks
    }

    /// Undoes [`MmapLock::note_queued`] when the park it counted returns; passes `p` on.
    #[inline]
    fn note_dequeued(&self, p: Parked) -> Parked {
        #[cfg(test)]
        if p != Parked::Not {
            self.queued.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
        p
    }

    /// Drops a read hold.
    ///
    /// # Safety
    ///
    /// The caller owns a read hold on this lock (taken by [`MmapLock::read`], [`MmapLock::try_read`] or a
    /// downgrade, or handed over at a `write_unlock`) and gives it up here: no guard or other call releases the
    /// same hold. Otherwise the count would drop a hold another thread relies on, and a writer could enter
    /// while that thread reads.
    ///
    /// ```compile_fail,E0133
    /// // A read unlock from safe code, without a hold: refused (a writer could enter beside a reader).
    /// let mm = vmspace_mm::Mm::new(vmspace_mm::MmConfig::default());
    /// let _r = mm.locking().read_lock();
    /// mm.locking().mmap_lock().read_unlock();
    /// ```
    #[inline]
    pub unsafe fn read_unlock(&self) {
        // Release: this read section happens-before the writer's section (pairs with the acquire loads of the
        // drain loop in `write`).
        let prev = self.state.fetch_sub(ONE_READER, Ordering::Release);
        debug_assert!(readers(prev) > 0, "MmapLock::read_unlock without a read hold");
        if readers(prev) == 1 && prev & DRAINING != 0 {
            unpark_all(self.key_drain());
        }
    }

    /// Takes the write hold if nobody holds the lock.
    #[inline]
    pub fn try_write(&self) -> bool {
        // Relaxed: the CAS below carries the ordering.
        let mut s = self.state.load(Ordering::Relaxed);
        while s & WRITER == 0 && readers(s) == 0 {
            // Acquire on success: pairs with the release of the previous holder's unlock.
            match self.state.compare_exchange_weak(s, s | WRITER, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }

    /// Takes the write hold: claims WRITER (shutting out new readers), then waits for the readers inside.
    pub fn write(&self) {
        // Acquire on success: pairs with the release of the previous holder's unlock.
        if self.state.compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return;
        }
        self.claim_writer();
        self.drain_readers();
    }

    fn claim_writer(&self) {
        let mut spins = 0;
        loop {
            // Relaxed: the CAS carries the ordering.
            let s = self.state.load(Ordering::Relaxed);
            if s & WRITER == 0 {
                // Acquire: pairs with the previous writer's release in `write_unlock`.
                if self
                    .state
                    .compare_exchange_weak(s, s | WRITER, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            if spin_once(&mut spins) {
                continue;
            }
            if s & PARKED == 0
                // Relaxed: a hint for the unlocker, see `read`.
                && self.state.compare_exchange(s, s | PARKED, Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                continue;
            }
            let parked = park_as(self.key_waiters(), Waiter::Writer, || {
                // Relaxed under the queue lock, as in `read`.
                let s = self.state.load(Ordering::Relaxed);
                self.note_queued(s & WRITER != 0 && s & PARKED != 0)
            });
            self.note_dequeued(parked);
            spins = 0;
        }
    }

    fn drain_readers(&self) {
        let mut spins = 0;
        loop {
            // Acquire: reading 0 readers synchronises with every reader's release `fetch_sub` (they form one
            // release sequence of RMWs), so their read sections happen-before the write section.
            let s = self.state.load(Ordering::Acquire);
            if readers(s) == 0 {
                if s & DRAINING != 0 {
                    // Relaxed: our own bit; nobody else reads it while WRITER is ours and no reader is inside.
                    self.state.fetch_and(!DRAINING, Ordering::Relaxed);
                }
                return;
            }
            if spin_once(&mut spins) {
                continue;
            }
            if s & DRAINING == 0
                // Relaxed: a CAS against a value with readers > 0; the last reader's `fetch_sub` either sees the
                // bit (and wakes us) or makes this CAS fail.
                && self.state.compare_exchange(s, s | DRAINING, Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                continue;
            }
            park(self.key_drain(), || {
                // Relaxed under the queue lock: the last reader decrements before it takes the same lock.
                readers(self.state.load(Ordering::Relaxed)) > 0
            });
            spins = 0;
        }
    }

    /// Drops the write hold and wakes the waiters: when the first queued waiter is a reader, every queued
    /// reader is handed a read hold before it runs (`rwsem_mark_wake`'s reader batch; writers stay queued),
    /// otherwise the first queued writer is woken to compete for the lock (module docs, "hand-off").
    ///
    /// # Safety
    ///
    /// The calling thread owns the write hold (taken by [`MmapLock::write`] or [`MmapLock::try_write`]) and
    /// gives it up here; nothing else releases it. A release by anyone else would let a second writer in
    /// while the owner still writes.
    ///
    /// ```compile_fail,E0133
    /// // Releasing another thread's write hold from safe code: refused.
    /// let mm = vmspace_mm::Mm::new(vmspace_mm::MmConfig::default());
    /// let _w = mm.locking().write_lock();
    /// mm.locking().mmap_lock().write_unlock();
    /// ```
    #[inline]
    pub unsafe fn write_unlock(&self) {
        // Release: the write section happens-before the next holder's section.
        if self.state.compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed).is_ok() {
            return;
        }
        // Someone set PARKED: wake under the queue lock, where the state changes in the same step as the grant.
        unpark_reader_batch(self.key_waiters(), |readers, more| {
            let parked = if more { PARKED } else { 0 };
            // Release: as above, for the next writer and for the readers granted here (they acquire-load this
            // value after waking). Waiters validate under the same queue lock, so none parks on stale bits.
            let prev = self
                .state
                .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                    Some(((s & !(WRITER | PARKED)) | parked) + readers * ONE_READER)
                })
                .unwrap_or_else(|s| s);
            debug_assert!(prev & WRITER != 0, "MmapLock::write_unlock without the write hold");
        });
    }

    /// Turns the write hold into a read hold without letting another writer in between.
    ///
    /// # Safety
    ///
    /// As for [`MmapLock::write_unlock`]: the caller owns the write hold (it then owns one read hold instead).
    ///
    /// ```compile_fail,E0133
    /// // Downgrading another thread's write hold from safe code: refused.
    /// let mm = vmspace_mm::Mm::new(vmspace_mm::MmConfig::default());
    /// let _w = mm.locking().write_lock();
    /// mm.locking().mmap_lock().downgrade();
    /// ```
    pub unsafe fn downgrade(&self) {
        // Release: the write section happens-before the sections of readers let in now.
        let prev = self
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                Some((s & !(WRITER | PARKED)) + ONE_READER)
            })
            .unwrap_or_else(|s| s);
        debug_assert!(prev & WRITER != 0 && readers(prev) == 0, "MmapLock::downgrade without the write hold");
        if prev & PARKED != 0 {
            unpark_all(self.key_waiters());
        }
    }

    /// True if another thread waits for the lock (the kernel's `rwsem_is_contended`).
    #[inline]
    pub fn is_contended(&self) -> bool {
        // Relaxed: a heuristic snapshot; callers that act on it re-take the lock.
        let s = self.state.load(Ordering::Relaxed);
        s & (PARKED | DRAINING) != 0 || (s & WRITER != 0 && readers(s) > 0)
    }

    /// True if a writer owns or has claimed the lock.
    #[inline]
    pub fn is_write_locked(&self) -> bool {
        // Relaxed: a snapshot for assertions and diagnostics.
        self.state.load(Ordering::Relaxed) & WRITER != 0
    }

    /// The number of read holders (a snapshot).
    #[inline]
    pub fn reader_count(&self) -> u64 {
        // Relaxed: a snapshot for assertions and diagnostics.
        readers(self.state.load(Ordering::Relaxed))
    }
}

impl Default for MmapLock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MmapLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: a diagnostic snapshot.
        let s = self.state.load(Ordering::Relaxed);
        f.debug_struct("MmapLock")
            .field("writer", &(s & WRITER != 0))
            .field("parked", &(s & PARKED != 0))
            .field("draining", &(s & DRAINING != 0))
            .field("readers", &readers(s))
            .finish()
    }
}

vmspace_rcu::statics! {
    /// Hands out mm identities: unique for the life of the process, never 0 (0 means "no mm" in `vm_mm`).
    static NEXT_MM_ID: AtomicU64 = AtomicU64::new(1);
}

/// The lock side of an `mm_struct`: its identity, mmap_lock, `mm_lock_seq` and per-VMA-lock statistics.
///
/// The address-space `Mm` embeds one. Every VMA-lock operation (`vma::lock`) takes it to compare a VMA's
/// `vm_lock_seq` against `mm_lock_seq` and its `vm_mm` against [`MmLocking::id`]. The writer's wait for VMA
/// readers is not here: it is keyed by the VMA's own address (see `park`), so a reader that took a
/// transient reference on a VMA recycled into another mm wakes that mm's writer without having to find the mm.
///
/// Layout: `mmap_lock` sits alone on its cache line (128 bytes with the adjacent-line prefetch pair). The
/// writer changes its word twice per call (lock, unlock) with locked read-modify-writes, while the per-VMA and
/// lockless readers never touch it on their fast paths but read `id` and `mm_lock_seq` for every VMA they
/// copy or lock: sharing one line, each of the writer's lock operations took the line back from a scanner
/// that had just read it (BENCHMARKS.md "Contention", the twin baseline). `mm_lock_seq` itself is written by
/// the writer and read by every per-VMA reader, as the kernel's is (`vma_start_read`), and stays beside `id`;
/// the lockless readers keep the epoch and the id they read and re-read `mm_lock_seq` only for a VMA locked
/// since (`vma::lockless`, "The cached epoch"), and their mm-level state (`lockless`) is on lines of its own.
///
/// Concurrency contract: `id` is immutable. `mmap_lock` and `mm_lock_seq` are the synchronisation themselves;
/// `mm_lock_seq` is advanced only by the write-lock holder (in `write_lock`, `write_unlock`, `downgrade`) and
/// read by anyone. The statistics are relaxed counters.
///
/// Soundness: the address space's write-locked state (`MmapCell` in `space`) and the VMA write locks rest on
/// these holds, so safe code can take them (the guards, or a raw lock that is never released, which only
/// blocks) but cannot release a hold it does not own: the raw releases (`raw_read_unlock`, `raw_write_unlock`,
/// `raw_write_downgrade`, and `MmapLock`'s own) are `unsafe fn`s, `mm_lock_seq`'s writer side is
/// crate-private, and an identity comes only from [`MmLocking::new`], so no second `MmLocking` can pass for
/// this one in `vma_start_read`'s `vm_mm` check.
pub struct MmLocking {
    id: u64,
    mmap_lock: vmspace_rcu::CachePadded<MmapLock>,
    mm_lock_seq: SeqCount,
    stats: VmaLockStats,
    /// The lockless readers' cached epoch (`vma::lockless`, "The cached epoch"): the epoch's high bits, which
    /// the write lock updates once per 2^19 write sections, and the epoch a reader last published; each on
    /// its own line.
    lockless: LocklessEpochs,
}

impl MmLocking {
    /// Lock state for a new mm with a fresh identity.
    ///
    /// The identity is the only way to make one: an mm's id is what `vma_start_read` compares a VMA's `vm_mm`
    /// with, so a second `MmLocking` carrying the id of a live mm (with its own, unheld locks) could read-lock
    /// that mm's write-locked VMAs. There is no constructor from a chosen id:
    ///
    /// ```compile_fail,E0599
    /// let forged = vmspace_mm::MmLocking::with_id(1);
    /// ```
    pub fn new() -> Self {
        // Relaxed: only uniqueness matters.
        let id = NEXT_MM_ID.fetch_add(1, Ordering::Relaxed);
        Self {
            id,
            mmap_lock: vmspace_rcu::CachePadded::new(MmapLock::new()),
            mm_lock_seq: SeqCount::new(),
            stats: VmaLockStats::new(),
            lockless: LocklessEpochs::new(),
        }
    }

    /// The mm identity stored in `vm_mm` of this mm's VMAs (never 0).
    #[inline]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The raw mmap_lock (for assertions and contention checks; take it through the methods below).
    #[inline]
    pub fn mmap_lock(&self) -> &MmapLock {
        &self.mmap_lock
    }

    /// `mm_lock_seq`: odd while the mmap write lock is held. Crate-private: its writer side (`write_begin`,
    /// `write_end`) is the VMA write locks' epoch, which only the mmap write-lock holder may advance; readers
    /// outside the crate get its value ([`MmLocking::lock_seq`]).
    ///
    /// ```compile_fail,E0624
    /// // Ending another thread's write epoch (releasing its VMA write locks) from outside: refused.
    /// let mm = vmspace_mm::Mm::new(vmspace_mm::MmConfig::default());
    /// mm.locking().mm_lock_seq().write_end();
    /// ```
    #[inline]
    pub(crate) fn mm_lock_seq(&self) -> &SeqCount {
        &self.mm_lock_seq
    }

    /// The lockless readers' cached-epoch state (`vma::lockless`, "The cached epoch").
    #[inline(always)]
    pub(crate) fn lockless_epochs(&self) -> &LocklessEpochs {
        &self.lockless
    }

    /// Opens a write epoch: `mm_lock_seq` becomes odd, and the lockless readers' epoch high bits follow it
    /// (`LocklessEpochs::note_write_begin`: a store once per 2^19 write sections).
    #[inline(always)]
    fn begin_write_epoch(&self) {
        self.mm_lock_seq.write_begin();
        self.lockless.note_write_begin(self.mm_lock_seq.raw_read());
    }

    /// The current value of `mm_lock_seq` (an acquire load): odd while the mmap write lock is held; it grows by
    /// 2 with every write epoch.
    #[inline]
    pub fn lock_seq(&self) -> u64 {
        self.mm_lock_seq.raw_read()
    }

    /// The per-VMA-lock statistics of this mm.
    #[inline]
    pub fn stats(&self) -> &VmaLockStats {
        &self.stats
    }

    /// `mmap_read_lock`: takes mmap_lock for read, waiting behind any writer that claimed it first.
    #[doc(alias = "mmap_read_lock")]
    #[inline]
    pub fn read_lock(&self) -> MmapReadGuard<'_> {
        self.mmap_lock.read();
        MmapReadGuard { mm: self }
    }

    /// `mmap_read_trylock`.
    #[doc(alias = "mmap_read_trylock")]
    #[inline]
    pub fn try_read_lock(&self) -> Option<MmapReadGuard<'_>> {
        self.mmap_lock.try_read().then(|| MmapReadGuard { mm: self })
    }

    /// `mmap_write_lock`: takes mmap_lock for write and opens a new write epoch (`mm_lock_seq` becomes odd).
    #[doc(alias = "mmap_write_lock")]
    #[inline]
    pub fn write_lock(&self) -> MmapWriteGuard<'_> {
        self.mmap_lock.write();
        self.begin_write_epoch();
        MmapWriteGuard { mm: self }
    }

    /// `mmap_write_trylock`.
    #[doc(alias = "mmap_write_trylock")]
    #[inline]
    pub fn try_write_lock(&self) -> Option<MmapWriteGuard<'_>> {
        if self.mmap_lock.try_write() {
            self.begin_write_epoch();
            Some(MmapWriteGuard { mm: self })
        } else {
            None
        }
    }

    /// Raw `mmap_read_lock` for callers that cannot hold a guard (a reader that keeps the lock across calls).
    /// Pair it with [`MmLocking::raw_read_unlock`].
    #[inline]
    pub fn raw_read_lock(&self) {
        self.mmap_lock.read();
    }

    /// Raw `mmap_read_unlock`.
    ///
    /// # Safety
    ///
    /// The caller owns a read hold on this mm's mmap_lock, taken with [`MmLocking::raw_read_lock`] (or held by
    /// a guard it forgot), and gives it up here: no guard or other call releases the same hold. A release of
    /// a hold the caller does not own lets a writer in while another thread reads state only the lock
    /// protects.
    ///
    /// ```compile_fail,E0133
    /// // A read unlock from safe code: refused.
    /// let mm = vmspace_mm::Mm::new(vmspace_mm::MmConfig::default());
    /// let _r = mm.locking().read_lock();
    /// mm.locking().raw_read_unlock();
    /// ```
    #[doc(alias = "mmap_read_unlock")]
    #[inline]
    pub unsafe fn raw_read_unlock(&self) {
        // SAFETY: the caller owns a read hold (this function's contract).
        unsafe { self.mmap_lock.read_unlock() };
    }

    /// Raw `mmap_write_lock`. Pair it with [`MmLocking::raw_write_unlock`] or [`MmLocking::raw_write_downgrade`].
    #[inline]
    pub fn raw_write_lock(&self) {
        self.mmap_lock.write();
        self.begin_write_epoch();
    }

    /// Raw `mmap_write_unlock`: ends the write epoch (releasing every VMA write lock at once) and the write
    /// hold.
    ///
    /// # Safety
    ///
    /// The calling thread owns the write hold, taken with [`MmLocking::raw_write_lock`] (or held by a write
    /// guard it forgot), and gives it up here; nothing else releases it. A release by any other thread lets a
    /// second writer in while the owner still changes the address space (`MmapCell`'s exclusive access and the
    /// VMA write locks both rest on this hold).
    ///
    /// ```compile_fail,E0133
    /// // Releasing the mmap write lock from safe code: refused (a second writer could enter).
    /// let mm = vmspace_mm::Mm::new(vmspace_mm::MmConfig::default());
    /// mm.locking().raw_write_unlock();
    /// ```
    #[doc(alias = "mmap_write_unlock")]
    #[inline]
    pub unsafe fn raw_write_unlock(&self) {
        // SAFETY: the caller owns the write hold (this function's contract).
        unsafe {
            self.vma_end_write_all();
            self.mmap_lock.write_unlock();
        }
    }

    /// Raw `mmap_write_downgrade`: ends the write epoch and keeps a read hold.
    ///
    /// # Safety
    ///
    /// As for [`MmLocking::raw_write_unlock`]: the calling thread owns the write hold (and owns a read hold
    /// afterwards, to be released with [`MmLocking::raw_read_unlock`]).
    ///
    /// ```compile_fail,E0133
    /// // Downgrading the mmap write lock from safe code: refused.
    /// let mm = vmspace_mm::Mm::new(vmspace_mm::MmConfig::default());
    /// mm.locking().raw_write_downgrade();
    /// ```
    #[doc(alias = "mmap_write_downgrade")]
    #[inline]
    pub unsafe fn raw_write_downgrade(&self) {
        // SAFETY: the caller owns the write hold (this function's contract).
        unsafe {
            self.vma_end_write_all();
            self.mmap_lock.downgrade();
        }
    }

    /// `vma_end_write_all`: `mm_lock_seq` becomes even, so no VMA's `vm_lock_seq` equals it any more. Release:
    /// pairs with the acquire re-read of `mm_lock_seq` in `vma_start_read` (a reader that sees the even value
    /// sees every change made under the VMA write locks).
    ///
    /// # Safety
    ///
    /// The calling thread owns the write hold of `mmap_lock` (only its owner may end the epoch).
    #[inline]
    unsafe fn vma_end_write_all(&self) {
        debug_assert!(self.mmap_lock.is_write_locked());
        self.mm_lock_seq.write_end();
    }

    /// True if a writer holds mmap_lock for write, as far as `mm_lock_seq` shows (odd). Meaningful as an
    /// assertion by the holder itself.
    #[inline]
    pub fn is_write_locked(&self) -> bool {
        // `raw_read` is an acquire load: harmless here.
        self.mm_lock_seq.raw_read() & 1 == 1
    }

    /// `mmap_lock_is_contended`: true if some thread waits for mmap_lock.
    #[doc(alias = "mmap_lock_is_contended")]
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.mmap_lock.is_contended()
    }

    /// `mmap_lock_speculate_try_begin`: the current `mm_lock_seq` if no writer holds mmap_lock, else `None`.
    /// A reader that copies state without locks validates the copy with
    /// [`MmLocking::speculate_retry`].
    #[doc(alias = "mmap_lock_speculate_try_begin")]
    #[inline]
    pub fn speculate_try_begin(&self) -> Option<u64> {
        self.mm_lock_seq.try_read_begin()
    }

    /// `mmap_lock_speculate_retry`: true if a writer took mmap_lock since `seq` was read (the copy is stale).
    #[doc(alias = "mmap_lock_speculate_retry")]
    #[inline]
    pub fn speculate_retry(&self, seq: u64) -> bool {
        self.mm_lock_seq.read_retry(seq)
    }
}

impl Default for MmLocking {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MmLocking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmLocking")
            .field("id", &self.id)
            .field("mmap_lock", &*self.mmap_lock)
            .field("mm_lock_seq", &self.mm_lock_seq.raw_read())
            .finish()
    }
}

/// A read hold on mmap_lock; released on drop (`mmap_read_unlock`).
#[must_use = "dropping the guard releases mmap_lock at once"]
pub struct MmapReadGuard<'a> {
    mm: &'a MmLocking,
}

impl<'a> MmapReadGuard<'a> {
    /// The mm whose lock this is.
    #[inline]
    pub fn mm(&self) -> &'a MmLocking {
        self.mm
    }
}

impl Drop for MmapReadGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard owns one read hold (only `read_lock`, `try_read_lock` and `downgrade` make one, each
        // after taking a hold) and is dropped once.
        unsafe { self.mm.mmap_lock.read_unlock() };
    }
}

impl fmt::Debug for MmapReadGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MmapReadGuard(mm {})", self.mm.id)
    }
}

/// The write hold on mmap_lock with an open write epoch; on drop, `mmap_write_unlock` (which also releases every
/// VMA write lock taken under it).
#[must_use = "dropping the guard releases mmap_lock at once"]
pub struct MmapWriteGuard<'a> {
    mm: &'a MmLocking,
}

impl<'a> MmapWriteGuard<'a> {
    /// The mm whose lock this is.
    #[inline]
    pub fn mm(&self) -> &'a MmLocking {
        self.mm
    }

    /// `mmap_write_downgrade`: releases every VMA write lock and keeps mmap_lock for read.
    #[inline]
    pub fn downgrade(self) -> MmapReadGuard<'a> {
        let mm = self.mm;
        std::mem::forget(self);
        // SAFETY: the guard owned the write hold (only `write_lock` and `try_write_lock` make one, after taking
        // it); it is forgotten above, so its drop does not release the hold again; the read guard returned owns
        // the read hold the downgrade leaves.
        unsafe { mm.raw_write_downgrade() };
        MmapReadGuard { mm }
    }
}

impl Drop for MmapWriteGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard owns the write hold (see `downgrade`) and is dropped once.
        unsafe { self.mm.raw_write_unlock() };
    }
}

impl fmt::Debug for MmapWriteGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MmapWriteGuard(mm {})", self.mm.id)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64 as StdU64, Ordering as O};
    use std::time::Duration;

    use super::*;

    fn wait_until(f: impl Fn() -> bool) {
        let t = std::time::Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(10), "condition never became true");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn seq_is_odd_while_write_locked() {
        let mm = MmLocking::new();
        assert_ne!(mm.id(), 0);
        assert_eq!(mm.lock_seq(), 0);
        let w = mm.write_lock();
        assert_eq!(mm.lock_seq(), 1);
        assert!(mm.is_write_locked());
        assert!(mm.speculate_try_begin().is_none());
        drop(w);
        assert_eq!(mm.lock_seq(), 2);
        let s = mm.speculate_try_begin().expect("unlocked");
        assert!(!mm.speculate_retry(s));
        drop(mm.write_lock());
        assert!(mm.speculate_retry(s));
    }

    #[test]
    fn try_variants_and_downgrade() {
        let mm = MmLocking::new();
        let r1 = mm.read_lock();
        let r2 = mm.try_read_lock().expect("shared");
        assert!(mm.try_write_lock().is_none());
        assert_eq!(mm.mmap_lock().reader_count(), 2);
        drop((r1, r2));
        let w = mm.try_write_lock().expect("free");
        assert!(mm.try_read_lock().is_none());
        assert!(mm.try_write_lock().is_none());
        let r = w.downgrade();
        assert_eq!(mm.lock_seq() & 1, 0);
        assert!(mm.try_read_lock().is_some());
        assert!(mm.try_write_lock().is_none());
        // Debug shows the lock word and the sequence count as they are: one reader, the count even (written
        // once and downgraded: 1, then 2).
        let lock = |writer: bool, readers: u32| {
            format!("MmapLock {{ writer: {writer}, parked: false, draining: false, readers: {readers} }}")
        };
        let debug = |state: String, seq: u32| {
            format!("MmLocking {{ id: {}, mmap_lock: {state}, mm_lock_seq: {seq} }}", mm.id())
        };
        assert_eq!(format!("{mm:?}"), debug(lock(false, 1), 2));
        drop(r);
        let w = mm.try_write_lock().expect("free");
        assert_eq!(format!("{mm:?}"), debug(lock(true, 0), 3));
        drop(w);
        assert_eq!(format!("{mm:?}"), debug(lock(false, 0), 4));
    }

    #[test]
    fn waiting_writer_blocks_new_readers_and_reports_contention() {
        let mm = MmLocking::new();
        let r = mm.read_lock();
        assert!(!mm.is_contended());
        let writer_in = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _w = mm.write_lock();
                writer_in.store(true, O::SeqCst);
            });
            // The writer has claimed the lock and waits for our read hold.
            wait_until(|| mm.mmap_lock().is_write_locked());
            assert!(mm.is_contended(), "a waiting writer must show as contention");
            // Writer preference: a new reader is refused while the writer waits.
            assert!(mm.try_read_lock().is_none());
            assert!(!writer_in.load(O::SeqCst));
            drop(r);
        });
        assert!(writer_in.load(O::SeqCst));
        assert!(!mm.is_contended());
    }

    #[test]
    fn parked_reader_is_woken_by_write_unlock() {
        let mm = MmLocking::new();
        let w = mm.write_lock();
        let got = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _r = mm.read_lock();
                got.store(true, O::SeqCst);
            });
            wait_until(|| mm.is_contended());
            assert!(!got.load(O::SeqCst));
            drop(w);
        });
        assert!(got.load(O::SeqCst));
    }

    /// The hand-off: readers queued behind a writer own the lock the moment `write_unlock` returns, before
    /// they run (`rwsem_mark_wake`), and a writer queued after them waits for them to leave. Without the
    /// hand-off the count right after the unlock depends on whether the woken threads have run yet.
    #[test]
    #[cfg(not(miri))]
    fn queued_readers_are_handed_the_lock_at_write_unlock() {
        let mm = MmLocking::new();
        let w = mm.write_lock();
        let release = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let _r = mm.read_lock();
                    while !release.load(O::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
            }
            let queued = || mm.mmap_lock().queued.load(O::SeqCst);
            wait_until(|| queued() == 2);
            s.spawn(|| drop(mm.write_lock()));
            wait_until(|| queued() == 3);
            drop(w);
            // Read before releasing them: a failed assertion must not leave the readers waiting.
            let granted = mm.mmap_lock().reader_count();
            // The writer woken behind them claims the writer bit and waits for them to leave.
            let t = std::time::Instant::now();
            while !mm.mmap_lock().is_write_locked() && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let (claimed, inside, contended) =
                (mm.mmap_lock().is_write_locked(), mm.mmap_lock().reader_count(), mm.is_contended());
            release.store(true, O::SeqCst);
            assert_eq!(granted, 2, "both queued readers hold the lock at once");
            assert!(claimed && inside == 2 && contended, "the writer queued after them waits for them");
        });
        assert_eq!(mm.mmap_lock().reader_count(), 0);
        assert!(!mm.is_contended());
    }

    #[test]
    fn mutual_exclusion_under_contention() {
        let mm = MmLocking::new();
        // A two-word invariant: a == b outside write sections.
        let a = StdU64::new(0);
        let b = StdU64::new(0);
        let iters = 2000;
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for i in 0..iters {
                        let _w = mm.write_lock();
                        let v = a.load(O::Relaxed);
                        a.store(v + 1, O::Relaxed);
                        if i % 7 == 0 {
                            std::thread::yield_now();
                        }
                        b.store(v + 1, O::Relaxed);
                    }
                });
            }
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..iters {
                        let _r = mm.read_lock();
                        assert_eq!(a.load(O::Relaxed), b.load(O::Relaxed));
                    }
                });
            }
        });
        assert_eq!(a.load(O::Relaxed), 2 * iters);
        assert_eq!(mm.lock_seq(), 4 * iters);
        assert!(!mm.is_contended());
    }

    #[test]
    fn mixed_operations_make_progress() {
        // Readers, writers, downgraders and try-lockers on one lock; a watchdog turns a lost wake-up (a hang)
        // into a failure.
        let mm = std::sync::Arc::new(MmLocking::new());
        let a = std::sync::Arc::new(StdU64::new(0));
        let b = std::sync::Arc::new(StdU64::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        for t in 0..4u64 {
            let (mm, a, b, tx) = (mm.clone(), a.clone(), b.clone(), tx.clone());
            std::thread::spawn(move || {
                let mut x = 0x2545_f491_4f6c_dd1d_u64 ^ t;
                for _ in 0..3000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    match x % 6 {
                        0 | 1 => {
                            let _r = mm.read_lock();
                            assert_eq!(a.load(O::Relaxed), b.load(O::Relaxed));
                        }
                        2 => {
                            let _w = mm.write_lock();
                            let v = a.load(O::Relaxed) + 1;
                            a.store(v, O::Relaxed);
                            b.store(v, O::Relaxed);
                        }
                        3 => {
                            let w = mm.write_lock();
                            let v = a.load(O::Relaxed) + 1;
                            a.store(v, O::Relaxed);
                            b.store(v, O::Relaxed);
                            let _r = w.downgrade();
                            assert_eq!(a.load(O::Relaxed), v, "a writer got in under a downgraded hold");
                        }
                        4 => {
                            if let Some(_w) = mm.try_write_lock() {
                                let v = a.load(O::Relaxed) + 1;
                                a.store(v, O::Relaxed);
                                b.store(v, O::Relaxed);
                            }
                        }
                        _ => {
                            if let Some(_r) = mm.try_read_lock() {
                                assert_eq!(a.load(O::Relaxed), b.load(O::Relaxed));
                            }
                        }
                    }
                }
                tx.send(()).unwrap();
            });
        }
        for _ in 0..4 {
            rx.recv_timeout(Duration::from_secs(60)).expect("a thread hung on the mmap lock");
        }
        assert!(!mm.is_contended());
        assert_eq!(mm.mmap_lock().reader_count(), 0);
        assert!(!mm.mmap_lock().is_write_locked());
    }
}
