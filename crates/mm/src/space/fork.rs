//! fork (`dup_mmap`, §6.10): the child's address space.
//!
//! Every VMA is copied in address order except `VM_DONTCOPY` ones. A copy loses the locked bits. A
//! `VM_WIPEONFORK` copy starts without anon_vma (its memory is fresh); any other copy of a VMA with an
//! anon_vma gets one through `anon_vma_fork` (the parent's chain plus a child anon_vma, or a recycled one),
//! which makes it a "fork child" for the merge rules. Files and shmem objects are shared. The break and the
//! layout are inherited.

use super::flags::*;
use super::{AnonState, Errno, Mm};

impl Mm {
    /// `fork()`: returns the child's address space (the parent is unchanged).
    pub fn fork(&mut self) -> Result<Mm, Errno> {
        let n = self.vmas.len() as u64;
        // Tree duplication plus one VMA per copied VMA.
        self.reserve(n + 1)?;
        let mut child = Mm {
            cfg: self.cfg.clone(),
            vmas: Default::default(),
            brk: self.brk,
            start_brk: self.start_brk,
            alloc_budget: None,
            next_shmem_ino: self.next_shmem_ino,
            pubs: super::Published::new(),
        };
        child.reserve_published(n)?;
        for a in self.vmas.values() {
            if a.flags & VM_DONTCOPY != 0 {
                continue;
            }
            let mut c = a.clone();
            c.flags &= !VM_LOCKED_MASK;
            c.anon =
                if a.flags & VM_WIPEONFORK != 0 { AnonState::default() } else { AnonState::fork(&a.anon) };
            child.insert(c);
        }
        child.publish();
        child.alloc_budget = self.alloc_budget;
        Ok(child)
    }
}
