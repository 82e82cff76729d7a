//! The live kernel: real syscalls in child processes, `/proc` files, `PROCMAP_QUERY`, the host's configuration,
//! the seeds' experiments run natively (`vmspace kernel ...`) and the op-script runner.
//!
//! This is the only crate that issues memory-management syscalls against the host. It depends on `proc` and
//! `script` for formats; never on the engine.

pub mod args;
pub mod child;
pub mod contention;
pub mod faults;
pub mod fork;
pub mod hostinfo;
pub mod maps;
pub mod placement;
pub mod procmap_query;
pub mod race;
pub mod replay;
pub mod report;
pub mod stats;
pub mod sys;
pub mod table;
