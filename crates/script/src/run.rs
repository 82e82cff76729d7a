//! Running a script: the [`Target`] trait that a runner implements (the engine in `vmspace_replay`, the live
//! kernel in `vmspace_linux::replay`), and [`run`], which drives any target through a script and builds the
//! canonical [`Output`].
//!
//! The driver owns everything that must be identical on both sides: the order of calls, which value each call
//! prints, when maps blocks are taken, which maps lines are kept (those overlapping the arena) and how file
//! mappings are canonicalised. A target only performs calls and reports raw results.

use crate::Errno;
use vmspace_abi::{Advice, MapFlags, MremapFlags, Prot};

use crate::ast::{Op, Script};
use crate::output::{Arena, Entry, Output, Value};
use vmspace_proc::{MapsLine, MapsName};

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

    /// `mmap(addr, len, prot, flags, fd, off)`. `file` is `Some((NAME, off))` for a file mapping (`flags`
    /// then lacks `anon`), `None` for an anonymous one. Returns the mapped address. Addresses the target picks
    /// itself (no `fixed`, hint refused) may lie anywhere; the comparison treats two results outside the arena
    /// as equal.
    fn mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
        file: Option<(&str, u64)>,
    ) -> Result<u64, Errno>;

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

    /// `touch ADDR LEN r|w`: access one byte in every page of `[addr & PAGE_MASK, addr + len)` in address
    /// order with the rules of get_user_pages without FOLL_FORCE (what `process_vm_readv`/`writev` use):
    /// a write needs VM_WRITE, a read needs VM_READ (so unlike an x86 CPU read, a read of a `-w-` page
    /// fails), an unmapped page or a file page beyond the end of the file fails; faults have their usual side
    /// effects (a write fault on a private VMA prepares its anon_vma). Returns `Ok(())` when every page was
    /// accessed, or `Err(page)` with the page-aligned address of the first page that could not be (pages
    /// before it have been accessed, with their faults' side effects; none after it). `len == 0` touches
    /// nothing. Never kills the process (no SIGSEGV/SIGBUS).
    fn touch(&mut self, addr: u64, len: u64, write: bool) -> Result<(), u64>;

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
        file: Option<(&str, u64)>,
    ) -> Result<u64, Errno> {
        self.count().mmap(addr, len, prot, flags, file)
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
    fn touch(&mut self, addr: u64, len: u64, write: bool) -> Result<(), u64> {
        self.count().touch(addr, len, write)
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
    fn file_path(&self, name: &str) -> Option<String> {
        self.inner.file_path(name)
    }
}

/// Keeps the maps lines of `text` that overlap `arena`, canonicalising mappings of script files and the
/// inode numbers of shared anonymous mappings (see [`crate::output`]): `files` lists `(NAME, path)` in
/// declaration order. A line that does not parse is kept verbatim (it will show up in a comparison).
pub fn canonical_maps(text: &str, arena: Arena, files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    // Inodes of shared anonymous (shmem) objects seen in this block, in order of first appearance.
    let mut shmem_inodes: Vec<u64> = Vec::new();
    for raw in text.lines() {
        let Ok(mut l) = raw.parse::<MapsLine>() else {
            out.push(raw.to_string());
            continue;
        };
        if !arena.overlaps(l.start, l.end) {
            continue;
        }
        if let Some(MapsName::Path { path, deleted }) = &l.name
            && let Some(idx) = files.iter().position(|(_, p)| p == path)
        {
            let suffix = if *deleted { " (deleted)" } else { "" };
            l.name = Some(MapsName::Other(format!("fd={}{suffix}", files[idx].0)));
            l.dev_major = 0;
            l.dev_minor = 0;
            l.inode = idx as u64 + 1;
        } else if let Some(MapsName::Path { path, deleted: true }) = &l.name
            && path == "/dev/zero"
        {
            let k = match shmem_inodes.iter().position(|&i| i == l.inode) {
                Some(k) => k,
                None => {
                    shmem_inodes.push(l.inode);
                    shmem_inodes.len() - 1
                }
            };
            l.inode = k as u64 + 1;
        }
        out.push(l.to_string());
    }
    out
}

fn maps_entry<T: Target + ?Sized>(script: &Script, target: &mut T, arena: Arena) -> Entry {
    let files: Vec<(String, String)> = script
        .file_names()
        .into_iter()
        .filter_map(|n| target.file_path(n).map(|p| (n.to_string(), p)))
        .collect();
    Entry::Maps(canonical_maps(&target.maps(), arena, &files))
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
        let addr_value = |r: Result<u64, Errno>| r.map_or_else(Value::Err, Value::Addr);
        let zero_value = |r: Result<u64, Errno>| r.map_or_else(Value::Err, |_| Value::Zero);
        let value = match &l.op {
            Op::File { name, size } => zero_value(target.file(name, *size)),
            Op::Mmap { addr, len, prot, flags, file } => addr_value(target.mmap(
                *addr,
                *len,
                *prot,
                *flags,
                file.as_ref().map(|(n, o)| (n.as_str(), *o)),
            )),
            Op::Munmap { addr, len } => zero_value(target.munmap(*addr, *len)),
            Op::Mprotect { addr, len, prot } => zero_value(target.mprotect(*addr, *len, *prot)),
            Op::Mremap { addr, old_len, new_len, flags, new_addr } => {
                addr_value(target.mremap(*addr, *old_len, *new_len, *flags, new_addr.unwrap_or(0)))
            }
            Op::Madvise { addr, len, advice } => zero_value(target.madvise(*addr, *len, *advice)),
            Op::Touch { addr, len, write } => match target.touch(*addr, *len, *write) {
                Ok(()) => Value::Zero,
                Err(page) => Value::Fault(page),
            },
            Op::Name { addr, len, name } => zero_value(target.name(*addr, *len, name.as_deref())),
            Op::Brk { addr } => addr_value(target.brk(*addr)),
            Op::Fork => zero_value(target.fork()),
            Op::Maps => {
                let e = maps_entry(script, target, arena);
                out.entries.push(e);
                continue;
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
            f: Option<(&str, u64)>,
        ) -> Result<u64, Errno> {
            self.calls.push(format!("mmap {addr:#x} {len:#x} {f:?}"));
            if len == 0 { Err(Errno::EINVAL) } else { Ok(addr) }
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
        fn file_path(&self, name: &str) -> Option<String> {
            (name == "a").then(|| "/tmp/x/a".to_string())
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
        assert_eq!(t.calls[1], "mmap 0x200000002000 0x1000 Some((\"a\", 4096))");
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
        assert_eq!(inner.calls[1], "mmap 0x200000002000 0x1000 Some((\"a\", 4096))");
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
}
