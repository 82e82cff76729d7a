//! `vmspace kernel ...`: the probe's subcommands (the `linux` crate's experiments on the host's kernel).

use clap::Subcommand;

/// The probe subcommands.
#[derive(Debug, Subcommand)]
pub enum KernelCmd {}

/// Runs one probe subcommand.
pub fn run(cmd: KernelCmd) -> anyhow::Result<()> {
    match cmd {}
}
