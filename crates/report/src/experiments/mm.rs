//! The address space against the kernel (`vmspace bench mm`, `vmspace_bench::mm`, whose module docs describe
//! the method): mmap+munmap pairs per second on the engine and on the live kernel, batches interleaved and the
//! ratio taken per pair of neighbouring batches; VMA lookups per second under the per-VMA lock and under the
//! mmap lock on 1 and 2 threads (engine only: a page fault's VMA lookup cannot be isolated from user space on
//! the kernel); bytes per VMA against the kernel's `vm_area_struct`.
//!
//! Reports are `vmspace bench mm`'s own (`bench.mm.*`). Targets: `vmspace bench mm`'s, judged by the same
//! function (`vmspace_bench::mm::targets`): one-page mmap+munmap with 1,000 other VMAs at least 4x the kernel
//! (per round of interleaved batches; `mm.mmap_munmap.over_kernel`) and bytes per VMA at most 192, the kernel's
//! `vm_area_struct` alone, at every measured count (`mm.bytes_per_vma.<VMAs>`).

use std::time::Duration;

use vmspace_bench::mm::{self as bench, MmBenchConfig};
use vmspace_results::host::HostInfo;
use vmspace_results::report::Report;

use super::{capitalise, count, med, spread, spread_ratio};
use crate::experiment::{Ctx, Experiment, Length, param_str, param_u64};
use crate::model::{Section, Table, ratio, sig3};
use crate::targets::TargetResult;

/// The bench's configuration at `length`: quick (and smoke) is `bench mm --quick`; default 5 batches of 20
/// ms, 1- and 16-page mappings; full is `bench mm`'s own (BENCHMARKS.md).
pub fn config(length: Length) -> MmBenchConfig {
    match length {
        Length::Smoke | Length::Quick => MmBenchConfig::quick(),
        Length::Default => MmBenchConfig {
            timer: vmspace_bench::measure::Timer { batch: Duration::from_millis(20), repeats: 5 },
            ..MmBenchConfig::full()
        },
        Length::Full => MmBenchConfig::full(),
    }
}

/// The experiment.
pub struct AddressSpace;

fn by<'r>(reports: &[&'r Report], bench: &str) -> Vec<&'r Report> {
    reports.iter().copied().filter(|r| r.benchmark == bench).collect()
}

impl Experiment for AddressSpace {
    fn id(&self) -> &'static str {
        "mm"
    }

    fn title(&self) -> &'static str {
        "The address space against the kernel (mmap/munmap)"
    }

    fn short(&self) -> &'static str {
        "Address space"
    }

    fn method(&self, length: Length, _host: &HostInfo) -> String {
        let c = config(length);
        format!(
            "vmspace bench mm: an anonymous private mapping of {} page(s) at a free address hint, then munmap, in \
             a loop, on the engine's Mm and with real system calls on the kernel, with no other VMA nearby and \
             with 1,000 others; the two sides' batches alternate and each ratio is one engine batch over the \
             neighbouring kernel batch ({} batches of about {} ms). Lookups: lock_vma_under_rcu against the mmap \
             read lock around a tree lookup, on 1 and 2 threads, engine only. Bytes per VMA: the Vma object and \
             its share of the tree's nodes against the kernel's vm_area_struct slab object.",
            c.pages.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(" or "),
            c.timer.repeats,
            c.timer.batch.as_millis()
        )
    }

    fn load_effect(&self) -> &'static str {
        "the rates (the engine/kernel ratios less: their batches are interleaved) and above all the 2-thread \
         lookup scaling"
    }

    fn estimate_s(&self, length: Length, _host: &HostInfo) -> f64 {
        match length {
            Length::Smoke | Length::Quick => 1.0,
            Length::Default => 3.0,
            Length::Full => 25.0,
        }
    }

    fn run(&self, length: Length, ctx: &mut Ctx<'_>) -> anyhow::Result<()> {
        let cfg = config(length);
        let steps = bench::steps(&cfg).max(1) as f64;
        ctx.begin(self.estimate_s(length, ctx.host()));
        let mut done = 0.0;
        let results = bench::run_until(
            &cfg,
            &mut |what| {
                done += 1.0;
                ctx.step(what, done / steps);
            },
            &vmspace_linux::child::interrupted,
            "vmspace bench mm",
        )
        .map_err(anyhow::Error::msg)?;
        for r in results.set.reports {
            ctx.push(r);
        }
        Ok(())
    }

    fn present(&self, reports: &[&Report]) -> Section {
        let mut s = Section::new(self.id(), self.title());
        let mut t = Table::new(
            "median [min-max] over the batches; engine/kernel: per pair of interleaved batches",
            &["case", "unit", "engine", "kernel", "engine/kernel"],
        );
        let pairs = by(reports, "bench.mm.mmap_munmap");
        let side = |pages: u64, others: u64, side: &str| {
            pairs.iter().copied().find(|r| {
                param_u64(r, "pages") == Some(pages)
                    && param_u64(r, "other_vmas") == Some(others)
                    && param_str(r, "side") == side
            })
        };
        let mut words = Vec::new();
        for r in by(reports, "bench.mm.mmap_munmap_ratio") {
            let (Some(p), Some(o)) = (param_u64(r, "pages"), param_u64(r, "other_vmas")) else { continue };
            let cell = |x: Option<&Report>| spread(x.and_then(|x| x.metric("pairs_per_s")), count);
            t.row(vec![
                format!("mmap+munmap {p} page(s), {} other VMAs", count(o as f64)),
                "pairs/s".into(),
                cell(side(p, o, "engine")),
                cell(side(p, o, "kernel")),
                spread_ratio(r.metric("engine_over_kernel")),
            ]);
            if p == 1
                && let Some(x) = med(r, "engine_over_kernel")
            {
                let others = if o == 0 {
                    "no other VMA".to_string()
                } else {
                    format!("{} other VMAs", count(o as f64))
                };
                words.push(format!("{} the kernel's rate with {others}", ratio(x)));
            }
        }
        let lookups = by(reports, "bench.mm.lookup");
        for r in &lookups {
            t.row(vec![
                format!("VMA lookup, {}", r.label),
                "lookups/s".into(),
                spread(r.metric("lookups_per_s"), count),
                "n/a".into(),
                "-".into(),
            ]);
        }
        for r in by(reports, "bench.mm.bytes_per_vma") {
            t.row(vec![
                format!(
                    "bytes per VMA at {} VMAs",
                    param_u64(r, "vmas").map_or("?".into(), |n| count(n as f64))
                ),
                "bytes".into(),
                med(r, "total_bytes_per_vma").map_or("-".into(), sig3),
                med(r, "kernel_vm_area_struct_bytes").map_or("unknown".into(), sig3),
                match (med(r, "total_bytes_per_vma"), med(r, "kernel_vm_area_struct_bytes")) {
                    (Some(e), Some(k)) => ratio(e / k),
                    _ => "-".into(),
                },
            ]);
        }
        s.tables.push(t);
        let scaling = |mode: &str| {
            let one = lookups
                .iter()
                .find(|r| r.label == format!("{mode} x1"))
                .and_then(|r| med(r, "lookups_per_s"))?;
            let two = lookups
                .iter()
                .find(|r| r.label == format!("{mode} x2"))
                .and_then(|r| med(r, "lookups_per_s"))?;
            Some(two / one)
        };
        let mut verdict = if words.is_empty() {
            "nothing measured".to_string()
        } else {
            format!("The engine's 1-page mmap+munmap runs at {}", words.join(" and "))
        };
        if let (Some(a), Some(b)) = (scaling("lock_vma_under_rcu"), scaling("mmap_read_lock")) {
            verdict.push_str(&format!(
                "; on 2 threads lock_vma_under_rcu lookups reach {} one thread's rate, mmap_read_lock ones {}",
                ratio(a),
                ratio(b)
            ));
            // More than two threads can give: the one-thread runs did not have a CPU of their own.
            if a.max(b) > 2.0 * (1.0 + vmspace_bench::judge::RESOLUTION) {
                verdict.push_str(
                    " (above 2x on 2 threads: the one-thread runs did not have a CPU of their own, so this run \
                     shows no scaling)",
                );
            }
        }
        s.verdict = capitalise(&verdict) + ".";
        s.collect_notes(reports.iter().copied().filter(|r| r.benchmark != "bench.mm.mmap_munmap").take(1));
        s
    }

    fn targets(&self, reports: &[&Report]) -> Vec<TargetResult> {
        let own: Vec<Report> = reports.iter().map(|r| (*r).clone()).collect();
        bench::targets(&own)
            .into_iter()
            .map(|j| {
                let id = if j.what.starts_with("bytes per VMA") {
                    format!("mm.bytes_per_vma.{}", j.at.trim_end_matches(" VMAs").replace(' ', "_"))
                } else {
                    "mm.mmap_munmap.over_kernel".to_string()
                };
                TargetResult::from_judged(id, self.id(), j)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::Status;

    fn report(bench: &str, params: &[(&str, u64)], metric: &str, values: &[f64]) -> Report {
        Report::of_values(bench, params, metric, values)
    }

    /// The targets README and BENCHMARKS call met are judged here, by `bench mm`'s function.
    #[test]
    fn judges_the_pair_ratio_and_bytes_per_vma() {
        let all = [
            report(
                "bench.mm.mmap_munmap_ratio",
                &[("pages", 1), ("other_vmas", 1000)],
                "engine_over_kernel",
                &[4.2, 4.4, 4.3],
            ),
            report("bench.mm.bytes_per_vma", &[("vmas", 1000)], "total_bytes_per_vma", &[148.7]),
        ];
        let refs: Vec<&Report> = all.iter().collect();
        let t = AddressSpace.targets(&refs);
        let ids: Vec<&str> = t.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["mm.mmap_munmap.over_kernel", "mm.bytes_per_vma.1000"]);
        assert!(t.iter().all(|t| t.status == Status::Met), "{t:?}");
        assert_eq!((t[1].goal_text().as_str(), t[1].measured().as_str()), ("<= 192.00 B", "149 B"));
        assert_eq!(t[0].measured(), "4.30x [4.20-4.40]");
        let back = TargetResult::from_report(&t[1].to_report(&HostInfo::default())).unwrap();
        assert_eq!(back, t[1]);
        assert!(AddressSpace.targets(&[]).iter().all(|t| t.status == Status::NotMeasured));
    }
}
