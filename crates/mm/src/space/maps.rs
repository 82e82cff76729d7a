//! `/proc/PID/maps` of the address space, rendered through the `proc` crate (byte-identical to Linux's).
//!
//! Per VMA (`show_map_vma` / `get_vma_name`): permissions from `VM_READ|WRITE|EXEC` and `s`/`p` from
//! `VM_MAYSHARE`; the offset `pgoff << 12` for a file and 0 for anonymous memory; device and inode of the
//! file; the name: the file's path (shared anonymous memory: `/dev/zero (deleted)`, or
//! `[anon_shmem:NAME]` when named), else `[heap]` for a VMA overlapping `(start_brk, brk)`, `[stack]` for the
//! one containing `start_stack`, `[anon:NAME]` for a named one.

use vmspace_proc::{MapsLine, MapsName, MapsNameRef, Perms};

use vmspace_rcu::sync::Ordering;

use super::VmFlags;
use super::VmaSnapshot;
use super::{FileKind, Mm, MmRead, config::PAGE_SHIFT};
use crate::vma::Vma;

impl Mm {
    /// The maps line of one VMA (of this mm), under the mmap read lock.
    pub fn maps_line(&self, v: &Vma) -> MapsLine {
        self.read_locked(|r| r.maps_line_locked(v))
    }

    /// The maps lines of the VMAs overlapping `[start, end)`.
    pub fn maps_lines(&self, start: u64, end: u64) -> Vec<MapsLine> {
        self.read_locked(|r| r.vmas_between(start, end).map(|v| r.maps_line_locked(v)).collect())
    }

    /// The whole maps text (`show_map` over every VMA, under the mmap read lock, then the gate area's line if the
    /// configuration has one).
    pub fn maps_text(&self) -> String {
        self.read_locked(|r| {
            let mut s = String::new();
            for v in r.areas() {
                r.maps_line_locked(v).render_into(&mut s);
            }
            if let Some(flags) = self.cfg.gate_area {
                self.reader().render_gate(super::ProcFileKind::Maps, flags, &mut s);
            }
            s
        })
    }
}

impl MmRead<'_> {
    /// [`Mm::maps_line`] with the lock held.
    pub(crate) fn maps_line_locked(&self, v: &Vma) -> MapsLine {
        maps_line_of(&v.snapshot(), self.st.start_brk, self.st.brk, self.cfg.start_stack)
    }

    /// The break values a maps line depends on, read under the lock: `(start_brk, brk)`.
    pub(crate) fn brk_pair(&self) -> (u64, u64) {
        (self.st.start_brk, self.st.brk)
    }
}

impl Mm {
    /// `(start_brk, brk)` read racily, as `vma_is_initial_heap` reads `mm->start_brk` and `mm->brk`: what the
    /// per-VMA and lockless readers name `[heap]` by (a per-VMA reader must not take the mmap lock while it
    /// holds a VMA lock: a writer holding the mmap write lock waits in `vma_start_write` for that very VMA's
    /// readers).
    pub(crate) fn brk_pair_racy(&self) -> (u64, u64) {
        // Relaxed: a value read as the kernel reads it, with no data behind it (stored by `set_brk`).
        (self.brk_racy.start_brk, self.brk_racy.brk.load(Ordering::Relaxed))
    }
}

/// The file columns of a maps line and of a PROCMAP_QUERY answer: `(offset, major, minor, inode)`, the file
/// offset `pgoff << PAGE_SHIFT` with the file's device and inode, all 0 for anonymous memory.
pub(crate) fn file_columns(v: &VmaSnapshot) -> (u64, u32, u32, u64) {
    match &v.file {
        Some(f) => (v.pgoff << PAGE_SHIFT, f.dev_major, f.dev_minor, f.inode),
        None => (0, 0, 0, 0),
    }
}

/// `show_map_vma` of the VMA copy `v` with the mm-wide values the name depends on.
pub(crate) fn maps_line_of(v: &VmaSnapshot, start_brk: u64, brk: u64, start_stack: u64) -> MapsLine {
    let mut line = maps_columns_of(v);
    line.name = maps_name_of(v, start_brk, brk, start_stack).map(MapsName::from);
    line
}

/// The columns of `v`'s maps line before the name (the line's `name` is `None`).
pub(crate) fn maps_columns_of(v: &VmaSnapshot) -> MapsLine {
    let fl = v.flags;
    let perms = Perms {
        read: fl.intersects(VmFlags::READ),
        write: fl.intersects(VmFlags::WRITE),
        exec: fl.intersects(VmFlags::EXEC),
        shared: fl.intersects(VmFlags::MAYSHARE),
    };
    let (offset, dev_major, dev_minor, inode) = file_columns(v);
    MapsLine { start: v.start, end: v.end, perms, offset, dev_major, dev_minor, inode, name: None }
}

/// The name column of `v`'s maps line (`get_vma_name`), borrowed from the copy's file and name.
pub(crate) fn maps_name_of(
    v: &VmaSnapshot,
    start_brk: u64,
    brk: u64,
    start_stack: u64,
) -> Option<MapsNameRef<'_>> {
    let (start, end) = (v.start, v.end);
    match &v.file {
        Some(f) if f.kind == FileKind::ShmemZero && v.anon_name.is_some() => {
            Some(MapsNameRef::AnonShmem(v.anon_name.as_deref().unwrap_or_default()))
        }
        Some(f) => Some(MapsNameRef::Path { path: &f.name, deleted: f.deleted }),
        None => {
            if start < brk && end > start_brk {
                Some(MapsNameRef::Heap)
            } else if start <= start_stack && end >= start_stack {
                Some(MapsNameRef::Stack)
            } else {
                v.anon_name.as_deref().map(MapsNameRef::Anon)
            }
        }
    }
}
