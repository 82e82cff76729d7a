//! Blocking waits for the locks of this module: park a thread on an address until another thread wakes it.
//!
//! In ordinary builds this is `parking_lot_core`'s global parking table: a thread parks on a *key* (an address
//! that identifies what it waits for) after a `validate` closure, run with the key's queue locked, confirms that
//! the condition it waits for still does not hold; a waker changes the condition first and then unparks every
//! thread queued on the key. Because validation and enqueueing happen under the queue lock, and the waker takes
//! the same lock after changing the condition, a wake-up can never be lost.
//!
//! Under `--cfg loom` a parked thread cannot be modelled by loom, so [`park`] becomes "yield once if the
//! condition still does not hold" and every caller re-checks its condition in a loop. That keeps the waits
//! correct (they are all condition loops) and lets loom explore the interleavings of the atomics that decide
//! them.
//!
//! Keys used by this module: the address of an `MmapLock`'s state word (threads waiting for the writer bit to
//! clear), that address + 1 (the writer waiting for readers to drain: odd, so it collides with no object's
//! address) and the address of a VMA's `vm_refcnt` (the writer waiting for VMA readers to leave; the VMA's memory
//! is type-stable, so a reader of a recycled VMA still wakes the right waiter). Every key is an address owned by
//! this module's objects, as `parking_lot_core` requires.

/// Parks the calling thread on `key` if `validate()` (run with the key's queue locked) returns true, until a
/// call to [`unpark_all`] on the same key. Spurious returns are possible: callers loop on their condition.
#[inline]
pub(crate) fn park(key: usize, validate: impl FnOnce() -> bool) {
    #[cfg(not(loom))]
    {
        // SAFETY: `key` is the address of an object of this module (see the module docs), so no unrelated
        // synchronisation primitive uses it; `validate` only loads atomics: it neither panics nor calls into
        // parking_lot.
        unsafe {
            parking_lot_core::park(
                key,
                validate,
                || {},
                |_, _| {},
                parking_lot_core::DEFAULT_PARK_TOKEN,
                None,
            );
        }
    }
    #[cfg(loom)]
    {
        let _ = key;
        if validate() {
            loom::thread::yield_now();
        }
    }
}

/// Who waits on an `MmapLock`'s waiters key (the park token [`unpark_reader_batch`] sorts the queue by).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Waiter {
    /// A thread waiting to take a read hold.
    Reader,
    /// A thread waiting to claim the writer bit.
    Writer,
}

/// How a [`park_as`] returned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Parked {
    /// `validate` said no: the thread never queued.
    Not,
    /// Queued, then woken (or returned spuriously): the caller re-checks its condition.
    Woken,
    /// Queued, then woken by [`unpark_reader_batch`] as one of a batch of readers granted a read hold.
    Handed,
}

/// [`park`] as `who`, saying how it returned.
#[inline]
pub(crate) fn park_as(key: usize, who: Waiter, validate: impl FnOnce() -> bool) -> Parked {
    #[cfg(not(loom))]
    {
        use parking_lot_core::ParkResult;
        let token = parking_lot_core::ParkToken(who as usize);
        // SAFETY: as in `park`.
        match unsafe { parking_lot_core::park(key, validate, || {}, |_, _| {}, token, None) } {
            ParkResult::Invalid => Parked::Not,
            ParkResult::Unparked(HANDOFF) => Parked::Handed,
            _ => Parked::Woken,
        }
    }
    #[cfg(loom)]
    {
        let _ = who;
        let mut valid = false;
        park(key, || {
            valid = validate();
            valid
        });
        if valid { Parked::Woken } else { Parked::Not }
    }
}

/// The unpark token of a reader that was granted its read hold by the waker.
#[cfg(not(loom))]
const HANDOFF: parking_lot_core::UnparkToken = parking_lot_core::UnparkToken(1);

/// Wakes the waiters of an `MmapLock` whose writer leaves, as `kernel/locking/rwsem.c: rwsem_mark_wake` does:
/// if the first thread queued on `key` is a reader, every queued reader, each granted a read hold (the
/// hand-off: they own the lock before they run), and the first queued writer, which claims the writer bit
/// and waits for them to leave (the other writers stay queued); if it is a writer, that writer alone, which
/// then competes for the lock. `release(readers, more)` runs with the queue locked before anyone wakes: it
/// must release the write hold and add `readers` read holds in one step, keeping the parked bit iff `more`
/// (threads remain queued). Under loom (where parking is a yield) it is `release(0, false)` and a wake of
/// everyone: no hand-off.
pub(crate) fn unpark_reader_batch(key: usize, release: impl FnOnce(u64, bool)) {
    #[cfg(not(loom))]
    {
        use parking_lot_core::{FilterOp, ParkToken};
        use std::cell::Cell;
        const READER: usize = Waiter::Reader as usize;
        // `first`: the queue head's kind; `readers`: readers woken (granted); `writer`: a writer woken.
        let (first, readers, writer) = (Cell::new(None::<usize>), Cell::new(0u64), Cell::new(false));
        let filter = |t: ParkToken| {
            let head = *first.get().get_or_insert(t.0);
            first.set(Some(head));
            if t.0 == READER && head == READER {
                readers.set(readers.get() + 1);
                FilterOp::Unpark
            } else if t.0 != READER && !writer.get() {
                // The head writer, or the first writer behind a batch of readers: it claims the writer bit
                // (shutting out new readers) and waits for the granted readers to leave, as a writer queued
                // behind readers waits for their `up_read` in the kernel.
                writer.set(true);
                FilterOp::Unpark
            } else if head == READER {
                FilterOp::Skip
            } else {
                FilterOp::Stop
            }
        };
        let callback = |r: parking_lot_core::UnparkResult| {
            release(readers.get(), r.have_more_threads);
            // Every woken thread gets the same token; writers ignore it.
            if readers.get() > 0 { HANDOFF } else { parking_lot_core::DEFAULT_UNPARK_TOKEN }
        };
        // SAFETY: as in `park`; the filter and the callback only read tokens and update the lock's atomic word.
        unsafe {
            parking_lot_core::unpark_filter(key, filter, callback);
        }
    }
    #[cfg(loom)]
    {
        release(0, false);
        unpark_all(key);
    }
}

/// Wakes every thread parked on `key`. Call it after changing the condition those threads wait for.
#[inline]
pub(crate) fn unpark_all(key: usize) {
    #[cfg(not(loom))]
    // SAFETY: as in `park`: `key` belongs to this module's objects.
    unsafe {
        parking_lot_core::unpark_all(key, parking_lot_core::DEFAULT_UNPARK_TOKEN);
    }
    #[cfg(loom)]
    let _ = key;
}

/// How many times a waiter re-checks its condition with a spin hint before it parks.
#[cfg(not(loom))]
const SPINS: u32 = 64;

/// One step of a waiter's spin phase: returns true (after a spin hint) while the waiter should keep spinning,
/// false once it should park. `spins` counts the steps taken. Under loom there is no spin phase: a spin is
/// only a yield there and adds states for nothing.
#[inline]
pub(crate) fn spin_once(spins: &mut u32) -> bool {
    #[cfg(not(loom))]
    {
        if *spins < SPINS {
            *spins += 1;
            vmspace_rcu::sync::spin_loop();
            return true;
        }
        false
    }
    #[cfg(loom)]
    {
        let _ = spins;
        false
    }
}
