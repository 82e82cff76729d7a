//! mlock, mlock2, munlock, mlockall, munlockall and the mlock state every other call keeps (`mm->locked_vm`,
//! `mm->def_flags`): one test per kernel rule, each naming its function in `mm/mlock.c` (or `mm/mmap.c`,
//! `mm/vma.c`, `mm/mremap.c`, `mm/gup.c`, `kernel/fork.c`). Every rule was checked on the live 6.18.44 kernel
//! with small C programs, reading `VmLck` of `/proc/self/status` for `locked_vm` and the `VmFlags` line of
//! `/proc/self/smaps` for `lo` / `lf`; the rules without CAP_IPC_LOCK were run in a child that set
//! `RLIMIT_MEMLOCK` to 8 pages (or 0) and dropped root with `setresuid`. `validate()` (which checks that
//! `locked_vm` covers every `VM_LOCKED` page) runs after every call.
#![cfg(not(loom))]

use vmspace_mm::Access;
use vmspace_mm::space::{Errno, MapFlags, MclFlags, MlockFlags, Mm, MmConfig, MremapFlags, Prot, VmFile};
use vmspace_mm::vma::VmFlags;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

/// Root on the hosts here: CAP_IPC_LOCK.
fn root() -> Mm {
    Mm::new(MmConfig { cap_ipc_lock: true, ..MmConfig::default() })
}

/// An unprivileged process with `RLIMIT_MEMLOCK` of `pages` pages.
fn user(pages: u64) -> Mm {
    Mm::new(MmConfig { cap_ipc_lock: false, memlock_rlimit: pages * P, ..MmConfig::default() })
}

/// Runs the call, then `validate()` on the address space it changed.
macro_rules! ok {
    ($m:ident, $call:expr) => {{
        let r = $call;
        $m.validate().unwrap_or_else(|e| panic!("after {}: {r:?}: {e}", stringify!($call)));
        r
    }};
}

fn map(m: &mut Mm, addr: u64, len: u64, prot: Prot, flags: MapFlags) {
    assert_eq!(m.mmap(addr, len, prot, flags, None, 0), Ok(addr));
    m.validate().unwrap();
}

fn flags_at(m: &Mm, addr: u64) -> VmFlags {
    m.vma_at(addr).expect("mapped").flags
}

fn locked(m: &Mm, addr: u64) -> VmFlags {
    flags_at(m, addr) & VmFlags::LOCKED_MASK
}

fn ranges(m: &Mm) -> Vec<(u64, u64)> {
    m.vmas().map(|v| (v.start, v.end)).collect()
}

/// `do_mlock`: the range is rounded out to whole pages (`PAGE_ALIGN(len + offset_in_page(start))`), the VMA
/// split at its ends, `locked_vm` charged; munlock undoes both (live kernel: `mlock(a + P + 5, P)` locks two
/// pages and VmLck shows 8 kB).
#[test]
fn do_mlock_rounds_the_range_out_and_splits() {
    let mut m = root();
    map(&mut m, B, 8 * P, Prot::RW, ANON);
    ok!(m, m.mlock(B + P + 5, P)).unwrap();
    assert_eq!(ranges(&m), [(B, B + P), (B + P, B + 3 * P), (B + 3 * P, B + 8 * P)]);
    assert_eq!(locked(&m, B + P), VmFlags::LOCKED);
    assert_eq!(m.locked_vm(), 2);
    ok!(m, m.munlock(B, 8 * P)).unwrap();
    assert_eq!(ranges(&m), [(B, B + 8 * P)]);
    assert_eq!(m.locked_vm(), 0);
}

/// `SYSCALL_DEFINE3(mlock2)`: flags other than `MLOCK_ONFAULT` are EINVAL (before the right to lock is
/// checked); `MLOCK_ONFAULT` sets `VM_LOCKED | VM_LOCKONFAULT` and is charged like mlock; mlock over it
/// replaces the flags without charging again (`mlock_fixup`: already `VM_LOCKED`) (live kernel: `lo lf`,
/// then `lo`, VmLck 4 kB throughout).
#[test]
fn mlock2_onfault_and_invalid_flags() {
    let mut m = root();
    map(&mut m, B, 8 * P, Prot::RW, ANON);
    for bad in [2, 0x8000_0000, u32::MAX] {
        assert_eq!(ok!(m, m.mlock2(B, P, MlockFlags::from_bits_retain(bad))), Err(Errno::EINVAL));
    }
    assert_eq!(user(0).mlock2(B, P, MlockFlags::from_bits_retain(2)), Err(Errno::EINVAL), "flags first");
    ok!(m, m.mlock2(B, P, MlockFlags::ONFAULT)).unwrap();
    assert_eq!(locked(&m, B), VmFlags::LOCKED_MASK);
    assert_eq!(m.locked_vm(), 1);
    ok!(m, m.mlock(B, P)).unwrap();
    assert_eq!(locked(&m, B), VmFlags::LOCKED);
    assert_eq!(m.locked_vm(), 1, "not charged twice");
    ok!(m, m.mlock2(B, P, MlockFlags::empty())).unwrap();
    assert_eq!(m.locked_vm(), 1);
}

/// `do_mlock` / `apply_vma_lock_flags` argument rules (live kernel): length 0 succeeds; a length that rounds to
/// 0 (`u64::MAX`, or `u64::MAX` from an unaligned start) succeeds with nothing done; an end that wraps is EINVAL
/// (`-4096` from a mapped start, or a start in the last page); a start in a hole is ENOMEM, for munlock too.
#[test]
fn apply_vma_lock_flags_argument_rules() {
    let mut m = root();
    map(&mut m, B, 4 * P, Prot::RW, ANON);
    let before = format!("{m:?}");
    assert_eq!(ok!(m, m.mlock(B, 0)), Ok(()));
    assert_eq!(ok!(m, m.mlock(B, u64::MAX)), Ok(()));
    assert_eq!(ok!(m, m.mlock(B + 1, u64::MAX)), Ok(()));
    assert_eq!(ok!(m, m.munlock(B, u64::MAX)), Ok(()));
    assert_eq!(ok!(m, m.mlock(B, u64::MAX - 4095)), Err(Errno::EINVAL));
    assert_eq!(ok!(m, m.mlock(u64::MAX - 4095, P)), Err(Errno::EINVAL));
    assert_eq!(ok!(m, m.mlock(B + 1000 * P, P)), Err(Errno::ENOMEM));
    assert_eq!(ok!(m, m.munlock(B + 1000 * P, P)), Err(Errno::ENOMEM));
    assert_eq!(ok!(m, m.mlock(B - P, 2 * P)), Err(Errno::ENOMEM), "the start must be mapped");
    assert_eq!(format!("{m:?}"), before);
}

/// `apply_vma_lock_flags`: a hole stops the walk with ENOMEM after the VMAs before it were locked (and
/// charged); munlock the same (live kernel: VmLck 8 kB after `mlock(b, 5P)` over `[b, b+2P)`, hole,
/// `[b+3P, b+5P)`; 4 kB after `mlock(b+P, 6P)`).
#[test]
fn apply_vma_lock_flags_stops_at_a_hole() {
    let mut m = root();
    map(&mut m, B, 2 * P, Prot::RW, ANON);
    map(&mut m, B + 3 * P, 2 * P, Prot::RW, ANON);
    assert_eq!(ok!(m, m.mlock(B, 5 * P)), Err(Errno::ENOMEM));
    assert_eq!((locked(&m, B), locked(&m, B + 3 * P)), (VmFlags::LOCKED, VmFlags::NONE));
    assert_eq!(m.locked_vm(), 2);
    assert_eq!(ok!(m, m.munlock(B, 5 * P)), Err(Errno::ENOMEM));
    assert_eq!(m.locked_vm(), 0);
    assert_eq!(ok!(m, m.mlock(B + P, 6 * P)), Err(Errno::ENOMEM));
    assert_eq!(m.locked_vm(), 1);
    assert_eq!(ranges(&m), [(B, B + P), (B + P, B + 2 * P), (B + 3 * P, B + 5 * P)]);
}

/// `__mm_populate` after `apply_vma_lock_flags`, mapped by `__mlock_posix_error_return` (EFAULT → ENOMEM): a
/// `PROT_NONE` range, a file mapping past the end of its file and a guard region are locked and charged, then
/// ENOMEM; `MLOCK_ONFAULT` populates nothing and succeeds; `-w-` and `--x` populate fine (forced reads or
/// writes) (live kernel, every case).
#[test]
fn mlock_populate_errors_after_locking() {
    let mut m = root();
    let f = VmFile::regular("/f", 3, 2 * P);
    map(&mut m, B, 2 * P, Prot::NONE, ANON);
    assert_eq!(ok!(m, m.mlock(B, 2 * P)), Err(Errno::ENOMEM));
    assert_eq!((locked(&m, B), m.locked_vm()), (VmFlags::LOCKED, 2));
    ok!(m, m.munlock(B, 2 * P)).unwrap();
    assert_eq!(ok!(m, m.mlock2(B, 2 * P, MlockFlags::ONFAULT)), Ok(()));
    assert_eq!(
        m.mmap(B + 8 * P, 4 * P, Prot::READ, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0),
        Ok(B + 8 * P)
    );
    assert_eq!(ok!(m, m.mlock(B + 8 * P, 4 * P)), Err(Errno::ENOMEM));
    assert_eq!(locked(&m, B + 8 * P), VmFlags::LOCKED);
    map(&mut m, B + 16 * P, 2 * P, Prot::WRITE, ANON);
    map(&mut m, B + 20 * P, 2 * P, Prot::EXEC, ANON);
    assert_eq!(ok!(m, m.mlock(B + 16 * P, 2 * P)), Ok(()));
    assert_eq!(ok!(m, m.mlock(B + 20 * P, 2 * P)), Ok(()));
    map(&mut m, B + 24 * P, 4 * P, Prot::RW, ANON);
    m.madvise(B + 25 * P, P, vmspace_mm::Advice::GUARD_INSTALL).unwrap();
    assert_eq!(ok!(m, m.mlock(B + 25 * P, P)), Err(Errno::ENOMEM));
    assert_eq!(locked(&m, B + 25 * P), VmFlags::LOCKED);
    // ONFAULT 2, the file 4, `-w-` 2, `--x` 2, the guard page 1.
    assert_eq!(m.locked_vm(), 2 + 4 + 2 + 2 + 1);
}

/// `populate_vma_page_range`: mlock of private writable memory faults it in with writes, which give it an
/// anon_vma (so two locked VMAs no longer merge across a filled gap); shared and read-only memory is read.
#[test]
fn mlock_write_faults_private_writable_memory() {
    let mut m = root();
    map(&mut m, B, P, Prot::RW, ANON);
    map(&mut m, B + 2 * P, P, Prot::RW, ANON);
    ok!(m, m.mlock(B, P)).unwrap();
    ok!(m, m.mlock(B + 2 * P, P)).unwrap();
    assert!(m.vma_at(B).unwrap().anon_vma_id.is_some());
    map(&mut m, B + P, P, Prot::RW, ANON | MapFlags::LOCKED);
    assert_eq!(ranges(&m), [(B, B + 2 * P), (B + 2 * P, B + 3 * P)]);
    map(&mut m, B + 8 * P, P, Prot::READ, ANON);
    ok!(m, m.mlock(B + 8 * P, P)).unwrap();
    assert!(m.vma_at(B + 8 * P).unwrap().anon_vma_id.is_none());
}

/// `mlock_fixup` / `vma_supports_mlock`: `VM_SPECIAL`, hugetlb and `VM_DROPPABLE` VMAs are neither locked nor
/// charged, and mlock over them succeeds (live kernel: `mlock` of `[vvar]` is 0, no `lo`, VmLck 0).
#[test]
fn mlock_fixup_skips_vmas_that_cannot_be_locked() {
    let mut m = root();
    for (i, f) in
        [VmFlags::IO | VmFlags::PFNMAP, VmFlags::HUGETLB, VmFlags::DROPPABLE].into_iter().enumerate()
    {
        let at = B + (i as u64) * 4 * P;
        map(&mut m, at, 2 * P, Prot::READ, ANON);
        m.add_vma_flags(at, f);
        assert_eq!(ok!(m, m.mlock(at, 2 * P)), Ok(()));
        assert_eq!(locked(&m, at), VmFlags::NONE);
    }
    ok!(m, m.mlockall(MclFlags::CURRENT)).unwrap();
    assert_eq!(m.locked_vm(), 0);
    assert_eq!(m.map_count(), 3);
}

/// `do_mlock` without CAP_IPC_LOCK: `locked_vm + len` must fit `RLIMIT_MEMLOCK`, counting the already locked
/// part of the range once (`count_mm_mlocked_page_nr`); else ENOMEM with nothing changed; with a limit of 0
/// mlock and mlock2 are EPERM (`can_do_mlock`), even for length 0, and munlock still works (live kernel, 8-page
/// limit: 4 pages ok, 9 ENOMEM, 6 overlapping 2 of the 4 ok (8), 7 more ENOMEM).
#[test]
fn do_mlock_rlimit_memlock() {
    let mut m = user(8);
    map(&mut m, B, 16 * P, Prot::RW, ANON);
    ok!(m, m.mlock(B, 4 * P)).unwrap();
    assert_eq!(ok!(m, m.mlock(B, 9 * P)), Err(Errno::ENOMEM));
    assert_eq!(m.locked_vm(), 4);
    ok!(m, m.mlock(B + 2 * P, 6 * P)).unwrap();
    assert_eq!(m.locked_vm(), 8);
    assert_eq!(ok!(m, m.mlock(B + 2 * P, 7 * P)), Err(Errno::ENOMEM));
    assert_eq!(ok!(m, m.mlock2(B + 8 * P, P, MlockFlags::ONFAULT)), Err(Errno::ENOMEM));
    let mut none = user(0);
    map(&mut none, B, 2 * P, Prot::RW, ANON);
    assert_eq!(ok!(none, none.mlock(B, P)), Err(Errno::EPERM));
    assert_eq!(ok!(none, none.mlock(B, 0)), Err(Errno::EPERM));
    assert_eq!(ok!(none, none.mlock2(B, P, MlockFlags::ONFAULT)), Err(Errno::EPERM));
    assert_eq!(ok!(none, none.munlock(B, P)), Ok(()));
}

/// `SYSCALL_DEFINE1(mlockall)`: flags must be non-zero, known, and not `MCL_ONFAULT` alone (EINVAL, before the
/// right to lock: EPERM with a zero limit); `MCL_CURRENT` without CAP_IPC_LOCK needs `total_vm` within the
/// limit (ENOMEM) (live kernel: 0, 8, ONFAULT, FUTURE|8, -1 EINVAL; EPERM; ENOMEM).
#[test]
fn mlockall_flag_rules() {
    let m = root();
    for bad in [0, 8, 4, 2 | 8, u32::MAX] {
        assert_eq!(ok!(m, m.mlockall(MclFlags::from_bits_retain(bad))), Err(Errno::EINVAL), "{bad:#x}");
    }
    assert_eq!(user(0).mlockall(MclFlags::from_bits_retain(0)), Err(Errno::EINVAL));
    assert_eq!(user(0).mlockall(MclFlags::FUTURE), Err(Errno::EPERM));
    let mut u = user(8);
    map(&mut u, B, 9 * P, Prot::RW, ANON);
    assert_eq!(ok!(u, u.mlockall(MclFlags::CURRENT)), Err(Errno::ENOMEM));
    assert_eq!(ok!(u, u.mlockall(MclFlags::CURRENT | MclFlags::FUTURE)), Err(Errno::ENOMEM));
    assert_eq!(u.def_flags(), VmFlags::NONE, "nothing changed");
    assert_eq!(
        ok!(u, u.mlockall(MclFlags::FUTURE)),
        Ok(()),
        "MCL_FUTURE alone is not checked against total_vm"
    );
}

/// `apply_mlockall_flags`: `MCL_CURRENT` locks every VMA (PROT_NONE included; `MCL_ONFAULT` adds
/// `VM_LOCKONFAULT`, a later `MCL_CURRENT` removes it) and charges them; `MCL_FUTURE` sets `def_flags`, so later
/// mappings are locked and charged; munlockall clears both (live kernel: `lo lf` then `lo` on a PROT_NONE VMA,
/// VmLck unchanged; new mappings `lo` after MCL_FUTURE, not after munlockall).
#[test]
fn apply_mlockall_flags_current_and_future() {
    let mut m = root();
    map(&mut m, B, 2 * P, Prot::NONE, ANON);
    map(&mut m, B + 4 * P, 2 * P, Prot::RW, ANON);
    ok!(m, m.mlockall(MclFlags::CURRENT | MclFlags::ONFAULT)).unwrap();
    assert_eq!((locked(&m, B), locked(&m, B + 4 * P)), (VmFlags::LOCKED_MASK, VmFlags::LOCKED_MASK));
    assert_eq!(m.locked_vm(), 4);
    assert_eq!(m.def_flags(), VmFlags::NONE, "MCL_CURRENT alone leaves def_flags");
    ok!(m, m.mlockall(MclFlags::CURRENT)).unwrap();
    assert_eq!(locked(&m, B), VmFlags::LOCKED);
    assert_eq!(m.locked_vm(), 4);
    ok!(m, m.mlockall(MclFlags::FUTURE | MclFlags::ONFAULT)).unwrap();
    assert_eq!(m.def_flags(), VmFlags::LOCKED_MASK);
    map(&mut m, B + 8 * P, 2 * P, Prot::RW, ANON);
    assert_eq!(locked(&m, B + 8 * P), VmFlags::LOCKED_MASK);
    assert!(m.vma_at(B + 8 * P).unwrap().anon_vma_id.is_none(), "MCL_ONFAULT: nothing populated");
    assert_eq!(m.locked_vm(), 6);
    ok!(m, m.mlockall(MclFlags::FUTURE)).unwrap();
    map(&mut m, B + 12 * P, 2 * P, Prot::RW, ANON);
    assert_eq!(locked(&m, B + 12 * P), VmFlags::LOCKED);
    assert!(m.vma_at(B + 12 * P).unwrap().anon_vma_id.is_some(), "populated with a write fault");
    ok!(m, m.munlockall()).unwrap();
    assert_eq!((m.locked_vm(), m.def_flags()), (0, VmFlags::NONE));
    assert!(m.vmas().all(|v| !v.flags.intersects(VmFlags::LOCKED_MASK)));
    map(&mut m, B + 16 * P, 2 * P, Prot::RW, ANON);
    assert_eq!(locked(&m, B + 16 * P), VmFlags::NONE);
}

/// `mlock_fixup` through `vma_modify_flags`: locked VMAs merge with locked neighbours and not with unlocked
/// ones (live kernel: MAP_LOCKED next to an unlocked mapping stays apart; munlock merges back).
#[test]
fn mlock_fixup_merges_and_splits() {
    let mut m = root();
    map(&mut m, B, 2 * P, Prot::RW, ANON);
    map(&mut m, B + 2 * P, 2 * P, Prot::RW, ANON | MapFlags::LOCKED);
    assert_eq!(m.map_count(), 2);
    ok!(m, m.mlock(B, 2 * P)).unwrap();
    assert_eq!(ranges(&m), [(B, B + 4 * P)], "locking the neighbour merges them");
    ok!(m, m.munlock(B + P, 2 * P)).unwrap();
    assert_eq!(m.map_count(), 3);
    assert_eq!(m.locked_vm(), 2);
}

/// Every unmap uncharges its `VM_LOCKED` pages (`vms_gather_munmap_vmas` / `vms_complete_munmap_vmas`):
/// munmap, a `MAP_FIXED` mapping over them, mremap shrinking (live kernel: VmLck 16 → 12 after munmap of one
/// page; a MAP_FIXED over a locked page 52 → 44 kB).
#[test]
fn unmapping_uncharges_locked_pages() {
    let mut m = root();
    map(&mut m, B, 8 * P, Prot::RW, ANON | MapFlags::LOCKED);
    assert_eq!(m.locked_vm(), 8);
    ok!(m, m.munmap(B + P, P)).unwrap();
    assert_eq!(m.locked_vm(), 7);
    map(&mut m, B + 2 * P, 2 * P, Prot::READ, ANON);
    assert_eq!(m.locked_vm(), 5);
    assert_eq!(ok!(m, m.mremap(B + 4 * P, 4 * P, 2 * P, MremapFlags::empty(), 0)), Ok(B + 4 * P));
    assert_eq!(m.locked_vm(), 3);
}

/// mremap of locked memory (`vrm_stat_account`, `dontunmap_complete`, `resize_is_valid`): growth in place
/// charges the delta; a move charges the new length and the unmap of the source uncharges the old one;
/// DONTUNMAP charges the new length and uncharges nothing while the old range loses `VM_LOCKED` (live kernel:
/// VmLck 12 → 20 kB, a deliberate overcount); growing past `RLIMIT_MEMLOCK` without CAP_IPC_LOCK is EAGAIN.
#[test]
fn mremap_of_locked_memory() {
    let mut m = root();
    map(&mut m, B, 2 * P, Prot::RW, ANON | MapFlags::LOCKED);
    assert_eq!(ok!(m, m.mremap(B, 2 * P, 4 * P, MremapFlags::empty(), 0)), Ok(B));
    assert_eq!(m.locked_vm(), 4);
    let (to, dst) = (B + 32 * P, B + 64 * P);
    assert_eq!(ok!(m, m.mremap(B, 4 * P, 5 * P, MremapFlags::MAYMOVE | MremapFlags::FIXED, to)), Ok(to));
    assert_eq!(m.locked_vm(), 5);
    let dontunmap = MremapFlags::MAYMOVE | MremapFlags::FIXED | MremapFlags::DONTUNMAP;
    assert_eq!(ok!(m, m.mremap(to, 5 * P, 5 * P, dontunmap, dst)), Ok(dst));
    assert_eq!(locked(&m, to), VmFlags::NONE);
    assert_eq!(locked(&m, dst), VmFlags::LOCKED);
    assert_eq!(m.locked_vm(), 10, "Linux does not uncharge the old range");
    let mut u = user(8);
    map(&mut u, B, 8 * P, Prot::RW, ANON | MapFlags::LOCKED);
    assert_eq!(ok!(u, u.mremap(B, 8 * P, 9 * P, MremapFlags::empty(), 0)), Err(Errno::EAGAIN));
    ok!(u, u.munlock(B + 7 * P, P)).unwrap();
    assert_eq!(
        ok!(u, u.mremap(B, 7 * P, 8 * P, MremapFlags::empty(), 0)),
        Err(Errno::ENOMEM),
        "not expandable"
    );
}

/// `do_mmap`: `MAP_LOCKED` without the right to lock is EPERM; a locked mapping past the limit (counting pages a
/// `MAP_FIXED` mapping would replace) EAGAIN (`mlock_future_ok`); after `mlockall(MCL_FUTURE)` every mapping
/// is locked and so checked; `__mmap_complete` charges it, even when populating it fails (PROT_NONE, past the
/// end of the file) (live kernel, 8-page limit: 9 pages EAGAIN, 8 ok, 8 over those 8 EAGAIN).
#[test]
fn do_mmap_map_locked_and_mlock_future_ok() {
    let u = user(8);
    let locked = ANON | MapFlags::LOCKED;
    assert_eq!(ok!(u, u.mmap(B, 9 * P, Prot::READ, locked, None, 0)), Err(Errno::EAGAIN));
    assert_eq!(ok!(u, u.mmap(B, 8 * P, Prot::READ, locked, None, 0)), Ok(B));
    assert_eq!(u.locked_vm(), 8);
    assert_eq!(ok!(u, u.mmap(B, 8 * P, Prot::READ, locked, None, 0)), Err(Errno::EAGAIN));
    u.munmap(B, 8 * P).unwrap();
    ok!(u, u.mlockall(MclFlags::FUTURE)).unwrap();
    assert_eq!(ok!(u, u.mmap(B, 9 * P, Prot::READ, ANON, None, 0)), Err(Errno::EAGAIN));
    assert_eq!(ok!(u, u.mmap(B, 8 * P, Prot::READ, ANON, None, 0)), Ok(B));
    let none = user(0);
    assert_eq!(none.mmap(B, P, Prot::READ, locked, None, 0), Err(Errno::EPERM));
    assert_eq!(none.mmap(B, P, Prot::READ, ANON, None, 0), Ok(B));
    let m = root();
    let f = VmFile::regular("/f", 5, P);
    assert_eq!(ok!(m, m.mmap(B, 2 * P, Prot::NONE, locked, None, 0)), Ok(B));
    let fl = MapFlags::PRIVATE | MapFlags::FIXED | MapFlags::LOCKED;
    assert_eq!(ok!(m, m.mmap(B + 4 * P, 3 * P, Prot::READ, fl, Some(&f), 0)), Ok(B + 4 * P));
    assert_eq!(m.locked_vm(), 5);
}

/// brk after `mlockall(MCL_FUTURE)` (`check_brk_limits`, `do_brk_flags`): the extension is locked (so it does
/// not merge with an unlocked heap), charged, populated, refused past the limit, and uncharged when the break
/// shrinks (live kernel: a new `lo` heap VMA beside the old one, VmLck +8 kB, -8 kB on shrink; refused past the
/// limit until memory is unlocked).
#[test]
fn brk_with_mcl_future() {
    let m = root();
    let b0 = m.brk_value();
    assert_eq!(m.brk(b0 + 2 * P), b0 + 2 * P);
    ok!(m, m.mlockall(MclFlags::FUTURE)).unwrap();
    assert_eq!(m.brk(b0 + 4 * P), b0 + 4 * P);
    m.validate().unwrap();
    assert_eq!(ranges(&m), [(b0, b0 + 2 * P), (b0 + 2 * P, b0 + 4 * P)]);
    assert_eq!(locked(&m, b0 + 2 * P), VmFlags::LOCKED);
    assert!(m.vma_at(b0 + 2 * P).unwrap().anon_vma_id.is_some(), "populated");
    assert_eq!(m.locked_vm(), 2);
    assert_eq!(m.brk(b0 + 2 * P), b0 + 2 * P);
    assert_eq!(m.locked_vm(), 0);
    let mut u = user(8);
    let b0 = u.brk_value();
    ok!(u, u.mlockall(MclFlags::FUTURE)).unwrap();
    map(&mut u, B, 8 * P, Prot::READ, ANON);
    assert_eq!(u.brk(b0 + P), b0, "refused: the limit is reached");
    u.munmap(B, 8 * P).unwrap();
    assert_eq!(u.brk(b0 + P), b0 + P);
    assert_eq!(u.locked_vm(), 1);
}

/// Stack growth of a locked growsdown VMA (`acct_stack_growth`, `expand_downwards`): charged; refused past the
/// limit (live kernel: VmLck 8 → 12 kB after touching the page below a MCL_FUTURE growsdown mapping).
#[test]
fn stack_growth_of_a_locked_vma() {
    let mut m = root();
    ok!(m, m.mlockall(MclFlags::FUTURE)).unwrap();
    let s = B + 1024 * P;
    map(&mut m, s, 2 * P, Prot::RW, ANON | MapFlags::GROWSDOWN);
    assert_eq!(m.locked_vm(), 2);
    ok!(m, m.fault(s - P, Access::Write)).unwrap();
    assert_eq!(m.locked_vm(), 3);
    let mut u = user(2);
    ok!(u, u.mlockall(MclFlags::FUTURE)).unwrap();
    map(&mut u, s, 2 * P, Prot::RW, ANON | MapFlags::GROWSDOWN);
    assert_eq!(
        ok!(u, u.fault(s - P, Access::Write)),
        Err(Errno::EFAULT),
        "mlock_future_ok refuses the growth"
    );
    assert_eq!(u.vma_at(s).unwrap().start, s);
}

/// mprotect making a locked private VMA writable populates it with write faults (`mprotect_fixup` →
/// `populate_vma_page_range`), which gives it an anon_vma (live kernel: two such VMAs stop merging across a
/// filled gap; the same without MAP_LOCKED merges).
#[test]
fn mprotect_populates_locked_memory_made_writable() {
    let mut m = root();
    map(&mut m, B, P, Prot::READ, ANON | MapFlags::LOCKED);
    map(&mut m, B + 2 * P, P, Prot::READ, ANON | MapFlags::LOCKED);
    assert!(m.vma_at(B).unwrap().anon_vma_id.is_none());
    ok!(m, m.mprotect(B, P, Prot::RW)).unwrap();
    ok!(m, m.mprotect(B + 2 * P, P, Prot::RW)).unwrap();
    assert!(m.vma_at(B).unwrap().anon_vma_id.is_some());
    map(&mut m, B + P, P, Prot::RW, ANON | MapFlags::LOCKED);
    assert_eq!(ranges(&m), [(B, B + 2 * P), (B + 2 * P, B + 3 * P)]);
}

/// `populate_vma_page_range` does nothing for `VM_LOCKONFAULT`: mprotect of an `MLOCK_ONFAULT` VMA populates
/// nothing (no anon_vma: the VMAs still merge), while mlock over it (now `VM_LOCKED` alone) populates with
/// write faults (live kernel: three pages merge after the ONFAULT mprotects, stay two VMAs after the mlocks).
#[test]
fn lock_on_fault_populates_nothing_until_mlocked() {
    let mut m = root();
    map(&mut m, B, P, Prot::READ, ANON);
    map(&mut m, B + 2 * P, P, Prot::READ, ANON);
    for at in [B, B + 2 * P] {
        ok!(m, m.mlock2(at, P, MlockFlags::ONFAULT)).unwrap();
        ok!(m, m.mprotect(at, P, Prot::RW)).unwrap();
    }
    map(&mut m, B + P, P, Prot::RW, ANON);
    ok!(m, m.mlock2(B + P, P, MlockFlags::ONFAULT)).unwrap();
    assert_eq!(ranges(&m), [(B, B + 3 * P)]);
    let c = B + 16 * P;
    map(&mut m, c, P, Prot::RW, ANON);
    map(&mut m, c + 2 * P, P, Prot::RW, ANON);
    for at in [c, c + 2 * P] {
        ok!(m, m.mlock2(at, P, MlockFlags::ONFAULT)).unwrap();
        ok!(m, m.mlock(at, P)).unwrap();
    }
    map(&mut m, c + P, P, Prot::RW, ANON);
    ok!(m, m.mlock(c + P, P)).unwrap();
    assert_eq!(m.vmas().filter(|v| v.start >= c).count(), 2);
}

/// fork (`dup_mmap`, `mm_init`): the child has no `VM_LOCKED` VMA, `locked_vm` 0, and `def_flags` without
/// `VM_LOCKED` (only `VM_INIT_DEF_MASK` is inherited), so its new mappings are not locked (live kernel: the
/// child's VmLck 0, no `lo`, and a child mapping after the parent's MCL_FUTURE unlocked).
#[test]
fn fork_drops_locks_and_mcl_future() {
    let mut m = root();
    map(&mut m, B, 2 * P, Prot::RW, ANON | MapFlags::LOCKED);
    ok!(m, m.mlockall(MclFlags::FUTURE | MclFlags::ONFAULT)).unwrap();
    let mut child = m.fork().unwrap();
    child.validate().unwrap();
    assert_eq!((child.locked_vm(), child.def_flags()), (0, VmFlags::NONE));
    assert_eq!(locked(&child, B), VmFlags::NONE);
    map(&mut child, B + 4 * P, P, Prot::RW, ANON);
    assert_eq!(locked(&child, B + 4 * P), VmFlags::NONE);
    assert_eq!((m.locked_vm(), locked(&m, B)), (2, VmFlags::LOCKED));
}

/// Allocation failures change nothing: a split mlock needs is reserved first (ENOMEM).
#[test]
fn mlock_allocation_failure_changes_nothing() {
    let mut m = root();
    map(&mut m, B, 4 * P, Prot::RW, ANON);
    let before = format!("{m:?}");
    for n in 0..3 {
        m.inject_alloc_failure(Some(n));
        assert_eq!(m.mlock(B + P, P), Err(Errno::ENOMEM));
        m.inject_alloc_failure(None);
        assert_eq!(format!("{m:?}"), before);
    }
    m.inject_alloc_failure(Some(0));
    assert_eq!(m.mlockall(MclFlags::CURRENT | MclFlags::FUTURE), Err(Errno::ENOMEM));
    m.inject_alloc_failure(None);
    assert_eq!(format!("{m:?}"), before);
}

/// `mlock_fixup` counts a range's pages in an `int` (`mm/mlock.c`): locking a VMA of 2^32 + 1 pages charges
/// one page, as Linux does, and `validate` accepts the short count that follows (found by the engine fuzz
/// target: `mlockall` over a 16 TiB `PROT_NONE` mapping).
#[test]
fn mlock_counts_a_range_in_an_int() {
    let mut m = root();
    let len = ((1u64 << 32) + 1) * P;
    map(&mut m, 0x1000_0000_0000, len, Prot::NONE, ANON.union(MapFlags::NORESERVE));
    ok!(m, m.mlockall(MclFlags::CURRENT)).unwrap();
    assert!(locked(&m, 0x1000_0000_0000).contains(VmFlags::LOCKED));
    assert_eq!(m.locked_vm(), 1, "(2^32 + 1) pages as an int");
    ok!(m, m.munlockall()).unwrap();
}
