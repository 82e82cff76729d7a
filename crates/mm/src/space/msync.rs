//! msync (`mm/msync.c: SYSCALL_DEFINE3(msync)`): checks and walks; `MS_SYNC` writes back the dirty pages of the
//! shared regular-file VMAs it walks.
//!
//! 1. Flags other than `MS_ASYNC | MS_INVALIDATE | MS_SYNC`: EINVAL; an unaligned start: EINVAL; both
//!    `MS_ASYNC` and `MS_SYNC`: EINVAL (flags 0 is valid).
//! 2. The length is rounded up to pages (`u64::MAX` wraps to 0: success); an end that wraps: ENOMEM; an empty
//!    range: success. The start is not checked against `TASK_SIZE` (a range up there finds no VMA: ENOMEM).
//! 3. The walk (under the mmap read lock): no VMA at or after the position: ENOMEM. A hole before the next
//!    VMA: with flags exactly `MS_ASYNC`, ENOMEM at once; otherwise it is skipped and ENOMEM reported at the
//!    end (and a hole that reaches the end of the range is ENOMEM at once). `MS_INVALIDATE` on a `VM_LOCKED`
//!    VMA: EBUSY, whatever came before. `MS_SYNC` on a shared file VMA writes back that VMA's part of the
//!    range (`vfs_fsync_range` over its file offsets, which the model files never fail: `PageCache::writeback`
//!    cleans the pages and write-protects their entries, so smaps counts them clean and the next write faults);
//!    shmem is not written back (`noop_fsync`). `MS_ASYNC` starts nothing (since 2.6.19).
//!
//! Every rule above was checked on the live kernel (`crates/mm/tests/msync.rs` says how).

use super::tree::VmaExt;
use super::{Errno, FileKind, Mm, MsyncFlags, PAGE_MASK, PAGE_SIZE, VmFlags, page_align};

impl Mm {
    /// `msync(start, len, flags)`.
    pub fn msync(&self, start: u64, len: u64, flags: MsyncFlags) -> Result<(), Errno> {
        let valid = MsyncFlags::ASYNC | MsyncFlags::INVALIDATE | MsyncFlags::SYNC;
        if !valid.contains(flags) || start & !PAGE_MASK != 0 {
            return Err(Errno::EINVAL);
        }
        if flags.contains(MsyncFlags::ASYNC | MsyncFlags::SYNC) {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len);
        let end = start.wrapping_add(len);
        if end < start {
            return Err(Errno::ENOMEM);
        }
        if end == start {
            return Ok(());
        }
        self.read_locked(|mm| mm.msync_walk(start, end, flags))
    }

    fn msync_walk(&self, mut start: u64, end: u64, flags: MsyncFlags) -> Result<(), Errno> {
        let mut unmapped_error = Ok(());
        let mut vma = self.find(start);
        loop {
            let Some(v) = vma else { return Err(Errno::ENOMEM) };
            if start < v.start() {
                if flags == MsyncFlags::ASYNC {
                    return Err(Errno::ENOMEM);
                }
                start = v.start();
                if start >= end {
                    return Err(Errno::ENOMEM);
                }
                unmapped_error = Err(Errno::ENOMEM);
            }
            if flags.contains(MsyncFlags::INVALIDATE) && v.fl().intersects(VmFlags::LOCKED) {
                return Err(Errno::EBUSY);
            }
            // MS_SYNC of a shared file VMA: vfs_fsync_range over the file pages of [start, min(end, vm_end)),
            // which writes the dirty ones back (and succeeds on the model files).
            if flags.contains(MsyncFlags::SYNC)
                && v.fl().intersects(VmFlags::SHARED)
                && let Some(f) = v.file()
                && f.kind == FileKind::Regular
                && let Some(c) = f.page_cache()
            {
                let first = v.pgoff() + (start - v.start()) / PAGE_SIZE;
                let last = first + (end.min(v.end()) - start) / PAGE_SIZE - 1;
                c.writeback(first, last);
            }
            start = v.end();
            if start >= end {
                return unmapped_error;
            }
            vma = self.find(start);
        }
    }
}
