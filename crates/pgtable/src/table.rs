//! Table pages: one level of the page table (512 entries) with its split page-table lock.
//!
//! A [`Table`] is the 4 KiB page of entries plus what the kernel keeps in the page's `struct ptdesc`: the
//! split page-table lock (`ptdesc->ptl`, `CONFIG_SPLIT_PTE_PTLOCKS`), taken by everyone who changes a PTE
//! table's entries (`pte_offset_map_lock`). 4,160 bytes in all, the kernel's 4 KiB page plus its 64-byte
//! descriptor.
//!
//! # Upper-level entries
//!
//! A PGD, PUD or PMD entry names the next table by its address: `address | _PAGE_TABLE` (present, writable,
//! user, accessed), 0 when empty. Tables are 64-byte aligned, so the flag bits (0, 1, 2 and 5) never collide
//! with the address. The address crosses the atomic word as an integer, so its provenance is exposed when the
//! table is allocated and taken back when an entry is followed (as the maple tree does with its nodes).
//!
//! # Lifetime
//!
//! A table is linked by one release store (or compare-and-swap) of its parent entry after it was zeroed, so a
//! walker that loads the entry with Acquire sees the empty entries. It is unlinked by clearing the parent
//! entry (a PTE table: with its own lock held, so that a faulter that found the table and then took its lock
//! notices, by re-reading the parent entry, that it is gone), and freed after an RCU grace period
//! ([`crate::gather::MmuGather`]), since lockless walkers may still be inside it. Under loom a freed table is kept and
//! marked, and every access through [`table_of`] asserts the mark is clear, so a walker reaching a reclaimed
//! table fails the model.

use vmspace_rcu::sync::{AtomicU64, Mutex, Ordering};

use crate::arch::{PTRS_PER_TABLE, bits};
use crate::frame::{Memory, TABLES_ALLOC, TABLES_FREED, TABLES_RELEASED};

/// One table page (module docs).
#[repr(C, align(64))]
pub(crate) struct Table {
    /// The entries. Loaded with Acquire by walkers (pairs with the Release that stored a table address or a
    /// PTE whose frame was initialised); changed under the table's lock (PTE tables) or by compare-and-swap
    /// (upper levels, installing a child).
    pub(crate) e: [AtomicU64; PTRS_PER_TABLE],
    /// The split page-table lock (`ptdesc->ptl`). Used by PTE tables only.
    pub(crate) ptl: Mutex<()>,
    /// Loom builds only: set instead of freeing, so that a walker reaching a reclaimed table fails the model.
    #[cfg(loom)]
    freed: vmspace_rcu::sync::AtomicBool,
}

/// Bytes of one table page with its descriptor.
pub const TABLE_BYTES: usize = std::mem::size_of::<Table>();

/// The flag bits of an upper-level entry (`_PAGE_TABLE` without `_PAGE_DIRTY`, whose bit is part of the
/// 64-byte-aligned address here).
pub(crate) const TABLE_ENTRY_BITS: u64 = bits::PRESENT | bits::RW | bits::USER | bits::ACCESSED;
const TABLE_ADDR_MASK: u64 = !63;

/// The upper-level entry naming the table at `addr`.
#[inline]
pub(crate) fn table_entry(addr: usize) -> u64 {
    addr as u64 | TABLE_ENTRY_BITS
}

/// The table address an upper-level entry names.
#[inline]
pub(crate) fn entry_addr(entry: u64) -> usize {
    (entry & TABLE_ADDR_MASK) as usize
}

/// The table an upper-level entry (or a bare table address) names.
///
/// # Safety
///
/// `entry` is non-zero and was loaded from a table entry (or is a table address from [`Memory::alloc_table`]),
/// and the table is not freed while the returned reference is used: the caller is inside an RCU read-side
/// section that was entered before the load, or holds the table's lock having re-checked that it is linked,
/// or excludes every unlinking of it (the operation's documented caller contract).
#[inline]
pub(crate) unsafe fn table_of<'a>(entry: u64) -> &'a Table {
    let p = std::ptr::with_exposed_provenance::<Table>(entry_addr(entry));
    // SAFETY: the caller's contract; `alloc_table` exposed the provenance of the allocation.
    let t = unsafe { &*p };
    #[cfg(loom)]
    assert!(!t.freed.load(Ordering::Relaxed), "pgtable: access to a freed table page");
    t
}

impl Table {
    /// Entry `i` (Acquire: see the field).
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> u64 {
        self.e[i].load(Ordering::Acquire)
    }

    /// The index of the first non-zero entry at or after `from`, if any. Relaxed loads, eight entries (one
    /// cache line) at a time while they are all zero: a scan for walks that nothing changes the table under
    /// (validation), whose caller re-reads what it finds with [`Table::get`].
    pub(crate) fn next_used(&self, from: usize) -> Option<usize> {
        let mut i = from;
        while i < self.e.len() {
            if i.is_multiple_of(8) && i + 8 <= self.e.len() {
                // Relaxed: see above.
                let any = self.e[i..i + 8].iter().fold(0, |a, e| a | e.load(Ordering::Relaxed));
                if any == 0 {
                    i += 8;
                    continue;
                }
            }
            // Relaxed: see above.
            if self.e[i].load(Ordering::Relaxed) != 0 {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Whether every entry is zero.
    pub(crate) fn is_empty(&self) -> bool {
        self.e.iter().all(|e| e.load(Ordering::Acquire) == 0)
    }
}

impl Memory {
    /// Allocates a zeroed table page. `None` = injected failure.
    pub(crate) fn alloc_table(&self) -> Option<usize> {
        if !self.admit() {
            return None;
        }
        if self.max_tables != u64::MAX {
            // The limit counts every table not yet freed (an exact sum of the sharded counters: a bounded
            // memory is a test configuration, where the sum's cost does not matter).
            let s = self.stats.sums();
            if (s[TABLES_ALLOC] as u64).wrapping_sub(s[TABLES_FREED] as u64) >= self.max_tables {
                return None;
            }
        }
        #[cfg(not(loom))]
        let p: *mut Table = {
            let layout = std::alloc::Layout::new::<Table>();
            // SAFETY: non-zero size. All-zero bytes are valid atomic words; the lock is written below before the
            // table is used.
            let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut Table;
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            // SAFETY: `p` is a fresh allocation of a `Table`; writing the field initialises it.
            unsafe { std::ptr::addr_of_mut!((*p).ptl).write(Mutex::new(())) };
            p
        };
        #[cfg(loom)]
        let p: *mut Table = Box::into_raw(Box::new(Table {
            e: std::array::from_fn(|_| AtomicU64::new(0)),
            ptl: Mutex::new(()),
            freed: vmspace_rcu::sync::AtomicBool::new(false),
        }));
        self.stats.add(TABLES_ALLOC, 1);
        Some(p.expose_provenance())
    }

    /// Frees a table that was never linked.
    pub(crate) fn free_table_unpublished(&self, addr: usize) {
        self.stats.add(TABLES_RELEASED, 1);
        self.free_tables_released(&[addr]);
    }

    /// Frees tables already counted as released (unlinked and past their grace period, or never linked).
    pub(crate) fn free_tables_released(&self, addrs: &[usize]) {
        for &a in addrs {
            let p = std::ptr::with_exposed_provenance_mut::<Table>(a);
            #[cfg(not(loom))]
            {
                // SAFETY: `a` came from `alloc_table` (a `Table` with this layout whose lock was initialised), is
                // freed once, and no walker can reach it any more.
                unsafe {
                    std::ptr::drop_in_place(p);
                    std::alloc::dealloc(p as *mut u8, std::alloc::Layout::new::<Table>());
                }
            }
            #[cfg(loom)]
            {
                // SAFETY: loom keeps the table and marks it (see the field).
                unsafe { &*p }.freed.store(true, Ordering::Relaxed);
            }
        }
        self.stats.add(TABLES_FREED, addrs.len() as i64);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::MemoryConfig;

    #[test]
    fn a_table_is_a_page_and_its_descriptor() {
        assert_eq!(TABLE_BYTES, 4096 + 64);
        assert_eq!(std::mem::align_of::<Table>(), 64);
    }

    #[test]
    fn entries_round_trip_and_tables_are_counted() {
        let m = Memory::new(MemoryConfig::default());
        let a = m.alloc_table().unwrap();
        let e = table_entry(a);
        assert_eq!(entry_addr(e), a);
        // SAFETY: freshly allocated, freed below after the last use.
        let t = unsafe { table_of(e) };
        assert!(t.is_empty());
        t.e[3].store(7, Ordering::Relaxed);
        assert_eq!(t.get(3), 7);
        drop(t.ptl.lock());
        assert_eq!(m.stats().tables_in_use, 1);
        m.free_table_unpublished(a);
        assert_eq!(m.stats().tables_in_use, 0);
        m.inject_alloc_failure(Some(0));
        assert!(m.alloc_table().is_none());
    }

    #[test]
    fn max_tables_bounds_the_tables_not_yet_freed() {
        let m = Memory::new(MemoryConfig { max_tables: 2, ..MemoryConfig::default() });
        let a = m.alloc_table().unwrap();
        let b = m.alloc_table().unwrap();
        assert!(m.alloc_table().is_none(), "the third table");
        m.free_table_unpublished(a);
        let c = m.alloc_table().expect("one freed, one more allowed");
        m.free_table_unpublished(b);
        m.free_table_unpublished(c);
        assert_eq!(m.stats().tables_in_use, 0);
    }
}
