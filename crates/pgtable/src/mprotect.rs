//! Entry rewrites in place: `change_protection` (mprotect), `madvise_free_pte_range` (`MADV_FREE`), and the
//! guard markers of `MADV_GUARD_INSTALL` / `MADV_GUARD_REMOVE` (`mm/madvise.c`).
//!
//! # change_protection
//!
//! [`PageTable::change_protection`] rewrites every present entry of the range (`PROT_NONE` ones included) with
//! `pte_modify(old, newprot)`: the frame and the accessed, dirty, soft-dirty, special and uffd-wp bits stay, the
//! protection bits come from the VMA's new `vm_page_prot`. Since a private mapping's `vm_page_prot` is never
//! writable, mprotect would leave every page to take a write fault; with `MM_CP_TRY_CHANGE_WRITABLE` (the
//! caller's `try_change_writable`, set when `vma_wants_manual_pte_write_upgrade`) an entry is made writable at
//! once where the write fault would have reused the page anyway (`can_change_pte_writable`): an exclusive
//! anonymous page in a private mapping, a dirty entry in a shared one. Each entry changes with one
//! compare-and-swap loop, so a concurrent dirty update by the MMU is never lost. Markers and empty entries are
//! left alone. Caller contract: the mmap write lock with the range's VMAs write-locked (no faults in it).
//!
//! # MADV_FREE
//!
//! [`PageTable::madvise_free`] makes the range's exclusive anonymous pages lazily freeable: the entry loses its
//! dirty and accessed bits, the frame its dirty flag and `PG_swapbacked` (`folio_mark_lazyfree`). smaps counts
//! such a page as `LazyFree` until it is written again (the MMU sets dirty). Pages shared with another address
//! space are skipped (`folio_maybe_mapped_shared`). The live kernel clears `PG_swapbacked` through a per-CPU
//! folio batch (`lru_lazyfree`), so its smaps `LazyFree` can lag by up to a batch; here it happens at once.
//!
//! # Guard markers
//!
//! [`PageTable::install_guard_markers`] puts a guard marker into every empty entry of the range, allocating
//! tables as needed (`guard_install_pte_entry`, `guard_install_set_pte`); an entry that maps something (or holds
//! another marker) stops it with [`GuardInstall::Busy`], and the caller zaps the range and tries again, as
//! `madvise_guard_install` does. Markers already placed stay (the kernel's walk is not undone either), and so
//! do those placed before an allocation failure. [`PageTable::remove_guard_markers`] clears guard markers only
//! (`guard_remove_pte_entry`).

use vmspace_abi::Errno;
use vmspace_rcu::sync::Ordering;

use crate::arch::{Marker, PAGE_SIZE, PageProt, Pte, VA_END, addr_end};
use crate::frame::FrameFlags;
use crate::pgtable::PageTable;

/// How to rewrite protections (`change_protection`'s `newprot` and `cp_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeProt {
    /// The VMA's new `vm_page_prot`.
    pub newprot: PageProt,
    /// `MM_CP_TRY_CHANGE_WRITABLE`: make entries writable where a write fault would reuse the page.
    pub try_change_writable: bool,
    /// The VMA is `VM_SHARED`.
    pub shared: bool,
}

/// The outcome of [`PageTable::install_guard_markers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardInstall {
    /// Every entry of the range holds a guard marker; `installed` of them are new.
    Done {
        /// Markers placed by this call.
        installed: u64,
    },
    /// The entry at `addr` maps a page or holds another marker: zap the range and call again.
    Busy {
        /// The first such entry.
        addr: u64,
    },
}

impl PageTable {
    /// `change_protection` over `[start, end)` (module docs). Returns the number of entries changed.
    pub fn change_protection(&self, start: u64, end: u64, cp: &ChangeProt) -> u64 {
        let mut changed = 0;
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                let (old, new) = g.update(addr, |old| {
                    if !old.is_present() {
                        return old;
                    }
                    let mut new = old.modify(cp.newprot);
                    if cp.try_change_writable && !new.is_write() && self.can_change_pte_writable(cp.shared, new) {
                        new = new.mkwrite();
                    }
                    new
                });
                if old != new {
                    changed += 1;
                }
                addr += PAGE_SIZE;
            }
        });
        changed
    }

    /// `can_change_pte_writable` for an entry already rewritten with the new protection.
    fn can_change_pte_writable(&self, shared: bool, pte: Pte) -> bool {
        if pte.is_protnone() || !pte.is_hw_present() || pte.is_uffd_wp() {
            return false;
        }
        if !shared {
            if pte.is_special() {
                return false;
            }
            let f = self.mem.frame(pte.pfn());
            return f.flags().contains(FrameFlags::ANON.union(FrameFlags::ANON_EXCLUSIVE));
        }
        pte.is_dirty()
    }

    /// `madvise_free_pte_range` over `[start, end)` of an anonymous VMA (module docs). Returns the pages made
    /// lazily freeable.
    pub fn madvise_free(&self, start: u64, end: u64) -> u64 {
        let mut n = 0;
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                let pte = g.get(addr);
                addr += PAGE_SIZE;
                if !pte.is_present() || pte.is_special() {
                    continue;
                }
                let f = self.mem.frame(pte.pfn());
                if !f.is_anon() || f.mapcount() > 1 {
                    continue;
                }
                f.clear(FrameFlags::DIRTY);
                if pte.is_young() || pte.is_dirty() {
                    g.update(addr - PAGE_SIZE, |p| if p.is_present() { p.mkold().mkclean() } else { p });
                }
                f.clear(FrameFlags::SWAPBACKED);
                n += 1;
            }
        });
        n
    }

    /// `MADV_GUARD_INSTALL`'s page-table walk over `[start, end)` (module docs). Errors: `ENOMEM` allocating a
    /// table (markers placed so far stay).
    pub fn install_guard_markers(&self, start: u64, end: u64) -> Result<GuardInstall, Errno> {
        let end = end.min(VA_END);
        let mut installed = 0;
        let mut addr = start;
        while addr < end {
            let next = addr_end(addr, end, 1);
            let g = self.lock_pte(addr, true)?.expect("allocating lock_pte returns a table");
            let mut a = addr;
            while a != next {
                let p = g.get(a);
                if !p.is_none() && p.as_marker() != Some(Marker::GUARD) {
                    return Ok(GuardInstall::Busy { addr: a });
                }
                a += PAGE_SIZE;
            }
            let mut a = addr;
            while a != next {
                if g.get(a).is_none() {
                    g.set(a, Pte::marker(Marker::GUARD));
                    installed += 1;
                }
                a += PAGE_SIZE;
            }
            addr = next;
        }
        Ok(GuardInstall::Done { installed })
    }

    /// `MADV_GUARD_REMOVE`'s walk: clears every guard marker in `[start, end)`. Returns how many.
    pub fn remove_guard_markers(&self, start: u64, end: u64) -> u64 {
        let mut n = 0;
        self.for_each_pte_table(start, end, &mut |g, from, to| {
            let mut addr = from;
            while addr != to {
                if g.get(addr).as_marker().is_some_and(|m| m.contains(Marker::GUARD)) {
                    // Release: as `PteGuard::set`; a marker is never touched by the MMU.
                    g.slot(addr).store(0, Ordering::Release);
                    n += 1;
                }
                addr += PAGE_SIZE;
            }
        });
        n
    }
}
