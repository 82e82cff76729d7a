//! The engine target: random call sequences on one [`Mm`], with every invariant checked after every call.
//!
//! An input is a configuration word and a list of [`Call`]s, decoded with the `arbitrary` crate. Addresses
//! are drawn mostly as page numbers inside a 64-page arena at [`ARENA`] (with `mmap_base` at its top, the break
//! and the stack inside it, and a 4-page stack guard gap), so that calls land on each other's VMAs; some are
//! unaligned or raw 64-bit values so that the argument checks are exercised too.
//!
//! After every call [`check`] requires:
//! - no panic (the call, [`Mm::validate`], the maps text);
//! - [`Mm::validate`] passes (for a fork, in the parent and in the child);
//! - a failed call leaves the address space unchanged: the VMA list (ranges, flags, page offsets, files,
//!   anon_vmas, names), `locked_vm`, `def_flags` and the guard markers (the `Debug` of [`Mm`]) and the break
//!   are what they were, except where Linux 6.18 itself makes partial progress (`docs/DIVERGENCES.md`,
//!   "Linux's own partial progress"): mprotect, pkey_mprotect, mseal, madvise, munlock and
//!   `PR_SET_VMA_ANON_NAME` over more than one VMA or a hole, or at `max_map_count - 1` (a second split
//!   refused); `mremap` with `MREMAP_FIXED`; munmap, `MAP_FIXED` mmap and mremap refused by a seal (EPERM: the
//!   split at the start stays); a munmap whose end falls inside a hugetlb VMA off a huge-page boundary (EINVAL:
//!   the split at the start stays, so a failed munmap keeps the VMA list up to splits); a `MAP_FIXED` mmap whose file hook refuses after the unmap (`MAP_SYNC` on a
//!   file, `MAP_HUGETLB`: a hole stays); a user-mode fault, which prepares an anon_vma or grows a stack before
//!   the access can still fail, as `do_cow_fault` and `expand_downwards` do (and a range of stores or loads,
//!   whose pages before the failing one were accessed); mlock, mlock2 and mlockall, which
//!   lock (and charge) the range before populating it can fail; and the madvise advice that fault pages in
//!   (`MADV_POPULATE_*`, and `MADV_HWPOISON` / `MADV_SOFT_OFFLINE`, whose GUP lookup of each page faults it in)
//!   or install guard markers, whose failure on a later page keeps the anon_vma, pages or markers before it. A failed GUP access may leave an anon_vma the same way (only the maps must be unchanged).
//!
//! The calls are made in one function, [`apply`], the only code here that knows the `Mm` call signatures.

use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use vmspace_mm::space::{
    Advice, Errno, HugetlbConfig, HugetlbPool, MapFlags, MclFlags, MlockFlags, Mm, MmConfig, MremapFlags,
    MsyncFlags, Overcommit, PAGE_SIZE, PkeyRights, Prot, VmFile,
};
use vmspace_mm::{Access, Memory, MemoryConfig};

/// First address of the arena.
pub const ARENA: u64 = 0x1000_0000;
/// Pages in the arena.
pub const ARENA_PAGES: u64 = 64;

/// An address argument.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Addr {
    /// The start of arena page `n % 64`... or up to 8 pages past the arena's end.
    Page(u8),
    /// Arena page `n % 64` plus a byte offset (usually unaligned).
    Offset(u8, u16),
    /// Any value.
    Raw(u64),
}

impl Addr {
    fn value(self) -> u64 {
        match self {
            Addr::Page(n) => ARENA + u64::from(n % 72) * PAGE_SIZE,
            Addr::Offset(n, o) => ARENA + u64::from(n % 64) * PAGE_SIZE + u64::from(o),
            Addr::Raw(v) => v,
        }
    }
}

/// A length argument.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Len {
    /// `n % 17` pages.
    Pages(u8),
    /// Pages plus a byte remainder.
    Bytes(u8, u16),
    /// Any value.
    Raw(u64),
}

impl Len {
    fn value(self) -> u64 {
        match self {
            Len::Pages(n) => u64::from(n % 17) * PAGE_SIZE,
            Len::Bytes(n, b) => u64::from(n % 17) * PAGE_SIZE + u64::from(b),
            Len::Raw(v) => v,
        }
    }
}

/// One call.
#[derive(Arbitrary, Debug, Clone)]
pub enum Call {
    /// mmap; `flags` bits 0..16 pick `MAP_SHARED PRIVATE FIXED FIXED_NOREPLACE GROWSDOWN POPULATE NORESERVE`,
    /// an unknown bit, then `MAP_DROPPABLE 32BIT LOCKED STACK HUGETLB SYNC HUGE_2MB ABOVE4G`
    /// (`MAP_ANONYMOUS` follows `file`); `file` is (which of two files, offset in pages).
    Mmap {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// `PROT_*` selector: bits 0-3 as they are (read, write, exec, `PROT_SEM`), bit 4 `PROT_GROWSDOWN`, bit 5
        /// `PROT_GROWSUP`, bits 6-7 unknown bits.
        prot: u8,
        /// Flag selector.
        flags: u16,
        /// File and page offset, or anonymous.
        file: Option<(bool, u8)>,
    },
    /// munmap.
    Munmap {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
    },
    /// mprotect.
    Mprotect {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// `PROT_*` selector: bits 0-3 as they are (read, write, exec, `PROT_SEM`), bit 4 `PROT_GROWSDOWN`, bit 5
        /// `PROT_GROWSUP`, bits 6-7 unknown bits.
        prot: u8,
    },
    /// mremap; `flags` bits 0..3 are `MREMAP_MAYMOVE FIXED DONTUNMAP`, bit 3 an unknown flag.
    Mremap {
        /// Old address.
        addr: Addr,
        /// Old length.
        old_len: Len,
        /// New length.
        new_len: Len,
        /// Flag selector.
        flags: u8,
        /// New address.
        new_addr: Addr,
    },
    /// madvise with any advice Linux 6.18 defines (or an unknown one).
    Madvise {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// Advice selector.
        advice: u8,
    },
    /// brk.
    Brk {
        /// The requested break.
        addr: Addr,
    },
    /// fork; keep running in the child or in the parent.
    Fork {
        /// Continue with the child.
        child: bool,
    },
    /// `PR_SET_VMA_ANON_NAME`.
    Name {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// Which name (`None` clears).
        name: Option<u8>,
    },
    /// A user-mode fault.
    Fault {
        /// Address.
        addr: Addr,
        /// Write access.
        write: bool,
    },
    /// A GUP access (what the op-script `touch` does).
    Gup {
        /// Address.
        addr: Addr,
        /// Write access.
        write: bool,
    },
    /// User-mode stores of `byte` over a range (`Mm::fill`: through the MMU, faulting page by page).
    Fill {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// The byte stored.
        byte: u8,
    },
    /// User-mode loads of a range (`Mm::read_chunks`: through the MMU, faulting page by page).
    Read {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
    },
    /// Make an allocation fail after `n` more (or stop injecting).
    InjectAlloc(Option<u8>),
    /// mseal; a non-zero `flags` is passed as 1 (EINVAL).
    Mseal {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// Pass flags 1.
        flags: bool,
    },
    /// pkey_alloc with `flags` and `rights` raw (both mostly small: rights 0..3 are valid).
    PkeyAlloc {
        /// Flags (0 valid).
        flags: u8,
        /// `PKEY_*` rights (bits above 1 invalid).
        rights: u8,
    },
    /// pkey_free.
    PkeyFree {
        /// The key (negative and out-of-range keys included).
        key: i8,
    },
    /// pkey_mprotect.
    PkeyMprotect {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// `PROT_*` selector as for mprotect.
        prot: u8,
        /// The key (-1: mprotect's logic).
        key: i8,
    },
    /// ftruncate of one of the two files.
    Ftruncate {
        /// Which file.
        which: bool,
        /// The new size.
        size: Len,
    },
    /// mlock (`flags` `None`) or mlock2: flag bit 0 `MLOCK_ONFAULT`, bit 1 an unknown bit.
    Mlock {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// mlock2's flag selector, `None` for mlock.
        flags: Option<u8>,
    },
    /// munlock.
    Munlock {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
    },
    /// mlockall: bits 0-2 `MCL_CURRENT FUTURE ONFAULT`, bit 3 an unknown bit; or munlockall (`None`).
    Mlockall(Option<u8>),
    /// msync: bits 0-2 `MS_ASYNC INVALIDATE SYNC`, bit 3 an unknown bit.
    Msync {
        /// Address.
        addr: Addr,
        /// Length.
        len: Len,
        /// Flag selector.
        flags: u8,
    },
}

/// A whole input: a configuration selector and the calls.
#[derive(Arbitrary, Debug)]
pub struct Input {
    /// Bit 0: `max_map_count` small (`6 + (cfg >> 4 & 15)`); bit 1: anonymous VMA names on; bit 2: a 32-page
    /// overcommit limit; bit 3: root (CAP_SYS_RAWIO, CAP_SYS_ADMIN); bit 8: protection keys (PKU); bit 9: a
    /// 2 MiB hugetlb pool of 3 pages; bit 10: no CAP_IPC_LOCK and a 16-page `RLIMIT_MEMLOCK`.
    pub cfg: u16,
    /// The calls.
    pub calls: Vec<Call>,
}

/// The configuration an input selects.
pub fn config(sel: u16) -> MmConfig {
    MmConfig {
        max_map_count: if sel & 1 != 0 { 6 + u64::from((sel >> 4) & 15) } else { 65530 },
        anon_vma_name: sel & 2 != 0,
        overcommit: Overcommit::Guess { limit_pages: if sel & 4 != 0 { 32 } else { 1 << 22 } },
        cap_sys_rawio: sel & 8 != 0,
        cap_sys_admin: sel & 8 != 0,
        pku: sel & 0x100 != 0,
        hugetlb: HugetlbConfig {
            default_size: 2 << 20,
            pools: vec![HugetlbPool {
                size: 2 << 20,
                available: if sel & 0x200 != 0 { 3 } else { 0 },
                dev_minor: 0,
            }],
        },
        memlock_rlimit: if sel & 0x400 != 0 { 16 * PAGE_SIZE } else { 8 << 20 },
        cap_ipc_lock: sel & 0x400 == 0,
        // The engine only: the memory-failure advice are never run on a live kernel.
        memory_failure: true,
        stack_guard_gap: 4 * PAGE_SIZE,
        mmap_base: ARENA + ARENA_PAGES * PAGE_SIZE,
        start_brk: ARENA + 40 * PAGE_SIZE,
        start_stack: ARENA + (ARENA_PAGES - 1) * PAGE_SIZE,
        ..MmConfig::default()
    }
}

/// The model files a mapping can use: 16 pages and 3.5 pages.
pub fn files() -> [Arc<VmFile>; 2] {
    [VmFile::regular("/fuzz/a", 1, 16 * PAGE_SIZE), VmFile::regular("/fuzz/b", 2, 7 * PAGE_SIZE / 2)]
}

const NAMES: [&str; 4] =
    ["heap", "x", "bad$name", "a-very-long-name-that-is-fine-but-longer-than-most-of-the-others"];

/// Makes the call; the only code that knows the `Mm` call signatures (kept small so that an API change is
/// one edit). A fork returns the child.
pub fn apply(mm: &Mm, call: &Call, files: &[Arc<VmFile>; 2]) -> Result<Option<Mm>, Errno> {
    const MMAP_BITS: [u32; 16] = [
        0x01,
        0x02,
        0x10,
        0x10_0000,
        0x100,
        0x8000,
        0x4000,
        0x0200_0000,
        0x08,
        0x40,
        0x2000,
        0x2_0000,
        0x4_0000,
        0x8_0000,
        21 << 26,
        0x80,
    ];
    const MREMAP_BITS: [u32; 4] = [1, 2, 4, 8];
    // Every advice 6.18 defines, and an unknown one.
    const ADVICE: [i32; 28] = [
        0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 100, 101, 102,
        103, 7,
    ];
    let bits = |sel: u16, table: &[u32]| {
        table.iter().enumerate().filter(|(i, _)| sel & (1 << i) != 0).fold(0, |a, (_, b)| a | b)
    };
    // PROT: the low four bits as they are (read, write, exec, PROT_SEM), the next two select PROT_GROWSDOWN and
    // PROT_GROWSUP, the top two stay unknown bits (EINVAL).
    let prot = |p: u8| {
        let high = [(0x10, 0x0100_0000), (0x20, 0x0200_0000)];
        let extra = high.iter().filter(|(sel, _)| p & sel != 0).fold(0, |a, (_, b)| a | b);
        Prot::from_bits_retain(u32::from(p & 0xcf) | extra)
    };
    match *call {
        Call::Mmap { addr, len, prot: p, flags, file } => {
            let mut fl = bits(flags, &MMAP_BITS);
            let f = match file {
                Some((which, pages)) => Some((&files[usize::from(which)], u64::from(pages % 20) * PAGE_SIZE)),
                None => {
                    fl |= 0x20;
                    None
                }
            };
            let (f, off) = match f {
                Some((f, off)) => (Some(f), off),
                None => (None, 0),
            };
            mm.mmap(addr.value(), len.value(), prot(p), MapFlags::from_bits_retain(fl), f, off).map(|_| None)
        }
        Call::Munmap { addr, len } => mm.munmap(addr.value(), len.value()).map(|()| None),
        Call::Mprotect { addr, len, prot: p } => {
            mm.mprotect(addr.value(), len.value(), prot(p)).map(|()| None)
        }
        Call::Mremap { addr, old_len, new_len, flags, new_addr } => mm
            .mremap(
                addr.value(),
                old_len.value(),
                new_len.value(),
                MremapFlags::from_bits_retain(bits(u16::from(flags), &MREMAP_BITS)),
                new_addr.value(),
            )
            .map(|_| None),
        Call::Madvise { addr, len, advice } => mm
            .madvise(addr.value(), len.value(), Advice::from_raw(ADVICE[usize::from(advice) % ADVICE.len()]))
            .map(|()| None),
        Call::Brk { addr } => {
            mm.brk(addr.value());
            Ok(None)
        }
        Call::Fork { .. } => mm.fork().map(Some),
        Call::Name { addr, len, name } => {
            let name = name.map(|n| NAMES[usize::from(n) % NAMES.len()]);
            mm.set_anon_name(addr.value(), len.value(), name).map(|()| None)
        }
        Call::Fault { addr, write } => {
            let access = if write { Access::Write } else { Access::Read };
            mm.fault(addr.value(), access).map(|_| None)
        }
        Call::Gup { addr, write } => mm.gup_access(addr.value(), write).map(|()| None),
        Call::Fill { addr, len, byte } => {
            mm.fill(addr.value(), len.value(), byte).map(|()| None).map_err(|_| Errno::EFAULT)
        }
        Call::Read { addr, len } => {
            mm.read_chunks(addr.value(), len.value(), |_| {}).map(|()| None).map_err(|_| Errno::EFAULT)
        }
        Call::InjectAlloc(n) => {
            mm.inject_alloc_failure(n.map(u64::from));
            Ok(None)
        }
        Call::Mseal { addr, len, flags } => {
            mm.mseal(addr.value(), len.value(), u64::from(flags)).map(|()| None)
        }
        Call::PkeyAlloc { flags, rights } => mm
            .pkey_alloc(u64::from(flags % 4 / 3), PkeyRights::from_bits_retain(u32::from(rights % 6)))
            .map(|_| None),
        Call::PkeyFree { key } => mm.pkey_free(i32::from(key % 20)).map(|()| None),
        Call::PkeyMprotect { addr, len, prot: p, key } => {
            mm.pkey_mprotect(addr.value(), len.value(), prot(p), i32::from(key % 20)).map(|()| None)
        }
        Call::Ftruncate { which, size } => files[usize::from(which)].ftruncate(size.value()).map(|()| None),
        Call::Mlock { addr, len, flags: None } => mm.mlock(addr.value(), len.value()).map(|()| None),
        Call::Mlock { addr, len, flags: Some(f) } => mm
            .mlock2(addr.value(), len.value(), MlockFlags::from_bits_retain(bits(u16::from(f), &[1, 0x40])))
            .map(|()| None),
        Call::Munlock { addr, len } => mm.munlock(addr.value(), len.value()).map(|()| None),
        Call::Mlockall(None) => mm.munlockall().map(|()| None),
        Call::Mlockall(Some(f)) => {
            mm.mlockall(MclFlags::from_bits_retain(bits(u16::from(f), &[1, 2, 4, 0x10]))).map(|()| None)
        }
        Call::Msync { addr, len, flags } => mm
            .msync(
                addr.value(),
                len.value(),
                MsyncFlags::from_bits_retain(bits(u16::from(flags), &[1, 2, 4, 0x20])),
            )
            .map(|()| None),
    }
}

/// The range `[start, start + len)` of a call, when it is one.
fn range(call: &Call) -> Option<(u64, u64)> {
    match *call {
        Call::Mprotect { addr, len, .. }
        | Call::Madvise { addr, len, .. }
        | Call::Name { addr, len, .. }
        | Call::Mseal { addr, len, .. }
        | Call::PkeyMprotect { addr, len, .. }
        | Call::Munlock { addr, len } => Some((addr.value(), len.value())),
        _ => None,
    }
}

/// A failure that Linux itself makes after changing the address space, decided once the errno is known: a
/// seal met by munmap, a `MAP_FIXED` mmap or mremap (EPERM after the start split), and a `MAP_FIXED` mapping
/// whose file hook refuses after the unmap (`MAP_SYNC`, `MAP_HUGETLB`).
fn partial_failure(call: &Call, e: Errno) -> bool {
    match *call {
        Call::Munmap { .. } | Call::Mremap { .. } => e == Errno::EPERM,
        Call::Mmap { flags, .. } => {
            let hook = flags & (1 << 12 | 1 << 13) != 0 && e != Errno::EEXIST;
            flags & 0b1100 != 0 && (e == Errno::EPERM || hook)
        }
        _ => false,
    }
}

/// What a failed call must leave unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unchanged {
    /// The whole VMA list (ranges, flags, offsets, files, anon_vmas, names) and the break.
    All,
    /// Everything but splits: a `MAP_FIXED` mmap over existing VMAs splits them at the range's ends while
    /// gathering them (`vms_gather_munmap_vmas`), before its overcommit check can still fail it, and a munmap
    /// splits the first VMA before a hugetlb VMA at the end refuses its split; the abort does not merge them
    /// back (`vms_abort_munmap_vmas`): the VMA list with adjacent pieces of one split VMA joined must be unchanged
    /// (`fuzz/regressions/engine/mmap-fixed-overcommit-enomem-keeps-splits`,
    /// `scripts/regress/mmap-fixed-enomem-keeps-splits.script`).
    UpToSplits,
    /// What the maps show: a GUP write to a private VMA prepares its anon_vma before the file-size check can
    /// still fail it (`do_cow_fault`: `vmf_anon_prepare` first; `scripts/regress/file-eof-write-fault-prepares-anon-vma.script`).
    Maps,
    /// Nothing: Linux itself makes partial progress (`docs/DIVERGENCES.md`): see the module docs.
    Nothing,
}

/// What this call must leave unchanged if it fails.
fn unchanged_on_failure(mm: &Mm, call: &Call) -> Unchanged {
    match *call {
        Call::Mremap { flags, .. } if flags & 2 != 0 => Unchanged::Nothing,
        // MAP_FIXED is bit 2 of the mmap flag selector.
        Call::Mmap { flags, .. } if flags & 4 != 0 => Unchanged::UpToSplits,
        // munmap splits the VMA at the range's start before it reaches a VMA that refuses its end split (a
        // hugetlb VMA cut off a huge-page boundary: `hugetlb_vm_op_split`, EINVAL), and the abort keeps the start
        // split (`mm/vma.c: vms_gather_munmap_vmas`; `fuzz/regressions/engine/munmap-hugetlb-end-keeps-start-split`,
        // `scripts/regress/munmap-hugetlb-end-keeps-start-split.script`).
        Call::Munmap { .. } => Unchanged::UpToSplits,
        // Accesses fault page by page: the pages before the one that failed were accessed, with their faults'
        // side effects (anon_vmas, stack growth), as on the CPU.
        Call::Fault { .. } | Call::Fill { .. } | Call::Read { .. } => Unchanged::Nothing,
        Call::Mlock { .. } | Call::Mlockall(Some(_)) => Unchanged::Nothing,
        Call::Madvise { advice, .. } if faults_or_guards(advice) => Unchanged::Nothing,
        Call::Gup { .. } => Unchanged::Maps,
        _ => match range(call) {
            None => Unchanged::All,
            Some((start, len)) => {
                let near_limit = mm.map_count() + 2 > mm.config().max_map_count;
                let end = start.saturating_add(len.saturating_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1));
                let one_vma = mm.lookup(start).is_some_and(|v| v.end() >= end);
                if near_limit || !one_vma { Unchanged::Nothing } else { Unchanged::All }
            }
        },
    }
}

/// Whether the advice selector picks `MADV_POPULATE_*`, `MADV_GUARD_INSTALL`, or `MADV_HWPOISON` /
/// `MADV_SOFT_OFFLINE` (which look each page up as a GUP read, faulting it in, before a later page fails:
/// `madvise_inject_error`; `fuzz/regressions/engine/hwpoison-looks-pages-up-before-efault`), which can fail on a later page
/// after changing VMA state (an anon_vma, `VM_MAYBE_GUARD`, markers) within one VMA.
fn faults_or_guards(advice: u8) -> bool {
    // Indices into `apply`'s ADVICE table: 19 POPULATE_READ, 20 POPULATE_WRITE, 23 HWPOISON, 24 SOFT_OFFLINE,
    // 25 GUARD_INSTALL.
    matches!(usize::from(advice) % 28, 19 | 20 | 23 | 24 | 25)
}

/// The state a failed call must leave unchanged.
fn state(mm: &Mm, what: Unchanged) -> (String, u64) {
    match what {
        Unchanged::All => (format!("{mm:?}"), mm.brk_value()),
        Unchanged::UpToSplits => (joined(mm), mm.brk_value()),
        Unchanged::Maps => (mm.maps_text(), mm.brk_value()),
        Unchanged::Nothing => (String::new(), 0),
    }
}

/// The address space with the pieces of split VMAs joined again: adjacent VMAs with the same flags, file,
/// anon_vma and name whose page offsets continue are printed as one; then `locked_vm`, `def_flags` and the guard
/// markers.
fn joined(mm: &Mm) -> String {
    // (start, end, page offset at start, everything else).
    let mut runs: Vec<(u64, u64, u64, String)> = Vec::new();
    for v in mm.vmas() {
        let anon = v.anon_vma_id;
        let file = v.file.as_ref().map(Arc::as_ptr);
        let key = format!("{:?} {file:?} {anon:?} {:?}", v.flags, v.anon_name);
        if let Some(last) = runs.last_mut()
            && last.1 == v.start
            && last.3 == key
            && v.pgoff == last.2.wrapping_add((last.1 - last.0) / PAGE_SIZE)
        {
            last.1 = v.end;
            continue;
        }
        runs.push((v.start, v.end, v.pgoff, key));
    }
    format!(
        "{runs:x?} locked_vm {} def_flags {:?} guards {:?}",
        mm.locked_vm(),
        mm.def_flags(),
        mm.guard_ranges()
    )
}

/// Runs the input's calls; panics (the fuzzer's crash) at the first broken check.
pub fn check(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let _ = run(&input);
}

/// The frames of an input's machine memory (16 MiB of contents, the zero page included), and its most
/// page-table pages.
pub const MEMORY_FRAMES: u64 = 4096;

/// Runs decoded calls with the checks of the module docs; returns each call's errno (`None`: success).
pub fn run(input: &Input) -> Vec<Option<Errno>> {
    let files = files();
    // Each input gets its own machine memory of MEMORY_FRAMES frames and as many page-table pages: a
    // populated mapping of a raw length (MAP_NORESERVE escapes the overcommit limit) then fails with ENOMEM
    // when they run out, as on a machine under memory pressure, instead of growing the fuzzer past its RSS
    // limit.
    let mem = Memory::new(MemoryConfig {
        max_frames: MEMORY_FRAMES,
        max_tables: MEMORY_FRAMES,
        ..MemoryConfig::default()
    });
    let mut mm = Mm::with_memory(config(input.cfg), mem);
    let mut results = Vec::with_capacity(input.calls.len());
    for (i, call) in input.calls.iter().enumerate() {
        let what = unchanged_on_failure(&mm, call);
        let before = state(&mm, what);
        let r = apply(&mm, call, &files);
        results.push(r.as_ref().err().copied());
        if let Err(e) = mm.validate() {
            panic!("call {i} {call:?} -> {r:?}: invariant broken: {e}\n{}", mm.maps_text());
        }
        match r {
            Err(e) if what != Unchanged::Nothing && !partial_failure(call, e) => {
                let after = state(&mm, what);
                assert!(
                    after == before,
                    "call {i} {call:?} failed with {e:?} but changed the address space\nbefore: {before:?}\nafter:  {after:?}"
                );
            }
            Err(_) => {}
            Ok(Some(child)) => {
                if let Err(e) = child.validate() {
                    panic!("call {i} fork: child invariant broken: {e}\n{}", child.maps_text());
                }
                let _ = child.maps_text();
                if matches!(call, Call::Fork { child: true }) {
                    mm = child;
                }
            }
            Ok(None) => {}
        }
        let _ = mm.maps_text();
    }
    results
}
