//! `vmspace bench tree --quick --json -`: the command runs end to end and prints one report set in the shared
//! schema, with a report for every workload, size and structure (one run per round of interleaved batches, each
//! with its ratio to BTreeMap's batch of the same round), finite positive measurements, and a verdict for every
//! issue target with its per-round values, their median and interval.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

mod common;
use common::{bin, run_judged_bench};
use vmspace_bench::judge::Goal;

const TARGETS: [&str; 6] = ["maple", "btree", "rwlock", "arcswap", "scc", "skipmap"];
const KERNEL_SHAPES: [&str; 5] =
    ["bench_load", "bench_load_batch", "bench_mas_for_each", "bench_awalk", "bench_fork"];
const AT_SCALE: [&str; 8] =
    ["lookup", "lookup_batch", "iterate", "churn", "mmap", "gap", "dup", "lookup_threads"];
const CONCURRENT: [&str; 2] = ["churn_reader", "churn_reader_latency"];

fn param<'a>(r: &'a Value, name: &str) -> &'a Value {
    &r["parameters"][name]
}

#[test]
fn quick_json_has_the_shared_schema_and_every_cell() {
    let set = run_judged_bench("tree");
    let verdict = &set["verdict"];
    let (met, missed) = (verdict["met"].as_u64().unwrap(), verdict["missed"].as_u64().unwrap());
    assert!(verdict["line"].as_str().unwrap().starts_with(&format!("{met} met, {missed} missed")));
    let reports = set["reports"].as_array().expect("reports array");

    let mut cells = BTreeSet::new();
    let mut per_round = BTreeMap::new();
    let mut target_values = Vec::new();
    for r in reports {
        let bench = r["benchmark"].as_str().unwrap();
        assert!(bench.starts_with("bench.tree."), "{bench}");
        assert!(r["host"]["kernel_release"].is_string());
        assert!(r["started_utc"].as_str().unwrap().ends_with('Z'));
        let runs = r["runs"].as_array().unwrap();
        if bench == "bench.tree.target" {
            assert!(param(r, "goal").is_string());
            let verdict = param(r, "verdict").as_str().unwrap();
            // `met` says the same as the verdict: true, false, or null when undecided or not measured.
            let met = param(r, "met");
            match verdict {
                "met" => assert_eq!(met, true),
                "missed" => assert_eq!(met, false),
                "undecided" | "not measured" | "not measurable" => assert!(met.is_null(), "{r}"),
                other => panic!("unknown verdict {other}"),
            }
            if verdict == "not measured" {
                assert!(runs.is_empty());
                continue;
            }
            // One value per round (3 in a quick run), and the median and interval of those values.
            let values: Vec<f64> = runs.iter().map(|run| run["metrics"]["ratio"].as_f64().unwrap()).collect();
            assert_eq!(values.len(), 3, "{r}");
            assert_eq!(param(r, "values").as_u64(), Some(3));
            let (low, median, high) = (
                param(r, "low").as_f64().unwrap(),
                param(r, "median").as_f64().unwrap(),
                param(r, "high").as_f64().unwrap(),
            );
            assert!(low <= median && median <= high, "{r}");
            // With 3 values the interval is their min-max, and the verdict follows from it and the goal.
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert_eq!((low, high), (min, max), "{r}");
            // The shared judge's rule over the interval: met or missed only when both ends clear the goal by its
            // resolution band (`vmspace_bench::judge::RESOLUTION`), undecided otherwise.
            let goal = Goal::parse(param(r, "goal").as_str().unwrap()).unwrap();
            let expected = if goal.clearly_meets(low) && goal.clearly_meets(high) {
                "met"
            } else if goal.clearly_misses(low) && goal.clearly_misses(high) {
                "missed"
            } else {
                "undecided"
            };
            // A 2-thread scaling miss is not measurable here, with a note, when the unsynchronised BTreeMap
            // control missed the goal too.
            let control =
                r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("control"));
            if control {
                assert_eq!(
                    (verdict, expected, param(r, "workload").as_str().unwrap().starts_with("lookup_threads")),
                    ("not measurable", "missed", true),
                    "{r}"
                );
            } else if verdict == "not measurable" {
                // Two lookup threads on one usable CPU: a miss there says nothing. Or too few rounds had their
                // CPU (another test's processes beside this one): those rounds compare the machine's load.
                let notes = r["notes"].to_string();
                assert!(notes.contains("on 1 usable CPU") || notes.contains("on its CPU under 90%"), "{r}");
            } else {
                assert_eq!(verdict, expected, "{r}");
            }
            target_values.push((param(r, "workload").as_str().unwrap().to_string(), values));
            continue;
        }
        let workload = param(r, "workload").as_str().unwrap().to_string();
        let target = param(r, "target").as_str().unwrap().to_string();
        let n = param(r, "n").as_u64().unwrap();
        assert_eq!(bench, format!("bench.tree.{workload}"));
        assert!(!runs.is_empty(), "{bench} {target} n={n}: no runs");
        for run in runs {
            for (name, v) in run["metrics"].as_object().unwrap() {
                let v = v.as_f64().unwrap();
                assert!(v.is_finite() && v >= 0.0, "{bench} {target} n={n}: {name} = {v}");
            }
        }
        let summary = r["summary"].as_object().unwrap();
        assert!(!summary.is_empty());
        for s in summary.values() {
            assert!(s["min"].as_f64().unwrap() <= s["median"].as_f64().unwrap());
            assert!(s["median"].as_f64().unwrap() <= s["max"].as_f64().unwrap());
        }
        assert!(!r["placement"].as_array().unwrap().is_empty());
        let notes = r["notes"].as_array().unwrap();
        assert!(
            !notes.iter().any(|n| n.as_str().unwrap().starts_with("WRONG")),
            "{bench} {target} n={n}: {notes:?}"
        );
        if !workload.starts_with("lookup_threads") && !workload.starts_with("churn_reader") {
            assert!(summary.contains_key("ratio_to_btreemap"), "{bench} {target} n={n}: no ratio");
            // One run per round of the interleaved batches.
            assert_eq!(runs.len(), 3, "{bench} {target} n={n}");
        }
        per_round.insert((workload.clone(), target.clone(), n), runs.clone());
        cells.insert((workload, target, n));
    }

    for t in TARGETS {
        for w in KERNEL_SHAPES {
            assert!(cells.iter().any(|c| c.0 == w && c.1 == t), "missing {w} for {t}");
        }
        for n in [21, 1000] {
            for w in AT_SCALE {
                assert!(cells.contains(&(w.to_string(), t.to_string(), n)), "missing {w} n={n} for {t}");
            }
            for w in CONCURRENT {
                // BTreeMap cannot be written while it is read: no concurrent rows for it.
                assert_eq!(cells.contains(&(w.to_string(), t.to_string(), n)), t != "btree", "{w} n={n} {t}");
            }
        }
    }
    let targets: Vec<&Value> = reports.iter().filter(|r| r["benchmark"] == "bench.tree.target").collect();
    let verdicts = targets.len();
    // The verdict counts the measured targets (those with a run), met or missed.
    let measured: Vec<&&Value> =
        targets.iter().filter(|r| !r["runs"].as_array().unwrap().is_empty()).collect();
    assert_eq!(measured.iter().filter(|r| param(r, "met") == true).count() as u64, met);
    assert_eq!(measured.iter().filter(|r| param(r, "met") == false).count() as u64, missed);
    // Lookup, iteration and dup on the kernel shape and each size, scaling and churn with a reader on each size,
    // churn against BTreeMap from n = 1,000 on (one size here).
    assert_eq!(verdicts, 3 * (1 + 2) + 2 * 2 + 1);
    let undecided = targets.iter().filter(|r| param(r, "verdict") == "undecided").count() as u64;
    assert_eq!(verdict["undecided"].as_u64().unwrap_or(0), undecided, "{verdict}");

    // Ratios are taken per round: each structure's run i over BTreeMap's run i of the same cell, and a target's
    // values are the maple tree's per-round ratios (or per-round scaling and slowdown).
    let metric = |runs: &Vec<Value>, m: &str| -> Vec<f64> {
        runs.iter().map(|run| run["metrics"][m].as_f64().unwrap()).collect()
    };
    for ((workload, target, n), runs) in &per_round {
        if workload.starts_with("lookup_threads") || workload.starts_with("churn_reader") {
            continue;
        }
        let Some(base) = per_round.get(&(workload.clone(), "btree".to_string(), *n)) else { continue };
        let time =
            if runs[0]["metrics"].get("ns_per_entry").is_some() { "ns_per_entry" } else { "ns_per_op" };
        for ((t, b), ratio) in
            metric(runs, time).iter().zip(metric(base, time)).zip(metric(runs, "ratio_to_btreemap"))
        {
            assert!(
                (t / b - ratio).abs() <= 1e-9 * ratio.abs(),
                "{workload} {target} n={n}: {t}/{b} != {ratio}"
            );
        }
    }
    assert!(!target_values.is_empty());
    for (at, values) in &target_values {
        let (workload, n) = at.split_once(" n=").unwrap();
        let runs = &per_round[&(workload.to_string(), "maple".to_string(), n.parse::<u64>().unwrap())];
        let m = match workload {
            "lookup_threads" => "scaling_2t_over_1t",
            "churn_reader" => "slowdown_same_tree",
            _ => "ratio_to_btreemap",
        };
        assert_eq!(&metric(runs, m), values, "{at}");
    }
}

#[test]
fn unknown_target_is_rejected() {
    let out =
        bin().args(["bench", "tree", "--quick", "--targets", "btree,nosuch"]).output().expect("run vmspace");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown target"));
}

/// `--processes 2`: two child processes, their rounds pooled in one report per cell, the targets judged on all of
/// them; `--processes 0` is a usage error.
#[test]
fn processes_pool_rounds_of_child_processes() {
    let out = bin()
        .args(["bench", "tree", "--quick", "--sizes", "21", "--targets", "maple,btree", "--processes", "2"])
        .args(["--json", "-"])
        .output()
        .expect("run vmspace");
    assert!(matches!(out.status.code(), Some(0 | 1 | 4)), "{}", String::from_utf8_lossy(&out.stderr));
    let set: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let reports = set["reports"].as_array().unwrap();
    let lookup = reports
        .iter()
        .filter(|r| r["benchmark"] == "bench.tree.lookup" && param(r, "target") == "maple")
        .collect::<Vec<_>>();
    assert_eq!(lookup.len(), 1, "one pooled report per cell");
    // --quick: 3 rounds per process.
    assert_eq!(lookup[0]["runs"].as_array().unwrap().len(), 6);
    assert_eq!(param(lookup[0], "processes"), 2);
    let target = reports
        .iter()
        .find(|r| r["benchmark"] == "bench.tree.target" && param(r, "workload") == "lookup n=21")
        .expect("the lookup target at n=21");
    // Judged on both processes' rounds, but for those in which a batch waited for a CPU (another test's
    // processes run beside this one), which the note counts.
    let judged = target["runs"].as_array().unwrap().len();
    let left_out = format!("judged on the other {judged} runs: in {} of 6 runs", 6 - judged);
    assert!(
        judged == 6
            || target["notes"].to_string().contains(&left_out)
            || target["parameters"]["verdict"] == "not measurable",
        "judged on both processes' rounds: {target}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("in each of 2 processes, their rounds pooled"));
    let zero = bin().args(["bench", "tree", "--quick", "--processes", "0"]).output().expect("run vmspace");
    assert_eq!(zero.status.code(), Some(2));
}
