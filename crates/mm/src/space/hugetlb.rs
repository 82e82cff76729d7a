//! `MAP_HUGETLB`: anonymous hugetlbfs mappings (`mm/mmap.c: ksys_mmap_pgoff`, `fs/hugetlbfs/inode.c:
//! hugetlb_file_setup`, `hugetlbfs_file_mmap`, `hugetlb_get_unmapped_area`, `mm/hugetlb.c:
//! hugetlb_reserve_pages`, `hugetlb_vm_op_split`, `hugetlb_no_page`), against the host's pools as data
//! ([`HugetlbConfig`](super::config::HugetlbConfig)).
//!
//! # What a mapping goes through
//!
//! 1. `ksys_mmap_pgoff`: the `MAP_HUGE_*` size field picks the pool (`hstate_sizelog`: 0 is the default size;
//!    a size the kernel has no pool for is EINVAL, before any other check), the length is rounded up to the
//!    huge page size (a length of 0, or one that wraps, becomes 0: EINVAL in `do_mmap`), and a new hugetlbfs
//!    object is made: `/anon_hugepage (deleted)` on the pool's internal mount, sized to the length, with the
//!    next inode number (shared with shmem objects: the kernel's `get_next_ino`). From here on the mapping is
//!    a file mapping: the user's offset is its page offset, `MAP_GROWSDOWN` and `MAP_DROPPABLE` are EINVAL,
//!    `MAP_SHARED_VALIDATE` accepts `LEGACY_MAP_MASK` only.
//! 2. Placement (`hugetlb_get_unmapped_area`): a `MAP_FIXED` address must be huge-page aligned (EINVAL, before
//!    the error-value rule of `__get_unmapped_area`); a hint is rounded *up* to a huge page; searches return
//!    huge-page aligned addresses.
//! 3. `mmap_region`: the range is unmapped (`MAP_FIXED`) **before** `hugetlbfs_file_mmap` runs, so its
//!    failures leave a hole (checked on the live kernel): a page offset that is not huge-page aligned is
//!    EINVAL, and a reservation the pool cannot give is ENOMEM. The VMA gets `VM_HUGETLB | VM_DONTEXPAND`
//!    (never merged, never grown), no `VM_ACCOUNT`, and loses `VM_LOCKED`.
//!
//! # Pages and reservations
//!
//! A pool is the number of huge pages new reservations and faults may take (`free - resv` of the host pool
//! when the engine starts; shared by fork children). A mapping without `MAP_NORESERVE` reserves one page per
//! huge page of its range (`hugetlb_reserve_pages`), ENOMEM if the pool has fewer. A fault (a user access such
//! as the op-script `touch`, GUP, `MAP_POPULATE`) of a page not yet present takes the reservation (the owner's, see below) or
//! else a free page, and fails (SIGBUS: EFAULT) when there is none: a `MAP_NORESERVE` mapping maps fine from
//! an empty pool and fails at its first touch. Unmapping gives back the reserved pages of the range that were
//! never faulted and frees its present pages (`hugetlb_vm_op_close`, measured with `HugePages_Rsvd` and
//! `HugePages_Free`); a shared object's pages and reservations go when the last mapping of it goes.
//!
//! # Contents
//!
//! The page tables have no huge entries (`vmspace_pgtable` maps 4 KiB pages only), so a huge page's contents
//! are 4 KiB pages behind the pool's accounting: the first fault in a huge page takes it from the pool as above
//! (`hugetlb_fault`), then each 4 KiB page is faulted as in any mapping: through the object's page cache (a
//! shmem cache of the object's size) for a shared mapping, as anonymous memory (the zero page for reads, new
//! pages for writes, copy-on-write after fork) for a private one, whose pages are anonymous in Linux too.
//! Contents therefore read and write as on Linux; what differs is the page-table shape (512 PTEs where Linux
//! has one PMD entry) and the accounting of the 4 KiB pages (RSS and smaps count them as ordinary pages,
//! Linux's smaps as `Shared_Hugetlb` / `Private_Hugetlb`).
//!
//! # What is not modelled
//!
//! - Huge page-table entries (above). `MADV_DONTNEED` of a hugetlb range drops the 4 KiB pages but keeps the
//!   huge page charged to the object until unmap.
//! - Fork children share their parent's hugetlb pages as objects: a child's private mapping owns no
//!   reservation (as in Linux: `HPAGE_RESV_OWNER` is the parent's), but its copy-on-write faults do not
//!   allocate huge pages from the pool (its 4 KiB copies are ordinary frames), and unmapping in the child gives
//!   nothing back (the owner's unmap does).
//! - Surplus pages (`nr_overcommit_hugepages`), hugetlb cgroups and subpools, other processes' use of the pool
//!   after the engine starts, hugetlbfs files opened by path (only `MAP_HUGETLB` objects exist).
//! - The device minor of the internal hugetlbfs mounts is boot-time data no file publishes
//!   (`HugetlbPool::dev_minor`, 0 unless configured); the inode numbers are the engine's own counter.

use std::sync::Arc;

use vmspace_abi::{Errno, PAGE_SHIFT, VmFlags};

use super::Mm;
use super::fault::{FaultError, FaultLock};
use super::tree::{V, VmaExt};
use crate::vma::{FileKind, HugeObject, HugePool, HugeRef, VmFile, attrs::FileSize, attrs::HugePages};

/// `PGOFF_LOFFT_MAX` on 64-bit: page offsets whose byte offset would not fit a `loff_t`.
const PGOFF_LOFFT_MAX: u64 = ((1u64 << (PAGE_SHIFT + 1)) - 1) << (64 - (PAGE_SHIFT + 1));

/// One unmapped range of a hugetlb object: the object and its huge page indexes `[first, end)`.
pub(crate) struct HugeRange {
    obj: Arc<HugeObject>,
    first: u64,
    end: u64,
}

impl Mm {
    /// The pools of the configuration, one per huge page size (made once per engine process tree).
    pub(crate) fn new_huge_pools(cfg: &super::MmConfig) -> Arc<Vec<Arc<HugePool>>> {
        Arc::new(cfg.hugetlb.pools.iter().map(|p| Arc::new(HugePool::new(p.size, p.available))).collect())
    }

    /// The pool a `MAP_HUGE_*` size field asks for (`hstate_sizelog`), `None` if the kernel has none.
    pub(crate) fn hugetlb_pool(&self, log: u32) -> Option<(Arc<HugePool>, u32)> {
        let want = self.cfg.hugetlb.pool_for_log(log)?;
        let pool = self.huge.iter().find(|p| p.size == want.size)?;
        Some((pool.clone(), want.dev_minor))
    }

    /// `hugetlb_file_setup(HUGETLB_ANON_FILE, len, VM_NORESERVE, ...)`: a new hugetlbfs object of `len` bytes
    /// (no reservation yet: the mapping makes it).
    pub(crate) fn hugetlb_file_setup(
        &self,
        pool: Arc<HugePool>,
        dev_minor: u32,
        len: u64,
        shared: bool,
    ) -> Arc<VmFile> {
        let ino = self.next_ino();
        let mut f = (*VmFile::shmem_zero(ino, 0)).clone();
        f.name = "/anon_hugepage".into();
        f.dev_minor = dev_minor;
        f.size = FileSize::new(len);
        f.kind = FileKind::Hugetlb;
        f.huge = Some(HugeRef(Arc::new(HugeObject {
            pool,
            shared,
            owner_mm: self.locking().id(),
            pages: vmspace_rcu::sync::Mutex::new(HugePages::default()),
        })));
        Arc::new(f)
    }

    /// `vm_ops->may_split` (`hugetlb_vm_op_split`): a hugetlb VMA splits only at a huge page boundary.
    pub(crate) fn may_split(&self, v: V, addr: u64) -> Result<(), Errno> {
        if !v.fl().intersects(VmFlags::HUGETLB) {
            return Ok(());
        }
        match v.file().and_then(|f| f.huge_page_size()) {
            Some(size) if !addr.is_multiple_of(size) => Err(Errno::EINVAL),
            _ => Ok(()),
        }
    }

    /// `hugetlbfs_file_mmap` for a new mapping of `f` at page offset `pgoff`, `len` bytes, `vm_flags`
    /// (called after the range was unmapped: a failure leaves a hole). Reserves the range's pages unless
    /// `VM_NORESERVE`.
    pub(crate) fn hugetlbfs_file_mmap(
        &self,
        f: &VmFile,
        pgoff: u64,
        len: u64,
        vm_flags: VmFlags,
    ) -> Result<(), Errno> {
        let Some(HugeRef(obj)) = &f.huge else { return Ok(()) };
        let size = obj.pool.size;
        if pgoff & PGOFF_LOFFT_MAX != 0 {
            return Err(Errno::EINVAL);
        }
        if pgoff & ((size >> PAGE_SHIFT) - 1) != 0 {
            return Err(Errno::EINVAL);
        }
        let end_bytes = len.checked_add(pgoff << PAGE_SHIFT).ok_or(Errno::EINVAL)?;
        if end_bytes > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        if !vm_flags.intersects(VmFlags::NORESERVE) {
            let (first, end) = ((pgoff << PAGE_SHIFT) / size, end_bytes / size);
            let mut pages = obj.pages.lock();
            let need =
                (first..end).filter(|i| !pages.reserved.contains(i) && !pages.faulted.contains(i)).count();
            if !obj.pool.take(need as u64) {
                return Err(Errno::ENOMEM);
            }
            pages.reserved.extend(first..end);
        }
        if vm_flags.intersects(VmFlags::WRITE) && f.size() < end_bytes {
            f.set_size(end_bytes);
        }
        Ok(())
    }

    /// A fault of the hugetlb page holding `addr` in `v` (`hugetlb_fault` → `hugetlb_no_page`): present
    /// already, or taken from the owner's reservation, or from the pool; SIGBUS beyond the end of the object or
    /// when the pool is empty. A new page of a private mapping then needs the VMA's anon_vma
    /// (`vmf_anon_prepare`, under `lock`): under the VMA lock without the mmap read lock at hand, the page goes
    /// back (`restore_reserve_on_error`) and the fault is retried.
    pub(crate) fn hugetlb_fault(&self, v: V, addr: u64, lock: FaultLock) -> Result<(), FaultError> {
        let Some(f) = v.file() else { return Ok(()) };
        let Some(HugeRef(obj)) = &f.huge else { return Ok(()) };
        let size = obj.pool.size;
        let idx = (v.pgoff_at(addr) << PAGE_SHIFT) / size;
        if idx >= f.size() / size {
            return Err(FaultError::SigBus);
        }
        let owner = obj.shared || obj.owner_mm == self.locking().id();
        let from_reserve = {
            let mut pages = obj.pages.lock();
            if pages.faulted.contains(&idx) {
                return Ok(());
            }
            // The owner's reservation, else a free page of the pool.
            let reserved = owner && pages.reserved.remove(&idx);
            if !reserved && !obj.pool.take(1) {
                return Err(FaultError::SigBus);
            }
            pages.faulted.insert(idx);
            reserved
        };
        if !v.fl().intersects(VmFlags::MAYSHARE) && !v.has_anon_vma() {
            match lock {
                FaultLock::Mmap => self.anon_vma_prepare(v),
                FaultLock::Vma => match self.locking().try_read_lock() {
                    Some(_r) => self.anon_vma_prepare(v),
                    None => {
                        let mut pages = obj.pages.lock();
                        pages.faulted.remove(&idx);
                        if from_reserve {
                            pages.reserved.insert(idx);
                        } else {
                            obj.pool.give(1);
                        }
                        return Err(FaultError::Retry { tried: false });
                    }
                },
            }
        }
        Ok(())
    }

    /// The hugetlb ranges of VMAs about to be unmapped (for [`Mm::hugetlb_release`] after the removal).
    pub(crate) fn hugetlb_ranges(&self, gone: &[V]) -> Vec<HugeRange> {
        gone.iter()
            .filter(|v| v.fl().intersects(VmFlags::HUGETLB))
            .filter_map(|&v| {
                let f = v.file()?;
                let obj = f.huge.as_ref()?.0.clone();
                let size = obj.pool.size;
                let first = (v.pgoff() << PAGE_SHIFT) / size;
                Some(HugeRange { obj, first, end: first + v.len() / size })
            })
            .collect()
    }

    /// Gives back what unmapped hugetlb ranges held (module docs): for the owning mm, the reserved and the
    /// present pages of each range that no VMA of this mm maps any more; a shared object's only once no VMA
    /// of this mm maps it at all.
    pub(crate) fn hugetlb_release(&self, ranges: Vec<HugeRange>) {
        if ranges.is_empty() {
            return;
        }
        let me = self.locking().id();
        for r in ranges {
            if r.obj.owner_mm != me {
                continue;
            }
            let mapped: Vec<(u64, u64)> = self
                .areas()
                .filter_map(|v| {
                    let f = v.file()?;
                    let HugeRef(o) = f.huge.as_ref()?;
                    Arc::ptr_eq(o, &r.obj).then(|| {
                        let first = (v.pgoff() << PAGE_SHIFT) / o.pool.size;
                        (first, first + v.len() / o.pool.size)
                    })
                })
                .collect();
            let mut pages = r.obj.pages.lock();
            let mut given = 0;
            if r.obj.shared {
                if mapped.is_empty() {
                    given = (pages.reserved.len() + pages.faulted.len()) as u64;
                    pages.reserved.clear();
                    pages.faulted.clear();
                }
            } else {
                for i in r.first..r.end {
                    if mapped.iter().any(|&(a, b)| a <= i && i < b) {
                        continue;
                    }
                    given += u64::from(pages.reserved.remove(&i)) + u64::from(pages.faulted.remove(&i));
                }
            }
            drop(pages);
            r.obj.pool.give(given);
        }
    }
}
