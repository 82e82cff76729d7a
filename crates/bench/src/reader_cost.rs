//! The engine's half of `vmspace kernel reader-cost`: the address space of the process the agent reads,
//! imported into the engine, read in each [`ReaderMode`] beside an engine mapper thread, so that the same
//! address space shows what would change with per-VMA or lockless readers.
//!
//! # Method
//! [`import`] reads the process with `vmspace_linux::procfs::read_snapshot` (a stable reading: `maps` twice,
//! equal) and builds an engine address space from it with `Mm::import` (maps byte-identical; the pages are not
//! imported, so the engine's `smaps` walks empty page tables and its Rss lines are 0: its time per record is
//! the format's and the walk's, not the kernel's page counting). Then, per mode and set ([`run_mode`]):
//!
//! - a mapper thread (nice 0, pinned to the layout's mapper CPU) maps a private anonymous page with no hint
//!   (the top-down search) and unmaps it, timing each call, 10 µs apart, as the kernel side's mapper does; each
//!   call is classed `baseline` (no pass overlapped it), `beside` (a pass overlapped it) or `starved` (a pass
//!   of the set with busy threads did), by a sequence word the reader makes odd for the length of each pass;
//! - after a baseline of [`ENGINE_BASELINE`], a reader thread (at the agent's nice value, pinned to the other
//!   CPU) makes `passes` passes back to back: `maps` and `smaps` through `ProcReader::open` read with 128 KiB
//!   reads (each `read` renders one page-sized chunk, one `m_start` .. `m_stop`), `smaps_rollup` as one call,
//!   PROCMAP_QUERY as one query per VMA (`crate::contention::query_walk`'s walk); each chunk (query) is timed;
//! - in the starved set (`busy > 0`, as the kernel side's second set), `busy` threads at nice 0 spin without
//!   pause on the reader's CPU from the end of the baseline to the end of the passes
//!   (`kernel contention --busy N --busy-ms 0`'s busy tasks, as threads), so that the reader loses its CPU
//!   inside its holds as a starved agent does.
//!
//! # Holds, by the rule of each mode ([`HoldTimer`])
//! Measured from the reader's side, as the kernel side measures its chunks, and in the reader harness only
//! (no counter in `MmLocking` or in the walks: the engine's hot paths are those of an unmeasured reader):
//!
//! - **mmap-lock** (`smaps` and `smaps_rollup` on 6.18): the mmap read lock is held for one chunk, so each
//!   `read` (each query; the whole `smaps_rollup` call, which drops and retakes the lock only when a writer
//!   waits: an upper bound of its longest hold) is one hold;
//! - **per-VMA** (`maps` and PROCMAP_QUERY on 6.18, `lock_next_vma`): one VMA read lock per record. The
//!   reader's record hook (`ProcReader::with_record_hook`, called with the VMA locked as the record starts)
//!   stamps the time; a hold lasts from one stamp to the next within a call (the next VMA is locked only after
//!   the previous one is released, so the gap bounds the hold from above by one cursor step), the call's last
//!   from its stamp to the call's return. A query is one hold (its `lock_next_vma` .. unlock). A step that
//!   falls back to the mmap read lock (`lock_next_vma`'s slow path, which holds that lock only for the lookup)
//!   is not told apart;
//! - **lockless**: no lock, no hold.
//!
//! Per pass: `chunks_count`, `chunk_total_ms`, `chunk_max_ms` (the read calls' durations, as the kernel side
//! times its chunks), `holds_count`, `hold_total_ms`, `hold_max_ms` (the holds of the mode's lock, above),
//! `mmap_lock_hold_max_ms` and `vma_lock_hold_max_ms` (the longest hold when it is that lock, else 0),
//! `reader_cpu_ms` (the thread's CPU clock), `pass_wall_ms`, `vmas_count`. The report's parameter `lock`
//! names the lock (`mmap_lock`, `vma_lock`, `none`). The mapper's calls by class in a
//! `bench.reader_cost.mapper` report per mode and set.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vmspace_linux::contention::ProcFile;
use vmspace_linux::placement::Layout;
use vmspace_linux::sys;
use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, ProcFileKind, Prot, ReaderMode, VmaSnapshot};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Placement, Report};
use vmspace_results::stats::LatencyRecorder;

use vmspace_proc::QueryRequest;
use vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA;

/// One run's metrics (name with unit suffix to value).
pub type Metrics = BTreeMap<String, f64>;

/// The mapper's time alone before the reader starts, per mode.
pub const ENGINE_BASELINE: Duration = Duration::from_millis(300);

/// The size of each read of the engine's reader (the kernel side's).
const READ_SIZE: usize = 128 << 10;

/// The lock a reader of `mode` holds while it renders a record (module docs, "Holds"): `mmap_lock`,
/// `vma_lock` or `none`.
pub fn held_lock(mode: ReaderMode) -> &'static str {
    match mode {
        ReaderMode::MmapLock => "mmap_lock",
        ReaderMode::PerVma => "vma_lock",
        ReaderMode::Lockless => "none",
    }
}

/// One reader's hold clock (module docs, "Holds"): counts, total and longest hold in ns. Owned by one reader
/// thread: its fields are atomics only because the record hook that stamps them must be `Sync`; no other
/// thread writes them, so every access is Relaxed and uncontended (a plain load and store on x86).
pub struct HoldTimer {
    origin: Instant,
    /// The open hold's start, ns after `origin` (+1; 0: no hold open).
    open: AtomicU64,
    count: AtomicU64,
    total: AtomicU64,
    max: AtomicU64,
}

impl Default for HoldTimer {
    fn default() -> Self {
        HoldTimer::new()
    }
}

impl HoldTimer {
    /// A clock with no hold.
    pub fn new() -> HoldTimer {
        HoldTimer {
            origin: Instant::now(),
            open: AtomicU64::new(0),
            count: AtomicU64::new(0),
            total: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64 + 1
    }

    /// Counts one hold of `ns`.
    pub fn add(&self, ns: u64) {
        // Relaxed (all four): this reader thread is the only one that touches the clock (type docs).
        self.count.store(self.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.total.store(self.total.load(Ordering::Relaxed) + ns, Ordering::Relaxed);
        if ns > self.max.load(Ordering::Relaxed) {
            self.max.store(ns, Ordering::Relaxed);
        }
    }

    /// A record's VMA was just locked: closes the open hold (the previous record's) and opens one.
    pub fn stamp(&self) {
        let now = self.now();
        // Relaxed: as in `add`.
        let open = self.open.swap(now, Ordering::Relaxed);
        if open != 0 {
            self.add(now - open);
        }
    }

    /// The call that rendered the records returned: closes the open hold, if any.
    pub fn close(&self) {
        // Relaxed: as in `add`.
        let open = self.open.swap(0, Ordering::Relaxed);
        if open != 0 {
            self.add(self.now() - open);
        }
    }

    /// (holds, total ns, longest ns) so far.
    pub fn read(&self) -> (u64, u64, u64) {
        // Relaxed: as in `add`.
        (
            self.count.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
            self.max.load(Ordering::Relaxed),
        )
    }
}

/// The engine's copy of process `pid`'s address space (module docs).
pub fn import(pid: i32) -> Result<Mm, String> {
    let snap =
        vmspace_linux::procfs::read_snapshot(pid).map_err(|e| format!("reading process {pid}: {e}"))?;
    let mut cfg = MmConfig::host();
    cfg.max_map_count = cfg.max_map_count.max(snap.layout.vmas.len() as u64 + 1024);
    Mm::import(&cfg, &snap.layout).map_err(|e| format!("importing process {pid} into the engine: {e:?}"))
}

fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One pass of `file` through `mm`'s reader in `mode`: each read call's duration to `note`, each hold of the
/// mode's lock to `holds` (module docs, "Holds"); returns the VMAs seen (`count_vmas`: for `smaps_rollup`,
/// which shows no record, by a `maps` read after the pass; else 0 for it).
pub fn timed_pass(
    mm: &Mm,
    mode: ReaderMode,
    file: ProcFile,
    holds: &HoldTimer,
    count_vmas: bool,
    note: &mut dyn FnMut(u64),
) -> u64 {
    let stamp = |_: &VmaSnapshot| holds.stamp();
    let plain = mm.reader_with(mode);
    // Only the per-VMA mode's holds are per record; the other modes pay nothing for the clock.
    let per_record = mode == ReaderMode::PerVma && file != ProcFile::Query;
    let reader = if per_record { plain.with_record_hook(&stamp) } else { plain };
    // A whole call is one hold in the mmap-lock mode (and a query is one in the per-VMA mode).
    let call_holds = |ns: u64, query: bool| match mode {
        ReaderMode::MmapLock => holds.add(ns),
        ReaderMode::PerVma if query => holds.add(ns),
        ReaderMode::PerVma => holds.close(),
        ReaderMode::Lockless => {}
    };
    match file {
        ProcFile::Maps | ProcFile::Smaps => {
            let kind = if file == ProcFile::Maps { ProcFileKind::Maps } else { ProcFileKind::Smaps };
            let mut f = reader.open(kind);
            let mut buf = vec![0u8; READ_SIZE];
            let mut vmas = 0;
            loop {
                let t = Instant::now();
                let n = f.read(&mut buf);
                let ns = t.elapsed().as_nanos() as u64;
                call_holds(ns, false);
                note(ns);
                if n == 0 {
                    return vmas;
                }
                let text = &buf[..n];
                vmas += if file == ProcFile::Maps {
                    text.iter().filter(|&&b| b == b'\n').count() as u64
                } else {
                    text.windows(8).filter(|w| *w == b"VmFlags:").count() as u64
                };
            }
        }
        ProcFile::SmapsRollup => {
            let t = Instant::now();
            std::hint::black_box(reader.smaps_rollup());
            let ns = t.elapsed().as_nanos() as u64;
            call_holds(ns, false);
            note(ns);
            if count_vmas { plain.maps().lines().count() as u64 } else { 0 }
        }
        ProcFile::Query => {
            // `query_walk`'s walk, one timed query at a time.
            let (mut addr, mut n) = (0u64, 0u64);
            loop {
                let mut req = QueryRequest::new(PROCMAP_QUERY_COVERING_OR_NEXT_VMA, addr);
                // The engine writes no user memory: any non-zero address stands for the caller's buffer.
                req.vma_name_size = 4096;
                req.vma_name_addr = 0x1000;
                let t = Instant::now();
                let r = reader.query(&req);
                let ns = t.elapsed().as_nanos() as u64;
                call_holds(ns, true);
                note(ns);
                match r {
                    Ok(a) => {
                        addr = a.vma_end;
                        n += 1;
                    }
                    Err(_) => return n,
                }
            }
        }
        ProcFile::None => 0,
    }
}

/// A busy thread of the starved set: nice 0 (a thread's default), pinned to `cpu`, spins until `stop`.
fn spin(cpu: usize, stop: &AtomicBool) -> Result<(), String> {
    sys::pin_to_cpu(cpu).map_err(|e| format!("pinning a busy thread to CPU {cpu}: {e}"))?;
    // Relaxed: a stop flag polled in a spin loop; nothing is published through it.
    while !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
    Ok(())
}

/// The class of the mapper's calls that a pass overlapped: `beside`, or `starved` in a set with busy threads.
pub fn pass_class(busy: usize) -> &'static str {
    if busy == 0 { "beside" } else { "starved" }
}

/// One mode's run of one set (module docs): the reader's per-pass metrics and the mapper's calls by class
/// (`baseline` and [`pass_class`]`(busy)`); `busy` threads starve the reader during its passes.
pub fn run_mode(
    mm: &Mm,
    mode: ReaderMode,
    file: ProcFile,
    passes: usize,
    nice: i32,
    busy: usize,
    layout: &Layout,
) -> Result<(Vec<Metrics>, Metrics), String> {
    let stop = AtomicBool::new(false);
    let spin_stop = AtomicBool::new(false);
    let seq = AtomicU64::new(0);
    let (stop, spin_stop, seq) = (&stop, &spin_stop, &seq);
    let (mapper_cpu, reader_cpu) = (layout.mapper, layout.other(0));
    let classes = ["baseline", pass_class(busy)];
    std::thread::scope(|s| {
        let mapper = s.spawn(move || -> Result<BTreeMap<String, f64>, String> {
            sys::pin_to_cpu(mapper_cpu).map_err(|e| format!("pinning the engine mapper: {e}"))?;
            let mut recs = [LatencyRecorder::prefaulted(), LatencyRecorder::prefaulted()];
            let flags = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
            let mut errors = 0u64;
            // Acquire: pairs with the main thread's Release store of `stop`.
            while !stop.load(Ordering::Acquire) {
                // Acquire (both loads of `seq`): pair with the reader's Release increments around a pass.
                let before = seq.load(Ordering::Acquire);
                let t = Instant::now();
                let r = mm.mmap(0, PAGE_SIZE, Prot::RW, flags, None, 0);
                let ns = t.elapsed().as_nanos() as u64;
                let class = usize::from(before % 2 == 1 || before != seq.load(Ordering::Acquire));
                recs[class].record(ns);
                let Ok(addr) = r else {
                    errors += 1;
                    continue;
                };
                let before = seq.load(Ordering::Acquire);
                let t = Instant::now();
                let r = mm.munmap(addr, PAGE_SIZE);
                let ns = t.elapsed().as_nanos() as u64;
                let class = usize::from(before % 2 == 1 || before != seq.load(Ordering::Acquire));
                recs[class].record(ns);
                errors += u64::from(r.is_err());
                sys::sleep_once(Duration::from_micros(10));
            }
            let mut m = BTreeMap::new();
            for (name, rec) in classes.iter().zip(&recs) {
                let st = rec.stats();
                m.insert(format!("{name}_call_count"), st.count as f64);
                m.insert(format!("{name}_call_mean_ms"), st.mean_ms);
                m.insert(format!("{name}_call_p50_ms"), st.p50_ms);
                m.insert(format!("{name}_call_p99_ms"), st.p99_ms);
                m.insert(format!("{name}_call_max_ms"), st.max_ms);
            }
            m.insert("mapper_errors_count".into(), errors as f64);
            Ok(m)
        });
        let reader = s.spawn(move || -> Result<Vec<BTreeMap<String, f64>>, String> {
            sys::pin_to_cpu(reader_cpu).map_err(|e| format!("pinning the engine reader: {e}"))?;
            sys::set_nice(nice).map_err(|e| format!("setpriority({nice}) of the engine reader: {e}"))?;
            std::thread::sleep(ENGINE_BASELINE);
            std::thread::scope(|bs| {
                let spinners: Vec<_> =
                    (0..busy).map(|_| bs.spawn(move || spin(reader_cpu, spin_stop))).collect();
                let out = passes_of(mm, mode, file, passes, seq);
                // Release: pairs with the spinners' loads; they stop once the passes are over.
                spin_stop.store(true, Ordering::Release);
                for sp in spinners {
                    sp.join().map_err(|_| "a busy thread panicked".to_string())??;
                }
                Ok(out)
            })
        });
        let passes = reader.join().map_err(|_| "the engine reader panicked".to_string());
        // Release: pairs with the mapper's Acquire load of `stop`.
        stop.store(true, Ordering::Release);
        let mapper = mapper.join().map_err(|_| "the engine mapper panicked".to_string());
        Ok((passes??, mapper??))
    })
}

/// The reader's passes (module docs), each made odd in `seq` for its length.
fn passes_of(mm: &Mm, mode: ReaderMode, file: ProcFile, passes: usize, seq: &AtomicU64) -> Vec<Metrics> {
    let mut out = Vec::new();
    for _ in 0..passes {
        if vmspace_linux::child::interrupted() {
            break;
        }
        let (mut chunks, mut total, mut max) = (0u64, 0u64, 0u64);
        let holds = HoldTimer::new();
        // Release: pairs with the mapper's Acquire loads; the pass begins.
        seq.fetch_add(1, Ordering::Release);
        let cpu0 = thread_cpu_ns();
        let t = Instant::now();
        let vmas = timed_pass(mm, mode, file, &holds, true, &mut |ns| {
            chunks += 1;
            total += ns;
            max = max.max(ns);
        });
        let wall = t.elapsed();
        let cpu = thread_cpu_ns() - cpu0;
        // Release: as above; the pass ended.
        seq.fetch_add(1, Ordering::Release);
        let ms = |ns: u64| ns as f64 / 1e6;
        let (n, hold_total, hold_max) = holds.read();
        let of = |m: ReaderMode| if mode == m { ms(hold_max) } else { 0.0 };
        out.push(BTreeMap::from([
            ("chunks_count".to_string(), chunks as f64),
            ("chunk_total_ms".to_string(), ms(total)),
            ("chunk_max_ms".to_string(), ms(max)),
            ("holds_count".to_string(), n as f64),
            ("hold_total_ms".to_string(), ms(hold_total)),
            ("hold_max_ms".to_string(), ms(hold_max)),
            ("mmap_lock_hold_max_ms".to_string(), of(ReaderMode::MmapLock)),
            ("vma_lock_hold_max_ms".to_string(), of(ReaderMode::PerVma)),
            ("reader_cpu_ms".to_string(), ms(cpu)),
            ("pass_wall_ms".to_string(), wall.as_secs_f64() * 1e3),
            ("vmas_count".to_string(), vmas as f64),
        ]));
    }
    out
}

/// The label of a mode's reports for `file` in the set with `busy` busy threads.
pub fn label(mode: ReaderMode, file: ProcFile, busy: usize) -> String {
    match busy {
        0 => format!("engine {} {}", mode.name(), file.name()),
        n => format!("engine {} {} + {n} busy B=0", mode.name(), file.name()),
    }
}

/// Every mode's reports for `file` over `mm`: per mode, the set without busy threads and, when `busy > 0`, the
/// starved set, each a `bench.reader_cost` report (a run per pass) and a `bench.reader_cost.mapper` report
/// (one run), labelled by [`label`]. `on_set(mode, busy)` after each set.
#[allow(clippy::too_many_arguments)]
pub fn run(
    mm: &Mm,
    file: ProcFile,
    passes: usize,
    nice: i32,
    busy: usize,
    layout: &Layout,
    host: &HostInfo,
    on_set: &mut dyn FnMut(ReaderMode, usize),
) -> Result<Vec<Report>, String> {
    let mut out = Vec::new();
    let sets: Vec<usize> = if busy == 0 { vec![0] } else { vec![0, busy] };
    for mode in ReaderMode::ALL {
        for &b in &sets {
            if vmspace_linux::child::interrupted() {
                return Ok(out);
            }
            let (runs, mapper) = run_mode(mm, mode, file, passes, nice, b, layout)?;
            let label = label(mode, file, b);
            let mut r = Report::new("bench.reader_cost", label.clone(), host.clone());
            r.param("side", "engine");
            r.param("mode", mode.name());
            r.param("file", file.name());
            r.param("nice", nice);
            r.param("busy", b);
            r.param("lock", held_lock(mode));
            r.placement.push(Placement { role: "reader".into(), index: 0, cpu: Some(layout.other(0)), nice });
            r.placement.push(Placement {
                role: "mapper".into(),
                index: 0,
                cpu: Some(layout.mapper),
                nice: 0,
            });
            for i in 0..b {
                r.placement.push(Placement {
                    role: "busy".into(),
                    index: i,
                    cpu: Some(layout.other(0)),
                    nice: 0,
                });
            }
            r.notes.push(
                "imported without page contents: the engine's smaps walks empty page tables (Rss 0)"
                    .to_string(),
            );
            r.notes.push(format!(
                "holds: {} (bench reader_cost module docs, \"Holds\")",
                match mode {
                    ReaderMode::MmapLock => "one per read call, the mmap read lock's",
                    ReaderMode::PerVma =>
                        "one per record (per query), a VMA read lock's, timed by the record hook",
                    ReaderMode::Lockless => "none: the lockless reader takes no lock",
                }
            ));
            for run in runs {
                r.push_run(run);
            }
            r.summarise();
            let mut m = Report::new("bench.reader_cost.mapper", label, host.clone());
            m.param("side", "engine");
            m.param("mode", mode.name());
            m.param("file", file.name());
            m.param("busy", b);
            m.push_run(mapper);
            m.summarise();
            out.push(r);
            out.push(m);
            on_set(mode, b);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_reads_our_own_address_space() {
        let mm = import(std::process::id() as i32).unwrap();
        let host = vmspace_linux::hostinfo::gather();
        let layout = Layout::resolve(&host.cpus_usable, None, None).unwrap();
        let lines = mm.reader().maps().lines().count() as f64;
        for (file, busy) in [(ProcFile::Maps, 0), (ProcFile::Smaps, 0), (ProcFile::Maps, 2)] {
            for mode in ReaderMode::ALL {
                let (runs, mapper) = run_mode(&mm, mode, file, 2, 10, busy, &layout).unwrap();
                assert_eq!(runs.len(), 2);
                for r in &runs {
                    // The engine mapper beside the reader maps and unmaps one page: a pass may see it.
                    let n = r["vmas_count"];
                    assert!(
                        n == lines || n == lines + 1.0,
                        "{mode} {file:?}: {n} VMAs read, {lines} before the run"
                    );
                    assert!(r["chunk_total_ms"] > 0.0 && r["chunk_max_ms"] <= r["chunk_total_ms"], "{r:?}");
                    assert!(r["hold_max_ms"] <= r["hold_total_ms"], "{r:?}");
                    // Holds by rule: a chunk per read in the mmap-lock mode, a VMA per record (and the one
                    // record that did not fit a chunk, read again in the next) in the per-VMA mode, none
                    // in the lockless mode.
                    let holds = r["holds_count"];
                    match mode {
                        ReaderMode::MmapLock => assert_eq!(holds, r["chunks_count"], "{r:?}"),
                        ReaderMode::PerVma => {
                            assert!(holds + 1.0 >= n && holds < n + r["chunks_count"], "{r:?}")
                        }
                        ReaderMode::Lockless => assert_eq!((holds, r["hold_total_ms"]), (0.0, 0.0), "{r:?}"),
                    }
                    assert_eq!(r["mmap_lock_hold_max_ms"] > 0.0, mode == ReaderMode::MmapLock, "{r:?}");
                    assert_eq!(r["vma_lock_hold_max_ms"] > 0.0, mode == ReaderMode::PerVma, "{r:?}");
                }
                assert!(mapper["baseline_call_count"] > 0.0, "{mapper:?}");
                let other = if busy == 0 { "starved" } else { "beside" };
                assert!(mapper.contains_key(&format!("{}_call_count", pass_class(busy))), "{mapper:?}");
                assert!(!mapper.contains_key(&format!("{other}_call_count")), "{mapper:?}");
                assert_eq!(mapper["mapper_errors_count"], 0.0);
            }
        }
    }

    #[test]
    fn hold_timer_closes_each_hold() {
        let t = HoldTimer::new();
        t.stamp();
        std::thread::sleep(Duration::from_millis(2));
        t.stamp();
        t.close();
        t.close();
        t.add(5_000_000);
        let (n, total, max) = t.read();
        assert_eq!(n, 3);
        assert_eq!(max, 5_000_000);
        assert!((7_000_000..1_005_000_000).contains(&total), "{total}");
    }
}
