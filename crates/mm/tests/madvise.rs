//! madvise with every advice Linux 6.18 accepts: one test per kernel rule, each naming the function of
//! `mm/madvise.c` (or `mm/gup.c`, `mm/khugepaged.c`, `mm/ksm.c`, `mm/vma.c`) it comes from. Every rule that a
//! user process can reach was first checked on the live 6.18.44 kernel with a small C program (mmap, madvise,
//! `/proc/self/maps`, the `VmFlags` line of `/proc/self/smaps`, `process_vm_readv` for accesses), and the
//! script-reachable ones are also held against the kernel by `scripts/regress/madvise-*.script`. The rules for
//! VMAs a process cannot make here (`VM_PFNMAP`, hugetlb, `VM_DROPPABLE`) and for `MADV_HWPOISON` /
//! `MADV_SOFT_OFFLINE` (never run on the live kernel) come from the 6.18 source. `validate()` runs after every
//! call.
#![cfg(not(loom))]

use std::sync::Arc;
use vmspace_mm::Access;

use vmspace_mm::space::{Advice, Errno, MapFlags, Mm, MmConfig, MremapFlags, Prot, ThpMode, VmFile};
use vmspace_mm::vma::VmFlags;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const M2: u64 = 2 << 20;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);
const SHANON: MapFlags = MapFlags::SHARED.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);
const PRIV: MapFlags = MapFlags::PRIVATE.union(MapFlags::FIXED);
const SHARED: MapFlags = MapFlags::SHARED.union(MapFlags::FIXED);

/// The live host's configuration as far as madvise is concerned (THP, KSM, swap, no memory failure, root).
fn cfg() -> MmConfig {
    MmConfig { cap_ipc_lock: true, cap_sys_admin: true, ..MmConfig::default() }
}

fn mm() -> Mm {
    Mm::new(cfg())
}

fn file(size: u64) -> Arc<VmFile> {
    VmFile::regular("/f", 7, size)
}

/// `madvise`, then `validate()`.
fn adv(m: &mut Mm, start: u64, len: u64, a: Advice) -> Result<(), Errno> {
    let r = m.madvise(start, len, a);
    m.validate().unwrap_or_else(|e| panic!("madvise {a:?} at {start:#x}: {e}"));
    r
}

fn flags_at(m: &Mm, addr: u64) -> VmFlags {
    m.vma_at(addr).expect("mapped").flags
}

fn ranges(m: &Mm) -> Vec<(u64, u64)> {
    m.vmas().map(|v| (v.start, v.end)).collect()
}

fn map(m: &mut Mm, addr: u64, len: u64, prot: Prot, flags: MapFlags, f: Option<&Arc<VmFile>>) {
    assert_eq!(m.mmap(addr, len, prot, flags, f, 0), Ok(addr));
}

/// `madvise_behavior_valid`: every advice 6.18 defines is valid (the build-option ones with their options),
/// anything else is EINVAL. Live kernel: values 0-4, 8-25, 102, 103 succeed on an anonymous VMA (COLLAPSE and
/// REMOVE fail later, with their own checks); 5-7, 26, 99, 104, -1 are EINVAL.
#[test]
fn madvise_behavior_valid_knows_every_advice() {
    let mut m = mm();
    map(&mut m, B, 4 * P, Prot::RW, ANON, None);
    for a in Advice::known() {
        let r = adv(&mut m, B + P, P, a);
        match a {
            Advice::REMOVE | Advice::COLLAPSE => assert_eq!(r, Err(Errno::EINVAL), "{a:?}: its own check"),
            // CONFIG_MEMORY_FAILURE is off by default (as on the hosts here).
            Advice::HWPOISON | Advice::SOFT_OFFLINE => assert_eq!(r, Err(Errno::EINVAL), "{a:?}"),
            _ => assert_eq!(r, Ok(()), "{a:?}"),
        }
    }
    for raw in [5, 6, 7, 26, 99, 104, -1, i32::MIN] {
        assert_eq!(adv(&mut m, B, P, Advice::from_raw(raw)), Err(Errno::EINVAL), "{raw}");
    }
    // Without CONFIG_TRANSPARENT_HUGEPAGE / CONFIG_KSM their advice do not exist.
    let mut bare = Mm::new(MmConfig { transparent_hugepage: false, ksm: false, ..cfg() });
    map(&mut bare, B, 4 * P, Prot::RW, ANON, None);
    for a in [Advice::HUGEPAGE, Advice::NOHUGEPAGE, Advice::COLLAPSE, Advice::MERGEABLE, Advice::UNMERGEABLE]
    {
        assert_eq!(adv(&mut bare, B, P, a), Err(Errno::EINVAL), "{a:?}");
    }
}

/// `madvise_should_skip` / `is_valid_madvise`: the advice, then the start's alignment, then the length; an
/// empty range succeeds even where nothing is mapped (live kernel).
#[test]
fn madvise_should_skip_checks_arguments_before_the_range() {
    let mut m = mm();
    assert_eq!(adv(&mut m, B + 1, 0, Advice::from_raw(77)), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B + 1, P, Advice::WILLNEED), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B, u64::MAX - 100, Advice::WILLNEED), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, !(P - 1), 2 * P, Advice::WILLNEED), Err(Errno::EINVAL));
    for a in Advice::known().filter(|a| *a != Advice::HWPOISON && *a != Advice::SOFT_OFFLINE) {
        assert_eq!(adv(&mut m, B, 0, a), Ok(()), "{a:?} with length 0");
    }
    assert_eq!(adv(&mut m, B, P, Advice::WILLNEED), Err(Errno::ENOMEM), "nothing mapped");
}

/// `madvise_vma_behavior`: the flag advice set and clear the kernel's flags, split the VMA at the range
/// (`vma_modify_flags`) and merge it back when undone (live kernel: smaps VmFlags `rr sr dd mg hg nh`).
#[test]
fn madvise_vma_behavior_flag_advice_split_and_merge() {
    let mut m = mm();
    map(&mut m, B, 8 * P, Prot::RW, ANON, None);
    let cases = [
        (Advice::RANDOM, VmFlags::RAND_READ),
        (Advice::SEQUENTIAL, VmFlags::SEQ_READ),
        (Advice::DONTDUMP, VmFlags::DONTDUMP),
        (Advice::MERGEABLE, VmFlags::MERGEABLE),
        (Advice::HUGEPAGE, VmFlags::HUGEPAGE),
        (Advice::NOHUGEPAGE, VmFlags::NOHUGEPAGE),
        (Advice::DONTFORK, VmFlags::DONTCOPY),
        (Advice::WIPEONFORK, VmFlags::WIPEONFORK),
    ];
    for (i, (a, f)) in cases.iter().enumerate() {
        let at = B + (i as u64) * P;
        adv(&mut m, at, P, *a).unwrap();
        assert!(flags_at(&m, at).contains(*f), "{a:?}");
    }
    assert_eq!(m.map_count(), 8);
    // SEQUENTIAL replaces RANDOM; HUGEPAGE replaces NOHUGEPAGE and back.
    adv(&mut m, B, P, Advice::SEQUENTIAL).unwrap();
    assert!(flags_at(&m, B).contains(VmFlags::SEQ_READ) && !flags_at(&m, B).intersects(VmFlags::RAND_READ));
    adv(&mut m, B + 4 * P, 2 * P, Advice::NOHUGEPAGE).unwrap();
    assert!(!flags_at(&m, B + 4 * P).intersects(VmFlags::HUGEPAGE));
    adv(&mut m, B + 4 * P, 2 * P, Advice::HUGEPAGE).unwrap();
    // Undo everything: NORMAL, DODUMP, UNMERGEABLE, KEEPONFORK, DOFORK and clearing the huge page advice by
    // remapping nothing: the VMAs merge as they become equal again.
    for a in [Advice::NORMAL, Advice::DODUMP, Advice::UNMERGEABLE, Advice::KEEPONFORK, Advice::DOFORK] {
        adv(&mut m, B, 8 * P, a).unwrap();
    }
    assert_eq!(ranges(&m), [(B, B + 4 * P), (B + 4 * P, B + 6 * P), (B + 6 * P, B + 8 * P)]);
    adv(&mut m, B + 6 * P, 2 * P, Advice::HUGEPAGE).unwrap();
    assert_eq!(ranges(&m), [(B, B + 4 * P), (B + 4 * P, B + 8 * P)]);
}

/// `ksm_madvise` / `ksm_compatible`: MERGEABLE is ignored (success, no split) on shared mappings and
/// `VM_SPECIAL` ones, applied to private file and PROT_NONE ones; UNMERGEABLE of a non-mergeable VMA does
/// nothing (live kernel: no `mg` on shared anon and shared file, `mg` on private file and PROT_NONE).
#[test]
fn ksm_madvise_ignores_incompatible_vmas() {
    let mut m = mm();
    let f = file(16 * P);
    map(&mut m, B, 4 * P, Prot::RW, SHANON, None);
    map(&mut m, B + 8 * P, 4 * P, Prot::RW, SHARED, Some(&f));
    map(&mut m, B + 16 * P, 4 * P, Prot::READ, PRIV, Some(&f));
    map(&mut m, B + 24 * P, 4 * P, Prot::NONE, ANON, None);
    map(&mut m, B + 32 * P, 4 * P, Prot::RW, ANON, None);
    m.add_vma_flags(B + 32 * P, VmFlags::IO | VmFlags::PFNMAP);
    let before = m.map_count();
    for at in [B, B + 8 * P, B + 33 * P] {
        adv(&mut m, at + P, P, Advice::MERGEABLE).unwrap();
        assert!(!flags_at(&m, at + P).intersects(VmFlags::MERGEABLE));
    }
    assert_eq!(m.map_count(), before, "an ignored advice splits nothing");
    for at in [B + 16 * P, B + 24 * P] {
        adv(&mut m, at + P, P, Advice::MERGEABLE).unwrap();
        assert!(flags_at(&m, at + P).intersects(VmFlags::MERGEABLE));
    }
    assert_eq!(m.map_count(), before + 4);
    adv(&mut m, B, P, Advice::UNMERGEABLE).unwrap();
    assert_eq!(m.map_count(), before + 4);
}

/// `hugepage_madvise`: HUGEPAGE / NOHUGEPAGE apply to every VMA kind the process can map (shared anonymous,
/// shared file, PROT_NONE, locked: live kernel), replacing one another.
#[test]
fn hugepage_madvise_applies_everywhere() {
    let mut m = mm();
    let f = file(16 * P);
    map(&mut m, B, 2 * P, Prot::RW, SHANON, None);
    map(&mut m, B + 8 * P, 2 * P, Prot::RW, SHARED, Some(&f));
    map(&mut m, B + 16 * P, 2 * P, Prot::NONE, ANON, None);
    map(&mut m, B + 24 * P, 2 * P, Prot::RW, ANON | MapFlags::LOCKED, None);
    for at in [B, B + 8 * P, B + 16 * P, B + 24 * P] {
        adv(&mut m, at, 2 * P, Advice::HUGEPAGE).unwrap();
        assert!(flags_at(&m, at).contains(VmFlags::HUGEPAGE));
        adv(&mut m, at, 2 * P, Advice::NOHUGEPAGE).unwrap();
        assert_eq!(flags_at(&m, at) & (VmFlags::HUGEPAGE | VmFlags::NOHUGEPAGE), VmFlags::NOHUGEPAGE);
    }
}

/// `madvise_vma_behavior`'s refusals: DOFORK on `VM_IO`, WIPEONFORK on anything but private anonymous memory,
/// KEEPONFORK on `VM_DROPPABLE`, DODUMP on `VM_SPECIAL` (not hugetlb) or `VM_DROPPABLE` (live kernel: DODUMP
/// and DOFORK on `[vvar]` are EINVAL; WIPEONFORK on shared anonymous and private file memory EINVAL).
#[test]
fn madvise_vma_behavior_refusals() {
    let mut m = mm();
    let f = file(16 * P);
    map(&mut m, B, 2 * P, Prot::RW, SHANON, None);
    map(&mut m, B + 8 * P, 2 * P, Prot::RW, PRIV, Some(&f));
    assert_eq!(adv(&mut m, B, P, Advice::WIPEONFORK), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B + 8 * P, P, Advice::WIPEONFORK), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B, P, Advice::KEEPONFORK), Ok(()));
    map(&mut m, B + 16 * P, 2 * P, Prot::READ, ANON, None);
    m.add_vma_flags(B + 16 * P, VmFlags::IO | VmFlags::PFNMAP | VmFlags::DONTEXPAND);
    assert_eq!(adv(&mut m, B + 16 * P, 2 * P, Advice::DOFORK), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B + 16 * P, 2 * P, Advice::DODUMP), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B + 16 * P, 2 * P, Advice::DONTFORK), Ok(()));
    map(&mut m, B + 24 * P, 2 * P, Prot::RW, ANON, None);
    m.add_vma_flags(B + 24 * P, VmFlags::DROPPABLE);
    assert_eq!(adv(&mut m, B + 24 * P, 2 * P, Advice::KEEPONFORK), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B + 24 * P, 2 * P, Advice::DODUMP), Err(Errno::EINVAL));
    // hugetlb is the VM_SPECIAL exception of DODUMP.
    map(&mut m, B + 32 * P, 2 * P, Prot::RW, ANON, None);
    m.add_vma_flags(B + 32 * P, VmFlags::HUGETLB | VmFlags::DONTEXPAND | VmFlags::DONTDUMP);
    assert_eq!(adv(&mut m, B + 32 * P, 2 * P, Advice::DODUMP), Ok(()));
    assert!(!flags_at(&m, B + 32 * P).intersects(VmFlags::DONTDUMP));
}

/// `madvise_walk_vmas`: a refused VMA stops the walk after the VMAs before it changed; holes are skipped and
/// reported as ENOMEM at the end (live kernel: DONTDUMP over a hole changes both sides, then ENOMEM).
#[test]
fn madvise_walk_vmas_partial_progress() {
    let mut m = mm();
    map(&mut m, B, 2 * P, Prot::RW, ANON, None);
    map(&mut m, B + 3 * P, 2 * P, Prot::RW, ANON, None);
    assert_eq!(adv(&mut m, B, 5 * P, Advice::DONTDUMP), Err(Errno::ENOMEM));
    assert!(
        flags_at(&m, B).contains(VmFlags::DONTDUMP) && flags_at(&m, B + 3 * P).contains(VmFlags::DONTDUMP)
    );
    map(&mut m, B + 5 * P, 2 * P, Prot::RW, SHANON, None);
    assert_eq!(adv(&mut m, B, 7 * P, Advice::WIPEONFORK), Err(Errno::EINVAL));
    assert!(
        flags_at(&m, B).contains(VmFlags::WIPEONFORK)
            && flags_at(&m, B + 3 * P).contains(VmFlags::WIPEONFORK)
    );
}

/// `madvise_remove`: `VM_LOCKED` EINVAL, no file EINVAL, not shared-and-may-write EACCES (a shared mapping
/// of a read-only file, a private file mapping); a shared writable-capable one succeeds even mapped
/// read-only (live kernel, all six).
#[test]
fn madvise_remove_needs_a_shared_writable_file() {
    let mut m = mm();
    let f = file(16 * P);
    let ro = Arc::new(VmFile { writable: false, ..(*file(16 * P)).clone() });
    map(&mut m, B, 2 * P, Prot::RW, ANON, None);
    map(&mut m, B + 4 * P, 2 * P, Prot::RW, SHANON, None);
    map(&mut m, B + 8 * P, 2 * P, Prot::RW, SHARED, Some(&f));
    map(&mut m, B + 12 * P, 2 * P, Prot::RW, PRIV, Some(&f));
    map(&mut m, B + 16 * P, 2 * P, Prot::READ, SHARED, Some(&ro));
    map(&mut m, B + 20 * P, 2 * P, Prot::READ, SHARED, Some(&f));
    map(&mut m, B + 24 * P, 2 * P, Prot::RW, ANON | MapFlags::LOCKED, None);
    let want = [
        (B, Err(Errno::EINVAL)),
        (B + 4 * P, Ok(())),
        (B + 8 * P, Ok(())),
        (B + 12 * P, Err(Errno::EACCES)),
        (B + 16 * P, Err(Errno::EACCES)),
        (B + 20 * P, Ok(())),
        (B + 24 * P, Err(Errno::EINVAL)),
    ];
    for (at, r) in want {
        assert_eq!(adv(&mut m, at, P, Advice::REMOVE), r, "at {at:#x}");
    }
    assert_eq!(
        adv(&mut m, B + 8 * P, 8 * P, Advice::REMOVE),
        Err(Errno::EACCES),
        "stops at the private file"
    );
}

/// `madvise_willneed`: anonymous memory reads swap back with `CONFIG_SWAP` (success) and is EBADF without;
/// files always succeed (live kernel: anonymous, file, PROT_NONE, locked all 0).
#[test]
fn madvise_willneed_without_swap_refuses_anonymous_memory() {
    let mut m = mm();
    let f = file(16 * P);
    map(&mut m, B, 2 * P, Prot::NONE, ANON, None);
    map(&mut m, B + 4 * P, 2 * P, Prot::READ, PRIV, Some(&f));
    assert_eq!(adv(&mut m, B, 6 * P, Advice::WILLNEED), Err(Errno::ENOMEM));
    let mut noswap = Mm::new(MmConfig { swap: false, ..cfg() });
    map(&mut noswap, B, 2 * P, Prot::RW, ANON, None);
    map(&mut noswap, B + 4 * P, 2 * P, Prot::READ, PRIV, Some(&f));
    assert_eq!(adv(&mut noswap, B + 4 * P, 2 * P, Advice::WILLNEED), Ok(()));
    assert_eq!(adv(&mut noswap, B, 2 * P, Advice::WILLNEED), Err(Errno::EBADF));
}

/// `can_madv_lru_vma`: COLD and PAGEOUT refuse `VM_LOCKED`, `VM_PFNMAP` and hugetlb (live kernel: locked
/// EINVAL, `[vvar]` EINVAL, files and PROT_NONE 0).
#[test]
fn can_madv_lru_vma_refuses_locked_pfnmap_hugetlb() {
    let mut m = mm();
    map(&mut m, B, 2 * P, Prot::RW, ANON | MapFlags::LOCKED, None);
    map(&mut m, B + 4 * P, 2 * P, Prot::NONE, ANON, None);
    map(&mut m, B + 8 * P, 2 * P, Prot::RW, ANON, None);
    m.add_vma_flags(B + 8 * P, VmFlags::PFNMAP | VmFlags::IO);
    map(&mut m, B + 12 * P, 2 * P, Prot::RW, ANON, None);
    m.add_vma_flags(B + 12 * P, VmFlags::HUGETLB);
    for a in [Advice::COLD, Advice::PAGEOUT] {
        assert_eq!(adv(&mut m, B, P, a), Err(Errno::EINVAL));
        assert_eq!(adv(&mut m, B + 4 * P, P, a), Ok(()));
        assert_eq!(adv(&mut m, B + 8 * P, P, a), Err(Errno::EINVAL));
        assert_eq!(adv(&mut m, B + 12 * P, P, a), Err(Errno::EINVAL));
    }
}

/// `madvise_dontneed_free_valid_vma` and `madvise_free_single_vma`: DONTNEED and FREE refuse `VM_LOCKED` and
/// `VM_PFNMAP`, DONTNEED_LOCKED only `VM_PFNMAP`; FREE needs anonymous memory (live kernel: FREE on shared
/// anonymous, shared and private file EINVAL, on PROT_NONE 0). hugetlb: FREE EINVAL, DONTNEED needs a
/// huge-page-aligned start and rounds the end down (source).
#[test]
fn madvise_dontneed_free_valid_vma_rules() {
    let mut m = mm();
    let f = file(16 * P);
    map(&mut m, B, 2 * P, Prot::RW, ANON | MapFlags::LOCKED, None);
    assert_eq!(adv(&mut m, B, P, Advice::DONTNEED), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B, P, Advice::FREE), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B, P, Advice::DONTNEED_LOCKED), Ok(()));
    map(&mut m, B + 4 * P, 2 * P, Prot::RW, SHANON, None);
    map(&mut m, B + 8 * P, 2 * P, Prot::RW, PRIV, Some(&f));
    map(&mut m, B + 12 * P, 2 * P, Prot::NONE, ANON, None);
    assert_eq!(adv(&mut m, B + 4 * P, P, Advice::FREE), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B + 8 * P, P, Advice::FREE), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B + 8 * P, P, Advice::DONTNEED), Ok(()));
    assert_eq!(adv(&mut m, B + 12 * P, P, Advice::FREE), Ok(()));
    map(&mut m, B + 16 * P, 2 * P, Prot::RW, ANON, None);
    m.add_vma_flags(B + 16 * P, VmFlags::PFNMAP | VmFlags::IO);
    assert_eq!(adv(&mut m, B + 16 * P, P, Advice::DONTNEED_LOCKED), Err(Errno::EINVAL));
    // hugetlb (2 MiB pages).
    let h = B + 256 * M2;
    map(&mut m, h, 2 * M2, Prot::RW, ANON, None);
    m.add_vma_flags(h, VmFlags::HUGETLB | VmFlags::DONTEXPAND);
    assert_eq!(adv(&mut m, h, M2, Advice::FREE), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, h + P, P, Advice::DONTNEED), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, h, P, Advice::DONTNEED), Ok(()), "rounded down to nothing");
    assert_eq!(adv(&mut m, h, M2, Advice::DONTNEED), Ok(()));
    // Over a hole: ENOMEM at the end (live kernel), also through the per-VMA-lock path's fallback.
    assert_eq!(adv(&mut m, B + 12 * P, 3 * P, Advice::DONTNEED), Err(Errno::ENOMEM));
    assert_eq!(adv(&mut m, B + 11 * P, 2 * P, Advice::FREE), Err(Errno::ENOMEM));
}

/// `get_lock_mode`: the flag advice take the mmap write lock (a write epoch: `mm_lock_seq` advances), the
/// others read locks; DONTNEED / FREE inside one VMA take that VMA's read lock (`try_vma_read_lock`, counted
/// in the per-VMA lock statistics) and fall back to the mmap read lock across VMAs.
#[test]
fn get_lock_mode_chooses_the_lock() {
    let mut m = mm();
    map(&mut m, B, 4 * P, Prot::RW, ANON, None);
    map(&mut m, B + 5 * P, 4 * P, Prot::RW, ANON, None);
    let seq = |m: &Mm| m.locking().lock_seq();
    let hits = |m: &Mm| m.locking().stats().snapshot().success;
    for a in [Advice::WILLNEED, Advice::COLD, Advice::PAGEOUT, Advice::POPULATE_READ, Advice::GUARD_REMOVE] {
        let s = seq(&m);
        adv(&mut m, B, P, a).unwrap();
        assert_eq!(seq(&m), s, "{a:?} under the mmap read lock");
    }
    let (s, h) = (seq(&m), hits(&m));
    adv(&mut m, B, 2 * P, Advice::DONTNEED).unwrap();
    adv(&mut m, B + P, P, Advice::FREE).unwrap();
    assert_eq!((seq(&m), hits(&m)), (s, h + 2), "one VMA: its read lock");
    // The VMA at the start is read-locked, found too short and released (`try_vma_read_lock`), then the walk
    // runs under the mmap read lock.
    assert_eq!(adv(&mut m, B, 9 * P, Advice::DONTNEED), Err(Errno::ENOMEM));
    assert_eq!((seq(&m), hits(&m)), (s, h + 3), "several VMAs: the mmap read lock");
    adv(&mut m, B, P, Advice::DONTFORK).unwrap();
    assert_eq!(seq(&m), s + 2, "a flag advice is one write epoch");
}

/// `madvise_populate` / `faultin_page_range` (`FOLL_MADV_POPULATE`): a hole is ENOMEM at once, a VMA the
/// access is not allowed on EINVAL (`check_vma_flags`, no `FOLL_FORCE`: PROT_NONE, a write to `r--`, a read of
/// `-w-` or `--x`), a page past the end of the file EFAULT (live kernel, every case).
#[test]
fn madvise_populate_errors() {
    let mut m = mm();
    let f = file(2 * P + 100);
    let cases = [(Prot::NONE, false, false), (Prot::WRITE, false, true), (Prot::READ, true, false)];
    for (i, (prot, read_ok, write_ok)) in cases.into_iter().enumerate() {
        let at = B + (i as u64) * 4 * P;
        map(&mut m, at, 2 * P, prot, ANON, None);
        let ok = |b: bool| if b { Ok(()) } else { Err(Errno::EINVAL) };
        assert_eq!(adv(&mut m, at, P, Advice::POPULATE_READ), ok(read_ok), "{prot:?} read");
        assert_eq!(adv(&mut m, at, P, Advice::POPULATE_WRITE), ok(write_ok), "{prot:?} write");
    }
    map(&mut m, B + 16 * P, 2 * P, Prot::EXEC, ANON, None);
    assert_eq!(adv(&mut m, B + 16 * P, P, Advice::POPULATE_READ), Err(Errno::EINVAL));
    map(&mut m, B + 32 * P, 4 * P, Prot::RW, SHARED, Some(&f));
    assert_eq!(adv(&mut m, B + 32 * P, 3 * P, Advice::POPULATE_WRITE), Ok(()));
    assert_eq!(adv(&mut m, B + 32 * P, 4 * P, Advice::POPULATE_READ), Err(Errno::EFAULT));
    assert_eq!(adv(&mut m, B + 8 * P, 4 * P, Advice::POPULATE_READ), Err(Errno::ENOMEM), "hole after");
    assert_eq!(adv(&mut m, B + 7 * P, 2 * P, Advice::POPULATE_READ), Err(Errno::ENOMEM), "hole first");
}

/// A write populate of private memory faults it in with writes, which give the VMA an anon_vma
/// (`do_anonymous_page`, `do_cow_fault`: even when the page is past the end of the file); a read populate
/// gives none (live kernel: two VMAs write-populated apart stop merging when the gap is filled).
#[test]
fn madvise_populate_write_prepares_the_anon_vma() {
    let mut m = mm();
    let f = file(P);
    map(&mut m, B, P, Prot::RW, ANON, None);
    map(&mut m, B + 2 * P, P, Prot::RW, ANON, None);
    adv(&mut m, B, P, Advice::POPULATE_WRITE).unwrap();
    adv(&mut m, B + 2 * P, P, Advice::POPULATE_WRITE).unwrap();
    map(&mut m, B + P, P, Prot::RW, ANON, None);
    assert_eq!(ranges(&m), [(B, B + 2 * P), (B + 2 * P, B + 3 * P)]);
    map(&mut m, B + 8 * P, P, Prot::RW, ANON, None);
    map(&mut m, B + 10 * P, P, Prot::RW, ANON, None);
    adv(&mut m, B + 8 * P, P, Advice::POPULATE_READ).unwrap();
    adv(&mut m, B + 10 * P, P, Advice::POPULATE_READ).unwrap();
    map(&mut m, B + 9 * P, P, Prot::RW, ANON, None);
    assert!(m.vma_at(B + 8 * P).is_some_and(|v| v.end == B + 11 * P && v.anon_vma_id.is_none()));
    map(&mut m, B + 16 * P, 2 * P, Prot::RW, PRIV, Some(&f));
    assert_eq!(adv(&mut m, B + 17 * P, P, Advice::POPULATE_WRITE), Err(Errno::EFAULT));
    assert!(m.vma_at(B + 16 * P).unwrap().anon_vma_id.is_some(), "prepared before the file page was read");
}

/// `madvise_collapse` / `thp_vma_allowable_order(TVA_FORCED_COLLAPSE)`: the VMA must hold a whole aligned
/// 2 MiB block, not be `VM_NOHUGEPAGE` or `VM_NO_KHUGEPAGED`, and be anonymous with an anon_vma, or shmem
/// (unless shmem THP is `deny`), or a regular file only with `CONFIG_READ_ONLY_THP_FOR_FS`. A range within one
/// block: at its start success, elsewhere EINVAL (the block count wraps). (Live kernel, all but `deny` and
/// read-only file THP.)
#[test]
fn madvise_collapse_checks() {
    let mut m = mm();
    let a = B;
    map(&mut m, a, 4 * M2, Prot::RW, ANON, None);
    assert_eq!(adv(&mut m, a, P, Advice::COLLAPSE), Err(Errno::EINVAL), "no anon_vma");
    m.fault(a + P, Access::Write).unwrap();
    assert_eq!(adv(&mut m, a, P, Advice::COLLAPSE), Ok(()));
    assert_eq!(adv(&mut m, a + P, P, Advice::COLLAPSE), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, a + 2 * M2 - P, 2 * P, Advice::COLLAPSE), Ok(()));
    assert_eq!(adv(&mut m, a + 4 * M2 - P, 2 * P, Advice::COLLAPSE), Err(Errno::ENOMEM), "then a hole");
    // Whole blocks: page state. A block never faulted in (no PTE table) is EINVAL; one with a page collapses
    // (its pages faulted in: RSS of the whole block); a guard marker refuses the block.
    assert_eq!(adv(&mut m, a + M2, M2, Advice::COLLAPSE), Err(Errno::EINVAL));
    m.write(a + 100, &[1]).unwrap();
    assert_eq!(m.rss().anon, 2);
    assert_eq!(adv(&mut m, a, M2, Advice::COLLAPSE), Ok(()));
    assert_eq!(m.rss().anon, 512, "the whole block is populated");
    let mut byte = [9u8];
    m.read(a + 100, &mut byte).unwrap();
    assert_eq!(byte, [1], "the contents stay");
    m.fault(a + M2, Access::Read).unwrap();
    adv(&mut m, a + M2 + P, P, Advice::GUARD_INSTALL).unwrap();
    assert_eq!(adv(&mut m, a, 2 * M2, Advice::COLLAPSE), Err(Errno::EINVAL), "the guarded block");
    // Too small or unaligned VMAs, NOHUGEPAGE.
    let b = B + 16 * M2;
    map(&mut m, b, 4 * P, Prot::RW, ANON, None);
    map(&mut m, b + 2 * M2 + P, M2 + 2 * P, Prot::RW, ANON, None);
    for at in [b, b + 2 * M2 + P] {
        m.fault(at, Access::Write).unwrap();
        assert_eq!(adv(&mut m, at, P, Advice::COLLAPSE), Err(Errno::EINVAL));
    }
    adv(&mut m, a, 4 * M2, Advice::NOHUGEPAGE).unwrap();
    assert_eq!(adv(&mut m, a, P, Advice::COLLAPSE), Err(Errno::EINVAL));
    // shmem: allowed without an anon_vma, unless `deny`; a private file mapping: EINVAL.
    let s = B + 32 * M2;
    map(&mut m, s, 2 * M2, Prot::RW, SHANON, None);
    assert_eq!(adv(&mut m, s, P, Advice::COLLAPSE), Ok(()));
    // Whole shmem blocks: the page cache (hpage_collapse_scan_file). None cached: EINVAL; one cached page
    // (written here, then unmapped by DONTNEED, which leaves it in the cache): the block collapses, populated.
    assert_eq!(adv(&mut m, s, M2, Advice::COLLAPSE), Err(Errno::EINVAL));
    m.write(s + M2 - 1, &[3]).unwrap();
    adv(&mut m, s, M2, Advice::DONTNEED).unwrap();
    assert_eq!(adv(&mut m, s, M2, Advice::COLLAPSE), Ok(()));
    assert_eq!(m.rss().shmem, 512, "the whole block is populated");
    let mut byte = [0u8];
    m.read(s + M2 - 1, &mut byte).unwrap();
    assert_eq!(byte, [3]);
    assert_eq!(adv(&mut m, s, 2 * M2, Advice::COLLAPSE), Err(Errno::EINVAL), "the second block has no page");
    adv(&mut m, s, M2, Advice::REMOVE).unwrap();
    assert_eq!(adv(&mut m, s, M2, Advice::COLLAPSE), Err(Errno::EINVAL), "punched out");
    m.validate().unwrap();
    let f = file(8 * M2);
    map(&mut m, B + 40 * M2, 2 * M2, Prot::READ, PRIV, Some(&f));
    assert_eq!(adv(&mut m, B + 40 * M2, P, Advice::COLLAPSE), Err(Errno::EINVAL));
    let mut deny =
        Mm::new(MmConfig { thp_shmem_enabled: ThpMode::Deny, read_only_thp_for_fs: true, ..cfg() });
    map(&mut deny, s, 2 * M2, Prot::RW, SHANON, None);
    assert_eq!(adv(&mut deny, s, P, Advice::COLLAPSE), Err(Errno::EINVAL));
    let ro = Arc::new(VmFile { writable: false, ..(*file(8 * M2)).clone() });
    map(&mut deny, B + 40 * M2, 2 * M2, Prot::READ, PRIV, Some(&ro));
    assert_eq!(adv(&mut deny, B + 40 * M2, P, Advice::COLLAPSE), Ok(()), "read-only file THP");
    map(&mut deny, B + 44 * M2, 2 * M2, Prot::READ, PRIV, Some(&f));
    assert_eq!(adv(&mut deny, B + 44 * M2, P, Advice::COLLAPSE), Err(Errno::EINVAL), "open for writing");
}

/// `madvise_inject_error` (CONFIG_MEMORY_FAILURE; never run on the live kernel, from the source): no
/// CAP_SYS_ADMIN is EPERM; then each page of `[start, start + len)` (the raw length) is looked up as a GUP read,
/// EFAULT at the first that fails.
#[test]
fn madvise_inject_error_checks() {
    let mut m = Mm::new(MmConfig { memory_failure: true, ..cfg() });
    map(&mut m, B, 2 * P, Prot::RW, ANON, None);
    map(&mut m, B + 2 * P, P, Prot::NONE, ANON, None);
    for a in [Advice::HWPOISON, Advice::SOFT_OFFLINE] {
        assert_eq!(adv(&mut m, B, 2 * P, a), Ok(()));
        assert_eq!(
            adv(&mut m, B, 2 * P + 1, a),
            Err(Errno::EFAULT),
            "the raw length reaches the PROT_NONE page"
        );
        assert_eq!(adv(&mut m, B + 3 * P, P, a), Err(Errno::EFAULT), "unmapped");
        assert_eq!(adv(&mut m, B + 1, P, a), Err(Errno::EINVAL), "alignment first");
    }
    let mut user = Mm::new(MmConfig { memory_failure: true, cap_sys_admin: false, ..cfg() });
    assert_eq!(adv(&mut user, B, P, Advice::HWPOISON), Err(Errno::EPERM));
    assert_eq!(adv(&mut user, B, 0, Advice::HWPOISON), Ok(()), "an empty range is skipped first");
}

/// An allocation failure (a split's VMA) leaves everything unchanged and is reported as EAGAIN
/// (`madvise_vma_behavior`'s `-ENOMEM` → `-EAGAIN`).
#[test]
fn madvise_split_failure_is_eagain_and_changes_nothing() {
    let mut m = mm();
    map(&mut m, B, 4 * P, Prot::RW, ANON, None);
    let before = format!("{m:?}");
    m.inject_alloc_failure(Some(0));
    assert_eq!(adv(&mut m, B + P, P, Advice::HUGEPAGE), Err(Errno::EAGAIN));
    m.inject_alloc_failure(None);
    assert_eq!(format!("{m:?}"), before);
}

// ----- guard regions -----

/// `madvise_guard_install` (6.18 stable): `is_valid_guard_vma` refuses `VM_SPECIAL`, hugetlb and `VM_LOCKED`
/// (`MLOCK_ONFAULT` too); the whole VMA gets `VM_MAYBE_GUARD` without a split; only an anonymous VMA gets an
/// anon_vma; accesses to the markers fault. GUARD_REMOVE accepts `VM_LOCKED` and keeps the flag. (Live kernel:
/// smaps `gu` on the whole VMA, maps unchanged; EINVAL on a locked VMA and on `[vvar]`; PROT_NONE, shared
/// anonymous and file VMAs accepted; a private file VMA gets no anon_vma, checked by a merge.)
#[test]
fn madvise_guard_install_marks_the_vma_and_the_pages() {
    let mut m = mm();
    let f = file(16 * P);
    map(&mut m, B, 8 * P, Prot::RW, ANON, None);
    adv(&mut m, B + 2 * P, 2 * P, Advice::GUARD_INSTALL).unwrap();
    assert_eq!(ranges(&m), [(B, B + 8 * P)], "no split");
    assert!(flags_at(&m, B).contains(VmFlags::MAYBE_GUARD));
    assert!(m.vma_at(B).unwrap().anon_vma_id.is_some());
    assert_eq!(m.gup_access(B + 2 * P, false), Err(Errno::EFAULT));
    assert_eq!(m.fault(B + 3 * P, Access::Write), Err(Errno::EFAULT));
    assert_eq!(m.gup_access(B + 4 * P, true), Ok(()));
    assert_eq!(guard_pages(&m), 2);
    adv(&mut m, B, 8 * P, Advice::GUARD_REMOVE).unwrap();
    assert!(m.guard_ranges().is_empty());
    assert!(flags_at(&m, B).contains(VmFlags::MAYBE_GUARD), "the flag stays");
    // File-backed: the flag, the markers, no anon_vma.
    map(&mut m, B + 16 * P, 4 * P, Prot::READ, PRIV, Some(&f));
    map(&mut m, B + 24 * P, 4 * P, Prot::RW, SHARED, Some(&f));
    adv(&mut m, B + 17 * P, P, Advice::GUARD_INSTALL).unwrap();
    adv(&mut m, B + 24 * P, P, Advice::GUARD_INSTALL).unwrap();
    for at in [B + 17 * P, B + 24 * P] {
        assert!(m.vma_at(at).unwrap().anon_vma_id.is_none());
        assert_eq!(m.gup_access(at, false), Err(Errno::EFAULT));
    }
    // Refused: locked (either lock mode), special, hugetlb; GUARD_REMOVE allows locked.
    map(&mut m, B + 32 * P, 2 * P, Prot::RW, ANON | MapFlags::LOCKED, None);
    assert_eq!(adv(&mut m, B + 32 * P, P, Advice::GUARD_INSTALL), Err(Errno::EINVAL));
    assert!(!flags_at(&m, B + 32 * P).intersects(VmFlags::MAYBE_GUARD), "checked before the flag is set");
    assert_eq!(adv(&mut m, B + 32 * P, P, Advice::GUARD_REMOVE), Ok(()));
    map(&mut m, B + 40 * P, 2 * P, Prot::RW, ANON, None);
    m.add_vma_flags(B + 40 * P, VmFlags::IO | VmFlags::PFNMAP);
    assert_eq!(adv(&mut m, B + 40 * P, P, Advice::GUARD_INSTALL), Err(Errno::EINVAL));
    assert_eq!(adv(&mut m, B + 40 * P, P, Advice::GUARD_REMOVE), Err(Errno::EINVAL));
    // Over a hole: both sides guarded, then ENOMEM.
    map(&mut m, B + 50 * P, P, Prot::RW, ANON, None);
    map(&mut m, B + 52 * P, P, Prot::RW, ANON, None);
    assert_eq!(adv(&mut m, B + 50 * P, 3 * P, Advice::GUARD_INSTALL), Err(Errno::ENOMEM));
    assert_eq!(guard_pages(&m), 4);
}

/// Guard markers are PTE markers: zapping (DONTNEED, FREE, REMOVE) and mprotect keep them; every unmap drops
/// them (munmap, `MAP_FIXED` over them, brk shrinking, mremap shrinking); mremap moves them, DONTUNMAP too
/// (live kernel: `scripts/regress/madvise-guard-regions.script`).
#[test]
fn guard_markers_follow_the_page_tables() {
    let mut m = mm();
    map(&mut m, B, 8 * P, Prot::RW, ANON, None);
    adv(&mut m, B, 8 * P, Advice::GUARD_INSTALL).unwrap();
    for a in [Advice::DONTNEED, Advice::FREE, Advice::COLD, Advice::PAGEOUT, Advice::WILLNEED] {
        adv(&mut m, B, 8 * P, a).unwrap();
    }
    m.mprotect(B + P, P, Prot::READ).unwrap();
    m.mprotect(B + P, P, Prot::RW).unwrap();
    assert_eq!(guard_pages(&m), 8);
    m.munmap(B + 7 * P, P).unwrap();
    map(&mut m, B + 6 * P, P, Prot::RW, ANON, None);
    assert_eq!(guard_pages(&m), 6, "munmap and MAP_FIXED drop theirs");
    assert_eq!(m.mremap(B, 6 * P, 4 * P, MremapFlags::empty(), 0), Ok(B));
    assert_eq!(guard_pages(&m), 4, "a shrink unmaps the tail");
    let to = B + 100 * P;
    assert_eq!(m.mremap(B, 4 * P, 6 * P, MremapFlags::MAYMOVE | MremapFlags::FIXED, to), Ok(to));
    assert_eq!(m.guard_ranges(), [(to, to + 4 * P)]);
    assert_eq!(m.gup_access(to + 4 * P, true), Ok(()), "the grown part has none");
    let flags = MremapFlags::MAYMOVE | MremapFlags::FIXED | MremapFlags::DONTUNMAP;
    assert_eq!(m.mremap(to, 6 * P, 6 * P, flags, B), Ok(B));
    assert_eq!(m.guard_ranges(), [(B, B + 4 * P)], "DONTUNMAP moves them too");
    assert_eq!(m.gup_access(to, true), Ok(()));
    // brk shrinking.
    let brk0 = m.brk_value();
    let top = m.brk(brk0 + 4 * P);
    assert_eq!(top, brk0 + 4 * P);
    adv(&mut m, brk0 & !(P - 1), 4 * P, Advice::GUARD_INSTALL).unwrap();
    m.brk(brk0);
    assert_eq!(m.guard_ranges(), [(B, B + 4 * P)]);
}

/// `dup_mmap` → `copy_page_range` when `vma_needs_copy` (anon_vma or `VM_COPY_ON_FORK`, so `VM_MAYBE_GUARD`
/// VMAs always): the child inherits the markers, also of file-backed VMAs, but not in a `VM_WIPEONFORK` VMA
/// (it keeps the flag) nor a `VM_DONTCOPY` one (live kernel: a forked child's accesses).
#[test]
fn fork_copies_guard_markers_where_it_copies_page_tables() {
    let mut m = mm();
    let f = file(16 * P);
    map(&mut m, B, 2 * P, Prot::RW, ANON, None);
    map(&mut m, B + 4 * P, 2 * P, Prot::RW, SHARED, Some(&f));
    map(&mut m, B + 8 * P, 2 * P, Prot::RW, ANON, None);
    map(&mut m, B + 12 * P, 2 * P, Prot::RW, ANON, None);
    adv(&mut m, B + 8 * P, 2 * P, Advice::WIPEONFORK).unwrap();
    adv(&mut m, B + 12 * P, 2 * P, Advice::DONTFORK).unwrap();
    for at in [B, B + 4 * P, B + 8 * P, B + 12 * P] {
        adv(&mut m, at, P, Advice::GUARD_INSTALL).unwrap();
    }
    let child = m.fork().unwrap();
    child.validate().unwrap();
    assert_eq!(child.gup_access(B, true), Err(Errno::EFAULT));
    assert_eq!(child.gup_access(B + 4 * P, true), Err(Errno::EFAULT));
    assert_eq!(child.gup_access(B + 8 * P, true), Ok(()));
    assert!(flags_at(&child, B + 8 * P).contains(VmFlags::MAYBE_GUARD));
    assert!(child.vma_at(B + 12 * P).is_none());
    assert_eq!(guard_pages(&child), 2);
    assert_eq!(guard_pages(&m), 4, "the parent keeps its own");
}

/// `VM_STICKY` (6.18 stable, `mm/vma.c`): `VM_MAYBE_GUARD` does not prevent merges and the merged VMA keeps it
/// (`vma_expand` for new ranges, `vma_merge_existing_range`; `vma_modify_flags` hands the merged flags back),
/// and `anon_vma_compatible` ignores it (live kernel: a new mapping next to a guarded VMA merges with it, an
/// mprotect undone merges the three parts back, both with `gu`).
#[test]
fn maybe_guard_is_sticky_on_merge() {
    let mut m = mm();
    map(&mut m, B, 2 * P, Prot::RW, ANON, None);
    adv(&mut m, B, P, Advice::GUARD_INSTALL).unwrap();
    map(&mut m, B + 2 * P, 2 * P, Prot::RW, ANON, None);
    assert_eq!(ranges(&m), [(B, B + 4 * P)]);
    assert!(flags_at(&m, B).contains(VmFlags::MAYBE_GUARD));
    // Merge to the right into a guarded next.
    map(&mut m, B + 12 * P, 2 * P, Prot::RW, ANON, None);
    adv(&mut m, B + 12 * P, P, Advice::GUARD_INSTALL).unwrap();
    map(&mut m, B + 10 * P, 2 * P, Prot::RW, ANON, None);
    assert!(
        m.vma_at(B + 10 * P).is_some_and(|v| v.end == B + 14 * P && v.flags.contains(VmFlags::MAYBE_GUARD))
    );
    // An existing-range merge: the middle part guarded, then made equal to its unguarded neighbours.
    map(&mut m, B + 20 * P, 4 * P, Prot::RW, ANON, None);
    m.mprotect(B + 21 * P, P, Prot::READ).unwrap();
    adv(&mut m, B + 21 * P, P, Advice::GUARD_INSTALL).unwrap();
    assert!(!flags_at(&m, B + 20 * P).intersects(VmFlags::MAYBE_GUARD));
    m.mprotect(B + 21 * P, P, Prot::RW).unwrap();
    m.validate().unwrap();
    let v = m.vma_at(B + 20 * P).unwrap();
    assert_eq!((v.start, v.end), (B + 20 * P, B + 24 * P));
    assert!(v.flags.contains(VmFlags::MAYBE_GUARD));
    assert_eq!(m.gup_access(B + 21 * P, false), Err(Errno::EFAULT));
}

/// Pages holding guard markers.
fn guard_pages(m: &Mm) -> u64 {
    m.guard_ranges().iter().map(|(s, e)| (e - s) / P).sum()
}

/// The exception to stickiness (`mm/madvise.c: madvise_update_vma`): naming a part that then merges with a
/// guarded neighbour resets the merged VMA's flags to the named part's, because `vma_modify_name` does not hand
/// back the sticky flags the merge kept (`vma_modify_flags` does). The neighbour's markers stay, now in a VMA
/// without `VM_MAYBE_GUARD`. (This host's kernel has no `CONFIG_ANON_VMA_NAME`; the rule is read from the
/// source. The fuzz input `fuzz/regressions/engine/name-merge-drops-maybe-guard` found it.)
#[test]
fn naming_a_part_that_merges_drops_a_neighbours_maybe_guard() {
    let mut m = Mm::new(MmConfig { anon_vma_name: true, ..cfg() });
    map(&mut m, B, 3 * P, Prot::RW, ANON, None);
    m.set_anon_name(B + P, P, Some("x")).unwrap();
    adv(&mut m, B, P, Advice::GUARD_INSTALL).unwrap();
    assert!(flags_at(&m, B).contains(VmFlags::MAYBE_GUARD));
    assert!(!flags_at(&m, B + P).intersects(VmFlags::MAYBE_GUARD));
    // Unnaming the middle merges all three into the guarded first VMA, with the middle's flags.
    m.set_anon_name(B + P, P, None).unwrap();
    m.validate().unwrap();
    assert_eq!(ranges(&m), [(B, B + 3 * P)]);
    assert!(!flags_at(&m, B).intersects(VmFlags::MAYBE_GUARD));
    assert_eq!(m.gup_access(B, false), Err(Errno::EFAULT), "the marker stays");
    assert_eq!(m.gup_access(B + P, false), Ok(()));
}
