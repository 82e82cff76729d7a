//! `vmspace bench contention --quick --json -`: the command runs end to end and prints one report set in the
//! shared schema with every grid row of the kernel and of each engine reader mode (each engine row with a
//! scanner interleaved with its twin, the scanner reading another address space), a ratio report per non-baseline
//! row (per pair on the engine's side), the readers' throughput for the kernel and each mode, and a verdict
//! over every target.

mod common;

use common::{bin, median, run_judged_bench};
use std::collections::BTreeSet;

/// The reader modes this build has, as `ReaderMode::name` spells them.
fn modes() -> Vec<&'static str> {
    vmspace_mm::ReaderMode::ALL.iter().map(|m| m.name()).collect()
}

#[test]
fn quick_json_has_the_shared_schema_and_every_row() {
    let set = run_judged_bench("contention");
    let (mut rows, mut ratios, mut readers) = (BTreeSet::new(), 0, BTreeSet::new());
    let (mut targets, mut twins) = (0, 0);
    for r in set["reports"].as_array().expect("reports array") {
        assert!(r["host"]["kernel_release"].is_string());
        let p = &r["parameters"];
        let s = |k: &str| p[k].as_str().unwrap_or_else(|| panic!("{}: no {k}", r["label"])).to_string();
        match r["benchmark"].as_str().unwrap() {
            "bench.contention" => {
                assert!(median(r, "calls_count") > 0.0, "{}", r["label"]);
                let (mean, p99, max) =
                    (median(r, "call_mean_ms"), median(r, "call_p99_ms"), median(r, "call_max_ms"));
                assert!(mean > 0.0 && p99 <= max && mean <= max, "{}: {mean} {p99} {max}", r["label"]);
                assert_eq!(median(r, "mapper_errors_count"), 0.0);
                let scanners = p["scanners"].as_u64().unwrap();
                // Every engine row but the baseline is measured in pairs: each run carries its partner's.
                if s("side") == "engine" && r["label"] != "engine no scanner, no busy task" {
                    assert_eq!(s("pairing").split(':').next(), Some("per pair"), "{}", r["label"]);
                    for run in r["runs"].as_array().unwrap() {
                        assert!(
                            run["metrics"]["base_call_mean_ms"].as_f64().unwrap() > 0.0,
                            "{}",
                            r["label"]
                        );
                        assert!(run["metrics"]["base_call_max_ms"].as_f64().unwrap() > 0.0, "{}", r["label"]);
                    }
                }
                if s("side") == "engine" && scanners > 0 {
                    // A starved scanner may complete no read in a 0.1 s run; one alone always does.
                    if p["busy"].as_u64() == Some(0) {
                        assert!(median(r, "scanner_reads_count") > 0.0, "{}", r["label"]);
                    }
                }
                rows.insert((
                    s("side"),
                    s("mode"),
                    s("procfile"),
                    p["busy"].as_u64().unwrap(),
                    p["busy_ms"].as_u64().unwrap(),
                ));
            }
            "bench.contention.twin" => {
                // A scanner row's twin: the scanner read another address space, as large as the mapper's.
                assert!(s("pairing").starts_with("twin"), "{}", r["label"]);
                assert!(p["scanners"].as_u64().unwrap() > 0, "{}", r["label"]);
                for run in r["runs"].as_array().unwrap() {
                    let m = &run["metrics"];
                    assert_eq!(m["scanned_vmas_at_start"], m["vmas_at_start"], "{}", r["label"]);
                }
                twins += 1;
            }
            "bench.contention.ratio" => {
                assert!(median(r, "mean_ratio") > 0.0 && median(r, "max_ratio") > 0.0);
                let pairing = if s("side") == "engine" { "per pair" } else { "baseline median" };
                assert_eq!(s("pairing"), pairing, "{}", r["label"]);
                ratios += 1;
            }
            "bench.contention.readers" => {
                assert!(median(r, "maps_vmas_per_s") > 0.0 && median(r, "query_ns") > 0.0, "{}", r["label"]);
                // The kernel's count is this process's after adding the extra VMAs (one may merge with a neighbour).
                assert!(p["vmas"].as_u64().unwrap() >= 990, "{}", r["label"]);
                readers.insert(s("mode"));
            }
            "bench.contention.target" => {
                assert!(p["goal"].is_string());
                // `met` is true or false when the target was decided, null when undecided or not measured.
                match p["verdict"].as_str().unwrap() {
                    "met" | "missed" => assert_eq!(p["met"].as_bool(), Some(p["verdict"] == "met")),
                    "undecided" | "not measured" | "not measurable" => assert!(p["met"].is_null()),
                    other => panic!("unknown verdict {other}"),
                }
                // A grid target judges its row's pairs: one per run (--quick: one run).
                if r["label"].as_str().unwrap().contains("twin") && p["verdict"] != "not measured" {
                    assert_eq!(p["values"], 1, "{}", r["label"]);
                }
                targets += 1;
            }
            other => panic!("unexpected benchmark {other}"),
        }
    }
    // The kernel sweep's 14 rows for the kernel; the engine's 2 baselines once and 12 scanner rows per mode.
    let n = modes().len();
    assert_eq!(rows.iter().filter(|r| r.0 == "kernel").count(), 14, "{rows:?}");
    assert_eq!(rows.iter().filter(|r| r.0 == "engine" && r.1 == "none").count(), 2, "{rows:?}");
    for m in modes() {
        let mine: Vec<_> = rows.iter().filter(|r| r.1 == m).collect();
        assert_eq!(mine.len(), 12, "{m}: {mine:?}");
        for pf in ["maps", "smaps", "smaps_rollup", "query"] {
            for (busy, ms) in [(0, 2), (1, 2), (1, 0)] {
                assert!(
                    rows.contains(&("engine".into(), m.into(), pf.into(), busy, ms)),
                    "{m} {pf} {busy} {ms}"
                );
            }
        }
    }
    assert_eq!(ratios, 13 + 1 + 12 * n);
    assert_eq!(twins, 12 * n, "a twin per engine row with a scanner");
    let mut want: BTreeSet<String> = modes().iter().map(|m| m.to_string()).collect();
    want.insert("kernel".into());
    assert_eq!(readers, want);
    // per-vma: 8 grid targets and 2 throughput targets; mmap-lock: the inversion; lockless (when present):
    // 8 + 4 + 2.
    let expected = modes()
        .iter()
        .map(|m| match *m {
            "per-vma" => 10,
            "mmap-lock" => 1,
            "lockless" => 14,
            _ => 0,
        })
        .sum::<u64>();
    assert_eq!(targets, expected);
    let v = &set["verdict"];
    // Every measured target has a verdict (undecided when within the judge's resolution of its goal; not
    // measurable here when a side of one of its pairs did not have a CPU).
    let judged = ["met", "missed", "undecided", "not_measurable"]
        .iter()
        .map(|k| v[*k].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert_eq!(judged, expected, "{v}");
}

#[test]
fn throughput_only_and_bad_modes() {
    let out = bin()
        .args([
            "bench",
            "contention",
            "--throughput-only",
            "--no-kernel",
            "--modes",
            "per-vma",
            "--vmas",
            "500",
            "--reader-threads",
            "1",
            "--samples",
            "1",
            "--json",
            "-",
        ])
        .output()
        .expect("run vmspace");
    assert!(matches!(out.status.code(), Some(0 | 1 | 4)), "{}", String::from_utf8_lossy(&out.stderr));
    let set: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = set["reports"].as_array().unwrap();
    let readers: Vec<_> = reports.iter().filter(|r| r["benchmark"] == "bench.contention.readers").collect();
    assert_eq!(readers.len(), 1);
    assert_eq!(readers[0]["parameters"]["vmas"], 500);
    assert!(!reports.iter().any(|r| r["benchmark"] == "bench.contention"));
    for bad in [&["--modes", "rcu"][..], &["--no-throughput", "--vmas", "10"][..], &["--samples", "0"][..]] {
        let out = bin().args(["bench", "contention", "--quick"]).args(bad).output().expect("run vmspace");
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
