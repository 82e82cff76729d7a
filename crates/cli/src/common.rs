//! What every subcommand shares: the output convention, exit statuses, error classes, progress and the checks
//! that refuse a run before it starts.
//!
//! # Output convention
//! Every command prints its table (or text) for people. `--json FILE` also writes the result as one
//! [`ReportSet`] (schema `vmspace.report.v1`, BENCHMARKS.md "Result format and exit statuses") to FILE, atomically (a temporary
//! file in the same directory, renamed over FILE at the end). `--json -` writes the JSON to standard output and
//! the table to standard error instead, so that `vmspace ... --json - | jq` sees JSON only. FILE is checked
//! before the run starts ([`JsonOut::new`]): a long measurement never ends in "cannot write". Every set written
//! carries this program's provenance (commit, dirty tree, profile, compiler, CPU: [`crate::provenance`]).
//!
//! # Debug builds
//! A command that times something (`bench`, `kernel` but `kernel info`, `race`, `report`) refuses to run from a
//! debug build (debug assertions on or opt-level 0: `cargo run` without `--release`, `cargo test`'s binary) with
//! exit status 2, unless `--force` is given or `VMSPACE_ALLOW_DEBUG_BUILD=1` is set (the CLI's tests set it);
//! then it warns loudly on standard error, and the JSON's `provenance.build` says which build measured
//! ([`check_build`]).
//!
//! # Exit statuses
//! [`Status`] and the error classes map to the statuses documented in `vmspace --help` ([`EXIT_STATUS_HELP`]):
//! 0 success (every measured target met); 1 the command judged and something failed (a difference, a missed
//! target, a failed check); 2 bad usage or input ([`UsageError`], clap's errors, unreadable scripts); 3 the run
//! itself failed (a system call, a child process); 4 nothing failed, but a target was undecided or not
//! measurable here ([`Status::Inconclusive`]); 130 interrupted (Ctrl-C or SIGTERM). Errors print as one `error: ...` line with
//! their causes, never with a backtrace, whatever `RUST_BACKTRACE` says.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vmspace_results::report::{ReportSet, Verdict};

/// The exit-status section of `vmspace --help`. Its lines fit 78 columns, so that help wrapped at an
/// 80-column terminal keeps its hanging indents (`--help` wraps other text to the terminal's width); the man
/// page's EXIT STATUS section is built from it (a line of two spaces and a status starts a status, the lines
/// indented further continue it).
pub const EXIT_STATUS_HELP: &str = "\
Exit status:
  0    success; for commands that judge targets (bench, report): every
       measured target was met
  1    the command judged and something failed: engine and kernel differ
       (diff), a benchmark target was missed (bench, report), a target went
       from met to missed (report --compare), a /proc check failed (race,
       kernel race)
  2    bad usage or input: unknown option, option that does nothing in this
       mode, unreadable script, output path that cannot be written, input too
       large for this machine (without --force), a timed command (bench,
       kernel but info, race, report) run from a debug build (without
       --force), two report sets of different kinds or lengths (report
       --compare)
  3    the run itself failed: a system call or a child process failed
  4    no target was missed, but at least one was undecided (its spread
       straddles the goal) or not measurable here (this machine could not
       show it; the target's note says why) (bench, report)
  130  interrupted (Ctrl-C or SIGTERM); a second Ctrl-C stops at once; bench,
       race and report print and write what they measured before

Output: every command prints a table; --json FILE also writes the results as
JSON (schema vmspace.report.v1, described in BENCHMARKS.md), and --json -
writes the JSON to standard output and the table to standard error.";

/// How a command that ran to its end came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing judged failed: exit status 0.
    Success,
    /// The command judged and something failed: exit status 1.
    Failed,
    /// Nothing failed, but some target was undecided or not measurable here: exit status 4.
    Inconclusive,
}

impl Status {
    /// [`Status::Failed`] when `verdict` did not pass, [`Status::Inconclusive`] when it passed with targets
    /// undecided or not measurable, [`Status::Success`] otherwise.
    pub fn of(verdict: &Verdict) -> Status {
        if !verdict.passed {
            Status::Failed
        } else if verdict.inconclusive() {
            Status::Inconclusive
        } else {
            Status::Success
        }
    }

    /// The process exit status: 0, 1 or 4.
    pub fn code(self) -> u8 {
        match self {
            Status::Success => 0,
            Status::Failed => 1,
            Status::Inconclusive => 4,
        }
    }
}

/// `verdict` with `(indicative: --quick, one short run per point)` after its line when `quick`: a `--quick` run's
/// met and missed rest on too few values to show a spread (docs/REPORT.md, "--quick verdicts are indicative").
pub fn indicative_if(mut verdict: Verdict, quick: bool) -> Verdict {
    if quick && verdict.met + verdict.missed > 0 {
        verdict.line.push_str(" (indicative: --quick, one short run per point)");
    }
    verdict
}

/// Bad usage or input (exit status 2): the message says what to change.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A usage error with this message, as an `anyhow::Error`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// The exit status of an error: 130 if anything in its chain is an interruption, 2 if it is a usage error,
/// 3 otherwise.
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    let interrupted = e.chain().any(|c| {
        c.is::<vmspace_linux::child::Interrupted>()
            || matches!(
                c.downcast_ref::<vmspace_linux::replay::ReplayError>(),
                Some(vmspace_linux::replay::ReplayError::Interrupted)
            )
    });
    if interrupted || vmspace_linux::child::interrupted() {
        130
    } else if e.chain().any(|c| c.is::<UsageError>()) {
        2
    } else {
        3
    }
}

/// The command line as typed (`vmspace ...`), recorded in every report set.
pub fn command_line() -> String {
    std::iter::once("vmspace".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ")
}

/// Where `--json` goes, checked before the run.
#[derive(Debug, Clone)]
pub enum JsonOut {
    /// No `--json`.
    None,
    /// `--json -`: standard output (the table goes to standard error).
    Stdout,
    /// `--json FILE`.
    File(PathBuf),
}

impl JsonOut {
    /// Checks `--json`'s value: `-`, or a file that can be written (its directory exists and takes a new
    /// file; the file, if it exists, is not a directory).
    pub fn new(arg: Option<&Path>) -> Result<JsonOut> {
        match arg {
            None => Ok(JsonOut::None),
            Some(p) if p.as_os_str() == "-" => Ok(JsonOut::Stdout),
            Some(p) => {
                check_writable_file(p, "--json")?;
                Ok(JsonOut::File(p.to_path_buf()))
            }
        }
    }

    /// Whether the table must go to standard error (the JSON takes standard output).
    pub fn takes_stdout(&self) -> bool {
        matches!(self, JsonOut::Stdout)
    }

    /// Writes `set` where `--json` said (nothing without `--json`), stamped with this program's provenance if it
    /// has none yet.
    pub fn write(&self, set: &ReportSet) -> Result<()> {
        if matches!(self, JsonOut::None) {
            return Ok(());
        }
        let stamped;
        let set = if set.provenance.is_none() {
            stamped = set.clone().with_provenance(crate::provenance::provenance());
            &stamped
        } else {
            set
        };
        match self {
            JsonOut::None => Ok(()),
            JsonOut::Stdout => {
                let mut out = std::io::stdout().lock();
                serde_json::to_writer_pretty(&mut out, set).context("writing JSON to standard output")?;
                writeln!(out).context("writing JSON to standard output")?;
                out.flush().context("writing JSON to standard output")
            }
            JsonOut::File(p) => write_atomically(p, |w| {
                serde_json::to_writer_pretty(&mut *w, set)?;
                writeln!(w)?;
                Ok(())
            }),
        }
    }
}

/// Checks that `path` can be created or replaced as a file before anything runs: a usage error (exit status 2)
/// naming `what` otherwise.
pub fn check_writable_file(path: &Path, what: &str) -> Result<()> {
    let dir = parent_dir(path);
    if path.is_dir() {
        return Err(usage(format!("{what} {}: is a directory", path.display())));
    }
    check_writable_dir(&dir).map_err(|e| usage(format!("{what} {}: {e}", path.display())))
}

/// Checks that `dir` is a directory in which a file can be created (by creating and removing one).
pub fn check_writable_dir(dir: &Path) -> std::result::Result<(), String> {
    if !dir.is_dir() {
        return Err(format!("directory {} does not exist", dir.display()));
    }
    tempfile::Builder::new()
        .prefix(".vmspace-check")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| format!("cannot create a file in {}: {e}", dir.display()))
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `path` through a temporary file in its directory renamed over it at the end, so that a failure or an
/// interruption never leaves a truncated file. The file is readable by everyone (mode 0644, as a shell
/// redirection makes it under the usual umask; the temporary file alone would be 0600): reports and pages are
/// meant to be read, served and copied.
pub fn write_atomically(path: &Path, fill: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut tmp = tempfile::Builder::new()
        .prefix(".vmspace-")
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(parent_dir(path))
        .with_context(|| format!("creating a file beside {}", path.display()))?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        fill(&mut w).with_context(|| format!("writing {}", path.display()))?;
        w.flush().with_context(|| format!("writing {}", path.display()))?;
    }
    tmp.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Where the human-readable text goes: standard output, or standard error when the JSON takes standard output.
#[derive(Debug, Clone, Copy)]
pub struct Text {
    to_stderr: bool,
}

impl Text {
    /// Text for a command whose JSON goes to `json`.
    pub fn new(json: &JsonOut) -> Text {
        Text { to_stderr: json.takes_stdout() }
    }

    /// Prints `s` as is. A write that fails (standard output closed by its reader, with SIGPIPE ignored:
    /// [`keep_running_without_stdout`]) is dropped, never a panic; [`stdout_closed`] then says so.
    pub fn print(&self, s: &str) {
        if self.to_stderr {
            let _ = std::io::stderr().write_all(s.as_bytes());
        } else {
            let mut out = std::io::stdout().lock();
            if out.write_all(s.as_bytes()).and_then(|()| out.flush()).is_err() {
                STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Prints `s` and a newline.
    pub fn line(&self, s: &str) {
        self.print(&format!("{s}\n"));
    }
}

/// Set when a write to standard output failed (its reader went away). Relaxed: a flag read once at the end of
/// the command on the thread that set it; no other memory is published through it.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a write to standard output failed during this command (`vmspace report | head -1`).
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// For a command whose results go to files as well (`vmspace report`): ignore SIGPIPE, so that a reader of
/// standard output that goes away (`| head -1`) no longer kills the process in the middle of its run; writes to
/// standard output then fail with EPIPE, which [`Text::print`] drops. (`main` gives every other command
/// SIGPIPE's default action back, to end quietly as `cat` does.)
pub fn keep_running_without_stdout() {
    // SAFETY: setting a signal's disposition to "ignore" is always valid; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Whether `e` is a write to a pipe whose reader went away (EPIPE) somewhere in its chain.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind())
                .is_some_and(|k| k == std::io::ErrorKind::BrokenPipe)
    })
}

/// `eprintln!` that never panics (standard error may be a closed pipe too: `2>&1 | head`).
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Prints through a [`Text`] like `println!`.
#[macro_export]
macro_rules! say {
    ($t:expr) => { $t.line("") };
    ($t:expr, $($arg:tt)*) => { $t.line(&format!($($arg)*)) };
}

/// Set by `--quiet`: no progress display at all. Relaxed: set once by `main` before any command runs, on the
/// thread that later reads it; no other memory is published through it.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--quiet`: from now on no progress is shown (no bar, no progress lines); results, warnings and errors
/// still are.
pub fn set_quiet() {
    QUIET.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `--quiet` was given.
pub fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

/// Progress of a run that may take more than 2 s, on standard error (nothing with `--quiet`). Nothing shows during the first 2 s. On a
/// terminal it is a bar with the elapsed time and an estimate of the time left; otherwise (standard error
/// piped or redirected to a file) one line every 10 s, so that logs show how far a run got.
pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    terminal: bool,
    shown: bool,
    last_line: Instant,
    total: u64,
    done: u64,
}

impl Progress {
    /// Progress over `total` steps.
    pub fn new(total: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len}, ~{eta} left  {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        let now = Instant::now();
        Progress {
            bar,
            start: now,
            terminal: std::io::stderr().is_terminal(),
            shown: false,
            last_line: now,
            total,
            done: 0,
        }
    }

    /// One step done; `what` names the next (or the one just done).
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        self.bar.set_message(what.to_string());
        self.bar.inc(1);
        self.tick(what);
    }

    /// `done` steps done in all (for runs that count many small steps and report now and then).
    pub fn set_done(&mut self, done: u64, what: &str) {
        self.done = done;
        self.bar.set_position(done);
        self.tick(what);
    }

    /// Shows progress if the run has gone on for 2 s (to be called now and then between steps too).
    pub fn tick(&mut self, what: &str) {
        let elapsed = self.start.elapsed();
        if elapsed < Duration::from_secs(2) || quiet() {
            return;
        }
        if self.terminal {
            if !self.shown {
                self.shown = true;
                self.bar.set_draw_target(ProgressDrawTarget::stderr());
            }
            self.bar.tick();
        } else if !self.shown || self.last_line.elapsed() >= Duration::from_secs(10) {
            self.shown = true;
            self.last_line = Instant::now();
            let eta = if self.done == 0 {
                "unknown".to_string()
            } else {
                let left = elapsed.as_secs_f64() / self.done as f64
                    * (self.total - self.done.min(self.total)) as f64;
                fmt_secs(left)
            };
            eprintln!(
                "progress: {}/{} after {}, ~{eta} left  {what}",
                self.done,
                self.total,
                fmt_secs(elapsed.as_secs_f64())
            );
        }
    }

    /// Removes the bar (the final text follows).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// `75 s` as `1m15s`.
pub fn fmt_secs(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// The memory this machine can give a run now (`MemAvailable`), in bytes; `None` if unknown.
pub fn available_memory() -> Option<u64> {
    vmspace_host::mem_available()
}

/// Refuses a run whose estimated memory exceeds what the machine has available (unless `force`): a usage
/// error that gives the estimate and the way to insist.
pub fn check_memory(what: &str, bytes: u128, force: bool) -> Result<()> {
    let Some(avail) = available_memory() else { return Ok(()) };
    if force || bytes <= u128::from(avail) {
        return Ok(());
    }
    Err(usage(format!(
        "{what} would need about {} of memory, more than the {} this machine has available; refused \
         (--force runs it anyway)",
        fmt_bytes(bytes),
        fmt_bytes(u128::from(avail))
    )))
}

/// Refuses a run whose estimated time exceeds `limit` (unless `force`).
pub fn check_time(what: &str, secs: f64, limit_secs: f64, force: bool) -> Result<()> {
    if force || secs <= limit_secs {
        return Ok(());
    }
    Err(usage(format!(
        "{what} would take about {}, more than {}; refused (--force runs it anyway)",
        fmt_secs(secs),
        fmt_secs(limit_secs)
    )))
}

/// The environment variable that lets a timed command run from a debug build without `--force` (`1`).
pub const ALLOW_DEBUG_BUILD_ENV: &str = "VMSPACE_ALLOW_DEBUG_BUILD";

/// Refuses a command that times something when this program is a debug build (debug assertions on or
/// opt-level 0), unless `force` or [`ALLOW_DEBUG_BUILD_ENV`] is `1`: a usage error (exit status 2) that says how
/// to build for measuring. When it is let run, a loud warning goes to standard error; the JSON records the build
/// in any case.
pub fn check_build(force: bool) -> Result<()> {
    let build = crate::provenance::build();
    let allowed = std::env::var(ALLOW_DEBUG_BUILD_ENV).is_ok_and(|v| v == "1");
    debug_build_policy(&build, force || allowed)?;
    if let Some(w) = build.debug_warning() {
        let bar = "*".repeat(100);
        eprintln!("{bar}\nWARNING: {w}\n{bar}");
    }
    Ok(())
}

/// The rule of [`check_build`]: a debug build that is not let run is a usage error.
fn debug_build_policy(build: &vmspace_results::provenance::Build, allowed: bool) -> Result<()> {
    if !build.is_debug() || allowed {
        return Ok(());
    }
    Err(usage(format!(
        "this vmspace is a debug build ({}): its timings would not be the engine's, so this command is \
         refused. Build with `cargo build --release` (or run `cargo run --release -p vmspace -- ...`); --force \
         (or {ALLOW_DEBUG_BUILD_ENV}=1) runs it anyway, and its results then record the build",
        build.profile_line()
    )))
}

/// `3221225472` as `3.0 GiB`.
pub fn fmt_bytes(b: u128) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_secs(5.4), "5s");
        assert_eq!(fmt_secs(75.0), "1m15s");
        assert_eq!(fmt_secs(7300.0), "2h01m");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn verdicts_map_to_0_1_and_4() {
        let v = |met, missed, undecided, unmeasurable| {
            Verdict::new(met, missed, "line").with_undecided(undecided).with_not_measurable(unmeasurable)
        };
        assert_eq!(Status::of(&v(3, 0, 0, 0)).code(), 0);
        assert_eq!(Status::of(&v(3, 1, 2, 1)).code(), 1);
        assert_eq!(Status::of(&v(3, 0, 1, 0)).code(), 4);
        assert_eq!(Status::of(&v(3, 0, 0, 1)).code(), 4);
        assert_eq!(Status::of(&v(0, 0, 0, 0)).code(), 0);
    }

    #[test]
    fn exit_codes_by_error_class() {
        assert_eq!(exit_code_of(&usage("bad")), 2);
        assert_eq!(exit_code_of(&usage("bad").context("reading x")), 2);
        assert_eq!(exit_code_of(&anyhow::anyhow!("fork failed")), 3);
        assert_eq!(exit_code_of(&anyhow::Error::new(vmspace_linux::child::Interrupted)), 130);
    }

    #[test]
    fn json_paths_are_checked_up_front() {
        assert!(matches!(JsonOut::new(None).unwrap(), JsonOut::None));
        assert!(JsonOut::new(Some(Path::new("-"))).unwrap().takes_stdout());
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("out.json");
        assert!(matches!(JsonOut::new(Some(&ok)).unwrap(), JsonOut::File(_)));
        assert!(!ok.exists(), "the check must not leave a file behind");
        let e = JsonOut::new(Some(&dir.path().join("missing/out.json"))).unwrap_err();
        assert_eq!(exit_code_of(&e), 2);
        assert_eq!(exit_code_of(&JsonOut::new(Some(dir.path())).unwrap_err()), 2);
        let set = ReportSet::new("vmspace test", Vec::new());
        JsonOut::new(Some(&ok)).unwrap().write(&set).unwrap();
        let back: ReportSet = serde_json::from_str(&std::fs::read_to_string(&ok).unwrap()).unwrap();
        assert_eq!(back, set.with_provenance(crate::provenance::provenance()));
    }

    #[test]
    fn json_is_stamped_with_the_provenance() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("out.json");
        JsonOut::new(Some(&f)).unwrap().write(&ReportSet::new("vmspace test", Vec::new())).unwrap();
        let back: ReportSet = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        assert_eq!(back.provenance.unwrap().build, crate::provenance::build());
    }

    #[test]
    fn debug_builds_are_refused_unless_allowed() {
        let mut b = crate::provenance::build();
        b.debug_assertions = true;
        let e = debug_build_policy(&b, false).unwrap_err();
        assert_eq!(exit_code_of(&e), 2);
        assert!(format!("{e}").contains("--force"), "{e}");
        debug_build_policy(&b, true).unwrap();
        b.debug_assertions = false;
        b.opt_level = "0".into();
        assert!(debug_build_policy(&b, false).is_err());
        b.opt_level = "3".into();
        debug_build_policy(&b, false).unwrap();
    }

    #[test]
    fn memory_check_refuses_the_impossible_unless_forced() {
        // `MemAvailable:` is in /proc/meminfo since Linux 3.14 (`fs/proc/meminfo.c`).
        assert!(available_memory().is_some_and(|b| b > 0), "no MemAvailable in /proc/meminfo");
        assert_eq!(exit_code_of(&check_memory("x", u128::MAX, false).unwrap_err()), 2);
        check_memory("x", u128::MAX, true).unwrap();
        check_memory("x", 1, false).unwrap();
        assert!(check_time("x", 10.0, 5.0, false).is_err());
        check_time("x", 10.0, 5.0, true).unwrap();
    }
}
