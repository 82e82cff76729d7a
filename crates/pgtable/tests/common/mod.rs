//! What the integration tests share: a CPU's access loop around the fault core, as the address space will run
//! it, and whole-memory accounting checks.
#![allow(dead_code)]

use vmspace_abi::VmFlags;
use vmspace_pgtable::{Access, FaultVma, Memory, MmuError, PageCache, PageTable, VmFault, handle_mm_fault};

/// Private read-write flags as mmap sets them.
pub const RW: VmFlags = VmFlags::READ.union(VmFlags::WRITE).union(VmFlags::MAYREAD).union(VmFlags::MAYWRITE);
/// Shared read-write flags (a file opened read-write).
pub const SHARED_RW: VmFlags = RW.union(VmFlags::SHARED).union(VmFlags::MAYSHARE);

/// Resolves one page fault as the address space does (`Retry` prepares the anon_vma, `RetryIo` faults again
/// as a retry).
pub fn resolve(pt: &PageTable, vma: &mut FaultVma<'_>, addr: u64, access: Access) -> Result<(), VmFault> {
    vma.tried = false;
    for _ in 0..8 {
        match handle_mm_fault(pt, vma, addr, access) {
            VmFault::Handled(_) => return Ok(()),
            VmFault::Retry => vma.anon_vma = true,
            VmFault::RetryIo { .. } => vma.tried = true,
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
/// table and cache of the memory, and nothing running): `vmspace_pgtable::check_memory`, panicking with the
/// violation.
pub fn check_memory(mem: &Memory, pts: &[&PageTable], caches: &[&PageCache]) {
    vmspace_pgtable::check_memory(mem, pts, caches).unwrap_or_else(|e| panic!("memory accounting: {e}"));
}
