//! [`KernelTarget`]: the [`Target`] whose ops are the live kernel's system calls, made by the runner child on its
//! own address space. "Module docs" below means the docs of the `replay` module (`mod.rs`), whose sections
//! "Calls", "Memory accesses", "mlockall, munlockall and protection keys", "smaps and PROCMAP_QUERY" and "Never
//! run" describe what this file does.
//!
//! Invariants:
//! - every call is the raw system call with the script's values unchanged, so the kernel validates them in its
//!   own order; a return of -1 with `errno` is the call's error, never a panic of the runner;
//! - a call that can change memory is guarded first (`guard.rs`): it never acts on a mapping of the runner's
//!   own, and the pages the script's own calls map outside the arena are recorded so that later calls on them
//!   run;
//! - memory accesses go page by page through [`crate::uaccess`] and stop at the first page that faults; a
//!   fault whose address is not in that page stops the run as a runner bug;
//! - MADV_HWPOISON and MADV_SOFT_OFFLINE never reach the kernel: [`refused_before_running`] refuses the script
//!   before anything forks, and the target's madvise refuses the call again;
//! - `maps`, `smaps` and the guard read `/proc/self/*` through a buffer allocated once when the child starts,
//!   and return only what overlaps the arena: near `max_map_count` a new allocation could need a VMA the
//!   process may not have.

use super::guard::{Ranges, is_mapped};
use super::runner::{EXIT_REFUSED, arm_death_signal};
use super::{PAGE, TASK_SIZE, errno_of, last_errno, page_align, read_maps, syscall_result, write_all};
use crate::uaccess;
use rustix::fd::{AsRawFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::ffi::c_void;
use std::path::PathBuf;
use vmspace_abi::{Advice, MapFlags, MremapFlags, Prot};
use vmspace_script::{
    Arena, CallError, ContentHash, Errno, Fd, Op, Outcome, QueryAnswer, QueryRequest, Script, Target,
};

/// The [`Target`] that issues real syscalls on the calling process. Only ever used inside the child that
/// [`replay_kernel_in`](super::replay_kernel_in) forks (its calls change the calling process's address space).
pub struct KernelTarget {
    pub(super) dir: PathBuf,
    pub(super) dir_fd: OwnedFd,
    /// (NAME, open file) in creation order.
    pub(super) files: Vec<(String, OwnedFd)>,
    pub(super) arena: Arena,
    /// Where a refusal message goes before the process exits.
    pub(super) out: OwnedFd,
    /// The buffer `/proc/self/maps` is read into, allocated once at the start: near `max_map_count` a new
    /// allocation could need a VMA the process may not have.
    pub(super) maps_buf: Vec<u8>,
    /// The pages outside the arena that the script's own calls mapped (module docs, "Guard").
    pub(super) script_pages: Ranges,
    /// A page of the runner's own whose `MADV_FREE` drains this CPU's page batches (module docs, "smaps and
    /// PROCMAP_QUERY").
    pub(super) scratch: u64,
}

impl KernelTarget {
    fn file_fd(&self, name: &str) -> Option<&OwnedFd> {
        self.files.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    /// Stops the run: writes `msg` to the pipe and exits the process with [`EXIT_REFUSED`].
    pub(super) fn refuse(&self, msg: String) -> ! {
        write_all(&self.out, msg.as_bytes());
        // SAFETY: _exit ends the process at once; nothing of this process is needed afterwards.
        unsafe { libc::_exit(EXIT_REFUSED) }
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

    /// The descriptor a script's `fd=`/`ftruncate` NAME passes: the file's if this target holds it, else
    /// [`CLOSED_FD`].
    fn fd_of(&self, name: &str) -> libc::c_long {
        self.file_fd(name).map_or(libc::c_long::from(CLOSED_FD), |f| libc::c_long::from(f.as_raw_fd()))
    }
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
