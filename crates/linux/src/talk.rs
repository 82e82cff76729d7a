//! The table of the LPC 2021 talk ("cat /proc/$PID/maps: what could possibly go wrong?"): the mapper's
//! worst-case mmap/munmap latency against the number of busy tasks that compete with one scanner for its CPU.
//!
//! # The grid
//! [`grid`]: for each proc file (or agent command), one scanner at nice 15 and B busy tasks at nice 0 that
//! spin without ever sleeping (`busy_ms = 0`, the talk's busy loops), for B in [`BUSY_COUNTS`] (0, 1, 10, 100,
//! 1,000); every busy task shares the scanner's CPU ([`crate::placement`]), so with B busy tasks the scanner
//! gets about `w15 / (w15 + B * w0)` of that CPU (the CFS/EEVDF weights of nice 15 and nice 0: 36 and 1024,
//! `kernel/sched/core.c: sched_prio_to_weight`), and a scanner preempted inside a read holds what that read
//! holds (`mmap_read_lock` for `smaps` and `smaps_rollup`, one VMA's lock for `maps` and PROCMAP_QUERY on
//! 6.18) until it runs again.
//!
//! # A cell
//! Each row runs R times for a fixed length ([`crate::contention`]: the run ends on time whatever the
//! mapper's last call is doing: the busy tasks and the scanner are killed at the end of the run, which lets
//! a call that still waits finish; that call's latency is then measured up to the end of the run, so a
//! worst call near the run's length is a lower bound). Per run the worst call (`call_max_ms`); per cell the
//! median, minimum and maximum of the runs' worst calls and the number of runs whose worst call exceeded
//! [`HANG_MS`] (the talk's "hangs"; per run the metric [`WORST_OVER_1S`], 0 or 1).

use crate::contention::{Config, ProcFile};
use std::collections::BTreeMap;
use vmspace_results::report::Report;
use vmspace_results::table::{ms, render};

/// The talk's busy-task counts.
pub const BUSY_COUNTS: [usize; 5] = [0, 1, 10, 100, 1000];

/// A run whose worst call exceeded this many ms is a "hang" (the talk's column).
pub const HANG_MS: f64 = 1000.0;

/// The per-run metric: 1 if the run's worst call exceeded [`HANG_MS`], else 0.
pub const WORST_OVER_1S: &str = "worst_over_1s_count";

/// The proc files of the talk's tables, in table order.
pub const PROCFILES: [ProcFile; 4] =
    [ProcFile::Maps, ProcFile::Smaps, ProcFile::SmapsRollup, ProcFile::Query];

/// The rows of the talk's grid over `base` (samples, duration, region, CPUs, agent): for each of `files`,
/// one row per count of `busy_counts` with `base.scanners` scanners and busy tasks that never pause.
pub fn grid(base: &Config, files: &[ProcFile], busy_counts: &[usize]) -> Vec<Config> {
    let mut rows = Vec::new();
    for &procfile in files {
        for &busy in busy_counts {
            rows.push(Config { procfile, busy, busy_ms: 0, ..base.clone() });
        }
    }
    rows
}

/// Adds [`WORST_OVER_1S`] to a run's metrics from its `call_max_ms`.
pub fn mark_hang(m: &mut BTreeMap<String, f64>) {
    let worst = m.get("call_max_ms").copied().unwrap_or(0.0);
    m.insert(WORST_OVER_1S.to_string(), if worst > HANG_MS { 1.0 } else { 0.0 });
}

/// One cell of the talk's table: a row's runs' worst calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The busy-task count.
    pub busy: usize,
    /// Runs measured.
    pub runs: usize,
    /// Median of the runs' worst calls, ms.
    pub median_ms: f64,
    /// Fastest run's worst call, ms.
    pub min_ms: f64,
    /// Slowest run's worst call, ms.
    pub max_ms: f64,
    /// Runs whose worst call exceeded [`HANG_MS`].
    pub hangs: usize,
    /// Runs with a call still waiting at the end of the window, cut there (`calls_cut_count` > 0): their
    /// worst call is a lower bound ([`crate::contention`]).
    pub cut: usize,
}

impl Cell {
    /// The cell of report `r` (its runs' `call_max_ms`); `None` without runs.
    pub fn of(r: &Report) -> Option<Cell> {
        let worst: Vec<f64> =
            r.runs.iter().filter_map(|run| run.metrics.get("call_max_ms").copied()).collect();
        let s = r.metric("call_max_ms")?;
        Some(Cell {
            busy: r.parameters.get("busy").and_then(|v| v.as_u64()).unwrap_or(0) as usize,
            runs: worst.len(),
            median_ms: s.median,
            min_ms: s.min,
            max_ms: s.max,
            hangs: worst.iter().filter(|&&w| w > HANG_MS).count(),
            cut: r
                .runs
                .iter()
                .filter(|run| run.metrics.get("calls_cut_count").is_some_and(|&c| c > 0.0))
                .count(),
        })
    }
}

/// What a report's scanner read: `agent \`CMD\`` for an agent command, else the proc file's name.
pub fn reader_of(r: &Report) -> String {
    match r.parameters.get("agent").and_then(|v| v.as_str()) {
        Some(a) => format!("agent `{a}`"),
        None => r.parameters.get("procfile").and_then(|v| v.as_str()).unwrap_or("?").to_string(),
    }
}

/// One table per (side, reader) of `reports`, in order of first appearance: `side(r)` names a report's side
/// (`kernel`, `engine mmap-lock` ...); rows sorted by busy count.
pub fn tables(reports: &[&Report], side: &dyn Fn(&Report) -> String) -> Vec<(String, Vec<Cell>)> {
    let mut out: Vec<(String, Vec<Cell>)> = Vec::new();
    for r in reports {
        let Some(cell) = Cell::of(r) else { continue };
        let title = format!("{} ({})", reader_of(r), side(r));
        match out.iter_mut().find(|(t, _)| *t == title) {
            Some((_, cells)) => cells.push(cell),
            None => out.push((title, vec![cell])),
        }
    }
    for (_, cells) in &mut out {
        cells.sort_by_key(|c| c.busy);
    }
    out
}

/// The column headers of a talk table.
pub const HEADERS: [&str; 6] = ["busy tasks", "median", "min", "max", "runs > 1 s", "cut at end"];

/// A cell as the row of a talk table (latencies in ms; `hangs/runs`; `cut/runs`).
pub fn row(c: &Cell) -> Vec<String> {
    vec![
        c.busy.to_string(),
        ms(c.median_ms),
        ms(c.min_ms),
        ms(c.max_ms),
        format!("{}/{}", c.hangs, c.runs),
        format!("{}/{}", c.cut, c.runs),
    ]
}

/// The talk's tables as text: per table a title line and rows of busy counts.
pub fn render_tables(tables: &[(String, Vec<Cell>)]) -> String {
    let mut out = String::new();
    for (title, cells) in tables {
        out.push_str(&format!(
            "\n{title}: worst mmap/munmap call per run, ms (cut at end: a call still waiting when the window closed, timed to then)\n"
        ));
        let rows: Vec<Vec<String>> = cells.iter().map(row).collect();
        out.push_str(&render(&HEADERS, &rows));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmspace_results::host::HostInfo;

    #[test]
    fn grid_and_cells() {
        let g = grid(&Config::default(), &PROCFILES, &BUSY_COUNTS);
        assert_eq!(g.len(), 20);
        assert!(g.iter().all(|c| c.busy_ms == 0 && c.scanners == 1));
        assert_eq!(g[4].label(), "maps, 1 scanner + 1000 busy B=0");
        let mut r = Report::new("kernel.contention", g[1].label(), HostInfo::default());
        r.param("procfile", ProcFile::Smaps);
        r.param("busy", 10);
        for worst in [2.0, 1500.0, 30.0] {
            let cut = if worst > HANG_MS { 1.0 } else { 0.0 };
            let mut m =
                BTreeMap::from([("call_max_ms".to_string(), worst), ("calls_cut_count".to_string(), cut)]);
            mark_hang(&mut m);
            assert_eq!(m[WORST_OVER_1S], if worst > HANG_MS { 1.0 } else { 0.0 });
            r.push_run(m);
        }
        r.summarise();
        let c = Cell::of(&r).unwrap();
        assert_eq!((c.busy, c.runs, c.hangs, c.cut), (10, 3, 1, 1));
        assert_eq!((c.min_ms, c.median_ms, c.max_ms), (2.0, 30.0, 1500.0));
        let t = tables(&[&r], &|_| "kernel".to_string());
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].0, "smaps (kernel)");
        let text = render_tables(&t);
        assert!(text.contains("busy tasks") && text.contains("1/3"), "{text}");
        assert!(Cell::of(&Report::new("x", "empty", HostInfo::default())).is_none());
    }
}
