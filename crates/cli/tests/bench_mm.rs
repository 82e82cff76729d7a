//! `vmspace bench mm --quick --json -`: the command runs end to end and prints one report set in the shared
//! schema with every part of the benchmark: mmap+munmap on the engine and the kernel with 0 and 1000 other VMAs
//! and their ratios, lookups in both modes with 1 and 2 threads, and bytes per VMA at each size.

use std::collections::BTreeSet;

mod common;
use common::{median, run_judged_bench};

#[test]
fn quick_json_has_the_shared_schema_and_every_part() {
    let set = run_judged_bench("mm");
    let reports = set["reports"].as_array().expect("reports array");

    let mut pairs = BTreeSet::new();
    let mut ratios = BTreeSet::new();
    let mut lookups = BTreeSet::new();
    let mut sizes = BTreeSet::new();
    let mut targets = Vec::new();
    for r in reports {
        let bench = r["benchmark"].as_str().unwrap();
        if bench == "bench.mm.target" {
            targets.push(r);
            continue;
        }
        assert!(r["host"]["kernel_release"].is_string());
        assert!(r["started_utc"].as_str().unwrap().ends_with('Z'));
        assert!(!r["runs"].as_array().unwrap().is_empty(), "{bench}: no runs");
        for run in r["runs"].as_array().unwrap() {
            for (name, v) in run["metrics"].as_object().unwrap() {
                let v = v.as_f64().unwrap();
                assert!(v.is_finite() && v > 0.0, "{bench} {}: {name} = {v}", r["label"]);
            }
        }
        let p = &r["parameters"];
        match bench {
            "bench.mm.mmap_munmap" => {
                assert!(median(r, "pairs_per_s") > 0.0);
                pairs.insert((
                    p["side"].as_str().unwrap().to_string(),
                    p["pages"].as_u64().unwrap(),
                    p["other_vmas"].as_u64().unwrap(),
                ));
            }
            "bench.mm.mmap_munmap_ratio" => {
                assert!(median(r, "engine_over_kernel") > 0.0);
                ratios.insert(p["other_vmas"].as_u64().unwrap());
            }
            "bench.mm.lookup" => {
                let threads = p["threads"].as_u64().unwrap();
                assert_eq!(r["placement"].as_array().unwrap().len() as u64, threads);
                assert!(median(r, "lookups_per_s") > 0.0);
                if p["mode"] == "lock_vma_under_rcu" {
                    assert_eq!(p["failed_lookups"], 0, "lookups of existing VMAs failed");
                }
                lookups.insert((p["mode"].as_str().unwrap().to_string(), threads));
            }
            "bench.mm.bytes_per_vma" => {
                assert!(median(r, "vma_object_bytes") > 0.0);
                let tree = median(r, "tree_node_bytes_per_vma");
                assert!(tree > 0.0 && tree < 256.0, "tree bytes per VMA {tree}");
                assert!(p["tree_live_nodes"].as_u64().unwrap() > 0);
                sizes.insert(p["vmas"].as_u64().unwrap());
            }
            other => panic!("unexpected benchmark {other}"),
        }
    }
    for side in ["engine", "kernel"] {
        for others in [0, 1000] {
            assert!(pairs.contains(&(side.to_string(), 1, others)), "missing {side} 1p {others} others");
        }
    }
    assert_eq!(ratios, BTreeSet::from([0, 1000]));
    for mode in ["lock_vma_under_rcu", "mmap_read_lock"] {
        for threads in [1, 2] {
            assert!(lookups.contains(&(mode.to_string(), threads)), "missing {mode} x{threads}");
        }
    }
    assert_eq!(sizes, BTreeSet::from([1000, 10_000]));
    // The targets README and BENCHMARKS call met: mmap+munmap with 1,000 others at least 4x the kernel (one value
    // per round), and bytes per VMA at most 192 at each size (exact, so decided).
    let goals: Vec<(&str, &str, &str)> = targets
        .iter()
        .map(|t| {
            let p = &t["parameters"];
            (p["goal"].as_str().unwrap(), p["at"].as_str().unwrap(), p["verdict"].as_str().unwrap())
        })
        .collect();
    assert_eq!(goals.len(), 3, "{goals:?}");
    assert_eq!((goals[0].0, goals[0].1), (">= 4.00x", "1000 other VMAs"));
    assert_eq!(targets[0]["runs"].as_array().unwrap().len(), 3);
    for (g, at, verdict) in &goals[1..] {
        assert_eq!(*g, "<= 192.00 B");
        assert!(at.ends_with(" VMAs"));
        assert!(["met", "missed"].contains(verdict), "{goals:?}");
    }
    let verdict = &set["verdict"];
    assert!(verdict["line"].as_str().unwrap().contains(" met, "), "{verdict}");
}
