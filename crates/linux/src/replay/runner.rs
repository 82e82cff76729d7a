//! The runner child and its protocol with the parent. "Module docs" below means the docs of the `replay` module
//! (`mod.rs`), whose sections "Process model" and "Nothing outlives the command" this file implements:
//! [`replay_kernel_observed`] refuses never-run scripts, creates the temporary directory, forks the janitor
//! and then the runner, reads the runner's output from a pipe while it reports the runner's call count, and
//! reaps it.
//!
//! The protocol: the runner writes the rendered output to the pipe and exits 0; a refusal (the guard, a check
//! at start, the headroom filler) writes its message and exits with `EXIT_REFUSED` (3); a panic is caught and
//! exits with `EXIT_PANIC` (4); a signal or any other status is a child failure. The call count is one word of
//! shared memory the runner stores and the parent loads, both relaxed: it is for display and orders nothing.
//!
//! Invariants: after `fork` the child uses only system calls, allocation through glibc's fork-safe malloc and
//! no lock another thread may hold, and always ends with `_exit`; the runner and every process a script forks
//! arm `PR_SET_PDEATHSIG(SIGKILL)` first, so none outlives the command; the janitor removes the temporary
//! directory once the parent is gone, however it died.

use super::guard::Ranges;
use super::headroom::{MAPS_LINE_MAX, fill_to_headroom, max_map_count};
use super::target::{CLOSED_FD, KernelTarget, refused_before_running};
use super::{PAGE, last_errno, write_all};
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use std::fmt;
use std::path::PathBuf;
use vmspace_script::{Arena, Errno, Output, Script};

/// Exit status of a child that refused a call (message on the pipe).
pub(super) const EXIT_REFUSED: i32 = 3;
/// Exit status of a child that panicked (message on the pipe).
const EXIT_PANIC: i32 = 4;

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
pub(super) fn arm_death_signal(parent: libc::pid_t) {
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
pub(super) fn remove_tree(path: &std::ffi::CStr) {
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
