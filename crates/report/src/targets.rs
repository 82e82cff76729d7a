//! Targets, judged with the spread of their values by the one judge of every benchmark
//! (`vmspace_bench::judge`).
//!
//! A target compares one measured quantity with a goal: a ratio at most or at least some value (the range
//! trees' goals of BENCHMARKS.md, the engine against itself or the kernel), or a count of failures that must be
//! zero (the tearing checks). The quantity is measured once per run or per pair of interleaved batches, so a
//! target holds a *set* of values, and its status says what the whole set allows:
//!
//! - **met**: the confidence interval of the values' median is wholly on the good side of the goal (the
//!   95% order-statistic interval; with 5 values or fewer, their min-max: every value meets the goal);
//! - **missed**: the interval is wholly on the bad side;
//! - **undecided**: the interval straddles the goal, so the spread is wider than the margin to the goal and
//!   this run cannot tell (more or longer runs, or a quieter machine, may);
//! - **not measurable** here: values exist, but this machine could not show the quantity either way, for a
//!   reason measured in the same run and shown beside the values (a scaling whose one-thread baseline did not
//!   have a CPU of its own: `vmspace_bench::faults::scaling_check`);
//! - **not measured**: no value (the side is not in this build, the experiment did not run or was interrupted).
//!
//! A decided verdict (met, missed) of a `--quick` run is *indicative* ([`TargetResult::indicative`]): one short
//! run per point gives no interval worth the name, so the verdict says so wherever it is shown.
//!
//! For a count that must be zero, a single failure misses. In a report set each target is one report of
//! benchmark `report.target` (parameters `target` id, `experiment`, `goal`, `status`, `at`, and `indicative`
//! (true) for an indicative verdict; one run per value with metric `value`; the reason of a not measurable
//! target is its first note), which is what `vmspace report --compare` reads.

use std::collections::BTreeMap;
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, Verdict};

use crate::experiment::param_str;
use crate::model::sig3;

pub use vmspace_bench::judge::{Goal, RATIO, Status};

/// One target and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetResult {
    /// Stable id, e.g. `trees.lookup.n=1000`, `fork.engine.dup_over_reinsertion`.
    pub id: String,
    /// The experiment it belongs to.
    pub experiment: String,
    /// What is compared, in words.
    pub what: String,
    /// Where (size, point).
    pub at: String,
    /// The goal.
    pub goal: Goal,
    /// One value per run (ratios, or failure counts).
    pub values: Vec<f64>,
    /// What the values allow.
    pub status: Status,
    /// Why it is not measured or not measurable (or a remark), empty otherwise.
    pub why: String,
    /// Whether the verdict rests on one short run per point (`--quick`): met and missed are then indicative.
    pub indicative: bool,
    /// The unit of the values and the goal after a number: `x` for a ratio (the default), else with its space
    /// (` B`).
    pub unit: String,
}

impl TargetResult {
    /// A target judged on `values`.
    pub fn judge(id: String, experiment: &str, what: &str, at: &str, goal: Goal, values: Vec<f64>) -> Self {
        let status = Status::judge(goal, &values);
        let why =
            if status == Status::NotMeasured { "no value in this run".to_string() } else { String::new() };
        TargetResult {
            id,
            experiment: experiment.to_string(),
            what: what.to_string(),
            at: at.to_string(),
            goal,
            values,
            status,
            why,
            indicative: false,
            unit: RATIO.to_string(),
        }
    }

    /// The target `j` of the shared judge (its status and note, e.g. a scaling check's not measurable), as
    /// target `id` of `experiment`.
    pub fn from_judged(id: String, experiment: &str, j: vmspace_bench::judge::Judged) -> Self {
        TargetResult {
            id,
            experiment: experiment.to_string(),
            what: j.what,
            at: j.at,
            goal: j.goal,
            values: j.values,
            status: j.status,
            why: if j.status == Status::NotMeasured && j.note.is_empty() {
                "no value in this run".to_string()
            } else {
                j.note
            },
            indicative: false,
            unit: j.unit.to_string(),
        }
    }

    /// The goal in the target's unit: `<= 0.75x`, `<= 192.00 B`.
    pub fn goal_text(&self) -> String {
        self.goal.text_in(&self.unit)
    }

    /// The status in words as tables show it: `met`, `missed`, ..., with `(indicative)` after an indicative
    /// verdict.
    pub fn status_text(&self) -> String {
        let word = match self.status {
            Status::NotMeasurable => "not measurable here",
            s => s.word(),
        };
        if self.indicative && self.is_decided() { format!("{word} (indicative)") } else { word.to_string() }
    }

    /// Whether the verdict is met or missed.
    pub fn is_decided(&self) -> bool {
        matches!(self.status, Status::Met | Status::Missed)
    }

    /// A target that could not be measured, and why.
    pub fn not_measured(id: String, experiment: &str, what: &str, at: &str, goal: Goal, why: &str) -> Self {
        TargetResult {
            id,
            experiment: experiment.to_string(),
            what: what.to_string(),
            at: at.to_string(),
            goal,
            values: Vec::new(),
            status: Status::NotMeasured,
            why: why.to_string(),
            indicative: false,
            unit: RATIO.to_string(),
        }
    }

    /// The median value.
    pub fn median(&self) -> Option<f64> {
        vmspace_results::stats::Summary::of(&self.values).map(|s| s.median)
    }

    /// The measured value in words: `0.82x [0.71-0.95]` (the median and the interval the status was judged
    /// on), `0 failures`, or `-`.
    pub fn measured(&self) -> String {
        let Some(i) = vmspace_bench::judge::median_interval(&self.values) else { return "-".into() };
        match self.goal {
            Goal::NoFailures => {
                let max = self.values.iter().copied().filter(|v| v.is_finite()).fold(0.0, f64::max);
                format!("{} failure{}", max as u64, if max == 1.0 { "" } else { "s" })
            }
            _ if i.n == 1 => format!("{}{}", sig3(i.median), self.unit),
            _ => format!("{}{} [{}-{}]", sig3(i.median), self.unit, sig3(i.low), sig3(i.high)),
        }
    }

    /// The target as a `report.target` report.
    pub fn to_report(&self, host: &HostInfo) -> Report {
        let mut r = Report::new("report.target", format!("{} ({})", self.what, self.at), host.clone());
        r.param("experiment", &self.experiment);
        r.param("target", &self.id);
        r.param("what", &self.what);
        r.param("at", &self.at);
        r.param("goal", self.goal_text());
        if self.unit != RATIO {
            r.param("unit", &self.unit);
        }
        r.param("status", self.status.word());
        if self.indicative && self.is_decided() {
            r.param("indicative", true);
        }
        if !self.why.is_empty() {
            r.notes.push(self.why.clone());
        }
        for &v in &self.values {
            r.push_run(BTreeMap::from([("value".to_string(), v)]));
        }
        r.summarise();
        r
    }

    /// The target recorded in `r`: a `report.target` report, or a `bench.tree.target` report of `vmspace bench
    /// tree` (its `verdict` and its per-round ratios; `met` alone in files written before verdicts could be
    /// undecided).
    pub fn from_report(r: &Report) -> Option<TargetResult> {
        let values: Vec<f64> = r.runs.iter().filter_map(|run| run.metrics.values().next().copied()).collect();
        match r.benchmark.as_str() {
            "report.target" => Some(TargetResult {
                id: param_str(r, "target").to_string(),
                experiment: param_str(r, "experiment").to_string(),
                what: param_str(r, "what").to_string(),
                at: param_str(r, "at").to_string(),
                goal: Goal::parse(param_str(r, "goal"))?,
                status: Status::parse(param_str(r, "status"))?,
                values,
                why: r.notes.first().cloned().unwrap_or_default(),
                indicative: r
                    .parameters
                    .get("indicative")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false),
                unit: r
                    .parameters
                    .get("unit")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or(RATIO)
                    .to_string(),
            }),
            "bench.tree.target" => {
                let status = match Status::parse(param_str(r, "verdict")) {
                    Some(s) => s,
                    None if values.is_empty() => Status::NotMeasured,
                    None if r.parameters.get("met").and_then(serde_json::Value::as_bool)? => Status::Met,
                    None => Status::Missed,
                };
                let at = param_str(r, "workload").to_string();
                Some(TargetResult {
                    id: format!("trees.{}.{}", r.label, at),
                    experiment: "trees".into(),
                    what: r.label.clone(),
                    goal: Goal::parse(param_str(r, "goal"))?,
                    status,
                    values,
                    at,
                    why: r
                        .notes
                        .iter()
                        .find(|n| n.starts_with("not measurable here"))
                        .cloned()
                        .unwrap_or_default(),
                    indicative: false,
                    unit: RATIO.to_string(),
                })
            }
            _ => None,
        }
    }
}

/// The verdict over `targets`, with the closing line: `3 met, 1 missed, 2 undecided, 1 not measurable here, 4 not
/// measured`, and `(indicative: one run per point)` after it when any decided verdict is indicative. Passed
/// when none is missed; [`Verdict::inconclusive`] when none is missed but some is undecided or not measurable.
pub fn tally(targets: &[TargetResult]) -> Verdict {
    let n = |s: Status| targets.iter().filter(|t| t.status == s).count() as u64;
    let (met, missed, undecided, unmeasurable, none) = (
        n(Status::Met),
        n(Status::Missed),
        n(Status::Undecided),
        n(Status::NotMeasurable),
        n(Status::NotMeasured),
    );
    let mut line = format!("{met} met, {missed} missed, {undecided} undecided, ");
    if unmeasurable > 0 {
        line.push_str(&format!("{unmeasurable} not measurable here, "));
    }
    line.push_str(&format!("{none} not measured"));
    if targets.iter().any(|t| t.indicative && t.is_decided()) {
        line.push_str(&format!(" ({INDICATIVE})"));
    }
    Verdict::new(met, missed, line).with_undecided(undecided).with_not_measurable(unmeasurable)
}

/// What an indicative verdict is, in a few words (verdict lines, the page's banner).
pub const INDICATIVE: &str = "indicative: one run per point";

/// Marks the decided verdicts of `targets` indicative when the run was `--quick` (or the tests' `smoke`):
/// one short run per point.
pub fn mark_indicative(targets: &mut [TargetResult], length: crate::experiment::Length) {
    use crate::experiment::Length;
    if matches!(length, Length::Quick | Length::Smoke) {
        for t in targets.iter_mut().filter(|t| t.is_decided()) {
            t.indicative = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_tree_targets_keep_their_verdict() {
        use vmspace_bench::judge::Judged;
        let host = HostInfo::default();
        for (values, status) in [
            (vec![0.5, 0.6, 0.7, 0.55, 0.65, 0.6, 0.62, 0.58, 0.61], Status::Met),
            (vec![0.6, 0.65, 0.7, 0.72, 0.73, 0.74, 0.78, 0.8, 0.82], Status::Undecided),
            (vec![], Status::NotMeasured),
        ] {
            let j = Judged::new("lookup vs BTreeMap", "lookup n=21", Goal::AtMost(0.75), values.clone());
            let mut r = j.report_with("bench.tree.target", "ratio", &host);
            r.param("workload", &j.at);
            let t = TargetResult::from_report(&r).unwrap();
            assert_eq!((t.status, t.values.clone()), (status, values.clone()));
            // The report judges the same values by the same rule.
            assert_eq!(TargetResult::judge(t.id, "trees", "x", "y", t.goal, values).status, status);
        }
    }

    /// The report's targets take the shared judge's verdict (its rule is tested in `vmspace_bench::judge`) and
    /// say why a target without values is not measured.
    #[test]
    fn spread_decides() {
        let t = |goal, values: &[f64]| TargetResult::judge("id".into(), "e", "w", "a", goal, values.to_vec());
        for (goal, values) in [
            (Goal::AtMost(0.75), &[0.5, 0.6, 0.7][..]),
            (Goal::AtMost(0.75), &[0.8, 0.9]),
            (Goal::AtMost(0.75), &[0.7, 0.8]),
            (Goal::AtLeast(1.8), &[1.9, 2.0]),
            (Goal::Above(1.0), &[1.0, 1.2]),
            (Goal::NoFailures, &[0.0, 1.0]),
        ] {
            let r = t(goal, values);
            assert_eq!(r.status, Status::judge(goal, values));
            assert!(r.why.is_empty());
        }
        let r = t(Goal::AtMost(0.75), &[]);
        assert_eq!(r.status, Status::NotMeasured);
        assert_eq!(r.why, "no value in this run");
    }

    #[test]
    fn goals_and_reports_round_trip() {
        for g in [Goal::AtMost(0.75), Goal::AtLeast(1.8), Goal::Above(1.0), Goal::NoFailures] {
            assert_eq!(Goal::parse(&g.text()), Some(g));
        }
        assert_eq!(Goal::parse("<= 1.10"), Some(Goal::AtMost(1.1)));
        assert_eq!(Goal::parse("about 2"), None);
        let t = TargetResult::judge("x.y".into(), "x", "thing", "n=1", Goal::AtMost(2.0), vec![1.0, 3.0]);
        assert_eq!(t.status, Status::Undecided);
        assert_eq!(t.measured(), "2.00x [1.00-3.00]");
        let back = TargetResult::from_report(&t.to_report(&HostInfo::default())).unwrap();
        assert_eq!(back, t);
        let n =
            TargetResult::not_measured("e".into(), "x", "engine", "-", Goal::AtLeast(1.0), "not available");
        let back = TargetResult::from_report(&n.to_report(&HostInfo::default())).unwrap();
        assert_eq!((back.status, back.why.as_str()), (Status::NotMeasured, "not available"));
        let v = tally(&[t.clone(), n.clone()]);
        assert_eq!((v.met, v.missed, v.undecided), (0, 0, 1));
        assert_eq!(v.line, "0 met, 0 missed, 1 undecided, 1 not measured");
        assert!(v.passed && v.inconclusive());
        // A not measurable target keeps its values and reason through the report.
        let j = vmspace_bench::judge::Judged::new("scaling", "T=2", Goal::AtLeast(1.9), vec![2.3, 2.2])
            .not_measurable("the baseline was starved");
        let u = TargetResult::from_judged("f.s".into(), "faults", j);
        assert_eq!(u.status_text(), "not measurable here");
        let back = TargetResult::from_report(&u.to_report(&HostInfo::default())).unwrap();
        assert_eq!(back, u);
        let v = tally(&[u, n.clone()]);
        assert_eq!(v.not_measurable, 1);
        assert_eq!(v.line, "0 met, 0 missed, 0 undecided, 1 not measurable here, 1 not measured");
        // Indicative verdicts say so, in the table's words, the report and the line.
        let mut quick = vec![
            TargetResult::judge("q".into(), "x", "thing", "n=1", Goal::AtMost(2.0), vec![1.0]),
            n.clone(),
        ];
        mark_indicative(&mut quick, crate::experiment::Length::Quick);
        assert!(quick[0].indicative && !quick[1].indicative);
        assert_eq!(quick[0].status_text(), "met (indicative)");
        let back = TargetResult::from_report(&quick[0].to_report(&HostInfo::default())).unwrap();
        assert_eq!(back, quick[0]);
        assert!(tally(&quick).line.ends_with("(indicative: one run per point)"), "{}", tally(&quick).line);
        let mut default = quick.clone();
        default[0].indicative = false;
        mark_indicative(&mut default, crate::experiment::Length::Default);
        assert!(!default[0].indicative);
    }
}
