//! The headroom filler. "Module docs" below means the docs of the `replay` module (`mod.rs`), whose section
//! "Reaching `max_map_count`" this file implements: before the script, the runner child maps single-page
//! filler VMAs of alternating protection at [`FILLER_BASE`] until exactly `vm.max_map_count - headroom` VMAs
//! exist, so that the script meets the kernel's limit where an engine `Mm` with `max_map_count = headroom`
//! meets its own.
//!
//! Invariants:
//! - the count is the lines of `/proc/self/maps` less `[vsyscall]`, read into one buffer allocated before the
//!   first count (`MAPS_LINE_MAX` bytes a line), so counting adds no VMA;
//! - the runner's VMAs and then the fillers get `VM_DONTDUMP` and `VM_NOHUGEPAGE` by advice on whole VMAs (no
//!   split), so nothing the script maps outside the arena merges with them;
//! - the fillers are mapped with `MAP_FIXED_NOREPLACE` (they replace nothing) and never overlap the arena;
//! - after filling, the count is checked again: a mismatch refuses the run.

use super::{PAGE, read_maps};
use rustix::mm::ProtFlags;
use std::ffi::c_void;
use vmspace_script::Arena;

/// Where the filler VMAs of a headroom run go: 16 TiB, far from the default arena (32 TiB) and from what the
/// kernel places top-down below the stack.
pub const FILLER_BASE: u64 = 0x1000_0000_0000;

/// Room per maps line in the counting buffer (a filler's line is about 50 bytes; paths make others longer).
pub(super) const MAPS_LINE_MAX: usize = 128;

/// `vm.max_map_count`, read through the one host probe.
pub(super) fn max_map_count() -> Option<u64> {
    vmspace_host::sysctl_vm("max_map_count")
}

/// The number of VMAs of this process (`mm->map_count`): the lines of `/proc/self/maps` less the
/// `[vsyscall]` gate area.
fn vma_count(buf: &mut [u8]) -> Result<u64, String> {
    let text = read_maps(buf)?;
    Ok(text.lines().filter(|l| !l.is_empty() && !l.ends_with("[vsyscall]")).count() as u64)
}

/// Sets `VM_DONTDUMP` and `VM_NOHUGEPAGE` on every VMA of the runner (outside `arena`) that can take them, so
/// that no mapping of the script merges with one: a mapping the kernel places outside the arena (a refused
/// hint, a moving mremap) lands next to the runner's own VMAs and would merge with an anonymous one that has
/// the same flags, costing no VMA where the engine, whose address space holds only the script's mappings,
/// spends one (module docs, "Reaching `max_map_count`"). Whole VMAs change, so none splits.
fn mark_unmergeable(buf: &mut [u8], arena: Arena) -> Result<(), String> {
    let text = read_maps(buf)?;
    for line in text.lines() {
        let Ok(l) = line.parse::<vmspace_proc::MapsLine>() else { continue };
        if arena.overlaps(l.start, l.end) || matches!(l.name, Some(vmspace_proc::MapsName::Special(_))) {
            continue;
        }
        for advice in [rustix::mm::Advice::LinuxDontDump, rustix::mm::Advice::LinuxNoHugepage] {
            // SAFETY: advice on a whole VMA of this process changes only its flags, never a byte or a mapping
            // a Rust object relies on; an advice the VMA refuses (EINVAL) leaves it as it was.
            let _ =
                unsafe { rustix::mm::madvise(l.start as *mut c_void, (l.end - l.start) as usize, advice) };
        }
    }
    Ok(())
}

/// Maps filler VMAs until `max_map_count - headroom` VMAs exist (module docs). `buf` was allocated before
/// the first count and is big enough for every line.
pub(super) fn fill_to_headroom(buf: &mut [u8], arena: Arena, headroom: u64) -> Result<(), String> {
    let max = max_map_count().ok_or("cannot read /proc/sys/vm/max_map_count")?;
    let have = vma_count(buf)?;
    let target = max.checked_sub(headroom).filter(|&t| t >= have).ok_or_else(|| {
        format!("headroom {headroom}: the runner already has {have} VMAs of max_map_count {max}")
    })?;
    let need = target - have;
    if arena.overlaps(FILLER_BASE, FILLER_BASE + need * PAGE) {
        return Err("filler range overlaps the arena".into());
    }
    if have > 0 {
        mark_unmergeable(buf, arena)?;
    }
    // Marking may merge runner VMAs that differed only in those flags: count again.
    let have = vma_count(buf)?;
    let need = target.checked_sub(have).ok_or("marking the runner's VMAs added some")?;
    for i in 0..need {
        let prot = if i % 2 == 0 { ProtFlags::READ } else { ProtFlags::empty() };
        // SAFETY: a fresh anonymous mapping at an address nothing of this process uses (FIXED_NOREPLACE
        // refuses to replace anything); no Rust object refers to it.
        unsafe {
            rustix::mm::mmap_anonymous(
                (FILLER_BASE + i * PAGE) as *mut c_void,
                PAGE as usize,
                prot,
                rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::FIXED_NOREPLACE,
            )
        }
        .map_err(|e| format!("filler {i} of {need}: {e}"))?;
    }
    if need > 0 {
        for advice in [rustix::mm::Advice::LinuxDontDump, rustix::mm::Advice::LinuxNoHugepage] {
            // SAFETY: the fillers just mapped, whole; advice changes only their flags (no byte, no Rust
            // object refers to them).
            unsafe { rustix::mm::madvise(FILLER_BASE as *mut c_void, (need * PAGE) as usize, advice) }
                .map_err(|e| format!("marking the fillers: {e}"))?;
        }
    }
    let now = vma_count(buf)?;
    if now != target {
        return Err(format!(
            "filled to {now} VMAs, wanted {target} (max_map_count {max}, headroom {headroom})"
        ));
    }
    Ok(())
}
