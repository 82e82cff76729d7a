//! The seccomp filter that makes the traced program stop only at memory calls: a classic-BPF program (built
//! with `seccompiler`) that returns `SECCOMP_RET_TRACE` for every call of [`super::decode::TRAPPED`] (`prctl`
//! only for `PR_SET_VMA` and `PR_SET_MM`, `ioctl` only for userfaultfd's register and unregister) and
//! `SECCOMP_RET_ALLOW` for everything else, so that the program runs at full speed between memory calls
//! (`kernel/seccomp.c`: a `SECCOMP_RET_TRACE` result is a `PTRACE_EVENT_SECCOMP` stop for a tracer that set
//! `PTRACE_O_TRACESECCOMP`). The filter is for x86-64 system calls; a call of another ABI (an `int 0x80` of
//! 32-bit code) kills the process, as `seccompiler`'s architecture check does.
//!
//! The filter is installed by the child between `fork` and `execve` ([`install`]), after its tracer has set
//! its options: a traced `SECCOMP_RET_TRACE` without a tracer would fail the call with `ENOSYS`. It is
//! inherited across `fork`, `clone` and `execve` and cannot be removed, which is what makes every task of the
//! program stop. A process that is already running cannot be given one from outside (`--pid` then stops at
//! every system call: `super::Tracer::attach`).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use super::decode::{PR_SET_MM, PR_SET_VMA, TRAPPED, UFFDIO_REGISTER, UFFDIO_UNREGISTER};

/// The filter's program (module docs). Built before the `fork`: the child only installs it.
pub fn program() -> Result<BpfProgram, String> {
    let eq = |arg: u8, len: SeccompCmpArgLen, v: u64| {
        SeccompCondition::new(arg, len, SeccompCmpOp::Eq, v)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| e.to_string())
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &(nr, _) in TRAPPED {
        let r = match nr {
            libc::SYS_prctl => {
                vec![eq(0, SeccompCmpArgLen::Dword, PR_SET_VMA)?, eq(0, SeccompCmpArgLen::Dword, PR_SET_MM)?]
            }
            libc::SYS_ioctl => vec![
                eq(1, SeccompCmpArgLen::Dword, UFFDIO_REGISTER)?,
                eq(1, SeccompCmpArgLen::Dword, UFFDIO_UNREGISTER)?,
            ],
            _ => Vec::new(),
        };
        rules.insert(nr, r);
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Trace(0), TargetArch::x86_64)
        .map_err(|e| e.to_string())?;
    filter.try_into().map_err(|e: seccompiler::BackendError| e.to_string())
}

/// Installs `prog` on the calling thread (in the child, after `fork`: async-signal-safe, no allocation).
/// Without `CAP_SYS_ADMIN` the kernel requires `no_new_privs` first (`seccomp(2)`), which is then set: a
/// set-user-ID program then runs without its privileges. The error is the `errno`.
pub fn install(prog: &BpfProgram) -> Result<(), i32> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        // `seccompiler::sock_filter` is `#[repr(C)]` with the fields of the kernel's `struct sock_filter`.
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let set = || {
        // SAFETY: `fprog` points at `prog`'s instructions, alive for the call; the kernel copies them.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog,
            )
        }
    };
    if set() == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
    if err != libc::EACCES {
        return Err(err);
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
    }
    if set() == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL))
    }
}
