//! `vmspace bench ...`: argument parsing and printing for the benchmarks in the `bench` crate.

use clap::Subcommand;

/// The benchmark subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {}

/// Runs one benchmark subcommand.
pub fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {}
}
