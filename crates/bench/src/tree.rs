//! `vmspace bench tree`: vmspace's maple tree against the range maps a Rust program would otherwise use, in one
//! run, on the kernel's own benchmark shapes and on VMA-like address spaces at scale.
//!
//! # Workloads
//!
//! Kernel shapes (`lib/test_maple_tree.c`), each on its own fixed layout:
//!
//! | id | kernel | what is timed |
//! |---|---|---|
//! | `bench_load` | BENCH_LOAD | lookup of 1470 in 250 ranges `[i*10, i*10+5]`, read-side protection per lookup |
//! | `bench_mas_for_each` | BENCH_MAS_FOR_EACH | iteration over 500 ranges (every 5, holes every 30), per entry |
//! | `bench_awalk` | BENCH_AWALK | `empty_area_rev(0, 2000, 10)` with 1470..1475 unmapped (answer: 1470) |
//! | `bench_fork` | BENCH_FORK | duplicate 135 ranges (`BTreeMap::clone` for the maps) |
//!
//! At scale, for every `n` of `--sizes`, on [`layout::vma_like`]`(n)`:
//!
//! | id | what is timed (per operation unless noted) |
//! |---|---|
//! | `lookup` | lookup of a random mapped address, read-side protection taken per lookup |
//! | `lookup_batch` | the same, protection held over a batch of 16,384 lookups (fewer when that batch would last longer than a timed batch: only for O(n) lookups) |
//! | `iterate` | a full in-order walk, per entry |
//! | `churn` | munmap+mmap at the tree level: remove a random existing range and insert it back (one op = both) |
//! | `mmap` | top-down gap search for a 32-page hole below a random ceiling, insert a range there, remove it |
//! | `gap` | the gap search alone |
//! | `dup` | a full copy, per entry |
//! | `lookup_threads` | aggregate lookups/s with 1 and with 2 threads (thread *i* on CPU *i*), and their ratio |
//! | `churn_reader` | a writer's `churn` time alone and with a reader thread looking up on the other CPU, their ratio, and the writer's per-op latency distribution in both cases |
//!
//! Lookup addresses, churn orders and gap ceilings are precomputed from seeded `SmallRng`s, so nothing but the
//! operations is timed and every target sees the same sequence. Results go through `std::hint::black_box`.
//!
//! # Output
//!
//! A [`ReportSet`] (schema `vmspace.report.v1`, shared with every vmspace benchmark): one [`Report`] per
//! (workload, n, target) with benchmark `bench.tree.<workload>`, plus one `bench.tree.target` report per issue
//! target checked (goal, measured ratio, met or missed). [`render_table`] prints the terminal table: every cell
//! is the median followed by its ratio to `BTreeMap` in the same run.

use crate::layout::{self, BIG_GAP_PAGES, PAGE};
use crate::measure::{Cpus, Timer, median, time};
use crate::rangemap::{
    ArcSwapMap, GapSearch, MapleMap, RangeMap, RwLockMap, SccMap, SharedRangeMap, SkipListMap, Span,
};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};
use vmspace_rcu::sync::{AtomicBool, AtomicU64, Ordering};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, ReportSet};

/// The structures `vmspace bench tree` can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// vmspace's `MapleTree<NonZeroU64>`.
    Maple,
    /// `std::collections::BTreeMap` (the baseline of every ratio).
    BTree,
    /// `parking_lot::RwLock<BTreeMap>`.
    RwLock,
    /// `arc_swap::ArcSwap<BTreeMap>`.
    ArcSwap,
    /// `scc::TreeIndex`.
    Scc,
    /// `crossbeam_skiplist::SkipMap`.
    SkipMap,
}

impl Target {
    /// Every target, in table order.
    pub const ALL: [Target; 6] =
        [Target::Maple, Target::BTree, Target::RwLock, Target::ArcSwap, Target::Scc, Target::SkipMap];

    /// The id used by `--targets` and in JSON parameters.
    pub fn id(self) -> &'static str {
        match self {
            Target::Maple => "maple",
            Target::BTree => "btree",
            Target::RwLock => "rwlock",
            Target::ArcSwap => "arcswap",
            Target::Scc => "scc",
            Target::SkipMap => "skipmap",
        }
    }

    /// Parses an id of [`Target::id`].
    pub fn parse(id: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.id() == id.trim())
    }

    /// The structure's display name.
    pub fn name(self) -> &'static str {
        macro_rules! name {
            ($M:ty) => {
                <$M as RangeMap>::NAME
            };
        }
        match self {
            Target::Maple => name!(MapleMap),
            Target::BTree => name!(BTreeMap<u64, (u64, u64)>),
            Target::RwLock => name!(RwLockMap),
            Target::ArcSwap => name!(ArcSwapMap),
            Target::Scc => name!(SccMap),
            Target::SkipMap => name!(SkipListMap),
        }
    }
}

/// Runs `$body` with `$M` naming the [`RangeMap`] type of target `$t`.
macro_rules! dispatch {
    ($t:expr, $M:ident => $body:expr) => {
        match $t {
            Target::Maple => {
                type $M = MapleMap;
                $body
            }
            Target::BTree => {
                type $M = BTreeMap<u64, (u64, u64)>;
                $body
            }
            Target::RwLock => {
                type $M = RwLockMap;
                $body
            }
            Target::ArcSwap => {
                type $M = ArcSwapMap;
                $body
            }
            Target::Scc => {
                type $M = SccMap;
                $body
            }
            Target::SkipMap => {
                type $M = SkipListMap;
                $body
            }
        }
    };
}

/// Runs `$body` with `$M` naming the [`SharedRangeMap`] type of target `$t`, or `$other` for `BTreeMap` (which
/// cannot be written while it is read).
macro_rules! dispatch_shared {
    ($t:expr, $M:ident => $body:expr, else $other:expr) => {
        match $t {
            Target::Maple => {
                type $M = MapleMap;
                $body
            }
            Target::RwLock => {
                type $M = RwLockMap;
                $body
            }
            Target::ArcSwap => {
                type $M = ArcSwapMap;
                $body
            }
            Target::Scc => {
                type $M = SccMap;
                $body
            }
            Target::SkipMap => {
                type $M = SkipListMap;
                $body
            }
            Target::BTree => $other,
        }
    };
}

/// The configuration of one `vmspace bench tree` run.
#[derive(Debug, Clone)]
pub struct TreeConfig {
    /// Entry counts of the at-scale layouts.
    pub sizes: Vec<usize>,
    /// The structures to measure.
    pub targets: Vec<Target>,
    /// Batch length and repeats of every single-threaded measurement.
    pub timer: Timer,
    /// Length of each multi-threaded measurement (per repeat).
    pub threaded: Duration,
    /// Seed of every random sequence.
    pub seed: u64,
    /// `--quick` was given (recorded in the reports).
    pub quick: bool,
}

impl TreeConfig {
    /// The full run: sizes 21, 1k, 100k, 1M; 5 repeats of 30 ms batches; 100 ms threaded runs.
    pub fn full() -> Self {
        TreeConfig {
            sizes: vec![21, 1000, 100_000, 1_000_000],
            targets: Target::ALL.to_vec(),
            timer: Timer { batch: Duration::from_millis(30), repeats: 5 },
            threaded: Duration::from_millis(100),
            seed: 0x766d_7370,
            quick: false,
        }
    }

    /// A short run for smoke tests: sizes 21 and 1000, 3 repeats of 1 ms batches.
    pub fn quick() -> Self {
        TreeConfig {
            sizes: vec![21, 1000],
            timer: Timer { batch: Duration::from_millis(1), repeats: 3 },
            threaded: Duration::from_millis(5),
            quick: true,
            ..TreeConfig::full()
        }
    }

    /// The number of progress steps [`run`] reports.
    pub fn steps(&self) -> u64 {
        (self.targets.len() * (KERNEL_SHAPES + self.sizes.len() * SCALE_STEPS)) as u64
    }
}

const KERNEL_SHAPES: usize = 4;
const SCALE_STEPS: usize = 9;
/// Lookup addresses per thread at scale.
const ADDRS: usize = 1 << 14;
/// Lookups per read-side section in `lookup_batch` on the kernel shape.
const LOAD_BATCH: usize = 256;
/// Copies kept alive at once by the dup measurement (bounded by entries, to bound memory).
const DUP_ENTRIES_ALIVE: usize = 4 << 20;

/// The outcome of one issue target.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// What is compared, e.g. `lookup (guard per lookup) vs BTreeMap`.
    pub what: String,
    /// Where: the workload and size.
    pub workload: String,
    /// The goal, e.g. `<= 0.75`.
    pub goal: String,
    /// The measured ratio (NaN if it could not be measured).
    pub ratio: f64,
    /// Whether the goal is met.
    pub met: bool,
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct TreeResults {
    /// Everything measured, in the shared schema.
    pub set: ReportSet,
    /// The targets, checked.
    pub verdicts: Vec<Verdict>,
    /// Placement description for the terminal.
    pub placement: String,
    /// Whether the run stopped early ([`run_until`]'s `stop` answered true): the reports then hold what was
    /// measured before, and the targets of the missing cells are "not measured".
    pub interrupted: bool,
}

/// Shared state of one run.
struct Ctx<'a> {
    cfg: &'a TreeConfig,
    cpus: Cpus,
    host: HostInfo,
    reports: Vec<Report>,
    progress: &'a mut dyn FnMut(&str),
    stop: &'a dyn Fn() -> bool,
    interrupted: bool,
}

impl Ctx<'_> {
    /// Starts a report for `workload` on `target` at size `n`.
    fn report(&self, workload: &str, target: Target, n: usize, threads: usize) -> Report {
        let mut r = Report::new(
            &format!("bench.tree.{workload}"),
            format!("{workload} n={n} {}", target.name()),
            self.host.clone(),
        );
        r.param("workload", workload);
        r.param("target", target.id());
        r.param("structure", target.name());
        r.param("n", n);
        r.param("quick", self.cfg.quick);
        r.param("seed", self.cfg.seed);
        crate::measure::stamp(&mut r, &self.cfg.timer, &self.cpus, threads);
        let caveat = dispatch!(target, M => <M as RangeMap>::CAVEAT);
        if !caveat.is_empty() {
            r.notes.push(caveat.to_string());
        }
        r
    }

    /// Records one single-metric report from per-repeat values.
    fn push(&mut self, mut r: Report, metric: &str, values: &[f64]) {
        for &v in values {
            r.push_run(BTreeMap::from([(metric.to_string(), v)]));
        }
        r.summarise();
        self.reports.push(r);
    }

    fn step(&mut self, what: &str) {
        (self.progress)(what);
    }

    /// Whether the caller asked the run to stop (remembered: once stopped, it stays stopped).
    fn stopped(&mut self) -> bool {
        self.interrupted = self.interrupted || (self.stop)();
        self.interrupted
    }
}

/// Runs `vmspace bench tree` with `cfg`; `progress` is called once per step of [`TreeConfig::steps`].
pub fn run(cfg: &TreeConfig, progress: &mut dyn FnMut(&str), command: &str) -> TreeResults {
    run_until(cfg, progress, &|| false, command)
}

/// [`run`], stopping early when `stop` answers true (it is asked before each structure's kernel shapes and
/// before each structure at each size): the results then hold every cell measured so far, and
/// [`TreeResults::interrupted`] is set.
pub fn run_until(
    cfg: &TreeConfig,
    progress: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
    command: &str,
) -> TreeResults {
    // Host facts first: discovering the CPUs pins this thread, which would narrow the affinity mask they report.
    let host = vmspace_linux::hostinfo::gather();
    let load_before = loadavg();
    let cpus = Cpus::discover();
    let placement = cpus.describe();
    let mut ctx = Ctx { cfg, cpus, host, reports: Vec::new(), progress, stop, interrupted: false };
    for &t in &cfg.targets {
        if ctx.stopped() {
            break;
        }
        dispatch!(t, M => kernel_shapes::<M>(&mut ctx, t));
    }
    for &n in &cfg.sizes {
        if ctx.stopped() {
            break;
        }
        let spans = layout::vma_like(n, cfg.seed ^ n as u64);
        for &t in &cfg.targets {
            if ctx.stopped() {
                break;
            }
            dispatch_shared!(t, M => {
                let map = at_scale::<M>(&mut ctx, t, &spans);
                ctx.step(&format!("{} n={n}: churn with a concurrent reader", t.name()));
                churn_reader::<M>(&mut ctx, t, &map, &spans);
            }, else {
                drop(at_scale::<BTreeMap<u64, (u64, u64)>>(&mut ctx, t, &spans));
                ctx.step("BTreeMap: no concurrent writer possible");
            });
        }
    }
    let load_after = loadavg();
    // Only the load before the run says whether others competed: the run's own threads raise the load after it.
    let busy = load_before.is_some_and(|l| l > 0.5 * ctx.cpus.usable.len() as f64);
    let load_note = format!(
        "1-minute load average before/after the run: {}/{}{}",
        load_before.map_or("?".to_string(), |l| format!("{l:.2}")),
        load_after.map_or("?".to_string(), |l| format!("{l:.2}")),
        if busy {
            " (the machine was busy before the run: other processes competed for the CPUs, so timings are noisy)"
        } else {
            " (the load after includes this run's own threads)"
        }
    );
    for r in &mut ctx.reports {
        r.notes.push(load_note.clone());
    }
    add_ratios(&mut ctx.reports);
    let verdicts = verdicts(cfg, &ctx.reports);
    for v in &verdicts {
        let mut r = Report::new("bench.tree.target", v.what.clone(), ctx.host.clone());
        r.param("workload", &v.workload);
        r.param("goal", &v.goal);
        r.param("met", v.met);
        if v.ratio.is_finite() {
            r.push_run(BTreeMap::from([("ratio".to_string(), v.ratio)]));
        } else {
            r.notes.push("not measured in this run".to_string());
        }
        r.summarise();
        ctx.reports.push(r);
    }
    TreeResults {
        set: ReportSet::new(command, ctx.reports),
        verdicts,
        placement: format!("{placement}\n{load_note}"),
        interrupted: ctx.interrupted,
    }
}

/// The 1-minute load average (`/proc/loadavg`), if readable.
fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// Times lookups of `addrs` (cycled), protection per lookup; ns per lookup for each repeat.
fn time_lookups<M: RangeMap>(timer: &Timer, map: &M, addrs: &[u64]) -> Vec<f64> {
    timer.per_op(|iters| {
        let mut acc = 0u64;
        let mut i = 0;
        let took = time(|| {
            for _ in 0..iters {
                acc = acc.wrapping_add(map.lookup(addrs[i]).unwrap_or(0));
                i += 1;
                if i == addrs.len() {
                    i = 0;
                }
            }
        });
        black_box(acc);
        took
    })
}

/// Times `lookup_batch` over all of `addrs`; ns per lookup for each repeat.
fn time_lookup_batches<M: RangeMap>(timer: &Timer, map: &M, addrs: &[u64]) -> Vec<f64> {
    let per_batch = timer.per_op(|iters| {
        let mut acc = 0u64;
        let took = time(|| {
            for _ in 0..iters {
                acc = acc.wrapping_add(map.lookup_batch(addrs));
            }
        });
        black_box(acc);
        took
    });
    per_batch.into_iter().map(|ns| ns / addrs.len() as f64).collect()
}

/// Times full iterations; ns per entry for each repeat.
fn time_iteration<M: RangeMap>(timer: &Timer, map: &M) -> Vec<f64> {
    let n = map.len().max(1) as f64;
    let per_walk = timer.per_op(|iters| {
        let mut acc = 0u64;
        let took = time(|| {
            for _ in 0..iters {
                map.for_each(|first, last, value| acc = acc.wrapping_add(first ^ last ^ value));
            }
        });
        black_box(acc);
        took
    });
    per_walk.into_iter().map(|ns| ns / n).collect()
}

/// Times duplications; ns per copy for each repeat. Copies are dropped outside the timed region.
fn time_dup<M: RangeMap>(timer: &Timer, map: &M) -> Vec<f64> {
    let alive = (DUP_ENTRIES_ALIVE / map.len().max(1)).clamp(1, 64) as u64;
    timer.per_op(|iters| {
        let mut took = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let k = left.min(alive);
            let mut copies = Vec::with_capacity(k as usize);
            took += time(|| {
                for _ in 0..k {
                    copies.push(black_box(map.dup()));
                }
            });
            drop(copies);
            left -= k;
        }
        took
    })
}

/// Times gap searches below each of `ceilings` (cycled); ns per search. `expect` checks every answer.
fn time_gaps<M: RangeMap>(timer: &Timer, map: &M, min: u64, ceilings: &[u64], size: u64) -> Vec<f64> {
    timer.per_op(|iters| {
        let mut acc = 0u64;
        let mut i = 0;
        let took = time(|| {
            for _ in 0..iters {
                acc = acc.wrapping_add(map.gap_rev(min, ceilings[i], size).unwrap_or(0));
                i += 1;
                if i == ceilings.len() {
                    i = 0;
                }
            }
        });
        black_box(acc);
        took
    })
}

/// The kernel's benchmark shapes on target `t`.
fn kernel_shapes<M: RangeMap>(ctx: &mut Ctx<'_>, t: Target) {
    let timer = ctx.cfg.timer;

    ctx.step(&format!("{} BENCH_LOAD", t.name()));
    let load = M::from_sorted(&layout::every_ten(250));
    let mut r = ctx.report("bench_load", t, 250, 1);
    r.param("lookup_address", 1470);
    r.param("read_side", M::READ_SIDE);
    check(&mut r, load.lookup(1470) == Some(148), "lookup(1470) did not find [1470, 1475]");
    let per_op = time_lookups(&timer, &load, &[1470]);
    ctx.push(r, "ns_per_op", &per_op);
    let mut r = ctx.report("bench_load_batch", t, 250, 1);
    r.param("lookups_per_section", LOAD_BATCH);
    let batched = time_lookup_batches(&timer, &load, &[1470; LOAD_BATCH]);
    ctx.push(r, "ns_per_op", &batched);
    drop(load);

    ctx.step(&format!("{} BENCH_MAS_FOR_EACH", t.name()));
    let fe_spans = layout::mas_for_each();
    let fe = M::from_sorted(&fe_spans);
    let mut r = ctx.report("bench_mas_for_each", t, fe_spans.len(), 1);
    let mut seen = Vec::with_capacity(fe_spans.len());
    fe.for_each(|first, last, value| seen.push(Span { first, last, value }));
    check(&mut r, seen == fe_spans, "iteration did not return the 500 ranges in order");
    let per_entry = time_iteration(&timer, &fe);
    ctx.push(r, "ns_per_entry", &per_entry);
    drop(fe);

    ctx.step(&format!("{} BENCH_AWALK", t.name()));
    let aw = M::from_sorted(&layout::awalk());
    let mut r = ctx.report("bench_awalk", t, 249, 1);
    r.param("query", "empty_area_rev(0, 2000, 10)");
    r.param("gap_search", M::GAP_SEARCH.describe());
    check(&mut r, aw.gap_rev(0, 2000, 10) == Some(1470), "empty_area_rev(0, 2000, 10) did not answer 1470");
    let per_op = time_gaps(&timer, &aw, 0, &[2000], 10);
    ctx.push(r, "ns_per_op", &per_op);
    drop(aw);

    ctx.step(&format!("{} BENCH_FORK", t.name()));
    let fork_spans = layout::every_ten(135);
    let fork = M::from_sorted(&fork_spans);
    let mut r = ctx.report("bench_fork", t, 135, 1);
    r.param("copy", if t == Target::Maple { "MapleTree::dup (identity map)" } else { "full copy (clone)" });
    let copy = fork.dup();
    let mut seen = Vec::new();
    copy.for_each(|first, last, value| seen.push(Span { first, last, value }));
    check(&mut r, seen == fork_spans, "the copy differs from the original");
    drop(copy);
    let per_dup = time_dup(&timer, &fork);
    ctx.push(r, "ns_per_op", &per_dup);
}

/// Adds a note to `r` when `ok` is false: the structure answered wrongly, so its timing is suspect.
fn check(r: &mut Report, ok: bool, what: &str) {
    if !ok {
        r.notes.push(format!("WRONG ANSWER: {what}"));
    }
}

/// The at-scale workloads on target `t` over `spans`.
fn at_scale<M: RangeMap>(ctx: &mut Ctx<'_>, t: Target, spans: &[Span]) -> M {
    let timer = ctx.cfg.timer;
    let seed = ctx.cfg.seed ^ spans.len() as u64;
    let n = spans.len();
    let name = t.name();
    let addrs = layout::hit_addresses(spans, ADDRS, seed ^ 1);
    let order = layout::churn_order(n, ADDRS, seed ^ 2);
    let ceilings = layout::gap_ceilings(spans, ADDRS, seed ^ 3);
    let min = spans.first().map_or(0, |s| s.first);
    let gap_size = BIG_GAP_PAGES / 2 * PAGE;

    ctx.step(&format!("{name} n={n}: build, lookup"));
    let mut map = M::from_sorted(spans);
    let mut r = ctx.report("lookup", t, n, 1);
    r.param("read_side", M::READ_SIDE);
    r.param("addresses", ADDRS);
    let sample = addrs.iter().take(256).all(|&a| {
        let s = spans.partition_point(|s| s.last < a);
        map.lookup(a) == Some(spans[s].value)
    });
    check(&mut r, sample && map.len() == n, "lookups disagree with the layout");
    let lookup_ns = time_lookups(&timer, &map, &addrs);
    ctx.push(r, "ns_per_op", &lookup_ns);

    ctx.step(&format!("{name} n={n}: lookup, one section per batch"));
    let mut r = ctx.report("lookup_batch", t, n, 1);
    // One section per batch of ADDRS lookups, unless that batch would far outlast the timed batch (a structure
    // with O(n) lookups): then sections as long as one timed batch.
    let section = ((timer.batch.as_nanos() as f64 / median(&lookup_ns).max(1.0)) as usize).clamp(1, ADDRS);
    r.param("lookups_per_section", section);
    let per_op = time_lookup_batches(&timer, &map, &addrs[..section]);
    ctx.push(r, "ns_per_op", &per_op);

    ctx.step(&format!("{name} n={n}: iterate"));
    let r = ctx.report("iterate", t, n, 1);
    let per_entry = time_iteration(&timer, &map);
    ctx.push(r, "ns_per_entry", &per_entry);

    ctx.step(&format!("{name} n={n}: churn"));
    let mut r = ctx.report("churn", t, n, 1);
    r.param("op", "remove one random range and insert it back");
    let per_op = timer.per_op(|iters| {
        let mut i = 0;
        time(|| {
            for _ in 0..iters {
                let s = spans[order[i]];
                black_box(map.remove(s.first, s.last));
                map.insert(s.first, s.last, s.value);
                i += 1;
                if i == order.len() {
                    i = 0;
                }
            }
        })
    });
    check(&mut r, map.len() == n, "churn changed the number of ranges");
    ctx.push(r, "ns_per_op", &per_op);

    ctx.step(&format!("{name} n={n}: mmap (gap search + insert + remove)"));
    let mut r = ctx.report("mmap", t, n, 1);
    r.param("op", "gap_rev for 32 pages below a random ceiling, insert a range there, remove it");
    r.param("gap_search", M::GAP_SEARCH.describe());
    let per_op = timer.per_op(|iters| {
        let mut i = 0;
        time(|| {
            for _ in 0..iters {
                if let Some(start) = map.gap_rev(min, ceilings[i], gap_size) {
                    map.insert(start, start + gap_size - 1, 1);
                    black_box(map.remove(start, start + gap_size - 1));
                }
                i += 1;
                if i == ceilings.len() {
                    i = 0;
                }
            }
        })
    });
    check(&mut r, map.len() == n, "mmap/munmap changed the number of ranges");
    ctx.push(r, "ns_per_op", &per_op);

    ctx.step(&format!("{name} n={n}: gap search"));
    let mut r = ctx.report("gap", t, n, 1);
    r.param("size_bytes", gap_size);
    r.param("gap_search", M::GAP_SEARCH.describe());
    let oracle = |c: u64| {
        crate::rangemap::gap_rev_scan_down(
            spans[..spans.partition_point(|s| s.first <= c)].iter().rev().map(|s| (s.first, s.last)),
            min,
            c,
            gap_size,
        )
    };
    let agree = ceilings.iter().take(64).all(|&c| map.gap_rev(min, c, gap_size) == oracle(c));
    check(&mut r, agree, "gap search disagrees with a scan of the layout");
    if M::GAP_SEARCH != GapSearch::Native {
        r.notes.push(format!("no gap tracking: {}", M::GAP_SEARCH.describe()));
    }
    let per_op = time_gaps(&timer, &map, min, &ceilings, gap_size);
    ctx.push(r, "ns_per_op", &per_op);

    ctx.step(&format!("{name} n={n}: dup"));
    let r = ctx.report("dup", t, n, 1);
    let per_entry: Vec<f64> = time_dup(&timer, &map).into_iter().map(|ns| ns / n.max(1) as f64).collect();
    ctx.push(r, "ns_per_entry", &per_entry);

    ctx.step(&format!("{name} n={n}: lookups on 1 and 2 threads"));
    lookup_threads(ctx, t, &map, spans, median(&lookup_ns));

    map
}

/// Aggregate lookup throughput with 1 and 2 threads; one report with `mops_per_s_1t`, `mops_per_s_2t` and their
/// ratio `scaling_2t_over_1t` per repeat.
fn lookup_threads<M: RangeMap>(ctx: &mut Ctx<'_>, t: Target, map: &M, spans: &[Span], ns_per_lookup: f64) {
    let seed = ctx.cfg.seed ^ spans.len() as u64;
    let addrs: Vec<Vec<u64>> = (0..2).map(|i| layout::hit_addresses(spans, ADDRS, seed ^ (10 + i))).collect();
    let per_thread = ((ctx.cfg.threaded.as_nanos() as f64 / ns_per_lookup.max(1.0)) as u64).max(16);
    let mut r = ctx.report("lookup_threads", t, spans.len(), 2);
    r.param("lookups_per_thread", per_thread);
    r.param("read_side", M::READ_SIDE);
    for _ in 0..ctx.cfg.timer.repeats {
        let one = aggregate_lookups(&ctx.cpus, map, &addrs[..1], per_thread);
        let two = aggregate_lookups(&ctx.cpus, map, &addrs, per_thread);
        r.push_run(BTreeMap::from([
            ("mops_per_s_1t".to_string(), one),
            ("mops_per_s_2t".to_string(), two),
            ("scaling_2t_over_1t".to_string(), two / one),
        ]));
    }
    r.summarise();
    ctx.reports.push(r);
}

/// Runs `per_thread` lookups on each of `addrs.len()` threads (thread *i* pinned to CPU *i*, all released by a
/// barrier) and returns the aggregate rate in millions of lookups per second, from the first start to the last
/// finish.
fn aggregate_lookups<M: RangeMap>(cpus: &Cpus, map: &M, addrs: &[Vec<u64>], per_thread: u64) -> f64 {
    let barrier = Barrier::new(addrs.len());
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let barrier = &barrier;
                s.spawn(move || {
                    cpus.pin(i);
                    barrier.wait();
                    let start = Instant::now();
                    let mut acc = 0u64;
                    let mut j = 0;
                    for _ in 0..per_thread {
                        acc = acc.wrapping_add(map.lookup(a[j]).unwrap_or(0));
                        j += 1;
                        if j == a.len() {
                            j = 0;
                        }
                    }
                    black_box(acc);
                    (start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("lookup thread panicked")).collect()
    });
    let start = spans.iter().map(|s| s.0).min().expect("at least one thread");
    let end = spans.iter().map(|s| s.1).max().expect("at least one thread");
    (per_thread * addrs.len() as u64) as f64 / end.duration_since(start).as_secs_f64() / 1e6
}

/// A writer's churn alone and beside a reader thread; one `churn_reader` report (per repeat: writer ns/op alone
/// and with the reader, their ratio, the reader's rate) and one `churn_reader_latency` report (per-op writer
/// latency percentiles from one extra pass of each kind).
fn churn_reader<M: SharedRangeMap>(ctx: &mut Ctx<'_>, t: Target, map: &M, spans: &[Span]) {
    let seed = ctx.cfg.seed ^ spans.len() as u64;
    let addrs = &layout::hit_addresses(spans, ADDRS, seed ^ 1)[..];
    let order = &layout::churn_order(spans.len(), ADDRS, seed ^ 2)[..];
    let cpus = &ctx.cpus;
    let churn = |iters: u64, per_op: &mut dyn FnMut(Duration)| -> Duration {
        let mut i = 0;
        let start = Instant::now();
        for _ in 0..iters {
            let s = spans[order[i]];
            let op = Instant::now();
            black_box(map.remove_shared(s.first, s.last));
            map.insert_shared(s.first, s.last, s.value);
            per_op(op.elapsed());
            i += 1;
            if i == order.len() {
                i = 0;
            }
        }
        start.elapsed()
    };
    // Batch time measured without per-op timestamps; the latency pass below adds them.
    let churn_plain = |iters: u64| -> Duration {
        let mut i = 0;
        time(|| {
            for _ in 0..iters {
                let s = spans[order[i]];
                black_box(map.remove_shared(s.first, s.last));
                map.insert_shared(s.first, s.last, s.value);
                i += 1;
                if i == order.len() {
                    i = 0;
                }
            }
        })
    };
    // Runs `f` on a writer thread pinned to CPU usable[0], with or without a reader on usable[1]; returns what
    // `f` returned and the reader's lookup rate (Mops/s).
    let with_placement = |reader: bool, f: &(dyn Fn() -> Duration + Sync)| -> (Duration, f64) {
        // Relaxed suffices for both flags: they only start and stop loops; no data is published through them
        // (results travel through the scoped threads' join, which synchronises).
        let ready = AtomicBool::new(!reader);
        let stop = AtomicBool::new(false);
        let lookups = AtomicU64::new(0);
        std::thread::scope(|s| {
            let reader_handle = reader.then(|| {
                s.spawn(|| {
                    cpus.pin(1);
                    let start = Instant::now();
                    let mut acc = 0u64;
                    let mut count = 0u64;
                    let mut j = 0;
                    while !stop.load(Ordering::Relaxed) {
                        acc = acc.wrapping_add(map.lookup(addrs[j]).unwrap_or(0));
                        j += 1;
                        if j == addrs.len() {
                            j = 0;
                        }
                        count += 1;
                        if count == 1 {
                            ready.store(true, Ordering::Relaxed);
                        }
                    }
                    black_box(acc);
                    // Relaxed: read after the scope joins this thread.
                    lookups.store(count, Ordering::Relaxed);
                    start.elapsed()
                })
            });
            let writer = s.spawn(|| {
                cpus.pin(0);
                while !ready.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                let took = f();
                stop.store(true, Ordering::Relaxed);
                took
            });
            let took = writer.join().expect("writer panicked");
            let rate = reader_handle.map_or(0.0, |h| {
                let elapsed = h.join().expect("reader panicked");
                lookups.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64() / 1e6
            });
            (took, rate)
        })
    };

    let mut plain = churn_plain;
    let iters = ctx.cfg.timer.calibrate(&mut plain);
    let mut r = ctx.report("churn_reader", t, spans.len(), 2);
    r.param("writer_ops_per_run", iters);
    r.param("op", "remove one random range and insert it back");
    r.param("reader", "lookups of random mapped addresses, read-side protection per lookup");
    r.placement = ctx.cpus.placement(&["writer", "reader"], 2);
    for _ in 0..ctx.cfg.timer.repeats {
        let (alone, _) = with_placement(false, &|| churn_plain(iters));
        let (shared, rate) = with_placement(true, &|| churn_plain(iters));
        let alone_ns = alone.as_nanos() as f64 / iters as f64;
        let shared_ns = shared.as_nanos() as f64 / iters as f64;
        r.push_run(BTreeMap::from([
            ("writer_ns_per_op_alone".to_string(), alone_ns),
            ("writer_ns_per_op_with_reader".to_string(), shared_ns),
            ("slowdown_with_reader".to_string(), shared_ns / alone_ns),
            ("reader_mops_per_s".to_string(), rate),
        ]));
    }
    r.summarise();
    ctx.reports.push(r);

    let mut r = ctx.report("churn_reader_latency", t, spans.len(), 2);
    r.param("writer_ops_per_run", iters);
    r.placement = ctx.cpus.placement(&["writer", "reader"], 2);
    let mut metrics = BTreeMap::new();
    for (reader, suffix) in [(false, "alone"), (true, "with_reader")] {
        let hist = std::sync::Mutex::new(
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds"),
        );
        with_placement(reader, &|| {
            let mut h = hist.lock().expect("histogram lock");
            churn(iters, &mut |d| h.saturating_record((d.as_nanos() as u64).max(1)))
        });
        let h = hist.into_inner().expect("histogram lock");
        for (q, name) in [(0.5, "p50"), (0.99, "p99"), (0.999, "p999")] {
            metrics.insert(format!("writer_{name}_ns_{suffix}"), h.value_at_quantile(q) as f64);
        }
        metrics.insert(format!("writer_max_ns_{suffix}"), h.max() as f64);
        metrics.insert(format!("writer_mean_ns_{suffix}"), h.mean());
    }
    r.push_run(metrics);
    r.summarise();
    ctx.reports.push(r);
}

/// The primary metric of each workload's reports.
fn primary(workload: &str) -> &'static str {
    match workload {
        "bench_mas_for_each" | "iterate" | "dup" => "ns_per_entry",
        "lookup_threads" => "scaling_2t_over_1t",
        "churn_reader" => "slowdown_with_reader",
        "churn_reader_latency" => "writer_p99_ns_with_reader",
        _ => "ns_per_op",
    }
}

fn param_str(r: &Report, name: &str) -> String {
    r.parameters.get(name).and_then(|v| v.as_str()).unwrap_or_default().to_string()
}

fn param_n(r: &Report) -> u64 {
    r.parameters.get("n").and_then(serde_json::Value::as_u64).unwrap_or(0)
}

/// Adds `ratio_to_btreemap` (each run's primary metric over BTreeMap's median of the same workload and size) to
/// every single-threaded report that has a BTreeMap counterpart.
fn add_ratios(reports: &mut [Report]) {
    let base: BTreeMap<(String, u64), f64> = reports
        .iter()
        .filter(|r| param_str(r, "target") == "btree")
        .filter_map(|r| {
            let w = param_str(r, "workload");
            Some(((w.clone(), param_n(r)), r.metric(primary(&w))?.median))
        })
        .collect();
    for r in reports.iter_mut() {
        let w = param_str(r, "workload");
        if matches!(w.as_str(), "lookup_threads" | "churn_reader" | "churn_reader_latency") {
            continue;
        }
        let Some(&b) = base.get(&(w.clone(), param_n(r))) else { continue };
        let metric = primary(&w);
        for run in &mut r.runs {
            if let Some(&v) = run.metrics.get(metric) {
                run.metrics.insert("ratio_to_btreemap".to_string(), v / b);
            }
        }
        r.summarise();
    }
}

fn find<'r>(reports: &'r [Report], workload: &str, target: &str, n: u64) -> Option<&'r Report> {
    reports
        .iter()
        .find(|r| param_str(r, "workload") == workload && param_str(r, "target") == target && param_n(r) == n)
}

/// Checks the targets against the reports.
fn verdicts(cfg: &TreeConfig, reports: &[Report]) -> Vec<Verdict> {
    let mut out = Vec::new();
    let mut check = |what: &str, workload: &str, n: u64, metric: &str, goal: &str, ok: fn(f64) -> bool| {
        let ratio =
            find(reports, workload, "maple", n).and_then(|r| r.metric(metric)).map_or(f64::NAN, |s| s.median);
        out.push(Verdict {
            what: what.to_string(),
            workload: format!("{workload} n={n}"),
            goal: goal.to_string(),
            ratio,
            met: ratio.is_finite() && ok(ratio),
        });
    };
    if !cfg.targets.contains(&Target::Maple) {
        return out;
    }
    let sizes: Vec<u64> = cfg.sizes.iter().map(|&n| n as u64).collect();
    let vs_btree = cfg.targets.contains(&Target::BTree);
    if vs_btree {
        let what = "lookup, guard per lookup, vs BTreeMap";
        check(what, "bench_load", 250, "ratio_to_btreemap", "<= 0.75", |r| r <= 0.75);
        for &n in &sizes {
            check(what, "lookup", n, "ratio_to_btreemap", "<= 0.75", |r| r <= 0.75);
        }
        let what = "iteration per entry vs BTreeMap";
        check(what, "bench_mas_for_each", 500, "ratio_to_btreemap", "<= 3", |r| r <= 3.0);
        for &n in &sizes {
            check(what, "iterate", n, "ratio_to_btreemap", "<= 3", |r| r <= 3.0);
        }
        let what = "dup vs BTreeMap::clone";
        check(what, "bench_fork", 135, "ratio_to_btreemap", "<= 2", |r| r <= 2.0);
        for &n in &sizes {
            check(what, "dup", n, "ratio_to_btreemap", "<= 2", |r| r <= 2.0);
        }
    }
    for &n in &sizes {
        check(
            "2-thread lookup throughput over 1 thread",
            "lookup_threads",
            n,
            "scaling_2t_over_1t",
            ">= 1.8",
            |r| r >= 1.8,
        );
    }
    for &n in &sizes {
        check(
            "writer churn time with a concurrent reader over alone",
            "churn_reader",
            n,
            "slowdown_with_reader",
            "<= 1.10",
            |r| r <= 1.10,
        );
    }
    out
}

/// Workload rows of the terminal table, in order, with their unit.
const ROWS: [(&str, &str); 13] = [
    ("bench_load", "ns/lookup"),
    ("bench_load_batch", "ns/lookup"),
    ("bench_mas_for_each", "ns/entry"),
    ("bench_awalk", "ns/search"),
    ("bench_fork", "ns/dup"),
    ("lookup", "ns/lookup"),
    ("lookup_batch", "ns/lookup"),
    ("iterate", "ns/entry"),
    ("churn", "ns/unmap+map"),
    ("mmap", "ns/op"),
    ("gap", "ns/search"),
    ("dup", "ns/entry"),
    ("lookup_threads", "2T/1T (Mops/s 2T)"),
];

/// The terminal table: one row per workload and size, one column per target; each cell is the median and, for
/// single-threaded rows, its ratio to BTreeMap. Then the churn-with-reader rows and the targets.
pub fn render_table(results: &TreeResults, targets: &[Target]) -> String {
    use std::fmt::Write as _;
    let reports = &results.set.reports;
    let mut out = String::new();
    let w = 19;
    let _ = write!(out, "{:<20} {:>8} {:<18}", "workload", "n", "unit");
    for t in targets {
        let _ = write!(out, " {:>w$}", t.name());
    }
    out.push('\n');
    let mut sizes: Vec<u64> = reports.iter().map(param_n).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut rows: Vec<(&str, &str)> = ROWS.to_vec();
    rows.push(("churn_reader", "with/alone (writer ns)"));
    rows.push(("churn_reader_latency", "p99 ns alone/reader"));
    for (workload, unit) in rows {
        for &n in &sizes {
            if !targets.iter().any(|t| find(reports, workload, t.id(), n).is_some()) {
                continue;
            }
            let _ = write!(out, "{workload:<20} {n:>8} {unit:<18}");
            for t in targets {
                let cell = find(reports, workload, t.id(), n)
                    .map_or_else(|| "n/a".to_string(), |r| cell(r, workload));
                let _ = write!(out, " {cell:>w$}");
            }
            out.push('\n');
        }
    }
    out.push('\n');
    out.push_str("Targets (vmspace maple tree; goals in BENCHMARKS.md):\n");
    for v in &results.verdicts {
        let _ = writeln!(
            out,
            "  {:<6} {:<55} {:<28} goal {:<8} measured {}",
            if !v.ratio.is_finite() {
                "n/a"
            } else if v.met {
                "MET"
            } else {
                "MISSED"
            },
            v.what,
            v.workload,
            v.goal,
            if v.ratio.is_finite() { format!("{:.2}x", v.ratio) } else { "-".to_string() },
        );
    }
    let wrong: Vec<String> = reports
        .iter()
        .filter(|r| r.notes.iter().any(|n| n.starts_with("WRONG")))
        .map(|r| format!("  {}: {}", r.label, r.notes.join("; ")))
        .collect();
    if !wrong.is_empty() {
        out.push_str("\nWrong answers (timings of these rows are not comparable):\n");
        out.push_str(&wrong.join("\n"));
        out.push('\n');
    }
    out
}

fn fmt_num(v: f64) -> String {
    if v >= 100_000.0 {
        format!("{:.3e}", v)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn cell(r: &Report, workload: &str) -> String {
    let med = |m: &str| r.metric(m).map(|s| s.median);
    let wrong = if r.notes.iter().any(|n| n.starts_with("WRONG")) { "!" } else { "" };
    match workload {
        "lookup_threads" => match (med("scaling_2t_over_1t"), med("mops_per_s_2t")) {
            (Some(s), Some(m)) => format!("{s:.2}x ({m:.0})"),
            _ => "-".to_string(),
        },
        "churn_reader" => match (med("slowdown_with_reader"), med("writer_ns_per_op_alone")) {
            (Some(s), Some(a)) => format!("{s:.2}x ({})", fmt_num(a)),
            _ => "-".to_string(),
        },
        "churn_reader_latency" => match (med("writer_p99_ns_alone"), med("writer_p99_ns_with_reader")) {
            (Some(a), Some(b)) => format!("{}/{}", fmt_num(a), fmt_num(b)),
            _ => "-".to_string(),
        },
        _ => match (med(primary(workload)), med("ratio_to_btreemap")) {
            (Some(v), Some(ratio)) => format!("{}{wrong} ({ratio:.2}x)", fmt_num(v)),
            (Some(v), None) => format!("{}{wrong}", fmt_num(v)),
            _ => "-".to_string(),
        },
    }
}
