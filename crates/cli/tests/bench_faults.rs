//! `vmspace bench faults --quick --json -`: the command runs end to end and prints one report set in the shared
//! schema with a row for every side (engine per-vma, engine mmap-lock, kernel), thread count (1, 2) and mapper
//! setting, and for the ceilings without the mapper (engine per-vma in separate address spaces, memset), each
//! with finite measurements and the engine's per-VMA-lock counters, and a verdict over every target.

mod common;

use common::{bin, median, run_judged_bench};
use std::collections::BTreeSet;

#[test]
fn quick_json_has_the_shared_schema_and_every_row() {
    let set = run_judged_bench("faults");

    let mut rows = BTreeSet::new();
    let mut targets = 0;
    for r in set["reports"].as_array().expect("reports array") {
        assert!(r["host"]["kernel_release"].is_string());
        assert!(r["started_utc"].as_str().unwrap().ends_with('Z'));
        let p = &r["parameters"];
        match r["benchmark"].as_str().unwrap() {
            "bench.faults" => {
                let runs = r["runs"].as_array().unwrap();
                assert_eq!(runs.len(), 1, "{}: one run per sample", r["label"]);
                for (name, v) in runs[0]["metrics"].as_object().unwrap() {
                    let v = v.as_f64().unwrap();
                    assert!(v.is_finite() && v >= 0.0, "{} {name} = {v}", r["label"]);
                }
                assert!(median(r, "faults_per_s") > 0.0);
                assert!(median(r, "faults_per_cpu_s_per_thread") > 0.0);
                let (side, mode) = (p["side"].as_str().unwrap(), p["mode"].as_str().unwrap());
                let (threads, mapper) = (p["threads"].as_u64().unwrap(), p["mapper"].as_bool().unwrap());
                let placed = r["placement"].as_array().unwrap().len() as u64;
                assert_eq!(placed, threads + u64::from(mapper), "{}", r["label"]);
                if mapper {
                    assert!(median(r, "mapper_pairs_per_s") > 0.0, "{}", r["label"]);
                }
                if side == "engine" {
                    // Every page written was one anonymous fault, and per-VMA faults were counted as such.
                    assert_eq!(median(r, "faults_anon_new_count"), median(r, "faults_total_count"));
                    let success = median(r, "vma_lock_success_count");
                    if mode == "per-vma" || mode == "separate" {
                        assert!(success > 0.0, "{}", r["label"]);
                    } else {
                        assert_eq!(success, 0.0, "{}", r["label"]);
                    }
                }
                rows.insert((mode.to_string(), threads, mapper));
            }
            "bench.faults.target" => {
                assert!(p["goal"].is_string());
                // `met` is true or false when the target was decided, null when undecided or not measured.
                match p["verdict"].as_str().unwrap() {
                    "met" | "missed" => assert_eq!(p["met"].as_bool(), Some(p["verdict"] == "met")),
                    "undecided" | "not measured" | "not measurable" => assert!(p["met"].is_null()),
                    other => panic!("unknown verdict {other}"),
                }
                assert_eq!(r["runs"].as_array().unwrap().len(), 1, "{}: measured", r["label"]);
                targets += 1;
            }
            other => panic!("unexpected benchmark {other}"),
        }
    }
    for mode in ["per-vma", "mmap-lock", "kernel"] {
        for threads in [1, 2] {
            for mapper in [false, true] {
                assert!(
                    rows.contains(&(mode.to_string(), threads, mapper)),
                    "missing {mode} T={threads} {mapper}"
                );
            }
        }
    }
    for mode in ["separate", "memset"] {
        for threads in [1, 2] {
            assert!(rows.contains(&(mode.to_string(), threads, false)), "missing {mode} T={threads}");
        }
    }
    assert_eq!(rows.len(), 12 + 4);
    // 2 threads over 1 without and with the mapper, mmap-lock over per-vma at T=1 and T=2, engine over kernel.
    assert_eq!(targets, 5);
    let verdict = &set["verdict"];
    // Every measured target has a verdict (undecided when within the judge's resolution of its goal).
    let decided = verdict["met"].as_u64().unwrap() + verdict["missed"].as_u64().unwrap();
    let undecided =
        verdict["undecided"].as_u64().unwrap_or(0) + verdict["not_measurable"].as_u64().unwrap_or(0);
    assert_eq!(decided + undecided, 5, "{verdict}");
}

#[test]
fn bad_thread_lists_are_usage_errors() {
    let out = bin().args(["bench", "faults", "--threads", "0"]).output().expect("run vmspace");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
