//! `vmspace bench fork`: fork against the number of VMAs, the engine's two ways of building the child's tree
//! beside the live kernel, and what a VMA and a faulted page cost in memory.
//!
//! # Workload
//!
//! The `__mt_dup` series' experiment. For each count N of extra VMAs (the series' increments: 0, 100, 200, 400,
//! ..., 1,638,400), an address space gets N single-page VMAs that cannot merge, then forks again and again:
//!
//! - **engine**: an [`Mm`] (`MmConfig::host()` with `max_map_count` raised to fit) holding [`BASE_VMAS`] + N
//!   VMAs (21: the series' process before its extra VMAs), made as the kernel side makes them: one read-only
//!   mapping of that many pages with every other page made read-write by `mprotect`. Each fork is
//!   `Mm::fork_with` (`kernel/fork.c: dup_mmap` under the parent's mmap write lock) followed by the child's
//!   drop (its exit: every VMA detached and freed, its page tables torn down). Two modes, alternating run by
//!   run on the same parent: [`ForkMode::Dup`] (the tree's O(n) copy, `__mt_dup`, as since 6.8) and
//!   [`ForkMode::Reinsert`] (each VMA stored into an empty tree, as before).
//! - **kernel**: `vmspace_linux::fork::run_count_with`: this process with N extra VMAs forks a child that
//!   `_exit`s at once and waits for it; counts that do not fit under `vm.max_map_count` have no kernel row.
//!   The kernel's rows run first, before the engine has allocated anything: the engine's VMA pool, tree nodes
//!   and frame table stay mapped in this process once used, and the kernel's fork would copy their page
//!   tables too (a first version that interleaved them measured kernel forks of 34 VMAs taking 46 ms).
//!
//! **With pages**, every VMA has one faulted page on both sides: the region is mapped read-write, each page
//! written (engine: `Mm::touch` with a write access, a real write fault through the 6.18 fault path that maps
//! a new anonymous page, without storing data the engine would keep a 4 KiB buffer for), then every other
//! page made read-only. Every VMA then has an anon_vma and one present PTE, so fork also runs `anon_vma_fork`
//! and `copy_page_range` (write-protecting each page on both sides for copy-on-write) per VMA.
//!
//! # Results
//!
//! One `bench.fork` report per (side, mode, pages, count), its runs the samples. Metrics of every run, on both
//! sides: `forks_per_s` (fork + the child's exit, and on the kernel the parent's wait), `forks_per_10s`,
//! `fork_mean_us` (one such cycle), `vmas_duplicated_per_s` (= forks per second x all VMAs, the series'
//! "VMAs * forks"), `fork_call_us` (the fork call alone) and `vmas_copied_per_s_in_fork` (all VMAs over the
//! fork call alone: the rate at which `dup_mmap` copies); engine runs add `exit_us` (the child's drop). One
//! `bench.fork.ratio` report per (pages, count): re-insertion's fork call time over the tree copy's, run by
//! run (> 1: the copy is faster).
//!
//! Memory, one `bench.fork.memory` report per (pages, count): bytes per VMA of the parent and of each child
//! ([`crate::mm::vma_bytes`]: `size_of::<Vma>()` + tree nodes x 256 B / VMAs, the measure of `bench mm`), and
//! with pages the page-table bytes per faulted page: the growth of the engine's page tables over the setup
//! (`Mm::page_table_bytes`, each 4 KiB table with its 64-byte descriptor) and of the kernel's (`VmPTE`) over
//! the pages faulted.
//!
//! # The copy's bound: bytes per VMA and this machine's copy bandwidth
//!
//! Without pages, at counts of at least [`COPY_JUDGED_FROM`] VMAs, the tree copy's fork call is a copy of
//! memory and is held against the fastest such copy this machine makes, measured in the same run. The bytes the
//! fork must move per VMA ([`ForkBytes`], from the real sizes): the child's `Vma` (`size_of::<Vma>()`, filled
//! from the parent's), the child tree's nodes over its VMAs (the `__mt_dup` copy of the parent's nodes, 256 bytes
//! each) and the pointer the VMA batch holds per child VMA (`VmaPool::alloc_bulk`'s vector). A `memcpy` of
//! that many bytes per VMA x all VMAs, from one buffer into another ([`memcpy_run`]: `copy_from_slice`, the
//! libc's `memcpy`), runs again and again like the forks, with both buffers allocated and touched once before:
//! warm where the fork is warm (the parent and the pool's child VMAs, reused fork after fork, stay cached as far
//! as the caches hold them), so the copy sees the same caches. Its runs interleave with the fork's (tree copy,
//! re-insertion, memcpy, per sample). One `bench.fork.bound` report per such count: per run
//! `bytes_per_vma`, `memcpy_bytes_per_s`, `fork_bytes_per_s` (the tree copy's VMAs copied per second in the
//! fork call of the same sample x bytes per VMA) and `share_of_memcpy` (their quotient).
//!
//! # The layout's floor
//!
//! The bound above counts the bytes the fork must produce; the fork also has to read the parent, and a write
//! to a line not in the cache first reads it. What any fork of this layout must do at least is measured in the
//! same samples by a model of the copy with nothing else in it ([`FloorModel`], [`floor_run`], run after the
//! memcpy in each sample): as many 128-byte objects as the parent has VMAs, neighbours in memory (as the pool
//! makes them), reached through 256-byte leaves holding as many as the child tree's nodes hold on average; per
//! object a leaf slot loaded (the pointer chase: the object's load depends on it), the object's two lines read
//! and written with one word changed into the next of as many child objects (the contiguous batch), the child's
//! index stored in a copy of the leaf. No lock, no count, no allocation, no branch but the loops'. Between two
//! copies the child objects and leaves are written over, untimed, as a fork's child exits between two forks
//! (so the copy meets the caches as a fork does, not as a copy right after a copy). The bound
//! report's runs add `floor_vmas_per_s`, `floor_share_of_memcpy` (the floor's rate x the bytes per VMA over the
//! memcpy's bytes per second: the share no fork of this layout can exceed here) and `fork_over_floor` (the
//! fork call's VMAs per second over the floor's).
//!
//! # Targets
//!
//! `targets`: without pages, the tree copy's fork call moves its bytes at least at [`MIN_SHARE_OF_MEMCPY`] of
//! the measured copy bandwidth at every count of at least [`COPY_JUDGED_FROM`] VMAs (judged on the per-sample
//! shares); without pages, the tree copy duplicates at least [`MIN_M_VMAS_COPIED_PER_S`] million VMAs per
//! second in the fork call at every count of at least [`COPY_JUDGED_FROM`] VMAs; the copy's fork call is faster
//! than re-insertion's (ratio > 1) at every count of at least [`RATIO_JUDGED_FROM`] VMAs, without and with pages;
//! at most 213 bytes per VMA in every parent and every tree-copied child of at least [`MEMORY_JUDGED_FROM`]
//! VMAs (smaller counts are reported, not judged: the tree's few nodes are a fixed cost there). `vmspace
//! report` judges the first two with the same constants, run by run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use vmspace_linux::faults::thread_cpu_s;

use vmspace_mm::{Access, ForkMode, MapFlags, Mm, MmConfig, PAGE_SIZE, Prot};
use vmspace_results::host::HostInfo;
use vmspace_results::report::{Placement, Report, ReportSet};

use crate::judge::Judged;
use crate::measure::Cpus;
use crate::mm::vma_bytes;

/// VMAs the engine's address space has before the extra ones (the series' process had 21).
pub const BASE_VMAS: usize = 21;

/// The series' increments of VMAs (its table goes to 1,638,400 extra).
pub const SERIES_COUNTS: [usize; 16] = [
    0, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200, 102_400, 204_800, 409_600, 819_200,
    1_638_400,
];

/// Million VMAs per second the tree copy must duplicate in the fork call (no pages) at every count of at least
/// [`COPY_JUDGED_FROM`] VMAs.
pub const MIN_M_VMAS_COPIED_PER_S: f64 = 40.0;

/// The share of this machine's `memcpy` bandwidth (module docs, "The copy's bound") the tree copy's fork call
/// must reach at every count of at least [`COPY_JUDGED_FROM`] VMAs.
pub const MIN_SHARE_OF_MEMCPY: f64 = 0.8;

/// The VMA count (all VMAs of the forking address space) from which the copy rate is judged.
pub const COPY_JUDGED_FROM: u64 = 100_000;

/// The VMA count from which the tree copy's fork call must be faster than re-insertion's.
pub const RATIO_JUDGED_FROM: u64 = 100;

/// Bytes per VMA the engine must stay within.
pub const MAX_BYTES_PER_VMA: f64 = 213.0;

/// The VMA count from which bytes per VMA are judged: below it the tree's few nodes are a fixed cost that one
/// VMA more or less changes (one 256-byte node is 12 bytes per VMA at 21 VMAs); `bench mm` measures at 1,000
/// and 100,000.
pub const MEMORY_JUDGED_FROM: u64 = 1000;

/// Where a row forks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ForkSide {
    /// The engine with the tree copy.
    EngineDup,
    /// The engine re-inserting every VMA.
    EngineReinsert,
    /// The live kernel.
    Kernel,
}

impl ForkSide {
    /// The `mode` parameter.
    pub fn mode(self) -> &'static str {
        match self {
            ForkSide::EngineDup => "tree-copy",
            ForkSide::EngineReinsert => "reinsert",
            ForkSide::Kernel => "kernel",
        }
    }

    /// The `side` parameter.
    pub fn side(self) -> &'static str {
        if self == ForkSide::Kernel { "kernel" } else { "engine" }
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkConfig {
    /// Extra VMA counts, ascending.
    pub extra: Vec<usize>,
    /// Runs per row.
    pub samples: usize,
    /// Least length of one run (a run makes at least one fork).
    pub duration: Duration,
    /// Whether to measure without pages, with one faulted page per VMA, or both.
    pub pages: Vec<bool>,
    /// Whether to measure the live kernel.
    pub kernel: bool,
    /// Whether this is the `--quick` smoke run.
    pub quick: bool,
}

impl ForkConfig {
    /// The full run: every series count, 3 runs of 1 s per row, without and with pages, the kernel beside.
    pub fn full() -> ForkConfig {
        ForkConfig {
            extra: SERIES_COUNTS.to_vec(),
            samples: 3,
            duration: Duration::from_secs(1),
            pages: vec![false, true],
            kernel: true,
            quick: false,
        }
    }

    /// A smoke run: 0, 100 and 1000 extra VMAs, 1 run of 20 ms.
    pub fn quick() -> ForkConfig {
        ForkConfig {
            extra: vec![0, 100, 1000],
            samples: 1,
            duration: Duration::from_millis(20),
            pages: vec![false, true],
            kernel: true,
            quick: true,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        if self.extra.is_empty() {
            return Err("no VMA count to measure (--vmas, --max)".into());
        }
        if self.extra.iter().any(|&n| n > 64 << 20) {
            return Err("--vmas: at most 67,108,864 extra VMAs".into());
        }
        if self.samples == 0 || self.samples > 10_000 {
            return Err("--samples must be 1..=10000".into());
        }
        if self.duration < Duration::from_millis(1) || self.duration > Duration::from_secs(24 * 3600) {
            return Err("--duration must be between 1 ms and 24 h".into());
        }
        if self.pages.is_empty() {
            return Err("nothing to measure: neither without nor with pages".into());
        }
        Ok(())
    }

    /// Progress steps of [`run`]: per count and page variant, the setup, each engine run and the kernel's runs.
    pub fn steps(&self) -> u64 {
        (self.extra.len()
            * self.pages.len()
            * (1 + 2 * self.samples + usize::from(self.kernel) * self.samples)) as u64
    }

    /// The largest number of VMAs an engine address space holds.
    pub fn most_vmas(&self) -> usize {
        BASE_VMAS + self.extra.iter().copied().max().unwrap_or(0)
    }
}

/// The engine's forking address space: [`BASE_VMAS`] + `extra` single-page VMAs (module docs), with one
/// faulted page each if `pages`. Checks that it has exactly that many VMAs (and pages).
pub fn engine_parent(extra: usize, pages: bool) -> Result<Mm, String> {
    let n = BASE_VMAS + extra;
    let mut cfg = MmConfig::host();
    cfg.max_map_count = cfg.max_map_count.max(n as u64 + 64);
    let mm = Mm::new(cfg);
    let len = n as u64 * PAGE_SIZE;
    let prot = if pages { Prot::RW } else { Prot::READ };
    let a = mm
        .mmap(0, len, prot, MapFlags::PRIVATE | MapFlags::ANONYMOUS, None, 0)
        .map_err(|e| format!("engine mmap of {n} pages: {e:?}"))?;
    if pages {
        for i in 0..n as u64 {
            mm.touch(a + i * PAGE_SIZE, Access::Write).map_err(|at| format!("engine write: {at}"))?;
        }
    }
    let (other, first) = if pages { (Prot::READ, 0) } else { (Prot::RW, 1) };
    for i in (first..n as u64).step_by(2) {
        mm.mprotect(a + i * PAGE_SIZE, PAGE_SIZE, other).map_err(|e| format!("engine mprotect: {e:?}"))?;
    }
    if mm.map_count() != n as u64 {
        return Err(format!("the engine has {} VMAs, not {n}", mm.map_count()));
    }
    if pages && mm.rss().anon != n as i64 {
        return Err(format!("the engine has {} anonymous pages, not {n}", mm.rss().anon));
    }
    Ok(mm)
}

/// One engine run: forks of `mm` in `mode`, each followed by the child's drop, until `duration` has passed
/// (at least one). Checks the first child's VMA count.
pub fn engine_run(mm: &Mm, mode: ForkMode, duration: Duration) -> Result<BTreeMap<String, f64>, String> {
    let total = mm.map_count();
    let (mut forks, mut in_fork, mut in_exit) = (0u64, Duration::ZERO, Duration::ZERO);
    let start = Instant::now();
    let cpu0 = thread_cpu_s();
    while forks == 0 || start.elapsed() < duration {
        let t0 = Instant::now();
        let child = mm.fork_with(mode).map_err(|e| format!("engine fork: {e:?}"))?;
        let t1 = Instant::now();
        if forks == 0 && child.map_count() != total {
            return Err(format!("the child has {} VMAs, the parent {total}", child.map_count()));
        }
        drop(child);
        let t2 = Instant::now();
        in_fork += t1 - t0;
        in_exit += t2 - t1;
        forks += 1;
    }
    let cpu_share = (thread_cpu_s() - cpu0) / start.elapsed().as_secs_f64().max(1e-9);
    let secs = (in_fork + in_exit).as_secs_f64().max(1e-9);
    let rate = forks as f64 / secs;
    let n = forks as f64;
    Ok(BTreeMap::from([
        ("forks_count".to_string(), n),
        ("forks_per_s".to_string(), rate),
        ("forks_per_10s".to_string(), rate * 10.0),
        ("fork_mean_us".to_string(), secs * 1e6 / n),
        ("vmas_duplicated_per_s".to_string(), rate * total as f64),
        ("fork_call_us".to_string(), in_fork.as_secs_f64() * 1e6 / n),
        ("vmas_copied_per_s_in_fork".to_string(), total as f64 * n / in_fork.as_secs_f64().max(1e-9)),
        ("exit_us".to_string(), in_exit.as_secs_f64() * 1e6 / n),
        ("cpu_share".to_string(), cpu_share.min(1.0)),
    ]))
}

/// The bytes a tree-copy fork must move per VMA (module docs, "The copy's bound"), from the real sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForkBytes {
    /// `size_of::<Vma>()`: the child's VMA, filled from the parent's.
    pub vma: f64,
    /// The child tree's nodes x 256 bytes over its VMAs (the copy of the parent's nodes).
    pub tree: f64,
    /// The VMA batch's pointer per child VMA (`size_of::<&Vma>()`).
    pub batch: f64,
}

impl ForkBytes {
    /// The bytes per VMA of a tree-copied `child`.
    pub fn of_child(child: &Mm) -> ForkBytes {
        let b = vma_bytes(child);
        ForkBytes { vma: b.vma, tree: b.tree, batch: std::mem::size_of::<&vmspace_mm::Vma>() as f64 }
    }

    /// Bytes per VMA in all.
    pub fn total(&self) -> f64 {
        self.vma + self.tree + self.batch
    }
}

/// One run of the copy the fork is held against (module docs, "The copy's bound"): `dst.copy_from_slice(src)`
/// between two buffers of `bytes` each, again and again until `duration` has passed (at least twice: the first
/// copy only warms). Returns the bytes copied per second over the timed copies and the share of that time the
/// thread was on a CPU.
pub fn memcpy_run(bufs: &mut (Vec<u8>, Vec<u8>), duration: Duration) -> (f64, f64) {
    let (src, dst) = (&bufs.0, &mut bufs.1);
    dst.copy_from_slice(src);
    let (mut copies, start, cpu0) = (0u64, Instant::now(), thread_cpu_s());
    while copies == 0 || start.elapsed() < duration {
        dst.copy_from_slice(std::hint::black_box(src));
        std::hint::black_box(&mut *dst);
        copies += 1;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    ((copies as f64 * src.len() as f64) / secs, ((thread_cpu_s() - cpu0) / secs).min(1.0))
}

/// A VMA-sized object of the floor model ([`FloorModel`]): 128 bytes, 64-aligned, as `size_of::<Vma>()`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct FloorObj([u64; 16]);

/// A node of the floor model: 256 bytes, 64-aligned, as the maple tree's nodes; words [`FLOOR_SLOT`].. hold the
/// leaf's values (indices of objects), the rest stand for pivots and metadata.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct FloorNode([u64; 32]);

/// The first value word of a [`FloorNode`] (the maple leaf's slots follow its 15 pivots).
const FLOOR_SLOT: usize = 15;

/// The layout's floor (module docs, "The layout's floor"): the least work any fork of this layout does per
/// VMA, with nothing else: a parent of `n` objects of `size_of::<Vma>()` bytes, neighbours in memory as the
/// pool makes them, reached through leaves of 256 bytes holding `per_leaf` of them each (the parent tree's
/// leaves), and a child of as many objects (the batch, neighbours too) and leaves. One copy
/// ([`FloorModel::copy`]) walks the parent's leaves in order; per leaf it copies the node (256 bytes), and per
/// value it loads the object's index from the leaf (the pointer chase: the load of the object depends on it),
/// reads the object's 128 bytes, writes them with one word changed (the lock epoch) into the next child object,
/// and stores the child's index into the child leaf. No lock, no count, no branch but the loops'.
pub struct FloorModel {
    parents: Vec<FloorObj>,
    leaves: Vec<FloorNode>,
    children: Vec<FloorObj>,
    child_leaves: Vec<FloorNode>,
    per_leaf: usize,
    epoch: u64,
}

impl FloorModel {
    /// A model of `n` objects, `per_leaf` (1 to 16) a leaf, every buffer written once (no page fault in a copy).
    pub fn new(n: usize, per_leaf: usize) -> FloorModel {
        let per_leaf = per_leaf.clamp(1, 16);
        let parents: Vec<FloorObj> = (0..n as u64).map(|i| FloorObj([i; 16])).collect();
        let leaves: Vec<FloorNode> = (0..n.div_ceil(per_leaf))
            .map(|l| {
                let mut w = [u64::MAX; 32];
                for (k, i) in (l * per_leaf..((l + 1) * per_leaf).min(n)).enumerate() {
                    w[k] = i as u64 * 4096;
                    w[FLOOR_SLOT + k] = i as u64;
                }
                FloorNode(w)
            })
            .collect();
        let children = vec![FloorObj([1; 16]); n];
        let child_leaves = vec![FloorNode([1; 32]); leaves.len()];
        FloorModel { parents, leaves, children, child_leaves, per_leaf, epoch: 0 }
    }

    /// One copy of the parent into the child (the type docs).
    #[inline(never)]
    pub fn copy(&mut self) {
        self.epoch += 1;
        let mut next = 0usize;
        for (leaf, out) in self.leaves.iter().zip(self.child_leaves.iter_mut()) {
            *out = *leaf;
            for k in 0..self.per_leaf {
                let i = leaf.0[FLOOR_SLOT + k];
                let Some(p) = self.parents.get(i as usize) else { break };
                let mut o = *p;
                o.0[5] = self.epoch;
                self.children[next] = o;
                out.0[FLOOR_SLOT + k] = next as u64;
                next += 1;
            }
        }
    }

    /// The model's stand-in for the child's exit between two forks: every child object and leaf written over
    /// (the engine's exit clears each child VMA and frees it, and its tree), so that the next copy meets the caches
    /// a fork meets after the previous child's exit rather than right after a copy.
    #[inline(never)]
    pub fn exit(&mut self) {
        for o in &mut self.children {
            o.0 = [0; 16];
        }
        for l in &mut self.child_leaves {
            l.0 = [0; 32];
        }
    }

    /// The bytes of the model: parent and child objects and leaves.
    pub fn bytes(&self) -> usize {
        (self.parents.len() + self.children.len()) * std::mem::size_of::<FloorObj>()
            + (self.leaves.len() + self.child_leaves.len()) * std::mem::size_of::<FloorNode>()
    }
}

/// One run of the floor model ([`FloorModel`]): copies again and again until `duration` has passed (at least
/// twice: the first only warms), each copy followed by [`FloorModel::exit`] as each fork is by its child's
/// exit. Returns the objects copied per second over the copies alone (as the fork call is timed alone) and the
/// share of the run the thread was on a CPU.
pub fn floor_run(model: &mut FloorModel, duration: Duration) -> (f64, f64) {
    model.copy();
    model.exit();
    let (mut copies, start, cpu0) = (0u64, Instant::now(), thread_cpu_s());
    let mut in_copy = Duration::ZERO;
    while copies == 0 || start.elapsed() < duration {
        let t = Instant::now();
        std::hint::black_box(&mut *model).copy();
        in_copy += t.elapsed();
        std::hint::black_box(&mut *model).exit();
        copies += 1;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let share = ((thread_cpu_s() - cpu0) / secs).min(1.0);
    ((copies as f64 * model.parents.len() as f64) / in_copy.as_secs_f64().max(1e-9), share)
}

/// The metrics of one sample of the copy's bound (module docs, "The copy's bound"): `bytes_per_vma`,
/// `memcpy_bytes_per_s` (`copy`), `fork_bytes_per_s` (the tree copy's `vmas_per_s` in the fork call x bytes per
/// VMA), `share_of_memcpy`, and `bound_cpu_share`: the least share of their runs the fork's and the copy's thread
/// were on a CPU (`fork_cpu_share`, the fork run's; `copy_cpu_share`, [`memcpy_run`]'s).
pub fn bound_metrics(
    bytes: &ForkBytes,
    vmas_per_s: f64,
    (copy, copy_cpu_share): (f64, f64),
    fork_cpu_share: f64,
) -> BTreeMap<String, f64> {
    let fork = vmas_per_s * bytes.total();
    BTreeMap::from([
        ("bytes_per_vma".to_string(), bytes.total()),
        ("bound_cpu_share".to_string(), fork_cpu_share.min(copy_cpu_share)),
        ("memcpy_bytes_per_s".to_string(), copy),
        ("fork_bytes_per_s".to_string(), fork),
        ("share_of_memcpy".to_string(), fork / copy),
    ])
}

/// Adds the layout's floor ([`floor_run`]'s `(objects per second, CPU share)`) to a sample's bound metrics (module
/// docs, "The layout's floor"): `floor_vmas_per_s`, `floor_share_of_memcpy` (its rate x the bytes per VMA over
/// the memcpy's bytes per second), `fork_over_floor` (the fork call's VMAs per second over the floor's) and
/// `floor_cpu_share`. Needs the metrics of [`bound_metrics`].
pub fn add_floor_metrics(
    m: &mut BTreeMap<String, f64>,
    vmas_per_s: f64,
    (floor, floor_cpu_share): (f64, f64),
) {
    let bytes = m.get("bytes_per_vma").copied().unwrap_or(f64::NAN);
    let copy = m.get("memcpy_bytes_per_s").copied().unwrap_or(f64::NAN);
    m.insert("floor_vmas_per_s".to_string(), floor);
    m.insert("floor_share_of_memcpy".to_string(), floor * bytes / copy);
    m.insert("fork_over_floor".to_string(), vmas_per_s / floor);
    m.insert("floor_cpu_share".to_string(), floor_cpu_share);
}

/// Two touched buffers of `bytes` each for [`memcpy_run`] (the source filled with a pattern, the destination
/// written once, so that neither copy meets a page fault).
pub fn memcpy_buffers(bytes: usize) -> (Vec<u8>, Vec<u8>) {
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    (src, vec![1u8; bytes])
}

/// The `bench.fork` report of engine side `side` forking `mm` (an [`engine_parent`] of `BASE_VMAS` + extra
/// VMAs, with pages if `pages`) under `cfg`, without runs: its parameters (`side`, `mode`, `extra_vmas`,
/// `total_vmas`, `pages_per_vma`, `samples`, `duration_s`, `quick`), the forker's placement on `cpus` (the
/// calling thread, pinned to the first CPU by [`Cpus::discover`] or [`Cpus::of`]) and the CPUs' notes. Push one
/// [`engine_run`] per sample, then summarise it.
pub fn engine_report(
    cfg: &ForkConfig,
    side: ForkSide,
    mm: &Mm,
    pages: bool,
    host: &HostInfo,
    cpus: &Cpus,
) -> Report {
    let total = mm.map_count();
    let extra = (total as usize).saturating_sub(BASE_VMAS);
    let what = format!("+{extra} VMAs{}", if pages { ", 1 page each" } else { "" });
    let mut r = Report::new("bench.fork", format!("engine {} {what}", side.mode()), host.clone());
    r.param("side", side.side());
    r.param("mode", side.mode());
    r.param("extra_vmas", extra);
    r.param("total_vmas", total);
    r.param("pages_per_vma", u8::from(pages));
    r.param("samples", cfg.samples);
    r.param("duration_s", cfg.duration.as_secs_f64());
    r.param("quick", cfg.quick);
    r.placement = vec![Placement {
        role: "forker".into(),
        index: 0,
        cpu: cpus.pinning.then(|| cpus.cpu_of(0)),
        nice: 0,
    }];
    r.notes.extend(cpus.notes.iter().cloned());
    r
}

/// The `bench.fork.bound` report of `mm` (no pages) without runs (module docs, "The copy's bound"): its
/// parameters (`total_vmas`, `extra_vmas`, `pages_per_vma`, the sizes behind [`ForkBytes`], `memcpy_bytes`),
/// placement and notes.
fn bound_report(mm: &Mm, bytes: &ForkBytes, total: usize, host: &HostInfo, cpus: &Cpus) -> Report {
    let n = mm.map_count();
    let extra = (n as usize).saturating_sub(BASE_VMAS);
    let mut r =
        Report::new("bench.fork.bound", format!("+{extra} VMAs: tree copy against memcpy"), host.clone());
    r.param("total_vmas", n);
    r.param("extra_vmas", extra);
    r.param("pages_per_vma", 0u8);
    r.param("vma_bytes", bytes.vma);
    r.param("child_tree_bytes_per_vma", bytes.tree);
    r.param("batch_pointer_bytes", bytes.batch);
    r.param("memcpy_bytes", total);
    r.placement = vec![Placement {
        role: "forker".into(),
        index: 0,
        cpu: cpus.pinning.then(|| cpus.cpu_of(0)),
        nice: 0,
    }];
    r.notes.push(format!(
        "bytes per VMA: size_of::<Vma>() {} + the child tree's nodes x 256 B over its VMAs {:.1} + the VMA batch's \
         pointer {}; memcpy: copy_from_slice between two touched buffers of {total} bytes, again and again, \
         interleaved with the fork runs (warm as the forks' parent and pool VMAs are)",
        bytes.vma, bytes.tree, bytes.batch
    ));
    r.notes.push(
        "floor: the layout's least copy (FloorModel: per VMA a leaf slot loaded, the parent's 128 bytes read and a \
         child's 128 bytes written, the leaves copied; no lock, count or branch), run after the memcpy in each \
         sample"
            .into(),
    );
    r.notes.extend(cpus.notes.iter().cloned());
    r
}

impl ForkSide {
    /// The engine's fork mode of this side (`None`: the kernel).
    pub fn fork_mode(self) -> Option<ForkMode> {
        match self {
            ForkSide::EngineDup => Some(ForkMode::Dup),
            ForkSide::EngineReinsert => Some(ForkMode::Reinsert),
            ForkSide::Kernel => None,
        }
    }
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct ForkResults {
    /// Every report: rows, ratios, memory, then one `bench.fork.target` per target.
    pub set: ReportSet,
    /// The judged targets.
    pub targets: Vec<Judged>,
    /// Whether the run stopped early (the reports hold what was measured before).
    pub interrupted: bool,
}

/// A row's report key: (pages, extra, side).
type Key = (bool, usize, ForkSide);

/// Runs `vmspace bench fork` (module docs); `progress` after each step ([`ForkConfig::steps`]); stops early
/// when `stop` answers true.
pub fn run(
    cfg: &ForkConfig,
    progress: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
    command: &str,
) -> Result<ForkResults, String> {
    cfg.validate()?;
    let host = vmspace_linux::hostinfo::gather();
    let cpus = Cpus::discover();
    let mut rows: BTreeMap<Key, Report> = BTreeMap::new();
    let mut ratios = Vec::new();
    let mut memory = Vec::new();
    let mut bounds = Vec::new();
    let mut interrupted = false;
    let kernel_limit = host.max_map_count.unwrap_or(65530) as usize;
    let own = vmspace_linux::fork::count_own_vmas().map_err(|e| format!("{e:#}"))?;
    // The kernel's rows first, while this process holds nothing of the engine's: the engine's VMA pool, tree
    // nodes and frame table stay mapped once used, and fork copies their page tables too.
    let mut kernel_pt: BTreeMap<(bool, usize), f64> = BTreeMap::new();
    let mut kernel_missing: BTreeMap<(bool, usize), String> = BTreeMap::new();
    if cfg.kernel {
        'kernel: for &pages in &cfg.pages {
            for &extra in &cfg.extra {
                if stop() {
                    interrupted = true;
                    break 'kernel;
                }
                let what = format!("+{extra} VMAs{}", if pages { ", 1 page each" } else { "" });
                if extra + own + vmspace_linux::fork::HEADROOM > kernel_limit {
                    kernel_missing.insert(
                        (pages, extra),
                        format!("no kernel row: {extra} extra VMAs do not fit under vm.max_map_count {kernel_limit}"),
                    );
                    for _ in 0..cfg.samples {
                        progress(&format!("{what}: kernel (does not fit)"));
                    }
                    continue;
                }
                let kcfg = vmspace_linux::fork::Config {
                    vmas: vec![extra],
                    samples: cfg.samples,
                    duration: cfg.duration,
                    cpu: None,
                };
                let mut r = vmspace_linux::fork::run_count_with(&kcfg, &host, extra, pages, &mut |_, _| {
                    progress(&format!("{what}: kernel"))
                })
                .map_err(|e| format!("kernel fork: {e:#}"))?;
                r.benchmark = "bench.fork".into();
                r.label = format!("kernel {what}");
                r.param("side", "kernel");
                r.param("mode", "kernel");
                r.param("quick", cfg.quick);
                r.notes.push(
                    "measured before the engine's rows, in a process that held nothing of the engine yet"
                        .into(),
                );
                if pages
                    && extra > 0
                    && let Some(added) = r.parameters.get("page_table_bytes_added").and_then(|v| v.as_u64())
                {
                    kernel_pt.insert((pages, extra), added as f64 / extra as f64);
                }
                rows.insert((pages, extra, ForkSide::Kernel), r);
            }
        }
    }
    'all: for &pages in &cfg.pages {
        for &extra in &cfg.extra {
            if stop() {
                interrupted = true;
                break 'all;
            }
            let what = format!("+{extra} VMAs{}", if pages { ", 1 page each" } else { "" });
            let setup = Instant::now();
            let mm = engine_parent(extra, pages)?;
            let setup_s = setup.elapsed().as_secs_f64();
            progress(&format!("{what}: engine set-up"));
            let mut mem = Report::new("bench.fork.memory", what.clone(), host.clone());
            mem.param("extra_vmas", extra);
            mem.param("total_vmas", mm.map_count());
            mem.param("pages_per_vma", u8::from(pages));
            let parent = vma_bytes(&mm);
            let mut m = BTreeMap::from([
                ("parent_bytes_per_vma".to_string(), parent.total()),
                ("vma_object_bytes".to_string(), parent.vma),
                ("parent_tree_bytes_per_vma".to_string(), parent.tree),
            ]);
            for (mode, key) in [(ForkMode::Dup, "tree_copy"), (ForkMode::Reinsert, "reinsert")] {
                let child = mm.fork_with(mode).map_err(|e| format!("engine fork: {e:?}"))?;
                m.insert(format!("child_{key}_bytes_per_vma"), vma_bytes(&child).total());
                m.insert(format!("child_{key}_tree_bytes_per_vma"), vma_bytes(&child).tree);
            }
            if pages {
                let empty = Mm::new(MmConfig::host()).page_table_bytes();
                let added = mm.page_table_bytes().saturating_sub(empty);
                m.insert("engine_page_table_bytes_per_page".to_string(), added as f64 / mm.rss().anon as f64);
            }
            mem.param("engine_setup_s", setup_s);

            let mut reports: Vec<(ForkSide, Report)> = [ForkSide::EngineDup, ForkSide::EngineReinsert]
                .into_iter()
                .map(|side| (side, engine_report(cfg, side, &mm, pages, &host, &cpus)))
                .collect();
            // The copy's bound (module docs): the bytes per VMA of a tree-copied child and a memcpy of as many.
            let mut bound = (!pages && mm.map_count() >= COPY_JUDGED_FROM)
                .then(|| -> Result<_, String> {
                    let child = mm.fork_with(ForkMode::Dup).map_err(|e| format!("engine fork: {e:?}"))?;
                    let bytes = ForkBytes::of_child(&child);
                    drop(child);
                    let total = (bytes.total() * mm.map_count() as f64).round() as usize;
                    // The floor model's leaves hold as many values as the child tree's nodes do on average.
                    let per_leaf = (256.0 / bytes.tree).round() as usize;
                    let floor = FloorModel::new(mm.map_count() as usize, per_leaf);
                    Ok((bytes, memcpy_buffers(total), floor, bound_report(&mm, &bytes, total, &host, &cpus)))
                })
                .transpose()?;
            for _ in 0..cfg.samples {
                for (side, r) in reports.iter_mut() {
                    if stop() {
                        interrupted = true;
                        break 'all;
                    }
                    let mode = if *side == ForkSide::EngineDup { ForkMode::Dup } else { ForkMode::Reinsert };
                    r.push_run(engine_run(&mm, mode, cfg.duration)?);
                    progress(&format!("{what}: engine {}", side.mode()));
                }
                if let Some((bytes, bufs, floor, r)) = bound.as_mut() {
                    let copy = memcpy_run(bufs, cfg.duration);
                    let floor_rate = floor_run(floor, cfg.duration);
                    let last = reports[0].1.runs.last();
                    let dup = last.map_or(f64::NAN, |d| d.metrics["vmas_copied_per_s_in_fork"]);
                    let share = last.map_or(f64::NAN, |d| d.metrics["cpu_share"]);
                    let mut m = bound_metrics(bytes, dup, copy, share);
                    add_floor_metrics(&mut m, dup, floor_rate);
                    r.push_run(m);
                }
            }
            if let Some((_, bufs, floor, mut r)) = bound {
                drop((bufs, floor));
                r.summarise();
                bounds.push(r);
            }
            drop(mm);
            let mut ratio = Report::new(
                "bench.fork.ratio",
                format!("reinsert / tree-copy fork call {what}"),
                host.clone(),
            );
            ratio.param("extra_vmas", extra);
            ratio.param("total_vmas", BASE_VMAS + extra);
            ratio.param("pages_per_vma", u8::from(pages));
            ratio.notes.push(
                "re-insertion's fork call time over the tree copy's, per pair of neighbouring runs; > 1: the tree \
                 copy is faster"
                    .into(),
            );
            let (dup, re) = (&reports[0].1, &reports[1].1);
            for (d, r) in dup.runs.iter().zip(&re.runs) {
                ratio.push_run(BTreeMap::from([
                    (
                        "reinsert_over_tree_copy".to_string(),
                        r.metrics["fork_call_us"] / d.metrics["fork_call_us"],
                    ),
                    (
                        "reinsert_over_tree_copy_with_exit".to_string(),
                        r.metrics["fork_mean_us"] / d.metrics["fork_mean_us"],
                    ),
                    ("cpu_share".to_string(), f64::min(r.metrics["cpu_share"], d.metrics["cpu_share"])),
                ]));
            }
            ratio.summarise();
            ratios.push(ratio);
            for (side, mut r) in reports {
                r.summarise();
                rows.insert((pages, extra, side), r);
            }

            if let Some(&pt) = kernel_pt.get(&(pages, extra)) {
                m.insert("kernel_page_table_bytes_per_page".to_string(), pt);
            }
            if let Some(note) = kernel_missing.get(&(pages, extra)) {
                mem.notes.push(note.clone());
            }
            mem.push_run(m);
            mem.summarise();
            memory.push(mem);
        }
    }
    let targets = targets(cfg, &rows, &ratios, &memory, &bounds);
    let mut reports: Vec<Report> = rows.into_values().collect();
    reports.extend(ratios);
    reports.extend(memory);
    reports.extend(bounds);
    reports.extend(targets.iter().map(|t| t.report("bench.fork.target", &host)));
    Ok(ForkResults { set: ReportSet::new(command, reports), targets, interrupted })
}

fn param_u64(r: &Report, name: &str) -> u64 {
    r.parameters.get(name).and_then(|v| v.as_u64()).unwrap_or(0)
}

/// The targets (module docs).
fn targets(
    cfg: &ForkConfig,
    rows: &BTreeMap<Key, Report>,
    ratios: &[Report],
    memory: &[Report],
    bounds: &[Report],
) -> Vec<Judged> {
    let mut out = Vec::new();
    for b in bounds {
        let vmas = param_u64(b, "total_vmas");
        let shares: Vec<f64> =
            b.runs.iter().filter_map(|r| r.metrics.get("share_of_memcpy").copied()).collect();
        let bytes = b.metric("bytes_per_vma").map_or(f64::NAN, |s| s.median);
        let mut j = Judged::new(
            format!(
                "tree copy, {vmas} VMAs, no pages: fork call's bytes per second ({bytes:.1} B per VMA) over this \
                 machine's memcpy of as many bytes"
            ),
            "",
            crate::judge::Goal::AtLeast(MIN_SHARE_OF_MEMCPY),
            shares,
        )
        // Both the fork and the copy it is held against need their CPU: a met over a starved copy means nothing.
        .unless_starved(b.metric("bound_cpu_share").map_or(f64::NAN, |s| s.median), false);
        let copy = b.metric("memcpy_bytes_per_s").map_or(f64::NAN, |s| s.median);
        j.note = format!(
            "memcpy {:.2} GB/s: the bound is {:.1} M VMAs/s; the 40 M goal needs {:.2} GB/s ({:.2}x of memcpy)",
            copy / 1e9,
            copy / bytes / 1e6,
            MIN_M_VMAS_COPIED_PER_S * 1e6 * bytes / 1e9,
            MIN_M_VMAS_COPIED_PER_S * 1e6 * bytes / copy
        );
        out.push(j);
    }
    let big: Vec<usize> =
        cfg.extra.iter().copied().filter(|&n| (BASE_VMAS + n) as u64 >= COPY_JUDGED_FROM).collect();
    for &n in &big {
        let row = rows.get(&(false, n, ForkSide::EngineDup));
        let med = |m: &str| row.and_then(|r| r.metric(m)).map_or(f64::NAN, |s| s.median);
        out.push(
            Judged::at_least(
                format!("tree copy, {} VMAs, no pages: million VMAs duplicated per s in fork", BASE_VMAS + n),
                med("vmas_copied_per_s_in_fork") / 1e6,
                MIN_M_VMAS_COPIED_PER_S,
            )
            .in_unit(" M VMAs/s")
            .unless_starved(med("cpu_share"), true),
        );
    }
    if big.is_empty() {
        out.push(
            Judged::at_least(
                "tree copy, >= 100,000 VMAs, no pages: million VMAs duplicated per s in fork",
                f64::NAN,
                MIN_M_VMAS_COPIED_PER_S,
            )
            .in_unit(" M VMAs/s"),
        );
    }
    for r in ratios {
        if param_u64(r, "total_vmas") >= RATIO_JUDGED_FROM {
            let pages = if param_u64(r, "pages_per_vma") == 1 { ", 1 page each" } else { "" };
            // Judged per pair of neighbouring runs that both had their CPU: a pair of which one run waited for a
            // CPU is a ratio of the machine's load.
            let pairs: Vec<(f64, f64)> = r
                .runs
                .iter()
                .filter_map(|run| {
                    let share = run.metrics.get("cpu_share").copied().unwrap_or(f64::NAN);
                    run.metrics.get("reinsert_over_tree_copy").map(|&v| (v, share))
                })
                .collect();
            out.push(Judged::on_runs_with_cpus(
                format!(
                    "{} VMAs{pages}: re-insertion's fork call time over the tree copy's (> 1)",
                    param_u64(r, "total_vmas")
                ),
                "",
                crate::judge::Goal::Above(1.0),
                &pairs,
            ));
        }
    }
    for m in memory.iter().filter(|m| param_u64(m, "total_vmas") >= MEMORY_JUDGED_FROM) {
        let pages = if param_u64(m, "pages_per_vma") == 1 { ", 1 page each" } else { "" };
        let worst = ["parent_bytes_per_vma", "child_tree_copy_bytes_per_vma"]
            .iter()
            .filter_map(|k| m.metric(k).map(|s| s.max))
            .fold(f64::NAN, f64::max);
        out.push(
            Judged::exact_at_most(
                format!(
                    "{} VMAs{pages}: bytes per VMA, parent and tree-copied child",
                    param_u64(m, "total_vmas")
                ),
                worst,
                MAX_BYTES_PER_VMA,
            )
            .in_unit(" B"),
        );
    }
    out
}

/// The terminal tables: fork rows by count (engine modes, their ratio, the kernel), then memory.
pub fn render_tables(res: &ForkResults) -> String {
    use vmspace_results::table::{count, render};
    let reports = &res.set.reports;
    let find = |bench: &str, pages: u64, extra: u64, mode: Option<&str>| {
        reports.iter().find(|r| {
            r.benchmark == bench
                && param_u64(r, "pages_per_vma") == pages
                && param_u64(r, "extra_vmas") == extra
                && mode.is_none_or(|m| r.parameters.get("mode").and_then(|v| v.as_str()) == Some(m))
        })
    };
    let med = |r: Option<&Report>, k: &str| r.and_then(|r| r.metric(k)).map_or(f64::NAN, |s| s.median);
    let mut out = String::new();
    for pages in [0u64, 1] {
        let mut extras: Vec<u64> = reports
            .iter()
            .filter(|r| r.benchmark == "bench.fork.ratio" && param_u64(r, "pages_per_vma") == pages)
            .map(|r| param_u64(r, "extra_vmas"))
            .collect();
        extras.dedup();
        if extras.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "\nfork {}: fork call µs (M VMAs copied/s in the call) and fork+exit µs, medians\n",
            if pages == 1 { "with one faulted page per VMA" } else { "without pages" }
        ));
        let rows: Vec<Vec<String>> = extras
            .iter()
            .map(|&e| {
                let dup = find("bench.fork", pages, e, Some("tree-copy"));
                let re = find("bench.fork", pages, e, Some("reinsert"));
                let k = find("bench.fork", pages, e, Some("kernel"));
                let ratio = find("bench.fork.ratio", pages, e, None);
                let cell = |r: Option<&Report>| {
                    if r.is_none() {
                        return "-".to_string();
                    }
                    format!(
                        "{:.1} ({:.1}) / {:.1}",
                        med(r, "fork_call_us"),
                        med(r, "vmas_copied_per_s_in_fork") / 1e6,
                        med(r, "fork_mean_us")
                    )
                };
                vec![
                    count(e as f64),
                    count((BASE_VMAS as u64 + e) as f64),
                    cell(dup),
                    cell(re),
                    format!("{:.2}x", med(ratio, "reinsert_over_tree_copy")),
                    k.map_or("-".to_string(), |r| count(param_u64(r, "total_vmas") as f64)),
                    cell(k),
                    if k.is_some() {
                        format!("{:.1}", med(k, "vmas_duplicated_per_s") / 1e6)
                    } else {
                        "-".into()
                    },
                ]
            })
            .collect();
        out.push_str(&render(
            &[
                "extra",
                "engine VMAs",
                "tree copy",
                "reinsert",
                "reinsert/copy",
                "kernel VMAs",
                "kernel",
                "kernel M VMAs dup/s (fork+exit)",
            ],
            &rows,
        ));
    }
    let bounds: Vec<Vec<String>> = reports
        .iter()
        .filter(|r| r.benchmark == "bench.fork.bound")
        .map(|r| {
            let g = |k: &str, scale: f64| {
                r.metric(k).map_or("-".to_string(), |s| format!("{:.2}", s.median / scale))
            };
            vec![
                count(param_u64(r, "total_vmas") as f64),
                g("bytes_per_vma", 1.0),
                g("fork_bytes_per_s", 1e9),
                g("memcpy_bytes_per_s", 1e9),
                g("share_of_memcpy", 1.0),
                r.metric("memcpy_bytes_per_s")
                    .zip(r.metric("bytes_per_vma"))
                    .map_or("-".to_string(), |(c, b)| format!("{:.1}", c.median / b.median / 1e6)),
                g("floor_vmas_per_s", 1e6),
                g("floor_share_of_memcpy", 1.0),
                g("fork_over_floor", 1.0),
            ]
        })
        .collect();
    if !bounds.is_empty() {
        out.push_str(
            "\nthe tree copy against this machine's memcpy of as many bytes (Vma + child tree share + batch pointer \
             per VMA), and the layout's floor (the least copy of this layout: module docs), medians\n",
        );
        out.push_str(&render(
            &[
                "engine VMAs",
                "B/VMA",
                "fork GB/s",
                "memcpy GB/s",
                "fork/memcpy",
                "memcpy bound M VMAs/s",
                "floor M VMAs/s",
                "floor/memcpy",
                "fork/floor",
            ],
            &bounds,
        ));
    }
    out.push_str("\nmemory: bytes per VMA (Vma + tree nodes / VMAs) and page-table bytes per faulted page\n");
    let rows: Vec<Vec<String>> = reports
        .iter()
        .filter(|r| r.benchmark == "bench.fork.memory")
        .map(|r| {
            let g = |k: &str| r.metric(k).map_or("-".to_string(), |s| format!("{:.1}", s.median));
            vec![
                r.label.clone(),
                g("parent_bytes_per_vma"),
                g("child_tree_copy_bytes_per_vma"),
                g("child_reinsert_bytes_per_vma"),
                g("engine_page_table_bytes_per_page"),
                g("kernel_page_table_bytes_per_page"),
            ]
        })
        .collect();
    out.push_str(&render(
        &[
            "row",
            "parent B/VMA",
            "copy child B/VMA",
            "reinsert child B/VMA",
            "engine PT B/page",
            "kernel PT B/page",
        ],
        &rows,
    ));
    out
}

/// The host of the run, for the terminal.
pub fn host_of(res: &ForkResults) -> Option<&HostInfo> {
    res.set.reports.first().map(|r| &r.host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_model_copies_every_object_and_leaf() {
        let mut m = FloorModel::new(37, 12);
        assert_eq!(m.leaves.len(), 4);
        assert_eq!(m.bytes(), 2 * 37 * 128 + 2 * 4 * 256);
        m.copy();
        m.copy();
        for (i, c) in m.children.iter().enumerate() {
            let mut want = [i as u64; 16];
            want[5] = 2;
            assert_eq!(c.0, want, "child {i}: the parent's words, the epoch of the second copy");
        }
        for (l, (p, c)) in m.leaves.iter().zip(&m.child_leaves).enumerate() {
            assert_eq!(p.0[..FLOOR_SLOT], c.0[..FLOOR_SLOT], "leaf {l}: pivots copied");
            for k in 0..12 {
                let i = l * 12 + k;
                let want = if i < 37 { i as u64 } else { u64::MAX };
                assert_eq!(c.0[FLOOR_SLOT + k], want, "leaf {l} slot {k}: the child's index");
            }
        }
        let (rate, share) = floor_run(&mut m, Duration::from_millis(1));
        assert!(m.children.iter().all(|c| c.0 == [0; 16]), "each copy is followed by the exit");
        assert!(rate > 0.0 && (0.0..=1.0).contains(&share));
    }

    #[test]
    fn parents_have_exact_vmas_and_pages_and_both_modes_fork_them() {
        for pages in [false, true] {
            let mm = engine_parent(500, pages).unwrap();
            assert_eq!(mm.map_count(), 521);
            assert_eq!(mm.rss().anon, if pages { 521 } else { 0 });
            for mode in [ForkMode::Dup, ForkMode::Reinsert] {
                let m = engine_run(&mm, mode, Duration::from_millis(5)).unwrap();
                assert!(m["forks_count"] >= 1.0);
                assert!(m["fork_call_us"] > 0.0 && m["fork_call_us"] <= m["fork_mean_us"], "{m:?}");
                assert!(m["cpu_share"] > 0.0 && m["cpu_share"] <= 1.0, "{m:?}");
            }
            mm.validate().unwrap();
        }
    }

    #[test]
    fn the_bound_counts_the_child_vma_its_tree_share_and_the_batch_pointer() {
        let mm = engine_parent(2000, false).unwrap();
        let child = mm.fork().unwrap();
        let b = ForkBytes::of_child(&child);
        assert_eq!(b.vma, std::mem::size_of::<vmspace_mm::Vma>() as f64);
        assert_eq!(b.batch, 8.0);
        // A 256-byte node per leaf of 10-16 VMAs, plus the internal nodes.
        assert!(b.tree > 256.0 / 17.0 && b.tree < 256.0 / 8.0, "{b:?}");
        assert_eq!(b.total(), b.vma + b.tree + b.batch);
        let mut bufs = memcpy_buffers(1 << 20);
        let (rate, share) = memcpy_run(&mut bufs, Duration::from_millis(2));
        assert!(rate > 1e8 && share > 0.0 && share <= 1.0, "{rate} {share}");
        assert!(bufs.0 == bufs.1);
        // The target: the per-sample shares against 0.8, with the goal in VMAs per second in the note.
        let cpus = Cpus::of(vec![0]);
        let mut r = bound_report(&mm, &b, 1 << 20, &HostInfo::default(), &cpus);
        for share in [0.7, 0.75, 0.72] {
            r.push_run(BTreeMap::from([
                ("bytes_per_vma".to_string(), b.total()),
                ("memcpy_bytes_per_s".to_string(), 10e9),
                ("share_of_memcpy".to_string(), share),
            ]));
        }
        r.summarise();
        let t = targets(&ForkConfig::quick(), &BTreeMap::new(), &[], &[], &[r]);
        assert_eq!(t[0].status, crate::judge::Status::Missed, "{:?}", t[0]);
        assert!(t[0].note.contains("memcpy 10.00 GB/s"), "{}", t[0].note);
    }

    #[test]
    fn steps_and_validation() {
        let cfg = ForkConfig::quick();
        assert_eq!(cfg.steps(), 3 * 2 * (1 + 2 + 1));
        assert!(ForkConfig { extra: vec![], ..cfg.clone() }.validate().is_err());
        assert!(ForkConfig { samples: 0, ..cfg.clone() }.validate().is_err());
        assert_eq!(ForkConfig::full().most_vmas(), 1_638_421);
    }
}
