//! Op scripts: the one format that drives the engine (`vmspace replay`), the live kernel (`vmspace replay
//! --kernel`) and the differential tests that compare them (the grammar is in [`ast`]).
//!
//! ```
//! use vmspace_script::{Advice, MapFlags, Op, Prot, Script};
//!
//! let s = Script::parse(
//!     "file f 0x2000\n\
//!      mmap 0x200000000000 0x2000 r-x private|fixed fd=f off=0   # a file mapping\n\
//!      madvise 0x200000000000 0x1000 14                         # raw advice: MADV_HUGEPAGE\n\
//!      mlock2 0x200000000000 0x1000 onfault\n\
//!      pkey_alloc 0 disable_write\n\
//!      maps\n",
//! )?;
//! let Op::Mmap { prot, flags, .. } = &s.lines[1].op else { unreachable!() };
//! assert_eq!((*prot, *flags), (Prot::RX, MapFlags::PRIVATE | MapFlags::FIXED));
//! assert_eq!(s.lines[2].op, Op::Madvise { addr: 0x2000_0000_0000, len: 0x1000, advice: Advice::HUGEPAGE });
//! assert_eq!(s.lines[4].op, Op::PkeyAlloc { flags: 0, rights: 2 });
//! // The canonical text parses back to the same ops, with names for what has one.
//! assert_eq!(Script::parse(&s.to_text())?.to_text(), s.to_text());
//! assert!(s.to_text().contains("madvise 0x200000000000 0x1000 hugepage\n"));
//! # Ok::<(), vmspace_script::ParseError>(())
//! ```
//!
//! This crate owns the syntax (parser with line-numbered errors), the canonical result lines
//! (`L<line> <op> = <value>`, `MAPS` ... `END`), the comparison of two runs, and the seeded random generator.
//! It executes nothing: runners live in `replay` (engine) and `linux` (kernel). It depends only on `proc` and
//! `abi` (the errno it prints and the typed call arguments: [`Prot`], [`MapFlags`], [`MremapFlags`],
//! [`Advice`], and [`TASK_SIZE`], re-exported here for targets' convenience); the flags the ABI crate has no
//! type for (mlock2, mlockall, msync, mseal, pkey_alloc) are raw integers of the syscall's argument width.

pub mod ast;
pub mod generate;
pub mod hash;
pub mod minimise;
pub mod output;
pub mod run;

pub use ast::{
    ADVICE_NAMES, Fd, Line, MCL_FLAG_NAMES, MLOCK2_FLAG_NAMES, MMAP_FLAG_NAMES, MREMAP_FLAG_NAMES,
    MSYNC_FLAG_NAMES, Op, PKEY_RIGHTS_NAMES, PROT_FLAG_NAMES, ParseError, QUERY_DEFAULT_NAME,
    QUERY_DEFAULT_SIZE, QUERY_FLAG_NAMES, Script,
};
pub use generate::{Families, GenConfig, generate};
pub use hash::{ContentHash, content_hash};
pub use minimise::minimise;
pub use output::{Arena, Difference, Entry, Output, Value, compare};
pub use run::{
    CallError, Observed, Outcome, Target, canonical_maps, canonical_query, canonical_smaps, run, run_in,
    value_of,
};
pub use vmspace_abi::{Advice, Errno, MapFlags, MremapFlags, Prot, TASK_SIZE};
pub use vmspace_proc::{QueryAnswer, QueryRequest};
