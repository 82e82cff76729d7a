//! Targets, judged with their run-to-run spread.
//!
//! A target compares one measured quantity with a goal: a ratio at most or at least some value (the range
//! trees' goals of BENCHMARKS.md, the engine against itself or the kernel), or a count of failures that must be
//! zero (the tearing checks). The quantity is measured once per run, so a target holds a *set* of values, and
//! its status says what the whole set allows:
//!
//! - **met**: every run's value meets the goal;
//! - **missed**: no run's value meets it;
//! - **undecided**: some runs meet it and some do not, so the spread between runs is wider than the margin to
//!   the goal and this run cannot tell (more or longer runs, or a quieter machine, may);
//! - **not measured**: no value (the side is not in this build, the experiment did not run or was interrupted).
//!
//! For a count that must be zero, a single failure misses. In a report set each target is one report of
//! benchmark `report.target` (parameters `target` id, `experiment`, `goal`, `status`, `at`; one run per value
//! with metric `value`), which is what `vmspace report --compare` reads.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

use crate::experiment::param_str;
use crate::model::sig3;

/// A goal.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// The value must be at most this.
    AtMost(f64),
    /// The value must be at least this.
    AtLeast(f64),
    /// The value must be greater than this (a ratio that must exceed 1: faster, not as fast).
    Above(f64),
    /// The value is a count of failures and must be 0.
    NoFailures,
}

impl Goal {
    /// Whether one value meets the goal.
    pub fn meets(self, v: f64) -> bool {
        match self {
            Goal::AtMost(g) => v <= g,
            Goal::AtLeast(g) => v >= g,
            Goal::Above(g) => v > g,
            Goal::NoFailures => v == 0.0,
        }
    }

    /// `<= 0.75x`, `>= 1.80x`, `> 1.00x`, `0 failures`.
    pub fn text(self) -> String {
        match self {
            Goal::AtMost(g) => format!("<= {g:.2}x"),
            Goal::AtLeast(g) => format!(">= {g:.2}x"),
            Goal::Above(g) => format!("> {g:.2}x"),
            Goal::NoFailures => "0 failures".into(),
        }
    }

    /// Parses [`Goal::text`] (also without the `x`, as `bench tree` writes its goals).
    pub fn parse(s: &str) -> Option<Goal> {
        let s = s.trim();
        if s == "0 failures" {
            return Some(Goal::NoFailures);
        }
        let num = |t: &str| t.trim().trim_end_matches('x').trim().parse::<f64>().ok();
        if let Some(t) = s.strip_prefix("<=") {
            num(t).map(Goal::AtMost)
        } else if let Some(t) = s.strip_prefix(">=") {
            num(t).map(Goal::AtLeast)
        } else if let Some(t) = s.strip_prefix('>') {
            num(t).map(Goal::Above)
        } else {
            None
        }
    }
}

/// What the values allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every run meets the goal.
    Met,
    /// No run meets the goal.
    Missed,
    /// The runs disagree.
    Undecided,
    /// Nothing was measured.
    NotMeasured,
}

impl Status {
    /// `met`, `missed`, `undecided`, `not measured`.
    pub fn word(self) -> &'static str {
        match self {
            Status::Met => "met",
            Status::Missed => "missed",
            Status::Undecided => "undecided",
            Status::NotMeasured => "not measured",
        }
    }

    /// Parses [`Status::word`].
    pub fn parse(s: &str) -> Option<Status> {
        [Status::Met, Status::Missed, Status::Undecided, Status::NotMeasured]
            .into_iter()
            .find(|x| x.word() == s)
    }

    /// Judges `values` against `goal`.
    pub fn judge(goal: Goal, values: &[f64]) -> Status {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if finite.is_empty() {
            return Status::NotMeasured;
        }
        let meeting = finite.iter().filter(|&&v| goal.meets(v)).count();
        if goal == Goal::NoFailures {
            return if meeting == finite.len() { Status::Met } else { Status::Missed };
        }
        if meeting == finite.len() {
            Status::Met
        } else if meeting == 0 {
            Status::Missed
        } else {
            Status::Undecided
        }
    }
}

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
    /// Why it is not measured (or a remark), empty otherwise.
    pub why: String,
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
        }
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
        }
    }

    /// The median value.
    pub fn median(&self) -> Option<f64> {
        vmspace_results::stats::Summary::of(&self.values).map(|s| s.median)
    }

    /// The measured value in words: `0.82x [0.71-0.95]`, `0 failures`, or `-`.
    pub fn measured(&self) -> String {
        let Some(s) = vmspace_results::stats::Summary::of(&self.values) else { return "-".into() };
        match self.goal {
            Goal::NoFailures => format!("{} failure{}", s.max as u64, if s.max == 1.0 { "" } else { "s" }),
            _ if s.n == 1 => format!("{}x", sig3(s.median)),
            _ => format!("{}x [{}-{}]", sig3(s.median), sig3(s.min), sig3(s.max)),
        }
    }

    /// The target as a `report.target` report.
    pub fn to_report(&self, host: &HostInfo) -> Report {
        let mut r = Report::new("report.target", format!("{} ({})", self.what, self.at), host.clone());
        r.param("experiment", &self.experiment);
        r.param("target", &self.id);
        r.param("what", &self.what);
        r.param("at", &self.at);
        r.param("goal", self.goal.text());
        r.param("status", self.status.word());
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
    /// tree` (its `met` and its one ratio).
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
            }),
            "bench.tree.target" => {
                let met = r.parameters.get("met").and_then(serde_json::Value::as_bool)?;
                let at = param_str(r, "workload").to_string();
                Some(TargetResult {
                    id: format!("trees.{}.{}", r.label, at),
                    experiment: "trees".into(),
                    what: r.label.clone(),
                    goal: Goal::parse(param_str(r, "goal"))?,
                    status: if values.is_empty() {
                        Status::NotMeasured
                    } else if met {
                        Status::Met
                    } else {
                        Status::Missed
                    },
                    values,
                    at,
                    why: String::new(),
                })
            }
            _ => None,
        }
    }
}

/// Counts of each status, and the closing line: `3 met, 1 missed, 2 undecided, 4 not measured`.
pub fn tally(targets: &[TargetResult]) -> (u64, u64, String) {
    let n = |s: Status| targets.iter().filter(|t| t.status == s).count() as u64;
    let (met, missed, undecided, none) =
        (n(Status::Met), n(Status::Missed), n(Status::Undecided), n(Status::NotMeasured));
    (met, missed, format!("{met} met, {missed} missed, {undecided} undecided, {none} not measured"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_decides() {
        let g = Goal::AtMost(0.75);
        assert_eq!(Status::judge(g, &[0.5, 0.6, 0.7]), Status::Met);
        assert_eq!(Status::judge(g, &[0.8, 0.9]), Status::Missed);
        assert_eq!(Status::judge(g, &[0.7, 0.8]), Status::Undecided);
        assert_eq!(Status::judge(g, &[]), Status::NotMeasured);
        assert_eq!(Status::judge(g, &[f64::NAN]), Status::NotMeasured);
        let g = Goal::AtLeast(1.8);
        assert_eq!(Status::judge(g, &[1.9, 2.0]), Status::Met);
        assert_eq!(Status::judge(g, &[1.7, 1.9]), Status::Undecided);
        let g = Goal::Above(1.0);
        assert_eq!(Status::judge(g, &[1.0, 1.2]), Status::Undecided);
        assert_eq!(Status::judge(g, &[1.01, 1.2]), Status::Met);
        assert_eq!(Status::judge(Goal::NoFailures, &[0.0, 0.0]), Status::Met);
        assert_eq!(Status::judge(Goal::NoFailures, &[0.0, 1.0]), Status::Missed);
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
        let (met, missed, line) = tally(&[t, n]);
        assert_eq!((met, missed), (0, 0));
        assert_eq!(line, "0 met, 0 missed, 1 undecided, 1 not measured");
    }
}
