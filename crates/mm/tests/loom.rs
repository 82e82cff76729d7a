//! Loom models of the per-VMA lock protocol and the mmap_lock (`RUSTFLAGS="--cfg loom" cargo test --release
//! -p vmspace-mm --test loom`).
//!
//! Each model pairs the lock protocol with a `loom::cell::UnsafeCell` payload that stands for "the VMA's
//! contents": readers read it only while they hold a read lock they obtained, writers write it only while they
//! hold the corresponding write lock (or own a detached VMA). Loom reports any payload access that is not
//! ordered by happens-before, so a protocol that lets a reader in while a writer works (or lets the writer free
//! a VMA a reader still uses) fails the model, whatever the values read.
//!
//! Models:
//! - `reader_vs_writer`: `vma_start_read` against `vma_start_write`: never both inside.
//! - `reader_vs_detach`: `vma_mark_detached` waits for a straggler reader before the VMA is reused.
//! - `reader_vs_recycle_other_mm` / `_same_mm`: the VMA is freed to the pool and reallocated (to another mm, or
//!   to the same mm at another range) while a reader holds a stale pointer: the reader fails or re-validates.
//! - `mmap_write_unlock_releases_all`: every VMA write lock of an epoch ends at `mmap_write_unlock`.
//! - `mmap_lock_reader_writer` / `mmap_lock_downgrade`: the rwsem itself.
//! - `rcu_arc_reader_vs_replace`: a VMA attribute replaced under a reader stays alive until the reader's own
//!   reference is taken.
//! - `lockless_snapshot_vs_writer` / `_vs_two_epochs`: the lockless reader's copy (`vma_snapshot_lockless`)
//!   against a writer changing the VMA's range and flags in one or two write sections: an accepted copy is
//!   one state, never a mix; the reader takes no reference (the writer never waits for it).
//! - `lockless_cached_epoch_vs_later_writer` / `_vs_earlier_writer` / `_vs_unlock_relock`: the lockless copy
//!   with a cached epoch (`vma::lockless`, "The cached epoch"): a writer that locks the VMA after the reader
//!   read its epoch, one whose lock began before (the cache holds that very epoch), and two sections, an
//!   unlock and a relock, across the copy: the re-read of `mm_lock_seq` is skipped only for an epoch that
//!   ended before the cached one, and an accepted copy is one state. `lockless_published_epoch_vs_writer`:
//!   a reader starting from the epoch another reader published skips its re-read and still copies one state.
//! - `lockless_snapshot_vs_recycle_other_mm` / `_same_mm`: the VMA is unmapped, freed and reused while the
//!   lockless reader copies it through a stale pointer: the copy is refused, or is the first life's (or, in
//!   the same mm, the new life's) state, never another mm's or a mix.
//! - `lockless_maps_vs_mprotect_split`: the real address space: `maps` in lockless mode while `mprotect`
//!   splits the VMA: the text is the before or the after state.
//! - `fault_under_vma_lock_vs_munmap`: the real address space (`Mm`, its maple tree, its page table): a
//!   thread faults a page in under the VMA's read lock (`lock_vma_under_rcu`, `handle_mm_fault`) while another
//!   munmaps the VMA. The fault either completes before the munmap write-locks the VMA (and the munmap zaps its
//!   page) or finds no VMA (SIGSEGV); never a page in an unmapped range. The thread then reads the VMA's other
//!   page through the emulated MMU (a lockless walk): the munmap frees the pages and the page tables it empties
//!   (`free_pgd_range`) only a grace period after unlinking them, so the walk never touches a freed table
//!   (pgtable's loom build marks freed tables and checks every access through an entry); afterwards nothing is
//!   left but the top table.
//!   Since the fault path tries the speculative fault first (`space::fault`, "Speculative faults"), this model
//!   also checks the speculative fault against munmap: the racing fault finds its table in place and copies the
//!   VMA without a reference; it completes only if its copy is still valid under the PTE lock.
//! - `speculative_fault_vs_mprotect`: the real address space: a speculative write fault against `mprotect`
//!   making the VMA read-only: once `mprotect` returns no entry is writable, whichever went first (the fault's
//!   page, installed before `change_protection` locked its table, is write-protected by it; a fault whose copy
//!   went stale falls back to the VMA lock and then answers SIGSEGV or maps the zero page).
//! - `bulk_write_lock_vs_reader_first` / `_second`: `vma_start_write_bulk` (fork's parent: `vm_lock_seq`
//!   stores, one SeqCst fence, the counts read) against `vma_start_read` on either VMA of its batch: never both
//!   inside. `bulk_write_lock_waits_for_holder`: a reader holding its lock makes the writer wait.
//!   `bulk_write_lock_vs_lockless`: the lockless copy against a bulk-locked writer is one state.
//! - `speculative_fault_vs_fork`: the real address space: a speculative write fault against `fork`: the page
//!   is copied (write-protected on both sides) or installed after the copy, and the child never sees the
//!   parent's later write.
//! - `munmap_downgrade_vs_neighbour_fault`: the real address space: a fault in the part of a merged VMA that
//!   stays while munmap removes the other part, downgrades the mmap lock and zaps under the read hold: the fault
//!   always completes and the table the two parts share is kept.
//!
//! Under loom a parked thread only yields (see `vma::park`), so these models check the atomics and orderings
//! of the protocols, not the wake-ups; lost wake-ups are the business of the std tests (`mmap_lock` unit tests,
//! `vma_lock_stress`).
#![cfg(loom)]

use std::sync::Arc as StdArc;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicPtr, Ordering};
use loom::thread;

use vmspace_mm::vma::{
    LocklessEpoch, MmLocking, VmFlags, Vma, VmaFind, VmaLockFail, VmaLookup, VmaPool, lock_vma_under_rcu,
    vma_is_write_locked, vma_mark_attached, vma_mark_detached, vma_snapshot_lockless, vma_start_read,
    vma_start_write, vma_start_write_bulk,
};
use vmspace_rcu::Guard;

/// Reads the payload. Loom checks that the read is ordered after every write.
fn get(c: &UnsafeCell<u64>) -> u64 {
    // SAFETY: loom's cell checks the access; a race fails the model instead of being UB.
    c.with(|p| unsafe { *p })
}

/// Overwrites the payload (checked by loom like `get`).
fn put(c: &UnsafeCell<u64>, v: u64) {
    // SAFETY: as in `get`.
    c.with_mut(|p| unsafe { *p = v });
}

/// Adds to the payload (checked by loom like `get`).
fn add(c: &UnsafeCell<u64>, v: u64) {
    // SAFETY: as in `get`.
    c.with_mut(|p| unsafe { *p += v });
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bound(2, f);
}

fn model_bound(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    // The real address space's calls take many atomic steps (tree, pool, counters, page table).
    b.max_branches = 5_000_000;
    b.check(f);
}

/// The state of one model: a pool, mm A, one VMA attached at [0x1000, 0x3000), and its payload.
struct World {
    pool: &'static VmaPool,
    mm: MmLocking,
    vma: &'static Vma,
    payload: UnsafeCell<u64>,
    /// A one-entry "tree": the VMA published for lookups (null = unmapped).
    slot: AtomicPtr<Vma>,
}

// SAFETY: the payload is only touched under the lock protocol the models check; loom's UnsafeCell reports any
// unsynchronised access, which is the point of the models.
unsafe impl Sync for World {}
// SAFETY: as above; all other fields are Send.
unsafe impl Send for World {}

impl VmaLookup for World {
    fn vma_at(&self, _addr: u64, _guard: &Guard) -> Option<&'static Vma> {
        // Acquire: pairs with the writer's release store of the slot.
        let p = self.slot.load(Ordering::Acquire);
        // SAFETY: the slot only ever holds null or a `&'static Vma` from the pool (type-stable memory).
        unsafe { p.as_ref() }
    }
}

impl VmaFind for World {
    fn vma_find(&self, addr: u64, guard: &Guard) -> Option<&'static Vma> {
        self.vma_at(addr, guard)
    }
}

fn world() -> Arc<World> {
    let pool = VmaPool::leak_new();
    let mm = MmLocking::new();
    let vma = pool.alloc(&mm).unwrap();
    {
        let _w = mm.write_lock();
        vma.set_range(&mm, 0x1000, 0x3000);
        vma_start_write(&mm, vma);
        vma_mark_attached(&mm, vma);
    }
    Arc::new(World {
        pool,
        mm,
        vma,
        payload: UnsafeCell::new(0),
        slot: AtomicPtr::new(vma as *const Vma as *mut Vma),
    })
}

#[test]
fn reader_vs_writer() {
    model(|| {
        let w = world();
        let r = w.clone();
        let reader = thread::spawn(move || {
            if let Ok(g) = vma_start_read(&r.mm, r.vma) {
                // Either before the writer's section (0) or after the epoch ended (1).
                let v = get(&r.payload);
                assert!(v == 0 || v == 1);
                assert_eq!((g.start(), g.end()), if v == 0 { (0x1000, 0x3000) } else { (0x2000, 0x4000) });
                drop(g);
            }
        });
        {
            let _wl = w.mm.write_lock();
            vma_start_write(&w.mm, w.vma);
            w.vma.set_range(&w.mm, 0x2000, 0x4000);
            put(&w.payload, 1);
        }
        reader.join().unwrap();
        assert_eq!(w.vma.refcnt(), 1);
    });
}

#[test]
fn reader_vs_detach() {
    model(|| {
        let w = world();
        let r = w.clone();
        let reader = thread::spawn(move || {
            if let Some(g) = lock_vma_under_rcu(&r.mm, &*r, 0x1000) {
                assert!(g.contains(0x1000));
                let v = get(&r.payload);
                assert_eq!(v, 0);
            }
        });
        {
            let _wl = w.mm.write_lock();
            vma_start_write(&w.mm, w.vma);
            // Unpublish, then detach: waits for a straggler that incremented before seeing the write lock.
            w.slot.store(std::ptr::null_mut(), Ordering::Release);
            vma_mark_detached(&w.mm, w.vma);
            assert_eq!(w.vma.refcnt(), 0);
            // The VMA is now ours alone: "reuse its memory".
            put(&w.payload, 7);
        }
        reader.join().unwrap();
        assert_eq!(w.vma.refcnt(), 0);
        w.pool.free(w.vma);
    });
}

/// The writer side of the recycle models: unmaps the world's VMA (unpublished, then detached under the write
/// lock), frees it to the pool and allocates it again at once for `new_mm` (no grace period): the pool hands
/// back the same object, which the caller then attaches in its new life.
fn unmap_and_reuse(w: &World, new_mm: &MmLocking) -> &'static Vma {
    {
        let _wl = w.mm.write_lock();
        vma_start_write(&w.mm, w.vma);
        w.slot.store(std::ptr::null_mut(), Ordering::Release);
        vma_mark_detached(&w.mm, w.vma);
    }
    w.pool.free(w.vma);
    let again = w.pool.alloc(new_mm).unwrap();
    assert!(std::ptr::eq(again, w.vma));
    again
}

fn recycle(same_mm: bool) {
    model(move || {
        let w = world();
        let other = StdArc::new(MmLocking::new());
        let r = w.clone();
        let reader = thread::spawn(move || {
            // The reader looks for 0x1000 in its mm and may meet the recycled VMA.
            if let Some(g) = lock_vma_under_rcu(&r.mm, &*r, 0x1000) {
                assert_eq!(g.mm_id(), r.mm.id());
                assert!(g.contains(0x1000));
                // Still the first life of the VMA: its payload was not rewritten.
                assert_eq!(get(&r.payload), 0);
            }
            // A raw stale lock attempt must not succeed for a VMA that now belongs elsewhere.
            if let Ok(g) = vma_start_read(&r.mm, r.vma) {
                assert_eq!(g.mm_id(), r.mm.id());
                let v = get(&r.payload);
                if v == 0 {
                    assert_eq!((g.start(), g.end()), (0x1000, 0x3000));
                } else {
                    assert!(same_mm);
                    assert_eq!((g.start(), g.end()), (0x8000, 0x9000));
                }
            }
        });
        let new_mm: &MmLocking = if same_mm { &w.mm } else { &other };
        let again = unmap_and_reuse(&w, new_mm);
        {
            let _wl = new_mm.write_lock();
            again.set_range(new_mm, 0x8000, 0x9000);
            put(&w.payload, 2);
            vma_start_write(new_mm, again);
            vma_mark_attached(new_mm, again);
        }
        reader.join().unwrap();
        assert_eq!(again.refcnt(), 1);
    });
}

#[test]
fn reader_vs_recycle_other_mm() {
    recycle(false);
}

#[test]
fn reader_vs_recycle_same_mm() {
    recycle(true);
}

#[test]
fn mmap_write_unlock_releases_all() {
    model(|| {
        let w = world();
        let second = w.pool.alloc(&w.mm).unwrap();
        {
            let _wl = w.mm.write_lock();
            second.set_range(&w.mm, 0x5000, 0x6000);
            vma_start_write(&w.mm, second);
            vma_mark_attached(&w.mm, second);
        }
        let payload2 = Arc::new(UnsafeCell::new(0u64));
        let (r, p2) = (w.clone(), payload2.clone());
        let reader = thread::spawn(move || {
            let a = vma_start_read(&r.mm, r.vma).map(|g| {
                let v = get(&r.payload);
                assert!(v == 0 || v == 1);
                drop(g);
            });
            let b = vma_start_read(&r.mm, second).map(|g| {
                let v = get(&p2);
                assert!(v == 0 || v == 1);
                drop(g);
            });
            // Never "locked" forever: a failure can only be WriteLocked here.
            for res in [a.err(), b.err()].into_iter().flatten() {
                assert_eq!(res, VmaLockFail::WriteLocked);
            }
        });
        {
            let _wl = w.mm.write_lock();
            vma_start_write(&w.mm, w.vma);
            vma_start_write(&w.mm, second);
            put(&w.payload, 1);
            put(&payload2, 1);
            // Both write-locked until the guard drops.
        }
        reader.join().unwrap();
        // After mmap_write_unlock both can be read-locked again, with no per-VMA unlock.
        assert!(vma_start_read(&w.mm, w.vma).is_ok());
        assert!(vma_start_read(&w.mm, second).is_ok());
    });
}

#[test]
fn mmap_lock_reader_writer() {
    model(|| {
        let mm = Arc::new(MmLocking::new());
        let data = Arc::new(UnsafeCell::new(0u64));
        let (m2, d2) = (mm.clone(), data.clone());
        let writer = thread::spawn(move || {
            let _w = m2.write_lock();
            assert!(m2.is_write_locked());
            add(&d2, 1);
        });
        {
            let _r = mm.read_lock();
            let v = get(&data);
            assert!(v <= 1);
        }
        let _w = mm.write_lock();
        add(&data, 1);
        drop(_w);
        writer.join().unwrap();
        assert_eq!(get(&data), 2);
        assert!(!mm.is_contended());
    });
}

#[test]
fn mmap_lock_downgrade() {
    model(|| {
        let mm = Arc::new(MmLocking::new());
        let data = Arc::new(UnsafeCell::new(0u64));
        let (m2, d2) = (mm.clone(), data.clone());
        let other = thread::spawn(move || {
            let _w = m2.write_lock();
            add(&d2, 10);
        });
        let w = mm.write_lock();
        add(&data, 1);
        let r = w.downgrade();
        assert!(!mm.is_write_locked());
        // Still a reader: the other writer cannot be inside.
        let v = get(&data);
        assert!(v == 1 || v == 11);
        drop(r);
        other.join().unwrap();
        assert_eq!(get(&data), 11);
    });
}

/// A payload that records its own destruction in a flag outside itself.
struct Tracked {
    dropped: Arc<loom::sync::atomic::AtomicBool>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // SeqCst: test bookkeeping, read by the reader's assertion.
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[test]
fn rcu_arc_reader_vs_replace() {
    // A reader clones an attribute while the writer replaces it: the old value must stay alive until the
    // reader's own reference is taken (the writer's reference is given back only after a grace period).
    model(|| {
        let dropped = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let cell = Arc::new(vmspace_mm::vma::RcuArc::<Tracked>::empty());
        cell.store(Some(StdArc::new(Tracked { dropped: dropped.clone() })));
        let c2 = cell.clone();
        let reader = thread::spawn(move || {
            if let Some(a) = c2.load() {
                // SeqCst: test bookkeeping.
                assert!(!a.dropped.load(Ordering::SeqCst), "attribute freed under a reader");
            }
        });
        cell.store(None);
        reader.join().unwrap();
        assert!(cell.load().is_none());
    });
}

/// The address of the VMA that the fault models race on (under loom tables have 4 entries: the page table
/// spans 1 MiB, `vmspace_pgtable::VA_END`).
const A: u64 = 0x2_0000;
/// The page size.
const P: u64 = 4096;

/// A write fault at `A` (the speculative fault first, then under the VMA's read lock) on one thread against
/// `racer` on another, over a private anonymous VMA of two pages whose second page (and so its anon_vma and
/// PTE table) is already faulted in. `faulter` makes the fault and returns its answer: a new anonymous page
/// (the fault went first) or SIGSEGV (`EFAULT`, the racer went first); any other answer fails the model.
/// `after` checks the state once both threads are done; the address space is validated before it. Both orders
/// must be explored (two threads, preemption bound 2); `racer_name` names the racer in the printed counts.
fn fault_race(
    racer_name: &str,
    faulter: fn(&vmspace_mm::Mm) -> Result<vmspace_mm::FaultKind, vmspace_mm::Errno>,
    racer: fn(&vmspace_mm::Mm),
    after: fn(&vmspace_mm::Mm),
) {
    use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
    use vmspace_mm::{Access, Errno, FaultKind, MapFlags, Mm, MmConfig, Prot};
    // Outcomes over all executions, [fault first, SIGSEGV] (std atomics: outside the model). Relaxed: counters
    // read after the model.
    let outcomes = StdArc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let counted = outcomes.clone();
    model_bound(2, move || {
        let mm = Arc::new(Mm::new(MmConfig::default()));
        let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        mm.mmap(A, 2 * P, Prot::RW, fixed, None, 0).unwrap();
        // The anon_vma and the PTE table exist: the racing fault can be speculative, and otherwise completes
        // under the VMA lock alone.
        assert_eq!(mm.fault(A + P, Access::Write), Ok(FaultKind::AnonNew));
        let m2 = mm.clone();
        let faulter = thread::spawn(move || faulter(&m2));
        racer(&mm);
        let outcome = match faulter.join().unwrap() {
            Ok(FaultKind::AnonNew) => 0,
            Err(Errno::EFAULT) => 1,
            other => panic!("{other:?}"),
        };
        counted[outcome].fetch_add(1, StdOrdering::Relaxed);
        mm.validate().unwrap();
        after(&mm);
    });
    let [f, e] = [0, 1].map(|i| outcomes[i].load(StdOrdering::Relaxed));
    println!("fault before {racer_name}: {f} executions; SIGSEGV after it: {e}");
    assert!(f > 0 && e > 0, "both orders explored");
}

#[test]
fn fault_under_vma_lock_vs_munmap() {
    // The per-VMA lock (and the RCU section that finds the VMA and walks the page table) against munmap's
    // write lock, tree store, detach, zap and table frees.
    fault_race(
        "munmap",
        |mm| {
            let r = mm.fault(A, vmspace_mm::Access::Write);
            // Then a lockless walk (the emulated MMU's load) of the other page, whose table munmap frees.
            let mut b = [9u8];
            match mm.read(A + P, &mut b) {
                Ok(()) => assert_eq!(b, [0], "the page's bytes"),
                Err(f) => assert_eq!(f.addr, A + P),
            }
            r
        },
        |mm| mm.munmap(A, 2 * P).unwrap(),
        |mm| {
            // Whatever the order, nothing is mapped there now, and the page table agrees with the VMAs.
            assert_eq!(mm.fault(A, vmspace_mm::Access::Read), Err(vmspace_mm::Errno::EFAULT));
            assert!(mm.page_table().pte(A).is_none() && mm.page_table().pte(A + P).is_none());
            vmspace_rcu::synchronize();
            let s = mm.memory().stats();
            assert_eq!((s.frames_in_use, s.frames_pending_free), (0, 0), "{s:?}");
            assert_eq!((s.tables_in_use, s.tables_pending_free), (1, 0), "only the top table: {s:?}");
        },
    );
}

/// The states a lockless copy may show in the writer models: (start, end, flags bits).
fn state(v: &vmspace_mm::VmaSnapshot) -> (u64, u64, u64) {
    (v.start, v.end, v.flags.bits())
}

fn lockless_vs_writer(epochs: usize) {
    model(move || {
        let w = world();
        let r = w.clone();
        let reader = thread::spawn(move || {
            if let Ok(s) = vma_snapshot_lockless(&r.mm, r.vma) {
                let st = state(&s);
                let ok = [(0x1000, 0x3000, 0), (0x2000, 0x4000, VmFlags::READ.bits()), (0x5000, 0x6000, 0)];
                assert!(ok[..=epochs].contains(&st), "a torn copy: {st:x?}");
            }
        });
        {
            let _wl = w.mm.write_lock();
            vma_start_write(&w.mm, w.vma);
            w.vma.set_range(&w.mm, 0x2000, 0x4000);
            w.vma.set_flags(&w.mm, VmFlags::READ);
        }
        if epochs == 2 {
            let _wl = w.mm.write_lock();
            vma_start_write(&w.mm, w.vma);
            w.vma.set_range(&w.mm, 0x5000, 0x6000);
            w.vma.set_flags(&w.mm, VmFlags::from_bits(0));
        }
        reader.join().unwrap();
        // The reader took no reference: the count is the attached VMA's alone.
        assert_eq!(w.vma.refcnt(), 1);
    });
}

#[test]
fn lockless_snapshot_vs_writer() {
    lockless_vs_writer(1);
}

#[test]
fn lockless_snapshot_vs_two_epochs() {
    lockless_vs_writer(2);
}

fn lockless_recycle(same_mm: bool) {
    model(move || {
        let w = world();
        let other = StdArc::new(MmLocking::new());
        let r = w.clone();
        let reader = thread::spawn(move || {
            // A stale pointer: the reader found the VMA before it was unmapped.
            if let Ok(s) = vma_snapshot_lockless(&r.mm, r.vma) {
                assert_eq!(s.mm_id, r.mm.id());
                let st = (s.start, s.end);
                assert!(st == (0x1000, 0x3000) || (same_mm && st == (0x8000, 0x9000)), "{st:x?}");
            }
        });
        let new_mm: &MmLocking = if same_mm { &w.mm } else { &other };
        let again = unmap_and_reuse(&w, new_mm);
        {
            let _wl = new_mm.write_lock();
            vma_start_write(new_mm, again);
            again.set_range(new_mm, 0x8000, 0x9000);
            vma_mark_attached(new_mm, again);
        }
        reader.join().unwrap();
    });
}

#[test]
fn lockless_snapshot_vs_recycle_other_mm() {
    lockless_recycle(false);
}

#[test]
fn lockless_snapshot_vs_recycle_same_mm() {
    lockless_recycle(true);
}

/// The states the cached-epoch models' writer goes through, one per write section: (start, end, flags bits).
const CACHED_STATES: [(u64, u64, u64); 3] =
    [(0x1000, 0x3000, 0), (0x2000, 0x4000, VmFlags::READ.bits()), (0x5000, 0x6000, 0)];

/// One write section of the cached-epoch models: write-locks the VMA and changes its range and flags to
/// `CACHED_STATES[to]`, in two stores (a copy that mixes them is torn).
fn cached_section(w: &World, to: usize) {
    let (start, end, flags) = CACHED_STATES[to];
    let _wl = w.mm.write_lock();
    vma_start_write(&w.mm, w.vma);
    w.vma.set_range(&w.mm, start, end);
    w.vma.set_flags(&w.mm, VmFlags::from_bits(flags));
}

/// The lockless copy with a cached epoch (`vma::lockless`, "The cached epoch") against a writer that
/// write-locks the VMA *after* the reader's epoch was read: `mm_lock_seq` is read and published before the
/// reader starts, and the reader starts from that value. The writer's lock is then newer than the cached value, so the reader
/// must re-read `mm_lock_seq` (and refuse while the section runs) or see the bump in `vm_seq`; an accepted
/// copy is the before or the after state.
#[test]
fn lockless_cached_epoch_vs_later_writer() {
    model(|| {
        let w = world();
        let before = w.mm.lock_seq();
        // Read and published now, before the writer's section.
        drop(LocklessEpoch::new(&w.mm));
        assert_eq!(LocklessEpoch::load(&w.mm).seen(), before);
        let r = w.clone();
        let reader = thread::spawn(move || {
            let mut ep = LocklessEpoch::load(&r.mm);
            if let Ok(s) = ep.snapshot(r.vma) {
                let st = state(&s);
                assert!(CACHED_STATES[..2].contains(&st), "a torn copy: {st:x?}");
            }
        });
        cached_section(&w, 1);
        reader.join().unwrap();
        assert_eq!(w.vma.refcnt(), 1);
    });
}

/// The lockless copy with a cached epoch read *inside* a write section that had already locked the VMA: the
/// cached value is that epoch, equal to the VMA's `vm_lock_seq` (not older), so the reader re-reads and
/// refuses until the epoch ends; an accepted copy can only be the after state.
#[test]
fn lockless_cached_epoch_vs_earlier_writer() {
    model(|| {
        let w = world();
        let wl = w.mm.write_lock();
        vma_start_write(&w.mm, w.vma);
        let r = w.clone();
        let reader = thread::spawn(move || {
            let mut ep = LocklessEpoch::new(&r.mm);
            if let Ok(s) = ep.snapshot(r.vma) {
                let st = state(&s);
                assert_eq!(st, CACHED_STATES[1], "a copy of a VMA locked before the cache: {st:x?}");
            }
        });
        let (start, end, flags) = CACHED_STATES[1];
        w.vma.set_range(&w.mm, start, end);
        w.vma.set_flags(&w.mm, VmFlags::from_bits(flags));
        drop(wl);
        reader.join().unwrap();
        assert_eq!(w.vma.refcnt(), 1);
    });
}

/// The lockless copy with a cached epoch against an unlock and a relock of the VMA across the copy: two
/// write sections, the reader's cache read at any point (before, inside or between them) and its copy
/// after. A cache read inside the first section holds that (odd) epoch; the second section's lock is newer,
/// so it must not pass for older (a check of equality with the cached value would accept it). An accepted
/// copy is one of the three states.
#[test]
fn lockless_cached_epoch_vs_unlock_relock() {
    model(|| {
        let w = world();
        let r = w.clone();
        let reader = thread::spawn(move || {
            let mut ep = LocklessEpoch::new(&r.mm);
            if let Ok(s) = ep.snapshot(r.vma) {
                let st = state(&s);
                assert!(CACHED_STATES.contains(&st), "a torn copy: {st:x?}");
            }
        });
        cached_section(&w, 1);
        cached_section(&w, 2);
        reader.join().unwrap();
        assert_eq!(w.vma.refcnt(), 1);
    });
}

/// The published epoch (`LocklessEpochs`): a first reader re-reads `mm_lock_seq` after the writer's section
/// and publishes it; a second reader starts from the published value and skips its own re-read. The
/// release/acquire publication must carry the first reader's view of the ended section to the second: its
/// copy is then the after state, or the before state, never a mix.
#[test]
fn lockless_published_epoch_vs_writer() {
    model(|| {
        let w = world();
        let (r1, r2) = (w.clone(), w.clone());
        let first = thread::spawn(move || {
            // The VMA was last locked at set-up, after the published value (0): a re-read, then published.
            drop(LocklessEpoch::load(&r1.mm).snapshot(r1.vma));
        });
        let second = thread::spawn(move || {
            if let Ok(s) = LocklessEpoch::load(&r2.mm).snapshot(r2.vma) {
                let st = state(&s);
                assert!(CACHED_STATES[..2].contains(&st), "a torn copy: {st:x?}");
            }
        });
        cached_section(&w, 1);
        first.join().unwrap();
        second.join().unwrap();
    });
}

#[test]
fn lockless_maps_vs_mprotect_split() {
    use vmspace_mm::{MapFlags, Mm, MmConfig, Prot, ReaderMode};
    model_bound(1, || {
        let mm = Arc::new(Mm::new(MmConfig::default()));
        let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        mm.mmap(A, 2 * P, Prot::RW, fixed, None, 0).unwrap();
        let before = mm.reader().maps();
        let m2 = mm.clone();
        let reader = thread::spawn(move || m2.reader_with(ReaderMode::Lockless).maps());
        mm.mprotect(A + P, P, Prot::READ).unwrap();
        let after = mm.reader().maps();
        let seen = reader.join().unwrap();
        // The first line is the whole VMA (before) or its lower half (after); a restart after the lower
        // half may still find the whole VMA (shown twice), never a torn or missing line.
        let lines: Vec<&str> = seen.lines().collect();
        let valid: Vec<&str> = before.lines().chain(after.lines()).collect();
        assert!(lines.iter().all(|l| valid.contains(l)), "torn:\n{seen}");
        assert!(seen == before || seen == after || lines.len() == 2, "{seen}");
        mm.validate().unwrap();
    });
}

#[test]
fn speculative_fault_vs_mprotect() {
    fault_race(
        "mprotect",
        |mm| mm.fault(A, vmspace_mm::Access::Write),
        |mm| {
            mm.mprotect(A, 2 * P, vmspace_mm::Prot::READ).unwrap();
            // Whatever the fault did, no entry is writable once mprotect has returned.
            let pt = mm.page_table();
            assert!(!pt.pte(A).is_write() && !pt.pte(A + P).is_write(), "a writable entry after mprotect");
        },
        |mm| assert!(!mm.page_table().pte(A).is_write()),
    );
}

/// A second VMA of `w`'s mm at [0x5000, 0x6000), attached (for the bulk write lock's batches).
fn second_vma(w: &World) -> &'static Vma {
    let v = w.pool.alloc(&w.mm).unwrap();
    let _wl = w.mm.write_lock();
    v.set_range(&w.mm, 0x5000, 0x6000);
    vma_start_write(&w.mm, v);
    vma_mark_attached(&w.mm, v);
    v
}

/// `vma_start_write_bulk` (fork's parent, `vma::lock` "Bulk write lock") against `vma_start_read`: the writer
/// stores `vm_lock_seq` for a batch of two VMAs, fences once and reads each count; the reader increments and
/// re-checks `vm_lock_seq`. The reader's lock and the writer's section never overlap on the VMA the reader
/// locks (its payload), whichever VMA of the batch that is, and the writer changes the VMA only after a
/// reader that got in has left (it sees the reader's count, or the reader sees its store).
fn bulk_write_lock_vs_reader(reader_on_second: bool) {
    model(move || {
        let w = world();
        let b = second_vma(&w);
        let target = if reader_on_second { b } else { w.vma };
        let r = w.clone();
        let reader = thread::spawn(move || {
            if let Ok(g) = vma_start_read(&r.mm, target) {
                // Before the writer's section (0) or after its epoch ended (1).
                let v = get(&r.payload);
                assert!(v == 0 || v == 1);
                drop(g);
            }
        });
        {
            let _wl = w.mm.write_lock();
            vma_start_write_bulk(&w.mm, &[w.vma, b]);
            assert!(vma_is_write_locked(&w.mm, w.vma) && vma_is_write_locked(&w.mm, b));
            put(&w.payload, 1);
        }
        reader.join().unwrap();
        assert_eq!((w.vma.refcnt(), b.refcnt()), (1, 1));
    });
}

#[test]
fn bulk_write_lock_vs_reader_first() {
    bulk_write_lock_vs_reader(false);
}

#[test]
fn bulk_write_lock_vs_reader_second() {
    bulk_write_lock_vs_reader(true);
}

/// `vma_start_write_bulk` against a reader that holds its lock across the writer's batch: the writer finds the
/// count and takes the slow path (adds the exclusion flag, waits for the reader to leave), and a second
/// reader that comes meanwhile is refused.
#[test]
fn bulk_write_lock_waits_for_holder() {
    model(|| {
        let w = world();
        let r = w.clone();
        // The holder's lock is taken before the writer starts.
        let g = vma_start_read(&w.mm, w.vma).unwrap();
        let raw = g.into_raw();
        let holder = thread::spawn(move || {
            let v = get(&r.payload);
            assert_eq!(v, 0, "the writer changed the VMA under a read lock");
            // SAFETY: the read lock taken above and given up with `into_raw` is released here, once.
            unsafe { vmspace_mm::vma::vma_end_read(raw) };
        });
        {
            let _wl = w.mm.write_lock();
            vma_start_write_bulk(&w.mm, &[w.vma]);
            put(&w.payload, 1);
        }
        holder.join().unwrap();
        assert_eq!(w.vma.refcnt(), 1);
    });
}

/// `vma_start_write_bulk` against the lockless reader: the writer bulk-locks the VMA and changes its range and
/// flags; an accepted copy is the before or the after state (the bulk lock bumps `vm_seq` as
/// `vma_start_write` does).
#[test]
fn bulk_write_lock_vs_lockless() {
    model(|| {
        let w = world();
        let r = w.clone();
        let reader = thread::spawn(move || {
            if let Ok(s) = vma_snapshot_lockless(&r.mm, r.vma) {
                let st = state(&s);
                let ok = [(0x1000, 0x3000, 0), (0x2000, 0x4000, VmFlags::READ.bits())];
                assert!(ok.contains(&st), "a torn copy: {st:x?}");
            }
        });
        {
            let _wl = w.mm.write_lock();
            vma_start_write_bulk(&w.mm, &[w.vma]);
            w.vma.set_range(&w.mm, 0x2000, 0x4000);
            w.vma.set_flags(&w.mm, VmFlags::READ);
        }
        reader.join().unwrap();
        assert_eq!(w.vma.refcnt(), 1);
    });
}

/// The real address space: a speculative write fault against `fork` (whose parent VMAs are bulk
/// write-locked, `space::fork`). The fault completes in the parent before fork write-locks the VMA (then fork
/// copies its page, write-protected on both sides) or after (then the child has no page there); never a
/// page installed behind the copy's write protection. Afterwards the parent writes the page: the child still
/// reads zero (copy-on-write kept them apart), and both spaces and the memory's counts are consistent.
#[test]
fn speculative_fault_vs_fork() {
    use vmspace_mm::{Access, FaultKind, MapFlags, Mm, MmConfig, Prot};
    const A: u64 = 0x2_0000;
    const P: u64 = 4096;
    use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
    // Outcomes over all executions (std atomics: outside the model). Relaxed: counters read after the model.
    static COPIED: AtomicUsize = AtomicUsize::new(0);
    static AFTER: AtomicUsize = AtomicUsize::new(0);
    model_bound(2, || {
        let mm = Arc::new(Mm::new(MmConfig::default()));
        let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        mm.mmap(A, 2 * P, Prot::RW, fixed, None, 0).unwrap();
        // The anon_vma and the PTE table exist: the racing fault is speculative.
        assert_eq!(mm.fault(A + P, Access::Write), Ok(FaultKind::AnonNew));
        let m2 = mm.clone();
        let faulter = thread::spawn(move || m2.fault(A, Access::Write));
        let child = mm.fork().unwrap();
        assert_eq!(faulter.join().unwrap(), Ok(FaultKind::AnonNew));
        let in_child = child.page_table().pte(A).is_present();
        if in_child {
            // Copied: write-protected in the parent too (the next write there copies).
            assert!(!mm.page_table().pte(A).is_write(), "a page shared writable with the child");
            COPIED.fetch_add(1, StdOrdering::Relaxed);
        } else {
            AFTER.fetch_add(1, StdOrdering::Relaxed);
        }
        mm.write(A, &[5]).unwrap();
        let mut b = [9u8];
        child.read(A, &mut b).unwrap();
        assert_eq!(b, [0], "the child sees the parent's write after fork");
        mm.validate().unwrap();
        child.validate().unwrap();
    });
    let (c, a) = (COPIED.load(StdOrdering::Relaxed), AFTER.load(StdOrdering::Relaxed));
    println!("fault before fork's copy: {c} executions; after it: {a}");
    assert!(c > 0 && a > 0, "both orders explored");
}

/// `munmap_downgrade_vs_neighbour_fault`: the real address space: one merged VMA of two pages; a thread faults
/// the first page in (the part that stays) while another munmaps the second, which splits the VMA
/// (write-locking the part that stays), clears the second page out of the tree, downgrades the mmap lock and
/// zaps under the read hold (`vms_complete_munmap_vmas` with `unlock`). The fault completes in every
/// interleaving (before the split, under the VMA lock after the downgrade, or under the mmap read lock beside
/// the zap), never a SIGSEGV in memory that stays mapped; once both are done the second page is gone, the
/// first is mapped, and the frames and tables are counted exactly (the zap's `free_pgd_range` kept the table
/// the two pages share).
#[test]
fn munmap_downgrade_vs_neighbour_fault() {
    use vmspace_mm::{Access, FaultKind, MapFlags, Mm, MmConfig, Prot};
    const A: u64 = 0x2_0000;
    const P: u64 = 4096;
    // One preemption: the faulter that finds its VMA write-locked waits (a yield per check under loom) for
    // the whole split and tree store; two preemptions make that wait grow past the model checker's memory.
    model_bound(1, || {
        let mm = Arc::new(Mm::new(MmConfig::default()));
        let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        mm.mmap(A, 2 * P, Prot::RW, fixed, None, 0).unwrap();
        // The anon_vma and the PTE table exist: the racing fault may be speculative or under the VMA lock.
        assert_eq!(mm.fault(A + P, Access::Write), Ok(FaultKind::AnonNew));
        let m2 = mm.clone();
        let faulter = thread::spawn(move || m2.fault(A, Access::Write));
        mm.munmap(A + P, P).unwrap();
        assert_eq!(faulter.join().unwrap(), Ok(FaultKind::AnonNew), "the page that stays mapped");
        let pt = mm.page_table();
        assert!(pt.pte(A).is_present() && pt.pte(A + P).is_none());
        assert_eq!(mm.rss().anon, 1);
        mm.validate().unwrap();
        vmspace_rcu::synchronize();
        let s = mm.memory().stats();
        assert_eq!((s.frames_in_use, s.frames_pending_free), (1, 0), "{s:?}");
        assert_eq!(s.tables_pending_free, 0, "{s:?}");
    });
}
