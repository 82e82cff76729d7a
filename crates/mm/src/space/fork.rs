//! fork (`kernel/fork.c: dup_mmap`): the child's address space.
//!
//! # VMAs
//!
//! Every VMA is copied in address order except `VM_DONTCOPY` ones. A copy loses the locked bits. A
//! `VM_WIPEONFORK` copy starts without anon_vma (its memory is fresh); any other copy of a VMA with an
//! anon_vma gets one through `anon_vma_fork` (the parent's chain plus a child anon_vma, or a recycled one),
//! which makes it a "fork child" for the merge rules. Files and shmem objects are shared, and each file VMA of
//! the child is registered with its file (`vma_interval_tree_insert_after`). The break, the layout and the
//! protection-key state (allocation map, execute-only key, PKRU) are inherited; so are seals (`VM_SEALED` is a
//! flag like the others), and the hugetlb pools and the memory are the parent's.
//!
//! The child starts with `locked_vm` 0 and no locked VMA (`mm_init`, the copy drops `VM_LOCKED_MASK`), and
//! inherits only `VM_INIT_DEF_MASK` of `def_flags` (so not `mlockall(MCL_FUTURE)`'s `VM_LOCKED`: checked on the
//! live kernel).
//!
//! The child's tree is built as `dup_mmap` builds it since 6.8 ([`ForkMode::Dup`]): an O(n) depth-first copy
//! of the parent's tree (`MapleTree::dup`, the kernel's `__mt_dup`) whose every entry is replaced by the child's
//! own pool VMA; the ranges of `VM_DONTCOPY` VMAs are then cleared from the copy. Before 6.8
//! ([`ForkMode::Reinsert`], kept for comparison) each copied VMA was stored into an empty tree in turn.
//!
//! # One pass
//!
//! As the kernel's `dup_mmap` (one `for_each_vma` loop over the copied tree), each parent VMA is handled once, in
//! the tree copy's callback: write-locked, copied into the next child VMA and attached, and noted for the page
//! pass below only if that pass has work for it (a file VMA to register, or entries to copy). The parents are
//! write-locked [`LOCK_BATCH`] at a time, before the first of them is read, by `vma_start_write_bulk` (the
//! kernel's `vma_start_write` of each, with one fence per batch and no read-modify-write for a VMA without
//! readers: `vma::lock`, "Bulk write lock"). The child's VMAs come from the pool in one batch
//! (`VmaPool::alloc_bulk`); each is handed out, write-locked and filled in one write section of its lockless
//! readers' count (`VmaBatch::next_fork_copy`, `Vma::init_fork_child`: `vm_mm`, the child's epoch as
//! `vma_start_write_unpublished` would store it, without its fence, since no other thread can reach the child
//! before fork returns, then the parent's fields by plain stores, the file and name shared by a count
//! increment, the anon_vma chain's lock taken only when there is a chain); the child's epoch is read once per
//! fork.
//!
//! The copy is bound by memory, not instructions: per VMA it reads the parent's two lines, owns and fills the
//! child's two, and copies a share of a node (BENCHMARKS.md "Fork"). So that the misses overlap instead of
//! following each other, each parent is prefetched when the tree copy's look-ahead shows it
//! (`MapleTree::dup_ahead`: the values of the next leaf when a leaf's copy starts, so up to a leaf before its
//! lock and copy), and each child VMA sixteen ahead of its fill for ownership (`prefetchw`), so that its stores
//! find the lines owned. The look-ahead's queue is a ring of cells ([`AheadRing`]), shared by the look-ahead
//! and the copy callback.
//!
//! # Pages
//!
//! `copy_page_range` copies the page-table entries of each VMA that needs it (`vma_needs_copy`: it has an
//! anon_vma (private pages, or markers), or a `VM_COPY_ON_FORK` flag such as `VM_MAYBE_GUARD`; never into a
//! `VM_WIPEONFORK` copy, which starts empty): private anonymous pages are write-protected on both sides and
//! shared until a write copies them (`do_wp_page`), shared pages stay shared, guard markers are copied. A
//! file VMA without an anon_vma is not copied: the child faults its pages in again from the page cache. The
//! parent's VMAs are write-locked throughout (no fault in them), file VMAs' copies hold the file's rmap lock
//! (no truncation between the child's registration and its copy), and once the entries are copied a grace
//! period (`flush_tlb_mm`) lets every store the parent's threads were making through an entry the copy
//! write-protected land before fork returns.
//!
//! # Failure
//!
//! Every allocation may fail: the child's VMAs and tree nodes (a failed tree copy frees what it made), its top
//! table, the tables and frames of the copy. Any failure drops the child (its exit: every VMA leaves, every
//! entry is zapped, every table freed), so nothing leaks and the parent keeps its VMAs and its contents (the
//! entries the copy write-protected stay so, as in Linux; the next write reuses the page).

use std::sync::Arc;

use vmspace_pgtable::{CopyVma, PageTable, vma_needs_copy};

use super::tree::{VmaExt, Vmas};
use super::{AnonState, Errno, Mm, MmParts, MmWrite};
use crate::vma::lock::unpublished_lock_seq;
use crate::vma::{
    MmLocking, VmFlags, Vma, VmaBatch, VmaPool, vma_mark_attached, vma_mark_detached, vma_start_write,
    vma_start_write_bulk,
};

/// How fork builds the child's VMA tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ForkMode {
    /// Linux 6.8 and later: the tree's O(n) copy (`__mt_dup`), then the `VM_DONTCOPY` ranges cleared.
    #[default]
    Dup,
    /// Before 6.8: every copied VMA stored into an empty tree in turn (O(n log n)).
    Reinsert,
}

impl Mm {
    /// `fork()`: returns the child's address space (the parent is unchanged but for the write protection of its
    /// private pages, which copy-on-write needs).
    pub fn fork(&self) -> Result<Mm, Errno> {
        self.fork_with(ForkMode::Dup)
    }

    /// `fork()` with the child's tree built the given way.
    pub fn fork_with(&self, mode: ForkMode) -> Result<Mm, Errno> {
        self.locked(|mm| mm.dup_mmap(mode))
    }
}

/// How many parent VMAs are write-locked at once (`vma_start_write_bulk`: one fence per batch): the parent
/// being copied and the ones after it the look-ahead has shown, every one of them prefetched when it was shown
/// (up to a leaf earlier), so that the batch's loads and stores find lines in the cache or on their way in.
const LOCK_BATCH: usize = 8;

/// How many VMAs of the batch ahead of the one being filled are prefetched for writing: about one leaf's worth,
/// so that the child's lines arrive, owned, while the VMAs before them are filled.
const CHILD_PREFETCH: usize = 16;

/// Starts loading both lines of parent `v`, which fork reads: line 0 (range, flags, `vm_mm`, `vm_lock_seq`,
/// file, anon_vma) and `vm_refcnt`'s line (the write lock; the anon name and the anon_vma chain). A hint only.
#[inline(always)]
fn prefetch_vma(v: &Vma) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let base = std::ptr::from_ref(v).cast::<i8>();
        for line in 0..std::mem::size_of::<Vma>() / 64 {
            // SAFETY: `prefetcht0` is a hint that never faults and reads nothing the program sees; the address
            // is inside a live `Vma` (pool VMAs are never freed to the allocator). SSE is part of x86-64.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(line * 64)) };
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = v;
}

/// Starts loading both lines of child `v`, which fork writes whole, for ownership (`prefetchw`: the line comes
/// in exclusive, so the stores that follow need no second request). A hint only; a CPU without the
/// instruction executes it as a no-op (it lies in the `0F 0D` hint space).
#[inline(always)]
fn prefetch_vma_write(v: &Vma) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let base = std::ptr::from_ref(v).cast::<u8>();
        for line in 0..std::mem::size_of::<Vma>() / 64 {
            // SAFETY: `prefetchw` is a hint: it never faults, writes nothing and changes no register or flag the
            // program sees; the address is inside a live `Vma` (pool VMAs are never freed to the allocator).
            unsafe {
                std::arch::asm!(
                    "prefetchw [{p}]",
                    p = in(reg) base.wrapping_add(line * 64),
                    options(nostack, preserves_flags, readonly)
                )
            };
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = v;
}

/// The child's VMAs, taken from the pool in one batch before the copy ([`VmaPool::alloc_bulk`]: one per parent
/// VMA) and handed out in order, each prefetched [`CHILD_PREFETCH`] VMAs ahead; whatever is not handed out goes
/// back to the pool with the batch.
struct ChildVmas<'p> {
    pool: &'static VmaPool,
    batch: VmaBatch<'p>,
    /// The child's write epoch as its VMAs' `vm_lock_seq` (`unpublished_lock_seq`), read once: the child's mmap
    /// write lock is held for the whole copy.
    lock_seq: u32,
}

impl ChildVmas<'static> {
    /// `n` VMAs of the child `locking`; `ENOMEM` (nothing taken) under failure injection.
    fn alloc(pool: &'static VmaPool, locking: &MmLocking, n: usize) -> Result<Self, Errno> {
        Ok(ChildVmas { pool, batch: pool.alloc_bulk(locking, n)?, lock_seq: unpublished_lock_seq(locking) })
    }

    /// The next VMA of the batch (there is one per parent VMA: the caller takes at most that many).
    #[inline]
    fn take(&mut self) -> &'static Vma {
        if let Some(ahead) = self.batch.peek(CHILD_PREFETCH) {
            prefetch_vma_write(ahead);
        }
        self.batch.next().expect("a child VMA per parent VMA")
    }

    /// The next VMA of the batch, made the child's copy of `parent` ([`VmaBatch::next_fork_copy`]).
    #[inline]
    fn take_copy(&mut self, parent: &Vma, flags: VmFlags, anon: Option<AnonState>) -> &'static Vma {
        if let Some(ahead) = self.batch.peek(CHILD_PREFETCH) {
            prefetch_vma_write(ahead);
        }
        self.batch.next_fork_copy(self.lock_seq, parent, flags, anon).expect("a child VMA per parent VMA")
    }
}

/// The parents the tree copy has shown ahead of its callback (`MapleTree::dup_ahead`), in order: a ring of
/// [`AHEAD_CAP`] slots with free-running indices, shared by the look-ahead (which pushes) and the copy callback
/// (which reads the front few and pops), both closures of one call on one thread, hence the cells. The
/// look-ahead runs at most a leaf ahead, so at most two leaves' values are queued at once; a push beyond the
/// ring's capacity would break the write-lock batches built from it and is refused by an assertion.
struct AheadRing {
    slots: [std::cell::Cell<Option<&'static Vma>>; AHEAD_CAP],
    /// Index of the front (the parent being copied), free-running.
    head: std::cell::Cell<usize>,
    /// One past the last pushed, free-running.
    tail: std::cell::Cell<usize>,
}

/// The look-ahead ring's capacity: a power of two above two leaves' values (16 each).
const AHEAD_CAP: usize = 64;

impl AheadRing {
    fn new() -> Self {
        AheadRing {
            slots: std::array::from_fn(|_| std::cell::Cell::new(None)),
            head: std::cell::Cell::new(0),
            tail: std::cell::Cell::new(0),
        }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.tail.get() - self.head.get()
    }

    #[inline(always)]
    fn push(&self, v: &'static Vma) {
        let t = self.tail.get();
        assert!(t - self.head.get() < AHEAD_CAP, "the tree copy's look-ahead ran more than a leaf ahead");
        self.slots[t % AHEAD_CAP].set(Some(v));
        self.tail.set(t + 1);
    }

    /// The parent `k` places after the front, if shown already.
    #[inline(always)]
    fn get(&self, k: usize) -> Option<&'static Vma> {
        if k < self.len() { self.slots[(self.head.get() + k) % AHEAD_CAP].get() } else { None }
    }

    #[inline(always)]
    fn pop(&self) {
        debug_assert!(self.len() > 0);
        self.head.set(self.head.get() + 1);
    }
}

/// A copied VMA the page pass has work for (a file VMA to register, or entries to copy): parent, child.
type PagePass = Vec<(&'static Vma, &'static Vma)>;

/// Whether fork copies the page-table entries of parent VMA `p` with flags `fl` (module docs, "Pages").
fn needs_copy(fl: VmFlags, p: &Vma) -> bool {
    !fl.intersects(VmFlags::WIPEONFORK)
        && (vma_needs_copy(fl, p.has_anon_vma(), false) || fl.intersects(VmFlags::COPY_ON_FORK))
}

/// Makes the next VMA of `batch` (of the child `locking`) the child's copy of `parent` (write-locked by the
/// caller), attached: every field of the parent but the lock state, the locked bits and, for `VM_WIPEONFORK`,
/// the anon_vma (`vm_area_dup` plus `dup_mmap`'s fixes), write-locked as `vma_start_write_unpublished` would
/// (the child is not reachable by any other thread until fork returns: no fence; `vma_start_write`'s pairs with
/// faults in the child, which cannot run yet), all in one write section ([`VmaBatch::next_fork_copy`]). Returns
/// the copy and whether the page pass has work for it: a file VMA to register with its file, or entries to copy
/// (`vma_needs_copy`); a VMA without an anon_vma, file or copy flag is done here.
#[inline(always)]
fn copy_vma(
    locking: &MmLocking,
    batch: &mut ChildVmas<'static>,
    parent: &'static Vma,
    fl: VmFlags,
) -> (&'static Vma, bool) {
    // Fork the anon_vma first: its reuse rule reads the counters the copy would change. Without one (the parent's
    // `anon_vma` cell mirrors its chain's owner) the chain's lock is not even taken.
    let has_anon = parent.has_anon_vma();
    let anon = (has_anon && !fl.intersects(VmFlags::WIPEONFORK)).then(|| AnonState::fork(&parent.anon()));
    let v = batch.take_copy(parent, fl & !VmFlags::LOCKED_MASK, anon);
    vma_mark_attached(locking, v);
    (v, parent.is_file_backed() || needs_copy(fl, parent))
}

impl MmWrite<'_> {
    /// `dup_mmap`, under the parent's mmap write lock (module docs). One pass over the parent's VMAs, in the tree
    /// copy's callback as the kernel's loop over the copied tree: write-lock the parent VMA, copy it into the
    /// next VMA of the batch, and note it for the page pass only if that has work for it.
    fn dup_mmap(&mut self, mode: ForkMode) -> Result<Mm, Errno> {
        let n = self.st.map_count;
        // The tree copy plus one VMA per copied VMA.
        self.charge_budget(n + 1)?;
        let pt = Arc::new(PageTable::new(&self.mem)?);
        let locking = MmLocking::new();
        let pool = self.vmas.pool;
        let mut pages = PagePass::new();
        // The copy locks the parent's tree itself (and write-locks each parent VMA as it goes).
        self.release_tree();
        let (tree, copied) = {
            let _w = locking.write_lock();
            let mut batch = ChildVmas::alloc(pool, &locking, n as usize)?;
            match mode {
                ForkMode::Dup => self.dup_tree(&locking, &mut batch, &mut pages)?,
                ForkMode::Reinsert => self.reinsert_tree(&locking, &mut batch, &mut pages)?,
            }
        };
        let parts = MmParts {
            brk: Some(self.st.brk),
            start_brk: Some(self.st.start_brk),
            alloc_budget: self.st.alloc_budget,
            // `VM_INIT_DEF_MASK` only (module docs).
            def_flags: self.st.def_flags & VmFlags::INIT_DEF_MASK,
            // `arch_dup_pkeys` (and `dup_mm`'s copy without PKU); the forking thread's PKRU goes with it.
            pkeys: Some(self.st.pkeys),
            pkru: Some(self.pkru()),
            sealed: self.st.sealed,
            map_count: copied,
            next_shmem_ino: Some(self.next_shmem_ino.load(vmspace_rcu::sync::Ordering::Relaxed)),
            // The host's pools are one for the whole process tree.
            huge: Some(self.huge.clone()),
        };
        let child =
            Mm::from_parts(self.cfg.clone(), Vmas::with(pool, locking, tree, pt), self.mem.clone(), parts);
        // The pages, in address order: on failure the child's drop tears down whatever was made.
        let mut wrprotected = false;
        for (p, c) in pages {
            debug_assert_eq!((c.start(), c.end()), (p.start(), p.end()));
            let fl = p.fl();
            let file = if p.is_file_backed() { p.file() } else { None };
            let _rmap = file.as_ref().map(|f| f.rmap_lock());
            child.i_mmap_register(c);
            if needs_copy(fl, p) {
                let cv = CopyVma { start: p.start(), end: p.end(), flags: fl, dst_uffd_wp: false };
                self.pt().copy_page_range(child.pt(), &cv)?;
                wrprotected |= vmspace_pgtable::is_cow_mapping(fl);
            }
        }
        // flush_tlb_mm: stores through entries the copy write-protected have landed.
        if wrprotected {
            self.pt().flush_tlb();
        }
        Ok(child)
    }

    /// The child's tree by `__mt_dup` (module docs): the copy, whose callback copies each VMA ([`copy_vma`]),
    /// then the `VM_DONTCOPY` ranges cleared. Returns the tree and the number of VMAs copied; on failure
    /// everything made is freed.
    fn dup_tree(
        &self,
        locking: &MmLocking,
        batch: &mut ChildVmas<'static>,
        pages: &mut PagePass,
    ) -> Result<(vmspace_maple::MapleTree<&'static Vma>, u64), Errno> {
        let pool = batch.pool;
        let mut copied = 0u64;
        let mut dontcopy: Vec<(u64, u64)> = Vec::new();
        // The parents the tree copy has shown ahead (up to a leaf beyond the current one), each prefetched
        // when shown.
        let queue = AheadRing::new();
        // How many parents at the queue's front are write-locked already (the batch of the last bulk lock).
        let mut locked_ahead = 0usize;
        let locking_parent = self.locking();
        let dup = self.tree().dup_ahead(
            |parent: &'static Vma| {
                prefetch_vma(parent);
                queue.push(parent);
            },
            |_first, _last, parent: &'static Vma| -> Result<&'static Vma, Errno> {
                debug_assert!(
                    queue.get(0).is_some_and(|f| std::ptr::eq(f, parent)),
                    "the look-ahead is in order"
                );
                // As Linux since 6.4: the parent VMA is write-locked before it is read, so that no page fault runs
                // on it until the parent's mmap write lock is released; here with the next parents of the
                // look-ahead, LOCK_BATCH at a time (module docs). The parent tree's writer mutex is not held by
                // this call (released above; the copy holds the tree's own lock, as before).
                if locked_ahead == 0 {
                    let mut lock = [parent; LOCK_BATCH];
                    let n = queue.len().min(LOCK_BATCH);
                    for (k, slot) in lock[..n].iter_mut().enumerate().skip(1) {
                        *slot = queue.get(k).unwrap_or(parent);
                    }
                    vma_start_write_bulk(locking_parent, &lock[..n]);
                    locked_ahead = n;
                }
                locked_ahead -= 1;
                queue.pop();
                let fl = parent.fl();
                if fl.intersects(VmFlags::DONTCOPY) {
                    // The slot gets a never-attached VMA, cleared below.
                    dontcopy.push((parent.start(), parent.end()));
                    return Ok(batch.take());
                }
                let (v, page_work) = copy_vma(locking, batch, parent, fl);
                if page_work {
                    pages.push((parent, v));
                }
                copied += 1;
                Ok(v)
            },
            |v: &'static Vma| {
                if !v.is_detached() {
                    vma_mark_detached(locking, v);
                }
                pool.free(v);
            },
        );
        let tree = dup.map_err(|_| Errno::ENOMEM)?;
        if dontcopy.is_empty() {
            return Ok((tree, copied));
        }
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
                    free_tree(locking, pool, &tree);
                    return Err(Errno::ENOMEM);
                }
            }
        }
        drop(w);
        Ok((tree, copied))
    }

    /// The child's tree the way `dup_mmap` built it before 6.8 (module docs): each parent VMA write-locked and,
    /// unless `VM_DONTCOPY`, copied ([`copy_vma`]) and stored into an empty tree in turn. On failure everything
    /// made is freed.
    fn reinsert_tree(
        &self,
        locking: &MmLocking,
        batch: &mut ChildVmas<'static>,
        pages: &mut PagePass,
    ) -> Result<(vmspace_maple::MapleTree<&'static Vma>, u64), Errno> {
        let pool = batch.pool;
        let tree = vmspace_maple::MapleTree::new();
        let mut copied = 0u64;
        for p in self.areas() {
            self.write_lock_vma(p);
            if p.fl().intersects(VmFlags::DONTCOPY) {
                continue;
            }
            let (v, page_work) = copy_vma(locking, batch, p, p.fl());
            if tree.store_range(p.start(), p.end() - 1, Some(v)).is_err() {
                vma_mark_detached(locking, v);
                pool.free(v);
                free_tree(locking, pool, &tree);
                return Err(Errno::ENOMEM);
            }
            if page_work {
                pages.push((p, v));
            }
            copied += 1;
        }
        Ok((tree, copied))
    }
}

/// Detaches and frees every VMA of a child tree that will not be used. The caller holds the child's mmap
/// write lock. No reader has seen the child's tree, but the order is the one every tear-down follows (the
/// `Mm`'s drop): the whole tree is cleared first (one NULL store over the key space, which allocates no node),
/// then each VMA is detached and freed.
fn free_tree(locking: &MmLocking, pool: &'static VmaPool, tree: &vmspace_maple::MapleTree<&'static Vma>) {
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
