//! Child processes that never outlive the command that made them, and the shared page they talk through.
//!
//! # Process model
//! The probe's mappers, scanners and busy tasks must be separate *processes* (a scanner reading
//! `/proc/MAPPER/smaps` takes the mapper's `mmap_lock`; threads would share one `mm`). They are made with a
//! plain `fork()` that is **not** followed by `exec`: the child runs a Rust closure and ends with `_exit`, never
//! returning into the caller's stack. This is cheaper than re-executing the binary and works from the library's
//! own tests. Its rule: the child may only rely on the forking thread's state. It does not print, does not take
//! locks that another thread of the parent might have held at the fork (stdio), and uses the allocator only,
//! which glibc makes fork-safe (its `fork` takes and resets the malloc locks). The CLI forks from its single main
//! thread.
//!
//! # Lifetime guarantees
//! * [`Child`] is an owning guard: dropping it (normal exit, `?` error path, or unwinding panic) sends SIGKILL
//!   and reaps the child, so no zombie and no orphan remains.
//! * Each child sets `PR_SET_PDEATHSIG(SIGKILL)` first thing and then checks that its parent is still the one
//!   that forked it (the parent may have died between `fork` and `prctl`), so even a SIGKILLed parent leaves
//!   nothing behind.
//! * Ctrl-C / SIGTERM: [`install_interrupt_handler`] makes SIGINT and SIGTERM set a flag ([`interrupted`])
//!   instead of killing the parent; the experiments poll it, return [`Interrupted`], and the guards kill the
//!   children on the way out; a second signal ends the process at once with status 130. Children restore the default dispositions, so a terminal's Ctrl-C (sent to the
//!   whole foreground group) also ends them directly.
//!
//! # Shared memory
//! [`SharedSlots`] is an array of `AtomicU64` in a `MAP_SHARED | MAP_ANONYMOUS` mapping made before the fork,
//! so parent and children see the same words: flags, counters, addresses and results. All-zero bytes are a valid
//! `AtomicU64`, so the fresh mapping is a valid array.

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Set by the SIGINT/SIGTERM handler; read by [`interrupted`].
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The error an experiment returns when the user interrupted it (Ctrl-C or SIGTERM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

extern "C" fn on_interrupt(_sig: libc::c_int) {
    // Relaxed: a lone flag; the poller acts on it by itself and needs no other memory from the handler.
    if INTERRUPTED.swap(true, Ordering::Relaxed) {
        // A second Ctrl-C: the user does not want to wait for the command to wind down (a long computation that
        // does not poll the flag). Children die with us (PR_SET_PDEATHSIG). 130 = 128 + SIGINT, the shell's
        // status of an interrupted command.
        // SAFETY: _exit is async-signal-safe and ends the process without running anything of it.
        unsafe { libc::_exit(130) };
    }
}

/// Makes SIGINT and SIGTERM set the [`interrupted`] flag instead of terminating the process.
///
/// Installed without `SA_RESTART`, so a blocking call returns `EINTR` and the caller gets to poll the flag.
pub fn install_interrupt_handler() -> Result<(), Errno> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sigaction` is a plain C struct for which all-zero bytes are a valid value (empty mask, no
        // flags); we then fill in the handler.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_interrupt as *const () as libc::sighandler_t;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; `sa` is valid.
        let rc = unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(Errno::from_raw_os_error(
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            ));
        }
    }
    Ok(())
}

/// Whether the user asked the command to stop (see [`install_interrupt_handler`]).
pub fn interrupted() -> bool {
    // Relaxed: pairs with the handler's relaxed store; only the flag itself is communicated.
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Returns `Err(Interrupted)` if the user asked the command to stop.
pub fn check_interrupted() -> Result<(), Interrupted> {
    if interrupted() { Err(Interrupted) } else { Ok(()) }
}

/// Sleeps for `d` in short slices, returning early with `Err(Interrupted)` on Ctrl-C.
pub fn sleep_interruptible(d: Duration) -> Result<(), Interrupted> {
    let end = Instant::now() + d;
    loop {
        check_interrupted()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(10)));
    }
}

/// An owned child process: killed (SIGKILL) and reaped when dropped unless already reaped.
#[derive(Debug)]
pub struct Child {
    pid: Pid,
    reaped: bool,
    /// The child leads a process group of its own ([`spawn_group`]): killing it kills the group too.
    group: bool,
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It called `_exit(code)`.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl Child {
    /// The child's process id.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Sends SIGKILL (no effect if the child already exited; it stays a zombie until reaped); to its whole
    /// process group too when it leads one ([`spawn_group`]), so that the commands it started die with it.
    pub fn kill(&self) {
        if !self.reaped {
            if self.group {
                let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
            }
            let _ = rustix::process::kill_process(self.pid, Signal::KILL);
        }
    }

    /// Whether the child was reaped (by [`Child::try_wait`], [`Child::wait`] or [`Child::kill_and_wait`]).
    pub fn is_reaped(&self) -> bool {
        self.reaped
    }

    /// Reaps the child if it has exited; `None` while it still runs.
    pub fn try_wait(&mut self) -> Result<Option<Exit>, Errno> {
        if self.reaped {
            return Err(Errno::CHILD);
        }
        match rustix::process::waitpid(Some(self.pid), WaitOptions::NOHANG)? {
            None => Ok(None),
            Some((_, st)) => {
                self.reaped = true;
                Ok(Some(decode(st)))
            }
        }
    }

    /// Waits until the child exits, polling so that Ctrl-C can interrupt the wait. On interruption the child is
    /// left to the guard (killed on drop).
    pub fn wait(&mut self) -> Result<Exit, anyhow::Error> {
        loop {
            if let Some(e) = self.try_wait()? {
                return Ok(e);
            }
            check_interrupted()?;
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kills the child and reaps it.
    pub fn kill_and_wait(&mut self) {
        if self.reaped {
            return;
        }
        self.kill();
        while let Err(Errno::INTR) = rustix::process::waitpid(Some(self.pid), WaitOptions::empty()) {}
        self.reaped = true;
    }
}

fn decode(st: rustix::process::WaitStatus) -> Exit {
    if let Some(code) = st.exit_status() {
        Exit::Code(code)
    } else {
        Exit::Signal(st.terminating_signal().unwrap_or(0))
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill_and_wait();
    }
}

/// Forks a child that runs `f` and exits with the code it returns (101 if it panics).
///
/// The child first arranges to be SIGKILLed if its parent dies, restores default SIGINT/SIGTERM handling, and
/// never returns from this function. See the module documentation for what `f` may do.
pub fn spawn<F: FnOnce() -> i32>(f: F) -> Result<Child, Errno> {
    fork_child(f, false)
}

/// [`spawn`], the child leading a process group of its own (`setpgid`, made by both the child and the parent,
/// so that it holds whichever runs first): the commands it starts join the group, and [`Child::kill`] (hence
/// the guard's drop) kills them all. A child in its own group does not get the terminal's Ctrl-C; its parent
/// does and kills it.
pub fn spawn_group<F: FnOnce() -> i32>(f: F) -> Result<Child, Errno> {
    fork_child(f, true)
}

fn fork_child<F: FnOnce() -> i32>(f: F, group: bool) -> Result<Child, Errno> {
    let parent = rustix::process::getpid();
    // SAFETY: fork has no memory-safety preconditions by itself; the child only runs `f` and `_exit`s (see the
    // module docs for why `f` is restricted to fork-safe work).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
    }
    if pid == 0 {
        let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
        if rustix::process::getppid() != Some(parent) {
            // The parent died before the death signal was armed.
            // SAFETY: `_exit` ends the process at once without running the parent's destructors.
            unsafe { libc::_exit(1) };
        }
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: restoring the default disposition of a signal is always valid.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        if group {
            let _ = rustix::process::setpgid(None, None);
        }
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: `_exit` ends the child without unwinding into (or running destructors of) the parent's frames,
        // which the child has copies of but does not own.
        unsafe { libc::_exit(code) };
    }
    let pid = Pid::from_raw(pid).expect("fork returned a positive pid");
    if group {
        // Fails only when the child already made itself a leader (EACCES after an exec does not apply: it does not
        // exec) or exited; either way the group is as wanted or gone.
        let _ = rustix::process::setpgid(Some(pid), Some(pid));
    }
    Ok(Child { pid, reaped: false, group })
}

/// Children that are stopped together: [`Children::stop`] (and the drop) first sends SIGKILL to every one,
/// then reaps them. Killing and reaping one after the other would wait, for each, until the dying child next
/// gets its CPU; with a thousand busy tasks spinning on one CPU that is a scheduler period per child.
#[derive(Debug, Default)]
pub struct Children {
    list: Vec<Child>,
}

impl Children {
    /// No children.
    pub fn new() -> Children {
        Children::default()
    }

    /// Adds a child; returns its index.
    pub fn push(&mut self, c: Child) -> usize {
        self.list.push(c);
        self.list.len() - 1
    }

    /// The number of children.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Child `i`.
    pub fn get_mut(&mut self, i: usize) -> &mut Child {
        &mut self.list[i]
    }

    /// Kills every child, then reaps every one.
    pub fn stop(&mut self) {
        for c in &self.list {
            c.kill();
        }
        for c in &mut self.list {
            c.kill_and_wait();
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An array of `AtomicU64` words in memory shared between a parent and the children it forks afterwards.
#[derive(Debug)]
pub struct SharedSlots {
    addr: usize,
    len: usize,
    bytes: usize,
}

impl SharedSlots {
    /// Maps `len` zeroed words shared with future children.
    pub fn new(len: usize) -> Result<Self, Errno> {
        let page = crate::sys::page_size();
        let bytes = (len.max(1) * 8).div_ceil(page) * page;
        let addr = crate::sys::map_shared_anon(bytes)?;
        Ok(Self { addr, len, bytes })
    }

    /// The number of words.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no words.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Word `i`. Panics if `i` is out of range (a programming error, not input).
    pub fn get(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len, "shared slot {i} out of range {}", self.len);
        // SAFETY: the mapping is at least `len * 8` bytes, page-aligned (so 8-aligned), zero-initialised (a valid
        // AtomicU64) and lives as long as `self`; shared access goes only through atomics.
        unsafe { &*((self.addr + i * 8) as *const AtomicU64) }
    }
}

impl Drop for SharedSlots {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `new`, and every reference handed out borrows `self`, so none is live.
        let _ = unsafe { crate::sys::unmap(self.addr, self.bytes) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_exit_code_and_shared_word() {
        let slots = SharedSlots::new(4).unwrap();
        let mut c = spawn(|| {
            // Release: publishes nothing else; the parent reads the word after reaping the child.
            slots.get(2).store(42, Ordering::Release);
            7
        })
        .unwrap();
        assert_eq!(c.wait().unwrap(), Exit::Code(7));
        // Acquire: pairs with the child's release store (waitpid already orders it; kept for clarity).
        assert_eq!(slots.get(2).load(Ordering::Acquire), 42);
    }

    #[test]
    fn dropped_guard_kills_a_running_child() {
        let c = spawn(|| {
            loop {
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .unwrap();
        let pid = c.pid();
        drop(c);
        // The pid is reaped: signalling it fails with ESRCH (pid reuse within this window is practically nil).
        assert_eq!(rustix::process::test_kill_process(pid), Err(Errno::SRCH));
    }

    #[test]
    fn a_group_dies_with_its_leader() {
        let slots = SharedSlots::new(1).unwrap();
        let mut group = Children::new();
        group.push(
            spawn_group(|| {
                // A grandchild in the leader's group, as a command started by an agent loop is.
                let Ok(mut c) = std::process::Command::new("sleep").arg("60").spawn() else { return 1 };
                // Relaxed: the parent polls this word; nothing else is published through it.
                slots.get(0).store(u64::from(c.id()), Ordering::Relaxed);
                let _ = c.wait();
                0
            })
            .unwrap(),
        );
        let t = Instant::now();
        // Relaxed: see the store above.
        while slots.get(0).load(Ordering::Relaxed) == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "the grandchild did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Relaxed: see the store above.
        let grandchild = Pid::from_raw(slots.get(0).load(Ordering::Relaxed) as i32).unwrap();
        group.stop();
        // The grandchild is not ours to reap: it is gone once its new parent (init or a subreaper) reaps it.
        let t = Instant::now();
        while rustix::process::test_kill_process(grandchild).is_ok()
            && std::fs::read_to_string(format!("/proc/{}/stat", grandchild.as_raw_nonzero()))
                .is_ok_and(|s| !s.contains(") Z "))
        {
            assert!(t.elapsed() < Duration::from_secs(10), "the group's grandchild outlived it");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn panicking_child_exits_101() {
        let mut c = spawn(|| panic!("child panics")).unwrap();
        assert_eq!(c.wait().unwrap(), Exit::Code(101));
    }
}
