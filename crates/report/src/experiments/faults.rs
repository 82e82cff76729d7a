//! Page faults per second against threads (the per-VMA lock series' microbenchmark), engine modes beside the
//! kernel.
//!
//! Each thread maps a private anonymous region, writes one byte into every page (one minor fault each) and
//! unmaps it, again and again; all threads share one address space, so their faults meet in the VMA tree and
//! the VMA locks and their mmap/munmap calls in the mmap_lock. The kernel's side is
//! `vmspace_linux::faults` (real page faults, `MADV_NOHUGEPAGE`); the engine's sides run the same loop on one
//! `Mm` through the engine's fault path, with per-VMA locks or under the mmap_lock only.
//!
//! # Contract of a side's report
//! One report per thread count (point key `T=<threads>`), one run per sample of the plan, each run with metrics
//! `faults_per_s` (all threads) and `faults_per_s_per_thread`; parameter `threads`; the threads' placement.
//!
//! # Target
//! The engine's per-VMA locks must keep faults scaling where the mmap_lock does not: at the most threads, the
//! per-thread rate over the 1-thread rate with per-VMA locks, over the same with the mmap_lock only, at least
//! 1.0 (run by run).

use std::time::Duration;

use vmspace_linux::faults;
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

use super::{
    capitalise, count, in_words, med, missing_lines, pending_sentence, points, runs_of, spread,
    unavailable_lines,
};
use crate::engine;
use crate::experiment::{
    Ctx, Experiment, Length, Plan, Side, SideInfo, Sides, param_u64, run_sides, side_point, sides_estimate_s,
};
use crate::model::{Figure, Section, Table};
use crate::plot::{Chart, Legend, Point, Series, svg};
use crate::targets::{Goal, TargetResult};

/// The fault experiment's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultsPlan {
    /// Thread counts, ascending.
    pub threads: Vec<usize>,
    /// Runs per thread count and side.
    pub samples: usize,
    /// Length of one run.
    pub duration: Duration,
    /// Each thread's region, MiB.
    pub region_mib: usize,
}

impl FaultsPlan {
    /// The plan at `length` on `host`: 1 to all usable CPUs (at most 8) threads; quick: 1 run of 0.2 s on 4
    /// MiB regions; default: 3 runs of 2 s; full (BENCHMARKS.md): 5 runs of 5 s, 16 MiB regions; smoke (the CLI's
    /// structure test): 1 run of 0.05 s on 2 MiB.
    pub fn new(length: Length, host: &HostInfo) -> FaultsPlan {
        let cpus = host.cpus_usable.len().clamp(1, 8);
        let threads = (1..=cpus).collect();
        let (samples, secs, region_mib) = match length {
            Length::Smoke => (1, 0.05, 2),
            Length::Quick => (1, 0.2, 4),
            Length::Default => (3, 2.0, 16),
            Length::Full => (5, 5.0, 16),
        };
        FaultsPlan { threads, samples, duration: Duration::from_secs_f64(secs), region_mib }
    }
}

impl Plan for FaultsPlan {
    type Point = usize;
    fn points(&self) -> Vec<usize> {
        self.threads.clone()
    }
    fn point_key(&self, t: &usize) -> String {
        format!("T={t}")
    }
    fn point_s(&self, _t: &usize) -> f64 {
        self.samples as f64 * (self.duration.as_secs_f64() + 0.02)
    }
}

/// The kernel's side: `vmspace_linux::faults`.
pub struct KernelFaults;

impl Side<FaultsPlan> for KernelFaults {
    fn info(&self) -> SideInfo {
        SideInfo::new("kernel", "kernel")
    }

    fn measure(&self, plan: &FaultsPlan, &t: &usize, ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
        let cfg = faults::Config {
            threads: vec![t],
            samples: plan.samples,
            duration: plan.duration,
            region_mib: plan.region_mib,
            cpus: None,
        };
        let host = ctx.host().clone();
        let n = plan.samples;
        let mut reports = faults::run(&cfg, &host, &mut |_, s| {
            ctx.step(&format!("kernel, T={t}, run {} of {n}", s + 1), (s + 1) as f64 / n as f64)
        })?;
        reports.pop().ok_or_else(|| anyhow::anyhow!("the fault experiment returned no report"))
    }
}

/// The experiment: the kernel and the engine's sides ([`engine::faults_sides`]).
pub struct Faults {
    sides: Sides<FaultsPlan>,
}

impl Faults {
    /// The kernel's side and this build's engine sides.
    pub fn new() -> Faults {
        let mut sides: Sides<FaultsPlan> = vec![Box::new(KernelFaults)];
        sides.extend(engine::faults_sides());
        Faults { sides }
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self::new()
    }
}

/// Per side: per-run per-thread rate at `t` over the median per-thread rate at 1 thread.
fn scaling_runs(reports: &[&Report], side: &str, t: usize) -> Vec<f64> {
    let (Some(one), Some(many)) =
        (side_point(reports, side, "T=1"), side_point(reports, side, &format!("T={t}")))
    else {
        return Vec::new();
    };
    let Some(base) = med(one, "faults_per_s_per_thread") else { return Vec::new() };
    runs_of(many, "faults_per_s_per_thread").into_iter().map(|v| v / base).collect()
}

fn most_threads(reports: &[&Report]) -> usize {
    reports.iter().filter_map(|r| param_u64(r, "threads")).max().unwrap_or(1) as usize
}

impl Experiment for Faults {
    fn id(&self) -> &'static str {
        "faults"
    }

    fn title(&self) -> &'static str {
        "Page faults per second against threads"
    }

    fn short(&self) -> &'static str {
        "Faults"
    }

    fn method(&self, length: Length, host: &HostInfo) -> String {
        let p = FaultsPlan::new(length, host);
        format!(
            "Each thread maps a private anonymous {} MiB region (MADV_NOHUGEPAGE), writes one byte per page (one \
             minor fault each) and unmaps it, in a loop; the threads share one address space; thread i runs on \
             CPU i. {} run(s) of {:.1} s per thread count ({}) and side. Kernel: real page faults (the per-VMA \
             lock series' microbenchmark). Engine, once its sides land: the same loop on one Mm, through the engine's fault path with \
             per-VMA locks or with the mmap_lock only.",
            p.region_mib,
            p.samples,
            p.duration.as_secs_f64(),
            p.threads.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
        )
    }

    fn load_effect(&self) -> &'static str {
        "every fault rate, above all the per-thread rate at more than one thread"
    }

    fn sides(&self) -> Vec<SideInfo> {
        self.sides.iter().map(|s| s.info()).collect()
    }

    fn estimate_s(&self, length: Length, host: &HostInfo) -> f64 {
        sides_estimate_s(&FaultsPlan::new(length, host), &self.sides)
    }

    fn run(&self, length: Length, ctx: &mut Ctx<'_>) -> anyhow::Result<()> {
        let plan = FaultsPlan::new(length, ctx.host());
        run_sides(&plan, &self.sides, ctx)
    }

    fn present(&self, reports: &[&Report]) -> Section {
        let mut s = Section::new(self.id(), self.title());
        let infos = self.sides();
        s.unavailable = unavailable_lines(&infos);
        let mut t = Table::new(
            "faults per second against threads: median [min-max] over the runs; per thread vs T=1 on the same side",
            &["threads", "side", "faults/s", "per thread/s", "per thread vs T=1", "CPUs"],
        );
        let mut chart = Chart::new(
            "Page faults per second against threads",
            "threads",
            "faults per second (all threads)",
        );
        chart.legend = Legend::LowerRight;
        chart.x_integer = true;
        let keys = points(reports);
        let most = most_threads(reports);
        chart.x_range = Some((0.5, most as f64 + 0.5));
        for key in &keys {
            for info in infos.iter().filter(|i| i.unavailable.is_none()) {
                let Some(r) = side_point(reports, info.id, key) else { continue };
                let base =
                    side_point(reports, info.id, "T=1").and_then(|b| med(b, "faults_per_s_per_thread"));
                let pt = med(r, "faults_per_s_per_thread");
                t.row(vec![
                    param_u64(r, "threads").map_or(key.clone(), |t| t.to_string()),
                    info.name.to_string(),
                    spread(r.metric("faults_per_s"), count),
                    pt.map_or("-".into(), count),
                    match (pt, base) {
                        (Some(p), Some(b)) => format!("{:.0}%", 100.0 * p / b),
                        _ => "-".into(),
                    },
                    r.placement
                        .iter()
                        .map(|p| p.cpu.map_or("-".into(), |c| c.to_string()))
                        .collect::<Vec<_>>()
                        .join(","),
                ]);
            }
        }
        for info in infos.iter().filter(|i| i.unavailable.is_none()) {
            let pts: Vec<Point> = keys
                .iter()
                .filter_map(|k| side_point(reports, info.id, k))
                .filter_map(|r| Some(Point::of(param_u64(r, "threads")? as f64, r.metric("faults_per_s")?)))
                .collect();
            if !pts.is_empty() {
                chart.series.push(Series { name: info.name.to_string(), points: pts });
            }
        }
        chart.missing = missing_lines(&infos);
        s.tables.push(t);
        if let Ok(doc) = svg(&chart) {
            s.figures.push(Figure {
                file: "faults.svg".into(),
                title: chart.title.clone(),
                caption:
                    "Faults per second of all threads against the thread count, per side; bars: min-max over \
                          the runs."
                        .into(),
                svg: doc,
            });
        }
        let mut words = Vec::new();
        for info in infos.iter().filter(|i| i.unavailable.is_none()) {
            let one = side_point(reports, info.id, "T=1").and_then(|r| med(r, "faults_per_s_per_thread"));
            let many = side_point(reports, info.id, &format!("T={most}"))
                .and_then(|r| med(r, "faults_per_s_per_thread"));
            match (one, many) {
                (Some(a), Some(b)) if most > 1 => words.push(format!(
                    "{} keeps {:.0}% of its 1-thread rate per thread at {most} threads ({} faults/s on one thread)",
                    in_words(info),
                    100.0 * b / a,
                    count(a)
                )),
                (Some(a), _) => words.push(format!("{} takes {} faults/s on one thread", in_words(info), count(a))),
                _ => {}
            }
        }
        s.verdict =
            if words.is_empty() { "nothing measured".into() } else { capitalise(&words.join("; ")) + "." };
        s.verdict.push_str(&pending_sentence(&infos));
        s.collect_notes(reports.iter().copied());
        s
    }

    fn targets(&self, reports: &[&Report]) -> Vec<TargetResult> {
        let id = "faults.engine.per_vma_over_mmap_lock".to_string();
        let what = "engine fault scaling per thread: per-VMA locks over mmap_lock only";
        let goal = Goal::AtLeast(1.0);
        let infos = self.sides();
        let missing = infos
            .iter()
            .filter(|i| i.id == engine::FAULTS_PER_VMA || i.id == engine::FAULTS_MMAP_LOCK)
            .find_map(SideInfo::why_not);
        if let Some(why) = missing {
            return vec![TargetResult::not_measured(id, self.id(), what, "most threads", goal, &why)];
        }
        let most = most_threads(reports);
        if most < 2 {
            return vec![TargetResult::not_measured(
                id,
                self.id(),
                what,
                "most threads",
                goal,
                "needs 2 or more threads",
            )];
        }
        let values = super::paired(
            &scaling_runs(reports, engine::FAULTS_PER_VMA, most),
            &scaling_runs(reports, engine::FAULTS_MMAP_LOCK, most),
        );
        vec![TargetResult::judge(id, self.id(), what, &format!("T={most}"), goal, values)]
    }
}
