//! mmap (x86 `sys_mmap` → `ksys_mmap_pgoff` → `do_mmap` → `mmap_region` → `__mmap_region`).
//!
//! Order of checks, as in Linux 6.18 (the first failing one decides the errno):
//! 0. offset not page-aligned: EINVAL; a file descriptor that is not open: EBADF; `MAP_HUGETLB` on a file:
//!    EINVAL; anonymous `MAP_HUGETLB`: the `MAP_HUGE_*` size must name a pool (EINVAL), the length is rounded
//!    up to it and a hugetlbfs object made ([`super::hugetlb`]);
//! 1. length 0: EINVAL; a hint below the effective `mmap_min_addr` ([`super::MmConfig::min_addr`]) is raised to it; length rounding to 0 (overflow):
//!    ENOMEM; file offset + length overflow: EOVERFLOW; `map_count > max_map_count`: ENOMEM;
//! 2. `prot == PROT_EXEC` exactly takes the execute-only protection key ([`super::pkeys`]; allocated now,
//!    even if the call fails later); the VMA flags come from `PROT_*` (other PROT bits, `PROT_GROWSDOWN`
//!    and `PROT_GROWSUP` included, are ignored) and `calc_vm_flag_bits`: `MAP_GROWSDOWN`, `MAP_LOCKED`,
//!    `MAP_SYNC` (`VM_SYNC`, whatever the mapping) and `MAP_STACK` (`VM_NOHUGEPAGE` with THP);
//! 3. `get_unmapped_area` (ENOMEM / EINVAL / EPERM, or an address in the error range handed back as that
//!    error, see [`super::unmapped`]);
//! 4. `MAP_FIXED_NOREPLACE` over an existing VMA: EEXIST; `MAP_LOCKED` without the right to mlock: EPERM; a
//!    locked mapping (`MAP_LOCKED`, or `VM_LOCKED` from `mm->def_flags` after `mlockall(MCL_FUTURE)`) that
//!    would take `locked_vm` past `RLIMIT_MEMLOCK` without CAP_IPC_LOCK: EAGAIN (`mlock_future_ok`, which
//!    counts the pages a `MAP_FIXED` mapping replaces too);
//! 5. file: offset beyond the maximum file size: EOVERFLOW; by type: `MAP_SHARED` drops flags outside
//!    `LEGACY_MAP_MASK`, `MAP_SHARED_VALIDATE` refuses them (EOPNOTSUPP; `MAP_SYNC` is allowed where the file
//!    system supports it: regular files, as ext4), shared writable needs a file opened for writing (EACCES),
//!    any mapping needs one opened for reading (EACCES), exec on a noexec mount is EPERM, growsdown is EINVAL,
//!    any other type (`MAP_DROPPABLE` included) EINVAL; anonymous: shared (not growsdown, else EINVAL),
//!    droppable (`MAP_DROPPABLE`: not with `MAP_LOCKED`, `MAP_HUGETLB` or growsdown, EINVAL; `VM_DROPPABLE
//!    | VM_NORESERVE | VM_WIPEONFORK | VM_DONTDUMP`, then as private) or private (pgoff = address >> 12),
//!    anything else EINVAL;
//! 6. `mmap_region`: VMAs under the range are gathered (split at both ends; a sealed one is EPERM, keeping a
//!    split already made), a private writable mapping without `MAP_NORESERVE` is accounted (`VM_ACCOUNT`;
//!    ENOMEM beyond the overcommit limit; never hugetlb), the old VMAs are removed, and then the file's mmap
//!    hook runs, whose failure leaves the range unmapped (checked on the live kernel): ext4's refusal of
//!    `VM_SYNC` on a file that is not DAX (EOPNOTSUPP), hugetlbfs's page offset and reservation checks
//!    (EINVAL, ENOMEM). Then the range merges with its neighbours (`vma_merge_new_range`) or becomes a new
//!    VMA (shared anonymous memory gets its shmem object now, so it never merges when created); a locked
//!    hugetlb VMA loses `VM_LOCKED`. A locked result is charged to `locked_vm` (`__mmap_complete`; a VMA that
//!    cannot be locked loses `VM_LOCKED` instead).
//! 7. `MAP_POPULATE` or a locked mapping faults the range in afterwards, once the write lock is dropped, under
//!    the read lock, errors ignored (`vm_mmap_pgoff` → `mm_populate` → `__mm_populate`: write faults for
//!    private writable VMAs, which give them an anon_vma and private pages; read faults for the others; nothing
//!    for `VM_LOCKONFAULT`; hugetlb pages are taken from the pool).

use std::sync::Arc;

use super::VmFlags;
use super::merge::VmaMergeStruct;
use super::pkeys::calc_vm_prot_bits;
use super::tree::{NewVma, VmaExt};
use super::{
    AnonState, Errno, FileKind, MapFlags, Mm, MmWrite, PAGE_MASK, Prot, VmFile, config::PAGE_SHIFT,
    page_align,
};

/// `MAX_LFS_FILESIZE` on 64-bit.
const MAX_LFS_FILESIZE: u64 = i64::MAX as u64;

impl Mm {
    /// `mmap(addr, len, prot, flags, fd, off)`: `file` is the mapped file (`None` with `MAP_ANONYMOUS`).
    /// Returns the address.
    pub fn mmap(
        &self,
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
        let mut len = len;
        let file = if !flags.contains(MapFlags::ANONYMOUS) {
            let f = file.ok_or(Errno::EBADF)?;
            match f.huge_page_size() {
                Some(size) => len = len.wrapping_add(size - 1) & !(size - 1),
                None if flags.contains(MapFlags::HUGETLB) => return Err(Errno::EINVAL),
                None => {}
            }
            // The file's pages live in this address space's memory (created now if it is the first mapping).
            f.cache_in(&self.mem)?;
            Some(f.clone())
        } else if flags.contains(MapFlags::HUGETLB) {
            let (pool, dev_minor) = self.hugetlb_pool(flags.huge_size_log()).ok_or(Errno::EINVAL)?;
            // ALIGN with C's wrap-around: a length within a huge page of 2^64 becomes 0 (EINVAL below).
            len = len.wrapping_add(pool.size - 1) & !(pool.size - 1);
            let shared =
                flags.map_type() == MapFlags::SHARED || flags.map_type() == MapFlags::SHARED_VALIDATE;
            Some(self.hugetlb_file_setup(pool, dev_minor, len, shared))
        } else {
            None
        };
        let (a, populate) =
            self.locked(|mm| mm.do_mmap(file.as_ref(), addr, len, prot, flags, off >> PAGE_SHIFT))?;
        if populate {
            self.mm_populate(a, page_align(len), true).ok();
        }
        Ok(a)
    }

    /// `shmem_zero_setup`: a new shmem object of `len` bytes, shown as `/dev/zero (deleted)` on 00:01.
    fn shmem_zero_file(&self, len: u64) -> Arc<VmFile> {
        VmFile::shmem_zero(self.next_ino(), len)
    }

    /// The next inode number of a shmem or hugetlbfs object (`get_next_ino`).
    pub(crate) fn next_ino(&self) -> u64 {
        // Relaxed: only uniqueness matters.
        self.next_shmem_ino.fetch_add(1, vmspace_rcu::sync::Ordering::Relaxed)
    }
}

impl MmWrite<'_> {
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
            if addr != 0 && addr < self.cfg.min_addr() {
                addr = self.cfg.min_addr();
            }
        }
        let len = page_align(len);
        if len == 0 {
            return Err(Errno::ENOMEM);
        }
        if pgoff.checked_add(len >> PAGE_SHIFT).is_none() {
            return Err(Errno::EOVERFLOW);
        }
        if self.st.map_count > self.cfg.max_map_count {
            return Err(Errno::ENOMEM);
        }
        // The execute-only key is allocated here, before anything below can still fail.
        let mut pkey = 0;
        if prot == Prot::EXEC {
            pkey = self.execute_only_pkey().max(0);
        }
        let mut vm_flags = calc_vm_prot_bits(prot, pkey)
            | self.calc_vm_flag_bits(flags)
            | self.st.def_flags
            | VmFlags::MAYREAD
            | VmFlags::MAYWRITE
            | VmFlags::MAYEXEC;
        let addr = self.get_unmapped_area(file.map(|f| &**f), addr, len, pgoff, flags)?;
        if flags.contains(MapFlags::FIXED_NOREPLACE) && self.find_intersection(addr, addr + len).is_some() {
            return Err(Errno::EEXIST);
        }
        if flags.contains(MapFlags::LOCKED) && !self.can_do_mlock() {
            return Err(Errno::EPERM);
        }
        if !self.mlock_future_ok(vm_flags, len) {
            return Err(Errno::EAGAIN);
        }
        if let Some(f) = file {
            // file_mmap_ok.
            if len > MAX_LFS_FILESIZE || pgoff > (MAX_LFS_FILESIZE - len) >> PAGE_SHIFT {
                return Err(Errno::EOVERFLOW);
            }
            // ext4 (what a regular file models) has FOP_MMAP_SYNC; shmem and hugetlbfs do not.
            let mut flags_mask = MapFlags::LEGACY;
            if f.kind == FileKind::Regular {
                flags_mask |= MapFlags::SYNC;
            }
            let mut ty = flags.map_type();
            if ty == MapFlags::SHARED {
                flags &= MapFlags::LEGACY;
                ty = MapFlags::SHARED_VALIDATE;
            }
            match ty {
                ty if ty == MapFlags::SHARED_VALIDATE || ty == MapFlags::PRIVATE => {
                    if ty == MapFlags::SHARED_VALIDATE {
                        if !flags_mask.contains(flags) {
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
                ty if ty == MapFlags::DROPPABLE => {
                    // A locked, stack or hugetlb area makes no sense droppable; droppable pages are neither
                    // reserved nor copied on fork nor dumped.
                    if flags.intersects(MapFlags::LOCKED | MapFlags::HUGETLB)
                        || vm_flags.intersects(VmFlags::GROWSDOWN)
                    {
                        return Err(Errno::EINVAL);
                    }
                    vm_flags |=
                        VmFlags::DROPPABLE | VmFlags::NORESERVE | VmFlags::WIPEONFORK | VmFlags::DONTDUMP;
                    pgoff = addr >> PAGE_SHIFT;
                }
                ty if ty == MapFlags::PRIVATE => pgoff = addr >> PAGE_SHIFT,
                _ => return Err(Errno::EINVAL),
            }
        }
        if flags.contains(MapFlags::NORESERVE) {
            // Honoured when overcommit is allowed; hugetlb applies strict accounting unless asked.
            if self.cfg.overcommit != super::Overcommit::Never
                || file.is_some_and(|f| f.kind == FileKind::Hugetlb)
            {
                vm_flags |= VmFlags::NORESERVE;
            }
        }
        let a = self.mmap_region(file, addr, len, vm_flags, pgoff, flags.contains(MapFlags::FIXED))?;
        let populate = vm_flags.intersects(VmFlags::LOCKED)
            || flags.intersection(MapFlags::POPULATE | MapFlags::NONBLOCK) == MapFlags::POPULATE;
        Ok((a, populate))
    }

    /// `calc_vm_flag_bits`: the VMA flags the `MAP_*` flags ask for.
    fn calc_vm_flag_bits(&self, flags: MapFlags) -> VmFlags {
        let mut f = VmFlags::NONE;
        if flags.contains(MapFlags::GROWSDOWN) {
            f |= VmFlags::GROWSDOWN;
        }
        if flags.contains(MapFlags::LOCKED) {
            f |= VmFlags::LOCKED;
        }
        if flags.contains(MapFlags::SYNC) {
            f |= VmFlags::SYNC;
        }
        if flags.contains(MapFlags::STACK) && self.cfg.transparent_hugepage {
            f |= VmFlags::NOHUGEPAGE;
        }
        f
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
        // accountable_mapping (hugetlb is accounted by its reservations instead).
        let hugetlb = file.is_some_and(|f| f.kind == FileKind::Hugetlb);
        if !hugetlb
            && vm_flags.intersection(VmFlags::NORESERVE | VmFlags::SHARED | VmFlags::WRITE) == VmFlags::WRITE
        {
            let charged = (len >> PAGE_SHIFT) - nr_accounted;
            if charged > 0 {
                self.enough_memory(charged)?;
            }
            vm_flags |= VmFlags::ACCOUNT;
        }
        // The old VMAs lose their pages but stay in the tree, write-locked, until the new mapping's store takes
        // their range over (`MmWrite::clear_for_replace`): no reader sees a gap there meanwhile.
        let replaced = match inside {
            Some(inside) => self.clear_for_replace(inside, end).1,
            None => Vec::new(),
        };
        // The file's mmap hook, after the old range's pages are gone (`__mmap_setup` cleared them): a refusal
        // leaves a hole.
        if let Err(e) = self.mmap_hook(file, pgoff, len, &mut vm_flags) {
            self.abort_replace(replaced);
            return Err(e);
        }
        // `__mmap_complete`: special and hugetlb mappings are never locked.
        if vm_flags.intersects(VmFlags::SPECIAL | VmFlags::HUGETLB) {
            vm_flags &= !VmFlags::LOCKED_MASK;
        }
        // Shared anonymous memory has no file yet when the merge is tried.
        let merge_file = file;
        let none = AnonState::default();
        let mut vmg = VmaMergeStruct::new_range(addr, end, vm_flags, pgoff, merge_file, &none, None);
        if let Some(v) = self.vma_merge_new_range(&mut vmg) {
            self.free_replaced(replaced);
            self.mmap_lock_complete(v, len);
            return Ok(addr);
        }
        let file = match file {
            Some(f) => Some(f.clone()),
            None if vm_flags.intersects(VmFlags::SHARED) => Some(self.shmem_zero_file(len)),
            None => None,
        };
        let v = self.insert_new(NewVma {
            start: addr,
            end,
            flags: vm_flags,
            pgoff,
            file,
            anon: AnonState::EMPTY,
            name: None,
        });
        self.free_replaced(replaced);
        self.mmap_lock_complete(v, len);
        Ok(addr)
    }

    /// The file's mmap hook (`call_mmap` / `mmap_prepare`): ext4/xfs refuse `VM_SYNC` without DAX
    /// (`daxdev_mapping_supported`); hugetlbfs reserves its pages and marks the VMA.
    fn mmap_hook(
        &mut self,
        file: Option<&Arc<VmFile>>,
        pgoff: u64,
        len: u64,
        vm_flags: &mut VmFlags,
    ) -> Result<(), Errno> {
        let Some(f) = file else { return Ok(()) };
        if f.kind == FileKind::Regular && vm_flags.intersects(VmFlags::SYNC) && !f.dax {
            return Err(Errno::EOPNOTSUPP);
        }
        if f.kind == FileKind::Hugetlb {
            self.hugetlbfs_file_mmap(f, pgoff, len, *vm_flags)?;
            *vm_flags |= VmFlags::HUGETLB | VmFlags::DONTEXPAND;
        }
        Ok(())
    }

    /// `__mmap_complete`'s mlock part: a locked VMA is charged `len` to `locked_vm`, or loses its lock bits
    /// when it is of a kind that cannot be locked (`vma_supports_mlock`).
    fn mmap_lock_complete(&mut self, v: super::tree::V, len: u64) {
        if !v.fl().intersects(VmFlags::LOCKED) {
            return;
        }
        if Mm::vma_supports_mlock(v) {
            self.st.locked_vm += len >> PAGE_SHIFT;
        } else {
            self.set_flags(v, v.fl().difference(VmFlags::LOCKED_MASK));
        }
    }
}
