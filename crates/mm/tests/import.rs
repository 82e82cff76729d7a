//! `Mm::import`: a description of a process's address space becomes an engine address space whose maps are
//! the description's, VMA for VMA, with no merging; bad descriptions are refused whole. (The live-process
//! side, `/proc/PID` read into a description and compared byte for byte, is in `crates/linux/tests/import.rs`.)

use vmspace_mm::import::{
    ImportedBacking, ImportedFile, ImportedFileKind, ImportedLayout, ImportedPkeys, ImportedVma,
};
use vmspace_mm::{Errno, MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, ReaderMode, VmFlags};

const P: u64 = PAGE_SIZE;
const RW: VmFlags = VmFlags::from_bits(0x1 | 0x2 | 0x10 | 0x20 | 0x40 | 0x10_0000);
const R: VmFlags = VmFlags::from_bits(0x1 | 0x10 | 0x20 | 0x40);

fn anon(start: u64, end: u64, flags: VmFlags, anon_vma: bool) -> ImportedVma {
    ImportedVma {
        start,
        end,
        flags,
        pgoff: start / P,
        backing: ImportedBacking::Anonymous,
        anon_name: None,
        anon_vma,
    }
}

fn file(path: &str, inode: u64, size: u64) -> ImportedFile {
    ImportedFile {
        path: path.into(),
        deleted: false,
        dev_major: 0xfe,
        dev_minor: 0,
        inode,
        size,
        kind: ImportedFileKind::Regular,
        writable: false,
        area: vmspace_mm::FileArea::Thp,
    }
}

/// A small process: a two-segment binary, its heap, an anonymous region split by protection, a deleted
/// file, a memfd, shared anonymous memory, the vDSO and the stack.
fn layout() -> ImportedLayout {
    let bin = 0x5555_5555_4000;
    let heap = 0x5555_5600_0000;
    let base = 0x7f00_0000_0000;
    let stack = 0x7ffd_0000_0000;
    let f = |start, end, flags, pgoff, i| ImportedVma {
        start,
        end,
        flags,
        pgoff,
        backing: ImportedBacking::File(i),
        anon_name: None,
        anon_vma: false,
    };
    let shared = VmFlags::from_bits(0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80);
    let mut memfd = file("/memfd:buf", 7, 8 * P);
    memfd.deleted = true;
    memfd.dev_major = 0;
    memfd.dev_minor = 1;
    memfd.kind = ImportedFileKind::Shmem;
    memfd.area = vmspace_mm::FileArea::Shmem { huge: false };
    memfd.writable = true;
    let mut gone = file("/tmp/gone", 9, 3 * P);
    gone.deleted = true;
    let mut zero = file("/dev/zero", 11, 4 * P);
    zero.deleted = true;
    zero.dev_major = 0;
    zero.dev_minor = 1;
    zero.kind = ImportedFileKind::SharedAnonymous;
    zero.writable = true;
    ImportedLayout {
        vmas: vec![
            f(bin, bin + 2 * P, R, 0, 0),
            f(bin + 2 * P, bin + 3 * P, RW, 2, 0),
            anon(heap, heap + 33 * P, RW, true),
            // Two identical anonymous VMAs side by side: the kernel kept them apart, so must the engine.
            anon(base, base + 4 * P, RW, true),
            anon(base + 4 * P, base + 8 * P, RW, true),
            anon(base + 8 * P, base + 9 * P, R, false),
            f(base + 16 * P, base + 19 * P, R, 0, 1),
            f(base + 20 * P, base + 28 * P, shared, 0, 2),
            f(base + 30 * P, base + 34 * P, shared, 0, 3),
            ImportedVma {
                backing: ImportedBacking::Special("[vvar]".into()),
                pgoff: 0,
                ..anon(base + 40 * P, base + 44 * P, R | VmFlags::PFNMAP | VmFlags::IO, false)
            },
            ImportedVma {
                backing: ImportedBacking::Special("[vdso]".into()),
                pgoff: 0,
                ..anon(base + 44 * P, base + 46 * P, R | VmFlags::EXEC | VmFlags::DONTEXPAND, false)
            },
            anon(stack, stack + 33 * P, RW | VmFlags::GROWSDOWN, true),
        ],
        files: vec![file("/usr/bin/prog", 5, 3 * P - 100), gone, memfd, zero],
        mmap_base: base + 64 * P,
        start_stack: stack + 32 * P + 0x120,
        start_brk: heap,
        brk: heap + 33 * P,
        stack_rlimit: 8 << 20,
        stack_guard_gap: 256 * P,
        locked_vm: None,
        pkeys: None,
        gate_area: None,
        thp_disabled: false,
    }
}

fn expected_maps() -> String {
    let bin = 0x5555_5555_4000u64;
    let heap = 0x5555_5600_0000u64;
    let base = 0x7f00_0000_0000u64;
    let stack = 0x7ffd_0000_0000u64;
    let pad = |s: String| format!("{s:<73}");
    let mut m = String::new();
    let mut line = |start: u64, end: u64, perms: &str, off: u64, dev: &str, ino: u64, name: &str| {
        let head = format!("{start:012x}-{end:012x} {perms} {off:08x} {dev} {ino} ");
        if name.is_empty() {
            m.push_str(&head);
        } else {
            m.push_str(&pad(head));
            m.push_str(name);
        }
        m.push('\n');
    };
    line(bin, bin + 2 * P, "r--p", 0, "fe:00", 5, "/usr/bin/prog");
    line(bin + 2 * P, bin + 3 * P, "rw-p", 2 * P, "fe:00", 5, "/usr/bin/prog");
    line(heap, heap + 33 * P, "rw-p", 0, "00:00", 0, "[heap]");
    line(base, base + 4 * P, "rw-p", 0, "00:00", 0, "");
    line(base + 4 * P, base + 8 * P, "rw-p", 0, "00:00", 0, "");
    line(base + 8 * P, base + 9 * P, "r--p", 0, "00:00", 0, "");
    line(base + 16 * P, base + 19 * P, "r--p", 0, "fe:00", 9, "/tmp/gone (deleted)");
    line(base + 20 * P, base + 28 * P, "rw-s", 0, "00:01", 7, "/memfd:buf (deleted)");
    line(base + 30 * P, base + 34 * P, "rw-s", 0, "00:01", 11, "/dev/zero (deleted)");
    line(base + 40 * P, base + 44 * P, "r--p", 0, "00:00", 0, "[vvar]");
    line(base + 44 * P, base + 46 * P, "r-xp", 0, "00:00", 0, "[vdso]");
    line(stack, stack + 33 * P, "rw-p", 0, "00:00", 0, "[stack]");
    m
}

#[test]
fn an_imported_layout_reads_back_line_for_line() {
    let l = layout();
    let mm = Mm::import(&MmConfig::default(), &l).expect("a valid layout");
    mm.validate().expect("invariants hold");
    for mode in ReaderMode::ALL {
        assert_eq!(mm.reader_with(mode).maps(), expected_maps(), "{mode}");
    }
    assert_eq!(mm.maps_text(), expected_maps());
    // Flags as given, every one.
    let got: Vec<VmFlags> = mm.vmas().map(|v| v.flags).collect();
    let want: Vec<VmFlags> = l.vmas.iter().map(|v| v.flags).collect();
    assert_eq!(got, want);
    assert_eq!(mm.brk_value(), l.brk);
    assert_eq!(mm.config().mmap_base, l.mmap_base);
    // The two anonymous neighbours share one anon_vma (a split would have left them so) but stay apart.
    let a = mm.vma_at(0x7f00_0000_0000).unwrap();
    let b = mm.vma_at(0x7f00_0000_0000 + 4 * P).unwrap();
    assert!(a.anon_vma_id.is_some() && a.anon_vma_id == b.anon_vma_id);
    assert!(mm.vma_at(0x7f00_0000_0000 + 8 * P).unwrap().anon_vma_id.is_none());
    // The file VMAs of one file share one VmFile.
    let f0 = mm.vma_at(0x5555_5555_4000).unwrap().file.unwrap();
    let f1 = mm.vma_at(0x5555_5555_4000 + 2 * P).unwrap().file.unwrap();
    assert!(std::sync::Arc::ptr_eq(&f0, &f1));
    assert_eq!(f0.size(), 3 * P - 100);
}

#[test]
fn later_calls_work_on_the_imported_space() {
    let l = layout();
    let mm = Mm::import(&MmConfig::default(), &l).unwrap();
    // Top-down below mmap_base: the highest gap under it that fits (above the vDSO).
    let a = mm.mmap(0, 2 * P, Prot::RW, MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0).unwrap();
    assert_eq!(a, l.mmap_base - 2 * P);
    // The two kept-apart neighbours stay apart under a call that changes nothing (mprotect to the flags they
    // have returns early), and merge once a call changes one back (they share their anon_vma).
    let base = 0x7f00_0000_0000;
    mm.mprotect(base, 8 * P, Prot::RW).unwrap();
    assert_eq!(mm.vma_at(base).map(|v| (v.start, v.end)), Some((base, base + 4 * P)));
    mm.mprotect(base, 4 * P, Prot::READ).unwrap();
    mm.mprotect(base, 4 * P, Prot::RW).unwrap();
    assert_eq!(mm.vma_at(base).map(|v| (v.start, v.end)), Some((base, base + 8 * P)));
    // brk grows the heap in place.
    let heap_end = l.brk;
    assert_eq!(mm.brk(heap_end + 4 * P), heap_end + 4 * P);
    assert_eq!(mm.vma_at(heap_end).map(|v| v.start), Some(0x5555_5600_0000));
    mm.validate().unwrap();
}

#[test]
fn bad_descriptions_are_refused_whole() {
    let cfg = MmConfig::default();
    let bad = |f: &dyn Fn(&mut ImportedLayout), want: Errno| {
        let mut l = layout();
        f(&mut l);
        assert_eq!(Mm::import(&cfg, &l).err(), Some(want), "{l:?}");
    };
    bad(&|l| l.vmas[3].start += 1, Errno::EINVAL);
    bad(&|l| l.vmas[3].end = l.vmas[3].start, Errno::EINVAL);
    bad(&|l| l.vmas.swap(3, 4), Errno::EINVAL);
    bad(&|l| l.vmas[4].start -= P, Errno::EINVAL);
    bad(&|l| l.vmas.last_mut().unwrap().end = vmspace_mm::TASK_SIZE + P, Errno::EINVAL);
    bad(&|l| l.vmas[0].backing = ImportedBacking::File(9), Errno::EINVAL);
    bad(&|l| l.vmas[7].anon_vma = true, Errno::EINVAL);
    bad(&|l| l.vmas[3].flags |= VmFlags::MAYSHARE, Errno::EINVAL);
    bad(&|l| l.vmas[3].flags |= VmFlags::from_pkey(3), Errno::EINVAL);
    bad(&|l| l.vmas[6].anon_name = Some("x".into()), Errno::EINVAL);
    bad(&|l| l.vmas[3].flags |= VmFlags::HUGETLB, Errno::EOPNOTSUPP);
    bad(&|l| l.brk = l.start_brk - P, Errno::EINVAL);
    bad(&|l| l.mmap_base += 1, Errno::EINVAL);
    bad(&|l| l.pkeys = Some(ImportedPkeys { allocated: 1, execute_only: None }), Errno::EINVAL);
    let few = MmConfig { max_map_count: 3, ..MmConfig::default() };
    assert_eq!(Mm::import(&few, &layout()).err(), Some(Errno::ENOMEM));
    // Protection keys with PKU: the keys of the VMAs must be allocated.
    let pku = MmConfig { pku: true, ..MmConfig::default() };
    let mut l = layout();
    l.vmas[3].flags |= VmFlags::from_pkey(3);
    l.pkeys = Some(ImportedPkeys { allocated: 1, execute_only: None });
    assert_eq!(Mm::import(&pku, &l).err(), Some(Errno::EINVAL));
    l.pkeys = Some(ImportedPkeys { allocated: 1 | 1 << 3, execute_only: None });
    let mm = Mm::import(&pku, &l).unwrap();
    assert_eq!(mm.pkey_free(3), Ok(()));
    assert_eq!(mm.pkey_free(3), Err(Errno::EINVAL));
    mm.validate().unwrap();
}

#[test]
fn named_anonymous_memory_and_locked_vmas() {
    let mut l = layout();
    l.vmas[5].anon_name = Some("cache".into());
    l.vmas[8].anon_name = Some("ring".into());
    l.vmas[5].flags |= VmFlags::LOCKED;
    let mm = Mm::import(&MmConfig::default(), &l).unwrap();
    let maps = mm.reader().maps();
    assert!(maps.contains("r--p 00000000 00:00 0                          [anon:cache]\n"), "{maps}");
    assert!(maps.contains("rw-s 00000000 00:01 11                         [anon_shmem:ring]\n"), "{maps}");
    assert_eq!(mm.locked_vm(), 1);
    l.locked_vm = Some(10);
    assert_eq!(Mm::import(&MmConfig::default(), &l).unwrap().locked_vm(), 10);
}

/// The gate area ends `maps` and `smaps` (a record of zeros, `VmFlags: ex`), whatever the chunking, and is
/// not counted as a VMA.
#[test]
fn the_gate_area_ends_maps_and_smaps() {
    use vmspace_mm::ProcFileKind;
    let gate = "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n";
    for vmas in [12usize, 200] {
        let mut l = layout();
        // Enough VMAs (every other page read-only) to fill several chunks.
        let run = 0x6000_0000_0000u64;
        for i in 0..vmas as u64 {
            let flags = if i % 2 == 0 { RW } else { R };
            l.vmas.insert(3 + i as usize, anon(run + i * P, run + (i + 1) * P, flags, false));
        }
        l.gate_area = Some(VmFlags::EXEC);
        let mm = Mm::import(&MmConfig::default(), &l).unwrap();
        assert_eq!(mm.map_count() as usize, l.vmas.len());
        let all = mm.maps_text();
        assert!(all.ends_with(&format!("[stack]\n{gate}")), "{all}");
        for mode in ReaderMode::ALL {
            let r = mm.reader_with(mode);
            assert_eq!(r.maps(), all, "{mode}");
            // Small reads: the same bytes.
            for piece in [1usize, 7, 100, 4096] {
                let mut f = r.open(ProcFileKind::Maps);
                let mut got = Vec::new();
                let mut buf = vec![0u8; piece];
                loop {
                    let n = f.read(&mut buf);
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                assert_eq!(String::from_utf8(got).unwrap(), all, "{mode} in pieces of {piece}");
            }
            let smaps = vmspace_proc::parse_smaps(&r.smaps()).unwrap();
            let last = smaps.last().unwrap();
            assert_eq!(last.header.render(), gate);
            assert_eq!((last.size_kb, last.stats.rss), (4, 0));
            assert_eq!(last.vm_flags.mnemonics, ["ex"]);
            assert_eq!(smaps.len(), l.vmas.len() + 1);
        }
    }
}
