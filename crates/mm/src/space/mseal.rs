//! mseal (`mm/mseal.c: do_mseal`, `range_contains_unmapped`, `mseal_apply`) and the refusals of sealed VMAs.
//!
//! # The call
//!
//! `mseal(start, len, flags)`: flags must be 0, `start` page-aligned, and the length must not round up to 0
//! from a huge value nor make the end wrap (each EINVAL); an empty range succeeds. The whole range must be
//! mapped, checked before anything changes (ENOMEM for any hole, at either end or inside). Then each VMA of
//! the range that is not sealed yet gets `VM_SEALED` through `vma_modify` (the parts outside the range split
//! off; a sealed part merges with sealed neighbours of equal flags). A split refused at `max_map_count`
//! stops the walk with ENOMEM, keeping the VMAs sealed before it (Linux's own partial progress). Sealing
//! again is a no-op; there is no unseal. Fork copies `VM_SEALED` with the other flags.
//!
//! # What a seal refuses (EPERM), and when
//!
//! Measured on the live 6.18 kernel (`scripts/regress/` and the engine tests in `crates/mm/tests/mseal.rs`):
//!
//! - munmap, and the unmap of `MAP_FIXED` mmap, of `MREMAP_FIXED` destinations and of a shrinking `brk`:
//!   `vms_gather_munmap_vmas` checks each VMA of the range as its walk reaches it, after the first VMA was
//!   split at `start` (unless that first VMA is the sealed one: then before the split). So a range whose
//!   first VMA is not sealed but reaches into a sealed one keeps the split at `start` and fails (brk returns
//!   the old break). A `MAP_FIXED_NOREPLACE` over a sealed VMA is EEXIST first, and the mmap argument
//!   checks (EACCES, EINVAL of the mapping type, ...) come before the unmap.
//! - mprotect and pkey_mprotect: `mprotect_fixup` refuses a sealed VMA first thing, even when the flags would
//!   not change; the VMAs before it in the range keep their change.
//! - mremap of a sealed source, whatever the lengths (even a no-op): `check_prep_vma` right after the VMA
//!   lookup; in a multi-VMA `MREMAP_FIXED` move, the VMAs moved before the sealed one stay moved.
//! - madvise of a discarding advice (`MADV_DONTNEED`, `FREE`, `REMOVE`, `DONTFORK`, `WIPEONFORK`,
//!   `DONTNEED_LOCKED`, `GUARD_INSTALL`) on a sealed anonymous VMA the thread could not write
//!   (`can_madvise_modify`: file and shared mappings are allowed, so is memory with `VM_WRITE` whose key
//!   PKRU lets the thread write), in the walk as it reaches the VMA. The hook is [`Mm::can_madvise_modify`],
//!   called from the madvise walk.
//!
//! Sealed VMAs still take every other change: madvise and mlock flag changes (which may split them), page
//! faults, `MADV_DONTNEED` on writable memory.

use vmspace_abi::{Advice, VmFlags};

use super::tree::{V, VmaExt};
use super::{Errno, Mm, MmWrite, nonempty_page_range};

/// `vma_is_sealed`.
pub(crate) fn vma_is_sealed(v: V) -> bool {
    v.fl().intersects(VmFlags::SEALED)
}

/// `is_discard`: the advice that can drop data (or keep a child from seeing it).
fn is_discard(advice: Advice) -> bool {
    matches!(
        advice,
        Advice::FREE
            | Advice::DONTNEED
            | Advice::DONTNEED_LOCKED
            | Advice::REMOVE
            | Advice::DONTFORK
            | Advice::WIPEONFORK
            | Advice::GUARD_INSTALL
    )
}

impl Mm {
    /// `mseal(start, len, flags)`: seals the mapped range (module docs).
    pub fn mseal(&self, start: u64, len_in: u64, flags: u64) -> Result<(), Errno> {
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        let Some(end) = nonempty_page_range(start, len_in)? else { return Ok(()) };
        self.locked(|mm| {
            if mm.range_contains_unmapped(start, end) {
                return Err(Errno::ENOMEM);
            }
            mm.mseal_apply(start, end)
        })
    }

    /// `can_madvise_modify`: whether `advice` may run on `v` (module docs); the madvise walk answers EPERM
    /// for a VMA where it may not.
    pub(crate) fn can_madvise_modify(&self, v: V, advice: Advice) -> bool {
        if !vma_is_sealed(v) || !is_discard(advice) {
            return true;
        }
        if !v.is_anonymous() {
            return true;
        }
        v.fl().intersects(VmFlags::WRITE) && self.pkru_permits_write(v)
    }
}

impl MmWrite<'_> {
    /// Whether a VMA of `[start, end)` is sealed (`false` at once while no VMA of this mm ever was).
    pub(crate) fn any_sealed_in(&self, start: u64, end: u64) -> bool {
        self.st.sealed && self.vmas_between(start, end).any(vma_is_sealed)
    }

    /// `range_contains_unmapped`: some address of `[start, end)` has no VMA.
    fn range_contains_unmapped(&self, start: u64, end: u64) -> bool {
        let mut prev_end = start;
        for v in self.vmas_between(start, end) {
            if v.start() > prev_end {
                return true;
            }
            prev_end = v.end();
        }
        prev_end < end
    }

    /// `mseal_apply`: `VM_SEALED` on every VMA part of the (fully mapped) range.
    fn mseal_apply(&mut self, start: u64, end: u64) -> Result<(), Errno> {
        // Worst case per VMA: two splits and a tree store, reserved before anything changes.
        let n = self.vmas_between(start, end).count() as u64;
        self.reserve(3 * n)?;
        self.st.sealed = true;
        let mut pos = start;
        while pos < end {
            let v = self.lookup(pos).expect("the range is mapped");
            let (curr_start, curr_end) = (pos, v.end().min(end));
            if !vma_is_sealed(v) {
                let flags = v.fl() | VmFlags::SEALED;
                let name = v.anon_name();
                let t = self.vma_modify(v, curr_start, curr_end, flags, name.as_ref())?;
                self.set_flags(t, t.fl() | VmFlags::SEALED);
            }
            pos = curr_end;
        }
        Ok(())
    }
}
