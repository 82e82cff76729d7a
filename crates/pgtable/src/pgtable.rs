//! [`PageTable`]: one address space's 4-level page table, its walks, its split locks, the emulated MMU, and
//! its counters.
//!
//! # Walks and who may run them
//!
//! The PGD is allocated with the page table and lives until it is dropped. PUD, PMD and PTE tables are
//! allocated on demand by faults and the other populating operations (`__pud_alloc`, `__pmd_alloc`,
//! `__pte_alloc`): a new zeroed table is linked with a compare-and-swap of the empty parent entry; a thread that
//! loses the race frees its table at once (it was never reachable). No lock is taken to populate.
//!
//! A PTE table's entries are changed only under its lock ([`PageTable::lock_pte`], the kernel's
//! `pte_offset_map_lock`), except for the accessed and dirty bits, which the emulated MMU sets with a
//! compare-and-swap at any time (as the hardware's locked updates do). Therefore every change of a present entry
//! is itself atomic (a swap or a compare-and-swap loop), never a plain load-modify-store that could drop a
//! concurrent dirty bit.
//!
//! Taking a PTE table's lock follows `__pte_offset_map_lock`: inside an RCU read-side section, load the PMD
//! entry, lock the table it names, then re-load the PMD entry; if it changed, the table was unlinked (an empty
//! table reclaimed by `MADV_DONTNEED`, see `zap`) or replaced, so unlock and start again. Every unlinking of a
//! PTE table holds that table's lock, so a table whose lock is held and whose PMD entry still names it stays
//! linked and allocated until the lock is released; the RCU section covers the window between the load and the
//! lock.
//!
//! Upper-level tables (PUD and PMD tables) are unlinked only by `free_pgd_range` (by an atomic swap of the
//! parent entry, so two racing callers never both retire one table) and by the drop of the whole page table.
//! Every walk through them runs inside an RCU read-side section entered before its first load: the lockless
//! walkers (which may run anywhere, any time) for their whole walk; an operation that locks PTE tables for
//! each table, by its own walk from the PGD whose section the table's guard keeps while the lock is held (as
//! `pte_offset_map_lock` holds `rcu_read_lock` until `pte_unmap_unlock` in Linux 6.18), so no section lasts
//! longer than one table's work. A table therefore stays allocated while anyone who reached it uses it,
//! whatever runs beside: every operation of [`PageTable`] is memory-safe under any concurrency. The locking
//! contracts the operations' docs state (the kernel's: `free_pgd_range` only over ranges no VMA covers, a
//! move only between write-locked VMAs) are what makes their results exact, not what keeps memory safe.
//!
//! # The emulated MMU
//!
//! [`PageTable::access`], [`PageTable::read`] and [`PageTable::write`] are what a CPU does on a user access: walk
//! the four levels inside an RCU read-side section with Acquire loads, check present, user, writable and NX,
//! set accessed (and dirty for a write) with a compare-and-swap, then read or write the frame's contents, still
//! inside the section. A failed check is a page fault ([`MmuError::Fault`]): the caller runs
//! [`crate::handle_mm_fault`] and retries, as the kernel returns to the faulting instruction. Because a frame
//! unmapped by a concurrent zap is freed only after the grace period, an access that translated through the
//! old entry completes on the old frame, as a store through a stale TLB entry does before the shootdown.
//!
//! # Counters
//!
//! RSS by kind (`mm->rss_stat`: anonymous, file, shmem pages mapped by this page table), the number of table
//! pages (`mm_pgtables_bytes`, shown as `VmPTE`), and faults by kind ([`crate::FaultStats`]) are sharded per
//! thread (`counters`), so that concurrent faulters share no counter line.

use std::sync::Arc;

use vmspace_abi::Errno;
use vmspace_rcu::sync::{AtomicU64, MutexGuard, Ordering};

use crate::arch::{Level, PAGE_SIZE, Pfn, Pte, VA_END, bits, index};
use crate::counters::Sharded;
use crate::frame::{FrameFlags, Memory, TABLES_RELEASED};
use crate::table::{TABLE_BYTES, TABLE_ENTRY_BITS, Table, table_entry, table_of};

/// `mm_counter` kinds.
pub(crate) const MM_ANONPAGES: usize = 0;
pub(crate) const MM_FILEPAGES: usize = 1;
pub(crate) const MM_SHMEMPAGES: usize = 2;
/// How many `mm_counter` kinds there are.
pub(crate) const NR_MM_COUNTERS: usize = 3;
/// Table counters: PTE tables, and PUD/PMD tables.
const NR_PTE_TABLES: usize = 0;
const NR_UPPER_TABLES: usize = 1;

/// Pages mapped by a page table, by kind (`get_mm_counter`; `/proc/PID/status` `RssAnon`, `RssFile`,
/// `RssShmem`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rss {
    /// `MM_ANONPAGES`.
    pub anon: i64,
    /// `MM_FILEPAGES`.
    pub file: i64,
    /// `MM_SHMEMPAGES`.
    pub shmem: i64,
}

impl Rss {
    /// All kinds.
    pub fn total(&self) -> i64 {
        self.anon + self.file + self.shmem
    }
}

/// A user access as the MMU sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A load.
    Read,
    /// A store.
    Write,
    /// An instruction fetch.
    Exec,
}

/// Why an emulated access did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmuError {
    /// The MMU raised a page fault at `addr` (`X86_PF_*`): `protection` is `X86_PF_PROT` (the entry was present
    /// but forbade the access). Resolve it with [`crate::handle_mm_fault`] and retry.
    Fault {
        /// The faulting address.
        addr: u64,
        /// The access.
        access: Access,
        /// Present entry, forbidden access (else: no translation).
        protection: bool,
    },
    /// The first write to a frame needed its contents and the allocation failed (an out-of-memory kill in the
    /// kernel's terms).
    NoMem,
}

/// What [`PageTable::validate`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageTableCheck {
    /// Table pages, the PGD included.
    pub tables: u64,
    /// Present entries (the zero page and `PROT_NONE` entries included).
    pub present: u64,
    /// Entries mapping the zero page.
    pub zero: u64,
    /// Marker entries.
    pub markers: u64,
    /// RSS counted from the entries.
    pub rss: Rss,
}

/// One address space's page table (module docs).
pub struct PageTable {
    pub(crate) mem: Arc<Memory>,
    /// The PGD's address.
    pgd: usize,
    rss: Sharded<NR_MM_COUNTERS>,
    tables: Sharded<2>,
    pub(crate) faults: Sharded<{ crate::fault::NKINDS }>,
}

impl std::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTable")
            .field("rss", &self.rss())
            .field("table_pages", &self.table_pages())
            .finish()
    }
}

/// A locked PTE table (`pte_offset_map_lock`'s result): the table stays linked while the guard lives.
///
/// The guard owns the RCU read-side section in which the walk that found the table began (`pte_offset_map`
/// enters one and `pte_unmap` leaves it in Linux 6.18), so the PMD table holding [`PteGuard::pmd`] stays
/// allocated while the guard lives even if `free_pgd_range` unlinks it meanwhile. The references it holds are
/// valid only for the guard's own life: its accessors hand them out borrowed from the guard. The lock is
/// released before the section ends (field order), since unlocking writes to the table.
pub(crate) struct PteGuard<'a> {
    table: &'a Table,
    /// The PMD entry naming the table.
    pmd: &'a AtomicU64,
    /// The PMD entry's value (the table's address and flags).
    entry: u64,
    _lock: MutexGuard<'a, ()>,
    /// Dropped last: see the type's docs.
    _rcu: vmspace_rcu::Guard,
}

impl PteGuard<'_> {
    /// The locked table.
    #[inline]
    pub(crate) fn table(&self) -> &Table {
        self.table
    }

    /// The PMD entry's value naming the table (its address and flags).
    #[inline]
    pub(crate) fn entry(&self) -> u64 {
        self.entry
    }

    /// The entry slot of `addr`.
    #[inline]
    pub(crate) fn slot(&self, addr: u64) -> &AtomicU64 {
        &self.table.e[index(addr, 0)]
    }

    /// The entry of `addr` (Acquire: pairs with the Release that stored it).
    #[inline]
    pub(crate) fn get(&self, addr: u64) -> Pte {
        Pte(self.slot(addr).load(Ordering::Acquire))
    }

    /// The entries of `[addr, to)` (within this table), as a slice.
    #[inline]
    fn slots(&self, addr: u64, to: u64) -> &[AtomicU64] {
        let i = index(addr, 0);
        &self.table.e[i..i + ((to - addr) / PAGE_SIZE) as usize]
    }

    /// How many entries from `addr` on, before `to` (within this table), hold exactly `pte` (Acquire loads, as
    /// `get`): the length of a run of identical markers, which the callers handle as one.
    #[inline]
    pub(crate) fn run(&self, addr: u64, to: u64, pte: Pte) -> u64 {
        self.slots(addr, to).iter().take_while(|e| e.load(Ordering::Acquire) == pte.0).count() as u64
    }

    /// Stores `pte` into the `pages` entries from `addr` on, as [`PteGuard::set`] does each.
    #[inline]
    pub(crate) fn fill(&self, addr: u64, pages: u64, pte: Pte) {
        for e in self.slots(addr, addr + pages * PAGE_SIZE) {
            // Release: as `set`.
            e.store(pte.0, Ordering::Release);
        }
    }

    /// Clears the `pages` entries from `addr` on, which hold non-present entries (markers): the MMU never
    /// updates those, so a store does what [`PteGuard::take`]'s swap would. Release: orders the clear before a
    /// later retirement of the table, as `take`.
    #[inline]
    pub(crate) fn clear_non_present(&self, addr: u64, pages: u64) {
        for e in self.slots(addr, addr + pages * PAGE_SIZE) {
            debug_assert!(
                !Pte(e.load(Ordering::Relaxed)).is_present(),
                "clear_non_present on a present entry"
            );
            e.store(0, Ordering::Release);
        }
    }

    /// Stores the entry of `addr`. Release: publishes the frame's initialisation to walkers' Acquire loads.
    /// Only for entries the MMU cannot be updating: the old value is none or not present, or the caller
    /// replaces a present entry it has just swapped out or compared.
    #[inline]
    pub(crate) fn set(&self, addr: u64, pte: Pte) {
        self.slot(addr).store(pte.0, Ordering::Release);
    }

    /// Stores `new` if the entry is still `old` (`pte_same` + `set_pte_at` under the lock, against the MMU's
    /// concurrent accessed/dirty updates). AcqRel: Release publishes as [`PteGuard::set`]; Acquire reads the
    /// MMU's latest bits on failure.
    #[inline]
    pub(crate) fn replace(&self, addr: u64, old: Pte, new: Pte) -> Result<(), Pte> {
        self.slot(addr)
            .compare_exchange(old.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(Pte)
    }

    /// Applies `f` to the entry atomically (a compare-and-swap loop), returning the old and new values.
    #[inline]
    pub(crate) fn update(&self, addr: u64, mut f: impl FnMut(Pte) -> Pte) -> (Pte, Pte) {
        let slot = self.slot(addr);
        // Acquire: as `get`.
        let mut cur = Pte(slot.load(Ordering::Acquire));
        loop {
            let new = f(cur);
            if new == cur {
                return (cur, cur);
            }
            // AcqRel: as `replace`.
            match slot.compare_exchange_weak(cur.0, new.0, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return (cur, new),
                Err(c) => cur = Pte(c),
            }
        }
    }

    /// Unlinks the locked table from its PMD entry; the caller then retires it through a gather, and only if
    /// this returned true. Release: orders the table's last entry changes before the unlink, for a walker that
    /// re-reads the PMD entry. Every unlinking of a PTE table holds its lock and re-checked the entry after
    /// locking, so the compare-and-swap cannot fail; it is one nonetheless, so that a table is never retired
    /// twice whatever happened to the entry.
    #[must_use]
    pub(crate) fn unlink(&self) -> bool {
        let r = self.pmd.compare_exchange(self.entry, 0, Ordering::AcqRel, Ordering::Relaxed);
        debug_assert!(r.is_ok(), "a locked, linked PTE table was unlinked by someone else");
        r.is_ok()
    }

    /// The table's address (for the gather).
    pub(crate) fn table_addr(&self) -> usize {
        crate::table::entry_addr(self.entry)
    }

    /// Clears the entry and returns its last value, with the MMU's final accessed/dirty bits
    /// (`ptep_get_and_clear`). AcqRel: Acquire reads the MMU's updates; Release orders the clear before the
    /// gather's retirement of the frame.
    #[inline]
    pub(crate) fn take(&self, addr: u64) -> Pte {
        Pte(self.slot(addr).swap(0, Ordering::AcqRel))
    }
}

impl PageTable {
    /// A new, empty page table (`pgd_alloc`) in `mem`. Allocates the PGD.
    pub fn new(mem: &Arc<Memory>) -> Result<PageTable, Errno> {
        let pgd = mem.alloc_table().ok_or(Errno::ENOMEM)?;
        Ok(PageTable {
            mem: Arc::clone(mem),
            pgd,
            rss: Sharded::new(),
            tables: Sharded::new(),
            faults: Sharded::new(),
        })
    }

    /// The memory this page table maps.
    pub fn memory(&self) -> &Arc<Memory> {
        &self.mem
    }

    #[inline(always)]
    pub(crate) fn pgd(&self) -> &Table {
        // SAFETY: the PGD lives as long as `self`.
        unsafe { table_of(self.pgd as u64) }
    }

    /// RSS counters (module docs).
    pub fn rss(&self) -> Rss {
        let [anon, file, shmem] = self.rss.sums();
        Rss { anon, file, shmem }
    }

    #[inline]
    pub(crate) fn add_rss(&self, kind: usize, delta: i64) {
        self.rss.add(kind, delta);
    }

    /// The `mm_counter` kind of a frame: anonymous, shmem (swap-backed file page) or file.
    #[inline]
    pub(crate) fn rss_kind(flags: FrameFlags) -> usize {
        if flags.contains(FrameFlags::ANON) {
            MM_ANONPAGES
        } else if flags.contains(FrameFlags::SWAPBACKED) {
            MM_SHMEMPAGES
        } else {
            MM_FILEPAGES
        }
    }

    /// Table pages this page table holds, the PGD included (`mm_pgtables_bytes / PAGE_SIZE`).
    pub fn table_pages(&self) -> u64 {
        let [pte, upper] = self.tables.sums();
        (pte + upper + 1) as u64
    }

    /// PTE tables alone (what `VmPTE` counts in a kernel that splits the count by level).
    pub fn pte_table_pages(&self) -> u64 {
        self.tables.sum(NR_PTE_TABLES) as u64
    }

    /// Bytes of table memory (pages and their descriptors).
    pub fn table_bytes(&self) -> u64 {
        self.table_pages() * TABLE_BYTES as u64
    }

    pub(crate) fn count_table(&self, child_level: Level, delta: i64) {
        self.tables.add(if child_level == 0 { NR_PTE_TABLES } else { NR_UPPER_TABLES }, delta);
    }

    /// Links a new empty table of `child_level` into `slot` unless another thread did first; returns the entry
    /// now in the slot.
    pub(crate) fn install_table(&self, slot: &AtomicU64, child_level: Level) -> Result<u64, Errno> {
        let a = self.mem.alloc_table().ok_or(Errno::ENOMEM)?;
        let e = table_entry(a);
        // AcqRel on success: Release publishes the zeroed table to walkers' Acquire loads. Acquire on failure:
        // pairs with the winner's Release, so its table is initialised for us.
        match slot.compare_exchange(0, e, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                self.count_table(child_level, 1);
                Ok(e)
            }
            Err(cur) => {
                self.mem.free_table_unpublished(a);
                Ok(cur)
            }
        }
    }

    /// The entry slot of `addr` at `target` level (1 = the PMD entry), walking down from the PGD and, if
    /// `alloc`, allocating missing tables above `target`. `Ok(None)`: a table on the way is missing.
    ///
    /// The walk runs inside the caller's read-side section `_rcu` (entered before this call), and the slot is
    /// borrowed for it: a table on the way that `free_pgd_range` unlinks meanwhile stays allocated until the
    /// section ends.
    pub(crate) fn entry_slot<'g>(
        &'g self,
        addr: u64,
        target: Level,
        alloc: bool,
        _rcu: &'g vmspace_rcu::Guard,
    ) -> Result<Option<&'g AtomicU64>, Errno> {
        debug_assert!(addr < VA_END);
        let mut t = self.pgd();
        let mut level: Level = 3;
        loop {
            let slot = &t.e[index(addr, level)];
            if level == target {
                return Ok(Some(slot));
            }
            // Acquire: pairs with the Release that linked the child table.
            let mut v = slot.load(Ordering::Acquire);
            if v == 0 {
                if !alloc {
                    return Ok(None);
                }
                v = self.install_table(slot, level - 1)?;
            }
            // SAFETY: inside `_rcu`, entered before the load: a table unlinked since is not freed before the
            // section ends, and the returned borrow does not outlive it.
            t = unsafe { table_of(v) };
            level -= 1;
        }
    }

    /// `pte_offset_map_lock` (with `pte_alloc` first if `alloc`): the locked PTE table covering `addr`, walked
    /// from the PGD inside a read-side section that the guard keeps. `Ok(None)`: no table and `alloc` is
    /// false. Errors: `ENOMEM` allocating a table.
    pub(crate) fn lock_pte(&self, addr: u64, alloc: bool) -> Result<Option<PteGuard<'_>>, Errno> {
        let rcu = vmspace_rcu::pin();
        let Some(pmd) = self.entry_slot(addr, 1, alloc, &rcu)? else { return Ok(None) };
        let pmd: *const AtomicU64 = pmd;
        // SAFETY: `pmd` was reached inside `rcu`, which the guard returned keeps until it is dropped (the
        // section is moved into it; moving a guard does not end its section).
        unsafe { self.lock_pte_at(&*pmd, alloc, rcu) }
    }

    /// [`PageTable::lock_pte`] from the PMD entry `pmd` of this page table, inside the read-side section
    /// `rcu`, which the returned guard keeps.
    ///
    /// # Safety
    ///
    /// `pmd` is an entry of a PMD table of this page table that was reached inside `rcu` (or a section that
    /// encloses it and outlives the returned guard), so that the PMD table stays allocated until the guard is
    /// dropped.
    pub(crate) unsafe fn lock_pte_at<'a>(
        &'a self,
        pmd: &'a AtomicU64,
        alloc: bool,
        rcu: vmspace_rcu::Guard,
    ) -> Result<Option<PteGuard<'a>>, Errno> {
        loop {
            // Acquire: pairs with the Release that linked the table.
            let mut v = pmd.load(Ordering::Acquire);
            if v == 0 {
                if !alloc {
                    return Ok(None);
                }
                v = self.install_table(pmd, 0)?;
            }
            // SAFETY: inside the RCU section entered before the load: a table unlinked since is not yet freed.
            let t = unsafe { table_of(v) };
            let lock = t.ptl.lock();
            // Acquire: pairs with the unlinking store (made under this lock) or a new link.
            if pmd.load(Ordering::Acquire) == v {
                // Linked, and unlinking needs the lock we hold: the table outlives the guard (module docs).
                return Ok(Some(PteGuard { table: t, pmd, entry: v, _lock: lock, _rcu: rcu }));
            }
        }
    }

    /// Calls `f(table, from, to)` for every existing PTE table overlapping `[start, end)` (widened to whole
    /// pages), locked, with the page-aligned part `[from, to)` of the range it covers. Allocates nothing.
    ///
    /// Each PTE table is reached by its own walk from the PGD inside its own read-side section, which its
    /// guard keeps while `f` runs: a long zap or smaps walk holds up no grace period for longer than one
    /// table's work, and a table that `free_pgd_range` unlinks beside it is never freed under it. A missing
    /// upper entry skips its whole span, so a sparse range costs what the recursive walk would.
    pub(crate) fn for_each_pte_table(
        &self,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&PteGuard<'_>, u64, u64),
    ) {
        // Whole pages: the callers step page by page from `from` to `to`.
        let start = start & !(PAGE_SIZE - 1);
        let end = end.min(VA_END).next_multiple_of(PAGE_SIZE);
        let mut addr = start;
        while addr < end {
            let rcu = vmspace_rcu::pin();
            let mut t = self.pgd();
            let mut level: Level = 3;
            let next = loop {
                let next = crate::arch::addr_end(addr, end, level);
                let slot = &t.e[index(addr, level)];
                if level == 1 {
                    let slot: *const AtomicU64 = slot;
                    // SAFETY: the slot was reached inside `rcu`, which the guard keeps until it is dropped.
                    if let Ok(Some(g)) = unsafe { self.lock_pte_at(&*slot, false, rcu) } {
                        f(&g, addr, next);
                    }
                    break next;
                }
                // Acquire: pairs with the Release that linked the child.
                let v = slot.load(Ordering::Acquire);
                if v == 0 {
                    break next;
                }
                // SAFETY: inside `rcu`, entered before the load; `t` is not used after the section.
                t = unsafe { table_of(v) };
                level -= 1;
            };
            addr = next;
        }
    }

    /// The PTE of `addr` as a lockless walker sees it now (none if a table on the way is missing).
    pub fn pte(&self, addr: u64) -> Pte {
        if addr >= VA_END {
            return Pte::NONE;
        }
        let _g = vmspace_rcu::pin();
        match self.lockless_pte_slot(addr) {
            // Acquire: as `Table::get`.
            Some(s) => Pte(s.load(Ordering::Acquire)),
            None => Pte::NONE,
        }
    }

    /// Whether a PTE table covers `addr` (its PMD entry is not empty: `find_pmd_or_thp_or_none`), as a
    /// lockless walker sees it now.
    pub fn has_pte_table(&self, addr: u64) -> bool {
        if addr >= VA_END {
            return false;
        }
        let g = vmspace_rcu::pin();
        match self.entry_slot(addr, 1, false, &g) {
            // Acquire: pairs with the table's link.
            Ok(Some(pmd)) => pmd.load(Ordering::Acquire) != 0,
            _ => false,
        }
    }

    /// The PTE slot of `addr` for a lockless walker, or `None`. The caller is inside an RCU read-side section
    /// and uses the slot only within it.
    #[inline]
    pub(crate) fn lockless_pte_slot(&self, addr: u64) -> Option<&AtomicU64> {
        let mut t = self.pgd();
        let mut level: Level = 3;
        loop {
            let slot = &t.e[index(addr, level)];
            if level == 0 {
                return Some(slot);
            }
            let v = t.get(index(addr, level));
            if v & bits::PRESENT == 0 {
                return None;
            }
            // SAFETY: the caller's RCU section was entered before this load; tables are freed a grace period
            // after they are unlinked.
            t = unsafe { table_of(v) };
            level -= 1;
        }
    }

    /// The emulated MMU's translation of one access (module docs): the frame, with accessed (and dirty) set.
    #[inline]
    fn translate(&self, addr: u64, access: Access) -> Result<Pfn, MmuError> {
        let fault = |protection| MmuError::Fault { addr, access, protection };
        if addr >= VA_END {
            return Err(fault(false));
        }
        loop {
            let slot = self.lockless_pte_slot(addr).ok_or(fault(false))?;
            // Acquire: pairs with the Release that stored the entry after initialising its frame.
            let pte = Pte(slot.load(Ordering::Acquire));
            if !pte.is_hw_present() {
                return Err(fault(false));
            }
            let denied = pte.0 & bits::USER == 0
                || (access == Access::Write && !pte.is_write())
                || (access == Access::Exec && !pte.is_exec());
            if denied {
                return Err(fault(true));
            }
            let want = bits::ACCESSED | if access == Access::Write { bits::DIRTY } else { 0 };
            if pte.0 & want == want {
                return Ok(pte.pfn());
            }
            // AcqRel: the MMU's locked update of the entry (Acquire as the load above; Release is harmless).
            if slot.compare_exchange(pte.0, pte.0 | want, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return Ok(pte.pfn());
            }
        }
    }

    /// Sets the accessed bit of the present user entry at `addr`, as a read of the page would, without any
    /// permission check: what x86's `rep stosb` does, on some CPUs, to a page whose protection then refuses its
    /// write (measured on an earlier host of this project: after such a refused string store the page counted
    /// as `Referenced` in smaps; a `mov` or a locked read-modify-write refused the same way left the bit clear;
    /// the CPU measured 2026-11-25 leaves it clear for the string store too). Nothing for an
    /// entry that is not present to the MMU.
    pub fn string_store_probe(&self, addr: u64) {
        if addr >= VA_END {
            return;
        }
        let _g = vmspace_rcu::pin();
        let Some(slot) = self.lockless_pte_slot(addr) else { return };
        // Acquire: pairs with the Release that stored the entry.
        let pte = Pte(slot.load(Ordering::Acquire));
        if pte.is_hw_present() && pte.0 & bits::USER != 0 && pte.0 & bits::ACCESSED == 0 {
            // AcqRel: the MMU's locked update of the entry, as in `translate`; a lost race means another
            // update (which keeps or sets the bit) came first.
            let _ = slot.compare_exchange(pte.0, pte.0 | bits::ACCESSED, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// One user access at `addr` (no data moved): the MMU's checks and accessed/dirty updates. Returns the frame.
    pub fn access(&self, addr: u64, access: Access) -> Result<Pfn, MmuError> {
        let _g = vmspace_rcu::pin();
        self.translate(addr, access)
    }

    /// Reads `buf.len()` bytes at `addr` through the page table, as user loads would. Stops at the first page
    /// that faults (the bytes before it were read).
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MmuError> {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr + done as u64;
            let off = (a % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - off).min(buf.len() - done);
            let _g = vmspace_rcu::pin();
            let pfn = self.translate(a, Access::Read)?;
            self.mem.read_frame(pfn, off, &mut buf[done..done + n]);
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at `addr` through the page table, as user stores would (the first write to a frame
    /// allocates its contents). Stops at the first page that faults (the bytes before it were written).
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MmuError> {
        let mut done = 0usize;
        while done < data.len() {
            let a = addr + done as u64;
            let off = (a % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - off).min(data.len() - done);
            let _g = vmspace_rcu::pin();
            let pfn = self.translate(a, Access::Write)?;
            // A writable entry never maps the zero page (it is mapped read-only and special).
            let d = self.mem.ensure_data(pfn).ok_or(MmuError::NoMem)?;
            d.write(off, &data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    /// Every present or marker entry in `[start, end)`, in address order, as a lockless walker sees them.
    pub fn entries(&self, start: u64, end: u64) -> Vec<(u64, Pte)> {
        let mut out = Vec::new();
        self.for_each_entry(start, end, |a, p| out.push((a, p)));
        out
    }

    /// Calls `f` on every present or marker entry in `[start, end)`, in address order, as a lockless walker
    /// sees them ([`PageTable::entries`] without collecting them).
    pub fn for_each_entry(&self, start: u64, end: u64, mut f: impl FnMut(u64, Pte)) {
        let _g = vmspace_rcu::pin();
        self.walk_lockless(start, end.min(VA_END), &mut f);
    }

    /// Calls `f` on every non-empty PTE in `[start, end)` without locks. The caller is inside an RCU
    /// read-side section. Generic over `f` so that the per-entry call is inlined (no indirect call per PTE).
    pub(crate) fn walk_lockless<F: FnMut(u64, Pte)>(&self, start: u64, end: u64, f: &mut F) {
        fn rec<F: FnMut(u64, Pte)>(t: &Table, level: Level, start: u64, end: u64, f: &mut F) {
            let mut addr = start;
            while addr < end {
                let next = crate::arch::addr_end(addr, end, level);
                let v = t.get(index(addr, level));
                if level == 0 {
                    if v != 0 {
                        f(addr, Pte(v));
                    }
                } else if v & bits::PRESENT != 0 {
                    // SAFETY: the caller's RCU section was entered before the load.
                    rec(unsafe { table_of(v) }, level - 1, addr, next, f);
                }
                addr = next;
            }
        }
        if start < end {
            rec(self.pgd(), 3, start, end, f);
        }
    }

    /// Checks the page table's structure and accounting; the caller stops every other operation on it first.
    ///
    /// Upper-level entries are well-formed table entries; PTEs are none, markers, the zero page (special,
    /// read-only) or frames in use (not free, mapped, referenced at least as often as mapped); the table and RSS
    /// counters equal what the walk finds.
    pub fn validate(&self) -> Result<PageTableCheck, String> {
        self.validate_with(|_, _, _| std::ops::ControlFlow::Continue(()))
    }

    /// [`PageTable::validate`], calling `each(addr, pte, pages)` on the present and marker entries in address
    /// order during the same walk, after the entries' own checks (a caller's checks of the entries against its
    /// VMAs, without a second walk of every table). `pages` is 1 for an entry that maps a frame; a run of
    /// identical zero-page or marker entries in one table comes as one call, `pages` entries from `addr` (their
    /// checks read nothing but the value, and populated read-only memory is such runs, hundreds of thousands
    /// of entries long). The first broken rule ends the walk, and so does `each` returning `Break` (the error
    /// then names the entry or run; the caller keeps its own account of what it found).
    pub fn validate_with(
        &self,
        mut each: impl FnMut(u64, Pte, u64) -> std::ops::ControlFlow<()>,
    ) -> Result<PageTableCheck, String> {
        let _g = vmspace_rcu::pin();
        let mut c = PageTableCheck { tables: 1, ..PageTableCheck::default() };
        let mut upper = 0i64;
        let mut ptes = 0i64;
        let mut err: Option<String> = None;
        self.check_rec(self.pgd(), 3, 0, &mut c, &mut upper, &mut ptes, &mut err, &mut each);
        if let Some(e) = err {
            return Err(e);
        }
        let [want_pte, want_upper] = self.tables.sums();
        if (ptes, upper) != (want_pte, want_upper) {
            return Err(format!(
                "table counters say {want_pte} PTE + {want_upper} upper, walk found {ptes} + {upper}"
            ));
        }
        if c.rss != self.rss() {
            return Err(format!("rss counters {:?}, entries {:?}", self.rss(), c.rss));
        }
        Ok(c)
    }

    #[allow(clippy::too_many_arguments)]
    fn check_rec<F: FnMut(u64, Pte, u64) -> std::ops::ControlFlow<()>>(
        &self,
        t: &Table,
        level: Level,
        base: u64,
        c: &mut PageTableCheck,
        upper: &mut i64,
        ptes: &mut i64,
        err: &mut Option<String>,
        each: &mut F,
    ) {
        let mut i = 0;
        while let Some(at) = t.next_used(i) {
            i = at + 1;
            if err.is_some() {
                return;
            }
            let addr = base + ((at as u64) << crate::arch::level_shift(level));
            let v = t.get(at);
            if level > 0 {
                if v & 63 != TABLE_ENTRY_BITS {
                    *err = Some(format!("level {level} entry at {addr:#x} is not a table entry: {v:#x}"));
                    return;
                }
                c.tables += 1;
                if level == 1 {
                    *ptes += 1;
                } else {
                    *upper += 1;
                }
                // SAFETY: the caller stopped every other operation; the table is linked.
                self.check_rec(unsafe { table_of(v) }, level - 1, addr, c, upper, ptes, err, each);
                continue;
            }
            let pte = Pte(v);
            // Identical entries that follow a marker or zero-page entry in this table: checked with it (the
            // checks read only the value), counted and passed to `each` as one run.
            let run = |t: &Table| {
                (at + 1..crate::arch::PTRS_PER_TABLE).take_while(|&j| t.get(j) == v).count() as u64 + 1
            };
            let mut pages = 1;
            'checked: {
                if let Some(m) = pte.as_marker() {
                    if m.is_empty() {
                        *err = Some(format!("empty marker at {addr:#x}"));
                        return;
                    }
                    pages = run(t);
                    c.markers += pages;
                    break 'checked;
                }
                if !pte.is_present() {
                    *err = Some(format!("unknown non-present entry at {addr:#x}: {pte:?}"));
                    return;
                }
                c.present += 1;
                let pfn = pte.pfn();
                if pte.is_special() {
                    if pfn != Pfn::ZERO || pte.is_write() {
                        *err = Some(format!(
                            "special entry at {addr:#x} is not the read-only zero page: {pte:?}"
                        ));
                        return;
                    }
                    pages = run(t);
                    c.present += pages - 1;
                    c.zero += pages;
                    break 'checked;
                }
                if pfn == Pfn::ZERO {
                    *err = Some(format!("zero page mapped without the special bit at {addr:#x}"));
                    return;
                }
                let Some(info) = self.mem.frame_info(pfn) else {
                    *err = Some(format!("entry at {addr:#x} names no frame: {pte:?}"));
                    return;
                };
                if info.flags.contains(FrameFlags::FREE)
                    || info.mapcount == 0
                    || info.refcount < info.mapcount
                {
                    *err = Some(format!("entry at {addr:#x} maps a frame in a bad state: {info:?}"));
                    return;
                }
                match Self::rss_kind(info.flags) {
                    MM_ANONPAGES => c.rss.anon += 1,
                    MM_SHMEMPAGES => c.rss.shmem += 1,
                    _ => c.rss.file += 1,
                }
                if info.flags.contains(FrameFlags::ANON) && pte.is_write() && info.mapcount > 1 {
                    *err =
                        Some(format!("writable entry at {addr:#x} maps a shared anonymous page: {info:?}"));
                    return;
                }
            }
            i = at + pages as usize;
            if each(addr, pte, pages).is_break() {
                *err = Some(format!("the caller's check stopped at {addr:#x}"));
                return;
            }
        }
    }
}

impl Drop for PageTable {
    /// `exit_mmap`: zaps every entry (`unmap_vmas`), frees every table below the PGD (`free_pgtables`), then
    /// the PGD (`pgd_free`).
    fn drop(&mut self) {
        let _ = self.zap_range(0, VA_END, &crate::ZapDetails::UNMAP);
        self.free_pgd_range(0, VA_END, 0, 0);
        self.mem.stats.add(TABLES_RELEASED, 1);
        self.mem.free_tables_released(&[self.pgd]);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testutil::{RW, mem, write};
    use crate::{ChangeProt, FaultVma, MoveFlags, PageProt, ZapDetails};
    use vmspace_abi::Errno;

    const A: u64 = 0x90_0000_0000;

    #[test]
    fn odd_ranges_neither_hang_nor_panic() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 4 * PAGE_SIZE, RW);
        write(&pt, &mut v, A, b"x").unwrap();
        write(&pt, &mut v, A + PAGE_SIZE, b"y").unwrap();
        // Unaligned bounds cover the pages they touch.
        let cp = ChangeProt { newprot: PageProt::READONLY, try_change_writable: false, shared: false };
        assert_eq!(pt.change_protection(A + 5, A + PAGE_SIZE + 1, &cp), 2);
        assert_eq!(pt.zap_range(A + 1, A + 2, &ZapDetails::UNMAP).present, 1);
        // Empty, reversed and out-of-range requests do nothing.
        assert_eq!(pt.zap_range(A + PAGE_SIZE, A, &ZapDetails::UNMAP).present, 0);
        assert_eq!(pt.zap_range(VA_END, u64::MAX, &ZapDetails::UNMAP).present, 0);
        assert_eq!(pt.free_pgd_range(VA_END, u64::MAX, 0, 0), 0);
        assert_eq!(
            pt.move_page_tables(A + 1, A + PMD_SIZE_T, PAGE_SIZE, &MoveFlags::default()),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            pt.move_page_tables(A, VA_END - PAGE_SIZE, 2 * PAGE_SIZE, &MoveFlags::default()),
            Err(Errno::EFAULT)
        );
        assert_eq!(pt.move_page_tables(A, !4095, PAGE_SIZE, &MoveFlags::default()), Err(Errno::EFAULT));
        assert!(matches!(pt.access(u64::MAX, Access::Read), Err(MmuError::Fault { .. })));
        assert!(pt.pte(u64::MAX).is_none());
        let far = FaultVma::anonymous(VA_END - PAGE_SIZE, VA_END + PAGE_SIZE, RW).with_anon_vma();
        assert_eq!(crate::handle_mm_fault(&pt, &far, VA_END, Access::Write), crate::VmFault::SigSegv);
        assert_eq!(pt.entries(A, A + 4 * PAGE_SIZE).len(), 1);
        pt.validate().unwrap();
    }

    #[test]
    fn validation_visits_every_entry_once_and_stops_at_the_first_broken_one() {
        use std::ops::ControlFlow;
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        // Entries on both sides of a cache line of entries, at a table's last slot and in the next table, so the
        // scan's skips of empty lines and its table changes are all crossed.
        let addrs = [A, A + 7 * PAGE_SIZE, A + 8 * PAGE_SIZE, A + 511 * PAGE_SIZE, A + 521 * PAGE_SIZE];
        let mut v = FaultVma::anonymous(A, A + 1024 * PAGE_SIZE, RW);
        for a in addrs {
            write(&pt, &mut v, a, b"x").unwrap();
        }
        let mut seen = Vec::new();
        let c = pt
            .validate_with(|a, _, _| {
                seen.push(a);
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(seen, addrs);
        assert_eq!(c.present, 5);
        let mut calls = 0;
        let e = pt
            .validate_with(|a, _, _| {
                calls += 1;
                if a == addrs[2] { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
            })
            .unwrap_err();
        assert!(e.contains(&format!("{:#x}", addrs[2])), "{e}");
        assert_eq!(calls, 3, "the caller's Break ends the walk");
        // A broken entry: the zero page mapped writable. The walk reports it and does not call back for it.
        let rcu = vmspace_rcu::pin();
        let slot = pt.entry_slot(addrs[3], 0, false, &rcu).unwrap().unwrap();
        let good = slot.load(Ordering::Relaxed);
        slot.store(Pte::new(Pfn::ZERO, PageProt::READONLY).mkspecial().mkwrite().0, Ordering::Relaxed);
        let mut after = 0;
        let e = pt
            .validate_with(|a, _, _| {
                after += u32::from(a >= addrs[3]);
                ControlFlow::Continue(())
            })
            .unwrap_err();
        assert!(e.contains("not the read-only zero page"), "{e}");
        assert_eq!(after, 0);
        slot.store(good, Ordering::Relaxed);
        pt.validate().unwrap();
    }

    #[test]
    fn validate_with_passes_runs_of_zero_page_entries_as_one_call() {
        use std::ops::ControlFlow;
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        // Reads map the zero page: pages 0-3, a written page 4, zero pages 5-9; then 510-513 cross a table.
        let mut v = FaultVma::anonymous(A, A + 1024 * PAGE_SIZE, RW);
        for p in (0..4).chain(5..10).chain(510..514) {
            crate::testutil::read(&pt, &mut v, A + p * PAGE_SIZE, 1).unwrap();
        }
        write(&pt, &mut v, A + 4 * PAGE_SIZE, b"x").unwrap();
        let mut calls = Vec::new();
        let c = pt
            .validate_with(|a, pte, pages| {
                calls.push(((a - A) / PAGE_SIZE, pte.is_special(), pages));
                ControlFlow::Continue(())
            })
            .unwrap();
        // A run ends at a different value and at the table's end.
        assert_eq!(calls, [(0, true, 4), (4, false, 1), (5, true, 5), (510, true, 2), (512, true, 2)]);
        assert_eq!((c.present, c.zero), (14, 13));
        // Checked per run: a writable zero-page entry inside a run is reported (and ends the run before it).
        let rcu = vmspace_rcu::pin();
        let slot = pt.entry_slot(A + 7 * PAGE_SIZE, 0, false, &rcu).unwrap().unwrap();
        slot.store(Pte::new(Pfn::ZERO, PageProt::READONLY).mkspecial().mkwrite().0, Ordering::Relaxed);
        let mut seen = Vec::new();
        let e = pt
            .validate_with(|a, _, pages| {
                seen.push(((a - A) / PAGE_SIZE, pages));
                ControlFlow::Continue(())
            })
            .unwrap_err();
        assert!(e.contains("not the read-only zero page"), "{e}");
        assert_eq!(seen, [(0, 4), (4, 1), (5, 2)]);
    }

    const PMD_SIZE_T: u64 = crate::PMD_SIZE;
}
