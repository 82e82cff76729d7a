//! `struct mmu_gather`: frames and table pages an operation unpublished, freed together after a grace period.
//!
//! The kernel's zap collects the pages it unmapped (`tlb_remove_page`) and the tables it unlinked
//! (`tlb_remove_table`, `MMU_GATHER_RCU_TABLE_FREE`), flushes the TLB and frees them at `tlb_finish_mmu`, so that
//! no CPU still translating through a stale entry touches a freed page. Here the lockless walkers (the emulated
//! MMU, lockless smaps) play the CPUs and an RCU grace period plays the flush: [`MmuGather`] hands its batch to
//! `vmspace_rcu` with one deferred call when it is dropped, and the frames and tables return to [`Memory`]
//! once every read-side section that could have reached them has ended. A gather allocates nothing until it
//! holds something, so an operation that frees nothing pays nothing.
//!
//! Only objects that are already unreachable for new walkers go in: a frame whose last reference was dropped,
//! a table whose parent entry was cleared.

use std::sync::Arc;

use crate::arch::Pfn;
use crate::frame::{FRAMES_RELEASED, Memory, TABLES_RELEASED};

/// Gathered objects beyond which the batch is handed to RCU at once (`tlb_flush_mmu` on a full batch).
const FLUSH_AT: usize = 512;
/// Batches handed to RCU before the gather starts their grace period itself (it always does at the end), so
/// that a long zap does not hold an unbounded amount of memory. A grace period costs a `membarrier`, which
/// interrupts every CPU running a thread of the process (the TLB shootdown it plays): starting one per 512
/// objects made each 16 MiB `munmap` interrupt the other faulting threads eight times.
const GP_EVERY: u32 = 16;
/// How long the end of a gather that freed a full batch waits for its grace period (`vmspace_rcu::expedite`),
/// so that its frames return to this thread's free list at once, as the kernel's `tlb_finish_mmu` frees them
/// after the shootdown: without it a `munmap` of 16 MiB left its 4,096 frames queued until the next one, and two
/// threads mapping and unmapping such regions kept twice the memory in circulation.
const EXPEDITE_BUDGET: std::time::Duration = std::time::Duration::from_micros(50);

/// A batch of frames and table pages to free after a grace period (module docs).
pub(crate) struct MmuGather {
    mem: Arc<Memory>,
    frames: Vec<u64>,
    tables: Vec<usize>,
    /// Full batches this gather has handed to RCU.
    handed: u32,
}

impl MmuGather {
    /// An empty batch for `mem` (`tlb_gather_mmu`).
    pub(crate) fn new(mem: &Arc<Memory>) -> MmuGather {
        MmuGather { mem: Arc::clone(mem), frames: Vec::new(), tables: Vec::new(), handed: 0 }
    }

    /// Queues a frame whose last reference is gone (`tlb_remove_page` of the final reference).
    pub(crate) fn remove_frame(&mut self, pfn: Pfn) {
        self.frames.push(pfn.0);
        if self.frames.len() + self.tables.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Queues a table page whose parent entry was cleared (`pte_free_tlb`, `pmd_free_tlb`, `pud_free_tlb`).
    pub(crate) fn remove_table(&mut self, addr: usize) {
        self.tables.push(addr);
        if self.frames.len() + self.tables.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Drops one reference to `pfn` and queues the frame if it was the last.
    pub(crate) fn put_frame(&mut self, pfn: Pfn) {
        if self.mem.frame(pfn).put() {
            self.remove_frame(pfn);
        }
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.tables.is_empty()
    }

    /// Hands what is queued to RCU now (`tlb_flush_mmu`) and starts its grace period.
    pub(crate) fn flush(&mut self) {
        if self.is_empty() {
            return;
        }
        let frames = std::mem::take(&mut self.frames);
        let tables = std::mem::take(&mut self.tables);
        self.mem.stats.add(FRAMES_RELEASED, frames.len() as i64);
        self.mem.stats.add(TABLES_RELEASED, tables.len() as i64);
        let mem = Arc::clone(&self.mem);
        let full = frames.len() + tables.len() >= FLUSH_AT;
        let g = vmspace_rcu::pin();
        g.defer(move || {
            // A grace period after every entry naming them was cleared: no walker can reach them (module docs).
            mem.free_frames_released(&frames);
            mem.free_tables_released(&tables);
        });
        if full {
            self.handed += 1;
            if self.handed.is_multiple_of(GP_EVERY) {
                g.flush();
            }
        }
    }
}

impl Drop for MmuGather {
    /// `tlb_finish_mmu`: hands the rest to RCU and, if the gather handed a full batch, waits a bounded time for
    /// the grace period of everything this thread retired (`expedite`: also the batches started every
    /// [`GP_EVERY`], which the gather's own read-side section held back). A small gather's objects wait in the
    /// thread's bag for later operations.
    fn drop(&mut self) {
        self.flush();
        if self.handed > 0 {
            vmspace_rcu::expedite(EXPEDITE_BUDGET);
        }
    }
}

impl std::fmt::Debug for MmuGather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmuGather")
            .field("frames", &self.frames.len())
            .field("tables", &self.tables.len())
            .finish()
    }
}
