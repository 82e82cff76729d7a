//! Page-fault throughput with T threads in one process (the shape of the per-VMA lock series' microbenchmark).
//!
//! Each thread, pinned to `cpus[i % len]`, repeatedly maps a private anonymous region (16 MiB by default,
//! advised `MADV_NOHUGEPAGE` so that every base page faults on its own), writes one byte into every page (one
//! minor fault each), and unmaps it, until the run's time is up; it counts the pages it touched. All threads
//! share one address space, so their faults meet in the VMA tree and the per-VMA locks, and their
//! mmap/munmap calls meet in `mmap_lock`, as in the kernel's page-fault tests. Results: faults per second in
//! total and per thread (mean, min, max across threads), per run; runs are summarised as usual.
//!
//! Each run also reads every thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`): faults per CPU-second of the
//! faulting threads (`faults_per_cpu_s_per_thread`) and the share of the run each had a CPU
//! (`worker_cpu_share`) tell lock waits and scheduling apart from the fault path's own cost when threads
//! outnumber CPUs.
//!
//! Where the regions go ([`Regions`]): by default each thread's mmap has no hint, so the kernel places the
//! regions next to each other (top-down) and, being alike, they merge into one VMA, as in the per-VMA lock
//! series' test: every thread's faults then take the same VMA's lock, whose reference count is one cache line
//! all threads write. With [`Regions::apart`] thread i asks for its own address ([`Regions::hint`], 1 TiB apart),
//! so that each thread has a VMA of its own and the threads share no per-VMA lock.
//!
//! [`measure`] can add a *mapper*: one more thread of the same process that maps and unmaps one read-only
//! anonymous page (no hint, so the kernel places it; read-only, so it never merges with the writable regions of
//! the faulting threads) in a loop until they finish. Every one of its calls takes `mmap_lock` for writing:
//! the interference the per-VMA lock series removed from page faults (`mm/memory.c: lock_vma_under_rcu`
//! skips `mmap_lock` unless the VMA itself is being changed). It is pinned to the CPU after the faulting
//! threads' (`cpus[threads % len]`), and reports `mapper_pairs_per_s` and `mapper_cpu_share`.

use crate::child::{check_interrupted, interrupted};
use crate::hostinfo::HostInfo;
use crate::sys;
use anyhow::{Result, bail};
use std::collections::BTreeMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vmspace_results::report::{Placement, Report};

/// The experiment's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Thread counts to measure (one report each).
    pub threads: Vec<usize>,
    /// Runs per thread count.
    pub samples: usize,
    /// Length of each run.
    pub duration: Duration,
    /// Size of each thread's region, MiB.
    pub region_mib: usize,
    /// Each thread's region at its own hint, 1 TiB from the others' (module docs).
    pub apart: bool,
    /// CPUs the threads rotate over (default: all usable).
    pub cpus: Option<Vec<usize>>,
}

impl Config {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<()> {
        if self.threads.is_empty() || self.threads.iter().any(|&t| t == 0 || t > 1024) {
            bail!("--threads must list counts in 1..=1024");
        }
        if self.samples == 0 || self.samples > 10_000 {
            bail!("--samples must be 1..=10000");
        }
        if self.duration < Duration::from_millis(10) || self.duration > Duration::from_secs(24 * 3600) {
            bail!("--duration must be between 0.01 s and 24 h");
        }
        if self.region_mib == 0 || self.region_mib > 1 << 16 {
            bail!("--region-mib must be 1..=65536");
        }
        Ok(())
    }
}

/// Runs every thread count; `on_run(t, sample)` after each run.
pub fn run(cfg: &Config, host: &HostInfo, on_run: &mut dyn FnMut(usize, usize)) -> Result<Vec<Report>> {
    run_with(cfg, false, host, on_run)
}

/// [`run`], with a mapper thread beside the faulting threads in every run if `mapper` (module docs): each
/// report then has the parameter `mapper` true, a `mapper` placement and the mapper's metrics.
pub fn run_with(
    cfg: &Config,
    mapper: bool,
    host: &HostInfo,
    on_run: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Report>> {
    cfg.validate()?;
    let cpus = match &cfg.cpus {
        Some(c) => {
            if let Some(bad) = c.iter().find(|x| !host.cpus_usable.contains(x)) {
                bail!("CPU {bad} is not usable here (usable: {:?})", host.cpus_usable);
            }
            c.clone()
        }
        None => host.cpus_usable.clone(),
    };
    if cpus.is_empty() {
        bail!("no usable CPU");
    }
    let mut reports = Vec::new();
    for &t in &cfg.threads {
        let label = if mapper { format!("T={t} +mapper") } else { format!("T={t}") };
        let mut r = Report::new("kernel.faults", label, host.clone());
        r.param("threads", t);
        r.param("mapper", mapper);
        r.param("samples", cfg.samples);
        r.param("duration_s", cfg.duration.as_secs_f64());
        r.param("region_mib", cfg.region_mib);
        r.param("regions_apart", cfg.apart);
        r.param("madvise", "MADV_NOHUGEPAGE");
        for i in 0..t {
            r.placement.push(Placement {
                role: "thread".into(),
                index: i,
                cpu: Some(cpus[i % cpus.len()]),
                nice: 0,
            });
        }
        if mapper {
            r.placement.push(Placement {
                role: "mapper".into(),
                index: 0,
                cpu: Some(cpus[t % cpus.len()]),
                nice: 0,
            });
        }
        if t + usize::from(mapper) > cpus.len() && mapper {
            r.notes.push(format!(
                "{t} threads and the mapper share {} CPUs: some CPUs run more than one thread",
                cpus.len()
            ));
        } else if t > cpus.len() {
            r.notes
                .push(format!("{t} threads share {} CPUs: some CPUs run more than one thread", cpus.len()));
        }
        for s in 0..cfg.samples {
            let regions = Regions { bytes: cfg.region_mib << 20, apart: cfg.apart };
            let m = measure(t, &cpus, regions, cfg.duration, mapper)?;
            r.push_run(m);
            on_run(t, s);
        }
        r.summarise();
        reports.push(r);
    }
    Ok(reports)
}

/// The calling thread's CPU time so far, in seconds (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// What one faulting thread did in a run.
struct Worker {
    faults: u64,
    wall_s: f64,
    cpu_s: f64,
    /// Time in its own mmap, madvise and munmap calls.
    calls_s: f64,
}

/// The faulting threads' regions (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regions {
    /// Bytes per region.
    pub bytes: usize,
    /// Each thread's region at its own hint instead of wherever the kernel places it.
    pub apart: bool,
}

impl Regions {
    /// First hint of [`Regions::apart`]: 16 TiB, far below the top-down placement's region near the stack.
    const APART_BASE: usize = 1 << 44;

    /// Where thread `i` asks for its region: 0 (no hint), or 16 TiB + i TiB when apart.
    pub fn hint(&self, i: usize) -> usize {
        if self.apart { Self::APART_BASE + (i << 40) } else { 0 }
    }
}

/// One run (module docs): `threads` threads on `cpus` (thread i on `cpus[i % len]`), each mapping, touching
/// and unmapping `region` bytes for `duration`; with `mapper`, one more thread mapping and unmapping a page
/// meanwhile. Metrics: `faults_per_s` (all threads), `faults_per_s_per_thread`, `faults_per_s_slowest_thread`,
/// `faults_per_s_fastest_thread`, `faults_per_cpu_s_per_thread`, `worker_cpu_share`, `map_calls_share` (the
/// share of the run each thread spent in its own mmap, madvise and munmap calls), and with a mapper
/// `mapper_pairs_per_s` and `mapper_cpu_share`.
pub fn measure(
    threads: usize,
    cpus: &[usize],
    regions: Regions,
    duration: Duration,
    mapper: bool,
) -> Result<BTreeMap<String, f64>> {
    let region = regions.bytes;
    if threads == 0 || cpus.is_empty() {
        bail!("a fault run needs at least one thread and one CPU");
    }
    let page = sys::page_size();
    let barrier = Barrier::new(threads + usize::from(mapper));
    // Set by the last faulting thread to finish; Relaxed: a stop flag, nothing is published through it.
    let running = AtomicBool::new(true);
    type Mapped = Result<(u64, f64, f64), rustix::io::Errno>;
    let (results, mapped): (Vec<Result<Worker, rustix::io::Errno>>, Option<Mapped>) =
        std::thread::scope(|s| {
            let mapper_handle = mapper.then(|| {
                let (barrier, running) = (&barrier, &running);
                let cpu = cpus[threads % cpus.len()];
                s.spawn(move || -> Mapped {
                    let pinned = sys::pin_to_cpu(cpu);
                    barrier.wait();
                    pinned?;
                    let (start, cpu0) = (Instant::now(), thread_cpu_s());
                    let mut pairs = 0u64;
                    let ro = sys::prot(true, false, false);
                    while running.load(Ordering::Relaxed) {
                        let a = sys::map_anon(page, ro, false)?;
                        // SAFETY: `a` is the page just mapped by this thread; nothing refers into it.
                        unsafe { sys::unmap(a, page)? };
                        pairs += 1;
                    }
                    Ok((pairs, start.elapsed().as_secs_f64(), thread_cpu_s() - cpu0))
                })
            });
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let barrier = &barrier;
                    let cpu = cpus[i % cpus.len()];
                    s.spawn(move || -> Result<Worker, rustix::io::Errno> {
                        let pinned = sys::pin_to_cpu(cpu);
                        barrier.wait();
                        pinned?;
                        let rw = sys::prot(true, true, false);
                        let (start, cpu0) = (Instant::now(), thread_cpu_s());
                        let mut faults = 0u64;
                        let mut calls = Duration::ZERO;
                        while start.elapsed() < duration && !interrupted() {
                            let t = Instant::now();
                            let a = sys::map_anon_near(regions.hint(i), region, rw)?;
                            // SAFETY: `a` is a fresh private mapping of `region` bytes owned by this thread alone.
                            unsafe {
                                let advised = sys::no_huge_pages(a, region);
                                calls += t.elapsed();
                                faults += sys::touch_pages(a, region, page) as u64;
                                let t = Instant::now();
                                sys::unmap(a, region)?;
                                calls += t.elapsed();
                                advised?;
                            }
                        }
                        Ok(Worker {
                            faults,
                            wall_s: start.elapsed().as_secs_f64(),
                            cpu_s: thread_cpu_s() - cpu0,
                            calls_s: calls.as_secs_f64(),
                        })
                    })
                })
                .collect();
            let results: Vec<_> =
                handles.into_iter().map(|h| h.join().unwrap_or(Err(rustix::io::Errno::FAULT))).collect();
            running.store(false, Ordering::Relaxed);
            let mapped = mapper_handle.map(|h| h.join().unwrap_or(Err(rustix::io::Errno::FAULT)));
            (results, mapped)
        });
    check_interrupted()?;
    let mut per_thread = Vec::new();
    let (mut total, mut faults, mut cpu_s, mut share, mut calls) = (0.0, 0u64, 0.0, 0.0, 0.0);
    for r in results {
        let w = r?;
        let rate = w.faults as f64 / w.wall_s;
        per_thread.push(rate);
        total += rate;
        faults += w.faults;
        cpu_s += w.cpu_s;
        share += w.cpu_s / w.wall_s;
        calls += w.calls_s / w.wall_s;
    }
    let mut m = BTreeMap::new();
    m.insert("faults_per_s".to_string(), total);
    m.insert("faults_per_s_per_thread".to_string(), total / threads as f64);
    m.insert(
        "faults_per_s_slowest_thread".to_string(),
        per_thread.iter().copied().fold(f64::INFINITY, f64::min),
    );
    m.insert("faults_per_s_fastest_thread".to_string(), per_thread.iter().copied().fold(0.0, f64::max));
    m.insert("faults_per_cpu_s_per_thread".to_string(), faults as f64 / cpu_s.max(1e-9));
    m.insert("worker_cpu_share".to_string(), share / threads as f64);
    m.insert("map_calls_share".to_string(), calls / threads as f64);
    if let Some(mapped) = mapped {
        let (pairs, wall, cpu) = mapped?;
        m.insert("mapper_pairs_per_s".to_string(), pairs as f64 / wall.max(1e-9));
        m.insert("mapper_cpu_share".to_string(), cpu / wall.max(1e-9));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let ok = Config {
            threads: vec![1],
            samples: 1,
            duration: Duration::from_secs(1),
            region_mib: 16,
            apart: false,
            cpus: None,
        };
        assert!(ok.validate().is_ok());
        assert!(Config { threads: vec![], ..ok.clone() }.validate().is_err());
        assert!(Config { threads: vec![0], ..ok.clone() }.validate().is_err());
        assert!(Config { samples: 0, ..ok.clone() }.validate().is_err());
        assert!(Config { region_mib: 0, ..ok.clone() }.validate().is_err());
        let host = crate::hostinfo::gather();
        assert!(run(&Config { cpus: Some(vec![9999]), ..ok }, &host, &mut |_, _| {}).is_err());
    }

    #[test]
    fn one_and_two_threads_fault() {
        let host = crate::hostinfo::gather();
        let cfg = Config {
            threads: vec![1, 2],
            samples: 1,
            duration: Duration::from_millis(200),
            region_mib: 4,
            apart: false,
            cpus: None,
        };
        let reports = run(&cfg, &host, &mut |_, _| {}).unwrap();
        assert_eq!(reports.len(), 2);
        for r in &reports {
            let s = r.metric("faults_per_s").unwrap();
            assert!(s.min > 1000.0, "{}: {s:?}", r.label);
            let slow = r.metric("faults_per_s_slowest_thread").unwrap().median;
            let fast = r.metric("faults_per_s_fastest_thread").unwrap().median;
            assert!(slow <= fast);
        }
        assert_eq!(reports[1].placement.len(), 2);
    }

    #[test]
    fn a_mapper_runs_beside_the_faulting_threads() {
        let host = crate::hostinfo::gather();
        let m = measure(
            1,
            &host.cpus_usable,
            Regions { bytes: 4 << 20, apart: false },
            Duration::from_millis(200),
            true,
        )
        .unwrap();
        assert!(m["faults_per_s"] > 1000.0, "{m:?}");
        assert!(m["mapper_pairs_per_s"] > 100.0, "{m:?}");
        let share = m["worker_cpu_share"];
        assert!(share > 0.0 && share <= 1.05, "{m:?}");
        assert!(m["faults_per_cpu_s_per_thread"] >= m["faults_per_s_per_thread"] * 0.95, "{m:?}");
        let without = measure(
            1,
            &host.cpus_usable,
            Regions { bytes: 4 << 20, apart: true },
            Duration::from_millis(100),
            false,
        )
        .unwrap();
        assert!(!without.contains_key("mapper_pairs_per_s"));
    }
}
