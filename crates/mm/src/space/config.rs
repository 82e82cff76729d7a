//! `MmConfig`: the kernel configuration an address space obeys, as data.
//!
//! Linux's behaviour depends on sysctls and build options (`vm.max_map_count`, `vm.mmap_min_addr`,
//! `CONFIG_ANON_VMA_NAME`, the overcommit policy, the stack rlimit that places `mmap_base`). The engine takes
//! them from this struct so that a differential run can use the host's values ([`MmConfig::host`] reads
//! them) while tests can shrink a limit (a `max_map_count` of 8 makes the limit reachable in a few calls).

pub use vmspace_abi::{PAGE_SHIFT, PAGE_SIZE, TASK_SIZE};

/// `DEFAULT_MAP_WINDOW` (equal to `TASK_SIZE` with 4-level paging).
pub const DEFAULT_MAP_WINDOW: u64 = TASK_SIZE;

/// The overcommit policy (`vm.overcommit_memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overcommit {
    /// 0, heuristic: one accounted allocation may not exceed total RAM plus swap.
    Guess {
        /// `totalram_pages() + total_swap_pages`.
        limit_pages: u64,
    },
    /// 1: never refuse.
    Always,
    /// 2: strict accounting is not modelled; treated as `Guess` with no limit, except that `MAP_NORESERVE`
    /// is not honoured (as Linux does under this policy).
    Never,
}

/// The configuration of one address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MmConfig {
    /// `vm.mmap_min_addr`: the lowest address a hint or a search may return (4096 on the hosts here).
    pub mmap_min_addr: u64,
    /// Whether the process may map below `mmap_min_addr` with `MAP_FIXED` (CAP_SYS_RAWIO: root on the host).
    pub cap_sys_rawio: bool,
    /// `vm.max_map_count` (65530 by default).
    pub max_map_count: u64,
    /// `stack_guard_gap` in bytes (256 pages by default).
    pub stack_guard_gap: u64,
    /// `RLIMIT_STACK` in bytes (bounds growsdown expansion by faults).
    pub stack_rlimit: u64,
    /// Whether the kernel has `CONFIG_ANON_VMA_NAME` (without it, `PR_SET_VMA_ANON_NAME` is `EINVAL`).
    pub anon_vma_name: bool,
    /// The overcommit policy for accounted (private writable) memory.
    pub overcommit: Overcommit,
    /// Top of the top-down mmap area (`mm->mmap_base`).
    pub mmap_base: u64,
    /// Initial program break (`mm->start_brk`; `mm->brk` starts equal).
    pub start_brk: u64,
    /// `mm->start_stack`: the VMA containing it is named `[stack]`.
    pub start_stack: u64,
}

impl Default for MmConfig {
    /// The defaults of a stock Linux 6.18 x86-64 process: a layout like a real process's (stack near the top,
    /// `mmap_base` below it with the 128 MiB minimum gap plus the stack randomisation pad, heap low), and the
    /// hosts' sysctls (mmap_min_addr 4096, max_map_count 65530, no anon VMA names, heuristic overcommit with
    /// 16 GiB).
    fn default() -> Self {
        MmConfig {
            mmap_min_addr: 4096,
            cap_sys_rawio: false,
            max_map_count: 65530,
            stack_guard_gap: 256 * PAGE_SIZE,
            stack_rlimit: 8 << 20,
            anon_vma_name: false,
            overcommit: Overcommit::Guess { limit_pages: (16u64 << 30) / PAGE_SIZE },
            // mmap_base = TASK_SIZE - (rlimit 8 MiB + stack randomisation 16 GiB + guard 1 MiB), no random shift.
            mmap_base: TASK_SIZE - ((8 << 20) + (16u64 << 30) + (1 << 20)),
            start_brk: 0x5555_5557_0000,
            start_stack: 0x7fff_ffff_e000,
        }
    }
}

impl MmConfig {
    /// The host's configuration: `/proc/sys/vm/{mmap_min_addr,max_map_count,overcommit_memory}`, total RAM
    /// and swap from `/proc/meminfo`, whether the running kernel has `CONFIG_ANON_VMA_NAME`
    /// (`/proc/config.gz` is not needed: the answer is probed by the caller when it matters, and read here from
    /// `/proc/config.gz` when readable), and whether this process is root (CAP_SYS_RAWIO). Values that cannot be
    /// read keep their defaults.
    pub fn host() -> Self {
        let mut c = MmConfig::default();
        let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
        if let Some(v) = read("/proc/sys/vm/mmap_min_addr") {
            c.mmap_min_addr = v;
        }
        if let Some(v) = read("/proc/sys/vm/max_map_count") {
            c.max_map_count = v;
        }
        let policy = read("/proc/sys/vm/overcommit_memory").unwrap_or(0);
        if let Ok(mi) = std::fs::read_to_string("/proc/meminfo") {
            let field = |name: &str| {
                mi.lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            let kb = field("MemTotal:").unwrap_or(16 << 20) + field("SwapTotal:").unwrap_or(0);
            c.overcommit = if policy == 1 {
                Overcommit::Always
            } else if policy == 2 {
                Overcommit::Never
            } else {
                Overcommit::Guess { limit_pages: kb * 1024 / PAGE_SIZE }
            };
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            let uid0 =
                status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
            c.cap_sys_rawio = uid0;
        }
        c.anon_vma_name = host_has_anon_vma_name();
        c
    }

    /// `mmap_min_addr` rounded up to a page (the floor of every search).
    pub fn min_addr(&self) -> u64 {
        self.mmap_min_addr.div_ceil(PAGE_SIZE) * PAGE_SIZE
    }
}

/// Whether the running kernel names anonymous VMAs: `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, 0, 0, 0)` on an
/// empty range is 0 with `CONFIG_ANON_VMA_NAME` and `EINVAL` without. Read from `/proc/config.gz` when it is
/// plain text-searchable, else assumed absent (the hosts here).
fn host_has_anon_vma_name() -> bool {
    // /proc/config.gz is gzip; without a decompressor in this crate, look for an uncompressed copy that
    // distributions install under /boot.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let path = format!("/boot/config-{}", release.trim());
    std::fs::read_to_string(path).is_ok_and(|s| s.lines().any(|l| l == "CONFIG_ANON_VMA_NAME=y"))
}
