//! `vmspace bench ...`: argument parsing and printing for the benchmarks in the `bench` crate.
//!
//! Output follows the shared convention of [`crate::common`] (`--json FILE`, `-` for standard output). `bench
//! tree` judges vmspace's maple tree against its targets (ratios to `BTreeMap`, see BENCHMARKS.md) and closes
//! with a verdict line; exit status 1 when a target was missed.

use crate::common::{self, JsonOut, Progress, Status, Text, usage};
use crate::{note, say};
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use vmspace_bench::tree::{Target, TreeConfig, render_table, run_until as run_tree_until};
use vmspace_linux::args::{parse_duration, parse_list};
use vmspace_mm::ReaderMode;

/// Memory one entry of the largest layout may take while `bench tree` runs: the layout itself, every structure
/// (they are held side by side so that their batches interleave), one structure's copies in the `dup` workload
/// and the lookup addresses, with margin (a full run peaked at 445 MB for 1,000,000 entries).
const TREE_BYTES_PER_ENTRY: u128 = 768;

/// The benchmark subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// The maple tree against BTreeMap and four concurrent peers; judges its targets.
    ///
    /// Range trees: vmspace's maple tree against BTreeMap, RwLock<BTreeMap>, ArcSwap<BTreeMap>, scc TreeIndex and
    /// crossbeam SkipMap, on the kernel's benchmark shapes (lib/test_maple_tree.c) and at scale; judges the
    /// maple tree's targets (exit status 1 if one is missed).
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Tree(TreeArgs),
    /// mmap+munmap and VMA lookups: the engine against the live kernel, bytes per VMA.
    ///
    /// The address-space engine against the live kernel: mmap+munmap pairs per second, lookups under the
    /// per-VMA lock and under mmap_lock with 1 and 2 threads, bytes per VMA.
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Mm(MmArgs),
    /// Page faults per second against threads, engine beside kernel; judges the targets.
    ///
    /// Page faults per second: threads mapping, writing every page of and unmapping their own regions of one
    /// address space, on the engine with per-VMA locks and under the mmap lock only, beside the live kernel,
    /// with and without a mapper thread (arch/x86/mm/fault.c: do_user_addr_fault); judges the targets (exit
    /// status 1 if one is missed).
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Faults(FaultsArgs),
    /// fork() against the number of VMAs, engine beside kernel; judges the targets.
    ///
    /// fork() against the number of VMAs: the engine's dup_mmap with the tree copy (__mt_dup) and with
    /// re-insertion, without pages and with one faulted page per VMA, beside the live kernel (kernel/fork.c:
    /// dup_mmap); bytes per VMA and page-table bytes per faulted page; judges the targets (exit status 1 if one
    /// is missed).
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Fork(ForkArgs),
    /// mmap/munmap latency while /proc is read, engine reader modes beside the kernel.
    ///
    /// The proc-vs-map grid (`vmspace kernel contention --sweep`) on the engine beside the live kernel: a mapper
    /// thread pinned to the first CPU maps and unmaps random pages of a populated region while a nice-15 scanner
    /// thread reads maps, smaps, smaps_rollup or walks PROCMAP_QUERY through the engine's reader in each mode
    /// (fs/proc/task_mmu.c), alone and beside a busy thread (B=2, B=0); the kernel's rows in the same run; the
    /// readers' throughput (maps VMAs/s, ns per PROCMAP_QUERY) beside /proc/self/maps; judges the targets on
    /// the ratios of each engine run to its twin run beside it, the same row with the scanner reading another
    /// address space of the same size, and only where the mapper and the scanner each had a CPU (exit status 1
    /// if one is missed).
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Contention(ContentionArgs),
}

/// Arguments of `vmspace bench contention`.
#[derive(Debug, Args)]
pub struct ContentionArgs {
    /// Runs per row (the median is reported); the engine's rows run in as many rounds, each run beside its
    /// twin (and a run of the mapper alone), and the targets judge the per-pair ratios [default: 3; --quick: 1].
    #[arg(long)]
    samples: Option<usize>,
    /// Length of each run (e.g. 2s, 500ms) [default: 2s; --quick: 100ms].
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// The mapper's populated region, MiB [default: 128; --quick: 4].
    #[arg(long)]
    region_mib: Option<usize>,
    /// Pause between the mapper's calls, µs.
    #[arg(long, default_value_t = 10)]
    pause_us: u64,
    /// The engine's reader modes, comma-separated (default: every mode: mmap-lock, per-vma, lockless).
    #[arg(long, value_delimiter = ',')]
    modes: Option<Vec<ReaderMode>>,
    /// The mapper's CPU (default: the first usable CPU).
    #[arg(long)]
    mapper_cpu: Option<usize>,
    /// CPUs for scanners and busy threads, e.g. `1` or `1-3` (default: every other usable CPU).
    #[arg(long, value_parser = cpu_list)]
    others_cpus: Option<::std::vec::Vec<usize>>,
    /// Leave out the live kernel's rows (grid and throughput).
    #[arg(long)]
    no_kernel: bool,
    /// Leave out the reader-throughput measurement.
    #[arg(long, conflicts_with = "throughput_only")]
    no_throughput: bool,
    /// Only the reader-throughput measurement (no grid).
    #[arg(long)]
    throughput_only: bool,
    /// VMAs of the throughput's address spaces [default: 10000; --quick: 1000].
    #[arg(long)]
    vmas: Option<usize>,
    /// Reader thread counts of the throughput, e.g. `1,2` [default: 1 and the number of usable CPUs].
    #[arg(long, value_parser = parse_list)]
    reader_threads: Option<::std::vec::Vec<usize>>,
    /// A short run (1 run of 100 ms per row, 4 MiB region, throughput over 1,000 VMAs): a smoke test.
    #[arg(long)]
    quick: bool,
    /// The LPC 2021 talk's table instead of the grid: one scanner beside 0, 1, 10, 100 and 1,000 busy tasks
    /// (threads on the engine, processes on the kernel) that spin without pause on its CPU, --samples runs of
    /// --duration per row, kernel and every mode; per row the median, minimum and maximum over the runs of the
    /// run's worst mmap/munmap call and the runs whose worst call exceeded 1 s; one table per proc file and
    /// side. No targets, no throughput.
    #[arg(long, conflicts_with_all = ["throughput_only", "quick"])]
    talk: bool,
    /// The busy-task counts of --talk's rows [default: 0,1,10,100,1000]. Implies --talk.
    #[arg(long, value_name = "LIST", value_parser = parse_list, conflicts_with_all = ["throughput_only", "quick"])]
    busy_counts: Option<::std::vec::Vec<usize>>,
    /// The proc files of --talk's tables, comma-separated: maps, smaps, smaps_rollup, query [default: all four].
    #[arg(long, value_delimiter = ',')]
    procfile: Option<Vec<vmspace_linux::contention::ProcFile>>,
    /// Run even if the regions would need more memory than this machine has available, or from a debug build
    /// (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    force: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

fn cpu_list(s: &str) -> Result<Vec<usize>, String> {
    vmspace_linux::hostinfo::parse_cpu_list(s).ok_or_else(|| format!("bad CPU list {s:?} (e.g. 1 or 1-3,5)"))
}

/// Arguments of `vmspace bench fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Extra VMA counts over the engine's 21 base VMAs, e.g. `0,100,1000` or the default, the __mt_dup series'
    /// 0,100,200,400,...,1638400 (the kernel's rows only where they fit under vm.max_map_count).
    #[arg(long, value_parser = parse_list)]
    vmas: Option<::std::vec::Vec<usize>>,
    /// Leave out every count above N extra VMAs (e.g. `--max 10000` for a short run).
    #[arg(long, value_name = "N")]
    max: Option<usize>,
    /// Runs per row (the median is reported with the min-max).
    #[arg(long)]
    samples: Option<usize>,
    /// Least length of each run (each run forks at least once).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Which variants: `none` (no pages), `one` (one faulted page per VMA) or `both`.
    #[arg(long, default_value = "both", value_parser = ["none", "one", "both"])]
    pages: String,
    /// Leave out the live kernel's rows.
    #[arg(long)]
    no_kernel: bool,
    /// A short run (0, 100 and 1000 extra VMAs unless --vmas is given, 1 run of 20 ms): a smoke test.
    #[arg(long)]
    quick: bool,
    /// Run even if the largest count would need more memory than this machine has available, or from a debug
    /// build (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    force: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

/// Arguments of `vmspace bench faults`.
#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// Faulting thread counts, e.g. `1,2` or `1-4` (default: 1 to the number of usable CPUs).
    #[arg(long, value_parser = parse_list)]
    threads: Option<::std::vec::Vec<usize>>,
    /// Runs per row (the median is reported with the min-max).
    #[arg(long)]
    samples: Option<usize>,
    /// Length of each run (e.g. 2s, 500ms).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Each thread's region, MiB.
    #[arg(long)]
    region_mib: Option<usize>,
    /// How the engine's threads access each page: `write` (a one-byte store: the new page's 4 KiB of contents
    /// are zeroed, as the kernel's clear_page does) or `touch` (a write access that stores nothing: the same
    /// fault, no contents). The kernel's threads always store a byte.
    #[arg(long, default_value = "write", value_parser = ["write", "touch"])]
    access: String,
    /// Map each thread's region at its own address hint, 1 TiB from the others', on both sides, so that every
    /// thread has a VMA of its own. By default the regions are placed side by side and merge into one VMA, whose
    /// lock every fault of every thread takes: the difference is what that shared lock costs.
    #[arg(long)]
    apart: bool,
    /// Leave out the live kernel's rows.
    #[arg(long)]
    no_kernel: bool,
    /// A short run (1 and 2 threads unless --threads is given, 1 run of 0.1 s, 2 MiB regions): a smoke test.
    #[arg(long)]
    quick: bool,
    /// Run even if the regions would need more memory than this machine has available, or from a debug build
    /// (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    force: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

/// Arguments of `vmspace bench mm`.
#[derive(Debug, Args)]
pub struct MmArgs {
    /// A short run (2 ms batches, 3 repeats, 1-page mappings, 1k and 10k VMAs): a smoke test.
    #[arg(long)]
    quick: bool,
    /// Timed batches per measurement (the median is reported).
    #[arg(long)]
    repeats: Option<usize>,
    /// Length of one timed batch, in milliseconds.
    #[arg(long)]
    batch_ms: Option<u64>,
    /// Run even from a debug build (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    force: bool,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
}

/// Arguments of `vmspace bench tree`.
#[derive(Debug, Args)]
pub struct TreeArgs {
    /// Entry counts of the VMA-like layouts measured at scale.
    #[arg(long, value_delimiter = ',', default_value = "21,1000,100000,1000000")]
    sizes: Vec<usize>,
    /// A short run (sizes 21 and 1000 unless --sizes is given, 1 ms batches, 3 rounds): a smoke test.
    #[arg(long)]
    quick: bool,
    /// Structures to measure (comma-separated): maple, btree, rwlock, arcswap, scc, skipmap.
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Rounds per cell: each structure times one batch per round, interleaved with the others'; a target is
    /// judged on the per-round ratios (9 by default; 5 or fewer judge on their min-max).
    #[arg(long)]
    repeats: Option<usize>,
    /// Length of one timed batch, in milliseconds.
    #[arg(long)]
    batch_ms: Option<u64>,
    /// Also write the results as JSON to FILE (`-`: JSON to standard output, the table to standard error).
    #[arg(long, value_name = "FILE", alias = "json-file")]
    json: Option<PathBuf>,
    /// Also draw lookup time against n per structure as an SVG plot into FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
    /// Seed of the random layouts, addresses and orders.
    #[arg(long)]
    seed: Option<u64>,
    /// Measure in N processes, one after another (this program run again with the same options and seed), and
    /// judge every target on the rounds of all of them: a quantity that moves between processes of one build
    /// (where the heap and the node slab land) then widens the interval instead of deciding a target one way
    /// in one run and the other way in the next (3 by default, 1 with --quick).
    #[arg(long, value_name = "N")]
    processes: Option<usize>,
    /// Run even if the largest size would need more memory than this machine has available, or from a debug
    /// build (whose timings are not the engine's; the JSON records the build).
    #[arg(long)]
    force: bool,
}

/// Runs one benchmark subcommand.
///
/// Ctrl-C (or SIGTERM) stops the benchmark at its next step with exit status 130 (a second Ctrl-C at once):
/// the benchmarks own no child process and no file until the end, so there is nothing to clean up.
pub fn run(cmd: BenchCmd) -> Result<Status> {
    common::check_build(match &cmd {
        BenchCmd::Tree(a) => a.force,
        BenchCmd::Mm(a) => a.force,
        BenchCmd::Faults(a) => a.force,
        BenchCmd::Fork(a) => a.force,
        BenchCmd::Contention(a) => a.force,
    })?;
    vmspace_linux::child::install_interrupt_handler()?;
    let status = match cmd {
        BenchCmd::Tree(args) => tree(args),
        BenchCmd::Mm(args) => mm(args),
        BenchCmd::Faults(args) => faults(args),
        BenchCmd::Fork(args) => fork(args),
        BenchCmd::Contention(args) => contention(args),
    }?;
    // Ctrl-C stops the measurement at the next step; the benchmark still prints (and writes with --json)
    // what it measured before, then the command ends with status 130.
    if vmspace_linux::child::interrupted() {
        note!("vmspace bench: interrupted; the results above are what was measured before Ctrl-C");
        return Err(anyhow::Error::new(vmspace_linux::child::Interrupted));
    }
    Ok(status)
}

fn faults(args: FaultsArgs) -> Result<Status> {
    use vmspace_bench::faults as bench_faults;
    let cpus = vmspace_linux::sys::usable_cpus().map_or(1, |c| c.len().max(1));
    let mut cfg =
        if args.quick { bench_faults::FaultsConfig::quick() } else { bench_faults::FaultsConfig::full(cpus) };
    if let Some(t) = args.threads {
        cfg.threads = t;
    }
    if let Some(s) = args.samples {
        cfg.samples = s;
    }
    if let Some(d) = args.duration {
        cfg.duration = d;
    }
    if let Some(m) = args.region_mib {
        cfg.region_mib = m;
    }
    if args.no_kernel {
        cfg.sides.retain(|s| *s != bench_faults::Side::Kernel);
    }
    if args.access == "touch" {
        cfg.access = bench_faults::EngineAccess::Touch;
    }
    cfg.apart = args.apart;
    cfg.validate().map_err(usage)?;
    let most = cfg.threads.iter().copied().max().unwrap_or(1) as u128;
    // The engine's pages carry their contents (4 KiB each) beside their frame descriptors; the kernel's regions
    // are real memory: twice the regions is the bound of either side.
    common::check_memory(
        &format!("{most} thread(s) x --region-mib {}", cfg.region_mib),
        2 * most * ((cfg.region_mib as u128) << 20),
        args.force,
    )?;
    let json = JsonOut::new(args.json.as_deref())?;
    let text = Text::new(&json);
    let mut bar = Progress::new(cfg.steps());
    let mut progress = |what: &str| step_or_stop(&mut bar, what);
    let stop = vmspace_linux::child::interrupted;
    let results = bench_faults::run(&cfg, &mut progress, &stop, &common::command_line());
    bar.finish();
    let results = results.map_err(anyhow::Error::msg)?;
    let host = results.set.reports.first().map(|r| r.host.clone());
    say!(text, "vmspace bench faults: {}", host.as_ref().map_or(String::new(), |h| h.one_line()));
    say!(
        text,
        "method: {} run(s) x {:?} per row, rows interleaved run by run; {} MiB region per thread, one byte written \
         per page (engine: {}), MADV_NOHUGEPAGE, {}; median and min-max of the runs",
        cfg.samples,
        cfg.duration,
        cfg.region_mib,
        if cfg.access == bench_faults::EngineAccess::Touch { "Mm::touch, no contents" } else { "Mm::write" },
        if cfg.apart {
            "each region at its own hint (one VMA per thread)"
        } else {
            "regions placed side by side"
        }
    );
    if let Some(r) = results.rows.iter().rev().find(|(row, _)| row.mapper).map(|(_, r)| r) {
        say!(
            text,
            "placement ({}): {}",
            r.label,
            r.placement
                .iter()
                .map(|p| format!(
                    "{} {}: cpu {}",
                    p.role,
                    p.index,
                    p.cpu.map_or("-".into(), |c| c.to_string())
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    say!(text, "");
    text.print(&bench_faults::render_table(&results));
    say!(
        text,
        "\nper CPU-s = pages written per CPU-second of the faulting threads (CLOCK_THREAD_CPUTIME_ID); CPU share = \
         the share of the run each faulting thread had a CPU; in mmap/munmap = the share it spent in its own \
         mmap, madvise and munmap calls (waits for mmap_lock included); vs T=1 = the row's per-thread rate over \
         the same side's 1-thread rate with the same mapper (above 100%: each thread faster than one alone), \
         \"T=1 starved\" where that 1-thread run did not have a CPU of its own (more runnable threads than CPUs, \
         on a CPU under 90% of the run, or with the mapper under half its rate without it); shared VMA = the share of an engine \
         thread's regions that had merged with a neighbour's into one VMA (whose lock both threads' faults then \
         take; --apart keeps them apart); +mapper = one more thread mapping and unmapping a \
         read-only page meanwhile; vma_lock counters as /proc/vmstat names them (medians per run; n/a: the \
         kernel has no CONFIG_PER_VMA_LOCK_STATS)"
    );
    say!(text, "\ntargets:");
    text.print(&vmspace_bench::judge::render(&results.targets));
    let verdict = common::indicative_if(vmspace_bench::judge::verdict(&results.targets), args.quick);
    say!(text, "\nverdict: {}", verdict.line);
    json.write(&results.set.clone().with_verdict(verdict.clone()))?;
    if let JsonOut::File(p) = &json {
        say!(text, "JSON written to {}", p.display());
    }
    Ok(Status::of(&verdict))
}

fn tree(args: TreeArgs) -> Result<Status> {
    let sizes_given = std::env::args().any(|a| a == "--sizes" || a.starts_with("--sizes="));
    let mut cfg = if args.quick { TreeConfig::quick() } else { TreeConfig::full() };
    if sizes_given || !args.quick {
        cfg.sizes = args.sizes.clone();
    }
    if cfg.sizes.is_empty() || cfg.sizes.contains(&0) {
        return Err(usage("--sizes needs at least one size, and every size must be at least 1"));
    }
    if let Some(list) = &args.targets {
        let mut targets = Vec::new();
        for id in list {
            match Target::parse(id) {
                Some(t) if !targets.contains(&t) => targets.push(t),
                Some(_) => {}
                None => {
                    return Err(usage(format!(
                        "unknown target {id:?}; known: {}",
                        Target::ALL.iter().map(|t| t.id()).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
        }
        if targets.is_empty() {
            return Err(usage("--targets is empty"));
        }
        targets.sort();
        cfg.targets = targets;
    }
    apply_timer_args(&mut cfg.timer, args.repeats, args.batch_ms)?;
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    let largest = cfg.sizes.iter().copied().max().unwrap_or(0) as u128;
    common::check_memory(&format!("--sizes {largest}"), largest * TREE_BYTES_PER_ENTRY, args.force)?;
    let json = JsonOut::new(args.json.as_deref())?;
    if let Some(svg) = &args.svg {
        common::check_writable_file(svg, "--svg")?;
    }
    let text = Text::new(&json);

    let processes = args.processes.unwrap_or(if args.quick { 1 } else { 3 });
    if processes == 0 {
        return Err(usage("--processes needs at least 1"));
    }
    let results = if processes == 1 {
        let mut bar = Progress::new(cfg.steps());
        let mut progress = |what: &str| step_or_stop(&mut bar, what);
        let stop = vmspace_linux::child::interrupted;
        let results = run_tree_until(&cfg, &mut progress, &stop, &common::command_line());
        bar.finish();
        results
    } else {
        tree_processes(&cfg, &args, processes)?
    };

    say!(
        text,
        "vmspace bench tree: {}",
        results.set.reports.first().map_or(String::new(), |r| r.host.one_line())
    );
    say!(text, "placement: {}", results.placement);
    say!(
        text,
        "method: every structure's batches of ~{} ms interleaved in {} rounds per cell (forward, then backward){}; \
         a cell is the median time and (x) the median of its per-round ratios to BTreeMap's batch of the same \
         round; n/a = not applicable\n",
        cfg.timer.batch.as_millis(),
        cfg.timer.repeats,
        if processes > 1 {
            format!(" in each of {processes} processes, their rounds pooled")
        } else {
            String::new()
        },
    );
    text.print(&render_table(&results, &cfg.targets));
    let mut verdict = vmspace_bench::judge::verdict(&results.verdicts);
    if verdict.line.contains("not measured") {
        verdict.line = verdict.line.replace("not measured in this run", "not measured at these sizes");
    }
    let verdict = common::indicative_if(verdict, args.quick);
    say!(text, "\nverdict: {}", verdict.line);
    let set = results.set.clone().with_verdict(verdict.clone());
    json.write(&set)?;
    if let JsonOut::File(p) = &json {
        say!(text, "JSON written to {}", p.display());
    }
    if let Some(path) = &args.svg {
        vmspace_bench::plot::lookup_vs_n(&results, path)?;
        say!(text, "plot written to {}", path.display());
    }
    Ok(Status::of(&verdict))
}

/// `bench tree --processes N` (N > 1): runs the benchmark in N child processes one after another (this binary,
/// the same sizes, structures, timer options and seed, `--processes 1 --json FILE`) and pools their rounds
/// ([`vmspace_bench::tree::pool_processes`]).
fn tree_processes(
    cfg: &TreeConfig,
    args: &TreeArgs,
    processes: usize,
) -> Result<vmspace_bench::tree::TreeResults> {
    let exe = std::env::current_exe()?;
    let mut child_args: Vec<String> = vec!["bench".into(), "tree".into()];
    let sizes: Vec<String> = cfg.sizes.iter().map(ToString::to_string).collect();
    child_args.extend(["--sizes".into(), sizes.join(",")]);
    let targets: Vec<&str> = cfg.targets.iter().map(|t| t.id()).collect();
    child_args.extend(["--targets".into(), targets.join(",")]);
    child_args.extend(["--seed".into(), cfg.seed.to_string()]);
    if let Some(r) = args.repeats {
        child_args.extend(["--repeats".into(), r.to_string()]);
    }
    if let Some(b) = args.batch_ms {
        child_args.extend(["--batch-ms".into(), b.to_string()]);
    }
    if args.quick {
        child_args.push("--quick".into());
    }
    if args.force {
        child_args.push("--force".into());
    }
    child_args.extend(["--processes".into(), "1".into()]);
    let mut bar = Progress::new(processes as u64);
    let mut sets = Vec::with_capacity(processes);
    for i in 0..processes {
        let file = std::env::temp_dir().join(format!("vmspace-bench-tree-{}-{i}.json", std::process::id()));
        let status = std::process::Command::new(&exe)
            .args(&child_args)
            .arg("--json")
            .arg(&file)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()?;
        let text = std::fs::read_to_string(&file);
        let _ = std::fs::remove_file(&file);
        step_or_stop(&mut bar, &format!("process {} of {processes}", i + 1));
        if vmspace_linux::child::interrupted() {
            // The process interrupted with this one measured only part of its cells; the finished ones count.
            break;
        }
        // 0: every target met, 1: one missed, 4: one undecided or not measurable (a judged run all the same);
        // anything else is a failed run.
        if !matches!(status.code(), Some(0 | 1 | 4)) {
            bar.finish();
            anyhow::bail!("process {} of {processes} ({}) ended with {status}", i + 1, child_args.join(" "));
        }
        let set: vmspace_results::report::ReportSet = serde_json::from_str(&text?)?;
        sets.push(set);
    }
    bar.finish();
    let placement = format!(
        "{processes} processes one after another, each as `vmspace {}`; the rounds of all of them pooled",
        child_args.join(" ")
    );
    Ok(vmspace_bench::tree::pool_processes(cfg, sets, placement, &common::command_line()))
}

fn mm(args: MmArgs) -> Result<Status> {
    use vmspace_bench::mm as bench_mm;
    let mut cfg = if args.quick { bench_mm::MmBenchConfig::quick() } else { bench_mm::MmBenchConfig::full() };
    apply_timer_args(&mut cfg.timer, args.repeats, args.batch_ms)?;
    let json = JsonOut::new(args.json.as_deref())?;
    let text = Text::new(&json);
    let mut bar = Progress::new(bench_mm::steps(&cfg));
    let mut progress = |what: &str| step_or_stop(&mut bar, what);
    let stop = vmspace_linux::child::interrupted;
    let results =
        bench_mm::run_until(&cfg, &mut progress, &stop, &common::command_line()).map_err(anyhow::Error::msg);
    bar.finish();
    let results = results?;

    say!(
        text,
        "vmspace bench mm: {}",
        results.set.reports.first().map_or(String::new(), |r| r.host.one_line())
    );
    say!(text, "placement: {}", results.placement);
    say!(
        text,
        "method: median of {} batches of ~{} ms per cell\n",
        cfg.timer.repeats,
        cfg.timer.batch.as_millis()
    );
    text.print(&bench_mm::render_table(&results));
    say!(
        text,
        "\nNp = mappings of N pages; N others = other VMAs in the address space; xN = N threads; \
         lock_vma_under_rcu = lookups under the per-VMA lock (mm/mmap_lock.c), mmap_read_lock = under the mmap lock"
    );
    let targets = bench_mm::targets(&results.set.reports);
    say!(text, "\ntargets:");
    text.print(&vmspace_bench::judge::render(&targets));
    let verdict = common::indicative_if(vmspace_bench::judge::verdict(&targets), args.quick);
    say!(text, "\nverdict: {}", verdict.line);
    let host = results.set.reports.first().map(|r| r.host.clone()).unwrap_or_default();
    let mut set = results.set.clone();
    set.reports.extend(targets.iter().map(|t| t.report("bench.mm.target", &host)));
    json.write(&set.with_verdict(verdict.clone()))?;
    if let JsonOut::File(p) = &json {
        say!(text, "\nJSON written to {}", p.display());
    }
    Ok(Status::of(&verdict))
}

/// Memory one VMA of the largest count may take while `bench fork` runs: the parent's VMA and tree share, a
/// child's, a faulted page's frame descriptor and table share, with margin.
const FORK_BYTES_PER_VMA: u128 = 1024;

fn fork(args: ForkArgs) -> Result<Status> {
    use vmspace_bench::fork as bench_fork;
    let mut cfg = if args.quick { bench_fork::ForkConfig::quick() } else { bench_fork::ForkConfig::full() };
    if let Some(v) = args.vmas {
        cfg.extra = v;
        cfg.extra.sort_unstable();
        cfg.extra.dedup();
    }
    if let Some(max) = args.max {
        cfg.extra.retain(|&n| n <= max);
    }
    if let Some(s) = args.samples {
        cfg.samples = s;
    }
    if let Some(d) = args.duration {
        cfg.duration = d;
    }
    cfg.pages = match args.pages.as_str() {
        "none" => vec![false],
        "one" => vec![true],
        _ => vec![false, true],
    };
    cfg.kernel = !args.no_kernel;
    cfg.validate().map_err(usage)?;
    common::check_memory(
        &format!("{} VMAs", cfg.most_vmas()),
        cfg.most_vmas() as u128 * FORK_BYTES_PER_VMA,
        args.force,
    )?;
    let json = JsonOut::new(args.json.as_deref())?;
    let text = Text::new(&json);
    let mut bar = Progress::new(cfg.steps());
    let mut progress = |what: &str| step_or_stop(&mut bar, what);
    let stop = vmspace_linux::child::interrupted;
    let results = bench_fork::run(&cfg, &mut progress, &stop, &common::command_line());
    bar.finish();
    let results = results.map_err(anyhow::Error::msg)?;
    say!(
        text,
        "vmspace bench fork: {}",
        bench_fork::host_of(&results).map_or(String::new(), |h| h.one_line())
    );
    say!(
        text,
        "method: {} run(s) of at least {:?} per row; engine: {} base VMAs + the extra ones, Mm::fork_with then the \
         child's drop, tree copy and re-insertion alternating run by run on one parent; kernel: this process + the \
         extra VMAs, fork + _exit + wait, forker and child on the last usable CPU",
        cfg.samples,
        cfg.duration,
        bench_fork::BASE_VMAS
    );
    text.print(&bench_fork::render_tables(&results));
    say!(
        text,
        "\ncells: fork call µs (million VMAs copied per second in the call) / fork + exit µs; reinsert/copy = \
         re-insertion's fork call time over the tree copy's; kernel M VMAs dup/s = forks per second x VMAs, as the \
         __mt_dup series counts them"
    );
    say!(text, "\ntargets:");
    text.print(&vmspace_bench::judge::render(&results.targets));
    let verdict = common::indicative_if(vmspace_bench::judge::verdict(&results.targets), args.quick);
    say!(text, "\nverdict: {}", verdict.line);
    json.write(&results.set.clone().with_verdict(verdict.clone()))?;
    if let JsonOut::File(p) = &json {
        say!(text, "JSON written to {}", p.display());
    }
    Ok(Status::of(&verdict))
}

fn contention(args: ContentionArgs) -> Result<Status> {
    use vmspace_bench::contention as bench;
    let mut cfg = if args.quick { bench::ContentionConfig::quick() } else { bench::ContentionConfig::full() };
    if let Some(s) = args.samples {
        cfg.base.samples = s;
    }
    if let Some(d) = args.duration {
        cfg.base.duration = d;
    }
    if let Some(m) = args.region_mib {
        cfg.base.region_mib = m;
    }
    cfg.base.pause_us = args.pause_us;
    cfg.base.mapper_cpu = args.mapper_cpu;
    cfg.base.others_cpus = args.others_cpus;
    if let Some(modes) = args.modes {
        let mut m: Vec<ReaderMode> = Vec::new();
        for x in modes {
            if !m.contains(&x) {
                m.push(x);
            }
        }
        cfg.modes = m;
    }
    cfg.kernel = !args.no_kernel;
    cfg.grid = !args.throughput_only;
    if args.no_throughput {
        if args.vmas.is_some() || args.reader_threads.is_some() {
            return Err(usage(
                "--vmas and --reader-threads set the throughput, which --no-throughput leaves out",
            ));
        }
        cfg.throughput = None;
    }
    if let Some(t) = cfg.throughput.as_mut() {
        if let Some(s) = args.samples {
            t.samples = s;
        }
        if let Some(v) = args.vmas {
            t.vmas = v;
        }
        if let Some(r) = args.reader_threads {
            t.threads = r;
        }
    }
    if args.talk || args.busy_counts.is_some() {
        let mut t = vmspace_bench::contention::TalkGrid::default();
        if let Some(c) = args.busy_counts {
            t.busy_counts = c;
        }
        if let Some(f) = args.procfile {
            t.files = f;
        }
        cfg.talk = Some(t);
        cfg.throughput = None;
    } else if args.procfile.is_some() {
        return Err(usage("--procfile chooses the tables of --talk: it needs --talk or --busy-counts"));
    }
    cfg.validate().map_err(usage)?;
    let host = vmspace_linux::hostinfo::gather();
    vmspace_linux::placement::Layout::resolve(
        &host.cpus_usable,
        cfg.base.mapper_cpu,
        cfg.base.others_cpus.as_deref(),
    )
    .map_err(|e| usage(format!("{e:#}")))?;
    // The kernel's mapper and the engine's each hold the region (the engine's pages with their contents).
    common::check_memory(
        &format!("--region-mib {}", cfg.base.region_mib),
        2 * ((cfg.base.region_mib as u128) << 20),
        args.force,
    )?;
    let json = JsonOut::new(args.json.as_deref())?;
    let text = Text::new(&json);
    let mut bar = Progress::new(cfg.steps());
    let mut progress = |what: &str| step_or_stop(&mut bar, what);
    let stop = vmspace_linux::child::interrupted;
    let results = bench::run(&cfg, &mut progress, &stop, &common::command_line());
    bar.finish();
    let results = results.map_err(anyhow::Error::msg)?;
    say!(text, "vmspace bench contention: {}", host.one_line());
    let b = &cfg.base;
    say!(
        text,
        "method: {} run(s) x {:?} per row (engine: in rounds, each run paired with its twin beside it, the scanner \
         reading another address space of the same size, both in the mapper's steady state); \
         mapper pinned to CPU {}, random 4 KiB mmap/munmap in a populated {} MiB \
         region, {} µs pause; scanners at nice 15 and busy tasks (B=N: spin N ms, sleep 1 ms; B=0: never sleep) \
         on CPU(s) {:?}; engine modes: {}; kernel rows {}",
        b.samples,
        b.duration,
        cfg.base.mapper_cpu.unwrap_or(host.cpus_usable.first().copied().unwrap_or(0)),
        b.region_mib,
        b.pause_us,
        cfg.base.others_cpus.clone().unwrap_or_else(|| host.cpus_usable.iter().skip(1).copied().collect()),
        cfg.modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(", "),
        if cfg.kernel { "first (before the engine allocates)" } else { "left out" }
    );
    if cfg.talk.is_some() {
        say!(
            text,
            "\nthe LPC 2021 talk's table: one scanner at nice 15 and N busy tasks at nice 0 that spin without \
             pause on its CPU; per row the median, minimum and maximum over {} run(s) of {:?} of each run's worst \
             mmap/munmap call (ms), and the runs whose worst call exceeded 1 s",
            b.samples,
            b.duration
        );
        text.print(&bench::render_tables(&results));
        json.write(&results.set)?;
        if let JsonOut::File(p) = &json {
            say!(text, "JSON written to {}", p.display());
        }
        return Ok(Status::Success);
    }
    text.print(&bench::render_tables(&results));
    say!(text, "\ntargets:");
    text.print(&vmspace_bench::judge::render(&results.targets));
    let verdict = common::indicative_if(vmspace_bench::judge::verdict(&results.targets), args.quick);
    say!(text, "\nverdict: {}", verdict.line);
    json.write(&results.set.clone().with_verdict(verdict.clone()))?;
    if let JsonOut::File(p) = &json {
        say!(text, "JSON written to {}", p.display());
    }
    Ok(Status::of(&verdict))
}

/// One benchmark step done. After Ctrl-C the bar stops moving: the benchmark itself stops at its next step
/// (its `stop` is [`vmspace_linux::child::interrupted`]) and returns what it measured, which [`run`] prints
/// before it exits with status 130.
fn step_or_stop(bar: &mut Progress, what: &str) {
    if !vmspace_linux::child::interrupted() {
        bar.step(what);
    }
}

/// Applies `--repeats` and `--batch-ms` (shared by every benchmark that times batches).
fn apply_timer_args(
    timer: &mut vmspace_bench::measure::Timer,
    repeats: Option<usize>,
    batch_ms: Option<u64>,
) -> Result<()> {
    if let Some(r) = repeats {
        if r == 0 {
            return Err(usage("--repeats must be at least 1"));
        }
        timer.repeats = r;
    }
    if let Some(ms) = batch_ms {
        if ms == 0 {
            return Err(usage("--batch-ms must be at least 1"));
        }
        timer.batch = Duration::from_millis(ms);
    }
    Ok(())
}
