//! Helpers of the unit tests: what a CPU and the address space do around the fault core.

use std::sync::Arc;

use vmspace_abi::VmFlags;
use vmspace_proc::{MemStats, MemStatsAccumulator};

use crate::{Access, FaultVma, Memory, MemoryConfig, MmuError, PageTable, VmFault, handle_mm_fault};

/// Private read-write flags as mmap sets them.
pub(crate) const RW: VmFlags =
    VmFlags::READ.union(VmFlags::WRITE).union(VmFlags::MAYREAD).union(VmFlags::MAYWRITE);
/// Shared read-write flags as mmap sets them for a file opened read-write.
pub(crate) const SHARED_RW: VmFlags = RW.union(VmFlags::SHARED).union(VmFlags::MAYSHARE);

pub(crate) fn mem() -> Arc<Memory> {
    Memory::new(MemoryConfig::default())
}

/// Resolves a page fault like the address space: `Retry` prepares the anon_vma, `RetryIo` faults again as a
/// retry. Returns the first failure.
pub(crate) fn resolve(
    pt: &PageTable,
    vma: &mut FaultVma<'_>,
    addr: u64,
    access: Access,
) -> Result<(), VmFault> {
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

/// A user store of `data` at `addr`, faulting as needed.
pub(crate) fn write(pt: &PageTable, vma: &mut FaultVma<'_>, addr: u64, data: &[u8]) -> Result<(), VmFault> {
    for _ in 0..16 {
        match pt.write(addr, data) {
            Ok(()) => return Ok(()),
            Err(MmuError::Fault { addr: a, access, .. }) => resolve(pt, vma, a, access)?,
            Err(MmuError::NoMem) => return Err(VmFault::Oom),
        }
    }
    panic!("write at {addr:#x} kept faulting");
}

/// A user load of `n` bytes at `addr`, faulting as needed.
pub(crate) fn read(pt: &PageTable, vma: &mut FaultVma<'_>, addr: u64, n: usize) -> Result<Vec<u8>, VmFault> {
    let mut buf = vec![0u8; n];
    for _ in 0..16 {
        match pt.read(addr, &mut buf) {
            Ok(()) => return Ok(buf),
            Err(MmuError::Fault { addr: a, access, .. }) => resolve(pt, vma, a, access)?,
            Err(MmuError::NoMem) => return Err(VmFault::Oom),
        }
    }
    panic!("read at {addr:#x} kept faulting");
}

/// smaps counters of `[start, end)`, checking that the locked and lockless readers agree.
pub(crate) fn smaps(pt: &PageTable, start: u64, end: u64) -> MemStats {
    let mut a = MemStatsAccumulator::default();
    pt.smaps_range(start, end, false, &mut a);
    let mut b = MemStatsAccumulator::default();
    pt.smaps_range_lockless(start, end, false, &mut b);
    assert_eq!(a, b, "locked and lockless smaps differ on a quiet page table");
    a.finish()
}
