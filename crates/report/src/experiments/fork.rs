//! fork() rate against the number of VMAs (the `__mt_dup` series' table), engine modes beside the kernel.
//!
//! The forking address space gets N extra single-page VMAs that cannot merge; then fork (and, on the kernel,
//! the child's `_exit` and the parent's wait) runs in a loop. The kernel's side is `vmspace_linux::fork`; the
//! engine's sides fork an `Mm` of the same VMAs, copying the VMA tree in one O(n) pass (`MapleTree::dup`, as
//! `kernel/fork.c: dup_mmap` does since the `__mt_dup` series) or re-inserting every VMA into an empty tree
//! (what it did before).
//!
//! # Contract of a side's report
//! One report per extra-VMA count (point key `+<N> VMAs`), one run per sample, each with metrics
//! `forks_per_s`, `forks_per_10s`, `fork_mean_us` and `vmas_duplicated_per_s`; parameters `extra_vmas` and
//! `total_vmas` (every VMA of the forking address space).
//!
//! # Target
//! At the largest count, the engine's fork with the tree copy must be at least as fast as with re-insertion
//! (forks per second, run by run): the `__mt_dup` series' point.

use std::time::Duration;

use vmspace_linux::fork;
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

use super::{
    capitalise, count, in_words, med, missing_lines, paired, pending_sentence, points, runs_of, spread,
    unavailable_lines,
};
use crate::engine;
use crate::experiment::{
    Ctx, Experiment, Length, Plan, Side, SideInfo, Sides, param_u64, run_sides, side_point, sides_estimate_s,
};
use crate::model::{Figure, Section, Table, sig3};
use crate::plot::{Chart, Legend, Point, Series, svg};
use crate::targets::{Goal, TargetResult};

/// The fork experiment's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkPlan {
    /// Extra VMA counts, ascending.
    pub vmas: Vec<usize>,
    /// Runs per count and side.
    pub samples: usize,
    /// Length of one run.
    pub duration: Duration,
}

impl ForkPlan {
    /// The plan at `length` on `host` (counts that fit under `vm.max_map_count`): quick 0, 100, 1,000 (1 run
    /// of 0.2 s); default 0, 100, 400, 1,600, 6,400, 25,600 (3 runs of 1 s); full (BENCHMARKS.md): the
    /// series' counts up to the limit, 5 runs of 2 s; smoke (the CLI's structure test): 0 and 100, 1 run of
    /// 0.05 s.
    pub fn new(length: Length, host: &HostInfo) -> ForkPlan {
        // Room for the process's own VMAs (binary, libraries, stacks of its threads) beside the extra ones.
        let max = host.max_map_count.unwrap_or(65530) as usize;
        let fit = |wanted: &[usize]| -> Vec<usize> {
            wanted.iter().copied().filter(|&n| n + fork::HEADROOM + 500 <= max).collect()
        };
        match length {
            Length::Smoke => {
                ForkPlan { vmas: fit(&[0, 100]), samples: 1, duration: Duration::from_millis(50) }
            }
            Length::Quick => {
                ForkPlan { vmas: fit(&[0, 100, 1000]), samples: 1, duration: Duration::from_millis(200) }
            }
            Length::Default => ForkPlan {
                vmas: fit(&[0, 100, 400, 1600, 6400, 25600]),
                samples: 3,
                duration: Duration::from_secs(1),
            },
            Length::Full => ForkPlan {
                vmas: fit(&fork::default_counts(host.max_map_count)),
                samples: 5,
                duration: Duration::from_secs(2),
            },
        }
    }
}

impl Plan for ForkPlan {
    type Point = usize;
    fn points(&self) -> Vec<usize> {
        self.vmas.clone()
    }
    fn point_key(&self, n: &usize) -> String {
        format!("+{n} VMAs")
    }
    fn point_s(&self, n: &usize) -> f64 {
        // Making the VMAs costs about 1 µs each (one mprotect per other page), beside the timed runs.
        self.samples as f64 * self.duration.as_secs_f64() + *n as f64 * 1.5e-6 + 0.01
    }
}

/// The kernel's side: `vmspace_linux::fork`.
pub struct KernelFork;

impl Side<ForkPlan> for KernelFork {
    fn info(&self) -> SideInfo {
        SideInfo::new("kernel", "kernel")
    }

    fn measure(&self, plan: &ForkPlan, &n: &usize, ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
        let cfg = fork::Config { vmas: vec![n], samples: plan.samples, duration: plan.duration, cpu: None };
        let host = ctx.host().clone();
        let k = plan.samples;
        let mut reports = fork::run(&cfg, &host, &mut |_, s| {
            ctx.step(&format!("kernel, +{n} VMAs, run {} of {k}", s + 1), (s + 1) as f64 / k as f64)
        })?;
        reports.pop().ok_or_else(|| anyhow::anyhow!("the fork experiment returned no report"))
    }
}

/// The experiment: the kernel and the engine's sides ([`engine::fork_sides`]).
pub struct Fork {
    sides: Sides<ForkPlan>,
}

impl Fork {
    /// The kernel's side and this build's engine sides.
    pub fn new() -> Fork {
        let mut sides: Sides<ForkPlan> = vec![Box::new(KernelFork)];
        sides.extend(engine::fork_sides());
        Fork { sides }
    }
}

impl Default for Fork {
    fn default() -> Self {
        Self::new()
    }
}

fn total_vmas(r: &Report) -> Option<u64> {
    param_u64(r, "total_vmas")
}

impl Experiment for Fork {
    fn id(&self) -> &'static str {
        "fork"
    }

    fn title(&self) -> &'static str {
        "fork() rate against the number of VMAs"
    }

    fn short(&self) -> &'static str {
        "Fork"
    }

    fn method(&self, length: Length, host: &HostInfo) -> String {
        let p = ForkPlan::new(length, host);
        format!(
            "N extra single-page VMAs that cannot merge (one region, every other page made writable), then fork in \
             a loop; kernel: fork + the child's _exit + wait, forking thread and child on one CPU; engine, once its sides land: Mm::fork \
             of an address space with the same VMAs, copying the tree (dup) or re-inserting every VMA. N = {}; {} \
             run(s) of {:.1} s per count and side. \"VMAs dup/10s\" = forks per 10 s x all VMAs (the __mt_dup \
             series' plateau measure).",
            p.vmas.iter().map(|n| count(*n as f64)).collect::<Vec<_>>().join(", "),
            p.samples,
            p.duration.as_secs_f64()
        )
    }

    fn load_effect(&self) -> &'static str {
        "every fork rate (the fork, the child's exit and the wait all need the CPU)"
    }

    fn sides(&self) -> Vec<SideInfo> {
        self.sides.iter().map(|s| s.info()).collect()
    }

    fn estimate_s(&self, length: Length, host: &HostInfo) -> f64 {
        sides_estimate_s(&ForkPlan::new(length, host), &self.sides)
    }

    fn run(&self, length: Length, ctx: &mut Ctx<'_>) -> anyhow::Result<()> {
        let plan = ForkPlan::new(length, ctx.host());
        run_sides(&plan, &self.sides, ctx)
    }

    fn present(&self, reports: &[&Report]) -> Section {
        let mut s = Section::new(self.id(), self.title());
        let infos = self.sides();
        s.unavailable = unavailable_lines(&infos);
        let mut t = Table::new(
            "forks per 10 s against VMAs: median [min-max] over the runs",
            &["extra VMAs", "VMAs", "side", "forks/10s", "µs/fork", "VMAs dup/10s"],
        );
        let mut chart = Chart::new(
            "fork() rate against the number of VMAs",
            "VMAs in the forking address space",
            "forks per 10 s",
        );
        chart.x_log = true;
        chart.y_log = true;
        chart.legend = Legend::UpperRight;
        let keys = points(reports);
        let available: Vec<&SideInfo> = infos.iter().filter(|i| i.unavailable.is_none()).collect();
        for key in &keys {
            for info in &available {
                let Some(r) = side_point(reports, info.id, key) else { continue };
                t.row(vec![
                    param_u64(r, "extra_vmas").map_or(key.clone(), |n| count(n as f64)),
                    total_vmas(r).map_or("-".into(), |n| count(n as f64)),
                    info.name.to_string(),
                    spread(r.metric("forks_per_10s"), count),
                    med(r, "fork_mean_us").map_or("-".into(), sig3),
                    med(r, "vmas_duplicated_per_s").map_or("-".into(), |v| count(v * 10.0)),
                ]);
            }
        }
        for info in &available {
            let pts: Vec<Point> = keys
                .iter()
                .filter_map(|k| side_point(reports, info.id, k))
                .filter_map(|r| Some(Point::of(total_vmas(r)? as f64, r.metric("forks_per_10s")?)))
                .collect();
            if !pts.is_empty() {
                chart.series.push(Series { name: info.name.to_string(), points: pts });
            }
        }
        chart.missing = missing_lines(&infos);
        s.tables.push(t);
        if let Ok(doc) = svg(&chart) {
            s.figures.push(Figure {
                file: "fork.svg".into(),
                title: chart.title.clone(),
                caption: "Forks per 10 s against the VMAs of the forking address space, per side (both axes \
                          logarithmic); bars: min-max over the runs."
                    .into(),
                svg: doc,
            });
        }
        let mut words = Vec::new();
        let kernel_last = keys.last().and_then(|k| side_point(reports, "kernel", k));
        for info in &available {
            let rows: Vec<&Report> = keys.iter().filter_map(|k| side_point(reports, info.id, k)).collect();
            let (Some(first), Some(last)) = (rows.first(), rows.last()) else { continue };
            let f = |r: &Report| med(r, "forks_per_10s").map_or("-".into(), count);
            let v = |r: &Report| total_vmas(r).map_or("-".into(), |n| count(n as f64));
            let mut w = format!(
                "{} forks {} times per 10 s with {} VMAs and {} with {}",
                in_words(info),
                f(first),
                v(first),
                f(last),
                v(last)
            );
            // The cost of one more VMA, from the two largest counts.
            if rows.len() >= 2 {
                let a = rows[rows.len() - 2];
                if let (Some(ua), Some(ub), Some(na), Some(nb)) =
                    (med(a, "fork_mean_us"), med(last, "fork_mean_us"), total_vmas(a), total_vmas(last))
                    && nb > na
                {
                    w.push_str(&format!(
                        ", {} µs more per VMA between those counts",
                        sig3((ub - ua) / (nb - na) as f64)
                    ));
                }
            }
            if let Some(peak) = rows.iter().filter_map(|r| med(r, "vmas_duplicated_per_s")).reduce(f64::max) {
                w.push_str(&format!(
                    " (at most {} million VMAs duplicated per 10 s)",
                    sig3(peak * 10.0 / 1e6)
                ));
            }
            if info.id != "kernel"
                && let (Some(k), Some(e)) =
                    (kernel_last.and_then(|r| med(r, "forks_per_s")), med(last, "forks_per_s"))
            {
                w.push_str(&format!(", {}x the kernel's rate there", sig3(e / k)));
            }
            words.push(w);
        }
        s.verdict =
            if words.is_empty() { "nothing measured".into() } else { capitalise(&words.join("; ")) + "." };
        s.verdict.push_str(&pending_sentence(&infos));
        s.collect_notes(reports.iter().copied());
        s
    }

    fn targets(&self, reports: &[&Report]) -> Vec<TargetResult> {
        let id = "fork.engine.dup_over_reinsertion".to_string();
        let what = "engine fork rate: tree copy (dup) over re-insertion";
        let goal = Goal::AtLeast(1.0);
        let infos = self.sides();
        let missing = infos
            .iter()
            .filter(|i| i.id == engine::FORK_DUP || i.id == engine::FORK_REINSERT)
            .find_map(SideInfo::why_not);
        if let Some(why) = missing {
            return vec![TargetResult::not_measured(id, self.id(), what, "largest VMA count", goal, &why)];
        }
        let keys = points(reports);
        let Some(last) = keys.iter().rev().find(|k| {
            side_point(reports, engine::FORK_DUP, k).is_some()
                && side_point(reports, engine::FORK_REINSERT, k).is_some()
        }) else {
            return vec![TargetResult::judge(id, self.id(), what, "largest VMA count", goal, Vec::new())];
        };
        let runs =
            |side| side_point(reports, side, last).map(|r| runs_of(r, "forks_per_s")).unwrap_or_default();
        let values = paired(&runs(engine::FORK_DUP), &runs(engine::FORK_REINSERT));
        vec![TargetResult::judge(id, self.id(), what, last, goal, values)]
    }
}
