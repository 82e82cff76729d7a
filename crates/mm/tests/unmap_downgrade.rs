//! The unmaps that clear page tables under the downgraded mmap lock (`munmap`, brk shrinking, mremap shrinking
//! in place: `mm/vma.c: vms_complete_munmap_vmas` with `unlock`; module `space::munmap`).
//!
//! - `neighbour_runs_beside_the_zap_*`: an unmap is parked after its downgrade and before its zap (the
//!   `testing` hook `space::set_downgraded_unmap_hook`); meanwhile the VMA that stays, split off the same
//!   merged VMA, is not write-locked (`lock_vma_under_rcu` takes it), a fault in it completes and a write to it
//!   lands, readers under the mmap read lock run, a writer cannot get the lock, the unmapped range is in no
//!   VMA (a fault there is SIGSEGV) while its pages are still there (the zap has not run). Afterwards the
//!   range is empty and the accounting exact.
//! - `faults_beside_downgraded_unmaps`: fault threads write and re-fault (after `MADV_DONTNEED`) the part of a
//!   merged VMA that stays while a mutator maps the other part, fills it and takes it away again, by `munmap`,
//!   by `mremap` shrinking in place, and (in a heap) by brk shrinking; the boundary lies inside a PTE table, so
//!   the table the two parts share stays while the faulters use it. After each unmap the mutator checks that
//!   no entry is left in the range; at the end every page of the part that stays holds what its faulter wrote
//!   last, RSS is exactly that part, and the memory's accounting is exact (`Mm::check_memory`). Rounds:
//!   `VMSPACE_DOWNGRADE_ROUNDS` (default 60 per kind of unmap).
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use vmspace_mm::{Access, Errno, MapFlags, Memory, MemoryConfig, Mm, MmConfig, MremapFlags, Prot};

const P: u64 = 4096;
/// 2 MiB-aligned.
const R: u64 = 0x3000_0000_0000;
/// The part that stays: ends inside the second PTE table.
const KEEP: u64 = 600;
/// The part that comes and goes: the rest of that table, two whole tables and part of a third (whose table
/// `free_pgd_range` frees between the neighbours).
const CHURN: u64 = 1100;
const FAULTERS: u64 = 2;

/// How a test takes `[R + KEEP * P, R + (KEEP + CHURN) * P)` away again.
#[derive(Clone, Copy, Debug)]
enum Unmap {
    Munmap,
    MremapShrink,
    BrkShrink,
}

const ALL: [Unmap; 3] = [Unmap::Munmap, Unmap::MremapShrink, Unmap::BrkShrink];

fn fixed() -> MapFlags {
    MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED
}

/// An address space whose one VMA is `[R, R + KEEP * P)`: a mapping, or the heap for `BrkShrink`.
fn space(kind: Unmap) -> Mm {
    let cfg = MmConfig { start_brk: R, ..MmConfig::default() };
    let mm = Mm::with_memory(cfg, Memory::new(MemoryConfig::default()));
    match kind {
        Unmap::BrkShrink => assert_eq!(mm.brk(R + KEEP * P), R + KEEP * P),
        _ => assert_eq!(mm.mmap(R, KEEP * P, Prot::RW, fixed(), None, 0), Ok(R)),
    }
    mm
}

/// Extends the VMA over the churn part (one merged VMA again).
fn grow(mm: &Mm, kind: Unmap) {
    match kind {
        Unmap::BrkShrink => assert_eq!(mm.brk(R + (KEEP + CHURN) * P), R + (KEEP + CHURN) * P),
        _ => assert_eq!(mm.mmap(R + KEEP * P, CHURN * P, Prot::RW, fixed(), None, 0), Ok(R + KEEP * P)),
    }
    let v = mm.vma_at(R).expect("the merged VMA");
    assert_eq!((v.start, v.end), (R, R + (KEEP + CHURN) * P), "{kind:?}: one merged VMA");
}

/// Takes the churn part away again.
fn unmap(mm: &Mm, kind: Unmap) {
    match kind {
        Unmap::Munmap => assert_eq!(mm.munmap(R + KEEP * P, CHURN * P), Ok(())),
        Unmap::MremapShrink => {
            assert_eq!(mm.mremap(R, (KEEP + CHURN) * P, KEEP * P, MremapFlags::empty(), 0), Ok(R))
        }
        Unmap::BrkShrink => assert_eq!(mm.brk(R + KEEP * P), R + KEEP * P),
    }
}

/// Whether any entry (page or marker) is left in the churn part.
fn churn_entries(mm: &Mm) -> Option<u64> {
    let pt = mm.page_table();
    (KEEP..KEEP + CHURN).map(|p| R + p * P).find(|&a| !pt.pte(a).is_none())
}

fn neighbour_runs_beside_the_zap(kind: Unmap) {
    let mm = space(kind);
    grow(&mm, kind);
    // Every page of the churn part, and the first half of the part that stays, hold a page.
    for p in (0..KEEP / 2).chain(KEEP..KEEP + CHURN) {
        mm.write(R + p * P, &[p as u8 | 1]).unwrap();
    }
    let (parked_tx, parked_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let mm = &mm;
        let unmapper = s.spawn(move || {
            vmspace_mm::space::set_downgraded_unmap_hook(Some(Box::new(move || {
                parked_tx.send(()).unwrap();
                // Bounded: a broken test must not hang.
                go_rx.recv_timeout(Duration::from_secs(60)).expect("released");
            })));
            unmap(mm, kind);
            vmspace_mm::space::set_downgraded_unmap_hook(None);
        });
        /// Releases the parked unmap however the checks below end.
        struct Release(Option<mpsc::Sender<()>>);
        impl Drop for Release {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
        let release = Release(Some(go_tx));
        parked_rx.recv_timeout(Duration::from_secs(60)).expect("the unmap reached its zap");
        // Parked under the read hold: the VMA tree is final, the zap has not run.
        let shared = mm.shared();
        assert!(shared.locking.try_write_lock().is_none(), "{kind:?}: a writer got the lock during the zap");
        drop(shared.locking.try_read_lock().expect("readers get the mmap read lock beside the zap"));
        let v = mm.vma_at(R).expect("the VMA that stays");
        assert_eq!((v.start, v.end), (R, R + KEEP * P), "{kind:?}");
        assert!(mm.vma_at(R + KEEP * P).is_none(), "{kind:?}: the unmapped range is in no VMA");
        assert!(mm.page_table().pte(R + KEEP * P).is_present(), "{kind:?}: parked before the zap");
        // The VMA that stays was split off the merged one, so the unmap write-locked it; the downgrade
        // released that lock: its per-VMA read lock is free.
        drop(shared.lock_vma_under_rcu(R).expect("the neighbour's VMA lock during the zap"));
        // A fault in it (a page not present yet), on another thread, completes while the unmap stays parked.
        let a = R + (KEEP - 1) * P;
        let (done_tx, done_rx) = mpsc::channel();
        s.spawn(move || {
            let r = mm.fault(a, Access::Write);
            let w = mm.write(a, &[0x5a]);
            let _ = done_tx.send((r, w));
        });
        let (r, w) =
            done_rx.recv_timeout(Duration::from_secs(30)).expect("the neighbour's fault ran beside the zap");
        assert!(r.is_ok(), "{kind:?}: {r:?}");
        assert!(w.is_ok(), "{kind:?}: {w:?}");
        assert!(mm.page_table().pte(a).is_present());
        // The unmapped range: no VMA for a new fault, whatever its old entries still show.
        assert_eq!(mm.fault(R + KEEP * P, Access::Read), Err(Errno::EFAULT), "{kind:?}");
        assert_eq!(mm.fault(R + (KEEP + CHURN - 1) * P, Access::Write), Err(Errno::EFAULT), "{kind:?}");
        drop(release);
        unmapper.join().unwrap();
    });
    assert_eq!(churn_entries(&mm), None, "{kind:?}: an entry left after the unmap");
    let mut b = [0u8];
    mm.read(R + (KEEP - 1) * P, &mut b).unwrap();
    assert_eq!(b, [0x5a]);
    for p in 0..KEEP / 2 {
        mm.read(R + p * P, &mut b).unwrap();
        assert_eq!(b, [p as u8 | 1], "{kind:?}: page {p}");
    }
    assert_eq!(mm.rss().anon, (KEEP / 2 + 1) as i64, "{kind:?}: RSS after the unmap");
    assert_eq!(mm.map_count(), 1);
    mm.validate().unwrap();
    Mm::check_memory(&[&mm], &[]).unwrap();
}

#[test]
fn neighbour_runs_beside_the_zap_munmap() {
    neighbour_runs_beside_the_zap(Unmap::Munmap);
}

#[test]
fn neighbour_runs_beside_the_zap_mremap_shrink() {
    neighbour_runs_beside_the_zap(Unmap::MremapShrink);
}

#[test]
fn neighbour_runs_beside_the_zap_brk_shrink() {
    neighbour_runs_beside_the_zap(Unmap::BrkShrink);
}

/// What faulter `t` writes to page `p` in pass `pass` (never 0: an empty page reads 0).
fn value(t: u64, p: u64, pass: u64) -> u8 {
    ((t * 131 + p * 7 + pass * 13) % 255 + 1) as u8
}

/// Writes every page `p < KEEP` with `p % FAULTERS == t` and reads it back, empties a batch of them with
/// `MADV_DONTNEED` (so the next pass faults them again), until `stop`; then one last pass that leaves every
/// page written. Returns the last pass's number.
fn faulter(mm: &Mm, t: u64, stop: &AtomicBool, ready: &AtomicU64, faults: &AtomicU64) -> u64 {
    let mut pass = 0u64;
    let mut n = 0u64;
    loop {
        // Relaxed: a stop flag, read before the last pass.
        let last = stop.load(Ordering::Relaxed);
        pass += 1;
        for p in (t..KEEP).step_by(FAULTERS as usize) {
            let a = R + p * P;
            if !mm.page_table().pte(a).is_present() {
                n += 1;
            }
            mm.write(a, &[value(t, p, pass)]).unwrap();
            let mut b = [0u8];
            mm.read(a, &mut b).unwrap();
            assert_eq!(b, [value(t, p, pass)], "faulter {t}, page {p}, pass {pass}");
        }
        if pass == 1 {
            // Relaxed: a counter the mutator polls; it orders nothing.
            ready.fetch_add(1, Ordering::Relaxed);
        }
        if last {
            break;
        }
        // Every page of this faulter in a window of 64 pages: the next pass faults them in again.
        let from = (pass * 64) % (KEEP - 64);
        for p in (from..from + 64).filter(|p| p % FAULTERS == t) {
            mm.madvise(R + p * P, P, vmspace_mm::Advice::DONTNEED).unwrap();
        }
    }
    // Relaxed: read after the join.
    faults.fetch_add(n, Ordering::Relaxed);
    pass
}

fn mutator(mm: &Mm, kind: Unmap, rounds: u64) {
    for round in 0..rounds {
        grow(mm, kind);
        // Fill the churn part (every other page), as the faulters fill theirs.
        for p in (KEEP..KEEP + CHURN).step_by(2) {
            mm.write(R + p * P, &[1]).unwrap();
        }
        std::thread::yield_now();
        unmap(mm, kind);
        if let Some(a) = churn_entries(mm) {
            panic!("{kind:?}, round {round}: an entry at {a:#x} after the unmap");
        }
        let v = mm.vma_at(R).expect("the part that stays");
        assert_eq!((v.start, v.end), (R, R + KEEP * P), "{kind:?}, round {round}");
    }
}

fn rounds() -> u64 {
    std::env::var("VMSPACE_DOWNGRADE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(60)
}

#[test]
fn faults_beside_downgraded_unmaps() {
    for kind in ALL {
        let mm = space(kind);
        let stop = AtomicBool::new(false);
        let ready = AtomicU64::new(0);
        let faults = AtomicU64::new(0);
        let passes = std::thread::scope(|s| {
            let workers: Vec<_> = (0..FAULTERS)
                .map(|t| {
                    let (mm, stop, ready, faults) = (&mm, &stop, &ready, &faults);
                    s.spawn(move || faulter(mm, t, stop, ready, faults))
                })
                .collect();
            /// Stops the faulters however the mutator ends.
            struct StopOnDrop<'a>(&'a AtomicBool);
            impl Drop for StopOnDrop<'_> {
                fn drop(&mut self) {
                    // Relaxed: a stop flag; the joins publish the threads' work.
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let stop_guard = StopOnDrop(&stop);
            // The faulters are running before the unmaps begin. Relaxed: a counter.
            while ready.load(Ordering::Relaxed) < FAULTERS {
                std::thread::yield_now();
            }
            mutator(&mm, kind, rounds());
            drop(stop_guard);
            workers.into_iter().map(|w| w.join().unwrap()).collect::<Vec<u64>>()
        });
        // Contents: every page of the part that stays holds its faulter's last value.
        for p in 0..KEEP {
            let t = p % FAULTERS;
            let mut b = [0u8];
            mm.read(R + p * P, &mut b).unwrap();
            assert_eq!(b, [value(t, p, passes[t as usize])], "{kind:?}: page {p}");
        }
        assert_eq!(churn_entries(&mm), None, "{kind:?}");
        assert_eq!(mm.rss().anon, KEEP as i64, "{kind:?}: RSS is the part that stays");
        assert_eq!(mm.map_count(), 1, "{kind:?}");
        mm.validate().unwrap();
        Mm::check_memory(&[&mm], &[]).unwrap();
        // Relaxed: read after the joins.
        let n = faults.load(Ordering::Relaxed);
        eprintln!("{kind:?}: {n} faults beside {} unmaps; passes {passes:?}", rounds());
        assert!(n > KEEP, "{kind:?}: the faulters faulted during the run ({n})");
    }
}
