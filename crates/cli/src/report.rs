//! `vmspace report`: every experiment, engine beside kernel, in one command (the library is `vmspace-report`;
//! this module parses, shows progress, prints and writes files).
//!
//! The run prints one table per experiment with a one-sentence verdict, then the targets and the machine's load,
//! within 100 columns (`--wide`: every table whole and every verdict in full),
//! and writes into the output directory (checked writable, and created if missing, before anything runs):
//! `report.json` (schema `vmspace.report.v1`), one SVG per figure and `index.html`, a self-contained page.
//! `--json FILE` also writes the report set to FILE, as every command does (`--json -`: to standard output,
//! the text then going to standard error). docs/REPORT.md describes the command, its files and the hidden
//! `--smoke` length of the tests.
//! Progress is one display for the whole run on standard error: a bar with the phase, the time left and the
//! time elapsed on a terminal, else one line every few seconds. Ctrl-C stops the experiment in progress,
//! writes what was measured so far (the page says which experiments are incomplete) and exits with status 130.
//!
//! Standard output closing early (`vmspace report | head -1`) does not lose the run: SIGPIPE is ignored for
//! this command, writes to the closed output are dropped, the run goes on to its end and writes everything to
//! the output directory as usual, and standard error says that the output was cut; the exit status is the
//! verdict's. Exit status 0: every measured target met; 1: a target missed; 4: none missed but some undecided or
//! not measurable here.
//!
//! `--compare OLD NEW` runs nothing: it reads two `report.json` files, prints which figures moved beyond their
//! run-to-run spread and how the targets changed, writes `compare.html`, and exits with status 1 when a target
//! went from met to missed; `--json FILE` writes the comparison as a report set.

use crate::common::{self, JsonOut, Status, Text, fmt_secs, usage, write_atomically};
use crate::{note, say};
use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vmspace_report::experiment::Length;
use vmspace_report::run::{self as report_run, Options, Progress};
use vmspace_results::report::{ReportSet, SCHEMA};

/// `say!` wrapped at the terminal text's width ([`vmspace_report::terminal::WIDTH`]), continuation lines
/// indented by two spaces: host lines, paths and file lists stay within 100 columns as the tables do.
macro_rules! wsay {
    ($t:expr, $($arg:tt)*) => {
        $t.print(&vmspace_report::terminal::wrap(&format!($($arg)*), vmspace_report::terminal::WIDTH, 2))
    };
}

/// Arguments of `vmspace report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A short run of every experiment and figure: under 30 s (1 short run per point) instead of the default's
    /// about 4 minutes on 2 CPUs. docs/REPORT.md lists each length's settings.
    #[arg(long, conflicts_with_all = ["full", "smoke"])]
    quick: bool,
    /// The settings of BENCHMARKS.md for every experiment and the LPC 2021 talk's table in the contention
    /// experiment (about 50 minutes on 2 CPUs).
    #[arg(long, conflicts_with = "smoke")]
    full: bool,
    /// Shorter than --quick, for the CLI's structure test only (docs/REPORT.md): every experiment and figure
    /// in a few seconds, figures meaningless.
    #[arg(long, hide = true)]
    smoke: bool,
    /// Directory for report.json, the SVG figures and index.html; created if missing, checked writable
    /// before the run.
    #[arg(long, value_name = "DIR", default_value = "report")]
    out: PathBuf,
    /// Only these experiments, comma-separated: trees, mm, faults, fork, contention, tearing (the others are
    /// listed as not run).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    experiments: Option<Vec<String>>,
    /// A real tool as a scanner of the contention grid (`vmspace kernel contention --agent`): two more kernel
    /// rows, the tool run in a loop at nice 15 (`{pid}`: the mapper's pid), alone and beside a busy task that
    /// never pauses, e.g. `pmap -X {pid}`. The engine sides have no such rows.
    #[arg(long, value_name = "COMMAND", conflicts_with = "compare")]
    contention_agent: Option<String>,
    /// Run nothing: compare two report.json files, print which figures moved beyond their run-to-run spread
    /// and how the targets changed, and write DIR/compare.html. Exit status 1 when a target went from met to
    /// missed.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"], conflicts_with_all = ["quick", "full", "smoke", "experiments"])]
    compare: Option<Vec<PathBuf>>,
    /// Run nothing: present a stored report.json again (its tables on the terminal, its figures and index.html
    /// in --out DIR), e.g. to read an older run or to look at a run's page after a change of the page's code.
    /// The exit status is the stored run's verdict's.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["quick", "full", "smoke", "experiments", "compare", "contention_agent"])]
    from: Option<PathBuf>,
    /// Also write the report set (with --compare: the comparison) as JSON to FILE (`-`: standard output, the
    /// text then goes to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
    /// Print every table whole and every verdict in full (wider than 100 columns); by default the terminal
    /// text fits 100 columns (central figures, the less telling columns left out, one-sentence verdicts).
    /// report.json, --json and index.html always hold everything.
    #[arg(long)]
    wide: bool,
    /// Run even from a debug build (whose timings are not the engine's; report.json and the page then say so).
    #[arg(long, conflicts_with = "compare")]
    force: bool,
}

/// Runs `vmspace report`.
pub fn run(args: ReportArgs) -> Result<Status> {
    if let Some(files) = &args.compare {
        return compare(&files[0], &files[1], &args.out, args.json.as_deref());
    }
    if let Some(file) = &args.from {
        return from_stored(file, &args);
    }
    common::check_build(args.force)?;
    common::keep_running_without_stdout();
    vmspace_linux::child::install_interrupt_handler()?;
    let length = if args.smoke {
        Length::Smoke
    } else if args.quick {
        Length::Quick
    } else if args.full {
        Length::Full
    } else {
        Length::Default
    };
    if let Some(list) = &args.experiments {
        let known = report_run::experiment_ids();
        if let Some(bad) = list.iter().find(|x| !known.contains(&x.as_str())) {
            return Err(usage(format!("unknown experiment {bad:?}; known: {}", known.join(", "))));
        }
        if list.is_empty() {
            return Err(usage("--experiments is empty"));
        }
    }
    prepare_out(&args.out)?;
    let json = JsonOut::new(args.json.as_deref())?;
    let t = Text::new(&json);
    let host = vmspace_linux::hostinfo::gather();
    let estimate =
        report_run::estimate_s(length, &host, args.experiments.as_deref(), args.contention_agent.as_deref());
    let provenance = crate::provenance::provenance();
    wsay!(t, "vmspace report ({}): {}", length.id(), host.one_line());
    wsay!(t, "build: {}", provenance.one_line());
    wsay!(
        t,
        "about {} of measurements; load average now {}; output: {}",
        fmt_secs(estimate),
        host.load_average.as_deref().unwrap_or("unknown"),
        args.out.display()
    );
    let _ = std::io::stdout().flush();
    let opts = Options {
        length,
        only: args.experiments.clone(),
        command: common::command_line(),
        contention_agent: args.contention_agent.clone(),
    };
    let start = Instant::now();
    let mut display = Display::new(estimate);
    let mut outcome = report_run::run(&opts, &mut |p| display.update(&p));
    display.finish();
    // The set records the build that measured it: report.json, the page and --json all show it.
    outcome.set.provenance = Some(provenance.clone());
    let p = report_run::present(&outcome.set);
    t.print(&if args.wide { report_run::text_wide(&p) } else { report_run::text(&p) });
    let files = write_report(&args.out, &outcome.set, &p)?;
    let mut cut = false;
    if let Err(e) = json.write(&outcome.set) {
        if !common::is_broken_pipe(&e) {
            return Err(e);
        }
        cut = true;
    }
    wsay!(t, "\nwritten to {}: {}", args.out.display(), files.join(", "));
    wsay!(t, "took {} ({})", fmt_secs(start.elapsed().as_secs_f64()), length.id());
    if cut || common::stdout_closed() {
        note!(
            "vmspace report: standard output was closed before the end; everything measured is written to {}",
            args.out.display()
        );
    }
    if outcome.interrupted {
        let complete =
            p.sections.iter().filter(|s| s.completion == vmspace_report::model::Completion::Complete).count();
        note!(
            "vmspace report: interrupted after {}; what was measured so far is written to {} ({complete} of {} \
             experiments complete)",
            fmt_secs(start.elapsed().as_secs_f64()),
            args.out.display(),
            p.sections.len()
        );
        return Err(anyhow::Error::new(vmspace_linux::child::Interrupted));
    }
    if !outcome.failures.is_empty() {
        let list: Vec<String> = outcome.failures.iter().map(|(id, e)| format!("{id}: {e}")).collect();
        anyhow::bail!(
            "{} experiment(s) failed (the others' results are written to {}): {}",
            list.len(),
            args.out.display(),
            list.join("; ")
        );
    }
    Ok(Status::of(outcome.set.verdict.as_ref().expect("a report set has a verdict")))
}

/// Makes sure `dir` is a directory this process can write, creating it (not its parents) if missing.
fn prepare_out(dir: &Path) -> Result<()> {
    let show = dir.display();
    if dir.exists() {
        if !dir.is_dir() {
            return Err(usage(format!("--out {show}: exists and is not a directory")));
        }
    } else {
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            return Err(usage(format!(
                "--out {show}: its parent directory {} does not exist",
                parent.display()
            )));
        }
        std::fs::create_dir(dir).map_err(|e| usage(format!("--out {show}: cannot create it: {e}")))?;
    }
    common::check_writable_dir(dir).map_err(|e| usage(format!("--out {show}: {e}")))
}

/// Writes report.json, the figures and index.html; returns their names.
fn write_report(dir: &Path, set: &ReportSet, p: &report_run::Presentation) -> Result<Vec<String>> {
    let mut files = vec!["report.json".to_string()];
    write_atomically(&dir.join("report.json"), |w| {
        serde_json::to_writer_pretty(&mut *w, set)?;
        writeln!(w)?;
        Ok(())
    })?;
    for f in p.sections.iter().flat_map(|s| &s.figures) {
        write_atomically(&dir.join(&f.file), |w| Ok(w.write_all(f.svg.as_bytes())?))?;
        files.push(f.file.clone());
    }
    files.push("index.html".into());
    let page = vmspace_report::html::index(p, &files);
    write_atomically(&dir.join("index.html"), |w| Ok(w.write_all(page.as_bytes())?))?;
    Ok(files)
}

/// A stored report set: unreadable, not JSON of the schema, is a usage error.
fn read_set(p: &Path) -> Result<ReportSet> {
    let text = std::fs::read_to_string(p).map_err(|e| usage(format!("cannot read {}: {e}", p.display())))?;
    let set: ReportSet = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{} is not a vmspace report set: {e}", p.display())))?;
    if set.schema != SCHEMA {
        return Err(usage(format!("{}: schema {:?}, expected {SCHEMA:?}", p.display(), set.schema)));
    }
    Ok(set)
}

/// `vmspace report --from FILE`: the stored set presented as a run presents it.
fn from_stored(file: &Path, args: &ReportArgs) -> Result<Status> {
    let set = read_set(file)?;
    if set.verdict.is_none() {
        return Err(usage(format!(
            "{}: a report set without a verdict is not a report run's",
            file.display()
        )));
    }
    prepare_out(&args.out)?;
    let json = JsonOut::new(args.json.as_deref())?;
    let t = Text::new(&json);
    let p = report_run::present(&set);
    wsay!(t, "vmspace report --from {}: {}", file.display(), set.command);
    t.print(&if args.wide { report_run::text_wide(&p) } else { report_run::text(&p) });
    let files = write_report(&args.out, &set, &p)?;
    json.write(&set)?;
    wsay!(t, "\nwritten to {}: {}", args.out.display(), files.join(", "));
    Ok(Status::of(set.verdict.as_ref().expect("checked above")))
}

/// `vmspace report --compare OLD NEW`.
fn compare(old: &Path, new: &Path, out: &Path, json: Option<&Path>) -> Result<Status> {
    let read = read_set;
    let (a, b) = (read(old)?, read(new)?);
    vmspace_report::compare::comparable(&a, &b)
        .map_err(|e| usage(format!("{} and {}: {e}", old.display(), new.display())))?;
    prepare_out(out)?;
    let json = JsonOut::new(json)?;
    let t = Text::new(&json);
    let c = vmspace_report::compare::compare(&a, &b);
    say!(t, "old: {} ({})", c.old_command, c.old_started);
    say!(t, "     build: {}", c.old_build);
    say!(t, "new: {} ({})", c.new_command, c.new_started);
    say!(t, "     build: {}", c.new_build);
    say!(t);
    t.print(&c.targets_table().text());
    say!(t);
    let moved = c.moved_table();
    if moved.rows.is_empty() {
        say!(t, "no figure moved beyond its run-to-run spread");
    } else {
        t.print(&moved.text());
    }
    say!(t, "\nverdict: {}", c.line());
    let page = out.join("compare.html");
    write_atomically(&page, |w| Ok(w.write_all(vmspace_report::html::compare(&c).as_bytes())?))
        .with_context(|| format!("writing {}", page.display()))?;
    let host = b.reports.first().map(|r| r.host.clone()).unwrap_or_default();
    let set = c.to_set(&common::command_line(), &host);
    json.write(&set)?;
    say!(t, "written to {}", page.display());
    Ok(Status::of(set.verdict.as_ref().expect("a comparison has a verdict")))
}

/// One progress display for the whole run, on standard error: a bar on a terminal; otherwise a line when a
/// phase starts and one every [`Display::EVERY`].
struct Display {
    bar: ProgressBar,
    terminal: bool,
    start: Instant,
    last_line: Option<Instant>,
    phase: usize,
    total_ms: u64,
}

impl Display {
    const EVERY: Duration = Duration::from_secs(5);

    fn new(total_s: f64) -> Display {
        let total_ms = (total_s * 1000.0).max(1.0) as u64;
        let terminal = std::io::stderr().is_terminal();
        let target = if terminal && !common::quiet() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total_ms), target);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:28}] {percent:>3}%  {wide_msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        Display { bar, terminal, start: Instant::now(), last_line: None, phase: 0, total_ms }
    }

    /// The time left: the estimate of the work left, stretched by how much slower than estimated the run has
    /// gone so far (a busy machine), never shrunk: most of the run is timed runs of fixed length, which a
    /// phase that finished early does not shorten.
    fn left(&self, done_s: f64, total_s: f64) -> String {
        let elapsed = self.start.elapsed().as_secs_f64();
        let slower = if done_s > 0.02 * total_s { (elapsed / done_s).clamp(1.0, 4.0) } else { 1.0 };
        fmt_secs(((total_s - done_s) * slower).max(0.0))
    }

    fn update(&mut self, p: &Progress<'_>) {
        if common::quiet() {
            return;
        }
        let msg = format!(
            "~{} left  {}/{} {}: {}",
            self.left(p.done_s, p.total_s),
            p.phase,
            p.phases,
            if self.terminal { p.short } else { p.title },
            p.detail
        );
        let pos = ((p.done_s * 1000.0) as u64).min(self.total_ms);
        if self.terminal {
            self.bar.set_position(pos);
            self.bar.set_message(msg);
            return;
        }
        let elapsed = fmt_secs(self.start.elapsed().as_secs_f64());
        if p.phase != self.phase {
            self.phase = p.phase;
            note!("report: {}/{} {} (after {elapsed})", p.phase, p.phases, p.title);
        }
        if self.last_line.is_none_or(|t| t.elapsed() >= Self::EVERY) {
            self.last_line = Some(Instant::now());
            note!("report: {:.0}% after {elapsed}, {msg}", 100.0 * pos as f64 / self.total_ms as f64);
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
