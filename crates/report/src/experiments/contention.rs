//! The proc-vs-map grid (the LPC 2021 talk's experiment): how much a reader of `/proc/PID/{maps, smaps,
//! smaps_rollup}` or of PROCMAP_QUERY slows a process that maps and unmaps, alone and with a busy task that
//! pauses (B=2) or never pauses (B=0), engine reader modes beside the kernel.
//!
//! The kernel's side is `vmspace_linux::contention` (a mapper process timing each mmap/munmap, scanner and busy
//! processes; one row of its sweep grid per point). The engine's sides run the same grid against an engine
//! `Mm`: a mapper thread calling `Mm::mmap`/`munmap` and reader threads in each reader mode.
//!
//! # Contract of a side's report
//! One report per grid row (point key: the row's label, e.g. `smaps, 1 scanner + 1 busy B=0`; the no-scanner
//! rows are each side's baseline), one run per sample, each with metrics `call_mean_ms`, `call_p99_ms`,
//! `call_max_ms`, `calls_count`, `scanner_reads_count`, and the latency distribution `call_min_ms` and
//! `call_<stem>_ms` for every stem of `vmspace_results::stats::CDF_QUANTILES`; parameters `procfile`, `busy`,
//! `busy_ms`.
//!
//! # The talk's table (`--full` only)
//! At the full length the plan adds the LPC 2021 talk's rows ([`vmspace_linux::talk`]): one scanner beside
//! 10, 100 and 1,000 busy tasks that never pause, for each proc file (the grid's rows give the talk's 0 and 1);
//! the section then has one talk table per proc file and side (rows: busy-task counts; the median, minimum
//! and maximum over the runs of the run's worst call, and the runs whose worst call exceeded 1 s). The CDF
//! figures leave those rows out.
//!
//! # A real agent (`vmspace report --contention-agent COMMAND`)
//! Two more rows, measured on the kernel's side only (the engine sides do not cover them: a real tool reads
//! the kernel's files): each scanner runs COMMAND in a loop (`vmspace_linux::contention`'s agents), alone and
//! beside one busy task that never pauses.
//!
//! # Target
//! An engine maps reader under per-VMA locks must slow the engine's mapper no more than the kernel's maps
//! reader slows the kernel's mapper: (engine mean / engine baseline) over (kernel mean / kernel baseline) with
//! one scanner, at most 1.0 run by run.

use std::time::Duration;

use vmspace_bench::contention::{MAX_MAPPER_WAIT_SHARE, MIN_SCANNER_CPU_SHARE, had_cpus};
use vmspace_linux::contention::{self, Config, ProcFile};
use vmspace_linux::talk;
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;
use vmspace_results::stats::CDF_QUANTILES;

use super::ids;
use super::{
    capitalise, count, in_words, med, missing_lines, mmm, pending_sentence, points, runs_of,
    unavailable_lines,
};
use crate::experiment::{
    Ctx, Experiment, Length, Plan, Side, SideInfo, Sides, param_str, run_sides, side_point, sides_estimate_s,
};
use crate::model::{Figure, Section, Table, ratio, sig3};
use crate::plot::{Chart, Legend, Point, Series, svg};
use crate::targets::{Goal, TargetResult};

/// The label of every side's baseline row.
pub const BASELINE: &str = "no scanner, no busy task";

/// The proc files of the grid, in table order.
pub const PROCFILES: [ProcFile; 4] =
    [ProcFile::Maps, ProcFile::Smaps, ProcFile::SmapsRollup, ProcFile::Query];

/// The contention experiment's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentionPlan {
    /// The grid's rows (`vmspace_linux::contention::sweep_grid`), each with the plan's samples, duration and
    /// region.
    pub rows: Vec<Config>,
}

impl ContentionPlan {
    /// [`ContentionPlan::new`] and, for an agent command, its two rows (module docs).
    pub fn with_agent(length: Length, agent: Option<&str>) -> ContentionPlan {
        let mut p = ContentionPlan::new(length);
        if let Some(cmd) = agent {
            let base = Config {
                procfile: ProcFile::None,
                agent: Some(cmd.to_string()),
                busy: 0,
                ..p.rows[0].clone()
            };
            p.rows.push(base.clone());
            p.rows.push(Config { busy: 1, busy_ms: 0, ..base });
        }
        p
    }

    /// The plan at `length`: the whole grid (14 rows); default: 3 runs of 1 s on 128 MiB; full
    /// (BENCHMARKS.md): 5 runs of 5 s on 128 MiB, and the talk's rows (module docs; 26 rows). Quick leaves out the B=2 rows (10 rows), 1 run of 0.1 s on
    /// 16 MiB. Smoke (the CLI's structure test) keeps the baseline and each reader alone, 1 run of 0.05 s on
    /// 4 MiB. Every side (the kernel and each engine reader mode) runs every row.
    pub fn new(length: Length) -> ContentionPlan {
        let (samples, secs, region_mib) = match length {
            Length::Smoke => (1, 0.05, 4),
            Length::Quick => (1, 0.05, 16),
            Length::Default => (2, 0.75, 128),
            Length::Full => (5, 5.0, 128),
        };
        let base =
            Config { samples, duration: Duration::from_secs_f64(secs), region_mib, ..Config::default() };
        let mut rows = contention::sweep_grid(&base);
        match length {
            Length::Smoke => rows.retain(|r| r.label() == BASELINE || r.busy == 0),
            Length::Quick => rows.retain(|r| r.busy == 0 || r.busy_ms == 0),
            Length::Default => {}
            Length::Full => {
                let more: Vec<usize> = talk::BUSY_COUNTS.into_iter().filter(|&n| n > 1).collect();
                rows.extend(talk::grid(&base, &PROCFILES, &more));
            }
        }
        ContentionPlan { rows }
    }
}

impl Plan for ContentionPlan {
    type Point = Config;
    fn points(&self) -> Vec<Config> {
        self.rows.clone()
    }
    fn point_key(&self, row: &Config) -> String {
        row.label()
    }
    fn point_s(&self, row: &Config) -> f64 {
        // Each run: the mapper populates its region (about 0.1 s per 128 MiB), a 200 ms warm-up, the run.
        row.samples as f64 * (row.duration.as_secs_f64() + 0.25 + row.region_mib as f64 / 1280.0)
    }
}

/// The kernel's side: `vmspace_linux::contention`.
pub struct KernelContention;

impl Side<ContentionPlan> for KernelContention {
    fn info(&self) -> SideInfo {
        SideInfo::new("kernel", "kernel")
    }

    fn measure(&self, _plan: &ContentionPlan, row: &Config, ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
        let host = ctx.host().clone();
        let (label, n) = (row.label(), row.samples);
        contention::run(row, &host, &mut |s| {
            ctx.step(&format!("kernel, {label}, run {} of {n}", s + 1), (s + 1) as f64 / n as f64)
        })
    }
}

/// The experiment: the kernel's side and the engine's (`crate::engine::contention_sides`, given to
/// [`Contention::new`]).
pub struct Contention {
    sides: Sides<ContentionPlan>,
    agent: Option<String>,
}

impl Contention {
    /// The kernel's side and the `engine` sides given.
    pub fn new(engine: Sides<ContentionPlan>) -> Contention {
        Contention::with_agent(engine, None)
    }

    /// [`Contention::new`] with the rows of a real agent command (module docs).
    pub fn with_agent(engine: Sides<ContentionPlan>, agent: Option<String>) -> Contention {
        let mut sides: Sides<ContentionPlan> = vec![Box::new(KernelContention)];
        sides.extend(engine);
        Contention { sides, agent }
    }

    fn plan(&self, length: Length) -> ContentionPlan {
        ContentionPlan::with_agent(length, self.agent.as_deref())
    }
}

/// The procfile of a report (`none` for the baselines).
fn procfile(r: &Report) -> &str {
    param_str(r, "procfile")
}

/// The row label without its proc file: `1 scanner + 1 busy B=0`.
fn without_procfile(label: &str) -> &str {
    match label.split_once(", ") {
        Some((pf, rest)) if PROCFILES.iter().any(|p| p.name() == pf) => rest,
        _ => label,
    }
}

/// The CDF of a report's runs: (latency ms, fraction of calls), from the medians over the runs.
pub fn cdf(r: &Report) -> Vec<Point> {
    let mut pts = Vec::new();
    if let Some(m) = med(r, "call_min_ms") {
        pts.push(Point::at(m, 0.0));
    }
    for (q, stem) in CDF_QUANTILES {
        if let Some(v) = med(r, &format!("call_{stem}_ms")) {
            pts.push(Point::at(v, q));
        }
    }
    if let Some(m) = med(r, "call_max_ms") {
        pts.push(Point::at(m, 1.0));
    }
    pts.retain(|p| p.x > 0.0);
    pts
}

impl Experiment for Contention {
    fn id(&self) -> &'static str {
        "contention"
    }

    fn title(&self) -> &'static str {
        "mmap/munmap latency while /proc is read (proc-vs-map)"
    }

    fn short(&self) -> &'static str {
        "Contention"
    }

    fn method(&self, length: Length, _host: &HostInfo) -> String {
        let p = ContentionPlan::new(length);
        let r = &p.rows[0];
        format!(
            "A mapper with a populated {} MiB anonymous region maps or unmaps a random 4 KiB page (50/50), timing \
             every call, {} µs pause between calls, on the first CPU; one scanner at nice 15 on the other CPU reads \
             /proc/MAPPER/<file> to the end in a loop (or walks it with PROCMAP_QUERY: query); a busy task at nice \
             0 beside it spins B ms then sleeps 1 ms (B=0: spins forever). {} run(s) of {:.2} s per row and side. \
             Ratios: the row's median over the same side's baseline (no scanner, no busy task). Kernel: processes \
             and the real /proc files, every row first; engine: threads on one Mm placed the same way (the mapper \
             thread pinned, scanner threads at nice 15), one side per reader mode, whole files per read.",
            r.region_mib,
            r.pause_us,
            r.samples,
            r.duration.as_secs_f64()
        )
    }

    fn load_effect(&self) -> &'static str {
        "every latency and ratio, above all the rows with a nice-15 scanner (it waits for a CPU while holding \
         locks)"
    }

    fn sides(&self) -> Vec<SideInfo> {
        self.sides.iter().map(|s| s.info()).collect()
    }

    fn estimate_s(&self, length: Length, _host: &HostInfo) -> f64 {
        sides_estimate_s(&self.plan(length), &self.sides)
    }

    fn run(&self, length: Length, ctx: &mut Ctx<'_>) -> anyhow::Result<()> {
        // The kernel's side over every row first: the engine's memory stays in this process once used, and the
        // kernel's mapper (forked from it) would carry it into every smaps walk of its scanners.
        let plan = self.plan(length);
        run_sides(&plan, &self.sides[..1], ctx)?;
        run_sides(&plan, &self.sides[1..], ctx)
    }

    fn present(&self, reports: &[&Report]) -> Section {
        let mut s = Section::new(self.id(), self.title());
        let infos = self.sides();
        s.unavailable = unavailable_lines(&infos);
        let available: Vec<&SideInfo> = infos.iter().filter(|i| i.unavailable.is_none()).collect();
        let mut t = Table::new(
            "the mapper's mmap/munmap call latency in ms, min/median/max over the runs; ratios: median over the \
             side's baseline median",
            &[
                "config",
                "side",
                "mean ms",
                "p99 ms",
                "max ms",
                "calls/run",
                "reads/run",
                "mean/base",
                "max/base",
            ],
        );
        let keys = points(reports);
        for key in &keys {
            for info in &available {
                let Some(r) = side_point(reports, info.id, key) else { continue };
                let base = side_point(reports, info.id, BASELINE);
                let rel = |m: &str| match (med(r, m), base.and_then(|b| med(b, m))) {
                    (Some(a), Some(b)) if b > 0.0 => ratio(a / b),
                    _ => "-".into(),
                };
                t.row(vec![
                    key.clone(),
                    info.name.to_string(),
                    mmm(r.metric("call_mean_ms"), ms),
                    med(r, "call_p99_ms").map_or("-".into(), ms),
                    mmm(r.metric("call_max_ms"), ms),
                    med(r, "calls_count").map_or("-".into(), count),
                    med(r, "scanner_reads_count").map_or("-".into(), count),
                    rel("call_mean_ms"),
                    rel("call_max_ms"),
                ]);
            }
        }
        s.tables.push(t);
        s.tables.extend(talk_tables(reports, &available));
        for pf in PROCFILES {
            let mut chart = Chart::new(
                &format!("The mapper's call latency with a {} reader (CDF)", reader_name(pf)),
                "mmap/munmap call latency, ms (logarithmic)",
                "fraction of calls at or below",
            );
            chart.x_log = true;
            chart.y_range = Some((0.0, 1.02));
            // Up to 16 lines that fill the plot from corner to corner: the legend goes beside it.
            chart.legend = Legend::Outside;
            for info in &available {
                let mut rows: Vec<&Report> = side_point(reports, info.id, BASELINE).into_iter().collect();
                rows.extend(
                    keys.iter()
                        .filter_map(|k| side_point(reports, info.id, k))
                        .filter(|r| procfile(r) == pf.name() && busy(r) <= 1),
                );
                for r in rows {
                    let pts = cdf(r);
                    if !pts.is_empty() {
                        let who =
                            if available.len() > 1 { format!("{}: ", info.name) } else { String::new() };
                        chart.series.push(Series {
                            name: format!("{who}{}", without_procfile(&r.label)),
                            points: pts,
                        });
                    }
                }
            }
            chart.missing = missing_lines(&infos);
            if let Ok(doc) = svg(&chart) {
                s.figures.push(Figure {
                    file: format!("contention-{}.svg", pf.name()),
                    title: chart.title.clone(),
                    caption: format!(
                        "Distribution of the mapper's mmap/munmap call latency while one scanner reads {} (alone, \
                         with a busy task that pauses, and one that never pauses), against the baseline without \
                         a scanner; medians over the runs of each quantile.",
                        reader_name(pf)
                    ),
                    svg: doc,
                });
            }
        }
        let mut words = Vec::new();
        for info in &available {
            let row_ratio = |label: &str| {
                let r = side_point(reports, info.id, label)?;
                let b = side_point(reports, info.id, BASELINE)?;
                Some(med(r, "call_mean_ms")? / med(b, "call_mean_ms")?)
            };
            let mut parts = Vec::new();
            for pf in PROCFILES {
                let alone = row_ratio(&format!("{}, 1 scanner", pf.name()));
                let starved = row_ratio(&format!("{}, 1 scanner + 1 busy B=0", pf.name()));
                if let Some(a) = alone {
                    let b = starved.map_or(String::new(), |b| format!(" (B=0: {})", ratio(b)));
                    parts.push(format!("{} {}{b}", reader_name(pf), ratio(a)));
                }
            }
            if !parts.is_empty() {
                words.push(format!(
                    "{}: one scanner leaves the mapper's mean call at {} of its baseline",
                    in_words(info),
                    parts.join(", ")
                ));
            }
        }
        s.verdict =
            if words.is_empty() { "nothing measured".into() } else { capitalise(&words.join("; ")) + "." };
        if available.iter().any(|i| i.id == "kernel") && !words.is_empty() {
            s.verdict.push_str(
                " Readers that take mmap_lock (smaps, smaps_rollup on 6.18) slow the mapper most; maps and \
                 PROCMAP_QUERY read under per-VMA locks.",
            );
        }
        s.verdict.push_str(&pending_sentence(&infos));
        s.collect_notes(reports.iter().copied());
        s
    }

    fn targets(&self, reports: &[&Report]) -> Vec<TargetResult> {
        let id = "contention.engine.per_vma_maps_over_kernel".to_string();
        let what = "mapper slowdown by a maps reader: engine per-VMA reader over the kernel's";
        let at = "maps, 1 scanner";
        let goal = Goal::AtMost(1.0);
        let infos = self.sides();
        let why = match infos.iter().find(|i| i.id == ids::READERS_PER_VMA) {
            None => Some("no engine reader under per-VMA locks in this build".to_string()),
            Some(i) => i.why_not(),
        };
        if let Some(why) = why {
            return vec![TargetResult::not_measured(id, self.id(), what, at, goal, &why)];
        }
        let slowdown = |side: &str| -> Vec<f64> {
            let (Some(r), Some(b)) = (side_point(reports, side, at), side_point(reports, side, BASELINE))
            else {
                return Vec::new();
            };
            let Some(base) = med(b, "call_mean_ms") else { return Vec::new() };
            runs_of(r, "call_mean_ms").into_iter().map(|v| v / base).collect()
        };
        let values = super::paired(&slowdown(ids::READERS_PER_VMA), &slowdown("kernel"));
        // A mapper that waited for a CPU, or a scanner that got none, measured the machine, not the reader
        // (vmspace_bench::contention::had_cpus); runs without the CPU shares (the kernel's) are not held
        // against the verdict.
        let (mut lacking, mut runs) = (0, 0);
        for side in [ids::READERS_PER_VMA, "kernel"] {
            for point in [at, BASELINE] {
                for run in side_point(reports, side, point).map_or(&[][..], |r| &r.runs[..]) {
                    if run.metrics.contains_key("mapper_wait_share") {
                        runs += 1;
                        lacking += usize::from(!had_cpus(&run.metrics, "", 0));
                    }
                }
            }
        }
        let j = vmspace_bench::judge::Judged::new(what, at, goal, values);
        let j = if lacking > 0 {
            j.not_measurable(format!(
                "in {lacking} of {runs} runs the mapper waited for a CPU over {:.0}% of its run or the scanner \
                 was on one under {:.0}%",
                100.0 * MAX_MAPPER_WAIT_SHARE,
                100.0 * MIN_SCANNER_CPU_SHARE
            ))
        } else {
            j
        };
        vec![TargetResult::from_judged(id, self.id(), j)]
    }
}

/// A report's busy-task count.
fn busy(r: &Report) -> u64 {
    r.parameters.get("busy").and_then(|v| v.as_u64()).unwrap_or(0)
}

/// The talk's tables (module docs): one per proc file and side, when the talk's rows were measured (more
/// than one busy task in some row).
fn talk_tables(reports: &[&Report], sides: &[&SideInfo]) -> Vec<Table> {
    if !reports.iter().any(|r| busy(r) > 1) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for pf in PROCFILES {
        for info in sides {
            let mut t = Table::new(
                format!(
                    "the LPC 2021 talk's table, {} reader, {}: each run's worst mmap/munmap call in ms, median, \
                     minimum and maximum over the runs; runs whose worst call exceeded 1 s; runs with a call \
                     still waiting when the window closed (cut there: a lower bound)",
                    reader_name(pf),
                    info.name
                ),
                &talk::HEADERS,
            );
            for n in talk::BUSY_COUNTS {
                let key = if n == 0 {
                    format!("{}, 1 scanner", pf.name())
                } else {
                    format!("{}, 1 scanner + {n} busy B=0", pf.name())
                };
                if let Some(cell) = side_point(reports, info.id, &key).and_then(talk::Cell::of) {
                    t.row(talk::row(&talk::Cell { busy: n, ..cell }));
                }
            }
            if !t.rows.is_empty() {
                out.push(t);
            }
        }
    }
    out
}

/// `maps`, `smaps`, `smaps_rollup`, `PROCMAP_QUERY`.
fn reader_name(pf: ProcFile) -> &'static str {
    match pf {
        ProcFile::Query => "PROCMAP_QUERY",
        other => other.name(),
    }
}

/// A latency in ms, three significant digits.
fn ms(v: f64) -> String {
    sig3(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn labels_and_cdfs() {
        assert_eq!(without_procfile("smaps, 1 scanner + 1 busy B=0"), "1 scanner + 1 busy B=0");
        assert_eq!(without_procfile(BASELINE), BASELINE);
        let plan = ContentionPlan::new(Length::Default);
        assert_eq!(plan.rows.len(), 14);
        assert_eq!(ContentionPlan::new(Length::Quick).rows.len(), 10);
        let full = ContentionPlan::new(Length::Full);
        assert_eq!(full.rows.len(), 26);
        assert!(full.rows.iter().any(|r| r.label() == "query, 1 scanner + 1000 busy B=0"));
        let labels: std::collections::BTreeSet<String> = full.rows.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), 26, "point keys are unique");
        assert!(talk_tables(&[], &[]).is_empty());
        assert_eq!(plan.point_key(&plan.rows[0]), BASELINE);
        let mut r = Report::new("kernel.contention", BASELINE, HostInfo::default());
        let mut m = BTreeMap::from([("call_min_ms".to_string(), 0.001), ("call_max_ms".to_string(), 2.0)]);
        for (i, (_, stem)) in CDF_QUANTILES.iter().enumerate() {
            m.insert(format!("call_{stem}_ms"), 0.002 * (i + 1) as f64);
        }
        r.push_run(m);
        r.summarise();
        let pts = cdf(&r);
        assert_eq!(pts.len(), CDF_QUANTILES.len() + 2);
        assert!(pts.windows(2).all(|w| w[0].x <= w[1].x && w[0].y <= w[1].y));
        assert_eq!((pts[0].y, pts.last().unwrap().y), (0.0, 1.0));
    }

    #[test]
    fn the_reader_target_is_not_measurable_when_the_mapper_or_scanner_lacked_a_cpu() {
        let exp = Contention::new(crate::engine::contention_sides());
        let row = |side: &str, point: &str, mean: f64, wait: f64| {
            let mut r = Report::new("bench.contention", point, HostInfo::default());
            r.param("side", side);
            r.param("point", point);
            for k in 0..3 {
                let mut m = BTreeMap::from([
                    ("call_mean_ms".to_string(), mean * (1.0 + 0.01 * k as f64)),
                    ("mapper_wait_share".to_string(), wait),
                ]);
                if point != BASELINE {
                    m.insert("scanner_cpu_share".to_string(), 0.99);
                }
                r.push_run(m);
            }
            r.summarise();
            r
        };
        let at = "maps, 1 scanner";
        let judge = |engine_wait: f64| {
            let reports = [
                row(ids::READERS_PER_VMA, BASELINE, 0.002, 0.01),
                row(ids::READERS_PER_VMA, at, 0.004, engine_wait),
                row("kernel", BASELINE, 0.006, 0.01),
                row("kernel", at, 0.008, 0.01),
            ];
            let refs: Vec<&Report> = reports.iter().collect();
            exp.targets(&refs).remove(0)
        };
        // Engine 2x its baseline against the kernel's 1.33x: missed, each side with its CPU.
        let t = judge(0.01);
        assert_eq!(t.status, vmspace_bench::judge::Status::Missed, "{t:?}");
        // The engine's mapper waited for a CPU 40% of its runs: the slowdown measured the machine.
        let t = judge(0.4);
        assert_eq!(t.status, vmspace_bench::judge::Status::NotMeasurable, "{t:?}");
        assert!(t.why.contains("in 3 of 12 runs the mapper waited for a CPU"), "{}", t.why);
    }
}
