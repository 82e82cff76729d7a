//! Memory protection keys (x86 PKU): `pkey_alloc`, `pkey_free`, `pkey_mprotect`, and the execute-only key
//! that `mmap` and `mprotect` give `--x` mappings (`mm/mprotect.c`, `arch/x86/include/asm/pkeys.h`,
//! `arch/x86/mm/pkeys.c`).
//!
//! # State
//!
//! Per address space ([`PkeyState`], the kernel's `mm->context`): the allocation map of the
//! `arch_max_pkey()` keys (16 with PKU, 1 without) and the execute-only key (`-1` until allocated). With PKU,
//! a new mm has key 0 allocated and no execute-only key (`init_new_context`); without PKU the context stays
//! zeroed: an empty map and an execute-only key of **0**, which makes key 0 count as unallocated
//! (`mm_pkey_is_allocated` refuses the execute-only key). Fork copies both (`arch_dup_pkeys`; without PKU the
//! `memcpy` of `dup_mm` does the same).
//!
//! A key is a VMA attribute: its four bits live in `vm_flags` (`VM_PKEY_BIT0..3`), so two VMAs with different
//! keys never merge and never share an anon_vma (`anon_vma_compatible` ignores only the access bits).
//!
//! # The calls
//!
//! - `pkey_alloc(flags, rights)`: flags must be 0 and rights within `PKEY_ACCESS_MASK` (EINVAL); the lowest
//!   free key is taken (`mm_pkey_alloc`; none left: ENOSPC), then its rights are written to the calling
//!   thread's PKRU (`arch_set_user_pkey_access`), which fails with EINVAL without PKU and gives the key back.
//!   The give-back goes through `mm_pkey_free`, which refuses key 0 there (it is the execute-only key), so
//!   on a host without PKU the first `pkey_alloc` is EINVAL and leaves key 0 marked in the map: every later
//!   one is ENOSPC, in the process and in its fork children (checked on the live 6.18 kernel).
//! - `pkey_free(key)`: EINVAL unless allocated (key 0, the execute-only key, negative keys and keys beyond
//!   `arch_max_pkey()` never are).
//! - `pkey_mprotect(start, len, prot, key)`: `mprotect`'s checks in `mprotect`'s order; the key is checked
//!   (EINVAL unless allocated, `-1` meaning "no key given") after the argument checks and before the VMA
//!   lookup, so a zero length succeeds with any key and an unmapped range with a bad key is EINVAL.
//!
//! # The execute-only key
//!
//! `mmap` with `prot == PROT_EXEC` exactly, and `mprotect`/`pkey_mprotect(.., -1)` to `PROT_EXEC`, take the
//! execute-only key (`execute_only_pkey`, allocated on first use like `pkey_alloc` and then kept; when no key
//! is left it is not available and the mapping keeps key 0 or its own key). An `mprotect` to anything else of
//! a VMA that is `--x` with the execute-only key moves it back to key 0 (`arch_override_mprotect_pkey`);
//! any other plain `mprotect` keeps the VMA's key. An explicit key of `pkey_mprotect` is never overridden.
//!
//! # PKRU
//!
//! PKRU is a per-thread register: for each key, access-disable and write-disable bits that the CPU applies to
//! user-mode data accesses. The engine keeps one PKRU for all the threads that make calls ([`Mm::pkru`], an
//! atomic word beside the write-locked state, since madvise reads it under the VMA read lock): the value after
//! `execve` (`init_pkru_value`: every key but 0 access-disabled), `pkey_alloc`'s rights, the execute-only key's
//! access-disable bit, copied by fork. The syscalls read it
//! where the kernel does: `__execute_only_pkey` (whether PKRU must be written) and the seal check of
//! `madvise` (`can_madvise_modify` asks `arch_vma_access_permitted` whether the thread could write).
//! User-mode accesses check it as the CPU and the fault path do: [`Mm::read`], [`Mm::write`], [`Mm::touch`] and
//! [`Mm::fill`] check each page's data access against the VMA's key before the MMU makes it, and the fault
//! path's `access_error` checks it (`arch_vma_access_permitted`); a denied access is SIGSEGV `SEGV_PKUERR`
//! (`space/fault.rs`, "The signal"). GUP from another process (`process_vm_writev`, [`Mm::gup_access`])
//! ignores it, as on Linux (`FOLL_REMOTE`).

use vmspace_abi::{PkeyRights, Prot, VmFlags};

use super::tree::V;
use super::{Errno, Mm, MmWrite};
use vmspace_rcu::sync::Ordering;

/// `init_pkru_value`: PKRU after `execve` with PKU: access-disable for keys 1..15, key 0 open.
pub(crate) const INIT_PKRU: u32 = 0x5555_5554;
/// `PKRU_AD_BIT`: access-disable, the low bit of a key's two.
const PKRU_AD_BIT: u32 = 1;
/// `PKRU_WD_BIT`: write-disable.
const PKRU_WD_BIT: u32 = 2;
/// `PKRU_BITS_PER_PKEY`.
const PKRU_BITS_PER_PKEY: u32 = 2;

/// The protection-key state of an address space (`mm->context.pkey_allocation_map`,
/// `mm->context.execute_only_pkey`; the PKRU is beside it, module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PkeyState {
    /// Bit `k` set: key `k` allocated.
    map: u16,
    /// The execute-only key, -1 if none (0 without PKU: the zeroed context).
    execute_only: i16,
}

impl PkeyState {
    /// A new mm's state (`init_new_context`).
    pub(crate) fn new(pku: bool) -> Self {
        if pku { PkeyState { map: 1, execute_only: -1 } } else { PkeyState { map: 0, execute_only: 0 } }
    }

    /// The state of an imported address space with PKU (`space::import`): the allocation map `map` and the
    /// execute-only key, if any.
    pub(crate) fn imported(map: u16, execute_only: Option<u8>) -> Self {
        PkeyState { map, execute_only: execute_only.map_or(-1, i16::from) }
    }
}

/// `__pkru_allows_read`.
fn pkru_allows_read(pkru: u32, pkey: u32) -> bool {
    pkru & (PKRU_AD_BIT << (pkey * PKRU_BITS_PER_PKEY)) == 0
}

/// `__pkru_allows_write`.
fn pkru_allows_write(pkru: u32, pkey: u32) -> bool {
    pkru & ((PKRU_AD_BIT | PKRU_WD_BIT) << (pkey * PKRU_BITS_PER_PKEY)) == 0
}

/// `calc_vm_prot_bits(prot, pkey)`: `PROT_READ`/`WRITE`/`EXEC` to `VM_READ`/`WRITE`/`EXEC`, plus the key's
/// `VM_PKEY_BIT*` (`arch_calc_vm_prot_bits`). Other `PROT_*` bits do not become flags.
pub(crate) fn calc_vm_prot_bits(prot: Prot, pkey: i32) -> VmFlags {
    let mut f = VmFlags::NONE;
    if prot.contains(Prot::READ) {
        f |= VmFlags::READ;
    }
    if prot.contains(Prot::WRITE) {
        f |= VmFlags::WRITE;
    }
    if prot.contains(Prot::EXEC) {
        f |= VmFlags::EXEC;
    }
    f | VmFlags::from_pkey(pkey as u32)
}

impl Mm {
    /// `pkey_alloc(flags, init_val)`: the new key, or EINVAL (flags, rights, no PKU) / ENOSPC (none left).
    pub fn pkey_alloc(&self, flags: u64, rights: PkeyRights) -> Result<i32, Errno> {
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        if !PkeyRights::ACCESS_MASK.contains(rights) {
            return Err(Errno::EINVAL);
        }
        self.locked(|mm| {
            let pkey = mm.mm_pkey_alloc();
            if pkey == -1 {
                return Err(Errno::ENOSPC);
            }
            if let Err(e) = mm.arch_set_user_pkey_access(pkey, rights) {
                let _ = mm.mm_pkey_free(pkey);
                return Err(e);
            }
            Ok(pkey)
        })
    }

    /// `pkey_free(pkey)`: EINVAL unless `pkey` is allocated (module docs).
    pub fn pkey_free(&self, pkey: i32) -> Result<(), Errno> {
        self.locked(|mm| mm.mm_pkey_free(pkey))
    }

    /// `pkey_mprotect(start, len, prot, pkey)`: `mprotect` giving the VMAs key `pkey` (`-1`: `mprotect`'s own
    /// key logic). See the module docs for where the key is checked.
    pub fn pkey_mprotect(&self, start: u64, len: u64, prot: Prot, pkey: i32) -> Result<(), Errno> {
        self.locked(|mm| mm.do_mprotect_pkey(start, len, prot, pkey))
    }

    /// The PKRU value of the threads making the calls (module docs): two bits per key, access-disable then
    /// write-disable. 0 without PKU.
    pub fn pkru(&self) -> u32 {
        // Relaxed: a register value with no data behind it (module docs).
        self.pkru.load(Ordering::Relaxed)
    }

    /// The execute-only key, if this mm has allocated one (PKU only).
    pub fn execute_only_pkey_value(&self) -> Option<i32> {
        self.read_locked(|r| {
            let k = r.st.pkeys.execute_only;
            (self.cfg.pku && k >= 0).then_some(i32::from(k))
        })
    }

    /// `arch_vma_access_permitted(vma, write = true, execute = false, foreign = false)`: the thread's PKRU lets
    /// it write through `v`'s key (always true without PKU).
    pub(crate) fn pkru_permits_write(&self, v: V) -> bool {
        !self.cfg.pku || pkru_allows_write(self.pkru(), v.flags().pkey())
    }

    /// `arch_vma_access_permitted(vma, write, execute, foreign = false)` for a user access: the thread's PKRU
    /// lets it make `access` through `v`'s key (always true without PKU; an instruction fetch is never checked,
    /// PKRU governs data accesses only).
    pub(crate) fn pkru_permits(&self, v: &crate::vma::Vma, access: vmspace_pgtable::Access) -> bool {
        self.pkru_permits_key(v.flags().pkey(), access)
    }

    /// [`Mm::pkru_permits`] for a VMA whose protection key is `pkey` (the speculative fault checks its copy of
    /// the flags).
    pub(crate) fn pkru_permits_key(&self, pkey: u32, access: vmspace_pgtable::Access) -> bool {
        use vmspace_pgtable::Access;
        if !self.cfg.pku {
            return true;
        }
        let pkru = self.pkru();
        match access {
            Access::Read => pkru_allows_read(pkru, pkey),
            Access::Write => pkru_allows_write(pkru, pkey),
            Access::Exec => true,
        }
    }
}

impl MmWrite<'_> {
    /// `arch_max_pkey()`: 16 keys with PKU, 1 without.
    fn arch_max_pkey(&self) -> i32 {
        if self.cfg.pku { 16 } else { 1 }
    }

    /// `mm_pkey_is_allocated`.
    pub(crate) fn mm_pkey_is_allocated(&self, pkey: i32) -> bool {
        if pkey < 0 || pkey >= self.arch_max_pkey() {
            return false;
        }
        if pkey == i32::from(self.st.pkeys.execute_only) {
            return false;
        }
        self.st.pkeys.map & (1 << pkey) != 0
    }

    /// `mm_pkey_alloc`: the lowest free key, marked allocated; -1 when every key is taken.
    fn mm_pkey_alloc(&mut self) -> i32 {
        let all: u16 = ((1u32 << self.arch_max_pkey()) - 1) as u16;
        if self.st.pkeys.map == all {
            return -1;
        }
        let ret = (!self.st.pkeys.map).trailing_zeros() as i32;
        self.st.pkeys.map |= 1 << ret;
        ret
    }

    /// `mm_pkey_free`.
    fn mm_pkey_free(&mut self, pkey: i32) -> Result<(), Errno> {
        if !self.mm_pkey_is_allocated(pkey) {
            return Err(Errno::EINVAL);
        }
        self.st.pkeys.map &= !(1 << pkey);
        Ok(())
    }

    /// `arch_set_user_pkey_access`: writes `rights` for `pkey` into the thread's PKRU; EINVAL without PKU.
    fn arch_set_user_pkey_access(&mut self, pkey: i32, rights: PkeyRights) -> Result<(), Errno> {
        if !self.cfg.pku {
            return Err(Errno::EINVAL);
        }
        let mut bits = 0;
        if rights.contains(PkeyRights::DISABLE_ACCESS) {
            bits |= PKRU_AD_BIT;
        }
        if rights.contains(PkeyRights::DISABLE_WRITE) {
            bits |= PKRU_WD_BIT;
        }
        let shift = pkey as u32 * PKRU_BITS_PER_PKEY;
        let pkru = (self.pkru() & !((PKRU_AD_BIT | PKRU_WD_BIT) << shift)) | (bits << shift);
        // Relaxed: module docs; writers hold the mmap write lock.
        self.pkru.store(pkru, Ordering::Relaxed);
        Ok(())
    }

    /// `execute_only_pkey`: the key for `--x` mappings, allocated on first use; 0 (`ARCH_DEFAULT_PKEY`)
    /// without PKU, -1 when no key is left.
    pub(crate) fn execute_only_pkey(&mut self) -> i32 {
        if !self.cfg.pku {
            return 0;
        }
        let mut key = i32::from(self.st.pkeys.execute_only);
        let mut need_to_set_mm_pkey = false;
        if key == -1 {
            key = self.mm_pkey_alloc();
            if key < 0 {
                return -1;
            }
            need_to_set_mm_pkey = true;
        }
        // PKRU already denies data access through the key: nothing to write.
        if !need_to_set_mm_pkey && !pkru_allows_read(self.pkru(), key as u32) {
            return key;
        }
        // With PKU this cannot fail (the kernel frees the key and returns -1 if it did).
        let set = self.arch_set_user_pkey_access(key, PkeyRights::DISABLE_ACCESS);
        debug_assert!(set.is_ok());
        if need_to_set_mm_pkey {
            self.st.pkeys.execute_only = key as i16;
        }
        key
    }

    /// `vma_is_pkey_exec_only`.
    fn vma_is_pkey_exec_only(&self, v: V) -> bool {
        v.flags() & VmFlags::ACCESS_FLAGS == VmFlags::EXEC
            && v.flags().pkey() as i32 == i32::from(self.st.pkeys.execute_only)
    }

    /// `arch_override_mprotect_pkey(vma, prot, pkey)`: the key `mprotect` gives `v` (module docs).
    pub(crate) fn arch_override_mprotect_pkey(&mut self, v: V, prot: Prot, pkey: i32) -> i32 {
        if !self.cfg.pku {
            return 0;
        }
        if pkey != -1 {
            return pkey;
        }
        if prot == Prot::EXEC {
            let k = self.execute_only_pkey();
            if k > 0 {
                return k;
            }
        } else if self.vma_is_pkey_exec_only(v) {
            return 0;
        }
        v.flags().pkey() as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkru_bits() {
        assert!(pkru_allows_read(INIT_PKRU, 0));
        assert!(!pkru_allows_read(INIT_PKRU, 1));
        assert!(!pkru_allows_write(INIT_PKRU, 15));
        assert!(pkru_allows_read(PKRU_WD_BIT << 2, 1) && !pkru_allows_write(PKRU_WD_BIT << 2, 1));
        assert_eq!(
            calc_vm_prot_bits(Prot::RW | Prot::SEM, 3),
            VmFlags::READ | VmFlags::WRITE | VmFlags::from_pkey(3)
        );
    }
}
