//! The `/proc/PID` readers of the engine: `maps`, `smaps`, `smaps_rollup` and `PROCMAP_QUERY`, rendered
//! byte-identical to Linux 6.18 (`fs/proc/task_mmu.c`) through the `proc` crate's formats.
//!
//! # The handle
//!
//! [`Mm::reader`] hands out a [`ProcReader`]: a borrowed, `Send + Sync` handle that any thread may use while
//! other threads map, unmap, fault and fork in the same address space, as a process reading `/proc/PID/smaps`
//! of another does. What a reader sees of concurrent changes depends on its [`ReaderMode`], the locking
//! discipline of one kernel reader:
//!
//! - [`ReaderMode::MmapLock`] (6.18's `smaps` and `smaps_rollup`, and `maps` before the per-VMA series): the
//!   mmap read lock is taken for every *chunk* of the output and dropped between chunks (`m_start` /
//!   `m_stop` of the seq_file, [`ProcFile`]), and the next chunk looks the next VMA up from the previous
//!   record's end (`proc_get_vma`'s `last_addr`), so a VMA that changed between chunks is seen as it is when
//!   its own chunk is read, never torn. `smaps_rollup` holds the lock across its walk (`show_smaps_rollup`)
//!   but drops and retakes it when a writer waits (`mmap_lock_is_contended`), resuming after the last VMA
//!   summed. A `PROCMAP_QUERY` holds it for one lookup.
//! - [`ReaderMode::PerVma`] (6.18's `maps` and `PROCMAP_QUERY` with `CONFIG_PER_VMA_LOCK`,
//!   `lock_next_vma`): each VMA is found under RCU and read-locked on its own (`vma_start_read`); when that
//!   fails (a writer holds the VMA) the reader falls back to the mmap read lock for that one step
//!   (`lock_next_vma`'s fallback). A chunk's VMAs are stepped to by one tree cursor inside one RCU read-side
//!   section, as 6.18's `lock_vma_range` and `priv->iter` do ([`crate::walk_vmas_locked`]). The mm-wide values a record reads besides its VMA (the break, for
//!   `[heap]`) are read racily, as the kernel reads them: a reader holding a VMA lock never waits for the
//!   mmap lock, whose writer may be waiting in `vma_start_write` for that VMA's readers. `smaps_rollup` walks
//!   the same way, each VMA under its own lock (the per-VMA-lock series' `show_smaps_rollup`; 6.18's still
//!   holds the mmap lock).
//! - [`ReaderMode::Lockless`] (the engine's own, docs/DIVERGENCES.md): the reader takes no lock a writer
//!   waits for, and no writer waits for it. Each step of a walk copies the next VMA's fields under RCU and
//!   validates the copy by sequence counts, retrying while a writer changes that VMA
//!   ([`crate::next_vma_lockless`], whose module `vma::lockless` gives the protocol, its orderings and
//!   why an accepted copy is one state of the VMA; the tree is re-checked so that no false gap is shown;
//!   a chunk steps with one cursor, [`crate::walk_vmas_lockless`]); the
//!   page table is walked under RCU with racy entry and mapcount reads
//!   (`PageTable::smaps_range_lockless`: tables and frames are freed a grace period after they are
//!   unlinked, and no writer waits for a grace period). A record may thus count pages from before and after a
//!   concurrent change, but its maps line is one state of its VMA.
//!
//! Every record function works on a copy of the VMA's fields ([`VmaSnapshot`]) taken as the mode holds the
//! VMA: under the lock for the locking modes (which stay held while the record's page walk runs), validated for
//! the lockless one. [`ReaderMode::ALL`], [`ReaderMode::name`] and its [`FromStr`] let tools iterate and name
//! the modes (`mmap-lock`, `per-vma`, `lockless`).
//!
//! # Chunked reads
//!
//! [`ProcReader::open`] gives a [`ProcFile`], `maps` or `smaps` as `read(2)` sees them: a page-sized buffer
//! of whole records per chunk, handed out in pieces of any size, each new chunk a new walk from `last_pos`
//! under the mode's lock (see [`ProcFile`]). [`ProcReader::maps`] and [`ProcReader::smaps`] read one to its
//! end. A test hook ([`ProcReader::with_record_hook`]) runs inside every record while the mode holds the VMA.
//!
//! The promises every mode keeps under concurrent writers: no torn line, no false gap in memory that stays
//! mapped, a VMA shown at most twice (before and after a change); `vmspace_bench::race` runs the proc-maps-race
//! scenarios that check them.
//!
//! # Records
//!
//! Each output is built from per-VMA record functions ([`ProcReader::smaps_record`] and the maps line), so that
//! chunked `read(2)` rendering stops and resumes between records. A record of `smaps` (`show_smap`):
//! the maps line; `Size`; `KernelPageSize` and `MMUPageSize` (the huge page size for hugetlb VMAs, else 4
//! kB); the counters of `smap_gather_stats` (the page walk, `vmspace_pgtable`'s `smaps_range`: Rss without
//! the zero page, Pss divided by each page's mapcount, Private/Shared by mapcount, Referenced from the
//! accessed bits, Anonymous, LazyFree, Locked = Pss of a `VM_LOCKED` VMA); hugetlb VMAs count their huge
//! pages as `Shared_Hugetlb` or `Private_Hugetlb` instead (`smaps_hugetlb_range`); `THPeligible`
//! (`thp_vma_allowable_orders(vma, vm_flags, TVA_SMAPS, THP_ORDERS_ALL)`); `ProtectionKey` when the CPU has
//! protection keys (`arch_pkeys_enabled`); `VmFlags`. `smaps_rollup` sums the counters of every VMA under
//! one header `first start-last end ---p 00000000 00:00 0 [rollup]`.
//!
//! `PROCMAP_QUERY` (`do_procmap_query`): the request's checks ([`QueryRequest::validate`]), the lookup
//! (`query_matching_vma`: the first VMA ending above the address, skipped while it fails the permission or
//! file filters with `COVERING_OR_NEXT_VMA`, else ENOENT), then the answer: range, permission flags
//! (`VM_MAYSHARE` for shared), the page size, the file offset, device and inode, and the maps name when a
//! name buffer was given (ENAMETOOLONG when it does not fit). Build IDs: the engine's files are not ELF
//! objects, so `build_id_parse` fails and the answer's build ID size is 0, as the kernel answers for such
//! files.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use vmspace_proc::query::{
    PROCMAP_QUERY_VMA_EXECUTABLE, PROCMAP_QUERY_VMA_READABLE, PROCMAP_QUERY_VMA_SHARED,
    PROCMAP_QUERY_VMA_WRITABLE,
};
use vmspace_proc::{
    MapsLine, MemStatsAccumulator, QueryAnswer, QueryArgs, QueryRequest, SmapsRecord, SmapsRollup,
    VmFlagsLine,
};

use super::config::{PAGE_SHIFT, PAGE_SIZE};
use super::maps::{file_columns, maps_columns_of, maps_line_of, maps_name_of};
use super::{Errno, FileKind, Mm, ThpMode, VmFile, VmFlags, VmaSnapshot};
use crate::vma::lockless::{VmaCopy, VmaCore, next_copy_lockless_with, vma_copy};
use crate::vma::{MmLocking, next_vma_lockless, walk_vmas_locked, walk_vmas_lockless};

/// `HPAGE_PMD_ORDER` on x86-64.
const PMD_ORDER: u32 = 9;
/// The highest page-cache order (`MAX_PAGECACHE_ORDER` on x86-64 with 4 KiB pages: the PMD order).
const MAX_PAGECACHE_ORDER: u32 = PMD_ORDER;
/// `THP_ORDERS_ALL_ANON`: every order from 2 to the PMD order (order 1 is never used for anonymous memory).
const THP_ORDERS_ALL_ANON: u64 = ((1 << (PMD_ORDER + 1)) - 1) & !((1 << 0) | (1 << 1));
/// `THP_ORDERS_ALL_FILE_DEFAULT`: every order from 1 to `MAX_PAGECACHE_ORDER`.
const THP_ORDERS_ALL_FILE_DEFAULT: u64 = ((1 << (MAX_PAGECACHE_ORDER + 1)) - 1) & !1;

/// The size of a chunk's buffer (`seq_file`'s first buffer: one page), which a chunk of records fills.
pub const SEQ_BUF_SIZE: usize = PAGE_SIZE as usize;

/// How a [`ProcReader`] synchronises with writers (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReaderMode {
    /// The mmap read lock per output chunk (`m_start` .. `m_stop`), across the walk for `smaps_rollup`
    /// (dropped and taken again when a writer waits).
    #[default]
    MmapLock,
    /// Each VMA under its own read lock (`lock_next_vma`), falling back to the mmap read lock.
    PerVma,
    /// No lock: VMA copies under RCU validated by sequence counts, page tables walked under RCU
    /// (`vma::lockless`).
    Lockless,
}

impl ReaderMode {
    /// Every mode, in the order above.
    pub const ALL: [ReaderMode; 3] = [ReaderMode::MmapLock, ReaderMode::PerVma, ReaderMode::Lockless];

    /// The mode's name: `mmap-lock`, `per-vma` or `lockless` (what [`FromStr`] parses).
    pub fn name(self) -> &'static str {
        match self {
            ReaderMode::MmapLock => "mmap-lock",
            ReaderMode::PerVma => "per-vma",
            ReaderMode::Lockless => "lockless",
        }
    }
}

impl fmt::Display for ReaderMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReaderMode {
    type Err = String;

    /// A mode by its [`ReaderMode::name`] (`mmap_lock` and `per_vma` are accepted too).
    fn from_str(s: &str) -> Result<Self, String> {
        let norm = s.replace('_', "-");
        ReaderMode::ALL.into_iter().find(|m| m.name() == norm).ok_or_else(|| {
            let names: Vec<&str> = ReaderMode::ALL.iter().map(|m| m.name()).collect();
            format!("unknown reader mode {s:?} (expected one of: {})", names.join(", "))
        })
    }
}

/// A test hook called with each VMA a reader is about to render, while the reader holds it as its mode holds
/// it (the mmap read lock, the VMA read lock, or in lockless mode nothing but an RCU read-side section): tests
/// pause a reader inside a record with it ([`ProcReader::with_record_hook`]).
pub type RecordHook<'h> = dyn Fn(&VmaSnapshot) + Sync + 'h;

/// A `/proc/PID` reader of one address space (module docs). `Send + Sync`: it borrows the [`Mm`], which
/// threads share.
#[derive(Clone, Copy)]
pub struct ProcReader<'a> {
    mm: &'a Mm,
    mode: ReaderMode,
    hook: Option<&'a RecordHook<'a>>,
}

impl Mm {
    /// A reader in the mmap-lock mode (`smaps` and `smaps_rollup` as 6.18 reads them).
    pub fn reader(&self) -> ProcReader<'_> {
        self.reader_with(ReaderMode::MmapLock)
    }

    /// A reader in `mode`.
    pub fn reader_with(&self, mode: ReaderMode) -> ProcReader<'_> {
        ProcReader { mm: self, mode, hook: None }
    }
}

/// One VMA as a record renders it: a copy of its fields taken as the mode holds it, the break values the
/// `[heap]` name depends on, and how the page walk may run (under PTE locks while the caller holds the VMA,
/// or under RCU alone).
struct Rec<'v> {
    /// Borrowed from where the mode copied it: a record is passed on by reference, never moved (a copy of
    /// the 80-byte snapshot per move, read back at once, stalls on store forwarding).
    v: &'v VmaSnapshot,
    start_brk: u64,
    brk: u64,
    lockless: bool,
}

/// What one step of a walk may do next.
enum Step {
    /// Render this record, then continue from its end.
    Go,
    /// Stop before this record (it is not shown; the walk resumes at it later).
    Stop,
}

impl<'a> ProcReader<'a> {
    /// The mode.
    pub fn mode(&self) -> ReaderMode {
        self.mode
    }

    /// The same reader calling `hook` inside every record (a test hook: [`RecordHook`]).
    pub fn with_record_hook(self, hook: &'a RecordHook<'a>) -> ProcReader<'a> {
        ProcReader { hook: Some(hook), ..self }
    }

    fn locking(&self) -> &MmLocking {
        self.mm.locking()
    }

    /// Calls the test hook, if any, on a record's VMA.
    fn hook(&self, r: &Rec) {
        if let Some(h) = self.hook {
            h(r.v);
        }
    }

    /// Runs `f` on the first VMA ending above `from` (`None` past the last), held as the mode holds it for
    /// one step of a walk: the mmap read lock (mmap-lock mode, and per-VMA mode's fallback), the VMA's read
    /// lock (`lock_next_vma`), or a validated copy (`next_vma_lockless`).
    fn with_next<R>(&self, from: u64, f: impl FnOnce(Option<&Rec>) -> R) -> R {
        match self.mode {
            ReaderMode::MmapLock => {}
            ReaderMode::PerVma => {
                let shared = &self.mm.vmas.shared;
                match crate::vma::lock_next_vma(&shared.locking, &**shared, from) {
                    Ok(Some(g)) => {
                        // The break is read racily: a reader holding a VMA lock never takes the mmap lock
                        // (a writer holding it may wait in `vma_start_write` for this VMA's readers).
                        let (start_brk, brk) = self.mm.brk_pair_racy();
                        let v = vma_copy(g.vma());
                        let r = Rec { v: &v, start_brk, brk, lockless: false };
                        self.hook(&r);
                        let out = f(Some(&r));
                        drop(g);
                        return out;
                    }
                    Ok(None) => return f(None),
                    // The VMA could not be read-locked: fall back to the mmap read lock for this step.
                    Err(_) => {}
                }
            }
            ReaderMode::Lockless => {
                let mut retries = 0;
                let shared = &self.mm.vmas.shared;
                let Some(v) = next_vma_lockless(&shared.locking, &shared.tree, from, &mut retries) else {
                    return f(None);
                };
                let (start_brk, brk) = self.mm.brk_pair_racy();
                let r = Rec { v: &v, start_brk, brk, lockless: true };
                // The record is rendered inside an RCU read-side section (the page walk's), which no writer
                // waits for: the hook runs inside one too, to show it.
                let _rcu = vmspace_rcu::pin();
                self.hook(&r);
                return f(Some(&r));
            }
        }
        self.mm.read_locked(|m| {
            let (start_brk, brk) = m.brk_pair();
            // `find_vma` (one descent; the tree is stable under the mmap read lock).
            let guard = vmspace_rcu::pin();
            match self.mm.vmas.shared.tree.find_next_in(from, &guard).map(|(_, _, v)| v) {
                Some(v) => {
                    let v = vma_copy(v);
                    let r = Rec { v: &v, start_brk, brk, lockless: false };
                    self.hook(&r);
                    f(Some(&r))
                }
                None => f(None),
            }
        })
    }

    /// One chunk of a walk (`m_start` .. `m_stop`): from `from`, hands each VMA to `step` until it says
    /// [`Step::Stop`] or the VMAs end. The mmap-lock mode holds the mmap read lock across the chunk; the
    /// others hold each VMA for its own step. Returns the end of the last record shown (the next chunk's
    /// start, `last_pos`) and whether the walk reached the end.
    fn chunk(&self, from: u64, mut step: impl FnMut(&Rec) -> Step) -> (u64, bool) {
        let mut pos = from;
        if self.mode == ReaderMode::MmapLock {
            return self.mm.read_locked(|m| {
                let (start_brk, brk) = m.brk_pair();
                // `m_next`'s `vma_next(&priv->iter)`: one cursor across the chunk. Under the mmap read lock
                // the tree does not change, so each step finds what `find_vma(pos)` would.
                let guard = vmspace_rcu::pin();
                let mut cur = self.mm.vmas.shared.tree.cursor(&guard);
                cur.set(pos);
                loop {
                    let Some((_, _, v)) = cur.find(u64::MAX) else { return (pos, true) };
                    crate::vma::lookup::prefetch_vma(cur.next_slot_hint());
                    let v = vma_copy(v);
                    let r = Rec { v: &v, start_brk, brk, lockless: false };
                    self.hook(&r);
                    match step(&r) {
                        Step::Go => pos = r.v.end,
                        Step::Stop => return (pos, false),
                    }
                }
            });
        }
        if self.mode == ReaderMode::Lockless {
            // One cursor and one read-side section across the chunk's VMAs (`walk_vmas_lockless`).
            let shared = &self.mm.vmas.shared;
            let mut retries = 0;
            return walk_vmas_lockless(&shared.locking, &shared.tree, from, &mut retries, |v| {
                let (start_brk, brk) = self.mm.brk_pair_racy();
                let r = Rec { v, start_brk, brk, lockless: true };
                self.hook(&r);
                matches!(step(&r), Step::Go)
            });
        }
        if self.mode == ReaderMode::PerVma {
            // One cursor and one read-side section across the chunk's VMAs (`walk_vmas_locked`).
            let shared = &self.mm.vmas.shared;
            loop {
                let walked = walk_vmas_locked(&shared.locking, &shared.tree, pos, |g| {
                    let (start_brk, brk) = self.mm.brk_pair_racy();
                    let v = vma_copy(g.vma());
                    let r = Rec { v: &v, start_brk, brk, lockless: false };
                    self.hook(&r);
                    // The VMA stays read-locked while its record is rendered; `g` unlocks it after.
                    matches!(step(&r), Step::Go)
                });
                match walked {
                    Ok(done) => return done,
                    // The VMA at `at` could not be read-locked: one step under the mmap read lock.
                    Err(at) => match self.with_next(at, |r| r.map(|r| (step(r), r.v.end))) {
                        None => return (at, true),
                        Some((Step::Go, end)) => pos = end,
                        Some((Step::Stop, _)) => return (at, false),
                    },
                }
            }
        }
        loop {
            let next = self.with_next(pos, |r| r.map(|r| (step(r), r.v.end)));
            match next {
                None => return (pos, true),
                Some((Step::Go, end)) => pos = end,
                Some((Step::Stop, _)) => return (pos, false),
            }
        }
    }

    /// Opens `/proc/PID/maps` or `smaps` for chunked reading ([`ProcFile`]).
    pub fn open(&self, kind: ProcFileKind) -> ProcFile<'a> {
        let gate = self.mm.config().gate_area.is_some();
        ProcFile { reader: *self, kind, buf: String::new(), out: 0, pos: 0, eof: false, gate, chunks: 0 }
    }

    /// The gate area's record ([`MmConfig::gate_area`](super::MmConfig)): the maps line, or the smaps record
    /// of zeros (`show_smap` of the gate VMA: no page of it is in the address space's page table).
    pub(crate) fn render_gate(&self, kind: ProcFileKind, flags: VmFlags, out: &mut String) {
        let (start, end) = super::config::GATE_AREA;
        let v = VmaSnapshot {
            start,
            end,
            flags,
            pgoff: 0,
            mm_id: 0,
            file: None,
            anon_vma_id: None,
            anon_name: None,
        };
        let mut line = maps_columns_of(&v);
        line.name = Some(vmspace_proc::MapsName::Special("[vsyscall]".into()));
        match kind {
            ProcFileKind::Maps => line.render_into(out),
            ProcFileKind::Smaps => SmapsRecord {
                header: line,
                size_kb: (end - start) >> 10,
                kernel_page_size_kb: PAGE_SIZE >> 10,
                mmu_page_size_kb: PAGE_SIZE >> 10,
                stats: Default::default(),
                thp_eligible: 0,
                protection_key: self.mm.config().pku.then_some(0),
                vm_flags: VmFlagsLine::from_flags(flags),
            }
            .render_into(out),
        }
    }

    /// The maps line of a record.
    fn line_of(&self, r: &Rec) -> MapsLine {
        maps_line_of(r.v, r.start_brk, r.brk, self.mm.config().start_stack)
    }

    /// `/proc/PID/maps`: [`ProcFile`] read to its end.
    pub fn maps(&self) -> String {
        self.open(ProcFileKind::Maps).read_to_string()
    }

    /// `/proc/PID/smaps`: every VMA's record ([`ProcFile`] read to its end).
    pub fn smaps(&self) -> String {
        self.open(ProcFileKind::Smaps).read_to_string()
    }

    /// The smaps records of the VMAs overlapping `[start, end)`, in order.
    pub fn smaps_records(&self, start: u64, end: u64) -> Vec<SmapsRecord> {
        let mut out = Vec::new();
        let mut from = start;
        while from < end {
            let next = self.with_next(from, |r| {
                let r = r?;
                if r.v.start >= end {
                    return None;
                }
                out.push(self.record_of(r));
                Some(r.v.end)
            });
            match next {
                Some(e) => from = e,
                None => break,
            }
        }
        out
    }

    /// The smaps record of the VMA containing `addr`, if any.
    pub fn smaps_record(&self, addr: u64) -> Option<SmapsRecord> {
        self.with_next(addr, |r| {
            let r = r?;
            (r.v.start <= addr).then(|| self.record_of(r))
        })
    }

    /// `/proc/PID/smaps_rollup` (`show_smaps_rollup`): the counters of every VMA summed. An empty address
    /// space prints the range `0-0`.
    ///
    /// - mmap-lock mode (6.18): under the mmap read lock; when a writer waits for it (`mmap_lock_is_contended`)
    ///   after a VMA, the lock is dropped and taken again and the walk resumes at the first VMA ending after the
    ///   last one summed (`last_vma_end`).
    /// - per-VMA mode: the rollup of the per-VMA-lock series ("read proc/pid/smaps_rollup under per-vma
    ///   lock": `show_smaps_rollup` stepping with `proc_get_vma` inside `lock_vma_range`): each VMA read-locked
    ///   on its own as the maps walk does ([`crate::walk_vmas_locked`]), the mmap read lock taken only for a
    ///   step whose VMA cannot be locked, and then only for that step, so no writer waits for the whole walk.
    /// - lockless mode: each VMA a validated copy, its pages walked under RCU.
    pub fn smaps_rollup(&self) -> SmapsRollup {
        let mut acc = MemStatsAccumulator::default();
        let (mut first, mut last) = (None, 0u64);
        let mut add = |r: &Rec, acc: &mut MemStatsAccumulator| {
            first.get_or_insert(r.v.start);
            last = r.v.end;
            self.gather(r, acc);
        };
        if self.mode != ReaderMode::MmapLock {
            // One walk that never stops early (the per-VMA and lockless walks of `chunk`).
            let (_, done) = self.chunk(0, |r| {
                add(r, &mut acc);
                Step::Go
            });
            debug_assert!(done);
        } else {
            let mut from = 0;
            loop {
                // One hold of the mmap read lock; `Some(end)` when it was dropped for a waiting writer.
                let resume = self.mm.read_locked(|m| {
                    let (start_brk, brk) = m.brk_pair();
                    let mut pos = from;
                    while let Some(v) = m.find(pos) {
                        let v = vma_copy(v);
                        let r = Rec { v: &v, start_brk, brk, lockless: false };
                        self.hook(&r);
                        add(&r, &mut acc);
                        pos = r.v.end;
                        if self.locking().is_contended() {
                            return Some(pos);
                        }
                    }
                    None
                });
                match resume {
                    Some(end) => from = end,
                    None => break,
                }
            }
        }
        SmapsRollup { start: first.unwrap_or(0), end: last, stats: acc.finish() }
    }

    /// `smap_gather_stats` for the whole VMA of `r`: the page walk (under PTE locks, or under RCU alone in
    /// lockless mode with mapcounts read racily), or the hugetlb walk (lockless entries).
    fn gather(&self, r: &Rec, acc: &mut MemStatsAccumulator) {
        let v = &r.v;
        let pt = self.mm.pt();
        let locked = v.flags.intersects(VmFlags::LOCKED);
        match huge_size(v) {
            None if r.lockless => pt.smaps_range_lockless(v.start, v.end, locked, acc),
            None => pt.smaps_range(v.start, v.end, locked, acc),
            Some(size) => {
                // `smaps_hugetlb_range`: a huge page present in this VMA (the engine maps its 4 KiB pages one by
                // one: any of them present) counts its whole size, shared when its pages are mapped elsewhere
                // too (`folio_maybe_mapped_shared`).
                let mut block = v.start;
                while block < v.end {
                    let entries = pt.entries(block, (block + size).min(v.end));
                    let mapped: Vec<u32> = entries
                        .iter()
                        .filter(|(_, pte)| pte.is_present() && !pte.is_special())
                        .map(|(_, pte)| self.mm.memory().frame_info(pte.pfn()).map_or(0, |i| i.mapcount))
                        .collect();
                    if !mapped.is_empty() {
                        if mapped.iter().any(|&m| m >= 2) {
                            acc.bytes.shared_hugetlb += size;
                        } else {
                            acc.bytes.private_hugetlb += size;
                        }
                    }
                    block += size;
                }
            }
        }
    }

    /// One smaps record (`show_smap`).
    fn record_of(&self, r: &Rec) -> SmapsRecord {
        let v = &r.v;
        let mut acc = MemStatsAccumulator::default();
        self.gather(r, &mut acc);
        let page_kb = huge_size(v).unwrap_or(PAGE_SIZE) >> 10;
        let cfg = self.mm.config();
        SmapsRecord {
            header: self.line_of(r),
            size_kb: (v.end - v.start) >> 10,
            kernel_page_size_kb: page_kb,
            mmu_page_size_kb: page_kb,
            stats: acc.finish(),
            thp_eligible: u64::from(self.thp_eligible(v)),
            protection_key: cfg.pku.then(|| (v.flags.bits() >> 32) & 0xf),
            vm_flags: VmFlagsLine::from_flags(v.flags),
        }
    }

    /// Renders the record of `r` for `kind` into `out`.
    fn render(&self, kind: ProcFileKind, r: &Rec, out: &mut String) {
        match kind {
            ProcFileKind::Maps => {
                // The name is borrowed from the record's copy: no allocation per line.
                let name = maps_name_of(r.v, r.start_brk, r.brk, self.mm.config().start_stack);
                maps_columns_of(r.v).render_with_name(name, out);
            }
            ProcFileKind::Smaps => self.record_of(r).render_into(out),
        }
    }

    /// `!!thp_vma_allowable_orders(vma, vma->vm_flags, TVA_SMAPS, THP_ORDERS_ALL)` (`include/linux/huge_mm.h`,
    /// `mm/huge_memory.c: __thp_vma_allowable_orders`). The per-size anonymous settings are the kernel's
    /// defaults (the PMD size `inherit`s the global mode, the smaller sizes `never`).
    fn thp_eligible(&self, v: &VmaSnapshot) -> bool {
        let cfg = self.mm.config();
        if !cfg.transparent_hugepage {
            return false;
        }
        let fl = v.flags;
        let anon = v.file.is_none();
        let global_enabled = matches!(cfg.thp_enabled, ThpMode::Always | ThpMode::Madvise);
        let global_always = cfg.thp_enabled == ThpMode::Always;
        let mut orders = if anon {
            // thp_vma_allowable_orders: the sysfs mask of anonymous orders (only the PMD order, `inherit`).
            let inherit = global_always || (fl.intersects(VmFlags::HUGEPAGE) && global_enabled);
            if inherit { THP_ORDERS_ALL_ANON & (1 << PMD_ORDER) } else { 0 }
        } else if fl.intersects(VmFlags::HUGETLB) {
            0
        } else {
            THP_ORDERS_ALL_FILE_DEFAULT
        };
        if orders == 0 {
            return false;
        }
        // vma_thp_disabled: the mm's MMF_DISABLE_THP_COMPLETELY (PR_SET_THP_DISABLE), or VM_NOHUGEPAGE. (6.18's
        // MMF_DISABLE_THP_EXCEPT_ADVISED, `PR_THP_DISABLE_EXCEPT_ADVISED`, is not modelled: `/proc` shows it
        // nowhere, so no import could take it.)
        if cfg.thp_disabled || fl.intersects(VmFlags::NOHUGEPAGE) {
            return false;
        }
        // The size and alignment filter, from the highest order down.
        while orders != 0 {
            let order = 63 - orders.leading_zeros();
            let size = PAGE_SIZE << order;
            if let Some(addr) = v.end.checked_sub(size)
                && thp_vma_suitable_order(v, addr, size, anon)
            {
                break;
            }
            orders &= !(1 << order);
        }
        if orders == 0 {
            return false;
        }
        match &v.file {
            None => true,
            Some(f) if f.kind == FileKind::ShmemZero => {
                // shmem_allowable_huge_orders with the mount's (the global shmem) setting.
                match cfg.thp_shmem_enabled {
                    ThpMode::Always | ThpMode::Force => true,
                    ThpMode::Madvise => fl.intersects(VmFlags::HUGEPAGE),
                    ThpMode::WithinSize => {
                        let end_index = (v.pgoff + ((v.end - v.start) >> PAGE_SHIFT)) << PAGE_SHIFT;
                        f.size.get() >= end_index
                    }
                    ThpMode::Never | ThpMode::Deny => false,
                }
            }
            Some(f) => {
                if !global_enabled || (!fl.intersects(VmFlags::HUGEPAGE) && !global_always) {
                    return false;
                }
                // file_thp_enabled: read-only THP of a regular file nobody has open for writing.
                f.kind == FileKind::Regular && cfg.read_only_thp_for_fs && !f.writable
            }
        }
    }

    /// `PROCMAP_QUERY` (module docs): the answer, or the errno the ioctl fails with (`EINVAL`, `E2BIG`,
    /// `ENOENT`, `ENAMETOOLONG`; `vmspace_proc::query::QueryRequest::validate` lists the argument checks).
    pub fn query(&self, req: &QueryRequest) -> Result<QueryAnswer, Errno> {
        self.query_raw(req).map_err(Errno::from_raw)
    }

    /// [`ProcReader::query`] with the model's raw (positive) errno values.
    fn query_raw(&self, req: &QueryRequest) -> Result<QueryAnswer, i32> {
        if self.hook.is_none() {
            let a = req.args()?;
            if a.vma_name_size == 0 {
                return self.query_lean(&a);
            }
        }
        let k = req.checked()?;
        let mut from = k.addr;
        loop {
            let step = self.with_next(from, |r| {
                let Some(r) = r else { return Err(Err(vmspace_proc::query::errno::ENOENT)) };
                let v = &r.v;
                let perms = perms_of(v.flags);
                let found = k.find([(v.start, v.end, perms, v.file.is_some())]);
                match found {
                    Ok(_) => Err(self.answer(r, &k)),
                    // With COVERING_OR_NEXT a rejected VMA continues the search from its end.
                    Err(_) if k.flags & vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA != 0 => {
                        Ok(v.end)
                    }
                    Err(e) => Err(Err(e)),
                }
            });
            match step {
                Ok(next) => from = next,
                Err(answer) => return answer,
            }
        }
    }

    /// [`ProcReader::query`] without a name buffer (and without a record hook): the same lookup
    /// (`query_matching_vma` over [`ProcReader::core_after`], each mode's `find_vma` / `lock_next_vma`)
    /// on a [`VmaCore`] copy, which reads no name cell and carries no break values.
    fn query_lean(&self, k: &QueryArgs) -> Result<QueryAnswer, i32> {
        let mut from = k.addr;
        loop {
            // The answer, or where the search goes on (`Err(Ok(end))`), or the errno (`Err(Err(e))`).
            let step = self.with_core_after(from, |v| {
                if !k.matches(v.start, v.end, perms_of(v.flags), v.file.is_some()).map_err(Err)? {
                    // With COVERING_OR_NEXT a rejected VMA continues the search from its end.
                    return Err(Ok(v.end));
                }
                let (vma_offset, dev_major, dev_minor, inode) = match &v.file {
                    Some(f) => (v.pgoff << PAGE_SHIFT, f.dev_major, f.dev_minor, f.inode),
                    None => (0, 0, 0, 0),
                };
                let huge = v.flags.intersects(VmFlags::HUGETLB).then(|| v.file.as_ref()?.huge_page_size());
                Ok(QueryAnswer {
                    vma_start: v.start,
                    vma_end: v.end,
                    vma_flags: perms_of(v.flags),
                    vma_page_size: huge.flatten().unwrap_or(PAGE_SIZE),
                    vma_offset,
                    inode,
                    dev_major,
                    dev_minor,
                    name: None,
                })
            });
            match step {
                None => return Err(vmspace_proc::query::errno::ENOENT),
                Some(Ok(answer)) => return Ok(answer),
                Some(Err(Ok(end))) => from = end,
                Some(Err(Err(e))) => return Err(e),
            }
        }
    }

    /// `f` on the first VMA ending above `from` as a [`VmaCore`] (None: there is none), read as the mode
    /// reads one step of a query (`query_vma_find_by_addr`): under the mmap read lock (`find_vma`), under
    /// the VMA's read lock (`lock_next_vma`, with its mmap-lock fallback), or as a validated lockless copy.
    /// The copy is lent to `f`, not returned: it stays where it was made.
    fn with_core_after<R>(&self, from: u64, f: impl FnOnce(&VmaCore) -> R) -> Option<R> {
        let shared = &self.mm.vmas.shared;
        match self.mode {
            ReaderMode::MmapLock => {}
            ReaderMode::PerVma => {
                // An error: the VMA could not be read-locked; fall back to the mmap read lock for this step.
                if let Ok(found) = crate::vma::lock_next_vma(&shared.locking, &**shared, from) {
                    let g = found?;
                    let v = VmaCore::copy(g.vma());
                    return Some(f(&v));
                }
            }
            ReaderMode::Lockless => {
                let mut retries = 0;
                return next_copy_lockless_with(&shared.locking, &shared.tree, from, &mut retries, f);
            }
        }
        let _r = shared.locking.read_lock();
        let guard = vmspace_rcu::pin();
        let (found, next) = shared.tree.find_next_hinted(from, &guard);
        // A walk's next query is likely the next VMA: start loading it.
        crate::vma::lookup::prefetch_vma(next);
        let v = VmaCore::copy(found?.2);
        Some(f(&v))
    }

    /// The answer of a matched VMA: its fields, and its name when the request has a name buffer.
    fn answer(&self, r: &Rec, k: &QueryRequest) -> Result<QueryAnswer, i32> {
        let v = &r.v;
        let (vma_offset, dev_major, dev_minor, inode) = file_columns(v);
        let mut a = QueryAnswer {
            vma_start: v.start,
            vma_end: v.end,
            vma_flags: perms_of(v.flags),
            vma_page_size: huge_size(v).unwrap_or(PAGE_SIZE),
            vma_offset,
            inode,
            dev_major,
            dev_minor,
            name: None,
        };
        if k.vma_name_size != 0 {
            a.name = maps_name_of(v, r.start_brk, r.brk, self.mm.config().start_stack).map(|n| {
                let mut s = String::new();
                n.render_into(&mut s);
                s
            });
            a.name_size(k.vma_name_size)?;
        }
        Ok(a)
    }
}

/// The `PROCMAP_QUERY_VMA_*` bits of `vm_flags`.
fn perms_of(fl: VmFlags) -> u64 {
    let mut p = 0;
    if fl.intersects(VmFlags::READ) {
        p |= PROCMAP_QUERY_VMA_READABLE;
    }
    if fl.intersects(VmFlags::WRITE) {
        p |= PROCMAP_QUERY_VMA_WRITABLE;
    }
    if fl.intersects(VmFlags::EXEC) {
        p |= PROCMAP_QUERY_VMA_EXECUTABLE;
    }
    if fl.intersects(VmFlags::MAYSHARE) {
        p |= PROCMAP_QUERY_VMA_SHARED;
    }
    p
}

/// The huge page size of a hugetlb VMA (`vma_kernel_pagesize`), `None` for others.
fn huge_size(v: &VmaSnapshot) -> Option<u64> {
    if !v.flags.intersects(VmFlags::HUGETLB) {
        return None;
    }
    v.file.as_ref().and_then(|f: &Arc<VmFile>| f.huge_page_size())
}

/// `thp_vma_suitable_order`: a naturally aligned block of `size` bytes around `addr` lies inside the VMA, and
/// for a file VMA the file offset is aligned with it.
fn thp_vma_suitable_order(v: &VmaSnapshot, addr: u64, size: u64, anon: bool) -> bool {
    let pages = size >> PAGE_SHIFT;
    if !anon && !(v.start >> PAGE_SHIFT).wrapping_sub(v.pgoff).is_multiple_of(pages) {
        return false;
    }
    let haddr = addr & !(size - 1);
    haddr >= v.start && haddr.checked_add(size).is_some_and(|e| e <= v.end)
}

/// Which `/proc/PID` file a [`ProcFile`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProcFileKind {
    /// `/proc/PID/maps`: one line per VMA.
    Maps,
    /// `/proc/PID/smaps`: one record per VMA.
    Smaps,
}

/// An open `/proc/PID/maps` or `smaps` read in chunks as `read(2)` sees it (`fs/seq_file.c: seq_read_iter`
/// over `fs/proc/task_mmu.c`'s `m_start` / `m_next` / `m_stop`).
///
/// Each [`ProcFile::read`] first hands out what the buffer still holds. When it is empty, a new chunk is
/// rendered: the walk restarts at `last_pos`, the end of the last record shown (`proc_get_vma`'s
/// `*ppos = vma->vm_end`), takes the mode's lock for the chunk (mmap-lock mode: the mmap read lock from
/// `m_start` to `m_stop`; per-VMA mode: each VMA's own lock; lockless mode: nothing), and renders records
/// into a page-sized buffer until it holds at least as many bytes as the caller asked for, or the next
/// record would not fit in the page (that record is left for the next chunk), or the VMAs end. A first record
/// larger than the page is kept whole (the kernel grows its buffer). A VMA that changes between chunks is
/// therefore seen as it is when its own chunk is rendered; a VMA that grew downwards over `last_pos` is shown
/// again (the "before and after" of the kernel's readers).
pub struct ProcFile<'a> {
    reader: ProcReader<'a>,
    kind: ProcFileKind,
    /// The current chunk's text, its allocation kept from chunk to chunk.
    buf: String,
    /// How many of them were handed out.
    out: usize,
    /// `last_pos`: where the next chunk's walk starts.
    pos: u64,
    /// The walk reached the last VMA (and the gate area's record, if any, was rendered).
    eof: bool,
    /// The gate area's record is still to be rendered.
    gate: bool,
    /// Chunks rendered so far.
    chunks: u64,
}

impl ProcFile<'_> {
    /// `read(2)`: copies up to `dst.len()` bytes of the file into `dst` and returns how many (0 at the end
    /// of the file, or for an empty `dst`).
    pub fn read(&mut self, dst: &mut [u8]) -> usize {
        if dst.is_empty() {
            return 0;
        }
        if self.out == self.buf.len() {
            if self.eof {
                return 0;
            }
            self.fill(dst.len());
        }
        let n = (self.buf.len() - self.out).min(dst.len());
        dst[..n].copy_from_slice(&self.buf.as_bytes()[self.out..self.out + n]);
        self.out += n;
        n
    }

    /// Renders the next chunk (type docs) for a read of `want` bytes.
    fn fill(&mut self, want: usize) {
        // The page (and a line's worth more, which a maps line's renderer reserves) is allocated once.
        let mut text = std::mem::take(&mut self.buf);
        text.clear();
        text.reserve(SEQ_BUF_SIZE + 256);
        let (reader, kind) = (self.reader, self.kind);
        let (pos, eof) = reader.chunk(self.pos, |r| {
            let before = text.len();
            if before != 0 && before >= want {
                return Step::Stop;
            }
            reader.render(kind, r, &mut text);
            if before != 0 && text.len() > SEQ_BUF_SIZE {
                // The record does not fit in the page: it is left for the next chunk.
                text.truncate(before);
                return Step::Stop;
            }
            Step::Go
        });
        self.pos = pos;
        self.eof = eof;
        // After the last VMA, the gate area (`m_next`'s `get_gate_vma`), in this chunk if it fits.
        if eof && self.gate {
            let before = text.len();
            if before == 0 || before < want {
                if let Some(flags) = reader.mm.config().gate_area {
                    reader.render_gate(kind, flags, &mut text);
                }
                if before != 0 && text.len() > SEQ_BUF_SIZE {
                    text.truncate(before);
                } else {
                    self.gate = false;
                }
            }
            self.eof = !self.gate;
        }
        self.buf = text;
        self.out = 0;
        self.chunks += 1;
    }

    /// Reads the rest of the file with page-sized reads.
    pub fn read_to_string(&mut self) -> String {
        let mut all = Vec::new();
        let mut page = vec![0u8; SEQ_BUF_SIZE];
        loop {
            let n = self.read(&mut page);
            if n == 0 {
                break;
            }
            all.extend_from_slice(&page[..n]);
        }
        String::from_utf8(all).expect("the /proc formats are ASCII")
    }

    /// The chunks rendered so far (each one walk restart, one hold of the mode's lock in mmap-lock mode).
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// `last_pos`: the end of the last record rendered (where the next chunk starts).
    pub fn last_pos(&self) -> u64 {
        self.pos
    }
}

impl std::io::Read for ProcFile<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Ok(ProcFile::read(self, buf))
    }
}

// The reader is shared between threads, as `/proc/PID` files are read by other processes.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<ProcReader<'static>>();
};

#[cfg(test)]
mod tests {
    use super::ReaderMode;

    #[test]
    fn mode_names_round_trip() {
        for m in ReaderMode::ALL {
            assert_eq!(m.name().parse::<ReaderMode>(), Ok(m));
        }
        assert_eq!("per_vma".parse::<ReaderMode>(), Ok(ReaderMode::PerVma));
        let e = "rcu".parse::<ReaderMode>().unwrap_err();
        assert!(e.contains("mmap-lock, per-vma"), "{e}");
    }
}
