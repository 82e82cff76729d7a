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
//! In ordinary builds the grace periods come from an asymmetric-barrier RCU (`memb`, the flavour of liburcu's
//! `urcu-memb`): readers announce themselves with a plain store, and reclaimers pay for the fence with
//! `membarrier(2)`. Entering a critical section costs a few nanoseconds instead of the 14-19 ns of
//! `crossbeam_epoch::pin` or `seize`'s `enter` on the project's machine (the module docs give the measurements
//! and the case analysis). Writers never wait for readers: retired objects queue until their grace period has
//! passed. Under `--cfg loom` a small reclamation model built on loom's atomics replaces it (`loom_model`),
//! so that loom explores the orderings of *our* publication and retirement protocols with the reclamation
//! decision made explicitly.
//!
//! # The loom seam
//!
//! [`sync`] is the only place in the workspace that names `std::sync::atomic` or `loom::sync::atomic`. Every
//! crate that wants its lock-free code checked by loom imports atomics from here.
//!
//! # Sequence counts
//!
//! [`SeqCount`] is the kernel's `seqcount_t`: even when stable, odd while a writer is inside. It backs
//! `mm_lock_seq` and the lockless readers' validation.
//!
//! This crate depends on no other vmspace crate.

#![cfg_attr(not(loom), warn(missing_docs))]

pub mod seqcount;
pub mod sync;

#[cfg(not(loom))]
mod memb;
#[cfg(not(loom))]
pub use memb::{Guard, pin, synchronize, uses_membarrier};

#[cfg(loom)]
pub mod loom_model;
#[cfg(loom)]
pub use loom_model::{Guard, pin, synchronize, uses_membarrier};

pub use crossbeam_utils::CachePadded;
pub use seqcount::SeqCount;
