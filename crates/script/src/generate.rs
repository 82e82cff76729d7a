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
//! after splits; anon names; madvise; and deliberately failing calls (unaligned, zero length, neither private
//! nor shared, fixed_noreplace over a mapping, mremap of unmapped ranges, ranges beyond the arena and
//! TASK_SIZE). A `maps` op is inserted now and then. `fork` is off by default ([`GenConfig::fork`]).
//!
//! # Families
//!
//! The rest of the 6.18 memory-syscall surface comes in [`Families`], each behind its own switch (all on by
//! default), so that a family whose engine side is not ready can be left out of a differential run:
//! `exec_prot` (`--x`, `-wx`), `advice` (every advice but hwpoison and soft_offline, and unknown values),
//! `mlock` (mlock, mlock2, munlock, and now and then mlockall/munlockall; MAP_LOCKED with `mmap_flags`),
//! `msync`, `mseal`, `pkeys` (pkey_alloc, pkey_free, pkey_mprotect), `ftruncate` (to smaller, larger and
//! refused sizes, and a third file declared with a huge or refused size), `mmap_flags` (every mmap flag and PROT bit, unknown bits included), `hints` (mremap
//! NEWADDR without `fixed`) and `edges` (addresses around 0, mmap_min_addr, TASK_SIZE and 2^64, lengths near
//! 2^64 and ranges that wrap, huge file offsets, unknown flag bits, descriptors that are not open, anonymous
//! mappings with `fd=`/`off=`). The new calls take about 15% of the calls when every family is on, so the
//! merge/split mix stays dominant. With every family off the generator draws exactly as it did before the
//! families existed: the same seed gives the same script.
//!
//! # Page contents
//!
//! The `contents` family writes and reads page contents with `fill` and `check` (the format reference,
//! `crate::ast`, "Memory accesses"): single fills and checks of mapped ranges (aligned or not), and short
//! scenarios whose calls follow each other: fill, `fork`, check and fill again in the child (copy-on-write;
//! with [`GenConfig::fork`]); a shared and a private mapping of the same file pages, the shared one filled and
//! the private one checked before and after it writes a page of its own; fill, then DONTNEED, FREE (and with
//! the `advice` family REMOVE, DONTNEED_LOCKED), then check; fill a probable VMA, move it with
//! `maymove|fixed` (sometimes `dontunmap`) and check both places; fill, WIPEONFORK / DONTFORK / KEEPONFORK /
//! DOFORK, fork, check; a file mapping filled, its file shrunk to inside a page and grown again (with the
//! `ftruncate` family), checked; a growsdown mapping with free pages below, touched and filled just below it
//! (the stack grows) and checked over the grown range; fill, `touch w`, check (a touch keeps the bytes). A
//! scenario starts in about 7% of the calls; its later calls are the next calls of the script.
//!
//! Edge values never make a script reach the kernel runner's own memory (which its guard would refuse): a
//! range that covers most of the address space is given only to calls the kernel refuses or that stop at the
//! first hole (mprotect, mlock, mseal, ... from a start in a hole or in the arena), never to madvise, msync or
//! touch, which act on every mapping of their range. Lengths that could succeed are small: nothing maps more
//! than a few dozen pages, so MAP_POPULATE, MAP_LOCKED and `mlockall(MCL_FUTURE)` stay cheap.
//!
//! Everything is a pure function of the seed and the config: `rand::rngs::SmallRng::seed_from_u64(seed)`.

use vmspace_abi::{Advice, MapFlags, MremapFlags, Prot, TASK_SIZE};

use crate::ast::{ADVICE_NAMES, Fd, Op, Script};
use crate::output::Arena;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const PAGE: u64 = 4096;

/// The advice of the base mix (those the engine modelled first).
const BASE_ADVICE: [Advice; 6] = [
    Advice::DONTNEED,
    Advice::FREE,
    Advice::DONTFORK,
    Advice::DOFORK,
    Advice::WIPEONFORK,
    Advice::KEEPONFORK,
];

/// The families of calls and values beyond the base mix (module docs), each a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    /// `--x` and `-wx` protections.
    pub exec_prot: bool,
    /// Every madvise advice but hwpoison and soft_offline, and unknown advice values.
    pub advice: bool,
    /// mlock, mlock2, munlock; mlockall and munlockall sparingly; MAP_LOCKED (with `mmap_flags`).
    pub mlock: bool,
    /// msync.
    pub msync: bool,
    /// mseal.
    pub mseal: bool,
    /// pkey_alloc, pkey_free, pkey_mprotect.
    pub pkeys: bool,
    /// ftruncate of the script's files to smaller, larger and refused sizes.
    pub ftruncate: bool,
    /// Every mmap flag and PROT bit, unknown bits included.
    pub mmap_flags: bool,
    /// mremap NEWADDR without `fixed` (a hint with dontunmap, else ignored).
    pub hints: bool,
    /// Edge addresses, lengths, offsets and flag bits; descriptors that are not open; anon mappings with fd=.
    pub edges: bool,
    /// Page contents: `fill` and `check` around fork, copy-on-write, DONTNEED/FREE/REMOVE, mremap moves,
    /// WIPEONFORK/DONTFORK, shared and private mappings of one file, ftruncate, stack growth (module docs).
    pub contents: bool,
}

impl Families {
    /// Every family on.
    pub const ALL: Families = Families {
        exec_prot: true,
        advice: true,
        mlock: true,
        msync: true,
        mseal: true,
        pkeys: true,
        ftruncate: true,
        mmap_flags: true,
        hints: true,
        edges: true,
        contents: true,
    };
    /// Every family off: the base mix only.
    pub const NONE: Families = Families {
        exec_prot: false,
        advice: false,
        mlock: false,
        msync: false,
        mseal: false,
        pkeys: false,
        ftruncate: false,
        mmap_flags: false,
        hints: false,
        edges: false,
        contents: false,
    };
    /// The families' names, as [`Families::set`] takes them.
    pub const NAMES: [&'static str; 11] = [
        "exec_prot",
        "advice",
        "mlock",
        "msync",
        "mseal",
        "pkeys",
        "ftruncate",
        "mmap_flags",
        "hints",
        "edges",
        "contents",
    ];

    fn slot(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "exec_prot" => &mut self.exec_prot,
            "advice" => &mut self.advice,
            "mlock" => &mut self.mlock,
            "msync" => &mut self.msync,
            "mseal" => &mut self.mseal,
            "pkeys" => &mut self.pkeys,
            "ftruncate" => &mut self.ftruncate,
            "mmap_flags" => &mut self.mmap_flags,
            "hints" => &mut self.hints,
            "edges" => &mut self.edges,
            "contents" => &mut self.contents,
            _ => return None,
        })
    }

    /// Switches the family `name` on or off; an unknown name is an error that lists the known ones.
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), String> {
        match self.slot(name) {
            Some(s) => {
                *s = on;
                Ok(())
            }
            None => Err(format!("unknown generator family {name:?} (known: {})", Families::NAMES.join(" "))),
        }
    }

    /// Whether the family `name` is on (`false` for an unknown name).
    pub fn get(&self, name: &str) -> bool {
        let mut c = *self;
        c.slot(name).is_some_and(|s| *s)
    }

    /// The names of the families that are off, in [`Families::NAMES`] order.
    pub fn off(&self) -> Vec<&'static str> {
        Families::NAMES.into_iter().filter(|n| !self.get(n)).collect()
    }
}

impl Default for Families {
    fn default() -> Self {
        Families::ALL
    }
}

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
    /// The families beyond the base mix (all on by default).
    pub families: Families,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig { calls: 80, grid_pages: 64, fork: false, arena: Arena::default(), families: Families::ALL }
    }
}

/// A generator of one call of a family.
type FamilyCall = fn(&mut Gen) -> Op;

/// How far an edge range may reach, by how the kernel and the runner's guard treat the call's range
/// (module docs): the guard refuses a range the kernel would act on that covers the runner's own memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Small lengths only (touch, fill, check: they walk their ranges page by page, and a write of a huge
    /// range would reach the runner's memory).
    Small,
    /// Every mapping of the range is acted on (madvise, msync): no huge lengths below TASK_SIZE.
    Every,
    /// The kernel refuses ranges past TASK_SIZE before acting (mmap, munmap, mremap): any length.
    Bounded,
    /// The call walks from the VMA at the start to the first hole (mprotect, mlock, mseal): any length.
    Walk,
}

impl Reach {
    /// mprotect's reach: with PROT_GROWSDOWN it starts at the first VMA of the range, wherever that is, so
    /// it acts like [`Reach::Every`].
    fn protect(prot: Prot) -> Reach {
        if prot.contains(Prot::GROWSDOWN) { Reach::Every } else { Reach::Walk }
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
    /// The calls still to come of a multi-call scenario (the `contents` family), returned before any new draw.
    pending: std::collections::VecDeque<Op>,
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
        let f = self.cfg.families;
        if f.mmap_flags && self.rng.random_bool(0.05) {
            return self.odd_prot();
        }
        if f.exec_prot && self.rng.random_bool(0.1) {
            return if self.rng.random_bool(0.5) { Prot::EXEC } else { Prot::WRITE | Prot::EXEC };
        }
        match self.rng.random_range(0..20) {
            0..=9 => Prot::RW,
            10..=13 => Prot::R,
            14..=15 => Prot::NONE,
            16..=17 => Prot::RX,
            18 => Prot::RWX,
            _ => Prot::WRITE,
        }
    }

    /// A protection with bits beyond read, write and exec: `PROT_SEM`, `PROT_GROWSDOWN`, `PROT_GROWSUP`, or
    /// an unknown bit.
    fn odd_prot(&mut self) -> Prot {
        let access = Prot::from_bits_retain(self.rng.random_range(0..8));
        let extra = match self.rng.random_range(0..6) {
            0 => Prot::SEM,
            1 | 2 => Prot::GROWSDOWN,
            3 => Prot::GROWSUP,
            4 => Prot::GROWSDOWN | Prot::GROWSUP,
            _ => Prot::from_bits_retain(1 << self.rng.random_range(4..32)),
        };
        access | extra
    }

    /// Flags beyond the base mix (`mmap_flags`): another mapping type, the other flags, unknown bits.
    fn odd_map_flags(&mut self, flags: MapFlags, file_map: bool) -> MapFlags {
        let ty = flags & MapFlags::TYPE;
        let rest = flags - MapFlags::TYPE;
        match self.rng.random_range(0..16) {
            0 | 1 => rest | MapFlags::SHARED_VALIDATE,
            2 if !file_map => rest | MapFlags::DROPPABLE,
            3 => ty | rest | MapFlags::BELOW_2G,
            4 => ty | rest | MapFlags::STACK,
            5 => ty | rest | MapFlags::DENYWRITE | MapFlags::EXECUTABLE,
            6 => ty | rest | MapFlags::NONBLOCK | MapFlags::POPULATE,
            7 => ty | rest | MapFlags::HUGETLB,
            8 => ty | rest | MapFlags::HUGETLB | MapFlags::from_bits_retain(21 << MapFlags::HUGE_SHIFT),
            9 => ty | rest | MapFlags::HUGETLB | MapFlags::from_bits_retain(30 << MapFlags::HUGE_SHIFT),
            10 => MapFlags::SHARED_VALIDATE | rest | MapFlags::SYNC,
            11 => ty | rest | MapFlags::UNINITIALIZED,
            12 if self.cfg.families.mlock => ty | rest | MapFlags::LOCKED,
            // Unknown bits: the unused ones of the low word, the huge-size field alone, a high one.
            13 => {
                ty | rest
                    | MapFlags::from_bits_retain([0x80, 0x200, 0x400, 0x20_0000][self.rng.random_range(0..4)])
            }
            14 => ty | rest | MapFlags::from_bits_retain(1 << self.rng.random_range(26..32)),
            _ => {
                MapFlags::SHARED_VALIDATE
                    | rest
                    | MapFlags::from_bits_retain(1 << self.rng.random_range(21..26))
            }
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
        if self.cfg.families.mmap_flags && self.rng.random_bool(0.15) {
            flags = self.odd_map_flags(flags, file_map);
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
            || flags.contains(MapFlags::HUGETLB)
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
        if self.cfg.families.hints && self.rng.random_bool(0.12) {
            // NEWADDR without fixed: a hint with dontunmap (the kernel checks it), else ignored.
            let dst = self.map_page(old_len_pages);
            let flags = match self.rng.random_range(0..4) {
                0 | 1 => MremapFlags::MAYMOVE | MremapFlags::DONTUNMAP,
                2 => MremapFlags::MAYMOVE,
                _ => MremapFlags::empty(),
            };
            let new_len = if flags.contains(MremapFlags::DONTUNMAP) || self.rng.random_bool(0.5) {
                old_len
            } else {
                (old_len_pages + self.small_len()) * PAGE
            };
            let hint = if self.rng.random_bool(0.8) { self.addr(dst) } else { addr };
            return Op::Mremap { addr, old_len, new_len, flags, new_addr: Some(hint) };
        }
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
        let advice = if self.cfg.families.advice && self.rng.random_bool(0.6) {
            if self.rng.random_bool(0.05) {
                // Unknown advice: just past the known ranges, negative.
                Advice::from_raw([26, 99, 104, -1][self.rng.random_range(0..4)])
            } else {
                // Every advice but hwpoison and soft_offline, which the kernel runner never runs.
                let all: Vec<Advice> = ADVICE_NAMES
                    .iter()
                    .map(|(a, _)| *a)
                    .filter(|a| *a != Advice::HWPOISON && *a != Advice::SOFT_OFFLINE)
                    .collect();
                all[self.rng.random_range(0..all.len())]
            }
        } else {
            BASE_ADVICE[self.rng.random_range(0..BASE_ADVICE.len())]
        };
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

    /// A page range for the lock, seal and sync calls: mostly what the shadow says is mapped, sometimes
    /// unaligned, empty or with a length to round up.
    fn range_call(&mut self) -> (u64, u64) {
        let (p, n) = self.target_range();
        let (mut addr, mut len) = (self.addr(p), n * PAGE);
        match self.rng.random_range(0..20) {
            0 => addr += self.rng.random_range(1..PAGE),
            1 => len = 0,
            2 => len = len - PAGE + self.rng.random_range(1..PAGE),
            _ => self.reshape(p, n),
        }
        (addr, len)
    }

    fn mlock_call(&mut self) -> Op {
        match self.rng.random_range(0..12) {
            0..=3 => {
                let (addr, len) = self.range_call();
                Op::Mlock { addr, len }
            }
            4..=6 => {
                let (addr, len) = self.range_call();
                let flags = match self.rng.random_range(0..10) {
                    0..=4 => 0,
                    5..=8 => 1,
                    _ => [2, 3, 0x8000_0000][self.rng.random_range(0..3)],
                };
                Op::Mlock2 { addr, len, flags }
            }
            7..=10 => {
                let (addr, len) = self.range_call();
                Op::Munlock { addr, len }
            }
            // Sparingly: the whole process.
            _ if self.rng.random_bool(0.4) => Op::Munlockall,
            _ => Op::Mlockall { flags: [1, 3, 5, 7, 2, 6, 4, 0, 8][self.rng.random_range(0..9)] },
        }
    }

    fn msync_call(&mut self) -> Op {
        let (addr, len) = self.range_call();
        let flags = [1, 4, 2, 3, 6, 5, 0, 8][self.rng.random_range(0..8)];
        Op::Msync { addr, len, flags }
    }

    fn mseal_call(&mut self) -> Op {
        let (addr, len) = self.range_call();
        let flags = if self.rng.random_bool(0.9) { 0 } else { [1, 1 << 63][self.rng.random_range(0..2)] };
        Op::Mseal { addr, len, flags }
    }

    fn pkey_call(&mut self) -> Op {
        const KEYS: [i32; 8] = [-1, 0, 1, 2, 15, 16, -2, i32::MAX];
        match self.rng.random_range(0..5) {
            0..=2 => {
                let (addr, len) = self.range_call();
                let key =
                    if self.rng.random_bool(0.5) { -1 } else { KEYS[self.rng.random_range(0..KEYS.len())] };
                Op::PkeyMprotect { addr, len, prot: self.prot(), key }
            }
            3 => {
                let flags =
                    if self.rng.random_bool(0.85) { 0 } else { [1, 1 << 63][self.rng.random_range(0..2)] };
                let rights = [0, 1, 2, 3, 4, 1 << 32][self.rng.random_range(0..6)];
                Op::PkeyAlloc { flags, rights }
            }
            _ => Op::PkeyFree { key: KEYS[self.rng.random_range(0..KEYS.len())] },
        }
    }

    fn ftruncate_call(&mut self) -> Op {
        let fi = self.rng.random_range(0..self.files.len());
        let pages = self.files[fi].1;
        let size = match self.rng.random_range(0..12) {
            0..=2 => self.rng.random_range(0..pages.max(1)) * PAGE,
            3..=5 => (pages + self.rng.random_range(1..=8)) * PAGE,
            6 | 7 => self.rng.random_range(0..pages + 2) * PAGE + self.rng.random_range(1..PAGE),
            8 => 0,
            // Refused or huge: negative off_t (EINVAL), past the file system's limit (EFBIG on ext4), 1 TiB.
            9 => [1 << 63, u64::MAX][self.rng.random_range(0..2)],
            10 => 1 << 50,
            _ => 1 << 40,
        };
        // Steering only: offsets of later mappings aim around the new end.
        self.files[fi].1 = (size / PAGE).min(self.cfg.grid_pages * 2);
        Op::Ftruncate { name: self.files[fi].0.clone(), size }
    }

    // ----- the `contents` family (module docs, "Page contents") -----

    /// A byte for `fill`: mostly non-zero (zero is what fresh pages hold), any value.
    fn byte(&mut self) -> u8 {
        if self.rng.random_bool(0.1) { 0 } else { self.rng.random_range(1..=255) }
    }

    /// A byte range for `fill` and `check` over what the shadow says is mapped: page-aligned mostly,
    /// sometimes starting or ending inside a page.
    fn access_range(&mut self) -> (u64, u64) {
        let (p, n) = self.target_range();
        let (mut addr, mut len) = (self.addr(p), n * PAGE);
        if self.rng.random_bool(0.2) {
            let cut = self.rng.random_range(1..PAGE);
            addr += cut;
            len -= cut;
        }
        if self.rng.random_bool(0.2) {
            len -= self.rng.random_range(0..PAGE.min(len));
        }
        (addr, len)
    }

    /// The page range of `access_range`, aligned (for madvise and mremap).
    fn page_range(&mut self) -> (u64, u64) {
        let (p, n) = self.target_range();
        (self.addr(p), n * PAGE)
    }

    /// One call of the `contents` family: a `fill` or a `check`, or the first call of a scenario whose other
    /// calls follow (`pending`). Calls that need another family (fork, ftruncate, MADV_REMOVE) appear only when
    /// it is on.
    fn contents_call(&mut self) -> Op {
        let b = self.byte();
        let mut seq: Vec<Op> = match self.rng.random_range(0..20) {
            0..=4 => {
                let (addr, len) = self.access_range();
                vec![Op::Fill { addr, len, byte: b }]
            }
            5..=8 => {
                let (addr, len) = self.access_range();
                vec![Op::Check { addr, len }]
            }
            9 | 10 => self.fork_copies(b),
            11 | 12 => self.file_pair(b),
            13 => self.drop_pages(b),
            14 => self.move_filled(b),
            15 => self.fork_advice(b),
            16 => self.truncate_cycle(b),
            17 | 18 => self.below_growsdown(b),
            _ => {
                // touch w keeps the bytes.
                let (addr, len) = self.access_range();
                vec![
                    Op::Fill { addr, len, byte: b },
                    Op::Touch { addr, len, write: true },
                    Op::Check { addr, len },
                ]
            }
        };
        let first = seq.remove(0);
        self.pending.extend(seq);
        first
    }

    /// fill, fork, then in the child check (the parent's bytes, copied on write) and fill again.
    fn fork_copies(&mut self, b: u8) -> Vec<Op> {
        let (addr, len) = self.access_range();
        let (a2, l2) = self.access_range();
        let b2 = self.byte();
        let mut v = vec![Op::Fill { addr, len, byte: b }];
        if self.cfg.fork {
            v.push(Op::Fork);
        }
        v.extend([
            Op::Check { addr, len },
            Op::Fill { addr: a2, len: l2, byte: b2 },
            Op::Check { addr, len },
        ]);
        v
    }

    /// A shared and a private mapping of the same pages of one file: the private one reads the shared one's
    /// bytes until it writes a page of its own.
    fn file_pair(&mut self, b: u8) -> Vec<Op> {
        let fi = self.rng.random_range(0..self.files.len());
        let (name, file_pages) = self.files[fi].clone();
        let n = self.rng.random_range(1..=4u64);
        let off_page = self.rng.random_range(0..file_pages.saturating_sub(n).max(1));
        let (p1, p2) = (self.map_page(n), self.map_page(n));
        let (a1, a2, len) = (self.addr(p1), self.addr(p2), n * PAGE);
        self.set(p1, n, |i| Slot::File(fi, off_page + i));
        self.set(p2, n, |i| Slot::File(fi, off_page + i));
        let file = Some((Fd::Name(name), off_page * PAGE));
        let map = |addr, flags| Op::Mmap {
            addr,
            len,
            prot: Prot::RW,
            flags: flags | MapFlags::FIXED,
            file: file.clone(),
        };
        let (b2, b3) = (self.byte(), self.byte());
        let part = self.rng.random_range(1..=n) * PAGE;
        vec![
            map(a1, MapFlags::SHARED),
            map(a2, MapFlags::PRIVATE),
            Op::Fill { addr: a1, len, byte: b },
            Op::Check { addr: a2, len },
            Op::Fill { addr: a2, len: part, byte: b2 },
            Op::Fill { addr: a1, len, byte: b3 },
            Op::Check { addr: a2, len },
            Op::Check { addr: a1, len },
        ]
    }

    /// fill, drop the pages (DONTNEED, FREE, and REMOVE with the `advice` family), check: anonymous memory
    /// reads zeros (or, after FREE, possibly the old bytes), a private file mapping the file again.
    fn drop_pages(&mut self, b: u8) -> Vec<Op> {
        let (addr, len) = self.page_range();
        let mut advice = vec![Advice::DONTNEED, Advice::FREE];
        if self.cfg.families.advice {
            advice.extend([Advice::REMOVE, Advice::DONTNEED_LOCKED]);
        }
        let advice = advice[self.rng.random_range(0..advice.len())];
        vec![Op::Fill { addr, len, byte: b }, Op::Madvise { addr, len, advice }, Op::Check { addr, len }]
    }

    /// fill a probable VMA, move it (maymove|fixed, sometimes dontunmap) and check both places.
    fn move_filled(&mut self, b: u8) -> Vec<Op> {
        let segs = self.segments();
        let (p, n) =
            if segs.is_empty() { self.target_range() } else { segs[self.rng.random_range(0..segs.len())] };
        let (addr, len) = (self.addr(p), n * PAGE);
        let dst = self.map_page(n);
        let mut flags = MremapFlags::MAYMOVE | MremapFlags::FIXED;
        if self.rng.random_bool(0.4) {
            flags |= MremapFlags::DONTUNMAP;
        }
        let first = self.grid.get(p as usize).copied().unwrap_or(Slot::Anon);
        if !flags.contains(MremapFlags::DONTUNMAP) {
            self.set(p, n, |_| Slot::Free);
        }
        self.set(dst, n, |i| match first {
            Slot::File(f, fp) => Slot::File(f, fp + i),
            _ => Slot::Anon,
        });
        let new_addr = self.addr(dst);
        vec![
            Op::Fill { addr, len, byte: b },
            Op::Mremap { addr, old_len: len, new_len: len, flags, new_addr: Some(new_addr) },
            Op::Check { addr: new_addr, len },
            Op::Check { addr, len },
        ]
    }

    /// fill, WIPEONFORK or DONTFORK, fork, check in the child (zeros, or no mapping).
    fn fork_advice(&mut self, b: u8) -> Vec<Op> {
        let (addr, len) = self.page_range();
        let advice = [Advice::WIPEONFORK, Advice::DONTFORK, Advice::KEEPONFORK, Advice::DOFORK]
            [self.rng.random_range(0..4)];
        let mut v = vec![Op::Fill { addr, len, byte: b }, Op::Madvise { addr, len, advice }];
        if self.cfg.fork {
            v.push(Op::Fork);
        }
        v.push(Op::Check { addr, len });
        v
    }

    /// A shared mapping of a file filled, the file shrunk (to inside a page) and grown back: the bytes past
    /// the shrunk end read as zeros (with the `ftruncate` family; else fill and check only).
    fn truncate_cycle(&mut self, b: u8) -> Vec<Op> {
        let fi = self.rng.random_range(0..self.files.len());
        let (name, _) = self.files[fi].clone();
        let n = self.rng.random_range(1..=4u64);
        let p = self.map_page(n);
        let (addr, len) = (self.addr(p), n * PAGE);
        self.set(p, n, |i| Slot::File(fi, i));
        let flags = if self.rng.random_bool(0.7) { MapFlags::SHARED } else { MapFlags::PRIVATE };
        let mut v = vec![
            Op::Mmap {
                addr,
                len,
                prot: Prot::RW,
                flags: flags | MapFlags::FIXED,
                file: Some((Fd::Name(name.clone()), 0)),
            },
            Op::Fill { addr, len, byte: b },
        ];
        if self.cfg.families.ftruncate {
            let small = self.rng.random_range(0..len);
            let big = len + self.rng.random_range(0..4) * PAGE;
            self.files[fi].1 = big / PAGE;
            v.extend([
                Op::Ftruncate { name: name.clone(), size: small },
                Op::Check { addr, len },
                Op::Ftruncate { name, size: big },
            ]);
        }
        v.push(Op::Check { addr, len });
        v
    }

    /// A growsdown mapping with free pages below it, then accesses just below it (the stack grows) and a
    /// check of the grown range; where the grid has no room below, at a place the shadow picks (growth may
    /// then fail: a neighbour within the stack guard gap).
    fn below_growsdown(&mut self, b: u8) -> Vec<Op> {
        let n = self.rng.random_range(1..=2u64);
        let lowest = (0..self.cfg.grid_pages).find(|&q| self.grid[q as usize] != Slot::Free);
        let room = lowest.unwrap_or(self.cfg.grid_pages);
        let p = if room >= n + 3 { self.rng.random_range(3..=room - n) } else { self.map_page(n).max(3) };
        let prot = [Prot::RW, Prot::RW, Prot::R, Prot::NONE, Prot::RWX][self.rng.random_range(0..5)];
        self.set(p, n, |_| Slot::Anon);
        let addr = self.addr(p);
        let below = self.rng.random_range(1..=3u64);
        let write = self.rng.random_bool(0.5);
        vec![
            Op::Mmap {
                addr,
                len: n * PAGE,
                prot,
                flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED | MapFlags::GROWSDOWN,
                file: None,
            },
            Op::Touch { addr: addr - below * PAGE, len: 1, write },
            Op::Fill { addr: addr - PAGE, len: PAGE, byte: b },
            Op::Check { addr: addr - below * PAGE, len: (n + below) * PAGE },
        ]
    }

    /// The calls of the enabled families, with their weights.
    fn family_calls(&self) -> Vec<(u32, FamilyCall)> {
        let f = self.cfg.families;
        let mut v: Vec<(u32, FamilyCall)> = Vec::new();
        if f.mlock {
            v.push((12, Gen::mlock_call));
        }
        if f.msync {
            v.push((4, Gen::msync_call));
        }
        if f.mseal {
            v.push((2, Gen::mseal_call));
        }
        if f.pkeys {
            v.push((5, Gen::pkey_call));
        }
        if f.ftruncate {
            v.push((3, Gen::ftruncate_call));
        }
        v
    }

    fn call(&mut self) -> Op {
        if let Some(op) = self.pending.pop_front() {
            return op;
        }
        // The `contents` scenarios draw apart from the other families (and only when on: with it off the
        // draws are those of the generator before it existed).
        if self.cfg.families.contents && self.rng.random_bool(0.07) {
            return self.contents_call();
        }
        let family = self.family_calls();
        let op = if !family.is_empty() && self.rng.random_bool(0.15) {
            let total: u32 = family.iter().map(|(w, _)| w).sum();
            let mut pick = self.rng.random_range(0..total);
            let mut chosen = family[0].1;
            for (w, f) in &family {
                if pick < *w {
                    chosen = *f;
                    break;
                }
                pick -= w;
            }
            chosen(self)
        } else {
            self.base_call()
        };
        if self.cfg.families.edges && self.rng.random_bool(0.06) { self.edge(op) } else { op }
    }

    /// A range at the edges (module docs): the op's own start or an edge address, and a small, wrapping or
    /// huge length, as far as `reach` allows.
    fn edge_range(&mut self, addr: u64, reach: Reach) -> (u64, u64) {
        let arena = self.cfg.arena;
        let edges = [
            0,
            1,
            PAGE - 1,
            PAGE,
            2 * PAGE,
            0x10000 - PAGE,
            0x10000,
            TASK_SIZE - PAGE,
            TASK_SIZE,
            TASK_SIZE + PAGE,
            1 << 47,
            1 << 63,
            0u64.wrapping_sub(PAGE),
            u64::MAX,
            arena.end(),
            arena.base - PAGE,
        ];
        let a = if self.rng.random_bool(0.4) { addr } else { edges[self.rng.random_range(0..edges.len())] };
        let small = [0, 1, PAGE - 1, PAGE, 2 * PAGE];
        // A length whose end is exactly 2^64 (0 after wrapping), or one page past it.
        let wrap = [0u64.wrapping_sub(a), 0u64.wrapping_sub(a).wrapping_add(PAGE)];
        let huge = [TASK_SIZE + PAGE, 1 << 63, 0u64.wrapping_sub(PAGE), u64::MAX];
        let huge_ok = match reach {
            Reach::Small => false,
            Reach::Every => a >= TASK_SIZE,
            Reach::Bounded | Reach::Walk => true,
        };
        let len = match self.rng.random_range(0..3) {
            1 if reach != Reach::Small => wrap[self.rng.random_range(0..2)],
            2 if huge_ok => huge[self.rng.random_range(0..huge.len())],
            _ => small[self.rng.random_range(0..small.len())],
        };
        (a, len)
    }

    /// Edge values for one op (module docs). The op keeps its kind; calls with nothing at the edges are kept.
    fn edge(&mut self, op: Op) -> Op {
        const OFFSETS: [u64; 5] = [1 << 44, (1 << 63) - PAGE, 1 << 63, 0u64.wrapping_sub(PAGE), PAGE + 1];
        match op {
            Op::Mmap { addr, len, prot, mut flags, mut file } => {
                let (mut addr, mut len) = (addr, len);
                match self.rng.random_range(0..6) {
                    0 | 1 => (addr, len) = self.edge_range(addr, Reach::Bounded),
                    2 => {
                        let off = OFFSETS[self.rng.random_range(0..OFFSETS.len())];
                        match file.as_mut() {
                            Some((_, o)) => *o = off,
                            None => file = Some((Fd::MinusOne, off)),
                        }
                    }
                    3 => {
                        // A file mapping of a descriptor that is not open.
                        flags -= MapFlags::ANONYMOUS;
                        let fd =
                            if self.rng.random_bool(0.5) { Fd::Name("missing".into()) } else { Fd::MinusOne };
                        file = Some((fd, file.map_or(0, |(_, o)| o)));
                    }
                    4 => {
                        // An anonymous mapping with a descriptor (ignored) and an offset (checked).
                        flags |= MapFlags::ANONYMOUS;
                        let fd = match self.rng.random_range(0..3) {
                            0 => Fd::Name(self.files[0].0.clone()),
                            1 => Fd::Name("missing".into()),
                            _ => Fd::MinusOne,
                        };
                        let off = [0, PAGE, PAGE + 1, 0u64.wrapping_sub(PAGE)][self.rng.random_range(0..4)];
                        file = Some((fd, off));
                    }
                    _ => {
                        flags |= MapFlags::from_bits_retain(
                            [0x80, 0x200, 0x400, 1 << 31][self.rng.random_range(0..4)],
                        )
                    }
                }
                Op::Mmap { addr, len, prot, flags, file }
            }
            Op::Munmap { addr, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Bounded);
                Op::Munmap { addr, len }
            }
            Op::Mprotect { addr, prot, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::protect(prot));
                Op::Mprotect { addr, len, prot }
            }
            Op::PkeyMprotect { addr, prot, key, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::protect(prot));
                Op::PkeyMprotect { addr, len, prot, key }
            }
            Op::Mlock { addr, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Walk);
                Op::Mlock { addr, len }
            }
            Op::Mlock2 { addr, flags, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Walk);
                Op::Mlock2 { addr, len, flags }
            }
            Op::Munlock { addr, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Walk);
                Op::Munlock { addr, len }
            }
            Op::Mseal { addr, flags, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Walk);
                Op::Mseal { addr, len, flags }
            }
            Op::Madvise { addr, advice, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Every);
                Op::Madvise { addr, len, advice }
            }
            Op::Msync { addr, flags, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Every);
                Op::Msync { addr, len, flags }
            }
            Op::Touch { addr, write, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Small);
                Op::Touch { addr, len, write }
            }
            Op::Fill { addr, byte, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Small);
                Op::Fill { addr, len, byte }
            }
            Op::Check { addr, .. } => {
                let (addr, len) = self.edge_range(addr, Reach::Small);
                Op::Check { addr, len }
            }
            Op::Mremap { addr, old_len, new_len, flags, new_addr } => match self.rng.random_range(0..4) {
                0 => {
                    let (addr, old_len) = self.edge_range(addr, Reach::Bounded);
                    Op::Mremap { addr, old_len, new_len, flags, new_addr }
                }
                1 => {
                    let new_len =
                        [TASK_SIZE + PAGE, 1 << 63, 0u64.wrapping_sub(PAGE)][self.rng.random_range(0..3)];
                    Op::Mremap { addr, old_len, new_len, flags, new_addr }
                }
                2 => {
                    let dst = [0, PAGE, TASK_SIZE - PAGE, TASK_SIZE, 0u64.wrapping_sub(PAGE)]
                        [self.rng.random_range(0..5)];
                    Op::Mremap {
                        addr,
                        old_len,
                        new_len: new_len.min(2 * PAGE),
                        flags: flags | MremapFlags::MAYMOVE | MremapFlags::FIXED,
                        new_addr: Some(dst),
                    }
                }
                _ => {
                    let flags = flags
                        | MremapFlags::from_bits_retain([8, 0x10, 1 << 31][self.rng.random_range(0..3)]);
                    let new_addr = if flags.contains(MremapFlags::FIXED) {
                        Some(new_addr.unwrap_or(0))
                    } else {
                        new_addr
                    };
                    Op::Mremap { addr, old_len, new_len, flags, new_addr }
                }
            },
            Op::Ftruncate { name, size } => {
                if self.rng.random_bool(0.5) {
                    Op::Ftruncate { name: "missing".into(), size }
                } else {
                    Op::Ftruncate {
                        name,
                        size: [u64::MAX, (1 << 63) - 1, 1 << 62][self.rng.random_range(0..3)],
                    }
                }
            }
            other => other,
        }
    }

    fn base_call(&mut self) -> Op {
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
/// mappings can run past its end; with the `ftruncate` family now and then a third of a huge or refused size),
/// then `cfg.calls` calls with a `maps` op roughly every 12 calls.
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
        pending: Default::default(),
    };
    let mut ops: Vec<Op> =
        g.files.iter().map(|(n, pages)| Op::File { name: n.clone(), size: pages * PAGE }).collect();
    if cfg.families.ftruncate && g.rng.random_bool(0.3) {
        // A third file of a huge (sparse), unaligned or refused size: a refused one stays undeclared for the
        // kernel (EBADF wherever it is used).
        let size = [1 << 40, 4 * PAGE + 1, 1 << 63, 1 << 50][g.rng.random_range(0..4)];
        ops.push(Op::File { name: "f2".into(), size });
        g.files.push(("f2".into(), (size / PAGE).min(grid_pages * 2)));
    }
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
    use crate::ast::{MMAP_FLAG_NAMES, PKEY_RIGHTS_NAMES};

    fn base() -> GenConfig {
        GenConfig { families: Families::NONE, ..GenConfig::default() }
    }

    fn fnv(s: &str) -> u64 {
        s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    }

    #[test]
    fn deterministic_and_parseable() {
        for cfg in [GenConfig::default(), base()] {
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
    }

    /// With every family off the generator is the one that existed before the families: the scripts of 64
    /// seeds in two configurations, as that generator printed them (their FNV-1a hash and length, recorded
    /// from it), so the differential gate's base batches keep running the same scripts.
    #[test]
    fn families_off_is_the_base_generator() {
        let mut all = String::new();
        for seed in 0..64 {
            all.push_str(&generate(seed, &base()).to_text());
            all.push_str(
                &generate(seed, &GenConfig { fork: true, calls: 60, grid_pages: 16, ..base() }).to_text(),
            );
        }
        assert_eq!((fnv(&all), all.len()), (0xd315_0c6a_56a5_adab, 382_846));
    }

    #[test]
    fn covers_the_edge_cases() {
        let cfg = GenConfig { calls: 400, ..base() };
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

    /// Every op of `seeds` scripts of `cfg`.
    fn ops(cfg: &GenConfig, seeds: core::ops::Range<u64>) -> Vec<Op> {
        seeds.flat_map(|seed| generate(seed, cfg).lines.into_iter().map(|l| l.op)).collect()
    }

    #[test]
    fn every_family_is_reached() {
        let cfg = GenConfig { calls: 200, ..GenConfig::default() };
        let all = ops(&cfg, 0..60);
        let has = |what: &str, f: &dyn Fn(&Op) -> bool| assert!(all.iter().any(f), "never generated: {what}");
        // exec_prot
        has(
            "--x",
            &|o| matches!(o, Op::Mmap { prot, .. } | Op::Mprotect { prot, .. } if *prot == Prot::EXEC),
        );
        has("-wx", &|o| matches!(o, Op::Mprotect { prot, .. } if *prot == Prot::WRITE | Prot::EXEC));
        // advice: every one but hwpoison and soft_offline, unknown values; never those two.
        for (a, n) in ADVICE_NAMES {
            let seen = all.iter().any(|o| matches!(o, Op::Madvise { advice, .. } if advice == a));
            let never = *a == Advice::HWPOISON || *a == Advice::SOFT_OFFLINE;
            assert_eq!(seen, !never, "advice {n}");
        }
        has("unknown advice", &|o| matches!(o, Op::Madvise { advice, .. } if advice.name().is_none()));
        // The new calls.
        has("mlock", &|o| matches!(o, Op::Mlock { .. }));
        has("mlock2 onfault", &|o| matches!(o, Op::Mlock2 { flags: 1, .. }));
        has("mlock2 unknown flag", &|o| matches!(o, Op::Mlock2 { flags, .. } if *flags > 1));
        has("munlock", &|o| matches!(o, Op::Munlock { .. }));
        has("mlockall current|future", &|o| matches!(o, Op::Mlockall { flags: 3 }));
        has("mlockall refused flags", &|o| matches!(o, Op::Mlockall { flags: 0 | 4 | 8 }));
        has("munlockall", &|o| matches!(o, Op::Munlockall));
        has("msync sync", &|o| matches!(o, Op::Msync { flags: 4, .. }));
        has("msync async|sync", &|o| matches!(o, Op::Msync { flags: 5, .. }));
        has("mseal", &|o| matches!(o, Op::Mseal { flags: 0, .. }));
        has("mseal flags", &|o| matches!(o, Op::Mseal { flags, .. } if *flags != 0));
        has("pkey_mprotect -1", &|o| matches!(o, Op::PkeyMprotect { key: -1, .. }));
        has("pkey_mprotect key", &|o| matches!(o, Op::PkeyMprotect { key: 1, .. }));
        for (r, n) in PKEY_RIGHTS_NAMES {
            has(n, &|o| matches!(o, Op::PkeyAlloc { rights, .. } if rights & r != 0));
        }
        has("pkey_free", &|o| matches!(o, Op::PkeyFree { .. }));
        has(
            "ftruncate smaller",
            &|o| matches!(o, Op::Ftruncate { size, .. } if *size > 0 && *size < 8 * PAGE),
        );
        has(
            "ftruncate larger",
            &|o| matches!(o, Op::Ftruncate { size, .. } if *size > 64 * PAGE && *size < 1 << 20),
        );
        has(
            "ftruncate unaligned",
            &|o| matches!(o, Op::Ftruncate { size, .. } if size % PAGE != 0 && *size < 1 << 40),
        );
        has("ftruncate negative", &|o| matches!(o, Op::Ftruncate { size, .. } if *size >= 1 << 63));
        has("ftruncate huge", &|o| matches!(o, Op::Ftruncate { size: 0x4_0000_0000_0000, .. }));
        has("ftruncate of no file", &|o| matches!(o, Op::Ftruncate { name, .. } if name == "missing"));
        has("a file of a refused size", &|o| matches!(o, Op::File { size, .. } if *size >= 1 << 63));
        has("a huge file", &|o| matches!(o, Op::File { size: 0x100_0000_0000, .. }));
        has(
            "a mapping of the third file",
            &|o| matches!(o, Op::Mmap { file: Some((Fd::Name(n), _)), .. } if n == "f2"),
        );
        // mmap_flags: every named flag, unknown bits, odd PROT bits.
        for (f, n) in MMAP_FLAG_NAMES {
            has(n, &|o| matches!(o, Op::Mmap { flags, .. } if flags.contains(*f)));
        }
        let known = MMAP_FLAG_NAMES.iter().fold(MapFlags::empty(), |a, (f, _)| a | *f);
        has("unknown mmap bits", &|o| matches!(o, Op::Mmap { flags, .. } if !known.contains(*flags)));
        for p in [Prot::SEM, Prot::GROWSDOWN, Prot::GROWSUP] {
            has(
                "PROT bit",
                &|o| matches!(o, Op::Mprotect { prot, .. } | Op::Mmap { prot, .. } if prot.contains(p)),
            );
        }
        has(
            "unknown PROT bit",
            &|o| matches!(o, Op::Mprotect { prot, .. } if !(Prot::ACCESS | Prot::SEM | Prot::GROWSDOWN | Prot::GROWSUP).contains(*prot)),
        );
        // hints
        has(
            "NEWADDR without fixed",
            &|o| matches!(o, Op::Mremap { flags, new_addr: Some(_), .. } if !flags.contains(MremapFlags::FIXED)),
        );
        // edges
        has("address 0", &|o| matches!(o, Op::Munmap { addr: 0, .. } | Op::Mmap { addr: 0, .. }));
        has(
            "address near TASK_SIZE",
            &|o| matches!(o, Op::Mlock { addr, .. } | Op::Mprotect { addr, .. } if addr.abs_diff(TASK_SIZE) <= PAGE),
        );
        has(
            "address near 2^64",
            &|o| matches!(o, Op::Munmap { addr, .. } | Op::Madvise { addr, .. } if *addr >= 0u64.wrapping_sub(PAGE)),
        );
        has(
            "length near 2^64",
            &|o| matches!(o, Op::Munmap { len, .. } | Op::Mprotect { len, .. } if *len >= 0u64.wrapping_sub(PAGE)),
        );
        has(
            "wrapping range",
            &|o| matches!(o, Op::Madvise { addr, len, .. } if *addr > 0 && addr.checked_add(*len).is_none()),
        );
        has("huge offset", &|o| matches!(o, Op::Mmap { file: Some((_, off)), .. } if *off >= 1 << 44));
        has(
            "fd of no file",
            &|o| matches!(o, Op::Mmap { file: Some((Fd::Name(n), _)), .. } if n == "missing"),
        );
        has("fd=-1", &|o| matches!(o, Op::Mmap { file: Some((Fd::MinusOne, _)), .. }));
        has(
            "anon with fd",
            &|o| matches!(o, Op::Mmap { flags, file: Some(_), .. } if flags.contains(MapFlags::ANONYMOUS)),
        );
        has("unknown mremap bits", &|o| matches!(o, Op::Mremap { flags, .. } if flags.bits() > 7));
        // contents
        has("fill", &|o| matches!(o, Op::Fill { .. }));
        has("fill unaligned", &|o| matches!(o, Op::Fill { addr, .. } if addr % PAGE != 0));
        has("check", &|o| matches!(o, Op::Check { .. }));
        has("check unaligned", &|o| matches!(o, Op::Check { len, .. } if len % PAGE != 0));
        // Every generated script parses back, and never asks for what the kernel runner refuses outright.
        for seed in 0..60 {
            let s = generate(seed, &cfg);
            assert_eq!(Script::parse(&s.to_text()).unwrap(), s);
        }
    }

    #[test]
    fn the_base_mix_stays_dominant_and_mlockall_is_rare() {
        let cfg = GenConfig { calls: 200, ..GenConfig::default() };
        let all = ops(&cfg, 0..50);
        let calls = all.iter().filter(|o| !matches!(o, Op::File { .. } | Op::Maps)).count();
        let new = all
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    Op::Mlock { .. }
                        | Op::Mlock2 { .. }
                        | Op::Munlock { .. }
                        | Op::Mlockall { .. }
                        | Op::Munlockall
                        | Op::Mseal { .. }
                        | Op::Msync { .. }
                        | Op::PkeyAlloc { .. }
                        | Op::PkeyFree { .. }
                        | Op::PkeyMprotect { .. }
                        | Op::Ftruncate { .. }
                )
            })
            .count();
        let mlockall = all.iter().filter(|o| matches!(o, Op::Mlockall { .. })).count();
        assert!(new * 100 / calls <= 20, "{new} of {calls} calls from the families");
        assert!(new * 100 / calls >= 10, "{new} of {calls} calls from the families");
        assert!(mlockall > 0 && mlockall * 100 / calls < 1, "{mlockall} mlockall of {calls}");
        let mmaps = all.iter().filter(|o| matches!(o, Op::Mmap { .. })).count();
        assert!(mmaps * 100 / calls >= 20, "{mmaps} mmap of {calls}");
    }

    /// The `contents` scenarios (module docs, "Page contents") all appear, as consecutive calls.
    #[test]
    fn contents_scenarios_are_generated() {
        let cfg = GenConfig { calls: 200, fork: true, ..GenConfig::default() };
        let scripts: Vec<Vec<Op>> = (0..40)
            .map(|seed| {
                generate(seed, &cfg).lines.into_iter().map(|l| l.op).filter(|o| *o != Op::Maps).collect()
            })
            .collect();
        let has = |what: &str, f: &dyn Fn(&[Op]) -> bool| {
            assert!(scripts.iter().any(|s| s.windows(4).any(f)), "never generated: {what}");
        };
        has(
            "fill, fork, check",
            &|w| matches!(w, [Op::Fill { addr, .. }, Op::Fork, Op::Check { addr: c, .. }, Op::Fill { .. }] if addr == c),
        );
        has("shared and private mappings of one file", &|w| {
            matches!(w, [Op::Mmap { flags: f1, file: Some((x, o1)), .. }, Op::Mmap { flags: f2, file: Some((y, o2)), .. }, Op::Fill { .. }, Op::Check { .. }]
                if f1.contains(MapFlags::SHARED) && f2.contains(MapFlags::PRIVATE) && x == y && o1 == o2)
        });
        for advice in [Advice::DONTNEED, Advice::FREE, Advice::REMOVE] {
            has(
                "fill, drop, check",
                &|w| matches!(w, [Op::Fill { .. }, Op::Madvise { advice: a, .. }, Op::Check { .. }, _] if *a == advice),
            );
        }
        has("mremap move and dontunmap", &|w| {
            matches!(w, [Op::Fill { .. }, Op::Mremap { flags, .. }, Op::Check { .. }, Op::Check { .. }]
                if flags.contains(MremapFlags::DONTUNMAP))
        });
        has("mremap move", &|w| {
            matches!(w, [Op::Fill { .. }, Op::Mremap { flags, .. }, Op::Check { .. }, Op::Check { .. }]
                if !flags.contains(MremapFlags::DONTUNMAP))
        });
        for advice in [Advice::WIPEONFORK, Advice::DONTFORK] {
            has(
                "fill, fork advice, fork, check",
                &|w| matches!(w, [Op::Fill { .. }, Op::Madvise { advice: a, .. }, Op::Fork, Op::Check { .. }] if *a == advice),
            );
        }
        has("ftruncate shrinking then growing", &|w| {
            matches!(w, [Op::Ftruncate { size: a, .. }, Op::Check { .. }, Op::Ftruncate { size: b, .. }, Op::Check { .. }]
                if a < b)
        });
        has("touch below a growsdown mapping", &|w| {
            matches!(w, [Op::Mmap { addr, flags, .. }, Op::Touch { addr: t, .. }, Op::Fill { .. }, Op::Check { .. }]
                if flags.contains(MapFlags::GROWSDOWN) && t < addr)
        });
        has(
            "fill, touch w, check",
            &|w| matches!(w, [Op::Fill { addr, .. }, Op::Touch { addr: t, write: true, .. }, Op::Check { .. }, _] if addr == t),
        );
        // Without fork, no scenario forks; the same seed is the same script.
        let nofork = GenConfig { fork: false, ..cfg };
        assert!(!(0..40).any(|seed| generate(seed, &nofork).lines.iter().any(|l| l.op == Op::Fork)));
        assert_eq!(generate(3, &cfg), generate(3, &cfg));
    }

    /// Each switch removes its family and nothing else changes kind.
    #[test]
    fn each_switch_removes_its_family() {
        type Check = fn(&Op) -> bool;
        let checks: [(&str, Check); 11] = [
            (
                "exec_prot",
                |o| matches!(o, Op::Mmap { prot, .. } | Op::Mprotect { prot, .. } if *prot == Prot::EXEC || *prot == Prot::WRITE | Prot::EXEC),
            ),
            ("advice", |o| matches!(o, Op::Madvise { advice, .. } if !BASE_ADVICE.contains(advice))),
            ("mlock", |o| {
                matches!(
                    o,
                    Op::Mlock { .. }
                        | Op::Mlock2 { .. }
                        | Op::Munlock { .. }
                        | Op::Mlockall { .. }
                        | Op::Munlockall
                ) || matches!(o, Op::Mmap { flags, .. } if flags.contains(MapFlags::LOCKED))
            }),
            ("msync", |o| matches!(o, Op::Msync { .. })),
            ("mseal", |o| matches!(o, Op::Mseal { .. })),
            ("pkeys", |o| matches!(o, Op::PkeyAlloc { .. } | Op::PkeyFree { .. } | Op::PkeyMprotect { .. })),
            ("ftruncate", |o| {
                matches!(o, Op::Ftruncate { .. }) || matches!(o, Op::File { name, .. } if name == "f2")
            }),
            ("mmap_flags", |o| {
                matches!(o, Op::Mmap { flags, .. } if flags.intersects(MapFlags::HUGETLB | MapFlags::STACK | MapFlags::BELOW_2G | MapFlags::SYNC))
                    || matches!(o, Op::Mprotect { prot, .. } | Op::Mmap { prot, .. } if !Prot::ACCESS.contains(*prot))
            }),
            (
                "hints",
                |o| matches!(o, Op::Mremap { flags, new_addr: Some(_), .. } if !flags.contains(MremapFlags::FIXED)),
            ),
            (
                "edges",
                |o| matches!(o, Op::Munmap { addr, .. } | Op::Touch { addr, .. } if !Arena::default().contains(*addr)),
            ),
            ("contents", |o| matches!(o, Op::Fill { .. } | Op::Check { .. })),
        ];
        for (name, check) in checks {
            let mut fam = Families::ALL;
            fam.set(name, false).unwrap();
            assert_eq!(fam.off(), vec![name]);
            let cfg = GenConfig { calls: 200, families: fam, ..GenConfig::default() };
            assert!(!ops(&cfg, 0..30).iter().any(check), "{name} off, but generated");
            assert!(
                ops(&GenConfig { calls: 200, ..GenConfig::default() }, 0..30).iter().any(check),
                "{name} on, but never generated"
            );
        }
        assert!(Families::ALL.clone().set("bogus", false).unwrap_err().contains("known: exec_prot"));
        assert_eq!(Families::NONE.off().len(), Families::NAMES.len());
        assert!(Families::ALL.off().is_empty());
    }

    /// Whether `[start, end)` meets the part of the address space where the kernel runner's own memory may
    /// lie: above the first few pages, below the last pages under TASK_SIZE, away from the arena and the
    /// pages just around it (which only the script maps, and the runner lets it use them).
    fn runner_space(start: u64, end: u64) -> bool {
        let arena = Arena::default();
        let (lo, hi) = (0x20000, TASK_SIZE - 2 * PAGE);
        let overlaps = |a: u64, b: u64| a < end.min(hi) && b > start.max(lo);
        start < end && (overlaps(lo, arena.base - PAGE) || overlaps(arena.end() + 4 * PAGE, hi))
    }

    /// No generated call asks the kernel to act on the runner's own memory (the runner's guard would refuse
    /// the script): every range a call acts on stays off [`runner_space`], by how each call treats its range.
    #[test]
    fn generated_ranges_keep_off_the_runner() {
        let cfg = GenConfig { calls: 200, fork: true, ..GenConfig::default() };
        let end_of = |a: u64, l: u64| a.checked_add(l);
        for op in ops(&cfg, 0..200) {
            let bad = match op {
                // Every page of the range (no huge lengths unless above TASK_SIZE or wrapping).
                Op::Madvise { addr, len, .. }
                | Op::Msync { addr, len, .. }
                | Op::Touch { addr, len, .. }
                | Op::Fill { addr, len, .. }
                | Op::Check { addr, len } => {
                    end_of(addr, len).is_some_and(|e| runner_space(addr & !(PAGE - 1), e))
                }
                // Bounded by TASK_SIZE.
                Op::Munmap { addr, len } | Op::Mremap { addr, old_len: len, .. } => {
                    end_of(addr, len).is_some_and(|e| e <= TASK_SIZE && runner_space(addr, e))
                }
                Op::Mmap { addr, len, flags, .. }
                    if flags.intersects(MapFlags::FIXED | MapFlags::FIXED_NOREPLACE) =>
                {
                    end_of(addr, len).is_some_and(|e| e <= TASK_SIZE && runner_space(addr, e))
                }
                // Walks from the start: the start must be off the runner (growsdown: the whole range).
                Op::Mprotect { addr, len, prot } | Op::PkeyMprotect { addr, len, prot, .. }
                    if prot.contains(Prot::GROWSDOWN) =>
                {
                    end_of(addr, len).is_some_and(|e| runner_space(addr, e))
                }
                Op::Mprotect { addr, .. }
                | Op::PkeyMprotect { addr, .. }
                | Op::Mlock { addr, .. }
                | Op::Mlock2 { addr, .. }
                | Op::Munlock { addr, .. }
                | Op::Mseal { addr, .. } => {
                    let page = addr & !(PAGE - 1);
                    runner_space(page, page.saturating_add(PAGE))
                }
                Op::Brk { addr } => addr != 0 && !Arena::default().contains(addr),
                _ => false,
            };
            let fixed_dst = match &op {
                Op::Mremap { new_addr: Some(d), new_len, flags, .. }
                    if flags.contains(MremapFlags::FIXED) =>
                {
                    end_of(*d, *new_len).is_some_and(|e| e <= TASK_SIZE && runner_space(*d, e))
                }
                _ => false,
            };
            assert!(!bad && !fixed_dst, "reaches the runner's memory: {op}");
        }
    }
}
