//! Files whose size changes under their mappings, one test per kernel rule (`fs/open.c: do_ftruncate`,
//! `fs/attr.c: inode_newsize_ok`, `mm/truncate.c: truncate_pagecache`). Observed on the live kernel with a C
//! program on the directory the kernel runner uses (ext4: largest file 16 TiB - 4 KiB) and with op scripts
//! (`scripts/regress/file-size-limits.script`, `scripts/regress/ftruncate-shared-size.script`).
#![cfg(not(loom))]

use std::sync::Arc;
use vmspace_mm::{Access, BusCode, Signal};

use vmspace_mm::space::{Errno, MapFlags, Mm, MmConfig, Prot, VmFile};

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const EXT4_MAX: u64 = 0xfff_ffff_f000;

fn file(size: u64) -> Arc<VmFile> {
    VmFile::regular_sized("/f", 1, size, EXT4_MAX, u64::MAX).unwrap()
}

/// `ksys_ftruncate` / `inode_newsize_ok`: a size above `i64::MAX` is EINVAL (a negative `loff_t`); growing
/// beyond the file system's largest file (`s_maxbytes`) or `RLIMIT_FSIZE` is EFBIG; shrinking always works.
/// The op-script `file NAME SIZE` is this truncation of a new file.
#[test]
fn size_limits_inode_newsize_ok() {
    let f = file(0);
    assert_eq!(f.ftruncate(EXT4_MAX), Ok(()));
    assert_eq!(f.ftruncate(EXT4_MAX + 1), Err(Errno::EFBIG));
    assert_eq!(f.ftruncate(i64::MAX as u64), Err(Errno::EFBIG));
    assert_eq!(f.ftruncate(1 << 63), Err(Errno::EINVAL));
    assert_eq!(f.ftruncate(u64::MAX), Err(Errno::EINVAL));
    assert_eq!(f.size(), EXT4_MAX);
    assert_eq!(f.ftruncate(3 * P), Ok(()));
    let limited = VmFile::regular_sized("/g", 2, 4 * P, EXT4_MAX, 8 * P).unwrap();
    assert_eq!(limited.ftruncate(8 * P + 1), Err(Errno::EFBIG));
    assert_eq!(limited.ftruncate(8 * P), Ok(()));
    assert_eq!(VmFile::regular_sized("/h", 3, EXT4_MAX + 1, EXT4_MAX, u64::MAX), Err(Errno::EFBIG));
    assert_eq!(VmFile::regular_sized("/h", 3, 1 << 63, EXT4_MAX, u64::MAX), Err(Errno::EINVAL));
    // Not opened for writing, or not a regular file: EINVAL (`do_ftruncate`).
    let ro = VmFile { writable: false, ..(*file(P)).clone() };
    assert_eq!(ro.ftruncate(0), Err(Errno::EINVAL));
    assert_eq!(VmFile::shmem_zero(9, P).ftruncate(0), Err(Errno::EINVAL));
}

/// `truncate_pagecache` with `even_cows`: after a shrink, every mapping of the file (private and shared, in
/// this mm and in a fork child) faults beyond the new end, also on pages touched before, private
/// copied-on-write pages included (the live kernel unmaps those too); growing back makes them accessible.
/// VMAs do not change.
#[test]
fn shrink_is_seen_by_every_mapping_truncate_pagecache() {
    let f = file(4 * P);
    let m = Mm::new(MmConfig::default());
    m.mmap(B, 4 * P, Prot::RW, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0).unwrap();
    m.mmap(B + 8 * P, 4 * P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 0).unwrap();
    for i in 0..4 {
        m.gup_access(B + i * P, true).unwrap();
        m.gup_access(B + 8 * P + i * P, true).unwrap();
    }
    let child = m.fork().unwrap();
    let maps = m.maps_text();
    f.ftruncate(P + P / 2).unwrap();
    for base in [B, B + 8 * P] {
        for (i, ok) in [(0, true), (1, true), (2, false), (3, false)] {
            for write in [false, true] {
                assert_eq!(m.gup_access(base + i * P, write).is_ok(), ok, "{base:#x} page {i}");
                assert_eq!(child.gup_access(base + i * P, write).is_ok(), ok, "child {base:#x} page {i}");
            }
        }
    }
    // A user fault beyond the end is a SIGBUS.
    assert_eq!(m.fault(B + 3 * P, Access::Read), Err(Errno::EIO));
    assert_eq!(m.maps_text(), maps);
    f.ftruncate(4 * P).unwrap();
    assert!((0..4).all(|i| m.gup_access(B + i * P, true).is_ok()));
    m.validate().unwrap();
    child.validate().unwrap();
}

/// The file's bytes through its mappings: a shared mapping writes the file, a private one reads it until its
/// own write copies the page; a shrink drops the pages beyond the end (private copies too) and zeroes the
/// tail of the partial last page, so growing back reads zeroes there (the live kernel's `truncate_pagecache`
/// and `truncate_inode_partial_folio`).
#[test]
fn contents_follow_the_file_through_truncation() {
    let f = file(4 * P);
    let m = Mm::new(MmConfig::default());
    m.mmap(B, 4 * P, Prot::RW, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0).unwrap();
    m.mmap(B + 8 * P, 4 * P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 0).unwrap();
    m.fill(B + 8 * P, 4 * P, 0x5a).unwrap();
    let mut b = [0u8; 2];
    m.read(B + P + P / 2 - 1, &mut b).unwrap();
    assert_eq!(b, [0x5a, 0x5a], "the private mapping reads the file");
    m.fill(B + 3 * P, P, 0x11).unwrap();
    m.read(B + 11 * P, &mut b).unwrap();
    assert_eq!(b, [0x5a, 0x5a], "the private write copied the page");
    f.ftruncate(P + P / 2).unwrap();
    // A private page beyond the new end of the file: SIGBUS BUS_ADRERR, as `do_sigbus` raises it.
    let f3 = m.read(B + 3 * P, &mut b).unwrap_err();
    assert_eq!(
        (f3.addr, f3.signal),
        (B + 3 * P, Signal::Bus(BusCode::AdrErr)),
        "the private copy went with the file's page"
    );
    f.ftruncate(4 * P).unwrap();
    for base in [B, B + 8 * P] {
        m.read(base + P + P / 2 - 1, &mut b).unwrap();
        assert_eq!(b, [0x5a, 0], "the partial page's tail was zeroed");
        m.read(base + 3 * P, &mut b).unwrap();
        assert_eq!(b, [0, 0], "pages beyond the old end are new");
        m.read(base, &mut b).unwrap();
        assert_eq!(b, [0x5a, 0x5a]);
    }
    m.validate().unwrap();
}
