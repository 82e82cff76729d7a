//! `vmspace kernel ...`: the probe's subcommands (the `linux` crate's experiments on the host's kernel).
//!
//! This module only parses arguments, calls `vmspace_linux`, and prints: a table for people, or with `--json`
//! one `ReportSet` (schema `vmspace.report.v1`, see BENCHMARKS.md) on stdout. Progress goes to stderr.
//! Child processes are forked by the library from this single-threaded command; Ctrl-C stops the experiment
//! and every child is killed and reaped before the command exits.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;
use vmspace_linux::args::{parse_duration, parse_list};
use vmspace_linux::contention::{self, ProcFile};
use vmspace_linux::hostinfo::{self, parse_cpu_list};
use vmspace_linux::race::{self, RaceFile, RaceTest};
use vmspace_linux::{child, faults, fork};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, ReportSet};
use vmspace_results::table::{count, ms, render};

/// The probe subcommands.
#[derive(Debug, Subcommand)]
pub enum KernelCmd {
    /// The host's kernel: release, PROCMAP_QUERY, CONFIG_PER_VMA_LOCK, page size, max_map_count, CPUs, preemption.
    Info(InfoArgs),
    /// mmap/munmap latency while scanners read /proc/PID/{maps,smaps,smaps_rollup} or walk PROCMAP_QUERY.
    Contention(ContentionArgs),
    /// The proc-maps-race selftest's split/resize/remap checks: no tearing, no false gaps.
    Race(RaceArgs),
    /// Page faults per second with T threads mapping, touching and unmapping private memory.
    Faults(FaultsArgs),
    /// fork() rate against the number of VMAs (seed 004).
    Fork(ForkArgs),
}

/// `kernel info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `kernel contention`.
#[derive(Debug, Args)]
pub struct ContentionArgs {
    /// What scanners read: maps, smaps, smaps_rollup, query (PROCMAP_QUERY walk) or none.
    #[arg(long, default_value = "maps")]
    procfile: ProcFile,
    /// Number of scanner processes (nice 15).
    #[arg(long, default_value_t = 1)]
    scanners: usize,
    /// Number of busy tasks (nice 0).
    #[arg(long, default_value_t = 0)]
    busy: usize,
    /// Busy tasks spin this many ms, then sleep 1 ms; 0 spins forever.
    #[arg(long, default_value_t = 2)]
    busy_ms: u64,
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
    /// Pause between mapper calls, µs.
    #[arg(long, default_value_t = 10)]
    pause_us: u64,
    /// Run the seeds' grid (baseline, busy only, each procfile x {scanners, +busy B=2, +busy B=0}) and print
    /// ratios to the baseline.
    #[arg(long)]
    sweep: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report set to this file (the tables are still printed).
    #[arg(long)]
    json_file: Option<std::path::PathBuf>,
}

/// `kernel race`.
#[derive(Debug, Args)]
pub struct RaceArgs {
    /// The file to read: maps (with PROCMAP_QUERY checks) or smaps.
    #[arg(long, default_value = "maps")]
    file: RaceFile,
    /// Tests to run, comma-separated: split, resize, remap.
    #[arg(long, default_value = "split,resize,remap", value_delimiter = ',', value_parser = race_test)]
    tests: Vec<RaceTest>,
    /// Length of each test.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report set to this file (the tables are still printed).
    #[arg(long)]
    json_file: Option<std::path::PathBuf>,
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
    /// CPUs the threads rotate over (default: all usable).
    #[arg(long, value_parser = cpu_list)]
    cpus: Option<::std::vec::Vec<usize>>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report set to this file (the tables are still printed).
    #[arg(long)]
    json_file: Option<std::path::PathBuf>,
}

/// `kernel fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Extra VMA counts, e.g. `0,100,1000,10000,60000` (default: seed 004's counts that fit max_map_count).
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
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report set to this file (the tables are still printed).
    #[arg(long)]
    json_file: Option<std::path::PathBuf>,
}

fn cpu_list(s: &str) -> Result<Vec<usize>, String> {
    parse_cpu_list(s).ok_or_else(|| format!("bad CPU list {s:?} (e.g. 1 or 1-3,5)"))
}

fn race_test(s: &str) -> Result<RaceTest, String> {
    RaceTest::ALL
        .into_iter()
        .find(|t| t.name() == s)
        .ok_or_else(|| format!("unknown test {s:?} (split, resize, remap)"))
}

/// Runs one probe subcommand.
pub fn run(cmd: KernelCmd) -> Result<()> {
    child::install_interrupt_handler()?;
    let host = hostinfo::gather();
    match cmd {
        KernelCmd::Info(a) => info(&host, a),
        KernelCmd::Contention(a) => contention_cmd(&host, a),
        KernelCmd::Race(a) => race_cmd(&host, a),
        KernelCmd::Faults(a) => faults_cmd(&host, a),
        KernelCmd::Fork(a) => fork_cmd(&host, a),
    }
}

fn command_line() -> String {
    let mut args = std::env::args();
    let _ = args.next();
    std::iter::once("vmspace".to_string()).chain(args).collect::<Vec<_>>().join(" ")
}

fn progress(total: u64, json: bool) -> ProgressBar {
    let pb = if json && !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} elapsed, ~{eta} left  {msg}")
            .expect("valid template"),
    );
    pb
}

fn print_json(reports: Vec<Report>) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(&ReportSet::new(command_line(), reports))?);
    Ok(())
}

fn save_json(path: Option<&std::path::Path>, reports: &[Report]) -> Result<()> {
    if let Some(p) = path {
        let text = serde_json::to_string_pretty(&ReportSet::new(command_line(), reports.to_vec()))?;
        std::fs::write(p, text + "\n").map_err(|e| anyhow::anyhow!("write {}: {e}", p.display()))?;
    }
    Ok(())
}

fn print_header(host: &HostInfo) {
    println!("host: {}", host.one_line());
    println!("load average at start: {}", host.load_average.as_deref().unwrap_or("unknown"));
    let load1: f64 =
        host.load_average.as_deref().and_then(|l| l.split(' ').next()?.parse().ok()).unwrap_or(0.0);
    if load1 > 0.5 {
        println!(
            "warning: the 1-minute load average is {load1:.2}: other work is running on this machine and will \
             disturb the measurements"
        );
    }
}

fn print_notes(reports: &[Report]) {
    for r in reports {
        for n in &r.notes {
            println!("note ({}): {n}", r.label);
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

fn info(host: &HostInfo, a: InfoArgs) -> Result<()> {
    if a.json {
        println!("{}", serde_json::to_string_pretty(host)?);
        return Ok(());
    }
    let yn = |b: Option<bool>| match b {
        Some(true) => "yes".to_string(),
        Some(false) => "no".to_string(),
        None => "unknown (/proc/config.gz absent)".to_string(),
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
        println!("{k:<24}{v}");
    }
    Ok(())
}

fn contention_cmd(host: &HostInfo, a: ContentionArgs) -> Result<()> {
    let base = contention::Config {
        procfile: a.procfile,
        scanners: a.scanners,
        busy: a.busy,
        busy_ms: a.busy_ms,
        mapper_cpu: a.mapper_cpu,
        others_cpus: a.others_cpus,
        samples: a.samples,
        duration: a.duration,
        region_mib: a.region_mib,
        pause_us: a.pause_us,
    };
    base.validate()?;
    let rows = if a.sweep { contention::sweep_grid(&base) } else { vec![base.clone()] };
    let total = (rows.len() * base.samples) as u64;
    if !a.json {
        print_header(host);
        let secs = total as f64 * (base.duration.as_secs_f64() + 0.3);
        println!(
            "{} configuration(s) x {} run(s) x {:?}: about {:.0} s",
            rows.len(),
            base.samples,
            base.duration,
            secs
        );
    }
    let pb = progress(total, a.json);
    let mut reports = Vec::new();
    for row in &rows {
        pb.set_message(row.label());
        let r = contention::run(row, host, &mut |_| pb.inc(1));
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                pb.abandon();
                return Err(e);
            }
        };
        reports.push(r);
    }
    pb.finish_and_clear();
    save_json(a.json_file.as_deref(), &reports)?;
    if a.json {
        return print_json(reports);
    }
    println!("placement: {}", placement_line(reports.last().expect("at least one row")));
    for n in reports.iter().flat_map(|r| r.notes.iter()).collect::<std::collections::BTreeSet<_>>() {
        println!("note: {n}");
    }
    let mmm = |r: &Report, k: &str| {
        r.metric(k).map(|s| format!("{}/{}/{}", ms(s.min), ms(s.median), ms(s.max))).unwrap_or_default()
    };
    let med = |r: &Report, k: &str| r.metric(k).map(|s| s.median).unwrap_or(0.0);
    if !a.sweep {
        let r = &reports[0];
        println!("\n{} ({} runs x {:?}), latencies in ms", r.label, base.samples, base.duration);
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
        print!("{}", render(&["run", "calls", "mean", "p50", "p99", "p99.9", "max", "scanner reads"], &rows));
        println!(
            "summary min/med/max: mean {}  p99 {}  max {}  calls {}",
            mmm(r, "call_mean_ms"),
            mmm(r, "call_p99_ms"),
            mmm(r, "call_max_ms"),
            count(med(r, "calls_count"))
        );
        return Ok(());
    }
    println!(
        "\nmmap/munmap call latency in ms, min/median/max over {} runs of {:?}; ratios = median / baseline median",
        base.samples, base.duration
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
    print!(
        "{}",
        render(
            &[
                "config",
                "mean min/med/max",
                "p99 med",
                "max min/med/max",
                "calls/run",
                "reads/run",
                "mean ratio",
                "max ratio"
            ],
            &rows
        )
    );
    Ok(())
}

fn race_cmd(host: &HostInfo, a: RaceArgs) -> Result<()> {
    if a.tests.is_empty() {
        bail!("--tests is empty");
    }
    if !a.json {
        print_header(host);
        println!(
            "{} test(s) x {:?} on /proc/CHILD/{}",
            a.tests.len(),
            a.duration,
            if a.file == RaceFile::Maps { "maps (+ PROCMAP_QUERY)" } else { "smaps" }
        );
    }
    let pb = progress(a.tests.len() as u64, a.json);
    let reports = race::run(a.file, &a.tests, a.duration, host, &mut |_, _| pb.inc(1));
    pb.finish_and_clear();
    let reports = reports?;
    save_json(a.json_file.as_deref(), &reports)?;
    let failures: f64 = reports.iter().filter_map(|r| r.metric("failures_count")).map(|s| s.max).sum();
    if a.json {
        print_json(reports)?;
    } else {
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
        print!(
            "{}",
            render(
                &[
                    "test",
                    "observations",
                    "saw modified",
                    "duplicates (ok)",
                    "PROCMAP_QUERY checks",
                    "child cycles",
                    "failures"
                ],
                &rows
            )
        );
        for r in &reports {
            for n in &r.notes {
                println!("{}: {n}", r.label);
            }
        }
        if failures == 0.0 {
            let q = if a.file == RaceFile::Maps { ", PROCMAP_QUERY results consistent" } else { "" };
            println!("no tearing, no false gaps{q}");
        }
    }
    if failures > 0.0 {
        bail!("{failures} failure(s): the kernel broke a documented /proc/PID/maps guarantee");
    }
    Ok(())
}

fn faults_cmd(host: &HostInfo, a: FaultsArgs) -> Result<()> {
    let threads = a.threads.unwrap_or_else(|| (1..=host.cpus_usable.len().max(1)).collect());
    let cfg = faults::Config {
        threads,
        samples: a.samples,
        duration: a.duration,
        region_mib: a.region_mib,
        cpus: a.cpus,
    };
    cfg.validate()?;
    if !a.json {
        print_header(host);
    }
    let pb = progress((cfg.threads.len() * cfg.samples) as u64, a.json);
    let reports = faults::run(&cfg, host, &mut |_, _| pb.inc(1));
    pb.finish_and_clear();
    let reports = reports?;
    save_json(a.json_file.as_deref(), &reports)?;
    if a.json {
        return print_json(reports);
    }
    println!(
        "faults per second ({} runs x {:?}, {} MiB regions, MADV_NOHUGEPAGE), median [min-max]",
        cfg.samples, cfg.duration, cfg.region_mib
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
    print!(
        "{}",
        render(&["threads", "total/s", "total range", "per thread/s", "per thread vs T=1", "CPUs"], &rows)
    );
    print_notes(&reports);
    Ok(())
}

fn fork_cmd(host: &HostInfo, a: ForkArgs) -> Result<()> {
    let vmas = a.vmas.unwrap_or_else(|| fork::default_counts(host.max_map_count));
    let cfg = fork::Config { vmas, samples: a.samples, duration: a.duration, cpu: a.cpu };
    if !a.json {
        print_header(host);
    }
    let pb = progress((cfg.vmas.len() * cfg.samples) as u64, a.json);
    let reports = fork::run(&cfg, host, &mut |_, _| pb.inc(1));
    pb.finish_and_clear();
    let reports = reports?;
    save_json(a.json_file.as_deref(), &reports)?;
    if a.json {
        return print_json(reports);
    }
    println!(
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
    print!("{}", render(&["extra", "VMAs", "forks/10s", "range", "µs/fork", "VMAs dup/10s"], &rows));
    print_notes(&reports);
    Ok(())
}
