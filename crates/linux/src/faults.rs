//! Page-fault throughput with T threads in one process (the shape of the per-VMA lock series' microbenchmark).
//!
//! Each thread, pinned to `cpus[i % len]`, repeatedly maps a private anonymous region (16 MiB by default,
//! advised `MADV_NOHUGEPAGE` so that every base page faults on its own), writes one byte into every page (one
//! minor fault each), and unmaps it, until the run's time is up; it counts the pages it touched. All threads
//! share one address space, so their faults meet in the VMA tree and the per-VMA locks, and their
//! mmap/munmap calls meet in `mmap_lock`, as in the kernel's page-fault tests. Results: faults per second in
//! total and per thread (mean, min, max across threads), per run; runs are summarised as usual.

use crate::child::{check_interrupted, interrupted};
use crate::hostinfo::HostInfo;
use crate::sys;
use anyhow::{Result, bail};
use std::collections::BTreeMap;
use std::sync::Barrier;
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
        let mut r = Report::new("kernel.faults", format!("T={t}"), host.clone());
        r.param("threads", t);
        r.param("samples", cfg.samples);
        r.param("duration_s", cfg.duration.as_secs_f64());
        r.param("region_mib", cfg.region_mib);
        r.param("madvise", "MADV_NOHUGEPAGE");
        for i in 0..t {
            r.placement.push(Placement {
                role: "thread".into(),
                index: i,
                cpu: Some(cpus[i % cpus.len()]),
                nice: 0,
            });
        }
        if t > cpus.len() {
            r.notes
                .push(format!("{t} threads share {} CPUs: some CPUs run more than one thread", cpus.len()));
        }
        for s in 0..cfg.samples {
            let m = run_once(t, &cpus, cfg.region_mib << 20, cfg.duration)?;
            r.push_run(m);
            on_run(t, s);
        }
        r.summarise();
        reports.push(r);
    }
    Ok(reports)
}

fn run_once(
    threads: usize,
    cpus: &[usize],
    region: usize,
    duration: Duration,
) -> Result<BTreeMap<String, f64>> {
    let page = sys::page_size();
    let barrier = Barrier::new(threads);
    let results: Vec<Result<(u64, f64), rustix::io::Errno>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let barrier = &barrier;
                let cpu = cpus[i % cpus.len()];
                s.spawn(move || -> Result<(u64, f64), rustix::io::Errno> {
                    let pinned = sys::pin_to_cpu(cpu);
                    barrier.wait();
                    pinned?;
                    let rw = sys::prot(true, true, false);
                    let start = Instant::now();
                    let mut faults = 0u64;
                    while start.elapsed() < duration && !interrupted() {
                        let a = sys::map_anon(region, rw, false)?;
                        // SAFETY: `a` is a fresh private mapping of `region` bytes owned by this thread alone.
                        unsafe {
                            let advised = sys::no_huge_pages(a, region);
                            faults += sys::touch_pages(a, region, page) as u64;
                            sys::unmap(a, region)?;
                            advised?;
                        }
                    }
                    Ok((faults, start.elapsed().as_secs_f64()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(Err(rustix::io::Errno::FAULT))).collect()
    });
    check_interrupted()?;
    let mut per_thread = Vec::new();
    let mut total = 0.0;
    for r in results {
        let (faults, secs) = r?;
        let rate = faults as f64 / secs;
        per_thread.push(rate);
        total += rate;
    }
    let mut m = BTreeMap::new();
    m.insert("faults_per_s".to_string(), total);
    m.insert("faults_per_s_per_thread".to_string(), total / threads as f64);
    m.insert(
        "faults_per_s_slowest_thread".to_string(),
        per_thread.iter().copied().fold(f64::INFINITY, f64::min),
    );
    m.insert("faults_per_s_fastest_thread".to_string(), per_thread.iter().copied().fold(0.0, f64::max));
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
}
