//! `vmspace bench ...`: argument parsing and printing for the benchmarks in the `bench` crate.
//!
//! Output follows the shared convention of [`crate::common`] (`--json FILE`, `-` for standard output). `bench
//! tree` judges vmspace's maple tree against its targets (ratios to `BTreeMap`, see BENCHMARKS.md) and closes
//! with a verdict line; exit status 1 when a target was missed.

use crate::common::{self, JsonOut, Progress, Status, Text, usage};
use crate::say;
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use vmspace_bench::tree::{Target, TreeConfig, render_table, run as run_tree};
use vmspace_results::report::Verdict;

/// Memory one entry of the largest layout may take while `bench tree` runs: the layout itself, the structure
/// under test, its copies in the `dup` workload and the lookup addresses, with margin.
const TREE_BYTES_PER_ENTRY: u128 = 512;

/// The benchmark subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Range trees: vmspace's maple tree against BTreeMap, RwLock<BTreeMap>, ArcSwap<BTreeMap>, scc TreeIndex and
    /// crossbeam SkipMap, on the kernel's benchmark shapes (lib/test_maple_tree.c) and at scale; judges the
    /// maple tree's targets (exit status 1 if one is missed).
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Tree(TreeArgs),
    /// The address-space engine against the live kernel: mmap+munmap pairs per second, lookups under the
    /// per-VMA lock and under mmap_lock with 1 and 2 threads, bytes per VMA.
    #[command(after_long_help = common::EXIT_STATUS_HELP)]
    Mm(MmArgs),
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
    /// A short run (sizes 21 and 1000 unless --sizes is given, 1 ms batches, 3 repeats): a smoke test.
    #[arg(long)]
    quick: bool,
    /// Structures to measure (comma-separated): maple, btree, rwlock, arcswap, scc, skipmap.
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Timed batches per measurement (the median is reported).
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
    /// Run even if the largest size would need more memory than this machine has available.
    #[arg(long)]
    force: bool,
}

/// Runs one benchmark subcommand.
///
/// Ctrl-C (or SIGTERM) stops the benchmark at its next step with exit status 130 (a second Ctrl-C at once):
/// the benchmarks own no child process and no file until the end, so there is nothing to clean up.
pub fn run(cmd: BenchCmd) -> Result<Status> {
    vmspace_linux::child::install_interrupt_handler()?;
    match cmd {
        BenchCmd::Tree(args) => tree(args),
        BenchCmd::Mm(args) => mm(args),
    }
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

    let mut bar = Progress::new(cfg.steps());
    let mut progress = |what: &str| step_or_stop(&mut bar, what);
    let results = run_tree(&cfg, &mut progress, &common::command_line());
    bar.finish();

    say!(
        text,
        "vmspace bench tree: {}",
        results.set.reports.first().map_or(String::new(), |r| r.host.one_line())
    );
    say!(text, "placement: {}", results.placement);
    say!(
        text,
        "method: median of {} batches of ~{} ms per cell; (x) = ratio to BTreeMap in this run; n/a = not \
         applicable\n",
        cfg.timer.repeats,
        cfg.timer.batch.as_millis()
    );
    text.print(&render_table(&results, &cfg.targets));
    let judged: Vec<_> = results.verdicts.iter().filter(|v| v.ratio.is_finite()).collect();
    let met = judged.iter().filter(|v| v.met).count() as u64;
    let missed = judged.len() as u64 - met;
    let unmeasured = results.verdicts.len() - judged.len();
    let mut line = format!("verdict: {met} met, {missed} missed");
    if unmeasured > 0 {
        line.push_str(&format!(" ({unmeasured} not measured at these sizes)"));
    }
    let verdict = Verdict::new(met, missed, line.trim_start_matches("verdict: "));
    say!(text, "\n{line}");
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

fn mm(args: MmArgs) -> Result<Status> {
    use vmspace_bench::mm as bench_mm;
    let mut cfg = if args.quick { bench_mm::MmBenchConfig::quick() } else { bench_mm::MmBenchConfig::full() };
    apply_timer_args(&mut cfg.timer, args.repeats, args.batch_ms)?;
    let json = JsonOut::new(args.json.as_deref())?;
    let text = Text::new(&json);
    let mut bar = Progress::new(bench_mm::steps(&cfg));
    let mut progress = |what: &str| step_or_stop(&mut bar, what);
    let results = bench_mm::run(&cfg, &mut progress, &common::command_line()).map_err(anyhow::Error::msg);
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
    json.write(&results.set)?;
    if let JsonOut::File(p) = &json {
        say!(text, "\nJSON written to {}", p.display());
    }
    Ok(Status::Success)
}

/// One benchmark step done; ends the command with status 130 if the user interrupted it.
fn step_or_stop(bar: &mut Progress, what: &str) {
    if vmspace_linux::child::interrupted() {
        bar.finish();
        eprintln!("vmspace: interrupted");
        std::process::exit(130);
    }
    bar.step(what);
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
