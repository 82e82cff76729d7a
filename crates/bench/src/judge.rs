//! Targets a benchmark judges: each is one measured value against a goal, met or missed, and becomes one
//! `<benchmark>.target` report (parameters `goal` and `met`, one run with the metric `value`) so that the JSON
//! carries every verdict beside the figures it came from. A target whose figures were not measured in the run
//! (a thread count or a VMA count left out) has no value and counts neither as met nor as missed.

use std::collections::BTreeMap;
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, Verdict};

/// One judged target.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// What is judged, in words (the report's label).
    pub what: String,
    /// The goal, in words (e.g. `>= 1.9`).
    pub goal: String,
    /// The measured value (NaN: not measured in this run).
    pub value: f64,
    /// Whether the value meets the goal (false when not measured).
    pub met: bool,
}

impl Judged {
    /// `value` judged against "at least `min`".
    pub fn at_least(what: impl Into<String>, value: f64, min: f64) -> Judged {
        Judged { what: what.into(), goal: format!(">= {min}"), value, met: value >= min }
    }

    /// `value` judged against "at most `max`".
    pub fn at_most(what: impl Into<String>, value: f64, max: f64) -> Judged {
        Judged { what: what.into(), goal: format!("<= {max}"), value, met: value <= max }
    }

    /// Whether the value was measured.
    pub fn measured(&self) -> bool {
        self.value.is_finite()
    }

    /// The `<benchmark>` report of this target.
    pub fn report(&self, benchmark: &str, host: &HostInfo) -> Report {
        let mut r = Report::new(benchmark, self.what.clone(), host.clone());
        r.param("goal", &self.goal);
        r.param("met", self.met && self.measured());
        if self.measured() {
            r.push_run(BTreeMap::from([("value".to_string(), self.value)]));
        } else {
            r.notes.push("not measured in this run".to_string());
        }
        r.summarise();
        r
    }
}

/// The verdict over `targets`: met and missed among the measured ones, with a line that says how many were not
/// measured.
pub fn verdict(targets: &[Judged]) -> Verdict {
    let measured: Vec<&Judged> = targets.iter().filter(|t| t.measured()).collect();
    let met = measured.iter().filter(|t| t.met).count() as u64;
    let missed = measured.len() as u64 - met;
    let unmeasured = targets.len() - measured.len();
    let mut line = format!("{met} met, {missed} missed");
    if unmeasured > 0 {
        line.push_str(&format!(" ({unmeasured} not measured in this run)"));
    }
    Verdict::new(met, missed, line)
}

/// The terminal lines of `targets`: `met`/`MISSED`/`not measured`, what, value and goal.
pub fn render(targets: &[Judged]) -> String {
    let mut out = String::new();
    for t in targets {
        let state = match (t.measured(), t.met) {
            (false, _) => "not measured",
            (true, true) => "met",
            (true, false) => "MISSED",
        };
        out.push_str(&format!("  {state:<12} {:<70} {:>8.2} (goal {})\n", t.what, t.value, t.goal));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_and_verdict() {
        let a = Judged::at_least("a", 2.0, 1.9);
        let b = Judged::at_least("b", 1.5, 1.9);
        let c = Judged::at_most("c", 0.5, 0.9);
        let d = Judged::at_least("d", f64::NAN, 1.0);
        assert!(a.met && !b.met && c.met && !d.met && !d.measured());
        let v = verdict(&[a, b.clone(), c, d.clone()]);
        assert_eq!((v.met, v.missed, v.passed), (2, 1, false));
        assert!(v.line.contains("1 not measured"), "{}", v.line);
        assert!(verdict(&[d]).passed);
        let host = vmspace_linux::hostinfo::gather();
        let r = Judged::at_most("c", 0.5, 0.9).report("bench.x.target", &host);
        assert_eq!(r.parameters["met"], true);
        assert_eq!(r.metric("value").unwrap().median, 0.5);
        assert!(render(&[b]).contains("MISSED"));
    }
}
