//! Publication: the address space as readers see it — the VMA maple tree (RCU mode) of type-stable pool
//! VMAs, changed under the mmap write lock with the per-VMA lock protocol of seed 003.
//!
//! # Two views of one address space
//!
//! The calls compute their effect on the writer's model (the [`super::Area`] map: attributes plus the
//! writer-only anon_vma chains), step for step as Linux does. Every model primitive marks the address range
//! it touched as dirty. At the end of the call, `Mm::publish` brings the readers' view in line with the model
//! over the dirty range, following the writer's protocol of `crate::vma`:
//!
//! 1. take the mmap write lock (`mm_lock_seq` becomes odd);
//! 2. write-lock (`vma_start_write`) every published VMA in the range that will change or go, waiting for its
//!    readers;
//! 3. update changed VMAs in place; give each new model VMA a pool VMA (write-locked, fields set,
//!    `vma_mark_attached`); store every changed range in the tree and erase the gaps;
//! 4. detach (`vma_mark_detached`) and free to the pool every VMA no longer in the model: the pool reuses it at
//!    once, readers detect the reuse;
//! 5. release the write lock: every VMA write lock ends.
//!
//! Allocation happens before the point of no return: [`Mm`]'s `reserve` takes the VMA objects (a stash) and
//! the tree nodes (the tree's reserve) a call needs before the call changes the model, so a pool or tree
//! allocation failure is an ENOMEM with nothing changed.

use std::collections::HashSet;
use std::sync::Arc;

use vmspace_maple::MapleTree;

use super::{Area, Errno, Mm};
use crate::vma::{
    MmLocking, VmFlags, Vma, VmaLookup, VmaPool, vma_mark_attached, vma_mark_detached, vma_start_write,
};

/// A model VMA's published VMA. Cloning a model VMA (split, copy) gives a handle to nothing: the clone is a new
/// VMA and gets its own pool object when published.
#[derive(Default)]
pub struct Handle(pub(crate) Option<&'static Vma>);

impl Clone for Handle {
    fn clone(&self) -> Self {
        Handle(None)
    }
}

/// What readers share with the writer: the mm's locks and its VMA tree. Readers on other threads hold an
/// `Arc` of it ([`Mm::shared`]) while the writer keeps `&mut Mm`; every change they can observe is made under
/// `locking`'s mmap write lock by `Mm::publish`.
pub struct MmShared {
    /// The mmap_lock, `mm_lock_seq` and the lock statistics.
    pub locking: MmLocking,
    /// The VMA tree (RCU mode).
    pub tree: MapleTree<&'static Vma>,
}

/// Lock-free lookups (`lock_vma_under_rcu`) go through the published tree.
impl VmaLookup for MmShared {
    fn vma_at(&self, addr: u64, guard: &vmspace_rcu::Guard) -> Option<&'static Vma> {
        self.tree.load_in(addr, guard)
    }
}

/// The published side of an [`Mm`].
pub(crate) struct Published {
    pub shared: Arc<MmShared>,
    pub pool: &'static VmaPool,
    /// Pool VMAs reserved for the current call.
    pub stash: Vec<&'static Vma>,
    /// The range the model changed since the last publication.
    pub dirty: Option<(u64, u64)>,
}

impl Published {
    pub fn new(pool: &'static VmaPool) -> Self {
        Published {
            shared: Arc::new(MmShared { locking: MmLocking::new(), tree: MapleTree::new() }),
            pool,
            stash: Vec::new(),
            dirty: None,
        }
    }
}

/// Most stores one reservation covers; beyond it, stores allocate (fallible only under tree failure injection).
const MAX_RESERVED_STORES: usize = 64;

fn same_model(v: &Vma, a: &Area) -> bool {
    v.start() == a.start
        && v.end() == a.end
        && v.flags().bits() == a.flags
        && v.pgoff() == a.pgoff
        && v.file_is(a.file.as_ref().map(|f| &f.vm))
        && v.anon_vma_is(a.anon.anon_vma().map(|x| x.published()))
        && v.anon_name().as_deref() == a.name.as_deref()
}

pub(crate) fn write_fields(locking: &MmLocking, v: &Vma, a: &Area) {
    v.set_range(locking, a.start, a.end);
    v.set_flags(locking, VmFlags::from_bits(a.flags));
    v.set_pgoff(locking, a.pgoff);
    v.set_file(locking, a.file.as_ref().map(|f| f.vm.clone()));
    v.set_anon_vma(locking, a.anon.anon_vma().map(|x| x.published().clone()));
    v.set_anon_name(locking, a.name.clone());
}

impl Mm {
    /// Marks `[lo, hi)` as changed in the model.
    pub(crate) fn mark_dirty(&mut self, lo: u64, hi: u64) {
        let d = &mut self.pubs.dirty;
        *d = Some(match *d {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }

    /// Takes `n` VMA objects from the pool and reserves tree nodes for `2n + 2` stores (capped), so that the
    /// call's publication cannot fail. ENOMEM (nothing changed) if either allocation fails.
    pub(crate) fn reserve_published(&mut self, n: u64) -> Result<(), Errno> {
        while (self.pubs.stash.len() as u64) < n {
            let v = self.pubs.pool.alloc(&self.pubs.shared.locking).map_err(|_| Errno::ENOMEM)?;
            self.pubs.stash.push(v);
        }
        let mut w = self.pubs.shared.tree.lock();
        let need = w.worst_case((2 * n as usize + 2).min(MAX_RESERVED_STORES));
        if w.reserved() < need {
            w.reserve(need - w.reserved()).map_err(|_| Errno::ENOMEM)?;
        }
        Ok(())
    }

    /// Brings the tree and the published VMAs in line with the model over the dirty range (module docs).
    pub(crate) fn publish(&mut self) {
        let Some((mut lo, mut hi)) = self.pubs.dirty.take() else { return };
        if lo >= hi {
            return;
        }
        // Widen to whole model VMAs and whole published ranges.
        for _ in 0..3 {
            if let Some(a) = self.lookup(lo) {
                lo = lo.min(a.start);
            }
            if let Some(a) = self.lookup(hi - 1) {
                hi = hi.max(a.end);
            }
            let g = vmspace_rcu::pin();
            if let Some((f, _, _)) = self.pubs.shared.tree.load_range_in(lo, &g) {
                lo = lo.min(f);
            }
            if let Some((_, l, _)) = self.pubs.shared.tree.load_range_in(hi - 1, &g) {
                hi = hi.max(l.saturating_add(1));
            }
        }
        let keys: Vec<u64> = self.vmas.range(lo..hi).map(|(k, _)| *k).collect();
        let mut old: Vec<(u64, u64, &'static Vma)> = Vec::new();
        {
            let g = vmspace_rcu::pin();
            let mut pos = lo;
            while let Some((f, l, v)) = self.pubs.shared.tree.find_in(pos, hi - 1, &g) {
                old.push((f, l, v));
                if l >= hi - 1 {
                    break;
                }
                pos = l + 1;
            }
        }
        let Mm { vmas, pubs, .. } = self;
        let shared = pubs.shared.clone();
        let locking = &shared.locking;
        let _w = locking.write_lock();
        // Which published VMAs stay exactly as they are.
        let unchanged: HashSet<*const Vma> = keys
            .iter()
            .filter_map(|k| {
                let a = &vmas[k];
                let v = a.vma.0?;
                let in_tree =
                    old.iter().any(|(f, l, o)| std::ptr::eq(*o, v) && *f == a.start && *l == a.end - 1);
                (in_tree && same_model(v, a)).then_some(v as *const Vma)
            })
            .collect();
        // 2. Write-lock everything that changes or goes.
        for (_, _, v) in &old {
            if !unchanged.contains(&(*v as *const Vma)) {
                vma_start_write(locking, v);
            }
        }
        // 3. Update, attach, store.
        let mut live: HashSet<*const Vma> = HashSet::new();
        let mut w = shared.tree.lock();
        let mut cursor = lo;
        for k in &keys {
            let a = vmas.get_mut(k).expect("key");
            if cursor < a.start {
                w.store_range(cursor, a.start - 1, None).expect("tree store within reservation");
            }
            cursor = a.end;
            if let Some(v) = a.vma.0 {
                live.insert(v as *const Vma);
                if unchanged.contains(&(v as *const Vma)) {
                    continue;
                }
                vma_start_write(locking, v);
                write_fields(locking, v, a);
                let in_place =
                    old.iter().any(|(f, l, o)| std::ptr::eq(*o, v) && *f == a.start && *l == a.end - 1);
                if !in_place {
                    w.store_range(a.start, a.end - 1, Some(v)).expect("tree store within reservation");
                }
            } else {
                let v = match pubs.stash.pop() {
                    Some(v) => v,
                    None => pubs.pool.alloc(locking).expect("VMA allocation within reservation"),
                };
                vma_start_write(locking, v);
                write_fields(locking, v, a);
                vma_mark_attached(locking, v);
                w.store_range(a.start, a.end - 1, Some(v)).expect("tree store within reservation");
                a.vma = Handle(Some(v));
                live.insert(v as *const Vma);
            }
        }
        if cursor < hi {
            w.store_range(cursor, hi - 1, None).expect("tree store within reservation");
        }
        drop(w);
        // 4. Detach and free what left the model.
        let mut freed: HashSet<*const Vma> = HashSet::new();
        for (_, _, v) in old {
            let p = v as *const Vma;
            if !live.contains(&p) && freed.insert(p) {
                vma_mark_detached(locking, v);
                pubs.pool.free(v);
            }
        }
    }

    /// Makes the published tree's node allocation fail after `after` more allocations (`None`: never). The
    /// reservation made before each call turns such a failure into an ENOMEM with nothing changed.
    pub fn inject_tree_alloc_failure(&self, after: Option<u64>) {
        self.pubs.shared.tree.inject_alloc_failure(after);
    }

    /// The readers' handle: locks and tree, shareable with reader threads.
    pub fn shared(&self) -> Arc<MmShared> {
        self.pubs.shared.clone()
    }

    /// The lock side of this mm (mmap_lock, `mm_lock_seq`, statistics): what readers lock against.
    pub fn locking(&self) -> &MmLocking {
        &self.pubs.shared.locking
    }

    /// The published VMA tree (RCU mode): what lock-free readers walk.
    pub fn tree(&self) -> &MapleTree<&'static Vma> {
        &self.pubs.shared.tree
    }

    /// Checks the published view against the model: the tree is valid, holds exactly one range per model VMA
    /// (`[start, end - 1]`) pointing at an attached pool VMA of this mm with the model's fields.
    pub(crate) fn validate_published(&self) -> Result<(), String> {
        self.pubs.shared.tree.validate()?;
        if self.pubs.shared.tree.len() != self.vmas.len() {
            return Err(format!(
                "tree has {} ranges, model {}",
                self.pubs.shared.tree.len(),
                self.vmas.len()
            ));
        }
        let g = vmspace_rcu::pin();
        for a in self.vmas.values() {
            let Some(v) = a.vma.0 else { return Err(format!("unpublished VMA {a:?}")) };
            match self.pubs.shared.tree.load_range_in(a.start, &g) {
                Some((f, l, t)) if f == a.start && l == a.end - 1 && std::ptr::eq(t, v) => {}
                other => return Err(format!("tree range for {a:?}: {:?}", other.map(|(f, l, _)| (f, l)))),
            }
            if v.is_detached() || v.mm_id() != self.pubs.shared.locking.id() || !same_model(v, a) {
                return Err(format!("published VMA differs from the model: {v:?} vs {a:?}"));
            }
        }
        Ok(())
    }
}

/// Lock-free lookups (`lock_vma_under_rcu`) go through the published tree (also from [`MmShared`]).
impl VmaLookup for Mm {
    fn vma_at(&self, addr: u64, guard: &vmspace_rcu::Guard) -> Option<&'static Vma> {
        self.pubs.shared.tree.load_in(addr, guard)
    }
}

impl Drop for Mm {
    fn drop(&mut self) {
        let Mm { vmas, pubs, .. } = self;
        let shared = pubs.shared.clone();
        let locking = &shared.locking;
        let _w = locking.write_lock();
        let handles: Vec<&'static Vma> = vmas.values_mut().filter_map(|a| a.vma.0.take()).collect();
        {
            let mut w = shared.tree.lock();
            for v in &handles {
                vma_start_write(locking, v);
                let _ = w.store_range(v.start(), v.end() - 1, None);
            }
        }
        for v in handles {
            vma_mark_detached(locking, v);
            pubs.pool.free(v);
        }
        for v in pubs.stash.drain(..) {
            pubs.pool.free(v);
        }
    }
}
