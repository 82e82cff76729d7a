//! `MAP_HUGETLB` against configured pools, one test per kernel rule (`mm/mmap.c: ksys_mmap_pgoff`,
//! `fs/hugetlbfs/inode.c`, `mm/hugetlb.c`, `mm/mremap.c: align_hugetlb`). The empty-pool rules were observed
//! on the live kernel as it runs here (`vm.nr_hugepages` 0; `scripts/regress/mmap-hugetlb-pool.script`, whose
//! results hold for any pool size); the pool rules with `vm.nr_hugepages` set to 4 for the measurement (C
//! programs reading `HugePages_Free` and `HugePages_Rsvd`, and an op script whose every result the engine
//! matched), then set back to 0.
#![cfg(not(loom))]

use vmspace_mm::space::{
    Errno, HugetlbConfig, HugetlbPool, MapFlags, Mm, MmConfig, MremapFlags, Prot, VmFile,
};

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const M2: u64 = 2 << 20;
const H: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::HUGETLB);
const HF: MapFlags = H.union(MapFlags::FIXED);
const NR: MapFlags = MapFlags::NORESERVE;

/// An engine with `pages` free 2 MiB pages (and an empty 1 GiB pool).
fn pool(pages: u64) -> Mm {
    Mm::new(MmConfig {
        hugetlb: HugetlbConfig {
            default_size: M2,
            pools: vec![
                HugetlbPool { size: M2, available: pages, dev_minor: 0x11 },
                HugetlbPool { size: 1 << 30, available: 0, dev_minor: 0x12 },
            ],
        },
        ..MmConfig::default()
    })
}

fn available(m: &Mm) -> u64 {
    m.huge_pools()[0].available()
}

/// `hstate_sizelog`: the `MAP_HUGE_*` field names the pool (0: the default size); a size with no pool is
/// EINVAL before any other check, `MAP_UNINITIALIZED` (the field's lowest bit) included; `MAP_HUGETLB` on
/// a regular file is EINVAL (`ksys_mmap_pgoff`).
#[test]
fn huge_size_field_hstate_sizelog() {
    let m = pool(0);
    for log in [12u32, 16, 1, 63, 20, 22] {
        let f = H | MapFlags::from_bits_retain(log << 26);
        assert_eq!(m.mmap(0, M2, Prot::RW, f | NR, None, 0), Err(Errno::EINVAL), "log {log}");
    }
    assert_eq!(m.mmap(0, M2, Prot::RW, H | NR | MapFlags::UNINITIALIZED, None, 0), Err(Errno::EINVAL));
    assert!(m.mmap(0, M2, Prot::RW, H | NR | MapFlags::HUGE_2MB, None, 0).is_ok());
    assert!(m.mmap(0, 1 << 30, Prot::RW, H | NR | MapFlags::HUGE_1GB, None, 0).is_ok());
    let f = VmFile::regular("/f", 1, 4 * M2);
    let pf = MapFlags::PRIVATE | MapFlags::HUGETLB;
    assert_eq!(m.mmap(0, M2, Prot::READ, pf, Some(&f), 0), Err(Errno::EINVAL));
    assert_eq!(
        Mm::new(MmConfig {
            hugetlb: HugetlbConfig { default_size: M2, pools: vec![] },
            ..MmConfig::default()
        })
        .mmap(0, M2, Prot::RW, H, None, 0),
        Err(Errno::EINVAL)
    );
}

/// `ksys_mmap_pgoff`: the length is rounded up to the huge page size; a length of 0, or one that wraps to 0
/// there, is EINVAL (`do_mmap`'s `!len`), not ENOMEM as for small pages.
#[test]
fn length_rounds_to_huge_pages_ksys_mmap_pgoff() {
    let m = pool(0);
    assert_eq!(m.mmap(0, 0, Prot::RW, H | NR, None, 0), Err(Errno::EINVAL));
    assert_eq!(m.mmap(0, u64::MAX, Prot::RW, H | NR, None, 0), Err(Errno::EINVAL));
    let a = m.mmap(0, P, Prot::RW, H | NR, None, 0).unwrap();
    let v = m.vma_at(a).unwrap();
    assert_eq!((v.end - v.start, a % M2), (M2, 0));
}

/// `hugetlb_get_unmapped_area`: a fixed address must be huge-page aligned (EINVAL, also for addresses in the
/// error range: this check comes first); a hint is rounded up to a huge page.
#[test]
fn placement_hugetlb_get_unmapped_area() {
    let m = pool(0);
    assert_eq!(m.mmap(B + P, M2, Prot::RW, HF | NR, None, 0), Err(Errno::EINVAL));
    assert_eq!(m.mmap(0xffff_ffff_ffff_ff00, M2, Prot::RW, HF | NR, None, 0), Err(Errno::EINVAL));
    assert_eq!(m.mmap(B + M2, M2, Prot::RW, HF | NR, None, 0), Ok(B + M2));
    assert_eq!(m.mmap(B + 8 * M2 + P, P, Prot::RW, H | NR, None, 0), Ok(B + 9 * M2));
    m.validate().unwrap();
}

/// `hugetlbfs_file_mmap`: with an empty pool a reserving mapping is ENOMEM and a `MAP_NORESERVE` one maps (and
/// fails at its first touch, SIGBUS); the page offset must be huge-page aligned (EINVAL). Both refusals come
/// after `MAP_FIXED` unmapped the range: a hole is left.
#[test]
fn reservations_and_holes_hugetlbfs_file_mmap() {
    let m = pool(0);
    let af = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED | NR;
    m.mmap(B, 8 * M2, Prot::RW, af, None, 0).unwrap();
    assert_eq!(m.mmap(B + M2, M2, Prot::RW, HF, None, 0), Err(Errno::ENOMEM));
    assert_eq!(m.mmap(B + 3 * M2, M2, Prot::RW, HF | NR, None, P), Err(Errno::EINVAL));
    let ranges: Vec<_> = m.vmas().map(|v| ((v.start - B) / M2, (v.end - B) / M2)).collect();
    assert_eq!(ranges, [(0, 1), (2, 3), (4, 8)]);
    assert_eq!(m.mmap(B + M2, M2, Prot::RW, HF | NR, None, 2 * M2), Ok(B + M2));
    assert_eq!(m.vma_at(B + M2).unwrap().pgoff, 2 * M2 / P);
    assert_eq!(m.gup_access(B + M2, true), Err(Errno::EFAULT));
    assert_eq!(
        m.mmap(0, M2, Prot::RW, MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::HUGETLB, None, 0),
        Err(Errno::ENOMEM)
    );
    m.validate().unwrap();
}

/// A hugetlb VMA (`hugetlbfs_file_mmap`, `accountable_mapping`, `__mmap_complete`): `VM_HUGETLB |
/// VM_DONTEXPAND` (smaps `de ht`), no `VM_ACCOUNT`, `VM_NORESERVE` with `MAP_NORESERVE` whatever the overcommit
/// policy, no `VM_LOCKED` with `MAP_LOCKED`; shown as `/anon_hugepage (deleted)`; neighbours never merge; a
/// file mapping (`MAP_GROWSDOWN`, `MAP_DROPPABLE` EINVAL).
#[test]
fn the_vma_hugetlbfs_file_mmap() {
    let m = pool(8);
    m.mmap(B, M2, Prot::RW, HF, None, 0).unwrap();
    m.mmap(B + M2, M2, Prot::RW, HF | NR | MapFlags::LOCKED, None, 0).unwrap();
    assert_eq!(m.map_count(), 2);
    let v = m.vma_at(B).unwrap();
    assert_eq!(v.flags.smaps_mnemonics(), "rd wr mr mw me de ht ");
    assert_eq!(m.vma_at(B + M2).unwrap().flags.smaps_mnemonics(), "rd wr mr mw me de nr ht ");
    let line = m.maps_text().lines().next().unwrap().to_string();
    assert!(line.starts_with("200000000000-200000200000 rw-p 00000000 00:11 "), "{line}");
    assert!(line.ends_with(" /anon_hugepage (deleted)"), "{line}");
    assert_eq!(m.mmap(0, M2, Prot::RW, H | MapFlags::GROWSDOWN, None, 0), Err(Errno::EINVAL));
    let d = MapFlags::DROPPABLE | MapFlags::ANONYMOUS | MapFlags::HUGETLB;
    assert_eq!(m.mmap(0, M2, Prot::RW, d, None, 0), Err(Errno::EINVAL));
    let sv = MapFlags::SHARED_VALIDATE | MapFlags::ANONYMOUS | MapFlags::HUGETLB | MapFlags::HUGE_2MB;
    assert!(m.mmap(0, M2, Prot::RW, sv, None, 0).is_ok());
    m.validate().unwrap();
}

/// `hugetlb_reserve_pages` / `hugetlb_no_page` / `hugetlb_vm_op_close`, measured with 4 pages: a mapping
/// reserves its pages (ENOMEM when the pool has fewer left); a touch uses the reservation; a `MAP_NORESERVE`
/// touch needs an unreserved free page (EFAULT without); unmapping gives back the unfaulted reservations and
/// the faulted pages of the range; a shared object keeps them until its last mapping goes.
#[test]
fn pool_accounting_hugetlb_reserve_pages() {
    let m = pool(4);
    m.mmap(B, M2, Prot::RW, HF, None, 0).unwrap();
    m.mmap(B + 2 * M2, 2 * M2, Prot::RW, HF, None, 0).unwrap();
    assert_eq!(available(&m), 1);
    assert_eq!(m.mmap(B + 5 * M2, 2 * M2, Prot::RW, HF, None, 0), Err(Errno::ENOMEM));
    m.mmap(B + 5 * M2, M2, Prot::RW, HF, None, 0).unwrap();
    assert_eq!(m.mmap(B + 7 * M2, M2, Prot::RW, HF, None, 0), Err(Errno::ENOMEM));
    m.mmap(B + 7 * M2, M2, Prot::RW, HF | NR, None, 0).unwrap();
    assert_eq!(available(&m), 0);
    m.gup_access(B, true).unwrap();
    m.gup_access(B + 4096, false).unwrap();
    assert_eq!(m.gup_access(B + 7 * M2, true), Err(Errno::EFAULT));
    m.munmap(B + 3 * M2, M2).unwrap();
    assert_eq!(available(&m), 1, "the unfaulted reservation of the unmapped page");
    m.munmap(B, M2).unwrap();
    assert_eq!(available(&m), 2, "the faulted page");
    m.gup_access(B + 7 * M2, true).unwrap();
    assert_eq!(available(&m), 1, "a NORESERVE page from the pool");
    let sh = MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::HUGETLB | MapFlags::FIXED;
    m.mmap(B + 9 * M2, M2, Prot::RW, sh, None, 0).unwrap();
    assert_eq!(available(&m), 0);
    m.munmap(B + 9 * M2, M2).unwrap();
    assert_eq!(available(&m), 1);
    m.validate().unwrap();
}

/// `hugetlb_vm_op_split`: a hugetlb VMA splits only at huge page boundaries: munmap, mprotect (even of one
/// byte: the length rounds to a small page) and madvise of part of a huge page are EINVAL.
#[test]
fn splits_only_at_huge_pages_hugetlb_vm_op_split() {
    let m = pool(4);
    m.mmap(B, 2 * M2, Prot::RW, HF, None, 0).unwrap();
    assert_eq!(m.munmap(B, P), Err(Errno::EINVAL));
    assert_eq!(m.munmap(B + M2 - P, P), Err(Errno::EINVAL));
    assert_eq!(m.mprotect(B, 1, Prot::READ), Err(Errno::EINVAL));
    assert_eq!(m.madvise(B, P, vmspace_mm::space::Advice::DONTFORK), Err(Errno::EINVAL));
    assert_eq!(m.mprotect(B, M2, Prot::READ), Ok(()));
    assert_eq!(m.map_count(), 2);
    assert_eq!(m.munmap(B + M2, M2), Ok(()));
    m.validate().unwrap();
}

/// `align_hugetlb`: mremap of a hugetlb VMA rounds the lengths up to huge pages, may not grow it and needs
/// huge-page aligned addresses (EINVAL); a shrink by less than a huge page is a no-op; a move keeps the pages
/// and reservations.
#[test]
fn mremap_rules_align_hugetlb() {
    let m = pool(4);
    m.mmap(B, M2, Prot::RW, HF, None, 0).unwrap();
    m.gup_access(B, true).unwrap();
    let mv = MremapFlags::MAYMOVE;
    assert_eq!(m.mremap(B, M2, 2 * M2, mv, 0), Err(Errno::EINVAL));
    assert_eq!(m.mremap(B, M2, M2 - P, MremapFlags::empty(), 0), Ok(B));
    assert_eq!(m.mremap(B, M2, M2, mv | MremapFlags::FIXED, B + 8 * M2 + P), Err(Errno::EINVAL));
    let before = available(&m);
    assert_eq!(m.mremap(B, M2, M2, mv | MremapFlags::FIXED, B + 8 * M2), Ok(B + 8 * M2));
    assert_eq!(available(&m), before, "the page moved with the mapping");
    assert_eq!(m.mremap(B + 8 * M2, M2, M2, mv | MremapFlags::DONTUNMAP, 0), Err(Errno::EINVAL));
    m.munmap(B + 8 * M2, M2).unwrap();
    assert_eq!(available(&m), 4);
    m.validate().unwrap();
}

/// `MAP_POPULATE` faults the hugetlb pages in (`__mm_populate`), as far as the pool gives them.
#[test]
fn populate_takes_pages_mm_populate() {
    let m = pool(2);
    m.mmap(B, 4 * M2, Prot::RW, HF | NR | MapFlags::POPULATE, None, 0).unwrap();
    assert_eq!(available(&m), 0);
    assert_eq!(m.gup_access(B + M2, true), Ok(()));
    assert_eq!(m.gup_access(B + 2 * M2, true), Err(Errno::EFAULT));
    m.validate().unwrap();
}
