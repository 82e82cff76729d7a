//! `MmConfig`: the kernel configuration an address space obeys, as data.
//!
//! Linux's behaviour depends on sysctls and build options (`vm.max_map_count`, `vm.mmap_min_addr`,
//! `CONFIG_ANON_VMA_NAME`, the overcommit policy, the stack rlimit that places `mmap_base`), on the build options
//! that decide which madvise advice exist (`CONFIG_TRANSPARENT_HUGEPAGE`, `CONFIG_KSM`, `CONFIG_MEMORY_FAILURE`,
//! `CONFIG_SWAP`) and the THP sysfs modes, on the CPU (protection keys), on the hugetlb pools, on the process's
//! privileges and resource limits (`RLIMIT_MEMLOCK`, `RLIMIT_FSIZE`) and on the file system that holds mapped
//! files (its largest file). The engine takes
//! them from this struct so that a differential run can use the host's values ([`MmConfig::host`] takes
//! them from `vmspace_host`, the one place that probes the host) while tests can shrink a limit (a
//! `max_map_count` of 8 makes the limit reachable in a few calls).

pub use vmspace_abi::{FileArea, PAGE_SHIFT, PAGE_SIZE, TASK_SIZE, VmFlags};

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

/// One hugetlb pool as the engine sees it: a huge page size the kernel offers (an hstate) and how many of its
/// pages new reservations and faults may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugetlbPool {
    /// Huge page size in bytes (2 MiB, 1 GiB on x86-64).
    pub size: u64,
    /// Pages free and not reserved when the engine starts (`free_hugepages - resv_hugepages`); the engine's
    /// own reservations and faults draw from it. Other processes' use of the pool is not seen.
    pub available: u64,
    /// Device minor of the kernel's internal hugetlbfs mount for this size, which `/proc/PID/maps` shows for
    /// `MAP_HUGETLB` mappings (`00:MINOR`). A boot-time value that no file publishes: 0 unless configured.
    pub dev_minor: u32,
}

/// The hugetlb configuration (`CONFIG_HUGETLBFS`): the default huge page size and the pools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HugetlbConfig {
    /// The default huge page size in bytes (`Hugepagesize:` of `/proc/meminfo`): what `MAP_HUGETLB` without a
    /// `MAP_HUGE_*` size uses.
    pub default_size: u64,
    /// Every huge page size the kernel offers (an empty list: no hugetlb support, `MAP_HUGETLB` is EINVAL).
    pub pools: Vec<HugetlbPool>,
}

impl HugetlbConfig {
    /// `hstate_sizelog`: the pool for a `MAP_HUGE_*` size field (`log2` of the size; 0 is the default size).
    pub fn pool_for_log(&self, log: u32) -> Option<&HugetlbPool> {
        let size = if log == 0 { self.default_size } else { 1u64.checked_shl(log)? };
        self.pools.iter().find(|p| p.size == size)
    }
}

impl Default for HugetlbConfig {
    /// x86-64 with 2 MiB and 1 GiB pages and empty pools (`vm.nr_hugepages` 0, the hosts' setting).
    fn default() -> Self {
        HugetlbConfig {
            default_size: 2 << 20,
            pools: vec![
                HugetlbPool { size: 2 << 20, available: 0, dev_minor: 0 },
                HugetlbPool { size: 1 << 30, available: 0, dev_minor: 0 },
            ],
        }
    }
}

/// A transparent huge page mode of `/sys/kernel/mm/transparent_hugepage/enabled` (and of each `hugepages-*kB`
/// size), or of `shmem_enabled` (which adds `within_size`, `advise`, `deny` and `force`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThpMode {
    /// `always`.
    Always,
    /// `madvise` (`enabled`) or `advise` (`shmem_enabled`): only `MADV_HUGEPAGE` regions.
    Madvise,
    /// `within_size` (`shmem_enabled` only).
    WithinSize,
    /// `never`.
    Never,
    /// `deny` (`shmem_enabled` only): not even `MADV_COLLAPSE`.
    Deny,
    /// `force` (`shmem_enabled` only).
    Force,
}

impl ThpMode {
    /// The mode a sysfs choice names (`madvise` and `advise` are the same mode), `None` for an unknown word.
    pub fn parse(word: &str) -> Option<ThpMode> {
        Some(match word {
            "always" => ThpMode::Always,
            "madvise" | "advise" => ThpMode::Madvise,
            "within_size" => ThpMode::WithinSize,
            "never" => ThpMode::Never,
            "deny" => ThpMode::Deny,
            "force" => ThpMode::Force,
            _ => return None,
        })
    }
}

/// The configuration of one address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MmConfig {
    /// The sysctl `vm.mmap_min_addr` (the kernel's `dac_mmap_min_addr`, 4096 on the hosts here): a `MAP_FIXED`
    /// (or stack-growth) address below it needs CAP_SYS_RAWIO (`security/commoncap.c: cap_mmap_addr`).
    pub mmap_min_addr: u64,
    /// `CONFIG_LSM_MMAP_MIN_ADDR` (65536 on the hosts here; 0 without `CONFIG_SECURITY`). The kernel's
    /// effective `mmap_min_addr` is the larger of this and the sysctl (`security/min_addr.c:
    /// update_mmap_min_addr`): hints are raised to it and searches stay above it, see [`MmConfig::min_addr`].
    pub lsm_mmap_min_addr: u64,
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
    /// Whether protection keys are usable (x86 `X86_FEATURE_OSPKE`: the CPU has PKU and the kernel enabled it,
    /// `pku` and `ospke` in `/proc/cpuinfo`). Without them there is one key, none is allocatable, and
    /// `pkey_alloc` is EINVAL (`arch/x86/include/asm/pkeys.h`).
    pub pku: bool,
    /// The hugetlb pools (`MAP_HUGETLB`).
    pub hugetlb: HugetlbConfig,
    /// The largest size of a mapped file (`s_maxbytes` of its file system: `ftruncate` beyond it is EFBIG;
    /// ext4 with 4 KiB blocks: 16 TiB - 4 KiB).
    pub file_max_bytes: u64,
    /// The readahead settings of the device holding the files an op script creates (the temporary directory's:
    /// `read_ahead_kb`, `max_sectors_kb`, and whether its file system caches large folios).
    pub file_bdi: vmspace_pgtable::Bdi,
    /// The placement method of the files an op script creates (the temporary directory's file system,
    /// [`VmFile::area`](crate::VmFile)): [`FileArea::Thp`] on ext4 (the default), xfs and btrfs,
    /// [`FileArea::Shmem`] on tmpfs.
    pub file_area: FileArea,
    /// Whether the CPU sets a page's accessed bit when its protection refuses a string store (`rep stosb`):
    /// implementation-defined on x86, measured by the live-kernel crate
    /// (`vmspace_linux::uaccess::refused_string_store_sets_accessed`); the op-script target's `fill` follows
    /// it. Not part of [`MmConfig::host`] (the measurement needs the kernel runner's fault handler).
    pub refused_string_store_accessed: bool,
    /// `RLIMIT_FSIZE` in bytes (`u64::MAX`: unlimited): growing a file beyond it is EFBIG.
    pub fsize_rlimit: u64,
    /// `RLIMIT_MEMLOCK` in bytes (`u64::MAX`: unlimited): bounds `mm->locked_vm` without CAP_IPC_LOCK (mlock,
    /// and `MAP_LOCKED` beyond it is EAGAIN: `mlock_future_ok`).
    pub memlock_rlimit: u64,
    /// Where `MAP_32BIT` searches begin (`find_start_end`: 1 GiB, which the kernel moves up by a random number
    /// of pages below 32 MiB for each call; the engine does not randomise).
    pub map_32bit_base: u64,
    /// `CONFIG_TRANSPARENT_HUGEPAGE`: `MADV_HUGEPAGE`, `MADV_NOHUGEPAGE` and `MADV_COLLAPSE` exist (else EINVAL),
    /// `MAP_STACK` sets `VM_NOHUGEPAGE`, and anonymous mappings of a multiple of 2 MiB are placed 2 MiB-aligned
    /// (`thp_get_unmapped_area`).
    pub transparent_hugepage: bool,
    /// The THP mode of anonymous memory (`transparent_hugepage/enabled`). `MADV_COLLAPSE` ignores it (a forced
    /// collapse), so no modelled call consults it yet; huge page faults will.
    pub thp_enabled: ThpMode,
    /// The THP mode of shmem (`transparent_hugepage/shmem_enabled`): `deny` refuses `MADV_COLLAPSE` of shmem.
    pub thp_shmem_enabled: ThpMode,
    /// `CONFIG_READ_ONLY_THP_FOR_FS`: `MADV_COLLAPSE` of regular files that nobody has open for writing.
    pub read_only_thp_for_fs: bool,
    /// `CONFIG_KSM`: `MADV_MERGEABLE` and `MADV_UNMERGEABLE` exist (else EINVAL).
    pub ksm: bool,
    /// `CONFIG_MEMORY_FAILURE`: `MADV_HWPOISON` and `MADV_SOFT_OFFLINE` exist (else EINVAL).
    pub memory_failure: bool,
    /// `CONFIG_SWAP`: `MADV_WILLNEED` on anonymous memory reads swap back (without swap it is EBADF).
    pub swap: bool,
    /// CAP_IPC_LOCK: mlock beyond `RLIMIT_MEMLOCK` (and with a limit of 0).
    pub cap_ipc_lock: bool,
    /// CAP_SYS_ADMIN: `MADV_HWPOISON` / `MADV_SOFT_OFFLINE` (else EPERM).
    pub cap_sys_admin: bool,
    /// How `Mm::fault` locks a VMA: the per-VMA lock of Linux 6.4+ (the default), or the mmap read lock for
    /// every fault (before 6.4). Not a host fact: a choice of the engine's user.
    pub fault_mode: super::fault::FaultMode,
    /// The x86-64 gate area (`[vsyscall]`, `get_gate_vma`) with its flags (`VM_EXEC` in 6.18's default
    /// `vsyscall=xonly` mode), or `None`: it is no VMA of the address space, but `maps` and `smaps` print it
    /// after the last VMA (`m_next`), a record of zeros in `smaps`; `smaps_rollup` and PROCMAP_QUERY do not
    /// see it. `None` by default (the op-script comparisons leave it out on both sides) and from
    /// [`MmConfig::host`]; an imported process's maps ends with it ([`MmConfig::with_layout`]).
    pub gate_area: Option<VmFlags>,
    /// The mm's `MMF_DISABLE_THP_COMPLETELY` (`prctl(PR_SET_THP_DISABLE, 1)`): no VMA is THP-eligible
    /// (`vma_thp_disabled`), which smaps' `THPeligible` shows. False by default; an import takes it from the
    /// process ([`MmConfig::with_layout`]).
    pub thp_disabled: bool,
}

/// The gate area's range (`VSYSCALL_ADDR`, one page).
pub const GATE_AREA: (u64, u64) = (0xffff_ffff_ff60_0000, 0xffff_ffff_ff60_1000);

impl Default for MmConfig {
    /// The defaults of a stock Linux 6.18 x86-64 process: a layout like a real process's (stack near the top,
    /// `mmap_base` below it with the 128 MiB minimum gap plus the stack randomisation pad, heap low), and the
    /// hosts' sysctls and options (mmap_min_addr 4096 with `CONFIG_LSM_MMAP_MIN_ADDR` 65536, max_map_count 65530, no anon VMA names, heuristic overcommit with
    /// 16 GiB), a distribution kernel's options (THP in `madvise` mode with shmem THP `never`, KSM, swap, no
    /// memory-failure injection, no read-only file THP), and an unprivileged process with the default 8 MiB
    /// `RLIMIT_MEMLOCK`.
    fn default() -> Self {
        MmConfig {
            mmap_min_addr: 4096,
            lsm_mmap_min_addr: 65536,
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
            pku: false,
            hugetlb: HugetlbConfig::default(),
            file_max_bytes: 0xfff_ffff_f000,
            file_bdi: vmspace_pgtable::Bdi::default(),
            file_area: FileArea::Thp,
            refused_string_store_accessed: true,
            fsize_rlimit: u64::MAX,
            memlock_rlimit: 8 << 20,
            map_32bit_base: 0x4000_0000,
            transparent_hugepage: true,
            thp_enabled: ThpMode::Madvise,
            thp_shmem_enabled: ThpMode::Never,
            read_only_thp_for_fs: false,
            ksm: true,
            memory_failure: false,
            swap: true,
            cap_ipc_lock: false,
            cap_sys_admin: false,
            fault_mode: super::fault::FaultMode::PerVma,
            gate_area: None,
            thp_disabled: false,
        }
    }
}

/// The readahead settings of a probed device: `ra_pages` and `io_pages` from its queue (the kernel's defaults
/// where unreadable), large folios where the file system caches them for ordinary files (ext4 since 6.16, xfs
/// since 5.18; not on a file system the engine does not know).
fn file_bdi(d: &vmspace_host::Device, release: Option<&str>) -> vmspace_pgtable::Bdi {
    let def = vmspace_pgtable::Bdi::default();
    let version = release.and_then(|r| {
        let mut it = r.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty());
        Some((it.next()?.parse::<u32>().ok()?, it.next()?.parse::<u32>().ok()?))
    });
    let since = |v: (u32, u32)| version.is_some_and(|k| k >= v);
    vmspace_pgtable::Bdi {
        ra_pages: d.read_ahead_kb.map_or(def.ra_pages, |kb| kb * 1024 / PAGE_SIZE),
        io_pages: d.max_sectors_kb.map_or(def.io_pages, |kb| kb * 1024 / PAGE_SIZE),
        large_folios: match d.fs_type.as_deref() {
            Some("ext4") => since((6, 16)),
            Some("xfs") => since((5, 18)),
            _ => false,
        },
    }
}

impl MmConfig {
    /// The host's configuration, from one probe of the host ([`vmspace_host::Host::probe`]; see
    /// [`MmConfig::from_host`] for what is taken from it).
    pub fn host() -> Self {
        MmConfig::from_host(&vmspace_host::Host::probe())
    }

    /// The configuration a probed host implies: `vm.mmap_min_addr`, `vm.max_map_count`, `CONFIG_LSM_MMAP_MIN_ADDR`, the overcommit policy
    /// (`vm.overcommit_memory`; the heuristic's limit is MemTotal + SwapTotal), CAP_SYS_RAWIO when running as
    /// root, and `CONFIG_ANON_VMA_NAME` from the kernel config (`/boot/config-$(uname -r)`, else
    /// `/proc/config.gz`; without a readable config the option counts as absent); protection keys from the
    /// CPU flags; `CONFIG_TRANSPARENT_HUGEPAGE`, `CONFIG_KSM`, `CONFIG_MEMORY_FAILURE`, `CONFIG_SWAP` and
    /// `CONFIG_READ_ONLY_THP_FOR_FS` from the same config (THP, when the config is unreadable, from the presence
    /// of its sysfs directory); the THP sysfs modes; the hugetlb pools (`Hugepagesize:` and
    /// `/sys/kernel/mm/hugepages`); CAP_IPC_LOCK and CAP_SYS_ADMIN from the effective capability set (or being
    /// root); `RLIMIT_FSIZE` and `RLIMIT_MEMLOCK` from `/proc/self/limits`; and the largest file, the readahead
    /// settings and the placement method (its `statfs` magic number) of the temporary directory's file system. Facts the probe could not read keep their [`Default`] values.
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
        // CONFIG_LSM_MMAP_MIN_ADDR exists only with CONFIG_SECURITY: a readable config without it means 0.
        if let Some(k) = h.config.as_ref() {
            c.lsm_mmap_min_addr =
                k.value("CONFIG_LSM_MMAP_MIN_ADDR").and_then(|v| v.parse().ok()).unwrap_or(0);
        }
        c.pku = h.cpu.has_pku();
        // Options the config states either way (`=y` or `is not set`); an option it omits keeps the default.
        let option = |name: &str| h.config.as_ref().and_then(|k| k.value(name)).map(|v| v == "y");
        if option("CONFIG_HUGETLBFS") == Some(false) {
            c.hugetlb.pools.clear();
        } else if !h.huge_pages.pools.is_empty() {
            c.hugetlb.pools = h
                .huge_pages
                .pools
                .iter()
                .map(|p| HugetlbPool { size: p.size_kb << 10, available: p.available(), dev_minor: 0 })
                .collect();
        }
        if let Some(kb) = h.huge_pages.default_size_kb {
            c.hugetlb.default_size = kb << 10;
        }
        if let Some(v) = h.fsize_rlimit {
            c.fsize_rlimit = v;
        }
        if let Some(v) = h.memlock_rlimit {
            c.memlock_rlimit = v;
        }
        if let Some(v) = h.temp_max_file_size {
            c.file_max_bytes = v;
        }
        if let Some(d) = &h.temp_device {
            c.file_bdi = file_bdi(d, h.kernel_release.as_deref());
            if let Some(magic) = d.fs_magic {
                c.file_area = FileArea::of_fs_magic(magic, d.shmem_huge);
            }
        }
        let thp_sysfs = h.huge_pages.thp_enabled.as_deref();
        c.transparent_hugepage = h
            .config_enabled("CONFIG_TRANSPARENT_HUGEPAGE")
            .unwrap_or(thp_sysfs.is_some() || c.transparent_hugepage);
        if let Some(m) = thp_sysfs.and_then(ThpMode::parse) {
            c.thp_enabled = m;
        }
        if let Some(m) = h.huge_pages.thp_shmem_enabled.as_deref().and_then(ThpMode::parse) {
            c.thp_shmem_enabled = m;
        }
        for (name, field) in [
            ("CONFIG_KSM", &mut c.ksm),
            ("CONFIG_MEMORY_FAILURE", &mut c.memory_failure),
            ("CONFIG_SWAP", &mut c.swap),
            ("CONFIG_READ_ONLY_THP_FOR_FS", &mut c.read_only_thp_for_fs),
        ] {
            if let Some(on) = h.config_enabled(name) {
                *field = on;
            }
        }
        if let Some(v) = h.has_cap(vmspace_host::cap::IPC_LOCK) {
            c.cap_ipc_lock = v;
        }
        if let Some(v) = h.has_cap(vmspace_host::cap::SYS_ADMIN) {
            c.cap_sys_admin = v;
        }
        c
    }

    /// `RLIMIT_MEMLOCK` in pages (`rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT`).
    pub fn memlock_limit_pages(&self) -> u64 {
        self.memlock_rlimit >> PAGE_SHIFT
    }

    /// The kernel's effective `mmap_min_addr` (the larger of the sysctl and `CONFIG_LSM_MMAP_MIN_ADDR`) rounded
    /// up to a page: the floor of every search, what a lower hint is raised to (`round_hint_to_min`) and the
    /// lowest address a stack may grow to (`expand_downwards`).
    pub fn min_addr(&self) -> u64 {
        self.mmap_min_addr.max(self.lsm_mmap_min_addr).div_ceil(PAGE_SIZE) * PAGE_SIZE
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
            config: Some(KernelConfig::parse(
                "CONFIG_ANON_VMA_NAME=y\n# CONFIG_TRANSPARENT_HUGEPAGE is not set\n",
            )),
            cpu: vmspace_host::Cpu::parse("flags\t: fpu pku ospke\n", None),
            huge_pages: vmspace_host::HugePages {
                default_size_kb: Some(2048),
                pools: vec![vmspace_host::HugePool {
                    size_kb: 2048,
                    nr: 8,
                    free: 6,
                    resv: 2,
                    ..Default::default()
                }],
                ..vmspace_host::HugePages::default()
            },
            fsize_rlimit: Some(1 << 30),
            memlock_rlimit: Some(64 << 10),
            temp_max_file_size: Some(0xfff_ffff_f000),
            ..Host::default()
        };
        let c = MmConfig::from_host(&h);
        assert_eq!(
            (c.mmap_min_addr, c.max_map_count, c.cap_sys_rawio, c.anon_vma_name),
            (65536, 1000, true, true)
        );
        assert!(c.pku && !c.transparent_hugepage && c.cap_ipc_lock);
        assert_eq!(c.hugetlb.pools, vec![HugetlbPool { size: 2 << 20, available: 4, dev_minor: 0 }]);
        assert_eq!(c.hugetlb.pool_for_log(0).map(|p| p.size), Some(2 << 20));
        assert_eq!(c.hugetlb.pool_for_log(21).map(|p| p.size), Some(2 << 20));
        assert!(c.hugetlb.pool_for_log(30).is_none());
        assert_eq!(
            (c.fsize_rlimit, c.memlock_rlimit, c.file_max_bytes),
            (1 << 30, 64 << 10, 0xfff_ffff_f000)
        );
        assert_eq!(c.overcommit, Overcommit::Guess { limit_pages: (2u64 << 30) / PAGE_SIZE });
        let always =
            MmConfig::from_host(&Host { overcommit_memory: Some(1), mem_total_kb: Some(1), ..h.clone() });
        assert_eq!(always.overcommit, Overcommit::Always);
        // Nothing probed: the defaults.
        assert_eq!(MmConfig::from_host(&Host::default()), MmConfig::default());
    }

    #[test]
    fn the_effective_mmap_min_addr_is_the_larger_of_the_sysctl_and_the_lsm_option() {
        let with = |sysctl: u64, config: &str| {
            MmConfig::from_host(&Host {
                mmap_min_addr: Some(sysctl),
                config: Some(KernelConfig::parse(config)),
                ..Host::default()
            })
        };
        let c = with(4096, "CONFIG_SECURITY=y\nCONFIG_LSM_MMAP_MIN_ADDR=65536\n");
        assert_eq!((c.mmap_min_addr, c.lsm_mmap_min_addr, c.min_addr()), (4096, 65536, 65536));
        // Without CONFIG_SECURITY the option does not exist: the sysctl alone, page-aligned.
        let c = with(5000, "# CONFIG_SECURITY is not set\n");
        assert_eq!((c.lsm_mmap_min_addr, c.min_addr()), (0, 8192));
        let c = with(1 << 20, "CONFIG_LSM_MMAP_MIN_ADDR=65536\n");
        assert_eq!(c.min_addr(), 1 << 20);
        // No readable config: the default option value stays.
        assert_eq!(MmConfig::from_host(&Host::default()).min_addr(), 65536);
    }

    #[test]
    fn from_host_takes_the_madvise_and_mlock_facts() {
        use vmspace_host::HugePages;
        let config = "# CONFIG_TRANSPARENT_HUGEPAGE is not set\nCONFIG_KSM=y\nCONFIG_MEMORY_FAILURE=y\n\
                      # CONFIG_SWAP is not set\nCONFIG_READ_ONLY_THP_FOR_FS=y\n";
        let h = Host {
            config: Some(KernelConfig::parse(config)),
            cap_eff: Some(1 << vmspace_host::cap::IPC_LOCK),
            root: Some(false),
            memlock_rlimit: Some(64 << 10),
            huge_pages: HugePages {
                thp_enabled: Some("always".into()),
                thp_shmem_enabled: Some("deny".into()),
                ..HugePages::default()
            },
            ..Host::default()
        };
        let c = MmConfig::from_host(&h);
        assert!(!c.transparent_hugepage, "the config wins over the sysfs directory");
        assert!(c.ksm && c.memory_failure && !c.swap && c.read_only_thp_for_fs);
        assert_eq!((c.thp_enabled, c.thp_shmem_enabled), (ThpMode::Always, ThpMode::Deny));
        assert!(c.cap_ipc_lock && !c.cap_sys_admin);
        assert_eq!((c.memlock_rlimit, c.memlock_limit_pages()), (64 << 10, 16));
        // No readable config: THP from its sysfs directory, the rest keep their defaults.
        let bare = Host {
            huge_pages: HugePages { thp_enabled: Some("never".into()), ..HugePages::default() },
            ..Host::default()
        };
        let c = MmConfig::from_host(&bare);
        assert!(c.transparent_hugepage && c.ksm && !c.memory_failure);
        assert_eq!(c.thp_enabled, ThpMode::Never);
        // Root without a readable CapEff has every capability.
        let root = MmConfig::from_host(&Host { root: Some(true), ..Host::default() });
        assert!(root.cap_ipc_lock && root.cap_sys_admin);
        assert_eq!(ThpMode::parse("advise"), Some(ThpMode::Madvise));
        assert_eq!(ThpMode::parse("sometimes"), None);
    }
}
