//! The differential gate: generated op scripts run on the engine and on the live kernel must produce the same
//! output (every call's result and the arena's maps).
//!
//! * `generated_scripts_match_the_kernel`: `VMSPACE_DIFF_SCRIPTS` scripts (default 2,000) of
//!   `VMSPACE_DIFF_CALLS` calls (default 60) from the script crate's seeded generator, seeds
//!   `VMSPACE_DIFF_SEED..` (default 0), on a grid of `VMSPACE_DIFF_GRID` pages (the generator's default),
//!   split over two threads (the kernel runner forks a child per script).
//!   Every difference is minimised (delta debugging: drop chunks of lines while the difference persists) and
//!   printed as a ready-to-commit regression script; the test fails on any difference.
//! * `generated_fork_scripts_match_the_kernel`: the same with `fork` enabled (a smaller batch).
//! * `regression_scripts_match_the_kernel`: every `scripts/regress/*.script` (each a difference once found
//!   and since fixed) must match.
//!
//! The engine runs with the host's configuration (`MmConfig::host`), as the semantics contract requires.

use std::path::{Path, PathBuf};
use std::time::Instant;

use vmspace_linux::replay::replay_kernel;
use vmspace_mm::space::{EngineTarget, MmConfig};
use vmspace_proc::{MapsLine, MapsName};
use vmspace_script::{Arena, Entry, GenConfig, Output, Script, compare, generate, run};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn engine(script: &Script, cfg: &MmConfig) -> Output {
    // The engine's invariants are checked after every call.
    let mut t = EngineTarget::validating(cfg.clone());
    run(script, &mut t)
}

/// Shared anonymous mappings show the inode of their shmem object, which the kernel numbers from a global
/// counter: both sides' inodes are renumbered in order of first appearance (1, 2, ...) before comparing.
fn canon_shmem(out: &mut Output) {
    let mut seen: Vec<u64> = Vec::new();
    for e in &mut out.entries {
        let Entry::Maps(lines) = e else { continue };
        for l in lines.iter_mut() {
            let Ok(mut m) = l.parse::<MapsLine>() else { continue };
            let is_shmem = matches!(&m.name, Some(MapsName::Path { path, deleted: true }) if path == "/dev/zero")
                || matches!(&m.name, Some(MapsName::AnonShmem(_)));
            if !is_shmem {
                continue;
            }
            let idx = match seen.iter().position(|&i| i == m.inode) {
                Some(i) => i,
                None => {
                    seen.push(m.inode);
                    seen.len() - 1
                }
            };
            m.inode = idx as u64 + 1;
            *l = m.to_string();
        }
    }
}

/// The first difference between the engine and the kernel on `script`, rendered, or `None`.
fn difference(script: &Script, cfg: &MmConfig) -> Option<String> {
    let k = match replay_kernel(script) {
        Ok(o) => o,
        Err(e) => return Some(format!("kernel runner failed: {e}")),
    };
    let mut k = k;
    canon_shmem(&mut k);
    let mut e = engine(script, cfg);
    canon_shmem(&mut e);
    compare(&e, &k, Arena::default(), ("engine", "kernel")).map(|d| d.to_string())
}

/// Delta debugging: removes chunks of lines (never `file` declarations that later lines need: a script that
/// no longer parses is skipped) while the engine and the kernel still differ.
fn minimise(script: &Script, cfg: &MmConfig) -> Script {
    let mut lines: Vec<String> = script.to_text().lines().map(str::to_string).collect();
    let still_differs = |ls: &[String]| -> bool {
        let text = ls.join("\n") + "\n";
        match Script::parse(&text) {
            Ok(s) => difference(&s, cfg).is_some(),
            Err(_) => false,
        }
    };
    let mut chunk = lines.len().div_ceil(2).max(1);
    loop {
        let mut i = 0;
        let mut removed_any = false;
        while i < lines.len() {
            let end = (i + chunk).min(lines.len());
            let mut cand = lines.clone();
            cand.drain(i..end);
            if !cand.is_empty() && still_differs(&cand) {
                lines = cand;
                removed_any = true;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 && !removed_any {
            break;
        }
        if !removed_any {
            chunk = (chunk / 2).max(1);
        }
    }
    Script::parse(&(lines.join("\n") + "\n")).expect("minimised script parses")
}

fn run_batch(first_seed: u64, count: u64, gen_cfg: GenConfig) {
    let cfg = MmConfig::host();
    let t0 = Instant::now();
    let threads = 2u64;
    let failures: Vec<(u64, String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let cfg = cfg.clone();
                s.spawn(move || {
                    let mut out = Vec::new();
                    let mut seed = first_seed + t;
                    while seed < first_seed + count {
                        let script = generate(seed, &gen_cfg);
                        if let Some(d) = difference(&script, &cfg) {
                            let min = minimise(&script, &cfg);
                            let md = difference(&min, &cfg).unwrap_or(d);
                            out.push((seed, min.to_text(), md));
                            if out.len() >= 3 {
                                break;
                            }
                        }
                        seed += threads;
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("worker")).collect()
    });
    let el = t0.elapsed();
    eprintln!(
        "differential: {count} scripts x {} calls (seeds {first_seed}..{}), fork={}, {:.1}s, {} different",
        gen_cfg.calls,
        first_seed + count,
        gen_cfg.fork,
        el.as_secs_f64(),
        failures.len()
    );
    if !failures.is_empty() {
        let mut msg = String::new();
        for (seed, text, d) in &failures {
            msg.push_str(&format!("--- seed {seed}: minimised script:\n{text}--- difference:\n{d}\n"));
        }
        panic!("{} scripts differ from the kernel\n{msg}", failures.len());
    }
}

#[test]
fn generated_scripts_match_the_kernel() {
    let count = env_u64("VMSPACE_DIFF_SCRIPTS", 2000);
    let calls = env_u64("VMSPACE_DIFF_CALLS", 60) as usize;
    let seed = env_u64("VMSPACE_DIFF_SEED", 0);
    let grid_pages = env_u64("VMSPACE_DIFF_GRID", GenConfig::default().grid_pages);
    run_batch(seed, count, GenConfig { calls, grid_pages, ..GenConfig::default() });
}

#[test]
fn generated_fork_scripts_match_the_kernel() {
    let count = env_u64("VMSPACE_DIFF_FORK_SCRIPTS", 300);
    let calls = env_u64("VMSPACE_DIFF_CALLS", 60) as usize;
    let seed = env_u64("VMSPACE_DIFF_SEED", 0) + 1_000_000;
    let grid_pages = env_u64("VMSPACE_DIFF_GRID", GenConfig::default().grid_pages);
    run_batch(seed, count, GenConfig { calls, fork: true, grid_pages, ..GenConfig::default() });
}

fn regress_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/regress")
}

#[test]
fn regression_scripts_match_the_kernel() {
    let cfg = MmConfig::host();
    let mut n = 0;
    let mut bad = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(regress_dir())
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for p in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "script")) {
        let text = std::fs::read_to_string(p).expect("read regression script");
        let script = Script::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        n += 1;
        if let Some(d) = difference(&script, &cfg) {
            bad.push(format!("{}:\n{d}", p.display()));
        }
    }
    eprintln!("regression scripts: {n} replayed, {} different", bad.len());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
