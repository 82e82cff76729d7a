//! mprotect and pkey_mprotect (`do_mprotect_pkey` → `mprotect_fixup` → `vma_modify_flags`).
//!
//! Checks: both `PROT_GROWSDOWN` and `PROT_GROWSUP`: EINVAL; unaligned start: EINVAL; length 0: success;
//! a length or end that wraps: ENOMEM; unknown protection bits: EINVAL; a `pkey_mprotect` key that is not
//! allocated: EINVAL ([`super::pkeys`]). Then the first VMA must cover `start` (else ENOMEM). VMAs are
//! processed in order; each gets the new access bits and protection key (keeping its other flags; the key is
//! `arch_override_mprotect_pkey`'s), refused with EACCES when a bit is not allowed by the VM_MAY* bits and
//! with EPERM when the VMA is sealed (`mprotect_fixup`, before anything else, even a change to the same
//! flags). A hole or a refusal stops the walk **after** the VMAs before it were changed, as in Linux.
//!
//! `mprotect_fixup` adjusts accounting: making a private, unaccounted, non-NORESERVE VMA writable charges it
//! (`VM_ACCOUNT`); making an anonymous VMA without anon_vma read-only drops `VM_ACCOUNT`. The VMA part is
//! then merged with a neighbour or split off (`vma_modify_flags`; a hugetlb VMA splits only at huge page
//! boundaries, EINVAL otherwise), and its flags set (with the sticky flags a merge kept); then the page table
//! follows (`change_protection` over the range, with the VMA's new `vm_page_prot`: entries made writable where
//! a write fault would reuse the page anyway, `PROT_NONE` entries for an inaccessible VMA, [`super::pages`]).
//! A locked private VMA that becomes writable is populated with write faults under the write lock
//! (`populate_vma_page_range`, which gives it an anon_vma and breaks copy-on-write).

use super::VmFlags;
use super::pkeys::calc_vm_prot_bits;
use super::tree::{V, VmaExt};
use super::{Errno, Mm, MmWrite, PAGE_MASK, Prot, page_align};

impl Mm {
    /// `mprotect(start, len, prot)`.
    pub fn mprotect(&self, start: u64, len: u64, prot: Prot) -> Result<(), Errno> {
        self.locked(|mm| mm.do_mprotect_pkey(start, len, prot, -1))
    }
}

impl MmWrite<'_> {
    /// `do_mprotect_pkey`; `pkey` -1 for plain `mprotect`.
    pub(crate) fn do_mprotect_pkey(
        &mut self,
        start: u64,
        len: u64,
        prot: Prot,
        pkey: i32,
    ) -> Result<(), Errno> {
        let grows = prot & (Prot::GROWSDOWN | Prot::GROWSUP);
        let prot = prot - (Prot::GROWSDOWN | Prot::GROWSUP);
        if grows == Prot::GROWSDOWN | Prot::GROWSUP {
            return Err(Errno::EINVAL);
        }
        if start & !PAGE_MASK != 0 {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let len = page_align(len);
        let end = start.wrapping_add(len);
        if end <= start {
            return Err(Errno::ENOMEM);
        }
        if !(Prot::ACCESS | Prot::SEM).contains(prot) {
            return Err(Errno::EINVAL);
        }
        // If user space did not allocate the key, it may not use it (under the mmap lock, before the lookup).
        if pkey != -1 && !self.mm_pkey_is_allocated(pkey) {
            return Err(Errno::EINVAL);
        }
        let Some(first) = self.find_intersection(start, end) else { return Err(Errno::ENOMEM) };
        let (first_start, first_flags) = (first.start(), first.fl());
        let mut start = start;
        if grows.contains(Prot::GROWSDOWN) {
            if first_start >= end {
                return Err(Errno::ENOMEM);
            }
            start = first_start;
            if !first_flags.intersects(VmFlags::GROWSDOWN) {
                return Err(Errno::EINVAL);
            }
        } else {
            if first_start > start {
                return Err(Errno::ENOMEM);
            }
            if grows.contains(Prot::GROWSUP) {
                return Err(Errno::EINVAL);
            }
        }
        // Worst case per VMA: two splits and a tree store; reserved up front so that an allocation failure
        // changes nothing.
        let n = self.vmas_between(first_start, end).count() as u64;
        self.reserve(3 * n)?;
        let mut nstart = start;
        let mut tmp = first_start;
        let mut cur = Some(first);
        while let Some(v) = cur {
            if v.start() != tmp {
                return Err(Errno::ENOMEM);
            }
            // Each call passes all of r/w/x: what is not passed is cleared, and so is the key (`VM_FLAGS_CLEAR`).
            let new_vma_pkey = self.arch_override_mprotect_pkey(v, prot, pkey);
            let newflags = calc_vm_prot_bits(prot, new_vma_pkey)
                | (v.fl() & !(VmFlags::ACCESS_FLAGS | VmFlags::PKEY_MASK));
            // VM_MAY* shifted onto the access bits.
            if (newflags & !VmFlags::from_bits(newflags.bits() >> 4)).intersects(VmFlags::ACCESS_FLAGS) {
                return Err(Errno::EACCES);
            }
            let seg_end = v.end().min(end);
            let covered_end = self.mprotect_fixup(v, nstart, seg_end, newflags)?;
            tmp = covered_end;
            nstart = tmp;
            cur = if tmp < end { self.next_from(tmp).filter(|n| n.start() < end) } else { None };
        }
        if tmp < end {
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }

    /// `mprotect_fixup` for `[start, end)` inside `v`. Returns the end of the VMA that now covers `start`
    /// (the walk continues there).
    fn mprotect_fixup(&mut self, v: V, start: u64, end: u64, mut newflags: VmFlags) -> Result<u64, Errno> {
        let oldflags = v.fl();
        if super::mseal::vma_is_sealed(v) {
            return Err(Errno::EPERM);
        }
        if newflags == oldflags {
            return Ok(v.end());
        }
        if newflags.intersects(VmFlags::WRITE) {
            if !oldflags.intersects(
                VmFlags::ACCOUNT | VmFlags::WRITE | VmFlags::HUGETLB | VmFlags::SHARED | VmFlags::NORESERVE,
            ) {
                self.enough_memory((end - start) >> super::config::PAGE_SHIFT)?;
                newflags |= VmFlags::ACCOUNT;
            }
        } else if oldflags.intersects(VmFlags::ACCOUNT) && v.is_anonymous() && !v.anon().is_some() {
            newflags &= !VmFlags::ACCOUNT;
        }
        let name = v.anon_name();
        let t = self.vma_modify_flags(v, start, end, &mut newflags, name.as_ref())?;
        self.set_flags(t, newflags);
        self.change_protection(t, start, end);
        // A locked private VMA made writable is faulted in for writing (COW broken now), errors ignored.
        if oldflags.intersection(VmFlags::WRITE | VmFlags::SHARED | VmFlags::LOCKED) == VmFlags::LOCKED
            && newflags.intersects(VmFlags::WRITE)
        {
            let _ = self.populate_vma_page_range(t, start, end);
        }
        Ok(t.end())
    }
}
