//! The op-script syntax: the AST, the parser (errors name the line and the reason) and the printer.
//!
//! # Grammar (one call per line)
//!
//! ```text
//! file     NAME SIZE                          create a backing file of SIZE bytes, used as fd=NAME
//! mmap     ADDR LEN PROT FLAGS [fd=NAME off=OFF]
//! munmap   ADDR LEN
//! mprotect ADDR LEN PROT
//! mremap   ADDR OLDLEN NEWLEN FLAGS [NEWADDR]
//! madvise  ADDR LEN ADVICE
//! touch    ADDR LEN r|w
//! name     ADDR LEN NAME|-
//! brk      ADDR
//! fork
//! maps
//! ```
//!
//! * Tokens are separated by blanks; `#` starts a comment that runs to the end of the line; blank lines are
//!   allowed. Line numbers (1-based, counting every line) are kept with each op: results print them.
//! * Numbers are decimal or `0x` hex (`0X` accepted), unsigned 64-bit.
//! * PROT is three characters, `r`/`-`, `w`/`-`, `x`/`-` (`rw-`, `---`), or a raw number for any other
//!   `PROT_*` bits (`0x8` is `PROT_SEM`; unknown bits reach the target as given).
//! * mmap FLAGS are `|`-joined from `private shared anon fixed fixed_noreplace growsdown populate noreserve`
//!   and raw numbers (any `MAP_*` bits, e.g. `private|anon|0x2000` for `MAP_LOCKED`), or `0` for none (the
//!   kernel then says EINVAL: neither private nor shared). Each bit at most once.
//! * mremap FLAGS are `0` or `|`-joined from `maymove fixed dontunmap` and raw numbers. NEWADDR is given
//!   exactly when `fixed` is (the parser enforces it: without `fixed` the kernel ignores new_address).
//! * ADVICE is one of `dontneed free dontfork dofork wipeonfork keeponfork`, or a raw `int` (`14` is
//!   `MADV_HUGEPAGE`; `-1` is passed as is).
//! * The flag types are `vmspace_abi`'s ([`Prot`], [`MapFlags`], [`MremapFlags`], [`Advice`]): they keep every
//!   raw value, so anything the syntax expresses reaches both targets unchanged.
//! * A file NAME and an anon NAME are one token without `#`, `=` or blanks; `name ADDR LEN -` clears the name.
//!   `fd=NAME` must refer to a `file` declared on an earlier line, and a NAME is declared once; `fd=` and
//!   `off=` come together and only with mmap. Anonymous mappings (flag `anon`) take no `fd=`; file mappings
//!   (no `anon`) need one.
//!
//! The printer ([`Script::to_text`]) writes one op per line in canonical spelling (flags in the order listed
//! above and unnamed bits last as one hex number, PROT as `rwx` when it has only those bits, advice by name when
//! it has one, numbers as `0x` hex except sizes below 4096 and zero), so that `parse(print(s))` gives the same
//! ops.

use core::fmt;

use vmspace_abi::{Advice, MapFlags, MremapFlags, Prot};

/// Parses PROT: the `rwx` form, or a raw number (any `PROT_*` bits, known or not).
fn parse_prot(s: &str) -> Result<Prot, String> {
    let b = s.as_bytes();
    if b.len() == 3
        && matches!(b[0], b'r' | b'-')
        && matches!(b[1], b'w' | b'-')
        && matches!(b[2], b'x' | b'-')
    {
        let mut p = Prot::NONE;
        p.set(Prot::READ, b[0] == b'r');
        p.set(Prot::WRITE, b[1] == b'w');
        p.set(Prot::EXEC, b[2] == b'x');
        return Ok(p);
    }
    match parse_num(s).ok().and_then(|v| u32::try_from(v).ok()) {
        Some(v) => Ok(Prot::from_bits_retain(v)),
        None => Err(format!("PROT {s:?}: expected three characters like rw- or r-x, or a 32-bit number")),
    }
}

/// Prints PROT: `rwx` form when only the access bits are set, else the raw number in hex.
fn print_prot(p: Prot) -> String {
    if Prot::ACCESS.contains(p) {
        let c = |f: Prot, ch: char| if p.contains(f) { ch } else { '-' };
        format!("{}{}{}", c(Prot::READ, 'r'), c(Prot::WRITE, 'w'), c(Prot::EXEC, 'x'))
    } else {
        format!("{:#x}", p.bits())
    }
}

/// Script spellings of the mmap flags, in canonical print order.
pub const MMAP_FLAG_NAMES: &[(MapFlags, &str)] = &[
    (MapFlags::PRIVATE, "private"),
    (MapFlags::SHARED, "shared"),
    (MapFlags::ANONYMOUS, "anon"),
    (MapFlags::FIXED, "fixed"),
    (MapFlags::FIXED_NOREPLACE, "fixed_noreplace"),
    (MapFlags::GROWSDOWN, "growsdown"),
    (MapFlags::POPULATE, "populate"),
    (MapFlags::NORESERVE, "noreserve"),
];

/// Script spellings of the mremap flags, in canonical print order.
pub const MREMAP_FLAG_NAMES: &[(MremapFlags, &str)] = &[
    (MremapFlags::MAYMOVE, "maymove"),
    (MremapFlags::FIXED, "fixed"),
    (MremapFlags::DONTUNMAP, "dontunmap"),
];

/// Script spellings of the madvise advice the format names (the generator draws from these).
pub const ADVICE_NAMES: &[(Advice, &str)] = &[
    (Advice::DONTNEED, "dontneed"),
    (Advice::FREE, "free"),
    (Advice::DONTFORK, "dontfork"),
    (Advice::DOFORK, "dofork"),
    (Advice::WIPEONFORK, "wipeonfork"),
    (Advice::KEEPONFORK, "keeponfork"),
];

/// Parses a `|`-joined flag set of names and raw numbers (`0` alone is the empty set). A bit may be given
/// once only, by name or by number.
fn parse_flag_set(s: &str, names: &[(u32, &str)], what: &str) -> Result<u32, String> {
    if s == "0" {
        return Ok(0);
    }
    let mut bits = 0;
    for part in s.split('|') {
        let b = match names.iter().find(|(_, n)| *n == part) {
            Some((b, _)) => *b,
            None if part.starts_with(|c: char| c.is_ascii_digit()) => {
                match parse_num(part).ok().and_then(|v| u32::try_from(v).ok()) {
                    Some(v) => v,
                    None => return Err(format!("{what} flag {part:?}: not a 32-bit number")),
                }
            }
            None => {
                let all: Vec<&str> = names.iter().map(|(_, n)| *n).collect();
                return Err(format!(
                    "{what} flag {part:?} unknown (expected 0 or |-joined numbers and {})",
                    all.join(" ")
                ));
            }
        };
        if bits & b != 0 {
            return Err(format!("{what} flag {part:?} given twice"));
        }
        bits |= b;
    }
    Ok(bits)
}

/// Prints a flag set: the names of the named bits in table order, then the other bits as one hex number.
fn print_flag_set(bits: u32, names: &[(u32, &str)]) -> String {
    let mut parts: Vec<String> =
        names.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| (*n).to_string()).collect();
    let rest = bits & !names.iter().fold(0, |a, (b, _)| a | b);
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() { "0".into() } else { parts.join("|") }
}

fn mmap_names() -> Vec<(u32, &'static str)> {
    MMAP_FLAG_NAMES.iter().map(|(f, n)| (f.bits(), *n)).collect()
}

fn mremap_names() -> Vec<(u32, &'static str)> {
    MREMAP_FLAG_NAMES.iter().map(|(f, n)| (f.bits(), *n)).collect()
}

/// Parses ADVICE: a name of [`ADVICE_NAMES`] or a raw `int` (decimal or hex, `-` for negative values).
fn parse_advice(s: &str) -> Result<Advice, String> {
    if let Some((a, _)) = ADVICE_NAMES.iter().find(|(_, n)| *n == s) {
        return Ok(*a);
    }
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    if digits.starts_with(|c: char| c.is_ascii_digit()) {
        let v = parse_num(digits).ok().and_then(|v| i64::try_from(v).ok());
        let v = v.map(|v| if neg { -v } else { v }).and_then(|v| i32::try_from(v).ok());
        return v.map(Advice::from_raw).ok_or_else(|| format!("madvise ADVICE {s:?}: not a 32-bit int"));
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
    /// `mmap ADDR LEN PROT FLAGS [fd=NAME off=OFF]`.
    Mmap {
        /// Address (hint, or exact with fixed/fixed_noreplace).
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// Protection.
        prot: Prot,
        /// `MAP_*` flags.
        flags: MapFlags,
        /// The backing file and the byte offset into it.
        file: Option<(String, u64)>,
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
        /// New address (present exactly with `fixed`).
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
    /// `touch ADDR LEN r|w`: read or write one byte in every page.
    Touch {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// Write (`w`) rather than read (`r`).
        write: bool,
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
}

impl Op {
    /// The op's keyword (`mmap`), as result lines print it.
    pub fn keyword(&self) -> &'static str {
        match self {
            Op::File { .. } => "file",
            Op::Mmap { .. } => "mmap",
            Op::Munmap { .. } => "munmap",
            Op::Mprotect { .. } => "mprotect",
            Op::Mremap { .. } => "mremap",
            Op::Madvise { .. } => "madvise",
            Op::Touch { .. } => "touch",
            Op::Name { .. } => "name",
            Op::Brk { .. } => "brk",
            Op::Fork => "fork",
            Op::Maps => "maps",
        }
    }
}

/// Prints a number: decimal below 4096, `0x` hex from there on.
fn num(v: u64) -> String {
    if v < 4096 { v.to_string() } else { format!("{v:#x}") }
}

impl fmt::Display for Op {
    /// The op in canonical script syntax (no line number, no newline).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::File { name, size } => write!(f, "file {name} {}", num(*size)),
            Op::Mmap { addr, len, prot, flags, file } => {
                write!(
                    f,
                    "mmap {} {} {} {}",
                    num(*addr),
                    num(*len),
                    print_prot(*prot),
                    print_flag_set(flags.bits(), &mmap_names())
                )?;
                if let Some((name, off)) = file {
                    write!(f, " fd={name} off={}", num(*off))?;
                }
                Ok(())
            }
            Op::Munmap { addr, len } => write!(f, "munmap {} {}", num(*addr), num(*len)),
            Op::Mprotect { addr, len, prot } => {
                write!(f, "mprotect {} {} {}", num(*addr), num(*len), print_prot(*prot))
            }
            Op::Mremap { addr, old_len, new_len, flags, new_addr } => {
                write!(
                    f,
                    "mremap {} {} {} {}",
                    num(*addr),
                    num(*old_len),
                    num(*new_len),
                    print_flag_set(flags.bits(), &mremap_names())
                )?;
                if let Some(n) = new_addr {
                    write!(f, " {}", num(*n))?;
                }
                Ok(())
            }
            Op::Madvise { addr, len, advice } => {
                write!(f, "madvise {} {} {}", num(*addr), num(*len), print_advice(*advice))
            }
            Op::Touch { addr, len, write } => {
                write!(f, "touch {} {} {}", num(*addr), num(*len), if *write { "w" } else { "r" })
            }
            Op::Name { addr, len, name } => {
                write!(f, "name {} {} {}", num(*addr), num(*len), name.as_deref().unwrap_or("-"))
            }
            Op::Brk { addr } => write!(f, "brk {}", num(*addr)),
            Op::Fork => f.write_str("fork"),
            Op::Maps => f.write_str("maps"),
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

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
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

fn check_name(s: &str, what: &str) -> Result<String, String> {
    if s.is_empty() || s.contains(['#', '=']) || s.chars().any(char::is_whitespace) {
        return Err(format!("{what} {s:?}: one token without '#', '=' or blanks"));
    }
    Ok(s.to_string())
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
    fn end(&mut self) -> Result<(), String> {
        match self.toks.next() {
            None => Ok(()),
            Some(t) => Err(format!("{}: unexpected extra argument {t:?}", self.kw)),
        }
    }
}

fn parse_op(toks: &[&str], files: &[String]) -> Result<Op, String> {
    let (kw, rest) = toks.split_first().ok_or("empty line")?;
    let mut a = Args { toks: rest.iter(), kw };
    let op = match *kw {
        "file" => {
            let name = check_name(a.next("NAME")?, "file NAME")?;
            if files.contains(&name) {
                return Err(format!("file {name:?} declared twice"));
            }
            Op::File { name, size: a.num("SIZE")? }
        }
        "mmap" => {
            let addr = a.num("ADDR")?;
            let len = a.num("LEN")?;
            let prot = parse_prot(a.next("PROT")?)?;
            let flags = MapFlags::from_bits_retain(parse_flag_set(a.next("FLAGS")?, &mmap_names(), "mmap")?);
            let file = match a.toks.next() {
                None => None,
                Some(t) => {
                    let name =
                        t.strip_prefix("fd=").ok_or_else(|| format!("mmap: expected fd=NAME, got {t:?}"))?;
                    let name = check_name(name, "fd=NAME")?;
                    if !files.contains(&name) {
                        return Err(format!("mmap: fd={name} names no file declared before"));
                    }
                    let o = a.next("off=OFF after fd=NAME")?;
                    let off =
                        o.strip_prefix("off=").ok_or_else(|| format!("mmap: expected off=OFF, got {o:?}"))?;
                    Some((name, parse_num(off).map_err(|e| format!("mmap off: {e}"))?))
                }
            };
            a.end()?;
            match (&file, flags.contains(MapFlags::ANONYMOUS)) {
                (Some(_), true) => return Err("mmap: an anon mapping takes no fd=NAME".into()),
                (None, false) => {
                    return Err("mmap: a file mapping (no anon flag) needs fd=NAME off=OFF".into());
                }
                _ => {}
            }
            Op::Mmap { addr, len, prot, flags, file }
        }
        "munmap" => Op::Munmap { addr: a.num("ADDR")?, len: a.num("LEN")? },
        "mprotect" => {
            Op::Mprotect { addr: a.num("ADDR")?, len: a.num("LEN")?, prot: parse_prot(a.next("PROT")?)? }
        }
        "mremap" => {
            let addr = a.num("ADDR")?;
            let old_len = a.num("OLDLEN")?;
            let new_len = a.num("NEWLEN")?;
            let flags =
                MremapFlags::from_bits_retain(parse_flag_set(a.next("FLAGS")?, &mremap_names(), "mremap")?);
            let new_addr = if flags.contains(MremapFlags::FIXED) {
                Some(a.num("NEWADDR (fixed is set)")?)
            } else {
                None
            };
            Op::Mremap { addr, old_len, new_len, flags, new_addr }
        }
        "madvise" => {
            let addr = a.num("ADDR")?;
            let len = a.num("LEN")?;
            let advice = parse_advice(a.next("ADVICE")?)?;
            Op::Madvise { addr, len, advice }
        }
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
        other => return Err(format!("unknown op {other:?}")),
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
name 0x200000000000 0x1000 heap-ish
name 0x200000000000 0x1000 -
brk 0
fork
maps
";

    #[test]
    fn parses_and_keeps_line_numbers() {
        let s = Script::parse(SAMPLE).unwrap();
        assert_eq!(s.lines.len(), 15);
        assert_eq!(s.lines[0].line, 2);
        assert_eq!(s.lines[2].line, 5);
        assert_eq!(
            s.lines[3].op,
            Op::Mmap {
                addr: 0x2000_0000_3000,
                len: 4096,
                prot: Prot::R,
                flags: MapFlags::SHARED | MapFlags::FIXED,
                file: Some(("a".into(), 0x2000)),
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
        assert!(printed.contains("mmap 0x1000 0x1000 0x9 private|anon|0x40002000"), "{printed}");
        assert!(printed.contains("madvise 0 0x1000 14\n"), "{printed}");
        assert!(printed.contains("madvise 0 0x1000 free\n"), "{printed}");
        assert_eq!(Script::parse(&printed).unwrap().to_text(), printed);
    }

    #[test]
    fn rejects_bad_lines_with_number_and_reason() {
        let cases = [
            ("mmap 0x1000 0x1000 rw- private", 1, "needs fd=NAME"),
            ("file a 10\nmmap 0 4096 rw- private|anon fd=a off=0", 2, "no fd=NAME"),
            ("\n\nmmap 0 4096 rwx private fd=zz off=0", 3, "no file declared"),
            ("munmap 0x1000", 1, "missing LEN"),
            ("munmap 0x1000 0x1000 7", 1, "extra argument"),
            ("mprotect 0 4096 rw", 1, "three characters"),
            ("mremap 0 4096 8192 fixed", 1, "NEWADDR"),
            ("mremap 0 4096 8192 maymove|maymove", 1, "twice"),
            ("madvise 0 4096 willneed", 1, "unknown"),
            ("madvise 0 4096 0x100000000", 1, "32-bit"),
            ("mmap 0 4096 0x100000000 private|anon", 1, "PROT"),
            ("mmap 0 4096 rw- private|anon|0x2", 1, "twice"),
            ("touch 0 4096 x", 1, "r or w"),
            ("frob 1 2", 1, "unknown op"),
            ("brk 0xzz", 1, "number"),
            ("munmap 99999999999999999999999 1", 1, "number"),
            ("file a 1\nfile a 2", 2, "twice"),
            ("mmap 0 4096 rw- private|bogus|anon", 1, "unknown"),
        ];
        for (text, line, needle) in cases {
            let e = Script::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.reason.contains(needle), "{text:?}: {e}");
        }
    }
}
