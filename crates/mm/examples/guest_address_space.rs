//! A guest address space as a user-mode emulator keeps it: the emulator loads a guest program's segments,
//! gives it a heap (`brk`) and a stack, and forwards the guest's `mmap`/`mprotect`/`munmap` system calls and
//! its memory accesses to a `vmspace_mm::Mm`, which answers exactly as Linux 6.18 would (placement, merging,
//! errno, faults) and keeps the guest's memory: loads and stores go through its emulated MMU (`Mm::read`,
//! `Mm::write`), faulting pages in as the kernel would, and a forked guest shares its pages copy-on-write.
//!
//! Run with `cargo run -p vmspace-mm --example guest_address_space`; it prints the guest's
//! `/proc/self/maps` after each step and checks every answer.

use vmspace_mm::Access;
use vmspace_mm::{Errno, MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, VmFile, VmFlags};

const P: u64 = PAGE_SIZE;
/// Where the guest executable's text is loaded (a non-PIE x86-64 binary).
const TEXT: u64 = 0x40_0000;

/// Runs the scenario; panics if the engine answers anything Linux would not.
pub fn main() {
    // The guest's layout: the heap starts right after the data segment.
    let cfg = MmConfig { start_brk: TEXT + 0x10_0000, ..MmConfig::default() };
    let mm = Mm::new(cfg);

    // 1. Load the executable: text r-x and data rw- from one file, at fixed addresses (what an ELF loader does
    //    with the program headers), then the stack below the configured stack top, growing down.
    let exe = VmFile::regular("/guest/bin/app", 1, 4 * P);
    let fixed_private = MapFlags::PRIVATE | MapFlags::FIXED;
    assert_eq!(mm.mmap(TEXT, 2 * P, Prot::RX, fixed_private, Some(&exe), 0), Ok(TEXT));
    assert_eq!(mm.mmap(TEXT + 2 * P, P, Prot::RW, fixed_private, Some(&exe), 2 * P), Ok(TEXT + 2 * P));
    let stack_top = (mm.config().start_stack & !(P - 1)) + P;
    let stack = stack_top - 8 * P;
    let stack_flags = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED | MapFlags::GROWSDOWN;
    assert_eq!(mm.mmap(stack, 8 * P, Prot::RW, stack_flags, None, 0), Ok(stack));
    show(&mm, "loaded");

    // 2. The guest runs. Its loads and stores go through the MMU; where it refuses, the page fault is handled
    //    (`Mm::fault`, a user-mode access) and the access retried, or the guest gets SIGSEGV.
    mm.fault(TEXT, Access::Read).expect("text is readable");
    assert_eq!(mm.fault(TEXT, Access::Write), Err(Errno::EFAULT), "writing text is a SIGSEGV");
    assert_eq!(
        mm.write(TEXT + 8, b"patch").map_err(|f| f.addr),
        Err(TEXT + 8),
        "a store to text faults at its address"
    );
    mm.write(TEXT + 2 * P, b"initialised data").expect("data is writable");
    // A push just below the stack grows it (expand_stack), as on Linux.
    mm.write(stack - 16, &0x1234_u64.to_le_bytes()).expect("the stack grows down");
    assert_eq!(mm.vma_at(stack - 16).map(|v| v.start), Some(stack - P));
    let mut word = [0u8; 8];
    mm.read(stack - 16, &mut word).expect("pushed");
    assert_eq!(u64::from_le_bytes(word), 0x1234);

    // 3. malloc: the heap grows with brk, and big allocations get their own anonymous mapping, placed top-down.
    let heap = mm.brk(0);
    assert_eq!(mm.brk(heap + 32 * P), heap + 32 * P);
    mm.fill(heap + 5 * P, P, 0xa5).expect("heap is writable");
    let anon = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
    let big = mm.mmap(0, 64 * P, Prot::RW, anon, None, 0).expect("mmap");
    assert!(big < mm.config().mmap_base, "placed below mmap_base");
    show(&mm, "heap and a big allocation");

    // 4. A guard page inside the allocation (mprotect PROT_NONE) splits its VMA; accesses there fault.
    assert_eq!(mm.mprotect(big + 16 * P, P, Prot::NONE), Ok(()));
    assert_eq!(mm.fault(big + 16 * P, Access::Read), Err(Errno::EFAULT));
    let guard = mm.vma_at(big + 16 * P).expect("still mapped");
    assert!(!guard.flags.intersects(VmFlags::ACCESS_FLAGS));
    // The guest's bad arguments get the kernel's errno and change nothing.
    let before = mm.maps_text();
    assert_eq!(mm.mprotect(big + 1, P, Prot::READ), Err(Errno::EINVAL));
    assert_eq!(mm.mmap(0, 0, Prot::RW, anon, None, 0), Err(Errno::EINVAL));
    assert_eq!(mm.mprotect(big, P, Prot::from_bits_retain(0x40)), Err(Errno::EINVAL));
    assert_eq!(mm.maps_text(), before);

    // 5. fork: the child sees the parent's memory; each side's later stores are its own (copy-on-write).
    let child = mm.fork().expect("fork");
    child.write(TEXT + 2 * P, b"child's data!!!!").expect("the child's data page");
    let mut data = [0u8; 16];
    mm.read(TEXT + 2 * P, &mut data).expect("readable");
    assert_eq!(&data, b"initialised data", "the parent keeps its bytes");
    child.read(heap + 5 * P + 100, &mut data).expect("inherited heap");
    assert_eq!(data, [0xa5; 16]);
    drop(child);

    // 6. free: the allocation and the heap go away again.
    assert_eq!(mm.munmap(big, 64 * P), Ok(()));
    assert_eq!(mm.brk(heap), heap);
    assert!(mm.vma_at(big).is_none() && mm.vma_at(heap).is_none());
    show(&mm, "after free");
    assert_eq!(mm.map_count(), 3, "text, data and stack are left");
    mm.validate().expect("invariants hold");
}

/// Prints the guest's maps the way `/proc/self/maps` would show them.
fn show(mm: &Mm, when: &str) {
    println!("-- {when}: {} VMAs", mm.map_count());
    print!("{}", mm.maps_text());
}
