//! What the host's kernel and machine are: the facts every live-kernel result must carry.
//!
//! Sources, in order of trust: system calls (`uname`, `sched_getaffinity`, page size), `/proc/sys` and `/sys`
//! files, `/proc/config.gz` (only present with `CONFIG_IKCONFIG_PROC`), and last the `uname -v` banner. Every
//! fact that could not be established is `None` rather than guessed; the preemption model says where it came
//! from.

use std::io::Read;

pub use vmspace_results::host::HostInfo;

/// Gathers the facts about this host (never fails; unknowns are `None`).
pub fn gather() -> HostInfo {
    let u = rustix::system::uname();
    let s = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    let config = read_config();
    let cfg = |name: &str| config.as_deref().and_then(|c| config_value(c, name));
    let per_vma_lock = config.as_ref().map(|_| cfg("CONFIG_PER_VMA_LOCK").as_deref() == Some("y"));
    let kernel_version = s(u.version());
    HostInfo {
        kernel_release: s(u.release()),
        machine: s(u.machine()),
        cpu_model: crate::sys::read_text("/proc/cpuinfo").and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        }),
        cpus_online: crate::sys::read_text("/sys/devices/system/cpu/online")
            .and_then(|t| count_cpu_list(t.trim())),
        cpus_usable: crate::sys::usable_cpus().unwrap_or_default(),
        mem_total_kb: crate::sys::read_text("/proc/meminfo").and_then(|t| {
            t.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()
        }),
        page_size: crate::sys::page_size(),
        max_map_count: crate::sys::read_text("/proc/sys/vm/max_map_count")
            .and_then(|t| t.trim().parse().ok()),
        procmap_query: match crate::procmap_query::supported() {
            Ok(()) => "yes".to_string(),
            Err(e) => format!("no: {e}"),
        },
        per_vma_lock,
        hz: cfg("CONFIG_HZ").and_then(|v| v.parse().ok()),
        preempt_model: preempt_model(config.as_deref(), &kernel_version),
        thp_enabled: crate::sys::read_text("/sys/kernel/mm/transparent_hugepage/enabled")
            .and_then(|t| bracketed(&t).map(str::to_string)),
        load_average: crate::sys::read_text("/proc/loadavg")
            .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" ")),
        kernel_version,
    }
}

/// Reads and decompresses /proc/config.gz.
fn read_config() -> Option<String> {
    let f = std::fs::File::open("/proc/config.gz").ok()?;
    let mut s = String::new();
    flate2::read::GzDecoder::new(f).read_to_string(&mut s).ok()?;
    Some(s)
}

/// The value of `NAME=value` in a kernel config text; `Some("n")` for `# NAME is not set`.
pub fn config_value(config: &str, name: &str) -> Option<String> {
    for line in config.lines() {
        if let Some(v) = line.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            return Some(v.trim_matches('"').to_string());
        }
        if line.strip_prefix("# ").and_then(|r| r.strip_prefix(name)) == Some(" is not set") {
            return Some("n".to_string());
        }
    }
    None
}

/// The bracketed word in a sysfs choice list (`always [madvise] never` -> `madvise`).
pub fn bracketed(text: &str) -> Option<&str> {
    let a = text.find('[')?;
    let b = text[a..].find(']')? + a;
    Some(&text[a + 1..b])
}

/// Counts the CPUs in a list such as `0-3,8,10-11`.
pub fn count_cpu_list(list: &str) -> Option<usize> {
    parse_cpu_list(list).map(|v| v.len())
}

/// Parses a CPU list such as `0-3,8` into CPU numbers (sorted, deduplicated).
pub fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    if out.is_empty() {
        return None;
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// The preemption model: the live setting from debugfs if mounted, else the config, else the banner.
fn preempt_model(config: Option<&str>, banner: &str) -> Option<String> {
    if let Some(t) = crate::sys::read_text("/sys/kernel/debug/sched/preempt")
        && let Some(m) = bracketed(&t.replace('(', "[").replace(')', "]"))
    {
        return Some(format!("{m} (debugfs sched/preempt)"));
    }
    if let Some(c) = config {
        let y = |n: &str| config_value(c, n).as_deref() == Some("y");
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
        let c =
            "CONFIG_HZ=250\n# CONFIG_PER_VMA_LOCK_STATS is not set\nCONFIG_PER_VMA_LOCK=y\nCONFIG_X=\"s\"\n";
        assert_eq!(config_value(c, "CONFIG_HZ").as_deref(), Some("250"));
        assert_eq!(config_value(c, "CONFIG_PER_VMA_LOCK").as_deref(), Some("y"));
        assert_eq!(config_value(c, "CONFIG_PER_VMA_LOCK_STATS").as_deref(), Some("n"));
        assert_eq!(config_value(c, "CONFIG_X").as_deref(), Some("s"));
        assert_eq!(config_value(c, "CONFIG_NONE"), None);
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
