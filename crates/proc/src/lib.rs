//! The `/proc` text formats: `/proc/PID/maps`, `smaps` and `smaps_rollup` records, rendered byte-identical to
//! Linux 6.18 (`fs/proc/task_mmu.c`) and parsed back, plus the `PROCMAP_QUERY` request/answer model.
//!
//! This crate is pure formatting: it knows nothing of locks or syscalls, and its only vmspace dependency is
//! `abi` (`VmFlags` and its smaps mnemonics, `FileArea`); `linux-raw-sys` gives it `struct procmap_query`,
//! whose one layout [`query`] holds. The engine (`mm`) renders through it; the live-kernel side (`linux`)
//! parses the kernel's output with it, so that both sides compare records, not strings that merely look alike.
//! For the same reason it holds [`layout`], an address space described as plain data (what `/proc` shows of
//! it), which the live-kernel side reads from a process and the engine imports.
//!
//! ```
//! use vmspace_proc::query::{PROCMAP_QUERY_COVERING_OR_NEXT_VMA, PROCMAP_QUERY_VMA_WRITABLE, errno};
//! use vmspace_proc::{MapsLine, MapsName, QueryRequest, parse_maps, render_maps};
//!
//! // A maps text parses into records and renders back byte for byte (the kernel's padding included).
//! let text = "\
//! 00400000-00452000 r-xp 00000000 08:02 173521                             /usr/bin/dbus-daemon
//! 7ffd6a1f0000-7ffd6a211000 rw-p 00000000 00:00 0                          [stack]
//! ";
//! let lines = parse_maps(text).expect("the kernel's own format");
//! assert_eq!((lines[0].start, lines[0].end, lines[0].inode), (0x40_0000, 0x45_2000, 173_521));
//! assert!(lines[0].perms.exec && !lines[0].perms.write);
//! assert_eq!(lines[1].name, Some(MapsName::Stack));
//! assert_eq!(render_maps(&lines), text);
//! // A line without a name ends in a space after the inode, as the kernel prints it.
//! let one: MapsLine = "7f0000000000-7f0000001000 ---p 00000000 00:00 0 ".parse().unwrap();
//! assert_eq!(one.end - one.start, 4096);
//!
//! // PROCMAP_QUERY's rules as values: the argument checks, then the match against a VMA
//! // (start, end, permission bits, file-backed). Without COVERING_OR_NEXT the VMA must contain the address.
//! let q = QueryRequest::new(0, 0x1000).args().expect("valid arguments");
//! assert_eq!(q.matches(0x1000, 0x3000, 0b011, false), Ok(true));
//! assert_eq!(q.matches(0x2000, 0x3000, 0b011, false), Err(errno::ENOENT));
//! // With it, a VMA the filters reject sends the search on to the next one.
//! let next = QueryRequest::new(PROCMAP_QUERY_COVERING_OR_NEXT_VMA | PROCMAP_QUERY_VMA_WRITABLE, 0x1000);
//! assert_eq!(next.args().unwrap().matches(0x1000, 0x2000, 0b001, false), Ok(false));
//! assert_eq!(QueryRequest::new(0x40, 0).args().unwrap_err(), errno::EINVAL, "an unknown flag");
//! ```

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
