//! The range trees: vmspace's maple tree against `BTreeMap`, `RwLock<BTreeMap>`, `ArcSwap<BTreeMap>`,
//! `scc::TreeIndex` and `SkipMap` (`vmspace bench tree`, `vmspace_bench::tree`, whose module docs describe
//! every workload), with its targets (BENCHMARKS.md "Range trees").
//!
//! Reports are `vmspace bench tree`'s own (`bench.tree.<workload>`, `bench.tree.target`). The bench
//! interleaves the structures' batches in rounds and takes every ratio to `BTreeMap` per round (the maple
//! tree's batch over `BTreeMap`'s batch of the same round); the 2-thread scaling and the reader's slowdown pair
//! neighbouring runs the same way. The targets are the bench's, judged on those per-round values by the one
//! rule of `vmspace_bench::judge` (met or missed only when the interval of the median is wholly on one side of
//! the goal, undecided otherwise), so the report and `bench tree` give the same verdicts.

use std::time::Duration;

use vmspace_bench::tree::{self as bench, Target, TreeConfig};
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

use super::{med, ratio_range, runs_of};
use crate::experiment::{Ctx, Experiment, Length, param_str, param_u64};
use crate::model::{Figure, Section, Table, sig3};
use crate::plot::{Chart, Legend, Point, Series, svg};
use crate::targets::{Goal, Status, TargetResult};

/// The compact table's rows: workload, unit.
const ROWS: [(&str, &str); 11] = [
    ("bench_load", "ns/lookup"),
    ("bench_mas_for_each", "ns/entry"),
    ("bench_awalk", "ns/search"),
    ("bench_fork", "ns/dup"),
    ("lookup", "ns/lookup"),
    ("iterate", "ns/entry"),
    ("churn", "ns/unmap+map"),
    ("gap", "ns/search"),
    ("dup", "ns/entry"),
    ("lookup_threads", "2T/1T"),
    ("churn_reader", "same/other tree"),
];

/// The bench's configuration at `length`: quick is `bench tree --quick`; default sizes 21, 1,000 and 100,000
/// with 6 rounds of 5 ms batches (6 pairs: the min-max interval covers the median 96.9% of the time); full is
/// `bench tree`'s own (BENCHMARKS.md); smoke (the CLI's structure test) is quick with 2 rounds of 0.5 ms.
pub fn config(length: Length) -> TreeConfig {
    match length {
        Length::Smoke => TreeConfig {
            timer: vmspace_bench::measure::Timer { batch: Duration::from_micros(500), repeats: 2 },
            threaded: Duration::from_millis(2),
            ..TreeConfig::quick()
        },
        Length::Quick => TreeConfig::quick(),
        Length::Default => TreeConfig {
            sizes: vec![21, 1000, 100_000],
            timer: vmspace_bench::measure::Timer { batch: Duration::from_millis(5), repeats: 6 },
            threaded: Duration::from_millis(15),
            ..TreeConfig::full()
        },
        Length::Full => TreeConfig::full(),
    }
}

/// The primary metric of a workload (as `vmspace_bench::tree` reports it).
fn primary(workload: &str) -> &'static str {
    match workload {
        "bench_mas_for_each" | "iterate" | "dup" => "ns_per_entry",
        "lookup_threads" => "scaling_2t_over_1t",
        "churn_reader" => "slowdown_same_tree",
        _ => "ns_per_op",
    }
}

fn find<'r>(reports: &[&'r Report], workload: &str, target: &str, n: u64) -> Option<&'r Report> {
    reports.iter().copied().find(|r| {
        param_str(r, "workload") == workload
            && param_str(r, "target") == target
            && param_u64(r, "n") == Some(n)
    })
}

/// The experiment.
pub struct Trees;

impl Experiment for Trees {
    fn id(&self) -> &'static str {
        "trees"
    }

    fn title(&self) -> &'static str {
        "Range trees: vmspace's maple tree against its peers"
    }

    fn short(&self) -> &'static str {
        "Range trees"
    }

    fn method(&self, length: Length, _host: &HostInfo) -> String {
        let c = config(length);
        format!(
            "vmspace bench tree: the kernel's benchmark shapes (lib/test_maple_tree.c: BENCH_LOAD, \
             BENCH_MAS_FOR_EACH, BENCH_AWALK, BENCH_FORK) and VMA-like layouts of n = {} ranges; every \
             structure's batches of about {} ms interleaved in {} rounds per cell (forward, then backward), each \
             cell the median time and the median of its per-round ratios to BTreeMap's batch of the same round; \
             1- and 2-thread runs, and a writer alone and with a reader, alternate the same way; single-threaded \
             work on CPU 0, thread i of a multi-threaded one on CPU i.",
            c.sizes.iter().map(|n| super::count(*n as f64)).collect::<Vec<_>>().join(", "),
            c.timer.batch.as_millis(),
            c.timer.repeats
        )
    }

    fn load_effect(&self) -> &'static str {
        "every time and ratio, above all the 2-thread scaling and the writer-with-reader slowdown"
    }

    fn estimate_s(&self, length: Length, _host: &HostInfo) -> f64 {
        match length {
            Length::Smoke => 2.0,
            Length::Quick => 4.0,
            Length::Default => 20.0,
            Length::Full => 100.0,
        }
    }

    fn run(&self, length: Length, ctx: &mut Ctx<'_>) -> anyhow::Result<()> {
        let cfg = config(length);
        let steps = cfg.steps().max(1) as f64;
        ctx.begin(self.estimate_s(length, ctx.host()));
        let mut done = 0.0;
        let results = bench::run_until(
            &cfg,
            &mut |what| {
                done += 1.0;
                ctx.step(what, done / steps);
            },
            &vmspace_linux::child::interrupted,
            "vmspace bench tree",
        );
        for r in results.set.reports {
            ctx.push(r);
        }
        Ok(())
    }

    fn present(&self, reports: &[&Report]) -> Section {
        let mut s = Section::new(self.id(), self.title());
        let targets: Vec<Target> = Target::ALL
            .into_iter()
            .filter(|t| reports.iter().any(|r| param_str(r, "target") == t.id()))
            .collect();
        let mut headers = vec!["workload (unit)", "n"];
        headers.extend(targets.iter().map(|t| t.name()));
        let mut t = Table::new(
            "median per operation (x = median of the per-round ratios to BTreeMap, batches interleaved); lookup_threads: 2-thread over 1-thread \
             throughput (M/s: millions of lookups per second on 2 threads); churn_reader: writer time beside a reader \
             of the same tree over beside a reader of another tree",
            &headers,
        );
        let mut sizes: Vec<u64> = reports.iter().filter_map(|r| param_u64(r, "n")).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for (workload, unit) in ROWS {
            for &n in &sizes {
                if !targets.iter().any(|tg| find(reports, workload, tg.id(), n).is_some()) {
                    continue;
                }
                let mut row = vec![format!("{workload} ({unit})"), super::count(n as f64)];
                for tg in &targets {
                    row.push(find(reports, workload, tg.id(), n).map_or("n/a".into(), |r| cell(r, workload)));
                }
                t.row(row);
            }
        }
        s.tables.push(t);
        let mut chart = Chart::new(
            "Lookup of the range containing a random address (guard per lookup)",
            "ranges in the map (n)",
            "ns per lookup (median)",
        );
        chart.x_log = true;
        chart.y_log = true;
        chart.legend = Legend::UpperLeft;
        for tg in &targets {
            let pts: Vec<Point> = sizes
                .iter()
                .filter_map(|&n| find(reports, "lookup", tg.id(), n))
                .filter_map(|r| Some(Point::of(param_u64(r, "n")? as f64, r.metric("ns_per_op")?)))
                .collect();
            if !pts.is_empty() {
                chart.series.push(Series { name: tg.name().to_string(), points: pts });
            }
        }
        if let Ok(doc) = svg(&chart) {
            s.figures.push(Figure {
                file: "trees-lookup.svg".into(),
                title: chart.title.clone(),
                caption:
                    "Lookup time against the number of ranges per structure (both axes logarithmic); bars: \
                          min-max over the timed batches."
                        .into(),
                svg: doc,
            });
        }
        let maple = |workloads: &[&str], m: &str| -> Vec<f64> {
            reports
                .iter()
                .filter(|r| {
                    param_str(r, "target") == "maple" && workloads.contains(&param_str(r, "workload"))
                })
                .filter_map(|r| med(r, m))
                .collect()
        };
        let lookup = maple(&["bench_load", "lookup"], "ratio_to_btreemap");
        if lookup.is_empty() {
            s.verdict = "nothing measured".into();
        } else {
            s.verdict = format!(
                "vmspace's maple tree looks up in {} BTreeMap's time, iterates at {} its time per entry and copies \
                 at {} BTreeMap::clone's; two threads look up {} as fast as one, and a reader of the same tree slows \
                 its writer {} more than a reader of another tree does.",
                ratio_range(&lookup),
                ratio_range(&maple(&["bench_mas_for_each", "iterate"], "ratio_to_btreemap")),
                ratio_range(&maple(&["bench_fork", "dup"], "ratio_to_btreemap")),
                ratio_range(&maple(&["lookup_threads"], "scaling_2t_over_1t")),
                ratio_range(&maple(&["churn_reader"], "slowdown_same_tree")),
            );
        }
        let wrong: Vec<&str> = reports
            .iter()
            .filter(|r| r.notes.iter().any(|n| n.starts_with("WRONG")))
            .map(|r| r.label.as_str())
            .collect();
        if !wrong.is_empty() {
            s.notes.push(format!("wrong answers (timings not comparable): {}", wrong.join(", ")));
        }
        // The load note repeats on every report; keep it once.
        s.collect_notes(reports.iter().filter(|r| r.benchmark == "bench.tree.lookup").take(1).copied());
        s
    }

    fn targets(&self, reports: &[&Report]) -> Vec<TargetResult> {
        // The bench's own targets, with their per-round values (the maple tree's ratio to BTreeMap's batch of the
        // same round, its 2-thread over 1-thread rate of the same round, its writer beside a reader of the same
        // tree over beside a reader of another tree of the same round), judged by the one rule (`vmspace_bench::judge`) that `bench tree` applies too.
        reports
            .iter()
            .filter(|r| r.benchmark == "bench.tree.target")
            .filter_map(|d| {
                let at = param_str(d, "workload");
                let (workload, n) = match at.split_once(" n=") {
                    Some((w, n)) => (w, n.parse::<u64>().unwrap_or(0)),
                    None => (at, 0),
                };
                let goal = Goal::parse(param_str(d, "goal"))?;
                let mut t = TargetResult::judge(
                    format!("trees.{workload}.n={n}"),
                    self.id(),
                    &d.label,
                    &format!("{workload} n={n}"),
                    goal,
                    runs_of(d, "ratio"),
                );
                // A miss the bench judged not measurable because its control missed too (the 2-thread scaling
                // when unsynchronised BTreeMap did not scale either) stays so, with the bench's reason; so does
                // a miss older sets recorded as undecided for that reason.
                let bench = Status::parse(param_str(d, "verdict"));
                if matches!(bench, Some(Status::Undecided | Status::NotMeasurable))
                    && t.status == Status::Missed
                {
                    t.status = bench.unwrap_or(Status::Undecided);
                    t.why = d.notes.first().cloned().unwrap_or_default();
                }
                Some(t)
            })
            .collect()
    }
}

/// One cell: `53.3 (0.77x)`, or `1.83x (73 Mops/s)` for the scaling, `2.94x` for the slowdown.
fn cell(r: &Report, workload: &str) -> String {
    let m = |k: &str| med(r, k);
    let wrong = if r.notes.iter().any(|n| n.starts_with("WRONG")) { "!" } else { "" };
    match workload {
        "lookup_threads" => match (m("scaling_2t_over_1t"), m("mops_per_s_2t")) {
            (Some(s), Some(ops)) => format!("{}x ({} M/s)", sig3(s), sig3(ops)),
            _ => "-".into(),
        },
        "churn_reader" => m("slowdown_same_tree").map_or("-".into(), |s| format!("{}x", sig3(s))),
        _ => match (m(primary(workload)), m("ratio_to_btreemap")) {
            (Some(v), Some(x)) => format!("{}{wrong} ({}x)", sig3(v), sig3(x)),
            (Some(v), None) => format!("{}{wrong}", sig3(v)),
            _ => "-".into(),
        },
    }
}
