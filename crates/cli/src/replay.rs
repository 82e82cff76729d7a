//! `vmspace replay` and `vmspace diff`: op scripts on the engine and on the live kernel.
//!
//! * `vmspace replay FILE` runs the script on the engine and prints the canonical output
//!   (`vmspace_script::output`): one `L<line> <op> = <value>` per call, `MAPS` ... `END` blocks.
//! * `vmspace replay --kernel FILE` runs it on the live kernel (`vmspace_linux::replay`, a forked child).
//! * `vmspace replay --generate SEED [--calls N] [--fork]` prints a generated script instead of running one.
//! * `vmspace diff FILE` runs both and prints the first difference with context; exit status 1 when they
//!   differ. `vmspace diff --seeds A..B [--calls N]` does the same for every generated script of the seed range
//!   (the differential gate): a differing script is minimised (delta debugging) and saved as
//!   `<out-dir>/diff-seed-<S>.script`; the run stops there unless `--keep-going`.
//!
//! * `--headroom N` (replay and diff) runs at the edge of `vm.max_map_count`: the kernel child first maps filler
//!   VMAs until only N more fit under the real sysctl, and the engine runs with `max_map_count = N`. Mappings
//!   the script places outside the arena land among the runner's own and may merge with them, which the engine
//!   cannot see: compare such scripts only up to that call.
//!
//! Parse errors name the line and the reason; exit status 2 for unusable input (clap's convention).

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use vmspace_mm::MmConfig;
use vmspace_replay::EngineTarget;
use vmspace_script::{Arena, GenConfig, Output, Script, compare, generate, minimise, run_in};

/// Arguments of `vmspace replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The op script (format: DESIGN.md "Op scripts"). Not used with --generate.
    #[arg(required_unless_present = "generate")]
    file: Option<PathBuf>,
    /// Run on the live kernel (in a child process) instead of the engine.
    #[arg(long)]
    kernel: bool,
    /// Print the script generated from this seed instead of running a file.
    #[arg(long, value_name = "SEED", conflicts_with_all = ["file", "kernel"])]
    generate: Option<u64>,
    /// Calls in a generated script.
    #[arg(long, default_value_t = 80, requires = "generate")]
    calls: usize,
    /// Let generated scripts fork.
    #[arg(long, requires = "generate")]
    fork: bool,
    /// Pages of the arena that generated calls aim at.
    #[arg(long, default_value_t = 64, requires = "generate")]
    grid_pages: u64,
    /// Arena base address (hex with 0x, or decimal); maps lines outside it are not shown.
    #[arg(long, value_parser = parse_u64, default_value = "0x200000000000")]
    arena: u64,
    /// Run N VMAs short of vm.max_map_count (kernel: filler VMAs; engine: max_map_count = N).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "generate")]
    headroom: Option<u64>,
}

/// Arguments of `vmspace diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The op script to run on both sides.
    #[arg(required_unless_present = "seeds", conflicts_with = "seeds")]
    file: Option<PathBuf>,
    /// Instead of a file, a range of generator seeds `A..B` (B exclusive).
    #[arg(long, value_name = "A..B")]
    seeds: Option<String>,
    /// Calls per generated script.
    #[arg(long, default_value_t = 60)]
    calls: usize,
    /// Let generated scripts fork.
    #[arg(long)]
    fork: bool,
    /// Pages of the arena that generated calls aim at (small: calls interact more).
    #[arg(long, default_value_t = 64)]
    grid_pages: u64,
    /// Directory for the minimised differing scripts (`diff-seed-<S>.script`).
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
    /// Continue after a difference (all differing seeds are minimised and saved; exit status 1 at the end).
    #[arg(long)]
    keep_going: bool,
    /// Arena base address.
    #[arg(long, value_parser = parse_u64, default_value = "0x200000000000")]
    arena: u64,
    /// Run N VMAs short of vm.max_map_count (kernel: filler VMAs; engine: max_map_count = N).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    headroom: Option<u64>,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    vmspace_script::ast::parse_num(s)
}

fn arena(base: u64) -> Arena {
    Arena { base, ..Arena::default() }
}

fn load(path: &PathBuf) -> Result<Script> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Script::parse(&text).with_context(|| format!("{}: bad script", path.display()))
}

/// Runs a script on the engine, configured like the host (mmap_min_addr, max_map_count, anonymous VMA names,
/// ...), as the semantics contract requires for comparisons with the live kernel; with a headroom, its
/// `max_map_count` is the headroom.
fn run_engine(script: &Script, arena: Arena, headroom: Option<u64>) -> Result<Output> {
    let mut cfg = MmConfig::host();
    if let Some(h) = headroom {
        cfg.max_map_count = h;
    }
    let mut t = EngineTarget::new(cfg);
    Ok(run_in(script, &mut t, arena))
}

fn run_kernel(script: &Script, arena: Arena, headroom: Option<u64>) -> Result<Output> {
    let opts = vmspace_linux::replay::ReplayOptions { arena, map_count_headroom: headroom };
    Ok(vmspace_linux::replay::replay_kernel_with(script, opts)?)
}

/// Runs `vmspace replay`.
pub fn run_replay(args: ReplayArgs) -> Result<()> {
    if let Some(seed) = args.generate {
        let cfg = GenConfig {
            calls: args.calls,
            fork: args.fork,
            arena: arena(args.arena),
            grid_pages: args.grid_pages,
        };
        print!("{}", generate(seed, &cfg).to_text());
        return Ok(());
    }
    let Some(path) = &args.file else { bail!("no script given") };
    let script = load(path)?;
    let out = if args.kernel {
        run_kernel(&script, arena(args.arena), args.headroom)?
    } else {
        run_engine(&script, arena(args.arena), args.headroom)?
    };
    print!("{}", out.render());
    Ok(())
}

/// Runs one script on both sides; `Some(difference text)` when they differ.
fn diff_one(script: &Script, arena: Arena, headroom: Option<u64>) -> Result<Option<String>> {
    let engine = run_engine(script, arena, headroom)?;
    let kernel = run_kernel(script, arena, headroom)?;
    Ok(compare(&engine, &kernel, arena, ("engine", "kernel")).map(|d| d.to_string()))
}

fn parse_range(s: &str) -> Result<(u64, u64)> {
    let (a, b) = s.split_once("..").context("--seeds: expected A..B")?;
    let a = parse_u64(a).map_err(anyhow::Error::msg)?;
    let b = parse_u64(b).map_err(anyhow::Error::msg)?;
    if a >= b {
        bail!("--seeds {s}: empty range");
    }
    Ok((a, b))
}

/// Runs `vmspace diff`.
pub fn run_diff(args: DiffArgs) -> Result<()> {
    let arena = arena(args.arena);
    let headroom = args.headroom;
    if let Some(path) = &args.file {
        let script = load(path)?;
        if let Some(d) = diff_one(&script, arena, headroom)? {
            println!("{}: engine and kernel differ\n{d}", path.display());
            std::process::exit(1);
        }
        println!("{}: engine and kernel agree ({} ops)", path.display(), script.lines.len());
        return Ok(());
    }
    let (a, b) = parse_range(args.seeds.as_deref().unwrap_or_default())?;
    let cfg = GenConfig { calls: args.calls, fork: args.fork, arena, grid_pages: args.grid_pages };
    let mut differing = Vec::new();
    for seed in a..b {
        let script = generate(seed, &cfg);
        if diff_one(&script, arena, headroom)?.is_none() {
            continue;
        }
        eprintln!("seed {seed}: engine and kernel differ; minimising ...");
        let small = minimise(&script, |s| matches!(diff_one(s, arena, headroom), Ok(Some(_))));
        let d = diff_one(&small, arena, headroom)?.unwrap_or_default();
        let save = args.out_dir.join(format!("diff-seed-{seed}.script"));
        let text = format!("# generated seed {seed}, {} calls, minimised\n{}", args.calls, small.to_text());
        std::fs::write(&save, text).with_context(|| format!("writing {}", save.display()))?;
        println!("seed {seed}: engine and kernel differ (minimised script saved to {})", save.display());
        println!("{}", small.to_text().trim_end());
        println!("{d}\n");
        differing.push(seed);
        if !args.keep_going {
            break;
        }
    }
    if !differing.is_empty() {
        println!("differing seeds: {differing:?}");
        std::process::exit(1);
    }
    println!("seeds {a}..{b}: {} scripts of {} calls, engine and kernel agree", b - a, args.calls);
    Ok(())
}
