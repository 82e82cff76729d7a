//! The canonical output of a script run and the comparison of two runs.
//!
//! # Output format
//!
//! One line per call, then a maps block after every `maps` op and once more at the end of the script:
//!
//! ```text
//! L<line> <op> = <value>
//! MAPS
//! <maps lines inside the arena>
//! END
//! ```
//!
//! * `<line>` is the op's 1-based line in the script, `<op>` its keyword.
//! * `<value>`: for mmap, mremap and brk the resulting address in `0x` hex (`0x0` for address 0); for
//!   pkey_alloc the key in decimal (`1`); for the other calls `0` on success; on failure `-E<NAME>`
//!   (`-ENOMEM`; an errno without a name prints as `-E<number>`, `-E200`). A memory access (`touch`, `fill`,
//!   `check`; `crate::ast`) that cannot access a page prints `-EFAULT <page>` with the address of the first
//!   page it could not access (pages before it were accessed). A `check` that reads its whole range prints the
//!   content hash as `0x` and exactly 16 lower-case hex digits (`0xcbf29ce484222325` for an empty range); a
//!   `check` line's `0x` value is always a hash, never an address.
//! * A result is the syscall's raw return value read as the kernel's ABI defines it (`include/linux/err.h`:
//!   `IS_ERR_VALUE`, `MAX_ERRNO` = 4095): a value in the top 4 KiB of the 64-bit space, -4095..=-1, is an
//!   error, never an address or a number. The kernel runner gets this from libc (which turns such returns into
//!   -1 and `errno`); the driver applies the same rule to whatever a target returns
//!   ([`Value::from_addr`], [`Value::from_num`]), so `0xfffffffffffffff2` from either side prints `-EFAULT`,
//!   and no output holds an address or number in that range. The printed forms do not overlap: `0` is success,
//!   a decimal number without leading zeros is a number result, `0x` hex an address (a hash on a `check`
//!   line), `-E` an error.
//! * The maps lines are the kernel's `/proc/self/maps` text for every VMA that overlaps the arena, byte for
//!   byte, with one canonicalisation so that the engine and the kernel compare: a mapping of a script file
//!   (`fd=NAME`) prints device `00:00`, inode = the file's 1-based declaration number in the script, and name
//!   `fd=NAME` (plus ` (deleted)` if the file was unlinked) instead of the runner's real path, device and
//!   inode. A shared anonymous mapping is a shmem file that the kernel shows as `/dev/zero (deleted)` with a
//!   fresh inode number on every run: its inode prints as the object's 1-based order of first appearance
//!   within that maps block (two VMAs of one object share the number; device and offset stay verbatim; a
//!   named part of the object, `[anon_shmem:NAME]`, is numbered with the object's `/dev/zero` parts). A
//!   `MAP_HUGETLB` mapping is an object on the kernel's internal hugetlbfs mount, `/anon_hugepage (deleted)`:
//!   its inode is numbered the same way and its device prints `00:00` (the mount's minor number depends on
//!   the boot).
//!   Everything else (addresses, permissions, offsets, padding, `[anon:..]` names) is verbatim.
//! * `smaps` prints a block `SMAPS`, the records' lines, `END`: each record of a VMA that overlaps the arena
//!   (with ADDR: only the VMA containing it) exactly as `/proc/self/smaps` prints it, its header line
//!   canonicalised as a maps line (the numbering of shmem and hugetlbfs objects runs within the block).
//! * `query` prints, on success, the answer as `START-END PERMS OFFSET MAJ:MIN INODE PAGESIZE[ NAME]`: the
//!   first five columns as in a maps line (hex addresses without `0x`, eight-digit hex offset, hex device,
//!   decimal inode), the page size in decimal, then the name the kernel copied out, if any, canonicalised as
//!   in maps lines (a script file's `fd=NAME`, device `00:00`, its number as inode; a shmem or hugetlbfs
//!   object's inode `1`). An answer that does not overlap the arena, or ENOENT for a query with
//!   `covering_or_next` (the kernel runner's own VMAs follow the arena; the engine has none there), prints
//!   `outside`: the runner's memory is not compared.
//!
//! # Comparison
//!
//! Two outputs compare line by line. Lines must be identical, except that two address results (mmap, mremap,
//! brk) are equal when **both** addresses lie outside the arena (hashes are not addresses: they must be equal): where the kernel puts a refused hint or a
//! moving mremap depends on the process's layout, not on the semantics under test. [`compare`] returns the
//! first difference with the lines before it as context.
//!
//! smaps records compare line by line like everything else, the page-cache counters of file mappings included:
//! the engine reads files ahead, maps the cache around faults and reclaims file pages as Linux 6.18 does
//! (`vmspace_pgtable`'s readahead module; docs/DIVERGENCES.md).

use crate::Errno;
use core::fmt;

/// The address window that scripts use and that outputs show (default: 1 GiB at `0x200000000000`, free in
/// every process on x86-64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arena {
    /// First address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
}

impl Default for Arena {
    fn default() -> Self {
        Arena { base: 0x2000_0000_0000, size: 1 << 30 }
    }
}

impl Arena {
    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }

    /// Whether `addr` lies inside the arena.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.end()
    }

    /// Whether `[start, end)` overlaps the arena.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        start < self.end() && end > self.base
    }
}

/// The result of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value {
    /// An address (mmap, mremap, brk).
    Addr(u64),
    /// Success of a call that returns no address.
    Zero,
    /// A number result other than 0, printed in decimal (pkey_alloc's key). A 0 result is [`Value::Zero`].
    Num(u64),
    /// Failure.
    Err(Errno),
    /// A memory access (`touch`, `fill`, `check`) could not access the page at this address.
    Fault(u64),
    /// The content hash a `check` read ([`crate::hash`]).
    Hash(u64),
}

/// The first raw return value that is an error (-4095 as `u64`): `include/linux/err.h`, `MAX_ERRNO`.
pub const FIRST_ERROR_VALUE: u64 = 0u64.wrapping_sub(4095);

impl Value {
    /// The value of an address-returning call (mmap, mremap, brk): the address, or the error. An "address" in
    /// the top 4 KiB (-4095..=-1) is that errno, as the kernel's ABI defines (module docs).
    pub fn from_addr(r: Result<u64, Errno>) -> Value {
        match r {
            Ok(a) if a >= FIRST_ERROR_VALUE => Value::Err(Errno::from_raw(a.wrapping_neg() as i32)),
            Ok(a) => Value::Addr(a),
            Err(e) => Value::Err(e),
        }
    }

    /// The value of a number-returning call (pkey_alloc): [`Value::Zero`] for 0, the errno for -4095..=-1,
    /// else [`Value::Num`].
    pub fn from_num(r: Result<u64, Errno>) -> Value {
        match r {
            Ok(0) => Value::Zero,
            Ok(v) if v >= FIRST_ERROR_VALUE => Value::Err(Errno::from_raw(v.wrapping_neg() as i32)),
            Ok(v) => Value::Num(v),
            Err(e) => Value::Err(e),
        }
    }

    /// The value of a call that returns 0 on success: [`Value::Zero`] or the errno.
    pub fn from_zero(r: Result<u64, Errno>) -> Value {
        r.map_or_else(Value::Err, |_| Value::Zero)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Addr(a) => write!(f, "{a:#x}"),
            Value::Zero => f.write_str("0"),
            Value::Num(v) => write!(f, "{v}"),
            Value::Err(e) => write!(f, "{e}"),
            Value::Fault(a) => write!(f, "{} {a:#x}", Errno::EFAULT),
            Value::Hash(h) => write!(f, "{h:#018x}"),
        }
    }
}

/// One entry of an output.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Entry {
    /// `L<line> <op> = <value>`.
    Call {
        /// 1-based script line.
        line: usize,
        /// The op keyword.
        op: String,
        /// The result.
        value: Value,
    },
    /// `MAPS`, the (canonical) maps lines inside the arena without their newlines, `END`.
    Maps(Vec<String>),
    /// `SMAPS`, the (canonical) smaps records' lines without their newlines, `END`.
    Smaps(Vec<String>),
    /// `L<line> <op> = <text>`: a call whose successful result is a line of text (`query`'s answer).
    Text {
        /// 1-based script line.
        line: usize,
        /// The op keyword.
        op: String,
        /// The result text.
        text: String,
    },
}

/// The keyword of the op whose successful results are [`Entry::Text`].
const QUERY: &str = "query";

/// The output of a run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// Entries in order.
    pub entries: Vec<Entry>,
}

/// A malformed output text (from [`Output::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputParseError {
    /// 1-based line in the output text.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for OutputParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "output line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for OutputParseError {}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// The keyword whose `0x` values are content hashes.
const CHECK: &str = "check";

/// A content hash as [`Value::Hash`] prints it: `0x` and exactly 16 lower-case hex digits.
fn parse_hash(s: &str) -> Option<Value> {
    let h = s.strip_prefix("0x")?;
    if h.len() != 16 || !h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    u64::from_str_radix(h, 16).ok().map(Value::Hash)
}

/// A non-zero decimal number as [`Value::Num`] prints it: digits only, no leading zero.
fn parse_decimal(s: &str) -> Option<u64> {
    if s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Output {
    /// The value of every [`Entry::Call`], in order; maps and smaps blocks and [`Entry::Text`] results are
    /// passed over.
    pub fn call_values(&self) -> Vec<Value> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Call { value, .. } => Some(*value),
                Entry::Maps(_) | Entry::Smaps(_) | Entry::Text { .. } => None,
            })
            .collect()
    }

    /// The text lines (without newlines).
    pub fn text_lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        for e in &self.entries {
            match e {
                Entry::Call { line, op, value } => v.push(format!("L{line} {op} = {value}")),
                Entry::Maps(lines) => {
                    v.push("MAPS".into());
                    v.extend(lines.iter().cloned());
                    v.push("END".into());
                }
                Entry::Smaps(lines) => {
                    v.push("SMAPS".into());
                    v.extend(lines.iter().cloned());
                    v.push("END".into());
                }
                Entry::Text { line, op, text } => v.push(format!("L{line} {op} = {text}")),
            }
        }
        v
    }

    /// The whole text, one line per entry line, each ending in a newline.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for l in self.text_lines() {
            s.push_str(&l);
            s.push('\n');
        }
        s
    }

    /// Parses text produced by [`Output::render`]. Lines end at `\n` only: a maps line may end in `\r` (a
    /// file name can, and the kernel escapes only `\n` in maps paths), which `str::lines` would drop.
    pub fn parse(text: &str) -> Result<Output, OutputParseError> {
        let mut entries = Vec::new();
        let mut maps: Option<(bool, Vec<String>)> = None;
        for (i, l) in text.split_terminator('\n').enumerate() {
            let err = |reason: String| OutputParseError { line: i + 1, reason };
            if let Some((smaps, m)) = maps.as_mut() {
                if l == "END" {
                    let lines = std::mem::take(m);
                    entries.push(if *smaps { Entry::Smaps(lines) } else { Entry::Maps(lines) });
                    maps = None;
                } else {
                    m.push(l.to_string());
                }
                continue;
            }
            if l == "MAPS" || l == "SMAPS" {
                maps = Some((l == "SMAPS", Vec::new()));
                continue;
            }
            let (head, val) =
                l.split_once(" = ").ok_or_else(|| err(format!("expected L<n> <op> = <value>: {l:?}")))?;
            let (ln, op) =
                head.split_once(' ').ok_or_else(|| err(format!("expected L<n> <op>: {head:?}")))?;
            let line: usize = ln
                .strip_prefix('L')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| err(format!("bad line tag {ln:?}")))?;
            if op == QUERY && !val.starts_with("-E") {
                entries.push(Entry::Text { line, op: op.to_string(), text: val.to_string() });
                continue;
            }
            let value = if op == CHECK && val.starts_with("0x") {
                parse_hash(val)
                    .ok_or_else(|| err(format!("bad hash {val:?} (0x and 16 lower-case hex digits)")))?
            } else if val == "0" {
                Value::Zero
            } else if let Some(v) = parse_decimal(val) {
                Value::Num(v)
            } else if let Some(a) = parse_hex(val) {
                Value::Addr(a)
            } else if let Some(rest) = val.strip_prefix("-EFAULT ") {
                Value::Fault(parse_hex(rest).ok_or_else(|| err(format!("bad fault address {rest:?}")))?)
            } else if let Some(e) = val.strip_prefix('-').and_then(Errno::from_name) {
                Value::Err(e)
            } else {
                return Err(err(format!("bad value {val:?}")));
            };
            entries.push(Entry::Call { line, op: op.to_string(), value });
        }
        if maps.is_some() {
            return Err(OutputParseError {
                line: text.split_terminator('\n').count(),
                reason: "MAPS or SMAPS without END".into(),
            });
        }
        Ok(Output { entries })
    }
}

/// One output line, flattened, with what the comparison needs to know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Flat {
    text: String,
    /// For an address result: `(line, op, address)`.
    addr: Option<(usize, String, u64)>,
}

impl Flat {
    fn plain(text: String) -> Flat {
        Flat { text, addr: None }
    }
}

fn flatten(o: &Output) -> Vec<Flat> {
    let mut v = Vec::new();
    for e in &o.entries {
        match e {
            Entry::Call { line, op, value } => {
                let addr = match value {
                    Value::Addr(a) => Some((*line, op.clone(), *a)),
                    _ => None,
                };
                v.push(Flat { text: format!("L{line} {op} = {value}"), addr });
            }
            Entry::Maps(lines) => {
                v.push(Flat::plain("MAPS".into()));
                v.extend(lines.iter().map(|l| Flat::plain(l.clone())));
                v.push(Flat::plain("END".into()));
            }
            Entry::Smaps(lines) => {
                v.push(Flat::plain("SMAPS".into()));
                v.extend(lines.iter().map(|l| Flat::plain(l.clone())));
                v.push(Flat::plain("END".into()));
            }
            Entry::Text { line, op, text } => v.push(Flat::plain(format!("L{line} {op} = {text}"))),
        }
    }
    v
}

/// The first difference between two outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// 0-based index of the differing output line.
    pub index: usize,
    /// Up to [`CONTEXT`] lines before it (equal on both sides, as printed by the left side).
    pub context: Vec<String>,
    /// The left line (`None`: the left output ended).
    pub left: Option<String>,
    /// The right line (`None`: the right output ended).
    pub right: Option<String>,
    /// Names of the two sides, for display.
    pub names: (String, String),
}

/// Lines of context shown before a difference.
pub const CONTEXT: usize = 8;

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "first difference at output line {}:", self.index + 1)?;
        for c in &self.context {
            writeln!(f, "  {c}")?;
        }
        let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "<end of output>".into());
        writeln!(f, "- {}: {}", self.names.0, show(&self.left))?;
        write!(f, "+ {}: {}", self.names.1, show(&self.right))
    }
}

/// Compares two outputs (see the module documentation); `None` when they agree.
pub fn compare(left: &Output, right: &Output, arena: Arena, names: (&str, &str)) -> Option<Difference> {
    let (l, r) = (flatten(left), flatten(right));
    for i in 0..l.len().max(r.len()) {
        let same = match (l.get(i), r.get(i)) {
            (Some(a), Some(b)) => {
                a.text == b.text
                    || matches!((&a.addr, &b.addr), (Some((la, lo, x)), Some((ra, ro, y)))
                        if la == ra && lo == ro && !arena.contains(*x) && !arena.contains(*y))
            }
            (None, None) => true,
            _ => false,
        };
        if !same {
            return Some(Difference {
                index: i,
                context: l[i.saturating_sub(CONTEXT)..i.min(l.len())]
                    .iter()
                    .map(|f| f.text.clone())
                    .collect(),
                left: l.get(i).map(|f| f.text.clone()),
                right: r.get(i).map(|f| f.text.clone()),
                names: (names.0.to_string(), names.1.to_string()),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Output {
        Output {
            entries: vec![
                Entry::Call { line: 1, op: "file".into(), value: Value::Zero },
                Entry::Call { line: 2, op: "mmap".into(), value: Value::Addr(0x2000_0000_0000) },
                Entry::Call { line: 3, op: "touch".into(), value: Value::Fault(0x2000_0000_1000) },
                Entry::Call { line: 4, op: "mprotect".into(), value: Value::Err(Errno::ENOMEM) },
                Entry::Call { line: 5, op: "brk".into(), value: Value::Addr(0x5555_0000_0000) },
                Entry::Maps(vec!["200000000000-200000001000 rw-p 00000000 00:00 0 ".into()]),
            ],
        }
    }

    #[test]
    fn call_values_are_the_calls_in_order_without_blocks_or_text() {
        let mut o = sample();
        o.entries
            .insert(2, Entry::Text { line: 9, op: "query".into(), text: "200000000000-200000001000".into() });
        o.entries.push(Entry::Smaps(vec!["Size: 4 kB".into()]));
        assert_eq!(
            o.call_values(),
            vec![
                Value::Zero,
                Value::Addr(0x2000_0000_0000),
                Value::Fault(0x2000_0000_1000),
                Value::Err(Errno::ENOMEM),
                Value::Addr(0x5555_0000_0000),
            ]
        );
    }

    #[test]
    fn check_hashes_fill_faults_and_errors_round_trip() {
        let o = Output {
            entries: vec![
                Entry::Call { line: 1, op: "check".into(), value: Value::Hash(0xcbf2_9ce4_8422_2325) },
                Entry::Call { line: 2, op: "check".into(), value: Value::Hash(5) },
                Entry::Call { line: 3, op: "check".into(), value: Value::Fault(0x2000_0000_3000) },
                Entry::Call { line: 4, op: "check".into(), value: Value::Err(Errno::ENOSYS) },
                Entry::Call { line: 5, op: "fill".into(), value: Value::Zero },
                Entry::Call { line: 6, op: "fill".into(), value: Value::Fault(0x2000_0000_1000) },
                Entry::Call { line: 7, op: "fill".into(), value: Value::Err(Errno::ENOSYS) },
                // A check's 0x value is a hash even when it would fit an address in the arena.
                Entry::Call { line: 8, op: "check".into(), value: Value::Hash(0x2000_0000_0000) },
            ],
        };
        let text = o.render();
        assert_eq!(
            text,
            "L1 check = 0xcbf29ce484222325\nL2 check = 0x0000000000000005\nL3 check = -EFAULT 0x200000003000\n\
             L4 check = -ENOSYS\nL5 fill = 0\nL6 fill = -EFAULT 0x200000001000\nL7 fill = -ENOSYS\n\
             L8 check = 0x0000200000000000\n"
        );
        assert_eq!(Output::parse(&text).unwrap(), o);
        // Hashes compare exactly: two different hashes differ even "outside the arena".
        let mut p = o.clone();
        p.entries[0] = Entry::Call { line: 1, op: "check".into(), value: Value::Hash(0xcbf2_9ce4_8422_2326) };
        let d = compare(&o, &p, Arena::default(), ("engine", "kernel")).unwrap();
        assert_eq!(d.index, 0);
        // Non-canonical hashes are refused; the same text on another op is an address.
        for bad in ["L1 check = 0x5", "L1 check = 0xCBF29CE484222325", "L1 check = 0x0cbf29ce484222325"] {
            let e = Output::parse(bad).unwrap_err();
            assert!(e.reason.contains("bad hash"), "{bad}: {e}");
        }
        assert_eq!(
            Output::parse("L1 mmap = 0x0000000000000005").unwrap().entries[0],
            Entry::Call { line: 1, op: "mmap".into(), value: Value::Addr(5) }
        );
    }

    #[test]
    fn smaps_blocks_and_query_answers_round_trip_and_compare() {
        let rec = |rss: &str| {
            vec![
                "200000000000-200000001000 rw-p 00000000 00:00 1                          fd=f".to_string(),
                format!("Rss:            {rss:>8} kB"),
                "Anonymous:             0 kB".to_string(),
            ]
        };
        let o = Output {
            entries: vec![
                Entry::Text { line: 1, op: "query".into(), text: "outside".into() },
                Entry::Call { line: 2, op: "query".into(), value: Value::Err(Errno::ENOENT) },
                Entry::Smaps(rec("4")),
            ],
        };
        let text = o.render();
        assert!(text.starts_with("L1 query = outside\nL2 query = -ENOENT\nSMAPS\n"), "{text}");
        assert_eq!(Output::parse(&text).unwrap(), o);
        // Every smaps line compares exactly, a script file's page-cache counters included.
        let mut p = o.clone();
        p.entries[2] = Entry::Smaps(rec("16"));
        assert_eq!(compare(&o, &p, Arena::default(), ("a", "b")).unwrap().index, 4);
    }

    #[test]
    fn render_parse_round_trip() {
        let o = sample();
        let text = o.render();
        assert!(text.contains("L3 touch = -EFAULT 0x200000001000\n"));
        assert!(text.contains("L4 mprotect = -ENOMEM\n"));
        assert!(text.ends_with("MAPS\n200000000000-200000001000 rw-p 00000000 00:00 0 \nEND\n"));
        assert_eq!(Output::parse(&text).unwrap(), o);
    }

    /// Found by the `script` fuzz target (`fuzz/regressions/script/maps-line-ending-in-cr`): a maps line
    /// ending in `\r` (a file name may) lost it on parse, so render + parse changed the output.
    #[test]
    fn maps_line_ending_in_cr_survives_the_round_trip() {
        let o = Output {
            entries: vec![Entry::Maps(vec![
                "200000000000-200000001000 r--p 00000000 08:01 12 /tmp/a\r".into(),
                "\r\r".into(),
            ])],
        };
        let text = o.render();
        assert_eq!(Output::parse(&text).unwrap(), o);
        assert_eq!(Output::parse(&text).unwrap().render(), text);
    }

    #[test]
    fn numbers_and_top_of_space_values() {
        let o = Output {
            entries: vec![
                Entry::Call { line: 1, op: "pkey_alloc".into(), value: Value::Num(1) },
                Entry::Call { line: 2, op: "pkey_alloc".into(), value: Value::Num(u64::MAX) },
                Entry::Call { line: 3, op: "mmap".into(), value: Value::Addr(0) },
                Entry::Call { line: 4, op: "mmap".into(), value: Value::Addr(FIRST_ERROR_VALUE - 1) },
                Entry::Call { line: 5, op: "pkey_alloc".into(), value: Value::Err(Errno::from_raw(4095)) },
            ],
        };
        let text = o.render();
        assert_eq!(
            text,
            "L1 pkey_alloc = 1\nL2 pkey_alloc = 18446744073709551615\nL3 mmap = 0x0\n\
             L4 mmap = 0xfffffffffffff000\nL5 pkey_alloc = -E4095\n"
        );
        assert_eq!(Output::parse(&text).unwrap(), o);
        // Non-canonical numbers are not values.
        for bad in ["L1 x = 01", "L1 x = +1", "L1 x = 1a", "L1 x = -1", "L1 x = 0x", "L1 x = -E0"] {
            assert!(Output::parse(bad).is_err(), "{bad}");
        }
        // A raw return in the top 4 KiB is an error on either side, whatever the call.
        let top = |e: i32| Ok(0u64.wrapping_sub(e as u64));
        assert_eq!(Value::from_addr(top(14)), Value::Err(Errno::EFAULT));
        assert_eq!(Value::from_addr(top(4095)), Value::Err(Errno::from_raw(4095)));
        assert_eq!(Value::from_addr(top(4096)), Value::Addr(FIRST_ERROR_VALUE - 1));
        assert_eq!(Value::from_num(top(22)), Value::Err(Errno::EINVAL));
        assert_eq!(Value::from_num(Ok(0)), Value::Zero);
        assert_eq!(Value::from_num(Ok(3)), Value::Num(3));
        assert_eq!(Value::from_addr(Ok(0)), Value::Addr(0));
        assert_eq!(Value::from_addr(Err(Errno::ENOMEM)), Value::Err(Errno::ENOMEM));
        assert_eq!(Value::from_zero(Ok(5)), Value::Zero);
        // Every error value renders as an errno that parses back to the same value.
        for e in 1..=4095 {
            let v = Value::from_addr(top(e));
            let line = format!("L1 mmap = {v}\n");
            assert_eq!(
                Output::parse(&line).unwrap().entries[0],
                Entry::Call { line: 1, op: "mmap".into(), value: v }
            );
        }
    }

    #[test]
    fn malformed_outputs_name_the_line_and_the_reason() {
        let cases = [
            ("L1 mmap 0x1000", 1, "expected L<n> <op> = <value>"),
            ("L1 mmap = 0\nL2 = 0", 2, "expected L<n> <op>"),
            ("X1 mmap = 0", 1, "bad line tag"),
            ("L1 touch = -EFAULT 12", 1, "bad fault address"),
            ("L1 mmap = 0x1g", 1, "bad value"),
            ("L1 mmap = -ENOPE", 1, "bad value"),
            ("L1 mmap = 0\nMAPS\nx", 3, "MAPS without END"),
        ];
        for (text, line, needle) in cases {
            let e = Output::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.reason.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn outside_addresses_compare_equal() {
        let a = sample();
        let mut b = sample();
        b.entries[4] = Entry::Call { line: 5, op: "brk".into(), value: Value::Addr(0x5655_0000_0000) };
        assert_eq!(compare(&a, &b, Arena::default(), ("a", "b")), None);
        // Inside vs outside is a difference.
        b.entries[1] = Entry::Call { line: 2, op: "mmap".into(), value: Value::Addr(0x7f00_0000_0000) };
        let d = compare(&a, &b, Arena::default(), ("engine", "kernel")).unwrap();
        assert_eq!(d.index, 1);
        assert_eq!(d.context, vec!["L1 file = 0".to_string()]);
        assert!(d.to_string().contains("+ kernel: L2 mmap = 0x7f0000000000"));
    }

    #[test]
    fn length_mismatch_is_a_difference() {
        let a = sample();
        let mut b = sample();
        b.entries.pop();
        let d = compare(&a, &b, Arena::default(), ("a", "b")).unwrap();
        assert_eq!(d.right, None);
        assert_eq!(d.left.as_deref(), Some("MAPS"));
    }
}
