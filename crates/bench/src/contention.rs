//! `vmspace bench contention`: the proc-vs-map experiment (`vmspace kernel contention`, the LPC 2021 talk's
//! method) run on the engine beside the live kernel, and the engine readers' throughput.
//!
//! # The grid
//!
//! The rows are the kernel sweep's ([`vmspace_linux::contention::sweep_grid`]): the no-scanner baseline,
//! busy tasks only (B=0), then for each proc file (maps, smaps, smaps_rollup, a PROCMAP_QUERY walk) one
//! scanner alone, with a busy task that spins 2 ms then sleeps 1 ms (B=2), and with one that never sleeps
//! (B=0: it starves the nice-15 scanner, which then waits for a CPU while it holds whatever its reader holds).
//!
//! - **kernel** rows: `vmspace_linux::contention::run` (a mapper process, scanner and busy processes, the real
//!   `/proc/MAPPER/*` files), run first, before the engine has allocated anything (its memory stays mapped in
//!   this process once used and the kernel's children would inherit its page tables).
//! - **engine** rows: the same roles as threads of this process sharing one [`Mm`] ([`engine_run`]). The
//!   mapper thread, pinned to the layout's mapper CPU (the first usable one) at nice 0, holds a populated
//!   anonymous region (`MAP_POPULATE`, 128 MiB by default) and, until the run's duration has passed, picks a
//!   random page and, 50/50, maps a fresh page there (`MAP_FIXED`) or unmaps it, timing each call into an HDR
//!   histogram and sleeping `pause_us` (one `nanosleep`) between calls. Scanner threads (nice 15, set on the
//!   thread with `setpriority`) read the proc file through the engine's reader ([`Mm::reader_with`]) in one
//!   [`ReaderMode`] each row, one whole file per read (`reader_cost::timed_pass`, which times the holds of
//!   the mode's lock from the scanner's side: `scanner_hold_max_ms`, `scanner_holds_count`; busy threads (nice 0) spin B ms then
//!   sleep 1 ms. Scanners and busy threads share the other CPUs as the kernel's processes do
//!   ([`Layout::resolve`]). After a warm-up (200 ms, or half the run's duration when that is shorter: the
//!   `--quick` smoke run) the mapper starts; only reads completed while it runs count. Each run gets a fresh
//!   `Mm`.
//!
//! Metrics per run, on both sides (the kernel experiment's): `calls_count`, `calls_per_s`, `call_mean_ms`,
//! `call_min_ms`, `call_max_ms`, `call_<stem>_ms` for every quantile of `CDF_QUANTILES` (p50, p99 ...),
//! `mapper_errors_count`, `scanner_reads_count`. One `bench.contention` report per (side, mode, row).
//!
//! # The engine's rows are measured in pairs with the baseline
//!
//! On a 2-vCPU VM two runs of the same row minutes apart differ by 0.8-1.5x in their mean call (the heap's
//! placement, the host's other guests, the machine's drift), so a ratio of one row's median to a baseline
//! measured once, minutes earlier, meets or misses a 5% goal by chance. The engine's rows are therefore run
//! interleaved with the engine's baseline ("no scanner, no busy task", mode `none`), as `bench tree` and
//! `bench mm` interleave their structures' batches, and every ratio is taken per *pair*: one run of the row
//! over the baseline run next to it in time ([`pair_schedule`]). Each of the `samples` rounds runs every
//! engine row once (the busy-only row and the scanner rows of every mode, in [`ContentionConfig::paired_rows`]
//! order), with one baseline run shared by two neighbouring rows: `B r0 r1 B r2 r3 B ...` in even rounds and
//! `r0 B r1 r2 B r3 ...` in odd ones, so that row `i`'s partner ([`partner`]) is the baseline just before it
//! in one round and just after it in the next (neither goes first in every pair), and a round of `k` rows
//! costs about `k/2` baseline runs instead of `k`. A run of a row carries its partner's `call_mean_ms`,
//! `call_p99_ms` and `call_max_ms` as `base_call_mean_ms`, `base_call_p99_ms`, `base_call_max_ms`; the
//! baseline's report holds every baseline run of the sequence. Two rows sharing a baseline run share a
//! denominator, but a target judges one row's pairs, each from another round and its own baseline run.
//!
//! The baseline runs as long as the rows: a worst call grows with the length of the run, so the max/max ratio
//! of the starved-scanner target needs runs of one length, and a shorter baseline would also leave its mean
//! noisier than the row's. Cost of the full run (3 rounds of 2 s runs, every mode): 37 paired rows, their 36
//! twins (next section) and 19 baseline runs per round, 276 engine runs at about 2.2 s each with set-up and
//! warm-up (the twins' second address space adds its set-up), plus the kernel's rows
//! and a few seconds for the throughput (before the twins: 168 engine runs, 8 min 11 s in all on this
//! project's 2-vCPU VM). A row run whose partners did not run (the run was interrupted) is left out, so every
//! run of a row has its pairs.
//!
//! # The engine's rows are measured beside a twin
//!
//! The mapper alone is not the baseline a scanner is judged against: a scanner on the other CPU costs the
//! mapper something whatever it reads (the memory bus, the shared cache, the host's scheduling of two busy
//! vCPUs), and what the engine's design can remove is only what a scanner of *this* address space adds to
//! that. So every engine row with scanners also runs as its *twin*, right beside it (before it in one round,
//! after it in the next: the other side from its mapper-alone partner): the same row, with the scanners
//! reading another address space made as the mapper's is ([`RunSpaces::scan_other`]), and the row's run
//! carries the twin's `call_mean_ms`, `call_p99_ms`, `call_max_ms` and CPU shares as `base_*`; every target
//! judges the per-pair ratios over the twin. Rows without a scanner keep the mapper alone as their `base_*`.
//! Every run of the grid carries its mapper-alone partner's metrics as `alone_*` as well.
//!
//! "Of the same size": in the grid, both address spaces start in the mapper's steady state
//! ([`steady_state`]: each page unmapped with probability [`STEADY_UNMAPPED`], the same draw for both), so
//! the scanner of the twin reads as many VMAs as the scanner of the row does; the mapper's calls change that
//! state little over a run ([`STEADY_UNMAPPED`]). `vmas_at_start` and `scanned_vmas_at_start`
//! record it. (The single rows of `vmspace report` and the talk's table start from the unfragmented region,
//! as the kernel's mapper does.) Twin runs are reported as [`TWIN_BENCHMARK`] reports.
//!
//! # Whether each side had a CPU
//!
//! Every run records, from `/proc/thread-self/schedstat`, the share of its run the mapper waited on a run
//! queue (`mapper_wait_share`, and `mapper_cpu_share`) and the least share a scanner was on a CPU
//! (`scanner_cpu_share`, and `scanner_wait_share`). A target is judged only when in every pair, row and twin,
//! each side had a CPU ([`had_cpus`]: the mapper waited at most [`MAX_MAPPER_WAIT_SHARE`] of its run, a
//! scanner without a busy task beside it ran at least [`MIN_SCANNER_CPU_SHARE`]); otherwise it is "not
//! measurable here", whatever its ratios (a machine whose other work takes the scanner's CPU measures that
//! work, not the reader).
//!
//! One `bench.contention.ratio` report per non-baseline row with, run by run, the row's mean, p99 and max over
//! its partner (`mean_ratio`, `p99_ratio`, `max_ratio`): on the engine's side the run's own pair, over the twin
//! ([`ratio_report`], parameter `pairing` = `per pair`; `mean_ratio_over_alone` over the mapper alone), on the
//! kernel's (whose rows are not judged and run once each, first) over the median of the kernel's baseline runs
//! (`pairing` = `baseline median`).
//!
//! # The LPC 2021 talk's table (`--talk`)
//!
//! [`ContentionConfig::talk`]: instead of the grid, the talk's rows ([`vmspace_linux::talk::grid`]: one
//! scanner beside 0, 1, 10, 100 and 1,000 busy tasks that never pause, per proc file), on the kernel
//! (processes, first) and on the engine in each mode (threads; a thousand busy threads on the scanner's
//! CPU), `samples` runs each, not paired (nothing is judged: the table is the result). Reports
//! `bench.contention` with parameter `grid` = `talk`; [`render_tables`] prints one talk table per proc file
//! and side ([`vmspace_linux::talk::render_tables`]).
//!
//! Every engine run ends on time, as the kernel's do: the main thread waits for the mapper until the run's
//! length has passed (and 10 ms), then stops the scanners and busy threads, and the run does not wait for a
//! thousand busy threads to let the scanner finish. A mapper call still waiting at that window's end (for a
//! starved scanner's hold) is cut there, as on the kernel side: its latency is the time from its start to
//! the window's end, a lower bound, and it is counted in `calls_cut_count`; the time the stopped threads
//! then take to go (seconds with a thousand busy threads, each of which must be scheduled once to see the
//! stop) is `teardown_ms`, the set-up before the window (`Mm`, threads, warm-up) `setup_ms`. Each scanner
//! times the holds of its mode's lock (`scanner_hold_max_ms`: the longest, from the scanner's side,
//! off-CPU time included), which is what a mapper call that needs that lock can wait for.
//!
//! # Reader throughput
//!
//! [`crate::readers`]: maps rendered per second and PROCMAP_QUERY answers per reader thread over an address
//! space of 10,000 VMAs, per mode, beside the kernel reading its own `/proc/self/maps`.
//!
//! # Targets
//!
//! [`targets`], each judged on the per-pair ratios of its row by [`crate::judge`]'s rule (met or missed only
//! when the whole interval of the pairs' median, the values' whole range for 5 pairs or fewer, clears the goal
//! by the judge's resolution; undecided otherwise): the per-VMA and lockless modes (those of
//! [`ReaderMode::ALL`] named `per-vma` and `lockless`) keep the mapper's mean call within [`MAX_MEAN_RATIO`]
//! of the engine baseline's for every proc file, with the scanner alone and beside a B=2 busy task; the
//! lockless mode keeps the worst call with a starved scanner (B=0) within [`MAX_STARVED_MAX_RATIO`] of the
//! baseline's worst (each run's worst call over its partner's); the mmap-lock mode reproduces the kernel's
//! priority inversion: smaps_rollup with a starved scanner slows the mean call at least
//! [`MIN_INVERSION_RATIO`]-fold. A mode this build does not have (lockless before its branch lands) has no
//! rows and no targets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_linux::contention::{self, Config, ProcFile};
use vmspace_linux::placement::Layout;
use vmspace_linux::sys;
use vmspace_linux::talk;
use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, ProcReader, Prot};

/// The engine's reader modes (re-exported for `vmspace report`, which does not depend on the engine).
pub use vmspace_mm::ReaderMode;
use vmspace_proc::QueryRequest;
use vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Placement, Report, ReportSet};
use vmspace_results::stats::{CDF_QUANTILES, LatencyRecorder};

use crate::judge::{Goal, Judged, median_interval};
use crate::measure::{SchedClock, SchedShare};
use crate::readers::{self, ThroughputConfig};

/// The label of every side's baseline row (`Config::label` of the no-scanner, no-busy row).
pub const BASELINE: &str = "no scanner, no busy task";

/// The mean-call ratio to the baseline the per-VMA and lockless modes must stay within (alone and with B=2).
pub const MAX_MEAN_RATIO: f64 = 1.05;

/// The worst-call ratio to the baseline's worst the lockless mode must stay within with a starved scanner.
pub const MAX_STARVED_MAX_RATIO: f64 = 2.0;

/// The mean-call ratio of smaps_rollup with a starved scanner the mmap-lock mode must reach (the inversion).
pub const MIN_INVERSION_RATIO: f64 = 10.0;

/// The names of the modes judged against [`MAX_MEAN_RATIO`] (when this build has them).
pub const SCALABLE_MODES: [&str; 2] = ["per-vma", "lockless"];

/// The proc files of the grid, in table order.
pub const PROCFILES: [ProcFile; 4] =
    [ProcFile::Maps, ProcFile::Smaps, ProcFile::SmapsRollup, ProcFile::Query];

/// What `vmspace bench contention` runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentionConfig {
    /// The grid's base: samples, duration, region, pause, scanner and busy counts, CPUs (the kernel
    /// sweep's `Config`; its proc file and busy time are set per row).
    pub base: Config,
    /// The engine's reader modes (every mode of [`ReaderMode::ALL`] by default).
    pub modes: Vec<ReaderMode>,
    /// Whether to run the kernel's rows.
    pub kernel: bool,
    /// Whether to run the grid at all (`--throughput-only` leaves it out).
    pub grid: bool,
    /// The reader-throughput measurement (`None`: left out).
    pub throughput: Option<ThroughputConfig>,
    /// Whether this is the `--quick` smoke run.
    pub quick: bool,
    /// The talk's table instead of the grid (module docs); `None`: the grid.
    pub talk: Option<TalkGrid>,
}

/// The rows of the talk's table (`vmspace_linux::talk::grid` over the configuration's base).
#[derive(Debug, Clone, PartialEq)]
pub struct TalkGrid {
    /// The proc files, a table each.
    pub files: Vec<ProcFile>,
    /// The busy-task counts, a row each.
    pub busy_counts: Vec<usize>,
}

impl Default for TalkGrid {
    fn default() -> Self {
        TalkGrid { files: talk::PROCFILES.to_vec(), busy_counts: talk::BUSY_COUNTS.to_vec() }
    }
}

impl ContentionConfig {
    /// The full run: the kernel sweep's defaults but 3 runs of 2 s per row (128 MiB, 10 µs pause), every
    /// mode, the kernel beside, the throughput over 10,000 VMAs.
    pub fn full() -> ContentionConfig {
        let base = Config { samples: 3, duration: Duration::from_secs(2), ..Config::default() };
        ContentionConfig {
            base,
            modes: ReaderMode::ALL.to_vec(),
            kernel: true,
            grid: true,
            throughput: Some(ThroughputConfig::full()),
            quick: false,
            talk: None,
        }
    }

    /// A smoke run: 1 run of 0.1 s per row on a 4 MiB region, throughput over 1,000 VMAs for 20 ms.
    pub fn quick() -> ContentionConfig {
        let base =
            Config { samples: 1, duration: Duration::from_millis(100), region_mib: 4, ..Config::default() };
        ContentionConfig {
            base,
            modes: ReaderMode::ALL.to_vec(),
            kernel: true,
            grid: true,
            throughput: Some(ThroughputConfig::quick()),
            quick: true,
            talk: None,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        self.base.validate().map_err(|e| format!("{e:#}"))?;
        if self.modes.is_empty() && !self.kernel && self.throughput.is_none() {
            return Err("nothing to measure: no reader mode, no kernel, no throughput".into());
        }
        if let Some(t) = &self.throughput {
            t.validate()?;
        }
        if let Some(t) = &self.talk {
            if t.files.is_empty() || t.busy_counts.is_empty() {
                return Err("the talk's table needs at least one proc file and one busy count".into());
            }
            if let Some(n) = t.busy_counts.iter().find(|&&n| n > contention::MAX_BUSY) {
                return Err(format!("{n} busy tasks: at most {}", contention::MAX_BUSY));
            }
        }
        Ok(())
    }

    /// The talk's rows (none without [`ContentionConfig::talk`]).
    pub fn talk_rows(&self) -> Vec<Config> {
        self.talk.as_ref().map_or_else(Vec::new, |t| talk::grid(&self.base, &t.files, &t.busy_counts))
    }

    /// The grid's rows.
    pub fn rows(&self) -> Vec<Config> {
        if self.grid { contention::sweep_grid(&self.base) } else { Vec::new() }
    }

    /// The engine rows: (row, mode), `None` for the rows without a scanner (measured once).
    pub fn engine_rows(&self) -> Vec<(Config, Option<ReaderMode>)> {
        let mut out = Vec::new();
        if self.modes.is_empty() {
            return out;
        }
        for row in self.rows() {
            if row.effective_scanners() == 0 {
                out.push((row, None));
            } else {
                out.extend(self.modes.iter().map(|&m| (row.clone(), Some(m))));
            }
        }
        out
    }

    /// The engine rows measured in pairs with the engine's baseline (module docs): every engine row but the
    /// baseline itself, in [`ContentionConfig::engine_rows`] order.
    pub fn paired_rows(&self) -> Vec<(Config, Option<ReaderMode>)> {
        let mut rows = self.engine_rows();
        rows.retain(|(c, _)| c.label() != BASELINE);
        rows
    }

    /// Progress steps of [`run`]: one per kernel run, one per engine run (rows and baselines of every round
    /// of [`pair_schedule`]), then the throughput's.
    pub fn steps(&self) -> u64 {
        if self.talk.is_some() {
            let rows = self.talk_rows().len() * self.base.samples;
            return (rows * (usize::from(self.kernel) + self.modes.len())) as u64;
        }
        let kernel = if self.kernel { self.rows().len() * self.base.samples } else { 0 };
        let paired = self.paired_rows();
        let k = paired.len();
        let twins = paired.iter().filter(|(c, _)| c.effective_scanners() > 0).count();
        let engine: usize =
            (0..self.base.samples).map(|round| k + twins + baselines_in_round(k, round)).sum();
        (kernel + engine) as u64 + self.throughput.as_ref().map_or(0, |t| t.steps(&self.modes, self.kernel))
    }
}

/// One slot of a round of the engine's interleaved sequence ([`pair_schedule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The `j`-th baseline run of the round.
    Baseline(usize),
    /// A run of the `i`-th paired row ([`ContentionConfig::paired_rows`]).
    Row(usize),
}

/// Whether paired row `i`'s partner runs before it in round `round`: in even rounds for even rows, in odd
/// rounds for odd rows, so every row goes first in every other round.
pub fn baseline_first(i: usize, round: usize) -> bool {
    (i + round).is_multiple_of(2)
}

/// The index, among round `round`'s baseline runs, of paired row `i`'s partner: `B0 r0 r1 B1 r2 r3 B2 ...`
/// in even rounds (row `i` with baseline `(i + 1) / 2`), `r0 B0 r1 r2 B1 r3 ...` in odd ones (`i / 2`).
pub fn partner(i: usize, round: usize) -> usize {
    if round.is_multiple_of(2) { i.div_ceil(2) } else { i / 2 }
}

/// How many baseline runs round `round` of `k` paired rows has: `k / 2 + 1` in even rounds, `k / 2` rounded
/// up in odd ones (none without rows).
pub fn baselines_in_round(k: usize, round: usize) -> usize {
    match k {
        0 => 0,
        _ if round.is_multiple_of(2) => k / 2 + 1,
        _ => k.div_ceil(2),
    }
}

/// The order of round `round` for `k` paired rows (module docs): every row once, each next to its
/// [`partner`], every baseline run shared by at most two rows (the one before it and the one after).
pub fn pair_schedule(k: usize, round: usize) -> Vec<Slot> {
    let mut out = Vec::with_capacity(k + baselines_in_round(k, round));
    let mut emitted = 0;
    for i in 0..k {
        let j = partner(i, round);
        if baseline_first(i, round) {
            // The partner is new only for the first row of an even round; otherwise it is the baseline the
            // row before this one ran after itself, the slot just before this one.
            if j == emitted {
                out.push(Slot::Baseline(j));
                emitted += 1;
            }
            out.push(Slot::Row(i));
        } else {
            out.push(Slot::Row(i));
            out.push(Slot::Baseline(j));
            emitted += 1;
        }
    }
    out
}

/// Reads the proc file `pf` once, whole, through `reader`; returns the bytes rendered, or the answers for a
/// PROCMAP_QUERY walk. (The scanners read through `reader_cost::timed_pass`, which also times their holds.)
pub fn read_once(reader: &ProcReader<'_>, pf: ProcFile) -> usize {
    match pf {
        ProcFile::Maps => reader.maps().len(),
        ProcFile::Smaps => reader.smaps().len(),
        ProcFile::SmapsRollup => reader.smaps_rollup().render().len(),
        ProcFile::Query => query_walk(reader, true),
        ProcFile::None => 0,
    }
}

/// Walks every VMA with PROCMAP_QUERY (`COVERING_OR_NEXT` from the previous answer's end, as
/// `vmspace_linux::procmap_query::walk_count` walks the kernel's), with a name buffer when `names`; returns
/// the answers.
pub fn query_walk(reader: &ProcReader<'_>, names: bool) -> usize {
    let mut addr = 0u64;
    let mut n = 0;
    loop {
        let mut req = QueryRequest::new(PROCMAP_QUERY_COVERING_OR_NEXT_VMA, addr);
        if names {
            // The engine writes no user memory: any non-zero address stands for the caller's buffer.
            req.vma_name_size = 4096;
            req.vma_name_addr = 0x1000;
        }
        match reader.query(&req) {
            Ok(a) => {
                n += 1;
                addr = a.vma_end;
            }
            Err(_) => return n,
        }
    }
}

/// What the threads of one engine run share.
struct Flags {
    go: AtomicBool,
    stop: AtomicBool,
    reads: Vec<AtomicU64>,
    /// The scanners' longest hold of their mode's lock, ns, and their holds (written once per scanner, at its
    /// end).
    hold_max_ns: AtomicU64,
    holds: AtomicU64,
}

/// The slack after a run's length before the run ends (the kernel side's).
const END_SLACK: Duration = Duration::from_millis(10);

/// The engine's mapper over a fresh [`Mm`] with a populated region of `region_mib` MiB.
fn engine_space(region_mib: usize) -> Result<(Mm, u64, u64), String> {
    let mut cfg = MmConfig::host();
    let pages = ((region_mib as u64) << 20) / PAGE_SIZE;
    // Random unmaps split the region into up to a VMA per two pages; the kernel's limit is the host's.
    cfg.max_map_count = cfg.max_map_count.max(pages + 64);
    let mm = Mm::new(cfg);
    let len = pages * PAGE_SIZE;
    let base = mm
        .mmap(0, len, Prot::RW, MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::POPULATE, None, 0)
        .map_err(|e| format!("engine mmap of {region_mib} MiB: {e:?}"))?;
    Ok((mm, base, pages))
}

/// The share of the region's pages the mapper's random calls leave unmapped in the long run: after `c` calls
/// over `P` pages a page was last touched by an unmap with probability `(1 - e^(-c/P)) / 2`; at `c = 2P` that is
/// 0.432, and the count of VMAs (runs of mapped pages) changes by less than 3% from there on.
pub const STEADY_UNMAPPED: f64 = 0.432;

/// Brings a fresh engine address space (a populated region) to the mapper's steady state (module docs, "The engine's rows are measured
/// beside a twin"): each page of the region unmapped with probability [`STEADY_UNMAPPED`], drawn from `seed`,
/// one `munmap` per run of unmapped pages. Returns the VMAs it has then.
pub fn steady_state(mm: &Mm, base: u64, pages: u64, seed: u64) -> Result<u64, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut run: Option<u64> = None;
    for i in 0..=pages {
        let unmap = i < pages && rng.random_bool(STEADY_UNMAPPED);
        match (unmap, run) {
            (true, None) => run = Some(i),
            (false, Some(first)) => {
                mm.munmap(base + first * PAGE_SIZE, (i - first) * PAGE_SIZE)
                    .map_err(|e| format!("engine munmap while fragmenting: {e:?}"))?;
                run = None;
            }
            _ => {}
        }
    }
    Ok(mm.map_count())
}

/// How an engine run's address spaces are made (module docs, "The engine's rows are measured beside a twin").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunSpaces {
    /// Both address spaces start in the mapper's steady state ([`steady_state`], one seed for both).
    pub steady: bool,
    /// The scanners read another address space made as the mapper's is (the twin of a row), not the mapper's.
    pub scan_other: bool,
}

/// One engine run of row `cfg` with scanners in `mode` on `layout` (module docs): the metrics of the kernel
/// experiment's runs.
pub fn engine_run(cfg: &Config, mode: ReaderMode, layout: &Layout) -> Result<BTreeMap<String, f64>, String> {
    engine_run_with(cfg, mode, layout, RunSpaces::default())
}

/// [`engine_run`] with its address spaces made as `spaces` says; the metrics add `vmas_at_start` (the mapper's)
/// and, with `scan_other`, `scanned_vmas_at_start`.
pub fn engine_run_with(
    cfg: &Config,
    mode: ReaderMode,
    layout: &Layout,
    spaces: RunSpaces,
) -> Result<BTreeMap<String, f64>, String> {
    let t_setup = Instant::now();
    let nscan = cfg.effective_scanners();
    let (mm, base, pages) = engine_space(cfg.region_mib)?;
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64);
    if spaces.steady {
        steady_state(&mm, base, pages, seed)?;
    }
    let vmas_at_start = mm.map_count();
    let other = if spaces.scan_other && nscan > 0 {
        let (o, obase, opages) = engine_space(cfg.region_mib)?;
        if spaces.steady {
            steady_state(&o, obase, opages, seed)?;
        }
        Some(o)
    } else {
        None
    };
    let scanned_vmas = other.as_ref().map(|o| o.map_count());
    let scanned = other.as_ref().unwrap_or(&mm);
    let flags = Flags {
        go: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        reads: (0..nscan).map(|_| AtomicU64::new(0)).collect(),
        hold_max_ns: AtomicU64::new(0),
        holds: AtomicU64::new(0),
    };
    let (duration, pause) = (cfg.duration, Duration::from_micros(cfg.pause_us));
    let (mm, flags) = (&mm, &flags);
    let result = std::thread::scope(|s| {
        let mut scanners = Vec::new();
        let mut others = Vec::new();
        for i in 0..nscan {
            let (cpu, pf) = (layout.other(i), cfg.procfile);
            scanners.push(s.spawn(move || scanner(scanned, mode, pf, cpu, i, flags)));
        }
        for i in 0..cfg.busy {
            let (cpu, ms) = (layout.other(i), cfg.busy_ms);
            others.push(s.spawn(move || busy(cpu, ms, flags).map(|()| None)));
        }
        others.extend(scanners);
        let mapper_cpu = layout.mapper;
        let mapper = s.spawn(move || mapper(mm, base, pages, mapper_cpu, duration, pause, flags));
        std::thread::sleep(Duration::from_millis(200).min(duration / 2));
        // Release: the warm-up is over; pairs with the Acquire loads of `go` in every thread.
        flags.go.store(true, Ordering::Release);
        let setup = t_setup.elapsed();
        // The run ends on time (module docs): the mapper's clock starts a little after `go`.
        let end = Instant::now() + duration + END_SLACK;
        while !mapper.is_finished() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Release: pairs with the Acquire loads of `stop` in the mapper, scanners and busy threads.
        flags.stop.store(true, Ordering::Release);
        let t_teardown = Instant::now();
        let out = mapper.join().map_err(|_| "the mapper thread panicked".to_string()).and_then(|r| r);
        let mut errors = Vec::new();
        let mut shares: Vec<SchedShare> = Vec::new();
        for o in others {
            match o.join() {
                Ok(Ok(share)) => shares.extend(share),
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push("a scanner or busy thread panicked".to_string()),
            }
        }
        let teardown = t_teardown.elapsed();
        match (out, errors.pop()) {
            (Ok(mut m), None) => {
                m.insert("setup_ms".to_string(), setup.as_secs_f64() * 1e3);
                m.insert("teardown_ms".to_string(), teardown.as_secs_f64() * 1e3);
                if !shares.is_empty() {
                    let least = shares.iter().map(|s| s.cpu).fold(f64::INFINITY, f64::min);
                    let most_wait = shares.iter().map(|s| s.wait).fold(0.0, f64::max);
                    m.insert("scanner_cpu_share".to_string(), least);
                    m.insert("scanner_wait_share".to_string(), most_wait);
                }
                Ok(m)
            }
            (Err(e), _) | (Ok(_), Some(e)) => Err(e),
        }
    });
    let mut m = result?;
    m.insert("vmas_at_start".to_string(), vmas_at_start as f64);
    if let Some(n) = scanned_vmas {
        m.insert("scanned_vmas_at_start".to_string(), n as f64);
    }
    // Relaxed: the scanners were joined above (join orders their stores before these loads).
    let reads: u64 = flags.reads.iter().map(|r| r.load(Ordering::Relaxed)).sum();
    m.insert("scanner_reads_count".to_string(), reads as f64);
    // Relaxed (both): the scanners were joined above.
    m.insert("scanner_holds_count".to_string(), flags.holds.load(Ordering::Relaxed) as f64);
    m.insert("scanner_hold_max_ms".to_string(), flags.hold_max_ns.load(Ordering::Relaxed) as f64 / 1e6);
    m.insert("calls_per_s".to_string(), m["calls_count"] / cfg.duration.as_secs_f64());
    talk::mark_hang(&mut m);
    Ok(m)
}

/// Waits for `go` (true) or `stop` (false).
fn wait_go(flags: &Flags) -> bool {
    loop {
        // Acquire: pairs with the main thread's Release store of `stop`.
        if flags.stop.load(Ordering::Acquire) {
            return false;
        }
        // Acquire: pairs with the main thread's Release store of `go`.
        if flags.go.load(Ordering::Acquire) {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The mapper thread (module docs).
fn mapper(
    mm: &Mm,
    base: u64,
    pages: u64,
    cpu: usize,
    duration: Duration,
    pause: Duration,
    flags: &Flags,
) -> Result<BTreeMap<String, f64>, String> {
    sys::pin_to_cpu(cpu).map_err(|e| format!("pinning the mapper to CPU {cpu}: {e}"))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let seed = now.map_or(1, |d| d.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32);
    let mut rng = SmallRng::seed_from_u64(seed);
    // Made before the run, as the kernel's mapper makes its own (vmspace_linux::contention).
    let mut rec = LatencyRecorder::prefaulted();
    if !wait_go(flags) {
        return Err("stopped before the run".into());
    }
    let (mut errors, mut cut) = (0u64, 0u64);
    let flags_map = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let sched = SchedClock::start();
    let start = Instant::now();
    // The window's end (module docs): a call still waiting then is cut there.
    let window_end = start + duration + END_SLACK;
    // Relaxed: `stop` is a plain flag here (set by the main thread at the end of the run).
    while start.elapsed() < duration && !flags.stop.load(Ordering::Relaxed) {
        let addr = base + rng.random_range(0..pages) * PAGE_SIZE;
        let map = rng.random_bool(0.5);
        let t = Instant::now();
        let r = if map {
            mm.mmap(addr, PAGE_SIZE, Prot::RW, flags_map, None, 0).map(|_| ())
        } else {
            mm.munmap(addr, PAGE_SIZE)
        };
        let done = Instant::now();
        rec.record(if done > window_end {
            cut += 1;
            window_end.saturating_duration_since(t).as_nanos() as u64
        } else {
            (done - t).as_nanos() as u64
        });
        if r.is_err() {
            errors += 1;
        }
        if !pause.is_zero() {
            sys::sleep_once(pause);
        }
    }
    let share = sched.share();
    let s = rec.stats();
    let mut m = BTreeMap::from([
        ("mapper_cpu_share".to_string(), share.cpu),
        ("mapper_wait_share".to_string(), share.wait),
        ("calls_count".to_string(), s.count as f64),
        ("call_mean_ms".to_string(), s.mean_ms),
        ("call_max_ms".to_string(), s.max_ms),
        ("call_min_ms".to_string(), rec.min_ms()),
        ("mapper_errors_count".to_string(), errors as f64),
        ("calls_cut_count".to_string(), cut as f64),
    ]);
    for &(q, stem) in CDF_QUANTILES.iter() {
        m.insert(format!("call_{stem}_ms"), rec.quantile_ms(q));
    }
    Ok(m)
}

/// A scanner thread: nice 15, reads `pf` in `mode` until `stop`, counting the reads completed after `go`.
fn scanner(
    mm: &Mm,
    mode: ReaderMode,
    pf: ProcFile,
    cpu: usize,
    index: usize,
    flags: &Flags,
) -> Result<Option<SchedShare>, String> {
    sys::pin_to_cpu(cpu).map_err(|e| format!("pinning scanner {index} to CPU {cpu}: {e}"))?;
    sys::set_nice(15).map_err(|e| format!("setpriority(15) of scanner {index}: {e}"))?;
    // The holds of the mode's lock, timed from the scanner's side (`reader_cost::timed_pass`).
    let holds = crate::reader_cost::HoldTimer::new();
    let mut sched = None;
    // Acquire: pairs with the main thread's Release store of `stop`.
    while !flags.stop.load(Ordering::Acquire) {
        std::hint::black_box(crate::reader_cost::timed_pass(mm, mode, pf, &holds, false, &mut |_| {}));
        // Relaxed: a plain flag; a read counted or not at the edge of the run does not matter.
        if flags.go.load(Ordering::Relaxed) {
            sched.get_or_insert_with(SchedClock::start);
            // Relaxed: the count is read after this thread is joined.
            flags.reads[index].fetch_add(1, Ordering::Relaxed);
        }
    }
    let (n, _, max) = holds.read();
    // Relaxed (both): read after this thread is joined.
    flags.holds.fetch_add(n, Ordering::Relaxed);
    flags.hold_max_ns.fetch_max(max, Ordering::Relaxed);
    Ok(sched.map(|s| s.share()))
}

/// A busy thread: from `go`, spins `busy_ms` ms, sleeps 1 ms, until `stop` (0: spins without pause).
fn busy(cpu: usize, busy_ms: u64, flags: &Flags) -> Result<(), String> {
    sys::pin_to_cpu(cpu).map_err(|e| format!("pinning a busy thread to CPU {cpu}: {e}"))?;
    // Spinning starts when the window opens, as the kernel side's busy tasks do (the spawn of a thousand
    // threads is not slowed by the ones already spinning).
    loop {
        // Acquire (both): pair with the main thread's Release stores of `stop` and `go`.
        if flags.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        if flags.go.load(Ordering::Acquire) {
            break;
        }
        std::thread::sleep(contention::BUSY_START_POLL);
    }
    let spin = Duration::from_millis(busy_ms);
    loop {
        let t = Instant::now();
        while busy_ms == 0 || t.elapsed() < spin {
            // Relaxed: a stop flag polled in a spin loop; nothing is published through it.
            if flags.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        sys::sleep_once(Duration::from_millis(1));
    }
}

/// The `bench.contention` report of an engine row in `mode` (`None`: a row without scanners), without runs:
/// parameters (`side` = `engine`, `mode`, the row's `procfile`, `scanners`, `busy`, `busy_ms`, `samples`,
/// `duration_s`, `region_mib`, `pause_us`, `quick`) and the placement. Push one [`engine_run`] per sample.
pub fn engine_report(
    cfg: &Config,
    mode: Option<ReaderMode>,
    layout: &Layout,
    host: &HostInfo,
    quick: bool,
) -> Report {
    let mode_name = mode.map_or("none", ReaderMode::name);
    let label = match mode {
        Some(m) => format!("engine {} {}", m.name(), cfg.label()),
        None => format!("engine {}", cfg.label()),
    };
    let mut r = Report::new("bench.contention", label, host.clone());
    r.param("side", "engine");
    r.param("mode", mode_name);
    stamp(&mut r, cfg, quick);
    r.placement.push(Placement { role: "mapper".into(), index: 0, cpu: Some(layout.mapper), nice: 0 });
    for i in 0..cfg.effective_scanners() {
        r.placement.push(Placement {
            role: "scanner".into(),
            index: i,
            cpu: Some(layout.other(i)),
            nice: 15,
        });
    }
    for i in 0..cfg.busy {
        r.placement.push(Placement { role: "busy".into(), index: i, cpu: Some(layout.other(i)), nice: 0 });
    }
    r.notes.extend(layout.notes.iter().cloned());
    r
}

fn stamp(r: &mut Report, cfg: &Config, quick: bool) {
    r.param("procfile", cfg.procfile);
    r.param("scanners", cfg.effective_scanners());
    r.param("busy", cfg.busy);
    r.param("busy_ms", cfg.busy_ms);
    r.param("samples", cfg.samples);
    r.param("duration_s", cfg.duration.as_secs_f64());
    r.param("region_mib", cfg.region_mib);
    r.param("pause_us", cfg.pause_us);
    r.param("quick", quick);
}

/// Every sample of engine row `cfg` in `mode` (module docs), summarised; `on_sample(i)` after sample `i`;
/// stops early (with the samples so far) when `stop` answers true.
pub fn engine_row(
    cfg: &Config,
    mode: Option<ReaderMode>,
    host: &HostInfo,
    quick: bool,
    on_sample: &mut dyn FnMut(usize),
    stop: &dyn Fn() -> bool,
) -> Result<Report, String> {
    cfg.validate().map_err(|e| format!("{e:#}"))?;
    let layout = Layout::resolve(&host.cpus_usable, cfg.mapper_cpu, cfg.others_cpus.as_deref())
        .map_err(|e| format!("{e:#}"))?;
    let mut r = engine_report(cfg, mode, &layout, host, quick);
    for i in 0..cfg.samples {
        if stop() {
            break;
        }
        r.push_run(engine_run(cfg, mode.unwrap_or_default(), &layout)?);
        on_sample(i);
    }
    r.summarise();
    Ok(r)
}

/// The metrics of a run of a row carried from its partner baseline run ([`BASE_PREFIX`] + the name).
pub const PAIRED_METRICS: [&str; 3] = ["call_mean_ms", "call_p99_ms", "call_max_ms"];

/// The prefix of the partner's metrics in a paired row's run (`base_call_mean_ms`).
pub const BASE_PREFIX: &str = "base_";

/// The engine's grid, every row of [`ContentionConfig::paired_rows`] in pairs with the engine's baseline
/// (module docs): returns the baseline's report (every baseline run) followed by one report per paired row,
/// each run with its partner's [`PAIRED_METRICS`], and whether `stop` ended it early. `progress` after every
/// run.
pub fn engine_grid(
    cfg: &ContentionConfig,
    host: &HostInfo,
    progress: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
) -> Result<(Vec<Report>, bool), String> {
    let rows = cfg.paired_rows();
    let Some((base_cfg, _)) = cfg.engine_rows().into_iter().find(|(c, _)| c.label() == BASELINE) else {
        return Ok((Vec::new(), false));
    };
    base_cfg.validate().map_err(|e| format!("{e:#}"))?;
    let layout = Layout::resolve(&host.cpus_usable, base_cfg.mapper_cpu, base_cfg.others_cpus.as_deref())
        .map_err(|e| format!("{e:#}"))?;
    let pairing = |r: &mut Report, what: &str| r.param("pairing", what);
    let mut base = engine_report(&base_cfg, None, &layout, host, cfg.quick);
    pairing(&mut base, "baseline: every baseline run of the interleaved sequence");
    let mut reports: Vec<Report> = rows
        .iter()
        .map(|(c, m)| {
            let mut r = engine_report(c, *m, &layout, host, cfg.quick);
            pairing(&mut r, "per pair: each run with its partner baseline run's metrics (base_*)");
            r
        })
        .collect();
    let names: Vec<String> = rows
        .iter()
        .map(|(c, m)| match m {
            Some(m) => format!("engine {} {}", m.name(), c.label()),
            None => format!("engine {}", c.label()),
        })
        .collect();
    let mut twins: Vec<Option<Report>> = rows
        .iter()
        .map(|(c, m)| {
            (c.effective_scanners() > 0).then(|| {
                let mut r = engine_report(c, *m, &layout, host, cfg.quick);
                r.benchmark = TWIN_BENCHMARK.into();
                r.label = format!("{}, scanning another address space", r.label);
                pairing(
                    &mut r,
                    "twin: the row with its scanners reading another address space of the same size",
                );
                r
            })
        })
        .collect();
    let steady = RunSpaces { steady: true, scan_other: false };
    let twin_spaces = RunSpaces { steady: true, scan_other: true };
    let mut interrupted = false;
    for round in 0..cfg.base.samples {
        let mut base_runs: Vec<BTreeMap<String, f64>> = Vec::new();
        let mut row_runs: Vec<Option<BTreeMap<String, f64>>> = vec![None; rows.len()];
        let mut twin_runs: Vec<Option<BTreeMap<String, f64>>> = vec![None; rows.len()];
        'round: for slot in pair_schedule(rows.len(), round) {
            match slot {
                Slot::Baseline(_) => {
                    if stop() {
                        interrupted = true;
                        break 'round;
                    }
                    let m = engine_run_with(&base_cfg, ReaderMode::default(), &layout, steady)?;
                    base.push_run(m.clone());
                    base_runs.push(m);
                    progress(&format!("engine {BASELINE} (round {})", round + 1));
                }
                Slot::Row(i) => {
                    let (c, mode) = &rows[i];
                    let mode = mode.unwrap_or_default();
                    // The twin on the other side of the row than the mapper-alone partner.
                    let order: &[bool] = match (&twins[i], baseline_first(i, round)) {
                        (None, _) => &[false],
                        (Some(_), true) => &[false, true],
                        (Some(_), false) => &[true, false],
                    };
                    for &twin in order {
                        if stop() {
                            interrupted = true;
                            break 'round;
                        }
                        if twin {
                            twin_runs[i] = Some(engine_run_with(c, mode, &layout, twin_spaces)?);
                            progress(&format!("{} (twin)", names[i]));
                        } else {
                            row_runs[i] = Some(engine_run_with(c, mode, &layout, steady)?);
                            progress(&names[i]);
                        }
                    }
                }
            }
        }
        for (i, (run, twin)) in row_runs.into_iter().zip(twin_runs).enumerate() {
            // A row whose partners did not run (interrupted) is left out: every run of a row has its pairs.
            let alone = base_runs.get(partner(i, round));
            let (Some(mut m), Some(alone)) = (run, alone) else { continue };
            // The judged partner: the twin for a row with scanners, the mapper alone for the others.
            let judged = match (&twins[i], &twin) {
                (None, _) => alone,
                (Some(_), Some(t)) => t,
                (Some(_), None) => continue,
            };
            for k in PAIRED_METRICS {
                if let Some(&v) = judged.get(k) {
                    m.insert(format!("{BASE_PREFIX}{k}"), v);
                }
                if let Some(&v) = alone.get(k) {
                    m.insert(format!("{ALONE_PREFIX}{k}"), v);
                }
            }
            for k in CPU_METRICS {
                if let Some(&v) = judged.get(k) {
                    m.insert(format!("{BASE_PREFIX}{k}"), v);
                }
            }
            if let (Some(r), Some(t)) = (twins[i].as_mut(), twin) {
                r.push_run(t);
            }
            reports[i].push_run(m);
        }
        if interrupted {
            break;
        }
    }
    base.summarise();
    let mut out = vec![base];
    for (mut r, twin) in reports.into_iter().zip(twins) {
        r.summarise();
        out.push(r);
        if let Some(mut t) = twin {
            t.summarise();
            out.push(t);
        }
    }
    Ok((out, interrupted))
}

/// The benchmark id of a row's twin runs (module docs, "The engine's rows are measured beside a twin").
pub const TWIN_BENCHMARK: &str = "bench.contention.twin";

/// The prefix of the mapper-alone partner's metrics in a paired row's run (`alone_call_mean_ms`), kept beside
/// the twin's (`base_*`) for the ratios over the mapper alone.
pub const ALONE_PREFIX: &str = "alone_";

/// The CPU shares of a run ([`SchedShare`]) that decide whether a pair is measurable ([`had_cpus`]), carried
/// from the partner with [`BASE_PREFIX`].
pub const CPU_METRICS: [&str; 3] = ["mapper_wait_share", "scanner_cpu_share", "scanner_wait_share"];

/// A mapper that waited for a CPU longer than this share of its run did not have one of its own.
pub const MAX_MAPPER_WAIT_SHARE: f64 = 0.1;

/// A scanner without a busy task beside it that was on a CPU less than this share of its run did not have one.
pub const MIN_SCANNER_CPU_SHARE: f64 = 0.9;

/// Whether, in a run of a row with `busy` busy tasks (its metrics `m`, under `prefix`: `""` for the row's own,
/// [`BASE_PREFIX`] for its partner's), each side had a CPU: the mapper waited for one at most
/// [`MAX_MAPPER_WAIT_SHARE`] of the run, and a scanner with no busy task beside it ran at least
/// [`MIN_SCANNER_CPU_SHARE`] of it (beside a busy task it shares its CPU by design). Unknown shares (no
/// schedstat) count as not.
pub fn had_cpus(m: &BTreeMap<String, f64>, prefix: &str, busy: usize) -> bool {
    let get = |k: &str| m.get(&format!("{prefix}{k}")).copied().unwrap_or(f64::NAN);
    let mapper = get("mapper_wait_share") <= MAX_MAPPER_WAIT_SHARE;
    let scanner = busy > 0
        || !m.contains_key(&format!("{prefix}scanner_cpu_share"))
        || get("scanner_cpu_share") >= MIN_SCANNER_CPU_SHARE;
    mapper && scanner
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct ContentionResults {
    /// Every report: rows, ratios, throughput, then one `bench.contention.target` per target.
    pub set: ReportSet,
    /// The judged targets.
    pub targets: Vec<Judged>,
    /// Whether the run stopped early.
    pub interrupted: bool,
}

fn param_str<'r>(r: &'r Report, name: &str) -> &'r str {
    r.parameters.get(name).and_then(|v| v.as_str()).unwrap_or_default()
}

/// The label of a row without its side and mode (the grid row's label).
fn row_label(r: &Report) -> String {
    let cfg_label = |pf: &str, scanners: u64, busy: u64, busy_ms: u64| {
        let c = Config {
            procfile: pf.parse().unwrap_or(ProcFile::None),
            scanners: scanners as usize,
            busy: busy as usize,
            busy_ms,
            ..Config::default()
        };
        c.label()
    };
    let u = |k: &str| r.parameters.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    cfg_label(param_str(r, "procfile"), u("scanners"), u("busy"), u("busy_ms"))
}

/// The row of `side` and `mode` labelled `label` (a grid row label); baselines are found under any mode.
pub fn find_row<'r>(reports: &'r [Report], side: &str, mode: &str, label: &str) -> Option<&'r Report> {
    reports.iter().find(|r| {
        r.benchmark == "bench.contention"
            && param_str(r, "side") == side
            && (param_str(r, "mode") == mode || param_str(r, "mode") == "none" || side == "kernel")
            && row_label(r) == label
    })
}

/// The ratio metrics of a `bench.contention.ratio` report and the row metric each divides.
pub const RATIOS: [(&str, &str); 3] =
    [("mean_ratio", "call_mean_ms"), ("p99_ratio", "call_p99_ms"), ("max_ratio", "call_max_ms")];

/// Whether the runs of `row` were measured in pairs (they carry their partner's metrics).
pub fn is_paired(row: &Report) -> bool {
    row.runs.iter().any(|run| run.metrics.contains_key(&format!("{BASE_PREFIX}call_mean_ms")))
}

/// The per-pair ratios of metric `key` of a paired row: each run's value over its partner's
/// (`base_<key>`), in run order; runs without the pair are left out.
pub fn pair_ratios(row: &Report, key: &str) -> Vec<f64> {
    let base = format!("{BASE_PREFIX}{key}");
    row.runs.iter().filter_map(|run| Some(run.metrics.get(key)? / run.metrics.get(&base)?)).collect()
}

/// The ratio report of `row` against `baseline` (same side), one run per run of the row with the row's
/// mean, p99 and max ([`RATIOS`]): over its partner's when the row was measured in pairs ([`is_paired`]:
/// the engine's rows; parameter `pairing` = `per pair`), else over the medians of `baseline`'s runs (the
/// kernel's; `baseline median`).
pub fn ratio_report(row: &Report, baseline: &Report) -> Report {
    let mut r = Report::new("bench.contention.ratio", row.label.clone(), row.host.clone());
    for k in ["side", "mode", "procfile", "scanners", "busy", "busy_ms"] {
        if let Some(v) = row.parameters.get(k) {
            r.parameters.insert(k.to_string(), v.clone());
        }
    }
    let paired = is_paired(row);
    r.param("pairing", if paired { "per pair" } else { "baseline median" });
    let median = |k: &str| baseline.metric(k).map_or(f64::NAN, |s| s.median);
    for run in &row.runs {
        let mut m = BTreeMap::new();
        for (name, key) in RATIOS {
            let base = if paired {
                run.metrics.get(&format!("{BASE_PREFIX}{key}")).copied()
            } else {
                Some(median(key))
            };
            if let (Some(v), Some(b)) = (run.metrics.get(key), base) {
                m.insert(name.to_string(), v / b);
            }
        }
        if let (Some(v), Some(b)) =
            (run.metrics.get("call_mean_ms"), run.metrics.get(&format!("{ALONE_PREFIX}call_mean_ms")))
        {
            m.insert("mean_ratio_over_alone".to_string(), v / b);
        }
        r.push_run(m);
    }
    r.summarise();
    r
}

/// Runs `vmspace bench contention` (module docs); `progress` after each step ([`ContentionConfig::steps`]);
/// stops early when `stop` answers true.
pub fn run(
    cfg: &ContentionConfig,
    progress: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
    command: &str,
) -> Result<ContentionResults, String> {
    cfg.validate()?;
    let host = vmspace_linux::hostinfo::gather();
    if cfg.talk.is_some() {
        return run_talk(cfg, &host, progress, stop, command);
    }
    let mut rows: Vec<Report> = Vec::new();
    let mut interrupted = false;
    // The kernel's rows first, while this process holds nothing of the engine's.
    if cfg.kernel {
        for row in cfg.rows() {
            if stop() {
                interrupted = true;
                break;
            }
            let label = row.label();
            let mut r = contention::run(&row, &host, &mut |_| progress(&format!("kernel {label}")))
                .map_err(|e| format!("kernel {label}: {e:#}"))?;
            r.benchmark = "bench.contention".into();
            r.label = format!("kernel {label}");
            r.param("side", "kernel");
            r.param("mode", "kernel");
            r.param("quick", cfg.quick);
            rows.push(r);
        }
    }
    let mut throughput = Vec::new();
    if let Some(t) = &cfg.throughput
        && cfg.kernel
        && !interrupted
    {
        throughput.extend(readers::kernel_reports(t, &host, progress)?);
    }
    if !interrupted {
        let (engine, stopped) = engine_grid(cfg, &host, progress, stop)?;
        rows.extend(engine);
        interrupted = stopped;
    }
    if let Some(t) = &cfg.throughput
        && !interrupted
    {
        for &mode in &cfg.modes {
            if stop() {
                interrupted = true;
                break;
            }
            throughput.extend(readers::engine_reports(t, mode, &host, progress)?);
        }
    }
    let mut ratios = Vec::new();
    for r in &rows {
        let side = param_str(r, "side");
        if row_label(r) == BASELINE || r.benchmark != "bench.contention" {
            continue;
        }
        if let Some(b) = find_row(&rows, side, param_str(r, "mode"), BASELINE) {
            ratios.push(ratio_report(r, b));
        }
    }
    let names: Vec<&str> = cfg.modes.iter().map(|m| m.name()).collect();
    let mut targets = if cfg.grid { targets(&names, &rows) } else { Vec::new() };
    targets.extend(readers::targets(&names, &throughput));
    let mut reports = rows;
    reports.extend(ratios);
    reports.extend(throughput);
    reports.extend(targets.iter().map(|t| t.report("bench.contention.target", &host)));
    Ok(ContentionResults { set: ReportSet::new(command, reports), targets, interrupted })
}

/// The talk's table (module docs): the kernel's rows first, then each mode's; no targets.
fn run_talk(
    cfg: &ContentionConfig,
    host: &HostInfo,
    progress: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
    command: &str,
) -> Result<ContentionResults, String> {
    let rows = cfg.talk_rows();
    let mut reports = Vec::new();
    let mut interrupted = false;
    if cfg.kernel {
        for row in &rows {
            if stop() {
                interrupted = true;
                break;
            }
            let label = row.label();
            let mut r = contention::run(row, host, &mut |_| progress(&format!("kernel {label}")))
                .map_err(|e| format!("kernel {label}: {e:#}"))?;
            r.benchmark = "bench.contention".into();
            r.label = format!("kernel {label}");
            r.param("side", "kernel");
            r.param("mode", "kernel");
            r.param("quick", cfg.quick);
            r.param("grid", "talk");
            reports.push(r);
        }
    }
    'modes: for &mode in &cfg.modes {
        for row in &rows {
            if interrupted || stop() {
                interrupted = true;
                break 'modes;
            }
            let m = (row.effective_scanners() > 0).then_some(mode);
            let label = format!("engine {} {}", mode.name(), row.label());
            let mut r = engine_row(row, m, host, cfg.quick, &mut |_| progress(&label), stop)?;
            r.param("grid", "talk");
            if r.runs.len() < row.samples {
                interrupted = true;
            }
            reports.push(r);
        }
    }
    Ok(ContentionResults { set: ReportSet::new(command, reports), targets: Vec::new(), interrupted })
}

/// The talk tables of `reports` (their `bench.contention` reports of the talk's grid), one per proc file and
/// side.
pub fn render_talk(reports: &[Report]) -> String {
    let rows: Vec<&Report> = reports
        .iter()
        .filter(|r| r.benchmark == "bench.contention" && param_str(r, "grid") == "talk")
        .collect();
    let side = |r: &Report| match param_str(r, "side") {
        "kernel" => "kernel".to_string(),
        _ => format!("engine {}", param_str(r, "mode")),
    };
    talk::render_tables(&talk::tables(&rows, &side))
}

/// The per-pair ratios of metric `key` in engine row `label` of `mode` ([`pair_ratios`]; none when the row
/// is missing).
fn engine_ratios(rows: &[Report], mode: &str, label: &str, key: &str) -> Vec<f64> {
    find_row(rows, "engine", mode, label).map_or_else(Vec::new, |r| pair_ratios(r, key))
}

/// Why engine row `label` of `mode` is not measurable here, if it is not: a run of it or of its partner in which
/// a side did not have a CPU ([`had_cpus`]).
fn lacked_cpus(rows: &[Report], mode: &str, label: &str) -> Option<String> {
    let r = find_row(rows, "engine", mode, label)?;
    let busy = r.parameters.get("busy").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
    let bad = r
        .runs
        .iter()
        .filter(|run| !(had_cpus(&run.metrics, "", busy) && had_cpus(&run.metrics, BASE_PREFIX, busy)))
        .count();
    (bad > 0).then(|| {
        format!(
            "in {bad} of {} pairs a side did not have a CPU of its own (mapper waiting for one over {:.0}% of \
             its run, or a scanner on one under {:.0}%)",
            r.runs.len(),
            100.0 * MAX_MAPPER_WAIT_SHARE,
            100.0 * MIN_SCANNER_CPU_SHARE
        )
    })
}

/// The target `j` on engine row `label` of `mode`, judged not measurable here when [`lacked_cpus`] says so.
fn unless_lacked(j: Judged, rows: &[Report], mode: &str, label: &str) -> Judged {
    match lacked_cpus(rows, mode, label) {
        Some(why) => j.not_measurable(why),
        None => j,
    }
}

/// The grid's targets (module docs) for the engine modes named `modes`, judged on the per-pair ratios of the
/// `bench.contention` reports `rows`: a row missing from `rows`, or without pairs, is not measured.
pub fn targets(modes: &[&str], rows: &[Report]) -> Vec<Judged> {
    let mut out = Vec::new();
    for &mode in modes.iter().filter(|m| SCALABLE_MODES.contains(m)) {
        for pf in PROCFILES {
            for busy in ["", " + 1 busy B=2"] {
                let label = format!("{}, 1 scanner{busy}", pf.name());
                let j = Judged::new(
                    format!(
                        "engine {mode}, {label}: mean call over the twin's (scanner of another address space)"
                    ),
                    "",
                    Goal::AtMost(MAX_MEAN_RATIO),
                    engine_ratios(rows, mode, &label, "call_mean_ms"),
                );
                out.push(unless_lacked(j, rows, mode, &label));
            }
        }
    }
    if modes.contains(&"lockless") {
        for pf in PROCFILES {
            let label = format!("{}, 1 scanner + 1 busy B=0", pf.name());
            out.push(Judged::new(
                format!("engine lockless, {label}: worst call over the twin's worst"),
                "",
                Goal::AtMost(MAX_STARVED_MAX_RATIO),
                engine_ratios(rows, "lockless", &label, "call_max_ms"),
            ));
        }
    }
    if modes.contains(&"mmap-lock") {
        let label = "smaps_rollup, 1 scanner + 1 busy B=0";
        out.push(Judged::new(
            format!("engine mmap-lock, {label}: mean call over the twin's (the kernel's inversion)"),
            "",
            Goal::AtLeast(MIN_INVERSION_RATIO),
            engine_ratios(rows, "mmap-lock", label, "call_mean_ms"),
        ));
    }
    out
}

/// The terminal tables: the grid (kernel and every engine mode, per row), then the throughput.
pub fn render_tables(res: &ContentionResults) -> String {
    use vmspace_results::table::{count, ms, render};
    let reports = &res.set.reports;
    if reports.iter().any(|r| param_str(r, "grid") == "talk") {
        return render_talk(reports);
    }
    let rows: Vec<&Report> = reports.iter().filter(|r| r.benchmark == "bench.contention").collect();
    let mut out = String::new();
    if !rows.is_empty() {
        out.push_str(
            "\nthe mapper's mmap/munmap call latency, ms (medians over the runs); engine rows per pair: each run \
             over its twin run beside it (the same row, its scanner reading another address space of the same \
             size; rows without a scanner: the mapper alone), the median of the pairs [and its interval], and \
             /alone over the mapper-alone run; kernel rows run by run over the kernel baseline's median; \
             CPU: the mapper's run-queue wait share / the scanner's on-CPU share\n",
        );
        let owned: Vec<Report> = rows.iter().map(|r| (*r).clone()).collect();
        let mut labels: Vec<String> = Vec::new();
        for r in &rows {
            let l = row_label(r);
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
        let mut table = Vec::new();
        for label in &labels {
            for r in rows.iter().filter(|r| row_label(r) == *label) {
                let med = |k: &str| r.metric(k).map_or(f64::NAN, |s| s.median);
                let side = param_str(r, "side");
                let base = find_row(&owned, side, param_str(r, "mode"), BASELINE);
                let ratios = base.filter(|_| *label != BASELINE).map(|b| ratio_report(r, b));
                let ratio = |name: &str, interval: bool| {
                    let values: Vec<f64> = ratios.as_ref().map_or_else(Vec::new, |x| {
                        x.runs.iter().filter_map(|run| run.metrics.get(name).copied()).collect()
                    });
                    match median_interval(&values) {
                        Some(i) if interval => i.text(),
                        Some(i) => format!("{:.2}x", i.median),
                        None if *label == BASELINE => "1.00x".to_string(),
                        None => "-".to_string(),
                    }
                };
                let who = match (side, param_str(r, "mode")) {
                    ("kernel", _) => "kernel".to_string(),
                    (_, "none") => "engine".to_string(),
                    (_, m) => format!("engine {m}"),
                };
                table.push(vec![
                    label.clone(),
                    who,
                    ms(med("call_mean_ms")),
                    ms(med("call_p99_ms")),
                    ms(med("call_max_ms")),
                    count(med("calls_count")),
                    count(med("scanner_reads_count")),
                    ratio("mean_ratio", true),
                    ratio("p99_ratio", false),
                    ratio("max_ratio", true),
                    ratio("mean_ratio_over_alone", false),
                    format!(
                        "{:.0}% / {}",
                        100.0 * med("mapper_wait_share"),
                        r.metric("scanner_cpu_share")
                            .map_or("-".to_string(), |s| format!("{:.0}%", 100.0 * s.median))
                    ),
                ]);
            }
        }
        out.push_str(&render(
            &[
                "config",
                "side",
                "mean",
                "p99",
                "max",
                "calls/run",
                "reads/run",
                "mean/base",
                "p99/base",
                "max/base",
                "mean/alone",
                "CPU",
            ],
            &table,
        ));
    }
    out.push_str(&readers::render_table(reports));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::Status;

    /// A `bench.contention` report of `side`/`mode` for grid row `cfg` with one run of the given mean and max.
    fn row(side: &str, mode: &str, cfg: &Config, mean: f64, max: f64) -> Report {
        let mut r = Report::new("bench.contention", cfg.label(), HostInfo::default());
        r.param("side", side);
        r.param("mode", mode);
        stamp(&mut r, cfg, true);
        r.push_run(BTreeMap::from([
            ("call_mean_ms".to_string(), mean),
            ("call_p99_ms".to_string(), mean * 2.0),
            ("call_max_ms".to_string(), max),
        ]));
        r.summarise();
        r
    }

    /// An engine row of `mode` measured in pairs: one run per `(mean, base mean, max, base max)`.
    fn paired(mode: &str, cfg: &Config, pairs: &[(f64, f64, f64, f64)]) -> Report {
        let mut r = Report::new("bench.contention", cfg.label(), HostInfo::default());
        r.param("side", "engine");
        r.param("mode", mode);
        stamp(&mut r, cfg, true);
        for &(mean, base_mean, max, base_max) in pairs {
            r.push_run(BTreeMap::from([
                ("call_mean_ms".to_string(), mean),
                ("call_p99_ms".to_string(), mean * 2.0),
                ("call_max_ms".to_string(), max),
                ("base_call_mean_ms".to_string(), base_mean),
                ("base_call_p99_ms".to_string(), base_mean * 2.0),
                ("base_call_max_ms".to_string(), base_max),
                ("mapper_wait_share".to_string(), 0.01),
                ("scanner_cpu_share".to_string(), 0.99),
                ("base_mapper_wait_share".to_string(), 0.02),
                ("base_scanner_cpu_share".to_string(), 0.98),
            ]));
        }
        r.summarise();
        r
    }

    /// Three pairs whose mean ratios are `ratios` and whose max ratios are `max_ratios`, over a baseline that
    /// drifts from pair to pair (mean 5, 10, 7 µs; worst 0.2, 0.4, 0.3 ms), as it does on a shared VM.
    fn drifting(ratios: [f64; 3], max_ratios: [f64; 3]) -> Vec<(f64, f64, f64, f64)> {
        let (means, maxes) = ([0.005, 0.010, 0.007], [0.2, 0.4, 0.3]);
        (0..3).map(|i| (means[i] * ratios[i], means[i], maxes[i] * max_ratios[i], maxes[i])).collect()
    }

    fn grid() -> Vec<Config> {
        contention::sweep_grid(&Config::default())
    }

    #[test]
    fn targets_judge_the_per_pair_ratios() {
        let g = grid();
        let below = [0.95, 0.98, 1.0];
        let mut rows = vec![row("engine", "none", &g[0], 0.007, 0.3)];
        rows.push(paired("none", &g[1], &drifting(below, below)));
        for c in &g[2..] {
            let (starved, b2) = (c.busy_ms == 0, c.busy == 1 && c.busy_ms == 2);
            // per-vma: clearly below 1.05x but smaps alone (clearly above: missed) and maps with B=2 (pairs on
            // both sides of the goal: undecided, although the median of the pairs is below it).
            let pv = match (c.procfile, c.busy, b2) {
                (ProcFile::Smaps, 0, _) => [1.2, 1.25, 1.3],
                (ProcFile::Maps, _, true) => [0.95, 1.02, 1.15],
                _ => below,
            };
            rows.push(paired("per-vma", c, &drifting(pv, [1.5; 3])));
            // mmap-lock: the inversion only with a starved smaps_rollup scanner.
            let ml =
                if starved && c.procfile == ProcFile::SmapsRollup { [20.0, 400.0, 35.0] } else { [2.0; 3] };
            rows.push(paired("mmap-lock", c, &drifting(ml, [40.0; 3])));
            // lockless: worst calls within 2x but for a starved query walk (missed) and a starved smaps one
            // (one pair of three above: undecided).
            let lmax = match (starved, c.procfile) {
                (true, ProcFile::Query) => [2.5, 2.6, 3.0],
                (true, ProcFile::Smaps) => [1.5, 1.8, 2.2],
                _ => [1.5, 1.6, 1.7],
            };
            rows.push(paired("lockless", c, &drifting(below, lmax)));
        }
        // The kernel's rows are never judged.
        rows.push(row("kernel", "kernel", &g[0], 1.0, 1.0));
        let t = targets(&["mmap-lock", "per-vma", "lockless"], &rows);
        // per-vma 8, lockless 8 + 4, mmap-lock 1; each on its row's three pairs.
        assert_eq!(t.len(), 21);
        assert!(t.iter().all(|t| t.values.len() == 3), "{t:?}");
        let with = |s: Status| -> Vec<&str> {
            t.iter().filter(|t| t.status == s).map(|t| t.what.as_str()).collect()
        };
        assert_eq!(
            with(Status::Missed),
            [
                "engine per-vma, smaps, 1 scanner: mean call over the twin's (scanner of another address space)",
                "engine lockless, query, 1 scanner + 1 busy B=0: worst call over the twin's worst",
            ]
        );
        assert_eq!(
            with(Status::Undecided),
            [
                "engine per-vma, maps, 1 scanner + 1 busy B=2: mean call over the twin's (scanner of another \
                 address space)",
                "engine lockless, smaps, 1 scanner + 1 busy B=0: worst call over the twin's worst",
            ]
        );
        assert_eq!(with(Status::Met).len(), 17);
        let straddle = t.iter().find(|t| t.what.starts_with("engine per-vma, maps, 1 scanner + 1")).unwrap();
        let i = straddle.interval.unwrap();
        assert!(i.median < MAX_MEAN_RATIO && (i.low, i.high) == (0.95, 1.15), "{i:?}");
        // The inversion's median is the middle pair's ratio, and the spread above the goal does not matter.
        let inv = t.iter().find(|t| t.what.contains("inversion")).unwrap();
        assert!((inv.value() - 35.0).abs() < 1e-9 && inv.met(), "{inv:?}");
        // Without the lockless mode its targets are absent, and a missing row is not measured.
        let t = targets(&["mmap-lock", "per-vma"], &rows[..5]);
        assert_eq!(t.len(), 9);
        assert!(t.iter().filter(|t| !t.measured()).count() >= 7, "{t:?}");
        assert!(!t.iter().any(|t| t.what.contains("lockless")));
        // A pair in which the scanner did not have a CPU of its own: not measurable here, whatever the ratios
        // (beside a busy task the scanner shares its CPU by design, and only the mapper's wait counts).
        let mut starved = paired("per-vma", &g[2], &drifting([1.0; 3], [1.0; 3]));
        starved.runs[1].metrics.insert("base_scanner_cpu_share".to_string(), 0.6);
        let mut waited = paired("per-vma", &g[3], &drifting([1.0; 3], [1.0; 3]));
        waited.runs[0].metrics.insert("scanner_cpu_share".to_string(), 0.3);
        let t = targets(&["per-vma"], &[row("engine", "none", &g[0], 0.01, 1.0), starved, waited]);
        assert_eq!(t[0].status, Status::NotMeasurable, "{:?}", t[0]);
        assert!(t[0].note.contains("1 of 3 pairs"), "{}", t[0].note);
        assert_eq!(t[1].status, Status::Met, "B=2: {:?}", t[1]);
        // A row whose runs carry no pair (the kernel's way) is not judged at all.
        let unpaired =
            vec![row("engine", "none", &g[0], 0.01, 1.0), row("engine", "per-vma", &g[2], 0.001, 1.0)];
        assert!(!targets(&["per-vma"], &unpaired)[0].measured());
    }

    #[test]
    fn pairs_decide_where_the_medians_would_not() {
        // A row at the baseline's speed in every pair, on a machine whose speed changes between pairs: the
        // per-pair ratios are all 1.00x (met), the ratio of the medians of a baseline measured in the slow
        // phase and of the row would say 0.7x or 1.4x depending on the phase.
        let g = grid();
        let rows = vec![
            row("engine", "none", &g[0], 0.010, 0.3),
            paired("per-vma", &g[2], &drifting([1.0; 3], [1.0; 3])),
        ];
        let t = targets(&["per-vma"], &rows);
        assert_eq!(t[0].status, Status::Met, "{:?}", t[0]);
        assert_eq!(t[0].values, [1.0, 1.0, 1.0]);
    }

    #[test]
    fn ratios_are_per_pair_on_the_engine_and_over_the_median_on_the_kernel() {
        let g = grid();
        let b = row("engine", "none", &g[0], 0.01, 2.0);
        let r = paired("per-vma", &g[2], &drifting([2.0, 3.0, 4.0], [4.0, 5.0, 6.0]));
        assert!(is_paired(&r) && !is_paired(&b));
        assert_eq!(pair_ratios(&r, "call_mean_ms").len(), 3);
        let x = ratio_report(&r, &b);
        assert_eq!(x.parameters["pairing"], "per pair");
        let run = |i: usize, k: &str| x.runs[i].metrics[k];
        for (i, (mean, max)) in [(2.0, 4.0), (3.0, 5.0), (4.0, 6.0)].into_iter().enumerate() {
            assert!((run(i, "mean_ratio") - mean).abs() < 1e-9 && (run(i, "max_ratio") - max).abs() < 1e-9);
            assert!((run(i, "p99_ratio") - mean).abs() < 1e-9);
        }
        // The kernel's rows (no pairs): run by run over the baseline's median.
        let k = row("kernel", "kernel", &g[2], 0.02, 8.0);
        let x = ratio_report(&k, &row("kernel", "kernel", &g[0], 0.01, 2.0));
        assert_eq!(x.parameters["pairing"], "baseline median");
        assert!((x.metric("mean_ratio").unwrap().median - 2.0).abs() < 1e-9);
        assert!((x.metric("max_ratio").unwrap().median - 4.0).abs() < 1e-9);
        assert_eq!(row_label(&r), "maps, 1 scanner");
        let all = [b.clone(), r.clone()];
        assert!(find_row(&all, "engine", "per-vma", BASELINE).is_some());
        assert!(find_row(&all, "engine", "mmap-lock", "maps, 1 scanner").is_none());
    }

    #[test]
    fn every_row_sits_next_to_its_partner_and_alternates_sides() {
        for k in 0..12 {
            for round in 0..4 {
                let order = pair_schedule(k, round);
                let rows: Vec<usize> =
                    order.iter().filter_map(|s| if let Slot::Row(i) = s { Some(*i) } else { None }).collect();
                assert_eq!(rows, (0..k).collect::<Vec<_>>(), "k {k} round {round}: every row once, in order");
                let bases: Vec<usize> = order
                    .iter()
                    .filter_map(|s| if let Slot::Baseline(j) = s { Some(*j) } else { None })
                    .collect();
                let n = baselines_in_round(k, round);
                assert_eq!(bases, (0..n).collect::<Vec<_>>(), "k {k} round {round}: baselines in order");
                assert!(k == 0 || n <= k / 2 + 1, "about one baseline per two rows");
                // No two baselines are neighbours (each serves a row), and each serves at most two rows.
                assert!(!order.windows(2).any(|w| matches!(w, [Slot::Baseline(_), Slot::Baseline(_)])));
                for i in 0..k {
                    let at = order.iter().position(|s| *s == Slot::Row(i)).unwrap();
                    let j = partner(i, round);
                    let want = if baseline_first(i, round) { at.checked_sub(1) } else { Some(at + 1) };
                    assert_eq!(
                        want.map(|p| order[p]),
                        Some(Slot::Baseline(j)),
                        "k {k} round {round} row {i}"
                    );
                    // The next round puts the partner on the other side.
                    assert_ne!(baseline_first(i, round), baseline_first(i, round + 1));
                }
                for j in 0..n {
                    assert!((0..k).filter(|&i| partner(i, round) == j).count() <= 2);
                }
            }
        }
    }

    #[test]
    fn the_engine_grid_pairs_every_run_and_counts_its_steps() {
        let mut cfg = ContentionConfig::quick();
        cfg.base.samples = 2;
        cfg.base.duration = Duration::from_millis(20);
        cfg.base.region_mib = 1;
        cfg.modes = vec![ReaderMode::Lockless];
        cfg.kernel = false;
        cfg.throughput = None;
        let k = cfg.paired_rows().len();
        assert_eq!(k, 13);
        let mut steps = 0u64;
        let res = run(&cfg, &mut |_| steps += 1, &|| false, "test").unwrap();
        assert!(!res.interrupted);
        assert_eq!(steps, cfg.steps());
        let rows: Vec<&Report> =
            res.set.reports.iter().filter(|r| r.benchmark == "bench.contention").collect();
        assert_eq!(rows.len(), k + 1);
        assert_eq!(row_label(rows[0]), BASELINE);
        assert_eq!(rows[0].runs.len(), baselines_in_round(k, 0) + baselines_in_round(k, 1));
        let base_means: Vec<f64> = rows[0].runs.iter().map(|r| r.metrics["call_mean_ms"]).collect();
        let twins: Vec<&Report> = res.set.reports.iter().filter(|r| r.benchmark == TWIN_BENCHMARK).collect();
        assert_eq!(twins.len(), k - 1, "every row with a scanner has a twin");
        for r in &rows[1..] {
            assert!(is_paired(r), "{}", r.label);
            assert_eq!(r.runs.len(), 2, "{}", r.label);
            let twin = twins.iter().find(|t| t.label.starts_with(&r.label));
            for (i, run) in r.runs.iter().enumerate() {
                // Each run's mapper-alone partner is one of the baseline's own runs; its judged partner is
                // its twin's run of the same round (or, without a scanner, the mapper alone).
                assert!(base_means.contains(&run.metrics["alone_call_mean_ms"]), "{}", r.label);
                let want =
                    twin.map_or(run.metrics["alone_call_mean_ms"], |t| t.runs[i].metrics["call_mean_ms"]);
                assert_eq!(run.metrics["base_call_mean_ms"], want, "{}", r.label);
                assert!(run.metrics.contains_key("mapper_wait_share"), "{}", r.label);
            }
            if let Some(t) = twin {
                // The twin's scanner read another address space of the same size, in the steady state.
                for (run, trun) in r.runs.iter().zip(&t.runs) {
                    assert_eq!(trun.metrics["scanned_vmas_at_start"], trun.metrics["vmas_at_start"]);
                    assert!(run.metrics["vmas_at_start"] > 10.0, "{}: {:?}", r.label, run.metrics);
                }
            }
        }
        let ratios = res.set.reports.iter().filter(|r| r.benchmark == "bench.contention.ratio").count();
        assert_eq!(ratios, k);
        // lockless: 8 mean targets and 4 worst-call ones, each on two pairs (and its two throughput targets,
        // not measured without the throughput).
        let grid: Vec<&Judged> = res.targets.iter().filter(|t| t.what.contains("twin")).collect();
        assert_eq!((grid.len(), res.targets.len()), (12, 14));
        assert!(grid.iter().all(|t| t.values.len() == 2), "{grid:?}");
        // Stopped before the first run: nothing measured, and the run says so.
        let res = run(&cfg, &mut |_| {}, &|| true, "test").unwrap();
        assert!(res.interrupted);
        assert!(
            res.set.reports.iter().filter(|r| r.benchmark == "bench.contention").all(|r| r.runs.is_empty())
        );
    }

    #[test]
    fn engine_rows_cover_every_mode_and_one_baseline() {
        let cfg = ContentionConfig::quick();
        let rows = cfg.engine_rows();
        assert_eq!(rows.len(), 2 + 12 * ReaderMode::ALL.len());
        assert!(rows.iter().filter(|(_, m)| m.is_none()).all(|(c, _)| c.effective_scanners() == 0));
    }

    #[test]
    fn a_short_engine_run_times_calls_and_counts_reads() {
        let host = vmspace_linux::hostinfo::gather();
        let layout = Layout::resolve(&host.cpus_usable, None, None).unwrap();
        for pf in PROCFILES {
            let cfg = Config {
                procfile: pf,
                busy: 1,
                busy_ms: 2,
                samples: 1,
                duration: Duration::from_millis(60),
                region_mib: 2,
                ..Config::default()
            };
            let m = engine_run(&cfg, ReaderMode::PerVma, &layout).unwrap();
            assert!(m["calls_count"] > 0.0, "{pf:?} {m:?}");
            assert!(m["scanner_reads_count"] > 0.0, "{pf:?} {m:?}");
            assert_eq!(m["mapper_errors_count"], 0.0);
            assert!(m["call_min_ms"] <= m["call_p50_ms"] && m["call_p50_ms"] <= m["call_max_ms"], "{m:?}");
            // The per-VMA scanner's holds are timed; no call can outlast the window (length + 10 ms).
            assert!(m["scanner_holds_count"] > 0.0 && m["scanner_hold_max_ms"] > 0.0, "{pf:?} {m:?}");
            assert!(m["call_max_ms"] <= 70.0 && m["calls_cut_count"] <= 1.0, "{pf:?} {m:?}");
            assert!(m["setup_ms"] > 0.0 && m["teardown_ms"] >= 0.0, "{m:?}");
        }
    }

    #[test]
    fn read_once_reads_every_file() {
        let (mm, base, pages) = engine_space(1).unwrap();
        mm.mprotect(base, PAGE_SIZE, Prot::READ).unwrap();
        for mode in ReaderMode::ALL {
            let r = mm.reader_with(mode);
            assert_eq!(read_once(&r, ProcFile::Maps), r.maps().len());
            assert!(read_once(&r, ProcFile::Smaps) > read_once(&r, ProcFile::Maps));
            assert!(read_once(&r, ProcFile::SmapsRollup) > 0);
            assert_eq!(read_once(&r, ProcFile::Query), 2);
            assert_eq!(query_walk(&r, false), 2);
        }
        assert_eq!(pages, 256);
        mm.validate().unwrap();
    }
}
