//! Allocation-failure injection (the engine's allocation budget, and the published tree's node allocator):
//! every call reserves its worst case (VMA objects and tree nodes) before its
//! point of no return, so a failure injected after any number of allocations either lets the call succeed
//! exactly as without injection or fails it with ENOMEM (EAGAIN for madvise) leaving the address space
//! unchanged. Nothing leaks: every anon_vma's active-VMA count equals the VMAs that point at it.
#![cfg(not(loom))]

use std::collections::HashMap;
use vmspace_mm::Access;

use vmspace_mm::space::{Advice, MapFlags, MremapFlags, Prot};
use vmspace_mm::space::{Errno, Mm, MmConfig};
use vmspace_mm::vma::VmaPool;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const RW: Prot = Prot::RW;
const AF: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

/// A layout with faulted and unfaulted VMAs, a hole and different protections.
fn setup() -> Mm {
    setup_in(VmaPool::global())
}

fn setup_in(pool: &'static VmaPool) -> Mm {
    let m = Mm::with_pool(MmConfig { anon_vma_name: true, ..MmConfig::default() }, pool);
    m.mmap(B, 8 * P, RW, AF, None, 0).unwrap();
    m.fault(B + P, Access::Write).unwrap();
    m.mprotect(B + 4 * P, 2 * P, Prot::READ).unwrap();
    m.mmap(B + 10 * P, 4 * P, RW, AF, None, 0).unwrap();
    m.mmap(B + 14 * P, 2 * P, Prot::READ, AF, None, 0).unwrap();
    m.madvise(B + 10 * P, 2 * P, Advice::DONTFORK).unwrap();
    m
}

fn no_leaks(m: &Mm) {
    let mut refs: HashMap<u64, (u64, u64)> = HashMap::new();
    for a in m.areas() {
        if let Some(av) = a.anon().anon_vma() {
            let e = refs.entry(av.id()).or_insert((0, av.num_active_vmas()));
            e.0 += 1;
        }
    }
    for (id, (seen, counted)) in refs {
        assert_eq!(seen, counted, "anon_vma {id}: {seen} VMAs point at it, {counted} counted");
    }
}

type Op = (&'static str, fn(&mut Mm) -> Result<u64, Errno>);

const OPS: &[Op] = &[
    ("munmap middle", |m| m.munmap(B + 2 * P, 2 * P).map(|_| 0)),
    ("munmap across", |m| m.munmap(B + 6 * P, 6 * P).map(|_| 0)),
    ("mmap fixed over", |m| m.mmap(B + 3 * P, 9 * P, Prot::READ, AF, None, 0)),
    ("mmap new", |m| m.mmap(B + 40 * P, 2 * P, RW, AF, None, 0)),
    ("mmap merge", |m| m.mmap(B + 8 * P, 2 * P, RW, AF, None, 0)),
    ("mprotect middle", |m| m.mprotect(B + P, 2 * P, Prot::READ).map(|_| 0)),
    ("mprotect across", |m| m.mprotect(B + 2 * P, 6 * P, Prot::READ | Prot::EXEC).map(|_| 0)),
    ("mremap shrink", |m| m.mremap(B + 10 * P, 4 * P, P, MremapFlags::empty(), 0)),
    ("mremap grow", |m| m.mremap(B + 14 * P, 2 * P, 4 * P, MremapFlags::empty(), 0)),
    ("mremap move", |m| m.mremap(B + P, 2 * P, 2 * P, MremapFlags::MAYMOVE | MremapFlags::FIXED, B + 30 * P)),
    ("mremap dontunmap", |m| {
        m.mremap(B, 2 * P, 2 * P, MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP, B + 50 * P)
    }),
    ("madvise dontfork", |m| m.madvise(B + 2 * P, 3 * P, Advice::DONTFORK).map(|_| 0)),
    ("anon name", |m| m.set_anon_name(B + 11 * P, P, Some("x")).map(|_| 0)),
    ("fork", |m| {
        let child = m.fork()?;
        child.validate().expect("child valid");
        Ok(child.map_count())
    }),
];

#[test]
fn injected_failures_change_nothing() {
    for (what, op) in OPS {
        let mut reference = setup();
        let want = op(&mut reference);
        let want_maps = reference.maps_text();
        let mut succeeded_at = None;
        for k in 0..12 {
            let mut m = setup();
            let before = m.maps_text();
            m.inject_alloc_failure(Some(k));
            let r = op(&mut m);
            m.inject_alloc_failure(None);
            m.validate().unwrap_or_else(|e| panic!("{what} (fail after {k}): {e}"));
            no_leaks(&m);
            match r {
                Err(e) if e == Errno::ENOMEM || e == Errno::EAGAIN => {
                    assert_eq!(
                        m.maps_text(),
                        before,
                        "{what}: failure after {k} allocations changed the maps"
                    );
                }
                other => {
                    assert_eq!(other, want, "{what} (fail after {k})");
                    assert_eq!(m.maps_text(), want_maps, "{what} (fail after {k})");
                    succeeded_at.get_or_insert(k);
                }
            }
        }
        assert!(succeeded_at.is_some(), "{what} never succeeds within 12 allocations");
        assert!(want.is_ok(), "{what}: {want:?}");
    }
}

/// The same with the published tree's node allocations failing (the reservation made before each call's
/// point of no return fails instead).
#[test]
fn injected_tree_failures_change_nothing() {
    for (what, op) in OPS {
        let mut reference = setup();
        let want = op(&mut reference);
        let want_maps = reference.maps_text();
        for k in 0..40 {
            let mut m = setup();
            let before = m.maps_text();
            m.inject_tree_alloc_failure(Some(k));
            let r = op(&mut m);
            m.inject_tree_alloc_failure(None);
            m.validate().unwrap_or_else(|e| panic!("{what} (tree fails after {k}): {e}"));
            no_leaks(&m);
            match r {
                Err(e) if e == Errno::ENOMEM || e == Errno::EAGAIN => {
                    assert_eq!(m.maps_text(), before, "{what}: tree failure after {k} changed the maps");
                }
                other => {
                    assert_eq!(other, want, "{what} (tree fails after {k})");
                    assert_eq!(m.maps_text(), want_maps, "{what} (tree fails after {k})");
                }
            }
        }
    }
}

/// The same with the VMA pool's allocations failing (a private pool, so that other tests are not affected):
/// the `n`-th pool allocation from the start of the call fails.
#[test]
fn injected_pool_failures_change_nothing() {
    let pool = VmaPool::leak_new();
    let mut any_failed = false;
    for (what, op) in OPS {
        let mut reference = setup_in(pool);
        let want = op(&mut reference);
        let want_maps = reference.maps_text();
        let mut failed = false;
        for n in 1..12 {
            let mut m = setup_in(pool);
            let before = m.maps_text();
            pool.fail_nth(n);
            let r = op(&mut m);
            pool.fail_nth(0);
            m.validate().unwrap_or_else(|e| panic!("{what} (pool fails at {n}): {e}"));
            no_leaks(&m);
            match r {
                Err(e) if e == Errno::ENOMEM || e == Errno::EAGAIN => {
                    failed = true;
                    assert_eq!(m.maps_text(), before, "{what}: pool failure at {n} changed the maps");
                }
                other => {
                    assert_eq!(other, want, "{what} (pool fails at {n})");
                    assert_eq!(m.maps_text(), want_maps, "{what} (pool fails at {n})");
                }
            }
        }
        any_failed |= failed;
    }
    assert!(any_failed, "no pool failure ever reached a call");
}
