//! A profiling driver for the engine's `/proc` readers (`vmspace bench contention`'s throughput part): an
//! address space of `BASE_VMAS` + N single-page VMAs that cannot merge (`vmspace_bench::fork::engine_parent`),
//! read a fixed number of times in one reader mode, either as `/proc/PID/maps` (128 KiB `read()`s to the end,
//! the text discarded, as the benchmark reads) or as a PROCMAP_QUERY walk (`COVERING_OR_NEXT` from the
//! previous answer's end, no name buffer). It prints the time per VMA line or per answer. Meant to run under
//! `valgrind --tool=callgrind` (a fixed count of passes, so that the instructions divide by a known number of
//! lines or answers) or `perf record`.
//!
//! Usage: `cargo run --release -p vmspace-bench --example readers_profile -- MODE maps|query [PASSES]
//! [EXTRA_VMAS]` (MODE: `mmap-lock`, `per-vma` or `lockless`; 100 passes over 9,979 extra VMAs by default).

use std::time::Instant;

use vmspace_mm::{ProcFileKind, ReaderMode};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode: ReaderMode = args.next().unwrap_or_else(|| "lockless".into()).parse().expect("MODE");
    let what = args.next().unwrap_or_else(|| "maps".into());
    let passes: u64 = args.next().map_or(100, |s| s.parse().expect("PASSES: a number"));
    let extra: usize = args
        .next()
        .map_or(10_000 - vmspace_bench::fork::BASE_VMAS, |s| s.parse().expect("EXTRA_VMAS: a number"));
    let mm = vmspace_bench::fork::engine_parent(extra, false).expect("the address space");
    let reader = mm.reader_with(mode);
    let mut buf = vec![0u8; 128 << 10];
    let (mut units, mut bytes) = (0u64, 0u64);
    let start = Instant::now();
    for _ in 0..passes {
        match what.as_str() {
            "maps" => {
                let mut f = reader.open(ProcFileKind::Maps);
                loop {
                    let n = f.read(&mut buf);
                    if n == 0 {
                        break;
                    }
                    bytes += n as u64;
                    std::hint::black_box(&buf);
                }
                units += mm.map_count();
            }
            "query" => units += vmspace_bench::contention::query_walk(&reader, false) as u64,
            other => panic!("unknown reader {other:?}: maps or query"),
        }
    }
    let t = start.elapsed().as_secs_f64();
    println!(
        "{mode} {what}: {passes} passes over {} VMAs, {units} lines/answers ({bytes} bytes), {:.1} ns each \
         ({:.2} M/s)",
        mm.map_count(),
        t * 1e9 / units as f64,
        units as f64 / t / 1e6
    );
}
