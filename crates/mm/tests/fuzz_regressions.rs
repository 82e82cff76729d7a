//! Replays the fuzz regressions on stable Rust: every input saved under `fuzz/regressions/TARGET/` (a crash
//! or property failure the cargo-fuzz target `TARGET` once found, minimised) goes through the same check
//! the fuzz target runs (`fuzz/src/`, compiled here as plain modules), which panics if the bug is back.
//! cargo-fuzz itself (nightly, libFuzzer) is not needed: `fuzz/README.md`.

#[path = "../../../fuzz/src/engine.rs"]
#[allow(dead_code)]
mod engine;
#[path = "../../../fuzz/src/query.rs"]
#[allow(dead_code)]
mod query;
#[path = "../../../fuzz/src/script.rs"]
#[allow(dead_code)]
mod script;

use std::path::{Path, PathBuf};

use vmspace_mm::space::Errno;

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions").join(target);
    // A target without saved failures has no directory (git keeps no empty ones).
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    v.sort();
    v
}

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let files = inputs(target);
    for f in &files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        eprintln!("replaying {}", f.display());
        check(&data);
    }
    files.len()
}

#[test]
fn script_regressions() {
    assert!(replay("script", script::check) > 0, "fuzz/regressions/script is empty");
}

#[test]
fn engine_regressions() {
    replay("engine", engine::check);
}

/// Hand-written engine inputs through the same checks: the partial-progress exceptions (mprotect over a
/// hole, madvise at the map-count limit, `MREMAP_FIXED`), a failed call that must change nothing (an
/// injected allocation failure, a `MAP_FIXED_NOREPLACE` clash), fork into the child, names, the mlock family,
/// msync and guard regions; and the saved input `gup-write-past-eof-prepares-anon-vma` as the calls it
/// decoded to before the call list grew (the bytes now decode to other calls, still replayed above).
#[test]
fn engine_seed_sequences() {
    use engine::{Addr, Call, Input, Len};
    let p = Addr::Page;
    let n = Len::Pages;
    let anon_fixed =
        |page, pages, flags| Call::Mmap { addr: p(page), len: n(pages), prot: 3, flags, file: None };
    let cases = [
        // mprotect over [0, 8) with a hole at [4, 6): changes [0, 4), then ENOMEM.
        Input {
            cfg: 0,
            calls: vec![
                anon_fixed(0, 4, 0b0000_0110),
                anon_fixed(6, 2, 0b0000_0110),
                Call::Mprotect { addr: p(0), len: n(8), prot: 1 },
            ],
        },
        // max_map_count 6: the middle of a VMA needs two splits; the second is refused.
        Input {
            cfg: 0b0000_0001,
            calls: (0..5)
                .map(|i| anon_fixed(2 * i, 1, 0b0000_0110))
                .chain([anon_fixed(20, 8, 0b0000_0110), Call::Madvise { addr: p(22), len: n(2), advice: 2 }])
                .collect(),
        },
        // Injected allocation failure, then a FIXED_NOREPLACE clash, then MREMAP_FIXED over a mapping.
        Input {
            cfg: 0,
            calls: vec![
                anon_fixed(0, 4, 0b0000_0110),
                Call::InjectAlloc(Some(0)),
                Call::Mprotect { addr: p(1), len: n(1), prot: 1 },
                Call::InjectAlloc(None),
                anon_fixed(2, 4, 0b0000_1010),
                anon_fixed(10, 4, 0b0000_0110),
                Call::Mremap { addr: p(0), old_len: n(2), new_len: n(2), flags: 0b011, new_addr: p(11) },
            ],
        },
        // `fuzz/regressions/engine/gup-write-past-eof-prepares-anon-vma` as it decoded (its first mapping and the
        // failing GUP write): a private file mapping 3 pages into a 3.5-page file; the write past the end fails
        // after preparing the anon_vma, which the check must accept.
        Input {
            cfg: 0x23,
            calls: vec![
                Call::Mmap { addr: p(0), len: n(45), prot: 7, flags: 14, file: Some((true, 3)) },
                Call::Gup { addr: p(3), write: true },
            ],
        },
        // mlock over a hole (partial), PROT_NONE mlock (locked, then ENOMEM), mlock2 with an unknown flag,
        // mlockall(MCL_FUTURE) then a new mapping, msync with MS_INVALIDATE on it (EBUSY), munlockall; a guard
        // region through madvise (GUARD_INSTALL is index 25), then an access to it.
        Input {
            cfg: 0b0000_1000,
            calls: vec![
                anon_fixed(0, 2, 0b0000_0110),
                anon_fixed(3, 2, 0b0000_0110),
                Call::Mlock { addr: p(0), len: n(5), flags: None },
                Call::Mmap { addr: p(8), len: n(2), prot: 0, flags: 0b0000_0110, file: None },
                Call::Mlock { addr: p(8), len: n(2), flags: None },
                Call::Mlock { addr: p(8), len: n(2), flags: Some(0b10) },
                Call::Mlockall(Some(0b010)),
                anon_fixed(12, 2, 0b0000_0110),
                Call::Msync { addr: p(12), len: n(2), flags: 0b010 },
                Call::Mlockall(None),
                Call::Madvise { addr: p(13), len: n(1), advice: 25 },
                Call::Gup { addr: p(13), write: false },
                Call::Munlock { addr: p(0), len: n(16) },
            ],
        },
        // A file mapping, a write fault past the file's end, fork into the child, brk, names on.
        Input {
            cfg: 0b0000_0010,
            calls: vec![
                Call::Mmap { addr: p(0), len: n(8), prot: 3, flags: 0b0000_0110, file: Some((true, 0)) },
                Call::Fault { addr: p(7), write: true },
                Call::Name { addr: p(0), len: n(8), name: Some(0) },
                Call::Brk { addr: p(44) },
                Call::Fork { child: true },
                Call::Munmap { addr: p(2), len: n(1) },
                Call::Gup { addr: p(0), write: false },
            ],
        },
    ];
    let results: Vec<Vec<Option<Errno>>> = cases.iter().map(engine::run).collect();
    assert_eq!(results[0], [None, None, Some(Errno::ENOMEM)]);
    assert_eq!(results[1].last(), Some(&Some(Errno::EAGAIN)));
    assert_eq!(results[2], [None, None, Some(Errno::ENOMEM), None, Some(Errno::EEXIST), None, None]);
    // Naming a file mapping is EBADF (and changes nothing).
    assert_eq!(results[3], [None, Some(Errno::EFAULT)]);
    let e = Some(Errno::ENOMEM);
    let want = [None, None, e, None, e, Some(Errno::EINVAL), None, None, Some(Errno::EBUSY), None, None];
    assert_eq!(results[4][..11], want);
    assert_eq!(results[4][11..], [Some(Errno::EFAULT), e]);
    // The write fault past the file's end is a SIGBUS (EIO).
    assert_eq!(results[5], [None, Some(Errno::EIO), Some(Errno::EBADF), None, None, None, None]);
}

#[test]
fn procmap_query_regressions() {
    replay("procmap_query", query::check);
}

/// The two PROCMAP_QUERY model errors found while writing the target's oracle from `do_procmap_query`
/// (`crates/proc/src/query.rs` has their unit tests): fields past `size` were checked although the kernel
/// reads them as zero, and a name buffer larger than `PATH_MAX` was taken at its word.
#[test]
fn procmap_query_model_fixes() {
    use query::{Input, QAddr, Size, VmaDesc, Word};
    let vma = |name_len| VmaDesc { gap: 0, pages: 0, perms: 1, file: true, name_len };
    let base = Input {
        size: Size::Current,
        flags: Ok(0),
        addr: QAddr::Near(0, 0, 0),
        vma_name_size: 0,
        vma_name_addr: Word::Zero,
        build_id_size: 0,
        build_id_addr: Word::Zero,
        tail: Vec::new(),
        base: 16,
        vmas: vec![vma(5)],
    };
    // An old 24-byte struct with a stale name size past its end: the kernel ignores it.
    let old = Input { size: Size::Small(24), vma_name_size: 64, ..base.clone() };
    assert_eq!(query::check_input(&old), Ok((0, 0)));
    // A 4096-byte name (with its NUL 4097) does not fit the kernel's PATH_MAX buffer however large the caller's.
    let long = Input {
        vma_name_size: u32::MAX,
        vma_name_addr: Word::Small(8),
        vmas: vec![vma(4096)],
        ..base.clone()
    };
    assert_eq!(query::check_input(&long), Err(36));
    let fits =
        Input { vma_name_size: u32::MAX, vma_name_addr: Word::Small(8), vmas: vec![vma(4095)], ..base };
    assert_eq!(query::check_input(&fits), Ok((0, 4096)));
}
