//! Benchmarks: workloads x targets (vmspace's structures in each mode, peer data structures, the live kernel),
//! one JSON schema for every result (`vmspace_results::report`), terminal tables and SVG plots.
//!
//! Benchmarks measure; they assert nothing. Tests check behaviour and live beside the code they test.
//!
//! - [`rangemap`]: the [`rangemap::RangeMap`] trait and its implementations (vmspace's maple tree and the peers);
//! - [`layout`]: the kernel's benchmark shapes and VMA-like layouts at scale;
//! - [`measure`]: batch timing, medians, CPU placement;
//! - [`tree`]: `vmspace bench tree`;
//! - [`mm`]: `vmspace bench mm` (the address-space engine against the live kernel);
//! - [`faults`]: `vmspace bench faults` (page faults per second, engine modes beside the live kernel);
//! - [`fork`]: `vmspace bench fork` (fork against the VMA count, tree copy against re-insertion, beside the
//!   live kernel; bytes per VMA and page-table bytes per page);
//! - [`contention`]: `vmspace bench contention` (the proc-vs-map grid on the engine's reader modes beside the
//!   live kernel) and [`readers`] (the readers' throughput);
//! - [`race`]: the proc-maps-race checks on the engine (`vmspace race --engine`);
//! - [`reader_cost`]: the engine's half of `vmspace kernel reader-cost` (a live process's address space
//!   imported and read in each reader mode beside an engine mapper);
//! - [`judge`]: targets judged by a benchmark, and their verdict;
//! - [`plot`]: SVG plots of the results.

pub mod contention;
pub mod faults;
pub mod fork;
pub mod judge;
pub mod layout;
pub mod measure;
pub mod mm;
pub mod plot;
pub mod race;
pub mod rangemap;
pub mod reader_cost;
pub mod readers;
pub mod tree;
