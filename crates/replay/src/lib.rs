//! Where the engine meets the op scripts and the live kernel: [`EngineTarget`] implements the script crate's
//! [`Target`] on an [`Mm`], so that `vmspace replay FILE` runs a script on the engine, and [`diff`] runs a
//! script on the engine and on the live kernel (`vmspace_linux::replay`), compares them and minimises a
//! difference: the one pipeline behind `vmspace diff` and the differential gate
//! (`crates/cli/tests/differential.rs`).
//!
//! ```
//! use vmspace_mm::MmConfig;
//! use vmspace_replay::EngineTarget;
//! use vmspace_script::{Op, Script, Target, run};
//!
//! let script = Script::parse(
//!     "mmap 0x200000000000 0x3000 rw- private|anon|fixed\n\
//!      mprotect 0x200000001000 0x1000 r--\n\
//!      maps\n",
//! )
//! .unwrap();
//! let mut engine = EngineTarget::validating(MmConfig::default());
//! let text = run(&script, &mut engine).render();
//! assert!(text.contains("L1 mmap = 0x200000000000"), "{text}");
//! assert_eq!(engine.mm().map_count(), 3);
//! // One call on its own: the value a script line parses into, applied by the same code.
//! let op: Op = "munmap 0x200000002000 0x1000".parse().unwrap();
//! assert_eq!(engine.apply(&op), Ok(0));
//! assert_eq!(engine.mm().map_count(), 2);
//! ```
//!
//! This crate exists so that neither side depends on the other: `mm` knows nothing of scripts or of the live
//! kernel, `script` knows nothing of the engine, and `linux` (the live kernel's target, in
//! `vmspace_linux::replay`) knows nothing of the engine. This crate depends on all three and nothing depends
//! on it but the command-line tool.
//!
//! Files declared by `file NAME SIZE` become model files opened read-write (path `/vmspace/NAME`, inode =
//! declaration number) on a file system with the configuration's largest file and `RLIMIT_FSIZE`
//! ([`VmFile::regular_sized`]: a size `ftruncate` refuses is the line's errno, and the file then does not
//! exist); the driver canonicalises their maps lines to `fd=NAME` on both sides. `fork`
//! continues the script in the child's address space; the parent is kept, unchanged, until the target is
//! dropped, as the kernel runner's parent process waits for its child: its mappings still share the pages
//! with the child (their mapcounts, smaps' `Pss` and `Shared_*`, and copy-on-write on either side's writes).
//! `smaps` and `query` are the engine's `/proc` reader ([`Mm::reader`], the mmap-lock mode). `touch` is a user-mode CPU access page by page, as the kernel runner makes it
//! ([`Mm::touch`], through the MMU and the fault path: stack growth below a growsdown VMA, x86's
//! read-implies-accessible), and stops at the first page that faults. `fill` stores a byte over a range
//! ([`Mm::fill`]) and `check` hashes a range's bytes in address order ([`Mm::read_chunks`] into the script
//! crate's `ContentHash`), both through the MMU as user stores and loads; a failure is the page that faulted.

pub mod diff;

use std::sync::Arc;

use vmspace_abi::{
    Errno, MapFlags, MclFlags, MlockFlags, MsyncFlags, PAGE_MASK, PAGE_SIZE, PkeyRights, Prot,
};
use vmspace_mm::{Access, Mm, MmConfig, VmFile};
use vmspace_script::{CallError, ContentHash, Fd, Op, Outcome, QueryAnswer, QueryRequest, Target};

/// An op-script target backed by the engine.
pub struct EngineTarget {
    mm: Mm,
    /// The address spaces that forked (oldest first): alive while their child runs, as the kernel runner's
    /// waiting parents are.
    parents: Vec<Mm>,
    files: Vec<(String, Arc<VmFile>)>,
    /// Run [`Mm::validate`] after every call (tests).
    validate: bool,
}

impl EngineTarget {
    /// A target with an empty address space under `cfg`.
    pub fn new(cfg: MmConfig) -> Self {
        EngineTarget { mm: Mm::new(cfg), parents: Vec::new(), files: Vec::new(), validate: false }
    }

    /// The same, checking every invariant ([`Mm::validate`]) after every call and panicking with the
    /// violation and the maps when one breaks (for tests: the differential gate runs this way).
    pub fn validating(cfg: MmConfig) -> Self {
        EngineTarget { validate: true, ..EngineTarget::new(cfg) }
    }

    /// A target over an existing address space (an imported process's: `Mm::import`), with no files
    /// declared yet ([`EngineTarget::bind_file`]).
    pub fn from_mm(mm: Mm) -> Self {
        EngineTarget { mm, parents: Vec::new(), files: Vec::new(), validate: false }
    }

    /// Binds the script name `name` (`fd=NAME`) to `file`, replacing an earlier binding of that name: the
    /// file a real process's descriptor refers to, mirrored by `vmspace shadow` (which names descriptor N
    /// `fdN`). Returns whether the binding changed (a new file under the name).
    pub fn bind_file(&mut self, name: &str, file: Arc<VmFile>) -> bool {
        match self.files.iter_mut().find(|(n, _)| n == name) {
            Some((_, f)) if Arc::ptr_eq(f, &file) => false,
            Some((_, f)) => {
                *f = file;
                true
            }
            None => {
                self.files.push((name.to_string(), file));
                true
            }
        }
    }

    /// The file bound to `name`, if any.
    pub fn bound_file(&self, name: &str) -> Option<&Arc<VmFile>> {
        self.file_of(name)
    }

    /// The address space (after the script, the last child's).
    pub fn mm(&self) -> &Mm {
        &self.mm
    }

    /// Mutable access to the address space.
    pub fn mm_mut(&mut self) -> &mut Mm {
        &mut self.mm
    }

    fn file_of(&self, name: &str) -> Option<&Arc<VmFile>> {
        self.files.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }
}

impl Target for EngineTarget {
    fn apply(&mut self, op: &Op) -> Outcome {
        let r = self.call(op);
        self.check_invariants(op);
        r
    }

    fn maps(&mut self) -> String {
        self.mm.maps_text()
    }

    fn smaps(&mut self) -> String {
        // The kernel runner drains its CPU's page batches before every smaps read; so does the engine's.
        self.mm.memory().lru_add_drain();
        self.mm.reader().smaps()
    }

    fn query(&mut self, req: &QueryRequest) -> Result<QueryAnswer, Errno> {
        self.mm.reader().query(req)
    }

    fn file_path(&self, name: &str) -> Option<String> {
        self.file_of(name).map(|f| f.name.clone())
    }

    fn file_id(&self, name: &str) -> Option<(u32, u32, u64)> {
        self.file_of(name).map(|f| (f.dev_major, f.dev_minor, f.inode))
    }
}

impl EngineTarget {
    /// Performs one call ([`Target::apply`]) without the invariant check: the one place that turns an op into
    /// the engine's call.
    fn call(&mut self, op: &Op) -> Outcome {
        let mm = &self.mm;
        Ok(match *op {
            Op::File { ref name, size } => self.file(name, size)?,
            Op::Ftruncate { ref name, size } => self.ftruncate(name, size)?,
            Op::Mmap { addr, len, prot, flags, ref file } => {
                self.mmap(addr, len, prot, flags, file.as_ref().map(|(fd, off)| (fd, *off)))?
            }
            Op::Munmap { addr, len } => mm.munmap(addr, len).map(|()| 0)?,
            Op::Mprotect { addr, len, prot } => mm.mprotect(addr, len, prot).map(|()| 0)?,
            Op::PkeyMprotect { addr, len, prot, key } => {
                mm.pkey_mprotect(addr, len, prot, key).map(|()| 0)?
            }
            Op::Mremap { addr, old_len, new_len, flags, new_addr } => {
                mm.mremap(addr, old_len, new_len, flags, new_addr.unwrap_or(0))?
            }
            Op::Madvise { addr, len, advice } => mm.madvise(addr, len, advice).map(|()| 0)?,
            Op::Mlock { addr, len } => mm.mlock(addr, len).map(|()| 0)?,
            Op::Mlock2 { addr, len, flags } => {
                mm.mlock2(addr, len, MlockFlags::from_bits_retain(flags)).map(|()| 0)?
            }
            Op::Munlock { addr, len } => mm.munlock(addr, len).map(|()| 0)?,
            Op::Mlockall { flags } => mm.mlockall(MclFlags::from_bits_retain(flags)).map(|()| 0)?,
            Op::Munlockall => mm.munlockall().map(|()| 0)?,
            Op::Mseal { addr, len, flags } => mm.mseal(addr, len, flags).map(|()| 0)?,
            Op::PkeyAlloc { flags, rights } => {
                // `init_val` is an unsigned long; every bit beyond the access-rights mask is EINVAL
                // (`mm/mprotect.c: pkey_alloc`), the high half included.
                let rights = u32::try_from(rights).map_err(|_| Errno::EINVAL)?;
                mm.pkey_alloc(flags, PkeyRights::from_bits_retain(rights))? as u64
            }
            Op::PkeyFree { key } => mm.pkey_free(key).map(|()| 0)?,
            Op::Msync { addr, len, flags } => {
                mm.msync(addr, len, MsyncFlags::from_bits_retain(flags)).map(|()| 0)?
            }
            Op::Touch { addr, len, write } => {
                self.touch(addr, len, write).map_err(CallError::Fault).map(|()| 0)?
            }
            Op::Fill { addr, len, byte } => {
                let accessed = mm.config().refused_string_store_accessed;
                mm.fill(addr, len, byte).map(|()| 0).map_err(|f| {
                    let a = f.addr;
                    // The kernel runner's `rep stosb` marks a page accessed even when its protection refuses
                    // the write, on CPUs that do so (`MmConfig::refused_string_store_accessed`,
                    // `PageTable::string_store_probe`).
                    if accessed {
                        mm.page_table().string_store_probe(a);
                    }
                    CallError::Fault(a & PAGE_MASK)
                })?
            }
            Op::Check { addr, len } => {
                let mut h = ContentHash::new();
                mm.read_chunks(addr, len, |b| h.update(b))
                    .map_err(|f| CallError::Fault(f.addr & PAGE_MASK))?;
                h.value()
            }
            Op::Name { addr, len, ref name } => mm.set_anon_name(addr, len, name.as_deref()).map(|()| 0)?,
            Op::Brk { addr } => mm.brk(addr),
            Op::Fork => {
                // The script continues in the child; the parent is checked before it is put aside.
                let child = mm.fork()?;
                self.check_invariants(&"fork (parent)");
                self.parents.push(std::mem::replace(&mut self.mm, child));
                0
            }
            Op::Maps | Op::Smaps { .. } | Op::Query { .. } => Err(Errno::ENOSYS)?,
        })
    }

    /// With validation on, checks every invariant and panics with the violation and the maps when one breaks.
    fn check_invariants(&self, after: &dyn std::fmt::Display) {
        if self.validate
            && let Err(e) = self.mm.validate()
        {
            panic!("engine invariant broken after `{after}`: {e}\n{}", self.mm.maps_text());
        }
    }

    fn file(&mut self, name: &str, size: u64) -> Result<u64, Errno> {
        // The kernel runner creates the file and truncates it to SIZE; a refused size (EINVAL, EFBIG beyond
        // the file system's largest file or RLIMIT_FSIZE) is the line's result and the file is not kept.
        let ino = self.files.len() as u64 + 1;
        let cfg = self.mm.config();
        let f = VmFile::regular_sized(
            format!("/vmspace/{name}"),
            ino,
            size,
            cfg.file_max_bytes,
            cfg.fsize_rlimit,
        )?;
        // On the device the kernel runner's files live on (its readahead window and request size), placed by
        // its file system's method (`thp_get_unmapped_area` on ext4).
        let f = Arc::new(VmFile { bdi: cfg.file_bdi, area: cfg.file_area, ..(*f).clone() });
        self.files.push((name.to_string(), f));
        Ok(0)
    }

    fn ftruncate(&mut self, name: &str, size: u64) -> Result<u64, Errno> {
        // `fs/open.c: do_sys_ftruncate` refuses a negative length before it looks the descriptor up; a name no
        // `file` line declared (or whose creation failed) is a descriptor that is not open.
        match self.file_of(name) {
            _ if size > i64::MAX as u64 => Err(Errno::EINVAL),
            Some(f) => f.ftruncate(size).map(|()| 0),
            None => Err(Errno::EBADF),
        }
    }

    fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
        file: Option<(&Fd, u64)>,
    ) -> Result<u64, Errno> {
        // The descriptor lookup is this adapter's (the engine has no descriptor table), in the kernel's order:
        // `arch/x86/kernel/sys_x86_64.c: sys_mmap` refuses an unaligned offset first, then
        // `mm/mmap.c: ksys_mmap_pgoff` looks the descriptor up only without MAP_ANONYMOUS (EBADF).
        let (f, off) = match file {
            None => (None, 0),
            Some((_, off)) if flags.contains(MapFlags::ANONYMOUS) => (None, off),
            Some((_, off)) if off & !PAGE_MASK != 0 => return Err(Errno::EINVAL),
            Some((fd, off)) => {
                let f = match fd {
                    Fd::Name(n) => self.file_of(n).cloned(),
                    Fd::MinusOne => None,
                };
                (Some(f.ok_or(Errno::EBADF)?), off)
            }
        };
        self.mm.mmap(addr, len, prot, flags, f.as_ref(), off)
    }

    fn touch(&mut self, addr: u64, len: u64, write: bool) -> Result<(), u64> {
        // One access per page, to the first byte of the range in it, as the kernel runner makes them; none for
        // an empty range.
        if len == 0 {
            return Ok(());
        }
        let access = if write { Access::Write } else { Access::Read };
        let end = addr.saturating_add(len);
        let mut page = addr & PAGE_MASK;
        while page < end {
            if self.mm.touch(page.max(addr), access).is_err() {
                return Err(page);
            }
            page = match page.checked_add(PAGE_SIZE) {
                Some(p) => p,
                None => break,
            };
        }
        Ok(())
    }
}
