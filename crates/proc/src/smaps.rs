//! `/proc/PID/smaps` records and `/proc/PID/smaps_rollup`: the counters, the renderer and the parser.
//!
//! # The format (Linux 6.18; `fs/proc/task_mmu.c: show_smap`, `show_smaps_rollup`)
//!
//! An smaps record is a maps line (the header, [`MapsLine`]) followed by one line per counter, in a fixed
//! order. A counter line is a label (`Rss:`) padded with spaces to 16 characters, the value in kB
//! right-aligned in 8 characters (wider values are printed in full), then ` kB`. One exception, kept from the
//! kernel: `Private_Hugetlb: ` is 17 characters and its value field is 7 wide, so the line has the same length.
//! After the counters: `THPeligible:` padded to 16, the value `%8u`; `ProtectionKey:` in the same layout only
//! when the host has memory protection keys enabled; then `VmFlags: ` and the two-letter mnemonic of every set
//! flag, each followed by a space, in bit order.
//!
//! smaps_rollup is one header `<first start>-<last end> ---p 00000000 00:00 0` padded, ` [rollup]`, then the
//! counters without Size/KernelPageSize/MMUPageSize, with `Pss_Anon`, `Pss_File` and `Pss_Shmem` after
//! `Pss_Dirty`, and no THPeligible/ProtectionKey/VmFlags.
//!
//! Counters are kept in kB, as printed ([`MemStats`]); [`MemStatsAccumulator`] is the byte-exact
//! accumulator (PSS in fixed point with [`PSS_SHIFT`] fraction bits) that a reader fills page by page and
//! converts at the end, as the kernel's `mem_size_stats` does.
//!
//! Parsing is strict: every line must be exactly what the renderer would print for the parsed value, so that
//! parse-then-render of a real file is byte-identical.

use crate::maps::{MapsLine, MapsName, MapsParseError, Perms};
use core::fmt::Write as _;
use vmspace_abi::VmFlags;

/// Fraction bits of the PSS fixed-point accumulators (`PSS_SHIFT` in `fs/proc/task_mmu.c`).
pub const PSS_SHIFT: u32 = 12;

/// The counters of one smaps record or of the rollup, in kB, as printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct MemStats {
    /// `Rss`: resident pages.
    pub rss: u64,
    /// `Pss`: proportional share of resident pages.
    pub pss: u64,
    /// `Pss_Dirty`: proportional share of dirty pages.
    pub pss_dirty: u64,
    /// `Pss_Anon` (rollup only).
    pub pss_anon: u64,
    /// `Pss_File` (rollup only).
    pub pss_file: u64,
    /// `Pss_Shmem` (rollup only).
    pub pss_shmem: u64,
    /// `Shared_Clean`.
    pub shared_clean: u64,
    /// `Shared_Dirty`.
    pub shared_dirty: u64,
    /// `Private_Clean`.
    pub private_clean: u64,
    /// `Private_Dirty`.
    pub private_dirty: u64,
    /// `Referenced`.
    pub referenced: u64,
    /// `Anonymous`.
    pub anonymous: u64,
    /// `KSM`.
    pub ksm: u64,
    /// `LazyFree`.
    pub lazyfree: u64,
    /// `AnonHugePages`.
    pub anon_huge_pages: u64,
    /// `ShmemPmdMapped`.
    pub shmem_pmd_mapped: u64,
    /// `FilePmdMapped`.
    pub file_pmd_mapped: u64,
    /// `Shared_Hugetlb`.
    pub shared_hugetlb: u64,
    /// `Private_Hugetlb`.
    pub private_hugetlb: u64,
    /// `Swap`.
    pub swap: u64,
    /// `SwapPss`.
    pub swap_pss: u64,
    /// `Locked`.
    pub locked: u64,
}

/// Which field list a counter block uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// A per-VMA smaps record: no Pss_Anon/File/Shmem.
    Record,
    /// smaps_rollup: with Pss_Anon/File/Shmem.
    Rollup,
}

type Getter = fn(&MemStats) -> u64;
type Setter = fn(&mut MemStats, u64);

/// One counter line: its printed prefix (label, colon, padding), value width, accessors, and whether it is
/// rollup-only.
struct Field {
    prefix: &'static str,
    width: usize,
    get: Getter,
    set: Setter,
    rollup_only: bool,
}

macro_rules! field {
    ($prefix:literal, $width:literal, $f:ident, $rollup:literal) => {
        Field { prefix: $prefix, width: $width, get: |m| m.$f, set: |m, v| m.$f = v, rollup_only: $rollup }
    };
}

/// The counters in print order.
const FIELDS: &[Field] = &[
    field!("Rss:            ", 8, rss, false),
    field!("Pss:            ", 8, pss, false),
    field!("Pss_Dirty:      ", 8, pss_dirty, false),
    field!("Pss_Anon:       ", 8, pss_anon, true),
    field!("Pss_File:       ", 8, pss_file, true),
    field!("Pss_Shmem:      ", 8, pss_shmem, true),
    field!("Shared_Clean:   ", 8, shared_clean, false),
    field!("Shared_Dirty:   ", 8, shared_dirty, false),
    field!("Private_Clean:  ", 8, private_clean, false),
    field!("Private_Dirty:  ", 8, private_dirty, false),
    field!("Referenced:     ", 8, referenced, false),
    field!("Anonymous:      ", 8, anonymous, false),
    field!("KSM:            ", 8, ksm, false),
    field!("LazyFree:       ", 8, lazyfree, false),
    field!("AnonHugePages:  ", 8, anon_huge_pages, false),
    field!("ShmemPmdMapped: ", 8, shmem_pmd_mapped, false),
    field!("FilePmdMapped:  ", 8, file_pmd_mapped, false),
    field!("Shared_Hugetlb: ", 8, shared_hugetlb, false),
    field!("Private_Hugetlb: ", 7, private_hugetlb, false),
    field!("Swap:           ", 8, swap, false),
    field!("SwapPss:        ", 8, swap_pss, false),
    field!("Locked:         ", 8, locked, false),
];

fn push_kb(out: &mut String, prefix: &str, width: usize, v: u64) {
    let _ = writeln!(out, "{prefix}{v:>width$} kB");
}

/// Parses one `prefix value kB` line strictly (re-rendering must give the same text).
fn parse_kb(line: &str, prefix: &str, width: usize) -> Result<u64, MapsParseError> {
    let body = line.strip_prefix(prefix).and_then(|r| r.strip_suffix(" kB")).ok_or_else(|| {
        MapsParseError::new(format!("expected {:?}<value> kB, got {line:?}", prefix.trim_end()))
    })?;
    let v: u64 =
        body.trim_start().parse().map_err(|e| MapsParseError::new(format!("{line:?}: bad value: {e}")))?;
    if format!("{v:>width$}") != body {
        return Err(MapsParseError::new(format!("{line:?}: value not printed as the kernel does")));
    }
    Ok(v)
}

fn parse_u_line(line: &str, prefix: &str) -> Result<u64, MapsParseError> {
    let body = line
        .strip_prefix(prefix)
        .ok_or_else(|| MapsParseError::new(format!("expected {:?}, got {line:?}", prefix.trim_end())))?;
    let v: u64 =
        body.trim_start().parse().map_err(|e| MapsParseError::new(format!("{line:?}: bad value: {e}")))?;
    if format!("{v:>8}") != body {
        return Err(MapsParseError::new(format!("{line:?}: value not printed as the kernel does")));
    }
    Ok(v)
}

impl MemStats {
    fn render_block(&self, out: &mut String, block: Block) {
        for f in FIELDS {
            if f.rollup_only && block == Block::Record {
                continue;
            }
            push_kb(out, f.prefix, f.width, (f.get)(self));
        }
    }

    /// Parses the counter block from `lines`, advancing it.
    fn parse_block<'a>(
        lines: &mut impl Iterator<Item = &'a str>,
        block: Block,
    ) -> Result<Self, MapsParseError> {
        let mut m = MemStats::default();
        for f in FIELDS {
            if f.rollup_only && block == Block::Record {
                continue;
            }
            let line = lines
                .next()
                .ok_or_else(|| MapsParseError::new(format!("missing {:?} line", f.prefix.trim_end())))?;
            (f.set)(&mut m, parse_kb(line, f.prefix, f.width)?);
        }
        Ok(m)
    }
}

/// Byte-exact accumulator of the counters, the way the kernel's `mem_size_stats` accumulates them: sizes in
/// bytes, PSS values in bytes shifted left by [`PSS_SHIFT`] (a page mapped by `n` processes adds
/// `(PAGE_SIZE << PSS_SHIFT) / n`). [`MemStatsAccumulator::finish`] converts to kB as printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemStatsAccumulator {
    /// Byte counters, indexed like [`MemStats`] fields; PSS ones are in fixed point.
    pub bytes: MemStats,
}

impl MemStatsAccumulator {
    /// Adds another accumulator (rollup = sum over VMAs).
    pub fn add(&mut self, other: &MemStatsAccumulator) {
        for f in FIELDS {
            let v = (f.get)(&self.bytes).saturating_add((f.get)(&other.bytes));
            (f.set)(&mut self.bytes, v);
        }
    }

    /// The printed kB values: plain counters `>> 10`, PSS counters `>> (10 + PSS_SHIFT)`.
    pub fn finish(&self) -> MemStats {
        let b = &self.bytes;
        let pss = |v: u64| v >> (10 + PSS_SHIFT);
        let kb = |v: u64| v >> 10;
        MemStats {
            rss: kb(b.rss),
            pss: pss(b.pss),
            pss_dirty: pss(b.pss_dirty),
            pss_anon: pss(b.pss_anon),
            pss_file: pss(b.pss_file),
            pss_shmem: pss(b.pss_shmem),
            shared_clean: kb(b.shared_clean),
            shared_dirty: kb(b.shared_dirty),
            private_clean: kb(b.private_clean),
            private_dirty: kb(b.private_dirty),
            referenced: kb(b.referenced),
            anonymous: kb(b.anonymous),
            ksm: kb(b.ksm),
            lazyfree: kb(b.lazyfree),
            anon_huge_pages: kb(b.anon_huge_pages),
            shmem_pmd_mapped: kb(b.shmem_pmd_mapped),
            file_pmd_mapped: kb(b.file_pmd_mapped),
            shared_hugetlb: kb(b.shared_hugetlb),
            private_hugetlb: kb(b.private_hugetlb),
            swap: kb(b.swap),
            swap_pss: pss(b.swap_pss),
            locked: pss(b.locked),
        }
    }
}

/// The `VmFlags:` line: mnemonics in the order printed. The mnemonic of each bit comes from
/// [`vmspace_abi::VmFlags`], the one `vm_flags` table (Linux 6.18 x86-64: bits 0..=31 are stable across 6.x;
/// protection-key bits print nothing, they appear as `ProtectionKey:`). Parsing keeps the mnemonics as printed,
/// known or not.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct VmFlagsLine {
    /// Two-letter mnemonics, in print (bit) order.
    pub mnemonics: Vec<String>,
}

impl VmFlagsLine {
    /// The mnemonics of a `vm_flags` word, in bit order; bits without a mnemonic are not printed.
    pub fn from_flags(flags: VmFlags) -> Self {
        VmFlagsLine { mnemonics: flags.smaps_mnemonics().split_whitespace().map(str::to_string).collect() }
    }

    /// The flags of the known mnemonics (unknown ones are ignored).
    pub fn to_flags(&self) -> VmFlags {
        self.mnemonics.iter().filter_map(|m| VmFlags::from_mnemonic(m)).fold(VmFlags::NONE, |a, b| a | b)
    }

    fn render_into(&self, out: &mut String) {
        out.push_str("VmFlags: ");
        for m in &self.mnemonics {
            out.push_str(m);
            out.push(' ');
        }
        out.push('\n');
    }

    fn parse(line: &str) -> Result<Self, MapsParseError> {
        let body = line
            .strip_prefix("VmFlags: ")
            .ok_or_else(|| MapsParseError::new(format!("expected VmFlags:, got {line:?}")))?;
        if !body.is_empty() && !body.ends_with(' ') {
            return Err(MapsParseError::new(format!("{line:?}: every mnemonic is followed by a space")));
        }
        let mnemonics: Vec<String> = body.split_terminator(' ').map(str::to_string).collect();
        if mnemonics.iter().any(|m| m.len() != 2) {
            return Err(MapsParseError::new(format!("{line:?}: mnemonics are two letters")));
        }
        Ok(VmFlagsLine { mnemonics })
    }
}

/// One smaps record: the VMA's maps line and its counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmapsRecord {
    /// The maps line of the VMA.
    pub header: MapsLine,
    /// `Size`: the VMA's length in kB.
    pub size_kb: u64,
    /// `KernelPageSize` in kB (4 on x86-64 without hugetlb).
    pub kernel_page_size_kb: u64,
    /// `MMUPageSize` in kB.
    pub mmu_page_size_kb: u64,
    /// The counters.
    pub stats: MemStats,
    /// `THPeligible`: 0 or 1.
    pub thp_eligible: u64,
    /// `ProtectionKey`, printed only when the host has protection keys enabled.
    pub protection_key: Option<u64>,
    /// The `VmFlags:` line.
    pub vm_flags: VmFlagsLine,
}

impl SmapsRecord {
    /// Appends the record exactly as the kernel prints it.
    pub fn render_into(&self, out: &mut String) {
        self.header.render_into(out);
        push_kb(out, "Size:           ", 8, self.size_kb);
        push_kb(out, "KernelPageSize: ", 8, self.kernel_page_size_kb);
        push_kb(out, "MMUPageSize:    ", 8, self.mmu_page_size_kb);
        self.stats.render_block(out, Block::Record);
        let _ = writeln!(out, "THPeligible:    {:>8}", self.thp_eligible);
        if let Some(k) = self.protection_key {
            let _ = writeln!(out, "ProtectionKey:  {k:>8}");
        }
        self.vm_flags.render_into(out);
    }

    /// Parses one record from `lines`, advancing it; `None` at the end of input.
    fn parse_next<'a>(
        lines: &mut core::iter::Peekable<impl Iterator<Item = &'a str>>,
    ) -> Option<Result<Self, MapsParseError>> {
        let header = lines.next()?;
        Some((|| {
            let header: MapsLine = header.parse()?;
            let mut next = || lines.next().ok_or_else(|| MapsParseError::new("record ends early"));
            let size_kb = parse_kb(next()?, "Size:           ", 8)?;
            let kernel_page_size_kb = parse_kb(next()?, "KernelPageSize: ", 8)?;
            let mmu_page_size_kb = parse_kb(next()?, "MMUPageSize:    ", 8)?;
            let stats = MemStats::parse_block(lines, Block::Record)?;
            let thp_eligible = parse_u_line(
                lines.next().ok_or_else(|| MapsParseError::new("missing THPeligible"))?,
                "THPeligible:    ",
            )?;
            let protection_key = match lines.peek() {
                Some(l) if l.starts_with("ProtectionKey:") => {
                    let l = lines.next().unwrap_or_default();
                    Some(parse_u_line(l, "ProtectionKey:  ")?)
                }
                _ => None,
            };
            let vm_flags =
                VmFlagsLine::parse(lines.next().ok_or_else(|| MapsParseError::new("missing VmFlags"))?)?;
            Ok(SmapsRecord {
                header,
                size_kb,
                kernel_page_size_kb,
                mmu_page_size_kb,
                stats,
                thp_eligible,
                protection_key,
                vm_flags,
            })
        })())
    }
}

/// Parses a whole smaps file; the error carries the 1-based number of the record's header line.
pub fn parse_smaps(text: &str) -> Result<Vec<SmapsRecord>, (usize, MapsParseError)> {
    let mut it = text.lines().peekable();
    let mut out = Vec::new();
    let mut line_no = 1;
    while let Some(r) = SmapsRecord::parse_next(&mut it) {
        let rec = r.map_err(|e| (line_no, e))?;
        line_no +=
            6 + FIELDS.iter().filter(|f| !f.rollup_only).count() + rec.protection_key.is_some() as usize;
        out.push(rec);
    }
    Ok(out)
}

/// Renders smaps records back into a file.
pub fn render_smaps(records: &[SmapsRecord]) -> String {
    let mut s = String::with_capacity(records.len() * 900);
    for r in records {
        r.render_into(&mut s);
    }
    s
}

/// `/proc/PID/smaps_rollup`: the sum of the counters over `[start, end)` (first VMA's start, last VMA's end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmapsRollup {
    /// Start of the first VMA.
    pub start: u64,
    /// End of the last VMA.
    pub end: u64,
    /// The summed counters.
    pub stats: MemStats,
}

impl SmapsRollup {
    /// The header line: `---p`, offset/device/inode zero, name `[rollup]`.
    pub fn header(&self) -> MapsLine {
        let mut l = MapsLine::anon(self.start, self.end, Perms::default());
        l.name = Some(MapsName::Special("[rollup]".into()));
        l
    }

    /// The whole file, exactly as the kernel prints it.
    pub fn render(&self) -> String {
        let mut s = self.header().render();
        self.stats.render_block(&mut s, Block::Rollup);
        s
    }

    /// Parses a whole smaps_rollup file.
    pub fn parse(text: &str) -> Result<Self, MapsParseError> {
        let mut lines = text.lines();
        let header: MapsLine =
            lines.next().ok_or_else(|| MapsParseError::new("empty smaps_rollup"))?.parse()?;
        let r = SmapsRollup { start: header.start, end: header.end, stats: MemStats::default() };
        if header != r.header() {
            return Err(MapsParseError::new(format!("not a rollup header: {header}")));
        }
        let stats = MemStats::parse_block(&mut lines, Block::Rollup)?;
        if let Some(extra) = lines.next() {
            return Err(MapsParseError::new(format!("unexpected line after Locked: {extra:?}")));
        }
        Ok(SmapsRollup { stats, ..r })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_hugetlb_keeps_the_line_length() {
        let mut s = String::new();
        MemStats::default().render_block(&mut s, Block::Record);
        assert!(s.lines().all(|l| l.len() == 27), "{s}");
        assert!(s.contains("Private_Hugetlb:       0 kB\n"));
    }

    #[test]
    fn wide_values_are_printed_in_full() {
        let stats = MemStats { rss: 123_456_789, private_hugetlb: 12_345_678, ..MemStats::default() };
        let mut s = String::new();
        stats.render_block(&mut s, Block::Rollup);
        assert!(s.contains("Rss:            123456789 kB\n"));
        assert!(s.contains("Private_Hugetlb: 12345678 kB\n"));
        let back = MemStats::parse_block(&mut s.lines(), Block::Rollup).unwrap();
        assert_eq!(back, stats);
    }

    #[test]
    fn vm_flags_in_bit_order() {
        let f =
            VmFlagsLine::from_flags(VmFlags::from_bits(0x1 | 0x2 | 0x10 | 0x20 | 0x40 | 0x100 | 0x10_0000));
        assert_eq!(f.mnemonics.join(" "), "rd wr mr mw me gd ac");
        assert_eq!(f.to_flags().bits(), 0x1 | 0x2 | 0x10 | 0x20 | 0x40 | 0x100 | 0x10_0000);
        let mut s = String::new();
        f.render_into(&mut s);
        assert_eq!(s, "VmFlags: rd wr mr mw me gd ac \n");
    }

    #[test]
    fn accumulator_converts_like_the_kernel() {
        let mut a = MemStatsAccumulator::default();
        a.bytes.rss = 3 * 4096;
        // Three pages each shared by two processes: 1.5 pages of PSS.
        a.bytes.pss = 3 * ((4096u64 << PSS_SHIFT) / 2);
        let m = a.finish();
        assert_eq!(m.rss, 12);
        assert_eq!(m.pss, 6);
    }

    #[test]
    fn rejects_non_canonical_lines() {
        assert!(parse_kb("Rss:             16 kB", "Rss:            ", 8).is_err());
        assert!(parse_kb("Rss:            16 kB", "Rss:            ", 8).is_err());
        assert_eq!(parse_kb("Rss:                  16 kB", "Rss:            ", 8).unwrap(), 16);
    }
}
