//! The readers' two PROCMAP_QUERY paths agree: a query without a name buffer takes the lean path
//! (`ProcReader::query_lean`, a copy without the name cells), one with a name buffer or under a record hook
//! the general one (`with_next` and the full VMA copy). Over an address space of anonymous, named, file,
//! shared and read-only mappings with gaps, in every reader mode, for every address around them and every
//! value of the query flags (the invalid ones included), the lean answer equals the general path's with its
//! name left out. The maps text is the same in every mode too (the chunk walks: a cursor under the mmap
//! lock, per-VMA locks, lockless copies; read in pieces of several sizes).

use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, ProcFileKind, Prot, ReaderMode, VmFile};
use vmspace_proc::QueryRequest;

const P: u64 = PAGE_SIZE;
const A: u64 = 0x2000_0000_0000;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

fn space() -> Mm {
    let mm = Mm::new(MmConfig { anon_vma_name: true, ..MmConfig::default() });
    let f = VmFile::regular("/vmspace/f", 7, 64 * P);
    mm.mmap(A, 2 * P, Prot::READ, ANON, None, 0).unwrap();
    mm.mmap(A + 2 * P, 3 * P, Prot::RW, ANON, None, 0).unwrap();
    mm.set_anon_name(A + 2 * P, 3 * P, Some("named")).unwrap();
    mm.mmap(A + 6 * P, 2 * P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 2 * P).unwrap();
    mm.mmap(A + 8 * P, 2 * P, Prot::RX, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 8 * P).unwrap();
    mm.mmap(A + 12 * P, P, Prot::NONE, ANON, None, 0).unwrap();
    mm.mmap(A + 14 * P, 4 * P, Prot::RW, MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED, None, 0)
        .unwrap();
    // Pages in one VMA, so that it has an anon_vma (the full copy's path).
    mm.write(A + 2 * P, b"x").unwrap();
    mm.validate().unwrap();
    mm
}

#[test]
fn lean_and_general_query_paths_agree() {
    let mm = space();
    let hook = |_: &vmspace_mm::VmaSnapshot| {};
    let addrs: Vec<u64> =
        [0, A - 1].into_iter().chain((0..20).flat_map(|i| [A + i * P, A + i * P + 17])).collect();
    for mode in ReaderMode::ALL {
        let lean = mm.reader_with(mode);
        let general = mm.reader_with(mode).with_record_hook(&hook);
        for &addr in &addrs {
            for flags in 0..0x41u64 {
                let req = QueryRequest::new(flags, addr);
                let a = lean.query(&req);
                assert_eq!(a, general.query(&req), "{mode} flags {flags:#x} at {addr:#x}");
                let named = QueryRequest { vma_name_size: 4096, vma_name_addr: 0x1000, ..req };
                let n = lean.query(&named).map(|mut n| {
                    n.name = None;
                    n
                });
                assert_eq!(a, n, "{mode} flags {flags:#x} at {addr:#x}, with a name buffer");
            }
        }
    }
}

#[test]
fn maps_text_is_the_same_in_every_mode_and_read_size() {
    let mm = space();
    let whole = mm.maps_text();
    for mode in ReaderMode::ALL {
        assert_eq!(mm.reader_with(mode).maps(), whole, "{mode}");
        for piece in [1usize, 7, 50, 4096, 1 << 17] {
            let mut f = mm.reader_with(mode).open(ProcFileKind::Maps);
            let (mut out, mut buf) = (Vec::new(), vec![0u8; piece]);
            loop {
                let n = f.read(&mut buf);
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            assert_eq!(String::from_utf8(out).unwrap(), whole, "{mode}, reads of {piece} bytes");
        }
    }
    assert!(whole.contains("[anon:named]") && whole.contains("/vmspace/f"), "{whole}");
}
