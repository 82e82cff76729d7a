//! The proc-vs-map contention experiment (the method of the LPC 2021 talk), natively.
//!
//! # Method
//! * **Mapper** (one process, nice 0, pinned to the mapper CPU): maps a populated private anonymous region
//!   (128 MiB by default), then until the run's duration has passed picks a random page and, 50/50, maps a fresh
//!   page there (`MAP_FIXED`) or unmaps it, timing each call with the monotonic clock into a histogram, and
//!   sleeps 10 µs between calls (one `nanosleep`; the kernel's timer slack makes that longer, as it does for the
//!   the reproducer's `usleep`).
//! * **Scanners** (S processes, nice 15): in a loop, open `/proc/MAPPER/{maps,smaps,smaps_rollup}` and read it to
//!   the end with 128 KiB reads, discarding the text (what `cat FILE > /dev/null` does); or, for `query`, open
//!   `/proc/MAPPER/maps` and walk every VMA with PROCMAP_QUERY (`COVERING_OR_NEXT`, names fetched). One
//!   completed file read or walk counts as one scanner read.
//!   With an **agent** command ([`Config::agent`], `--agent "ps -o pid,rss -p {pid}"`), each scanner instead
//!   runs that command in a loop, `{pid}` replaced by the mapper's pid, through `sh -c` at the scanner's nice
//!   and CPU ([`crate::reader_cost::agent_pass`], the code `kernel reader-cost --agent` runs); one completed
//!   command counts as one scanner read. The scanner leads a process group of its own
//!   ([`child::spawn_group`]) that its commands join, and each command dies with it (`PR_SET_PDEATHSIG`), so
//!   stopping the scanner stops the command it was running. The parent runs the command once before the run
//!   starts: one that fails at once is reported as it failed, before anything is measured.
//! * **Busy tasks** (B processes, nice 0, at most [`MAX_BUSY`]): spin for `busy_ms`, sleep 1 ms, repeat;
//!   `busy_ms = 0` spins forever. They start spinning when the window opens (within [`BUSY_START_POLL`]),
//!   not when they are forked: a thousand tasks spinning while the parent forks the rest made each 1,000-task
//!   run spend minutes in its set-up.
//! * Placement: see [`crate::placement`]. Scanners and busy tasks start first; after a 200 ms warm-up the
//!   parent releases the mapper. The run ends on time: the parent waits for the mapper until the run's length
//!   has passed (and 10 ms), then tells everyone to stop, kills the busy tasks and the scanners (all first,
//!   then reaps them all: [`child::Children`]) and waits for the mapper's last call, which the stopped tasks no
//!   longer hold up. A call still waiting at the end of the run's window (its length and 10 ms) is recorded
//!   as cut there, its latency the time from its start to the window's end (a lower bound of what it would
//!   have waited), and counted in `calls_cut_count`: the time the others take to go (up to seconds with a
//!   thousand busy tasks) is not the scanner's hold, and the worst call stays within the window. The run's
//!   `setup_ms` (fork and placement of every task, the mapper's populated region, the warm-up) and
//!   `teardown_ms` (from the window's end until every task is reaped) say where a row's wall time beyond its
//!   windows goes. A scanner that fails during the run
//!   (a read error, an agent command that exits non-zero) ends the run at once with its error. Only reads
//!   completed while the mapper runs are counted.
//!
//! Metrics per run: calls (`calls_count`, `calls_per_s`), the mapper's call latency (`call_mean_ms`,
//! `call_min_ms`, `call_max_ms`, and `call_<stem>_ms` for every quantile of
//! [`vmspace_results::stats::CDF_QUANTILES`], p1 to p99.999: the run's latency distribution, from which
//! `vmspace report` draws CDFs), failed calls (`mapper_errors_count`), completed scanner reads
//! (`scanner_reads_count`) and whether the run's worst call exceeded 1 s (`worst_over_1s_count`, 0 or 1: the
//! LPC 2021 talk's "hangs", [`crate::talk`]).
//!
//! All coordination goes through a [`SharedSlots`] page: the mapper publishes its statistics there as `f64`
//! bits before exiting, so no pipe or serialisation is needed.

use crate::child::{self, Children, Exit, SharedSlots, check_interrupted, sleep_interruptible};
use crate::hostinfo::HostInfo;
use crate::placement::Layout;
use crate::sys;
use anyhow::{Context, Result, bail};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vmspace_results::report::{Placement, Report};
use vmspace_results::stats::{CDF_QUANTILES, LatencyRecorder};

/// What the scanners read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcFile {
    /// `/proc/PID/maps` text.
    Maps,
    /// `/proc/PID/smaps` text (walks page tables under mmap_lock).
    Smaps,
    /// `/proc/PID/smaps_rollup` text.
    SmapsRollup,
    /// A PROCMAP_QUERY walk of `/proc/PID/maps`.
    Query,
    /// No scanners.
    None,
}

impl ProcFile {
    /// The name used on the command line and in labels.
    pub fn name(self) -> &'static str {
        match self {
            ProcFile::Maps => "maps",
            ProcFile::Smaps => "smaps",
            ProcFile::SmapsRollup => "smaps_rollup",
            ProcFile::Query => "query",
            ProcFile::None => "none",
        }
    }
}

impl std::str::FromStr for ProcFile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "maps" => ProcFile::Maps,
            "smaps" => ProcFile::Smaps,
            "smaps_rollup" | "rollup" => ProcFile::SmapsRollup,
            "query" | "procmap_query" => ProcFile::Query,
            "none" => ProcFile::None,
            _ => return Err(format!("unknown proc file {s:?} (maps, smaps, smaps_rollup, query, none)")),
        })
    }
}

/// One configuration of the experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// What the scanners read (`None`: no scanners, whatever `scanners` says).
    pub procfile: ProcFile,
    /// Number of scanner processes.
    pub scanners: usize,
    /// Number of busy tasks.
    pub busy: usize,
    /// Busy tasks spin this long, then sleep 1 ms; 0 = spin forever.
    pub busy_ms: u64,
    /// The mapper's CPU (default: the first usable CPU).
    pub mapper_cpu: Option<usize>,
    /// The CPUs for scanners and busy tasks (default: all other usable CPUs).
    pub others_cpus: Option<Vec<usize>>,
    /// Runs.
    pub samples: usize,
    /// Length of each run.
    pub duration: Duration,
    /// Size of the mapper's region, in MiB.
    pub region_mib: usize,
    /// Pause between mapper calls, in µs.
    pub pause_us: u64,
    /// A command each scanner runs in a loop instead of reading the proc file (`{pid}`: the mapper's pid);
    /// `procfile` is then ignored (module docs).
    pub agent: Option<String>,
}

/// The most busy tasks a configuration may have (the LPC 2021 talk's table goes to 1,000).
pub const MAX_BUSY: usize = 4096;

/// The scanners' nice value.
pub const SCANNER_NICE: i32 = 15;

/// Busy tasks beyond this many are not listed one by one in a report's placement (a note says where they
/// ran).
const PLACEMENT_LISTED: usize = 64;

impl Default for Config {
    fn default() -> Self {
        Self {
            procfile: ProcFile::Maps,
            scanners: 1,
            busy: 0,
            busy_ms: 2,
            mapper_cpu: None,
            others_cpus: None,
            samples: 5,
            duration: Duration::from_secs(5),
            region_mib: 128,
            pause_us: 10,
            agent: None,
        }
    }
}

impl Config {
    /// The number of scanners that actually run.
    pub fn effective_scanners(&self) -> usize {
        if self.procfile == ProcFile::None && self.agent.is_none() { 0 } else { self.scanners }
    }

    /// What the scanners read: `agent \`COMMAND\`` or the proc file's name.
    pub fn reader(&self) -> String {
        match &self.agent {
            Some(a) => format!("agent `{a}`"),
            None => self.procfile.name().to_string(),
        }
    }

    /// Checks the configuration (bad input is an error, never a panic).
    pub fn validate(&self) -> Result<()> {
        if self.samples == 0 || self.samples > 10_000 {
            bail!("--samples must be 1..=10000");
        }
        if self.duration < Duration::from_millis(10) || self.duration > Duration::from_secs(24 * 3600) {
            bail!("--duration must be between 0.01 s and 24 h");
        }
        if self.scanners > 256 || self.busy > MAX_BUSY {
            bail!("at most 256 scanners and {MAX_BUSY} busy tasks");
        }
        if self.agent.as_deref().is_some_and(|a| a.trim().is_empty()) {
            bail!("--agent is empty");
        }
        if self.region_mib == 0 || self.region_mib > 1 << 20 {
            bail!("--region-mib must be 1..=1048576");
        }
        if self.pause_us > 1_000_000 {
            bail!("--pause-us must be at most 1 s");
        }
        Ok(())
    }

    /// The row label in the LPC 2021 talk's style: `smaps, 1 scanner + 1 busy B=0`.
    pub fn label(&self) -> String {
        let s = self.effective_scanners();
        let busy = if self.busy > 0 { Some(format!("{} busy B={}", self.busy, self.busy_ms)) } else { None };
        match (s, busy) {
            (0, None) => "no scanner, no busy task".to_string(),
            (0, Some(b)) => format!("{b}, no scanner"),
            (s, b) => {
                let sc = format!("{}, {s} scanner{}", self.reader(), if s == 1 { "" } else { "s" });
                match b {
                    Some(b) => format!("{sc} + {b}"),
                    None => sc,
                }
            }
        }
    }
}

/// The proc-vs-map grid (the LPC 2021 talk's experiment, docs/SOURCES.md) around `base`: the no-scanner baseline, busy tasks only (B=0), then for each proc file
/// {scanners only, + busy B=2, + busy B=0}. Scanner and busy counts come from `base` (a busy count of 0 is
/// taken as 1 for the busy rows).
pub fn sweep_grid(base: &Config) -> Vec<Config> {
    let busy = base.busy.max(1);
    let scanners = base.scanners.max(1);
    let mut rows = vec![
        Config { procfile: ProcFile::None, busy: 0, ..base.clone() },
        Config { procfile: ProcFile::None, busy, busy_ms: 0, ..base.clone() },
    ];
    for pf in [ProcFile::Maps, ProcFile::Smaps, ProcFile::SmapsRollup, ProcFile::Query] {
        rows.push(Config { procfile: pf, scanners, busy: 0, ..base.clone() });
        rows.push(Config { procfile: pf, scanners, busy, busy_ms: 2, ..base.clone() });
        rows.push(Config { procfile: pf, scanners, busy, busy_ms: 0, ..base.clone() });
    }
    rows
}

// Shared slot indices.
const MAPPER_READY: usize = 0;
const GO: usize = 1;
const STOP: usize = 2;
const MAPPER_ERRORS: usize = 3;
const RESULT: usize = 4; // count, mean, p50, p99, p999, max: 6 words
const MAPPER_DONE: usize = 10;
const MIN: usize = 11; // the fastest call, ms
const CALLS_CUT: usize = 12; // calls still waiting at the window's end
const QUANTILES: usize = 16; // one word per CDF_QUANTILES entry
const AGENT_MSG: usize = QUANTILES + CDF_QUANTILES.len() + 3; // how the first failed agent command failed
const AGENT_MSG_WORDS: usize = 48; // 384 bytes of text, NUL-padded
const SCANNER_BASE: usize = AGENT_MSG + AGENT_MSG_WORDS; // two words per scanner: reads, errno
/// A scanner's exit code when its agent command failed (its message is in the AGENT_MSG words).
const AGENT_FAILED: i32 = 5;
/// How long after the run's length the parent stops the others (the mapper's clock starts a little later).
const END_SLACK: Duration = Duration::from_millis(10);
/// How long the parent waits for the mapper's last call once the others are stopped.
const LAST_CALL_WAIT: Duration = Duration::from_secs(60);
/// How often a busy task waiting for GO looks (it starts spinning at most this long after the window opens).
pub const BUSY_START_POLL: Duration = Duration::from_millis(5);

/// Runs every sample of `cfg`; `on_sample(i)` is called after sample `i` finishes.
pub fn run(cfg: &Config, host: &HostInfo, on_sample: &mut dyn FnMut(usize)) -> Result<Report> {
    cfg.validate()?;
    let layout = Layout::resolve(&host.cpus_usable, cfg.mapper_cpu, cfg.others_cpus.as_deref())?;
    let mut report = Report::new("kernel.contention", cfg.label(), host.clone());
    report.param("procfile", cfg.procfile);
    report.param("scanners", cfg.effective_scanners());
    report.param("busy", cfg.busy);
    report.param("busy_ms", cfg.busy_ms);
    report.param("samples", cfg.samples);
    report.param("duration_s", cfg.duration.as_secs_f64());
    report.param("region_mib", cfg.region_mib);
    report.param("pause_us", cfg.pause_us);
    if let Some(a) = &cfg.agent {
        report.param("agent", a);
    }
    report.placement.push(Placement { role: "mapper".into(), index: 0, cpu: Some(layout.mapper), nice: 0 });
    for i in 0..cfg.effective_scanners() {
        report.placement.push(Placement {
            role: "scanner".into(),
            index: i,
            cpu: Some(layout.other(i)),
            nice: SCANNER_NICE,
        });
    }
    for i in 0..cfg.busy.min(PLACEMENT_LISTED) {
        report.placement.push(Placement {
            role: "busy".into(),
            index: i,
            cpu: Some(layout.other(i)),
            nice: 0,
        });
    }
    if cfg.busy > PLACEMENT_LISTED {
        report.notes.push(format!(
            "busy tasks {PLACEMENT_LISTED} to {} are placed as the first ones (busy task i on CPU {:?}[i % {}], \
             nice 0) and not listed in the placement",
            cfg.busy - 1,
            layout.others,
            layout.others.len()
        ));
    }
    report.notes.extend(layout.notes.iter().cloned());
    for i in 0..cfg.samples {
        let m = run_once(cfg, &layout)?;
        report.push_run(m);
        on_sample(i);
    }
    report.summarise();
    Ok(report)
}

fn f(slot: &std::sync::atomic::AtomicU64) -> f64 {
    // Acquire: pairs with the mapper's Release stores of its results (and waitpid already ordered them).
    f64::from_bits(slot.load(Ordering::Acquire))
}

fn run_once(cfg: &Config, layout: &Layout) -> Result<BTreeMap<String, f64>> {
    let nscan = cfg.effective_scanners();
    let slots = SharedSlots::new(SCANNER_BASE + 2 * nscan)?;
    let page = sys::page_size();
    let region = cfg.region_mib << 20;
    let (duration, pause) = (cfg.duration, Duration::from_micros(cfg.pause_us));
    let mapper_cpu = layout.mapper;

    let t_setup = Instant::now();
    let mut mapper = child::spawn(|| mapper_main(&slots, mapper_cpu, region, page, duration, pause))
        .context("fork of the mapper")?;
    let t0 = Instant::now();
    // Acquire: pairs with the mapper's Release store of MAPPER_READY after its region is populated.
    while slots.get(MAPPER_READY).load(Ordering::Acquire) == 0 {
        if let Some(e) = mapper.try_wait()? {
            bail!("the mapper exited before it was ready ({e:?}); could it map {} MiB?", cfg.region_mib);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("the mapper did not get ready within 60 s");
        }
        check_interrupted()?;
        std::thread::sleep(Duration::from_millis(1));
    }
    let mapper_pid = mapper.pid().as_raw_nonzero().get();
    if let Some(cmd) = &cfg.agent {
        // One pass by the parent first: a command that fails at once is reported as it failed.
        if let Err((how, stderr)) = crate::reader_cost::agent_pass(cmd, mapper_pid, SCANNER_NICE, None)? {
            bail!("{}", agent_failure(cmd, mapper_pid, &how, &stderr));
        }
    }
    let mut scanners = Children::new();
    let mut busy = Children::new();
    for i in 0..nscan {
        let cpu = layout.other(i);
        let pf = cfg.procfile;
        let c = match &cfg.agent {
            Some(cmd) => child::spawn_group(|| agent_main(&slots, i, cpu, cmd, mapper_pid)),
            None => child::spawn(|| scanner_main(&slots, i, cpu, pf, mapper_pid)),
        };
        scanners.push(c.context("fork of a scanner")?);
    }
    for i in 0..cfg.busy {
        let cpu = layout.other(i);
        let ms = cfg.busy_ms;
        busy.push(child::spawn(|| busy_main(&slots, cpu, ms)).context("fork of a busy task")?);
    }
    sleep_interruptible(Duration::from_millis(200))?;
    // Release: the warm-up is over; the mapper and scanners only need the flag itself.
    slots.get(GO).store(1, Ordering::Release);
    let setup = t_setup.elapsed();
    let end = Instant::now() + cfg.duration + END_SLACK;
    let mut exit = None;
    let mut failed_scanner = None;
    while Instant::now() < end {
        if let Some(e) = mapper.try_wait()? {
            exit = Some(e);
            break;
        }
        for i in 0..nscan {
            // A scanner exits by itself only when it failed (or once the mapper is done, which ends this loop).
            let sc = scanners.get_mut(i);
            if !sc.is_reaped()
                && let Some(e) = sc.try_wait()?
                && e != Exit::Code(0)
            {
                failed_scanner = Some((i, e));
            }
        }
        if failed_scanner.is_some() {
            break;
        }
        check_interrupted()?;
        std::thread::sleep(Duration::from_millis(1));
    }
    // Release: tells the mapper, scanners and busy tasks to stop; the others are also killed right after.
    slots.get(STOP).store(1, Ordering::Release);
    let t_teardown = Instant::now();
    // Relaxed: counters read after STOP; a count off by the reads in flight does not matter.
    let reads: Vec<u64> =
        (0..nscan).map(|i| slots.get(SCANNER_BASE + 2 * i).load(Ordering::Relaxed)).collect();
    busy.stop();
    scanners.stop();
    let exit = match exit {
        Some(e) => e,
        None => {
            let t = Instant::now();
            loop {
                if let Some(e) = mapper.try_wait()? {
                    break e;
                }
                if t.elapsed() > LAST_CALL_WAIT {
                    bail!("the mapper's last call did not return within {LAST_CALL_WAIT:?} of the run's end");
                }
                check_interrupted()?;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    if let Some((i, e)) = failed_scanner {
        if e == Exit::Code(AGENT_FAILED) {
            let cmd = cfg.agent.as_deref().unwrap_or_default();
            // Relaxed: the scanner was reaped (waitpid orders its stores before these loads).
            let bytes: Vec<u8> = (0..AGENT_MSG_WORDS)
                .flat_map(|w| slots.get(AGENT_MSG + w).load(Ordering::Relaxed).to_le_bytes())
                .take_while(|&b| b != 0)
                .collect();
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let (how, stderr) = text.split_once('\n').unwrap_or((&text, ""));
            bail!("{} (scanner {i}, during the run)", agent_failure(cmd, mapper_pid, how, stderr));
        }
        // Relaxed: the scanner was reaped (waitpid orders its store before this load).
        let errno = slots.get(SCANNER_BASE + 2 * i + 1).load(Ordering::Relaxed);
        if errno == 0 {
            bail!("scanner {i} ended during the run: {e:?}");
        }
    }
    if exit != Exit::Code(0) {
        bail!("the mapper failed: {exit:?}");
    }
    for i in 0..nscan {
        // Relaxed: the scanner was reaped above (waitpid orders its stores before this load).
        let errno = slots.get(SCANNER_BASE + 2 * i + 1).load(Ordering::Relaxed);
        if errno != 0 {
            bail!(
                "scanner {i} failed reading {}: {}",
                cfg.procfile.name(),
                rustix::io::Errno::from_raw_os_error(errno as i32)
            );
        }
    }
    let teardown = t_teardown.elapsed();
    let calls = f(slots.get(RESULT));
    let mut m = BTreeMap::new();
    m.insert("setup_ms".to_string(), setup.as_secs_f64() * 1e3);
    m.insert("teardown_ms".to_string(), teardown.as_secs_f64() * 1e3);
    // Relaxed: the mapper was reaped (waitpid orders its store before this load).
    m.insert("calls_cut_count".to_string(), slots.get(CALLS_CUT).load(Ordering::Relaxed) as f64);
    m.insert("calls_count".to_string(), calls);
    m.insert("calls_per_s".to_string(), calls / cfg.duration.as_secs_f64());
    m.insert("call_mean_ms".to_string(), f(slots.get(RESULT + 1)));
    m.insert("call_p50_ms".to_string(), f(slots.get(RESULT + 2)));
    m.insert("call_p99_ms".to_string(), f(slots.get(RESULT + 3)));
    m.insert("call_p999_ms".to_string(), f(slots.get(RESULT + 4)));
    m.insert("call_max_ms".to_string(), f(slots.get(RESULT + 5)));
    m.insert("call_min_ms".to_string(), f(slots.get(MIN)));
    for (i, (_, stem)) in CDF_QUANTILES.iter().enumerate() {
        // p50, p99 and p999 are the same histogram's values as the summary's above.
        m.insert(format!("call_{stem}_ms"), f(slots.get(QUANTILES + i)));
    }
    // Relaxed: the mapper was reaped (waitpid orders its stores before this load).
    m.insert("mapper_errors_count".to_string(), slots.get(MAPPER_ERRORS).load(Ordering::Relaxed) as f64);
    m.insert("scanner_reads_count".to_string(), reads.iter().sum::<u64>() as f64);
    crate::talk::mark_hang(&mut m);
    Ok(m)
}

/// The error of an agent command that failed: the command as run, how it ended, what it said.
fn agent_failure(cmd: &str, pid: i32, how: &str, stderr: &str) -> String {
    let ran = cmd.replace("{pid}", &pid.to_string());
    let said = if stderr.trim().is_empty() { String::new() } else { format!(": {}", stderr.trim()) };
    format!("the agent command `{ran}` failed ({how}){said}")
}

/// Waits for GO (or STOP); returns false on STOP.
fn wait_go(slots: &SharedSlots) -> bool {
    loop {
        // Acquire: pairs with the parent's Release store of GO / STOP.
        if slots.get(STOP).load(Ordering::Acquire) != 0 {
            return false;
        }
        // Acquire: pairs with the parent's Release store of GO.
        if slots.get(GO).load(Ordering::Acquire) != 0 {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn mapper_main(
    slots: &SharedSlots,
    cpu: usize,
    region: usize,
    page: usize,
    duration: Duration,
    pause: Duration,
) -> i32 {
    if sys::pin_to_cpu(cpu).is_err() || sys::set_nice(0).is_err() {
        return 2;
    }
    let rw = sys::prot(true, true, false);
    let Ok(base) = sys::map_anon(region, rw, true) else { return 3 };
    let pages = region / page;
    let mut rng = SmallRng::seed_from_u64(seed());
    // Made before the run: allocated during it, the histogram's mmap would wait for a starved scanner's
    // mmap_lock hold untimed (and a run could end before the first timed call).
    let mut rec = LatencyRecorder::prefaulted();
    // Release: the region is populated; the parent may start the others.
    slots.get(MAPPER_READY).store(1, Ordering::Release);
    if !wait_go(slots) {
        return 0;
    }
    let (mut errors, mut cut) = (0u64, 0u64);
    let start = Instant::now();
    // The window's end (module docs): a call still waiting then is cut there.
    let window_end = start + duration + END_SLACK;
    // Relaxed: STOP is a plain flag here (the parent sets it at the end of the run or when a scanner failed).
    while start.elapsed() < duration && slots.get(STOP).load(Ordering::Relaxed) == 0 {
        let addr = base + rng.random_range(0..pages) * page;
        let map = rng.random_bool(0.5);
        let t = Instant::now();
        // SAFETY: the region belongs to this experiment; nothing holds references into it.
        let r = unsafe { if map { sys::map_fixed(addr, page, rw) } else { sys::unmap(addr, page) } };
        let done = Instant::now();
        let ns = if done > window_end {
            cut += 1;
            window_end.saturating_duration_since(t).as_nanos() as u64
        } else {
            (done - t).as_nanos() as u64
        };
        rec.record(ns);
        if r.is_err() {
            errors += 1;
        }
        if !pause.is_zero() {
            sys::sleep_once(pause);
        }
    }
    // Release: pairs with a scanner's Acquire load after a failed read: once the mapper is done, its /proc files
    // may vanish, and the scanner must not call that a failure.
    slots.get(MAPPER_DONE).store(1, Ordering::Release);
    let s = rec.stats();
    // Relaxed: the parent reads these only after reaping this process (waitpid orders them).
    slots.get(MAPPER_ERRORS).store(errors, Ordering::Relaxed);
    // Relaxed: as above.
    slots.get(CALLS_CUT).store(cut, Ordering::Relaxed);
    for (i, v) in [s.count as f64, s.mean_ms, s.p50_ms, s.p99_ms, s.p999_ms, s.max_ms].into_iter().enumerate()
    {
        // Release: pairs with the parent's Acquire loads in `f`.
        slots.get(RESULT + i).store(v.to_bits(), Ordering::Release);
    }
    // Release (these two): pair with the parent's Acquire loads in `f`.
    slots.get(MIN).store(rec.min_ms().to_bits(), Ordering::Release);
    for (i, &(q, _)) in CDF_QUANTILES.iter().enumerate() {
        slots.get(QUANTILES + i).store(rec.quantile_ms(q).to_bits(), Ordering::Release);
    }
    0
}

/// A per-process random seed (time and pid).
fn seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64);
    t.unwrap_or(1) ^ (u64::from(std::process::id()) << 32)
}

fn scanner_main(slots: &SharedSlots, index: usize, cpu: usize, pf: ProcFile, pid: i32) -> i32 {
    if sys::pin_to_cpu(cpu).is_err() || sys::set_nice(SCANNER_NICE).is_err() {
        return 2;
    }
    let file = match pf {
        ProcFile::Maps | ProcFile::Query => "maps",
        ProcFile::Smaps => "smaps",
        ProcFile::SmapsRollup => "smaps_rollup",
        ProcFile::None => return 0,
    };
    let path = format!("/proc/{pid}/{file}");
    let mut buf = vec![0u8; 128 << 10];
    let mut name = Vec::with_capacity(4096);
    let reads = slots.get(SCANNER_BASE + 2 * index);
    loop {
        // Acquire: pairs with the parent's Release store of STOP.
        if slots.get(STOP).load(Ordering::Acquire) != 0 {
            return 0;
        }
        let r = match pf {
            ProcFile::Query => std::fs::File::open(&path)
                .map_err(|e| rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))
                .and_then(|f| crate::procmap_query::walk_count(&f, &mut name)),
            _ => crate::maps::read_discard(&path, &mut buf),
        };
        if let Err(e) = r {
            // Acquire: pairs with the mapper's Release store of MAPPER_DONE before it exits.
            if slots.get(MAPPER_DONE).load(Ordering::Acquire) != 0 {
                return 0;
            }
            // Relaxed: a lone error word read after STOP.
            slots.get(SCANNER_BASE + 2 * index + 1).store(e.raw_os_error() as u64, Ordering::Relaxed);
            return 3;
        }
        // Relaxed: GO is a plain flag; the count is read by the parent after STOP, a stale count by a few
        // reads does not matter.
        if slots.get(GO).load(Ordering::Relaxed) != 0 {
            reads.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A scanner that runs an agent command in a loop (module docs); exits with [`AGENT_FAILED`] and the failure
/// in the AGENT_MSG words when the command fails while the mapper runs.
fn agent_main(slots: &SharedSlots, index: usize, cpu: usize, cmd: &str, pid: i32) -> i32 {
    if sys::pin_to_cpu(cpu).is_err() || sys::set_nice(SCANNER_NICE).is_err() {
        return 2;
    }
    let reads = slots.get(SCANNER_BASE + 2 * index);
    loop {
        // Acquire: pairs with the parent's Release store of STOP.
        if slots.get(STOP).load(Ordering::Acquire) != 0 {
            return 0;
        }
        match crate::reader_cost::agent_pass(cmd, pid, SCANNER_NICE, Some(cpu)) {
            Ok(Ok(_)) => {
                // Relaxed: as in `scanner_main`.
                if slots.get(GO).load(Ordering::Relaxed) != 0 {
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(Err((how, stderr))) => {
                // Acquire: pairs with the mapper's Release store of MAPPER_DONE (a command reading a mapper that
                // is gone fails, and that is no failure of the command) and the parent's of STOP.
                if slots.get(MAPPER_DONE).load(Ordering::Acquire) != 0
                    || slots.get(STOP).load(Ordering::Acquire) != 0
                {
                    return 0;
                }
                let text = format!("{how}\n{stderr}");
                let mut bytes = text.into_bytes();
                bytes.truncate(AGENT_MSG_WORDS * 8 - 1);
                bytes.resize(AGENT_MSG_WORDS * 8, 0);
                for (w, chunk) in bytes.chunks(8).enumerate() {
                    let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
                    // Relaxed: the parent reads these words only after reaping this process.
                    slots.get(AGENT_MSG + w).store(word, Ordering::Relaxed);
                }
                return AGENT_FAILED;
            }
            Err(_) => return 4,
        }
    }
}

fn busy_main(slots: &SharedSlots, cpu: usize, busy_ms: u64) -> i32 {
    if sys::pin_to_cpu(cpu).is_err() || sys::set_nice(0).is_err() {
        return 2;
    }
    // Spinning starts at GO (module docs): busy tasks that spin while the parent forks the others slow every
    // later fork (2-2.5 minutes for 1,000 of them on a busy 2-CPU machine).
    loop {
        // Acquire (both): pair with the parent's Release stores of STOP and GO.
        if slots.get(STOP).load(Ordering::Acquire) != 0 {
            return 0;
        }
        if slots.get(GO).load(Ordering::Acquire) != 0 {
            break;
        }
        std::thread::sleep(BUSY_START_POLL);
    }
    let spin = Duration::from_millis(busy_ms);
    loop {
        let t = Instant::now();
        while busy_ms == 0 || t.elapsed() < spin {
            // Relaxed: a stop flag polled in a spin loop; the parent also SIGKILLs us.
            if slots.get(STOP).load(Ordering::Relaxed) != 0 {
                return 0;
            }
            std::hint::spin_loop();
        }
        sys::sleep_once(Duration::from_millis(1));
    }
}

/// Ratios of a row's median mean latency and median max latency to the baseline's.
pub fn ratios(row: &Report, baseline: &Report) -> Option<(f64, f64)> {
    let m = |r: &Report, k: &str| r.metric(k).map(|s| s.median);
    Some((
        m(row, "call_mean_ms")? / m(baseline, "call_mean_ms")?,
        m(row, "call_max_ms")? / m(baseline, "call_max_ms")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_labels() {
        assert_eq!("smaps_rollup".parse::<ProcFile>().unwrap(), ProcFile::SmapsRollup);
        assert!("smap".parse::<ProcFile>().is_err());
        let c = Config { procfile: ProcFile::Smaps, busy: 1, busy_ms: 0, ..Config::default() };
        assert_eq!(c.label(), "smaps, 1 scanner + 1 busy B=0");
        let c = Config { procfile: ProcFile::None, busy: 0, ..Config::default() };
        assert_eq!(c.label(), "no scanner, no busy task");
        assert_eq!(c.effective_scanners(), 0);
    }

    #[test]
    fn grid_has_the_seed_rows() {
        let g = sweep_grid(&Config::default());
        assert_eq!(g.len(), 14);
        assert_eq!(g[0].label(), "no scanner, no busy task");
        assert_eq!(g[1].label(), "1 busy B=0, no scanner");
        assert!(g.iter().any(|c| c.label() == "smaps_rollup, 1 scanner + 1 busy B=2"));
    }

    #[test]
    fn ratios_use_the_medians() {
        let host = HostInfo::default();
        let mk = |means: &[f64], maxes: &[f64]| {
            let mut r = Report::new("kernel.contention", "row", host.clone());
            for (a, b) in means.iter().zip(maxes) {
                r.push_run(BTreeMap::from([
                    ("call_mean_ms".to_string(), *a),
                    ("call_max_ms".to_string(), *b),
                ]));
            }
            r.summarise();
            r
        };
        let base = mk(&[0.01, 0.02, 0.03], &[1.0, 2.0, 9.0]);
        let row = mk(&[0.2, 0.4, 0.1], &[10.0, 30.0, 20.0]);
        let (m, x) = ratios(&row, &base).unwrap();
        assert!((m - 10.0).abs() < 1e-9 && (x - 10.0).abs() < 1e-9, "{m} {x}");
        assert!(ratios(&Report::new("kernel.contention", "empty", host.clone()), &base).is_none());
    }

    #[test]
    fn validation() {
        assert!(Config { samples: 0, ..Config::default() }.validate().is_err());
        assert!(Config { duration: Duration::ZERO, ..Config::default() }.validate().is_err());
        assert!(Config { scanners: 1000, ..Config::default() }.validate().is_err());
        assert!(Config::default().validate().is_ok());
    }

    #[test]
    fn short_run_with_a_scanner_and_a_busy_task() {
        let host = crate::hostinfo::gather();
        let cfg = Config {
            procfile: ProcFile::SmapsRollup,
            busy: 1,
            busy_ms: 2,
            samples: 2,
            duration: Duration::from_millis(300),
            region_mib: 16,
            ..Config::default()
        };
        let mut seen = 0;
        let r = run(&cfg, &host, &mut |_| seen += 1).unwrap();
        assert_eq!(seen, 2);
        assert_eq!(r.runs.len(), 2);
        let calls = r.metric("calls_count").unwrap();
        // Other tests run in parallel and may load both CPUs: only require progress.
        assert!(calls.min > 0.0, "{calls:?}");
        assert!(r.metric("scanner_reads_count").unwrap().max > 0.0);
        let s = |k: &str| r.metric(k).unwrap().median;
        assert!(s("call_p50_ms") <= s("call_p99_ms") && s("call_p99_ms") <= s("call_max_ms"));
        assert_eq!(s("mapper_errors_count"), 0.0);
        // The distribution: every quantile present, rising from the minimum to the maximum.
        let mut last = s("call_min_ms");
        for (_, stem) in CDF_QUANTILES {
            let v = s(&format!("call_{stem}_ms"));
            assert!(last <= v, "{stem}: {last} > {v}");
            last = v;
        }
        assert!(last <= s("call_max_ms"));
        assert_eq!(r.placement.len(), 3);
    }
}
