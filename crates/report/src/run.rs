//! The whole run: every experiment in turn, the report set it makes, and the presentation of a report set.
//!
//! # The run
//! [`run`] gathers the host's facts once, samples the machine ([`crate::machine`]), then runs each experiment
//! of [`all`] in their run order ([`crate::experiments::RUN_ORDER`]: the probe experiments
//! whose kernel sides the engine's memory would distort first; those `--experiments` leaves out are recorded as
//! not run), sampling the machine before and after each, and giving what each freed back to the system
//! (`malloc_trim`). An experiment that fails is recorded as failed and the next one runs;
//! Ctrl-C stops the experiment in progress (what it measured stays) and skips the rest. The main thread's CPU
//! affinity is restored after each experiment (the benchmarks pin it).
//!
//! # The report set (`report.json`, schema `vmspace.report.v1`)
//! Every measured report, stamped with parameter `experiment` (and `side`, `point` for side-built
//! experiments), then what `vmspace report` adds, each a report of its own benchmark:
//! - `report.side`: one per declared side (`experiment`, `side`, `side_name`, `status`: `measured`, `not
//!   run`, or `not yet measured on the engine` with `awaits`: what the engine still lacks); no runs;
//! - `report.phase`: one per experiment (`experiment`, `completion`: `complete`, `interrupted`, `failed:
//!   ...`, `not run: ...`; `estimate_s`), one run with `elapsed_s`, `load1_start`, `load1_end`, `others_pct`,
//!   `steal_pct` (the last two when readable);
//! - `report.machine`: the machine (`facts`, `length`, load averages before and after as text), one run with
//!   the whole run's `elapsed_s`, `load1_before`, `load1_after`, `others_pct`, `steal_pct`;
//! - `report.target`: one per target ([`crate::targets`]);
//!
//! and the set's `verdict` (met and missed targets, with `undecided` and `not_measurable` counts; passed when
//! none is missed; its line ends in `(indicative: one run per point)` for a `--quick` run).
//!
//! # Presentation
//! [`present`] turns a report set into sections, targets, machine warnings and the closing verdict, reading
//! only the set: the terminal text ([`text`]) and the HTML page are drawn from it.

use std::collections::BTreeMap;

use vmspace_results::host::HostInfo;
use vmspace_results::provenance::Provenance;
use vmspace_results::report::{Report, ReportSet, Verdict};

use crate::experiment::{Ctx, Experiment, Length, Step, is_interruption, param_str, reports_of};
use crate::experiments;
use crate::machine::{self, BUSY_LOAD_PER_CPU, Interval};
use crate::model::{Completion, Section};
use crate::targets::{INDICATIVE, Status, TargetResult, mark_indicative, tally};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long.
    pub length: Length,
    /// Only these experiments (ids); `None`: all.
    pub only: Option<Vec<String>>,
    /// The command line, recorded in the set.
    pub command: String,
    /// A real agent command for the contention grid's agent rows (`{pid}`: the mapper's pid); `None`: no such
    /// rows.
    pub contention_agent: Option<String>,
}

/// Progress of the whole run.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// The experiment running (1-based) and how many will run.
    pub phase: usize,
    /// How many experiments run.
    pub phases: usize,
    /// Its title.
    pub title: &'a str,
    /// Its short name (one or two words, for a progress bar's narrow line).
    pub short: &'a str,
    /// What it measures now.
    pub detail: &'a str,
    /// Estimated seconds of the whole run's work done.
    pub done_s: f64,
    /// Estimated seconds of the whole run.
    pub total_s: f64,
}

/// The estimated length of a run, in seconds, over the experiments `only` keeps.
pub fn estimate_s(length: Length, host: &HostInfo, only: Option<&[String]>, agent: Option<&str>) -> f64 {
    all_with(agent).iter().filter(|e| keeps(only, e.id())).map(|e| e.estimate_s(length, host)).sum()
}

fn keeps(only: Option<&[String]>, id: &str) -> bool {
    only.is_none_or(|o| o.iter().any(|x| x == id))
}

/// The ids of every experiment.
pub fn experiment_ids() -> Vec<&'static str> {
    all().iter().map(|e| e.id()).collect()
}

/// How the run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Everything, in the shared schema.
    pub set: ReportSet,
    /// Whether Ctrl-C stopped it.
    pub interrupted: bool,
    /// The experiments that failed, with their errors.
    pub failures: Vec<(String, String)>,
}

/// The process's CPU affinity, to restore after each experiment (the benchmarks pin the calling thread).
struct Affinity(Option<libc::cpu_set_t>);

impl Affinity {
    fn save() -> Affinity {
        // SAFETY: cpu_set_t is a plain bit array for which all-zero bytes are valid.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
        let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } == 0;
        Affinity(ok.then_some(set))
    }

    fn restore(&self) {
        if let Some(set) = &self.0 {
            // SAFETY: `set` is a valid cpu_set_t of the size passed; failure leaves the affinity as it is.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
        }
    }
}

/// Runs the report; `progress` hears from every step.
pub fn run(opts: &Options, progress: &mut dyn FnMut(Progress<'_>)) -> Outcome {
    let host = vmspace_linux::hostinfo::gather();
    let affinity = Affinity::save();
    let all = all_with(opts.contention_agent.as_deref());
    let only = opts.only.as_deref();
    let in_order = experiments::in_run_order(&all);
    let chosen: Vec<&dyn Experiment> = in_order.iter().copied().filter(|e| keeps(only, e.id())).collect();
    let estimates: Vec<f64> = chosen.iter().map(|e| e.estimate_s(opts.length, &host)).collect();
    let total_s: f64 = estimates.iter().sum();
    let started = machine::sample();
    let mut reports: Vec<Report> = Vec::new();
    let mut phases: Vec<Report> = Vec::new();
    let mut failures = Vec::new();
    let mut interrupted = false;
    let mut before_s = 0.0;
    let mut index = 0;
    for e in in_order {
        let mut phase = Report::new("report.phase", e.title(), host.clone());
        phase.param("experiment", e.id());
        phase.param("estimate_s", e.estimate_s(opts.length, &host));
        let completion = if !keeps(only, e.id()) {
            Completion::NotRun("left out (--experiments)".into())
        } else if interrupted || vmspace_linux::child::interrupted() {
            interrupted = true;
            Completion::NotRun("interrupted before it started".into())
        } else {
            index += 1;
            let a = machine::sample();
            let estimate = estimates[index - 1];
            let (title, short) = (e.title(), e.short());
            let result = {
                let mut on_step = |s: Step<'_>| {
                    progress(Progress {
                        phase: index,
                        phases: chosen.len(),
                        title,
                        short,
                        detail: s.detail,
                        done_s: before_s + s.done_s.min(estimate),
                        total_s,
                    })
                };
                on_step(Step { detail: "starting", done_s: 0.0 });
                let mut ctx = Ctx::new(&host, e.id(), &mut reports, &mut on_step);
                e.run(opts.length, &mut ctx)
            };
            affinity.restore();
            // What the experiment freed goes back to the system, so that later experiments' kernel sides do not
            // carry it: fork copies the page tables of every touched page of this process, and the children of
            // the probe experiments inherit them. SAFETY: malloc_trim has no preconditions.
            unsafe { libc::malloc_trim(0) };
            let b = machine::sample();
            let i = Interval::between(&a, &b);
            phase.push_run(interval_metrics(&i));
            before_s += estimate;
            match result {
                Ok(()) if vmspace_linux::child::interrupted() => {
                    interrupted = true;
                    Completion::Interrupted
                }
                Ok(()) => Completion::Complete,
                Err(err) if is_interruption(&err) => {
                    interrupted = true;
                    Completion::Interrupted
                }
                Err(err) => {
                    failures.push((e.id().to_string(), format!("{err:#}")));
                    Completion::Failed(format!("{err:#}"))
                }
            }
        };
        phase.param("completion", completion.word());
        phase.summarise();
        phases.push(phase);
    }
    let finished = machine::sample();
    let whole = Interval::between(&started, &finished);
    let mut set_reports = reports;
    set_reports.extend(side_reports(&all, &set_reports, &host));
    set_reports.extend(phases);
    let mut m = Report::new("report.machine", "machine", host.clone());
    m.param("facts", machine_facts(&host));
    m.param("length", opts.length.id());
    m.param("load_before", machine::loads_text(started.load));
    m.param("load_after", machine::loads_text(finished.load));
    let mut metrics = interval_metrics(&whole);
    metrics.insert("load1_before".into(), started.load.map_or(f64::NAN, |l| l[0]));
    metrics.insert("load1_after".into(), finished.load.map_or(f64::NAN, |l| l[0]));
    metrics.retain(|_, v| v.is_finite());
    m.push_run(metrics);
    m.summarise();
    set_reports.push(m);
    let mut targets = all_targets(&all, &set_reports);
    mark_indicative(&mut targets, opts.length);
    set_reports.extend(targets.iter().map(|t| t.to_report(&host)));
    let set = ReportSet::new(opts.command.clone(), set_reports).with_verdict(tally(&targets));
    Outcome { set, interrupted, failures }
}

fn interval_metrics(i: &Interval) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::from([("elapsed_s".to_string(), i.elapsed_s)]);
    for (k, v) in [
        ("load1_start", i.load1_start),
        ("load1_end", i.load1_end),
        ("others_pct", i.others_pct),
        ("steal_pct", i.steal_pct),
    ] {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    }
    m
}

/// One `report.side` per declared side of every experiment.
fn side_reports(all: &[Box<dyn Experiment>], measured: &[Report], host: &HostInfo) -> Vec<Report> {
    let mut out = Vec::new();
    for e in all {
        for s in e.sides() {
            let mut r = Report::new("report.side", format!("{}: {}", e.id(), s.name), host.clone());
            r.param("experiment", e.id());
            r.param("side", s.id);
            r.param("side_name", s.name);
            let any =
                measured.iter().any(|m| param_str(m, "experiment") == e.id() && param_str(m, "side") == s.id);
            let status = match (&s.unavailable, any) {
                (Some(why), _) => why.clone(),
                (None, true) => "measured".to_string(),
                (None, false) => "not run".to_string(),
            };
            r.param("status", status);
            if !s.awaits.is_empty() {
                r.param("awaits", s.awaits);
            }
            out.push(r);
        }
    }
    out
}

fn all_targets(all: &[Box<dyn Experiment>], reports: &[Report]) -> Vec<TargetResult> {
    all.iter().flat_map(|e| e.targets(&reports_of(reports, e.id()))).collect()
}

/// The machine's facts for the page: what `vmspace kernel info` prints, and the host probe's memory limits.
pub fn machine_facts(h: &HostInfo) -> Vec<(String, String)> {
    let host = vmspace_host::Host::probe();
    let or = |o: Option<String>| o.unwrap_or_else(|| "unknown".into());
    let yn = |b: Option<bool>| or(b.map(|b| if b { "yes".into() } else { "no".into() }));
    vec![
        ("kernel".into(), format!("Linux {} {} ({})", h.kernel_release, h.machine, h.kernel_version)),
        ("CPU".into(), or(h.cpu_model.clone())),
        (
            "CPUs".into(),
            format!(
                "{} online, {} usable ({:?})",
                or(h.cpus_online.map(|c| c.to_string())),
                h.cpus_usable.len(),
                h.cpus_usable
            ),
        ),
        ("memory".into(), or(h.mem_total_kb.map(|k| format!("{} MiB", k / 1024)))),
        ("swap".into(), or(host.swap_total_kb.map(|k| format!("{} MiB", k / 1024)))),
        ("page size".into(), format!("{} B", h.page_size)),
        ("vm.max_map_count".into(), or(h.max_map_count.map(|c| c.to_string()))),
        ("vm.overcommit_memory".into(), or(host.overcommit_memory.map(|c| c.to_string()))),
        ("PROCMAP_QUERY".into(), h.procmap_query.clone()),
        ("CONFIG_PER_VMA_LOCK".into(), yn(h.per_vma_lock)),
        ("CONFIG_HZ".into(), or(h.hz.map(|x| x.to_string()))),
        ("preemption".into(), or(h.preempt_model.clone())),
        ("transparent huge pages".into(), or(h.thp_enabled.clone())),
        ("root".into(), yn(host.root)),
    ]
}

/// The machine as presented.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineView {
    /// `kernel info` style facts.
    pub facts: Vec<(String, String)>,
    /// Load averages before the run, as text.
    pub load_before: String,
    /// Load averages after the run, as text.
    pub load_after: String,
    /// The whole run's steal and other work, in words.
    pub during: String,
    /// The machine was busy when the run started (the load average), in words.
    pub busy: Option<String>,
    /// Each experiment during which other work or steal disturbed the timings, and which figures that
    /// distorts.
    pub disturbed: Vec<String>,
}

impl MachineView {
    /// Every warning, one per line.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self.busy.iter().cloned().collect();
        if !self.disturbed.is_empty() {
            out.push("other work competed for the CPUs during:".to_string());
            out.extend(self.disturbed.iter().map(|d| format!("  {d}")));
        }
        out
    }
}

/// A report set, presented.
#[derive(Debug, Clone)]
pub struct Presentation {
    /// The command that made the set.
    pub command: String,
    /// When the run started (UTC).
    pub started_utc: String,
    /// Its length.
    pub length: String,
    /// Its wall-clock time, seconds.
    pub elapsed_s: f64,
    /// One section per experiment.
    pub sections: Vec<Section>,
    /// Every target.
    pub targets: Vec<TargetResult>,
    /// The set's verdict.
    pub verdict: Verdict,
    /// Why the decided verdicts are only indicative (a `--quick` run), for a banner; `None` otherwise.
    pub indicative: Option<String>,
    /// The machine.
    pub machine: MachineView,
    /// The host's one-line description.
    pub host_line: String,
    /// The build that measured and the CPU it ran on (`None`: the set does not record them).
    pub provenance: Option<Provenance>,
}

impl Presentation {
    /// The build in one line, as the page's header and the terminal show it.
    pub fn build_line(&self) -> String {
        self.provenance.as_ref().map_or("not recorded".to_string(), |p| p.build.one_line())
    }

    /// The loud warning of a run measured with a debug build (`None`: an optimised build, or not recorded).
    pub fn debug_warning(&self) -> Option<String> {
        self.provenance.as_ref().and_then(|p| p.build.debug_warning())
    }
}

fn metric(r: &Report, m: &str) -> Option<f64> {
    r.metric(m).map(|s| s.median)
}

/// Presents `set` (a `vmspace report` set; reports of other commands are shown where an experiment knows
/// them).
pub fn present(set: &ReportSet) -> Presentation {
    let all = all();
    let phase = |id: &str| {
        set.reports.iter().find(|r| r.benchmark == "report.phase" && param_str(r, "experiment") == id)
    };
    let machine_r = set.reports.iter().find(|r| r.benchmark == "report.machine");
    let host = set.reports.first().map(|r| r.host.clone()).unwrap_or_default();
    let mut sections = Vec::new();
    let mut targets = Vec::new();
    let mut disturbed = Vec::new();
    let cpus = host.cpus_usable.len().max(1) as f64;
    let busy = machine_r.and_then(|m| metric(m, "load1_before")).filter(|&l| l > BUSY_LOAD_PER_CPU * cpus).map(|l| {
        format!(
            "the machine was busy when the run started: 1-minute load average {l:.2} on {} usable CPU(s) (after the \
             run: {})",
            cpus as usize,
            machine_r.map_or("unknown".into(), |m| param_str(m, "load_after").to_string())
        )
    });
    for e in &all {
        let own = reports_of(&set.reports, e.id());
        let mut s = e.present(&own);
        s.short = e.short().to_string();
        let length =
            machine_r.map(|m| param_str(m, "length")).and_then(Length::parse).unwrap_or(Length::Default);
        s.method = e.method(length, &host);
        s.load_effect = e.load_effect().to_string();
        if let Some(p) = phase(e.id()) {
            s.completion = Completion::parse(param_str(p, "completion"));
            let i = Interval {
                elapsed_s: metric(p, "elapsed_s").unwrap_or(0.0),
                load1_start: metric(p, "load1_start"),
                load1_end: metric(p, "load1_end"),
                others_pct: metric(p, "others_pct"),
                steal_pct: metric(p, "steal_pct"),
            };
            if i.disturbed() && matches!(s.completion, Completion::Complete | Completion::Interrupted) {
                disturbed.push(format!("{} ({}): distorts {}", e.short(), i.describe(), e.load_effect()));
            }
        } else if own.is_empty() {
            s.completion = Completion::NotRun("not in this report set".into());
        }
        if matches!(s.completion, Completion::NotRun(_)) {
            s.figures.clear();
        }
        targets.extend(e.targets(&own));
        sections.push(s);
    }
    let length = machine_r.and_then(|m| Length::parse(param_str(m, "length")));
    if let Some(l) = length {
        mark_indicative(&mut targets, l);
    }
    let indicative = targets.iter().any(|t| t.indicative).then(|| {
        format!(
            "{INDICATIVE} ({} run): each met or missed below rests on a single short run of each point, which \
             shows no spread; the default length takes 3 or more runs per point and judges on their interval",
            length.map_or("this", Length::id)
        )
    });
    let during = machine_r.map_or("unknown".to_string(), |m| {
        let pct = |k: &str| metric(m, k).map_or("unknown".to_string(), |v| format!("{v:.0}%"));
        format!(
            "during the run other work used {} of the CPUs; CPU steal {}",
            pct("others_pct"),
            metric(m, "steal_pct").map_or("not readable".to_string(), |v| format!("{v:.1}%"))
        )
    });
    let facts = machine_r
        .and_then(|m| m.parameters.get("facts"))
        .and_then(|f| serde_json::from_value::<Vec<(String, String)>>(f.clone()).ok())
        .unwrap_or_default();
    Presentation {
        command: set.command.clone(),
        started_utc: set.reports.first().map(|r| r.started_utc.clone()).unwrap_or_default(),
        length: machine_r.map_or("?".into(), |m| param_str(m, "length").to_string()),
        elapsed_s: machine_r.and_then(|m| metric(m, "elapsed_s")).unwrap_or(0.0),
        sections,
        verdict: tally(&targets),
        targets,
        indicative,
        machine: MachineView {
            facts,
            load_before: machine_r.map_or("unknown".into(), |m| param_str(m, "load_before").to_string()),
            load_after: machine_r.map_or("unknown".into(), |m| param_str(m, "load_after").to_string()),
            during,
            busy,
            disturbed,
        },
        host_line: host.one_line(),
        provenance: set.provenance.clone(),
    }
}

/// The summary table of the targets (for the terminal).
pub fn targets_table(targets: &[TargetResult]) -> crate::model::Table {
    let mut t = crate::model::Table::new(
        "targets: met when the interval of the values' median (95% order-statistic interval; min-max for 5 \
         values or fewer) is wholly on the good side of the goal, missed when it is wholly on the bad side, \
         undecided when it straddles the goal, not measurable here when this machine could not show it (the \
         note says what was measured); (indicative): decided on one short run per point (--quick)",
        &["status", "target", "where", "goal", "measured [interval]", "note"],
    );
    for x in targets {
        t.row(vec![
            match x.status {
                Status::Met | Status::Missed => {
                    x.status_text().to_uppercase().replace("INDICATIVE", "indicative")
                }
                Status::NotMeasured => "n/a".into(),
                _ => x.status_text(),
            },
            x.what.clone(),
            x.at.clone(),
            x.goal_text(),
            x.measured(),
            x.why.clone(),
        ]);
    }
    t
}

/// The terminal text of a presentation within [`crate::terminal::WIDTH`] columns: one table per experiment
/// narrowed to fit and a one-sentence verdict, then the targets and the summary ([`crate::terminal`]).
pub fn text(p: &Presentation) -> String {
    crate::terminal::text(p, crate::terminal::WIDTH)
}

/// The terminal text of a presentation with every table whole and every verdict in full (`--wide`).
pub fn text_wide(p: &Presentation) -> String {
    let mut out = String::new();
    for s in &p.sections {
        out.push_str(&format!("\n== {} ==\n", s.title));
        match &s.completion {
            Completion::Complete => {}
            Completion::Interrupted => out.push_str("(interrupted: what was measured before Ctrl-C)\n"),
            Completion::Failed(e) => out.push_str(&format!("(FAILED: {e}; what was measured before)\n")),
            Completion::NotRun(why) => {
                out.push_str(&format!("not run: {why}\n"));
                continue;
            }
        }
        for t in &s.tables {
            if !t.rows.is_empty() {
                out.push_str(&t.text());
            }
        }
        for u in &s.unavailable {
            out.push_str(&format!("{u}\n"));
        }
        out.push_str(&format!("verdict: {}\n", s.verdict));
    }
    out.push_str("\n== Summary ==\n");
    if let Some(i) = &p.indicative {
        out.push_str(&format!("{i}\n"));
    }
    out.push_str(&targets_table(&p.targets).text());
    out.push_str(&format!("verdict: {}\n", p.verdict.line));
    out.push_str(&format!(
        "machine: load average {} before, {} after; {}\n",
        p.machine.load_before, p.machine.load_after, p.machine.during
    ));
    out.push_str(&format!("build: {}\n", p.build_line()));
    if let Some(w) = p.debug_warning() {
        out.push_str(&format!("WARNING: {w}\n"));
    }
    for w in p.machine.warnings() {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

/// Every experiment, in the order they appear, with this build's engine sides ([`crate::engine`]).
pub fn all() -> Vec<Box<dyn Experiment>> {
    all_with(None)
}

/// Every experiment, the contention grid with a real agent's rows when `contention_agent` names a command
/// ([`experiments::contention::Contention::with_agent`]). The experiments get the engine's sides here, so
/// that `experiments` and `engine` do not depend on each other both ways: `engine` implements the sides of
/// the experiments' plans, and the experiments judge the sides by their ids (`experiments::ids`).
pub fn all_with(contention_agent: Option<&str>) -> Vec<Box<dyn Experiment>> {
    use crate::engine;
    use crate::experiments::{contention, faults, fork, mm, tearing, trees};
    vec![
        Box::new(trees::Trees),
        Box::new(mm::AddressSpace),
        Box::new(faults::Faults::new(engine::faults_sides())),
        Box::new(fork::Fork::new(engine::fork_sides())),
        Box::new(contention::Contention::with_agent(
            engine::contention_sides(),
            contention_agent.map(str::to_string),
        )),
        Box::new(tearing::Tearing::new(engine::tearing_sides())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_grow_with_length_and_shrink_with_choice() {
        let host = vmspace_linux::hostinfo::gather();
        let s = estimate_s(Length::Smoke, &host, None, None);
        let q = estimate_s(Length::Quick, &host, None, None);
        let d = estimate_s(Length::Default, &host, None, None);
        let f = estimate_s(Length::Full, &host, None, None);
        assert!(s < q && q < 30.0 && q < d && d < f, "{s} {q} {d} {f}");
        // About 4 minutes by default on this project's 2-CPU machine (the contention grid and the tearing
        // checks run for the kernel and each of the engine's three reader modes).
        if host.cpus_usable.len() == 2 {
            assert!((180.0..=300.0).contains(&d), "{d}");
        }
        let only = vec!["fork".to_string()];
        assert!(estimate_s(Length::Default, &host, Some(&only), None) < d);
        assert_eq!(experiment_ids().len(), 6);
    }

    #[test]
    fn an_empty_run_presents_every_experiment_as_not_run() {
        let opts = Options {
            length: Length::Quick,
            only: Some(Vec::new()),
            command: "vmspace report".into(),
            contention_agent: None,
        };
        let out = run(&opts, &mut |_| {});
        assert!(!out.interrupted && out.failures.is_empty());
        let p = present(&out.set);
        assert_eq!(p.sections.len(), 6);
        assert!(p.sections.iter().all(|s| matches!(s.completion, Completion::NotRun(_))), "{:?}", p.sections);
        // Targets are listed even when nothing ran, as not measured.
        assert!(!p.targets.is_empty());
        assert!(p.targets.iter().all(|t| t.status == Status::NotMeasured));
        assert!(!p.machine.facts.is_empty());
        let text = text(&p);
        assert!(text.contains("not run: left out"), "{text}");
        let sides: Vec<&Report> = out.set.reports.iter().filter(|r| r.benchmark == "report.side").collect();
        // Every side has its engine code: none is a "not yet measured" placeholder.
        assert!(sides.iter().all(|r| param_str(r, "status") != crate::experiment::NOT_YET_MEASURED));
    }
}
