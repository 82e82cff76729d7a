//! fork() rate against the number of VMAs (the `__mt_dup` series' table), engine modes beside the kernel.
//!
//! The forking address space gets N extra single-page VMAs that cannot merge; then fork (and, on the kernel,
//! the child's `_exit` and the parent's wait; on the engine, the child's drop) runs in a loop. Each count runs
//! without pages and (at fewer counts) with one faulted page per VMA, so that fork also copies page tables
//! (`copy_page_range`) and anon_vmas. The kernel's side is `vmspace_linux::fork`; the engine's sides
//! ([`crate::engine`]) fork an `Mm` of 21 + N VMAs made the same way (`vmspace_bench::fork::engine_parent` and
//! `engine_run`, what `vmspace bench fork` measures), copying the VMA tree in one O(n) pass (`MapleTree::dup`,
//! as `kernel/fork.c: dup_mmap` does since the `__mt_dup` series) or re-inserting every VMA into an empty tree
//! (what it did before).
//!
//! The kernel's side runs over every point first, then the engine's: once the engine has used its VMA pool,
//! tree nodes and frames they stay mapped in this process, and the kernel's fork would copy their page tables
//! too. The kernel's side covers only the counts that fit under `vm.max_map_count`; the engine's go beyond
//! (at least 100,000 VMAs, where the copy rate is judged).
//!
//! # Contract of a side's report
//! One report per point: extra-VMA count and pages (point key `+<N> VMAs`, or `+<N> VMAs, 1 page each`), one
//! run per sample, each with metrics `forks_per_s`, `forks_per_10s`, `fork_mean_us` and
//! `vmas_duplicated_per_s`, and for the targets `fork_call_us` and `vmas_copied_per_s_in_fork` (the fork call
//! alone); parameters `extra_vmas`, `total_vmas` (every VMA of the forking address space) and `pages_per_vma`
//! (0 or 1).
//!
//! # Targets
//! The goals `vmspace bench fork` judges (its constants, `vmspace_bench::fork`), here run by run:
//! - without pages, the tree copy duplicates at least 40 million VMAs per second in the fork call at every
//!   count of at least 100,000 VMAs (each run's rate over 40 M/s, at least 1);
//! - at the same counts, the fork call moves its bytes per VMA at least at 0.8 of this machine's memcpy of as
//!   many bytes, measured after each run (`vmspace_bench::fork` module docs, "The copy's bound"; each run's
//!   `share_of_memcpy` over 0.8, at least 1);
//! - the tree copy's fork call is faster than re-insertion's at every count of at least 100 VMAs, without and
//!   with pages (paired runs: re-insertion's `fork_call_us` over the copy's, above 1).

use std::time::Duration;

use vmspace_bench::fork::{
    COPY_JUDGED_FROM, MIN_M_VMAS_COPIED_PER_S, MIN_SHARE_OF_MEMCPY, RATIO_JUDGED_FROM,
};
use vmspace_linux::fork;
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

use super::ids;
use super::{
    capitalise, count, in_words, med, missing_lines, paired, pending_sentence, points, runs_of, spread,
    unavailable_lines,
};
use crate::experiment::{
    Ctx, Experiment, Length, Plan, Side, SideInfo, Sides, param_str, param_u64, run_sides, side_point,
    sides_estimate_s,
};
use crate::model::{Figure, Section, Table, sig3};
use crate::plot::{Chart, Legend, Point, Series, svg};
use crate::targets::{Goal, TargetResult};
use vmspace_bench::judge::Judged;

/// The fork experiment's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkPlan {
    /// Extra VMA counts measured without pages, ascending.
    pub vmas: Vec<usize>,
    /// Extra VMA counts measured with one faulted page per VMA, ascending.
    pub page_vmas: Vec<usize>,
    /// The largest extra count the kernel's side measures: what fits under `vm.max_map_count` beside the
    /// process's own VMAs (binary, libraries, stacks of its threads).
    pub kernel_max: usize,
    /// Runs per point and side.
    pub samples: usize,
    /// Length of one run (each makes at least one fork).
    pub duration: Duration,
}

/// One point of the plan: an extra VMA count, without or with one faulted page per VMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForkPoint {
    /// Extra VMAs.
    pub extra: usize,
    /// Whether every VMA has one faulted page.
    pub pages: bool,
}

/// The point key of `extra` VMAs with or without pages: `+100 VMAs`, `+100 VMAs, 1 page each`.
pub fn key(extra: usize, pages: bool) -> String {
    format!("+{extra} VMAs{}", if pages { ", 1 page each" } else { "" })
}

/// The engine-only count of every length but smoke: the `__mt_dup` series' 102,400 extra VMAs, the first of
/// its counts with at least 100,000 VMAs (where the copy rate is judged), beyond the default
/// `vm.max_map_count`.
const ENGINE_LARGE: usize = 102_400;

impl ForkPlan {
    /// The plan at `length` on `host`. Without pages: quick 0, 100, 1,000 and 102,400 (1 run of 0.2 s);
    /// default 0, 100, 400, 1,600, 6,400, 25,600 and 102,400 (3 runs of 0.3 s); full (`vmspace bench fork`'s
    /// settings, BENCHMARKS.md): the series' counts to 409,600, 3 runs of 1 s; smoke (the CLI's structure test): 0, 100 and 102,400, 1 run of
    /// 0.05 s. With pages: quick 0, 100, 1,000; default 0, 100, 1,600, 25,600; full the series' counts to
    /// 51,200; smoke 100. The kernel's side measures the counts that fit under `vm.max_map_count` (65,530 by
    /// default: up to 51,200).
    pub fn new(length: Length, host: &HostInfo) -> ForkPlan {
        // Room for the process's own VMAs (binary, libraries, stacks of its threads) beside the extra ones.
        let max = host.max_map_count.unwrap_or(65530) as usize;
        let kernel_max = max.saturating_sub(fork::HEADROOM + 500);
        let series =
            |to: usize| -> Vec<usize> { fork::SERIES_COUNTS.iter().copied().filter(|&n| n <= to).collect() };
        let (vmas, page_vmas, samples, duration) = match length {
            Length::Smoke => (vec![0, 100, ENGINE_LARGE], vec![100], 1, Duration::from_millis(50)),
            Length::Quick => {
                (vec![0, 100, 1000, ENGINE_LARGE], vec![0, 100, 1000], 1, Duration::from_millis(200))
            }
            Length::Default => (
                vec![0, 100, 400, 1600, 6400, 25600, ENGINE_LARGE],
                vec![0, 100, 1600, 25600],
                3,
                Duration::from_millis(300),
            ),
            Length::Full => (series(409_600), series(51_200), 3, Duration::from_secs(1)),
        };
        ForkPlan { vmas, page_vmas, kernel_max, samples, duration }
    }
}

impl Plan for ForkPlan {
    type Point = ForkPoint;
    /// Every count without pages, then every count with pages.
    fn points(&self) -> Vec<ForkPoint> {
        let plain = self.vmas.iter().map(|&extra| ForkPoint { extra, pages: false });
        plain.chain(self.page_vmas.iter().map(|&extra| ForkPoint { extra, pages: true })).collect()
    }
    fn point_key(&self, p: &ForkPoint) -> String {
        key(p.extra, p.pages)
    }
    fn point_s(&self, p: &ForkPoint) -> f64 {
        // Making the VMAs costs about 1 µs each (one mprotect per other page; with pages a fault per page too)
        // beside the timed runs, which make at least one fork each (about 0.5 µs per VMA, 2 µs with pages).
        let per_vma = if p.pages { 4e-6 } else { 1.5e-6 };
        self.samples as f64 * self.duration.as_secs_f64().max(p.extra as f64 * per_vma)
            + p.extra as f64 * per_vma
            + 0.01
    }
}

/// The kernel's side: `vmspace_linux::fork`, at the counts that fit under `vm.max_map_count`.
pub struct KernelFork;

impl Side<ForkPlan> for KernelFork {
    fn info(&self) -> SideInfo {
        SideInfo::new("kernel", "kernel")
    }

    fn measure(&self, plan: &ForkPlan, p: &ForkPoint, ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
        let cfg =
            fork::Config { vmas: vec![p.extra], samples: plan.samples, duration: plan.duration, cpu: None };
        let host = ctx.host().clone();
        let k = plan.samples;
        let at = key(p.extra, p.pages);
        fork::run_count_with(&cfg, &host, p.extra, p.pages, &mut |_, s| {
            ctx.step(&format!("kernel, {at}, run {} of {k}", s + 1), (s + 1) as f64 / k as f64)
        })
    }

    fn covers(&self, plan: &ForkPlan, p: &ForkPoint) -> bool {
        p.extra <= plan.kernel_max
    }
}

/// The experiment: the kernel's side first, then the engine's (`crate::engine::fork_sides`, given to [`Fork::new`]).
pub struct Fork {
    sides: Sides<ForkPlan>,
}

impl Fork {
    /// The kernel's side and this build's engine sides.
    pub fn new(engine: Sides<ForkPlan>) -> Fork {
        let mut sides: Sides<ForkPlan> = vec![Box::new(KernelFork)];
        sides.extend(engine);
        Fork { sides }
    }
}

/// The point keys of `reports` in plan order: without pages, then with; by VMA count (the kernel's side runs
/// first and covers fewer counts, so first appearance is not that order).
fn ordered_points(reports: &[&Report]) -> Vec<String> {
    let mut keys = points(reports);
    let rank = |k: &String| {
        reports
            .iter()
            .find(|r| param_str(r, "point") == k)
            .map_or((2, 0), |r| (u64::from(with_pages(r)), param_u64(r, "extra_vmas").unwrap_or(0)))
    };
    keys.sort_by_key(rank);
    keys
}

fn total_vmas(r: &Report) -> Option<u64> {
    param_u64(r, "total_vmas")
}

/// Whether report `r` forked VMAs with one faulted page each.
fn with_pages(r: &Report) -> bool {
    param_u64(r, "pages_per_vma") == Some(1)
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
        let list = |v: &[usize]| v.iter().map(|n| count(*n as f64)).collect::<Vec<_>>().join(", ");
        format!(
            "N extra single-page VMAs that cannot merge (one region, every other page made writable), then fork in \
             a loop; with pages, the region is mapped writable, every page written (one fault each) and every \
             other page made read-only, so each VMA has an anon_vma and one page whose table entry fork copies. \
             Kernel: fork + the child's _exit + wait, forking thread and child on one CPU, at the counts that fit \
             under vm.max_map_count ({} extra VMAs at most here), before any engine side runs. Engine: Mm::fork_with \
             then the child's drop, on an Mm of 21 + N VMAs made the same way (vmspace bench fork's engine run), \
             copying the tree (dup) or re-inserting every VMA. N = {} without pages, {} with; {} run(s) of {:.2} s \
             (at least one fork) per point and side. \"VMAs dup/10s\" = forks per 10 s x all VMAs (the __mt_dup \
             series' plateau measure); \"M VMAs/s in fork\" = all VMAs over the fork call alone.",
            count(p.kernel_max as f64),
            list(&p.vmas),
            list(&p.page_vmas),
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

    /// The kernel's side over every point first, then the engine's sides point by point (module docs).
    fn run(&self, length: Length, ctx: &mut Ctx<'_>) -> anyhow::Result<()> {
        let plan = ForkPlan::new(length, ctx.host());
        // The kernel's side is the first ([`Fork::new`]).
        run_sides(&plan, &self.sides[..1], ctx)?;
        run_sides(&plan, &self.sides[1..], ctx)
    }

    fn present(&self, reports: &[&Report]) -> Section {
        let mut s = Section::new(self.id(), self.title());
        let infos = self.sides();
        s.unavailable = unavailable_lines(&infos);
        let mut t = Table::new(
            "forks per 10 s against VMAs: median [min-max] over the runs; fork call µs and M VMAs/s in it: the \
             fork call alone",
            &[
                "extra VMAs",
                "pages",
                "VMAs",
                "side",
                "forks/10s",
                "µs/fork",
                "fork call µs",
                "M VMAs/s in fork",
                "VMAs dup/10s",
            ],
        );
        let mut chart = Chart::new(
            "fork() rate against the number of VMAs",
            "VMAs in the forking address space",
            "forks per 10 s",
        );
        chart.x_log = true;
        chart.y_log = true;
        chart.legend = Legend::UpperRight;
        let keys = ordered_points(reports);
        let available: Vec<&SideInfo> = infos.iter().filter(|i| i.unavailable.is_none()).collect();
        for key in &keys {
            for info in &available {
                let Some(r) = side_point(reports, info.id, key) else { continue };
                t.row(vec![
                    param_u64(r, "extra_vmas").map_or(key.clone(), |n| count(n as f64)),
                    if with_pages(r) { "1 each".into() } else { "none".into() },
                    total_vmas(r).map_or("-".into(), |n| count(n as f64)),
                    info.name.to_string(),
                    spread(r.metric("forks_per_10s"), count),
                    med(r, "fork_mean_us").map_or("-".into(), sig3),
                    med(r, "fork_call_us").map_or("-".into(), sig3),
                    med(r, "vmas_copied_per_s_in_fork").map_or("-".into(), |v| sig3(v / 1e6)),
                    med(r, "vmas_duplicated_per_s").map_or("-".into(), |v| count(v * 10.0)),
                ]);
            }
        }
        for pages in [false, true] {
            for info in &available {
                let pts: Vec<Point> = keys
                    .iter()
                    .filter_map(|k| side_point(reports, info.id, k))
                    .filter(|r| with_pages(r) == pages)
                    .filter_map(|r| Some(Point::of(total_vmas(r)? as f64, r.metric("forks_per_10s")?)))
                    .collect();
                if !pts.is_empty() {
                    let name = format!("{}{}", info.name, if pages { ", 1 page per VMA" } else { "" });
                    chart.series.push(Series { name, points: pts });
                }
            }
        }
        chart.missing = missing_lines(&infos);
        s.tables.push(t);
        if let Ok(doc) = svg(&chart) {
            s.figures.push(Figure {
                file: "fork.svg".into(),
                title: chart.title.clone(),
                caption: "Forks per 10 s against the VMAs of the forking address space, per side, without pages \
                          and with one faulted page per VMA (both axes logarithmic); bars: min-max over the runs."
                    .into(),
                svg: doc,
            });
        }
        let mut words = Vec::new();
        for info in &available {
            let rows: Vec<&Report> = keys
                .iter()
                .filter_map(|k| side_point(reports, info.id, k))
                .filter(|r| !with_pages(r))
                .collect();
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
            if let Some(peak) =
                rows.iter().filter_map(|r| med(r, "vmas_copied_per_s_in_fork")).reduce(f64::max)
            {
                w.push_str(&format!(
                    " (at most {} million VMAs per s copied in the fork call)",
                    sig3(peak / 1e6)
                ));
            }
            // Against the kernel at the largest count both measured.
            if info.id != "kernel"
                && let Some((k, e)) = rows.iter().rev().find_map(|r| {
                    let kr = side_point(reports, "kernel", param_str(r, "point"))?;
                    Some((kr, *r))
                })
                && let (Some(kf), Some(ef)) = (med(k, "forks_per_s"), med(e, "forks_per_s"))
            {
                w.push_str(&format!(
                    ", {}x the kernel's rate at +{} VMAs",
                    sig3(ef / kf),
                    param_u64(e, "extra_vmas").unwrap_or(0)
                ));
            }
            words.push(w);
        }
        let dup_over = |pages: bool| -> Vec<f64> {
            keys.iter()
                .filter_map(|k| {
                    let d = side_point(reports, ids::FORK_DUP, k).filter(|r| with_pages(r) == pages)?;
                    let r = side_point(reports, ids::FORK_REINSERT, k)?;
                    Some(med(r, "fork_call_us")? / med(d, "fork_call_us")?)
                })
                .collect()
        };
        for pages in [false, true] {
            let ratios = dup_over(pages);
            if !ratios.is_empty() {
                words.push(format!(
                    "re-insertion's fork call takes {} the tree copy's{}",
                    super::ratio_range(&ratios),
                    if pages { " with pages" } else { " without pages" }
                ));
            }
        }
        s.verdict =
            if words.is_empty() { "nothing measured".into() } else { capitalise(&words.join("; ")) + "." };
        s.verdict.push_str(&pending_sentence(&infos));
        s.collect_notes(reports.iter().copied());
        s
    }

    fn targets(&self, reports: &[&Report]) -> Vec<TargetResult> {
        let infos = self.sides();
        let why_not = |ids: &[&str]| infos.iter().filter(|i| ids.contains(&i.id)).find_map(SideInfo::why_not);
        let exp = self.id();
        let keys = ordered_points(reports);
        let mut out = Vec::new();
        // The copy rate at every count of at least COPY_JUDGED_FROM VMAs, without pages.
        let what = format!(
            "engine tree copy, no pages: VMAs copied per s in the fork call over {MIN_M_VMAS_COPIED_PER_S} million"
        );
        let goal = Goal::AtLeast(1.0);
        let large: Vec<&Report> = keys
            .iter()
            .filter_map(|k| side_point(reports, ids::FORK_DUP, k))
            .filter(|r| !with_pages(r) && total_vmas(r).is_some_and(|n| n >= COPY_JUDGED_FROM))
            .collect();
        let at_least = format!(">= {} VMAs", count(COPY_JUDGED_FROM as f64));
        if let Some(why) = why_not(&[ids::FORK_DUP]) {
            out.push(TargetResult::not_measured(
                "fork.engine.copy_rate".into(),
                exp,
                &what,
                &at_least,
                goal,
                &why,
            ));
        } else if large.is_empty() {
            out.push(TargetResult::not_measured(
                "fork.engine.copy_rate".into(),
                exp,
                &what,
                &at_least,
                goal,
                &format!("no count of {at_least} in this run"),
            ));
        }
        if why_not(&[ids::FORK_DUP]).is_none() {
            for r in large {
                let n = total_vmas(r).unwrap_or(0);
                let values = runs_of(r, "vmas_copied_per_s_in_fork")
                    .into_iter()
                    .map(|v| v / 1e6 / MIN_M_VMAS_COPIED_PER_S)
                    .collect();
                let at = format!("{} VMAs", count(n as f64));
                // A rate of a fork that another job kept off its CPU (vmspace_bench::judge::Judged::unless_starved).
                let j = Judged::new(&what, at, goal, values)
                    .unless_starved(med(r, "cpu_share").unwrap_or(f64::NAN), true);
                out.push(TargetResult::from_judged(format!("fork.engine.copy_rate.{n}"), exp, j));
            }
        }
        // The same runs against this machine's memcpy of as many bytes per VMA (`vmspace_bench::fork` module docs,
        // "The copy's bound"): the fork call's bytes per second at least MIN_SHARE_OF_MEMCPY of the memcpy's.
        if why_not(&[ids::FORK_DUP]).is_none() {
            let what = format!(
                "engine tree copy, no pages: the fork call's bytes per s over {MIN_SHARE_OF_MEMCPY} of this machine's \
                 memcpy of as many bytes"
            );
            for r in keys
                .iter()
                .filter_map(|k| side_point(reports, ids::FORK_DUP, k))
                .filter(|r| !with_pages(r) && total_vmas(r).is_some_and(|n| n >= COPY_JUDGED_FROM))
            {
                let n = total_vmas(r).unwrap_or(0);
                let values: Vec<f64> =
                    runs_of(r, "share_of_memcpy").into_iter().map(|v| v / MIN_SHARE_OF_MEMCPY).collect();
                if values.is_empty() {
                    continue;
                }
                // The fork and the copy it is held against both need their CPU: a met over a starved copy means
                // nothing.
                let j = Judged::new(&what, format!("{} VMAs", count(n as f64)), Goal::AtLeast(1.0), values)
                    .unless_starved(med(r, "bound_cpu_share").unwrap_or(f64::NAN), false);
                out.push(TargetResult::from_judged(format!("fork.engine.memcpy_share.{n}"), exp, j));
            }
        }
        // The tree copy faster than re-insertion at every count of at least RATIO_JUDGED_FROM VMAs.
        let what = "engine fork call: re-insertion's time over the tree copy's";
        let goal = Goal::Above(1.0);
        if let Some(why) = why_not(&[ids::FORK_DUP, ids::FORK_REINSERT]) {
            let at = format!(">= {RATIO_JUDGED_FROM} VMAs");
            out.push(TargetResult::not_measured(
                "fork.engine.dup_over_reinsert".into(),
                exp,
                what,
                &at,
                goal,
                &why,
            ));
            return out;
        }
        let call = |r: &Report| runs_of(r, "fork_call_us");
        let before = out.len();
        for k in &keys {
            let (Some(d), Some(r)) =
                (side_point(reports, ids::FORK_DUP, k), side_point(reports, ids::FORK_REINSERT, k))
            else {
                continue;
            };
            let Some(n) = total_vmas(d).filter(|&n| n >= RATIO_JUDGED_FROM) else { continue };
            let pages = with_pages(d);
            let id = format!("fork.engine.dup_over_reinsert.{n}{}", if pages { ".pages" } else { "" });
            let at = format!("{} VMAs{}", count(n as f64), if pages { ", 1 page each" } else { "" });
            // Pairs in which both runs had their CPU (vmspace_bench::judge::Judged::on_runs_with_cpus).
            let shares =
                runs_of(r, "cpu_share").into_iter().zip(runs_of(d, "cpu_share")).map(|(a, b)| a.min(b));
            let ratios = paired(&call(r), &call(d));
            let pairs: Vec<(f64, f64)> = if runs_of(d, "cpu_share").len() == ratios.len() {
                ratios.into_iter().zip(shares).collect()
            } else {
                ratios.into_iter().map(|v| (v, f64::NAN)).collect()
            };
            out.push(TargetResult::from_judged(id, exp, Judged::on_runs_with_cpus(what, at, goal, &pairs)));
        }
        if out.len() == before {
            let at = format!(">= {RATIO_JUDGED_FROM} VMAs");
            let why = format!("no count of {at} in this run");
            out.push(TargetResult::not_measured(
                "fork.engine.dup_over_reinsert".into(),
                exp,
                what,
                &at,
                goal,
                &why,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::Status;
    use std::collections::BTreeMap;

    /// A side's report at `extra` VMAs (with pages or not), one run per fork call time in µs.
    fn report(side: &str, extra: usize, pages: bool, total: usize, calls_us: &[f64]) -> Report {
        let mut r = Report::new("test.fork", key(extra, pages), HostInfo::default());
        r.param("experiment", "fork");
        r.param("side", side);
        r.param("point", key(extra, pages));
        r.param("extra_vmas", extra);
        r.param("total_vmas", total);
        r.param("pages_per_vma", u8::from(pages));
        for &us in calls_us {
            let per_s = 1e6 / (2.0 * us);
            r.push_run(BTreeMap::from([
                ("fork_call_us".to_string(), us),
                ("fork_mean_us".to_string(), 2.0 * us),
                ("forks_per_s".to_string(), per_s),
                ("forks_per_10s".to_string(), 10.0 * per_s),
                ("vmas_duplicated_per_s".to_string(), per_s * total as f64),
                ("vmas_copied_per_s_in_fork".to_string(), total as f64 / (us * 1e-6)),
            ]));
        }
        r.summarise();
        r
    }

    #[test]
    fn the_kernel_covers_what_fits_and_targets_follow_bench_fork() {
        let host = HostInfo { max_map_count: Some(65530), ..HostInfo::default() };
        let plan = ForkPlan::new(Length::Quick, &host);
        let kernel: Vec<String> =
            plan.points().iter().filter(|p| KernelFork.covers(&plan, p)).map(|p| plan.point_key(p)).collect();
        assert_eq!(
            kernel,
            [
                "+0 VMAs",
                "+100 VMAs",
                "+1000 VMAs",
                "+0 VMAs, 1 page each",
                "+100 VMAs, 1 page each",
                "+1000 VMAs, 1 page each"
            ]
        );
        assert!(plan.points().contains(&ForkPoint { extra: 102_400, pages: false }));
        let (d, re) = (ids::FORK_DUP, ids::FORK_REINSERT);
        let all = [
            report("kernel", 100, false, 133, &[80.0]),
            report(d, 0, false, 21, &[4.0, 4.0]),
            report(re, 0, false, 21, &[3.0, 3.0]),
            report(d, 100, true, 121, &[30.0, 30.0]),
            report(re, 100, true, 121, &[60.0, 20.0]),
            report(d, 100, false, 121, &[10.0, 10.0]),
            report(re, 100, false, 121, &[50.0, 60.0]),
            // 102,421 VMAs in 2.5 ms: 41 M VMAs/s; in 5 ms: 20 M.
            report(d, 102_400, false, 102_421, &[2_500.0, 5_000.0]),
            report(re, 102_400, false, 102_421, &[6_000.0, 6_000.0]),
        ];
        let refs: Vec<&Report> = all.iter().collect();
        let e = Fork::new(crate::engine::fork_sides());
        let t = e.targets(&refs);
        let get = |id: &str| t.iter().find(|t| t.id == id).unwrap_or_else(|| panic!("no {id}: {t:?}"));
        assert_eq!(get("fork.engine.copy_rate.102421").status, Status::Undecided);
        assert_eq!(get("fork.engine.dup_over_reinsert.121").status, Status::Met);
        assert_eq!(get("fork.engine.dup_over_reinsert.121.pages").status, Status::Undecided);
        assert_eq!(get("fork.engine.dup_over_reinsert.102421").values, vec![2.4, 1.2]);
        // 21 VMAs are below the count the ratio is judged from.
        assert_eq!(t.len(), 4, "{t:?}");
        let s = e.present(&refs);
        let order: Vec<(&str, &str)> =
            s.tables[0].rows.iter().map(|r| (r[0].as_str(), r[1].as_str())).collect();
        assert_eq!(
            order,
            [
                ("0", "none"),
                ("0", "none"),
                ("100", "none"),
                ("100", "none"),
                ("100", "none"),
                ("102,400", "none"),
                ("102,400", "none"),
                ("100", "1 each"),
                ("100", "1 each"),
            ]
        );
        assert!(s.verdict.contains("x the kernel's rate at +100 VMAs"), "{}", s.verdict);
        assert!(e.targets(&[]).iter().all(|t| t.status == Status::NotMeasured));
    }
}
