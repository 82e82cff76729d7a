//! Host probing in one place: what the running kernel and machine are, read from the files Linux publishes.
//!
//! ```
//! use vmspace_host::{Host, KernelConfig};
//!
//! // Parsed from text (the tests' way) ...
//! let cfg = KernelConfig::parse("CONFIG_ANON_VMA_NAME=y\n# CONFIG_PREEMPT is not set\n");
//! assert!(cfg.enabled("CONFIG_ANON_VMA_NAME"));
//! assert_eq!(cfg.value("CONFIG_PREEMPT"), Some("n"));
//! // ... or probed from the running host: every fact that cannot be read is `None`.
//! let host = Host::probe();
//! assert!(host.kernel_release.is_some());
//! ```
//!
//! Both consumers read the host through this crate: the engine's configuration (`vmspace_mm`'s
//! `MmConfig::host`, which turns sysctls, memory totals, privileges and `CONFIG_ANON_VMA_NAME` into the rules
//! the engine obeys) and the live-kernel lab's `HostInfo` (`vmspace_linux::hostinfo`, the facts stamped on every
//! result). So the two never disagree about the host, and a new fact (a CPU feature, a huge-page pool) is
//! added here once.
//!
//! # Sources
//!
//! - Sysctls under `/proc/sys/vm` (`mmap_min_addr`, `max_map_count`, `overcommit_memory`, `nr_hugepages`) and
//!   `/proc/sys/kernel/osrelease` ([`sysctl`], [`sysctl_vm`]).
//! - The kernel's build configuration ([`KernelConfig::running`]): `/boot/config-$(uname -r)`, the file
//!   distributions install beside the kernel, else `/proc/config.gz` (only with `CONFIG_IKCONFIG_PROC`;
//!   gzip). Neither may exist: then every config question is unanswered (`None`), never guessed.
//! - `/proc/meminfo` (totals, the default huge page size, [`mem_available`]), `/proc/loadavg` ([`load_average`]),
//!   debugfs's `sched/preempt` ([`preempt_debugfs`]), `/proc/self/status` (the effective uid and the
//!   effective capability set `CapEff`), `/proc/self/limits` (`RLIMIT_FSIZE`, `RLIMIT_MEMLOCK`),
//!   `/proc/cpuinfo` (model, feature flags: `pku`/`ospke` for protection keys), `/sys/devices/system/cpu/online`,
//!   `/sys/kernel/mm/hugepages/` (one directory per huge page size) and
//!   `/sys/kernel/mm/transparent_hugepage/{enabled,shmem_enabled}`.
//! - The temporary directory's file system ([`Device::of`]): its device, type and `huge=` option
//!   (`/proc/self/mountinfo`), its magic number (`statfs`), its device's readahead settings (`/sys`).
//!
//! - The largest file size the temporary directory's file system allows (`s_maxbytes`, where the live-kernel
//!   runner creates the files of op scripts): [`probe_max_file_size`] finds it with `ftruncate` (through
//!   `std::fs::File::set_len`) on a scratch file there, which it removes again. This is the one probe that
//!   writes: a sparse file that never holds a block.
//!
//! Probing never fails and never panics: a fact that cannot be read is `None` (or empty), and callers keep
//! their defaults. Parsers are separate pure functions so that tests feed them text.
//!
//! Depends on nothing of vmspace; `mm` (below `linux`) may use it, so it must stay free of syscall wrappers
//! that belong to the live-kernel layer.

use std::io::Read;

/// Reads a text file, `None` if it cannot be read.
pub fn read_text(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A numeric sysctl: `/proc/sys/<path>` (e.g. `vm/max_map_count`), `None` if absent or not a number.
pub fn sysctl(path: &str) -> Option<u64> {
    read_text(&format!("/proc/sys/{path}"))?.trim().parse().ok()
}

/// A numeric `vm.*` sysctl: `/proc/sys/vm/<name>`.
pub fn sysctl_vm(name: &str) -> Option<u64> {
    sysctl(&format!("vm/{name}"))
}

/// The kernel release (`uname -r`, from `/proc/sys/kernel/osrelease`).
pub fn kernel_release() -> Option<String> {
    Some(read_text("/proc/sys/kernel/osrelease")?.trim().to_string()).filter(|s| !s.is_empty())
}

/// The kernel's build configuration (`CONFIG_*` lines).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelConfig {
    text: String,
    /// Where it was read from (`/boot/config-6.18.0`, `/proc/config.gz`, or `text` when parsed).
    pub source: String,
}

impl KernelConfig {
    /// The running kernel's configuration: `/boot/config-$(uname -r)`, else `/proc/config.gz`; `None` when
    /// neither can be read.
    pub fn running() -> Option<Self> {
        if let Some(release) = kernel_release() {
            let path = format!("/boot/config-{release}");
            if let Some(text) = read_text(&path) {
                return Some(KernelConfig { text, source: path });
            }
        }
        let f = std::fs::File::open("/proc/config.gz").ok()?;
        let mut text = String::new();
        flate2::read::GzDecoder::new(f).read_to_string(&mut text).ok()?;
        Some(KernelConfig { text, source: "/proc/config.gz".to_string() })
    }

    /// A configuration given as text.
    pub fn parse(text: &str) -> Self {
        KernelConfig { text: text.to_string(), source: "text".to_string() }
    }

    /// The value of `NAME=value` (quotes removed); `Some("n")` for `# NAME is not set`; `None` if the option
    /// is not mentioned.
    pub fn value(&self, name: &str) -> Option<&str> {
        for line in self.text.lines() {
            if let Some(v) = line.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                return Some(v.trim_matches('"'));
            }
            if line.strip_prefix("# ").and_then(|r| r.strip_prefix(name)) == Some(" is not set") {
                return Some("n");
            }
        }
        None
    }

    /// Whether `NAME=y`.
    pub fn enabled(&self, name: &str) -> bool {
        self.value(name) == Some("y")
    }

    /// The whole text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// A field of `/proc/meminfo` text in kB (`MemTotal:`), `None` if absent.
pub fn meminfo_kb(meminfo: &str, field: &str) -> Option<u64> {
    meminfo.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

/// The memory the machine can give a new workload now (`MemAvailable:` of `/proc/meminfo`, in bytes), `None` if
/// unknown. Read afresh on every call: it changes as other processes run.
pub fn mem_available() -> Option<u64> {
    meminfo_kb(&read_text("/proc/meminfo")?, "MemAvailable:").map(|kb| kb * 1024)
}

/// The three load averages of `/proc/loadavg` (`"0.52 0.31 0.20"`), `None` if unreadable.
pub fn load_average() -> Option<String> {
    let text = read_text("/proc/loadavg")?;
    let avg: Vec<&str> = text.split_whitespace().take(3).collect();
    (avg.len() == 3).then(|| avg.join(" "))
}

/// The live preemption model as debugfs shows it (`/sys/kernel/debug/sched/preempt`, e.g.
/// `none voluntary (full) lazy`: the one in force in parentheses), `None` when debugfs is not mounted or the
/// kernel has no dynamic preemption.
pub fn preempt_debugfs() -> Option<String> {
    read_text("/sys/kernel/debug/sched/preempt")
}

/// Capability numbers (`include/uapi/linux/capability.h`) of the capabilities the engine asks about.
pub mod cap {
    /// `CAP_IPC_LOCK`: mlock beyond `RLIMIT_MEMLOCK`.
    pub const IPC_LOCK: u32 = 14;
    /// `CAP_SYS_RAWIO`: map below `mmap_min_addr`.
    pub const SYS_RAWIO: u32 = 17;
    /// `CAP_SYS_ADMIN`: `MADV_HWPOISON` / `MADV_SOFT_OFFLINE`.
    pub const SYS_ADMIN: u32 = 21;
}

/// The `CapEff:` mask of `/proc/PID/status` text (hexadecimal), `None` if absent or malformed.
pub fn status_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

/// The bracketed word in a sysfs choice list (`always [madvise] never` -> `madvise`).
pub fn bracketed(text: &str) -> Option<&str> {
    let a = text.find('[')?;
    let b = text[a..].find(']')? + a;
    Some(&text[a + 1..b])
}

/// Parses a CPU list such as `0-3,8` into CPU numbers (sorted, deduplicated); `None` if malformed or empty.
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

/// What the CPU is, from `/proc/cpuinfo` (first processor) and sysfs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpu {
    /// `model name`.
    pub model: Option<String>,
    /// The feature flags (`flags` line), e.g. `pku`, `ospke`, `la57`.
    pub flags: Vec<String>,
    /// CPUs online (`/sys/devices/system/cpu/online`).
    pub online: Option<usize>,
}

impl Cpu {
    /// Reads this machine's CPU: `/proc/cpuinfo` and `/sys/devices/system/cpu/online` (unknowns are `None` or
    /// empty).
    pub fn probe() -> Self {
        Cpu::parse(
            &read_text("/proc/cpuinfo").unwrap_or_default(),
            read_text("/sys/devices/system/cpu/online").as_deref(),
        )
    }

    /// Parses the first processor of `/proc/cpuinfo` text, with the online list's count.
    pub fn parse(cpuinfo: &str, online_list: Option<&str>) -> Self {
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        Cpu {
            model: field("model name"),
            flags: field("flags")
                .map(|f| f.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
            online: online_list.and_then(|l| parse_cpu_list(l.trim())).map(|v| v.len()),
        }
    }

    /// Whether the CPU lists feature `flag`.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// Memory protection keys usable from user space: the CPU has them (`pku`) and the kernel enabled them
    /// (`ospke`).
    pub fn has_pku(&self) -> bool {
        self.has("pku") && self.has("ospke")
    }
}

/// One hugetlb pool (`/sys/kernel/mm/hugepages/hugepages-<size>kB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HugePool {
    /// Page size in kB.
    pub size_kb: u64,
    /// `nr_hugepages`: pages in the pool.
    pub nr: u64,
    /// `free_hugepages`: pages not faulted in by anyone.
    pub free: u64,
    /// `resv_hugepages`: free pages promised to mappings (`hugetlb_reserve_pages`), not available to new ones.
    pub resv: u64,
    /// `surplus_hugepages`: pages allocated beyond `nr` under overcommit.
    pub surplus: u64,
    /// `nr_overcommit_hugepages`: how many surplus pages the pool may grow by.
    pub overcommit: u64,
}

impl HugePool {
    /// The pages a new reservation can still take without growing the pool (`free - resv`).
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.resv)
    }
}

/// The host's huge-page configuration: the hugetlb pools and the transparent huge page mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HugePages {
    /// The default hugetlb page size (`Hugepagesize:` of `/proc/meminfo`), kB.
    pub default_size_kb: Option<u64>,
    /// Every hugetlb page size the kernel offers, smallest first.
    pub pools: Vec<HugePool>,
    /// `/sys/kernel/mm/transparent_hugepage/enabled` (the bracketed choice).
    pub thp_enabled: Option<String>,
    /// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` (the bracketed choice).
    pub thp_shmem_enabled: Option<String>,
}

impl HugePages {
    /// Probes the pools under `/sys/kernel/mm/hugepages` and the THP mode.
    fn probe(meminfo: Option<&str>) -> Self {
        let mut pools = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/sys/kernel/mm/hugepages") {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(size_kb) = name
                    .strip_prefix("hugepages-")
                    .and_then(|r| r.strip_suffix("kB"))
                    .and_then(|s| s.parse().ok())
                else {
                    continue;
                };
                let num = |f: &str| {
                    read_text(&format!("/sys/kernel/mm/hugepages/{name}/{f}"))
                        .and_then(|t| t.trim().parse().ok())
                        .unwrap_or(0)
                };
                pools.push(HugePool {
                    size_kb,
                    nr: num("nr_hugepages"),
                    free: num("free_hugepages"),
                    resv: num("resv_hugepages"),
                    surplus: num("surplus_hugepages"),
                    overcommit: num("nr_overcommit_hugepages"),
                });
            }
        }
        pools.sort_by_key(|p| p.size_kb);
        HugePages {
            default_size_kb: meminfo.and_then(|m| meminfo_kb(m, "Hugepagesize:")),
            pools,
            thp_enabled: read_text("/sys/kernel/mm/transparent_hugepage/enabled")
                .and_then(|t| bracketed(&t).map(str::to_string)),
            thp_shmem_enabled: read_text("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
                .and_then(|t| bracketed(&t).map(str::to_string)),
        }
    }
}

/// A soft limit of `/proc/self/limits` text (`Max file size`, `Max locked memory`): `Some(u64::MAX)` for
/// `unlimited`, `None` if the line is absent or malformed.
pub fn limit_soft(limits: &str, name: &str) -> Option<u64> {
    let rest = limits.lines().find_map(|l| l.strip_prefix(name))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX),
        v => v.parse().ok(),
    }
}

/// The largest size `ftruncate` accepts for a regular file in `dir` (the file system's `s_maxbytes`, as
/// `fs/attr.c: inode_newsize_ok` checks it when a file grows), found by bisection over `[0, limit]` with a
/// scratch file that is removed afterwards; `limit` should be the process's `RLIMIT_FSIZE` (growing beyond
/// it raises SIGXFSZ, so the probe never tries). `None` if no scratch file can be made, or if every size up
/// to `limit` is accepted (the file system's own limit is then not visible, and not needed: the rlimit
/// refuses first).
pub fn probe_max_file_size(dir: &std::path::Path, limit: u64) -> Option<u64> {
    // ftruncate takes a signed off_t: sizes above i64::MAX are EINVAL before any file system check.
    let limit = limit.min(i64::MAX as u64);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.subsec_nanos();
    let path = dir.join(format!(".vmspace-maxbytes-{}-{nanos}", std::process::id()));
    let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).ok()?;
    let fits = |size: u64| f.set_len(size).is_ok();
    let found = if fits(limit) {
        None
    } else {
        // Invariant: `lo` fits, `hi` does not.
        let (mut lo, mut hi) = (0u64, limit);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) { lo = mid } else { hi = mid }
        }
        Some(lo)
    };
    let _ = f.set_len(0);
    drop(f);
    let _ = std::fs::remove_file(&path);
    found
}

/// The block device behind a directory, as readahead sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Device {
    /// `MAJOR:MINOR` of the file system (`st_dev`).
    pub dev: (u32, u32),
    /// The file system type (`/proc/self/mountinfo`), e.g. `ext4`.
    pub fs_type: Option<String>,
    /// The file system's magic number (`statfs` `f_type`, `include/uapi/linux/magic.h`), which tells which
    /// placement method its files have (`vmspace_abi::FileArea::of_fs_magic`).
    pub fs_magic: Option<u64>,
    /// The mount's `huge=` option (tmpfs) names a mode other than `never`: [`mountinfo_shmem_huge`].
    pub shmem_huge: bool,
    /// `/sys/class/bdi/MAJ:MIN/read_ahead_kb`: the backing device's readahead window (`bdi->ra_pages`).
    pub read_ahead_kb: Option<u64>,
    /// `/sys/dev/block/MAJ:MIN/queue/max_sectors_kb` (or its parent disk's): the largest request
    /// (`bdi->io_pages`).
    pub max_sectors_kb: Option<u64>,
}

/// `MAJOR` and `MINOR` of a `dev_t` (glibc's encoding).
pub fn dev_major_minor(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// The file system type of the mount whose device is `dev`, from `/proc/self/mountinfo` text (field 3 is
/// `MAJ:MIN`, the type follows the ` - ` separator).
pub fn mountinfo_fs_type(mountinfo: &str, dev: (u32, u32)) -> Option<String> {
    let want = format!("{}:{}", dev.0, dev.1);
    mountinfo.lines().find_map(|l| {
        let (head, tail) = l.split_once(" - ")?;
        (head.split_whitespace().nth(2)? == want)
            .then(|| tail.split_whitespace().next().map(str::to_string))?
    })
}

/// Whether the mount whose device is `dev` has a `huge=` super option other than `never` (tmpfs:
/// `SHMEM_SB(sb)->huge`, which `shmem_show_options` prints unless it is `never`), from `/proc/self/mountinfo`
/// text (the super options are the last field).
pub fn mountinfo_shmem_huge(mountinfo: &str, dev: (u32, u32)) -> bool {
    let want = format!("{}:{}", dev.0, dev.1);
    mountinfo.lines().any(|l| {
        let Some((head, tail)) = l.split_once(" - ") else { return false };
        head.split_whitespace().nth(2) == Some(want.as_str())
            && tail.split_whitespace().nth(2).is_some_and(|opts| {
                opts.split(',').any(|o| o.strip_prefix("huge=").is_some_and(|v| v != "never"))
            })
    })
}

impl Device {
    /// The device of the file system holding `dir`; `None` if `dir` cannot be stat'ed.
    pub fn of(dir: &std::path::Path) -> Option<Device> {
        use std::os::unix::fs::MetadataExt;
        let dev = dev_major_minor(std::fs::metadata(dir).ok()?.dev());
        let sys = |p: String| read_text(&p).and_then(|t| t.trim().parse().ok());
        let (ma, mi) = dev;
        let mountinfo = read_text("/proc/self/mountinfo");
        Some(Device {
            dev,
            fs_type: mountinfo.as_deref().and_then(|m| mountinfo_fs_type(m, dev)),
            fs_magic: rustix::fs::statfs(dir).ok().map(|s| s.f_type as u64),
            shmem_huge: mountinfo.as_deref().is_some_and(|m| mountinfo_shmem_huge(m, dev)),
            read_ahead_kb: sys(format!("/sys/class/bdi/{ma}:{mi}/read_ahead_kb")),
            max_sectors_kb: sys(format!("/sys/dev/block/{ma}:{mi}/queue/max_sectors_kb"))
                .or_else(|| sys(format!("/sys/dev/block/{ma}:{mi}/../queue/max_sectors_kb"))),
        })
    }
}

/// Everything this crate probes, read once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Host {
    /// `uname -r`.
    pub kernel_release: Option<String>,
    /// The build configuration, if readable.
    pub config: Option<KernelConfig>,
    /// `vm.mmap_min_addr`.
    pub mmap_min_addr: Option<u64>,
    /// `vm.max_map_count`.
    pub max_map_count: Option<u64>,
    /// `vm.overcommit_memory` (0 heuristic, 1 always, 2 never).
    pub overcommit_memory: Option<u64>,
    /// `MemTotal:` in kB.
    pub mem_total_kb: Option<u64>,
    /// `SwapTotal:` in kB.
    pub swap_total_kb: Option<u64>,
    /// Whether this process runs as root (effective uid 0, from `/proc/self/status`): CAP_SYS_RAWIO and the
    /// other capabilities the engine asks about.
    pub root: Option<bool>,
    /// The effective capability set of this process (`CapEff:` of `/proc/self/status`), a mask of bits
    /// numbered as in [`cap`].
    pub cap_eff: Option<u64>,
    /// The CPU.
    pub cpu: Cpu,
    /// Huge pages.
    pub huge_pages: HugePages,
    /// `RLIMIT_FSIZE` (soft) in bytes, `u64::MAX` for unlimited.
    pub fsize_rlimit: Option<u64>,
    /// `RLIMIT_MEMLOCK` (soft) in bytes, `u64::MAX` for unlimited.
    pub memlock_rlimit: Option<u64>,
    /// The largest file the temporary directory (`std::env::temp_dir()`, where the live-kernel runner makes the
    /// files of op scripts) can hold: [`probe_max_file_size`].
    pub temp_max_file_size: Option<u64>,
    /// The device of the temporary directory's file system (readahead settings of the runner's files).
    pub temp_device: Option<Device>,
}

impl Host {
    /// Probes the running host (never fails; unknowns are `None`).
    pub fn probe() -> Self {
        let meminfo = read_text("/proc/meminfo");
        let status = read_text("/proc/self/status");
        let root = status
            .as_deref()
            .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")));
        let limits = read_text("/proc/self/limits");
        let fsize_rlimit = limits.as_deref().and_then(|l| limit_soft(l, "Max file size"));
        Host {
            kernel_release: kernel_release(),
            config: KernelConfig::running(),
            mmap_min_addr: sysctl_vm("mmap_min_addr"),
            max_map_count: sysctl_vm("max_map_count"),
            overcommit_memory: sysctl_vm("overcommit_memory"),
            mem_total_kb: meminfo.as_deref().and_then(|m| meminfo_kb(m, "MemTotal:")),
            swap_total_kb: meminfo.as_deref().and_then(|m| meminfo_kb(m, "SwapTotal:")),
            root,
            cap_eff: status.as_deref().and_then(status_cap_eff),
            cpu: Cpu::probe(),
            huge_pages: HugePages::probe(meminfo.as_deref()),
            fsize_rlimit,
            memlock_rlimit: limits.as_deref().and_then(|l| limit_soft(l, "Max locked memory")),
            temp_max_file_size: probe_max_file_size(&std::env::temp_dir(), fsize_rlimit.unwrap_or(u64::MAX)),
            temp_device: Device::of(&std::env::temp_dir()),
        }
    }

    /// Whether this process has capability `cap` (a number of [`cap`]): from `CapEff`, or, when that could not
    /// be read, from being root. `None` when neither is known.
    pub fn has_cap(&self, cap: u32) -> Option<bool> {
        match self.cap_eff {
            Some(mask) => Some(cap < 64 && mask & (1u64 << cap) != 0),
            None => self.root,
        }
    }

    /// `CONFIG_<name>` of the running kernel: `Some(true)` for `=y`, `Some(false)` when the config says
    /// anything else or omits it, `None` when no config is readable.
    pub fn config_enabled(&self, name: &str) -> Option<bool> {
        self.config.as_ref().map(|c| c.enabled(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_facts_of_this_host() {
        // `MemAvailable:` is in /proc/meminfo since Linux 3.14 (`fs/proc/meminfo.c`); /proc/loadavg always has
        // three averages first.
        assert!(mem_available().is_some_and(|b| b > 0 && b % 1024 == 0));
        let avg = load_average().expect("/proc/loadavg");
        assert_eq!(avg.split(' ').count(), 3, "{avg}");
        assert!(avg.split(' ').all(|a| a.parse::<f64>().is_ok()), "{avg}");
    }

    #[test]
    fn devices_and_mounts() {
        assert_eq!(dev_major_minor(0xfe00), (254, 0));
        assert_eq!(dev_major_minor((259 << 8) | 3), (259, 3));
        // makedev(8, 300): the minor's high bits sit above the major's.
        assert_eq!(dev_major_minor(0x10_082c), (8, 300));
        let mi = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                  23 22 0:21 / /proc rw - proc proc rw\n";
        assert_eq!(mountinfo_fs_type(mi, (254, 0)).as_deref(), Some("ext4"));
        assert_eq!(mountinfo_fs_type(mi, (0, 21)).as_deref(), Some("proc"));
        assert_eq!(mountinfo_fs_type(mi, (8, 1)), None);
        let shm = "30 22 0:25 / /dev/shm rw - tmpfs tmpfs rw,size=1024k\n\
                   31 22 0:26 / /huge rw - tmpfs tmpfs rw,huge=within_size\n\
                   32 22 0:27 / /never rw - tmpfs tmpfs rw,huge=never\n";
        assert!(!mountinfo_shmem_huge(shm, (0, 25)));
        assert!(mountinfo_shmem_huge(shm, (0, 26)));
        assert!(!mountinfo_shmem_huge(shm, (0, 27)));
        assert!(!mountinfo_shmem_huge(mi, (254, 0)));
        let d = Device::of(&std::env::temp_dir()).expect("the temporary directory exists");
        assert!(d.read_ahead_kb.is_none() || d.fs_type.is_some(), "{d:?}");
        assert!(d.fs_magic.is_some(), "statfs of the temporary directory: {d:?}");
    }

    #[test]
    fn config_values() {
        let c = KernelConfig::parse(
            "CONFIG_HZ=250\n# CONFIG_PER_VMA_LOCK_STATS is not set\nCONFIG_PER_VMA_LOCK=y\nCONFIG_X=\"s\"\n",
        );
        assert_eq!(c.value("CONFIG_HZ"), Some("250"));
        assert!(c.enabled("CONFIG_PER_VMA_LOCK"));
        assert_eq!(c.value("CONFIG_PER_VMA_LOCK_STATS"), Some("n"));
        assert!(!c.enabled("CONFIG_PER_VMA_LOCK_STATS"));
        assert_eq!(c.value("CONFIG_X"), Some("s"));
        assert_eq!(c.value("CONFIG_NONE"), None);
    }

    #[test]
    fn lists_and_choices() {
        assert_eq!(bracketed("always [madvise] never"), Some("madvise"));
        assert_eq!(parse_cpu_list("0-3,8,2"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("x"), None);
        let mi = "MemTotal:       16318412 kB\nSwapTotal:             0 kB\nHugepagesize:       2048 kB\n";
        assert_eq!(meminfo_kb(mi, "MemTotal:"), Some(16318412));
        assert_eq!(meminfo_kb(mi, "SwapTotal:"), Some(0));
        assert_eq!(meminfo_kb(mi, "Missing:"), None);
    }

    #[test]
    fn cpu_facts() {
        let info = "processor\t: 0\nmodel name\t: Some CPU @ 2GHz\nflags\t\t: fpu pku ospke la57\n\n\
                    processor\t: 1\nmodel name\t: Some CPU @ 2GHz\nflags\t\t: fpu\n";
        let c = Cpu::parse(info, Some("0-1\n"));
        assert_eq!(c.model.as_deref(), Some("Some CPU @ 2GHz"));
        assert!(c.has_pku());
        assert!(c.has("la57") && !c.has("avx"));
        assert_eq!(c.online, Some(2));
        let no_pku = Cpu::parse("flags\t: fpu pku\n", None);
        assert!(!no_pku.has_pku(), "pku without ospke is not usable");
        assert_eq!(Cpu::parse("", None), Cpu::default());
    }

    #[test]
    fn limits_text() {
        let t = "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max file size             unlimited            unlimited            bytes     \n\
                 Max locked memory         8388608              8388608              bytes     \n";
        assert_eq!(limit_soft(t, "Max file size"), Some(u64::MAX));
        assert_eq!(limit_soft(t, "Max locked memory"), Some(8 << 20));
        assert_eq!(limit_soft(t, "Max open files"), None);
    }

    #[test]
    fn max_file_size_probe_bisects_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("vmspace-host-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Every size up to a small limit fits on any file system: nothing to report.
        assert_eq!(probe_max_file_size(&dir, 1 << 20), None);
        // Up to i64::MAX, no Linux file system takes everything: the probe finds a limit that really is one.
        let max = probe_max_file_size(&dir, u64::MAX).expect("a file system limit below i64::MAX");
        let f = dir.join("check");
        let file = std::fs::File::create(&f).unwrap();
        assert!(file.set_len(max).is_ok());
        assert!(file.set_len(max + 1).is_err());
        drop(file);
        std::fs::remove_file(&f).unwrap();
        // The scratch files are gone.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn capabilities_and_limits() {
        let status = "Name:\tx\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(status_cap_eff(status), Some(0x1ff_ffff_ffff));
        assert_eq!(status_cap_eff("CapEff:\tzz\n"), None);
        assert_eq!(status_cap_eff("Uid:\t0\n"), None);
        let h = Host { cap_eff: Some(1 << cap::IPC_LOCK), root: Some(true), ..Host::default() };
        assert_eq!((h.has_cap(cap::IPC_LOCK), h.has_cap(cap::SYS_ADMIN)), (Some(true), Some(false)));
        // Without CapEff, root stands for every capability.
        let h = Host { root: Some(true), ..Host::default() };
        assert_eq!(h.has_cap(cap::SYS_ADMIN), Some(true));
        assert_eq!(Host::default().has_cap(cap::IPC_LOCK), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max locked memory         8388608              8388608              bytes     \n\
                      Max address space         unlimited            unlimited            bytes     \n";
        assert_eq!(limit_soft(limits, "Max locked memory"), Some(8 << 20));
        assert_eq!(limit_soft(limits, "Max address space"), Some(u64::MAX));
        assert_eq!(limit_soft(limits, "Max stack size"), None);
    }

    #[test]
    fn probe_this_host() {
        let h = Host::probe();
        assert!(h.kernel_release.is_some());
        assert!(h.max_map_count.is_some_and(|n| n > 0));
        assert!(h.mem_total_kb.is_some_and(|n| n > 0));
        assert!(h.root.is_some());
        assert!(h.cap_eff.is_some(), "CapEff is in /proc/self/status since Linux 2.6.25");
        assert!(h.memlock_rlimit.is_some(), "/proc/self/limits names RLIMIT_MEMLOCK");
        assert!(h.huge_pages.pools.windows(2).all(|w| w[0].size_kb < w[1].size_kb));
        if let Some(c) = &h.config {
            assert!(c.value("CONFIG_MMU").is_some(), "a config from {} without CONFIG_MMU", c.source);
        }
    }
}
