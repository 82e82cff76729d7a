//! Decoding a stopped memory call: the system call number and its six argument registers into the op-script
//! [`Op`] that the engine applies, or into the class of call the shadow handles otherwise.
//!
//! The x86-64 system call ABI passes the number in `orig_rax` and the arguments in `rdi`, `rsi`, `rdx`, `r10`,
//! `r8`, `r9`; the kernel takes `int` arguments from the low 32 bits of their register (`SYSCALL_DEFINE`'s
//! casts), which the decoder does too. Every argument keeps its raw bits (`from_bits_retain`, raw advice), so an
//! unknown flag reaches the engine as it reached the kernel, which must answer it with the same errno.
//!
//! A file mapping names its descriptor as the script file `fdN` (N the descriptor number): the shadow binds
//! that name to the file the descriptor refers to when the call stops ([`super::fd_file`]).

use vmspace_abi::{Advice, MapFlags, MremapFlags, Prot};
use vmspace_script::{Fd, Op};

/// `PR_SET_VMA` (`include/uapi/linux/prctl.h`).
pub const PR_SET_VMA: u64 = 0x5356_4d41;
/// `PR_SET_VMA_ANON_NAME`.
pub const PR_SET_VMA_ANON_NAME: u64 = 0;
/// `PR_SET_MM`: changes `mm->start_brk`, `brk`, `start_stack`, ... (`kernel/sys.c: prctl_set_mm`).
pub const PR_SET_MM: u64 = 35;
/// `UFFDIO_REGISTER` (`include/uapi/linux/userfaultfd.h`): changes the flags of the VMAs of a range.
pub const UFFDIO_REGISTER: u64 = 0xc020_aa00;
/// `UFFDIO_UNREGISTER`.
pub const UFFDIO_UNREGISTER: u64 = 0x8010_aa01;
/// `map_shadow_stack` (x86-64; not in every libc's table).
pub const SYS_MAP_SHADOW_STACK: i64 = 453;
/// `mseal` (x86-64).
pub const SYS_MSEAL: i64 = 462;

/// The number of every call the filter stops at, with its name; `prctl` and `ioctl` stop only for the options
/// of [`is_memory_call`].
pub const TRAPPED: &[(i64, &str)] = &[
    (libc::SYS_mmap, "mmap"),
    (libc::SYS_munmap, "munmap"),
    (libc::SYS_mprotect, "mprotect"),
    (libc::SYS_pkey_mprotect, "pkey_mprotect"),
    (libc::SYS_mremap, "mremap"),
    (libc::SYS_madvise, "madvise"),
    (libc::SYS_process_madvise, "process_madvise"),
    (libc::SYS_brk, "brk"),
    (libc::SYS_mlock, "mlock"),
    (libc::SYS_mlock2, "mlock2"),
    (libc::SYS_munlock, "munlock"),
    (libc::SYS_mlockall, "mlockall"),
    (libc::SYS_munlockall, "munlockall"),
    (SYS_MSEAL, "mseal"),
    (libc::SYS_pkey_alloc, "pkey_alloc"),
    (libc::SYS_pkey_free, "pkey_free"),
    (libc::SYS_msync, "msync"),
    (libc::SYS_prctl, "prctl"),
    (libc::SYS_shmat, "shmat"),
    (libc::SYS_shmdt, "shmdt"),
    (libc::SYS_remap_file_pages, "remap_file_pages"),
    (libc::SYS_mbind, "mbind"),
    (libc::SYS_set_mempolicy_home_node, "set_mempolicy_home_node"),
    (SYS_MAP_SHADOW_STACK, "map_shadow_stack"),
    (libc::SYS_io_setup, "io_setup"),
    (libc::SYS_io_destroy, "io_destroy"),
    (libc::SYS_ioctl, "ioctl"),
    (libc::SYS_execve, "execve"),
    (libc::SYS_execveat, "execveat"),
    (libc::SYS_fork, "fork"),
    (libc::SYS_vfork, "vfork"),
    (libc::SYS_clone, "clone"),
    (libc::SYS_clone3, "clone3"),
    (libc::SYS_exit_group, "exit_group"),
];

/// The name of call `nr` ([`TRAPPED`]), `"syscall"` for another.
pub fn name_of(nr: i64) -> &'static str {
    TRAPPED.iter().find(|&&(n, _)| n == nr).map_or("syscall", |&(_, name)| name)
}

/// Whether call `nr` with arguments `args` is one the shadow stops at: every call of [`TRAPPED`] but `prctl`
/// (only `PR_SET_VMA` and `PR_SET_MM`) and `ioctl` (only userfaultfd's register and unregister). The seccomp
/// filter makes the same choice in the kernel ([`super::filter`]); the system-call-stop mode (`--pid`) makes it
/// here.
pub fn is_memory_call(nr: i64, args: &[u64; 6]) -> bool {
    match nr {
        libc::SYS_prctl => args[0] == PR_SET_VMA || args[0] == PR_SET_MM,
        libc::SYS_ioctl => args[1] == UFFDIO_REGISTER || args[1] == UFFDIO_UNREGISTER,
        _ => TRAPPED.iter().any(|&(n, _)| n == nr),
    }
}

/// What the shadow does with a stopped call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A call the engine models: the op it applies.
    Op(Op),
    /// A process-level call (fork, vfork, clone, clone3, execve, execveat, exit_group): the tracer's events
    /// say what it did (a new task, a new image, an exit); it is counted, not applied.
    Process,
    /// A call the engine does not model (mbind, SysV shm, userfaultfd registration, process_madvise,
    /// remap_file_pages, PR_SET_MM, ...): after it, the engine is resynchronised from the process.
    Unmodelled,
    /// A `prctl(PR_SET_VMA, ...)` whose name pointer could not be read (the kernel's answer is EFAULT, which
    /// changes nothing): compared by errno only.
    Unreadable,
}

/// Decodes call `nr` with argument registers `args`. `read_name` reads the NUL-terminated string at a tracee
/// address (`PR_SET_VMA_ANON_NAME`'s name), `None` if it cannot be read.
pub fn decode(nr: i64, args: &[u64; 6], read_name: impl FnOnce(u64) -> Option<String>) -> Decoded {
    let [a0, a1, a2, a3, a4, a5] = *args;
    let int = |v: u64| v as u32;
    let op = match nr {
        libc::SYS_mmap => {
            let flags = MapFlags::from_bits_retain(int(a3));
            let fd = int(a4) as i32;
            let file = if flags.contains(MapFlags::ANONYMOUS) {
                // The kernel ignores the descriptor of an anonymous mapping; the offset still matters
                // (`sys_mmap` refuses an unaligned one).
                (a5 != 0 || fd != -1).then_some((Fd::MinusOne, a5))
            } else if fd < 0 {
                Some((Fd::MinusOne, a5))
            } else {
                Some((Fd::Name(format!("fd{fd}")), a5))
            };
            Op::Mmap { addr: a0, len: a1, prot: Prot::from_bits_retain(int(a2)), flags, file }
        }
        libc::SYS_munmap => Op::Munmap { addr: a0, len: a1 },
        libc::SYS_mprotect => Op::Mprotect { addr: a0, len: a1, prot: Prot::from_bits_retain(int(a2)) },
        libc::SYS_pkey_mprotect => {
            Op::PkeyMprotect { addr: a0, len: a1, prot: Prot::from_bits_retain(int(a2)), key: int(a3) as i32 }
        }
        libc::SYS_mremap => {
            let flags = MremapFlags::from_bits_retain(int(a3));
            // The new address is read only with MREMAP_FIXED (`mm/mremap.c`); without it the register holds
            // whatever the caller left there.
            let new_addr = flags.contains(MremapFlags::FIXED).then_some(a4);
            Op::Mremap { addr: a0, old_len: a1, new_len: a2, flags, new_addr }
        }
        libc::SYS_madvise => Op::Madvise { addr: a0, len: a1, advice: Advice::from_raw(int(a2) as i32) },
        libc::SYS_brk => Op::Brk { addr: a0 },
        libc::SYS_mlock => Op::Mlock { addr: a0, len: a1 },
        libc::SYS_mlock2 => Op::Mlock2 { addr: a0, len: a1, flags: int(a2) },
        libc::SYS_munlock => Op::Munlock { addr: a0, len: a1 },
        libc::SYS_mlockall => Op::Mlockall { flags: int(a0) },
        libc::SYS_munlockall => Op::Munlockall,
        SYS_MSEAL => Op::Mseal { addr: a0, len: a1, flags: a2 },
        libc::SYS_pkey_alloc => Op::PkeyAlloc { flags: a0, rights: a1 },
        libc::SYS_pkey_free => Op::PkeyFree { key: int(a0) as i32 },
        libc::SYS_msync => Op::Msync { addr: a0, len: a1, flags: int(a2) },
        libc::SYS_prctl if a0 == PR_SET_VMA && a1 == PR_SET_VMA_ANON_NAME => {
            let name = if a4 == 0 {
                None
            } else {
                match read_name(a4) {
                    Some(n) => Some(n),
                    None => return Decoded::Unreadable,
                }
            };
            Op::Name { addr: a2, len: a3, name }
        }
        libc::SYS_fork
        | libc::SYS_vfork
        | libc::SYS_clone
        | libc::SYS_clone3
        | libc::SYS_execve
        | libc::SYS_execveat
        | libc::SYS_exit_group => return Decoded::Process,
        _ => return Decoded::Unmodelled,
    };
    let _ = a5;
    Decoded::Op(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_name(_: u64) -> Option<String> {
        None
    }

    fn line(nr: i64, args: [u64; 6]) -> String {
        match decode(nr, &args, |_| Some("heap1".into())) {
            Decoded::Op(op) => op.to_string(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn anonymous_and_file_mmaps_decode_with_their_descriptor() {
        // mmap(NULL, 0x3000, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0)
        let l = line(libc::SYS_mmap, [0, 0x3000, 3, 0x22, u32::MAX as u64, 0]);
        assert_eq!(l, "mmap 0 0x3000 rw- private|anon");
        // The descriptor register's high half is not part of the int.
        let l = line(libc::SYS_mmap, [0x7f00_0000_0000, 0x1000, 1, 0x12, 0xffff_ffff_0000_0003, 0x2000]);
        assert_eq!(l, "mmap 0x7f0000000000 0x1000 r-- private|fixed fd=fd3 off=0x2000");
        // A file mapping of descriptor -1 keeps the descriptor (EBADF on both sides).
        let l = line(libc::SYS_mmap, [0, 0x1000, 1, 0x2, u32::MAX as u64, 0]);
        assert_eq!(l, "mmap 0 0x1000 r-- private fd=-1 off=0");
    }

    #[test]
    fn other_calls_keep_their_raw_arguments() {
        assert_eq!(line(libc::SYS_munmap, [0x1000, 0x2000, 0, 0, 0, 0]), "munmap 0x1000 0x2000");
        assert_eq!(line(libc::SYS_mprotect, [0x1000, 0x1000, 0, 9, 9, 9]), "mprotect 0x1000 0x1000 ---");
        assert_eq!(line(libc::SYS_madvise, [0x1000, 0x1000, 4, 0, 0, 0]), "madvise 0x1000 0x1000 dontneed");
        assert_eq!(line(libc::SYS_brk, [0, 0, 0, 0, 0, 0]), "brk 0");
        // mremap without MREMAP_FIXED ignores the fifth register.
        assert_eq!(
            line(libc::SYS_mremap, [0x1000, 0x1000, 0x2000, 1, 0xdead, 0]),
            "mremap 0x1000 0x1000 0x2000 maymove"
        );
        assert_eq!(
            line(libc::SYS_mremap, [0x1000, 0x1000, 0x2000, 3, 0x5000, 0]),
            "mremap 0x1000 0x1000 0x2000 maymove|fixed 0x5000"
        );
        assert_eq!(
            line(libc::SYS_prctl, [PR_SET_VMA, 0, 0x1000, 0x1000, 0x1234, 0]),
            "name 0x1000 0x1000 heap1"
        );
        assert_eq!(line(libc::SYS_prctl, [PR_SET_VMA, 0, 0x1000, 0x1000, 0, 0]), "name 0x1000 0x1000 -");
        assert_eq!(
            decode(libc::SYS_prctl, &[PR_SET_VMA, 0, 0x1000, 0x1000, 0x1234, 0], no_name),
            Decoded::Unreadable
        );
    }

    #[test]
    fn process_and_unmodelled_calls_are_classified() {
        assert_eq!(decode(libc::SYS_clone3, &[0; 6], no_name), Decoded::Process);
        assert_eq!(decode(libc::SYS_exit_group, &[0; 6], no_name), Decoded::Process);
        assert_eq!(decode(libc::SYS_mbind, &[0; 6], no_name), Decoded::Unmodelled);
        assert_eq!(decode(libc::SYS_shmat, &[0; 6], no_name), Decoded::Unmodelled);
        assert!(is_memory_call(libc::SYS_prctl, &[PR_SET_VMA, 0, 0, 0, 0, 0]));
        assert!(!is_memory_call(libc::SYS_prctl, &[15, 0, 0, 0, 0, 0]));
        assert!(is_memory_call(libc::SYS_ioctl, &[3, UFFDIO_REGISTER, 0, 0, 0, 0]));
        assert!(!is_memory_call(libc::SYS_ioctl, &[3, 0x5401, 0, 0, 0, 0]));
        assert!(!is_memory_call(libc::SYS_read, &[0; 6]));
        assert_eq!(name_of(libc::SYS_mremap), "mremap");
    }
}
