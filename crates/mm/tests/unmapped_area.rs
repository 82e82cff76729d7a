//! get_unmapped_area on the engine: top-down placement below `mmap_base`, hints, the guard gap below a
//! growsdown VMA, 2 MiB alignment of anonymous mappings whose length is a multiple of 2 MiB, the placement
//! methods of file systems (`thp_get_unmapped_area`, `shmem_get_unmapped_area`), and the limits.
#![cfg(not(loom))]

use std::sync::Arc;
use vmspace_mm::space::{Errno, Mm, MmConfig, TASK_SIZE, ThpMode, VmFile};
use vmspace_mm::space::{MapFlags, Prot};
use vmspace_mm::{Access, FileArea};

const P: u64 = 4096;
const RW: Prot = Prot::RW;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS);

#[test]
fn top_down_below_mmap_base() {
    let cfg = MmConfig::default();
    let base = cfg.mmap_base;
    let m = Mm::new(cfg);
    let a = m.mmap(0, 3 * P, RW, ANON, None, 0).unwrap();
    assert_eq!(a, base - 3 * P);
    let b = m.mmap(0, P, Prot::READ, ANON, None, 0).unwrap();
    assert_eq!(b, a - P, "the next mapping goes right below");
    // A freed hole at the top is reused first.
    m.munmap(a, 3 * P).unwrap();
    assert_eq!(m.mmap(0, 2 * P, RW, ANON, None, 0), Ok(base - 2 * P));
    m.validate().unwrap();
}

#[test]
fn hints() {
    let m = Mm::new(MmConfig::default());
    let h = 0x2000_0000_0000;
    assert_eq!(m.mmap(h + 5, P, RW, ANON, None, 0), Ok(h), "a free hint is used, page-aligned");
    let again = m.mmap(h, P, RW, ANON, None, 0).unwrap();
    assert_ne!(again, h, "an occupied hint falls back to the search");
    m.validate().unwrap();
    // A hint below mmap_min_addr is raised to it; one that rounds down to 0 is no hint.
    let m = Mm::new(MmConfig { mmap_min_addr: 16 * P, ..MmConfig::default() });
    assert_eq!(m.mmap(2 * P, P, RW, ANON, None, 0), Ok(16 * P));
    assert_ne!(m.mmap(P / 2, P, RW, ANON, None, 0), Ok(16 * P + P));
}

#[test]
fn growsdown_guard_gap_is_kept_free() {
    let cfg = MmConfig::default();
    let (base, gap) = (cfg.mmap_base, cfg.stack_guard_gap);
    let m = Mm::new(cfg);
    let stack = base - 16 * P;
    m.mmap(stack, 16 * P, RW, ANON | MapFlags::GROWSDOWN | MapFlags::FIXED, None, 0).unwrap();
    let a = m.mmap(0, P, RW, ANON, None, 0).unwrap();
    assert!(a + P <= stack - gap, "{a:#x} inside the guard gap below {stack:#x}");
    // A hint inside the gap is refused too.
    let h = stack - 2 * P;
    assert_ne!(m.mmap(h, P, RW, ANON, None, 0), Ok(h));
    m.validate().unwrap();
}

/// The kernel's mmap_min_addr (the LSM minimum when CONFIG_SECURITY makes it larger than the sysctl) bounds
/// hints and stack growth; MAP_FIXED below it but at or above the sysctl's value needs no capability
/// (`security/min_addr.c`, `mm/mmap.c: expand_downwards`, `security/commoncap.c: cap_mmap_addr`).
#[test]
fn the_lsm_mmap_min_addr_bounds_hints_and_stack_growth_not_fixed_maps() {
    let cfg =
        MmConfig { mmap_min_addr: P, lsm_mmap_min_addr: 16 * P, cap_sys_rawio: false, ..MmConfig::default() };
    let m = Mm::new(cfg);
    assert_eq!(m.mmap(2 * P, P, RW, ANON | MapFlags::FIXED, None, 0), Ok(2 * P), "no capability needed");
    assert_eq!(m.mmap(0, P, RW, ANON | MapFlags::FIXED, None, 0), Err(Errno::EPERM), "below the sysctl's");
    assert_eq!(m.mmap(4 * P, P, RW, ANON, None, 0), Ok(16 * P), "a hint is raised to the LSM minimum");
    // (Both unmapped again: an accessible VMA below would refuse the growth by the stack guard gap.)
    m.munmap(0, 17 * P).unwrap();
    m.mmap(18 * P, P, RW, ANON | MapFlags::GROWSDOWN | MapFlags::FIXED, None, 0).unwrap();
    assert!(m.fault(16 * P, Access::Read).is_ok(), "growth down to the minimum");
    assert_eq!(m.fault(15 * P, Access::Read), Err(Errno::EFAULT), "not below it");
    assert_eq!(m.vma_at(16 * P).map(|v| (v.start, v.end)), Some((16 * P, 19 * P)));
    m.validate().unwrap();
}

#[test]
fn pmd_sized_anonymous_mappings_are_aligned() {
    let m = Mm::new(MmConfig::default());
    let a = m.mmap(0, 4 << 20, RW, ANON, None, 0).unwrap();
    assert_eq!(a % (2 << 20), 0, "{a:#x}");
    let b = m.mmap(0, (2 << 20) + P, RW, ANON, None, 0).unwrap();
    assert_eq!(b % P, 0);
}

#[test]
fn limits() {
    let m = Mm::new(MmConfig::default());
    assert_eq!(m.mmap(0, TASK_SIZE + P, RW, ANON | MapFlags::NORESERVE, None, 0), Err(Errno::ENOMEM));
    // No room: everything from mmap_min_addr to TASK_SIZE is taken (as one fixed no-reserve mapping).
    let low = m.config().min_addr().max(P);
    m.mmap(low, TASK_SIZE - low, Prot::NONE, ANON | MapFlags::FIXED | MapFlags::NORESERVE, None, 0).unwrap();
    assert_eq!(m.mmap(0, P, RW, ANON, None, 0), Err(Errno::ENOMEM));
    m.validate().unwrap();
}

const M2: u64 = 2 << 20;

fn file_on(area: FileArea, size: u64) -> Arc<VmFile> {
    Arc::new(VmFile { area, ..(*VmFile::regular("/f", 1, size)).clone() })
}

/// `thp_get_unmapped_area` (ext4, xfs, btrfs): a mapping that covers a whole 2 MiB block of file offsets goes
/// where its address agrees with its offset modulo 2 MiB; others (and files of a file system without the
/// method) go where the plain search puts them.
#[test]
fn thp_file_mappings_agree_with_their_offsets_modulo_2m() {
    let m = Mm::new(MmConfig::default());
    let f = file_on(FileArea::Thp, 8 * M2);
    for (off, len) in [(0, M2), (0, M2 + P), (P, 2 * M2 - P), (M2, M2), (3 * P, 3 * M2)] {
        let a = m.mmap(0, len, Prot::READ, MapFlags::PRIVATE, Some(&f), off).unwrap();
        assert_eq!(a % M2, off % M2, "off {off:#x} len {len:#x} at {a:#x}");
    }
    m.validate().unwrap();
    // No whole block: right below mmap_base, whatever its alignment (the default mmap_base is not 2 MiB-aligned).
    let base = MmConfig::default().mmap_base;
    assert_ne!(base % M2, 0);
    for (off, len, flags) in
        [(0, M2 - P, MapFlags::SHARED), (P, M2 + P, MapFlags::PRIVATE), (M2, M2 - P, MapFlags::PRIVATE)]
    {
        let m = Mm::new(MmConfig::default());
        assert_eq!(
            m.mmap(0, len, Prot::READ, flags, Some(&f), off),
            Ok(base - len),
            "off {off:#x} len {len:#x}"
        );
    }
    // A file system without the method, or a kernel without THP: the plain search.
    let plain = file_on(FileArea::Mm, 8 * M2);
    let m = Mm::new(MmConfig::default());
    assert_eq!(m.mmap(0, M2, Prot::READ, MapFlags::PRIVATE, Some(&plain), 0), Ok(base - M2));
    let no_thp = Mm::new(MmConfig { transparent_hugepage: false, ..MmConfig::default() });
    assert_eq!(no_thp.mmap(0, M2, Prot::READ, MapFlags::PRIVATE, Some(&f), 0), Ok(base - M2));
    // With it: the padded search ends at mmap_base; the mapping moves up to the block boundary below it.
    let m = Mm::new(MmConfig::default());
    assert_eq!(m.mmap(0, M2, Prot::READ, MapFlags::PRIVATE, Some(&f), 0), Ok((base & !(M2 - 1)) - M2));
}

/// A hint free for the padded length is used as is (unaligned); one free only for the mapping itself is
/// not: the padded search goes top-down and aligns. `MAP_FIXED` is the address given.
#[test]
fn thp_file_hints_and_fixed_addresses() {
    let m = Mm::new(MmConfig::default());
    let f = file_on(FileArea::Thp, 8 * M2);
    let h = 0x2000_0000_1000;
    assert_eq!(m.mmap(h, M2, Prot::READ, MapFlags::PRIVATE, Some(&f), 0), Ok(h));
    // A hole of exactly 2 MiB at the hint (the fences around it are fixed).
    let slot = 0x2000_1000_1000;
    m.mmap(slot - P, P, Prot::NONE, ANON | MapFlags::FIXED, None, 0).unwrap();
    m.mmap(slot + M2, P, Prot::NONE, ANON | MapFlags::FIXED, None, 0).unwrap();
    let a = m.mmap(slot, M2, Prot::READ, MapFlags::PRIVATE, Some(&f), 0).unwrap();
    assert_ne!(a, slot);
    assert_eq!(a % M2, 0, "{a:#x}");
    // The same hole takes a mapping that covers no whole block.
    assert_eq!(m.mmap(slot, M2, Prot::READ, MapFlags::PRIVATE, Some(&f), P), Ok(slot));
    let fixed = 0x2000_2000_3000;
    assert_eq!(m.mmap(fixed, M2, Prot::READ, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0), Ok(fixed));
    m.validate().unwrap();
}

/// mremap moving a file VMA places the destination by the file's method at the moved range's file page.
#[test]
fn mremap_of_a_thp_file_mapping_aligns_to_the_moved_ranges_offset() {
    let m = Mm::new(MmConfig::default());
    let f = file_on(FileArea::Thp, 16 * M2);
    let a = 0x2000_0000_0000;
    m.mmap(a, 2 * M2, Prot::READ, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0).unwrap();
    // Something right after it, so that growing must move.
    m.mmap(a + 2 * M2, P, Prot::NONE, ANON | MapFlags::FIXED, None, 0).unwrap();
    // Grow [a + 4 KiB, a + 2 MiB) (file pages 1..) to 4 MiB: it must move; its file range starts at 4 KiB.
    let to = m.mremap(a + P, M2 - P, 2 * M2, vmspace_mm::MremapFlags::MAYMOVE, 0).unwrap();
    assert_eq!(to % M2, P, "{to:#x}");
    m.validate().unwrap();
}

/// `shmem_get_unmapped_area`: tmpfs files align only on a mount with `huge=` (or with `shmem_enabled`
/// `force`), shared anonymous memory only when `shmem_enabled` allows huge pages; at the file offset modulo
/// 2 MiB, and a placement already there stays.
#[test]
fn shmem_mappings_align_only_when_huge_pages_are_allowed() {
    let never = file_on(FileArea::Shmem { huge: false }, 8 * M2);
    let huge = file_on(FileArea::Shmem { huge: true }, 8 * M2);
    let shared_anon = MapFlags::SHARED | MapFlags::ANONYMOUS;
    // Start each search 1 MiB into a block: everything placed top-down below a fence that reaches from
    // 1 MiB below a block boundary (`top`) to mmap_base.
    let cfg = MmConfig::default();
    let base = cfg.mmap_base;
    let top = (base & !(M2 - 1)) - M2 / 2;
    let fresh = |cfg: MmConfig| {
        let m = Mm::new(cfg);
        m.mmap(top, base - top, Prot::NONE, ANON | MapFlags::FIXED, None, 0).unwrap();
        m
    };
    let m = fresh(cfg.clone());
    assert_eq!(m.mmap(0, M2, Prot::READ, MapFlags::SHARED, Some(&never), 0), Ok(top - M2));
    assert_eq!(m.mmap(0, M2, RW, shared_anon, None, 0).map(|a| a % M2), Ok(M2 / 2), "shmem_enabled never");
    let m = fresh(cfg.clone());
    let a = m.mmap(0, M2, Prot::READ, MapFlags::SHARED, Some(&huge), 0).unwrap();
    assert_eq!(a, top - M2 / 2 - M2, "huge=: the next block down that fits");
    let a = m.mmap(0, 2 * M2, Prot::READ, MapFlags::SHARED, Some(&huge), P).unwrap();
    assert_eq!(a % M2, P);
    let m = fresh(MmConfig { thp_shmem_enabled: ThpMode::Always, ..cfg.clone() });
    assert_eq!(m.mmap(0, M2, RW, shared_anon, None, 0).map(|a| a % M2), Ok(0), "shmem_enabled always");
    let m = fresh(MmConfig { thp_shmem_enabled: ThpMode::Force, ..cfg.clone() });
    assert_eq!(m.mmap(0, M2, Prot::READ, MapFlags::SHARED, Some(&never), 0).map(|a| a % M2), Ok(0), "force");
    let m = fresh(MmConfig { thp_shmem_enabled: ThpMode::Deny, ..cfg });
    assert_eq!(m.mmap(0, M2, Prot::READ, MapFlags::SHARED, Some(&huge), 0), Ok(top - M2), "deny");
}
