//! `vmspace`: the command line of vmspace. Each subcommand lives in its own module and only parses arguments,
//! calls into a library crate, and prints; logic that a test would want lives in the library crates. What all
//! subcommands share (output convention, exit statuses, progress, up-front checks) is in [`common`].

// The subcommands' doc comments are clap's help text, written for a terminal: `RwLock<BTreeMap>` there is text,
// not an HTML tag.
#![allow(rustdoc::invalid_html_tags)]

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

mod bench;
mod common;
mod kernel;
mod provenance;
mod race;
mod reader_cost;
mod replay;
mod report;
mod shadow;

use common::{EXIT_STATUS_HELP, Status};

/// vmspace: Linux's scalable address-space management as a user-space engine, with the instruments to measure
/// it and to hold it against the real kernel.
#[derive(Debug, Parser)]
#[command(
    name = "vmspace",
    version = provenance::version(),
    long_version = provenance::long_version(),
    about,
    long_about = None,
    after_long_help = EXIT_STATUS_HELP,
    // `--help` wraps to the terminal's width (clap's `wrap_help`: the terminal's size, else `COLUMNS`, else
    // 100), at most 100 columns, the width of the commands' own tables.
    max_term_width = 100
)]
struct Cli {
    /// Parse the command line and exit: 0 if it parses, 2 with clap's message if not. Runs nothing; the
    /// documentation test (`crates/cli/tests/docs.rs`) checks every command line the docs cite with it.
    #[arg(long, global = true, hide = true)]
    check_args: bool,
    /// No progress display: only the results, warnings and errors.
    #[arg(long, short = 'q', global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks: vmspace against peer data structures and the live kernel, side by side.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Experiments and checks on this machine's running kernel.
    ///
    /// Address-space contention, /proc consistency, page faults, fork, and the cost of a /proc reader to
    /// the process it reads.
    #[command(subcommand)]
    Kernel(kernel::KernelCmd),
    /// Check that /proc/PID/maps shows no torn or missing record while a VMA changes.
    ///
    /// The proc-maps-race checks (tools/testing/selftests/proc/proc-maps-race.c): reading /proc/PID/maps (or
    /// smaps) while a writer splits, resizes or remaps a VMA shows no torn or missing record; every pass is also
    /// checked whole (each line one of the two states', records in order, none shown three times, no false gap;
    /// smaps: each record's Size its range's, its counters consistent), and with maps PROCMAP_QUERY at each page
    /// around the VMA answers as one of the states. On the engine in each reader mode (--engine, the default)
    /// or on the live kernel (--kernel). Exit status 1 if a check fails.
    #[command(after_long_help = EXIT_STATUS_HELP)]
    Race(race::RaceArgs),
    /// Every experiment, engine beside kernel, in one run: tables, figures and a page.
    ///
    /// The range trees, the address space against the kernel, faults, fork, the proc-vs-map grid and the
    /// tearing checks; tables and verdicts on the terminal (within 100 columns; --wide: whole tables),
    /// report.json, SVG figures and a self-contained index.html in --out DIR. --compare OLD NEW compares two
    /// runs of one kind and length. Exit status 0 if every measured target was met, 1 if a target was missed
    /// (with --compare: went from met to missed), 4 if none was missed but some was undecided or not measurable
    /// here. A closed standard output (`| head`) does not stop the run: everything measured is written to DIR.
    #[command(after_long_help = EXIT_STATUS_HELP)]
    Report(report::ReportArgs),
    /// Run an op script on the engine (--kernel: on the live kernel) and print every result.
    #[command(after_long_help = EXIT_STATUS_HELP)]
    Replay(replay::ReplayArgs),
    /// Run an op script on the engine and on the live kernel and show the first difference.
    #[command(after_long_help = EXIT_STATUS_HELP)]
    Diff(replay::DiffArgs),
    /// Run a program under ptrace and mirror every memory call it makes into the engine.
    ///
    /// Runs a program (or attaches to a process) and mirrors every memory call it makes into the engine: the
    /// same result and the same /proc/PID/maps after each call (with --smaps also each VMA's page-independent
    /// smaps fields: Size, KernelPageSize, MMUPageSize, THPeligible, ProtectionKey, VmFlags), or the first
    /// difference with its call and maps. `vmspace shadow -- python3 -c 'x = bytearray(1 << 24)'`. Exit status
    /// 1 if the engine differed; 3 if ptrace is not permitted (the message names what refused it: Yama's
    /// kernel.yama.ptrace_scope, or the missing CAP_SYS_PTRACE for a process of other credentials).
    #[command(after_long_help = EXIT_STATUS_HELP)]
    Shadow(shadow::ShadowArgs),
    /// Print a shell completion script.
    ///
    /// E.g. `vmspace completions bash > /etc/bash_completion.d/vmspace`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page, or write one page per command into DIR.
    ///
    /// The page is roff, e.g. `vmspace man | man -l -`; every page has an EXIT STATUS section.
    Man {
        /// Write `vmspace.1`, `vmspace-bench.1`, `vmspace-bench-tree.1`, ... into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors to stderr with status 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if cli.check_args {
        return ExitCode::SUCCESS;
    }
    if cli.quiet {
        common::set_quiet();
    }
    let r = match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
        Command::Kernel(cmd) => kernel::run(cmd),
        Command::Race(args) => race::run(args),
        Command::Report(args) => report::run(args),
        Command::Replay(args) => replay::run_replay(args),
        Command::Diff(args) => replay::run_diff(args),
        Command::Shadow(args) => shadow::run(args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "vmspace", &mut std::io::stdout());
            Ok(Status::Success)
        }
        Command::Man { dir } => man(dir),
    };
    match r {
        Ok(status) => ExitCode::from(status.code()),
        Err(e) => {
            let code = common::exit_code_of(&e);
            if code == 130 {
                eprintln!("vmspace: interrupted");
            } else {
                // `{:#}`: the message and its causes on one line; never the backtrace anyhow may have captured.
                eprintln!("error: {e:#}");
            }
            ExitCode::from(code)
        }
    }
}

/// Gives SIGPIPE back its default action, which Rust's runtime sets to "ignore": a command whose output goes
/// into a pipe that closes early (`vmspace replay X | head -1`) then ends quietly, as `cat` would, instead of
/// failing on every later write (and panicking in `print!`). Child processes of the kernel runner die with it
/// (they arm `PR_SET_PDEATHSIG`).
fn restore_sigpipe() {
    // SAFETY: setting a signal's disposition to its default is always valid; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// `vmspace man`: the roff page of `vmspace` on stdout, or every command's page into `dir` (`vmspace.1`,
/// `vmspace-bench.1`, `vmspace-bench-tree.1`, ...). Each page has clap_mangen's sections (NAME, SYNOPSIS,
/// DESCRIPTION, OPTIONS, SUBCOMMANDS, VERSION) and an EXIT STATUS section ([`EXIT_STATUS_HELP`]) in place of
/// clap_mangen's EXTRA section, which would hold the same text as it appears after `--help`.
fn man(dir: Option<std::path::PathBuf>) -> anyhow::Result<Status> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    match dir {
        None => man_page(&cmd, &mut std::io::stdout().lock())?,
        Some(d) => {
            common::check_writable_dir(&d).map_err(common::usage)?;
            man_pages(&cmd, &d)?;
        }
    }
    Ok(Status::Success)
}

/// Writes the page of `cmd` and of each of its visible subcommands, recursively, into `dir`.
fn man_pages(cmd: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub, dir)?;
    }
    let name = clap_mangen::Man::new(cmd.clone()).get_filename();
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(name))?);
    man_page(cmd, &mut f)?;
    std::io::Write::flush(&mut f)
}

/// The roff page of one command (see [`man`]).
fn man_page(cmd: &clap::Command, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    let m = clap_mangen::Man::new(cmd.clone());
    m.render_title(w)?;
    m.render_name_section(w)?;
    m.render_synopsis_section(w)?;
    m.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        m.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        m.render_subcommands_section(w)?;
    }
    w.write_all(exit_status_roff().as_bytes())?;
    if cmd.get_version().is_some() {
        m.render_version_section(w)?;
    }
    Ok(())
}

/// [`EXIT_STATUS_HELP`] as a roff EXIT STATUS section: one tagged paragraph per status, then the output
/// convention as a paragraph.
fn exit_status_roff() -> String {
    // roff: a backslash is `\e`, a leading `.` or `'` would be a request (`\&` before it keeps it text), a
    // hyphen is `\-`.
    let esc = |t: &str| {
        let t = t.replace('\\', "\\e").replace('-', "\\-");
        if t.starts_with('.') || t.starts_with('\'') { format!("\\&{t}") } else { t }
    };
    let mut out = String::from(".SH \"EXIT STATUS\"\n");
    let mut para = String::new();
    let flush = |out: &mut String, para: &mut String| {
        if !para.is_empty() {
            out.push_str(&esc(para.trim()));
            out.push('\n');
            para.clear();
        }
    };
    for line in EXIT_STATUS_HELP.lines().skip(1) {
        let l = line.trim_start();
        let status = l.split_whitespace().next().filter(|w| w.chars().all(|c| c.is_ascii_digit()));
        if line.is_empty() {
            flush(&mut out, &mut para);
            out.push_str(".PP\n");
        } else if let (Some(code), true) = (status, line.starts_with("  ") && !line.starts_with("   ")) {
            flush(&mut out, &mut para);
            out.push_str(&format!(".TP\n\\fB{code}\\fR\n"));
            para.push_str(l[code.len()..].trim_start());
        } else {
            para.push(' ');
            para.push_str(l);
        }
    }
    flush(&mut out, &mut para);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_exit_status_section_lists_every_status() {
        let roff = exit_status_roff();
        assert!(roff.starts_with(".SH \"EXIT STATUS\"\n"), "{roff}");
        for code in ["0", "1", "2", "3", "4", "130"] {
            assert!(roff.contains(&format!(".TP\n\\fB{code}\\fR\n")), "no status {code}: {roff}");
        }
        assert!(roff.contains("\\-\\-json"), "hyphens are escaped: {roff}");
        assert!(!roff.lines().any(|l| l.starts_with('\'')), "{roff}");
    }
}
