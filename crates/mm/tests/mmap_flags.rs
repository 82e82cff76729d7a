//! Every mmap flag and PROT bit of Linux 6.18, unknown bits, and the top of the address space: one test per
//! kernel rule (`mm/mmap.c: do_mmap`, `__get_unmapped_area`, `include/linux/mman.h: calc_vm_flag_bits`,
//! `LEGACY_MAP_MASK`, `arch/x86/kernel/sys_x86_64.c`). Each rule was observed on the live kernel first (a C
//! program, and `scripts/regress/mmap-*.script` where the op-script syntax reaches it).
#![cfg(not(loom))]

use std::sync::Arc;

use vmspace_mm::space::{Errno, MapFlags, Mm, MmConfig, Prot, TASK_SIZE, VmFile};
use vmspace_mm::vma::VmFlags;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const M2: u64 = 2 << 20;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS);
const AF: MapFlags = ANON.union(MapFlags::FIXED);

fn mm() -> Mm {
    Mm::new(MmConfig::default())
}

fn raw(bits: u32) -> MapFlags {
    MapFlags::from_bits_retain(bits)
}

fn flags_at(m: &Mm, a: u64) -> VmFlags {
    m.vma_at(a).expect("mapped").flags
}

/// `LEGACY_MAP_MASK`: `MAP_SHARED_VALIDATE` of a file accepts the historical flags plus `MAP_32BIT`,
/// `MAP_ABOVE4G` and the `MAP_HUGE_2MB`/`MAP_HUGE_1GB` bits (26..30), refuses everything else with EOPNOTSUPP
/// (`MAP_FIXED_NOREPLACE` and bit 31 included); `MAP_SHARED` drops what `MAP_SHARED_VALIDATE` would refuse;
/// anonymous mappings ignore unknown bits. Live kernel: every bit 4..63 of an ext4 file.
#[test]
fn shared_validate_mask_legacy_map_mask() {
    let m = mm();
    let f = VmFile::regular("/f", 1, 64 * P);
    let sv = MapFlags::SHARED_VALIDATE | MapFlags::FIXED;
    for bit in 4..32 {
        let b = 1u32 << bit;
        let r = m.mmap(B, P, Prot::READ, sv | raw(b), Some(&f), 0);
        let want = match b {
            0x10 | 0x40 | 0x80 | 0x800 | 0x1000 | 0x2000 | 0x4000 | 0x8000 | 0x1_0000 | 0x2_0000 => Ok(B),
            0x20 | 0x100 | 0x4_0000 => Err(Errno::EINVAL),
            _ if (26..=30).contains(&bit) => Ok(B),
            _ => Err(Errno::EOPNOTSUPP),
        };
        // 0x20 (MAP_ANONYMOUS) makes it anonymous shared-validate: EINVAL; 0x100 growsdown and 0x40000
        // hugetlb on a regular file: EINVAL; 0x80000 (MAP_SYNC) is allowed by ext4 but refused later.
        let want = if b == 0x8_0000 { Err(Errno::EOPNOTSUPP) } else { want };
        assert_eq!(r, want, "bit {bit}");
    }
    assert_eq!(
        m.mmap(B, P, Prot::READ, MapFlags::SHARED | MapFlags::FIXED | raw(1 << 31), Some(&f), 0),
        Ok(B)
    );
    assert_eq!(m.mmap(B, P, Prot::RW, AF | raw(0x8000_0000 | 0x200 | 0x400), None, 0), Ok(B));
    m.validate().unwrap();
}

/// `do_mmap`: mmap does not validate `PROT_*`: `PROT_SEM`, `PROT_GROWSDOWN`, `PROT_GROWSUP` (even both) and
/// unknown bits are ignored (`calc_vm_prot_bits` takes read, write and exec), so the mapping merges with a
/// plain neighbour.
#[test]
fn unknown_prot_bits_are_ignored_calc_vm_prot_bits() {
    let m = mm();
    m.mmap(B, P, Prot::RW, AF, None, 0).unwrap();
    for (i, bits) in
        [0x9 | 0x1000000, 0x3 | 0x2000000 | 0x8000_0000, 0x3 | 0x300_0000, 0x13].iter().enumerate()
    {
        let prot = Prot::from_bits_retain(*bits | 3);
        assert_eq!(m.mmap(B + (i as u64 + 1) * P, P, prot, AF, None, 0), Ok(B + (i as u64 + 1) * P));
    }
    assert_eq!(m.map_count(), 1);
    assert_eq!(flags_at(&m, B).smaps_mnemonics(), "rd wr mr mw me ac ");
}

/// `calc_vm_flag_bits`: `MAP_STACK` sets `VM_NOHUGEPAGE` with THP (smaps `nh`; the mapping does not merge
/// with a plain neighbour), nothing without; `MAP_SYNC` sets `VM_SYNC` (`sf`) on any anonymous mapping,
/// private or shared; `MAP_LOCKED` sets `VM_LOCKED`.
#[test]
fn flag_bits_calc_vm_flag_bits() {
    let m = mm();
    m.mmap(B, P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + P, P, Prot::RW, AF | MapFlags::STACK, None, 0).unwrap();
    m.mmap(B + 2 * P, P, Prot::RW, AF | MapFlags::SYNC, None, 0).unwrap();
    m.mmap(
        B + 3 * P,
        P,
        Prot::RW,
        MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED | MapFlags::SYNC,
        None,
        0,
    )
    .unwrap();
    assert_eq!(m.map_count(), 4);
    assert!(flags_at(&m, B + P).contains(VmFlags::NOHUGEPAGE));
    assert_eq!(flags_at(&m, B + 2 * P).smaps_mnemonics(), "rd wr mr mw me ac sf ");
    assert_eq!(flags_at(&m, B + 3 * P).smaps_mnemonics(), "rd wr sh mr mw me ms sf ");
    let nothp = Mm::new(MmConfig { transparent_hugepage: false, ..MmConfig::default() });
    nothp.mmap(B, P, Prot::RW, AF | MapFlags::STACK, None, 0).unwrap();
    assert!(!flags_at(&nothp, B).contains(VmFlags::NOHUGEPAGE));
}

/// ext4's mmap hook (`daxdev_mapping_supported`) refuses `VM_SYNC` on a file that is not DAX, for
/// `MAP_SHARED_VALIDATE`, `MAP_SHARED` (which drops the flag but not the `VM_SYNC` computed before) and
/// `MAP_PRIVATE` alike, with EOPNOTSUPP; it runs after `MAP_FIXED` unmapped the range, which stays a hole.
/// A DAX file maps.
#[test]
fn map_sync_needs_dax_and_leaves_a_hole_daxdev_mapping_supported() {
    let m = mm();
    let f = VmFile::regular("/f", 1, 64 * P);
    m.mmap(B, 8 * P, Prot::RW, AF, None, 0).unwrap();
    for ty in [MapFlags::SHARED_VALIDATE, MapFlags::SHARED, MapFlags::PRIVATE] {
        let r = m.mmap(B + 2 * P, 2 * P, Prot::READ, ty | MapFlags::FIXED | MapFlags::SYNC, Some(&f), 0);
        assert_eq!(r, Err(Errno::EOPNOTSUPP), "{ty:?}");
    }
    let ranges: Vec<_> = m.vmas().map(|v| (v.start, v.end)).collect();
    assert_eq!(ranges, [(B, B + 2 * P), (B + 4 * P, B + 8 * P)]);
    let dax = Arc::new(VmFile { dax: true, ..(*VmFile::regular("/dax", 2, 64 * P)).clone() });
    let sv = MapFlags::SHARED_VALIDATE | MapFlags::FIXED | MapFlags::SYNC;
    assert_eq!(m.mmap(B + 2 * P, P, Prot::READ, sv, Some(&dax), 0), Ok(B + 2 * P));
    assert!(flags_at(&m, B + 2 * P).contains(VmFlags::SYNC));
    m.validate().unwrap();
}

/// `do_mmap`, `MAP_DROPPABLE`: a mapping type of its own for anonymous memory only: `VM_DROPPABLE |
/// VM_NORESERVE | VM_WIPEONFORK | VM_DONTDUMP` (smaps `nr wf dd dp`, no `ac`), merging with droppable
/// neighbours only; EINVAL with `MAP_LOCKED`, `MAP_HUGETLB`, `MAP_GROWSDOWN` or a file; a fork child sees
/// it empty. The types 0x0, 0x4..0x7 and 0x9..0xf are EINVAL.
#[test]
fn droppable_mapping_type_do_mmap() {
    let m = mm();
    let f = VmFile::regular("/f", 1, 64 * P);
    let d = MapFlags::DROPPABLE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(B, P, Prot::RW, d, None, 0).unwrap();
    m.mmap(B + P, P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B - P, P, Prot::RW, d, None, 0).unwrap();
    assert_eq!(m.map_count(), 2);
    assert_eq!(flags_at(&m, B).smaps_mnemonics(), "rd wr mr mw me nr wf dd dp ");
    assert_eq!(m.vma_at(B).unwrap().start, B - P);
    for extra in [MapFlags::LOCKED, MapFlags::HUGETLB, MapFlags::GROWSDOWN] {
        assert_eq!(m.mmap(B + 4 * P, P, Prot::RW, d | extra, None, 0), Err(Errno::EINVAL), "{extra:?}");
    }
    let df = MapFlags::DROPPABLE | MapFlags::FIXED;
    assert_eq!(m.mmap(B + 4 * P, P, Prot::READ, df, Some(&f), 0), Err(Errno::EINVAL));
    for ty in [0u32, 4, 5, 6, 7, 9, 0xf] {
        let r = m.mmap(B + 4 * P, P, Prot::RW, raw(ty) | MapFlags::ANONYMOUS | MapFlags::FIXED, None, 0);
        assert_eq!(r, Err(Errno::EINVAL), "type {ty:#x}");
    }
    m.gup_access(B, true).unwrap();
    assert!(m.vma_at(B).unwrap().anon_vma_id.is_some());
    let c = m.fork().unwrap();
    assert!(c.vma_at(B).unwrap().anon_vma_id.is_none(), "VM_WIPEONFORK: the child's copy is empty");
    m.validate().unwrap();
}

/// `find_start_end` / `arch_get_unmapped_area`: `MAP_32BIT` places bottom-up from 1 GiB below 2 GiB (THP
/// alignment still applies to 2 MiB multiples); a hint (rounded down to a page by `do_mmap`) is used when it
/// ends below 2 GiB and is free; a mapping that does not fit the window is ENOMEM; `MAP_FIXED` ignores the flag.
#[test]
fn map_32bit_placement_find_start_end() {
    let m = mm();
    let a = m.mmap(0, P, Prot::RW, ANON | MapFlags::BELOW_2G, None, 0).unwrap();
    assert_eq!(a, 0x4000_0000);
    let b = m.mmap(0, P, Prot::RW, ANON | MapFlags::BELOW_2G, None, 0).unwrap();
    assert_eq!(b, 0x4000_1000, "bottom-up: above the first (and merged with it)");
    assert_eq!(m.map_count(), 1);
    let c = m.mmap(0, M2, Prot::RW, ANON | MapFlags::BELOW_2G, None, 0).unwrap();
    assert_eq!(c % M2, 0);
    assert!(c < 0x8000_0000);
    assert_eq!(m.mmap(0x1000_0000, P, Prot::RW, ANON | MapFlags::BELOW_2G, None, 0), Ok(0x1000_0000));
    // `do_mmap` rounds a hint down first (`round_hint_to_min`).
    assert_eq!(m.mmap(0x5000_0fff, P, Prot::RW, ANON | MapFlags::BELOW_2G, None, 0), Ok(0x5000_0000));
    let edge = m.mmap(0x7fff_f000, 2 * P, Prot::RW, ANON | MapFlags::BELOW_2G, None, 0).unwrap();
    assert_ne!(edge, 0x7fff_f000, "would end above 2 GiB");
    assert!(edge < 0x8000_0000);
    let far = m.mmap(B, P, Prot::RW, ANON | MapFlags::BELOW_2G, None, 0).unwrap();
    assert!(far < 0x8000_0000, "a hint above the window is not used");
    let nr = MapFlags::NORESERVE;
    assert_eq!(m.mmap(0, 3 << 30, Prot::RW, ANON | MapFlags::BELOW_2G | nr, None, 0), Err(Errno::ENOMEM));
    assert_eq!(m.mmap(0, 3 << 29, Prot::RW, ANON | MapFlags::BELOW_2G | nr, None, 0), Err(Errno::ENOMEM));
    assert_eq!(m.mmap(B, P, Prot::RW, AF | MapFlags::BELOW_2G, None, 0), Ok(B));
    m.validate().unwrap();
}

/// `arch_get_unmapped_area_topdown`: `MAP_ABOVE4G` raises the search's low limit to 4 GiB; when nothing fits
/// there the bottom-up fallback starts at `TASK_UNMAPPED_BASE` anyway.
#[test]
fn map_above4g_low_limit_arch_get_unmapped_area_topdown() {
    let base = (4u64 << 30) + 16 * P;
    let m = Mm::new(MmConfig { mmap_base: base, ..MmConfig::default() });
    assert_eq!(m.mmap(0, 16 * P, Prot::RW, ANON, None, 0), Ok(4 << 30));
    let low = m.mmap(0, P, Prot::RW, ANON, None, 0).unwrap();
    assert_eq!(low, (4 << 30) - P);
    let high = m.mmap(0, P, Prot::RW, ANON | MapFlags::ABOVE4G, None, 0).unwrap();
    assert!(high >= TASK_SIZE / 3, "{high:#x}");
}

/// `do_mmap`: `MAP_LOCKED` needs the right to lock (`can_do_mlock`: a non-zero `RLIMIT_MEMLOCK` or
/// CAP_IPC_LOCK, else EPERM) and room under `RLIMIT_MEMLOCK` for the locked pages (`mlock_future_ok`, else
/// EAGAIN; no limit with CAP_IPC_LOCK). The checks come after placement and before the file checks.
#[test]
fn map_locked_limits_mlock_future_ok() {
    let limited = MmConfig { memlock_rlimit: 4 * P, cap_ipc_lock: false, ..MmConfig::default() };
    let m = Mm::new(limited.clone());
    m.mmap(B, 3 * P, Prot::RW, AF | MapFlags::LOCKED, None, 0).unwrap();
    assert!(flags_at(&m, B).contains(VmFlags::LOCKED));
    assert_eq!(m.mmap(B + 8 * P, 2 * P, Prot::RW, AF | MapFlags::LOCKED, None, 0), Err(Errno::EAGAIN));
    assert_eq!(m.mmap(B + 8 * P, P, Prot::RW, AF | MapFlags::LOCKED, None, 0), Ok(B + 8 * P));
    let none = Mm::new(MmConfig { memlock_rlimit: 0, ..limited.clone() });
    assert_eq!(none.mmap(B, P, Prot::RW, AF | MapFlags::LOCKED, None, 0), Err(Errno::EPERM));
    assert_eq!(none.mmap(B, P, Prot::RW, AF, None, 0), Ok(B));
    let root = Mm::new(MmConfig { memlock_rlimit: 0, cap_ipc_lock: true, ..limited });
    assert_eq!(root.mmap(B, 64 * P, Prot::RW, AF | MapFlags::LOCKED, None, 0), Ok(B));
}

/// `__get_unmapped_area`: a `MAP_FIXED` address in the kernel's error range (`IS_ERR_VALUE`: the top 4095
/// values) is handed back as is and read as that errno: `0xffffffffffffffff` is EPERM (1), `...ff00` errno
/// 256, `...f001` 4095; `0xfffffffffffff000` and any other address above `TASK_SIZE` is ENOMEM, as is an
/// unaligned fixed address whose mapping would end beyond it. Live kernel: `scripts/regress/top-of-address-space.script`.
#[test]
fn error_values_from_fixed_addresses_get_unmapped_area() {
    let m = mm();
    let cases = [
        (u64::MAX, Err(Errno::EPERM)),
        (0xffff_ffff_ffff_ff00, Err(Errno::from_raw(256))),
        (0xffff_ffff_ffff_f001, Err(Errno::from_raw(4095))),
        (0xffff_ffff_ffff_f000, Err(Errno::ENOMEM)),
        (0xffff_8000_0000_0100, Err(Errno::ENOMEM)),
        (TASK_SIZE - P + 0x100, Err(Errno::ENOMEM)),
        (B + 0x100, Err(Errno::EINVAL)),
    ];
    for (addr, want) in cases {
        assert_eq!(m.mmap(addr, P, Prot::RW, AF, None, 0), want, "{addr:#x}");
        let noreplace = ANON | MapFlags::FIXED_NOREPLACE;
        assert_eq!(m.mmap(addr, P, Prot::RW, noreplace, None, 0), want, "{addr:#x} noreplace");
    }
    // A hint up there is just a bad hint.
    assert!(m.mmap(0xffff_ffff_ffff_ff00, P, Prot::RW, ANON, None, 0).is_ok());
    // Files too (the error value comes back before the file checks).
    let f = VmFile::regular("/f", 1, 64 * P);
    let pf = MapFlags::PRIVATE | MapFlags::FIXED;
    assert_eq!(m.mmap(u64::MAX - 1, P, Prot::READ, pf, Some(&f), 0), Err(Errno::from_raw(2)));
}

/// `thp_get_unmapped_area_vmflags` → `__thp_get_unmapped_area`: a placement equal to the address asked for
/// is not moved to a huge page boundary (`ret == addr`), which matters for `MAP_FIXED` at 0 (as root).
#[test]
fn thp_fixed_at_zero_stays_thp_get_unmapped_area() {
    let m = Mm::new(MmConfig { cap_sys_rawio: true, ..MmConfig::default() });
    assert_eq!(m.mmap(0, M2, Prot::RW, AF, None, 0), Ok(0));
    let user = mm();
    assert_eq!(user.mmap(0, M2, Prot::RW, AF, None, 0), Err(Errno::EPERM));
}

/// `SYSCALL_DEFINE1(brk)`: a break within a page of 2^64 rounds up to 0, its length wraps, and
/// `check_brk_limits` refuses it (ENOMEM): the old break comes back. (Found by
/// `scripts/regress/top-of-address-space.script`: the engine's subtraction overflowed.)
#[test]
fn brk_near_the_top_wraps_check_brk_limits() {
    let m = mm();
    let old = m.brk_value();
    assert_eq!(m.brk(0xffff_ffff_ffff_ff00), old);
    assert_eq!(m.brk(u64::MAX), old);
    assert_eq!(m.brk(TASK_SIZE + P), old);
    m.validate().unwrap();
}
