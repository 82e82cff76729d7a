//! The engine's `/proc` tearing scenarios (`tools/testing/selftests/proc/proc-maps-race.c`) as a library
//! function: a writer thread changes the VMAs at one boundary over and over while a reader thread reads
//! `maps`, `smaps` (in chunks, as `read(2)` does: [`ProcFile`](crate::ProcFile)) or asks `PROCMAP_QUERY`, in
//! one [`ReaderMode`], and every read is checked against the states the writer moves between.
//!
//! ```
//! use std::time::Duration;
//! use vmspace_mm::race::{Scenario, run};
//! use vmspace_mm::{MmConfig, ReaderMode};
//!
//! let r = run(&MmConfig::default(), Scenario::MapsSplit, ReaderMode::Lockless, Duration::from_millis(20));
//! assert_eq!(r.violations, 0, "{:?}", r.first_violation);
//! assert!(r.reads > 0 && r.writer_ops > 0);
//! ```
//!
//! # Layout and changes
//!
//! One-page filler VMAs (read-only, a page apart, so they never merge) below and above a target region `T`
//! that the writer changes back and forth between two states, as the selftest's three tests do:
//! - *split* (`test_maps_tearing_from_split`): a 3-page read-write VMA; `mprotect` of its middle page to
//!   read-only splits it into three VMAs, `mprotect` back merges them into one;
//! - *resize* (`test_maps_tearing_from_resize`): a 4-page VMA; `munmap` of its upper half shrinks it, `mmap`
//!   (`MAP_FIXED`) of the same half grows it back (merged);
//! - *remap* (`test_maps_tearing_from_remap`): a 2-page VMA; `mremap` (`MREMAP_FIXED`) of its upper page
//!   moves that page away, a second one moves it back (merged).
//!
//! The two states' maps texts are taken from the engine itself before the race (the quiescent address
//! space, the mmap-lock reader), and the run checks that the changes return to the first state.
//!
//! # Starvation
//!
//! The writer pauses [`WRITER_PAUSE`] (1 µs, a fraction of one call) between its calls, as a program's calls
//! are separated by its own work. Without the pause a writer that keeps the reader's next VMA write-locked
//! back to back starves the readers that wait for it: the lockless reader retries until it finds the VMA
//! between two calls (a seqcount reader's starvation: it never makes the writer wait, so it can only wait),
//! and the mmap-lock reader spins for a lock that the writer takes again at once (the engine's mmap lock hands
//! itself only to readers that have parked, `vma::mmap_lock`, and a reader spins a while before it parks).
//! With the pause every mode reads steadily.
//!
//! # Checks (a violation is counted for each failed one)
//!
//! - `maps` and `smaps` (read to the end in `read(2)`s of random sizes, 1 byte to about three maps lines or
//!   one smaps record, so that the walk restarts at `last_pos` every record or few): every line (every `smaps` record's header) is a line of
//!   one of the two states (no torn line); a `smaps` record's `Size` is its header's length; the memory mapped
//!   in both states is covered by the lines (no false gap); no address is covered by more than two lines (a
//!   VMA is reported at most twice: before and after a change).
//! - `PROCMAP_QUERY`: each page of the region asked for exactly (flags 0): the answer is a VMA of one of the
//!   states that contains the address, ENOENT only for an address unmapped in one of the states; and the
//!   first VMA at or after the page below the region (`COVERING_OR_NEXT_VMA`) starts at the region.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
use vmspace_proc::{MapsLine, QueryRequest, parse_smaps};

use crate::{MapFlags, Mm, MmConfig, MremapFlags, PAGE_SIZE, ProcFileKind, Prot, ReaderMode};

const P: u64 = PAGE_SIZE;
/// The lowest filler.
const BASE: u64 = 0x5000_0000_0000;
/// The target region.
const T: u64 = BASE + 32 * P;
/// Fillers on each side.
const FILLERS: u64 = 6;
/// The writer's pause between two calls (module docs, "Starvation").
pub const WRITER_PAUSE: Duration = Duration::from_micros(1);
const ANON_FIXED: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

/// What the writer changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    /// `mprotect` splits a VMA in three and merges it back.
    Split,
    /// `munmap` shrinks a VMA, `mmap` grows it back.
    Resize,
    /// `mremap` moves a VMA's upper page away and back.
    Remap,
}

/// How the reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum View {
    /// `/proc/PID/maps` in chunks.
    Maps,
    /// `/proc/PID/smaps` in chunks.
    Smaps,
    /// `PROCMAP_QUERY` per page.
    Query,
}

/// One race: a change and a view (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Split/merge under `maps` readers.
    MapsSplit,
    /// Shrink/grow under `maps` readers.
    MapsResize,
    /// Move away/back under `maps` readers.
    MapsRemap,
    /// Split/merge under `smaps` readers.
    SmapsSplit,
    /// Shrink/grow under `smaps` readers.
    SmapsResize,
    /// Move away/back under `smaps` readers.
    SmapsRemap,
    /// Split/merge under `PROCMAP_QUERY`.
    QuerySplit,
    /// Shrink/grow under `PROCMAP_QUERY`.
    QueryResize,
    /// Move away/back under `PROCMAP_QUERY`.
    QueryRemap,
}

impl Scenario {
    /// Every scenario.
    pub const ALL: [Scenario; 9] = [
        Scenario::MapsSplit,
        Scenario::MapsResize,
        Scenario::MapsRemap,
        Scenario::SmapsSplit,
        Scenario::SmapsResize,
        Scenario::SmapsRemap,
        Scenario::QuerySplit,
        Scenario::QueryResize,
        Scenario::QueryRemap,
    ];

    /// The scenario's name: `VIEW-CHANGE`, e.g. `maps-split`, `smaps-resize`, `query-remap`.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::MapsSplit => "maps-split",
            Scenario::MapsResize => "maps-resize",
            Scenario::MapsRemap => "maps-remap",
            Scenario::SmapsSplit => "smaps-split",
            Scenario::SmapsResize => "smaps-resize",
            Scenario::SmapsRemap => "smaps-remap",
            Scenario::QuerySplit => "query-split",
            Scenario::QueryResize => "query-resize",
            Scenario::QueryRemap => "query-remap",
        }
    }

    /// What the writer changes.
    pub fn change(self) -> Change {
        match self {
            Scenario::MapsSplit | Scenario::SmapsSplit | Scenario::QuerySplit => Change::Split,
            Scenario::MapsResize | Scenario::SmapsResize | Scenario::QueryResize => Change::Resize,
            Scenario::MapsRemap | Scenario::SmapsRemap | Scenario::QueryRemap => Change::Remap,
        }
    }

    /// How the reader reads.
    pub fn view(self) -> View {
        match self {
            Scenario::MapsSplit | Scenario::MapsResize | Scenario::MapsRemap => View::Maps,
            Scenario::SmapsSplit | Scenario::SmapsResize | Scenario::SmapsRemap => View::Smaps,
            Scenario::QuerySplit | Scenario::QueryResize | Scenario::QueryRemap => View::Query,
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    /// A scenario by its [`Scenario::name`].
    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Scenario::ALL.iter().map(|x| x.name()).collect();
            format!("unknown race scenario {s:?} (expected one of: {})", names.join(", "))
        })
    }
}

/// What one [`run`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaceReport {
    /// The scenario run.
    pub scenario: Scenario,
    /// The reader's mode.
    pub mode: ReaderMode,
    /// Whole reads: a file read to its end, or one round of queries.
    pub reads: u64,
    /// Individual checks made (lines, records, answers, coverage and overlap checks).
    pub checks: u64,
    /// Failed checks (0 for a reader that keeps the modes' promises).
    pub violations: u64,
    /// The first failed check, described.
    pub first_violation: Option<String>,
    /// Changes the writer made (each a call).
    pub writer_ops: u64,
    /// Chunks rendered (`maps`/`smaps`: walk restarts; 0 for queries).
    pub chunks: u64,
    /// Wall time of the race.
    pub elapsed: Duration,
}

/// The two states of a scenario and what a read may show.
struct States {
    /// Every line a read may show: the fillers' and both states' target lines.
    valid: HashSet<String>,
    /// The VMAs (start, end) either state has.
    vmas: HashSet<(u64, u64)>,
    /// Ranges mapped in both states (must always be shown).
    always: Vec<(u64, u64)>,
    /// Pages of the region (and around it) a query round asks for.
    probes: Vec<u64>,
}

/// The writer's two calls.
fn change(mm: &Mm, c: Change, forth: bool) -> Result<(), crate::Errno> {
    match (c, forth) {
        (Change::Split, true) => mm.mprotect(T + P, P, Prot::READ),
        (Change::Split, false) => mm.mprotect(T + P, P, Prot::RW),
        (Change::Resize, true) => mm.munmap(T + 2 * P, 2 * P),
        (Change::Resize, false) => mm.mmap(T + 2 * P, 2 * P, Prot::RW, ANON_FIXED, None, 0).map(|_| ()),
        (Change::Remap, true) => {
            mm.mremap(T + P, P, P, MremapFlags::MAYMOVE | MremapFlags::FIXED, T + 8 * P).map(|_| ())
        }
        (Change::Remap, false) => {
            mm.mremap(T + 8 * P, P, P, MremapFlags::MAYMOVE | MremapFlags::FIXED, T + P).map(|_| ())
        }
    }
}

/// Builds the layout of `c` in `mm` (module docs).
fn layout(mm: &Mm, c: Change) {
    for i in 0..FILLERS {
        mm.mmap(BASE + 2 * i * P, P, Prot::READ, ANON_FIXED, None, 0).expect("filler below");
        mm.mmap(T + 16 * P + 2 * i * P, P, Prot::READ, ANON_FIXED, None, 0).expect("filler above");
    }
    let pages = match c {
        Change::Split => 3,
        Change::Resize => 4,
        Change::Remap => 2,
    };
    mm.mmap(T, pages * P, Prot::RW, ANON_FIXED, None, 0).expect("target");
}

/// Parses a maps line's range.
fn range(line: &str) -> Option<(u64, u64)> {
    let l: MapsLine = line.parse().ok()?;
    Some((l.start, l.end))
}

/// The ranges covered by `lines` of one state, merged.
fn covered(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
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

/// The intersection of two sorted, merged range lists.
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(s1, e1) in a {
        for &(s2, e2) in b {
            let (s, e) = (s1.max(s2), e1.min(e2));
            if s < e {
                out.push((s, e));
            }
        }
    }
    out
}

impl States {
    /// The states of `c`, read from the quiescent `mm` (which ends in the first state again).
    fn take(mm: &Mm, c: Change) -> States {
        let first = mm.reader().maps();
        change(mm, c, true).expect("the writer's first change");
        let second = mm.reader().maps();
        change(mm, c, false).expect("the writer's second change");
        let again = mm.reader().maps();
        assert_eq!(first, again, "the scenario's changes must return to its first state");
        assert_ne!(first, second, "the scenario's change must change the maps");
        States::from_texts(&first, &second)
    }

    /// The states of two maps texts.
    fn from_texts(first: &str, second: &str) -> States {
        let mut valid = HashSet::new();
        let mut vmas = HashSet::new();
        let mut each = |text: &str| {
            let mut rs = Vec::new();
            for l in text.lines() {
                valid.insert(l.to_string());
                let r = range(l).expect("the engine's own maps line");
                vmas.insert(r);
                rs.push(r);
            }
            covered(&rs)
        };
        let a = each(first);
        let b = each(second);
        let always = intersect(&a, &b);
        let probes = (0..12).map(|i| T - P + i * P).collect();
        States { valid, vmas, always, probes }
    }
}

/// Counts checks and violations.
#[derive(Default)]
struct Tally {
    checks: u64,
    violations: u64,
    first: Option<String>,
}

impl Tally {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.violations += 1;
            if self.first.is_none() {
                self.first = Some(what());
            }
        }
    }
}

/// Checks one whole `maps` or `smaps` read against `st` (module docs).
fn check_text(st: &States, view: View, text: &str, t: &mut Tally) {
    let headers: Vec<String> = match view {
        View::Smaps => match parse_smaps(text) {
            Ok(records) => {
                let mut h = Vec::new();
                for r in records {
                    let line = r.header.to_string();
                    let len_kb = (r.header.end - r.header.start) >> 10;
                    t.check(r.size_kb == len_kb, || {
                        format!("smaps record {line:?} with Size {} kB", r.size_kb)
                    });
                    h.push(line);
                }
                h
            }
            Err((n, e)) => {
                t.check(false, || format!("smaps text does not parse at line {n}: {e:?}"));
                return;
            }
        },
        _ => text.lines().map(str::to_string).collect(),
    };
    let mut ranges = Vec::new();
    for h in &headers {
        t.check(st.valid.contains(h), || format!("torn or unknown line {h:?}"));
        if let Some(r) = range(h) {
            ranges.push(r);
        }
    }
    let shown = covered(&ranges);
    for &(s, e) in &st.always {
        let ok = shown.iter().any(|&(a, b)| a <= s && e <= b);
        t.check(ok, || format!("false gap: {s:#x}-{e:#x} is mapped throughout but not shown in\n{text}"));
    }
    // At most two lines over any address: sweep the line boundaries.
    let mut points: Vec<u64> = ranges.iter().flat_map(|&(s, e)| [s, e]).collect();
    points.sort_unstable();
    points.dedup();
    for w in points.windows(2) {
        let n = ranges.iter().filter(|&&(s, e)| s <= w[0] && w[1] <= e).count();
        t.check(n <= 2, || format!("{:#x}-{:#x} shown {n} times in\n{text}", w[0], w[1]));
    }
}

/// One round of queries against `st` (module docs).
fn check_queries(mm: &Mm, mode: ReaderMode, st: &States, t: &mut Tally) {
    let r = mm.reader_with(mode);
    for &a in &st.probes {
        let always = st.always.iter().any(|&(s, e)| s <= a && a < e);
        match r.query(&QueryRequest::new(0, a)) {
            Ok(q) => t.check(
                st.vmas.contains(&(q.vma_start, q.vma_end)) && q.vma_start <= a && a < q.vma_end,
                || format!("query {a:#x}: {:#x}-{:#x} is no VMA of either state", q.vma_start, q.vma_end),
            ),
            Err(e) => t.check(e == crate::Errno::ENOENT && !always, || format!("query {a:#x}: errno {e}")),
        }
    }
    match r.query(&QueryRequest::new(PROCMAP_QUERY_COVERING_OR_NEXT_VMA, T - P)) {
        Ok(q) => t.check(q.vma_start == T && st.vmas.contains(&(q.vma_start, q.vma_end)), || {
            format!("query next after {:#x}: {:#x}-{:#x}", T - P, q.vma_start, q.vma_end)
        }),
        Err(e) => t.check(false, || format!("query next after {:#x}: errno {e}", T - P)),
    }
}

/// A small xorshift generator (read sizes).
fn next_rand(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Runs `scenario` on a new address space of configuration `cfg` for `duration`: one writer thread making
/// the scenario's changes back and forth, one reader thread reading in `mode` and checking every read
/// (module docs). Returns the counts; `violations` is 0 when the mode keeps its promises. The address space
/// is validated after the race (a failure is reported as a violation).
pub fn run(cfg: &MmConfig, scenario: Scenario, mode: ReaderMode, duration: Duration) -> RaceReport {
    let mm = Mm::new(cfg.clone());
    let c = scenario.change();
    layout(&mm, c);
    // A page for the smaps walks: the first page of the region (mapped in both states).
    mm.write(T, b"race").expect("a page of the target");
    let st = States::take(&mm, c);
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let writer_err: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let started = Instant::now();
    let (mut tally, reads, chunks) = std::thread::scope(|s| {
        s.spawn(|| {
            let mut forth = true;
            // Relaxed: a stop flag with no data behind it.
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = change(&mm, c, forth) {
                    *writer_err.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("writer: {e:?}"));
                    break;
                }
                forth = !forth;
                // Relaxed: a counter read after the join.
                ops.fetch_add(1, Ordering::Relaxed);
                // A pause between calls (`WRITER_PAUSE`, module docs).
                let t = Instant::now();
                while t.elapsed() < WRITER_PAUSE {
                    std::hint::spin_loop();
                }
            }
            // Leave the first state.
            if !forth {
                let _ = change(&mm, c, false);
            }
        });
        let mut t = Tally::default();
        let (mut reads, mut chunks) = (0u64, 0u64);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (scenario as u64) << 8 ^ mode as u64;
        let mut buf = vec![0u8; crate::space::reader::SEQ_BUF_SIZE];
        // The race starts when the writer does (on a busy machine its thread may start late), and lasts
        // `duration`, and at least one read and two writer calls (bounded: a writer that cannot run for
        // seconds ends it).
        let give_up = Duration::from_secs(5);
        // Relaxed: a counter with no data behind it.
        while ops.load(Ordering::Relaxed) == 0 && started.elapsed() < give_up {
            std::thread::yield_now();
        }
        let begun = Instant::now();
        // Relaxed: as above.
        let short = || ops.load(Ordering::Relaxed) < 2 && begun.elapsed() < duration + give_up;
        while reads == 0 || begun.elapsed() < duration || short() {
            match scenario.view() {
                View::Query => check_queries(&mm, mode, &st, &mut t),
                view => {
                    let kind = if view == View::Maps { ProcFileKind::Maps } else { ProcFileKind::Smaps };
                    let mut f = mm.reader_with(mode).open(kind);
                    let mut text = Vec::new();
                    loop {
                        // Up to about three maps lines, or one smaps record: a new chunk (a walk restart)
                        // every record or few.
                        let most = if view == View::Maps { 160 } else { 1200 };
                        let want = 1 + (next_rand(&mut seed) % most) as usize;
                        let n = f.read(&mut buf[..want]);
                        if n == 0 {
                            break;
                        }
                        text.extend_from_slice(&buf[..n]);
                    }
                    chunks += f.chunks();
                    match String::from_utf8(text) {
                        Ok(text) => check_text(&st, view, &text, &mut t),
                        Err(_) => t.check(false, || "a read that is not UTF-8".to_string()),
                    }
                }
            }
            reads += 1;
        }
        // Relaxed: see the writer.
        stop.store(true, Ordering::Relaxed);
        (t, reads, chunks)
    });
    let elapsed = started.elapsed();
    if let Some(e) = writer_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        tally.check(false, || e);
    }
    if let Err(e) = mm.validate() {
        tally.check(false, || format!("validate after the race: {e}"));
    }
    RaceReport {
        scenario,
        mode,
        reads,
        checks: tally.checks,
        violations: tally.violations,
        first_violation: tally.first,
        // Relaxed: the writer has been joined.
        writer_ops: ops.load(Ordering::Relaxed),
        chunks,
        elapsed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split scenario's two maps texts, from the engine.
    fn texts() -> (String, String) {
        let mm = Mm::new(MmConfig::default());
        layout(&mm, Change::Split);
        let first = mm.reader().maps();
        change(&mm, Change::Split, true).unwrap();
        let second = mm.reader().maps();
        (first, second)
    }

    fn tally(text: &str) -> Tally {
        let (first, second) = texts();
        let st = States::from_texts(&first, &second);
        let mut t = Tally::default();
        check_text(&st, View::Maps, text, &mut t);
        t
    }

    /// The line of `text` starting at `addr`.
    fn line_at(text: &str, addr: u64) -> String {
        text.lines().find(|l| range(l).unwrap().0 == addr).unwrap().to_string()
    }

    #[test]
    fn either_state_and_a_restart_overlap_pass() {
        let (first, second) = texts();
        assert_eq!(tally(&first).violations, 0);
        assert_eq!(tally(&second).violations, 0);
        // A chunk ended after the split's first line; the next one found the merged VMA again.
        let merged = line_at(&first, T);
        let mixed = second.replacen(&line_at(&second, T + P), &merged, 1);
        let t = tally(&mixed);
        assert_eq!(t.violations, 0, "{:?}", t.first);
    }

    #[test]
    fn torn_missing_and_thrice_shown_lines_are_violations() {
        let (first, second) = texts();
        // The split's range with the merged VMA's permissions: torn.
        let split_first = line_at(&second, T);
        let torn = first.replacen(&line_at(&first, T), &split_first.replace("rw-p", "r--p"), 1);
        let t = tally(&torn);
        assert!(t.violations >= 1);
        assert!(t.first.unwrap().contains("torn"));
        // The middle line lost: a false gap.
        let gap = second.replacen(&format!("{}\n", line_at(&second, T + P)), "", 1);
        let t = tally(&gap);
        assert_eq!(t.violations, 1);
        assert!(t.first.unwrap().contains("false gap"));
        // The region's first page shown three times.
        let merged = line_at(&first, T);
        let thrice = first.replacen(&merged, &format!("{split_first}\n{merged}\n{merged}"), 1);
        let t = tally(&thrice);
        assert!(t.first.unwrap().contains("3 times"));
    }

    #[test]
    fn names_round_trip() {
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>(), Ok(s));
        }
        assert!("maps".parse::<Scenario>().is_err());
    }
}
