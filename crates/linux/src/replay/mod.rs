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

mod guard;
mod headroom;
mod runner;
mod target;
#[cfg(test)]
mod tests;

pub use headroom::FILLER_BASE;
pub use runner::{
    ReplayError, ReplayOptions, replay_kernel, replay_kernel_in, replay_kernel_observed, replay_kernel_with,
};
pub use target::{CLOSED_FD, KernelTarget, refused_before_running};

use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use vmspace_script::Errno;

const PAGE: u64 = 4096;
/// x86-64 TASK_SIZE with 4-level paging: the end of user space.
const TASK_SIZE: u64 = 0x7fff_ffff_f000;

fn errno_of(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

fn last_errno() -> Errno {
    Errno::from_raw(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// `PAGE_ALIGN(len)` with the kernel's wrapping arithmetic.
fn page_align(len: u64) -> u64 {
    len.wrapping_add(PAGE - 1) & !(PAGE - 1)
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
