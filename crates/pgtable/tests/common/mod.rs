//! What the integration tests share: a CPU's access loop around the fault core, as the address space will run
//! it, and whole-memory accounting checks.
#![allow(dead_code)]

use std::collections::HashMap;

use vmspace_abi::VmFlags;
use vmspace_pgtable::{
    Access, FaultVma, FrameFlags, Memory, MmuError, PageCache, PageTable, Pfn, VA_END, VmFault,
    handle_mm_fault,
};

/// Private read-write flags as mmap sets them.
pub const RW: VmFlags = VmFlags::READ.union(VmFlags::WRITE).union(VmFlags::MAYREAD).union(VmFlags::MAYWRITE);
/// Shared read-write flags (a file opened read-write).
pub const SHARED_RW: VmFlags = RW.union(VmFlags::SHARED).union(VmFlags::MAYSHARE);

/// Resolves one page fault as the address space does (`Retry` prepares the anon_vma).
pub fn resolve(pt: &PageTable, vma: &mut FaultVma<'_>, addr: u64, access: Access) -> Result<(), VmFault> {
    for _ in 0..8 {
        match handle_mm_fault(pt, vma, addr, access) {
            VmFault::Handled(_) => return Ok(()),
            VmFault::Retry => vma.anon_vma = true,
            e => return Err(e),
        }
    }
    panic!("fault at {addr:#x} never resolved");
}

/// A user store, faulting as needed. `Err(Oom)` also stands for the MMU's failed contents allocation.
pub fn write(pt: &PageTable, vma: &mut FaultVma<'_>, addr: u64, data: &[u8]) -> Result<(), VmFault> {
    for _ in 0..64 {
        match pt.write(addr, data) {
            Ok(()) => return Ok(()),
            Err(MmuError::Fault { addr: a, access, .. }) => resolve(pt, vma, a, access)?,
            Err(MmuError::NoMem) => return Err(VmFault::Oom),
        }
    }
    panic!("write at {addr:#x} kept faulting");
}

/// A user load of `n` bytes, faulting as needed.
pub fn read(pt: &PageTable, vma: &mut FaultVma<'_>, addr: u64, n: usize) -> Result<Vec<u8>, VmFault> {
    let mut buf = vec![0u8; n];
    for _ in 0..64 {
        match pt.read(addr, &mut buf) {
            Ok(()) => return Ok(buf),
            Err(MmuError::Fault { addr: a, access, .. }) => resolve(pt, vma, a, access)?,
            Err(MmuError::NoMem) => return Err(VmFault::Oom),
        }
    }
    panic!("read at {addr:#x} kept faulting");
}

/// A little-endian u64 at `addr`.
pub fn read_u64(pt: &PageTable, vma: &mut FaultVma<'_>, addr: u64) -> Result<u64, VmFault> {
    let b = read(pt, vma, addr, 8)?;
    Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// Checks every frame of `mem` against the entries of `pts` and the pages of `caches` (call with every page
/// table and cache of the memory, and nothing running): each frame in use is mapped exactly `mapcount` times,
/// referenced by its entries and its cache slot and nothing else, and no frame is in use unreferenced (a
/// leak). Waits for a grace period first, so that released frames are free.
pub fn check_memory(mem: &Memory, pts: &[&PageTable], caches: &[&PageCache]) {
    vmspace_rcu::synchronize();
    let mut maps: HashMap<Pfn, u32> = HashMap::new();
    for pt in pts {
        pt.validate().unwrap_or_else(|e| panic!("validate: {e}"));
        for (_, pte) in pt.entries(0, VA_END) {
            if pte.is_present() && !pte.is_special() {
                *maps.entry(pte.pfn()).or_default() += 1;
            }
        }
    }
    let mut cached: HashMap<Pfn, u64> = HashMap::new();
    for c in caches {
        for i in 0..c.size().div_ceil(4096) + 64 {
            if let Some(p) = c.page(i) {
                cached.insert(p, c.id());
            }
        }
    }
    let mut in_use = 0u64;
    for pfn in mem.frames_ever() {
        let info = mem.frame_info(pfn).unwrap();
        if info.flags.contains(FrameFlags::FREE) {
            assert!(!maps.contains_key(&pfn) && !cached.contains_key(&pfn), "free frame {pfn:?} in use");
            continue;
        }
        in_use += 1;
        let m = maps.get(&pfn).copied().unwrap_or(0);
        let c = u32::from(cached.contains_key(&pfn));
        assert_eq!(info.mapcount, m, "frame {pfn:?}: mapcount {info:?}, {m} entries");
        assert_eq!(info.refcount, m + c, "frame {pfn:?}: refcount {info:?}, {m} entries + {c} cache");
        assert!(m + c > 0, "frame {pfn:?} leaked: {info:?}");
        if let Some(&id) = cached.get(&pfn) {
            assert_eq!(info.mapping, id, "cache page {pfn:?} names another mapping");
        }
    }
    let s = mem.stats();
    assert_eq!(s.frames_in_use, in_use, "{s:?}");
    assert_eq!(s.frames_pending_free, 0, "{s:?}");
    let tables: u64 = pts.iter().map(|p| p.table_pages()).sum();
    assert_eq!(s.tables_in_use, tables, "{s:?}");
}
