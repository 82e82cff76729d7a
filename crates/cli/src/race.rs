//! `vmspace race`: the proc-maps-race checks (`tools/testing/selftests/proc/proc-maps-race.c`) on the engine
//! (`--engine`, the default: `vmspace_bench::race`, a writer thread against a reader thread of one `Mm` in
//! each reader mode) or on the live kernel (`--kernel`: what `vmspace kernel race` runs). Prints one row per
//! test (and mode), the verdict, and with `--json FILE` one report set; exit status 1 if a check failed.

use crate::common::{self, JsonOut, Progress, Status, Text, usage};
use crate::kernel;
use crate::{note, say};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use vmspace_bench::race::{self, RaceFile, RaceReads, RaceTest, Scenario};
use vmspace_linux::args::parse_duration;
use vmspace_mm::ReaderMode;
use vmspace_results::report::{ReportSet, Verdict};
use vmspace_results::table::{count, render};

/// Arguments of `vmspace race`.
#[derive(Debug, Args)]
pub struct RaceArgs {
    /// Run on the engine (the default).
    #[arg(long, conflicts_with = "kernel")]
    engine: bool,
    /// Run on the live kernel (a child process and /proc/CHILD/maps, as `vmspace kernel race`).
    #[arg(long)]
    kernel: bool,
    /// The engine's reader modes, comma-separated (default: every mode: mmap-lock, per-vma, lockless).
    #[arg(long, value_delimiter = ',', conflicts_with = "kernel")]
    mode: Option<Vec<ReaderMode>>,
    /// The file to read: maps (with PROCMAP_QUERY checks) or smaps.
    #[arg(long, default_value = "maps")]
    file: RaceFile,
    /// How each pass reads the file: page (one page per read, the selftest's; the boundary observed is between
    /// two reads) or random (reads of 1 byte to about three maps lines or one smaps record, so that records
    /// straddle reads at every offset).
    #[arg(long, default_value = "page")]
    reads: RaceReads,
    /// Tests to run, comma-separated: split, resize, remap.
    #[arg(long, default_value = "split,resize,remap", value_delimiter = ',', value_parser = kernel::race_test)]
    tests: Vec<RaceTest>,
    /// Length of each test (and mode).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Run even from a debug build (which checks fewer reads in the same time; the JSON records the build).
    #[arg(long)]
    force: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

/// Runs `vmspace race`.
pub fn run(a: RaceArgs) -> Result<Status> {
    if a.tests.is_empty() {
        return Err(usage("--tests is empty"));
    }
    if a.duration.is_zero() || a.duration > Duration::from_secs(24 * 3600) {
        return Err(usage("--duration must be positive and at most 24 h"));
    }
    common::check_build(a.force)?;
    if a.kernel {
        return kernel::run_race(kernel::RaceArgs {
            file: a.file,
            reads: a.reads,
            tests: a.tests,
            duration: a.duration,
            force: a.force,
            json: a.json,
        });
    }
    vmspace_linux::child::install_interrupt_handler()?;
    let mut modes: Vec<ReaderMode> = Vec::new();
    for m in a.mode.unwrap_or_else(|| ReaderMode::ALL.to_vec()) {
        if !modes.contains(&m) {
            modes.push(m);
        }
    }
    if modes.is_empty() {
        return Err(usage("--mode is empty"));
    }
    let scenarios: Vec<Scenario> =
        a.tests.iter().map(|&test| Scenario { file: a.file, test, reads: a.reads }).collect();
    let json = JsonOut::new(a.json.as_deref())?;
    let t = Text::new(&json);
    let host = vmspace_linux::hostinfo::gather();
    say!(t, "host: {}", host.one_line());
    say!(
        t,
        "{} test(s) x {} mode(s) x {:?} on the engine's /proc/PID/{}, {} reads",
        scenarios.len(),
        modes.len(),
        a.duration,
        if a.file == RaceFile::Maps { "maps (+ PROCMAP_QUERY)" } else { "smaps" },
        a.reads
    );
    let mut bar = Progress::new((scenarios.len() * modes.len()) as u64);
    let stop = vmspace_linux::child::interrupted;
    let reports = race::run(
        race::ENGINE,
        &scenarios,
        &modes,
        a.duration,
        &host,
        &mut |sc, m| bar.step(&format!("{}, {}", sc.key(), m.name())),
        &stop,
    );
    bar.finish();
    let reports = reports.map_err(anyhow::Error::msg)?;
    let interrupted = vmspace_linux::child::interrupted();
    let value = |r: &vmspace_results::report::Report, k: &str| r.metric(k).map_or(0.0, |s| s.median);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let g = |k: &str| count(value(r, k));
            vec![
                r.parameters.get("test").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
                r.parameters.get("mode").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
                g("iterations_count"),
                g("modified_seen_count"),
                g("duplicates_count"),
                g("query_checks_count"),
                g("child_cycles_count"),
                g("failures_count"),
            ]
        })
        .collect();
    t.print(&render(
        &[
            "test",
            "mode",
            "observations",
            "saw modified",
            "duplicates (ok)",
            "PROCMAP_QUERY checks",
            "writer cycles",
            "failures",
        ],
        &rows,
    ));
    for r in &reports {
        for n in &r.notes {
            say!(t, "{}: {n}", r.label);
        }
    }
    let failed = reports.iter().filter(|r| value(r, "failures_count") > 0.0).count() as u64;
    let passed = reports.len() as u64 - failed;
    let line = if failed == 0 {
        let q = if a.file == RaceFile::Maps { ", PROCMAP_QUERY answers consistent" } else { "" };
        format!("{passed} passed, 0 failed: no tearing, no false gaps, every pass whole and in order{q}")
    } else {
        format!("{passed} passed, {failed} failed: the engine's reader showed a torn or missing record")
    };
    let line = if interrupted {
        format!("{line} (interrupted: {} of {} runs measured)", reports.len(), scenarios.len() * modes.len())
    } else {
        line
    };
    say!(t, "verdict: {line}");
    let verdict = Verdict::new(passed, failed, line);
    json.write(&ReportSet::new(common::command_line(), reports).with_verdict(verdict.clone()))?;
    if interrupted {
        // What was measured before Ctrl-C is printed and written; the status says the run did not finish.
        note!("vmspace race: interrupted; the table above is what was measured before Ctrl-C");
        return Err(anyhow::Error::new(vmspace_linux::child::Interrupted));
    }
    Ok(Status::of(&verdict))
}
