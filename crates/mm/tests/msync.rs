//! msync (`mm/msync.c: SYSCALL_DEFINE3(msync)`): every rule, each checked first on the live 6.18.44 kernel with
//! a small C program over anonymous, shared file and `MAP_LOCKED` mappings with holes between them. msync
//! changes no state: every call is followed by `validate()` and a comparison with the state before.
#![cfg(not(loom))]

use vmspace_mm::space::{Errno, MapFlags, Mm, MmConfig, MsyncFlags, Prot, VmFile};

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);
const ASYNC: MsyncFlags = MsyncFlags::ASYNC;
const SYNC: MsyncFlags = MsyncFlags::SYNC;
const INVAL: MsyncFlags = MsyncFlags::INVALIDATE;

/// `[B, B+4P)` anonymous, hole, `[B+6P, B+8P)` anonymous, hole, `[B+10P, B+14P)` shared file (2 pages long),
/// hole, `[B+16P, B+18P)` locked.
fn setup() -> Mm {
    let m = Mm::new(MmConfig { cap_ipc_lock: true, ..MmConfig::default() });
    let f = VmFile::regular("/f", 4, 2 * P);
    m.mmap(B, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    m.mmap(B + 6 * P, 2 * P, Prot::RW, ANON, None, 0).unwrap();
    m.mmap(B + 10 * P, 4 * P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 0).unwrap();
    m.mmap(B + 16 * P, 2 * P, Prot::RW, ANON | MapFlags::LOCKED, None, 0).unwrap();
    m
}

fn sync(m: &mut Mm, start: u64, len: u64, flags: MsyncFlags) -> Result<(), Errno> {
    let before = format!("{m:?}");
    let r = m.msync(start, len, flags);
    m.validate().unwrap();
    assert_eq!(format!("{m:?}"), before, "msync changes nothing");
    r
}

/// The flag and address checks, in order: unknown flags, then an unaligned start, then ASYNC with SYNC, all
/// EINVAL; flags 0 are valid (live kernel).
#[test]
fn msync_flag_and_alignment_checks() {
    let mut m = setup();
    assert_eq!(sync(&mut m, B, P, MsyncFlags::empty()), Ok(()));
    assert_eq!(sync(&mut m, B, P, MsyncFlags::from_bits_retain(8)), Err(Errno::EINVAL));
    assert_eq!(sync(&mut m, B, P, ASYNC | SYNC), Err(Errno::EINVAL));
    assert_eq!(sync(&mut m, B + 1, P, SYNC), Err(Errno::EINVAL));
    assert_eq!(sync(&mut m, B + 1, 0, MsyncFlags::from_bits_retain(8)), Err(Errno::EINVAL));
    assert_eq!(sync(&mut m, B + 40 * P, 0, SYNC | INVAL), Ok(()), "an empty range succeeds anywhere");
}

/// Length rounding: up to a page; a length that wraps to 0 succeeds; an end past `u64::MAX` is ENOMEM, as is a
/// range no VMA covers (the start is not checked against `TASK_SIZE`) (live kernel).
#[test]
fn msync_length_rounding_and_overflow() {
    let mut m = setup();
    assert_eq!(sync(&mut m, B, 1, SYNC), Ok(()));
    assert_eq!(sync(&mut m, B, u64::MAX, SYNC), Ok(()));
    assert_eq!(sync(&mut m, B, u64::MAX - 4095, SYNC), Err(Errno::ENOMEM));
    assert_eq!(sync(&mut m, u64::MAX - 4095, P, MsyncFlags::empty()), Err(Errno::ENOMEM));
    assert_eq!(sync(&mut m, 0x7fff_ffff_e000, P, SYNC), Err(Errno::ENOMEM));
    assert_eq!(sync(&mut m, B + 100 * P, P, ASYNC), Err(Errno::ENOMEM));
}

/// Holes: with flags exactly `MS_ASYNC`, ENOMEM at the first hole; otherwise holes are skipped and ENOMEM is
/// returned at the end, and a hole that reaches the end is ENOMEM at once (live kernel, all flag combinations).
#[test]
fn msync_holes() {
    let mut m = setup();
    for flags in [ASYNC, SYNC, MsyncFlags::empty(), ASYNC | INVAL] {
        assert_eq!(sync(&mut m, B, 5 * P, flags), Err(Errno::ENOMEM), "{flags:?}");
        assert_eq!(sync(&mut m, B, 7 * P, flags), Err(Errno::ENOMEM), "{flags:?}");
        assert_eq!(sync(&mut m, B - P, 2 * P, flags), Err(Errno::ENOMEM), "{flags:?}");
        assert_eq!(sync(&mut m, B - P, P, flags), Err(Errno::ENOMEM), "{flags:?}");
    }
    assert_eq!(sync(&mut m, B, 14 * P, SYNC), Err(Errno::ENOMEM));
    assert_eq!(sync(&mut m, B + 10 * P, 4 * P, SYNC), Ok(()), "past the end of the file: fsync succeeds");
    assert_eq!(sync(&mut m, B + 10 * P, 5 * P, SYNC), Err(Errno::ENOMEM));
}

/// `MS_INVALIDATE` on a `VM_LOCKED` VMA is EBUSY, even after holes that would otherwise give ENOMEM; other
/// flags sync locked memory fine (live kernel: `msync(a, 20 pages, MS_INVALIDATE)` over holes and a locked
/// VMA is EBUSY, over the same minus the locked VMA ENOMEM).
#[test]
fn msync_invalidate_of_locked_memory_is_ebusy() {
    let mut m = setup();
    assert_eq!(sync(&mut m, B + 16 * P, P, INVAL), Err(Errno::EBUSY));
    assert_eq!(sync(&mut m, B + 16 * P, P, ASYNC | INVAL), Err(Errno::EBUSY));
    assert_eq!(sync(&mut m, B + 16 * P, P, SYNC), Ok(()));
    assert_eq!(sync(&mut m, B, 20 * P, INVAL), Err(Errno::EBUSY));
    assert_eq!(sync(&mut m, B, 16 * P, INVAL), Err(Errno::ENOMEM));
    assert_eq!(sync(&mut m, B - P, 30 * P, INVAL), Err(Errno::EBUSY));
    assert_eq!(sync(&mut m, B + 3 * P, 4 * P, INVAL | SYNC), Err(Errno::ENOMEM));
}
