//! Was the machine busy? Load averages, CPU steal and the CPU time other work took during each phase.
//!
//! # Method
//! A [`Sample`] reads `/proc/loadavg` (1, 5 and 15-minute load averages), the aggregate `cpu` line of
//! `/proc/stat` (ticks of user, nice, system, idle, iowait, irq, softirq, steal time over all online CPUs, in
//! `USER_HZ` units) and this process's own CPU time with `getrusage` (`RUSAGE_SELF` plus `RUSAGE_CHILDREN`:
//! the probe's children are reaped before a phase ends, so their time is counted). Between two samples:
//!
//! - **other work** = (busy ticks of all CPUs / `USER_HZ` - this process's CPU seconds) / (elapsed seconds x
//!   online CPUs): the share of the machine's CPU capacity that something else used while the phase ran.
//!   Busy ticks are user + nice + system + irq + softirq (guest time is already inside user);
//! - **steal** = steal ticks / all ticks: the share of time the hypervisor ran someone else on our virtual
//!   CPUs (0 on bare metal; unknown when `/proc/stat` has no steal column).
//!
//! The load average is what people know, but it counts this run's own threads and children, and it decays
//! over minutes, so the per-phase *other work* is what decides the warnings: [`BUSY_OTHERS_PCT`] of the
//! capacity or more, or [`BUSY_STEAL_PCT`] of steal, during a phase marks its figures as disturbed.

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Other work at or above this share of the CPU capacity during a phase disturbs its timings (percent).
pub const BUSY_OTHERS_PCT: f64 = 10.0;
/// CPU steal at or above this share of the time during a phase disturbs its timings (percent).
pub const BUSY_STEAL_PCT: f64 = 2.0;
/// A 1-minute load average at the start above this many runnable tasks per usable CPU is reported as busy.
pub const BUSY_LOAD_PER_CPU: f64 = 0.5;

/// The aggregate CPU ticks of `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    /// user + nice + system + irq + softirq.
    pub busy: u64,
    /// Every column (idle and iowait included).
    pub total: u64,
    /// The steal column, if present.
    pub steal: Option<u64>,
}

impl CpuTicks {
    /// Parses the `cpu ` line of `/proc/stat` text.
    pub fn parse(stat: &str) -> Option<CpuTicks> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().ok()).collect::<Option<_>>()?;
        if v.len() < 4 {
            return None;
        }
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal guest guest_nice; guest time is inside user already.
        let busy = at(0) + at(1) + at(2) + at(5) + at(6);
        let total = (0..8.min(v.len())).map(at).sum();
        Some(CpuTicks { busy, total, steal: v.get(7).copied() })
    }
}

/// The machine's state at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    at: Instant,
    /// The three load averages.
    pub load: Option<[f64; 3]>,
    cpu: Option<CpuTicks>,
    own_cpu_s: f64,
}

/// The 1, 5, 15-minute load averages of `/proc/loadavg` text.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// This process's CPU time and its reaped children's, in seconds.
fn own_cpu_s() -> f64 {
    let secs = |who| {
        // SAFETY: `rusage` is plain data for which all-zero bytes are valid; getrusage fills it.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid, writable rusage.
        if unsafe { libc::getrusage(who, &mut u) } != 0 {
            return 0.0;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    secs(libc::RUSAGE_SELF) + secs(libc::RUSAGE_CHILDREN)
}

/// Clock ticks per second of `/proc/stat`.
fn user_hz() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// Samples the machine now.
pub fn sample() -> Sample {
    Sample {
        at: Instant::now(),
        load: std::fs::read_to_string("/proc/loadavg").ok().as_deref().and_then(parse_loadavg),
        cpu: std::fs::read_to_string("/proc/stat").ok().as_deref().and_then(CpuTicks::parse),
        own_cpu_s: own_cpu_s(),
    }
}

/// What happened on the machine between two samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Wall-clock seconds.
    pub elapsed_s: f64,
    /// 1-minute load average at the start.
    pub load1_start: Option<f64>,
    /// 1-minute load average at the end.
    pub load1_end: Option<f64>,
    /// Share of the CPU capacity that other work used, percent.
    pub others_pct: Option<f64>,
    /// Share of the time stolen by the hypervisor, percent.
    pub steal_pct: Option<f64>,
}

impl Interval {
    /// The interval from `a` to `b`.
    pub fn between(a: &Sample, b: &Sample) -> Interval {
        let elapsed_s = b.at.duration_since(a.at).as_secs_f64();
        let (mut others_pct, mut steal_pct) = (None, None);
        if let (Some(x), Some(y)) = (a.cpu, b.cpu) {
            let total = y.total.saturating_sub(x.total) as f64;
            let busy = y.busy.saturating_sub(x.busy) as f64;
            // The capacity in ticks is the total of all columns (all online CPUs), whatever their number.
            if total > 0.0 {
                let hz = user_hz();
                let others = busy / hz - (b.own_cpu_s - a.own_cpu_s);
                others_pct = Some((100.0 * others * hz / total).clamp(0.0, 100.0));
                if let (Some(s0), Some(s1)) = (x.steal, y.steal) {
                    steal_pct = Some(100.0 * s1.saturating_sub(s0) as f64 / total);
                }
            }
        }
        Interval {
            elapsed_s,
            load1_start: a.load.map(|l| l[0]),
            load1_end: b.load.map(|l| l[0]),
            others_pct,
            steal_pct,
        }
    }

    /// Whether other work or steal during the interval disturbed timings.
    pub fn disturbed(&self) -> bool {
        self.others_pct.is_some_and(|p| p >= BUSY_OTHERS_PCT)
            || self.steal_pct.is_some_and(|p| p >= BUSY_STEAL_PCT)
    }

    /// `other work 23% of the CPUs, steal 0.0%, load 1.2 -> 2.3`.
    pub fn describe(&self) -> String {
        let pct = |p: Option<f64>| p.map_or("unknown".to_string(), |p| format!("{p:.0}%"));
        let load = |l: Option<f64>| l.map_or("?".to_string(), |l| format!("{l:.2}"));
        format!(
            "other work {} of the CPUs, steal {}, 1-minute load {} -> {}",
            pct(self.others_pct),
            self.steal_pct.map_or("not readable".to_string(), |p| format!("{p:.1}%")),
            load(self.load1_start),
            load(self.load1_end)
        )
    }
}

/// `0.42 0.37 0.30`.
pub fn loads_text(load: Option<[f64; 3]>) -> String {
    load.map_or("unknown".to_string(), |l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "cpu  100 5 50 1000 10 1 2 7 0 0\ncpu0 50 2 25 500 5 0 1 3 0 0\nintr 1 2\n";
        let t = CpuTicks::parse(stat).unwrap();
        assert_eq!(t, CpuTicks { busy: 158, total: 1175, steal: Some(7) });
        let old = "cpu  100 5 50 1000\n";
        assert_eq!(CpuTicks::parse(old).unwrap().steal, None);
        assert_eq!(CpuTicks::parse("intr 1\n"), None);
        assert_eq!(parse_loadavg("0.52 0.58 0.59 1/234 5678\n"), Some([0.52, 0.58, 0.59]));
        assert_eq!(parse_loadavg("x"), None);
    }

    #[test]
    fn intervals_on_this_machine() {
        let a = sample();
        // Burn a little CPU of our own: it must not count as other work.
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 200 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let b = sample();
        let i = Interval::between(&a, &b);
        assert!(i.elapsed_s >= 0.2);
        if let Some(p) = i.others_pct {
            assert!((0.0..=100.0).contains(&p), "{p}");
        }
        assert!(i.describe().starts_with("other work "));
        let quiet = Interval { others_pct: Some(1.0), steal_pct: Some(0.0), ..i };
        assert!(!quiet.disturbed());
        assert!(Interval { others_pct: Some(40.0), ..quiet }.disturbed());
        assert!(Interval { steal_pct: Some(5.0), ..quiet }.disturbed());
    }
}
