//! The page fault (`arch/x86/mm/fault.c: do_user_addr_fault` → `mm/memory.c: handle_mm_fault`), GUP's faults
//! (`mm/gup.c: faultin_page`), and the memory accesses an emulator makes through the emulated MMU.
//!
//! # `Mm::fault`: the 6.18 fault path
//!
//! ```text
//! speculative:    VMA copy validated by vm_seq, fault core re-validating under the PTE lock   (else: below)
//! per-VMA mode:   lock_vma_under_rcu(addr)                     (miss: walk again; abort: to the mmap lock)
//!                 access_error(vma)            -> SIGSEGV       (vma_lock_success)
//!                 handle_mm_fault(vma, VMA lock)
//!                     needs an anon_vma: mmap_read_trylock, __anon_vma_prepare, go on   (__vmf_anon_prepare)
//!                                    trylock failed: VM_FAULT_RETRY, vma_end_read      (vma_lock_retry)
//!                 otherwise done                                (vma_lock_success)
//! mmap lock:      lock_mm_and_find_vma(addr): mmap_read_lock, find_vma; below a VM_GROWSDOWN VMA: drop it,
//!                     mmap_write_lock, find again, expand_stack, mmap_write_downgrade; else SIGSEGV
//!                 access_error(vma)            -> SIGSEGV
//!                 handle_mm_fault(vma, mmap read lock)          (an anon_vma is prepared in place)
//! ```
//!
//! # Speculative faults
//!
//! In the per-VMA mode a fault first tries without any lock (`Mm::fault_speculative`): under RCU it finds the
//! VMA in the tree and copies the fields the fault needs without taking a reference, validated by the VMA's
//! write count `vm_seq` as the lockless `/proc` reader validates its copies ([`crate::vma::lockless`]); a VMA
//! being written (write-locked now) is not copied. The fault core
//! ([`vmspace_pgtable::handle_mm_fault_speculative`]) then handles the common case only, a missing entry of a
//! private anonymous VMA (not `VM_LOCKED`) with its anon_vma whose PTE table is in place, allocating the page
//! first and, under the PTE lock after a sequentially consistent fence, checking that `vm_seq` has not moved
//! and the VMA is still attached before it sets the entry. Anything else, or a copy gone stale, changes
//! nothing and takes the locked path below. Counted as `vma_lock_success`, as the kernel counts a fault
//! completed without the mmap lock.
//!
//! Why a writer cannot be overtaken: every call that changes a VMA's pages write-locks it first
//! (`vma_start_write`: `vm_seq` moves, then a sequentially consistent fence; `vma_mark_detached` also fences)
//! and then locks every PTE table present in its range. A fault that takes the table's lock after the writer
//! sees the new count and gives up; one that takes it before has set its entry, which the writer then zaps,
//! write-protects, copies or moves as any other; a writer that found no table at all read the PMD entry
//! before the table's link, and the two fences order its count before the fault's check (the argument in
//! full: `vmspace_pgtable::fault`, "Speculative faults"). So the guarantees of the per-VMA lock hold without
//! its reference count, the cache line every fault of one VMA wrote: munmap, mprotect, mremap and fork never
//! find a page installed behind them (loom models `fault_under_vma_lock_vs_munmap` and
//! `speculative_fault_vs_mprotect`, stress test `speculative_fault_stress.rs`).
//!
//! The per-VMA-lock events are counted as `/proc/vmstat` counts them ([`Mm::fault_stats`]): `vma_lock_success`
//! once per fault completed under the VMA lock (an access error included), `vma_lock_abort` for a lookup that
//! gave up, `vma_lock_retry` for a fault retried under the mmap lock, `vma_lock_miss` for a VMA found detached.
//! The faults themselves are counted by kind by the page table (`vmspace_pgtable::FaultStats`). The mode is the
//! address space's ([`MmConfig::fault_mode`](super::MmConfig)), or the call's ([`Mm::fault_with`]):
//! [`FaultMode::MmapLock`] takes the mmap read lock for every fault, as Linux did before per-VMA locks (6.4).
//!
//! `handle_mm_fault` here is the address space's half: a hugetlb VMA first takes its huge page from the pool
//! (`hugetlb_fault`, [`super::hugetlb`]); then the fault core of `vmspace_pgtable` runs on a description of the
//! VMA ([`vmspace_pgtable::FaultVma`]: range, flags, `vm_page_prot`, the file's page cache, whether it has an
//! anon_vma). Its `Retry` means "this VMA needs an anon_vma first": under the mmap lock the anon_vma is
//! prepared at once (`__anon_vma_prepare` under `page_table_lock`); under the VMA lock only if the mmap read
//! lock can be had without waiting.
//!
//! # Readahead
//!
//! A fault on a file page that reads ahead, or reads a page not up to date, drops its lock for the I/O
//! (`maybe_unlock_mmap_for_io`) and answers `VM_FAULT_RETRY` (`VmFault::RetryIo`). Under the VMA lock the
//! fault is counted as `vma_lock_retry` and made again under the mmap lock, as a retry (`FAULT_FLAG_TRIED`)
//! only if the first try found no page (`VM_FAULT_MAJOR`), as `do_user_addr_fault` does. Under the mmap lock it
//! is made again at once as a retry; the kernel takes the lock again and looks the VMA up afresh, which here is
//! the schedule in which no other thread changed the address space in between (the engine keeps the lock).
//! GUP's faults retry the same way (`__get_user_pages_locked` with `FOLL_TRIED`).
//!
//! # The signal (`do_user_addr_fault`'s error paths)
//!
//! A fault that maps or fixes something returns its [`FaultKind`]. One that cannot is delivered to the thread
//! as a [`Signal`], decided as `arch/x86/mm/fault.c` decides it ([`Mm::do_user_addr_fault`] answers it as a
//! [`Fault`]):
//!
//! - an address outside the canonical range (from 2^47 to the kernel half) is no page fault: the CPU raises a
//!   general protection fault, SIGSEGV with `SI_KERNEL`;
//! - no VMA covers the address and no stack grows down to it (`lock_mm_and_find_vma` fails:
//!   `bad_area_nosemaphore`), or the address lies in the kernel half: SIGSEGV `SEGV_MAPERR`;
//! - the VMA forbids the access (`access_error` → `bad_area_access_error`): SIGSEGV `SEGV_PKUERR` with the
//!   VMA's key when protection keys forbid it (`bad_area_access_from_pkeys`: the thread's PKRU denies the data
//!   access through the VMA's key, `arch_vma_access_permitted`), else `SEGV_ACCERR`;
//! - `handle_mm_fault` answers `VM_FAULT_SIGSEGV` (a guard region's marker): `mm_fault_error` →
//!   `bad_area_nosemaphore`, SIGSEGV `SEGV_MAPERR`;
//! - `VM_FAULT_SIGBUS` (a file page beyond the end of the file, a hugetlb fault with no page in the pool):
//!   `do_sigbus`, SIGBUS `BUS_ADRERR` (x86 raises no other SIGBUS code for a fault but `BUS_MCEERR_AR` for a
//!   hardware-poisoned page, which the engine does not model);
//! - `VM_FAULT_OOM`: `pagefault_out_of_memory`, the OOM killer's SIGKILL ([`Signal::Kill`]).
//!
//! [`Mm::fault`] answers the same as an errno: `EFAULT` for SIGSEGV, `EIO` for SIGBUS, `ENOMEM` for the OOM
//! kill. PKRU is one value for all the threads (`space/pkeys.rs`), and is checked only with PKU configured.
//!
//! # GUP
//!
//! [`Mm::gup_access`] (the op-script `touch` through `process_vm_readv`/`writev`), `MADV_POPULATE_*` and
//! `__mm_populate` fault pages as `__get_user_pages` does: under the mmap read lock (or, for mprotect's
//! population of a locked VMA, the write lock), no stack growth, the VMA checked by the caller
//! (`check_vma_flags`), a page already mapped with the access needed only touched (`follow_page_mask` with
//! `FOLL_TOUCH`), any other faulted in (`faultin_page`); SIGSEGV and SIGBUS are both `EFAULT` there.
//!
//! # Memory accesses
//!
//! [`Mm::read`], [`Mm::read_chunks`], [`Mm::write`] and [`Mm::fill`] access memory as a CPU does: through
//! the emulated MMU (`PageTable::read` / `write`, lockless), faulting with [`Mm::fault`] where it refuses and
//! retrying, page by page; on a fault that fails they stop with a [`Fault`]: the address that faulted (the
//! bytes before it were read or written) and the signal the kernel would deliver. With PKU configured, each
//! page's access is first checked against PKRU and the VMA's key, as the CPU checks every data access (present
//! page or not).

use vmspace_abi::{BusCode, Errno, SegvCode, Signal, VmFlags};
use vmspace_pgtable::{
    Access, FaultKind, FaultStats, FaultVma, MmuError, PageProt, VmFault, handle_mm_fault,
};
use vmspace_rcu::sync::Ordering;

use super::tree::{V, VmaExt};
use super::{FileKind, Mm, MmWrite, PAGE_MASK, PAGE_SIZE, VmFile, config};
use crate::vma::{MmapReadGuard, VmaLockCounts};

/// How [`Mm::fault`] locks the VMA it faults in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FaultMode {
    /// Linux 6.4 and later: the VMA's read lock (`lock_vma_under_rcu`), falling back to the mmap read lock.
    #[default]
    PerVma,
    /// Before 6.4: every fault under the mmap read lock.
    MmapLock,
}

/// Fault counters of an address space ([`Mm::fault_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmFaultStats {
    /// The per-VMA-lock events as `/proc/vmstat` has them: `vma_lock_success`, `vma_lock_abort`,
    /// `vma_lock_retry`, `vma_lock_miss` (module docs).
    pub vma_lock: VmaLockCounts,
    /// The faults the page table resolved or refused, by kind (`handle_mm_fault`'s outcomes; GUP's faults
    /// included).
    pub faults: FaultStats,
}

/// Why the address space's `handle_mm_fault` did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultError {
    /// `VM_FAULT_RETRY` under the VMA lock: the fault must be retried under the mmap lock, as a retry
    /// (`FAULT_FLAG_TRIED`) if `tried`.
    Retry {
        /// The retry carries `FAULT_FLAG_TRIED` (the first try was a major fault that read ahead).
        tried: bool,
    },
    /// `VM_FAULT_SIGSEGV`.
    SigSegv,
    /// `VM_FAULT_SIGBUS`.
    SigBus,
    /// `VM_FAULT_OOM`.
    Oom,
}

/// A user access that failed: where, what access, and the signal the kernel delivers for it (module docs, "The
/// signal"). What [`Mm::read`], [`Mm::write`], [`Mm::touch`], [`Mm::fill`], [`Mm::read_chunks`] and
/// [`Mm::do_user_addr_fault`] answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    /// The faulting byte (`si_addr`; the kernel reports 0 for [`SegvCode::Kernel`], the engine the address).
    pub addr: u64,
    /// The access that faulted.
    pub access: Access,
    /// The signal delivered.
    pub signal: Signal,
}

impl Fault {
    /// The errno [`Mm::fault`] answers for this fault: `EFAULT` for SIGSEGV, `EIO` for SIGBUS, `ENOMEM` for the
    /// OOM kill.
    pub fn errno(&self) -> Errno {
        signal_errno(self.signal)
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {:#x} ({:?})", self.signal, self.addr, self.access)
    }
}

impl std::error::Error for Fault {}

/// The errno of a user fault's signal (module docs).
fn signal_errno(s: Signal) -> Errno {
    match s {
        Signal::Segv(_) => Errno::EFAULT,
        Signal::Bus(_) => Errno::EIO,
        Signal::Kill => Errno::ENOMEM,
    }
}

/// The kernel half of the address space (`fault_in_kernel_space` for a user access): canonical, never mapped.
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;
/// The first address past the lower canonical half (a 4-level x86-64 address space).
const NONCANONICAL: u64 = 1 << 47;

impl FaultError {
    /// The signal `mm_fault_error` delivers (module docs).
    fn signal(self) -> Signal {
        match self {
            // `VM_FAULT_SIGSEGV` → bad_area_nosemaphore. A retry never reaches here (the mmap-lock path makes
            // it at once); were one to, the access was not made.
            FaultError::SigSegv | FaultError::Retry { .. } => Signal::Segv(SegvCode::MapErr),
            FaultError::SigBus => Signal::Bus(BusCode::AdrErr),
            FaultError::Oom => Signal::Kill,
        }
    }

    /// The errno GUP reports (`vm_fault_to_errno`): SIGSEGV and SIGBUS are both `EFAULT`.
    pub(crate) fn gup_errno(self) -> Errno {
        match self {
            FaultError::Oom => Errno::ENOMEM,
            _ => Errno::EFAULT,
        }
    }
}

/// The lock a fault runs under (`FAULT_FLAG_VMA_LOCK` or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultLock {
    /// The VMA's read lock only.
    Vma,
    /// The mmap lock (read or write).
    Mmap,
}

/// `access_error` (`arch/x86/mm/fault.c`): the VMA forbids the access. A write needs `VM_WRITE`, an instruction
/// fetch `VM_EXEC`, a read any of read, write or exec (x86 page tables cannot express write-only or exec-only).
fn access_error(flags: VmFlags, access: Access) -> bool {
    match access {
        Access::Write => !flags.intersects(VmFlags::WRITE),
        Access::Exec => !flags.intersects(VmFlags::EXEC),
        Access::Read => !flags.intersects(VmFlags::ACCESS_FLAGS),
    }
}

/// `vma_wants_writenotify` for the file kinds modelled: a regular file (ext4: `page_mkwrite`, dirty accounting)
/// wants its first write to a clean page seen; shmem and hugetlbfs do not.
fn writenotify(file: Option<&VmFile>) -> bool {
    file.is_some_and(|f| f.kind == FileKind::Regular)
}

impl Mm {
    /// The fault mode [`Mm::fault`] uses (the configuration's).
    pub fn fault_mode(&self) -> FaultMode {
        // Relaxed: a setting, no data behind it.
        match self.fault_mode.load(Ordering::Relaxed) {
            0 => self.cfg.fault_mode,
            1 => FaultMode::PerVma,
            _ => FaultMode::MmapLock,
        }
    }

    /// Changes the fault mode of [`Mm::fault`] from now on (faults in flight finish in theirs).
    pub fn set_fault_mode(&self, mode: FaultMode) {
        let v = match mode {
            FaultMode::PerVma => 1,
            FaultMode::MmapLock => 2,
        };
        // Relaxed: as `fault_mode`.
        self.fault_mode.store(v, Ordering::Relaxed);
    }

    /// The fault counters (module docs): exact once the faulting threads have stopped.
    pub fn fault_stats(&self) -> MmFaultStats {
        MmFaultStats { vma_lock: self.vmstat.snapshot(), faults: self.pt().fault_stats() }
    }

    /// A user-mode `access` at `addr` that the MMU refused (an x86 page fault): the 6.18 fault path in the
    /// address space's [`FaultMode`] (module docs). `Ok` with what resolved it (the access can be retried);
    /// `EFAULT` for SIGSEGV, `EIO` for SIGBUS, `ENOMEM` for an allocation failure (the OOM kill). The signal
    /// itself: [`Mm::do_user_addr_fault`].
    pub fn fault(&self, addr: u64, access: Access) -> Result<FaultKind, Errno> {
        self.fault_with(addr, access, self.fault_mode())
    }

    /// [`Mm::fault`] in the given mode.
    pub fn fault_with(&self, addr: u64, access: Access, mode: FaultMode) -> Result<FaultKind, Errno> {
        self.user_fault(addr, access, mode).map_err(signal_errno)
    }

    /// [`Mm::fault`] answering the signal the kernel delivers when the fault cannot be resolved (module docs,
    /// "The signal"): what an emulator's page-fault handler raises in its guest thread.
    pub fn do_user_addr_fault(&self, addr: u64, access: Access) -> Result<FaultKind, Fault> {
        self.user_fault(addr, access, self.fault_mode()).map_err(|signal| Fault { addr, access, signal })
    }

    /// `bad_area_access_error`'s choice for an access `v` forbids, `None` if it allows it (`access_error`,
    /// with `arch_vma_access_permitted` first: module docs).
    fn bad_access(&self, v: V, access: Access) -> Option<SegvCode> {
        if !self.pkru_permits(v, access) {
            return Some(SegvCode::PkuErr { pkey: v.fl().pkey() });
        }
        access_error(v.fl(), access).then_some(SegvCode::AccErr)
    }

    /// The fault path with its signal decision (module docs).
    fn user_fault(&self, addr: u64, access: Access, mode: FaultMode) -> Result<FaultKind, Signal> {
        if (NONCANONICAL..KERNEL_HALF).contains(&addr) {
            return Err(Signal::Segv(SegvCode::Kernel));
        }
        let mut tried = false;
        if mode == FaultMode::PerVma
            && let Some(r) = self.fault_speculative(addr, access)
        {
            self.vmstat.record_success();
            return r;
        }
        if mode == FaultMode::PerVma
            && let Some(g) = self.lock_vma_for_fault(addr)
        {
            let v: V = g.vma();
            if let Some(code) = self.bad_access(v, access) {
                // bad_area_access_error, counted as a success of the per-VMA lock.
                self.vmstat.record_success();
                return Err(Signal::Segv(code));
            }
            match self.handle_vma_fault(v, addr, access, FaultLock::Vma, false) {
                Err(FaultError::Retry { tried: t }) => {
                    drop(g);
                    self.vmstat.record_fault_retry();
                    tried = t;
                }
                r => {
                    drop(g);
                    self.vmstat.record_success();
                    return r.map_err(FaultError::signal);
                }
            }
        }
        // lock_mmap: under the mmap read lock; an anon_vma is prepared in place and a retry after readahead is
        // made at once, so no retry is left. No VMA: bad_area_nosemaphore.
        let (r, v) = self.lock_mm_and_find_vma(addr).ok_or(Signal::Segv(SegvCode::MapErr))?;
        if let Some(code) = self.bad_access(v, access) {
            return Err(Signal::Segv(code));
        }
        let res = self.handle_vma_fault(v, addr, access, FaultLock::Mmap, tried);
        drop(r);
        res.map_err(FaultError::signal)
    }

    /// The speculative fault (module docs, "Speculative faults"): the VMA covering `addr` copied without a
    /// reference and validated by its write count, the fault made by
    /// [`vmspace_pgtable::handle_mm_fault_speculative`], which re-validates the copy under the PTE lock before it
    /// sets the entry. `None` when the fault is not the common case (no VMA, a VMA being written, a file or
    /// hugetlb VMA, no anon_vma, no PTE table, an entry present, an access the VMA forbids) or the copy went
    /// stale: nothing was changed and the caller takes the locked path. [`Signal::Kill`] (the OOM kill, `ENOMEM`
    /// from [`Mm::fault`]) when the page could not be allocated (nothing changed either, as on the locked path).
    fn fault_speculative(&self, addr: u64, access: Access) -> Option<Result<FaultKind, Signal>> {
        let shared = &self.vmas.shared;
        // The read-side section covers the walk only: VMAs are type-stable, so the copy's checks may read `vma`
        // after it (a fault must not hold a section: it may wait for a grace period).
        let vma = {
            let rcu = vmspace_rcu::pin();
            crate::vma::lookup::VmaLookup::vma_at(&shared.tree, addr, &rcu)?
        };
        let (c, seq) = crate::vma::lockless::copy_lockless_seq::<crate::vma::lockless::VmaFaultCopy>(
            &shared.locking,
            vma,
        )
        .ok()?;
        if addr < c.start || addr >= c.end || c.file_backed || !c.anon_vma {
            return None;
        }
        // `arch_vma_access_permitted` before anything: a key PKRU denies is the locked path's SEGV_PKUERR.
        if !self.pkru_permits_key(c.flags.pkey(), access) {
            return None;
        }
        let fv = FaultVma {
            start: c.start,
            end: c.end,
            pgoff: c.pgoff,
            flags: c.flags,
            page_prot: PageProt::for_vma(c.flags, false),
            file: None,
            anon_vma: true,
            tried: false,
        };
        let still_valid = || crate::vma::lockless::copy_still_valid(vma, seq);
        match vmspace_pgtable::handle_mm_fault_speculative(self.pt(), &fv, addr, access, &still_valid)? {
            VmFault::Handled(k) => Some(Ok(k)),
            VmFault::Oom => Some(Err(Signal::Kill)),
            _ => None,
        }
    }

    /// `lock_vma_under_rcu` counted twice: in the lock's statistics as every lookup is
    /// (`MmLocking::stats`: success, abort, miss) and in the vmstat events of [`Mm::fault_stats`] as the kernel
    /// counts them there (`vma_lock_abort`, `vma_lock_miss`; a success is counted by the fault that used it).
    pub(crate) fn lock_vma_for_fault(&self, addr: u64) -> Option<crate::vma::VmaReadGuard<'static>> {
        let shared = &self.vmas.shared;
        let stats = shared.locking.stats();
        let (g, ev) = crate::vma::lookup::lock_vma_under_rcu_events(&shared.locking, &shared.tree, addr);
        for _ in 0..ev.misses {
            self.vmstat.record_miss();
            stats.record_miss();
        }
        if g.is_none() {
            self.vmstat.record_abort();
            stats.record_abort();
        } else {
            stats.record_success();
        }
        g
    }

    /// `lock_mm_and_find_vma` (module docs): the mmap read lock and the VMA covering `addr`, after growing a
    /// stack down to it; `None` for SIGSEGV (no lock held then).
    fn lock_mm_and_find_vma(&self, addr: u64) -> Option<(MmapReadGuard<'_>, V)> {
        let locking = self.locking();
        let r = locking.read_lock();
        let v = self.find(addr)?;
        if v.start() <= addr {
            return Some((r, v));
        }
        if !v.fl().intersects(VmFlags::GROWSDOWN) {
            return None;
        }
        // mmap_upgrade_trylock always fails: drop the read lock, take the write lock, look again.
        drop(r);
        let mut wg = locking.write_lock();
        let v = {
            let st = self.state.write(&mut wg);
            let mut w = MmWrite::new(self, st);
            let v = w.find(addr)?;
            if v.start() > addr {
                if !v.fl().intersects(VmFlags::GROWSDOWN) {
                    return None;
                }
                // expand_stack_locked: the expansion covers the whole page.
                w.expand_downwards(v, addr & PAGE_MASK).ok()?;
            }
            v
        };
        Some((wg.downgrade(), v))
    }

    /// The address space's `handle_mm_fault` for `addr` in `v` (module docs). The caller holds `lock`, found
    /// `v` covering `addr`, and checked the access; `tried` for a retry (`FAULT_FLAG_TRIED`).
    pub(crate) fn handle_vma_fault(
        &self,
        v: V,
        addr: u64,
        access: Access,
        lock: FaultLock,
        tried: bool,
    ) -> Result<FaultKind, FaultError> {
        let flags = v.fl();
        let hugetlb = flags.intersects(VmFlags::HUGETLB);
        if hugetlb {
            self.hugetlb_fault(v, addr, lock)?;
        }
        let file = if v.is_file_backed() { v.file() } else { None };
        // A private hugetlb mapping's pages are anonymous (`hugetlb_no_page` gives it new anonymous folios).
        let cache = match &file {
            Some(f) if !hugetlb || flags.intersects(VmFlags::MAYSHARE) => f.page_cache().map(|c| &**c),
            _ => None,
        };
        let mut fv = FaultVma {
            start: v.start(),
            end: v.end(),
            pgoff: v.pgoff(),
            flags,
            page_prot: PageProt::for_vma(flags, writenotify(file.as_deref())),
            file: cache,
            anon_vma: v.has_anon_vma(),
            tried,
        };
        debug_assert!(file.is_none() || fv.file.is_some() || hugetlb, "a mapped file without its page cache");
        loop {
            match handle_mm_fault(self.pt(), &fv, addr, access) {
                VmFault::Handled(k) => return Ok(k),
                VmFault::Retry => {
                    // __vmf_anon_prepare.
                    match lock {
                        FaultLock::Mmap => self.anon_vma_prepare(v),
                        FaultLock::Vma => {
                            let Some(_r) = self.locking().try_read_lock() else {
                                return Err(FaultError::Retry { tried: false });
                            };
                            self.anon_vma_prepare(v);
                        }
                    }
                    fv.anon_vma = true;
                }
                VmFault::RetryIo { major } => match lock {
                    // The VMA lock was dropped for the I/O: the caller retries under the mmap lock.
                    FaultLock::Vma => return Err(FaultError::Retry { tried: major }),
                    // The mmap lock was dropped for the I/O and is taken again for the retry (module docs,
                    // "Readahead").
                    FaultLock::Mmap => fv.tried = true,
                },
                VmFault::Oom => return Err(FaultError::Oom),
                VmFault::SigBus => return Err(FaultError::SigBus),
                VmFault::SigSegv => return Err(FaultError::SigSegv),
            }
        }
    }

    /// One page of GUP (`follow_page_mask`, then `faultin_page` if needed) at `addr` in `v`, whose flags the
    /// caller checked: a page mapped with the access needed is only touched; any other is faulted in. The
    /// caller holds the mmap lock.
    pub(crate) fn gup_page(&self, v: V, addr: u64, write: bool) -> Result<(), FaultError> {
        let access = if write { Access::Write } else { Access::Read };
        // follow_page_pte: a page mapped with the access needed is taken as it is (GUP does not set the
        // entry's accessed or dirty bits; FOLL_TOUCH below marks the page itself).
        let locked = v.fl().intersects(VmFlags::LOCKED);
        {
            let rcu = vmspace_rcu::pin();
            let pte = self.pt().pte(addr);
            if pte.is_hw_present() && (!write || pte.is_write()) {
                // FOLL_TOUCH on the page just followed.
                self.pt().gup_touch_entry(pte, write, locked, &rcu);
                return Ok(());
            }
        }
        // Outside the read-side section: a fault may wait for a grace period.
        self.handle_vma_fault(v, addr, access, FaultLock::Mmap, false)?;
        // `__get_user_pages` follows the page again after a fault; FOLL_TOUCH marks it accessed.
        self.pt().gup_touch(addr, write, locked);
        Ok(())
    }

    /// The same access made through GUP (`process_vm_readv`/`writev`, as the op-script `touch` does on the
    /// live kernel): under the mmap read lock, no stack expansion (GUP stopped growing stacks in 6.5), a read
    /// needs `VM_READ`, a write `VM_WRITE`, and `VM_IO | VM_PFNMAP` VMAs are refused; then the page is
    /// faulted in as a fault would (module docs, "GUP"). `EFAULT` for any failure but `ENOMEM`.
    pub fn gup_access(&self, addr: u64, write: bool) -> Result<(), Errno> {
        self.read_locked(|r| r.gup_access_locked(addr, write))
    }

    // ----- memory accesses through the MMU -----

    /// Reads `buf.len()` bytes at `addr` as user loads would: through the MMU, faulting as the CPU does
    /// ([`Mm::fault`]). On a fault that fails, the [`Fault`]: the address that faulted (the bytes before it
    /// were read) and its signal.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr.checked_add(done as u64).ok_or_else(|| wrapped(Access::Read))?;
            let n = (PAGE_SIZE - a % PAGE_SIZE).min((buf.len() - done) as u64) as usize;
            self.access_page(a, Access::Read, |pt| pt.read(a, &mut buf[done..done + n]))?;
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at `addr` as user stores would (module docs). On a fault that fails, the [`Fault`] (the
    /// bytes before its address were written).
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), Fault> {
        let mut done = 0usize;
        while done < data.len() {
            let a = addr.checked_add(done as u64).ok_or_else(|| wrapped(Access::Write))?;
            let n = (PAGE_SIZE - a % PAGE_SIZE).min((data.len() - done) as u64) as usize;
            self.access_page(a, Access::Write, |pt| pt.write(a, &data[done..done + n]))?;
            done += n;
        }
        Ok(())
    }

    /// One user access at `addr` that moves no data: a load, or a store of the byte already there (what
    /// `lock orb $0` does): the MMU's checks and accessed/dirty updates, faulting as the CPU does
    /// ([`Mm::fault`]). The op-script `touch` makes one per page. On a fault that fails, the [`Fault`].
    pub fn touch(&self, addr: u64, access: Access) -> Result<(), Fault> {
        self.access_page(addr, access, |pt| pt.access(addr, access).map(|_| ()))
    }

    /// Stores `byte` over `[addr, addr + len)` as user stores would ([`Mm::write`] without a buffer of `len`
    /// bytes).
    pub fn fill(&self, addr: u64, len: u64, byte: u8) -> Result<(), Fault> {
        let page = [byte; PAGE_SIZE as usize];
        let mut done = 0u64;
        while done < len {
            let a = addr.checked_add(done).ok_or_else(|| wrapped(Access::Write))?;
            let n = (PAGE_SIZE - a % PAGE_SIZE).min(len - done);
            self.access_page(a, Access::Write, |pt| pt.write(a, &page[..n as usize]))?;
            done += n;
        }
        Ok(())
    }

    /// Reads the bytes of `[addr, addr + len)` in address order as user loads would ([`Mm::read`]), handing
    /// them to `f` a piece at a time (at most a page, never crossing a page boundary) instead of into one
    /// buffer: the op-script `check` hashes a range this way (its hash is the script crate's, not the
    /// engine's). On a fault that fails, the [`Fault`] (`f` saw every byte before its address).
    pub fn read_chunks(&self, addr: u64, len: u64, mut f: impl FnMut(&[u8])) -> Result<(), Fault> {
        let mut buf = [0u8; PAGE_SIZE as usize];
        let mut done = 0u64;
        while done < len {
            let a = addr.checked_add(done).ok_or_else(|| wrapped(Access::Read))?;
            let n = (PAGE_SIZE - a % PAGE_SIZE).min(len - done) as usize;
            self.access_page(a, Access::Read, |pt| pt.read(a, &mut buf[..n]))?;
            f(&buf[..n]);
            done += n as u64;
        }
        Ok(())
    }

    /// Runs `op` (one MMU access within the page of `a`) until it completes, resolving each fault it raises
    /// with the fault path ([`Mm::do_user_addr_fault`]) as the CPU would retry the instruction; the [`Fault`]
    /// if a fault fails (the OOM kill too when the contents of a frame cannot be allocated). With PKU, PKRU is
    /// checked first (module docs).
    fn access_page(
        &self,
        a: u64,
        access: Access,
        mut op: impl FnMut(&vmspace_pgtable::PageTable) -> Result<(), MmuError>,
    ) -> Result<(), Fault> {
        if self.cfg.pku
            && let Some(pkey) = self.pkru_denies_at(a, access)
        {
            return Err(Fault { addr: a, access, signal: Signal::Segv(SegvCode::PkuErr { pkey }) });
        }
        let pt = self.pt();
        // A fault that resolves but leaves the access refused again and again means another thread keeps
        // undoing it (a livelock the CPU would also spin in): give up after this many rounds.
        for _ in 0..100_000 {
            match op(pt) {
                Ok(()) => return Ok(()),
                Err(MmuError::Fault { addr, access: acc, .. }) => {
                    debug_assert_eq!(acc, access);
                    self.do_user_addr_fault(addr, acc)?;
                }
                Err(MmuError::NoMem) => return Err(Fault { addr: a, access, signal: Signal::Kill }),
            }
        }
        debug_assert!(false, "an access at {a:#x} kept faulting");
        Err(Fault { addr: a, access, signal: Signal::Kill })
    }

    /// The key of the VMA at `a` if the thread's PKRU denies `access` through it (a lockless lookup: the
    /// CPU's check races calls as a real thread's does).
    fn pkru_denies_at(&self, a: u64, access: Access) -> Option<u32> {
        let guard = vmspace_rcu::pin();
        let v = self.tree().load_in(a, &guard)?;
        (!self.pkru_permits(v, access)).then(|| v.fl().pkey())
    }
}

/// An access that wrapped past the top of the address space (unreachable: the kernel half faults first).
fn wrapped(access: Access) -> Fault {
    Fault { addr: 0, access, signal: Signal::Segv(SegvCode::MapErr) }
}

impl super::MmRead<'_> {
    /// [`Mm::gup_access`] under the mmap read lock.
    pub(crate) fn gup_access_locked(&self, addr: u64, write: bool) -> Result<(), Errno> {
        let addr = addr & PAGE_MASK;
        let Some(v) = self.lookup(addr) else { return Err(Errno::EFAULT) };
        let fl = v.fl();
        let ok = if write { fl.intersects(VmFlags::WRITE) } else { fl.intersects(VmFlags::READ) };
        if !ok || fl.intersects(VmFlags::IO | VmFlags::PFNMAP) {
            return Err(Errno::EFAULT);
        }
        self.gup_page(v, addr, write).map_err(FaultError::gup_errno)
    }
}

impl MmWrite<'_> {
    /// `expand_downwards`: grows the growsdown VMA `v` down to `addr` (page-aligned).
    pub(crate) fn expand_downwards(&mut self, v: V, addr: u64) -> Result<(), Errno> {
        if addr < self.cfg.min_addr() {
            return Err(Errno::EPERM);
        }
        if let Some(prev) = self.prev_of(v.start())
            && !prev.fl().intersects(VmFlags::GROWSDOWN)
            && prev.fl().intersects(VmFlags::ACCESS_FLAGS)
            && addr - prev.end() < self.cfg.stack_guard_gap
        {
            return Err(Errno::ENOMEM);
        }
        self.reserve(1)?;
        self.anon_vma_prepare(v);
        let size = v.end() - addr;
        let grow = (v.start() - addr) >> config::PAGE_SHIFT;
        // acct_stack_growth: the stack rlimit, then the mlock limit, then overcommit.
        if grow > v.pgoff() || size > self.cfg.stack_rlimit {
            return Err(Errno::ENOMEM);
        }
        if !self.mlock_future_ok(v.fl(), grow << config::PAGE_SHIFT) {
            return Err(Errno::ENOMEM);
        }
        self.enough_memory(grow)?;
        let (end, pgoff) = (v.end(), v.pgoff() - grow);
        self.set_range(v, addr, end, pgoff);
        if v.fl().intersects(VmFlags::LOCKED) {
            self.st.locked_vm += grow;
        }
        Ok(())
    }
}
