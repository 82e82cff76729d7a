//! `vmspace bench mm`: the address-space engine against the live kernel.
//!
//! Three measurements in one run, each reported in the shared schema (`vmspace_results::report`):
//!
//! 1. **mmap + munmap pairs per second** (`bench.mm.mmap_munmap`). The same workload on the engine
//!    ([`vmspace_mm::Mm`] with the host's configuration) and on the running kernel (real `mmap`/`munmap`
//!    system calls in this process): an anonymous private read-write mapping of 1 or 16 pages with an address
//!    hint inside the arena at [`ARENA`] (no `MAP_FIXED`; the hint is free, so both place it there, which is
//!    checked), then its `munmap`, in a loop. Each is measured with no other VMA in the arena and with
//!    [`OTHERS`] one-page VMAs of alternating protection (so neither side merges them) placed 1 GiB above the
//!    loop's address. The kernel process also has its own few dozen VMAs (binary, libraries, heap, stack),
//!    which the report notes; the engine's `Mm` holds only what the benchmark maps. Before touching the arena
//!    on the kernel, a `MAP_FIXED_NOREPLACE` probe checks that nothing of this process lives there. The two
//!    sides' batches alternate in rounds, the engine first in even rounds and the kernel first in odd ones
//!    ([`Timer::per_op_rounds`]), and the ratio (`bench.mm.mmap_munmap_ratio`) is taken per round, so that both
//!    halves of a ratio meet the same machine state.
//! 2. **VMA lookups per second** (`bench.mm.lookup`) on an engine `Mm` with [`OTHERS`] VMAs, at random
//!    precomputed addresses inside them, with 1 and 2 threads (thread *i* pinned to the *i*-th usable CPU):
//!    `lock_vma_under_rcu` (lock-free walk + per-VMA read lock, dropped at once) against the mmap read lock
//!    taken around a plain tree lookup (what a fault did before per-VMA locks). Each thread runs a fixed
//!    count; the rate is the total count over the slowest thread's time.
//! 3. **Bytes per VMA** (`bench.mm.bytes_per_vma`) at 1,000 and 100,000 VMAs: `size_of::<Vma>()` (the VMA
//!    object, the engine's only per-mapping record) and the tree's live nodes × 256 bytes / VMAs, against the
//!    kernel's `vm_area_struct` slab object size from `/proc/slabinfo` (readable as root; otherwise reported
//!    unknown). Neither side counts anon_vma chains (the benchmark's VMAs are never faulted).
//!
//! # Targets
//!
//! [`targets`] judges, through [`crate::judge`] like every other benchmark: one-page mmap+munmap pairs with
//! [`OTHERS`] other VMAs at least [`MIN_ENGINE_OVER_KERNEL`] times the kernel's rate, on the per-round ratios;
//! and bytes per VMA (the `Vma` object and its share of the tree) at most [`MAX_BYTES_PER_VMA`], the kernel's
//! `vm_area_struct` alone, at every measured VMA count (an exact quantity: no resolution band). `vmspace
//! report`'s address-space experiment judges the same targets with the same function.
//!
//! Timing follows [`crate::measure`]: calibrated batches, several repeats, the median reported beside every
//! repeat. The 1-minute load average before and after is written into every report.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vmspace_mm::{MapFlags, Mm, MmConfig, MmShared, PAGE_SIZE, Prot, Vma};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Report, ReportSet};

use crate::judge::{Goal, Judged};
use crate::measure::{Cpus, Timer};

/// The arena: the loop's mapping goes here, the other VMAs 1 GiB above it.
pub const ARENA: u64 = 0x2000_0000_0000;
/// Offset of the other VMAs from [`ARENA`].
const OTHERS_OFFSET: u64 = 1 << 30;
/// Number of other VMAs in the "with others" cases and in the lookup benchmark.
pub const OTHERS: usize = 1000;
/// One-page mmap+munmap pairs with [`OTHERS`] other VMAs: the engine's rate over the kernel's must be at least
/// this.
pub const MIN_ENGINE_OVER_KERNEL: f64 = 4.0;
/// Bytes per VMA, the `Vma` object and its share of the tree's nodes, must be at most this: the kernel's
/// `vm_area_struct` slab object alone on Linux 6.18 x86-64 (`/proc/slabinfo`'s objsize).
pub const MAX_BYTES_PER_VMA: f64 = 192.0;
/// Bytes of one maple-tree node (the same in the kernel).
const NODE_BYTES: u64 = 256;

/// What to run.
#[derive(Debug, Clone)]
pub struct MmBenchConfig {
    /// Batch sizing and repeats.
    pub timer: Timer,
    /// Mapping sizes of the mmap/munmap loop, in pages.
    pub pages: Vec<u64>,
    /// VMA counts of the bytes-per-VMA measurement.
    pub sizes: Vec<usize>,
    /// Seed of the lookup addresses.
    pub seed: u64,
    /// Whether this is the `--quick` smoke run.
    pub quick: bool,
}

impl MmBenchConfig {
    /// The full run: 100 ms batches, 7 repeats, 1- and 16-page mappings, 1k and 100k VMAs.
    pub fn full() -> Self {
        MmBenchConfig {
            timer: Timer { batch: Duration::from_millis(100), repeats: 7 },
            pages: vec![1, 16],
            sizes: vec![1000, 100_000],
            seed: 0x5eed_0004,
            quick: false,
        }
    }

    /// A smoke run: 2 ms batches, 3 repeats, 1-page mappings, 1k and 10k VMAs.
    pub fn quick() -> Self {
        MmBenchConfig {
            timer: Timer { batch: Duration::from_millis(2), repeats: 3 },
            pages: vec![1],
            sizes: vec![1000, 10_000],
            seed: 0x5eed_0004,
            quick: true,
        }
    }
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct MmResults {
    /// Everything measured, in the shared schema.
    pub set: ReportSet,
    /// Placement and load, for the terminal.
    pub placement: String,
    /// Whether the run stopped early ([`run_until`]'s `stop` answered true): the reports hold what was
    /// measured before.
    pub interrupted: bool,
}

/// Where a mmap/munmap loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Engine,
    Kernel,
}

impl Side {
    fn id(self) -> &'static str {
        match self {
            Side::Engine => "engine",
            Side::Kernel => "kernel",
        }
    }
}

/// The engine's configuration for the benchmark: the host's, with a `max_map_count` large enough for the
/// 100k-VMA memory measurement.
fn engine_config(max: usize) -> MmConfig {
    let mut cfg = MmConfig::host();
    cfg.max_map_count = cfg.max_map_count.max(max as u64 + 16);
    cfg
}

/// The address of other VMA `i`.
fn other_addr(i: usize) -> u64 {
    ARENA + OTHERS_OFFSET + i as u64 * PAGE_SIZE
}

/// The protection of other VMA `i` (alternating, so adjacent ones never merge).
fn other_prot(i: usize) -> Prot {
    if i.is_multiple_of(2) { Prot::READ } else { Prot::RW }
}

/// An engine `Mm` holding `n` adjacent one-page VMAs of alternating protection.
fn engine_with_others(n: usize) -> Result<Mm, String> {
    let mm = Mm::new(engine_config(n));
    for i in 0..n {
        let a = mm
            .mmap(other_addr(i), PAGE_SIZE, other_prot(i), MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0)
            .map_err(|e| format!("engine mmap of other VMA {i}: {e:?}"))?;
        if a != other_addr(i) {
            return Err(format!("engine placed other VMA {i} at {a:#x}, not at its hint"));
        }
    }
    if mm.map_count() != n as u64 {
        return Err(format!("engine has {} VMAs, expected {n} (something merged)", mm.map_count()));
    }
    Ok(mm)
}

/// The kernel side: checks that the arena is free in this process, maps and unmaps there.
mod kernel {
    use super::*;
    use vmspace_linux::sys;

    /// Whether `[addr, addr + len)` is free in this process ([`sys::range_free`]).
    pub fn range_free(addr: u64, len: u64) -> bool {
        sys::range_free(addr as usize, len as usize)
    }

    /// Maps `len` bytes at the hint `addr` (no MAP_FIXED); returns where the kernel put it.
    pub fn map_hint(addr: u64, len: u64, p: Prot) -> Result<u64, String> {
        let prot = rustix::mm::ProtFlags::from_bits_retain(p.bits());
        sys::map_anon_near(addr as usize, len as usize, prot)
            .map(|a| a as u64)
            .map_err(|e| format!("kernel mmap: {e}"))
    }

    /// Unmaps `[addr, addr + len)`.
    ///
    /// # Safety
    /// The range was mapped by this benchmark and nothing refers into it.
    pub unsafe fn unmap(addr: u64, len: u64) -> Result<(), String> {
        // SAFETY: the caller guarantees the range belongs to the benchmark and is unreferenced.
        unsafe { sys::unmap(addr as usize, len as usize) }.map_err(|e| format!("kernel munmap: {e}"))
    }

    /// The kernel's other VMAs: `n` adjacent one-page mappings of alternating protection, unmapped on drop.
    pub struct Others {
        n: usize,
    }

    impl Others {
        pub fn map(n: usize) -> Result<Others, String> {
            let mut o = Others { n: 0 };
            for i in 0..n {
                let a = map_hint(other_addr(i), PAGE_SIZE, other_prot(i))?;
                if a != other_addr(i) {
                    // SAFETY: `a` is the page just mapped, unreferenced.
                    unsafe { unmap(a, PAGE_SIZE)? };
                    return Err(format!("kernel placed other VMA {i} at {a:#x}, not at its hint"));
                }
                o.n = i + 1;
            }
            Ok(o)
        }
    }

    impl Drop for Others {
        fn drop(&mut self) {
            if self.n > 0 {
                // SAFETY: the benchmark mapped exactly these pages and never handed out references into them.
                let _ = unsafe { unmap(other_addr(0), self.n as u64 * PAGE_SIZE) };
            }
        }
    }

    /// Number of VMAs of this process (lines of /proc/self/maps).
    pub fn map_count() -> Option<usize> {
        std::fs::read_to_string("/proc/self/maps").ok().map(|s| s.lines().count())
    }
}

/// Shared state of one run.
struct Ctx<'a> {
    cfg: &'a MmBenchConfig,
    cpus: Cpus,
    host: HostInfo,
    reports: Vec<Report>,
    progress: &'a mut dyn FnMut(&str),
    stop: &'a dyn Fn() -> bool,
    interrupted: bool,
}

impl Ctx<'_> {
    fn report(&self, bench: &str, label: String, threads: usize) -> Report {
        let mut r = Report::new(&format!("bench.mm.{bench}"), label, self.host.clone());
        r.param("quick", self.cfg.quick);
        crate::measure::stamp(&mut r, &self.cfg.timer, &self.cpus, threads);
        r
    }

    /// Whether the caller asked the run to stop (remembered: once stopped, it stays stopped).
    fn stopped(&mut self) -> bool {
        self.interrupted = self.interrupted || (self.stop)();
        self.interrupted
    }
}

/// Runs `vmspace bench mm`; `progress` is called once per step of [`steps`].
pub fn run(cfg: &MmBenchConfig, progress: &mut dyn FnMut(&str), command: &str) -> Result<MmResults, String> {
    run_until(cfg, progress, &|| false, command)
}

/// [`run`], stopping early when `stop` answers true (asked before each step): the results then hold what was
/// measured so far, and [`MmResults::interrupted`] is set.
pub fn run_until(
    cfg: &MmBenchConfig,
    progress: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
    command: &str,
) -> Result<MmResults, String> {
    // Host facts first: discovering the CPUs pins this thread, which would narrow the affinity mask they report.
    let host = vmspace_linux::hostinfo::gather();
    let load_before = loadavg();
    let cpus = Cpus::discover();
    let placement = cpus.describe();
    let mut ctx = Ctx { cfg, cpus, host, reports: Vec::new(), progress, stop, interrupted: false };

    mmap_munmap(&mut ctx)?;
    lookups(&mut ctx)?;
    bytes_per_vma(&mut ctx)?;

    let load_after = loadavg();
    let busy = load_before.is_some_and(|l| l > 0.5 * ctx.cpus.usable.len() as f64);
    let load_note = format!(
        "1-minute load average before/after the run: {}/{}{}",
        load_before.map_or("?".to_string(), |l| format!("{l:.2}")),
        load_after.map_or("?".to_string(), |l| format!("{l:.2}")),
        if busy { " (the machine was busy before the run: timings are noisy)" } else { "" }
    );
    for r in &mut ctx.reports {
        r.notes.push(load_note.clone());
    }
    Ok(MmResults {
        set: ReportSet::new(command, ctx.reports),
        placement: format!("{placement}\n{load_note}"),
        interrupted: ctx.interrupted,
    })
}

/// The targets (module docs) over a run's reports (`bench.mm.*`); a target whose reports are missing is not
/// measured.
pub fn targets(reports: &[Report]) -> Vec<Judged> {
    let u = |r: &Report, k: &str| r.parameters.get(k).and_then(serde_json::Value::as_u64);
    let ratios: Vec<f64> = reports
        .iter()
        .find(|r| {
            r.benchmark == "bench.mm.mmap_munmap_ratio"
                && u(r, "pages") == Some(1)
                && u(r, "other_vmas") == Some(OTHERS as u64)
        })
        .map(|r| r.runs.iter().filter_map(|run| run.metrics.get("engine_over_kernel").copied()).collect())
        .unwrap_or_default();
    let mut out = vec![Judged::new(
        "mmap+munmap pairs per second, engine over kernel (1 page, per round of interleaved batches)",
        format!("{OTHERS} other VMAs"),
        Goal::AtLeast(MIN_ENGINE_OVER_KERNEL),
        ratios,
    )];
    let what = "bytes per VMA: Vma object and its share of the tree, against the kernel's vm_area_struct";
    let mut sizes = 0;
    for r in reports.iter().filter(|r| r.benchmark == "bench.mm.bytes_per_vma") {
        sizes += 1;
        let bytes = r.metric("total_bytes_per_vma").map_or(f64::NAN, |s| s.median);
        let mut j = Judged::exact_at_most(what, bytes, MAX_BYTES_PER_VMA).in_unit(" B");
        j.at = format!("{} VMAs", u(r, "vmas").map_or("?".to_string(), |n| n.to_string()));
        out.push(j);
    }
    if sizes == 0 {
        let mut j = Judged::exact_at_most(what, f64::NAN, MAX_BYTES_PER_VMA).in_unit(" B");
        j.at = "every measured count".to_string();
        out.push(j);
    }
    out
}

/// The number of progress steps of [`run`] with `cfg`.
pub fn steps(cfg: &MmBenchConfig) -> u64 {
    (cfg.pages.len() * 2 * 2) as u64 + 4 + cfg.sizes.len() as u64
}

/// Part 1: mmap+munmap pairs per second, engine and kernel, with 0 and [`OTHERS`] other VMAs.
fn mmap_munmap(ctx: &mut Ctx<'_>) -> Result<(), String> {
    let timer = ctx.cfg.timer;
    let need = OTHERS_OFFSET + OTHERS as u64 * PAGE_SIZE;
    if !kernel::range_free(ARENA, need) {
        return Err(format!("the arena [{ARENA:#x}, {:#x}) is not free in this process", ARENA + need));
    }
    let own_vmas = kernel::map_count();
    let flags = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
    let prot = Prot::RW;
    for &pages in &ctx.cfg.pages.clone() {
        let len = pages * PAGE_SIZE;
        for others in [0, OTHERS] {
            if ctx.stopped() {
                return Ok(());
            }
            (ctx.progress)(&format!(
                "mmap+munmap {pages} page(s), {others} others, engine and kernel interleaved"
            ));
            let mm = engine_with_others(others)?;
            let _others = kernel::Others::map(others)?;
            let (mut engine_error, mut kernel_error) = (None, None);
            let (engine, kernel) = timer.per_op_interleaved(
                |iters| {
                    let t = Instant::now();
                    for _ in 0..iters {
                        match mm.mmap(ARENA, len, prot, flags, None, 0) {
                            Ok(a) if a == ARENA => {}
                            other => engine_error = Some(format!("engine mmap returned {other:?}")),
                        }
                        if let Err(e) = mm.munmap(ARENA, len) {
                            engine_error = Some(format!("engine munmap: {e:?}"));
                        }
                    }
                    t.elapsed()
                },
                |iters| {
                    let t = Instant::now();
                    for _ in 0..iters {
                        match kernel::map_hint(ARENA, len, prot) {
                            Ok(a) => {
                                if a != ARENA {
                                    kernel_error = Some(format!("kernel placed the mapping at {a:#x}"));
                                }
                                // SAFETY: `a` was just mapped by this loop and nothing refers into it.
                                if let Err(e) = unsafe { kernel::unmap(a, len) } {
                                    kernel_error = Some(e);
                                }
                            }
                            Err(e) => kernel_error = Some(e),
                        }
                    }
                    t.elapsed()
                },
            );
            if let Some(e) = engine_error.or(kernel_error) {
                return Err(e);
            }
            for (side, values) in [(Side::Engine, &engine), (Side::Kernel, &kernel)] {
                let mut r = ctx.report(
                    "mmap_munmap",
                    format!("mmap+munmap {pages}p, {others} others, {}", side.id()),
                    1,
                );
                r.param("side", side.id());
                r.param("pages", pages);
                r.param("other_vmas", others);
                r.param("hint", format!("{ARENA:#x}"));
                if side == Side::Kernel {
                    r.param("process_vmas_before", own_vmas);
                    r.notes.push(format!(
                        "the kernel process also holds its own {} VMAs (binary, libraries, heap, stacks)",
                        own_vmas.map_or("?".to_string(), |n| n.to_string())
                    ));
                }
                for &v in values {
                    r.push_run(BTreeMap::from([
                        ("pair_ns".to_string(), v),
                        ("pairs_per_s".to_string(), 1e9 / v),
                    ]));
                }
                r.summarise();
                ctx.reports.push(r);
            }
            let mut r =
                ctx.report("mmap_munmap_ratio", format!("engine/kernel {pages}p, {others} others"), 1);
            r.param("pages", pages);
            r.param("other_vmas", others);
            r.notes.push(
                "engine pairs per second over kernel pairs per second, one ratio per round of interleaved batches \
                 (engine first in even rounds, kernel first in odd ones); > 1: engine faster"
                    .into(),
            );
            for (e, k) in engine.iter().zip(&kernel) {
                r.push_run(BTreeMap::from([("engine_over_kernel".to_string(), k / e)]));
            }
            r.summarise();
            ctx.reports.push(r);
        }
    }
    Ok(())
}

/// How a lookup thread finds a VMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LookupMode {
    /// `lock_vma_under_rcu`, then drop the VMA read lock.
    PerVma,
    /// mmap read lock, tree lookup, unlock.
    MmapLock,
}

impl LookupMode {
    fn id(self) -> &'static str {
        match self {
            LookupMode::PerVma => "lock_vma_under_rcu",
            LookupMode::MmapLock => "mmap_read_lock",
        }
    }
}

/// `iters` lookups of `addrs` (cycled) in `mode`; returns the sum of the found starts (kept alive).
fn lookup_loop(shared: &MmShared, addrs: &[u64], iters: u64, mode: LookupMode) -> u64 {
    let mut sum = 0u64;
    let n = addrs.len();
    for i in 0..iters as usize {
        let addr = addrs[i % n];
        match mode {
            LookupMode::PerVma => {
                if let Some(v) = shared.lock_vma_under_rcu(addr) {
                    sum = sum.wrapping_add(v.start());
                }
            }
            LookupMode::MmapLock => {
                let g = shared.locking.read_lock();
                if let Some(v) = shared.vma_locked(&g, addr) {
                    sum = sum.wrapping_add(v.start());
                }
                drop(g);
            }
        }
    }
    sum
}

/// Part 2: lookups per second, per-VMA lock vs mmap read lock, 1 and 2 threads.
fn lookups(ctx: &mut Ctx<'_>) -> Result<(), String> {
    let mm = engine_with_others(OTHERS)?;
    let shared: Arc<MmShared> = mm.shared();
    let mut rng = StdRng::seed_from_u64(ctx.cfg.seed);
    let addrs: Arc<Vec<u64>> = Arc::new(
        (0..4096).map(|_| other_addr(rng.random_range(0..OTHERS)) + rng.random_range(0..PAGE_SIZE)).collect(),
    );
    let timer = ctx.cfg.timer;
    for mode in [LookupMode::PerVma, LookupMode::MmapLock] {
        let iters = timer.calibrate(&mut |iters| {
            let t = Instant::now();
            black_box(lookup_loop(&shared, &addrs, iters, mode));
            t.elapsed()
        });
        for threads in [1usize, 2] {
            if ctx.stopped() {
                return Ok(());
            }
            (ctx.progress)(&format!("lookups {} x{threads}", mode.id()));
            let found_before = shared.locking.stats().snapshot();
            let mut rates = Vec::new();
            let mut placed = vec![None; threads];
            for _ in 0..timer.repeats {
                let barrier = Arc::new(Barrier::new(threads));
                let results: Vec<(Duration, Option<usize>)> = std::thread::scope(|s| {
                    let handles: Vec<_> = (0..threads)
                        .map(|i| {
                            let (shared, addrs, barrier, cpus) =
                                (&shared, &addrs, barrier.clone(), &ctx.cpus);
                            s.spawn(move || {
                                let cpu = cpus.pin(i);
                                barrier.wait();
                                let t = Instant::now();
                                black_box(lookup_loop(shared, addrs, iters, mode));
                                (t.elapsed(), cpu)
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().expect("lookup thread panicked")).collect()
                });
                let slowest = results.iter().map(|r| r.0).max().unwrap_or_default();
                for (i, r) in results.iter().enumerate() {
                    placed[i] = r.1;
                }
                rates.push((iters * threads as u64) as f64 / slowest.as_secs_f64().max(1e-9));
            }
            let after = shared.locking.stats().snapshot();
            let mut r = ctx.report("lookup", format!("{} x{threads}", mode.id()), threads);
            for (p, cpu) in r.placement.iter_mut().zip(&placed) {
                p.cpu = *cpu;
            }
            r.param("mode", mode.id());
            r.param("threads", threads);
            r.param("vmas", OTHERS);
            r.param("iters_per_thread", iters);
            if mode == LookupMode::PerVma {
                let failed = (after.abort - found_before.abort) + (after.miss - found_before.miss);
                r.param("failed_lookups", failed);
                if failed != 0 {
                    r.notes.push(format!("{failed} lock_vma_under_rcu calls did not return the VMA"));
                }
            }
            for &v in &rates {
                r.push_run(BTreeMap::from([
                    ("lookups_per_s".to_string(), v),
                    ("lookup_ns_per_thread".to_string(), threads as f64 * 1e9 / v),
                ]));
            }
            r.summarise();
            ctx.reports.push(r);
        }
    }
    drop(shared);
    drop(mm);
    Ok(())
}

/// The `vm_area_struct` slab object size from /proc/slabinfo (root only).
pub fn kernel_vma_objsize() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/slabinfo").ok()?;
    let line = text.lines().find(|l| l.split_whitespace().next() == Some("vm_area_struct"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// What one VMA of an address space costs (part 3 of the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VmaBytes {
    /// `size_of::<Vma>()`: the VMA object, the engine's only per-mapping record.
    pub vma: f64,
    /// The VMA tree's live nodes x 256 bytes, over the VMAs.
    pub tree: f64,
}

impl VmaBytes {
    /// Bytes per VMA in all.
    pub fn total(&self) -> f64 {
        self.vma + self.tree
    }
}

/// Bytes per VMA of `mm` (NaN tree share for an empty address space).
pub fn vma_bytes(mm: &Mm) -> VmaBytes {
    let n = mm.map_count();
    let tree = if n == 0 { f64::NAN } else { (mm.tree_nodes() * NODE_BYTES) as f64 / n as f64 };
    VmaBytes { vma: std::mem::size_of::<Vma>() as f64, tree }
}

/// Part 3: bytes per VMA at each configured size.
fn bytes_per_vma(ctx: &mut Ctx<'_>) -> Result<(), String> {
    let kernel_objsize = kernel_vma_objsize();
    for &n in &ctx.cfg.sizes.clone() {
        if ctx.stopped() {
            return Ok(());
        }
        (ctx.progress)(&format!("bytes per VMA at {n}"));
        let mm = engine_with_others(n)?;
        let nodes = mm.tree_nodes();
        let VmaBytes { vma, tree } = vma_bytes(&mm);
        let mut r = ctx.report("bytes_per_vma", format!("bytes per VMA at {n} VMAs"), 1);
        r.param("vmas", n);
        r.param("tree_live_nodes", nodes);
        r.param("kernel_vm_area_struct_objsize", kernel_objsize);
        let mut m = BTreeMap::from([
            ("vma_object_bytes".to_string(), vma),
            ("tree_node_bytes_per_vma".to_string(), tree),
            ("total_bytes_per_vma".to_string(), vma + tree),
        ]);
        if let Some(k) = kernel_objsize {
            m.insert("kernel_vm_area_struct_bytes".to_string(), k as f64);
        } else {
            r.notes.push("/proc/slabinfo unreadable (not root): kernel vm_area_struct size unknown".into());
        }
        r.notes.push(
            "the kernel's figure is its vm_area_struct alone; its maple tree costs 256-byte nodes as ours does"
                .into(),
        );
        r.push_run(m);
        r.summarise();
        ctx.reports.push(r);
        drop(mm);
    }
    Ok(())
}

/// Renders the terminal table.
pub fn render_table(res: &MmResults) -> String {
    let med = |r: &Report, m: &str| r.metric(m).map_or(f64::NAN, |s| s.median);
    let mut out = String::new();
    out.push_str("mmap+munmap pairs per second (median; min..max)\n");
    for r in res.set.reports.iter().filter(|r| r.benchmark == "bench.mm.mmap_munmap") {
        let s = r.metric("pairs_per_s");
        out.push_str(&format!(
            "  {:<42} {:>12.0}  ({:.0}..{:.0})  {:.0} ns/pair\n",
            r.label,
            s.map_or(f64::NAN, |s| s.median),
            s.map_or(f64::NAN, |s| s.min),
            s.map_or(f64::NAN, |s| s.max),
            med(r, "pair_ns")
        ));
    }
    for r in res.set.reports.iter().filter(|r| r.benchmark == "bench.mm.mmap_munmap_ratio") {
        let s = r.metric("engine_over_kernel");
        out.push_str(&format!(
            "  {:<42} {:>12.2}x  ({:.2}..{:.2} over the interleaved batch pairs)\n",
            r.label,
            med(r, "engine_over_kernel"),
            s.map_or(f64::NAN, |s| s.min),
            s.map_or(f64::NAN, |s| s.max)
        ));
    }
    out.push_str("\nVMA lookups per second, engine Mm with 1000 VMAs (median; min..max)\n");
    for r in res.set.reports.iter().filter(|r| r.benchmark == "bench.mm.lookup") {
        let s = r.metric("lookups_per_s");
        let cpus: Vec<String> =
            r.placement.iter().map(|p| p.cpu.map_or("-".to_string(), |c| c.to_string())).collect();
        out.push_str(&format!(
            "  {:<30} {:>14.0}  ({:.0}..{:.0})  {:.1} ns/lookup/thread  cpus [{}]\n",
            r.label,
            s.map_or(f64::NAN, |s| s.median),
            s.map_or(f64::NAN, |s| s.min),
            s.map_or(f64::NAN, |s| s.max),
            med(r, "lookup_ns_per_thread"),
            cpus.join(",")
        ));
    }
    out.push_str("\nBytes per VMA (Vma object + tree nodes) vs kernel vm_area_struct\n");
    for r in res.set.reports.iter().filter(|r| r.benchmark == "bench.mm.bytes_per_vma") {
        out.push_str(&format!(
            "  {:<28} Vma {:.0} + tree {:.1} = {:.1}; kernel vm_area_struct {}\n",
            r.label,
            med(r, "vma_object_bytes"),
            med(r, "tree_node_bytes_per_vma"),
            med(r, "total_bytes_per_vma"),
            r.metric("kernel_vm_area_struct_bytes")
                .map_or("unknown".to_string(), |s| format!("{:.0}", s.median))
        ));
    }
    out
}

/// The 1-minute load average (`/proc/loadavg`), if readable.
fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::Status;

    fn report(bench: &str, params: &[(&str, u64)], metric: &str, values: &[f64]) -> Report {
        Report::of_values(bench, params, metric, values)
    }

    #[test]
    fn targets_judge_the_pair_ratio_at_1000_others_and_every_size() {
        let reports = [
            // The empty space's ratio is not the target's.
            report(
                "bench.mm.mmap_munmap_ratio",
                &[("pages", 1), ("other_vmas", 0)],
                "engine_over_kernel",
                &[1.0, 1.0, 1.0],
            ),
            report(
                "bench.mm.mmap_munmap_ratio",
                &[("pages", 1), ("other_vmas", OTHERS as u64)],
                "engine_over_kernel",
                &[4.4, 4.6, 4.5, 4.3, 4.9],
            ),
            report("bench.mm.bytes_per_vma", &[("vmas", 1000)], "total_bytes_per_vma", &[148.7]),
            report("bench.mm.bytes_per_vma", &[("vmas", 100_000)], "total_bytes_per_vma", &[192.5]),
        ];
        let t = targets(&reports);
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].status, t[0].values.len(), t[0].goal), (Status::Met, 5, Goal::AtLeast(4.0)));
        assert_eq!((t[1].status, t[1].at.as_str()), (Status::Met, "1000 VMAs"));
        assert_eq!((t[2].status, t[2].at.as_str()), (Status::Missed, "100000 VMAs"));
        assert_eq!(t[1].measured_text(), "149 B");
        // Straddling the goal: undecided; nothing measured: not measured.
        let straddle = [report(
            "bench.mm.mmap_munmap_ratio",
            &[("pages", 1), ("other_vmas", OTHERS as u64)],
            "engine_over_kernel",
            &[3.77, 4.02, 3.9],
        )];
        assert_eq!(targets(&straddle)[0].status, Status::Undecided);
        let none = targets(&[]);
        assert_eq!(none.len(), 2);
        assert!(none.iter().all(|t| t.status == Status::NotMeasured));
    }
}
