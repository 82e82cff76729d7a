//! The page-level side of the address space's calls: file registration (`vma_interval_tree_insert`), unmapping
//! (`unmap_region`: zap and `free_pgtables`), exit (`exit_mmap`), protection changes (`change_protection`), and
//! the checks of [`Mm::validate`](super::Mm::validate) that tie the page table to the VMAs.
//!
//! # File registration
//!
//! A file VMA is registered with its file's page cache (`PageCache::i_mmap_insert`: the page table, the range
//! and the file offset), so that a truncation or a hole punch of the file reaches its pages, wherever they are
//! mapped. The tree primitives keep the registration current (`space::tree`): a new VMA is registered when it
//! is stored, a range change updates it, a VMA leaving is unregistered before its page tables are freed (the
//! truncation's zap must never walk tables being freed: `free_pgd_range`'s caller contract). Where a change
//! moves pages between registrations, coverage never lapses: a split registers the new VMA before the old one
//! shrinks, a merge grows the survivor before the other goes, and moves of entries (mremap, fork) hold the
//! file's rmap lock ([`crate::vma::attrs::FilePages`]) across the move and the registration change.
//!
//! # Unmapping
//!
//! [`Mm::unmap_pages`] is `vms_clear_ptes`: every entry of the removed VMAs is zapped (markers included), then
//! their page tables are freed between the neighbours that stay (`free_pgtables`: VMAs closer than 2 MiB are
//! freed in one `free_pgd_range`, whose floor is the previous VMA's end and ceiling the next VMA's start, so a
//! table a neighbour still uses is kept). The removed VMAs have left the tree and their registrations before
//! (the tree primitives), write-locked until then, so no fault runs in the range. It runs under the mmap write
//! lock, or, for the unmaps that end their call (`munmap`, brk and mremap shrinking), under the read hold
//! left by the downgrade, beside faults and `MADV_DONTNEED` in the neighbours (module `munmap` says why
//! that is safe: nothing can map the range meanwhile, and the floor and ceiling keep the shared tables).
//! Frames and tables go back to the memory a grace period later (the page table's gathers).
//!
//! # Checks
//!
//! `MmRead::validate_pages` (the page-table part of `validate`, run when no fault changes entries under it):
//! the page table's own structure and counters, and during the same walk of its tables
//! (`PageTable::validate_with`), for each entry: it lies inside a VMA; no frame
//! is mapped here more often than its mapcount, nor has a refcount below its mapcount; a guard marker only in a `VM_MAYBE_GUARD` VMA and no
//! other marker; a present entry is `PROT_NONE` exactly when its VMA is inaccessible, writable only in a
//! `VM_WRITE` VMA, executable exactly in a `VM_EXEC` one; the zero page and anonymous pages only in private
//! VMAs, anonymous pages only in VMAs with an anon_vma; a page-cache page only in a VMA of its file, at the
//! address of its index; every file VMA's registration names this page table, its range, its offset and its
//! recency.
//! A guard marker's VMA has `VM_MAYBE_GUARD` with one exception Linux has too: naming a range
//! (`PR_SET_VMA_ANON_NAME`) that merges with a guarded neighbour resets the merged VMA's flags to those of the
//! renamed part (`mm/madvise.c: madvise_update_vma` sets the flags it computed before `vma_modify_name`, which,
//! unlike `vma_modify_flags`, does not hand back the sticky flags the merge kept), so that check applies only
//! where anonymous VMA names are off (`CONFIG_ANON_VMA_NAME`).
//! `Mm::check_memory` (tests) makes the frame counts exact over a family of address spaces that share a memory:
//! mapcount = entries, refcount = entries + cache slot, no leak.

use std::ops::ControlFlow;
use std::sync::Arc;

use vmspace_abi::VmFlags;
use vmspace_pgtable::{
    ChangeProt, FileMapping, FrameFlags, MappingId, PMD_SIZE, PageProt, Pfn, VA_END, ZapDetails,
    vma_has_recency,
};

use super::tree::{V, VmaExt};
use super::{FileKind, Mm, MmRead};

impl Mm {
    /// Registers the file VMA `v` with its file's page cache (module docs). Nothing for anonymous VMAs.
    pub(crate) fn i_mmap_register(&self, v: V) {
        if !v.is_file_backed() {
            return;
        }
        let f = v.file().expect("a file-backed VMA has its file");
        let cache = f.cache_in(&self.mem).expect("a mapped file's pages live in its address space's memory");
        let id = cache.i_mmap_insert(FileMapping {
            pt: Arc::clone(self.pt()),
            start: v.start(),
            end: v.end(),
            pgoff: v.pgoff(),
            recency: vma_has_recency(v.fl()),
        });
        debug_assert_eq!(v.i_mmap_id(), 0, "a VMA registered twice");
        v.set_i_mmap_id(id.get());
    }

    /// Brings `v`'s registration up to date with its range, offset and recency (`vma_has_recency`).
    pub(crate) fn i_mmap_update(&self, v: V) {
        let id = v.i_mmap_id();
        if id == 0 {
            return;
        }
        let f = v.file().expect("a registered VMA has its file");
        let cache = f.page_cache().expect("a registered file has its page cache");
        let known = cache.i_mmap_update(
            MappingId::from_raw(id),
            v.start(),
            v.end(),
            v.pgoff(),
            vma_has_recency(v.fl()),
        );
        debug_assert!(known, "a VMA's registration vanished");
    }

    /// Removes `v`'s registration (before its page tables may be freed).
    pub(crate) fn i_mmap_unregister(&self, v: V) {
        let id = v.i_mmap_id();
        if id == 0 {
            return;
        }
        let f = v.file().expect("a registered VMA has its file");
        let cache = f.page_cache().expect("a registered file has its page cache");
        let gone = cache.i_mmap_remove(MappingId::from_raw(id));
        debug_assert!(gone.is_some(), "a VMA's registration vanished");
        v.set_i_mmap_id(0);
    }

    /// `vms_clear_ptes` for the removed VMAs' `ranges` (in address order, each with its VMA's recency,
    /// `vma_has_recency`) between `floor` (the end of the VMA below, 0 if none) and `ceiling` (the start of the
    /// VMA above, 0 if none): module docs.
    pub(crate) fn unmap_pages(&self, ranges: &[(u64, u64, bool)], floor: u64, ceiling: u64) {
        let pt = self.pt();
        for &(s, e, recency) in ranges {
            pt.zap_range(s, e, &ZapDetails::UNMAP.with_recency(recency));
        }
        let mut i = 0;
        while i < ranges.len() {
            let addr = ranges[i].0;
            let mut j = i;
            while j + 1 < ranges.len() && ranges[j + 1].0 <= ranges[j].1.saturating_add(PMD_SIZE) {
                j += 1;
            }
            let next = ranges.get(j + 1).map_or(ceiling, |r| r.0);
            pt.free_pgd_range(addr, ranges[j].1, floor, next);
            i = j + 1;
        }
    }

    /// `exit_mmap`'s page part, after every VMA left: every entry zapped (those of `without_recency`, the ranges
    /// of the VMAs without recency, first: `vma_has_recency`), every table below the top freed.
    pub(crate) fn exit_mmap(&self, without_recency: &[(u64, u64)]) {
        let pt = self.pt();
        for &(s, e) in without_recency {
            pt.zap_range(s, e, &ZapDetails::UNMAP.with_recency(false));
        }
        pt.zap_range(0, VA_END, &ZapDetails::UNMAP);
        pt.free_pgd_range(0, VA_END, 0, 0);
    }

    /// `change_protection` of `[start, end)` inside `v` to `v`'s current flags (mprotect, after the flags were
    /// set): `vm_page_prot` from the flags, and `MM_CP_TRY_CHANGE_WRITABLE` when
    /// `vma_wants_manual_pte_write_upgrade` (a private writable VMA, or a shared one with write notification).
    pub(crate) fn change_protection(&self, v: V, start: u64, end: u64) {
        let flags = v.fl();
        let file = if v.is_file_backed() { v.file() } else { None };
        let writenotify = file.as_ref().is_some_and(|f| f.kind == FileKind::Regular);
        let shared = flags.intersects(VmFlags::SHARED);
        let cp = ChangeProt {
            newprot: PageProt::for_vma(flags, writenotify),
            try_change_writable: if shared {
                writenotify && flags.intersects(VmFlags::WRITE)
            } else {
                flags.intersects(VmFlags::WRITE)
            },
            shared,
        };
        self.pt().change_protection(start, end, &cp);
    }
}

impl Mm {
    /// The ranges of pages that hold guard markers (`MADV_GUARD_INSTALL`), in order, adjacent pages joined: what
    /// `/proc/PID/pagemap`'s `PM_GUARD_REGION` bits show. A lockless walk of the page table (a snapshot).
    pub fn guard_ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        self.pt().for_each_entry(0, VA_END, |addr, pte| {
            if pte.as_marker().is_some_and(|m| m.contains(vmspace_pgtable::Marker::GUARD)) {
                match out.last_mut() {
                    Some(last) if last.1 == addr => last.1 += vmspace_pgtable::PAGE_SIZE,
                    _ => out.push((addr, addr + vmspace_pgtable::PAGE_SIZE)),
                }
            }
        });
        out
    }
}

impl Mm {
    testing_pub! {
    /// Whole-memory accounting for a family of address spaces sharing one [`Memory`](vmspace_pgtable::Memory)
    /// (an `Mm` made with [`Mm::with_memory`] and its fork children): [`Mm::validate`] of each, then
    /// `vmspace_pgtable::check_memory` over their page tables and the page caches of every file they map plus
    /// `files` (files no VMA maps any more but whose pages stay cached): every frame's mapcount is its entries,
    /// its refcount its entries and cache slot, and nothing is leaked. Nothing may run in the family meanwhile.
    pub fn check_memory(family: &[&Mm], files: &[&crate::vma::VmFile]) -> Result<(), String> {
        let Some(first) = family.first() else { return Ok(()) };
        let mem = first.memory();
        let mut caches: Vec<Arc<vmspace_pgtable::PageCache>> = Vec::new();
        let mut add = |c: &Arc<vmspace_pgtable::PageCache>| {
            if !caches.iter().any(|k| k.id() == c.id()) {
                caches.push(Arc::clone(c));
            }
        };
        for f in files {
            if let Some(c) = f.page_cache() {
                add(c);
            }
        }
        for mm in family {
            if !Arc::ptr_eq(mm.memory(), mem) {
                return Err("the family's address spaces use different memories".into());
            }
            mm.validate()?;
            for v in mm.read_locked(|r| r.areas().filter_map(|v| v.file()).collect::<Vec<_>>()) {
                if let Some(c) = v.page_cache() {
                    add(c);
                }
            }
        }
        let pts: Vec<&vmspace_pgtable::PageTable> = family.iter().map(|m| &**m.pt()).collect();
        let cs: Vec<&vmspace_pgtable::PageCache> = caches.iter().map(|c| &**c).collect();
        vmspace_pgtable::check_memory(mem, &pts, &cs)
    }
    }
}

/// What [`MmRead::check_entry`] found wrong with an entry (the message is made by [`Broken::describe`], out of
/// the per-entry path).
#[derive(Clone, Copy, Debug)]
enum Broken {
    Outside,
    OtherMarker,
    GuardWithoutFlag,
    Access,
    Write,
    Exec,
    Special,
    NoFrame,
    Anon,
    NotItsFilePage,
}

impl Broken {
    #[cold]
    #[inline(never)]
    fn describe(self, addr: u64, pte: vmspace_pgtable::Pte, v: Option<V>) -> String {
        match self {
            Broken::Outside => format!("entry {pte:?} at {addr:#x} outside every VMA"),
            Broken::OtherMarker => format!("marker {pte:?} at {addr:#x}: only guard markers are made"),
            Broken::GuardWithoutFlag => {
                format!("guard marker at {addr:#x} in a VMA without VM_MAYBE_GUARD {v:?}")
            }
            Broken::Access => format!("entry {pte:?} at {addr:#x} disagrees with the access of {v:?}"),
            Broken::Write => format!("writable entry {pte:?} at {addr:#x} in a VMA without VM_WRITE {v:?}"),
            Broken::Exec => format!("entry {pte:?} at {addr:#x} disagrees with VM_EXEC of {v:?}"),
            Broken::Special => format!("special entry {pte:?} at {addr:#x} in {v:?}"),
            Broken::NoFrame => format!("no frame for {pte:?} at {addr:#x}"),
            Broken::Anon => format!("anonymous page at {addr:#x} in {v:?} (shared or without anon_vma)"),
            Broken::NotItsFilePage => format!(
                "page-cache page {pte:?} at {addr:#x} is not its VMA's file page {:#x}: {v:?}",
                v.map_or(0, |v| v.pgoff_at(addr))
            ),
        }
    }
}

impl MmRead<'_> {
    /// The checks of one entry at `addr` inside VMA `v` (module docs); the frame is added to `mapped`.
    fn check_entry(
        &self,
        v: V,
        addr: u64,
        pte: vmspace_pgtable::Pte,
        mapped: &mut Vec<Pfn>,
    ) -> Result<(), Broken> {
        let fl = v.fl();
        if let Some(m) = pte.as_marker() {
            if m != vmspace_pgtable::Marker::GUARD {
                return Err(Broken::OtherMarker);
            }
            // Naming can drop the flag (module docs); without anon VMA names nothing can.
            if !fl.intersects(VmFlags::MAYBE_GUARD) && !self.cfg.anon_vma_name {
                return Err(Broken::GuardWithoutFlag);
            }
            return Ok(());
        }
        let accessible = fl.intersects(VmFlags::ACCESS_FLAGS);
        if pte.is_protnone() == accessible {
            return Err(Broken::Access);
        }
        if pte.is_write() && !fl.intersects(VmFlags::WRITE) {
            return Err(Broken::Write);
        }
        if accessible && pte.is_exec() != fl.intersects(VmFlags::EXEC) {
            return Err(Broken::Exec);
        }
        let shared = fl.intersects(VmFlags::MAYSHARE);
        if pte.is_special() {
            if pte.pfn() != Pfn::ZERO || shared {
                return Err(Broken::Special);
            }
            return Ok(());
        }
        mapped.push(pte.pfn());
        self.check_frame_entry(v, fl, addr, pte)
    }

    /// The frame part of [`MmRead::check_entry`], out of line: it reads the frame's descriptor into a local,
    /// which would otherwise give every entry's check (zero-page entries too) a stack frame in memory.
    #[inline(never)]
    fn check_frame_entry(
        &self,
        v: V,
        fl: VmFlags,
        addr: u64,
        pte: vmspace_pgtable::Pte,
    ) -> Result<(), Broken> {
        let shared = fl.intersects(VmFlags::MAYSHARE);
        let info = self.mem.frame_info(pte.pfn()).ok_or(Broken::NoFrame)?;
        if info.flags.contains(FrameFlags::ANON) {
            if shared || !v.has_anon_vma() {
                return Err(Broken::Anon);
            }
            return Ok(());
        }
        let private_hugetlb = fl.intersects(VmFlags::HUGETLB) && !shared;
        let cache =
            if private_hugetlb { None } else { v.file().and_then(|f| f.page_cache().map(|c| c.id())) };
        match cache {
            Some(id) if info.mapping == id && info.index == v.pgoff_at(addr) => Ok(()),
            _ => Err(Broken::NotItsFilePage),
        }
    }

    /// The page-table checks of `validate` (module docs). The caller holds the mmap lock and no fault, zap or
    /// fork runs in the address space (`Mm::validate`).
    pub(crate) fn validate_pages(&self) -> Result<(), String> {
        let pt = self.pt();
        let mut vmas = self.areas();
        let mut cur: Option<V> = None;
        // Frames mapped here, one PFN per entry: no frame may be mapped more often than its mapcount (fork
        // children and other mappers of a file page map it too), checked once the walk is over.
        let mut mapped: Vec<Pfn> = Vec::new();
        // Checked during the page table's own validation walk (one pass over the tables, no list of entries);
        // the first broken rule ends it. The per-entry check only classifies (`Broken`, no formatting), so that
        // it stays small: validation runs after every operation of the tests and of the engine fuzz target.
        let mut found: Option<(Broken, u64, vmspace_pgtable::Pte, Option<V>)> = None;
        // The last entry that passed without a frame (the zero page, a guard marker) and its VMA: the checks of
        // such an entry read only the entry and the VMA's flags, so the same value in the same VMA passes too.
        // The page table hands runs of them over as one call (populated read-only memory is runs of identical
        // zero-page entries, hundreds of thousands of them); a run is checked once per VMA it lies in.
        let mut passed: Option<(vmspace_pgtable::Pte, V)> = None;
        let check = |addr: u64, pte: vmspace_pgtable::Pte, pages: u64| -> ControlFlow<()> {
            let end = addr + pages * vmspace_pgtable::PAGE_SIZE;
            let mut at = addr;
            while at < end {
                while cur.is_none_or(|v| v.end() <= at) {
                    cur = vmas.next();
                    if cur.is_none() {
                        break;
                    }
                }
                let Some(v) = cur.filter(|v| v.start() <= at) else {
                    found = Some((Broken::Outside, at, pte, None));
                    return ControlFlow::Break(());
                };
                if passed.is_none_or(|(p, pv)| p != pte || !std::ptr::eq(pv, v)) {
                    if let Err(b) = self.check_entry(v, at, pte, &mut mapped) {
                        // The message is made once the walk has stopped.
                        found = Some((b, at, pte, Some(v)));
                        return ControlFlow::Break(());
                    }
                    if pte.is_special() || pte.as_marker().is_some() {
                        passed = Some((pte, v));
                    }
                }
                at = v.end().min(end);
            }
            ControlFlow::Continue(())
        };
        let walked = pt.validate_with(check);
        if let Some((b, addr, pte, v)) = found {
            return Err(b.describe(addr, pte, v));
        }
        walked?;
        mapped.sort_unstable();
        for run in mapped.chunk_by(|a, b| a == b) {
            let pfn = run[0];
            let info = self.mem.frame_info(pfn).ok_or_else(|| format!("no frame {pfn:?}"))?;
            if run.len() as u64 > u64::from(info.mapcount) || info.refcount < info.mapcount {
                return Err(format!("frame {pfn:?} mapped {} times here: {info:?}", run.len()));
            }
        }
        for v in self.areas() {
            let id = v.i_mmap_id();
            if id == 0 {
                continue;
            }
            let f = v.file().ok_or_else(|| format!("registered VMA without a file {v:?}"))?;
            let c = f.page_cache().ok_or_else(|| format!("registered VMA whose file has no cache {v:?}"))?;
            match c.i_mmap_get(MappingId::from_raw(id)) {
                Some(m)
                    if Arc::ptr_eq(&m.pt, pt)
                        && (m.start, m.end, m.pgoff, m.recency)
                            == (v.start(), v.end(), v.pgoff(), vma_has_recency(v.fl())) => {}
                other => return Err(format!("registration {other:?} does not describe {v:?}")),
            }
        }
        Ok(())
    }
}
