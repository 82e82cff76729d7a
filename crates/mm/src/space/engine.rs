//! The engine's op-script runner: [`EngineTarget`] implements the script crate's [`Target`] on an [`Mm`],
//! so that `vmspace replay FILE` runs a script on the engine and `vmspace diff FILE` compares it with the
//! live kernel.
//!
//! Files declared by `file NAME SIZE` become model files opened read-write (path `/vmspace/NAME`, inode =
//! declaration number); the driver canonicalises their maps lines to `fd=NAME` on both sides. `fork`
//! replaces the address space by the child's (the parent only waits in the kernel runner, so it is not
//! observable afterwards). `touch` accesses page by page as the kernel runner does (through GUP:
//! [`Mm::gup_access`]) and stops at the first page that fails.

use std::sync::Arc;

use vmspace_script::{Advice, MmapFlags, MremapFlags, Prot, Target};

use super::config::PAGE_SIZE;
use super::{Errno, MapFile, Mm, MmConfig, PAGE_MASK};

/// An op-script target backed by the engine.
pub struct EngineTarget {
    mm: Mm,
    files: Vec<(String, Arc<MapFile>)>,
}

impl EngineTarget {
    /// A target with an empty address space under `cfg`.
    pub fn new(cfg: MmConfig) -> Self {
        EngineTarget { mm: Mm::new(cfg), files: Vec::new() }
    }

    /// The address space (after the script, the last child's).
    pub fn mm(&self) -> &Mm {
        &self.mm
    }

    /// Mutable access to the address space.
    pub fn mm_mut(&mut self) -> &mut Mm {
        &mut self.mm
    }

    fn file_of(&self, name: &str) -> Option<&Arc<MapFile>> {
        self.files.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }
}

impl Target for EngineTarget {
    fn file(&mut self, name: &str, size: u64) -> Result<u64, Errno> {
        let ino = self.files.len() as u64 + 1;
        self.files.push((name.to_string(), MapFile::regular(format!("/vmspace/{name}"), ino, size)));
        Ok(0)
    }

    fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MmapFlags,
        file: Option<(&str, u64)>,
    ) -> Result<u64, Errno> {
        let (f, off) = match file {
            Some((n, off)) => (Some(self.file_of(n).cloned().ok_or(Errno::EBADF)?), off),
            None => (None, 0),
        };
        self.mm.mmap(addr, len, prot.bits(), flags.0, f.as_ref(), off)
    }

    fn munmap(&mut self, addr: u64, len: u64) -> Result<u64, Errno> {
        self.mm.munmap(addr, len).map(|()| 0)
    }

    fn mprotect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<u64, Errno> {
        self.mm.mprotect(addr, len, prot.bits()).map(|()| 0)
    }

    fn mremap(
        &mut self,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        self.mm.mremap(addr, old_len, new_len, flags.0, new_addr)
    }

    fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<u64, Errno> {
        self.mm.madvise(addr, len, advice.linux_value()).map(|()| 0)
    }

    fn touch(&mut self, addr: u64, len: u64, write: bool) -> Result<(), u64> {
        if len == 0 {
            return Ok(());
        }
        let end = addr.saturating_add(len);
        let mut page = addr & PAGE_MASK;
        while page < end {
            if self.mm.gup_access(page, write).is_err() {
                return Err(page);
            }
            page = match page.checked_add(PAGE_SIZE) {
                Some(p) => p,
                None => break,
            };
        }
        Ok(())
    }

    fn name(&mut self, addr: u64, len: u64, name: Option<&str>) -> Result<u64, Errno> {
        self.mm.set_anon_name(addr, len, name).map(|()| 0)
    }

    fn brk(&mut self, addr: u64) -> Result<u64, Errno> {
        Ok(self.mm.brk(addr))
    }

    fn fork(&mut self) -> Result<u64, Errno> {
        let child = self.mm.fork()?;
        self.mm = child;
        Ok(0)
    }

    fn maps(&mut self) -> String {
        self.mm.maps_text()
    }

    fn file_path(&self, name: &str) -> Option<String> {
        self.file_of(name).map(|f| f.path.clone())
    }
}
