//! `vmspace`: the command line of vmspace. Each subcommand lives in its own module and only parses arguments,
//! calls into a library crate, and prints; logic that a test would want lives in the library crates.

use clap::{Parser, Subcommand};

mod bench;
mod kernel;
mod replay;

/// vmspace: Linux's scalable address-space management as a user-space engine, with the instruments to measure
/// it and to hold it against the real kernel.
#[derive(Debug, Parser)]
#[command(name = "vmspace", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks: vmspace against peer data structures and the live kernel, side by side.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// The probe: the seeds' experiments and checks on the host's real kernel.
    #[command(subcommand)]
    Kernel(kernel::KernelCmd),
    /// Run an op script on the engine (or, with --kernel, on the live kernel) and print every result.
    Replay(replay::ReplayArgs),
    /// Run an op script on the engine and on the live kernel and show the first difference.
    Diff(replay::DiffArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
        Command::Kernel(cmd) => kernel::run(cmd),
        Command::Replay(args) => replay::run_replay(args),
        Command::Diff(args) => replay::run_diff(args),
    }
}
