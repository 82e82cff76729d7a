//! The proc-maps-race checks (`tools/testing/selftests/proc/proc-maps-race.c`, natively on the kernel in
//! `vmspace_linux::race`) on the engine: a writer thread splits, resizes or remaps a VMA while a reader thread
//! reads the engine's `/proc/PID/maps` (or `smaps`) in one [`ReaderMode`], pass after pass, and checks that
//! the records around the VMA are the state before or the state after the change, never torn, never missing,
//! and that each whole pass is one the two states allow.
//!
//! # The runner's signature
//!
//! A runner is a [`RaceRunner`]: `fn(Scenario, ReaderMode, Duration) -> Result<RaceReport, String>`, one
//! scenario (test, file and read sizes) in one mode for a duration, answering the kernel check's
//! [`RaceReport`] (`vmspace_linux::race::Outcome`: observations, of the modified state, allowed duplicates,
//! PROCMAP_QUERY checks, writer cycles, failures with the offending lines). `vmspace race --engine` and
//! `vmspace report`'s engine tearing sides take a runner; [`ENGINE`] is this module's ([`run_scenario`]), which
//! uses the engine's reader directly, so that another runner (a library scenario runner of the engine) can
//! take its place without touching the command or the report.
//!
//! # Setup (as the selftest's)
//!
//! An engine [`Mm`] gets `PAGE_SIZE / 32 + 1` private anonymous regions of 3 pages, alternating read-only and
//! read-write so that neighbours never merge. As on the kernel, the file is read one page per `read(2)` and
//! the region changed (at `addr`) is the last record of the first read *k* whose next read starts with another
//! region (`next`, right above it; `vmspace_linux::race::Pass::locate`), so that the two records come from
//! two walks of the reader.
//!
//! # The three tests
//!
//! - **split**: modify = map one fresh page at `addr` with A's protection plus EXEC (`MAP_FIXED`, splitting
//!   A); restore = map it again with A's protection (A merges back).
//! - **resize**: modify = `mremap` A from 3 pages to 1 in place; restore = grow it back.
//! - **remap**: modify = move the last page of `next` into the middle of A (`MREMAP_MAYMOVE | MREMAP_FIXED |
//!   MREMAP_DONTUNMAP`, splitting A in three); restore = `mprotect` that page back to A's protection (A
//!   merges back).
//!
//! # An observation
//!
//! The reader reads one pass ([`read_pass`], the one place it reads: a [`vmspace_mm::ProcFile`] read to its
//! end, each `read(2)` of the scenario's [`RaceReads`]: a page, or a random size from 1 byte to about three
//! maps lines or one smaps record, so that the walk restarts every record or few; the engine's readers drop
//! their locks between walks, which is where tearing could appear). The checks are the kernel check's, through
//! its tally (`vmspace_linux::race`'s module docs):
//! - the boundary pair ([`Pass::boundary`]: with page reads the last record of read *k* and the first of read
//!   *k+1*; with random reads the record at `addr` and the next), classified by [`classify`]: `L` and `F` of the
//!   original state, or of the modified state, or the modified `L` followed by the original `L` (a duplicate,
//!   allowed); anything else, or no record at `addr`, is a failure;
//! - the whole pass ([`RaceStates::pass_problems`]): no torn line, every line one of the two states', records
//!   in order, no address under more than two records, no false gap anywhere, and in `smaps` each record's
//!   `Size` its range's length and its counters consistent (`Rss + Swap` within `Size`, `Pss` and `Anonymous`
//!   within `Rss`, the four Shared/Private counters summing to `Rss`);
//! - in maps mode, PROCMAP_QUERY at every page around the regions (flags 0 and `COVERING_OR_NEXT_VMA`), each
//!   answer one of the two states' answers for that page ([`RaceStates::query_answers`]).
//!
//! Before the race the three states are captured as whole passes with the writer idle (the restored state
//! must equal the original, and the modification must change the records it changes on the kernel).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vmspace_mm::{
    Errno, MapFlags, Mm, MmConfig, MremapFlags, PAGE_SIZE, PROCMAP_QUERY_COVERING_OR_NEXT_VMA, ProcFileKind,
    ProcReader, Prot, QueryRequest, ReaderMode,
};
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

pub use vmspace_linux::race::{
    Outcome as RaceReport, Pass, RaceFile, RaceReads, RaceStates, RaceTest, ReadSizes, Verdict, classify,
};
use vmspace_linux::race::{check_states, query_pages};

/// One check: a test on a file, read in reads of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// The file read.
    pub file: RaceFile,
    /// The change raced.
    pub test: RaceTest,
    /// The size of each `read(2)`.
    pub reads: RaceReads,
}

impl Scenario {
    /// `split (maps)` (page reads) or `split (maps, random reads)`: the key `vmspace report`'s tearing checks
    /// use.
    pub fn key(&self) -> String {
        match self.reads {
            RaceReads::Page => format!("{} ({})", self.test.name(), file_name(self.file)),
            RaceReads::Random => format!("{} ({}, random reads)", self.test.name(), file_name(self.file)),
        }
    }

    /// The three tests on `file`, read with `reads`.
    pub fn on(file: RaceFile, reads: RaceReads) -> Vec<Scenario> {
        RaceTest::ALL.into_iter().map(|test| Scenario { file, test, reads }).collect()
    }
}

/// `maps` or `smaps`.
pub fn file_name(f: RaceFile) -> &'static str {
    f.name()
}

/// What a race runner is (module docs).
pub type RaceRunner = fn(Scenario, ReaderMode, Duration) -> Result<RaceReport, String>;

/// This module's runner: [`run_scenario`].
pub const ENGINE: RaceRunner = run_scenario;

/// The engine's regions and the one raced.
struct Setup {
    mm: Mm,
    /// The read (page reads) whose last record is the region at `addr`.
    k: usize,
    addr: u64,
    next: u64,
    prot: Prot,
}

fn setup(file: RaceFile) -> Result<Setup, String> {
    let mm = Mm::new(MmConfig::host());
    let count = PAGE_SIZE / 32 + 1;
    let mut regions = Vec::new();
    for i in 0..count {
        let prot = if i % 2 == 0 { Prot::READ } else { Prot::RW };
        let a = mm
            .mmap(0, 3 * PAGE_SIZE, prot, MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0)
            .map_err(|e| format!("engine mmap of region {i}: {e:?}"))?;
        regions.push((a, prot));
    }
    if mm.map_count() != count {
        return Err(format!("the engine merged the regions: {} VMAs, not {count}", mm.map_count()));
    }
    let starts: Vec<u64> = regions.iter().map(|r| r.0).collect();
    let mut pages = ReadSizes::new(RaceReads::Page, file, PAGE_SIZE as usize, 0);
    let (k, addr, next) = read_pass(&mm.reader(), file, &mut pages)?
        .locate(&starts, 3 * PAGE_SIZE)
        .ok_or("no read boundary of the engine's file falls between two regions")?;
    let prot = regions.iter().find(|r| r.0 == addr).map(|r| r.1).ok_or("the region at the boundary")?;
    Ok(Setup { mm, k, addr, next, prot })
}

/// One step of the writer: the test's modification (`modify`) or restoration (module docs).
fn step(s: &Setup, test: RaceTest, modify: bool) -> Result<(), Errno> {
    let (p, anon) = (PAGE_SIZE, MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED);
    match (test, modify) {
        (RaceTest::Split, true) => s.mm.mmap(s.addr, p, s.prot | Prot::EXEC, anon, None, 0).map(|_| ()),
        (RaceTest::Split, false) => s.mm.mmap(s.addr, p, s.prot, anon, None, 0).map(|_| ()),
        (RaceTest::Resize, true) => s.mm.mremap(s.addr, 3 * p, p, MremapFlags::empty(), 0).map(|_| ()),
        (RaceTest::Resize, false) => s.mm.mremap(s.addr, p, 3 * p, MremapFlags::empty(), 0).map(|_| ()),
        (RaceTest::Remap, true) => {
            let f = MremapFlags::MAYMOVE | MremapFlags::FIXED | MremapFlags::DONTUNMAP;
            s.mm.mremap(s.next + 2 * p, p, p, f, s.addr + p).map(|_| ())
        }
        (RaceTest::Remap, false) => s.mm.mprotect(s.addr + p, p, s.prot),
    }
}

/// One pass (module docs): `file` read through `reader` from its start to its end in reads of `sizes`. The one
/// place the checks read the file.
pub fn read_pass(reader: &ProcReader<'_>, file: RaceFile, sizes: &mut ReadSizes) -> Result<Pass, String> {
    let kind = match file {
        RaceFile::Maps => ProcFileKind::Maps,
        RaceFile::Smaps => ProcFileKind::Smaps,
    };
    let mut f = reader.open(kind);
    let (mut bytes, mut ends) = (Vec::new(), Vec::new());
    let mut buf = Vec::new();
    loop {
        let want = sizes.next_size();
        buf.resize(want, 0);
        let n = f.read(&mut buf);
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
        ends.push(bytes.len());
    }
    Pass::new(bytes, ends)
}

/// The PROCMAP_QUERY checks (module docs): every page around the raced regions, asked with flags 0 and with
/// `COVERING_OR_NEXT_VMA`, tallied in `out` against `states` by the kernel check's rule.
fn query_checks(reader: &ProcReader<'_>, s: &Setup, states: &RaceStates, out: &mut RaceReport) {
    for a in query_pages(s.addr, s.next, PAGE_SIZE) {
        for (flags, con) in [(0, false), (PROCMAP_QUERY_COVERING_OR_NEXT_VMA, true)] {
            let answer = match reader.query(&QueryRequest::new(flags, a)) {
                Ok(q) => Ok(Some((q.vma_start, q.vma_end))),
                Err(Errno::ENOENT) => Ok(None),
                Err(e) => Err(e.to_string()),
            };
            out.query_check(states, a, con, answer);
        }
    }
}

/// Runs `scenario` with the reader in `mode` for `duration` on a fresh engine address space (module docs).
/// `Err` when the setup does not behave as the selftest requires (a call fails, restoring does not restore);
/// tearing is counted in the report, not an error.
pub fn run_scenario(scenario: Scenario, mode: ReaderMode, duration: Duration) -> Result<RaceReport, String> {
    let Scenario { file, test, reads } = scenario;
    let s = setup(file)?;
    let reader = s.mm.reader_with(mode);
    let call = |modify: bool| {
        step(&s, test, modify).map_err(|e| {
            format!("{} {}: {e:?}", test.name(), if modify { "modification" } else { "restoration" })
        })
    };
    let seed = 0x9e37_79b9_7f4a_7c15 ^ ((test as u64) << 8) ^ (mode as u64) << 16;
    let mut sizes = ReadSizes::new(reads, file, PAGE_SIZE as usize, seed);
    let orig = read_pass(&reader, file, &mut sizes)?;
    call(true)?;
    let modified = read_pass(&reader, file, &mut sizes)?;
    call(false)?;
    let restored = read_pass(&reader, file, &mut sizes)?;
    let states = RaceStates::new(&orig.text, &modified.text, &restored.text)?;
    let [o, m, r] = [&orig, &modified, &restored].map(|p| p.boundary(reads, s.k, s.addr));
    let (orig, modified) = (o?, m?);
    check_states(test, &orig, &modified, &r?)?;
    let stop = AtomicBool::new(false);
    let cycles = AtomicU64::new(0);
    let mut out = RaceReport::default();
    let writer = std::thread::scope(|sc| {
        let w = sc.spawn(|| -> Result<(), String> {
            // Relaxed: a stop flag; the writer's calls publish through the engine's own locks.
            while !stop.load(Ordering::Relaxed) {
                call(true)?;
                call(false)?;
                // Relaxed: a statistic read after the writer is joined.
                cycles.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        let start = Instant::now();
        while start.elapsed() < duration && !w.is_finished() {
            match read_pass(&reader, file, &mut sizes) {
                Ok(pass) => {
                    out.observe(&orig, &modified, pass.boundary(reads, s.k, s.addr));
                    out.check_pass(&states, file, &pass);
                }
                Err(e) => out.observe(&orig, &modified, Err(e)),
            }
            if file == RaceFile::Maps {
                query_checks(&reader, &s, &states, &mut out);
            }
        }
        // Relaxed: see the writer's load.
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap_or_else(|_| Err("the writer thread panicked".into()))
    });
    writer?;
    // Relaxed: the writer was joined.
    out.child_cycles = cycles.load(Ordering::Relaxed);
    s.mm.validate().map_err(|e| format!("the engine's address space is invalid after the race: {e:?}"))?;
    Ok(out)
}

/// The `bench.race` report of one scenario in one mode: the kernel check's metrics (`iterations_count`,
/// `modified_seen_count`, `duplicates_count`, `query_checks_count`, `child_cycles_count`: the writer's
/// modify+restore cycles, `failures_count`), the first failures in `notes`; parameters `side` (`engine`),
/// `mode`, `test`, `file`, `reads` (`page` or `random`), `duration_s`.
pub fn report(
    scenario: Scenario,
    mode: ReaderMode,
    duration: Duration,
    o: &RaceReport,
    host: &HostInfo,
) -> Report {
    let mut r = o.report(
        "bench.race",
        format!("{}, engine {}", scenario.key(), mode.name()),
        scenario.test,
        scenario.file,
        duration,
        host,
    );
    r.param("reads", scenario.reads);
    r.param("side", "engine");
    r.param("mode", mode.name());
    r
}

/// Runs every scenario in every mode with `runner`, one report each (mode by mode); `on_each` after each.
pub fn run(
    runner: RaceRunner,
    scenarios: &[Scenario],
    modes: &[ReaderMode],
    duration: Duration,
    host: &HostInfo,
    on_each: &mut dyn FnMut(Scenario, ReaderMode),
    stop: &dyn Fn() -> bool,
) -> Result<Vec<Report>, String> {
    let mut out = Vec::new();
    for &mode in modes {
        for &sc in scenarios {
            if stop() {
                return Ok(out);
            }
            let o = runner(sc, mode, duration).map_err(|e| format!("{}, {}: {e}", sc.key(), mode.name()))?;
            out.push(report(sc, mode, duration, &o, host));
            on_each(sc, mode);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmspace_linux::maps::parse_line;

    /// Every scenario in every mode, briefly (the next test holds the split under per-VMA locks longer).
    #[test]
    fn every_scenario_races_without_tearing_in_every_mode() {
        for mode in ReaderMode::ALL {
            for file in [RaceFile::Maps, RaceFile::Smaps] {
                for reads in RaceReads::ALL {
                    for sc in Scenario::on(file, reads) {
                        // A busy machine may keep the writer or the reader off the CPU for a whole short run:
                        // longer runs until both have run.
                        let mut o = run_scenario(sc, mode, Duration::from_millis(80)).unwrap();
                        for ms in [400, 2000] {
                            if o.iterations > 0 && o.child_cycles > 0 {
                                break;
                            }
                            o = run_scenario(sc, mode, Duration::from_millis(ms)).unwrap();
                        }
                        assert_eq!(o.failure_count, 0, "{} {}: {:?}", sc.key(), mode.name(), o.failures);
                        assert!(o.iterations > 0 && o.child_cycles > 0, "{} {o:?}", sc.key());
                        // Maps: 7 pages, each asked with flags 0 and with COVERING_OR_NEXT_VMA.
                        let q = if file == RaceFile::Maps { 14 * o.iterations } else { 0 };
                        assert_eq!(o.query_checks, q);
                    }
                }
            }
        }
    }

    /// The engine bug this check found: a `MAP_FIXED` mmap over part of a VMA used to clear the old range in
    /// the tree before storing the new VMA, so a reader under per-VMA locks found the next VMA after a gap at
    /// `addr` (about one observation in ten). Like Linux 6.18 (`mm/vma.c: __mmap_region`), the engine now
    /// keeps the old VMAs in the tree, write-locked, until the new one is stored over them.
    #[test]
    fn split_under_per_vma_locks_sees_no_false_gap() {
        for file in [RaceFile::Maps, RaceFile::Smaps] {
            let sc = Scenario { file, test: RaceTest::Split, reads: RaceReads::Page };
            let o = run_scenario(sc, ReaderMode::PerVma, Duration::from_millis(300)).unwrap();
            assert_eq!(o.failure_count, 0, "{}: {:?}", sc.key(), o.failures);
        }
    }

    #[test]
    fn the_observation_is_at_a_read_boundary_and_reports_a_gap() {
        for file in [RaceFile::Maps, RaceFile::Smaps] {
            let s = setup(file).unwrap();
            let r = s.mm.reader_with(ReaderMode::PerVma);
            let mut pages = ReadSizes::new(RaceReads::Page, file, PAGE_SIZE as usize, 0);
            let pass = read_pass(&r, file, &mut pages).unwrap();
            // The region at addr ends read k, the next one starts read k + 1.
            let (l, f) = pass.read_boundary(s.k).unwrap();
            assert_eq!(pass.record_boundary(s.addr), Ok((l.clone(), f.clone())));
            let (l, f) = (parse_line(&l).unwrap(), parse_line(&f).unwrap());
            assert_eq!((l.start, l.end, f.start), (s.addr, s.addr + 3 * PAGE_SIZE, s.next));
            // Random reads give the same text.
            let mut random = ReadSizes::new(RaceReads::Random, file, PAGE_SIZE as usize, 3);
            let other = read_pass(&r, file, &mut random).unwrap();
            assert_eq!(other.text, pass.text);
            assert!(other.read_ends.len() > 3 * pass.read_ends.len());
            // With the region gone, no record starts at addr: a false gap, and the queries in it fail.
            let states = RaceStates::new(&pass.text, &pass.text, &pass.text).unwrap();
            s.mm.munmap(s.addr, 3 * PAGE_SIZE).unwrap();
            let gone = read_pass(&r, file, &mut pages).unwrap();
            let e = gone.record_boundary(s.addr).unwrap_err();
            assert!(e.contains("false gap"), "{e}");
            let mut out = RaceReport::default();
            out.check_pass(&states, file, &gone);
            assert_eq!(out.failure_count, 1);
            assert!(out.failures[0].contains("false gap"), "{:?}", out.failures);
            let mut out = RaceReport::default();
            query_checks(&r, &s, &states, &mut out);
            // The region's three pages (flags 0: ENOENT; COVERING_OR_NEXT_VMA: the next region).
            assert_eq!((out.query_checks, out.failure_count), (14, 6), "{:?}", out.failures);
        }
    }

    /// The whole-pass checks on the engine's own texts: a record shown three times, a wrong `Size`, a torn line
    /// each fail the pass.
    #[test]
    fn a_bad_pass_fails() {
        let s = setup(RaceFile::Smaps).unwrap();
        let mut pages = ReadSizes::new(RaceReads::Page, RaceFile::Smaps, PAGE_SIZE as usize, 0);
        let orig = read_pass(&s.mm.reader(), RaceFile::Smaps, &mut pages).unwrap();
        step(&s, RaceTest::Split, true).unwrap();
        let modified = read_pass(&s.mm.reader(), RaceFile::Smaps, &mut pages).unwrap();
        let states = RaceStates::new(&orig.text, &modified.text, &orig.text).unwrap();
        let record = |text: &str, addr: u64| {
            let from = text.find(&format!("{addr:x}-")).unwrap();
            let len = text[from..].find("VmFlags:").unwrap();
            let end = from + len + text[from + len..].find('\n').unwrap() + 1;
            text[from..end].to_string()
        };
        let whole = record(&orig.text, s.addr);
        let bad = |text: String, what: &str| {
            let mut out = RaceReport::default();
            out.check_pass(&states, RaceFile::Smaps, &Pass { text, read_ends: vec![] });
            assert_eq!(out.failure_count, 1, "{what}");
            assert!(out.failures[0].contains(what), "{what}: {:?}", out.failures);
        };
        let mut out = RaceReport::default();
        out.check_pass(&states, RaceFile::Smaps, &orig);
        out.check_pass(&states, RaceFile::Smaps, &modified);
        assert_eq!(out.failure_count, 0, "{:?}", out.failures);
        // The split's first page, then the whole region twice.
        let split = record(&modified.text, s.addr);
        bad(orig.text.replacen(&whole, &format!("{split}{whole}{whole}"), 1), "shown 3 times");
        // Size of two pages in a three-page record.
        bad(
            orig.text.replacen(
                &whole,
                &whole.replacen("Size:                 12 kB", "Size:                  8 kB", 1),
                1,
            ),
            "Size 8 kB, its range 12 kB",
        );
        // A record whose header lost its tail.
        let header = whole.lines().next().unwrap();
        bad(orig.text.replacen(header, &header[..20], 1), "torn");
    }

    #[test]
    fn a_runner_that_tears_is_reported() {
        fn torn(_: Scenario, _: ReaderMode, _: Duration) -> Result<RaceReport, String> {
            Ok(RaceReport {
                iterations: 5,
                failure_count: 1,
                failures: vec!["tearing: x".into()],
                ..Default::default()
            })
        }
        let host = HostInfo::default();
        let scs = Scenario::on(RaceFile::Maps, RaceReads::Page);
        let rs =
            run(torn, &scs[..1], &ReaderMode::ALL, Duration::from_millis(1), &host, &mut |_, _| {}, &|| {
                false
            })
            .unwrap();
        assert_eq!(rs.len(), ReaderMode::ALL.len());
        assert_eq!(rs[0].metric("failures_count").unwrap().median, 1.0);
        assert_eq!(rs[0].notes, ["tearing: x"]);
        assert_eq!(rs[0].parameters["mode"], ReaderMode::ALL[0].name());
    }
}
