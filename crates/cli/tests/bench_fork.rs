//! `vmspace bench fork --quick --json -`: the command runs end to end and prints one report set in the shared
//! schema with, for every count and page variant, the engine's tree-copy and re-insertion rows, their ratio,
//! the kernel's row and the memory report, and a verdict over every target.

mod common;

use common::{bin, median, run_judged_bench};
use std::collections::BTreeSet;

#[test]
fn quick_json_has_the_shared_schema_and_every_row() {
    let set = run_judged_bench("fork");

    let (mut rows, mut ratios, mut memory) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut targets = 0;
    for r in set["reports"].as_array().expect("reports array") {
        assert!(r["host"]["kernel_release"].is_string());
        let p = &r["parameters"];
        let key = || (p["pages_per_vma"].as_u64().unwrap(), p["extra_vmas"].as_u64().unwrap());
        match r["benchmark"].as_str().unwrap() {
            "bench.fork" => {
                for run in r["runs"].as_array().unwrap() {
                    for (name, v) in run["metrics"].as_object().unwrap() {
                        let v = v.as_f64().unwrap();
                        assert!(v.is_finite() && v > 0.0, "{} {name} = {v}", r["label"]);
                    }
                }
                assert!(median(r, "forks_per_s") > 0.0);
                let total = p["total_vmas"].as_u64().unwrap();
                let (pages, extra) = key();
                if p["side"] == "engine" {
                    assert_eq!(total, 21 + extra, "{}", r["label"]);
                    assert!(median(r, "fork_call_us") <= median(r, "fork_mean_us"));
                } else {
                    assert!(total > extra, "{}", r["label"]);
                }
                rows.insert((p["mode"].as_str().unwrap().to_string(), pages, extra));
            }
            "bench.fork.ratio" => {
                assert!(median(r, "reinsert_over_tree_copy") > 0.0);
                ratios.insert(key());
            }
            "bench.fork.memory" => {
                let b = median(r, "parent_bytes_per_vma");
                assert!(b > 100.0 && b < 1000.0, "{}: {b}", r["label"]);
                assert!(median(r, "child_tree_copy_bytes_per_vma") > 100.0);
                assert!(median(r, "child_reinsert_bytes_per_vma") > 100.0);
                if key().0 == 1 {
                    let pt = median(r, "engine_page_table_bytes_per_page");
                    assert!(pt > 0.0 && pt < 4096.0 * 4.0, "{}: {pt}", r["label"]);
                    // 1000 pages (4 MiB) need at least one new PTE table in the kernel too; 100 may fit in one
                    // the process already had.
                    if key().1 >= 1000 {
                        assert!(median(r, "kernel_page_table_bytes_per_page") > 0.0, "{}", r["label"]);
                    }
                }
                memory.insert(key());
            }
            "bench.fork.target" => {
                assert!(p["goal"].is_string());
                // `met` is true or false when the target was decided, null when undecided or not measured.
                match p["verdict"].as_str().unwrap() {
                    "met" | "missed" => assert_eq!(p["met"].as_bool(), Some(p["verdict"] == "met")),
                    "undecided" | "not measured" | "not measurable" => assert!(p["met"].is_null()),
                    other => panic!("unknown verdict {other}"),
                }
                targets += 1;
            }
            other => panic!("unexpected benchmark {other}"),
        }
    }
    let keys: BTreeSet<(u64, u64)> = [0, 1].iter().flat_map(|&p| [0, 100, 1000].map(|e| (p, e))).collect();
    for mode in ["tree-copy", "reinsert", "kernel"] {
        for &(pages, extra) in &keys {
            assert!(rows.contains(&(mode.to_string(), pages, extra)), "missing {mode} {pages} {extra}");
        }
    }
    assert_eq!(ratios, keys);
    assert_eq!(memory, keys);
    // The 100,000-VMA rate (not measured here), the ratio at 121 and 1021 VMAs in both variants, bytes per VMA
    // at 1021 VMAs in both variants (smaller counts are not judged).
    assert_eq!(targets, 1 + 4 + 2);
    let verdict = &set["verdict"];
    // Every measured target has a verdict (undecided when within the judge's resolution of its goal).
    let decided = verdict["met"].as_u64().unwrap() + verdict["missed"].as_u64().unwrap();
    assert_eq!(decided + verdict["undecided"].as_u64().unwrap_or(0), 6, "{verdict}");
}

#[test]
fn an_empty_count_list_is_a_usage_error() {
    let out = bin()
        .args(["bench", "fork", "--quick", "--max", "0", "--vmas", "100"])
        .output()
        .expect("run vmspace");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
