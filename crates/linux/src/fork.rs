//! Fork rate against the number of VMAs (the `__mt_dup` series' experiment).
//!
//! For each count N, the process adds N single-page VMAs: it maps N pages read-only in one call and makes every
//! other page read-write, so no two neighbours can merge (N is exact: the region becomes N VMAs). Then, for the
//! run's duration, it forks a child that exits at once (`_exit(0)`) and waits for it, again and again. Results:
//! forks per second, forks per 10 s (the unit of the `__mt_dup` patch series' fork benchmark, docs/SOURCES.md),
//! and VMAs duplicated per second (= forks per second x all VMAs of the process, counted from `/proc/self/maps`
//! after the setup; the series' "VMAs * forks/10s"). The pages are never touched, so fork copies VMAs and the
//! tree but no page tables. The forking thread is pinned to one CPU during the runs (the series' benchmark used
//! CPU binding) and its affinity restored afterwards.
//!
//! The parent also times the `fork()` call alone (it returns in the parent once `dup_mmap` has copied
//! everything and the child exists; forker and child share one CPU, and the scheduler may run the child's exit
//! before the call returns, which then counts in it): `fork_call_us` and `vmas_copied_per_s_in_fork` (all VMAs over that time), the copy without the
//! child's exit and the parent's wait.
//!
//! The count is checked against `vm.max_map_count` first: a count that cannot fit is an error naming the limit.
//!
//! [`run_count_with`] can also give every extra VMA one faulted page: the region is mapped read-write, one byte
//! is written into each page (one anonymous fault each, so the region gets its anon_vma and one PTE per page),
//! and then every other page is made read-only, which splits it into the same N VMAs. Fork then also runs
//! `anon_vma_fork` for each VMA and `copy_page_range` write-protects each page for copy-on-write
//! (`mm/memory.c: copy_present_pte`). The report's parameters say how many bytes of page tables the faulted
//! pages added to the process (`VmPTE` of `/proc/self/status`, before and after).

use crate::child::check_interrupted;
use crate::hostinfo::HostInfo;
use crate::sys;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use vmspace_results::report::{Placement, Report};

/// The extra VMA counts of the `__mt_dup` series' fork-rate table (docs/SOURCES.md), one report each; the table
/// goes on to 1,638,400, and by default only the counts that fit under `max_map_count` run ([`default_counts`]).
pub const SERIES_COUNTS: [usize; 14] =
    [0, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200, 102400, 204800, 409600];

/// The experiment's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Extra VMA counts (one report each).
    pub vmas: Vec<usize>,
    /// Runs per count.
    pub samples: usize,
    /// Length of each run.
    pub duration: Duration,
    /// The CPU to fork on (default: the last usable CPU).
    pub cpu: Option<usize>,
}

/// Head-room kept below `max_map_count` for the process's own VMAs and their growth.
pub const HEADROOM: usize = 200;

/// The counts of [`SERIES_COUNTS`] that fit under `max_map_count` with [`HEADROOM`].
pub fn default_counts(max_map_count: Option<u64>) -> Vec<usize> {
    let limit = max_map_count.unwrap_or(65530) as usize;
    SERIES_COUNTS.iter().copied().filter(|&n| n + HEADROOM <= limit).collect()
}

/// Counts the VMAs of this process (lines of /proc/self/maps, minus the gate area).
pub fn count_own_vmas() -> Result<usize> {
    let t = std::fs::read_to_string("/proc/self/maps").context("read /proc/self/maps")?;
    Ok(t.lines().filter(|l| !l.ends_with("[vsyscall]")).count())
}

/// Runs every count; `on_run(n, sample)` after each run.
pub fn run(cfg: &Config, host: &HostInfo, on_run: &mut dyn FnMut(usize, usize)) -> Result<Vec<Report>> {
    if cfg.vmas.is_empty() {
        bail!("--vmas must list at least one count");
    }
    if cfg.samples == 0 || cfg.samples > 10_000 {
        bail!("--samples must be 1..=10000");
    }
    if cfg.duration < Duration::from_millis(10) || cfg.duration > Duration::from_secs(24 * 3600) {
        bail!("--duration must be between 0.01 s and 24 h");
    }
    let limit = host.max_map_count.unwrap_or(65530) as usize;
    let own = count_own_vmas()?;
    if let Some(&n) = cfg.vmas.iter().find(|&&n| n.saturating_add(own).saturating_add(HEADROOM) > limit) {
        bail!(
            "{n} extra VMAs do not fit: this process already has {own}, vm.max_map_count is {limit} (keeping \
             {HEADROOM} spare); the largest count that fits is {}",
            limit.saturating_sub(own + HEADROOM)
        );
    }
    let cpu = match cfg.cpu {
        Some(c) if !host.cpus_usable.contains(&c) => {
            bail!("CPU {c} is not usable here ({:?})", host.cpus_usable)
        }
        Some(c) => c,
        None => *host.cpus_usable.last().context("no usable CPU")?,
    };
    let saved = rustix::thread::sched_getaffinity(None)?;
    sys::pin_to_cpu(cpu)?;
    let result = (|| {
        let mut reports = Vec::new();
        for &n in &cfg.vmas {
            reports.push(run_count(cfg, host, n, cpu, on_run)?);
        }
        Ok(reports)
    })();
    let _ = rustix::thread::sched_setaffinity(None, &saved);
    result
}

/// N single-page VMAs of this process that are unmapped on drop (also `vmspace bench contention`'s kernel
/// reader-throughput address space).
pub struct ExtraVmas {
    addr: usize,
    len: usize,
}

impl ExtraVmas {
    /// `n` single-page VMAs; with `pages`, each with its page faulted in (module docs).
    pub fn with_pages(n: usize, pages: bool) -> Result<Self> {
        let page = sys::page_size();
        if n == 0 {
            return Ok(Self { addr: 0, len: 0 });
        }
        let len = n * page;
        let addr = sys::map_anon(len, sys::prot(true, pages, false), false)?;
        let me = Self { addr, len };
        if pages {
            // SAFETY: the region was just mapped read-write and only this guard owns it.
            unsafe { sys::touch_pages(addr, len, page) };
        }
        let (other, first) =
            if pages { (sys::prot(true, false, false), 0) } else { (sys::prot(true, true, false), 1) };
        for i in (first..n).step_by(2) {
            check_interrupted()?;
            // SAFETY: the page lies inside the region mapped above, which only this guard owns.
            unsafe { sys::protect(addr + i * page, page, other) }
                .with_context(|| format!("mprotect while making {n} VMAs"))?;
        }
        Ok(me)
    }
}

/// `VmPTE` of `/proc/self/status` in bytes: the page tables of this process.
pub fn page_table_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with("VmPTE:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

impl Drop for ExtraVmas {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the region was mapped by `new` and nothing references it.
            let _ = unsafe { sys::unmap(self.addr, self.len) };
        }
    }
}

/// One count of [`run`] on its own (module docs), with `pages`: every extra VMA with one faulted page. Checks
/// the count against `vm.max_map_count` and the CPU as [`run`] does, pins the calling thread to the CPU
/// meanwhile and restores its affinity after; `on_run(n, sample)` after each run. The report is
/// `kernel.fork` with the parameter `pages_per_vma` (0 or 1) and, with pages, `page_table_bytes_added` (the
/// growth of `VmPTE` over the setup) and `pages_faulted`.
pub fn run_count_with(
    cfg: &Config,
    host: &HostInfo,
    n: usize,
    pages: bool,
    on_run: &mut dyn FnMut(usize, usize),
) -> Result<Report> {
    let limit = host.max_map_count.unwrap_or(65530) as usize;
    let own = count_own_vmas()?;
    if n.saturating_add(own).saturating_add(HEADROOM) > limit {
        bail!("{n} extra VMAs do not fit: this process already has {own}, vm.max_map_count is {limit}");
    }
    let cpu = match cfg.cpu {
        Some(c) if !host.cpus_usable.contains(&c) => bail!("CPU {c} is not usable here"),
        Some(c) => c,
        None => *host.cpus_usable.last().context("no usable CPU")?,
    };
    let saved = rustix::thread::sched_getaffinity(None)?;
    sys::pin_to_cpu(cpu)?;
    let result = run_count_pages(cfg, host, n, cpu, pages, on_run);
    let _ = rustix::thread::sched_setaffinity(None, &saved);
    result
}

fn run_count(
    cfg: &Config,
    host: &HostInfo,
    n: usize,
    cpu: usize,
    on_run: &mut dyn FnMut(usize, usize),
) -> Result<Report> {
    run_count_pages(cfg, host, n, cpu, false, on_run)
}

fn run_count_pages(
    cfg: &Config,
    host: &HostInfo,
    n: usize,
    cpu: usize,
    pages: bool,
    on_run: &mut dyn FnMut(usize, usize),
) -> Result<Report> {
    let pte_before = page_table_bytes();
    let extra = ExtraVmas::with_pages(n, pages)?;
    let pte_after = page_table_bytes();
    let total = count_own_vmas()?;
    let mut r = Report::new("kernel.fork", format!("+{n} VMAs"), host.clone());
    if pages {
        r.param("pages_per_vma", 1);
        r.param("pages_faulted", n);
        if let (Some(b), Some(a)) = (pte_before, pte_after) {
            r.param("page_table_bytes_added", a.saturating_sub(b));
        }
    } else {
        r.param("pages_per_vma", 0);
    }
    r.param("extra_vmas", n);
    r.param("total_vmas", total);
    r.param("samples", cfg.samples);
    r.param("duration_s", cfg.duration.as_secs_f64());
    r.placement.push(Placement { role: "forker".into(), index: 0, cpu: Some(cpu), nice: 0 });
    r.placement.push(Placement { role: "child".into(), index: 0, cpu: Some(cpu), nice: 0 });
    for s in 0..cfg.samples {
        let start = Instant::now();
        let mut forks = 0u64;
        let mut in_fork = Duration::ZERO;
        while start.elapsed() < cfg.duration {
            check_interrupted()?;
            let call = Instant::now();
            // SAFETY: the child only calls `_exit`, which is async-signal-safe, so forking from a possibly
            // multi-threaded process is sound.
            let pid = unsafe { libc::fork() };
            in_fork += call.elapsed();
            if pid < 0 {
                bail!("fork failed: {}", std::io::Error::last_os_error());
            }
            if pid == 0 {
                // SAFETY: ends the child at once, without running any of the parent's code.
                unsafe { libc::_exit(0) };
            }
            let pid = rustix::process::Pid::from_raw(pid).context("fork returned a bad pid")?;
            while let Err(rustix::io::Errno::INTR) =
                rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
            {}
            forks += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        let rate = forks as f64 / secs;
        r.push_run(BTreeMap::from([
            ("forks_count".to_string(), forks as f64),
            ("forks_per_s".to_string(), rate),
            ("forks_per_10s".to_string(), rate * 10.0),
            ("fork_mean_us".to_string(), secs * 1e6 / forks.max(1) as f64),
            ("vmas_duplicated_per_s".to_string(), rate * total as f64),
            ("fork_call_us".to_string(), in_fork.as_secs_f64() * 1e6 / forks.max(1) as f64),
            (
                "vmas_copied_per_s_in_fork".to_string(),
                total as f64 * forks as f64 / in_fork.as_secs_f64().max(1e-9),
            ),
        ]));
        on_run(n, s);
    }
    drop(extra);
    r.summarise();
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fit_the_limit() {
        assert_eq!(
            default_counts(Some(65530)),
            vec![0, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200]
        );
        assert_eq!(default_counts(Some(1000)), vec![0, 100, 200, 400, 800]);
        assert_eq!(default_counts(Some(999)), vec![0, 100, 200, 400]);
    }

    #[test]
    fn extra_vmas_are_exact() {
        let e = ExtraVmas::with_pages(101, false).unwrap();
        // Count the VMAs inside the region (other test threads may map elsewhere meanwhile).
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let inside = crate::maps::parse_maps(&text)
            .unwrap()
            .into_iter()
            .filter(|l| l.start >= e.addr as u64 && l.end <= (e.addr + e.len) as u64)
            .count();
        assert_eq!(inside, 101);
    }

    #[test]
    fn forks_and_rejects_too_many() {
        let host = crate::hostinfo::gather();
        let cfg = Config { vmas: vec![0, 1000], samples: 1, duration: Duration::from_millis(200), cpu: None };
        let reports = run(&cfg, &host, &mut |_, _| {}).unwrap();
        let f0 = reports[0].metric("forks_per_s").unwrap().median;
        let f1 = reports[1].metric("forks_per_s").unwrap().median;
        assert!(f0 > 10.0 && f1 > 1.0, "{f0} {f1}");
        assert!(reports[1].metric("vmas_duplicated_per_s").unwrap().median > f1 * 1000.0);
        let too_many = Config { vmas: vec![10_000_000], ..cfg.clone() };
        assert!(run(&too_many, &host, &mut |_, _| {}).is_err());
        assert!(run_count_with(&cfg, &host, 10_000_000, true, &mut |_, _| {}).is_err());
    }

    #[test]
    fn extra_vmas_with_pages_are_exact_and_faulted() {
        let e = ExtraVmas::with_pages(101, true).unwrap();
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let inside = crate::maps::parse_maps(&text)
            .unwrap()
            .into_iter()
            .filter(|l| l.start >= e.addr as u64 && l.end <= (e.addr + e.len) as u64)
            .count();
        assert_eq!(inside, 101);
        let mut vec = vec![0u8; 101];
        // SAFETY: the region is mapped and `vec` has one byte per page.
        let r = unsafe { libc::mincore(e.addr as *mut _, e.len, vec.as_mut_ptr()) };
        assert_eq!(r, 0);
        assert!(vec.iter().all(|b| b & 1 == 1), "every page is resident");
        let host = crate::hostinfo::gather();
        let cfg = Config { vmas: vec![], samples: 1, duration: Duration::from_millis(100), cpu: None };
        let rep = run_count_with(&cfg, &host, 500, true, &mut |_, _| {}).unwrap();
        assert_eq!(rep.parameters["pages_per_vma"], 1);
        assert!(rep.metric("forks_per_s").unwrap().median > 1.0);
    }
}
