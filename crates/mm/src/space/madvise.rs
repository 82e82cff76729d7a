//! madvise (`do_madvise`, `madvise_walk_vmas`, `madvise_vma_behavior`, `madvise_update_vma`) and
//! `PR_SET_VMA_ANON_NAME` (`prctl_set_vma` → `madvise_set_anon_name`).
//!
//! Checks: unknown advice EINVAL; unaligned start EINVAL; length 0 success; a length that rounds to 0 or an
//! end that wraps EINVAL. The walk visits every VMA in the range, **skipping holes** and returning ENOMEM at
//! the end if there was one (unlike mprotect, it does not stop).
//!
//! * `MADV_DONTNEED` / `MADV_FREE` drop pages (not modelled) and change no VMA; DONTNEED refuses locked or
//!   PFN-mapped VMAs (EINVAL), FREE anything but private anonymous memory (EINVAL).
//! * `MADV_DONTFORK` / `MADV_DOFORK` set / clear `VM_DONTCOPY` (DOFORK: EINVAL on `VM_IO`).
//! * `MADV_WIPEONFORK` sets `VM_WIPEONFORK` on private anonymous VMAs only (EINVAL otherwise);
//!   `MADV_KEEPONFORK` clears it.
//!
//! Flag changes go through `vma_modify` (merge or split); madvise reports the ENOMEM of a refused split as
//! EAGAIN.
//!
//! Anonymous names: without `CONFIG_ANON_VMA_NAME` the prctl is EINVAL. With it: a name longer than 80 bytes
//! (with its NUL) or with a character outside printable ASCII or among `` \`$[] `` is EINVAL; the range is
//! walked like madvise; a file-backed VMA (other than shared anonymous memory) is EBADF.

use std::sync::Arc;

use super::VmFlags;
use super::tree::{V, VmaExt};
use super::{Advice, Errno, Mm, PAGE_MASK, page_align};

/// `ANON_VMA_NAME_MAX_LEN` (including the NUL).
const ANON_VMA_NAME_MAX_LEN: usize = 80;

/// What a madvise walk does to each VMA.
#[derive(Clone)]
enum Behavior {
    Advice(Advice),
    Name(Option<Arc<str>>),
}

impl Mm {
    /// `madvise(start, len, advice)`.
    pub fn madvise(&mut self, start: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        if !matches!(
            advice,
            Advice::DONTNEED
                | Advice::FREE
                | Advice::DONTFORK
                | Advice::DOFORK
                | Advice::WIPEONFORK
                | Advice::KEEPONFORK
        ) {
            return Err(Errno::EINVAL);
        }
        self.locked(|mm| mm.madvise_range(start, len, Behavior::Advice(advice)))
    }

    /// `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, start, len, name)`; `None` clears.
    pub fn set_anon_name(&mut self, start: u64, len: u64, name: Option<&str>) -> Result<(), Errno> {
        if !self.cfg.anon_vma_name {
            return Err(Errno::EINVAL);
        }
        let name = match name {
            None => None,
            Some(n) => {
                if n.len() + 1 > ANON_VMA_NAME_MAX_LEN {
                    return Err(Errno::EINVAL);
                }
                if n.bytes().any(|c| !(0x20..0x7f).contains(&c) || b"\\`$[]".contains(&c)) {
                    return Err(Errno::EINVAL);
                }
                Some(Arc::<str>::from(n))
            }
        };
        self.locked(|mm| mm.madvise_range(start, len, Behavior::Name(name)))
    }

    /// The common range checks and the walk.
    fn madvise_range(&mut self, start: u64, len_in: u64, b: Behavior) -> Result<(), Errno> {
        if start & !PAGE_MASK != 0 {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len_in);
        if len_in != 0 && len == 0 {
            return Err(Errno::EINVAL);
        }
        let Some(end) = start.checked_add(len) else { return Err(Errno::EINVAL) };
        if end == start {
            return Ok(());
        }
        let n = self.vmas_between(start, end).count() as u64;
        if matches!(
            b,
            Behavior::Name(_)
                | Behavior::Advice(
                    Advice::DONTFORK | Advice::DOFORK | Advice::WIPEONFORK | Advice::KEEPONFORK
                )
        ) {
            self.reserve(3 * n).map_err(|_| Errno::EAGAIN)?;
        }
        // madvise_walk_vmas.
        let mut unmapped_error = Ok(());
        let mut start = start;
        let mut vma = self.find(start);
        loop {
            let Some(a) = vma else { return Err(Errno::ENOMEM) };
            if start < a.start() {
                unmapped_error = Err(Errno::ENOMEM);
                start = a.start();
                if start >= end {
                    break;
                }
            }
            let tmp = a.end().min(end);
            let prev_end = self.madvise_vma(a, start, tmp, &b)?;
            start = tmp.max(prev_end);
            if start >= end {
                break;
            }
            vma = self.find(prev_end);
        }
        unmapped_error
    }

    /// One VMA of the walk: `[start, end)` inside `a`. Returns the end of the VMA that now covers `start`
    /// (the walk's `prev`).
    fn madvise_vma(&mut self, a: V, start: u64, end: u64, b: &Behavior) -> Result<u64, Errno> {
        // mseal hook (sys2; `mm/madvise.c: madvise_vma_behavior` asks `can_madvise_modify` first, see
        // `super::mseal`).
        if let Behavior::Advice(adv) = b
            && !self.can_madvise_modify(a, *adv)
        {
            return Err(Errno::EPERM);
        }
        let flags = a.fl();
        let mut new_flags = flags;
        let mut new_name = a.anon_name();
        match b {
            Behavior::Advice(Advice::DONTNEED) => {
                if flags.intersects(VmFlags::PFNMAP | VmFlags::LOCKED) {
                    return Err(Errno::EINVAL);
                }
                return Ok(a.end());
            }
            Behavior::Advice(Advice::FREE) => {
                if !a.is_anonymous() || flags.intersects(VmFlags::PFNMAP | VmFlags::LOCKED) {
                    return Err(Errno::EINVAL);
                }
                return Ok(a.end());
            }
            Behavior::Advice(Advice::DONTFORK) => new_flags |= VmFlags::DONTCOPY,
            Behavior::Advice(Advice::DOFORK) => {
                if new_flags.intersects(VmFlags::IO) {
                    return Err(Errno::EINVAL);
                }
                new_flags &= !VmFlags::DONTCOPY;
            }
            Behavior::Advice(Advice::WIPEONFORK) => {
                if a.is_file_backed() || new_flags.intersects(VmFlags::SHARED) {
                    return Err(Errno::EINVAL);
                }
                new_flags |= VmFlags::WIPEONFORK;
            }
            Behavior::Advice(Advice::KEEPONFORK) => new_flags &= !VmFlags::WIPEONFORK,
            Behavior::Advice(_) => return Err(Errno::EINVAL),
            Behavior::Name(n) => {
                if a.file().is_some_and(|f| f.kind != super::FileKind::ShmemZero) {
                    return Err(Errno::EBADF);
                }
                new_name = n.clone();
            }
        }
        if new_flags == flags && a.name_is(new_name.as_ref()) {
            return Ok(a.end());
        }
        let t = self
            .vma_modify(a, start, end, new_flags, new_name.as_ref())
            .map_err(|e| if e == Errno::ENOMEM { Errno::EAGAIN } else { e })?;
        self.set_flags(t, new_flags);
        if !t.name_is(new_name.as_ref()) {
            self.set_name(t, new_name);
        }
        Ok(t.end())
    }
}
