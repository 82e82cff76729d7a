//! mremap (`mm/mremap.c` of 6.18: `do_mremap`, `check_mremap_params`, `check_prep_vma`, `remap_move`,
//! `mremap_at`, `mremap_to`, `move_vma`).
//!
//! * Parameters: unknown flags, an unaligned address, a zero or oversize new length: EINVAL. With a new
//!   address (`MREMAP_FIXED` or `MREMAP_DONTUNMAP`, which makes the address a hint, checked like a fixed
//!   one: `vrm_implies_new_addr`; without either it is ignored): it must fit below `TASK_SIZE` and be aligned
//!   (EINVAL),
//!   `MREMAP_MAYMOVE` is required (EINVAL), DONTUNMAP may not resize (EINVAL), old and new ranges may not
//!   overlap (EINVAL), and the map count must leave room for the worst case (ENOMEM).
//! * `MREMAP_FIXED` with equal lengths moves every VMA in the range, keeping the gaps between them
//!   (`remap_move`); the range must begin inside a VMA (EFAULT).
//! * Otherwise the VMA containing the address is the source (EFAULT if none); a sealed source is EPERM
//!   whatever the call would do (`check_prep_vma`); a hugetlb source has its lengths rounded up to huge pages
//!   and may neither grow nor start (or move to) an address that is not huge-page aligned (EINVAL). A private
//!   mapping may not be duplicated with a zero old length (EINVAL); outside a shrink the old range must lie
//!   inside the VMA (EFAULT).
//! * Shrink in place: unmap the tail. Same size: nothing. Grow: in place when the old range ends at the
//!   VMA's end and the space after it is free (`vma_merge_extend`: the VMA grows and may merge with the next
//!   one), else move when allowed (ENOMEM without `MREMAP_MAYMOVE`).
//! * A move (`move_vma`): the source's entries move to the destination (`move_page_tables`: whole PTE tables
//!   where both sides are 2 MiB-aligned, entry by entry elsewhere; guard markers go with them), the
//!   destination (unmapped first with `MREMAP_FIXED`) gets a copy of the VMA (`copy_vma`: merged with its new
//!   neighbours when they are compatible; an anonymous VMA that was never faulted takes the page offset of its
//!   new address so that it can merge there), then the source range is unmapped, unless DONTUNMAP, which leaves
//!   it mapped, empty, but drops the locked bits (and the anon_vma when the whole VMA moved); it keeps
//!   `VM_ACCOUNT` (checked against the live kernel: the source still merges with accounted neighbours). The
//!   engine moves the entries *before* it copies the VMA (Linux after): the table allocations of the move are
//!   the call's last failure point, and a failed move moves everything back (leaving, at most, empty tables at
//!   the destination, as Linux does), so an allocation failure changes no VMA; no fault can run in either range
//!   meanwhile (the source is write-locked, the destination has no VMA), and a file's truncation waits on its
//!   rmap lock, held across the move and the registration change.
//! * Locked memory (`vrm_stat_account`): growing a `VM_LOCKED` VMA must pass `mlock_future_ok` (EAGAIN, after
//!   the `VM_DONTEXPAND | VM_PFNMAP` check); growth in place charges the delta to `locked_vm`, a move the new
//!   length (the unmap of the source uncharges the old one; DONTUNMAP uncharges nothing, as Linux); a grown
//!   locked mapping is then populated (`mm_populate` of the new part, errors ignored, once the write lock is
//!   dropped).

use super::VmFlags;
use super::merge::VmaMergeStruct;
use super::tree::{NewVma, V, VmaExt};
use super::{
    AnonState, Errno, MapFlags, Mm, MmWrite, MremapFlags, PAGE_MASK, TASK_SIZE, config::PAGE_SHIFT,
    page_align,
};
use vmspace_pgtable::MoveFlags;

/// The state of one remap (`struct vma_remap_struct`).
#[derive(Debug, Clone, Copy)]
struct Vrm {
    addr: u64,
    old_len: u64,
    new_len: u64,
    flags: MremapFlags,
    new_addr: u64,
    /// The source VMA (`None` until found).
    vma: Option<V>,
    delta: u64,
}

impl Vrm {
    fn vma(&self) -> V {
        self.vma.expect("source VMA set")
    }
    fn implies_new_addr(&self) -> bool {
        self.flags.intersects(MremapFlags::FIXED | MremapFlags::DONTUNMAP)
    }
    fn is_shrink(&self) -> bool {
        self.old_len > self.new_len
    }
    fn is_expand(&self) -> bool {
        self.new_len > self.old_len
    }
}

/// `align_hugetlb`: the lengths rounded up to the huge page size (wrapping as C's `ALIGN`), and both addresses
/// aligned to it; no growth (the reservation cannot be split).
fn align_hugetlb(v: &mut Vrm, size: u64) -> bool {
    v.old_len = v.old_len.wrapping_add(size - 1) & !(size - 1);
    v.new_len = v.new_len.wrapping_add(size - 1) & !(size - 1);
    v.addr & (size - 1) == 0 && v.new_addr & (size - 1) == 0 && v.new_len <= v.old_len
}

impl Mm {
    /// `mremap(addr, old_len, new_len, flags, new_addr)`: returns the new address.
    pub fn mremap(
        &self,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        let (a, populate) = self.locked(|mm| mm.do_mremap(addr, old_len, new_len, flags, new_addr))?;
        // `vrm->mlocked`: a grown locked mapping is populated after mmap_write_unlock.
        if let Some((start, len)) = populate {
            self.mm_populate(start, len, true).ok();
        }
        Ok(a)
    }
}

impl MmWrite<'_> {
    /// `do_mremap` under the write lock: the new address, and the range to populate afterwards.
    fn do_mremap(
        &mut self,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<(u64, Option<(u64, u64)>), Errno> {
        let mut v = Vrm {
            addr,
            old_len: page_align(old_len),
            new_len: page_align(new_len),
            flags,
            new_addr,
            vma: None,
            delta: 0,
        };
        // check_mremap_params.
        if !(MremapFlags::FIXED | MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP).contains(flags) {
            return Err(Errno::EINVAL);
        }
        if addr & !PAGE_MASK != 0 {
            return Err(Errno::EINVAL);
        }
        if v.new_len == 0 || v.new_len > TASK_SIZE {
            return Err(Errno::EINVAL);
        }
        if v.implies_new_addr() {
            if v.new_addr > TASK_SIZE - v.new_len || v.new_addr & !PAGE_MASK != 0 {
                return Err(Errno::EINVAL);
            }
            if !flags.contains(MremapFlags::MAYMOVE) {
                return Err(Errno::EINVAL);
            }
            if flags.contains(MremapFlags::DONTUNMAP) && v.old_len != v.new_len {
                return Err(Errno::EINVAL);
            }
            let (so, eo) = (v.addr, v.addr.wrapping_add(v.old_len));
            let (sn, en) = (v.new_addr, v.new_addr + v.new_len);
            if eo > sn && en > so {
                return Err(Errno::EINVAL);
            }
            if self.st.map_count + 2 >= self.cfg.max_map_count.saturating_sub(3) {
                return Err(Errno::ENOMEM);
            }
        }
        // Worst case: splits at both ends of both ranges, one new VMA, tree stores.
        self.reserve(6)?;
        if flags.contains(MremapFlags::FIXED) && v.old_len == v.new_len {
            return self.remap_move(v).map(|a| (a, None));
        }
        let Some(vma) = self.lookup(addr) else { return Err(Errno::EFAULT) };
        v.vma = Some(vma);
        self.check_prep_vma(&mut v)?;
        let mlocked = vma.fl().intersects(VmFlags::LOCKED);
        let new_addr = if v.implies_new_addr() { self.mremap_to(v) } else { self.mremap_at(v) }?;
        // `vrm->mlocked`: a grown locked mapping is populated (by the caller, after the lock).
        let populate =
            (mlocked && v.new_len > v.old_len).then(|| (new_addr + v.old_len, v.new_len - v.old_len));
        Ok((new_addr, populate))
    }

    /// `check_prep_vma` for `v.vma`.
    fn check_prep_vma(&self, v: &mut Vrm) -> Result<(), Errno> {
        let a = v.vma();
        // If mseal()ed, mremap() is prohibited: any source VMA, whatever the lengths.
        if super::mseal::vma_is_sealed(a) {
            return Err(Errno::EPERM);
        }
        if let Some(size) = a.file().and_then(|f| f.huge_page_size())
            && !align_hugetlb(v, size)
        {
            return Err(Errno::EINVAL);
        }
        v.delta = v.old_len.abs_diff(v.new_len);
        if !v.implies_new_addr() {
            v.new_addr = v.addr;
        }
        if !(v.is_expand() || v.implies_new_addr()) {
            return Ok(());
        }
        if v.old_len == 0 && !a.fl().intersects(VmFlags::SHARED | VmFlags::MAYSHARE) {
            return Err(Errno::EINVAL);
        }
        if v.flags.contains(MremapFlags::DONTUNMAP)
            && a.fl().intersects(VmFlags::DONTEXPAND | VmFlags::PFNMAP)
        {
            return Err(Errno::EINVAL);
        }
        let old_len = if v.is_shrink() { v.new_len } else { v.old_len };
        if old_len > a.end() - v.addr {
            return Err(Errno::EFAULT);
        }
        if v.new_len == old_len {
            return Ok(());
        }
        let pgoff = a.pgoff_at(v.addr);
        if pgoff.checked_add(v.new_len >> PAGE_SHIFT).is_none() {
            return Err(Errno::EINVAL);
        }
        if a.fl().intersects(VmFlags::DONTEXPAND | VmFlags::PFNMAP) {
            return Err(Errno::EFAULT);
        }
        if !self.mlock_future_ok(a.fl(), v.delta) {
            return Err(Errno::EAGAIN);
        }
        Ok(())
    }

    /// `remap_move`: `MREMAP_FIXED` with equal lengths, over every VMA of the range.
    fn remap_move(&mut self, v: Vrm) -> Result<u64, Errno> {
        let start = v.addr;
        let end = v.addr.wrapping_add(v.old_len);
        let mut res = Err(Errno::EFAULT);
        let mut seen = false;
        let mut last_end = 0;
        let mut target = v.new_addr;
        let mut pos = start;
        while let Some(a) = self.find_intersection(pos, end) {
            let (vs, ve) = (a.start(), a.end());
            let addr = vs.max(start);
            let len = end.min(ve) - addr;
            if !seen && start < vs {
                return Err(Errno::EFAULT);
            }
            let offset = if seen { vs - last_end } else { 0 };
            last_end = ve;
            let mut one = Vrm {
                addr,
                old_len: len,
                new_len: len,
                flags: v.flags,
                new_addr: target + offset,
                vma: Some(self.lookup(addr).expect("VMA present")),
                delta: 0,
            };
            self.check_prep_vma(&mut one)?;
            let r = self.mremap_to(one)?;
            if !seen {
                res = Ok(r);
            }
            seen = true;
            target = r + len;
            pos = ve.min(end);
            if pos >= end {
                break;
            }
        }
        res
    }

    /// `mremap_at`: no new address.
    fn mremap_at(&mut self, v: Vrm) -> Result<u64, Errno> {
        if v.delta == 0 {
            return Ok(v.addr);
        }
        if v.is_shrink() {
            // `shrink_vma(vrm, drop_lock = true)`: the unmap is the call's last change, its page tables are
            // cleared after the downgrade (`vrm->mmap_locked = false`; module `munmap`).
            self.do_munmap(v.addr + v.new_len, v.delta, false, true)?;
            return Ok(v.addr);
        }
        // expand_vma.
        let a = v.vma();
        if a.end() - v.addr == v.old_len && self.vma_expandable(a, v.delta) {
            self.charge_remap(&v)?;
            self.merge_extend(a, v.delta);
            self.remap_stat_account(a.fl(), v.delta);
            return Ok(v.addr);
        }
        if !v.flags.contains(MremapFlags::MAYMOVE) {
            return Err(Errno::ENOMEM);
        }
        let mut v = v;
        self.set_new_addr(&mut v)?;
        self.move_vma(v)
    }

    /// `mremap_to`: a new address is given (FIXED or DONTUNMAP).
    fn mremap_to(&mut self, mut v: Vrm) -> Result<u64, Errno> {
        if v.flags.contains(MremapFlags::FIXED) {
            self.do_munmap(v.new_addr, v.new_len, false, false)?;
            match self.lookup(v.addr) {
                Some(a) => v.vma = Some(a),
                None => return Err(Errno::EFAULT),
            }
        }
        if v.is_shrink() {
            // `shrink_vma`: the unmap may have split the VMA (the part kept is then a new VMA), so it is
            // looked up again.
            self.do_munmap(v.addr + v.new_len, v.delta, false, false)?;
            v.old_len = v.new_len;
            match self.lookup(v.addr) {
                Some(a) => v.vma = Some(a),
                None => return Err(Errno::EFAULT),
            }
        }
        self.set_new_addr(&mut v)?;
        self.move_vma(v)
    }

    /// `vrm_set_new_addr`: `get_unmapped_area` for the destination.
    fn set_new_addr(&mut self, v: &mut Vrm) -> Result<(), Errno> {
        let a = v.vma();
        let mut map_flags = MapFlags::empty();
        if v.flags.contains(MremapFlags::FIXED) {
            map_flags |= MapFlags::FIXED;
        }
        if a.fl().intersects(VmFlags::MAYSHARE) {
            map_flags |= MapFlags::SHARED;
        }
        let hint = if v.implies_new_addr() { v.new_addr } else { 0 };
        let file = a.file();
        // The file page of the remapped range's start (the page offset into the VMA added to its pgoff).
        let pgoff = a.pgoff().wrapping_add((v.addr - a.start()) >> PAGE_SHIFT);
        v.new_addr = self.get_unmapped_area(file.as_deref(), hint, v.new_len, pgoff, map_flags)?;
        Ok(())
    }

    /// `vma_expandable`: `[vma.end, vma.end + delta)` is free and below `TASK_SIZE`.
    fn vma_expandable(&self, a: V, delta: u64) -> bool {
        let Some(end) = a.end().checked_add(delta) else { return false };
        if self.find_intersection(a.end(), end).is_some() {
            return false;
        }
        end - a.start() <= TASK_SIZE && a.start() <= TASK_SIZE - (end - a.start())
    }

    /// `vrm_calc_charge`: accounted VMAs charge the growth (or the whole new length with DONTUNMAP).
    fn charge_remap(&self, v: &Vrm) -> Result<(), Errno> {
        if !v.vma().fl().intersects(VmFlags::ACCOUNT) {
            return Ok(());
        }
        let charged =
            if v.flags.contains(MremapFlags::DONTUNMAP) { v.new_len } else { v.delta } >> PAGE_SHIFT;
        self.enough_memory(charged)
    }

    /// `vma_merge_extend`: `a` grows by `delta` (a new range after it, merged left and possibly right).
    fn merge_extend(&mut self, a: V, delta: u64) {
        let (start, end) = (a.end(), a.end() + delta);
        let anon = a.anon().clone();
        let file = a.file();
        let name = a.anon_name();
        let mut vmg = VmaMergeStruct::new_range(
            start,
            end,
            a.fl(),
            a.pgoff_at(start),
            file.as_ref(),
            &anon,
            name.as_ref(),
        );
        let merged = self.vma_merge_new_range(&mut vmg);
        debug_assert!(merged.is_some());
    }

    /// `vrm_stat_account`'s mlock part: `bytes` more of a locked VMA are charged to `locked_vm`.
    fn remap_stat_account(&mut self, flags: VmFlags, bytes: u64) {
        if flags.intersects(VmFlags::LOCKED) {
            self.st.locked_vm += bytes >> PAGE_SHIFT;
        }
    }

    /// `move_vma`.
    fn move_vma(&mut self, v: Vrm) -> Result<u64, Errno> {
        if self.st.map_count >= self.cfg.max_map_count.saturating_sub(3) {
            return Err(Errno::ENOMEM);
        }
        self.charge_remap(&v)?;
        let src = v.vma();
        // move_page_tables first (module docs): the source write-locked, the file's truncation held off.
        self.write_lock_vma(src);
        let src_file = src.file();
        let _rmap = src_file.as_ref().map(|f| f.rmap_lock());
        self.pt().move_page_tables(v.addr, v.new_addr, v.old_len, &MoveFlags::default())?;
        // copy_vma_and_data → copy_vma.
        let src_anon = src.anon().clone();
        let src_name = src.anon_name();
        let mut new_pgoff = src.pgoff_at(v.addr);
        if src.is_anonymous() && !src_anon.is_some() {
            new_pgoff = v.new_addr >> PAGE_SHIFT;
        }
        let src_flags = src.fl();
        let mut vmg = VmaMergeStruct::new_range(
            v.new_addr,
            v.new_addr + v.new_len,
            src_flags,
            new_pgoff,
            src_file.as_ref(),
            &src_anon,
            src_name.as_ref(),
        );
        vmg.copied_from_uncowed = src_anon.had_uncowed_parents();
        if self.vma_merge_new_range(&mut vmg).is_none() {
            let flags = src.fl();
            self.insert_new(NewVma {
                start: v.new_addr,
                end: v.new_addr + v.new_len,
                flags,
                pgoff: new_pgoff,
                file: src_file.clone(),
                anon: src_anon,
                name: src_name,
            });
        }
        self.remap_stat_account(src_flags, v.new_len);
        if v.flags.contains(MremapFlags::DONTUNMAP) {
            // dontunmap_complete: the source VMA (whatever now covers the old address) keeps its range.
            if let Some(s) = self.lookup(v.addr) {
                let whole = s.start() == v.addr && s.end() == v.addr + v.old_len;
                self.set_flags(s, s.fl() & !VmFlags::LOCKED_MASK);
                if whole {
                    self.set_anon(s, AnonState::EMPTY);
                }
            }
        } else {
            // unmap_source_vma: VM_ACCOUNT is kept on the parts of the source that remain.
            if v.old_len > 0 {
                let _ = self.do_munmap(v.addr, v.old_len, false, false);
            }
        }
        Ok(v.new_addr)
    }
}
