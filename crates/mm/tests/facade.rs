//! The public facade, used as a client would (crate-root items only): lookups and iteration return
//! `VmaSnapshot` values, and the typed call arguments carry raw bits through to the kernel's checks.

use vmspace_mm::{Advice, Errno, MapFlags, Mm, MmConfig, MremapFlags, PAGE_SIZE, Prot, VmFile, VmFlags};

const P: u64 = PAGE_SIZE;
const B: u64 = 0x2000_0000_0000;
const AF: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

#[test]
fn snapshots_from_lookups_and_iteration() {
    let m = Mm::new(MmConfig { anon_vma_name: true, ..MmConfig::default() });
    let f = VmFile::regular("/data/file", 7, 8 * P);
    m.mmap(B, 2 * P, Prot::RW, AF, None, 0).unwrap();
    m.mmap(B + 4 * P, 2 * P, Prot::READ, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 2 * P).unwrap();
    m.set_anon_name(B, P, Some("first")).unwrap();
    m.validate().unwrap();

    let a = m.vma_at(B).expect("mapped");
    assert_eq!((a.start, a.end, a.anon_name.as_deref()), (B, B + P, Some("first")));
    assert!(a.flags.contains(VmFlags::READ | VmFlags::WRITE) && !a.flags.contains(VmFlags::SHARED));
    assert!(a.file.is_none());
    // find_vma from a hole gives the next VMA; vma_at gives nothing.
    assert!(m.vma_at(B + 3 * P).is_none());
    let file_vma = m.find_vma(B + 3 * P).expect("a VMA above");
    assert_eq!((file_vma.start, file_vma.pgoff), (B + 4 * P, 2));
    assert_eq!(file_vma.file.as_ref().map(|f| (f.name.as_str(), f.inode)), Some(("/data/file", 7)));
    assert!(file_vma.flags.contains(VmFlags::MAYSHARE));
    assert!(m.find_vma(B + 6 * P).is_none());

    let all: Vec<_> = m.vmas().collect();
    assert_eq!(
        all.iter().map(|v| (v.start, v.end)).collect::<Vec<_>>(),
        [(B, B + P), (B + P, B + 2 * P), (B + 4 * P, B + 6 * P)]
    );
    // A snapshot is a value: it outlives the VMA it was taken from.
    m.munmap(B, 6 * P).unwrap();
    m.validate().unwrap();
    assert_eq!(all[2].file.as_ref().map(|f| f.inode), Some(7));
    assert_eq!(m.vmas().count(), 0);
}

#[test]
fn raw_bits_reach_the_checks() {
    let m = Mm::new(MmConfig::default());
    let f = VmFile::regular("/data/file", 1, 4 * P);
    let unknown = MapFlags::from_bits_retain(0x200);
    // MAP_SHARED drops flags outside LEGACY_MAP_MASK; MAP_SHARED_VALIDATE refuses them.
    let fixed = MapFlags::FIXED | unknown;
    assert_eq!(m.mmap(B, P, Prot::READ, MapFlags::SHARED | fixed, Some(&f), 0), Ok(B));
    assert_eq!(
        m.mmap(B + P, P, Prot::READ, MapFlags::SHARED_VALIDATE | fixed, Some(&f), 0),
        Err(Errno::EOPNOTSUPP)
    );
    // PROT_SEM is accepted and ignored; an unknown PROT bit is EINVAL.
    m.mmap(B + 2 * P, 2 * P, Prot::RW, AF, None, 0).unwrap();
    assert_eq!(m.mprotect(B + 2 * P, P, Prot::READ | Prot::SEM), Ok(()));
    assert_eq!(m.mprotect(B + 2 * P, P, Prot::from_bits_retain(0x10)), Err(Errno::EINVAL));
    // Unknown mremap flags and advice values are EINVAL.
    assert_eq!(m.mremap(B + 2 * P, P, P, MremapFlags::from_bits_retain(0x80), 0), Err(Errno::EINVAL));
    assert_eq!(m.madvise(B + 2 * P, P, Advice::from_raw(-1)), Err(Errno::EINVAL));
    assert_eq!(m.madvise(B + 2 * P, P, Advice::DONTFORK), Ok(()));
    assert!(m.vma_at(B + 2 * P).unwrap().flags.contains(VmFlags::DONTCOPY));
    m.validate().unwrap();
}
