//! The seeded random script generator for differential testing, weighted toward merge/split edge cases.
//!
//! # How it works
//!
//! Everything happens on a small page grid at the start of the arena (by default the first 64 pages), so
//! that calls keep landing on, next to and across each other. The generator keeps a rough shadow of which
//! grid pages it has mapped (and, for file mappings, which file page each maps), updated as if every call
//! succeeded. The shadow is only a steering aid: it lets the generator aim at the interesting places (the
//! page just after a mapping, the middle of a mapping, a range spanning a hole, the file offset that would
//! continue a neighbour's) — it never predicts results, and it is allowed to be wrong (a call that failed,
//! a mapping that moved out of the arena).
//!
//! Each call picks a kind by weight (mmap > mprotect > touch, munmap, mremap > madvise > name, brk), then a
//! shape: adjacent mappings (anon and file, with contiguous and non-contiguous offsets), partial overlaps and
//! MAP_FIXED replacement, mprotect of heads, tails and middles, mremap shrinking, growing in place into free
//! space or into a neighbour, moving with `maymove|fixed` over neighbours, `dontunmap`; `touch w` before and
//! after splits; anon names; every madvise advice; and deliberately failing calls (unaligned, zero length,
//! neither private nor shared, fixed_noreplace over a mapping, mremap of unmapped ranges, ranges beyond the
//! arena and TASK_SIZE). A `maps` op is inserted now and then. `fork` is off by default
//! ([`GenConfig::fork`]).
//!
//! Everything is a pure function of the seed and the config: `rand::rngs::SmallRng::seed_from_u64(seed)`.

use vmspace_abi::{MapFlags, MremapFlags, Prot};

use crate::ast::{Fd, Op, Script};
use vmspace_abi::Advice;

/// The advice of the base mix (those the engine modelled first).
const BASE_ADVICE: [Advice; 6] = [
    Advice::DONTNEED,
    Advice::FREE,
    Advice::DONTFORK,
    Advice::DOFORK,
    Advice::WIPEONFORK,
    Advice::KEEPONFORK,
];
use crate::output::Arena;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const PAGE: u64 = 4096;

/// Generator settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenConfig {
    /// Number of calls (not counting the `file` declarations and `maps` ops).
    pub calls: usize,
    /// Pages in the grid at the arena's start that calls aim at.
    pub grid_pages: u64,
    /// Whether `fork` may appear.
    pub fork: bool,
    /// The arena.
    pub arena: Arena,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig { calls: 80, grid_pages: 64, fork: false, arena: Arena::default() }
    }
}

/// What the shadow believes is mapped at one grid page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free,
    Anon,
    /// File index and the file page mapped here.
    File(usize, u64),
}

struct Gen {
    rng: SmallRng,
    cfg: GenConfig,
    grid: Vec<Slot>,
    /// Per grid page, the id of the call that last shaped it (mmap, mprotect, mremap): a run of one id is
    /// probably a single VMA, which is what mremap needs as its source.
    seg: Vec<u32>,
    next_seg: u32,
    /// (name, size in pages) of the declared files.
    files: Vec<(String, u64)>,
}

impl Gen {
    fn addr(&self, page: u64) -> u64 {
        self.cfg.arena.base + page * PAGE
    }

    fn set(&mut self, page: u64, pages: u64, slot: impl Fn(u64) -> Slot) {
        self.next_seg += 1;
        for p in page..(page + pages).min(self.cfg.grid_pages) {
            self.grid[p as usize] = slot(p - page);
            self.seg[p as usize] = self.next_seg;
        }
    }

    /// Marks the mapped pages of a range as reshaped (mprotect splits them off their neighbours).
    fn reshape(&mut self, page: u64, pages: u64) {
        self.next_seg += 1;
        for p in page..(page + pages).min(self.cfg.grid_pages) {
            self.seg[p as usize] = self.next_seg;
        }
    }

    fn any_mapped(&self, page: u64, pages: u64) -> bool {
        (page..(page + pages).min(self.cfg.grid_pages)).any(|p| self.grid[p as usize] != Slot::Free)
    }

    /// Maximal runs of mapped pages with one segment id, as (first page, pages).
    fn segments(&self) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut p = 0;
        while p < self.cfg.grid_pages {
            if self.grid[p as usize] == Slot::Free {
                p += 1;
                continue;
            }
            let s = p;
            let id = self.seg[p as usize];
            while p < self.cfg.grid_pages && self.grid[p as usize] != Slot::Free && self.seg[p as usize] == id
            {
                p += 1;
            }
            v.push((s, p - s));
        }
        v
    }

    /// Maximal runs of mapped pages as (first page, pages).
    fn runs(&self) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut p = 0;
        while p < self.cfg.grid_pages {
            if self.grid[p as usize] == Slot::Free {
                p += 1;
                continue;
            }
            let s = p;
            while p < self.cfg.grid_pages && self.grid[p as usize] != Slot::Free {
                p += 1;
            }
            v.push((s, p - s));
        }
        v
    }

    fn small_len(&mut self) -> u64 {
        if self.rng.random_bool(0.8) { self.rng.random_range(1..=4) } else { self.rng.random_range(5..=16) }
    }

    /// A page range that interacts with existing mappings: a whole run, its head, its tail, its middle, a
    /// range spanning two runs and the hole between them, or a random range.
    fn target_range(&mut self) -> (u64, u64) {
        let runs = self.runs();
        let g = self.cfg.grid_pages;
        if runs.is_empty() || self.rng.random_bool(0.08) {
            let p = self.rng.random_range(0..g);
            let n = self.small_len();
            return (p, n);
        }
        let (s, n) = runs[self.rng.random_range(0..runs.len())];
        // Mostly inside the run (whole, head, tail, middle), sometimes across one of its ends.
        match self.rng.random_range(0..20) {
            0..=4 => (s, n),
            5..=8 => (s, self.rng.random_range(1..=n)),
            9..=12 => {
                let k = self.rng.random_range(1..=n);
                (s + n - k, k)
            }
            13..=16 if n >= 3 => {
                let a = self.rng.random_range(1..n - 1);
                let b = self.rng.random_range(a + 1..n);
                (s + a, b - a)
            }
            13..=16 => (s, n),
            17 | 18 => {
                // Across the end of this run into whatever follows.
                let a = self.rng.random_range(0..n);
                (s + a, n - a + self.small_len())
            }
            _ => {
                // From before the run into it.
                let before = self.rng.random_range(1..=3).min(s);
                (s - before, before + self.rng.random_range(1..=n))
            }
        }
    }

    /// A page to map at: next to a run (merge candidates), over a run (replacement), or random.
    fn map_page(&mut self, len: u64) -> u64 {
        let runs = self.runs();
        let g = self.cfg.grid_pages;
        if runs.is_empty() || self.rng.random_bool(0.25) {
            return self.rng.random_range(0..g);
        }
        let (s, n) = runs[self.rng.random_range(0..runs.len())];
        match self.rng.random_range(0..4) {
            0 => s + n,
            1 => s.saturating_sub(len),
            2 => s + self.rng.random_range(0..n),
            _ => s.saturating_sub(self.rng.random_range(0..=len)),
        }
    }

    fn prot(&mut self) -> Prot {
        match self.rng.random_range(0..20) {
            0..=9 => Prot::RW,
            10..=13 => Prot::R,
            14..=15 => Prot::NONE,
            16..=17 => Prot::RX,
            18 => Prot::RWX,
            _ => Prot::WRITE,
        }
    }

    fn mmap(&mut self) -> Op {
        let len_pages = self.small_len();
        let page = self.map_page(len_pages);
        let mut addr = self.addr(page);
        let mut len = len_pages * PAGE;
        let prot = self.prot();
        let file_map = !self.files.is_empty() && self.rng.random_bool(0.35);
        let mut flags = if file_map {
            if self.rng.random_bool(0.7) { MapFlags::PRIVATE } else { MapFlags::SHARED }
        } else if self.rng.random_bool(0.85) {
            MapFlags::PRIVATE | MapFlags::ANONYMOUS
        } else {
            MapFlags::SHARED | MapFlags::ANONYMOUS
        };
        flags |= match self.rng.random_range(0..10) {
            0..=4 => MapFlags::FIXED,
            5..=8 => MapFlags::FIXED_NOREPLACE,
            _ => MapFlags::empty(),
        };
        // populate write-faults a private writable mapping at once (anon_vma creation at mmap time).
        match self.rng.random_range(0..40) {
            0..=2 => flags |= MapFlags::POPULATE,
            3 => flags |= MapFlags::NORESERVE,
            4 | 5 if !file_map => flags |= MapFlags::GROWSDOWN,
            _ => {}
        }
        let mut file = None;
        if file_map {
            let fi = self.rng.random_range(0..self.files.len());
            // Continue a neighbour's offsets (mergeable) or pick another offset.
            let left = page.checked_sub(1).map(|p| self.grid[p as usize]);
            let off_page = match left {
                Some(Slot::File(f, fp)) if f == fi && self.rng.random_bool(0.6) => fp + 1,
                _ => {
                    if self.rng.random_bool(0.5) {
                        0
                    } else {
                        self.rng.random_range(0..self.files[fi].1 + 2)
                    }
                }
            };
            file = Some((Fd::Name(self.files[fi].0.clone()), off_page * PAGE));
        }
        // Deliberate failures.
        match self.rng.random_range(0..30) {
            0 => addr += self.rng.random_range(1..PAGE), // unaligned: EINVAL with fixed, else rounded hint
            1 => len = 0,
            2 => flags &= !(MapFlags::PRIVATE | MapFlags::SHARED),
            3 => len = len - PAGE + self.rng.random_range(1..PAGE), // unaligned length is rounded up: fine
            4 if file.is_some() => {
                if let Some((_, off)) = file.as_mut() {
                    *off += 1; // unaligned offset: EINVAL
                }
            }
            5 => {
                addr = 0x7fff_ffff_f000;
                flags = (flags & !MapFlags::FIXED_NOREPLACE) | MapFlags::FIXED;
            }
            _ => {}
        }
        let fixed = flags.intersects(MapFlags::FIXED | MapFlags::FIXED_NOREPLACE);
        let doomed = !flags.intersects(MapFlags::PRIVATE | MapFlags::SHARED)
            || file.as_ref().is_some_and(|(_, off)| !off.is_multiple_of(PAGE))
            || (flags.contains(MapFlags::FIXED_NOREPLACE) && self.any_mapped(page, len.div_ceil(PAGE)));
        if fixed && !doomed && addr.is_multiple_of(PAGE) && len > 0 && self.cfg.arena.contains(addr) {
            let pages = len.div_ceil(PAGE);
            match &file {
                None => self.set(page, pages, |_| Slot::Anon),
                Some((name, off)) => {
                    let fi = self.files.iter().position(|(n, _)| Fd::Name(n.clone()) == *name).unwrap_or(0);
                    let base = off / PAGE;
                    self.set(page, pages, |i| Slot::File(fi, base + i));
                }
            }
        }
        Op::Mmap { addr, len, prot, flags, file }
    }

    fn munmap(&mut self) -> Op {
        let (p, n) = self.target_range();
        let (mut addr, mut len) = (self.addr(p), n * PAGE);
        match self.rng.random_range(0..20) {
            0 => addr += 0x800,
            1 => len = 0,
            2 => len = u64::MAX - addr + PAGE, // wraps: EINVAL
            _ => self.set(p, n, |_| Slot::Free),
        }
        Op::Munmap { addr, len }
    }

    fn mprotect(&mut self) -> Op {
        let (p, n) = self.target_range();
        let (mut addr, mut len) = (self.addr(p), n * PAGE);
        match self.rng.random_range(0..20) {
            0 => addr += 0x10,
            1 => len = 0,
            2 => len = len - PAGE + 1,
            _ => self.reshape(p, n),
        }
        Op::Mprotect { addr, len, prot: self.prot() }
    }

    fn mremap(&mut self) -> Op {
        // The source: mostly one probable VMA (a segment), sometimes a whole run of them or any range.
        let segs = if self.rng.random_bool(0.8) { self.segments() } else { self.runs() };
        let (p, n) = if segs.is_empty() || self.rng.random_bool(0.1) {
            self.target_range()
        } else {
            segs[self.rng.random_range(0..segs.len())]
        };
        let old_len_pages = if self.rng.random_bool(0.5) { n } else { self.rng.random_range(1..=n.max(1)) };
        let addr = self.addr(p);
        let old_len = old_len_pages * PAGE;
        let shape = self.rng.random_range(0..10);
        let (new_len, flags, new_addr) = match shape {
            // Shrink in place.
            0 | 1 => (self.rng.random_range(1..=old_len_pages.max(1)) * PAGE, MremapFlags::empty(), None),
            // Grow in place (into free space or a neighbour: ENOMEM).
            2 | 3 => ((old_len_pages + self.small_len()) * PAGE, MremapFlags::empty(), None),
            // Grow, may move (out of the arena when it cannot grow in place).
            4 => ((old_len_pages + self.small_len()) * PAGE, MremapFlags::MAYMOVE, None),
            // Move over/next to neighbours.
            5..=7 => {
                let dst = self.map_page(old_len_pages);
                let nl = if self.rng.random_bool(0.5) { old_len } else { self.small_len() * PAGE };
                (nl, MremapFlags::MAYMOVE | MremapFlags::FIXED, Some(self.addr(dst)))
            }
            // dontunmap (same length, maymove; fixed or not).
            8 => {
                let dst = self.map_page(old_len_pages);
                if self.rng.random_bool(0.5) {
                    (
                        old_len,
                        MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP | MremapFlags::FIXED,
                        Some(self.addr(dst)),
                    )
                } else {
                    (old_len, MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP, None)
                }
            }
            // Failures: unaligned, fixed without maymove, zero new length, unmapped source.
            _ => match self.rng.random_range(0..5) {
                0 => {
                    return Op::Mremap {
                        addr: addr + 8,
                        old_len,
                        new_len: old_len,
                        flags: MremapFlags::empty(),
                        new_addr: None,
                    };
                }
                1 => {
                    let dst = self.map_page(1);
                    (old_len, MremapFlags::FIXED, Some(self.addr(dst)))
                }
                2 => (0, MremapFlags::MAYMOVE, None),
                // old_len 0: duplicates a shared mapping, EINVAL for a private one.
                3 => {
                    let dst = self.map_page(old_len_pages);
                    return Op::Mremap {
                        addr,
                        old_len: 0,
                        new_len: old_len,
                        flags: MremapFlags::MAYMOVE | MremapFlags::FIXED,
                        new_addr: Some(self.addr(dst)),
                    };
                }
                _ => {
                    let free = (0..self.cfg.grid_pages).find(|&q| self.grid[q as usize] == Slot::Free);
                    let a = self.addr(free.unwrap_or(self.cfg.grid_pages));
                    return Op::Mremap {
                        addr: a,
                        old_len: PAGE,
                        new_len: 2 * PAGE,
                        flags: MremapFlags::empty(),
                        new_addr: None,
                    };
                }
            },
        };
        // Shadow: best effort.
        let new_pages = new_len / PAGE;
        let src: Vec<Slot> = (p..p + old_len_pages.min(self.cfg.grid_pages.saturating_sub(p)))
            .map(|q| self.grid[q as usize])
            .collect();
        match new_addr {
            Some(na) if new_len > 0 => {
                let dp = (na - self.cfg.arena.base) / PAGE;
                if !flags.contains(MremapFlags::DONTUNMAP) {
                    self.set(p, old_len_pages, |_| Slot::Free);
                }
                let first = src.first().copied().unwrap_or(Slot::Anon);
                self.set(dp, new_pages, |i| match first {
                    Slot::File(f, fp) => Slot::File(f, fp + i),
                    _ => Slot::Anon,
                });
            }
            None if flags.is_empty() && new_len < old_len => {
                self.set(p + new_pages, old_len_pages - new_pages, |_| Slot::Free)
            }
            None if flags.contains(MremapFlags::MAYMOVE)
                && new_len > old_len
                && self.rng.random_bool(0.5) =>
            {
                self.set(p, old_len_pages, |_| Slot::Free)
            }
            _ => {}
        }
        Op::Mremap { addr, old_len, new_len, flags, new_addr }
    }

    fn madvise(&mut self) -> Op {
        let (p, n) = self.target_range();
        let advice = BASE_ADVICE[self.rng.random_range(0..BASE_ADVICE.len())];
        let mut addr = self.addr(p);
        let mut len = n * PAGE;
        match self.rng.random_range(0..20) {
            0 => addr += 0x100,
            1 => len -= self.rng.random_range(1..PAGE), // unaligned length: rounded up
            2 => len = 0,
            _ => {}
        }
        Op::Madvise { addr, len, advice }
    }

    fn touch(&mut self) -> Op {
        let (p, n) = self.target_range();
        let write = self.rng.random_bool(0.6);
        let mut addr = self.addr(p);
        let mut len = n * PAGE;
        if self.rng.random_range(0..8) == 0 {
            // Unaligned: the first page is the one containing addr.
            addr += self.rng.random_range(1..PAGE);
            len -= self.rng.random_range(0..PAGE.min(len));
        }
        Op::Touch { addr, len, write }
    }

    fn name(&mut self) -> Op {
        let (p, n) = self.target_range();
        let name = match self.rng.random_range(0..3) {
            0 => None,
            1 => Some("alpha".to_string()),
            _ => Some(format!("n{}", self.rng.random_range(0..3))),
        };
        Op::Name { addr: self.addr(p), len: n * PAGE, name }
    }

    fn call(&mut self) -> Op {
        let w = self.rng.random_range(0..100);
        match w {
            0..=26 => self.mmap(),
            27..=40 => self.mprotect(),
            41..=54 => self.touch(),
            55..=66 => self.munmap(),
            67..=80 => self.mremap(),
            81..=90 => self.madvise(),
            91..=94 => self.name(),
            95 => {
                let page = self.rng.random_range(0..8);
                let addr = if self.rng.random_bool(0.5) { 0 } else { self.addr(page) };
                Op::Brk { addr }
            }
            _ if self.cfg.fork && self.rng.random_bool(0.5) => Op::Fork,
            _ => self.mmap(),
        }
    }
}

/// Generates a script from `seed`: two `file` declarations (one as large as the grid, one of 8 pages so that
/// mappings can run past its end), then `cfg.calls` calls with a `maps` op roughly every 12 calls.
pub fn generate(seed: u64, cfg: &GenConfig) -> Script {
    let grid_pages = cfg.grid_pages.clamp(8, cfg.arena.size / PAGE);
    let cfg = GenConfig { grid_pages, ..*cfg };
    let mut g = Gen {
        rng: SmallRng::seed_from_u64(seed),
        cfg,
        grid: vec![Slot::Free; grid_pages as usize],
        seg: vec![0; grid_pages as usize],
        next_seg: 0,
        files: vec![("f0".into(), grid_pages), ("f1".into(), 8)],
    };
    let mut ops: Vec<Op> =
        g.files.iter().map(|(n, pages)| Op::File { name: n.clone(), size: pages * PAGE }).collect();
    for i in 0..cfg.calls {
        ops.push(g.call());
        if i % 12 == 11 && g.rng.random_bool(0.7) {
            ops.push(Op::Maps);
        }
    }
    Script::from_ops(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_parseable() {
        let cfg = GenConfig::default();
        for seed in 0..50 {
            let a = generate(seed, &cfg);
            assert_eq!(a, generate(seed, &cfg));
            let calls = a.lines.iter().filter(|l| !matches!(l.op, Op::File { .. } | Op::Maps)).count();
            assert_eq!(calls, cfg.calls);
            let back = Script::parse(&a.to_text()).unwrap();
            assert_eq!(back, a, "seed {seed}");
            assert!(!a.lines.iter().any(|l| l.op == Op::Fork));
        }
    }

    #[test]
    fn covers_the_edge_cases() {
        let cfg = GenConfig { calls: 400, ..GenConfig::default() };
        let s = generate(7, &cfg);
        let has = |f: &dyn Fn(&Op) -> bool| s.lines.iter().any(|l| f(&l.op));
        assert!(has(&|o| matches!(o, Op::Mmap { file: Some(_), .. })));
        assert!(has(&|o| matches!(o, Op::Mmap { flags, .. } if flags.contains(MapFlags::FIXED_NOREPLACE))));
        assert!(has(&|o| matches!(o, Op::Mmap { len: 0, .. })));
        assert!(has(
            &|o| matches!(o, Op::Mremap { flags, .. } if flags.contains(MremapFlags::MAYMOVE | MremapFlags::FIXED))
        ));
        assert!(has(&|o| matches!(o, Op::Mremap { flags, .. } if flags.contains(MremapFlags::DONTUNMAP))));
        assert!(has(&|o| matches!(o, Op::Touch { write: true, .. })));
        assert!(has(&|o| matches!(o, Op::Madvise { advice: vmspace_abi::Advice::WIPEONFORK, .. })));
        assert!(has(&|o| matches!(o, Op::Name { .. })));
        assert!(has(&|o| matches!(o, Op::Maps)));
        // Everything that is meant to land in the arena does: all fixed maps are within the grid or are the
        // deliberate beyond-the-arena case.
        let arena = cfg.arena;
        for l in &s.lines {
            if let Op::Mprotect { addr, .. } | Op::Munmap { addr, .. } | Op::Touch { addr, .. } = l.op {
                assert!(arena.contains(addr), "{}", l.op);
            }
        }
        let with_fork = generate(7, &GenConfig { fork: true, ..cfg });
        assert!(with_fork.lines.iter().any(|l| l.op == Op::Fork));
    }
}
