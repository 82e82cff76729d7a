//! madvise (`mm/madvise.c`: `do_madvise`, `madvise_should_skip`, `get_lock_mode`, `madvise_do_behavior`,
//! `madvise_walk_vmas`, `madvise_vma_behavior`, `madvise_update_vma`) with every advice Linux 6.18 accepts, and
//! `PR_SET_VMA_ANON_NAME` (`prctl_set_vma` → `madvise_set_anon_name`).
//!
//! # Order of checks (`madvise_should_skip`, then the lock, then the behaviour)
//!
//! 1. An advice `madvise_behavior_valid` does not know: EINVAL. Which exist depends on the kernel's build
//!    ([`MmConfig`](super::MmConfig)): `MADV_HUGEPAGE`, `MADV_NOHUGEPAGE`, `MADV_COLLAPSE` need
//!    `CONFIG_TRANSPARENT_HUGEPAGE`; `MADV_MERGEABLE`, `MADV_UNMERGEABLE` need `CONFIG_KSM`; `MADV_HWPOISON`,
//!    `MADV_SOFT_OFFLINE` need `CONFIG_MEMORY_FAILURE` (off on this project's hosts).
//! 2. An unaligned start, a length that rounds to 0 from near `u64::MAX`, an end that wraps: EINVAL; an empty
//!    range: success.
//! 3. The lock (`get_lock_mode`): advice that change VMA flags take the mmap write lock; `DONTNEED`,
//!    `DONTNEED_LOCKED` and `FREE` try the per-VMA read lock of the VMA at the start when the range lies in
//!    it (`try_vma_read_lock`), else the mmap read lock; the other advice take the mmap read lock; the
//!    memory-failure advice take none (their GUP takes the read lock). The engine does the same
//!    ([`LockMode`]): `POPULATE_WRITE` prepares anon_vmas under the read lock and `page_table_lock` as its
//!    faults do, and `GUARD_INSTALL` sets `VM_MAYBE_GUARD` with an atomic flag update (`vma_flag_set_atomic`).
//! 4. `MADV_POPULATE_READ` / `WRITE` fault the range in without walking VMAs ([`super::populate`]): a hole is
//!    ENOMEM at once, a VMA the access is not allowed on EINVAL, a failing page (guard marker, past the end
//!    of a file) EFAULT; the pages before stay populated (a write populate of a private VMA leaves it an
//!    anon_vma).
//! 5. The others walk the VMAs of the range (`madvise_walk_vmas`): **holes are skipped** and reported as
//!    ENOMEM at the end; the first VMA whose behaviour fails stops the walk with that error, after the VMAs
//!    before it were done.
//!
//! # Per VMA (`madvise_vma_behavior`; `mseal`'s `can_madvise_modify` check goes first, outside this scope)
//!
//! * `REMOVE`: `VM_LOCKED` EINVAL; no file EINVAL; not a shared writable-capable mapping
//!   (`vma_is_shared_maywrite`) EACCES; then `vfs_fallocate`'s range checks on the file offset (negative
//!   EINVAL, past the file system's largest file EFBIG); else the file's hole is punched
//!   (`vfs_fallocate(PUNCH_HOLE)` at the range's file offset: the pages leave the file and every mapping of it
//!   and read back as zeroes, but private copies made before stay (`truncate_pagecache_range` unmaps without
//!   `even_cows`; checked on the live kernel); for hugetlbfs only the whole huge pages of the range); no VMA
//!   change.
//! * `WILLNEED`: anonymous memory without `CONFIG_SWAP` EBADF; else success. A regular file's pages of the
//!   range are read into its cache, unmapped and unmarked (`madvise_willneed` → `vfs_fadvise` →
//!   `force_page_cache_readahead`: at most the larger of the device's readahead window and request size;
//!   `vmspace_pgtable` readahead docs); shmem and anonymous memory have no swap to read from.
//! * `COLD`, `PAGEOUT`: `can_madv_lru_vma` (not `VM_LOCKED | VM_PFNMAP | VM_HUGETLB`) or EINVAL; then the
//!   pages the range maps alone lose `PG_referenced`, and for `COLD` their accessed bits
//!   (`PageTable::mkold_range`: `PAGEOUT` keeps them); an anonymous page `PAGEOUT` could not swap out comes
//!   back active. `PAGEOUT` reclaims the file and shmem pages the range maps alone (`PageCache::pageout`:
//!   unmapped; clean ones leave the cache, dirty file pages stay cached and marked for reclaim, dirty shmem
//!   pages stay cached, having no swap to go to). Deactivation (no LRU lists) is not modelled
//!   (docs/DIVERGENCES.md).
//! * `DONTNEED`, `DONTNEED_LOCKED`, `FREE`: `madvise_dontneed_free_valid_vma` (`VM_PFNMAP`, and `VM_LOCKED`
//!   unless `DONTNEED_LOCKED`, EINVAL; hugetlb: `FREE` EINVAL, the start must be huge-page aligned (EINVAL)
//!   and the end is rounded down); then `FREE` needs anonymous memory (EINVAL). `DONTNEED` zaps the range
//!   (`zap_page_range_single` with `reclaim_pt`: emptied PTE tables go too): anonymous memory reads back as
//!   zeroes, a private file mapping as the file's bytes, a shared one as before (the pages stay in the file);
//!   guard markers stay. `FREE` makes the pages it maps alone lazily freeable (`madvise_free_pte_range`); with
//!   no memory pressure they keep their contents, as on Linux until reclaim.
//! * `COLLAPSE`: `thp_vma_allowable_order` for a forced collapse, or EINVAL: not `VM_NOHUGEPAGE`, not
//!   `VM_NO_KHUGEPAGED`, the VMA must hold a whole PMD-aligned 2 MiB block (file VMAs: with a PMD-aligned file
//!   offset), shmem unless its THP mode is `deny`, regular files only with `CONFIG_READ_ONLY_THP_FOR_FS` and
//!   no writer, anonymous memory only with an anon_vma. Then the 2 MiB blocks inside the range are
//!   collapsed: none (the range starts and ends in one block's boundaries): success; a range inside one
//!   block but not at its start: EINVAL (the kernel's unsigned block count wraps); whole blocks: each is
//!   scanned as `hpage_collapse_scan_pmd` scans an anonymous block (no PTE table: `SCAN_PMD_NULL`; a guard
//!   marker: refused; anything else collapses, read-only entries, the zero page and pages shared after fork
//!   included, as the live kernel shows), a shmem block as `hpage_collapse_scan_file` scans it (collapsed
//!   when at least one of its pages is in the page cache), and the call succeeds when every block collapsed,
//!   else fails with EINVAL (`madvise_collapse_errno` of these failures). A collapse is modelled by faulting
//!   every page of the block in (for writing in a writable VMA): the huge page's contents are the old pages'
//!   bytes and zeroes, which is what they read anyway; the page table keeps 4 KiB entries. Regular-file
//!   blocks (read-only THP for file systems) answer EINVAL without a scan (docs/DIVERGENCES.md).
//! * `GUARD_INSTALL`: `is_valid_guard_vma` (not `VM_SPECIAL | VM_HUGETLB | VM_LOCKED`) or EINVAL; the whole
//!   VMA gets `VM_MAYBE_GUARD` (no split: an atomic flag update); an anonymous VMA gets an anon_vma; every
//!   page of the range gets a guard marker (a PTE marker, `PageTable::install_guard_markers`): where an entry
//!   maps a page the range is zapped (guard markers kept) and the install tried again, until it completes
//!   (the kernel restarts the call after three tries). `GUARD_REMOVE`: the same check but `VM_LOCKED` allowed;
//!   the markers of the range go (`VM_MAYBE_GUARD` stays).
//! * `HWPOISON`, `SOFT_OFFLINE` (`madvise_inject_error`, only with `CONFIG_MEMORY_FAILURE`; never run on the
//!   live kernel): no CAP_SYS_ADMIN: EPERM; then each page of `[start, start + len)` (the length not rounded)
//!   is looked up as a GUP read would (EFAULT at the first one that fails). What memory failure then does to a
//!   page is page state the engine does not model.
//! * The flag changes, through `madvise_update_vma` → `vma_modify_flags` (merge or split; a refused split's
//!   ENOMEM becomes EAGAIN): `NORMAL` clears `VM_SEQ_READ | VM_RAND_READ`, `SEQUENTIAL` / `RANDOM` set one and
//!   clear the other; `DONTFORK` / `DOFORK` set / clear `VM_DONTCOPY` (DOFORK: `VM_IO` EINVAL);
//!   `WIPEONFORK` sets `VM_WIPEONFORK` on private anonymous memory only (EINVAL); `KEEPONFORK` clears it
//!   (`VM_DROPPABLE`: EINVAL); `DONTDUMP` / `DODUMP` set / clear `VM_DONTDUMP` (DODUMP: `VM_SPECIAL` outside
//!   hugetlb, or `VM_DROPPABLE`, EINVAL); `MERGEABLE` sets `VM_MERGEABLE` on KSM-compatible VMAs and ignores
//!   the others, `UNMERGEABLE` clears it (`ksm_madvise`); `HUGEPAGE` / `NOHUGEPAGE` set one of `VM_HUGEPAGE` /
//!   `VM_NOHUGEPAGE` and clear the other (`hugepage_madvise`).
//!
//! Anonymous names: without `CONFIG_ANON_VMA_NAME` the prctl is EINVAL. With it: a name longer than 80 bytes
//! (with its NUL) or with a character outside printable ASCII or among `` \`$[] `` is EINVAL; the range is
//! walked like madvise; a file-backed VMA (other than shared anonymous memory) is EBADF.

use std::sync::Arc;

use vmspace_pgtable::{GuardInstall, ZapDetails, vma_has_recency};

use super::tree::{V, VmaExt};
use super::{Advice, Errno, Mm, MmRead, MmWrite, PAGE_SIZE, VmFlags, nonempty_page_range};
use crate::vma::FileKind;

/// `ANON_VMA_NAME_MAX_LEN` (including the NUL).
const ANON_VMA_NAME_MAX_LEN: usize = 80;

/// `HPAGE_PMD_SIZE`: the size of a transparent huge page (and of the blocks `MADV_COLLAPSE` works on).
const HPAGE_PMD_SIZE: u64 = 2 << 20;

/// The huge page size of hugetlb VMAs: the engine maps no hugetlb memory yet (mmap refuses `MAP_HUGETLB`), and
/// when it does, its VMAs will come from the default 2 MiB pool of the hosts here unless they record another
/// size.
const HUGETLB_PAGE_SIZE: u64 = 2 << 20;

/// What a madvise walk does to each VMA.
#[derive(Clone)]
enum Behavior {
    Advice(Advice),
    Name(Option<Arc<str>>),
}

/// The lock a madvise advice runs under (`enum madvise_lock_mode`, chosen by `get_lock_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockMode {
    /// `MADVISE_NO_LOCK`: memory-failure injection.
    None,
    /// `MADVISE_MMAP_READ_LOCK`.
    MmapRead,
    /// `MADVISE_MMAP_WRITE_LOCK`: the advice that change VMA flags.
    MmapWrite,
    /// `MADVISE_VMA_READ_LOCK`: the VMA's own read lock when the range lies in one VMA, else the mmap read
    /// lock.
    VmaRead,
}

/// `get_lock_mode`.
pub(crate) fn lock_mode(advice: Advice) -> LockMode {
    match advice {
        Advice::HWPOISON | Advice::SOFT_OFFLINE => LockMode::None,
        Advice::REMOVE
        | Advice::WILLNEED
        | Advice::COLD
        | Advice::PAGEOUT
        | Advice::POPULATE_READ
        | Advice::POPULATE_WRITE
        | Advice::COLLAPSE
        | Advice::GUARD_INSTALL
        | Advice::GUARD_REMOVE => LockMode::MmapRead,
        Advice::DONTNEED | Advice::DONTNEED_LOCKED | Advice::FREE => LockMode::VmaRead,
        _ => LockMode::MmapWrite,
    }
}

impl Mm {
    /// `madvise(start, len, advice)`.
    pub fn madvise(&self, start: u64, len_in: u64, advice: Advice) -> Result<(), Errno> {
        // madvise_should_skip: is_valid_madvise, then the empty range.
        if !self.madvise_behavior_valid(advice) {
            return Err(Errno::EINVAL);
        }
        let Some(end) = nonempty_page_range(start, len_in)? else { return Ok(()) };
        match lock_mode(advice) {
            LockMode::None => self.read_locked(|mm| mm.madvise_inject_error(advice, start, start + len_in)),
            LockMode::MmapWrite => self.locked(|mm| mm.madvise_walk(start, end, &Behavior::Advice(advice))),
            LockMode::MmapRead => self.read_locked(|mm| mm.madvise_do_behavior(start, end, advice)),
            LockMode::VmaRead => {
                // try_vma_read_lock: the VMA at `start`, read-locked, when the range lies inside it.
                if let Some(g) = self.lock_vma_for_fault(start) {
                    if end <= g.vma().end() {
                        let v: V = g.vma();
                        return self.madvise_vma_page(v, start, end, advice);
                    }
                    drop(g);
                }
                self.read_locked(|mm| mm.madvise_do_behavior(start, end, advice))
            }
        }
    }

    /// `madvise_behavior_valid` with this kernel's build options.
    fn madvise_behavior_valid(&self, advice: Advice) -> bool {
        match advice {
            Advice::DOFORK
            | Advice::DONTFORK
            | Advice::NORMAL
            | Advice::SEQUENTIAL
            | Advice::RANDOM
            | Advice::REMOVE
            | Advice::WILLNEED
            | Advice::DONTNEED
            | Advice::DONTNEED_LOCKED
            | Advice::FREE
            | Advice::COLD
            | Advice::PAGEOUT
            | Advice::POPULATE_READ
            | Advice::POPULATE_WRITE
            | Advice::DONTDUMP
            | Advice::DODUMP
            | Advice::WIPEONFORK
            | Advice::KEEPONFORK
            | Advice::GUARD_INSTALL
            | Advice::GUARD_REMOVE => true,
            Advice::MERGEABLE | Advice::UNMERGEABLE => self.cfg.ksm,
            Advice::HUGEPAGE | Advice::NOHUGEPAGE | Advice::COLLAPSE => self.cfg.transparent_hugepage,
            Advice::HWPOISON | Advice::SOFT_OFFLINE => self.cfg.memory_failure,
            _ => false,
        }
    }

    /// `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, start, len, name)`; `None` clears.
    pub fn set_anon_name(&self, start: u64, len: u64, name: Option<&str>) -> Result<(), Errno> {
        if !self.cfg.anon_vma_name {
            return Err(Errno::EINVAL);
        }
        let name = match name {
            None => None,
            Some(n) => {
                if n.len() + 1 > ANON_VMA_NAME_MAX_LEN {
                    return Err(Errno::EINVAL);
                }
                if n.bytes().any(|c| !(0x20..0x7f).contains(&c) || b"\\`$[]".contains(&c)) {
                    return Err(Errno::EINVAL);
                }
                Some(Arc::<str>::from(n))
            }
        };
        self.locked(|mm| mm.madvise_set_anon_name(start, len, Behavior::Name(name)))
    }
}

/// `madvise_walk_vmas` over `[start, end)` (non-empty): `f(vma, start, end)` on each VMA part of the range,
/// in order, returning the end of the VMA now covering its start; **holes are skipped** and reported as ENOMEM
/// at the end; the first error stops the walk. `find` is `find_vma` (the caller's lock keeps it exact).
fn walk_vmas(
    find: impl Fn(u64) -> Option<V>,
    start: u64,
    end: u64,
    mut f: impl FnMut(V, u64, u64) -> Result<u64, Errno>,
) -> Result<(), Errno> {
    let mut unmapped_error = Ok(());
    let mut start = start;
    let mut vma = find(start);
    loop {
        let Some(a) = vma else { return Err(Errno::ENOMEM) };
        if start < a.start() {
            unmapped_error = Err(Errno::ENOMEM);
            start = a.start();
            if start >= end {
                break;
            }
        }
        let tmp = a.end().min(end);
        let prev_end = f(a, start, tmp)?;
        start = tmp.max(prev_end);
        if start >= end {
            break;
        }
        vma = find(prev_end);
    }
    unmapped_error
}

impl MmRead<'_> {
    /// `madvise_do_behavior` for the advice of the mmap read lock: populate, or the walk with the page advice.
    fn madvise_do_behavior(&self, start: u64, end: u64, advice: Advice) -> Result<(), Errno> {
        match advice {
            Advice::POPULATE_READ => self.faultin_page_range(start, end, false),
            Advice::POPULATE_WRITE => self.faultin_page_range(start, end, true),
            _ => {
                let mm: &Mm = self.mm;
                walk_vmas(
                    |a| mm.find(a),
                    start,
                    end,
                    |v, s, e| mm.madvise_vma_page(v, s, e, advice).map(|()| v.end()),
                )
            }
        }
    }

    /// `madvise_inject_error` for `[start, end)` (`end` not page-aligned: the kernel adds the raw length).
    fn madvise_inject_error(&self, advice: Advice, start: u64, end: u64) -> Result<(), Errno> {
        debug_assert!(matches!(advice, Advice::HWPOISON | Advice::SOFT_OFFLINE));
        if !self.cfg.cap_sys_admin {
            return Err(Errno::EPERM);
        }
        let mut addr = start;
        while addr < end {
            // get_user_pages_fast(start, 1, 0, &page): a read, no FOLL_FORCE, no stack growth.
            self.gup_access_locked(addr, false)?;
            // memory_failure / soft_offline_page act on the page itself: page state, not modelled.
            addr += PAGE_SIZE;
        }
        Ok(())
    }
}

impl MmWrite<'_> {
    /// `madvise_set_anon_name`: its own range checks, then the walk.
    fn madvise_set_anon_name(&mut self, start: u64, len_in: u64, b: Behavior) -> Result<(), Errno> {
        let Some(end) = nonempty_page_range(start, len_in)? else { return Ok(()) };
        self.madvise_walk(start, end, &b)
    }

    /// `madvise_walk_vmas` over `[start, end)` (non-empty) for the advice that change VMAs, and names.
    fn madvise_walk(&mut self, start: u64, end: u64, b: &Behavior) -> Result<(), Errno> {
        // Worst case per VMA: two splits and the stores, reserved before anything changes.
        let n = self.vmas_between(start, end).count() as u64;
        self.reserve(3 * n).map_err(|_| Errno::EAGAIN)?;
        let mm: &Mm = self.mm;
        walk_vmas(|a| mm.find(a), start, end, |v, s, e| self.madvise_vma(v, s, e, b))
    }

    /// `madvise_vma_behavior` for `[start, end)` inside `a` for the advice that change VMAs (and names).
    /// Returns the end of the VMA that now covers `start` (the walk's `prev`).
    fn madvise_vma(&mut self, a: V, start: u64, end: u64, b: &Behavior) -> Result<u64, Errno> {
        // mseal hook (sys2; `mm/madvise.c: madvise_vma_behavior` asks `can_madvise_modify` first, see
        // `super::mseal`).
        if let Behavior::Advice(adv) = b
            && !self.can_madvise_modify(a, *adv)
        {
            return Err(Errno::EPERM);
        }
        let flags = a.fl();
        let mut new_flags = flags;
        let mut new_name = a.anon_name();
        let advice = match b {
            Behavior::Name(n) => {
                // Only anonymous mappings can be named.
                if a.file().is_some_and(|f| f.kind != FileKind::ShmemZero) {
                    return Err(Errno::EBADF);
                }
                new_name = n.clone();
                None
            }
            Behavior::Advice(advice) => Some(*advice),
        };
        match advice {
            None => {}
            Some(Advice::NORMAL) => new_flags &= !(VmFlags::RAND_READ | VmFlags::SEQ_READ),
            Some(Advice::SEQUENTIAL) => new_flags = (new_flags & !VmFlags::RAND_READ) | VmFlags::SEQ_READ,
            Some(Advice::RANDOM) => new_flags = (new_flags & !VmFlags::SEQ_READ) | VmFlags::RAND_READ,
            Some(Advice::DONTFORK) => new_flags |= VmFlags::DONTCOPY,
            Some(Advice::DOFORK) => {
                if new_flags.intersects(VmFlags::IO) {
                    return Err(Errno::EINVAL);
                }
                new_flags &= !VmFlags::DONTCOPY;
            }
            Some(Advice::WIPEONFORK) => {
                // Only anonymous memory.
                if a.is_file_backed() || new_flags.intersects(VmFlags::SHARED) {
                    return Err(Errno::EINVAL);
                }
                new_flags |= VmFlags::WIPEONFORK;
            }
            Some(Advice::KEEPONFORK) => {
                if new_flags.intersects(VmFlags::DROPPABLE) {
                    return Err(Errno::EINVAL);
                }
                new_flags &= !VmFlags::WIPEONFORK;
            }
            Some(Advice::DONTDUMP) => new_flags |= VmFlags::DONTDUMP,
            Some(Advice::DODUMP) => {
                if (!flags.intersects(VmFlags::HUGETLB) && new_flags.intersects(VmFlags::SPECIAL))
                    || new_flags.intersects(VmFlags::DROPPABLE)
                {
                    return Err(Errno::EINVAL);
                }
                new_flags &= !VmFlags::DONTDUMP;
            }
            // ksm_madvise: KSM-incompatible VMAs ignore the advice (`__ksm_enter` is not modelled).
            Some(Advice::MERGEABLE) if !flags.intersects(VmFlags::MERGEABLE) && Mm::ksm_compatible(a) => {
                new_flags |= VmFlags::MERGEABLE;
            }
            Some(Advice::MERGEABLE) => {}
            // ksm_madvise: unmerging the pages is page state.
            Some(Advice::UNMERGEABLE) => new_flags &= !VmFlags::MERGEABLE,
            // hugepage_madvise (khugepaged_enter_vma registers the mm: not visible).
            Some(Advice::HUGEPAGE) => new_flags = (new_flags & !VmFlags::NOHUGEPAGE) | VmFlags::HUGEPAGE,
            Some(Advice::NOHUGEPAGE) => new_flags = (new_flags & !VmFlags::HUGEPAGE) | VmFlags::NOHUGEPAGE,
            // Populate and memory failure never walk VMAs (`madvise_do_behavior`); page advice walk under the
            // read lock (`Mm::madvise_vma_page`).
            Some(_) => return Err(Errno::EINVAL),
        }
        // madvise_update_vma.
        if new_flags == flags && a.name_is(new_name.as_ref()) {
            return Ok(a.end());
        }
        let t = if advice.is_some() {
            self.vma_modify_flags(a, start, end, &mut new_flags, new_name.as_ref())
        } else {
            // vma_modify_name: the flags are reset to the middle VMA's, sticky ones included or not.
            self.vma_modify(a, start, end, new_flags, new_name.as_ref())
        }
        .map_err(|e| if e == Errno::ENOMEM { Errno::EAGAIN } else { e })?;
        self.set_flags(t, new_flags);
        if !t.name_is(new_name.as_ref()) {
            self.set_name(t, new_name);
        }
        Ok(t.end())
    }
}

impl Mm {
    /// `madvise_vma_behavior` for `[start, end)` inside `a` for the advice that act on pages (module docs, "Per
    /// VMA"), under the mmap read lock or `a`'s read lock (`DONTNEED`, `FREE`).
    pub(crate) fn madvise_vma_page(&self, a: V, start: u64, end: u64, advice: Advice) -> Result<(), Errno> {
        // The mseal hook (`can_madvise_modify`, see `super::mseal`).
        if !self.can_madvise_modify(a, advice) {
            return Err(Errno::EPERM);
        }
        let flags = a.fl();
        match advice {
            Advice::REMOVE => self.madvise_remove(a, start, end),
            Advice::WILLNEED => {
                let Some(f) = a.file() else {
                    // Anonymous memory: swap-in of nothing (no swap device), or EBADF without CONFIG_SWAP.
                    return if self.cfg.swap { Ok(()) } else { Err(Errno::EBADF) };
                };
                // `vfs_fadvise(POSIX_FADV_WILLNEED)` over the range's file pages: a regular file reads them into
                // its cache (`force_page_cache_readahead`); shmem swaps in nothing; DAX ignores the advice.
                if f.kind == FileKind::Regular
                    && !f.dax
                    && let Some(c) = f.page_cache()
                {
                    let first = a.pgoff() + (start - a.start()) / PAGE_SIZE;
                    c.willneed(first, (end - start).div_ceil(PAGE_SIZE));
                }
                Ok(())
            }
            Advice::COLD | Advice::PAGEOUT => {
                // can_madv_lru_vma.
                if flags.intersects(VmFlags::LOCKED | VmFlags::PFNMAP | VmFlags::HUGETLB) {
                    return Err(Errno::EINVAL);
                }
                self.mem.lru_add_drain();
                self.pt().mkold_range(start, end, advice == Advice::PAGEOUT);
                // The file and shmem pages go to reclaim (`can_do_file_pageout`: the runner owns its files).
                if advice == Advice::PAGEOUT
                    && let Some(f) = a.file()
                    && let Some(c) = f.page_cache()
                {
                    c.pageout(self.pt(), start, end);
                }
                Ok(())
            }
            Advice::FREE | Advice::DONTNEED | Advice::DONTNEED_LOCKED => {
                self.madvise_dontneed_free(a, start, end, advice)
            }
            Advice::COLLAPSE => self.madvise_collapse(a, start, end),
            Advice::GUARD_INSTALL => self.madvise_guard_install(a, start, end),
            Advice::GUARD_REMOVE => {
                if !Self::is_valid_guard_vma(a, true) {
                    return Err(Errno::EINVAL);
                }
                self.pt().remove_guard_markers(start, end);
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    /// `madvise_remove` for `[start, end)` inside `a`.
    fn madvise_remove(&self, a: V, start: u64, end: u64) -> Result<(), Errno> {
        let fl = a.fl();
        if fl.intersects(VmFlags::LOCKED) {
            return Err(Errno::EINVAL);
        }
        let Some(file) = a.file() else {
            return Err(Errno::EINVAL);
        };
        // vma_is_shared_maywrite.
        if !fl.contains(VmFlags::SHARED | VmFlags::MAYWRITE) {
            return Err(Errno::EACCES);
        }
        // vfs_fallocate(PUNCH_HOLE | KEEP_SIZE, offset, len) with the kernel's loff_t (i64) arithmetic:
        // offset = (start - vm_start) + (vm_pgoff << PAGE_SHIFT), which wraps negative for a pgoff near the
        // top of the 2^52-page file space (EINVAL), and offset + len beyond the file system's largest file
        // (s_maxbytes) or past i64::MAX is EFBIG. The file keeps its size.
        let offset =
            ((start - a.start()) as i64).wrapping_add((a.pgoff() << super::config::PAGE_SHIFT) as i64);
        let len = (end - start) as i64;
        if offset < 0 {
            return Err(Errno::EINVAL);
        }
        match offset.checked_add(len) {
            Some(last) if last as u64 <= file.max_bytes => {}
            _ => return Err(Errno::EFBIG),
        }
        // The hole at the range's file offset; hugetlbfs punches whole huge pages only.
        let mut offset = offset as u64;
        let mut hole_end = offset + len as u64;
        if let Some(size) = file.huge_page_size() {
            offset = offset.next_multiple_of(size);
            hole_end -= hole_end % size;
        }
        if hole_end > offset {
            file.punch_hole(offset, hole_end - offset);
        }
        Ok(())
    }

    /// `madvise_dontneed_free`: the validity checks, then the zap (`DONTNEED`) or the lazy free (`FREE`).
    fn madvise_dontneed_free(&self, a: V, start: u64, end: u64, advice: Advice) -> Result<(), Errno> {
        let fl = a.fl();
        // madvise_dontneed_free_valid_vma.
        let end = if !fl.intersects(VmFlags::HUGETLB) {
            let mut forbidden = VmFlags::PFNMAP;
            if advice != Advice::DONTNEED_LOCKED {
                forbidden |= VmFlags::LOCKED;
            }
            if fl.intersects(forbidden) {
                return Err(Errno::EINVAL);
            }
            end
        } else {
            let size = a.file().and_then(|f| f.huge_page_size()).unwrap_or(HUGETLB_PAGE_SIZE);
            if advice == Advice::FREE || start & (size - 1) != 0 {
                return Err(Errno::EINVAL);
            }
            end & !(size - 1)
        };
        if start == end {
            return Ok(());
        }
        if advice == Advice::FREE {
            // madvise_free_single_vma: anonymous memory only.
            if !a.is_anonymous() {
                return Err(Errno::EINVAL);
            }
            self.mem.lru_add_drain();
            self.pt().madvise_free(start, end);
        } else {
            let d = ZapDetails::dontneed(a.is_file_backed()).with_recency(vma_has_recency(a.fl()));
            self.pt().zap_range(start, end, &d);
        }
        Ok(())
    }

    /// `madvise_collapse` (module docs).
    fn madvise_collapse(&self, a: V, start: u64, end: u64) -> Result<(), Errno> {
        if !self.thp_allows_forced_collapse(a) {
            return Err(Errno::EINVAL);
        }
        let hstart = (start + HPAGE_PMD_SIZE - 1) & !(HPAGE_PMD_SIZE - 1);
        let hend = end & !(HPAGE_PMD_SIZE - 1);
        // `thps == ((hend - hstart) >> HPAGE_PMD_SHIFT)`: true only for hstart == hend when no block is there
        // (hend < hstart wraps to a huge count, which no number of collapses reaches).
        if hstart == hend {
            return Ok(());
        }
        let file = a.file();
        if hend < hstart || file.as_ref().is_some_and(|f| f.kind != FileKind::ShmemZero) {
            // A wrapped count, or the blocks of a regular file (read-only THP for file systems: not scanned,
            // docs/DIVERGENCES.md).
            return Err(Errno::EINVAL);
        }
        let mut all = true;
        let write = a.fl().intersects(VmFlags::WRITE);
        let mut block = hstart;
        while block < hend {
            let scanned = match &file {
                None => self.collapse_scan_anon(block),
                Some(f) => {
                    let first = a.pgoff() + ((block - a.start()) >> super::config::PAGE_SHIFT);
                    Self::collapse_scan_shmem(f, first)
                }
            };
            // collapse_huge_page / collapse_file: the block becomes one huge page of the old pages' bytes and
            // zeroes: its pages are faulted in (for writing where the VMA allows it: a collapse copies shared
            // anonymous pages; a shmem block's holes become zeroed pages of the file).
            if !scanned || self.gup_range(a, block, block + HPAGE_PMD_SIZE, write).is_err() {
                all = false;
            }
            block += HPAGE_PMD_SIZE;
        }
        // Every scan failure modelled maps to EINVAL (`madvise_collapse_errno`'s default).
        if all { Ok(()) } else { Err(Errno::EINVAL) }
    }

    /// `hpage_collapse_scan_pmd` for the 2 MiB block at `block` of an anonymous VMA with `cc->is_khugepaged`
    /// false: whether it would be collapsed. A block without a PTE table is `SCAN_PMD_NULL`; a marker refuses
    /// (a guard region is never collapsed); empty entries, the zero page, pages shared with a fork child and
    /// read-only entries are all allowed (measured on the live kernel: each collapses).
    fn collapse_scan_anon(&self, block: u64) -> bool {
        let pt = self.pt();
        pt.has_pte_table(block)
            && pt.entries(block, block + HPAGE_PMD_SIZE).iter().all(|(_, pte)| pte.as_marker().is_none())
    }

    /// `hpage_collapse_scan_file` for the 2 MiB block of shmem `f` from page index `first`, with
    /// `cc->is_khugepaged` false: whether it would be collapsed. A block with at least one page in the page
    /// cache is; one with none is refused (EINVAL), whatever maps it (measured on the live kernel:
    /// `scripts/regress/madvise-collapse-shmem.script`).
    fn collapse_scan_shmem(f: &crate::VmFile, first: u64) -> bool {
        let pmd_pages = HPAGE_PMD_SIZE >> super::config::PAGE_SHIFT;
        f.page_cache().is_some_and(|c| c.has_pages(first, first + pmd_pages - 1))
    }

    /// `thp_vma_allowable_order(vma, vm_flags, TVA_FORCED_COLLAPSE, PMD_ORDER)`.
    fn thp_allows_forced_collapse(&self, a: V) -> bool {
        let fl = a.fl();
        // vma_thp_disabled (MMF_DISABLE_THP is not modelled), then VM_NO_KHUGEPAGED.
        if fl.intersects(VmFlags::NOHUGEPAGE) || fl.intersects(VmFlags::NO_KHUGEPAGED) {
            return false;
        }
        // thp_vma_suitable_order(vma, vm_end - HPAGE_PMD_SIZE, PMD_ORDER): a whole aligned block inside the VMA,
        // and for files a file offset that stays aligned with it.
        let pmd_pages = HPAGE_PMD_SIZE >> super::config::PAGE_SHIFT;
        let file_offset_misaligned =
            !(a.start() >> super::config::PAGE_SHIFT).wrapping_sub(a.pgoff()).is_multiple_of(pmd_pages);
        if a.is_file_backed() && file_offset_misaligned {
            return false;
        }
        let Some(last) = a.end().checked_sub(HPAGE_PMD_SIZE) else { return false };
        let haddr = last & !(HPAGE_PMD_SIZE - 1);
        if haddr < a.start() || haddr + HPAGE_PMD_SIZE > a.end() {
            return false;
        }
        match a.file() {
            // shmem_allowable_huge_orders with the collapse forced: anything but `deny`.
            Some(f) if f.kind == FileKind::ShmemZero => self.cfg.thp_shmem_enabled != super::ThpMode::Deny,
            // file_thp_enabled: read-only THP of regular files nobody has open for writing.
            Some(f) => self.cfg.read_only_thp_for_fs && !f.writable,
            // Anonymous memory: only once it has an anon_vma.
            None => a.has_anon_vma(),
        }
    }

    /// `is_valid_guard_vma`.
    fn is_valid_guard_vma(a: V, allow_locked: bool) -> bool {
        let mut disallowed = VmFlags::SPECIAL | VmFlags::HUGETLB;
        if !allow_locked {
            disallowed |= VmFlags::LOCKED;
        }
        !a.fl().intersects(disallowed)
    }

    /// `madvise_guard_install` for `[start, end)` inside `a` (module docs), under the mmap read lock.
    fn madvise_guard_install(&self, a: V, start: u64, end: u64) -> Result<(), Errno> {
        if !Self::is_valid_guard_vma(a, false) {
            return Err(Errno::EINVAL);
        }
        // vma_flag_set_atomic(vma, VM_MAYBE_GUARD_BIT): the whole VMA, no split.
        if !a.fl().intersects(VmFlags::MAYBE_GUARD) {
            a.set_flag_atomic(VmFlags::MAYBE_GUARD);
        }
        if a.is_anonymous() {
            self.anon_vma_prepare(a);
        }
        let pt = self.pt();
        loop {
            match pt.install_guard_markers(start, end)? {
                GuardInstall::Done { .. } => return Ok(()),
                // zap_page_range_single(vma, start, end - start, NULL): every page, markers kept, and try again.
                GuardInstall::Busy { .. } => {
                    let d = ZapDetails {
                        even_cows: true,
                        drop_markers: false,
                        reclaim_pt: false,
                        file_vma: a.is_file_backed(),
                        recency: vma_has_recency(a.fl()),
                    };
                    pt.zap_range(start, end, &d);
                }
            }
        }
    }

    /// `ksm_compatible`: VMAs KSM leaves alone (`MADV_MERGEABLE` is then ignored). DAX is not modelled.
    fn ksm_compatible(a: V) -> bool {
        !a.fl().intersects(
            VmFlags::SHARED | VmFlags::MAYSHARE | VmFlags::SPECIAL | VmFlags::HUGETLB | VmFlags::DROPPABLE,
        )
    }
}
