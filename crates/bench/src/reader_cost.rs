//! The engine's half of `vmspace kernel reader-cost`: the address space of the process the agent reads,
//! imported into the engine, read in each [`ReaderMode`] beside an engine mapper thread, so that the same
//! address space shows what would change with per-VMA or lockless readers.
//!
//! # Method
//! [`import`] reads the process with `vmspace_linux::procfs::read_snapshot` (a stable reading: `maps` twice,
//! equal) and builds an engine address space from it with `Mm::import` (maps byte-identical; the pages are not
//! imported, so the engine's `smaps` walks empty page tables and its Rss lines are 0: its time per record is
//! the format's and the walk's, not the kernel's page counting). Then, per mode ([`run_mode`]):
//!
//! - a mapper thread (nice 0, pinned to the layout's mapper CPU) maps a private anonymous page with no hint
//!   (the top-down search) and unmaps it, timing each call, 10 µs apart, as the kernel side's mapper does; each
//!   call is classed `baseline` (no pass overlapped it) or `beside` (a pass did), by a sequence word the
//!   reader makes odd for the length of each pass;
//! - after a baseline of [`ENGINE_BASELINE`], a reader thread (at the agent's nice value, pinned to the other
//!   CPU) makes `passes` passes back to back: `maps` and `smaps` through `ProcReader::open` read with 128 KiB
//!   reads (each `read` renders one page-sized chunk, one `m_start` .. `m_stop`), `smaps_rollup` as one call,
//!   PROCMAP_QUERY as one query per VMA (`crate::contention::query_walk`'s walk); each chunk (query) is timed.
//!
//! Per pass: `chunks_count`, `hold_total_ms`, `hold_max_ms` (the chunks' durations, as on the kernel side),
//! `mmap_lock_hold_max_ms` (the longest chunk in the mmap-lock mode, which holds the mmap read lock for a whole
//! chunk; 0 in the per-VMA mode, whose chunks hold one VMA's lock at a time and the mmap lock only for a step
//! whose VMA is write-locked, and in the lockless mode, which holds no lock), `reader_cpu_ms` (the thread's
//! CPU clock), `pass_wall_ms`, `vmas_count`. The mapper's calls by class in a `bench.reader_cost.mapper`
//! report per mode.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vmspace_linux::contention::ProcFile;
use vmspace_linux::placement::Layout;
use vmspace_linux::sys;
use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, ProcFileKind, Prot, ReaderMode};
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

/// One pass of `file` through `mm`'s reader in `mode`: each chunk's duration to `note`; returns the VMAs seen.
fn pass(mm: &Mm, mode: ReaderMode, file: ProcFile, note: &mut dyn FnMut(u64)) -> u64 {
    let reader = mm.reader_with(mode);
    match file {
        ProcFile::Maps | ProcFile::Smaps => {
            let kind = if file == ProcFile::Maps { ProcFileKind::Maps } else { ProcFileKind::Smaps };
            let mut f = reader.open(kind);
            let mut buf = vec![0u8; READ_SIZE];
            let mut vmas = 0;
            loop {
                let t = Instant::now();
                let n = f.read(&mut buf);
                note(t.elapsed().as_nanos() as u64);
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
            note(t.elapsed().as_nanos() as u64);
            mm.reader_with(mode).maps().lines().count() as u64
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
                note(t.elapsed().as_nanos() as u64);
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

/// One mode's run (module docs): the reader's per-pass metrics and the mapper's calls by class.
pub fn run_mode(
    mm: &Mm,
    mode: ReaderMode,
    file: ProcFile,
    passes: usize,
    nice: i32,
    layout: &Layout,
) -> Result<(Vec<Metrics>, Metrics), String> {
    let stop = AtomicBool::new(false);
    let seq = AtomicU64::new(0);
    let (stop, seq) = (&stop, &seq);
    let (mapper_cpu, reader_cpu) = (layout.mapper, layout.other(0));
    std::thread::scope(|s| {
        let mapper = s.spawn(move || -> Result<BTreeMap<String, f64>, String> {
            sys::pin_to_cpu(mapper_cpu).map_err(|e| format!("pinning the engine mapper: {e}"))?;
            let mut recs = [LatencyRecorder::new(), LatencyRecorder::new()];
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
            for (name, rec) in ["baseline", "beside"].iter().zip(&recs) {
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
            let mut out = Vec::new();
            for _ in 0..passes {
                if vmspace_linux::child::interrupted() {
                    break;
                }
                let (mut chunks, mut total, mut max) = (0u64, 0u64, 0u64);
                // Release: pairs with the mapper's Acquire loads; the pass begins.
                seq.fetch_add(1, Ordering::Release);
                let cpu0 = thread_cpu_ns();
                let t = Instant::now();
                let vmas = pass(mm, mode, file, &mut |ns| {
                    chunks += 1;
                    total += ns;
                    max = max.max(ns);
                });
                let wall = t.elapsed();
                let cpu = thread_cpu_ns() - cpu0;
                // Release: as above; the pass ended.
                seq.fetch_add(1, Ordering::Release);
                let ms = |ns: u64| ns as f64 / 1e6;
                out.push(BTreeMap::from([
                    ("chunks_count".to_string(), chunks as f64),
                    ("hold_total_ms".to_string(), ms(total)),
                    ("hold_max_ms".to_string(), ms(max)),
                    (
                        "mmap_lock_hold_max_ms".to_string(),
                        if mode == ReaderMode::MmapLock { ms(max) } else { 0.0 },
                    ),
                    ("reader_cpu_ms".to_string(), ms(cpu)),
                    ("pass_wall_ms".to_string(), wall.as_secs_f64() * 1e3),
                    ("vmas_count".to_string(), vmas as f64),
                ]));
            }
            Ok(out)
        });
        let passes = reader.join().map_err(|_| "the engine reader panicked".to_string());
        // Release: pairs with the mapper's Acquire load of `stop`.
        stop.store(true, Ordering::Release);
        let mapper = mapper.join().map_err(|_| "the engine mapper panicked".to_string());
        Ok((passes??, mapper??))
    })
}

/// Every mode's reports for `file` over `mm`: `bench.reader_cost` (a run per pass) and
/// `bench.reader_cost.mapper` (one run) per mode, labelled `engine MODE FILE`.
pub fn run(
    mm: &Mm,
    file: ProcFile,
    passes: usize,
    nice: i32,
    layout: &Layout,
    host: &HostInfo,
    on_mode: &mut dyn FnMut(ReaderMode),
) -> Result<Vec<Report>, String> {
    let mut out = Vec::new();
    for mode in ReaderMode::ALL {
        if vmspace_linux::child::interrupted() {
            break;
        }
        let (runs, mapper) = run_mode(mm, mode, file, passes, nice, layout)?;
        let label = format!("engine {} {}", mode.name(), file.name());
        let mut r = Report::new("bench.reader_cost", label.clone(), host.clone());
        r.param("side", "engine");
        r.param("mode", mode.name());
        r.param("file", file.name());
        r.param("nice", nice);
        r.placement.push(Placement { role: "reader".into(), index: 0, cpu: Some(layout.other(0)), nice });
        r.placement.push(Placement { role: "mapper".into(), index: 0, cpu: Some(layout.mapper), nice: 0 });
        r.notes.push(
            "imported without page contents: the engine's smaps walks empty page tables (Rss 0)".to_string(),
        );
        for run in runs {
            r.push_run(run);
        }
        r.summarise();
        let mut m = Report::new("bench.reader_cost.mapper", label, host.clone());
        m.param("side", "engine");
        m.param("mode", mode.name());
        m.param("file", file.name());
        m.push_run(mapper);
        m.summarise();
        out.push(r);
        out.push(m);
        on_mode(mode);
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
        for file in [ProcFile::Maps, ProcFile::Smaps] {
            for mode in ReaderMode::ALL {
                let (runs, mapper) = run_mode(&mm, mode, file, 2, 10, &layout).unwrap();
                assert_eq!(runs.len(), 2);
                for r in &runs {
                    // The engine mapper beside the reader maps and unmaps one page: a pass may see it.
                    let n = r["vmas_count"];
                    assert!(
                        n == lines || n == lines + 1.0,
                        "{mode} {file:?}: {n} VMAs read, {lines} before the run"
                    );
                    assert!(r["hold_total_ms"] > 0.0 && r["hold_max_ms"] <= r["hold_total_ms"], "{r:?}");
                    assert_eq!(r["mmap_lock_hold_max_ms"] > 0.0, mode == ReaderMode::MmapLock);
                }
                assert!(mapper["baseline_call_count"] > 0.0, "{mapper:?}");
                assert_eq!(mapper["mapper_errors_count"], 0.0);
            }
        }
    }
}
