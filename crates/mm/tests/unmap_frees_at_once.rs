//! A large `munmap` gives its frames back before it returns, as the kernel's `tlb_finish_mmu` frees the pages
//! after the TLB shootdown: the zap's gather waits (a bounded time) for the grace period of its last batches
//! (`vmspace_rcu::expedite`) instead of leaving them queued until some later operation. So a program that maps,
//! writes and unmaps a region in a loop reuses the same frames and never grows the machine's memory past the
//! first round. One test in its own binary: no other test's readers share the process.
#![cfg(not(loom))]

use vmspace_mm::space::{MapFlags, Mm, MmConfig, Prot};

#[test]
fn a_large_munmap_frees_its_frames_before_it_returns() {
    let mm = Mm::new(MmConfig::host());
    let anon = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
    let mut table_after_first = None;
    // 8 MiB (four full batches of the gather), then 32 and 40 MiB, across its periodic grace periods.
    for (round, len) in [8u64 << 20, 32 << 20, 40 << 20].into_iter().flat_map(|l| [l; 6]).enumerate() {
        let a = mm.mmap(0, len, Prot::RW, anon, None, 0).unwrap();
        for p in (a..a + len).step_by(4096) {
            mm.write(p, &[round as u8 + 1]).unwrap();
        }
        mm.munmap(a, len).unwrap();
        let s = mm.memory().stats();
        assert_eq!(s.frames_in_use, 0, "round {round}: {s:?}");
        assert_eq!(s.frames_pending_free, 0, "round {round}: the munmap left frames queued: {s:?}");
        match table_after_first {
            Some(t) if round % 6 != 0 => assert_eq!(
                (s.frame_table_bytes, s.data_from_system),
                t,
                "round {round}: memory grew although every frame was free: {s:?}"
            ),
            _ => table_after_first = Some((s.frame_table_bytes, s.data_from_system)),
        }
        mm.validate().unwrap();
    }
}
