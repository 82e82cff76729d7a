//! `/proc/PID/maps` of the model, rendered through the `proc` crate (byte-identical to Linux's).
//!
//! Per VMA (`show_map_vma` / `get_vma_name`): permissions from `VM_READ|WRITE|EXEC` and `s`/`p` from
//! `VM_MAYSHARE`; the offset `pgoff << 12` for a file and 0 for anonymous memory; device and inode of the
//! file; the name: the file's path (shared anonymous memory: `/dev/zero (deleted)`, or
//! `[anon_shmem:NAME]` when named), else `[heap]` for a VMA overlapping `(start_brk, brk)`, `[stack]` for the
//! one containing `start_stack`, `[anon:NAME]` for a named one.

use vmspace_proc::{MapsLine, MapsName, Perms};

use super::flags::*;
use super::{Area, FileKind, Mm, config::PAGE_SHIFT};

impl Mm {
    /// The maps line of one VMA.
    pub fn maps_line(&self, a: &Area) -> MapsLine {
        let perms = Perms {
            read: a.flags & VM_READ != 0,
            write: a.flags & VM_WRITE != 0,
            exec: a.flags & VM_EXEC != 0,
            shared: a.flags & VM_MAYSHARE != 0,
        };
        let (offset, dev_major, dev_minor, inode) = match &a.file {
            Some(f) => (a.pgoff << PAGE_SHIFT, f.dev_major, f.dev_minor, f.inode),
            None => (0, 0, 0, 0),
        };
        let name = match &a.file {
            Some(f) if f.kind == FileKind::ShmemZero && a.name.is_some() => {
                Some(MapsName::AnonShmem(a.name.as_deref().unwrap_or_default().to_string()))
            }
            Some(f) => Some(MapsName::Path { path: f.path.clone(), deleted: f.deleted }),
            None => {
                if a.start < self.brk && a.end > self.start_brk {
                    Some(MapsName::Heap)
                } else if a.start <= self.cfg.start_stack && a.end >= self.cfg.start_stack {
                    Some(MapsName::Stack)
                } else {
                    a.name.as_deref().map(|n| MapsName::Anon(n.to_string()))
                }
            }
        };
        MapsLine { start: a.start, end: a.end, perms, offset, dev_major, dev_minor, inode, name }
    }

    /// The maps lines of the VMAs overlapping `[start, end)`.
    pub fn maps_lines(&self, start: u64, end: u64) -> Vec<MapsLine> {
        self.vmas.values().filter(|a| a.end > start && a.start < end).map(|a| self.maps_line(a)).collect()
    }

    /// The whole maps text.
    pub fn maps_text(&self) -> String {
        let mut s = String::new();
        for a in self.vmas.values() {
            self.maps_line(a).render_into(&mut s);
        }
        s
    }
}
