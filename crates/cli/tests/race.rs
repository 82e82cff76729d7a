//! `vmspace race`: the proc-maps-race checks on the engine in each reader mode (the default) and on the kernel
//! (`--kernel`), with exit status 1 when a check fails.

use serde_json::Value;

mod common;
use common::vmspace;

/// Runs `vmspace race ARGS --json -` and checks the exit status against the failures in the JSON.
fn race(args: &[&str]) -> (Option<i32>, Vec<Value>) {
    let mut all = vec!["race"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", "-"]);
    let out = vmspace(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let set: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(set["schema"], "vmspace.report.v1");
    let reports = set["reports"].as_array().unwrap().clone();
    let failed =
        reports.iter().filter(|r| r["summary"]["failures_count"]["max"].as_f64().unwrap() > 0.0).count();
    assert_eq!(set["verdict"]["missed"].as_u64().unwrap() as usize, failed);
    assert_eq!(out.status.code(), Some(if failed == 0 { 0 } else { 1 }), "{stderr}");
    assert!(stderr.contains("verdict: "), "{stderr}");
    (out.status.code(), reports)
}

#[test]
fn engine_mmap_lock_mode_passes_every_test() {
    let (code, reports) = race(&["--engine", "--mode", "mmap-lock", "--duration", "300ms"]);
    assert_eq!(code, Some(0));
    let tests: Vec<&str> = reports.iter().map(|r| r["parameters"]["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["split", "resize", "remap"]);
    for r in &reports {
        assert_eq!(r["benchmark"], "bench.race");
        assert_eq!(r["parameters"]["mode"], "mmap-lock");
        let m = |k: &str| r["summary"][k]["median"].as_f64().unwrap();
        assert!(m("iterations_count") > 0.0 && m("child_cycles_count") > 0.0, "{}", r["label"]);
        // Seven pages around the raced regions, each asked with flags 0 and with COVERING_OR_NEXT_VMA.
        assert_eq!(m("query_checks_count"), 14.0 * m("iterations_count"));
        assert_eq!(r["parameters"]["reads"], "page");
    }
}

#[test]
fn engine_per_vma_on_smaps() {
    // Split under per-VMA locks once showed false gaps (`vmspace_bench::race`'s
    // `split_under_per_vma_locks_sees_no_false_gap` names the bug, since fixed).
    let (code, reports) = race(&[
        "--mode",
        "per-vma",
        "--file",
        "smaps",
        "--tests",
        "split,resize,remap",
        "--duration",
        "200ms",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(reports.len(), 3);
    assert!(reports.iter().all(|r| r["summary"]["query_checks_count"]["median"] == 0.0));
}

#[test]
fn random_reads_on_the_engine_and_the_kernel() {
    let mut modified = 0.0;
    for side in ["--engine", "--kernel"] {
        for file in ["maps", "smaps"] {
            let mut args = vec![side, "--reads", "random", "--file", file, "--duration", "200ms"];
            if side == "--engine" {
                args.extend_from_slice(&["--mode", "lockless"]);
            }
            let (code, reports) = race(&args);
            assert_eq!(code, Some(0), "{side} {file}");
            assert_eq!(reports.len(), 3);
            for r in &reports {
                assert_eq!(r["parameters"]["reads"], "random");
                modified += r["summary"]["modified_seen_count"]["median"].as_f64().unwrap();
            }
        }
    }
    // The readers raced the writers (one run alone may miss the modified state on a busy machine).
    assert!(modified > 0.0);
}

#[test]
fn kernel_side_and_usage_errors() {
    let (code, reports) = race(&["--kernel", "--tests", "resize", "--duration", "200ms"]);
    assert_eq!(code, Some(0));
    assert_eq!(reports[0]["benchmark"], "kernel.race");
    for bad in [
        &["--kernel", "--mode", "per-vma"][..],
        &["--engine", "--kernel"][..],
        &["--mode", "rcu"][..],
        &["--tests", "swap"][..],
        &["--reads", "pages"][..],
        &["--duration", "0s"][..],
    ] {
        let mut args = vec!["race"];
        args.extend_from_slice(bad);
        let out = vmspace(&args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
