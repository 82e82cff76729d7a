//! The tracer behind `vmspace shadow`: a program runs under ptrace and stops at each of its memory calls,
//! so that its caller can mirror every call into an engine address space and compare the two after it.
//!
//! # How a program is traced
//!
//! [`Tracer::spawn`] forks a child that asks to be traced (`PTRACE_TRACEME`), stops itself, and, once its
//! tracer has set the options (`PTRACE_O_TRACESECCOMP`, `EXITKILL`, `TRACESYSGOOD`, `TRACEFORK`, `TRACEVFORK`,
//! `TRACECLONE`, `TRACEEXEC`), installs the seccomp filter of [`filter`] and `execve`s the program. From
//! then on every task of the program stops only at the calls the filter traps (`PTRACE_EVENT_SECCOMP`, a
//! stop at the call's entry), and runs at full speed in between. New tasks are traced from their first
//! instruction (the fork events) and inherit the filter. `EXITKILL` kills every traced task if the tracer dies,
//! so a killed `vmspace` leaves no traced program behind; the child also dies with its parent
//! (`PR_SET_PDEATHSIG`) before it is traced.
//!
//! [`Tracer::attach`] takes a running process instead (`--pid`): every thread is seized (`PTRACE_SEIZE`) and
//! stopped once (`PTRACE_INTERRUPT`). A filter cannot be installed into another process, so the tasks then
//! stop at the entry and the exit of *every* system call (`PTRACE_SYSCALL`) and the tracer lets the ones that
//! are not memory calls go on ([`decode::is_memory_call`]); a stop is two context switches and a few
//! microseconds, so a program making many system calls runs markedly slower while attached. `PTRACE_O_EXITKILL`
//! is not set: the process survives its tracer, and [`Tracer::detach`] (also run when the tracer is dropped)
//! lets every task go on untraced.
//!
//! # One call at a time
//!
//! [`Tracer::next_event`] returns one [`Event`] at a time and leaves a task stopped at a call's entry
//! ([`Event::Call`]) until its caller has dealt with it: [`Tracer::complete`] runs that one call to its exit
//! (`PTRACE_SYSCALL`, waiting for that task only) and returns the kernel's result, [`Tracer::resume`] lets the
//! task go on. Other tasks keep running meanwhile, but a task that reaches a memory call stops there until
//! the caller asks for the next event: calls are handled one at a time, to completion, which Linux does too
//! (each takes the `mmap_lock` for writing). A new task is held at its first stop until the event of the
//! call that made it has been returned, so that its caller knows which address space it runs in (the
//! `kcmp(KCMP_VM)` of parent and child) before it makes a call.
//!
//! Waiting uses `waitpid(__WALL)` and restarts use the raw `ptrace` requests, so that a signal `nix`'s
//! `Signal` does not name (the real-time signals glibc uses for thread cancellation and `setxid`) is passed on
//! to the program unchanged.

pub mod decode;
pub mod filter;

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::CString;
use std::fmt;
use std::os::unix::fs::FileExt;

use nix::sys::ptrace::{self, Options};
use nix::unistd::Pid;
use vmspace_proc::layout::{ImportedFile, ImportedFileKind};

/// Why tracing could not start or go on.
#[derive(Debug)]
pub enum ShadowError {
    /// The program does not exist or cannot be executed (a usage error).
    Program(String),
    /// ptrace is not permitted here: the message names the reason (Yama's `ptrace_scope`, a missing
    /// capability, a seccomp policy).
    NotPermitted(String),
    /// A system call of the tracer failed.
    Sys(String, nix::errno::Errno),
    /// The user asked the command to stop (Ctrl-C or SIGTERM).
    Interrupted,
}

impl fmt::Display for ShadowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShadowError::Program(m) | ShadowError::NotPermitted(m) => f.write_str(m),
            ShadowError::Sys(what, e) => write!(f, "{what}: {}", e.desc()),
            ShadowError::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for ShadowError {}

fn sys(what: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> ShadowError {
    let what = what.into();
    move |e| ShadowError::Sys(what, e)
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskExit {
    /// It exited with this status.
    Code(i32),
    /// A signal killed it (number, whether it dumped core).
    Signal(i32, bool),
}

impl fmt::Display for TaskExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TaskExit::Code(c) => write!(f, "exit status {c}"),
            TaskExit::Signal(s, core) => {
                // SAFETY: strsignal returns a pointer to a static or thread-local string, valid until the next
                // call on this thread; it is copied at once.
                let name =
                    unsafe { std::ffi::CStr::from_ptr(libc::strsignal(s)) }.to_string_lossy().into_owned();
                write!(f, "killed by signal {s} ({name}){}", if core { ", core dumped" } else { "" })
            }
        }
    }
}

/// What [`Tracer::next_event`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Task `tid` stopped at the entry of a memory call: number and argument registers. It stays stopped
    /// until [`Tracer::complete`] or [`Tracer::resume`].
    Call {
        /// The thread.
        tid: i32,
        /// The system call number.
        nr: i64,
        /// `rdi`, `rsi`, `rdx`, `r10`, `r8`, `r9`.
        args: [u64; 6],
    },
    /// Task `parent` made task `child` (fork, vfork or clone); `shares_vm`: in the same address space.
    NewTask {
        /// The task that called.
        parent: i32,
        /// The new task.
        child: i32,
        /// The new task shares the parent's address space (a thread, `vfork`, `CLONE_VM`).
        shares_vm: bool,
    },
    /// Task `tid` completed an `execve` (a new address space); `former` is the thread that called it (the
    /// exec makes it the thread-group leader, whose id it takes).
    Exec {
        /// The task, now the thread-group leader.
        tid: i32,
        /// The calling thread's id before the exec.
        former: i32,
    },
    /// Task `tid` ended.
    Exit {
        /// The task.
        tid: i32,
        /// How.
        status: TaskExit,
    },
}

/// How tasks stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only at the calls the seccomp filter traps (a spawned program).
    Seccomp,
    /// At every system call's entry and exit, filtered in the tracer (an attached process).
    Syscall,
}

/// One traced task.
#[derive(Debug, Default)]
struct Task {
    /// Stopped by the tracer and not restarted yet.
    stopped: bool,
    /// Its first stop has not been seen yet, or it is held there until its parent's event was returned.
    fresh: bool,
}

/// A traced program (module docs).
pub struct Tracer {
    mode: Mode,
    root: i32,
    tasks: HashMap<i32, Task>,
    /// New tasks stopped at their first stop whose parent's event has not been seen.
    unclaimed: HashSet<i32>,
    /// New tasks announced by their parent's event whose first stop has not been seen.
    expected: HashSet<i32>,
    /// Announced new tasks stopped at their first stop: started at the next [`Tracer::next_event`].
    to_start: Vec<i32>,
    pending: VecDeque<Event>,
    /// The spawn protocol's pipe (read end): the child's failure before its `execve` succeeded.
    spawn_pipe: Option<std::fs::File>,
    /// The root task completed an `execve`.
    execed: bool,
}

/// The raw restart requests (module docs: signals nix does not name).
fn restart_raw(req: libc::c_uint, tid: i32, sig: i32) -> Result<(), nix::errno::Errno> {
    // SAFETY: PTRACE_CONT / PTRACE_SYSCALL / PTRACE_DETACH take no pointer; `data` is the signal number.
    let rc = unsafe { libc::ptrace(req, tid, std::ptr::null_mut::<libc::c_void>(), sig as libc::c_long) };
    if rc == -1 { Err(nix::errno::Errno::last()) } else { Ok(()) }
}

/// `waitpid(pid, __WALL)`, raw status.
fn wait(pid: i32) -> Result<(i32, i32), nix::errno::Errno> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    if r == -1 { Err(nix::errno::Errno::last()) } else { Ok((r, status)) }
}

fn exit_of(status: i32) -> Option<TaskExit> {
    if libc::WIFEXITED(status) {
        Some(TaskExit::Code(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(TaskExit::Signal(libc::WTERMSIG(status), libc::WCOREDUMP(status)))
    } else {
        None
    }
}

/// Whether `a` and `b` run in the same address space: `kcmp(KCMP_VM)`; `fallback` where kcmp is missing.
pub fn same_vm(a: i32, b: i32, fallback: bool) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes integers only.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_VM, 0, 0) };
    if r < 0 { fallback } else { r == 0 }
}

/// Yama's `ptrace_scope` (`/proc/sys/kernel/yama/ptrace_scope`), if the LSM is present: the file exists only
/// when Yama is built in and enabled (`security/yama/yama_lsm.c` registers the sysctl), so its absence is
/// how Yama's absence is detected.
pub fn yama_ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok()?.trim().parse().ok()
}

/// `CAP_SYS_PTRACE`'s bit in the capability sets (`include/uapi/linux/capability.h`).
const CAP_SYS_PTRACE: u32 = 19;

/// Whether this process has `CAP_SYS_PTRACE` in its effective set (`CapEff:` of `/proc/self/status`).
pub fn has_cap_sys_ptrace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// The real, effective and saved user and group ids of process `pid` (`Uid:` and `Gid:` of
/// `/proc/PID/status`), uids first.
fn ids_of(pid: &str) -> Option<[u32; 6]> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let three = |key: &str| -> Option<Vec<u32>> {
        let v: Vec<u32> = s
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .take(3)
            .filter_map(|x| x.parse().ok())
            .collect();
        (v.len() == 3).then_some(v)
    };
    let mut ids = three("Uid:")?;
    ids.extend(three("Gid:")?);
    ids.try_into().ok()
}

/// Whether process `pid` descends from this process (its parent chain in `/proc/PID/stat` reaches us).
fn is_descendant(pid: i32) -> bool {
    let me = std::process::id() as i32;
    let mut p = pid;
    for _ in 0..4096 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { return false };
        let Some(ppid) = stat.rfind(')').and_then(|i| stat[i + 2..].split_whitespace().nth(1)?.parse().ok())
        else {
            return false;
        };
        if ppid == me {
            return true;
        }
        if ppid <= 1 {
            return false;
        }
        p = ppid;
    }
    false
}

/// What the diagnosis of a refused ptrace knows ([`refusal_reason`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    /// Yama's `ptrace_scope`, `None` without Yama.
    yama: Option<u32>,
    /// This process has `CAP_SYS_PTRACE`.
    cap: bool,
    /// The process attached to (`None`: `PTRACE_TRACEME` or the seccomp filter of a spawned program), with
    /// this process's real uid and gid and the target's uids and gids (real, effective, saved) where `/proc`
    /// shows them, and whether it descends from this process.
    target: Option<Target>,
}

/// The attached process of a [`Refusal`]: pid; (our real uid and gid, its uids and gids); a descendant.
type Target = (i32, Option<([u32; 2], [u32; 6])>, bool);

impl Refusal {
    fn of(target: Option<i32>) -> Refusal {
        Refusal {
            yama: yama_ptrace_scope(),
            cap: has_cap_sys_ptrace(),
            target: target.map(|pid| {
                let ids = ids_of("self").zip(ids_of(&pid.to_string())).map(|(o, t)| ([o[0], o[3]], t));
                (pid, ids, is_descendant(pid))
            }),
        }
    }
}

/// What refused ptrace with `EPERM`, checked in the kernel's order (`kernel/ptrace.c: __ptrace_may_access`
/// compares the credentials, then wants a dumpable target, each overridden only by `CAP_SYS_PTRACE`, and then
/// asks the security modules, Yama among them: `security/yama/yama_lsm.c: yama_ptrace_access_check`): a
/// target of other credentials and the missing capability; Yama's `ptrace_scope`; a target that is not
/// dumpable; or none of these (another security module, a container's seccomp policy).
fn refusal_reason(f: &Refusal) -> String {
    let cap_word = if f.cap { "has CAP_SYS_PTRACE" } else { "lacks CAP_SYS_PTRACE" };
    let yama_word = match f.yama {
        None => "Yama is not active (no /proc/sys/kernel/yama/ptrace_scope)".to_string(),
        Some(s) => format!("kernel.yama.ptrace_scope is {s}, which allows this attach"),
    };
    if let Some((pid, Some((ours, theirs)), _)) = f.target
        && !f.cap
        && (theirs[..3].iter().any(|&u| u != ours[0]) || theirs[3..].iter().any(|&g| g != ours[1]))
    {
        return format!(
            "refused for a missing capability: vmspace runs as uid {} gid {} and {cap_word}, which \
             ptrace_may_access (kernel/ptrace.c) requires to attach to process {pid} of uids {}/{}/{} and gids \
             {}/{}/{} (real/effective/saved)",
            ours[0], ours[1], theirs[0], theirs[1], theirs[2], theirs[3], theirs[4], theirs[5]
        );
    }
    match (f.yama, f.target) {
        (Some(3), _) => {
            return "refused by Yama: kernel.yama.ptrace_scope is 3 (no attach): no process may trace another \
                    until the next reboot"
                .into();
        }
        (Some(2), Some(_)) if !f.cap => {
            return format!(
                "refused by Yama: kernel.yama.ptrace_scope is 2 (admin-only attach) and vmspace {cap_word}"
            );
        }
        (Some(1), Some((pid, _, false))) if !f.cap => {
            return format!(
                "refused by Yama: kernel.yama.ptrace_scope is 1 (restricted): without CAP_SYS_PTRACE a process \
                 may attach only to its descendants (or to one that named it with PR_SET_PTRACER); process {pid} \
                 is not a descendant of vmspace, and vmspace {cap_word}"
            );
        }
        _ => {}
    }
    if let Some((pid, _, _)) = f.target
        && !f.cap
    {
        return format!(
            "vmspace {cap_word} and process {pid} has its credentials, so the target is probably not dumpable \
             (a set-id program, PR_SET_DUMPABLE 0), which ptrace_may_access (kernel/ptrace.c) lets only \
             CAP_SYS_PTRACE override; {yama_word}"
        );
    }
    format!(
        "neither Yama nor a missing capability explains it (vmspace {cap_word}; {yama_word}): another security \
         module or a container's seccomp policy forbids ptrace or seccomp"
    )
}

/// The run failure of a ptrace request refused with `e` (`EPERM`): the request and what refused it.
fn not_permitted(what: &str, e: i32, target: Option<i32>) -> ShadowError {
    let reason = refusal_reason(&Refusal::of(target));
    ShadowError::NotPermitted(format!(
        "ptrace not permitted: {what}: {}: {reason}",
        nix::errno::Errno::from_raw(e).desc()
    ))
}

/// `program` as `execve` takes it: a path with a `/` as is, else the first executable file of that name in
/// `$PATH`. A usage error if there is none.
pub fn resolve_program(program: &str) -> Result<std::path::PathBuf, ShadowError> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        return Err(ShadowError::Program("empty program name".into()));
    }
    if program.contains('/') {
        let p = std::path::PathBuf::from(program);
        return match std::fs::metadata(&p) {
            Err(e) => Err(ShadowError::Program(format!("{program}: {e}"))),
            Ok(_) if !executable(&p) => {
                Err(ShadowError::Program(format!("{program}: not an executable file")))
            }
            Ok(_) => Ok(p),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| ShadowError::Program(format!("{program}: command not found in PATH")))
}

/// The spawn protocol's failure stages, written by the child into the pipe.
const STAGE_TRACEME: u8 = 1;
const STAGE_FILTER: u8 = 2;
const STAGE_EXEC: u8 = 3;

impl Tracer {
    /// Runs `program` (resolved by [`resolve_program`]) with `args` (`argv[1..]`) under the tracer, stopped at
    /// nothing yet: the first events are its `execve`'s call and [`Event::Exec`].
    pub fn spawn(program: &std::path::Path, args: &[String]) -> Result<Tracer, ShadowError> {
        use std::os::unix::ffi::OsStrExt;
        let bad = |what: &str| ShadowError::Program(format!("{what} contains a NUL byte"));
        let path = CString::new(program.as_os_str().as_bytes()).map_err(|_| bad("the program"))?;
        let mut argv = vec![path.clone()];
        for a in args {
            argv.push(CString::new(a.as_bytes()).map_err(|_| bad("an argument"))?);
        }
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let prog = filter::program().map_err(|e| ShadowError::Program(format!("seccomp filter: {e}")))?;
        let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| ShadowError::Sys("pipe2".into(), nix::errno::Errno::from_raw(e.raw_os_error())))?;
        let parent = std::process::id() as i32;
        // SAFETY: the child only makes async-signal-safe calls (prctl, ptrace, raise, seccomp, write, execve,
        // _exit) on memory prepared before the fork; it never returns into the caller.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(ShadowError::Sys("fork".into(), nix::errno::Errno::last()));
        }
        if pid == 0 {
            use std::os::fd::AsRawFd;
            let fail = |stage: u8, err: i32| -> ! {
                let mut msg = [0u8; 5];
                msg[0] = stage;
                msg[1..].copy_from_slice(&err.to_ne_bytes());
                // SAFETY: write and _exit are async-signal-safe; `msg` is valid for 5 bytes.
                unsafe {
                    libc::write(wr.as_raw_fd(), msg.as_ptr().cast(), msg.len());
                    libc::_exit(127)
                }
            };
            let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // SAFETY: integer-only prctl/getppid/signal calls; the die-with-parent check of `child::spawn`.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(127);
                }
                // The command's own Ctrl-C handler is not the program's: a terminal's Ctrl-C reaches it too.
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
            }
            // SAFETY: PTRACE_TRACEME takes no pointer.
            if unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) } == -1 {
                fail(STAGE_TRACEME, errno());
            }
            // SAFETY: raise is async-signal-safe; the tracer sets its options during this stop.
            unsafe { libc::raise(libc::SIGSTOP) };
            if let Err(e) = filter::install(&prog) {
                fail(STAGE_FILTER, e);
            }
            // SAFETY: `path` and `argv_ptrs` (NULL-terminated) outlive the call; `environ` is the process's.
            unsafe {
                unsafe extern "C" {
                    static environ: *const *const libc::c_char;
                }
                libc::execve(path.as_ptr(), argv_ptrs.as_ptr(), environ);
            }
            fail(STAGE_EXEC, errno());
        }
        drop(wr);
        let mut t = Tracer {
            mode: Mode::Seccomp,
            root: pid,
            tasks: HashMap::from([(pid, Task::default())]),
            unclaimed: HashSet::new(),
            expected: HashSet::new(),
            to_start: Vec::new(),
            pending: VecDeque::new(),
            spawn_pipe: Some(std::fs::File::from(rd)),
            execed: false,
        };
        let (_, status) = wait(pid).map_err(sys("waitpid"))?;
        if !libc::WIFSTOPPED(status) {
            t.tasks.clear();
            return Err(t.spawn_failure().unwrap_or_else(|| {
                ShadowError::Program(format!("the child ended before it was traced (status {status:#x})"))
            }));
        }
        let opts = Options::PTRACE_O_TRACESECCOMP
            | Options::PTRACE_O_EXITKILL
            | Options::PTRACE_O_TRACESYSGOOD
            | Options::PTRACE_O_TRACEFORK
            | Options::PTRACE_O_TRACEVFORK
            | Options::PTRACE_O_TRACECLONE
            | Options::PTRACE_O_TRACEEXEC;
        ptrace::setoptions(Pid::from_raw(pid), opts).map_err(sys("PTRACE_SETOPTIONS"))?;
        restart_raw(libc::PTRACE_CONT, pid, 0).map_err(sys("PTRACE_CONT"))?;
        Ok(t)
    }

    /// The child's report of a failure before its `execve` succeeded, if it wrote one.
    fn spawn_failure(&mut self) -> Option<ShadowError> {
        let f = self.spawn_pipe.take()?;
        let mut msg = [0u8; 5];
        f.read_exact_at(&mut msg, 0).ok().or_else(|| {
            use std::io::Read;
            (&f).read_exact(&mut msg).ok()
        })?;
        let err = i32::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]]);
        Some(match msg[0] {
            STAGE_TRACEME => not_permitted("PTRACE_TRACEME", err, None),
            STAGE_FILTER => not_permitted("installing the seccomp filter", err, None),
            STAGE_EXEC => {
                ShadowError::Program(format!("execve: {}", nix::errno::Errno::from_raw(err).desc()))
            }
            _ => return None,
        })
    }

    /// Attaches to every thread of the running process `pid` (module docs: every system call stops).
    pub fn attach(pid: i32) -> Result<Tracer, ShadowError> {
        let opts = Options::PTRACE_O_TRACESYSGOOD
            | Options::PTRACE_O_TRACEFORK
            | Options::PTRACE_O_TRACEVFORK
            | Options::PTRACE_O_TRACECLONE
            | Options::PTRACE_O_TRACEEXEC;
        let mut t = Tracer {
            mode: Mode::Syscall,
            root: pid,
            tasks: HashMap::new(),
            unclaimed: HashSet::new(),
            expected: HashSet::new(),
            to_start: Vec::new(),
            pending: VecDeque::new(),
            spawn_pipe: None,
            execed: true,
        };
        // Threads made while we attach are attached by their parent's clone event once that parent is seized;
        // read the list until it holds no thread we have not seized.
        loop {
            let dir = format!("/proc/{pid}/task");
            let rd =
                std::fs::read_dir(&dir).map_err(|e| ShadowError::Program(format!("process {pid}: {e}")))?;
            let mut new = false;
            for e in rd.flatten() {
                let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
                if t.tasks.contains_key(&tid) {
                    continue;
                }
                match ptrace::seize(Pid::from_raw(tid), opts) {
                    Ok(()) => {}
                    Err(nix::errno::Errno::ESRCH) => continue,
                    Err(e) if t.tasks.is_empty() => {
                        return Err(match e {
                            nix::errno::Errno::EPERM => {
                                not_permitted(&format!("PTRACE_SEIZE {tid}"), e as i32, Some(pid))
                            }
                            e => ShadowError::Sys(format!("PTRACE_SEIZE {tid}"), e),
                        });
                    }
                    Err(e) => return Err(ShadowError::Sys(format!("PTRACE_SEIZE {tid}"), e)),
                }
                t.tasks.insert(tid, Task::default());
                new = true;
            }
            if !new {
                break;
            }
        }
        if t.tasks.is_empty() {
            return Err(ShadowError::Program(format!("process {pid} has no thread to attach to")));
        }
        for &tid in t.tasks.keys() {
            let _ = ptrace::interrupt(Pid::from_raw(tid));
        }
        // Each seized thread reports its PTRACE_EVENT_STOP; then it stops at every system call.
        let mut waiting: HashSet<i32> = t.tasks.keys().copied().collect();
        while !waiting.is_empty() {
            let (tid, status) = wait(-1).map_err(sys("waitpid"))?;
            if let Some(exit) = exit_of(status) {
                waiting.remove(&tid);
                t.tasks.remove(&tid);
                t.pending.push_back(Event::Exit { tid, status: exit });
                continue;
            }
            if waiting.remove(&tid) {
                restart_raw(libc::PTRACE_SYSCALL, tid, 0).map_err(sys("PTRACE_SYSCALL"))?;
            } else {
                t.stop(tid, status)?;
            }
        }
        Ok(t)
    }

    /// The process that was spawned or attached to.
    pub fn root(&self) -> i32 {
        self.root
    }

    /// How tasks stop.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Restarts `tid` (stopped at a call's entry, or after [`Tracer::complete`]).
    pub fn resume(&mut self, tid: i32) -> Result<(), ShadowError> {
        self.restart(tid, 0)
    }

    fn restart(&mut self, tid: i32, sig: i32) -> Result<(), ShadowError> {
        let req = match self.mode {
            Mode::Seccomp => libc::PTRACE_CONT,
            Mode::Syscall => libc::PTRACE_SYSCALL,
        };
        if let Some(t) = self.tasks.get_mut(&tid) {
            t.stopped = false;
        }
        match restart_raw(req, tid, sig) {
            // A task killed while stopped (SIGKILL from elsewhere, a sibling's exit_group): its exit follows.
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(ShadowError::Sys(format!("restarting task {tid}"), e)),
        }
    }

    /// Runs the call `tid` is stopped at ([`Event::Call`]) to its exit and returns the kernel's result
    /// (`rax`: an errno as -1..-4095), leaving the task stopped there; `None` if the task ended before (its
    /// [`Event::Exit`] comes next).
    pub fn complete(&mut self, tid: i32) -> Result<Option<i64>, ShadowError> {
        restart_raw(libc::PTRACE_SYSCALL, tid, 0).or_else(|e| {
            if e == nix::errno::Errno::ESRCH {
                Ok(())
            } else {
                Err(ShadowError::Sys("PTRACE_SYSCALL".into(), e))
            }
        })?;
        loop {
            let (_, status) = match wait(tid) {
                Ok(s) => s,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::ECHILD) => return Ok(None),
                Err(e) => return Err(ShadowError::Sys("waitpid".into(), e)),
            };
            if let Some(exit) = exit_of(status) {
                self.tasks.remove(&tid);
                self.pending.push_back(Event::Exit { tid, status: exit });
                return Ok(None);
            }
            let sig = libc::WSTOPSIG(status);
            if sig == libc::SIGTRAP | 0x80 {
                let regs = ptrace::getregs(Pid::from_raw(tid)).map_err(sys("PTRACE_GETREGS"))?;
                if let Some(t) = self.tasks.get_mut(&tid) {
                    t.stopped = true;
                }
                return Ok(Some(regs.rax as i64));
            }
            // Anything else before the exit stop (a signal cannot be delivered inside the call; an event of a
            // call that does not return, which the filter's process calls are not run through): pass it on.
            let pass = if sig == libc::SIGTRAP { 0 } else { sig };
            restart_raw(libc::PTRACE_SYSCALL, tid, pass).map_err(sys("PTRACE_SYSCALL"))?;
        }
    }

    /// Reads the NUL-terminated string at `addr` of task `tid` (at most 256 bytes), `None` if unreadable.
    pub fn read_string(&self, tid: i32, addr: u64) -> Option<String> {
        let f = std::fs::File::open(format!("/proc/{tid}/mem")).ok()?;
        let mut buf = [0u8; 256];
        let mut n = 0;
        while n < buf.len() {
            match f.read_at(&mut buf[n..], addr + n as u64) {
                Ok(0) | Err(_) if n == 0 => return None,
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    n += k;
                    if buf[..n].contains(&0) {
                        break;
                    }
                }
            }
        }
        let end = buf[..n].iter().position(|&b| b == 0)?;
        String::from_utf8(buf[..end].to_vec()).ok()
    }

    /// The next event (module docs); `None` when no traced task is left.
    pub fn next_event(&mut self) -> Result<Option<Event>, ShadowError> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Ok(Some(e));
            }
            if crate::child::interrupted() {
                return Err(ShadowError::Interrupted);
            }
            for tid in std::mem::take(&mut self.to_start) {
                if let Some(t) = self.tasks.get_mut(&tid) {
                    t.fresh = false;
                }
                self.restart(tid, 0)?;
            }
            if self.tasks.is_empty() && self.unclaimed.is_empty() {
                return Ok(None);
            }
            let (tid, status) = match wait(-1) {
                Ok(s) => s,
                Err(nix::errno::Errno::EINTR) if crate::child::interrupted() => {
                    return Err(ShadowError::Interrupted);
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::ECHILD) => return Ok(None),
                Err(e) => return Err(ShadowError::Sys("waitpid".into(), e)),
            };
            if let Some(exit) = exit_of(status) {
                self.tasks.remove(&tid);
                self.unclaimed.remove(&tid);
                if tid == self.root
                    && !self.execed
                    && let Some(e) = self.spawn_failure()
                {
                    return Err(e);
                }
                return Ok(Some(Event::Exit { tid, status: exit }));
            }
            if let Some(e) = self.stop(tid, status)? {
                return Ok(Some(e));
            }
        }
    }

    /// Handles one stop of `tid`: the event to return, or `None` after restarting the task.
    fn stop(&mut self, tid: i32, status: i32) -> Result<Option<Event>, ShadowError> {
        let sig = libc::WSTOPSIG(status);
        let event = (status >> 16) & 0xff;
        let known = self.tasks.get(&tid).is_some_and(|t| !t.fresh);
        if !known && (sig == libc::SIGSTOP || event == libc::PTRACE_EVENT_STOP) {
            // A new task's first stop: held until its parent's event was returned.
            if self.expected.remove(&tid) {
                self.tasks.entry(tid).or_default().fresh = true;
                self.to_start.push(tid);
            } else {
                self.unclaimed.insert(tid);
            }
            return Ok(None);
        }
        let ptid = Pid::from_raw(tid);
        if sig == libc::SIGTRAP | 0x80 {
            // Syscall mode: an entry or an exit stop.
            let info = ptrace::syscall_info(ptid).map_err(sys("PTRACE_GET_SYSCALL_INFO"))?;
            if info.op == libc::PTRACE_SYSCALL_INFO_ENTRY {
                // SAFETY: `op` says the entry member of the union is the one the kernel filled.
                let entry = unsafe { info.u.entry };
                let args = entry.args;
                let nr = entry.nr as i64;
                if decode::is_memory_call(nr, &args) {
                    self.tasks.entry(tid).or_default().stopped = true;
                    return Ok(Some(Event::Call { tid, nr, args }));
                }
            }
            self.restart(tid, 0)?;
            return Ok(None);
        }
        if sig == libc::SIGTRAP && event != 0 {
            match event {
                libc::PTRACE_EVENT_SECCOMP => {
                    let r = ptrace::getregs(ptid).map_err(sys("PTRACE_GETREGS"))?;
                    self.tasks.entry(tid).or_default().stopped = true;
                    return Ok(Some(Event::Call {
                        tid,
                        nr: r.orig_rax as i64,
                        args: [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9],
                    }));
                }
                libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                    let child = ptrace::getevent(ptid).map_err(sys("PTRACE_GETEVENTMSG"))? as i32;
                    let shares_vm = same_vm(tid, child, event != libc::PTRACE_EVENT_FORK);
                    self.tasks.entry(child).or_default().fresh = true;
                    if self.unclaimed.remove(&child) {
                        self.to_start.push(child);
                    } else {
                        self.expected.insert(child);
                    }
                    self.restart(tid, 0)?;
                    return Ok(Some(Event::NewTask { parent: tid, child, shares_vm }));
                }
                libc::PTRACE_EVENT_EXEC => {
                    let former = ptrace::getevent(ptid).map_err(sys("PTRACE_GETEVENTMSG"))? as i32;
                    if former != tid {
                        self.tasks.remove(&former);
                    }
                    if tid == self.root {
                        self.execed = true;
                        self.spawn_pipe = None;
                    }
                    // The exec event stop is where the new image is complete: the caller imports it now.
                    self.tasks.entry(tid).or_default().stopped = true;
                    return Ok(Some(Event::Exec { tid, former }));
                }
                _ => {
                    self.restart(tid, 0)?;
                    return Ok(None);
                }
            }
        }
        if event == libc::PTRACE_EVENT_STOP {
            // A group-stop of a seized task: let it go on (the program's job control is not modelled).
            self.restart(tid, 0)?;
            return Ok(None);
        }
        // A signal-delivery stop: pass the signal on. A group-stop of a task traced without SEIZE has no
        // siginfo; it is restarted without a signal.
        let pass = if ptrace::getsiginfo(ptid).is_ok() { sig } else { 0 };
        self.restart(tid, pass)?;
        Ok(None)
    }

    /// Lets every task go on untraced (attached processes; a spawned program is killed by dropping instead).
    pub fn detach(&mut self) {
        let mut left: HashSet<i32> =
            self.tasks.keys().copied().chain(self.unclaimed.iter().copied()).collect();
        for (&tid, t) in &self.tasks {
            if t.stopped || t.fresh {
                let _ = restart_raw(libc::PTRACE_DETACH, tid, 0);
                left.remove(&tid);
            } else {
                let _ = ptrace::interrupt(Pid::from_raw(tid));
            }
        }
        for &tid in &self.unclaimed {
            let _ = restart_raw(libc::PTRACE_DETACH, tid, 0);
            left.remove(&tid);
        }
        while !left.is_empty() {
            let Ok((tid, status)) = wait(-1) else { break };
            if !left.remove(&tid) || exit_of(status).is_some() {
                continue;
            }
            let sig = libc::WSTOPSIG(status);
            let event = (status >> 16) & 0xff;
            let pass = if event == 0
                && sig != libc::SIGTRAP | 0x80
                && ptrace::getsiginfo(Pid::from_raw(tid)).is_ok()
            {
                sig
            } else {
                0
            };
            let _ = restart_raw(libc::PTRACE_DETACH, tid, pass);
        }
        self.tasks.clear();
        self.unclaimed.clear();
    }
}

impl Drop for Tracer {
    /// A spawned program does not outlive its tracer: every task is killed and reaped (`PTRACE_O_EXITKILL`
    /// would do it if the tracer died). An attached process is detached, left running.
    fn drop(&mut self) {
        if self.tasks.is_empty() && self.unclaimed.is_empty() {
            return;
        }
        match self.mode {
            Mode::Syscall => self.detach(),
            Mode::Seccomp => {
                // SAFETY: kill with a pid we traced; the process group is not touched.
                unsafe { libc::kill(self.root, libc::SIGKILL) };
                for &tid in self.tasks.keys().chain(self.unclaimed.iter()) {
                    // SAFETY: as above, for each traced task (other processes the program forked).
                    unsafe { libc::kill(tid, libc::SIGKILL) };
                }
                while wait(-1).is_ok() {}
            }
        }
    }
}

/// The file descriptor `fd` of task `tid` as the engine mirrors it: the file it refers to (`/proc/TID/fd/N`:
/// device, inode, size, path as maps prints it, whether it is on a tmpfs, whether it was opened for writing,
/// the placement method of its file system: [`crate::procfs::file_area`]).
/// `None` if the descriptor is not open or cannot be read.
pub fn fd_file(tid: i32, fd: i32) -> Option<ImportedFile> {
    let link = format!("/proc/{tid}/fd/{fd}");
    let target = std::fs::read_link(&link).ok()?;
    let target = target.to_string_lossy().into_owned();
    let (path, deleted) = match target.strip_suffix(" (deleted)") {
        Some(p) => (p.to_string(), true),
        None => (target, false),
    };
    let f = std::fs::File::open(&link).ok();
    let st = match &f {
        Some(f) => rustix::fs::fstat(f).ok()?,
        None => rustix::fs::stat(link.as_str()).ok()?,
    };
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let shmem = f.as_ref().is_some_and(|f| rustix::fs::fstatfs(f).is_ok_and(|s| s.f_type == TMPFS_MAGIC));
    let flags = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).ok().and_then(|s| {
        s.lines().find_map(|l| l.strip_prefix("flags:")).and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
    });
    let writable = flags.is_some_and(|f| f & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32);
    Some(ImportedFile {
        path,
        deleted,
        dev_major: rustix::fs::major(st.st_dev),
        dev_minor: rustix::fs::minor(st.st_dev),
        inode: st.st_ino,
        size: st.st_size as u64,
        kind: if shmem { ImportedFileKind::Shmem } else { ImportedFileKind::Regular },
        writable,
        area: f
            .as_ref()
            .and_then(|f| {
                let mountinfo = std::fs::read_to_string(format!("/proc/{tid}/mountinfo")).ok();
                crate::procfs::file_area(f, mountinfo.as_deref())
            })
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod refusal_tests {
    use super::{Refusal, refusal_reason};

    #[test]
    fn the_reason_follows_the_kernels_order_of_checks() {
        let other = Some(([0, 0], [65534, 65534, 65534, 65534, 65534, 65534]));
        let same = Some(([0, 0], [0; 6]));
        let r = |yama, cap, target| refusal_reason(&Refusal { yama, cap, target });
        // Other credentials without the capability: the capability, whatever Yama says (checked first).
        for yama in [None, Some(0), Some(1), Some(2)] {
            let t = r(yama, false, Some((7, other, false)));
            assert!(t.contains("missing capability") && t.contains("lacks CAP_SYS_PTRACE"), "{t}");
            assert!(t.contains("uids 65534/65534/65534"), "{t}");
        }
        // Yama, by scope.
        let t = r(Some(1), false, Some((7, same, false)));
        assert!(t.contains("ptrace_scope is 1") && t.contains("not a descendant"), "{t}");
        assert!(r(Some(2), false, Some((7, same, true))).contains("ptrace_scope is 2"));
        assert!(r(Some(3), true, Some((7, same, true))).contains("ptrace_scope is 3"));
        assert!(r(Some(3), true, None).contains("ptrace_scope is 3"));
        // A descendant under scope 1, same credentials: not Yama; the dumpable check.
        let t = r(Some(1), false, Some((7, same, true)));
        assert!(t.contains("not dumpable") && t.contains("ptrace_scope is 1, which allows"), "{t}");
        // With the capability and no Yama refusal: something else.
        let t = r(None, true, Some((7, other, false)));
        assert!(t.contains("another security module") && t.contains("Yama is not active"), "{t}");
    }
}
