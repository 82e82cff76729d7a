//! The live kernel: real syscalls in child processes, `/proc` files, `PROCMAP_QUERY`, the host's configuration,
//! the kernel threads' experiments (docs/SOURCES.md) run natively (`vmspace kernel ...`) and the op-script runner.
//!
//! This is the only crate that issues memory-management syscalls against the host for the lab (`bench`'s kernel
//! side calls [`sys`]); the one exception is the engine's own allocator memory (`vmspace_rcu::chunk`, below every
//! crate: ARCHITECTURE.md). It depends on `proc` and `script` for formats; never on the engine.
//!
//! Map of the probe (`vmspace kernel ...`):
//! * foundations: [`sys`] (checked syscall wrappers), [`uaccess`] (CPU accesses that survive their faults, for
//!   the op-script runner), [`child`] (forked children that never outlive their
//!   command, Ctrl-C handling, shared memory words), [`placement`] (explicit CPU layouts), [`hostinfo`] (the
//!   host's kernel and machine), [`procmap_query`] (the PROCMAP_QUERY ioctl), [`maps`] (maps lines, page-sized
//!   reads), [`procfs`] (a live process's address space read into the description the engine imports);
//! * results: written in the shared format of the `vmspace-results` crate (reports, statistics, tables);
//!   [`args`] (durations and lists on the command line);
//! * experiments: [`contention`] (proc-vs-map; [`talk`]: the LPC 2021 talk's table over it), [`race`] (the proc-maps-race checks), [`faults`] (page faults per
//!   second per thread), [`fork`] (fork rate against VMA count).

pub mod args;
pub mod child;
pub mod contention;
pub mod faults;
pub mod fork;
pub mod hostinfo;
pub mod maps;
pub mod placement;
pub mod procfs;
pub mod procmap_query;
pub mod race;
pub mod reader_cost;
pub mod replay;
pub mod shadow;
pub mod sys;
pub mod talk;
pub mod uaccess;
