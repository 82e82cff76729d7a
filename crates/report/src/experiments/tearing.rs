//! The tearing checks of the kernel's proc-maps-race selftest (`tools/testing/selftests/proc/proc-maps-race.c`):
//! a reader of `/proc/PID/maps` (and `smaps`) one page per `read()` never sees a torn record or a false gap
//! while a writer splits, resizes or remaps the VMA at a read boundary; engine reader modes beside the kernel.
//!
//! The kernel's side is `vmspace_linux::race` (one report per test and file). The engine's sides run the same
//! three tests on an engine `Mm`, a writer thread against a reader in each reader mode.
//!
//! # Contract of a side's report
//! One report per test and file (point key `<test> (<file>)`, e.g. `split (maps)`; the files are read one page
//! per `read(2)`, parameter `reads` `page`), one run with metrics `iterations_count` (observations: whole
//! passes, each checked at its boundary pair and whole), `modified_seen_count` (observations of the modified
//! state), `duplicates_count` (allowed repeats), `query_checks_count` (PROCMAP_QUERY answers, 14 per maps
//! observation), `child_cycles_count` (the writer's modify+restore cycles) and `failures_count`; the first
//! failures' offending lines in `notes`. The checks are `vmspace_linux::race`'s (module docs).
//!
//! # Targets
//! Per side and file: no failure in any test. A check whose reader never saw the modified state did not race
//! the writer and cannot show tearing: such a side's target is not measurable here (the reason names the checks),
//! not met.

use std::time::Duration;

use vmspace_linux::race::{self, RaceFile, RaceReads, RaceTest};
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

use super::{capitalise, count, in_words, med, pending_sentence, points, unavailable_lines};
use crate::experiment::{
    Ctx, Experiment, Length, Plan, Side, SideInfo, Sides, param_str, run_sides, side_point, side_reports,
    sides_estimate_s,
};
use crate::model::{Section, Table};
use crate::targets::{Goal, Status, TargetResult};

/// The tearing checks' plan.
#[derive(Debug, Clone, PartialEq)]
pub struct TearingPlan {
    /// (file, test) pairs: the three tests on maps, then on smaps.
    pub tests: Vec<(RaceFile, RaceTest)>,
    /// Length of each test.
    pub duration: Duration,
}

impl TearingPlan {
    /// The plan at `length`: the three tests on maps and on smaps, 0.1 s (smoke), 0.15 s (quick), 2 s (default)
    /// or 5 s (full, BENCHMARKS.md) each, for every side.
    pub fn new(length: Length) -> TearingPlan {
        let secs = match length {
            Length::Smoke => 0.1,
            Length::Quick => 0.08,
            Length::Default => 1.0,
            Length::Full => 5.0,
        };
        let tests = [RaceFile::Maps, RaceFile::Smaps]
            .into_iter()
            .flat_map(|f| RaceTest::ALL.into_iter().map(move |t| (f, t)))
            .collect();
        TearingPlan { tests, duration: Duration::from_secs_f64(secs) }
    }
}

/// `maps` or `smaps`.
pub fn file_name(f: RaceFile) -> &'static str {
    match f {
        RaceFile::Maps => "maps",
        RaceFile::Smaps => "smaps",
    }
}

impl Plan for TearingPlan {
    type Point = (RaceFile, RaceTest);
    fn points(&self) -> Vec<(RaceFile, RaceTest)> {
        self.tests.clone()
    }
    fn point_key(&self, (f, t): &(RaceFile, RaceTest)) -> String {
        format!("{} ({})", t.name(), file_name(*f))
    }
    fn point_s(&self, _p: &(RaceFile, RaceTest)) -> f64 {
        self.duration.as_secs_f64() + 0.1
    }
}

/// The kernel's side: `vmspace_linux::race`.
pub struct KernelRace;

impl Side<TearingPlan> for KernelRace {
    fn info(&self) -> SideInfo {
        SideInfo::new("kernel", "kernel")
    }

    fn measure(
        &self,
        plan: &TearingPlan,
        &(f, t): &(RaceFile, RaceTest),
        ctx: &mut Ctx<'_>,
    ) -> anyhow::Result<Report> {
        let host = ctx.host().clone();
        let mut reports = race::run(f, &[t], RaceReads::Page, plan.duration, &host, &mut |_, _| {
            ctx.step(&format!("kernel, {} ({})", t.name(), file_name(f)), 1.0)
        })?;
        reports.pop().ok_or_else(|| anyhow::anyhow!("the race check returned no report"))
    }
}

/// The experiment: the kernel and the engine's sides (`crate::engine::tearing_sides`, given to [`Tearing::new`]).
pub struct Tearing {
    sides: Sides<TearingPlan>,
}

impl Tearing {
    /// The kernel's side and this build's engine sides.
    pub fn new(engine: Sides<TearingPlan>) -> Tearing {
        let mut sides: Sides<TearingPlan> = vec![Box::new(KernelRace)];
        sides.extend(engine);
        Tearing { sides }
    }
}

fn value(r: &Report, m: &str) -> f64 {
    med(r, m).unwrap_or(0.0)
}

/// The file of a point key: `maps` of `split (maps)`.
fn file_of(key: &str) -> &str {
    key.rsplit_once('(').map_or("", |(_, f)| f.trim_end_matches(')'))
}

impl Experiment for Tearing {
    fn id(&self) -> &'static str {
        "tearing"
    }

    fn title(&self) -> &'static str {
        "/proc/PID/maps tearing checks (proc-maps-race)"
    }

    fn short(&self) -> &'static str {
        "Tearing"
    }

    fn method(&self, length: Length, _host: &HostInfo) -> String {
        let p = TearingPlan::new(length);
        format!(
            "The proc-maps-race selftest's three tests: a writer modifies and restores a 3-page region at a \
             read-page boundary (split: map a page over it; resize: mremap 3 pages to 1 and back; remap: move a page \
             of the next region into it) while the reader reads the whole maps (or smaps) one page per read(), \
             pass after pass, and checks the two records at the boundary, then the whole pass (no torn line, \
             records in order, none shown three times, no false gap, smaps Size and counters consistent), and in \
             maps mode PROCMAP_QUERY at each of 7 pages against both states. {:.1} s per test, file and side. A \
             failure is a torn or missing record or a pass or answer no state allows; a repeated record (a \
             duplicate) is allowed. Kernel: a child process and /proc/CHILD/maps; engine: a writer and a reader \
             thread on one Mm, one side per reader mode (vmspace_bench::race).",
            p.duration.as_secs_f64()
        )
    }

    fn load_effect(&self) -> &'static str {
        "only how many observations are made (a check that saw no race at all is not measurable here); no met or \
         missed verdict"
    }

    fn sides(&self) -> Vec<SideInfo> {
        self.sides.iter().map(|s| s.info()).collect()
    }

    fn estimate_s(&self, length: Length, _host: &HostInfo) -> f64 {
        sides_estimate_s(&TearingPlan::new(length), &self.sides)
    }

    fn run(&self, length: Length, ctx: &mut Ctx<'_>) -> anyhow::Result<()> {
        // The kernel's side first, before the engine's address spaces touch this process's memory.
        let plan = TearingPlan::new(length);
        run_sides(&plan, &self.sides[..1], ctx)?;
        run_sides(&plan, &self.sides[1..], ctx)
    }

    fn present(&self, reports: &[&Report]) -> Section {
        let mut s = Section::new(self.id(), self.title());
        let infos = self.sides();
        s.unavailable = unavailable_lines(&infos);
        let available: Vec<&SideInfo> = infos.iter().filter(|i| i.unavailable.is_none()).collect();
        let mut t = Table::new(
            "boundary observations per test; a failure is a torn or missing record",
            &[
                "test",
                "side",
                "observations",
                "saw modified",
                "duplicates (allowed)",
                "PROCMAP_QUERY checks",
                "writer cycles",
                "failures",
            ],
        );
        let keys = points(reports);
        for key in &keys {
            for info in &available {
                let Some(r) = side_point(reports, info.id, key) else { continue };
                let c = |m: &str| count(value(r, m));
                t.row(vec![
                    key.clone(),
                    info.name.to_string(),
                    c("iterations_count"),
                    c("modified_seen_count"),
                    c("duplicates_count"),
                    c("query_checks_count"),
                    c("child_cycles_count"),
                    c("failures_count"),
                ]);
            }
        }
        s.tables.push(t);
        let mut words = Vec::new();
        for info in &available {
            let rs = side_reports(reports, info.id);
            if rs.is_empty() {
                continue;
            }
            let failed: Vec<&str> = rs
                .iter()
                .filter(|r| value(r, "failures_count") > 0.0)
                .map(|r| param_str(r, "point"))
                .collect();
            let observations: f64 = rs.iter().map(|r| value(r, "iterations_count")).sum();
            let modified: f64 = rs.iter().map(|r| value(r, "modified_seen_count")).sum();
            words.push(if failed.is_empty() {
                format!(
                    "{}: no tearing and no false gap in {} tests ({} boundary observations, {} of them of the \
                     modified state)",
                    in_words(info),
                    rs.len(),
                    count(observations),
                    count(modified)
                )
            } else {
                format!("{}: TEARING in {} of {} tests ({})", in_words(info), failed.len(), rs.len(), failed.join(", "))
            });
        }
        s.verdict =
            if words.is_empty() { "nothing measured".into() } else { capitalise(&words.join("; ")) + "." };
        s.verdict.push_str(&pending_sentence(&infos));
        s.collect_notes(reports.iter().copied());
        s
    }

    fn targets(&self, reports: &[&Report]) -> Vec<TargetResult> {
        let mut out = Vec::new();
        for info in self.sides() {
            let files: &[&str] = &["maps", "smaps"];
            for file in files {
                let id = format!("tearing.{}.{file}", info.id);
                let what = format!("{}: no torn or missing record in /proc/PID/{file}", info.name);
                let at = "split, resize, remap";
                if let Some(why) = info.why_not() {
                    out.push(TargetResult::not_measured(id, self.id(), &what, at, Goal::NoFailures, &why));
                    continue;
                }
                let rs: Vec<&Report> = side_reports(reports, info.id)
                    .into_iter()
                    .filter(|r| file_of(param_str(r, "point")) == *file)
                    .collect();
                let values: Vec<f64> = rs.iter().map(|r| value(r, "failures_count")).collect();
                let mut t = TargetResult::judge(id, self.id(), &what, at, Goal::NoFailures, values);
                let idle: Vec<&str> = rs
                    .iter()
                    .filter(|r| value(r, "modified_seen_count") == 0.0)
                    .map(|r| param_str(r, "point"))
                    .collect();
                if t.status == Status::Met && !idle.is_empty() {
                    t.status = Status::NotMeasurable;
                    t.why = format!(
                        "not measurable here: the reader never saw the modified state in {}: no race happened",
                        idle.join(", ")
                    );
                }
                out.push(t);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_both_files() {
        let p = TearingPlan::new(Length::Quick);
        let keys: Vec<String> = p.points().iter().map(|x| p.point_key(x)).collect();
        assert_eq!(
            keys,
            [
                "split (maps)",
                "resize (maps)",
                "remap (maps)",
                "split (smaps)",
                "resize (smaps)",
                "remap (smaps)"
            ]
        );
        assert_eq!(file_of("remap (smaps)"), "smaps");
    }
}
