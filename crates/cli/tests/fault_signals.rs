//! The signal of each failed user access, engine against the live kernel: a forked child lays out the same
//! pages as an engine address space (anonymous pages of each protection, a hole, a guard region, a file mapped
//! past its end, a stack below a mapped page, addresses outside the canonical range), makes each access with
//! the runner's fault-surviving accessors (`vmspace_linux::uaccess`, which record `si_signo`, `si_code` and
//! `si_addr`), and the engine's `Mm::read` / `Mm::write` must answer the same signal (`vmspace_mm::Fault`) at
//! the same address. The engine is configured from the host (`MmConfig::host`), so protection keys are
//! modelled exactly when the CPU has them.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use vmspace_linux::child::{Exit, SharedSlots, spawn};
use vmspace_linux::uaccess;
use vmspace_mm::{Advice, MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, Signal, VmFile};

const P: u64 = PAGE_SIZE;
/// Pages of the layout.
const PAGES: u64 = 24;

/// One page of the layout: its page index, protection, and how it is mapped.
#[derive(Clone, Copy)]
enum Map {
    Anon(Prot),
    /// Anonymous read-write, guard region installed.
    Guard,
    /// The file (one page long) mapped shared from offset 0 over two pages.
    FileShared,
    /// The same, private.
    FilePrivate,
}

/// The layout: (first page, pages, mapping). Every other page is a hole.
const LAYOUT: [(u64, u64, Map); 8] = [
    (0, 1, Map::Anon(Prot::RW)),
    (2, 1, Map::Anon(Prot::READ)),
    (4, 1, Map::Anon(Prot::NONE)),
    (6, 1, Map::Anon(Prot::WRITE)),
    (8, 1, Map::Anon(Prot::EXEC)),
    (10, 2, Map::Guard),
    (13, 2, Map::FileShared),
    (16, 2, Map::FilePrivate),
];
/// One-page `MAP_GROWSDOWN` stacks: one two pages above the private file mapping's end (the page between is a
/// hole), one far from anything.
const STACKS: [u64; 2] = [19, 23];

/// The accesses: (address, write). An address below 2^47 is an offset into the layout.
fn accesses() -> Vec<(u64, bool)> {
    let page = |i: u64| i * P;
    vec![
        (page(0) + 8, true),
        (page(1), false),               // a hole
        (page(2), false),               // r--
        (page(2) + 16, true),           // r--, written
        (page(4), false),               // ---
        (page(6), false),               // -w- read: x86 cannot express write-only
        (page(8), false),               // --x read (SEGV_PKUERR where PKU gives the execute-only key)
        (page(10), false),              // the guarded VMA's first page is fine...
        (page(11) + 100, false),        // ...its guard page is not
        (page(13), true),               // the file's one page
        (page(14), false),              // past the shared file's end
        (page(17) + 1, true),           // past the private file's end
        (page(18), false),              // below a stack, a page above a mapped page: no room to grow
        (page(22), false),              // below a stack with room: it grows
        (1 << 47, false),               // not canonical
        (0xffff_ffff_ff60_0000, false), // the kernel half (vsyscall page: execute-only)
        (0xffff_8000_0000_0000, true),  // the kernel half
    ]
}

/// What an access gave: 0, or `si_signo << 32 | si_code` and `si_addr`.
type Result2 = (u64, u64);

fn pack(signo: i32, code: i32) -> u64 {
    ((signo as u64) << 32) | code as u32 as u64
}

/// The kernel's answers, from a child laying the layout out at a base address of its own.
fn kernel(file: &std::fs::File) -> (u64, Vec<Result2>) {
    let n = accesses().len();
    let slots = SharedSlots::new(1 + 2 * n).unwrap();
    let fd = file.as_raw_fd();
    let mut c = spawn(|| {
        uaccess::install().unwrap();
        // SAFETY: the child's own mappings, placed in a range it reserved; nothing refers to them.
        unsafe {
            let base = libc::mmap(
                core::ptr::null_mut(),
                (PAGES * P) as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let base = base as u64;
            libc::munmap(base as *mut _, (PAGES * P) as usize);
            let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED;
            let map = |page: u64, pages: u64, prot: i32, flags: i32, fd: i32| {
                let p = libc::mmap((base + page * P) as *mut _, (pages * P) as usize, prot, flags, fd, 0);
                assert_eq!(p as u64, base + page * P);
            };
            for (page, pages, m) in LAYOUT {
                match m {
                    Map::Anon(prot) => map(page, pages, prot.bits() as i32, anon, -1),
                    Map::Guard => {
                        map(page, pages, libc::PROT_READ | libc::PROT_WRITE, anon, -1);
                        let r = libc::madvise((base + (page + 1) * P) as *mut _, P as usize, 102);
                        assert_eq!(r, 0, "MADV_GUARD_INSTALL");
                    }
                    Map::FileShared => map(page, pages, 3, libc::MAP_SHARED | libc::MAP_FIXED, fd),
                    Map::FilePrivate => map(page, pages, 3, libc::MAP_PRIVATE | libc::MAP_FIXED, fd),
                }
            }
            for s in STACKS {
                map(s, 1, 3, anon | libc::MAP_GROWSDOWN, -1);
            }
            slots.get(0).store(base, Ordering::Relaxed);
            for (i, (a, write)) in accesses().into_iter().enumerate() {
                let addr = if a < 1 << 47 { base + a } else { a };
                let r = if write { uaccess::write_keep(addr) } else { uaccess::read(&mut [0u8; 1], addr) };
                let (code, at) = match r {
                    Ok(()) => (0, 0),
                    Err(f) => (pack(f.signo, f.code), f.addr),
                };
                slots.get(1 + 2 * i).store(code, Ordering::Relaxed);
                slots.get(2 + 2 * i).store(at, Ordering::Relaxed);
            }
        }
        0
    })
    .unwrap();
    assert_eq!(c.wait().unwrap(), Exit::Code(0), "the kernel child failed");
    let base = slots.get(0).load(Ordering::Relaxed);
    let out = (0..n)
        .map(|i| (slots.get(1 + 2 * i).load(Ordering::Relaxed), slots.get(2 + 2 * i).load(Ordering::Relaxed)))
        .collect();
    (base, out)
}

/// The engine's answers for the same layout at `base`.
fn engine(base: u64) -> Vec<Result2> {
    let mm = Mm::new(MmConfig::host());
    let file = VmFile::regular("/tmp/fault-signals", 1, P);
    let anon = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    for (page, pages, m) in LAYOUT {
        let (a, len) = (base + page * P, pages * P);
        let r = match m {
            Map::Anon(prot) => mm.mmap(a, len, prot, anon, None, 0),
            Map::Guard => mm
                .mmap(a, len, Prot::RW, anon, None, 0)
                .and_then(|a| mm.madvise(a + P, P, Advice::GUARD_INSTALL).map(|()| a)),
            Map::FileShared => mm.mmap(a, len, Prot::RW, MapFlags::SHARED | MapFlags::FIXED, Some(&file), 0),
            Map::FilePrivate => {
                mm.mmap(a, len, Prot::RW, MapFlags::PRIVATE | MapFlags::FIXED, Some(&file), 0)
            }
        };
        assert_eq!(r, Ok(a));
    }
    for s in STACKS {
        assert_eq!(mm.mmap(base + s * P, P, Prot::RW, anon | MapFlags::GROWSDOWN, None, 0), Ok(base + s * P));
    }
    let out = accesses()
        .into_iter()
        .map(|(a, write)| {
            let addr = if a < 1 << 47 { base + a } else { a };
            let r = if write { mm.write(addr, &[0]) } else { mm.read(addr, &mut [0u8; 1]) };
            match r {
                Ok(()) => (0, 0),
                Err(f) => {
                    let at = if f.signal == Signal::Segv(vmspace_mm::SegvCode::Kernel) { 0 } else { f.addr };
                    (pack(f.signal.signo(), f.signal.code()), at)
                }
            }
        })
        .collect();
    mm.validate().unwrap();
    out
}

#[test]
fn every_failed_access_raises_the_kernels_signal() {
    let file = tempfile::tempfile().unwrap();
    file.set_len(P).unwrap();
    let (kbase, k) = kernel(&file);
    let e = engine(kbase);
    let show = |(code, at): Result2| {
        if code == 0 {
            "ok".to_string()
        } else {
            let s = Signal::from_siginfo((code >> 32) as i32, code as u32 as i32, 0).map_or_else(
                || format!("signo {} code {}", code >> 32, code as u32 as i32),
                |s| s.to_string(),
            );
            format!("{s} at {at:#x}")
        }
    };
    let mut diffs = Vec::new();
    for (i, (a, write)) in accesses().into_iter().enumerate() {
        let what = format!("{} {a:#x}", if write { "write" } else { "read" });
        println!("{what}: kernel {}, engine {}", show(k[i]), show(e[i]));
        if k[i] != e[i] {
            diffs.push(format!("{what}: kernel {}, engine {}", show(k[i]), show(e[i])));
        }
    }
    assert!(diffs.is_empty(), "the engine's signals differ:\n{}", diffs.join("\n"));
    // The layout exercises each code the x86 fault path raises here.
    let codes: std::collections::HashSet<u64> = k.iter().map(|r| r.0).collect();
    for (signo, code) in [(11, 1), (11, 2), (11, 0x80), (7, 2)] {
        assert!(codes.contains(&pack(signo, code)), "no access raised signo {signo} code {code}");
    }
}
