//! mremap's new address without `MREMAP_FIXED` (`mm/mremap.c: check_mremap_params`, `vrm_implies_new_addr`,
//! `vrm_set_new_addr`): with `MREMAP_DONTUNMAP` it is a hint that the parameter checks apply to (EINVAL for an
//! unaligned hint, one beyond `TASK_SIZE`, one overlapping the source), used when free; with neither flag it
//! is ignored. Observed on the live kernel with a C program (`scripts/regress/mremap-dontunmap-hint.script`
//! once the op-script syntax can pass it).
#![cfg(not(loom))]

use vmspace_mm::space::{Errno, MapFlags, Mm, MmConfig, MremapFlags, Prot};

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;

#[test]
fn dontunmap_hint_is_checked_check_mremap_params() {
    let m = Mm::new(MmConfig::default());
    let af = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(B + 20 * P, 2 * P, Prot::RW, af, None, 0).unwrap();
    let du = MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP;
    let src = B + 20 * P;
    assert_eq!(m.mremap(src, 2 * P, 2 * P, du, B + 40 * P + 1), Err(Errno::EINVAL));
    assert_eq!(m.mremap(src, 2 * P, 2 * P, du, B + 21 * P), Err(Errno::EINVAL));
    assert_eq!(m.mremap(src, 2 * P, 2 * P, du, 0x7fff_ffff_f000), Err(Errno::EINVAL));
    assert_eq!(m.mremap(src, 2 * P, 2 * P, MremapFlags::DONTUNMAP, B + 60 * P), Err(Errno::EINVAL));
    assert_eq!(m.mremap(src, 2 * P, 2 * P, du, B + 40 * P), Ok(B + 40 * P));
    // An occupied hint is not used: the kernel places the copy elsewhere.
    let moved = m.mremap(B + 40 * P, 2 * P, 2 * P, du, src).unwrap();
    assert!(moved != src && moved != B + 40 * P);
    // Without DONTUNMAP or FIXED the address is not even looked at.
    assert_eq!(m.mremap(B + 40 * P, 2 * P, 4 * P, MremapFlags::MAYMOVE, B + 60 * P + 1), Ok(B + 40 * P));
    m.validate().unwrap();
}
