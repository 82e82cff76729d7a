//! The proc-maps race checks (the kernel selftest `proc-maps-race`'s three tests), natively.
//!
//! # Setup
//! A forked child maps `page_size / 32 + 1` private anonymous regions of 3 pages each, alternating read-only and
//! read-write so that neighbours never merge; that is more lines than fit in one page of maps output, so some
//! boundary between two `read()` calls of one page each falls between two of the child's lines. The parent
//! reads `/proc/CHILD/maps` (or `smaps`) one page per `read()`, finds the first read *k* whose last record
//! and the next read's first record are both child regions, and names them `addr` and `next_addr`. Those two
//! records are produced by different `read()` calls, with the kernel's locks dropped in between: the place
//! where tearing could appear.
//!
//! # The three tests
//! The child modifies and restores the region at `addr` on command; the parent first captures the boundary
//! lines in the original, modified and restored states (restored must equal original), then lets the child
//! modify/restore in a tight loop and re-reads the boundary for the test's duration.
//! * **split**: modify = map one fresh page at `addr` with the region's protection plus EXEC (splits the
//!   region); restore = map it again with the original protection (merges back). Both boundary lines change.
//!   PROCMAP_QUERY at `addr + page` returns the whole region or the split-off `[addr+page, addr+3 pages)`.
//! * **resize**: modify = `mremap` the region from 3 pages to 1 in place; restore = grow it back. Only the
//!   last line changes. PROCMAP_QUERY at `addr` returns a VMA starting at `addr` of 3 pages or 1.
//! * **remap**: modify = move the last page of the next region into the middle of this one
//!   (`MREMAP_FIXED | MREMAP_MAYMOVE | MREMAP_DONTUNMAP`, splitting it in three); restore = `mprotect` that page
//!   back to the region's protection (merges back). Both lines change. PROCMAP_QUERY at `addr + page` returns the
//!   whole region or the 1-page VMA at `addr + page`.
//!
//! # Verdict per observation (last line L of read k, first line F of read k+1)
//! * L = modified-L: F must be modified-F, or original-L (the same VMA reported twice, before and after a
//!   restore: a **duplicate**, allowed);
//! * L = original-L: F must be original-F;
//! * anything else is **tearing** (a mix of states, or a false gap where a region is missing) and is reported
//!   with the offending lines. Each read must also end with a newline. In maps mode every iteration also runs
//!   the PROCMAP_QUERY check.

use crate::child::{self, SharedSlots, check_interrupted};
use crate::hostinfo::HostInfo;
use crate::maps::{is_header, parse_line, read_pages};
use crate::sys;
use anyhow::{Context, Result, bail};
use rustix::mm::ProtFlags;
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
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
    /// Boundary observations made during the race.
    pub iterations: u64,
    /// Observations that saw the modified state.
    pub modified_seen: u64,
    /// Observations where the same VMA was reported twice (allowed).
    pub duplicates: u64,
    /// PROCMAP_QUERY checks made.
    pub query_checks: u64,
    /// Modify+restore cycles the child completed.
    pub child_cycles: u64,
    /// Number of failed observations (tearing, false gaps, bad query results, torn reads).
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

/// Runs `tests` for `duration` each against `file`; one report per test (one run each).
pub fn run(
    file: RaceFile,
    tests: &[RaceTest],
    duration: Duration,
    host: &HostInfo,
    on_test: &mut dyn FnMut(RaceTest, &Outcome),
) -> Result<Vec<Report>> {
    if duration.is_zero() || duration > Duration::from_secs(24 * 3600) {
        bail!("--duration must be positive and at most 24 h");
    }
    let mut reports = Vec::new();
    for &t in tests {
        let o = run_test(file, t, duration)?;
        on_test(t, &o);
        let r = o.report("kernel.race", format!("{} ({})", t.name(), file.name()), t, file, duration, host);
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

/// The boundary pair of read `k` / `k+1`: (last record header of read k, first record header of read k+1).
fn boundary(f: &mut File, page: usize, k: usize, buf: &mut Vec<u8>) -> Result<(String, String), String> {
    let pages = read_pages(f, page, k + 2, buf).map_err(|e| format!("read failed: {e}"))?;
    if pages.len() < k + 2 {
        return Err(format!("output ended after {} reads; expected at least {}", pages.len(), k + 2));
    }
    for (i, p) in pages.iter().enumerate() {
        if !p.ends_with('\n') {
            return Err(format!(
                "read {i} does not end with a newline: ...{:?}",
                &p[p.len().saturating_sub(80)..]
            ));
        }
    }
    let last = pages[k].lines().rev().find(|l| is_header(l));
    let first = pages[k + 1].lines().find(|l| is_header(l));
    match (last, first) {
        (Some(l), Some(f)) => Ok((l.to_string(), f.to_string())),
        _ => Err(format!("no record header at the boundary of reads {k} and {}", k + 1)),
    }
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

    /// Tallies one PROCMAP_QUERY check of `test` on the region at `addr` (pages of `page` bytes): the query
    /// is made at [`query_addr`] and its answer, a VMA range or the error, must be one [`query_allows`].
    pub fn query_check(&mut self, test: RaceTest, addr: u64, page: u64, answer: Result<(u64, u64), String>) {
        self.query_checks += 1;
        let qaddr = query_addr(test, addr, page);
        match answer {
            Ok((s, e)) if query_allows(test, addr, page, s, e) => {}
            Ok((s, e)) => {
                self.fail(format!("PROCMAP_QUERY at {qaddr:#x} returned {s:#x}-{e:#x}, not an allowed VMA"))
            }
            Err(e) => self.fail(format!("PROCMAP_QUERY at {qaddr:#x} failed: {e}")),
        }
    }

    /// The report of one test: the metrics `iterations_count`, `modified_seen_count`, `duplicates_count`,
    /// `query_checks_count`, `child_cycles_count` (the writer's modify+restore cycles), `failures_count`, and
    /// the kept failures in `notes`; parameters `test`, `file`, `duration_s` (the caller adds its own).
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

/// Where `test`'s PROCMAP_QUERY check asks (module docs): the region's second page for split and remap, its
/// start for resize.
pub fn query_addr(test: RaceTest, addr: u64, page: u64) -> u64 {
    match test {
        RaceTest::Split | RaceTest::Remap => addr + page,
        RaceTest::Resize => addr,
    }
}

/// Whether `[start, end)` is a VMA `test`'s PROCMAP_QUERY check may answer (module docs).
pub fn query_allows(test: RaceTest, addr: u64, p: u64, start: u64, end: u64) -> bool {
    match test {
        RaceTest::Split => (start, end) == (addr, addr + 3 * p) || (start, end) == (addr + p, addr + 3 * p),
        RaceTest::Resize => start == addr && (end - start == 3 * p || end - start == p),
        RaceTest::Remap => (start, end) == (addr, addr + 3 * p) || (start, end) == (addr + p, addr + 2 * p),
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

fn run_test(file: RaceFile, test: RaceTest, duration: Duration) -> Result<Outcome> {
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
    let fname = match file {
        RaceFile::Maps => "maps",
        RaceFile::Smaps => "smaps",
    };
    let path = format!("/proc/{pid}/{fname}");
    let mut f = File::open(&path).with_context(|| format!("open {path}"))?;
    let qfile = File::open(format!("/proc/{pid}/maps")).context("open maps for PROCMAP_QUERY")?;
    let mut buf = Vec::new();

    // Locate the boundary between two child regions.
    let pages = read_pages(&mut f, page, usize::MAX, &mut buf)?;
    let is_child =
        |l: &str| parse_line(l).filter(|m| m.end - m.start == 3 * page as u64 && regions.contains(&m.start));
    let mut found = None;
    for k in 0..pages.len().saturating_sub(1) {
        let last = pages[k].lines().rev().find(|l| is_header(l));
        let first = pages[k + 1].lines().find(|l| is_header(l));
        if let (Some(l), Some(fl)) = (last.and_then(is_child), first.and_then(is_child))
            && fl.start > l.start
        {
            found = Some((k, l, fl));
            break;
        }
    }
    let Some((k, last, first)) = found else {
        bail!("no read boundary of {path} falls between two of the child's regions ({} reads)", pages.len());
    };
    let (addr, next) = (last.start, first.start);
    // Relaxed (these three): published to the child by the Release store of the next command.
    slots.get(ADDR).store(addr, Ordering::Relaxed);
    slots.get(NEXT).store(next, Ordering::Relaxed);
    slots.get(PROT_WRITE).store(u64::from(last.perms.write), Ordering::Relaxed);
    let mut chan = Channel { slots: &slots, seq: 0 };

    let err = |e: String| anyhow::anyhow!("{path}: {e}");
    let orig = boundary(&mut f, page, k, &mut buf).map_err(err)?;
    chan.send(OP_MODIFY, &mut ch)?;
    let modified = boundary(&mut f, page, k, &mut buf).map_err(err)?;
    chan.send(OP_RESTORE, &mut ch)?;
    let restored = boundary(&mut f, page, k, &mut buf).map_err(err)?;
    let mut out = Outcome::default();
    check_states(test, &orig, &modified, &restored).map_err(anyhow::Error::msg)?;

    let p = page as u64;
    chan.send(OP_LOOP, &mut ch)?;
    let start = Instant::now();
    while start.elapsed() < duration {
        check_interrupted()?;
        if let Some(e) = ch.try_wait()? {
            bail!("the race child died during the race: {e:?}");
        }
        out.observe(&orig, &modified, boundary(&mut f, page, k, &mut buf));
        if file == RaceFile::Maps {
            let answer = crate::procmap_query::query(&qfile, query_addr(test, addr, p), 0, None)
                .map(|v| (v.start, v.end))
                .map_err(|e| e.to_string());
            out.query_check(test, addr, p, answer);
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

    #[test]
    fn every_test_races_without_tearing_on_maps() {
        let host = crate::hostinfo::gather();
        let reports =
            run(RaceFile::Maps, &RaceTest::ALL, Duration::from_millis(300), &host, &mut |_, _| {}).unwrap();
        assert_eq!(reports.len(), 3);
        for r in &reports {
            let m = |k: &str| r.metric(k).unwrap().median;
            assert_eq!(m("failures_count"), 0.0, "{}: {:?}", r.label, r.notes);
            assert!(m("iterations_count") > 10.0, "{}", r.label);
            assert!(m("child_cycles_count") > 10.0, "{}", r.label);
            assert_eq!(m("query_checks_count"), m("iterations_count"));
        }
    }

    #[test]
    fn smaps_split_races_without_tearing() {
        let host = crate::hostinfo::gather();
        let reports =
            run(RaceFile::Smaps, &[RaceTest::Split], Duration::from_millis(300), &host, &mut |_, _| {})
                .unwrap();
        let m = |k: &str| reports[0].metric(k).unwrap().median;
        assert_eq!(m("failures_count"), 0.0, "{:?}", reports[0].notes);
        assert!(m("iterations_count") > 0.0);
        assert_eq!(m("query_checks_count"), 0.0);
    }
}
