//! `vmspace kernel ...`: the probe's subcommands (the `linux` crate's experiments on the host's kernel).
//!
//! This module only parses arguments, calls `vmspace_linux`, and prints: a table for people and, with `--json
//! FILE`, one `ReportSet` (schema `vmspace.report.v1`, see BENCHMARKS.md; the convention of
//! [`crate::common`]). Progress goes to stderr. Child processes are forked by the library from this
//! single-threaded command; Ctrl-C stops the experiment and every child is killed and reaped before the command
//! exits (status 130). Memory the experiment would map beyond what the machine has available is refused before
//! it starts unless `--force` is given.

use crate::common::{self, JsonOut, Progress, Status, Text, usage};
use crate::say;
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use vmspace_linux::args::{parse_duration, parse_list};
use vmspace_linux::contention::{self, ProcFile};
use vmspace_linux::hostinfo::{self, parse_cpu_list};
use vmspace_linux::race::{self, RaceFile, RaceReads, RaceTest};
use vmspace_linux::talk;
use vmspace_linux::{child, faults, fork};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, ReportSet, Verdict};
use vmspace_results::table::{count, ms, render};

/// The probe subcommands.
#[derive(Debug, Subcommand)]
pub enum KernelCmd {
    /// The host's kernel: release, PROCMAP_QUERY, per-VMA locks, max_map_count, CPUs.
    ///
    /// Also the page size, the preemption model, huge pages and the other facts every live-kernel result
    /// carries.
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Info(InfoArgs),
    /// mmap/munmap latency while scanners read /proc/PID/maps, smaps or PROCMAP_QUERY.
    ///
    /// mmap/munmap latency while scanners read /proc/PID/{maps,smaps,smaps_rollup}, walk PROCMAP_QUERY or run a
    /// real tool (--agent); --talk: the LPC 2021 talk's table of the worst call against 0 to 1,000 busy tasks.
    /// Exit status 3 if a scanner or its agent command fails.
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Contention(ContentionArgs),
    /// The proc-maps-race checks on the live kernel: no torn or missing maps line.
    ///
    /// The checks of the kernel's proc-maps-race selftest (tools/testing/selftests/proc/proc-maps-race.c):
    /// reading /proc/PID/maps (or smaps) while another process splits, resizes or remaps a VMA shows no torn or
    /// missing lines; every pass is also checked whole (each line one of the two states', records in order, none
    /// shown three times, no false gap; smaps: each record's Size its range's, its counters consistent), and with
    /// maps PROCMAP_QUERY at each page around the VMA answers as one of the states. Exit status 1 if a check
    /// fails.
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Race(RaceArgs),
    /// Page faults per second with T threads mapping, touching and unmapping private memory.
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Faults(FaultsArgs),
    /// fork() rate against the number of VMAs the forking process has.
    ///
    /// kernel/fork.c: dup_mmap copies each VMA.
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Fork(ForkArgs),
    /// What a /proc reader (a monitoring agent) costs the process it reads.
    ///
    /// What a monitoring agent reading /proc/PID/{maps,smaps,smaps_rollup} (or PROCMAP_QUERY, or a command such
    /// as `pmap -X {pid}`) every few seconds costs the process it reads: per pass the time it holds the
    /// process's mmap_lock (or per-VMA locks), the longest hold, its CPU time; for a mapper of ours (--vmas N),
    /// the mapper's mmap/munmap latency beside it, with and without busy tasks starving the agent; and the same
    /// address space imported into the engine, read in each reader mode. Exit status 2 for a process that does
    /// not exist or cannot be read, 3 if it exits or the agent command fails during the run (the passes
    /// measured are printed and written).
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    ReaderCost(crate::reader_cost::ReaderCostArgs),
}

/// `kernel info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

/// `kernel contention`.
#[derive(Debug, Args)]
pub struct ContentionArgs {
    /// What scanners read: maps, smaps, smaps_rollup, query (PROCMAP_QUERY walk) or none [default: maps;
    /// with --talk: maps, smaps, smaps_rollup and query, a table each].
    #[arg(long, conflicts_with_all = ["sweep", "agent"])]
    procfile: Option<ProcFile>,
    /// A real tool as the scanner: each scanner runs COMMAND in a loop through `sh -c`, `{pid}` replaced by
    /// the mapper's pid, at the scanner's nice and CPU, instead of reading a proc file itself (e.g. `ps -o
    /// pid,rss -p {pid}`, `top -b -n 1 -p {pid}`, `pmap -X {pid}`, `cat /proc/{pid}/smaps`). The command runs
    /// once before the run; one that fails (exits non-zero) ends the command with its error, exit status 3.
    #[arg(long, value_name = "COMMAND", conflicts_with = "sweep")]
    agent: Option<String>,
    /// The LPC 2021 talk's table: one scanner beside 0, 1, 10, 100 and 1,000 busy tasks that spin without
    /// pause on its CPU (one row each), --samples runs of --duration per row; per row the median, minimum and
    /// maximum over the runs of the run's worst mmap/munmap call and the runs whose worst call exceeded 1 s.
    /// One table per proc file (--procfile: only that one) or for the --agent command.
    #[arg(long, conflicts_with_all = ["sweep", "busy", "busy_ms"])]
    talk: bool,
    /// The busy-task counts of --talk's rows, e.g. `0,1,10` [default: 0,1,10,100,1000]. Implies --talk.
    #[arg(long, value_name = "LIST", value_parser = parse_list, conflicts_with_all = ["sweep", "busy", "busy_ms"])]
    busy_counts: Option<::std::vec::Vec<usize>>,
    /// Number of scanner processes (nice 15).
    #[arg(long, default_value_t = 1)]
    scanners: usize,
    /// Number of busy tasks (nice 0).
    #[arg(long, default_value_t = 0)]
    busy: usize,
    /// Busy tasks spin MS ms, then sleep 1 ms (tables label this B=MS); 0: they spin without pause (B=0)
    /// [default: 2]. Needs --busy.
    #[arg(long, value_name = "MS", conflicts_with = "sweep")]
    busy_ms: Option<u64>,
    /// The mapper's CPU (default: the first usable CPU).
    #[arg(long)]
    mapper_cpu: Option<usize>,
    /// CPUs for scanners and busy tasks, e.g. `1` or `1-3` (default: all other usable CPUs; scanner i and busy
    /// task i share others[i % n]).
    #[arg(long, value_parser = cpu_list)]
    others_cpus: Option<::std::vec::Vec<usize>>,
    /// Runs per configuration.
    #[arg(long, default_value_t = 5)]
    samples: usize,
    /// Length of each run (e.g. 5, 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// The mapper's region, MiB.
    #[arg(long, default_value_t = 128)]
    region_mib: usize,
    /// Run even if the memory the experiment maps exceeds what this machine has available, or from a debug
    /// build (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    force: bool,
    /// Pause between mapper calls, µs.
    #[arg(long, default_value_t = 10)]
    pause_us: u64,
    /// Run the whole grid: a baseline without scanners, busy tasks only, then for each proc file scanners
    /// alone, with busy tasks that pause (B=2: spin 2 ms, sleep 1 ms) and with busy tasks that never pause
    /// (B=0); print ratios to the baseline. Replaces --procfile and --busy-ms.
    #[arg(long)]
    sweep: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

/// `kernel race`.
#[derive(Debug, Args)]
pub struct RaceArgs {
    /// The file to read: maps (with PROCMAP_QUERY checks) or smaps.
    #[arg(long, default_value = "maps")]
    pub(crate) file: RaceFile,
    /// How each pass reads the file: page (one page per read, the selftest's; the boundary observed is between
    /// two reads) or random (reads of 1 byte to about three maps lines or one smaps record, so that records
    /// straddle reads at every offset).
    #[arg(long, default_value = "page")]
    pub(crate) reads: RaceReads,
    /// Tests to run, comma-separated: split, resize, remap.
    #[arg(long, default_value = "split,resize,remap", value_delimiter = ',', value_parser = race_test)]
    pub(crate) tests: Vec<RaceTest>,
    /// Length of each test.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Run even from a debug build (which checks fewer reads in the same time; the JSON records the build).
    #[arg(long)]
    pub(crate) force: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    pub(crate) json: Option<PathBuf>,
}

/// `kernel faults`.
#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// Thread counts, e.g. `1,2` or `1-4` (default: 1 to the number of usable CPUs).
    #[arg(long, value_parser = parse_list)]
    threads: Option<::std::vec::Vec<usize>>,
    /// Runs per thread count.
    #[arg(long, default_value_t = 3)]
    samples: usize,
    /// Length of each run.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Each thread's region, MiB.
    #[arg(long, default_value_t = 16)]
    region_mib: usize,
    /// Map each thread's region at its own address hint, 1 TiB from the others', so that every thread has a VMA
    /// of its own (by default the kernel places the regions side by side and they merge into one VMA, whose
    /// lock every fault of every thread takes)
    #[arg(long)]
    apart: bool,
    /// Run even if the memory the experiment maps exceeds what this machine has available, or from a debug
    /// build (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    force: bool,
    /// CPUs the threads rotate over (default: all usable).
    #[arg(long, value_parser = cpu_list)]
    cpus: Option<::std::vec::Vec<usize>>,
    /// Also run one more thread that maps and unmaps a read-only page in a loop (taking mmap_lock for writing)
    /// while the threads fault; it runs on the CPU after theirs.
    #[arg(long)]
    mapper: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

/// `kernel fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Extra VMA counts, e.g. `0,100,1000,10000,60000` (default: 0 to 60,000 in steps that fit under
    /// vm.max_map_count).
    #[arg(long, value_parser = parse_list)]
    vmas: Option<::std::vec::Vec<usize>>,
    /// Runs per count.
    #[arg(long, default_value_t = 3)]
    samples: usize,
    /// Length of each run.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    duration: Duration,
    /// The CPU to fork on (default: the last usable CPU).
    #[arg(long)]
    cpu: Option<usize>,
    /// Run even from a debug build (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    force: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

fn cpu_list(s: &str) -> Result<Vec<usize>, String> {
    parse_cpu_list(s).ok_or_else(|| format!("bad CPU list {s:?} (e.g. 1 or 1-3,5)"))
}

pub(crate) fn race_test(s: &str) -> Result<RaceTest, String> {
    RaceTest::ALL
        .into_iter()
        .find(|t| t.name() == s)
        .ok_or_else(|| format!("unknown test {s:?} (split, resize, remap)"))
}

/// Runs one probe subcommand.
pub fn run(cmd: KernelCmd) -> Result<Status> {
    let force = match &cmd {
        KernelCmd::Info(_) => None,
        KernelCmd::Contention(a) => Some(a.force),
        KernelCmd::Race(a) => Some(a.force),
        KernelCmd::Faults(a) => Some(a.force),
        KernelCmd::Fork(a) => Some(a.force),
        KernelCmd::ReaderCost(a) => Some(a.force),
    };
    if let Some(force) = force {
        common::check_build(force)?;
    }
    child::install_interrupt_handler()?;
    let host = hostinfo::gather();
    match cmd {
        KernelCmd::Info(a) => info(&host, a),
        KernelCmd::Contention(a) => contention_cmd(&host, a),
        KernelCmd::Race(a) => race_cmd(&host, a),
        KernelCmd::Faults(a) => faults_cmd(&host, a),
        KernelCmd::Fork(a) => fork_cmd(&host, a),
        KernelCmd::ReaderCost(a) => crate::reader_cost::run(&host, a),
    }
}

/// `vmspace race --kernel`: `kernel race` with these arguments.
pub(crate) fn run_race(a: RaceArgs) -> Result<Status> {
    child::install_interrupt_handler()?;
    race_cmd(&hostinfo::gather(), a)
}

/// Runs `f` over the progress bar of `total` runs and clears the bar whatever comes out.
fn with_progress<T>(total: u64, f: impl FnOnce(&mut Progress) -> Result<T>) -> Result<T> {
    let mut pb = Progress::new(total);
    let r = f(&mut pb);
    pb.finish();
    r
}

fn set_of(reports: Vec<Report>) -> ReportSet {
    ReportSet::new(common::command_line(), reports)
}

fn print_header(t: Text, host: &HostInfo) {
    say!(t, "host: {}", host.one_line());
    say!(t, "load average at start: {}", host.load_average.as_deref().unwrap_or("unknown"));
    let load1: f64 =
        host.load_average.as_deref().and_then(|l| l.split(' ').next()?.parse().ok()).unwrap_or(0.0);
    if load1 > 0.5 {
        say!(
            t,
            "warning: the 1-minute load average is {load1:.2}: other work is running on this machine and will \
             disturb the measurements"
        );
    }
}

fn print_notes(t: Text, reports: &[Report]) {
    for r in reports {
        for n in &r.notes {
            say!(t, "note ({}): {n}", r.label);
        }
    }
}

fn placement_line(r: &Report) -> String {
    r.placement
        .iter()
        .map(|p| {
            let cpu = p.cpu.map(|c| format!("cpu {c}")).unwrap_or_else(|| "unpinned".into());
            format!("{} {}: {cpu}, nice {}", p.role, p.index, p.nice)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Refuses CPUs this process may not run on (usage error).
fn check_cpus(host: &HostInfo, cpus: &[usize]) -> Result<()> {
    match cpus.iter().find(|c| !host.cpus_usable.contains(c)) {
        Some(bad) => Err(usage(format!("CPU {bad} is not usable here (usable: {:?})", host.cpus_usable))),
        None => Ok(()),
    }
}

/// Refuses mapping `mib` MiB in total when the machine does not have it available (unless `force`).
fn check_region(what: String, mib: u128, force: bool) -> Result<()> {
    common::check_memory(&what, mib << 20, force)
}

fn info(host: &HostInfo, a: InfoArgs) -> Result<Status> {
    let json = JsonOut::new(a.json.as_deref())?;
    let t = Text::new(&json);
    let yn = |b: Option<bool>| match b {
        Some(true) => "yes".to_string(),
        Some(false) => "no".to_string(),
        None => "unknown (no kernel config in /boot or /proc/config.gz)".to_string(),
    };
    let rows = [
        ("kernel release", host.kernel_release.clone()),
        ("kernel version", host.kernel_version.clone()),
        ("machine", host.machine.clone()),
        ("CPU model", host.cpu_model.clone().unwrap_or_else(|| "unknown".into())),
        ("CPUs online", host.cpus_online.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into())),
        ("CPUs usable", format!("{} ({:?})", host.cpus_usable.len(), host.cpus_usable)),
        (
            "memory",
            host.mem_total_kb.map(|k| format!("{} MiB", k / 1024)).unwrap_or_else(|| "unknown".into()),
        ),
        ("page size", format!("{} B", host.page_size)),
        ("max_map_count", host.max_map_count.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into())),
        ("PROCMAP_QUERY", host.procmap_query.clone()),
        ("CONFIG_PER_VMA_LOCK", yn(host.per_vma_lock)),
        ("CONFIG_HZ", host.hz.map(|h| h.to_string()).unwrap_or_else(|| "unknown".into())),
        ("preemption", host.preempt_model.clone().unwrap_or_else(|| "unknown".into())),
        ("transparent huge pages", host.thp_enabled.clone().unwrap_or_else(|| "unknown".into())),
        ("load average", host.load_average.clone().unwrap_or_else(|| "unknown".into())),
    ];
    for (k, v) in rows {
        say!(t, "{k:<24}{v}");
    }
    // The facts are the report's `host`; it has no runs.
    json.write(&set_of(vec![Report::new("kernel.info", "host", host.clone())]))?;
    Ok(Status::Success)
}

fn contention_cmd(host: &HostInfo, a: ContentionArgs) -> Result<Status> {
    if a.busy_ms.is_some() && a.busy == 0 {
        return Err(usage("--busy-ms sets how busy tasks spin: it needs --busy N (N >= 1)"));
    }
    let talk = a.talk || a.busy_counts.is_some();
    let base = contention::Config {
        // An agent reads what it reads: the report's `agent` parameter says which command.
        procfile: if a.agent.is_some() { ProcFile::None } else { a.procfile.unwrap_or(ProcFile::Maps) },
        scanners: a.scanners,
        busy: a.busy,
        busy_ms: a.busy_ms.unwrap_or(2),
        mapper_cpu: a.mapper_cpu,
        others_cpus: a.others_cpus,
        samples: a.samples,
        duration: a.duration,
        region_mib: a.region_mib,
        pause_us: a.pause_us,
        agent: a.agent.clone(),
    };
    base.validate().map_err(|e| usage(format!("{e:#}")))?;
    let busy_counts = a.busy_counts.clone().unwrap_or_else(|| talk::BUSY_COUNTS.to_vec());
    if talk {
        if busy_counts.is_empty() {
            return Err(usage("--busy-counts must list at least one count"));
        }
        if let Some(n) = busy_counts.iter().find(|&&n| n > contention::MAX_BUSY) {
            return Err(usage(format!("--busy-counts {n}: at most {} busy tasks", contention::MAX_BUSY)));
        }
    }
    vmspace_linux::placement::Layout::resolve(
        &host.cpus_usable,
        base.mapper_cpu,
        base.others_cpus.as_deref(),
    )
    .map_err(|e| usage(format!("{e:#}")))?;
    check_region(format!("--region-mib {}", a.region_mib), a.region_mib as u128, a.force)?;
    let json = JsonOut::new(a.json.as_deref())?;
    let t = Text::new(&json);
    let rows = if talk {
        let files = match (a.procfile, &a.agent) {
            (_, Some(_)) => vec![ProcFile::None],
            (Some(f), None) => vec![f],
            (None, None) => talk::PROCFILES.to_vec(),
        };
        talk::grid(&base, &files, &busy_counts)
    } else if a.sweep {
        contention::sweep_grid(&base)
    } else {
        vec![base.clone()]
    };
    let total = (rows.len() * base.samples) as u64;
    print_header(t, host);
    let secs = total as f64 * (base.duration.as_secs_f64() + 0.3);
    say!(
        t,
        "{} configuration(s) x {} run(s) x {:?}: about {}",
        rows.len(),
        base.samples,
        base.duration,
        common::fmt_secs(secs)
    );
    let reports = with_progress(total, |pb| {
        let mut reports = Vec::new();
        for row in &rows {
            let label = row.label();
            reports.push(contention::run(row, host, &mut |_| pb.step(&label))?);
        }
        Ok(reports)
    })?;
    // The talk's last rows list 64 busy tasks: its first row shows the placement, the notes the rest.
    let shown = if talk { reports.first() } else { reports.last() };
    say!(t, "placement: {}", placement_line(shown.expect("at least one row")));
    for n in reports.iter().flat_map(|r| r.notes.iter()).collect::<std::collections::BTreeSet<_>>() {
        say!(t, "note: {n}");
    }
    let mmm = |r: &Report, k: &str| {
        r.metric(k).map(|s| format!("{}/{}/{}", ms(s.min), ms(s.median), ms(s.max))).unwrap_or_default()
    };
    let med = |r: &Report, k: &str| r.metric(k).map(|s| s.median).unwrap_or(0.0);
    if talk {
        say!(
            t,
            "\nthe LPC 2021 talk's table: one scanner at nice 15 and N busy tasks at nice 0 that spin without pause \
             on its CPU; per row the median, minimum and maximum over {} run(s) of {:?} of each run's worst \
             mmap/munmap call (ms), and the runs whose worst call exceeded 1 s",
            base.samples,
            base.duration
        );
        let refs: Vec<&Report> = reports.iter().collect();
        t.print(&talk::render_tables(&talk::tables(&refs, &|_| "kernel".to_string())));
    } else if !a.sweep {
        let r = &reports[0];
        say!(t, "\n{} ({} runs x {:?}), latencies in ms", r.label, base.samples, base.duration);
        let rows: Vec<Vec<String>> = r
            .runs
            .iter()
            .map(|run| {
                let g = |k: &str| run.metrics.get(k).copied().unwrap_or(0.0);
                vec![
                    run.index.to_string(),
                    count(g("calls_count")),
                    ms(g("call_mean_ms")),
                    ms(g("call_p50_ms")),
                    ms(g("call_p99_ms")),
                    ms(g("call_p999_ms")),
                    ms(g("call_max_ms")),
                    count(g("scanner_reads_count")),
                ]
            })
            .collect();
        t.print(&render(&["run", "calls", "mean", "p50", "p99", "p99.9", "max", "scanner reads"], &rows));
        say!(
            t,
            "summary min/med/max: mean {}  p99 {}  max {}  calls {}",
            mmm(r, "call_mean_ms"),
            mmm(r, "call_p99_ms"),
            mmm(r, "call_max_ms"),
            count(med(r, "calls_count"))
        );
    } else {
        say!(
            t,
            "\nmmap/munmap call latency in ms, min/median/max over {} runs of {:?}; ratios = median / baseline \
             median",
            base.samples,
            base.duration
        );
        let baseline = &reports[0];
        let rows: Vec<Vec<String>> = reports
            .iter()
            .map(|r| {
                let (rm, rx) = contention::ratios(r, baseline).unwrap_or((f64::NAN, f64::NAN));
                vec![
                    r.label.clone(),
                    mmm(r, "call_mean_ms"),
                    ms(med(r, "call_p99_ms")),
                    mmm(r, "call_max_ms"),
                    count(med(r, "calls_count")),
                    count(med(r, "scanner_reads_count")),
                    format!("{rm:.2}x"),
                    format!("{rx:.2}x"),
                ]
            })
            .collect();
        t.print(&render(
            &[
                "config",
                "mean min/med/max",
                "p99 med",
                "max min/med/max",
                "calls/run",
                "reads/run",
                "mean ratio",
                "max ratio",
            ],
            &rows,
        ));
    }
    if !talk && reports.iter().any(|r| r.label.contains("B=")) {
        say!(t, "B=N: busy tasks spin N ms, then sleep 1 ms; B=0: they spin without pause");
    }
    json.write(&set_of(reports))?;
    Ok(Status::Success)
}

fn race_cmd(host: &HostInfo, a: RaceArgs) -> Result<Status> {
    if a.tests.is_empty() {
        return Err(usage("--tests is empty"));
    }
    if a.duration.is_zero() || a.duration > Duration::from_secs(24 * 3600) {
        return Err(usage("--duration must be positive and at most 24 h"));
    }
    let json = JsonOut::new(a.json.as_deref())?;
    let t = Text::new(&json);
    print_header(t, host);
    say!(
        t,
        "{} test(s) x {:?} on /proc/CHILD/{}, {} reads",
        a.tests.len(),
        a.duration,
        if a.file == RaceFile::Maps { "maps (+ PROCMAP_QUERY)" } else { "smaps" },
        a.reads
    );
    let reports = with_progress(a.tests.len() as u64, |pb| {
        race::run(a.file, &a.tests, a.reads, a.duration, host, &mut |test, _| pb.step(test.name()))
    })?;
    let failures = |r: &Report| r.metric("failures_count").map_or(0.0, |s| s.max);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let g = |k: &str| count(r.metric(k).map(|s| s.median).unwrap_or(0.0));
            vec![
                r.label.clone(),
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
            "observations",
            "saw modified",
            "duplicates (ok)",
            "PROCMAP_QUERY checks",
            "child cycles",
            "failures",
        ],
        &rows,
    ));
    for r in &reports {
        for n in &r.notes {
            say!(t, "{}: {n}", r.label);
        }
    }
    let failed = reports.iter().filter(|r| failures(r) > 0.0).count() as u64;
    let passed = reports.len() as u64 - failed;
    let line = if failed == 0 {
        let q = if a.file == RaceFile::Maps { ", PROCMAP_QUERY results consistent" } else { "" };
        format!("{passed} passed, 0 failed: no tearing, no false gaps, every pass whole and in order{q}")
    } else {
        format!("{passed} passed, {failed} failed: the kernel broke a documented /proc/PID/maps guarantee")
    };
    say!(t, "verdict: {line}");
    let verdict = Verdict::new(passed, failed, line);
    json.write(&set_of(reports).with_verdict(verdict.clone()))?;
    Ok(Status::of(&verdict))
}

fn faults_cmd(host: &HostInfo, a: FaultsArgs) -> Result<Status> {
    let threads = a.threads.unwrap_or_else(|| (1..=host.cpus_usable.len().max(1)).collect());
    let cfg = faults::Config {
        threads,
        samples: a.samples,
        duration: a.duration,
        region_mib: a.region_mib,
        apart: a.apart,
        cpus: a.cpus,
    };
    cfg.validate().map_err(|e| usage(format!("{e:#}")))?;
    check_cpus(host, cfg.cpus.as_deref().unwrap_or_default())?;
    let most = cfg.threads.iter().copied().max().unwrap_or(1);
    check_region(
        format!("{most} thread(s) x --region-mib {}", cfg.region_mib),
        (most * cfg.region_mib) as u128,
        a.force,
    )?;
    let json = JsonOut::new(a.json.as_deref())?;
    let t = Text::new(&json);
    print_header(t, host);
    let reports = with_progress((cfg.threads.len() * cfg.samples) as u64, |pb| {
        faults::run_with(&cfg, a.mapper, host, &mut |threads, _| pb.step(&format!("{threads} thread(s)")))
    })?;
    say!(
        t,
        "faults per second ({} runs x {:?}, {} MiB regions, MADV_NOHUGEPAGE), median [min-max]",
        cfg.samples,
        cfg.duration,
        cfg.region_mib
    );
    let base = reports[0].metric("faults_per_s_per_thread").map(|s| s.median).unwrap_or(f64::NAN);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let s = r.metric("faults_per_s").copied();
            let pt = r.metric("faults_per_s_per_thread").map(|s| s.median).unwrap_or(0.0);
            vec![
                r.label.clone(),
                s.map(|s| count(s.median)).unwrap_or_default(),
                s.map(|s| format!("{}-{}", count(s.min), count(s.max))).unwrap_or_default(),
                count(pt),
                format!("{:.0}%", 100.0 * pt / base),
                r.placement
                    .iter()
                    .map(|p| p.cpu.map(|c| c.to_string()).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(","),
            ]
        })
        .collect();
    t.print(&render(
        &["threads", "total/s", "total range", "per thread/s", "per thread vs T=1", "CPUs"],
        &rows,
    ));
    if a.mapper {
        for r in &reports {
            let m = |k: &str| r.metric(k).map_or(f64::NAN, |s| s.median);
            say!(
                t,
                "{}: the mapper made {} mmap+munmap pairs/s; the faulting threads had a CPU {:.0}% of the run and \
                 spent {:.0}% of it in their own mmap/madvise/munmap calls",
                r.label,
                count(m("mapper_pairs_per_s")),
                100.0 * m("worker_cpu_share"),
                100.0 * m("map_calls_share")
            );
        }
    }
    print_notes(t, &reports);
    json.write(&set_of(reports))?;
    Ok(Status::Success)
}

fn fork_cmd(host: &HostInfo, a: ForkArgs) -> Result<Status> {
    let vmas = a.vmas.unwrap_or_else(|| fork::default_counts(host.max_map_count));
    let cfg = fork::Config { vmas, samples: a.samples, duration: a.duration, cpu: a.cpu };
    if cfg.vmas.is_empty() {
        return Err(usage("--vmas must list at least one count"));
    }
    if cfg.samples == 0 || cfg.samples > 10_000 {
        return Err(usage("--samples must be 1..=10000"));
    }
    if cfg.duration < Duration::from_millis(10) || cfg.duration > Duration::from_secs(24 * 3600) {
        return Err(usage("--duration must be between 0.01 s and 24 h"));
    }
    let limit = host.max_map_count.unwrap_or(65530) as usize;
    if let Some(n) = cfg.vmas.iter().find(|&&n| n >= limit) {
        return Err(usage(format!("--vmas {n}: more VMAs than vm.max_map_count ({limit}) allows")));
    }
    check_cpus(host, cfg.cpu.as_slice())?;
    let json = JsonOut::new(a.json.as_deref())?;
    let t = Text::new(&json);
    print_header(t, host);
    let reports = with_progress((cfg.vmas.len() * cfg.samples) as u64, |pb| {
        fork::run(&cfg, host, &mut |vmas, _| pb.step(&format!("+{vmas} VMAs")))
    })?;
    say!(
        t,
        "fork + exit + wait ({} runs x {:?}), median [min-max]; placement: {}",
        cfg.samples,
        cfg.duration,
        placement_line(&reports[0])
    );
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let s = r.metric("forks_per_10s").copied();
            let total = r.parameters.get("total_vmas").and_then(|v| v.as_u64()).unwrap_or(0);
            vec![
                r.label.clone(),
                count(total as f64),
                s.map(|s| count(s.median)).unwrap_or_default(),
                s.map(|s| format!("{}-{}", count(s.min), count(s.max))).unwrap_or_default(),
                r.metric("fork_mean_us").map(|s| format!("{:.1}", s.median)).unwrap_or_default(),
                r.metric("vmas_duplicated_per_s").map(|s| count(s.median * 10.0)).unwrap_or_default(),
            ]
        })
        .collect();
    t.print(&render(&["extra", "VMAs", "forks/10s", "range", "µs/fork", "VMAs dup/10s"], &rows));
    print_notes(t, &reports);
    json.write(&set_of(reports))?;
    Ok(Status::Success)
}
