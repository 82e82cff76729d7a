//! Model test: page contents through the address space's calls, against a map of pages to bytes.
//!
//! A family of address spaces (a first process, its fork children, theirs) shares one memory and two files.
//! Each process maps, in a grid of 16 pages, private anonymous memory, shared anonymous memory, and private and
//! shared mappings of the files; it stores (`Mm::fill`, through the emulated MMU and the fault path), reads
//! (`Mm::read_chunks`), forks, exits, unmaps, mprotects, mremaps (moves, with and without `MREMAP_DONTUNMAP`)
//! and advises (`DONTNEED`, `FREE`, `REMOVE`, `DONTFORK`, `WIPEONFORK`).
//!
//! The oracle knows, for every mapped page of every process, what backs it: private anonymous bytes (copied by
//! fork: copy-on-write must make the copy indistinguishable from a value copy), a file page seen through a
//! private mapping (the file's current bytes until the process's first store copies it), or a page of a shared
//! object (a file or a shared anonymous object, the same for every process that maps it). A store goes page by
//! page and stops at the first page that is not mapped writable, as the engine's must; a read must return the
//! oracle's bytes or fail at the oracle's first unmapped page.
//!
//! After every operation every address space validates and the family's memory accounting is exact
//! (`Mm::check_memory`: every frame's mapcount and refcount against all entries and page-cache slots, nothing
//! leaked); at the end every page of every process is read back and compared.
#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use vmspace_mm::{Advice, MapFlags, Memory, MemoryConfig, Mm, MmConfig, MremapFlags, Prot, VmFile};

const P: u64 = 4096;
const GRID: u64 = 16;
const BASE: u64 = 0x4000_0000_0000;
const FILE_PAGES: u64 = 16;
const MAX_PROCS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Anon,
    SharedAnon,
    FilePrivate(usize),
    FileShared(usize),
}

#[derive(Clone, Debug)]
enum Op {
    Map { p: usize, first: u64, n: u64, kind: Kind, pgoff: u64 },
    Unmap { p: usize, first: u64, n: u64 },
    Fill { p: usize, addr: u64, len: u64, byte: u8 },
    Check { p: usize, addr: u64, len: u64 },
    Protect { p: usize, first: u64, n: u64, write: bool },
    Fork { p: usize },
    Exit { p: usize },
    Move { p: usize, first: u64, n: u64, to: u64, dontunmap: bool },
    Advise { p: usize, first: u64, n: u64, advice: u8 },
}

/// What backs one mapped page.
#[derive(Clone, Debug)]
enum Backing {
    /// Private anonymous memory (the zero page until written).
    Anon(Arc<Vec<u8>>),
    /// A file page seen through a private mapping: the file's bytes until `copy` is made by a store.
    FilePrivate { file: usize, index: u64, copy: Option<Arc<Vec<u8>>> },
    /// Page `index` of shared object `obj`.
    Shared { obj: usize, index: u64 },
}

#[derive(Clone, Debug)]
struct Page {
    backing: Backing,
    write: bool,
    dontfork: bool,
    wipeonfork: bool,
}

fn zero_page() -> Arc<Vec<u8>> {
    Arc::new(vec![0; P as usize])
}

/// The oracle: pages per process, the shared objects' bytes (the two files first, then shared anonymous
/// objects).
#[derive(Clone, Debug, Default)]
struct Model {
    procs: Vec<BTreeMap<u64, Page>>,
    objects: Vec<Vec<u8>>,
}

impl Model {
    fn bytes<'a>(&'a self, page: &'a Page) -> &'a [u8] {
        match &page.backing {
            Backing::Anon(b) => b,
            Backing::FilePrivate { copy: Some(c), .. } => c,
            Backing::FilePrivate { file, index, copy: None } => {
                &self.objects[*file][(*index * P) as usize..((*index + 1) * P) as usize]
            }
            Backing::Shared { obj, index } => {
                &self.objects[*obj][(*index * P) as usize..((*index + 1) * P) as usize]
            }
        }
    }

    fn store(&mut self, p: usize, page_addr: u64, off: usize, data: &[u8]) {
        let page = self.procs[p].get_mut(&page_addr).expect("mapped");
        match &mut page.backing {
            Backing::Anon(b) => Arc::make_mut(b)[off..off + data.len()].copy_from_slice(data),
            Backing::FilePrivate { copy: Some(c), .. } => {
                Arc::make_mut(c)[off..off + data.len()].copy_from_slice(data)
            }
            Backing::FilePrivate { file, index, copy } => {
                let s = (*index * P) as usize;
                let mut c = self.objects[*file][s..s + P as usize].to_vec();
                c[off..off + data.len()].copy_from_slice(data);
                *copy = Some(Arc::new(c));
            }
            Backing::Shared { obj, index } => {
                let s = (*index * P) as usize + off;
                self.objects[*obj][s..s + data.len()].copy_from_slice(data);
            }
        }
    }
}

struct World {
    mem: Arc<Memory>,
    files: Vec<Arc<VmFile>>,
    mms: Vec<Mm>,
    model: Model,
}

fn addr(page: u64) -> u64 {
    BASE + page * P
}

impl World {
    fn new() -> World {
        let mem = Memory::new(MemoryConfig::default());
        let files: Vec<Arc<VmFile>> =
            (0..2).map(|i| VmFile::regular(format!("/vmspace/f{i}"), i + 1, FILE_PAGES * P)).collect();
        let mm = Mm::with_memory(MmConfig::default(), mem.clone());
        let model =
            Model { procs: vec![BTreeMap::new()], objects: vec![vec![0; (FILE_PAGES * P) as usize]; 2] };
        World { mem, files, mms: vec![mm], model }
    }

    fn check_all(&self) {
        let family: Vec<&Mm> = self.mms.iter().collect();
        let files: Vec<&VmFile> = self.files.iter().map(|f| &**f).collect();
        Mm::check_memory(&family, &files).unwrap_or_else(|e| panic!("{e}"));
        assert!(Arc::ptr_eq(self.mms[0].memory(), &self.mem));
    }

    /// Reads `[a, a + len)` of process `p` and compares with the oracle.
    fn check(&self, p: usize, a: u64, len: u64) {
        let mut got = Vec::new();
        let r = self.mms[p].read_chunks(a, len, |b| got.extend_from_slice(b));
        let mut want = Vec::new();
        let mut fail = None;
        let mut x = a;
        while x < a + len {
            let pa = x & !(P - 1);
            let n = (pa + P).min(a + len) - x;
            match self.model.procs[p].get(&pa) {
                Some(page) => {
                    let off = (x - pa) as usize;
                    want.extend_from_slice(&self.model.bytes(page)[off..off + n as usize]);
                }
                None => {
                    fail = Some(x);
                    break;
                }
            }
            x += n;
        }
        match fail {
            None => assert_eq!(r, Ok(()), "read of {a:#x}+{len:#x} in process {p}"),
            Some(f) => assert_eq!(r.map_err(|e| e.addr), Err(f), "read of {a:#x}+{len:#x} in process {p}"),
        }
        assert!(got == want, "process {p}: bytes of {a:#x}+{len:#x} differ from the oracle's");
    }

    fn all_pages(&self, p: usize, first: u64, n: u64, f: impl Fn(&Page) -> bool) -> bool {
        (first..first + n).all(|i| self.model.procs[p].get(&addr(i)).is_some_and(&f))
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Map { p, first, n, kind, pgoff } => {
                let p = p % self.mms.len();
                let (flags, file) = match kind {
                    Kind::Anon => (MapFlags::PRIVATE | MapFlags::ANONYMOUS, None),
                    Kind::SharedAnon => (MapFlags::SHARED | MapFlags::ANONYMOUS, None),
                    Kind::FilePrivate(f) => (MapFlags::PRIVATE, Some(&self.files[f])),
                    Kind::FileShared(f) => (MapFlags::SHARED, Some(&self.files[f])),
                };
                let off = if file.is_some() { pgoff * P } else { 0 };
                let r = self.mms[p].mmap(addr(first), n * P, Prot::RW, flags | MapFlags::FIXED, file, off);
                assert_eq!(r, Ok(addr(first)));
                let obj = if kind == Kind::SharedAnon {
                    self.model.objects.push(vec![0; (n * P) as usize]);
                    self.model.objects.len() - 1
                } else {
                    0
                };
                for i in 0..n {
                    let backing = match kind {
                        Kind::Anon => Backing::Anon(zero_page()),
                        Kind::SharedAnon => Backing::Shared { obj, index: i },
                        Kind::FilePrivate(f) => {
                            Backing::FilePrivate { file: f, index: pgoff + i, copy: None }
                        }
                        Kind::FileShared(f) => Backing::Shared { obj: f, index: pgoff + i },
                    };
                    let page = Page { backing, write: true, dontfork: false, wipeonfork: false };
                    self.model.procs[p].insert(addr(first + i), page);
                }
            }
            Op::Unmap { p, first, n } => {
                let p = p % self.mms.len();
                assert_eq!(self.mms[p].munmap(addr(first), n * P), Ok(()));
                for i in first..first + n {
                    self.model.procs[p].remove(&addr(i));
                }
            }
            Op::Fill { p, addr: a, len, byte } => {
                let p = p % self.mms.len();
                let r = self.mms[p].fill(a, len, byte);
                let mut x = a;
                let mut fail = None;
                while x < a + len {
                    let pa = x & !(P - 1);
                    let n = (pa + P).min(a + len) - x;
                    if !self.model.procs[p].get(&pa).is_some_and(|pg| pg.write) {
                        fail = Some(x);
                        break;
                    }
                    self.model.store(p, pa, (x - pa) as usize, &vec![byte; n as usize]);
                    x += n;
                }
                match fail {
                    None => assert_eq!(r, Ok(()), "fill {a:#x}+{len:#x} in process {p}"),
                    Some(f) => {
                        assert_eq!(r.map_err(|e| e.addr), Err(f), "fill {a:#x}+{len:#x} in process {p}")
                    }
                }
            }
            Op::Check { p, addr: a, len } => self.check(p % self.mms.len(), a, len),
            Op::Protect { p, first, n, write } => {
                let p = p % self.mms.len();
                if !self.all_pages(p, first, n, |_| true) {
                    return;
                }
                let prot = if write { Prot::RW } else { Prot::READ };
                assert_eq!(self.mms[p].mprotect(addr(first), n * P, prot), Ok(()));
                for i in first..first + n {
                    self.model.procs[p].get_mut(&addr(i)).unwrap().write = write;
                }
            }
            Op::Fork { p } => {
                if self.mms.len() >= MAX_PROCS {
                    return;
                }
                let p = p % self.mms.len();
                let child = self.mms[p].fork().expect("fork");
                let pages = self.model.procs[p]
                    .iter()
                    .filter(|(_, pg)| !pg.dontfork)
                    .map(|(&a, pg)| {
                        let mut c = pg.clone();
                        if pg.wipeonfork {
                            c.backing = Backing::Anon(zero_page());
                        }
                        (a, c)
                    })
                    .collect();
                self.mms.push(child);
                self.model.procs.push(pages);
            }
            Op::Exit { p } => {
                if self.mms.len() < 2 {
                    return;
                }
                let p = p % self.mms.len();
                drop(self.mms.remove(p));
                self.model.procs.remove(p);
            }
            Op::Move { p, first, n, to, dontunmap } => {
                let p = p % self.mms.len();
                let (src, dst) = (addr(first), addr(to));
                // The source must lie in one VMA (else EFAULT) and the ranges must not overlap (EINVAL): those
                // are the differential gate's business, not this model's.
                let in_one = self.mms[p].vma_at(src).is_some_and(|v| v.end >= src + n * P);
                if !in_one || (first < to + n && to < first + n) {
                    return;
                }
                let mut flags = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                if dontunmap {
                    flags |= MremapFlags::DONTUNMAP;
                }
                assert_eq!(self.mms[p].mremap(src, n * P, n * P, flags, dst), Ok(dst));
                let moved: Vec<Page> =
                    (first..first + n).map(|i| self.model.procs[p][&addr(i)].clone()).collect();
                for i in 0..n {
                    let a = addr(first + i);
                    if dontunmap {
                        // The source stays mapped, empty: private memory refaults (anonymous as zeroes, a private
                        // file page as the file's bytes), shared memory as before.
                        let pg = self.model.procs[p].get_mut(&a).unwrap();
                        pg.backing = match &pg.backing {
                            Backing::Anon(_) => Backing::Anon(zero_page()),
                            Backing::FilePrivate { file, index, .. } => {
                                Backing::FilePrivate { file: *file, index: *index, copy: None }
                            }
                            b @ Backing::Shared { .. } => b.clone(),
                        };
                    } else {
                        self.model.procs[p].remove(&a);
                    }
                }
                for (i, pg) in moved.into_iter().enumerate() {
                    self.model.procs[p].insert(addr(to + i as u64), pg);
                }
                // The contents moved; the source is gone or (DONTUNMAP) empty.
                self.check(p, dst, n * P);
                self.check(p, src, n * P);
            }
            Op::Advise { p, first, n, advice } => {
                let p = p % self.mms.len();
                let mapped: Vec<u64> =
                    (first..first + n).filter(|&i| self.model.procs[p].contains_key(&addr(i))).collect();
                // madvise skips holes and answers ENOMEM at the end (DONTNEED, DONTFORK below).
                let holes = if mapped.len() as u64 == n { Ok(()) } else { Err(vmspace_mm::Errno::ENOMEM) };
                if mapped.is_empty() {
                    return;
                }
                let private_anon = |pg: &Page| matches!(pg.backing, Backing::Anon(_));
                let range = first..first + n;
                let (a, len) = (addr(first), n * P);
                match advice % 5 {
                    0 => {
                        assert_eq!(self.mms[p].madvise(a, len, Advice::DONTNEED), holes);
                        for i in mapped {
                            let pg = self.model.procs[p].get_mut(&addr(i)).unwrap();
                            match &mut pg.backing {
                                Backing::Anon(b) => *b = zero_page(),
                                Backing::FilePrivate { copy, .. } => *copy = None,
                                Backing::Shared { .. } => {}
                            }
                        }
                        self.check(p, a, len);
                    }
                    _ if holes.is_err() => {}
                    1 => {
                        // Lazily freed, but no memory pressure: the contents stay.
                        let r = self.mms[p].madvise(a, len, Advice::FREE);
                        if self.all_pages(p, first, n, private_anon) {
                            assert_eq!(r, Ok(()));
                        }
                    }
                    2 => {
                        // A hole punched in the shared object: every view of it reads zeroes there (private
                        // copies made before stay).
                        if !self.all_pages(p, first, n, |pg| matches!(pg.backing, Backing::Shared { .. })) {
                            return;
                        }
                        assert_eq!(self.mms[p].madvise(a, len, Advice::REMOVE), Ok(()));
                        for i in range {
                            if let Backing::Shared { obj, index } = self.model.procs[p][&addr(i)].backing {
                                let s = (index * P) as usize;
                                self.model.objects[obj][s..s + P as usize].fill(0);
                            }
                        }
                    }
                    3 => {
                        assert_eq!(self.mms[p].madvise(a, len, Advice::DONTFORK), holes);
                        for i in mapped {
                            self.model.procs[p].get_mut(&addr(i)).unwrap().dontfork = true;
                        }
                    }
                    _ => {
                        if !self.all_pages(p, first, n, private_anon) {
                            return;
                        }
                        assert_eq!(self.mms[p].madvise(a, len, Advice::WIPEONFORK), Ok(()));
                        for i in range {
                            self.model.procs[p].get_mut(&addr(i)).unwrap().wipeonfork = true;
                        }
                    }
                }
            }
        }
    }
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    (0..GRID).prop_flat_map(|first| (Just(first), 1..=(GRID - first).min(6)))
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..MAX_PROCS;
    let kind = prop_oneof![
        Just(Kind::Anon),
        Just(Kind::SharedAnon),
        (0..2usize).prop_map(Kind::FilePrivate),
        (0..2usize).prop_map(Kind::FileShared),
    ];
    let bytes = (0..GRID * P, 1..4 * P).prop_map(|(a, l)| (BASE + a, l.min(GRID * P - a)));
    prop_oneof![
        3 => (p.clone(), range(), kind, 0..FILE_PAGES).prop_map(|(p, (first, n), kind, off)| {
            Op::Map { p, first, n, kind, pgoff: off.min(FILE_PAGES - n) }
        }),
        1 => (p.clone(), range()).prop_map(|(p, (first, n))| Op::Unmap { p, first, n }),
        5 => (p.clone(), bytes.clone(), any::<u8>()).prop_map(|(p, (addr, len), byte)| Op::Fill { p, addr, len, byte }),
        4 => (p.clone(), bytes).prop_map(|(p, (addr, len))| Op::Check { p, addr, len }),
        1 => (p.clone(), range(), any::<bool>()).prop_map(|(p, (first, n), write)| Op::Protect { p, first, n, write }),
        2 => p.clone().prop_map(|p| Op::Fork { p }),
        1 => p.clone().prop_map(|p| Op::Exit { p }),
        2 => (p.clone(), range(), 0..GRID, any::<bool>()).prop_map(|(p, (first, n), to, dontunmap)| {
            Op::Move { p, first, n, to: to.min(GRID - n), dontunmap }
        }),
        2 => (p, range(), any::<u8>()).prop_map(|(p, (first, n), advice)| Op::Advise { p, first, n, advice }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn page_contents_follow_the_oracle(ops in proptest::collection::vec(op(), 1..64)) {
        let mut w = World::new();
        // The grid starts mapped: four regions of four pages, one of each kind.
        let layout = [Kind::Anon, Kind::FilePrivate(0), Kind::FileShared(0), Kind::SharedAnon];
        for (i, kind) in layout.into_iter().enumerate() {
            w.apply(&Op::Map { p: 0, first: 4 * i as u64, n: 4, kind, pgoff: 2 * i as u64 });
        }
        for op in &ops {
            w.apply(op);
            w.check_all();
        }
        for p in 0..w.mms.len() {
            w.check(p, BASE, GRID * P);
        }
        w.check_all();
    }
}
