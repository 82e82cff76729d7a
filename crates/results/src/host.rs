//! The machine a result was measured on: the facts every live-kernel or benchmark result must carry.
//!
//! [`HostInfo`] is plain data; `vmspace_linux::hostinfo::gather` establishes it on the running host (from system
//! calls, `/proc/sys`, `/sys` and `/proc/config.gz`). Every fact that could not be established is `None` rather
//! than guessed.

use serde::{Deserialize, Serialize};

/// The host's kernel and machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// `uname -r`.
    pub kernel_release: String,
    /// `uname -v` (build banner: SMP, PREEMPT ... and date).
    pub kernel_version: String,
    /// `uname -m`.
    pub machine: String,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: Option<String>,
    /// CPUs online (`_SC_NPROCESSORS_ONLN` equivalent from /sys).
    pub cpus_online: Option<usize>,
    /// The CPUs this process may use.
    pub cpus_usable: Vec<usize>,
    /// Memory, kB (MemTotal).
    pub mem_total_kb: Option<u64>,
    /// Base page size in bytes.
    pub page_size: usize,
    /// `vm.max_map_count`.
    pub max_map_count: Option<u64>,
    /// Whether PROCMAP_QUERY works on /proc/self/maps (`"yes"`, or `"no: <errno>"`).
    pub procmap_query: String,
    /// `CONFIG_PER_VMA_LOCK`, if /proc/config.gz tells.
    pub per_vma_lock: Option<bool>,
    /// `CONFIG_HZ`, if /proc/config.gz tells.
    pub hz: Option<u32>,
    /// The preemption model and its source, e.g. `dynamic, default none (config)`.
    pub preempt_model: Option<String>,
    /// /sys/kernel/mm/transparent_hugepage/enabled (the bracketed choice).
    pub thp_enabled: Option<String>,
    /// /proc/loadavg's three load averages when gathered (other work on the machine disturbs measurements).
    pub load_average: Option<String>,
}

impl HostInfo {
    /// A one-line description for tables: `Linux 6.18 x86_64, 2 CPUs (Xeon ...), per-VMA locks: yes`.
    pub fn one_line(&self) -> String {
        format!(
            "Linux {} {}, {} usable CPUs ({}), {} MiB, page {} B, per-VMA locks: {}, preemption: {}",
            self.kernel_release,
            self.machine,
            self.cpus_usable.len(),
            self.cpu_model.as_deref().unwrap_or("unknown CPU"),
            self.mem_total_kb.map(|k| k / 1024).unwrap_or(0),
            self.page_size,
            match self.per_vma_lock {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown",
            },
            self.preempt_model.as_deref().unwrap_or("unknown"),
        )
    }
}
