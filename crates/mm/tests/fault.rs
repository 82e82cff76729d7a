//! The 6.18 fault path (`arch/x86/mm/fault.c: do_user_addr_fault` → `mm/memory.c: handle_mm_fault`) through
//! `Mm::fault`: every kind of fault and refusal, the per-VMA lock with its fall-backs to the mmap lock
//! (counted as `/proc/vmstat` counts them: `vma_lock_success`, `_abort`, `_retry`), stack growth under the
//! write lock, and the mmap-lock-only mode. `validate()` after every step.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use vmspace_mm::vma::vma_start_write;
use vmspace_mm::{
    Access, Advice, Errno, FaultKind, FaultMode, MapFlags, Memory, MemoryConfig, Mm, MmConfig, Prot, VmFile,
};

const P: u64 = 4096;
const B: u64 = 0x2000_0000_0000;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

fn mm() -> Mm {
    Mm::with_memory(
        MmConfig::default(),
        Memory::new(MemoryConfig { fault_around_bytes: 0, ..MemoryConfig::default() }),
    )
}

fn ok(m: &Mm) {
    m.validate().unwrap_or_else(|e| panic!("{e}\n{}", m.maps_text()));
}

#[test]
fn anonymous_faults() {
    let m = mm();
    m.mmap(B, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    assert_eq!(m.fault(B, Access::Read), Ok(FaultKind::AnonZero));
    ok(&m);
    // The zero page is read-only: the write copies it.
    assert_eq!(m.fault(B, Access::Write), Ok(FaultKind::WpCopy));
    assert_eq!(m.fault(B + P, Access::Write), Ok(FaultKind::AnonNew));
    // Already mapped writable: nothing to do.
    assert_eq!(m.fault(B + P, Access::Write), Ok(FaultKind::Spurious));
    assert_eq!(m.rss().anon, 2);
    let mut b = [1u8; 8];
    m.read(B + 2 * P, &mut b).unwrap();
    assert_eq!(b, [0; 8], "fresh anonymous memory reads as zeroes");
    ok(&m);
    let s = m.fault_stats().faults;
    assert_eq!((s.anon_zero, s.wp_copy, s.anon_new, s.spurious), (2, 1, 1, 1), "{s:?}");
}

#[test]
fn access_errors_are_sigsegv() {
    let m = mm();
    m.mmap(B, P, Prot::READ, ANON, None, 0).unwrap();
    m.mmap(B + P, P, Prot::NONE, ANON, None, 0).unwrap();
    m.mmap(B + 2 * P, P, Prot::WRITE, ANON, None, 0).unwrap();
    m.mmap(B + 3 * P, P, Prot::EXEC, ANON, None, 0).unwrap();
    assert_eq!(m.fault(B, Access::Write), Err(Errno::EFAULT), "write to read-only");
    assert_eq!(m.fault(B, Access::Exec), Err(Errno::EFAULT), "exec of non-exec");
    assert_eq!(m.fault(B + P, Access::Read), Err(Errno::EFAULT), "PROT_NONE");
    // x86 page tables cannot express write-only or exec-only: reads are allowed (access_error).
    assert_eq!(m.fault(B + 2 * P, Access::Read), Ok(FaultKind::AnonZero));
    assert_eq!(m.fault(B + 3 * P, Access::Read), Ok(FaultKind::AnonZero));
    assert_eq!(m.fault(B + 3 * P, Access::Exec), Ok(FaultKind::Spurious));
    // No VMA at all.
    assert_eq!(m.fault(B + 64 * P, Access::Read), Err(Errno::EFAULT));
    // A guard region.
    m.mmap(B + 8 * P, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    m.madvise(B + 9 * P, P, Advice::GUARD_INSTALL).unwrap();
    assert_eq!(m.fault(B + 9 * P, Access::Read), Err(Errno::EFAULT));
    assert_eq!(m.write(B + 9 * P + 5, b"x").map_err(|f| f.addr), Err(B + 9 * P + 5));
    m.madvise(B + 9 * P, P, Advice::GUARD_REMOVE).unwrap();
    assert_eq!(m.fault(B + 9 * P, Access::Write), Ok(FaultKind::AnonNew));
    // Stores stop at the first page that refuses, after writing the bytes before it.
    assert_eq!(m.write(B + 12 * P - 2, b"abcd").map_err(|f| f.addr), Err(B + 12 * P));
    let mut b = [0u8; 2];
    m.read(B + 12 * P - 2, &mut b).unwrap();
    assert_eq!(&b, b"ab");
    ok(&m);
}

#[test]
fn file_faults_and_sigbus_beyond_the_end() {
    let m = mm();
    let f = VmFile::regular("/vmspace/f", 1, 2 * P + 100);
    // A shared and a private mapping of the file, both longer than the file.
    m.mmap(B, 4 * P, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 0).unwrap();
    m.mmap(B + 8 * P, 4 * P, Prot::RW, MapFlags::PRIVATE | MapFlags::FIXED, Some(&f), 0).unwrap();
    assert_eq!(m.fault(B, Access::Write), Ok(FaultKind::Shared));
    m.write(B + 10, b"shared").unwrap();
    assert_eq!(m.fault(B + 8 * P, Access::Read), Ok(FaultKind::Read));
    let mut b = [0u8; 6];
    m.read(B + 8 * P + 10, &mut b).unwrap();
    assert_eq!(&b, b"shared", "the private mapping reads the file");
    // A private write copies the page; the file keeps its bytes.
    assert_eq!(m.fault(B + 8 * P, Access::Write), Ok(FaultKind::WpCopy));
    m.write(B + 8 * P + 10, b"mine!!").unwrap();
    m.read(B + 10, &mut b).unwrap();
    assert_eq!(&b, b"shared");
    assert_eq!(m.fault(B + 9 * P, Access::Write), Ok(FaultKind::Cow));
    // The last page is partial: its tail reads as zeroes; the page after the end is SIGBUS.
    assert_eq!(m.fault(B + 2 * P, Access::Read), Ok(FaultKind::Read));
    assert_eq!(m.fault(B + 3 * P, Access::Read), Err(Errno::EIO));
    assert_eq!(m.fault(B + 11 * P, Access::Write), Err(Errno::EIO));
    ok(&m);
    // ftruncate: the shared page and the private copy beyond the new end go; touching them is SIGBUS.
    f.ftruncate(P).unwrap();
    assert_eq!(m.fault(B + P, Access::Read), Err(Errno::EIO));
    assert_eq!(m.fault(B + 9 * P, Access::Read), Err(Errno::EIO), "private copies go too (even_cows)");
    assert_eq!(m.read(B + 8 * P + 10, &mut b), Ok(()), "below the end: the private copy stays");
    assert_eq!(&b, b"mine!!");
    // Growing the file again exposes zeroes.
    f.ftruncate(4 * P).unwrap();
    let mut z = [9u8; 4];
    m.read(B + 3 * P, &mut z).unwrap();
    assert_eq!(z, [0; 4]);
    ok(&m);
}

#[test]
fn shared_anonymous_memory_is_shared_with_children() {
    let m = mm();
    m.mmap(B, 2 * P, Prot::RW, MapFlags::SHARED | MapFlags::ANONYMOUS | MapFlags::FIXED, None, 0).unwrap();
    m.mmap(B + 4 * P, 2 * P, Prot::RW, ANON, None, 0).unwrap();
    m.write(B, b"before").unwrap();
    m.write(B + 4 * P, b"before").unwrap();
    let c = m.fork().unwrap();
    c.write(B, b"child!").unwrap();
    c.write(B + 4 * P, b"child!").unwrap();
    let mut b = [0u8; 6];
    m.read(B, &mut b).unwrap();
    assert_eq!(&b, b"child!", "shared memory is shared");
    m.read(B + 4 * P, &mut b).unwrap();
    assert_eq!(&b, b"before", "private memory is copied on write");
    ok(&m);
    ok(&c);
    Mm::check_memory(&[&m, &c], &[]).unwrap();
}

#[test]
fn stack_growth_under_the_write_lock() {
    let m = mm();
    let top = B + 1024 * P;
    m.mmap(top - 4 * P, 4 * P, Prot::RW, ANON | MapFlags::GROWSDOWN, None, 0).unwrap();
    // A fault below the stack grows it to the faulting page (`expand_stack` in `lock_mm_and_find_vma`).
    assert_eq!(m.fault(top - 10 * P + 8, Access::Write), Ok(FaultKind::AnonNew));
    let v = m.vma_at(top - 10 * P).expect("grown");
    assert_eq!((v.start, v.end), (top - 10 * P, top));
    // Not within stack_guard_gap of a mapping below it.
    m.mmap(top - 100 * P, P, Prot::RW, ANON, None, 0).unwrap();
    assert_eq!(m.fault(top - 80 * P, Access::Read), Err(Errno::EFAULT));
    assert_eq!(m.vma_at(top - 10 * P).map(|v| v.start), Some(top - 10 * P));
    // GUP (the op-script touch through process_vm_readv) never grows a stack.
    assert_eq!(m.gup_access(top - 11 * P, false), Err(Errno::EFAULT));
    ok(&m);
}

#[test]
fn per_vma_lock_counters() {
    let m = mm();
    m.mmap(B, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    m.mmap(B + 8 * P, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    // The first write needs an anon_vma: with the mmap lock free, vmf_anon_prepare takes it with a trylock.
    m.fault(B, Access::Write).unwrap();
    m.fault(B + P, Access::Read).unwrap();
    let s = m.fault_stats().vma_lock;
    assert_eq!((s.success, s.abort, s.retry, s.miss), (2, 0, 0, 0), "{s:?}");
    // No VMA: lock_vma_under_rcu aborts (`inval`), and the mmap-lock path finds nothing either.
    assert_eq!(m.fault(B + 6 * P, Access::Read), Err(Errno::EFAULT));
    assert_eq!(m.fault_stats().vma_lock.abort, 1);
    // An access error under the VMA lock is a success of the lock.
    m.mprotect(B + 2 * P, P, Prot::READ).unwrap();
    assert_eq!(m.fault(B + 2 * P, Access::Write), Err(Errno::EFAULT));
    assert_eq!(m.fault_stats().vma_lock.success, 3);

    // Another thread holds the mmap write lock (a call changing some other VMA): a fault in a VMA that is not
    // write-locked proceeds under its VMA lock, but its first anonymous page needs the anon_vma, the trylock
    // fails: VM_FAULT_RETRY, and the fault waits for the mmap read lock.
    let locking = m.locking();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = locking.write_lock();
        let t = s.spawn(|| {
            let r = m.fault(B + 8 * P, Access::Write);
            // Relaxed: a progress flag for the checking thread (the join publishes the rest).
            done.store(true, Ordering::Relaxed);
            r
        });
        while m.fault_stats().vma_lock.retry == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(!done.load(Ordering::Relaxed), "the retried fault waits for the mmap lock");
        drop(w);
        assert_eq!(t.join().unwrap(), Ok(FaultKind::AnonNew));
    });
    let s = m.fault_stats().vma_lock;
    assert_eq!((s.success, s.retry), (3, 1), "{s:?}");
    // Now the VMA has its anon_vma: faults complete under the VMA lock even with the mmap lock held.
    std::thread::scope(|s| {
        let w = locking.write_lock();
        let t = s.spawn(|| m.fault(B + 9 * P, Access::Write));
        assert_eq!(t.join().unwrap(), Ok(FaultKind::AnonNew));
        drop(w);
    });
    assert_eq!(m.fault_stats().vma_lock.success, 4);
    // A write-locked VMA (a call changing it holds the mmap write lock): lock_vma_under_rcu aborts and the
    // fault waits for the mmap read lock.
    std::thread::scope(|s| {
        let w = locking.write_lock();
        vma_start_write(locking, m.lookup(B + 8 * P).unwrap());
        let t = s.spawn(|| m.fault(B + 10 * P, Access::Write));
        while m.fault_stats().vma_lock.abort < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(w);
        assert_eq!(t.join().unwrap(), Ok(FaultKind::AnonNew));
    });
    let s = m.fault_stats().vma_lock;
    assert_eq!((s.success, s.abort, s.retry), (4, 2, 1), "{s:?}");
    ok(&m);
}

#[test]
fn mmap_lock_only_mode() {
    let m = Mm::new(MmConfig { fault_mode: FaultMode::MmapLock, ..MmConfig::default() });
    assert_eq!(m.fault_mode(), FaultMode::MmapLock);
    m.mmap(B, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    m.fill(B, 4 * P, 3).unwrap();
    assert_eq!(m.fault(B + 8 * P, Access::Read), Err(Errno::EFAULT));
    let s = m.fault_stats();
    assert_eq!((s.vma_lock.success, s.vma_lock.abort, s.vma_lock.retry), (0, 0, 0), "{s:?}");
    assert_eq!(s.faults.anon_new, 4);
    // The mode can be switched, and a single fault can choose its own.
    m.set_fault_mode(FaultMode::PerVma);
    m.fault(B, Access::Read).unwrap();
    assert_eq!(m.fault_stats().vma_lock.success, 1);
    m.fault_with(B, Access::Read, FaultMode::MmapLock).unwrap();
    assert_eq!(m.fault_stats().vma_lock.success, 1);
    ok(&m);
}

/// MAP_POPULATE and MADV_POPULATE_* fault pages in as GUP does; mlock's population too.
#[test]
fn population_faults_pages_in() {
    let m = mm();
    m.mmap(B, 8 * P, Prot::RW, ANON | MapFlags::POPULATE, None, 0).unwrap();
    assert_eq!(m.rss().anon, 8, "MAP_POPULATE of a private writable mapping writes every page in");
    let f = VmFile::regular("/vmspace/f", 1, 4 * P);
    m.mmap(B + 16 * P, 4 * P, Prot::READ, MapFlags::SHARED | MapFlags::FIXED, Some(&f), 0).unwrap();
    m.madvise(B + 16 * P, 4 * P, Advice::POPULATE_READ).unwrap();
    assert_eq!(m.rss().file, 4);
    m.mmap(B + 32 * P, 4 * P, Prot::RW, ANON, None, 0).unwrap();
    m.madvise(B + 32 * P, 2 * P, Advice::POPULATE_WRITE).unwrap();
    assert_eq!(m.rss().anon, 10);
    m.mlock(B + 34 * P, 2 * P).unwrap();
    assert_eq!(m.rss().anon, 12, "mlock populates");
    // DONTNEED drops them again; anonymous memory then reads as zeroes.
    m.fill(B, 8 * P, 0xaa).unwrap();
    m.madvise(B, 8 * P, Advice::DONTNEED).unwrap();
    assert_eq!(m.rss().anon, 4);
    let mut b = [7u8; 16];
    m.read(B + 3 * P, &mut b).unwrap();
    assert_eq!(b, [0; 16]);
    ok(&m);
}
