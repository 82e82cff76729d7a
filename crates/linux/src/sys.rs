//! Thin, checked wrappers over the system calls the probe needs.
//!
//! Everything here is a direct system call through `rustix` (`libc` is used elsewhere only where `rustix` has no
//! safe wrapper: `fork`, `_exit`, `sigaction`). The wrappers turn raw pointers into
//! addresses (`usize`) so that callers never hold a Rust reference into memory that another call may unmap: the
//! experiments map, unmap and remap pages that nobody dereferences except through [`touch_pages`].
//!
//! Errors are the kernel's errno values ([`rustix::io::Errno`]), unchanged.

use rustix::io::Errno;
use rustix::mm::{MapFlags, MprotectFlags, MremapFlags, ProtFlags};
use std::ffi::c_void;
use std::time::Duration;

/// The size of a base page on this machine, in bytes.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// The CPUs this process may run on (its affinity mask), in ascending order.
pub fn usable_cpus() -> Result<Vec<usize>, Errno> {
    let set = rustix::thread::sched_getaffinity(None)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> Result<(), Errno> {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(Errno::INVAL);
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)
}

/// Sets the nice value of the calling process (on Linux: of the calling thread).
pub fn set_nice(nice: i32) -> Result<(), Errno> {
    rustix::process::setpriority_process(None, nice)
}

/// Converts protection bits as the experiments describe them (read, write, execute) into `rustix` flags.
pub fn prot(read: bool, write: bool, exec: bool) -> ProtFlags {
    let mut p = ProtFlags::empty();
    if read {
        p |= ProtFlags::READ;
    }
    if write {
        p |= ProtFlags::WRITE;
    }
    if exec {
        p |= ProtFlags::EXEC;
    }
    p
}

/// Maps `len` bytes of private anonymous memory anywhere; returns the address.
pub fn map_anon(len: usize, prot: ProtFlags, populate: bool) -> Result<usize, Errno> {
    let mut flags = MapFlags::PRIVATE;
    if populate {
        flags |= MapFlags::POPULATE;
    }
    // SAFETY: a null hint without MAP_FIXED lets the kernel choose a free range, so no existing mapping (and no
    // Rust object) is replaced.
    let p = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, prot, flags)? };
    Ok(p as usize)
}

/// Maps `len` bytes of private anonymous memory at the kernel's choice, preferring `hint` (no `MAP_FIXED`: an
/// occupied hint is only a hint). `hint` 0 is [`map_anon`] without population.
pub fn map_anon_near(hint: usize, len: usize, prot: ProtFlags) -> Result<usize, Errno> {
    // SAFETY: without MAP_FIXED the kernel never replaces an existing mapping; it takes the hint only if the
    // range is free.
    let p = unsafe { rustix::mm::mmap_anonymous(hint as *mut c_void, len, prot, MapFlags::PRIVATE)? };
    Ok(p as usize)
}

/// Whether `[addr, addr + len)` is free in this process: a `MAP_FIXED_NOREPLACE` probe, unmapped again at once
/// when it succeeds (`EEXIST` when anything is there).
pub fn range_free(addr: usize, len: usize) -> bool {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping: it fails with EEXIST if anything is there,
    // so no Rust object can be affected.
    let r = unsafe {
        rustix::mm::mmap_anonymous(
            addr as *mut c_void,
            len,
            ProtFlags::empty(),
            MapFlags::PRIVATE | MapFlags::FIXED_NOREPLACE,
        )
    };
    match r {
        Ok(p) => {
            // Kernels before 4.17 treat the flag as a hint: a mapping elsewhere means the range was taken.
            // SAFETY: `p` is the probe mapping just made, at its own range; nothing refers to it.
            let _ = unsafe { rustix::mm::munmap(p, len) };
            p as usize == addr
        }
        Err(_) => false,
    }
}

/// Maps `len` bytes of shared anonymous memory anywhere (inherited by forked children, shared with them).
pub fn map_shared_anon(len: usize) -> Result<usize, Errno> {
    // SAFETY: as in `map_anon`: the kernel chooses a free range.
    let p = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
        )?
    };
    Ok(p as usize)
}

/// Maps fresh private anonymous memory at exactly `addr` (MAP_FIXED), replacing whatever was there.
///
/// # Safety
/// `[addr, addr + len)` must not hold memory that any live Rust reference or object points into; the caller owns
/// that range (it was mapped for the experiment).
pub unsafe fn map_fixed(addr: usize, len: usize, prot: ProtFlags) -> Result<(), Errno> {
    // SAFETY: the caller guarantees the range is owned by the experiment and unreferenced.
    unsafe {
        rustix::mm::mmap_anonymous(addr as *mut c_void, len, prot, MapFlags::PRIVATE | MapFlags::FIXED)?;
    }
    Ok(())
}

/// Unmaps `[addr, addr + len)`.
///
/// # Safety
/// As for [`map_fixed`]: the range belongs to the experiment and nothing references it.
pub unsafe fn unmap(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: the caller guarantees the range is owned by the experiment and unreferenced.
    unsafe { rustix::mm::munmap(addr as *mut c_void, len) }
}

/// Changes the protection of `[addr, addr + len)`.
///
/// # Safety
/// As for [`map_fixed`]; in addition nothing may access the range in a way the new protection forbids.
pub unsafe fn protect(addr: usize, len: usize, prot: ProtFlags) -> Result<(), Errno> {
    let mut f = MprotectFlags::empty();
    if prot.contains(ProtFlags::READ) {
        f |= MprotectFlags::READ;
    }
    if prot.contains(ProtFlags::WRITE) {
        f |= MprotectFlags::WRITE;
    }
    if prot.contains(ProtFlags::EXEC) {
        f |= MprotectFlags::EXEC;
    }
    // SAFETY: the caller guarantees the range is owned by the experiment and unreferenced.
    unsafe { rustix::mm::mprotect(addr as *mut c_void, len, f) }
}

/// Resizes the mapping at `addr` in place (`mremap` without MAYMOVE).
///
/// # Safety
/// As for [`map_fixed`], for both the old and the new extent.
pub unsafe fn remap_in_place(addr: usize, old_len: usize, new_len: usize) -> Result<(), Errno> {
    // SAFETY: the caller guarantees both extents are owned by the experiment and unreferenced.
    unsafe { rustix::mm::mremap(addr as *mut c_void, old_len, new_len, MremapFlags::empty())? };
    Ok(())
}

/// Moves `[old, old + len)` to `new` with MREMAP_FIXED | MREMAP_MAYMOVE | MREMAP_DONTUNMAP (the source stays
/// mapped, empty).
///
/// # Safety
/// As for [`map_fixed`], for both ranges.
pub unsafe fn remap_dontunmap(old: usize, len: usize, new: usize) -> Result<(), Errno> {
    // SAFETY: the caller guarantees both ranges are owned by the experiment and unreferenced.
    unsafe {
        rustix::mm::mremap_fixed(
            old as *mut c_void,
            len,
            len,
            MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP,
            new as *mut c_void,
        )?
    };
    Ok(())
}

/// Asks the kernel not to back `[addr, addr + len)` with transparent huge pages (so that every base page
/// faults separately).
///
/// # Safety
/// As for [`map_fixed`].
pub unsafe fn no_huge_pages(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: the caller guarantees the range is owned by the experiment; the advice does not change contents.
    unsafe { rustix::mm::madvise(addr as *mut c_void, len, rustix::mm::Advice::LinuxNoHugepage) }
}

/// Writes one byte into every page of `[addr, addr + len)`, faulting each page in; returns the page count.
///
/// # Safety
/// The range must be mapped writable for the whole call and owned by the caller (no other thread unmaps it).
pub unsafe fn touch_pages(addr: usize, len: usize, page: usize) -> usize {
    let mut n = 0;
    let mut a = addr;
    while a < addr + len {
        // SAFETY: the caller guarantees the page is mapped writable and owned; a volatile write makes sure the
        // compiler does not elide the store that causes the fault.
        unsafe { std::ptr::write_volatile(a as *mut u8, 1) };
        a += page;
        n += 1;
    }
    n
}

/// Sleeps for `d` with one `nanosleep` call (no retry on a signal: the callers only need "about d").
pub fn sleep_once(d: Duration) {
    let ts = rustix::time::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: i64::from(d.subsec_nanos()) };
    let _ = rustix::thread::nanosleep(&ts);
}

/// Reads a small text file fully (for /proc and /sys files); `None` if it cannot be read.
pub fn read_text(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}
