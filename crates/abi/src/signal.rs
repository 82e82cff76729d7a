//! The signals a user-mode memory access can end in, with their `siginfo` codes
//! (`include/uapi/asm-generic/siginfo.h`, `include/uapi/asm-generic/signal.h` for x86-64).
//!
//! A page fault the kernel cannot resolve is delivered to the faulting thread as one [`Signal`]: SIGSEGV
//! with a [`SegvCode`] (`arch/x86/mm/fault.c`: `bad_area_nosemaphore` gives `SEGV_MAPERR`,
//! `bad_area_access_error` gives `SEGV_ACCERR`, or `SEGV_PKUERR` when protection keys refused the access) or
//! SIGBUS with a [`BusCode`] (`do_sigbus`: `BUS_ADRERR`, or `BUS_MCEERR_AR` for a poisoned page). An address
//! outside the canonical range is no page fault at all: the CPU raises a general protection fault, which the
//! kernel reports as SIGSEGV with `si_code` `SI_KERNEL` and no address. A fault the kernel answers with the OOM
//! killer (`VM_FAULT_OOM`: `pagefault_out_of_memory`) kills a task with SIGKILL, the faulting one when it is
//! the victim: [`Signal::Kill`].

/// `SIGBUS` on x86-64.
pub const SIGBUS: i32 = 7;
/// `SIGKILL`.
pub const SIGKILL: i32 = 9;
/// `SIGSEGV`.
pub const SIGSEGV: i32 = 11;
/// `SI_KERNEL`: a signal the kernel raised without a more specific code (a general protection fault).
pub const SI_KERNEL: i32 = 0x80;

/// The `si_code` of a SIGSEGV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegvCode {
    /// `SEGV_MAPERR` (1): no mapping at the address (no VMA and no stack to grow, or a guard region).
    MapErr,
    /// `SEGV_ACCERR` (2): the mapping forbids the access.
    AccErr,
    /// `SEGV_PKUERR` (4): the protection key of the mapping forbids the access (`si_pkey` names it).
    PkuErr {
        /// `si_pkey`: the VMA's protection key.
        pkey: u32,
    },
    /// `SI_KERNEL` (0x80): an address outside the canonical range (a general protection fault, `si_addr` 0).
    Kernel,
}

impl SegvCode {
    /// The raw `si_code`.
    pub fn raw(self) -> i32 {
        match self {
            SegvCode::MapErr => 1,
            SegvCode::AccErr => 2,
            SegvCode::PkuErr { .. } => 4,
            SegvCode::Kernel => SI_KERNEL,
        }
    }
}

/// The `si_code` of a SIGBUS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BusCode {
    /// `BUS_ADRERR` (2): no page can back the address (a file page beyond the end of the file, a hugetlb page
    /// the pool cannot give): what x86's `do_sigbus` raises for every `VM_FAULT_SIGBUS`.
    AdrErr,
    /// `BUS_OBJERR` (3): an object-specific hardware error. x86's page fault never raises it (other
    /// architectures' fault handlers do); it is here so that any SIGBUS a `siginfo` reports has a value.
    ObjErr,
    /// `BUS_MCEERR_AR` (4): a hardware-poisoned page was accessed (`VM_FAULT_HWPOISON`).
    MceErrAr,
}

impl BusCode {
    /// The raw `si_code`.
    pub fn raw(self) -> i32 {
        match self {
            BusCode::AdrErr => 2,
            BusCode::ObjErr => 3,
            BusCode::MceErrAr => 4,
        }
    }
}

/// The signal a failed user access ends in (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// SIGSEGV.
    Segv(SegvCode),
    /// SIGBUS.
    Bus(BusCode),
    /// SIGKILL from the OOM killer (`VM_FAULT_OOM`).
    Kill,
}

impl Signal {
    /// `si_signo`.
    pub fn signo(self) -> i32 {
        match self {
            Signal::Segv(_) => SIGSEGV,
            Signal::Bus(_) => SIGBUS,
            Signal::Kill => SIGKILL,
        }
    }

    /// `si_code` (`SI_USER`, 0, for the OOM killer's SIGKILL, which a handler never sees).
    pub fn code(self) -> i32 {
        match self {
            Signal::Segv(c) => c.raw(),
            Signal::Bus(c) => c.raw(),
            Signal::Kill => 0,
        }
    }

    /// The signal of a `siginfo`'s `si_signo` and `si_code` (`si_pkey` for `SEGV_PKUERR`); `None` for a pair
    /// no memory access raises.
    pub fn from_siginfo(signo: i32, code: i32, pkey: u32) -> Option<Signal> {
        Some(match (signo, code) {
            (SIGSEGV, 1) => Signal::Segv(SegvCode::MapErr),
            (SIGSEGV, 2) => Signal::Segv(SegvCode::AccErr),
            (SIGSEGV, 4) => Signal::Segv(SegvCode::PkuErr { pkey }),
            (SIGSEGV, SI_KERNEL) => Signal::Segv(SegvCode::Kernel),
            (SIGBUS, 2) => Signal::Bus(BusCode::AdrErr),
            (SIGBUS, 3) => Signal::Bus(BusCode::ObjErr),
            (SIGBUS, 4) => Signal::Bus(BusCode::MceErrAr),
            (SIGKILL, _) => Signal::Kill,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Signal::Segv(SegvCode::MapErr) => "SIGSEGV (SEGV_MAPERR)",
            Signal::Segv(SegvCode::AccErr) => "SIGSEGV (SEGV_ACCERR)",
            Signal::Segv(SegvCode::PkuErr { pkey }) => {
                return write!(f, "SIGSEGV (SEGV_PKUERR, pkey {pkey})");
            }
            Signal::Segv(SegvCode::Kernel) => "SIGSEGV (SI_KERNEL)",
            Signal::Bus(BusCode::AdrErr) => "SIGBUS (BUS_ADRERR)",
            Signal::Bus(BusCode::ObjErr) => "SIGBUS (BUS_OBJERR)",
            Signal::Bus(BusCode::MceErrAr) => "SIGBUS (BUS_MCEERR_AR)",
            Signal::Kill => "SIGKILL",
        };
        f.write_str(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siginfo_round_trips() {
        for s in [
            Signal::Segv(SegvCode::MapErr),
            Signal::Segv(SegvCode::AccErr),
            Signal::Segv(SegvCode::PkuErr { pkey: 3 }),
            Signal::Segv(SegvCode::Kernel),
            Signal::Bus(BusCode::AdrErr),
            Signal::Bus(BusCode::ObjErr),
            Signal::Bus(BusCode::MceErrAr),
        ] {
            assert_eq!(Signal::from_siginfo(s.signo(), s.code(), 3), Some(s), "{s}");
        }
        assert_eq!(Signal::from_siginfo(SIGSEGV, 3, 0), None, "SEGV_BNDERR is no page fault's");
    }
}
