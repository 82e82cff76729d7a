//! The interface every experiment of `vmspace report` implements, and the pieces the engine-beside-kernel
//! experiments are built from.
//!
//! # Experiments
//! An [`Experiment`] runs at one of three [`Length`]s and pushes its reports (schema `vmspace.report.v1`)
//! through a [`Ctx`]. The context stamps every report with parameter `experiment` (the experiment's id), so a
//! report set holds every experiment's reports side by side and each experiment finds its own again
//! ([`reports_of`]). Presenting ([`Experiment::present`], [`Experiment::targets`]) reads reports only.
//!
//! # Sides and plans
//! The experiments that hold the engine against the kernel share one structure: a [`Plan`] lists *points*
//! (thread counts, VMA counts, grid rows, tests) and how long each takes; every [`Side`] (the kernel, each
//! engine mode) measures every point it covers ([`Side::covers`]: all unless it says otherwise). [`run_sides`]
//! walks the points in order and, at each point, runs every available side in turn, so that all sides of one point are measured close together in time and an
//! interruption loses at most the point in progress. Each side's report is stamped with parameters `side`
//! (its [`SideInfo::id`]) and `point` (the plan's [`Plan::point_key`]), which is how tables and figures find
//! it. An engine side whose engine code has not landed is an [`AwaitingEngine`] placeholder: listed in every
//! table, figure, verdict and target as "not yet measured on the engine" with what it awaits, never run, and
//! no figure is made up for it.
//!
//! # Progress and interruption
//! The runner tells the context how long each unit of work is expected to take ([`Ctx::begin`]); the
//! experiment reports fractions of it ([`Ctx::step`]); the runner turns that into one progress display for the
//! whole run. [`Ctx::interrupted`] is the Ctrl-C flag of `vmspace_linux::child`; an experiment that sees it
//! returns what it measured so far (its reports are already pushed) or an error carrying
//! [`Interrupted`].

use serde::{Deserialize, Serialize};
use vmspace_linux::child::Interrupted;
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

use crate::model::Section;
use crate::targets::TargetResult;

/// How long a report runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Length {
    /// Smaller than quick, for the CLI's structure test only (`vmspace report --smoke`, a hidden option; see
    /// docs/REPORT.md): every experiment and every figure, with the shortest runs that still produce them
    /// (a few seconds). Its figures say nothing about performance.
    Smoke,
    /// A smoke run: every experiment, every figure, in well under 30 s (`--quick`).
    Quick,
    /// About 4 minutes on a 2-CPU machine: every experiment at a few repeats (the default).
    Default,
    /// The settings of BENCHMARKS.md (`--full`): each experiment as its own command runs it there.
    Full,
}

impl Length {
    /// `quick`, `default` or `full`.
    pub fn id(self) -> &'static str {
        match self {
            Length::Smoke => "smoke",
            Length::Quick => "quick",
            Length::Default => "default",
            Length::Full => "full",
        }
    }

    /// Parses [`Length::id`].
    pub fn parse(s: &str) -> Option<Length> {
        [Length::Smoke, Length::Quick, Length::Default, Length::Full].into_iter().find(|l| l.id() == s)
    }
}

/// One side of an experiment: what it is and whether this build has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideInfo {
    /// Stable id, written into parameter `side` of its reports: `kernel`, `engine-per-vma`, ...
    pub id: &'static str,
    /// The name tables and legends show: `kernel`, `engine, per-VMA locks`, ...
    pub name: &'static str,
    /// `None` when the side runs; otherwise why it does not ([`NOT_YET_MEASURED`]).
    pub unavailable: Option<String>,
    /// For a side that does not run: what it awaits, in a few words (empty otherwise).
    pub awaits: &'static str,
}

impl SideInfo {
    /// An available side.
    pub fn new(id: &'static str, name: &'static str) -> SideInfo {
        SideInfo { id, name, unavailable: None, awaits: "" }
    }

    /// `not yet measured on the engine (awaits ...)` for a side that does not run.
    pub fn why_not(&self) -> Option<String> {
        let why = self.unavailable.as_ref()?;
        Some(if self.awaits.is_empty() { why.clone() } else { format!("{why} (awaits {})", self.awaits) })
    }

    /// `engine, per-VMA locks: not yet measured on the engine (awaits ...)` for a side that does not run.
    pub fn pending_line(&self) -> Option<String> {
        self.why_not().map(|w| format!("{}: {w}", self.name))
    }
}

/// What a unit of progress says to the runner.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// What is being measured now, e.g. `kernel T=2, run 3 of 5`.
    pub detail: &'a str,
    /// Estimated seconds of this experiment's work done so far.
    pub done_s: f64,
}

/// What an experiment reaches while it runs: the host, the sink for its reports, progress and Ctrl-C.
pub struct Ctx<'a> {
    host: &'a HostInfo,
    experiment: &'static str,
    reports: &'a mut Vec<Report>,
    progress: &'a mut dyn FnMut(Step<'_>),
    /// Estimated seconds of work finished before the current unit.
    base_s: f64,
    /// The current unit's estimate.
    unit_s: f64,
}

impl<'a> Ctx<'a> {
    /// A context for experiment `experiment` that pushes into `reports` and reports progress to `progress`.
    pub fn new(
        host: &'a HostInfo,
        experiment: &'static str,
        reports: &'a mut Vec<Report>,
        progress: &'a mut dyn FnMut(Step<'_>),
    ) -> Ctx<'a> {
        Ctx { host, experiment, reports, progress, base_s: 0.0, unit_s: 0.0 }
    }

    /// The machine (gathered once at the start of the run).
    pub fn host(&self) -> &HostInfo {
        self.host
    }

    /// Whether the user asked the run to stop (Ctrl-C or SIGTERM).
    pub fn interrupted(&self) -> bool {
        vmspace_linux::child::interrupted()
    }

    /// `Err(Interrupted)` if the user asked the run to stop.
    pub fn check_interrupted(&self) -> Result<(), Interrupted> {
        vmspace_linux::child::check_interrupted()
    }

    /// A unit of work starts that is expected to take `estimated_s` seconds (the previous unit, if any, is
    /// counted done).
    pub fn begin(&mut self, estimated_s: f64) {
        self.base_s += self.unit_s;
        self.unit_s = estimated_s.max(0.0);
    }

    /// Progress within the current unit: `fraction` (0..=1) of it is done; `detail` says what runs now.
    pub fn step(&mut self, detail: &str, fraction: f64) {
        let done_s = self.base_s + self.unit_s * fraction.clamp(0.0, 1.0);
        (self.progress)(Step { detail, done_s });
    }

    /// Pushes a report, stamped with parameter `experiment`.
    pub fn push(&mut self, mut report: Report) {
        report.param("experiment", self.experiment);
        self.reports.push(report);
    }

    /// Pushes a side's report of one point, stamped with `experiment`, `side` and `point`.
    pub fn push_side(&mut self, mut report: Report, side: &SideInfo, point: &str) {
        report.param("side", side.id);
        report.param("side_name", side.name);
        report.param("point", point);
        self.push(report);
    }
}

/// An experiment of `vmspace report`.
pub trait Experiment {
    /// Stable id (`trees`, `mm`, `faults`, `fork`, `contention`, `tearing`): parameter `experiment` of its
    /// reports, the HTML anchor, the figure files' prefix.
    fn id(&self) -> &'static str;
    /// The section title.
    fn title(&self) -> &'static str;
    /// A short name for navigation and warnings (one or two words).
    fn short(&self) -> &'static str;
    /// What is measured and how, at `length` (one paragraph).
    fn method(&self, length: Length, host: &HostInfo) -> String;
    /// Which of its figures other work on the machine distorts, in a few words.
    fn load_effect(&self) -> &'static str;
    /// Every side it holds against each other (empty for experiments that are not built from sides).
    fn sides(&self) -> Vec<SideInfo> {
        Vec::new()
    }
    /// The expected run time at `length`, in seconds.
    fn estimate_s(&self, length: Length, host: &HostInfo) -> f64;
    /// Runs at `length`, pushing reports through `ctx`. On Ctrl-C it returns early (with `Ok` or an error
    /// carrying [`Interrupted`]); what it pushed before stays.
    fn run(&self, length: Length, ctx: &mut Ctx<'_>) -> anyhow::Result<()>;
    /// Its section: tables, verdict, figures, from its own reports (possibly partial).
    fn present(&self, reports: &[&Report]) -> Section;
    /// Its targets judged on its reports (not measured when the reports are missing).
    fn targets(&self, reports: &[&Report]) -> Vec<TargetResult>;
}

/// The measured reports of experiment `id` in `all` (not the report set's own `report.*` bookkeeping).
pub fn reports_of<'r>(all: &'r [Report], id: &str) -> Vec<&'r Report> {
    all.iter().filter(|r| param_str(r, "experiment") == id && !r.benchmark.starts_with("report.")).collect()
}

/// A string parameter of `r` (empty when absent).
pub fn param_str<'r>(r: &'r Report, name: &str) -> &'r str {
    r.parameters.get(name).and_then(|v| v.as_str()).unwrap_or_default()
}

/// An integer parameter of `r`.
pub fn param_u64(r: &Report, name: &str) -> Option<u64> {
    r.parameters.get(name).and_then(serde_json::Value::as_u64)
}

/// The points of an engine-beside-kernel experiment and how long each takes.
pub trait Plan {
    /// One point: a thread count, a VMA count, a grid row, a test.
    type Point;
    /// Every point, in the order they run and appear in tables.
    fn points(&self) -> Vec<Self::Point>;
    /// The point's key: parameter `point` of every side's report of it, and its row label.
    fn point_key(&self, point: &Self::Point) -> String;
    /// The expected time one side takes for `point`, in seconds.
    fn point_s(&self, point: &Self::Point) -> f64;
}

/// One side of an engine-beside-kernel experiment: the kernel, or one engine mode.
///
/// `measure` measures one point of the plan and returns one report in the shared schema whose metrics are the
/// ones the experiment's module documents; it calls [`Ctx::step`] after each run (fraction of the point
/// done) and stops on [`Ctx::interrupted`] with an error carrying [`Interrupted`]. The runner stamps the
/// report with `experiment`, `side` and `point`; `measure` must not push it itself.
pub trait Side<P: Plan> {
    /// The side's id, name and availability.
    fn info(&self) -> SideInfo;
    /// Measures `point` of `plan`.
    fn measure(&self, plan: &P, point: &P::Point, ctx: &mut Ctx<'_>) -> anyhow::Result<Report>;
    /// Whether this side measures `point` at all (every point unless it says otherwise). A side that cannot
    /// (the kernel at a VMA count beyond `vm.max_map_count`) is not run there and has no report for it: its
    /// tables have no row and its figures no mark at that point, and the experiment's method says why.
    fn covers(&self, _plan: &P, _point: &P::Point) -> bool {
        true
    }
}

/// An engine side whose engine code has not landed: listed in every table, figure, verdict and target as
/// [`NOT_YET_MEASURED`] with what it awaits, never run (so no figure exists for it, and none is invented).
#[derive(Debug, Clone, Copy)]
pub struct AwaitingEngine {
    /// The id the side will have.
    pub id: &'static str,
    /// Its name.
    pub name: &'static str,
    /// What the engine still lacks for it, in a few words (shown beside every "not yet measured").
    pub awaits: &'static str,
}

/// The status every placeholder gives (parameter `status` of its `report.side` report).
pub const NOT_YET_MEASURED: &str = "not yet measured on the engine";

impl<P: Plan> Side<P> for AwaitingEngine {
    fn info(&self) -> SideInfo {
        SideInfo {
            id: self.id,
            name: self.name,
            unavailable: Some(NOT_YET_MEASURED.to_string()),
            awaits: self.awaits,
        }
    }

    fn measure(&self, _plan: &P, _point: &P::Point, _ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
        anyhow::bail!("{}: {NOT_YET_MEASURED} (awaits {})", self.name, self.awaits)
    }
}

/// The sides of an experiment over plan `P`.
pub type Sides<P> = Vec<Box<dyn Side<P>>>;

/// The expected time of `plan` over the available `sides` (each at the points it covers).
pub fn sides_estimate_s<P: Plan>(plan: &P, sides: &[Box<dyn Side<P>>]) -> f64 {
    let available: Vec<&Box<dyn Side<P>>> = sides.iter().filter(|s| s.info().unavailable.is_none()).collect();
    plan.points()
        .iter()
        .map(|p| plan.point_s(p) * available.iter().filter(|s| s.covers(plan, p)).count() as f64)
        .sum()
}

/// Runs every available side on every point of `plan` it covers, point by point; pushes each report through
/// `ctx`. Returns early on Ctrl-C (with an error carrying [`Interrupted`]) or at the first failure. An
/// experiment whose sides must not be interleaved passes them in groups, one call per group (fork: the kernel's
/// side over every point first).
pub fn run_sides<P: Plan>(plan: &P, sides: &[Box<dyn Side<P>>], ctx: &mut Ctx<'_>) -> anyhow::Result<()> {
    let infos: Vec<SideInfo> = sides.iter().map(|s| s.info()).collect();
    for point in plan.points() {
        let key = plan.point_key(&point);
        for (side, info) in sides.iter().zip(&infos) {
            if info.unavailable.is_some() || !side.covers(plan, &point) {
                continue;
            }
            ctx.check_interrupted()?;
            ctx.begin(plan.point_s(&point));
            ctx.step(&format!("{}, {key}", info.name), 0.0);
            let report = side.measure(plan, &point, ctx)?;
            ctx.push_side(report, info, &key);
            ctx.step(&format!("{}, {key}", info.name), 1.0);
        }
    }
    Ok(())
}

/// The reports of side `side` in `reports`.
pub fn side_reports<'r>(reports: &[&'r Report], side: &str) -> Vec<&'r Report> {
    reports.iter().copied().filter(|r| param_str(r, "side") == side).collect()
}

/// The report of side `side` at point `key`.
pub fn side_point<'r>(reports: &[&'r Report], side: &str, key: &str) -> Option<&'r Report> {
    reports.iter().copied().find(|r| param_str(r, "side") == side && param_str(r, "point") == key)
}

/// Whether an error (or anything in its chain) is an interruption.
pub fn is_interruption(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Interrupted>()) || vmspace_linux::child::interrupted()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counts(Vec<u64>);
    impl Plan for Counts {
        type Point = u64;
        fn points(&self) -> Vec<u64> {
            self.0.clone()
        }
        fn point_key(&self, p: &u64) -> String {
            format!("n={p}")
        }
        fn point_s(&self, p: &u64) -> f64 {
            *p as f64
        }
    }

    struct Echo;
    impl Side<Counts> for Echo {
        fn info(&self) -> SideInfo {
            SideInfo::new("echo", "echo side")
        }
        fn measure(&self, _plan: &Counts, p: &u64, ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
            let mut r = Report::new("test.echo", format!("{p}"), ctx.host().clone());
            r.push_run([("value_count".to_string(), *p as f64)].into());
            r.summarise();
            ctx.step("run 1", 1.0);
            Ok(r)
        }
    }

    /// A side that measures only the points up to 2.
    struct Small;
    impl Side<Counts> for Small {
        fn info(&self) -> SideInfo {
            SideInfo::new("small", "small side")
        }
        fn measure(&self, plan: &Counts, p: &u64, ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
            assert!(self.covers(plan, p), "measured outside what it covers");
            Echo.measure(plan, p, ctx)
        }
        fn covers(&self, _plan: &Counts, p: &u64) -> bool {
            *p <= 2
        }
    }

    #[test]
    fn sides_skip_the_points_they_do_not_cover() {
        let plan = Counts(vec![1, 2, 3]);
        let sides: Sides<Counts> = vec![Box::new(Echo), Box::new(Small)];
        // Echo at 1, 2 and 3; Small at 1 and 2.
        assert_eq!(sides_estimate_s(&plan, &sides), 6.0 + 3.0);
        let host = HostInfo::default();
        let mut reports = Vec::new();
        let mut quiet = |_: Step<'_>| {};
        let mut ctx = Ctx::new(&host, "test", &mut reports, &mut quiet);
        run_sides(&plan, &sides, &mut ctx).unwrap();
        let refs: Vec<&Report> = reports.iter().collect();
        assert_eq!(side_reports(&refs, "echo").len(), 3);
        assert_eq!(side_reports(&refs, "small").len(), 2);
        assert!(side_point(&refs, "small", "n=3").is_none());
        // In groups: every point of the first group's sides before the second's.
        let mut reports = Vec::new();
        let mut ctx = Ctx::new(&host, "test", &mut reports, &mut quiet);
        run_sides(&plan, &sides[1..], &mut ctx).unwrap();
        run_sides(&plan, &sides[..1], &mut ctx).unwrap();
        let order: Vec<&str> = reports.iter().map(|r| param_str(r, "side")).collect();
        assert_eq!(order, ["small", "small", "echo", "echo", "echo"]);
    }

    #[test]
    fn sides_run_point_by_point_and_placeholders_never_run() {
        let plan = Counts(vec![1, 2, 3]);
        let sides: Sides<Counts> =
            vec![Box::new(Echo), Box::new(AwaitingEngine { id: "engine", name: "engine", awaits: "x" })];
        assert_eq!(sides_estimate_s(&plan, &sides), 6.0);
        let host = HostInfo::default();
        let mut reports = Vec::new();
        let mut steps = Vec::new();
        let mut progress = |s: Step<'_>| steps.push(s.done_s);
        let mut ctx = Ctx::new(&host, "test", &mut reports, &mut progress);
        run_sides(&plan, &sides, &mut ctx).unwrap();
        assert_eq!(reports.len(), 3);
        let refs: Vec<&Report> = reports.iter().collect();
        let r = side_point(&refs, "echo", "n=2").unwrap();
        assert_eq!(param_str(r, "experiment"), "test");
        assert_eq!(param_str(r, "side_name"), "echo side");
        assert!(side_point(&refs, "engine", "n=2").is_none());
        // Progress never goes backwards and ends at the estimate.
        assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
        assert_eq!(*steps.last().unwrap(), 6.0);
        let pending = AwaitingEngine { id: "e", name: "engine, x", awaits: "the fault path" };
        let info = <AwaitingEngine as Side<Counts>>::info(&pending);
        assert_eq!(info.unavailable.as_deref(), Some(NOT_YET_MEASURED));
        assert_eq!(
            info.pending_line().unwrap(),
            "engine, x: not yet measured on the engine (awaits the fault path)"
        );
        assert_eq!(Echo.info().pending_line(), None);
        let (mut none, mut quiet) = (Vec::new(), |_: Step<'_>| {});
        let mut ctx = Ctx::new(&host, "test", &mut none, &mut quiet);
        assert!(pending.measure(&plan, &1, &mut ctx).is_err());
    }

    #[test]
    fn lengths_parse() {
        for l in [Length::Smoke, Length::Quick, Length::Default, Length::Full] {
            assert_eq!(Length::parse(l.id()), Some(l));
        }
        assert_eq!(Length::parse("long"), None);
    }
}
