//! The engine's sides of the engine-beside-kernel experiments: the one place where each engine measurement
//! plugs in.
//!
//! Each function returns the engine sides of one experiment, in the order their rows and lines appear. A side
//! whose engine code has not landed is an [`AwaitingEngine`] placeholder with the id and name the real side
//! will have and what it awaits: every table, figure, verdict and target of the report then says "not yet
//! measured on the engine (awaits ...)" where its figures would be, and `report.json` records it as a
//! `report.side` report with that status, never as numbers.
//!
//! # Plugging a side in
//! Implement [`Side`](crate::experiment::Side) for the experiment's plan (the contract of its report, i.e. the
//! metrics and parameters the tables and figures read, is in the experiment's module docs) and return it here
//! instead of the placeholder, keeping the id (targets refer to sides by the constants below). Nothing else
//! changes: the runner measures it at every point right after the kernel's side, and the tables, figures,
//! verdicts and targets pick it up by its id.
//!
//! What each side will measure (the kernel's side of the same experiment is in `vmspace_linux`):
//! - faults ([`crate::experiments::faults`]): the engine's page faults per second against threads, all threads
//!   in one address space, each faulting its own region in through the engine's fault path (`mm/memory.c:
//!   handle_mm_fault`) with the VMA found under a per-VMA lock (`lock_vma_under_rcu`, as
//!   `arch/x86/mm/fault.c: do_user_addr_fault` does since the per-VMA lock series) or under the mmap_lock
//!   only (`lock_mm_and_find_vma`, the path before it). Awaits page tables in the address space and a fault
//!   path that threads can enter together.
//! - fork ([`crate::experiments::fork`]): the engine's fork rate against the VMA count, `kernel/fork.c:
//!   dup_mmap` copying the VMA tree in one O(n) pass (`MapleTree::dup`, the `__mt_dup` series) or
//!   re-inserting every VMA into an empty tree (before it), page tables copied (`copy_page_range`) in both.
//!   `Mm::fork` copies the tree but not yet page tables, and has no re-insertion mode.
//! - contention and tearing ([`crate::experiments::contention`], [`crate::experiments::tearing`]): the
//!   engine's `/proc/PID/maps`, `smaps` and `smaps_rollup` readers (`fs/proc/task_mmu.c`) on reader threads
//!   beside a mapper (or writer) thread of the same address space, in each reader mode: under per-VMA locks
//!   (`lock_next_vma`) and under the mmap_lock. Await the engine's reader modes and an address space shared
//!   by threads.

use crate::experiment::{AwaitingEngine, Sides};
use crate::experiments::contention::ContentionPlan;
use crate::experiments::faults::FaultsPlan;
use crate::experiments::fork::ForkPlan;
use crate::experiments::tearing::TearingPlan;

/// Faults: the engine's fault path finding the VMA under a per-VMA lock.
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
/// Contention and tearing: the engine's readers under the mmap_lock.
pub const READERS_MMAP_LOCK: &str = "engine-mmap-lock";

/// What the fault sides await.
const FAULT_PATH: &str = "page tables in the engine's address space and a fault path threads enter together";
/// What the reader sides await.
const READER_MODES: &str = "the engine's /proc reader modes on threads beside a mapper thread";

/// The engine sides of the fault experiment.
pub fn faults_sides() -> Sides<FaultsPlan> {
    vec![
        Box::new(AwaitingEngine { id: FAULTS_PER_VMA, name: "engine, per-VMA locks", awaits: FAULT_PATH }),
        Box::new(AwaitingEngine { id: FAULTS_MMAP_LOCK, name: "engine, mmap_lock only", awaits: FAULT_PATH }),
    ]
}

/// The engine sides of the fork experiment.
pub fn fork_sides() -> Sides<ForkPlan> {
    vec![
        Box::new(AwaitingEngine {
            id: FORK_DUP,
            name: "engine, tree copy (dup)",
            awaits: "dup_mmap with page tables (copy_page_range)",
        }),
        Box::new(AwaitingEngine {
            id: FORK_REINSERT,
            name: "engine, re-insertion",
            awaits: "dup_mmap with page tables and a re-insertion mode",
        }),
    ]
}

/// The engine's reader sides, for the contention grid and the tearing checks.
fn reader_sides() -> [AwaitingEngine; 2] {
    [
        AwaitingEngine {
            id: READERS_PER_VMA,
            name: "engine, readers under per-VMA locks",
            awaits: READER_MODES,
        },
        AwaitingEngine {
            id: READERS_MMAP_LOCK,
            name: "engine, readers under mmap_lock",
            awaits: READER_MODES,
        },
    ]
}

/// The engine sides of the contention grid.
pub fn contention_sides() -> Sides<ContentionPlan> {
    reader_sides().into_iter().map(|s| Box::new(s) as _).collect()
}

/// The engine sides of the tearing checks.
pub fn tearing_sides() -> Sides<TearingPlan> {
    reader_sides().into_iter().map(|s| Box::new(s) as _).collect()
}
