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
