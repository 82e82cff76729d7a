//! Model test: page contents against a simple oracle across faults, fork (`copy_page_range`), zap, mremap
//! (`move_page_tables`, with and without unmapping the old range), mprotect, `MADV_FREE`, truncation and exits.
//!
//! A few processes share one file. Each maps three VMAs: a private anonymous region of 1,024 pages (two PTE
//! tables, so moves between 2 MiB-aligned bases relink whole tables and moves to the unaligned base go entry by
//! entry), a private mapping of the file and a shared mapping of it (16 pages each). The oracle is a map per
//! process of anonymous pages and of private copies of file pages, and the file's pages: a read must return
//! the oracle's word, a write sets it. After every operation every page table validates and the whole memory's
//! accounting is exact (`common::check_memory`: every frame's mapcount and refcount equal its entries and cache
//! slot, nothing leaks); at the end everything is freed.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use vmspace_pgtable::{
    ChangeProt, CopyVma, FaultVma, MappingId, Memory, MemoryConfig, MoveFlags, PAGE_SIZE, PageCache,
    PageProt, PageTable, ZapDetails, vma_needs_copy,
};

use common::{RW, SHARED_RW, check_memory, read_u64, write};

const PG: u64 = PAGE_SIZE;
const ANON_PAGES: u64 = 1024;
const FILE_PAGES: u64 = 16;
const ANON_BASES: [u64; 3] = [0x1000_0000, 0x4000_0000, 0x6000_0000 + 3 * PG];
const FPRIV: u64 = 0x2000_0000;
const FSHARED: u64 = 0x3000_0000;

#[derive(Clone, Copy, Debug)]
enum Region {
    Anon,
    FilePrivate,
    FileShared,
}

#[derive(Clone, Debug)]
enum Op {
    Write { p: usize, r: Region, page: u64, v: u64 },
    Read { p: usize, r: Region, page: u64 },
    Fork { p: usize },
    Zap { p: usize, r: Region, first: u64, n: u64 },
    Move { p: usize, to: usize, unmap_old: bool },
    Exit { p: usize },
    Truncate { pages: u64 },
    Protect { p: usize },
    Free { p: usize, first: u64, n: u64 },
}

struct Proc {
    pt: Arc<PageTable>,
    anon_base: u64,
    anon_vma: [bool; 2],
    anon: BTreeMap<u64, u64>,
    cow: BTreeMap<u64, u64>,
    ids: [MappingId; 2],
    /// Bases of the empty anonymous VMAs that `MREMAP_DONTUNMAP` moves left behind.
    ghosts: Vec<u64>,
}

impl Proc {
    /// munmap of the anonymous-sized VMA at `base`: zap it, then free its tables between its neighbours.
    fn munmap_anon(&self, base: u64) {
        let len = ANON_PAGES * PG;
        self.pt.zap_range(base, base + len, &ZapDetails::UNMAP);
        let mut bounds = vec![(FPRIV, FPRIV + FILE_PAGES * PG), (FSHARED, FSHARED + FILE_PAGES * PG)];
        bounds.push((self.anon_base, self.anon_base + len));
        bounds.extend(self.ghosts.iter().map(|&g| (g, g + len)));
        bounds.retain(|b| b.0 != base);
        let floor = bounds.iter().filter(|b| b.1 <= base).map(|b| b.1).max().unwrap_or(0);
        let ceiling = bounds.iter().filter(|b| b.0 >= base + len).map(|b| b.0).min().unwrap_or(0);
        self.pt.free_pgd_range(base, base + len, floor, ceiling);
    }
}

struct World {
    mem: Arc<Memory>,
    file: PageCache,
    words: [u64; FILE_PAGES as usize],
    procs: Vec<Proc>,
}

fn page_strategy(r: Region) -> BoxedStrategy<u64> {
    match r {
        Region::Anon => prop_oneof![0..4u64, 510..514u64, 1020..1024u64].boxed(),
        _ => (0..FILE_PAGES).boxed(),
    }
}

fn region() -> impl Strategy<Value = Region> {
    prop_oneof![Just(Region::Anon), Just(Region::FilePrivate), Just(Region::FileShared)]
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..4usize;
    prop_oneof![
        6 => (p.clone(), region()).prop_flat_map(|(p, r)| (Just(p), Just(r), page_strategy(r), 1..u64::MAX))
            .prop_map(|(p, r, page, v)| Op::Write { p, r, page, v }),
        3 => (p.clone(), region()).prop_flat_map(|(p, r)| (Just(p), Just(r), page_strategy(r)))
            .prop_map(|(p, r, page)| Op::Read { p, r, page }),
        2 => p.clone().prop_map(|p| Op::Fork { p }),
        2 => (p.clone(), region()).prop_flat_map(|(p, r)| (Just(p), Just(r), page_strategy(r), 1..600u64))
            .prop_map(|(p, r, first, n)| Op::Zap { p, r, first, n }),
        2 => (p.clone(), 0..3usize, any::<bool>()).prop_map(|(p, to, unmap_old)| Op::Move { p, to, unmap_old }),
        1 => p.clone().prop_map(|p| Op::Exit { p }),
        1 => (0..FILE_PAGES).prop_map(|pages| Op::Truncate { pages }),
        1 => p.clone().prop_map(|p| Op::Protect { p }),
        1 => (p, 0..1024u64, 1..600u64).prop_map(|(p, first, n)| Op::Free { p, first, n }),
    ]
}

impl World {
    fn new() -> World {
        let mem = Memory::new(MemoryConfig::default());
        let file = PageCache::new(&mem, FILE_PAGES * PG, false);
        let mut w = World { mem, file, words: [0; FILE_PAGES as usize], procs: Vec::new() };
        let pt = Arc::new(PageTable::new(&w.mem).unwrap());
        let ids = w.register(&pt);
        w.procs.push(Proc {
            pt,
            anon_base: ANON_BASES[0],
            anon_vma: [false; 2],
            anon: BTreeMap::new(),
            cow: BTreeMap::new(),
            ids,
            ghosts: Vec::new(),
        });
        w
    }

    fn register(&self, pt: &Arc<PageTable>) -> [MappingId; 2] {
        use vmspace_pgtable::FileMapping;
        let m = |start| FileMapping {
            pt: pt.clone(),
            start,
            end: start + FILE_PAGES * PG,
            pgoff: 0,
            recency: true,
        };
        [self.file.i_mmap_insert(m(FPRIV)), self.file.i_mmap_insert(m(FSHARED))]
    }

    fn vma(&self, p: usize, r: Region) -> FaultVma<'_> {
        let pr = &self.procs[p];
        match r {
            Region::Anon => {
                let mut v = FaultVma::anonymous(pr.anon_base, pr.anon_base + ANON_PAGES * PG, RW);
                v.anon_vma = pr.anon_vma[0];
                v
            }
            Region::FilePrivate => {
                let mut v = FaultVma::file(FPRIV, FPRIV + FILE_PAGES * PG, 0, RW, &self.file, false);
                v.anon_vma = pr.anon_vma[1];
                v
            }
            Region::FileShared => {
                FaultVma::file(FSHARED, FSHARED + FILE_PAGES * PG, 0, SHARED_RW, &self.file, true)
            }
        }
    }

    fn addr(&self, p: usize, r: Region, page: u64) -> u64 {
        match r {
            Region::Anon => self.procs[p].anon_base + page * PG,
            Region::FilePrivate => FPRIV + page * PG,
            Region::FileShared => FSHARED + page * PG,
        }
    }

    fn expected(&self, p: usize, r: Region, page: u64) -> u64 {
        let pr = &self.procs[p];
        match r {
            Region::Anon => pr.anon.get(&page).copied().unwrap_or(0),
            Region::FilePrivate => pr.cow.get(&page).copied().unwrap_or(self.words[page as usize]),
            Region::FileShared => self.words[page as usize],
        }
    }

    fn remember_anon_vma(&mut self, p: usize, r: Region, prepared: bool) {
        match r {
            Region::Anon => self.procs[p].anon_vma[0] |= prepared,
            Region::FilePrivate => self.procs[p].anon_vma[1] |= prepared,
            Region::FileShared => {}
        }
    }

    fn apply(&mut self, op: &Op) {
        let n = self.procs.len();
        match *op {
            Op::Write { p, r, page, v } => {
                let p = p % n;
                let mut vma = self.vma(p, r);
                let a = self.addr(p, r, page);
                write(&self.procs[p].pt, &mut vma, a, &v.to_le_bytes()).unwrap();
                let prepared = vma.anon_vma;
                self.remember_anon_vma(p, r, prepared);
                match r {
                    Region::Anon => {
                        self.procs[p].anon.insert(page, v);
                    }
                    Region::FilePrivate => {
                        self.procs[p].cow.insert(page, v);
                    }
                    Region::FileShared => self.words[page as usize] = v,
                }
            }
            Op::Read { p, r, page } => {
                let p = p % n;
                let mut vma = self.vma(p, r);
                let got = read_u64(&self.procs[p].pt, &mut vma, self.addr(p, r, page)).unwrap();
                assert_eq!(got, self.expected(p, r, page), "{op:?}");
            }
            Op::Fork { p } => {
                if n >= 4 {
                    return;
                }
                let p = p % n;
                let child = Arc::new(PageTable::new(&self.mem).unwrap());
                let parent = &self.procs[p];
                let base = parent.anon_base;
                let mut copies = vec![
                    (base, base + ANON_PAGES * PG, RW, parent.anon_vma[0]),
                    (FPRIV, FPRIV + FILE_PAGES * PG, RW, parent.anon_vma[1]),
                    (FSHARED, FSHARED + FILE_PAGES * PG, SHARED_RW, false),
                ];
                copies.extend(parent.ghosts.iter().map(|&g| (g, g + ANON_PAGES * PG, RW, true)));
                for (start, end, flags, anon_vma) in copies {
                    if vma_needs_copy(flags, anon_vma, false) {
                        parent
                            .pt
                            .copy_page_range(&child, &CopyVma { start, end, flags, dst_uffd_wp: false })
                            .unwrap();
                    }
                }
                parent.pt.flush_tlb();
                let ids = self.register(&child);
                let parent = &self.procs[p];
                let c = Proc {
                    pt: child,
                    anon_base: base,
                    anon_vma: parent.anon_vma,
                    anon: parent.anon.clone(),
                    cow: parent.cow.clone(),
                    ids,
                    ghosts: parent.ghosts.clone(),
                };
                self.procs.push(c);
            }
            Op::Zap { p, r, first, n: len } => {
                let p = p % n;
                let (pages, file_vma) = match r {
                    Region::Anon => (ANON_PAGES, false),
                    _ => (FILE_PAGES, true),
                };
                let last = (first + len).min(pages);
                let (s, e) = (self.addr(p, r, first), self.addr(p, r, 0) + last * PG);
                self.procs[p].pt.zap_range(s, e, &ZapDetails::dontneed(file_vma));
                let pr = &mut self.procs[p];
                match r {
                    Region::Anon => pr.anon.retain(|&k, _| k < first || k >= last),
                    Region::FilePrivate => pr.cow.retain(|&k, _| k < first || k >= last),
                    Region::FileShared => {}
                }
            }
            Op::Move { p, to, unmap_old } => {
                let p = p % n;
                let pr = &mut self.procs[p];
                let (old, new) = (pr.anon_base, ANON_BASES[to]);
                if old == new {
                    return;
                }
                let len = ANON_PAGES * PG;
                // MREMAP_FIXED onto an old DONTUNMAP leftover unmaps it first.
                if let Some(i) = pr.ghosts.iter().position(|&g| g == new) {
                    pr.munmap_anon(new);
                    pr.ghosts.remove(i);
                }
                assert!(pr.pt.entries(new, new + len).is_empty());
                pr.pt.move_page_tables(old, new, len, &MoveFlags::default()).unwrap();
                pr.anon_base = new;
                if unmap_old {
                    assert!(pr.pt.entries(old, old + len).is_empty());
                    pr.munmap_anon(old);
                } else {
                    pr.ghosts.push(old);
                }
            }
            Op::Exit { p } => {
                if n <= 1 {
                    return;
                }
                let pr = self.procs.remove(p % n);
                for id in pr.ids {
                    assert!(self.file.i_mmap_remove(id).is_some());
                }
                assert_eq!(Arc::strong_count(&pr.pt), 1);
            }
            Op::Truncate { pages } => {
                self.file.truncate(pages * PG);
                self.file.truncate(FILE_PAGES * PG);
                for w in self.words.iter_mut().skip(pages as usize) {
                    *w = 0;
                }
                for pr in self.procs.iter_mut() {
                    pr.cow.retain(|&k, _| k < pages);
                }
            }
            Op::Protect { p } => {
                let p = p % n;
                let pr = &self.procs[p];
                let (s, e) = (pr.anon_base, pr.anon_base + ANON_PAGES * PG);
                let ro = vmspace_abi::VmFlags::READ
                    | vmspace_abi::VmFlags::MAYREAD
                    | vmspace_abi::VmFlags::MAYWRITE;
                let cp = |flags, t| ChangeProt {
                    newprot: PageProt::from_vm_flags(flags),
                    try_change_writable: t,
                    shared: false,
                };
                pr.pt.change_protection(s, e, &cp(ro, false));
                pr.pt.change_protection(s, e, &cp(RW, true));
            }
            Op::Free { p, first, n: len } => {
                let p = p % n;
                let pr = &self.procs[p];
                let last = (first + len).min(ANON_PAGES);
                pr.pt.madvise_free(pr.anon_base + first * PG, pr.anon_base + last * PG);
            }
        }
    }

    fn check_all(&self) {
        for p in 0..self.procs.len() {
            for r in [Region::Anon, Region::FilePrivate, Region::FileShared] {
                let pages: Vec<u64> = match r {
                    Region::Anon => self.procs[p].anon.keys().copied().chain([5, 700]).collect(),
                    _ => (0..FILE_PAGES).collect(),
                };
                for page in pages {
                    let mut vma = self.vma(p, r);
                    let got = read_u64(&self.procs[p].pt, &mut vma, self.addr(p, r, page)).unwrap();
                    assert_eq!(got, self.expected(p, r, page), "proc {p} {r:?} page {page}");
                }
            }
        }
    }

    fn check_memory(&self) {
        let pts: Vec<&PageTable> = self.procs.iter().map(|p| &*p.pt).collect();
        check_memory(&self.mem, &pts, &[&self.file]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn contents_match_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut w = World::new();
        for op in &ops {
            w.apply(op);
            w.check_memory();
        }
        w.check_all();
        w.check_memory();
        let mem = w.mem.clone();
        for pr in std::mem::take(&mut w.procs) {
            for id in pr.ids {
                w.file.i_mmap_remove(id);
            }
        }
        drop(w);
        // Pages the CPU's batches still hold come back at their drain (`Memory::lru_add_drain`).
        mem.lru_add_drain();
        vmspace_rcu::synchronize();
        let s = mem.stats();
        prop_assert_eq!((s.frames_in_use, s.frames_pending_free), (0, 0));
        prop_assert_eq!((s.tables_in_use, s.tables_pending_free, s.cache_nodes_in_use, s.data_in_use), (0, 0, 0, 0));
    }
}
