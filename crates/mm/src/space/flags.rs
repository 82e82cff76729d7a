//! `calc_vm_prot_bits`: the `VM_*` access bits a `PROT_*` argument asks for.
//!
//! The flag word itself is [`VmFlags`] (`vmspace_abi`, Linux 6.18's x86-64 values of `include/linux/mm.h`),
//! the one `vm_flags` type; the call arguments are `vmspace_abi`'s typed [`Prot`], `MapFlags`, `MremapFlags`
//! and `Advice`.

use vmspace_abi::{Prot, VmFlags};

/// `calc_vm_prot_bits` without protection keys: `PROT_READ`/`WRITE`/`EXEC` to `VM_READ`/`WRITE`/`EXEC`.
pub(crate) fn prot_to_vm(prot: Prot) -> VmFlags {
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
    f
}
