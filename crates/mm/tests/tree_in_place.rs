//! Which maple-tree store paths the address space's common VMA boundary moves take (`MapleTree::store_stats`):
//! brk growth, a new mapping merged into its neighbour (`vma_expand`), mprotect of a VMA's head or tail merging
//! into the neighbour (`vma_merge_existing_range`), a tail unmapped. A boundary move inside a leaf is the
//! in-place slot store of RCU mode (one pivot moves, no slot changes); a boundary that is also the boundary
//! between two leaves (about one in seven with these layouts) moves a parent pivot, which takes a rebuild of the
//! two leaves, as the kernel's spanning store does. An unmapped tail is a split (a new VMA: one slot more)
//! and an erase: leaf copies, but where the split lands at the end of a leaf (an append). `validate()` after
//! every call; `--nocapture` prints the counts.
#![cfg(not(loom))]

use vmspace_maple::StoreStats;
use vmspace_mm::space::{MapFlags, Mm, MmConfig, Prot};

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS);

/// The stores `f` makes on `m`'s tree, by path.
fn stores(m: &Mm, f: impl FnOnce(&Mm)) -> StoreStats {
    let a = m.tree().store_stats();
    f(m);
    m.validate().unwrap();
    let b = m.tree().store_stats();
    StoreStats {
        exact_fit: b.exact_fit - a.exact_fit,
        slot_store: b.slot_store - a.slot_store,
        append: b.append - a.append,
        node_store: b.node_store - a.node_store,
        rebuild: b.rebuild - a.rebuild,
        null_tail: b.null_tail - a.null_tail,
        empty: b.empty - a.empty,
    }
}

/// An address space with `n` single-page VMAs two pages apart (alternating protections, so none merge),
/// enough for a tree of several leaves.
fn space(n: u64) -> Mm {
    let m = Mm::new(MmConfig::default());
    for i in 0..n {
        let prot = if i % 2 == 0 { Prot::RW } else { Prot::READ };
        m.mmap(B + i * 4 * P, P, prot, ANON | MapFlags::FIXED, None, 0).unwrap();
    }
    m.validate().unwrap();
    m
}

#[test]
fn brk_growth_is_in_place() {
    let m = space(200);
    let start = m.brk_value();
    let st = stores(&m, |m| {
        for i in 1..=100 {
            assert_eq!(m.brk(start + i * P), start + i * P);
            m.validate().unwrap();
        }
    });
    println!("brk growth x100: {st:?}");
    assert!(st.slot_store >= 99 && st.node_store == 0, "{st:?}");
}

#[test]
fn expand_into_gap_is_in_place() {
    let m = space(200);
    // Each new page directly above VMA i merges into it (vma_expand of the neighbour); a page of gap stays.
    let st = stores(&m, |m| {
        for i in 0..100 {
            let prot = if i % 2 == 0 { Prot::RW } else { Prot::READ };
            m.mmap(B + i * 4 * P + P, P, prot, ANON | MapFlags::FIXED, None, 0).unwrap();
            m.validate().unwrap();
        }
    });
    println!("vma_expand into a gap x100: {st:?}");
    assert!(st.slot_store >= 80 && st.node_store == 0, "{st:?}");
}

#[test]
fn mprotect_head_and_tail_merges_are_in_place() {
    let m = Mm::new(MmConfig::default());
    // Pairs of touching VMAs [rw 4 pages][r- 4 pages], two pages of gap between pairs.
    for i in 0..100 {
        let b = B + i * 10 * P;
        m.mmap(b, 4 * P, Prot::RW, ANON | MapFlags::FIXED, None, 0).unwrap();
        m.mmap(b + 4 * P, 4 * P, Prot::READ, ANON | MapFlags::FIXED, None, 0).unwrap();
    }
    m.validate().unwrap();
    // mprotect of the r- VMA's head to rw: the head merges into the rw VMA before it.
    let head = stores(&m, |m| {
        for i in 0..100 {
            m.mprotect(B + i * 10 * P + 4 * P, P, Prot::RW).unwrap();
            m.validate().unwrap();
        }
    });
    println!("mprotect head merging into prev x100: {head:?}");
    // mprotect of the rw VMA's tail to r-: the tail merges into the r- VMA after it.
    let tail = stores(&m, |m| {
        for i in 0..100 {
            m.mprotect(B + i * 10 * P + 4 * P, P, Prot::READ).unwrap();
            m.validate().unwrap();
        }
    });
    println!("mprotect tail merging into next x100: {tail:?}");
    for st in [head, tail] {
        assert!(st.slot_store >= 80 && st.node_store == 0, "{st:?}");
    }
}

#[test]
fn unmap_of_a_tail() {
    let m = Mm::new(MmConfig::default());
    for i in 0..100 {
        m.mmap(B + i * 10 * P, 4 * P, Prot::RW, ANON | MapFlags::FIXED, None, 0).unwrap();
    }
    let st = stores(&m, |m| {
        for i in 0..100 {
            m.munmap(B + i * 10 * P + 3 * P, P).unwrap();
            m.validate().unwrap();
        }
    });
    println!("munmap of a tail x100: {st:?}");
    assert!(st.in_place() > 0, "{st:?}");
}
