//! Reading an address space's maps, three ways: as text (`/proc/PID/maps` byte for byte), as value snapshots,
//! and from another thread while the writer keeps changing the address space, with `lock_next_vma` (the
//! lock-free walk that `/proc/PID/maps` uses since Linux 6.17: each VMA read-locked on its own, no mmap_lock
//! unless a writer gets in the way).
//!
//! Run with `cargo run -p vmspace-mm --example read_maps`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use vmspace_mm::{MapFlags, Mm, MmConfig, MmShared, PAGE_SIZE, Prot, lock_next_vma};

const P: u64 = PAGE_SIZE;
const BASE: u64 = 0x2000_0000_0000;

/// Runs the three readers; panics if one sees something impossible.
pub fn main() {
    let mm = Mm::new(MmConfig { anon_vma_name: true, ..MmConfig::default() });
    let af = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    // Eight VMAs with alternating protection (so they do not merge), one of them named.
    for i in 0..8 {
        let prot = if i % 2 == 0 { Prot::RW } else { Prot::READ };
        mm.mmap(BASE + 2 * i * P, 2 * P, prot, af, None, 0).expect("mmap");
    }
    mm.set_anon_name(BASE, 2 * P, Some("arena")).expect("name");

    // 1. Text: what /proc/PID/maps prints.
    print!("{}", mm.maps_text());
    assert!(mm.maps_text().lines().next().unwrap().ends_with("[anon:arena]"));

    // 2. Snapshots: plain values (range, flags, pgoff, file, anon_vma, name) that stay valid whatever the
    //    address space does next.
    let snaps: Vec<_> = mm.vmas().collect();
    assert_eq!(snaps.len(), 8);
    assert!(snaps.windows(2).all(|w| w[0].end == w[1].start));
    println!("first VMA: {:?}", snaps[0]);

    // 3. A reader thread walks the maps again and again with lock_next_vma while this thread splits and
    //    re-merges the VMAs. The walk never sees a false gap: every page stays mapped throughout. It may see
    //    part of the range twice: a VMA read before a merge, then the merged VMA, which starts below where
    //    the walk resumes (as /proc/PID/maps may print a VMA before and after a change).
    let shared: Arc<MmShared> = mm.shared();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (shared, stop) = (shared.clone(), stop.clone());
        thread::spawn(move || {
            let mut walks = 0u64;
            while !stop.load(Ordering::Relaxed) || walks == 0 {
                let mut from = BASE;
                while let Some(v) = lock_next_vma(&shared.locking, &*shared, from).expect("lock_next_vma") {
                    if v.start() >= BASE + 16 * P {
                        break;
                    }
                    assert!(v.start() <= from, "a false gap from {from:#x} to {:#x}", v.start());
                    assert!(v.end() > from, "the walk went backwards at {from:#x}");
                    from = v.end();
                }
                assert_eq!(from, BASE + 16 * P, "the walk stopped short");
                walks += 1;
            }
            walks
        })
    };
    for round in 0..200u64 {
        let page = BASE + (round % 16) * P;
        mm.mprotect(page, P, Prot::RX).expect("mprotect");
        let back = if (round % 16) / 2 % 2 == 0 { Prot::RW } else { Prot::READ };
        mm.mprotect(page, P, back).expect("mprotect back");
    }
    stop.store(true, Ordering::Relaxed);
    let walks = reader.join().expect("reader");
    println!("the reader walked the maps {walks} times while the writer changed them");
    assert_eq!(mm.vmas().count(), 8, "every split merged back");
    mm.validate().expect("invariants hold");
}
