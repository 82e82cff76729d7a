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
//! NEWADDR without `fixed`), `edges` (addresses around 0, mmap_min_addr, TASK_SIZE and 2^64, lengths near
//! 2^64 and ranges that wrap, huge file offsets, unknown flag bits, descriptors that are not open, file
//! mappings without `fd=`, anonymous mappings with `fd=`/`off=`) and `contents` (`fill` and `check` alone and in scenarios: below, "Page
//! contents"). The calls of the first ten take about 15% of the calls when every family is on, `fill` and
//! `check` about as many again (with their scenarios' other calls), so the merge/split mix stays dominant.
//! With every family off the generator draws exactly as it did before the families existed: the same seed
//! gives the same script. `contents` draws only when it is on, so switching it off gives the scripts of the
//! generator before it existed, whatever the other switches.
//!
//! # The `/proc` readers
//!
//! The `proc` family (about 6% of the draws, drawn apart from the others and only when on) reads smaps and
//! queries PROCMAP_QUERY: an `smaps` of the arena or of the VMA at a grid address; a `query` at a grid
//! address with any combination of the six flags (`covering_or_next` in about half), now and then an unknown
//! flag bit, a struct size other than 104 (too small, cut short, larger with a zero tail, larger than a page)
//! or a small name buffer; or a sequence that fills a range (as the `contents` scenarios do) and then changes
//! its pages before an `smaps`: a read of untouched pages (the zero page), `touch w`, DONTNEED, FREE
//! (sometimes followed by a write that makes a page dirty again), mlock (with the `mlock` family), fork (with
//! [`GenConfig::fork`]: the child's view of the shared pages, then its own copies), or a shared and a private
//! mapping of one file.
//!
//! # Page contents
//!
//! The `contents` family writes and reads page contents with `fill` and `check` (the format reference,
//! `crate::ast`, "Memory accesses"), so that a run compares bytes as well as results and maps. About 7% of
//! the draws start one of its calls: a single fill or check of a range the shadow says is mapped (aligned or
//! not; with the `edges` family sometimes at edge values, as `touch`), or a *scenario*, a short sequence of
//! calls that follow one another in the script (queued, returned before any new draw; the script's last
//! scenario may be cut short by its end). A scenario's range is half the time a fresh `rw-` mapping made for
//! it (private or shared, anonymous or of a file), else one the shadow already has, whatever its protection
//! (so fills fault too). The scenarios:
//!
//! - copy-on-write across `fork` (with [`GenConfig::fork`]): fill, fork, check in the child, fill part of
//!   the range, check; sometimes a second fork and check. `fork` continues the script in the child and the
//!   parent only waits (the kernel runner, `vmspace_linux::replay`), so what the parent sees after a fork is
//!   not observable: a scenario checks the child's view of the parent's bytes and the child's own copies;
//! - a shared and a private mapping of the same file pages: the private one reads the shared one's bytes
//!   until it writes a page of its own;
//! - fill, drop pages, check: DONTNEED and FREE (sometimes with a write after it), and with the `advice`
//!   family REMOVE, DONTNEED_LOCKED, COLD, PAGEOUT;
//! - fill, then mremap: a move with `maymove|fixed` (sometimes `dontunmap`), a growth in place, a growth
//!   that moves; check the new place and the old;
//! - fill, WIPEONFORK / DONTFORK / KEEPONFORK / DOFORK, fork, check;
//! - a file mapping filled; with the `ftruncate` family the file shrunk to inside the range, checked
//!   (SIGBUS beyond the end), written beyond the end, grown back to at least its old size, checked;
//! - a growsdown mapping with free pages below it, touched and filled below (the stack grows), checked over
//!   the grown range;
//! - fill, mprotect part of the range `r--`, `r-x` or `---`, fill again (SIGSEGV at that part), check,
//!   mprotect back to `rw-`, fill, check;
//! - fill, `touch w`, check (a touch keeps the bytes).
//!
//! Every scenario's calls are ordinary calls: the shadow follows them as it follows the rest.
//!
//! What the live kernel answers must not depend on chance. Lazily freeable pages (MADV_FREE'd and not
//! written since, or the pages of a MAP_DROPPABLE mapping) keep their bytes until reclaim discards them;
//! MADV_PAGEOUT discards those it finds, and which it finds depends on the CPU the earlier calls ran on
//! (per-CPU LRU batches that `mm/madvise.c: madvise_pageout`'s `lru_add_drain` empties on its own CPU
//! only). So with the family on, once a generated call may have left such pages (any MADV_FREE, any
//! droppable mapping), every later PAGEOUT becomes COLD (which moves pages between LRU lists and changes no
//! byte). Memory pressure could still reclaim lazily free pages during a run; the differential runs assume
//! none (a short script on a machine with free memory), as the engine does.
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
    /// The `/proc` readers: `smaps` and `query` (PROCMAP_QUERY), alone and after the calls that change pages
    /// (module docs, "The `/proc` readers").
    pub proc: bool,
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
        proc: true,
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
        proc: false,
    };
    /// The families' names, as [`Families::set`] takes them.
    pub const NAMES: [&'static str; 12] = [
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
        "proc",
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
            "proc" => &mut self.proc,
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
    /// Whether a call so far may have left lazily freeable pages (MADV_FREE, a droppable mapping): from then
    /// on, with the `contents` family on, PAGEOUT becomes COLD (module docs, "Page contents").
    lazy_free: bool,
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

    // ----- the `proc` family (module docs, "The `/proc` readers") -----

    /// A `query` at an address of the grid (a page start or inside one) with a random subset of the known
    /// flags, sometimes an unknown bit, a short or long struct, or a small name buffer.
    fn query_op(&mut self) -> Op {
        let (p, n) = self.target_range();
        let k = self.rng.random_range(0..n.max(1));
        let mut addr = self.addr(p + k);
        if self.rng.random_bool(0.2) {
            addr += self.rng.random_range(1..PAGE);
        }
        let mut flags = self.rng.random_range(0..0x40u64);
        if self.rng.random_bool(0.4) {
            flags |= 0x10;
        }
        if self.rng.random_bool(0.05) {
            flags |= 0x40 << self.rng.random_range(0..4);
        }
        // Sizes that cut through `vma_name_addr` (89..=95) would pass part of the runner's buffer address.
        const SIZES: [u64; 10] = [0, 16, 23, 24, 32, 80, 84, 96, 200, 4097];
        let size =
            if self.rng.random_bool(0.12) { SIZES[self.rng.random_range(0..SIZES.len())] } else { 104 };
        // Buffers that every name fits (4096) or none does (1, and 0: no name): the kernel's paths of the
        // script's files are longer than the engine's, so a buffer in between would tell them apart.
        const NAMES: [u32; 3] = [0, 1, 4096];
        let name =
            if self.rng.random_bool(0.2) { NAMES[self.rng.random_range(0..NAMES.len())] } else { 4096 };
        if name != 4096 {
            // With covering_or_next the answer may be one of the runner's VMAs beyond the arena, whose long
            // path a short buffer refuses (ENAMETOOLONG) where the engine finds nothing: keep to the arena.
            flags &= !0x10;
        }
        Op::Query { addr, flags, size, name }
    }

    /// An `smaps` of the whole arena, or of the VMA at a grid address.
    fn smaps_op(&mut self) -> Op {
        if self.rng.random_bool(0.5) {
            Op::Smaps { addr: None }
        } else {
            let (p, n) = self.target_range();
            let k = self.rng.random_range(0..n.max(1));
            Op::Smaps { addr: Some(self.addr(p + k)) }
        }
    }

    /// One call of the `proc` family: an `smaps` or a `query`, or the first call of a sequence that changes
    /// pages and reads smaps after it (`pending`): writes and reads (the zero page), DONTNEED, FREE (and a
    /// write after it), mlock (with the `mlock` family), fork (with [`GenConfig::fork`]), a shared and a
    /// private mapping of one file.
    fn proc_call(&mut self) -> Op {
        let mut seq: Vec<Op> = match self.rng.random_range(0..16) {
            0..=3 => vec![self.smaps_op()],
            4..=7 => vec![self.query_op()],
            k => {
                let b = self.byte();
                let (mut v, p, n) = self.filled_source(b);
                let addr = self.addr(p);
                let (sp, sn) = self.sub_pages(p, n);
                let (sa, sl) = (self.addr(sp), sn * PAGE);
                match k {
                    8 => v.extend([Op::Touch { addr: sa, len: sl, write: false }]),
                    9 => v.extend([Op::Madvise { addr: sa, len: sl, advice: Advice::DONTNEED }]),
                    10 => {
                        v.push(Op::Madvise { addr: sa, len: sl, advice: Advice::FREE });
                        if self.rng.random_bool(0.5) {
                            v.push(Op::Smaps { addr: Some(addr) });
                            v.push(Op::Touch { addr: sa, len: PAGE, write: true });
                        }
                    }
                    11 if self.cfg.families.mlock => v.push(Op::Mlock { addr: sa, len: sl }),
                    12 if self.cfg.fork => {
                        v.push(Op::Fork);
                        v.push(Op::Smaps { addr: Some(addr) });
                        v.push(Op::Fill { addr: sa, len: sl, byte: b ^ 1 });
                    }
                    13 => {
                        v.extend(self.file_pair(b));
                    }
                    _ => v.push(Op::Touch { addr: sa, len: sl, write: true }),
                }
                v.push(if self.rng.random_bool(0.7) {
                    Op::Smaps { addr: Some(addr) }
                } else {
                    Op::Smaps { addr: None }
                });
                if self.rng.random_bool(0.3) {
                    v.push(Op::Query { addr, flags: 0, size: 104, name: 4096 });
                }
                v
            }
        };
        if !self.cfg.families.contents {
            // Without the `contents` family the sequences write with `touch w` instead of `fill` and read
            // with `touch r` instead of `check`.
            for op in &mut seq {
                match *op {
                    Op::Fill { addr, len, .. } => *op = Op::Touch { addr, len, write: true },
                    Op::Check { addr, len } => *op = Op::Touch { addr, len, write: false },
                    _ => {}
                }
            }
        }
        let first = seq.remove(0);
        self.pending.extend(seq);
        first
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

    /// A range a scenario fills and follows, with the calls that fill it: half the time a fresh writable
    /// mapping made for it (`fixed` at a place [`Gen::map_page`] picks: private or shared, anonymous or of a
    /// file), else a probable VMA of the shadow (a segment) or any [`Gen::target_range`], whatever its
    /// protection. Returns the calls (an optional mmap, then a fill of the whole range), the first page and the
    /// pages.
    fn filled_source(&mut self, b: u8) -> (Vec<Op>, u64, u64) {
        let mut v = Vec::new();
        let (p, n) = if self.rng.random_bool(0.5) {
            let n = self.rng.random_range(1..=6u64);
            let p = self.map_page(n);
            let (flags, file) = match self.rng.random_range(0..10) {
                0..=5 => (MapFlags::PRIVATE | MapFlags::ANONYMOUS, None),
                6 | 7 => (MapFlags::SHARED | MapFlags::ANONYMOUS, None),
                k => {
                    let fi = self.rng.random_range(0..self.files.len());
                    let off_page = self.rng.random_range(0..self.files[fi].1.max(1));
                    self.set(p, n, |i| Slot::File(fi, off_page + i));
                    let ty = if k == 8 { MapFlags::PRIVATE } else { MapFlags::SHARED };
                    (ty, Some((Fd::Name(self.files[fi].0.clone()), off_page * PAGE)))
                }
            };
            if file.is_none() {
                self.set(p, n, |_| Slot::Anon);
            }
            let addr = self.addr(p);
            v.push(Op::Mmap { addr, len: n * PAGE, prot: Prot::RW, flags: flags | MapFlags::FIXED, file });
            (p, n)
        } else {
            let segs = self.segments();
            if segs.is_empty() || self.rng.random_bool(0.3) {
                self.target_range()
            } else {
                segs[self.rng.random_range(0..segs.len())]
            }
        };
        v.push(Op::Fill { addr: self.addr(p), len: n * PAGE, byte: b });
        (v, p, n)
    }

    /// A sub-range of `n` pages from `p`, as (first page, pages): the head, the tail or the middle.
    fn sub_pages(&mut self, p: u64, n: u64) -> (u64, u64) {
        let k = self.rng.random_range(1..=n.max(1));
        match self.rng.random_range(0..3) {
            0 => (p, k),
            1 => (p + n - k.min(n), k.min(n)),
            _ => {
                let a = self.rng.random_range(0..n.max(1));
                (p + a, k.min(n - a).max(1))
            }
        }
    }

    /// One call of the `contents` family: a `fill` or a `check`, or the first call of a scenario whose other
    /// calls follow (`pending`). Calls that need another family (ftruncate; REMOVE, DONTNEED_LOCKED, COLD,
    /// PAGEOUT) or `fork` appear only when it is on.
    fn contents_call(&mut self) -> Op {
        let b = self.byte();
        let mut seq: Vec<Op> = match self.rng.random_range(0..24) {
            0..=3 => {
                let (addr, len) = self.access_range();
                vec![Op::Fill { addr, len, byte: b }]
            }
            4..=7 => {
                let (addr, len) = self.access_range();
                vec![Op::Check { addr, len }]
            }
            8 | 9 => self.fork_copies(b),
            10 | 11 => self.file_pair(b),
            12 | 13 => self.drop_pages(b),
            14 | 15 => self.remap_filled(b),
            16 => self.fork_advice(b),
            17 | 18 => self.truncate_cycle(b),
            19 | 20 => self.below_growsdown(b),
            21 | 22 => self.protect_then_write(b),
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

    /// Copy-on-write across fork: fill, `fork` (with [`GenConfig::fork`]), then in the child check (the
    /// parent's bytes), fill part of the range (the child's own copies; a shared mapping's object) and check
    /// again; sometimes a second fork whose child checks the first child's bytes.
    fn fork_copies(&mut self, b: u8) -> Vec<Op> {
        let (mut v, p, n) = self.filled_source(b);
        let (addr, len) = (self.addr(p), n * PAGE);
        let (a2, l2) = {
            let (sp, sn) = self.sub_pages(p, n);
            let (mut a, mut l) = (self.addr(sp), sn * PAGE);
            if self.rng.random_bool(0.3) {
                a += self.rng.random_range(1..PAGE);
                l -= self.rng.random_range(PAGE / 2..PAGE);
            }
            (a, l)
        };
        let b2 = self.byte();
        if self.cfg.fork {
            v.push(Op::Fork);
        }
        v.extend([
            Op::Check { addr, len },
            Op::Fill { addr: a2, len: l2, byte: b2 },
            Op::Check { addr, len },
        ]);
        if self.cfg.fork && self.rng.random_bool(0.3) {
            v.extend([Op::Fork, Op::Check { addr, len }]);
        }
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

    /// fill, drop some of the pages, check: DONTNEED and FREE, and with the `advice` family REMOVE,
    /// DONTNEED_LOCKED, COLD and PAGEOUT (which becomes COLD once pages may be lazily free: module docs).
    /// After FREE, now and then a write to part of the range first (a written page is no longer free).
    fn drop_pages(&mut self, b: u8) -> Vec<Op> {
        let (mut v, p, n) = self.filled_source(b);
        let (sp, sn) = if self.rng.random_bool(0.5) { (p, n) } else { self.sub_pages(p, n) };
        let (addr, len) = (self.addr(sp), sn * PAGE);
        // FREE, whose pages keep their bytes until written or reclaimed, more often than the others.
        let mut advice = vec![Advice::DONTNEED, Advice::DONTNEED, Advice::FREE, Advice::FREE, Advice::FREE];
        if self.cfg.families.advice {
            advice.extend([Advice::REMOVE, Advice::DONTNEED_LOCKED, Advice::COLD, Advice::PAGEOUT]);
        }
        let advice = advice[self.rng.random_range(0..advice.len())];
        v.push(Op::Madvise { addr, len, advice });
        if advice == Advice::FREE && self.rng.random_bool(0.5) {
            let (wp, wn) = self.sub_pages(sp, sn);
            let b2 = self.byte();
            v.push(Op::Fill {
                addr: self.addr(wp),
                len: wn * PAGE - self.rng.random_range(0..PAGE),
                byte: b2,
            });
        }
        v.push(Op::Check { addr: self.addr(p), len: n * PAGE });
        v
    }

    /// fill, then mremap and check the new and the old place: a move (`maymove|fixed`, sometimes
    /// `dontunmap`, which leaves the old range mapped and empty), a growth in place, or a growth that moves.
    fn remap_filled(&mut self, b: u8) -> Vec<Op> {
        let (mut v, p, n) = self.filled_source(b);
        let (addr, len) = (self.addr(p), n * PAGE);
        let first = self.grid.get(p as usize).copied().unwrap_or(Slot::Anon);
        let grown = |g: &mut Gen, at: u64, pages: u64| {
            g.set(at, pages, |i| match first {
                Slot::File(f, fp) => Slot::File(f, fp + i),
                _ => Slot::Anon,
            })
        };
        let shape = self.rng.random_range(0..5);
        let (new_len, flags, new_addr) = match shape {
            0 | 1 => {
                let mut flags = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                if self.rng.random_bool(0.5) {
                    flags |= MremapFlags::DONTUNMAP;
                }
                (len, flags, Some(self.map_page(n)))
            }
            2 | 3 => (len + self.rng.random_range(1..=3) * PAGE, MremapFlags::empty(), None),
            _ => {
                let grow = self.rng.random_range(1..=3);
                (len + grow * PAGE, MremapFlags::MAYMOVE | MremapFlags::FIXED, Some(self.map_page(n + grow)))
            }
        };
        let new_pages = new_len / PAGE;
        let check_at = match new_addr {
            Some(dst) => {
                if !flags.contains(MremapFlags::DONTUNMAP) {
                    self.set(p, n, |_| Slot::Free);
                }
                grown(self, dst, new_pages);
                self.addr(dst)
            }
            None => {
                grown(self, p, new_pages);
                addr
            }
        };
        v.extend([
            Op::Mremap { addr, old_len: len, new_len, flags, new_addr: new_addr.map(|d| self.addr(d)) },
            Op::Check { addr: check_at, len: new_len },
        ]);
        if new_addr.is_some() {
            v.push(Op::Check { addr, len });
        }
        v
    }

    /// fill, WIPEONFORK / KEEPONFORK / DONTFORK / DOFORK, `fork` (with [`GenConfig::fork`]), check in the
    /// child: zeros, the bytes, or no mapping.
    fn fork_advice(&mut self, b: u8) -> Vec<Op> {
        let (mut v, p, n) = self.filled_source(b);
        let (sp, sn) = if self.rng.random_bool(0.5) { (p, n) } else { self.sub_pages(p, n) };
        let advice = [Advice::WIPEONFORK, Advice::DONTFORK, Advice::KEEPONFORK, Advice::DOFORK]
            [self.rng.random_range(0..4)];
        v.push(Op::Madvise { addr: self.addr(sp), len: sn * PAGE, advice });
        if self.cfg.fork {
            v.push(Op::Fork);
        }
        v.push(Op::Check { addr: self.addr(p), len: n * PAGE });
        v
    }

    /// A mapping of a file (shared mostly) filled; with the `ftruncate` family the file is then shrunk to
    /// inside the range (pages wholly beyond the end are SIGBUS; the shrunk page's tail reads zeros), checked,
    /// written beyond the end (SIGBUS), grown back to at least its old size, checked; else fill and check.
    fn truncate_cycle(&mut self, b: u8) -> Vec<Op> {
        let fi = self.rng.random_range(0..self.files.len());
        let (name, file_pages) = self.files[fi].clone();
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
            let big = (file_pages.max(n) + self.rng.random_range(0..3)) * PAGE;
            self.files[fi].1 = big / PAGE;
            let b2 = self.byte();
            v.extend([
                Op::Ftruncate { name: name.clone(), size: small },
                Op::Check { addr, len },
                Op::Fill { addr: addr + small, len: len - small, byte: b2 },
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
        let below = self.rng.random_range(1..=3u64);
        self.set(p - below, n + below, |_| Slot::Anon);
        let addr = self.addr(p);
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

    /// fill, mprotect part of the range read-only (or `r-x`, `---`), fill again (SIGSEGV at the first page
    /// it cannot write, the pages before it written), check, mprotect back to `rw-`, fill part, check.
    fn protect_then_write(&mut self, b: u8) -> Vec<Op> {
        let (mut v, p, n) = self.filled_source(b);
        let (sp, sn) = self.sub_pages(p, n);
        self.reshape(sp, sn);
        let prot = [Prot::R, Prot::R, Prot::RX, Prot::NONE][self.rng.random_range(0..4)];
        let (addr, len) = (self.addr(p), n * PAGE);
        let (b2, b3) = (self.byte(), self.byte());
        let (wa, wl) = self.access_range();
        v.extend([
            Op::Mprotect { addr: self.addr(sp), len: sn * PAGE, prot },
            Op::Fill { addr, len, byte: b2 },
            Op::Check { addr, len },
            Op::Mprotect { addr: self.addr(sp), len: sn * PAGE, prot: Prot::RW },
            Op::Fill { addr: wa, len: wl, byte: b3 },
            Op::Check { addr, len },
        ]);
        v
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
        let op = self.draw();
        self.no_pageout_of_lazily_free(op)
    }

    /// The reclaim rule of the `contents` family (module docs, "Page contents"): once a call may have left
    /// lazily freeable pages, PAGEOUT becomes COLD while the family is on. It draws nothing, and changes
    /// nothing with the family off.
    fn no_pageout_of_lazily_free(&mut self, op: Op) -> Op {
        match op {
            Op::Madvise { addr, len, advice }
                if advice == Advice::PAGEOUT && self.lazy_free && self.cfg.families.contents =>
            {
                Op::Madvise { addr, len, advice: Advice::COLD }
            }
            Op::Madvise { advice, .. } if advice == Advice::FREE => {
                self.lazy_free = true;
                op
            }
            Op::Mmap { flags, .. } if flags & MapFlags::TYPE == MapFlags::DROPPABLE => {
                self.lazy_free = true;
                op
            }
            op => op,
        }
    }

    fn draw(&mut self) -> Op {
        if let Some(op) = self.pending.pop_front() {
            return op;
        }
        // The `contents` scenarios draw apart from the other families (and only when on: with it off the
        // draws are those of the generator before it existed). A single fill or check takes edge values as
        // the other calls do; a scenario keeps its ranges.
        if self.cfg.families.contents && self.rng.random_bool(0.07) {
            let op = self.contents_call();
            let edge = self.pending.is_empty() && self.cfg.families.edges && self.rng.random_bool(0.06);
            return if edge { self.edge(op) } else { op };
        }
        // The `proc` family draws apart too, and only when on.
        if self.cfg.families.proc && self.rng.random_bool(0.06) {
            return self.proc_call();
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
                        // A file mapping of a descriptor that is not open: a name of no file, -1, or no
                        // `fd=` at all (fd -1, offset 0).
                        flags -= MapFlags::ANONYMOUS;
                        let off = file.map_or(0, |(_, o)| o);
                        file = match self.rng.random_range(0..3) {
                            0 => Some((Fd::Name("missing".into()), off)),
                            1 => Some((Fd::MinusOne, off)),
                            _ => None,
                        };
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
        lazy_free: false,
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

    /// Every generated op prints as one script line that parses back to the same op, and that line is a fixed
    /// point of print + parse: a call recorded from any source (a generated call, a decoded system call) is
    /// the line a script would hold. Over the differential gate's configurations, many seeds each.
    #[test]
    fn every_generated_op_prints_as_a_line_that_parses_back() {
        let cfgs = [
            GenConfig::default(),
            GenConfig { fork: true, calls: 60, ..GenConfig::default() },
            GenConfig { grid_pages: 16, calls: 200, ..GenConfig::default() },
            base(),
        ];
        let mut ops = 0;
        for cfg in &cfgs {
            for seed in 0..400 {
                for l in generate(seed, cfg).lines {
                    let line = l.op.to_string();
                    let back: Op = line.parse().unwrap_or_else(|e| panic!("seed {seed}: {line:?}: {e}"));
                    assert_eq!(back, l.op, "seed {seed}: {line:?}");
                    assert_eq!(back.to_string(), line, "seed {seed}");
                    ops += 1;
                }
            }
        }
        assert!(ops > 100_000, "{ops}");
        // A line holds one op.
        assert!("".parse::<Op>().is_err());
        assert!("fork\nfork".parse::<Op>().is_err());
        assert_eq!("fork # a comment".parse::<Op>().unwrap(), Op::Fork);
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
            "file mapping without fd=",
            &|o| matches!(o, Op::Mmap { flags, file: None, .. } if !flags.contains(MapFlags::ANONYMOUS)),
        );
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

    /// The scripts of seeds `0..40` of `cfg`, without their `maps` ops.
    fn call_lists(cfg: &GenConfig) -> Vec<Vec<Op>> {
        (0..40)
            .map(|seed| {
                generate(seed, cfg).lines.into_iter().map(|l| l.op).filter(|o| *o != Op::Maps).collect()
            })
            .collect()
    }

    /// The `proc` family (module docs, "The `/proc` readers"): smaps of the arena and of one VMA, queries with
    /// every flag, odd sizes and short name buffers (never with `covering_or_next`), and smaps after each of
    /// the page-changing calls.
    #[test]
    fn proc_calls_are_generated() {
        let cfg = GenConfig { calls: 200, fork: true, ..GenConfig::default() };
        let scripts = call_lists(&cfg);
        let all: Vec<&Op> = scripts.iter().flatten().collect();
        assert!(all.iter().any(|o| matches!(o, Op::Smaps { addr: None })));
        assert!(all.iter().any(|o| matches!(o, Op::Smaps { addr: Some(_) })));
        for bit in [1, 2, 4, 8, 0x10, 0x20] {
            assert!(all.iter().any(|o| matches!(o, Op::Query { flags, .. } if flags & bit != 0)), "{bit:#x}");
        }
        assert!(all.iter().any(|o| matches!(o, Op::Query { flags, .. } if *flags >= 0x40)));
        assert!(all.iter().any(|o| matches!(o, Op::Query { size, .. } if *size != 104)));
        for o in &all {
            if let Op::Query { flags, size, name, .. } = o {
                assert!(*name == 4096 || flags & 0x10 == 0, "{o}");
                assert!(!(89..96).contains(size), "{o}");
            }
        }
        let before_smaps = |f: &dyn Fn(&Op) -> bool| {
            scripts.iter().any(|s| s.windows(2).any(|w| f(&w[0]) && matches!(w[1], Op::Smaps { .. })))
        };
        assert!(before_smaps(&|o| matches!(o, Op::Madvise { advice: Advice::DONTNEED, .. })));
        assert!(before_smaps(&|o| matches!(o, Op::Madvise { advice: Advice::FREE, .. })));
        assert!(before_smaps(&|o| matches!(o, Op::Mlock { .. })));
        assert!(before_smaps(&|o| matches!(o, Op::Fork)));
        assert!(before_smaps(&|o| matches!(o, Op::Touch { write: false, .. })));
    }

    /// The `contents` scenarios (module docs, "Page contents") all appear, as consecutive calls.
    #[test]
    fn contents_scenarios_are_generated() {
        // The `proc` family's draws would move the scenarios to other seeds: the family is off here.
        let families = Families { proc: false, ..Families::ALL };
        let cfg = GenConfig { calls: 200, fork: true, families, ..GenConfig::default() };
        let scripts = call_lists(&cfg);
        let has = |what: &str, n: usize, f: &dyn Fn(&[Op]) -> bool| {
            assert!(scripts.iter().any(|s| s.windows(n).any(f)), "never generated: {what}");
        };
        has("fresh mapping, fill", 2, &|w| {
            matches!(w, [Op::Mmap { addr, len, prot: Prot::RW, flags, .. }, Op::Fill { addr: a, len: l, .. }]
                if flags.contains(MapFlags::FIXED) && (addr, len) == (a, l))
        });
        has("fill, fork, check, fill, check", 5, &|w| {
            matches!(w, [Op::Fill { addr, .. }, Op::Fork, Op::Check { addr: c, .. }, Op::Fill { .. }, Op::Check { .. }]
                if addr == c)
        });
        has(
            "a second fork and check",
            3,
            &|w| matches!(w, [Op::Check { addr, .. }, Op::Fork, Op::Check { addr: c, .. }] if addr == c),
        );
        has("shared and private mappings of one file", 4, &|w| {
            matches!(w, [Op::Mmap { flags: f1, file: Some((x, o1)), .. }, Op::Mmap { flags: f2, file: Some((y, o2)), .. }, Op::Fill { .. }, Op::Check { .. }]
                if f1.contains(MapFlags::SHARED) && f2.contains(MapFlags::PRIVATE) && x == y && o1 == o2)
        });
        for advice in [
            Advice::DONTNEED,
            Advice::FREE,
            Advice::REMOVE,
            Advice::DONTNEED_LOCKED,
            Advice::COLD,
            Advice::PAGEOUT,
        ] {
            has(
                &format!("fill, {advice:?}, check"),
                3,
                &|w| matches!(w, [Op::Fill { .. }, Op::Madvise { advice: a, .. }, Op::Check { .. }] if *a == advice),
            );
        }
        has("fill, free, fill, check", 4, &|w| {
            matches!(
                w,
                [
                    Op::Fill { .. },
                    Op::Madvise { advice: Advice::FREE, .. },
                    Op::Fill { .. },
                    Op::Check { .. }
                ]
            )
        });
        let remap = |w: &[Op], f: &dyn Fn(u64, u64, MremapFlags) -> bool| matches!(w, [Op::Fill { .. }, Op::Mremap { old_len, new_len, flags, .. }, Op::Check { .. }] if f(*old_len, *new_len, *flags));
        has("mremap move", 3, &|w| {
            remap(w, &|o, n, f| o == n && f == MremapFlags::MAYMOVE | MremapFlags::FIXED)
        });
        has("mremap move with dontunmap", 3, &|w| remap(w, &|_, _, f| f.contains(MremapFlags::DONTUNMAP)));
        has("mremap growth in place", 3, &|w| remap(w, &|o, n, f| n > o && f.is_empty()));
        has("mremap growth that moves", 3, &|w| remap(w, &|o, n, f| n > o && f.contains(MremapFlags::FIXED)));
        for advice in [Advice::WIPEONFORK, Advice::DONTFORK, Advice::KEEPONFORK, Advice::DOFORK] {
            has(
                &format!("fill, {advice:?}, fork, check"),
                4,
                &|w| matches!(w, [Op::Fill { .. }, Op::Madvise { advice: a, .. }, Op::Fork, Op::Check { .. }] if *a == advice),
            );
        }
        has("ftruncate shrinking, check, write beyond the end, growing back", 4, &|w| {
            matches!(w, [Op::Ftruncate { size: a, .. }, Op::Check { .. }, Op::Fill { .. }, Op::Ftruncate { size: b, .. }]
                if a < b)
        });
        has("touch below a growsdown mapping", 4, &|w| {
            matches!(w, [Op::Mmap { addr, flags, .. }, Op::Touch { addr: t, .. }, Op::Fill { .. }, Op::Check { addr: c, .. }]
                if flags.contains(MapFlags::GROWSDOWN) && t < addr && t == c)
        });
        for prot in [Prot::R, Prot::RX, Prot::NONE] {
            has(&format!("mprotect {prot:?}, fill, check, mprotect rw-"), 4, &|w| {
                matches!(w, [Op::Mprotect { prot: p, .. }, Op::Fill { .. }, Op::Check { .. }, Op::Mprotect { prot: Prot::RW, .. }]
                    if *p == prot)
            });
        }
        has(
            "fill, touch w, check",
            3,
            &|w| matches!(w, [Op::Fill { addr, .. }, Op::Touch { addr: t, write: true, .. }, Op::Check { addr: c, .. }] if addr == t && t == c),
        );
        has(
            "a fill at an edge address",
            1,
            &|w| matches!(w, [Op::Fill { addr, .. } | Op::Check { addr, .. }] if !Arena::default().contains(*addr)),
        );
        // Without fork, no scenario forks.
        let nofork = GenConfig { fork: false, ..cfg };
        assert!(!call_lists(&nofork).iter().flatten().any(|o| *o == Op::Fork));
    }

    /// Each seed's script has the family's calls, parses back, and is the same script every time; the family
    /// takes a minority of the calls.
    #[test]
    fn contents_scripts_per_seed() {
        for fork in [false, true] {
            let cfg = GenConfig { calls: 200, fork, ..GenConfig::default() };
            let (mut calls, mut contents) = (0, 0);
            for seed in 0..100 {
                let s = generate(seed, &cfg);
                assert_eq!(s, generate(seed, &cfg), "seed {seed}");
                assert_eq!(Script::parse(&s.to_text()).unwrap(), s, "seed {seed}");
                let ops: Vec<&Op> = s
                    .lines
                    .iter()
                    .map(|l| &l.op)
                    .filter(|o| !matches!(o, Op::File { .. } | Op::Maps))
                    .collect();
                let n = ops.iter().filter(|o| matches!(o, Op::Fill { .. } | Op::Check { .. })).count();
                assert!(n > 0, "seed {seed}: no fill or check");
                assert!(ops.iter().any(|o| matches!(o, Op::Check { .. })), "seed {seed}: no check");
                calls += ops.len();
                contents += n;
            }
            let share = contents * 100 / calls;
            assert!((5..=20).contains(&share), "fill and check are {share}% of the calls");
        }
        // Switching the family off changes nothing else: the same seed's draws are those of a generator
        // without it (the other families' tests pin that generator).
        let off = Families { contents: false, ..Families::ALL };
        let a = generate(9, &GenConfig { families: off, ..GenConfig::default() });
        assert!(!a.lines.iter().any(|l| matches!(l.op, Op::Fill { .. } | Op::Check { .. })));
    }

    /// The reclaim rule (module docs, "Page contents"): with the family on, no PAGEOUT after a call that may
    /// have left lazily freeable pages; with it off the advice is left alone.
    #[test]
    fn no_pageout_once_pages_may_be_lazily_free() {
        let lazy = |o: &Op| {
            matches!(o, Op::Madvise { advice: Advice::FREE, .. })
                || matches!(o, Op::Mmap { flags, .. } if *flags & MapFlags::TYPE == MapFlags::DROPPABLE)
        };
        let pageout = |o: &Op| matches!(o, Op::Madvise { advice: Advice::PAGEOUT, .. });
        let cfg = GenConfig { calls: 200, ..GenConfig::default() };
        let (mut before, mut seen_lazy) = (0, 0);
        for s in call_lists(&cfg) {
            let first = s.iter().position(lazy);
            if let Some(i) = first {
                seen_lazy += 1;
                assert!(!s[i..].iter().any(pageout), "PAGEOUT after {}", s[i]);
            }
            before += s[..first.unwrap_or(s.len())].iter().filter(|o| pageout(o)).count();
        }
        assert!(
            seen_lazy > 0 && before > 0,
            "{seen_lazy} scripts with lazily free pages, {before} PAGEOUTs before"
        );
        // Without the family, PAGEOUT after FREE stays (the generator's draws do not change).
        let off = GenConfig { families: Families { contents: false, ..Families::ALL }, ..cfg };
        assert!(
            call_lists(&off)
                .iter()
                .any(|s| s.iter().position(lazy).is_some_and(|i| s[i..].iter().any(pageout)))
        );
    }

    /// Each switch removes its family and nothing else changes kind.
    #[test]
    fn each_switch_removes_its_family() {
        type Check = fn(&Op) -> bool;
        let checks: [(&str, Check); 12] = [
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
            ("proc", |o| matches!(o, Op::Smaps { .. } | Op::Query { .. })),
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
