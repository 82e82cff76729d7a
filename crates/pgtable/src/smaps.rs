//! `/proc/PID/smaps` page accounting (`fs/proc/task_mmu.c`: `smaps_pte_range`, `smaps_pte_entry`,
//! `smaps_account`, `smaps_page_accumulate`), in two reader modes.
//!
//! For every present entry that maps a frame (`vm_normal_page`: the zero page and other special entries count
//! for nothing, not even RSS) the page adds, in bytes, into a [`vmspace_proc::MemStatsAccumulator`] exactly what
//! Linux 6.18 adds:
//! - `Rss`; `Anonymous` for anonymous pages, and `LazyFree` for those without `PG_swapbacked` whose entry and
//!   frame are both clean; `Referenced` if the entry is young or the frame referenced;
//! - PSS, split by sharing: a frame whose refcount is 1 is mapped exactly once, so it adds a whole page to PSS
//!   and to `Private_*`; otherwise its mapcount decides: 2 or more is shared (`Shared_*`, PSS divided by the
//!   mapcount, in `PSS_SHIFT` fixed point), 1 is private. `Pss_Anon`, `Pss_Shmem` (swap-backed file pages) or
//!   `Pss_File` take the same share, and so does `Pss_Dirty` (and `*_Dirty`) when the entry or the frame is
//!   dirty, and `Locked` when the VMA is `VM_LOCKED`.
//!
//! Markers and empty entries count nothing; there is no swap, so `Swap` and `SwapPss` stay 0.
//!
//! [`PageTable::smaps_range`] is the kernel's reader: it takes each PTE table's lock (the caller holds the mmap
//! read lock or the VMA's read lock, as `show_smap` does), so each table's entries are a consistent snapshot.
//! [`PageTable::smaps_range_lockless`] takes no lock at all: it walks inside an RCU read-side section with
//! atomic loads, as fast GUP walks, so it never blocks a writer and never touches freed memory (tables and
//! frames are freed a grace period after they are unlinked); what it reports may mix entries from before and
//! after a concurrent change, and a frame's mapcount may be read while a zap or fork changes it.

use vmspace_proc::{MemStatsAccumulator, PSS_SHIFT};

use crate::arch::{PAGE_SIZE, Pte, VA_END};
use crate::frame::FrameFlags;
use crate::pgtable::PageTable;

impl PageTable {
    /// `smaps_pte_range` over `[start, end)` under each PTE table's lock (module docs). `locked`: the VMA is
    /// `VM_LOCKED`.
    pub fn smaps_range(&self, start: u64, end: u64, locked: bool, acc: &mut MemStatsAccumulator) {
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                self.smaps_pte_entry(g.get(addr), locked, acc);
                addr += PAGE_SIZE;
            }
        });
    }

    /// The lockless reader (module docs): the same accounting without any lock.
    pub fn smaps_range_lockless(&self, start: u64, end: u64, locked: bool, acc: &mut MemStatsAccumulator) {
        let _rcu = vmspace_rcu::pin();
        self.walk_lockless(start, end.min(VA_END), &mut |_, pte| self.smaps_pte_entry(pte, locked, acc));
    }

    /// `smaps_pte_entry` + `smaps_account` for one order-0 page.
    fn smaps_pte_entry(&self, pte: Pte, locked: bool, acc: &mut MemStatsAccumulator) {
        if !pte.is_present() || pte.is_special() {
            return;
        }
        let f = self.mem.frame(pte.pfn());
        let flags = f.flags();
        let b = &mut acc.bytes;
        let size = PAGE_SIZE;
        let young = pte.is_young();
        let dirty = pte.is_dirty();
        let anon = flags.contains(FrameFlags::ANON);
        if anon {
            b.anonymous += size;
            if !flags.contains(FrameFlags::SWAPBACKED) && !dirty && !flags.contains(FrameFlags::DIRTY) {
                b.lazyfree += size;
            }
        }
        b.rss += size;
        if young || flags.contains(FrameFlags::REFERENCED) {
            b.referenced += size;
        }
        let (pss, private) = if f.refcount() == 1 {
            (size << PSS_SHIFT, true)
        } else {
            let mapcount = f.mapcount();
            let pss = size << PSS_SHIFT;
            if mapcount >= 2 { (pss / u64::from(mapcount), false) } else { (pss, true) }
        };
        // `smaps_page_accumulate`.
        b.pss += pss;
        if anon {
            b.pss_anon += pss;
        } else if flags.contains(FrameFlags::SWAPBACKED) {
            b.pss_shmem += pss;
        } else {
            b.pss_file += pss;
        }
        if locked {
            b.locked += pss;
        }
        if dirty || flags.contains(FrameFlags::DIRTY) {
            b.pss_dirty += pss;
            if private {
                b.private_dirty += size;
            } else {
                b.shared_dirty += size;
            }
        } else if private {
            b.private_clean += size;
        } else {
            b.shared_clean += size;
        }
    }
}
