//! Timing and placement primitives shared by the benchmarks.
//!
//! # Method
//!
//! An operation is never timed alone: `Instant::now()` costs about as much as a tree lookup. A measurement
//! times a *batch* of `iters` operations and divides. [`Timer::per_op`] first calibrates `iters` (doubling until a
//! batch takes a quarter of the batch time, then scaling to the full batch time), then runs `repeats` batches and
//! returns each batch's time per operation; reports carry every repeat and their median. The batch closure
//! receives `iters` and returns the time it measured, so it can keep set-up and tear-down (dropping copies, say)
//! out of the timed region.
//!
//! # Placement
//!
//! Single-threaded measurements run on the calling thread pinned to the first usable CPU; multi-threaded ones pin
//! thread *i* to the *i*-th usable CPU. Which CPU each thread got is recorded in the reports; when there are fewer
//! usable CPUs than threads, threads share CPUs and a note says so.

use std::time::{Duration, Instant};
use vmspace_results::report::{Placement, Report};

/// Batch sizing and repetition.
#[derive(Debug, Clone, Copy)]
pub struct Timer {
    /// How long one timed batch should last.
    pub batch: Duration,
    /// How many timed batches to run.
    pub repeats: usize,
}

impl Timer {
    /// Calibrates a batch size for `run` and returns the time per operation of each of [`Timer::repeats`]
    /// batches, in nanoseconds. `run(iters)` performs `iters` operations and returns the time they took.
    pub fn per_op(&self, mut run: impl FnMut(u64) -> Duration) -> Vec<f64> {
        let iters = self.calibrate(&mut run);
        (0..self.repeats).map(|_| run(iters).as_nanos() as f64 / iters as f64).collect()
    }

    /// [`Timer::per_op`] for two workloads whose times are compared, with their batches interleaved in rounds
    /// ([`Timer::per_op_rounds`]: a b, b a, a b, ...) so that each pair of batches meets the same machine state:
    /// on a noisy machine the per-pair ratios scatter far less than the ratio of two medians taken minutes apart.
    pub fn per_op_interleaved(
        &self,
        mut a: impl FnMut(u64) -> Duration,
        mut b: impl FnMut(u64) -> Duration,
    ) -> (Vec<f64>, Vec<f64>) {
        let mut out =
            self.per_op_rounds(&mut [&mut a as &mut dyn FnMut(u64) -> Duration, &mut b]).into_iter();
        let a = out.next().unwrap_or_default();
        (a, out.next().unwrap_or_default())
    }

    /// [`Timer::per_op`] for several workloads compared with each other, interleaved: each is calibrated, then
    /// [`Timer::repeats`] rounds run one batch of each in the order of [`round_order`] (forward in even rounds,
    /// backward in odd ones). Returns, per workload, the time per operation of its batch in each round: the
    /// values of one round index are neighbours in time and meet the same machine state, so ratios are taken
    /// per round. Neighbours in the given order stay neighbours in every round, and neither of two goes first
    /// in every round.
    pub fn per_op_rounds<B: FnMut(u64) -> Duration>(&self, runs: &mut [B]) -> Vec<Vec<f64>> {
        self.per_op_rounds_on_cpu(runs).0
    }

    /// [`Timer::per_op_rounds`] and, per round, the least share of a batch's time that the calling thread was on
    /// a CPU (its `CLOCK_THREAD_CPUTIME_ID` time over the batch's time, at most 1): a round in which a batch
    /// waited for a CPU compares the machine's load, not the workloads ([`crate::judge::Judged::on_runs_with_cpus`]).
    /// Meaningful only for batches that run on the calling thread.
    pub fn per_op_rounds_on_cpu<B: FnMut(u64) -> Duration>(
        &self,
        runs: &mut [B],
    ) -> (Vec<Vec<f64>>, Vec<f64>) {
        let iters: Vec<u64> = runs.iter_mut().map(|run| self.calibrate(run)).collect();
        let mut out = vec![Vec::with_capacity(self.repeats); runs.len()];
        let mut shares = Vec::with_capacity(self.repeats);
        for round in 0..self.repeats {
            let mut least = 1.0f64;
            for i in round_order(runs.len(), round) {
                let cpu0 = vmspace_linux::faults::thread_cpu_s();
                let took = runs[i](iters[i]);
                let cpu = vmspace_linux::faults::thread_cpu_s() - cpu0;
                least = least.min(cpu / took.as_secs_f64().max(1e-9));
                out[i].push(took.as_nanos() as f64 / iters[i] as f64);
            }
            shares.push(least);
        }
        (out, shares)
    }

    /// The number of operations that makes one batch last about [`Timer::batch`] (at least 1).
    pub fn calibrate(&self, run: &mut impl FnMut(u64) -> Duration) -> u64 {
        let quarter = self.batch / 4;
        let mut iters = 1u64;
        loop {
            let took = run(iters);
            if took >= quarter || iters >= 1 << 40 {
                let scaled = iters as f64 * self.batch.as_secs_f64() / took.as_secs_f64().max(1e-9);
                return (scaled.ceil() as u64).max(1);
            }
            iters *= 2;
        }
    }
}

/// The order in which round `round` of [`Timer::per_op_rounds`] runs `k` workloads: `0, 1, ..., k-1` in even
/// rounds and `k-1, ..., 1, 0` in odd ones (a serpentine). Workloads next to each other in the base order are
/// next to each other in every round, and each of two goes first in half of the rounds, so neither a drift of
/// the machine over a round nor the warm caches one batch leaves for the next favours one side.
pub fn round_order(k: usize, round: usize) -> Vec<usize> {
    if round.is_multiple_of(2) { (0..k).collect() } else { (0..k).rev().collect() }
}

/// Times `f` once.
#[inline]
pub fn time(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// The median of `values` (mean of the two middle ones for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    vmspace_results::stats::Summary::of(values).map_or(f64::NAN, |s| s.median)
}

/// Which CPU each benchmark thread runs on.
#[derive(Debug, Clone)]
pub struct Cpus {
    /// The usable CPUs, ascending.
    pub usable: Vec<usize>,
    /// Whether pinning works here (it may be forbidden in some containers).
    pub pinning: bool,
    /// Adaptations made, for the reports.
    pub notes: Vec<String>,
}

impl Cpus {
    /// Discovers the usable CPUs and whether the calling thread can be pinned (it is pinned to the first).
    pub fn discover() -> Self {
        match vmspace_linux::sys::usable_cpus() {
            Ok(list) if !list.is_empty() => Cpus::of(list),
            Ok(_) | Err(_) => {
                let mut cpus = Cpus::of(vec![0]);
                cpus.notes.insert(0, "could not read the affinity mask; assuming CPU 0 only".to_string());
                cpus
            }
        }
    }

    /// The CPUs `usable` (ascending, not empty; e.g. the host's usable CPUs gathered before anything pinned the
    /// calling thread, which [`Cpus::discover`] would then see as the only one) and whether the calling thread
    /// can be pinned (it is pinned to the first).
    pub fn of(usable: Vec<usize>) -> Self {
        let mut notes = Vec::new();
        let usable = if usable.is_empty() {
            notes.push("no usable CPU given; assuming CPU 0 only".to_string());
            vec![0]
        } else {
            usable
        };
        let pinning = match vmspace_linux::sys::pin_to_cpu(usable[0]) {
            Ok(()) => true,
            Err(e) => {
                notes.push(format!("sched_setaffinity failed ({e}): threads run unpinned"));
                false
            }
        };
        Cpus { usable, pinning, notes }
    }

    /// The CPU thread `i` of a multi-threaded measurement is pinned to.
    pub fn cpu_of(&self, i: usize) -> usize {
        self.usable[i % self.usable.len()]
    }

    /// Pins the calling thread as thread `i`; returns the CPU it now runs on (`None`: unpinned).
    pub fn pin(&self, i: usize) -> Option<usize> {
        if !self.pinning {
            return None;
        }
        let cpu = self.cpu_of(i);
        vmspace_linux::sys::pin_to_cpu(cpu).ok().map(|()| cpu)
    }

    /// The placement records of `threads` threads with the given `roles` (cycled).
    pub fn placement(&self, roles: &[&str], threads: usize) -> Vec<Placement> {
        (0..threads)
            .map(|i| Placement {
                role: roles[i % roles.len()].to_string(),
                index: i,
                cpu: self.pinning.then(|| self.cpu_of(i)),
                nice: 0,
            })
            .collect()
    }

    /// A note when `threads` threads must share CPUs.
    pub fn sharing_note(&self, threads: usize) -> Option<String> {
        (threads > self.usable.len()).then(|| {
            format!(
                "{threads} threads on {} usable CPU(s): threads share CPUs, so this measures time-slicing, not \
                 parallelism",
                self.usable.len()
            )
        })
    }

    /// One line for the terminal.
    pub fn describe(&self) -> String {
        if self.pinning {
            format!(
                "usable CPUs {:?}; single-threaded runs pinned to CPU {}; thread i of a multi-threaded run pinned \
                 to CPU usable[i]",
                self.usable, self.usable[0]
            )
        } else {
            format!("usable CPUs {:?}; pinning unavailable, threads unpinned", self.usable)
        }
    }
}

/// Records in `r` how it was measured: the batch length and repeat count of `timer`, and where its `threads`
/// thread(s) ran (roles `bench` for one, `thread` for several), with the CPU notes and a sharing note when
/// threads outnumber usable CPUs.
pub fn stamp(r: &mut Report, timer: &Timer, cpus: &Cpus, threads: usize) {
    r.param("repeats", timer.repeats);
    r.param("batch_ms", timer.batch.as_secs_f64() * 1e3);
    let roles: &[&str] = if threads == 1 { &["bench"] } else { &["thread"] };
    r.placement = cpus.placement(roles, threads);
    r.notes.extend(cpus.notes.iter().cloned());
    if let Some(note) = cpus.sharing_note(threads) {
        r.notes.push(note);
    }
}

/// The shares of a thread's wall time it ran on a CPU and waited for one on a run queue (`bench contention`'s
/// "Whether each side had a CPU", `bench faults`' waits): the rest of the wall time the thread was blocked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedShare {
    /// Time on a CPU over the wall time.
    pub cpu: f64,
    /// Time runnable but waiting on a run queue over the wall time.
    pub wait: f64,
}

/// The calling thread's `/proc/thread-self/schedstat` (`sched_info`: ns on a CPU, ns waiting on a run queue),
/// `None` where the kernel does not have it.
fn schedstat() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut it = s.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

/// A thread's schedstat and clock at a start, for [`SchedShare`] (NaN shares without schedstat).
pub struct SchedClock {
    at: Instant,
    stat: Option<(u64, u64)>,
}

impl SchedClock {
    /// The calling thread's clock and schedstat now.
    pub fn start() -> SchedClock {
        SchedClock { at: Instant::now(), stat: schedstat() }
    }

    /// The calling thread's shares since [`SchedClock::start`] (the same thread's).
    pub fn share(&self) -> SchedShare {
        let wall = self.at.elapsed().as_nanos().max(1) as f64;
        match (self.stat, schedstat()) {
            (Some((c0, w0)), Some((c1, w1))) => SchedShare {
                cpu: c1.saturating_sub(c0) as f64 / wall,
                wait: w1.saturating_sub(w0) as f64 / wall,
            },
            _ => SchedShare { cpu: f64::NAN, wait: f64::NAN },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_reaches_the_batch_time() {
        let t = Timer { batch: Duration::from_millis(4), repeats: 3 };
        let per_op = t.per_op(|iters| {
            time(|| {
                for i in 0..iters {
                    std::hint::black_box(i);
                    std::thread::sleep(Duration::from_micros(100));
                }
            })
        });
        assert_eq!(per_op.len(), 3);
        assert!(per_op.iter().all(|&ns| ns >= 100_000.0), "{per_op:?}");
    }

    #[test]
    fn rounds_alternate_and_keep_neighbours() {
        assert_eq!(round_order(3, 0), [0, 1, 2]);
        assert_eq!(round_order(3, 1), [2, 1, 0]);
        assert_eq!(round_order(3, 2), [0, 1, 2]);
        assert_eq!(round_order(1, 1), [0]);
        assert!(round_order(0, 0).is_empty());
        // Every round runs each workload once; consecutive workloads stay adjacent; each of a pair goes first in
        // half the rounds.
        for round in 0..6 {
            let o = round_order(6, round);
            let pos = |i: usize| o.iter().position(|&x| x == i).unwrap();
            assert_eq!(
                {
                    let mut s = o.clone();
                    s.sort();
                    s
                },
                (0..6).collect::<Vec<_>>()
            );
            for i in 0..5 {
                assert_eq!(pos(i).abs_diff(pos(i + 1)), 1);
            }
        }
        let first = (0..6)
            .filter(|&r| {
                let o = round_order(6, r);
                o.iter().position(|&x| x == 0) < o.iter().position(|&x| x == 1)
            })
            .count();
        assert_eq!(first, 3);
    }

    #[test]
    fn rounds_record_the_order_batches_ran_in() {
        // Each batch logs its workload, so the log says the order of each round.
        let t = Timer { batch: Duration::from_micros(50), repeats: 4 };
        let log = std::cell::RefCell::new(Vec::new());
        let mk = |id: usize| {
            let log = &log;
            move |iters: u64| {
                log.borrow_mut().push(id);
                // A fake duration: 1 µs per op, so calibration settles at once.
                Duration::from_micros(iters)
            }
        };
        let out = t.per_op_rounds(&mut [mk(0), mk(1), mk(2)]);
        assert_eq!(out.len(), 3);
        assert!(
            out.iter().all(|v| v.len() == 4 && v.iter().all(|&ns| (ns - 1000.0).abs() < 1e-9)),
            "{out:?}"
        );
        // After the calibrations (each workload's calls together, in the given order), the rounds:
        let log = log.into_inner();
        assert_eq!(&log[log.len() - 12..], &[0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0]);
        let calibration = &log[..log.len() - 12];
        assert!(calibration.is_sorted() && calibration.contains(&2), "{calibration:?}");
        let (x, y) = t.per_op_interleaved(|i| Duration::from_nanos(2 * i), |i| Duration::from_nanos(3 * i));
        assert_eq!((x, y), (vec![2.0; 4], vec![3.0; 4]));
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
