//! The fault core (`mm/memory.c`: `handle_mm_fault` → `handle_pte_fault` and the handlers it dispatches to),
//! parameterised by a description of the VMA ([`FaultVma`]) instead of a VMA object, so that the address space
//! above can call it under whichever lock it holds.
//!
//! # Dispatch
//!
//! [`handle_mm_fault`] first applies the access check of `arch/x86/mm/fault.c: access_error` (a write needs
//! `VM_WRITE`, an instruction fetch `VM_EXEC`, any other access one of `VM_READ|VM_WRITE|VM_EXEC`), answering
//! [`VmFault::SigSegv`] when it fails. It allocates the upper tables (`__handle_mm_fault`), reads the entry
//! without a lock, and dispatches as `handle_pte_fault` does:
//! - empty, anonymous VMA: [`do_anonymous_page`](#anonymous-pages);
//! - empty, file VMA: `do_fault`: a read → `do_read_fault`, a write to a private mapping → `do_cow_fault`, a
//!   write to a shared one → `do_shared_fault`;
//! - a marker: `handle_pte_marker` (guard → `SIGSEGV`, poison → `SIGBUS`, a uffd-wp marker is treated as empty:
//!   userfaultfd itself is not modelled);
//! - `PROT_NONE` entry in an accessible VMA: `do_numa_page` (the protection is restored from the VMA);
//! - present: under the PTE lock, if the entry is unchanged, a write to a read-only entry → `do_wp_page`;
//!   otherwise the fault was spurious and only the accessed (and dirty) bits are set
//!   (`ptep_set_access_flags`).
//!
//! Every handler allocates what it needs *before* it takes the PTE lock, then re-checks under the lock that the
//! entry is still the one it saw (`vmf_pte_changed`, `pte_same`); if another thread got there first, it frees
//! what it allocated (never published) and reports a spurious fault: the access is retried and finds the other
//! thread's page. A failed allocation leaves nothing behind ([`VmFault::Oom`]).
//!
//! # Anonymous pages
//!
//! `do_anonymous_page`: a read maps the shared zero page (read-only, special); a write needs the VMA's anon_vma
//! (`vmf_anon_prepare`) and maps a new zero-filled, exclusive frame, writable and dirty. Its contents are
//! allocated when the write itself lands (`frame` module docs).
//!
//! # File pages
//!
//! `do_read_fault` first maps what the page cache already holds around the address (`do_fault_around` +
//! `filemap_map_pages`: a window of `fault_around_bytes` aligned in the PTE table, clamped to the VMA, the table
//! and the end of the file; a large folio that lies in the VMA and the table is mapped whole; folios not up to
//! date or carrying the readahead mark are left out; each page found counts against the file's `mmap_miss`;
//! where the fault found no PTE table and the window's first folio holds the last page of a regular file,
//! nothing is mapped, as `filemap_map_pmd` then links no table),
//! then, if the faulting page was not among them, looks it up (`__do_fault` → `filemap_fault`): a page found on
//! a first try may start the next readahead window, a page not found is read ahead (`crate::readahead`), and
//! either way a read drops the fault's lock, so the fault answers [`VmFault::RetryIo`] and is made again as a
//! retry ([`FaultVma::tried`]), whose fault-around maps what came in. Otherwise it maps the page with the VMA's
//! protection: read-only in a private mapping, as `vm_page_prot` says in a shared one. `do_cow_fault` copies
//! the cache's page into a new anonymous frame and maps that writable. `do_shared_fault` maps the cache's page
//! writable and dirty and marks its folio dirty (`fault_dirty_shared_page`); neither faults around. Beyond the
//! end of the file all three answer [`VmFault::SigBus`]. A file fault that maps nothing leaves no PTE table it
//! did not find (the kernel links the preallocated table only to map a page). A page mapped into a `VM_LOCKED` VMA is mlocked. The
//! cache's mutex is held from the lookup to the installation (`cache` module docs: that is what keeps
//! truncation exact).
//!
//! # Write-protect faults
//!
//! `do_wp_page` on a present, read-only entry: in a shared mapping the page is made writable and dirty in place
//! (`wp_page_shared`). In a private mapping an anonymous page that is exclusive, or whose only reference is
//! this entry's (`wp_can_reuse_anon_folio`), is reused in place (and becomes exclusive); anything else (the zero
//! page, a page-cache page, an anonymous page still shared after fork) is copied into a new anonymous frame
//! (`wp_page_copy`), which needs the anon_vma. The copy is made outside the PTE lock with a reference held on
//! the old page, and installed only if the entry still maps it.
//!
//! # Retry
//!
//! The address space decides how the VMA is locked; the fault core only needs to know whether the VMA has an
//! anon_vma ([`FaultVma::anon_vma`]). A handler that must create an anonymous page in a VMA without one answers
//! [`VmFault::Retry`] before changing anything, as `vmf_anon_prepare` does under the per-VMA lock
//! (`VM_FAULT_RETRY`): the caller takes the mmap lock, prepares the anon_vma (`__anon_vma_prepare`) and calls
//! again with `anon_vma: true`.
//!
//! A [`FaultVma`] whose page cache belongs to another [`crate::Memory`] than the page table's answers
//! [`VmFault::SigBus`]: its frames cannot be mapped there.
//!
//! # Speculative faults
//!
//! [`handle_mm_fault_speculative`] is the fault core for a caller that holds *no* lock on the VMA: it read the
//! VMA's fields without a reference (a copy validated by the VMA's write count, as the speculative page fault
//! series did) and hands in a check, `still_valid`, that the copy is still the VMA's. It handles only the common
//! case, a missing entry of a private anonymous VMA (not `VM_LOCKED`) that has its anon_vma, whose PTE table is
//! in place; it never
//! allocates a table and answers `None` (nothing changed: take the locked path) for anything else. The page is
//! allocated first; then, under the PTE lock and after a sequentially consistent fence, `still_valid` runs, and
//! only if it holds is the entry set. Why that is enough (the writer's half is the address space's
//! `vma_start_write` / `vma_mark_detached`, each followed by a sequentially consistent fence, before any page
//! table work of the call):
//! - a writer that changes the VMA's pages (zap, `change_protection`, `copy_page_range`, `move_page_tables`)
//!   locks every PTE table present in its range. If it locked this table before the fault did, the fault's lock
//!   acquisition makes the writer's earlier change of the write count visible: `still_valid` fails. If after,
//!   the writer finds the fault's entry and deals with it as with any entry.
//! - a writer that found no table here (so locks none) read an empty PMD entry that the table's link later
//!   replaced; the link happens before the fault's walk (release/acquire), so the writer's fence precedes the
//!   fault's fence in the single order of sequentially consistent operations, and the fault's check reads the
//!   change (C++20 `[atomics.order]`, the rule for fences around a coherence-ordered pair).
//!
//! The loom model `speculative_fault_vs_munmap` in `crates/mm/tests/loom.rs` checks the protocol.
//!
//! Caller contract: the VMA described is stable (its VMA read lock or the mmap lock is held) and covers the
//! address; zaps (`MADV_DONTNEED` under the VMA lock), other faults and lockless walkers may run concurrently.

use vmspace_abi::VmFlags;
use vmspace_rcu::sync::Ordering;

use crate::arch::{Marker, PAGE_SIZE, PTRS_PER_TABLE, PageProt, Pfn, Pte, bits, index};
use crate::cache::{CacheGuard, PageCache, PageError};
use crate::frame::{FrameFlags, FrameInit};
use crate::gather::MmuGather;
use crate::pgtable::{Access, MM_ANONPAGES, PageTable, PteGuard};
use crate::table::table_of;

/// The VMA as the fault core needs it (module docs).
#[derive(Clone, Copy, Debug)]
pub struct FaultVma<'a> {
    /// First address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// File page at `start` (`vm_pgoff`).
    pub pgoff: u64,
    /// `vm_flags` (`VM_READ`, `VM_WRITE`, `VM_EXEC`, `VM_SHARED`, `VM_MAYSHARE` matter).
    pub flags: VmFlags,
    /// `vm_page_prot` ([`PageProt::for_vma`]).
    pub page_prot: PageProt,
    /// The file's page cache; `None` for an anonymous VMA. A shared anonymous mapping is shmem and has one.
    pub file: Option<&'a PageCache>,
    /// The VMA has an anon_vma.
    pub anon_vma: bool,
    /// A retry (`FAULT_FLAG_TRIED`): the first try dropped its lock to read ahead, so this one does not start
    /// another asynchronous window.
    pub tried: bool,
}

impl<'a> FaultVma<'a> {
    /// A private anonymous VMA `[start, end)` with `flags`, without an anon_vma yet.
    pub fn anonymous(start: u64, end: u64, flags: VmFlags) -> FaultVma<'a> {
        FaultVma {
            start,
            end,
            pgoff: start / PAGE_SIZE,
            flags,
            page_prot: PageProt::for_vma(flags, false),
            file: None,
            anon_vma: false,
            tried: false,
        }
    }

    /// A VMA mapping `file` from page `pgoff`. `writenotify`: see [`PageProt::for_vma`] (false for shmem).
    pub fn file(
        start: u64,
        end: u64,
        pgoff: u64,
        flags: VmFlags,
        file: &'a PageCache,
        writenotify: bool,
    ) -> Self {
        FaultVma {
            start,
            end,
            pgoff,
            flags,
            page_prot: PageProt::for_vma(flags, writenotify),
            file: Some(file),
            anon_vma: false,
            tried: false,
        }
    }

    /// The same VMA with an anon_vma.
    pub fn with_anon_vma(mut self) -> Self {
        self.anon_vma = true;
        self
    }

    fn file_index(&self, addr: u64) -> u64 {
        self.pgoff + (addr - self.start) / PAGE_SIZE
    }

    /// `maybe_mkwrite`.
    fn maybe_mkwrite(&self, pte: Pte) -> Pte {
        if self.flags.intersects(VmFlags::WRITE) { pte.mkwrite() } else { pte }
    }
}

/// How a fault was resolved (the counters of [`FaultStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// `do_anonymous_page`, read: the zero page mapped.
    AnonZero,
    /// `do_anonymous_page`, write: a new anonymous page.
    AnonNew,
    /// `do_read_fault`: a page-cache page mapped (possibly by fault-around).
    Read,
    /// `do_cow_fault`: a private copy of a page-cache page.
    Cow,
    /// `do_shared_fault`: a page-cache page mapped writable.
    Shared,
    /// `do_wp_page` reused the page in place (exclusive anonymous page).
    WpReuse,
    /// `do_wp_page` copied (`wp_page_copy`).
    WpCopy,
    /// `do_wp_page` in a shared mapping (`wp_page_shared`).
    WpShared,
    /// Nothing to do: another thread resolved it, or only accessed/dirty needed setting.
    Spurious,
    /// `do_numa_page`: a `PROT_NONE` entry in an accessible VMA got the VMA's protection back.
    Numa,
}

/// The outcome of [`handle_mm_fault`] (`vm_fault_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum VmFault {
    /// Resolved: retry the access.
    Handled(FaultKind),
    /// `VM_FAULT_RETRY`: the VMA needs an anon_vma; take the mmap lock, prepare it and fault again (module docs).
    Retry,
    /// `VM_FAULT_RETRY` after readahead, which drops the fault's lock for its I/O: fault again, as a retry
    /// ([`FaultVma::tried`]). `major` (`VM_FAULT_MAJOR`): the page was not cached (a retry under the VMA lock
    /// is marked tried only then, as `do_user_addr_fault` does).
    RetryIo {
        /// The fault found no page in the cache.
        major: bool,
    },
    /// `VM_FAULT_OOM`: an allocation failed; nothing changed.
    Oom,
    /// `VM_FAULT_SIGBUS`: beyond the end of the file, or a poisoned page.
    SigBus,
    /// `VM_FAULT_SIGSEGV`: the VMA's rights forbid the access, or a guard region.
    SigSegv,
}

/// Counter slots: the kinds, then the failures and fault-around pages.
const K_RETRY: usize = 10;
const K_OOM: usize = 11;
const K_SIGBUS: usize = 12;
const K_SIGSEGV: usize = 13;
const K_AROUND: usize = 14;
pub(crate) const NKINDS: usize = 15;

/// Faults of one page table by outcome (the kernel's `PGFAULT` event count, split).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// [`FaultKind::AnonZero`].
    pub anon_zero: u64,
    /// [`FaultKind::AnonNew`].
    pub anon_new: u64,
    /// [`FaultKind::Read`].
    pub read: u64,
    /// [`FaultKind::Cow`].
    pub cow: u64,
    /// [`FaultKind::Shared`].
    pub shared: u64,
    /// [`FaultKind::WpReuse`].
    pub wp_reuse: u64,
    /// [`FaultKind::WpCopy`].
    pub wp_copy: u64,
    /// [`FaultKind::WpShared`].
    pub wp_shared: u64,
    /// [`FaultKind::Spurious`].
    pub spurious: u64,
    /// [`FaultKind::Numa`].
    pub numa: u64,
    /// [`VmFault::Retry`] and [`VmFault::RetryIo`].
    pub retry: u64,
    /// [`VmFault::Oom`].
    pub oom: u64,
    /// [`VmFault::SigBus`].
    pub sigbus: u64,
    /// [`VmFault::SigSegv`].
    pub sigsegv: u64,
    /// Extra pages mapped by fault-around (besides the faulting one).
    pub fault_around_pages: u64,
}

impl FaultStats {
    /// Faults that mapped or changed something (not spurious, not failed).
    pub fn resolved(&self) -> u64 {
        self.anon_zero
            + self.anon_new
            + self.read
            + self.cow
            + self.shared
            + self.wp_reuse
            + self.wp_copy
            + self.wp_shared
            + self.numa
    }
}

impl PageTable {
    /// The fault counters.
    pub fn fault_stats(&self) -> FaultStats {
        let s = self.faults.sums().map(|v| v as u64);
        FaultStats {
            anon_zero: s[FaultKind::AnonZero as usize],
            anon_new: s[FaultKind::AnonNew as usize],
            read: s[FaultKind::Read as usize],
            cow: s[FaultKind::Cow as usize],
            shared: s[FaultKind::Shared as usize],
            wp_reuse: s[FaultKind::WpReuse as usize],
            wp_copy: s[FaultKind::WpCopy as usize],
            wp_shared: s[FaultKind::WpShared as usize],
            spurious: s[FaultKind::Spurious as usize],
            numa: s[FaultKind::Numa as usize],
            retry: s[K_RETRY],
            oom: s[K_OOM],
            sigbus: s[K_SIGBUS],
            sigsegv: s[K_SIGSEGV],
            fault_around_pages: s[K_AROUND],
        }
    }
}

/// `handle_mm_fault` for a user `access` at `addr` in `vma` (module docs).
pub fn handle_mm_fault(pt: &PageTable, vma: &FaultVma<'_>, addr: u64, access: Access) -> VmFault {
    let r = fault(pt, vma, addr & !(PAGE_SIZE - 1), access);
    let k = match r {
        VmFault::Handled(kind) => kind as usize,
        VmFault::Retry | VmFault::RetryIo { .. } => K_RETRY,
        VmFault::Oom => K_OOM,
        VmFault::SigBus => K_SIGBUS,
        VmFault::SigSegv => K_SIGSEGV,
    };
    pt.faults.add(k, 1);
    r
}

/// The speculative fault (module docs, "Speculative faults"): `Some` with how the fault was resolved (or
/// [`VmFault::Oom`] when the page could not be allocated, changing nothing), or `None`
/// when it is not the common case or `still_valid` failed under the PTE lock; then nothing was changed and the
/// caller takes its locked path. `vma` is the caller's validated copy; `still_valid` is called at most once,
/// under the PTE lock of `addr`.
pub fn handle_mm_fault_speculative(
    pt: &PageTable,
    vma: &FaultVma<'_>,
    addr: u64,
    access: Access,
    still_valid: &dyn Fn() -> bool,
) -> Option<VmFault> {
    let addr = addr & !(PAGE_SIZE - 1);
    let special = VmFlags::SHARED
        | VmFlags::MAYSHARE
        | VmFlags::HUGETLB
        | VmFlags::IO
        | VmFlags::PFNMAP
        | VmFlags::MIXEDMAP
        | VmFlags::LOCKED;
    if vma.file.is_some()
        || vma.flags.intersects(special)
        || !vma.anon_vma
        || addr < vma.start
        || addr >= vma.end
        || addr >= crate::arch::VA_END
        || access_error(vma, access)
    {
        return None;
    }
    // The entry, read without the lock inside a read-side section; no table is allocated.
    let orig = {
        let rcu = vmspace_rcu::pin();
        let Ok(Some(pmd)) = pt.entry_slot(addr, 1, false, &rcu) else { return None };
        // Acquire: pairs with the table's link (the writer's half in the module docs relies on it).
        let t = pmd.load(Ordering::Acquire);
        if t == 0 {
            return None;
        }
        // SAFETY: inside the RCU section entered before the load; a table unlinked since is not yet freed.
        Pte(unsafe { table_of(t) }.get(index(addr, 0)))
    };
    if !orig.is_none() {
        return None;
    }
    let write = access == Access::Write;
    let (entry, pfn) = if write {
        let Some(pfn) = pt.mem.alloc_frame(anon_init(vma)) else {
            // As the locked path would answer (nothing changed): one failed allocation is one `VM_FAULT_OOM`.
            pt.faults.add(K_OOM, 1);
            return Some(VmFault::Oom);
        };
        (vma.maybe_mkwrite(Pte::new(pfn, vma.page_prot).mkdirty()), Some(pfn))
    } else {
        (Pte::new(Pfn::ZERO, vma.page_prot).mkspecial().wrprotect(), None)
    };
    let give_up = |pfn: Option<Pfn>| {
        if let Some(p) = pfn {
            pt.mem.free_unpublished(p);
        }
    };
    let Ok(Some(g)) = pt.lock_pte(addr, false) else {
        give_up(pfn);
        return None;
    };
    if g.get(addr) != orig {
        give_up(pfn);
        pt.faults.add(FaultKind::Spurious as usize, 1);
        return Some(VmFault::Handled(FaultKind::Spurious));
    }
    // SeqCst: pairs with the fence that follows the write count's change in `vma_start_write` and
    // `vma_mark_detached` (module docs): a writer that skipped this table has its change read below.
    vmspace_rcu::sync::fence(Ordering::SeqCst);
    if !still_valid() {
        give_up(pfn);
        return None;
    }
    g.set(addr, entry);
    let kind = match pfn {
        Some(p) => {
            pt.add_rss(MM_ANONPAGES, 1);
            add_lru_vma(pt, vma, p);
            mlock_vma_page(pt, vma, p);
            FaultKind::AnonNew
        }
        None => FaultKind::AnonZero,
    };
    drop(g);
    pt.faults.add(kind as usize, 1);
    Some(VmFault::Handled(kind))
}

/// `access_error` (`arch/x86/mm/fault.c`) and `arch_vma_access_permitted`: whether the VMA forbids the access.
fn access_error(vma: &FaultVma<'_>, access: Access) -> bool {
    match access {
        Access::Write => !vma.flags.intersects(VmFlags::WRITE),
        Access::Exec => !vma.flags.intersects(VmFlags::EXEC),
        Access::Read => !vma.flags.intersects(VmFlags::READ | VmFlags::WRITE | VmFlags::EXEC),
    }
}

/// Two entries map the same thing with the same rights (ignoring the MMU's accessed/dirty updates).
fn same_mapping(a: Pte, b: Pte) -> bool {
    a.raw() & !(bits::ACCESSED | bits::DIRTY) == b.raw() & !(bits::ACCESSED | bits::DIRTY)
}

fn fault(pt: &PageTable, vma: &FaultVma<'_>, addr: u64, access: Access) -> VmFault {
    if addr < vma.start || addr >= vma.end || addr >= crate::arch::VA_END || access_error(vma, access) {
        return VmFault::SigSegv;
    }
    if vma.file.is_some_and(|c| !std::sync::Arc::ptr_eq(c.memory(), &pt.mem)) {
        // A page cache of another memory: its frames cannot be mapped here (`SIGBUS`, as a mapping whose
        // backing cannot provide the page).
        return VmFault::SigBus;
    }
    // `__handle_mm_fault` (the upper tables) and `handle_pte_fault`: the entry, read without the lock
    // (`pte_offset_map_nolock` + `ptep_get_lockless`), inside a read-side section since `MADV_DONTNEED` may
    // reclaim the PTE table meanwhile (and `free_pgd_range` an upper table, were the VMA not stable). The
    // handlers then take the table's lock (walking again from the PGD inside the guard's own section,
    // re-checking the PMD entry) and compare against `orig`.
    let orig = {
        let rcu = vmspace_rcu::pin();
        let pmd = match pt.entry_slot(addr, 1, true, &rcu) {
            Ok(Some(s)) => s,
            _ => return VmFault::Oom,
        };
        // Acquire: pairs with the table's link.
        let t = pmd.load(Ordering::Acquire);
        // SAFETY: inside the RCU section entered before the load; a table unlinked since is not yet freed.
        if t == 0 { Pte::NONE } else { Pte(unsafe { table_of(t) }.get(index(addr, 0))) }
    };
    if orig.is_none() {
        return do_pte_missing(pt, vma, addr, access, orig);
    }
    if let Some(m) = orig.as_marker() {
        // `handle_pte_marker`.
        if m.contains(Marker::GUARD) {
            return VmFault::SigSegv;
        }
        if m.contains(Marker::POISONED) {
            return VmFault::SigBus;
        }
        return do_pte_missing(pt, vma, addr, access, orig);
    }
    if !orig.is_present() {
        debug_assert!(false, "swap entries do not exist here: {orig:?}");
        return VmFault::SigBus;
    }
    if orig.is_protnone() {
        return do_numa_page(pt, vma, addr, orig);
    }
    let g = match pt.lock_pte(addr, false) {
        Ok(Some(g)) => g,
        _ => return VmFault::Handled(FaultKind::Spurious),
    };
    let cur = g.get(addr);
    if !same_mapping(cur, orig) {
        return VmFault::Handled(FaultKind::Spurious);
    }
    if access == Access::Write && !cur.is_write() {
        return do_wp_page(pt, vma, g, addr, cur);
    }
    // `ptep_set_access_flags`.
    let dirty = access == Access::Write;
    g.update(addr, |p| {
        if !same_mapping(p, orig) {
            return p;
        }
        let p = p.mkyoung();
        if dirty { p.mkdirty() } else { p }
    });
    VmFault::Handled(FaultKind::Spurious)
}

/// `do_pte_missing`: `do_anonymous_page` or `do_fault`.
fn do_pte_missing(pt: &PageTable, vma: &FaultVma<'_>, addr: u64, access: Access, orig: Pte) -> VmFault {
    match vma.file {
        None => {
            if vma.flags.intersects(VmFlags::SHARED) {
                // A shared anonymous mapping is shmem: the caller must describe it with its page cache.
                debug_assert!(false, "shared anonymous VMA without a page cache");
                return VmFault::SigBus;
            }
            do_anonymous_page(pt, vma, addr, access == Access::Write, orig)
        }
        Some(cache) => {
            // `pmd_none(*vmf->pmd)`: whether this fault finds no PTE table.
            let pmd_none = !pt.has_pte_table(addr);
            let r = if access != Access::Write {
                do_read_fault(pt, vma, cache, addr, orig, pmd_none)
            } else if !vma.flags.intersects(VmFlags::SHARED) {
                do_cow_fault(pt, vma, cache, addr, orig)
            } else {
                do_shared_fault(pt, vma, cache, addr, orig)
            };
            if pmd_none && !matches!(r, VmFault::Handled(_)) {
                pte_free_unused(pt, addr);
            }
            r
        }
    }
}

/// The end of a file fault that mapped nothing where it found no PTE table: the kernel's handlers only
/// preallocate the table (`vmf->prealloc_pte`) and link it when they map a page (`filemap_map_pmd`,
/// `finish_fault`), so a fault answering SIGBUS, a retry or OOM leaves the PMD entry empty; the table this
/// fault linked ahead ([`prealloc_pte`]) is unlinked again if it is still empty and freed after a grace period
/// (under its lock, as `MADV_DONTNEED`'s reclaim of an empty table; a concurrent fault that finds it unlinked
/// links a new one). Whether a table is linked decides what a later fault-around maps ([`do_fault_around`]).
fn pte_free_unused(pt: &PageTable, addr: u64) {
    let mut tlb = MmuGather::new(&pt.mem);
    let Ok(Some(g)) = pt.lock_pte(addr, false) else { return };
    if g.table().is_empty() && g.unlink() {
        pt.count_table(0, -1);
        tlb.remove_table(g.table_addr());
    }
}

/// `do_anonymous_page`.
fn do_anonymous_page(pt: &PageTable, vma: &FaultVma<'_>, addr: u64, write: bool, orig: Pte) -> VmFault {
    if !write {
        let entry = Pte::new(Pfn::ZERO, vma.page_prot).mkspecial().wrprotect();
        let Ok(Some(g)) = pt.lock_pte(addr, true) else { return VmFault::Oom };
        if g.get(addr) != orig {
            return VmFault::Handled(FaultKind::Spurious);
        }
        g.set(addr, entry);
        return VmFault::Handled(FaultKind::AnonZero);
    }
    if !vma.anon_vma {
        return VmFault::Retry;
    }
    let Some(pfn) = pt.mem.alloc_frame(anon_init(vma)) else { return VmFault::Oom };
    map_new_anon(pt, vma, addr, orig, pfn, FaultKind::AnonNew)
}

/// Maps `pfn`, a new anonymous page nobody else can see yet, writable if the VMA allows and dirty, at `addr` if
/// its PTE is still `orig` (`set_pte_at` after `folio_add_new_anon_rmap`, the end of `do_anonymous_page` and of
/// `finish_fault` for a COW page), and answers `kind`. The page is freed when it is not mapped: `Oom` when no
/// PTE table could be locked, `Spurious` when another fault changed the PTE first.
fn map_new_anon(
    pt: &PageTable,
    vma: &FaultVma<'_>,
    addr: u64,
    orig: Pte,
    pfn: Pfn,
    kind: FaultKind,
) -> VmFault {
    let g = match pt.lock_pte(addr, true) {
        Ok(Some(g)) => g,
        _ => {
            pt.mem.free_unpublished(pfn);
            return VmFault::Oom;
        }
    };
    if g.get(addr) != orig {
        pt.mem.free_unpublished(pfn);
        return VmFault::Handled(FaultKind::Spurious);
    }
    g.set(addr, vma.maybe_mkwrite(Pte::new(pfn, vma.page_prot).mkdirty()));
    pt.add_rss(MM_ANONPAGES, 1);
    add_lru_vma(pt, vma, pfn);
    mlock_vma_page(pt, vma, pfn);
    VmFault::Handled(kind)
}

/// A new anonymous page of `vma` (`folio_add_new_anon_rmap`): swap-backed unless the VMA is `VM_DROPPABLE`, whose
/// pages are lazily free from the start (reclaim drops them instead of swapping; `MADV_FREE` finds them so).
fn anon_init(vma: &FaultVma<'_>) -> FrameInit {
    let init = FrameInit::anon_mapped();
    if vma.flags.intersects(VmFlags::DROPPABLE) {
        FrameInit { flags: FrameFlags::from_bits(init.flags.bits() & !FrameFlags::SWAPBACKED.bits()), ..init }
    } else {
        init
    }
}

/// `folio_add_lru_vma` of a new anonymous page: it joins the CPU's `lru_add` batch, unless the VMA is locked
/// and not `VM_SPECIAL`, whose new pages go to the mlock batch instead (`mlock_new_folio`, by
/// [`mlock_vma_page`]), reaching their LRU list when it drains.
fn add_lru_vma(pt: &PageTable, vma: &FaultVma<'_>, pfn: Pfn) {
    let special = VmFlags::IO | VmFlags::DONTEXPAND | VmFlags::PFNMAP | VmFlags::MIXEDMAP;
    if !vma.flags.intersects(VmFlags::LOCKED) || vma.flags.intersects(special) {
        pt.mem.folio_add_lru(pfn);
    }
}

/// `mlock_vma_folio` / `mlock_new_folio` when a page is mapped (`folio_add_*_rmap`, `folio_add_lru_vma`): a
/// folio of one page mapped into a `VM_LOCKED` VMA that is not `VM_SPECIAL` is mlocked, whatever mapped it (a
/// fault in an `MCL_ONFAULT` VMA as much as `mlock`'s population).
fn mlock_vma_page(pt: &PageTable, vma: &FaultVma<'_>, pfn: Pfn) {
    let special = VmFlags::IO | VmFlags::DONTEXPAND | VmFlags::PFNMAP | VmFlags::MIXEDMAP;
    if vma.flags.intersects(VmFlags::LOCKED) && !vma.flags.intersects(special) {
        pt.mem.mlock_folio(pfn, true);
    }
}

/// Maps page-cache page `pfn` at `addr` (`set_pte_range` of a file folio): a reference and a mapping for the
/// entry, RSS by kind. `write`: a write fault (`maybe_mkwrite(pte_mkdirty(..))`).
fn map_file_page(pt: &PageTable, vma: &FaultVma<'_>, g: &PteGuard<'_>, addr: u64, pfn: Pfn, write: bool) {
    let f = pt.mem.frame(pfn);
    f.get();
    // Relaxed: under the PTE lock (see `Frame::mapcount`).
    f.mapcount.fetch_add(1, Ordering::Relaxed);
    pt.add_rss(PageTable::rss_kind(f.flags()), 1);
    let mut entry = Pte::new(pfn, vma.page_prot);
    if write {
        entry = vma.maybe_mkwrite(entry.mkdirty());
    }
    g.set(addr, entry);
    mlock_vma_page(pt, vma, pfn);
}

/// Makes sure the PTE table exists before the page cache is touched (`__do_fault`'s `prealloc_pte`), so that
/// a table allocation failure changes nothing.
fn prealloc_pte(pt: &PageTable, addr: u64) -> bool {
    matches!(pt.lock_pte(addr, true), Ok(Some(_)))
}

fn page_error(e: PageError) -> VmFault {
    match e {
        PageError::BeyondEof => VmFault::SigBus,
        PageError::NoMem => VmFault::Oom,
    }
}

/// `filemap_fault` (`shmem_fault` for shmem) under the cache's mutex: the page at `index`, with readahead
/// (`crate::readahead`): a first try that finds its page may start the next window, one that finds none
/// reads ahead; either way a read dropped the fault's lock, so the fault answers [`VmFault::RetryIo`] after the
/// page is in the cache, and maps nothing. Beyond the end of the file: SIGBUS.
fn filemap_fault(vma: &FaultVma<'_>, cs: &mut CacheGuard<'_>, index: u64) -> Result<Pfn, VmFault> {
    if index >= cs.size_pages() {
        return Err(VmFault::SigBus);
    }
    if let Some(pfn) = cs.find(index) {
        let dropped = !cs.is_shmem() && !vma.tried && cs.async_mmap_readahead(vma.flags, index, pfn);
        if cs.memory().folio_flags(pfn).contains(FrameFlags::NOT_UPTODATE) {
            // `page_not_uptodate`: read it, dropping the lock for the I/O (`maybe_unlock_mmap_for_io`); retry.
            cs.read_folio(pfn);
            return Err(VmFault::RetryIo { major: false });
        }
        if dropped {
            return Err(VmFault::RetryIo { major: false });
        }
        return Ok(pfn);
    }
    let vma_pages = (vma.end - vma.start) / PAGE_SIZE;
    let dropped = !cs.is_shmem() && cs.sync_mmap_readahead(vma.flags, vma.pgoff, vma_pages, index);
    // `__filemap_get_folio(FGP_CREAT)`: the page if readahead left it out. Its allocation failing after the
    // lock was dropped is a retry in the kernel; here it is `VM_FAULT_OOM` either way, so that a memory that
    // stays full cannot retry forever.
    let pfn = cs.find_or_create(index).map_err(page_error)?;
    if dropped {
        return Err(VmFault::RetryIo { major: true });
    }
    Ok(pfn)
}

/// `do_read_fault` (with `do_fault_around`). `pmd_none`: the fault found no PTE table.
fn do_read_fault(
    pt: &PageTable,
    vma: &FaultVma<'_>,
    cache: &PageCache,
    addr: u64,
    orig: Pte,
    pmd_none: bool,
) -> VmFault {
    if !prealloc_pte(pt, addr) {
        return VmFault::Oom;
    }
    let index = vma.file_index(addr);
    let mut cs = cache.lock();
    if pt.mem.fault_around_pages > 1
        && orig.is_none()
        && do_fault_around(pt, vma, &mut cs, addr, index, pmd_none)
    {
        return VmFault::Handled(FaultKind::Read);
    }
    let pfn = match filemap_fault(vma, &mut cs, index) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let Ok(Some(g)) = pt.lock_pte(addr, true) else { return VmFault::Oom };
    if g.get(addr) != orig {
        return VmFault::Handled(FaultKind::Spurious);
    }
    map_file_page(pt, vma, &g, addr, pfn, false);
    VmFault::Handled(FaultKind::Read)
}

/// `do_fault_around` + `filemap_map_pages`: maps the cached pages of the window around `addr` into empty
/// entries, leaving out pages that carry the readahead mark (`next_uptodate_folio`). Every page it finds
/// unmarked counts as a hit against the file's `mmap_miss`, mapped now or before (`filemap_map_order0_folio`
/// counts before it looks at the entry). Returns whether the faulting page itself got mapped
/// (`VM_FAULT_NOPAGE`).
///
/// Where the fault found no PTE table (`pmd_none`), the table is linked (`filemap_map_pmd`: `pmd_install`) only
/// if the first folio the window finds may be mapped large, which a folio holding the last page of a regular
/// file may not (`can_map_large`: `file_end >= folio_next_index(folio)`, Linux 6.18's guard of SIGBUS beyond
/// the end of file): then `pte_offset_map_lock` finds no table and nothing is mapped, the window's other
/// folios neither, and no page counts against `mmap_miss`. Measured on Linux 6.18: after a file's last page
/// (of a partial fault-around window) was mapped and wholly unmapped, a read fault beyond the end of file in
/// that window maps nothing; with the page mapped elsewhere in the same 2 MiB (a table linked), it maps it.
fn do_fault_around(
    pt: &PageTable,
    vma: &FaultVma<'_>,
    cs: &mut CacheGuard<'_>,
    addr: u64,
    index: u64,
    pmd_none: bool,
) -> bool {
    let nr = pt.mem.fault_around_pages;
    let pte_off = index_in_table(addr);
    let vma_off = index - vma.pgoff;
    let vma_pages = (vma.end - vma.start) / PAGE_SIZE;
    let from_pte = (pte_off & !(nr - 1)).max(pte_off - pte_off.min(vma_off));
    let to_pte = (from_pte + nr).min(PTRS_PER_TABLE as u64).min(pte_off + vma_pages - vma_off) - 1;
    let start_pgoff = index - (pte_off - from_pte);
    let size_pages = cs.size_pages();
    if size_pages == 0 {
        return false;
    }
    let end_pgoff = (start_pgoff + (to_pte - from_pte)).min(size_pages - 1);
    if end_pgoff < start_pgoff {
        return false;
    }
    let Ok(Some(g)) = pt.lock_pte(addr, true) else { return false };
    let file_end = size_pages - 1;
    let mut got_it = false;
    let mut around = 0i64;
    let mut hits = 0u32;
    let mut first = true;
    let mut pgoff = start_pgoff;
    while pgoff <= end_pgoff {
        let Some(pfn) = cs.find(pgoff) else {
            pgoff += 1;
            continue;
        };
        let flags = pt.mem.folio_flags(pfn);
        let n = 1u64 << flags.order();
        let head = pgoff & !(n - 1);
        // `next_uptodate_folio`: a folio not up to date, or carrying the readahead mark, is left to the fault.
        if flags.intersects(FrameFlags::READAHEAD.union(FrameFlags::NOT_UPTODATE)) {
            pgoff = head + n;
            continue;
        }
        // The first folio found, with no table linked: `filemap_map_pmd` runs only if it may be mapped large.
        if pmd_none && first && head + n > file_end && !cs.is_shmem() {
            break;
        }
        first = false;
        // `filemap_map_folio_range`: the folio's pages in the window; all of them (even beyond the window) if
        // the folio ends before the file's last page (or is shmem), lies inside the VMA and inside this page
        // table.
        // The folio's first and last entries in this table (negative or past its end: outside it).
        let first_pte = pte_off as i64 + head as i64 - index as i64;
        let last_pte = first_pte + n as i64 - 1;
        let whole = n > 1
            && (file_end >= head + n || cs.is_shmem())
            && head >= vma.pgoff
            && head + n <= vma.pgoff + vma_pages
            && first_pte >= 0
            && last_pte < PTRS_PER_TABLE as i64;
        let (lo, hi) = if whole { (head, head + n - 1) } else { (pgoff, (head + n - 1).min(end_pgoff)) };
        for p in lo..=hi {
            let Some(q) = cs.find(p) else { continue };
            hits += 1;
            // Within the VMA and the table (the window, or the whole folio checked above).
            let a = (addr as i64 + (p as i64 - index as i64) * PAGE_SIZE as i64) as u64;
            if !g.get(a).is_none() {
                continue;
            }
            map_file_page(pt, vma, &g, a, q, false);
            if p == index {
                got_it = true;
            } else {
                around += 1;
            }
        }
        pgoff = hi + 1;
    }
    pt.faults.add(K_AROUND, around);
    drop(g);
    cs.fault_around_hits(hits);
    got_it
}

/// `pte_index`.
fn index_in_table(addr: u64) -> u64 {
    index(addr, 0) as u64
}

/// `do_cow_fault`.
fn do_cow_fault(pt: &PageTable, vma: &FaultVma<'_>, cache: &PageCache, addr: u64, orig: Pte) -> VmFault {
    if !vma.anon_vma {
        return VmFault::Retry;
    }
    if !prealloc_pte(pt, addr) {
        return VmFault::Oom;
    }
    let Some(new) = pt.mem.alloc_frame(anon_init(vma)) else { return VmFault::Oom };
    let mut cs = cache.lock();
    let page = match filemap_fault(vma, &mut cs, vma.file_index(addr)) {
        Ok(p) => p,
        Err(e) => {
            pt.mem.free_unpublished(new);
            return e;
        }
    };
    if pt.mem.copy_data(page, new).is_err() {
        pt.mem.free_unpublished(new);
        return VmFault::Oom;
    }
    // The cache lock is held until the copy is mapped (`finish_fault` runs with the page cache folio locked).
    let r = map_new_anon(pt, vma, addr, orig, new, FaultKind::Cow);
    drop(cs);
    r
}

/// `do_shared_fault`.
fn do_shared_fault(pt: &PageTable, vma: &FaultVma<'_>, cache: &PageCache, addr: u64, orig: Pte) -> VmFault {
    if !prealloc_pte(pt, addr) {
        return VmFault::Oom;
    }
    let mut cs = cache.lock();
    let pfn = match filemap_fault(vma, &mut cs, vma.file_index(addr)) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let Ok(Some(g)) = pt.lock_pte(addr, true) else { return VmFault::Oom };
    if g.get(addr) != orig {
        return VmFault::Handled(FaultKind::Spurious);
    }
    map_file_page(pt, vma, &g, addr, pfn, true);
    // `fault_dirty_shared_page`: the folio is dirty.
    pt.mem.folio(pfn).set(FrameFlags::DIRTY);
    VmFault::Handled(FaultKind::Shared)
}

/// `do_numa_page`: a `PROT_NONE` entry in a VMA that is accessible again gets the VMA's protection.
fn do_numa_page(pt: &PageTable, vma: &FaultVma<'_>, addr: u64, orig: Pte) -> VmFault {
    let Ok(Some(g)) = pt.lock_pte(addr, false) else { return VmFault::Handled(FaultKind::Spurious) };
    let (old, new) = g.update(addr, |p| if same_mapping(p, orig) { p.modify(vma.page_prot) } else { p });
    if old == new && !same_mapping(old, orig) {
        return VmFault::Handled(FaultKind::Spurious);
    }
    VmFault::Handled(FaultKind::Numa)
}

/// `do_wp_page`, entered with the PTE lock held and `orig` (present, read-only) current.
fn do_wp_page(pt: &PageTable, vma: &FaultVma<'_>, g: PteGuard<'_>, addr: u64, orig: Pte) -> VmFault {
    let reuse =
        |g: &PteGuard<'_>| {
            let (_, new) = g.update(addr, |p| {
                if same_mapping(p, orig) { vma.maybe_mkwrite(p.mkdirty().mkyoung()) } else { p }
            });
            new.is_write()
        };
    let normal = !orig.is_special();
    if vma.flags.intersects(VmFlags::SHARED | VmFlags::MAYSHARE) && normal {
        // `wp_page_shared` (`wp_page_reuse` after `fault_dirty_shared_page`).
        pt.mem.folio(orig.pfn()).set(FrameFlags::DIRTY);
        return if reuse(&g) {
            VmFault::Handled(FaultKind::WpShared)
        } else {
            VmFault::Handled(FaultKind::Spurious)
        };
    }
    if normal {
        let f = pt.mem.frame(orig.pfn());
        let flags = f.flags();
        if flags.contains(FrameFlags::ANON)
            && (flags.contains(FrameFlags::ANON_EXCLUSIVE) || f.refcount() == 1)
        {
            // `wp_can_reuse_anon_folio` + `folio_move_anon_rmap`: the page is ours alone.
            f.set(FrameFlags::ANON_EXCLUSIVE);
            return if reuse(&g) {
                VmFault::Handled(FaultKind::WpReuse)
            } else {
                VmFault::Handled(FaultKind::Spurious)
            };
        }
    }
    // `wp_page_copy`.
    if !vma.anon_vma {
        return VmFault::Retry;
    }
    let old = orig.pfn();
    if normal {
        pt.mem.frame(old).get();
    }
    drop(g);
    let put_old = |pt: &PageTable| {
        if normal {
            MmuGather::new(&pt.mem).put_frame(old);
        }
    };
    let Some(new) = pt.mem.alloc_frame(anon_init(vma)) else {
        put_old(pt);
        return VmFault::Oom;
    };
    if normal && pt.mem.copy_data(old, new).is_err() {
        pt.mem.free_unpublished(new);
        put_old(pt);
        return VmFault::Oom;
    }
    let Ok(Some(g)) = pt.lock_pte(addr, false) else {
        pt.mem.free_unpublished(new);
        put_old(pt);
        return VmFault::Handled(FaultKind::Spurious);
    };
    let entry = vma.maybe_mkwrite(Pte::new(new, vma.page_prot).mkdirty());
    let mut cur = g.get(addr);
    loop {
        if !same_mapping(cur, orig) {
            drop(g);
            pt.mem.free_unpublished(new);
            put_old(pt);
            return VmFault::Handled(FaultKind::Spurious);
        }
        match g.replace(addr, cur, entry) {
            Ok(()) => break,
            Err(c) => cur = c,
        }
    }
    pt.add_rss(MM_ANONPAGES, 1);
    add_lru_vma(pt, vma, new);
    mlock_vma_page(pt, vma, new);
    if normal {
        let f = pt.mem.frame(old);
        pt.add_rss(PageTable::rss_kind(f.flags()), -1);
        // Relaxed: under the PTE lock (see `Frame::mapcount`).
        f.mapcount.fetch_sub(1, Ordering::Relaxed);
        drop(g);
        let mut tlb = MmuGather::new(&pt.mem);
        tlb.put_frame(old);
        tlb.put_frame(old);
    }
    VmFault::Handled(FaultKind::WpCopy)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testutil::{RW, SHARED_RW, mem, read, resolve, smaps, write};
    use crate::{
        Access, CopyVma, FrameFlags, Memory, MemoryConfig, MmuError, PageCache, PageProt, ZapDetails,
    };

    const A: u64 = 0x10_0000_0000;
    const PG: u64 = PAGE_SIZE;

    #[test]
    fn anonymous_read_maps_the_zero_page_and_a_write_copies_it() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut vma = FaultVma::anonymous(A, A + 16 * PG, RW);
        assert_eq!(read(&pt, &mut vma, A + 5, 3).unwrap(), vec![0, 0, 0]);
        let pte = pt.pte(A);
        assert!(pte.is_special() && pte.pfn() == Pfn::ZERO && !pte.is_write());
        assert_eq!(pt.rss().total(), 0);
        assert_eq!(m.stats().frames_in_use, 0);
        // The write finds a read-only zero-page entry: no anon_vma yet, so Retry first, then wp_page_copy.
        assert_eq!(handle_mm_fault(&pt, &vma, A, Access::Write), VmFault::Retry);
        assert_eq!(pt.pte(A), pte, "Retry changed nothing");
        write(&pt, &mut vma, A + 5, b"abc").unwrap();
        assert_eq!(read(&pt, &mut vma, A + 4, 5).unwrap(), b"\0abc\0");
        let s = pt.fault_stats();
        assert_eq!((s.anon_zero, s.wp_copy, s.retry), (1, 1, 2), "our own probe, then the write's");
        let pte = pt.pte(A);
        assert!(pte.is_write() && pte.is_dirty() && pte.is_young() && !pte.is_special());
        assert_eq!(pt.rss().anon, 1);
        pt.validate().unwrap();
    }

    #[test]
    fn anonymous_write_maps_an_exclusive_page_whose_contents_come_with_the_write() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut vma = FaultVma::anonymous(A, A + 16 * PG, RW).with_anon_vma();
        assert_eq!(handle_mm_fault(&pt, &vma, A + PG, Access::Write), VmFault::Handled(FaultKind::AnonNew));
        let info = m.frame_info(pt.pte(A + PG).pfn()).unwrap();
        assert!(info.flags.contains(FrameFlags::ANON.union(FrameFlags::ANON_EXCLUSIVE)));
        assert!(info.flags.contains(FrameFlags::SWAPBACKED));
        assert_eq!((info.refcount, info.mapcount, info.has_data), (1, 1, false));
        write(&pt, &mut vma, A + PG + 100, &[1, 2, 3]).unwrap();
        assert!(m.frame_info(pt.pte(A + PG).pfn()).unwrap().has_data);
        assert_eq!(pt.fault_stats().anon_new, 1, "the write itself did not fault again");
        pt.validate().unwrap();
    }

    #[test]
    fn the_vma_rights_decide_sigsegv() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let ro = FaultVma::anonymous(A, A + PG, VmFlags::READ | VmFlags::MAYREAD);
        assert_eq!(handle_mm_fault(&pt, &ro, A, Access::Write), VmFault::SigSegv);
        assert_eq!(handle_mm_fault(&pt, &ro, A, Access::Exec), VmFault::SigSegv);
        assert_eq!(handle_mm_fault(&pt, &ro, A + PG, Access::Read), VmFault::SigSegv, "outside the VMA");
        let none = FaultVma::anonymous(A, A + PG, VmFlags::MAYREAD);
        assert_eq!(handle_mm_fault(&pt, &none, A, Access::Read), VmFault::SigSegv);
        // x86 has no write-only pages: a write-only VMA is readable.
        let wo = FaultVma::anonymous(A, A + PG, VmFlags::WRITE | VmFlags::MAYWRITE);
        assert_eq!(handle_mm_fault(&pt, &wo, A, Access::Read), VmFault::Handled(FaultKind::AnonZero));
        let x = FaultVma::anonymous(A + PG, A + 2 * PG, VmFlags::EXEC | VmFlags::READ);
        assert_eq!(handle_mm_fault(&pt, &x, A + PG, Access::Exec), VmFault::Handled(FaultKind::AnonZero));
        assert!(pt.access(A + PG, Access::Exec).is_ok());
        assert!(matches!(pt.access(A, Access::Exec), Err(MmuError::Fault { protection: true, .. })), "NX");
        assert_eq!(pt.fault_stats().sigsegv, 4);
    }

    #[test]
    fn private_file_pages_are_shared_with_the_cache_until_written() {
        let m = mem();
        let c = PageCache::new(&m, 0, false);
        c.write(0, &[7u8; 3 * 4096]).unwrap();
        let pt = PageTable::new(&m).unwrap();
        let mut vma = FaultVma::file(A, A + 3 * PG, 0, RW, &c, false);
        assert_eq!(read(&pt, &mut vma, A + PG, 2).unwrap(), vec![7, 7]);
        let p = c.page(1).unwrap();
        assert_eq!(pt.pte(A + PG).pfn(), p);
        assert!(!pt.pte(A + PG).is_write());
        let info = m.frame_info(p).unwrap();
        assert_eq!((info.refcount, info.mapcount), (2, 1), "the cache's reference and the entry's");
        assert_eq!(pt.rss().file, 3, "fault-around mapped the other cached pages");
        // A write copies (do_wp_page on a file page), leaving the file alone.
        write(&pt, &mut vma, A + PG, &[9]).unwrap();
        assert_ne!(pt.pte(A + PG).pfn(), p);
        assert_eq!(read(&pt, &mut vma, A + PG, 2).unwrap(), vec![9, 7]);
        let mut b = [0u8; 2];
        c.read(PG, &mut b);
        assert_eq!(b, [7, 7]);
        assert_eq!((pt.rss().file, pt.rss().anon), (2, 1));
        assert_eq!(m.frame_info(p).unwrap().mapcount, 0);
        pt.validate().unwrap();
    }

    #[test]
    fn a_write_to_an_unmapped_private_file_page_is_a_cow_fault() {
        let m = Memory::new(MemoryConfig { fault_around_bytes: 0, ..MemoryConfig::default() });
        let c = PageCache::new(&m, 8192, true);
        let pt = PageTable::new(&m).unwrap();
        let mut vma = FaultVma::file(A, A + 4 * PG, 0, RW, &c, false);
        // Beyond the end of the file: Retry (the anon_vma comes first, as vmf_anon_prepare), then SIGBUS.
        assert_eq!(handle_mm_fault(&pt, &vma, A + 3 * PG, Access::Write), VmFault::Retry);
        vma.anon_vma = true;
        assert_eq!(handle_mm_fault(&pt, &vma, A + 3 * PG, Access::Write), VmFault::SigBus);
        assert_eq!(handle_mm_fault(&pt, &vma, A + 2 * PG, Access::Read), VmFault::SigBus);
        assert_eq!(handle_mm_fault(&pt, &vma, A, Access::Write), VmFault::Handled(FaultKind::Cow));
        // The hole became a cache page (shmem_fault allocates), not mapped here.
        let p = c.page(0).unwrap();
        assert_eq!(m.frame_info(p).unwrap().mapcount, 0);
        assert_eq!(pt.rss().anon, 1);
        write(&pt, &mut vma, A, b"x").unwrap();
        assert_eq!(c.read(0, &mut [0u8; 1]), 1);
        pt.validate().unwrap();
    }

    #[test]
    fn shared_file_writes_reach_the_cache_and_every_mapping() {
        let m = mem();
        let c = PageCache::new(&m, 4 * 4096, false);
        let pt = PageTable::new(&m).unwrap();
        let other = PageTable::new(&m).unwrap();
        // A regular file: writes are notified (read faults map read-only, the first write faults).
        let mut v1 = FaultVma::file(A, A + 4 * PG, 0, SHARED_RW, &c, true);
        let mut v2 = FaultVma::file(A + 64 * PG, A + 68 * PG, 0, SHARED_RW, &c, true);
        write(&pt, &mut v1, A + 2 * PG + 1, b"hi").unwrap();
        assert_eq!(pt.fault_stats().shared, 1);
        assert!(m.frame_info(c.page(2).unwrap()).unwrap().flags.contains(FrameFlags::DIRTY));
        assert_eq!(read(&other, &mut v2, A + 66 * PG, 3).unwrap(), b"\0hi");
        let mut b = [0u8; 2];
        c.read(2 * PG + 1, &mut b);
        assert_eq!(&b, b"hi");
        // Read first, then write: wp_page_shared.
        assert_eq!(read(&pt, &mut v1, A + 3 * PG, 1).unwrap(), vec![0]);
        assert!(!pt.pte(A + 3 * PG).is_write());
        write(&pt, &mut v1, A + 3 * PG, b"z").unwrap();
        assert_eq!(pt.fault_stats().wp_shared, 1);
        // The first fault read the whole file ahead; the read's fault-around mapped pages 0, 1 and 3.
        assert_eq!(pt.rss().file, 4);
        assert_eq!(m.frame_info(c.page(2).unwrap()).unwrap().mapcount, 2);
        pt.validate().unwrap();
        other.validate().unwrap();
    }

    #[test]
    fn shmem_read_faults_map_writable_clean_entries() {
        let m = mem();
        let c = PageCache::new(&m, 4096, true);
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::file(A, A + PG, 0, SHARED_RW, &c, false);
        assert_eq!(v.page_prot, PageProt::SHARED);
        read(&pt, &mut v, A, 1).unwrap();
        let e = pt.pte(A);
        assert!(e.is_write() && !e.is_dirty());
        // The store needs no fault: the MMU sets dirty.
        pt.write(A, b"q").unwrap();
        assert!(pt.pte(A).is_dirty());
        assert_eq!(pt.fault_stats().resolved(), 1);
        assert_eq!(pt.rss().shmem, 1);
        let s = smaps(&pt, A, A + PG);
        assert_eq!((s.rss, s.private_dirty, s.pss_shmem, s.anonymous), (4, 4, 4, 0));
    }

    #[test]
    fn fault_around_without_a_table_leaves_a_last_page_first_in_its_window() {
        let m = mem();
        // 17 cached pages: file page 16, the last, is alone in the window of pages 16..31.
        let c = PageCache::new(&m, 0, false);
        c.write(0, &vec![1u8; 17 * 4096]).unwrap();
        let pt = PageTable::new(&m).unwrap();
        let v = FaultVma::file(A, A + 64 * PG, 0, RW, &c, false);
        // Beyond the end of file with no PTE table: nothing mapped, and the fault links no table.
        assert_eq!(handle_mm_fault(&pt, &v, A + 17 * PG, Access::Read), VmFault::SigBus);
        assert_eq!((pt.rss().file, pt.pte_table_pages()), (0, 0));
        assert_eq!(handle_mm_fault(&pt, &v, A + 18 * PG, Access::Read), VmFault::SigBus);
        assert_eq!((pt.rss().file, pt.pte_table_pages()), (0, 0));
        // The last page itself is mapped by the fault (`finish_fault`), alone.
        assert!(matches!(handle_mm_fault(&pt, &v, A + 16 * PG, Access::Read), VmFault::Handled(_)));
        assert_eq!((pt.rss().file, pt.pte_table_pages()), (1, 1));
        // With a table (page 0's window links it), the window's last page is mapped around a fault beyond the end.
        let pt2 = PageTable::new(&m).unwrap();
        assert!(matches!(handle_mm_fault(&pt2, &v, A, Access::Read), VmFault::Handled(_)));
        assert_eq!(pt2.rss().file, 16);
        assert_eq!(handle_mm_fault(&pt2, &v, A + 17 * PG, Access::Read), VmFault::SigBus);
        assert_eq!(pt2.rss().file, 17);
        // Another folio first in the window: mapped, the last page with it.
        c.truncate(18 * 4096);
        c.write(17 * 4096, &[2u8; 4096]).unwrap();
        let pt3 = PageTable::new(&m).unwrap();
        assert_eq!(handle_mm_fault(&pt3, &v, A + 18 * PG, Access::Read), VmFault::SigBus);
        assert_eq!(pt3.rss().file, 2);
        pt.validate().unwrap();
        pt2.validate().unwrap();
        pt3.validate().unwrap();
        drop((pt, pt2, pt3));
        vmspace_rcu::synchronize();
        assert_eq!(m.stats().tables_pending_free, 0);
    }

    #[test]
    fn fault_around_maps_the_cached_window_aligned_in_the_table() {
        let m = mem();
        let c = PageCache::new(&m, 0, false);
        c.write(0, &vec![1u8; 64 * 4096]).unwrap();
        let pt = PageTable::new(&m).unwrap();
        // The VMA starts 4 pages into a PTE table, so file page 20 is at table index 24: the window is
        // indexes 16..31, file pages 12..27.
        let start = A + 4 * PG;
        let mut v = FaultVma::file(start, start + 64 * PG, 0, RW, &c, false);
        read(&pt, &mut v, start + 20 * PG, 1).unwrap();
        assert_eq!(pt.rss().file, 16);
        assert_eq!(pt.fault_stats().fault_around_pages, 15);
        assert!(pt.pte(start + 12 * PG).is_present() && pt.pte(start + 27 * PG).is_present());
        assert!(pt.pte(start + 11 * PG).is_none() && pt.pte(start + 28 * PG).is_none());
        // Clamped to the VMA's start: the window starts there and keeps its size (table indexes 18..33).
        let pt2 = PageTable::new(&m).unwrap();
        let mut v2 = FaultVma::file(A + 18 * PG, A + 40 * PG, 0, RW, &c, false);
        read(&pt2, &mut v2, A + 19 * PG, 1).unwrap();
        assert_eq!(pt2.rss().file, 16);
        assert!(pt2.pte(A + 33 * PG).is_present() && pt2.pte(A + 34 * PG).is_none());
        // Clamped to the end of the file.
        c.truncate(5 * 4096);
        let pt3 = PageTable::new(&m).unwrap();
        let mut v3 = FaultVma::file(A, A + 64 * PG, 0, RW, &c, false);
        read(&pt3, &mut v3, A, 1).unwrap();
        assert_eq!(pt3.rss().file, 5);
    }

    #[test]
    fn markers_fault_as_the_kernel_says() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 4 * PG, RW).with_anon_vma();
        assert_eq!(pt.install_guard_markers(A, A + PG).unwrap(), crate::GuardInstall::Done { installed: 1 });
        assert_eq!(handle_mm_fault(&pt, &v, A, Access::Read), VmFault::SigSegv);
        assert!(pt.pte(A).as_marker().is_some());
        write(&pt, &mut v, A + PG, b"ok").unwrap();
        assert_eq!(pt.remove_guard_markers(A, A + 4 * PG), 1);
        write(&pt, &mut v, A, b"ok").unwrap();
        pt.validate().unwrap();
    }

    #[test]
    fn wp_reuses_a_page_the_other_side_gave_up_and_copies_one_still_shared() {
        let m = mem();
        let parent = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + 4 * PG, RW);
        write(&parent, &mut v, A, b"a").unwrap();
        write(&parent, &mut v, A + PG, b"b").unwrap();
        let child = PageTable::new(&m).unwrap();
        parent
            .copy_page_range(&child, &CopyVma { start: A, end: A + 4 * PG, flags: RW, dst_uffd_wp: false })
            .unwrap();
        let s = smaps(&parent, A, A + 4 * PG);
        assert_eq!(
            (s.rss, s.pss, s.shared_dirty, s.private_dirty),
            (8, 4, 8, 0),
            "the live kernel's numbers"
        );
        // Still shared: the parent's write copies.
        write(&parent, &mut v, A, b"A").unwrap();
        assert_eq!(parent.fault_stats().wp_copy, 1);
        let s = smaps(&parent, A, A + 4 * PG);
        assert_eq!((s.rss, s.pss, s.shared_dirty, s.private_dirty), (8, 6, 4, 4));
        // The child exits: the second page is the parent's alone again and is reused.
        drop(child);
        write(&parent, &mut v, A + PG, b"B").unwrap();
        assert_eq!(parent.fault_stats().wp_reuse, 1);
        let mut cv = v;
        assert_eq!(read(&parent, &mut cv, A, 1).unwrap(), b"A");
        assert_eq!(read(&parent, &mut cv, A + PG, 1).unwrap(), b"B");
        let s = smaps(&parent, A, A + 4 * PG);
        assert_eq!((s.rss, s.pss, s.private_dirty), (8, 8, 8));
        parent.validate().unwrap();
    }

    #[test]
    fn protnone_entries_keep_their_pages_and_come_back() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + PG, RW);
        write(&pt, &mut v, A, b"k").unwrap();
        let cp = crate::ChangeProt { newprot: PageProt::NONE, try_change_writable: false, shared: false };
        assert_eq!(pt.change_protection(A, A + PG, &cp), 1);
        assert!(pt.pte(A).is_protnone());
        assert_eq!(smaps(&pt, A, A + PG).rss, 4, "a PROT_NONE page still counts");
        assert!(matches!(pt.access(A, Access::Read), Err(MmuError::Fault { protection: false, .. })));
        // The VMA is accessible (as after mprotect back without touching the entries): do_numa_page.
        assert_eq!(handle_mm_fault(&pt, &v, A, Access::Read), VmFault::Handled(FaultKind::Numa));
        assert_eq!(read(&pt, &mut v, A, 1).unwrap(), b"k");
        pt.validate().unwrap();
    }

    #[test]
    fn racing_a_zap_a_fault_reports_spurious_and_leaks_nothing() {
        let m = mem();
        let pt = PageTable::new(&m).unwrap();
        let mut v = FaultVma::anonymous(A, A + PG, RW).with_anon_vma();
        // A second fault on a mapped entry: spurious, nothing allocated.
        resolve(&pt, &mut v, A, Access::Write).unwrap();
        let before = m.stats().frames_in_use;
        assert_eq!(handle_mm_fault(&pt, &v, A, Access::Write), VmFault::Handled(FaultKind::Spurious));
        assert_eq!(m.stats().frames_in_use, before);
        pt.zap_range(A, A + PG, &ZapDetails::dontneed(false));
        drop(pt);
        vmspace_rcu::synchronize();
        assert_eq!(m.stats().frames_in_use, 0);
        assert_eq!(m.stats().tables_in_use, 0);
    }
}
