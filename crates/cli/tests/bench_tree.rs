//! `vmspace bench tree --quick --json -`: the command runs end to end and prints one report set in the shared
//! schema, with a report for every workload, size and structure, finite positive measurements, and a verdict
//! for every issue target.

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

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
    let out = Command::new(env!("CARGO_BIN_EXE_vmspace"))
        .args(["bench", "tree", "--quick", "--json", "-"])
        .output()
        .expect("run vmspace");
    // Exit status 0 when every measured target is met, 1 when one is missed; the verdict says which.
    let code = out.status.code();
    assert!(matches!(code, Some(0 | 1)), "vmspace failed: {}", String::from_utf8_lossy(&out.stderr));
    let set: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let verdict = &set["verdict"];
    assert_eq!(verdict["passed"].as_bool(), Some(code == Some(0)), "{verdict}");
    let (met, missed) = (verdict["met"].as_u64().unwrap(), verdict["missed"].as_u64().unwrap());
    assert!(verdict["line"].as_str().unwrap().starts_with(&format!("{met} met, {missed} missed")));
    // The table still goes to standard error, closed by the same verdict line.
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(table.contains(&format!("verdict: {met} met, {missed} missed")), "{table}");
    assert_eq!(set["schema"], "vmspace.report.v1");
    assert!(set["command"].as_str().unwrap().contains("bench tree --quick --json -"));
    let reports = set["reports"].as_array().expect("reports array");

    let mut cells = BTreeSet::new();
    for r in reports {
        let bench = r["benchmark"].as_str().unwrap();
        assert!(bench.starts_with("bench.tree."), "{bench}");
        assert!(r["host"]["kernel_release"].is_string());
        assert!(r["started_utc"].as_str().unwrap().ends_with('Z'));
        let runs = r["runs"].as_array().unwrap();
        if bench == "bench.tree.target" {
            assert!(param(r, "met").is_boolean());
            assert!(param(r, "goal").is_string());
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
        if target != "btree"
            && !workload.starts_with("lookup_threads")
            && !workload.starts_with("churn_reader")
        {
            assert!(summary.contains_key("ratio_to_btreemap"), "{bench} {target} n={n}: no ratio");
        }
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
    // Lookup, iteration and dup on the kernel shape and each size, scaling and churn on each size.
    assert_eq!(verdicts, 3 * (1 + 2) + 2 * 2);
}

#[test]
fn unknown_target_is_rejected() {
    let out = Command::new(env!("CARGO_BIN_EXE_vmspace"))
        .args(["bench", "tree", "--quick", "--targets", "btree,nosuch"])
        .output()
        .expect("run vmspace");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown target"));
}
