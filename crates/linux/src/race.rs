//! The proc-maps race checks (the kernel selftest `proc-maps-race`'s three tests), natively, and the verdict
//! tally they share with the engine's runner (`vmspace_bench::race`): [`Outcome`], [`Pass`], [`RaceStates`].
//!
//! # Setup
//! A forked child maps `page_size / 32 + 1` private anonymous regions of 3 pages each, alternating read-only and
//! read-write so that neighbours never merge; that is more lines than fit in one page of maps output, so some
//! boundary between two `read()` calls of one page each falls between two of the child's lines. The parent
//! reads `/proc/CHILD/maps` (or `smaps`) one page per `read()`, finds the first read *k* whose last record
//! and the next read's first record are both child regions ([`Pass::locate`]), and names them `addr` and
//! `next_addr`. Those two records are produced by different `read()` calls, with the kernel's locks dropped in
//! between: the place where tearing could appear.
//!
//! # The three tests
//! The child modifies and restores the region at `addr` on command; the parent first captures whole passes
//! in the original, modified and restored states (restored must equal original), then lets the child
//! modify/restore in a tight loop and reads passes for the test's duration.
//! * **split**: modify = map one fresh page at `addr` with the region's protection plus EXEC (splits the
//!   region); restore = map it again with the original protection (merges back). Both boundary lines change.
//! * **resize**: modify = `mremap` the region from 3 pages to 1 in place; restore = grow it back. Only the
//!   last line changes.
//! * **remap**: modify = move the last page of the next region into the middle of this one
//!   (`MREMAP_FIXED | MREMAP_MAYMOVE | MREMAP_DONTUNMAP`, splitting it in three); restore = `mprotect` that page
//!   back to the region's protection (merges back). Both lines change.
//!
//! # Passes and read sizes
//! Each observation is one *pass*: the file read from its start to its end ([`Pass`]), in reads of one kind
//! ([`RaceReads`]): one page per `read()` (the selftest's), or random sizes from 1 byte to about three maps
//! lines or one smaps record, so that `seq_file` restarts the walk (at the end of the last record shown,
//! `m_start` after `m_stop`) every record or few and records straddle reads at every offset.
//!
//! # Verdict per observation (the boundary pair)
//! With page reads the pair is the last record header L of read k and the first F of read k+1; with random
//! reads, the header L of the record that starts at `addr` and the one F after it, wherever the reads split
//! them ([`Pass::boundary`]). [`classify`]:
//! * L = modified-L: F must be modified-F, or original-L (the same VMA reported twice, before and after a
//!   restore: a **duplicate**, allowed);
//! * L = original-L: F must be original-F;
//! * anything else is **tearing** (a mix of states, or a false gap where a region is missing) and is reported
//!   with the offending lines. With page reads, reads k and k+1 must each end with a newline.
//!
//! # Whole-pass checks
//! Every pass is also checked whole against the two states ([`RaceStates::pass_problems`], one failure per
//! pass that breaks any rule):
//! * the text ends with a newline, and no line is torn: every maps line (every smaps record header) parses and
//!   is a line of the original or the modified state; an `smaps` text parses record by record;
//! * the records are in order: each ends above the one before (the walk restarts at the last record's end and
//!   finds the first VMA ending above it, `proc_get_vma`);
//! * no address lies under more than two records (a VMA shown at most twice: before and after a change);
//! * memory mapped in both states is shown whole (no false gap anywhere in the file);
//! * `smaps`: each record's `Size` is its range's length, a multiple of its `KernelPageSize`; `Rss + Swap` is at
//!   most `Size`; `Pss` and `Anonymous` are at most `Rss`; `Shared_Clean + Shared_Dirty + Private_Clean +
//!   Private_Dirty` is `Rss` (`smaps_account` adds each resident page to exactly one of the four).
//!
//! # PROCMAP_QUERY
//! In maps mode every observation also asks PROCMAP_QUERY about every page from the one below `addr` to the
//! last of the region at `next_addr` ([`query_pages`]), with flags 0 and with `COVERING_OR_NEXT_VMA`; each
//! answer (a VMA, or ENOENT) must be the one the original or the modified state gives for that page and flags
//! ([`RaceStates::query_answers`]): the VMA containing it, or the first VMA ending above it. In the split, the
//! second page is thus the whole region or the split-off `[addr + page, addr + 3 pages)`; in the resize, the
//! region's upper pages are the region or ENOENT; in the remap, the middle page the region or the 1-page VMA.

use crate::child::{self, SharedSlots, check_interrupted};
use crate::hostinfo::HostInfo;
use crate::maps::{is_header, parse_line};
use crate::sys;
use anyhow::{Context, Result, bail};
use rustix::mm::ProtFlags;
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
use vmspace_proc::{SmapsRecord, parse_smaps};
use vmspace_results::report::Report;

/// The file the parent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaceFile {
    /// `/proc/PID/maps` (with the PROCMAP_QUERY checks).
    Maps,
    /// `/proc/PID/smaps` (record header lines are compared; no PROCMAP_QUERY checks).
    Smaps,
}

impl RaceFile {
    /// `maps` or `smaps`.
    pub fn name(self) -> &'static str {
        match self {
            RaceFile::Maps => "maps",
            RaceFile::Smaps => "smaps",
        }
    }
}

impl std::str::FromStr for RaceFile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "maps" => Ok(RaceFile::Maps),
            "smaps" => Ok(RaceFile::Smaps),
            _ => Err(format!("unknown file {s:?} (maps or smaps)")),
        }
    }
}

/// One of the selftest's three tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaceTest {
    /// Split and merge back by mapping one page over the region's first page.
    Split,
    /// Shrink and grow back with `mremap`.
    Resize,
    /// Move a page of the next region into this one, merge back with `mprotect`.
    Remap,
}

impl RaceTest {
    /// All three, in the selftest's order.
    pub const ALL: [RaceTest; 3] = [RaceTest::Split, RaceTest::Resize, RaceTest::Remap];

    /// The test's name.
    pub fn name(self) -> &'static str {
        match self {
            RaceTest::Split => "split",
            RaceTest::Resize => "resize",
            RaceTest::Remap => "remap",
        }
    }

    fn code(self) -> u64 {
        match self {
            RaceTest::Split => 1,
            RaceTest::Resize => 2,
            RaceTest::Remap => 3,
        }
    }
}

/// The outcome of one test.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// Observations made during the race: passes read whole, each checked at its boundary pair and whole.
    pub iterations: u64,
    /// Observations that saw the modified state.
    pub modified_seen: u64,
    /// Observations where the same VMA was reported twice (allowed).
    pub duplicates: u64,
    /// PROCMAP_QUERY answers checked (maps: 14 per observation, module docs).
    pub query_checks: u64,
    /// Modify+restore cycles the child completed.
    pub child_cycles: u64,
    /// Failed checks: boundary pairs (tearing, false gaps, torn reads), whole passes (each counted once however
    /// many rules it breaks), PROCMAP_QUERY answers.
    pub failure_count: u64,
    /// The first few failures, with the offending lines.
    pub failures: Vec<String>,
}

// Shared slots.
const CMD: usize = 0; // (seq << 8) | op
const ACK: usize = 1; // seq of the last completed command
const ADDR: usize = 2;
const NEXT: usize = 3;
const PROT_WRITE: usize = 4; // 1 if the region at ADDR is writable
const READY: usize = 5;
const CYCLES: usize = 6;
const CHILD_ERR: usize = 7; // errno of a failed child syscall
const TEST: usize = 8;
const REGIONS: usize = 16;

const OP_MODIFY: u64 = 1;
const OP_RESTORE: u64 = 2;
const OP_LOOP: u64 = 3;
const OP_EXIT: u64 = 4;

/// Failures an [`Outcome`] keeps the descriptions of.
pub const MAX_KEPT_FAILURES: usize = 10;

/// Runs `tests` for `duration` each against `file`, each pass read with `reads`; one report per test (one run
/// each).
pub fn run(
    file: RaceFile,
    tests: &[RaceTest],
    reads: RaceReads,
    duration: Duration,
    host: &HostInfo,
    on_test: &mut dyn FnMut(RaceTest, &Outcome),
) -> Result<Vec<Report>> {
    if duration.is_zero() || duration > Duration::from_secs(24 * 3600) {
        bail!("--duration must be positive and at most 24 h");
    }
    let mut reports = Vec::new();
    for &t in tests {
        let o = run_test(file, t, reads, duration)?;
        on_test(t, &o);
        let label = match reads {
            RaceReads::Page => format!("{} ({})", t.name(), file.name()),
            RaceReads::Random => format!("{} ({}, random reads)", t.name(), file.name()),
        };
        let mut r = o.report("kernel.race", label, t, file, duration, host);
        r.param("reads", reads);
        reports.push(r);
    }
    Ok(reports)
}

/// The child's side: map the regions, then obey commands.
fn child_main(slots: &SharedSlots, count: usize, page: usize) -> i32 {
    let r = sys::prot(true, false, false);
    let rw = sys::prot(true, true, false);
    let fail = |e: rustix::io::Errno| {
        // Relaxed: read by the parent only after this process exits (waitpid orders it).
        slots.get(CHILD_ERR).store(e.raw_os_error() as u64, Ordering::Relaxed);
        2
    };
    // The regions lie side by side, in one range reserved first: placed one by one, they would fill the holes
    // the forked parent's address space has (thread stacks freed by earlier work), scattered among its own
    // VMAs, and no read boundary of the maps file might then fall between two of them. Region 0 is the highest,
    // as top-down placement of consecutive calls orders them; neighbours differ in protection, so none merge.
    let base = match sys::map_anon(count * 3 * page, sys::prot(false, false, false), false) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    for i in 0..count {
        let p = if i % 2 == 0 { r } else { rw };
        let a = base + (count - 1 - i) * 3 * page;
        // SAFETY: `a` lies in the range this child has just reserved, which no Rust object references.
        if let Err(e) = unsafe { sys::map_fixed(a, 3 * page, p) } {
            return fail(e);
        }
        // Relaxed: published by the Release store of READY below.
        slots.get(REGIONS + i).store(a as u64, Ordering::Relaxed);
    }
    // Release: publishes the region addresses.
    slots.get(READY).store(1, Ordering::Release);
    let mut seen = 0u64;
    loop {
        // Acquire: pairs with the parent's Release store of a command (and of ADDR/NEXT/PROT/TEST before it).
        let cmd = slots.get(CMD).load(Ordering::Acquire);
        if cmd >> 8 == seen {
            std::thread::yield_now();
            continue;
        }
        seen = cmd >> 8;
        // Relaxed (these four): written by the parent before its Release store of CMD, which the Acquire load
        // above pairs with.
        let test = slots.get(TEST).load(Ordering::Relaxed);
        let addr = slots.get(ADDR).load(Ordering::Relaxed) as usize;
        let next = slots.get(NEXT).load(Ordering::Relaxed) as usize;
        let prot = if slots.get(PROT_WRITE).load(Ordering::Relaxed) != 0 { rw } else { r };
        let step = |modify: bool| -> Result<(), rustix::io::Errno> {
            // SAFETY: every range touched here is one of this child's own regions (or the page after `addr`
            // inside it), which no Rust object references.
            unsafe {
                match (test, modify) {
                    (1, true) => sys::map_fixed(addr, page, prot | ProtFlags::EXEC),
                    (1, false) => sys::map_fixed(addr, page, prot),
                    (2, true) => sys::remap_in_place(addr, 3 * page, page),
                    (2, false) => sys::remap_in_place(addr, page, 3 * page),
                    (3, true) => sys::remap_dontunmap(next + 2 * page, page, addr + page),
                    (3, false) => sys::protect(addr + page, page, prot),
                    _ => Err(rustix::io::Errno::INVAL),
                }
            }
        };
        let res = match cmd & 0xff {
            OP_MODIFY => step(true),
            OP_RESTORE => step(false),
            OP_LOOP => {
                // Acknowledge first: the parent starts observing while we loop.
                slots.get(ACK).store(seen, Ordering::Release);
                let mut res = Ok(());
                // Relaxed: polling for a new command; its data is re-read with Acquire at the top of the loop.
                while slots.get(CMD).load(Ordering::Relaxed) == cmd {
                    if let Err(e) = step(true).and_then(|_| step(false)) {
                        res = Err(e);
                        break;
                    }
                    // Relaxed: a statistic read after the child is reaped.
                    slots.get(CYCLES).fetch_add(1, Ordering::Relaxed);
                }
                if let Err(e) = res {
                    // Relaxed: read by the parent only after this process exits.
                    slots.get(CHILD_ERR).store(e.raw_os_error() as u64, Ordering::Relaxed);
                    return 3;
                }
                continue;
            }
            OP_EXIT => return 0,
            _ => Err(rustix::io::Errno::INVAL),
        };
        if let Err(e) = res {
            // Relaxed: read by the parent only after this process exits.
            slots.get(CHILD_ERR).store(e.raw_os_error() as u64, Ordering::Relaxed);
            return 3;
        }
        // Release: the modification is done before the parent reads the maps file.
        slots.get(ACK).store(seen, Ordering::Release);
    }
}

/// The parent's command channel to the child.
struct Channel<'a> {
    slots: &'a SharedSlots,
    seq: u64,
}

impl Channel<'_> {
    fn send(&mut self, op: u64, child: &mut child::Child) -> Result<()> {
        self.seq += 1;
        // Release: publishes ADDR/NEXT/PROT/TEST written before; pairs with the child's Acquire load of CMD.
        self.slots.get(CMD).store((self.seq << 8) | op, Ordering::Release);
        if op == OP_EXIT {
            return Ok(());
        }
        let t = Instant::now();
        // Acquire: pairs with the child's Release store of ACK after its syscall.
        while self.slots.get(ACK).load(Ordering::Acquire) != self.seq {
            if let Some(e) = child.try_wait()? {
                // Relaxed: the child has exited and was reaped by try_wait (waitpid orders its stores).
                let errno = self.slots.get(CHILD_ERR).load(Ordering::Relaxed);
                bail!(
                    "the race child exited ({e:?}); its last syscall error: {}",
                    rustix::io::Errno::from_raw_os_error(errno as i32)
                );
            }
            if t.elapsed() > Duration::from_secs(10) {
                bail!("the race child did not acknowledge a command within 10 s");
            }
            check_interrupted()?;
            std::thread::yield_now();
        }
        Ok(())
    }
}

/// How each pass reads the file: the size of every `read(2)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaceReads {
    /// One page per `read(2)`, as the selftest reads: a read ends after the last whole record that fits in the
    /// page, and the boundary observed is the one between read *k* and read *k+1* (module docs).
    #[default]
    Page,
    /// Reads of random sizes: 1 byte to 160 bytes (about three maps lines) for `maps`, to 1,200 bytes (about
    /// one record) for `smaps`, from a generator seeded per run, so that the walk restarts at every record or
    /// few and records straddle read boundaries at every offset; the boundary observed is the record that
    /// starts at `addr` and the record after it, wherever the reads split them.
    Random,
}

impl RaceReads {
    /// Both, page first.
    pub const ALL: [RaceReads; 2] = [RaceReads::Page, RaceReads::Random];

    /// `page` or `random`.
    pub fn name(self) -> &'static str {
        match self {
            RaceReads::Page => "page",
            RaceReads::Random => "random",
        }
    }
}

impl std::fmt::Display for RaceReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for RaceReads {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "page" => Ok(RaceReads::Page),
            "random" => Ok(RaceReads::Random),
            _ => Err(format!("unknown read size {s:?} (page or random)")),
        }
    }
}

/// The sizes of a run's reads ([`RaceReads`]): a page each, or a xorshift sequence of random sizes.
#[derive(Debug, Clone)]
pub struct ReadSizes {
    reads: RaceReads,
    page: usize,
    most: usize,
    state: u64,
}

impl ReadSizes {
    /// The sizes for reads of `file` in pages of `page` bytes; `seed` picks the random sequence.
    pub fn new(reads: RaceReads, file: RaceFile, page: usize, seed: u64) -> ReadSizes {
        let most = match file {
            RaceFile::Maps => 160,
            RaceFile::Smaps => 1200,
        };
        // xorshift has no zero state.
        ReadSizes { reads, page, most, state: seed | 1 }
    }

    /// The size of the next read.
    pub fn next_size(&mut self) -> usize {
        match self.reads {
            RaceReads::Page => self.page,
            RaceReads::Random => {
                let x = &mut self.state;
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                1 + (*x % self.most as u64) as usize
            }
        }
    }
}

/// One pass over a file: its text from the start to the end, and where each `read(2)` ended in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// The whole text.
    pub text: String,
    /// The end offset of each read in [`Pass::text`], in order (the last is the text's length).
    pub read_ends: Vec<usize>,
}

impl Pass {
    /// A pass of the bytes `bytes` read in reads ending at `read_ends`; `Err` if it is not UTF-8.
    pub fn new(bytes: Vec<u8>, read_ends: Vec<usize>) -> Result<Pass, String> {
        let text = String::from_utf8(bytes).map_err(|_| "a pass whose text is not UTF-8".to_string())?;
        Ok(Pass { text, read_ends })
    }

    /// The text read `i` returned.
    pub fn read(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.read_ends[i - 1] };
        &self.text[start..self.read_ends[i]]
    }

    /// The boundary pair of read `k` / `k+1` (page reads, module docs): the last record header of read `k`
    /// and the first of read `k+1`. Each of those reads must end with a newline.
    pub fn read_boundary(&self, k: usize) -> Result<(String, String), String> {
        if self.read_ends.len() < k + 2 {
            return Err(format!(
                "output ended after {} reads; expected at least {}",
                self.read_ends.len(),
                k + 2
            ));
        }
        for i in [k, k + 1] {
            let r = self.read(i);
            if !r.ends_with('\n') {
                return Err(format!(
                    "read {i} does not end with a newline: ...{:?}",
                    &r[r.len().saturating_sub(80)..]
                ));
            }
        }
        let last = self.read(k).lines().rev().find(|l| is_header(l));
        let first = self.read(k + 1).lines().find(|l| is_header(l));
        match (last, first) {
            (Some(l), Some(f)) => Ok((l.to_string(), f.to_string())),
            _ => Err(format!("no record header at the boundary of reads {k} and {}", k + 1)),
        }
    }

    /// The boundary pair at `addr` (random reads, module docs): the record header that starts at `addr` and the
    /// next one, wherever the reads split them.
    pub fn record_boundary(&self, addr: u64) -> Result<(String, String), String> {
        let mut headers = self.text.lines().filter(|l| is_header(l));
        let last = headers
            .by_ref()
            .find(|l| parse_line(l).is_some_and(|m| m.start >= addr))
            .filter(|l| parse_line(l).is_some_and(|m| m.start == addr))
            .ok_or_else(|| format!("false gap: no record starts at {addr:x}"))?;
        let first = headers.next().ok_or_else(|| format!("no record after the one at {addr:x}"))?;
        Ok((last.to_string(), first.to_string()))
    }

    /// The observation of a run reading with `reads` (module docs): [`Pass::read_boundary`] at `k` for page
    /// reads, [`Pass::record_boundary`] at `addr` for random ones.
    pub fn boundary(&self, reads: RaceReads, k: usize, addr: u64) -> Result<(String, String), String> {
        match reads {
            RaceReads::Page => self.read_boundary(k),
            RaceReads::Random => self.record_boundary(addr),
        }
    }

    /// Where the raced regions are (module docs, "Setup"): the first read `k` whose last record and the next
    /// read's first record are both regions of `region_len` bytes starting at one of `regions`, the second
    /// above the first. Returns `k`, `addr` and `next_addr`.
    pub fn locate(&self, regions: &[u64], region_len: u64) -> Option<(usize, u64, u64)> {
        let is_region =
            |l: &str| parse_line(l).filter(|m| m.end - m.start == region_len && regions.contains(&m.start));
        (0..self.read_ends.len().saturating_sub(1)).find_map(|k| {
            let last = self.read(k).lines().rev().find(|l| is_header(l)).and_then(is_region)?;
            let first = self.read(k + 1).lines().find(|l| is_header(l)).and_then(is_region)?;
            (first.start > last.start).then_some((k, last.start, first.start))
        })
    }
}

/// Reads `file` from its start to its end with reads of `sizes`, into `buf` (kept from pass to pass).
fn read_pass(file: &mut File, sizes: &mut ReadSizes, buf: &mut Vec<u8>) -> Result<Pass, String> {
    file.seek(SeekFrom::Start(0)).map_err(|e| format!("seek failed: {e}"))?;
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    loop {
        let want = sizes.next_size();
        if buf.len() < want {
            buf.resize(want, 0);
        }
        let n = file.read(&mut buf[..want]).map_err(|e| format!("read failed: {e}"))?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
        ends.push(bytes.len());
    }
    Pass::new(bytes, ends)
}

/// What the passes of a race may show (module docs, "Whole-pass checks"): the two states the writer moves
/// between, each a sorted list of VMAs, and every record header either shows.
#[derive(Debug, Clone)]
pub struct RaceStates {
    /// The original and the modified state's VMAs, each sorted by address.
    states: [Vec<(u64, u64)>; 2],
    /// Every record header line of either state.
    lines: HashSet<String>,
    /// The ranges mapped in both states (a pass must show them).
    always: Vec<(u64, u64)>,
}

/// The record header lines of a `maps` or `smaps` text.
fn headers(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| is_header(l))
}

/// `ranges` sorted and merged where they touch or overlap.
fn merged(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut r = ranges.to_vec();
    r.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in r {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

impl RaceStates {
    /// The states of the whole texts (`maps` or `smaps`) read with the writer idle in the original, modified
    /// and restored states. `Err` if a header does not parse or the restored headers are not the original's.
    pub fn new(orig: &str, modified: &str, restored: &str) -> Result<RaceStates, String> {
        if headers(restored).ne(headers(orig)) {
            return Err("restoring did not restore the records of the whole file".to_string());
        }
        let mut lines = HashSet::new();
        let mut state = |text: &str| -> Result<Vec<(u64, u64)>, String> {
            let mut vmas = Vec::new();
            for l in headers(text) {
                let m = parse_line(l).ok_or_else(|| format!("a record header that does not parse: {l:?}"))?;
                vmas.push((m.start, m.end));
                lines.insert(l.to_string());
            }
            vmas.sort_unstable();
            Ok(vmas)
        };
        let states = [state(orig)?, state(modified)?];
        let (a, b) = (merged(&states[0]), merged(&states[1]));
        let mut always = Vec::new();
        for &(s1, e1) in &a {
            for &(s2, e2) in &b {
                let (s, e) = (s1.max(s2), e1.min(e2));
                if s < e {
                    always.push((s, e));
                }
            }
        }
        Ok(RaceStates { states, lines, always })
    }

    /// What PROCMAP_QUERY at `addr` answers in each state: the VMA containing `addr` (flags 0), or with
    /// `covering_or_next` the first VMA ending above `addr`; `None` where there is none (ENOENT).
    pub fn query_answers(&self, addr: u64, covering_or_next: bool) -> [Option<(u64, u64)>; 2] {
        self.states
            .each_ref()
            .map(|vmas| vmas.iter().copied().find(|&(s, e)| e > addr && (covering_or_next || s <= addr)))
    }

    /// The whole-pass checks of one pass's `text` of `file` (module docs); an empty list when it passes.
    pub fn pass_problems(&self, file: RaceFile, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        if !text.ends_with('\n') {
            out.push(format!(
                "the pass does not end with a newline: ...{:?}",
                &text[text.len().saturating_sub(80)..]
            ));
        }
        // The records' header lines, each parsed; a line that is no record's and no smaps field is torn.
        let mut records: Vec<(&str, u64, u64)> = Vec::new();
        match file {
            RaceFile::Maps => {
                for l in text.lines() {
                    match parse_line(l) {
                        Some(m) if is_header(l) => records.push((l, m.start, m.end)),
                        _ => out.push(format!("torn line {l:?}")),
                    }
                }
            }
            RaceFile::Smaps => {
                match parse_smaps(text) {
                    Ok(rs) => {
                        for r in &rs {
                            smaps_record_problems(r, &mut out);
                        }
                    }
                    Err((n, e)) => {
                        out.push(format!("torn smaps record: the text does not parse at line {n}: {e:?}"))
                    }
                }
                for l in headers(text) {
                    match parse_line(l) {
                        Some(m) => records.push((l, m.start, m.end)),
                        None => out.push(format!("torn line {l:?}")),
                    }
                }
            }
        }
        for &(l, _, _) in &records {
            if !self.lines.contains(l) {
                out.push(format!("torn or unknown line {l:?}: no state has it"));
            }
        }
        // Order: each record ends above the one before (the walk restarts at the last record's end).
        for w in records.windows(2) {
            if w[1].2 <= w[0].2 {
                out.push(format!("out of order: {:?} after {:?}", w[1].0, w[0].0));
            }
        }
        // No address under more than two records (before and after a change): sweep the record boundaries, an
        // end before a start at the same address (records that only touch do not overlap).
        let mut events: Vec<(u64, i32)> = records.iter().flat_map(|&(_, s, e)| [(s, 1), (e, -1)]).collect();
        events.sort_unstable();
        let mut depth = 0;
        for (i, &(a, d)) in events.iter().enumerate() {
            depth += d;
            let Some(&(b, _)) = events.get(i + 1) else { break };
            if depth > 2 && b > a {
                let shown: Vec<&str> =
                    records.iter().filter(|&&(_, s, e)| s <= a && b <= e).map(|r| r.0).collect();
                out.push(format!("{a:#x}-{b:#x} shown {depth} times: {shown:?}"));
            }
        }
        // No false gap in memory mapped in both states.
        let shown = merged(&records.iter().map(|&(_, s, e)| (s, e)).collect::<Vec<_>>());
        for &(s, e) in &self.always {
            if !shown.iter().any(|&(a, b)| a <= s && e <= b) {
                out.push(format!("false gap: {s:#x}-{e:#x} is mapped in both states but not shown whole"));
            }
        }
        out
    }
}

/// The checks of one `smaps` record's counters against its range (module docs).
fn smaps_record_problems(r: &SmapsRecord, out: &mut Vec<String>) {
    let h = &r.header;
    let len_kb = h.end.saturating_sub(h.start) >> 10;
    let s = &r.stats;
    let mut bad = |ok: bool, what: String| {
        if !ok {
            out.push(format!("smaps record {:x}-{:x}: {what}", h.start, h.end));
        }
    };
    bad(r.size_kb == len_kb, format!("Size {} kB, its range {len_kb} kB", r.size_kb));
    bad(
        r.kernel_page_size_kb != 0 && r.size_kb.is_multiple_of(r.kernel_page_size_kb),
        format!("Size {} kB is no multiple of KernelPageSize {} kB", r.size_kb, r.kernel_page_size_kb),
    );
    bad(
        s.rss + s.swap <= r.size_kb,
        format!("Rss {} kB + Swap {} kB above Size {} kB", s.rss, s.swap, r.size_kb),
    );
    bad(s.pss <= s.rss, format!("Pss {} kB above Rss {} kB", s.pss, s.rss));
    let parts = s.shared_clean + s.shared_dirty + s.private_clean + s.private_dirty;
    bad(
        parts == s.rss,
        format!("Shared_Clean + Shared_Dirty + Private_Clean + Private_Dirty = {parts} kB, Rss {} kB", s.rss),
    );
    bad(s.anonymous <= s.rss, format!("Anonymous {} kB above Rss {} kB", s.anonymous, s.rss));
}

/// The pages PROCMAP_QUERY asks about in each observation (module docs): every page from the one below `addr`
/// to the last of the region at `next`, 3 pages of `page` bytes long.
pub fn query_pages(addr: u64, next: u64, page: u64) -> impl Iterator<Item = u64> {
    (addr - page..next + 3 * page).step_by(page as usize)
}

/// The verdict on one observed boundary pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Both lines as in the original (restored) state.
    Original,
    /// Both lines as in the modified state.
    Modified,
    /// The modified last line followed by the restored last line: the same VMA reported twice (allowed).
    Duplicate,
    /// Anything else: a mix of states or a missing range; the message names the lines.
    Torn(String),
}

/// Classifies an observed boundary pair (`last` of read k, `first` of read k+1) against the pairs captured in
/// the original and the modified state (see the module docs for the rule).
pub fn classify(orig: &(String, String), modified: &(String, String), last: &str, first: &str) -> Verdict {
    if last == modified.0 {
        if first == modified.1 {
            Verdict::Modified
        } else if first == orig.0 {
            Verdict::Duplicate
        } else {
            Verdict::Torn(format!(
                "tearing: last line {last:?} is the modified state but the next line {first:?} is neither {:?} \
                 (modified) nor {:?} (duplicate)",
                modified.1, orig.0
            ))
        }
    } else if last == orig.0 {
        if first == orig.1 {
            Verdict::Original
        } else {
            Verdict::Torn(format!(
                "tearing or false gap: last line {last:?} is the original but the next line {first:?} is not {:?}",
                orig.1
            ))
        }
    } else {
        Verdict::Torn(format!(
            "tearing: last line {last:?} is neither {:?} (original) nor {:?} (modified); next {first:?}",
            orig.0, modified.0
        ))
    }
}

impl Outcome {
    /// Counts a failure and keeps its description if there is room (the first [`MAX_KEPT_FAILURES`]).
    pub fn fail(&mut self, msg: String) {
        self.failure_count += 1;
        if self.failures.len() < MAX_KEPT_FAILURES {
            self.failures.push(msg);
        }
    }

    /// Tallies one observation: the boundary pair read (or why none could be), classified against the
    /// original and the modified pairs ([`classify`]).
    pub fn observe(
        &mut self,
        orig: &(String, String),
        modified: &(String, String),
        seen: Result<(String, String), String>,
    ) {
        self.iterations += 1;
        match seen {
            Err(e) => {
                let msg = format!("observation {}: {e}", self.iterations);
                self.fail(msg)
            }
            Ok((l, f)) => match classify(orig, modified, &l, &f) {
                Verdict::Original => {}
                Verdict::Modified => self.modified_seen += 1,
                Verdict::Duplicate => {
                    self.modified_seen += 1;
                    self.duplicates += 1;
                }
                Verdict::Torn(msg) => self.fail(msg),
            },
        }
    }

    /// Tallies the whole-pass checks of one pass of `file` against `states` ([`RaceStates::pass_problems`]):
    /// a pass with problems is one failure, described by its first three.
    pub fn check_pass(&mut self, states: &RaceStates, file: RaceFile, pass: &Pass) {
        let problems = states.pass_problems(file, &pass.text);
        if let Some(first) = problems.first() {
            let more = match problems.len() {
                1 => String::new(),
                n => format!(" (and {}: {})", n - 1, problems[1..n.min(3)].join("; ")),
            };
            let msg = format!("pass {}: {first}{more}", self.iterations);
            self.fail(msg);
        }
    }

    /// Tallies one PROCMAP_QUERY check at `addr` (flags 0, or `PROCMAP_QUERY_COVERING_OR_NEXT_VMA` with
    /// `covering_or_next`): the answer, a VMA range, `None` for ENOENT or another error, must be what one of the
    /// `states` answers ([`RaceStates::query_answers`]).
    pub fn query_check(
        &mut self,
        states: &RaceStates,
        addr: u64,
        covering_or_next: bool,
        answer: Result<Option<(u64, u64)>, String>,
    ) {
        self.query_checks += 1;
        let how = if covering_or_next { " (COVERING_OR_NEXT_VMA)" } else { "" };
        let allowed = states.query_answers(addr, covering_or_next);
        let show = |a: Option<(u64, u64)>| a.map_or("ENOENT".to_string(), |(s, e)| format!("{s:#x}-{e:#x}"));
        match answer {
            Ok(a) if allowed.contains(&a) => {}
            Ok(a) => self.fail(format!(
                "PROCMAP_QUERY at {addr:#x}{how} answered {}, neither state's answer ({} or {})",
                show(a),
                show(allowed[0]),
                show(allowed[1])
            )),
            Err(e) => self.fail(format!("PROCMAP_QUERY at {addr:#x}{how} failed: {e}")),
        }
    }

    /// The report of one test: the metrics `iterations_count`, `modified_seen_count`, `duplicates_count`,
    /// `query_checks_count`, `child_cycles_count` (the writer's modify+restore cycles), `failures_count`, and
    /// the kept failures in `notes`; parameters `test`, `file`, `duration_s` (the caller adds its own: `reads`,
    /// and the engine's `side` and `mode`).
    pub fn report(
        &self,
        kind: &str,
        label: String,
        test: RaceTest,
        file: RaceFile,
        duration: Duration,
        host: &HostInfo,
    ) -> Report {
        let mut r = Report::new(kind, label, host.clone());
        r.param("test", test);
        r.param("file", file);
        r.param("duration_s", duration.as_secs_f64());
        r.push_run(BTreeMap::from([
            ("iterations_count".to_string(), self.iterations as f64),
            ("modified_seen_count".to_string(), self.modified_seen as f64),
            ("duplicates_count".to_string(), self.duplicates as f64),
            ("query_checks_count".to_string(), self.query_checks as f64),
            ("child_cycles_count".to_string(), self.child_cycles as f64),
            ("failures_count".to_string(), self.failure_count as f64),
        ]));
        r.notes.extend(self.failures.iter().cloned());
        r.summarise();
        r
    }
}

/// Checks the boundary pairs captured before the race: the restored pair must equal the original, and the
/// modification must change the lines `test` changes (both for split and remap, the last only for resize).
pub fn check_states(
    test: RaceTest,
    orig: &(String, String),
    modified: &(String, String),
    restored: &(String, String),
) -> Result<(), String> {
    if restored != orig {
        return Err(format!("restoring did not restore the boundary lines: {orig:?} became {restored:?}"));
    }
    let first_changes = test != RaceTest::Resize;
    if modified.0 == orig.0 || (modified.1 != orig.1) != first_changes {
        return Err(format!(
            "the {} modification did not change the boundary as expected: original {orig:?}, modified {modified:?}",
            test.name()
        ));
    }
    Ok(())
}

fn run_test(file: RaceFile, test: RaceTest, reads: RaceReads, duration: Duration) -> Result<Outcome> {
    let page = sys::page_size();
    let count = page / 32 + 1;
    let slots = SharedSlots::new(REGIONS + count)?;
    // Relaxed: written before the fork; the child inherits it.
    slots.get(TEST).store(test.code(), Ordering::Relaxed);
    let mut ch = child::spawn(|| child_main(&slots, count, page)).context("fork of the race child")?;
    let t0 = Instant::now();
    // Acquire: pairs with the child's Release store of READY.
    while slots.get(READY).load(Ordering::Acquire) == 0 {
        if let Some(e) = ch.try_wait()? {
            bail!("the race child exited during setup: {e:?}");
        }
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("the race child did not get ready within 10 s");
        }
        check_interrupted()?;
        std::thread::sleep(Duration::from_millis(1));
    }
    // Relaxed: published by the child's Release store of READY, which the Acquire loop above observed.
    let regions: Vec<u64> = (0..count).map(|i| slots.get(REGIONS + i).load(Ordering::Relaxed)).collect();
    let pid = ch.pid().as_raw_nonzero().get();
    let path = format!("/proc/{pid}/{}", file.name());
    let mut f = File::open(&path).with_context(|| format!("open {path}"))?;
    let qfile = File::open(format!("/proc/{pid}/maps")).context("open maps for PROCMAP_QUERY")?;
    let mut buf = Vec::new();
    let err = |e: String| anyhow::anyhow!("{path}: {e}");

    // Locate the boundary between two child regions, in page reads.
    let mut pages = ReadSizes::new(RaceReads::Page, file, page, 0);
    let p = page as u64;
    let first = read_pass(&mut f, &mut pages, &mut buf).map_err(err)?;
    let Some((k, addr, next)) = first.locate(&regions, 3 * p) else {
        bail!("no read boundary of {path} falls between two of the child's regions");
    };
    // The region's protection: read-only or read-write, alternating.
    let prot_write = parse_line(&first.read_boundary(k).map_err(err)?.0).is_some_and(|m| m.perms.write);
    // Relaxed (these three): published to the child by the Release store of the next command.
    slots.get(ADDR).store(addr, Ordering::Relaxed);
    slots.get(NEXT).store(next, Ordering::Relaxed);
    slots.get(PROT_WRITE).store(u64::from(prot_write), Ordering::Relaxed);
    let mut chan = Channel { slots: &slots, seq: 0 };

    let mut sizes = ReadSizes::new(reads, file, page, 0x9e37_79b9_7f4a_7c15 ^ test.code());
    let mut pass = |f: &mut File, buf: &mut Vec<u8>| read_pass(f, &mut sizes, buf);
    let orig = pass(&mut f, &mut buf).map_err(err)?;
    chan.send(OP_MODIFY, &mut ch)?;
    let modified = pass(&mut f, &mut buf).map_err(err)?;
    chan.send(OP_RESTORE, &mut ch)?;
    let restored = pass(&mut f, &mut buf).map_err(err)?;
    let states = RaceStates::new(&orig.text, &modified.text, &restored.text).map_err(err)?;
    let [o, m, r] = [&orig, &modified, &restored].map(|x| x.boundary(reads, k, addr));
    let (orig, modified) = (o.map_err(err)?, m.map_err(err)?);
    check_states(test, &orig, &modified, &r.map_err(err)?).map_err(anyhow::Error::msg)?;

    let mut out = Outcome::default();
    chan.send(OP_LOOP, &mut ch)?;
    let start = Instant::now();
    while start.elapsed() < duration {
        check_interrupted()?;
        if let Some(e) = ch.try_wait()? {
            bail!("the race child died during the race: {e:?}");
        }
        match pass(&mut f, &mut buf) {
            Ok(ps) => {
                out.observe(&orig, &modified, ps.boundary(reads, k, addr));
                out.check_pass(&states, file, &ps);
            }
            Err(e) => out.observe(&orig, &modified, Err(e)),
        }
        if file == RaceFile::Maps {
            for a in query_pages(addr, next, p) {
                for (flags, con) in [(0, false), (PROCMAP_QUERY_COVERING_OR_NEXT_VMA, true)] {
                    let answer = match crate::procmap_query::query(&qfile, a, flags, None) {
                        Ok(v) => Ok(Some((v.start, v.end))),
                        Err(rustix::io::Errno::NOENT) => Ok(None),
                        Err(e) => Err(e.to_string()),
                    };
                    out.query_check(&states, a, con, answer);
                }
            }
        }
    }
    chan.send(OP_EXIT, &mut ch)?;
    let exit = ch.wait()?;
    // Relaxed (this and CHILD_ERR): the child was reaped by `wait` above.
    out.child_cycles = slots.get(CYCLES).load(Ordering::Relaxed);
    if exit != child::Exit::Code(0) {
        let errno = slots.get(CHILD_ERR).load(Ordering::Relaxed);
        bail!(
            "the race child failed ({exit:?}); its last syscall error: {}",
            rustix::io::Errno::from_raw_os_error(errno as i32)
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_of_boundary_pairs() {
        // Split: original "A(3 pages) | B", modified "A1(1 page, x) | A2(2 pages)".
        let s = |x: &str| x.to_string();
        let orig = (s("1000-4000 rw-p A"), s("4000-7000 r--p B"));
        let modified = (s("1000-2000 rwxp A1"), s("2000-4000 rw-p A2"));
        assert_eq!(classify(&orig, &modified, &orig.0, &orig.1), Verdict::Original);
        assert_eq!(classify(&orig, &modified, &modified.0, &modified.1), Verdict::Modified);
        assert_eq!(classify(&orig, &modified, &modified.0, &orig.0), Verdict::Duplicate);
        // A mix: the modified first half followed by the next region (A2 missing: a false gap).
        assert!(matches!(classify(&orig, &modified, &modified.0, &orig.1), Verdict::Torn(_)));
        // The original A followed by A2 (a line of the modified state after an unmodified one).
        assert!(matches!(classify(&orig, &modified, &orig.0, &modified.1), Verdict::Torn(_)));
        // An unrelated line.
        let v = classify(&orig, &modified, "9000-a000 ---p", &orig.1);
        assert!(matches!(&v, Verdict::Torn(m) if m.contains("9000-a000")), "{v:?}");
    }

    #[test]
    fn names_parse() {
        assert_eq!("smaps".parse::<RaceFile>().unwrap(), RaceFile::Smaps);
        assert!("smaps_rollup".parse::<RaceFile>().is_err());
        assert_eq!(RaceTest::ALL.map(RaceTest::name), ["split", "resize", "remap"]);
    }

    /// The split test's three states on an engine address space (the same layout as the child's, fewer
    /// regions): whole `file` texts, original, modified, restored; and the region's address.
    fn engine_split(file: RaceFile) -> (String, String, String, u64) {
        use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, Prot};
        let mm = Mm::new(MmConfig::default());
        let (p, anon) = (PAGE_SIZE, MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED);
        let base = 0x5000_0000_0000;
        for i in 0..5 {
            let prot = if i % 2 == 0 { Prot::READ } else { Prot::RW };
            mm.mmap(base + i * 3 * p, 3 * p, prot, anon, None, 0).unwrap();
        }
        // Region 3, read-write, with one resident page.
        let addr = base + 9 * p;
        mm.write(addr, b"x").unwrap();
        let text = |mm: &Mm| match file {
            RaceFile::Maps => mm.reader().maps(),
            RaceFile::Smaps => mm.reader().smaps(),
        };
        let orig = text(&mm);
        mm.mmap(addr, p, Prot::RW | Prot::EXEC, anon, None, 0).unwrap();
        let modified = text(&mm);
        mm.mmap(addr, p, Prot::RW, anon, None, 0).unwrap();
        let restored = text(&mm);
        (orig, modified, restored, addr)
    }

    fn states(file: RaceFile) -> (RaceStates, String, String, u64) {
        let (o, m, r, addr) = engine_split(file);
        (RaceStates::new(&o, &m, &r).unwrap(), o, m, addr)
    }

    /// The maps line of `text` that starts at `addr`.
    fn line_at(text: &str, addr: u64) -> &str {
        headers(text).find(|l| parse_line(l).unwrap().start == addr).unwrap()
    }

    #[test]
    fn a_pass_of_either_state_or_across_a_restore_passes() {
        for file in [RaceFile::Maps, RaceFile::Smaps] {
            let (st, o, m, _) = states(file);
            assert_eq!(st.pass_problems(file, &o), Vec::<String>::new(), "{file:?}");
            assert_eq!(st.pass_problems(file, &m), Vec::<String>::new(), "{file:?}");
        }
        // The modified state's first line, then the restored region (a restart after the restore): the region's
        // first page shown twice, allowed.
        let (st, o, m, addr) = states(RaceFile::Maps);
        let upto = |t: &str, a: u64| t.lines().take_while(|l| parse_line(l).unwrap().start < a).count();
        let mut mixed: Vec<&str> = m.lines().take(upto(&m, addr) + 1).collect();
        mixed.extend(o.lines().skip(upto(&o, addr)));
        let mixed = mixed.join("\n") + "\n";
        assert_eq!(st.pass_problems(RaceFile::Maps, &mixed), Vec::<String>::new(), "{mixed}");
    }

    #[test]
    fn a_record_shown_three_times_fails() {
        let (st, o, m, addr) = states(RaceFile::Maps);
        // The region's first page: the modified line, the original line, and the original line again (the last
        // also out of order).
        let (first, whole) = (line_at(&m, addr), line_at(&o, addr));
        let thrice = o.replacen(whole, &format!("{first}\n{whole}\n{whole}"), 1);
        let p = st.pass_problems(RaceFile::Maps, &thrice);
        assert!(p.iter().any(|x| x.contains("shown 3 times")), "{p:?}");
        assert!(p.iter().any(|x| x.contains("out of order")), "{p:?}");
        let mut out = Outcome::default();
        out.check_pass(&st, RaceFile::Maps, &Pass { text: thrice, read_ends: vec![] });
        assert_eq!(out.failure_count, 1);
        assert!(out.failures[0].contains("shown 3 times"), "{:?}", out.failures);
    }

    #[test]
    fn a_torn_line_fails() {
        for file in [RaceFile::Maps, RaceFile::Smaps] {
            let (st, o, m, addr) = states(file);
            // A line cut short and the rest of it lost (a read that ended inside a record, resumed at the next).
            let whole = line_at(&o, addr);
            let cut = o.replacen(whole, &whole[..whole.len() / 2], 1);
            let p = st.pass_problems(file, &cut);
            assert!(p.iter().any(|x| x.contains("torn")), "{file:?}: {p:?}");
            // The modified state's range with the original's permissions: a line of neither state.
            let mixed = line_at(&m, addr).replace("rwxp", "rw-p");
            let torn = o.replacen(whole, &mixed, 1);
            let p = st.pass_problems(file, &torn);
            assert!(p.iter().any(|x| x.contains("torn or unknown line")), "{file:?}: {p:?}");
        }
    }

    #[test]
    fn a_wrong_size_and_inconsistent_counters_fail() {
        let (st, o, _, addr) = states(RaceFile::Smaps);
        let record = |t: &str| {
            let from = t.find(line_at(t, addr)).unwrap();
            let len = t[from..].find("VmFlags:").unwrap();
            from..from + len
        };
        let r = record(&o);
        let rec = &o[r.clone()];
        assert!(rec.contains("Size:                 12 kB\n"), "{rec}");
        let wrong = format!(
            "{}{}{}",
            &o[..r.start],
            rec.replace("Size:                 12 kB", "Size:                  8 kB"),
            &o[r.end..]
        );
        let p = st.pass_problems(RaceFile::Smaps, &wrong);
        assert!(p.iter().any(|x| x.contains("Size 8 kB, its range 12 kB")), "{p:?}");
        // One resident page counted as Rss but in none of the Shared/Private counters.
        let rss = rec.replace("Private_Dirty:         4 kB", "Private_Dirty:         0 kB");
        assert_ne!(rss, rec, "{rec}");
        let wrong = format!("{}{rss}{}", &o[..r.start], &o[r.end..]);
        let p = st.pass_problems(RaceFile::Smaps, &wrong);
        assert!(p.iter().any(|x| x.contains("Private_Dirty = 0 kB, Rss 4 kB")), "{p:?}");
    }

    #[test]
    fn a_false_gap_and_a_missing_newline_fail() {
        let (st, o, _, addr) = states(RaceFile::Maps);
        let gap = o.replacen(&format!("{}\n", line_at(&o, addr)), "", 1);
        let p = st.pass_problems(RaceFile::Maps, &gap);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("false gap"), "{p:?}");
        let p = st.pass_problems(RaceFile::Maps, o.trim_end());
        assert!(p[0].contains("newline"), "{p:?}");
    }

    #[test]
    fn query_answers_are_checked_against_both_states() {
        let (st, _, _, addr) = states(RaceFile::Maps);
        let p = 4096;
        // The region's second page: the whole region, or (split) the upper two pages.
        assert_eq!(
            st.query_answers(addr + p, false),
            [Some((addr, addr + 3 * p)), Some((addr + p, addr + 3 * p))]
        );
        let mut out = Outcome::default();
        out.query_check(&st, addr + p, false, Ok(Some((addr + p, addr + 3 * p))));
        out.query_check(&st, addr + p, false, Ok(Some((addr, addr + 3 * p))));
        assert_eq!((out.query_checks, out.failure_count), (2, 0));
        // The split-off page does not contain the address; ENOENT is no state's answer in mapped memory.
        out.query_check(&st, addr + p, false, Ok(Some((addr, addr + p))));
        out.query_check(&st, addr + p, false, Ok(None));
        out.query_check(&st, addr + p, true, Err("EINVAL".into()));
        assert_eq!((out.query_checks, out.failure_count), (5, 3), "{:?}", out.failures);
        // Above the last region: ENOENT in both states, and no next VMA.
        assert_eq!(st.query_answers(addr + 9 * p, false), [None, None]);
        assert_eq!(st.query_answers(addr + 9 * p, true), [None, None]);
        assert_eq!(
            query_pages(addr, addr + 3 * p, p).collect::<Vec<_>>(),
            (0..7).map(|i| addr - p + i * p).collect::<Vec<_>>()
        );
    }

    #[test]
    fn read_sizes_and_boundaries() {
        let mut page = ReadSizes::new(RaceReads::Page, RaceFile::Maps, 4096, 1);
        assert_eq!(page.next_size(), 4096);
        let mut r = ReadSizes::new(RaceReads::Random, RaceFile::Smaps, 4096, 7);
        let sizes: Vec<usize> = (0..1000).map(|_| r.next_size()).collect();
        assert!(sizes.iter().all(|&n| (1..=1200).contains(&n)));
        assert!(sizes.iter().any(|&n| n < 10) && sizes.iter().any(|&n| n > 1100));
        let text = "00001000-00004000 r--p 00000000 00:00 0 \n00004000-00007000 rw-p 00000000 00:00 0 \n\
                    00007000-0000a000 r--p 00000000 00:00 0 \n";
        let pass = Pass { text: text.into(), read_ends: vec![41, 82, 123] };
        assert_eq!(pass.read(1), "00004000-00007000 rw-p 00000000 00:00 0 \n");
        let b = pass.read_boundary(0).unwrap();
        assert_eq!(
            (b.0.as_str(), b.1.as_str()),
            (text.lines().next().unwrap(), text.lines().nth(1).unwrap())
        );
        assert_eq!(pass.record_boundary(0x4000), pass.read_boundary(1));
        assert!(pass.record_boundary(0x5000).unwrap_err().contains("false gap"));
        assert_eq!(pass.locate(&[0x4000, 0x7000], 0x3000), Some((1, 0x4000, 0x7000)));
        assert_eq!(pass.locate(&[0x1000], 0x3000), None);
        // A read that ends inside a record, in page reads.
        let torn = Pass { text: text.into(), read_ends: vec![20, 82, 123] };
        assert!(torn.read_boundary(0).unwrap_err().contains("newline"));
    }

    #[test]
    fn every_test_races_without_tearing_on_maps() {
        let host = crate::hostinfo::gather();
        let reports = run(
            RaceFile::Maps,
            &RaceTest::ALL,
            RaceReads::Page,
            Duration::from_millis(300),
            &host,
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(reports.len(), 3);
        for r in &reports {
            let m = |k: &str| r.metric(k).unwrap().median;
            assert_eq!(m("failures_count"), 0.0, "{}: {:?}", r.label, r.notes);
            assert!(m("iterations_count") > 10.0, "{}", r.label);
            assert!(m("child_cycles_count") > 10.0, "{}", r.label);
            // 7 pages, each asked with flags 0 and COVERING_OR_NEXT_VMA.
            assert_eq!(m("query_checks_count"), 14.0 * m("iterations_count"));
        }
    }

    #[test]
    fn smaps_split_races_without_tearing() {
        let host = crate::hostinfo::gather();
        let reports = run(
            RaceFile::Smaps,
            &[RaceTest::Split],
            RaceReads::Page,
            Duration::from_millis(300),
            &host,
            &mut |_, _| {},
        )
        .unwrap();
        let m = |k: &str| reports[0].metric(k).unwrap().median;
        assert_eq!(m("failures_count"), 0.0, "{:?}", reports[0].notes);
        assert!(m("iterations_count") > 0.0);
        assert_eq!(m("query_checks_count"), 0.0);
    }
}

#[cfg(test)]
mod random_reads {
    use super::*;

    #[test]
    fn every_test_races_without_tearing_in_random_reads() {
        let host = crate::hostinfo::gather();
        let mut modified = 0.0;
        for file in [RaceFile::Maps, RaceFile::Smaps] {
            let reports = run(
                file,
                &RaceTest::ALL,
                RaceReads::Random,
                Duration::from_millis(300),
                &host,
                &mut |_, _| {},
            )
            .unwrap();
            for r in &reports {
                let m = |k: &str| r.metric(k).unwrap().median;
                assert_eq!(m("failures_count"), 0.0, "{}: {:?}", r.label, r.notes);
                assert!(m("iterations_count") > 0.0, "{}", r.label);
                assert_eq!(r.parameters["reads"], "random");
                modified += m("modified_seen_count");
            }
        }
        // The reader raced the writer (one run alone may miss the modified state on a busy machine).
        assert!(modified > 0.0);
    }
}
