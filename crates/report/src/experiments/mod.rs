//! The experiments of `vmspace report`, in the order they appear (they run in [`RUN_ORDER`]):
//!
//! | id | module | what |
//! |---|---|---|
//! | `trees` | [`trees`] | the range trees: vmspace's maple tree against its peers (`vmspace bench tree`) |
//! | `mm` | [`mm`] | the address space against the kernel: mmap/munmap, lookups, bytes per VMA (`vmspace bench mm`) |
//! | `faults` | [`faults`] | page faults per second against threads, engine modes and kernel |
//! | `fork` | [`fork`] | fork rate against the VMA count: engine tree copy, re-insertion, kernel |
//! | `contention` | [`contention`] | the proc-vs-map grid: the mapper's latency per /proc file, busy task and side |
//! | `tearing` | [`tearing`] | the proc-maps-race checks, engine reader modes and kernel |
//!
//! The helpers below are shared by their presentations.

pub mod contention;
pub mod faults;
pub mod fork;
pub mod mm;
pub mod tearing;
pub mod trees;

use crate::experiment::{Experiment, SideInfo, param_str};
use crate::model::sig3;
use vmspace_results::report::Report;
use vmspace_results::stats::Summary;

/// The order the experiments run in. The engine's memory stays in this process once used (the VMA pool is
/// never given back, nor are the content buffers of the engine's frames), and the kernel's sides of the probe
/// experiments measure this process or its children: fork copies the page tables of every touched page (the
/// kernel's fork of 34 VMAs took 2.9 ms instead of 0.13 ms after the fault experiment's engine runs), and the
/// contention and tearing children inherit them. So those experiments run first, each with its kernel side
/// over every point before its engine sides, with the fork experiment last among them, then the others. The
/// contention and tearing engine sides leave little behind before fork's kernel side: a 128 MiB engine run
/// leaves about 5 MiB resident and 24 kB of page tables after `malloc_trim` (populated engine pages keep no
/// contents), against the fault experiment's hundreds of MiB.
pub const RUN_ORDER: [&str; 6] = ["contention", "tearing", "fork", "trees", "mm", "faults"];

/// The experiments of `all` in [`RUN_ORDER`] (any not listed there last, in their order).
pub fn in_run_order(all: &[Box<dyn Experiment>]) -> Vec<&dyn Experiment> {
    let rank = |id: &str| RUN_ORDER.iter().position(|x| *x == id).unwrap_or(RUN_ORDER.len());
    let mut out: Vec<&dyn Experiment> = all.iter().map(|e| e.as_ref()).collect();
    out.sort_by_key(|e| rank(e.id()));
    out
}

/// The ids of the engine's sides that the experiments judge by name (the sides themselves are
/// `crate::engine`'s, handed to each experiment's constructor, so that no experiment depends on them).
pub mod ids {
    /// Faults: the engine's fault path finding the VMA under a per-VMA lock.
    pub const FAULTS_PER_VMA: &str = "engine-per-vma";
    /// Faults: the engine's fault path under the mmap_lock only.
    pub const FAULTS_MMAP_LOCK: &str = "engine-mmap-lock";
    /// Faults, a ceiling: the engine's per-VMA fault path with each thread in an address space of its own.
    pub const FAULTS_SEPARATE: &str = "engine-separate-spaces";
    /// Faults, a ceiling: threads clearing as many pages of their own with `memset` (no faults).
    pub const FAULTS_MEMSET: &str = "memset";
    /// Fork: the engine's fork copying the tree (`MapleTree::dup`).
    pub const FORK_DUP: &str = "engine-dup";
    /// Fork: the engine's fork re-inserting every VMA.
    pub const FORK_REINSERT: &str = "engine-reinsert";
    /// Contention and tearing: the engine's readers under per-VMA locks (the mode held against the kernel's
    /// maps reader).
    pub const READERS_PER_VMA: &str = "engine-per-vma";
    /// Contention and tearing: the engine's readers under the mmap_lock.
    pub const READERS_MMAP_LOCK: &str = "engine-mmap-lock";
    /// Contention and tearing: the engine's lockless readers.
    pub const READERS_LOCKLESS: &str = "engine-lockless";
}

/// The median of metric `m` in `r`.
pub fn med(r: &Report, m: &str) -> Option<f64> {
    r.metric(m).map(|s| s.median)
}

/// `median [min-max]` of a summary with `f` formatting each number (`median` alone for one run).
pub fn spread(s: Option<&Summary>, f: fn(f64) -> String) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.n == 1 => f(s.median),
        Some(s) => format!("{} [{}-{}]", f(s.median), f(s.min), f(s.max)),
    }
}

/// A ratio's `median x [min-max]` (`median x` alone for one run).
pub fn spread_ratio(s: Option<&Summary>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.n == 1 => format!("{}x", sig3(s.median)),
        Some(s) => format!("{}x [{}-{}]", sig3(s.median), sig3(s.min), sig3(s.max)),
    }
}

/// `min/median/max` of a summary.
pub fn mmm(s: Option<&Summary>, f: fn(f64) -> String) -> String {
    match s {
        None => "-".into(),
        Some(s) => format!("{}/{}/{}", f(s.min), f(s.median), f(s.max)),
    }
}

/// A count with thousands separators.
pub fn count(v: f64) -> String {
    if v.is_finite() { vmspace_results::table::count(v) } else { "-".into() }
}

/// One line per side that does not run: `engine, per-VMA locks: not yet measured on the engine (awaits ...)`.
pub fn unavailable_lines(sides: &[SideInfo]) -> Vec<String> {
    sides.iter().filter_map(SideInfo::pending_line).collect()
}

/// The short lines a figure lists under its plot for the sides that do not run (`engine, per-VMA locks: not
/// yet measured on the engine`): what they await is in the section beside it.
pub fn missing_lines(sides: &[SideInfo]) -> Vec<String> {
    sides.iter().filter_map(|s| s.unavailable.as_ref().map(|why| format!("{}: {why}", s.name))).collect()
}

/// The sentence a verdict ends with when sides did not run: ` Not yet measured on the engine: engine, per-VMA
/// locks and engine, mmap_lock only (both await ...).` Sides awaiting the same thing are named together.
pub fn pending_sentence(sides: &[SideInfo]) -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for s in sides.iter().filter(|s| s.unavailable.is_some()) {
        match groups.iter_mut().find(|(a, _)| *a == s.awaits) {
            Some((_, names)) => names.push(s.name),
            None => groups.push((s.awaits, vec![s.name])),
        }
    }
    if groups.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(awaits, names)| {
            let who = match names.as_slice() {
                [one] => one.to_string(),
                [init @ .., last] => format!("{} and {last}", init.join(", ")),
                [] => String::new(),
            };
            match (awaits.is_empty(), names.len()) {
                (true, _) => who,
                (false, 1) => format!("{who} (awaits {awaits})"),
                (false, 2) => format!("{who} (both await {awaits})"),
                (false, _) => format!("{who} (all await {awaits})"),
            }
        })
        .collect();
    format!(" Not yet measured on the engine: {}.", parts.join("; "))
}

/// The point keys of `reports` in their first-appearance order.
pub fn points(reports: &[&Report]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in reports {
        let p = param_str(r, "point");
        if !p.is_empty() && !out.iter().any(|x| x == p) {
            out.push(p.to_string());
        }
    }
    out
}

/// Per-run values of metric `m` in `r`, in run order (runs without it are skipped).
pub fn runs_of(r: &Report, m: &str) -> Vec<f64> {
    r.runs.iter().filter_map(|run| run.metrics.get(m).copied()).collect()
}

/// Ratios of paired runs: `a`'s run i over `b`'s run i, for the runs both have.
pub fn paired(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).filter(|(_, y)| **y != 0.0).map(|(x, y)| x / y).collect()
}

/// `1.23x` or `1.2-3.4x` for a range of ratios.
pub fn ratio_range(values: &[f64]) -> String {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        "-".into()
    } else if sig3(lo) == sig3(hi) {
        format!("{}x", sig3(lo))
    } else {
        format!("{}-{}x", sig3(lo), sig3(hi))
    }
}

/// How a side is named in a verdict's words: `the kernel`, `engine, per-VMA locks`.
pub fn in_words(side: &SideInfo) -> String {
    if side.id == "kernel" { "the kernel".to_string() } else { side.name.to_string() }
}

/// `s` with its first letter upper-case.
pub fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(paired(&[2.0, 4.0, 9.0], &[1.0, 0.0]), vec![2.0]);
        assert_eq!(ratio_range(&[0.5, 2.0]), "0.500-2.00x");
        assert_eq!(ratio_range(&[1.0]), "1.00x");
        assert_eq!(ratio_range(&[]), "-");
        let s = Summary::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(spread(Some(&s), sig3), "2.00 [1.00-3.00]");
        assert_eq!(mmm(Some(&s), sig3), "1.00/2.00/3.00");
        let pending = |id, name, awaits| SideInfo {
            id,
            name,
            unavailable: Some(crate::experiment::NOT_YET_MEASURED.into()),
            awaits,
        };
        let sides = [
            SideInfo::new("kernel", "kernel"),
            pending("a", "engine, a", "the fault path"),
            pending("b", "engine, b", "the fault path"),
            pending("c", "engine, c", "dup_mmap"),
        ];
        assert_eq!(
            pending_sentence(&sides),
            " Not yet measured on the engine: engine, a and engine, b (both await the fault path); engine, c \
             (awaits dup_mmap)."
        );
        assert_eq!(pending_sentence(&sides[..1]), "");
        assert_eq!(unavailable_lines(&sides).len(), 3);
        assert_eq!(missing_lines(&sides)[2], "engine, c: not yet measured on the engine");
        let all = crate::run::all();
        let ids: Vec<&str> = all.iter().map(|e| e.id()).collect();
        assert_eq!(ids, ["trees", "mm", "faults", "fork", "contention", "tearing"]);
        let run: Vec<&str> = in_run_order(&all).iter().map(|e| e.id()).collect();
        assert_eq!(run, RUN_ORDER);
    }
}
