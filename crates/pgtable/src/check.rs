//! Whole-memory accounting: every frame of a [`Memory`] against every page table and page cache that uses it.
//!
//! [`check_memory`] is the frame half of the invariants (ARCHITECTURE.md, "Page tables and frames"): a frame's
//! mapcount is the number of entries that map it, its refcount those entries plus its page-cache slot and the
//! references the lazy-free batch holds ([`Memory::lru_add_drain`]; no
//! transient holder is left when nothing runs), no frame in use is unreferenced (a leak) and no free frame is
//! referenced; the memory's counters agree (frames and tables in use, nothing still waiting for its grace
//! period). Per page table, [`PageTable::validate`] checks the structure and the RSS counters; only the caller
//! knows every page table and cache of a memory (an address space, its fork children, the files they map), so
//! the cross-check takes them all.

use std::collections::HashMap;

use crate::{FrameFlags, Memory, PageCache, PageTable, Pfn, VA_END};

/// Checks every frame of `mem` against the entries of `pts` and the pages of `caches`, which must be every page
/// table and page cache of the memory, with nothing running on any of them (module docs). Waits for grace
/// periods first, so that released frames and tables are free. The first violation found is the error.
pub fn check_memory(mem: &Memory, pts: &[&PageTable], caches: &[&PageCache]) -> Result<(), String> {
    // Wait until nothing is pending, for ten seconds at most. A freed object's deferred drop may itself free
    // pages a grace period later (a VMA's file reference, dropped after its grace period, can be a page cache's
    // last, whose eviction gathers its frames); and a thread that has just finished may not have handed its
    // retired batch to the shared queue yet: `thread::scope` and `JoinHandle::join` return once the thread's
    // closure has returned, before its thread-local destructors (which queue the batch) have run, so a few
    // back-to-back grace periods can all end before that batch exists. Sleep between the tries to let it
    // appear.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        vmspace_rcu::synchronize();
        let s = mem.stats();
        if (s.frames_pending_free == 0 && s.tables_pending_free == 0) || std::time::Instant::now() >= deadline
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut maps: HashMap<Pfn, u32> = HashMap::new();
    for pt in pts {
        pt.validate()?;
        for (_, pte) in pt.entries(0, VA_END) {
            if pte.is_present() && !pte.is_special() {
                *maps.entry(pte.pfn()).or_default() += 1;
            }
        }
    }
    let mut cached: HashMap<Pfn, (u64, u64)> = HashMap::new();
    for c in caches {
        for (index, pfn) in c.pages() {
            if cached.insert(pfn, (c.id(), index)).is_some() {
                return Err(format!("frame {pfn:?} cached twice"));
            }
        }
    }
    // References the CPU's lazy-free batch holds.
    let batch = mem.batch_refs();
    let mut in_use = 0u64;
    for pfn in mem.frames_ever() {
        let info = mem.frame_info(pfn).ok_or_else(|| format!("frame {pfn:?} vanished"))?;
        let m = maps.get(&pfn).copied().unwrap_or(0);
        let slot = cached.get(&pfn).copied();
        if info.flags.contains(FrameFlags::FREE) {
            if m != 0 || slot.is_some() {
                return Err(format!("free frame {pfn:?} mapped {m} times or cached ({slot:?})"));
            }
            continue;
        }
        in_use += 1;
        let c = u32::from(slot.is_some()) + batch.get(&pfn).copied().unwrap_or(0);
        if info.mapcount != m {
            return Err(format!(
                "frame {pfn:?}: mapcount {} but {m} entries map it ({info:?})",
                info.mapcount
            ));
        }
        if info.refcount != m + c {
            return Err(format!(
                "frame {pfn:?}: refcount {} but {m} entries + {c} cache slot and batch references ({info:?})",
                info.refcount
            ));
        }
        if m + c == 0 {
            return Err(format!(
                "frame {pfn:?} leaked: in use, neither mapped nor cached ({info:?}; counters {:?})",
                mem.stats()
            ));
        }
        if let Some((id, index)) = slot
            && (info.mapping, info.index) != (id, index)
        {
            return Err(format!(
                "cache page {pfn:?} at {id}:{index} says it is {}:{} ({info:?})",
                info.mapping, info.index
            ));
        }
    }
    let s = mem.stats();
    if s.frames_in_use != in_use || s.frames_pending_free != 0 {
        return Err(format!("{in_use} frames in use by the walk; counters {s:?}"));
    }
    let tables: u64 = pts.iter().map(|p| p.table_pages()).sum();
    if s.tables_in_use != tables || s.tables_pending_free != 0 {
        return Err(format!("{tables} table pages in the page tables; counters {s:?}"));
    }
    Ok(())
}
