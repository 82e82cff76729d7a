//! Benchmarks: workloads x targets (vmspace's structures in each mode, peer data structures, the live kernel),
//! one JSON schema for every result, terminal tables and SVG plots.
//!
//! Benchmarks measure; they assert nothing. Tests check behaviour and live beside the code they test.
