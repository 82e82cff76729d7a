//! The engine's sides of the engine-beside-kernel experiments: where each engine experiment plugs in.
//!
//! Each function returns the engine sides of one experiment, in the order their rows and lines appear. A side
//! that has not landed yet is a [`NotInThisBuild`] placeholder with the id and name the real side will have:
//! it is listed everywhere as "not available in this build" and never run. To plug a side in, implement
//! [`Side`](crate::experiment::Side) for the experiment's plan (the contract of its report is in the
//! experiment's module docs) and return it here instead of the placeholder, keeping the id when it is one of
//! the constants below (targets refer to sides by these ids).
//!
//! What each side will measure (the kernel's side of the same experiment is in `vmspace_linux`):
//! - faults ([`crate::experiments::faults`]): the engine's page faults per second against threads, with the
//!   fault path taking per-VMA locks (`lock_vma_under_rcu`, as `mm/memory.c: do_user_addr_fault` does since the
//!   per-VMA lock series) or the mmap_lock only;
//! - fork ([`crate::experiments::fork`]): the engine's fork rate against the VMA count, copying the VMA tree
//!   with `MapleTree::dup` (the `__mt_dup` series) or re-inserting every VMA into an empty tree (before it);
//! - contention and tearing ([`crate::experiments::contention`], [`crate::experiments::tearing`]): the engine's
//!   `/proc/PID/maps`, `smaps` and `smaps_rollup` readers in each of their modes against the engine's mapper.

use crate::experiment::{NotInThisBuild, Sides};
use crate::experiments::contention::ContentionPlan;
use crate::experiments::faults::FaultsPlan;
use crate::experiments::fork::ForkPlan;
use crate::experiments::tearing::TearingPlan;

/// Faults: the engine's fault path under per-VMA locks.
pub const FAULTS_PER_VMA: &str = "engine-per-vma";
/// Faults: the engine's fault path under the mmap_lock only.
pub const FAULTS_MMAP_LOCK: &str = "engine-mmap-lock";
/// Fork: the engine's fork copying the tree (`MapleTree::dup`).
pub const FORK_DUP: &str = "engine-dup";
/// Fork: the engine's fork re-inserting every VMA.
pub const FORK_REINSERT: &str = "engine-reinsert";
/// Contention and tearing: the engine's readers under per-VMA locks (the mode held against the kernel's maps
/// reader).
pub const READERS_PER_VMA: &str = "engine-per-vma";
/// Contention and tearing: the placeholder for every engine reader mode until they land.
pub const READERS: &str = "engine";

/// The engine sides of the fault experiment.
pub fn faults_sides() -> Sides<FaultsPlan> {
    vec![
        Box::new(NotInThisBuild { id: FAULTS_PER_VMA, name: "engine, per-VMA locks" }),
        Box::new(NotInThisBuild { id: FAULTS_MMAP_LOCK, name: "engine, mmap_lock only" }),
    ]
}

/// The engine sides of the fork experiment.
pub fn fork_sides() -> Sides<ForkPlan> {
    vec![
        Box::new(NotInThisBuild { id: FORK_DUP, name: "engine, tree copy (dup)" }),
        Box::new(NotInThisBuild { id: FORK_REINSERT, name: "engine, re-insertion" }),
    ]
}

/// The engine sides of the contention grid.
pub fn contention_sides() -> Sides<ContentionPlan> {
    vec![Box::new(NotInThisBuild { id: READERS, name: "engine /proc readers (every reader mode)" })]
}

/// The engine sides of the tearing checks.
pub fn tearing_sides() -> Sides<TearingPlan> {
    vec![Box::new(NotInThisBuild { id: READERS, name: "engine /proc readers (every reader mode)" })]
}
