//! mseal and what a seal refuses, one test per kernel rule (`mm/mseal.c`, and the checks in `mm/vma.c`,
//! `mm/mprotect.c`, `mm/mremap.c`, `mm/madvise.c`, `mm/mmap.c`). Every rule here was first observed on the
//! live 6.18 kernel with a C program (errno and the maps afterwards); `mseal` is not an op-script call yet,
//! so these tests are where the engine is held to it.
#![cfg(not(loom))]

use vmspace_mm::space::{Advice, Errno, MapFlags, Mm, MmConfig, MremapFlags, Prot, VmFile};
use vmspace_mm::vma::VmFlags;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const AF: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

fn mm() -> Mm {
    Mm::new(MmConfig::default())
}

fn sealed(m: &Mm, addr: u64) -> bool {
    m.vma_at(addr).expect("mapped").flags.contains(VmFlags::SEALED)
}

/// `(start page, end page)` of every VMA, relative to `B`.
fn layout(m: &Mm) -> Vec<(u64, u64)> {
    m.vmas().map(|v| ((v.start - B) / P, (v.end - B) / P)).collect()
}

/// `do_mseal`: flags must be 0, the start aligned, the length must not wrap (EINVAL, before the range is
/// looked at); an empty range succeeds even unmapped.
#[test]
fn argument_checks_do_mseal() {
    let m = mm();
    assert_eq!(m.mseal(B, P, 1), Err(Errno::EINVAL));
    assert_eq!(m.mseal(B + 1, P, 0), Err(Errno::EINVAL));
    assert_eq!(m.mseal(B + 1, P, 1), Err(Errno::EINVAL));
    assert_eq!(m.mseal(B, 0, 0), Ok(()));
    assert_eq!(m.mseal(B, u64::MAX, 0), Err(Errno::EINVAL), "rounds up to 0");
    assert_eq!(m.mseal(B, 0u64.wrapping_sub(P), 0), Err(Errno::EINVAL), "end wraps");
    assert_eq!(m.mseal(B, P, 0), Err(Errno::ENOMEM), "unmapped");
}

/// `range_contains_unmapped`: a hole anywhere in the range (start, middle, end) is ENOMEM, and nothing is
/// sealed then.
#[test]
fn holes_are_enomem_before_any_change_range_contains_unmapped() {
    let m = mm();
    m.mmap(B, 2 * P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 3 * P, 2 * P, Prot::RW, AF, None, 0).unwrap();
    for (s, e) in [(0, 5), (0, 3), (2, 5), (4, 6)] {
        assert_eq!(m.mseal(B + s * P, (e - s) * P, 0), Err(Errno::ENOMEM), "[{s}, {e})");
    }
    assert!(m.vmas().all(|v| !v.flags.contains(VmFlags::SEALED)));
    assert_eq!(layout(&m), [(0, 2), (3, 5)]);
}

/// `mseal_apply`: `VM_SEALED` through `vma_modify_flags`: the rest of a partly covered VMA splits off (a
/// length rounds up to a page); sealing a neighbour with equal flags merges the sealed parts; sealing twice
/// changes nothing. smaps shows it as `sl`.
#[test]
fn seal_splits_and_merges_mseal_apply() {
    let m = mm();
    m.mmap(B, 2 * P, Prot::RW, AF, None, 0).unwrap();
    m.mseal(B + P, 1, 0).unwrap();
    assert_eq!(layout(&m), [(0, 1), (1, 2)]);
    assert!(!sealed(&m, B) && sealed(&m, B + P));
    m.mseal(B, P, 0).unwrap();
    assert_eq!(layout(&m), [(0, 2)]);
    m.mseal(B, 2 * P, 0).unwrap();
    assert_eq!(layout(&m), [(0, 2)]);
    assert!(m.vma_at(B).unwrap().flags.smaps_mnemonics().ends_with("sl "));
    m.validate().unwrap();
}

/// `vms_gather_munmap_vmas`: munmap of a sealed VMA is EPERM; when the first VMA of the range is not sealed
/// but a later one is, the first is split at the start before the refusal and the split stays. A range
/// without VMAs is still fine.
#[test]
fn munmap_refused_after_the_start_split_vms_gather_munmap_vmas() {
    let m = mm();
    m.mmap(B + 10 * P, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 14 * P, 2 * P, Prot::READ, AF, None, 0).unwrap();
    m.mseal(B + 14 * P, 2 * P, 0).unwrap();
    assert_eq!(m.munmap(B + 14 * P, P), Err(Errno::EPERM));
    assert_eq!(layout(&m), [(10, 14), (14, 16)], "a sealed first VMA is not split");
    assert_eq!(m.munmap(B + 12 * P, 3 * P), Err(Errno::EPERM));
    assert_eq!(layout(&m), [(10, 12), (12, 14), (14, 16)]);
    assert_eq!(m.munmap(B + 20 * P, P), Ok(()));
    m.validate().unwrap();
}

/// `__mmap_region` → `vms_gather_munmap_vmas`: a `MAP_FIXED` mapping over a sealed VMA is EPERM (with the
/// start split kept), but the checks of `do_mmap` come first: `MAP_FIXED_NOREPLACE` is EEXIST, a bad mapping
/// type EINVAL, a write-shared read-only file EACCES. A hint at a sealed address is just moved.
#[test]
fn map_fixed_over_a_seal_do_mmap_order() {
    let m = mm();
    let ro = std::sync::Arc::new(VmFile { writable: false, ..(*VmFile::regular("/ro", 1, 64 * P)).clone() });
    m.mmap(B + 10 * P, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 14 * P, 2 * P, Prot::READ, AF, None, 0).unwrap();
    m.mseal(B + 14 * P, 2 * P, 0).unwrap();
    let at = B + 14 * P;
    assert_eq!(m.mmap(at, P, Prot::RW, AF, None, 0), Err(Errno::EPERM));
    let noreplace = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED_NOREPLACE;
    assert_eq!(m.mmap(at, P, Prot::RW, noreplace, None, 0), Err(Errno::EEXIST));
    assert_eq!(m.mmap(at, P, Prot::RW, MapFlags::ANONYMOUS | MapFlags::FIXED, None, 0), Err(Errno::EINVAL));
    assert_eq!(m.mmap(at, P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&ro), 0), Err(Errno::EACCES));
    let hinted = m.mmap(at, P, Prot::RW, MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0).unwrap();
    assert_ne!(hinted, at);
    assert_eq!(m.mmap(B + 11 * P, 4 * P, Prot::RW, AF, None, 0), Err(Errno::EPERM));
    assert_eq!(layout(&m)[..3], [(10, 11), (11, 14), (14, 16)]);
    m.validate().unwrap();
}

/// `mprotect_fixup`: a sealed VMA refuses mprotect first thing, even to the flags it has; the VMAs before it
/// in the range keep their change (`do_mprotect_pkey`'s loop); a zero length succeeds before any lookup.
#[test]
fn mprotect_refused_per_vma_mprotect_fixup() {
    let m = mm();
    m.mmap(B + 10 * P, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 14 * P, 2 * P, Prot::READ, AF, None, 0).unwrap();
    m.mseal(B + 14 * P, 2 * P, 0).unwrap();
    assert_eq!(m.mprotect(B + 14 * P, P, Prot::READ), Err(Errno::EPERM));
    assert_eq!(m.pkey_mprotect(B + 14 * P, P, Prot::READ, -1), Err(Errno::EPERM));
    assert_eq!(m.mprotect(B + 14 * P, 0, Prot::RW), Ok(()));
    assert_eq!(m.mprotect(B + 10 * P, 6 * P, Prot::RX), Err(Errno::EPERM));
    assert_eq!(m.vma_at(B + 10 * P).unwrap().flags & VmFlags::ACCESS_FLAGS, VmFlags::READ | VmFlags::EXEC);
    assert_eq!(m.mprotect(B + 13 * P, 3 * P, Prot::READ), Err(Errno::EPERM));
    assert_eq!(layout(&m), [(10, 13), (13, 14), (14, 16)]);
    m.validate().unwrap();
}

/// `check_prep_vma`: a sealed source is EPERM for every mremap, a no-op resize included, after the parameter
/// checks (unknown flags, overlap: EINVAL); a sealed destination refuses the `MREMAP_FIXED` unmap; a
/// multi-VMA `MREMAP_FIXED` move keeps the VMAs moved before the sealed one.
#[test]
fn mremap_refused_check_prep_vma() {
    let m = mm();
    m.mmap(B + 10 * P, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 14 * P, 2 * P, Prot::READ, AF, None, 0).unwrap();
    m.mseal(B + 14 * P, 2 * P, 0).unwrap();
    let s = B + 14 * P;
    let mm_ = MremapFlags::MAYMOVE;
    assert_eq!(m.mremap(s, P, P, MremapFlags::empty(), 0), Err(Errno::EPERM));
    assert_eq!(m.mremap(s, 2 * P, P, MremapFlags::empty(), 0), Err(Errno::EPERM));
    assert_eq!(m.mremap(s, 2 * P, 3 * P, mm_, 0), Err(Errno::EPERM));
    assert_eq!(m.mremap(s, 0, P, mm_, 0), Err(Errno::EPERM));
    assert_eq!(m.mremap(s, 4 * P, 4 * P, mm_, 0), Err(Errno::EPERM));
    assert_eq!(m.mremap(s, P, P, mm_ | MremapFlags::DONTUNMAP, 0), Err(Errno::EPERM));
    assert_eq!(m.mremap(s, P, P, MremapFlags::from_bits_retain(8), 0), Err(Errno::EINVAL));
    assert_eq!(m.mremap(s, P, P, mm_ | MremapFlags::FIXED, s), Err(Errno::EINVAL));
    m.mmap(B + 20 * P, 2 * P, Prot::RW, AF, None, 0).unwrap();
    assert_eq!(m.mremap(B + 20 * P, P, P, mm_ | MremapFlags::FIXED, s), Err(Errno::EPERM));
    assert_eq!(m.mremap(B + 10 * P, 6 * P, 6 * P, mm_ | MremapFlags::FIXED, B + 40 * P), Err(Errno::EPERM));
    assert_eq!(layout(&m), [(14, 16), (20, 22), (40, 44)]);
    m.validate().unwrap();
}

/// `brk` shrinking over a sealed heap VMA fails in `do_vmi_align_munmap` and returns the old break.
#[test]
fn brk_shrink_over_a_seal_keeps_the_break_sys_brk() {
    let cfg = MmConfig::default();
    let start = cfg.start_brk;
    let m = Mm::new(cfg);
    assert_eq!(m.brk(start + 4 * P), start + 4 * P);
    m.mseal(start + 3 * P, P, 0).unwrap();
    assert_eq!(m.brk(start + 2 * P), start + 4 * P);
    assert_eq!(m.brk(start + 4 * P - 1), start + 4 * P - 1, "the same page: no unmap");
    assert_eq!(m.brk(start + 8 * P), start + 8 * P);
    m.validate().unwrap();
}

/// `can_madvise_modify`: on a sealed VMA, only discarding advice is refused, and only on anonymous memory the
/// thread cannot write (the live kernel: `r--` and `---` anonymous refuse DONTNEED, FREE, DONTFORK,
/// WIPEONFORK...; `rw-`, `-w-`, file and shared anonymous mappings allow them). In the walk, the VMAs before
/// the refused one keep their change.
#[test]
fn madvise_discard_on_read_only_anonymous_can_madvise_modify() {
    let m = mm();
    let f = VmFile::regular("/f", 1, 64 * P);
    m.mmap(B, P, Prot::READ, AF, None, 0).unwrap();
    m.mmap(B + 2 * P, P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 4 * P, P, Prot::READ, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0).unwrap();
    m.mmap(B + 6 * P, P, Prot::READ, MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED, None, 0)
        .unwrap();
    m.mmap(B + 8 * P, P, Prot::NONE, AF, None, 0).unwrap();
    m.mmap(B + 10 * P, P, Prot::WRITE, AF, None, 0).unwrap();
    for i in 0..6 {
        m.mseal(B + 2 * i * P, P, 0).unwrap();
    }
    let refused = [true, false, false, false, true, false];
    for (i, &no) in refused.iter().enumerate() {
        let a = B + 2 * i as u64 * P;
        assert_eq!(m.madvise(a, P, Advice::DONTNEED), if no { Err(Errno::EPERM) } else { Ok(()) }, "VMA {i}");
        assert_eq!(m.madvise(a, P, Advice::DONTFORK).err(), no.then_some(Errno::EPERM), "VMA {i}");
    }
    // Not discarding: fine on the read-only anonymous VMA.
    assert_eq!(m.madvise(B, P, Advice::DOFORK), Ok(()));
    assert_eq!(m.madvise(B, P, Advice::KEEPONFORK), Ok(()));
    // The walk: [21, 22) gets VM_DONTCOPY (split off), then the sealed read-only VMA refuses.
    m.mmap(B + 20 * P, 2 * P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 22 * P, P, Prot::READ, AF, None, 0).unwrap();
    m.mseal(B + 22 * P, P, 0).unwrap();
    assert_eq!(m.madvise(B + 21 * P, 2 * P, Advice::DONTFORK), Err(Errno::EPERM));
    assert!(m.vma_at(B + 21 * P).unwrap().flags.contains(VmFlags::DONTCOPY));
    assert!(!m.vma_at(B + 20 * P).unwrap().flags.contains(VmFlags::DONTCOPY));
    m.validate().unwrap();
}

/// `dup_mmap` copies `VM_SEALED` with the other flags: the child cannot unmap it either.
#[test]
fn fork_inherits_seals_dup_mmap() {
    let m = mm();
    m.mmap(B, 2 * P, Prot::RW, AF, None, 0).unwrap();
    m.mseal(B, 2 * P, 0).unwrap();
    let c = m.fork().unwrap();
    assert!(sealed(&c, B));
    assert_eq!(c.munmap(B, P), Err(Errno::EPERM));
    c.validate().unwrap();
}

/// `mseal_apply` → `vma_modify_flags` → `split_vma`: a split refused at `max_map_count` stops the walk with
/// ENOMEM; the VMAs sealed before it stay sealed (Linux's own partial progress).
#[test]
fn split_refused_at_the_map_count_limit_mseal_apply() {
    let m = Mm::new(MmConfig { max_map_count: 3, ..MmConfig::default() });
    m.mmap(B, 2 * P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 2 * P, 2 * P, Prot::READ, AF, None, 0).unwrap();
    m.mmap(B + 4 * P, 2 * P, Prot::RW, AF, None, 0).unwrap();
    assert_eq!(m.mseal(B, 5 * P, 0), Err(Errno::ENOMEM));
    assert!(sealed(&m, B) && sealed(&m, B + 2 * P) && !sealed(&m, B + 4 * P));
    m.validate().unwrap();
}

/// Sealed VMAs still take flag changes that are not refused: madvise splits them (`madvise_update_vma` does
/// not check seals), faults work.
#[test]
fn sealed_vmas_still_change_flags_madvise_update_vma() {
    let m = mm();
    m.mmap(B, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.mseal(B, 4 * P, 0).unwrap();
    m.madvise(B + P, P, Advice::DONTFORK).unwrap();
    assert_eq!(layout(&m), [(0, 1), (1, 2), (2, 4)]);
    assert!(m.vmas().all(|v| v.flags.contains(VmFlags::SEALED)));
    m.gup_access(B, true).unwrap();
    m.validate().unwrap();
}
