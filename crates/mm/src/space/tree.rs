//! The VMA tree: the one record of an address space's mappings, and the writer's primitives that change it.
//!
//! # One structure
//!
//! An [`Mm`]'s VMAs live in a maple tree in RCU mode, each range `[start, end - 1]` mapping to a type-stable
//! pool [`Vma`] that carries everything Linux's `vm_area_struct` carries (range, flags, pgoff, file, anon
//! name, and the writer-only anon_vma chain). There is no second map on the side: every lookup, every gap
//! search (`get_unmapped_area` uses the tree's per-child max gaps) and every change goes through the tree,
//! exactly what lock-free readers walk.
//!
//! # The writer's protocol
//!
//! Every call that changes the address space runs under the mmap write lock (`Mm::locked`: `mm_lock_seq`
//! odd for the call) and changes VMAs only through the primitives below, which follow the kernel's per-VMA
//! lock protocol (`include/linux/mmap_lock.h`, `mm/mmap_lock.c`; ARCHITECTURE.md, "VMAs and locks"):
//!
//! - a VMA is write-locked ([`vma_start_write`], waiting for its readers) before any field of it changes;
//! - a new VMA gets its fields while detached, is write-locked and attached, then stored in the tree;
//! - a VMA leaves the tree (its range overwritten by a neighbour's store, or erased: one VMA by `remove`,
//!   munmap's run of VMAs by one store in `remove_span`, everything at exit by one store in the `Mm`'s drop),
//!   then is detached ([`vma_mark_detached`], waiting for stragglers) and freed to the pool, which may hand it
//!   out at once;
//! - `mmap_write_unlock` releases every VMA write lock of the call together.
//!
//! # Store order (no false gaps)
//!
//! A lock-free reader between two stores must never see a gap where an address is mapped both before and after
//! the call. So, as `mm/vma.c` does, a VMA that grows is stored first, overwriting the part of its neighbour it
//! takes over, and the neighbour shrinks afterwards (its tree range already is the smaller one): the primitives
//! erase only the parts of a VMA's old range that the tree still maps to that VMA, and the callers (merge,
//! split, mremap) grow before they shrink. A real unmap erases.
//!
//! # One cursor per call
//!
//! A call keeps one cursor into the tree ([`CallCursor`], the kernel's `vma_iterator` / `ma_state`): the
//! writer's reads (`lookup`, `find`, `find_intersection`, `prev_of`, `next_from`, `gap_neighbours`,
//! `vmas_between` on [`MmWrite`], which take the place of the lock-free lookups of [`Mm`] for the call) and
//! its stores all go through it, so a call walks from the root once and then moves from the path it cached:
//! a neighbour in the same leaf costs a slot step, a store inside the cached leaf starts from it
//! (`vmspace_maple::WriteCursor`). The cursor needs the tree's writer mutex, which the call takes at its
//! first tree operation and keeps until it waits for a VMA: every VMA write lock of an attached VMA
//! ([`MmWrite::write_lock_vma`]) and every detach first releases it ([`MmWrite::release_tree`]; the cursor's
//! state stays with the tree's writer state, `Writer::resume_cursor` takes it up at the next session, and
//! its path is trusted again because no other writer can store while the mmap write lock is held, which the
//! tree checks by its store count anyway), so the lock order stays mmap_lock, VMA write locks, tree mutex.
//! Locking a new VMA that is not attached yet waits for nobody and keeps the mutex. What remains of a walk
//! from the root per call is the first positioning; the gap searches of `get_unmapped_area` (the tree's max
//! gaps, a walk of their own as in the kernel) and the lock-free readers are not the call's cursor.
//!
//! # Exactness
//!
//! Between primitives the tree is exact: every entry's range is its VMA's range. The semantic code (merge
//! decisions, walks) reads only at those points. [`Mm::validate`] checks it.
//!
//! # Failure
//!
//! Allocation happens before the point of no return: `reserve` takes the VMA objects (a stash) and the tree
//! nodes (the tree's reserve) a call needs before the call changes anything, so a pool or tree allocation
//! failure is an ENOMEM with nothing changed.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use vmspace_maple::{MapleTree, WriteCursor, Writer};
use vmspace_pgtable::vma_has_recency;

use super::{Errno, Mm, MmWrite, PAGE_MASK, TASK_SIZE};
use crate::vma::{
    AnonState, MmLocking, VmFile, VmFlags, Vma, VmaFind, VmaLookup, VmaPool, vma_mark_attached,
    vma_mark_detached, vma_start_write,
};

/// A VMA as the address-space code handles it.
pub(crate) type V = &'static Vma;

/// What readers share with the writers: the mm's locks, its VMA tree and its page table. Readers on other
/// threads hold an `Arc` of it ([`Mm::shared`]), which may outlive the [`Mm`]; every VMA change they can observe
/// is made under `locking`'s mmap write lock, and every page-table change under the page table's own rules
/// (split PTE locks; tables and frames freed a grace period after they are unlinked).
pub struct MmShared {
    /// The mmap_lock, `mm_lock_seq` and the lock statistics.
    pub locking: MmLocking,
    /// The VMA tree (RCU mode). Readers reach it through [`lock_vma_under_rcu`](crate::vma::lock_vma_under_rcu),
    /// [`lock_next_vma`](crate::vma::lock_next_vma) and [`MmShared::vma_locked`]; the raw tree is
    /// [`MmShared::tree`] (`testing` feature).
    pub(crate) tree: MapleTree<&'static Vma>,
    /// The page table: lockless walkers (the emulated MMU, `smaps_range_lockless`) walk it inside RCU
    /// read-side sections. Shared with the registries of the files this mm maps (they zap through it on
    /// truncation). Emptied (every entry zapped, every table below the top freed) when the `Mm` drops.
    pub(crate) pt: Arc<vmspace_pgtable::PageTable>,
}

impl MmShared {
    testing_pub! {
    /// The raw VMA tree.
    pub fn tree(&self) -> &MapleTree<&'static Vma> {
        &self.tree
    }
    }

    /// The page table, read-only (lockless walkers and the emulated MMU: `vmspace_pgtable::PageTableView`).
    /// Readers on other threads may hold it while the address space changes the table: nothing reachable
    /// through the view changes an entry or a table, and every walk it offers runs inside an RCU read-side
    /// section.
    ///
    /// ```compile_fail,E0599
    /// # use vmspace_mm::{Mm, MmConfig};
    /// let mm = Mm::new(MmConfig::default());
    /// let shared = mm.shared();
    /// // The shared page table cannot be changed from outside: this raced `munmap`'s own free_pgd_range.
    /// shared.page_table().free_pgd_range(0, 1 << 47, 0, 0);
    /// ```
    pub fn page_table(&self) -> vmspace_pgtable::PageTableView<'_> {
        self.pt.view()
    }

    /// `lock_vma_under_rcu(mm, addr)`: finds and read-locks the VMA covering `addr` without the mmap lock;
    /// `None` means "fall back to the mmap lock" (no VMA there, or it is being changed). The guard borrows this
    /// `MmShared`, which keeps the tree (and so the VMA) reachable; counted in `locking`'s statistics (success,
    /// abort, miss) as [`lock_vma_under_rcu`](crate::vma::lock_vma_under_rcu) counts them.
    ///
    /// ```
    /// use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, Prot};
    ///
    /// let mm = Mm::new(MmConfig::default());
    /// let a = mm.mmap(0, PAGE_SIZE, Prot::RW, MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0).unwrap();
    /// let shared = mm.shared();
    /// let g = shared.lock_vma_under_rcu(a).expect("mapped, not write-locked");
    /// assert_eq!((g.vma().start(), g.vma().end()), (a, a + PAGE_SIZE));
    /// drop(g);
    /// assert!(shared.lock_vma_under_rcu(a + PAGE_SIZE).is_none(), "nothing mapped there");
    /// ```
    pub fn lock_vma_under_rcu(&self, addr: u64) -> Option<crate::vma::VmaReadGuard<'_>> {
        crate::vma::lock_vma_under_rcu(&self.locking, self, addr)
    }

    /// The VMA containing `addr`, found under the mmap read lock `held` (the fault path before per-VMA locks:
    /// `find_vma` under `mmap_read_lock`). The reference is valid while the lock is held: no writer can change
    /// or free a VMA meanwhile.
    ///
    /// # Panics
    ///
    /// If `held` is not a read lock of this mm's `locking` (another mm's lock would not keep this mm's writers
    /// out, so the reference would not be what it promises). The check is one pointer compare, made in every
    /// build.
    pub fn vma_locked<'g>(&'g self, held: &'g crate::vma::MmapReadGuard<'_>, addr: u64) -> Option<&'g Vma> {
        assert!(std::ptr::eq(held.mm(), &self.locking), "MmShared::vma_locked: the read lock of another mm");
        self.tree.load(addr)
    }
}

/// Lock-free lookups (`lock_vma_under_rcu`) go through the tree.
impl VmaLookup for MmShared {
    fn vma_at(&self, addr: u64, guard: &vmspace_rcu::Guard) -> Option<&'static Vma> {
        self.tree.load_in(addr, guard)
    }
}

/// `lock_next_vma` walks the tree.
impl VmaFind for MmShared {
    fn vma_find(&self, from: u64, guard: &vmspace_rcu::Guard) -> Option<&'static Vma> {
        self.tree.vma_find(from, guard)
    }
}

/// The tree side of an [`Mm`] (its write-locked half, the stash and `map_count`, is in `MmState`).
pub(crate) struct Vmas {
    pub shared: Arc<MmShared>,
    pub pool: &'static VmaPool,
}

impl Vmas {
    pub fn new(pool: &'static VmaPool, pt: Arc<vmspace_pgtable::PageTable>) -> Self {
        Vmas::with(pool, MmLocking::new(), MapleTree::new(), pt)
    }

    pub fn with(
        pool: &'static VmaPool,
        locking: MmLocking,
        tree: MapleTree<&'static Vma>,
        pt: Arc<vmspace_pgtable::PageTable>,
    ) -> Self {
        Vmas { shared: Arc::new(MmShared { locking, tree, pt }), pool }
    }
}

/// Most stores one reservation covers; beyond it, stores allocate (fallible only under tree failure injection).
const MAX_RESERVED_STORES: usize = 64;

/// The attributes of a VMA about to be created.
pub(crate) struct NewVma {
    pub start: u64,
    pub end: u64,
    pub flags: VmFlags,
    pub pgoff: u64,
    pub file: Option<Arc<VmFile>>,
    pub anon: AnonState,
    pub name: Option<Arc<str>>,
}

/// Writer-side helpers on a VMA (valid under the mmap lock, when the VMA cannot change under the caller).
pub(crate) trait VmaExt {
    /// `vm_flags` as bits.
    fn fl(&self) -> VmFlags;
    /// Length in pages.
    fn pages(&self) -> u64;
    /// `linear_page_index`: the pgoff of `addr` inside this VMA.
    fn pgoff_at(&self, addr: u64) -> u64;
    /// `vma_is_anonymous`: no file and no vm_ops (shared anonymous memory has shmem's).
    fn is_anonymous(&self) -> bool;
    /// Whether the anon name equals `name` (by content, as `anon_vma_name_eq`).
    fn name_is(&self, name: Option<&Arc<str>>) -> bool;
}

impl VmaExt for Vma {
    #[inline]
    fn fl(&self) -> VmFlags {
        self.flags()
    }
    #[inline]
    fn pages(&self) -> u64 {
        self.len() >> super::config::PAGE_SHIFT
    }
    #[inline]
    fn pgoff_at(&self, addr: u64) -> u64 {
        self.pgoff().wrapping_add((addr - self.start()) >> super::config::PAGE_SHIFT)
    }
    #[inline]
    fn is_anonymous(&self) -> bool {
        !self.is_file_backed()
    }
    fn name_is(&self, name: Option<&Arc<str>>) -> bool {
        match (self.anon_name(), name) {
            (None, None) => true,
            (Some(a), Some(b)) => *a == **b,
            _ => false,
        }
    }
}

impl Mm {
    /// The lock side of this mm (mmap_lock, `mm_lock_seq`, statistics): what readers lock against.
    pub fn locking(&self) -> &MmLocking {
        &self.vmas.shared.locking
    }

    testing_pub! {
    /// The VMA tree (RCU mode): what lock-free readers walk.
    pub fn tree(&self) -> &MapleTree<&'static Vma> {
        &self.vmas.shared.tree
    }
    }

    /// The readers' handle: locks, tree and page table, shareable with reader threads.
    pub fn shared(&self) -> Arc<MmShared> {
        self.vmas.shared.clone()
    }

    /// Number of VMAs (`mm->map_count`), under the mmap read lock.
    pub fn map_count(&self) -> u64 {
        self.read_locked(|r| r.st.map_count)
    }

    testing_pub! {
    /// Makes the tree's node allocation fail after `after` more allocations (`None`: never). The reservation
    /// made before each call turns such a failure into an ENOMEM with nothing changed.
    pub fn inject_tree_alloc_failure(&self, after: Option<u64>) {
        self.tree().inject_alloc_failure(after);
    }

    /// Adds `flags` to the VMA containing `addr` (under the write lock, like any change): VMA kinds the calls
    /// cannot create yet (a driver's `VM_IO | VM_PFNMAP`, hugetlbfs's `VM_HUGETLB`, `VM_DROPPABLE`), for
    /// testing the rules that refuse them. `false` if nothing is mapped there.
    pub fn add_vma_flags(&self, addr: u64, flags: VmFlags) -> bool {
        self.locked(|mm| match mm.lookup(addr) {
            Some(v) => {
                mm.set_flags(v, v.fl() | flags);
                true
            }
            None => false,
        })
    }

    // ----- reads (the writer's view: exact between primitives; callers hold the mmap lock) -----

    /// The VMA containing `addr` (`vma_lookup`).
    pub fn lookup(&self, addr: u64) -> Option<&'static Vma> {
        self.tree().load(addr)
    }

    /// The first VMA ending above `addr` (`find_vma`).
    pub fn find(&self, addr: u64) -> Option<&'static Vma> {
        self.tree().find(addr, u64::MAX).map(|(_, _, v)| v)
    }

    /// The first VMA intersecting `[start, end)` (`find_vma_intersection`).
    pub fn find_intersection(&self, start: u64, end: u64) -> Option<&'static Vma> {
        if end <= start {
            return None;
        }
        self.tree().find(start, end - 1).map(|(_, _, v)| v)
    }

    /// The VMAs in address order (collected in one cursor pass over the tree: O(n)).
    pub fn areas(&self) -> impl Iterator<Item = &'static Vma> + use<> {
        let g = vmspace_rcu::pin();
        let mut c = self.tree().cursor(&g);
        let mut all = Vec::new();
        while let Some((_, _, v)) = c.find(u64::MAX) {
            all.push(v);
        }
        all.into_iter()
    }
    }

    /// The last VMA starting below `addr` (`vma_prev` from `addr`).
    pub(crate) fn prev_of(&self, addr: u64) -> Option<V> {
        if addr == 0 {
            return None;
        }
        self.tree().find_rev(addr - 1, 0).map(|(_, _, v)| v)
    }

    /// The first VMA starting at or after `addr` (`vma_next` from a gap).
    pub(crate) fn next_from(&self, addr: u64) -> Option<V> {
        let (f, l, v) = self.tree().find(addr, u64::MAX)?;
        if f >= addr {
            return Some(v);
        }
        if l == u64::MAX {
            return None;
        }
        self.tree().find(l + 1, u64::MAX).map(|(_, _, v)| v)
    }

    /// The VMAs intersecting `[lo, hi)`, in order, lazily (each step a tree walk from the last end).
    pub(crate) fn vmas_between(&self, lo: u64, hi: u64) -> impl Iterator<Item = V> + '_ {
        let mut pos = Some(lo);
        std::iter::from_fn(move || {
            let p = pos?;
            if p >= hi {
                return None;
            }
            let (_, l, v) = self.tree().find(p, hi - 1)?;
            pos = l.checked_add(1);
            Some(v)
        })
    }

    // ----- invariants -----

    /// Checks every invariant (see the module docs of `space`) under the mmap read lock and returns the first
    /// violation. The page-table checks compare counters with entries, so no thread may fault, zap or fork in
    /// this address space meanwhile (faults under VMA locks and `MADV_DONTNEED` do not wait for the mmap read
    /// lock); lockless MMU accesses may run (they set accessed and dirty bits, which no check reads).
    pub fn validate(&self) -> Result<(), String> {
        self.read_locked(|r| r.validate_locked())
    }
}

impl super::MmRead<'_> {
    /// [`Mm::validate`] with the mmap read lock held.
    pub(crate) fn validate_locked(&self) -> Result<(), String> {
        self.tree().validate()?;
        let g = vmspace_rcu::pin();
        let mut n = 0u64;
        let mut locked_pages = 0u64;
        let id = self.locking().id();
        let mut c = self.tree().cursor(&g);
        while let Some((f, l, v)) = c.find(u64::MAX) {
            n += 1;
            let (s, e) = (v.start(), v.end());
            if s != f || e != l.wrapping_add(1) {
                return Err(format!("tree range {f:#x}-{l:#x} holds {v:?}"));
            }
            if s >= e {
                return Err(format!("empty VMA {v:?}"));
            }
            if s & !PAGE_MASK != 0 || e & !PAGE_MASK != 0 {
                return Err(format!("unaligned VMA {v:?}"));
            }
            if e > TASK_SIZE {
                return Err(format!("beyond TASK_SIZE {v:?}"));
            }
            if v.is_detached() || v.mm_id() != id {
                return Err(format!("VMA in the tree detached or of another mm: {v:?}"));
            }
            let st = v.anon();
            if st.is_some() == (st.chain_len() == 0) {
                return Err(format!("anon_vma/chain mismatch {v:?}"));
            }
            if !v.anon_vma_is(st.anon_vma()) {
                return Err(format!("published anon_vma differs from the chain's {v:?}"));
            }
            if v.fl().intersects(VmFlags::MAYSHARE) && st.is_some() {
                return Err(format!("shared VMA with anon_vma {v:?}"));
            }
            drop(st);
            if v.fl().intersects(VmFlags::LOCKED) {
                locked_pages += v.pages();
            }
            if v.is_file_backed() != (v.i_mmap_id() != 0) {
                return Err(format!(
                    "file VMA not registered with its file, or registered without one: {v:?}"
                ));
            }
        }
        drop(g);
        if self.st.locked_vm < locked_pages && !self.st.locked_vm_truncated {
            return Err(format!(
                "locked_vm {} below the {locked_pages} pages of VM_LOCKED VMAs",
                self.st.locked_vm
            ));
        }
        if n != self.st.map_count || n != self.tree().len() as u64 {
            return Err(format!(
                "map_count {} but {n} VMAs (tree len {})",
                self.st.map_count,
                self.tree().len()
            ));
        }
        self.validate_pages()
    }
}

/// The call's cursor into the VMA tree (module docs, "One cursor per call"): the tree's writer, taken at the
/// first tree operation of the call and released before any wait for a VMA. The cursor's state (index and
/// cached path) is the tree's writer cursor, which outlives the writer sessions: the call's first cursor
/// operation starts a new cursor (`Writer::cursor`: one walk from the root), the later ones take it up again
/// (`Writer::resume_cursor`).
pub(crate) struct CallCursor<'a> {
    tree: &'a MapleTree<V>,
    writer: RefCell<Option<Writer<'a, V>>>,
    started: Cell<bool>,
}

impl<'a> CallCursor<'a> {
    pub(crate) fn new(tree: &'a MapleTree<V>) -> Self {
        CallCursor { tree, writer: RefCell::new(None), started: Cell::new(false) }
    }
}

impl<'a> MmWrite<'a> {
    // ----- the call's cursor (module docs) -----

    /// Runs `f` with the tree's writer, taking the writer mutex if this call does not hold it.
    pub(crate) fn with_writer<R>(&self, f: impl FnOnce(&mut Writer<'a, V>) -> R) -> R {
        let mut slot = self.cur.writer.borrow_mut();
        f(slot.get_or_insert_with(|| self.cur.tree.lock()))
    }

    /// Runs `f` with the call's cursor.
    fn with_cursor<R>(&self, f: impl FnOnce(&mut WriteCursor<'_, 'a, V>) -> R) -> R {
        let mut slot = self.cur.writer.borrow_mut();
        let w = slot.get_or_insert_with(|| self.cur.tree.lock());
        if self.cur.started.replace(true) { f(&mut w.resume_cursor()) } else { f(&mut w.cursor(0)) }
    }

    /// Releases the tree's writer mutex (before a wait for a VMA's readers); the cursor keeps its state.
    pub(crate) fn release_tree(&self) {
        self.cur.writer.borrow_mut().take();
    }

    /// `vma_start_write` on a VMA of this mm, which may wait for its readers: the tree's writer mutex is
    /// released first (the lock order).
    pub(crate) fn write_lock_vma(&self, v: V) {
        self.release_tree();
        vma_start_write(self.locking(), v);
    }

    // ----- reads through the cursor (the writer's view: exact between primitives) -----

    /// The VMA containing `addr` (`vma_lookup`).
    pub(crate) fn lookup(&self, addr: u64) -> Option<V> {
        self.with_cursor(|c| {
            c.set(addr);
            c.load()
        })
    }

    /// The first VMA ending above `addr` (`find_vma`).
    pub(crate) fn find(&self, addr: u64) -> Option<V> {
        self.with_cursor(|c| {
            c.set(addr);
            c.find(u64::MAX).map(|(_, _, v)| v)
        })
    }

    /// The first VMA intersecting `[start, end)` (`find_vma_intersection`).
    pub(crate) fn find_intersection(&self, start: u64, end: u64) -> Option<V> {
        if end <= start {
            return None;
        }
        self.with_cursor(|c| {
            c.set(start);
            c.find(end - 1).map(|(_, _, v)| v)
        })
    }

    /// The last VMA starting below `addr` (`vma_prev` from `addr`).
    pub(crate) fn prev_of(&self, addr: u64) -> Option<V> {
        if addr == 0 {
            return None;
        }
        self.with_cursor(|c| {
            c.set(addr - 1);
            match c.range() {
                (_, _, Some(v)) => Some(v),
                _ => c.prev(0).map(|(_, _, v)| v),
            }
        })
    }

    /// The first VMA starting at or after `addr` (`vma_next` from a gap).
    pub(crate) fn next_from(&self, addr: u64) -> Option<V> {
        self.with_cursor(|c| {
            c.set(addr);
            match c.range() {
                (f, _, Some(v)) if f == addr => Some(v),
                _ => c.next(u64::MAX).map(|(_, _, v)| v),
            }
        })
    }

    /// The VMAs intersecting `[lo, hi)`, in order, lazily (each step from the cursor's position).
    pub(crate) fn vmas_between(&self, lo: u64, hi: u64) -> impl Iterator<Item = V> + '_ {
        let mut pos = Some(lo);
        std::iter::from_fn(move || {
            let p = pos?;
            if p >= hi {
                return None;
            }
            let (_, l, v) = self.with_cursor(|c| {
                c.set(p);
                c.find(hi - 1)
            })?;
            pos = l.checked_add(1);
            Some(v)
        })
    }

    /// The VMAs around the free address `start` (no VMA covers it): the last one below and the first one
    /// above (`vma_prev` and `vma_next` from one cursor position, as `vma_merge_new_range` reads them).
    pub(crate) fn gap_neighbours(&self, start: u64) -> (Option<V>, Option<V>) {
        self.with_cursor(|c| {
            c.set(start);
            debug_assert!(c.load().is_none(), "gap_neighbours of a mapped address {start:#x}");
            // From the gap, or (None) still on it: the next entry is the first VMA after the gap.
            let prev = c.prev(0).map(|(_, _, v)| v);
            (prev, c.next(u64::MAX).map(|(_, _, v)| v))
        })
    }

    // ----- stores through the cursor -----

    fn store(&self, start: u64, end: u64, v: Option<V>) {
        self.with_cursor(|c| c.store(start, end - 1, v).map(|_| ())).expect("tree store within reservation");
    }

    /// Stores `v` over its own range unless the tree already holds exactly that.
    fn store_vma(&self, v: V) {
        let (s, e) = (v.start(), v.end());
        self.with_cursor(|c| {
            c.set(s);
            match c.range() {
                (f, l, Some(t)) if f == s && l == e - 1 && std::ptr::eq(t, v) => {}
                _ => {
                    c.store(s, e - 1, Some(v)).expect("tree store within reservation");
                }
            }
        })
    }

    /// Erases the parts of `[lo, hi)` the tree still maps to `v`.
    fn erase_stale(&self, v: V, lo: u64, hi: u64) {
        if lo >= hi {
            return;
        }
        self.with_cursor(|c| {
            let mut stale: [Option<(u64, u64)>; 2] = [None; 2];
            let mut more: Vec<(u64, u64)> = Vec::new();
            c.set(lo);
            let mut found = c.find(hi - 1);
            while let Some((f, l, t)) = found {
                if std::ptr::eq(t, v) {
                    let r = (f.max(lo), l.min(hi - 1));
                    match stale.iter_mut().find(|x| x.is_none()) {
                        Some(x) => *x = Some(r),
                        None => more.push(r),
                    }
                }
                found = c.next(hi - 1);
            }
            for (f, l) in stale.into_iter().flatten().chain(more) {
                c.store(f, l, None).expect("tree store within reservation");
            }
        })
    }

    /// Stores NULL over `[first, last]` (the kernel's `vma_iter_clear_gfp`). ENOMEM only if a node allocation
    /// fails beyond the call's reservation (under tree failure injection); then nothing changed.
    fn unpublish(&self, first: u64, last: u64) -> Result<(), Errno> {
        self.with_cursor(|c| c.store(first, last, None)).map(|_| ()).map_err(|_| Errno::ENOMEM)
    }
}

impl MmWrite<'_> {
    // ----- reservation -----

    /// Takes `n` VMA objects from the pool and reserves tree nodes for `3n + 3` stores (capped), so that the
    /// call cannot fail half-way for lack of memory. ENOMEM (nothing changed) if either allocation fails.
    pub(crate) fn reserve_objects(&mut self, n: u64) -> Result<(), Errno> {
        while (self.st.stash.len() as u64) < n {
            let v = self.vmas.pool.alloc(&self.vmas.shared.locking).map_err(|_| Errno::ENOMEM)?;
            self.st.stash.push(v);
        }
        self.with_writer(|w| {
            let need = w.worst_case((3 * n as usize + 3).min(MAX_RESERVED_STORES));
            if w.reserved() < need {
                w.reserve(need - w.reserved()).map_err(|_| Errno::ENOMEM)?;
            }
            Ok(())
        })
    }

    // ----- primitives (module docs: protocol and store order) -----

    fn take_vma(&mut self) -> V {
        match self.st.stash.pop() {
            Some(v) => v,
            None => {
                self.vmas.pool.alloc(&self.vmas.shared.locking).expect("VMA allocation within reservation")
            }
        }
    }

    /// A new VMA with the attributes of `n`, stored in the tree (`vma_iter_store_new`) and registered with its
    /// file. Returns it.
    pub(crate) fn insert_new(&mut self, n: NewVma) -> V {
        debug_assert!(n.start < n.end);
        let v = self.take_vma();
        let mm = self.mm;
        let locking = mm.locking();
        vma_start_write(locking, v);
        v.set_range(locking, n.start, n.end);
        v.set_flags(locking, n.flags);
        v.set_pgoff(locking, n.pgoff);
        v.set_file(locking, n.file);
        v.set_anon(locking, n.anon);
        v.set_anon_name(locking, n.name);
        vma_mark_attached(locking, v);
        self.store(n.start, n.end, Some(v));
        mm.i_mmap_register(v);
        self.st.map_count += 1;
        v
    }

    /// Gives `v` the range `[start, end)` and `pgoff` (`vma_set_range` plus the tree store): the new range is
    /// stored first, then whatever of the old range the tree still maps to `v` is erased; its file registration
    /// follows.
    pub(crate) fn set_range(&mut self, v: V, start: u64, end: u64, pgoff: u64) {
        debug_assert!(start < end);
        self.write_lock_vma(v);
        let mm = self.mm;
        let (os, oe) = (v.start(), v.end());
        let locking = mm.locking();
        v.set_range(locking, start, end);
        v.set_pgoff(locking, pgoff);
        self.store_vma(v);
        self.erase_stale(v, os, oe.min(start));
        self.erase_stale(v, os.max(end), oe);
        mm.i_mmap_update(v);
    }

    /// Sets `v`'s end (a shrink or growth at the top), keeping its pgoff.
    pub(crate) fn set_end(&mut self, v: V, end: u64) {
        self.set_range(v, v.start(), end, v.pgoff());
    }

    /// Sets `v`'s flags (write-locking it). A change of its recency (`VM_SEQ_READ`, `VM_RAND_READ`:
    /// `vma_has_recency`) reaches its file registration, which truncation's zap reads.
    pub(crate) fn set_flags(&mut self, v: V, flags: VmFlags) {
        self.write_lock_vma(v);
        let recency = vma_has_recency(v.fl());
        v.set_flags(self.locking(), flags);
        if vma_has_recency(flags) != recency {
            self.mm.i_mmap_update(v);
        }
    }

    /// Sets `v`'s anon name.
    pub(crate) fn set_name(&mut self, v: V, name: Option<Arc<str>>) {
        self.write_lock_vma(v);
        v.set_anon_name(self.locking(), name);
    }

    /// Sets `v`'s anon_vma state.
    pub(crate) fn set_anon(&mut self, v: V, st: AnonState) {
        self.write_lock_vma(v);
        v.set_anon(self.locking(), st);
    }

    /// Takes `v` out of the address space: the parts of its range still mapped to it are erased (a neighbour
    /// that took them over was stored before), then it is detached and freed to the pool.
    pub(crate) fn remove(&mut self, v: V) {
        self.write_lock_vma(v);
        self.erase_stale(v, v.start(), v.end());
        self.detach_free(v);
    }

    /// Takes the VMAs `gone` (in address order, every VMA the tree maps between the first's start and the last's
    /// end) out of the address space together, as munmap does (`mm/vma.c: vms_gather_munmap_vmas`, then
    /// `vma_iter_clear_gfp`, then `vms_complete_munmap_vmas`): each is write-locked, one store of NULL over
    /// their whole span unpublishes them all, then each is detached and freed. The caller reserved the store
    /// and zaps the pages afterwards.
    pub(crate) fn remove_span(&mut self, gone: &[V]) {
        let (Some(&first), Some(&last)) = (gone.first(), gone.last()) else { return };
        debug_assert!(gone.windows(2).all(|w| w[0].end() <= w[1].start()));
        for &v in gone {
            self.write_lock_vma(v);
        }
        self.unpublish(first.start(), last.end() - 1).expect("tree store within reservation");
        for &v in gone {
            self.detach_free(v);
        }
    }

    /// Unregisters from its file, detaches and frees a write-locked `v` that the tree no longer maps (its range
    /// was cleared or taken over).
    pub(crate) fn detach_free(&mut self, v: V) {
        self.i_mmap_unregister(v);
        self.free_detached(v);
    }

    /// Detaches and frees a write-locked `v` that the tree no longer maps and that left its file's registry.
    pub(crate) fn free_detached(&mut self, v: V) {
        debug_assert!(self.vmas_between(v.start(), v.end()).all(|t| !std::ptr::eq(t, v)));
        // Detaching waits for the VMA's stragglers: not with the tree's writer mutex held.
        self.release_tree();
        vma_mark_detached(self.locking(), v);
        self.vmas.pool.free(v);
        self.st.map_count -= 1;
    }

    /// Clears `[start, end)` in the tree (the caller reserved the store).
    pub(crate) fn unpublish_range(&self, start: u64, end: u64) {
        self.unpublish(start, end - 1).expect("tree store within reservation");
    }

    /// `__split_vma`: splits `v` at `addr` (strictly inside) into two VMAs with the same attributes (the new
    /// one's anon_vma chain cloned), refused with EINVAL where the VMA may not split there (`may_split`:
    /// hugetlb, only at huge page boundaries). No `max_map_count` check ([`MmWrite::split_vma`] makes it).
    ///
    /// The new VMA takes the lower part with `new_below`, else the upper part; `v` keeps the other, its pgoff
    /// advanced when it keeps the upper part. `new_below` is the split at the start of a range that is about
    /// to change or leave (`vma_modify`, `vms_gather_munmap_vmas`): the VMA the call goes on with stays the
    /// original one. Returns the new VMA. The new VMA overwrites its part of `v`'s tree range before `v`
    /// shrinks, and is registered with the file before `v`'s registration shrinks, so neither a reader nor a
    /// truncation in between misses a page.
    pub(crate) fn __split_vma(&mut self, v: V, addr: u64, new_below: bool) -> Result<V, Errno> {
        debug_assert!(v.start() < addr && addr < v.end());
        // `vm_ops->may_split`.
        self.may_split(v, addr)?;
        self.write_lock_vma(v);
        let n = self.take_vma();
        let mm = self.mm;
        let locking = mm.locking();
        vma_start_write(locking, n);
        n.copy_fields_from(locking, v);
        if new_below {
            n.set_range(locking, v.start(), addr);
        } else {
            n.set_range(locking, addr, v.end());
            n.set_pgoff(locking, v.pgoff_at(addr));
        }
        vma_mark_attached(locking, n);
        self.store(n.start(), n.end(), Some(n));
        mm.i_mmap_register(n);
        if new_below {
            let pgoff = v.pgoff_at(addr);
            v.set_range(locking, addr, v.end());
            v.set_pgoff(locking, pgoff);
        } else {
            v.set_end(locking, addr);
        }
        mm.i_mmap_update(v);
        self.st.map_count += 1;
        Ok(n)
    }

    /// `split_vma`: [`MmWrite::__split_vma`], refused with ENOMEM when `map_count >= max_map_count`.
    pub(crate) fn split_vma(&mut self, v: V, addr: u64, new_below: bool) -> Result<V, Errno> {
        if self.st.map_count >= self.cfg.max_map_count {
            return Err(Errno::ENOMEM);
        }
        self.__split_vma(v, addr, new_below)
    }
}

/// Lock-free lookups (`lock_vma_under_rcu`) go through the tree (also from [`MmShared`]).
impl VmaLookup for Mm {
    fn vma_at(&self, addr: u64, guard: &vmspace_rcu::Guard) -> Option<&'static Vma> {
        self.tree().load_in(addr, guard)
    }
}

/// Exit (`kernel/fork.c: mmput` → `mm/mmap.c: exit_mmap`): every VMA leaves the address space, then every page.
/// Readers may still hold the tree and the page table through [`MmShared`] (which outlives the `Mm`), so the
/// order is the writer's protocol: under the mmap write lock, write-lock every VMA, unpublish them all with one
/// store of NULL over the whole key space, and only then unregister each from its file, detach and free it;
/// then zap every entry of the page table (`unmap_vmas`) and free every table below the top
/// (`free_pgtables`); the frames and tables go back to the memory a grace period later, and the top table when
/// the last `MmShared` goes. Freeing a VMA the tree still maps would leave a concurrent `lock_vma_under_rcu`
/// retrying on a detached VMA forever.
///
/// The whole-key-space store allocates no node (the tree becomes empty: the maple tree publishes an empty root
/// and retires every node, `crates/maple/tests/alloc_fail.rs` checks it under failure injection), and zapping
/// and freeing tables allocate nothing, so tear-down cannot fail even when allocations do. Should the store
/// ever fail, the VMAs stay attached and mapped (leaked, never freed under a reader).
impl Drop for Mm {
    fn drop(&mut self) {
        let shared = self.vmas.shared.clone();
        let mut w = shared.locking.write_lock();
        let st = self.state.write(&mut w);
        let mut mm = MmWrite::new(self, st);
        let all: Vec<V> = mm.areas().collect();
        let without_recency: Vec<(u64, u64)> =
            all.iter().filter(|v| !vma_has_recency(v.fl())).map(|v| (v.start(), v.end())).collect();
        for &v in &all {
            mm.write_lock_vma(v);
        }
        if mm.unpublish(0, u64::MAX).is_ok() {
            for v in all {
                mm.detach_free(v);
            }
            mm.exit_mmap(&without_recency);
        } else {
            debug_assert!(false, "clearing the whole tree needs no allocation");
        }
        mm.with_writer(|w| w.release_reserve());
        let pool = mm.vmas.pool;
        for v in mm.st.stash.drain(..) {
            pool.free(v);
        }
    }
}
