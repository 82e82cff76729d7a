//! The live-kernel op-script runner: runs a script with real syscalls and prints the same canonical output
//! as the engine (`vmspace_script::output`), so that `vmspace diff` can hold one against the other.
//!
//! # Process model (chosen: fork, no re-exec)
//!
//! [`replay_kernel`] forks a child and the script runs entirely in it; the caller's address space is never
//! touched. The child runs [`vmspace_script::run_in`] with a [`KernelTarget`], renders the output, writes it
//! to a pipe and leaves with `_exit`. The parent reads the pipe to its end and waits for the child.
//!
//! The caller may be multi-threaded (the test harness is). After `fork` only the forking thread exists in the
//! child, so the child must not wait for a lock another thread might have held at the instant of the fork.
//! What the child uses: raw syscalls (`libc::syscall` for the script's calls, rustix and libc for the rest:
//! `prctl`, `sigaction`, `fork`, `_exit`, files and pipes), the CPU accesses of [`crate::uaccess`], reads of `/proc/self/maps`, and heap
//! allocation. Allocation is safe here because glibc's `fork`
//! takes and resets malloc's locks around the fork (its atfork handling), so the child's allocator is
//! consistent. The child never touches stdio, the environment (no `std::env`, no `tempfile` calls: the
//! temporary directory is created by the parent, before the fork), or any Rust `Mutex` shared with other
//! threads. A panic in the child is caught and turned into an exit status; it never unwinds into the
//! caller's code. Re-executing the binary was the alternative; it would need a hidden subcommand in every
//! binary that runs scripts (each test binary included), so fork it is.
//!
//! # Nothing outlives the command
//!
//! The runner child and every process a script forks arm `PR_SET_PDEATHSIG(SIGKILL)` first thing (and check
//! that their parent did not die before that), and restore the default SIGINT/SIGTERM dispositions, so they end
//! with the process that made them however it ends. The temporary directory of `file` ops is the parent's; a
//! killed parent cannot remove it, so a second child, the *janitor*, is forked before the runner: it ignores
//! SIGINT/SIGTERM, holds the read end of a pipe whose only writer is the parent, and when that pipe reaches end
//! of file (the parent is gone, however it died) removes the directory and exits. After a normal run the parent
//! removes the directory itself and kills and reaps the janitor. While waiting for the runner the parent wakes
//! every 250 ms (to report the runner's call count, [`replay_kernel_observed`]) and checks
//! [`crate::child::interrupted`]: on Ctrl-C (with [`crate::child::install_interrupt_handler`] installed) it kills
//! and reaps the runner, removes the directory and returns [`ReplayError::Interrupted`].
//!
//! `fork` in a script is a real fork inside the child: the new process continues with the remaining ops and
//! everything the driver had accumulated so far (the output is in its memory, copied by fork); the old one
//! waits for it and exits with its status without writing anything. So exactly one process writes the output.
//!
//! # Calls
//!
//! Every call is the raw system call with the script's values passed unchanged (`libc::syscall` with the
//! x86-64 numbers of `arch/x86/entry/syscalls/syscall_64.tbl`, as the `libc` crate defines them: mmap 9,
//! mprotect 10, munmap 11, mremap 25, msync 26, madvise 28, ftruncate 77, mlock 149, munlock 150, mlockall
//! 151, munlockall 152, mlock2 325, pkey_mprotect 329, pkey_alloc 330, pkey_free 331, mseal 462), so the
//! kernel does all validation, in its own order. mremap passes all five arguments (the kernel reads
//! new_address for MREMAP_DONTUNMAP without MREMAP_FIXED, as a hint). A return in -4095..=-1 is the error
//! (libc sets `errno`). `name` is `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, ...)` (EINVAL on kernels built
//! without CONFIG_ANON_VMA_NAME, like this project's hosts). `brk` is the raw syscall (it returns the
//! resulting break).
//!
//! Files: `file NAME SIZE` creates `NAME` in a fresh temporary directory (opened read-write, then
//! ftruncate to SIZE; if that fails the file is closed again and the line prints the errno). `fd=NAME` and
//! `ftruncate NAME` pass that file's descriptor; a NAME the runner holds no file for (never declared, declared
//! later, or whose creation failed) passes [`CLOSED_FD`], a number no process can have open (checked when
//! the child starts), so the kernel answers EBADF wherever it looks the descriptor up; `fd=-1` passes -1, and
//! an anonymous mmap without `fd=` passes -1 and offset 0. SIGXFSZ is ignored in the child, so a size past
//! RLIMIT_FSIZE is EFBIG, not the runner's death.
//!
//! # Memory accesses
//!
//! `touch`, `fill` and `check` are the runner's own CPU loads and stores, page by page ([`crate::uaccess`]:
//! inline-asm accessors whose faulting instructions are in an exception table, and a SIGSEGV/SIGBUS handler
//! that the child installs before the script and that the script's forks inherit, which resumes an accessor
//! at its fix-up and records the fault). The first page whose access faults is the line's `-EFAULT PAGE`; the
//! handler's `si_addr` must lie in that page (or be the 0 of a non-canonical address), else the run stops as a
//! runner bug. `touch r` reads the page's first byte in the range, `touch w` is `lock add byte [p], 0` (a write
//! access that keeps the byte: `uaccess`, "The write that keeps contents"), `fill` is `rep stosb` over the
//! part of the range in each page, `check` copies that part into a one-page buffer (`rep movsb`) and feeds it
//! to the script crate's content hash. Work and memory are per page, whatever LEN says: nothing is allocated
//! per byte, and a walk ends at the first page that faults (at `TASK_SIZE` at the latest).
//!
//! # mlockall, munlockall and protection keys
//!
//! `mlockall` and `munlockall` act on the whole process, the runner's own mappings included. The runner runs
//! them as given: locking populates and pins the runner's memory but changes neither its contents nor its
//! mappings (`mm/mlock.c: apply_mlockall_flags` changes whole VMAs' flags, so no VMA of the runner splits,
//! and none merges: none of them differed from a neighbour only by `VM_LOCKED`), so the runner keeps working
//! and the output, which shows only the arena, compares with the engine's, whose address space is the arena.
//! `MCL_FUTURE` also locks (and populates) mappings the runner makes afterwards: its own allocations are
//! small, and generated scripts map only small lengths or lengths the kernel refuses. In a headroom run
//! (below) a VMA the runner makes after `MCL_FUTURE` (a heap extension) is locked and does not merge with its
//! unlocked neighbour, so it may cost one VMA of the count the engine cannot see; the differential gate
//! compares such runs only up to that call. The one thing that does
//! not compare is the memlock limit: without CAP_IPC_LOCK, `mlockall(MCL_CURRENT)` counts the runner's whole
//! `total_vm` against RLIMIT_MEMLOCK (ENOMEM where the engine, which sees only the arena, may succeed); this
//! project's hosts run the runner as root, where no limit applies.
//!
//! `pkey_alloc` sets the runner thread's rights for the new key, which affect only memory carrying that key,
//! and only a (guarded) pkey_mprotect of script mappings gives memory a key. On a CPU or kernel without
//! protection keys pkey_alloc is EINVAL and so is every key but -1.
//!
//! # smaps and PROCMAP_QUERY
//!
//! `smaps` reads `/proc/self/smaps` in chunks of the maps buffer and keeps the records whose header overlaps
//! the arena (a small string even with 65,000 filler VMAs; nothing is allocated per record of the runner's
//! own). `query` opens `/proc/self/maps` and issues `ioctl(PROCMAP_QUERY)` on a zeroed struct of the script's
//! `size` (at least the 104 bytes the kernel knows, at most a page: the kernel refuses larger ones before
//! reading them), with a name buffer of the script's capacity; it reads the answer back from the struct and
//! the name from the buffer.
//!
//! Two smaps counters depend on per-CPU page batches (`mm/swap.c`): a page `MADV_FREE` marks lazily free
//! loses `PG_swapbacked` (and counts as `LazyFree`) only when its CPU's `lru_lazyfree` batch is drained, and
//! a page still in an `lru_add` batch is not marked at all. So the runner child pins itself to the CPU it
//! starts on (`sched_setaffinity`; the script's forks inherit it) and, before every smaps read, drains
//! every CPU's batches with `migrate_pages(0, .., {0}, {0})` (`do_migrate_pages` starts with
//! `lru_add_drain_all` and then has nothing to move), or, on a kernel without NUMA, this CPU's with
//! `madvise(MADV_FREE)` of a scratch page of its own (`madvise_free_single_vma` starts with `lru_add_drain`;
//! EINVAL once `mlockall` locked the page, and `MADV_DONTNEED_LOCKED` does not drain): what it reads is then
//! what the calls did, not what the batches still hold. The pinning matters too: `MADV_FREE` drains only its
//! own CPU's `lru_add` batch, and a page still in another CPU's is not marked at all.
//!
//! # Never run
//!
//! `madvise` with MADV_HWPOISON (100) or MADV_SOFT_OFFLINE (101), by name or number: as root they poison or
//! offline the machine's physical pages (`mm/madvise.c: madvise_inject_error`). [`replay_kernel_observed`]
//! refuses a script that contains one before it forks anything ([`refused_before_running`]), and the child
//! refuses the call again should it ever reach it.
//!
//! # Reaching `max_map_count`
//!
//! `vm.max_map_count` is a system-wide sysctl (65530 here) counted against the whole process, the runner's own
//! VMAs included. To hold the engine's limit checks against the kernel's without changing the sysctl, a run
//! may ask for a *headroom* ([`ReplayOptions::map_count_headroom`]): before the script, the child counts its
//! own VMAs (the lines of `/proc/self/maps`, less the `[vsyscall]` gate area, which is not a VMA) and maps
//! single pages of alternating protection (so none merge) at [`FILLER_BASE`] until exactly `max_map_count -
//! headroom` VMAs exist, then checks the count again. First, every VMA of the runner and then every filler
//! gets `VM_DONTDUMP` and `VM_NOHUGEPAGE` (`madvise` of whole VMAs: no split), so that a mapping the kernel
//! places outside the arena (a refused hint, a moving mremap) cannot merge with one of them: merged, it would
//! cost no VMA where the engine, which holds only the script's mappings, spends one. The script then has `headroom` VMAs left before the
//! limit, as an engine `Mm` with `max_map_count = headroom` has. The counts are read into one buffer
//! allocated before the first count, so that reading the 65,000-line maps file adds no VMA of its own.
//!
//! # Guard
//!
//! A script could name addresses outside the arena, where the runner's own code, heap and stack live. Before a
//! call that can change memory, the runner reads `/proc/self/maps` and stops the run with
//! [`ReplayError::Refused`] instead of corrupting itself when the pages the kernel would act on include a
//! mapping outside the arena (`[vsyscall]`, which is not a VMA, aside). Which pages those are follows each
//! call:
//! - fixed mmap, munmap, mremap source and fixed destination: the whole aligned, non-empty range, if it ends
//!   at or below TASK_SIZE (the kernel refuses the others before acting);
//! - madvise (and `brk` below the current break): the whole range, TASK_SIZE or not (madvise skips holes and
//!   is not bounded by TASK_SIZE); `touch w` and `fill`: the whole range up to TASK_SIZE (their walks fault
//!   there at the latest);
//! - mprotect, pkey_mprotect, mlock, mlock2, munlock, mseal: the contiguous run of VMAs from the one
//!   containing the start (the page range as the kernel computes it: mlock rounds the start down, the others
//!   need it aligned), up to the first hole, since these calls walk from the start and stop at a hole;
//!   with PROT_GROWSDOWN from the first VMA that meets the range. A range that starts in a hole changes
//!   nothing and runs. Lock changes are guarded like protection changes: splitting the runner's VMAs would
//!   spend `max_map_count` the script cannot see, and a sealed runner mapping could never be freed.
//!
//! "The runner's own mapping" means a VMA outside the arena, less the pages the script's own calls mapped
//! there: the runner records the pages each successful mmap or mremap of the script returns (mapping at 0 as
//! root, next to the arena, or wherever the kernel put a refused hint) and forgets them on a successful
//! munmap, on a shrinking or moving mremap, and where a failed MAP_FIXED mmap or MREMAP_FIXED mremap left
//! them unmapped (it reads the maps again), so later calls on those pages run; a page it forgets may be the
//! runner's again. The pages a memory access grows a script VMA by outside the arena (a fault just below a
//! growsdown VMA at the arena's base) are the script's too ([`KernelTarget`]'s `script_growth_end`).
//!
//! Not guarded, because they change no mapping and no byte the runner reads: msync, mlockall, munlockall,
//! pkey_alloc, pkey_free, ftruncate (of script files only), and reads (`touch r`, `check`). Ranges outside the arena that only
//! cover free space run normally.

use crate::uaccess;
use rustix::fd::{AsRawFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::mm::ProtFlags;
use std::ffi::c_void;
use std::fmt;
use std::path::PathBuf;
use vmspace_abi::{Advice, MapFlags, MremapFlags, Prot};
use vmspace_script::{
    Arena, CallError, ContentHash, Errno, Fd, Op, Outcome, Output, QueryAnswer, QueryRequest, Script, Target,
};

const PAGE: u64 = 4096;
/// x86-64 TASK_SIZE with 4-level paging: the end of user space.
const TASK_SIZE: u64 = 0x7fff_ffff_f000;
/// Exit status of a child that refused a call (message on the pipe).
const EXIT_REFUSED: i32 = 3;
/// Exit status of a child that panicked (message on the pipe).
const EXIT_PANIC: i32 = 4;
/// Where the filler VMAs of a headroom run go: 16 TiB, far from the default arena (32 TiB) and from what the
/// kernel places top-down below the stack.
pub const FILLER_BASE: u64 = 0x1000_0000_0000;

/// How a kernel replay runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// The script's arena.
    pub arena: Arena,
    /// Fill the child with VMAs until only this many more fit under `vm.max_map_count` (module docs).
    pub map_count_headroom: Option<u64>,
}

/// Why a kernel replay did not produce an output.
#[derive(Debug)]
pub enum ReplayError {
    /// Setting up (temporary directory, pipe, fork) failed.
    Setup(std::io::Error),
    /// The guard refused a call that would have changed the runner's own memory.
    Refused(String),
    /// The child died or misbehaved.
    Child(String),
    /// The user interrupted the run (Ctrl-C or SIGTERM); the child was killed and reaped.
    Interrupted,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Setup(e) => write!(f, "kernel runner setup failed: {e}"),
            ReplayError::Refused(m) => write!(f, "kernel runner refused the script: {m}"),
            ReplayError::Child(m) => write!(f, "kernel runner child failed: {m}"),
            ReplayError::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<std::io::Error> for ReplayError {
    fn from(e: std::io::Error) -> Self {
        ReplayError::Setup(e)
    }
}

fn errno_of(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

fn last_errno() -> Errno {
    Errno::from_raw(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// The [`Target`] that issues real syscalls on the calling process. Only ever used inside the child that
/// [`replay_kernel_in`] forks (its calls change the calling process's address space).
pub struct KernelTarget {
    dir: PathBuf,
    dir_fd: OwnedFd,
    /// (NAME, open file) in creation order.
    files: Vec<(String, OwnedFd)>,
    arena: Arena,
    /// Where a refusal message goes before the process exits.
    out: OwnedFd,
    /// The buffer `/proc/self/maps` is read into, allocated once at the start: near `max_map_count` a new
    /// allocation could need a VMA the process may not have.
    maps_buf: Vec<u8>,
    /// The pages outside the arena that the script's own calls mapped (module docs, "Guard").
    script_pages: Ranges,
    /// A page of the runner's own whose `MADV_FREE` drains this CPU's page batches (module docs, "smaps and
    /// PROCMAP_QUERY").
    scratch: u64,
}

/// A set of page ranges, kept as sorted, disjoint, non-adjacent `[start, end)` pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    /// Adds `[start, end)`.
    fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        // Absorb every range that overlaps or touches [s, e).
        self.0.retain(|&(a, b)| {
            if b < s || a > e {
                true
            } else {
                s = s.min(a);
                e = e.max(b);
                false
            }
        });
        let at = self.0.partition_point(|&(a, _)| a < s);
        self.0.insert(at, (s, e));
    }

    /// Removes `[start, end)`.
    fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut out = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b <= start || a >= end {
                out.push((a, b));
                continue;
            }
            if a < start {
                out.push((a, start));
            }
            if b > end {
                out.push((end, b));
            }
        }
        self.0 = out;
    }

    /// Whether `[start, end)` lies entirely in the set (an empty range does).
    fn covers(&self, start: u64, end: u64) -> bool {
        start >= end || self.0.iter().any(|&(a, b)| a <= start && end <= b)
    }
}

/// `PAGE_ALIGN(len)` with the kernel's wrapping arithmetic.
fn page_align(len: u64) -> u64 {
    len.wrapping_add(PAGE - 1) & !(PAGE - 1)
}

impl KernelTarget {
    fn file_fd(&self, name: &str) -> Option<&OwnedFd> {
        self.files.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    /// Stops the run: writes `msg` to the pipe and exits the process with [`EXIT_REFUSED`].
    fn refuse(&self, msg: String) -> ! {
        write_all(&self.out, msg.as_bytes());
        // SAFETY: _exit ends the process at once; nothing of this process is needed afterwards.
        unsafe { libc::_exit(EXIT_REFUSED) }
    }

    /// Whether the part `[start, end)` of the VMA `l` is the runner's: `l` lies outside the arena (and is a
    /// VMA: not `[vsyscall]`) and the script's own calls did not map all of that part.
    fn is_own(arena: Arena, script_pages: &Ranges, start: u64, end: u64, l: &vmspace_proc::MapsLine) -> bool {
        if is_vsyscall(l) || arena.overlaps(l.start, l.end) {
            return false;
        }
        let (s, e) = (start.max(l.start), end.min(l.end));
        s < e && !script_pages.covers(s, e)
    }

    /// Stops the run for a call on `[start, end)` that reaches the runner's mapping `hit`, if any.
    fn refuse_hit(&self, what: &str, start: u64, end: u64, hit: Option<String>) {
        if let Some(l) = hit {
            self.refuse(format!(
                "{what} {start:#x}..{end:#x} reaches outside the arena into the runner's own mapping {l}"
            ));
        }
    }

    /// The page range a bounded [`Self::guard`] (mmap, munmap, mremap) checks, or `None` when it leaves the
    /// range to the kernel (empty, unaligned, wrapping or past TASK_SIZE: refused before anything changes).
    fn guarded_range(addr: u64, len: u64) -> Option<(u64, u64)> {
        if len == 0 || !addr.is_multiple_of(PAGE) {
            return None;
        }
        let end = addr.checked_add(len).and_then(|e| e.checked_next_multiple_of(PAGE))?;
        (end <= TASK_SIZE).then_some((addr, end))
    }

    /// The guard for calls that act on every VMA of their page range (module docs, "Guard"): refuses when
    /// `[addr, addr + len)` overlaps a mapping of the runner. `bounded`: the kernel refuses ranges past
    /// TASK_SIZE before acting (mmap, munmap, mremap), so those are left to it. Reads the maps without
    /// collecting them: near `max_map_count` an allocation that needs a VMA of its own would fail.
    fn guard(&mut self, what: &str, addr: u64, len: u64, bounded: bool) {
        if len == 0 || !addr.is_multiple_of(PAGE) {
            return;
        }
        let Some(end) = addr.checked_add(len).and_then(|e| e.checked_next_multiple_of(PAGE)) else {
            return;
        };
        debug_assert!(!bounded || end > TASK_SIZE || Self::guarded_range(addr, len) == Some((addr, end)));
        if (bounded && end > TASK_SIZE) || (addr >= self.arena.base && end <= self.arena.end()) {
            return;
        }
        let (arena, pages) = (self.arena, std::mem::take(&mut self.script_pages));
        let hit = read_maps(&mut self.maps_buf)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse::<vmspace_proc::MapsLine>().ok())
            .find(|l| l.start < end && l.end > addr && Self::is_own(arena, &pages, addr, end, l))
            .map(|l| l.to_string());
        self.script_pages = pages;
        self.refuse_hit(what, addr, end, hit);
    }

    /// The guard for calls that walk the VMAs of `[start, end)` from the one containing `start` and stop at
    /// the first hole (`mm/mlock.c: apply_vma_lock_flags`, `mm/mprotect.c: do_mprotect_pkey`, `mm/mseal.c`):
    /// a call whose start lies in a hole changes nothing, so only the contiguous run of VMAs from `start` is
    /// checked. `from_first`: the walk starts at the first VMA that intersects the range instead, all of
    /// which the call may change (`PROT_GROWSDOWN` moves mprotect's start to that VMA's start). `start` and
    /// `end` are the page range the kernel computes; TASK_SIZE bounds none of these calls.
    fn guard_walk(&mut self, what: &str, start: u64, end: u64, from_first: bool) {
        if start >= end || (start >= self.arena.base && end <= self.arena.end() && !from_first) {
            return;
        }
        let (arena, pages) = (self.arena, std::mem::take(&mut self.script_pages));
        let mut hit = None;
        {
            let text = read_maps(&mut self.maps_buf).unwrap_or_default();
            let vmas = text
                .lines()
                .filter_map(|l| l.parse::<vmspace_proc::MapsLine>().ok())
                .filter(|l| !is_vsyscall(l));
            // The walk: from the first VMA (containing the start, or meeting the range) while contiguous.
            let mut reach: Option<u64> = None;
            for l in vmas {
                let from = match reach {
                    None if from_first && l.end > start && l.start < end => l.start,
                    None if !from_first && l.start <= start && start < l.end => start,
                    None => continue,
                    Some(r) if l.start == r && l.start < end => start,
                    Some(_) => break,
                };
                if Self::is_own(arena, &pages, from, end, &l) {
                    hit = Some(l.to_string());
                    break;
                }
                reach = Some(l.end);
            }
        }
        self.script_pages = pages;
        self.refuse_hit(what, start, end, hit);
    }

    /// After a call that may have unmapped part of `[start, end)`: keeps of the script's pages there only
    /// those still mapped. Streams the maps (no allocation per line: see [`Self::guard`]); the kept pieces are
    /// parts of script pages, as few as the script's own VMAs there.
    fn recheck(&mut self, start: u64, end: u64) {
        let mut pages = std::mem::take(&mut self.script_pages);
        let mut keep = Ranges::default();
        if pages.0.iter().any(|&(a, b)| a < end && b > start) {
            for l in read_maps(&mut self.maps_buf)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.parse::<vmspace_proc::MapsLine>().ok())
                .filter(|l| l.start < end && l.end > start)
            {
                for &(a, b) in pages.0.iter().filter(|&&(a, b)| a < l.end && b > l.start) {
                    keep.add(a.max(l.start).max(start), b.min(l.end).min(end));
                }
            }
            pages.remove(start, end);
            for &(a, b) in &keep.0 {
                pages.add(a, b);
            }
        }
        self.script_pages = pages;
    }

    /// The page range of mlock/munlock (`mm/mlock.c: do_mlock`, `sys_munlock`): the start rounded down, the
    /// length plus the start's offset rounded up, both with the kernel's wrapping arithmetic; `None` when the
    /// kernel refuses or does nothing (empty or wrapping range).
    fn lock_range(addr: u64, len: u64) -> Option<(u64, u64)> {
        let len = len.wrapping_add(addr & (PAGE - 1)).wrapping_add(PAGE - 1) & !(PAGE - 1);
        let start = addr & !(PAGE - 1);
        start.checked_add(len).filter(|_| len > 0).map(|end| (start, end))
    }

    /// The page range of mseal and pkey_mprotect: the start must be aligned (else EINVAL), the length is
    /// rounded up (`PAGE_ALIGN`, wrapping); `None` when the kernel refuses or does nothing.
    fn aligned_range(addr: u64, len: u64) -> Option<(u64, u64)> {
        let len = len.wrapping_add(PAGE - 1) & !(PAGE - 1);
        if !addr.is_multiple_of(PAGE) || len == 0 {
            return None;
        }
        addr.checked_add(len).map(|end| (addr, end))
    }

    /// The guard of mlock, mlock2 and munlock: a walk from the start over [`Self::lock_range`].
    fn guard_lock(&mut self, what: &str, addr: u64, len: u64) {
        if let Some((start, end)) = Self::lock_range(addr, len) {
            self.guard_walk(what, start, end, false);
        }
    }

    /// mprotect (`key` `None`) or pkey_mprotect, guarded as a walk from the start (`mm/mprotect.c:
    /// do_mprotect_pkey` serves both).
    fn protect(&mut self, addr: u64, len: u64, prot: Prot, key: Option<i32>) -> Result<u64, Errno> {
        let what = if key.is_some() { "pkey_mprotect" } else { "mprotect" };
        if let Some((start, end)) = Self::aligned_range(addr, len) {
            self.guard_walk(what, start, end, prot.contains(Prot::GROWSDOWN));
        }
        // SAFETY: the guard refused any walk that reaches the runner's own memory; only script mappings change.
        let r = unsafe {
            match key {
                None => libc::syscall(libc::SYS_mprotect, addr as usize, len as usize, prot.bits() as usize),
                Some(k) => libc::syscall(
                    libc::SYS_pkey_mprotect,
                    addr as usize,
                    len as usize,
                    prot.bits() as usize,
                    libc::c_long::from(k),
                ),
            }
        };
        syscall_result(r).map(|_| 0)
    }

    /// The walk of the memory accesses (`touch`, `fill`, `check`; module docs, "Memory accesses"): calls
    /// `op(from, to)` for each page of `[addr, addr + len)` (the end saturating at 2^64) in address order with
    /// the part of the range in that page, and stops at the first page whose access faults:
    /// [`CallError::Fault`] with that page. A write is guarded first (it must not reach the runner's own
    /// memory). The fault must be the access's own (its `si_addr` in that page): anything else is a runner bug
    /// and stops the run.
    fn access(
        &mut self,
        what: &str,
        addr: u64,
        len: u64,
        write: bool,
        mut op: impl FnMut(u64, u64) -> Result<(), uaccess::Fault>,
    ) -> Result<(), CallError> {
        if len == 0 {
            return Ok(());
        }
        let first = addr & !(PAGE - 1);
        let end = addr.saturating_add(len);
        // Nothing is mapped from TASK_SIZE on (the walk faults there at the latest), so the guard checks the
        // range up to it: a range running to 2^64 would be too long for its page arithmetic.
        let guarded_end = end.min(TASK_SIZE);
        if write && first < guarded_end {
            self.guard(what, first, guarded_end - first, false);
        }
        let mut page = first;
        while page < end {
            if page >= TASK_SIZE {
                // Nothing user-mode can access lies at or above TASK_SIZE (the vsyscall page is execute-only):
                // the CPU faults there. Answered without the access, which a range ending at 2^64 could not
                // make: its last byte, 2^64 - 1, is past every u64 end (the format's ranges end at 2^64).
                return Err(CallError::Fault(page));
            }
            let next = page.saturating_add(PAGE);
            let growth = self.script_growth_end(page);
            if let Err(f) = op(page.max(addr), next.min(end)) {
                if !f.is_in_page(page) {
                    self.refuse(format!("{what} of page {page:#x} faulted elsewhere: {f:?}"));
                }
                // The fault grows a growsdown VMA before it checks the access (`do_user_addr_fault`:
                // `expand_stack`, then `access_error`), so a refused access (a write to a `---` stack) can
                // still have grown the script's VMA down to this page: then the pages are the script's.
                if let Some(s) = growth
                    && is_mapped(page)
                {
                    self.script_pages.add(page, s);
                }
                return Err(CallError::Fault(page));
            }
            if let Some(s) = growth {
                // The access grew the script's VMA down to this page.
                self.script_pages.add(page, s);
            }
            page = next;
        }
        Ok(())
    }

    /// Where a growth of a script VMA by an access to `page` would end (module docs, "Guard"): a fault on an
    /// unmapped page below a growsdown VMA grows the VMA down to that page, so when `page` lies outside the
    /// arena, is not mapped, and the next VMA above it is the script's (it overlaps the arena, or its lowest
    /// page is a script page), the pages `[page, that VMA's start)` become the script's if the access
    /// succeeds. `None` otherwise (inside the arena, already mapped, or below a runner's VMA: a growth of the
    /// runner's own stack stays the runner's). Costs one `mincore` per page outside the arena and the script's
    /// pages, and a streamed read of the maps (no allocation) per unmapped one.
    fn script_growth_end(&mut self, page: u64) -> Option<u64> {
        if self.arena.contains(page) || page >= TASK_SIZE || self.script_pages.covers(page, page + PAGE) {
            return None;
        }
        if is_mapped(page) {
            return None;
        }
        let (arena, pages) = (self.arena, std::mem::take(&mut self.script_pages));
        let above = read_maps(&mut self.maps_buf)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse::<vmspace_proc::MapsLine>().ok())
            .find(|l| l.end > page && !is_vsyscall(l))
            .filter(|l| {
                l.start > page && (arena.overlaps(l.start, l.end) || pages.covers(l.start, l.start + PAGE))
            })
            .map(|l| l.start);
        self.script_pages = pages;
        above
    }

    /// The descriptor a script's `fd=`/`ftruncate` NAME passes: the file's if this target holds it, else
    /// [`CLOSED_FD`].
    fn fd_of(&self, name: &str) -> libc::c_long {
        self.file_fd(name).map_or(libc::c_long::from(CLOSED_FD), |f| libc::c_long::from(f.as_raw_fd()))
    }
}

/// Whether a VMA covers `page` (page-aligned): `mincore` answers ENOMEM where nothing is mapped, whatever the
/// protection of what is.
fn is_mapped(page: u64) -> bool {
    let mut vec = [0u8; 1];
    // SAFETY: mincore only reports on `[page, page + PAGE)` and writes one byte per page into `vec`, which
    // holds one.
    unsafe { libc::mincore(page as *mut c_void, PAGE as usize, vec.as_mut_ptr()) == 0 }
}

/// The `[vsyscall]` line: x86-64's gate page, which `/proc/PID/maps` shows but which is not a VMA.
fn is_vsyscall(l: &vmspace_proc::MapsLine) -> bool {
    matches!(&l.name, Some(vmspace_proc::MapsName::Special(n)) if n == "[vsyscall]")
}

/// A descriptor number that is open in no process: `fs/file.c` caps every descriptor table at
/// `sysctl_nr_open_max` = `min(INT_MAX, ...) & -BITS_PER_LONG` = 2,147,483,584 on x86-64, below `i32::MAX`.
/// The runner passes it for a script NAME it holds no file for (EBADF), and checks at start that it is
/// indeed not open.
pub const CLOSED_FD: i32 = i32::MAX;

/// The advice the runner never gives the live kernel, with why: as root they act on the machine's physical
/// pages (`mm/madvise.c: madvise_inject_error`), not on the address space under test.
fn never_run(advice: Advice) -> Option<&'static str> {
    if advice == Advice::HWPOISON || advice == Advice::SOFT_OFFLINE {
        Some("it poisons or offlines the machine's physical pages (mm/madvise.c: madvise_inject_error)")
    } else {
        None
    }
}

/// The first line of `script` the kernel runner would refuse without running anything (MADV_HWPOISON,
/// MADV_SOFT_OFFLINE, by name or number), as the refusal message.
pub fn refused_before_running(script: &Script) -> Option<String> {
    script.lines.iter().find_map(|l| match &l.op {
        Op::Madvise { advice, .. } => never_run(*advice).map(|why| {
            format!(
                "line {}: `{}` is never run on the live kernel: {why}; nothing of the script was run",
                l.line, l.op
            )
        }),
        _ => None,
    })
}

/// Turns a raw `libc::syscall` return into the call's result (`-1` with `errno` is the error).
fn syscall_result(r: libc::c_long) -> Result<u64, Errno> {
    if r == -1 { Err(last_errno()) } else { Ok(r as u64) }
}

fn write_all(fd: &OwnedFd, mut buf: &[u8]) {
    while !buf.is_empty() {
        match rustix::io::write(fd, buf) {
            Ok(0) => return,
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
    }
}

impl KernelTarget {
    fn file(&mut self, name: &str, size: u64) -> Result<u64, Errno> {
        let fd = rustix::fs::openat(
            &self.dir_fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(errno_of)?;
        // The raw call, the size passed as the `off_t` it is (from 2^63 on negative: EINVAL). A failure
        // closes the file again: the NAME then stands for a descriptor that is not open.
        // SAFETY: ftruncate changes only the size of our own file.
        syscall_result(unsafe { libc::syscall(libc::SYS_ftruncate, fd.as_raw_fd(), size as i64) })?;
        self.files.push((name.to_string(), fd));
        Ok(0)
    }

    fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
        file: Option<(&Fd, u64)>,
    ) -> Result<u64, Errno> {
        if flags.intersects(MapFlags::FIXED | MapFlags::FIXED_NOREPLACE) {
            self.guard("mmap", addr, len, true);
        }
        let (fd, off) = match file {
            None => (-1, 0),
            Some((Fd::MinusOne, off)) => (-1, off),
            Some((Fd::Name(n), off)) => (self.fd_of(n), off),
        };
        // The raw six-argument call, every value as the script gives it (glibc's mmap64 would pass the same:
        // on x86-64 it only forwards).
        // SAFETY: the mapping lands in the arena or in free space (the guard refused any fixed mapping over the
        // runner's own memory); no Rust reference points into the affected range.
        let r = syscall_result(unsafe {
            libc::syscall(
                libc::SYS_mmap,
                addr as usize,
                len as usize,
                prot.bits() as usize,
                flags.bits() as usize,
                fd,
                off as usize,
            )
        });
        match r {
            Ok(a) => self.script_pages.add(a, a.saturating_add(page_align(len))),
            // A MAP_FIXED that fails late leaves a gap where the old mapping was (`mm/vma.h:
            // vms_abort_munmap_vmas`): keep only what is still mapped.
            Err(_) if flags.contains(MapFlags::FIXED) => {
                self.recheck(addr, addr.saturating_add(page_align(len)))
            }
            Err(_) => {}
        }
        r
    }

    fn munmap(&mut self, addr: u64, len: u64) -> Result<u64, Errno> {
        self.guard("munmap", addr, len, true);
        // SAFETY: the guard refused ranges over the runner's own memory; only script mappings are affected.
        let r = syscall_result(unsafe { libc::syscall(libc::SYS_munmap, addr as usize, len as usize) });
        // A failed munmap unmaps nothing (`mm/vma.c: do_vmi_align_munmap` reattaches what it gathered).
        if r.is_ok() {
            self.script_pages.remove(addr, addr.saturating_add(page_align(len)));
        }
        r.map(|_| 0)
    }

    fn mremap(
        &mut self,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        self.guard("mremap", addr, old_len, true);
        if flags.contains(MremapFlags::FIXED) {
            self.guard("mremap destination", new_addr, new_len, true);
        }
        // The raw syscall with all five arguments: rustix's four-argument `mremap` leaves new_address
        // undefined, and the kernel reads it for MREMAP_DONTUNMAP without MREMAP_FIXED (as a hint).
        // SAFETY: source and (fixed) destination passed the guard; a move without `fixed` goes to free space
        // the kernel picks; no Rust reference points into the affected ranges.
        let r = syscall_result(unsafe {
            libc::syscall(
                libc::SYS_mremap,
                addr as usize,
                old_len as usize,
                new_len as usize,
                flags.bits() as usize,
                new_addr as usize,
            )
        });
        let (old_end, new_size) = (addr.saturating_add(page_align(old_len)), page_align(new_len));
        match r {
            Ok(n) if n == addr => {
                // In place: shrunk (the tail is gone) or grown (the new tail is the script's).
                self.script_pages.remove(addr.saturating_add(new_size), old_end);
                self.script_pages.add(addr, addr.saturating_add(new_size));
            }
            Ok(n) => {
                if !flags.contains(MremapFlags::DONTUNMAP) {
                    self.script_pages.remove(addr, old_end);
                }
                self.script_pages.add(n, n.saturating_add(new_size));
            }
            // A failed MREMAP_FIXED may have unmapped its destination and moved part of a multi-VMA source
            // (`mm/mremap.c: remap_move`): of the source keep what is still mapped; whatever is mapped in a
            // destination the guard checked (it held nothing of the runner's) was moved there by this call.
            Err(_) if flags.contains(MremapFlags::FIXED) => {
                self.recheck(addr, old_end);
                if let Some((s, e)) = Self::guarded_range(new_addr, new_len) {
                    self.script_pages.add(s, e);
                    self.recheck(s, e);
                }
            }
            Err(_) => {}
        }
        r
    }

    fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<u64, Errno> {
        if let Some(why) = never_run(advice) {
            // `replay_kernel_observed` refuses such scripts before forking; this is the second line.
            self.refuse(format!(
                "madvise {addr:#x} {len:#x} {advice:?} is never run on the live kernel: {why}"
            ));
        }
        // madvise walks every VMA of the range, skipping holes, and TASK_SIZE does not bound it.
        self.guard("madvise", addr, len, false);
        // The raw call: the advice may be any int (rustix's `Advice` enum names only the values it knows).
        // SAFETY: the guard refused ranges over the runner's own memory (dropping pages there would lose
        // data); script mappings hold nothing the runner reads.
        let r = unsafe { libc::madvise(addr as *mut c_void, len as usize, advice.raw()) };
        if r == -1 { Err(last_errno()) } else { Ok(0) }
    }

    fn name(&mut self, addr: u64, len: u64, name: Option<&str>) -> Result<u64, Errno> {
        let cname = match name {
            Some(n) => Some(std::ffi::CString::new(n).map_err(|_| Errno::EINVAL)?),
            None => None,
        };
        let ptr = cname.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: prctl reads at most the NUL-terminated name (or nothing for NULL); it changes VMA names only.
        let r = unsafe {
            libc::prctl(libc::PR_SET_VMA, libc::PR_SET_VMA_ANON_NAME as libc::c_ulong, addr, len, ptr)
        };
        if r == 0 { Ok(0) } else { Err(last_errno()) }
    }

    fn brk(&mut self, addr: u64) -> Result<u64, Errno> {
        if addr != 0 && !self.arena.contains(addr) {
            // SAFETY: brk(0) only queries the current break.
            let cur = unsafe { libc::syscall(libc::SYS_brk, 0usize) } as u64;
            if addr < cur {
                self.refuse(format!("brk {addr:#x} would shrink the runner's own heap (break {cur:#x})"));
            }
        }
        // SAFETY: the request is 0, inside the arena (below the heap: the kernel refuses it) or at/above the
        // current break (growth only); the runner's heap is never shrunk.
        let r = unsafe { libc::syscall(libc::SYS_brk, addr as usize) };
        Ok(r as u64)
    }

    fn fork(&mut self) -> Result<u64, Errno> {
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: fork in the runner child. The new process continues the script; this one only waits and
        // exits (async-signal-safe calls only).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(last_errno());
        }
        if pid == 0 {
            // The new process continues the script; it must not outlive the one that waits for it.
            arm_death_signal(parent);
            return Ok(0);
        }
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child; `status` is a valid out-pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, 0) };
            if r == pid || (r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)) {
                break;
            }
        }
        let code =
            if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
        // SAFETY: the child carries on; this process has nothing left to do and writes nothing.
        unsafe { libc::_exit(code) }
    }
}

impl Target for KernelTarget {
    /// The op as the raw system call with its values (module docs, "Calls"), guarded (module docs, "Guard").
    fn apply(&mut self, op: &Op) -> Outcome {
        Ok(match *op {
            Op::File { ref name, size } => self.file(name, size)?,
            Op::Ftruncate { ref name, size } => {
                let fd = self.fd_of(name);
                // SAFETY: changes only the size of a script file (or fails with EBADF for CLOSED_FD); pages of
                // its mappings beyond the new end are dropped, which the runner never reads.
                syscall_result(unsafe { libc::syscall(libc::SYS_ftruncate, fd, size as i64) })?
            }
            Op::Mmap { addr, len, prot, flags, ref file } => {
                self.mmap(addr, len, prot, flags, file.as_ref().map(|(fd, off)| (fd, *off)))?
            }
            Op::Munmap { addr, len } => self.munmap(addr, len)?,
            Op::Mprotect { addr, len, prot } => self.protect(addr, len, prot, None)?,
            Op::PkeyMprotect { addr, len, prot, key } => self.protect(addr, len, prot, Some(key))?,
            Op::Mremap { addr, old_len, new_len, flags, new_addr } => {
                self.mremap(addr, old_len, new_len, flags, new_addr.unwrap_or(0))?
            }
            Op::Madvise { addr, len, advice } => self.madvise(addr, len, advice)?,
            Op::Mlock { addr, len } => {
                self.guard_lock("mlock", addr, len);
                // SAFETY: locks (and populates) script mappings only: the guard refused walks into the
                // runner's own.
                syscall_result(unsafe { libc::syscall(libc::SYS_mlock, addr as usize, len as usize) })?
            }
            Op::Mlock2 { addr, len, flags } => {
                self.guard_lock("mlock2", addr, len);
                // SAFETY: as for mlock.
                syscall_result(unsafe {
                    libc::syscall(libc::SYS_mlock2, addr as usize, len as usize, flags as usize)
                })?
            }
            Op::Munlock { addr, len } => {
                self.guard_lock("munlock", addr, len);
                // SAFETY: unlocks script mappings only (guarded as mlock).
                syscall_result(unsafe { libc::syscall(libc::SYS_munlock, addr as usize, len as usize) })?
            }
            Op::Mlockall { flags } => {
                // Run as given (module docs, "mlockall"): it locks the runner's own memory too, which changes
                // neither its contents nor its layout.
                // SAFETY: locking and populating memory never changes what the runner reads.
                syscall_result(unsafe { libc::syscall(libc::SYS_mlockall, flags as usize) })?
            }
            Op::Munlockall => {
                // SAFETY: unlocking memory never changes its contents.
                syscall_result(unsafe { libc::syscall(libc::SYS_munlockall) })?
            }
            Op::Mseal { addr, len, flags } => {
                if let Some((start, end)) = Self::aligned_range(addr, len) {
                    self.guard_walk("mseal", start, end, false);
                }
                // SAFETY: seals script mappings only (a sealed runner mapping could no longer be freed:
                // guarded).
                syscall_result(unsafe {
                    libc::syscall(libc::SYS_mseal, addr as usize, len as usize, flags as usize)
                })?
            }
            Op::PkeyAlloc { flags, rights } => {
                // SAFETY: allocates a key and sets this thread's rights for it; no memory carries a new key
                // until a (guarded) pkey_mprotect of script mappings gives it one.
                syscall_result(unsafe {
                    libc::syscall(libc::SYS_pkey_alloc, flags as usize, rights as usize)
                })?
            }
            Op::PkeyFree { key } => {
                // SAFETY: frees a key of this process; memory keeps its key bits, as on any pkey_free.
                syscall_result(unsafe { libc::syscall(libc::SYS_pkey_free, libc::c_long::from(key)) })?
            }
            Op::Msync { addr, len, flags } => {
                // SAFETY: not guarded: msync writes dirty file pages back (or does nothing) and changes no
                // mapping or content.
                syscall_result(unsafe {
                    libc::syscall(libc::SYS_msync, addr as usize, len as usize, flags as usize)
                })?
            }
            Op::Touch { addr, len, write } => {
                // One access per page, to the first byte of the range in it.
                self.access("touch", addr, len, write, |from, _| {
                    if write {
                        // SAFETY: the guard (in `access`) refused ranges that reach the runner's own memory;
                        // the write keeps the byte's value.
                        unsafe { uaccess::write_keep(from) }
                    } else {
                        uaccess::read(&mut [0u8], from)
                    }
                })?;
                0
            }
            Op::Fill { addr, len, byte } => {
                self.access("fill", addr, len, true, |from, to| {
                    // SAFETY: the guard (in `access`) refused ranges that reach the runner's own memory:
                    // `[from, to)` holds script mappings or nothing.
                    unsafe { uaccess::fill(from, (to - from) as usize, byte) }
                })?;
                0
            }
            Op::Check { addr, len } => {
                let mut h = ContentHash::new();
                let mut buf = [0u8; PAGE as usize];
                self.access("check", addr, len, false, |from, to| {
                    let bytes = &mut buf[..(to - from) as usize];
                    uaccess::read(bytes, from)?;
                    h.update(bytes);
                    Ok(())
                })?;
                h.value()
            }
            Op::Name { addr, len, ref name } => self.name(addr, len, name.as_deref())?,
            Op::Brk { addr } => self.brk(addr)?,
            Op::Fork => self.fork()?,
            Op::Maps | Op::Smaps { .. } | Op::Query { .. } => Err(Errno::ENOSYS)?,
        })
    }

    /// The maps lines that overlap the arena (the driver keeps only those): a small string even when the
    /// process holds 65,000 filler VMAs.
    fn maps(&mut self) -> String {
        let arena = self.arena;
        let text = read_maps(&mut self.maps_buf).unwrap_or_default();
        let mut out = String::new();
        for l in text.lines() {
            if let Ok(m) = l.parse::<vmspace_proc::MapsLine>()
                && arena.overlaps(m.start, m.end)
            {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The records that overlap the arena, streamed through the maps buffer (module docs, "smaps and
    /// PROCMAP_QUERY"), after draining this CPU's page batches.
    fn smaps(&mut self) -> String {
        let node0: libc::c_ulong = 1;
        // SAFETY: migrate_pages of this process from node 0 to node 0 moves nothing; the masks are one word of
        // the 64 bits passed.
        let r = unsafe { libc::syscall(libc::SYS_migrate_pages, 0, 64usize, &node0, &node0) };
        if r < 0 {
            // SAFETY: the runner's own scratch page: MADV_FREE changes no mapping and no byte it reads.
            unsafe { libc::madvise(self.scratch as *mut c_void, PAGE as usize, libc::MADV_FREE) };
        }
        let arena = self.arena;
        let Ok(fd) = rustix::fs::open("/proc/self/smaps", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        else {
            return String::new();
        };
        let mut out = String::new();
        let mut partial: Vec<u8> = Vec::new();
        let mut keep = false;
        let mut take = |line: &[u8], out: &mut String| {
            let Ok(l) = std::str::from_utf8(line) else { return };
            if let Ok(m) = l.parse::<vmspace_proc::MapsLine>() {
                keep = arena.overlaps(m.start, m.end);
            }
            if keep {
                out.push_str(l);
                out.push('\n');
            }
        };
        loop {
            let n = match rustix::io::read(&fd, &mut self.maps_buf[..]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            };
            let mut chunk = &self.maps_buf[..n];
            while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
                if partial.is_empty() {
                    take(&chunk[..i], &mut out);
                } else {
                    partial.extend_from_slice(&chunk[..i]);
                    take(&partial, &mut out);
                    partial.clear();
                }
                chunk = &chunk[i + 1..];
            }
            partial.extend_from_slice(chunk);
        }
        out
    }

    fn query(&mut self, req: &QueryRequest) -> Result<QueryAnswer, Errno> {
        let fd = rustix::fs::open("/proc/self/maps", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(errno_of)?;
        // The caller's struct: `size` bytes (the kernel reads no more than a page), zero past the fields.
        let len = usize::try_from(req.size).unwrap_or(usize::MAX).clamp(pq::LEN, PAGE as usize + 1);
        let mut q = vec![0u8; len];
        let cap = req.vma_name_size;
        let mut name_buf = vec![0u8; (cap as usize).min(PAGE as usize) + 1];
        put_u64(&mut q, pq::SIZE, req.size);
        put_u64(&mut q, pq::FLAGS, req.flags);
        put_u64(&mut q, pq::ADDR, req.addr);
        q[pq::NAME_SIZE..pq::NAME_SIZE + 4].copy_from_slice(&cap.to_le_bytes());
        if req.vma_name_addr != 0 {
            put_u64(&mut q, pq::NAME_ADDR, name_buf.as_mut_ptr() as u64);
        }
        // SAFETY: PROCMAP_QUERY reads and writes at most min(size, 104) bytes of `q` (which has at least 104;
        // a larger size up to a page is checked for zeros, and `q` has that many) and writes at most
        // min(cap, PATH_MAX) bytes of the name buffer (which has that many and one more).
        let r =
            unsafe { libc::ioctl(fd.as_raw_fd(), crate::procmap_query::PROCMAP_QUERY as _, q.as_mut_ptr()) };
        if r != 0 {
            return Err(last_errno());
        }
        // The kernel reads `vma_name_addr` (and so fills the buffer and returns `vma_name_size`) only when
        // the struct's size covers it: a shorter struct leaves the caller's own values in those bytes.
        let name_size = get_u32(&q, pq::NAME_SIZE) as usize;
        let name_seen = req.size >= (pq::NAME_ADDR + 8) as u64;
        let name = (name_seen && req.vma_name_addr != 0 && name_size > 0).then(|| {
            let n = &name_buf[..name_size.min(name_buf.len())];
            String::from_utf8_lossy(n.strip_suffix(&[0]).unwrap_or(n)).into_owned()
        });
        Ok(QueryAnswer {
            vma_start: get_u64(&q, pq::VMA_START),
            vma_end: get_u64(&q, pq::VMA_END),
            vma_flags: get_u64(&q, pq::VMA_FLAGS),
            vma_page_size: get_u64(&q, pq::PAGE_SIZE),
            vma_offset: get_u64(&q, pq::OFFSET),
            inode: get_u64(&q, pq::INODE),
            dev_major: get_u32(&q, pq::DEV_MAJOR),
            dev_minor: get_u32(&q, pq::DEV_MINOR),
            name,
        })
    }

    fn file_path(&self, name: &str) -> Option<String> {
        self.file_fd(name).map(|_| self.dir.join(name).to_string_lossy().into_owned())
    }

    fn file_id(&self, name: &str) -> Option<(u32, u32, u64)> {
        let st = rustix::fs::fstat(self.file_fd(name)?).ok()?;
        Some((rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev), st.st_ino))
    }
}

/// Runs `script` on the live kernel in a child process with the default arena.
pub fn replay_kernel(script: &Script) -> Result<Output, ReplayError> {
    replay_kernel_in(script, Arena::default())
}

/// Runs `script` on the live kernel in a child process (see the module documentation) and returns its
/// canonical output.
pub fn replay_kernel_in(script: &Script, arena: Arena) -> Result<Output, ReplayError> {
    replay_kernel_with(script, ReplayOptions { arena, map_count_headroom: None })
}

/// [`replay_kernel_in`] with every option.
pub fn replay_kernel_with(script: &Script, opts: ReplayOptions) -> Result<Output, ReplayError> {
    replay_kernel_observed(script, opts, &mut |_| {})
}

/// How often the parent looks at the runner's progress while it waits for the output.
const PROGRESS_EVERY_MS: i32 = 250;

/// [`replay_kernel_with`], calling `on_progress(calls)` about every `PROGRESS_EVERY_MS` (250 ms) with the number of
/// the script's calls the runner has made so far (a word of memory shared with the runner child; calls made by
/// processes the script forked count too).
pub fn replay_kernel_observed(
    script: &Script,
    opts: ReplayOptions,
    on_progress: &mut dyn FnMut(u64),
) -> Result<Output, ReplayError> {
    if let Some(msg) = refused_before_running(script) {
        return Err(ReplayError::Refused(msg));
    }
    let calls = crate::child::SharedSlots::new(1).map_err(std::io::Error::from)?;
    let tmp = tempfile::Builder::new().prefix("vmspace-replay").tempdir()?;
    // The path maps lines will show: resolve symlinks so it matches the kernel's d_path.
    let dir = std::fs::canonicalize(tmp.path())?;
    let janitor = Janitor::start(&dir)?;
    let dir_fd = rustix::fs::open(&dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(std::io::Error::from)?;
    let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)?;

    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: fork; the child follows the rules of the module documentation (syscalls, allocation through
    // glibc's fork-safe malloc, no stdio/env/shared locks) and always ends with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(ReplayError::Setup(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        arm_death_signal(parent);
        janitor.forget_in_child();
        drop(rd);
        child_main(script, opts, dir, dir_fd, wr, calls.get(0));
    }
    drop(wr);
    drop(dir_fd);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    let mut read_error = None;
    loop {
        let mut fds = [rustix::event::PollFd::new(&rd, rustix::event::PollFlags::IN)];
        let timeout =
            rustix::event::Timespec { tv_sec: 0, tv_nsec: i64::from(PROGRESS_EVERY_MS) * 1_000_000 };
        let ready = match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(n) => n > 0,
            Err(rustix::io::Errno::INTR) => false,
            Err(e) => {
                read_error = Some(ReplayError::Setup(e.into()));
                break;
            }
        };
        if crate::child::interrupted() {
            // SAFETY: our own, not yet reaped child: the pid cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            read_error = Some(ReplayError::Interrupted);
            break;
        }
        if !ready {
            // Relaxed: a count for display only; the output itself comes through the pipe.
            on_progress(calls.get(0).load(std::sync::atomic::Ordering::Relaxed));
            continue;
        }
        match rustix::io::read(&rd, &mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) if crate::child::interrupted() => {
                // SAFETY: our own, not yet reaped child: the pid cannot have been reused.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                read_error = Some(ReplayError::Interrupted);
                break;
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                // Still reap the child below; closing the pipe makes a blocked writer fail and exit.
                read_error = Some(ReplayError::Setup(e.into()));
                break;
            }
        }
    }
    drop(rd);
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(ReplayError::Setup(std::io::Error::last_os_error()));
        }
    }
    drop(tmp);
    drop(janitor);
    if let Some(e) = read_error {
        return Err(e);
    }
    if crate::child::interrupted() {
        // A terminal's Ctrl-C reaches the runner too (it has the default disposition): whatever it printed is
        // incomplete.
        return Err(ReplayError::Interrupted);
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if libc::WIFSIGNALED(status) {
        return Err(ReplayError::Child(format!("killed by signal {}", libc::WTERMSIG(status))));
    }
    match libc::WEXITSTATUS(status) {
        0 => Output::parse(&text).map_err(|e| ReplayError::Child(format!("unreadable output: {e}"))),
        EXIT_REFUSED => Err(ReplayError::Refused(text)),
        EXIT_PANIC => Err(ReplayError::Child(format!("panicked: {text}"))),
        c => Err(ReplayError::Child(format!("exit status {c}: {text}"))),
    }
}

/// In a freshly forked child: be SIGKILLed when the parent `parent` dies, exit at once if it already has, and
/// take the default SIGINT/SIGTERM dispositions back from the parent's handler (so a terminal's Ctrl-C, sent
/// to the whole process group, ends the child too).
fn arm_death_signal(parent: libc::pid_t) {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of the calling process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        // SAFETY: the parent died before the death signal was armed; end without touching its state.
        unsafe { libc::_exit(1) };
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: restoring the default disposition of a signal is always valid.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

/// The process that removes the temporary directory once the parent is gone (module docs, "Nothing outlives
/// the command"). Dropping it kills and reaps it: the parent then removes the directory itself.
struct Janitor {
    pid: libc::pid_t,
    /// The write end of the lifeline: end of file on the janitor's side when every copy is closed.
    lifeline: Option<OwnedFd>,
}

impl Janitor {
    fn start(dir: &std::path::Path) -> Result<Janitor, ReplayError> {
        let (rd, wr) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)?;
        // Allocated before the fork: the janitor then only makes system calls.
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|e| ReplayError::Setup(std::io::Error::other(e)))?;
        // SAFETY: fork; the janitor only makes system calls (signal, read, openat/unlinkat through
        // `remove_tree`) and ends with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(ReplayError::Setup(std::io::Error::last_os_error()));
        }
        if pid == 0 {
            drop(wr);
            for sig in [libc::SIGINT, libc::SIGTERM] {
                // SAFETY: ignoring a signal is always valid; the janitor must survive the Ctrl-C that ends the
                // parent so that it can clean up after it.
                unsafe { libc::signal(sig, libc::SIG_IGN) };
            }
            let mut b = [0u8; 1];
            // Blocks until every copy of the write end is closed: the parent has finished or died.
            while let Ok(n) = rustix::io::read(&rd, &mut b)
                && n > 0
            {}
            remove_tree(&path);
            // SAFETY: ends the janitor without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        drop(rd);
        Ok(Janitor { pid, lifeline: Some(wr) })
    }

    /// In the runner child: close this copy of the lifeline (the janitor waits for the parent only).
    fn forget_in_child(mut self) {
        self.lifeline = None;
        std::mem::forget(self);
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        // SAFETY: our own, not yet reaped child: the pid cannot have been reused.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let mut status = 0;
        // SAFETY: reaping our own child; `status` is a valid out-pointer.
        while unsafe { libc::waitpid(self.pid, &mut status, 0) } < 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        self.lifeline = None;
    }
}

/// Removes the directory `path` and the files in it (the runner makes no subdirectories), with system calls
/// only. Unlinking while reading the directory may skip names, so it reads again until the directory is gone
/// (a bounded number of times: a runner not yet dead could still be creating files).
fn remove_tree(path: &std::ffi::CStr) {
    for _ in 0..16 {
        let Ok(dir) =
            rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        else {
            return;
        };
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut names = rustix::fs::RawDir::new(&dir, &mut buf);
        while let Some(Ok(entry)) = names.next() {
            let name = entry.file_name();
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                let _ = rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty());
            }
        }
        if rustix::fs::unlinkat(rustix::fs::CWD, path, rustix::fs::AtFlags::REMOVEDIR).is_ok() {
            return;
        }
    }
}

/// The child: run, write, `_exit`. Never returns.
fn child_main(
    script: &Script,
    opts: ReplayOptions,
    dir: PathBuf,
    dir_fd: OwnedFd,
    out: OwnedFd,
    calls: &std::sync::atomic::AtomicU64,
) -> ! {
    let arena = opts.arena;
    // ftruncate past RLIMIT_FSIZE raises SIGXFSZ: the script's call gets EFBIG instead of killing the runner.
    // SAFETY: ignoring a signal is always valid; inherited by the processes a script forks.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    // The memory accesses' fault handler (`uaccess`): in this child only, inherited by the script's forks.
    if let Err(e) = crate::uaccess::install() {
        write_all(&out, format!("cannot install the fault handler: {e}").as_bytes());
        // SAFETY: ends the child at once, as a refusal.
        unsafe { libc::_exit(EXIT_REFUSED) };
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: F_GETFD only queries a descriptor number.
        if unsafe { libc::fcntl(CLOSED_FD, libc::F_GETFD) } != -1 || last_errno() != Errno::EBADF {
            write_all(
                &out,
                format!("descriptor {CLOSED_FD} is open: it cannot stand for undeclared files").as_bytes(),
            );
            // SAFETY: ends the child at once, as a refusal.
            unsafe { libc::_exit(EXIT_REFUSED) };
        }
        let max = max_map_count().unwrap_or(65530);
        let buf_len =
            if opts.map_count_headroom.is_some() { (max as usize + 1024) * MAPS_LINE_MAX } else { 1 << 20 };
        let scratch = match pin_and_scratch() {
            Ok(a) => a,
            Err(msg) => {
                write_all(&out, msg.as_bytes());
                // SAFETY: ends the child at once, as a refusal.
                unsafe { libc::_exit(EXIT_REFUSED) };
            }
        };
        let mut t = KernelTarget {
            dir,
            dir_fd,
            files: Vec::new(),
            arena,
            out,
            maps_buf: vec![0u8; buf_len],
            script_pages: Ranges::default(),
            scratch,
        };
        if let Some(h) = opts.map_count_headroom
            && let Err(msg) = fill_to_headroom(&mut t.maps_buf, arena, h)
        {
            t.refuse(msg);
        }
        // Relaxed: pairs with the parent's relaxed load; a count for display, ordering nothing else.
        let mut observed =
            vmspace_script::Observed::new(t, |n| calls.store(n, std::sync::atomic::Ordering::Relaxed));
        let output = vmspace_script::run_in(script, &mut observed, arena);
        write_all(&observed.into_inner().out, output.render().as_bytes());
    }));
    let code = if r.is_ok() { 0 } else { EXIT_PANIC };
    // SAFETY: ends the child without running the parent's atexit handlers or destructors.
    unsafe { libc::_exit(code) }
}

/// Pins the runner child to the CPU it runs on and maps its scratch page (module docs, "smaps and
/// PROCMAP_QUERY"); returns the page's address.
fn pin_and_scratch() -> Result<u64, String> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        return Err(format!("sched_getcpu: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a zeroed cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is a CPU number the kernel gave, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    // SAFETY: pid 0 is this process; `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(format!("sched_setaffinity: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh anonymous page, placed by the kernel away from everything else.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap of the scratch page: {}", std::io::Error::last_os_error()));
    }
    Ok(p as u64)
}

/// Offsets of the fields of `struct procmap_query`, and its size.
mod pq {
    pub use vmspace_proc::query::PROCMAP_QUERY_SIZE as LEN;
    pub use vmspace_proc::query::layout::*;
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(w)
}

/// Room per maps line in the counting buffer (a filler's line is about 50 bytes; paths make others longer).
const MAPS_LINE_MAX: usize = 128;

/// `vm.max_map_count`, read through the one host probe.
fn max_map_count() -> Option<u64> {
    vmspace_host::sysctl_vm("max_map_count")
}

/// Reads `/proc/self/maps` into `buf` without allocating; if it does not fit, falls back to a fresh string
/// (possible only outside headroom mode, where the buffer is 1 MiB).
fn read_maps(buf: &mut [u8]) -> Result<std::borrow::Cow<'_, str>, String> {
    let fd = rustix::fs::open("/proc/self/maps", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("open /proc/self/maps: {e}"))?;
    let mut len = 0;
    loop {
        if len == buf.len() {
            let s = std::fs::read_to_string("/proc/self/maps")
                .map_err(|e| format!("read /proc/self/maps: {e}"))?;
            return Ok(std::borrow::Cow::Owned(s));
        }
        match rustix::io::read(&fd, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("read /proc/self/maps: {e}")),
        }
    }
    std::str::from_utf8(&buf[..len])
        .map(std::borrow::Cow::Borrowed)
        .map_err(|e| format!("maps not UTF-8: {e}"))
}

/// The number of VMAs of this process (`mm->map_count`): the lines of `/proc/self/maps` less the
/// `[vsyscall]` gate area.
fn vma_count(buf: &mut [u8]) -> Result<u64, String> {
    let text = read_maps(buf)?;
    Ok(text.lines().filter(|l| !l.is_empty() && !l.ends_with("[vsyscall]")).count() as u64)
}

/// Sets `VM_DONTDUMP` and `VM_NOHUGEPAGE` on every VMA of the runner (outside `arena`) that can take them, so
/// that no mapping of the script merges with one: a mapping the kernel places outside the arena (a refused
/// hint, a moving mremap) lands next to the runner's own VMAs and would merge with an anonymous one that has
/// the same flags, costing no VMA where the engine, whose address space holds only the script's mappings,
/// spends one (module docs, "Reaching `max_map_count`"). Whole VMAs change, so none splits.
fn mark_unmergeable(buf: &mut [u8], arena: Arena) -> Result<(), String> {
    let text = read_maps(buf)?;
    for line in text.lines() {
        let Ok(l) = line.parse::<vmspace_proc::MapsLine>() else { continue };
        if arena.overlaps(l.start, l.end) || matches!(l.name, Some(vmspace_proc::MapsName::Special(_))) {
            continue;
        }
        for advice in [rustix::mm::Advice::LinuxDontDump, rustix::mm::Advice::LinuxNoHugepage] {
            // SAFETY: advice on a whole VMA of this process changes only its flags, never a byte or a mapping
            // a Rust object relies on; an advice the VMA refuses (EINVAL) leaves it as it was.
            let _ =
                unsafe { rustix::mm::madvise(l.start as *mut c_void, (l.end - l.start) as usize, advice) };
        }
    }
    Ok(())
}

/// Maps filler VMAs until `max_map_count - headroom` VMAs exist (module docs). `buf` was allocated before
/// the first count and is big enough for every line.
fn fill_to_headroom(buf: &mut [u8], arena: Arena, headroom: u64) -> Result<(), String> {
    let max = max_map_count().ok_or("cannot read /proc/sys/vm/max_map_count")?;
    let have = vma_count(buf)?;
    let target = max.checked_sub(headroom).filter(|&t| t >= have).ok_or_else(|| {
        format!("headroom {headroom}: the runner already has {have} VMAs of max_map_count {max}")
    })?;
    let need = target - have;
    if arena.overlaps(FILLER_BASE, FILLER_BASE + need * PAGE) {
        return Err("filler range overlaps the arena".into());
    }
    if have > 0 {
        mark_unmergeable(buf, arena)?;
    }
    // Marking may merge runner VMAs that differed only in those flags: count again.
    let have = vma_count(buf)?;
    let need = target.checked_sub(have).ok_or("marking the runner's VMAs added some")?;
    for i in 0..need {
        let prot = if i % 2 == 0 { ProtFlags::READ } else { ProtFlags::empty() };
        // SAFETY: a fresh anonymous mapping at an address nothing of this process uses (FIXED_NOREPLACE
        // refuses to replace anything); no Rust object refers to it.
        unsafe {
            rustix::mm::mmap_anonymous(
                (FILLER_BASE + i * PAGE) as *mut c_void,
                PAGE as usize,
                prot,
                rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::FIXED_NOREPLACE,
            )
        }
        .map_err(|e| format!("filler {i} of {need}: {e}"))?;
    }
    if need > 0 {
        for advice in [rustix::mm::Advice::LinuxDontDump, rustix::mm::Advice::LinuxNoHugepage] {
            // SAFETY: the fillers just mapped, whole; advice changes only their flags (no byte, no Rust
            // object refers to them).
            unsafe { rustix::mm::madvise(FILLER_BASE as *mut c_void, (need * PAGE) as usize, advice) }
                .map_err(|e| format!("marking the fillers: {e}"))?;
        }
    }
    let now = vma_count(buf)?;
    if now != target {
        return Err(format!(
            "filled to {now} VMAs, wanted {target} (max_map_count {max}, headroom {headroom})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmspace_script::{Entry, Value};

    /// CONFIG_ANON_VMA_NAME of the running kernel, if its config is readable.
    fn anon_vma_name_config() -> Option<bool> {
        vmspace_host::KernelConfig::running().map(|c| c.enabled("CONFIG_ANON_VMA_NAME"))
    }

    fn run_text(text: &str) -> Output {
        replay_kernel(&Script::parse(text).unwrap()).unwrap()
    }

    fn last_maps(o: &Output) -> Vec<String> {
        match o.entries.last() {
            Some(Entry::Maps(m)) => m.clone(),
            other => panic!("no final maps: {other:?}"),
        }
    }

    fn values(o: &Output) -> Vec<Value> {
        o.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Call { value, .. } => Some(*value),
                Entry::Maps(_) | Entry::Smaps(_) | Entry::Text { .. } => None,
            })
            .collect()
    }

    #[test]
    fn adjacent_anonymous_mappings_merge() {
        let o = run_text(
            "mmap 0x200000000000 0x2000 rw- private|anon|fixed_noreplace\n\
             mmap 0x200000002000 0x3000 rw- private|anon|fixed_noreplace\n",
        );
        assert_eq!(values(&o), vec![Value::Addr(0x2000_0000_0000), Value::Addr(0x2000_0000_2000)]);
        assert_eq!(last_maps(&o), vec!["200000000000-200000005000 rw-p 00000000 00:00 0 ".to_string()]);
    }

    #[test]
    fn mprotect_of_the_middle_splits_in_three() {
        let o = run_text(
            "mmap 0x200000000000 0x3000 rw- private|anon|fixed\nmprotect 0x200000001000 0x1000 r--\n",
        );
        assert_eq!(values(&o)[1], Value::Zero);
        assert_eq!(
            last_maps(&o),
            vec![
                "200000000000-200000001000 rw-p 00000000 00:00 0 ".to_string(),
                "200000001000-200000002000 r--p 00000000 00:00 0 ".to_string(),
                "200000002000-200000003000 rw-p 00000000 00:00 0 ".to_string(),
            ]
        );
    }

    #[test]
    fn errors_come_back_as_errno_names() {
        let o = run_text(
            "mmap 0x200000000000 0x2000 rw- private|anon|fixed\n\
             mmap 0x200000001000 0x1000 rw- private|anon|fixed_noreplace\n\
             name 0x200000000000 0x1000 x\n\
             munmap 0x200000000001 0x1000\n\
             mprotect 0x200000000000 0x4000 r--\n\
             touch 0x200000000000 0x3000 w\n\
             mremap 0x200000100000 0x1000 0x2000 0\n\
             mmap 0x200000010000 0x1000 rw- anon|fixed\n",
        );
        let v = values(&o);
        assert_eq!(v[1], Value::Err(Errno::EEXIST));
        // This project's hosts are built without CONFIG_ANON_VMA_NAME: the name call is EINVAL there.
        match anon_vma_name_config() {
            Some(false) => assert_eq!(v[2], Value::Err(Errno::EINVAL)),
            Some(true) => assert_eq!(v[2], Value::Zero),
            None => assert!(matches!(v[2], Value::Err(Errno::EINVAL) | Value::Zero)),
        }
        assert_eq!(v[3], Value::Err(Errno::EINVAL));
        // mprotect over a hole fails with ENOMEM, but only after changing the VMAs before the hole (Linux
        // applies it VMA by VMA): the pages [0, 2) are now read-only, so the write faults on the first page.
        assert_eq!(v[4], Value::Err(Errno::ENOMEM));
        assert_eq!(v[5], Value::Fault(0x2000_0000_0000));
        assert_eq!(v[6], Value::Err(Errno::EFAULT));
        assert_eq!(v[7], Value::Err(Errno::EINVAL));
    }

    #[test]
    fn file_mappings_are_canonicalised_and_merge_on_contiguous_offsets() {
        let o = run_text(
            "file a 0x10000\n\
             mmap 0x200000000000 0x2000 r-- private|fixed fd=a off=0\n\
             mmap 0x200000002000 0x2000 r-- private|fixed fd=a off=0x2000\n\
             mmap 0x200000004000 0x1000 r-- private|fixed fd=a off=0x8000\n\
             touch 0x200000000000 0x5000 r\n\
             touch 0x200000000000 0x1000 w\n",
        );
        let v = values(&o);
        assert_eq!(v[0], Value::Zero);
        assert_eq!(v[4], Value::Zero);
        assert_eq!(v[5], Value::Fault(0x2000_0000_0000));
        let pad = |s: &str| format!("{s:<72} fd=a");
        assert_eq!(
            last_maps(&o),
            vec![
                pad("200000000000-200000004000 r--p 00000000 00:00 1 "),
                pad("200000004000-200000005000 r--p 00008000 00:00 1 "),
            ]
        );
    }

    #[test]
    fn fork_continues_in_the_child() {
        let o = run_text(
            "mmap 0x200000000000 0x1000 rw- private|anon|fixed\n\
             mmap 0x200000001000 0x1000 r-- private|anon|fixed\n\
             madvise 0x200000001000 0x1000 dontfork\n\
             maps\nfork\nmaps\n",
        );
        let maps: Vec<&Vec<String>> =
            o.entries.iter().filter_map(|e| if let Entry::Maps(m) = e { Some(m) } else { None }).collect();
        assert_eq!(maps[0].len(), 2);
        // The DONTCOPY VMA is not in the child.
        assert_eq!(maps[1], &vec!["200000000000-200000001000 rw-p 00000000 00:00 0 ".to_string()]);
        assert!(o.render().contains("L5 fork = 0\n"));
    }

    #[test]
    fn page_ranges_add_remove_and_cover() {
        let mut r = Ranges::default();
        r.add(0x3000, 0x5000);
        r.add(0x1000, 0x2000);
        r.add(0x2000, 0x3000); // touches both: one range
        assert_eq!(r.0, vec![(0x1000, 0x5000)]);
        assert!(r.covers(0x1000, 0x5000) && r.covers(0x4000, 0x4000) && !r.covers(0x0, 0x2000));
        r.remove(0x2000, 0x3000);
        assert_eq!(r.0, vec![(0x1000, 0x2000), (0x3000, 0x5000)]);
        assert!(!r.covers(0x1000, 0x4000));
        r.add(0x8000, 0x9000);
        r.add(0x0, 0x10000); // swallows everything
        assert_eq!(r.0, vec![(0, 0x10000)]);
        r.remove(0, u64::MAX);
        assert_eq!(r.0, vec![]);
        r.add(5, 5); // empty: nothing
        assert_eq!(r, Ranges::default());
    }

    #[test]
    fn kernel_page_ranges_follow_the_kernels_arithmetic() {
        // mlock rounds the start down and the length (plus the start's offset) up.
        assert_eq!(KernelTarget::lock_range(0x1800, 0x10), Some((0x1000, 0x2000)));
        assert_eq!(KernelTarget::lock_range(0x1fff, 2), Some((0x1000, 0x3000)));
        assert_eq!(KernelTarget::lock_range(0x1000, 0), None);
        // len + offset wraps to 0: nothing to do; a range past 2^64: EINVAL.
        assert_eq!(KernelTarget::lock_range(0x1001, u64::MAX), None);
        assert_eq!(KernelTarget::lock_range(0x2000, 0u64.wrapping_sub(0x1000)), None);
        // mseal / pkey_mprotect need an aligned start.
        assert_eq!(KernelTarget::aligned_range(0x1001, 0x1000), None);
        assert_eq!(KernelTarget::aligned_range(0x1000, 1), Some((0x1000, 0x2000)));
        assert_eq!(KernelTarget::aligned_range(0x1000, u64::MAX), None);
        assert_eq!(page_align(1), 0x1000);
        assert_eq!(page_align(u64::MAX), 0);
    }

    /// The raw syscall numbers the runner uses are x86-64's (`arch/x86/entry/syscalls/syscall_64.tbl`).
    #[test]
    fn syscall_numbers_are_x86_64s() {
        assert_eq!(
            [
                libc::SYS_mmap,
                libc::SYS_mprotect,
                libc::SYS_munmap,
                libc::SYS_mremap,
                libc::SYS_msync,
                libc::SYS_madvise,
                libc::SYS_ftruncate,
                libc::SYS_mlock,
                libc::SYS_munlock,
                libc::SYS_mlockall,
                libc::SYS_munlockall,
                libc::SYS_mlock2,
                libc::SYS_pkey_mprotect,
                libc::SYS_pkey_alloc,
                libc::SYS_pkey_free,
                libc::SYS_mseal,
            ],
            [9, 10, 11, 25, 26, 28, 77, 149, 150, 151, 152, 325, 329, 330, 331, 462]
        );
    }

    #[test]
    fn the_guard_refuses_the_runners_own_memory() {
        // The runner's stack is certainly mapped; munmap of it must be refused, not executed.
        let probe = 0u8;
        let page = (&raw const probe as u64) & !(PAGE - 1);
        let s = Script::parse(&format!("munmap {page:#x} 0x1000\n")).unwrap();
        assert!(matches!(replay_kernel(&s), Err(ReplayError::Refused(_))));
    }

    #[test]
    fn generated_scripts_run_to_completion() {
        let cfg = vmspace_script::GenConfig { calls: 60, fork: true, ..Default::default() };
        for seed in 0..12 {
            let s = vmspace_script::generate(seed, &cfg);
            let o = replay_kernel(&s).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            // One result line per op but `maps` and `smaps` (blocks): a call's value or a query's answer.
            let calls =
                o.entries.iter().filter(|e| matches!(e, Entry::Call { .. } | Entry::Text { .. })).count();
            let expected = s
                .lines
                .iter()
                .filter(|l| !matches!(l.op, vmspace_script::Op::Maps | vmspace_script::Op::Smaps { .. }))
                .count();
            assert_eq!(calls, expected, "seed {seed}");
            // Every maps line in the output lies in the arena and parses.
            for l in last_maps(&o) {
                let m: vmspace_proc::MapsLine = l.parse().unwrap();
                assert!(Arena::default().overlaps(m.start, m.end), "{l}");
            }
        }
    }

    #[test]
    fn remove_tree_removes_the_directory_and_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("runner");
        std::fs::create_dir(&d).unwrap();
        for i in 0..300 {
            std::fs::write(d.join(format!("f{i}")), b"x").unwrap();
        }
        let c = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()).unwrap();
        remove_tree(&c);
        assert!(!d.exists());
        remove_tree(&c); // already gone: nothing to do, no panic
    }

    #[test]
    fn progress_counts_the_runners_calls() {
        // Progress is looked at every 250 ms while the runner has written nothing, so a run must outlast that: the
        // script grows until one does (a 2-CPU Xeon VM's runner makes about 1.3 million of these calls a second,
        // so 200,000 can end before the first look).
        for calls in [200_000, 1_000_000, 4_000_000] {
            let mut text =
                String::from("file f 0x1000\nmmap 0x200000000000 0x10000 rw- private|anon|fixed\n");
            for i in 0..calls {
                text.push_str(if i % 2 == 0 {
                    "mprotect 0x200000004000 0x1000 r--\n"
                } else {
                    "mprotect 0x200000004000 0x1000 rw-\n"
                });
            }
            let script = Script::parse(&text).unwrap();
            let mut seen = Vec::new();
            let out =
                replay_kernel_observed(&script, ReplayOptions::default(), &mut |n| seen.push(n)).unwrap();
            assert_eq!(values(&out).len(), script.lines.len());
            // Never going back, never beyond the calls made (the lines and the final maps read).
            assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
            assert!(seen.iter().all(|&n| n <= script.lines.len() as u64 + 1), "{seen:?}");
            if !seen.is_empty() {
                return;
            }
        }
        panic!("no progress reported, even for a run of 4 million calls");
    }
}
