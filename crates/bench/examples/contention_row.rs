//! A profiling driver for one row of `vmspace bench contention`'s engine grid: runs
//! `vmspace_bench::contention::engine_run` for the row a fixed number of times and prints each run's mean,
//! p99 and worst mapper call and the scanner's reads. Meant to run under `strace -f -c` (which system calls
//! the engine's process makes while the mapper works: slab chunks, page-content arenas, `membarrier`) or
//! `perf record`, to find where a row's worst calls come from.
//!
//! Usage: `cargo run --release -p vmspace-bench --example contention_row -- MODE PROCFILE BUSY_MS [RUNS]
//! [SECONDS]`: MODE `mmap-lock`, `per-vma` or `lockless`; PROCFILE `none`, `maps`, `smaps`, `smaps_rollup` or
//! `query` (`none`: no scanner); BUSY_MS `-` for no busy thread, `0` for one that never sleeps (B=0), `2` for
//! B=2; 1 run of 2 s on 128 MiB by default.

use std::time::Duration;

use vmspace_linux::contention::{Config, ProcFile};
use vmspace_linux::placement::Layout;
use vmspace_mm::ReaderMode;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode: ReaderMode = args.next().unwrap_or_else(|| "lockless".into()).parse().expect("MODE");
    let procfile: ProcFile = args.next().unwrap_or_else(|| "maps".into()).parse().expect("PROCFILE");
    let busy = args.next().unwrap_or_else(|| "0".into());
    let (busy, busy_ms) =
        if busy == "-" { (0, 2) } else { (1, busy.parse().expect("BUSY_MS: - or a number")) };
    let runs: usize = args.next().map_or(1, |s| s.parse().expect("RUNS: a number"));
    let secs: f64 = args.next().map_or(2.0, |s| s.parse().expect("SECONDS: a number"));
    let cfg = Config {
        procfile,
        scanners: 1,
        busy,
        busy_ms,
        samples: runs,
        duration: Duration::from_secs_f64(secs),
        ..Config::default()
    };
    let host = vmspace_linux::hostinfo::gather();
    let layout = Layout::resolve(&host.cpus_usable, None, None).expect("a layout");
    println!("{} ({}), {runs} run(s) of {secs} s", cfg.label(), mode.name());
    for _ in 0..runs {
        let m = vmspace_bench::contention::engine_run(&cfg, mode, &layout).expect("the run");
        println!(
            "mean {:.4} ms  p99 {:.4} ms  max {:.3} ms  calls {}  reads {}",
            m["call_mean_ms"], m["call_p99_ms"], m["call_max_ms"], m["calls_count"], m["scanner_reads_count"]
        );
    }
}
