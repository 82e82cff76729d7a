//! The one judge of every benchmark target: a measured quantity against a goal, with the spread of its values.
//!
//! # The rule
//!
//! A target holds a *set* of values of one quantity: one per pair of neighbouring batches (the maple tree's
//! batch over `BTreeMap`'s batch of the same round, the 2-thread batch over the 1-thread batch beside it, ...),
//! one per run, or a single value. Its verdict says what the whole set allows:
//!
//! - the values give a [`Interval`] for their median: the distribution-free confidence interval of the median
//!   from order statistics ([`median_interval`]): with `n` sorted values `x(1) <= ... <= x(n)`, the interval
//!   `[x(k), x(n+1-k)]` holds the true median with probability `1 - 2 P(B <= k-1)`, `B ~ Binomial(n, 1/2)`,
//!   whatever the values' distribution, as long as they are independent draws of one quantity. `k` is the
//!   largest rank that keeps that probability at least [`CONFIDENCE`] (95%); with 5 values or fewer no rank
//!   reaches it and the interval is the whole range `[min, max]` (93.75% for 5 values, less for fewer);
//! - **met** when the whole interval is on the good side of the goal by at least the machine's resolution
//!   ([`RESOLUTION`], 3% of the goal), **missed** when it is wholly on the bad side by as much, **undecided**
//!   otherwise: the spread is wider than the margin to the goal, or the margin is smaller than what separates
//!   two runs of the same build. The resolution is there because an interval only holds the noise *within* a
//!   run: three consecutive quiet runs of `bench tree` gave the n = 1,000 lookup ratio as 0.738x [0.735-0.750],
//!   0.753x [0.748-0.766] and 0.757x [0.754-0.773] (heap placement and page colouring change between
//!   processes), so a goal of 0.75x would have been met in the first and missed in the third;
//! - **not measured** when there is no finite value (the cell was not measured in this run);
//! - **not measurable** (here) when the values exist but this machine could not show the quantity either way,
//!   for a reason measured in the same run ([`Judged::not_measurable`]): a scaling (T threads over one) whose
//!   one-thread baseline did not have a CPU of its own is meaningless whatever the ratio says
//!   (`vmspace_bench::faults::scaling_check`). The values are kept and shown beside the reason;
//! - a count of failures ([`Goal::NoFailures`]) is missed by a single failure: no interval; an exact quantity
//!   (bytes per VMA: the same in every run) is judged without the band ([`Judged::exact_at_most`]).
//!
//! So a decided verdict flips between two runs only when the true median moved across the goal (the load
//! changed the quantity itself) or one run's interval missed its median (at most 5% of the time per target when
//! the values are independent). A single value is its own interval, decided met or missed. Where the load
//! changes the quantity itself (a 2-thread scaling needs a free second CPU), a benchmark may judge a control
//! beside it and judge a miss not measurable here when the control missed too ([`Judged::unless_control_met`]).
//!
//! Every target becomes one `<benchmark>.target` report ([`Judged::report`]): parameters `goal` (`<= 0.75x`),
//! `verdict` (a [`Status::word`]), `met` (true, false, or null when undecided or not measured), `median`, `low`,
//! `high` (the interval), `values` (how many), `interval` (how it was taken), and one run per value (metric
//! `value`, or the name the benchmark gives), so the JSON carries every verdict beside the values it came from.

use std::collections::BTreeMap;
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, Verdict};

/// The coverage the interval of [`median_interval`] keeps where the number of values allows it.
pub const CONFIDENCE: f64 = 0.95;

/// The relative margin to the goal that a decided verdict needs (module docs: what varies between runs of one
/// build on this class of machine, which no interval within a run can show).
pub const RESOLUTION: f64 = 0.03;

/// How the interval is taken, in words (written into every target report).
pub const INTERVAL_METHOD: &str = "order-statistic confidence interval of the median (95% where the values \
                                   allow it; min-max for 5 values or fewer)";

/// A goal.
#[derive(Debug, Clone, Copy, PartialEq)]
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

    /// Whether `v` meets the goal by at least [`RESOLUTION`] (a failure count: exactly).
    pub fn clearly_meets(self, v: f64) -> bool {
        match self {
            Goal::AtMost(g) => v <= g * (1.0 - RESOLUTION),
            Goal::AtLeast(g) => v >= g * (1.0 + RESOLUTION),
            Goal::Above(g) => v > g * (1.0 + RESOLUTION),
            Goal::NoFailures => v == 0.0,
        }
    }

    /// Whether `v` misses the goal by more than [`RESOLUTION`] (a failure count: any failure).
    pub fn clearly_misses(self, v: f64) -> bool {
        match self {
            Goal::AtMost(g) => v > g * (1.0 + RESOLUTION),
            Goal::AtLeast(g) => v < g * (1.0 - RESOLUTION),
            Goal::Above(g) => v <= g * (1.0 - RESOLUTION),
            Goal::NoFailures => v != 0.0,
        }
    }

    /// `<= 0.75x`, `>= 1.80x`, `> 1.00x`, `0 failures`: the goal of a ratio.
    pub fn text(self) -> String {
        self.text_in(RATIO)
    }

    /// The goal in `unit` ([`Judged::unit`]): `<= 50.00 ns`, `>= 20.00 M VMAs/s`; [`Goal::text`] for [`RATIO`].
    pub fn text_in(self, unit: &str) -> String {
        match self {
            Goal::AtMost(g) => format!("<= {g:.2}{unit}"),
            Goal::AtLeast(g) => format!(">= {g:.2}{unit}"),
            Goal::Above(g) => format!("> {g:.2}{unit}"),
            Goal::NoFailures => "0 failures".into(),
        }
    }

    /// Parses [`Goal::text`] and [`Goal::text_in`] (the number after the comparison, whatever unit follows;
    /// also without the `x`, as older `bench tree` runs wrote their goals).
    pub fn parse(s: &str) -> Option<Goal> {
        let s = s.trim();
        if s == "0 failures" {
            return Some(Goal::NoFailures);
        }
        let num = |t: &str| t.split_whitespace().next()?.trim_end_matches('x').parse::<f64>().ok();
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

/// What the values allow (the rule of the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// The whole interval meets the goal.
    Met,
    /// No part of the interval meets the goal.
    Missed,
    /// The interval straddles the goal.
    Undecided,
    /// Nothing was measured.
    NotMeasured,
    /// Measured, but this machine could not show the quantity (the reason is the target's note).
    NotMeasurable,
}

impl Status {
    /// `met`, `missed`, `undecided`, `not measured`.
    pub fn word(self) -> &'static str {
        match self {
            Status::Met => "met",
            Status::Missed => "missed",
            Status::Undecided => "undecided",
            Status::NotMeasured => "not measured",
            Status::NotMeasurable => "not measurable",
        }
    }

    /// Every status, in the order of the tallies.
    pub const ALL: [Status; 5] =
        [Status::Met, Status::Missed, Status::Undecided, Status::NotMeasurable, Status::NotMeasured];

    /// Parses [`Status::word`].
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|x| x.word() == s)
    }

    /// The JSON `met` of a target: true, false, or null when undecided or not measured.
    pub fn met_json(self) -> serde_json::Value {
        match self {
            Status::Met => true.into(),
            Status::Missed => false.into(),
            Status::Undecided | Status::NotMeasured | Status::NotMeasurable => serde_json::Value::Null,
        }
    }

    /// Judges `values` (non-finite ones are left out) against `goal` by the rule of the module docs.
    pub fn judge(goal: Goal, values: &[f64]) -> Status {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if finite.is_empty() {
            return Status::NotMeasured;
        }
        if goal == Goal::NoFailures {
            return if finite.iter().all(|&v| goal.meets(v)) { Status::Met } else { Status::Missed };
        }
        let Some(i) = median_interval(&finite) else { return Status::NotMeasured };
        if goal.clearly_meets(i.low) && goal.clearly_meets(i.high) {
            Status::Met
        } else if goal.clearly_misses(i.low) && goal.clearly_misses(i.high) {
            Status::Missed
        } else {
            Status::Undecided
        }
    }
}

/// The median of a set of values and a confidence interval around it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// The median (mean of the two middle values for an even count).
    pub median: f64,
    /// The interval's lower end: the `rank`-th smallest value.
    pub low: f64,
    /// The interval's upper end: the `rank`-th largest value.
    pub high: f64,
    /// How many values.
    pub n: usize,
    /// The rank `k` (1-based) of the ends: `x(k)` and `x(n+1-k)`; 1 is `[min, max]`.
    pub rank: usize,
    /// The probability that such an interval holds the true median: `1 - 2 P(Binomial(n, 1/2) <= k-1)`.
    pub coverage: f64,
}

impl Interval {
    /// `0.82x [0.71-0.95]` (`0.82x` for one value): each number to 3 significant digits.
    pub fn text(&self) -> String {
        self.text_in(RATIO)
    }

    /// [`Interval::text`] in `unit`: `38.4 ns [36.1-40.2]`.
    pub fn text_in(&self, unit: &str) -> String {
        if self.n == 1 {
            format!("{}{unit}", sig3(self.median))
        } else {
            format!("{}{unit} [{}-{}]", sig3(self.median), sig3(self.low), sig3(self.high))
        }
    }
}

/// A measured thread on a CPU for less than this share of its run (CPU time over wall time) did not have a CPU of
/// its own: a rate it measured says how much CPU the machine left it as much as how fast the code is
/// ([`Judged::unless_starved`]).
pub const MIN_CPU_SHARE: f64 = 0.9;

/// Fewer runs than this whose threads had their CPUs leave a target not measurable here
/// ([`Judged::on_runs_with_cpus`]).
pub const MIN_RUNS_WITH_CPUS: usize = 3;

/// The unit of a ratio target (`0.82x`), the default of [`Judged::unit`].
pub const RATIO: &str = "x";

/// `x` to 3 significant digits (`0.823`, `1.83`, `12.3`, `123`, `1235`).
fn sig3(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// `P(Binomial(n, 1/2) <= j)`, summed in log space so that large `n` do not underflow.
fn binomial_half_cdf(n: usize, j: usize) -> f64 {
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0f64; // ln C(n, 0)
    let mut sum = 0.0;
    for i in 0..=j.min(n) {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        sum += (ln_choose + ln_half_n).exp();
    }
    sum.min(1.0)
}

/// The median of the finite `values` and its order-statistic confidence interval (module docs); `None` when no
/// value is finite.
pub fn median_interval(values: &[f64]) -> Option<Interval> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    let coverage = |k: usize| 1.0 - 2.0 * binomial_half_cdf(n, k - 1);
    // The largest k (at most the middle rank) whose interval still covers CONFIDENCE; 1 if none does.
    let mut rank = 1;
    for k in 2..=n.div_ceil(2) {
        if coverage(k) >= CONFIDENCE {
            rank = k;
        } else {
            break;
        }
    }
    Some(Interval { median, low: v[rank - 1], high: v[n - rank], n, rank, coverage: coverage(rank).max(0.0) })
}

/// One judged target.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// What is judged, in words (the report's label).
    pub what: String,
    /// Where (a workload and size, a thread count), empty when the label says it all.
    pub at: String,
    /// The goal.
    pub goal: Goal,
    /// The values judged: one per pair of batches, per run, or a single value (non-finite: not measured).
    pub values: Vec<f64>,
    /// The median and its interval (`None`: not measured).
    pub interval: Option<Interval>,
    /// The verdict.
    pub status: Status,
    /// Why the verdict is what it is when the values alone do not say (e.g. a miss judged not measurable
    /// because the control could not meet the goal on this machine either); empty otherwise.
    pub note: String,
    /// The unit of the values and the goal as printed after a number: [`RATIO`] (`x`) for ratios, else with
    /// its space (` ns`, ` M VMAs/s`).
    pub unit: &'static str,
}

impl Judged {
    /// `values` judged against `goal`.
    pub fn new(what: impl Into<String>, at: impl Into<String>, goal: Goal, values: Vec<f64>) -> Judged {
        let values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        Judged {
            what: what.into(),
            at: at.into(),
            goal,
            interval: median_interval(&values),
            status: Status::judge(goal, &values),
            values,
            note: String::new(),
            unit: RATIO,
        }
    }

    /// The same target with its values and goal in `unit` (` ns`, ` M VMAs/s`) instead of a ratio's `x`.
    pub fn in_unit(mut self, unit: &'static str) -> Judged {
        self.unit = unit;
        self
    }

    /// Judges a miss not measurable here unless `control`, the same quantity of a reference that should meet the
    /// goal on any machine able to show it (e.g. unsynchronised `BTreeMap` lookups for a 2-thread scaling), met it
    /// in the same run: when the control misses too, the machine (another job on the second CPU, say) kept the
    /// goal out of reach, and the miss says nothing about the structure. A met target stays met.
    pub fn unless_control_met(self, control: &Judged, control_name: &str) -> Judged {
        if self.status == Status::Missed && control.status != Status::Met {
            let why = format!(
                "missed, but the control ({control_name}: {}) was {} against the same goal in this run: the \
                 machine could not show the goal",
                control.measured_text(),
                control.status.word()
            );
            return self.not_measurable(why);
        }
        self
    }

    /// The same target judged "not measurable here" for `reason` (measured in the same run), whatever its values
    /// say; a target without a value stays not measured. The reason becomes the note.
    pub fn not_measurable(mut self, reason: impl Into<String>) -> Judged {
        if self.measured() {
            self.status = Status::NotMeasurable;
            self.note = format!("not measurable here: {}", reason.into());
        }
        self
    }

    /// `runs` (each a value and the least share of its run that the threads it measured were on their CPUs,
    /// CPU time over wall time; NaN: not recorded) judged on the runs whose threads had their CPUs (share at
    /// least [`MIN_CPU_SHARE`]). A run whose threads did not says how much CPU the machine left them, not what
    /// the code does: a slowdown beside a reader that was off its CPU is no slowdown, a ratio of two times of
    /// which one was stretched by waiting is noise. When some runs are left out the note says how many; with
    /// fewer than [`MIN_RUNS_WITH_CPUS`] left the target is not measurable here (judged on all its values, for
    /// the record).
    pub fn on_runs_with_cpus(
        what: impl Into<String>,
        at: impl Into<String>,
        goal: Goal,
        runs: &[(f64, f64)],
    ) -> Judged {
        let had = |share: f64| share.is_nan() || share >= MIN_CPU_SHARE;
        let good: Vec<f64> = runs.iter().filter(|r| had(r.1)).map(|r| r.0).collect();
        let lacking = runs.len() - good.len();
        if lacking == 0 {
            return Judged::new(what, at, goal, good);
        }
        let why = format!(
            "in {lacking} of {} runs a measured thread was on its CPU under {:.0}% of the run",
            runs.len(),
            100.0 * MIN_CPU_SHARE
        );
        if good.len() < MIN_RUNS_WITH_CPUS {
            return Judged::new(what, at, goal, runs.iter().map(|r| r.0).collect()).not_measurable(why);
        }
        let mut j = Judged::new(what, at, goal, good);
        j.note = format!("judged on the other {} runs: {why}", j.values.len());
        j
    }

    /// The same "at least" rate target checked against the CPU its run had: `share` is the share of the run the
    /// measured thread was on a CPU (CPU time over wall time; NaN: unknown, nothing to hold against the
    /// verdict). At or above [`MIN_CPU_SHARE`] the verdict stands. Below it, a miss so deep that even its
    /// interval's upper end divided by the share misses the goal stands, with that figure in its note (the run
    /// could not have met it with all its CPU time); any other miss or undecided verdict is not measurable here.
    /// A met stands when `met_stands` (the rate alone was starved: with more CPU it could only have been
    /// higher); when the starved run was also the reference the rate is held against, it is not measurable
    /// either.
    pub fn unless_starved(mut self, share: f64, met_stands: bool) -> Judged {
        if !share.is_finite() || share >= MIN_CPU_SHARE || !self.measured() {
            return self;
        }
        let why = format!("the measured thread was on a CPU {:.0}% of its run", 100.0 * share);
        match self.status {
            Status::Met if met_stands => self,
            Status::Missed => {
                let best = match (self.goal, self.interval.as_ref()) {
                    (Goal::AtLeast(g) | Goal::Above(g), Some(i)) if share > 0.0 && i.high / share < g => {
                        Some(i.high / share)
                    }
                    _ => None,
                };
                match best {
                    Some(best) => {
                        self.note = format!(
                            "missed even scaled to full CPU time: at most {best:.3}{} ({why})",
                            self.unit
                        );
                        self
                    }
                    None => self.not_measurable(why),
                }
            }
            _ => self.not_measurable(why),
        }
    }

    /// One `value` judged against "at least `min`" (NaN: not measured).
    pub fn at_least(what: impl Into<String>, value: f64, min: f64) -> Judged {
        Judged::new(what, "", Goal::AtLeast(min), vec![value])
    }

    /// One `value` judged against "at most `max`" (NaN: not measured).
    pub fn at_most(what: impl Into<String>, value: f64, max: f64) -> Judged {
        Judged::new(what, "", Goal::AtMost(max), vec![value])
    }

    /// One *exact* `value` (a count of bytes or objects, the same in every run: no timing noise) against "at
    /// most `max`": judged without the resolution band, since nothing varies between runs.
    pub fn exact_at_most(what: impl Into<String>, value: f64, max: f64) -> Judged {
        let mut j = Judged::at_most(what, value, max);
        if j.measured() {
            j.status = if Goal::AtMost(max).meets(value) { Status::Met } else { Status::Missed };
        }
        j
    }

    /// Whether anything was measured.
    pub fn measured(&self) -> bool {
        self.status != Status::NotMeasured
    }

    /// Whether the target is met (the whole interval meets the goal).
    pub fn met(&self) -> bool {
        self.status == Status::Met
    }

    /// The median value (NaN: not measured).
    pub fn value(&self) -> f64 {
        self.interval.map_or(f64::NAN, |i| i.median)
    }

    /// The measured value in words: `0.82x [0.71-0.95]`, `0.82x` for one value, `-` when not measured.
    pub fn measured_text(&self) -> String {
        self.interval.map_or_else(|| "-".to_string(), |i| i.text_in(self.unit))
    }

    /// The `<benchmark>` report of this target (module docs); each value is one run with metric `metric`.
    pub fn report_with(&self, benchmark: &str, metric: &str, host: &HostInfo) -> Report {
        let mut r = Report::new(benchmark, self.what.clone(), host.clone());
        r.param("goal", self.goal.text_in(self.unit));
        r.param("verdict", self.status.word());
        r.parameters.insert("met".to_string(), self.status.met_json());
        if !self.at.is_empty() {
            r.param("at", &self.at);
        }
        if let Some(i) = self.interval {
            r.param("median", i.median);
            r.param("low", i.low);
            r.param("high", i.high);
            r.param("values", i.n);
            r.param("interval_coverage", i.coverage);
        }
        r.param("interval", INTERVAL_METHOD);
        for &v in &self.values {
            r.push_run(BTreeMap::from([(metric.to_string(), v)]));
        }
        if !self.measured() {
            r.notes.push("not measured in this run".to_string());
        }
        if !self.note.is_empty() {
            r.notes.push(self.note.clone());
        }
        r.summarise();
        r
    }

    /// [`Judged::report_with`] with the metric `value`.
    pub fn report(&self, benchmark: &str, host: &HostInfo) -> Report {
        self.report_with(benchmark, "value", host)
    }
}

/// Counts of met, missed, undecided, not measurable and not measured among `targets` (the order of
/// [`Status::ALL`]).
pub fn counts(targets: &[Judged]) -> [u64; 5] {
    Status::ALL.map(|s| targets.iter().filter(|t| t.status == s).count() as u64)
}

/// The verdict over `targets`: met and missed among the decided ones (passed when none is missed), with a line
/// that also says how many were undecided, not measurable here and not measured.
pub fn verdict(targets: &[Judged]) -> Verdict {
    let [met, missed, undecided, unmeasurable, unmeasured] = counts(targets);
    let mut line = format!("{met} met, {missed} missed");
    if undecided > 0 {
        line.push_str(&format!(", {undecided} undecided"));
    }
    if unmeasurable > 0 {
        line.push_str(&format!(", {unmeasurable} not measurable here"));
    }
    if unmeasured > 0 {
        line.push_str(&format!(" ({unmeasured} not measured in this run)"));
    }
    Verdict::new(met, missed, line).with_undecided(undecided).with_not_measurable(unmeasurable)
}

/// The terminal lines of `targets`: `met`/`MISSED`/`undecided`/`not measured`, what, the median and its
/// interval, and the goal.
pub fn render(targets: &[Judged]) -> String {
    let mut out = String::new();
    for t in targets {
        let state = match t.status {
            Status::Missed => "MISSED",
            s => s.word(),
        };
        let what = if t.at.is_empty() { t.what.clone() } else { format!("{} ({})", t.what, t.at) };
        out.push_str(&format!(
            "  {state:<14} {what:<70} {:>22} (goal {})\n",
            t.measured_text(),
            t.goal.text_in(t.unit)
        ));
        if !t.note.is_empty() {
            out.push_str(&format!("                 {}\n", t.note));
        }
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
        // Exact quantities need no margin: 212.7 bytes against 213 is met, not undecided.
        assert_eq!(Judged::at_most("e", 212.7, 213.0).status, Status::Undecided);
        assert_eq!(Judged::exact_at_most("e", 212.7, 213.0).status, Status::Met);
        assert_eq!(Judged::exact_at_most("e", 213.5, 213.0).status, Status::Missed);
        assert_eq!(Judged::exact_at_most("e", f64::NAN, 213.0).status, Status::NotMeasured);
        assert!(a.met() && !b.met() && c.met() && !d.met() && !d.measured());
        assert_eq!(b.status, Status::Missed);
        let v = verdict(&[a, b.clone(), c, d.clone()]);
        assert_eq!((v.met, v.missed, v.passed), (2, 1, false));
        assert!(v.line.contains("1 not measured"), "{}", v.line);
        assert!(verdict(&[d]).passed);
        let host = vmspace_linux::hostinfo::gather();
        let r = Judged::at_most("c", 0.5, 0.9).report("bench.x.target", &host);
        assert_eq!(r.parameters["met"], true);
        assert_eq!(r.parameters["verdict"], "met");
        assert_eq!(r.parameters["goal"], "<= 0.90x");
        assert_eq!(r.metric("value").unwrap().median, 0.5);
        assert!(render(&[b]).contains("MISSED"));
    }

    #[test]
    fn goals_round_trip() {
        for g in [Goal::AtMost(0.75), Goal::AtLeast(1.8), Goal::Above(1.0), Goal::NoFailures] {
            assert_eq!(Goal::parse(&g.text()), Some(g));
        }
        assert_eq!(Goal::parse("<= 1.10"), Some(Goal::AtMost(1.1)));
        assert_eq!(Goal::parse("about 2"), None);
        assert_eq!(Goal::parse(&Goal::AtMost(50.0).text_in(" ns")), Some(Goal::AtMost(50.0)));
        assert_eq!(Goal::parse(">= 20.00 M VMAs/s"), Some(Goal::AtLeast(20.0)));
        let t = Judged::at_least("rate", 30.31, 20.0).in_unit(" M VMAs/s");
        assert_eq!(t.measured_text(), "30.3 M VMAs/s");
        assert!(render(&[t]).contains("30.3 M VMAs/s (goal >= 20.00 M VMAs/s)"));
        for s in Status::ALL {
            assert_eq!(Status::parse(s.word()), Some(s));
        }
    }

    #[test]
    fn binomial_tail() {
        // P(B(5, 1/2) <= 0) = 1/32; P(B(9, 1/2) <= 1) = 10/512; the whole distribution sums to 1.
        assert!((binomial_half_cdf(5, 0) - 1.0 / 32.0).abs() < 1e-12);
        assert!((binomial_half_cdf(9, 1) - 10.0 / 512.0).abs() < 1e-12);
        assert!((binomial_half_cdf(2000, 2000) - 1.0).abs() < 1e-9);
        assert!((binomial_half_cdf(2000, 999) - 0.5).abs() < 0.01);
    }

    #[test]
    fn interval_ranks() {
        // 5 values or fewer: the whole range.
        let i = median_interval(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((i.median, i.low, i.high, i.n, i.rank), (3.0, 1.0, 5.0, 5, 1));
        assert!((i.coverage - 0.9375).abs() < 1e-12);
        // 9 values: [x(2), x(8)] covers 96.1%; [x(3), x(7)] only 82%.
        let nine: Vec<f64> = (1..=9).map(f64::from).collect();
        let i = median_interval(&nine).unwrap();
        assert_eq!((i.low, i.high, i.rank), (2.0, 8.0, 2));
        assert!((i.coverage - (1.0 - 20.0 / 512.0)).abs() < 1e-12);
        // Non-finite values are left out; one value is its own interval; none is nothing.
        let i = median_interval(&[f64::NAN, 2.0]).unwrap();
        assert_eq!((i.low, i.median, i.high, i.n), (2.0, 2.0, 2.0, 1));
        assert_eq!(i.text(), "2.00x");
        assert!(median_interval(&[f64::INFINITY]).is_none());
        // Many values: the interval narrows around the median, every rank keeps 95%.
        let many: Vec<f64> = (0..101).map(f64::from).collect();
        let i = median_interval(&many).unwrap();
        assert!(i.coverage >= CONFIDENCE && i.low > 35.0 && i.high < 65.0 && i.median == 50.0, "{i:?}");
    }

    #[test]
    fn the_rule_decides_only_outside_the_spread() {
        let g = Goal::AtMost(0.75);
        // Clearly on each side: met, missed.
        assert_eq!(Status::judge(g, &[0.5, 0.6, 0.7, 0.55, 0.65, 0.6, 0.62, 0.58, 0.61]), Status::Met);
        assert_eq!(Status::judge(g, &[0.8, 0.9, 1.1, 0.85, 0.95, 0.88, 0.92, 0.81, 0.9]), Status::Missed);
        // A series that straddles the goal is undecided, although its median is on the good side.
        let straddle = [0.60, 0.65, 0.70, 0.72, 0.73, 0.74, 0.78, 0.80, 0.82];
        assert!(median_interval(&straddle).unwrap().median <= 0.75);
        assert_eq!(Status::judge(g, &straddle), Status::Undecided);
        // One outlier among nine does not undecide: the interval leaves out the extremes.
        assert_eq!(Status::judge(g, &[0.5, 0.6, 0.7, 0.55, 0.65, 0.6, 0.62, 0.58, 2.5]), Status::Met);
        // Five values or fewer: every one must agree.
        assert_eq!(Status::judge(g, &[0.5, 0.6, 0.7]), Status::Met);
        assert_eq!(Status::judge(g, &[0.7, 0.8]), Status::Undecided);
        assert_eq!(Status::judge(g, &[]), Status::NotMeasured);
        assert_eq!(Status::judge(g, &[f64::NAN]), Status::NotMeasured);
        let g = Goal::AtLeast(1.8);
        assert_eq!(Status::judge(g, &[1.9, 2.0]), Status::Met);
        assert_eq!(Status::judge(g, &[1.7, 1.9]), Status::Undecided);
        let g = Goal::Above(1.0);
        assert_eq!(Status::judge(g, &[1.0, 1.2]), Status::Undecided);
        assert_eq!(Status::judge(g, &[1.04, 1.2]), Status::Met);
        // Within the resolution of the goal: undecided however narrow the interval (the three quiet runs of the
        // n = 1,000 lookup ratio in the module docs, each alone, and a single value).
        let g = Goal::AtMost(0.75);
        for run in [[0.735, 0.738, 0.750], [0.748, 0.753, 0.766], [0.754, 0.757, 0.773]] {
            assert_eq!(Status::judge(g, &run), Status::Undecided, "{run:?}");
        }
        assert_eq!(Status::judge(g, &[0.74]), Status::Undecided);
        assert_eq!(Status::judge(g, &[0.72]), Status::Met);
        assert_eq!(Status::judge(g, &[0.78]), Status::Missed);
        // Failure counts: one failure misses, whatever the others.
        assert_eq!(Status::judge(Goal::NoFailures, &[0.0, 0.0]), Status::Met);
        assert_eq!(
            Status::judge(Goal::NoFailures, &[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
            Status::Missed
        );
    }

    #[test]
    fn a_miss_counts_only_when_the_control_could_meet_the_goal() {
        let goal = Goal::AtLeast(1.8);
        let missed = || Judged::new("scaling", "n=21", goal, vec![1.1, 1.2, 1.15]);
        let met = Judged::new("scaling", "n=21", goal, vec![1.9, 1.95, 1.88]);
        let control_met = Judged::new("control", "", goal, vec![1.95, 1.98, 1.9]);
        let control_missed = Judged::new("control", "", goal, vec![1.0, 1.1, 1.05]);
        let control_undecided = Judged::new("control", "", goal, vec![1.7, 1.9, 1.95]);
        assert_eq!(missed().unless_control_met(&control_met, "c").status, Status::Missed);
        for c in [&control_missed, &control_undecided] {
            let j = missed().unless_control_met(c, "BTreeMap");
            assert_eq!(j.status, Status::NotMeasurable);
            assert!(j.note.contains("BTreeMap") && j.note.contains("could not show"), "{}", j.note);
            let r = j.report("x.target", &HostInfo::default());
            assert!(r.notes.iter().any(|n| n.contains("control")), "{:?}", r.notes);
        }
        assert_eq!(met.clone().unless_control_met(&control_missed, "c"), met);
    }

    #[test]
    fn undecided_targets_neither_pass_nor_fail() {
        let u = Judged::new("u", "n=21", Goal::AtMost(1.0), vec![0.9, 1.1, 0.95, 1.05]);
        assert_eq!(u.status, Status::Undecided);
        assert_eq!(u.measured_text(), "1.00x [0.900-1.10]");
        let v = verdict(std::slice::from_ref(&u));
        assert_eq!((v.met, v.missed, v.undecided, v.passed), (0, 0, 1, true));
        assert_eq!(v.line, "0 met, 0 missed, 1 undecided");
        let r = u.report_with("bench.tree.target", "ratio", &HostInfo::default());
        assert!(r.parameters["met"].is_null());
        assert_eq!(r.parameters["verdict"], "undecided");
        assert_eq!(r.parameters["values"], 4);
        assert_eq!((r.parameters["low"].as_f64(), r.parameters["high"].as_f64()), (Some(0.9), Some(1.1)));
        assert_eq!(r.runs.len(), 4);
        assert!(render(&[u]).contains("undecided"));
    }

    #[test]
    fn not_measurable_targets_keep_their_values_and_reason() {
        let met = Judged::new("scaling", "T=2", Goal::AtLeast(1.9), vec![2.2, 2.3, 2.28]);
        assert_eq!(met.status, Status::Met);
        let j = met.clone().not_measurable("the one-thread baseline had a CPU 40% of the time");
        assert_eq!(j.status, Status::NotMeasurable);
        assert_eq!(j.values, met.values);
        assert!(j.note.starts_with("not measurable here: the one-thread baseline"), "{}", j.note);
        // Nothing measured stays not measured.
        let none = Judged::at_least("x", f64::NAN, 1.9).not_measurable("why");
        assert_eq!(none.status, Status::NotMeasured);
        let v = verdict(&[j.clone(), Judged::at_least("y", 2.0, 1.5)]);
        assert_eq!((v.met, v.missed, v.undecided, v.not_measurable), (1, 0, 0, 1));
        assert!(v.passed && v.inconclusive());
        assert_eq!(v.line, "1 met, 0 missed, 1 not measurable here");
        assert!(!verdict(&[Judged::at_least("y", 2.0, 1.5)]).inconclusive());
        let r = j.report("bench.faults.target", &HostInfo::default());
        assert_eq!(r.parameters["verdict"], "not measurable");
        assert!(r.parameters["met"].is_null());
        assert!(r.notes.iter().any(|n| n.contains("baseline")), "{:?}", r.notes);
        assert!(render(&[j]).contains("not measurable"));
    }

    #[test]
    fn a_starved_rate_is_judged_for_what_its_cpu_time_allows() {
        let rates = || vec![30.0, 31.0, 32.0, 31.5, 30.5];
        let judged = || Judged::new("rate", "", Goal::AtLeast(40.0), rates());
        // With its CPU (or unknown share): the verdict stands.
        assert_eq!(judged().unless_starved(0.95, true).status, Status::Missed);
        assert_eq!(judged().unless_starved(f64::NAN, true).status, Status::Missed);
        // On a CPU 50% of the run: 32 / 0.5 = 64 could have met 40, so the miss says nothing.
        let j = judged().unless_starved(0.5, true);
        assert_eq!(j.status, Status::NotMeasurable);
        assert!(j.note.contains("on a CPU 50% of its run"), "{}", j.note);
        // On a CPU 85%: even 32 / 0.85 = 37.6 misses 40, so the miss stands, with that figure.
        let j = judged().unless_starved(0.85, true);
        assert_eq!(j.status, Status::Missed);
        assert!(j.note.contains("missed even scaled to full CPU time: at most 37.6"), "{}", j.note);
        // A met stands when only the measured rate was starved, not when its reference was too.
        let met = || Judged::new("rate", "", Goal::AtLeast(20.0), rates());
        assert_eq!(met().unless_starved(0.5, true).status, Status::Met);
        assert_eq!(met().unless_starved(0.5, false).status, Status::NotMeasurable);
        // Undecided while starved: not measurable.
        let und = Judged::new("rate", "", Goal::AtLeast(31.0), rates()).unless_starved(0.5, true);
        assert_eq!(und.status, Status::NotMeasurable);
    }

    #[test]
    fn runs_without_their_cpus_are_left_out() {
        let g = Goal::Above(1.0);
        // Unknown shares (older results) count as having had the CPU.
        let j = Judged::on_runs_with_cpus("r", "", g, &[(5.0, f64::NAN), (6.0, f64::NAN), (7.0, f64::NAN)]);
        assert_eq!((j.status, j.values.len()), (Status::Met, 3));
        // A starved pair's wild ratio is left out, and the note says so.
        let j = Judged::on_runs_with_cpus("r", "", g, &[(5.0, 0.95), (0.05, 0.4), (6.0, 0.99), (7.0, 0.97)]);
        assert_eq!((j.status, j.values.clone()), (Status::Met, vec![5.0, 6.0, 7.0]));
        assert!(j.note.contains("in 1 of 4 runs"), "{}", j.note);
        // Too few runs left: not measurable, with every value kept for the record.
        let j = Judged::on_runs_with_cpus("r", "", g, &[(261.0, 0.3), (0.05, 0.4), (6.0, 0.99)]);
        assert_eq!((j.status, j.values.len()), (Status::NotMeasurable, 3));
    }
}
