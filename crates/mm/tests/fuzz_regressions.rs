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

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions").join(target);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
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
