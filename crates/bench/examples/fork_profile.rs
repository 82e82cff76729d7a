//! A profiling driver for the engine's fork (`kernel/fork.c: dup_mmap`): forks one parent of `BASE_VMAS` +
//! N single-page VMAs (`vmspace_bench::fork::engine_parent`, no pages) again and again with the tree copy,
//! dropping each child, for a given time, and prints the fork call's rate. Meant to run under `perf record`:
//! unlike `vmspace bench fork` it runs the tree copy alone (no re-insertion runs, no kernel rows).
//!
//! Usage: `cargo run --release -p vmspace-bench --example fork_profile -- [EXTRA_VMAS] [SECONDS] [FORKS]`
//! (at least `FORKS` forks, default 1). The fork call is [`fork_call`], never inlined, so that an instruction
//! count can be limited to it: `valgrind --tool=callgrind --toggle-collect='fork_profile::fork_call'
//! target/release/examples/fork_profile 100000 0 3` counts three fork calls and nothing else (the parent's
//! set-up and the children's exits left out).

use std::time::{Duration, Instant};

use vmspace_mm::{ForkMode, Mm};

/// One fork call (the tree copy), kept out of line so that a profiler can count it alone (module docs).
#[inline(never)]
fn fork_call(mm: &Mm) -> Mm {
    mm.fork_with(ForkMode::Dup).expect("fork")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let extra: usize = args.next().map_or(100_000, |s| s.parse().expect("EXTRA_VMAS: a number"));
    let secs: f64 = args.next().map_or(5.0, |s| s.parse().expect("SECONDS: a number"));
    let min_forks: u64 = args.next().map_or(1, |s| s.parse().expect("FORKS: a number"));
    let mm = vmspace_bench::fork::engine_parent(extra, false).expect("the parent");
    let total = mm.map_count();
    let (mut forks, mut in_fork, mut in_exit) = (0u64, Duration::ZERO, Duration::ZERO);
    // The thread's CPU time in fork calls: less disturbed than the wall clock when other work shares the CPUs.
    let mut cpu_in_fork = Duration::ZERO;
    let cpu = || {
        // The C library's clock (not rustix's, which needs the vDSO that valgrind does not provide).
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid, writable `timespec`; the call writes only it.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    };
    let start = Instant::now();
    while forks < min_forks || start.elapsed().as_secs_f64() < secs {
        let c0 = cpu();
        let t0 = Instant::now();
        let child = fork_call(&mm);
        let t1 = Instant::now();
        cpu_in_fork += cpu() - c0;
        drop(child);
        in_fork += t1 - t0;
        in_exit += t1.elapsed();
        forks += 1;
    }
    let per = in_fork.as_secs_f64() / forks as f64;
    let cpu_per = cpu_in_fork.as_secs_f64() / forks as f64;
    println!(
        "{total} VMAs: {forks} forks, fork call {:.1} µs ({:.2} M VMAs/s, {:.1} ns/VMA; CPU time {:.1} ns/VMA), \
         exit {:.1} µs",
        per * 1e6,
        total as f64 / per / 1e6,
        per * 1e9 / total as f64,
        cpu_per * 1e9 / total as f64,
        in_exit.as_secs_f64() * 1e6 / forks as f64
    );
}
