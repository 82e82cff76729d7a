//! The operator's question: what does a monitoring agent that reads `/proc/PID/{maps,smaps,...}` of an
//! application every few seconds cost that application on this kernel (`vmspace kernel reader-cost`).
//!
//! # What is measured
//! A *pass* is one reading by the agent: our own reader reading `/proc/PID/FILE` to its end (`maps`, `smaps`,
//! `smaps_rollup`), or walking it with PROCMAP_QUERY (`query`), or a real command run through `sh -c`
//! (`--agent "pmap -X {pid}"`). Passes run every `every` at nice `nice`, in a fresh child process each (so the
//! nice value, the CPU pin and the CPU time are the pass's own), for a number of passes or a length of time.
//!
//! For our own reader, each `read(2)` (each PROCMAP_QUERY ioctl) is timed with the monotonic clock. One
//! `read()` of a seq_file is one `m_start` .. `m_stop` of `fs/proc/task_mmu.c`: the records of one chunk
//! (at most a page of text unless one record is larger, `fs/seq_file.c: seq_read_iter`) rendered under the
//! lock that 6.18 takes for that file ([`lock_rule`]): `smaps` takes `mmap_read_lock` for the chunk;
//! `smaps_rollup` holds it across its whole walk (`show_smaps_rollup`, which drops it only when a writer waits,
//! `mmap_lock_is_contended`); `maps` and PROCMAP_QUERY lock one VMA at a time under RCU (`lock_next_vma`,
//! `lock_vma_under_rcu`) and take `mmap_read_lock` only as a fallback. So a chunk's duration, measured from the
//! reader's side, bounds the time the reader held that lock for it, off-CPU time included (a reader preempted
//! in a chunk keeps the lock). Per pass: the chunks, their total (`hold_total_ms`), the longest
//! (`hold_max_ms`), p50/p99, the bytes, the VMA count (records in the text; PROCMAP_QUERY answers; for
//! `smaps_rollup`, the maps lines read after the pass), the pass's wall time and the reader's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`: its utime + stime).
//!
//! For an agent command: its wall time and CPU time (`wait4`'s rusage: utime + stime of the command and of
//! the children it waited for), its exit status, and an **estimate** of its hold: right after each agent pass,
//! one pass of our own reader at the same nice value over the file the command reads ([`agent_file`]:
//! `smaps_rollup`, `smaps` (also `pmap -X`), `maps` (also plain `pmap`), or none for `ps` and `top`, which read
//! `stat`, `status` and `cmdline`: `cmdline` takes `mmap_read_lock` for one page copy,
//! `fs/proc/base.c: get_mm_cmdline` through `access_remote_vm`, independent of the VMA count). The
//! estimate is that calibration pass's hold total and longest chunk (`est_hold_total_ms`,
//! `est_hold_max_ms`): a command reading with another buffer size renders the same records under the same
//! lock, a page of text per `read()`.
//!
//! # A mapper of ours (`--vmas N`)
//! A child process lays out about N VMAs as a real program's are laid out: groups of a "library" (four
//! private mappings of one of four files, `r--p`, `r-xp`, `r--p`, `rw-p`, at varied offsets and of 1-8
//! pages), its `.bss` (anonymous `rw-p`), a guard page (`---p`) and a thread stack (anonymous `rw-p`, 2-16
//! pages), carved from one `PROT_NONE` reservation with `MAP_FIXED` so that no two neighbours merge; each
//! mapping's first page is touched, so `smaps` has pages to count. Then, until the run ends, it maps a
//! private anonymous page (no hint: the kernel's top-down search) and unmaps it, timing each of the two
//! calls, sleeping 10 µs between pairs. Every call is classified by whether a pass overlapped it (a
//! sequence word the parent makes odd for the length of each pass: read before and after the call) and
//! whether busy tasks ran: `baseline` (no pass; the run starts with 1 s of it), `beside` (a pass without busy
//! tasks), `starved` (a pass while `busy` tasks spin without pause on the reader's CPU, as
//! `kernel contention --busy N --busy-ms 0` starves its scanners: [`crate::contention`]'s busy tasks). The
//! passes run once without busy tasks and, when `busy > 0`, once more with them. The mapper runs at nice 0
//! pinned to the layout's mapper CPU, the reader and the busy tasks on the other one ([`Layout`]).
//!
//! # Failures
//! [`ReaderCostError`] tells the caller what went wrong in words an operator can act on: the process does
//! not exist ([`ReaderCostError::NoProcess`]), its files cannot be read ([`ReaderCostError::Permission`]), it
//! exited during the run ([`ReaderCostError::Exited`], with the passes measured so far), the agent command
//! failed ([`ReaderCostError::AgentFailed`]). Every child is killed and reaped on every path ([`crate::child`]).

use crate::child::{self, Child, Exit, SharedSlots, check_interrupted, sleep_interruptible};
use crate::contention::ProcFile;
use crate::hostinfo::HostInfo;
use crate::placement::Layout;
use crate::sys;
use anyhow::{Context, Result};
use rand::SeedableRng;
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vmspace_results::report::{Placement, Report};
use vmspace_results::stats::LatencyRecorder;

/// The size of each `read()` of our reader (`cat`'s 128 KiB; the kernel fills at most its seq_file buffer,
/// a page, per call).
pub const READ_SIZE: usize = 128 << 10;

/// The length of the mapper's baseline at the start of a `--vmas` run.
pub const BASELINE: Duration = Duration::from_secs(1);

/// Whose address space the agent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A running process.
    Pid(i32),
    /// A mapper of ours with about this many VMAs (module docs).
    Vmas(usize),
}

/// What the agent does in one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agent {
    /// Our reader reads this file (or walks PROCMAP_QUERY).
    File(ProcFile),
    /// A command run with `sh -c`, `{pid}` replaced by the target's process id.
    Command(String),
}

impl Agent {
    /// The label in tables: the file name, or the command.
    pub fn label(&self) -> String {
        match self {
            Agent::File(f) => f.name().to_string(),
            Agent::Command(c) => format!("agent `{c}`"),
        }
    }
}

/// One configuration of `kernel reader-cost`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Whose address space.
    pub target: Target,
    /// What reads it.
    pub agent: Agent,
    /// Time from one pass's start to the next's (0: back to back).
    pub every: Duration,
    /// The agent's nice value.
    pub nice: i32,
    /// Passes per set (`None`: as many as fit in `length`).
    pub passes: Option<usize>,
    /// The length of a set when `passes` is `None`.
    pub length: Option<Duration>,
    /// Busy tasks starving the reader in a second set of passes (0: no second set).
    pub busy: usize,
}

impl Config {
    /// Checks the configuration (a usage error's message on bad input).
    pub fn validate(&self, max_map_count: Option<u64>) -> Result<(), String> {
        match self.target {
            Target::Pid(p) if p <= 0 => return Err(format!("--pid {p}: not a process id")),
            Target::Vmas(n) => {
                let limit = max_map_count.unwrap_or(65530) as usize;
                if n < 16 || n + 1000 > limit {
                    return Err(format!(
                        "--vmas {n}: must be between 16 and vm.max_map_count - 1000 ({})",
                        limit.saturating_sub(1000)
                    ));
                }
            }
            Target::Pid(_) => {}
        }
        if !(-20..=19).contains(&self.nice) {
            return Err(format!("--nice {}: must be -20..=19", self.nice));
        }
        match (self.passes, self.length) {
            (Some(0), _) => return Err("--passes must be at least 1".into()),
            (Some(n), _) if n > 100_000 => return Err("--passes must be at most 100000".into()),
            (None, None) => return Err("give --passes N or --for DURATION".into()),
            (None, Some(d)) if d.is_zero() || d > Duration::from_secs(7 * 24 * 3600) => {
                return Err("--for must be positive and at most 7 days".into());
            }
            _ => {}
        }
        if self.every > Duration::from_secs(24 * 3600) {
            return Err("--every must be at most 24 h".into());
        }
        if self.busy > 64 {
            return Err("--busy must be at most 64".into());
        }
        if let Agent::Command(c) = &self.agent
            && c.trim().is_empty()
        {
            return Err("--agent is empty".into());
        }
        Ok(())
    }

    /// The number of passes per set ([`Config::passes`], or how many start within [`Config::length`]).
    pub fn passes_per_set(&self) -> usize {
        match (self.passes, self.length) {
            (Some(n), _) => n,
            (None, Some(_)) if self.every.is_zero() => usize::MAX,
            (None, Some(d)) => (d.as_secs_f64() / self.every.as_secs_f64()).ceil().max(1.0) as usize,
            (None, None) => 1,
        }
    }

    /// The number of sets: one, and one more with busy tasks for a mapper of ours.
    pub fn sets(&self) -> usize {
        if self.busy > 0 { 2 } else { 1 }
    }
}

/// Which lock 6.18 holds while a reader renders `file`'s records, in words (module docs).
pub fn lock_rule(file: ProcFile, host: &HostInfo) -> &'static str {
    let per_vma = host.per_vma_lock != Some(false);
    match file {
        ProcFile::Smaps => "mmap_read_lock per read() chunk",
        ProcFile::SmapsRollup => "mmap_read_lock across the walk (dropped when a writer waits)",
        ProcFile::Maps if per_vma => "per-VMA locks under RCU (lock_next_vma); mmap_lock only as fallback",
        ProcFile::Query if per_vma => "one VMA lock per query (lock_vma_under_rcu)",
        ProcFile::Maps => "mmap_read_lock per read() chunk",
        ProcFile::Query => "mmap_read_lock per query",
        ProcFile::None => "none",
    }
}

/// Whether the writer's mmap/munmap waits for the whole of a chunk of `file` (the mmap lock), rather than
/// only for the VMA the writer itself changes (per-VMA locks).
pub fn takes_mmap_lock(file: ProcFile, host: &HostInfo) -> bool {
    match file {
        ProcFile::Smaps | ProcFile::SmapsRollup => true,
        ProcFile::Maps | ProcFile::Query => host.per_vma_lock == Some(false),
        ProcFile::None => false,
    }
}

/// The file an agent command reads, guessed from its text (module docs); `None` for commands that read no
/// per-VMA file (`ps`, `top`).
pub fn agent_file(command: &str) -> Option<ProcFile> {
    let words: Vec<&str> = command.split_whitespace().collect();
    if command.contains("smaps_rollup") {
        Some(ProcFile::SmapsRollup)
    } else if command.contains("smaps") {
        Some(ProcFile::Smaps)
    } else if words.first().is_some_and(|w| w.ends_with("pmap")) {
        let extended = words.iter().any(|w| w.starts_with('-') && (w.contains('X') || w.contains('x')));
        Some(if extended { ProcFile::Smaps } else { ProcFile::Maps })
    } else if command.contains("/maps") {
        Some(ProcFile::Maps)
    } else {
        None
    }
}

/// Why a run could not be made or completed (module docs).
#[derive(Debug)]
pub enum ReaderCostError {
    /// The process does not exist.
    NoProcess(i32),
    /// Its files cannot be read by us.
    Permission(i32, String),
    /// It exited during the run; the reports hold what was measured.
    Exited {
        /// The process.
        pid: i32,
        /// Passes measured before.
        passes: usize,
        /// The reports so far.
        reports: Vec<Report>,
    },
    /// The agent command failed.
    AgentFailed {
        /// How it ended.
        status: String,
        /// The first lines of its standard error.
        stderr: String,
        /// The reports so far.
        reports: Vec<Report>,
    },
    /// Ctrl-C: the reports hold what was measured.
    Interrupted(Vec<Report>),
}

impl std::fmt::Display for ReaderCostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReaderCostError::NoProcess(p) => write!(f, "no process {p} (it does not exist or has exited)"),
            ReaderCostError::Permission(p, what) => {
                write!(f, "cannot read /proc/{p}: {what} (run as its owner or as root)")
            }
            ReaderCostError::Exited { pid, passes, .. } => {
                write!(f, "process {pid} exited during the run ({passes} pass(es) measured)")
            }
            ReaderCostError::AgentFailed { status, stderr, .. } => {
                write!(f, "the agent command failed ({status})")?;
                if !stderr.is_empty() {
                    write!(f, ": {stderr}")?;
                }
                Ok(())
            }
            ReaderCostError::Interrupted(_) => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for ReaderCostError {}

impl ReaderCostError {
    /// The reports measured before the failure (empty if none).
    pub fn reports(&self) -> &[Report] {
        match self {
            ReaderCostError::Exited { reports, .. }
            | ReaderCostError::AgentFailed { reports, .. }
            | ReaderCostError::Interrupted(reports) => reports,
            _ => &[],
        }
    }
}

/// Checks that `pid` exists and that its `maps` can be opened and read (usage-level errors).
pub fn check_pid(pid: i32) -> Result<(), ReaderCostError> {
    match std::fs::read(format!("/proc/{pid}/maps")) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ReaderCostError::NoProcess(pid)),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(ReaderCostError::NoProcess(pid)),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(ReaderCostError::Permission(pid, e.to_string()))
        }
        Err(e) => Err(ReaderCostError::Permission(pid, e.to_string())),
    }
}

/// The number of lines of `/proc/PID/maps` (VMAs plus `[vsyscall]`); `None` if it cannot be read.
pub fn maps_lines(pid: i32) -> Option<usize> {
    let mut f = File::open(format!("/proc/{pid}/maps")).ok()?;
    let mut buf = vec![0u8; READ_SIZE];
    let mut n = 0;
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Some(n),
            Ok(k) => n += buf[..k].iter().filter(|&&b| b == b'\n').count(),
            Err(_) => return None,
        }
    }
}

// Shared slot layout.
const M_READY: usize = 0; // the mapper's VMAs are laid out
const M_GO: usize = 1;
const M_STOP: usize = 2;
const M_SEQ: usize = 3; // odd while a pass runs
const M_BUSY: usize = 4; // busy tasks run
const M_ERRORS: usize = 5;
const M_DONE: usize = 6; // the mapper has published its results
const M_RESULT: usize = 8; // 3 classes x 5 words: count, mean, p50, p99, max (ms as f64 bits)
const R_BASE: usize = 24; // the reader's words
const R_WORDS: usize = 12;
const SLOTS: usize = R_BASE + R_WORDS;
// Reader words, relative to R_BASE.
const R_CHUNKS: usize = 0;
const R_TOTAL_NS: usize = 1;
const R_MAX_NS: usize = 2;
const R_P50: usize = 3;
const R_P99: usize = 4;
const R_BYTES: usize = 5;
const R_VMAS: usize = 6;
const R_CPU_NS: usize = 7;
const R_WALL_NS: usize = 8;
const R_ERRNO: usize = 9;

/// The mapper's classes of calls (module docs).
pub const CLASSES: [&str; 3] = ["baseline", "beside", "starved"];

/// A running mapper of ours and what it shares with the parent.
pub struct Mapper {
    child: Child,
    /// Its process id.
    pub pid: i32,
    /// Its VMA count after the layout (maps lines).
    pub vmas: usize,
    _files: tempfile::TempDir,
}

/// Starts a mapper with about `n` VMAs on `cpu` (module docs) and waits until it is laid out.
pub fn start_mapper(n: usize, cpu: usize, slots: &SharedSlots) -> Result<Mapper> {
    let dir =
        tempfile::Builder::new().prefix("vmspace-reader-cost").tempdir().context("a temporary directory")?;
    let page = sys::page_size();
    let mut fds = Vec::new();
    for name in ["libvmsa.so", "libvmsb.so", "libvmsc.so", "libvmsd.so"] {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join(name))
            .context("creating a library file")?;
        f.set_len((FILE_PAGES * page) as u64).context("sizing a library file")?;
        fds.push(f);
    }
    let child = child::spawn(|| mapper_main(slots, cpu, n, &fds)).context("fork of the mapper")?;
    let pid = child.pid().as_raw_nonzero().get();
    let mut m = Mapper { child, pid, vmas: 0, _files: dir };
    let t0 = Instant::now();
    // Acquire: pairs with the mapper's Release store of M_READY after its layout.
    while slots.get(M_READY).load(Ordering::Acquire) == 0 {
        if let Some(e) = m.child.try_wait()? {
            anyhow::bail!("the mapper exited while laying out {n} VMAs ({e:?})");
        }
        if t0.elapsed() > Duration::from_secs(120) {
            anyhow::bail!("the mapper did not lay out {n} VMAs within 120 s");
        }
        check_interrupted()?;
        std::thread::sleep(Duration::from_millis(2));
    }
    m.vmas = maps_lines(pid).context("reading the mapper's maps")?;
    Ok(m)
}

const FILE_PAGES: usize = 64;

fn mapper_main(slots: &SharedSlots, cpu: usize, n: usize, files: &[File]) -> i32 {
    use rustix::mm::{MapFlags, ProtFlags};
    if sys::pin_to_cpu(cpu).is_err() || sys::set_nice(0).is_err() {
        return 2;
    }
    let page = sys::page_size();
    let have = maps_lines(std::process::id() as i32).unwrap_or(30);
    let want = n.saturating_sub(have);
    // Each group adds 7 VMAs and spans at most 4*8 + 8 + 1 + 16 pages.
    let groups = want.div_ceil(7);
    let span = groups * 58 * page + page;
    let Ok(base) = sys::map_anon(span, ProtFlags::empty(), false) else { return 3 };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed());
    let mut at = base + page;
    let mut added = 0;
    let map = |at: usize, pages: usize, prot: ProtFlags, file: Option<(&File, usize)>| -> bool {
        let len = pages * page;
        // SAFETY: `[at, at + len)` lies in this process's own PROT_NONE reservation, which nothing references.
        let r = unsafe {
            match file {
                Some((f, off)) => rustix::mm::mmap(
                    at as *mut std::ffi::c_void,
                    len,
                    prot,
                    MapFlags::PRIVATE | MapFlags::FIXED,
                    f,
                    (off * page) as u64,
                ),
                None => rustix::mm::mmap_anonymous(
                    at as *mut std::ffi::c_void,
                    len,
                    prot,
                    MapFlags::PRIVATE | MapFlags::FIXED,
                ),
            }
        };
        if r.is_err() {
            return false;
        }
        // Touch the first page (a read for read-only mappings, a write for writable ones).
        if prot.contains(ProtFlags::WRITE) {
            // SAFETY: the page was just mapped writable and belongs to this process.
            unsafe { std::ptr::write_volatile(at as *mut u8, 1) };
        } else if prot.contains(ProtFlags::READ) {
            // SAFETY: the page was just mapped readable, within the file's size.
            unsafe { std::ptr::read_volatile(at as *const u8) };
        }
        true
    };
    use rand::Rng;
    let (r, rx, rw) =
        (ProtFlags::READ, ProtFlags::READ | ProtFlags::EXEC, ProtFlags::READ | ProtFlags::WRITE);
    'outer: for g in 0..groups {
        let f = &files[g % files.len()];
        for prot in [r, rx, r, rw] {
            let pages = rng.random_range(1..=8);
            let off = rng.random_range(0..=FILE_PAGES - pages);
            if !map(at, pages, prot, Some((f, off))) {
                return 4;
            }
            at += pages * page;
            added += 1;
            if added >= want {
                break 'outer;
            }
        }
        // .bss, a guard page left PROT_NONE, a thread stack.
        let pages = rng.random_range(1..=8);
        if !map(at, pages, rw, None) {
            return 4;
        }
        at += (pages + 1) * page;
        let pages = rng.random_range(2..=16);
        if !map(at, pages, rw, None) {
            return 4;
        }
        at += pages * page;
        added += 3;
        if added >= want {
            break;
        }
    }
    // Release: the layout is done; the parent counts the maps lines after this.
    slots.get(M_READY).store(1, Ordering::Release);
    // Acquire (both): pair with the parent's Release stores of M_GO / M_STOP.
    while slots.get(M_GO).load(Ordering::Acquire) == 0 {
        if slots.get(M_STOP).load(Ordering::Acquire) != 0 {
            return 0;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut recs = [LatencyRecorder::new(), LatencyRecorder::new(), LatencyRecorder::new()];
    let mut errors = 0u64;
    let pause = Duration::from_micros(10);
    // Acquire: pairs with the parent's Release store of M_STOP.
    while slots.get(M_STOP).load(Ordering::Acquire) == 0 {
        for call in 0..2 {
            // Acquire (both loads): pair with the parent's Release increments of M_SEQ and stores of M_BUSY.
            let before = slots.get(M_SEQ).load(Ordering::Acquire);
            let t = Instant::now();
            let ok = if call == 0 {
                match sys::map_anon(page, rw, false) {
                    Ok(a) => {
                        at = a;
                        true
                    }
                    Err(_) => false,
                }
            } else {
                // SAFETY: `at` is the page mapped by the previous call; nothing references it.
                unsafe { sys::unmap(at, page) }.is_ok()
            };
            let ns = t.elapsed().as_nanos() as u64;
            let after = slots.get(M_SEQ).load(Ordering::Acquire);
            let busy = slots.get(M_BUSY).load(Ordering::Acquire) != 0;
            let class = if before.is_multiple_of(2) && before == after {
                0
            } else if busy {
                2
            } else {
                1
            };
            recs[class].record(ns);
            if !ok {
                errors += 1;
                break;
            }
        }
        sys::sleep_once(pause);
    }
    for (c, rec) in recs.iter().enumerate() {
        let s = rec.stats();
        for (i, v) in [s.count as f64, s.mean_ms, s.p50_ms, s.p99_ms, s.max_ms].into_iter().enumerate() {
            // Relaxed: the parent reads these after M_DONE (Release below) or after reaping this process.
            slots.get(M_RESULT + 5 * c + i).store(v.to_bits(), Ordering::Relaxed);
        }
    }
    // Relaxed: as above.
    slots.get(M_ERRORS).store(errors, Ordering::Relaxed);
    // Release: pairs with the parent's Acquire load of M_DONE; publishes the results above.
    slots.get(M_DONE).store(1, Ordering::Release);
    0
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64);
    t.unwrap_or(1) ^ (u64::from(std::process::id()) << 32)
}

impl Mapper {
    /// Starts the mapper's calls (the baseline begins).
    pub fn go(&self, slots: &SharedSlots) {
        // Release: pairs with the mapper's Acquire load of M_GO.
        slots.get(M_GO).store(1, Ordering::Release);
    }

    /// Stops the mapper and returns its call statistics by class ([`CLASSES`]): count, mean, p50, p99, max.
    /// Also after Ctrl-C (the calls measured so far are kept): the wait for the mapper, which stops at its
    /// next call, does not give up on the interrupt, only after [`MAPPER_STOP_WAIT`] (the mapper is then
    /// killed).
    pub fn finish(mut self, slots: &SharedSlots) -> Result<(BTreeMap<String, f64>, u64)> {
        // Release: pairs with the mapper's Acquire load of M_STOP.
        slots.get(M_STOP).store(1, Ordering::Release);
        let t = Instant::now();
        let exit = loop {
            if let Some(e) = self.child.try_wait()? {
                break e;
            }
            if t.elapsed() > MAPPER_STOP_WAIT {
                self.child.kill_and_wait();
                anyhow::bail!("the mapper did not stop within {MAPPER_STOP_WAIT:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if exit != Exit::Code(0) {
            anyhow::bail!("the mapper failed: {exit:?}");
        }
        // Acquire: pairs with the mapper's Release store of M_DONE (waitpid orders them too).
        if slots.get(M_DONE).load(Ordering::Acquire) == 0 {
            anyhow::bail!("the mapper ended without its results");
        }
        let f = |i: usize| f64::from_bits(slots.get(i).load(Ordering::Relaxed));
        let mut m = BTreeMap::new();
        for (c, name) in CLASSES.iter().enumerate() {
            for (i, k) in ["count", "mean_ms", "p50_ms", "p99_ms", "max_ms"].iter().enumerate() {
                m.insert(format!("{name}_call_{k}"), f(M_RESULT + 5 * c + i));
            }
        }
        // Relaxed: read after the mapper was reaped.
        Ok((m, slots.get(M_ERRORS).load(Ordering::Relaxed)))
    }
}

/// How long [`Mapper::finish`] waits for the mapper to stop.
pub const MAPPER_STOP_WAIT: Duration = Duration::from_secs(10);

/// Marks the start (`true`) or end of a pass for the mapper's classification.
fn pass_edge(slots: &SharedSlots) {
    // Release: pairs with the mapper's Acquire loads of M_SEQ.
    slots.get(M_SEQ).fetch_add(1, Ordering::Release);
}

/// One pass of our reader over `/proc/PID/FILE` in a child at `nice`, pinned to `cpu` if given: the pass's
/// metrics, or the errno of the failing open or read.
pub fn reader_pass(
    pid: i32,
    file: ProcFile,
    nice: i32,
    cpu: Option<usize>,
    slots: &SharedSlots,
) -> Result<Result<BTreeMap<String, f64>, Errno>> {
    for i in 0..R_WORDS {
        // Relaxed: reset before the fork, which orders it.
        slots.get(R_BASE + i).store(0, Ordering::Relaxed);
    }
    let mut c = child::spawn(|| reader_main(pid, file, nice, cpu, slots)).context("fork of the reader")?;
    let exit = c.wait()?;
    let g = |i: usize| slots.get(R_BASE + i).load(Ordering::Relaxed);
    let errno = g(R_ERRNO);
    if errno != 0 {
        return Ok(Err(Errno::from_raw_os_error(errno as i32)));
    }
    if exit != Exit::Code(0) {
        anyhow::bail!("the reader failed: {exit:?}");
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut m = BTreeMap::new();
    m.insert("chunks_count".into(), g(R_CHUNKS) as f64);
    m.insert("hold_total_ms".into(), ms(g(R_TOTAL_NS)));
    m.insert("hold_max_ms".into(), ms(g(R_MAX_NS)));
    m.insert("chunk_p50_ms".into(), f64::from_bits(g(R_P50)));
    m.insert("chunk_p99_ms".into(), f64::from_bits(g(R_P99)));
    m.insert("bytes_count".into(), g(R_BYTES) as f64);
    m.insert("reader_cpu_ms".into(), ms(g(R_CPU_NS)));
    m.insert("pass_wall_ms".into(), ms(g(R_WALL_NS)));
    let vmas = if file == ProcFile::SmapsRollup { maps_lines(pid).unwrap_or(0) as u64 } else { g(R_VMAS) };
    m.insert("vmas_count".into(), vmas as f64);
    Ok(Ok(m))
}

fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn reader_main(pid: i32, file: ProcFile, nice: i32, cpu: Option<usize>, slots: &SharedSlots) -> i32 {
    let w = |i: usize, v: u64| slots.get(R_BASE + i).store(v, Ordering::Relaxed);
    if cpu.is_some_and(|c| sys::pin_to_cpu(c).is_err()) || sys::set_nice(nice).is_err() {
        return 2;
    }
    let name = match file {
        ProcFile::Maps | ProcFile::Query => "maps",
        ProcFile::Smaps => "smaps",
        ProcFile::SmapsRollup => "smaps_rollup",
        ProcFile::None => return 0,
    };
    let mut rec = LatencyRecorder::new();
    let (mut total, mut max, mut bytes, mut vmas) = (0u64, 0u64, 0u64, 0u64);
    let cpu0 = thread_cpu_ns();
    let wall = Instant::now();
    let mut f = match File::open(format!("/proc/{pid}/{name}")) {
        Ok(f) => f,
        Err(e) => {
            // Relaxed (all of this child's stores): the parent reads them after reaping it.
            w(R_ERRNO, e.raw_os_error().unwrap_or(libc::EIO) as u64);
            return 3;
        }
    };
    let mut note = |ns: u64| {
        rec.record(ns);
        total += ns;
        max = max.max(ns);
    };
    if file == ProcFile::Query {
        let mut buf = Vec::with_capacity(4096);
        let mut addr = 0u64;
        loop {
            let t = Instant::now();
            let r =
                crate::procmap_query::query(&f, addr, crate::procmap_query::COVERING_OR_NEXT, Some(&mut buf));
            note(t.elapsed().as_nanos() as u64);
            match r {
                Ok(v) => {
                    addr = v.end;
                    vmas += 1;
                }
                Err(Errno::NOENT) => break,
                Err(e) => {
                    w(R_ERRNO, e.raw_os_error() as u64);
                    return 3;
                }
            }
        }
    } else {
        let mut buf = vec![0u8; READ_SIZE];
        loop {
            let t = Instant::now();
            let r = f.read(&mut buf);
            note(t.elapsed().as_nanos() as u64);
            match r {
                Ok(0) => break,
                Ok(n) => {
                    bytes += n as u64;
                    let text = &buf[..n];
                    vmas += match file {
                        ProcFile::Smaps => {
                            count_of(text, b"\nVmFlags:") + u64::from(text.starts_with(b"VmFlags:"))
                        }
                        _ => text.iter().filter(|&&b| b == b'\n').count() as u64,
                    };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    w(R_ERRNO, e.raw_os_error().unwrap_or(libc::EIO) as u64);
                    return 3;
                }
            }
        }
    }
    let wall_ns = wall.elapsed().as_nanos() as u64;
    let cpu_ns = thread_cpu_ns() - cpu0;
    w(R_CHUNKS, rec.stats().count);
    w(R_TOTAL_NS, total);
    w(R_MAX_NS, max);
    w(R_P50, rec.quantile_ms(0.5).to_bits());
    w(R_P99, rec.quantile_ms(0.99).to_bits());
    w(R_BYTES, bytes);
    w(R_VMAS, vmas);
    w(R_CPU_NS, cpu_ns);
    w(R_WALL_NS, wall_ns);
    0
}

fn count_of(hay: &[u8], needle: &[u8]) -> u64 {
    hay.windows(needle.len()).filter(|w| *w == needle).count() as u64
}

/// One run of an agent command (`{pid}` replaced) at `nice` on `cpu` if given: wall and CPU time, or how it
/// failed (its exit status or signal, and the first lines of its standard error). `kernel contention --agent`
/// runs its scanners' commands through it too ([`crate::contention`]).
pub fn agent_pass(
    command: &str,
    pid: i32,
    nice: i32,
    cpu: Option<usize>,
) -> Result<Result<BTreeMap<String, f64>, (String, String)>> {
    use std::os::unix::process::CommandExt;
    let cmd = command.replace("{pid}", &pid.to_string());
    let err = tempfile::tempfile().context("a file for the agent's standard error")?;
    let mut c = std::process::Command::new("/bin/sh");
    c.arg("-c").arg(&cmd).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
    c.stderr(err.try_clone().context("duplicating a file descriptor")?);
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe system calls
    // (prctl, setpriority, sched_setaffinity, signal) through rustix/libc, with no allocation.
    unsafe {
        c.pre_exec(move || {
            // The command dies with the process that runs it (a scanner of `kernel contention --agent` killed
            // at the end of its run, or this command killed outright).
            let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
            for sig in [libc::SIGINT, libc::SIGTERM] {
                libc::signal(sig, libc::SIG_DFL);
            }
            if let Some(cpu) = cpu {
                let _ = sys::pin_to_cpu(cpu);
            }
            sys::set_nice(nice).map_err(std::io::Error::from)
        });
    }
    let t = Instant::now();
    let mut child = c.spawn().with_context(|| format!("starting the agent `{cmd}`"))?;
    let raw = child.id() as i32;
    let (status, ru) = loop {
        let mut st = 0;
        // SAFETY: `rusage` is plain integers, valid all-zero.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `raw` is our unreaped child; `st` and `ru` are valid for writes.
        let r = unsafe { libc::wait4(raw, &mut st, libc::WNOHANG, &mut ru) };
        if r == raw {
            break (st, ru);
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            anyhow::bail!("waiting for the agent: {}", std::io::Error::last_os_error());
        }
        if child::interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(child::Interrupted.into());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let wall = t.elapsed();
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let how = if libc::WIFEXITED(status) {
            format!("exit status {}", libc::WEXITSTATUS(status))
        } else {
            format!("signal {}", libc::WTERMSIG(status))
        };
        let mut text = String::new();
        let mut e = err;
        use std::io::Seek;
        let _ = e.seek(std::io::SeekFrom::Start(0));
        let _ = e.take(4096).read_to_string(&mut text);
        let first: Vec<&str> = text.lines().take(3).collect();
        return Ok(Err((how, first.join(" / "))));
    }
    let mut m = BTreeMap::new();
    m.insert("agent_wall_ms".into(), wall.as_secs_f64() * 1e3);
    m.insert("agent_cpu_ms".into(), tv(ru.ru_utime) + tv(ru.ru_stime));
    Ok(Ok(m))
}

/// Progress callback: `(passes done, passes in all, what)`.
pub type OnPass<'a> = dyn FnMut(usize, usize, &str) + 'a;

/// The outcome of a run: reports (one per set, a run per pass; the mapper's) and the target's pid.
#[derive(Debug)]
pub struct Outcome {
    /// `kernel.reader_cost` per set, then `kernel.reader_cost.mapper` for a mapper of ours.
    pub reports: Vec<Report>,
    /// The target's process id.
    pub pid: i32,
}

/// Runs `cfg` (module docs). `before_passes(pid)` is called once the target is ready and before the first
/// pass (the engine's import of the same address space is made there, while the mapper still waits).
pub fn run(
    cfg: &Config,
    host: &HostInfo,
    before_passes: &mut dyn FnMut(i32) -> Result<()>,
    on_pass: &mut OnPass<'_>,
) -> Result<Outcome, anyhow::Error> {
    let layout = Layout::resolve(&host.cpus_usable, None, None)?;
    let slots = SharedSlots::new(SLOTS)?;
    let (pid, mapper) = match cfg.target {
        Target::Pid(p) => {
            check_pid(p)?;
            (p, None)
        }
        Target::Vmas(n) => {
            let m = start_mapper(n, layout.mapper, &slots)?;
            (m.pid, Some(m))
        }
    };
    // Pin the reader when busy tasks share its CPU or when it runs beside our mapper.
    let reader_cpu = if mapper.is_some() || cfg.busy > 0 { Some(layout.other(0)) } else { None };
    before_passes(pid)?;
    let mut reports = Vec::new();
    let per_set = cfg.passes_per_set();
    let total = if per_set == usize::MAX { 0 } else { per_set * cfg.sets() };
    if let Some(m) = &mapper {
        m.go(&slots);
        sleep_interruptible(BASELINE).map_err(|e| interrupted_with(e.into(), &mut reports))?;
    }
    let mut done = 0;
    let mut failure = None;
    for set in 0..cfg.sets() {
        let starved = set == 1;
        let mut report = Report::new(
            "kernel.reader_cost",
            format!("{}{}", cfg.agent.label(), if starved { " + busy B=0" } else { "" }),
            host.clone(),
        );
        params(&mut report, cfg, pid, starved);
        report.placement.push(Placement { role: "reader".into(), index: 0, cpu: reader_cpu, nice: cfg.nice });
        if let Some(m) = &mapper {
            report.param("mapper_vmas", m.vmas);
            report.placement.push(Placement {
                role: "mapper".into(),
                index: 0,
                cpu: Some(layout.mapper),
                nice: 0,
            });
        }
        let mut busy = Vec::new();
        if starved {
            for i in 0..cfg.busy {
                let cpu = layout.other(i);
                report.placement.push(Placement { role: "busy".into(), index: i, cpu: Some(cpu), nice: 0 });
                busy.push(child::spawn(move || busy_main(cpu)).context("fork of a busy task")?);
            }
            // Release: pairs with the mapper's Acquire load of M_BUSY.
            slots.get(M_BUSY).store(1, Ordering::Release);
        }
        let start = Instant::now();
        let mut i = 0;
        let r = loop {
            if i >= per_set || cfg.passes.is_none() && cfg.length.is_some_and(|d| start.elapsed() >= d) {
                break Ok(());
            }
            let due = start + cfg.every * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now())
                && let Err(e) = sleep_interruptible(wait)
            {
                break Err(anyhow::Error::from(e));
            }
            if mapper.is_some() {
                pass_edge(&slots);
            }
            let pass = one_pass(cfg, pid, reader_cpu, &slots);
            if mapper.is_some() {
                pass_edge(&slots);
            }
            match pass {
                // A process that exited and is not reaped yet (a zombie) has no mm: its maps read empty.
                Ok(Ok(m)) if m.get("vmas_count") == Some(&0.0) => {
                    break Err(anyhow::Error::new(PassError::Errno(Errno::SRCH)));
                }
                Ok(Ok(m)) => report.push_run(m),
                Ok(Err(e)) => break Err(anyhow::Error::new(e)),
                Err(e) => break Err(e),
            }
            i += 1;
            done += 1;
            on_pass(done, total, &report.label);
        };
        for b in &mut busy {
            b.kill_and_wait();
        }
        // Release: pairs with the mapper's Acquire load of M_BUSY.
        slots.get(M_BUSY).store(0, Ordering::Release);
        report.summarise();
        if !report.runs.is_empty() {
            reports.push(report);
        }
        if let Err(e) = r {
            failure = Some(e);
            break;
        }
    }
    if let Some(m) = mapper
        && (failure.is_none() || failure.as_ref().is_some_and(is_interrupt))
    {
        let (metrics, errors) = match m.finish(&slots) {
            Ok(x) => x,
            // Interrupted anyway: keep the passes measured.
            Err(e) => return Err(failure.map_or(e, |f| classify(f, pid, reports))),
        };
        let mut r = Report::new("kernel.reader_cost.mapper", "mapper's mmap/munmap", host.clone());
        params(&mut r, cfg, pid, false);
        r.param("mapper_errors", errors);
        r.placement.push(Placement { role: "mapper".into(), index: 0, cpu: Some(layout.mapper), nice: 0 });
        r.push_run(metrics);
        r.summarise();
        reports.push(r);
    }
    match failure {
        None => Ok(Outcome { reports, pid }),
        Some(e) => Err(classify(e, pid, reports)),
    }
}

fn is_interrupt(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<child::Interrupted>())
}

fn interrupted_with(e: anyhow::Error, reports: &mut Vec<Report>) -> anyhow::Error {
    if is_interrupt(&e) { ReaderCostError::Interrupted(std::mem::take(reports)).into() } else { e }
}

/// Turns a failure of a pass into the error the caller reports, with what was measured.
fn classify(e: anyhow::Error, pid: i32, reports: Vec<Report>) -> anyhow::Error {
    let passes = reports.iter().filter(|r| r.benchmark == "kernel.reader_cost").map(|r| r.runs.len()).sum();
    if is_interrupt(&e) {
        return ReaderCostError::Interrupted(reports).into();
    }
    match e.downcast::<PassError>() {
        Ok(PassError::Errno(errno)) => {
            if errno == Errno::SRCH
                || errno == Errno::NOENT
                || !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                ReaderCostError::Exited { pid, passes, reports }.into()
            } else if errno == Errno::ACCESS || errno == Errno::PERM {
                ReaderCostError::Permission(pid, errno.to_string()).into()
            } else {
                anyhow::anyhow!("reading /proc/{pid}: {errno}")
            }
        }
        Ok(PassError::Agent(status, stderr)) => {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                ReaderCostError::Exited { pid, passes, reports }.into()
            } else {
                ReaderCostError::AgentFailed { status, stderr, reports }.into()
            }
        }
        Err(e) => e,
    }
}

#[derive(Debug)]
enum PassError {
    Errno(Errno),
    Agent(String, String),
}

impl std::fmt::Display for PassError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PassError::Errno(e) => write!(f, "{e}"),
            PassError::Agent(s, e) => write!(f, "{s}: {e}"),
        }
    }
}

impl std::error::Error for PassError {}

fn one_pass(
    cfg: &Config,
    pid: i32,
    cpu: Option<usize>,
    slots: &SharedSlots,
) -> Result<Result<BTreeMap<String, f64>, PassError>> {
    match &cfg.agent {
        Agent::File(f) => Ok(reader_pass(pid, *f, cfg.nice, cpu, slots)?.map_err(PassError::Errno)),
        Agent::Command(c) => {
            let mut m = match agent_pass(c, pid, cfg.nice, cpu)? {
                Ok(m) => m,
                Err((s, e)) => return Ok(Err(PassError::Agent(s, e))),
            };
            if let Some(f) = agent_file(c) {
                let cal = match reader_pass(pid, f, cfg.nice, cpu, slots)? {
                    Ok(cal) => cal,
                    Err(e) => return Ok(Err(PassError::Errno(e))),
                };
                m.insert("est_hold_total_ms".into(), cal["hold_total_ms"]);
                m.insert("est_hold_max_ms".into(), cal["hold_max_ms"]);
                m.insert("est_chunks_count".into(), cal["chunks_count"]);
            }
            match maps_lines(pid) {
                Some(n) => m.insert("vmas_count".into(), n as f64),
                None => return Ok(Err(PassError::Errno(Errno::SRCH))),
            };
            Ok(Ok(m))
        }
    }
}

fn params(r: &mut Report, cfg: &Config, pid: i32, starved: bool) {
    r.param("pid", pid);
    match cfg.target {
        Target::Pid(_) => r.param("target", "pid"),
        Target::Vmas(n) => {
            r.param("target", "mapper");
            r.param("vmas_asked", n);
        }
    }
    match &cfg.agent {
        Agent::File(f) => r.param("file", f.name()),
        Agent::Command(c) => {
            r.param("agent", c);
            r.param("file", agent_file(c).map_or("none", ProcFile::name));
        }
    }
    r.param("every_s", cfg.every.as_secs_f64());
    r.param("nice", cfg.nice);
    r.param("busy", if starved { cfg.busy } else { 0 });
    r.param("read_size", READ_SIZE);
}

fn busy_main(cpu: usize) -> i32 {
    if sys::pin_to_cpu(cpu).is_err() || sys::set_nice(0).is_err() {
        return 2;
    }
    loop {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_files_are_guessed_from_the_command() {
        assert_eq!(agent_file("cat /proc/{pid}/smaps"), Some(ProcFile::Smaps));
        assert_eq!(agent_file("cat /proc/{pid}/smaps_rollup"), Some(ProcFile::SmapsRollup));
        assert_eq!(agent_file("pmap -X {pid}"), Some(ProcFile::Smaps));
        assert_eq!(agent_file("pmap {pid}"), Some(ProcFile::Maps));
        assert_eq!(agent_file("cat /proc/{pid}/maps"), Some(ProcFile::Maps));
        assert_eq!(agent_file("ps -p {pid}"), None);
        assert_eq!(agent_file("top -b -n 1"), None);
    }

    #[test]
    fn validation() {
        let ok = Config {
            target: Target::Vmas(100),
            agent: Agent::File(ProcFile::Maps),
            every: Duration::ZERO,
            nice: 10,
            passes: Some(2),
            length: None,
            busy: 0,
        };
        assert!(ok.validate(Some(65530)).is_ok());
        assert!(Config { target: Target::Vmas(65000), ..ok.clone() }.validate(Some(65530)).is_err());
        assert!(Config { target: Target::Pid(0), ..ok.clone() }.validate(None).is_err());
        assert!(Config { nice: 30, ..ok.clone() }.validate(None).is_err());
        assert!(Config { passes: Some(0), ..ok.clone() }.validate(None).is_err());
        assert!(Config { passes: None, ..ok.clone() }.validate(None).is_err());
        let timed = Config {
            passes: None,
            length: Some(Duration::from_secs(60)),
            every: Duration::from_secs(15),
            ..ok
        };
        assert_eq!(timed.passes_per_set(), 4);
    }

    #[test]
    fn a_pass_over_our_own_maps_counts_its_lines() {
        let slots = SharedSlots::new(SLOTS).unwrap();
        let pid = std::process::id() as i32;
        let m = reader_pass(pid, ProcFile::Maps, 10, None, &slots).unwrap().unwrap();
        assert!(m["vmas_count"] > 5.0, "{m:?}");
        assert!(m["hold_total_ms"] > 0.0 && m["hold_max_ms"] <= m["hold_total_ms"], "{m:?}");
        let e = reader_pass(i32::MAX - 1, ProcFile::Smaps, 10, None, &slots).unwrap().unwrap_err();
        assert_eq!(e, Errno::NOENT);
    }

    #[test]
    fn a_mapper_lays_out_about_n_vmas() {
        let slots = SharedSlots::new(SLOTS).unwrap();
        let m = start_mapper(500, sys::usable_cpus().unwrap()[0], &slots).unwrap();
        assert!((490..=520).contains(&m.vmas), "{}", m.vmas);
        let text = std::fs::read_to_string(format!("/proc/{}/maps", m.pid)).unwrap();
        for perms in ["r--p", "r-xp", "rw-p", "---p"] {
            assert!(text.contains(perms), "{perms} missing");
        }
        assert!(text.contains("libvmsa.so"));
        m.go(&slots);
        std::thread::sleep(Duration::from_millis(50));
        let (stats, errors) = m.finish(&slots).unwrap();
        assert_eq!(errors, 0);
        assert!(stats["baseline_call_count"] > 0.0, "{stats:?}");
    }
}
