//! The engine's sides of the engine-beside-kernel experiments: the one place where each engine measurement
//! plugs in.
//!
//! Each function returns the engine sides of one experiment, in the order their rows and lines appear. A side
//! whose engine code has not landed is an [`AwaitingEngine`](crate::experiment::AwaitingEngine) placeholder with the id and name the real side
//! will have and what it awaits: every table, figure, verdict and target of the report then says "not yet
//! measured on the engine (awaits ...)" where its figures would be, and `report.json` records it as a
//! `report.side` report with that status, never as numbers.
//!
//! # Plugging a side in
//! Implement [`Side`] for the experiment's plan (the contract of its report, i.e. the metrics and parameters
//! the tables and figures read, is in the experiment's module docs) and return it here instead of the
//! placeholder, keeping the id (targets refer to sides by the constants below). Nothing else changes: the
//! runner measures it at every point right after the kernel's side, and the tables, figures, verdicts and
//! targets pick it up by its id.
//!
//! # The sides
//! The kernel's side of each experiment is in `vmspace_linux`. The engine's measurements are not written here:
//! each side calls the workload of `vmspace bench` (`vmspace_bench::faults`, `vmspace_bench::fork`), so that
//! `vmspace bench` and `vmspace report` measure the engine with one implementation, and its report is the
//! `bench.*` report that command writes for the same row (same metrics and parameters), stamped by the runner
//! with `experiment`, `side` and `point`.
//!
//! - faults ([`crate::experiments::faults`], [`EngineFaults`], measured): the engine's page faults per second
//!   against threads, all threads in one `Mm`, each mapping its own region, writing one byte into every page
//!   through the emulated MMU and the engine's fault path (`arch/x86/mm/fault.c: do_user_addr_fault` →
//!   `mm/memory.c: handle_mm_fault`), and unmapping it (`vmspace_bench::faults::engine_run`), alone and with
//!   the mapper thread, the VMA found under a per-VMA lock (`lock_vma_under_rcu`, `FaultMode::PerVma`) or under
//!   the mmap_lock only (`lock_mm_and_find_vma`, `FaultMode::MmapLock`, the path before the per-VMA lock
//!   series). Before the first engine point of the process, one unrecorded warm-up run
//!   (`vmspace_bench::faults::warm_up`), as `vmspace bench faults` makes.
//! - fork ([`crate::experiments::fork`], [`EngineFork`], measured): the engine's fork rate against the VMA
//!   count, `kernel/fork.c: dup_mmap` (`Mm::fork_with`) copying the VMA tree in one O(n) pass
//!   (`MapleTree::dup`, the `__mt_dup` series, `ForkMode::Dup`) or re-inserting every VMA into an empty tree
//!   (`ForkMode::Reinsert`, before it), page tables copied (`copy_page_range`) in both, then the child's drop
//!   (its exit), on an address space of 21 + N VMAs (`vmspace_bench::fork::engine_parent`, without pages or
//!   with one faulted page per VMA; `engine_run`).
//! - contention ([`crate::experiments::contention`], [`EngineContention`], measured): the proc-vs-map grid on
//!   an engine `Mm` (`vmspace_bench::contention::engine_row`): a mapper thread timing random 4 KiB
//!   `Mm::mmap`/`munmap` calls in a populated region, a nice-15 scanner thread reading the engine's
//!   `/proc/PID/maps`, `smaps`, `smaps_rollup` or walking PROCMAP_QUERY (`fs/proc/task_mmu.c`) in one reader
//!   mode per side (`ReaderMode::ALL`: under the mmap_lock, under per-VMA locks with `lock_next_vma`, lockless
//!   with sequence-count-validated VMA copies), busy threads beside it, placed as the kernel's processes are.
//! - tearing ([`crate::experiments::tearing`], [`EngineRace`], measured): the proc-maps-race checks on an engine
//!   `Mm`, a writer thread against a reader thread in one reader mode per side, through a
//!   `vmspace_bench::race::RaceRunner` ([`vmspace_bench::race::ENGINE`]).
//!
//! # CPUs
//! The engine's sides place their threads on the host's usable CPUs as gathered at the start of the run
//! ([`Cpus::of`]), not on the calling thread's mask at the time (which an earlier side may have narrowed by
//! pinning it): faulting thread i on the i-th usable CPU, the mapper on the next; the forking thread (the
//! calling thread) on the first. The runner restores the calling thread's affinity after each experiment.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::anyhow;
use vmspace_bench::contention::ReaderMode;
use vmspace_bench::faults::{self as bench_faults, EngineAccess, FaultsConfig, Row};
use vmspace_bench::fork::{self as bench_fork, ForkConfig, ForkSide};
use vmspace_bench::measure::Cpus;
use vmspace_bench::race::{self as bench_race, RaceFile, RaceReads, RaceRunner, RaceTest, Scenario};
use vmspace_linux::contention::Config as ContentionRow;
use vmspace_results::report::Report;

use crate::experiment::{Ctx, Side, SideInfo, Sides};
use crate::experiments::contention::ContentionPlan;
use crate::experiments::faults::{self, FaultsPlan, FaultsPoint};
use crate::experiments::fork::{self, ForkPlan, ForkPoint};
use crate::experiments::tearing::{TearingPlan, file_name};

pub use crate::experiments::ids::{
    FAULTS_MEMSET, FAULTS_MMAP_LOCK, FAULTS_PER_VMA, FAULTS_SEPARATE, FORK_DUP, FORK_REINSERT,
    READERS_LOCKLESS, READERS_MMAP_LOCK, READERS_PER_VMA,
};

/// The side id of reader mode `mode` (`engine-<name>`).
pub fn reader_side_id(mode: ReaderMode) -> &'static str {
    match mode {
        ReaderMode::MmapLock => READERS_MMAP_LOCK,
        ReaderMode::PerVma => READERS_PER_VMA,
        ReaderMode::Lockless => READERS_LOCKLESS,
    }
}

/// The side name of reader mode `mode`.
pub fn reader_side_name(mode: ReaderMode) -> &'static str {
    match mode.name() {
        "mmap-lock" => "engine, readers under mmap_lock",
        "per-vma" => "engine, readers under per-VMA locks",
        "lockless" => "engine, lockless readers",
        other => other,
    }
}

/// Whether the engine's fault path has had its warm-up run in this process. The engine's address spaces
/// share one process-wide memory (frame table, content buffers), so one warm-up serves every later point of
/// either mode. Relaxed: a flag read and set by the run's one calling thread; nothing is published through it.
static FAULTS_WARMED: AtomicBool = AtomicBool::new(false);

/// One engine side of the fault experiment: `vmspace_bench::faults::engine_run` in one fault mode.
#[derive(Debug, Clone, Copy)]
pub struct EngineFaults {
    /// [`FAULTS_PER_VMA`], [`FAULTS_MMAP_LOCK`], [`FAULTS_SEPARATE`] or [`FAULTS_MEMSET`].
    pub id: &'static str,
    /// The name tables and legends show.
    pub name: &'static str,
    /// The side of `vmspace bench faults` it measures (`EnginePerVma`, `EngineMmapLock`, or a ceiling:
    /// `EngineSeparate`, `Memset`, which have no points with the mapper).
    pub side: bench_faults::Side,
}

impl Side<FaultsPlan> for EngineFaults {
    fn info(&self) -> SideInfo {
        SideInfo::new(self.id, self.name)
    }

    fn measure(&self, plan: &FaultsPlan, p: &FaultsPoint, ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
        let mode = self.side.fault_mode();
        if mode.is_none() && self.side != bench_faults::Side::Memset {
            return Err(anyhow!("{}: not an engine side", self.name));
        }
        let cpus = Cpus::of(ctx.host().cpus_usable.clone());
        let region = vmspace_linux::faults::Regions { bytes: plan.region_mib << 20, apart: false };
        let cfg = FaultsConfig {
            threads: vec![p.threads],
            samples: plan.samples,
            duration: plan.duration,
            region_mib: plan.region_mib,
            apart: false,
            sides: vec![self.side],
            access: EngineAccess::Write,
            quick: false,
        };
        cfg.validate().map_err(anyhow::Error::msg)?;
        let at = faults::key(p.threads, p.mapper);
        if !FAULTS_WARMED.load(Ordering::Relaxed) {
            ctx.step(&format!("{}, warm-up run", self.name), 0.0);
            let most = plan.threads.iter().copied().max().unwrap_or(1);
            bench_faults::warm_up(&cpus, most, region, plan.duration, cfg.access)
                .map_err(anyhow::Error::msg)?;
            FAULTS_WARMED.store(true, Ordering::Relaxed);
        }
        let row = Row { side: self.side, threads: p.threads, mapper: p.mapper };
        let mut r = bench_faults::row_report(&cfg, row, ctx.host(), &cpus);
        let n = plan.samples;
        for s in 0..n {
            ctx.check_interrupted()?;
            let (t, d) = (p.threads, plan.duration);
            let m = match (self.side, mode) {
                (bench_faults::Side::EngineSeparate, _) => {
                    bench_faults::engine_run_separate(&cpus, t, region, d, cfg.access)
                }
                (bench_faults::Side::Memset, _) => bench_faults::memset_run(&cpus, t, region, d),
                (_, Some(mode)) => bench_faults::engine_run(&cpus, t, region, d, mode, p.mapper, cfg.access),
                (_, None) => Err("not an engine side".into()),
            }
            .map_err(|e| anyhow!("{}, {at}: {e}", self.name))?;
            r.push_run(m);
            ctx.step(&format!("{}, {at}, run {} of {n}", self.name, s + 1), (s + 1) as f64 / n as f64);
        }
        r.summarise();
        Ok(r)
    }

    fn covers(&self, _plan: &FaultsPlan, p: &FaultsPoint) -> bool {
        !p.mapper || self.side.has_mapper_rows()
    }
}

/// One engine side of the fork experiment: `vmspace_bench::fork::engine_run` in one fork mode.
#[derive(Debug, Clone, Copy)]
pub struct EngineFork {
    /// [`FORK_DUP`] or [`FORK_REINSERT`].
    pub id: &'static str,
    /// The name tables and legends show.
    pub name: &'static str,
    /// The engine side of `vmspace bench fork` it measures (`EngineDup` or `EngineReinsert`).
    pub side: ForkSide,
}

impl Side<ForkPlan> for EngineFork {
    fn info(&self) -> SideInfo {
        SideInfo::new(self.id, self.name)
    }

    fn measure(&self, plan: &ForkPlan, p: &ForkPoint, ctx: &mut Ctx<'_>) -> anyhow::Result<Report> {
        let mode = self.side.fork_mode().ok_or_else(|| anyhow!("{}: not an engine side", self.name))?;
        let cfg = ForkConfig {
            extra: vec![p.extra],
            samples: plan.samples,
            duration: plan.duration,
            pages: vec![p.pages],
            kernel: false,
            quick: false,
        };
        cfg.validate().map_err(anyhow::Error::msg)?;
        let at = fork::key(p.extra, p.pages);
        ctx.step(&format!("{}, {at}, set-up", self.name), 0.0);
        // Pins the calling thread, which forks, to the first usable CPU.
        let cpus = Cpus::of(ctx.host().cpus_usable.clone());
        let mm =
            bench_fork::engine_parent(p.extra, p.pages).map_err(|e| anyhow!("{}, {at}: {e}", self.name))?;
        let mut r = bench_fork::engine_report(&cfg, self.side, &mm, p.pages, ctx.host(), &cpus);
        // The copy's bound (`vmspace_bench::fork` module docs): the tree copy without pages at the judged counts
        // is held against a memcpy of as many bytes, one memcpy run after each fork run.
        let mut bound = (self.side == ForkSide::EngineDup
            && !p.pages
            && mm.map_count() >= bench_fork::COPY_JUDGED_FROM)
            .then(|| -> anyhow::Result<_> {
                let child = mm.fork_with(mode).map_err(|e| anyhow!("{}, {at}: fork: {e:?}", self.name))?;
                let bytes = bench_fork::ForkBytes::of_child(&child);
                drop(child);
                let total = (bytes.total() * mm.map_count() as f64).round() as usize;
                Ok((bytes, bench_fork::memcpy_buffers(total)))
            })
            .transpose()?;
        let n = plan.samples;
        for s in 0..n {
            ctx.check_interrupted()?;
            let mut m = bench_fork::engine_run(&mm, mode, plan.duration)
                .map_err(|e| anyhow!("{}, {at}: {e}", self.name))?;
            if let Some((bytes, bufs)) = bound.as_mut() {
                let copy = bench_fork::memcpy_run(bufs, plan.duration);
                m.extend(bench_fork::bound_metrics(
                    bytes,
                    m["vmas_copied_per_s_in_fork"],
                    copy,
                    m["cpu_share"],
                ));
            }
            r.push_run(m);
            ctx.step(&format!("{}, {at}, run {} of {n}", self.name, s + 1), (s + 1) as f64 / n as f64);
        }
        r.summarise();
        Ok(r)
    }
}

/// The engine sides of the fault experiment.
pub fn faults_sides() -> Sides<FaultsPlan> {
    vec![
        Box::new(EngineFaults {
            id: FAULTS_PER_VMA,
            name: "engine, per-VMA locks",
            side: bench_faults::Side::EnginePerVma,
        }),
        Box::new(EngineFaults {
            id: FAULTS_MMAP_LOCK,
            name: "engine, mmap_lock only",
            side: bench_faults::Side::EngineMmapLock,
        }),
        Box::new(EngineFaults {
            id: FAULTS_SEPARATE,
            name: "ceiling: engine, separate address spaces",
            side: bench_faults::Side::EngineSeparate,
        }),
        Box::new(EngineFaults {
            id: FAULTS_MEMSET,
            name: "ceiling: memset of as many pages",
            side: bench_faults::Side::Memset,
        }),
    ]
}

/// The engine sides of the fork experiment.
pub fn fork_sides() -> Sides<ForkPlan> {
    vec![
        Box::new(EngineFork { id: FORK_DUP, name: "engine, tree copy (dup)", side: ForkSide::EngineDup }),
        Box::new(EngineFork {
            id: FORK_REINSERT,
            name: "engine, re-insertion",
            side: ForkSide::EngineReinsert,
        }),
    ]
}

/// One engine side of the contention grid: `vmspace_bench::contention::engine_row` with scanners in one mode.
#[derive(Debug, Clone, Copy)]
pub struct EngineContention {
    /// The scanners' reader mode.
    pub mode: ReaderMode,
}

impl Side<ContentionPlan> for EngineContention {
    fn info(&self) -> SideInfo {
        SideInfo::new(reader_side_id(self.mode), reader_side_name(self.mode))
    }

    /// Not a real agent's rows: a real tool reads the kernel's files.
    fn covers(&self, _plan: &ContentionPlan, row: &ContentionRow) -> bool {
        row.agent.is_none()
    }

    fn measure(
        &self,
        _plan: &ContentionPlan,
        row: &ContentionRow,
        ctx: &mut Ctx<'_>,
    ) -> anyhow::Result<Report> {
        let host = ctx.host().clone();
        let (label, n, name) = (row.label(), row.samples, reader_side_name(self.mode));
        let stop = vmspace_linux::child::interrupted;
        let r = vmspace_bench::contention::engine_row(
            row,
            Some(self.mode),
            &host,
            false,
            &mut |s| ctx.step(&format!("{name}, {label}, run {} of {n}", s + 1), (s + 1) as f64 / n as f64),
            &stop,
        )
        .map_err(|e| anyhow!("{name}, {label}: {e}"))?;
        ctx.check_interrupted()?;
        Ok(r)
    }
}

/// One engine side of the tearing checks: a [`RaceRunner`] with the reader in one mode.
#[derive(Debug, Clone, Copy)]
pub struct EngineRace {
    /// The reader's mode.
    pub mode: ReaderMode,
    /// The runner ([`bench_race::ENGINE`]).
    pub runner: RaceRunner,
}

impl Side<TearingPlan> for EngineRace {
    fn info(&self) -> SideInfo {
        SideInfo::new(reader_side_id(self.mode), reader_side_name(self.mode))
    }

    fn measure(
        &self,
        plan: &TearingPlan,
        &(file, test): &(RaceFile, RaceTest),
        ctx: &mut Ctx<'_>,
    ) -> anyhow::Result<Report> {
        ctx.check_interrupted()?;
        let sc = Scenario { file, test, reads: RaceReads::Page };
        let name = reader_side_name(self.mode);
        let o =
            (self.runner)(sc, self.mode, plan.duration).map_err(|e| anyhow!("{name}, {}: {e}", sc.key()))?;
        ctx.step(&format!("{name}, {} ({})", test.name(), file_name(file)), 1.0);
        Ok(bench_race::report(sc, self.mode, plan.duration, &o, ctx.host()))
    }
}

/// The engine sides of the contention grid: one per reader mode.
pub fn contention_sides() -> Sides<ContentionPlan> {
    ReaderMode::ALL.into_iter().map(|mode| Box::new(EngineContention { mode }) as _).collect()
}

/// The engine sides of the tearing checks: one per reader mode.
pub fn tearing_sides() -> Sides<TearingPlan> {
    ReaderMode::ALL
        .into_iter()
        .map(|mode| Box::new(EngineRace { mode, runner: bench_race::ENGINE }) as _)
        .collect()
}
