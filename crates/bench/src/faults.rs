//! `vmspace bench faults`: page faults per second on the engine in both fault modes, beside the live kernel,
//! with and without a mapper thread.
//!
//! # Workload
//!
//! The per-VMA lock series' page-fault microbenchmark, on both sides with the same parameters: each of T
//! threads (thread i pinned to the i-th usable CPU, cycled) maps a private anonymous read-write region of its
//! own (16 MiB by default; no address hint, `MADV_NOHUGEPAGE`), writes one byte into every page, and unmaps it,
//! again and again until the run's time is up; it counts the pages it wrote. Every write is a real page fault:
//!
//! - **engine**: one [`Mm`] shared by the threads (a fresh one per run, `MmConfig::host()`); `Mm::write` of
//!   one byte (or, with [`EngineAccess::Touch`], `Mm::touch`: the same fault without contents) goes through
//!   the emulated MMU, which refuses the store on a missing PTE, and the 6.18 fault path
//!   ([`Mm::fault`], `arch/x86/mm/fault.c: do_user_addr_fault` → `mm/memory.c: handle_mm_fault`) maps a new
//!   zeroed anonymous page; the store is then retried. The address space's [`FaultMode`] decides the lock: the
//!   VMA's read lock (`lock_vma_under_rcu`, since 6.4; "per-vma") or the mmap read lock for every fault
//!   ("mmap-lock", before 6.4).
//! - **kernel**: the same loop with real `mmap`/stores/`munmap` in this process
//!   (`vmspace_linux::faults::measure`): the live kernel's fault path, with its per-VMA locks.
//!
//! Regions are placed by each side's own `get_unmapped_area` (top-down), so a new region may merge with a
//! neighbour's on both sides, exactly as `mmap` merges; the counters below show what that costs. The threads'
//! regions then usually form one VMA, and every fault of every thread takes that VMA's lock (one reference
//! count, one cache line written by all). With `apart` ([`FaultsConfig::apart`]) thread i maps at its own hint
//! on both sides (`vmspace_linux::faults::Regions::hint`, 1 TiB apart), so each thread has a VMA of its own: the
//! difference between the two runs is what the shared VMA lock costs.
//!
//! With a **mapper**, one more thread (pinned to the CPU after the faulting threads', `usable[T % n]`) maps
//! and unmaps one read-only anonymous page in a loop for as long as they run: read-only so that it never
//! merges with their regions, so each of its calls takes `mmap_lock` for writing without touching their VMAs.
//! Under per-VMA locks the faults should not notice it; under the mmap lock every fault waits for it.
//!
//! # Results
//!
//! One `bench.faults` report per (side, mode, threads, mapper) with one run per sample (runs of all rows are
//! interleaved: sample 1 of every row, then sample 2, ..., so that slow drifts of the machine hit every row
//! alike; before them one unrecorded engine run of at most 0.3 s with the most threads warms the engine's
//! frame table and content buffers up, which the first faults of the process would otherwise pay for). Metrics per run: `faults_per_s` (all threads), `faults_per_s_per_thread` and the slowest and
//! fastest thread, `faults_per_cpu_s_per_thread` (pages written per CPU-second of the faulting threads, from
//! `CLOCK_THREAD_CPUTIME_ID`: what the fault path costs when threads outnumber CPUs or wait), `worker_cpu_share`
//! (the share of the run each faulting thread had a CPU), `worker_wait_share` (engine and memset runs: the share
//! it waited on a run queue for one, from `/proc/thread-self/schedstat`), `map_calls_share` (the share of the run each faulting
//! thread spent in its own `mmap`, `madvise` and `munmap` calls, waits for `mmap_lock` included), with a mapper
//! `mapper_pairs_per_s` and
//! `mapper_cpu_share`; engine runs add the per-VMA-lock counters of the run (`vma_lock_success_count`,
//! `vma_lock_abort_count`, `vma_lock_retry_count`, `vma_lock_miss_count`, as `/proc/vmstat` names them) and
//! the faults by kind (`faults_anon_new_count`, `faults_total_count`), and `regions_in_a_shared_vma_share`: the
//! share of the threads' regions that were part of a larger VMA (merged with a neighbour's) when their thread
//! finished writing them. The live kernel's counters are in
//! `/proc/vmstat` only with `CONFIG_PER_VMA_LOCK_STATS`; when they are there, kernel runs carry their growth
//! over the run too (system-wide).
//!
//! # Targets
//!
//! Two more sides measure this machine's ceilings in the same run, without the mapper: **separate spaces**
//! ([`Side::EngineSeparate`]: the engine loop with each thread in an address space of its own, nothing shared)
//! and **memset** ([`Side::Memset`]: threads clearing the same number of pages of their own with `memset`, the
//! bound memory bandwidth sets on faults that zero their pages).
//!
//! [`targets`] judges: with per-VMA locks, T threads fault at least [`SCALING_PER_THREAD`] T times one
//! thread's rate (1.9x at two threads), or, without the mapper, at least 95% of the ceiling's scaling when that
//! is lower ([`goal_at`]: the separate spaces', and with `--access write` memset's too, each counted only when
//! its one-thread run had a CPU of its own), without and with the mapper; with the mapper, the mmap-lock mode reaches
//! at most [`MMAP_LOCK_WITH_MAPPER`]x the per-VMA mode's rate (visibly worse); one engine thread faults at least
//! [`ENGINE_OVER_KERNEL`]x as fast as one kernel thread. `vmspace report` judges the same goals (the constants
//! below) run by run.
//!
//! A scaling (T threads over one) says something only when each thread had a CPU of its own. [`scaling_check`]
//! makes a scaling target **not measurable** here, with the measured reason, when the one-thread baseline did
//! not have one: more runnable threads (the faulting thread and the mapper) than usable CPUs, a CPU share
//! (`worker_cpu_share`) below [`MIN_CPU_SHARE`], or, with the mapper, a rate below [`MIN_BASELINE_SHARE`] of the
//! same side's one-thread rate without it (the mapper took the thread's CPU or its lock; a scaling over such a
//! baseline only says how much less the mapper could take from more threads: 2.28x "met" over a baseline at
//! 21% of its own rate without the mapper). When the T-thread run lacked CPUs (T threads and the mapper
//! outnumber the usable CPUs, or its threads waited on a run queue more than `1 - MIN_CPU_SHARE` of the run;
//! where that wait is unknown, as on the kernel's side, a CPU share below [`MIN_CPU_SHARE`]: time blocked on
//! `mmap_lock` is part of what a scaling measures, time kept from a CPU is not), a miss or an undecided verdict is not
//! measurable either (a met stands: the threads scaled all the same), except a miss so deep that the run would
//! miss even with all its CPU time (the interval's upper end divided by the CPU share, when the threads did not
//! outnumber the CPUs): that miss stands, with the scaled figure in its note. The same holds for the mmap-lock mode
//! against the per-VMA mode with the mapper when the threads and the mapper outnumber the CPUs ([`mode_check`]).

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vmspace_linux::faults::{Regions, thread_cpu_s};
use vmspace_mm::{Advice, FaultMode, MapFlags, Mm, MmConfig, MmFaultStats, PAGE_SIZE, Prot};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Placement, Report, ReportSet};

use crate::judge::{Goal, Judged, Status};
use crate::measure::{Cpus, SchedClock};

/// With per-VMA locks, T threads must fault at least this times T times one thread's rate (the same mapper or
/// none).
pub const SCALING_PER_THREAD: f64 = 0.95;

/// With the mapper, the mmap-lock mode's faults per second over the per-VMA mode's must be at most this (visibly
/// worse), at every thread count.
pub const MMAP_LOCK_WITH_MAPPER: f64 = 0.9;

/// One engine thread (per-VMA locks, no mapper) must fault at least this times as fast as one kernel thread.
pub const ENGINE_OVER_KERNEL: f64 = 3.0;

/// A faulting thread that was on a CPU for less than this share of its run did not have a CPU of its own
/// ([`scaling_check`]); the same bound as every other rate's ([`crate::judge::MIN_CPU_SHARE`]).
pub const MIN_CPU_SHARE: f64 = crate::judge::MIN_CPU_SHARE;

/// A one-thread run with the mapper slower than this fraction of the same side's one-thread rate without it was
/// starved by the mapper and is no baseline for a scaling ([`scaling_check`]).
pub const MIN_BASELINE_SHARE: f64 = 0.5;

/// What a scaling target needs to know of one measured point (a side at a thread count, with or without the
/// mapper): medians over its runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointFacts {
    /// Faulting threads.
    pub threads: usize,
    /// Whether the mapper ran beside them.
    pub mapper: bool,
    /// The usable CPUs of the run (0: unknown).
    pub cpus: usize,
    /// Faults per second, all threads (median).
    pub faults_per_s: f64,
    /// The share of the run each faulting thread was on a CPU (median of `worker_cpu_share`; NaN: unknown).
    pub cpu_share: f64,
    /// The share of the run each faulting thread waited on a run queue for a CPU (median of
    /// `worker_wait_share`; NaN: unknown, as on the kernel's side).
    pub wait_share: f64,
}

impl PointFacts {
    /// The facts of report `r` (a `bench.faults` report or a report experiment's side at one point).
    pub fn of(r: &Report) -> PointFacts {
        let med = |m: &str| r.metric(m).map_or(f64::NAN, |s| s.median);
        PointFacts {
            threads: r.parameters.get("threads").and_then(serde_json::Value::as_u64).unwrap_or(1) as usize,
            mapper: r.parameters.get("mapper").and_then(serde_json::Value::as_bool).unwrap_or(false),
            cpus: r.host.cpus_usable.len(),
            faults_per_s: med("faults_per_s"),
            cpu_share: med("worker_cpu_share"),
            wait_share: med("worker_wait_share"),
        }
    }

    /// Threads that wanted a CPU at once: the faulting threads and the mapper.
    pub fn runnable(&self) -> usize {
        self.threads + usize::from(self.mapper)
    }

    /// `3 runnable threads (2 faulting and the mapper) on 2 usable CPUs` when they outnumber the CPUs.
    fn oversubscribed(&self) -> Option<String> {
        (self.cpus > 0 && self.runnable() > self.cpus).then(|| {
            format!(
                "{} runnable threads ({} faulting{}) on {} usable CPU{}",
                self.runnable(),
                self.threads,
                if self.mapper { " and the mapper" } else { "" },
                self.cpus,
                if self.cpus == 1 { "" } else { "s" }
            )
        })
    }

    /// `on a CPU 62% of its run` when below [`MIN_CPU_SHARE`].
    fn short_of_cpu(&self) -> Option<String> {
        (self.cpu_share < MIN_CPU_SHARE).then(|| {
            format!(
                "on a CPU only {:.0}% of the run (the rest waiting for a CPU or blocked)",
                100.0 * self.cpu_share
            )
        })
    }
}

/// Why the one-thread run `base` is no baseline for a scaling (module docs), `None` when it had a CPU of its
/// own; `alone` is the same side's one-thread run without the mapper (for a baseline with the mapper).
pub fn baseline_unsound(base: &PointFacts, alone: Option<&PointFacts>) -> Option<String> {
    let what =
        if base.mapper { "the one-thread baseline (with the mapper)" } else { "the one-thread baseline" };
    if let Some(o) = base.oversubscribed() {
        return Some(format!("{what} had {o}"));
    }
    if let Some(c) = base.short_of_cpu() {
        return Some(format!("{what} was {c}"));
    }
    if base.mapper
        && let Some(a) = alone.filter(|a| !a.mapper && a.faults_per_s.is_finite() && a.faults_per_s > 0.0)
        && base.faults_per_s < MIN_BASELINE_SHARE * a.faults_per_s
    {
        use vmspace_results::table::count;
        return Some(format!(
            "{what} ran at {} faults/s, {:.0}% of the same side's {} without the mapper: the mapper starved it",
            count(base.faults_per_s),
            100.0 * base.faults_per_s / a.faults_per_s,
            count(a.faults_per_s)
        ));
    }
    None
}

/// Why the T-thread run `many` could not show a scaling (its threads did not each have a CPU), `None` when it
/// could. Where the run's wait for a CPU is known (`worker_wait_share`), only that wait counts: time its
/// threads spent blocked (on `mmap_lock`, behind each other's calls) is what the scaling measures, not a
/// machine that withheld CPUs. Elsewhere (the kernel's side) time off a CPU counts whatever kept it off.
pub fn many_unsound(many: &PointFacts) -> Option<String> {
    let what = format!("the {}-thread run", many.threads);
    if let Some(o) = many.oversubscribed() {
        return Some(format!("{what} had {o}"));
    }
    if many.wait_share.is_finite() {
        return (many.wait_share > 1.0 - MIN_CPU_SHARE)
            .then(|| format!("{what} waited for a CPU {:.0}% of the run", 100.0 * many.wait_share));
    }
    many.short_of_cpu().map(|c| format!("{what} was {c}"))
}

/// A scaling target `j` (T threads over one, same side and mapper) checked against what the machine allowed
/// (module docs): not measurable when the baseline `base` did not have a CPU of its own, or when `many` lacked
/// CPUs and `j` is not met. `alone`: the same side's one-thread run without the mapper.
pub fn scaling_check(
    j: Judged,
    base: Option<&PointFacts>,
    alone: Option<&PointFacts>,
    many: Option<&PointFacts>,
) -> Judged {
    if let Some(why) = base.and_then(|b| baseline_unsound(b, alone)) {
        return j.not_measurable(why);
    }
    if j.status != Status::Met
        && let Some(m) = many
        && let Some(why) = many_unsound(m)
    {
        if let Some(best) = scaled_to_full_cpu(&j, m) {
            // Short of CPU time but not oversubscribed: the lost time cannot explain a miss this deep.
            let mut j = j;
            j.note = format!(
                "missed even scaled to full CPU time: at most {best:.2}x had each thread been on a CPU the whole run                  ({why})"
            );
            return j;
        }
        return j.not_measurable(why);
    }
    j
}

/// For a missed "at least" scaling `j` whose T-thread run `many` had no more runnable threads than CPUs but
/// was on a CPU only part of the run: the interval's upper end divided by that share (the most the run could
/// have reached with all its CPU time), when even that misses the goal. `None` otherwise.
fn scaled_to_full_cpu(j: &Judged, many: &PointFacts) -> Option<f64> {
    if j.status != Status::Missed || many.oversubscribed().is_some() {
        return None;
    }
    let goal = match j.goal {
        Goal::AtLeast(g) | Goal::Above(g) => g,
        Goal::AtMost(_) | Goal::NoFailures => return None,
    };
    let share = many.cpu_share;
    let best = j.interval.as_ref()?.high / share;
    (share.is_finite() && share > 0.0 && best < goal).then_some(best)
}

/// A comparison of the two engine modes at one point with the mapper (`j`, mmap-lock over per-VMA) checked
/// against what the machine allowed: when the faulting threads and the mapper outnumbered the usable CPUs
/// (`per_vma`: the per-VMA side's facts there), the mapper took a faulting thread's CPU in the per-VMA mode
/// while it waits for the lock in the other, so a miss or an undecided verdict says nothing of the locks: not
/// measurable here. A met stands.
pub fn mode_check(j: Judged, per_vma: Option<&PointFacts>) -> Judged {
    if j.status != Status::Met
        && let Some(o) = per_vma.and_then(PointFacts::oversubscribed)
    {
        return j.not_measurable(format!(
            "the {}-thread runs had {o}: the mapper took a faulting thread's CPU",
            per_vma.map_or(0, |f| f.threads)
        ));
    }
    j
}

/// The longest unrecorded warm-up run ([`warm_up`]).
pub const WARM_UP: Duration = Duration::from_millis(300);

/// Where and how a row faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The engine, faults under the VMA's read lock.
    EnginePerVma,
    /// The engine, every fault under the mmap read lock.
    EngineMmapLock,
    /// The live kernel.
    Kernel,
    /// The engine with per-VMA locks, each thread in an address space of its own (its own `Mm`, page table
    /// and counters; one `Memory` each): nothing of the fault path is shared, so its scaling is this machine's
    /// ceiling for the per-VMA rows.
    EngineSeparate,
    /// No faults: each thread clears `region` bytes of its own page by page with `memset`, again and again
    /// (`faults_per_s` counts the pages cleared): the bound the machine's memory bandwidth sets on faults that
    /// zero their pages (`--access write`).
    Memset,
}

impl Side {
    /// Every side, in the order of the table.
    pub const ALL: [Side; 5] =
        [Side::EnginePerVma, Side::EngineMmapLock, Side::Kernel, Side::EngineSeparate, Side::Memset];

    /// Whether rows with the mapper exist for this side (the ceilings have none).
    pub fn has_mapper_rows(self) -> bool {
        !matches!(self, Side::EngineSeparate | Side::Memset)
    }

    /// The `side` parameter: `engine`, `kernel` or `memset`.
    pub fn side(self) -> &'static str {
        match self {
            Side::Kernel => "kernel",
            Side::Memset => "memset",
            _ => "engine",
        }
    }

    /// The `mode` parameter: `per-vma`, `mmap-lock` (engine) or `kernel`.
    pub fn mode(self) -> &'static str {
        match self {
            Side::EnginePerVma => "per-vma",
            Side::EngineMmapLock => "mmap-lock",
            Side::Kernel => "kernel",
            Side::EngineSeparate => "separate",
            Side::Memset => "memset",
        }
    }

    /// The engine's fault mode of this side (`None`: the kernel).
    pub fn fault_mode(self) -> Option<FaultMode> {
        match self {
            Side::EnginePerVma => Some(FaultMode::PerVma),
            Side::EngineMmapLock => Some(FaultMode::MmapLock),
            Side::EngineSeparate => Some(FaultMode::PerVma),
            Side::Kernel | Side::Memset => None,
        }
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultsConfig {
    /// Faulting thread counts.
    pub threads: Vec<usize>,
    /// Runs per row.
    pub samples: usize,
    /// Length of one run.
    pub duration: Duration,
    /// Each thread's region, MiB.
    pub region_mib: usize,
    /// Each thread's region at its own hint (module docs).
    pub apart: bool,
    /// The sides measured.
    pub sides: Vec<Side>,
    /// How the engine's threads fault their pages in.
    pub access: EngineAccess,
    /// Whether this is the `--quick` smoke run.
    pub quick: bool,
}

/// How an engine faulting thread accesses each page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineAccess {
    /// `Mm::write` of one byte: the fault maps a new page, whose 4 KiB of contents are zeroed and attached for
    /// the store (the kernel's `clear_page` and store). The default.
    Write,
    /// `Mm::touch` with a write access: the same fault, but the store moves no data, so the page keeps no
    /// contents and nothing is zeroed. Tells the fault path's own cost from the zeroing's.
    Touch,
}

impl EngineAccess {
    /// The `access` parameter.
    pub fn id(self) -> &'static str {
        match self {
            EngineAccess::Write => "write",
            EngineAccess::Touch => "touch",
        }
    }
}

impl FaultsConfig {
    /// The full run: 1 to all usable CPUs, 5 runs of 2 s per row, 16 MiB regions, every side.
    pub fn full(cpus: usize) -> FaultsConfig {
        FaultsConfig {
            threads: (1..=cpus.max(1)).collect(),
            samples: 5,
            duration: Duration::from_secs(2),
            region_mib: 16,
            apart: false,
            sides: Side::ALL.to_vec(),
            access: EngineAccess::Write,
            quick: false,
        }
    }

    /// A smoke run: 1 and 2 threads, 1 run of 0.1 s, 2 MiB regions, every side.
    pub fn quick() -> FaultsConfig {
        FaultsConfig {
            threads: vec![1, 2],
            samples: 1,
            duration: Duration::from_millis(100),
            region_mib: 2,
            apart: false,
            sides: Side::ALL.to_vec(),
            access: EngineAccess::Write,
            quick: true,
        }
    }

    /// Checks the parameters (a message for the user when they make no sense).
    pub fn validate(&self) -> Result<(), String> {
        if self.threads.is_empty() || self.threads.iter().any(|&t| t == 0 || t > 1024) {
            return Err("--threads must list counts in 1..=1024".into());
        }
        if self.samples == 0 || self.samples > 10_000 {
            return Err("--samples must be 1..=10000".into());
        }
        if self.duration < Duration::from_millis(10) || self.duration > Duration::from_secs(24 * 3600) {
            return Err("--duration must be between 0.01 s and 24 h".into());
        }
        if self.region_mib == 0 || self.region_mib > 1 << 16 {
            return Err("--region-mib must be 1..=65536".into());
        }
        if self.sides.is_empty() {
            return Err("no side to measure".into());
        }
        Ok(())
    }

    /// The rows, in table order: per thread count, without then with the mapper, each side.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for &threads in &self.threads {
            for mapper in [false, true] {
                for &side in &self.sides {
                    if !mapper || side.has_mapper_rows() {
                        rows.push(Row { side, threads, mapper });
                    }
                }
            }
        }
        rows
    }

    /// Progress steps of [`run`]: one per run of a row.
    pub fn steps(&self) -> u64 {
        (self.rows().len() * self.samples) as u64
    }
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Row {
    /// The side.
    pub side: Side,
    /// Faulting threads.
    pub threads: usize,
    /// Whether a mapper thread runs beside them.
    pub mapper: bool,
}

impl Row {
    /// The report label, e.g. `engine per-vma T=2 +mapper`.
    pub fn label(&self) -> String {
        let side = match self.side {
            Side::Kernel => "kernel".to_string(),
            Side::Memset => "memset".to_string(),
            Side::EngineSeparate => "engine per-vma, separate spaces".to_string(),
            s => format!("engine {}", s.mode()),
        };
        format!("{side} T={}{}", self.threads, if self.mapper { " +mapper" } else { "" })
    }
}

/// What one engine faulting thread did in a run.
struct Worker {
    pages: u64,
    wall_s: f64,
    cpu_s: f64,
    /// Time spent in its own mmap, madvise and munmap calls.
    calls_s: f64,
    /// The share of its regions that were part of a larger VMA when it finished writing them.
    shared_vma: f64,
    /// The share of its run it waited on a run queue for a CPU (`/proc/thread-self/schedstat`; NaN without it).
    wait_share: f64,
}

/// One engine run (module docs): `threads` threads faulting in their own `regions` of one fresh
/// [`Mm`] in `mode` for `duration`, with a mapper thread if `mapper`, each page accessed as `access` says. The
/// metrics of the module docs.
pub fn engine_run(
    cpus: &Cpus,
    threads: usize,
    regions: Regions,
    duration: Duration,
    mode: FaultMode,
    mapper: bool,
    access: EngineAccess,
) -> Result<BTreeMap<String, f64>, String> {
    engine_run_spaces(cpus, threads, regions, duration, mode, mapper, access, false)
}

/// [`engine_run`] with each faulting thread in an address space of its own ([`Side::EngineSeparate`]): the
/// same loop, nothing shared (the mapper, if any, maps in the first thread's).
pub fn engine_run_separate(
    cpus: &Cpus,
    threads: usize,
    regions: Regions,
    duration: Duration,
    access: EngineAccess,
) -> Result<BTreeMap<String, f64>, String> {
    engine_run_spaces(cpus, threads, regions, duration, FaultMode::PerVma, false, access, true)
}

/// [`engine_run`] in one address space shared by the threads, or one each (`separate`).
#[allow(clippy::too_many_arguments)]
fn engine_run_spaces(
    cpus: &Cpus,
    threads: usize,
    regions: Regions,
    duration: Duration,
    mode: FaultMode,
    mapper: bool,
    access: EngineAccess,
    separate: bool,
) -> Result<BTreeMap<String, f64>, String> {
    let region = regions.bytes as u64;
    let spaces: Vec<Mm> =
        (0..if separate { threads } else { 1 }).map(|_| Mm::new(MmConfig::host())).collect();
    for mm in &spaces {
        mm.set_fault_mode(mode);
    }
    let space = |i: usize| &spaces[if separate { i } else { 0 }];
    let mm = &spaces[0];
    let before: Vec<MmFaultStats> = spaces.iter().map(Mm::fault_stats).collect();
    let barrier = Barrier::new(threads + usize::from(mapper));
    // Cleared when the faulting threads are done; Relaxed: a stop flag, nothing is published through it.
    let running = AtomicBool::new(true);
    let anon = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
    type Mapped = Result<(u64, f64, f64), String>;
    let (workers, mapped): (Vec<Result<Worker, String>>, Option<Mapped>) = std::thread::scope(|s| {
        let mapper_handle = mapper.then(|| {
            let (mm, barrier, running) = (mm, &barrier, &running);
            s.spawn(move || -> Mapped {
                cpus.pin(threads);
                barrier.wait();
                let (start, cpu0) = (Instant::now(), thread_cpu_s());
                let mut pairs = 0u64;
                while running.load(Ordering::Relaxed) {
                    let a = mm
                        .mmap(0, PAGE_SIZE, Prot::READ, anon, None, 0)
                        .map_err(|e| format!("engine mapper mmap: {e:?}"))?;
                    mm.munmap(a, PAGE_SIZE).map_err(|e| format!("engine mapper munmap: {e:?}"))?;
                    pairs += 1;
                }
                Ok((pairs, start.elapsed().as_secs_f64(), thread_cpu_s() - cpu0))
            })
        });
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (mm, barrier) = (space(i), &barrier);
                s.spawn(move || -> Result<Worker, String> {
                    cpus.pin(i);
                    barrier.wait();
                    let (start, cpu0, sched) = (Instant::now(), thread_cpu_s(), SchedClock::start());
                    let mut pages = 0u64;
                    let (mut rounds, mut shared) = (0u64, 0u64);
                    let mut calls = Duration::ZERO;
                    while start.elapsed() < duration {
                        let t = Instant::now();
                        let a = mm
                            .mmap(regions.hint(i) as u64, region, Prot::RW, anon, None, 0)
                            .map_err(|e| format!("engine mmap of {region} bytes: {e:?}"))?;
                        mm.madvise(a, region, Advice::NOHUGEPAGE)
                            .map_err(|e| format!("engine madvise: {e:?}"))?;
                        calls += t.elapsed();
                        let mut p = a;
                        while p < a + region {
                            match access {
                                EngineAccess::Write => mm.write(p, &[1]),
                                EngineAccess::Touch => mm.touch(p, vmspace_mm::Access::Write),
                            }
                            .map_err(|at| format!("engine write: {at}"))?;
                            p += PAGE_SIZE;
                        }
                        pages += region / PAGE_SIZE;
                        // Whether the region ended up in a VMA with another region (merged with a neighbour's).
                        rounds += 1;
                        shared += u64::from(mm.vma_at(a).is_some_and(|v| v.start < a || v.end > a + region));
                        let t = Instant::now();
                        mm.munmap(a, region).map_err(|e| format!("engine munmap: {e:?}"))?;
                        calls += t.elapsed();
                    }
                    Ok(Worker {
                        shared_vma: shared as f64 / rounds.max(1) as f64,
                        pages,
                        wall_s: start.elapsed().as_secs_f64(),
                        cpu_s: thread_cpu_s() - cpu0,
                        calls_s: calls.as_secs_f64(),
                        wait_share: sched.share().wait,
                    })
                })
            })
            .collect();
        let workers: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a fault thread panicked".into())))
            .collect();
        running.store(false, Ordering::Relaxed);
        let mapped = mapper_handle.map(|h| h.join().unwrap_or_else(|_| Err("the mapper panicked".into())));
        (workers, mapped)
    });
    let after: Vec<MmFaultStats> = spaces.iter().map(Mm::fault_stats).collect();
    let mut m = BTreeMap::new();
    let (mut total, mut pages, mut cpu_s, mut share, mut calls, mut shared_vma, mut wait) =
        (0.0, 0u64, 0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut slowest, mut fastest) = (f64::INFINITY, 0.0f64);
    for w in workers {
        let w = w?;
        let rate = w.pages as f64 / w.wall_s.max(1e-9);
        total += rate;
        slowest = slowest.min(rate);
        fastest = fastest.max(rate);
        pages += w.pages;
        cpu_s += w.cpu_s;
        share += w.cpu_s / w.wall_s.max(1e-9);
        calls += w.calls_s / w.wall_s.max(1e-9);
        shared_vma += w.shared_vma;
        wait += w.wait_share;
    }
    m.insert("regions_in_a_shared_vma_share".to_string(), shared_vma / threads as f64);
    m.insert("faults_per_s".to_string(), total);
    m.insert("map_calls_share".to_string(), calls / threads as f64);
    m.insert("faults_per_s_per_thread".to_string(), total / threads as f64);
    m.insert("faults_per_s_slowest_thread".to_string(), slowest);
    m.insert("faults_per_s_fastest_thread".to_string(), fastest);
    m.insert("faults_per_cpu_s_per_thread".to_string(), pages as f64 / cpu_s.max(1e-9));
    m.insert("worker_cpu_share".to_string(), share / threads as f64);
    if wait.is_finite() {
        m.insert("worker_wait_share".to_string(), wait / threads as f64);
    }
    if let Some(mapped) = mapped {
        let (pairs, wall, cpu) = mapped?;
        m.insert("mapper_pairs_per_s".to_string(), pairs as f64 / wall.max(1e-9));
        m.insert("mapper_cpu_share".to_string(), cpu / wall.max(1e-9));
    }
    for (b, a) in before.iter().zip(&after) {
        counters(&mut m, b, a);
    }
    let new: u64 = before.iter().zip(&after).map(|(b, a)| a.faults.anon_new - b.faults.anon_new).sum();
    if new != pages {
        return Err(format!("{pages} pages written but {new} anonymous pages faulted in"));
    }
    Ok(m)
}

/// The counters of the run (module docs) into `m`.
fn counters(m: &mut BTreeMap<String, f64>, before: &MmFaultStats, after: &MmFaultStats) {
    let mut add = |k: &str, v: u64| *m.entry(k.to_string()).or_insert(0.0) += v as f64;
    let (b, a) = (&before.vma_lock, &after.vma_lock);
    add("vma_lock_success_count", a.success - b.success);
    add("vma_lock_abort_count", a.abort - b.abort);
    add("vma_lock_retry_count", a.retry - b.retry);
    add("vma_lock_miss_count", a.miss - b.miss);
    let (b, a) = (&before.faults, &after.faults);
    add("faults_anon_new_count", a.anon_new - b.anon_new);
    let all = |f: &vmspace_mm::FaultStats| {
        f.anon_zero
            + f.anon_new
            + f.read
            + f.cow
            + f.shared
            + f.wp_reuse
            + f.wp_copy
            + f.wp_shared
            + f.spurious
    };
    add("faults_total_count", all(a) - all(b));
}

/// One [`Side::Memset`] run: `threads` threads (pinned as the faulting threads are), each clearing a buffer of
/// `regions.bytes` bytes of its own page by page with `memset` until `duration` is up, the buffer taken from the
/// system once per run and cleared whole before the clock starts (its pages exist: what is measured is the
/// clearing, as the engine's content buffers are recycled). Metrics: `faults_per_s` (pages cleared per second,
/// all threads), `faults_per_s_per_thread`, `faults_per_cpu_s_per_thread`, `worker_cpu_share`.
pub fn memset_run(
    cpus: &Cpus,
    threads: usize,
    regions: Regions,
    duration: Duration,
) -> Result<BTreeMap<String, f64>, String> {
    let page = PAGE_SIZE as usize;
    let pages = (regions.bytes / page).max(1);
    let barrier = Barrier::new(threads);
    let results: Vec<(u64, f64, f64, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    cpus.pin(i);
                    let mut buf = vec![1u8; pages * page];
                    barrier.wait();
                    let (start, cpu0, sched) = (Instant::now(), thread_cpu_s(), SchedClock::start());
                    let mut cleared = 0u64;
                    let mut byte = 0u8;
                    while start.elapsed() < duration {
                        for p in buf.chunks_exact_mut(page) {
                            p.fill(byte);
                            std::hint::black_box(&p[0]);
                        }
                        // A different byte each pass, so that no pass can be skipped as a repeat.
                        byte = byte.wrapping_add(1);
                        cleared += pages as u64;
                    }
                    (cleared, start.elapsed().as_secs_f64(), thread_cpu_s() - cpu0, sched.share().wait)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or((0, 1.0, 0.0, f64::NAN))).collect()
    });
    let (mut total, mut pages_all, mut cpu_s, mut share, mut wait) = (0.0, 0u64, 0.0, 0.0, 0.0);
    for (n, wall, cpu, w) in results {
        if n == 0 {
            return Err("a memset thread cleared nothing".into());
        }
        total += n as f64 / wall.max(1e-9);
        pages_all += n;
        cpu_s += cpu;
        share += cpu / wall.max(1e-9);
        wait += w;
    }
    let mut m = BTreeMap::new();
    if wait.is_finite() {
        m.insert("worker_wait_share".to_string(), wait / threads as f64);
    }
    m.insert("faults_per_s".to_string(), total);
    m.insert("faults_per_s_per_thread".to_string(), total / threads as f64);
    m.insert("faults_per_cpu_s_per_thread".to_string(), pages_all as f64 / cpu_s.max(1e-9));
    m.insert("worker_cpu_share".to_string(), share / threads as f64);
    Ok(m)
}

/// The live kernel's per-VMA-lock counters from `/proc/vmstat` (`CONFIG_PER_VMA_LOCK_STATS`), if it has them.
fn kernel_vma_lock_counters() -> Option<[u64; 4]> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    let get = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    };
    Some([get("vma_lock_success")?, get("vma_lock_abort")?, get("vma_lock_retry")?, get("vma_lock_miss")?])
}

/// One kernel run (`vmspace_linux::faults::measure`), with the kernel's per-VMA-lock counters when it has them.
fn kernel_run(
    cpus: &Cpus,
    threads: usize,
    regions: Regions,
    duration: Duration,
    mapper: bool,
) -> Result<BTreeMap<String, f64>, String> {
    let before = kernel_vma_lock_counters();
    let mut m = vmspace_linux::faults::measure(threads, &cpus.usable, regions, duration, mapper)
        .map_err(|e| format!("kernel faults: {e:#}"))?;
    if let (Some(b), Some(a)) = (before, kernel_vma_lock_counters()) {
        for (i, name) in ["success", "abort", "retry", "miss"].iter().enumerate() {
            m.insert(format!("vma_lock_{name}_count"), a[i].saturating_sub(b[i]) as f64);
        }
    }
    Ok(m)
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct FaultsResults {
    /// Every report: the rows, then one `bench.faults.target` per target.
    pub set: ReportSet,
    /// The rows' reports, in [`FaultsConfig::rows`] order.
    pub rows: Vec<(Row, Report)>,
    /// The judged targets.
    pub targets: Vec<Judged>,
    /// Whether the run stopped early (the reports hold the samples measured before).
    pub interrupted: bool,
}

/// Runs `vmspace bench faults`: every row's sample 1, then every row's sample 2, ...; `progress` is called
/// after each run of a row ([`FaultsConfig::steps`] in all); the run stops early when `stop` answers true.
pub fn run(
    cfg: &FaultsConfig,
    progress: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
    command: &str,
) -> Result<FaultsResults, String> {
    cfg.validate()?;
    // Host facts first: discovering the CPUs pins this thread, which would narrow the affinity mask they report.
    let host = vmspace_linux::hostinfo::gather();
    let cpus = Cpus::discover();
    let region = Regions { bytes: cfg.region_mib << 20, apart: cfg.apart };
    let kernel_counters = kernel_vma_lock_counters().is_some();
    let mut rows: Vec<(Row, Report)> = cfg
        .rows()
        .into_iter()
        .map(|row| {
            let mut r = row_report(cfg, row, &host, &cpus);
            if row.side == Side::Kernel && !kernel_counters {
                r.notes.push(
                    "the kernel's per-VMA-lock counters are not in /proc/vmstat (CONFIG_PER_VMA_LOCK_STATS off)"
                        .into(),
                );
            }
            (row, r)
        })
        .collect();
    if cfg.sides.iter().any(|s| s.fault_mode().is_some()) {
        let most = cfg.threads.iter().copied().max().unwrap_or(1);
        warm_up(&cpus, most, region, cfg.duration, cfg.access)?;
    }
    let mut interrupted = false;
    'samples: for _ in 0..cfg.samples {
        for (row, r) in rows.iter_mut() {
            if stop() {
                interrupted = true;
                break 'samples;
            }
            let m = match (row.side, row.side.fault_mode()) {
                (Side::EngineSeparate, _) => {
                    engine_run_separate(&cpus, row.threads, region, cfg.duration, cfg.access)?
                }
                (Side::Memset, _) => memset_run(&cpus, row.threads, region, cfg.duration)?,
                (_, Some(mode)) => {
                    engine_run(&cpus, row.threads, region, cfg.duration, mode, row.mapper, cfg.access)?
                }
                (_, None) => kernel_run(&cpus, row.threads, region, cfg.duration, row.mapper)?,
            };
            r.push_run(m);
            progress(&r.label);
        }
    }
    for (_, r) in rows.iter_mut() {
        r.summarise();
    }
    let targets = targets(cfg, &rows);
    let mut reports: Vec<Report> = rows.iter().map(|(_, r)| r.clone()).collect();
    reports.extend(targets.iter().map(|t| t.report("bench.faults.target", &host)));
    Ok(FaultsResults { set: ReportSet::new(command, reports), rows, targets, interrupted })
}

/// The `bench.faults` report of `row` under `cfg`, without runs: its parameters (`side`, `mode`, `threads`,
/// `mapper`, `region_mib`, `regions_apart`, `samples`, `duration_s`, `madvise`, `access`, `quick`), its placement on `cpus` and
/// the CPUs' notes. Push one [`engine_run`] (or kernel run) per sample, then summarise it.
pub fn row_report(cfg: &FaultsConfig, row: Row, host: &HostInfo, cpus: &Cpus) -> Report {
    let mut r = Report::new("bench.faults", row.label(), host.clone());
    r.param("side", row.side.side());
    r.param("mode", row.side.mode());
    r.param("threads", row.threads);
    r.param("mapper", row.mapper);
    r.param("region_mib", cfg.region_mib);
    r.param("regions_apart", cfg.apart);
    r.param("samples", cfg.samples);
    r.param("duration_s", cfg.duration.as_secs_f64());
    r.param("madvise", "MADV_NOHUGEPAGE");
    r.param(
        "access",
        match row.side {
            Side::Kernel => "write",
            Side::Memset => "memset",
            _ => cfg.access.id(),
        },
    );
    r.param("quick", cfg.quick);
    r.placement = placement(cpus, row.threads, row.mapper);
    r.notes.extend(cpus.notes.iter().cloned());
    if let Some(n) = cpus.sharing_note(row.threads + usize::from(row.mapper)) {
        r.notes.push(format!("{n} (the mapper counts as a thread)"));
    }
    r
}

/// The unrecorded warm-up run before the engine's rows: per-VMA locks, `threads` threads, no mapper, for at most
/// [`WARM_UP`] (`duration` if shorter). The first engine faults of the process grow the frame table and take
/// content buffers from the system allocator, which later runs reuse; without it the first row measured pays
/// for them.
pub fn warm_up(
    cpus: &Cpus,
    threads: usize,
    region: Regions,
    duration: Duration,
    access: EngineAccess,
) -> Result<(), String> {
    engine_run(cpus, threads, region, duration.min(WARM_UP), FaultMode::PerVma, false, access).map(drop)
}

/// Who runs where: the faulting threads on `usable[i]`, the mapper on `usable[threads]` (cycled).
fn placement(cpus: &Cpus, threads: usize, mapper: bool) -> Vec<Placement> {
    let mut p = cpus.placement(&["thread"], threads);
    if mapper {
        p.push(Placement {
            role: "mapper".into(),
            index: 0,
            cpu: cpus.pinning.then(|| cpus.cpu_of(threads)),
            nice: 0,
        });
    }
    p
}

/// The median of `metric` in the row `(side, threads, mapper)`, NaN when it was not measured.
pub fn median_of(rows: &[(Row, Report)], side: Side, threads: usize, mapper: bool, metric: &str) -> f64 {
    rows.iter()
        .find(|(r, _)| *r == Row { side, threads, mapper })
        .and_then(|(_, r)| r.metric(metric))
        .map_or(f64::NAN, |s| s.median)
}

/// The targets (module docs), judged on the medians of the rows.
pub fn targets(cfg: &FaultsConfig, rows: &[(Row, Report)]) -> Vec<Judged> {
    let total = |side, t, mapper| median_of(rows, side, t, mapper, "faults_per_s");
    let mut out = Vec::new();
    let more: Vec<usize> = cfg.threads.iter().copied().filter(|&t| t > 1).collect();
    let more = if more.is_empty() { vec![2] } else { more };
    let facts = |t: usize, mapper: bool| {
        rows.iter()
            .find(|(r, _)| *r == Row { side: Side::EnginePerVma, threads: t, mapper })
            .map(|(_, r)| PointFacts::of(r))
    };
    for mapper in [false, true] {
        for &t in &more {
            let ratio = total(Side::EnginePerVma, t, mapper) / total(Side::EnginePerVma, 1, mapper);
            let (goal, why) =
                if mapper { (SCALING_PER_THREAD * t as f64, String::new()) } else { goal_at(cfg, rows, t) };
            let j = Judged::at_least(
                format!(
                    "engine per-vma: {t} threads' faults/s over 1 thread's{}{why}",
                    if mapper { ", with the mapper" } else { "" }
                ),
                ratio,
                goal,
            );
            let (base, alone, many) = (facts(1, mapper), facts(1, false), facts(t, mapper));
            out.push(scaling_check(j, base.as_ref(), alone.as_ref(), many.as_ref()));
        }
    }
    for &t in &cfg.threads {
        let ratio = total(Side::EngineMmapLock, t, true) / total(Side::EnginePerVma, t, true);
        let j = Judged::at_most(
            format!("engine with the mapper, T={t}: mmap-lock faults/s over per-vma faults/s"),
            ratio,
            MMAP_LOCK_WITH_MAPPER,
        );
        out.push(mode_check(j, facts(t, true).as_ref()));
    }
    out.push(Judged::at_least(
        "one thread: engine per-vma faults/s over the kernel's",
        total(Side::EnginePerVma, 1, false) / total(Side::Kernel, 1, false),
        ENGINE_OVER_KERNEL,
    ));
    out
}

/// The scaling goal of the per-VMA rows without the mapper at `t` threads (module docs, "Targets"): 0.95 t, or
/// 95% of this machine's ceiling measured in the same run when that is lower: the scaling of the separate
/// address spaces ([`Side::EngineSeparate`]) and, when the faults zero their pages (`--access write`), of
/// `memset` ([`Side::Memset`]). A ceiling counts only when its one-thread run had a CPU of its own
/// ([`baseline_unsound`]). Also the words that say which goal it is (empty for 0.95 t).
pub fn goal_at(cfg: &FaultsConfig, rows: &[(Row, Report)], t: usize) -> (f64, String) {
    let full = SCALING_PER_THREAD * t as f64;
    let scaling = |side: Side| {
        let facts = |n: usize| {
            rows.iter()
                .find(|(r, _)| *r == Row { side, threads: n, mapper: false })
                .map(|(_, r)| PointFacts::of(r))
        };
        let (one, many) = (facts(1)?, facts(t)?);
        if baseline_unsound(&one, None).is_some() || many_unsound(&many).is_some() {
            return None;
        }
        let s = many.faults_per_s / one.faults_per_s;
        s.is_finite().then_some((side, s))
    };
    let mut ceilings = vec![scaling(Side::EngineSeparate)];
    if cfg.access == EngineAccess::Write {
        ceilings.push(scaling(Side::Memset));
    }
    match ceilings.into_iter().flatten().min_by(|a, b| a.1.total_cmp(&b.1)) {
        Some((side, c)) if SCALING_PER_THREAD * c < full => {
            let what = if side == Side::Memset { "memset's" } else { "separate address spaces'" };
            (SCALING_PER_THREAD * c, format!(" (goal: 95% of {what} {c:.2}x in this run)"))
        }
        _ => (full, String::new()),
    }
}

/// The cell of a per-thread "vs T=1" percentage whose one-thread run was no baseline ([`baseline_unsound`]).
pub const STARVED_CELL: &str = "T=1 starved";

/// The terminal table. Its "vs T=1" columns are a row's per-thread rate over the same side's one-thread rate
/// (same mapper), [`STARVED_CELL`] where that one-thread run did not have a CPU of its own.
pub fn render_table(res: &FaultsResults) -> String {
    use vmspace_results::table::{count, render};
    let mut rows = Vec::new();
    for (row, r) in &res.rows {
        let s = r.metric("faults_per_s").copied();
        let med = |k: &str| r.metric(k).map_or(f64::NAN, |s| s.median);
        let base = median_of(&res.rows, row.side, 1, row.mapper, "faults_per_s_per_thread");
        let cpu_base = median_of(&res.rows, row.side, 1, row.mapper, "faults_per_cpu_s_per_thread");
        // A per-thread rate over a 1-thread run that did not have a CPU of its own says nothing of scaling.
        let facts = |t: usize, mapper: bool| {
            res.rows
                .iter()
                .find(|(x, _)| *x == Row { side: row.side, threads: t, mapper })
                .map(|(_, r)| PointFacts::of(r))
        };
        let starved = row.threads > 1
            && facts(1, row.mapper).and_then(|b| baseline_unsound(&b, facts(1, false).as_ref())).is_some();
        let vs = |v: f64, b: f64| {
            if starved { STARVED_CELL.to_string() } else { format!("{:.0}%", 100.0 * v / b) }
        };
        let counters = if r.metric("vma_lock_success_count").is_some() {
            format!(
                "{}/{}/{}/{}",
                count(med("vma_lock_success_count")),
                count(med("vma_lock_abort_count")),
                count(med("vma_lock_retry_count")),
                count(med("vma_lock_miss_count"))
            )
        } else {
            "n/a".to_string()
        };
        rows.push(vec![
            r.label.clone(),
            s.map(|s| count(s.median)).unwrap_or_default(),
            s.map(|s| format!("{}-{}", count(s.min), count(s.max))).unwrap_or_default(),
            count(med("faults_per_s_per_thread")),
            vs(med("faults_per_s_per_thread"), base),
            count(med("faults_per_cpu_s_per_thread")),
            vs(med("faults_per_cpu_s_per_thread"), cpu_base),
            format!("{:.0}%", 100.0 * med("worker_cpu_share")),
            r.metric("map_calls_share").map_or_else(|| "-".into(), |s| format!("{:.0}%", 100.0 * s.median)),
            r.metric("regions_in_a_shared_vma_share")
                .map_or_else(|| "-".into(), |s| format!("{:.0}%", 100.0 * s.median)),
            if row.mapper { count(med("mapper_pairs_per_s")) } else { "-".into() },
            counters,
        ]);
    }
    render(
        &[
            "row",
            "faults/s",
            "min-max",
            "per thread",
            "vs T=1",
            "per CPU-s",
            "vs T=1",
            "CPU share",
            "in mmap/munmap",
            "shared VMA",
            "mapper pairs/s",
            "vma_lock success/abort/retry/miss",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(threads: usize, mapper: bool, cpus: usize, rate: f64, share: f64) -> PointFacts {
        PointFacts { threads, mapper, cpus, faults_per_s: rate, cpu_share: share, wait_share: f64::NAN }
    }

    /// A T-thread run off a CPU 18% of the time because its threads waited for each other's `mmap_lock`, not
    /// for a CPU: its miss stands. The same time spent on a run queue makes it not measurable.
    #[test]
    fn time_blocked_on_a_lock_is_not_a_machine_short_of_cpus() {
        let missed = || Judged::at_least("2 threads over 1", 1.45, 1.53);
        let base = facts(2, false, 2, 8_600_000.0, 1.0);
        let base = PointFacts { threads: 1, ..base };
        let blocked = PointFacts { wait_share: 0.01, ..facts(2, false, 2, 12_500_000.0, 0.82) };
        let j = scaling_check(missed(), Some(&base), None, Some(&blocked));
        assert_eq!(j.status, Status::Missed, "{}", j.note);
        let queued = PointFacts { wait_share: 0.18, ..blocked };
        let j = scaling_check(missed(), Some(&base), None, Some(&queued));
        assert_eq!(j.status, Status::NotMeasurable);
        assert!(j.note.contains("waited for a CPU 18% of the run"), "{}", j.note);
        // Unknown wait (the kernel's side): the CPU share decides, as before.
        let unknown = facts(2, false, 2, 12_500_000.0, 0.82);
        let j = scaling_check(missed(), Some(&base), None, Some(&unknown));
        assert!(j.note.contains("on a CPU only 82%"), "{}", j.note);
    }

    /// The trial's case: 2 threads with the mapper "met" 1.9x at 2.28x over a one-thread baseline with the
    /// mapper at 400k faults/s against 1.95M without it.
    #[test]
    fn a_scaling_over_a_starved_baseline_is_not_measurable() {
        let met = || Judged::at_least("2 threads over 1, with the mapper", 2.28, 1.9);
        let alone = facts(1, false, 4, 1_950_000.0, 0.99);
        let starved = facts(1, true, 4, 400_000.0, 0.98);
        let many = facts(2, true, 4, 912_000.0, 0.97);
        let j = scaling_check(met(), Some(&starved), Some(&alone), Some(&many));
        assert_eq!(j.status, Status::NotMeasurable);
        assert!(j.note.contains("400,000 faults/s, 21% of the same side's 1,950,000"), "{}", j.note);
        // A baseline that had its CPU: the verdict stands.
        let fine = facts(1, true, 4, 1_800_000.0, 0.98);
        assert_eq!(scaling_check(met(), Some(&fine), Some(&alone), Some(&many)).status, Status::Met);
        // More runnable threads than CPUs at the baseline: 1 thread and the mapper on 1 CPU.
        let one_cpu = facts(1, true, 1, 1_800_000.0, 0.5);
        let j = scaling_check(met(), Some(&one_cpu), Some(&alone), Some(&many));
        assert!(
            j.note.contains("2 runnable threads (1 faulting and the mapper) on 1 usable CPU"),
            "{}",
            j.note
        );
        // A baseline short of CPU time (another job on the machine), without the mapper too.
        let busy = facts(1, false, 2, 1_000_000.0, 0.6);
        let j = scaling_check(met(), Some(&busy), None, None);
        assert!(j.note.contains("on a CPU only 60%"), "{}", j.note);
        // The T-thread run without CPUs of its own: a miss says nothing, a met stands.
        let crowded = facts(2, true, 2, 1_000_000.0, 0.6);
        let miss = Judged::at_least("2 threads over 1, with the mapper", 1.1, 1.9);
        let j = scaling_check(miss, Some(&fine), Some(&alone), Some(&crowded));
        assert_eq!(j.status, Status::NotMeasurable);
        assert!(
            j.note.contains("3 runnable threads (2 faulting and the mapper) on 2 usable CPUs"),
            "{}",
            j.note
        );
        assert_eq!(scaling_check(met(), Some(&fine), Some(&alone), Some(&crowded)).status, Status::Met);
        // Short of CPU time but not oversubscribed: a miss that the lost time could explain is not measurable,
        // one that misses even scaled to full CPU time stands.
        let short = facts(2, false, 2, 1_000_000.0, 0.85);
        let shallow = Judged::at_least("2 threads over 1", 1.75, 1.9);
        assert_eq!(
            scaling_check(shallow, Some(&fine), Some(&alone), Some(&short)).status,
            Status::NotMeasurable
        );
        let deep = Judged::at_least("2 threads over 1", 1.37, 1.9);
        let j = scaling_check(deep, Some(&fine), Some(&alone), Some(&short));
        assert_eq!(j.status, Status::Missed);
        assert!(j.note.contains("missed even scaled to full CPU time: at most 1.61x"), "{}", j.note);
        // The modes compared with the mapper on too few CPUs: a miss is not measurable, a met stands.
        let worse = || Judged::at_most("mmap-lock over per-vma, T=2 with the mapper", 1.8, 0.9);
        assert_eq!(mode_check(worse(), Some(&crowded)).status, Status::NotMeasurable);
        assert_eq!(mode_check(worse(), Some(&many)).status, Status::Missed);
        let better = Judged::at_most("mmap-lock over per-vma, T=2 with the mapper", 0.4, 0.9);
        assert_eq!(mode_check(better, Some(&crowded)).status, Status::Met);
        // Unknown CPU count and share: nothing to hold against the verdict.
        let unknown = facts(1, false, 0, 1_000_000.0, f64::NAN);
        assert_eq!(scaling_check(met(), Some(&unknown), None, None).status, Status::Met);
    }

    #[test]
    fn engine_runs_fault_every_page_in_both_modes() {
        let cpus = Cpus::discover();
        for mode in [FaultMode::PerVma, FaultMode::MmapLock] {
            let m = engine_run(
                &cpus,
                2,
                Regions { bytes: 1 << 20, apart: false },
                Duration::from_millis(50),
                mode,
                true,
                EngineAccess::Write,
            )
            .unwrap();
            assert!(m["faults_per_s"] > 1000.0, "{m:?}");
            assert_eq!(m["faults_anon_new_count"], m["faults_total_count"], "{m:?}");
            assert!(m["mapper_pairs_per_s"] > 0.0, "{m:?}");
            if mode == FaultMode::PerVma {
                assert!(m["vma_lock_success_count"] > 0.0, "{m:?}");
            } else {
                assert_eq!(m["vma_lock_success_count"], 0.0, "{m:?}");
            }
        }
    }

    #[test]
    fn regions_merge_side_by_side_and_stay_apart_with_hints() {
        let cpus = Cpus::discover();
        let run = |apart| {
            let regions = Regions { bytes: 1 << 20, apart };
            engine_run(
                &cpus,
                2,
                regions,
                Duration::from_millis(50),
                FaultMode::PerVma,
                false,
                EngineAccess::Touch,
            )
            .unwrap()
        };
        assert_eq!(run(true)["regions_in_a_shared_vma_share"], 0.0);
        // Side by side, two regions merge whenever both are mapped at once, which needs the two threads to run at
        // the same time: on a loaded machine one run may not see it, ten in a row do.
        assert!(
            (0..10).any(|_| run(false)["regions_in_a_shared_vma_share"] > 0.0),
            "regions placed side by side never merged"
        );
    }

    #[test]
    fn the_ceilings_run_separate_spaces_and_memset() {
        let cpus = Cpus::discover();
        let regions = Regions { bytes: 1 << 20, apart: false };
        let m =
            engine_run_separate(&cpus, 2, regions, Duration::from_millis(30), EngineAccess::Write).unwrap();
        assert!(m["faults_anon_new_count"] > 0.0, "{m:?}");
        assert_eq!(m["faults_anon_new_count"], m["faults_total_count"], "{m:?}");
        // Nothing shared: no region ever merges with another thread's.
        assert_eq!(m["regions_in_a_shared_vma_share"], 0.0, "{m:?}");
        let m = memset_run(&cpus, 2, regions, Duration::from_millis(30)).unwrap();
        assert!(m["faults_per_s"] > 0.0 && m["worker_cpu_share"] > 0.0, "{m:?}");
    }

    #[test]
    fn touching_faults_every_page_without_contents() {
        let cpus = Cpus::discover();
        let m = engine_run(
            &cpus,
            1,
            Regions { bytes: 1 << 20, apart: true },
            Duration::from_millis(30),
            FaultMode::PerVma,
            false,
            EngineAccess::Touch,
        )
        .unwrap();
        assert!(m["faults_anon_new_count"] > 0.0, "{m:?}");
        assert_eq!(m["faults_anon_new_count"], m["faults_total_count"], "{m:?}");
    }

    #[test]
    fn rows_and_targets_cover_every_configuration() {
        let cfg = FaultsConfig { threads: vec![1, 2, 3], ..FaultsConfig::quick() };
        let rows = cfg.rows();
        // Per thread count: 5 sides without the mapper, 3 with it (the ceilings have no mapper rows).
        assert_eq!(rows.len(), 3 * (5 + 3));
        assert_eq!(rows[0].label(), "engine per-vma T=1");
        assert_eq!(rows[3].label(), "engine per-vma, separate spaces T=1");
        assert_eq!(rows[7].label(), "kernel T=1 +mapper");
        let none: Vec<(Row, Report)> = Vec::new();
        let t = targets(&cfg, &none);
        // 2 and 3 threads with and without the mapper, 3 mmap-lock checks, engine over kernel.
        assert_eq!(t.len(), 4 + 3 + 1);
        assert!(t.iter().all(|t| !t.measured()));
        assert!(FaultsConfig { samples: 0, ..cfg.clone() }.validate().is_err());
        assert!(FaultsConfig { threads: vec![0], ..cfg }.validate().is_err());
    }
}
