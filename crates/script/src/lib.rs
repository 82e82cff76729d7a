//! Op scripts: the one format that drives the engine (`vmspace replay`), the live kernel (`vmspace replay
//! --kernel`) and the differential tests that compare them (`../shared/DESIGN.md`, "Op scripts").
//!
//! This crate owns the syntax (parser with line-numbered errors), the canonical result lines
//! (`L<line> <op> = <value>`, `MAPS` ... `END`), the comparison of two runs, and the seeded random generator.
//! It executes nothing: runners live in `replay` (engine) and `linux` (kernel). It depends only on `proc` and
//! `abi` (the errno it prints and the typed call arguments: [`Prot`], [`MapFlags`], [`MremapFlags`],
//! [`Advice`], re-exported here for targets' convenience).

pub mod ast;
pub mod generate;
pub mod minimise;
pub mod output;
pub mod run;

pub use ast::{ADVICE_NAMES, Line, MMAP_FLAG_NAMES, MREMAP_FLAG_NAMES, Op, ParseError, Script};
pub use generate::{GenConfig, generate};
pub use minimise::minimise;
pub use output::{Arena, Difference, Entry, Output, Value, compare};
pub use run::{Target, canonical_maps, run, run_in};
pub use vmspace_abi::{Advice, Errno, MapFlags, MremapFlags, Prot};
