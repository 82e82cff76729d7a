//! The op-script syntax: the AST, the parser (errors name the line and the reason) and the printer.
//!
//! # Grammar (one call per line; `../shared/DESIGN.md`, "Op scripts")
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
//! * PROT is three characters, `r`/`-`, `w`/`-`, `x`/`-` (`rw-`, `---`).
//! * mmap FLAGS are `|`-joined from `private shared anon fixed fixed_noreplace growsdown populate noreserve`,
//!   or `0` for none (the kernel then says EINVAL: neither private nor shared). Each flag at most once.
//! * mremap FLAGS are `0` or `|`-joined from `maymove fixed dontunmap`. NEWADDR is given exactly when `fixed`
//!   is (the parser enforces it: without `fixed` the kernel ignores new_address).
//! * ADVICE is one of `dontneed free dontfork dofork wipeonfork keeponfork`.
//! * A file NAME and an anon NAME are one token without `#`, `=` or blanks; `name ADDR LEN -` clears the name.
//!   `fd=NAME` must refer to a `file` declared on an earlier line, and a NAME is declared once; `fd=` and
//!   `off=` come together and only with mmap. Anonymous mappings (flag `anon`) take no `fd=`; file mappings
//!   (no `anon`) need one.
//!
//! The printer ([`Script::to_text`]) writes one op per line in canonical spelling (flags in the order listed
//! above, numbers as `0x` hex except sizes below 4096 and zero), so that `parse(print(s))` gives the same ops.

use core::fmt;

/// Protection bits of mmap/mprotect (`PROT_READ` 1, `PROT_WRITE` 2, `PROT_EXEC` 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Prot {
    /// `r`: PROT_READ.
    pub read: bool,
    /// `w`: PROT_WRITE.
    pub write: bool,
    /// `x`: PROT_EXEC.
    pub exec: bool,
}

impl Prot {
    /// `rw-`.
    pub const RW: Prot = Prot { read: true, write: true, exec: false };
    /// `r--`.
    pub const R: Prot = Prot { read: true, write: false, exec: false };
    /// `---`.
    pub const NONE: Prot = Prot { read: false, write: false, exec: false };

    /// The Linux `PROT_*` bits.
    pub fn bits(self) -> u32 {
        u32::from(self.read) | (u32::from(self.write) << 1) | (u32::from(self.exec) << 2)
    }

    /// From the low three `PROT_*` bits.
    pub fn from_bits(b: u32) -> Self {
        Prot { read: b & 1 != 0, write: b & 2 != 0, exec: b & 4 != 0 }
    }

    fn parse(s: &str) -> Result<Self, String> {
        let b = s.as_bytes();
        let ok = b.len() == 3
            && matches!(b[0], b'r' | b'-')
            && matches!(b[1], b'w' | b'-')
            && matches!(b[2], b'x' | b'-');
        if !ok {
            return Err(format!("PROT {s:?}: expected three characters like rw- or r-x"));
        }
        Ok(Prot { read: b[0] == b'r', write: b[1] == b'w', exec: b[2] == b'x' })
    }
}

impl fmt::Display for Prot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            if self.read { 'r' } else { '-' },
            if self.write { 'w' } else { '-' },
            if self.exec { 'x' } else { '-' }
        )
    }
}

/// Flags of mmap, as the Linux `MAP_*` bits (x86-64 values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MmapFlags(pub u32);

impl MmapFlags {
    /// MAP_SHARED.
    pub const SHARED: u32 = 0x01;
    /// MAP_PRIVATE.
    pub const PRIVATE: u32 = 0x02;
    /// MAP_FIXED.
    pub const FIXED: u32 = 0x10;
    /// MAP_ANONYMOUS.
    pub const ANON: u32 = 0x20;
    /// MAP_GROWSDOWN.
    pub const GROWSDOWN: u32 = 0x100;
    /// MAP_NORESERVE.
    pub const NORESERVE: u32 = 0x4000;
    /// MAP_POPULATE.
    pub const POPULATE: u32 = 0x8000;
    /// MAP_FIXED_NOREPLACE.
    pub const FIXED_NOREPLACE: u32 = 0x10_0000;

    /// Script spellings in canonical print order.
    pub const NAMES: &'static [(u32, &'static str)] = &[
        (Self::PRIVATE, "private"),
        (Self::SHARED, "shared"),
        (Self::ANON, "anon"),
        (Self::FIXED, "fixed"),
        (Self::FIXED_NOREPLACE, "fixed_noreplace"),
        (Self::GROWSDOWN, "growsdown"),
        (Self::POPULATE, "populate"),
        (Self::NORESERVE, "noreserve"),
    ];

    /// Whether all of `bits` are set.
    pub fn has(self, bits: u32) -> bool {
        self.0 & bits == bits
    }
}

/// Flags of mremap (`MREMAP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MremapFlags(pub u32);

impl MremapFlags {
    /// MREMAP_MAYMOVE.
    pub const MAYMOVE: u32 = 1;
    /// MREMAP_FIXED.
    pub const FIXED: u32 = 2;
    /// MREMAP_DONTUNMAP.
    pub const DONTUNMAP: u32 = 4;

    /// Script spellings in canonical print order.
    pub const NAMES: &'static [(u32, &'static str)] =
        &[(Self::MAYMOVE, "maymove"), (Self::FIXED, "fixed"), (Self::DONTUNMAP, "dontunmap")];

    /// Whether all of `bits` are set.
    pub fn has(self, bits: u32) -> bool {
        self.0 & bits == bits
    }
}

fn parse_flag_set(s: &str, names: &[(u32, &str)], what: &str) -> Result<u32, String> {
    if s == "0" {
        return Ok(0);
    }
    let mut bits = 0;
    for part in s.split('|') {
        let Some((b, _)) = names.iter().find(|(_, n)| *n == part) else {
            let all: Vec<&str> = names.iter().map(|(_, n)| *n).collect();
            return Err(format!("{what} flag {part:?} unknown (expected 0 or |-joined {})", all.join(" ")));
        };
        if bits & b != 0 {
            return Err(format!("{what} flag {part:?} given twice"));
        }
        bits |= b;
    }
    Ok(bits)
}

fn print_flag_set(bits: u32, names: &[(u32, &str)]) -> String {
    let parts: Vec<&str> = names.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| *n).collect();
    if parts.is_empty() { "0".into() } else { parts.join("|") }
}

/// madvise advice (`MADV_*` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Advice {
    /// MADV_DONTNEED (4): drop the pages.
    DontNeed,
    /// MADV_FREE (8): lazily free private anonymous pages.
    Free,
    /// MADV_DONTFORK (10): set VM_DONTCOPY.
    DontFork,
    /// MADV_DOFORK (11): clear VM_DONTCOPY.
    DoFork,
    /// MADV_WIPEONFORK (18): set VM_WIPEONFORK (private anonymous only).
    WipeOnFork,
    /// MADV_KEEPONFORK (19): clear VM_WIPEONFORK.
    KeepOnFork,
}

impl Advice {
    /// All advices with their script spelling.
    pub const ALL: &'static [(Advice, &'static str)] = &[
        (Advice::DontNeed, "dontneed"),
        (Advice::Free, "free"),
        (Advice::DontFork, "dontfork"),
        (Advice::DoFork, "dofork"),
        (Advice::WipeOnFork, "wipeonfork"),
        (Advice::KeepOnFork, "keeponfork"),
    ];

    /// The Linux `MADV_*` value.
    pub fn linux_value(self) -> i32 {
        match self {
            Advice::DontNeed => 4,
            Advice::Free => 8,
            Advice::DontFork => 10,
            Advice::DoFork => 11,
            Advice::WipeOnFork => 18,
            Advice::KeepOnFork => 19,
        }
    }

    /// The script spelling.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(a, _)| *a == self).map(|(_, n)| *n).unwrap_or("?")
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
        flags: MmapFlags,
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
                    "mmap {} {} {prot} {}",
                    num(*addr),
                    num(*len),
                    print_flag_set(flags.0, MmapFlags::NAMES)
                )?;
                if let Some((name, off)) = file {
                    write!(f, " fd={name} off={}", num(*off))?;
                }
                Ok(())
            }
            Op::Munmap { addr, len } => write!(f, "munmap {} {}", num(*addr), num(*len)),
            Op::Mprotect { addr, len, prot } => write!(f, "mprotect {} {} {prot}", num(*addr), num(*len)),
            Op::Mremap { addr, old_len, new_len, flags, new_addr } => {
                write!(
                    f,
                    "mremap {} {} {} {}",
                    num(*addr),
                    num(*old_len),
                    num(*new_len),
                    print_flag_set(flags.0, MremapFlags::NAMES)
                )?;
                if let Some(n) = new_addr {
                    write!(f, " {}", num(*n))?;
                }
                Ok(())
            }
            Op::Madvise { addr, len, advice } => {
                write!(f, "madvise {} {} {}", num(*addr), num(*len), advice.name())
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
            let prot = Prot::parse(a.next("PROT")?)?;
            let flags = MmapFlags(parse_flag_set(a.next("FLAGS")?, MmapFlags::NAMES, "mmap")?);
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
            match (&file, flags.has(MmapFlags::ANON)) {
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
            Op::Mprotect { addr: a.num("ADDR")?, len: a.num("LEN")?, prot: Prot::parse(a.next("PROT")?)? }
        }
        "mremap" => {
            let addr = a.num("ADDR")?;
            let old_len = a.num("OLDLEN")?;
            let new_len = a.num("NEWLEN")?;
            let flags = MremapFlags(parse_flag_set(a.next("FLAGS")?, MremapFlags::NAMES, "mremap")?);
            let new_addr =
                if flags.has(MremapFlags::FIXED) { Some(a.num("NEWADDR (fixed is set)")?) } else { None };
            Op::Mremap { addr, old_len, new_len, flags, new_addr }
        }
        "madvise" => {
            let addr = a.num("ADDR")?;
            let len = a.num("LEN")?;
            let s = a.next("ADVICE")?;
            let advice = Advice::ALL.iter().find(|(_, n)| *n == s).map(|(v, _)| *v).ok_or_else(|| {
                let all: Vec<&str> = Advice::ALL.iter().map(|(_, n)| *n).collect();
                format!("madvise ADVICE {s:?} unknown (expected one of {})", all.join(" "))
            })?;
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
                flags: MmapFlags(MmapFlags::SHARED | MmapFlags::FIXED),
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
