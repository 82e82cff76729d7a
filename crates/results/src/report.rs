//! The result shape shared by every vmspace benchmark (`--json`).
//!
//! One command prints one [`ReportSet`]: a list of [`Report`]s, one per configuration ("row") it measured. A
//! report says what was measured ([`Report::benchmark`], [`Report::label`], free-form
//! [`Report::parameters`]), where it ran ([`Report::placement`], [`Report::host`]), every run's raw metrics
//! ([`Run::metrics`]) and their summary across runs ([`Report::summary`], computed from the runs by
//! [`Report::summarise`], never entered by hand). Metric names carry their unit as a suffix (`_ms`, `_per_s`,
//! `_count` ...), so consumers need no side table. Free-text observations (warnings about placement, failures a
//! checker found) go to [`Report::notes`].
//!
//! Every set also says where it came from ([`ReportSet::provenance`]: the commit, build profile and compiler
//! of the program that wrote it, and the CPU it ran on; [`crate::provenance`]).
//!
//! The format is versioned by [`SCHEMA`]; a consumer should reject other versions. Fields are only ever added.

use crate::host::HostInfo;
use crate::provenance::Provenance;
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The schema identifier written into every report set.
pub const SCHEMA: &str = "vmspace.report.v1";

/// Where one task of an experiment ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Its role, e.g. `mapper`, `scanner`, `busy`, `thread`, `forker`.
    pub role: String,
    /// Its index among the tasks of the same role.
    pub index: usize,
    /// The CPU it was pinned to (`None`: not pinned).
    pub cpu: Option<usize>,
    /// Its nice value.
    pub nice: i32,
}

/// One run (sample) of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Index of the run, from 0.
    pub index: usize,
    /// Metric name (with unit suffix) to value.
    pub metrics: BTreeMap<String, f64>,
}

/// The measurements of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Benchmark identifier, dotted: e.g. `kernel.contention`, `kernel.faults`, `bench.lookup`.
    pub benchmark: String,
    /// Human-readable name of this configuration (the row label in tables).
    pub label: String,
    /// UTC start time, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started_utc: String,
    /// The configuration's parameters, as given or defaulted.
    pub parameters: BTreeMap<String, serde_json::Value>,
    /// Where each task ran.
    pub placement: Vec<Placement>,
    /// The machine.
    pub host: HostInfo,
    /// Every run's metrics.
    pub runs: Vec<Run>,
    /// Per metric: min, median, max, mean across runs.
    pub summary: BTreeMap<String, Summary>,
    /// Observations: placement adjustments, checker findings, caveats.
    pub notes: Vec<String>,
    /// Text results, one line per element: the canonical output of a replay, the difference a diff found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<String>,
}

/// What a judging command concluded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether everything judged was met (the command then exits with status 0, else 1).
    pub passed: bool,
    /// How many targets were met, checks passed or scripts agreed.
    pub met: u64,
    /// How many were missed, failed or differed.
    pub missed: u64,
    /// The closing line printed under the table, e.g. `12 met, 11 missed`.
    pub line: String,
    /// How many targets the spread of their values left undecided (neither met nor missed; they do not fail the
    /// command). Left out of the JSON when 0, read as 0 when absent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub undecided: u64,
    /// How many targets this machine could not show either way (a scaling whose one-thread baseline did not have
    /// a CPU of its own, ...): "not measurable here", each with its measured reason in its report. They do not
    /// fail the command either. Left out of the JSON when 0, read as 0 when absent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_measurable: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Verdict {
    /// A verdict of `met` and `missed` things, passed when nothing was missed; `line` is the closing line.
    pub fn new(met: u64, missed: u64, line: impl Into<String>) -> Self {
        Self { passed: missed == 0, met, missed, line: line.into(), undecided: 0, not_measurable: 0 }
    }

    /// Whether every decided thing was met but some target was left undecided or not measurable here: nothing
    /// failed, yet not everything measured was shown to be met (`vmspace` exits with status 4).
    pub fn inconclusive(&self) -> bool {
        self.passed && self.undecided + self.not_measurable > 0
    }

    /// The same verdict with `not_measurable` targets (which do not change `passed`).
    pub fn with_not_measurable(mut self, not_measurable: u64) -> Self {
        self.not_measurable = not_measurable;
        self
    }

    /// The same verdict with `undecided` targets (which do not change `passed`).
    pub fn with_undecided(mut self, undecided: u64) -> Self {
        self.undecided = undecided;
        self
    }
}

/// What one command prints with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportSet {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The command that produced it, e.g. `vmspace kernel contention --sweep`.
    pub command: String,
    /// The build of the program that wrote the set and the CPU it ran on ([`Provenance`]). The `vmspace`
    /// command stamps every set it writes ([`ReportSet::with_provenance`]); absent only from sets written before
    /// it was recorded (read back as `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// One report per configuration.
    pub reports: Vec<Report>,
    /// The conclusion of a command that judges; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

impl ReportSet {
    /// A set of `reports` made by `command`.
    pub fn new(command: impl Into<String>, reports: Vec<Report>) -> Self {
        Self { schema: SCHEMA.to_string(), command: command.into(), provenance: None, reports, verdict: None }
    }

    /// The same set with its provenance.
    pub fn with_provenance(mut self, provenance: Provenance) -> Self {
        self.provenance = Some(provenance);
        self
    }

    /// The same set with a verdict.
    pub fn with_verdict(mut self, verdict: Verdict) -> Self {
        self.verdict = Some(verdict);
        self
    }
}

impl Report {
    /// A report without runs, started now.
    pub fn new(benchmark: &str, label: impl Into<String>, host: HostInfo) -> Self {
        Self {
            benchmark: benchmark.to_string(),
            label: label.into(),
            started_utc: utc_now(),
            parameters: BTreeMap::new(),
            placement: Vec::new(),
            host,
            runs: Vec::new(),
            summary: BTreeMap::new(),
            notes: Vec::new(),
            output: Vec::new(),
        }
    }

    /// Sets one parameter.
    pub fn param(&mut self, name: &str, value: impl Serialize) {
        self.parameters
            .insert(name.to_string(), serde_json::to_value(value).unwrap_or(serde_json::Value::Null));
    }

    /// Appends a run with the given metrics.
    pub fn push_run(&mut self, metrics: BTreeMap<String, f64>) {
        let index = self.runs.len();
        self.runs.push(Run { index, metrics });
    }

    /// A summarised report of `benchmark` (label `x`, default host) with `parameters` and one run per value of
    /// `values`, each holding that value of `metric`: the shape of a measured row as a judge reads it, for the
    /// tests of judges and experiments.
    pub fn of_values(benchmark: &str, parameters: &[(&str, u64)], metric: &str, values: &[f64]) -> Report {
        let mut r = Report::new(benchmark, "x", HostInfo::default());
        for (k, v) in parameters {
            r.param(k, v);
        }
        for &v in values {
            r.push_run(BTreeMap::from([(metric.to_string(), v)]));
        }
        r.summarise();
        r
    }

    /// Recomputes [`Report::summary`] from the runs (a metric missing from some runs is summarised over the runs
    /// that have it).
    pub fn summarise(&mut self) {
        let mut by_name: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for r in &self.runs {
            for (k, v) in &r.metrics {
                by_name.entry(k.as_str()).or_default().push(*v);
            }
        }
        self.summary =
            by_name.into_iter().filter_map(|(k, v)| Summary::of(&v).map(|s| (k.to_string(), s))).collect();
    }

    /// The summary of metric `name`, if any run has it.
    pub fn metric(&self, name: &str) -> Option<&Summary> {
        self.summary.get(name)
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days: shift the epoch to 0000-03-01 so leap days fall at the end of a 400-year era.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(format_utc(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn summarise_and_roundtrip() {
        let mut r = Report::new("test.bench", "row", HostInfo::default());
        r.param("duration_s", 1.5);
        r.push_run(BTreeMap::from([("a_ms".to_string(), 1.0), ("b_count".to_string(), 10.0)]));
        r.push_run(BTreeMap::from([("a_ms".to_string(), 3.0)]));
        r.summarise();
        assert_eq!(r.metric("a_ms").unwrap().median, 2.0);
        assert_eq!(r.metric("b_count").unwrap().n, 1);
        let set = ReportSet::new("vmspace test", vec![r]);
        let text = serde_json::to_string(&set).unwrap();
        let back: ReportSet = serde_json::from_str(&text).unwrap();
        assert_eq!(back, set);
        assert_eq!(back.schema, SCHEMA);
        // The optional fields are left out when empty, and read back as empty when absent.
        assert!(!text.contains("\"output\"") && !text.contains("\"verdict\""), "{text}");
        assert!(!text.contains("\"provenance\""), "{text}");
    }

    #[test]
    fn verdict_and_output_roundtrip() {
        let mut r = Report::new("diff", "seed 3", HostInfo::default());
        r.output = vec!["L2 munmap = 0".into(), "  kernel: -ENOMEM".into()];
        let set =
            ReportSet::new("vmspace diff", vec![r]).with_verdict(Verdict::new(2, 1, "2 agree, 1 differs"));
        assert!(!set.verdict.as_ref().unwrap().passed);
        assert!(Verdict::new(3, 0, "3 met").passed);
        let back: ReportSet = serde_json::from_str(&serde_json::to_string(&set).unwrap()).unwrap();
        assert_eq!(back, set);
    }

    #[test]
    fn provenance_roundtrip() {
        use crate::provenance::{Build, CpuFacts, Provenance};
        let p = Provenance { build: Build::unknown(), cpu: CpuFacts::default() };
        let set = ReportSet::new("vmspace test", Vec::new()).with_provenance(p.clone());
        let text = serde_json::to_string(&set).unwrap();
        assert!(text.contains("\"provenance\":{\"build\":{\"version\""), "{text}");
        let back: ReportSet = serde_json::from_str(&text).unwrap();
        assert_eq!(back.provenance, Some(p));
    }
}
