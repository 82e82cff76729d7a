//! Running a script: the [`Target`] trait that a runner implements (the engine in `vmspace_replay`, the live
//! kernel in `vmspace_linux::replay`), and [`run`], which drives any target through a script and builds the
//! canonical [`Output`].
//!
//! The driver owns everything that must be identical on both sides: the order of calls, which value each call
//! prints, when maps blocks are taken, which maps lines are kept (those overlapping the arena) and how file
//! mappings are canonicalised. A target only performs calls and reports raw results.

use crate::Errno;
use vmspace_abi::{Advice, MapFlags, MremapFlags, Prot};

use crate::ast::{Fd, Op, Script};
use crate::output::{Arena, Entry, Output, Value};
use vmspace_proc::{MapsLine, MapsName, Perms, QueryAnswer, QueryRequest};

/// Why a `fill` or `check` did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessError {
    /// The CPU could not access the page at this (page-aligned) address: the pages before it were accessed,
    /// nothing at or after it was. Prints `-EFAULT <page>`.
    Fault(u64),
    /// The target cannot perform the op at all (a target without page contents answers `fill` and `check`
    /// with ENOSYS). Prints `-E<NAME>`.
    Errno(Errno),
}

impl AccessError {
    /// The printed value.
    pub fn value(self) -> Value {
        match self {
            AccessError::Fault(page) => Value::Fault(page),
            AccessError::Errno(e) => Value::Err(e),
        }
    }
}

/// A system that executes op-script calls. One method per op; each returns what the Linux syscall would
/// (the value on success, the errno on failure), and must leave the address space unchanged when it fails.
///
/// All addresses and lengths are passed exactly as written in the script (no rounding or validation by the
/// driver): rejecting unaligned addresses, zero or overflowing lengths, unknown flags etc. is the target's job,
/// with the kernel's errno.
pub trait Target {
    /// `file NAME SIZE`: create a backing file of `size` bytes (contents zero) that later `mmap ... fd=NAME`
    /// calls map. The file stays open (and linked) until the target is dropped. Returns `Ok(0)`; an error
    /// (e.g. EFBIG/ENOSPC from the host) is reported as the line's result. The parser guarantees each NAME is
    /// declared once and before use.
    fn file(&mut self, name: &str, size: u64) -> Result<u64, Errno>;

    /// `mmap(addr, len, prot, flags, fd, off)`. `file` is the script's `fd=FD off=OFF`: [`Fd::Name`] of a file
    /// this target created and still holds is that file's descriptor; any other NAME is a descriptor number that
    /// is not open; [`Fd::MinusOne`] is -1. `None` (no `fd=`) passes fd -1 and offset 0, with `anon` or without
    /// (EBADF then). With `anon` the kernel ignores the descriptor (it still checks the offset). Returns the mapped address.
    /// Addresses the target picks itself (no `fixed`, hint refused) may lie anywhere; the comparison treats two
    /// results outside the arena as equal.
    fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
        file: Option<(&Fd, u64)>,
    ) -> Result<u64, Errno>;

    /// `ftruncate(fd, size)` on the script file `name` (a descriptor that is not open if the target holds no
    /// file of that name: EBADF): `Ok(0)` on success. `size` is an `off_t`: from 2^63 on it is negative
    /// (EINVAL). Every mapping of the file sees the new size.
    fn ftruncate(&mut self, name: &str, size: u64) -> Result<u64, Errno>;

    /// `munmap(addr, len)`: `Ok(0)` on success.
    fn munmap(&mut self, addr: u64, len: u64) -> Result<u64, Errno>;

    /// `mprotect(addr, len, prot)`: `Ok(0)` on success.
    fn mprotect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<u64, Errno>;

    /// `mremap(addr, old_len, new_len, flags, new_addr)`; `new_addr` is 0 when the script gives none (only
    /// allowed without `fixed`). Returns the new address.
    fn mremap(
        &mut self,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<u64, Errno>;

    /// `madvise(addr, len, advice)`: `Ok(0)` on success.
    fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<u64, Errno>;

    /// `pkey_mprotect(addr, len, prot, key)`: `Ok(0)` on success. `key` -1 keeps each VMA's key (it is
    /// `mprotect`).
    fn pkey_mprotect(&mut self, addr: u64, len: u64, prot: Prot, key: i32) -> Result<u64, Errno>;

    /// `mlock(addr, len)`: `Ok(0)` on success.
    fn mlock(&mut self, addr: u64, len: u64) -> Result<u64, Errno>;

    /// `mlock2(addr, len, flags)` (`MLOCK_ONFAULT` = 1, raw `int` bits): `Ok(0)` on success.
    fn mlock2(&mut self, addr: u64, len: u64, flags: u32) -> Result<u64, Errno>;

    /// `munlock(addr, len)`: `Ok(0)` on success.
    fn munlock(&mut self, addr: u64, len: u64) -> Result<u64, Errno>;

    /// `mlockall(flags)` (`MCL_CURRENT` 1, `MCL_FUTURE` 2, `MCL_ONFAULT` 4, raw `int` bits): `Ok(0)` on success.
    /// On the kernel it locks the runner's own memory too; only the arena is compared.
    fn mlockall(&mut self, flags: u32) -> Result<u64, Errno>;

    /// `munlockall()`: `Ok(0)` on success.
    fn munlockall(&mut self) -> Result<u64, Errno>;

    /// `mseal(addr, len, flags)` (no flag is defined in 6.18): `Ok(0)` on success.
    fn mseal(&mut self, addr: u64, len: u64, flags: u64) -> Result<u64, Errno>;

    /// `pkey_alloc(flags, rights)` (`PKEY_DISABLE_ACCESS` 1, `PKEY_DISABLE_WRITE` 2; both arguments are
    /// `unsigned long`): the new key. EINVAL on a CPU or kernel without protection keys.
    fn pkey_alloc(&mut self, flags: u64, rights: u64) -> Result<u64, Errno>;

    /// `pkey_free(key)`: `Ok(0)` on success.
    fn pkey_free(&mut self, key: i32) -> Result<u64, Errno>;

    /// `msync(addr, len, flags)` (`MS_ASYNC` 1, `MS_INVALIDATE` 2, `MS_SYNC` 4, raw `int` bits): `Ok(0)` on
    /// success.
    fn msync(&mut self, addr: u64, len: u64, flags: u32) -> Result<u64, Errno>;

    /// `touch ADDR LEN r|w`: one user-mode CPU access to every page of `[addr & PAGE_MASK, addr + len)` (the
    /// end saturating at 2^64) in address order, as an x86-64 CPU without protection keys makes it (the format
    /// reference, `crate::ast`, "Memory accesses"): a write needs VM_WRITE and keeps the byte's value; a read
    /// needs any of VM_READ, VM_WRITE, VM_EXEC (a `-w-` or `--x` page reads); a fault just below a
    /// VM_GROWSDOWN VMA grows it (within the stack guard gap and rlimits) before the access is checked; an
    /// unmapped page, a guard region (SIGSEGV) or a file page beyond the end of the file (SIGBUS) fails;
    /// faults have their usual side effects (a write fault on a private VMA prepares its anon_vma). Returns
    /// `Ok(())` when every page was accessed, or `Err(page)` with the page-aligned address of the first page
    /// that could not be (pages before it have been accessed, with their faults' side effects; none after
    /// it). `len == 0` touches nothing. Never kills the process (the kernel runner catches SIGSEGV/SIGBUS).
    fn touch(&mut self, addr: u64, len: u64, write: bool) -> Result<(), u64>;

    /// `fill ADDR LEN BYTE`: the CPU writes `byte` to every byte of `[addr, addr + len)` (the end saturating
    /// at 2^64), a page at a time in address order, with [`Target::touch`]'s write rules per page. Returns
    /// `Ok(())`, or [`AccessError::Fault`] with the first page it could not write (the bytes of the pages
    /// before it are written, none of it or after it), or [`AccessError::Errno`] when the target cannot fill
    /// at all. `len == 0` writes nothing. A target must not allocate per byte of `len`.
    fn fill(&mut self, addr: u64, len: u64, byte: u8) -> Result<(), AccessError>;

    /// `check ADDR LEN`: the CPU reads every byte of `[addr, addr + len)` (the end saturating at 2^64), a page
    /// at a time in address order, with [`Target::touch`]'s read rules per page, and returns their content
    /// hash ([`crate::hash`]: FNV-1a 64 in address order; `len == 0` gives the empty hash). Fails as
    /// [`Target::fill`] does (the reads of the pages before a fault keep their faults' side effects).
    fn check(&mut self, addr: u64, len: u64) -> Result<u64, AccessError>;

    /// `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len, name)`; `None` clears the name. On a kernel (or an
    /// engine config) without anonymous VMA names this is EINVAL. `Ok(0)` on success.
    fn name(&mut self, addr: u64, len: u64, name: Option<&str>) -> Result<u64, Errno>;

    /// `brk(addr)`: returns the resulting break (the old one when the request is refused; brk itself never
    /// fails with an errno). On the kernel the break lives near the program's heap, outside the arena.
    fn brk(&mut self, addr: u64) -> Result<u64, Errno>;

    /// `fork()`: later calls run in the child, whose address space is the parent's copy per the fork rules
    /// (DONTCOPY VMAs absent, WIPEONFORK VMAs empty). The parent does nothing more. Returns `Ok(0)` (the
    /// child's view).
    fn fork(&mut self) -> Result<u64, Errno>;

    /// The complete `/proc/self/maps` text of the current address space (the driver keeps the lines that
    /// overlap the arena).
    fn maps(&mut self) -> String;

    /// The `/proc/self/smaps` text of the current address space: at least the records of the VMAs that
    /// overlap the arena (the driver keeps only those).
    fn smaps(&mut self) -> String;

    /// `ioctl(PROCMAP_QUERY)` on `/proc/self/maps` with the request's `size`, `query_flags`, `query_addr` and
    /// `vma_name_size`; a non-zero `vma_name_size` comes with a non-zero placeholder `vma_name_addr` for which
    /// the target substitutes a buffer of its own of that capacity (at least what the kernel may write). No
    /// build-ID buffer. The answer with the name copied out, or the errno.
    fn query(&mut self, req: &QueryRequest) -> Result<QueryAnswer, Errno>;

    /// The device (major, minor) and inode of the script file NAME as the target's `stat` shows them (the
    /// kernel: `fstat` of its descriptor; the engine: its model file's), so that an answer without a name can
    /// be recognised as a mapping of it. `None` if the file was never created.
    fn file_id(&self, name: &str) -> Option<(u32, u32, u64)>;

    /// The path that maps lines show for the script file NAME (for the kernel, the temporary file's path; for
    /// the engine, its model file's name), so that the driver can canonicalise it to `fd=NAME`. `None` if the
    /// file was never created.
    fn file_path(&self, name: &str) -> Option<String>;
}

/// A [`Target`] that passes every call on to `inner` after telling `on_call` how many calls it has passed on so
/// far, this one included: how a runner shows the progress of a long script, or stops it, without a second copy
/// of the trait's forwarding. `file_path` is a query, not a call, and is not counted.
pub struct Observed<T, F> {
    inner: T,
    calls: u64,
    on_call: F,
}

impl<T: Target, F: FnMut(u64)> Observed<T, F> {
    /// Wraps `inner`; `on_call(n)` runs before the n-th call (1-based) reaches it.
    pub fn new(inner: T, on_call: F) -> Self {
        Observed { inner, calls: 0, on_call }
    }

    /// The calls passed on so far.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The wrapped target.
    pub fn into_inner(self) -> T {
        self.inner
    }

    fn count(&mut self) -> &mut T {
        self.calls += 1;
        (self.on_call)(self.calls);
        &mut self.inner
    }
}

impl<T: Target, F: FnMut(u64)> Target for Observed<T, F> {
    fn file(&mut self, name: &str, size: u64) -> Result<u64, Errno> {
        self.count().file(name, size)
    }
    fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
        file: Option<(&Fd, u64)>,
    ) -> Result<u64, Errno> {
        self.count().mmap(addr, len, prot, flags, file)
    }
    fn ftruncate(&mut self, name: &str, size: u64) -> Result<u64, Errno> {
        self.count().ftruncate(name, size)
    }
    fn munmap(&mut self, addr: u64, len: u64) -> Result<u64, Errno> {
        self.count().munmap(addr, len)
    }
    fn mprotect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<u64, Errno> {
        self.count().mprotect(addr, len, prot)
    }
    fn mremap(
        &mut self,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        self.count().mremap(addr, old_len, new_len, flags, new_addr)
    }
    fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<u64, Errno> {
        self.count().madvise(addr, len, advice)
    }
    fn pkey_mprotect(&mut self, addr: u64, len: u64, prot: Prot, key: i32) -> Result<u64, Errno> {
        self.count().pkey_mprotect(addr, len, prot, key)
    }
    fn mlock(&mut self, addr: u64, len: u64) -> Result<u64, Errno> {
        self.count().mlock(addr, len)
    }
    fn mlock2(&mut self, addr: u64, len: u64, flags: u32) -> Result<u64, Errno> {
        self.count().mlock2(addr, len, flags)
    }
    fn munlock(&mut self, addr: u64, len: u64) -> Result<u64, Errno> {
        self.count().munlock(addr, len)
    }
    fn mlockall(&mut self, flags: u32) -> Result<u64, Errno> {
        self.count().mlockall(flags)
    }
    fn munlockall(&mut self) -> Result<u64, Errno> {
        self.count().munlockall()
    }
    fn mseal(&mut self, addr: u64, len: u64, flags: u64) -> Result<u64, Errno> {
        self.count().mseal(addr, len, flags)
    }
    fn pkey_alloc(&mut self, flags: u64, rights: u64) -> Result<u64, Errno> {
        self.count().pkey_alloc(flags, rights)
    }
    fn pkey_free(&mut self, key: i32) -> Result<u64, Errno> {
        self.count().pkey_free(key)
    }
    fn msync(&mut self, addr: u64, len: u64, flags: u32) -> Result<u64, Errno> {
        self.count().msync(addr, len, flags)
    }
    fn touch(&mut self, addr: u64, len: u64, write: bool) -> Result<(), u64> {
        self.count().touch(addr, len, write)
    }
    fn fill(&mut self, addr: u64, len: u64, byte: u8) -> Result<(), AccessError> {
        self.count().fill(addr, len, byte)
    }
    fn check(&mut self, addr: u64, len: u64) -> Result<u64, AccessError> {
        self.count().check(addr, len)
    }
    fn name(&mut self, addr: u64, len: u64, name: Option<&str>) -> Result<u64, Errno> {
        self.count().name(addr, len, name)
    }
    fn brk(&mut self, addr: u64) -> Result<u64, Errno> {
        self.count().brk(addr)
    }
    fn fork(&mut self) -> Result<u64, Errno> {
        self.count().fork()
    }
    fn maps(&mut self) -> String {
        self.count().maps()
    }
    fn smaps(&mut self) -> String {
        self.count().smaps()
    }
    fn query(&mut self, req: &QueryRequest) -> Result<QueryAnswer, Errno> {
        self.count().query(req)
    }
    fn file_path(&self, name: &str) -> Option<String> {
        self.inner.file_path(name)
    }
    fn file_id(&self, name: &str) -> Option<(u32, u32, u64)> {
        self.inner.file_id(name)
    }
}

/// Keeps the maps lines of `text` that overlap `arena`, canonicalising mappings of script files and the
/// inode numbers of shared anonymous mappings (see [`crate::output`]): `files` lists `(NAME, path)` in
/// declaration order. A line that does not parse is kept verbatim (it will show up in a comparison).
pub fn canonical_maps(text: &str, arena: Arena, files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut objects = Vec::new();
    for raw in text.lines() {
        let Ok(mut l) = raw.parse::<MapsLine>() else {
            out.push(raw.to_string());
            continue;
        };
        if !arena.overlaps(l.start, l.end) {
            continue;
        }
        canonical_line(&mut l, files, &mut objects);
        out.push(l.to_string());
    }
    out
}

/// Objects without a path of their own (shmem behind shared anonymous mappings, hugetlbfs behind
/// MAP_HUGETLB), keyed by (name, device, inode), in order of first appearance in one block.
type Objects = Vec<(String, u32, u32, u64)>;

/// Canonicalises one maps line (or smaps header) of a block whose objects so far are `objects`.
fn canonical_line(l: &mut MapsLine, files: &[(String, String)], objects: &mut Objects) {
    {
        if let Some(MapsName::Path { path, deleted }) = &l.name
            && let Some(idx) = files.iter().position(|(_, p)| p == path)
        {
            let suffix = if *deleted { " (deleted)" } else { "" };
            l.name = Some(MapsName::Other(format!("fd={}{suffix}", files[idx].0)));
            l.dev_major = 0;
            l.dev_minor = 0;
            l.inode = idx as u64 + 1;
        } else if let Some(MapsName::Path { path, deleted: true }) = &l.name
            && (path == "/dev/zero" || path == "/anon_hugepage")
        {
            let key = (path.clone(), l.dev_major, l.dev_minor, l.inode);
            let same_name = objects.iter().filter(|o| o.0 == key.0);
            let k = match same_name.clone().position(|o| *o == key) {
                Some(k) => k,
                None => {
                    let k = same_name.count();
                    objects.push(key);
                    k
                }
            };
            l.inode = k as u64 + 1;
            if path == "/anon_hugepage" {
                // The minor number of the kernel's internal hugetlbfs mount depends on boot order.
                l.dev_major = 0;
                l.dev_minor = 0;
            }
        }
    }
}

/// The records of an smaps text that overlap `arena` (and contain `at`, if given), their lines canonical
/// (module [`crate::output`]): headers as maps lines, the rest verbatim. A text that does not parse is kept
/// whole, verbatim (it will show up in a comparison).
pub fn canonical_smaps(text: &str, arena: Arena, at: Option<u64>, files: &[(String, String)]) -> Vec<String> {
    let records = match vmspace_proc::parse_smaps(text) {
        Ok(r) => r,
        Err(_) => return text.lines().map(str::to_string).collect(),
    };
    let mut objects = Vec::new();
    let mut out = Vec::new();
    for mut r in records {
        let h = &r.header;
        if !arena.overlaps(h.start, h.end) || at.is_some_and(|a| a < h.start || a >= h.end) {
            continue;
        }
        canonical_line(&mut r.header, files, &mut objects);
        let mut s = String::new();
        r.render_into(&mut s);
        out.extend(s.lines().map(str::to_string));
    }
    out
}

/// The printed value of a query answer (module [`crate::output`]): `outside` when it does not overlap the
/// arena, else the answer's columns, canonical.
///
/// An answer without a name (no name buffer, or an anonymous VMA) that maps a script file (its device and
/// inode are one of `ids`, `(NAME, (major, minor, inode))`) prints as that file's maps line would, without
/// the name; one of another object with an inode (shmem, hugetlbfs) prints device `00:00` and inode `1`.
pub fn canonical_query(
    a: &QueryAnswer,
    arena: Arena,
    files: &[(String, String)],
    ids: &[(String, (u32, u32, u64))],
) -> String {
    if !arena.overlaps(a.vma_start, a.vma_end) {
        return "outside".into();
    }
    let mut l = MapsLine::anon(
        a.vma_start,
        a.vma_end,
        Perms {
            read: a.vma_flags & 1 != 0,
            write: a.vma_flags & 2 != 0,
            exec: a.vma_flags & 4 != 0,
            shared: a.vma_flags & 8 != 0,
        },
    );
    l.offset = a.vma_offset;
    l.dev_major = a.dev_major;
    l.dev_minor = a.dev_minor;
    l.inode = a.inode;
    l.name = a.name.as_deref().map(|n| MapsName::parse(n).unwrap_or(MapsName::Other(n.to_string())));
    canonical_line(&mut l, files, &mut Vec::new());
    if l.name.is_none() && l.inode != 0 {
        let id = (l.dev_major, l.dev_minor, l.inode);
        l.inode = ids.iter().position(|(_, i)| *i == id).map_or(1, |k| k as u64 + 1);
        l.dev_major = 0;
        l.dev_minor = 0;
    }
    let name = l.name.take();
    let cols = l.to_string();
    match name {
        Some(n) => format!("{} {} {n}", cols.trim_end(), a.vma_page_size),
        None => format!("{} {}", cols.trim_end(), a.vma_page_size),
    }
}

/// The script's files as `(NAME, path)`, for the canonicalisations.
fn files_of<T: Target + ?Sized>(script: &Script, target: &T) -> Vec<(String, String)> {
    script.file_names().into_iter().filter_map(|n| target.file_path(n).map(|p| (n.to_string(), p))).collect()
}

fn maps_entry<T: Target + ?Sized>(script: &Script, target: &mut T, arena: Arena) -> Entry {
    let files = files_of(script, target);
    Entry::Maps(canonical_maps(&target.maps(), arena, &files))
}

/// The answer as the caller's struct holds it after the call: the kernel copies back only the first
/// `min(size, 104)` bytes of `struct procmap_query` (`do_procmap_query`'s last `copy_to_user`), so a field
/// at or past `size` keeps the caller's zero and one that `size` cuts through only its low bytes.
fn as_returned(mut a: QueryAnswer, size: u64) -> QueryAnswer {
    let keep = usize::try_from(size).unwrap_or(usize::MAX);
    let cut = |v: u64, off: usize, width: usize| -> u64 {
        let bytes = keep.saturating_sub(off).min(width);
        if bytes >= 8 { v } else { v & ((1u64 << (8 * bytes)) - 1) }
    };
    a.vma_start = cut(a.vma_start, 24, 8);
    a.vma_end = cut(a.vma_end, 32, 8);
    a.vma_flags = cut(a.vma_flags, 40, 8);
    a.vma_page_size = cut(a.vma_page_size, 48, 8);
    a.vma_offset = cut(a.vma_offset, 56, 8);
    a.inode = cut(a.inode, 64, 8);
    a.dev_major = cut(u64::from(a.dev_major), 72, 4) as u32;
    a.dev_minor = cut(u64::from(a.dev_minor), 76, 4) as u32;
    a
}

/// The request of a `query` op: the name buffer's address is a placeholder the target replaces.
fn query_request(addr: u64, flags: u64, size: u64, name: u32) -> QueryRequest {
    QueryRequest {
        size,
        flags,
        addr,
        vma_name_size: name,
        vma_name_addr: if name == 0 { 0 } else { 0x1000 },
        ..QueryRequest::default()
    }
}

/// Runs `script` on `target` with the default arena. See [`run_in`].
pub fn run<T: Target + ?Sized>(script: &Script, target: &mut T) -> Output {
    run_in(script, target, Arena::default())
}

/// Runs every op of `script` on `target` in order and returns the output: one [`Entry::Call`] per call (a
/// `maps` op gives a maps block instead) and a final maps block.
pub fn run_in<T: Target + ?Sized>(script: &Script, target: &mut T, arena: Arena) -> Output {
    let mut out = Output::default();
    for l in &script.lines {
        let addr_value = Value::from_addr;
        let zero_value = Value::from_zero;
        let value = match &l.op {
            Op::File { name, size } => zero_value(target.file(name, *size)),
            Op::Ftruncate { name, size } => zero_value(target.ftruncate(name, *size)),
            Op::Mmap { addr, len, prot, flags, file } => {
                addr_value(target.mmap(*addr, *len, *prot, *flags, file.as_ref().map(|(fd, o)| (fd, *o))))
            }
            Op::Munmap { addr, len } => zero_value(target.munmap(*addr, *len)),
            Op::Mprotect { addr, len, prot } => zero_value(target.mprotect(*addr, *len, *prot)),
            Op::PkeyMprotect { addr, len, prot, key } => {
                zero_value(target.pkey_mprotect(*addr, *len, *prot, *key))
            }
            Op::Mremap { addr, old_len, new_len, flags, new_addr } => {
                addr_value(target.mremap(*addr, *old_len, *new_len, *flags, new_addr.unwrap_or(0)))
            }
            Op::Madvise { addr, len, advice } => zero_value(target.madvise(*addr, *len, *advice)),
            Op::Mlock { addr, len } => zero_value(target.mlock(*addr, *len)),
            Op::Mlock2 { addr, len, flags } => zero_value(target.mlock2(*addr, *len, *flags)),
            Op::Munlock { addr, len } => zero_value(target.munlock(*addr, *len)),
            Op::Mlockall { flags } => zero_value(target.mlockall(*flags)),
            Op::Munlockall => zero_value(target.munlockall()),
            Op::Mseal { addr, len, flags } => zero_value(target.mseal(*addr, *len, *flags)),
            Op::PkeyAlloc { flags, rights } => Value::from_num(target.pkey_alloc(*flags, *rights)),
            Op::PkeyFree { key } => zero_value(target.pkey_free(*key)),
            Op::Msync { addr, len, flags } => zero_value(target.msync(*addr, *len, *flags)),
            Op::Touch { addr, len, write } => match target.touch(*addr, *len, *write) {
                Ok(()) => Value::Zero,
                Err(page) => Value::Fault(page),
            },
            Op::Fill { addr, len, byte } => {
                target.fill(*addr, *len, *byte).map_or_else(AccessError::value, |()| Value::Zero)
            }
            Op::Check { addr, len } => target.check(*addr, *len).map_or_else(AccessError::value, Value::Hash),
            Op::Name { addr, len, name } => zero_value(target.name(*addr, *len, name.as_deref())),
            Op::Brk { addr } => addr_value(target.brk(*addr)),
            Op::Fork => zero_value(target.fork()),
            Op::Maps => {
                let e = maps_entry(script, target, arena);
                out.entries.push(e);
                continue;
            }
            Op::Smaps { addr } => {
                let files = files_of(script, target);
                let text = target.smaps();
                out.entries.push(Entry::Smaps(canonical_smaps(&text, arena, *addr, &files)));
                continue;
            }
            Op::Query { addr, flags, size, name } => {
                let covering = flags & vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA != 0;
                match target.query(&query_request(*addr, *flags, *size, *name)) {
                    Ok(a) => {
                        let a = as_returned(a, *size);
                        let files = files_of(script, target);
                        let ids: Vec<(String, (u32, u32, u64))> = script
                            .file_names()
                            .into_iter()
                            .filter_map(|n| target.file_id(n).map(|i| (n.to_string(), i)))
                            .collect();
                        let text = canonical_query(&a, arena, &files, &ids);
                        out.entries.push(Entry::Text { line: l.line, op: "query".into(), text });
                        continue;
                    }
                    Err(Errno::ENOENT) if covering => {
                        let text = "outside".to_string();
                        out.entries.push(Entry::Text { line: l.line, op: "query".into(), text });
                        continue;
                    }
                    Err(e) => Value::Err(e),
                }
            }
        };
        out.entries.push(Entry::Call { line: l.line, op: l.op.keyword().to_string(), value });
    }
    let e = maps_entry(script, target, arena);
    out.entries.push(e);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::ContentHash;

    /// A target that records calls and answers from a fixed rule, to check the driver's plumbing (not any
    /// memory semantics).
    #[derive(Default)]
    struct Recorder {
        calls: Vec<String>,
    }

    impl Target for Recorder {
        fn file(&mut self, name: &str, size: u64) -> Result<u64, Errno> {
            self.calls.push(format!("file {name} {size}"));
            Ok(0)
        }
        fn mmap(
            &mut self,
            addr: u64,
            len: u64,
            _: Prot,
            _: MapFlags,
            f: Option<(&Fd, u64)>,
        ) -> Result<u64, Errno> {
            self.calls.push(format!("mmap {addr:#x} {len:#x} {f:?}"));
            if len == 0 { Err(Errno::EINVAL) } else { Ok(addr) }
        }
        fn ftruncate(&mut self, name: &str, size: u64) -> Result<u64, Errno> {
            self.calls.push(format!("ftruncate {name} {size}"));
            if name == "a" { Ok(0) } else { Err(Errno::EBADF) }
        }
        fn pkey_mprotect(&mut self, addr: u64, _: u64, _: Prot, key: i32) -> Result<u64, Errno> {
            self.calls.push(format!("pkey_mprotect {addr:#x} {key}"));
            if key == -1 { Ok(0) } else { Err(Errno::EINVAL) }
        }
        fn mlock(&mut self, addr: u64, len: u64) -> Result<u64, Errno> {
            self.calls.push(format!("mlock {addr:#x} {len:#x}"));
            Ok(0)
        }
        fn mlock2(&mut self, _: u64, _: u64, flags: u32) -> Result<u64, Errno> {
            self.calls.push(format!("mlock2 {flags}"));
            if flags > 1 { Err(Errno::EINVAL) } else { Ok(0) }
        }
        fn munlock(&mut self, _: u64, _: u64) -> Result<u64, Errno> {
            Err(Errno::ENOMEM)
        }
        fn mlockall(&mut self, flags: u32) -> Result<u64, Errno> {
            self.calls.push(format!("mlockall {flags}"));
            Ok(0)
        }
        fn munlockall(&mut self) -> Result<u64, Errno> {
            self.calls.push("munlockall".into());
            Ok(0)
        }
        fn mseal(&mut self, _: u64, _: u64, flags: u64) -> Result<u64, Errno> {
            self.calls.push(format!("mseal {flags:#x}"));
            Err(Errno::EPERM)
        }
        fn pkey_alloc(&mut self, flags: u64, rights: u64) -> Result<u64, Errno> {
            self.calls.push(format!("pkey_alloc {flags} {rights}"));
            // An "address" of -EINVAL: the driver reads it as the errno.
            if rights == 0 { Ok(2) } else { Ok(0u64.wrapping_sub(22)) }
        }
        fn pkey_free(&mut self, key: i32) -> Result<u64, Errno> {
            self.calls.push(format!("pkey_free {key}"));
            Ok(0)
        }
        fn msync(&mut self, _: u64, _: u64, flags: u32) -> Result<u64, Errno> {
            self.calls.push(format!("msync {flags}"));
            Ok(0)
        }
        fn munmap(&mut self, _: u64, _: u64) -> Result<u64, Errno> {
            Ok(0)
        }
        fn mprotect(&mut self, _: u64, _: u64, _: Prot) -> Result<u64, Errno> {
            Err(Errno::ENOMEM)
        }
        fn mremap(&mut self, _: u64, _: u64, _: u64, _: MremapFlags, n: u64) -> Result<u64, Errno> {
            Ok(n)
        }
        fn madvise(&mut self, _: u64, _: u64, _: Advice) -> Result<u64, Errno> {
            Ok(0)
        }
        fn touch(&mut self, addr: u64, _: u64, _: bool) -> Result<(), u64> {
            Err(addr + 0x1000)
        }
        fn fill(&mut self, addr: u64, len: u64, byte: u8) -> Result<(), AccessError> {
            self.calls.push(format!("fill {addr:#x} {len:#x} {byte}"));
            match byte {
                0 => Err(AccessError::Errno(Errno::ENOSYS)),
                1 => Err(AccessError::Fault(addr & !0xfff)),
                _ => Ok(()),
            }
        }
        fn check(&mut self, addr: u64, len: u64) -> Result<u64, AccessError> {
            self.calls.push(format!("check {addr:#x} {len:#x}"));
            // The hash of `len` zero bytes, through the crate's one implementation.
            match len {
                1 => Err(AccessError::Fault(addr)),
                2 => Err(AccessError::Errno(Errno::ENOSYS)),
                _ => {
                    let mut h = ContentHash::new();
                    h.update_repeated(0, len);
                    Ok(h.value())
                }
            }
        }
        fn name(&mut self, _: u64, _: u64, _: Option<&str>) -> Result<u64, Errno> {
            Err(Errno::EINVAL)
        }
        fn brk(&mut self, _: u64) -> Result<u64, Errno> {
            Ok(0x5555_5555_0000)
        }
        fn fork(&mut self) -> Result<u64, Errno> {
            Ok(0)
        }
        fn maps(&mut self) -> String {
            concat!(
                "1fffffffe000-200000001000 rw-p 00000000 00:00 0 \n",
                "200000002000-200000003000 r--s 00001000 fe:00 4242                       /tmp/x/a\n",
                "7fff03607000-7fff03628000 rw-p 00000000 00:00 0                          [stack]\n",
            )
            .into()
        }
        fn smaps(&mut self) -> String {
            String::new()
        }
        fn query(&mut self, req: &QueryRequest) -> Result<QueryAnswer, Errno> {
            if req.addr == 0 { Err(Errno::ENOENT) } else { Err(Errno::EINVAL) }
        }
        fn file_path(&self, name: &str) -> Option<String> {
            (name == "a").then(|| "/tmp/x/a".to_string())
        }
        fn file_id(&self, name: &str) -> Option<(u32, u32, u64)> {
            (name == "a").then_some((8, 1, 4242))
        }
    }

    #[test]
    fn driver_prints_each_call_and_canonical_maps() {
        let s = Script::parse(
            "file a 8192\nmmap 0x200000002000 4096 r-- shared|fixed fd=a off=4096\nmprotect 0 0 ---\n\
             touch 0x200000000000 8192 w\nname 0x200000000000 4096 x\nbrk 0\nmaps\nmremap 1 2 3 fixed 0x4000\n",
        )
        .unwrap();
        let mut t = Recorder::default();
        let out = run(&s, &mut t);
        assert_eq!(t.calls[1], "mmap 0x200000002000 0x1000 Some((Name(\"a\"), 4096))");
        let text = out.render();
        let expect = "\
L1 file = 0
L2 mmap = 0x200000002000
L3 mprotect = -ENOMEM
L4 touch = -EFAULT 0x200000001000
L5 name = -EINVAL
L6 brk = 0x555555550000
MAPS
1fffffffe000-200000001000 rw-p 00000000 00:00 0 
200000002000-200000003000 r--s 00001000 00:00 1                          fd=a
END
L8 mremap = 0x4000
MAPS
1fffffffe000-200000001000 rw-p 00000000 00:00 0 
200000002000-200000003000 r--s 00001000 00:00 1                          fd=a
END
";
        assert_eq!(text, expect);
    }

    #[test]
    fn driver_passes_the_new_calls_and_prints_their_values() {
        let s = Script::parse(
            "file a 8192\nftruncate a 0x3000\nftruncate b 0\nmlock 0x200000000000 0x1000\nmlock2 0 1 onfault\n\
             mlock2 0 1 0x2\nmunlock 0 1\nmlockall current|future\nmunlockall\nmseal 0 1 0x5\n\
             pkey_alloc 0 0\npkey_alloc 0 disable_write\npkey_free -7\npkey_mprotect 0 1 r-- -1\n\
             pkey_mprotect 0 1 r-- 3\nmsync 0 1 sync\nmmap 0 4096 rw- private fd=-1 off=0\n\
             mmap 0x200000000000 4096 rw- private|anon fd=zz off=0x1000\n",
        )
        .unwrap();
        let mut t = Recorder::default();
        let out = run(&s, &mut t);
        let text = out.render();
        let calls: Vec<&str> = text.lines().take_while(|l| *l != "MAPS").collect();
        assert_eq!(
            calls,
            vec![
                "L1 file = 0",
                "L2 ftruncate = 0",
                "L3 ftruncate = -EBADF",
                "L4 mlock = 0",
                "L5 mlock2 = 0",
                "L6 mlock2 = -EINVAL",
                "L7 munlock = -ENOMEM",
                "L8 mlockall = 0",
                "L9 munlockall = 0",
                "L10 mseal = -EPERM",
                "L11 pkey_alloc = 2",
                "L12 pkey_alloc = -EINVAL",
                "L13 pkey_free = 0",
                "L14 pkey_mprotect = 0",
                "L15 pkey_mprotect = -EINVAL",
                "L16 msync = 0",
                "L17 mmap = 0x0",
                "L18 mmap = 0x200000000000",
            ]
        );
        assert_eq!(Output::parse(&text).unwrap(), out);
        assert!(t.calls.contains(&"mseal 0x5".to_string()));
        assert!(t.calls.contains(&"mlockall 3".to_string()));
        assert!(t.calls.contains(&"pkey_free -7".to_string()));
        assert!(t.calls.contains(&"msync 4".to_string()));
        assert!(t.calls.contains(&"mmap 0x0 0x1000 Some((MinusOne, 0))".to_string()));
        assert!(t.calls.contains(&"mmap 0x200000000000 0x1000 Some((Name(\"zz\"), 4096))".to_string()));
    }

    #[test]
    fn driver_prints_fill_and_check_results() {
        let s = Script::parse(
            "fill 0x200000000000 0x2000 0x5a\nfill 0x200000001234 0x10 1\nfill 0 0 0\ncheck 0x200000000000 0\n\
             check 0x200000000000 4096\ncheck 0x200000001000 1\ncheck 0 2\n",
        )
        .unwrap();
        let mut t = Recorder::default();
        let out = run(&s, &mut t);
        let text = out.render();
        let calls: Vec<&str> = text.lines().take_while(|l| *l != "MAPS").collect();
        assert_eq!(
            calls,
            vec![
                "L1 fill = 0",
                "L2 fill = -EFAULT 0x200000001000",
                "L3 fill = -ENOSYS",
                "L4 check = 0xcbf29ce484222325",
                "L5 check = 0xb93a0c83ce3b6325",
                "L6 check = -EFAULT 0x200000001000",
                "L7 check = -ENOSYS",
            ]
        );
        assert_eq!(t.calls[0], "fill 0x200000000000 0x2000 90");
        assert_eq!(Output::parse(&text).unwrap(), out);
    }

    #[test]
    fn observed_counts_every_call_and_changes_nothing() {
        let s = Script::parse(
            "file a 8192\nmmap 0x200000002000 4096 r-- shared|fixed fd=a off=4096\nmprotect 0 0 ---\n\
             touch 0x200000000000 8192 w\nname 0x200000000000 4096 x\nbrk 0\nmaps\nmremap 1 2 3 fixed 0x4000\n",
        )
        .unwrap();
        let plain = run(&s, &mut Recorder::default()).render();
        let mut seen = Vec::new();
        let mut t = Observed::new(Recorder::default(), |n| seen.push(n));
        let observed = run(&s, &mut t).render();
        assert_eq!(observed, plain, "the wrapper passes every call and answer through");
        let calls = t.calls();
        let inner = t.into_inner();
        // Eight lines, then the closing maps: every call the driver made was counted, in order, once.
        assert!(calls >= 9, "{calls}");
        assert_eq!(inner.calls[1], "mmap 0x200000002000 0x1000 Some((Name(\"a\"), 4096))");
        assert_eq!(seen, (1..=calls).collect::<Vec<_>>());
    }

    #[test]
    fn shared_anonymous_inodes_are_numbered_by_first_appearance() {
        let line = |start: u64, inode: u64| {
            let mut l = MapsLine::anon(
                start,
                start + 0x1000,
                vmspace_proc::Perms { read: true, write: true, exec: false, shared: true },
            );
            l.dev_minor = 1;
            l.inode = inode;
            l.name = Some(MapsName::Path { path: "/dev/zero".into(), deleted: true });
            l.render()
        };
        let base = Arena::default().base;
        let text = [line(base, 95), line(base + 0x1000, 80), line(base + 0x2000, 95)].concat();
        let got = canonical_maps(&text, Arena::default(), &[]);
        let inodes: Vec<u64> = got.iter().map(|l| l.parse::<MapsLine>().unwrap().inode).collect();
        assert_eq!(inodes, vec![1, 2, 1]);
        assert!(got[0].ends_with(" /dev/zero (deleted)"));
        assert!(got[0].contains(" 00:01 1 "));
    }

    #[test]
    fn hugetlb_objects_print_device_zero_and_their_order_of_appearance() {
        let line = |start: u64, minor: u32, inode: u64, path: &str| {
            let mut l = MapsLine::anon(
                start,
                start + 0x20_0000,
                vmspace_proc::Perms { read: true, write: true, exec: false, shared: false },
            );
            l.dev_minor = minor;
            l.inode = inode;
            l.name = Some(MapsName::Path { path: path.into(), deleted: true });
            l.render()
        };
        let base = Arena::default().base;
        let text = [
            line(base, 17, 767_928, "/anon_hugepage"),
            line(base + 0x20_0000, 1, 42, "/dev/zero"),
            line(base + 0x40_0000, 17, 767_931, "/anon_hugepage"),
            line(base + 0x60_0000, 17, 767_928, "/anon_hugepage"),
        ]
        .concat();
        let got = canonical_maps(&text, Arena::default(), &[]);
        let parsed: Vec<MapsLine> = got.iter().map(|l| l.parse().unwrap()).collect();
        let ids: Vec<(u32, u64)> = parsed.iter().map(|l| (l.dev_minor, l.inode)).collect();
        assert_eq!(ids, vec![(0, 1), (1, 1), (0, 2), (0, 1)]);
        assert!(got[0].contains(" 00:00 1 ") && got[0].ends_with(" /anon_hugepage (deleted)"), "{}", got[0]);
    }
}
