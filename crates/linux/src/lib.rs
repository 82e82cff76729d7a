//! The live kernel: real syscalls in child processes, `/proc` files, `PROCMAP_QUERY`, the host's configuration,
//! the seeds' experiments run natively (`vmspace kernel ...`) and the op-script runner.
//!
//! This is the only crate that issues memory-management syscalls against the host. It depends on `proc` and
//! `script` for formats; never on the engine.
