//! User-mode memory accesses that survive their faults: how the op-script runner ([`crate::replay`]) makes
//! `touch`, `fill` and `check` real CPU loads and stores and still reports the first page that faults instead
//! of dying of SIGSEGV or SIGBUS.
//!
//! # The kernel's exception tables, in user space
//!
//! The kernel copies to and from user memory with instructions that may fault (`copy_from_user`,
//! `clear_user`); each such instruction has an entry in an exception table (`arch/x86/include/asm/asm.h:
//! _ASM_EXTABLE`: the faulting instruction's address and a fix-up address, both as 32-bit offsets from the entry
//! itself), and the page-fault handler (`arch/x86/mm/extable.c: fixup_exception`) that finds the faulting
//! RIP in the table moves RIP to the fix-up instead of oopsing. This module does the same in the runner:
//!
//! - Every accessor is an inline `asm!` block with one instruction that may fault, labelled `2:`, and a fix-up
//!   point after it, labelled `3:`. The block adds `(2b - ., 3b - .)` to the section `vmspace_extable` (two
//!   PC-relative `.long`s, resolved by the linker: no dynamic relocation, and a compiler that duplicates the
//!   block duplicates its entry with it). The linker gathers the entries between `__start_vmspace_extable` and
//!   `__stop_vmspace_extable`. The section is `"aR"`: allocated, and `SHF_GNU_RETAIN`, so `--gc-sections`
//!   keeps it although no code refers to it but the two bounds.
//! - Each accessor keeps a count of bytes not yet done in RCX, as `copy_from_user` returns one: `rep movsb` and
//!   `rep stosb` count RCX down themselves (on a fault the CPU leaves it at the bytes left); the one-byte write
//!   sets RCX to 1 and clears it after the access, an instruction the fix-up skips. RCX not zero after the
//!   block means a fault.
//! - [`install`] sets the handler for SIGSEGV and SIGBUS (`SA_SIGINFO | SA_ONSTACK`). For a fault the kernel
//!   raised (`si_code > 0`) at an address of the table, the handler records `si_addr`, `si_signo` and `si_code`
//!   (read back by [`Fault`]) and moves the saved RIP (`uc_mcontext.gregs[REG_RIP]`) to the entry's fix-up;
//!   returning from the handler resumes there. Any other SIGSEGV or SIGBUS is not the accessors': the handler
//!   puts back the disposition that was there before [`install`] (Rust's stack-overflow handler, or the
//!   default) and returns; the faulting instruction faults again and that disposition handles it as if this
//!   handler had never existed (a signal another process sent, `si_code <= 0`, is raised again instead).
//!
//! What a fault reports: a page the CPU cannot access for the access made (SIGSEGV: no VMA and no stack to
//! grow, a protection that forbids it, a guard region; SIGBUS: a file page beyond the end of the file, a hugetlb
//! page the pool cannot give). `si_addr` is the faulting byte, except for an address that is not canonical
//! (from 2^47 up to the kernel half), where the CPU raises #GP instead of a page fault and the kernel reports
//! SIGSEGV with `si_code` `SI_KERNEL` and `si_addr` 0.
//!
//! # The write that keeps contents
//!
//! `touch w` must be a write access (the CPU's write fault: copy-on-write of a private page, dirtying, SIGSEGV
//! on a read-only page) that leaves the byte as it was, so that the contents `fill` writes and `check` hashes
//! are not disturbed. [`write_keep`] is `lock add byte ptr [p], 0`: an x86 read-modify-write always performs
//! its write access (the page fault's error code has the W bit even though the value does not change), and the
//! `lock` makes the read and the write one atomic operation, so even a concurrent writer (another process
//! sharing the page) cannot have a store undone by it.
//!
//! # Who uses it
//!
//! Only the runner child ([`crate::replay`]) calls [`install`], before its first access, and the processes a
//! script forks inherit the handler with the rest of the address space (`fork` keeps signal dispositions and
//! the section's addresses). The tests of this module do the same in a forked child. The parent process (the
//! CLI or a test harness, with other threads and other fault handlers) never installs it. The accessors refuse
//! to run ([`Fault`] is never faked) in a process that has not installed it: they panic, since a fault there
//! would end the process.

use core::arch::asm;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering, compiler_fence};

/// One entry of the exception table: the faulting instruction and its fix-up, each as the offset from the
/// field itself (`arch/x86/include/asm/extable.h: struct exception_table_entry`'s `insn` and `fixup`).
#[repr(C)]
struct Entry {
    fault: i32,
    fixup: i32,
}

unsafe extern "C" {
    /// The first entry of `vmspace_extable` (the linker defines the bounds of a section whose name is a C
    /// identifier).
    static __start_vmspace_extable: Entry;
    /// One past the last entry.
    static __stop_vmspace_extable: Entry;
}

/// The entries of the table.
fn entries() -> &'static [Entry] {
    let start = &raw const __start_vmspace_extable;
    let stop = &raw const __stop_vmspace_extable;
    // SAFETY: the linker places every `vmspace_extable` entry (8 bytes, 4-aligned, emitted by the accessors
    // below) contiguously between the two bounds; the section is read-only and lives as long as the program.
    unsafe { core::slice::from_raw_parts(start, (stop as usize - start as usize) / size_of::<Entry>()) }
}

/// The fix-up address of the accessor whose faulting instruction is at `ip`, if any.
fn fixup_for(ip: u64) -> Option<u64> {
    entries().iter().find_map(|e| {
        let at = |field: &i32| (field as *const i32 as u64).wrapping_add(*field as i64 as u64);
        (at(&e.fault) == ip).then(|| at(&e.fixup))
    })
}

/// Set by [`install`] in the process that called it (and inherited by its forks).
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The SIGSEGV and SIGBUS dispositions before [`install`], put back for faults that are not the accessors'.
static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();
/// The last fault the handler fixed up: `si_addr`, `si_signo`, `si_code`.
static FAULT_ADDR: AtomicU64 = AtomicU64::new(0);
static FAULT_SIGNO: AtomicI32 = AtomicI32::new(0);
static FAULT_CODE: AtomicI32 = AtomicI32::new(0);

/// A fault an accessor met: what the kernel's `siginfo` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// `si_addr`: the faulting byte (0 for a non-canonical address, module docs).
    pub addr: u64,
    /// `si_signo`: SIGSEGV or SIGBUS.
    pub signo: i32,
    /// `si_code`: `SEGV_MAPERR`, `SEGV_ACCERR`, `BUS_ADRERR`, `SI_KERNEL`, ...
    pub code: i32,
}

impl Fault {
    /// Whether this fault is one of an access to the page at `page`: `si_addr` lies in it, or the address
    /// was not canonical (`SI_KERNEL`, `si_addr` 0: a #GP has no faulting address).
    pub fn is_in_page(&self, page: u64) -> bool {
        self.addr & !4095 == page || (self.addr == 0 && self.code == libc::SI_KERNEL && page >= 1 << 47)
    }
}

/// The handler (module docs). Runs on the thread that faulted, in the middle of an accessor or of code that is
/// not an accessor.
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t and ucontext_t for an SA_SIGINFO handler; the handler only
    // reads them, writes the saved RIP (which the kernel restores on return) and makes async-signal-safe
    // calls: lock-free atomic stores, a read of the immutable exception table, a `OnceLock::get` (an atomic
    // load of a value set before the handler was installed), `sigaction` and `raise`. It allocates nothing and
    // takes no lock, so it cannot deadlock with whatever it interrupted.
    unsafe {
        let uc = ctx.cast::<libc::ucontext_t>();
        let rip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
        let code = (*info).si_code;
        if code > 0
            && let Some(fixup) = fixup_for(*rip as u64)
        {
            // Relaxed: read back by the accessor on this same thread after the handler returns; only compiler
            // reordering could interfere, which the accessor's `compiler_fence` and its asm block rule out.
            FAULT_ADDR.store((*info).si_addr() as u64, Ordering::Relaxed);
            FAULT_SIGNO.store(sig, Ordering::Relaxed);
            FAULT_CODE.store(code, Ordering::Relaxed);
            *rip = fixup as i64;
            return;
        }
        // Not an accessor's fault: give the signal back to the disposition it had before.
        let i = usize::from(sig == libc::SIGBUS);
        match PREVIOUS.get() {
            Some(prev) => libc::sigaction(sig, &prev[i], core::ptr::null_mut()),
            None => {
                let mut dfl: libc::sigaction = core::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, core::ptr::null_mut())
            }
        };
        if code <= 0 {
            // Sent by a process (kill, raise): returning would not repeat it.
            libc::raise(sig);
        }
    }
}

/// Installs the fault handler for SIGSEGV and SIGBUS in this process (module docs, "Who uses it"): only the
/// runner child calls it. Idempotent.
pub fn install() -> std::io::Result<()> {
    if INSTALLED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut prev: [libc::sigaction; 2] = [
        // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask, no flags) to be overwritten.
        unsafe { core::mem::zeroed() },
        // SAFETY: as above.
        unsafe { core::mem::zeroed() },
    ];
    for (i, sig) in [libc::SIGSEGV, libc::SIGBUS].into_iter().enumerate() {
        // SAFETY: a query of the current disposition into a valid out-pointer.
        if unsafe { libc::sigaction(sig, core::ptr::null(), &mut prev[i]) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // The previous dispositions are stored before the handler that reads them can run.
    let _ = PREVIOUS.set(prev);
    // SAFETY: an all-zero sigaction is valid; the fields are then set.
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = on_fault as *const () as libc::sighandler_t;
    // SA_ONSTACK: a fault that is not the accessors' may be a stack overflow, which needs the alternate stack
    // (Rust's runtime sets one up) to run any handler at all. Other signals stay unblocked; the handler's own
    // signal is blocked while it runs (no SA_NODEFER).
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        // SAFETY: installs `on_fault`, which is async-signal-safe (its SAFETY comment) and handles only the
        // accessors' faults, passing every other one on; called in the runner child only (module docs).
        if unsafe { libc::sigaction(sig, &sa, core::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // Relaxed: read by this process's own accessors (and inherited by fork); orders nothing else.
    INSTALLED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether [`install`] ran in this process (or the process it was forked from).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

fn require_installed() {
    assert!(installed(), "uaccess: an accessor ran without the fault handler (uaccess::install)");
    // Relaxed: this thread's own handler writes it; see `on_fault`.
    FAULT_SIGNO.store(0, Ordering::Relaxed);
}

/// The fault the handler recorded if the accessor left `left` bytes not done.
fn result(left: usize) -> Result<(), Fault> {
    // The handler ran on this thread between the store in `require_installed` and here: only the compiler
    // could reorder these loads before the asm block (it cannot: the block is not `nomem`); the fence says so.
    compiler_fence(Ordering::SeqCst);
    if left == 0 {
        return Ok(());
    }
    // Relaxed: stored by the handler on this thread (`on_fault`).
    let signo = FAULT_SIGNO.load(Ordering::Relaxed);
    assert!(signo != 0, "uaccess: {left} bytes left but no fault recorded");
    Err(Fault { addr: FAULT_ADDR.load(Ordering::Relaxed), signo, code: FAULT_CODE.load(Ordering::Relaxed) })
}

/// Reads `dst.len()` bytes at the user address `src` into `dst` with the CPU (`rep movsb`, as
/// `copy_from_user`), stopping at the first byte that faults. A read needs any of read, write or execute
/// permission (x86 page tables cannot express write-only or execute-only pages without protection keys).
/// Panics if the handler is not installed.
pub fn read(dst: &mut [u8], src: u64) -> Result<(), Fault> {
    require_installed();
    let left: usize;
    // SAFETY: `dst` is a live, exclusively borrowed buffer of `dst.len()` bytes: the only memory written. The
    // source may be any address: a byte that cannot be read faults, and the handler (installed: checked above)
    // resumes at label 3 with RCX the bytes not copied. Reading memory changes nothing the Rust program owns;
    // the runner is single-threaded, so no other thread writes the bytes read.
    unsafe {
        asm!(
            "2: rep movsb",
            "3:",
            ".pushsection vmspace_extable, \"aR\"",
            ".balign 4",
            ".long 2b - .",
            ".long 3b - .",
            ".popsection",
            inout("rcx") dst.len() => left,
            inout("rdi") dst.as_mut_ptr() => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags),
        );
    }
    result(left)
}

/// Writes `len` copies of `byte` from the user address `dst` on with the CPU (`rep stosb`, as `clear_user`),
/// stopping at the first byte that faults (the bytes before it are written). Panics if the handler is not
/// installed.
///
/// # Safety
///
/// `[dst, dst + len)` must hold no memory the Rust program uses (only script mappings: the runner's guard
/// refuses ranges that reach its own memory).
pub unsafe fn fill(dst: u64, len: usize, byte: u8) -> Result<(), Fault> {
    require_installed();
    let left: usize;
    // SAFETY: the caller guarantees the range is none of the program's memory; a byte that cannot be written
    // faults and the handler resumes at label 3 with RCX the bytes not written.
    unsafe {
        asm!(
            "2: rep stosb",
            "3:",
            ".pushsection vmspace_extable, \"aR\"",
            ".balign 4",
            ".long 2b - .",
            ".long 3b - .",
            ".popsection",
            inout("rcx") len => left,
            inout("rdi") dst => _,
            in("al") byte,
            options(nostack, preserves_flags),
        );
    }
    result(left)
}

/// A write access to the byte at `addr` that keeps its value (module docs, "The write that keeps contents"):
/// `lock add byte ptr [addr], 0`. Panics if the handler is not installed.
///
/// # Safety
///
/// `addr` must be none of the memory the Rust program uses; its value does not change, but the write is
/// still a write (a concurrent non-atomic access by the program would be a data race).
pub unsafe fn write_keep(addr: u64) -> Result<(), Fault> {
    require_installed();
    let left: usize;
    // SAFETY: the caller guarantees `addr` is none of the program's memory; the locked add of 0 keeps the
    // byte. On a fault the handler resumes at label 3, skipping the `xor`, so RCX stays 1.
    unsafe {
        asm!(
            "2: lock add byte ptr [{p}], 0",
            "xor ecx, ecx",
            "3:",
            ".pushsection vmspace_extable, \"aR\"",
            ".balign 4",
            ".long 2b - .",
            ".long 3b - .",
            ".popsection",
            p = in(reg) addr,
            inout("rcx") 1usize => left,
            options(nostack),
        );
    }
    result(left)
}

/// Whether this CPU sets a page's accessed bit when a string store (`rep stosb`, what [`fill`] runs) is refused
/// by the page's protection: the x86 manuals leave it to the implementation, and machines differ (an older host
/// of this project set it; an Intel Xeon with fast short `rep mov` measured 2026-11-25 does not). Measured once
/// per process, in a child: an anonymous page is written, made read-only and aged (`MADV_COLD` clears its
/// accessed bit), a one-byte `fill` of it faults, and the page's smaps `Referenced` tells. `None` if the
/// measurement could not be made. The engine's op-script target takes the answer
/// (`MmConfig::refused_string_store_accessed`), as the kernel runner's `fill` behaves so.
pub fn refused_string_store_sets_accessed() -> Option<bool> {
    static ANSWER: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| {
        let mut child = crate::child::spawn(|| match measure_refused_string_store() {
            Some(true) => 1,
            Some(false) => 2,
            None => 3,
        })
        .ok()?;
        match child.wait().ok()? {
            crate::child::Exit::Code(1) => Some(true),
            crate::child::Exit::Code(2) => Some(false),
            _ => None,
        }
    })
}

/// The child's half of [`refused_string_store_sets_accessed`].
fn measure_refused_string_store() -> Option<bool> {
    use rustix::mm::{Advice, MapFlags, MprotectFlags, ProtFlags, madvise, mmap_anonymous, mprotect};
    install().ok()?;
    let len = 4096;
    // SAFETY: a new private anonymous mapping at an address the kernel picks; nothing else refers to it.
    let p = unsafe {
        mmap_anonymous(core::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)
    }
    .ok()?;
    // SAFETY: the page was just mapped read-write and is ours alone.
    unsafe { p.cast::<u8>().write_volatile(1) };
    // SAFETY: protection and advice on our own mapping.
    unsafe { mprotect(p, len, MprotectFlags::READ) }.ok()?;
    // SAFETY: as above.
    unsafe { madvise(p, len, Advice::LinuxCold) }.ok()?;
    // SAFETY: the range is the probe's own mapping, which the program's memory does not use.
    let refused = unsafe { fill(p as u64, 1, 0) }.is_err();
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let rec = vmspace_proc::parse_smaps(&smaps).ok()?.into_iter().find(|r| r.header.start == p as u64)?;
    refused.then_some(())?;
    Some(rec.stats.referenced > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::{Exit, SharedSlots, spawn};

    const PAGE: u64 = 4096;

    /// Runs `f` in a forked child that installed the handler; `f` writes its results into the slots.
    fn in_child(slots: usize, f: impl FnOnce(&SharedSlots)) -> Vec<u64> {
        let s = SharedSlots::new(slots).unwrap();
        let mut c = spawn(|| {
            install().unwrap();
            f(&s);
            0
        })
        .unwrap();
        assert_eq!(c.wait().unwrap(), Exit::Code(0), "the child failed");
        (0..slots).map(|i| s.get(i).load(Ordering::Relaxed)).collect()
    }

    fn map(len: u64, prot: i32, flags: i32) -> u64 {
        // SAFETY: a fresh anonymous mapping nothing refers to.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len as usize, prot, flags, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }

    /// Packs a fault (or success) into one word for the parent: signo << 32 | code, or 0.
    fn code(r: Result<(), Fault>, page: u64) -> u64 {
        match r {
            Ok(()) => 0,
            Err(f) => {
                assert!(f.is_in_page(page), "{f:?} not in {page:#x}");
                ((f.signo as u64) << 32) | f.code as u32 as u64
            }
        }
    }

    const SEGV_MAPERR: u64 = (libc::SIGSEGV as u64) << 32 | 1;
    const SEGV_ACCERR: u64 = (libc::SIGSEGV as u64) << 32 | 2;
    const BUS_ADRERR: u64 = (libc::SIGBUS as u64) << 32 | 2;

    #[test]
    fn the_table_holds_the_accessors() {
        // Three accessors, one entry each (more if the compiler duplicated a block); each fault label has a
        // fix-up after it, close by.
        let e = entries();
        assert!(e.len() >= 3, "{} entries", e.len());
        for x in e {
            let at = |f: &i32| (f as *const i32 as u64).wrapping_add(*f as i64 as u64);
            assert!(at(&x.fixup) > at(&x.fault) && at(&x.fixup) - at(&x.fault) < 16);
            assert_eq!(fixup_for(at(&x.fault)), Some(at(&x.fixup)));
        }
        assert_eq!(fixup_for(0), None);
        assert!(!installed(), "the test process itself never installs the handler");
    }

    #[test]
    #[should_panic(expected = "without the fault handler")]
    fn accessors_refuse_to_run_without_the_handler() {
        let _ = read(&mut [0u8; 1], 0);
    }

    /// Every fault kind the runner meets, through each accessor, with the signal and code the kernel gave.
    #[test]
    fn faults_are_caught_with_their_signal() {
        let r = in_child(16, |s| {
            let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let a = map(6 * PAGE, libc::PROT_READ | libc::PROT_WRITE, anon);
            // Page 1 unmapped, page 2 PROT_NONE, page 3 read-only, page 4 write-only, page 5 exec-only.
            // SAFETY: changes to our own fresh mapping.
            unsafe {
                libc::munmap((a + PAGE) as *mut _, PAGE as usize);
                libc::mprotect((a + 2 * PAGE) as *mut _, PAGE as usize, libc::PROT_NONE);
                libc::mprotect((a + 3 * PAGE) as *mut _, PAGE as usize, libc::PROT_READ);
                libc::mprotect((a + 4 * PAGE) as *mut _, PAGE as usize, libc::PROT_WRITE);
                libc::mprotect((a + 5 * PAGE) as *mut _, PAGE as usize, libc::PROT_EXEC);
            }
            let mut b = [0u8; 8];
            let put = |i: usize, v: u64| s.get(i).store(v, Ordering::Relaxed);
            put(0, code(read(&mut b, a + PAGE), a + PAGE));
            // SAFETY: the child's own script-like mappings; no Rust object lives there.
            unsafe {
                put(1, code(write_keep(a + PAGE), a + PAGE));
                put(2, code(read(&mut b, a + 2 * PAGE), a + 2 * PAGE));
                put(3, code(write_keep(a + 2 * PAGE), a + 2 * PAGE));
                put(4, code(read(&mut b, a + 3 * PAGE), a + 3 * PAGE));
                put(5, code(write_keep(a + 3 * PAGE), a + 3 * PAGE));
                put(6, code(read(&mut b, a + 4 * PAGE), a + 4 * PAGE));
                put(7, code(read(&mut b, a + 5 * PAGE), a + 5 * PAGE));
                put(8, code(fill(a + 5 * PAGE, 1, 1), a + 5 * PAGE));
                // Beyond the end of a file: SIGBUS.
                let fd = libc::memfd_create(c"uaccess".as_ptr(), 0);
                libc::ftruncate(fd, 100);
                let f = libc::mmap(
                    core::ptr::null_mut(),
                    2 * PAGE as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                ) as u64;
                put(9, code(read(&mut b, f), f));
                put(10, code(read(&mut b, f + PAGE), f + PAGE));
                put(11, code(fill(f + PAGE, 1, 7), f + PAGE));
                // A read across into a bad page stops there: the bytes before it were copied.
                let mut two = [0u8; 2 * 4096];
                let r = read(&mut two, a);
                put(12, code(r, a + PAGE));
                // A non-canonical address: #GP, SIGSEGV SI_KERNEL with si_addr 0.
                put(13, code(read(&mut b, 1 << 47), 1 << 47));
                // A guard region (MADV_GUARD_INSTALL = 102).
                put(14, u64::from(libc::madvise(a as *mut _, PAGE as usize, 102) == 0));
                put(15, code(read(&mut b, a), a));
            }
        });
        assert_eq!(r[0], SEGV_MAPERR, "read unmapped");
        assert_eq!(r[1], SEGV_MAPERR, "write unmapped");
        assert_eq!(r[2], SEGV_ACCERR, "read PROT_NONE");
        assert_eq!(r[3], SEGV_ACCERR, "write PROT_NONE");
        assert_eq!(r[4], 0, "read r--");
        assert_eq!(r[5], SEGV_ACCERR, "write r--");
        assert_eq!(r[6], 0, "read -w-: x86 cannot express write-only");
        assert_eq!(r[7], 0, "read --x: x86 cannot express exec-only without PKU");
        assert_eq!(r[8], SEGV_ACCERR, "fill --x");
        assert_eq!(r[9], 0, "read inside the file");
        assert_eq!(r[10], BUS_ADRERR, "read beyond the end of the file");
        assert_eq!(r[11], BUS_ADRERR, "write beyond the end of the file");
        assert_eq!(r[12], SEGV_MAPERR, "a read across pages faults at the first bad one");
        assert_eq!(r[13], (libc::SIGSEGV as u64) << 32 | libc::SI_KERNEL as u32 as u64, "non-canonical");
        assert_eq!(r[14], 1, "guard install");
        assert_eq!(r[15] >> 32, libc::SIGSEGV as u64, "guard region");
    }

    /// Contents: fill writes, read reads them back, write_keep keeps them, a fault stops mid-way.
    #[test]
    fn fill_read_and_write_keep_move_the_right_bytes() {
        let r = in_child(6, |s| {
            let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let a = map(3 * PAGE, libc::PROT_READ | libc::PROT_WRITE, anon);
            // SAFETY: the child's own mapping; page 2 made read-only.
            unsafe { libc::mprotect((a + 2 * PAGE) as *mut _, PAGE as usize, libc::PROT_READ) };
            let put = |i: usize, v: u64| s.get(i).store(v, Ordering::Relaxed);
            // SAFETY: the child's own mapping; no Rust object lives there.
            unsafe {
                put(0, code(fill(a + 10, 2 * PAGE as usize, 0x5a), a + 2 * PAGE));
                put(1, code(write_keep(a + 11), a));
            }
            let mut buf = vec![0u8; 2 * PAGE as usize];
            put(2, code(read(&mut buf, a), a));
            // Bytes [10, 8192) are 0x5a, the first ten are 0: the fill stopped at the read-only page.
            put(3, u64::from(buf[..10].iter().all(|&b| b == 0) && buf[10..].iter().all(|&b| b == 0x5a)));
            let mut third = [1u8; 16];
            put(4, code(read(&mut third, a + 2 * PAGE), a + 2 * PAGE));
            put(5, u64::from(third.iter().all(|&b| b == 0)));
        });
        assert_eq!(r[0], SEGV_ACCERR, "the fill ran into the read-only page");
        assert_eq!(r[1..], [0, 0, 1, 0, 1]);
    }

    /// A fault that is not an accessor's still kills the process with its signal.
    #[test]
    fn other_faults_keep_their_disposition() {
        let mut c = spawn(|| {
            install().unwrap();
            let p = map(PAGE, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS);
            // SAFETY: deliberately faults outside any accessor: the process must die of SIGSEGV.
            unsafe { core::ptr::read_volatile(p as *const u8) };
            0
        })
        .unwrap();
        assert_eq!(c.wait().unwrap(), Exit::Signal(libc::SIGSEGV));
    }
}
