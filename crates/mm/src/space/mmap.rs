//! mmap (x86 `sys_mmap` → `ksys_mmap_pgoff` → `do_mmap` → `mmap_region` → `__mmap_region`).
//!
//! Order of checks, as in Linux 6.18 (the first failing one decides the errno):
//! 1. offset not page-aligned: EINVAL; length 0: EINVAL; a hint below `mmap_min_addr` is raised to it;
//!    length rounding to 0 (overflow): ENOMEM; file offset + length overflow: EOVERFLOW;
//!    `map_count > max_map_count`: ENOMEM;
//! 2. `get_unmapped_area` (ENOMEM / EINVAL / EPERM, see [`super::unmapped`]);
//! 3. `MAP_FIXED_NOREPLACE` over an existing VMA: EEXIST;
//! 4. file: offset beyond the maximum file size: EOVERFLOW; by type: `MAP_SHARED` drops non-legacy flags,
//!    `MAP_SHARED_VALIDATE` refuses them (EOPNOTSUPP), shared writable needs a file opened for writing
//!    (EACCES), any mapping needs one opened for reading (EACCES), exec on a noexec mount is EPERM,
//!    growsdown is EINVAL, an unknown type EINVAL; anonymous: shared (not growsdown, else EINVAL) or
//!    private (pgoff = address >> 12), anything else EINVAL;
//! 5. `mmap_region`: VMAs under the range are gathered (split at both ends), a private writable mapping
//!    without `MAP_NORESERVE` is accounted (`VM_ACCOUNT`; ENOMEM beyond the overcommit limit), then the range
//!    merges with its neighbours (`vma_merge_new_range`) or becomes a new VMA (shared anonymous memory gets
//!    its shmem object now, so it never merges when created).
//! 6. `MAP_POPULATE` faults the range in afterwards: writes for private writable VMAs, which gives them an
//!    anon_vma.

use std::sync::Arc;

use super::VmFlags;
use super::flags::prot_to_vm;
use super::merge::Cand;
use super::tree::{NewVma, VmaExt};
use super::{AnonState, Errno, MapFlags, Mm, PAGE_MASK, Prot, VmFile, config::PAGE_SHIFT, page_align};

/// `MAX_LFS_FILESIZE` on 64-bit.
const MAX_LFS_FILESIZE: u64 = i64::MAX as u64;

impl Mm {
    /// `mmap(addr, len, prot, flags, fd, off)`: `file` is the mapped file (`None` with `MAP_ANONYMOUS`).
    /// Returns the address.
    pub fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
        file: Option<&Arc<VmFile>>,
        off: u64,
    ) -> Result<u64, Errno> {
        if off & !PAGE_MASK != 0 {
            return Err(Errno::EINVAL);
        }
        // ksys_mmap_pgoff: MAP_ANONYMOUS ignores the fd.
        let file = if flags.contains(MapFlags::ANONYMOUS) { None } else { Some(file.ok_or(Errno::EBADF)?) };
        if flags.contains(MapFlags::HUGETLB) {
            return Err(Errno::EINVAL);
        }
        let (a, populate) = self.locked(|mm| mm.do_mmap(file, addr, len, prot, flags, off >> PAGE_SHIFT))?;
        if populate {
            self.locked(|mm| mm.populate(a, page_align(len)));
        }
        Ok(a)
    }

    /// `do_mmap`. Returns the address and whether to populate.
    fn do_mmap(
        &mut self,
        file: Option<&Arc<VmFile>>,
        mut addr: u64,
        len: u64,
        prot: Prot,
        mut flags: MapFlags,
        mut pgoff: u64,
    ) -> Result<(u64, bool), Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        if flags.contains(MapFlags::FIXED_NOREPLACE) {
            flags |= MapFlags::FIXED;
        }
        if !flags.contains(MapFlags::FIXED) {
            // round_hint_to_min.
            addr &= PAGE_MASK;
            if addr != 0 && addr < self.cfg.mmap_min_addr {
                addr = page_align(self.cfg.mmap_min_addr);
            }
        }
        let len = page_align(len);
        if len == 0 {
            return Err(Errno::ENOMEM);
        }
        if pgoff.checked_add(len >> PAGE_SHIFT).is_none() {
            return Err(Errno::EOVERFLOW);
        }
        if self.map_count() > self.cfg.max_map_count {
            return Err(Errno::ENOMEM);
        }
        let mut vm_flags = prot_to_vm(prot) | VmFlags::MAYREAD | VmFlags::MAYWRITE | VmFlags::MAYEXEC;
        if flags.contains(MapFlags::GROWSDOWN) {
            vm_flags |= VmFlags::GROWSDOWN;
        }
        if flags.contains(MapFlags::LOCKED) {
            vm_flags |= VmFlags::LOCKED;
        }
        let addr = self.get_unmapped_area(file.is_none(), addr, len, flags)?;
        if flags.contains(MapFlags::FIXED_NOREPLACE) && self.find_intersection(addr, addr + len).is_some() {
            return Err(Errno::EEXIST);
        }
        if let Some(f) = file {
            // file_mmap_ok.
            if len > MAX_LFS_FILESIZE || pgoff > (MAX_LFS_FILESIZE - len) >> PAGE_SHIFT {
                return Err(Errno::EOVERFLOW);
            }
            let mut ty = flags.map_type();
            if ty == MapFlags::SHARED {
                flags &= MapFlags::LEGACY;
                ty = MapFlags::SHARED_VALIDATE;
            }
            match ty {
                ty if ty == MapFlags::SHARED_VALIDATE || ty == MapFlags::PRIVATE => {
                    if ty == MapFlags::SHARED_VALIDATE {
                        if !MapFlags::LEGACY.contains(flags) {
                            return Err(Errno::EOPNOTSUPP);
                        }
                        if prot.contains(Prot::WRITE) && !f.writable {
                            return Err(Errno::EACCES);
                        }
                        vm_flags |= VmFlags::SHARED | VmFlags::MAYSHARE;
                        if !f.writable {
                            vm_flags &= !(VmFlags::MAYWRITE | VmFlags::SHARED);
                        }
                    }
                    if !f.readable {
                        return Err(Errno::EACCES);
                    }
                    if f.noexec {
                        if vm_flags.intersects(VmFlags::EXEC) {
                            return Err(Errno::EPERM);
                        }
                        vm_flags &= !VmFlags::MAYEXEC;
                    }
                    if vm_flags.intersects(VmFlags::GROWSDOWN) {
                        return Err(Errno::EINVAL);
                    }
                }
                _ => return Err(Errno::EINVAL),
            }
        } else {
            match flags.map_type() {
                ty if ty == MapFlags::SHARED => {
                    if vm_flags.intersects(VmFlags::GROWSDOWN) {
                        return Err(Errno::EINVAL);
                    }
                    pgoff = 0;
                    vm_flags |= VmFlags::SHARED | VmFlags::MAYSHARE;
                }
                ty if ty == MapFlags::PRIVATE => pgoff = addr >> PAGE_SHIFT,
                _ => return Err(Errno::EINVAL),
            }
        }
        if flags.contains(MapFlags::NORESERVE) && self.cfg.overcommit != super::Overcommit::Never {
            vm_flags |= VmFlags::NORESERVE;
        }
        let a = self.mmap_region(file, addr, len, vm_flags, pgoff, flags.contains(MapFlags::FIXED))?;
        let populate = vm_flags.intersects(VmFlags::LOCKED)
            || flags.intersection(MapFlags::POPULATE | MapFlags::NONBLOCK) == MapFlags::POPULATE;
        Ok((a, populate))
    }

    /// `__mmap_region`.
    fn mmap_region(
        &mut self,
        file: Option<&Arc<VmFile>>,
        addr: u64,
        len: u64,
        mut vm_flags: VmFlags,
        pgoff: u64,
        fixed: bool,
    ) -> Result<u64, Errno> {
        let end = addr + len;
        // Worst case: two splits, one new VMA, the tree store.
        self.reserve(4)?;
        // Only MAP_FIXED can land on existing VMAs: every other placement was a free range.
        let busy = if fixed { self.find_intersection(addr, end) } else { None };
        let inside = match busy {
            Some(first) => Some(self.gather_split_from(first, addr, end)?),
            None => None,
        };
        let nr_accounted = if busy.is_some() { self.accounted_in(addr, end).1 } else { 0 };
        // accountable_mapping.
        if vm_flags.intersection(VmFlags::NORESERVE | VmFlags::SHARED | VmFlags::WRITE) == VmFlags::WRITE {
            let charged = (len >> PAGE_SHIFT) - nr_accounted;
            if charged > 0 {
                self.enough_memory(charged)?;
            }
            vm_flags |= VmFlags::ACCOUNT;
        }
        if let Some(inside) = inside {
            self.remove_from(inside, end);
        }
        // Shared anonymous memory has no file yet when the merge is tried.
        let merge_file = file;
        let none = AnonState::default();
        let c = Cand {
            start: addr,
            end,
            flags: vm_flags,
            pgoff,
            file: merge_file,
            anon: &none,
            name: None,
            src_uncowed: false,
            copied_uncowed: false,
        };
        let m = self.plan_new_merge(&c, false);
        if !m.is_none() {
            self.apply_new_merge(m, addr, end, pgoff, &none);
            return Ok(addr);
        }
        let file = match file {
            Some(f) => Some(f.clone()),
            None if vm_flags.intersects(VmFlags::SHARED) => Some(self.shmem_zero_file(len)),
            None => None,
        };
        self.insert_new(NewVma {
            start: addr,
            end,
            flags: vm_flags,
            pgoff,
            file,
            anon: AnonState::EMPTY,
            name: None,
        });
        Ok(addr)
    }

    /// `shmem_zero_setup`: a new shmem object of `len` bytes, shown as `/dev/zero (deleted)` on 00:01.
    fn shmem_zero_file(&mut self, len: u64) -> Arc<VmFile> {
        let ino = self.next_shmem_ino;
        self.next_shmem_ino += 1;
        VmFile::shmem_zero(ino, len)
    }

    /// `__mm_populate` with errors ignored: each accessible VMA in the range is faulted from its first page;
    /// a private writable one with write faults (`FOLL_WRITE`), which give it an anon_vma (even beyond the
    /// end of a file: the anon_vma is prepared before the file page is looked up).
    pub(crate) fn populate(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let mut nstart = start;
        while nstart < end {
            let Some(v) = self.find_intersection(nstart, end) else { break };
            let fl = v.fl();
            if !fl.intersects(VmFlags::IO | VmFlags::PFNMAP)
                && !fl.intersects(VmFlags::LOCKONFAULT)
                && fl.intersection(VmFlags::WRITE | VmFlags::SHARED) == VmFlags::WRITE
            {
                self.anon_vma_prepare(v);
            }
            nstart = v.end().min(end);
        }
    }
}
