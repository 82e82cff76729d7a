//! Bad inputs to every call: the errno Linux 6.18 returns, and the address space unchanged afterwards
//! (`validate()` passes and the maps text is identical). The errnos and their order follow the kernel code
//! paths and were checked against the live kernel by the differential test where a script can express them.
#![cfg(not(loom))]

use std::sync::Arc;

use vmspace_mm::space::{Advice, MapFlags, MremapFlags, Prot};
use vmspace_mm::space::{Errno, Mm, MmConfig, TASK_SIZE, VmFile};
use vmspace_mm::vma::VmFlags;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const RW: Prot = Prot::RW;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS);

fn cfg() -> MmConfig {
    MmConfig { anon_vma_name: true, ..MmConfig::default() }
}

/// Three VMAs with a hole: [B, B+4P) rw, hole, [B+6P, B+8P) r-- file, [B+8P, B+10P) shared file (read-only
/// open).
fn base() -> (Mm, Arc<VmFile>, Arc<VmFile>) {
    let m = Mm::new(cfg());
    let f = VmFile::regular("/f", 1, 64 * P);
    let ro = Arc::new(VmFile { writable: false, ..(*VmFile::regular("/ro", 2, 64 * P)).clone() });
    m.mmap(B, 4 * P, RW, ANON | MapFlags::FIXED, None, 0).unwrap();
    m.mmap(B + 6 * P, 2 * P, Prot::READ, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0).unwrap();
    m.mmap(B + 8 * P, 2 * P, Prot::READ, MapFlags::SHARED | MapFlags::FIXED, Some(&ro), 0).unwrap();
    (m, f, ro)
}

/// Runs `op` and checks its errno and that nothing changed.
fn expect<T: std::fmt::Debug>(
    m: &mut Mm,
    want: Errno,
    what: &str,
    op: impl FnOnce(&mut Mm) -> Result<T, Errno>,
) {
    let before = m.maps_text();
    let count = m.map_count();
    let r = op(m);
    assert_eq!(r.as_ref().err(), Some(&want), "{what}: got {r:?}");
    m.validate().unwrap_or_else(|e| panic!("{what}: invalid after failure: {e}"));
    assert_eq!(m.maps_text(), before, "{what}: maps changed");
    assert_eq!(m.map_count(), count, "{what}: map_count changed");
}

#[test]
fn mmap_errnos() {
    let (mut m, f, ro) = base();
    expect(&mut m, Errno::EINVAL, "zero length", |m| m.mmap(B, 0, RW, ANON, None, 0));
    expect(&mut m, Errno::EINVAL, "unaligned offset", |m| {
        m.mmap(0, P, Prot::READ, MapFlags::PRIVATE, Some(&f), 1)
    });
    expect(&mut m, Errno::ENOMEM, "length overflow", |m| m.mmap(0, u64::MAX, RW, ANON, None, 0));
    expect(&mut m, Errno::ENOMEM, "length beyond TASK_SIZE", |m| m.mmap(0, TASK_SIZE + P, RW, ANON, None, 0));
    expect(&mut m, Errno::EINVAL, "fixed unaligned", |m| {
        m.mmap(B + 1, P, RW, ANON | MapFlags::FIXED, None, 0)
    });
    expect(&mut m, Errno::ENOMEM, "fixed beyond TASK_SIZE", |m| {
        m.mmap(TASK_SIZE, P, RW, ANON | MapFlags::FIXED, None, 0)
    });
    expect(&mut m, Errno::ENOMEM, "fixed across TASK_SIZE", |m| {
        m.mmap(TASK_SIZE - P, 2 * P, RW, ANON | MapFlags::FIXED, None, 0)
    });
    expect(&mut m, Errno::EINVAL, "no type", |m| m.mmap(0, P, RW, MapFlags::ANONYMOUS, None, 0));
    expect(&mut m, Errno::EINVAL, "anonymous shared|private", |m| {
        m.mmap(0, P, RW, MapFlags::SHARED | MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0)
    });
    expect(&mut m, Errno::EEXIST, "fixed_noreplace over a mapping", |m| {
        m.mmap(B + 3 * P, 2 * P, RW, ANON | MapFlags::FIXED_NOREPLACE, None, 0)
    });
    expect(&mut m, Errno::EINVAL, "growsdown file", |m| {
        m.mmap(
            B + 20 * P,
            P,
            Prot::READ,
            MapFlags::PRIVATE | MapFlags::GROWSDOWN | MapFlags::FIXED,
            Some(&f),
            0,
        )
    });
    expect(&mut m, Errno::EINVAL, "growsdown shared anon", |m| {
        m.mmap(
            B + 20 * P,
            P,
            RW,
            MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::GROWSDOWN | MapFlags::FIXED,
            None,
            0,
        )
    });
    expect(&mut m, Errno::EOPNOTSUPP, "shared_validate with fixed_noreplace", |m| {
        m.mmap(B + 20 * P, P, Prot::READ, MapFlags::SHARED_VALIDATE | MapFlags::FIXED_NOREPLACE, Some(&f), 0)
    });
    expect(&mut m, Errno::EACCES, "shared writable of a read-only file", |m| {
        m.mmap(B + 20 * P, P, RW, MapFlags::SHARED | MapFlags::FIXED, Some(&ro), 0)
    });
    expect(&mut m, Errno::EOVERFLOW, "file offset overflow", |m| {
        m.mmap(0, 2 * P, Prot::READ, MapFlags::PRIVATE, Some(&f), 0xffff_ffff_ffff_f000)
    });
    expect(&mut m, Errno::EBADF, "file mapping without file", |m| {
        m.mmap(0, P, Prot::READ, MapFlags::PRIVATE, None, 0)
    });
    expect(&mut m, Errno::EPERM, "fixed below mmap_min_addr", |m| {
        m.mmap(0, P, RW, ANON | MapFlags::FIXED, None, 0)
    });
}

#[test]
fn munmap_errnos() {
    let (mut m, _, _) = base();
    expect(&mut m, Errno::EINVAL, "unaligned", |m| m.munmap(B + 1, P));
    expect(&mut m, Errno::EINVAL, "zero length", |m| m.munmap(B, 0));
    expect(&mut m, Errno::EINVAL, "start beyond TASK_SIZE", |m| m.munmap(TASK_SIZE + P, P));
    expect(&mut m, Errno::EINVAL, "length beyond TASK_SIZE", |m| m.munmap(B, TASK_SIZE));
    // Unmapping nothing succeeds without change.
    let before = m.maps_text();
    assert_eq!(m.munmap(B + 4 * P, 2 * P), Ok(()));
    assert_eq!(m.maps_text(), before);
}

#[test]
fn mprotect_errnos() {
    let (mut m, _, _) = base();
    expect(&mut m, Errno::EINVAL, "unaligned", |m| m.mprotect(B + 1, P, Prot::READ));
    expect(&mut m, Errno::ENOMEM, "length wraps", |m| m.mprotect(B, u64::MAX - B, Prot::READ));
    expect(&mut m, Errno::EINVAL, "unknown prot bit", |m| m.mprotect(B, P, Prot::from_bits_retain(0x10)));
    expect(&mut m, Errno::EINVAL, "growsdown and growsup", |m| {
        m.mprotect(B, P, Prot::READ | Prot::GROWSDOWN | Prot::GROWSUP)
    });
    expect(&mut m, Errno::EINVAL, "growsdown on a normal VMA", |m| {
        m.mprotect(B, P, Prot::READ | Prot::GROWSDOWN)
    });
    expect(&mut m, Errno::ENOMEM, "starts in a hole", |m| m.mprotect(B + 4 * P, 3 * P, Prot::READ));
    expect(&mut m, Errno::ENOMEM, "unmapped beyond TASK_SIZE", |m| m.mprotect(TASK_SIZE, P, Prot::READ));
    expect(&mut m, Errno::EACCES, "write on a read-only shared file", |m| m.mprotect(B + 8 * P, P, RW));
    assert_eq!(m.mprotect(B, 0, Prot::READ), Ok(()), "zero length succeeds");
}

/// mprotect changes the VMAs before a hole, then fails: Linux's partial progress, reproduced.
#[test]
fn mprotect_partial_progress_at_hole() {
    let (m, _, _) = base();
    assert_eq!(m.mprotect(B, 8 * P, Prot::READ), Err(Errno::ENOMEM));
    m.validate().unwrap();
    let first = m.areas().next().unwrap();
    assert_eq!(
        (first.start(), first.end(), first.flags() & VmFlags::ACCESS_FLAGS),
        (B, B + 4 * P, VmFlags::READ)
    );
}

#[test]
fn mremap_errnos() {
    let (mut m, _, _) = base();
    expect(&mut m, Errno::EINVAL, "unknown flag", |m| m.mremap(B, P, P, MremapFlags::from_bits_retain(8), 0));
    expect(&mut m, Errno::EINVAL, "unaligned", |m| m.mremap(B + 1, P, P, MremapFlags::empty(), 0));
    expect(&mut m, Errno::EINVAL, "zero new length", |m| m.mremap(B, P, 0, MremapFlags::empty(), 0));
    expect(&mut m, Errno::EINVAL, "new length beyond TASK_SIZE", |m| {
        m.mremap(B, P, TASK_SIZE + P, MremapFlags::empty(), 0)
    });
    expect(&mut m, Errno::EINVAL, "fixed without maymove", |m| {
        m.mremap(B, P, P, MremapFlags::FIXED, B + 20 * P)
    });
    expect(&mut m, Errno::EINVAL, "dontunmap resizing", |m| {
        m.mremap(B, P, 2 * P, MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP, B + 20 * P)
    });
    expect(&mut m, Errno::EINVAL, "overlapping ranges", |m| {
        m.mremap(B, 2 * P, 2 * P, MremapFlags::MAYMOVE | MremapFlags::FIXED, B + P)
    });
    expect(&mut m, Errno::EINVAL, "new address unaligned", |m| {
        m.mremap(B, P, P, MremapFlags::MAYMOVE | MremapFlags::FIXED, B + 20 * P + 1)
    });
    expect(&mut m, Errno::EFAULT, "unmapped source", |m| {
        m.mremap(B + 4 * P, P, 2 * P, MremapFlags::MAYMOVE, 0)
    });
    expect(&mut m, Errno::EFAULT, "fixed move from a hole", |m| {
        m.mremap(B + 4 * P, 2 * P, 2 * P, MremapFlags::MAYMOVE | MremapFlags::FIXED, B + 20 * P)
    });
    expect(&mut m, Errno::EFAULT, "growing a range that crosses the VMA end", |m| {
        m.mremap(B, 5 * P, 6 * P, MremapFlags::empty(), 0)
    });
    expect(&mut m, Errno::ENOMEM, "growing into a neighbour without maymove", |m| {
        m.mremap(B + 6 * P, 2 * P, 3 * P, MremapFlags::empty(), 0)
    });
    expect(&mut m, Errno::EINVAL, "duplicating a private mapping", |m| {
        m.mremap(B, 0, P, MremapFlags::MAYMOVE, 0)
    });
}

#[test]
fn madvise_errnos() {
    let (mut m, _, _) = base();
    expect(&mut m, Errno::EINVAL, "unknown advice", |m| m.madvise(B, P, Advice::from_raw(1234)));
    expect(&mut m, Errno::EINVAL, "unaligned", |m| m.madvise(B + 1, P, Advice::DONTNEED));
    expect(&mut m, Errno::EINVAL, "length wraps", |m| m.madvise(B, u64::MAX, Advice::DONTNEED));
    expect(&mut m, Errno::ENOMEM, "hole", |m| m.madvise(B, 8 * P, Advice::DONTNEED));
    expect(&mut m, Errno::ENOMEM, "nothing mapped", |m| m.madvise(B + 40 * P, P, Advice::DONTFORK));
    expect(&mut m, Errno::EINVAL, "wipeonfork on a file", |m| m.madvise(B + 6 * P, P, Advice::WIPEONFORK));
    expect(&mut m, Errno::EINVAL, "free on a file", |m| m.madvise(B + 6 * P, P, Advice::FREE));
    assert_eq!(m.madvise(B, 0, Advice::from_raw(1234)), Err(Errno::EINVAL), "advice is checked first");
    assert_eq!(m.madvise(B, 0, Advice::DONTNEED), Ok(()), "zero length succeeds");
}

#[test]
fn anon_name_errnos() {
    let (mut m, _, _) = base();
    expect(&mut m, Errno::EINVAL, "bad character", |m| m.set_anon_name(B, P, Some("a[b")));
    expect(&mut m, Errno::EINVAL, "non-printable", |m| m.set_anon_name(B, P, Some("a\tb")));
    let long = "x".repeat(80);
    expect(&mut m, Errno::EINVAL, "too long", |m| m.set_anon_name(B, P, Some(&long)));
    expect(&mut m, Errno::EBADF, "file-backed", |m| m.set_anon_name(B + 6 * P, P, Some("n")));
    expect(&mut m, Errno::EINVAL, "unaligned", |m| m.set_anon_name(B + 1, P, Some("n")));
    let mut plain = Mm::new(MmConfig::default());
    plain.mmap(B, P, RW, ANON | MapFlags::FIXED, None, 0).unwrap();
    expect(&mut plain, Errno::EINVAL, "kernel without CONFIG_ANON_VMA_NAME", |m| {
        m.set_anon_name(B, P, Some("n"))
    });
}

#[test]
fn brk_refusals_return_old_break() {
    let m = Mm::new(cfg());
    let start = m.brk_value();
    assert_eq!(m.brk(start - P), start, "below start_brk");
    assert_eq!(m.brk(start + 3 * P), start + 3 * P);
    assert_eq!(m.maps_text().matches("[heap]").count(), 1);
    m.mmap(start + 5 * P, P, RW, ANON | MapFlags::FIXED, None, 0).unwrap();

    assert_eq!(m.brk(start + 5 * P), start + 3 * P, "a page must stay free below the next VMA");
    assert_eq!(m.brk(start + 4 * P), start + 4 * P);
    assert_eq!(m.brk(start + P), start + P, "shrinking");
    m.validate().unwrap();
}

/// max_map_count: a new mapping is refused once map_count exceeds the limit, a split once it reaches it;
/// a refused call changes nothing.
#[test]
fn max_map_count_is_enforced() {
    let mut m = Mm::new(MmConfig { max_map_count: 4, ..cfg() });
    for i in 0..5 {
        m.mmap(B + 2 * i * P, P, RW, ANON | MapFlags::FIXED, None, 0).unwrap();
    }
    assert_eq!(m.map_count(), 5);
    expect(&mut m, Errno::ENOMEM, "new mapping over the limit", |m| m.mmap(B + 40 * P, P, RW, ANON, None, 0));
    m.munmap(B + 8 * P, P).unwrap();
    m.mmap(B + 20 * P, 3 * P, RW, ANON | MapFlags::FIXED, None, 0).unwrap();
    assert_eq!(m.map_count(), 5);
    expect(&mut m, Errno::ENOMEM, "munmap splitting a middle", |m| m.munmap(B + 21 * P, P));
    expect(&mut m, Errno::ENOMEM, "mprotect splitting", |m| m.mprotect(B + 20 * P, P, Prot::READ));
    expect(&mut m, Errno::EAGAIN, "madvise splitting (ENOMEM reported as EAGAIN)", |m| {
        m.madvise(B + 21 * P, P, Advice::DONTFORK)
    });
    expect(&mut m, Errno::ENOMEM, "mremap move near the limit", |m| {
        m.mremap(B + 20 * P, P, P, MremapFlags::MAYMOVE | MremapFlags::FIXED, B + 50 * P)
    });
    // munmap of a head or tail needs no extra VMA and is allowed at the limit.
    assert_eq!(m.munmap(B + 22 * P, P), Ok(()));
    m.validate().unwrap();
}
