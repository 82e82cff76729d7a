//! An emulator's page-fault handler: a guest thread's loads and stores go through `Mm::read` / `Mm::write`,
//! and an access the address space cannot satisfy comes back as a `vmspace_mm::Fault` carrying the signal
//! Linux 6.18 would deliver (`arch/x86/mm/fault.c`): the handler turns it into the guest's `siginfo` and
//! delivers it to the guest's handler for that signal, or kills the guest as the default action would.
//!
//! Run with `cargo run -p vmspace-mm --example fault_handler`; it prints each access and the signal it raised,
//! and checks them.

use std::collections::HashMap;

use vmspace_mm::{Advice, BusCode, MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, SegvCode, Signal, VmFile};

const P: u64 = PAGE_SIZE;

/// The guest's view of a delivered signal: `si_signo`, `si_code`, `si_addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigInfo {
    /// `si_signo`.
    pub signo: i32,
    /// `si_code`.
    pub code: i32,
    /// `si_addr` (0 for `SI_KERNEL`, as the kernel reports a general protection fault).
    pub addr: u64,
}

/// What happened to one guest access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The access completed.
    Done,
    /// The guest's handler for the signal ran with this `siginfo` (it then skips the instruction).
    Handled(SigInfo),
    /// No handler: the default action (core dump) ends the guest.
    Killed(i32),
}

/// A guest thread: its address space and the signal handlers it installed (by signal number).
pub struct Guest<'a> {
    mm: &'a Mm,
    handlers: HashMap<i32, fn(&SigInfo)>,
}

impl Guest<'_> {
    /// The emulator's page-fault path: `Mm` resolved what it could; a `Fault` is the signal to deliver.
    fn deliver(&self, f: vmspace_mm::Fault) -> Outcome {
        let signo = f.signal.signo();
        let info = SigInfo {
            signo,
            code: f.signal.code(),
            addr: if f.signal == Signal::Segv(SegvCode::Kernel) { 0 } else { f.addr },
        };
        // SIGKILL (the OOM killer's) cannot be caught.
        match self.handlers.get(&signo) {
            Some(h) if f.signal != Signal::Kill => {
                h(&info);
                Outcome::Handled(info)
            }
            _ => Outcome::Killed(signo),
        }
    }

    /// One guest load of 8 bytes.
    fn load(&self, addr: u64) -> Outcome {
        match self.mm.read(addr, &mut [0u8; 8]) {
            Ok(()) => Outcome::Done,
            Err(f) => self.deliver(f),
        }
    }

    /// One guest store of 8 bytes.
    fn store(&self, addr: u64) -> Outcome {
        match self.mm.write(addr, &[0xa5; 8]) {
            Ok(()) => Outcome::Done,
            Err(f) => self.deliver(f),
        }
    }
}

/// The guest's SIGSEGV / SIGBUS handler: it only reports.
fn report(info: &SigInfo) {
    println!("  guest handler: signo {} code {} addr {:#x}", info.signo, info.code, info.addr);
}

/// Runs the scenario; panics if a signal is not the one Linux would deliver.
pub fn main() {
    let mm = Mm::new(MmConfig::default());
    let base = 0x5000_0000_0000u64;
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    // rw- page, r-- page, a hole, a guard region in a rw- VMA, and a file mapped one page past its end.
    mm.mmap(base, P, Prot::RW, fixed, None, 0).expect("rw page");
    mm.mmap(base + P, P, Prot::READ, fixed, None, 0).expect("read-only page");
    mm.mmap(base + 3 * P, 2 * P, Prot::RW, fixed, None, 0).expect("guarded region");
    mm.madvise(base + 4 * P, P, Advice::GUARD_INSTALL).expect("guard");
    let file = VmFile::regular("/guest/data", 7, P);
    let shared = MapFlags::SHARED | MapFlags::FIXED;
    mm.mmap(base + 8 * P, 2 * P, Prot::RW, shared, Some(&file), 0).expect("file mapping");

    let guest = Guest { mm: &mm, handlers: HashMap::from([(11, report as fn(&SigInfo)), (7, report)]) };
    let segv = |code: SegvCode, addr| {
        let s = Signal::Segv(code);
        Outcome::Handled(SigInfo { signo: s.signo(), code: s.code(), addr })
    };
    let bus =
        Outcome::Handled(SigInfo { signo: 7, code: Signal::Bus(BusCode::AdrErr).code(), addr: base + 9 * P });
    let cases: [(&str, Outcome, Outcome); 8] = [
        ("store to rw-", guest.store(base), Outcome::Done),
        ("load from r--", guest.load(base + P), Outcome::Done),
        ("store to r--", guest.store(base + P + 8), segv(SegvCode::AccErr, base + P + 8)),
        ("load from a hole", guest.load(base + 2 * P), segv(SegvCode::MapErr, base + 2 * P)),
        ("load from a guard region", guest.load(base + 4 * P), segv(SegvCode::MapErr, base + 4 * P)),
        ("store within the file", guest.store(base + 8 * P), Outcome::Done),
        ("load past the file's end", guest.load(base + 9 * P), bus),
        ("load from a non-canonical address", guest.load(1 << 47), segv(SegvCode::Kernel, 0)),
    ];
    for (what, got, want) in cases {
        println!("{what}: {got:?}");
        assert_eq!(got, want, "{what}");
    }
    // Without a SIGSEGV handler, the default action ends the guest.
    let bare = Guest { mm: &mm, handlers: HashMap::new() };
    assert_eq!(bare.load(base + 2 * P), Outcome::Killed(11));
    mm.validate().expect("invariants hold");
}
