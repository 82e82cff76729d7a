//! RCU for vmspace: read-side guards, deferred reclamation, sequence counts, and the loom seam.
//!
//! # What this crate is
//!
//! Everything above this crate that is read without locks (the maple tree's nodes, VMAs, page tables) follows
//! the kernel's RCU discipline:
//!
//! 1. A reader enters a read-side critical section ([`pin`] returns a [`Guard`]) before it loads any shared
//!    pointer, and uses what it loaded only while the guard lives.
//! 2. A writer unpublishes an object (replaces every pointer to it) *before* it retires it
//!    ([`Guard::defer_destroy`], [`Guard::defer`]).
//! 3. A retired object is freed only after a grace period: once every guard that existed when it was retired has
//!    been dropped. So a reader never touches freed memory, though it may touch an object that is already
//!    unpublished (and must detect that by other means, as the maple tree's dead-node marks do).
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
//! use vmspace_rcu::{SeqCount, pin, synchronize};
//!
//! static FREED: AtomicUsize = AtomicUsize::new(0);
//! struct Config(u64);
//! impl Drop for Config {
//!     fn drop(&mut self) {
//!         FREED.fetch_add(1, Ordering::Relaxed);
//!     }
//! }
//!
//! // A pointer readers load under a guard.
//! let current = Arc::new(AtomicPtr::new(Box::into_raw(Box::new(Config(1)))));
//! let reader = pin();
//! // Acquire: pairs with the publishing store (here, the initialisation before `pin`).
//! let seen = current.load(Ordering::Acquire);
//! // A writer publishes a new value, then retires the old one: it is freed only after a grace period.
//! let old = current.swap(Box::into_raw(Box::new(Config(2))), Ordering::AcqRel);
//! // SAFETY: `old` is unpublished (swapped out above) and retired once; it came from `Box::into_raw`.
//! unsafe { pin().defer_destroy(old) };
//! // The reader's guard still protects what it loaded.
//! // SAFETY: `seen` was loaded under `reader`, which is still alive, so it has not been freed.
//! assert_eq!(unsafe { (*seen).0 }, 1);
//! assert_eq!(FREED.load(Ordering::Relaxed), 0);
//! drop(reader);
//! synchronize(); // a full grace period: everything retired before it is freed.
//! assert_eq!(FREED.load(Ordering::Relaxed), 1);
//! # // SAFETY: the last value, unpublished by dropping the only pointer to it.
//! # drop(unsafe { Box::from_raw(current.load(Ordering::Acquire)) });
//!
//! // A sequence count: a reader retries when a writer ran during its read.
//! let seq = SeqCount::new();
//! let start = seq.read_begin();
//! assert!(!seq.read_retry(start), "no writer ran");
//! ```
//!
//! In ordinary builds the grace periods come from an asymmetric-barrier RCU (`memb`, the flavour of liburcu's
//! `urcu-memb`): readers announce themselves with a release store, and reclaimers pay for the fence with
//! `membarrier(2)`. Entering a critical section costs a few nanoseconds instead of the 14-19 ns of
//! `crossbeam_epoch::pin` or `seize`'s `enter` on the project's machine (the module docs give the measurements
//! and the case analysis). Writers never wait for readers: retired objects queue until their grace period has
//! passed. A thread's reader record lives until its last guard is gone, and a thread that exits (even with a
//! leaked guard) never holds up a grace period (the `memb` docs, "Records").
//!
//! Under `--cfg loom` the crate's [`pin`] is a small reclamation model built on loom's atomics (`loom_model`),
//! so that the other crates' loom models explore the orderings of *their* publication and retirement protocols
//! with the reclamation decision made explicitly. The real protocol is model-checked too: `memb` itself compiles
//! under loom (in its fence fallback, which has the fast path's orderings with `membarrier` strengthened to a
//! `SeqCst` fence) and this crate's `tests/loom.rs` runs readers against a reclaimer on it. Under Miri the
//! ordinary build also takes the fence fallback (Miri has no `membarrier`).
//!
//! # The loom seam
//!
//! [`sync`] is the only place in the engine's crates that names `std::sync::atomic`, `loom::sync` or a mutex
//! implementation. Every crate that wants its concurrent code checked by loom imports atomics, [`sync::Mutex`]
//! and process-wide statics ([`statics!`]) from here.
//!
//! # Memory chunks
//!
//! [`chunk`] maps aligned, zeroed chunks of memory (huge pages where the host has them) for the allocators
//! whose objects this crate's readers reach: the maple tree's node slab and the page contents of the page
//! tables' frames.
//!
//! # Sequence counts
//!
//! [`SeqCount`] is the kernel's `seqcount_t`: even when stable, odd while a writer is inside. It backs
//! `mm_lock_seq` and the lockless readers' validation.
//!
//! This crate depends on no other vmspace crate.

#![cfg_attr(not(loom), warn(missing_docs))]

pub mod chunk;
pub mod seqcount;
pub mod sync;

#[cfg(not(loom))]
mod memb;
#[cfg(not(loom))]
pub use memb::{Guard, expedite, pin, synchronize, uses_membarrier};

/// The real reader protocol (fence fallback) on loom's atomics, for this crate's own loom models
/// (`tests/loom.rs`); the crate's [`pin`] stays the `loom_model` that other crates' models use.
#[cfg(loom)]
pub mod memb;

#[cfg(loom)]
pub mod loom_model;
#[cfg(loom)]
pub use loom_model::{Guard, expedite, pin, synchronize, uses_membarrier};

pub use crossbeam_utils::CachePadded;
pub use seqcount::SeqCount;
