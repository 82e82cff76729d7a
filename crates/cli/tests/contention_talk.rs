//! End-to-end checks of the LPC 2021 talk's table (`kernel contention --talk`, `--busy-counts`;
//! `bench contention --talk`) and of real agents as scanners (`kernel contention --agent`): the table's shape
//! and JSON fields on a short grid, an agent's run, a failing agent's error and status, and no process left
//! behind on Ctrl-C, the agent's commands included.

use serde_json::Value;
use std::time::{Duration, Instant};

mod common;
use common::{children_of, descendants, one_short_sample, signal_when_ready, vmspace};

/// Runs the command with `--json -` added; returns its JSON and its standard error.
fn json_of(args: &[&str]) -> (Value, String) {
    let args = [args, &["--json", "-"]].concat();
    let out = vmspace(&args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?} failed: {err}");
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (v, err)
}

/// The rows of the talk table `title` in `text`: (busy count, cells), read up to the next blank line.
fn table_rows(text: &str, title: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(title));
    assert!(lines.next().is_some(), "no table {title:?} in:\n{text}");
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("busy tasks") && header.contains("runs > 1 s"), "{header}\n{text}");
    lines
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Checks one talk cell's report: one scanner, `busy` busy tasks that never pause, `runs` runs, each with
/// its worst call and the hang flag that agrees with it.
fn check_cell(r: &Value, busy: u64, runs: usize) {
    assert_eq!(r["parameters"]["busy"], busy, "{}", r["label"]);
    if busy > 0 {
        assert_eq!(r["parameters"]["busy_ms"], 0, "{}", r["label"]);
    }
    assert_eq!(r["parameters"]["scanners"], 1);
    let rs = r["runs"].as_array().unwrap();
    assert_eq!(rs.len(), runs);
    let length_ms = r["parameters"]["duration_s"].as_f64().unwrap() * 1e3;
    for run in rs {
        let worst = run["metrics"]["call_max_ms"].as_f64().expect("call_max_ms");
        assert!(worst > 0.0, "{run}");
        // The window is kept: a call still waiting at its end (length + 10 ms) is cut there.
        assert!(worst <= length_ms + 10.0 + 1.0, "{run}");
        assert!(run["metrics"]["calls_cut_count"].as_f64().expect("calls_cut_count") <= 1.0, "{run}");
        assert!(run["metrics"]["setup_ms"].as_f64().expect("setup_ms") > 0.0, "{run}");
        assert!(run["metrics"]["teardown_ms"].as_f64().expect("teardown_ms") >= 0.0, "{run}");
        let hang = run["metrics"]["worst_over_1s_count"].as_f64().expect("worst_over_1s_count");
        assert_eq!(hang, if worst > 1000.0 { 1.0 } else { 0.0 }, "{run}");
    }
    for k in ["min", "median", "max"] {
        assert!(r["summary"]["call_max_ms"][k].as_f64().is_some(), "{}", r["label"]);
    }
}

#[test]
fn kernel_talk_grid_short() {
    let (v, err) = json_of(&one_short_sample(
        &["kernel", "contention", "--busy-counts", "0,1", "--procfile", "maps"],
        "1s",
    ));
    assert_eq!(v["schema"], "vmspace.report.v1");
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    for (r, busy) in reports.iter().zip([0, 1]) {
        assert_eq!(r["benchmark"], "kernel.contention");
        assert_eq!(r["parameters"]["procfile"], "maps");
        check_cell(r, busy, 1);
    }
    let rows = table_rows(&err, "maps (kernel): worst mmap/munmap call per run, ms");
    assert_eq!(rows.len(), 2, "{err}");
    for (row, busy) in rows.iter().zip(["0", "1"]) {
        assert_eq!(row.len(), 6, "{row:?}");
        assert_eq!(row[0], busy);
        let (med, min, max): (f64, f64, f64) =
            (row[1].parse().unwrap(), row[2].parse().unwrap(), row[3].parse().unwrap());
        assert!(min <= med && med <= max, "{row:?}");
        assert!(row[4] == "0/1" || row[4] == "1/1", "{row:?}");
        assert!(row[5] == "0/1" || row[5] == "1/1", "{row:?}");
    }
    // The talk's options are refused with the options they replace.
    let out = vmspace(&["kernel", "contention", "--talk", "--busy", "3"]);
    assert_eq!(out.status.code(), Some(2));
    let out = vmspace(&["kernel", "contention", "--busy-counts", "5000", "--samples", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn bench_talk_grid_short() {
    let (v, err) = json_of(&one_short_sample(
        &[
            "bench",
            "contention",
            "--talk",
            "--busy-counts",
            "0,1",
            "--procfile",
            "smaps",
            "--modes",
            "mmap-lock,per-vma",
        ],
        "300ms",
    ));
    let reports: Vec<&Value> =
        v["reports"].as_array().unwrap().iter().filter(|r| r["benchmark"] == "bench.contention").collect();
    // The kernel and two modes, two busy counts each.
    assert_eq!(reports.len(), 6, "{err}");
    for side in ["kernel", "engine mmap-lock", "engine per-vma"] {
        let title = format!("smaps ({side}): worst mmap/munmap call per run, ms");
        assert_eq!(table_rows(&err, &title).len(), 2, "{title}\n{err}");
    }
    for r in reports {
        assert_eq!(r["parameters"]["procfile"], "smaps");
        assert_eq!(r["parameters"]["grid"], "talk");
        check_cell(r, r["parameters"]["busy"].as_u64().unwrap(), 1);
    }
}

#[test]
fn agent_reads_maps() {
    let (v, err) =
        json_of(&one_short_sample(&["kernel", "contention", "--agent", "cat /proc/{pid}/maps"], "1s"));
    let r = &v["reports"][0];
    assert_eq!(r["parameters"]["agent"], "cat /proc/{pid}/maps");
    assert_eq!(r["label"], "agent `cat /proc/{pid}/maps`, 1 scanner");
    assert!(r["summary"]["calls_count"]["median"].as_f64().unwrap() > 0.0);
    assert!(r["summary"]["scanner_reads_count"]["median"].as_f64().unwrap() > 0.0, "{err}");
    assert!(err.contains("agent `cat /proc/{pid}/maps`"), "{err}");
}

#[test]
fn a_failing_agent_fails_at_once_with_its_error() {
    let t = Instant::now();
    let out = vmspace(&[
        "kernel",
        "contention",
        "--agent",
        "echo no such tool >&2; exit 7",
        "--samples",
        "3",
        "--duration",
        "20s",
        "--region-mib",
        "8",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("the agent command `echo no such tool >&2; exit 7` failed (exit status 7)"),
        "{err}"
    );
    assert!(err.contains("no such tool"), "{err}");
    // Before the first run's 20 s.
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let out = vmspace(&["kernel", "contention", "--agent", " "]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn ctrl_c_leaves_no_agent_behind() {
    let args = one_short_sample(
        &["kernel", "contention", "--agent", "sleep 0.3; cat /proc/{pid}/maps", "--busy-counts", "2"],
        "30s",
    );
    // Ready once the mapper, the scanner, two busy tasks and the scanner's agent command (a grandchild) exist.
    signal_when_ready(&args, "-INT", &|pid| {
        let kids = children_of(pid).len();
        kids >= 4 && descendants(pid).len() > kids
    });
}
