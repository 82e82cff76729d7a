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
//! reader (pin / drop)                        reclaimer (advance + poll)
//!   g = GP_SEQ.load(Acquire)                   retired objects were unpublished earlier (program order or
//!   ctr = g | 1            (plain store)         the reclaim mutex orders them before this point)
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
//!
//! Writers never wait for readers: a batch whose readers are still inside stays queued and is polled again at
//! the next advance or [`Guard::flush`]. A reader preempted inside a critical section delays reclamation, never
//! a writer. [`synchronize`] (a blocking wait for a grace period) exists for tests and teardown only.
//!
//! If `membarrier` is unavailable (old kernel, seccomp), every reader issues a full fence on entry instead and
//! the heavy barrier becomes a full fence: slower, equally correct.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::compiler_fence;
use std::sync::{Mutex, Once};

use crate::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering, fence};

/// Retired objects a thread accumulates before it starts a grace period for them.
const BAG_THRESHOLD: usize = 256;

/// The grace-period counter. Even; starts at 2 so that `ctr == 0` can mean "outside".
static GP_SEQ: AtomicU64 = AtomicU64::new(2);

/// Head of the push-only list of reader records (records are reused, never freed).
static REGISTRY: AtomicPtr<Record> = AtomicPtr::new(ptr::null_mut());

/// Set once at start-up: whether `membarrier(PRIVATE_EXPEDITED)` is registered and usable.
static FAST: AtomicBool = AtomicBool::new(false);
static INIT: Once = Once::new();

/// Batches waiting for their grace period, oldest first.
static RECLAIM: Mutex<VecDeque<Batch>> = Mutex::new(VecDeque::new());

/// One thread's announcement. 128-byte aligned so that two threads' records never share a cache line (nor an
/// adjacent-line prefetch pair).
#[repr(C, align(128))]
struct Record {
    /// 0 outside a critical section, else the `GP_SEQ` read on entry plus 1.
    /// Written only by the owning thread; read by reclaimers (acquire) during a scan.
    ctr: AtomicU64,
    /// Nesting depth of the owner's guards. Only the owner reads or writes it.
    nesting: Cell<u32>,
    /// Whether a live thread owns this record. Claimed with a CAS, released with a release store.
    in_use: AtomicBool,
    /// Next record in the registry; written once before the record is published.
    next: AtomicPtr<Record>,
}

// SAFETY: `nesting` is the only non-Sync field; it is touched only by the thread that owns the record (the one
// that claimed `in_use`), and ownership passes between threads only through the `in_use` release/acquire pair.
// Every other field is atomic.
unsafe impl Sync for Record {}

impl Record {
    /// Claims a free record or registers a new one. Never freed: type-stable for the process's lifetime.
    fn acquire() -> &'static Record {
        INIT.call_once(init_barriers);
        // Acquire: pairs with the release CAS that published each record, so `next` is initialised.
        let mut cur = REGISTRY.load(Ordering::Acquire);
        while !cur.is_null() {
            // SAFETY: records in the registry are leaked boxes, never freed.
            let rec = unsafe { &*cur };
            // Acquire on success: pairs with the release store in `release`, so the previous owner's uses of
            // `nesting` happen before ours.
            if rec.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return rec;
            }
            cur = rec.next.load(Ordering::Relaxed);
        }
        let rec: &'static Record = Box::leak(Box::new(Record {
            ctr: AtomicU64::new(0),
            nesting: Cell::new(0),
            in_use: AtomicBool::new(true),
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

    fn release(&self) {
        debug_assert_eq!(self.nesting.get(), 0);
        // Release: pairs with the acquire CAS of the next owner.
        self.in_use.store(false, Ordering::Release);
    }
}

/// Registers this process for expedited private membarriers, or records that they are unavailable.
fn init_barriers() {
    use rustix::thread::{MembarrierCommand, membarrier};
    let ok = membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
        && membarrier(MembarrierCommand::PrivateExpedited).is_ok();
    // Relaxed: `INIT.call_once` orders this store before every thread's first pin (each pin passes through
    // `Record::acquire`, which runs `call_once`).
    FAST.store(ok, Ordering::Relaxed);
}

/// The writer-side half of the asymmetric pair: after it returns, every other thread of the process has
/// executed a full barrier, so their earlier stores are visible and their later loads see our earlier stores.
fn heavy_barrier() {
    if FAST.load(Ordering::Relaxed) {
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

/// The per-thread handle: the thread's record and its bag of retired objects.
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
        self.rec.release();
    }
}

thread_local! {
    static LOCAL: Local = Local { rec: Record::acquire(), bag: Cell::new(Vec::new()) };
}

/// A retired object: a typed free without allocation, or an arbitrary closure.
enum Deferred {
    Destroy { addr: usize, drop_fn: unsafe fn(usize) },
    Call(Box<dyn FnOnce() + Send>),
}

impl Deferred {
    fn run(self) {
        match self {
            // SAFETY: `drop_fn` was paired with `addr` by `defer_destroy`, whose caller guaranteed a unique,
            // unpublished `Box`; the grace period has elapsed.
            Deferred::Destroy { addr, drop_fn } => unsafe { drop_fn(addr) },
            Deferred::Call(f) => f(),
        }
    }
}

/// A batch of retired objects and the grace-period value readers must have reached (or left) before it frees.
struct Batch {
    target: u64,
    items: Vec<Deferred>,
}

/// Starts a grace period for `items` and frees every batch whose grace period has elapsed.
fn advance(items: Vec<Deferred>) {
    let ready = {
        let mut queue = RECLAIM.lock().unwrap_or_else(|e| e.into_inner());
        if !items.is_empty() {
            // Release: a reader that reads the new value (acquire) sees every store before this point, including
            // the unpublishing of `items` (program order, or the mutex for items handed over by other threads).
            let target = GP_SEQ.fetch_add(2, Ordering::Release) + 2;
            queue.push_back(Batch { target, items });
        }
        if queue.is_empty() {
            return;
        }
        heavy_barrier();
        let oldest_active = oldest_reader();
        let mut ready = Vec::new();
        while queue.front().is_some_and(|b| b.target <= oldest_active) {
            ready.push(queue.pop_front().expect("front exists"));
        }
        ready
    };
    // Run outside the lock: a destructor may retire more objects.
    for batch in ready {
        for item in batch.items {
            item.run();
        }
    }
}

/// The smallest grace-period snapshot among readers inside a critical section (`u64::MAX` if none).
fn oldest_reader() -> u64 {
    let mut oldest = u64::MAX;
    // Acquire: pairs with the registry's release publication.
    let mut cur = REGISTRY.load(Ordering::Acquire);
    while !cur.is_null() {
        // SAFETY: registry records are never freed.
        let rec = unsafe { &*cur };
        // Acquire: pairs with the reader's release store of 0 on exit, ordering its loads before our frees.
        let ctr = rec.ctr.load(Ordering::Acquire);
        if ctr != 0 {
            oldest = oldest.min(ctr - 1);
        }
        cur = rec.next.load(Ordering::Relaxed);
    }
    oldest
}

/// An RCU read-side critical section: while it lives, nothing retired after it was taken is freed.
///
/// Obtained from [`pin`]. Not `Send`: a critical section belongs to one thread.
pub struct Guard {
    rec: &'static Record,
    /// Set when the thread-local handle was unavailable (thread teardown): the record is owned by this guard.
    temporary: bool,
    _not_send: PhantomData<*const ()>,
}

/// Enters a read-side critical section.
///
/// Costs a thread-local access, one load and one store (plus a full fence only where `membarrier` is not
/// available). Nesting is allowed and cheaper still.
#[inline]
pub fn pin() -> Guard {
    match LOCAL.try_with(|l| l.rec) {
        Ok(rec) => enter(rec, false),
        Err(_) => enter(Record::acquire(), true),
    }
}

#[inline]
fn enter(rec: &'static Record, temporary: bool) -> Guard {
    let depth = rec.nesting.get();
    rec.nesting.set(depth + 1);
    if depth == 0 {
        // Acquire: pairs with the release increment in `advance` (see the module docs, third case).
        let gp = GP_SEQ.load(Ordering::Acquire);
        rec.ctr.store(gp | 1, Ordering::Relaxed);
        if FAST.load(Ordering::Relaxed) {
            // The store above must not be reordered by the compiler after the critical section's loads; the
            // CPU may still reorder it, which the reclaimer's membarrier covers (module docs, first two cases).
            compiler_fence(Ordering::SeqCst);
        } else {
            // No membarrier: order the announcement before our loads ourselves. Pairs with the reclaimer's
            // SeqCst fence in `heavy_barrier`.
            fence(Ordering::SeqCst);
        }
    }
    Guard { rec, temporary, _not_send: PhantomData }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let depth = self.rec.nesting.get() - 1;
        self.rec.nesting.set(depth);
        if depth == 0 {
            // Release: every load of the critical section happens before a reclaimer's acquire load of 0.
            self.rec.ctr.store(0, Ordering::Release);
            if self.temporary {
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
        unsafe fn drop_box<T>(addr: usize) {
            // SAFETY: `addr` is the unique `Box<T>` handed to `defer_destroy` (its caller's contract).
            drop(unsafe { Box::from_raw(addr as *mut T) });
        }
        retire_or_queue(Deferred::Destroy { addr: ptr as usize, drop_fn: drop_box::<T> });
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
            // Acquire: as in `enter`.
            let gp = GP_SEQ.load(Ordering::Acquire);
            self.rec.ctr.store(gp | 1, Ordering::Relaxed);
            if FAST.load(Ordering::Relaxed) {
                compiler_fence(Ordering::SeqCst);
            } else {
                // Pairs with `heavy_barrier`'s fence, as in `enter`.
                fence(Ordering::SeqCst);
            }
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
        Ok(Some(bag)) => advance(bag),
        Ok(None) => {}
        Err(_) => advance(slot.take().into_iter().collect()),
    }
}

/// Waits for a full grace period: returns once every critical section that was active when it was called has
/// ended, and everything retired before the call by this thread has been freed.
///
/// Blocking; for tests, teardown and leak accounting, never for the engine's writers.
pub fn synchronize() {
    let bag = LOCAL.try_with(|l| l.bag.take()).unwrap_or_default();
    advance(bag);
    // Release: pairs with readers' acquire loads, as in `advance`.
    let target = GP_SEQ.fetch_add(2, Ordering::Release) + 2;
    loop {
        heavy_barrier();
        if oldest_reader() >= target || current_thread_is_only_reader(target) {
            break;
        }
        std::thread::yield_now();
    }
    advance(Vec::new());
}

/// True if the only reader older than `target` is the calling thread itself (synchronize from inside a critical
/// section would otherwise wait forever; the kernel forbids it, we tolerate it for nested test helpers).
fn current_thread_is_only_reader(target: u64) -> bool {
    let Ok(me) = LOCAL.try_with(|l| l.rec as *const Record) else { return false };
    let mut cur = REGISTRY.load(Ordering::Acquire);
    while !cur.is_null() {
        // SAFETY: registry records are never freed.
        let rec = unsafe { &*cur };
        // Acquire: as in `oldest_reader`.
        let ctr = rec.ctr.load(Ordering::Acquire);
        if ctr != 0 && ctr - 1 < target && !ptr::eq(cur, me) {
            return false;
        }
        cur = rec.next.load(Ordering::Relaxed);
    }
    true
}

/// Whether readers use the light (compiler-only) barrier backed by `membarrier`, for reports.
pub fn uses_membarrier() -> bool {
    INIT.call_once(init_barriers);
    FAST.load(Ordering::Relaxed)
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("rcu::Guard")
    }
}
