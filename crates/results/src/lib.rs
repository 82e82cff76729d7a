//! The result format every vmspace command shares: the JSON report schema, statistics and terminal tables.
//!
//! Every command that measures or checks something (`vmspace bench ...`, `vmspace kernel ...`, `vmspace replay`,
//! `vmspace diff`) prints a table for people and, with `--json FILE`, writes one [`report::ReportSet`] (schema
//! [`report::SCHEMA`], documented in BENCHMARKS.md "Result format and exit statuses"). This crate owns that shape so that the
//! producers (the probe in `vmspace-linux`, the benchmarks in `vmspace-bench`, the CLI) and any consumer agree on
//! it without depending on each other.
//!
//! - [`host`]: the machine a result was measured on ([`host::HostInfo`]; gathered by `vmspace_linux::hostinfo`);
//! - [`provenance`]: the build a result came from (commit, dirty tree, profile, compiler) and the CPU it ran on,
//!   which every set a command writes records;
//! - [`report`]: the versioned JSON shape (report sets, reports, runs, placement, verdicts);
//! - [`stats`]: latency histograms per run and min/median/max summaries across runs;
//! - [`table`]: plain-text terminal tables and number formats.

pub mod host;
pub mod provenance;
pub mod report;
pub mod stats;
pub mod table;
