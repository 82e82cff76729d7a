//! fork (`kernel/fork.c: dup_mmap`) at the page level, in both tree modes: the child's VMAs, its anon_vma
//! chain, and its page table (`copy_page_range`): private anonymous pages write-protected on both sides and
//! shared until a write copies them, shared pages shared, `VM_DONTCOPY` VMAs skipped, `VM_WIPEONFORK` VMAs
//! empty in the child, guard markers copied, shared and file VMAs without an anon_vma not copied (refaulted
//! from the page cache: `vma_needs_copy`). Every step validates, and the family's memory accounting is exact.
#![cfg(not(loom))]

use vmspace_mm::{
    Access, Advice, FaultKind, ForkMode, MapFlags, Memory, MemoryConfig, Mm, MmConfig, Prot, VmFile,
};

const P: u64 = 4096;
const B: u64 = 0x2000_0000_0000;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

fn check(family: &[&Mm], files: &[&VmFile]) {
    Mm::check_memory(family, files).unwrap_or_else(|e| panic!("{e}"));
}

fn byte(m: &Mm, a: u64) -> u8 {
    let mut b = [0u8];
    m.read(a, &mut b).unwrap_or_else(|f| panic!("read {a:#x}: {f}"));
    b[0]
}

/// The parent of every test: anonymous memory written (pages 0-3) and read (page 4: the zero page), a
/// `VM_DONTCOPY` VMA, a `VM_WIPEONFORK` VMA, a guard page, shared anonymous memory, and private and shared
/// mappings of a file.
fn parent(file: &std::sync::Arc<VmFile>) -> Mm {
    let m = Mm::with_memory(MmConfig::default(), Memory::new(MemoryConfig::default()));
    m.mmap(B, 8 * P, Prot::RW, ANON, None, 0).unwrap();
    m.fill(B, 4 * P, 0x11).unwrap();
    assert_eq!(byte(&m, B + 4 * P), 0);
    m.mmap(B + 16 * P, 2 * P, Prot::RW, ANON, None, 0).unwrap();
    m.fill(B + 16 * P, 2 * P, 0x22).unwrap();
    m.madvise(B + 16 * P, 2 * P, Advice::DONTFORK).unwrap();
    m.mmap(B + 32 * P, 2 * P, Prot::RW, ANON, None, 0).unwrap();
    m.fill(B + 32 * P, 2 * P, 0x33).unwrap();
    m.madvise(B + 32 * P, 2 * P, Advice::WIPEONFORK).unwrap();
    m.madvise(B + 7 * P, P, Advice::GUARD_INSTALL).unwrap();
    m.mmap(B + 48 * P, 2 * P, Prot::RW, MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED, None, 0)
        .unwrap();
    m.fill(B + 48 * P, 2 * P, 0x44).unwrap();
    m.mmap(B + 64 * P, 4 * P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(file), 0).unwrap();
    m.fill(B + 64 * P, 4 * P, 0x55).unwrap();
    m.mmap(B + 80 * P, 4 * P, Prot::READ, MapFlags::PRIVATE | MapFlags::FIXED, Some(file), 0).unwrap();
    assert_eq!(byte(&m, B + 80 * P), 0x55);
    m.validate().unwrap();
    m
}

#[test]
fn dup_mmap_copies_pages_as_linux_does() {
    for mode in [ForkMode::Dup, ForkMode::Reinsert] {
        let file = VmFile::regular("/vmspace/f", 1, 4 * P);
        let m = parent(&file);
        let c = m.fork_with(mode).unwrap();
        c.validate().unwrap();
        check(&[&m, &c], &[&file]);
        // The VMAs: all but the DONTCOPY one, each with the parent's range and flags.
        let pv: Vec<_> =
            m.vmas().filter(|v| v.start != B + 16 * P).map(|v| (v.start, v.end, v.flags)).collect();
        let cv: Vec<_> = c.vmas().map(|v| (v.start, v.end, v.flags)).collect();
        assert_eq!(pv, cv, "{mode:?}");
        assert_eq!(c.map_count(), m.map_count() - 1);
        // Private anonymous pages: the same frame, read-only on both sides.
        let (ppt, cpt) = (m.page_table(), c.page_table());
        for i in 0..4 {
            let (pp, cp) = (ppt.pte(B + i * P), cpt.pte(B + i * P));
            assert!(pp.is_present() && cp.is_present() && pp.pfn() == cp.pfn(), "page {i} shared");
            assert!(!pp.is_write() && !cp.is_write(), "page {i} write-protected on both sides");
        }
        // The zero page stays the zero page; the guard marker is copied.
        assert!(cpt.pte(B + 4 * P).is_special());
        assert_eq!(c.guard_ranges(), vec![(B + 7 * P, B + 8 * P)]);
        // DONTCOPY: not in the child. WIPEONFORK: mapped, empty.
        assert!(c.vma_at(B + 16 * P).is_none());
        assert_eq!(c.read(B + 16 * P, &mut [0u8; 1]).map_err(|f| f.addr), Err(B + 16 * P));
        assert!(cpt.pte(B + 32 * P).is_none());
        assert_eq!(byte(&c, B + 32 * P), 0);
        assert_eq!(byte(&m, B + 32 * P), 0x33);
        // Shared memory (no anon_vma) is not copied either: the child faults in the same frame.
        assert!(cpt.pte(B + 48 * P).is_none());
        assert_eq!(byte(&c, B + 48 * P), 0x44);
        assert_eq!(ppt.pte(B + 48 * P).pfn(), cpt.pte(B + 48 * P).pfn());
        // A file VMA without an anon_vma is not copied: the child faults it in from the page cache.
        assert!(cpt.pte(B + 80 * P).is_none() && cpt.pte(B + 64 * P).is_none());
        assert_eq!(byte(&c, B + 80 * P), 0x55);
        // Copy-on-write: the child's store copies; the parent's first store after the child's reuses its page.
        c.write(B, b"child").unwrap();
        assert_eq!(c.fault_stats().faults.wp_copy, 1);
        assert_eq!(byte(&m, B), 0x11);
        m.write(B, b"parent").unwrap();
        assert_eq!(m.fault_stats().faults.wp_reuse, 1, "the page is the parent's alone again");
        // Both write page 1: the first copies, the second finds the page its own.
        m.write(B + P, b"p").unwrap();
        c.write(B + P, b"c").unwrap();
        assert_eq!((byte(&m, B + P), byte(&c, B + P)), (b'p', b'c'));
        // Shared memory stays shared.
        c.write(B + 48 * P, b"S").unwrap();
        assert_eq!(byte(&m, B + 48 * P), b'S');
        c.write(B + 64 * P, b"F").unwrap();
        assert_eq!(byte(&m, B + 64 * P), b'F');
        m.validate().unwrap();
        c.validate().unwrap();
        check(&[&m, &c], &[&file]);
        // The child's anon_vma chain: its own anon_vma, linked below the parent's.
        let pa = m.lookup(B).unwrap().anon().anon_vma().cloned().unwrap();
        let ca = c.lookup(B).unwrap().anon().anon_vma().cloned().unwrap();
        assert_ne!(pa.id(), ca.id());
        assert_eq!(ca.root_id(), pa.root_id());
        assert_eq!(c.lookup(B).unwrap().anon().chain_len(), 2);
        // The child exits: every page it held goes back.
        drop(c);
        check(&[&m], &[&file]);
    }
}

/// A grandchild after copy-on-write in the child: three generations, each with its own bytes.
#[test]
fn three_generations() {
    let file = VmFile::regular("/vmspace/f", 1, 4 * P);
    let m = parent(&file);
    let c = m.fork().unwrap();
    c.fill(B + 2 * P, P, 0xc1).unwrap();
    let g = c.fork_with(ForkMode::Reinsert).unwrap();
    g.fill(B + 3 * P, P, 0x91).unwrap();
    assert_eq!(g.fault(B + 2 * P, Access::Write), Ok(FaultKind::WpCopy));
    assert_eq!(
        [B + 2 * P, B + 3 * P].map(|a| (byte(&m, a), byte(&c, a), byte(&g, a))),
        [(0x11, 0xc1, 0xc1), (0x11, 0x11, 0x91)]
    );
    check(&[&m, &c, &g], &[&file]);
    drop(c);
    check(&[&m, &g], &[&file]);
}
