//! The proc-maps-race checks (`tools/testing/selftests/proc/proc-maps-race.c`, natively on the kernel in
//! `vmspace_linux::race`) on the engine: a writer thread splits, resizes or remaps a VMA while a reader thread
//! reads the engine's `/proc/PID/maps` (or `smaps`) in one [`ReaderMode`] and checks that the records around
//! the VMA are the state before or the state after the change, never torn, never missing.
//!
//! # The runner's signature
//!
//! A runner is a [`RaceRunner`]: `fn(Scenario, ReaderMode, Duration) -> Result<RaceReport, String>`, one
//! scenario (test and file) in one mode for a duration, answering the kernel check's [`RaceReport`]
//! (`vmspace_linux::race::Outcome`: observations, of the modified state, allowed duplicates, PROCMAP_QUERY
//! checks, writer cycles, failures with the offending lines). `vmspace race --engine` and `vmspace report`'s
//! engine tearing sides take a runner; [`ENGINE`] is this module's ([`run_scenario`]), which uses the engine's
//! reader directly, so that another runner (a library scenario runner of the engine) can take its place
//! without touching the command or the report.
//!
//! # Setup (as the selftest's)
//!
//! An engine [`Mm`] gets `PAGE_SIZE / 32 + 1` private anonymous regions of 3 pages, alternating read-only and
//! read-write so that neighbours never merge. The region `A` in the middle is the one changed (at `addr`);
//! the region right above it is `next`.
//!
//! # The three tests
//!
//! - **split**: modify = map one fresh page at `addr` with A's protection plus EXEC (`MAP_FIXED`, splitting
//!   A); restore = map it again with A's protection (A merges back). PROCMAP_QUERY at `addr + page` returns A
//!   or the split-off `[addr + page, addr + 3 pages)`.
//! - **resize**: modify = `mremap` A from 3 pages to 1 in place; restore = grow it back. PROCMAP_QUERY at
//!   `addr` returns a VMA at `addr` of 3 pages or 1.
//! - **remap**: modify = move the last page of `next` into the middle of A (`MREMAP_MAYMOVE | MREMAP_FIXED |
//!   MREMAP_DONTUNMAP`, splitting A in three); restore = `mprotect` that page back to A's protection (A
//!   merges back). PROCMAP_QUERY at `addr + page` returns A or the 1-page VMA at `addr + page`.
//!
//! # An observation
//!
//! The reader renders the whole file ([`boundary`], the one place it reads: the engine's readers drop their
//! locks between records, so two consecutive records are taken at different times, which is where tearing
//! could appear) and takes the record that starts at `addr` (`L`; every state of every test has one) and the
//! record after it (`F`). The verdict is the kernel check's (`vmspace_linux::race::classify`): `L` and `F` of
//! the original state, or of the modified state, or the modified `L` followed by the original `L` (the same VMA
//! reported twice across a restore: a duplicate, allowed); anything else, or no record at `addr`, is a
//! failure. Before the race the three states are captured with the writer idle (the restored state must equal
//! the original, and the modification must change the records it changes on the kernel). In maps mode every
//! observation also makes the PROCMAP_QUERY check.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vmspace_linux::maps::{is_header, parse_line};
use vmspace_mm::{
    Errno, MapFlags, Mm, MmConfig, MremapFlags, PAGE_SIZE, ProcFileKind, ProcReader, Prot, QueryRequest,
    ReaderMode,
};
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

pub use vmspace_linux::race::{Outcome as RaceReport, RaceFile, RaceTest, Verdict, classify};
use vmspace_linux::race::{check_states, query_addr};

/// One check: a test on a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// The file read.
    pub file: RaceFile,
    /// The change raced.
    pub test: RaceTest,
}

impl Scenario {
    /// `split (maps)`: the key `vmspace report`'s tearing checks use.
    pub fn key(&self) -> String {
        format!("{} ({})", self.test.name(), file_name(self.file))
    }

    /// The three tests on `file`.
    pub fn on(file: RaceFile) -> Vec<Scenario> {
        RaceTest::ALL.into_iter().map(|test| Scenario { file, test }).collect()
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
    addr: u64,
    next: u64,
    prot: Prot,
}

fn setup() -> Result<Setup, String> {
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
    regions.sort_by_key(|r| r.0);
    let mid = regions.len() / 2;
    let ((addr, prot), (next, _)) = (regions[mid], regions[mid + 1]);
    if mm.map_count() != count {
        return Err(format!("the engine merged the regions: {} VMAs, not {count}", mm.map_count()));
    }
    Ok(Setup { mm, addr, next, prot })
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

/// One observation (module docs): the record starting at `addr` and the next one, as header lines of `file`
/// read whole through `reader`. The one place the checks read: a chunked read(2) handle goes here.
pub fn boundary(reader: &ProcReader<'_>, file: RaceFile, addr: u64) -> Result<(String, String), String> {
    // One page per read(2), as the kernel check's parent reads: each read is a walk of its own, which
    // restarts where the previous one stopped, so consecutive records may come from different states.
    let kind = match file {
        RaceFile::Maps => ProcFileKind::Maps,
        RaceFile::Smaps => ProcFileKind::Smaps,
    };
    let mut f = reader.open(kind);
    let mut bytes = Vec::new();
    let mut page = vec![0u8; PAGE_SIZE as usize];
    loop {
        let n = f.read(&mut page);
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&page[..n]);
    }
    let text = String::from_utf8(bytes).map_err(|_| "a read that is not UTF-8".to_string())?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(format!(
            "the text does not end with a newline: ...{:?}",
            &text[text.len().saturating_sub(80)..]
        ));
    }
    let mut headers = text.lines().filter(|l| is_header(l));
    let last = headers
        .by_ref()
        .find(|l| parse_line(l).is_some_and(|m| m.start >= addr))
        .filter(|l| parse_line(l).is_some_and(|m| m.start == addr))
        .ok_or_else(|| format!("false gap: no record starts at {addr:x}"))?;
    let first = headers.next().ok_or_else(|| format!("no record after the one at {addr:x}"))?;
    Ok((last.to_string(), first.to_string()))
}

/// The PROCMAP_QUERY check of `test` (module docs), tallied in `out` by the kernel check's rule.
fn query_check(reader: &ProcReader<'_>, test: RaceTest, addr: u64, out: &mut RaceReport) {
    let answer = reader
        .query(&QueryRequest::new(0, query_addr(test, addr, PAGE_SIZE)))
        .map(|a| (a.vma_start, a.vma_end))
        .map_err(|e| e.to_string());
    out.query_check(test, addr, PAGE_SIZE, answer);
}

/// Runs `scenario` with the reader in `mode` for `duration` on a fresh engine address space (module docs).
/// `Err` when the setup does not behave as the selftest requires (a call fails, restoring does not restore);
/// tearing is counted in the report, not an error.
pub fn run_scenario(scenario: Scenario, mode: ReaderMode, duration: Duration) -> Result<RaceReport, String> {
    let s = setup()?;
    let Scenario { file, test } = scenario;
    let reader = s.mm.reader_with(mode);
    let call = |modify: bool| {
        step(&s, test, modify).map_err(|e| {
            format!("{} {}: {e:?}", test.name(), if modify { "modification" } else { "restoration" })
        })
    };
    let orig = boundary(&reader, file, s.addr)?;
    call(true)?;
    let modified = boundary(&reader, file, s.addr)?;
    call(false)?;
    let restored = boundary(&reader, file, s.addr)?;
    check_states(test, &orig, &modified, &restored)?;
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
            out.observe(&orig, &modified, boundary(&reader, file, s.addr));
            if file == RaceFile::Maps {
                query_check(&reader, test, s.addr, &mut out);
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
/// `mode`, `test`, `file`, `duration_s`.
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

    /// Every scenario in every mode, briefly (the next test holds the split under per-VMA locks longer).
    #[test]
    fn every_scenario_races_without_tearing_in_every_mode() {
        for mode in ReaderMode::ALL {
            for file in [RaceFile::Maps, RaceFile::Smaps] {
                for sc in Scenario::on(file) {
                    let o = run_scenario(sc, mode, Duration::from_millis(80)).unwrap();
                    assert_eq!(o.failure_count, 0, "{} {}: {:?}", sc.key(), mode.name(), o.failures);
                    assert!(o.iterations > 0 && o.child_cycles > 0, "{} {o:?}", sc.key());
                    let q = if file == RaceFile::Maps { o.iterations } else { 0 };
                    assert_eq!(o.query_checks, q);
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
            let sc = Scenario { file, test: RaceTest::Split };
            let o = run_scenario(sc, ReaderMode::PerVma, Duration::from_millis(300)).unwrap();
            assert_eq!(o.failure_count, 0, "{}: {:?}", sc.key(), o.failures);
        }
    }

    #[test]
    fn the_observation_finds_the_boundary_and_reports_a_gap() {
        let s = setup().unwrap();
        let r = s.mm.reader_with(ReaderMode::PerVma);
        let (l, f) = boundary(&r, RaceFile::Maps, s.addr).unwrap();
        let (l, f) = (parse_line(&l).unwrap(), parse_line(&f).unwrap());
        assert_eq!((l.start, l.end, f.start), (s.addr, s.addr + 3 * PAGE_SIZE, s.next));
        // The smaps headers are the same lines.
        assert_eq!(boundary(&r, RaceFile::Smaps, s.addr), boundary(&r, RaceFile::Maps, s.addr));
        // With the region gone, no record starts at addr: a false gap.
        s.mm.munmap(s.addr, 3 * PAGE_SIZE).unwrap();
        let e = boundary(&r, RaceFile::Maps, s.addr).unwrap_err();
        assert!(e.contains("false gap"), "{e}");
        let mut out = RaceReport::default();
        query_check(&r, RaceTest::Resize, s.addr, &mut out);
        assert_eq!((out.query_checks, out.failure_count), (1, 1), "{:?}", out.failures);
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
        let scs = Scenario::on(RaceFile::Maps);
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
