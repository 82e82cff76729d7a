//! Every figure traceable to its build: `vmspace --version` prints the commit, the tree's state and the profile;
//! every command's JSON records the provenance (version, commit, dirty flag, profile, opt-level, debug
//! assertions, compiler, target, CPU model and flags) with plausible values; and a command that times something
//! refuses to run from a debug build unless `--force` or `VMSPACE_ALLOW_DEBUG_BUILD=1` lets it, then warns.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const ALLOW: &str = "VMSPACE_ALLOW_DEBUG_BUILD";

/// The binary with the environment variable that lets a debug build time things removed.
fn strict() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vmspace"));
    c.env_remove(ALLOW);
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("run vmspace")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `git rev-parse HEAD` of the workspace, when it is a git checkout (what the build script recorded).
fn head_commit() -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().ok()?;
    let git = |args: &[&str]| {
        let o = Command::new("git").args(args).current_dir(&root).output().ok()?;
        o.status.success().then(|| text(&o.stdout).trim().to_string())
    };
    let top = Path::new(&git(&["rev-parse", "--show-toplevel"])?).canonicalize().ok()?;
    if top != root {
        return None;
    }
    git(&["rev-parse", "HEAD"])
}

fn is_commit_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a set's provenance; returns its build.
fn check_provenance(set: &Value) -> Value {
    let p = &set["provenance"];
    assert!(p.is_object(), "no provenance: {set}");
    let b = &p["build"];
    assert_eq!(b["version"], env!("CARGO_PKG_VERSION"));
    let commit = b["commit"].as_str().expect("commit");
    assert!(is_commit_id(commit) || commit == "unknown", "{commit}");
    if let Some(head) = head_commit() {
        assert_eq!(commit, head, "the build records the checkout's HEAD");
    }
    if commit == "unknown" {
        assert!(b["dirty"].is_null(), "{b}");
    } else {
        assert!(b["dirty"].is_boolean(), "{b}");
    }
    assert_eq!(b["debug_assertions"].as_bool(), Some(cfg!(debug_assertions)), "{b}");
    assert_eq!(b["profile"], if cfg!(debug_assertions) { "debug" } else { "release" }, "{b}");
    let opt = b["opt_level"].as_str().expect("opt_level");
    assert!(["0", "1", "2", "3", "s", "z"].contains(&opt), "{opt}");
    assert!(b["rustc"].as_str().is_some_and(|r| r.starts_with("rustc 1.")), "{b}");
    assert!(b["target"].as_str().is_some_and(|t| t.contains("linux")), "{b}");
    // The CPU as /proc/cpuinfo tells it (crates/host).
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let line = |key: &str| {
        cpuinfo
            .lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    assert_eq!(p["cpu"]["model"].as_str().map(str::to_string), line("model name"), "{p}");
    assert_eq!(p["cpu"]["flags"].as_str().map(str::to_string), Some(line("flags").unwrap_or_default()));
    b.clone()
}

fn is_debug(build: &Value) -> bool {
    build["debug_assertions"] == true || build["opt_level"] == "0"
}

#[test]
fn version_prints_the_commit_the_tree_and_the_profile() {
    let out = run(strict().arg("--version"));
    assert_eq!(out.status.code(), Some(0));
    let v = text(&out.stdout);
    assert!(v.starts_with(&format!("vmspace {}\n", env!("CARGO_PKG_VERSION"))), "{v}");
    let commit = v.lines().find_map(|l| l.strip_prefix("commit:")).expect("a commit line").trim();
    assert!(is_commit_id(commit) || commit == "unknown", "{v}");
    if let Some(head) = head_commit() {
        assert_eq!(commit, head, "{v}");
        assert!(v.contains("tree:     clean") || v.contains("tree:     dirty"), "{v}");
    }
    let profile = if cfg!(debug_assertions) { "debug profile" } else { "release profile" };
    assert!(v.contains(profile) && v.contains("opt-level ") && v.contains("rustc 1."), "{v}");
    // -V: one line with the short commit.
    let short = text(&run(strict().arg("-V")).stdout);
    assert_eq!(short.lines().count(), 1, "{short}");
    assert!(short.contains(&commit[..commit.len().min(12)]), "{short}");
}

#[test]
fn every_commands_json_records_the_provenance() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/regress/merge-split.script");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("race.json");
    let cases: Vec<Vec<String>> = vec![
        vec!["kernel".into(), "info".into(), "--json".into(), "-".into()],
        vec!["replay".into(), "--json".into(), "-".into(), script.display().to_string()],
        vec!["diff".into(), "--json".into(), "-".into(), script.display().to_string()],
        // A timed command, let run from a debug build by the environment variable; --json FILE this time.
        vec![
            "race".into(),
            "--mode".into(),
            "lockless".into(),
            "--tests".into(),
            "split".into(),
            "--duration".into(),
            "50ms".into(),
            "--json".into(),
            file.display().to_string(),
        ],
    ];
    for args in cases {
        let out = run(strict().env(ALLOW, "1").args(&args));
        assert!(matches!(out.status.code(), Some(0 | 1)), "{args:?}: {}", text(&out.stderr));
        let json = if args.last().is_some_and(|a| a.ends_with(".json")) {
            std::fs::read_to_string(&file).unwrap()
        } else {
            text(&out.stdout)
        };
        let set: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        check_provenance(&set);
        // It reads back into the shared types.
        let typed: vmspace_results::report::ReportSet = serde_json::from_value(set).unwrap();
        assert!(typed.provenance.is_some());
    }
    // report --compare names the build of each set it compares, and its own set records the comparing build.
    let out = run(strict()
        .args(["report", "--compare"])
        .args([&file, &file])
        .arg("--out")
        .arg(dir.path())
        .args(["--json", "-"]));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches("     build: vmspace ").count(), 2, "{err}");
    check_provenance(&serde_json::from_slice(&out.stdout).unwrap());
    let page = std::fs::read_to_string(dir.path().join("compare.html")).unwrap();
    assert!(page.contains("<dt>old build</dt>") && page.contains("<dt>new build</dt>"), "{page}");
}

#[test]
fn a_timed_command_refuses_a_debug_build_unless_forced() {
    let info = run(strict().args(["kernel", "info", "--json", "-"]));
    assert_eq!(info.status.code(), Some(0), "kernel info times nothing: {}", text(&info.stderr));
    let build = check_provenance(&serde_json::from_slice(&info.stdout).unwrap());
    let debug = is_debug(&build);
    let quick_race = ["race", "--mode", "lockless", "--tests", "split", "--duration", "50ms"];
    if !debug {
        // An optimised build runs every timed command without a word about its build.
        let out = run(strict().args(quick_race));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(!text(&out.stderr).contains("WARNING"), "{}", text(&out.stderr));
        return;
    }
    // Refused before anything runs (exit status 2, one error line saying how to build), by every command that
    // times something.
    for args in [
        &["bench", "tree", "--quick"][..],
        &["bench", "mm", "--quick"],
        &["bench", "faults", "--quick"],
        &["bench", "fork", "--quick"],
        &["bench", "contention", "--quick"],
        &["kernel", "contention"],
        &["kernel", "race"],
        &["kernel", "faults"],
        &["kernel", "fork"],
        &["race"],
        &["race", "--kernel"],
        &["report", "--smoke", "--out", "/nonexistent-vmspace-dir"],
    ] {
        let out = run(strict().args(args));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error: this vmspace is a debug build"), "{args:?}: {err}");
        assert!(err.contains("--release") && err.contains("--force"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed {}", text(&out.stdout));
    }
    // The environment variable set to anything but 1 does not let it run.
    let out = run(strict().env(ALLOW, "0").args(quick_race));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // --force runs it, warns loudly, and the JSON says which build measured.
    let out = run(strict().args(quick_race).args(["--force", "--json", "-"]));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("WARNING: measured with a DEBUG build"), "{err}");
    let set: Value = serde_json::from_slice(&out.stdout).unwrap();
    let b = check_provenance(&set);
    assert!(is_debug(&b), "{b}");
}
