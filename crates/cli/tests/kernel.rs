//! End-to-end checks of `vmspace kernel ...`: each command runs for about a second against the live kernel,
//! and its JSON must have the shared report shape and sane values; bad arguments must fail cleanly; and no child
//! process may outlive the command, whether it ends normally, by Ctrl-C (SIGINT) or by SIGKILL.

use serde_json::Value;

mod common;
use common::{children_of, one_short_sample, signal_when_ready, vmspace};

fn json(args: &[&str]) -> Value {
    let out = vmspace(args);
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// Checks the shared report shape; returns the reports.
fn reports(v: &Value, benchmark: &str) -> Vec<Value> {
    assert_eq!(v["schema"], "vmspace.report.v1");
    assert!(v["command"].as_str().unwrap().starts_with("vmspace kernel"));
    let reports = v["reports"].as_array().expect("reports").clone();
    assert!(!reports.is_empty());
    for r in &reports {
        assert_eq!(r["benchmark"], benchmark);
        assert!(r["host"]["kernel_release"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(!r["runs"].as_array().unwrap().is_empty());
        for (name, s) in r["summary"].as_object().unwrap() {
            let (min, med, max) =
                (s["min"].as_f64().unwrap(), s["median"].as_f64().unwrap(), s["max"].as_f64().unwrap());
            assert!(min <= med && med <= max, "{name}: {s}");
        }
    }
    reports
}

fn median(r: &Value, metric: &str) -> f64 {
    r["summary"][metric]["median"].as_f64().unwrap_or_else(|| panic!("no metric {metric} in {}", r["label"]))
}

#[test]
fn info_reports_the_host() {
    let set = json(&["kernel", "info", "--json", "-"]);
    assert_eq!(set["schema"], "vmspace.report.v1");
    assert_eq!(set["reports"][0]["benchmark"], "kernel.info");
    let v = &set["reports"][0]["host"];
    assert!(v["page_size"].as_u64().unwrap() >= 4096);
    assert!(!v["cpus_usable"].as_array().unwrap().is_empty());
    assert_eq!(v["procmap_query"], "yes", "PROCMAP_QUERY needs Linux 6.11+");
    let text = vmspace(&["kernel", "info"]);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("max_map_count"));
}

#[test]
fn contention_single_configuration() {
    let v = json(&[
        "kernel",
        "contention",
        "--procfile",
        "smaps_rollup",
        "--busy",
        "1",
        "--samples",
        "2",
        "--duration",
        "0.5s",
        "--region-mib",
        "16",
        "--json",
        "-",
    ]);
    let r = &reports(&v, "kernel.contention")[0];
    assert_eq!(r["runs"].as_array().unwrap().len(), 2);
    assert!(median(r, "calls_count") > 0.0);
    assert!(r["summary"]["scanner_reads_count"]["max"].as_f64().unwrap() > 0.0);
    assert!(median(r, "call_p50_ms") <= median(r, "call_max_ms"));
    let roles: Vec<&str> =
        r["placement"].as_array().unwrap().iter().map(|p| p["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["mapper", "scanner", "busy"]);
}

#[test]
fn contention_sweep_table() {
    let out = vmspace(&one_short_sample(&["kernel", "contention", "--sweep"], "0.1s"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for row in ["no scanner, no busy task", "smaps, 1 scanner + 1 busy B=0", "query, 1 scanner + 1 busy B=2"]
    {
        assert!(text.contains(row), "missing row {row}:\n{text}");
    }
    assert!(text.contains("1.00x"), "the baseline's ratio is 1:\n{text}");
    assert!(text.contains("placement: mapper 0: cpu"));
}

#[test]
fn race_finds_no_tearing() {
    let v = json(&["kernel", "race", "--duration", "0.7s", "--json", "-"]);
    let rs = reports(&v, "kernel.race");
    assert_eq!(rs.len(), 3);
    // The race checks judge: the verdict counts the tests, and passed means exit status 0.
    assert_eq!(v["verdict"]["passed"], true, "{}", v["verdict"]);
    assert_eq!(v["verdict"]["met"], 3);
    for r in &rs {
        assert_eq!(median(r, "failures_count"), 0.0, "{}: {}", r["label"], r["notes"]);
        assert!(median(r, "iterations_count") > 0.0);
        // Seven pages around the raced regions, each asked with flags 0 and with COVERING_OR_NEXT_VMA.
        assert_eq!(median(r, "query_checks_count"), 14.0 * median(r, "iterations_count"));
    }
    let v = json(&[
        "kernel",
        "race",
        "--file",
        "smaps",
        "--tests",
        "resize",
        "--duration",
        "0.5s",
        "--json",
        "-",
    ]);
    let rs = reports(&v, "kernel.race");
    assert_eq!(rs.len(), 1);
    assert_eq!(median(&rs[0], "failures_count"), 0.0);
}

#[test]
fn faults_and_fork() {
    let v = json(&[
        "kernel",
        "faults",
        "--threads",
        "1,2",
        "--samples",
        "1",
        "--duration",
        "0.4s",
        "--json",
        "-",
    ]);
    let rs = reports(&v, "kernel.faults");
    assert_eq!(rs.len(), 2);
    assert!(rs.iter().all(|r| median(r, "faults_per_s") > 0.0));
    // With --mapper every row has its mapper: a placement of its own and its rate.
    let v = json(&[
        "kernel",
        "faults",
        "--threads",
        "1",
        "--samples",
        "1",
        "--duration",
        "0.2s",
        "--mapper",
        "--json",
        "-",
    ]);
    let rs = reports(&v, "kernel.faults");
    assert_eq!(rs[0]["parameters"]["mapper"], true);
    assert!(rs[0]["placement"].as_array().unwrap().iter().any(|p| p["role"] == "mapper"));
    assert!(median(&rs[0], "mapper_pairs_per_s") > 0.0 && median(&rs[0], "faults_per_s") > 0.0);
    let v =
        json(&["kernel", "fork", "--vmas", "0,1000", "--samples", "1", "--duration", "0.4s", "--json", "-"]);
    let rs = reports(&v, "kernel.fork");
    assert_eq!(rs.len(), 2);
    let total = |r: &Value| r["parameters"]["total_vmas"].as_u64().unwrap();
    // The 1000 pages may merge with a neighbouring mapping at either end.
    assert!(total(&rs[1]) >= total(&rs[0]) + 998, "{} -> {}", total(&rs[0]), total(&rs[1]));
    assert!(rs.iter().all(|r| median(r, "forks_per_s") > 0.0));
    // --json-file writes the same report set while the table goes to stdout.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fork.json");
    let out = vmspace(&[
        "kernel",
        "fork",
        "--vmas",
        "0",
        "--samples",
        "1",
        "--duration",
        "0.1s",
        "--json-file",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("forks/10s"));
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(reports(&saved, "kernel.fork").len(), 1);
}

#[test]
fn bad_arguments_fail_cleanly() {
    for args in [
        &["kernel", "contention", "--procfile", "bogus"][..],
        &["kernel", "contention", "--mapper-cpu", "4096", "--duration", "0.1"],
        &["kernel", "contention", "--others-cpus", "1-", "--duration", "0.1"],
        &["kernel", "contention", "--samples", "0"],
        &["kernel", "race", "--tests", "split,twist"],
        &["kernel", "faults", "--threads", "0"],
        &["kernel", "fork", "--vmas", "100000000"],
        &["kernel", "fork", "--duration", "soon"],
    ] {
        let out = vmspace(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(!err.is_empty());
    }
}

fn no_child_outlives(signal: &str) {
    let args = one_short_sample(&["kernel", "contention", "--busy", "1", "--busy-ms", "0"], "30s");
    // Ready once the mapper, the scanner and the busy task exist.
    signal_when_ready(&args, signal, &|pid| children_of(pid).len() >= 3);
}

#[test]
fn no_child_outlives_ctrl_c() {
    no_child_outlives("-INT");
}

#[test]
fn no_child_outlives_sigkill() {
    no_child_outlives("-KILL");
}
