//! The op-script syntax: the AST, the parser (errors name the line and the reason) and the printer. This
//! module documentation is the format's reference.
//!
//! # Grammar (one call per line)
//!
//! ```text
//! file          NAME SIZE                     create a backing file of SIZE bytes, used as fd=NAME
//! ftruncate     NAME SIZE                     ftruncate(fd of NAME, SIZE)
//! mmap          ADDR LEN PROT FLAGS [fd=FD off=OFF]
//! munmap        ADDR LEN
//! mprotect      ADDR LEN PROT
//! pkey_mprotect ADDR LEN PROT KEY
//! mremap        ADDR OLDLEN NEWLEN FLAGS [NEWADDR]
//! madvise       ADDR LEN ADVICE
//! mlock         ADDR LEN
//! mlock2        ADDR LEN FLAGS                FLAGS: 0 | onfault | numbers
//! munlock       ADDR LEN
//! mlockall      FLAGS                         FLAGS: |-joined current future onfault, numbers, or 0
//! munlockall
//! mseal         ADDR LEN FLAGS                FLAGS: a number (6.18 defines none: 0)
//! pkey_alloc    FLAGS RIGHTS                  FLAGS: a number; RIGHTS: |-joined disable_access
//!                                             disable_write, numbers, or 0
//! pkey_free     KEY
//! msync         ADDR LEN FLAGS                FLAGS: |-joined async invalidate sync, numbers, or 0
//! touch         ADDR LEN r|w                  one CPU access per page (a read, or a write that keeps the byte)
//! fill          ADDR LEN BYTE                 the CPU writes BYTE to every byte of the range
//! check         ADDR LEN                      the CPU reads the range: its content hash
//! name          ADDR LEN NAME|-
//! brk           ADDR
//! fork
//! maps
//! smaps         [ADDR]                        print the smaps records of the arena (or of the VMA at ADDR)
//! query         ADDR FLAGS [size=N] [name=N]  PROCMAP_QUERY; FLAGS: |-joined readable writable executable
//!                                             shared covering_or_next file_backed, numbers, or 0
//! ```
//!
//! Each line is one system call with the script's values passed unchanged (the kernel runner,
//! `vmspace_linux::replay`, issues exactly that call; the engine answers as Linux 6.18 would), except `file`
//! (open + ftruncate of a fresh file), the memory accesses `touch`, `fill` and `check` (below), `fork` (the
//! script continues in the child), `maps` (prints the arena's maps) and the `/proc` readers `smaps` and
//! `query` (below).
//!
//! # The `/proc` readers: `smaps`, `query`
//!
//! * `smaps [ADDR]` reads `/proc/self/smaps` and prints, as a block (`crate::output`), the records of the VMAs
//!   that overlap the arena, or with ADDR only the record of the VMA containing ADDR (none: an empty block).
//!   Records are compared whole (every counter, `THPeligible`, `VmFlags`), their header lines canonicalised
//!   as maps lines are. `smaps_rollup` is not an op: it sums the whole process, the runner's own memory
//!   included.
//! * `query ADDR FLAGS [size=N] [name=N]` is the `PROCMAP_QUERY` ioctl on `/proc/self/maps` with
//!   `query_addr` ADDR and `query_flags` FLAGS (names: [`QUERY_FLAG_NAMES`]; unknown bits reach the kernel,
//!   which answers EINVAL). `size=` is the struct's `size` field (default 104, the whole 6.18 struct; the
//!   caller's struct is then at least that large, its bytes past 104 zero); `name=` the capacity of the name
//!   buffer the target supplies (default 4096; `name=0` passes no buffer). No build-ID buffer is passed. The
//!   value is the answer (`crate::output`) or `-E<NAME>`.
//!
//! # Memory accesses: `touch`, `fill`, `check`
//!
//! These are user-mode CPU accesses, not system calls: what a program's loads and stores do, page faults and
//! all. Each walks the pages of `[ADDR, ADDR + LEN)` in address order (the first page is the one containing
//! ADDR, which need not be aligned) and stops at the first page the CPU cannot access: where the access would
//! raise SIGSEGV (no VMA and no stack to grow, a protection that forbids it, a guard region) or SIGBUS (a file
//! page beyond the end of the file, a hugetlb page the pool cannot give). The result is then `-EFAULT PAGE`
//! with that page's aligned address (output format: `crate::output`); the pages before it were accessed, with
//! every side effect of their faults; nothing at or after it was. Accesses follow x86-64 without protection
//! keys: a read needs any of `r`, `w`, `x` (the page tables cannot express write-only or execute-only), a
//! write needs `w`; a fault just below a `growsdown` VMA grows it first (`mm/mmap.c: expand_downwards`).
//!
//! * `touch ADDR LEN r|w`: one access per page, to the first byte of the range in it (whether an access
//!   faults depends only on its page). `r` reads the byte; `w` is a write access that keeps
//!   the byte's value (a locked add of 0: the CPU's write access with its copy-on-write and dirtying, contents
//!   unchanged, so later `check`s see only what `fill`s wrote). `0` when every page was accessed.
//! * `fill ADDR LEN BYTE`: writes BYTE (0..=255, decimal or hex) to every byte of the range, page by page.
//!   On a fault the bytes of the pages before the faulting page are written and none of it or after it.
//!   `0` on success.
//! * `check ADDR LEN`: reads every byte of the range and prints their content hash, `0x` and 16 lower-case
//!   hex digits: 64-bit FNV-1a over the bytes in address order (offset basis `0xcbf29ce484222325`, prime
//!   `0x100000001b3`: for each byte `h = (h ^ byte) * prime mod 2^64`; [`crate::hash`] is the one
//!   implementation). The hash of an empty range is the offset basis, `0xcbf29ce484222325`.
//! * LEN 0 accesses nothing (`touch` and `fill` print `0`, `check` the empty hash). A range that would end
//!   past 2^64 ends at 2^64. Nothing is mapped at or above `TASK_SIZE`, so every walk stops there at the
//!   latest; a huge LEN costs time only for the pages that are really mapped and accessible (a target never
//!   allocates per byte of LEN: it works a page at a time), and `vmspace replay` refuses scripts whose
//!   accesses would take too long or too much memory unless `--force`.
//! * The kernel runner refuses a `touch w` or `fill` that reaches its own memory outside the arena
//!   (`vmspace_linux::replay`, "Guard").
//!
//! * Tokens are separated by blanks; `#` starts a comment that runs to the end of the line; blank lines are
//!   allowed. Line numbers (1-based, counting every line) are kept with each op: results print them.
//! * Numbers (ADDR, LEN, SIZE, OFF, NEWADDR and flag numbers) are decimal or `0x` hex (`0X` accepted),
//!   unsigned 64-bit. KEY is an `int`: decimal or hex with an optional leading `-` (`-1`, `0x3`).
//! * PROT is the `rwx` form (`r`/`-`, `w`/`-`, `x`/`-`: `rw-`, `--x`, `-wx`), optionally followed by
//!   `|`-joined names of the other `PROT_*` bits (`sem growsdown growsup`) and numbers: `rw-|sem`,
//!   `--x|growsdown`, `r--|0x10`; or a raw 32-bit number (`0x9` is `r--|sem`). Unknown bits reach the target
//!   as given.
//! * mmap FLAGS are `|`-joined names and numbers, or `0` for none (the kernel then says EINVAL: neither
//!   private nor shared). The names are every flag Linux 6.18 knows ([`MMAP_FLAG_NAMES`]):
//!   `private shared shared_validate droppable anon fixed fixed_noreplace growsdown populate noreserve 32bit
//!   denywrite executable locked nonblock stack hugetlb sync uninitialized`, and `huge_2mb` / `huge_1gb` for
//!   the `MAP_HUGE_*` size field (bits 26..31). Names may cover several bits (`shared_validate` is
//!   `shared|private`, `huge_2mb` is 21 << 26 and includes `uninitialized`'s bit 26); each bit may be given
//!   once only, by name or by number.
//! * mremap FLAGS are `0` or `|`-joined from `maymove fixed dontunmap` and numbers. NEWADDR is required with
//!   `fixed` and optional without it: the kernel then reads it as a hint (with `dontunmap`) or ignores it.
//!   Without NEWADDR the call passes 0.
//! * ADVICE is the `MADV_` name lower-cased without the prefix ([`ADVICE_NAMES`]: `normal random sequential
//!   willneed dontneed free remove dontfork dofork mergeable unmergeable hugepage nohugepage dontdump dodump
//!   wipeonfork keeponfork cold pageout populate_read populate_write dontneed_locked collapse hwpoison
//!   soft_offline guard_install guard_remove`), or a raw `int` (`14` is `hugepage`; `-1` is passed as is).
//!   The kernel runner refuses `hwpoison` and `soft_offline` (by name or number) without running anything:
//!   as root they really poison or offline pages of the machine.
//! * `fd=FD off=OFF` come together and only with mmap. FD is a file NAME, or `-1`. A NAME declared by an
//!   earlier `file` line (whose creation succeeded) is that file's descriptor; any other NAME stands for a
//!   descriptor number that is not open (the runner passes one that cannot be open: EBADF on both sides);
//!   `-1` passes -1. Any mmap may have `fd=` or not: without it the call passes fd -1 and offset 0, so
//!   `mmap ADDR LEN PROT private` is `fd=-1 off=0` written short (a file mapping of no descriptor: EBADF,
//!   `mm/mmap.c: ksys_mmap_pgoff` looks the descriptor up before any other check but the offset's). The
//!   kernel ignores the descriptor of an anonymous mapping but still checks OFF (an unaligned OFF is EINVAL,
//!   `arch/x86/kernel/sys_x86_64.c: sys_mmap`).
//! * A file NAME (`file`, `ftruncate`, `fd=`) is one token without `#`, `=` or blanks that does not start
//!   with a digit or `-` (so `fd=-1` and numbers are never names); a NAME is declared once. `ftruncate`
//!   of a NAME that is not open passes the same closed descriptor as `fd=`.
//! * An anon NAME (`name`) is one token without `#`, `=` or blanks; `name ADDR LEN -` clears the name.
//! * The flag words are typed where the ABI crate has the type ([`Prot`], [`MapFlags`], [`MremapFlags`],
//!   [`Advice`]) and raw integers of the syscall's argument width otherwise (`mlock2` and `mlockall` and
//!   `msync` flags `u32` (`int`), `mseal` and `pkey_alloc` flags and `pkey_alloc` rights `u64` (`unsigned
//!   long`)): every value the syntax expresses reaches both targets unchanged.
//!
//! The printer ([`Script::to_text`]) writes one op per line in canonical spelling: flags by name in table
//! order (a name covering several bits is used before the names of the bits it covers: `shared_validate`, not
//! `private|shared`) and unnamed bits last as one hex number, PROT as
//! `rwx` plus names, advice by name when it has one, KEY in decimal, other numbers as `0x` hex except values
//! below 4096 (decimal). So `parse(print(s)) == s` for every script, and `print` is a fixed point after one
//! round.

use core::fmt;

use vmspace_abi::{Advice, MapFlags, MremapFlags, Prot};

/// Script spellings of the `PROT_*` bits other than read, write and exec, in canonical print order.
pub const PROT_FLAG_NAMES: &[(Prot, &str)] =
    &[(Prot::SEM, "sem"), (Prot::GROWSDOWN, "growsdown"), (Prot::GROWSUP, "growsup")];

/// Parses PROT (module docs): the `rwx` form with optional `|`-joined names and numbers, or a raw number.
fn parse_prot(s: &str) -> Result<Prot, String> {
    let (head, tail) = match s.split_once('|') {
        Some((h, t)) => (h, Some(t)),
        None => (s, None),
    };
    let b = head.as_bytes();
    let mut p = if b.len() == 3
        && matches!(b[0], b'r' | b'-')
        && matches!(b[1], b'w' | b'-')
        && matches!(b[2], b'x' | b'-')
    {
        let mut p = Prot::NONE;
        p.set(Prot::READ, b[0] == b'r');
        p.set(Prot::WRITE, b[1] == b'w');
        p.set(Prot::EXEC, b[2] == b'x');
        p
    } else if tail.is_none() {
        return match parse_num(s).ok().and_then(|v| u32::try_from(v).ok()) {
            Some(v) => Ok(Prot::from_bits_retain(v)),
            None => Err(format!(
                "PROT {s:?}: expected three characters like rw- or r-x (optionally followed by |-joined {} \
                 and numbers), or a 32-bit number",
                names_list(&prot_names())
            )),
        };
    } else {
        return Err(format!("PROT {s:?}: must start with three characters like rw- or r-x"));
    };
    if let Some(t) = tail {
        let rest = parse_flag_set(t, &prot_names(), "PROT", u64::from(u32::MAX))?;
        let rest = Prot::from_bits_retain(rest as u32);
        if p.intersects(rest) {
            return Err(format!("PROT {s:?}: a bit is given twice"));
        }
        p |= rest;
    }
    Ok(p)
}

/// Prints PROT: the `rwx` form, then the names and numbers of any other bits.
fn print_prot(p: Prot) -> String {
    let c = |f: Prot, ch: char| if p.contains(f) { ch } else { '-' };
    let rwx = format!("{}{}{}", c(Prot::READ, 'r'), c(Prot::WRITE, 'w'), c(Prot::EXEC, 'x'));
    let rest = (p - Prot::ACCESS).bits();
    if rest == 0 { rwx } else { format!("{rwx}|{}", print_flag_set(u64::from(rest), &prot_names())) }
}

/// Script spellings of the mmap flags, in canonical print order: every `MAP_*` flag of Linux 6.18
/// (`include/uapi/linux/mman.h`, `include/uapi/asm-generic/mman-common.h`, `arch/x86/include/uapi/asm/mman.h`)
/// and the two `MAP_HUGE_*` sizes x86-64 supports. `shared_validate` covers `shared|private`, `huge_2mb` and
/// `huge_1gb` are values of the 6-bit size field (`huge_2mb` includes `uninitialized`'s bit 26).
pub const MMAP_FLAG_NAMES: &[(MapFlags, &str)] = &[
    (MapFlags::PRIVATE, "private"),
    (MapFlags::SHARED, "shared"),
    (MapFlags::SHARED_VALIDATE, "shared_validate"),
    (MapFlags::DROPPABLE, "droppable"),
    (MapFlags::ANONYMOUS, "anon"),
    (MapFlags::FIXED, "fixed"),
    (MapFlags::FIXED_NOREPLACE, "fixed_noreplace"),
    (MapFlags::GROWSDOWN, "growsdown"),
    (MapFlags::POPULATE, "populate"),
    (MapFlags::NORESERVE, "noreserve"),
    (MapFlags::BELOW_2G, "32bit"),
    (MapFlags::DENYWRITE, "denywrite"),
    (MapFlags::EXECUTABLE, "executable"),
    (MapFlags::LOCKED, "locked"),
    (MapFlags::NONBLOCK, "nonblock"),
    (MapFlags::STACK, "stack"),
    (MapFlags::HUGETLB, "hugetlb"),
    (MapFlags::SYNC, "sync"),
    (MapFlags::UNINITIALIZED, "uninitialized"),
    (MapFlags::from_bits_retain(21 << MapFlags::HUGE_SHIFT), "huge_2mb"),
    (MapFlags::from_bits_retain(30 << MapFlags::HUGE_SHIFT), "huge_1gb"),
];

/// Script spellings of the mremap flags, in canonical print order.
pub const MREMAP_FLAG_NAMES: &[(MremapFlags, &str)] = &[
    (MremapFlags::MAYMOVE, "maymove"),
    (MremapFlags::FIXED, "fixed"),
    (MremapFlags::DONTUNMAP, "dontunmap"),
];

/// Script spellings of every madvise advice Linux 6.18 defines (`include/uapi/asm-generic/mman-common.h`),
/// in value order: the `MADV_` name lower-cased without the prefix.
pub const ADVICE_NAMES: &[(Advice, &str)] = &[
    (Advice::NORMAL, "normal"),
    (Advice::RANDOM, "random"),
    (Advice::SEQUENTIAL, "sequential"),
    (Advice::WILLNEED, "willneed"),
    (Advice::DONTNEED, "dontneed"),
    (Advice::FREE, "free"),
    (Advice::REMOVE, "remove"),
    (Advice::DONTFORK, "dontfork"),
    (Advice::DOFORK, "dofork"),
    (Advice::MERGEABLE, "mergeable"),
    (Advice::UNMERGEABLE, "unmergeable"),
    (Advice::HUGEPAGE, "hugepage"),
    (Advice::NOHUGEPAGE, "nohugepage"),
    (Advice::DONTDUMP, "dontdump"),
    (Advice::DODUMP, "dodump"),
    (Advice::WIPEONFORK, "wipeonfork"),
    (Advice::KEEPONFORK, "keeponfork"),
    (Advice::COLD, "cold"),
    (Advice::PAGEOUT, "pageout"),
    (Advice::POPULATE_READ, "populate_read"),
    (Advice::POPULATE_WRITE, "populate_write"),
    (Advice::DONTNEED_LOCKED, "dontneed_locked"),
    (Advice::COLLAPSE, "collapse"),
    (Advice::HWPOISON, "hwpoison"),
    (Advice::SOFT_OFFLINE, "soft_offline"),
    (Advice::GUARD_INSTALL, "guard_install"),
    (Advice::GUARD_REMOVE, "guard_remove"),
];

/// `mlock2` flags (`include/uapi/asm-generic/mman-common.h`): `MLOCK_ONFAULT`.
pub const MLOCK2_FLAG_NAMES: &[(u32, &str)] = &[(1, "onfault")];

/// `mlockall` flags (`include/uapi/asm-generic/mman.h` via `arch/x86/include/uapi/asm/mman.h`):
/// `MCL_CURRENT`, `MCL_FUTURE`, `MCL_ONFAULT`.
pub const MCL_FLAG_NAMES: &[(u32, &str)] = &[(1, "current"), (2, "future"), (4, "onfault")];

/// `msync` flags (`include/uapi/asm-generic/mman-common.h`): `MS_ASYNC`, `MS_INVALIDATE`, `MS_SYNC`.
pub const MSYNC_FLAG_NAMES: &[(u32, &str)] = &[(1, "async"), (2, "invalidate"), (4, "sync")];

/// `pkey_alloc` access rights (`include/uapi/asm-generic/mman-common.h`): `PKEY_DISABLE_ACCESS`,
/// `PKEY_DISABLE_WRITE`.
pub const PKEY_RIGHTS_NAMES: &[(u64, &str)] = &[(1, "disable_access"), (2, "disable_write")];

/// A table as `(u64 bits, name)`, the form [`parse_flag_set`] and [`print_flag_set`] take.
fn widen<T: Copy>(t: &[(T, &'static str)], bits: impl Fn(T) -> u64) -> Vec<(u64, &'static str)> {
    t.iter().map(|(f, n)| (bits(*f), *n)).collect()
}

fn prot_names() -> Vec<(u64, &'static str)> {
    widen(PROT_FLAG_NAMES, |p| u64::from(p.bits()))
}

fn mmap_names() -> Vec<(u64, &'static str)> {
    widen(MMAP_FLAG_NAMES, |f| u64::from(f.bits()))
}

fn mremap_names() -> Vec<(u64, &'static str)> {
    widen(MREMAP_FLAG_NAMES, |f| u64::from(f.bits()))
}

fn u32_names(t: &[(u32, &'static str)]) -> Vec<(u64, &'static str)> {
    widen(t, u64::from)
}

fn names_list(names: &[(u64, &str)]) -> String {
    names.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(" ")
}

/// Parses a `|`-joined flag set of names and numbers (`0` alone is the empty set) whose value must not exceed
/// `max`. A bit may be given once only, by name or by number.
fn parse_flag_set(s: &str, names: &[(u64, &str)], what: &str, max: u64) -> Result<u64, String> {
    if s == "0" {
        return Ok(0);
    }
    let width = if max == u64::MAX { 64 } else { 32 };
    let mut bits = 0;
    for part in s.split('|') {
        let b = match names.iter().find(|(_, n)| *n == part) {
            Some((b, _)) => *b,
            None if part.starts_with(|c: char| c.is_ascii_digit()) => {
                match parse_num(part).ok().filter(|v| *v <= max) {
                    Some(v) => v,
                    None => return Err(format!("{what} flag {part:?}: not a {width}-bit number")),
                }
            }
            None => {
                let expected = if names.is_empty() {
                    "a number".to_string()
                } else {
                    format!("0 or |-joined numbers and {}", names_list(names))
                };
                return Err(format!("{what} flag {part:?} unknown (expected {expected})"));
            }
        };
        if bits & b != 0 {
            return Err(format!("{what} flag {part:?} given twice"));
        }
        bits |= b;
    }
    Ok(bits)
}

/// Prints a flag set: names in table order, then the other bits as one hex number (`0` for none). Names are
/// chosen widest first (a name covering more bits before those it overlaps), so every printed name's bits
/// are disjoint and the text parses back to `bits`.
fn print_flag_set(bits: u64, names: &[(u64, &str)]) -> String {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by_key(|&i| core::cmp::Reverse(names[i].0.count_ones()));
    let mut rest = bits;
    let mut chosen = vec![false; names.len()];
    for i in order {
        let b = names[i].0;
        if b != 0 && rest & b == b {
            chosen[i] = true;
            rest &= !b;
        }
    }
    let mut parts: Vec<String> =
        names.iter().zip(&chosen).filter(|(_, c)| **c).map(|((_, n), _)| (*n).to_string()).collect();
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() { "0".into() } else { parts.join("|") }
}

/// Parses an `int`: decimal or `0x` hex with an optional leading `-`.
fn parse_int(s: &str) -> Result<i32, String> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    if !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("{s:?}: not an int"));
    }
    let v = parse_num(digits).ok().and_then(|v| i64::try_from(v).ok());
    v.map(|v| if neg { -v } else { v })
        .and_then(|v| i32::try_from(v).ok())
        .ok_or_else(|| format!("{s:?}: not a 32-bit int"))
}

/// Parses ADVICE: a name of [`ADVICE_NAMES`] or a raw `int` (decimal or hex, `-` for negative values).
fn parse_advice(s: &str) -> Result<Advice, String> {
    if let Some((a, _)) = ADVICE_NAMES.iter().find(|(_, n)| *n == s) {
        return Ok(*a);
    }
    if s.trim_start_matches('-').starts_with(|c: char| c.is_ascii_digit()) {
        return parse_int(s).map(Advice::from_raw).map_err(|e| format!("madvise ADVICE {e}"));
    }
    let all: Vec<&str> = ADVICE_NAMES.iter().map(|(_, n)| *n).collect();
    Err(format!("madvise ADVICE {s:?} unknown (expected a number or one of {})", all.join(" ")))
}

/// Prints ADVICE: its script name, else the raw value in decimal.
fn print_advice(a: Advice) -> String {
    match ADVICE_NAMES.iter().find(|(x, _)| *x == a) {
        Some((_, n)) => (*n).to_string(),
        None => a.raw().to_string(),
    }
}

/// The descriptor argument of a mapping: `fd=NAME` or `fd=-1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Fd {
    /// `fd=NAME`: the file declared as NAME if one is open under that name when the call runs, else a
    /// descriptor number that is not open (EBADF for a file mapping).
    Name(String),
    /// `fd=-1`: the descriptor -1.
    MinusOne,
}

impl fmt::Display for Fd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fd::Name(n) => f.write_str(n),
            Fd::MinusOne => f.write_str("-1"),
        }
    }
}

/// One call of a script.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    /// `file NAME SIZE`: create a backing file of SIZE bytes, later used as `fd=NAME`.
    File {
        /// The script's name for the file.
        name: String,
        /// Size in bytes.
        size: u64,
    },
    /// `ftruncate NAME SIZE`: `ftruncate(fd, SIZE)` on the file NAME (a descriptor that is not open when no
    /// file NAME is open).
    Ftruncate {
        /// The file.
        name: String,
        /// The new size in bytes (`off_t`: values from 2^63 on are negative, EINVAL).
        size: u64,
    },
    /// `mmap ADDR LEN PROT FLAGS [fd=FD off=OFF]`.
    Mmap {
        /// Address (hint, or exact with fixed/fixed_noreplace).
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// Protection.
        prot: Prot,
        /// `MAP_*` flags.
        flags: MapFlags,
        /// `fd=FD off=OFF`: the descriptor and the byte offset (`None`: no `fd=`, the call passes fd -1 and
        /// offset 0, anonymous or not).
        file: Option<(Fd, u64)>,
    },
    /// `munmap ADDR LEN`.
    Munmap {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// `mprotect ADDR LEN PROT`.
    Mprotect {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// New protection.
        prot: Prot,
    },
    /// `pkey_mprotect ADDR LEN PROT KEY`.
    PkeyMprotect {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// New protection.
        prot: Prot,
        /// Protection key (-1: keep the VMAs' keys, as `mprotect`).
        key: i32,
    },
    /// `mremap ADDR OLDLEN NEWLEN FLAGS [NEWADDR]`.
    Mremap {
        /// Old address.
        addr: u64,
        /// Old length.
        old_len: u64,
        /// New length.
        new_len: u64,
        /// `MREMAP_*` flags.
        flags: MremapFlags,
        /// New address (always present with `fixed`; optional without, then a hint or ignored).
        new_addr: Option<u64>,
    },
    /// `madvise ADDR LEN ADVICE`.
    Madvise {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// Advice.
        advice: Advice,
    },
    /// `mlock ADDR LEN`.
    Mlock {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// `mlock2 ADDR LEN FLAGS`.
    Mlock2 {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// `MLOCK_*` flags (raw `int` bits).
        flags: u32,
    },
    /// `munlock ADDR LEN`.
    Munlock {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// `mlockall FLAGS`.
    Mlockall {
        /// `MCL_*` flags (raw `int` bits).
        flags: u32,
    },
    /// `munlockall`.
    Munlockall,
    /// `mseal ADDR LEN FLAGS`.
    Mseal {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// Flags (`unsigned long`; 6.18 defines none).
        flags: u64,
    },
    /// `pkey_alloc FLAGS RIGHTS`: prints the key in decimal.
    PkeyAlloc {
        /// Flags (`unsigned long`; 6.18 defines none).
        flags: u64,
        /// Initial access rights (`unsigned long`, `PKEY_DISABLE_*`).
        rights: u64,
    },
    /// `pkey_free KEY`.
    PkeyFree {
        /// The key.
        key: i32,
    },
    /// `msync ADDR LEN FLAGS`.
    Msync {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// `MS_*` flags (raw `int` bits).
        flags: u32,
    },
    /// `touch ADDR LEN r|w`: a CPU read, or a CPU write that keeps the byte, in every page (module docs).
    Touch {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// Write (`w`) rather than read (`r`).
        write: bool,
    },
    /// `fill ADDR LEN BYTE`: the CPU writes `byte` to every byte of the range (module docs).
    Fill {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// The value written.
        byte: u8,
    },
    /// `check ADDR LEN`: the CPU reads every byte of the range; prints their content hash (module docs).
    Check {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// `name ADDR LEN NAME|-`: PR_SET_VMA_ANON_NAME (`-` clears).
    Name {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// The name, `None` to clear.
        name: Option<String>,
    },
    /// `brk ADDR`.
    Brk {
        /// The requested break.
        addr: u64,
    },
    /// `fork`: later lines run in the child; the parent waits.
    Fork,
    /// `maps`: print the arena's maps lines.
    Maps,
    /// `smaps [ADDR]`: print the smaps records of the arena, or of the VMA containing ADDR.
    Smaps {
        /// Only the VMA containing this address.
        addr: Option<u64>,
    },
    /// `query ADDR FLAGS [size=N] [name=N]`: `PROCMAP_QUERY` (module docs).
    Query {
        /// `query_addr`.
        addr: u64,
        /// `query_flags` (raw bits).
        flags: u64,
        /// The struct's `size` field ([`QUERY_DEFAULT_SIZE`] unless given).
        size: u64,
        /// The name buffer's capacity (`vma_name_size`; 0: no buffer) ([`QUERY_DEFAULT_NAME`] unless given).
        name: u32,
    },
}

/// The default `size=` of `query`: `sizeof(struct procmap_query)` in 6.18.
pub const QUERY_DEFAULT_SIZE: u64 = 104;
/// The default `name=` of `query`: a `PATH_MAX` buffer.
pub const QUERY_DEFAULT_NAME: u32 = 4096;

/// Script spellings of the `PROCMAP_QUERY` flags (`include/uapi/linux/fs.h`), in canonical print order.
pub const QUERY_FLAG_NAMES: &[(u64, &str)] = &[
    (0x01, "readable"),
    (0x02, "writable"),
    (0x04, "executable"),
    (0x08, "shared"),
    (0x10, "covering_or_next"),
    (0x20, "file_backed"),
];

impl Op {
    /// The op's keyword (`mmap`), as result lines print it.
    pub fn keyword(&self) -> &'static str {
        match self {
            Op::File { .. } => "file",
            Op::Ftruncate { .. } => "ftruncate",
            Op::Mmap { .. } => "mmap",
            Op::Munmap { .. } => "munmap",
            Op::Mprotect { .. } => "mprotect",
            Op::PkeyMprotect { .. } => "pkey_mprotect",
            Op::Mremap { .. } => "mremap",
            Op::Madvise { .. } => "madvise",
            Op::Mlock { .. } => "mlock",
            Op::Mlock2 { .. } => "mlock2",
            Op::Munlock { .. } => "munlock",
            Op::Mlockall { .. } => "mlockall",
            Op::Munlockall => "munlockall",
            Op::Mseal { .. } => "mseal",
            Op::PkeyAlloc { .. } => "pkey_alloc",
            Op::PkeyFree { .. } => "pkey_free",
            Op::Msync { .. } => "msync",
            Op::Touch { .. } => "touch",
            Op::Fill { .. } => "fill",
            Op::Check { .. } => "check",
            Op::Name { .. } => "name",
            Op::Brk { .. } => "brk",
            Op::Fork => "fork",
            Op::Maps => "maps",
            Op::Smaps { .. } => "smaps",
            Op::Query { .. } => "query",
        }
    }

    /// Every keyword of the format, in the order of the module documentation's grammar.
    pub const KEYWORDS: &'static [&'static str] = &[
        "file",
        "ftruncate",
        "mmap",
        "munmap",
        "mprotect",
        "pkey_mprotect",
        "mremap",
        "madvise",
        "mlock",
        "mlock2",
        "munlock",
        "mlockall",
        "munlockall",
        "mseal",
        "pkey_alloc",
        "pkey_free",
        "msync",
        "touch",
        "fill",
        "check",
        "name",
        "brk",
        "fork",
        "maps",
        "smaps",
        "query",
    ];
}

/// Prints a number: decimal below 4096, `0x` hex from there on.
fn num(v: u64) -> String {
    if v < 4096 { v.to_string() } else { format!("{v:#x}") }
}

impl fmt::Display for Op {
    /// The op in canonical script syntax (no line number, no newline).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let range = |kw: &str, addr: u64, len: u64| format!("{kw} {} {}", num(addr), num(len));
        match self {
            Op::File { name, size } => write!(f, "file {name} {}", num(*size)),
            Op::Ftruncate { name, size } => write!(f, "ftruncate {name} {}", num(*size)),
            Op::Mmap { addr, len, prot, flags, file } => {
                write!(
                    f,
                    "{} {} {}",
                    range("mmap", *addr, *len),
                    print_prot(*prot),
                    print_flag_set(u64::from(flags.bits()), &mmap_names())
                )?;
                if let Some((fd, off)) = file {
                    write!(f, " fd={fd} off={}", num(*off))?;
                }
                Ok(())
            }
            Op::Munmap { addr, len } => f.write_str(&range("munmap", *addr, *len)),
            Op::Mprotect { addr, len, prot } => {
                write!(f, "{} {}", range("mprotect", *addr, *len), print_prot(*prot))
            }
            Op::PkeyMprotect { addr, len, prot, key } => {
                write!(f, "{} {} {key}", range("pkey_mprotect", *addr, *len), print_prot(*prot))
            }
            Op::Mremap { addr, old_len, new_len, flags, new_addr } => {
                write!(
                    f,
                    "{} {} {}",
                    range("mremap", *addr, *old_len),
                    num(*new_len),
                    print_flag_set(u64::from(flags.bits()), &mremap_names())
                )?;
                if let Some(n) = new_addr {
                    write!(f, " {}", num(*n))?;
                }
                Ok(())
            }
            Op::Madvise { addr, len, advice } => {
                write!(f, "{} {}", range("madvise", *addr, *len), print_advice(*advice))
            }
            Op::Mlock { addr, len } => f.write_str(&range("mlock", *addr, *len)),
            Op::Mlock2 { addr, len, flags } => write!(
                f,
                "{} {}",
                range("mlock2", *addr, *len),
                print_flag_set(u64::from(*flags), &u32_names(MLOCK2_FLAG_NAMES))
            ),
            Op::Munlock { addr, len } => f.write_str(&range("munlock", *addr, *len)),
            Op::Mlockall { flags } => {
                write!(f, "mlockall {}", print_flag_set(u64::from(*flags), &u32_names(MCL_FLAG_NAMES)))
            }
            Op::Munlockall => f.write_str("munlockall"),
            Op::Mseal { addr, len, flags } => {
                write!(f, "{} {}", range("mseal", *addr, *len), print_flag_set(*flags, &[]))
            }
            Op::PkeyAlloc { flags, rights } => write!(
                f,
                "pkey_alloc {} {}",
                print_flag_set(*flags, &[]),
                print_flag_set(*rights, PKEY_RIGHTS_NAMES)
            ),
            Op::PkeyFree { key } => write!(f, "pkey_free {key}"),
            Op::Msync { addr, len, flags } => write!(
                f,
                "{} {}",
                range("msync", *addr, *len),
                print_flag_set(u64::from(*flags), &u32_names(MSYNC_FLAG_NAMES))
            ),
            Op::Touch { addr, len, write } => {
                write!(f, "{} {}", range("touch", *addr, *len), if *write { "w" } else { "r" })
            }
            Op::Fill { addr, len, byte } => {
                write!(f, "{} {}", range("fill", *addr, *len), num(u64::from(*byte)))
            }
            Op::Check { addr, len } => f.write_str(&range("check", *addr, *len)),
            Op::Name { addr, len, name } => {
                write!(f, "{} {}", range("name", *addr, *len), name.as_deref().unwrap_or("-"))
            }
            Op::Brk { addr } => write!(f, "brk {}", num(*addr)),
            Op::Fork => f.write_str("fork"),
            Op::Maps => f.write_str("maps"),
            Op::Smaps { addr: None } => f.write_str("smaps"),
            Op::Smaps { addr: Some(a) } => write!(f, "smaps {}", num(*a)),
            Op::Query { addr, flags, size, name } => {
                write!(f, "query {} {}", num(*addr), print_flag_set(*flags, QUERY_FLAG_NAMES))?;
                if *size != QUERY_DEFAULT_SIZE {
                    write!(f, " size={}", num(*size))?;
                }
                if *name != QUERY_DEFAULT_NAME {
                    write!(f, " name={}", num(u64::from(*name)))?;
                }
                Ok(())
            }
        }
    }
}

impl core::str::FromStr for Op {
    type Err = ParseError;

    /// One script line's op (a `#` comment may follow): the inverse of the printer, so that a call that did not
    /// come from a script (a generated one, a decoded system call) prints as the line a script would hold and
    /// reads back as the same op. A `file` line declares nothing here, so a later `fd=NAME` is not checked
    /// against it (as in a script, an undeclared NAME is a closed descriptor). No op, or more than one, is an
    /// error.
    fn from_str(line: &str) -> Result<Op, ParseError> {
        let mut s = Script::parse(line)?;
        match (s.lines.pop(), s.lines.is_empty()) {
            (Some(l), true) => Ok(l.op),
            (l, _) => {
                Err(ParseError { line: l.map_or(1, |l| l.line), reason: "expected exactly one op".into() })
            }
        }
    }
}

/// One op with the 1-based number of the line it came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Line {
    /// 1-based source line number (results print it as `L<line>`).
    pub line: usize,
    /// The op.
    pub op: Op,
}

/// A parsed script: its ops in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Script {
    /// The ops, with their line numbers, in file order.
    pub lines: Vec<Line>,
}

/// A rejected script: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// The longest word of a [`ParseError`]'s message shown whole; a longer one (a huge token quoted in the reason)
/// is cut to its first [`SHOWN_OF_LONG_WORD`] characters and its length.
pub const LONGEST_SHOWN_WORD: usize = 64;
/// How much of a word longer than [`LONGEST_SHOWN_WORD`] is shown.
pub const SHOWN_OF_LONG_WORD: usize = 40;

impl fmt::Display for ParseError {
    /// `line N: reason`, with every word of the reason longer than [`LONGEST_SHOWN_WORD`] characters shortened
    /// (`"aaaa...(1048576 characters)`), so that a message about a huge token stays one readable line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: ", self.line)?;
        for (i, word) in self.reason.split(' ').enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let n = word.chars().count();
            if n > LONGEST_SHOWN_WORD {
                let head: String = word.chars().take(SHOWN_OF_LONG_WORD).collect();
                write!(f, "{head}...({n} characters)")?;
            } else {
                f.write_str(word)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ParseError {}

/// Parses a number: decimal or `0x` hex.
pub fn parse_num(s: &str) -> Result<u64, String> {
    let r = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if h.is_empty() {
            return Err(format!("number {s:?}: no digits after 0x"));
        }
        u64::from_str_radix(h, 16)
    } else {
        s.parse::<u64>()
    };
    r.map_err(|e| format!("number {s:?}: {e}"))
}

/// Checks an anon NAME (the `name` op): one token without `#`, `=` or blanks.
fn check_name(s: &str, what: &str) -> Result<String, String> {
    if s.is_empty() || s.contains(['#', '=']) || s.chars().any(char::is_whitespace) {
        return Err(format!("{what} {s:?}: one token without '#', '=' or blanks"));
    }
    Ok(s.to_string())
}

/// Checks a file NAME (`file`, `ftruncate`, `fd=`): an anon NAME that does not start with a digit or `-`.
fn check_file_name(s: &str, what: &str) -> Result<String, String> {
    let name = check_name(s, what)?;
    if name.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
        return Err(format!(
            "{what} {s:?}: a file name must not start with a digit or '-' (fd=-1 is the descriptor -1; an \
             undeclared NAME stands for a descriptor that is not open)"
        ));
    }
    Ok(name)
}

struct Args<'a> {
    toks: core::slice::Iter<'a, &'a str>,
    kw: &'a str,
}

impl<'a> Args<'a> {
    fn next(&mut self, what: &str) -> Result<&'a str, String> {
        self.toks.next().copied().ok_or_else(|| format!("{}: missing {what}", self.kw))
    }
    fn num(&mut self, what: &str) -> Result<u64, String> {
        parse_num(self.next(what)?).map_err(|e| format!("{} {what}: {e}", self.kw))
    }
    fn int(&mut self, what: &str) -> Result<i32, String> {
        parse_int(self.next(what)?).map_err(|e| format!("{} {what} {e}", self.kw))
    }
    fn flags(&mut self, names: &[(u64, &str)], max: u64) -> Result<u64, String> {
        let kw = self.kw;
        parse_flag_set(self.next("FLAGS")?, names, kw, max)
    }
    fn end(&mut self) -> Result<(), String> {
        match self.toks.next() {
            None => Ok(()),
            Some(t) => Err(format!("{}: unexpected extra argument {t:?}", self.kw)),
        }
    }
}

/// `u32` flags: every value fits (the parse bounded it).
fn flags32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn parse_op(toks: &[&str], files: &[String]) -> Result<Op, String> {
    let (kw, rest) = toks.split_first().ok_or("empty line")?;
    let mut a = Args { toks: rest.iter(), kw };
    let u32max = u64::from(u32::MAX);
    let op = match *kw {
        "file" => {
            let name = check_file_name(a.next("NAME")?, "file NAME")?;
            if files.contains(&name) {
                return Err(format!("file {name:?} declared twice"));
            }
            Op::File { name, size: a.num("SIZE")? }
        }
        "ftruncate" => {
            let name = check_file_name(a.next("NAME")?, "ftruncate NAME")?;
            Op::Ftruncate { name, size: a.num("SIZE")? }
        }
        "mmap" => {
            let addr = a.num("ADDR")?;
            let len = a.num("LEN")?;
            let prot = parse_prot(a.next("PROT")?)?;
            let flags = MapFlags::from_bits_retain(flags32(a.flags(&mmap_names(), u32max)?));
            let file = match a.toks.next() {
                None => None,
                Some(t) => {
                    let fd =
                        t.strip_prefix("fd=").ok_or_else(|| format!("mmap: expected fd=FD, got {t:?}"))?;
                    let fd =
                        if fd == "-1" { Fd::MinusOne } else { Fd::Name(check_file_name(fd, "fd=NAME")?) };
                    let o = a.next("off=OFF after fd=FD")?;
                    let off =
                        o.strip_prefix("off=").ok_or_else(|| format!("mmap: expected off=OFF, got {o:?}"))?;
                    Some((fd, parse_num(off).map_err(|e| format!("mmap off: {e}"))?))
                }
            };
            a.end()?;
            Op::Mmap { addr, len, prot, flags, file }
        }
        "munmap" => Op::Munmap { addr: a.num("ADDR")?, len: a.num("LEN")? },
        "mprotect" => {
            Op::Mprotect { addr: a.num("ADDR")?, len: a.num("LEN")?, prot: parse_prot(a.next("PROT")?)? }
        }
        "pkey_mprotect" => Op::PkeyMprotect {
            addr: a.num("ADDR")?,
            len: a.num("LEN")?,
            prot: parse_prot(a.next("PROT")?)?,
            key: a.int("KEY")?,
        },
        "mremap" => {
            let addr = a.num("ADDR")?;
            let old_len = a.num("OLDLEN")?;
            let new_len = a.num("NEWLEN")?;
            let flags = MremapFlags::from_bits_retain(flags32(a.flags(&mremap_names(), u32max)?));
            let new_addr = if flags.contains(MremapFlags::FIXED) {
                Some(a.num("NEWADDR (fixed is set)")?)
            } else {
                match a.toks.next() {
                    None => None,
                    Some(t) => Some(parse_num(t).map_err(|e| format!("mremap NEWADDR: {e}"))?),
                }
            };
            Op::Mremap { addr, old_len, new_len, flags, new_addr }
        }
        "madvise" => {
            let addr = a.num("ADDR")?;
            let len = a.num("LEN")?;
            let advice = parse_advice(a.next("ADVICE")?)?;
            Op::Madvise { addr, len, advice }
        }
        "mlock" => Op::Mlock { addr: a.num("ADDR")?, len: a.num("LEN")? },
        "mlock2" => Op::Mlock2 {
            addr: a.num("ADDR")?,
            len: a.num("LEN")?,
            flags: flags32(a.flags(&u32_names(MLOCK2_FLAG_NAMES), u32max)?),
        },
        "munlock" => Op::Munlock { addr: a.num("ADDR")?, len: a.num("LEN")? },
        "mlockall" => Op::Mlockall { flags: flags32(a.flags(&u32_names(MCL_FLAG_NAMES), u32max)?) },
        "munlockall" => Op::Munlockall,
        "mseal" => Op::Mseal { addr: a.num("ADDR")?, len: a.num("LEN")?, flags: a.flags(&[], u64::MAX)? },
        "pkey_alloc" => {
            let flags = a.flags(&[], u64::MAX)?;
            let rights = parse_flag_set(a.next("RIGHTS")?, PKEY_RIGHTS_NAMES, "pkey_alloc RIGHTS", u64::MAX)?;
            Op::PkeyAlloc { flags, rights }
        }
        "pkey_free" => Op::PkeyFree { key: a.int("KEY")? },
        "msync" => Op::Msync {
            addr: a.num("ADDR")?,
            len: a.num("LEN")?,
            flags: flags32(a.flags(&u32_names(MSYNC_FLAG_NAMES), u32max)?),
        },
        "touch" => {
            let addr = a.num("ADDR")?;
            let len = a.num("LEN")?;
            let write = match a.next("r|w")? {
                "r" => false,
                "w" => true,
                t => return Err(format!("touch: expected r or w, got {t:?}")),
            };
            Op::Touch { addr, len, write }
        }
        "fill" => {
            let addr = a.num("ADDR")?;
            let len = a.num("LEN")?;
            let byte = a.num("BYTE")?;
            let byte =
                u8::try_from(byte).map_err(|_| format!("fill BYTE {byte:#x}: not a byte (0..=255)"))?;
            Op::Fill { addr, len, byte }
        }
        "check" => Op::Check { addr: a.num("ADDR")?, len: a.num("LEN")? },
        "name" => {
            let addr = a.num("ADDR")?;
            let len = a.num("LEN")?;
            let name = match a.next("NAME or -")? {
                "-" => None,
                n => Some(check_name(n, "anon NAME")?),
            };
            Op::Name { addr, len, name }
        }
        "brk" => Op::Brk { addr: a.num("ADDR")? },
        "fork" => Op::Fork,
        "maps" => Op::Maps,
        "smaps" => match a.toks.next() {
            None => Op::Smaps { addr: None },
            Some(t) => Op::Smaps { addr: Some(parse_num(t).map_err(|e| format!("smaps ADDR: {e}"))?) },
        },
        "query" => {
            let addr = a.num("ADDR")?;
            let flags = a.flags(QUERY_FLAG_NAMES, u64::MAX)?;
            let (mut size, mut name) = (None, None);
            for t in a.toks.by_ref() {
                let (key, v) =
                    t.split_once('=').ok_or_else(|| format!("query: unexpected argument {t:?}"))?;
                let v = parse_num(v).map_err(|e| format!("query {key}=: {e}"))?;
                match key {
                    "size" if size.is_none() => size = Some(v),
                    "name" if name.is_none() => {
                        name = Some(u32::try_from(v).map_err(|_| format!("query name={v:#x}: not a u32"))?)
                    }
                    _ => return Err(format!("query: unexpected or repeated argument {t:?} (size=N name=N)")),
                }
            }
            Op::Query {
                addr,
                flags,
                size: size.unwrap_or(QUERY_DEFAULT_SIZE),
                name: name.unwrap_or(QUERY_DEFAULT_NAME),
            }
        }
        other => {
            return Err(format!("unknown op {other:?} (expected one of {})", Op::KEYWORDS.join(" ")));
        }
    };
    a.end()?;
    Ok(op)
}

impl Script {
    /// Parses a script. The first bad line stops the parse with its number and the reason.
    pub fn parse(text: &str) -> Result<Script, ParseError> {
        let mut lines = Vec::new();
        let mut files: Vec<String> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let code = raw.split_once('#').map_or(raw, |(c, _)| c);
            let toks: Vec<&str> = code.split_whitespace().collect();
            if toks.is_empty() {
                continue;
            }
            let op = parse_op(&toks, &files).map_err(|reason| ParseError { line, reason })?;
            if let Op::File { name, .. } = &op {
                files.push(name.clone());
            }
            lines.push(Line { line, op });
        }
        Ok(Script { lines })
    }

    /// A script of these ops, numbered 1, 2, 3, ... as [`Script::to_text`] prints them.
    pub fn from_ops(ops: impl IntoIterator<Item = Op>) -> Script {
        Script { lines: ops.into_iter().enumerate().map(|(i, op)| Line { line: i + 1, op }).collect() }
    }

    /// The script text: one op per line, canonical spelling. Line numbers are those of the printed text
    /// (op `i` on line `i + 1`), which are the stored ones for a script built by [`Script::from_ops`].
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for l in &self.lines {
            s.push_str(&l.op.to_string());
            s.push('\n');
        }
        s
    }

    /// The names declared by `file` ops, in order.
    pub fn file_names(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match &l.op {
                Op::File { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parse_error_names_its_line_and_shortens_a_huge_token() {
        let huge = "9".repeat(1 << 20);
        let e = Script::parse(&format!("# a comment\n\nmunmap 0x{huge} 0x1000\n")).unwrap_err();
        assert_eq!(e.line, 3);
        let shown = e.to_string();
        assert!(shown.starts_with("line 3: "), "{shown}");
        assert!(shown.len() < 300, "{} characters", shown.len());
        assert!(shown.contains(&format!("({} characters)", huge.len() + 3)) || shown.contains("characters)"));
        // An ordinary message is shown as it is.
        let e = Script::parse("mmap 0 0x1000 rw- nosuchflag\n").unwrap_err();
        assert!(!e.to_string().contains("characters)"), "{e}");
    }

    const SAMPLE: &str = "\
# two files and a few calls
file a 0x10000
file b 8192   # trailing comment

mmap 0x200000000000 0x3000 rw- private|anon|fixed_noreplace
mmap 0x200000003000 4096 r-- shared|fixed fd=a off=0x2000
munmap 0x200000001000 0x1000
mprotect 0x200000000000 0x1000 ---
mremap 0x200000000000 0x1000 0x2000 maymove|fixed 0x200000010000
mremap 0x200000000000 0x1000 0x2000 0
madvise 0x200000000000 0x1000 wipeonfork
touch 0x200000000000 0x3000 w
fill 0x200000000000 0x3000 0x5a
check 0x200000000000 0x3000
name 0x200000000000 0x1000 heap-ish
name 0x200000000000 0x1000 -
brk 0
fork
maps
";

    fn op(text: &str) -> Op {
        let s = Script::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        s.lines.last().unwrap().op.clone()
    }

    /// The canonical text of the last op of `text`, after checking that it parses back to the same op.
    fn canonical(text: &str) -> String {
        let o = op(text);
        let printed = o.to_string();
        assert_eq!(op(&printed), o, "{text:?} printed as {printed:?}");
        printed
    }

    #[test]
    fn parses_and_keeps_line_numbers() {
        let s = Script::parse(SAMPLE).unwrap();
        assert_eq!(s.lines.len(), 17);
        assert_eq!(s.lines[0].line, 2);
        assert_eq!(s.lines[2].line, 5);
        assert_eq!(
            s.lines[3].op,
            Op::Mmap {
                addr: 0x2000_0000_3000,
                len: 4096,
                prot: Prot::R,
                flags: MapFlags::SHARED | MapFlags::FIXED,
                file: Some((Fd::Name("a".into()), 0x2000)),
            }
        );
    }

    #[test]
    fn print_parse_round_trip() {
        let s = Script::parse(SAMPLE).unwrap();
        let text = s.to_text();
        let back = Script::parse(&text).unwrap();
        let ops = |s: &Script| s.lines.iter().map(|l| l.op.clone()).collect::<Vec<_>>();
        assert_eq!(ops(&back), ops(&s));
        assert_eq!(back.to_text(), text);
    }

    #[test]
    fn raw_numbers_round_trip() {
        let text = "mmap 0x1000 0x1000 0x9 private|anon|0x40002000\nmprotect 0 4096 0x1000007\n\
                    mremap 0 4096 4096 maymove|0x10\nmadvise 0 4096 14\nmadvise 0 4096 -3\nmadvise 0 4096 0x8\n";
        let s = Script::parse(text).unwrap();
        assert_eq!(
            s.lines[0].op,
            Op::Mmap {
                addr: 0x1000,
                len: 0x1000,
                prot: Prot::READ | Prot::SEM,
                flags: MapFlags::PRIVATE
                    | MapFlags::ANONYMOUS
                    | MapFlags::LOCKED
                    | MapFlags::from_bits_retain(1 << 30),
                file: None,
            }
        );
        assert_eq!(s.lines[3].op, Op::Madvise { addr: 0, len: 4096, advice: Advice::HUGEPAGE });
        assert_eq!(s.lines[4].op, Op::Madvise { addr: 0, len: 4096, advice: Advice::from_raw(-3) });
        assert_eq!(s.lines[5].op, Op::Madvise { addr: 0, len: 4096, advice: Advice::FREE });
        let printed = s.to_text();
        assert!(printed.contains("mmap 0x1000 0x1000 r--|sem private|anon|locked|0x40000000\n"), "{printed}");
        assert!(printed.contains("mprotect 0 0x1000 rwx|growsdown\n"), "{printed}");
        assert!(printed.contains("madvise 0 0x1000 hugepage\n"), "{printed}");
        assert!(printed.contains("madvise 0 0x1000 -3\n"), "{printed}");
        assert!(printed.contains("madvise 0 0x1000 free\n"), "{printed}");
        assert_eq!(Script::parse(&printed).unwrap().to_text(), printed);
    }

    #[test]
    fn prot_names_and_numbers() {
        assert_eq!(op("mprotect 0 1 --x"), Op::Mprotect { addr: 0, len: 1, prot: Prot::EXEC });
        assert_eq!(op("mprotect 0 1 -wx"), Op::Mprotect { addr: 0, len: 1, prot: Prot::WRITE | Prot::EXEC });
        assert_eq!(canonical("mprotect 0 1 rw-|sem"), "mprotect 0 1 rw-|sem");
        assert_eq!(canonical("mprotect 0 1 --x|growsdown"), "mprotect 0 1 --x|growsdown");
        assert_eq!(canonical("mprotect 0 1 r--|0x10"), "mprotect 0 1 r--|0x10");
        assert_eq!(canonical("mprotect 0 1 r--|growsup|sem"), "mprotect 0 1 r--|sem|growsup");
        assert_eq!(canonical("mprotect 0 1 0x3000009"), "mprotect 0 1 r--|sem|growsdown|growsup");
        assert_eq!(canonical("mprotect 0 1 0xf0000000"), "mprotect 0 1 ---|0xf0000000");
        assert_eq!(canonical("mprotect 0 1 0"), "mprotect 0 1 ---");
    }

    #[test]
    fn every_mmap_flag_by_name() {
        let all: Vec<&str> = MMAP_FLAG_NAMES.iter().map(|(_, n)| *n).collect();
        for (f, n) in MMAP_FLAG_NAMES {
            // Each alone (with anon when it is not a type name, so no fd= is needed).
            let text = format!("mmap 0 4096 rw- {n}|anon");
            let text = if *n == "anon" { "mmap 0 4096 rw- anon".to_string() } else { text };
            let o = op(&text);
            let Op::Mmap { flags, .. } = &o else { unreachable!() };
            assert!(flags.contains(*f), "{n}: {flags:?}");
            assert_eq!(op(&o.to_string()), o, "{n}");
        }
        assert_eq!(MapFlags::from_bits_retain(0x5400_0000), MMAP_FLAG_NAMES[all.len() - 2].0);
        assert_eq!(canonical("mmap 0 1 rw- private|shared|anon"), "mmap 0 1 rw- shared_validate|anon");
        assert_eq!(canonical("mmap 0 1 rw- 0x54000022"), "mmap 0 1 rw- private|anon|huge_2mb");
        assert_eq!(canonical("mmap 0 1 rw- 0x78000022"), "mmap 0 1 rw- private|anon|huge_1gb");
        // Bits 26 and 27..30: huge_1gb plus uninitialized's bit.
        assert_eq!(canonical("mmap 0 1 rw- 0x7c000022"), "mmap 0 1 rw- private|anon|uninitialized|huge_1gb");
        assert_eq!(canonical("mmap 0 1 rw- 0x50000022"), "mmap 0 1 rw- private|anon|0x50000000");
        assert_eq!(canonical("mmap 0 1 rw- 32bit|droppable|anon"), "mmap 0 1 rw- droppable|anon|32bit");
        assert_eq!(
            canonical("mmap 0 1 rw- 0x41|anon|0x80000000"),
            "mmap 0 1 rw- shared|anon|32bit|0x80000000"
        );
        assert_eq!(
            canonical(
                "mmap 0 1 rw- shared_validate|anon|stack|hugetlb|sync|nonblock|denywrite|executable|locked"
            ),
            "mmap 0 1 rw- shared_validate|anon|denywrite|executable|locked|nonblock|stack|hugetlb|sync"
        );
    }

    #[test]
    fn every_advice_by_name_and_number() {
        for (a, n) in ADVICE_NAMES {
            assert_eq!(op(&format!("madvise 0 1 {n}")), Op::Madvise { addr: 0, len: 1, advice: *a });
            assert_eq!(op(&format!("madvise 0 1 {}", a.raw())), Op::Madvise { addr: 0, len: 1, advice: *a });
            assert_eq!(canonical(&format!("madvise 0 1 {}", a.raw())), format!("madvise 0 1 {n}"));
            // Every name is the MADV_ name of its value, lower-cased.
            assert_eq!(a.name().map(|m| m.trim_start_matches("MADV_").to_lowercase()), Some(n.to_string()));
        }
        assert_eq!(ADVICE_NAMES.len(), Advice::known().count());
        assert_eq!(canonical("madvise 0 1 0x64"), "madvise 0 1 hwpoison");
        assert_eq!(canonical("madvise 0 1 -0x80000000"), "madvise 0 1 -2147483648");
        assert_eq!(canonical("madvise 0 1 26"), "madvise 0 1 26");
    }

    #[test]
    fn new_calls_parse_and_print() {
        let cases: &[(&str, Op, &str)] = &[
            (
                "mlock 0x200000000000 8192",
                Op::Mlock { addr: 0x2000_0000_0000, len: 8192 },
                "mlock 0x200000000000 0x2000",
            ),
            ("mlock2 0 1 onfault", Op::Mlock2 { addr: 0, len: 1, flags: 1 }, "mlock2 0 1 onfault"),
            ("mlock2 0 1 0", Op::Mlock2 { addr: 0, len: 1, flags: 0 }, "mlock2 0 1 0"),
            (
                "mlock2 0 1 onfault|0x80000000",
                Op::Mlock2 { addr: 0, len: 1, flags: 0x8000_0001 },
                "mlock2 0 1 onfault|0x80000000",
            ),
            ("mlock2 0 1 3", Op::Mlock2 { addr: 0, len: 1, flags: 3 }, "mlock2 0 1 onfault|0x2"),
            ("munlock 4096 0", Op::Munlock { addr: 4096, len: 0 }, "munlock 0x1000 0"),
            ("mlockall current|future", Op::Mlockall { flags: 3 }, "mlockall current|future"),
            ("mlockall future|onfault|current", Op::Mlockall { flags: 7 }, "mlockall current|future|onfault"),
            ("mlockall 0", Op::Mlockall { flags: 0 }, "mlockall 0"),
            ("mlockall 0x8", Op::Mlockall { flags: 8 }, "mlockall 0x8"),
            ("munlockall", Op::Munlockall, "munlockall"),
            ("mseal 0 4096 0", Op::Mseal { addr: 0, len: 4096, flags: 0 }, "mseal 0 0x1000 0"),
            (
                "mseal 0 1 0xffffffffffffffff",
                Op::Mseal { addr: 0, len: 1, flags: u64::MAX },
                "mseal 0 1 0xffffffffffffffff",
            ),
            ("pkey_alloc 0 0", Op::PkeyAlloc { flags: 0, rights: 0 }, "pkey_alloc 0 0"),
            (
                "pkey_alloc 0 disable_write|disable_access",
                Op::PkeyAlloc { flags: 0, rights: 3 },
                "pkey_alloc 0 disable_access|disable_write",
            ),
            (
                "pkey_alloc 1 0x100000000",
                Op::PkeyAlloc { flags: 1, rights: 1 << 32 },
                "pkey_alloc 0x1 0x100000000",
            ),
            ("pkey_free -1", Op::PkeyFree { key: -1 }, "pkey_free -1"),
            ("pkey_free 0x10", Op::PkeyFree { key: 16 }, "pkey_free 16"),
            ("pkey_free 2147483647", Op::PkeyFree { key: i32::MAX }, "pkey_free 2147483647"),
            ("pkey_free -2147483648", Op::PkeyFree { key: i32::MIN }, "pkey_free -2147483648"),
            (
                "pkey_mprotect 0x200000000000 4096 rw- -1",
                Op::PkeyMprotect { addr: 0x2000_0000_0000, len: 4096, prot: Prot::RW, key: -1 },
                "pkey_mprotect 0x200000000000 0x1000 rw- -1",
            ),
            (
                "pkey_mprotect 0 1 --x|sem 3",
                Op::PkeyMprotect { addr: 0, len: 1, prot: Prot::EXEC | Prot::SEM, key: 3 },
                "pkey_mprotect 0 1 --x|sem 3",
            ),
            (
                "msync 0 1 sync|invalidate",
                Op::Msync { addr: 0, len: 1, flags: 6 },
                "msync 0 1 invalidate|sync",
            ),
            ("msync 0 1 async|sync", Op::Msync { addr: 0, len: 1, flags: 5 }, "msync 0 1 async|sync"),
            ("msync 0 1 0", Op::Msync { addr: 0, len: 1, flags: 0 }, "msync 0 1 0"),
            ("msync 0 1 0x10", Op::Msync { addr: 0, len: 1, flags: 16 }, "msync 0 1 0x10"),
            ("ftruncate f 0", Op::Ftruncate { name: "f".into(), size: 0 }, "ftruncate f 0"),
            (
                "fill 0x200000000000 8192 0x5a",
                Op::Fill { addr: 0x2000_0000_0000, len: 8192, byte: 0x5a },
                "fill 0x200000000000 0x2000 90",
            ),
            ("fill 0 0 0", Op::Fill { addr: 0, len: 0, byte: 0 }, "fill 0 0 0"),
            (
                "fill 0x200000000123 0xffffffffffffffff 255",
                Op::Fill { addr: 0x2000_0000_0123, len: u64::MAX, byte: 255 },
                "fill 0x200000000123 0xffffffffffffffff 255",
            ),
            (
                "check 0x200000000000 4096",
                Op::Check { addr: 0x2000_0000_0000, len: 4096 },
                "check 0x200000000000 0x1000",
            ),
            ("check 5 0", Op::Check { addr: 5, len: 0 }, "check 5 0"),
            (
                "ftruncate f 0x8000000000000000",
                Op::Ftruncate { name: "f".into(), size: 1 << 63 },
                "ftruncate f 0x8000000000000000",
            ),
            (
                "mremap 0x1000 4096 8192 maymove|dontunmap 0x200000000000",
                Op::Mremap {
                    addr: 0x1000,
                    old_len: 4096,
                    new_len: 8192,
                    flags: MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP,
                    new_addr: Some(0x2000_0000_0000),
                },
                "mremap 0x1000 0x1000 0x2000 maymove|dontunmap 0x200000000000",
            ),
            (
                "mremap 0x1000 4096 8192 0 0",
                Op::Mremap {
                    addr: 0x1000,
                    old_len: 4096,
                    new_len: 8192,
                    flags: MremapFlags::empty(),
                    new_addr: Some(0),
                },
                "mremap 0x1000 0x1000 0x2000 0 0",
            ),
            (
                "mmap 0 4096 rw- private fd=nosuch off=0",
                Op::Mmap {
                    addr: 0,
                    len: 4096,
                    prot: Prot::RW,
                    flags: MapFlags::PRIVATE,
                    file: Some((Fd::Name("nosuch".into()), 0)),
                },
                "mmap 0 0x1000 rw- private fd=nosuch off=0",
            ),
            (
                "mmap 0 4096 rw- private fd=-1 off=4096",
                Op::Mmap {
                    addr: 0,
                    len: 4096,
                    prot: Prot::RW,
                    flags: MapFlags::PRIVATE,
                    file: Some((Fd::MinusOne, 4096)),
                },
                "mmap 0 0x1000 rw- private fd=-1 off=0x1000",
            ),
            (
                // No anon flag and no fd=: fd -1, offset 0 (EBADF on both targets), printed as written.
                "mmap 0x1000 0x1000 rw- private",
                Op::Mmap { addr: 0x1000, len: 0x1000, prot: Prot::RW, flags: MapFlags::PRIVATE, file: None },
                "mmap 0x1000 0x1000 rw- private",
            ),
            (
                "mmap 0 4096 rw- private|anon fd=-1 off=0xfffffffffffff000",
                Op::Mmap {
                    addr: 0,
                    len: 4096,
                    prot: Prot::RW,
                    flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS,
                    file: Some((Fd::MinusOne, 0xffff_ffff_ffff_f000)),
                },
                "mmap 0 0x1000 rw- private|anon fd=-1 off=0xfffffffffffff000",
            ),
        ];
        for (text, want, printed) in cases {
            assert_eq!(&op(text), want, "{text}");
            assert_eq!(&canonical(text), printed, "{text}");
            assert_eq!(want.keyword(), text.split_whitespace().next().unwrap());
        }
        // Every keyword is listed once, and every op's keyword is listed.
        for (_, o, _) in cases {
            assert!(Op::KEYWORDS.contains(&o.keyword()));
        }
    }

    #[test]
    fn proc_readers_parse_and_print() {
        let cases = [
            ("smaps", Op::Smaps { addr: None }, "smaps"),
            ("smaps 0x200000001000", Op::Smaps { addr: Some(0x2000_0000_1000) }, "smaps 0x200000001000"),
            (
                "query 0x200000000000 covering_or_next|readable",
                Op::Query { addr: 0x2000_0000_0000, flags: 0x11, size: 104, name: 4096 },
                "query 0x200000000000 readable|covering_or_next",
            ),
            (
                "query 5 0x40|file_backed name=16 size=24",
                Op::Query { addr: 5, flags: 0x60, size: 24, name: 16 },
                "query 5 file_backed|0x40 size=24 name=16",
            ),
            ("query 0 0 name=0", Op::Query { addr: 0, flags: 0, size: 104, name: 0 }, "query 0 0 name=0"),
        ];
        for (text, op, canonical) in cases {
            assert_eq!(Script::parse(text).unwrap().lines[0].op, op, "{text}");
            assert_eq!(op.to_string(), canonical);
            assert_eq!(Script::parse(canonical).unwrap().lines[0].op, op);
        }
        for bad in
            ["smaps 1 2", "query 1", "query 1 bogus", "query 1 0 size=1 size=2", "query 1 0 name=0x100000000"]
        {
            assert!(Script::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_bad_lines_with_number_and_reason() {
        let cases = [
            ("munmap 0x1000", 1, "missing LEN"),
            ("munmap 0x1000 0x1000 7", 1, "extra argument"),
            ("mprotect 0 4096 rw", 1, "three characters"),
            ("mprotect 0 4096 0x3|sem", 1, "must start with three characters"),
            ("mprotect 0 4096 rw-|bogus", 1, "PROT flag \"bogus\" unknown"),
            ("mprotect 0 4096 rw-|sem|0x8", 1, "given twice"),
            ("mprotect 0 4096 rw-|0x1", 1, "given twice"),
            ("mprotect 0 4096 rw-|0x100000000", 1, "32-bit"),
            ("mremap 0 4096 8192 fixed", 1, "NEWADDR"),
            ("mremap 0 4096 8192 maymove|maymove", 1, "twice"),
            ("mremap 0 4096 8192 maymove 0xzz", 1, "mremap NEWADDR"),
            ("mremap 0 4096 8192 maymove 0x1000 7", 1, "extra argument"),
            ("madvise 0 4096 willneed2", 1, "unknown"),
            ("madvise 0 4096 0x100000000", 1, "32-bit"),
            ("madvise 0 4096 -x", 1, "unknown"),
            ("mmap 0 4096 0x100000000 private|anon", 1, "PROT"),
            ("mmap 0 4096 rw- private|anon|0x2", 1, "twice"),
            ("mmap 0 4096 rw- shared_validate|private|anon", 1, "twice"),
            ("mmap 0 4096 rw- huge_2mb|uninitialized|anon", 1, "twice"),
            ("mmap 0 4096 rw- private|anon|0x100000000", 1, "32-bit"),
            ("mmap 0 4096 rw- private fd=3 off=0", 1, "must not start with a digit"),
            ("mmap 0 4096 rw- private fd=-2 off=0", 1, "must not start with a digit or '-'"),
            ("mmap 0 4096 rw- private fd=a", 1, "missing off=OFF"),
            ("mmap 0 4096 rw- private fd=a off=0x", 1, "no digits"),
            ("mmap 0 4096 rw- private fd=a of=0", 1, "expected off=OFF"),
            ("mmap 0 4096 rw- private|anon 7", 1, "expected fd=FD"),
            ("touch 0 4096 x", 1, "r or w"),
            ("fill 0 4096", 1, "missing BYTE"),
            ("fill 0 4096 256", 1, "fill BYTE 0x100: not a byte"),
            ("fill 0 4096 -1", 1, "fill BYTE"),
            ("fill 0 4096 a", 1, "fill BYTE"),
            ("fill 0 4096 1 2", 1, "extra argument"),
            ("check 0", 1, "missing LEN"),
            ("check 0 1 2", 1, "extra argument"),
            ("frob 1 2", 1, "unknown op"),
            ("brk 0xzz", 1, "number"),
            ("munmap 99999999999999999999999 1", 1, "number"),
            ("file a 1\nfile a 2", 2, "twice"),
            ("file 1a 1", 1, "must not start with a digit"),
            ("file -x 1", 1, "must not start with a digit or '-'"),
            ("file a=b 1", 1, "without '#', '='"),
            ("mmap 0 4096 rw- private|bogus|anon", 1, "unknown"),
            ("mlock 0", 1, "missing LEN"),
            ("mlock 0 1 2", 1, "extra argument"),
            ("mlock2 0 1", 1, "missing FLAGS"),
            (
                "mlock2 0 1 current",
                1,
                "mlock2 flag \"current\" unknown (expected 0 or |-joined numbers and onfault)",
            ),
            ("mlock2 0 1 0x100000000", 1, "not a 32-bit number"),
            ("munlock 0", 1, "missing LEN"),
            ("mlockall", 1, "missing FLAGS"),
            ("mlockall now", 1, "current future onfault"),
            ("mlockall current|current", 1, "given twice"),
            ("munlockall 0", 1, "extra argument"),
            ("mseal 0 1", 1, "missing FLAGS"),
            ("mseal 0 1 seal", 1, "mseal flag \"seal\" unknown (expected a number)"),
            ("mseal 0 1 0x10000000000000000", 1, "not a 64-bit number"),
            ("pkey_alloc 0", 1, "missing RIGHTS"),
            ("pkey_alloc x 0", 1, "unknown (expected a number)"),
            ("pkey_alloc 0 disable_read", 1, "disable_access disable_write"),
            ("pkey_free", 1, "missing KEY"),
            ("pkey_free x", 1, "pkey_free KEY \"x\": not an int"),
            ("pkey_free 2147483648", 1, "not a 32-bit int"),
            ("pkey_free -2147483649", 1, "not a 32-bit int"),
            ("pkey_mprotect 0 1 rw-", 1, "missing KEY"),
            ("pkey_mprotect 0 1 rw- 1 2", 1, "extra argument"),
            ("msync 0 1 flush", 1, "async invalidate sync"),
            ("msync 0 1 sync|0x4", 1, "given twice"),
            ("ftruncate 0", 1, "must not start with a digit"),
            ("ftruncate f", 1, "missing SIZE"),
            ("ftruncate f -1", 1, "ftruncate SIZE"),
            ("ftruncate f 1 2", 1, "extra argument"),
            ("name 0 4096 a=b", 1, "anon NAME \"a=b\": one token"),
            ("mmap 0 4096 rw- private fd=a=b off=0", 1, "fd=NAME \"a=b\": one token"),
        ];
        for (text, line, needle) in cases {
            let e = Script::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.reason.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn undeclared_names_and_late_declarations_parse() {
        // fd=NAME before or without a declaration is a descriptor that is not open (not a parse error).
        let s = Script::parse("mmap 0 4096 r-- private fd=a off=0\nfile a 4096\nftruncate b 0\n").unwrap();
        assert_eq!(s.file_names(), vec!["a"]);
        assert_eq!(s.lines[2].op, Op::Ftruncate { name: "b".into(), size: 0 });
    }
}
