//! [`PageTableView`]: what an owner of a page table lends to code that must not change it.
//!
//! The address space (`vmspace-mm`) owns its page table and changes it only under its locks; its users still
//! need the lockless side of it: the emulated MMU (a CPU's loads, stores and instruction fetches through the
//! entries), the lockless walks (`pte`, `entries`, `smaps_range_lockless`) and the counters. A
//! `PageTableView` is a shared borrow of a [`PageTable`] that exposes exactly those. Every one of them runs
//! inside an RCU read-side section and changes no entry, except for the accessed and dirty bits the MMU sets
//! with a compare-and-swap as hardware does, so nothing a holder does with it can break the owner's
//! invariants (every entry inside a VMA, accounting exact): zapping, freeing tables, changing protections,
//! moving, copying or faulting are not reachable through it.
//!
//! ```compile_fail,E0599
//! # use vmspace_pgtable::{Memory, MemoryConfig, PageTable};
//! let mem = Memory::new(MemoryConfig::default());
//! let pt = PageTable::new(&mem).unwrap();
//! // A view has no free_pgd_range (nor zap_range, change_protection, move_page_tables, ...).
//! pt.view().free_pgd_range(0, 1 << 30, 0, 0);
//! ```

use crate::arch::{Pfn, Pte};
use crate::fault::FaultStats;
use crate::frame::Memory;
use crate::pgtable::{Access, MmuError, PageTable, Rss};

/// A read-only view of a [`PageTable`] (module docs).
#[derive(Clone, Copy)]
pub struct PageTableView<'a> {
    pt: &'a PageTable,
}

impl std::fmt::Debug for PageTableView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.pt.fmt(f)
    }
}

impl PageTable {
    /// This page table as a [`PageTableView`].
    pub fn view(&self) -> PageTableView<'_> {
        PageTableView { pt: self }
    }
}

impl<'a> PageTableView<'a> {
    /// The memory the page table maps ([`PageTable::memory`]).
    pub fn memory(&self) -> &'a std::sync::Arc<Memory> {
        self.pt.memory()
    }

    /// [`PageTable::rss`].
    pub fn rss(&self) -> Rss {
        self.pt.rss()
    }

    /// [`PageTable::table_pages`].
    pub fn table_pages(&self) -> u64 {
        self.pt.table_pages()
    }

    /// [`PageTable::pte_table_pages`].
    pub fn pte_table_pages(&self) -> u64 {
        self.pt.pte_table_pages()
    }

    /// [`PageTable::table_bytes`].
    pub fn table_bytes(&self) -> u64 {
        self.pt.table_bytes()
    }

    /// [`PageTable::fault_stats`].
    pub fn fault_stats(&self) -> FaultStats {
        self.pt.fault_stats()
    }

    /// [`PageTable::pte`]: the entry of `addr` as a lockless walker sees it now.
    pub fn pte(&self, addr: u64) -> Pte {
        self.pt.pte(addr)
    }

    /// [`PageTable::has_pte_table`].
    pub fn has_pte_table(&self, addr: u64) -> bool {
        self.pt.has_pte_table(addr)
    }

    /// [`PageTable::entries`].
    pub fn entries(&self, start: u64, end: u64) -> Vec<(u64, Pte)> {
        self.pt.entries(start, end)
    }

    /// [`PageTable::for_each_entry`].
    pub fn for_each_entry(&self, start: u64, end: u64, f: impl FnMut(u64, Pte)) {
        self.pt.for_each_entry(start, end, f)
    }

    /// [`PageTable::smaps_range_lockless`].
    pub fn smaps_range_lockless(
        &self,
        start: u64,
        end: u64,
        locked: bool,
        acc: &mut vmspace_proc::MemStatsAccumulator,
    ) {
        self.pt.smaps_range_lockless(start, end, locked, acc)
    }

    /// The emulated MMU's [`PageTable::access`].
    pub fn access(&self, addr: u64, access: Access) -> Result<Pfn, MmuError> {
        self.pt.access(addr, access)
    }

    /// The emulated MMU's [`PageTable::read`].
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MmuError> {
        self.pt.read(addr, buf)
    }

    /// The emulated MMU's [`PageTable::write`].
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MmuError> {
        self.pt.write(addr, data)
    }

    /// The emulated MMU's [`PageTable::string_store_probe`].
    pub fn string_store_probe(&self, addr: u64) {
        self.pt.string_store_probe(addr)
    }
}
