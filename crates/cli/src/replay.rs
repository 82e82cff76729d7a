//! `vmspace replay` and `vmspace diff`: op scripts on the engine and on the live kernel.
//!
//! * `vmspace replay FILE` runs the script on the engine and prints the canonical output
//!   (`vmspace_script::output`): one `L<line> <op> = <value>` per call, `MAPS` ... `END` blocks.
//! * `vmspace replay --kernel FILE` runs it on the live kernel (`vmspace_linux::replay`, a forked child).
//! * `vmspace replay --generate SEED [--calls N] [--fork] [--without FAMILY,...]` prints a generated script
//!   instead of running one; `--without` leaves generator families out (`vmspace_script::Families`; `all`: the
//!   base mix only), here and with `diff --seeds`.
//! * `vmspace diff FILE` runs both and prints the first difference with context; exit status 1 when they
//!   differ. `vmspace diff --seeds A..B [--calls N]` does the same for every generated script of the seed range
//!   (the differential gate's batches from the command line): a differing script is minimised (delta
//!   debugging) and saved as `<out-dir>/diff-seed-<S>.script`; the run stops there unless `--keep-going`. It
//!   closes with a verdict line (`40 agree, 1 differs`). Both run the one pipeline the differential gate
//!   (`crates/cli/tests/differential.rs`) runs, `vmspace_replay::diff`: the engine configured like the host
//!   and checked after every call (`--no-validate`: not), a difference counted only if it shows in each of
//!   `--repeats` kernel runs (default 5; a script that agrees costs one), minimisation under the same rule.
//!
//! * `--headroom N` (replay and diff) runs at the edge of `vm.max_map_count`: the kernel child first maps filler
//!   VMAs until only N more fit under the real sysctl, and the engine runs with `max_map_count = N`. Mappings
//!   the script places outside the arena land among the runner's own and may merge with them, which the engine
//!   cannot see, and after `mlockall(MCL_FUTURE)` the runner's own new VMAs stop merging: `diff` compares such a
//!   script only up to that call (its verdict line says where it was cut).
//!
//! With `--json FILE` the results go into the shared schema ([`crate::common`]): one report per script run
//! (benchmark `replay.engine` / `replay.kernel`, or `diff`), its canonical output or the difference in
//! `output`, and for `diff` a verdict. Unreadable scripts, and scripts or generator settings whose memory or
//! time would exceed the machine (huge `touch`, `fill` or `check` ranges, `MAP_POPULATE` of huge lengths, `--calls` in the
//! hundreds of millions) are refused before anything runs (exit status 2; `--force` runs them anyway). The
//! kernel runner leaves no process and no temporary directory behind, even when this command is killed
//! (`vmspace_linux::replay`, "Nothing outlives the command"). A script that runs for more than 2 s shows its
//! progress in calls, on the engine (counted through `vmspace_script::Observed`) and on the kernel (counted by the runner
//! child, `vmspace_linux::replay::replay_kernel_observed`); so does a seed range, in scripts.

use crate::common::{self, JsonOut, Progress, Status, Text, usage};
use crate::say;
use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use vmspace_linux::replay::ReplayError;
use vmspace_replay::diff::{self, Comparison, DiffOptions, Side};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, ReportSet, Verdict};
use vmspace_script::{Advice, Arena, Families, GenConfig, MapFlags, Op, Output, Script, generate};

/// Arguments of `vmspace replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The op script (one call per line; `--help` lists the calls; `-`: standard input). Not used with
    /// --generate.
    #[arg(required_unless_present = "generate", long_help = script_help("Not used with --generate."))]
    file: Option<PathBuf>,
    /// Run on the live kernel (in a child process) instead of the engine.
    #[arg(long)]
    kernel: bool,
    /// Print the script generated from this seed instead of running a file.
    #[arg(long, value_name = "SEED", conflicts_with_all = ["file", "kernel", "json"])]
    generate: Option<u64>,
    /// Calls in a generated script [default: 80] (with --generate).
    #[arg(long, value_name = "N")]
    calls: Option<usize>,
    /// Let generated scripts fork (with --generate).
    #[arg(long)]
    fork: bool,
    /// Pages of the arena that generated calls aim at [default: 64] (with --generate).
    #[arg(long, value_name = "N")]
    grid_pages: Option<u64>,
    /// Leave these generator families out (with --generate): exec_prot advice mlock msync mseal pkeys
    /// ftruncate mmap_flags hints edges contents proc, comma-separated, or `all` for the base mix only.
    #[arg(long, value_name = "FAMILY,...", value_delimiter = ',')]
    without: Vec<String>,
    /// Arena base address (hex with 0x, or decimal); maps lines outside it are not shown.
    #[arg(long, value_parser = parse_u64, default_value = "0x200000000000")]
    arena: u64,
    /// Run N VMAs short of vm.max_map_count (kernel: filler VMAs; engine: max_map_count = N).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "generate")]
    headroom: Option<u64>,
    /// Also write the result as JSON to FILE (`-`: JSON to standard output, the text to standard error).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run even if the estimated memory or time exceeds what this machine has.
    #[arg(long)]
    force: bool,
}

/// Arguments of `vmspace diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The op script to run on both sides (one call per line; `--help` lists the calls; `-`: standard input).
    #[arg(required_unless_present = "seeds", conflicts_with = "seeds", long_help = script_help("Runs on both sides."))]
    file: Option<PathBuf>,
    /// Instead of a file, a range of generator seeds `A..B` (B exclusive).
    #[arg(long, value_name = "A..B")]
    seeds: Option<String>,
    /// Calls per generated script [default: 60] (with --seeds).
    #[arg(long, value_name = "N")]
    calls: Option<usize>,
    /// Let generated scripts fork (with --seeds).
    #[arg(long)]
    fork: bool,
    /// Pages of the arena that generated calls aim at; small: calls interact more [default: 64] (with --seeds).
    #[arg(long, value_name = "N")]
    grid_pages: Option<u64>,
    /// Leave these generator families out (with --seeds): exec_prot advice mlock msync mseal pkeys ftruncate
    /// mmap_flags hints edges contents proc, comma-separated, or `all` for the base mix only.
    #[arg(long, value_name = "FAMILY,...", value_delimiter = ',')]
    without: Vec<String>,
    /// Directory for the minimised differing scripts, `diff-seed-<S>.script`, created if missing [default: .]
    /// (with --seeds).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Continue after a difference: every differing seed is minimised and saved (with --seeds).
    #[arg(long)]
    keep_going: bool,
    /// Arena base address.
    #[arg(long, value_parser = parse_u64, default_value = "0x200000000000")]
    arena: u64,
    /// Run N VMAs short of vm.max_map_count (kernel: filler VMAs; engine: max_map_count = N). A script is then
    /// compared up to its first call that places a mapping outside the arena (among the runner's own, where it
    /// may merge with one, which the engine cannot see) and up to its first mlockall(MCL_FUTURE) (after which
    /// the runner's own new VMAs stop merging); the verdict line says where it was cut.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    headroom: Option<u64>,
    /// Kernel runs a difference must show in before it counts: a script that agrees costs one run, one that
    /// differs runs again on the kernel, up to N runs in all, and agrees if any run agrees (the kernel's page
    /// batches are per CPU, and another task on the runner's CPU can drain them early; the engine is
    /// deterministic).
    #[arg(long, value_name = "N", default_value_t = vmspace_replay::diff::REPEATS,
          value_parser = clap::value_parser!(u32).range(1..))]
    repeats: u32,
    /// Do not check the engine's invariants (Mm::validate) after every call. By default they are checked, as
    /// the differential gate does, and a broken one is a difference (the engine panicked); checking costs time
    /// on scripts with many VMAs or pages.
    #[arg(long)]
    no_validate: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the text to standard error).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run even if the estimated memory or time exceeds what this machine has.
    #[arg(long)]
    force: bool,
}

/// The long help of a script argument: the format in brief and where its reference is.
fn script_help(tail: &str) -> String {
    format!(
        "The op script: one system call per line with its arguments, `#` comments, e.g.\n\
         \n  file f 0x4000\n  mmap 0x200000000000 0x4000 rw- shared|fixed fd=f off=0\n  mlock 0x200000001000 0x1000\n\
         \nCalls: {}.\n\
         Numbers are decimal or 0x hex; PROT is rwx-style (rw-, --x) with |-joined extra bits (rw-|sem); flags and \
         advice are lower-case names without their prefix (private|anon|fixed, onfault, current|future, sync, \
         dontneed) or raw numbers. The live kernel never runs madvise hwpoison or soft_offline. The format's \
         reference is the documentation of the vmspace_script::ast module (crates/script/src/ast.rs). `-` reads \
         the script from standard input. {tail}",
        Op::KEYWORDS.join(" ")
    )
}

fn parse_u64(s: &str) -> Result<u64, String> {
    vmspace_script::ast::parse_num(s)
}

fn arena(base: u64) -> Arena {
    Arena { base, ..Arena::default() }
}

/// The generator families left after `--without` (`all`: none).
fn families(without: &[String]) -> Result<Families> {
    let mut f = Families::ALL;
    for name in without {
        if name == "all" {
            f = Families::NONE;
        } else {
            f.set(name, false).map_err(|e| usage(format!("--without: {e}")))?;
        }
    }
    Ok(f)
}

/// Reads and parses a script (`-`: standard input): an unreadable file or a bad line is bad input (exit status
/// 2). Every bad line is named by its number, text that is not UTF-8 included; a huge token is shortened in the
/// message ([`vmspace_script::ast::ParseError`]).
fn load(path: &Path) -> Result<Script> {
    let (name, bytes) = if path.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut b)
            .map_err(|e| usage(format!("reading standard input: {e}")))?;
        ("standard input".to_string(), b)
    } else {
        let b = std::fs::read(path).map_err(|e| usage(format!("reading {}: {e}", path.display())))?;
        (path.display().to_string(), b)
    };
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => {
            let at = e.valid_up_to();
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            return Err(usage(format!(
                "{name}: bad script: line {line}: not UTF-8 text (byte {at} of the file)"
            )));
        }
    };
    Script::parse(text).map_err(|e| usage(format!("{name}: bad script: {e:#}")))
}

/// Memory one generated call may take: its line in the script, its text, its output entry and its share of
/// the maps blocks, with margin.
const BYTES_PER_CALL: u128 = 1024;
/// Memory one touched, filled or checked page takes (the kernel side allocates it; the engine keeps no
/// per-page state).
const PAGE: u128 = 4096;
/// Time one touched, filled or checked page takes on the kernel side (a page fault and a page of CPU work:
/// `fill` stores and `check` hashes 4096 bytes), seconds.
const SECS_PER_PAGE: f64 = 2e-6;
/// Time one script run takes on both sides besides its calls (the kernel runner's fork, the engine's
/// set-up), and per call, seconds: measured on the development machine, doubled.
const SECS_PER_SCRIPT: f64 = 0.01;
const SECS_PER_CALL: f64 = 20e-6;
/// Longest run accepted without --force.
const TIME_LIMIT_SECS: f64 = 24.0 * 3600.0;

/// Refuses a script whose touches or populated mappings would need more memory than the machine has, or more
/// time than [`TIME_LIMIT_SECS`] (unless `force`).
fn check_script(script: &Script, force: bool) -> Result<()> {
    // After mlockall(MCL_CURRENT or MCL_FUTURE) every mapping may be populated and locked.
    let locks_all = script.lines.iter().any(|l| matches!(l.op, Op::Mlockall { flags } if flags & 3 != 0));
    // Only a length the kernel could map counts: anything longer than the user address space fails.
    let could_map = |len: u64| if len <= vmspace_script::TASK_SIZE { u128::from(len) } else { 0 };
    let mut bytes: u128 = 0;
    for l in &script.lines {
        match &l.op {
            Op::Touch { len, .. } | Op::Fill { len, .. } | Op::Check { len, .. } => bytes += u128::from(*len),
            Op::Mmap { len, flags, .. }
                if locks_all || flags.intersects(MapFlags::POPULATE | MapFlags::LOCKED) =>
            {
                bytes += could_map(*len)
            }
            Op::Mremap { new_len, .. } if locks_all => bytes += could_map(*new_len),
            Op::Mlock { len, .. } => bytes += could_map(*len),
            Op::Mlock2 { len, flags, .. } if flags & 1 == 0 => bytes += could_map(*len),
            Op::Madvise { len, advice, .. }
                if [Advice::POPULATE_READ, Advice::POPULATE_WRITE, Advice::WILLNEED].contains(advice) =>
            {
                bytes += could_map(*len)
            }
            _ => {}
        }
    }
    let pages = bytes.div_ceil(PAGE);
    common::check_memory("the script's touches and populated or locked mappings", pages * PAGE, force)?;
    let secs = pages as f64 * SECS_PER_PAGE + script.lines.len() as f64 * SECS_PER_CALL;
    common::check_time("the script's touches", secs, TIME_LIMIT_SECS, force)
}

/// Refuses generator settings whose scripts would not fit in memory, or a seed range that would take longer
/// than [`TIME_LIMIT_SECS`] (unless `force`).
fn check_generated(calls: usize, scripts: u64, force: bool) -> Result<()> {
    common::check_memory(&format!("--calls {calls}"), calls as u128 * BYTES_PER_CALL, force)?;
    let secs = scripts as f64 * (SECS_PER_SCRIPT + calls as f64 * SECS_PER_CALL);
    common::check_time(&format!("{scripts} script(s) of {calls} calls"), secs, TIME_LIMIT_SECS, force)
}

/// How often a script on the engine reports its progress and checks for Ctrl-C, in calls.
const ENGINE_PROGRESS_EVERY: u64 = 4096;

/// Runs a script on the engine, configured like the host (mmap_min_addr, max_map_count, anonymous VMA names,
/// ...) as the semantics contract requires for comparisons with the live kernel, and with the CPU's side of
/// `fill` measured here (`vmspace_replay::diff::engine_config`); with a headroom, its `max_map_count` is the
/// headroom. A panic of the engine is an error naming it.
fn run_engine(script: &Script, arena: Arena, headroom: Option<u64>) -> Result<Output> {
    let opts = DiffOptions { arena, headroom, repeats: 1, validate: false };
    let mut watch = Watch::new(script);
    let out = diff::run_engine(script, &opts, &mut |calls| watch.on_calls(Side::Engine, calls));
    watch.finish();
    out.map_err(|m| anyhow::anyhow!("the engine panicked: {m}"))
}

/// Runs a script on the live kernel. A script the runner's guard refuses (it would change the runner's own
/// memory, or the headroom cannot be made) is bad input (exit status 2).
fn run_kernel(script: &Script, arena: Arena, headroom: Option<u64>) -> Result<Output> {
    let opts = DiffOptions { arena, headroom, repeats: 1, validate: false };
    let mut watch = Watch::new(script);
    let r = diff::run_kernel(script, &opts, &mut |calls| watch.on_calls(Side::Kernel, calls));
    watch.finish();
    r.map_err(kernel_error)
}

/// A kernel runner's error as the command reports it: a refused script is bad input (exit status 2).
fn kernel_error(e: ReplayError) -> anyhow::Error {
    match e {
        e @ ReplayError::Refused(_) => usage(e.to_string()),
        e => e.into(),
    }
}

/// The progress of a script's runs, on either side: one display per run (a new one when the side changes or
/// the count starts again), and on the engine a check for Ctrl-C every [`ENGINE_PROGRESS_EVERY`] calls, which
/// ends the command with status 130 (the engine owns no process and no file: nothing to clean up first; the
/// kernel runner stops by itself, `vmspace_linux::replay`).
struct Watch {
    total: u64,
    run: Option<(Side, u64, Progress)>,
}

impl Watch {
    fn new(script: &Script) -> Watch {
        Watch { total: script.lines.len() as u64, run: None }
    }

    fn on_calls(&mut self, side: Side, calls: u64) {
        if side == Side::Engine && !calls.is_multiple_of(ENGINE_PROGRESS_EVERY) {
            return;
        }
        if side == Side::Engine && vmspace_linux::child::interrupted() {
            self.finish();
            eprintln!("vmspace: interrupted");
            std::process::exit(130);
        }
        if !matches!(&self.run, Some((s, last, _)) if *s == side && *last <= calls) {
            self.finish();
            self.run = Some((side, calls, Progress::new(self.total)));
        }
        let Some((_, last, p)) = &mut self.run else { return };
        *last = calls;
        p.set_done(calls, if side == Side::Engine { "calls on the engine" } else { "calls on the kernel" });
    }

    fn finish(&mut self) {
        if let Some((_, _, p)) = self.run.take() {
            p.finish();
        }
    }
}

/// A report of one script run, for `--json`.
fn script_report(benchmark: &str, label: String, host: &HostInfo, script: &Script, arena: Arena) -> Report {
    let mut r = Report::new(benchmark, label, host.clone());
    r.param("ops", script.lines.len());
    r.param("arena", format!("{:#x}", arena.base));
    r
}

/// Runs `vmspace replay`.
pub fn run_replay(args: ReplayArgs) -> Result<Status> {
    if args.generate.is_none()
        && (args.calls.is_some() || args.fork || args.grid_pages.is_some() || !args.without.is_empty())
    {
        return Err(usage(
            "--calls, --fork, --grid-pages and --without shape generated scripts: they need --generate",
        ));
    }
    if let Some(seed) = args.generate {
        let calls = args.calls.unwrap_or(80);
        check_generated(calls, 1, args.force)?;
        let cfg = GenConfig {
            calls,
            fork: args.fork,
            arena: arena(args.arena),
            grid_pages: args.grid_pages.unwrap_or(64),
            families: families(&args.without)?,
        };
        print!("{}", generate(seed, &cfg).to_text());
        return Ok(Status::Success);
    }
    let Some(path) = &args.file else { return Err(usage("no script given")) };
    let json = JsonOut::new(args.json.as_deref())?;
    vmspace_linux::child::install_interrupt_handler()?;
    let script = load(path)?;
    check_script(&script, args.force)?;
    vmspace_linux::child::check_interrupted()?;
    let out = if args.kernel {
        run_kernel(&script, arena(args.arena), args.headroom)?
    } else {
        run_engine(&script, arena(args.arena), args.headroom)?
    };
    let rendered = out.render();
    Text::new(&json).print(&rendered);
    if !matches!(json, JsonOut::None) {
        let side = if args.kernel { "kernel" } else { "engine" };
        let host = vmspace_linux::hostinfo::gather();
        let mut r = script_report(
            &format!("replay.{side}"),
            path.display().to_string(),
            &host,
            &script,
            arena(args.arena),
        );
        r.param("script", path.display().to_string());
        r.param("side", side);
        r.param("headroom", args.headroom);
        r.output = rendered.lines().map(str::to_string).collect();
        json.write(&ReportSet::new(common::command_line(), vec![r]))?;
    }
    Ok(Status::Success)
}

/// Runs one script on both sides (`vmspace_replay::diff`: the headroom cut, the repeat rule); a note on
/// standard error when a difference did not repeat.
fn diff_one(script: &Script, opts: &DiffOptions) -> Result<Comparison> {
    let mut watch = Watch::new(script);
    let c = diff::diff(script, opts, &mut |side, calls| watch.on_calls(side, calls));
    watch.finish();
    let c = c.map_err(kernel_error)?;
    if c.difference_did_not_repeat() {
        eprintln!(
            "note: a difference on the kernel did not repeat (kernel run {} of {} agreed): not counted",
            c.kernel_runs,
            opts.repeats.max(1)
        );
    }
    Ok(c)
}

/// Minimises a differing script (`vmspace_replay::diff::minimise`: every candidate under the repeat rule),
/// with the progress of the candidates' runs shown as for any run.
fn minimise_script(script: &Script, opts: &DiffOptions) -> Script {
    let mut watch = Watch::new(script);
    let small = diff::minimise(script, opts, &mut |side, calls| watch.on_calls(side, calls));
    watch.finish();
    small
}

/// `; compared up to line L: why`, when a headroom run cut the script, else nothing.
fn cut_note(c: &Comparison) -> String {
    c.cut.map(|cut| format!("; {cut}")).unwrap_or_default()
}

/// The parameters of a diff report that say what was compared.
fn compared_params(r: &mut Report, opts: &DiffOptions, c: &Comparison) {
    r.param("headroom", opts.headroom);
    r.param("repeats", opts.repeats);
    r.param("validate", opts.validate);
    r.param("calls_compared", c.calls);
    r.param("enomem", c.enomem);
    r.param("kernel_runs", c.kernel_runs);
    r.param("cut_at_line", c.cut.map(|c| c.line));
}

fn parse_range(s: &str) -> Result<(u64, u64)> {
    let (a, b) = s.split_once("..").ok_or_else(|| usage(format!("--seeds {s}: expected A..B")))?;
    let a = parse_u64(a).map_err(|e| usage(format!("--seeds {s}: {e}")))?;
    let b = parse_u64(b).map_err(|e| usage(format!("--seeds {s}: {e}")))?;
    if a >= b {
        return Err(usage(format!("--seeds {s}: empty range")));
    }
    Ok((a, b))
}

/// Runs `vmspace diff`.
pub fn run_diff(args: DiffArgs) -> Result<Status> {
    if args.seeds.is_none()
        && (args.calls.is_some()
            || args.fork
            || args.grid_pages.is_some()
            || args.out_dir.is_some()
            || args.keep_going
            || !args.without.is_empty())
    {
        return Err(usage(
            "--calls, --fork, --grid-pages, --without, --out-dir and --keep-going apply to generated scripts: \
             they need --seeds",
        ));
    }
    let calls = args.calls.unwrap_or(60);
    let out_dir = args.out_dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let arena = arena(args.arena);
    let opts =
        DiffOptions { arena, headroom: args.headroom, repeats: args.repeats, validate: !args.no_validate };
    let json = JsonOut::new(args.json.as_deref())?;
    let text = Text::new(&json);
    let host = vmspace_linux::hostinfo::gather();
    if let Some(path) = &args.file {
        vmspace_linux::child::install_interrupt_handler()?;
        let script = load(path)?;
        check_script(&script, args.force)?;
        vmspace_linux::child::check_interrupted()?;
        let c = diff_one(&script, &opts)?;
        let mut r = script_report("diff", path.display().to_string(), &host, &script, arena);
        r.param("script", path.display().to_string());
        compared_params(&mut r, &opts, &c);
        r.push_run([("differs_count".to_string(), f64::from(u8::from(c.differs())))].into());
        r.summarise();
        let verdict = match &c.mismatch {
            Some(d) => {
                let d = d.to_string();
                say!(text, "{}: engine and kernel differ{}\n{d}", path.display(), cut_note(&c));
                r.output = d.lines().map(str::to_string).collect();
                Verdict::new(0, 1, "engine and kernel differ")
            }
            None => {
                say!(
                    text,
                    "{}: engine and kernel agree ({} ops{})",
                    path.display(),
                    script.lines.len(),
                    cut_note(&c)
                );
                Verdict::new(1, 0, "engine and kernel agree")
            }
        };
        json.write(&ReportSet::new(common::command_line(), vec![r]).with_verdict(verdict.clone()))?;
        return Ok(Status::of(&verdict));
    }
    let (a, b) = parse_range(args.seeds.as_deref().unwrap_or_default())?;
    check_generated(calls, b - a, args.force)?;
    // With --json every seed keeps a report (a few KiB with its host facts) until the end.
    let keep_reports = !matches!(json, JsonOut::None);
    if keep_reports {
        common::check_memory(&format!("--json with {} seeds", b - a), u128::from(b - a) * 4096, args.force)?;
    }
    if !out_dir.exists() {
        std::fs::create_dir_all(&out_dir)
            .map_err(|e| usage(format!("--out-dir {}: cannot create it: {e}", out_dir.display())))?;
    }
    common::check_writable_dir(&out_dir).map_err(|e| usage(format!("--out-dir: {e}")))?;
    vmspace_linux::child::install_interrupt_handler()?;
    let cfg = GenConfig {
        calls,
        fork: args.fork,
        arena,
        grid_pages: args.grid_pages.unwrap_or(64),
        families: families(&args.without)?,
    };
    let mut differing = Vec::new();
    let mut reports = Vec::new();
    let mut run = 0u64;
    let mut progress = Progress::new(b - a);
    let r: Result<()> = (|| {
        for seed in a..b {
            let script = generate(seed, &cfg);
            let c = diff_one(&script, &opts)?;
            run += 1;
            let mut r = script_report("diff", format!("seed {seed}"), &host, &script, arena);
            r.param("seed", seed);
            r.param("calls", calls);
            r.param("fork", args.fork);
            r.param("grid_pages", cfg.grid_pages);
            compared_params(&mut r, &opts, &c);
            r.push_run([("differs_count".to_string(), f64::from(u8::from(c.differs())))].into());
            r.summarise();
            if !c.differs() {
                if keep_reports {
                    reports.push(r);
                }
                progress.step(&format!("seed {seed}: agree"));
                continue;
            }
            progress.finish();
            eprintln!("seed {seed}: engine and kernel differ; minimising ...");
            let small = minimise_script(&script, &opts);
            vmspace_linux::child::check_interrupted()?;
            // The minimised script's own difference (minimisation kept only candidates that differed in every
            // run; should a later run agree after all, the original's difference stands).
            let d =
                diff_one(&small, &opts)?.mismatch.or(c.mismatch).map(|d| d.to_string()).unwrap_or_default();
            let save = out_dir.join(format!("diff-seed-{seed}.script"));
            let body = format!("# generated seed {seed}, {} calls, minimised\n{}", calls, small.to_text());
            std::fs::write(&save, body).with_context(|| format!("writing {}", save.display()))?;
            say!(
                text,
                "seed {seed}: engine and kernel differ (minimised script saved to {})",
                save.display()
            );
            say!(text, "{}", small.to_text().trim_end());
            say!(text, "{d}\n");
            r.notes.push(format!("minimised script saved to {}", save.display()));
            r.output = d.lines().map(str::to_string).collect();
            reports.push(r);
            differing.push(seed);
            progress.step(&format!("seed {seed}: differs"));
            if !args.keep_going {
                break;
            }
        }
        Ok(())
    })();
    progress.finish();
    r?;
    if !differing.is_empty() {
        say!(text, "differing seeds: {differing:?}");
    }
    let agree = run - differing.len() as u64;
    let mut line = format!(
        "{agree} agree, {} differ{} (seeds {a}..{}, {} calls each)",
        differing.len(),
        if differing.len() == 1 { "s" } else { "" },
        a + run,
        calls
    );
    if run < b - a {
        line.push_str(&format!("; stopped at the first difference, {} seed(s) not run", b - a - run));
    }
    say!(text, "verdict: {line}");
    let verdict = Verdict::new(agree, differing.len() as u64, line);
    json.write(&ReportSet::new(common::command_line(), reports).with_verdict(verdict.clone()))?;
    Ok(Status::of(&verdict))
}
