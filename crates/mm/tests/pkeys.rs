//! Protection keys, one test per kernel rule (`mm/mprotect.c`, `arch/x86/include/asm/pkeys.h`,
//! `arch/x86/mm/pkeys.c`).
//!
//! The tests without PKU (`pku: false`) hold what this project's host (no `pku`/`ospke`) showed with a C
//! program: `pkey_alloc` EINVAL then ENOSPC, `pkey_free` EINVAL, `pkey_mprotect` EINVAL for key 0 and fine
//! for -1, the key checked after the argument checks and before the VMA lookup. The PKU tests (`pku: true`)
//! are written from the 6.18 source: no live kernel here has PKU to confirm them (docs/DIVERGENCES.md, "Not
//! yet held against a kernel").
#![cfg(not(loom))]

use vmspace_mm::space::{Errno, MapFlags, Mm, MmConfig, PkeyRights, Prot};
use vmspace_mm::vma::VmFlags;

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;
const AF: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);
const R0: PkeyRights = PkeyRights::empty();

fn mm(pku: bool) -> Mm {
    Mm::new(MmConfig { pku, ..MmConfig::default() })
}

fn key_of(m: &Mm, addr: u64) -> u32 {
    m.vma_at(addr).expect("mapped").flags.pkey()
}

/// `pkey_alloc` without PKU: `arch_set_user_pkey_access` is EINVAL and gives the key back through
/// `mm_pkey_free`, which refuses key 0 (it is the zeroed context's execute-only key): the map keeps it, and
/// every later call finds no free key (`mm_pkey_alloc` with `arch_max_pkey() == 1`). Live kernel: EINVAL,
/// then ENOSPC, also in a fork child.
#[test]
fn no_pku_pkey_alloc_is_einval_then_enospc_arch_set_user_pkey_access() {
    let m = mm(false);
    assert_eq!(m.pkey_alloc(0, R0), Err(Errno::EINVAL));
    assert_eq!(m.pkey_alloc(0, R0), Err(Errno::ENOSPC));
    // The flags and rights checks come first (`SYSCALL_DEFINE2(pkey_alloc)`).
    assert_eq!(m.pkey_alloc(1, R0), Err(Errno::EINVAL));
    assert_eq!(m.pkey_alloc(0, PkeyRights::from_bits_retain(4)), Err(Errno::EINVAL));
    let child = m.fork().unwrap();
    assert_eq!(child.pkey_alloc(0, PkeyRights::DISABLE_WRITE), Err(Errno::ENOSPC));
    // A fresh process starts over.
    assert_eq!(mm(false).pkey_alloc(0, PkeyRights::DISABLE_ACCESS), Err(Errno::EINVAL));
    assert_eq!(m.pkru(), 0);
}

/// `pkey_free` without PKU: no key is allocated (`mm_pkey_is_allocated`). Live kernel: EINVAL for 0, 1, -1.
/// Even once the failed `pkey_alloc` left key 0 set in the allocation map (the ENOSPC after it shows it),
/// key 0 is the zeroed context's `execute_only_pkey`, which `mm_pkey_is_allocated` never reports.
#[test]
fn no_pku_pkey_free_is_einval_mm_pkey_is_allocated() {
    let m = mm(false);
    for k in [0, 1, -1, 15, 16, i32::MIN] {
        assert_eq!(m.pkey_free(k), Err(Errno::EINVAL), "key {k}");
    }
    assert_eq!(m.pkey_alloc(0, R0), Err(Errno::EINVAL));
    assert_eq!(m.pkey_alloc(0, R0), Err(Errno::ENOSPC), "key 0 stays in the allocation map");
    for k in [0, 1, -1] {
        assert_eq!(m.pkey_free(k), Err(Errno::EINVAL), "key {k} after the failed allocation");
    }
    assert_eq!(m.pkey_alloc(0, R0), Err(Errno::ENOSPC), "pkey_free(0) gave nothing back");
}

/// `do_mprotect_pkey` without PKU: key -1 is plain mprotect, key 0 EINVAL; the key is checked after the
/// argument checks (a zero length succeeds with any key; an unaligned start or a bad PROT is EINVAL anyway;
/// a wrapping length ENOMEM) and before the VMA lookup (an unmapped range with a bad key is EINVAL, not
/// ENOMEM). Live kernel: every line here.
#[test]
fn no_pku_pkey_mprotect_key_check_order_do_mprotect_pkey() {
    let m = mm(false);
    m.mmap(B, 4 * P, Prot::RW, AF, None, 0).unwrap();
    assert_eq!(m.pkey_mprotect(B, P, Prot::READ, 0), Err(Errno::EINVAL));
    assert_eq!(m.pkey_mprotect(B, 0, Prot::READ, 5), Ok(()));
    assert_eq!(m.pkey_mprotect(B + 1, P, Prot::READ, 5), Err(Errno::EINVAL));
    assert_eq!(m.pkey_mprotect(B, P, Prot::from_bits_retain(0x10), 5), Err(Errno::EINVAL));
    assert_eq!(m.pkey_mprotect(B, 0u64.wrapping_sub(P), Prot::READ, 5), Err(Errno::ENOMEM));
    assert_eq!(m.pkey_mprotect(B + 100 * P, P, Prot::READ, 5), Err(Errno::EINVAL));
    assert_eq!(m.pkey_mprotect(B, P, Prot::READ, -2), Err(Errno::EINVAL));
    assert_eq!(m.map_count(), 1, "nothing changed yet");
    assert_eq!(m.pkey_mprotect(B, P, Prot::READ, -1), Ok(()));
    assert_eq!(m.map_count(), 2);
    assert_eq!(m.pkey_mprotect(B + 100 * P, P, Prot::READ, -1), Err(Errno::ENOMEM));
    m.validate().unwrap();
}

/// Without PKU `--x` mappings keep key 0 (`execute_only_pkey` is `ARCH_DEFAULT_PKEY`), so the finding of the
/// brief merges here as on the live kernel (`scripts/regress/pkey-exec-only-no-pku.script`).
#[test]
fn no_pku_exec_only_mappings_keep_key_0_execute_only_pkey() {
    let m = mm(false);
    m.mmap(B + 4 * P, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.gup_access(B + 4 * P, true).unwrap();
    m.mprotect(B + 4 * P, 4 * P, Prot::EXEC).unwrap();
    assert_eq!(key_of(&m, B + 4 * P), 0);
    m.mmap(B, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.gup_access(B, true).unwrap();
    m.mprotect(B + 4 * P, 4 * P, Prot::RW).unwrap();
    assert_eq!(m.map_count(), 1);
    m.validate().unwrap();
}

/// `mm_pkey_alloc` with PKU: key 0 is allocated at creation (`init_new_context`), so keys come out 1, 2, ...,
/// 15, the lowest free first; then ENOSPC. The rights land in the thread's PKRU (`arch_set_user_pkey_access`).
#[test]
fn pku_pkey_alloc_lowest_free_key_then_enospc_mm_pkey_alloc() {
    let m = mm(true);
    assert_eq!(m.pkru(), 0x5555_5554, "init_pkru_value: every key but 0 access-disabled");
    assert_eq!(m.pkey_alloc(0, R0), Ok(1));
    assert_eq!(m.pkru() & (3 << 2), 0, "key 1 open");
    assert_eq!(m.pkey_alloc(0, PkeyRights::DISABLE_WRITE), Ok(2));
    assert_eq!((m.pkru() >> 4) & 3, 2, "key 2 write-disabled");
    assert_eq!(m.pkey_alloc(0, PkeyRights::DISABLE_ACCESS | PkeyRights::DISABLE_WRITE), Ok(3));
    assert_eq!((m.pkru() >> 6) & 3, 3);
    assert_eq!(m.pkey_free(2), Ok(()));
    assert_eq!(m.pkey_alloc(0, R0), Ok(2));
    for k in 4..16 {
        assert_eq!(m.pkey_alloc(0, R0), Ok(k));
    }
    assert_eq!(m.pkey_alloc(0, R0), Err(Errno::ENOSPC));
    assert_eq!(m.pkey_alloc(2, R0), Err(Errno::EINVAL));
    assert_eq!(m.pkey_alloc(0, PkeyRights::from_bits_retain(8)), Err(Errno::EINVAL));
}

/// `mm_pkey_free` with PKU: EINVAL for keys not allocated (never allocated, freed already, negative, beyond
/// `arch_max_pkey()`). Key 0 is allocated implicitly and `mm_pkey_is_allocated` counts it, so with PKU it can be
/// freed like any other key (without PKU it cannot: the test above); the execute-only key never can (next
/// test).
#[test]
fn pku_pkey_free_rules_mm_pkey_free() {
    let m = mm(true);
    assert_eq!(m.pkey_free(1), Err(Errno::EINVAL));
    assert_eq!(m.pkey_free(-1), Err(Errno::EINVAL));
    assert_eq!(m.pkey_free(16), Err(Errno::EINVAL));
    assert_eq!(m.pkey_alloc(0, R0), Ok(1));
    assert_eq!(m.pkey_free(1), Ok(()));
    assert_eq!(m.pkey_free(1), Err(Errno::EINVAL), "freed twice");
    // Key 0 is allocated implicitly and `mm_pkey_is_allocated` says so: it can be freed, and is then the
    // first key pkey_alloc hands out.
    assert_eq!(m.pkey_free(0), Ok(()));
    assert_eq!(m.pkey_alloc(0, R0), Ok(0));
}

/// `do_mmap`: `prot == PROT_EXEC` takes the execute-only key, allocated on first use and kept; it is set in
/// the allocation map (pkey_alloc skips it) but not "allocated" for the user interfaces (`pkey_free` and
/// `pkey_mprotect` refuse it), and PKRU access-disables it (`__execute_only_pkey`).
#[test]
fn pku_mmap_exec_only_gets_the_execute_only_key_execute_only_pkey() {
    let m = mm(true);
    assert_eq!(m.execute_only_pkey_value(), None);
    m.mmap(B, P, Prot::EXEC, AF, None, 0).unwrap();
    assert_eq!(m.execute_only_pkey_value(), Some(1));
    assert_eq!(key_of(&m, B), 1);
    assert_eq!((m.pkru() >> 2) & 3, 1, "access-disabled");
    m.mmap(B + 4 * P, P, Prot::EXEC, AF, None, 0).unwrap();
    assert_eq!(key_of(&m, B + 4 * P), 1, "the same key again");
    assert_eq!(m.pkey_alloc(0, R0), Ok(2));
    assert_eq!(m.pkey_free(1), Err(Errno::EINVAL));
    assert_eq!(m.pkey_mprotect(B, P, Prot::EXEC, 1), Err(Errno::EINVAL));
    // PROT_EXEC with anything else (PROT_READ, PROT_SEM) is not execute-only.
    m.mmap(B + 8 * P, P, Prot::EXEC | Prot::SEM, AF, None, 0).unwrap();
    m.mmap(B + 12 * P, P, Prot::RX, AF, None, 0).unwrap();
    assert_eq!((key_of(&m, B + 8 * P), key_of(&m, B + 12 * P)), (0, 0));
    m.validate().unwrap();
}

/// `do_mmap` allocates the execute-only key before `get_unmapped_area` and the later checks: a failing
/// `--x` mmap still leaves it allocated.
#[test]
fn pku_exec_only_key_survives_a_failed_mmap_do_mmap() {
    let m = mm(true);
    m.mmap(B, P, Prot::RW, AF, None, 0).unwrap();
    let clash = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED_NOREPLACE;
    assert_eq!(m.mmap(B, P, Prot::EXEC, clash, None, 0), Err(Errno::EEXIST));
    assert_eq!(m.execute_only_pkey_value(), Some(1));
    assert_eq!(m.pkey_alloc(0, R0), Ok(2));
}

/// `execute_only_pkey` when every key is taken: -1, and the mapping keeps key 0 (`do_mmap`: `pkey < 0`
/// becomes 0) or its own key (`arch_override_mprotect_pkey` falls through to `vma_pkey`).
#[test]
fn pku_no_key_left_for_exec_only_execute_only_pkey() {
    let m = mm(true);
    for k in 1..16 {
        assert_eq!(m.pkey_alloc(0, R0), Ok(k));
    }
    m.mmap(B, P, Prot::EXEC, AF, None, 0).unwrap();
    assert_eq!(key_of(&m, B), 0);
    assert_eq!(m.execute_only_pkey_value(), None);
    m.mmap(B + 2 * P, P, Prot::RW, AF, None, 0).unwrap();
    m.pkey_mprotect(B + 2 * P, P, Prot::RW, 7).unwrap();
    m.mprotect(B + 2 * P, P, Prot::EXEC).unwrap();
    assert_eq!(key_of(&m, B + 2 * P), 7);
}

/// `arch_override_mprotect_pkey`: plain mprotect to `PROT_EXEC` gives the execute-only key (even over a
/// key the VMA had from pkey_mprotect); mprotect to anything else of an execute-only VMA returns it to key 0
/// (`vma_is_pkey_exec_only`); otherwise the VMA keeps its key; an explicit key is never overridden.
#[test]
fn pku_mprotect_key_override_arch_override_mprotect_pkey() {
    let m = mm(true);
    let k = m.pkey_alloc(0, R0).unwrap();
    m.mmap(B, 2 * P, Prot::RW, AF, None, 0).unwrap();
    m.pkey_mprotect(B, 2 * P, Prot::RW, k).unwrap();
    assert_eq!(key_of(&m, B), k as u32);
    m.mprotect(B, 2 * P, Prot::READ).unwrap();
    assert_eq!(key_of(&m, B), k as u32, "plain mprotect keeps the key");
    m.mprotect(B, 2 * P, Prot::EXEC).unwrap();
    let x = m.execute_only_pkey_value().unwrap();
    assert_eq!(key_of(&m, B), x as u32, "--x takes the execute-only key");
    m.mprotect(B, 2 * P, Prot::RX).unwrap();
    assert_eq!(key_of(&m, B), 0, "leaving --x returns to key 0, not to the old key");
    m.pkey_mprotect(B, 2 * P, Prot::EXEC, k).unwrap();
    assert_eq!(key_of(&m, B), k as u32, "an explicit key wins over execute-only");
    // A VMA with the execute-only key's number but not --x keeps it.
    m.pkey_mprotect(B, 2 * P, Prot::EXEC, -1).unwrap();
    assert_eq!(key_of(&m, B), x as u32);
    m.validate().unwrap();
}

/// The brief's finding, on a PKU kernel: A rw written, A `--x` (execute-only key), B mapped just below and
/// written, A back to rw. B's anon_vma could not be A's (`find_mergeable_anon_vma`: the key bits differ,
/// `anon_vma_compatible` ignores only the access bits), so when A returns to key 0 the two VMAs have equal
/// flags but different anon_vmas and stay two (`is_mergeable_anon_vma`).
#[test]
fn pku_exec_only_key_keeps_anon_vmas_apart_anon_vma_compatible() {
    let m = mm(true);
    let a = B + 4 * P;
    m.mmap(a, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.gup_access(a, true).unwrap();
    m.mprotect(a, 4 * P, Prot::EXEC).unwrap();
    assert_ne!(key_of(&m, a), 0);
    m.mmap(B, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.gup_access(B, true).unwrap();
    let (va, vb) = (m.vma_at(a).unwrap(), m.vma_at(B).unwrap());
    assert!(va.anon_vma_id.is_some() && vb.anon_vma_id.is_some());
    assert_ne!(va.anon_vma_id, vb.anon_vma_id);
    m.mprotect(a, 4 * P, Prot::RW).unwrap();
    assert_eq!(key_of(&m, a), 0);
    assert_eq!(m.vma_at(a).unwrap().flags, m.vma_at(B).unwrap().flags);
    assert_eq!(m.map_count(), 2, "{}", m.maps_text());
    m.validate().unwrap();
}

/// `is_mergeable_vma`: the key bits are part of `vm_flags`, so neighbours with different keys never merge and
/// neighbours given the same key do.
#[test]
fn pku_keys_decide_merges_is_mergeable_vma() {
    let m = mm(true);
    let (k1, k2) = (m.pkey_alloc(0, R0).unwrap(), m.pkey_alloc(0, R0).unwrap());
    m.mmap(B, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.pkey_mprotect(B, 2 * P, Prot::RW, k1).unwrap();
    m.pkey_mprotect(B + 2 * P, 2 * P, Prot::RW, k2).unwrap();
    assert_eq!(m.map_count(), 2);
    m.pkey_mprotect(B + 2 * P, 2 * P, Prot::RW, k1).unwrap();
    assert_eq!(m.map_count(), 1);
    assert_eq!(m.vma_at(B).unwrap().flags & VmFlags::PKEY_MASK, VmFlags::from_pkey(k1 as u32));
    // A new mapping next to it has key 0 and stays apart.
    m.mmap(B + 4 * P, P, Prot::RW, AF, None, 0).unwrap();
    assert_eq!(m.map_count(), 2);
    m.validate().unwrap();
}

/// `arch_dup_pkeys`: a fork child has the parent's allocation map and execute-only key (and the forking
/// thread's PKRU).
#[test]
fn pku_fork_inherits_keys_arch_dup_pkeys() {
    let m = mm(true);
    assert_eq!(m.pkey_alloc(0, PkeyRights::DISABLE_WRITE), Ok(1));
    m.mmap(B, P, Prot::EXEC, AF, None, 0).unwrap();
    let c = m.fork().unwrap();
    assert_eq!(c.execute_only_pkey_value(), Some(2));
    assert_eq!(c.pkru(), m.pkru());
    assert_eq!(key_of(&c, B), 2);
    assert_eq!(c.pkey_alloc(0, R0), Ok(3));
    assert_eq!(c.pkey_free(1), Ok(()));
    // The parent is untouched by the child's calls.
    assert_eq!(m.pkey_alloc(0, R0), Ok(3));
}

/// With PKU, a data access the thread's PKRU denies through the VMA's key is SIGSEGV `SEGV_PKUERR` naming the
/// key (`bad_area_access_error` → `bad_area_access_from_pkeys`), whether the page is present or not, before
/// any other check; an execute-only (`--x`) mapping gets the execute-only key, so reading it is a PKU fault
/// too; a write through a write-disabled key is one, a read through it is not. Without PKU nothing of this
/// applies: reading `--x` memory is allowed (x86 cannot express execute-only pages).
#[test]
fn pku_denied_accesses_are_pkuerr_bad_area_access_error() {
    use vmspace_mm::{Access, SegvCode, Signal};
    let pkuerr = |pkey| Signal::Segv(SegvCode::PkuErr { pkey });
    let m = mm(true);
    m.mmap(B, 4 * P, Prot::RW, AF, None, 0).unwrap();
    m.write(B, b"present").unwrap();
    let k = m.pkey_alloc(0, PkeyRights::DISABLE_ACCESS).unwrap();
    m.pkey_mprotect(B, 2 * P, Prot::RW, k).unwrap();
    // Present and absent pages alike.
    for a in [B, B + P] {
        let f = m.read(a, &mut [0u8; 1]).unwrap_err();
        assert_eq!((f.addr, f.signal), (a, pkuerr(k as u32)));
        assert_eq!(m.write(a, b"x").unwrap_err().signal, pkuerr(k as u32));
    }
    // A write-disabled key: reads pass, writes fault.
    let w = m.pkey_alloc(0, PkeyRights::DISABLE_WRITE).unwrap();
    m.pkey_mprotect(B + 2 * P, 2 * P, Prot::RW, w).unwrap();
    let mut b = [0u8; 1];
    m.read(B + 2 * P, &mut b).unwrap();
    assert_eq!(m.write(B + 3 * P, b"x").unwrap_err().signal, pkuerr(w as u32));
    // The fault path itself decides the same (`access_error` with `arch_vma_access_permitted`).
    assert_eq!(m.do_user_addr_fault(B + P, Access::Read).unwrap_err().signal, pkuerr(k as u32));
    // Execute-only memory: its key is access-disabled.
    m.mmap(B + 8 * P, P, Prot::EXEC, AF, None, 0).unwrap();
    let x = m.execute_only_pkey_value().unwrap() as u32;
    assert_eq!(m.read(B + 8 * P, &mut b).unwrap_err().signal, pkuerr(x));
    assert!(
        m.do_user_addr_fault(B + 8 * P, Access::Exec).is_ok(),
        "PKRU does not govern instruction fetches"
    );
    let plain = mm(false);
    plain.mmap(B, P, Prot::EXEC, AF, None, 0).unwrap();
    plain.read(B, &mut b).unwrap();
    m.validate().unwrap();
}
