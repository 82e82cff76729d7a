//! `vmspace kernel reader-cost`: what a monitoring agent reading `/proc/PID/{maps,smaps,...}` costs the process
//! it reads, on this kernel (`vmspace_linux::reader_cost`) and, for the same address space imported into the
//! engine, in each reader mode (`vmspace_bench::reader_cost`). Tables per file and mode, then one answer in
//! plain words per line.

use crate::common::{self, JsonOut, Progress, Status, Text, usage};
use crate::say;
use anyhow::Result;
use clap::{ArgGroup, Args};
use std::path::PathBuf;
use std::time::Duration;
use vmspace_linux::args::parse_duration;
use vmspace_linux::child::Interrupted;
use vmspace_linux::contention::ProcFile;
use vmspace_linux::placement::Layout;
use vmspace_linux::reader_cost::{self, Agent, Config, ReaderCostError, Target};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, ReportSet};
use vmspace_results::table::{count, ms, render};

/// `kernel reader-cost`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["pid", "vmas"])))]
#[command(group(ArgGroup::new("length").args(["passes", "for_"])))]
pub struct ReaderCostArgs {
    /// The process the agent reads (a running process of yours, or any as root).
    #[arg(long, value_name = "PID")]
    pid: Option<i32>,
    /// Instead of a process: a mapper of ours with about N VMAs laid out like a program's (libraries'
    /// r--p/r-xp/r--p/rw-p file mappings, .bss, guard pages, thread stacks), whose own mmap/munmap latency is
    /// measured beside the agent and without.
    #[arg(long, value_name = "N")]
    vmas: Option<usize>,
    /// What our reader reads each pass: maps, smaps, smaps_rollup, or query (a PROCMAP_QUERY walk).
    #[arg(long, default_value = "smaps", conflicts_with = "agent")]
    file: ProcFile,
    /// Instead of our reader: a command run with `sh -c` each pass, `{pid}` replaced by the process id (e.g.
    /// "pmap -X {pid}", "cat /proc/{pid}/smaps", "ps -p {pid} -o rss", "top -b -n 1"). Its hold is
    /// estimated from one pass of our reader over the file it reads.
    #[arg(long, value_name = "COMMAND")]
    agent: Option<String>,
    /// Time from one pass's start to the next's (e.g. 15s; 0: back to back).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    every: Duration,
    /// The agent's nice value.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    nice: i32,
    /// Passes per set [default: 3 unless --for is given].
    #[arg(long)]
    passes: Option<usize>,
    /// Make passes for this long instead of a number of them (e.g. 5m).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    for_: Option<Duration>,
    /// Busy tasks (nice 0, spinning without pause on the reader's CPU) for a second set of passes, in which
    /// they starve the reader as `kernel contention --busy N --busy-ms 0` starves its scanners [default: 1
    /// with --vmas, 0 with --pid].
    #[arg(long, value_name = "N")]
    busy: Option<usize>,
    /// Skip the engine's half (the address space imported and read in each reader mode).
    #[arg(long)]
    no_engine: bool,
    /// Run even from a debug build (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    pub(crate) force: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the tables to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

/// Runs `kernel reader-cost`.
pub fn run(host: &HostInfo, a: ReaderCostArgs) -> Result<Status> {
    let target = match (a.pid, a.vmas) {
        (Some(p), _) => Target::Pid(p),
        (None, Some(n)) => Target::Vmas(n),
        (None, None) => return Err(usage("give --pid PID or --vmas N")),
    };
    let agent = match &a.agent {
        Some(c) => Agent::Command(c.clone()),
        None if a.file == ProcFile::None => return Err(usage("--file none reads nothing")),
        None => Agent::File(a.file),
    };
    let busy = a.busy.unwrap_or(if a.vmas.is_some() { 1 } else { 0 });
    let passes = if a.for_.is_none() { Some(a.passes.unwrap_or(3)) } else { None };
    let cfg = Config { target, agent, every: a.every, nice: a.nice, passes, length: a.for_, busy };
    cfg.validate(host.max_map_count).map_err(usage)?;
    if let Target::Pid(p) = target {
        reader_cost::check_pid(p).map_err(|e| usage(e.to_string()))?;
    }
    let layout = Layout::resolve(&host.cpus_usable, None, None).map_err(|e| usage(format!("{e:#}")))?;
    let json = JsonOut::new(a.json.as_deref())?;
    let t = Text::new(&json);
    say!(t, "host: {}", host.one_line());
    say!(t, "load average at start: {}", host.load_average.as_deref().unwrap_or("unknown"));
    let engine_file = match &cfg.agent {
        Agent::File(f) => Some(*f),
        Agent::Command(c) => reader_cost::agent_file(c),
    };
    let per_set = cfg.passes_per_set();
    let total = if per_set == usize::MAX { 0 } else { (per_set * cfg.sets()) as u64 };
    let engine_sets = if cfg.busy > 0 { 2 } else { 1 };
    let engine_steps = if a.no_engine || engine_file.is_none() { 0 } else { 3 * engine_sets };
    let mut pb = Progress::new(total + engine_steps);
    let mut imported = None;
    let mut engine_note = None;
    let outcome = reader_cost::run(
        &cfg,
        host,
        &mut |pid| {
            if engine_steps > 0 {
                match vmspace_bench::reader_cost::import(pid) {
                    Ok(mm) => imported = Some(mm),
                    Err(e) => engine_note = Some(format!("engine side skipped: {e}")),
                }
            }
            Ok(())
        },
        &mut |done, _, what| pb.set_done(done as u64, what),
    );
    let (mut reports, pid, failure) = match outcome {
        Ok(o) => (o.reports, o.pid, None),
        Err(e) => match e.downcast::<ReaderCostError>() {
            Ok(ReaderCostError::NoProcess(p)) => {
                pb.finish();
                return Err(usage(ReaderCostError::NoProcess(p).to_string()));
            }
            Ok(ReaderCostError::Permission(p, w)) => {
                pb.finish();
                return Err(usage(ReaderCostError::Permission(p, w).to_string()));
            }
            Ok(rc) => {
                let reports = rc.reports().to_vec();
                let pid = reports.first().and_then(|r| r.parameters.get("pid")).and_then(|v| v.as_i64());
                (reports, pid.unwrap_or(0) as i32, Some(rc))
            }
            Err(e) => {
                pb.finish();
                return Err(e);
            }
        },
    };
    // The engine's half, after every child process of the kernel's half has been reaped.
    if failure.is_none()
        && let (Some(mm), Some(file)) = (imported.as_ref(), engine_file)
    {
        let kernel_passes = reports.first().map_or(1, |r| r.runs.len()).clamp(1, 50);
        let mut step = total;
        let on_set = &mut |m: vmspace_mm::ReaderMode, b: usize| {
            step += 1;
            pb.set_done(step, &vmspace_bench::reader_cost::label(m, file, b));
        };
        match vmspace_bench::reader_cost::run(
            mm,
            file,
            kernel_passes,
            cfg.nice,
            cfg.busy,
            &layout,
            host,
            on_set,
        ) {
            Ok(r) => reports.extend(r),
            Err(e) => engine_note = Some(format!("engine side failed: {e}")),
        }
    }
    pb.finish();
    drop(imported);
    print_tables(t, &reports);
    if let Some(n) = &engine_note {
        say!(t, "note: {n}");
    }
    say!(t, "");
    for line in answers(&cfg, host, pid, &reports) {
        say!(t, "{line}");
    }
    let set = ReportSet::new(common::command_line(), reports);
    json.write(&set)?;
    match failure {
        None if vmspace_linux::child::interrupted() => Err(Interrupted.into()),
        None => Ok(Status::Success),
        Some(ReaderCostError::Interrupted(_)) => Err(Interrupted.into()),
        Some(e) => {
            Err(anyhow::Error::new(e).context("kernel reader-cost (the passes measured are shown above)"))
        }
    }
}

fn med(r: &Report, k: &str) -> f64 {
    r.metric(k).map_or(f64::NAN, |s| s.median)
}

fn max_of(r: &Report, k: &str) -> f64 {
    r.metric(k).map_or(f64::NAN, |s| s.max)
}

fn print_tables(t: Text, reports: &[Report]) {
    for r in reports.iter().filter(|r| r.benchmark == "kernel.reader_cost") {
        let agent = r.parameters.contains_key("agent");
        say!(t, "\nkernel: {} (pid {}), ms per pass", r.label, r.parameters["pid"]);
        let rows: Vec<Vec<String>> = r
            .runs
            .iter()
            .map(|run| {
                let g = |k: &str| run.metrics.get(k).copied().unwrap_or(f64::NAN);
                let mut row = vec![run.index.to_string(), count(g("vmas_count"))];
                if agent {
                    row.extend([
                        ms(g("agent_wall_ms")),
                        ms(g("agent_cpu_ms")),
                        ms(g("est_hold_total_ms")),
                        ms(g("est_hold_max_ms")),
                    ]);
                } else {
                    row.extend([
                        count(g("chunks_count")),
                        ms(g("hold_total_ms")),
                        ms(g("hold_max_ms")),
                        ms(g("chunk_p99_ms")),
                        ms(g("reader_cpu_ms")),
                        ms(g("pass_wall_ms")),
                    ]);
                }
                row
            })
            .collect();
        let head: &[&str] = if agent {
            &["pass", "VMAs", "agent wall", "agent CPU", "est. hold total", "est. longest hold"]
        } else {
            &[
                "pass",
                "VMAs",
                "read() chunks",
                "hold total",
                "longest hold",
                "chunk p99",
                "reader CPU",
                "wall",
            ]
        };
        t.print(&render(head, &rows));
    }
    if let Some(m) = reports.iter().find(|r| r.benchmark == "kernel.reader_cost.mapper") {
        say!(t, "\nkernel: the mapper's mmap and munmap calls, ms");
        let rows: Vec<Vec<String>> = reader_cost::CLASSES
            .iter()
            .map(|c| {
                let g = |k: &str| med(m, &format!("{c}_call_{k}"));
                vec![c.to_string(), count(g("count")), ms(g("mean_ms")), ms(g("p99_ms")), ms(g("max_ms"))]
            })
            .collect();
        t.print(&render(&["calls", "count", "mean", "p99", "max"], &rows));
        say!(
            t,
            "baseline: no pass ran; beside: a pass overlapped the call; starved: a pass with busy tasks overlapped it"
        );
    }
    let engine: Vec<&Report> = reports.iter().filter(|r| r.benchmark == "bench.reader_cost").collect();
    if !engine.is_empty() {
        say!(
            t,
            "\nengine: the same address space imported, per reader mode (medians over passes; longest: over passes), ms"
        );
        let rows: Vec<Vec<String>> = engine
            .iter()
            .map(|r| {
                let m =
                    reports.iter().find(|m| m.benchmark == "bench.reader_cost.mapper" && m.label == r.label);
                let mm = |k: &str| m.map_or(f64::NAN, |m| med(m, k));
                let class = engine_class(r);
                let lock = r.parameters.get("lock").and_then(|v| v.as_str()).unwrap_or("?");
                vec![
                    r.label.clone(),
                    count(med(r, "vmas_count")),
                    count(med(r, "chunks_count")),
                    ms(med(r, "chunk_total_ms")),
                    lock.to_string(),
                    count(med(r, "holds_count")),
                    ms(med(r, "hold_total_ms")),
                    ms(max_of(r, "hold_max_ms")),
                    ms(med(r, "reader_cpu_ms")),
                    format!(
                        "{} / {}",
                        ms(mm(&format!("{class}_call_mean_ms"))),
                        ms(mm("baseline_call_mean_ms"))
                    ),
                    format!(
                        "{} / {}",
                        ms(mm(&format!("{class}_call_max_ms"))),
                        ms(mm("baseline_call_max_ms"))
                    ),
                ]
            })
            .collect();
        t.print(&render(
            &[
                "mode, file",
                "VMAs",
                "chunks",
                "pass (reads)",
                "lock held",
                "holds",
                "hold total",
                "longest hold",
                "reader CPU",
                "mapper mean during/alone",
                "mapper max during/alone",
            ],
            &rows,
        ));
        say!(
            t,
            "holds by the mode's rule, from the reader's side: mmap_lock one per read(), vma_lock one per record (query), none when lockless; 'during': calls a pass overlapped (starved in the + busy sets)"
        );
    }
}

/// The mapper's class of calls a pass of engine report `r` overlapped (`beside`, or `starved` with busy threads).
fn engine_class(r: &Report) -> &'static str {
    let busy = r.parameters.get("busy").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
    vmspace_bench::reader_cost::pass_class(busy)
}

/// One plain-words answer per line (module docs).
fn answers(cfg: &Config, host: &HostInfo, pid: i32, reports: &[Report]) -> Vec<String> {
    let mut out = Vec::new();
    let every = if cfg.every.is_zero() {
        "back to back".to_string()
    } else {
        format!("every {}", common::fmt_secs(cfg.every.as_secs_f64()))
    };
    let who = match cfg.target {
        Target::Pid(_) => format!("PID {pid}"),
        Target::Vmas(_) => format!("our mapper (PID {pid})"),
    };
    for r in reports.iter().filter(|r| r.benchmark == "kernel.reader_cost") {
        let vmas = count(med(r, "vmas_count"));
        let starved = r.label.contains("busy");
        let with = if starved { format!(", starved by {} busy task(s),", cfg.busy) } else { String::new() };
        match &cfg.agent {
            Agent::File(f) => {
                let (total, longest, cpu) =
                    (med(r, "hold_total_ms"), max_of(r, "hold_max_ms"), med(r, "reader_cpu_ms"));
                let what = if reader_cost::takes_mmap_lock(*f, host) {
                    "its mmap_lock"
                } else {
                    "per-VMA locks (never its mmap_lock)"
                };
                let mut line = format!(
                    "reading {} of {who} ({vmas} VMAs) {every} at nice {}{with} holds {what} {} ms per pass, the longest hold {} ms, for {} ms of the reader's CPU",
                    f.name(),
                    cfg.nice,
                    ms(total),
                    ms(longest),
                    ms(cpu)
                );
                if reader_cost::takes_mmap_lock(*f, host) {
                    line.push_str(&format!("; preempted in that hold, {who}'s mmap, munmap and page faults that need the lock wait as long as the agent is off the CPU"));
                } else {
                    line.push_str("; the process's mmap and faults do not wait for it, only a writer changing the very VMA being read");
                }
                let every_ms = cfg.every.as_secs_f64() * 1e3;
                if !cfg.every.is_zero() && total < every_ms {
                    line.push_str(&format!(" ({:.2}% of the time)", 100.0 * total / every_ms));
                } else if !cfg.every.is_zero() {
                    line.push_str(" (a pass lasted longer than the interval: the passes ran back to back, the lock held most of the time)");
                }
                out.push(line);
            }
            Agent::Command(c) => {
                let file = reader_cost::agent_file(c);
                let mut line = format!(
                    "running `{c}` on {who} ({vmas} VMAs) {every} at nice {}{with} takes {} ms of wall time and {} ms of CPU per pass",
                    cfg.nice,
                    ms(med(r, "agent_wall_ms")),
                    ms(med(r, "agent_cpu_ms"))
                );
                match file {
                    Some(f) => line.push_str(&format!(
                        "; it reads {} ({}), so it holds that about {} ms per pass, the longest hold about {} ms (estimated: one pass of our reader over the same file right after each run)",
                        f.name(),
                        reader_cost::lock_rule(f, host),
                        ms(med(r, "est_hold_total_ms")),
                        ms(max_of(r, "est_hold_max_ms"))
                    )),
                    None => line.push_str("; it reads no per-VMA file (ps and top read stat, status and cmdline: cmdline takes mmap_read_lock for a one-page copy, whatever the VMA count)"),
                }
                out.push(line);
            }
        }
    }
    if let Some(m) = reports.iter().find(|r| r.benchmark == "kernel.reader_cost.mapper") {
        let g = |c: &str, k: &str| med(m, &format!("{c}_call_{k}"));
        let longest = reports
            .iter()
            .filter(|r| r.benchmark == "kernel.reader_cost")
            .map(|r| max_of(r, "hold_max_ms").max(max_of(r, "est_hold_max_ms")))
            .fold(f64::NAN, f64::max);
        out.push(format!(
            "the mapper's mmap/munmap: mean {} ms, p99 {} ms, max {} ms beside a pass, against {} / {} / {} ms without",
            ms(g("beside", "mean_ms")),
            ms(g("beside", "p99_ms")),
            ms(g("beside", "max_ms")),
            ms(g("baseline", "mean_ms")),
            ms(g("baseline", "p99_ms")),
            ms(g("baseline", "max_ms"))
        ));
        if g("starved", "count") > 0.0 {
            out.push(format!(
                "with the reader starved by busy tasks: mean {} ms, p99 {} ms, max {} ms; the longest single hold measured from the reader's side was {} ms (a call that waits for one chunk stalls that long, plus its own wake-up)",
                ms(g("starved", "mean_ms")),
                ms(g("starved", "p99_ms")),
                ms(g("starved", "max_ms")),
                ms(longest)
            ));
        }
    }
    let engine: Vec<&Report> = reports.iter().filter(|r| r.benchmark == "bench.reader_cost").collect();
    for r in engine {
        let mode = r.parameters.get("mode").and_then(|v| v.as_str()).unwrap_or("?");
        let m = reports.iter().find(|m| m.benchmark == "bench.reader_cost.mapper" && m.label == r.label);
        let mm = |k: &str| m.map_or(f64::NAN, |m| med(m, k));
        let class = engine_class(r);
        let starved = if class == "starved" {
            format!(
                ", starved by {} busy thread(s),",
                r.parameters.get("busy").and_then(|v| v.as_u64()).unwrap_or(0)
            )
        } else {
            String::new()
        };
        let lock = match mode {
            "mmap-lock" => format!(
                "holds the mmap lock {} ms per pass, up to {} ms at a time",
                ms(med(r, "hold_total_ms")),
                ms(max_of(r, "mmap_lock_hold_max_ms"))
            ),
            "per-vma" => format!(
                "holds one VMA lock at a time, {} ms per pass in all, up to {} ms at a time (the mmap lock only for a fallback lookup)",
                ms(med(r, "hold_total_ms")),
                ms(max_of(r, "vma_lock_hold_max_ms"))
            ),
            _ => "holds no lock".to_string(),
        };
        out.push(format!(
            "with {mode} readers (engine, same {} VMAs){starved} a pass takes {} ms of reads and {lock}; the engine mapper's worst call {} ms during passes against {} ms alone",
            count(med(r, "vmas_count")),
            ms(med(r, "chunk_total_ms")),
            ms(mm(&format!("{class}_call_max_ms"))),
            ms(mm("baseline_call_max_ms"))
        ));
    }
    out
}
