//! The `/proc` text formats: `/proc/PID/maps`, `smaps` and `smaps_rollup` records, rendered byte-identical to
//! Linux 6.18 (`fs/proc/task_mmu.c`) and parsed back, plus the `PROCMAP_QUERY` request/answer model.
//!
//! This crate is pure formatting: it knows nothing of locks or syscalls, and its only vmspace dependency is
//! `abi` (`VmFlags` and its smaps mnemonics, `FileArea`). The engine (`mm`) renders through it; the
//! live-kernel side (`linux`) parses the kernel's output with it, so that both sides compare records, not
//! strings that merely look alike. For the same reason it holds [`layout`], an address space described as
//! plain data (what `/proc` shows of it), which the live-kernel side reads from a process and the engine
//! imports.

pub mod layout;
pub mod maps;
pub mod query;
pub mod smaps;

pub use maps::{MapsLine, MapsName, MapsNameRef, MapsParseError, PAD_COLUMN, Perms, parse_maps, render_maps};
pub use query::{QueryAnswer, QueryArgs, QueryRequest};
pub use smaps::{
    MemStats, MemStatsAccumulator, PSS_SHIFT, SmapsRecord, SmapsRollup, VmFlagsLine, parse_smaps,
    render_smaps,
};
