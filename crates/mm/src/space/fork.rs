//! fork (`kernel/fork.c: dup_mmap`): the child's address space.
//!
//! Every VMA is copied in address order except `VM_DONTCOPY` ones. A copy loses the locked bits. A
//! `VM_WIPEONFORK` copy starts without anon_vma (its memory is fresh); any other copy of a VMA with an
//! anon_vma gets one through `anon_vma_fork` (the parent's chain plus a child anon_vma, or a recycled one),
//! which makes it a "fork child" for the merge rules. Files and shmem objects are shared. The break, the
//! layout and the protection-key state (allocation map, execute-only key, the forking thread's PKRU) are
//! inherited; so are seals (`VM_SEALED` is a flag like the others), and the hugetlb pools are the parent's.
//!
//! The child starts with `locked_vm` 0 and no locked VMA (`mm_init`, the copy drops `VM_LOCKED_MASK`), and
//! inherits only `VM_INIT_DEF_MASK` of `def_flags` (so not `mlockall(MCL_FUTURE)`'s `VM_LOCKED`: checked on the
//! live kernel). Guard markers are copied where `dup_mmap` copies page tables (`copy_page_range` when
//! `vma_needs_copy`: the VMA has an anon_vma or a `VM_COPY_ON_FORK` flag such as `VM_MAYBE_GUARD`), never into
//! a `VM_WIPEONFORK` copy.
//!
//! The child's tree is built as `dup_mmap` builds it: an O(n) depth-first copy of the parent's tree
//! (`MapleTree::dup`, the kernel's `__mt_dup`) whose every entry is replaced by the child's own pool VMA; the
//! ranges of `VM_DONTCOPY` VMAs are then cleared from the copy. A failed copy frees everything it made (the
//! child never existed) and reports ENOMEM.

use std::sync::Arc;

use super::tree::{MmShared, VmaExt, Vmas};
use super::{AnonState, Errno, Mm};
use crate::vma::{MmLocking, VmFlags, Vma, vma_mark_attached, vma_mark_detached, vma_start_write};

impl Mm {
    /// `fork()`: returns the child's address space (the parent is unchanged).
    pub fn fork(&mut self) -> Result<Mm, Errno> {
        self.locked(|mm| mm.dup_mmap())
    }

    /// `dup_mmap`, under the parent's mmap write lock.
    fn dup_mmap(&mut self) -> Result<Mm, Errno> {
        let n = self.map_count();
        // The tree copy plus one VMA per copied VMA.
        self.charge_budget(n + 1)?;
        // As Linux since 6.4: every parent VMA is write-locked, so that no page fault runs on it during the
        // copy.
        for v in self.areas() {
            self.write_lock_vma(v);
        }
        let locking = MmLocking::new();
        let pool = self.vmas.pool;
        let mut copied = 0u64;
        let tree = {
            let _w = locking.write_lock();
            let dup = self.tree().dup(
                |_first, _last, parent: &'static Vma| -> Result<&'static Vma, Errno> {
                    let v = pool.alloc(&locking).map_err(|_| Errno::ENOMEM)?;
                    let fl = parent.fl();
                    if !fl.intersects(VmFlags::DONTCOPY) {
                        // Fork the anon_vma first: its reuse rule reads the counters the copy would change.
                        let anon = if fl.intersects(VmFlags::WIPEONFORK) {
                            AnonState::EMPTY
                        } else {
                            AnonState::fork(&parent.anon())
                        };
                        vma_start_write(&locking, v);
                        v.set_range(&locking, parent.start(), parent.end());
                        v.set_flags(&locking, fl & !VmFlags::LOCKED_MASK);
                        v.set_pgoff(&locking, parent.pgoff());
                        v.set_file(&locking, parent.file());
                        v.set_anon_name(&locking, parent.anon_name());
                        v.set_anon(&locking, anon);
                        vma_mark_attached(&locking, v);
                        copied += 1;
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
            let dontcopy: Vec<(u64, u64)> = self
                .areas()
                .filter(|v| v.fl().intersects(VmFlags::DONTCOPY))
                .map(|v| (v.start(), v.end()))
                .collect();
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
        let mut guards = super::GuardMarkers::new();
        if !self.guards.is_empty() {
            for v in self.areas() {
                let fl = v.fl();
                let copies_page_tables = !fl.intersects(VmFlags::DONTCOPY | VmFlags::WIPEONFORK)
                    && (v.anon().is_some() || fl.intersects(VmFlags::COPY_ON_FORK));
                if copies_page_tables {
                    guards.extend(&self.guards.within(v.start(), v.end()));
                }
            }
        }
        Ok(Mm {
            cfg: self.cfg.clone(),
            brk: self.brk,
            start_brk: self.start_brk,
            alloc_budget: self.alloc_budget,
            next_shmem_ino: self.next_shmem_ino,
            // `arch_dup_pkeys` (and `dup_mm`'s copy without PKU); the forking thread's PKRU goes with it.
            pkeys: self.pkeys,
            sealed: self.sealed,
            // The host's pools are one for the whole process tree.
            huge: self.huge.clone(),
            locked_vm: 0,
            def_flags: self.def_flags & VmFlags::INIT_DEF_MASK,
            guards,
            vmas: Vmas {
                shared: Arc::new(MmShared { locking, tree }),
                pool,
                stash: Vec::new(),
                map_count: copied,
            },
        })
    }
}

/// Detaches and frees every VMA of a child tree that will not be used. The caller holds the child's mmap
/// write lock. No reader has seen the child's tree, but the order is the one every tear-down follows (the
/// `Mm`'s drop): the whole tree is cleared first (one NULL store over the key space, which allocates no node),
/// then each VMA is detached and freed.
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
    let cleared = tree.lock().store_range(0, u64::MAX, None);
    // Even if it failed, freeing is safe here: the child's tree was never published.
    debug_assert!(cleared.is_ok(), "clearing the whole tree needs no allocation");
    for v in all {
        if !v.is_detached() {
            vma_start_write(locking, v);
            vma_mark_detached(locking, v);
        }
        pool.free(v);
    }
}
