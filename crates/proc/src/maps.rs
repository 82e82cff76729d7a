//! One line of `/proc/PID/maps`: the model, the renderer and the parser.
//!
//! # The format (Linux 6.18, 64-bit; `fs/proc/task_mmu.c: show_map_vma`)
//!
//! ```text
//! start-end perms offset major:minor inode␠[padding␠name]\n
//! ```
//!
//! * `start`, `end` and `offset` are lowercase hex, zero-padded to **at least** 8 digits (wider values are
//!   printed in full, never truncated).
//! * `perms` is four characters: `r`/`-`, `w`/`-`, `x`/`-`, then `s` when the VMA may be shared
//!   (VM_MAYSHARE) or `p` when it is private.
//! * `major` and `minor` are hex, at least 2 digits each; `inode` is decimal.
//! * The inode is **always** followed by one space. A line without a name ends right there (with that trailing
//!   space). A line with a name is first padded with spaces up to column [`PAD_COLUMN`] (72 on 64-bit; nothing
//!   is added when the prefix is already that long), then one more space, then the name.
//!
//! # Names
//!
//! The kernel prints a file path through `seq_path(.., "\n")`, which escapes a newline in the path as the
//! octal `\012` and nothing else; `d_path` appends ` (deleted)` to an unlinked file. Other names are literal:
//! `[heap]`, `[stack]`, `[anon:NAME]` (an anonymous VMA named with `PR_SET_VMA_ANON_NAME`),
//! `[anon_shmem:NAME]`, special mappings (`[vdso]`, `[vvar]`, `[vsyscall]`, ...) and, rarely, a path that
//! does not start with `/` (`anon_inode:...`). [`MapsName`] models these; its rendering is exactly the text
//! the kernel prints, and parsing any real line then rendering it gives back the same bytes.
//!
//! # Invariants
//!
//! [`MapsLine`] does not require `start < end` or page alignment: it is a record of text, and the parser
//! accepts what a kernel may print. [`MapsLine::render`] never fails.

use core::fmt;
use core::str::FromStr;

/// The column the name is padded to: `seq_setwidth(m, 25 + 6 * sizeof(void *) - 1)` = 72 on 64-bit. The name
/// itself starts one space later, at byte 73 of the line (counting from 0).
pub const PAD_COLUMN: usize = 25 + 6 * 8 - 1;

/// The permission column: three access bits and shared/private.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Perms {
    /// `r`: VM_READ.
    pub read: bool,
    /// `w`: VM_WRITE.
    pub write: bool,
    /// `x`: VM_EXEC.
    pub exec: bool,
    /// `s` when VM_MAYSHARE is set, `p` otherwise.
    pub shared: bool,
}

impl Perms {
    /// The four characters the kernel prints, e.g. `rw-p`.
    pub fn as_chars(&self) -> [u8; 4] {
        [
            if self.read { b'r' } else { b'-' },
            if self.write { b'w' } else { b'-' },
            if self.exec { b'x' } else { b'-' },
            if self.shared { b's' } else { b'p' },
        ]
    }

    /// Parses the four-character permission column.
    pub fn parse(s: &str) -> Result<Self, MapsParseError> {
        let b = s.as_bytes();
        if b.len() != 4 {
            return Err(MapsParseError::new(format!("permissions {s:?}: expected 4 characters")));
        }
        let bit = |c: u8, yes: u8| -> Result<bool, MapsParseError> {
            if c == yes {
                Ok(true)
            } else if c == b'-' {
                Ok(false)
            } else {
                Err(MapsParseError::new(format!("permissions {s:?}: expected '{}' or '-'", yes as char)))
            }
        };
        let shared = match b[3] {
            b's' => true,
            b'p' => false,
            _ => return Err(MapsParseError::new(format!("permissions {s:?}: expected 's' or 'p' last"))),
        };
        Ok(Perms { read: bit(b[0], b'r')?, write: bit(b[1], b'w')?, exec: bit(b[2], b'x')?, shared })
    }
}

impl fmt::Display for Perms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.as_chars() {
            write!(f, "{}", c as char)?;
        }
        Ok(())
    }
}

/// The name column of a maps line (see the module documentation for how each is printed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MapsName {
    /// A file path starting with `/`. `path` is the real path (a newline is a newline here; it is printed as
    /// `\012`); `deleted` appends ` (deleted)`.
    Path {
        /// The path as the file system knows it.
        path: String,
        /// The file was unlinked: ` (deleted)` follows the path.
        deleted: bool,
    },
    /// `[heap]`: the VMA overlaps the initial brk area.
    Heap,
    /// `[stack]`: the VMA contains the initial stack pointer.
    Stack,
    /// `[anon:NAME]`: an anonymous VMA named by `PR_SET_VMA_ANON_NAME`.
    Anon(String),
    /// `[anon_shmem:NAME]`: a named shared anonymous (shmem) VMA.
    AnonShmem(String),
    /// Any other bracketed name, brackets included: `[vdso]`, `[vvar]`, `[vsyscall]`, `[rollup]`, ...
    Special(String),
    /// Anything else, printed verbatim (e.g. `anon_inode:[io_uring]`, a path outside the reader's root).
    Other(String),
}

impl MapsName {
    /// Parses the name column (the text after the padding, without the newline).
    pub fn parse(s: &str) -> Result<Self, MapsParseError> {
        if s.is_empty() {
            return Err(MapsParseError::new("empty name after the padding"));
        }
        if let Some(rest) = s.strip_prefix('/') {
            let (body, deleted) = match rest.strip_suffix(" (deleted)") {
                Some(b) => (b, true),
                None => (rest, false),
            };
            return Ok(MapsName::Path { path: format!("/{}", body.replace("\\012", "\n")), deleted });
        }
        if s == "[heap]" {
            return Ok(MapsName::Heap);
        }
        if s == "[stack]" {
            return Ok(MapsName::Stack);
        }
        if let Some(inner) = s.strip_prefix("[anon:").and_then(|r| r.strip_suffix(']')) {
            return Ok(MapsName::Anon(inner.to_string()));
        }
        if let Some(inner) = s.strip_prefix("[anon_shmem:").and_then(|r| r.strip_suffix(']')) {
            return Ok(MapsName::AnonShmem(inner.to_string()));
        }
        if s.starts_with('[') && s.ends_with(']') {
            return Ok(MapsName::Special(s.to_string()));
        }
        Ok(MapsName::Other(s.to_string()))
    }

    /// Appends the name exactly as the kernel prints it.
    pub fn render_into(&self, out: &mut String) {
        self.as_ref().render_into(out);
    }

    /// The name borrowed ([`MapsNameRef`]).
    pub fn as_ref(&self) -> MapsNameRef<'_> {
        match self {
            MapsName::Path { path, deleted } => MapsNameRef::Path { path, deleted: *deleted },
            MapsName::Heap => MapsNameRef::Heap,
            MapsName::Stack => MapsNameRef::Stack,
            MapsName::Anon(n) => MapsNameRef::Anon(n),
            MapsName::AnonShmem(n) => MapsNameRef::AnonShmem(n),
            MapsName::Special(s) => MapsNameRef::Special(s),
            MapsName::Other(s) => MapsNameRef::Other(s),
        }
    }
}

/// A [`MapsName`] borrowed from wherever its text lives (a file's path, a VMA's name): what a renderer that
/// must not allocate per line takes ([`MapsLine::render_with_name`]). The variants mean what
/// [`MapsName`]'s do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum MapsNameRef<'a> {
    Path { path: &'a str, deleted: bool },
    Heap,
    Stack,
    Anon(&'a str),
    AnonShmem(&'a str),
    Special(&'a str),
    Other(&'a str),
}

impl MapsNameRef<'_> {
    /// Appends the name exactly as the kernel prints it.
    pub fn render_into(self, out: &mut String) {
        match self {
            MapsNameRef::Path { path, deleted } => {
                // seq_path(m, path, "\n"): a newline in the path is escaped as octal, nothing else is.
                let mut parts = path.split('\n');
                out.push_str(parts.next().unwrap_or_default());
                for part in parts {
                    out.push_str("\\012");
                    out.push_str(part);
                }
                if deleted {
                    out.push_str(" (deleted)");
                }
            }
            MapsNameRef::Heap => out.push_str("[heap]"),
            MapsNameRef::Stack => out.push_str("[stack]"),
            MapsNameRef::Anon(n) => {
                out.push_str("[anon:");
                out.push_str(n);
                out.push(']');
            }
            MapsNameRef::AnonShmem(n) => {
                out.push_str("[anon_shmem:");
                out.push_str(n);
                out.push(']');
            }
            MapsNameRef::Special(s) | MapsNameRef::Other(s) => out.push_str(s),
        }
    }
}

impl From<MapsNameRef<'_>> for MapsName {
    fn from(n: MapsNameRef<'_>) -> MapsName {
        match n {
            MapsNameRef::Path { path, deleted } => MapsName::Path { path: path.to_string(), deleted },
            MapsNameRef::Heap => MapsName::Heap,
            MapsNameRef::Stack => MapsName::Stack,
            MapsNameRef::Anon(n) => MapsName::Anon(n.to_string()),
            MapsNameRef::AnonShmem(n) => MapsName::AnonShmem(n.to_string()),
            MapsNameRef::Special(s) => MapsName::Special(s.to_string()),
            MapsNameRef::Other(s) => MapsName::Other(s.to_string()),
        }
    }
}

impl fmt::Display for MapsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        self.render_into(&mut s);
        f.write_str(&s)
    }
}

/// One `/proc/PID/maps` line (one VMA).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MapsLine {
    /// First address (inclusive).
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// The permission column.
    pub perms: Perms,
    /// `vm_pgoff << PAGE_SHIFT` for a file VMA, 0 for an anonymous one.
    pub offset: u64,
    /// Device major number (0 for anonymous).
    pub dev_major: u32,
    /// Device minor number (0 for anonymous).
    pub dev_minor: u32,
    /// Inode number (0 for anonymous).
    pub inode: u64,
    /// The name column, if any.
    pub name: Option<MapsName>,
}

impl MapsLine {
    /// An anonymous line: offset, device and inode 0, no name.
    pub fn anon(start: u64, end: u64, perms: Perms) -> Self {
        MapsLine { start, end, perms, offset: 0, dev_major: 0, dev_minor: 0, inode: 0, name: None }
    }

    /// Appends the line, **with** its trailing newline, exactly as Linux 6.18 prints it.
    ///
    /// The numeric prefix is written straight into `out`'s spare capacity after one reservation (the
    /// kernel's `seq_put_hex_ll` and `seq_put_decimal_ull`, which `show_map_vma` uses instead of
    /// `seq_printf` for the same reason: this is the hot loop of every `/proc/PID/maps` read); `core::fmt`
    /// is not involved.
    pub fn render_into(&self, out: &mut String) {
        self.render_with_name(self.name.as_ref().map(MapsName::as_ref), out);
    }

    /// [`MapsLine::render_into`] with `name` in place of the line's own (which is ignored): a renderer of
    /// many lines keeps the names where they live instead of copying each into a [`MapsName`].
    pub fn render_with_name(&self, name: Option<MapsNameRef<'_>>, out: &mut String) {
        out.reserve(LINE_BUF);
        // SAFETY: `as_mut_vec`: only ASCII is written below (digits, letters, separators, spaces), so `out`
        // stays UTF-8. `LineBuf::at`: the reservation above leaves at least `LINE_BUF` bytes of capacity
        // after the length. The `LineBuf` calls: one line's prefix, at most `LINE_BUF` bytes with the slack
        // of its last hex store (see `LINE_BUF`); `set_len` covers exactly the bytes written.
        unsafe {
            let v = out.as_mut_vec();
            let mut b = LineBuf::at(v.as_mut_ptr().add(v.len()));
            b.hex(self.start, 8);
            b.byte(b'-');
            b.hex(self.end, 8);
            b.byte(b' ');
            b.bytes(&self.perms.as_chars());
            if self.offset | self.inode | u64::from(self.dev_major | self.dev_minor) == 0 {
                // Anonymous memory: offset, device and inode 0, as one constant.
                b.bytes(b" 00000000 00:00 0 ");
            } else {
                b.byte(b' ');
                b.hex(self.offset, 8);
                b.byte(b' ');
                b.hex(u64::from(self.dev_major), 2);
                b.byte(b':');
                b.hex(u64::from(self.dev_minor), 2);
                b.byte(b' ');
                b.dec(self.inode);
                b.byte(b' ');
            }
            if name.is_some() {
                // seq_pad: spaces up to the column (none if the prefix is already that long), then one more.
                b.pad_to(PAD_COLUMN);
                b.byte(b' ');
            } else {
                b.byte(b'\n');
            }
            let len = v.len() + b.len;
            v.set_len(len);
        }
        if let Some(name) = name {
            name.render_into(out);
            out.push('\n');
        }
    }

    /// The line with its trailing newline.
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(96);
        self.render_into(&mut s);
        s
    }
}

impl fmt::Display for MapsLine {
    /// The line **without** its trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.render();
        f.write_str(&s[..s.len() - 1])
    }
}

/// Why a maps (or smaps) line was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsParseError {
    /// What was wrong, naming the offending text.
    pub reason: String,
}

impl MapsParseError {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        MapsParseError { reason: reason.into() }
    }
}

impl fmt::Display for MapsParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for MapsParseError {}

/// Parses a hex field printed with at least `min` digits, lowercase.
fn hex_field(s: &str, what: &str, min: usize) -> Result<u64, MapsParseError> {
    if s.len() < min || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(MapsParseError::new(format!(
            "{what} {s:?}: expected at least {min} lowercase hex digits"
        )));
    }
    // A value printed wider than `min` has no leading zero (the kernel never over-pads).
    if s.len() > min && s.starts_with('0') {
        return Err(MapsParseError::new(format!("{what} {s:?}: leading zero beyond {min} digits")));
    }
    u64::from_str_radix(s, 16).map_err(|e| MapsParseError::new(format!("{what} {s:?}: {e}")))
}

/// Takes the text up to the next space, which must exist, and returns (field, rest after the space).
fn take_field<'a>(s: &'a str, what: &str) -> Result<(&'a str, &'a str), MapsParseError> {
    s.split_once(' ').ok_or_else(|| MapsParseError::new(format!("line ends before the {what} field")))
}

impl FromStr for MapsLine {
    type Err = MapsParseError;

    /// Parses one line, with or without its trailing newline. Accepts exactly what [`MapsLine::render`]
    /// produces: the parse is strict so that parse-then-render is byte-identical.
    fn from_str(line: &str) -> Result<Self, Self::Err> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        if line.contains('\n') {
            return Err(MapsParseError::new("more than one line"));
        }
        let (range, rest) = take_field(line, "permissions")?;
        let (start_s, end_s) = range
            .split_once('-')
            .ok_or_else(|| MapsParseError::new(format!("address range {range:?}: expected start-end")))?;
        let start = hex_field(start_s, "start address", 8)?;
        let end = hex_field(end_s, "end address", 8)?;
        let (perms_s, rest) = take_field(rest, "offset")?;
        let perms = Perms::parse(perms_s)?;
        let (off_s, rest) = take_field(rest, "device")?;
        let offset = hex_field(off_s, "offset", 8)?;
        let (dev_s, rest) = take_field(rest, "inode")?;
        let (maj_s, min_s) = dev_s
            .split_once(':')
            .ok_or_else(|| MapsParseError::new(format!("device {dev_s:?}: expected major:minor")))?;
        let dev_major = u32::try_from(hex_field(maj_s, "device major", 2)?)
            .map_err(|_| MapsParseError::new(format!("device major {maj_s:?} too large")))?;
        let dev_minor = u32::try_from(hex_field(min_s, "device minor", 2)?)
            .map_err(|_| MapsParseError::new(format!("device minor {min_s:?} too large")))?;
        let (ino_s, tail) =
            rest.split_once(' ').ok_or_else(|| MapsParseError::new("missing the space after the inode"))?;
        if ino_s.is_empty()
            || !ino_s.bytes().all(|b| b.is_ascii_digit())
            || (ino_s.len() > 1 && ino_s.starts_with('0'))
        {
            return Err(MapsParseError::new(format!("inode {ino_s:?}: expected a decimal number")));
        }
        let inode: u64 = ino_s.parse().map_err(|e| MapsParseError::new(format!("inode {ino_s:?}: {e}")))?;
        let name = if tail.is_empty() {
            None
        } else {
            // The prefix (everything up to and including the space after the inode) is `used` bytes long;
            // the name starts after padding to PAD_COLUMN and one more space.
            let used = line.len() - tail.len();
            let pad = PAD_COLUMN.saturating_sub(used) + 1;
            if tail.len() <= pad || !tail.as_bytes()[..pad].iter().all(|&b| b == b' ') {
                return Err(MapsParseError::new(format!(
                    "name column: expected {pad} space(s) of padding then a name, got {tail:?}"
                )));
            }
            Some(MapsName::parse(&tail[pad..])?)
        };
        Ok(MapsLine { start, end, perms, offset, dev_major, dev_minor, inode, name })
    }
}

/// Parses a whole maps file, one [`MapsLine`] per line; the error names the 1-based line number.
pub fn parse_maps(text: &str) -> Result<Vec<MapsLine>, (usize, MapsParseError)> {
    text.lines().enumerate().map(|(i, l)| l.parse().map_err(|e| (i + 1, e))).collect()
}

/// The longest prefix of a maps line (before the name): two 16-digit addresses, perms, a 16-digit offset,
/// two 8-digit device numbers, a 20-digit inode, the separators (95 bytes), or the padding up to
/// [`PAD_COLUMN`] + 1, or a prefix and its newline; plus the 16 bytes of slack that [`LineBuf::hex`] stores
/// past its digits: what [`MapsLine::render_with_name`] reserves.
const LINE_BUF: usize = 128;

/// The two lowercase hex digits of every byte value, most significant first.
static HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
        i += 1;
    }
    t
};

/// The eight hex digits of the 32-bit `v`, most significant first when the result is stored big-endian.
#[inline(always)]
fn hex8(v: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut x = v;
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // Byte i now holds nibble i (from the least significant).
    let letters = ((x + 6 * ONES) >> 4) & ONES;
    x + u64::from(b'0') * ONES + letters * u64::from(b'a' - b'0' - 10)
}

/// A maps line's prefix written in place into the spare capacity of the output, as
/// `lib/seq_file.c: seq_put_hex_ll` / `seq_put_decimal_ull` write into the seq_file's buffer (no format
/// parsing, no width handling beyond the zero padding, no bounds check per field).
///
/// Every method is `unsafe` with one contract: the bytes written since [`LineBuf::at`], plus 16 for a
/// [`LineBuf::hex`] store, stay within the [`LINE_BUF`] bytes the pointer is valid for. One line's prefix
/// always does (see [`LINE_BUF`]). Only ASCII is ever written.
struct LineBuf {
    p: *mut u8,
    len: usize,
}

impl LineBuf {
    /// A line starting at `p`.
    ///
    /// # Safety
    ///
    /// `p` is valid for writes of [`LINE_BUF`] bytes while the `LineBuf` is used.
    #[inline(always)]
    unsafe fn at(p: *mut u8) -> Self {
        LineBuf { p, len: 0 }
    }

    #[inline(always)]
    unsafe fn byte(&mut self, c: u8) {
        debug_assert!(self.len < LINE_BUF);
        // SAFETY: within the line's bytes (the type's contract).
        unsafe { self.p.add(self.len).write(c) };
        self.len += 1;
    }

    #[inline(always)]
    unsafe fn bytes<const N: usize>(&mut self, s: &[u8; N]) {
        debug_assert!(self.len + N <= LINE_BUF);
        // SAFETY: within the line's bytes (the type's contract); `s` is not in the output.
        unsafe { self.p.add(self.len).cast::<[u8; N]>().write_unaligned(*s) };
        self.len += N;
    }

    /// `v` in lowercase hex, zero-padded to at least `width` digits (`%0*lx`, `1 <= width <= 16`).
    ///
    /// The digits are made eight at a time, one 32-bit half per 64-bit word ([`hex8`]: each nibble spread
    /// into its own byte by three shift-or-mask rounds, then turned into ASCII without a branch). Of the
    /// `n = max(digits, width)` digits wanted, the high half gives `n - 8` when `n > 8`: its word is
    /// shifted left past its leading zeros and stored whole (8 bytes), then the low half's 8 digits are
    /// stored right after those `n - 8`; when `n <= 8` the low half alone, shifted the same way. Every
    /// store is 8 bytes (the line keeps 16 bytes of slack) and the length advances by `n`.
    ///
    /// Twelve digits (an address in `[2^44, 2^48)`, where user space maps nearly everything: the kernel's
    /// `mmap_base` and the stack lie there) take a shorter path: six bytes, two digits each from
    /// [`HEX_PAIRS`].
    #[inline(always)]
    unsafe fn hex(&mut self, v: u64, width: usize) {
        debug_assert!((1..=16).contains(&width) && self.len + 16 <= LINE_BUF);
        let digits = ((64 - (v | 1).leading_zeros()).div_ceil(4)) as usize;
        let n = digits.max(width);
        if n == 12 {
            // SAFETY: within the line's bytes (the type's contract): 12 bytes past `len`.
            unsafe {
                let p = self.p.add(self.len);
                for k in 0..6 {
                    let byte = (v >> (40 - 8 * k)) as u8;
                    p.add(2 * k).cast::<[u8; 2]>().write_unaligned(HEX_PAIRS[usize::from(byte)]);
                }
            }
            self.len += 12;
            return;
        }
        let lo = hex8(v & 0xffff_ffff);
        if n > 8 {
            let high = n - 8;
            let hi = hex8(v >> 32) << (8 * (8 - high));
            // SAFETY: within the line's bytes, slack included (the type's contract): 8 + 8 <= 16 past `len`.
            unsafe {
                let p = self.p.add(self.len);
                p.cast::<[u8; 8]>().write_unaligned(hi.to_be_bytes());
                p.add(high).cast::<[u8; 8]>().write_unaligned(lo.to_be_bytes());
            }
        } else {
            // SAFETY: within the line's bytes, slack included (the type's contract).
            unsafe {
                self.p.add(self.len).cast::<[u8; 8]>().write_unaligned((lo << (8 * (8 - n))).to_be_bytes())
            };
        }
        self.len += n;
    }

    /// `v` in decimal (`%lu`).
    #[inline]
    unsafe fn dec(&mut self, v: u64) {
        let mut tmp = [0u8; 20];
        let mut i = tmp.len();
        let mut x = v;
        loop {
            i -= 1;
            tmp[i] = b'0' + (x % 10) as u8;
            x /= 10;
            if x == 0 {
                break;
            }
        }
        let n = tmp.len() - i;
        debug_assert!(self.len + n <= LINE_BUF);
        // SAFETY: within the line's bytes (the type's contract); `tmp` is a local.
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr().add(i), self.p.add(self.len), n) };
        self.len += n;
    }

    /// Spaces up to column `col` (nothing if the line is already that long).
    #[inline]
    unsafe fn pad_to(&mut self, col: usize) {
        if self.len < col {
            debug_assert!(col <= LINE_BUF);
            // SAFETY: within the line's bytes (the type's contract: `col` is below `LINE_BUF`).
            unsafe { self.p.add(self.len).write_bytes(b' ', col - self.len) };
            self.len = col;
        }
    }
}

/// Renders lines back into a maps file.
pub fn render_maps(lines: &[MapsLine]) -> String {
    let mut s = String::with_capacity(lines.len() * 96);
    for l in lines {
        l.render_into(&mut s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw() -> Perms {
        Perms { read: true, write: true, exec: false, shared: false }
    }

    #[test]
    fn anonymous_line_has_trailing_space_and_no_padding() {
        let l = MapsLine::anon(0x2000_0000_0000, 0x2000_0000_2000, rw());
        assert_eq!(l.render(), "200000000000-200000002000 rw-p 00000000 00:00 0 \n");
    }

    #[test]
    fn small_addresses_pad_to_eight_digits() {
        let l = MapsLine::anon(0x1000, 0x2000, Perms::default());
        assert_eq!(l.render(), "00001000-00002000 ---p 00000000 00:00 0 \n");
    }

    #[test]
    fn named_line_pads_to_column_73() {
        let mut l = MapsLine::anon(0x7fff_0360_7000, 0x7fff_0362_8000, rw());
        l.name = Some(MapsName::Stack);
        let s = l.render();
        assert_eq!(s.find('[').unwrap(), PAD_COLUMN + 1);
        assert_eq!(s, "7fff03607000-7fff03628000 rw-p 00000000 00:00 0                          [stack]\n");
    }

    #[test]
    fn long_prefix_gets_a_single_space() {
        let l = MapsLine {
            start: 0xffff_ffff_ff60_0000,
            end: 0xffff_ffff_ff60_1000,
            perms: Perms { exec: true, ..Perms::default() },
            offset: 0x1234_5678_9abc,
            dev_major: 0xfe,
            dev_minor: 0x12345,
            inode: 123_456_789_012,
            name: Some(MapsName::Path { path: "/a\nb".into(), deleted: true }),
        };
        let s = l.render();
        assert_eq!(
            s,
            "ffffffffff600000-ffffffffff601000 --xp 123456789abc fe:12345 123456789012  /a\\012b (deleted)\n"
        );
        assert_eq!(s.parse::<MapsLine>().unwrap(), l);
    }

    /// The line as `core::fmt` prints it (the kernel's `seq_printf` formats): the oracle of [`LineBuf`].
    fn render_with_fmt(l: &MapsLine) -> String {
        let mut s = format!(
            "{:08x}-{:08x} {} {:08x} {:02x}:{:02x} {} ",
            l.start, l.end, l.perms, l.offset, l.dev_major, l.dev_minor, l.inode
        );
        if let Some(n) = &l.name {
            while s.len() < PAD_COLUMN {
                s.push(' ');
            }
            s.push(' ');
            n.render_into(&mut s);
        }
        s.push('\n');
        s
    }

    proptest::proptest! {
        #[test]
        fn render_matches_the_printf_formats(
            start: u64, end: u64, offset: u64, dev_major: u32, dev_minor: u32, inode: u64,
            perms in (0u8..16), small in proptest::bool::ANY, named in 0u8..3,
        ) {
            // Half the cases in the kernel's usual ranges, so that the padding and the widths are exercised.
            let (start, end, offset, inode) = if small {
                (start >> 36, end >> 20, offset >> 40, inode >> 44)
            } else {
                (start, end, offset, inode)
            };
            let perms = Perms { read: perms & 1 != 0, write: perms & 2 != 0, exec: perms & 4 != 0, shared: perms & 8 != 0 };
            let name = match named {
                0 => None,
                1 => Some(MapsName::Heap),
                _ => Some(MapsName::Path { path: "/usr/lib/x".into(), deleted: false }),
            };
            let l = MapsLine { start, end, perms, offset, dev_major, dev_minor, inode, name };
            proptest::prop_assert_eq!(l.render(), render_with_fmt(&l));
        }
    }

    #[test]
    fn hex_widths_around_twelve_digits() {
        for v in
            [0x0fff_ffff_ffffu64, 0x1000_0000_0000, 0x7fff_0360_7000, 0xffff_ffff_ffff, 0x1_0000_0000_0000]
        {
            let l = MapsLine::anon(v, v.wrapping_add(0x1000), rw());
            assert_eq!(l.render(), render_with_fmt(&l), "{v:#x}");
        }
    }

    #[test]
    fn parse_rejects_with_reasons() {
        for bad in [
            "",
            "200000000000 rw-p 00000000 00:00 0 ",
            "200000000000-200000001000 rw-q 00000000 00:00 0 ",
            "200000000000-200000001000 rw-p 0000000 00:00 0 ",
            "200000000000-200000001000 rw-p 00000000 00:00 0",
            "200000000000-200000001000 rw-p 00000000 00:00 0  [heap]",
            "200000000000-200000001000 rw-p 00000000 0:00 0 ",
            "2000000X0000-200000001000 rw-p 00000000 00:00 0 ",
        ] {
            let e = bad.parse::<MapsLine>().unwrap_err();
            assert!(!e.reason.is_empty(), "{bad:?}");
        }
    }

    #[test]
    fn names_parse_into_kinds() {
        assert_eq!(MapsName::parse("[anon:foo bar]").unwrap(), MapsName::Anon("foo bar".into()));
        assert_eq!(MapsName::parse("[vdso]").unwrap(), MapsName::Special("[vdso]".into()));
        assert_eq!(MapsName::parse("[heap]").unwrap(), MapsName::Heap);
        assert_eq!(
            MapsName::parse("/tmp/x (deleted)").unwrap(),
            MapsName::Path { path: "/tmp/x".into(), deleted: true }
        );
        assert_eq!(MapsName::parse("anon_inode:x").unwrap(), MapsName::Other("anon_inode:x".into()));
    }
}
