//! get_unmapped_area on the engine: top-down placement below `mmap_base`, hints, the guard gap below a
//! growsdown VMA, 2 MiB alignment of anonymous mappings whose length is a multiple of 2 MiB, and the limits.
#![cfg(not(loom))]

use vmspace_mm::Access;
use vmspace_mm::space::{Errno, Mm, MmConfig, TASK_SIZE};
use vmspace_mm::space::{MapFlags, Prot};

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
