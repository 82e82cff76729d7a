//! `vmspace bench ...`: argument parsing and printing for the benchmarks in the `bench` crate.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::Write;
use std::time::Duration;
use vmspace_bench::tree::{Target, TreeConfig, render_table, run as run_tree};

/// The benchmark subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Range trees: vmspace's maple tree against BTreeMap, RwLock<BTreeMap>, ArcSwap<BTreeMap>, scc TreeIndex and
    /// crossbeam SkipMap, on the kernel's benchmark shapes and at scale (issue 2).
    Tree(TreeArgs),
    /// The address-space engine against the live kernel: mmap+munmap pairs per second, per-VMA-lock vs
    /// mmap-lock lookups with 1 and 2 threads, bytes per VMA (issue 4).
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
    /// Write the results as JSON to FILE (`-` or no value: standard output, and the table goes to stderr).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<String>,
    /// Write the results as JSON to FILE (same as `--json FILE`).
    #[arg(long, value_name = "FILE")]
    json_file: Option<String>,
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
    /// Write the results as JSON to FILE (`-` or no value: standard output, and the table goes to stderr).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<String>,
    /// Also draw lookup time against n per structure as an SVG plot into FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
    /// Seed of the random layouts, addresses and orders.
    #[arg(long)]
    seed: Option<u64>,
}

/// Runs one benchmark subcommand.
pub fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Tree(args) => tree(args),
        BenchCmd::Mm(args) => mm(args),
    }
}

fn tree(args: TreeArgs) -> anyhow::Result<()> {
    let sizes_given = std::env::args().any(|a| a == "--sizes" || a.starts_with("--sizes="));
    let mut cfg = if args.quick { TreeConfig::quick() } else { TreeConfig::full() };
    if sizes_given || !args.quick {
        cfg.sizes = args.sizes.clone();
    }
    if cfg.sizes.is_empty() || cfg.sizes.contains(&0) {
        bail!("--sizes needs at least one size, and every size must be at least 1");
    }
    if let Some(list) = &args.targets {
        let mut targets = Vec::new();
        for id in list {
            match Target::parse(id) {
                Some(t) if !targets.contains(&t) => targets.push(t),
                Some(_) => {}
                None => bail!(
                    "unknown target {id:?}; known: {}",
                    Target::ALL.iter().map(|t| t.id()).collect::<Vec<_>>().join(", ")
                ),
            }
        }
        if targets.is_empty() {
            bail!("--targets is empty");
        }
        targets.sort();
        cfg.targets = targets;
    }
    apply_timer_args(&mut cfg.timer, args.repeats, args.batch_ms)?;
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    let command =
        std::iter::once("vmspace".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");

    let bar = ProgressBar::with_draw_target(Some(cfg.steps()), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .context("progress template")?
            .progress_chars("=> "),
    );
    let mut progress = |what: &str| {
        bar.set_message(what.to_string());
        bar.inc(1);
    };
    let results = run_tree(&cfg, &mut progress, &command);
    bar.finish_and_clear();

    let to_stdout = args.json.as_deref() == Some("-");
    let mut text = String::new();
    text.push_str(&format!(
        "vmspace bench tree: {}\n",
        results.set.reports.first().map_or(String::new(), |r| r.host.one_line())
    ));
    text.push_str(&format!("placement: {}\n", results.placement));
    text.push_str(&format!(
        "method: median of {} batches of ~{} ms per cell; (x) = ratio to BTreeMap in this run; n/a = not applicable\n\n",
        cfg.timer.repeats,
        cfg.timer.batch.as_millis()
    ));
    text.push_str(&render_table(&results, &cfg.targets));
    if to_stdout {
        eprint!("{text}");
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &results.set).context("writing JSON to stdout")?;
        writeln!(out)?;
    } else {
        print!("{text}");
        if let Some(path) = &args.json {
            let file = std::fs::File::create(path).with_context(|| format!("creating {path}"))?;
            serde_json::to_writer_pretty(std::io::BufWriter::new(file), &results.set)
                .with_context(|| format!("writing {path}"))?;
            println!("\nJSON written to {path}");
        }
    }
    if let Some(path) = &args.svg {
        vmspace_bench::plot::lookup_vs_n(&results, path)?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(())
}

fn mm(args: MmArgs) -> anyhow::Result<()> {
    use vmspace_bench::mm as bench_mm;
    let mut cfg = if args.quick { bench_mm::MmBenchConfig::quick() } else { bench_mm::MmBenchConfig::full() };
    apply_timer_args(&mut cfg.timer, args.repeats, args.batch_ms)?;
    let command =
        std::iter::once("vmspace".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let bar = ProgressBar::with_draw_target(Some(bench_mm::steps(&cfg)), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .context("progress template")?
            .progress_chars("=> "),
    );
    let mut progress = |what: &str| {
        bar.set_message(what.to_string());
        bar.inc(1);
    };
    let results = bench_mm::run(&cfg, &mut progress, &command).map_err(|e| anyhow::anyhow!(e))?;
    bar.finish_and_clear();

    let json_path = args.json_file.clone().or(args.json.clone());
    let to_stdout = json_path.as_deref() == Some("-");
    let mut text = String::new();
    text.push_str(&format!(
        "vmspace bench mm: {}\n",
        results.set.reports.first().map_or(String::new(), |r| r.host.one_line())
    ));
    text.push_str(&format!("placement: {}\n", results.placement));
    text.push_str(&format!(
        "method: median of {} batches of ~{} ms per cell\n\n",
        cfg.timer.repeats,
        cfg.timer.batch.as_millis()
    ));
    text.push_str(&bench_mm::render_table(&results));
    if to_stdout {
        eprint!("{text}");
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &results.set).context("writing JSON to stdout")?;
        writeln!(out)?;
    } else {
        print!("{text}");
        if let Some(path) = &json_path {
            let file = std::fs::File::create(path).with_context(|| format!("creating {path}"))?;
            serde_json::to_writer_pretty(std::io::BufWriter::new(file), &results.set)
                .with_context(|| format!("writing {path}"))?;
            println!("\nJSON written to {path}");
        }
    }
    Ok(())
}

/// Applies `--repeats` and `--batch-ms` (shared by every benchmark that times batches).
fn apply_timer_args(
    timer: &mut vmspace_bench::measure::Timer,
    repeats: Option<usize>,
    batch_ms: Option<u64>,
) -> anyhow::Result<()> {
    if let Some(r) = repeats {
        if r == 0 {
            bail!("--repeats must be at least 1");
        }
        timer.repeats = r;
    }
    if let Some(ms) = batch_ms {
        if ms == 0 {
            bail!("--batch-ms must be at least 1");
        }
        timer.batch = Duration::from_millis(ms);
    }
    Ok(())
}
