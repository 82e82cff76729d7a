//! What the host's kernel and machine are: the facts every live-kernel result must carry.
//!
//! Sources, in order of trust: system calls (`uname`, `sched_getaffinity`, page size), `/proc/sys` and `/sys`
//! files, the kernel's build configuration (`/boot/config-$(uname -r)`, else `/proc/config.gz`, which exists
//! only with `CONFIG_IKCONFIG_PROC`), and last the `uname -v` banner. Every fact that could not be established
//! is `None` rather than guessed; the preemption model says where it came from.
//!
//! The files are read by `vmspace_host` ([`Host::probe`], the load average and debugfs's preemption model
//! too), the one place that probes the host; the engine's
//! `MmConfig::host` reads the same probe, so a result's host facts and the engine's configuration agree. This
//! module adds what needs the live-kernel layer (system calls, PROCMAP_QUERY, debugfs).

use vmspace_host::{Host, KernelConfig};

pub use vmspace_host::{bracketed, parse_cpu_list};
pub use vmspace_results::host::HostInfo;

/// Gathers the facts about this host (never fails; unknowns are `None`).
pub fn gather() -> HostInfo {
    let u = rustix::system::uname();
    let s = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    let host = Host::probe();
    let config = host.config.as_ref();
    let cfg = |name: &str| config.and_then(|c| c.value(name));
    let per_vma_lock = host.config_enabled("CONFIG_PER_VMA_LOCK");
    let kernel_version = s(u.version());
    HostInfo {
        kernel_release: s(u.release()),
        machine: s(u.machine()),
        cpu_model: host.cpu.model.clone(),
        cpus_online: host.cpu.online,
        cpus_usable: crate::sys::usable_cpus().unwrap_or_default(),
        mem_total_kb: host.mem_total_kb,
        page_size: crate::sys::page_size(),
        max_map_count: host.max_map_count,
        procmap_query: match crate::procmap_query::supported() {
            Ok(()) => "yes".to_string(),
            Err(e) => format!("no: {e}"),
        },
        per_vma_lock,
        hz: cfg("CONFIG_HZ").and_then(|v| v.parse().ok()),
        preempt_model: preempt_model(config, &kernel_version),
        thp_enabled: host.huge_pages.thp_enabled.clone(),
        load_average: vmspace_host::load_average(),
        kernel_version,
    }
}

/// Counts the CPUs in a list such as `0-3,8,10-11`.
pub fn count_cpu_list(list: &str) -> Option<usize> {
    parse_cpu_list(list).map(|v| v.len())
}

/// The preemption model: the live setting from debugfs if mounted, else the config, else the banner.
fn preempt_model(config: Option<&KernelConfig>, banner: &str) -> Option<String> {
    if let Some(t) = vmspace_host::preempt_debugfs()
        && let Some(m) = bracketed(&t.replace('(', "[").replace(')', "]"))
    {
        return Some(format!("{m} (debugfs sched/preempt)"));
    }
    if let Some(c) = config {
        let y = |n: &str| c.enabled(n);
        let base = if y("CONFIG_PREEMPT_RT") {
            "full, real-time"
        } else if y("CONFIG_PREEMPT") {
            "full"
        } else if y("CONFIG_PREEMPT_LAZY") {
            "lazy"
        } else if y("CONFIG_PREEMPT_VOLUNTARY") {
            "voluntary"
        } else if y("CONFIG_PREEMPT_NONE") {
            "none"
        } else {
            "unknown"
        };
        let dynamic = y("CONFIG_PREEMPT_DYNAMIC");
        return Some(if dynamic {
            format!("dynamic, build default {base} (config; boot parameter may override)")
        } else {
            format!("{base} (config)")
        });
    }
    for (needle, m) in
        [("PREEMPT_RT", "full, real-time"), ("PREEMPT_DYNAMIC", "dynamic"), ("PREEMPT", "full")]
    {
        if banner.contains(needle) {
            return Some(format!("{m} (uname banner)"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_lists() {
        let c = KernelConfig::parse("CONFIG_PREEMPT_DYNAMIC=y\nCONFIG_PREEMPT_VOLUNTARY=y\n");
        let m = preempt_model(Some(&c), "").unwrap();
        assert!(m.starts_with("dynamic, build default voluntary"), "{m}");
        assert_eq!(count_cpu_list("0-3,8"), Some(5));
        assert_eq!(bracketed("always [madvise] never"), Some("madvise"));
        assert_eq!(parse_cpu_list("0-3,8,2"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn gather_on_this_host() {
        let h = gather();
        assert!(!h.kernel_release.is_empty());
        assert!(h.page_size >= 4096);
        assert!(!h.cpus_usable.is_empty());
        assert!(h.one_line().contains(&h.kernel_release));
    }
}
