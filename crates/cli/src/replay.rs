//! `vmspace replay` and `vmspace diff`: op scripts on the engine and on the live kernel.

use clap::Args;

/// Arguments of `vmspace replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {}

/// Arguments of `vmspace diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {}

/// Runs `vmspace replay`.
pub fn run_replay(_args: ReplayArgs) -> anyhow::Result<()> {
    anyhow::bail!("vmspace replay is not built yet")
}

/// Runs `vmspace diff`.
pub fn run_diff(_args: DiffArgs) -> anyhow::Result<()> {
    anyhow::bail!("vmspace diff is not built yet")
}
