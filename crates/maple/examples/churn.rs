//! The churn of `vmspace bench tree` (remove a random range and insert it back: munmap + mmap at the tree
//! level) as a bare loop, for `perf stat` / `perf record` / `perf c2c`: instructions and cache misses per
//! operation without the benchmark's harness around them.
//!
//! ```sh
//! cargo build --release -p vmspace-maple --example churn
//! perf stat -e instructions,cycles target/release/examples/churn maple 1000 2000000
//! target/release/examples/churn maple 21 2000000 same    # a reader of the same tree on another thread
//! target/release/examples/churn maple 21 2000000 other   # a reader of another tree of the same layout
//! ```
//!
//! Arguments: `maple` or `btree`, the number of ranges, the number of operations, and optionally `same` or
//! `other` (a reader thread looking up random mapped addresses in the same tree or in another one, `maple`
//! only). The layout is `vmspace bench tree`'s VMA-like one (1 to 16 pages, gaps of 1 to 4 pages); it prints
//! the writer's ns per operation.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_maple::MapleTree;

const PAGE: u64 = 4096;

/// `n` page-aligned ranges of 1 to 16 pages with gaps of 1 to 4 pages after each: (first, last, value).
fn layout(n: usize) -> Vec<(u64, u64, u64)> {
    let mut rng = SmallRng::seed_from_u64(n as u64);
    let mut at = 0x1000_0000u64;
    (0..n)
        .map(|i| {
            let first = at;
            let last = first + rng.random_range(1..=16u64) * PAGE - 1;
            at = last + 1 + rng.random_range(1..=4u64) * PAGE;
            (first, last, i as u64 + 1)
        })
        .collect()
}

fn tree(spans: &[(u64, u64, u64)]) -> MapleTree<NonZeroU64> {
    MapleTree::from_sorted(spans.iter().map(|&(f, l, v)| (f, l, NonZeroU64::new(v).expect("values from 1"))))
        .expect("node allocation")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map_or("maple", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let ops: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let reader = args.get(4).map(String::as_str);
    let spans = layout(n);
    let mut rng = SmallRng::seed_from_u64(7);
    let order: Vec<usize> = (0..1 << 14).map(|_| rng.random_range(0..n)).collect();
    let addrs: Vec<u64> = (0..1 << 14)
        .map(|_| {
            let s = spans[rng.random_range(0..n)];
            rng.random_range(s.0..=s.1)
        })
        .collect();
    let start;
    match kind {
        "btree" => {
            let mut m: BTreeMap<u64, (u64, u64)> = spans.iter().map(|&(f, l, v)| (f, (l, v))).collect();
            start = Instant::now();
            for i in 0..ops {
                let s = spans[order[i & (order.len() - 1)]];
                black_box(m.remove(&s.0));
                m.insert(s.0, (s.1, s.2));
            }
        }
        _ => {
            let t = tree(&spans);
            let other = tree(&spans);
            let stop = AtomicBool::new(false);
            let read = match reader {
                Some("same") => Some(&t),
                Some("other") => Some(&other),
                _ => None,
            };
            std::thread::scope(|s| {
                if let Some(r) = read {
                    let (stop, addrs) = (&stop, &addrs);
                    s.spawn(move || {
                        let mut j = 0;
                        // Relaxed: only stops the loop.
                        while !stop.load(Ordering::Relaxed) {
                            black_box(r.load(addrs[j & (addrs.len() - 1)]));
                            j += 1;
                        }
                    });
                }
                let st = Instant::now();
                for i in 0..ops {
                    let s = spans[order[i & (order.len() - 1)]];
                    black_box(t.erase(s.0));
                    t.insert_range(s.0, s.1, NonZeroU64::new(s.2).expect("values from 1"))
                        .expect("free range");
                }
                let took = st.elapsed();
                stop.store(true, Ordering::Relaxed);
                println!("{:.1} ns/op", took.as_nanos() as f64 / ops as f64);
                println!("{:?}", t.store_stats());
                println!("{:?}", t.node_stats());
            });
            return;
        }
    }
    println!("{:.1} ns/op", start.elapsed().as_nanos() as f64 / ops as f64);
}
