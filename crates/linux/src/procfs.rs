//! Reading a live process's address space into an [`ImportedLayout`] (the description `vmspace_mm::Mm::import`
//! builds an engine address space from; `vmspace_proc::layout`).
//!
//! # Where each field comes from
//!
//! - **VMAs** from `/proc/PID/smaps`, one record each: the range, permissions, offset, device, inode and name
//!   from its header (the maps line); `vm_flags` from `VmFlags:` (every mnemonic of 6.18's `show_smap_vma_flags`
//!   table; an unknown one is an error, not a silently lost flag) plus the key of `ProtectionKey:`; whether
//!   the VMA has an anon_vma from `Anonymous:` and `Swap:` (a private VMA with anonymous pages present or
//!   swapped has one). An anon_vma whose pages are all gone (`MADV_DONTNEED`, a split-off part without
//!   pages) leaves no trace in `/proc` and is not seen; `/proc/PID/pagemap` would say the same (present or
//!   swapped entries), so it is not read.
//! - **Backing and names**: a path (with ` (deleted)`, `/memfd:NAME (deleted)`, `/SYSV... (deleted)`, a
//!   path in a tmpfs) is a file; `/dev/zero (deleted)` on a shared VMA and `[anon_shmem:NAME]` are shared
//!   anonymous memory; `[heap]`, `[stack]`, `[anon:NAME]` and nameless VMAs without a file are anonymous
//!   (`[heap]` and `[stack]` are not stored: the engine names them from the break and `start_stack`, as the
//!   kernel does); other bracketed names (`[vdso]`, `[vvar]`, `[vvar_vclock]`, `[uprobes]`) are special
//!   mappings; `[vsyscall]` is the gate area, not a VMA ([`ImportedLayout::gate_area`], with the flags of its
//!   smaps record); any other name
//!   (`anon_inode:[...]`, a path outside the reader's root) is taken as a file of that name.
//! - **Files**: VMAs of one device, inode, path and deletion state share one [`ImportedFile`]. Its size is
//!   the `st_size` of `/proc/PID/map_files/START-END` (the mapped file itself, reachable even when deleted;
//!   root or the owner with `CAP_SYS_ADMIN`), or the end of the furthest mapped page if that cannot be read;
//!   shmem (`TMPFS_MAGIC` from `fstatfs` of the same link, or device 00:01) is told from a disk file, and the
//!   placement method of its file system is known from the same magic number ([`file_area`]); the file
//!   counts as opened for writing when a shared VMA of it has `VM_MAYWRITE` (a private mapping cannot tell).
//! - **Layout parameters**: `start_stack` (field 28) and `start_brk` (field 47) from `/proc/PID/stat`; the
//!   break from the end of the last `[heap]` VMA (the kernel exports `mm->brk` nowhere: not in `stat`, and no
//!   `prctl` reads it back), else `start_brk`. It is exact when the break is page-aligned, which glibc's
//!   `malloc` keeps it; a program that set an unaligned break gets the next page boundary, which names the
//!   same VMAs `[heap]` and moves `brk` by the same pages, but `brk(0)` answers differently. `RLIMIT_STACK`
//!   from `/proc/PID/limits` (the current soft limit); `stack_guard_gap` from `stack_guard_gap=` on
//!   `/proc/cmdline` (pages), else 256 pages; `VmLck` of `/proc/PID/status` as `locked_vm`, and its
//!   `THP_enabled: 0` as the mm's `MMF_DISABLE_THP_COMPLETELY` (`prctl(PR_SET_THP_DISABLE)`).
//! - **`mmap_base`** is not exported either. x86's `arch_pick_mmap_layout` set it at `execve` to
//!   `PAGE_ALIGN(TASK_SIZE - gap - rnd)` (`arch/x86/mm/mmap.c: mmap_base`), with `gap` the stack rlimit plus
//!   the stack randomisation pad (`stack_maxrandom_size`: 16 GiB - 4 KiB when the task randomises) plus
//!   `stack_guard_gap`, clamped to [128 MiB, 5/6 of `TASK_SIZE`], and `rnd` a random page count below
//!   2^`vm.mmap_rnd_bits` (28). The random part is read nowhere, so it is inferred: the first top-down
//!   placement of the process's life is `execve`'s mapping of the program interpreter (`ld.so`; for a static
//!   program the vDSO), into the highest gap below `mmap_base`, which it reaches: its end *is* `mmap_base`,
//!   and every later search stays below. So `mmap_base` is taken as the highest VMA end at or below the upper
//!   bound `TASK_SIZE - gap` (rnd 0), the stack excluded. Limits: the rlimit used is today's, not the one
//!   at `execve` (a later `setrlimit(RLIMIT_STACK)` moves the bound); a mapping placed above `mmap_base` by
//!   a hint or `MAP_FIXED` in the bound's range, or an interpreter since unmapped, gives a wrong value; the
//!   inferred value is always a page inside the bound's window of `2^mmap_rnd_bits` pages, which
//!   [`mmap_base_window`] gives and [`read_snapshot`] checks. The bottom-up (legacy) layout
//!   (`ADDR_COMPAT_LAYOUT` in `/proc/PID/personality` or `vm.legacy_va_layout`) is refused: the engine
//!   places top-down only.
//! - **Protection keys**: `ProtectionKey:` appears only where the CPU and kernel enable PKU; then the keys in
//!   use by some VMA, and key 0, count as allocated. Keys allocated but on no VMA, the execute-only key's
//!   identity and each thread's PKRU are kept in `mm->context` and the thread's registers, which `/proc` does
//!   not show: they are not imported.
//!
//! # The process changes while it is read
//!
//! The files are read one after the other while the process runs, so [`read_snapshot`] reads `maps`, then
//! `smaps`, `stat` and the rest, then `maps` again, and accepts the reading only when both `maps` texts are
//! equal and the smaps headers are the `maps` lines: a change between the reads shows in `maps` (a change of
//! the break moves the `[heap]` end; one inside a page leaves nothing to import differently), and the
//! reading starts over, up to [`MAX_TRIES`] times. A process that maps and unmaps without pause may never be
//! caught still; the caller then stops it first (`SIGSTOP`, or a ptrace stop, as a tracer mirroring a process
//! call by call does anyway) and reads it stopped, which always settles at the first try. Reading our own
//! process changes it (the reads allocate), so the retry also covers `read_snapshot(getpid())`; what the
//! snapshot holds is the state of its last, stable reading, not the process's state after it returns.

use std::collections::HashMap;
use std::fmt;

use vmspace_abi::{FileArea, PAGE_SIZE, TASK_SIZE, VmFlags};
use vmspace_proc::layout::{
    ImportedBacking, ImportedFile, ImportedFileKind, ImportedLayout, ImportedPkeys, ImportedVma,
};
use vmspace_proc::{MapsName, SmapsRecord};

/// How often [`read_snapshot`] reads again before it gives up on a process that keeps changing.
pub const MAX_TRIES: usize = 50;

/// `ADDR_COMPAT_LAYOUT` of `personality(2)`: the bottom-up layout.
const ADDR_COMPAT_LAYOUT: u32 = 0x0200000;
/// `ADDR_NO_RANDOMIZE` of `personality(2)`.
const ADDR_NO_RANDOMIZE: u32 = 0x0040000;
/// `TMPFS_MAGIC` (shmem and tmpfs).
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// x86-64 `stack_maxrandom_size` of a randomising 64-bit task: `STACK_RND_MASK` (0x3fffff) pages.
const STACK_RANDOM_PAD: u64 = 0x3f_ffff << 12;
/// The default `stack_guard_gap`: 256 pages.
const DEFAULT_STACK_GUARD_GAP: u64 = 256 * PAGE_SIZE;

/// Why a process could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// A file of `/proc/PID` could not be read (the process is gone, or belongs to someone else).
    Io {
        /// The file.
        path: String,
        /// The error.
        err: std::io::Error,
    },
    /// A file did not parse as 6.18 prints it.
    Parse {
        /// The file.
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// The maps changed between the reads every time.
    Unstable {
        /// Readings tried.
        tries: usize,
    },
    /// The process has what the engine cannot take (the bottom-up layout).
    Unsupported(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io { path, err } => write!(f, "{path}: {err}"),
            ReadError::Parse { path, reason } => write!(f, "{path}: {reason}"),
            ReadError::Unstable { tries } => {
                write!(f, "the address space changed during each of {tries} readings; stop the process first")
            }
            ReadError::Unsupported(what) => write!(f, "cannot import: {what}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// One stable reading of a process (module docs): the description and the texts it was made from.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The description for `Mm::import`.
    pub layout: ImportedLayout,
    /// `/proc/PID/maps` as read (twice, equal).
    pub maps: String,
    /// The `/proc/PID/smaps` records read between the two `maps` reads (the gate area's included).
    pub smaps: Vec<SmapsRecord>,
    /// The inferred `mmap_base`'s window ([`mmap_base_window`]).
    pub mmap_base_window: (u64, u64),
}

fn read(path: &str) -> Result<String, ReadError> {
    std::fs::read_to_string(path).map_err(|err| ReadError::Io { path: path.into(), err })
}

fn parse_err(path: &str, reason: impl Into<String>) -> ReadError {
    ReadError::Parse { path: path.into(), reason: reason.into() }
}

/// The window `mmap_base` lies in (module docs): `(lowest, highest)`, both page-aligned, for a task with
/// stack rlimit `stack_rlimit`, guard gap `stack_guard_gap`, whether it randomises its layout, and
/// `vm.mmap_rnd_bits` (`arch/x86/mm/mmap.c: mmap_base`).
pub fn mmap_base_window(
    stack_rlimit: u64,
    stack_guard_gap: u64,
    randomize: bool,
    rnd_bits: u32,
) -> (u64, u64) {
    let pad = if randomize { STACK_RANDOM_PAD } else { 0 } + stack_guard_gap;
    let mut gap = stack_rlimit;
    // "Values close to RLIM_INFINITY can overflow."
    if gap.wrapping_add(pad) > gap {
        gap += pad;
    }
    let gap = gap.clamp(128 << 20, (TASK_SIZE / 6) * 5);
    let top = (TASK_SIZE - gap) & !(PAGE_SIZE - 1);
    let rnd_max = if randomize { ((1u64 << rnd_bits) - 1) << 12 } else { 0 };
    (top.saturating_sub(rnd_max), top)
}

/// The fields of `/proc/PID/stat` after the command (field 3 onward), by their 1-based field number.
fn stat_field(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(n - 3)?.parse().ok()
}

/// `stack_guard_gap=` of the kernel command line, in bytes.
fn stack_guard_gap() -> u64 {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("stack_guard_gap="))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(DEFAULT_STACK_GUARD_GAP, |pages| pages * PAGE_SIZE)
}

/// Reads process `pid` into a description ([`read_snapshot`]'s layout).
pub fn read_layout(pid: i32) -> Result<ImportedLayout, ReadError> {
    read_snapshot(pid).map(|s| s.layout)
}

/// One stable reading of process `pid` (module docs).
pub fn read_snapshot(pid: i32) -> Result<Snapshot, ReadError> {
    let dir = format!("/proc/{pid}");
    let personality = u32::from_str_radix(read(&format!("{dir}/personality"))?.trim(), 16)
        .map_err(|e| parse_err(&format!("{dir}/personality"), e.to_string()))?;
    if personality & ADDR_COMPAT_LAYOUT != 0 || vmspace_host::sysctl_vm("legacy_va_layout").unwrap_or(0) != 0
    {
        return Err(ReadError::Unsupported("the bottom-up (legacy) mmap layout".into()));
    }
    let randomize = personality & ADDR_NO_RANDOMIZE == 0
        && vmspace_host::sysctl("kernel/randomize_va_space").unwrap_or(2) != 0;
    let rnd_bits = vmspace_host::sysctl_vm("mmap_rnd_bits").unwrap_or(28) as u32;
    let guard = stack_guard_gap();
    for _ in 0..MAX_TRIES {
        let maps = read(&format!("{dir}/maps"))?;
        let smaps_text = read(&format!("{dir}/smaps"))?;
        let stat = read(&format!("{dir}/stat"))?;
        let limits = read(&format!("{dir}/limits"))?;
        let status = read(&format!("{dir}/status"))?;
        let smaps = vmspace_proc::parse_smaps(&smaps_text)
            .map_err(|(line, e)| parse_err(&format!("{dir}/smaps"), format!("record at line {line}: {e}")))?;
        let files = map_files(&dir, &smaps);
        let again = read(&format!("{dir}/maps"))?;
        let headers: String = smaps.iter().map(|r| r.header.render()).collect();
        if maps != again || headers != maps {
            continue;
        }
        let stack_rlimit = vmspace_host::limit_soft(&limits, "Max stack size")
            .ok_or_else(|| parse_err(&format!("{dir}/limits"), "no Max stack size"))?;
        let window = mmap_base_window(stack_rlimit, guard, randomize, rnd_bits);
        let layout = describe(&dir, &smaps, &files, &stat, &status, stack_rlimit, guard, window)?;
        return Ok(Snapshot { layout, maps, smaps, mmap_base_window: window });
    }
    Err(ReadError::Unstable { tries: MAX_TRIES })
}

/// What `/proc/PID/map_files` tells of each file VMA (by start address): the size, whether it is shmem, and
/// the placement method of its file system ([`file_area`], the mounts read from `DIR/mountinfo`).
fn map_files(dir: &str, smaps: &[SmapsRecord]) -> HashMap<u64, (u64, bool, FileArea)> {
    let mut out = HashMap::new();
    let mountinfo = std::fs::read_to_string(format!("{dir}/mountinfo")).ok();
    for r in smaps {
        let h = &r.header;
        if h.inode == 0 && h.dev_major == 0 && h.dev_minor == 0 {
            continue;
        }
        let link = format!("{dir}/map_files/{:x}-{:x}", h.start, h.end);
        let Ok(f) = std::fs::File::open(&link) else { continue };
        let Ok(st) = rustix::fs::fstat(&f) else { continue };
        let shmem = rustix::fs::fstatfs(&f).is_ok_and(|s| s.f_type == TMPFS_MAGIC);
        let area = file_area(&f, mountinfo.as_deref()).unwrap_or_default();
        out.insert(h.start, (st.st_size as u64, shmem, area));
    }
    out
}

/// The placement method (`file_operations.get_unmapped_area`) of the open file `f`, from its file system's
/// `fstatfs` magic number ([`FileArea::of_fs_magic`]); for tmpfs, whether the mount allows huge pages: its
/// `huge=` option in `mountinfo` (the process's mounts), or, for the kernel's internal mount (device 00:01:
/// memfd, SysV shared memory, shared anonymous memory; in no `mountinfo`), the host's `shmem_enabled`
/// (`always`, `within_size` or `advise`: the internal mount follows it, `mm/shmem.c: shmem_enabled_store`).
/// `None` if `fstatfs` or `fstat` fails.
pub fn file_area(f: &std::fs::File, mountinfo: Option<&str>) -> Option<FileArea> {
    let magic = rustix::fs::fstatfs(f).ok()?.f_type as u64;
    let st = rustix::fs::fstat(f).ok()?;
    let dev = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    let huge = magic == vmspace_abi::TMPFS_MAGIC
        && if dev == (0, 1) {
            vmspace_host::read_text("/sys/kernel/mm/transparent_hugepage/shmem_enabled").is_some_and(|t| {
                matches!(vmspace_host::bracketed(&t), Some("always" | "within_size" | "advise"))
            })
        } else {
            mountinfo.is_some_and(|m| vmspace_host::mountinfo_shmem_huge(m, dev))
        };
    Some(FileArea::of_fs_magic(magic, huge))
}

/// The description of one stable reading (module docs).
#[allow(clippy::too_many_arguments)]
fn describe(
    dir: &str,
    smaps: &[SmapsRecord],
    map_files: &HashMap<u64, (u64, bool, FileArea)>,
    stat: &str,
    status: &str,
    stack_rlimit: u64,
    stack_guard_gap: u64,
    window: (u64, u64),
) -> Result<ImportedLayout, ReadError> {
    let stat_path = format!("{dir}/stat");
    let start_stack = stat_field(stat, 28).ok_or_else(|| parse_err(&stat_path, "no field 28"))?;
    let start_brk = stat_field(stat, 47).ok_or_else(|| parse_err(&stat_path, "no field 47"))?;
    let pku = smaps.iter().any(|r| r.protection_key.is_some());
    let mut layout = ImportedLayout {
        start_stack,
        start_brk,
        brk: start_brk,
        stack_rlimit,
        stack_guard_gap,
        locked_vm: vmspace_host::meminfo_kb(status, "VmLck:").map(|kb| kb * 1024 / PAGE_SIZE),
        // `task_thp_status` (`fs/proc/array.c`) prints 0 under MMF_DISABLE_THP_COMPLETELY (and without THP).
        thp_disabled: status.lines().any(|l| l.split_whitespace().eq(["THP_enabled:", "0"])),
        pkeys: pku.then_some(ImportedPkeys { allocated: 1, execute_only: None }),
        ..ImportedLayout::default()
    };
    let mut file_index: HashMap<(u32, u32, u64, String, bool), usize> = HashMap::new();
    for r in smaps {
        let h = &r.header;
        let mut flags = VmFlags::NONE;
        for m in &r.vm_flags.mnemonics {
            flags |= VmFlags::from_mnemonic(m).ok_or_else(|| {
                parse_err(&format!("{dir}/smaps"), format!("unknown VmFlags mnemonic {m:?}"))
            })?;
        }
        if matches!(&h.name, Some(MapsName::Special(n)) if n == "[vsyscall]") {
            layout.gate_area = Some(flags);
            continue;
        }
        let key = r.protection_key.unwrap_or(0);
        flags |= VmFlags::from_pkey(key as u32);
        if let Some(p) = &mut layout.pkeys {
            p.allocated |= 1 << (key & 0xf);
        }
        let shared = flags.intersects(VmFlags::MAYSHARE);
        let has_file = h.inode != 0 || h.dev_major != 0 || h.dev_minor != 0;
        let anon_vma = !shared && (r.stats.anonymous > 0 || r.stats.swap > 0);
        let mut vma = ImportedVma {
            start: h.start,
            end: h.end,
            flags,
            pgoff: h.offset / PAGE_SIZE,
            backing: ImportedBacking::Anonymous,
            anon_name: None,
            anon_vma,
        };
        let mut file = |path: String, deleted: bool, kind: ImportedFileKind| {
            let shm_mnt = h.dev_major == 0 && h.dev_minor == 1;
            let (size, shmem, area) = map_files.get(&h.start).copied().unwrap_or((
                0,
                shm_mnt,
                if shm_mnt { FileArea::Shmem { huge: false } } else { FileArea::Mm },
            ));
            let extent = h.offset + (h.end - h.start);
            let kind =
                if kind == ImportedFileKind::Regular && shmem { ImportedFileKind::Shmem } else { kind };
            let writable = shared && flags.intersects(VmFlags::MAYWRITE);
            let k = (h.dev_major, h.dev_minor, h.inode, path.clone(), deleted);
            let i = *file_index.entry(k).or_insert_with(|| {
                layout.files.push(ImportedFile {
                    path,
                    deleted,
                    dev_major: h.dev_major,
                    dev_minor: h.dev_minor,
                    inode: h.inode,
                    size: if map_files.contains_key(&h.start) { size } else { extent },
                    kind,
                    writable: false,
                    area,
                });
                layout.files.len() - 1
            });
            let f = &mut layout.files[i];
            f.writable |= writable;
            if !map_files.contains_key(&h.start) {
                f.size = f.size.max(extent);
            }
            ImportedBacking::File(i)
        };
        match &h.name {
            Some(MapsName::Path { path, deleted }) => {
                let kind =
                    if shared && *deleted && path == "/dev/zero" && h.dev_major == 0 && h.dev_minor == 1 {
                        ImportedFileKind::SharedAnonymous
                    } else {
                        ImportedFileKind::Regular
                    };
                vma.backing = file(path.clone(), *deleted, kind);
            }
            Some(MapsName::AnonShmem(name)) => {
                vma.backing = file("/dev/zero".into(), true, ImportedFileKind::SharedAnonymous);
                vma.anon_name = Some(name.clone());
            }
            Some(MapsName::Other(name)) => vma.backing = file(name.clone(), false, ImportedFileKind::Regular),
            Some(MapsName::Special(name)) if !has_file => {
                vma.backing = ImportedBacking::Special(name.clone());
            }
            Some(MapsName::Special(name)) => {
                vma.backing = file(name.clone(), false, ImportedFileKind::Regular)
            }
            Some(MapsName::Anon(name)) => {
                vma.anon_name = Some(name.clone());
                vma.pgoff = h.start / PAGE_SIZE;
            }
            Some(MapsName::Heap) => {
                layout.brk = layout.brk.max(h.end);
                vma.pgoff = h.start / PAGE_SIZE;
            }
            Some(MapsName::Stack) | None => vma.pgoff = h.start / PAGE_SIZE,
        }
        layout.vmas.push(vma);
    }
    layout.mmap_base = infer_mmap_base(&layout.vmas, start_stack, window);
    Ok(layout)
}

/// `mmap_base` by the method of the module docs: the highest VMA end at or below the window's top, the VMA
/// holding `start_stack` excluded; the window's top if none.
fn infer_mmap_base(vmas: &[ImportedVma], start_stack: u64, (lo, hi): (u64, u64)) -> u64 {
    vmas.iter()
        .filter(|v| !(v.start <= start_stack && start_stack <= v.end) && v.end <= hi && v.end >= lo)
        .map(|v| v.end)
        .max()
        .unwrap_or(hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_follows_arch_x86_mm_mmap_c() {
        // 8 MiB stack, the default guard gap, randomising with 28 bits.
        let (lo, hi) = mmap_base_window(8 << 20, 256 * PAGE_SIZE, true, 28);
        assert_eq!(hi, TASK_SIZE - ((8 << 20) + STACK_RANDOM_PAD + (1 << 20)));
        assert_eq!(hi - lo, ((1 << 28) - 1) << 12);
        // Not randomising: no pad, no random part, and the 128 MiB minimum gap.
        assert_eq!(
            mmap_base_window(8 << 20, 256 * PAGE_SIZE, false, 28),
            (TASK_SIZE - (128 << 20), TASK_SIZE - (128 << 20))
        );
        // An unlimited stack: the gap is clamped to 5/6 of TASK_SIZE.
        let (_, hi) = mmap_base_window(u64::MAX, 256 * PAGE_SIZE, false, 28);
        assert_eq!(hi, (TASK_SIZE - (TASK_SIZE / 6) * 5) & !(PAGE_SIZE - 1));
    }

    #[test]
    fn stat_fields_count_past_the_command() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0 18446744073709551615 1 2 \
                    140737488347136 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 3 4 93824992231424 6 7 8 9 0";
        assert_eq!(stat_field(stat, 28), Some(140_737_488_347_136));
        assert_eq!(stat_field(stat, 47), Some(93_824_992_231_424));
        assert_eq!(stat_field(stat, 4), Some(1));
    }
}
