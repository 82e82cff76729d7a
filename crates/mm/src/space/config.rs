//! `MmConfig`: the kernel configuration an address space obeys, as data.
//!
//! Linux's behaviour depends on sysctls and build options (`vm.max_map_count`, `vm.mmap_min_addr`,
//! `CONFIG_ANON_VMA_NAME`, the overcommit policy, the stack rlimit that places `mmap_base`). The engine takes
//! them from this struct so that a differential run can use the host's values ([`MmConfig::host`] takes
//! them from `vmspace_host`, the one place that probes the host) while tests can shrink a limit (a
//! `max_map_count` of 8 makes the limit reachable in a few calls).

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
    /// The host's configuration, from one probe of the host ([`vmspace_host::Host::probe`]; see
    /// [`MmConfig::from_host`] for what is taken from it).
    pub fn host() -> Self {
        MmConfig::from_host(&vmspace_host::Host::probe())
    }

    /// The configuration a probed host implies: `vm.mmap_min_addr`, `vm.max_map_count`, the overcommit policy
    /// (`vm.overcommit_memory`; the heuristic's limit is MemTotal + SwapTotal), CAP_SYS_RAWIO when running as
    /// root, and `CONFIG_ANON_VMA_NAME` from the kernel config (`/boot/config-$(uname -r)`, else
    /// `/proc/config.gz`; without a readable config the option counts as absent). Facts the probe could not
    /// read keep their [`Default`] values.
    pub fn from_host(h: &vmspace_host::Host) -> Self {
        let mut c = MmConfig::default();
        if let Some(v) = h.mmap_min_addr {
            c.mmap_min_addr = v;
        }
        if let Some(v) = h.max_map_count {
            c.max_map_count = v;
        }
        if let Some(mem_kb) = h.mem_total_kb {
            let kb = mem_kb + h.swap_total_kb.unwrap_or(0);
            c.overcommit = match h.overcommit_memory.unwrap_or(0) {
                1 => Overcommit::Always,
                2 => Overcommit::Never,
                _ => Overcommit::Guess { limit_pages: kb * 1024 / PAGE_SIZE },
            };
        }
        if let Some(root) = h.root {
            c.cap_sys_rawio = root;
        }
        c.anon_vma_name = h.config_enabled("CONFIG_ANON_VMA_NAME").unwrap_or(false);
        c
    }

    /// `mmap_min_addr` rounded up to a page (the floor of every search).
    pub fn min_addr(&self) -> u64 {
        self.mmap_min_addr.div_ceil(PAGE_SIZE) * PAGE_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmspace_host::{Host, KernelConfig};

    #[test]
    fn from_host_takes_every_probed_fact() {
        let h = Host {
            mmap_min_addr: Some(65536),
            max_map_count: Some(1000),
            overcommit_memory: Some(0),
            mem_total_kb: Some(1 << 20),
            swap_total_kb: Some(1 << 20),
            root: Some(true),
            config: Some(KernelConfig::parse("CONFIG_ANON_VMA_NAME=y\n")),
            ..Host::default()
        };
        let c = MmConfig::from_host(&h);
        assert_eq!(
            (c.mmap_min_addr, c.max_map_count, c.cap_sys_rawio, c.anon_vma_name),
            (65536, 1000, true, true)
        );
        assert_eq!(c.overcommit, Overcommit::Guess { limit_pages: (2u64 << 30) / PAGE_SIZE });
        let always =
            MmConfig::from_host(&Host { overcommit_memory: Some(1), mem_total_kb: Some(1), ..h.clone() });
        assert_eq!(always.overcommit, Overcommit::Always);
        // Nothing probed: the defaults.
        assert_eq!(MmConfig::from_host(&Host::default()), MmConfig::default());
    }
}
