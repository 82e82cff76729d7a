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
//!   [`ReaderMode`] each row, one whole file per read ([`read_once`]); busy threads (nice 0) spin B ms then
//!   sleep 1 ms. Scanners and busy threads share the other CPUs as the kernel's processes do
//!   ([`Layout::resolve`]). After a 200 ms warm-up the mapper starts; only reads completed while it runs count.
//!   Each run gets a fresh `Mm`. The two engine baseline rows have no scanner, so they are measured once
//!   (mode `none`); every scanner row once per mode of [`ReaderMode::ALL`].
//!
//! Metrics per run, on both sides (the kernel experiment's): `calls_count`, `calls_per_s`, `call_mean_ms`,
//! `call_min_ms`, `call_max_ms`, `call_<stem>_ms` for every quantile of `CDF_QUANTILES` (p50, p99 ...),
//! `mapper_errors_count`, `scanner_reads_count`. One `bench.contention` report per (side, mode, row); one
//! `bench.contention.ratio` report per non-baseline row with, run by run, the row's mean, p99 and max over the
//! median of the same side's baseline (`mean_ratio`, `p99_ratio`, `max_ratio`).
//!
//! # Reader throughput
//!
//! [`crate::readers`]: maps rendered per second and PROCMAP_QUERY answers per reader thread over an address
//! space of 10,000 VMAs, per mode, beside the kernel reading its own `/proc/self/maps`.
//!
//! # Targets
//!
//! [`targets`]: the per-VMA and lockless modes (those of [`ReaderMode::ALL`] named `per-vma` and `lockless`)
//! keep the mapper's mean call within [`MAX_MEAN_RATIO`] of the engine baseline's for every proc file, with
//! the scanner alone and beside a B=2 busy task; the lockless mode keeps the worst call with a starved
//! scanner (B=0) within [`MAX_STARVED_MAX_RATIO`] of the baseline's worst; the mmap-lock mode reproduces the
//! kernel's priority inversion: smaps_rollup with a starved scanner slows the mean call at least
//! [`MIN_INVERSION_RATIO`]-fold. A mode this build does not have (lockless before its branch lands) has no rows
//! and no targets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_linux::contention::{self, Config, ProcFile};
use vmspace_linux::placement::Layout;
use vmspace_linux::sys;
use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, ProcReader, Prot};

/// The engine's reader modes (re-exported for `vmspace report`, which does not depend on the engine).
pub use vmspace_mm::ReaderMode;
use vmspace_proc::QueryRequest;
use vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Placement, Report, ReportSet};
use vmspace_results::stats::{CDF_QUANTILES, LatencyRecorder};

use crate::judge::Judged;
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
        Ok(())
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

    /// Progress steps of [`run`]: one per run of every row, then the throughput's.
    pub fn steps(&self) -> u64 {
        let kernel = if self.kernel { self.rows().len() } else { 0 };
        let grid = ((kernel + self.engine_rows().len()) * self.base.samples) as u64;
        grid + self.throughput.as_ref().map_or(0, |t| t.steps(&self.modes, self.kernel))
    }
}

/// Reads the proc file `pf` once, whole, through `reader` (what one scanner read is); returns the bytes
/// rendered, or the answers for a PROCMAP_QUERY walk. The one place a scanner reads: the chunked read(2)
/// handle replaces the whole-file renders here.
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
}

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

/// One engine run of row `cfg` with scanners in `mode` on `layout` (module docs): the metrics of the kernel
/// experiment's runs.
pub fn engine_run(cfg: &Config, mode: ReaderMode, layout: &Layout) -> Result<BTreeMap<String, f64>, String> {
    let nscan = cfg.effective_scanners();
    let (mm, base, pages) = engine_space(cfg.region_mib)?;
    let flags = Flags {
        go: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        reads: (0..nscan).map(|_| AtomicU64::new(0)).collect(),
    };
    let (duration, pause) = (cfg.duration, Duration::from_micros(cfg.pause_us));
    let (mm, flags) = (&mm, &flags);
    let result = std::thread::scope(|s| {
        let mut others = Vec::new();
        for i in 0..nscan {
            let (cpu, pf) = (layout.other(i), cfg.procfile);
            others.push(s.spawn(move || scanner(mm, mode, pf, cpu, i, flags)));
        }
        for i in 0..cfg.busy {
            let (cpu, ms) = (layout.other(i), cfg.busy_ms);
            others.push(s.spawn(move || busy(cpu, ms, flags)));
        }
        let mapper_cpu = layout.mapper;
        let mapper = s.spawn(move || mapper(mm, base, pages, mapper_cpu, duration, pause, flags));
        std::thread::sleep(Duration::from_millis(200));
        // Release: the warm-up is over; pairs with the Acquire loads of `go` in every thread.
        flags.go.store(true, Ordering::Release);
        let out = mapper.join().map_err(|_| "the mapper thread panicked".to_string()).and_then(|r| r);
        // Release: pairs with the Acquire loads of `stop` in the scanners and busy threads.
        flags.stop.store(true, Ordering::Release);
        let mut errors = Vec::new();
        for o in others {
            match o.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push("a scanner or busy thread panicked".to_string()),
            }
        }
        match (out, errors.pop()) {
            (Ok(m), None) => Ok(m),
            (Err(e), _) | (Ok(_), Some(e)) => Err(e),
        }
    });
    let mut m = result?;
    // Relaxed: the scanners were joined above (join orders their stores before these loads).
    let reads: u64 = flags.reads.iter().map(|r| r.load(Ordering::Relaxed)).sum();
    m.insert("scanner_reads_count".to_string(), reads as f64);
    m.insert("calls_per_s".to_string(), m["calls_count"] / cfg.duration.as_secs_f64());
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
    if !wait_go(flags) {
        return Err("stopped before the run".into());
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let seed = now.map_or(1, |d| d.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut rec = LatencyRecorder::new();
    let mut errors = 0u64;
    let flags_map = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let start = Instant::now();
    while start.elapsed() < duration {
        let addr = base + rng.random_range(0..pages) * PAGE_SIZE;
        let map = rng.random_bool(0.5);
        let t = Instant::now();
        let r = if map {
            mm.mmap(addr, PAGE_SIZE, Prot::RW, flags_map, None, 0).map(|_| ())
        } else {
            mm.munmap(addr, PAGE_SIZE)
        };
        rec.record(t.elapsed().as_nanos() as u64);
        if r.is_err() {
            errors += 1;
        }
        if !pause.is_zero() {
            sys::sleep_once(pause);
        }
    }
    let s = rec.stats();
    let mut m = BTreeMap::from([
        ("calls_count".to_string(), s.count as f64),
        ("call_mean_ms".to_string(), s.mean_ms),
        ("call_max_ms".to_string(), s.max_ms),
        ("call_min_ms".to_string(), rec.min_ms()),
        ("mapper_errors_count".to_string(), errors as f64),
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
) -> Result<(), String> {
    sys::pin_to_cpu(cpu).map_err(|e| format!("pinning scanner {index} to CPU {cpu}: {e}"))?;
    sys::set_nice(15).map_err(|e| format!("setpriority(15) of scanner {index}: {e}"))?;
    let reader = mm.reader_with(mode);
    // Acquire: pairs with the main thread's Release store of `stop`.
    while !flags.stop.load(Ordering::Acquire) {
        std::hint::black_box(read_once(&reader, pf));
        // Relaxed: a plain flag; a read counted or not at the edge of the run does not matter.
        if flags.go.load(Ordering::Relaxed) {
            // Relaxed: the count is read after this thread is joined.
            flags.reads[index].fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// A busy thread: spins `busy_ms` ms, sleeps 1 ms, until `stop` (0: spins without pause).
fn busy(cpu: usize, busy_ms: u64, flags: &Flags) -> Result<(), String> {
    sys::pin_to_cpu(cpu).map_err(|e| format!("pinning a busy thread to CPU {cpu}: {e}"))?;
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

/// The ratio report of `row` against `baseline` (same side): run by run, the row's mean, p99 and max over the
/// baseline's medians.
pub fn ratio_report(row: &Report, baseline: &Report) -> Report {
    let mut r = Report::new("bench.contention.ratio", row.label.clone(), row.host.clone());
    for k in ["side", "mode", "procfile", "scanners", "busy", "busy_ms"] {
        if let Some(v) = row.parameters.get(k) {
            r.parameters.insert(k.to_string(), v.clone());
        }
    }
    let base = |k: &str| baseline.metric(k).map_or(f64::NAN, |s| s.median);
    for run in &row.runs {
        let mut m = BTreeMap::new();
        for (name, key) in
            [("mean_ratio", "call_mean_ms"), ("p99_ratio", "call_p99_ms"), ("max_ratio", "call_max_ms")]
        {
            if let Some(v) = run.metrics.get(key) {
                m.insert(name.to_string(), v / base(key));
            }
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
    for (row, mode) in cfg.engine_rows() {
        if interrupted || stop() {
            interrupted = true;
            break;
        }
        let what = match mode {
            Some(m) => format!("engine {} {}", m.name(), row.label()),
            None => format!("engine {}", row.label()),
        };
        let r = engine_row(&row, mode, &host, cfg.quick, &mut |_| progress(&what), stop)?;
        rows.push(r);
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
        if row_label(r) == BASELINE {
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

/// The ratio of metric `key`'s median in engine row `label` of `mode` to the engine baseline's (NaN when
/// either is missing).
fn engine_ratio(rows: &[Report], mode: &str, label: &str, key: &str) -> f64 {
    let med = |r: Option<&Report>| r.and_then(|r| r.metric(key)).map_or(f64::NAN, |s| s.median);
    med(find_row(rows, "engine", mode, label)) / med(find_row(rows, "engine", mode, BASELINE))
}

/// The grid's targets (module docs) for the engine modes named `modes`, judged on the `bench.contention`
/// reports `rows`: a row missing from `rows` is not measured.
pub fn targets(modes: &[&str], rows: &[Report]) -> Vec<Judged> {
    let mut out = Vec::new();
    for &mode in modes.iter().filter(|m| SCALABLE_MODES.contains(m)) {
        for pf in PROCFILES {
            for busy in ["", " + 1 busy B=2"] {
                let label = format!("{}, 1 scanner{busy}", pf.name());
                out.push(Judged::at_most(
                    format!("engine {mode}, {label}: mean call over the baseline's"),
                    engine_ratio(rows, mode, &label, "call_mean_ms"),
                    MAX_MEAN_RATIO,
                ));
            }
        }
    }
    if modes.contains(&"lockless") {
        for pf in PROCFILES {
            let label = format!("{}, 1 scanner + 1 busy B=0", pf.name());
            out.push(Judged::at_most(
                format!("engine lockless, {label}: worst call over the baseline's worst"),
                engine_ratio(rows, "lockless", &label, "call_max_ms"),
                MAX_STARVED_MAX_RATIO,
            ));
        }
    }
    if modes.contains(&"mmap-lock") {
        let label = "smaps_rollup, 1 scanner + 1 busy B=0";
        out.push(Judged::at_least(
            format!("engine mmap-lock, {label}: mean call over the baseline's (the kernel's inversion)"),
            engine_ratio(rows, "mmap-lock", label, "call_mean_ms"),
            MIN_INVERSION_RATIO,
        ));
    }
    out
}

/// The terminal tables: the grid (kernel and every engine mode, per row), then the throughput.
pub fn render_tables(res: &ContentionResults) -> String {
    use vmspace_results::table::{count, ms, render};
    let reports = &res.set.reports;
    let rows: Vec<&Report> = reports.iter().filter(|r| r.benchmark == "bench.contention").collect();
    let mut out = String::new();
    if !rows.is_empty() {
        out.push_str(
            "\nthe mapper's mmap/munmap call latency, ms (medians over the runs); ratios: over the same side's \
             baseline (no scanner, no busy task)\n",
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
                let bmed = |k: &str| base.and_then(|b| b.metric(k)).map_or(f64::NAN, |s| s.median);
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
                    format!("{:.2}x", med("call_mean_ms") / bmed("call_mean_ms")),
                    format!("{:.2}x", med("call_p99_ms") / bmed("call_p99_ms")),
                    format!("{:.2}x", med("call_max_ms") / bmed("call_max_ms")),
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

    fn grid() -> Vec<Config> {
        contention::sweep_grid(&Config::default())
    }

    #[test]
    fn targets_judge_the_ratios_to_the_engine_baseline() {
        let g = grid();
        let mut rows =
            vec![row("engine", "none", &g[0], 0.010, 1.0), row("engine", "none", &g[1], 0.011, 1.2)];
        for c in &g[2..] {
            let starved = c.busy_ms == 0;
            // per-vma: within 1.01x everywhere but smaps alone (1.2x).
            let pv = if c.procfile == ProcFile::Smaps && c.busy == 0 { 0.012 } else { 0.0101 };
            rows.push(row("engine", "per-vma", c, pv, 1.5));
            // mmap-lock: the inversion only with a starved smaps_rollup scanner.
            let ml = if starved && c.procfile == ProcFile::SmapsRollup { 0.2 } else { 0.02 };
            rows.push(row("engine", "mmap-lock", c, ml, 40.0));
            // lockless: worst calls within 2x but for a starved query walk.
            let lmax = if starved && c.procfile == ProcFile::Query { 2.5 } else { 1.9 };
            rows.push(row("engine", "lockless", c, 0.0101, lmax));
        }
        // The kernel's rows are never judged.
        rows.push(row("kernel", "kernel", &g[0], 1.0, 1.0));
        let t = targets(&["mmap-lock", "per-vma", "lockless"], &rows);
        // per-vma 8, lockless 8 + 4, mmap-lock 1.
        assert_eq!(t.len(), 21);
        let missed: Vec<&str> = t.iter().filter(|t| !t.met()).map(|t| t.what.as_str()).collect();
        assert_eq!(
            missed,
            [
                "engine per-vma, smaps, 1 scanner: mean call over the baseline's",
                "engine lockless, query, 1 scanner + 1 busy B=0: worst call over the baseline's worst",
            ]
        );
        let inv = t.iter().find(|t| t.what.contains("inversion")).unwrap();
        assert!((inv.value() - 20.0).abs() < 1e-9 && inv.met(), "{inv:?}");
        // Without the lockless mode its targets are absent, and a missing row is not measured.
        let t = targets(&["mmap-lock", "per-vma"], &rows[..4]);
        assert_eq!(t.len(), 9);
        assert!(t.iter().filter(|t| !t.measured()).count() >= 7, "{t:?}");
        assert!(!t.iter().any(|t| t.what.contains("lockless")));
    }

    #[test]
    fn ratios_are_run_by_run_over_the_baseline_median() {
        let g = grid();
        let b = row("engine", "none", &g[0], 0.01, 2.0);
        let r = row("engine", "per-vma", &g[2], 0.02, 8.0);
        let x = ratio_report(&r, &b);
        assert!((x.metric("mean_ratio").unwrap().median - 2.0).abs() < 1e-9);
        assert!((x.metric("max_ratio").unwrap().median - 4.0).abs() < 1e-9);
        assert_eq!(row_label(&r), "maps, 1 scanner");
        let all = [b.clone(), r.clone()];
        assert!(find_row(&all, "engine", "per-vma", BASELINE).is_some());
        assert!(find_row(&all, "engine", "mmap-lock", "maps, 1 scanner").is_none());
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
