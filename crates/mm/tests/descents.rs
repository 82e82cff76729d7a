//! One cursor per call: how many times each call walks the VMA tree from its root (`MapleTree::descents`,
//! which counts the writer side's root walks: every store not given a cursor's cached path and every cursor
//! without a valid path). A call keeps one tree cursor (`space/tree.rs`, "One cursor per call"), so an mmap
//! into a gap among 1,000 other VMAs and its munmap each walk from the root once; a call whose store rebuilds
//! the root (the tree grows or shrinks a level, or the root node splits or merges) walks again from the new
//! root, which the counts below allow only with a rebuild. `validate()` after every call; `--nocapture`
//! prints the counts.
#![cfg(not(loom))]

use vmspace_mm::space::{MapFlags, Mm, MmConfig, Prot};

const ARENA: u64 = 0x2000_0000_0000;
const OTHERS: u64 = ARENA + (1 << 30);
const P: u64 = 4096;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS);

/// The benchmark's address space (`crates/bench/src/mm.rs`): `n` adjacent one-page VMAs of alternating
/// protection 1 GiB above the arena.
fn space(n: u64) -> Mm {
    let m = Mm::new(MmConfig::default());
    for i in 0..n {
        let prot = if i % 2 == 0 { Prot::RW } else { Prot::READ };
        assert_eq!(m.mmap(OTHERS + i * P, P, prot, ANON, None, 0), Ok(OTHERS + i * P));
    }
    assert_eq!(m.map_count(), n);
    m.validate().unwrap();
    m
}

/// Root descents and rebuilds `f` made.
fn count(m: &Mm, f: impl FnOnce(&Mm)) -> (u64, u64) {
    let (d, r) = (m.tree().descents(), m.tree().store_stats().rebuild);
    f(m);
    let out = (m.tree().descents() - d, m.tree().store_stats().rebuild - r);
    m.validate().unwrap();
    out
}

/// Asserts one descent, or (only if the call rebuilt part of the tree) one more per rebuild.
fn one_descent(what: &str, (d, r): (u64, u64)) {
    assert!(d == 1 || (d > 1 && d - 1 <= r), "{what}: {d} descents, {r} rebuilds");
}

#[test]
fn mmap_and_munmap_in_a_gap_descend_once() {
    for others in [0, 1000] {
        let m = space(others);
        let mut rebuilt = 0;
        for round in 0..200u64 {
            let pages = 1 + round % 16;
            let c = count(&m, |m| {
                assert_eq!(m.mmap(ARENA, pages * P, Prot::RW, ANON, None, 0), Ok(ARENA));
            });
            one_descent(&format!("mmap, {others} others, round {round}"), c);
            rebuilt += c.1;
            let c = count(&m, |m| m.munmap(ARENA, pages * P).unwrap());
            one_descent(&format!("munmap, {others} others, round {round}"), c);
            rebuilt += c.1;
        }
        println!("{others} others: 200 mmap+munmap pairs, {rebuilt} rebuilds");
        // The benchmark's pair: both stores stay in one leaf (a node store each), never a rebuild.
        if others == 1000 {
            assert_eq!(rebuilt, 0);
        }
    }
}

/// The other common calls, counted: each walks from the root once, but for the stores that rebuilt the root.
#[test]
fn other_calls_descend_once() {
    let m = space(1000);
    let mut calls: Vec<(&str, (u64, u64))> = Vec::new();
    // A new mapping merged into the VMA before it (`vma_expand`), then unmapped again.
    let last = OTHERS + 999 * P;
    calls.push((
        "mmap merging left",
        count(&m, |m| assert_eq!(m.mmap(last + P, P, Prot::READ, ANON, None, 0), Ok(last + P))),
    ));
    calls.push(("munmap of a tail", count(&m, |m| m.munmap(last + P, P).unwrap())));
    // mprotect of a middle page: two splits; back: a merge of three.
    m.mmap(ARENA, 8 * P, Prot::RW, ANON, None, 0).unwrap();
    calls
        .push(("mprotect splitting twice", count(&m, |m| m.mprotect(ARENA + 2 * P, P, Prot::READ).unwrap())));
    calls.push(("mprotect merging three", count(&m, |m| m.mprotect(ARENA + 2 * P, P, Prot::RW).unwrap())));
    // A MAP_FIXED mapping over part of it, and an munmap from its middle.
    calls.push((
        "mmap MAP_FIXED over a part",
        count(&m, |m| {
            assert_eq!(m.mmap(ARENA + P, 2 * P, Prot::READ, ANON | MapFlags::FIXED, None, 0), Ok(ARENA + P))
        }),
    ));
    calls.push(("munmap splitting", count(&m, |m| m.munmap(ARENA + 5 * P, P).unwrap())));
    // mremap growing in place and moving.
    calls.push((
        "mremap growing in place",
        count(&m, |m| {
            assert_eq!(
                m.mremap(ARENA + 6 * P, 2 * P, 4 * P, vmspace_mm::space::MremapFlags::empty(), 0),
                Ok(ARENA + 6 * P)
            );
        }),
    ));
    // brk growth.
    let b = m.brk_value();
    calls.push(("brk growth", count(&m, |m| assert_eq!(m.brk(b + 4 * P), b + 4 * P))));
    calls.push(("brk growth again", count(&m, |m| assert_eq!(m.brk(b + 8 * P), b + 8 * P))));
    // A placement without a hint (the gap search is a walk of its own, not counted: it reads the max gaps).
    calls.push((
        "mmap without a hint",
        count(&m, |m| {
            m.mmap(0, P, Prot::RW, ANON, None, 0).unwrap();
        }),
    ));
    for (what, c) in &calls {
        println!("{what}: {} descents, {} rebuilds", c.0, c.1);
    }
    for (what, c) in calls {
        one_descent(what, c);
    }
}
