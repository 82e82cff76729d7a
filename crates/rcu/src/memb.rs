//! Read-side guards and deferred reclamation with asymmetric barriers (the "memb" flavour of user-space RCU).
//!
//! # Why not crossbeam-epoch or seize
//!
//! The kernel's `rcu_read_lock()` is nearly free, and the maple tree's lookup is judged against that: a lookup
//! that takes its own guard must beat `BTreeMap` (about 15-20 ns for 250 ranges on the project's machine).
//! Entering a critical section with `crossbeam_epoch::pin()` costs 14-19 ns there, and `seize`'s
//! `Collector::enter` 15 ns (measured in one run, with nesting at about 4 ns): either one alone is as
//! expensive as the whole lookup it protects. Both pay for a store-load fence (or equivalent bookkeeping) on
//! every entry. This flavour moves that fence to the writer, as liburcu's `urcu-memb` does: a reader announces
//! itself with a plain store and a compiler barrier; the reclaimer issues `membarrier(PRIVATE_EXPEDITED)`,
//! which executes a full barrier on every CPU running a thread of this process, before it looks at the
//! readers' announcements.
//!
//! # Protocol
//!
//! Shared state: the grace-period counter `GP_SEQ` (even, advanced by 2) and one [`Record`] per thread in a
//! push-only registry. A record's `ctr` is 0 when its thread is outside any critical section, otherwise the
//! value of `GP_SEQ` it read on entry, plus 1.
//!
//! ```text
//! reader (pin / drop / repin)                reclaimer (advance + poll)
//!   g = GP_SEQ.load(Acquire)                   retired objects were unpublished earlier (program order or
//!   ctr = g | 1            (release)             the reclaim mutex orders them before this point)
//!   compiler barrier                           target = GP_SEQ += 2                  (release)
//!   ... loads of shared pointers ...           membarrier(PRIVATE_EXPEDITED)        (heavy barrier)
//!   ctr = 0                (release)           for each record: ctr = load(Acquire)
//!                                                 ctr == 0 or ctr - 1 >= target: not holding the batch
//!                                              if none holds it: free the batch
//! ```
//!
//! Why this is safe, case by case, for a reader R and an object retired before the advance to `target`:
//! - R's `ctr` store executed before the heavy barrier reached R's CPU: the barrier makes it visible before
//!   `membarrier` returns, so the scan sees R (with its old snapshot) and keeps the batch.
//! - R's `ctr` store executed after that point: every later instruction of R, including its pointer loads,
//!   executes after a full barrier that itself follows the unpublishing stores, so R cannot find the object.
//! - R read `GP_SEQ >= target`: its acquire load synchronises with the release increment, which follows the
//!   unpublishing stores; again R cannot find the object.
//! - R leaves: its release store of 0 orders all of its loads before the reclaimer's acquire load that reads 0,
//!   hence before the free.
//! - R left and re-entered (or repinned) before the scan, which reads R's *new* `ctr` (`>= target`, so the
//!   batch is freed): the loads of R's previous section must still happen before the free. The store of 0
//!   that ended that section does not help, because the scan did not read it (and in the language's memory
//!   model a later plain store by the same thread does not continue its release sequence). So the entry store
//!   is itself a release store: the scan's acquire load that reads it synchronises with it, and everything R
//!   did before it, its previous section included, happens before the free. On x86 a release store is the
//!   same `mov` as a relaxed one; the loom model `entry_store_orders_previous_section` fails with `Relaxed`.
//!
//! Writers never wait for readers: a batch whose readers are still inside stays queued and is polled again at
//! the next advance or [`Guard::flush`]. A reader preempted inside a critical section delays reclamation, never
//! a writer. [`synchronize`] (a blocking wait for a grace period) exists for tests and teardown only. The one
//! bounded exception is [`expedite`]: a writer that has just retired a large batch may spend a few microseconds
//! re-scanning the records so that the batch is freed at once (the kernel's `tlb_finish_mmu` after its
//! shootdown), and gives up, leaving the batch queued, when a reader stays longer. Nor does a writer pay for a
//! reader's long section afterwards: one call frees at most [`FREE_PER_CALL`] objects beyond its first due batch,
//! so the backlog a preempted reader held back is freed over the following calls.
//!
//! If `membarrier` is unavailable (old kernel, seccomp), every reader issues a full fence on entry instead and
//! the heavy barrier becomes a full fence: slower, equally correct. Miri and loom (neither has `membarrier`)
//! always take this fallback; its orderings are the fast path's with the compiler barrier and `membarrier`
//! strengthened to `fence(SeqCst)`, so the loom models in `tests/loom.rs` check the real reader and reclaimer
//! code of this module.
//!
//! # Records
//!
//! A thread claims a record on its first [`pin`] (through its thread-local handle) and keeps it until it exits.
//! Invariants:
//! - A record is owned by at most one thread at a time; `nesting` and the stores to `ctr` belong to the owner.
//!   Ownership (`owner`: `FREE`, `OWNED`, `ORPHANED`, `REAPING`, with the owner's thread id and a claim
//!   generation) passes between threads only by a release store of `FREE` and an acquire CAS.
//! - The thread-local handle and every live guard are references to the record: it is freed (`FREE`) only when
//!   the handle is gone *and* `nesting` is 0. Thread-local destructors run in an unspecified order, so a guard
//!   kept in another thread-local may drop after the handle: the handle's destructor then marks the record
//!   `ORPHANED` and the last guard frees it (crossbeam-epoch keeps its `Local` alive the same way). A guard
//!   taken during teardown, after the handle is gone, claims an `ORPHANED` record of its own.
//! - `nesting` never wraps: a `pin` that would take it past `u32::MAX` aborts the process (in every build; a
//!   wrapped count would let a later guard's drop end the section under the older guards).
//! - A leaked guard (`mem::forget`) keeps its section open while its thread lives, as a kernel task inside
//!   `rcu_read_lock()` does. Once the thread has exited (the kernel reports its id gone: `tgkill(pid, tid, 0)`
//!   fails with `ESRCH`, which happens after the thread's last instruction), a scan that finds its `ORPHANED`
//!   record still inside a section reaps it: ends the section and frees the record, as
//!   `kernel/rcu/tree_plugin.h: exit_rcu` ends the section of a task that exits inside one. So a dead thread
//!   never holds up a grace period and [`synchronize`] cannot hang on one. A live thread's record is never
//!   reaped: a thread id is checked only while the record is `ORPHANED` with that id and generation (the
//!   reaper's CAS fails otherwise), and ids are reused only after the kernel has cycled through `pid_max`.
//!   Without `tgkill` (Miri) a leaked guard's record is never reaped, which only delays reclamation.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::ptr;
#[cfg(not(any(loom, miri)))]
use std::sync::Once;
#[cfg(not(any(loom, miri)))]
use std::sync::atomic::compiler_fence;

use crate::sync::{AtomicPtr, AtomicU64, Mutex, Ordering, fence};

/// Retired objects a thread accumulates before it starts a grace period for them.
const BAG_THRESHOLD: usize = 256;

/// Retired objects one [`advance`] (and one [`expedite`]) frees at most beyond its first due batch (which goes
/// whole). A reader preempted inside a section holds back every batch retired meanwhile; when it leaves, the
/// backlog is due at once, and freeing all of it in the next writer's call (observed: 0.56-0.72 ms for a
/// starved `/proc` scanner's backlog, in a call that otherwise takes microseconds) would make that writer pay
/// for the reader's preemption. So a call takes the oldest due batch and then at most this many objects of the
/// next ones, splitting a batch if need be; the rest stays queued, due, for later calls. Each call queues at
/// most one batch, so a backlog shrinks by this many objects per call until it is gone. The kernel runs its
/// callbacks off the caller's path (`rcu_do_batch`, in softirq or the `rcuo` kthreads, also a limited number at
/// a time). [`synchronize`] frees everything due.
const FREE_PER_CALL: usize = 64;

crate::statics! {
    /// The grace-period counter. Even; starts at 2 so that `ctr == 0` can mean "outside".
    static GP_SEQ: AtomicU64 = AtomicU64::new(2);
    /// Head of the push-only list of reader records (records are reused, never freed).
    static REGISTRY: AtomicPtr<Record> = AtomicPtr::new(ptr::null_mut());
    /// Batches waiting for their grace period, oldest first.
    static RECLAIM: Mutex<VecDeque<Batch>> = Mutex::new(VecDeque::new());
}

#[cfg(not(any(loom, miri)))]
crate::statics! {
    /// Set once at start-up: whether `membarrier(PRIVATE_EXPEDITED)` is registered and usable.
    static FAST: crate::sync::AtomicBool = crate::sync::AtomicBool::new(false);
}
#[cfg(not(any(loom, miri)))]
static INIT: Once = Once::new();

/// `Record::owner` tag: no thread owns the record; any thread may claim it.
const FREE: u64 = 0;
/// `Record::owner` tag: a live thread's thread-local handle owns the record.
const OWNED: u64 = 1;
/// `Record::owner` tag: the owning thread's handle is gone (thread teardown) but guards remain; the last guard
/// to drop frees the record, or a reclaimer does once the thread has exited.
const ORPHANED: u64 = 2;
/// `Record::owner` tag: a reclaimer is ending the section of an exited thread (see [`Record::reap`]).
const REAPING: u64 = 3;
/// Bits of `Record::owner`: tag in bits 0-1, owner's kernel thread id in bits 2-33, claim generation above.
const TAG_MASK: u64 = 3;
const TID_SHIFT: u32 = 2;
const GEN_SHIFT: u32 = 34;

/// One thread's announcement. 128-byte aligned so that two threads' records never share a cache line (nor an
/// adjacent-line prefetch pair).
#[repr(C, align(128))]
struct Record {
    /// 0 outside a critical section, else the `GP_SEQ` read on entry plus 1.
    /// Written only by the owning thread (release stores); read by reclaimers (acquire) during a scan.
    ctr: AtomicU64,
    /// Nesting depth of the owner's guards, which are also the record's references: the record is freed when
    /// its thread-local handle is gone and this is 0. Only the owner reads or writes it (ownership passes
    /// through `owner`'s release/acquire pair).
    nesting: Cell<u32>,
    /// Who owns the record: a tag (`FREE`, `OWNED`, `ORPHANED`, `REAPING`), the owner's thread id and a claim
    /// generation (so that a reclaimer's CAS on an orphaned record cannot succeed on a later claim of it).
    owner: AtomicU64,
    /// Next record in the registry; written once before the record is published.
    next: AtomicPtr<Record>,
}

// SAFETY: `nesting` is the only non-Sync field; it is touched only by the thread that owns the record (the one
// whose claim CAS on `owner` succeeded), and ownership passes between threads only through `owner`'s
// release/acquire pair. Every other field is atomic.
unsafe impl Sync for Record {}

impl Record {
    /// Claims a free record or registers a new one, owned by this thread's handle (`OWNED`) or, during thread
    /// teardown when there is no handle any more, by the guard about to be created (`ORPHANED`). Records are
    /// never freed: type-stable for the process's lifetime.
    fn acquire(tag: u64) -> &'static Record {
        init_barriers_once();
        let tid = current_tid();
        // Acquire: pairs with the release CAS that published each record, so `next` is initialised.
        let mut cur = REGISTRY.load(Ordering::Acquire);
        while !cur.is_null() {
            // SAFETY: records in the registry are leaked boxes, never freed.
            let rec = unsafe { &*cur };
            // Relaxed: only a hint; the CAS below decides.
            let word = rec.owner.load(Ordering::Relaxed);
            if word & TAG_MASK == FREE {
                let claimed = ((word >> GEN_SHIFT).wrapping_add(1) << GEN_SHIFT) | tid << TID_SHIFT | tag;
                // Acquire on success: pairs with the release store that freed the record (`release` or `reap`),
                // so the previous owner's uses of `nesting` and `ctr` happen before ours.
                if rec.owner.compare_exchange(word, claimed, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    // A record reaped from an exited thread may have been left nested.
                    rec.nesting.set(0);
                    return rec;
                }
            }
            cur = rec.next.load(Ordering::Relaxed);
        }
        let rec: &'static Record = Box::leak(Box::new(Record {
            ctr: AtomicU64::new(0),
            nesting: Cell::new(0),
            owner: AtomicU64::new(tid << TID_SHIFT | tag),
            next: AtomicPtr::new(ptr::null_mut()),
        }));
        let mut head = REGISTRY.load(Ordering::Relaxed);
        loop {
            rec.next.store(head, Ordering::Relaxed);
            // Release: publishes the initialised record to scanners and to `acquire` (their acquire loads).
            match REGISTRY.compare_exchange_weak(
                head,
                rec as *const Record as *mut Record,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return rec,
                Err(h) => head = h,
            }
        }
    }

    /// Gives the record back for any thread to claim. The owner calls it with `nesting == 0` and `ctr == 0`.
    fn release(&self) {
        debug_assert_eq!(self.nesting.get(), 0);
        // Relaxed: the owner's own word (a reclaimer changes it only once the owner has exited).
        let word = self.owner.load(Ordering::Relaxed);
        // Release: pairs with the acquire CAS of the next owner.
        self.owner.store(word & !TAG_MASK | FREE, Ordering::Release);
    }

    /// The owner's thread-local handle is going away (thread exit): free the record now if no guard is left,
    /// otherwise leave it to the last guard (a guard kept in a thread-local destroyed after ours) or, if that
    /// guard was leaked, to a reclaimer once the thread has exited.
    fn handle_dropped(&self) {
        if self.nesting.get() == 0 {
            self.release();
        } else {
            // Relaxed: the owner's own word, as in `release`.
            let word = self.owner.load(Ordering::Relaxed);
            // Release: pairs with the acquire CAS in `reap`, so this thread's record accesses happen before a
            // reaper's (the reaper also waits for the kernel to report the thread gone).
            self.owner.store(word & !TAG_MASK | ORPHANED, Ordering::Release);
        }
    }

    /// Whether the owner's handle is gone, so that the last guard must free the record. Owner only.
    #[inline]
    fn orphaned(&self) -> bool {
        // Relaxed: the owner's own word.
        self.owner.load(Ordering::Relaxed) & TAG_MASK == ORPHANED
    }

    /// Ends the read-side section of an orphaned record whose thread has exited (a guard was leaked), as the
    /// kernel's `kernel/rcu/tree_plugin.h: exit_rcu` ends the section of a task that exits inside one, and frees
    /// the record. Returns whether it did. `word` is the `owner` value the caller read.
    fn reap(&self, word: u64) -> bool {
        if word & TAG_MASK != ORPHANED || thread_alive((word >> TID_SHIFT) as u32) {
            return false;
        }
        // Acquire: pairs with the owner's release store of ORPHANED. The generation in `word` makes the CAS
        // fail if the record was freed and claimed again since it was read.
        if self
            .owner
            .compare_exchange(word, word & !TAG_MASK | REAPING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Relaxed: nobody else writes `ctr` now (the owner has exited; claimers wait for FREE), and the release
        // store below publishes it to the next owner.
        self.ctr.store(0, Ordering::Relaxed);
        // Release: pairs with the acquire CAS of the next owner, who resets `nesting`.
        self.owner.store(word & !TAG_MASK | FREE, Ordering::Release);
        true
    }
}

/// The kernel thread id of the caller (0 where there is no such notion: Miri, loom).
fn current_tid() -> u64 {
    #[cfg(not(any(loom, miri)))]
    {
        u64::from(rustix::thread::gettid().as_raw_nonzero().get().unsigned_abs())
    }
    #[cfg(any(loom, miri))]
    {
        0
    }
}

/// Whether thread `tid` of this process still exists. Conservative: says yes whenever it cannot tell (Miri and
/// loom cannot; `tgkill` other than `ESRCH` fails), which may delay reclamation but never ends a live thread's
/// section. A thread id is reused only after the kernel has cycled through `pid_max` ids.
fn thread_alive(tid: u32) -> bool {
    #[cfg(not(any(loom, miri)))]
    {
        // Signal 0 checks existence and permission only. `tgkill` (not `kill`) so that an id reused by another
        // process does not count.
        let pid = rustix::process::getpid().as_raw_nonzero().get();
        // SAFETY: `tgkill` with signal 0 sends nothing; it reads its three integer arguments only.
        let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid as libc::c_long, 0) };
        !(rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
    }
    #[cfg(any(loom, miri))]
    {
        let _ = tid;
        true
    }
}

/// Registers this process for expedited private membarriers, or records that they are unavailable.
#[cfg(not(any(loom, miri)))]
fn init_barriers() {
    use rustix::thread::{MembarrierCommand, membarrier};
    let ok = membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
        && membarrier(MembarrierCommand::PrivateExpedited).is_ok();
    // Relaxed: `INIT.call_once` orders this store before every thread's first pin (each pin passes through
    // `Record::acquire`, which runs `call_once`).
    FAST.store(ok, Ordering::Relaxed);
}

/// Runs the one-time `membarrier` registration (no-op where readers always fence: Miri and loom, which have no
/// `membarrier`).
#[inline]
fn init_barriers_once() {
    #[cfg(not(any(loom, miri)))]
    INIT.call_once(init_barriers);
}

/// Whether readers use the compiler-only barrier (membarrier registered). Always false under Miri and loom:
/// they check the fence fallback, whose orderings are the same with the compiler barrier and `membarrier`
/// replaced by full fences.
#[inline]
fn fast() -> bool {
    #[cfg(not(any(loom, miri)))]
    {
        // Relaxed: see `init_barriers`.
        FAST.load(Ordering::Relaxed)
    }
    #[cfg(any(loom, miri))]
    {
        false
    }
}

/// The writer-side half of the asymmetric pair: after it returns, every other thread of the process has
/// executed a full barrier, so their earlier stores are visible and their later loads see our earlier stores.
fn heavy_barrier() {
    #[cfg(not(any(loom, miri)))]
    if fast() {
        use rustix::thread::{MembarrierCommand, membarrier};
        if membarrier(MembarrierCommand::PrivateExpedited).is_ok() {
            return;
        }
        // Registration cannot be lost; an error here would be a kernel bug. Fall through to a fence, which is
        // not enough on its own in fast mode, so panic rather than risk a use-after-free.
        panic!("membarrier(PRIVATE_EXPEDITED) failed after registration");
    }
    // Slow mode: readers fence on entry, so a full fence here completes the store-load pairing.
    fence(Ordering::SeqCst);
}

/// The per-thread handle: the thread's record and its bag of retired objects. Its destructor (thread exit)
/// drains the bag and gives up the handle's claim on the record ([`Record::handle_dropped`]).
struct Local {
    rec: &'static Record,
    bag: Cell<Vec<Deferred>>,
}

impl Drop for Local {
    fn drop(&mut self) {
        let bag = self.bag.take();
        if !bag.is_empty() {
            advance(bag);
        }
        self.rec.handle_dropped();
    }
}

#[cfg(not(loom))]
thread_local! {
    static LOCAL: Local = Local { rec: Record::acquire(OWNED), bag: Cell::new(Vec::new()) };
}
#[cfg(loom)]
loom::thread_local! {
    static LOCAL: Local = Local { rec: Record::acquire(OWNED), bag: Cell::new(Vec::new()) };
}

/// A retired object: a typed free without allocation, or an arbitrary closure.
enum Deferred {
    Destroy { ptr: *mut (), drop_fn: unsafe fn(*mut ()) },
    Call(Box<dyn FnOnce() + Send>),
}

// SAFETY: `Destroy` owns a unique, unpublished `Box<T>` whose destructor `defer_destroy`'s caller allows to run on
// any thread (its contract); `Call`'s closure is `Send`.
unsafe impl Send for Deferred {}

impl Deferred {
    fn run(self) {
        match self {
            // SAFETY: `drop_fn` was paired with `addr` by `defer_destroy`, whose caller guaranteed a unique,
            // unpublished `Box`; the grace period has elapsed.
            Deferred::Destroy { ptr, drop_fn } => unsafe { drop_fn(ptr) },
            Deferred::Call(f) => f(),
        }
    }
}

/// A batch of retired objects and the grace-period value readers must have reached (or left) before it frees.
struct Batch {
    target: u64,
    items: Vec<Deferred>,
}

/// Starts a grace period for `items` and frees every batch whose grace period has elapsed. Returns the target
/// of `items`' batch (`None` if `items` is empty); the heavy barrier has been issued after its queueing.
fn advance(items: Vec<Deferred>) -> Option<u64> {
    advance_with(items, FREE_PER_CALL)
}

/// [`advance`], freeing due batches up to `limit` objects (see [`take_ready`]; 0: none).
fn advance_with(items: Vec<Deferred>, limit: usize) -> Option<u64> {
    let mut pushed = None;
    let ready = {
        let mut queue = RECLAIM.lock();
        if !items.is_empty() {
            // Release: a reader that reads the new value (acquire) sees every store before this point, including
            // the unpublishing of `items` (program order, or the mutex for items handed over by other threads).
            let target = GP_SEQ.fetch_add(2, Ordering::Release) + 2;
            queue.push_back(Batch { target, items });
            pushed = Some(target);
        }
        if queue.is_empty() {
            return pushed;
        }
        heavy_barrier();
        take_ready(&mut queue, oldest_reader(), limit > 0, limit)
    };
    run_batches(ready);
    pushed
}

/// Frees due batches up to [`FREE_PER_CALL`] objects without a barrier of its own: every queued batch's pusher
/// issued its heavy barrier before it released the queue's lock, so a scan under the lock comes after it (the
/// `advance` case analysis applies as if that pusher had scanned now).
fn free_due() {
    let ready = {
        let mut queue = RECLAIM.lock();
        if queue.is_empty() {
            return;
        }
        let upto = oldest_reader();
        take_ready(&mut queue, upto, true, FREE_PER_CALL)
    };
    run_batches(ready);
}

/// Pops due batches (targets at most `upto`), oldest first: the first one whole, then at most `limit` objects of
/// the next ones, the last of them split if it holds more (its rest stays queued with the same target). `limit`
/// 0 with `first` false takes nothing; `usize::MAX` takes every due batch.
fn take_ready(queue: &mut VecDeque<Batch>, upto: u64, first: bool, limit: usize) -> Vec<Batch> {
    let mut ready = Vec::new();
    if first && queue.front().is_some_and(|b| b.target <= upto) {
        ready.extend(queue.pop_front());
    }
    let mut room = limit;
    while room > 0 {
        let Some(b) = queue.front_mut().filter(|b| b.target <= upto) else { break };
        if b.items.len() <= room {
            room -= b.items.len().max(1);
            ready.extend(queue.pop_front());
        } else {
            ready.push(Batch { target: b.target, items: b.items.drain(..room).collect() });
            room = 0;
        }
    }
    ready
}

/// Frees popped batches. Called without the queue's lock: a destructor may retire more objects.
fn run_batches(ready: Vec<Batch>) {
    for batch in ready {
        for item in batch.items {
            item.run();
        }
    }
}

/// Starts a grace period for this thread's retired objects (and for every batch already queued) and, if the
/// thread is outside every read-side section, waits up to `budget` for it to elapse and frees them: the
/// kernel's `tlb_finish_mmu` after a TLB shootdown, which waits for the other CPUs before the pages go back to
/// the allocator.
///
/// For a writer that has just retired a large batch (a long `munmap`): without the wait, the batch stays queued
/// until some later advance, so the memory it holds is out of use meanwhile and the writer's next allocations
/// take other, colder memory. Readers' sections in the engine are short (a fault, a lookup, one chunk of a
/// `/proc` walk), so the wait is usually a few scans; a reader that stays longer costs the writer `budget` at
/// most, after which the batch stays queued as [`Guard::flush`] would leave it. Inside a section (the thread
/// would wait for itself) this is [`Guard::flush`].
///
/// Correctness: the wait only re-reads the records after the one heavy barrier of the advance. A record that
/// held the batch back at the first scan and now reads 0 or a newer snapshot was changed by a release store
/// that follows its old section, which therefore happens before the free (the `advance` case analysis); a
/// record that did not hold it back entered after the barrier and cannot reach the batch. The batches freed are
/// capped at this one's target, so that a batch queued by another thread after the barrier is never freed
/// without a barrier of its own. Older due batches go at most `FREE_PER_CALL` (64) objects' worth, as in an
/// advance; this call's own batch goes whatever is ahead of it.
pub fn expedite(budget: std::time::Duration) {
    let Ok((bag, pinned)) = LOCAL.try_with(|l| (l.bag.take(), l.rec.nesting.get() > 0)) else { return };
    // With nothing new to retire, wait for the newest queued batch instead (its pusher issued its heavy barrier
    // before releasing the queue's lock, so the same reasoning holds).
    // Outside a section the frees wait for the loop below, so that one call frees at most `FREE_PER_CALL`
    // objects of others' batches whichever way it ends.
    let target = match advance_with(bag, if pinned { FREE_PER_CALL } else { 0 }) {
        Some(t) => t,
        None => match RECLAIM.lock().back() {
            Some(b) => b.target,
            None => return,
        },
    };
    if pinned {
        return;
    }
    #[cfg(not(loom))]
    let start = std::time::Instant::now();
    // Under loom the budget is a few scans (time does not pass in a model).
    #[cfg(loom)]
    let mut scans = 0;
    loop {
        if oldest_reader() >= target {
            let ready = {
                let mut queue = RECLAIM.lock();
                let mut ready = take_ready(&mut queue, target, true, FREE_PER_CALL);
                // The batch this call is for goes whatever the backlog ahead of it (the bound is for batches
                // others left due); it is the newest one at or below `target`.
                if let Some(i) = queue.iter().rposition(|b| b.target <= target) {
                    ready.extend(queue.remove(i));
                }
                ready
            };
            run_batches(ready);
            return;
        }
        #[cfg(not(loom))]
        if start.elapsed() >= budget {
            free_due();
            return;
        }
        #[cfg(loom)]
        {
            let _ = budget;
            scans += 1;
            if scans == 3 {
                free_due();
                return;
            }
        }
        crate::sync::spin_loop();
    }
}

/// Calls `f` on every registered record.
fn for_each_record(mut f: impl FnMut(&'static Record)) {
    // Acquire: pairs with the registry's release publication.
    let mut cur = REGISTRY.load(Ordering::Acquire);
    while !cur.is_null() {
        // SAFETY: registry records are leaked boxes, never freed.
        let rec: &'static Record = unsafe { &*cur };
        f(rec);
        cur = rec.next.load(Ordering::Relaxed);
    }
}

/// The grace-period snapshot a record holds back (`None` if it is outside any critical section). A record
/// orphaned by an exited thread (a leaked guard) is reaped here and holds nothing back.
fn snapshot(rec: &Record) -> Option<u64> {
    // Acquire: pairs with the reader's release stores of `ctr` (0 on exit, `gp | 1` on entry), so that every
    // load of a critical section that ended before the value we read happens before our frees.
    let ctr = rec.ctr.load(Ordering::Acquire);
    if ctr == 0 {
        return None;
    }
    // Relaxed: `reap`'s CAS re-checks it with acquire.
    let word = rec.owner.load(Ordering::Relaxed);
    if word & TAG_MASK == ORPHANED && rec.reap(word) {
        return None;
    }
    Some(ctr - 1)
}

/// The smallest grace-period snapshot among readers inside a critical section (`u64::MAX` if none).
fn oldest_reader() -> u64 {
    oldest_reader_except(ptr::null())
}

/// As [`oldest_reader`], ignoring the record `skip` (the caller's own, for [`synchronize`]).
fn oldest_reader_except(skip: *const Record) -> u64 {
    let mut oldest = u64::MAX;
    for_each_record(|rec| {
        if !ptr::eq(rec, skip)
            && let Some(s) = snapshot(rec)
        {
            oldest = oldest.min(s);
        }
    });
    oldest
}

/// An RCU read-side critical section: while it lives, nothing retired after it was taken is freed.
///
/// Obtained from [`pin`]. Not `Send`: a critical section belongs to one thread. A guard may outlive its
/// thread's thread-local state (a guard kept in another thread-local is dropped during thread teardown): the
/// guards count as references to the thread's record, which is freed only after the last one drops. A guard
/// that is leaked (`mem::forget`) keeps the section open until its thread exits; after that a reclaimer ends
/// the section (as the kernel's `kernel/rcu/tree_plugin.h: exit_rcu` does for a task that exits inside one),
/// so a dead thread never holds up grace periods.
pub struct Guard {
    rec: &'static Record,
    _not_send: PhantomData<*const ()>,
}

/// Enters a read-side critical section.
///
/// Costs a thread-local access, one load and one store (plus a full fence only where `membarrier` is not
/// available). Nesting is allowed and cheaper still.
#[inline]
pub fn pin() -> Guard {
    match LOCAL.try_with(|l| l.rec) {
        Ok(rec) => enter(rec),
        // Thread teardown, our handle already destroyed: a record owned by the guard alone.
        Err(_) => enter(Record::acquire(ORPHANED)),
    }
}

/// Announces the calling thread on `rec` (module docs, "Protocol"): `ctr = GP_SEQ | 1`, then the barrier.
#[inline]
fn announce(rec: &Record) {
    // Acquire: pairs with the release increment in `advance` (see the module docs, third case).
    let gp = GP_SEQ.load(Ordering::Acquire);
    // Release: pairs with the reclaimer's acquire load in `snapshot`. A reclaimer that reads this value sees
    // every load of this thread's *previous* critical section as happened-before (the store of 0 that ended
    // it does not head a release sequence containing this store), so it may free what that section read.
    rec.ctr.store(gp | 1, Ordering::Release);
    #[cfg(not(any(loom, miri)))]
    if fast() {
        // The store above must not be reordered by the compiler after the critical section's loads; the
        // CPU may still reorder it, which the reclaimer's membarrier covers (module docs, first two cases).
        compiler_fence(Ordering::SeqCst);
        return;
    }
    // No membarrier: order the announcement before our loads ourselves. Pairs with the reclaimer's SeqCst
    // fence in `heavy_barrier`.
    fence(Ordering::SeqCst);
}

#[inline]
fn enter(rec: &'static Record) -> Guard {
    let depth = rec.nesting.get();
    // Checked in every build: a count that wrapped to 0 under live guards (2^32 - 1 of them leaked with
    // `mem::forget`) would let the next guard's drop end the section (`ctr = 0`) while the older guards still
    // read, and a reclaimer would free what they hold. One compare and a never-taken branch.
    let Some(next) = depth.checked_add(1) else { nesting_overflow() };
    rec.nesting.set(next);
    if depth == 0 {
        announce(rec);
    }
    Guard { rec, _not_send: PhantomData }
}

/// The nesting count is full: abort the process. Not a panic: an unwinding thread may keep running code that
/// holds guards (destructors, `catch_unwind`), and a guard this thread could no longer count would end its
/// section too early; after an abort no reader is left to be harmed.
#[cold]
#[inline(never)]
fn nesting_overflow() -> ! {
    eprintln!("vmspace_rcu: more than {} nested read-side guards on one thread; aborting", u32::MAX);
    std::process::abort()
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let depth = self.rec.nesting.get() - 1;
        self.rec.nesting.set(depth);
        if depth == 0 {
            // Release: every load of the critical section happens before a reclaimer's acquire load of 0.
            self.rec.ctr.store(0, Ordering::Release);
            if self.rec.orphaned() {
                // The thread-local handle is gone and this was the last guard (module docs, "Records").
                self.rec.release();
            }
        }
    }
}

impl Guard {
    /// Runs `f` after a grace period: after every guard that exists now (on any thread) has been dropped.
    ///
    /// Call it only after the object `f` frees has been unpublished, so that no guard taken from now on can
    /// reach it.
    #[inline]
    pub fn defer<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        retire_or_queue(Deferred::Call(Box::new(f)));
    }

    /// Frees `ptr` (a pointer obtained from `Box::into_raw`) after a grace period.
    ///
    /// # Safety
    ///
    /// `ptr` came from `Box::<T>::into_raw`, is retired exactly once, and has been unpublished: no guard taken
    /// after this call can obtain it. `T`'s destructor must be safe to run on any thread at any later time.
    #[inline]
    pub unsafe fn defer_destroy<T>(&self, ptr: *mut T) {
        unsafe fn drop_box<T>(ptr: *mut ()) {
            // SAFETY: `ptr` is the unique `Box<T>` handed to `defer_destroy` (its caller's contract).
            drop(unsafe { Box::from_raw(ptr.cast::<T>()) });
        }
        retire_or_queue(Deferred::Destroy { ptr: ptr.cast::<()>(), drop_fn: drop_box::<T> });
    }

    /// Starts a grace period for this thread's retired objects now and frees whatever is due, instead of
    /// waiting for the thread's bag to fill.
    pub fn flush(&self) {
        let bag = LOCAL.try_with(|l| l.bag.take()).unwrap_or_default();
        advance(bag);
    }

    /// Leaves and re-enters the critical section, letting reclamation progress during a long walk. Every
    /// pointer loaded under the old section must be considered stale afterwards (the kernel's `mas_pause`).
    ///
    /// Only the outermost guard really leaves; a nested guard's repin is a no-op.
    pub fn repin(&mut self) {
        if self.rec.nesting.get() == 1 {
            // Release: as in `drop`.
            self.rec.ctr.store(0, Ordering::Release);
            announce(self.rec);
        }
    }
}

/// Queues `item` in this thread's bag, starting a grace period when the bag is full; during thread teardown
/// (no bag any more) hands it to the global queue directly.
fn retire_or_queue(item: Deferred) {
    let mut slot = Some(item);
    let full = LOCAL.try_with(|l| {
        let mut bag = l.bag.take();
        bag.extend(slot.take());
        if bag.len() >= BAG_THRESHOLD {
            Some(bag)
        } else {
            l.bag.set(bag);
            None
        }
    });
    match full {
        Ok(Some(bag)) => {
            advance(bag);
        }
        Ok(None) => {}
        Err(_) => {
            advance(slot.take().into_iter().collect());
        }
    }
}

/// Waits for a full grace period: returns once every critical section that was active when it was called has
/// ended (or its thread has exited), and everything retired before the call by this thread (and every batch
/// queued before it by any thread) has been freed.
///
/// The second half needs its own wait: a reader that read `GP_SEQ` before the call but announced itself only
/// after the first wait (a stale, older snapshot) holds back batches the call must free, though it cannot reach
/// their objects. Called inside a critical section (tolerated for nested test helpers, see
/// below), it frees only what the caller's own section does not hold back.
///
/// Blocking; for tests, teardown and leak accounting, never for the engine's writers.
pub fn synchronize() {
    let bag = LOCAL.try_with(|l| l.bag.take()).unwrap_or_default();
    advance(bag);
    // Release: pairs with readers' acquire loads, as in `advance`. Every batch queued so far has a smaller or
    // equal target.
    let target = GP_SEQ.fetch_add(2, Ordering::Release) + 2;
    // The caller's own record does not count as a reader to wait for: inside a critical section the call would
    // otherwise wait for itself forever (the kernel forbids `synchronize_rcu` there; nested test helpers do it).
    let me: *const Record = LOCAL.try_with(|l| l.rec as *const Record).unwrap_or(ptr::null());
    // SAFETY: `me`, if not null, is this thread's own record (registry records are never freed).
    let self_pinned = !me.is_null() && unsafe { &*me }.nesting.get() > 0;
    let mut readers_gone = false;
    loop {
        heavy_barrier();
        readers_gone = readers_gone || oldest_reader_except(me) >= target;
        if readers_gone {
            advance(Vec::new());
            // Everything due, not `FREE_PER_CALL` at a time: this call promises the frees. The batches taken
            // are those the barrier above covers (due at the scan's oldest reader), as in `advance`.
            let ready = {
                let mut queue = RECLAIM.lock();
                let upto = oldest_reader();
                take_ready(&mut queue, upto, true, usize::MAX)
            };
            run_batches(ready);
            if self_pinned || RECLAIM.lock().front().is_none_or(|b| b.target > target) {
                break;
            }
        }
        crate::sync::yield_now();
    }
}

/// Whether readers use the light (compiler-only) barrier backed by `membarrier`, for reports.
pub fn uses_membarrier() -> bool {
    init_barriers_once();
    fast()
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("rcu::Guard")
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Set in the child process that [`nesting_overflow_aborts`] starts.
    const OVERFLOW_CHILD: &str = "VMSPACE_RCU_NESTING_OVERFLOW_CHILD";

    /// A nesting count at its limit aborts the process at the next `pin` instead of wrapping (which would end
    /// the section under live guards). The overflow runs in a child process (this test binary re-run on this
    /// test alone) and the parent checks that it died of SIGABRT. The child jumps the count to the limit rather
    /// than leaking 2^32 - 2 guards one by one (minutes); the `pin` that overflows is the real one.
    #[test]
    #[cfg_attr(miri, ignore = "starts a process")]
    fn nesting_overflow_aborts() {
        if std::env::var_os(OVERFLOW_CHILD).is_some() {
            let outer = pin();
            // As if 2^32 - 2 guards had been leaked on top of `outer`: the count is full.
            LOCAL.with(|l| l.rec.nesting.set(u32::MAX));
            let inner = pin();
            // Reached only if the count wrapped: dropping `inner` would have ended `outer`'s section.
            drop(inner);
            std::mem::forget(outer);
            println!("child: pin did not abort at a full nesting count");
            return;
        }
        use std::os::unix::process::ExitStatusExt;
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", "memb::tests::nesting_overflow_aborts", "--nocapture", "--test-threads=1"])
            .env(OVERFLOW_CHILD, "1")
            .output()
            .expect("start the child");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "the child must die of SIGABRT; status {:?}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        assert!(stderr.contains("nested read-side guards"), "stderr: {stderr}");
        // The child really ran this test (it was not filtered out).
        assert!(stdout.contains("running 1 test"), "stdout: {stdout}");
    }

    /// Nesting below the limit counts up and down and ends the section with the outermost guard.
    #[test]
    fn nesting_counts_and_ends_with_the_outermost_guard() {
        let depth = || LOCAL.with(|l| l.rec.nesting.get());
        let ctr = || LOCAL.with(|l| l.rec.ctr.load(Ordering::Relaxed));
        let base = depth();
        let a = pin();
        let b = pin();
        assert_eq!(depth(), base + 2);
        assert_ne!(ctr(), 0);
        drop(b);
        assert_ne!(ctr(), 0, "an inner guard's drop must not end the section");
        drop(a);
        assert_eq!(depth(), base);
        if base == 0 {
            assert_eq!(ctr(), 0);
        }
    }
}
