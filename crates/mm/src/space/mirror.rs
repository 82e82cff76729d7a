//! Mirroring what a real process's faults changed: the two VMA changes Linux makes without a system call,
//! for a caller that keeps an engine address space in step with a live process (`vmspace shadow`) and sees
//! the process only between its calls.
//!
//! - **Stack growth.** A fault below a `VM_GROWSDOWN` VMA within its reach extends the VMA down
//!   (`mm/mmap.c: expand_downwards`). [`Mm::mirror_stack_growth`] makes the same extension to a start the
//!   caller read from the process's maps, with the kernel's checks (the guard gap to the VMA below, the stack
//!   rlimit, the mlock limit, overcommit): a growth the engine would have refused is an error, not a forced
//!   change.
//! - **anon_vma creation.** The first anonymous page a private VMA gets (a write fault, a copy-on-write of a
//!   file page) gives it an anon_vma (`mm/rmap.c: __anon_vma_prepare`), which later decides merges (two
//!   neighbours merge only if their anon_vmas are compatible). [`Mm::mirror_anon_vma`] prepares one for the
//!   VMA at an address the caller saw anonymous pages in, reusing a mergeable neighbour's exactly as a fault
//!   would, whatever the VMA's protection now is (the page may have come before an `mprotect`).
//!
//! Neither maps a page: the engine's page table stays as it was. Both run under the mmap write lock, as
//! one call, so no reader sees a half-mirrored state.

use super::tree::VmaExt;
use super::{Errno, Mm, PAGE_MASK, VmFlags};

impl Mm {
    /// The growsdown VMA just above `addr` extended down to `addr`'s page (module docs). `Ok(false)` if the
    /// VMA containing `addr` already covers it, `EFAULT` if there is no growsdown VMA above `addr`, the
    /// kernel's errno of `expand_downwards` if it would refuse, with nothing changed.
    pub fn mirror_stack_growth(&self, addr: u64) -> Result<bool, Errno> {
        let addr = addr & PAGE_MASK;
        self.locked(|w| {
            let v = w.find(addr).ok_or(Errno::EFAULT)?;
            if v.start() <= addr {
                return Ok(false);
            }
            if !v.fl().intersects(VmFlags::GROWSDOWN) {
                return Err(Errno::EFAULT);
            }
            w.write_lock_vma(v);
            w.expand_downwards(v, addr).map(|()| true)
        })
    }

    /// The VMA containing `addr` given an anon_vma if it has none (module docs): `Ok(true)` if one was
    /// prepared, `Ok(false)` if it had one, `EFAULT` if no VMA contains `addr`, `EINVAL` for a shared VMA
    /// (which never has one).
    pub fn mirror_anon_vma(&self, addr: u64) -> Result<bool, Errno> {
        self.locked(|w| {
            let v = w.lookup(addr).ok_or(Errno::EFAULT)?;
            if v.fl().intersects(VmFlags::MAYSHARE) {
                return Err(Errno::EINVAL);
            }
            if v.has_anon_vma() {
                return Ok(false);
            }
            w.anon_vma_prepare(v);
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{MapFlags, Mm, MmConfig, PAGE_SIZE, Prot};

    #[test]
    fn a_mirrored_stack_growth_keeps_the_kernels_checks() {
        let mm = Mm::new(MmConfig::default());
        let top = 0x7000_0000_0000u64;
        let flags = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED | MapFlags::GROWSDOWN;
        mm.mmap(top - 4 * PAGE_SIZE, 4 * PAGE_SIZE, Prot::READ | Prot::WRITE, flags, None, 0).unwrap();
        assert_eq!(mm.mirror_stack_growth(top - 6 * PAGE_SIZE + 12), Ok(true));
        assert_eq!(mm.vma_at(top - 6 * PAGE_SIZE).unwrap().start, top - 6 * PAGE_SIZE);
        assert_eq!(mm.mirror_stack_growth(top - 5 * PAGE_SIZE), Ok(false));
        // Not below a growsdown VMA.
        let plain = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        mm.mmap(0x1000_0000, PAGE_SIZE, Prot::READ, plain, None, 0).unwrap();
        assert_eq!(mm.mirror_stack_growth(0x0fff_0000), Err(crate::Errno::EFAULT));
        mm.validate().unwrap();
    }

    #[test]
    fn a_mirrored_anon_vma_decides_later_merges() {
        let mm = Mm::new(MmConfig::default());
        let a = 0x1000_0000u64;
        let plain = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        mm.mmap(a, PAGE_SIZE, Prot::READ, plain, None, 0).unwrap();
        assert_eq!(mm.mirror_anon_vma(a), Ok(true));
        assert_eq!(mm.mirror_anon_vma(a), Ok(false));
        assert!(mm.vma_at(a).unwrap().anon_vma_id.is_some());
        assert_eq!(mm.mirror_anon_vma(a + PAGE_SIZE), Err(crate::Errno::EFAULT));
        let shared = MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED;
        mm.mmap(a + 4 * PAGE_SIZE, PAGE_SIZE, Prot::READ, shared, None, 0).unwrap();
        assert_eq!(mm.mirror_anon_vma(a + 4 * PAGE_SIZE), Err(crate::Errno::EINVAL));
        mm.validate().unwrap();
    }
}
