//! Two report sets side by side (`vmspace report --compare OLD.json NEW.json`): which figures moved beyond
//! their run-to-run spread, and which targets changed status.
//!
//! # Figures
//! A figure is one metric of one report, keyed by the report's benchmark, label and (for side-built
//! experiments) side: `kernel.fork / +100 VMAs / kernel / forks_per_s`. It *moved* when the ranges of its runs
//! in the two sets do not overlap: the new minimum above the old maximum, or the new maximum below the old
//! minimum. That is a deliberately blunt test: it needs no assumption about the distribution, and a figure
//! whose runs overlap has not shown a change this pair of runs can stand behind. Figures with a single run in
//! either set have no spread and are not judged (they are counted apart). Whether a move is better or worse
//! follows the metric's unit ([`Direction`]). The report sets' own bookkeeping (`report.*`) is not compared.
//!
//! # Targets
//! Targets are matched by id (`report.target` reports; `bench.tree.target` reports of `vmspace bench tree`
//! too). A target that was met and is now missed is a *regression*: `--compare` then exits with status 1.
//!
//! # What can be compared
//! Only two sets of one kind and one length ([`Kind::of`], [`comparable`]): two `vmspace report` runs of the
//! same length (`quick`, `default`, `full`), or two runs of the same other command (`vmspace bench mm`, ...)
//! with or without `--quick` alike. Anything else would only list every figure and target as absent on one
//! side; `vmspace report --compare` refuses it with a usage error (exit status 2) that names both.
//!
//! # As a report set (`--compare ... --json FILE`)
//! [`Comparison::to_set`]: one `report.compare.figure` report per moved figure (parameters `figure`,
//! `metric`, `direction`: `better`, `worse` or `neither`; one run with `old_min`, `old_median`, `old_max`,
//! `new_min`, `new_median`, `new_max`, `change_ratio`), one `report.compare.target` report per target of either
//! set (parameters `target`, `what`, `old_status`, `new_status`: a status word or `absent`, `regressed`), and
//! the verdict: passed when no target regressed (`met`: targets in both sets that did not regress; `missed`:
//! regressions).

use std::collections::BTreeMap;

use vmspace_results::report::{Report, ReportSet, Verdict};
use vmspace_results::stats::Summary;

use crate::experiment::param_str;
use crate::model::{Table, sig3};
use crate::targets::{Status, TargetResult};

/// Which way is better for a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Larger is better (rates, scaling).
    Higher,
    /// Smaller is better (times, latencies, ratios to a baseline, slowdowns, failures).
    Lower,
    /// Neither (counts of work done, sizes that are facts).
    Neutral,
}

/// The direction of metric `name`, from its unit suffix and its name.
pub fn direction(name: &str) -> Direction {
    if name.starts_with("failures") || name.contains("slowdown") || name.contains("ratio_to") {
        Direction::Lower
    } else if name.ends_with("_per_s")
        || name.ends_with("_per_10s")
        || name.contains("scaling")
        || name == "engine_over_kernel"
    {
        Direction::Higher
    } else if name.ends_with("_ms")
        || name.ends_with("_us")
        || name.ends_with("_ns")
        || name.starts_with("ns_per")
        || name.ends_with("_bytes")
        || name.ends_with("bytes_per_vma")
    {
        Direction::Lower
    } else {
        Direction::Neutral
    }
}

/// What a report set is, for [`comparable`]: the command that wrote it and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// `vmspace report`, `vmspace bench mm`, ...: the command's words before its first option.
    pub command: String,
    /// `quick`, `default`, `full` (a report's `report.machine` length; other commands: `quick` with
    /// `--quick`, else `default`).
    pub length: String,
}

impl Kind {
    /// The kind of `set`.
    pub fn of(set: &ReportSet) -> Kind {
        let words: Vec<&str> = set.command.split_whitespace().collect();
        let command = words.iter().take_while(|w| !w.starts_with('-')).copied().collect::<Vec<_>>().join(" ");
        let machine = set.reports.iter().find(|r| r.benchmark == "report.machine");
        let length = match machine {
            Some(m) => param_str(m, "length").to_string(),
            None if words.contains(&"--quick") => "quick".to_string(),
            None if words.contains(&"--full") => "full".to_string(),
            None => "default".to_string(),
        };
        // A report set is a report's whatever its command line says (a file may have been renamed).
        let command = if machine.is_some() { "vmspace report".to_string() } else { command };
        Kind { command, length }
    }

    /// `vmspace report (quick)`.
    pub fn text(&self) -> String {
        format!("{} ({})", self.command, self.length)
    }
}

/// Whether `old` and `new` can be compared (module docs): `Err` says why not, naming both kinds.
pub fn comparable(old: &ReportSet, new: &ReportSet) -> Result<(), String> {
    let (a, b) = (Kind::of(old), Kind::of(new));
    if a.command != b.command {
        return Err(format!(
            "cannot compare a set of `{}` with one of `{}`: they measure different things (compare two runs of \
             one command)",
            a.command, b.command
        ));
    }
    if a.length != b.length {
        return Err(format!(
            "cannot compare a {} run with a {} run of `{}`: their lengths differ, so their figures and targets \
             are measured differently (compare two runs of one length)",
            a.length, b.length, a.command
        ));
    }
    Ok(())
}

/// One figure that moved.
#[derive(Debug, Clone, PartialEq)]
pub struct Moved {
    /// `benchmark / label[ / side]`.
    pub what: String,
    /// The metric.
    pub metric: String,
    /// Its runs in the old set.
    pub old: Summary,
    /// Its runs in the new set.
    pub new: Summary,
    /// Better, worse, or neither.
    pub better: Option<bool>,
}

impl Moved {
    /// New median over old median.
    pub fn change(&self) -> f64 {
        self.new.median / self.old.median
    }
}

/// One target in both sets.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetChange {
    /// The target's id.
    pub id: String,
    /// What it compares and where.
    pub what: String,
    /// In the old set (absent: not there).
    pub old: Option<TargetResult>,
    /// In the new set.
    pub new: Option<TargetResult>,
}

impl TargetChange {
    /// Met before, missed now.
    pub fn regressed(&self) -> bool {
        matches!((&self.old, &self.new), (Some(o), Some(n)) if o.status == Status::Met && n.status == Status::Missed)
    }
}

/// The comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The old set's command.
    pub old_command: String,
    /// When the old set's run started.
    pub old_started: String,
    /// The new set's command.
    pub new_command: String,
    /// When the new set's run started.
    pub new_started: String,
    /// The build that measured the old set, in one line (`not recorded` for a set without provenance).
    pub old_build: String,
    /// The build that measured the new set, in one line.
    pub new_build: String,
    /// Figures present in both with at least two runs each.
    pub compared: usize,
    /// Figures present in both but with a single run on a side (not judged).
    pub single_run: usize,
    /// Figures that moved beyond their spread.
    pub moved: Vec<Moved>,
    /// Every target of either set.
    pub targets: Vec<TargetChange>,
}

fn key(r: &Report) -> String {
    let side = param_str(r, "side");
    if side.is_empty() {
        format!("{} / {}", r.benchmark, r.label)
    } else {
        format!("{} / {} / {side}", r.benchmark, r.label)
    }
}

fn figures(set: &ReportSet) -> BTreeMap<(String, String), Summary> {
    let mut out = BTreeMap::new();
    for r in set
        .reports
        .iter()
        .filter(|r| !r.benchmark.starts_with("report.") && !r.benchmark.ends_with(".target"))
    {
        for (m, s) in &r.summary {
            out.insert((key(r), m.clone()), *s);
        }
    }
    out
}

fn targets(set: &ReportSet) -> BTreeMap<String, TargetResult> {
    let own: Vec<TargetResult> = set
        .reports
        .iter()
        .filter(|r| r.benchmark == "report.target")
        .filter_map(TargetResult::from_report)
        .collect();
    let list =
        if own.is_empty() { set.reports.iter().filter_map(TargetResult::from_report).collect() } else { own };
    list.into_iter().map(|t| (t.id.clone(), t)).collect()
}

/// Compares `old` with `new`.
pub fn compare(old: &ReportSet, new: &ReportSet) -> Comparison {
    let (a, b) = (figures(old), figures(new));
    let (mut compared, mut single_run, mut moved) = (0, 0, Vec::new());
    for (k, o) in &a {
        let Some(n) = b.get(k) else { continue };
        if o.n < 2 || n.n < 2 {
            single_run += 1;
            continue;
        }
        compared += 1;
        let up = n.min > o.max;
        let down = n.max < o.min;
        if up || down {
            let better = match direction(&k.1) {
                Direction::Higher => Some(up),
                Direction::Lower => Some(down),
                Direction::Neutral => None,
            };
            moved.push(Moved { what: k.0.clone(), metric: k.1.clone(), old: *o, new: *n, better });
        }
    }
    let (ta, tb) = (targets(old), targets(new));
    let mut ids: Vec<&String> = ta.keys().chain(tb.keys()).collect();
    ids.sort();
    ids.dedup();
    let targets = ids
        .into_iter()
        .map(|id| {
            let (o, n) = (ta.get(id).cloned(), tb.get(id).cloned());
            let what =
                n.as_ref().or(o.as_ref()).map(|t| format!("{} ({})", t.what, t.at)).unwrap_or_default();
            TargetChange { id: id.clone(), what, old: o, new: n }
        })
        .collect();
    let started = |s: &ReportSet| s.reports.first().map(|r| r.started_utc.clone()).unwrap_or_default();
    let build = |s: &ReportSet| s.provenance.as_ref().map_or("not recorded".to_string(), |p| p.one_line());
    Comparison {
        old_command: old.command.clone(),
        old_started: started(old),
        new_command: new.command.clone(),
        new_started: started(new),
        old_build: build(old),
        new_build: build(new),
        compared,
        single_run,
        moved,
        targets,
    }
}

impl Comparison {
    /// The targets that went from met to missed.
    pub fn regressions(&self) -> Vec<&TargetChange> {
        self.targets.iter().filter(|t| t.regressed()).collect()
    }

    /// The closing line.
    pub fn line(&self) -> String {
        let better = self.moved.iter().filter(|m| m.better == Some(true)).count();
        let worse = self.moved.iter().filter(|m| m.better == Some(false)).count();
        let changed = self.targets.iter().filter(|t| status(&t.old) != status(&t.new)).count();
        format!(
            "{} of {} figures moved beyond their spread ({better} better, {worse} worse, {} neither; {} single-run \
             figures not judged); {changed} target(s) changed status, {} went from met to missed",
            self.moved.len(),
            self.compared,
            self.moved.len() - better - worse,
            self.single_run,
            self.regressions().len()
        )
    }

    /// The comparison as a report set of `command` (module docs, "As a report set").
    pub fn to_set(&self, command: &str, host: &vmspace_results::host::HostInfo) -> ReportSet {
        let mut reports = Vec::new();
        for m in &self.moved {
            let mut r =
                Report::new("report.compare.figure", format!("{} / {}", m.what, m.metric), host.clone());
            r.param("figure", &m.what);
            r.param("metric", &m.metric);
            r.param(
                "direction",
                match m.better {
                    Some(true) => "better",
                    Some(false) => "worse",
                    None => "neither",
                },
            );
            r.push_run(BTreeMap::from([
                ("old_min".to_string(), m.old.min),
                ("old_median".to_string(), m.old.median),
                ("old_max".to_string(), m.old.max),
                ("new_min".to_string(), m.new.min),
                ("new_median".to_string(), m.new.median),
                ("new_max".to_string(), m.new.max),
                ("change_ratio".to_string(), m.change()),
            ]));
            r.summarise();
            reports.push(r);
        }
        for t in &self.targets {
            let mut r = Report::new("report.compare.target", t.what.clone(), host.clone());
            r.param("target", &t.id);
            r.param("what", &t.what);
            let word = |x: &Option<TargetResult>| x.as_ref().map_or("absent", |x| x.status.word());
            r.param("old_status", word(&t.old));
            r.param("new_status", word(&t.new));
            r.param("regressed", t.regressed());
            reports.push(r);
        }
        let both = self.targets.iter().filter(|t| t.old.is_some() && t.new.is_some()).count() as u64;
        let regressed = self.regressions().len() as u64;
        ReportSet::new(command, reports).with_verdict(Verdict::new(both - regressed, regressed, self.line()))
    }

    /// The moved figures as a table.
    pub fn moved_table(&self) -> Table {
        let mut t = Table::new(
            "median [min-max] of the runs in each set; change = new median / old median",
            &["figure", "metric", "old", "new", "change", ""],
        );
        let f = |s: &Summary| format!("{} [{}-{}]", sig3(s.median), sig3(s.min), sig3(s.max));
        for m in &self.moved {
            t.row(vec![
                m.what.clone(),
                m.metric.clone(),
                f(&m.old),
                f(&m.new),
                format!("{}x", sig3(m.change())),
                match m.better {
                    Some(true) => "better".into(),
                    Some(false) => "worse".into(),
                    None => String::new(),
                },
            ]);
        }
        t
    }

    /// The targets as a table: every target whose status differs first, then the others.
    pub fn targets_table(&self) -> Table {
        let mut t = Table::new(
            "targets by id; REGRESSED: met in the old set, missed in the new one",
            &["target", "old", "new", ""],
        );
        let cell = |x: &Option<TargetResult>| {
            x.as_ref().map_or("absent".to_string(), |x| format!("{} {}", x.status.word(), x.measured()))
        };
        let mut rows: Vec<&TargetChange> = self.targets.iter().collect();
        rows.sort_by_key(|c| (status(&c.old) == status(&c.new), c.id.clone()));
        for c in rows {
            let mark = if c.regressed() {
                "REGRESSED"
            } else if status(&c.old) != status(&c.new) {
                "changed"
            } else {
                ""
            };
            t.row(vec![c.what.clone(), cell(&c.old), cell(&c.new), mark.into()]);
        }
        t
    }
}

fn status(t: &Option<TargetResult>) -> Option<Status> {
    t.as_ref().map(|t| t.status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::Goal;
    use vmspace_results::host::HostInfo;

    fn report(bench: &str, label: &str, metric: &str, values: &[f64]) -> Report {
        let mut r = Report::new(bench, label, HostInfo::default());
        for &v in values {
            r.push_run(BTreeMap::from([(metric.to_string(), v)]));
        }
        r.summarise();
        r
    }

    fn target(status_values: &[f64]) -> Report {
        TargetResult::judge("t.one".into(), "t", "thing", "n=1", Goal::AtMost(1.0), status_values.to_vec())
            .to_report(&HostInfo::default())
    }

    #[test]
    fn moves_beyond_the_spread_only() {
        let old = ReportSet::new(
            "old",
            vec![
                report("kernel.fork", "+0 VMAs", "forks_per_s", &[100.0, 110.0, 105.0]),
                report("kernel.faults", "T=1", "faults_per_s", &[10.0, 20.0]),
                report("kernel.race", "split", "failures_count", &[0.0]),
                target(&[0.5, 0.6]),
            ],
        );
        let new = ReportSet::new(
            "new",
            vec![
                report("kernel.fork", "+0 VMAs", "forks_per_s", &[80.0, 90.0, 95.0]),
                report("kernel.faults", "T=1", "faults_per_s", &[15.0, 25.0]),
                report("kernel.race", "split", "failures_count", &[0.0]),
                target(&[1.5, 1.6]),
            ],
        );
        let c = compare(&old, &new);
        assert_eq!((c.compared, c.single_run), (2, 1));
        assert_eq!(c.moved.len(), 1);
        assert_eq!(c.moved[0].better, Some(false));
        assert!((c.moved[0].change() - 90.0 / 105.0).abs() < 1e-9);
        assert_eq!(c.regressions().len(), 1);
        assert!(c.line().contains("1 went from met to missed"), "{}", c.line());
        assert_eq!(c.targets_table().rows[0][3], "REGRESSED");
        let set = c.to_set("vmspace report --compare a b", &HostInfo::default());
        let v = set.verdict.as_ref().unwrap();
        assert_eq!((v.passed, v.met, v.missed), (false, 0, 1));
        let fig = set.reports.iter().find(|r| r.benchmark == "report.compare.figure").unwrap();
        assert_eq!(param_str(fig, "direction"), "worse");
        assert!((fig.metric("change_ratio").unwrap().median - 90.0 / 105.0).abs() < 1e-9);
        let t = set.reports.iter().find(|r| r.benchmark == "report.compare.target").unwrap();
        assert_eq!((param_str(t, "old_status"), param_str(t, "new_status")), ("met", "missed"));
        // The other way round it improved.
        let back = compare(&new, &old);
        assert!(back.regressions().is_empty());
        assert_eq!(back.moved[0].better, Some(true));
    }

    #[test]
    fn only_sets_of_one_kind_and_length_compare() {
        let machine = |length: &str| {
            let mut m = Report::new("report.machine", "machine", HostInfo::default());
            m.param("length", length);
            m
        };
        let quick = ReportSet::new("vmspace report --quick --out a", vec![machine("quick")]);
        let quick2 = ReportSet::new("vmspace report --out b --quick", vec![machine("quick")]);
        let default = ReportSet::new("vmspace report", vec![machine("default")]);
        let mm =
            ReportSet::new("vmspace bench mm --json x.json", vec![report("bench.mm.x", "a", "m", &[1.0])]);
        let mm_quick = ReportSet::new("vmspace bench mm --quick", vec![]);
        assert_eq!(Kind::of(&quick), Kind { command: "vmspace report".into(), length: "quick".into() });
        assert_eq!(Kind::of(&mm).text(), "vmspace bench mm (default)");
        assert!(comparable(&quick, &quick2).is_ok());
        assert!(comparable(&mm, &mm.clone()).is_ok());
        let e = comparable(&quick, &default).unwrap_err();
        assert!(e.contains("quick") && e.contains("default") && e.contains("lengths differ"), "{e}");
        let e = comparable(&mm, &default).unwrap_err();
        assert!(e.contains("vmspace bench mm") && e.contains("vmspace report"), "{e}");
        assert!(comparable(&mm, &mm_quick).is_err());
    }

    #[test]
    fn directions() {
        assert_eq!(direction("forks_per_10s"), Direction::Higher);
        assert_eq!(direction("call_mean_ms"), Direction::Lower);
        assert_eq!(direction("ns_per_op"), Direction::Lower);
        assert_eq!(direction("ratio_to_btreemap"), Direction::Lower);
        assert_eq!(direction("slowdown_with_reader"), Direction::Lower);
        assert_eq!(direction("scaling_2t_over_1t"), Direction::Higher);
        assert_eq!(direction("calls_count"), Direction::Neutral);
    }
}
