//! Running a script: the [`Target`] trait that a runner implements (the engine in `vmspace_replay`, the live
//! kernel in `vmspace_linux::replay`), and [`run`], which drives any target through a script and builds the
//! canonical [`Output`].
//!
//! The driver owns everything that must be identical on both sides: the order of calls, which value each call
//! prints, when maps blocks are taken, which maps lines are kept (those overlapping the arena) and how file
//! mappings are canonicalised. A target only performs calls and reports raw results.
//!
//! A call reaches a target as the parsed [`Op`] itself ([`Target::apply`]): a script line, a generated call
//! and any other source of calls (a system call decoded from a traced process) are the same value, printed
//! back as a script line by its `Display`, and each target has one place that turns it into its own call.

use crate::Errno;

use crate::ast::{Op, Script};
use crate::output::{Arena, Entry, Output, Value};
use vmspace_proc::{MapsLine, MapsName, Perms, QueryAnswer, QueryRequest};

/// Why a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallError {
    /// The system call's errno; also a target that cannot perform the op at all (a target without page
    /// contents answers `fill` and `check` with ENOSYS). Prints `-E<NAME>`.
    Errno(Errno),
    /// A memory access (`touch`, `fill`, `check`) could not access the page at this (page-aligned) address:
    /// the pages before it were accessed, nothing at or after it was. Prints `-EFAULT <page>`.
    Fault(u64),
}

impl From<Errno> for CallError {
    fn from(e: Errno) -> Self {
        CallError::Errno(e)
    }
}

/// What a call returned: its return value, or why it failed. The value is the mapped address of `mmap` and
/// `mremap`, the resulting break of `brk`, the key of `pkey_alloc` and the content hash of `check`; the other
/// calls print `0` on success whatever it is ([`value_of`]).
pub type Outcome = Result<u64, CallError>;

/// The printed value of `op`'s outcome (module [`crate::output`]): an address for `mmap`, `mremap` and `brk`
/// (one in -4095..=-1 is that errno, as the kernel's ABI defines), the key of `pkey_alloc` in decimal, the hash
/// of `check`, else `0`.
pub fn value_of(op: &Op, r: Outcome) -> Value {
    match r {
        Err(CallError::Errno(e)) => Value::Err(e),
        Err(CallError::Fault(page)) => Value::Fault(page),
        Ok(v) => match op {
            Op::Mmap { .. } | Op::Mremap { .. } | Op::Brk { .. } => Value::from_addr(Ok(v)),
            Op::PkeyAlloc { .. } => Value::from_num(Ok(v)),
            Op::Check { .. } => Value::Hash(v),
            _ => Value::Zero,
        },
    }
}

/// A system that executes op-script calls: [`Target::apply`] performs one call, given as the parsed [`Op`]; the
/// other methods observe the address space and the script's files.
///
/// All addresses, lengths and flags reach the target exactly as the op holds them (no rounding or validation
/// by the driver): rejecting unaligned addresses, zero or overflowing lengths, unknown flags etc. is the
/// target's job, with the kernel's errno.
pub trait Target {
    /// Performs `op` and returns what the Linux call would (module [`crate::ast`] describes each op): the value
    /// on success ([`Outcome`]), the errno on failure, leaving the address space unchanged when it fails (but
    /// where Linux itself makes partial progress). Beyond the system calls with the op's values:
    ///
    /// * `file NAME SIZE` creates a backing file of SIZE bytes (contents zero) that stays open and linked until
    ///   the target is dropped; an error (EFBIG, ENOSPC) is the line's result and the file is then not kept.
    ///   The parser guarantees each NAME is declared once.
    /// * `fd=NAME` (mmap) and `ftruncate NAME` pass the descriptor of the file NAME if this target created it
    ///   and holds it, else a descriptor that is not open (EBADF); `fd=-1` passes -1; an mmap without `fd=`
    ///   passes fd -1 and offset 0, with `anon` or without (EBADF then: the kernel checks the offset first). A `mremap` without NEWADDR passes 0.
    /// * `touch`, `fill` and `check` are user-mode CPU accesses page by page in address order, as an x86-64 CPU
    ///   without protection keys makes them (the end of the range saturating at 2^64; the format reference,
    ///   `crate::ast`, "Memory accesses"): a write needs VM_WRITE (`touch w` keeps the byte's value), a read
    ///   any of VM_READ, VM_WRITE, VM_EXEC; a fault just below a VM_GROWSDOWN VMA grows it before the access is
    ///   checked; an unmapped page, a guard region (SIGSEGV) or a file page beyond the end of the file
    ///   (SIGBUS) fails with [`CallError::Fault`] and that page, after the pages before it were accessed with
    ///   their faults' side effects. `check` returns the content hash ([`crate::hash`]) of the bytes read. A
    ///   target never allocates per byte of the length and never dies of the access.
    /// * `name` is `PR_SET_VMA_ANON_NAME` (EINVAL on a kernel or engine config without anonymous VMA names);
    ///   `brk` never fails with an errno (a refused request returns the old break).
    /// * `fork` continues in the child, whose address space is the parent's copy per the fork rules; the parent
    ///   does nothing more. Returns 0 (the child's view).
    ///
    /// `maps`, `smaps` and `query` are not calls: the driver reads them through [`Target::maps`],
    /// [`Target::smaps`] and [`Target::query`], and a target answers them here with ENOSYS.
    fn apply(&mut self, op: &Op) -> Outcome;

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

/// A [`Target`] that passes every call and read on to `inner` after telling `on_call` how many it has passed
/// on so far, this one included: how a runner shows the progress of a long script, or stops it. `file_id` and
/// `file_path` are queries, not calls, and are not counted.
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
    fn apply(&mut self, op: &Op) -> Outcome {
        self.count().apply(op)
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
        } else if let Some(path) = match &l.name {
            Some(MapsName::Path { path, deleted: true })
                if path == "/dev/zero" || path == "/anon_hugepage" =>
            {
                Some(path.as_str())
            }
            // A named part of a shmem object (`PR_SET_VMA_ANON_NAME` on a shared anonymous mapping, with
            // `CONFIG_ANON_VMA_NAME`) shows the object's inode too: it is numbered among the `/dev/zero`
            // objects, so that it shares the number of its object's unnamed parts.
            Some(MapsName::AnonShmem(_)) => Some("/dev/zero"),
            _ => None,
        } {
            let key = (path.to_string(), l.dev_major, l.dev_minor, l.inode);
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
        let value = match &l.op {
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
            op => value_of(op, target.apply(op)),
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
        calls: Vec<Op>,
    }

    impl Target for Recorder {
        fn apply(&mut self, op: &Op) -> Outcome {
            self.calls.push(op.clone());
            let fail = |e: Errno| Err(CallError::Errno(e));
            match *op {
                Op::Mmap { len: 0, .. } | Op::Name { .. } => fail(Errno::EINVAL),
                Op::Mmap { addr, .. } => Ok(addr),
                Op::Ftruncate { ref name, .. } if name != "a" => fail(Errno::EBADF),
                Op::PkeyMprotect { key, .. } if key != -1 => fail(Errno::EINVAL),
                Op::Mlock2 { flags, .. } if flags > 1 => fail(Errno::EINVAL),
                Op::Munlock { .. } | Op::Mprotect { .. } => fail(Errno::ENOMEM),
                Op::Mseal { .. } => fail(Errno::EPERM),
                // An "address" of -EINVAL: the driver reads it as the errno.
                Op::PkeyAlloc { rights, .. } => Ok(if rights == 0 { 2 } else { 0u64.wrapping_sub(22) }),
                Op::Mremap { new_addr, .. } => Ok(new_addr.unwrap_or(0)),
                Op::Touch { addr, .. } => Err(CallError::Fault(addr + 0x1000)),
                Op::Fill { byte: 0, .. } => fail(Errno::ENOSYS),
                Op::Fill { addr, byte: 1, .. } => Err(CallError::Fault(addr & !0xfff)),
                Op::Check { addr, len: 1 } => Err(CallError::Fault(addr)),
                Op::Check { len: 2, .. } => fail(Errno::ENOSYS),
                Op::Check { len, .. } => {
                    // The hash of `len` zero bytes, through the crate's one implementation.
                    let mut h = ContentHash::new();
                    h.update_repeated(0, len);
                    Ok(h.value())
                }
                Op::Brk { .. } => Ok(0x5555_5555_0000),
                _ => Ok(0),
            }
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

    /// The ops of `s` that are calls (not the readers `maps`, `smaps`, `query`).
    fn calls_of(s: &Script) -> Vec<Op> {
        let reader = |op: &Op| matches!(op, Op::Maps | Op::Smaps { .. } | Op::Query { .. });
        s.lines.iter().map(|l| l.op.clone()).filter(|op| !reader(op)).collect()
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
        assert_eq!(t.calls, calls_of(&s), "the target sees every call as the script's op, in order");
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
        assert_eq!(t.calls, calls_of(&s));
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
        assert_eq!(t.calls, calls_of(&s));
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
        assert_eq!(inner.calls, calls_of(&s));
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
    fn named_shmem_parts_share_their_objects_number() {
        let line = |start: u64, inode: u64, name: Option<&str>| {
            let mut l = MapsLine::anon(
                start,
                start + 0x1000,
                vmspace_proc::Perms { read: true, write: true, exec: false, shared: true },
            );
            l.dev_minor = 1;
            l.inode = inode;
            l.name = Some(match name {
                Some(n) => MapsName::AnonShmem(n.into()),
                None => MapsName::Path { path: "/dev/zero".into(), deleted: true },
            });
            l.render()
        };
        let base = Arena::default().base;
        // Object 7013 (unnamed, then named), object 7020 (named only), object 7013 again (unnamed).
        let text = [
            line(base, 7013, None),
            line(base + 0x1000, 7013, Some("a")),
            line(base + 0x2000, 7020, Some("a")),
            line(base + 0x3000, 7013, None),
        ]
        .concat();
        let got = canonical_maps(&text, Arena::default(), &[]);
        let inodes: Vec<u64> = got.iter().map(|l| l.parse::<MapsLine>().unwrap().inode).collect();
        assert_eq!(inodes, vec![1, 1, 2, 1]);
        assert!(got[1].ends_with(" [anon_shmem:a]"), "{}", got[1]);
        assert!(got[1].contains(" 00:01 1 "), "{}", got[1]);
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
