//! fork (`dup_mmap`, §6.10): the child's address space.
//!
//! Every VMA is copied in address order except `VM_DONTCOPY` ones. A copy loses the locked bits. A
//! `VM_WIPEONFORK` copy starts without anon_vma (its memory is fresh); any other copy of a VMA with an
//! anon_vma gets one through `anon_vma_fork` (the parent's chain plus a child anon_vma, or a recycled one),
//! which makes it a "fork child" for the merge rules. Files and shmem objects are shared. The break and the
//! layout are inherited.
//!
//! The child's tree is built as `dup_mmap` builds it: an O(n) depth-first copy of the parent's tree
//! (`MapleTree::dup`, seed 004) whose every entry is replaced by the child's own pool VMA; the ranges of
//! `VM_DONTCOPY` VMAs are then cleared from the copy. A failed copy frees everything it made (the child never
//! existed) and reports ENOMEM.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::flags::*;
use super::publish::{Handle, MmShared, Published};
use super::{AnonState, Area, Errno, Mm};
use crate::vma::{MmLocking, Vma, vma_mark_attached, vma_mark_detached, vma_start_write};

impl Mm {
    /// `fork()`: returns the child's address space (the parent is unchanged).
    pub fn fork(&mut self) -> Result<Mm, Errno> {
        let n = self.vmas.len() as u64;
        // The tree copy plus one VMA per copied VMA.
        self.charge_budget(n + 1)?;
        let mut vmas: BTreeMap<u64, Area> = BTreeMap::new();
        for a in self.vmas.values() {
            if a.flags & VM_DONTCOPY != 0 {
                continue;
            }
            let mut c = a.clone();
            c.flags &= !VM_LOCKED_MASK;
            c.anon =
                if a.flags & VM_WIPEONFORK != 0 { AnonState::default() } else { AnonState::fork(&a.anon) };
            vmas.insert(c.start, c);
        }
        let locking = MmLocking::new();
        let pool = self.pubs.pool;
        let tree = {
            let _w = locking.write_lock();
            let dup = self.pubs.shared.tree.dup(
                |first, _last, _parent: &'static Vma| -> Result<&'static Vma, Errno> {
                    let v = pool.alloc(&locking).map_err(|_| Errno::ENOMEM)?;
                    if let Some(a) = vmas.get(&first) {
                        vma_start_write(&locking, v);
                        super::publish::write_fields(&locking, v, a);
                        vma_mark_attached(&locking, v);
                    }
                    Ok(v)
                },
                |v: &'static Vma| {
                    if !v.is_detached() {
                        vma_mark_detached(&locking, v);
                    }
                    pool.free(v);
                },
            );
            let tree = dup.map_err(|_| Errno::ENOMEM)?;
            // Clear the DONTCOPY ranges (their slots hold never-attached VMAs).
            let dontcopy: Vec<(u64, u64)> =
                self.vmas.values().filter(|a| a.flags & VM_DONTCOPY != 0).map(|a| (a.start, a.end)).collect();
            let mut w = tree.lock();
            for (s, e) in dontcopy {
                match w.store_range(s, e - 1, None) {
                    Ok(old) => {
                        for (_, _, v) in old {
                            pool.free(v);
                        }
                    }
                    Err(_) => {
                        drop(w);
                        free_tree(&locking, pool, &tree);
                        return Err(Errno::ENOMEM);
                    }
                }
            }
            drop(w);
            tree
        };
        let g = vmspace_rcu::pin();
        for a in vmas.values_mut() {
            a.vma = Handle(tree.load_in(a.start, &g));
        }
        drop(g);
        Ok(Mm {
            cfg: self.cfg.clone(),
            vmas,
            brk: self.brk,
            start_brk: self.start_brk,
            alloc_budget: self.alloc_budget,
            next_shmem_ino: self.next_shmem_ino,
            pubs: Published {
                shared: Arc::new(MmShared { locking, tree }),
                pool,
                stash: Vec::new(),
                dirty: None,
            },
        })
    }
}

/// Detaches and frees every VMA of a child tree that will not be used. The caller holds the child's mmap
/// write lock.
fn free_tree(
    locking: &MmLocking,
    pool: &'static crate::vma::VmaPool,
    tree: &vmspace_maple::MapleTree<&'static Vma>,
) {
    let g = vmspace_rcu::pin();
    let mut all = Vec::new();
    let mut pos = 0;
    while let Some((_, l, v)) = tree.find_in(pos, u64::MAX, &g) {
        all.push(v);
        if l == u64::MAX {
            break;
        }
        pos = l + 1;
    }
    drop(g);
    let mut w = tree.lock();
    for v in all {
        let _ = w.store_range(v.start(), v.end().saturating_sub(1), None);
        if !v.is_detached() {
            vma_start_write(locking, v);
            vma_mark_detached(locking, v);
        }
        pool.free(v);
    }
}
